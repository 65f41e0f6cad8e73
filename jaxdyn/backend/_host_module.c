/* _jaxdyn_host: the Python side of jaxdyn's one-sample kernel calls
 * (jaxdyn.compile_for_latency(..., dispatch="native"); jaxdyn/backend/host_calls.py), a CPython
 * extension module of two functions, so that a call's arguments reach the kernel without
 * ctypes' conversions and numpy's per-argument copies in Python (each a fraction of a
 * microsecond, together as long as the smaller kernels):
 *
 *   make(run, call, inputs, out, out_bytes, format) -> capsule
 *     run: the address of the kernels' library's jaxdyn_host_run; call: its host_call;
 *     inputs: a tuple of (address, shape) per input buffer of the call (shape a tuple of
 *     ints); out: the address of the call's result buffer, out_bytes its size; format: the
 *     element's buffer-protocol format ("d" float64, "f" float32). The buffers are the
 *     caller's (host_calls.HostCall's arrays) and must outlive the capsule.
 *   call(capsule, result, *args) -> int
 *     each of args, an object with the buffer protocol (a numpy array, ...) of the input's
 *     shape and format, C-contiguous, is copied into its buffer; the kernel runs; its result
 *     is copied into result (a writable C-contiguous buffer of out_bytes bytes and the same
 *     format). Returns the kernel's return code (0: done), or -1 where an argument or result
 *     is not of that kind (nothing computed: the caller converts them and calls again).
 *     The copies and the kernel run without the GIL under the capsule's own lock (the
 *     buffers are shared by the callers of one capsule: one call at a time). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <string.h>

#define MAX_INPUTS 4
#define MAX_DIMS 2

typedef int (*host_run)(const void*);

typedef struct {
  host_run run;
  const void* call;
  int n;
  void* in[MAX_INPUTS];
  int ndim[MAX_INPUTS];
  Py_ssize_t shape[MAX_INPUTS][MAX_DIMS];
  Py_ssize_t bytes[MAX_INPUTS];
  void* out;
  Py_ssize_t out_bytes;
  char format;
  pthread_mutex_t lock;
} host;

static const char* CAPSULE = "jaxdyn.host";

static void host_free(PyObject* capsule) {
  host* h = (host*)PyCapsule_GetPointer(capsule, CAPSULE);
  if (h != NULL) {
    pthread_mutex_destroy(&h->lock);
    PyMem_Free(h);
  }
}

static int as_address(PyObject* o, void** p) {
  unsigned long long a = PyLong_AsUnsignedLongLong(o);
  if (a == (unsigned long long)-1 && PyErr_Occurred())
    return 0;
  *p = (void*)(uintptr_t)a;
  return 1;
}

static PyObject* make(PyObject* self, PyObject* args) {
  PyObject *run, *call, *inputs, *out;
  Py_ssize_t out_bytes;
  const char* format;
  (void)self;
  if (!PyArg_ParseTuple(args, "OOO!Ons", &run, &call, &PyTuple_Type, &inputs, &out, &out_bytes,
                        &format))
    return NULL;
  Py_ssize_t n = PyTuple_GET_SIZE(inputs);
  if (n < 1 || n > MAX_INPUTS || strlen(format) != 1) {
    PyErr_SetString(PyExc_ValueError, "make: 1 to 4 inputs and a one-letter format expected");
    return NULL;
  }
  host* h = (host*)PyMem_Calloc(1, sizeof(host));
  if (h == NULL)
    return PyErr_NoMemory();
  void *r = NULL, *c = NULL;
  if (!as_address(run, &r) || !as_address(call, &c) || !as_address(out, &h->out))
    goto fail;
  h->run = (host_run)(uintptr_t)r;
  h->call = c;
  h->n = (int)n;
  h->out_bytes = out_bytes;
  h->format = format[0];
  Py_ssize_t item = h->format == 'd' ? 8 : 4;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* entry = PyTuple_GET_ITEM(inputs, i);
    PyObject *address, *shape;
    if (!PyArg_ParseTuple(entry, "OO!", &address, &PyTuple_Type, &shape) ||
        !as_address(address, &h->in[i]))
      goto fail;
    Py_ssize_t nd = PyTuple_GET_SIZE(shape), count = 1;
    if (nd < 1 || nd > MAX_DIMS) {
      PyErr_SetString(PyExc_ValueError, "make: inputs of 1 or 2 dimensions expected");
      goto fail;
    }
    h->ndim[i] = (int)nd;
    for (Py_ssize_t d = 0; d < nd; ++d) {
      h->shape[i][d] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d));
      if (h->shape[i][d] < 0) {
        if (!PyErr_Occurred())
          PyErr_SetString(PyExc_ValueError, "make: negative dimension");
        goto fail;
      }
      count *= h->shape[i][d];
    }
    h->bytes[i] = count * item;
  }
  if (pthread_mutex_init(&h->lock, NULL) != 0) {
    PyErr_SetString(PyExc_RuntimeError, "make: pthread_mutex_init failed");
    goto fail;
  }
  PyObject* capsule = PyCapsule_New(h, CAPSULE, host_free);
  if (capsule == NULL) {
    pthread_mutex_destroy(&h->lock);
    goto fail;
  }
  return capsule;
fail:
  PyMem_Free(h);
  return NULL;
}

/* whether the view v is of h's format (one letter, or '@' / '=' / '<' before it on a
   little-endian machine) */
static int same_format(const host* h, const Py_buffer* v) {
  const char* f = v->format;
  if (f == NULL)
    return 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (f[0] == '@' || f[0] == '=' || f[0] == '<')
    ++f;
#else
  if (f[0] == '@')
    ++f;
#endif
  return f[0] == h->format && f[1] == 0;
}

static PyObject* call(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs < 2) {
    PyErr_SetString(PyExc_TypeError, "call(capsule, result, *inputs)");
    return NULL;
  }
  host* h = (host*)PyCapsule_GetPointer(args[0], CAPSULE);
  if (h == NULL)
    return NULL;
  Py_buffer views[MAX_INPUTS + 1];
  int got = 0, fast = nargs - 2 == h->n;
  const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
  for (int i = 0; fast && i < h->n; ++i) {
    Py_buffer* v = &views[got];
    if (PyObject_GetBuffer(args[2 + i], v, flags) != 0) {
      PyErr_Clear();
      fast = 0;
      break;
    }
    ++got;
    fast = same_format(h, v) && v->ndim == h->ndim[i] && v->len == h->bytes[i];
    for (int d = 0; fast && d < v->ndim; ++d)
      fast = v->shape[d] == h->shape[i][d];
  }
  if (fast) {
    Py_buffer* v = &views[got];
    if (PyObject_GetBuffer(args[1], v, flags | PyBUF_WRITABLE) != 0) {
      PyErr_Clear();
      fast = 0;
    } else {
      ++got;
      fast = same_format(h, v) && v->len == h->out_bytes;
    }
  }
  int rc = -1;
  if (fast) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&h->lock);
    for (int i = 0; i < h->n; ++i)
      memcpy(h->in[i], views[i].buf, (size_t)h->bytes[i]);
    rc = h->run(h->call);
    if (rc == 0)
      memcpy(views[h->n].buf, h->out, (size_t)h->out_bytes);
    pthread_mutex_unlock(&h->lock);
    Py_END_ALLOW_THREADS
  }
  for (int i = 0; i < got; ++i)
    PyBuffer_Release(&views[i]);
  return PyLong_FromLong(rc);
}

static PyMethodDef methods[] = {
    {"make", make, METH_VARARGS, "make(run, call, inputs, out, out_bytes, format) -> capsule"},
    {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL, "call(capsule, result, *inputs)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jaxdyn_host", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jaxdyn_host(void) { return PyModule_Create(&module); }

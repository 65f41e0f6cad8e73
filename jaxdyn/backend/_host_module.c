/* _jaxdyn_host: the Python side of jaxdyn's one-sample kernel calls
 * (jaxdyn.compile_for_latency(..., dispatch="native"); jaxdyn/backend/host_calls.py), a CPython
 * extension module built against the running Python's and numpy's headers, so that a call's
 * arguments reach the kernel and its result comes back without ctypes' conversions, numpy's
 * per-argument copies in Python or a Python frame (each a fraction of a microsecond, together
 * as long as the smaller kernels).
 *
 * One type, Call, subclassed in Python (jaxdyn.latency.NativeCall); an instance is bound once
 * to a kernel call (its host_call and buffers, jaxdyn/backend/host_calls.py HostCall):
 *
 *   obj._bind(run, call, inputs, out, typenum, result_shape, split, release)
 *     run: the address of the kernels' library's jaxdyn_host_run; call: its host_call;
 *     inputs: a tuple of (address, shape) per input buffer of the call (shape a tuple of 1 or
 *     2 ints); out: the address of the call's result buffer, of result_shape's entries of
 *     numpy's type typenum (NPY_DOUBLE, NPY_FLOAT); split: return the result's first axis as
 *     a tuple of views (the derivatives' three matrices); release: run the kernel with the
 *     GIL released, under the object's own lock (worth its cost for the longer kernels). The
 *     buffers are the caller's and must outlive the object.
 *   obj(*args)
 *     numpy arrays of the inputs' shapes and type, C-contiguous, in native byte order, each
 *     copied into its buffer; the kernel runs; a new array of the result (or the tuple of
 *     split) is returned. Anything else (other arguments, keywords, a kernel's error code) is
 *     obj._call(*args, **kwargs), the Python path, which converts, checks and raises.
 *   obj._into(result, *args) -> int
 *     the same computation into result (a writable C-contiguous array of the result's type
 *     and size); returns the kernel's return code (0: done), or -1 where an argument or the
 *     result is not of that kind (nothing computed). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MAX_INPUTS 4
#define MAX_DIMS 2
#define MAX_RESULT_DIMS 3

typedef int (*host_run)(const void*);

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  int bound, n, typenum, rndim, split, release;
  host_run run;
  const void* call;
  void* in[MAX_INPUTS];
  int ndim[MAX_INPUTS];
  npy_intp shape[MAX_INPUTS][MAX_DIMS];
  size_t bytes[MAX_INPUTS];
  void* out;
  size_t out_bytes;
  npy_intp rshape[MAX_RESULT_DIMS];
  pthread_mutex_t lock;
} CallObject;

static PyObject* slow_name; /* "_call", interned */

static int as_address(PyObject* o, void** p) {
  unsigned long long a = PyLong_AsUnsignedLongLong(o);
  if (a == (unsigned long long)-1 && PyErr_Occurred())
    return 0;
  *p = (void*)(uintptr_t)a;
  return 1;
}

/* whether a is a numpy array of input i's shape and the object's type, C-contiguous, native
   byte order */
static int usable(const CallObject* h, PyObject* a, int i) {
  if (!PyArray_Check(a))
    return 0;
  PyArrayObject* x = (PyArrayObject*)a;
  if (PyArray_TYPE(x) != h->typenum || PyArray_NDIM(x) != h->ndim[i] ||
      !PyArray_IS_C_CONTIGUOUS(x) || !PyArray_ISNOTSWAPPED(x))
    return 0;
  const npy_intp* d = PyArray_DIMS(x);
  for (int k = 0; k < h->ndim[i]; ++k)
    if (d[k] != h->shape[i][k])
      return 0;
  return 1;
}

/* the arguments (checked usable) into the buffers, the kernel, its result into dst */
static int copy_run(const CallObject* h, PyObject* const* args, void* dst) {
  for (int i = 0; i < h->n; ++i)
    memcpy(h->in[i], PyArray_DATA((PyArrayObject*)args[i]), h->bytes[i]);
  const int rc = h->run(h->call);
  if (rc == 0)
    memcpy(dst, h->out, h->out_bytes);
  return rc;
}

/* copy_run, with the GIL released under the object's lock where the object says so, else
   under the GIL alone (one call at a time either way) */
static int compute(CallObject* h, PyObject* const* args, void* dst) {
  if (!h->release)
    return copy_run(h, args, dst);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  pthread_mutex_lock(&h->lock);
  rc = copy_run(h, args, dst);
  pthread_mutex_unlock(&h->lock);
  Py_END_ALLOW_THREADS
  return rc;
}

static PyObject* slow(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  PyObject* f = PyObject_GetAttr(self, slow_name);
  if (f == NULL)
    return NULL;
  PyObject* r = PyObject_Vectorcall(f, args, nargsf, kwnames);
  Py_DECREF(f);
  return r;
}

static PyObject* call_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf,
                                 PyObject* kwnames) {
  CallObject* h = (CallObject*)self;
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (!h->bound || kwnames != NULL || nargs != h->n)
    return slow(self, args, nargsf, kwnames);
  for (int i = 0; i < h->n; ++i)
    if (!usable(h, args[i], i))
      return slow(self, args, nargsf, kwnames);
  PyObject* r = PyArray_SimpleNew(h->rndim, h->rshape, h->typenum);
  if (r == NULL)
    return NULL;
  if (compute(h, args, PyArray_DATA((PyArrayObject*)r)) != 0) {
    Py_DECREF(r); /* the Python path computes again and raises the kernel's error */
    return slow(self, args, nargsf, kwnames);
  }
  if (!h->split)
    return r;
  PyObject* t = PyTuple_New(h->rshape[0]);
  if (t == NULL) {
    Py_DECREF(r);
    return NULL;
  }
  for (Py_ssize_t k = 0; k < h->rshape[0]; ++k) {
    PyObject* e = PySequence_GetItem(r, k);
    if (e == NULL) {
      Py_DECREF(t);
      Py_DECREF(r);
      return NULL;
    }
    PyTuple_SET_ITEM(t, k, e);
  }
  Py_DECREF(r);
  return t;
}

static PyObject* call_into(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  CallObject* h = (CallObject*)self;
  if (!h->bound) {
    PyErr_SetString(PyExc_RuntimeError, "_into: the call is not bound");
    return NULL;
  }
  if (nargs != h->n + 1)
    return PyLong_FromLong(-1);
  for (int i = 0; i < h->n; ++i)
    if (!usable(h, args[1 + i], i))
      return PyLong_FromLong(-1);
  PyObject* res = args[0];
  if (!PyArray_Check(res))
    return PyLong_FromLong(-1);
  PyArrayObject* r = (PyArrayObject*)res;
  if (PyArray_TYPE(r) != h->typenum || !PyArray_IS_C_CONTIGUOUS(r) || !PyArray_ISNOTSWAPPED(r) ||
      !PyArray_ISWRITEABLE(r) || (size_t)PyArray_NBYTES(r) != h->out_bytes)
    return PyLong_FromLong(-1);
  return PyLong_FromLong(compute(h, args + 1, PyArray_DATA(r)));
}

/* the entries of the tuple shape (1 to max of them, none negative) into dims and their
   product into *count; the number of entries, or 0 with an exception set */
static int read_shape(PyObject* shape, int max, npy_intp* dims, size_t* count) {
  const Py_ssize_t nd = PyTuple_GET_SIZE(shape);
  if (nd < 1 || nd > max) {
    PyErr_Format(PyExc_ValueError, "_bind: shapes of 1 to %d dimensions expected", max);
    return 0;
  }
  *count = 1;
  for (Py_ssize_t d = 0; d < nd; ++d) {
    const Py_ssize_t s = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d));
    if (s < 0) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "_bind: negative dimension");
      return 0;
    }
    dims[d] = (npy_intp)s;
    *count *= (size_t)s;
  }
  return (int)nd;
}

static PyObject* call_bind(PyObject* self, PyObject* args) {
  CallObject* h = (CallObject*)self;
  PyObject *run, *call, *inputs, *out, *rshape;
  int typenum, split, release;
  if (!PyArg_ParseTuple(args, "OOO!OiO!pp", &run, &call, &PyTuple_Type, &inputs, &out, &typenum,
                        &PyTuple_Type, &rshape, &split, &release))
    return NULL;
  if (h->bound) {
    PyErr_SetString(PyExc_RuntimeError, "_bind: the call is bound already");
    return NULL;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(inputs);
  if (n < 1 || n > MAX_INPUTS || (typenum != NPY_DOUBLE && typenum != NPY_FLOAT)) {
    PyErr_SetString(PyExc_ValueError, "_bind: 1 to 4 inputs, float32 or float64");
    return NULL;
  }
  void *r = NULL, *c = NULL, *o = NULL;
  if (!as_address(run, &r) || !as_address(call, &c) || !as_address(out, &o))
    return NULL;
  const size_t item = typenum == NPY_DOUBLE ? 8 : 4;
  size_t count;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *address, *shape;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(inputs, i), "OO!", &address, &PyTuple_Type, &shape) ||
        !as_address(address, &h->in[i]) ||
        !(h->ndim[i] = read_shape(shape, MAX_DIMS, h->shape[i], &count)))
      return NULL;
    h->bytes[i] = count * item;
  }
  const int rndim = read_shape(rshape, MAX_RESULT_DIMS, h->rshape, &count);
  if (!rndim)
    return NULL;
  h->run = (host_run)(uintptr_t)r;
  h->call = c;
  h->out = o;
  h->out_bytes = count * item;
  h->n = (int)n;
  h->typenum = typenum;
  h->rndim = (int)rndim;
  h->split = split;
  h->release = release;
  h->bound = 1;
  Py_RETURN_NONE;
}

static PyObject* call_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  (void)args, (void)kwargs;
  CallObject* h = (CallObject*)type->tp_alloc(type, 0);
  if (h == NULL)
    return NULL;
  h->vectorcall = call_vectorcall;
  h->bound = 0;
  if (pthread_mutex_init(&h->lock, NULL) != 0) {
    Py_DECREF(h);
    PyErr_SetString(PyExc_RuntimeError, "Call: pthread_mutex_init failed");
    return NULL;
  }
  return (PyObject*)h;
}

static void call_dealloc(PyObject* self) {
  pthread_mutex_destroy(&((CallObject*)self)->lock);
  Py_TYPE(self)->tp_free(self);
}

static PyMethodDef call_methods[] = {
    {"_bind", call_bind, METH_VARARGS,
     "_bind(run, call, inputs, out, typenum, result_shape, split, release)"},
    {"_into", (PyCFunction)(void (*)(void))call_into, METH_FASTCALL, "_into(result, *args) -> int"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject CallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_jaxdyn_host.Call",
    .tp_basicsize = sizeof(CallObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(CallObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = call_new,
    .tp_dealloc = call_dealloc,
    .tp_methods = call_methods,
    .tp_doc = "a one-sample kernel call (jaxdyn.latency.NativeCall's base)",
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jaxdyn_host", NULL, -1, NULL,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jaxdyn_host(void) {
  import_array();
  slow_name = PyUnicode_InternFromString("_call");
  if (slow_name == NULL || PyType_Ready(&CallType) < 0)
    return NULL;
  PyObject* m = PyModule_Create(&module);
  if (m == NULL)
    return NULL;
  Py_INCREF(&CallType);
  if (PyModule_AddObject(m, "Call", (PyObject*)&CallType) < 0) {
    Py_DECREF(&CallType);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}

/* jaxdyn's XLA FFI handlers for the CPU (see jaxdyn/_uninitialized.py). Compiled at first use
 * against the running jaxlib's own XLA FFI C header (jax.ffi.include_dir()), so their API
 * version is that jaxlib's.
 *
 * jaxdyn_uninitialized does nothing, so that the one result of its custom call is left as
 * XLA:CPU allocated it (uninitialized): jaxdyn.batching's chunk loop starts its output buffers
 * with it instead of filling them with a constant that every chunk then overwrites; called
 * with results that alias its operands, it stores them (jaxdyn.spatial.store).
 *
 * jaxdyn_check is a value check (jaxdyn._checks.error_if): its last operand is a predicate
 * (PRED, one byte per entry); where any entry is true it fails the program with its string
 * attribute `message`, else it does nothing (its results alias the other operands). */
#include <stddef.h>
#include <string.h>

#include "xla/ffi/api/c_api.h"

/* XLA calls a handler once with a metadata extension, when it is registered, to learn the FFI
   API version it was built against; every other call is an execution. Returns 1 for the
   metadata call. */
static int metadata_call(XLA_FFI_CallFrame* frame) {
  for (XLA_FFI_Extension_Base* ext = frame->extension_start; ext != NULL; ext = ext->next) {
    if (ext->type == XLA_FFI_Extension_Metadata) {
      XLA_FFI_Metadata* metadata = ((XLA_FFI_Metadata_Extension*)ext)->metadata;
      metadata->api_version.major_version = XLA_FFI_API_MAJOR;
      metadata->api_version.minor_version = XLA_FFI_API_MINOR;
      metadata->traits = 0;
      return 1;
    }
  }
  return 0;
}

static XLA_FFI_Error* ffi_error(XLA_FFI_CallFrame* frame, const char* message) {
  XLA_FFI_Error_Create_Args args;
  memset(&args, 0, sizeof args);
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.message = message; /* copied by XLA */
  args.errc = XLA_FFI_Error_Code_INVALID_ARGUMENT;
  return frame->api->XLA_FFI_Error_Create(&args);
}

XLA_FFI_Error* jaxdyn_uninitialized(XLA_FFI_CallFrame* frame) {
  metadata_call(frame);
  return NULL; /* success: nothing to do */
}

XLA_FFI_Error* jaxdyn_check(XLA_FFI_CallFrame* frame) {
  if (metadata_call(frame) || frame->args.size < 1)
    return NULL;
  const XLA_FFI_Buffer* pred = (const XLA_FFI_Buffer*)frame->args.args[frame->args.size - 1];
  int64_t n = 1;
  for (int64_t i = 0; i < pred->rank; ++i)
    n *= pred->dims[i];
  const unsigned char* p = (const unsigned char*)pred->data;
  unsigned char failed = 0;
  for (int64_t i = 0; i < n; ++i)
    failed |= p[i];
  if (!failed)
    return NULL;
  char message[2048] = "jaxdyn: a value check failed";
  for (int64_t i = 0; i < frame->attrs.size; ++i) {
    const XLA_FFI_ByteSpan* name = frame->attrs.names[i];
    if (frame->attrs.types[i] == XLA_FFI_AttrType_STRING && name->len == 7
        && memcmp(name->ptr, "message", 7) == 0) {
      const XLA_FFI_ByteSpan* text = (const XLA_FFI_ByteSpan*)frame->attrs.attrs[i];
      size_t len = text->len < sizeof message - 1 ? text->len : sizeof message - 1;
      memcpy(message, text->ptr, len);
      message[len] = 0;
    }
  }
  return ffi_error(frame, message);
}

/* jaxdyn_crba: the joint-space inertia matrix of a batch (jaxdyn/algorithms/crba.py,
 * crba_kernel). Operands: q (..., nq), then the model: Xtree_R (nb, 9), Xtree_p (nb, 3), the
 * motion axes (nv, 6; a body's first is row v_start), mass (nb), com (nb, 3), inertia (nb, 9),
 * armature (nv, or 0 entries where the model has none), all of one floating type,
 * and the topology as int32: nb, nq, nv, npairs, then kind, parent, q_start, v_start per
 * body, then the pairs (r <= c, r's body supporting c's) as npairs rows and npairs columns.
 * Result: M (..., nv, nv). */
#include <stdint.h>
#include <stdlib.h>

#define KIND_ONE_DOF 0
#define KIND_SPHERICAL 1
#define KIND_FREE 2

typedef struct {
  int nb, nq, nv, npairs;
  const int32_t *kind, *parent, *q_start, *v_start, *pair_r, *pair_c;
} crba_topo;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

/* each precision twice: a vector of 64 bytes for the blocks of the batch, and one of 16 bytes
   (2 float64 / 4 float32 samples) for the few samples left after the full blocks, so that a
   batch of one computes one narrow block instead of a block of 8 or 16 lanes (its workspace, a
   quarter of the wide one, stays in the L1 cache) */
#define REAL double
#define ITYPE int64_t
#define LANES 8
#define PIO4_1 7.85398125648498535156E-1
#define PIO4_2 3.77489470793079817668E-8
#define PIO4_3 2.69515142907905952645E-15
#define SUFFIX f64
#include "_crba_kernel.h"
#define REAL double
#define ITYPE int64_t
#define LANES 2
#define PIO4_1 7.85398125648498535156E-1
#define PIO4_2 3.77489470793079817668E-8
#define PIO4_3 2.69515142907905952645E-15
#define SUFFIX f64_narrow
#include "_crba_kernel.h"
#define REAL float
#define ITYPE int32_t
#define LANES 16
#define PIO4_1 0.78515625f
#define PIO4_2 2.4187564849853515625e-4f
#define PIO4_3 3.77489497744594108e-8f
#define SUFFIX f32
#include "_crba_kernel.h"
#define REAL float
#define ITYPE int32_t
#define LANES 4
#define PIO4_1 0.78515625f
#define PIO4_2 2.4187564849853515625e-4f
#define PIO4_3 3.77489497744594108e-8f
#define SUFFIX f32_narrow
#include "_crba_kernel.h"

XLA_FFI_Error* jaxdyn_crba(XLA_FFI_CallFrame* frame) {
  if (metadata_call(frame))
    return NULL;
  if (frame->args.size != 9 || frame->rets.size != 1)
    return ffi_error(frame, "jaxdyn_crba: expected 9 operands and 1 result");
  const XLA_FFI_Buffer* const* a = (const XLA_FFI_Buffer* const*)frame->args.args;
  const XLA_FFI_Buffer* out = (const XLA_FFI_Buffer*)frame->rets.rets[0];
  const int32_t* tp = (const int32_t*)a[8]->data;
  crba_topo t;
  t.nb = tp[0], t.nq = tp[1], t.nv = tp[2], t.npairs = tp[3];
  t.kind = tp + 4;
  t.parent = t.kind + t.nb;
  t.q_start = t.parent + t.nb;
  t.v_start = t.q_start + t.nb;
  t.pair_r = t.v_start + t.nb;
  t.pair_c = t.pair_r + t.npairs;
  int64_t B = 1;
  for (int64_t i = 0; i + 1 < a[0]->rank; ++i)
    B *= a[0]->dims[i];
  const void *q = a[0]->data, *XR = a[1]->data, *Xp = a[2]->data, *ax = a[3]->data;
  const void *ms = a[4]->data, *cm = a[5]->data, *in = a[6]->data;
  const void* arm = a[7]->rank == 1 && a[7]->dims[0] == t.nv ? a[7]->data : NULL;
  const int64_t nq = t.nq, nn = (int64_t)t.nv * t.nv;
  int failed = 0;
  if (a[0]->dtype == XLA_FFI_DataType_F64) {
    /* blocks of 8 samples wide; up to 2 samples left after them, one narrow block */
    const int64_t full = B % 8 <= 2 ? B / 8 * 8 : B;
    const double *qd = (const double*)q;
    double* od = (double*)out->data;
    if (full > 0)
      failed |= crba_run_f64(&t, full, qd, XR, Xp, ax, ms, cm, in, arm, od);
    if (B > full)
      failed |= crba_run_f64_narrow(&t, B - full, qd + full * nq, XR, Xp, ax, ms, cm, in, arm,
                                    od + full * nn);
  } else if (a[0]->dtype == XLA_FFI_DataType_F32) {
    const int64_t full = B % 16 <= 4 ? B / 16 * 16 : B;
    const float* qf = (const float*)q;
    float* of = (float*)out->data;
    if (full > 0)
      failed |= crba_run_f32(&t, full, qf, XR, Xp, ax, ms, cm, in, arm, of);
    if (B > full)
      failed |= crba_run_f32_narrow(&t, B - full, qf + full * nq, XR, Xp, ax, ms, cm, in, arm,
                                    of + full * nn);
  } else
    return ffi_error(frame, "jaxdyn_crba: float32 or float64 operands expected");
  return failed ? ffi_error(frame, "jaxdyn_crba: out of memory") : NULL;
}

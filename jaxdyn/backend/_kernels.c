/* jaxdyn's CPU kernels (jaxdyn/backend/crba_kernel.py), a library of their own beside the
 * handlers of _uninitialized.c (jaxdyn/backend/ffi.py): compiled with -O3, either for the
 * running CPU's x86-64 level alone (-march=x86-64-vN with JAXDYN_ONE_TARGET defined) or, where
 * that level is unknown, with target clones for AVX-512 and AVX2 (GCC on x86-64) chosen when
 * the library loads. */
#include "_ffi_util.h"

/* jaxdyn_crba: the joint-space inertia matrix of a batch (jaxdyn/algorithms/crba.py,
 * crba_kernel). Operands: q (..., nq), then the model: Xtree_R (nb, 9), Xtree_p (nb, 3), the
 * motion axes (nv, 6; a body's first is row v_start), mass (nb), com (nb, 3), inertia (nb, 9),
 * armature (nv; (..., nv), a row per sample, the batch's leading dimensions; or 0 entries where
 * the model has none: armature_kind), all of one floating type,
 * and the topology as int32: nb, nq, nv, npairs, then kind, parent, q_start, v_start per
 * body, then the pairs (r <= c, r's body supporting c's) as npairs rows and npairs columns.
 * Result: M (..., nv, nv). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define KIND_ONE_DOF 0
#define KIND_SPHERICAL 1
#define KIND_FREE 2
/* the model constants per body (one_dof_constants_*: A K, A K^2, A l and the principal-axis
   code of a one-DoF joint) */
#define CST_PER_BODY 22

typedef struct {
  int nb, nq, nv, npairs;
  const int32_t *kind, *parent, *q_start, *v_start, *pair_r, *pair_c;
  const int32_t* order; /* jaxdyn_minv: the bodies in depth-first order (NULL for CRBA) */
  int arm_rows; /* the armature operand holds a row of nv per sample (else one row for all) */
} crba_topo;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) \
    && !defined(JAXDYN_ONE_TARGET)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

/* each precision twice: a vector of 64 bytes for the blocks of the batch, and one of 16 bytes
   (2 float64 / 4 float32 samples) for the few samples left after the full blocks, so that a
   batch of one computes one narrow block instead of a block of 8 or 16 lanes (its workspace, a
   quarter of the wide one, stays in the L1 cache) */
/* the run functions (RUN_LINKAGE: external) of each variant; with JAXDYN_PART defined the library
   is compiled in three parts side by side (jaxdyn/backend/ffi.py) and linked: 1 the wide
   float64 blocks, 2 the wide float32 blocks, 0 the narrow blocks, the targets and the host entry
   points (which use the narrow blocks only); undefined, the whole library at once */
#define RUN_LINKAGE
#if !defined(JAXDYN_PART) || JAXDYN_PART == 1
#define REAL double
#define ITYPE int64_t
#define LANES 8
#define PIO4_1 7.85398125648498535156E-1
#define PIO4_2 3.77489470793079817668E-8
#define PIO4_3 2.69515142907905952645E-15
#define SUFFIX f64
#include "_crba_kernel.h"
#endif
#if !defined(JAXDYN_PART) || JAXDYN_PART == 0
#define REAL double
#define ITYPE int64_t
#define LANES 2
#define PIO4_1 7.85398125648498535156E-1
#define PIO4_2 3.77489470793079817668E-8
#define PIO4_3 2.69515142907905952645E-15
#define SUFFIX f64_narrow
#include "_crba_kernel.h"
#endif
#if !defined(JAXDYN_PART) || JAXDYN_PART == 2
#define REAL float
#define ITYPE int32_t
#define LANES 16
#define PIO4_1 0.78515625f
#define PIO4_2 2.4187564849853515625e-4f
#define PIO4_3 3.77489497744594108e-8f
#define SUFFIX f32
#include "_crba_kernel.h"
#endif
#if !defined(JAXDYN_PART) || JAXDYN_PART == 0
#define REAL float
#define ITYPE int32_t
#define LANES 4
#define PIO4_1 0.78515625f
#define PIO4_2 2.4187564849853515625e-4f
#define PIO4_3 3.77489497744594108e-8f
#define SUFFIX f32_narrow
#include "_crba_kernel.h"
#endif
#if !defined(JAXDYN_PART) || JAXDYN_PART == 0

/* a kernel's four runs (float64 / float32, wide blocks / the narrow block): RUN(t, B, q,
   Xtree_R, Xtree_p, axes, mass, com, inertia, armature or NULL, out) */
typedef int (*run_f64)(const crba_topo*, int64_t, const double*, const double*, const double*,
                       const double*, const double*, const double*, const double*,
                       const double*, double*);
typedef int (*run_f32)(const crba_topo*, int64_t, const float*, const float*, const float*,
                       const float*, const float*, const float*, const float*, const float*,
                       float*);
typedef struct {
  const char *bad_arity, *bad_dtype, *no_memory; /* the target's errors */
  int with_order; /* the topology ends with the bodies in depth-first order (nb) */
  run_f64 f64, f64_narrow;
  run_f32 f32, f32_narrow;
} batch_kernel;

#if defined(JAXDYN_PART)
/* the wide blocks' runs, defined by parts 1 and 2 */
extern __typeof__(*(run_f64)0) crba_run_f64, minv_run_f64;
extern __typeof__(*(run_f32)0) crba_run_f32, minv_run_f32;
#endif

/* the topology operand (see jaxdyn_crba) into t; with_order: it ends with the depth-first
   order */
static void read_topology(const int32_t* tp, int with_order, crba_topo* t) {
  t->nb = tp[0], t->nq = tp[1], t->nv = tp[2], t->npairs = tp[3];
  t->kind = tp + 4;
  t->parent = t->kind + t->nb;
  t->q_start = t->parent + t->nb;
  t->v_start = t->q_start + t->nb;
  t->pair_r = t->v_start + t->nb;
  t->pair_c = t->pair_r + t->npairs;
  t->order = with_order ? t->pair_c + t->npairs : NULL;
  t->arm_rows = 0;
}

/* the armature operand a of a batch of B samples: 0 where it is empty (none), 1 where it holds
   nv entries (the model's), 2 where a row of nv per sample (a per-sample armature, such as a
   simulation step's M + h D: the operand's leading dimensions are the batch's), else -1 (an
   error: never read as none) */
static const char* const BAD_ARMATURE =
    "jaxdyn kernels: the armature operand is neither (nv,) nor (batch..., nv) nor empty";
static int armature_kind(const XLA_FFI_Buffer* a, int64_t B, int nv) {
  if (a->rank == 1 && a->dims[0] == nv)
    return 1;
  if (a->rank == 1 && a->dims[0] == 0)
    return 0;
  if (a->rank < 2 || a->dims[a->rank - 1] != nv)
    return -1;
  int64_t rows = 1;
  for (int64_t i = 0; i + 1 < a->rank; ++i)
    rows *= a->dims[i];
  return rows == B ? 2 : -1;
}

/* one call of a batch kernel (jaxdyn_crba, jaxdyn_minv): the operands and topology read, the
   batch split into wide blocks and at most one narrow block */
static XLA_FFI_Error* run_batch(XLA_FFI_CallFrame* frame, const batch_kernel* k) {
  if (metadata_call(frame))
    return NULL;
  if (frame->args.size != 9 || frame->rets.size != 1)
    return ffi_error(frame, k->bad_arity);
  const XLA_FFI_Buffer* const* a = (const XLA_FFI_Buffer* const*)frame->args.args;
  const XLA_FFI_Buffer* out = (const XLA_FFI_Buffer*)frame->rets.rets[0];
  crba_topo t;
  read_topology((const int32_t*)a[8]->data, k->with_order, &t);
  int64_t B = 1;
  for (int64_t i = 0; i + 1 < a[0]->rank; ++i)
    B *= a[0]->dims[i];
  const void *q = a[0]->data, *XR = a[1]->data, *Xp = a[2]->data, *ax = a[3]->data;
  const void *ms = a[4]->data, *cm = a[5]->data, *in = a[6]->data;
  const int arm_kind = armature_kind(a[7], B, t.nv);
  if (arm_kind < 0)
    return ffi_error(frame, BAD_ARMATURE);
  const void* arm = arm_kind ? a[7]->data : NULL;
  t.arm_rows = arm_kind == 2;
  const int64_t nq = t.nq, nn = (int64_t)t.nv * t.nv, na = t.arm_rows ? t.nv : 0;
  int failed = 0;
  if (a[0]->dtype == XLA_FFI_DataType_F64) {
    /* blocks of 8 samples wide; up to 2 samples left after them, one narrow block */
    const int64_t full = B % 8 <= 2 ? B / 8 * 8 : B;
    const double *qd = (const double*)q, *ad = (const double*)arm;
    double* od = (double*)out->data;
    if (full > 0)
      failed |= k->f64(&t, full, qd, XR, Xp, ax, ms, cm, in, ad, od);
    if (B > full)
      failed |= k->f64_narrow(&t, B - full, qd + full * nq, XR, Xp, ax, ms, cm, in,
                              ad ? ad + full * na : NULL, od + full * nn);
  } else if (a[0]->dtype == XLA_FFI_DataType_F32) {
    const int64_t full = B % 16 <= 4 ? B / 16 * 16 : B;
    const float *qf = (const float*)q, *af = (const float*)arm;
    float* of = (float*)out->data;
    if (full > 0)
      failed |= k->f32(&t, full, qf, XR, Xp, ax, ms, cm, in, af, of);
    if (B > full)
      failed |= k->f32_narrow(&t, B - full, qf + full * nq, XR, Xp, ax, ms, cm, in,
                              af ? af + full * na : NULL, of + full * nn);
  } else
    return ffi_error(frame, k->bad_dtype);
  return failed ? ffi_error(frame, k->no_memory) : NULL;
}

XLA_FFI_Error* jaxdyn_crba(XLA_FFI_CallFrame* frame) {
  static const batch_kernel k = {
      "jaxdyn_crba: expected 9 operands and 1 result",
      "jaxdyn_crba: float32 or float64 operands expected", "jaxdyn_crba: out of memory", 0,
      crba_run_f64, crba_run_f64_narrow, crba_run_f32, crba_run_f32_narrow};
  return run_batch(frame, &k);
}

/* jaxdyn_minv: the inverse joint-space inertia matrix of a batch (jaxdyn/algorithms/minv.py,
 * minv_kernel; the algorithm in _minv_kernel.h). Operands as jaxdyn_crba's, the topology
 * followed by the bodies in depth-first order (nb). Result: Minv (..., nv, nv). */
XLA_FFI_Error* jaxdyn_minv(XLA_FFI_CallFrame* frame) {
  static const batch_kernel k = {
      "jaxdyn_minv: expected 9 operands and 1 result",
      "jaxdyn_minv: float32 or float64 operands expected", "jaxdyn_minv: out of memory", 1,
      minv_run_f64, minv_run_f64_narrow, minv_run_f32, minv_run_f32_narrow};
  return run_batch(frame, &k);
}

/* a dynamics kernel's four runs: RUN(t, B, q, qd, x, f_ext or NULL, Xtree_R, Xtree_p, axes,
   mass, com, inertia, armature or NULL, gravity, outs), x the accelerations (RNEA, its
   derivatives) or the torques (ABA), outs the results */
typedef int (*dyn_f64)(const crba_topo*, int64_t, const double*, const double*, const double*,
                       const double*, const double*, const double*, const double*,
                       const double*, const double*, const double*, const double*,
                       const double*, double* const*);
typedef int (*dyn_f32)(const crba_topo*, int64_t, const float*, const float*, const float*,
                       const float*, const float*, const float*, const float*, const float*,
                       const float*, const float*, const float*, const float*, float* const*);
typedef struct {
  const char *bad_arity, *bad_dtype, *no_memory; /* the target's errors */
  int matrices; /* the results: one (..., nv) (0), or that many (..., nv, nv) */
  int optional; /* the last that many matrices may be left out (their outs NULL: not computed) */
  dyn_f64 f64, f64_narrow;
  dyn_f32 f32, f32_narrow;
} dynamics_kernel;

#if defined(JAXDYN_PART)
extern __typeof__(*(dyn_f64)0) rnea_run_f64, aba_run_f64, rnea_derivatives_run_f64;
extern __typeof__(*(dyn_f32)0) rnea_run_f32, aba_run_f32, rnea_derivatives_run_f32;
#endif

/* one call of a dynamics kernel (jaxdyn_rnea, jaxdyn_aba). Operands: q (..., nq), qd
 * (..., nv), x (..., nv), f_ext (..., nb, 6; body-frame spatial forces, or 0 entries where
 * there are none), then the model as jaxdyn_crba's (Xtree_R, Xtree_p, axes, mass, com,
 * inertia, armature), the gravity vector (3), all of one floating type, and jaxdyn_crba's
 * topology (its pairs unused). Results: one (..., nv), or `matrices` of (..., nv, nv), less up
 * to `optional` of the last (the run gets NULL for those). The batch is split as
 * run_batch's. */
static XLA_FFI_Error* run_dynamics(XLA_FFI_CallFrame* frame, const dynamics_kernel* k) {
  if (metadata_call(frame))
    return NULL;
  const int64_t nmax = k->matrices ? k->matrices : 1, nr = frame->rets.size;
  if (frame->args.size != 13 || nr > nmax || nr < nmax - k->optional || nmax > 3)
    return ffi_error(frame, k->bad_arity);
  const XLA_FFI_Buffer* const* a = (const XLA_FFI_Buffer* const*)frame->args.args;
  const XLA_FFI_Buffer* const* rets = (const XLA_FFI_Buffer* const*)frame->rets.rets;
  crba_topo t;
  read_topology((const int32_t*)a[12]->data, 0, &t);
  int64_t B = 1;
  for (int64_t i = 0; i + 1 < a[0]->rank; ++i)
    B *= a[0]->dims[i];
  const int has_fext = !(a[3]->rank == 1 && a[3]->dims[0] == 0);
  const int arm_kind = armature_kind(a[10], B, t.nv), has_arm = arm_kind > 0;
  if (arm_kind < 0)
    return ffi_error(frame, BAD_ARMATURE);
  t.arm_rows = arm_kind == 2;
  const int64_t nq = t.nq, nv = t.nv, nf = (int64_t)t.nb * 6, na = t.arm_rows ? nv : 0;
  const int64_t no = k->matrices ? nv * nv : nv; /* a result per sample */
  int failed = 0;
  /* blocks of 64 bytes; up to a quarter block left after them, one narrow block */
#define DYNAMICS_RUNS(T, W, NARROW, WIDE, NARROW_RUN)                                         \
  {                                                                                           \
    const T *q = (const T*)a[0]->data, *qd = (const T*)a[1]->data, *x = (const T*)a[2]->data; \
    const T* fe = has_fext ? (const T*)a[3]->data : NULL;                                     \
    const T* arm = has_arm ? (const T*)a[10]->data : NULL;                                    \
    const T *XR = (const T*)a[4]->data, *Xp = (const T*)a[5]->data;                           \
    const T *ax = (const T*)a[6]->data, *ms = (const T*)a[7]->data;                           \
    const T *cm = (const T*)a[8]->data, *in = (const T*)a[9]->data;                           \
    const T* g = (const T*)a[11]->data;                                                       \
    T *o[3] = {NULL, NULL, NULL}, *on[3] = {NULL, NULL, NULL};                                \
    const int64_t full = B % W <= NARROW ? B / W * W : B;                                      \
    for (int64_t r = 0; r < nr; ++r) o[r] = (T*)rets[r]->data, on[r] = o[r] + full * no;     \
    if (full > 0)                                                                             \
      failed |= WIDE(&t, full, q, qd, x, fe, XR, Xp, ax, ms, cm, in, arm, g, o);              \
    if (B > full)                                                                             \
      failed |= NARROW_RUN(&t, B - full, q + full * nq, qd + full * nv, x + full * nv,        \
                           fe ? fe + full * nf : NULL, XR, Xp, ax, ms, cm, in,               \
                           arm ? arm + full * na : NULL, g, on);                             \
  }
  if (a[0]->dtype == XLA_FFI_DataType_F64)
    DYNAMICS_RUNS(double, 8, 2, k->f64, k->f64_narrow)
  else if (a[0]->dtype == XLA_FFI_DataType_F32)
    DYNAMICS_RUNS(float, 16, 4, k->f32, k->f32_narrow)
  else
    return ffi_error(frame, k->bad_dtype);
#undef DYNAMICS_RUNS
  return failed ? ffi_error(frame, k->no_memory) : NULL;
}

/* jaxdyn_rnea: inverse dynamics of a batch (jaxdyn/algorithms/rnea.py, rnea_kernel; the
 * algorithm in _rnea_kernel.h): run_dynamics with x = qdd, result tau. */
XLA_FFI_Error* jaxdyn_rnea(XLA_FFI_CallFrame* frame) {
  static const dynamics_kernel k = {
      "jaxdyn_rnea: expected 13 operands and 1 result",
      "jaxdyn_rnea: float32 or float64 operands expected", "jaxdyn_rnea: out of memory", 0, 0,
      rnea_run_f64, rnea_run_f64_narrow, rnea_run_f32, rnea_run_f32_narrow};
  return run_dynamics(frame, &k);
}

/* jaxdyn_aba: forward dynamics of a batch (jaxdyn/algorithms/aba.py, aba_kernel; the
 * algorithm in _aba_kernel.h): run_dynamics with x = tau, result qdd. */
XLA_FFI_Error* jaxdyn_aba(XLA_FFI_CallFrame* frame) {
  static const dynamics_kernel k = {
      "jaxdyn_aba: expected 13 operands and 1 result",
      "jaxdyn_aba: float32 or float64 operands expected", "jaxdyn_aba: out of memory", 0, 0,
      aba_run_f64, aba_run_f64_narrow, aba_run_f32, aba_run_f32_narrow};
  return run_dynamics(frame, &k);
}

/* jaxdyn_rnea_derivatives: the partials of inverse dynamics of a batch by IDSVA
 * (jaxdyn/derivatives/idsva.py, rnea_derivatives_kernel; the algorithm in
 * _rnea_derivatives_kernel.h): run_dynamics with x = qdd, results dtau_dq, dtau_dv and M,
 * each (..., nv, nv); a call with two results (dtau_dq, dtau_dv) skips M. */
XLA_FFI_Error* jaxdyn_rnea_derivatives(XLA_FFI_CallFrame* frame) {
  static const dynamics_kernel k = {
      "jaxdyn_rnea_derivatives: expected 13 operands and 2 or 3 results",
      "jaxdyn_rnea_derivatives: float32 or float64 operands expected",
      "jaxdyn_rnea_derivatives: out of memory", 3, 1,
      rnea_derivatives_run_f64, rnea_derivatives_run_f64_narrow, rnea_derivatives_run_f32,
      rnea_derivatives_run_f32_narrow};
  return run_dynamics(frame, &k);
}

/* ---------------------------------------------------------------------------------------
 * Host entry points: one sample of a kernel without XLA (jaxdyn/backend/host_calls.py,
 * jaxdyn.compile_for_latency(..., dispatch="native"), called through ctypes). The caller fills
 * a host_call once (jaxdyn_host_init: the model's arrays and topology and the buffers of one
 * sample's inputs and result, which it keeps alive), then for each sample writes the inputs
 * into their buffers and calls jaxdyn_host_run. The quaternions of q are checked (where asked)
 * and normalised in their buffer as jaxdyn.shell.check_quaternions does before the kernel
 * (q * (1 / sqrt(|quaternion|^2)) on each quaternion's entries); the kernels are the narrow
 * blocks that the handlers above run for a batch of one, called with a workspace, the model's
 * constants and Minv's tables prepared once (jaxdyn_host_prepare).
 *
 * Two compositions of the blocks, as the handlers' callers compose them in XLA:
 * HOST_RNEA_DERIVATIVES, the IDSVA block (jaxdyn.rnea_derivatives: dtau_dq, dtau_dv, M), and
 * HOST_ABA_DERIVATIVES (jaxdyn.aba_derivatives on the CPU kernels' path, jaxdyn/derivatives/
 * fd.py, DMM: Singh, Russell & Wensing 2022, Eq. 5; Carpentier & Mansard 2018): qdd by ABA's
 * block, the IDSVA partials at qdd without M, Minv by Minv's block, then dqdd_dq = -Minv
 * dtau_dq and dqdd_dv = -Minv dtau_dv (host_dmm); results: dqdd_dq, dqdd_dv, Minv. Both write
 * their three nv x nv results one after the other at out (3 * nv * nv). */

enum {
  HOST_RNEA = 0,
  HOST_ABA = 1,
  HOST_CRBA = 2,
  HOST_MINV = 3,
  HOST_RNEA_DERIVATIVES = 4,
  HOST_ABA_DERIVATIVES = 5
};

/* the algorithms that read the depth-first order and Minv's tables */
#define HOST_TABLES(alg) ((alg) == HOST_MINV || (alg) == HOST_ABA_DERIVATIVES)

typedef struct {
  crba_topo t;
  int alg, f32, check, nquat;
  double tol;          /* the quaternion check's tolerance on |quaternion|^2 - 1 */
  const int32_t* quat; /* the index in q of each quaternion's first entry (nquat) */
  const void *XR, *Xp, *axis, *mass, *com, *inertia, *armature, *gravity; /* armature or NULL */
  void *q, *qd, *x, *fext; /* one sample's inputs: q (nq), qd and x (nv), f_ext (nb, 6) or NULL */
  void* out;               /* the result (nv, nv * nv, or 3 * nv * nv for the derivatives) */
  void *ws, *cst; /* jaxdyn_host_prepare's workspace and model constants (NULL: none) */
  void* tmp;     /* HOST_ABA_DERIVATIVES: its intermediates (host_tmp_bytes) */
  int32_t* row0; /* HOST_MINV, HOST_ABA_DERIVATIVES: the tables of Minv's block */
  int levels;     /* HOST_MINV, HOST_ABA_DERIVATIVES: the tree's number of levels */
} host_call;

/* the size of a host_call in bytes (the caller allocates it) */
int64_t jaxdyn_host_size(void) { return (int64_t)sizeof(host_call); }

/* fills h. topo: the kernel's topology (jaxdyn_crba's; jaxdyn_minv's with the depth-first
   order for HOST_MINV and HOST_ABA_DERIVATIVES); f32: float32 (else float64) arrays; check:
   fail a run whose quaternion's squared norm is off 1 by more than tol (or not finite); qd,
   x: NULL for HOST_CRBA and HOST_MINV */
void jaxdyn_host_init(host_call* h, const int32_t* topo, int alg, int f32, int check, double tol,
                      int nquat, const int32_t* quat, const void* XR, const void* Xp,
                      const void* axis, const void* mass, const void* com, const void* inertia,
                      const void* armature, const void* gravity, void* q, void* qd, void* x,
                      void* fext, void* out) {
  read_topology(topo, HOST_TABLES(alg), &h->t);
  h->alg = alg, h->f32 = f32, h->check = check, h->nquat = nquat, h->tol = tol;
  h->quat = quat;
  h->XR = XR, h->Xp = Xp, h->axis = axis, h->mass = mass, h->com = com, h->inertia = inertia;
  h->armature = armature, h->gravity = gravity;
  h->q = q, h->qd = qd, h->x = x, h->fext = fext, h->out = out;
  h->ws = h->cst = h->tmp = NULL;
  h->row0 = NULL;
  h->levels = 0;
  if (HOST_TABLES(alg)) { /* the workspace's size depends on the tree's levels */
    int32_t* tables = (int32_t*)malloc(sizeof(int32_t) * ((size_t)h->t.nv + 1 + h->t.nb));
    if (tables != NULL)
      h->levels = minv_tables_f64_narrow(&h->t, tables);
    free(tables);
  }
}

static size_t host_max(size_t a, size_t b) { return a > b ? a : b; }

/* the VEC units of h's narrow block's workspace in precision S (one workspace for the three
   blocks of HOST_ABA_DERIVATIVES, which run one after the other) */
#define HOST_WS_UNITS(S)                                                                      \
  (h->alg == HOST_RNEA              ? rnea_workspace_##S(t)                                   \
   : h->alg == HOST_ABA             ? aba_workspace_##S(t)                                    \
   : h->alg == HOST_CRBA            ? workspace_##S(t)                                        \
   : h->alg == HOST_MINV            ? minv_workspace_##S(t, h->levels)                        \
   : h->alg == HOST_RNEA_DERIVATIVES ? rnea_derivatives_workspace_##S(t)                      \
   : host_max(host_max(aba_workspace_##S(t), rnea_derivatives_workspace_##S(t)),              \
              minv_workspace_##S(t, h->levels)))

/* the bytes of h's narrow block's workspace, rounded up to 64 */
static size_t host_ws_bytes(const host_call* h) {
  const crba_topo* t = &h->t;
  size_t b;
  if (h->f32)
    b = sizeof(vec_f32_narrow) * HOST_WS_UNITS(f32_narrow);
  else
    b = sizeof(vec_f64_narrow) * HOST_WS_UNITS(f64_narrow);
  return (b + 63) / 64 * 64;
}
#undef HOST_WS_UNITS

/* HOST_ABA_DERIVATIVES' intermediates in tmp, in entries of T: the one place of their layout.
   First the product's (host_dmm) padded copies: B, nv rows of nc2 entries (dtau_dq's and
   dtau_dv's rows, each padded to ncp columns, a multiple of a 32-byte vector's entries, side by
   side, rounded up to two vectors), C (nvp x nc2; nvp: nv rounded up to a multiple of 4) and A
   (nvp x nv); then qdd (nv), dtau_dq and dtau_dv (nv x nv each); tmp_n entries in all */
#define HOST_TMP_LAYOUT(T)                                                                    \
  const int L_ = 32 / (int)sizeof(T), nvp = (nv + 3) / 4 * 4, ncp = (nv + L_ - 1) / L_ * L_; \
  const int nc2 = (2 * ncp + 2 * L_ - 1) / (2 * L_) * (2 * L_);                               \
  const size_t at_C = (size_t)nc2 * nv, at_A = at_C + (size_t)nc2 * nvp;                      \
  const size_t at_qdd = at_A + (size_t)nvp * nv, at_dq = at_qdd + nv;                         \
  const size_t at_dv = at_dq + (size_t)nv * nv, tmp_n = at_dv + (size_t)nv * nv;

/* the bytes of HOST_ABA_DERIVATIVES' intermediates (HOST_TMP_LAYOUT), rounded up to 64 (0 for
   the other algorithms) */
static size_t host_tmp_bytes(const host_call* h) {
  if (h->alg != HOST_ABA_DERIVATIVES)
    return 0;
  const int nv = h->t.nv;
  size_t b;
  if (h->f32) {
    HOST_TMP_LAYOUT(float)
    b = sizeof(float) * tmp_n;
  } else {
    HOST_TMP_LAYOUT(double)
    b = sizeof(double) * tmp_n;
  }
  return (b + 63) / 64 * 64;
}

/* the int32 entries of Minv's block's tables (nv + 1 + nb), where the algorithm has them */
static size_t host_table_entries(const host_call* h) {
  return HOST_TABLES(h->alg) ? (size_t)h->t.nv + 1 + h->t.nb : 0;
}

/* the bytes of the model's constants in h's precision */
static size_t host_cst_bytes(const host_call* h) {
  return (h->f32 ? sizeof(float) : sizeof(double)) * CST_PER_BODY * (size_t)h->t.nb;
}

/* the bytes of the memory jaxdyn_host_prepare takes: the workspace, HOST_ABA_DERIVATIVES'
   intermediates, the constants and, for HOST_MINV and HOST_ABA_DERIVATIVES, Minv's tables (0
   where the tables could not be made: HOST_MINV's runs allocate their own,
   HOST_ABA_DERIVATIVES' fail) */
int64_t jaxdyn_host_workspace(const host_call* h) {
  if (HOST_TABLES(h->alg) && h->levels == 0)
    return 0;
  size_t b = host_ws_bytes(h) + host_tmp_bytes(h) + host_cst_bytes(h);
  return (int64_t)(b + sizeof(int32_t) * host_table_entries(h));
}

/* gives h the memory of jaxdyn_host_workspace bytes at mem (64-byte aligned, the caller's,
   alive as long as h) for the block's workspace and the model's constants, computed here
   once: each run then calls the kernel's block itself, without allocating or recomputing
   them (what the kernel's run does per call) */
void jaxdyn_host_prepare(host_call* h, void* mem) {
  h->ws = mem;
  h->tmp = host_tmp_bytes(h) ? (char*)mem + host_ws_bytes(h) : NULL;
  h->cst = (char*)mem + host_ws_bytes(h) + host_tmp_bytes(h);
  if (HOST_TABLES(h->alg)) {
    h->row0 = (int32_t*)((char*)h->cst + host_cst_bytes(h));
    h->levels = minv_tables_f64_narrow(&h->t, h->row0);
  }
  if (h->f32)
    one_dof_constants_f32_narrow(&h->t, h->XR, h->axis, h->cst);
  else
    one_dof_constants_f64_narrow(&h->t, h->XR, h->axis, h->cst);
}

/* the quaternions of h->q checked and normalised in place; 1 where a check fails */
#define HOST_NORMALISE(T)                                                                     \
  {                                                                                           \
    T* qo = (T*)h->q;                                                                         \
    for (int k = 0; k < h->nquat; ++k) {                                                      \
      T* e = qo + h->quat[k];                                                                 \
      const T n2 = e[0] * e[0] + e[1] * e[1] + e[2] * e[2] + e[3] * e[3];                     \
      const T err = n2 - (T)1 < 0 ? (T)1 - n2 : n2 - (T)1;                                    \
      if (h->check && !(err <= (T)h->tol))                                                    \
        return 1;                                                                             \
      const T inv = (T)1 / (T)sqrt((double)n2);                                               \
      for (int r = 0; r < 4; ++r)                                                             \
        e[r] *= inv;                                                                          \
    }                                                                                         \
  }

/* DMM (Singh, Russell & Wensing 2022, Eq. 5): o0 = -Minv dq and o1 = -Minv dv (nv x nv,
   row-major) as one product C = A B of padded copies in tmp (HOST_TMP_LAYOUT; A: Minv, B:
   [-dq -dv], zeros in the padding), 4 rows of C by two 32-byte vectors at a time in registers,
   each sum over k in order (as XLA's dot sums) */
#define HOST_DMM(T, S)                                                                        \
  typedef T vec32_##S __attribute__((vector_size(32)));                                       \
  CLONES static void host_dmm_##S(int nv, const T* restrict Minv, const T* restrict dq,       \
                                  const T* restrict dv, T* restrict tmp, T* restrict o0,      \
                                  T* restrict o1) {                                           \
    typedef vec32_##S V;                                                                      \
    HOST_TMP_LAYOUT(T)                                                                        \
    T *B = tmp, *C = tmp + at_C, *A = tmp + at_A;                                             \
    for (int i = 0; i < nvp; ++i)                                                             \
      for (int k = 0; k < nv; ++k)                                                            \
        A[(size_t)i * nv + k] = i < nv ? Minv[(size_t)i * nv + k] : 0;                        \
    for (int k = 0; k < nv; ++k) {                                                            \
      T* b = B + (size_t)k * nc2;                                                             \
      for (int j = 0; j < nc2; ++j)                                                           \
        b[j] = 0;                                                                             \
      for (int j = 0; j < nv; ++j)                                                            \
        b[j] = -dq[(size_t)k * nv + j], b[ncp + j] = -dv[(size_t)k * nv + j];                 \
    }                                                                                         \
    for (int i0 = 0; i0 < nvp; i0 += 4)                                                       \
      for (int j = 0; j < nc2; j += 2 * L_) {                                                 \
        V c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0},        \
          c31 = {0};                                                                          \
        const T* a = A + (size_t)i0 * nv;                                                     \
        for (int k = 0; k < nv; ++k) {                                                        \
          const V b0 = *(const V*)(B + (size_t)k * nc2 + j);                                  \
          const V b1 = *(const V*)(B + (size_t)k * nc2 + j + L_);                             \
          const T a0 = a[k], a1 = a[nv + k], a2 = a[2 * nv + k], a3 = a[3 * nv + k];          \
          c00 += a0 * b0, c01 += a0 * b1, c10 += a1 * b0, c11 += a1 * b1;                     \
          c20 += a2 * b0, c21 += a2 * b1, c30 += a3 * b0, c31 += a3 * b1;                     \
        }                                                                                     \
        T* c = C + (size_t)i0 * nc2 + j;                                                      \
        *(V*)c = c00, *(V*)(c + L_) = c01, *(V*)(c + nc2) = c10, *(V*)(c + nc2 + L_) = c11;   \
        *(V*)(c + 2 * nc2) = c20, *(V*)(c + 2 * nc2 + L_) = c21;                              \
        *(V*)(c + 3 * nc2) = c30, *(V*)(c + 3 * nc2 + L_) = c31;                              \
      }                                                                                       \
    for (int i = 0; i < nv; ++i)                                                              \
      for (int j = 0; j < nv; ++j) {                                                          \
        o0[(size_t)i * nv + j] = C[(size_t)i * nc2 + j];                                      \
        o1[(size_t)i * nv + j] = C[(size_t)i * nc2 + ncp + j];                                \
      }                                                                                       \
  }
HOST_DMM(double, f64)
HOST_DMM(float, f32)
#undef HOST_DMM

/* one sample from the input buffers into h->out. Returns 0, 1 (a failed quaternion check) or
   2 (out of memory) */
int jaxdyn_host_run(const host_call* h) {
  const crba_topo* t = &h->t;
  int failed;
  if (h->f32)
    HOST_NORMALISE(float)
  else
    HOST_NORMALISE(double)
#define HOST_RUN(T, S, P)                                                                     \
  {                                                                                           \
    const T *XR = h->XR, *Xp = h->Xp, *ax = h->axis, *ms = h->mass, *cm = h->com;             \
    const T *in = h->inertia, *arm = h->armature, *g = h->gravity, *q = h->q;                 \
    const T *qd = h->qd, *x = h->x, *fe = h->fext;                                            \
    T* o = h->out;                                                                            \
    const T* cst = h->cst;                                                                    \
    const int64_t nn = (int64_t)t->nv * t->nv;                                                \
    if (h->alg == HOST_RNEA_DERIVATIVES || h->alg == HOST_ABA_DERIVATIVES) {                  \
      if (h->ws == NULL)                                                                      \
        return 2;                                                                             \
      if (h->alg == HOST_RNEA_DERIVATIVES) {                                                  \
        T* const outs[3] = {o, o + nn, o + 2 * nn};                                           \
        rnea_derivatives_block_##S(t, q, qd, x, fe, XR, Xp, ax, ms, cm, in, arm, g, cst,      \
                                   outs, 0, 1, h->ws);                                        \
        return 0;                                                                             \
      }                                                                                       \
      const int nv = t->nv;                                                                   \
      HOST_TMP_LAYOUT(T)                                                                      \
      T *qdd = (T*)h->tmp + at_qdd, *dq = (T*)h->tmp + at_dq, *dv = (T*)h->tmp + at_dv;       \
      T* const outs[3] = {dq, dv, NULL};                                                      \
      const int32_t *r0 = h->row0, *depth = r0 + t->nv + 1;                                   \
      aba_block_##S(t, q, qd, x, fe, XR, Xp, ax, ms, cm, in, arm, g, cst, qdd, 0, 1, h->ws);  \
      rnea_derivatives_block_##S(t, q, qd, qdd, fe, XR, Xp, ax, ms, cm, in, arm, g, cst,      \
                                 outs, 0, 1, h->ws);                                          \
      minv_block_##S(t, q, XR, Xp, ax, ms, cm, in, arm, cst, r0, depth, h->levels,            \
                     o + 2 * nn, 0, 1, h->ws);                                                \
      host_dmm_##P(nv, o + 2 * nn, dq, dv, h->tmp, o, o + nn);                                \
      return 0;                                                                               \
    }                                                                                         \
    if (h->ws != NULL && h->alg == HOST_RNEA) {                                               \
      rnea_block_##S(t, q, qd, x, fe, XR, Xp, ax, ms, cm, in, arm, g, cst, o, 0, 1, h->ws);   \
      return 0;                                                                               \
    }                                                                                         \
    if (h->ws != NULL && h->alg == HOST_ABA) {                                                \
      aba_block_##S(t, q, qd, x, fe, XR, Xp, ax, ms, cm, in, arm, g, cst, o, 0, 1, h->ws);    \
      return 0;                                                                               \
    }                                                                                         \
    if (h->ws != NULL && h->alg == HOST_CRBA) {                                               \
      crba_block_##S(t, q, XR, Xp, ax, ms, cm, in, arm, cst, o, 0, 1, h->ws);                 \
      return 0;                                                                               \
    }                                                                                         \
    if (h->ws != NULL && h->alg == HOST_MINV) {                                               \
      const int32_t *r0 = h->row0, *depth = r0 + t->nv + 1;                                   \
      minv_block_##S(t, q, XR, Xp, ax, ms, cm, in, arm, cst, r0, depth, h->levels, o, 0, 1,   \
                     h->ws);                                                                  \
      return 0;                                                                               \
    }                                                                                         \
    switch (h->alg) {                                                                         \
      case HOST_RNEA:                                                                         \
        failed = rnea_run_##S(t, 1, q, qd, x, fe, XR, Xp, ax, ms, cm, in, arm, g, &o);        \
        break;                                                                                \
      case HOST_ABA:                                                                          \
        failed = aba_run_##S(t, 1, q, qd, x, fe, XR, Xp, ax, ms, cm, in, arm, g, &o);         \
        break;                                                                                \
      case HOST_CRBA:                                                                         \
        failed = crba_run_##S(t, 1, q, XR, Xp, ax, ms, cm, in, arm, o);                       \
        break;                                                                                \
      default:                                                                                \
        failed = minv_run_##S(t, 1, q, XR, Xp, ax, ms, cm, in, arm, o);                       \
    }                                                                                         \
  }
  if (h->f32)
    HOST_RUN(float, f32_narrow, f32)
  else
    HOST_RUN(double, f64_narrow, f64)
#undef HOST_RUN
  return failed ? 2 : 0;
}
#undef HOST_NORMALISE

#endif /* part 0 */
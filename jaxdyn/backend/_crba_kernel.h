/* One precision of jaxdyn_crba (see _kernels.c), included once per element type with
 * REAL (double, float), ITYPE (the integer of its width), LANES (samples per vector: a vector
 * of 64 bytes), PIO4_1..3 (pi / 4 in three parts for REAL's argument reduction) and SUFFIX
 * (of the function names) defined; it undefines them at its end.
 *
 * CRBA in world coordinates (Featherstone 2008, Alg. 6.2; jaxdyn/algorithms/crba.py): body
 * placements from the root out, each body's inertia about the world origin, composite inertias
 * as plain sums from the leaves in, then M[r, c] = oS_r . (oIc_body(c) oS_c) for every
 * coordinate r supporting c (the pairs list), mirrored. LANES samples are computed at once,
 * one per vector lane, so every multiply-add is a full vector instruction. */

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
/* a run's body over the whole batch of B samples: the workspace of WORDS vectors and the
   model's constants allocated, CALL (a block's call reading ws, cst, b and n: samples
   [b, b + n), n <= LANES) for each block of LANES samples, both freed; returns 1 where memory
   ran out, else 0. Every kernel's run but Minv's (which makes tables first) is this. */
#ifndef BATCH_BLOCKS
#define BATCH_BLOCKS(WORDS, CALL)                                                             \
  {                                                                                           \
    size_t bytes_ = (WORDS) * sizeof(VEC);                                                    \
    VEC* ws = (VEC*)aligned_alloc(64, (bytes_ + 63) / 64 * 64);                               \
    REAL* cst = (REAL*)malloc(sizeof(REAL) * CST_PER_BODY * (size_t)t->nb);                   \
    if (ws == NULL || cst == NULL) {                                                          \
      free(ws);                                                                               \
      free(cst);                                                                              \
      return 1;                                                                               \
    }                                                                                         \
    CONSTANTS(t, XR, axis, cst);                                                              \
    for (int64_t b = 0; b < B; b += LANES) {                                                  \
      const int n = B - b < LANES ? (int)(B - b) : LANES;                                     \
      CALL;                                                                                   \
    }                                                                                         \
    free(ws);                                                                                 \
    free(cst);                                                                                \
    return 0;                                                                                 \
  }
#endif
#define BLOCK CAT(crba_block_, SUFFIX)
#define RUN CAT(crba_run_, SUFFIX)
#define VEC CAT(vec_, SUFFIX)

typedef REAL VEC __attribute__((vector_size(sizeof(REAL) * LANES)));

#define IVEC CAT(ivec_, SUFFIX)
#define SINCOS CAT(sincos_, SUFFIX)
typedef ITYPE IVEC __attribute__((vector_size(sizeof(REAL) * LANES)));

#define ARMV CAT(armv_, SUFFIX)
/* coordinate j's armature in the lanes of samples [b0, b0 + n): the model's, or where the
   operand holds a row per sample (t->arm_rows) each sample's (missing lanes repeat the last) */
static inline __attribute__((always_inline)) VEC ARMV(const crba_topo* t, const REAL* armature,
                                                      int j, int64_t b0, int n) {
  if (!t->arm_rows)
    return (VEC){0} + armature[j];
  VEC a;
  for (int l = 0; l < LANES; ++l)
    a[l] = armature[(b0 + (l < n ? l : n - 1)) * t->nv + j];
  return a;
}

/* sin and cos of every lane (Cephes' sin / cos: the argument reduced by pi / 4 in three
   parts, then the minimax polynomials of sin and cos on [-pi / 4, pi / 4]; within an ulp or
   two of libm for |x| < 2^30 / (4 / pi), the range of joint angles and far beyond) */
/* lanes of a where the mask m (all ones or zeros per lane) is set, else of b */
#define SEL(m, a, b) ((VEC)((((IVEC)(a)) & (m)) | (((IVEC)(b)) & ~(m))))

static inline __attribute__((always_inline)) void SINCOS(VEC x, VEC* s, VEC* c) {
  const IVEC neg = (IVEC)(x < 0);
  const VEC ax = SEL(neg, -x, x);
  IVEC j = __builtin_convertvector(ax * (REAL)1.27323954473516268615, IVEC);
  j += j & 1; /* an even octant: the reduced argument lies in [-pi / 4, pi / 4] */
  const VEC y = __builtin_convertvector(j, VEC);
  const VEC z = ((ax - y * PIO4_1) - y * PIO4_2) - y * PIO4_3;
  const VEC zz = z * z;
  const VEC ps = z + z * zz * ((((((REAL)1.58962301576546568060E-10 * zz
                 - (REAL)2.50507477628578072866E-8) * zz + (REAL)2.75573136213857245213E-6) * zz
                 - (REAL)1.98412698295895385996E-4) * zz + (REAL)8.33333333332211858878E-3) * zz
                 - (REAL)1.66666666666666307295E-1);
  const VEC pc = 1 - (REAL)0.5 * zz + zz * zz * ((((((REAL)-1.13585365213876817300E-11 * zz
                 + (REAL)2.08757008419747316778E-9) * zz - (REAL)2.75573141792967388112E-7) * zz
                 + (REAL)2.48015872888517045348E-5) * zz - (REAL)1.38888888888730564116E-3) * zz
                 + (REAL)4.16666666666665929218E-2);
  /* octant j (mod 8) in {0, 2, 4, 6}: sin(ax) = ps, pc, -ps, -pc; cos(ax) = pc, -ps, -pc, ps */
  const IVEC q = (j >> 1) & 3;
  const IVEC odd = -(q & 1), high = -(q >> 1), flip = -((q ^ (q >> 1)) & 1);
  const VEC sa = SEL(odd, pc, ps), ca = SEL(odd, ps, pc);
  const VEC ss = SEL(high, -sa, sa);
  *s = SEL(neg, -ss, ss);
  *c = SEL(flip, -ca, ca);
}

#define CONSTANTS CAT(one_dof_constants_, SUFFIX)

/* the one-DoF joints' products of the model alone, the same for every sample (CST_PER_BODY
   numbers per body: A K, A K^2 and A l, with A = Xtree_R, K = [a]x and [a; l] the joint's
   axis; then the principal-axis code: +-(k + 1) where A is the identity, l = 0 and a = +-e_k
   exactly (a revolute joint about an axis of its frame, as most URDF joints are: KINEMATICS
   then rotates two columns of the parent's rotation), else 0) */
static void CONSTANTS(const crba_topo* t, const REAL* XR, const REAL* axis, REAL* cst) {
  for (int i = 0; i < t->nb; ++i) {
    if (t->kind[i] != KIND_ONE_DOF) continue;
    const REAL *A = XR + 9 * i, *a = axis + 6 * t->v_start[i];
    const REAL K[9] = {0, -a[2], a[1], a[2], 0, -a[0], -a[1], a[0], 0};
    REAL *AK = cst + CST_PER_BODY * i, *AK2 = AK + 9, *Al = AK + 18;
    for (int r = 0; r < 3; ++r)
      for (int cc = 0; cc < 3; ++cc)
        AK[3 * r + cc] = A[3 * r] * K[cc] + A[3 * r + 1] * K[3 + cc] + A[3 * r + 2] * K[6 + cc];
    for (int r = 0; r < 3; ++r) {
      for (int cc = 0; cc < 3; ++cc)
        AK2[3 * r + cc] = AK[3 * r] * K[cc] + AK[3 * r + 1] * K[3 + cc] + AK[3 * r + 2] * K[6 + cc];
      Al[r] = A[3 * r] * a[3] + A[3 * r + 1] * a[4] + A[3 * r + 2] * a[5];
    }
    int identity = 1, code = 0, nonzero = 0;
    for (int e = 0; e < 9; ++e) identity &= A[e] == (e % 4 == 0 ? 1 : 0);
    for (int k = 0; k < 3; ++k) {
      if (a[k] != 0) ++nonzero;
      if (a[k] == 1 || a[k] == -1) code = a[k] > 0 ? k + 1 : -(k + 1);
    }
    const int prismatic = a[3] != 0 || a[4] != 0 || a[5] != 0;
    AK[21] = identity && !prismatic && nonzero == 1 ? (REAL)code : 0;
  }
}

/* the workspace of one block, in VEC units */
static size_t CAT(workspace_, SUFFIX)(const crba_topo* t) {
  return (size_t)t->nb * (9 + 3 + 3 + 6 + 1) + (size_t)t->nv * 12 + (size_t)t->nq;
}

#define KINEMATICS CAT(kinematics_, SUFFIX)
#define SUBSPACE CAT(subspace_, SUFFIX)

/* the kinematics of samples [b0, b0 + n) (n <= LANES; missing lanes repeat the last sample):
   per body its world placement (oR (nb, 9), op (nb, 3)) and its inertia about the world origin
   (I (nb, 6): the upper triangle of Ibar, h (nb, 3) = m c_w, m (nb)); qv (nq) the lanes of q */
static __attribute__((noinline)) void KINEMATICS(
    const crba_topo* t, const REAL* q, const REAL* XR, const REAL* Xp, const REAL* mass,
    const REAL* com, const REAL* inertia, const REAL* cst, int64_t b0, int n, VEC* oR, VEC* op,
    VEC* h, VEC* I, VEC* m, VEC* qv) {
  const int nb = t->nb, nq = t->nq;
  for (int l = 0; l < LANES; ++l) {
    int64_t b = b0 + (l < n ? l : n - 1);
    for (int j = 0; j < nq; ++j) qv[j][l] = q[b * nq + j];
  }
  for (int i = 0; i < nb; ++i) {
    const REAL* A = XR + 9 * i;
    const REAL* pt = Xp + 3 * i;
    const int k = t->kind[i], par = t->parent[i], qs = t->q_start[i];
    VEC Rl[9], pl[3];
    VEC* R = oR + 9 * i;
    VEC* p = op + 3 * i;
    const int code = k == KIND_ONE_DOF ? (int)cst[CST_PER_BODY * i + 21] : 0;
    if (code != 0) {
      /* about the axis +-e_kk of the joint's frame, which is the parent's rotated (A = 1,
         l = 0): R = P Rot_kk(+-q) keeps P's column kk and rotates the other two, with
         (ci, cj) = (kk + 1, kk + 2) mod 3: R_ci = c P_ci + s P_cj, R_cj = c P_cj - s P_ci */
      const int kk = (code > 0 ? code : -code) - 1, ci = (kk + 1) % 3, cj = (kk + 2) % 3;
      VEC sn, cs;
      SINCOS(qv[qs], &sn, &cs);
      if (code < 0) sn = -sn;
      if (par < 0) {
        for (int e = 0; e < 9; ++e) R[e] = (VEC){0};
        R[4 * kk] = (VEC){0} + 1;
        R[4 * ci] = cs, R[3 * cj + ci] = sn, R[3 * ci + cj] = -sn, R[4 * cj] = cs;
      } else {
        const VEC* P = oR + 9 * par;
        for (int r = 0; r < 3; ++r) {
          const VEC a = P[3 * r + ci], b = P[3 * r + cj];
          R[3 * r + kk] = P[3 * r + kk];
          R[3 * r + ci] = cs * a + sn * b;
          R[3 * r + cj] = cs * b - sn * a;
        }
      }
      for (int r = 0; r < 3; ++r) pl[r] = (VEC){0} + pt[r]; /* l = 0 */
    } else if (k == KIND_ONE_DOF) {
      /* XJ = (rodrigues(a, q), l q): R = A (1 + s K + (1 - c) K^2), p = pt + A l q, with
         A K, A K^2 and A l from CONSTANTS */
      const REAL *AK = cst + CST_PER_BODY * i, *AK2 = AK + 9, *Al = AK + 18;
      VEC th = qv[qs], sn, cs;
      SINCOS(th, &sn, &cs);
      const VEC c1 = 1 - cs;
      for (int e = 0; e < 9; ++e) Rl[e] = A[e] + sn * AK[e] + c1 * AK2[e];
      for (int r = 0; r < 3; ++r) pl[r] = pt[r] + Al[r] * th;
    } else {
      /* spherical: q = quaternion; free: q = (position, quaternion) */
      const int o = k == KIND_FREE ? 3 : 0;
      VEC w = qv[qs + o], x = qv[qs + o + 1], y = qv[qs + o + 2], z = qv[qs + o + 3];
      VEC Rj[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                   2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                   2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)};
      for (int r = 0; r < 3; ++r)
        for (int cc = 0; cc < 3; ++cc)
          Rl[3 * r + cc] = A[3 * r] * Rj[cc] + A[3 * r + 1] * Rj[3 + cc] + A[3 * r + 2] * Rj[6 + cc];
      for (int r = 0; r < 3; ++r) {
        pl[r] = (VEC){0} + pt[r];
        if (k == KIND_FREE)
          pl[r] += A[3 * r] * qv[qs] + A[3 * r + 1] * qv[qs + 1] + A[3 * r + 2] * qv[qs + 2];
      }
    }
    /* R: the principal-axis joints' is written above; the others' from Rl */
    if (par < 0) {
      /* a root: M does not depend on where its subtree is, so it is placed at the origin
         (the world state that jaxdyn's CRBA uses is centred the same way) */
      if (code == 0)
        for (int e = 0; e < 9; ++e) R[e] = Rl[e];
      for (int r = 0; r < 3; ++r) p[r] = (VEC){0};
    } else {
      const VEC* P = oR + 9 * par;
      if (code == 0)
        for (int r = 0; r < 3; ++r)
          for (int cc = 0; cc < 3; ++cc)
            R[3 * r + cc] = P[3 * r] * Rl[cc] + P[3 * r + 1] * Rl[3 + cc] + P[3 * r + 2] * Rl[6 + cc];
      for (int r = 0; r < 3; ++r)
        p[r] = op[3 * par + r] + P[3 * r] * pl[0] + P[3 * r + 1] * pl[1] + P[3 * r + 2] * pl[2];
    }
    /* the body's inertia about the world origin: mass, first moment h = m c_w, and
       Ibar = R Ic R^T + m (|c_w|^2 1 - c_w c_w^T), kept as its six entries */
    const REAL* ci = com + 3 * i;
    const REAL* Ic = inertia + 9 * i;
    const REAL mi = mass[i];
    VEC cw[3], RI[9];
    for (int r = 0; r < 3; ++r) cw[r] = p[r] + R[3 * r] * ci[0] + R[3 * r + 1] * ci[1] + R[3 * r + 2] * ci[2];
    for (int r = 0; r < 3; ++r)
      for (int cc = 0; cc < 3; ++cc)
        RI[3 * r + cc] = R[3 * r] * Ic[cc] + R[3 * r + 1] * Ic[3 + cc] + R[3 * r + 2] * Ic[6 + cc];
    static const int ii[6] = {0, 1, 2, 0, 0, 1}, jj[6] = {0, 1, 2, 1, 2, 2};
    VEC c2 = cw[0] * cw[0] + cw[1] * cw[1] + cw[2] * cw[2];
    VEC* Ii = I + 6 * i;
    for (int e = 0; e < 6; ++e) {
      const int r = ii[e], cc = jj[e];
      Ii[e] = RI[3 * r] * R[3 * cc] + RI[3 * r + 1] * R[3 * cc + 1] + RI[3 * r + 2] * R[3 * cc + 2]
              - mi * cw[r] * cw[cc];
      if (r == cc) Ii[e] += mi * c2;
    }
    for (int r = 0; r < 3; ++r) h[3 * i + r] = mi * cw[r];
    m[i] = (VEC){0} + mi;
  }
}

/* the world motion subspace of coordinate j of body i: angular part w, and v the velocity of
   the point at the world origin */
static inline __attribute__((always_inline)) void SUBSPACE(const crba_topo* t, const REAL* axis,
                                                           const VEC* oR, const VEC* op, int i,
                                                           int j, VEC* w, VEC* v) {
  const int k = t->kind[i];
  const VEC *R = oR + 9 * i, *p = op + 3 * i;
  VEC u[3];
  if (k == KIND_ONE_DOF) {
    const REAL* a = axis + 6 * t->v_start[i];
    for (int r = 0; r < 3; ++r) {
      w[r] = R[3 * r] * a[0] + R[3 * r + 1] * a[1] + R[3 * r + 2] * a[2];
      u[r] = R[3 * r] * a[3] + R[3 * r + 1] * a[4] + R[3 * r + 2] * a[5];
    }
  } else if (j < 3) { /* angular about the body's axis j (spherical, free) */
    for (int r = 0; r < 3; ++r) {
      w[r] = R[3 * r + j];
      u[r] = (VEC){0};
    }
  } else { /* linear along the body's axis j - 3 (free) */
    for (int r = 0; r < 3; ++r) {
      w[r] = (VEC){0};
      u[r] = R[3 * r + j - 3];
    }
  }
  v[0] = u[0] + p[1] * w[2] - p[2] * w[1];
  v[1] = u[1] + p[2] * w[0] - p[0] * w[2];
  v[2] = u[2] + p[0] * w[1] - p[1] * w[0];
}

/* samples [b0, b0 + n) of the batch (n <= LANES; missing lanes repeat the last sample) */
CLONES static void BLOCK(const crba_topo* t, const REAL* q, const REAL* XR, const REAL* Xp, const REAL* axis, const REAL* mass,
                  const REAL* com, const REAL* inertia, const REAL* armature, const REAL* cst,
                  REAL* out, int64_t b0, int n, VEC* ws) {
  const int nb = t->nb, nv = t->nv;
  VEC *oR = ws, *op = oR + 9 * nb, *h = op + 3 * nb, *I = h + 3 * nb, *m = I + 6 * nb;
  VEC *S = m + nb, *F = S + 6 * nv, *qv = F + 6 * nv;
  KINEMATICS(t, q, XR, Xp, mass, com, inertia, cst, b0, n, oR, op, h, I, m, qv);
  /* composite inertias: bodies come after their parents */
  for (int i = nb - 1; i >= 0; --i) {
    const int par = t->parent[i];
    if (par < 0) continue;
    m[par] += m[i];
    for (int r = 0; r < 3; ++r) h[3 * par + r] += h[3 * i + r];
    for (int e = 0; e < 6; ++e) I[6 * par + e] += I[6 * i + e];
  }
  /* world motion subspaces S and forces F = oIc S, per coordinate */
  for (int i = 0; i < nb; ++i) {
    const int k = t->kind[i], nvj = k == KIND_ONE_DOF ? 1 : (k == KIND_FREE ? 6 : 3);
    const VEC *Ii = I + 6 * i, *hh = h + 3 * i;
    for (int j = 0; j < nvj; ++j) {
      VEC w[3], v[3];
      SUBSPACE(t, axis, oR, op, i, j, w, v);
      const int d = t->v_start[i] + j;
      VEC* Sd = S + 6 * d;
      VEC* Fd = F + 6 * d;
      for (int r = 0; r < 3; ++r) {
        Sd[r] = w[r];
        Sd[3 + r] = v[r];
      }
      const VEC mm = m[i];
      Fd[0] = Ii[0] * w[0] + Ii[3] * w[1] + Ii[4] * w[2] + hh[1] * v[2] - hh[2] * v[1];
      Fd[1] = Ii[3] * w[0] + Ii[1] * w[1] + Ii[5] * w[2] + hh[2] * v[0] - hh[0] * v[2];
      Fd[2] = Ii[4] * w[0] + Ii[5] * w[1] + Ii[2] * w[2] + hh[0] * v[1] - hh[1] * v[0];
      Fd[3] = mm * v[0] - (hh[1] * w[2] - hh[2] * w[1]);
      Fd[4] = mm * v[1] - (hh[2] * w[0] - hh[0] * w[2]);
      Fd[5] = mm * v[2] - (hh[0] * w[1] - hh[1] * w[0]);
    }
  }
  /* M: zero, then the related pairs written into both triangles, sample by sample */
  const size_t nn = (size_t)nv * nv;
  for (int l = 0; l < n; ++l) memset(out + (size_t)(b0 + l) * nn, 0, nn * sizeof(REAL));
  /* the pairs come row by row (r ascending): S_r is loaded once per row and kept in
     registers, so that each pair loads F_c alone (the loop was bound by its loads) */
  VEC s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0};
  int row = -1;
  for (int e = 0; e < t->npairs; ++e) {
    const int r = t->pair_r[e], cc = t->pair_c[e];
    if (r != row) {
      const VEC* Sr = S + 6 * r;
      s0 = Sr[0], s1 = Sr[1], s2 = Sr[2], s3 = Sr[3], s4 = Sr[4], s5 = Sr[5];
      row = r;
    }
    const VEC* Fc = F + 6 * cc;
    VEC x = s0 * Fc[0] + s1 * Fc[1] + s2 * Fc[2] + s3 * Fc[3] + s4 * Fc[4] + s5 * Fc[5];
    if (r == cc && armature != NULL) x += ARMV(t, armature, r, b0, n);
    for (int l = 0; l < n; ++l) {
      REAL* o = out + (size_t)(b0 + l) * nn;
      o[(size_t)r * nv + cc] = x[l];
      o[(size_t)cc * nv + r] = x[l];
    }
  }
}

/* the whole batch of B samples, one block of LANES at a time */
RUN_LINKAGE int RUN(const crba_topo* t, int64_t B, const REAL* q, const REAL* XR, const REAL* Xp, const REAL* axis, const REAL* mass,
               const REAL* com, const REAL* inertia, const REAL* armature, REAL* out) {
  BATCH_BLOCKS(CAT(workspace_, SUFFIX)(t), BLOCK(t, q, XR, Xp, axis, mass, com, inertia, armature, cst, out, b, n, ws))
}

#include "_minv_kernel.h"
#include "_rnea_kernel.h"
#include "_rnea_derivatives_kernel.h"
#include "_aba_kernel.h"

#undef BLOCK
#undef RUN
#undef KINEMATICS
#undef SUBSPACE
#undef RFORWARD
/* the includer's parameters, so that it can include this again with others */
#undef REAL
#undef ITYPE
#undef LANES
#undef SUFFIX
#undef PIO4_1
#undef PIO4_2
#undef PIO4_3
#undef VEC
#undef IVEC
#undef SINCOS
#undef ARMV
#undef CONSTANTS
#undef SEL
#undef CAT
#undef CAT2

/* One precision of jaxdyn_rnea_derivatives (see _kernels.c), included by _crba_kernel.h inside
 * its precision after _rnea_kernel.h (REAL, VEC, LANES, SUFFIX, CONSTANTS, KINEMATICS and
 * RFORWARD defined there).
 *
 * The first-order partials of inverse dynamics by IDSVA: S. Singh, R. P. Russell, P. M. Wensing,
 * "Efficient Analytical Derivatives of Rigid-Body Dynamics Using Spatial Vector Algebra",
 * IEEE RA-L 7(2), 2022, Algorithm 1 with Eqs. 28, 30-32, in ground (world) coordinates, as
 * jaxdyn/derivatives/idsva.py (idsva_world) and docs/idsva.md; the partials equal those of
 * Carpentier & Mansard 2018 ("Analytical Derivatives of Rigid Body Dynamics Algorithms", RSS).
 * On the kinematics and outward pass of RNEA's kernel (roots placed at the origin, which
 * leaves the partials unchanged):
 *
 *   per coordinate i (body b, parent p): Psid_i = v_p x S_i, Psidd_i = a_p x S_i + v_p x Psid_i,
 *     Sd_i = v_b x S_i;
 *   per body the Coriolis factor B = (v x*) I + (I v) xbar* - I (v x) as -Y + (I v) xbar*
 *     (Y symmetric: Y11, y; jaxdyn/algorithms/coriolis.py, body_coriolis_terms), and the
 *     subtree sums IC, BC (Y11, y, I v) and FC of I, B and the body forces;
 *   F1 = IC S, F2 = BC S + IC (Psid + Sd), F3 = BC Psid + IC Psidd + S x* FC, F4 = BC^T S;
 *   for body(i) ancestor-or-self of body(j): dtau_j/dq_i = F1_j . Psidd_i + F4_j . Psid_i,
 *     dtau_j/dqd_i = F1_j . (Psid_i + Sd_i) + F4_j . S_i, M_ij = M_ji = S_i . F1_j; and for
 *     body(i) a strict ancestor: dtau_i/dq_j = S_i . F3_j, dtau_i/dqd_j = S_i . F2_j.
 *
 * The q partials are along the right increment of jaxdyn.integrate (the model's motion axes of
 * spherical and free joints: body-frame rotation and twist increments), the tangent convention
 * of the XLA form. Result per sample: dtau_dq, dtau_dv and M (+ diag(armature)), each nv x nv;
 * M neither computed nor written where its output is NULL (the callers that take M^-1 from
 * the Minv kernel: jaxdyn.derivatives.idsva.id_state_partials). LANES samples at once, one per
 * vector lane. */

#define RDBLOCK CAT(rnea_derivatives_block_, SUFFIX)
#define RDRUN CAT(rnea_derivatives_run_, SUFFIX)
#define RDWORK CAT(rnea_derivatives_workspace_, SUFFIX)
#define MCROSS CAT(motion_cross_, SUFFIX)
#define FCROSS CAT(force_cross_, SUFFIX)
#define IAPPLY CAT(inertia_apply_, SUFFIX)
#define YAPPLY CAT(coriolis_y_apply_, SUFFIX)
#define DOT6 CAT(dot6_, SUFFIX)

/* a x b of motion vectors [w; u]: [wa x wb; wa x ub + ua x wb] */
static inline __attribute__((always_inline)) void MCROSS(const VEC* a, const VEC* b, VEC* o) {
  o[0] = a[1] * b[2] - a[2] * b[1];
  o[1] = a[2] * b[0] - a[0] * b[2];
  o[2] = a[0] * b[1] - a[1] * b[0];
  o[3] = a[1] * b[5] - a[2] * b[4] + a[4] * b[2] - a[5] * b[1];
  o[4] = a[2] * b[3] - a[0] * b[5] + a[5] * b[0] - a[3] * b[2];
  o[5] = a[0] * b[4] - a[1] * b[3] + a[3] * b[1] - a[4] * b[0];
}

/* a x* f of a motion a = [w; u] and a force f = [n; l]: [w x n + u x l; w x l] */
static inline __attribute__((always_inline)) void FCROSS(const VEC* a, const VEC* f, VEC* o) {
  o[0] = a[1] * f[2] - a[2] * f[1] + a[4] * f[5] - a[5] * f[4];
  o[1] = a[2] * f[0] - a[0] * f[2] + a[5] * f[3] - a[3] * f[5];
  o[2] = a[0] * f[1] - a[1] * f[0] + a[3] * f[4] - a[4] * f[3];
  o[3] = a[1] * f[5] - a[2] * f[4];
  o[4] = a[2] * f[3] - a[0] * f[5];
  o[5] = a[0] * f[4] - a[1] * f[3];
}

/* the inertia [[Ibar, [h]x], [[h]x^T, m 1]] (Ibar as xx, yy, zz, xy, xz, yz) times x */
static inline __attribute__((always_inline)) void IAPPLY(const VEC* Ib, const VEC* h, VEC m,
                                                         const VEC* x, VEC* y) {
  y[0] = Ib[0] * x[0] + Ib[3] * x[1] + Ib[4] * x[2] + h[1] * x[5] - h[2] * x[4];
  y[1] = Ib[3] * x[0] + Ib[1] * x[1] + Ib[5] * x[2] + h[2] * x[3] - h[0] * x[5];
  y[2] = Ib[4] * x[0] + Ib[5] * x[1] + Ib[2] * x[2] + h[0] * x[4] - h[1] * x[3];
  y[3] = m * x[3] - (h[1] * x[2] - h[2] * x[1]);
  y[4] = m * x[4] - (h[2] * x[0] - h[0] * x[2]);
  y[5] = m * x[5] - (h[0] * x[1] - h[1] * x[0]);
}

/* Y x with the symmetric Y = [[Y11, [y]x], [-[y]x, 0]] (Y11 as xx, yy, zz, xy, xz, yz) */
static inline __attribute__((always_inline)) void YAPPLY(const VEC* Y, const VEC* y, const VEC* x,
                                                         VEC* o) {
  o[0] = Y[0] * x[0] + Y[3] * x[1] + Y[4] * x[2] + y[1] * x[5] - y[2] * x[4];
  o[1] = Y[3] * x[0] + Y[1] * x[1] + Y[5] * x[2] + y[2] * x[3] - y[0] * x[5];
  o[2] = Y[4] * x[0] + Y[5] * x[1] + Y[2] * x[2] + y[0] * x[4] - y[1] * x[3];
  o[3] = -(y[1] * x[2] - y[2] * x[1]);
  o[4] = -(y[2] * x[0] - y[0] * x[2]);
  o[5] = -(y[0] * x[1] - y[1] * x[0]);
}

static inline __attribute__((always_inline)) VEC DOT6(const VEC* a, const VEC* b) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3] + a[4] * b[4] + a[5] * b[5];
}

/* per body of the composites: m, h (3), Ibar (6), Y11 (6), y (3), I v (6) */
#define RD_NC 25

/* the workspace of one block, in VEC units */
static size_t RDWORK(const crba_topo* t) {
  const size_t nb = t->nb, nv = t->nv;
  return nb * (9 + 3 + 3 + 6 + 1) + nb * 6 * 3 + nb * RD_NC + nv * 6 * 8 + nv * 2
         + (size_t)t->nq;
}

/* samples [b0, b0 + n) of the batch (n <= LANES; missing lanes repeat the last sample); outs:
   dtau_dq, dtau_dv and M, each (B, nv, nv), M NULL where it is not wanted */
CLONES static void RDBLOCK(const crba_topo* t, const REAL* q, const REAL* qd, const REAL* qdd,
                           const REAL* fext, const REAL* XR, const REAL* Xp, const REAL* axis,
                           const REAL* mass, const REAL* com, const REAL* inertia,
                           const REAL* armature, const REAL* g, const REAL* cst,
                           REAL* const* outs, int64_t b0, int n, VEC* ws) {
  const int nb = t->nb, nv = t->nv;
  const int64_t nn = (int64_t)nv * nv;
  VEC *oR = ws, *op = oR + 9 * nb, *h = op + 3 * nb, *I = h + 3 * nb, *m = I + 6 * nb;
  VEC *V = m + nb, *A = V + 6 * nb, *F = A + 6 * nb, *C = F + 6 * nb, *S = C + RD_NC * nb;
  VEC *Psid = S + 6 * nv, *Psidd = Psid + 6 * nv, *Vd = Psidd + 6 * nv, *F1 = Vd + 6 * nv;
  VEC *F2 = F1 + 6 * nv, *F3 = F2 + 6 * nv, *F4 = F3 + 6 * nv, *qdv = F4 + 6 * nv;
  VEC *qddv = qdv + nv, *qv = qddv + nv;
  KINEMATICS(t, q, XR, Xp, mass, com, inertia, cst, b0, n, oR, op, h, I, m, qv);
  /* outwards (Alg. 1, lines 2-10): subspaces, velocities, accelerations, body forces */
  RFORWARD(t, qd, qdd, qdv, qddv, fext, axis, g, oR, op, h, I, m, b0, n, S, V, A, F);
  /* per body: I (m, h, Ibar) and B (Y11, y, I v; Eq. 28) for the subtree sums */
  for (int i = 0; i < nb; ++i) {
    const VEC *v = V + 6 * i, *hh = h + 3 * i, *Ib = I + 6 * i, mm = m[i];
    VEC* c = C + RD_NC * i;
    const VEC *w = v, *vl = v + 3;
    c[0] = mm;
    for (int r = 0; r < 3; ++r) c[1 + r] = hh[r];
    for (int r = 0; r < 6; ++r) c[4 + r] = Ib[r];
    /* rows of Ibar W: Ibar_r x w; Y11 = Ibar W + (Ibar W)^T + vl h^T + h vl^T - 2 (h.vl) 1 */
    const VEC Ifull[9] = {Ib[0], Ib[3], Ib[4], Ib[3], Ib[1], Ib[5], Ib[4], Ib[5], Ib[2]};
    VEC IW[9];
    for (int r = 0; r < 3; ++r) {
      const VEC* a = Ifull + 3 * r;
      IW[3 * r] = a[1] * w[2] - a[2] * w[1];
      IW[3 * r + 1] = a[2] * w[0] - a[0] * w[2];
      IW[3 * r + 2] = a[0] * w[1] - a[1] * w[0];
    }
    const VEC hv = hh[0] * vl[0] + hh[1] * vl[1] + hh[2] * vl[2];
    static const int rr[6] = {0, 1, 2, 0, 0, 1}, cc[6] = {0, 1, 2, 1, 2, 2};
    for (int e = 0; e < 6; ++e) {
      const int r = rr[e], k = cc[e];
      c[10 + e] = IW[3 * r + k] + IW[3 * k + r] + vl[r] * hh[k] + hh[r] * vl[k];
      if (r == k) c[10 + e] -= 2 * hv;
    }
    /* y = h x w - m vl; I v = [Ibar w + h x vl; m vl - h x w] */
    const VEC hw[3] = {hh[1] * w[2] - hh[2] * w[1], hh[2] * w[0] - hh[0] * w[2],
                       hh[0] * w[1] - hh[1] * w[0]};
    for (int r = 0; r < 3; ++r) c[16 + r] = hw[r] - mm * vl[r];
    IAPPLY(Ib, hh, mm, v, c + 19);
  }
  /* inwards (Alg. 1, line 22): subtree sums of I, B and the forces */
  for (int i = nb - 1; i >= 0; --i) {
    const int par = t->parent[i];
    if (par < 0) continue;
    for (int r = 0; r < RD_NC; ++r) C[RD_NC * par + r] += C[RD_NC * i + r];
    for (int r = 0; r < 6; ++r) F[6 * par + r] += F[6 * i + r];
  }
  /* per coordinate (Alg. 1, lines 4-7 and 13-16; Eq. 31) */
  const VEC zero6[6] = {0};
  VEC a0[6] = {0};
  for (int r = 0; r < 3; ++r) a0[3 + r] -= g[r];
  for (int i = 0; i < nb; ++i) {
    const int k = t->kind[i], nvj = k == KIND_ONE_DOF ? 1 : (k == KIND_FREE ? 6 : 3);
    const int vs = t->v_start[i], par = t->parent[i];
    const VEC *vb = V + 6 * i, *vp = par < 0 ? zero6 : V + 6 * par;
    const VEC* ap = par < 0 ? a0 : A + 6 * par;
    const VEC *c = C + RD_NC * i, *FC = F + 6 * i;
    const VEC *hC = c + 1, *IbC = c + 4, *Y11 = c + 10, *yC = c + 16, *IvC = c + 19, mC = c[0];
    for (int j = vs; j < vs + nvj; ++j) {
      const VEC* s = S + 6 * j;
      VEC *pd = Psid + 6 * j, *pdd = Psidd + 6 * j, *vd = Vd + 6 * j, t1[6], t2[6], t3[6];
      MCROSS(vp, s, pd);
      MCROSS(ap, s, t1);
      MCROSS(vp, pd, t2);
      for (int r = 0; r < 6; ++r) pdd[r] = t1[r] + t2[r];
      MCROSS(vb, s, t1);
      for (int r = 0; r < 6; ++r) vd[r] = pd[r] + t1[r];
      /* B x = -Y x + x x* (I v), B^T x = -Y x - x x* (I v) */
      IAPPLY(IbC, hC, mC, s, F1 + 6 * j);
      YAPPLY(Y11, yC, s, t1);
      FCROSS(s, IvC, t2);
      IAPPLY(IbC, hC, mC, vd, t3);
      for (int r = 0; r < 6; ++r) {
        F2[6 * j + r] = t2[r] - t1[r] + t3[r];
        F4[6 * j + r] = -t1[r] - t2[r];
      }
      YAPPLY(Y11, yC, pd, t1);
      FCROSS(pd, IvC, t2);
      IAPPLY(IbC, hC, mC, pdd, t3);
      VEC t4[6];
      FCROSS(s, FC, t4);
      for (int r = 0; r < 6; ++r) F3[6 * j + r] = t2[r] - t1[r] + t3[r] + t4[r];
    }
  }
  /* the pairs (Alg. 1, lines 17-20; Eqs. 30, 32): zeros where no body supports the other */
  const int with_m = outs[2] != NULL;
  for (int k = 0; k < 2 + with_m; ++k) {
    REAL* o = outs[k] + b0 * nn;
    for (int64_t e = 0; e < n * nn; ++e) o[e] = 0;
  }
#define RD_PUT(K, R, COL, X)                                         \
  {                                                                  \
    const VEC x_ = (X);                                              \
    REAL* o_ = outs[K] + b0 * nn + (int64_t)(R) * nv + (COL);        \
    for (int l = 0; l < n; ++l) o_[l * nn] = x_[l];                  \
  }
  for (int bj = 0; bj < nb; ++bj) {
    const int kj = t->kind[bj], nvj = kj == KIND_ONE_DOF ? 1 : (kj == KIND_FREE ? 6 : 3);
    const int vsj = t->v_start[bj];
    for (int j = vsj; j < vsj + nvj; ++j) {
      const VEC *f1 = F1 + 6 * j, *f2 = F2 + 6 * j, *f3 = F3 + 6 * j, *f4 = F4 + 6 * j;
      for (int a = bj; a >= 0; a = t->parent[a]) {
        const int ka = t->kind[a], nva = ka == KIND_ONE_DOF ? 1 : (ka == KIND_FREE ? 6 : 3);
        const int vsa = t->v_start[a];
        for (int i = vsa; i < vsa + nva; ++i) {
          const VEC* s = S + 6 * i;
          RD_PUT(0, j, i, DOT6(f1, Psidd + 6 * i) + DOT6(f4, Psid + 6 * i));
          RD_PUT(1, j, i, DOT6(f1, Vd + 6 * i) + DOT6(f4, s));
          if (a != bj) {
            RD_PUT(0, i, j, DOT6(s, f3));
            RD_PUT(1, i, j, DOT6(s, f2));
          }
          if (with_m) {
            const VEC mij = DOT6(s, f1);
            RD_PUT(2, i, j, mij);
            if (a != bj) RD_PUT(2, j, i, mij);
          }
        }
      }
      if (with_m && armature != NULL) {
        for (int l = 0; l < n; ++l)
          outs[2][(b0 + l) * nn + (int64_t)j * nv + j] +=
              armature[t->arm_rows ? (b0 + l) * nv + j : j];
      }
    }
  }
#undef RD_PUT
}

/* the whole batch of B samples, one block of LANES at a time */
RUN_LINKAGE int RDRUN(const crba_topo* t, int64_t B, const REAL* q, const REAL* qd, const REAL* qdd,
                 const REAL* fext, const REAL* XR, const REAL* Xp, const REAL* axis,
                 const REAL* mass, const REAL* com, const REAL* inertia, const REAL* armature,
                 const REAL* g, REAL* const* outs) {
  BATCH_BLOCKS(RDWORK(t), RDBLOCK(t, q, qd, qdd, fext, XR, Xp, axis, mass, com, inertia, armature, g, cst, outs, b, n, ws))
}

#undef RDBLOCK
#undef RDRUN
#undef RDWORK
#undef MCROSS
#undef FCROSS
#undef IAPPLY
#undef YAPPLY
#undef DOT6
#undef RD_NC

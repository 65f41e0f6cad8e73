/* One precision of jaxdyn_rnea (see _kernels.c), included by _crba_kernel.h inside its
 * precision (REAL, VEC, LANES, SUFFIX, CONSTANTS and KINEMATICS defined there).
 *
 * The recursive Newton-Euler algorithm (Featherstone 2008, Alg. 5.1 / Table 5.1) in world
 * coordinates (Featherstone 2008, Sec. 5.3; jaxdyn/algorithms/rnea.py, rnea_world), from the
 * same kinematics as CRBA's kernel (world placements from the root out, each body's inertia
 * about the world origin; the roots placed at the origin, which leaves tau unchanged):
 * outwards v_i = v_p + S_i qd_i, a_i = a_p + S_i qdd_i + v_p x S_i qd_i (a_root = -g), the
 * body forces f_i = I_i a_i + v_i x* I_i v_i - f_ext_i (f_ext given in body coordinates);
 * inwards the subtree forces F_p += F_i and tau_j = S_j . F_body(j) (+ armature_j qdd_j).
 * LANES samples at once, one per vector lane. */

#define RBLOCK CAT(rnea_block_, SUFFIX)
#define RRUN CAT(rnea_run_, SUFFIX)
#define RWORK CAT(rnea_workspace_, SUFFIX)
#define RFORWARD CAT(rnea_forward_, SUFFIX)

/* the outward pass shared by jaxdyn_rnea and jaxdyn_rnea_derivatives (_rnea_derivatives_kernel.h)
   on the kinematics of KINEMATICS: the block's samples of qd and qdd (B, nv) gathered into
   qdv and qddv (nv vectors each, one sample per lane; missing lanes repeat the last sample),
   then the world motion subspaces S (nv, 6), the body velocities V, accelerations A
   (a_root = -g) and forces F = I a + v x* I v - f_ext (nb, 6 each) */
static inline __attribute__((always_inline)) void RFORWARD(
    const crba_topo* t, const REAL* qd, const REAL* qdd, VEC* qdv, VEC* qddv, const REAL* fext,
    const REAL* axis, const REAL* g, const VEC* oR, const VEC* op, const VEC* h, const VEC* I,
    const VEC* m, int64_t b0, int n, VEC* S, VEC* V, VEC* A, VEC* F) {
  const int nb = t->nb, nv = t->nv;
  for (int l = 0; l < LANES; ++l) {
    const int64_t b = b0 + (l < n ? l : n - 1);
    for (int j = 0; j < nv; ++j) {
      qdv[j][l] = qd[b * nv + j];
      qddv[j][l] = qdd[b * nv + j];
    }
  }
  for (int i = 0; i < nb; ++i) {
    const int k = t->kind[i], nvj = k == KIND_ONE_DOF ? 1 : (k == KIND_FREE ? 6 : 3);
    const int vs = t->v_start[i], par = t->parent[i];
    VEC vJ[6], aS[6];
    for (int r = 0; r < 6; ++r) vJ[r] = aS[r] = (VEC){0};
    const VEC *Ri = oR + 9 * i, *pi = op + 3 * i;
    for (int j = 0; j < nvj; ++j) {
      /* the world motion subspace of coordinate vs + j from its axis row (every kind: the
         model's axes of a spherical or free joint too, as XLA's code reads them) */
      const REAL* ax = axis + 6 * (vs + j);
      VEC* s = S + 6 * (vs + j);
      VEC u[3];
      for (int r = 0; r < 3; ++r) {
        s[r] = Ri[3 * r] * ax[0] + Ri[3 * r + 1] * ax[1] + Ri[3 * r + 2] * ax[2];
        u[r] = Ri[3 * r] * ax[3] + Ri[3 * r + 1] * ax[4] + Ri[3 * r + 2] * ax[5];
      }
      s[3] = u[0] + pi[1] * s[2] - pi[2] * s[1];
      s[4] = u[1] + pi[2] * s[0] - pi[0] * s[2];
      s[5] = u[2] + pi[0] * s[1] - pi[1] * s[0];
      for (int r = 0; r < 6; ++r) {
        vJ[r] += s[r] * qdv[vs + j];
        aS[r] += s[r] * qddv[vs + j];
      }
    }
    VEC *v = V + 6 * i, *a = A + 6 * i, *f = F + 6 * i;
    if (par < 0) { /* the world: at rest, accelerating by -g */
      for (int r = 0; r < 3; ++r) {
        v[r] = vJ[r], v[3 + r] = vJ[3 + r];
        a[r] = aS[r], a[3 + r] = aS[3 + r] - g[r];
      }
    } else {
      const VEC *vp = V + 6 * par, *ap = A + 6 * par;
      /* v_p x vJ = [wp x wJ; wp x uJ + up x wJ] */
      const VEC c[6] = {vp[1] * vJ[2] - vp[2] * vJ[1],
                        vp[2] * vJ[0] - vp[0] * vJ[2],
                        vp[0] * vJ[1] - vp[1] * vJ[0],
                        vp[1] * vJ[5] - vp[2] * vJ[4] + vp[4] * vJ[2] - vp[5] * vJ[1],
                        vp[2] * vJ[3] - vp[0] * vJ[5] + vp[5] * vJ[0] - vp[3] * vJ[2],
                        vp[0] * vJ[4] - vp[1] * vJ[3] + vp[3] * vJ[1] - vp[4] * vJ[0]};
      for (int r = 0; r < 6; ++r) {
        v[r] = vp[r] + vJ[r];
        a[r] = ap[r] + aS[r] + c[r];
      }
    }
    /* f = I a + v x* (I v), I = [[Ibar, [h]x], [[h]x^T, m 1]] about the world origin */
    const VEC *Ii = I + 6 * i, *hh = h + 3 * i, mm = m[i];
    VEC Ia[6], Iv[6];
    for (int pass = 0; pass < 2; ++pass) {
      const VEC* x = pass ? v : a;
      VEC* y = pass ? Iv : Ia;
      y[0] = Ii[0] * x[0] + Ii[3] * x[1] + Ii[4] * x[2] + hh[1] * x[5] - hh[2] * x[4];
      y[1] = Ii[3] * x[0] + Ii[1] * x[1] + Ii[5] * x[2] + hh[2] * x[3] - hh[0] * x[5];
      y[2] = Ii[4] * x[0] + Ii[5] * x[1] + Ii[2] * x[2] + hh[0] * x[4] - hh[1] * x[3];
      y[3] = mm * x[3] - (hh[1] * x[2] - hh[2] * x[1]);
      y[4] = mm * x[4] - (hh[2] * x[0] - hh[0] * x[2]);
      y[5] = mm * x[5] - (hh[0] * x[1] - hh[1] * x[0]);
    }
    /* v x* y = [w x yn + u x yf; w x yf] */
    f[0] = Ia[0] + v[1] * Iv[2] - v[2] * Iv[1] + v[4] * Iv[5] - v[5] * Iv[4];
    f[1] = Ia[1] + v[2] * Iv[0] - v[0] * Iv[2] + v[5] * Iv[3] - v[3] * Iv[5];
    f[2] = Ia[2] + v[0] * Iv[1] - v[1] * Iv[0] + v[3] * Iv[4] - v[4] * Iv[3];
    f[3] = Ia[3] + v[1] * Iv[5] - v[2] * Iv[4];
    f[4] = Ia[4] + v[2] * Iv[3] - v[0] * Iv[5];
    f[5] = Ia[5] + v[0] * Iv[4] - v[1] * Iv[3];
    if (fext != NULL) {
      /* [n; f] at the body's origin in its axes -> at the world origin: (R n + p x R f, R f) */
      VEC e[6];
      for (int l = 0; l < LANES; ++l) {
        const int64_t b = b0 + (l < n ? l : n - 1);
        for (int r = 0; r < 6; ++r) e[r][l] = fext[(b * nb + i) * 6 + r];
      }
      const VEC *R = oR + 9 * i, *p = op + 3 * i;
      VEC Rn[3], Rf[3];
      for (int r = 0; r < 3; ++r) {
        Rn[r] = R[3 * r] * e[0] + R[3 * r + 1] * e[1] + R[3 * r + 2] * e[2];
        Rf[r] = R[3 * r] * e[3] + R[3 * r + 1] * e[4] + R[3 * r + 2] * e[5];
      }
      f[0] -= Rn[0] + p[1] * Rf[2] - p[2] * Rf[1];
      f[1] -= Rn[1] + p[2] * Rf[0] - p[0] * Rf[2];
      f[2] -= Rn[2] + p[0] * Rf[1] - p[1] * Rf[0];
      for (int r = 0; r < 3; ++r) f[3 + r] -= Rf[r];
    }
  }
}

/* the workspace of one block, in VEC units */
static size_t RWORK(const crba_topo* t) {
  const size_t nb = t->nb, nv = t->nv;
  return nb * (9 + 3 + 3 + 6 + 1) + nb * 6 * 3 + nv * 6 + nv * 2 + (size_t)t->nq;
}

/* samples [b0, b0 + n) of the batch (n <= LANES; missing lanes repeat the last sample);
   fext (B, nb, 6) or NULL, g the gravity vector (3) */
CLONES static void RBLOCK(const crba_topo* t, const REAL* q, const REAL* qd, const REAL* qdd,
                          const REAL* fext, const REAL* XR, const REAL* Xp, const REAL* axis,
                          const REAL* mass, const REAL* com, const REAL* inertia,
                          const REAL* armature, const REAL* g, const REAL* cst, REAL* out,
                          int64_t b0, int n, VEC* ws) {
  const int nb = t->nb, nv = t->nv;
  VEC *oR = ws, *op = oR + 9 * nb, *h = op + 3 * nb, *I = h + 3 * nb, *m = I + 6 * nb;
  VEC *V = m + nb, *A = V + 6 * nb, *F = A + 6 * nb, *S = F + 6 * nb, *qdv = S + 6 * nv;
  VEC *qddv = qdv + nv, *qv = qddv + nv;
  KINEMATICS(t, q, XR, Xp, mass, com, inertia, cst, b0, n, oR, op, h, I, m, qv);
  /* outwards: velocities, accelerations and body forces */
  RFORWARD(t, qd, qdd, qdv, qddv, fext, axis, g, oR, op, h, I, m, b0, n, S, V, A, F);
  /* inwards: subtree forces, tau = S^T F (bodies come after their parents) */
  for (int i = nb - 1; i >= 0; --i) {
    const int k = t->kind[i], nvj = k == KIND_ONE_DOF ? 1 : (k == KIND_FREE ? 6 : 3);
    const int vs = t->v_start[i], par = t->parent[i];
    const VEC* f = F + 6 * i;
    for (int j = 0; j < nvj; ++j) {
      const VEC* s = S + 6 * (vs + j);
      VEC x = s[0] * f[0] + s[1] * f[1] + s[2] * f[2] + s[3] * f[3] + s[4] * f[4] + s[5] * f[5];
      if (armature != NULL) x += ARMV(t, armature, vs + j, b0, n) * qddv[vs + j];
      for (int l = 0; l < n; ++l) out[(b0 + l) * nv + vs + j] = x[l];
    }
    if (par >= 0)
      for (int r = 0; r < 6; ++r) F[6 * par + r] += f[r];
  }
}

/* the whole batch of B samples, one block of LANES at a time */
RUN_LINKAGE int RRUN(const crba_topo* t, int64_t B, const REAL* q, const REAL* qd, const REAL* qdd,
                const REAL* fext, const REAL* XR, const REAL* Xp, const REAL* axis,
                const REAL* mass, const REAL* com, const REAL* inertia, const REAL* armature,
                const REAL* g, REAL* const* outs) {
  REAL* out = outs[0]; /* the one result */
  BATCH_BLOCKS(RWORK(t), RBLOCK(t, q, qd, qdd, fext, XR, Xp, axis, mass, com, inertia, armature, g, cst, out, b, n, ws))
}

#undef RBLOCK
#undef RRUN
#undef RWORK

/* One precision of jaxdyn_aba (see _kernels.c), included by _crba_kernel.h inside its
 * precision (REAL, VEC, LANES, SUFFIX, KINEMATICS, SUBSPACE and, from _minv_kernel.h, the
 * small LDL inverse defined there).
 *
 * The articulated-body algorithm (Featherstone 2008, Alg. 7.1 / RBDA Table 7.1;
 * jaxdyn/algorithms/aba.py) in world coordinates, from the same kinematics as CRBA's kernel
 * (roots at the origin, as jaxdyn's centred world state): body velocities v, the
 * velocity-product accelerations c = v x vJ and the bias forces pA = v x* (I v) - f_ext from
 * the root out; U = IA S, D = S^T U (+ armature), u = tau - S^T pA, and the articulated
 * inertia IA - U D^-1 U^T and bias force pA + Ia c + U D^-1 u added to the parent's from the
 * leaves in (ground coordinates: no transform); qdd = D^-1 (u - U^T a) and a = a_parent + c
 * + S qdd from the root out, with a_0 = -[0; g]. LANES samples at once, one per vector lane.
 */

#define ABLOCK CAT(aba_block_, SUFFIX)
#define ARUN CAT(aba_run_, SUFFIX)
#define AWORK CAT(aba_workspace_, SUFFIX)

/* the workspace of one block, in VEC units */
static size_t AWORK(const crba_topo* t) {
  const size_t nb = t->nb, nv = t->nv;
  return nb * (9 + 3 + 3 + 6 + 1 + 36 + 6 * 4) + nv * (6 * 3 + 4) + (size_t)t->nq;
}

/* samples [b0, b0 + n) of the batch (n <= LANES; missing lanes repeat the last sample) */
CLONES static void ABLOCK(const crba_topo* t, const REAL* q, const REAL* qd, const REAL* tau,
                          const REAL* fext, const REAL* XR, const REAL* Xp, const REAL* axis,
                          const REAL* mass, const REAL* com, const REAL* inertia,
                          const REAL* armature, const REAL* gravity, const REAL* cst,
                          REAL* out, int64_t b0, int n, VEC* ws) {
  const int nb = t->nb, nv = t->nv;
  VEC *oR = ws, *op = oR + 9 * nb, *h = op + 3 * nb, *I = h + 3 * nb, *m = I + 6 * nb;
  VEC *IA = m + nb, *vb = IA + 36 * nb, *c = vb + 6 * nb, *pA = c + 6 * nb, *a = pA + 6 * nb;
  VEC *S = a + 6 * nb, *U = S + 6 * nv, *Dv = U + 6 * nv, *qdv = Dv + 6 * nv, *uv = qdv + nv;
  VEC *tv = uv + nv, *qdd = tv + nv, *qv = qdd + nv;
  KINEMATICS(t, q, XR, Xp, mass, com, inertia, cst, b0, n, oR, op, h, I, m, qv);
  for (int l = 0; l < LANES; ++l) {
    const int64_t b = b0 + (l < n ? l : n - 1);
    for (int j = 0; j < nv; ++j) {
      qdv[j][l] = qd[b * nv + j];
      tv[j][l] = tau[b * nv + j];
    }
  }
  /* outwards: subspaces, velocities, c = v x vJ, the spatial inertias and pA = v x* (I v) */
  for (int i = 0; i < nb; ++i) {
    const int kd = t->kind[i], k = kd == KIND_ONE_DOF ? 1 : (kd == KIND_FREE ? 6 : 3);
    const int vs = t->v_start[i], par = t->parent[i];
    VEC vJ[6] = {0};
    for (int j = 0; j < k; ++j) {
      VEC* Sd = S + 6 * (vs + j);
      SUBSPACE(t, axis, oR, op, i, j, Sd, Sd + 3);
      for (int r = 0; r < 6; ++r) vJ[r] += Sd[r] * qdv[vs + j];
    }
    VEC* v = vb + 6 * i;
    for (int r = 0; r < 6; ++r) v[r] = par < 0 ? vJ[r] : vb[6 * par + r] + vJ[r];
    VEC* ci = c + 6 * i; /* v x vJ: [w x wJ; w x vJl + vl x wJ] */
    ci[0] = v[1] * vJ[2] - v[2] * vJ[1];
    ci[1] = v[2] * vJ[0] - v[0] * vJ[2];
    ci[2] = v[0] * vJ[1] - v[1] * vJ[0];
    ci[3] = v[1] * vJ[5] - v[2] * vJ[4] + v[4] * vJ[2] - v[5] * vJ[1];
    ci[4] = v[2] * vJ[3] - v[0] * vJ[5] + v[5] * vJ[0] - v[3] * vJ[2];
    ci[5] = v[0] * vJ[4] - v[1] * vJ[3] + v[3] * vJ[1] - v[4] * vJ[0];
    /* the spatial inertia about the world origin (angular rows first): [[Ibar, [h]x],
       [[h]x^T, m 1]] */
    VEC* X = IA + 36 * i;
    const VEC *Ii = I + 6 * i, *hh = h + 3 * i;
    static const int sym[9] = {0, 3, 4, 3, 1, 5, 4, 5, 2};
    for (int r = 0; r < 3; ++r)
      for (int cc = 0; cc < 3; ++cc) {
        X[6 * r + cc] = Ii[sym[3 * r + cc]];
        X[6 * (r + 3) + cc + 3] = (r == cc) ? m[i] : (VEC){0};
      }
    const VEC hx[9] = {(VEC){0}, -hh[2], hh[1], hh[2], (VEC){0}, -hh[0], -hh[1], hh[0], (VEC){0}};
    for (int r = 0; r < 3; ++r)
      for (int cc = 0; cc < 3; ++cc) {
        X[6 * r + cc + 3] = hx[3 * r + cc];
        X[6 * (cc + 3) + r] = hx[3 * r + cc];
      }
    VEC f[6]; /* I v */
    f[0] = Ii[0] * v[0] + Ii[3] * v[1] + Ii[4] * v[2] + hh[1] * v[5] - hh[2] * v[4];
    f[1] = Ii[3] * v[0] + Ii[1] * v[1] + Ii[5] * v[2] + hh[2] * v[3] - hh[0] * v[5];
    f[2] = Ii[4] * v[0] + Ii[5] * v[1] + Ii[2] * v[2] + hh[0] * v[4] - hh[1] * v[3];
    f[3] = m[i] * v[3] - (hh[1] * v[2] - hh[2] * v[1]);
    f[4] = m[i] * v[4] - (hh[2] * v[0] - hh[0] * v[2]);
    f[5] = m[i] * v[5] - (hh[0] * v[1] - hh[1] * v[0]);
    VEC* p = pA + 6 * i; /* v x* f: [w x n + vl x fl; w x fl] */
    p[0] = v[1] * f[2] - v[2] * f[1] + v[4] * f[5] - v[5] * f[4];
    p[1] = v[2] * f[0] - v[0] * f[2] + v[5] * f[3] - v[3] * f[5];
    p[2] = v[0] * f[1] - v[1] * f[0] + v[3] * f[4] - v[4] * f[3];
    p[3] = v[1] * f[5] - v[2] * f[4];
    p[4] = v[2] * f[3] - v[0] * f[5];
    p[5] = v[0] * f[4] - v[1] * f[3];
    if (fext != NULL) {
      /* the body-frame force at the world origin: fl = R f_lin, n = R f_ang + p x fl */
      VEC fe[6];
      for (int l = 0; l < LANES; ++l) {
        const REAL* fb = fext + ((b0 + (l < n ? l : n - 1)) * nb + i) * 6;
        for (int r = 0; r < 6; ++r) fe[r][l] = fb[r];
      }
      const VEC *R = oR + 9 * i, *o = op + 3 * i;
      VEC fl[3], nw[3];
      for (int r = 0; r < 3; ++r) {
        fl[r] = R[3 * r] * fe[3] + R[3 * r + 1] * fe[4] + R[3 * r + 2] * fe[5];
        nw[r] = R[3 * r] * fe[0] + R[3 * r + 1] * fe[1] + R[3 * r + 2] * fe[2];
      }
      nw[0] += o[1] * fl[2] - o[2] * fl[1];
      nw[1] += o[2] * fl[0] - o[0] * fl[2];
      nw[2] += o[0] * fl[1] - o[1] * fl[0];
      for (int r = 0; r < 3; ++r) {
        p[r] -= nw[r];
        p[3 + r] -= fl[r];
      }
    }
  }
  /* inwards: U = IA S, D = S^T U, u = tau - S^T pA; Ia = IA - U D^-1 U^T and
     pa = pA + Ia c + U D^-1 u to the parent */
  for (int i = nb - 1; i >= 0; --i) {
    const int kd = t->kind[i], k = kd == KIND_ONE_DOF ? 1 : (kd == KIND_FREE ? 6 : 3);
    const int vs = t->v_start[i], par = t->parent[i];
    VEC* X = IA + 36 * i;
    const VEC* p = pA + 6 * i;
    VEC D[36];
    for (int j = 0; j < k; ++j) {
      const VEC* s = S + 6 * (vs + j);
      VEC* u = U + 6 * (vs + j);
      for (int r = 0; r < 6; ++r)
        u[r] = X[6 * r] * s[0] + X[6 * r + 1] * s[1] + X[6 * r + 2] * s[2] + X[6 * r + 3] * s[3]
               + X[6 * r + 4] * s[4] + X[6 * r + 5] * s[5];
      uv[vs + j] = tv[vs + j] - (s[0] * p[0] + s[1] * p[1] + s[2] * p[2] + s[3] * p[3]
                                 + s[4] * p[4] + s[5] * p[5]);
    }
    for (int j = 0; j < k; ++j)
      for (int b = 0; b < k; ++b) {
        const VEC *s = S + 6 * (vs + j), *u = U + 6 * (vs + b);
        D[6 * j + b] = s[0] * u[0] + s[1] * u[1] + s[2] * u[2] + s[3] * u[3] + s[4] * u[4]
                       + s[5] * u[5];
        if (j == b && armature != NULL) D[6 * j + b] += ARMV(t, armature, vs + j, b0, n);
      }
    VEC* Di = Dv + 6 * vs; /* row j of D^-1 at Di + 6 j */
    if (k == 1) {
      Di[0] = 1 / D[0];
    } else {
      VEC Dinv[36];
      CAT(ldl_inverse_, SUFFIX)(k, D, Dinv);
      for (int j = 0; j < k; ++j)
        for (int b = 0; b < k; ++b) Di[6 * j + b] = Dinv[6 * j + b];
    }
    if (par < 0) continue;
    VEC UD[36], Du[6]; /* U D^-1 (6 x k), D^-1 u */
    for (int j = 0; j < k; ++j) {
      VEC y = Di[6 * j] * uv[vs];
      for (int b = 1; b < k; ++b) y += Di[6 * j + b] * uv[vs + b];
      Du[j] = y;
    }
    for (int r = 0; r < 6; ++r)
      for (int b = 0; b < k; ++b) {
        VEC y = U[6 * vs + r] * Di[b];
        for (int j = 1; j < k; ++j) y += U[6 * (vs + j) + r] * Di[6 * j + b];
        UD[6 * r + b] = y;
      }
    /* Ia = IA - U D^-1 U^T (symmetric: the upper triangle, mirrored); an exact zero across a
       free joint without armature (as aba.articulated_body_step: not IA - IA's rounding) */
    const int none = kd == KIND_FREE && armature == NULL;
    for (int r = 0; r < 6; ++r)
      for (int cc = r; cc < 6; ++cc) {
        VEC y = UD[6 * r] * U[6 * vs + cc];
        for (int b = 1; b < k; ++b) y += UD[6 * r + b] * U[6 * (vs + b) + cc];
        X[6 * r + cc] = none ? (VEC){0} : X[6 * r + cc] - y;
        X[6 * cc + r] = X[6 * r + cc];
      }
    VEC* P = IA + 36 * par;
    VEC* pp = pA + 6 * par;
    const VEC* ci = c + 6 * i;
    for (int r = 0; r < 6; ++r) {
      VEC y = p[r] + X[6 * r] * ci[0] + X[6 * r + 1] * ci[1] + X[6 * r + 2] * ci[2]
              + X[6 * r + 3] * ci[3] + X[6 * r + 4] * ci[4] + X[6 * r + 5] * ci[5];
      for (int j = 0; j < k; ++j) y += U[6 * (vs + j) + r] * Du[j];
      pp[r] += y;
      for (int cc = 0; cc < 6; ++cc) P[6 * r + cc] += X[6 * r + cc];
    }
  }
  /* outwards: a = a_parent + c, qdd = D^-1 (u - U^T a), a += S qdd */
  for (int i = 0; i < nb; ++i) {
    const int kd = t->kind[i], k = kd == KIND_ONE_DOF ? 1 : (kd == KIND_FREE ? 6 : 3);
    const int vs = t->v_start[i], par = t->parent[i];
    const VEC* ci = c + 6 * i;
    VEC* ai = a + 6 * i;
    for (int r = 0; r < 6; ++r) {
      const VEC ap = par >= 0 ? a[6 * par + r] : (VEC){0} - (r < 3 ? 0 : gravity[r - 3]);
      ai[r] = ap + ci[r];
    }
    VEC y[6];
    for (int j = 0; j < k; ++j) {
      const VEC* u = U + 6 * (vs + j);
      y[j] = uv[vs + j] - (u[0] * ai[0] + u[1] * ai[1] + u[2] * ai[2] + u[3] * ai[3]
                           + u[4] * ai[4] + u[5] * ai[5]);
    }
    const VEC* Di = Dv + 6 * vs;
    for (int j = 0; j < k; ++j) {
      VEC z = Di[6 * j] * y[0];
      for (int b = 1; b < k; ++b) z += Di[6 * j + b] * y[b];
      qdd[vs + j] = z;
      const VEC* s = S + 6 * (vs + j);
      for (int r = 0; r < 6; ++r) ai[r] += s[r] * z;
    }
  }
  for (int l = 0; l < n; ++l)
    for (int j = 0; j < nv; ++j) out[(size_t)(b0 + l) * nv + j] = qdd[j][l];
}

/* the whole batch of B samples, one block of LANES at a time; fext NULL where absent */
RUN_LINKAGE int ARUN(const crba_topo* t, int64_t B, const REAL* q, const REAL* qd, const REAL* tau,
                const REAL* fext, const REAL* XR, const REAL* Xp, const REAL* axis,
                const REAL* mass, const REAL* com, const REAL* inertia, const REAL* armature,
                const REAL* gravity, REAL* const* outs) {
  REAL* out = outs[0]; /* the one result */
  BATCH_BLOCKS(AWORK(t), ABLOCK(t, q, qd, tau, fext, XR, Xp, axis, mass, com, inertia, armature, gravity, cst, out, b, n, ws))
}

#undef ABLOCK
#undef ARUN
#undef AWORK

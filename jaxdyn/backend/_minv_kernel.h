/* One precision of jaxdyn_minv (see _kernels.c), included by _crba_kernel.h inside its
 * precision (REAL, VEC, LANES, SUFFIX, KINEMATICS and SUBSPACE defined there).
 *
 * The analytic inverse of the joint-space inertia matrix (Carpentier 2018; Pinocchio's
 * computeMinverse; jaxdyn/algorithms/minv.py) in world coordinates, from the same kinematics
 * as CRBA's kernel: the articulated inertias and, on the columns of each body's subtree, the
 * forces F (one 6 x nv array shared by the whole pass: a column is written only by the
 * ancestors of its body, leaves first) inwards; the rows Minv[J_i, c >= v_i] and the
 * accelerations A_i = A_parent + S_i Minv[J_i, :] outwards, in depth-first order so that a
 * body's parent's accelerations are those of the previous depth. LANES samples at once, one
 * per vector lane. */

#define MBLOCK CAT(minv_block_, SUFFIX)
#define MRUN CAT(minv_run_, SUFFIX)
#define MWORK CAT(minv_workspace_, SUFFIX)
#define MTABLES CAT(minv_tables_, SUFFIX)
#define LDL_INV CAT(ldl_inverse_, SUFFIX)

/* Dinv = D^-1 of the symmetric positive definite k x k D (k <= 6; rows of 6), by D = L diag(d)
   L^T (no square roots) and k solves */
static inline __attribute__((always_inline)) void LDL_INV(int k, const VEC* D, VEC* Dinv) {
  VEC L[36], d[6], dinv[6];
  for (int j = 0; j < k; ++j) {
    VEC x = D[6 * j + j];
    for (int p = 0; p < j; ++p) x -= L[6 * j + p] * L[6 * j + p] * d[p];
    d[j] = x;
    dinv[j] = 1 / x;
    for (int i = j + 1; i < k; ++i) {
      VEC y = D[6 * i + j];
      for (int p = 0; p < j; ++p) y -= L[6 * i + p] * L[6 * j + p] * d[p];
      L[6 * i + j] = y * dinv[j];
    }
  }
  for (int c = 0; c < k; ++c) {
    VEC y[6];
    for (int i = 0; i < k; ++i) {
      y[i] = (VEC){0} + (REAL)(i == c);
      for (int p = 0; p < i; ++p) y[i] -= L[6 * i + p] * y[p];
    }
    for (int i = 0; i < k; ++i) y[i] *= dinv[i];
    for (int i = k - 1; i >= 0; --i) {
      for (int p = i + 1; p < k; ++p) y[i] -= L[6 * p + i] * y[p];
      Dinv[6 * i + c] = y[i];
    }
  }
}

/* the workspace of one block, in VEC units */
static size_t MWORK(const crba_topo* t, int levels) {
  const size_t nb = t->nb, nv = t->nv;
  return nb * (9 + 3 + 3 + 6 + 1 + 36) + nv * 6 * 4 + nv * nv + (size_t)levels * nv * 6
         + (size_t)t->nq;
}

/* samples [b0, b0 + n) of the batch (n <= LANES; missing lanes repeat the last sample);
   row0[r]: the first pair of row r (pairs sorted by row, then column), depth[i]: body i's */
CLONES static void MBLOCK(const crba_topo* t, const REAL* q, const REAL* XR, const REAL* Xp,
                          const REAL* axis, const REAL* mass, const REAL* com,
                          const REAL* inertia, const REAL* armature, const REAL* cst,
                          const int32_t* row0, const int32_t* depth, int levels, REAL* out,
                          int64_t b0, int n, VEC* ws) {
  const int nb = t->nb, nv = t->nv;
  VEC *oR = ws, *op = oR + 9 * nb, *h = op + 3 * nb, *I = h + 3 * nb, *m = I + 6 * nb;
  VEC *IA = m + nb, *S = IA + 36 * nb, *U = S + 6 * nv, *Dv = U + 6 * nv, *Fg = Dv + 6 * nv;
  VEC *Mw = Fg + 6 * nv, *A = Mw + (size_t)nv * nv, *qv = A + (size_t)levels * nv * 6;
  KINEMATICS(t, q, XR, Xp, mass, com, inertia, cst, b0, n, oR, op, h, I, m, qv);
  /* each body's spatial inertia about the world origin (angular rows first): [[Ibar, [h]x],
     [[h]x^T, m 1]], and the motion subspaces */
  for (int i = 0; i < nb; ++i) {
    VEC* X = IA + 36 * i;
    const VEC *Ii = I + 6 * i, *hh = h + 3 * i;
    static const int sym[9] = {0, 3, 4, 3, 1, 5, 4, 5, 2};
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) {
        X[6 * r + c] = Ii[sym[3 * r + c]];
        X[6 * (r + 3) + c + 3] = (r == c) ? m[i] : (VEC){0};
      }
    const VEC hx[9] = {(VEC){0}, -hh[2], hh[1], hh[2], (VEC){0}, -hh[0], -hh[1], hh[0], (VEC){0}};
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) {
        X[6 * r + c + 3] = hx[3 * r + c];
        X[6 * (c + 3) + r] = hx[3 * r + c];
      }
    const int k = t->kind[i], nvj = k == KIND_ONE_DOF ? 1 : (k == KIND_FREE ? 6 : 3);
    for (int j = 0; j < nvj; ++j) {
      VEC* Sd = S + 6 * (t->v_start[i] + j);
      SUBSPACE(t, axis, oR, op, i, j, Sd, Sd + 3);
    }
  }
  for (size_t e = 0; e < (size_t)nv * 6; ++e) Fg[e] = (VEC){0};
  for (size_t e = 0; e < (size_t)nv * nv; ++e) Mw[e] = (VEC){0};
  /* inwards: U = IA S, D = S^T U, Minv[J_i, subtree] and the forces F; IA - U D^-1 U^T to
     the parent */
  for (int i = nb - 1; i >= 0; --i) {
    const int kd = t->kind[i], k = kd == KIND_ONE_DOF ? 1 : (kd == KIND_FREE ? 6 : 3);
    const int vs = t->v_start[i], par = t->parent[i];
    const VEC* X = IA + 36 * i;
    for (int a = 0; a < k; ++a) {
      const VEC* s = S + 6 * (vs + a);
      VEC* u = U + 6 * (vs + a);
      for (int r = 0; r < 6; ++r)
        u[r] = X[6 * r] * s[0] + X[6 * r + 1] * s[1] + X[6 * r + 2] * s[2] + X[6 * r + 3] * s[3]
               + X[6 * r + 4] * s[4] + X[6 * r + 5] * s[5];
    }
    VEC D[36];
    for (int a = 0; a < k; ++a)
      for (int b = 0; b < k; ++b) {
        const VEC *s = S + 6 * (vs + a), *u = U + 6 * (vs + b);
        D[6 * a + b] = s[0] * u[0] + s[1] * u[1] + s[2] * u[2] + s[3] * u[3] + s[4] * u[4]
                       + s[5] * u[5];
        if (a == b && armature != NULL) D[6 * a + b] += ARMV(t, armature, vs + a, b0, n);
      }
    VEC* Di = Dv + 6 * vs; /* row a of D^-1 at Di + 6 a */
    if (k == 1) {
      Di[0] = 1 / D[0];
    } else {
      VEC Dinv[36];
      LDL_INV(k, D, Dinv);
      for (int a = 0; a < k; ++a)
        for (int b = 0; b < k; ++b) Di[6 * a + b] = Dinv[6 * a + b];
    }
    if (k == 1) { /* one-DoF joints (most): the loop below with k = 1 written out */
      const VEC *s = S + 6 * vs, *u = U + 6 * vs, d = Di[0];
      VEC* Mr = Mw + (size_t)vs * nv;
      for (int e = row0[vs]; e < row0[vs + 1]; ++e) {
        const int c = t->pair_c[e];
        VEC* Fc = Fg + 6 * c;
        const VEC mc = c == vs ? d
                               : -d * (s[0] * Fc[0] + s[1] * Fc[1] + s[2] * Fc[2] + s[3] * Fc[3]
                                       + s[4] * Fc[4] + s[5] * Fc[5]);
        Mr[c] = mc;
        for (int r = 0; r < 6; ++r) Fc[r] += u[r] * mc;
      }
    }
    for (int e = row0[vs]; k > 1 && e < row0[vs + 1]; ++e) {
      const int c = t->pair_c[e];
      VEC mc[6];
      VEC* Fc = Fg + 6 * c;
      if (c < vs + k) {
        for (int a = 0; a < k; ++a) mc[a] = Di[6 * a + c - vs];
      } else {
        VEC x[6];
        for (int b = 0; b < k; ++b) {
          const VEC* s = S + 6 * (vs + b);
          x[b] = s[0] * Fc[0] + s[1] * Fc[1] + s[2] * Fc[2] + s[3] * Fc[3] + s[4] * Fc[4]
                 + s[5] * Fc[5];
        }
        for (int a = 0; a < k; ++a) {
          VEC y = Di[6 * a] * x[0];
          for (int b = 1; b < k; ++b) y += Di[6 * a + b] * x[b];
          mc[a] = -y;
        }
      }
      for (int a = 0; a < k; ++a) {
        Mw[(size_t)(vs + a) * nv + c] = mc[a];
        const VEC* u = U + 6 * (vs + a);
        for (int r = 0; r < 6; ++r) Fc[r] += u[r] * mc[a];
      }
    }
    if (par >= 0) {
      VEC* P = IA + 36 * par;
      VEC UD[36]; /* U D^-1, 6 x k */
      for (int r = 0; r < 6; ++r)
        for (int b = 0; b < k; ++b) {
          VEC y = U[6 * vs + r] * Di[b];
          for (int a = 1; a < k; ++a) y += U[6 * (vs + a) + r] * Di[6 * a + b];
          UD[6 * r + b] = y;
        }
      for (int r = 0; r < 6; ++r)
        for (int c = 0; c < 6; ++c) {
          VEC y = UD[6 * r] * U[6 * vs + c];
          for (int b = 1; b < k; ++b) y += UD[6 * r + b] * U[6 * (vs + b) + c];
          P[6 * r + c] += X[6 * r + c] - y;
        }
    }
  }
  /* outwards, depth first: Minv[J_i, c] -= D^-1 U^T A_parent[:, c] and A_i = A_parent + S_i
     Minv[J_i, :] on the columns c >= v_i */
  for (int o = 0; o < nb; ++o) {
    const int i = t->order[o];
    const int kd = t->kind[i], k = kd == KIND_ONE_DOF ? 1 : (kd == KIND_FREE ? 6 : 3);
    const int vs = t->v_start[i], par = t->parent[i];
    const VEC* Di = Dv + 6 * vs;
    VEC* Ai = A + (size_t)depth[i] * nv * 6;
    const VEC* Ap = par >= 0 ? A + (size_t)depth[par] * nv * 6 : NULL;
    if (k == 1 && Ap != NULL) { /* one-DoF joints (most): the loop below with k = 1 */
      const VEC *s = S + 6 * vs, *u = U + 6 * vs, d = Di[0];
      VEC* Mr = Mw + (size_t)vs * nv;
      for (int c = vs; c < nv; ++c) {
        const VEC *pc = Ap + 6 * c;
        VEC* ac = Ai + 6 * c;
        const VEC mc = Mr[c] - d * (u[0] * pc[0] + u[1] * pc[1] + u[2] * pc[2] + u[3] * pc[3]
                                    + u[4] * pc[4] + u[5] * pc[5]);
        Mr[c] = mc;
        for (int r = 0; r < 6; ++r) ac[r] = pc[r] + s[r] * mc;
      }
      continue;
    }
    for (int c = vs; c < nv; ++c) {
      VEC mc[6];
      VEC* ac = Ai + 6 * c;
      if (Ap != NULL) {
        const VEC* pc = Ap + 6 * c;
        VEC y[6];
        for (int b = 0; b < k; ++b) {
          const VEC* u = U + 6 * (vs + b);
          y[b] = u[0] * pc[0] + u[1] * pc[1] + u[2] * pc[2] + u[3] * pc[3] + u[4] * pc[4]
                 + u[5] * pc[5];
        }
        for (int a = 0; a < k; ++a) {
          VEC z = Di[6 * a] * y[0];
          for (int b = 1; b < k; ++b) z += Di[6 * a + b] * y[b];
          mc[a] = Mw[(size_t)(vs + a) * nv + c] - z;
          Mw[(size_t)(vs + a) * nv + c] = mc[a];
        }
        for (int r = 0; r < 6; ++r) ac[r] = pc[r];
      } else {
        for (int a = 0; a < k; ++a) mc[a] = Mw[(size_t)(vs + a) * nv + c];
        for (int r = 0; r < 6; ++r) ac[r] = (VEC){0};
      }
      for (int a = 0; a < k; ++a) {
        const VEC* s = S + 6 * (vs + a);
        for (int r = 0; r < 6; ++r) ac[r] += s[r] * mc[a];
      }
    }
  }
  /* the rows' entries c >= r into both triangles, sample by sample */
  const size_t nn = (size_t)nv * nv;
  for (int l = 0; l < n; ++l) {
    REAL* ob = out + (size_t)(b0 + l) * nn;
    for (int r = 0; r < nv; ++r)
      for (int c = r; c < nv; ++c) {
        const REAL x = Mw[(size_t)r * nv + c][l];
        ob[(size_t)r * nv + c] = x;
        ob[(size_t)c * nv + r] = x;
      }
  }
}

/* the tables of MBLOCK into row0 (nv + 1 + nb entries): row0[r], the first pair of row r,
   then depth[i], body i's; returns the tree's number of levels */
static int MTABLES(const crba_topo* t, int32_t* row0) {
  const int nb = t->nb, nv = t->nv;
  int32_t* depth = row0 + nv + 1;
  int levels = 0;
  for (int i = 0; i < nb; ++i) { /* parents come before their children */
    depth[i] = t->parent[i] < 0 ? 0 : depth[t->parent[i]] + 1;
    if (depth[i] + 1 > levels) levels = depth[i] + 1;
  }
  for (int r = 0, e = 0; r <= nv; ++r) {
    while (e < t->npairs && t->pair_r[e] < r) ++e;
    row0[r] = e;
  }
  return levels;
}

/* the whole batch of B samples, one block of LANES at a time */
RUN_LINKAGE int MRUN(const crba_topo* t, int64_t B, const REAL* q, const REAL* XR, const REAL* Xp,
                const REAL* axis, const REAL* mass, const REAL* com, const REAL* inertia,
                const REAL* armature, REAL* out) {
  const int nb = t->nb, nv = t->nv;
  int32_t* row0 = (int32_t*)malloc(sizeof(int32_t) * ((size_t)nv + 1 + (size_t)nb));
  REAL* cst = (REAL*)malloc(sizeof(REAL) * CST_PER_BODY * (size_t)nb);
  if (row0 == NULL || cst == NULL) {
    free(row0);
    free(cst);
    return 1;
  }
  int32_t* depth = row0 + nv + 1;
  const int levels = MTABLES(t, row0);
  size_t bytes = MWORK(t, levels) * sizeof(VEC);
  VEC* ws = (VEC*)aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (ws == NULL) {
    free(row0);
    free(cst);
    return 1;
  }
  CONSTANTS(t, XR, axis, cst);
  for (int64_t b = 0; b < B; b += LANES) {
    const int n = B - b < LANES ? (int)(B - b) : LANES;
    MBLOCK(t, q, XR, Xp, axis, mass, com, inertia, armature, cst, row0, depth, levels, out, b,
           n, ws);
  }
  free(ws);
  free(row0);
  free(cst);
  return 0;
}

#undef MBLOCK
#undef MRUN
#undef MWORK
#undef MTABLES
#undef LDL_INV

"""Cluster-based recursive dynamics: C-RNEA and C-ABA (C-EFPA: :mod:`jaxdyn.clusters.cefpa`),
and the shared cluster passes.

Reference: M. Chignoli, N. Adrian, S. Kim, P. M. Wensing, "Recursive rigid-body dynamics
algorithms for systems with kinematic loops", IEEE T-RO 2024 (arXiv:2311.13732):

* C-RNEA -- Alg. 1 (§VI): forward pass ``v_k = X_k v_λ(k) + v_J``,
  ``a_k = X_k a_λ(k) + S_k ydd_k + c_J + v_k x v_J``, ``f_k = I_k a_k + v_k x* I_k v_k - f_ext``;
  backward pass ``tau_k = S_k^T f_k``, ``f_λ(k) += X_k^T f_k``.
* C-ABA -- Alg. 2 (§VII, derived from Gauss' principle): ``U_k = I^A_k S_k``,
  ``D_k = S_k^T U_k``, ``u_k = tau_k - S_k^T p^A_k``, ``I^a_k = I^A_k - U_k D_k^-1 U_k^T``,
  ``p^a_k = p^A_k + I^a_k c_k + U_k D_k^-1 u_k``, ``I^A_λ += X_k^T I^a_k X_k``,
  ``p^A_λ += X_k^T p^a_k``; then ``ydd_k = D_k^-1 (u_k - U_k^T a'_k)``.
* C-EFPA -- Alg. 3 (§VIII): :mod:`jaxdyn.clusters.cefpa` (uses the passes below).

All three run in world coordinates (as jaxdyn's core algorithms, Featherstone 2008 §5.3): the
cluster transform ``X_k`` reduces to copying each output body's vector into the bodies that use
it (``X_k^T`` sums back), ``X_R`` to the in-cluster ancestor incidence, and
``c_J + v x v_J`` to ``X_R [oS g + v_b x (oS_b qdot_b)]`` (the velocity-product term of every
joint, ``g`` the constraint bias). Each level of the cluster tree is a Python loop step; inside,
every group of same-signature clusters is one batched expression. When every cluster hangs from
a single output body (all robots of the paper), C-RNEA and C-ABA take a leaner path
(:func:`_crnea_single_output`, :func:`_caba_single_output`): spanning-tree velocities from
jaxdyn's core pass, block-diagonal articulated inertias, one 6x6 block handed to the parent;
transmission rotors symmetric about their axis are then carried by their parents, exactly, and
the passes run on the link tree (:mod:`jaxdyn.clusters.rotors`).
Without loops every cluster is one joint and the three algorithms are RNEA (Featherstone
Alg. 5.1), ABA (Alg. 7.1) and EFPA (Wensing et al. 2012).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import _checks, spatial
from .._precision import full_precision
from ..algorithms import kinematics as kin
from ..algorithms.aba import world_inertia_matrices
from .model import LINEAR, ClusterModel
from .rotors import plan as rotor_plan
from .rotors import rotor_terms
from .state import all_group_states, assemble_spanning


def _inv_spd(D):
    k = D.shape[-1]
    if k in (1, 3, 6):
        return spatial.inv_spd(D)
    if k == 2:
        a, b, d = D[..., 0, 0], D[..., 0, 1], D[..., 1, 1]
        det = a * d - b * b
        return (
            jnp.stack([jnp.stack([d, -b], -1), jnp.stack([-b, a], -1)], -2) / det[..., None, None]
        )
    return jnp.linalg.inv(D)


class _GK(NamedTuple):
    """Per-group kinematics, ``(nc, ...)``."""

    S: jax.Array  # (nc, n, 6, ny) cluster motion subspace (world)
    J: jax.Array  # (nc, n, 6, nvs) X_R blkdiag(oS)
    v: jax.Array | None  # (nc, n, 6)
    c: jax.Array | None  # (nc, n, 6) c_J + v x v_J, per body
    ydot: jax.Array | None


def _gather_out(prev, out, root):
    """Values of the output bodies ``out (nc, n)`` from the previous level (``-1`` = root)."""
    if prev is None:
        return jnp.broadcast_to(root, out.shape + root.shape)
    full = jnp.concatenate([prev, root[None]], 0)
    return full[out]


def _sum_to_prev(lvl, x):
    """``X_k^T``: sum per-body values of a level into their output bodies (previous level)."""
    inc = jnp.asarray(lvl.inc, x.dtype)
    return (inc @ x.reshape(x.shape[0], -1)).reshape((inc.shape[0],) + x.shape[1:])


def _flat(parts):
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)


def _check_fext(fn, model, f_ext):
    if f_ext is None:
        return None
    return _checks.as_array(fn, "f_ext", f_ext, (("nb", model.nb), ("6", 6)), model)


def _setup(model, fn, q, v, x=None, xname=None, f_ext=None):
    q = _checks.as_array(fn, "q", q, (("nq", model.nq),), model)
    if v is not None:
        v = _checks.as_array(fn, "v", v, (("nv", model.nv),), model)
    if x is not None:
        x = _checks.as_array(fn, xname, x, (("nv", model.nv),), model)
    f_ext = _check_fext(fn, model, f_ext)
    dt = _checks.common_dtype(q, v, x, f_ext)
    model = model.astype(dt)
    cast = lambda a: None if a is None else a.astype(dt)
    q, v, x, f_ext = cast(q), cast(v), cast(x), cast(f_ext)
    gss = all_group_states(model, q, v)
    qs = assemble_spanning(model, gss, "qs")
    qs = _checks.check_quaternions(fn, model.tree, qs)
    ws = kin.world_state(model.tree, qs)
    fw = None if f_ext is None else spatial.act_force(ws.R, ws.p, f_ext)
    return model, gss, ws, v, x, fw, dt


def _setup_folded(model, rp, fn, q, v=None, x=None, xname=None):
    """:func:`_setup` on the link-only model of the rotor plan ``rp``
    (:mod:`jaxdyn.clusters.rotors`), inputs checked against ``model`` and reordered."""
    q = _checks.as_array(fn, "q", q, (("nq", model.nq),), model)
    if v is not None:
        v = _checks.as_array(fn, "v", v, (("nv", model.nv),), model)[rp.vi]
    if x is not None:
        x = _checks.as_array(fn, xname, x, (("nv", model.nv),), model)[rp.vi]
    return _setup(rp.model, fn, q[rp.qi], v, x, xname)


def _identity_B(g):
    """True if every cluster of the group has one one-DoF joint per body, in body order."""
    return g.nvs == g.n and bool(np.all(g.B == np.eye(g.n)))


def _forward_kinematics(model, gss, ws, dt, with_velocity):
    """``S_k`` per group and, with velocity, ``v`` of every body (cluster body order) and
    ``c_k = c_J + v x v_J`` per group (paper eqs. (23), (31)).

    Returns ``(gks, v_all)``: ``gks[level][group]`` is a :class:`_GK`."""
    t = model.topo
    gidx = {id(g): i for i, g in enumerate(t.groups)}
    gks, vJs, ws_ = [], [], []
    for lvl in t.levels:
        gl, vl = [], []
        for g in lvl.groups:
            s = gss[gidx[id(g)]]
            Sd = ws.S[g.dof]  # (nc, nvs, 6)
            A = jnp.asarray(g.A, dt)
            J = A[:, :, None, :] * jnp.swapaxes(Sd, -1, -2)[:, None]  # (nc, n, 6, nvs)
            Sk = J if s.G is None else jnp.einsum("cixd,cdy->cixy", J, s.G)
            if with_velocity:
                Sq = Sd * s.qd[..., None]  # oS_d qdot_d
                if g.n == 1:
                    vJ = jnp.sum(Sq, 1, keepdims=True)
                    w = vJ
                else:
                    vJ = jnp.einsum("cid,cdx->cix", A, Sq)
                    w = (
                        Sq
                        if _identity_B(g)
                        else jnp.einsum("cid,cdx->cix", jnp.asarray(g.B, dt), Sq)
                    )
                vl.append(vJ.reshape(-1, 6))
                ws_.append(w.reshape(-1, 6))
            gl.append(_GK(Sk, J, None, None, None))
        gks.append(gl)
        vJs.append(_flat(vl) if with_velocity else None)
    if not with_velocity:
        return gks, None
    # velocities: one gather + add per level (X_k v_λ(k) + v_J)
    root = jnp.zeros(6, dt)
    vs, prev = [], None
    for li, vJ in enumerate(vJs):
        prev = _gather_out(prev, t.level_out[li], root) + vJ
        vs.append(prev)
    v_all = _flat(vs)
    cvp = spatial.motion_cross(v_all, _flat(ws_))  # v_b x (oS_b qdot_b), every body at once
    off = 0
    for li, lvl in enumerate(t.levels):
        for gi, g in enumerate(lvl.groups):
            s = gss[gidx[id(g)]]
            k = g.nc * g.n
            cg = cvp[off : off + k].reshape(g.nc, g.n, 6)
            if g.n > 1:
                cg = jnp.einsum("cij,cjx->cix", jnp.asarray(g.Ab, dt), cg)
            if s.g is not None:
                cg = cg + jnp.einsum("cixd,cd->cix", gks[li][gi].J, s.g)
            gks[li][gi] = gks[li][gi]._replace(c=cg)
            off += k
    return gks, v_all


def _group_y(g, x):
    return x[g.v0 : g.v0 + g.nc * g.ny].reshape(g.nc, g.ny)


# ----------------------------------------------------------------------------- C-RNEA


@full_precision
def crnea(model: ClusterModel, q, v, a, f_ext=None):
    """Cluster-based inverse dynamics (C-RNEA): ``tau = H(q) a + C(q, v)`` in independent
    coordinates (``tau = G^T tau_tree`` of the spanning tree).

    Reference: Chignoli et al., T-RO 2024, Algorithm 1 (§VI), in world coordinates.

    **Arguments:** ``model`` (:class:`ClusterModel`); ``q (nq,)`` cluster position (implicit
    clusters must satisfy ``phi(q) = 0``); ``v (nv,)``, ``a (nv,)`` independent velocity and
    acceleration; ``f_ext (nb, 6)`` or None: spatial forces on the spanning-tree bodies, body
    coordinates (as :func:`jaxdyn.rnea`).

    **Returns:** ``tau (nv,)``.
    """
    fn = "crnea"
    rp = rotor_plan(model) if f_ext is None else None
    if rp is not None:  # axisymmetric rotors carried by their parents (exact, fewer bodies)
        fm, gss, ws, v, a, _, dt = _setup_folded(model, rp, fn, q, v, a, "a")
        return _crnea_single_output(fm, gss, ws, v, a, None, dt, rotors=rp)[rp.vi_inv]
    model, gss, ws, v, a, fw, dt = _setup(model, fn, q, v, a, "a", f_ext)
    t = model.topo
    if _all_single_output(t):
        return _crnea_single_output(model, gss, ws, v, a, fw, dt)
    gks, v_all = _forward_kinematics(model, gss, ws, dt, True)
    a0 = kin.gravity_acceleration(model.tree, dt)
    # accelerations: a_k = X_k a_λ(k) + S_k ydd_k + c_k (one gather + add per level)
    accs, prev = [], None
    for li, (lvl, gl) in enumerate(zip(t.levels, gks)):
        inc = _flat(
            [
                (jnp.einsum("cixy,cy->cix", gk.S, _group_y(g, a)) + gk.c).reshape(-1, 6)
                for g, gk in zip(lvl.groups, gl)
            ]
        )
        prev = _gather_out(prev, t.level_out[li], a0) + inc
        accs.append(prev)
    a_all = _flat(accs)
    bo = t.body_order
    m, com, Ic = ws.mass[bo], ws.c[bo], ws.Ic[bo]
    f = kin.inertia_apply(m, com, Ic, a_all) + spatial.force_cross(
        v_all, kin.inertia_apply(m, com, Ic, v_all)
    )
    if fw is not None:
        f = f - fw[bo]
    # backward: tau_k = S_k^T f_k, f_λ(k) += X_k^T f_k
    taus = [None] * len(t.groups)
    gidx = {id(g): i for i, g in enumerate(t.groups)}
    below = None
    for li in range(len(t.levels) - 1, -1, -1):
        lvl = t.levels[li]
        F = f[t.level_b0[li] : t.level_b0[li + 1]]
        if below is not None:
            F = F + _sum_to_prev(t.levels[li + 1], below)
        for g, gk in zip(lvl.groups, gks[li]):
            Fg = F[g.lb0 : g.lb0 + g.nc * g.n].reshape(g.nc, g.n, 6)
            tau = jnp.einsum("cixy,cix->cy", gk.S, Fg)
            if "armature" in g.params:
                tau = tau + jnp.einsum(
                    "cyz,cz->cy", jnp.asarray(g.params["armature"], dt), _group_y(g, a)
                )
            taus[gidx[id(g)]] = tau.reshape(-1)
        below = F
    return jnp.concatenate(taus)


# ----------------------------------------------------------------------------- C-ABA


class _ABA(NamedTuple):
    U: list  # per level, per group (nc, 6n, ny)
    Dinv: list  # (nc, ny, ny)
    u: list | None  # (nc, ny)


def _to_blocks(Ia, g):
    """(nc, 6n, 6n) -> (nc*n*n, 36) in (cluster, body_i, body_j) order."""
    x = Ia.reshape(g.nc, g.n, 6, g.n, 6).transpose(0, 1, 3, 2, 4)
    return x.reshape(g.nc * g.n * g.n, 36)


def _from_blocks(x, g):
    return x.reshape(g.nc, g.n, g.n, 6, 6).transpose(0, 1, 3, 2, 4).reshape(g.nc, 6 * g.n, 6 * g.n)


def _single_output(g):
    """True if all bodies of each cluster of the group hang from one output body."""
    return bool(np.all(g.out == g.out[:, :1]))


def _level_plan(t, li):
    """Static routing of the articulated inertias of level ``li`` to level ``li - 1``.

    Clusters whose bodies share one output body (geared / belt transmissions, differentials:
    the common case) hand their parent a single 6x6 block, ``sum_i IA_ii - U D^-1 U^T`` with
    ``U = sum_i U_i`` (X_k^T Ia X_k with all blocks landing on one body); others hand over their
    full ``6n x 6n`` articulated inertia through the block incidence ``tri``. Returns
    ``(single, P, full_cols)``: per group, whether it is single-output, the (nb_prev, nc) 0/1
    routing of its 6x6 blocks, and the ``tri`` columns of multi-output groups."""
    lvl = t.levels[li]
    single, P, cols = [], [], []
    off = 0
    for g in lvl.groups:
        so = _single_output(g)
        single.append(so)
        if li > 0 and so:
            M = np.zeros((t.levels[li - 1].nb, g.nc))
            M[g.out[:, 0], np.arange(g.nc)] = 1.0
            P.append(M)
        else:
            P.append(None)
        if li > 0 and not so:
            cols.append((off, off + g.T))
        off += g.T
    return single, P, cols


def _backward_articulated(model, ws, gks, dt, bias=None, tau=None):
    """Backward pass of C-ABA (inertias, and bias forces if ``bias`` is given).

    A cluster whose articulated inertia is block-diagonal (its children are single-output
    clusters, see :func:`_level_plan`) is handled blockwise: ``U_i = IA_ii S_i``,
    ``D = sum_i S_i^T U_i``, ``p^a_i = p^A_i + IA_ii c_i + U_i D^-1 (u - U^T c)``; the dense
    ``6n x 6n`` form is used only for clusters that receive off-diagonal blocks."""
    t = model.topo
    I6 = world_inertia_matrices(ws)[t.body_order]
    nl = len(t.levels)
    Us, Dinvs, us = [None] * nl, [None] * nl, [None] * nl
    below_d = below_f = below_p = None  # diag (nb, 6, 6), full (T, 36), bias (nb, 6)
    full_rows = None  # static: rows of `tri` (this level's blocks) that receive full blocks
    for li in range(nl - 1, -1, -1):
        lvl = t.levels[li]
        single, P, cols = _level_plan(t, li)
        addp = None
        if below_p is not None:
            addp = _sum_to_prev(t.levels[li + 1], below_p)
        Ul, Dl, ul, dparts, fparts, pparts = [], [], [], [], [], []
        toff = 0
        for g, gk, so, Pg in zip(lvl.groups, gks[li], single, P):
            n = g.n
            b0 = t.level_b0[li] + g.lb0
            IAd = I6[b0 : b0 + g.nc * n]
            if below_d is not None:
                IAd = IAd + below_d[g.lb0 : g.lb0 + g.nc * n]
            IAd = IAd.reshape(g.nc, n, 6, 6)
            dense = full_rows is not None and bool(np.any(full_rows[toff : toff + g.T]))
            S4 = gk.S  # (nc, n, 6, ny)
            Sm = S4.reshape(g.nc, 6 * n, g.ny)
            if dense:
                IA = (jnp.eye(n, dtype=dt)[None, :, None, :, None] * IAd[:, :, :, None, :]).reshape(
                    g.nc, 6 * n, 6 * n
                )
                IA = IA + _from_blocks(below_f[toff : toff + g.T], g)
                U = IA @ Sm
                U4 = U.reshape(g.nc, n, 6, g.ny)
            else:
                U4 = IAd @ S4  # (nc, n, 6, ny)
                U = U4.reshape(g.nc, 6 * n, g.ny)
            toff += g.T
            D = jnp.einsum("cixy,cixz->cyz", S4, U4)
            if "armature" in g.params:
                D = D + jnp.asarray(g.params["armature"], dt)
            Dinv = _inv_spd(D)
            Ul.append(U)
            Dl.append(Dinv)
            # articulated inertia handed to the parent
            if li > 0:
                if so:
                    Ub = U4.sum(1)  # (nc, 6, ny)
                    base = IA.reshape(g.nc, n, 6, n, 6).sum((1, 3)) if dense else IAd.sum(1)
                    if g.ny == 1:
                        red = Ub * jnp.swapaxes(Ub, -1, -2) * Dinv
                    else:
                        red = Ub @ Dinv @ jnp.swapaxes(Ub, -1, -2)
                    dparts.append(jnp.asarray(Pg, dt) @ (base - red).reshape(g.nc, 36))
                else:
                    if not dense:
                        IA = (
                            jnp.eye(n, dtype=dt)[None, :, None, :, None] * IAd[:, :, :, None, :]
                        ).reshape(g.nc, 6 * n, 6 * n)
                    Ia = IA - U @ Dinv @ jnp.swapaxes(U, -1, -2)
                    fparts.append(_to_blocks(Ia, g))
            if bias is not None:
                pA = bias[b0 : b0 + g.nc * n]
                if addp is not None:
                    pA = pA + addp[g.lb0 : g.lb0 + g.nc * n]
                pA = pA.reshape(g.nc, 6 * n)
                c = gk.c.reshape(g.nc, 6 * n)
                u = _group_y(g, tau) - jnp.einsum("cky,ck->cy", Sm, pA)
                w = jnp.einsum("cyz,cz->cy", Dinv, u - jnp.einsum("cky,ck->cy", U, c))
                if dense:
                    Ic = jnp.einsum("ckl,cl->ck", IA, c)
                else:
                    Ic = jnp.einsum("cixy,ciy->cix", IAd, gk.c).reshape(g.nc, 6 * n)
                pa = pA + Ic + jnp.einsum("cky,cy->ck", U, w)
                ul.append(u)
                pparts.append(pa.reshape(-1, 6))
        Us[li], Dinvs[li], us[li] = Ul, Dl, ul
        if li > 0:
            prev = t.levels[li - 1]
            below_d = None
            for d in dparts:
                below_d = d if below_d is None else below_d + d
            if below_d is not None:
                below_d = below_d.reshape(prev.nb, 6, 6)
            below_f = full_rows = None
            if cols:
                tri = lvl.tri
                below_f = 0.0
                full_rows = np.zeros(tri.shape[0], bool)
                for (a, b), x in zip(cols, fparts):
                    below_f = below_f + jnp.asarray(tri[:, a:b], dt) @ x
                    full_rows |= np.any(tri[:, a:b] != 0, axis=1)
        below_p = _flat(pparts) if bias is not None else None
    return _ABA(Us, Dinvs, us if bias is not None else None)


# ----------------------------------------------------------------------------- C-ABA, fast path


def _all_single_output(t):
    return all(_single_output(g) for g in t.groups)


def _sum_terms(terms):
    out = terms[0]
    for x in terms[1:]:
        out = out + x
    return out


def _route(lvl_prev_nb, out0, x):
    """Sum per-cluster values ``x (nc, ...)`` into the bodies ``out0 (nc,)`` of the previous
    level (``(nb_prev, ...)``): nothing to do for the identity, a gather when every body
    receives at most one cluster (fuses into the consumer), else a product with the incidence."""
    nc = out0.shape[0]
    if nc == lvl_prev_nb and np.array_equal(out0, np.arange(nc)):
        return x
    if len(np.unique(out0)) == nc:
        idx = np.full(lvl_prev_nb, nc, np.int64)
        idx[out0] = np.arange(nc)
        full = jnp.concatenate([x, jnp.zeros((1,) + x.shape[1:], x.dtype)], 0)
        return full[idx]
    P = np.zeros((lvl_prev_nb, nc))
    P[out0, np.arange(nc)] = 1.0
    return (jnp.asarray(P, x.dtype) @ x.reshape(nc, -1)).reshape((lvl_prev_nb,) + x.shape[1:])


def _gather_rows(prev, idx, root):
    """``prev[idx]`` with ``-1`` meaning ``root``; ``prev`` None at the first level."""
    if prev is None or np.all(idx < 0):
        return jnp.broadcast_to(root, idx.shape + root.shape)
    if np.all(idx >= 0):
        if idx.shape[0] == prev.shape[0] and np.array_equal(idx, np.arange(idx.shape[0])):
            return prev
        return prev[idx]
    full = jnp.concatenate([prev, root[None]], 0)
    return full[np.where(idx < 0, prev.shape[0], idx)]


def _group_S(g, s, Sd, dt):
    """Cluster motion subspace per body ``(nc, n, 6, ny)`` = ``sum_d A[i,d] G[d,y] oS_d``,
    unrolled over the spanning dofs (static zero coefficients skipped)."""
    A = g.A  # (nc, n, nvs) numpy
    if s.G is None:  # plain joints: y = spanning dofs
        if g.n == 1 and np.all(A == 1):
            return jnp.swapaxes(Sd, -1, -2)[:, None]
        W = A[..., None] * np.eye(g.nvs)[None, None]  # (nc, n, nvs, ny)
    elif g.kind == LINEAR:
        W = A[..., None] * np.asarray(g.params["G"])[:, None]
    else:
        W = None
    terms = []
    for d in range(g.nvs):
        if W is not None:
            Wd = W[:, :, d, :]  # (nc, n, ny)
            if not np.any(Wd):
                continue
            coef = jnp.asarray(Wd, dt)
        else:
            if not np.any(A[:, :, d]):
                continue
            coef = jnp.asarray(A[:, :, d], dt)[:, :, None] * s.G[:, None, d, :]
        terms.append(coef[:, :, None, :] * Sd[:, None, d, :, None])
    return _sum_terms(terms)


def _mix(M, x):
    """``y[c, i] = sum_d M[c, i, d] x[c, d]`` for a static numpy ``M (nc, n, m)`` and
    ``x (nc, m, ...)``, unrolled (zero columns skipped)."""
    terms = []
    for d in range(M.shape[2]):
        if not np.any(M[:, :, d]):
            continue
        col = M[:, :, d]
        if np.all(col == 1):
            terms.append(jnp.broadcast_to(x[:, None, d], (M.shape[0], M.shape[1]) + x.shape[2:]))
        else:
            coef = jnp.asarray(col, x.dtype).reshape(col.shape + (1,) * (x.ndim - 2))
            terms.append(coef * x[:, None, d])
    return _sum_terms(terms)


def _sum_bodies(x):
    """Sum over the cluster-body axis 1 (unrolled)."""
    return _sum_terms([x[:, i] for i in range(x.shape[1])])


def _in_cluster_ancestors(t):
    """``(nb, nb)`` 0/1 matrix (cluster body order) summing over in-cluster ancestors-or-self,
    or None when every body is its cluster's only path member (identity)."""
    if all(g.n == 1 or np.all(g.Ab == np.eye(g.n)) for g in t.groups):
        return None
    M = np.zeros((len(t.body_order),) * 2)
    for li, lvl in enumerate(t.levels):
        for g in lvl.groups:
            b = t.level_b0[li] + g.lb0
            for c in range(g.nc):
                k = b + c * g.n
                M[k : k + g.n, k : k + g.n] = g.Ab[c]
    return M


def _receivers(t):
    """Static routing of the forward pass: per level and group, the group-local body indices
    (``c n + i``) that are output bodies of the next level (``recv``), and per group the row
    of each cluster's output body in the previous level's receiver list (``recv_idx``)."""
    nl = len(t.levels)
    recv, pos = [], []
    for li, lvl in enumerate(t.levels):
        nxt = set()
        if li + 1 < nl:
            for g in t.levels[li + 1].groups:
                nxt.update(int(o) for o in g.out[:, 0])
        rl, pl, k = [], {}, 0
        for g in lvl.groups:
            sel = np.array(
                sorted(b - g.lb0 for b in nxt if g.lb0 <= b < g.lb0 + g.nc * g.n), np.int64
            )
            rl.append(sel)
            for b in sel:
                pl[int(b) + g.lb0] = k
                k += 1
        recv.append(rl)
        pos.append(pl)
    recv_idx = []
    for li, lvl in enumerate(t.levels):
        recv_idx.append(
            [
                np.array([-1 if o < 0 else pos[li - 1][int(o)] for o in g.out[:, 0]], np.int64)
                for g in lvl.groups
            ]
        )
    return recv, recv_idx


def _caba_single_output(model, gss, ws, v, tau, fw, dt, rotors=None):
    """C-ABA when every cluster hangs from one output body (transmissions, differentials,
    loops closed under one parent: every robot of the paper).

    The articulated inertia of a cluster is then block diagonal (one 6x6 block per body) and
    what it hands to its parent lands on one body: ``X_k^T Ia_k X_k = sum_i IA_ii - Ub D^-1
    Ub^T`` with ``Ub = sum_i U_i``, ``X_k^T pa_k = sum_i (pA_i + IA_ii c_i) + Ub D^-1 (u -
    U^T c)``. Everything is written per level and per group of same-signature clusters with
    small products unrolled, as jaxdyn's core ABA.

    ``rotors``: a :class:`~jaxdyn.clusters.rotors.RotorPlan` whose link-only model this is; its
    exact rotor terms are added (see :mod:`jaxdyn.clusters.rotors`)."""
    t = model.topo
    nl = len(t.levels)
    bo = t.body_order
    I6 = world_inertia_matrices(ws)[bo]
    gidx = {id(g): i for i, g in enumerate(t.groups)}
    # ---- kinematics: spanning-tree velocities and bias forces (jaxdyn's core passes), taken
    # into cluster body order once; per group S_k and c = c_J + v x v_J
    v_t, Ss, cs = _fast_kinematics(model, gss, ws, dt)
    bias = spatial.force_cross(v_t, kin.inertia_apply(ws.mass, ws.c, ws.Ic, v_t))[bo]
    if fw is not None:
        bias = bias - fw[bo]
    rterms = None if rotors is None else rotor_terms(rotors, ws, v_t, v, dt)
    # ---- backward pass
    Ubs, Dinvs, ws_ = [None] * nl, [None] * nl, [None] * nl
    addI = addp = None
    for li in range(nl - 1, -1, -1):
        lvl = t.levels[li]
        b0 = t.level_b0[li]
        IAl = I6[b0 : b0 + lvl.nb]
        pAl = bias[b0 : b0 + lvl.nb]
        if addI is not None:
            IAl = IAl + addI
            pAl = pAl + addp
        Ul, Dl, wl, hI, hp = [], [], [], [], []
        for g, Sk, cg in zip(lvl.groups, Ss[li], cs[li]):
            sl = slice(g.lb0, g.lb0 + g.nc * g.n)
            IA = IAl[sl].reshape(g.nc, g.n, 6, 6)
            pA = pAl[sl].reshape(g.nc, g.n, 6)
            # Y = IA [S c]: U = IA S and IA c in one product; U^T c = S^T (IA c) (IA symmetric)
            Y = spatial.mm(IA, jnp.concatenate([Sk, cg[..., None]], -1))
            U, pc = Y[..., : g.ny], pA + Y[..., g.ny]
            # Z = S^T [U, pA + IA c]: D and the bias projection in one product
            Z = _sum_bodies(
                spatial.mm(jnp.swapaxes(Sk, -1, -2), jnp.concatenate([U, pc[..., None]], -1))
            )
            D = Z[..., : g.ny]
            if "armature" in g.params:
                D = D + jnp.asarray(g.params["armature"], dt)
            Dinv = _inv_spd(D)
            Ub = _sum_bodies(U)  # (nc, 6, ny)
            rt = None if rterms is None else rterms[gidx[id(g)]]
            if rt is not None:  # rotors carried by the parent (exact terms)
                Ub = Ub + rt[0]
            # w = D^-1 (u - U^T c), u = tau - S^T pA
            wv = spatial.mv(Dinv, _group_y(g, tau) - Z[..., g.ny])  # (nc, ny)
            Ul.append(Ub)
            Dl.append(Dinv)
            wl.append(wv)
            if li > 0:
                UbD = spatial.mm(Ub, Dinv)
                hI.append(_sum_bodies(IA) - spatial.mm(UbD, jnp.swapaxes(Ub, -1, -2)))
                hp.append(_sum_bodies(pc) + spatial.mv(Ub, wv) + (0 if rt is None else rt[1]))
        Ubs[li], Dinvs[li], ws_[li] = Ul, Dl, wl
        if li > 0:
            out0 = np.concatenate([g.out[:, 0] for g in lvl.groups])
            nbp = t.levels[li - 1].nb
            addI = _route(nbp, out0, _flat(hI))
            addp = _route(nbp, out0, _flat(hp))
    # ---- forward pass: ydd = D^-1 (u - U^T (a_out + c)) = w - D^-1 Ub^T a_out
    a0 = kin.gravity_acceleration(model.tree, dt)
    ydds = [None] * len(t.groups)
    recv, recv_idx = _receivers(t)
    prev = None
    for li, lvl in enumerate(t.levels):
        parts = []
        for gi, g in enumerate(lvl.groups):
            Ub, Dinv, wv = Ubs[li][gi], Dinvs[li][gi], ws_[li][gi]
            aout = _gather_rows(prev, recv_idx[li][gi], a0)  # (nc, 6)
            ydd = wv - spatial.mv(Dinv, spatial.mv(jnp.swapaxes(Ub, -1, -2), aout))
            ydds[gidx[id(g)]] = ydd.reshape(-1)
            if li + 1 < nl:  # accelerations of the bodies the next level hangs from
                sel = recv[li][gi]
                if sel.size:
                    ci, bi = sel // g.n, sel % g.n
                    acc = aout[ci] + cs[li][gi][ci, bi] + spatial.mv(Ss[li][gi][ci, bi], ydd[ci])
                    parts.append(acc)
        prev = _flat(parts) if parts else None
    return jnp.concatenate(ydds)


def _fast_kinematics(model, gss, ws, dt):
    """Spanning-tree velocities ``v_t`` (jaxdyn's core pass, spanning order) and, per level and
    group, ``S_k (nc, n, 6, ny)`` and ``c = c_J + v x v_J (nc, n, 6)`` (paper eqs. (23), (31)):
    ``v x vJ`` of every body at once, summed over in-cluster ancestors where a cluster has a
    serial path, plus the constraint bias ``X_R oS g`` of implicit clusters."""
    t = model.topo
    bo = t.body_order
    gidx = {id(g): i for i, g in enumerate(t.groups)}
    qd = assemble_spanning(model, gss, "qd")
    v_t, vJ_t = kin.body_velocities(model.tree, ws, qd)
    cvp = spatial.motion_cross(v_t, vJ_t)[bo]
    Mab = _in_cluster_ancestors(t)
    c_all = cvp if Mab is None else (jnp.asarray(Mab, dt) @ cvp)
    Ss, cs = [], []
    for li, lvl in enumerate(t.levels):
        Sl, cl = [], []
        b0 = t.level_b0[li]
        for g in lvl.groups:
            s = gss[gidx[id(g)]]
            Sd = ws.S[g.dof]  # (nc, nvs, 6)
            Sl.append(_group_S(g, s, Sd, dt))
            cg = c_all[b0 + g.lb0 : b0 + g.lb0 + g.nc * g.n].reshape(g.nc, g.n, 6)
            if s.g is not None:
                cg = cg + _mix(g.A, Sd * s.g[..., None])
            cl.append(cg)
        Ss.append(Sl)
        cs.append(cl)
    return v_t, Ss, cs


def _crnea_single_output(model, gss, ws, v, a, fw, dt, rotors=None):
    """C-RNEA when every cluster hangs from one output body (see :func:`_caba_single_output`):
    ``a_k = a_out + c_k + S_k ydd_k`` per body, ``tau_k = sum_i S_i^T f_i``, and the cluster
    hands ``sum_i f_i`` to its output body."""
    t = model.topo
    nl = len(t.levels)
    bo = t.body_order
    gidx = {id(g): i for i, g in enumerate(t.groups)}
    v_t, Ss, cs = _fast_kinematics(model, gss, ws, dt)
    # rotors carried by the parent: tau += Ue^T a_out, the cluster hands up J (w_dd s +
    # w omega_p x s) in addition (see jaxdyn.clusters.rotors)
    rterms = None if rotors is None else rotor_terms(rotors, ws, v_t, v, dt, a)
    aouts = [None] * len(t.groups)
    a0 = kin.gravity_acceleration(model.tree, dt)
    accs, prev = [], None
    for li, lvl in enumerate(t.levels):
        parts = []
        for g, Sk, cg in zip(lvl.groups, Ss[li], cs[li]):
            aout = _gather_rows(prev, g.out[:, 0], a0)  # (nc, 6)
            aouts[gidx[id(g)]] = aout
            acc = aout[:, None] + cg + spatial.mv(Sk, _group_y(g, a)[:, None])
            parts.append(acc.reshape(-1, 6))
        prev = _flat(parts)
        accs.append(prev)
    a_all = _flat(accs)
    m, com, Ic, v_all = ws.mass[bo], ws.c[bo], ws.Ic[bo], v_t[bo]
    f = kin.inertia_apply(m, com, Ic, a_all) + spatial.force_cross(
        v_all, kin.inertia_apply(m, com, Ic, v_all)
    )
    if fw is not None:
        f = f - fw[bo]
    taus = [None] * len(t.groups)
    below = None
    for li in range(nl - 1, -1, -1):
        lvl = t.levels[li]
        b0 = t.level_b0[li]
        F = f[b0 : b0 + lvl.nb]
        if below is not None:
            F = F + below
        hs = []
        for g, Sk in zip(lvl.groups, Ss[li]):
            Fg = F[g.lb0 : g.lb0 + g.nc * g.n].reshape(g.nc, g.n, 6)
            tau = _sum_bodies(spatial.mv(jnp.swapaxes(Sk, -1, -2), Fg))  # (nc, ny)
            if "armature" in g.params:
                tau = tau + spatial.mv(jnp.asarray(g.params["armature"], dt), _group_y(g, a))
            rt = None if rterms is None else rterms[gidx[id(g)]]
            if rt is not None:
                tau = tau + spatial.mv(jnp.swapaxes(rt[0], -1, -2), aouts[gidx[id(g)]])
            taus[gidx[id(g)]] = tau.reshape(-1)
            if li > 0:
                hs.append(_sum_bodies(Fg) + (0 if rt is None else rt[1]))
        if li > 0:
            out0 = np.concatenate([g.out[:, 0] for g in lvl.groups])
            below = _route(t.levels[li - 1].nb, out0, _flat(hs))
    return jnp.concatenate(taus)


@full_precision
def caba(model: ClusterModel, q, v, tau, f_ext=None):
    """Cluster-based forward dynamics (C-ABA): ``a = H^-1 (tau - C)`` in independent coordinates.

    Reference: Chignoli et al., T-RO 2024, Algorithm 2 (§VII), in world coordinates; reduces to
    Featherstone's ABA (Alg. 7.1) when every cluster is a single joint. Transmission rotors that
    are symmetric about their axis are carried by their parent bodies, exactly, and the passes
    run on the link tree (:mod:`jaxdyn.clusters.rotors`; not with ``f_ext``).

    **Arguments:** ``q (nq,)``, ``v (nv,)``, ``tau (nv,)``, ``f_ext (nb, 6)`` or None (as
    :func:`crnea`). **Returns:** ``a (nv,)``.
    """
    fn = "caba"
    rp = rotor_plan(model) if f_ext is None else None
    if rp is not None:  # axisymmetric rotors carried by their parents (exact, fewer bodies)
        fm, gss, ws, v, tau, _, dt = _setup_folded(model, rp, fn, q, v, tau, "tau")
        return _caba_single_output(fm, gss, ws, v, tau, None, dt, rotors=rp)[rp.vi_inv]
    model, gss, ws, v, tau, fw, dt = _setup(model, fn, q, v, tau, "tau", f_ext)
    t = model.topo
    if _all_single_output(t):
        return _caba_single_output(model, gss, ws, v, tau, fw, dt)
    gks, v_all = _forward_kinematics(model, gss, ws, dt, True)
    bo = t.body_order
    m, com, Ic = ws.mass[bo], ws.c[bo], ws.Ic[bo]
    bias = spatial.force_cross(v_all, kin.inertia_apply(m, com, Ic, v_all))
    if fw is not None:
        bias = bias - fw[bo]
    ab = _backward_articulated(model, ws, gks, dt, bias, tau)
    a0 = kin.gravity_acceleration(model.tree, dt)
    gidx = {id(g): i for i, g in enumerate(t.groups)}
    ydds = [None] * len(t.groups)
    a_prev = None
    for li, (lvl, gl) in enumerate(zip(t.levels, gks)):
        parts = []
        a_out = _gather_out(a_prev, t.level_out[li], a0)
        for gi, (g, gk) in enumerate(zip(lvl.groups, gl)):
            U, Dinv, u = ab.U[li][gi], ab.Dinv[li][gi], ab.u[li][gi]
            ap = (a_out[g.lb0 : g.lb0 + g.nc * g.n].reshape(g.nc, g.n, 6) + gk.c).reshape(
                g.nc, 6 * g.n
            )
            ydd = jnp.einsum("cyz,cz->cy", Dinv, u - jnp.einsum("cky,ck->cy", U, ap))
            acc = ap + jnp.einsum("cky,cy->ck", gk.S.reshape(g.nc, 6 * g.n, g.ny), ydd)
            parts.append(acc.reshape(-1, 6))
            ydds[gidx[id(g)]] = ydd.reshape(-1)
        a_prev = _flat(parts)
    return jnp.concatenate(ydds)

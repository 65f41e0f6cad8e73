"""C-EFPA: inverse operational-space inertia of end effectors by clusters.

Reference: M. Chignoli, N. Adrian, S. Kim, P. M. Wensing, "Recursive rigid-body dynamics
algorithms for systems with kinematic loops", IEEE T-RO 2024 (arXiv:2311.13732), Algorithm 3
(§VIII), the cluster form of the extended force propagator algorithm (EFPA: Wensing,
Featherstone & Orin, ICRA 2012):

* backward: articulated inertias as C-ABA (``U_k = I^A_k S_k``, ``D_k = S_k^T U_k``,
  ``I^A_λ += X_k^T (I^A_k - U_k D_k^-1 U_k^T) X_k``), ``K_k = S_k D_k^-1 S_k^T``,
  ``L_k = 1 - K_k I^A_k``, ``chi_k = L_k X_k``, and force propagators
  ``Phi_{e,λ(k)} = Phi_{e,k} chi_k`` (``Phi_{e,c(e)}`` selects the end effector's body);
* forward: ``A_{k,e} = chi_k A_{λ(k),e} + K_k Phi_{e,k}^T``;
* ``Λ^-1_{e1 e2} = Phi_{e1,m} A_{m,e2}`` at the deepest cluster ``m`` supporting both.

Unrolling the forward recursion (``Phi_{e1,k} chi_k = Phi_{e1,λ(k)}``, ``A = 0`` above the
root) gives ``Λ^-1_{e1 e2} = sum_k Q_{e1,k} D_k^-1 Q_{e2,k}^T`` over the clusters ``k``
supporting both end effectors, with ``Q_{e,k} = Phi_{e,k} S_k``. When every cluster hangs
from one output body (every robot of the paper; the condition of C-ABA's fast path), ``X_k``
copies that body's motion into all bodies of the cluster, so ``Phi_{e,k}`` lives on one body
``j(e,k)`` of each cluster on the path from the end effector to the root (a static index) and
the propagation is ``Phi_{e,λ(k)} = Phi_{e,k,j} - Q_{e,k} D_k^-1 Ub_k^T`` with
``Q_{e,k} = Phi_{e,k,j} S_{k,j}`` and ``Ub_k = sum_i U_{k,i}``: a 6x6 propagator per
(end effector, path cluster) pair, no forward pass (:func:`_cefpa_single_output`). Other
models take the dense per-body form (:func:`_cefpa_general`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import spatial
from .._precision import full_precision
from ..algorithms.aba import world_inertia_matrices
from .algorithms import (
    _all_single_output,
    _backward_articulated,
    _flat,
    _forward_kinematics,
    _group_S,
    _inv_spd,
    _route,
    _setup,
    _setup_folded,
    _sum_bodies,
)
from .model import ClusterModel
from .rotors import plan as rotor_plan
from .rotors import rotor_terms


def resolve_end_effectors(model: ClusterModel, end_effectors):
    """``[(name, body, R_in_body (3,3), p_in_body (3,))]`` for frames / ``(frame, xyz)``."""
    tree = model.tree
    out = []
    if isinstance(end_effectors, (str, int)):
        end_effectors = (end_effectors,)
    for e in end_effectors:
        if isinstance(e, (str, int, np.integer)):
            name, xyz = e, np.zeros(3)
        else:
            try:
                name, xyz = e
            except (TypeError, ValueError):
                raise ValueError(
                    f"cefpa: end_effectors entries must be a frame name or "
                    f"(frame, xyz offset), got {e!r}"
                ) from None
            xyz = np.asarray(xyz, float).reshape(-1)
            if xyz.shape != (3,):
                raise ValueError(f"cefpa: offset of end effector {name!r} must have 3 entries")
        f = tree.frame_index(name)
        b = int(tree.topo.frame_parent[f])
        if b < 0:
            raise ValueError(f"cefpa: end effector {name!r} is fixed to the world")
        out.append((name, b, f, xyz))
    if not out:
        raise ValueError("cefpa: end_effectors is empty")
    return out


def _ee_transforms(model, ws, ees, dt):
    """Motion transforms from world-origin coordinates to each end-effector frame (6x6)."""
    tree = model.tree
    Xs = []
    for _, b, f, xyz in ees:
        Rf, pf = tree.frame_R[f], tree.frame_p[f]
        R = ws.R[b] @ Rf
        p = ws.R[b] @ (Rf @ jnp.asarray(xyz, dt) + pf) + ws.p[b]
        Rt = R.T
        Z = jnp.zeros((3, 3), dt)
        Xs.append(jnp.block([[Rt, Z], [-Rt @ spatial.skew(p), Rt]]))
    return jnp.stack(Xs)


@full_precision
def cefpa(model: ClusterModel, q, end_effectors):
    """Inverse operational-space inertia matrix ``Λ^-1 = J H^-1 J^T`` of end effectors, by the
    cluster-based extended force propagator algorithm (C-EFPA).

    Reference: Chignoli et al., T-RO 2024, Algorithm 3 (§VIII) (EFPA: Wensing, Featherstone &
    Orin, ICRA 2012), in world coordinates, then expressed in each end-effector frame.

    **Arguments:** ``q (nq,)``; ``end_effectors``: sequence of frame names (links, joints) or
    ``(frame, xyz)`` pairs (a point offset in the frame). Each end effector is a 6D frame with
    the frame's orientation at that point; its velocity is ``[ω; v]`` in frame axes (as
    :func:`jaxdyn.jacobian` with ``reference="local"``).

    **Returns:** ``(6 m, 6 m)``, blocks in the order given.
    """
    fn = "cefpa"
    ees = resolve_end_effectors(model, end_effectors)
    rp = rotor_plan(model)
    ees_f = None if rp is None else _folded_end_effectors(model, rp.model, ees)
    if ees_f is not None:  # axisymmetric rotors carried by their parents (exact)
        fm, gss, ws, _, _, _, dt = _setup_folded(model, rp, fn, q)
        return _cefpa_single_output(fm, gss, ws, ees_f, dt, rotors=rp)
    model, gss, ws, _, _, _, dt = _setup(model, fn, q, None)
    if _all_single_output(model.topo):
        return _cefpa_single_output(model, gss, ws, ees, dt)
    return _cefpa_general(model, gss, ws, ees, dt)


def _folded_end_effectors(model, fm, ees):
    """``ees`` re-resolved on the link-only model ``fm`` of :mod:`jaxdyn.clusters.rotors`, or
    None if an end effector sits on a rotor."""
    names = fm.tree.topo.frame_names
    out = []
    for name, _, f, xyz in ees:
        fname = model.tree.topo.frame_names[f]
        if fname not in names:
            return None
        f2 = names.index(fname)
        out.append((name, int(fm.tree.topo.frame_parent[f2]), f2, xyz))
    return out


# ----------------------------------------------------------------------------- fast path


def _path_plan(t, ees):
    """Static plan of the (end effector, path cluster) pairs, per level.

    Returns ``(act, members, nxt)``: ``act[li]`` the end effectors whose path reaches level
    ``li`` (sorted); ``members[li][gi]`` for group ``gi`` of the level ``(pos, ci, bi, e)``
    arrays: rows of ``act[li]``, cluster in the group, body ``j(e,k)`` in the cluster, end
    effector; ``nxt[li]`` (``li > 0``) the rows of ``act[li - 1]`` in the concatenation
    ``[propagators of level li in member order, seeds (me)]``."""
    nl = len(t.levels)
    me = len(ees)
    gidx = {id(g): i for i, g in enumerate(t.groups)}
    gpos = [{gidx[id(g)]: k for k, g in enumerate(lvl.groups)} for lvl in t.levels]
    # path of every end effector: level -> (cluster, level-local body index)
    paths = []
    for _, b, _, _ in ees:
        c, lb = int(t.body_cluster[b]), int(t.body_level_index[b])
        p = {}
        while c >= 0:
            li = int(t.cluster_level[c])
            p[li] = (c, lb)
            g = t.groups[t.cluster_group[c]]
            lb = int(g.out[c - g.cl0, 0])
            c = int(t.cluster_parent[c])
        paths.append(p)
    act = [[e for e in range(me) if li in paths[e]] for li in range(nl)]
    members, order = [], []
    for li, lvl in enumerate(t.levels):
        rows = [[] for _ in lvl.groups]
        for r, e in enumerate(act[li]):
            c, lb = paths[e][li]
            gi = gpos[li][t.cluster_group[c]]
            g = lvl.groups[gi]
            cb = lb - g.lb0
            assert cb // g.n == c - g.cl0
            rows[gi].append((r, c - g.cl0, cb % g.n, e))
        members.append(
            [
                tuple(np.array(x, np.int64).reshape(-1) for x in zip(*rw)) if rw else None
                for rw in rows
            ]
        )
        order.append([e for rw in rows for (_, _, _, e) in rw])
    nxt = [None] * nl
    for li in range(1, nl):
        pos = {e: k for k, e in enumerate(order[li])}
        nxt[li] = np.array([pos.get(e, len(order[li]) + e) for e in act[li - 1]], np.int64)
    return act, members, nxt


def _take(x, *idx):
    """``x[idx]`` for static indices into the leading axes: nothing for the identity, a slice
    (broadcast against the other operands) when every entry is the same, else a gather."""
    if (
        len(idx) == 1
        and idx[0].shape[0] == x.shape[0]
        and np.array_equal(idx[0], np.arange(idx[0].shape[0]))
    ):
        return x
    if idx[0].size == 0:
        return x[:0]
    if all(np.all(i == i[0]) for i in idx):
        return x[tuple(int(i[0]) for i in idx)][None]
    return x[idx]


def _scatter_rows(x, rows, me):
    """``(me, ...)`` with ``x[k]`` in row ``rows[k]`` (distinct) and zeros elsewhere."""
    if rows.shape[0] == me and np.array_equal(rows, np.arange(me)):
        return x
    idx = np.full(me, rows.shape[0], np.int64)
    idx[rows] = np.arange(rows.shape[0])
    return jnp.concatenate([x, jnp.zeros((1,) + x.shape[1:], x.dtype)], 0)[idx]


def _cefpa_single_output(model, gss, ws, ees, dt, rotors=None):
    """C-EFPA when every cluster hangs from one output body (see the module docstring):
    articulated inertias as :func:`~jaxdyn.clusters.algorithms._caba_single_output` (no bias),
    and per level the 6x6 propagators of the (end effector, path cluster) pairs, batched per
    group; ``Λ^-1 = Q_tot blkdiag(D^-1) Q_tot^T`` as one product, ``Q_tot (6 m, columns of
    the path clusters)``. Propagators start from the end-effector transforms, so ``Λ^-1``
    comes out in end-effector frames. ``rotors``: the
    :class:`~jaxdyn.clusters.rotors.RotorPlan` whose link-only model this is (rotor terms added
    to ``Ub``)."""
    t = model.topo
    nl = len(t.levels)
    me = len(ees)
    bo = t.body_order
    gidx = {id(g): i for i, g in enumerate(t.groups)}
    act, members, nxt = _path_plan(t, ees)
    I6 = _take(world_inertia_matrices(ws), bo)
    rterms = None if rotors is None else rotor_terms(rotors, ws, None, None, dt)
    X = _ee_transforms(model, ws, ees, dt)  # (me, 6, 6) seeds Phi_{e, c(e)}
    P = _take(X, np.asarray(act[nl - 1], np.int64))
    Qcols, Rcols = [], []
    addI = None
    for li in range(nl - 1, -1, -1):
        lvl = t.levels[li]
        b0 = t.level_b0[li]
        IAl = I6[b0 : b0 + lvl.nb]
        if addI is not None:
            IAl = IAl + addI
        hI, Pn = [], []
        for g, mem in zip(lvl.groups, members[li]):
            s = gss[gidx[id(g)]]
            Sk = _group_S(g, s, ws.S[g.dof], dt)  # (nc, n, 6, ny)
            IA = IAl[g.lb0 : g.lb0 + g.nc * g.n].reshape(g.nc, g.n, 6, 6)
            U = spatial.mm(IA, Sk)
            D = _sum_bodies(spatial.mm(jnp.swapaxes(Sk, -1, -2), U))
            if "armature" in g.params:
                D = D + jnp.asarray(g.params["armature"], dt)
            Dinv = _inv_spd(D)
            Ub = _sum_bodies(U)  # (nc, 6, ny)
            if rterms is not None and rterms[gidx[id(g)]] is not None:
                Ub = Ub + rterms[gidx[id(g)]][0]
            if li > 0:
                hI.append(
                    _sum_bodies(IA) - spatial.mm(spatial.mm(Ub, Dinv), jnp.swapaxes(Ub, -1, -2))
                )
            if mem is None:
                continue
            pos, ci, bi, es = mem
            # Q = Phi_{e,k,j} S_{k,j}, R = Q D^-1, Phi_{e,λ(k)} = Phi_{e,k,j} - R Ub^T
            Pg = _take(P, pos)
            Q = spatial.mm(Pg, _take(Sk, ci, bi))  # (na, 6, ny)
            R = spatial.mm(Q, _take(Dinv, ci))
            if li > 0:
                Pn.append(Pg - spatial.mm(R, jnp.swapaxes(_take(Ub, ci), -1, -2)))
            # columns of Q_tot: one ny-block per distinct cluster of the members
            slots, si = np.unique(ci, return_inverse=True)
            if len(slots) > 1:
                oh = jnp.asarray(np.eye(len(slots))[si], dt)[:, None, :, None]
                Q = (Q[:, :, None, :] * oh).reshape(Q.shape[0], 6, -1)
                R = (R[:, :, None, :] * oh).reshape(R.shape[0], 6, -1)
            Qcols.append(_scatter_rows(Q, es, me))
            Rcols.append(_scatter_rows(R, es, me))
        if li > 0:
            addI = _route(
                t.levels[li - 1].nb, np.concatenate([g.out[:, 0] for g in lvl.groups]), _flat(hI)
            )
            Pn = _flat(Pn) if Pn else X[:0]
            if np.array_equal(nxt[li], np.arange(Pn.shape[0])):
                P = Pn
            else:
                P = jnp.concatenate([Pn, X], 0)[nxt[li]]
    Qt = jnp.concatenate(Qcols, -1)  # (me, 6, N)
    Rt = jnp.concatenate(Rcols, -1)
    L = jnp.einsum("aiz,bjz->aibj", Rt, Qt)
    return L.reshape(6 * me, 6 * me)


# ----------------------------------------------------------------------------- general path


def _cefpa_general(model, gss, ws, ees, dt):
    """C-EFPA in the dense per-body form (any cluster tree, e.g. clusters whose bodies hang
    from several bodies of the parent cluster): force propagators ``Phi_{e,k} (6, 6 n)`` of
    every end effector on every body of each level, ``A_{k,e}`` going out, world coordinates,
    then the end-effector transforms."""
    t = model.topo
    me = len(ees)
    nl = len(t.levels)
    gks, _ = _forward_kinematics(model, gss, ws, dt, False)
    ab = _backward_articulated(model, ws, gks, dt)
    ee_cl = [int(t.body_cluster[b]) for _, b, _, _ in ees]
    # seeds: Phi_{e, c(e)} selects body b(e) (world-origin forces)
    seeds = []
    for li, lvl in enumerate(t.levels):
        s = np.zeros((me, 6, lvl.nb, 6))
        for e, (_, b, _, _) in enumerate(ees):
            if t.cluster_level[t.body_cluster[b]] == li:
                s[e, :, t.body_level_index[b], :] = np.eye(6)
        seeds.append(s)
    # backward: Phi_{e, λ(k)} = Phi_{e,k} L_k X_k  (L_k = 1 - S D^-1 U^T)
    Phis = [None] * nl
    below = None
    for li in range(nl - 1, -1, -1):
        lvl = t.levels[li]
        Phi = jnp.asarray(seeds[li], dt)
        if below is not None:
            Phi = Phi + jnp.einsum("pb,eabx->eapx", jnp.asarray(t.levels[li + 1].inc, dt), below)
        Phis[li] = Phi
        parts = []
        for gi, (g, gk) in enumerate(zip(lvl.groups, gks[li])):
            Sm = gk.S.reshape(g.nc, 6 * g.n, g.ny)
            U, Dinv = ab.U[li][gi], ab.Dinv[li][gi]
            Pg = Phi[:, :, g.lb0 : g.lb0 + g.nc * g.n].reshape(me, 6, g.nc, 6 * g.n)
            PL = Pg - jnp.einsum(
                "eacy,cyz,ckz->eack", jnp.einsum("eack,cky->eacy", Pg, Sm), Dinv, U
            )
            parts.append(PL.reshape(me, 6, g.nc * g.n, 6))
        below = parts[0] if len(parts) == 1 else jnp.concatenate(parts, 2)
    # forward: A_{k,e} = L_k X_k A_{λ,e} + K_k Phi_{e,k}^T
    As = [None] * nl
    prev = None
    zero = jnp.zeros((me, 6, 6), dt)
    for li, lvl in enumerate(t.levels):
        parts = []
        for gi, (g, gk) in enumerate(zip(lvl.groups, gks[li])):
            Sm = gk.S.reshape(g.nc, 6 * g.n, g.ny)
            U, Dinv = ab.U[li][gi], ab.Dinv[li][gi]
            if prev is None:
                Aout = jnp.zeros((me, g.nc, 6 * g.n, 6), dt)
            else:
                full = jnp.concatenate([prev, zero[:, None]], 1)  # (me, nbp+1, 6, 6)
                Aout = full[:, g.out].reshape(me, g.nc, 6 * g.n, 6)
            PhiT = jnp.swapaxes(
                Phis[li][:, :, g.lb0 : g.lb0 + g.nc * g.n].reshape(me, 6, g.nc, 6 * g.n), 1, 2
            )  # (me, nc, 6, 6n)
            PhiT = jnp.swapaxes(PhiT, -1, -2)  # (me, nc, 6n, 6)
            rhs = jnp.einsum("cky,eckf->ecyf", Sm, PhiT) - jnp.einsum("cky,eckf->ecyf", U, Aout)
            Ag = Aout + jnp.einsum("cky,cyz,eczf->eckf", Sm, Dinv, rhs)
            parts.append(Ag.reshape(me, g.nc * g.n, 6, 6))
        prev = parts[0] if len(parts) == 1 else jnp.concatenate(parts, 1)
        As[li] = prev
    # assemble at the deepest common cluster
    anc = []
    for c in ee_cl:
        chain = []
        while c >= 0:
            chain.append(c)
            c = int(t.cluster_parent[c])
        anc.append(chain)
    blocks = [[None] * me for _ in range(me)]
    for e1 in range(me):
        for e2 in range(me):
            common = [c for c in anc[e1] if c in anc[e2]]
            if not common:  # different root clusters: no coupling through the world
                blocks[e1][e2] = jnp.zeros((6, 6), dt)
                continue
            li = int(t.cluster_level[common[0]])
            blocks[e1][e2] = jnp.einsum("aix,ixb->ab", Phis[li][e1], As[li][e2])
    Lw = jnp.block(blocks)
    X = _ee_transforms(model, ws, ees, dt)
    Xb = jax.scipy.linalg.block_diag(*X)
    return Xb @ Lw @ Xb.T

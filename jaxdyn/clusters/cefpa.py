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
models take the dense per-body form (:func:`cefpa_general`). Level walks go through
:func:`jaxdyn.model.tree.backward_pass` / :func:`~jaxdyn.model.tree.forward_pass`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import eager, spatial
from .._precision import full_precision
from ..algorithms.aba import (
    articulated_body_step,
    project_articulated_inertia,
    world_inertia_matrices,
)
from ..model import tree
from .common import (
    all_single_output,
    backward_articulated,
    cluster_view,
    ee_transforms,
    forward_kinematics,
    group_S,
    resolve_end_effectors,
    setup,
    sum_bodies,
)
from .model import ClusterModel, require_cluster_model
from .rotors import rotor_terms, setup_folded

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike

    from .common import EndEffector, EndEffectors, Setup

__all__ = ["cefpa", "cefpa_general"]


@eager.eager_jit
@full_precision
def cefpa(model: ClusterModel, q: ArrayLike, end_effectors: EndEffectors) -> Array:
    """Inverse operational-space inertia matrix ``Λ^-1 = J H^-1 J^T`` of end effectors, by the
    cluster-based extended force propagator algorithm (C-EFPA).

    Reference: Chignoli et al., T-RO 2024, Algorithm 3 (§VIII) (EFPA: Wensing, Featherstone &
    Orin, ICRA 2012), in world coordinates, then expressed in each end-effector frame.

    **Arguments:** ``model`` (:class:`ClusterModel`; a plain :class:`jaxdyn.Model` raises
    ``TypeError``: use :func:`jaxdyn.delassus`); ``q (nq,)``; ``end_effectors``: sequence of
    frame names (links, joints) or ``(frame, xyz)`` pairs (a point offset in the frame). Each
    end effector is a 6D frame with the frame's orientation at that point; its velocity is
    ``[ω; v]`` in frame axes (as :func:`jaxdyn.jacobian` with ``reference="local"``).

    **Returns:** ``(6 m, 6 m)``, blocks in the order given.
    """
    fn = "cefpa"
    alt = "jaxdyn.delassus (the inverse operational-space inertia of tree models)"
    require_cluster_model(fn, model, alt)
    ees = resolve_end_effectors(model, end_effectors)
    fold = model.topo.fold
    ees_f = None if fold is None else _folded_end_effectors(model, fold, ees)
    if ees_f is not None:  # axisymmetric rotors carried by their parents (exact)
        s, rot = setup_folded(model, fn, q)
        return _cefpa_single_output(s, ees_f, rotors=rot)
    s = setup(model, fn, q, alternative=alt)
    if all_single_output(s.model.topo):
        return _cefpa_single_output(s, ees)
    return cefpa_general(s, ees)


def _folded_end_effectors(model, fold, ees):
    """``ees`` re-resolved on the link tree of a rotor-folding plan, or None if an end
    effector sits on a rotor."""
    names = fold.tree_topo.frame_names
    out = []
    for name, _, f, xyz in ees:
        fname = model.tree.topo.frame_names[f]
        if fname not in names:
            return None
        f2 = names.index(fname)
        out.append((name, int(fold.tree_topo.frame_parent[f2]), f2, xyz))
    return out


# ----------------------------------------------------------------------------- fast path


def _path_plan(t, ees):
    """Static plan of the (end effector, path cluster) pairs, per level.

    Returns ``(act, members, nxt)``: ``act[li]`` the end effectors whose path reaches level
    ``li`` (sorted); ``members[g.index]`` for each group, ``(pos, ci, bi, e)`` arrays: rows of
    ``act[li]``, cluster in the group, body ``j(e,k)`` in the cluster, end effector (None if
    no path crosses the group); ``nxt[li]`` (``li > 0``) the rows of ``act[li - 1]`` in the
    concatenation ``[propagators of level li in member order, seeds (me)]``."""
    nl = len(t.levels)
    me = len(ees)
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
    members: list[tuple[np.ndarray, ...] | None] = [None] * len(t.groups)
    order = []
    for li, lvl in enumerate(t.levels):
        rows = {g.index: [] for g in lvl.groups}
        for r, e in enumerate(act[li]):
            c, lb = paths[e][li]
            g = t.groups[t.cluster_group[c]]
            cb = lb - g.lb0
            assert cb // g.nbc == c - g.cl0
            rows[g.index].append((r, c - g.cl0, cb % g.nbc, e))
        for gi, rw in rows.items():
            if rw:
                members[gi] = tuple(np.array(x, np.int64).reshape(-1) for x in zip(*rw))
        order.append([e for g in lvl.groups for (_, _, _, e) in rows[g.index]])
    nxt: list[np.ndarray | None] = [None] * nl
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


def _cefpa_single_output(s, ees, rotors=None):
    """C-EFPA when every cluster hangs from one output body (see the module docstring):
    articulated inertias as :func:`jaxdyn.clusters.caba`'s single-output path (no bias), and
    per level the 6x6 propagators of the (end effector, path cluster) pairs, batched per
    group; ``Λ^-1 = Q_tot blkdiag(D^-1) Q_tot^T`` as one product, ``Q_tot (6 m, columns of
    the path clusters)``. Propagators start from the end-effector transforms, so ``Λ^-1``
    comes out in end-effector frames. ``rotors``: the rotor data of a folded model (rotor
    terms added to ``Ub``)."""
    model, ws, dt = s.model, s.ws, s.dt
    t = model.topo
    nl = len(t.levels)
    me = len(ees)
    act, members, nxt = _path_plan(t, ees)
    I6 = _take(world_inertia_matrices(ws), t.body_order)
    rterms = None if rotors is None else rotor_terms(rotors[0], rotors[1], ws, None, None, dt)
    X = ee_transforms(model, ws, ees, dt)  # (me, 6, 6) seeds Phi_{e, c(e)}
    Qcols, Rcols = [], []

    def backward(lvl, child, below, inp):
        li = lvl.groups[0].level
        IAl = inp[0]
        if below is None:
            P = _take(X, np.asarray(act[nl - 1], np.int64))
        else:
            hI, P = below
            IAl = IAl + tree.sum_into_parents_gathered(hI, cluster_view(t, li + 1), lvl.n)
        hI, Pn = [], []
        for g in lvl.groups:
            Sk = group_S(model, g, s.gss[g.index], ws.S[g.dof], dt)  # (nc, nbc, 6, ny)
            IA = IAl[g.b0 - lvl.b0 : g.b1 - lvl.b0].reshape(g.nc, g.nbc, 6, 6)
            prm = model.params[g.index]
            U, Dinv, _ = articulated_body_step(IA, Sk, prm.get("armature"), bodies=True)
            Ub = sum_bodies(U)  # (nc, 6, ny)
            if rterms is not None and rterms[g.index] is not None:
                Ub = Ub + rterms[g.index][0]
            if li > 0:
                hI.append(project_articulated_inertia(sum_bodies(IA), Ub, Dinv))
            mem = members[g.index]
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
        if li == 0:
            return None, None
        Pn = (Pn[0] if len(Pn) == 1 else jnp.concatenate(Pn, 0)) if Pn else X[:0]
        if np.array_equal(nxt[li], np.arange(Pn.shape[0])):
            P = Pn
        else:
            P = jnp.concatenate([Pn, X], 0)[nxt[li]]
        return (jnp.concatenate(hI, 0), P), None

    tree.backward_pass(t, backward, (("body", I6),))
    Qt = jnp.concatenate(Qcols, -1)  # (me, 6, N)
    Rt = jnp.concatenate(Rcols, -1)
    L = jnp.einsum("aiz,bjz->aibj", Rt, Qt)
    return L.reshape(6 * me, 6 * me)


# ----------------------------------------------------------------------------- general path


def cefpa_general(s: Setup, ees: Sequence[EndEffector]) -> Array:
    """C-EFPA in the dense per-body form (any cluster tree, e.g. clusters whose bodies hang
    from several bodies of the parent cluster): force propagators ``Phi_{e,k} (6, 6 n)`` of
    every end effector on every body of each level, ``A_{k,e}`` going out, world coordinates,
    then the end-effector transforms. ``s``: a :func:`jaxdyn.clusters.common.setup` of the
    model; ``ees``: :func:`jaxdyn.clusters.common.resolve_end_effectors`."""
    model, ws, dt = s.model, s.ws, s.dt
    t = model.topo
    me = len(ees)
    gks, _ = forward_kinematics(model, s.gss, ws, dt, False)
    ab = backward_articulated(model, ws, gks, dt)
    ee_cl = [int(t.body_cluster[b]) for _, b, _, _ in ees]
    # seeds: Phi_{e, c(e)} selects body b(e) (world-origin forces); (me, 6, nb, 6) per level
    seeds = []
    for li, lvl in enumerate(t.levels):
        sd = np.zeros((me, 6, lvl.n, 6))
        for e, (_, b, _, _) in enumerate(ees):
            if t.cluster_level[t.body_cluster[b]] == li:
                sd[e, :, t.body_level_index[b], :] = np.eye(6)
        seeds.append(sd)
    # backward: Phi_{e, λ(k)} = Phi_{e,k} L_k X_k  (L_k = 1 - S D^-1 U^T); the body axis is
    # moved first for the tree's parent sums
    Phis: list[Any] = [None] * len(t.levels)  # per level, set by the backward pass

    def backward(lvl, child, below, inp):
        li = lvl.groups[0].level
        Phi = jnp.asarray(seeds[li], dt)
        if below is not None:
            up = tree.sum_into_parents(jnp.moveaxis(below, 2, 0), child, lvl.n)
            Phi = Phi + jnp.moveaxis(up, 0, 2)
        Phis[li] = Phi
        parts = []
        for g in lvl.groups:
            Sm = gks[g.index].S.reshape(g.nc, 6 * g.nbc, g.ny)
            U, Dinv = ab.U[g.index], ab.Dinv[g.index]
            Pg = Phi[:, :, g.b0 - lvl.b0 : g.b1 - lvl.b0].reshape(me, 6, g.nc, 6 * g.nbc)
            PL = Pg - jnp.einsum(
                "eacy,cyz,ckz->eack", jnp.einsum("eack,cky->eacy", Pg, Sm), Dinv, U
            )
            parts.append(PL.reshape(me, 6, g.nc * g.nbc, 6))
        return (parts[0] if len(parts) == 1 else jnp.concatenate(parts, 2)), None

    tree.backward_pass(t, backward, ())
    # forward: A_{k,e} = L_k X_k A_{λ,e} + K_k Phi_{e,k}^T, (me, nb, 6, 6) per level
    As: list[Any] = [None] * len(t.levels)  # per level, set by the forward pass
    zero = jnp.zeros((me, 6, 6), dt)

    def forward(lvl, _, prev, inp):
        li = lvl.groups[0].level
        prev_b = None if prev is None else jnp.moveaxis(prev, 1, 0)
        Aout_l = jnp.moveaxis(tree.gather_parent(prev_b, lvl, zero), 0, 1)  # (me, n, 6, 6)
        parts = []
        for g in lvl.groups:
            Sm = gks[g.index].S.reshape(g.nc, 6 * g.nbc, g.ny)
            U, Dinv = ab.U[g.index], ab.Dinv[g.index]
            sl = slice(g.b0 - lvl.b0, g.b1 - lvl.b0)
            Aout = Aout_l[:, sl].reshape(me, g.nc, 6 * g.nbc, 6)
            PhiT = jnp.swapaxes(Phis[li][:, :, sl].reshape(me, 6, g.nc, 6 * g.nbc), 1, 2)
            PhiT = jnp.swapaxes(PhiT, -1, -2)  # (me, nc, 6n, 6)
            rhs = jnp.einsum("cky,eckf->ecyf", Sm, PhiT) - jnp.einsum("cky,eckf->ecyf", U, Aout)
            Ag = Aout + jnp.einsum("cky,cyz,eczf->eckf", Sm, Dinv, rhs)
            parts.append(Ag.reshape(me, g.nc * g.nbc, 6, 6))
        A = parts[0] if len(parts) == 1 else jnp.concatenate(parts, 1)
        As[li] = A
        return A, None

    tree.forward_pass(t, forward, ())
    # assemble at the deepest common cluster
    anc = []
    for c in ee_cl:
        chain = []
        while c >= 0:
            chain.append(c)
            c = int(t.cluster_parent[c])
        anc.append(chain)
    blocks: list[list[Any]] = [[None] * me for _ in range(me)]
    for e1 in range(me):
        for e2 in range(me):
            common = [c for c in anc[e1] if c in anc[e2]]
            if not common:  # different root clusters: no coupling through the world
                blocks[e1][e2] = jnp.zeros((6, 6), dt)
                continue
            li = int(t.cluster_level[common[0]])
            blocks[e1][e2] = jnp.einsum("aix,ixb->ab", Phis[li][e1], As[li][e2])
    Lw = jnp.block(blocks)
    X = ee_transforms(model, ws, ees, dt)
    Xb = jax.scipy.linalg.block_diag(*X)
    return Xb @ Lw @ Xb.T

"""Pieces shared by the cluster algorithms (C-RNEA, C-ABA, C-EFPA) and their baselines.

Reference: Chignoli et al., T-RO 2024, §V (cluster quantities): the motion subspace
``S_k = X_R blkdiag(S_b) G`` (eq. (23)), the velocity product ``c_k = c_J + v_k x v_J``
(eq. (31)), and the articulated-inertia pass of C-ABA (Algorithm 2, §VII) that C-EFPA
(Algorithm 3, §VIII) reuses.

Everything runs in world coordinates (as jaxdyn's core algorithms, Featherstone 2008 §5.3):
the cluster transform ``X_k`` reduces to copying each output body's vector into the bodies that
use it (``X_k^T`` sums back), ``X_R`` to the in-cluster ancestor incidence ``A`` / ``Ab``, and
``c_J + v x v_J`` to ``X_R [oS g + v_b x (oS_b qdot_b)]`` (the velocity-product term of every
joint, ``g`` the constraint bias). Level walks go through :mod:`jaxdyn.model.tree`
(:func:`~jaxdyn.model.tree.forward_pass`, :func:`~jaxdyn.model.tree.backward_pass` and its
parent / child helpers) on the cluster levels (:class:`jaxdyn.model.model.Level`, bodies in
cluster body order, ``parent_local`` = output bodies).

When every cluster hangs from a single output body (:func:`all_single_output`: geared and belt
transmissions, differentials, loops closed under one parent -- every robot of the paper), the
articulated inertia of a cluster is block diagonal and what it hands to its parent lands on one
body: ``X_k^T Ia_k X_k = sum_i IA_ii - Ub D^-1 Ub^T`` with ``Ub = sum_i U_i``; the algorithms
then take that leaner form (:func:`fast_kinematics`, :func:`cluster_view`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, overload

import jax
import jax.numpy as jnp
import numpy as np

from .. import shell, spatial
from ..algorithms import kinematics as kin
from ..algorithms.aba import (
    articulated_bias_force,
    articulated_body_step,
    project_articulated_inertia,
    world_inertia_matrices,
)
from ..model import tree
from ..model.model import Level
from .model import LINEAR, ClusterModel, ClusterTopology, Group, require_cluster_model
from .state import all_group_states, assemble_spanning, group_y

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from .state import GroupState

# End effectors of the operational-space functions (C-EFPA, projected OSIM): one frame (name or
# index) or a sequence of frames / ``(frame, xyz offset (3,))`` pairs.
EndEffectors = str | int | Sequence[str | int | tuple[str | int, Any]]
# One resolved end effector (:func:`resolve_end_effectors`): ``(name, body, frame, xyz (3,))``.
EndEffector = tuple[str | int, int, int, np.ndarray]

__all__ = [
    "GroupKinematics",
    "Setup",
    "all_single_output",
    "backward_articulated",
    "block_incidence",
    "check_f_ext",
    "cluster_view",
    "ee_transforms",
    "fast_kinematics",
    "forward_kinematics",
    "group_S",
    "group_y",
    "in_cluster_ancestors",
    "inv_spd",
    "mix",
    "resolve_end_effectors",
    "setup",
    "single_output",
    "sum_bodies",
    "sum_terms",
]


#: inverse of the small ``D`` blocks (closed forms up to 3x3, 6x6)
inv_spd = spatial.inv_spd


def sum_terms(terms: Sequence[Any]) -> Any:
    """``terms[0] + terms[1] + ...`` (a left fold)."""
    out = terms[0]
    for x in terms[1:]:
        out = out + x
    return out


def sum_bodies(x: Array) -> Array:
    """Sum over the cluster-body axis 1 (unrolled)."""
    return sum_terms([x[:, i] for i in range(x.shape[1])])


def mix(M: np.ndarray, x: Array) -> Array:
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
    return sum_terms(terms)


def check_f_ext(fn: str, model: ClusterModel, f_ext: ArrayLike | None) -> Array | None:
    """Shape-check the external forces ``(nb, 6)`` on the spanning-tree bodies (or None)."""
    if f_ext is None:
        return None
    return shell.as_array(fn, "f_ext", f_ext, (("nb", model.nb), ("6", 6)), model)


class Setup(NamedTuple):
    """The common start of a cluster algorithm: the model cast to the working dtype, the
    per-group spanning states, the spanning-tree world state and the inputs."""

    model: ClusterModel
    gss: list[GroupState]
    ws: kin.WorldState
    v: jax.Array | None
    x: jax.Array | None
    fw: jax.Array | None  # external forces in world coordinates (nb, 6)
    dt: DTypeLike


def setup(
    model: ClusterModel,
    fn: str,
    q: ArrayLike,
    v: ArrayLike | None = None,
    x: ArrayLike | None = None,
    xname: str | None = None,
    f_ext: ArrayLike | None = None,
    alternative: str | None = None,
) -> Setup:
    """Check the model type (``alternative``: the tree function to name for a plain
    :class:`jaxdyn.Model`) and the inputs' shapes, cast everything to the inputs' common
    floating dtype, map ``q`` (and ``v``) to the spanning tree (checking the loop residual of
    implicit clusters) and compute the world state. ``x`` is the third input (``a`` or ``tau``,
    named ``xname``)."""
    require_cluster_model(fn, model, alternative)
    q = shell.as_array(fn, "q", q, (("nq", model.nq),), model)
    if v is not None:
        v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    if x is not None:
        x = shell.as_array(fn, xname, x, (("nv", model.nv),), model)
    f_ext = check_f_ext(fn, model, f_ext)
    dt = shell.common_dtype(q, v, x, f_ext, model=model.tree)
    shell.check_model_dtype(fn, model.tree, dt)
    model = model.astype(dt)
    q = q.astype(dt)
    v = None if v is None else v.astype(dt)
    x = None if x is None else x.astype(dt)
    f_ext = None if f_ext is None else f_ext.astype(dt)
    gss = all_group_states(model, q, v, check=fn)
    qs = assemble_spanning(model, gss, "qs")
    qs = shell.check_quaternions(fn, model.tree, qs)
    ws = kin.world_state(model.tree, qs)
    fw = None if f_ext is None else spatial.act_force(ws.R, ws.p, f_ext)
    return Setup(model, gss, ws, v, x, fw, dt)


# ----------------------------------------------------------------------------- static structure


def single_output(g: Group) -> bool:
    """True if all bodies of each cluster of the group hang from one output body."""
    return bool(np.all(g.out == g.out[:, :1]))


@functools.lru_cache(maxsize=256)
def all_single_output(t: ClusterTopology) -> bool:
    """True if every cluster of the topology ``t`` hangs from one output body."""
    return all(single_output(g) for g in t.groups)


def _identity_B(g):
    """True if every cluster of the group has one one-DoF joint per body, in body order."""
    return g.nvs == g.nbc and bool(np.all(g.B == np.eye(g.nbc)))


@functools.lru_cache(maxsize=256)
def in_cluster_ancestors(t: ClusterTopology) -> np.ndarray | None:
    """``(nb, nb)`` 0/1 matrix (cluster body order) summing over in-cluster ancestors-or-self,
    or None when every body is its cluster's only path member (identity)."""
    if all(g.nbc == 1 or np.all(g.Ab == np.eye(g.nbc)) for g in t.groups):
        return None
    M = np.zeros((len(t.body_order),) * 2)
    for g in t.groups:
        for c in range(g.nc):
            k = g.b0 + c * g.nbc
            M[k : k + g.nbc, k : k + g.nbc] = g.Ab[c]
    M.setflags(write=False)
    return M


@functools.lru_cache(maxsize=1024)
def cluster_view(
    t: ClusterTopology, li: int, g_index: int | None = None, receivers: bool = False
) -> Level:
    """A :class:`jaxdyn.model.model.Level` over the *clusters* of level ``li`` (or of group
    ``g_index`` alone), for single-output topologies: ``parent_local[c]`` is the output body of
    cluster ``c`` in the previous level (:func:`jaxdyn.model.tree.gather_parent` gathers the
    output bodies' values, :func:`jaxdyn.model.tree.sum_into_parents_gathered` sums per-cluster
    values into them). With ``receivers``, ``parent_local`` indexes the previous level's
    *receivers* instead (its bodies that are output bodies of level ``li``, in order; see
    :func:`receivers`)."""
    lvl = t.levels[li]
    gs = [g for g in lvl.groups if g_index is None or g.index == g_index]
    out0 = np.concatenate([g.out[:, 0] for g in gs]).astype(np.int64)
    if receivers and li > 0:
        rows = {int(b): k for k, b in enumerate(receivers_of(t, li - 1))}
        out0 = np.array([rows[int(o)] for o in out0], np.int64)
    c0 = gs[0].cl0
    return Level(c0, c0 + len(out0), out0, ())


@functools.lru_cache(maxsize=256)
def receivers_of(t, li: int) -> np.ndarray:
    """Level-local indices of the bodies of level ``li`` that are output bodies of level
    ``li + 1`` (sorted)."""
    if li + 1 >= len(t.levels):
        return np.zeros(0, np.int64)
    nxt = {int(o) for g in t.levels[li + 1].groups for o in g.out[:, 0]}
    return np.array(sorted(nxt), np.int64)


@functools.lru_cache(maxsize=256)
def block_incidence(t: ClusterTopology, li: int) -> np.ndarray:
    """``(T_prev, T)`` 0/1 matrix routing the ``6x6`` blocks of the articulated inertias of
    level ``li`` (in (cluster, body_i, body_j) order per group) to the blocks of their output
    bodies in level ``li - 1`` (``X_k^T Ia_k X_k`` of multi-output clusters)."""
    lvl, prev = t.levels[li], t.levels[li - 1]
    where_p = {}
    off = 0
    for gp in prev.groups:
        for c in range(gp.nc):
            for i in range(gp.nbc):
                where_p[gp.lb0 + c * gp.nbc + i] = (off, c, i, gp.nbc)
        off += gp.T
    tri = np.zeros((off, sum(g.T for g in lvl.groups)))
    off = 0
    for g in lvl.groups:
        for c in range(g.nc):
            for i in range(g.nbc):
                oi, ci, li_, npn = where_p[g.out[c, i]]
                for j in range(g.nbc):
                    oj, cj, lj, _ = where_p[g.out[c, j]]
                    assert oj == oi and cj == ci
                    tri[oi + (ci * npn + li_) * npn + lj, off + (c * g.nbc + i) * g.nbc + j] = 1.0
        off += g.T
    tri.setflags(write=False)
    return tri


@functools.lru_cache(maxsize=256)
def dense_groups(t) -> frozenset:
    """Indices of the groups whose articulated inertia receives off-diagonal blocks from
    multi-output child clusters (C-ABA handles them in the dense ``6n x 6n`` form)."""
    out = set()
    for li in range(1, len(t.levels)):
        gs = t.levels[li].groups
        cols = [
            (a, a + g.T)
            for a, g in zip(np.cumsum([0] + [g.T for g in gs]), gs)
            if not single_output(g)
        ]
        if not cols:
            continue
        tri = block_incidence(t, li)
        rows = np.zeros(tri.shape[0], bool)
        for a, b in cols:
            rows |= np.any(tri[:, a:b] != 0, axis=1)
        off = 0
        for g in t.levels[li - 1].groups:
            if np.any(rows[off : off + g.T]):
                out.add(g.index)
            off += g.T
    return frozenset(out)


# ----------------------------------------------------------------------------- kinematics


def group_S(model: ClusterModel, g: Group, s: GroupState, Sd: Array, dt: DTypeLike) -> Array:
    """Cluster motion subspace per body ``(nc, nbc, 6, ny)`` = ``sum_d A[i,d] G[d,y] oS_d``
    (paper eq. (23) in world coordinates), unrolled over the spanning dofs (static zero
    coefficients skipped). ``s`` the group's spanning state, ``Sd (nc, nvs, 6)`` the world
    motion subspaces of its dofs."""
    A = g.A  # (nc, nbc, nvs) numpy
    if s.G is None:  # plain joints: y = spanning dofs
        if g.nbc == 1 and np.all(A == 1):
            return jnp.swapaxes(Sd, -1, -2)[:, None]
        W = A[..., None] * np.eye(g.nvs)[None, None]  # (nc, nbc, nvs, ny)
    else:
        W = None
    Gnz = g.static["Gnz"] if g.type == LINEAR else None
    terms = []
    for d in range(g.nvs):
        if W is not None:
            Wd = W[:, :, d, :]  # (nc, nbc, ny)
            if not np.any(Wd):
                continue
            coef = jnp.asarray(Wd, dt)
        else:
            if not np.any(A[:, :, d]) or (Gnz is not None and not np.any(Gnz[:, d])):
                continue
            assert s.G is not None  # W is None
            coef = jnp.asarray(A[:, :, d], dt)[:, :, None] * s.G[:, None, d, :]
        terms.append(coef[:, :, None, :] * Sd[:, None, d, :, None])
    return sum_terms(terms)


class GroupKinematics(NamedTuple):
    """Per-group kinematics of the general path, ``(nc, ...)``."""

    S: jax.Array  # (nc, nbc, 6, ny) cluster motion subspace (world)
    J: jax.Array  # (nc, nbc, 6, nvs) X_R blkdiag(oS)
    c: jax.Array | None  # (nc, nbc, 6) c_J + v x v_J, per body


def _flat(parts):
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)


@overload
def forward_kinematics(
    model: ClusterModel, gss: Sequence[Any], ws: Any, dt: DTypeLike, with_velocity: Literal[True]
) -> tuple[list[GroupKinematics], Array]: ...
@overload
def forward_kinematics(
    model: ClusterModel, gss: Sequence[Any], ws: Any, dt: DTypeLike, with_velocity: Literal[False]
) -> tuple[list[GroupKinematics], None]: ...
def forward_kinematics(
    model: ClusterModel, gss: Sequence[Any], ws: Any, dt: DTypeLike, with_velocity: bool
) -> tuple[list[GroupKinematics], Array | None]:
    """General path: ``S_k`` per group and, with velocity, ``v`` of every body (cluster body
    order, ``v_k = X_k v_λ(k) + v_J`` accumulated by :func:`jaxdyn.model.tree.forward_accumulate`
    on the cluster levels) and ``c_k = c_J + v x v_J`` per group (paper eqs. (23), (31)).

    Returns ``(gks, v_all)``: ``gks[group index]`` is a :class:`GroupKinematics`."""
    t = model.topo
    gks, vJs, ws_ = [], [], []
    for g, s in zip(t.groups, gss):
        Sd = ws.S[g.dof]  # (nc, nvs, 6)
        A = jnp.asarray(g.A, dt)
        J = A[:, :, None, :] * jnp.swapaxes(Sd, -1, -2)[:, None]  # (nc, nbc, 6, nvs)
        Sk = J if s.G is None else jnp.einsum("cixd,cdy->cixy", J, s.G)
        if with_velocity:
            Sq = Sd * s.qd[..., None]  # oS_d qdot_d
            if g.nbc == 1:
                vJ = jnp.sum(Sq, 1, keepdims=True)
                w = vJ
            else:
                vJ = jnp.einsum("cid,cdx->cix", A, Sq)
                w = Sq if _identity_B(g) else jnp.einsum("cid,cdx->cix", jnp.asarray(g.B, dt), Sq)
            vJs.append(vJ.reshape(-1, 6))
            ws_.append(w.reshape(-1, 6))
        gks.append(GroupKinematics(Sk, J, None))
    if not with_velocity:
        return gks, None
    v_all = tree.forward_accumulate(t, _flat(vJs), jnp.zeros(6, dt))
    cvp = spatial.motion_cross(v_all, _flat(ws_))  # v_b x (oS_b qdot_b), every body at once
    for g, s in zip(t.groups, gss):
        cg = cvp[g.b0 : g.b1].reshape(g.nc, g.nbc, 6)
        if g.nbc > 1:
            cg = jnp.einsum("cij,cjx->cix", jnp.asarray(g.Ab, dt), cg)
        if s.g is not None:
            cg = cg + jnp.einsum("cixd,cd->cix", gks[g.index].J, s.g)
        gks[g.index] = gks[g.index]._replace(c=cg)
    return gks, v_all


def fast_kinematics(
    model: ClusterModel, gss: Sequence[GroupState], ws: kin.WorldState, dt: DTypeLike
) -> tuple[Array, list[Array], list[Array]]:
    """Single-output path: spanning-tree velocities ``v_t`` (jaxdyn's core pass, spanning
    order) and, per group, ``S_k (nc, nbc, 6, ny)`` and ``c = c_J + v x v_J (nc, nbc, 6)``
    (paper eqs. (23), (31)): ``v x vJ`` of every body at once, summed over in-cluster ancestors
    where a cluster has a serial path, plus the constraint bias ``X_R oS g`` of implicit
    clusters. Returns ``(v_t, Ss, cs)``, ``Ss[g.index]``, ``cs[g.index]``."""
    t = model.topo
    bo = t.body_order
    qd = assemble_spanning(model, gss, "qd")
    v_t, vJ_t = kin.body_velocities(model.tree, ws, qd)
    cvp = spatial.motion_cross(v_t, vJ_t)[bo]
    Mab = in_cluster_ancestors(t)
    c_all = cvp if Mab is None else (jnp.asarray(Mab, dt) @ cvp)
    Ss, cs = [], []
    for g, s in zip(t.groups, gss):
        Sd = ws.S[g.dof]  # (nc, nvs, 6)
        Ss.append(group_S(model, g, s, Sd, dt))
        cg = c_all[g.b0 : g.b1].reshape(g.nc, g.nbc, 6)
        if s.g is not None:
            cg = cg + mix(g.A, Sd * s.g[..., None])
        cs.append(cg)
    return v_t, Ss, cs


# ----------------------------------------------------------------------------- C-ABA, general


class Articulated(NamedTuple):
    """Per group (by index): ``U (nc, 6n, ny)``, ``D^-1 (nc, ny, ny)``, ``u (nc, ny)`` (None
    without bias forces)."""

    U: list
    Dinv: list
    u: list | None


def _to_blocks(Ia, g):
    """(nc, 6n, 6n) -> (nc*n*n, 36) in (cluster, body_i, body_j) order."""
    x = Ia.reshape(g.nc, g.nbc, 6, g.nbc, 6).transpose(0, 1, 3, 2, 4)
    return x.reshape(g.T, 36)


def _from_blocks(x, g):
    n = g.nbc
    return x.reshape(g.nc, n, n, 6, 6).transpose(0, 1, 3, 2, 4).reshape(g.nc, 6 * n, 6 * n)


def _block_diag(IAd, g, dt):
    n = g.nbc
    return (jnp.eye(n, dtype=dt)[None, :, None, :, None] * IAd[:, :, :, None, :]).reshape(
        g.nc, 6 * n, 6 * n
    )


def backward_articulated(
    model: ClusterModel,
    ws: kin.WorldState,
    gks: Sequence[GroupKinematics],
    dt: DTypeLike,
    bias: Array | None = None,
    tau: Array | None = None,
) -> Articulated:
    """Backward pass of C-ABA (Chignoli et al., Algorithm 2; paper eqs. for ``U_k``, ``D_k``,
    ``u_k``, ``I^a_k``, ``p^a_k``) in the general form: articulated inertias, and bias forces
    if ``bias`` (``(nb, 6)``, cluster body order) is given, walked by
    :func:`jaxdyn.model.tree.backward_pass`.

    A cluster whose articulated inertia is block-diagonal (its children are single-output
    clusters) is handled blockwise: ``U_i = IA_ii S_i``, ``D = sum_i S_i^T U_i``,
    ``p^a_i = p^A_i + IA_ii c_i + U_i D^-1 (u - U^T c)``; the dense ``6n x 6n`` form is used
    only for clusters that receive off-diagonal blocks (:func:`dense_groups`)."""
    t = model.topo
    I6 = world_inertia_matrices(ws)[t.body_order]
    dense_set = dense_groups(t)
    Us, Dinvs, us = [None] * len(t.groups), [None] * len(t.groups), [None] * len(t.groups)

    def step(lvl, child, below, inp):
        I6l, bl = inp
        below_d = below_f = addp = None
        if below is not None:
            below_d, below_f, below_p = below
            if below_p is not None:
                addp = tree.sum_into_parents(below_p, child, lvl.n)
        li = lvl.groups[0].level
        dparts, fparts, pparts = [], [], []
        for g in lvl.groups:
            n = g.nbc
            gk = gks[g.index]
            prm = model.params[g.index]
            s = slice(g.b0 - lvl.b0, g.b1 - lvl.b0)
            IAd = I6l[s]
            if below_d is not None:
                IAd = IAd + below_d[s]
            IAd = IAd.reshape(g.nc, n, 6, 6)
            dense = g.index in dense_set
            S4 = gk.S  # (nc, n, 6, ny)
            Sm = S4.reshape(g.nc, 6 * n, g.ny)
            arm = prm.get("armature")
            if dense:  # the full 6n x 6n articulated inertia
                IA = _block_diag(IAd, g, dt)
                assert below_f is not None  # a dense group receives its children's blocks
                IA = IA + _from_blocks(below_f[g.index], g)
                U, Dinv, _ = articulated_body_step(IA, Sm, arm, project=False)
                U4 = U.reshape(g.nc, n, 6, g.ny)
            else:  # block diagonal: per body
                U4, Dinv, _ = articulated_body_step(IAd, S4, arm, bodies=True)  # (nc, n, 6, ny)
                U = U4.reshape(g.nc, 6 * n, g.ny)
            Us[g.index], Dinvs[g.index] = U, Dinv
            # articulated inertia handed to the parent
            if li > 0:
                if single_output(g):
                    Ub = U4.sum(1)  # (nc, 6, ny)
                    base = IA.reshape(g.nc, n, 6, n, 6).sum((1, 3)) if dense else IAd.sum(1)
                    dparts.append((g, project_articulated_inertia(base, Ub, Dinv)))
                else:
                    if not dense:
                        IA = _block_diag(IAd, g, dt)
                    fparts.append((g, _to_blocks(project_articulated_inertia(IA, U, Dinv), g)))
            if bias is not None:
                pA = bl[s]
                if addp is not None:
                    pA = pA + addp[s]
                pA = pA.reshape(g.nc, 6 * n)
                c = gk.c.reshape(g.nc, 6 * n)
                assert tau is not None  # given with bias
                u = group_y(g, tau) - jnp.einsum("cky,ck->cy", Sm, pA)
                if dense:
                    Ic = jnp.einsum("ckl,cl->ck", IA, c)
                else:
                    Ic = jnp.einsum("cixy,ciy->cix", IAd, gk.c).reshape(g.nc, 6 * n)
                # pa = pA + Ia c + U D^-1 u with Ia c = IA c - U D^-1 U^T c (Ia not formed)
                pa = articulated_bias_force(pA + Ic, U, Dinv, u - jnp.einsum("cky,ck->cy", U, c))
                us[g.index] = u
                pparts.append(pa.reshape(-1, 6))
        if li == 0:
            return None, None
        prev = t.levels[li - 1]
        d = None
        for g, x in dparts:  # single-output clusters: one 6x6 block on their output body
            y = tree.sum_into_parents(x, cluster_view(t, li, g.index), prev.n)
            d = y if d is None else d + y
        f: Any = None  # the multi-output clusters' blocks: {group index: (T, 36)}
        if fparts:  # multi-output clusters: their blocks through the block incidence
            tri = block_incidence(t, li)
            cols = np.cumsum([0] + [g.T for g in lvl.groups])
            f = 0.0
            for g, x in fparts:
                k = lvl.groups.index(g)
                f = f + jnp.asarray(tri[:, cols[k] : cols[k + 1]], dt) @ x
            # per group of the previous level
            offs = np.cumsum([0] + [gp.T for gp in prev.groups])
            f = {gp.index: f[offs[k] : offs[k + 1]] for k, gp in enumerate(prev.groups)}
        p = _flat(pparts) if bias is not None else None
        return (d, f, p), None

    tree.backward_pass(t, step, (("body", I6), ("body", bias)))
    return Articulated(Us, Dinvs, us if bias is not None else None)


# ----------------------------------------------------------------------------- end effectors


def resolve_end_effectors(
    model: ClusterModel, end_effectors: EndEffectors, fn: str = "cefpa"
) -> list[EndEffector]:
    """``[(name, body, frame, xyz (3,))]`` for frames / ``(frame, xyz)`` pairs."""
    tree_ = model.tree
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
                    f"{fn}: end_effectors entries must be a frame name or "
                    f"(frame, xyz offset), got {e!r}"
                ) from None
            xyz = np.asarray(xyz, float).reshape(-1)
            if xyz.shape != (3,):
                raise ValueError(f"{fn}: offset of end effector {name!r} must have 3 entries")
        f = tree_.frame_index(name)
        b = int(tree_.topo.frame_parent[f])
        if b < 0:
            raise ValueError(f"{fn}: end effector {name!r} is fixed to the world")
        out.append((name, b, f, xyz))
    if not out:
        raise ValueError(f"{fn}: end_effectors is empty")
    return out


def ee_transforms(
    model: ClusterModel,
    ws: kin.WorldState,
    ees: Sequence[EndEffector],
    dt: DTypeLike,
) -> Array:
    """Motion transforms from world-origin coordinates to each end-effector frame (6x6)."""
    tree_ = model.tree
    Xs = []
    for _, b, f, xyz in ees:
        Rf, pf = tree_.frame_R[f], tree_.frame_p[f]
        R = ws.R[b] @ Rf
        p = ws.R[b] @ (Rf @ jnp.asarray(xyz, dt) + pf) + ws.p[b]
        Rt = R.T
        Z = jnp.zeros((3, 3), dt)
        Xs.append(jnp.block([[Rt, Z], [-Rt @ spatial.skew(p), Rt]]))
    return spatial.stack(Xs)

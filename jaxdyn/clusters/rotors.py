"""Axisymmetric rotors carried by their parent bodies: an exact model transform.

A rotor of a geared or belt transmission (a dependent joint of an explicit linear cluster: a
leaf body on a revolute joint hanging outside its cluster) whose inertia is symmetric about its
joint axis, with its centre of mass on the axis, has the same spatial inertia at every angle of
its own. Its inertia is then a constant of its parent's frame, and C-RNEA, C-ABA and C-EFPA
(Chignoli et al., T-RO 2024, Algs. 1-3) can run on the link tree alone (13 bodies instead of 25
on Mini Cheetah) with exact rotor terms, the exact counterpart of the reflected-inertia
approximation of §IX-B. With ``J_r`` the rotor's axial moment, ``s_r`` its world axis, ``w_r``
its rate (``G_r`` its row of ``G``) and ``v_p`` / ``omega_p`` / ``a_p`` its parent's motion:

* parents carry their rotors' inertia (composite inertias);
* ``D_k`` gains ``sum_r J_r G_r^T G_r``: the block-diagonal armature of
  :func:`~jaxdyn.clusters.approximate_model`;
* ``U_r = I_r S_r = J_r [s_r; 0]`` per unit rotor rate, so a cluster's ``Ub`` gains
  ``Ue = sum_r J_r [s_r; 0] G_r`` (C-ABA, C-EFPA);
* the invariance ``S_r x* (I_r x) = I_r (S_r x x)`` of an axisymmetric inertia gives
  ``S_r^T (v x* I_r v) = 0`` and reduces the rotor's bias ``v_r x* I_r v_r + I_r c_r``
  (``v_r = v_p + S_r w_r``, ``c_r = w_r v_p x S_r``) to ``v_p x* I_r v_p`` (in the parent's
  composite bias) plus the gyroscopic torque ``[w_r omega_p x J_r s_r; 0]``, handed to the
  parent (C-ABA); its force ``I_r a_r + v_r x* I_r v_r`` to the parent's composite terms plus
  ``[J_r (w_dd_r s_r + w_r omega_p x s_r); 0]``, and its joint torque to
  ``J_r (s_r . alpha_p + w_dd_r)``, i.e. ``tau_k += Ue^T a_p`` besides the armature (C-RNEA).

:func:`fold_rotors` decides, once and from the model's values, which rotors qualify and records a
static :class:`RotorFold` plan in the topology (:func:`jaxdyn.clusters.build` and
:func:`jaxdyn.clusters.load_urdf_plus` apply it by default; ``fold_rotors=False`` keeps the
spanning-tree algorithms). The algorithms then take the folded path whenever the plan is there,
whatever the call (eager, jitted with the model closed over or as an argument, vmapped over the
model's parameters): the choice depends on static data only. The folded parameters (composite
inertias, ``J_r``, ``s_r``, ``G_r``, the armature) are computed at every call from the model's
leaves (:func:`folded_model`), so derivatives with respect to the model flow through them; they are
exact as long as the rotors stay axisymmetric, which is checked at every call by a value check
(:func:`jaxdyn.value_checks.error_if`, on with :mod:`jaxdyn.config`): derivatives with respect to a
rotor's inertia are those within the axisymmetric family. The link tree is rebuilt from the
original's constraint specifications: the rotors and the specs naming them are dropped, the links of
each transmission cluster kept together, implicit loops (Tello's differentials) kept as they are.
Rotors that are not axisymmetric (JVRC-1's, for one), models whose link tree would pick other
independent coordinates, calls with external forces and end effectors on rotors take the general
paths.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import joints, shell, spatial, value_checks
from ..model.model import Topology
from . import spec as S
from .common import setup
from .model import (
    IMPLICIT,
    LINEAR,
    TREE,
    ClusterModel,
    ClusterTopology,
    build_clusters,
    drop_bodies,
    reindex_tree,
    require_cluster_model,
)

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..algorithms.kinematics import WorldState
    from .common import Setup

#: relative tolerance of the axisymmetry and centre-on-axis tests (float64; at run time
#: ``max(SYMMETRY_TOL, 64 eps)`` of the working dtype)
SYMMETRY_TOL = 1e-12


@dataclass(frozen=True, eq=False)
class RotorFold:
    """Static plan of the rotor folding (numpy; see the module docstring).

    ``links`` is the cluster topology of the link tree (``tree_topo``), whose bodies, dofs and
    frames are the original's ``keep``, ``keep_dofs``, ``keep_frames``; its groups take their
    parameter leaves from the original groups ``group_src[g] = (original group, clusters)``
    (implicit loops) or from the rotor terms (armature). Rotor ``r`` sits on body
    ``rotor_body[r]`` (joint coordinate ``rotor_dof[r]``) of the spanning tree, on the link
    body ``rotor_parent[r]`` of the link tree (``nb`` of the link tree: the world); its rate is
    ``G[rotor_group[r]][rotor_cluster[r], rotor_row[r], :] . y`` with ``y`` the independent
    velocities of its original cluster, which are the link model's ``rotor_cols[r]`` (a tuple
    of index arrays).
    ``group_rotors[g]``: per link group, ``None`` or ``(ridx (nc, k), cols (nc, ny))``, the
    rotors driving each of its clusters (padding: ``nr``) and the link-model ``v`` index of
    each of its independent coordinates."""

    links: ClusterTopology
    tree_topo: Topology
    keep: np.ndarray
    keep_dofs: np.ndarray
    keep_frames: np.ndarray
    rotor_body: np.ndarray
    rotor_dof: np.ndarray
    rotor_parent: np.ndarray
    rotor_group: np.ndarray
    rotor_cluster: np.ndarray
    rotor_row: np.ndarray
    rotor_cols: tuple
    group_src: tuple
    group_rotors: tuple
    qi: np.ndarray  # q of the link model = q[qi]
    vi: np.ndarray  # v / tau of the link model = v[vi]
    vi_inv: np.ndarray  # a = a_link[vi_inv]


def _axisymmetric(I, a, tol):
    """``(alpha, beta)`` with ``I = alpha 1 + beta a a^T``, or None."""
    Ja = float(a @ I @ a)
    alpha = 0.5 * (float(np.trace(I)) - Ja)
    beta = Ja - alpha
    ref = alpha * np.eye(3) + beta * np.outer(a, a)
    if np.max(np.abs(I - ref)) > tol * max(1e-300, float(np.max(np.abs(I)))):
        return None
    return alpha, beta


def _strings(x):
    """Every string inside a constraint spec (its joint and link names)."""
    if isinstance(x, str):
        yield x
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _strings(y)
    elif dataclasses.is_dataclass(x):
        for f in dataclasses.fields(x):
            yield from _strings(getattr(x, f.name))


def _concrete(model):
    """The spanning tree's leaves as float64 numpy arrays; ``TypeError`` if traced."""
    tree = model.tree
    try:
        return tuple(
            np.asarray(x, np.float64)
            for x in (tree.mass, tree.com, tree.inertia, tree.Xtree_R, tree.dof_axis)
        )
    except jax.errors.TracerArrayConversionError:
        raise TypeError(
            "fold_rotors: the model's parameters are traced; fold the rotors (a build-time "
            "transform: it decides from the parameters' values which rotors are axisymmetric) "
            "outside jax.jit / jax.grad / jax.vmap, then pass the folded model in"
        ) from None


def fold_rotors(model: ClusterModel, enable: bool = True) -> ClusterModel:
    """The model with its axisymmetric transmission rotors carried by their parent bodies in
    C-RNEA, C-ABA and C-EFPA (module docstring; exact), or ``model`` itself where no rotor
    qualifies. ``enable=False`` removes a fold plan (the algorithms then run on the whole
    spanning tree). Same parameter leaves, same coordinates, same results: only the static
    plan in ``model.topo.fold`` changes. Needs concrete parameters (call it outside
    ``jit``)."""
    require_cluster_model("fold_rotors", model)
    if not enable:
        return model if model.topo.fold is None else _with_fold(model, None)
    if model.topo.fold is not None:
        return model
    mass, com, inertia, XR, axis6 = _concrete(model)
    plan = _plan(model, mass, com, inertia, XR, axis6)
    return model if plan is None else _with_fold(model, plan)


def _with_fold(model, plan):
    return ClusterModel(model.tree, model.params, model.topo.replace(fold=plan))


def _plan(model, mass, com, inertia, XR, axis6):
    t, tt = model.topo, model.tree.topo
    if any("armature" in p for p in model.params):
        return None  # armature on the original clusters: not carried over
    children = np.zeros(tt.nb, np.int64)
    for b in range(tt.nb):
        if tt.parent[b] >= 0:
            children[tt.parent[b]] += 1
    rotors, blocks = [], []
    for g in t.groups:
        if not np.all(g.out == g.out[:, :1]):
            return None
        if g.type != LINEAR:  # plain joints and implicit loops stay as they are
            continue
        for c in range(g.nc):
            found = set()
            for d in np.nonzero(g.static["dep"][c])[0]:
                bi = int(np.nonzero(g.B[c, :, d])[0][0])
                b = int(g.body[c][bi])
                if (
                    children[b]
                    or g.Ab[c, bi].sum() != 1
                    or tt.nv_j[b] != 1
                    or int(tt.kind[b]) != joints.ONE_DOF
                ):
                    return None  # not a leaf rotor hanging outside its cluster
                s6 = axis6[int(g.dof[c, d])]
                a = s6[:3]
                if np.any(s6[3:] != 0) or abs(np.linalg.norm(a) - 1) > 1e-12:
                    return None  # not a pure rotation
                cperp = com[b] - (a @ com[b]) * a
                if np.linalg.norm(cperp) > SYMMETRY_TOL * max(1.0, float(np.linalg.norm(com[b]))):
                    return None
                if _axisymmetric(inertia[b], a, SYMMETRY_TOL) is None:
                    return None
                rotors.append(dict(body=b, dof=int(g.dof[c, d]), group=g.index, cluster=c, row=d))
                found.add(b)
            links = [int(b) for b in g.body[c] if int(b) not in found]
            if len(links) > 1:
                blocks.append(S.Cluster(tuple(tt.body_names[b] for b in links)))
    if not rotors:
        return None
    # the link tree: rotors dropped with the specs that name them, the links of a cluster kept
    # together; implicit loops and other specs unchanged
    drop = sorted(r["body"] for r in rotors)
    gone = {tt.body_names[b] for b in drop} | {tt.joint_names[b] for b in drop}
    specs = [sp for sp in t.constraints if not gone.intersection(_strings(sp))]
    try:
        fm = build_clusters(
            drop_bodies(model.tree, drop), specs + blocks, name=f"{model.name}_rotors_folded"
        )
    except ValueError:
        return None
    if sorted(fm.q_names) != sorted(model.q_names) or sorted(fm.v_names) != sorted(model.v_names):
        return None  # a different choice of independent coordinates: keep the general path
    ft = fm.topo
    # parameter leaves of the link groups: implicit loops from their original clusters
    orig_cluster = {
        frozenset(tt.body_names[b] for b in bs): c for c, bs in enumerate(t.cluster_bodies)
    }
    lt = fm.tree.topo
    group_src = []
    for g in ft.groups:
        if g.type == TREE:
            group_src.append(None)
            continue
        if g.type != IMPLICIT:
            return None  # a linear constraint between links only: not supported
        src = []
        for c in range(g.nc):
            oc = orig_cluster.get(frozenset(lt.body_names[b] for b in g.body[c]))
            if oc is None:
                return None
            og = t.groups[t.cluster_group[oc]]
            if og.type != IMPLICIT or og.key != g.key or og.leaf_keys != g.leaf_keys:
                return None
            src.append((og.index, oc - og.cl0))
        gis = {s[0] for s in src}
        if len(gis) != 1:
            return None
        group_src.append((gis.pop(), np.array([s[1] for s in src], np.int64)))
    # rotors: link parents, rates in the link model's coordinates
    L = {n: i for i, n in enumerate(lt.body_names)}
    vpos = {n: i for i, n in enumerate(fm.v_names)}
    parent, cols = [], []
    for r in rotors:
        pb = int(tt.parent[r["body"]])
        parent.append(L[tt.body_names[pb]] if pb >= 0 else lt.nb)
        og = t.groups[r["group"]]
        names = [model.v_names[og.v0 + r["cluster"] * og.ny + k] for k in range(og.ny)]
        cols.append([vpos[n] for n in names])
    cols = tuple(np.array(c, np.int64) for c in cols)
    group_rotors = []
    for g in ft.groups:
        gcols = g.v0 + np.arange(g.nc * g.ny).reshape(g.nc, g.ny)
        hits = [
            [i for i in range(len(rotors)) if set(cols[i]) & set(gcols[c])] for c in range(g.nc)
        ]
        k = max(len(h) for h in hits)
        if k == 0:
            group_rotors.append(None)
            continue
        ridx = np.full((g.nc, k), len(rotors), np.int64)  # padding: a zero row
        for c, h in enumerate(hits):
            ridx[c, : len(h)] = h
        group_rotors.append((ridx, gcols))
    keep = np.array([b for b in range(tt.nb) if b not in set(drop)], np.int64)
    keep_dofs = np.concatenate(
        [np.arange(tt.v_start[b], tt.v_start[b] + tt.nv_j[b]) for b in keep]
    ).astype(np.int64)
    keep_frames = np.array(
        [f for f in range(len(tt.frame_names)) if int(tt.frame_parent[f]) not in set(drop)],
        np.int64,
    )
    vi = np.array([model.v_names.index(n) for n in fm.v_names], np.int64)
    return RotorFold(
        links=ft,
        tree_topo=lt,
        keep=keep,
        keep_dofs=keep_dofs,
        keep_frames=keep_frames,
        rotor_body=np.array([r["body"] for r in rotors], np.int64),
        rotor_dof=np.array([r["dof"] for r in rotors], np.int64),
        rotor_parent=np.array(parent, np.int64),
        rotor_group=np.array([r["group"] for r in rotors], np.int64),
        rotor_cluster=np.array([r["cluster"] for r in rotors], np.int64),
        rotor_row=np.array([r["row"] for r in rotors], np.int64),
        rotor_cols=cols,
        group_src=tuple(group_src),
        group_rotors=tuple(group_rotors),
        qi=np.array([model.q_names.index(n) for n in fm.q_names], np.int64),
        vi=vi,
        vi_inv=np.argsort(vi),
    )


# ----------------------------------------------------------------------------- run time


class Rotors(eqx.Module):
    """Rotor data of one call, computed from the model's leaves (:func:`folded_model`):
    ``J (nr,)`` axial moments, ``axis (nr, 3)`` axes in the parent frames, ``W (nr + 1, nv)``
    rotor rates per unit link-model velocity (last row zero: padding)."""

    J: jax.Array
    axis: jax.Array
    W: jax.Array


def _rotor_check(dt, a6, com, inertia):
    """Whether a rotor of the plan is no longer a pure rotation about a unit
    axis through its centre of mass with an inertia symmetric about that axis."""
    tol = max(SYMMETRY_TOL, 64.0 * float(jnp.finfo(dt).eps))
    a, lin = a6[:, :3], a6[:, 3:]
    Ja = jnp.einsum("ri,rij,rj->r", a, inertia, a)
    alpha = 0.5 * (jnp.trace(inertia, axis1=-2, axis2=-1) - Ja)
    beta = Ja - alpha
    ref = alpha[:, None, None] * jnp.eye(3, dtype=dt) + beta[:, None, None] * (
        a[:, :, None] * a[:, None, :]
    )
    scale = jnp.max(jnp.abs(inertia), (-2, -1))
    asym = jnp.max(jnp.abs(inertia - ref), (-2, -1)) > tol * scale
    cperp = com - jnp.sum(a * com, -1, keepdims=True) * a
    off = jnp.sqrt(jnp.sum(cperp * cperp, -1)) > tol * jnp.maximum(
        1.0, jnp.sqrt(jnp.sum(com * com, -1))
    )
    axis_bad = (jnp.abs(jnp.sum(a * a, -1) - 1) > tol) | jnp.any(lin != 0, -1)
    return jnp.any(asym | off | axis_bad)


@jax.jit
def folded_model(model: ClusterModel) -> tuple[ClusterModel, Rotors]:
    """``(link model, Rotors)`` of a model with a fold plan: the link-tree
    :class:`ClusterModel` whose leaves are computed from ``model``'s (composite inertias of the
    parents and their rotors at angle 0, the same at every angle; the implicit loops'
    parameters; the rotors' reflected inertia as armature ``D_k += sum_r J_r G_r^T G_r``), and
    the rotor terms' data. The rotors' axisymmetry is checked (value checks on). Jitted (one
    compiled call in eager use; inlined under an outer ``jit``)."""
    f = model.topo.fold
    tr = model.tree
    dt = tr.mass.dtype
    rb = f.rotor_body
    a6 = tr.dof_axis[f.rotor_dof]
    m_r, c_r, I_r = tr.mass[rb], tr.com[rb], tr.inertia[rb]
    if value_checks.enabled() and not jnp.issubdtype(dt, jnp.complexfloating):
        bad = _rotor_check(dt, a6, c_r, I_r)
        names = [tr.topo.body_names[b] for b in rb]
        m_r = value_checks.error_if(
            m_r,
            bad,
            f"{model.name}: a rotor carried by its parent (jaxdyn.clusters.fold_rotors) is no "
            f"longer symmetric about its axis, with its centre of mass on it ({names}); rebuild "
            "the model with fold_rotors=False (or jaxdyn.clusters.fold_rotors(model, False))",
        )
    # composite inertias of the link bodies: each rotor at angle 0 in its parent's frame,
    # summed about the parent's origin (mass, first moment h = m c, inertia about the origin)
    R = tr.Xtree_R[rb]
    c_rp = spatial.mv(R, c_r) + tr.Xtree_p[rb]
    I_rp = spatial.mm(spatial.mm(R, I_r), jnp.swapaxes(R, -1, -2))
    keep = f.keep
    nl = len(keep)
    m0, h0, Ib0 = spatial.inertia_params(tr.mass[keep], tr.com[keep], tr.inertia[keep])
    mr, hr, Ibr = spatial.inertia_params(m_r, c_rp, I_rp)
    P = np.zeros((nl, len(rb)))
    has_parent = f.rotor_parent < nl
    P[f.rotor_parent[has_parent], np.nonzero(has_parent)[0]] = 1.0
    P = jnp.asarray(P, dt)
    m = m0 + P @ mr
    h = h0 + P @ hr
    Ibar = Ib0 + jnp.einsum("lr,rij->lij", P, Ibr)
    safe = jnp.where(m > 0, m, 1)
    com = jnp.where((m > 0)[:, None], h / safe[:, None], 0)
    C = spatial.skew(com)
    Ic = Ibar + m[:, None, None] * spatial.mm(C, C)
    # touched bodies only: the others keep their leaves exactly
    touched = np.zeros(nl, bool)
    touched[f.rotor_parent[has_parent]] = True
    if not np.all(touched):
        sel = jnp.asarray(touched)
        m = jnp.where(sel, m, tr.mass[keep])
        com = jnp.where(sel[:, None], com, tr.com[keep])
        Ic = jnp.where(sel[:, None, None], Ic, tr.inertia[keep])
    link_tree = reindex_tree(
        tr, f.tree_topo, keep, f.keep_dofs, f.keep_frames, mass=m, com=com, inertia=Ic
    )
    # rotor terms
    a = a6[:, :3]
    J = jnp.einsum("ri,rij,rj->r", a, I_r, a)  # axial moment alpha + beta
    axis = spatial.mv(tr.Xtree_R[rb], a)  # in the parent frame
    zero = jnp.zeros(f.links.nv, dt)
    W = spatial.stack(
        [
            zero.at[cols].set(model.params[gi]["G"][c, d])
            for gi, c, d, cols in zip(f.rotor_group, f.rotor_cluster, f.rotor_row, f.rotor_cols)
        ]
        + [zero]
    )  # (nr + 1, nv): rotor rates per unit link-model velocity, a zero row for padding
    params = []
    for src, gr in zip(f.group_src, f.group_rotors):
        prm = {}
        if src is not None:
            gi, cs = src
            prm = {k: x[cs] for k, x in model.params[gi].items()}
        if gr is not None:
            ridx, gcols = gr
            Gr = W[ridx[:, :, None], gcols[:, None, :]]  # (nc, k, ny)
            Jr = jnp.concatenate([J, jnp.zeros(1, dt)])[ridx]  # (nc, k)
            prm = dict(prm, armature=jnp.einsum("ck,cky,ckz->cyz", Jr, Gr, Gr))
        params.append(prm)
    return ClusterModel(link_tree, tuple(params), f.links), Rotors(J, axis, W)


def rotor_terms(
    fold: RotorFold,
    rot: Rotors,
    ws: WorldState,
    v_t: Array | None,
    v: Array | None,
    dt: DTypeLike,
    a: Array | None = None,
) -> list[tuple[Array, Array | None] | None]:
    """Per group of the link model, the rotor terms ``(Ue (nc, 6, ny), he (nc, 6))`` added to
    ``Ub`` and to the force handed to the parent (module docstring), or None; ``he`` is None
    when ``v`` is None (no velocity terms: C-EFPA). With accelerations ``a`` (C-RNEA), ``he``
    also holds ``J w_dd s`` (the rotor's force less what the parent's composite inertia holds
    is ``[J (w_dd s + w omega_p x s); 0]``). ``fold``: the model's plan; ``ws``, ``v_t``,
    ``v`` and ``a`` are those of the link model."""
    f = fold
    R = jnp.concatenate([ws.R, jnp.eye(3, dtype=dt)[None]])[f.rotor_parent]  # last: the world
    Js = rot.J[:, None] * spatial.mv(R, rot.axis)
    W = rot.W[:-1]
    if v is None:
        rows = jnp.concatenate([Js, jnp.zeros((1, 3), dt)])
    else:
        assert v_t is not None  # given with v
        wp = jnp.concatenate([v_t[:, :3], jnp.zeros((1, 3), dt)])[f.rotor_parent]  # omega_p
        w = spatial.mv(W, v)[:, None]  # rotor rates
        n = w * spatial.cross(wp, Js)
        if a is not None:
            n = n + spatial.mv(W, a)[:, None] * Js
        # one row per rotor and a zero row for padding: [J s, w omega_p x J s (+ w_dd J s)]
        rows = jnp.concatenate([jnp.concatenate([Js, n], -1), jnp.zeros((1, 6), dt)])
    terms = []
    for gr in f.group_rotors:
        if gr is None:
            terms.append(None)
            continue
        ridx, gcols = gr
        Gr = rot.W[ridx[:, :, None], gcols[:, None, :]]  # (nc, k, ny)
        x = rows[ridx]  # (nc, k, 6)
        Ue = jnp.sum(x[..., :3, None] * Gr[:, :, None, :], 1)
        Ue = jnp.concatenate([Ue, jnp.zeros_like(Ue)], 1)
        if v is None:
            terms.append((Ue, None))
            continue
        he = jnp.sum(x[..., 3:], 1)
        terms.append((Ue, jnp.concatenate([he, jnp.zeros_like(he)], -1)))
    return terms


def setup_folded(
    model: ClusterModel,
    fn: str,
    q: ArrayLike,
    v: ArrayLike | None = None,
    x: ArrayLike | None = None,
    xname: str | None = None,
    alternative: str | None = None,
) -> tuple[Setup, tuple[RotorFold, Rotors]]:
    """:func:`~jaxdyn.clusters.common.setup` on the link model of a model with a fold plan:
    inputs checked against ``model``, cast to their common dtype, reordered to the link
    model's coordinates. Returns ``(Setup, (RotorFold, Rotors))``; results in the link model's
    ``v`` order map back by ``[model.topo.fold.vi_inv]``."""
    require_cluster_model(fn, model, alternative)
    f = model.topo.fold
    q = shell.as_array(fn, "q", q, (("nq", model.nq),), model)
    if v is not None:
        v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    if x is not None:
        x = shell.as_array(fn, xname, x, (("nv", model.nv),), model)
    dt = shell.common_dtype(q, v, x, model=model.tree)
    shell.check_model_dtype(fn, model.tree, dt)
    fm, rot = folded_model(model.astype(dt))
    take = lambda y, i: None if y is None else y[i]
    s = setup(fm, fn, q[f.qi], take(v, f.vi), take(x, f.vi), xname)
    return s, (f, rot)

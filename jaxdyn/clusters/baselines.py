"""Baselines for the cluster algorithms (same signatures), on the spanning tree.

Reference: Chignoli et al., T-RO 2024, §II-C/D (and §IX, the methods C-RNEA / C-ABA / C-EFPA
are benchmarked against):

* :func:`projected_rnea` -- ``tau = G^T RNEA_tree(q, G v, G a + g)`` (Kumar et al.'s projected
  inverse dynamics, paper eq. (10));
* :func:`projection_fd` -- projection method: ``(G^T H G) a = tau - G^T (C + H g)``, solved by
  Cholesky (paper eq. (12));
* :func:`lagrange_fd` -- Lagrange multipliers with the implicit constraint Jacobian ``K``:
  ``tau_q = (G^T)^+ tau``, ``lambda = (K H^-1 K^T)^-1 (k - K H^-1 (tau_q - C))``,
  ``qdd = H^-1 (tau_q - C + K^T lambda)`` (paper eq. (11));
* :func:`projected_osim` -- ``Λ^-1 = J G (G^T H G)^-1 G^T J^T``;
* :func:`approximate_model` -- the reflected-inertia ("approximate") and unconstrained link
  trees of §IX-B: rotors removed, ``R = sum_r S_r^T I_r S_r`` added as diagonal (MuJoCo's
  armature) or per-cluster block joint-space inertia.

``H`` and ``C`` come from jaxdyn's CRBA and RNEA on the spanning tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import eager, spatial
from .._precision import full_precision
from ..algorithms import kinematics as kin
from ..algorithms.crba import crba_world
from ..algorithms.rnea import rnea_world
from . import spec as S
from .common import check_f_ext, ee_transforms, resolve_end_effectors
from .model import (
    IMPLICIT,
    TREE,
    ClusterModel,
    build_clusters,
    drop_bodies,
    require_cluster_model,
    with_armature,
)
from .state import (
    all_group_states,
    assemble_spanning,
    loop_constraints,
    prepare,
    spanning_G,
    spanning_g,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..algorithms.kinematics import WorldState
    from .common import EndEffector, EndEffectors

APPROXIMATIONS = ("diagonal", "block_diagonal", "none")


def _armature_dense(model, dt):
    """Block-diagonal ``(nv, nv)`` armature of the model (None if it has none)."""
    t = model.topo
    if not any("armature" in p for p in model.params):
        return None
    R = jnp.zeros((t.nv, t.nv), dt)
    for g, prm in zip(t.groups, model.params):
        if "armature" not in prm:
            continue
        idx = g.v0 + np.arange(g.nc * g.ny).reshape(g.nc, g.ny)
        R = R.at[idx[:, :, None], idx[:, None, :]].set(prm["armature"])
    return R


def _spanning(model, fn, q, v, x=None, xname="a", f_ext=None) -> tuple[Any, ...]:
    """``(model, q, v, x, f_ext, dtype, q_tree, qdot_tree, G, g, world state)`` (``x`` and
    ``f_ext`` None where not given)."""
    model, q, v, x, dt = prepare(model, fn, q, v, x)
    f_ext = check_f_ext(fn, model, f_ext)
    if f_ext is not None:
        f_ext = f_ext.astype(dt)
    gss = all_group_states(model, q, v, check=fn)
    qs = assemble_spanning(model, gss, "qs")
    qd = None if v is None else assemble_spanning(model, gss, "qd")
    G = spanning_G(model, gss, dt)
    gv = spanning_g(model, gss, dt)
    ws = kin.world_state(model.tree, qs)
    return model, q, v, x, f_ext, dt, qs, qd, G, gv, ws


@eager.eager_jit
@full_precision
def projected_rnea(
    model: ClusterModel, q: ArrayLike, v: ArrayLike, a: ArrayLike, f_ext: ArrayLike | None = None
) -> Array:
    """Projected inverse dynamics ``tau = G^T RNEA_tree(q, G v, G a + g)`` (paper eq. (10))."""
    # fb: f_ext checked and cast (Array or None)
    model, q, v, a, fb, dt, qs, qd, G, gv, ws = _spanning(
        model, "projected_rnea", q, v, a, "a", f_ext
    )
    tau = rnea_world(model.tree, ws, qd, G @ a + gv, fb)[0]
    out = G.T @ tau
    R = _armature_dense(model, dt)
    return out if R is None else out + R @ a


def _H_C(model, ws, qd, f_ext, G, gv, dt):
    M = crba_world(model.tree, ws)
    C = rnea_world(model.tree, ws, qd, jnp.zeros_like(qd), f_ext)[0]
    return M, C


@eager.eager_jit
@full_precision
def projection_fd(
    model: ClusterModel, q: ArrayLike, v: ArrayLike, tau: ArrayLike, f_ext: ArrayLike | None = None
) -> Array:
    """Projection-method forward dynamics: Cholesky solve of
    ``(G^T H G) a = tau - G^T (C + H g)`` (paper eq. (12))."""
    model, q, v, tau, f_ext, dt, qs, qd, G, gv, ws = _spanning(
        model, "projection_fd", q, v, tau, "tau", f_ext
    )
    M, C = _H_C(model, ws, qd, f_ext, G, gv, dt)
    H = G.T @ M @ G
    R = _armature_dense(model, dt)
    if R is not None:
        H = H + R
    rhs = tau - G.T @ (C + M @ gv)
    cf = jax.scipy.linalg.cho_factor(H)
    return jax.scipy.linalg.cho_solve(cf, rhs)


@eager.eager_jit
@full_precision
def lagrange_fd(
    model: ClusterModel, q: ArrayLike, v: ArrayLike, tau: ArrayLike, f_ext: ArrayLike | None = None
) -> Array:
    """Lagrange-multiplier forward dynamics with the implicit constraint Jacobian ``K``
    (paper eq. (11)): ``H qdd = tau_q - C + K^T lambda``, ``K qdd = k``, with
    ``tau_q = E^T tau`` (``E`` the constant left inverse of ``G`` that picks the independent
    coordinates, ``E G = 1``, so ``G^T tau_q = tau``; any such ``tau_q`` gives the same motion)
    and ``a = E (qdd - g)``.

    Solved as one KKT system ``[[H, -K^T], [K, 0]] [qdd; lambda] = [tau_q - C; k]`` by a single
    LU factorisation (the paper's Schur-complement form
    ``lambda = (K H^-1 K^T)^-1 (k - K H^-1 (tau_q - C))`` has the same solution; with jaxlib
    0.10.2 a vmapped program holding two LAPACK factorisations can deadlock on XLA:CPU at
    large batch sizes, see ``docs/clusters.md``)."""
    model, q, v, tau, f_ext, dt, qs, qd, G, gv, ws = _spanning(
        model, "lagrange_fd", q, v, tau, "tau", f_ext
    )
    if any("armature" in p for p in model.params):
        raise ValueError(
            "lagrange_fd: models with armature (approximate models) have no "
            "spanning-tree form; use projection_fd or caba"
        )
    M, C = _H_C(model, ws, qd, f_ext, G, gv, dt)
    _, K, k = loop_constraints(model, q, v)
    E = jnp.asarray(model.topo.G_left_inverse, dt)
    tau_q = E.T @ tau
    n, m = M.shape[0], K.shape[0]
    if m == 0:
        qdd = jnp.linalg.solve(M, tau_q - C)
    else:
        kkt = jnp.block([[M, -K.T], [K, jnp.zeros((m, m), dt)]])
        qdd = jnp.linalg.solve(kkt, jnp.concatenate([tau_q - C, k]))[:n]
    return E @ (qdd - gv)


def ee_jacobians(
    model: ClusterModel, ws: WorldState, ees: Sequence[EndEffector], dt: DTypeLike
) -> Array:
    """Spanning-tree Jacobians ``(m, 6, nv_tree)`` of end effectors, in their frames."""
    t = model.tree.topo
    X = ee_transforms(model, ws, ees, dt)
    Js = []
    for (_, b, _, _), Xe in zip(ees, X):
        mask = jnp.asarray(t.body_dof_support[b], dt)
        Js.append(Xe @ (ws.S.T * mask[None]))
    return spatial.stack(Js)


@eager.eager_jit
@full_precision
def projected_osim(model: ClusterModel, q: ArrayLike, end_effectors: EndEffectors) -> Array:
    """Inverse OSIM by projection: ``Λ^-1 = (J G) (G^T H G)^-1 (J G)^T`` (same frames as
    :func:`~jaxdyn.clusters.cefpa`)."""
    require_cluster_model("projected_osim", model)
    ees = resolve_end_effectors(model, end_effectors, "projected_osim")
    model, q, v, _, _, dt, qs, qd, G, gv, ws = _spanning(model, "projected_osim", q, None)
    M = crba_world(model.tree, ws)
    H = G.T @ M @ G
    R = _armature_dense(model, dt)
    if R is not None:
        H = H + R
    J = ee_jacobians(model, ws, ees, dt).reshape(6 * len(ees), -1) @ G
    cf = jax.scipy.linalg.cho_factor(H)
    return J @ jax.scipy.linalg.cho_solve(cf, J.T)


# ----------------------------------------------------------------------------- approximations


def approximate_model(model: ClusterModel, kind: str = "diagonal") -> ClusterModel:
    """Reflected-inertia approximation of a model with geared / belt transmissions (paper §IX-B;
    grbda ``ReflectedInertiaTreeModel``).

    The rotors (dependent bodies of explicit clusters, which must be leaves attached outside
    their cluster) are removed; the link tree gets the rotors' reflected inertia
    ``R_k = sum_r G_r^T (s_r^T I_r s_r) G_r`` (``G_r`` the rotor's row of ``G``, ``s_r`` its joint
    axis, ``I_r`` its spatial inertia) as joint-space armature:

    - ``"diagonal"``: ``diag(R_k)`` per joint (one-joint clusters: plain ABA with armature, as
      MuJoCo);
    - ``"block_diagonal"``: the full block ``R_k``, the cluster's links kept together (C-ABA
      adds ``R_k`` to ``D_k``, exactly ``(H_links + blkdiag R)^-1``);
    - ``"none"``: the unconstrained link tree (``R = 0``).

    Its coordinates are the independent coordinates of ``model`` (same names; see
    :func:`approximate_state`). Implicit (loop) clusters raise ``ValueError``.
    """
    require_cluster_model("approximate_model", model)
    if kind not in APPROXIMATIONS:
        raise ValueError(f"approximate_model: kind must be one of {APPROXIMATIONS}, got {kind!r}")
    t = model.topo
    tree = model.tree
    tt = tree.topo
    dt = tree.mass.dtype
    children = {b: [] for b in range(-1, tt.nb)}
    for b in range(tt.nb):
        children[int(tt.parent[b])].append(b)
    drop, blocks = [], []  # blocks: (link bodies, R (ny, ny) or None)
    I6 = spatial.inertia_matrix(*spatial.inertia_params(tree.mass, tree.com, tree.inertia))
    for g in t.groups:
        if g.type == IMPLICIT:
            raise ValueError(
                f"approximate_model: cluster(s) "
                f"{list(t.cluster_names[g.cl0 : g.cl0 + g.nc])} have implicit loop "
                "constraints; the reflected-inertia approximation needs rotors"
            )
        for c in range(g.nc):
            bodies = list(g.body[c])
            if g.type == TREE:
                blocks.append((bodies, None))
                continue
            G = model.params[g.index]["G"][c]
            dep = np.nonzero(g.static["dep"][c])[0]
            R = jnp.zeros((g.ny, g.ny), dt)
            rotor_bodies = set()
            for d in dep:
                bi = int(np.nonzero(g.B[c, :, d])[0][0])
                b = bodies[bi]
                if children[b] or g.Ab[c, bi].sum() != 1:
                    raise ValueError(
                        f"approximate_model: dependent joint {tt.joint_names[b]!r} of cluster "
                        f"{t.cluster_names[g.cl0 + c]!r} is not a rotor (a leaf body attached "
                        "outside its cluster)"
                    )
                s = tree.dof_axis[g.dof[c, d]]
                Gr = G[d][None]
                R = R + Gr.T @ Gr * (s @ I6[b] @ s)
                rotor_bodies.add(b)
            drop += sorted(rotor_bodies)
            blocks.append(([b for b in bodies if b not in rotor_bodies], R))
    link_tree = drop_bodies(tree, drop)
    names = link_tree.topo.joint_names
    cons = []
    if kind == "block_diagonal":
        for bodies, _ in blocks:
            if len(bodies) > 1:
                cons.append(S.Cluster(tuple(tt.body_names[b] for b in bodies)))
    approx = build_clusters(link_tree, cons, name=f"{model.name}_approx_{kind}")
    if kind == "none":
        return approx
    # armature per new cluster
    at = approx.topo
    arm_of_joint = {}  # joint name -> (block id, position)
    for k, (bodies, R) in enumerate(blocks):
        if R is None:
            continue
        for pos, b in enumerate(bodies):
            arm_of_joint[tt.joint_names[b]] = (k, pos)
    armature = []
    for c in range(at.n_clusters):
        bodies = at.cluster_bodies[c]
        jn = [names[b] for b in bodies]
        hits = [arm_of_joint.get(j) for j in jn]
        if all(h is None for h in hits):
            armature.append(None)
            continue
        if kind == "diagonal":
            (hit,) = hits  # one joint per cluster, a rotor's (not all hits are None)
            assert hit is not None
            k, pos = hit
            R = blocks[k][1]
            assert R is not None  # blocks with R None have no hits
            armature.append(R[pos, pos].reshape(1, 1))
        else:
            ks = {h[0] for h in hits if h is not None}
            assert len(ks) == 1 and all(h is not None for h in hits)
            armature.append(blocks[ks.pop()][1])
    return with_armature(approx, armature)


def approximate_state(
    model: ClusterModel, approx: ClusterModel, q: ArrayLike, v: ArrayLike | None = None
) -> Array | tuple[Array, Array]:
    """Cluster state of ``model`` -> state of ``approx`` (:func:`approximate_model`), by
    coordinate names (the approximate model keeps the independent coordinates)."""
    require_cluster_model("approximate_state", model)
    qi = [model.q_names.index(n) for n in approx.q_names]
    qa = jnp.asarray(q)[np.array(qi)]
    if v is None:
        return qa
    vi = [model.v_names.index(n) for n in approx.v_names]
    return qa, jnp.asarray(v)[np.array(vi)]

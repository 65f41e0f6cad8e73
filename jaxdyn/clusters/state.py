"""Cluster state <-> spanning-tree state, loop constraints, valid configurations.

Reference: Chignoli et al. (T-RO 2024), §II-B: implicit constraints ``phi(q) = 0``,
``K qdot = 0``, ``K qdd = k`` (``k = -Kdot qdot``), explicit ``q = gamma(y)``,
``qdot = G ydot``, ``qdd = G ydd + g`` (``g = Gdot ydot``), and the implicit -> explicit
conversion ``G = P [I; -K_d^-1 K_i]``, ``g = P [0; K_d^-1 k]`` (eq. (8)).

Value check of ``q``: the spanning coordinates of implicit (loop) clusters must satisfy ``phi(q) =
0``. Every function that maps a cluster position to the spanning tree (the algorithms,
:func:`spanning_state`, ...) checks ``|phi_i| <= tol * s`` by a value check
(:func:`jaxdyn.value_checks.error_if`, switched off with ``jaxdyn.config.update("value_checks",
False)``), with ``s`` the cluster's residual scale (the largest row sum of ``|K|`` at the build-time
configuration: how much ``phi`` changes for a unit change of the coordinates, so that ``phi / s`` is
about the distance to the constraint manifold in radians, or metres for prismatic joints) and ``tol
= max(1e-6, 1000 eps)`` (:func:`loop_tolerance`: ``1e-6`` in float64, ``1.2e-4`` in float32).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import eager, joints, shell, spatial, value_checks
from .._precision import full_precision
from ..algorithms import configuration as tree_configuration
from .model import IMPLICIT, LINEAR, TREE, ClusterModel, Group, require_cluster_model

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..model.model import Model

#: relative tolerance of the loop-constraint residual of ``q`` in float64 (see the module doc)
LOOP_TOL = 1e-6


def loop_tolerance(dtype: DTypeLike) -> float:
    """Relative tolerance of the loop residual check: ``max(LOOP_TOL, 1000 eps(dtype))``."""
    eps = float(jnp.finfo(dtype).eps)
    return max(LOOP_TOL, 1000.0 * eps)


class GroupState(NamedTuple):
    """Per-group spanning quantities, ``(nc, ...)``; ``G``/``g`` are None for plain joints."""

    qs: jax.Array  # (nc, nqs) spanning positions
    qd: jax.Array | None  # (nc, nvs) spanning velocities
    G: jax.Array | None  # (nc, nvs, ny)
    g: jax.Array | None  # (nc, nvs)


class SpanningState(NamedTuple):
    """The spanning-tree state of a cluster state (jaxdyn joint order of ``model.tree``).

    ``G (nv_tree, nv)`` and ``g (nv_tree,)`` give ``qdot = G v``, ``qdd = G a + g``."""

    q: jax.Array
    v: jax.Array | None
    a: jax.Array | None
    G: jax.Array
    g: jax.Array


def phi_function(group: Group) -> Callable[[Array, Any], Array]:
    """``phi(qc, datas)`` of an implicit group (one cluster; vmap it over the group)."""
    templates = [t for t, _ in group.items]

    def phi(qc, datas):
        return jnp.concatenate([t.phi(qc, d) for t, d in zip(templates, datas)])

    return phi


def item_datas(model: ClusterModel, group: Group) -> tuple[Any, ...]:
    """The per-cluster data of the constraint items of an implicit group, ``(nc, ...)``."""
    prm = model.params[group.index]
    return tuple(t.data(model.tree, group.static, prm, pre) for t, pre in group.items)


def implicit_phi_K(model: ClusterModel, group: Group, qc: Array) -> tuple[Array, Array]:
    """``phi (nc, m)`` and ``K = dphi/dq (nc, m, nvs)`` of an implicit group."""
    phi = phi_function(group)
    datas = item_datas(model, group)
    K, ph = jax.vmap(jax.jacfwd(_with_value(phi), has_aux=True))(qc, datas)
    return ph, K


def _with_value(phi):
    """``x -> (phi(x), phi(x))``: with ``jacfwd(..., has_aux=True)`` the Jacobian and the value
    from one evaluation."""

    def f(x, d):
        p = phi(x, d)
        return p, p

    return f


def kdot_qdot(phi: Callable[[Array, Any], Array], q: Array, qd: Array, d: Any) -> Array:
    """``Kdot qdot = d^2/dh^2 phi(q + h qdot)`` at ``h = 0`` (a second directional derivative:
    two nested JVPs, cheaper than differentiating the Jacobian)."""
    f = lambda x: phi(x, d)
    return jax.jvp(lambda x: jax.jvp(f, (x,), (qd,))[1], (q,), (qd,))[1]


def small_inv(A: Array) -> Array:
    """Inverse of small square matrices (closed form up to 2x2)."""
    k = A.shape[-1]
    if k == 1:
        return 1 / A
    if k == 2:
        a, b, c, d = A[..., 0, 0], A[..., 0, 1], A[..., 1, 0], A[..., 1, 1]
        det = a * d - b * c
        return (
            spatial.stack([spatial.stack([d, -b], -1), spatial.stack([-c, a], -1)], -2)
            / det[..., None, None]
        )
    return jnp.linalg.inv(A)


def group_qc(g: Group, q: Array) -> Array:
    """The cluster positions of group ``g``, ``(nc, nqc)``."""
    return q[g.q0 : g.q1].reshape(g.nc, g.nqc)


def group_y(g: Group, v: Array) -> Array:
    """The independent velocities (or accelerations, torques) of group ``g``, ``(nc, ny)``."""
    return v[g.v0 : g.v1].reshape(g.nc, g.ny)


def linear_map(G: Array, Gnz: np.ndarray, y: Array) -> Array:
    """``G y`` per cluster, ``G (nc, nvs, ny)``, unrolled over ``ny`` (an elementwise
    expression XLA fuses, instead of a batched dot); columns that are zero in the static
    pattern ``Gnz`` are skipped."""
    out = None
    for k in range(G.shape[2]):
        if not np.any(Gnz[:, :, k]):
            continue
        term = G[:, :, k] * y[:, k, None]
        out = term if out is None else out + term
    return jnp.zeros(G.shape[:2], y.dtype) if out is None else out


def check_loops(
    fn: str,
    model: ClusterModel,
    gss: list[GroupState],
    residuals: Sequence[tuple[Group, Array]],
) -> list[GroupState]:
    """``error_if`` (value checks on) the loop residual of an implicit cluster exceeds the
    tolerance (module docstring): one check for all of them. ``residuals``: ``(group, phi (nc,
    m))`` pairs; returns ``gss`` with the checked positions of those groups."""
    if not residuals or not value_checks.enabled():
        return gss
    dt = residuals[0][1].dtype
    if jnp.issubdtype(dt, jnp.complexfloating):
        return gss
    tol = loop_tolerance(dt)
    bad, names = [], []
    for g, ph in residuals:
        scale = np.asarray(g.static["phi_scale"], np.float64).reshape(g.nc, 1)
        bad.append(jnp.any(~(jnp.abs(ph) <= jnp.asarray(tol * scale, dt))))
        names += list(model.topo.cluster_names[g.cl0 : g.cl0 + g.nc])
    idx = [g.index for g, _ in residuals]
    checked = value_checks.error_if(
        tuple(gss[i].qs for i in idx),
        jnp.any(spatial.stack(bad)),
        f"{fn}: q violates the loop constraints of cluster(s) {names} (|phi| above "
        f"{tol:g} x the loop's scale): project q onto the constraints with "
        "jaxdyn.clusters.project_configuration",
    )
    gss = list(gss)
    for i, qs in zip(idx, checked):
        gss[i] = gss[i]._replace(qs=qs)
    return gss


def group_state(
    model: ClusterModel, g: Group, q: Array, v: Array | None = None, with_g: bool = True
) -> GroupState:
    """Spanning positions, velocities, ``G`` and ``g`` of one group (``q`` not checked)."""
    return _group_state(model, g, q, v, with_g)[0]


def _group_state(model, g, q, v, with_g):
    """:func:`group_state` and, for an implicit group, its loop residual ``phi (nc, m)``."""
    qc = group_qc(g, q)
    yd = None if v is None else group_y(g, v)
    if g.type == TREE:
        return GroupState(qc, yd, None, None), None
    prm = model.params[g.index]
    if g.type == LINEAR:
        G, Gnz = prm["G"], g.static["Gnz"]
        qs = linear_map(G, Gnz, qc) + prm["off"]
        qd = None if yd is None else linear_map(G, Gnz, yd)
        return GroupState(qs, qd, G, None), None
    # implicit
    dt = q.dtype
    phi = phi_function(g)
    datas = item_datas(model, g)
    Pi, Pd = jnp.asarray(g.static["Pi"], dt), jnp.asarray(g.static["Pd"], dt)
    sc = jnp.asarray(g.static["scale"], dt)

    Kf, ph = jax.vmap(jax.jacfwd(_with_value(phi), has_aux=True))(qc, datas)  # (nc, m, nvs)
    Kd = jnp.einsum("cmd,cdk->cmk", Kf, Pd)
    Ki = jnp.einsum("cmd,cdy->cmy", Kf, Pi) * sc[:, None, :]
    Kdinv = small_inv(Kd)
    G = Pi * sc[:, None, :] - jnp.einsum("cdk,ckm,cmy->cdy", Pd, Kdinv, Ki)
    if yd is None:
        return GroupState(qc, None, G, None), ph
    qd = jnp.einsum("cdy,cy->cd", G, yd)
    gg = None
    if with_g:
        Kdot_qd = jax.vmap(functools.partial(kdot_qdot, phi))(qc, qd, datas)
        gg = jnp.einsum("cdk,ckm,cm->cd", Pd, Kdinv, -Kdot_qd)
    return GroupState(qc, qd, G, gg), ph


def all_group_states(
    model: ClusterModel,
    q: Array,
    v: Array | None = None,
    with_g: bool = True,
    check: str | None = None,
) -> list[GroupState]:
    """:func:`group_state` of every group, in ``topo.groups`` order. ``check``: the name of the
    calling function, to check the loop residual of the implicit clusters
    (:func:`check_loops`; None: no check)."""
    gss, residuals = [], []
    for g in model.topo.groups:
        s, ph = _group_state(model, g, q, v, with_g)
        gss.append(s)
        if ph is not None:
            residuals.append((g, ph))
    return gss if check is None else check_loops(check, model, gss, residuals)


def assemble_spanning(model: ClusterModel, gss: Sequence[GroupState], field: str) -> Array:
    """Spanning vector (jaxdyn order) from per-group pieces of ``field`` ('qs' or 'qd')."""
    t = model.topo
    parts = [getattr(s, field).reshape(-1) for s in gss]
    flat = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
    return flat[t.span_q_src if field == "qs" else t.span_v_src]


def spanning_g(model: ClusterModel, gss: Sequence[GroupState], dtype: DTypeLike) -> Array:
    """Spanning ``g`` (zeros where no group has one)."""
    t = model.topo
    parts = []
    for g, s in zip(t.groups, gss):
        parts.append(jnp.zeros(g.nc * g.nvs, dtype) if s.g is None else s.g.reshape(-1))
    flat = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
    return flat[t.span_v_src]


def spanning_G(model: ClusterModel, gss: Sequence[GroupState], dtype: DTypeLike) -> Array:
    """Dense block-diagonal ``G (nv_tree, nv)``."""
    t = model.topo
    G = jnp.zeros((model.tree.nv, t.nv), dtype)
    for g, s in zip(t.groups, gss):
        cols = g.v0 + np.arange(g.nc * g.ny).reshape(g.nc, g.ny)
        Gb = (
            jnp.broadcast_to(jnp.eye(g.nvs, dtype=dtype), (g.nc, g.nvs, g.nvs))
            if s.G is None
            else s.G
        )
        G = G.at[g.dof[:, :, None], cols[:, None, :]].set(Gb)
    return G


def prepare(
    model: ClusterModel,
    fn: str,
    q: ArrayLike,
    v: ArrayLike | None = None,
    a: ArrayLike | None = None,
    alternative: str | None = None,
) -> tuple[ClusterModel, Array, Array | None, Array | None, DTypeLike]:
    """Check the model's type and the shapes of ``q``, ``v``, ``a``; cast the model and the
    inputs to their common floating dtype (integer inputs take the model's; float64 inputs with
    a model loaded under float32 are refused, as in :mod:`jaxdyn.shell`). Returns
    ``(model, q, v, a, dtype)``."""
    require_cluster_model(fn, model, alternative)
    q = shell.as_array(fn, "q", q, (("nq", model.nq),), model)
    if v is not None:
        v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    if a is not None:
        a = shell.as_array(fn, "a", a, (("nv", model.nv),), model)
    dt = shell.common_dtype(q, v, a, model=model.tree)
    shell.check_model_dtype(fn, model.tree, dt)
    q = q.astype(dt)
    v = None if v is None else v.astype(dt)
    a = None if a is None else a.astype(dt)
    return model.astype(dt), q, v, a, dt


@eager.eager_jit
def spanning_configuration(model: ClusterModel, q: ArrayLike) -> Array:
    """Spanning-tree configuration ``q_tree`` (``model.tree`` order) of a cluster position."""
    fn = "spanning_configuration"
    model, q, _, _, dt = prepare(model, fn, q)
    return assemble_spanning(model, all_group_states(model, q, check=fn), "qs")


@eager.eager_jit
def spanning_state(
    model: ClusterModel, q: ArrayLike, v: ArrayLike | None = None, a: ArrayLike | None = None
) -> SpanningState:
    """Map an independent state to the spanning tree: ``q_tree``, ``qdot = G v``,
    ``qdd = G a + g`` and the dense ``G``, ``g`` (paper eqs. (6)-(8)).

    Use it to check the cluster algorithms against spanning-tree tools (e.g.
    ``jaxdyn.rnea(model.tree, s.q, s.v, s.a)`` projected with ``s.G.T``)."""
    fn = "spanning_state"
    model, q, v, a, dt = prepare(model, fn, q, v, a)
    gss = all_group_states(model, q, jnp.zeros(model.nv, dt) if v is None else v, check=fn)
    qs = assemble_spanning(model, gss, "qs")
    qd = None if v is None else assemble_spanning(model, gss, "qd")
    G = spanning_G(model, gss, dt)
    gvec = spanning_g(model, gss, dt)
    qdd = None if a is None else G @ a + gvec
    return SpanningState(qs, qd, qdd, G, gvec)


def _linear_left_null(G, dep):
    """An orthonormal basis ``(nc, m, nvs)`` of the left null space of ``G (nc, nvs, ny)``
    (explicit clusters, ``G = Pi + Pd X``): the rows of ``N = Pd^T - X Pi^T`` (``N G = 0``),
    orthonormalised by a QR factorisation of ``N^T``."""
    dep = np.asarray(dep[0]) > 0
    Pd = np.eye(dep.size)[:, dep]
    Pi = np.eye(dep.size)[:, ~dep]
    X = jnp.einsum("dk,cdy->cky", Pd, G)  # (nc, m, ny)
    N = Pd.T[None] - jnp.einsum("cky,dy->ckd", X, Pi)  # (nc, m, nvs)
    Q, _ = jnp.linalg.qr(jnp.swapaxes(N, -1, -2))
    return jnp.swapaxes(Q, -1, -2)


@eager.eager_jit
@full_precision
def loop_constraints(
    model: ClusterModel, q: ArrayLike, v: ArrayLike | None = None
) -> tuple[Array, Array, Array]:
    """Implicit form of all loop constraints on the spanning tree: ``(phi, K, k)`` with
    ``phi (m,)`` (zero at valid states), ``K = dphi/dq (m, nv_tree)`` block-diagonal over
    clusters (explicit clusters contribute an orthonormal basis of the left null space of their
    ``G``: ``K G = 0``) and ``k = -Kdot qdot (m,)`` (``qdot = G v``; zero if ``v`` is None).
    ``q`` is not checked (it may violate the constraints: that is what ``phi`` measures).

    Not to be confused with :func:`jaxdyn.constraint_jacobian` (contact / weld constraints of a
    tree model)."""
    fn = "loop_constraints"
    model, q, v, _, dt = prepare(model, fn, q, v)
    t = model.topo
    nvt = model.tree.nv
    rows_phi, rows_K, rows_k = [], [], []
    gss = all_group_states(model, q, v, with_g=False)
    for g, s in zip(t.groups, gss):
        if g.type == TREE:
            continue
        if g.type == LINEAR:
            prm = model.params[g.index]
            Kc = _linear_left_null(prm["G"], g.static["dep"])
            # phi = K (q - off) for q = G y + off  -> zero by construction
            ph = jnp.einsum("cmd,cd->cm", Kc, s.qs - prm["off"])
            kk = jnp.zeros((g.nc, g.m), dt)
        else:
            ph, Kc = implicit_phi_K(model, g, s.qs)
            if v is None:
                kk = jnp.zeros((g.nc, g.m), dt)
            else:
                phi = phi_function(g)
                datas = item_datas(model, g)
                assert s.qd is not None  # the group states hold qd with v
                kk = -jax.vmap(functools.partial(kdot_qdot, phi))(s.qs, s.qd, datas)
        Kfull = jnp.zeros((g.nc, g.m, nvt), dt)
        Kfull = Kfull.at[
            np.arange(g.nc)[:, None, None], np.arange(g.m)[None, :, None], g.dof[:, None, :]
        ].set(Kc)
        rows_phi.append(ph.reshape(-1))
        rows_K.append(Kfull.reshape(-1, nvt))
        rows_k.append(kk.reshape(-1))
    if not rows_K:
        z = jnp.zeros((0,), dt)
        return z, jnp.zeros((0, nvt), dt), z
    return jnp.concatenate(rows_phi), jnp.concatenate(rows_K), jnp.concatenate(rows_k)


# ----------------------------------------------------------------------------- configurations


def _newton_dependent(model, g, qc, iters):
    """Solve ``phi(q) = 0`` for the dependent coordinates at fixed independent ones."""
    phi = phi_function(g)
    datas = item_datas(model, g)
    Pd = jnp.asarray(g.static["Pd"], qc.dtype)

    def step(_, x):
        ph = jax.vmap(phi)(x, datas)
        K = jax.vmap(jax.jacfwd(phi))(x, datas)
        Kd = jnp.einsum("cmd,cdk->cmk", K, Pd)
        dx = jnp.linalg.solve(Kd, ph[..., None])[..., 0]
        return x - jnp.einsum("cdk,ck->cd", Pd, dx)

    return jax.lax.fori_loop(0, iters, step, qc)


@eager.eager_jit
def project_configuration(model: ClusterModel, q: ArrayLike, iters: int = 30) -> Array:
    """Newton projection onto the constraint manifold: the dependent coordinates of every
    implicit cluster are solved for at fixed independent coordinates (``iters`` Newton steps,
    quadratic convergence from a nearby guess). Explicit clusters are unchanged."""
    model, q, _, _, dt = prepare(model, "project_configuration", q)
    parts = []
    for g in model.topo.groups:
        qc = group_qc(g, q)
        if g.type == IMPLICIT:
            qc = _newton_dependent(model, g, qc, iters)
        parts.append(qc.reshape(-1))
    return jnp.concatenate(parts)


def neutral_configuration(model: Model | ClusterModel, dtype: DTypeLike | None = None) -> Array:
    """The neutral configuration ``(nq,)`` of a model (``jaxdyn.neutral_configuration``).

    - :class:`~jaxdyn.Model`: zero angles, identity quaternions, origin
      (:func:`jaxdyn.algorithms.configuration.neutral_configuration`).
    - :class:`~jaxdyn.clusters.ClusterModel`: a valid configuration of the cluster coordinates:
      joint neutral for plain joints, ``y = 0`` for explicit clusters, the build-time solution
      of ``phi = 0`` nearest to ``q = 0`` (the leaf ``qref``) for implicit ones.
    """
    if not isinstance(model, ClusterModel):
        return tree_configuration.neutral_configuration(model, dtype=dtype)
    dtype = dtype or model.tree.Xtree_p.dtype
    parts = []
    for g in model.topo.groups:
        if g.type == TREE:
            parts.append(
                jnp.concatenate([joints.neutral(int(k), g.nc, dtype) for k in g.key[4]], -1)
            )
        elif g.type == LINEAR:
            parts.append(jnp.zeros((g.nc, g.ny), dtype))
        else:
            parts.append(jnp.asarray(model.params[g.index]["qref"], dtype))
    return jnp.concatenate([p.reshape(-1) for p in parts])


def random_configuration(
    model: Model | ClusterModel, key: ArrayLike, *args: Any, **kwargs: Any
) -> Array:
    """A random configuration ``(nq,)`` of a model, from the PRNG key ``key``
    (``jaxdyn.random_configuration``).

    - :class:`~jaxdyn.Model`: ``random_configuration(model, key, lower=-3.14159,
      upper=3.14159, dtype=None)``: one-DoF joints and free-joint positions uniform in
      ``[lower, upper]``, rotations uniform on SO(3)
      (:func:`jaxdyn.algorithms.configuration.random_configuration`).
    - :class:`~jaxdyn.clusters.ClusterModel`: ``random_configuration(model, key, scale=1.0,
      steps=8, iters=12, dtype=None)``: a configuration satisfying the loop constraints. Plain
      joints: uniform in ``[-scale, scale]`` (rotations uniform); explicit clusters:
      ``y ~ U(-scale, scale)``; implicit clusters: independent coordinates moved from the
      reference configuration by ``U(-scale, scale)`` (in the velocity scaling of the cluster)
      and the dependent ones solved by Newton continuation (``steps`` steps of ``iters``
      iterations), so that the mechanism stays on the branch of the reference configuration.
      Check ``loop_constraints(model, q)[0]`` if ``scale`` is large (singular
      configurations).
    """
    if not isinstance(model, ClusterModel):
        return tree_configuration.random_configuration(model, key, *args, **kwargs)
    return _random_cluster_configuration(model, key, *args, **kwargs)


def _random_cluster_configuration(
    model: ClusterModel, key, scale: float = 1.0, steps: int = 8, iters: int = 12, dtype=None
):
    dtype = dtype or model.tree.Xtree_p.dtype
    model = model.astype(dtype)
    parts = []
    keys = jax.random.split(key, len(model.topo.groups))
    for g, k in zip(model.topo.groups, keys):
        if g.type == TREE:
            ks = jax.random.split(k, g.nbc)
            per = [
                joints.random(int(kd), kk, g.nc, -scale, scale, dtype)
                for kd, kk in zip(g.key[4], ks)
            ]
            parts.append(jnp.concatenate(per, -1))
        elif g.type == LINEAR:
            parts.append(jax.random.uniform(k, (g.nc, g.ny), dtype, -scale, scale))
        else:
            qref = model.params[g.index]["qref"]
            Pi = jnp.asarray(g.static["Pi"], dtype)
            sc = jnp.asarray(g.static["scale"], dtype)
            dy = jax.random.uniform(k, (g.nc, g.ny), dtype, -scale, scale) * sc
            target = qref + jnp.einsum("cdy,cy->cd", Pi, dy)

            def body(i, x, qref=qref, target=target, g=g):
                lam = (i + 1.0) / steps
                x = (
                    x
                    - jnp.einsum("cdy,cey,ce->cd", Pi, Pi, x)
                    + jnp.einsum("cdy,cey,ce->cd", Pi, Pi, qref + lam * (target - qref))
                )
                return _newton_dependent(model, g, x, iters)

            parts.append(jax.lax.fori_loop(0, steps, body, qref))
    return jnp.concatenate([p.reshape(-1) for p in parts])

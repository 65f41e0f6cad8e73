"""Cluster state <-> spanning-tree state, constraint Jacobians, valid configurations.

Reference: Chignoli et al. (T-RO 2024), §II-B: implicit constraints ``phi(q) = 0``,
``K qdot = 0``, ``K qdd = k`` (``k = -Kdot qdot``), explicit ``q = gamma(y)``,
``qdot = G ydot``, ``qdd = G ydd + g`` (``g = Gdot ydot``), and the implicit -> explicit
conversion ``G = P [I; -K_d^-1 K_i]``, ``g = P [0; K_d^-1 k]`` (eq. (8)).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import _checks, joints
from .._precision import full_precision
from .model import IMPLICIT, LINEAR, TREE, ClusterModel


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


def _phi_single(group):
    templates = [t for t, _ in group.items]

    def phi(qc, datas):
        return jnp.concatenate([t.phi(qc, d) for t, d in zip(templates, datas)])

    return phi


def _item_datas(model, group):
    return tuple(t.data(model.tree, group.params, pre) for t, pre in group.items)


def implicit_phi_K(model, group, qc):
    """``phi (nc, m)`` and ``K = dphi/dq (nc, m, nvs)`` of an implicit group."""
    phi = _phi_single(group)
    datas = _item_datas(model, group)
    ph = jax.vmap(phi)(qc, datas)
    K = jax.vmap(jax.jacfwd(phi))(qc, datas)
    return ph, K


def _kdot_qdot(phi, q, qd, d):
    """``Kdot qdot = d^2/dh^2 phi(q + h qdot)`` at ``h = 0`` (a second directional derivative:
    two nested JVPs, cheaper than differentiating the Jacobian)."""
    f = lambda x: phi(x, d)
    return jax.jvp(lambda x: jax.jvp(f, (x,), (qd,))[1], (q,), (qd,))[1]


def _inv(A):
    """Inverse of small square matrices (closed form up to 2x2)."""
    k = A.shape[-1]
    if k == 1:
        return 1 / A
    if k == 2:
        a, b, c, d = A[..., 0, 0], A[..., 0, 1], A[..., 1, 0], A[..., 1, 1]
        det = a * d - b * c
        return (
            jnp.stack([jnp.stack([d, -b], -1), jnp.stack([-c, a], -1)], -2) / det[..., None, None]
        )
    return jnp.linalg.inv(A)


def _group_qc(t, g, q):
    return q[g.q0 : g.q0 + g.nc * g.nqc].reshape(g.nc, g.nqc)


def _group_y(g, v):
    return v[g.v0 : g.v0 + g.nc * g.ny].reshape(g.nc, g.ny)


def _lin(G, y, dt):
    """``G y`` per cluster for a constant ``G (nc, nvs, ny)``, unrolled over ``ny`` (an
    elementwise expression XLA fuses, instead of a batched dot)."""
    out = None
    for k in range(G.shape[2]):
        if not np.any(G[:, :, k]):
            continue
        term = jnp.asarray(G[:, :, k], dt) * y[:, k, None]
        out = term if out is None else out + term
    return jnp.zeros(G.shape[:2], dt) if out is None else out


def group_state(model, g, q, v=None, with_g=True):
    """Spanning positions, velocities, ``G`` and ``g`` of one group."""
    dt = q.dtype
    qc = _group_qc(model.topo, g, q)
    yd = None if v is None else _group_y(g, v)
    if g.kind == TREE:
        return GroupState(qc, yd, None, None)
    if g.kind == LINEAR:
        Gn = np.asarray(g.params["G"])
        G = jnp.asarray(Gn, dt)
        qs = _lin(Gn, qc, dt) + jnp.asarray(g.params["off"], dt)
        qd = None if yd is None else _lin(Gn, yd, dt)
        return GroupState(qs, qd, G, None)
    # implicit
    phi = _phi_single(g)
    datas = _item_datas(model, g)
    Pi, Pd = jnp.asarray(g.params["Pi"], dt), jnp.asarray(g.params["Pd"], dt)
    sc = jnp.asarray(g.params["scale"], dt)

    Kf = jax.vmap(jax.jacfwd(phi))(qc, datas)  # (nc, m, nvs)
    Kd = jnp.einsum("cmd,cdk->cmk", Kf, Pd)
    Ki = jnp.einsum("cmd,cdy->cmy", Kf, Pi) * sc[:, None, :]
    Kdinv = _inv(Kd)
    G = Pi * sc[:, None, :] - jnp.einsum("cdk,ckm,cmy->cdy", Pd, Kdinv, Ki)
    if yd is None:
        return GroupState(qc, None, G, None)
    qd = jnp.einsum("cdy,cy->cd", G, yd)
    gg = None
    if with_g:
        Kdot_qd = jax.vmap(functools.partial(_kdot_qdot, phi))(qc, qd, datas)
        gg = jnp.einsum("cdk,ckm,cm->cd", Pd, Kdinv, -Kdot_qd)
    return GroupState(qc, qd, G, gg)


def all_group_states(model, q, v=None, with_g=True):
    return [group_state(model, g, q, v, with_g) for g in model.topo.groups]


def assemble_spanning(model, gss, field):
    """Spanning vector (jaxdyn order) from per-group pieces of ``field`` ('qs' or 'qd')."""
    t = model.topo
    parts = [getattr(s, field).reshape(-1) for s in gss]
    flat = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
    return flat[t.span_q_src if field == "qs" else t.span_v_src]


def spanning_g(model, gss, dtype):
    """Spanning ``g`` (zeros where no group has one)."""
    t = model.topo
    parts = []
    for g, s in zip(t.groups, gss):
        parts.append(jnp.zeros(g.nc * g.nvs, dtype) if s.g is None else s.g.reshape(-1))
    flat = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
    return flat[t.span_v_src]


def spanning_G(model, gss, dtype):
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


def _prep(model, fn, q, v=None, a=None):
    q = _checks.as_array(fn, "q", q, (("nq", model.nq),), model)
    if v is not None:
        v = _checks.as_array(fn, "v", v, (("nv", model.nv),), model)
    if a is not None:
        a = _checks.as_array(fn, "a", a, (("nv", model.nv),), model)
    dt = _checks.common_dtype(q, v, a)
    cast = lambda x: None if x is None else x.astype(dt)
    return model.astype(dt), cast(q), cast(v), cast(a), dt


def spanning_configuration(model: ClusterModel, q):
    """Spanning-tree configuration ``q_tree`` (``model.tree`` order) of a cluster position."""
    model, q, _, _, dt = _prep(model, "spanning_configuration", q)
    return assemble_spanning(model, all_group_states(model, q), "qs")


def spanning_state(model: ClusterModel, q, v=None, a=None) -> SpanningState:
    """Map an independent state to the spanning tree: ``q_tree``, ``qdot = G v``,
    ``qdd = G a + g`` and the dense ``G``, ``g`` (paper eqs. (6)-(8)).

    Use it to check the cluster algorithms against spanning-tree tools (e.g.
    ``jaxdyn.rnea(model.tree, s.q, s.v, s.a)`` projected with ``s.G.T``)."""
    model, q, v, a, dt = _prep(model, "spanning_state", q, v, a)
    gss = all_group_states(model, q, jnp.zeros(model.nv, dt) if v is None else v)
    qs = assemble_spanning(model, gss, "qs")
    qd = None if v is None else assemble_spanning(model, gss, "qd")
    G = spanning_G(model, gss, dt)
    gvec = spanning_g(model, gss, dt)
    qdd = None if a is None else G @ a + gvec
    return SpanningState(qs, qd, qdd, G, gvec)


@full_precision
def constraint_jacobian(model: ClusterModel, q, v=None):
    """Implicit form of all constraints on the spanning tree: ``(phi, K, k)`` with
    ``phi (m,)`` (zero at valid states), ``K (m, nv_tree)`` block-diagonal over clusters
    (explicit clusters contribute a basis of the left null space of their ``G``: ``K G = 0``)
    and ``k = -Kdot qdot (m,)`` (``qdot = G v``; zero if ``v`` is None)."""
    model, q, v, _, dt = _prep(model, "constraint_jacobian", q, v)
    t = model.topo
    nvt = model.tree.nv
    rows_phi, rows_K, rows_k = [], [], []
    gss = all_group_states(model, q, v, with_g=False)
    for g, s in zip(t.groups, gss):
        if g.kind == TREE:
            continue
        if g.kind == LINEAR:
            Gn = np.asarray(g.params["G"])
            # orthonormal basis of the left null space of G, per cluster
            Kc = []
            for c in range(g.nc):
                u, sv, _ = np.linalg.svd(Gn[c])
                Kc.append(u[:, g.ny :].T)
            Kc = jnp.asarray(np.stack(Kc), dt)  # (nc, m, nvs)
            # phi = K (q - off) for q = G y + off  -> zero by construction
            ph = jnp.einsum("cmd,cd->cm", Kc, s.qs - jnp.asarray(g.params["off"], dt))
            kk = jnp.zeros((g.nc, g.m), dt)
        else:
            ph, Kc = implicit_phi_K(model, g, s.qs)
            if v is None:
                kk = jnp.zeros((g.nc, g.m), dt)
            else:
                phi = _phi_single(g)
                datas = _item_datas(model, g)
                kk = -jax.vmap(functools.partial(_kdot_qdot, phi))(s.qs, s.qd, datas)
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
    phi = _phi_single(g)
    datas = _item_datas(model, g)
    Pd = jnp.asarray(g.params["Pd"], qc.dtype)

    def step(_, x):
        ph = jax.vmap(phi)(x, datas)
        K = jax.vmap(jax.jacfwd(phi))(x, datas)
        Kd = jnp.einsum("cmd,cdk->cmk", K, Pd)
        dx = jnp.linalg.solve(Kd, ph[..., None])[..., 0]
        return x - jnp.einsum("cdk,ck->cd", Pd, dx)

    return jax.lax.fori_loop(0, iters, step, qc)


def project_configuration(model: ClusterModel, q, iters: int = 30):
    """Newton projection onto the constraint manifold: the dependent coordinates of every
    implicit cluster are solved for at fixed independent coordinates (``iters`` Newton steps,
    quadratic convergence from a nearby guess). Explicit clusters are unchanged."""
    model, q, _, _, dt = _prep(model, "project_configuration", q)
    parts = []
    for g in model.topo.groups:
        qc = _group_qc(model.topo, g, q)
        if g.kind == IMPLICIT:
            qc = _newton_dependent(model, g, qc, iters)
        parts.append(qc.reshape(-1))
    return jnp.concatenate(parts)


def neutral_configuration(model: ClusterModel, dtype=None):
    """A valid reference configuration: joint neutral for plain joints, ``y = 0`` for explicit
    clusters, the build-time solution of ``phi = 0`` nearest to ``q = 0`` for implicit ones."""
    dtype = dtype or model.tree.Xtree_p.dtype
    parts = []
    for g in model.topo.groups:
        if g.kind == TREE:
            parts.append(
                jnp.concatenate([joints.neutral(int(k), g.nc, dtype) for k in g.key[4]], -1)
            )
        elif g.kind == LINEAR:
            parts.append(jnp.zeros((g.nc, g.ny), dtype))
        else:
            parts.append(jnp.asarray(g.params["qref"], dtype))
    return jnp.concatenate([p.reshape(-1) for p in parts])


def random_configuration(
    model: ClusterModel, key, scale: float = 1.0, steps: int = 8, iters: int = 12, dtype=None
):
    """Random valid configuration.

    Plain joints: uniform in ``[-scale, scale]`` (rotations uniform); explicit clusters:
    ``y ~ U(-scale, scale)``; implicit clusters: independent coordinates moved from the reference
    configuration by ``U(-scale, scale)`` (in the velocity scaling of the cluster) and the
    dependent ones solved by Newton continuation (``steps`` steps of ``iters`` iterations), so
    that the mechanism stays on the branch of the reference configuration. Check
    ``constraint_jacobian(model, q)[0]`` if ``scale`` is large (singular configurations)."""
    dtype = dtype or model.tree.Xtree_p.dtype
    model = model.astype(dtype)
    parts = []
    keys = jax.random.split(key, len(model.topo.groups))
    for g, k in zip(model.topo.groups, keys):
        if g.kind == TREE:
            ks = jax.random.split(k, g.n)
            per = [
                joints.random(int(kd), kk, g.nc, -scale, scale, dtype)
                for kd, kk in zip(g.key[4], ks)
            ]
            parts.append(jnp.concatenate(per, -1))
        elif g.kind == LINEAR:
            parts.append(jax.random.uniform(k, (g.nc, g.ny), dtype, -scale, scale))
        else:
            qref = jnp.asarray(g.params["qref"], dtype)
            Pi = jnp.asarray(g.params["Pi"], dtype)
            sc = jnp.asarray(g.params["scale"], dtype)
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

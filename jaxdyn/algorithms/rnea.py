"""Recursive Newton-Euler algorithm (inverse dynamics), in world coordinates.

Reference: Featherstone 2008, Alg. 5.1 (RNEA, Table 5.1), written in ground coordinates
(Featherstone 2008 §5.3; the form IDSVA builds on, Singh, Russell & Wensing 2022, Alg. 1).
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import _checks, spatial
from .._precision import full_precision
from ..model import tree
from . import kinematics as kin


def external_forces_world(model, ws, f_ext):
    """Per-body spatial forces given in body coordinates, expressed at the world origin."""
    return spatial.act_force(ws.R, ws.p, f_ext)


def check_f_ext(fn, model, f_ext, dtype=None):
    """``f_ext`` (an array or nested sequence) as an ``(nb, 6)`` array, cast to ``dtype``."""
    if f_ext is None:
        return None
    f = _checks.as_array(fn, "f_ext", f_ext, (("nb", model.nb), ("6", 6)), model)
    return f if dtype is None else f.astype(dtype)


def rnea_world(model, ws, qd, qdd, f_ext=None, gravity=True):
    """World-frame RNEA on a precomputed :class:`~jaxdyn.algorithms.kinematics.WorldState`.

    Returns ``(tau, v, a, F)``: joint forces, body velocities, accelerations and the subtree
    (composite) forces ``F_i = sum_{j in subtree(i)} f_j``, all at the world origin.
    """
    t = model.topo
    dtype = ws.S.dtype
    vJ = kin.joint_velocities(model, ws, qd)
    aS = tree.dofs_to_bodies(t, ws.S * qdd[:, None])
    a0 = kin.gravity_acceleration(model, dtype) if gravity else jnp.zeros(6, dtype)
    zero = jnp.zeros(6, dtype)

    def step(lvl, _, prev, inp):
        # one outward pass for both: v_i = v_p + vJ_i and a_i = a_p + S_i qdd_i + v_i x vJ_i,
        # where v_i x vJ_i = v_p x vJ_i (vJ x vJ = 0)
        vJl, aSl = inp
        vp = tree.gather_parent(None if prev is None else prev[0], lvl, zero)
        ap = tree.gather_parent(None if prev is None else prev[1], lvl, a0)
        cur = (vp + vJl, ap + aSl + spatial.motion_cross(vp, vJl))
        cur = spatial.materialize(*cur)  # once, not in every consumer (spatial.materialize)
        return cur, cur

    v, a = tree.forward_pass(t, step, (("body", vJ), ("body", aS)))[1].flat()
    f = kin.inertia_apply(ws.mass, ws.c, ws.Ic, a) + spatial.force_cross(
        v, kin.inertia_apply(ws.mass, ws.c, ws.Ic, v)
    )
    if f_ext is not None:
        f = f - external_forces_world(model, ws, f_ext)
    F = tree.backward_accumulate(t, f)
    tau = jnp.sum(ws.S * tree.bodies_to_dofs(t, F), -1)
    if model.armature is not None:
        tau = tau + model.armature * qdd
    return tau, v, a, F


@_checks.public("rnea")
@full_precision
def rnea(model, q, v, a, f_ext=None):
    """Inverse dynamics ``tau = M(q) a + C(q, v) v + g(q) - sum J_i^T f_ext_i``.

    Reference: Featherstone 2008, Alg. 5.1 (RNEA), in world coordinates.

    **Arguments:**

    - ``q (nq,)``, ``v (nv,)``, ``a (nv,)``: configuration, velocity, acceleration.
    - ``f_ext (nb, 6)`` or ``None``: external spatial force ``[n; f]`` on each body, in body
      coordinates (acting at the body frame's origin).

    **Returns:** ``tau (nv,)`` (with ``model.armature * a`` added when armature is set).
    """
    fn = "rnea"
    v = _checks.as_array(fn, "v", v, (("nv", model.nv),), model)
    a = _checks.as_array(fn, "a", a, (("nv", model.nv),), model)
    f_ext = check_f_ext(fn, model, f_ext)
    model, q, dtype = kin._prepare(model, fn, q, v, a, f_ext)
    if model.nb == 0:
        return jnp.zeros(0, dtype)
    f_ext = None if f_ext is None else f_ext.astype(dtype)
    ws = kin.world_state(model, q, centered=True)
    return rnea_world(model, ws, v.astype(dtype), a.astype(dtype), f_ext)[0]


@_checks.public("bias_forces")
@full_precision
def bias_forces(model, q, v):
    """Coriolis, centrifugal and gravity forces ``C(q, v) v + g(q)`` (= ``rnea(q, v, 0)``)."""
    q = _checks.as_array("bias_forces", "q", q, (("nq", model.nq),), model)
    v = _checks.as_array("bias_forces", "v", v, (("nv", model.nv),), model)
    dtype = _checks.common_dtype(q, v, model=model)
    return rnea(model, q, v, jnp.zeros(model.nv, dtype))


@_checks.public("gravity_forces")
@full_precision
def gravity_forces(model, q):
    """Generalised gravity ``g(q)`` (= ``rnea(q, 0, 0)``)."""
    q = _checks.as_array("gravity_forces", "q", q, (("nq", model.nq),), model)
    dtype = _checks.common_dtype(q, model=model)
    z = jnp.zeros(model.nv, dtype)
    return rnea(model, q, z, z)

"""Joint kinds: configuration layout, joint transform ``XJ`` and configuration-space maps.

Every moving joint is one of three kinds, chosen so that a whole group of joints of one kind is
computed with one vectorised expression:

* ``ONE_DOF``: revolute, continuous and prismatic joints (``nq = nv = 1``). The joint's motion
  subspace is a unit screw ``s = [axis_ang; axis_lin]`` in the child frame (revolute:
  ``[a; 0]``, prismatic: ``[0; a]``), and ``XJ = (rodrigues(axis_ang, q), axis_lin q)``.
* ``SPHERICAL``: ``q = (qw, qx, qy, qz)``, ``v = ω`` in the child frame, ``S = [I3; 0]``.
* ``FREE``: ``q = (x, y, z, qw, qx, qy, qz)`` (child origin in the parent frame, then the unit
  quaternion), ``v = [ω; v]`` the child's spatial velocity in child coordinates, ``S = I6``.

Configuration updates use the right increment ``q ⊕ v`` (``M exp(v)`` on SE(3), ``Q exp(ω)`` on
SO(3)), as Pinocchio's ``integrate`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp

from . import spatial

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

ONE_DOF = 0
SPHERICAL = 1
FREE = 2

KIND_NAMES = {ONE_DOF: "1-dof", SPHERICAL: "spherical", FREE: "free"}
NQ = {ONE_DOF: 1, SPHERICAL: 4, FREE: 7}
NV = {ONE_DOF: 1, SPHERICAL: 3, FREE: 6}


def joint_transform(kind: int, q: Array, axis: Array | None) -> tuple[Array, Array]:
    """Joint placement ``XJ = (R, p)`` of the child frame in the joint (predecessor) frame.

    ``q`` is ``(n, nq_kind)``; ``axis`` is the ``(n, 6)`` screw of one-DoF joints (unused
    otherwise). Returns ``R (n, 3, 3)``, ``p (n, 3)``.
    """
    if kind == ONE_DOF:
        assert axis is not None, "a one-DoF joint's screw axis"
        angle = q[:, 0]
        R = spatial.rodrigues(axis[:, :3], angle)
        return R, axis[:, 3:] * angle[:, None]
    if kind == SPHERICAL:
        R = spatial.quat_to_rot(q)
        return R, jnp.zeros(q.shape[:-1] + (3,), q.dtype)
    if kind == FREE:
        return spatial.quat_to_rot(q[:, 3:]), q[:, :3]
    raise ValueError(f"unknown joint kind {kind}")


def neutral(kind: int, n: int, dtype: DTypeLike) -> Array:
    """Neutral configuration of ``n`` joints, ``(n, nq_kind)``."""
    if kind == ONE_DOF:
        return jnp.zeros((n, 1), dtype)
    if kind == SPHERICAL:
        return jnp.tile(jnp.array([1.0, 0.0, 0.0, 0.0], dtype), (n, 1))
    return jnp.tile(jnp.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0], dtype), (n, 1))


def normalize_quat(quat: Array) -> Array:
    """``quat / |quat|`` over the last axis (the unit quaternion :func:`integrate` returns)."""
    return quat / jnp.sqrt(jnp.sum(quat * quat, -1, keepdims=True))


def integrate(kind: int, q: Array, v: Array) -> Array:
    """``q ⊕ v`` for ``n`` joints: ``q (n, nq)``, ``v (n, nv)``."""
    if kind == ONE_DOF:
        return q + v
    if kind == SPHERICAL:
        return normalize_quat(spatial.quat_mul(q, spatial.exp3_quat(v)))
    w, vl = v[:, :3], v[:, 3:]
    quat = q[:, 3:]
    R0 = spatial.quat_to_rot(quat)
    dp = spatial.mv(spatial.left_jacobian_so3(w), vl)
    p = q[:, :3] + spatial.mv(R0, dp)
    return jnp.concatenate([p, normalize_quat(spatial.quat_mul(quat, spatial.exp3_quat(w)))], -1)


def difference(kind: int, q0: Array, q1: Array) -> Array:
    """``q1 ⊖ q0``: the ``v`` with ``integrate(q0, v) == q1``."""
    if kind == ONE_DOF:
        return q1 - q0
    if kind == SPHERICAL:
        return spatial.log3_quat(spatial.quat_mul(spatial.quat_conj(q0), q1))
    _, w, dp = free_relative(q0, q1)
    vl = spatial.mv(spatial.left_jacobian_so3_inv(w), dp)
    return jnp.concatenate([w, vl], -1)


def free_relative(q0: Array, q1: Array) -> tuple[Array, Array, Array]:
    """The placement of free-joint configuration ``q1 (n, 7)`` relative to ``q0``'s:
    ``(quat, w, p)``, its rotation as a quaternion ``quat0^* quat1`` and as ``w = log3`` of it,
    and its translation ``p = R0^T (x1 - x0)`` (:func:`difference`: ``q1 ⊖ q0 = [w;
    Jl(w)^-1 p]``)."""
    quat0, quat1 = q0[:, 3:], q1[:, 3:]
    rel = spatial.quat_mul(spatial.quat_conj(quat0), quat1)
    w = spatial.log3_quat(rel)
    R0 = spatial.quat_to_rot(quat0)
    dp = spatial.mv(jnp.swapaxes(R0, -1, -2), q1[:, :3] - q0[:, :3])
    return rel, w, dp


def random(
    kind: int, key: ArrayLike, n: int, lower: ArrayLike, upper: ArrayLike, dtype: DTypeLike
) -> Array:
    """Random configurations: uniform in ``[lower, upper]`` for one-DoF joints and free-joint
    positions, uniform on SO(3) for rotations."""
    import jax

    if kind == ONE_DOF:
        return jax.random.uniform(key, (n, 1), dtype, lower, upper)
    k1, k2 = jax.random.split(key)
    quat = normalize_quat(jax.random.normal(k1, (n, 4), dtype))
    if kind == SPHERICAL:
        return quat
    pos = jax.random.uniform(k2, (n, 3), dtype, lower, upper)
    return jnp.concatenate([pos, quat], -1)

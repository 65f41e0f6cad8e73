"""Frame Jacobians.

Reference: Featherstone 2008 §4.4 (the body Jacobian is the motion subspaces of the supporting
joints, transformed to a common frame); reference frames as Pinocchio's ``LOCAL``, ``WORLD`` and
``LOCAL_WORLD_ALIGNED``.
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import spatial
from .._precision import full_precision
from . import kinematics as kin

REFERENCES = ("local", "world", "local_world_aligned")


@full_precision
def joint_jacobians(model, q):
    """Motion subspace of every coordinate at the world origin, ``(6, nv)`` (Pinocchio's
    ``computeJointJacobians`` in ``WORLD``)."""
    model, q, _ = kin._prepare(model, "joint_jacobians", q)
    return kin.world_state(model, q).S.T


@full_precision
def jacobian(model, q, frame, reference: str = "local_world_aligned"):
    """Jacobian of a frame's spatial velocity ``[ω; v]`` with respect to ``v``, ``(6, nv)``.

    **Arguments:**

    - ``frame``: frame name (any URDF link or joint) or index into ``model.frame_names``.
    - ``reference``: ``"local"`` (frame axes, at the frame origin), ``"world"`` (world axes, at
      the world origin) or ``"local_world_aligned"`` (world axes, at the frame origin).
    """
    if reference not in REFERENCES:
        raise ValueError(f"jacobian: reference must be one of {REFERENCES}, got {reference!r}")
    f = model.frame_index(frame)
    model, q, _ = kin._prepare(model, "jacobian", q)
    ws = kin.world_state(model, q)
    t = model.topo
    b = int(t.frame_parent[f])
    mask = t.body_dof_support[b]
    Jw = jnp.where(mask[None, :], ws.S.T, 0)
    if reference == "world":
        return Jw
    if b < 0:
        R, p = model.frame_R[f], model.frame_p[f]
    else:
        R, p = ws.R[b] @ model.frame_R[f], ws.R[b] @ model.frame_p[f] + ws.p[b]
    w, vo = Jw[:3], Jw[3:]
    vp = vo + spatial.cross(w.T, jnp.broadcast_to(p, (w.shape[1], 3))).T
    J = jnp.concatenate([w, vp], 0)
    if reference == "local_world_aligned":
        return J
    return jnp.concatenate([R.T @ w, R.T @ vp], 0)

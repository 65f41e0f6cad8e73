"""Frame Jacobians.

Reference: Featherstone 2008 §4.4 (the body Jacobian is the motion subspaces of the supporting
joints, transformed to a common frame); reference frames as Pinocchio's ``LOCAL``, ``WORLD`` and
``LOCAL_WORLD_ALIGNED``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import _checks, spatial
from .._precision import full_precision
from . import kinematics as kin

REFERENCES = ("local", "world", "local_world_aligned")


def frame_argument(fn, model, frame, reference) -> int:
    """The index of ``frame`` (a name or an index into ``model.frame_names``), with
    ``reference`` checked against :data:`REFERENCES`; errors name ``fn``."""
    if not isinstance(reference, str) or reference not in REFERENCES:
        raise ValueError(f"{fn}: reference must be one of {REFERENCES}, got {reference!r}")
    if isinstance(frame, (bool, np.bool_)) or not isinstance(frame, (str, int, np.integer)):
        raise TypeError(
            f"{fn}: frame must be a frame name (str) or an index (int) into "
            f"model.frame_names, got {type(frame).__name__} {frame!r}"
        )
    return model.frame_index(frame)


@_checks.public("joint_jacobians")
@full_precision
def joint_jacobians(model, q):
    """Motion subspace of every coordinate at the world origin, ``(6, nv)`` (Pinocchio's
    ``computeJointJacobians`` in ``WORLD``)."""
    model, q, dtype = kin._prepare(model, "joint_jacobians", q)
    if model.nb == 0:
        return jnp.zeros((6, 0), dtype)
    return kin.world_state(model, q).S.T


@_checks.public("jacobian")
@full_precision
def jacobian(model, q, frame, reference: str = "local_world_aligned"):
    """Jacobian of a frame's spatial velocity ``[ω; v]`` with respect to ``v``, ``(6, nv)``.

    **Arguments:**

    - ``frame``: frame name (any URDF link or joint) or index into ``model.frame_names``.
    - ``reference``: ``"local"`` (frame axes, at the frame origin), ``"world"`` (world axes, at
      the world origin) or ``"local_world_aligned"`` (world axes, at the frame origin).
    """
    f = frame_argument("jacobian", model, frame, reference)
    model, q, dtype = kin._prepare(model, "jacobian", q)
    if model.nb == 0:
        return jnp.zeros((6, 0), dtype)
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

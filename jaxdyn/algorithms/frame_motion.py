"""Velocity and acceleration of a frame.

Reference: Featherstone 2008 §2.9-2.11 (spatial velocity and acceleration, their change of
coordinates) and §2.11 (classical acceleration ``d^2p/dt^2 = a + ω x v`` from the spatial
one); Pinocchio's ``getFrameVelocity``, ``getFrameAcceleration`` and
``getFrameClassicalAcceleration`` after ``forwardKinematics(q, v, a)``, in the same reference
frames as :func:`jaxdyn.jacobian`: ``"local"`` (frame axes, at the frame origin), ``"world"``
(world axes, at the world origin) and ``"local_world_aligned"`` (world axes, at the frame
origin).

The bodies' spatial velocities and accelerations are computed at the world origin in world
axes by one outward pass (``v_i = v_p + oS_i v_i``, ``a_i = a_p + oS_i a_i + v_i x oS_i v_i``,
Featherstone eq. 5.7 in ground coordinates, no gravity: the outward pass of
:func:`jaxdyn.algorithms.rnea.rnea_world`); a frame's follow by moving the point
to its origin (``[ω; v_O + ω x p]``) and rotating into its axes for ``"local"``.
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import _checks, spatial
from .._precision import full_precision
from . import kinematics as kin
from .jacobian import frame_argument
from .rnea import rnea_world


def _frame(model, ws, f):
    """Body of frame ``f`` (a moving one), the frame's world rotation and origin."""
    b = int(model.topo.frame_parent[f])
    return b, ws.R[b] @ model.frame_R[f], ws.R[b] @ model.frame_p[f] + ws.p[b]


def _express(m, R, p, reference):
    """A motion vector ``m = [ω; v_O]`` at the world origin in the ``reference`` frame of the
    frame at ``(R, p)``."""
    if reference == "world":
        return m
    w, vp = m[:3], m[3:] + spatial.cross(m[:3], p)
    if reference == "local":
        w, vp = R.T @ w, R.T @ vp
    return jnp.concatenate([w, vp])


def _prepare(fn, model, q, frame, reference, **vectors):
    """Checked inputs, the world state and the frame: ``(model, ws, b, R, p, vectors)``, or
    ``None`` and the dtype when the frame cannot move (no moving body, or fixed to the
    world)."""
    f = frame_argument(fn, model, frame, reference)
    vs = {k: _checks.as_array(fn, k, x, (("nv", model.nv),), model) for k, x in vectors.items()}
    model, q, dtype = kin._prepare(model, fn, q, *vs.values())
    if model.nb == 0 or int(model.topo.frame_parent[f]) < 0:
        return None, dtype
    ws = kin.world_state(model, q)
    b, R, p = _frame(model, ws, f)
    return (model, ws, b, R, p, [x.astype(dtype) for x in vs.values()]), dtype


@_checks.public("frame_velocity")
@full_precision
def frame_velocity(model, q, v, frame, reference: str = "local"):
    """Spatial velocity ``[ω; v]`` ``(6,)`` of a frame (Pinocchio's ``getFrameVelocity``):
    equal to ``jacobian(model, q, frame, reference) @ v``.

    **Arguments:** ``q (nq,)``, ``v (nv,)``, ``frame`` (name or index into
    ``model.frame_names``), ``reference``: ``"local"`` (default, as Pinocchio), ``"world"`` or
    ``"local_world_aligned"``.
    """
    prep, dtype = _prepare("frame_velocity", model, q, frame, reference, v=v)
    if prep is None:
        return jnp.zeros(6, dtype)
    model, ws, b, R, p, (v,) = prep
    vel, _ = kin.body_velocities(model, ws, v)
    return _express(vel[b], R, p, reference)


@_checks.public("frame_acceleration")
@full_precision
def frame_acceleration(model, q, v, a, frame, reference: str = "local", classical: bool = False):
    """Acceleration of a frame ``(6,)`` at joint velocities ``v`` and accelerations ``a``
    (no gravity): the spatial acceleration ``[dω/dt; a]`` (Pinocchio's
    ``getFrameAcceleration``), or with ``classical=True`` the classical one
    ``[dω/dt; a + ω x v]`` whose linear part is the second time derivative of the frame's
    origin in the reference axes (``getFrameClassicalAcceleration``). With ``a = 0`` it is the
    drift ``Jdot v`` of :func:`jaxdyn.jacobian` in the same reference: the spatial one for
    ``"local"`` and ``"world"``, the classical one for ``"local_world_aligned"``.

    **Arguments:** ``q (nq,)``, ``v (nv,)``, ``a (nv,)``, ``frame``, ``reference`` as
    :func:`frame_velocity`; ``classical``.
    """
    if not isinstance(classical, (bool, jnp.bool_)):
        raise TypeError(
            f"frame_acceleration: classical must be a bool, got {type(classical).__name__}"
        )
    prep, dtype = _prepare("frame_acceleration", model, q, frame, reference, v=v, a=a)
    if prep is None:
        return jnp.zeros(6, dtype)
    model, ws, b, R, p, (v, a) = prep
    # RNEA's outward pass (velocities and accelerations in one); its forces are not used
    _, vel, acc, _ = rnea_world(model, ws, v, a, gravity=False)
    out = _express(acc[b], R, p, reference)
    if classical:
        m = _express(vel[b], R, p, reference)
        out = out.at[3:].add(spatial.cross(m[:3], m[3:]))
    return out

"""Velocity and acceleration of a frame.

Reference: Featherstone 2008 §2.9-2.11 (spatial velocity and acceleration, their change of
coordinates) and §2.11 (classical acceleration ``d^2p/dt^2 = a + ω x v`` from the spatial
one); Pinocchio's ``getFrameVelocity``, ``getFrameAcceleration`` and
``getFrameClassicalAcceleration`` after ``forwardKinematics(q, v, a)``, in the same reference
frames as :func:`jaxdyn.jacobian`: ``"local"`` (frame axes, at the frame origin), ``"world"``
(world axes, at the world origin) and ``"local_world_aligned"`` (world axes, at the frame
origin).

Only the frame's supporting bodies are placed
(:func:`jaxdyn.algorithms.kinematics.chain_placements`). The body's spatial velocity and
acceleration at the world origin in world axes are sums over that chain: ``v = sum_i oS_i v_i``
and, unrolling the outward pass ``a_i = a_p + oS_i a_i + v_i x oS_i v_i`` (Featherstone eq.
5.7 in ground coordinates, no gravity; :func:`jaxdyn.algorithms.rnea.rnea_world`),
``a = sum_i (oS_i a_i + v_i x oS_i v_i)`` with the body velocities ``v_i`` a prefix sum. The
frame's follow by moving the point to its origin (``[ω; v_O + ω x p]``) and rotating into its
axes for ``"local"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from .. import batching, shell, spatial
from .._precision import full_precision
from ..model import tree
from . import kinematics as kin
from .jacobian import frame_argument, frame_chain

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model


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
    """Checked inputs and the frame's support chain: ``(model, S, idx, R, p, vectors)``
    (:func:`~jaxdyn.algorithms.jacobian.frame_chain`), or ``None`` and the dtype when the frame
    cannot move (no moving body, or fixed to the world)."""
    f = frame_argument(fn, model, frame, reference)
    vs = {k: shell.as_array(fn, k, x, (("nv", model.nv),), model) for k, x in vectors.items()}
    model, q, dtype = shell.prepare(model, fn, q, *vs.values())
    b = int(model.topo.frame_parent[f])
    if b < 0:
        return None, dtype
    S, idx, R, p = frame_chain(model, q, f)
    return (model, S, idx, R, p, [x.astype(dtype) for x in vs.values()]), dtype


def _body_sums(model, idx, x):
    """Rows ``x (d, ...)`` of the coordinates ``idx`` (a support chain's, ascending) summed per
    body, one row per body."""
    _, nvj = np.unique(model.topo.dof_body[idx], return_counts=True)
    if np.all(nvj == 1):
        return x
    parts, i = [], 0
    for n in nvj:
        parts.append(tree.sum_rows(x[i : i + n])[None])
        i += int(n)
    return jnp.concatenate(parts, 0)


@shell.public("frame_velocity", words=batching.kinematics_words)
@full_precision
def frame_velocity(
    model: Model,
    q: ArrayLike,
    v: ArrayLike,
    frame: str | int,
    reference: str = "local",
) -> Array:
    """Spatial velocity ``[ω; v]`` ``(6,)`` of a frame (Pinocchio's ``getFrameVelocity``):
    equal to ``jacobian(model, q, frame, reference) @ v``.

    **Arguments:** ``q (nq,)``, ``v (nv,)``, ``frame`` (name or index into
    ``model.frame_names``), ``reference``: ``"local"`` (default, as Pinocchio), ``"world"`` or
    ``"local_world_aligned"``.
    """
    prep, dtype = _prepare("frame_velocity", model, q, frame, reference, v=v)
    if prep is None:
        return jnp.zeros(6, dtype)
    model, S, idx, R, p, (v,) = prep
    # the body's velocity at the world origin: the sum of its supporting joints' velocities
    return _express(tree.sum_rows(S * kin.take_rows(v, idx)[:, None]), R, p, reference)


@shell.public("frame_acceleration", words=batching.kinematics_words)
@full_precision
def frame_acceleration(
    model: Model,
    q: ArrayLike,
    v: ArrayLike,
    a: ArrayLike,
    frame: str | int,
    reference: str = "local",
    classical: bool = False,
) -> Array:
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
    model, S, idx, R, p, (v, a) = prep
    # RNEA's outward pass down the chain (v_i = v_p + vJ_i, a_i = a_p + S_i a_i + v_i x vJ_i,
    # where v_i x vJ_i = v_p x vJ_i) summed in closed form, a = sum_i (S_i a_i + v_i x vJ_i)
    # over the chain's bodies i, with the velocities v_i a prefix sum: one vectorised
    # expression instead of a step per body
    vJ = _body_sums(model, idx, S * kin.take_rows(v, idx)[:, None])
    aS = _body_sums(model, idx, S * kin.take_rows(a, idx)[:, None])
    v_i = jnp.cumsum(vJ, 0)
    acc = tree.sum_rows(aS + spatial.motion_cross(v_i, vJ))
    vel = v_i[-1]
    out = _express(acc, R, p, reference)
    if classical:
        m = _express(vel, R, p, reference)
        out = out.at[3:].add(spatial.cross(m[:3], m[3:]))
    return out

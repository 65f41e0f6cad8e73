"""Actuators used by the tasks, in the interface of :mod:`jaxdyn.sim.actuators` (``size``,
``velocity_gain``, ``torques``): usable as ``SimConfig(actuator=...)`` like
:class:`jaxdyn.sim.PD` and :class:`jaxdyn.sim.Torque`.

* :class:`ServoPD` -- joint position servos with an effort limit: ``tau = clip(kp (ctrl - q) -
  kd v, -effort, effort)``, optionally over gravity compensation (``gravity=True``).
* :class:`CompensatedTorque` -- torque control on top of gravity compensation and viscous
  damping, as a torque-controlled arm's interface: ``tau = gear ctrl - damping v + g(q)``.

Gains, limits and gears are float leaves (batchable for domain randomisation). The implicit
integrator treats their velocity terms implicitly (it differentiates ``torques`` in ``v``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import equinox as eqx
import jax.numpy as jnp

from ..algorithms.rnea import gravity_forces
from ..sim.actuators import actuated_dofs, dof_positions

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import DTypeLike

    from ..model.model import Model

__all__ = ["CompensatedTorque", "ServoPD"]


class ServoPD(eqx.Module):
    """Position servos on one-DoF joints: ``tau = clip(kp (ctrl - q) - kd v, -effort,
    effort)``; ``kp``, ``kd``, ``effort`` scalars or one per actuated coordinate; ``dofs``
    (static): joint names or velocity indices, default every coordinate but a floating base's.
    ``gravity`` (static): servos over gravity compensation, as a position-controlled arm:
    ``tau = clip(kp (ctrl - q) - kd v + g(q), -effort, effort)``, ``g`` the generalised gravity
    (:func:`jaxdyn.gravity_forces`)."""

    kp: float | Array = 5.0
    kd: float | Array = 0.1
    effort: float | Array = jnp.inf
    dofs: tuple | None = eqx.field(static=True, default=None)
    gravity: bool = eqx.field(static=True, default=False)

    def size(self, model: Model) -> int:
        return len(actuated_dofs(model, self.dofs))

    def velocity_gain(self, model: Model, dtype: DTypeLike) -> Array:
        idx = actuated_dofs(model, self.dofs)
        kd = jnp.broadcast_to(jnp.asarray(self.kd, dtype), (len(idx),))
        return jnp.zeros(model.nv, dtype).at[idx].set(kd)

    def torques(self, model: Model, q: Array, v: Array, ctrl: Array) -> Array:
        idx = actuated_dofs(model, self.dofs)
        qi = q[dof_positions(model, idx)]
        dtype = v.dtype
        tau = jnp.asarray(self.kp, dtype) * (ctrl - qi) - jnp.asarray(self.kd, dtype) * v[idx]
        if self.gravity:
            tau = tau + gravity_forces(model, q)[idx]
        effort = jnp.asarray(self.effort, dtype)
        tau = jnp.clip(tau, -effort, effort)
        return jnp.zeros(model.nv, dtype).at[idx].set(tau)


class CompensatedTorque(eqx.Module):
    """Torque actuators over gravity compensation: ``tau[dofs] = gear ctrl - damping v +
    g(q)[dofs]`` with ``g`` the generalised gravity (:func:`jaxdyn.gravity_forces`); ``gear``,
    ``damping`` scalars or one per actuated coordinate."""

    gear: float | Array = 1.0
    damping: float | Array = 0.0
    dofs: tuple | None = eqx.field(static=True, default=None)

    def size(self, model: Model) -> int:
        return len(actuated_dofs(model, self.dofs))

    def velocity_gain(self, model: Model, dtype: DTypeLike) -> Array:
        idx = actuated_dofs(model, self.dofs)
        d = jnp.broadcast_to(jnp.asarray(self.damping, dtype), (len(idx),))
        return jnp.zeros(model.nv, dtype).at[idx].set(d)

    def torques(self, model: Model, q: Array, v: Array, ctrl: Array) -> Array:
        idx = actuated_dofs(model, self.dofs)
        dtype = v.dtype
        g = gravity_forces(model, q)[idx]
        tau = jnp.asarray(self.gear, dtype) * ctrl - jnp.asarray(self.damping, dtype) * v[idx] + g
        return jnp.zeros(model.nv, dtype).at[idx].set(tau)

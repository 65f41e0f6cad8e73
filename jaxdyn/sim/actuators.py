"""Actuators (control -> joint torques) and passive joint forces.

Actuators act on a static list of velocity coordinates (``dofs``; by default every coordinate
except a floating base's six). :class:`Torque` applies ``tau = gear * ctrl``; :class:`PD`
servos one-DoF joints to position targets, ``tau = kp (ctrl - q) - kd v``. Either is clipped to
the model's effort limits where they are finite.

Passive forces (:func:`passive_forces`): viscous joint damping ``-damping v``, smooth Coulomb
joint friction ``-friction v / sqrt(v^2 + vs^2)``, and joint limits as a one-sided smooth spring
damper ``k_l pen - c_l v`` outside ``[lower, upper]`` (:class:`JointLimits`).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import joints
from . import _params, _scatter

__all__ = ["JointLimits", "PD", "Torque", "actuated_dofs", "joint_properties", "passive_forces"]


def actuated_dofs(model, dofs=None) -> np.ndarray:
    """Static indices of the actuated velocity coordinates: ``dofs`` (joint names or coordinate
    indices), or every coordinate except a floating base's six."""
    t = model.topo
    if dofs is None:
        skip = np.zeros(t.nv, bool)
        for b in range(t.nb):
            if int(t.kind[b]) == joints.FREE:
                skip[t.v_start[b] : t.v_start[b] + 6] = True
        return np.nonzero(~skip)[0]
    out = []
    for d in dofs:
        if isinstance(d, str):
            sl = model.v_slice(d)
            out.extend(range(sl.start, sl.stop))
        elif isinstance(d, (int, np.integer)) and not isinstance(d, bool):
            if not 0 <= int(d) < t.nv:
                raise ValueError(f"actuator dofs: index {d} out of range [0, {t.nv})")
            out.append(int(d))
        else:
            raise TypeError(f"actuator dofs: expected joint names or indices, got {d!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"actuator dofs: a coordinate is listed twice in {list(dofs)}")
    return np.asarray(out, np.int64)


def dof_positions(model, dofs) -> np.ndarray:
    """``q`` index of each velocity coordinate in ``dofs``; raises for coordinates of
    spherical or free joints (they have no scalar position)."""
    t = model.topo
    out = []
    for d in dofs:
        b = int(t.dof_body[d])
        if int(t.kind[b]) != joints.ONE_DOF:
            raise ValueError(
                f"PD actuator: coordinate {d} belongs to the {joints.KIND_NAMES[int(t.kind[b])]} "
                f"joint {t.joint_names[b]!r}, which has no scalar position target"
            )
        out.append(int(t.q_start[b]))
    return np.asarray(out, np.int64)


class Torque(eqx.Module):
    """Torque (force) actuators: ``tau[dofs] = gear * ctrl``."""

    gear: float = 1.0
    dofs: tuple | None = eqx.field(static=True, default=None)

    _RULES = (("gear", None, False),)

    def __check_init__(self):
        _params.check_module(self)

    def size(self, model) -> int:
        return len(actuated_dofs(model, self.dofs))

    def velocity_gain(self, model, dtype):
        return jnp.zeros(model.nv, dtype)

    def torques(self, model, q, v, ctrl):
        idx = actuated_dofs(model, self.dofs)
        return _scatter.add_at(jnp.zeros(model.nv, v.dtype), idx, self.gear * ctrl)


class PD(eqx.Module):
    """Joint position servos on one-DoF joints: ``tau = kp (ctrl - q) - kd v``; ``kp``, ``kd``
    scalars or one per actuated coordinate."""

    kp: float = 50.0
    kd: float = 1.0
    dofs: tuple | None = eqx.field(static=True, default=None)

    _RULES = (("kp", 0.0, False), ("kd", 0.0, False))

    def __check_init__(self):
        _params.check_module(self)

    def size(self, model) -> int:
        return len(actuated_dofs(model, self.dofs))

    def velocity_gain(self, model, dtype):
        idx = actuated_dofs(model, self.dofs)
        kd = jnp.broadcast_to(jnp.asarray(self.kd, dtype), (len(idx),))
        return _scatter.add_at(jnp.zeros(model.nv, dtype), idx, kd)

    def torques(self, model, q, v, ctrl):
        idx = actuated_dofs(model, self.dofs)
        qi = q[dof_positions(model, idx)]
        tau = self.kp * (ctrl - qi) - self.kd * v[idx]
        return _scatter.add_at(jnp.zeros(model.nv, v.dtype), idx, tau)


class JointLimits(eqx.Module):
    """Joint position limits as a one-sided smooth spring-damper (N m/rad, N m s/rad; N/m,
    N s/m for prismatic joints), active outside the model's ``[lower, upper]``."""

    stiffness: float = 1e3
    damping: float = 10.0
    smoothing: float = 1e-3

    _RULES = (("stiffness", 0.0, False), ("damping", 0.0, False), ("smoothing", 0.0, True))

    def __check_init__(self):
        _params.check_module(self)


def joint_properties(model):
    """Joint properties of the model (read from URDF ``<limit>`` / ``<dynamics>``, see
    :class:`jaxdyn.Model`), with their defaults where the model has none: ``armature``,
    ``damping``, ``friction``, ``effort``, ``velocity`` ``(nv,)`` and ``lower``, ``upper``
    ``(nq,)``."""
    nq, nv = model.nq, model.nv
    dtype = model.mass.dtype

    def get(name, default, n):
        value = getattr(model, name, None)
        if value is None:
            return jnp.full(n, default, dtype)
        return jnp.broadcast_to(jnp.asarray(value, dtype), (n,))

    return dict(
        armature=get("armature", 0.0, nv),
        damping=get("damping", 0.0, nv),
        friction=get("friction", 0.0, nv),
        effort=get("effort_limit", jnp.inf, nv),
        velocity=get("velocity_limit", jnp.inf, nv),
        lower=get("q_lower", -jnp.inf, nq),
        upper=get("q_upper", jnp.inf, nq),
    )


def clip_effort(tau, effort):
    """Clip to ``[-effort, effort]`` where ``effort > 0`` (many URDFs write ``effort="0"`` for
    "not given"; those coordinates are not clipped)."""
    lim = jnp.where(effort > 0, effort, jnp.inf)
    return jnp.clip(tau, -lim, lim)


def passive_forces(model, props, limits: JointLimits | None, q, v, slip=1e-2):
    """Damping, friction and joint-limit forces ``(nv,)``."""
    dtype = v.dtype
    tau = -props["damping"].astype(dtype) * v
    fr = props["friction"].astype(dtype)
    tau = tau - fr * v / jnp.sqrt(v * v + slip * slip)
    if limits is None:
        return tau
    t = model.topo
    one = np.asarray([int(t.kind[int(t.dof_body[d])]) == joints.ONE_DOF for d in range(t.nv)])
    if not one.any():
        return tau
    idx = np.nonzero(one)[0]
    qidx = np.asarray([int(t.q_start[int(t.dof_body[d])]) for d in idx], np.int64)
    qd = q[qidx]
    lo, hi = props["lower"].astype(dtype)[qidx], props["upper"].astype(dtype)[qidx]
    eps = jnp.asarray(limits.smoothing, dtype)
    below = jnp.where(jnp.isfinite(lo), eps * jax.nn.softplus((lo - qd) / eps), 0.0)
    above = jnp.where(jnp.isfinite(hi), eps * jax.nn.softplus((qd - hi) / eps), 0.0)
    gate = (below + above) / (below + above + eps)
    f = limits.stiffness * (below - above) - limits.damping * gate * v[idx]
    return _scatter.add_at(tau, idx, f)

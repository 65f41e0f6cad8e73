"""Quadruped: the bundled ``quad12`` (or Solo-12, same joint and foot names) standing up and
walking forward on the ground under joint position servos."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import jax
import jax.numpy as jnp
import numpy as np

from .. import robots, spatial
from .. import sim as _sim
from ..algorithms.kinematics import forward_kinematics
from .actuators import ServoPD
from .base import LeggedEnv, quat_to_matrix

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..model.model import Model

__all__ = ["Quadruped", "quat_to_matrix"]

LEGS = ("FL", "FR", "HL", "HR")
FEET = tuple(f"{leg}_FOOT" for leg in LEGS)


def _yaw_quat(yaw):
    return spatial.stack(
        [jnp.cos(yaw / 2), jnp.zeros_like(yaw), jnp.zeros_like(yaw), jnp.sin(yaw / 2)]
    )


#: the joint kinds of a quad12-like leg (the suffix of each joint's name)
JOINT_KINDS = ("HAA", "HFE", "KFE")


def per_joint_kind(model: Model, values: Sequence[float]) -> np.ndarray:
    """``values[k]`` (one per :data:`JOINT_KINDS`) for each joint of ``q[7:]``, in that order
    (float32): the kind from the suffix of the joint's name."""
    out = np.zeros(model.nq - 7, np.float32)
    for name in model.joint_names[1:]:
        out[model.q_slice(name).start - 7] = values[JOINT_KINDS.index(name.split("_")[-1])]
    return out


class Quadruped(LeggedEnv):
    """A 12-DoF quadruped on flat ground: walk forward (``forward_weight > 0``) or stand
    (``forward_weight = 0``).

    **Dynamics:** floating base, four foot spheres (radius ``foot_radius``) against the ground
    plane with compliant contact (default; ``contact="constraint"`` for the
    complementarity model), joint position servos
    (:class:`~jaxdyn.envs.actuators.ServoPD`, effort-limited) tracking
    ``default_pose + action_scale * action`` (``action`` clipped to ``[-1, 1]``, one per joint in
    the model's joint order), implicit integrator, control period ``dt`` in ``n_frames``
    simulator steps.

    **Observation** (46): base height (1), gravity direction in base axes (3), base angular and
    linear velocity in base axes (3 + 3), joint angles minus the default pose (12), joint
    velocities / 10 (12), previous action (12).

    **Reward** per step: ``forward_weight * clip(v_fwd, -max_speed, max_speed)`` (``v_fwd``:
    base velocity along its horizontal heading, m/s) ``+ upright_weight * u_z`` (``u_z``: the
    z component of the base's z axis) ``+ alive_bonus - ctrl_cost * |action|^2``.
    **Metrics:** ``forward_velocity``, ``upright``, ``height``, ``diverged``.

    **Reset:** default pose plus ``U(-init_noise, init_noise)`` on each joint, base at standing
    height plus ``U(0, 0.02)`` m, yaw ``U(-0.2, 0.2)`` rad, base velocity
    ``U(-0.1, 0.1)`` per component.

    **Termination** (``done = 1``): base below ``min_height`` (m), ``u_z < min_upright``
    (tilted by more than 60 degrees by default), or a diverged simulation.
    """

    def __init__(
        self,
        robot: str = "quad12",
        *,
        contact: str = "compliant",
        dt: float = 0.02,
        n_frames: int = 4,
        kp: float = 6.0,
        kd: float = 0.15,
        effort: float = 2.7,
        action_scale: float = 0.4,
        default_pose: tuple = (0.0, 0.7, -1.4),
        foot_radius: float = 0.02,
        friction: float = 0.8,
        stiffness: float = 1000.0,
        contact_damping: float = 10.0,
        forward_weight: float = 2.0,
        max_speed: float = 1.0,
        upright_weight: float = 0.5,
        alive_bonus: float = 0.5,
        ctrl_cost: float = 0.02,
        min_height: float = 0.12,
        min_upright: float = 0.5,
        init_noise: float = 0.1,
        model: Model | None = None,
    ) -> None:
        # a quadruped without kinematic loops: robots.load gives a Model
        model = cast("Model", robots.load(robot)) if model is None else model
        if not model.topo.floating_base or model.nv != 18:
            raise ValueError(f"Quadruped: needs a floating-base 12-DoF quadruped, got {model}")
        for f in FEET:
            model.frame_index(f)  # raises for an unknown frame
        cs = _sim.contact_set(model, [_sim.Sphere(f, foot_radius) for f in FEET])
        if contact == "compliant":
            cm = _sim.Compliant(
                stiffness=stiffness, damping=contact_damping, friction=friction, slip=0.05
            )
        elif contact == "constraint":
            cm = _sim.Constraint(friction=friction)
        else:
            raise ValueError(
                f"Quadruped: contact must be 'compliant' or 'constraint', got {contact!r}"
            )
        cfg = _sim.SimConfig(
            dt=dt / n_frames,
            integrator="implicit",
            actuator=ServoPD(kp=kp, kd=kd, effort=effort),
            contact=cm,
            contacts=cs,
        )
        super().__init__(model, cfg, n_frames)
        self.n_joints = 12
        self.default_pose = per_joint_kind(model, default_pose)
        q = self._stand_configuration(0.0)
        frames = np.asarray(jax.jit(forward_kinematics)(model, q).frame.p)  # jit: op by op is slow
        feet = frames[[model.frame_index(f) for f in FEET]]
        self.stand_height = float(-feet[:, 2].min() + foot_radius)
        self.action_scale = float(action_scale)
        self.forward_weight = float(forward_weight)
        self.max_speed = float(max_speed)
        self.upright_weight = float(upright_weight)
        self.alive_bonus = float(alive_bonus)
        self.ctrl_cost = float(ctrl_cost)
        self.min_height = float(min_height)
        self.min_upright = float(min_upright)
        self.init_noise = float(init_noise)

    def _stand_configuration(
        self, height: ArrayLike, yaw: ArrayLike = 0.0, joints: ArrayLike | None = None
    ) -> Array:
        joints = self.default_pose if joints is None else joints
        base = jnp.concatenate([jnp.asarray([0.0, 0.0, height]), _yaw_quat(jnp.asarray(yaw))])
        return jnp.concatenate([base, jnp.asarray(joints)])

    def _kinematics(self, ps):
        R = quat_to_matrix(ps.q[3:7])
        vel = R @ ps.v[3:6]  # world-axes linear velocity of the base origin
        heading = R[:2, 0] / jnp.sqrt(jnp.sum(R[:2, 0] ** 2) + 1e-12)
        return R, heading @ vel[:2], R[2, 2]

    def initial_pipeline(self, rng: Array) -> _sim.State:
        k_j, k_h, k_y, k_v = jax.random.split(rng, 4)
        n = self.init_noise
        joints = self.default_pose + jax.random.uniform(k_j, (12,), minval=-n, maxval=n)
        height = self.stand_height + jax.random.uniform(k_h, (), maxval=0.02)
        yaw = jax.random.uniform(k_y, (), minval=-0.2, maxval=0.2)
        q = self._stand_configuration(height, yaw, joints)
        v = jnp.zeros(18).at[:6].set(jax.random.uniform(k_v, (6,), minval=-0.1, maxval=0.1))
        return self.pipeline_init(q, v)

    def initial_metrics(self, ps: _sim.State, dtype: DTypeLike) -> dict:
        _, fwd, up = self._kinematics(ps)
        return {"forward_velocity": fwd, "upright": up, "height": ps.q[2]}

    def reward(self, ps: _sim.State, action: Array) -> tuple:
        _, fwd, up = self._kinematics(ps)
        speed = jnp.clip(fwd, -self.max_speed, self.max_speed)
        reward = (
            self.forward_weight * speed
            + self.upright_weight * up
            + self.alive_bonus
            - self.ctrl_cost * jnp.sum(action * action)
        )
        fell = (ps.q[2] < self.min_height) | (up < self.min_upright)
        return reward, fell, {"forward_velocity": fwd, "upright": up, "height": ps.q[2]}

"""Humanoid standing: Unitree G1 (29 actuated joints, example-robot-data ``g1``) keeps its
balance on flat ground under joint position servos."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from .. import robots, spatial
from .. import sim as _sim
from ..algorithms.kinematics import forward_kinematics
from ..algorithms.minv import minv
from .actuators import ServoPD
from .base import LeggedEnv, quat_to_matrix

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import DTypeLike

    from ..model.model import Model

__all__ = ["HumanoidStand", "HUMANOIDS"]

#: per robot: feet (frame, contact points in its coordinates, radius), default pose and servo
#: stiffness by joint-name pattern (first match wins), pelvis frame
HUMANOIDS: dict[str, dict[str, Any]] = {
    "g1": dict(
        feet={
            side: [
                (f"{side}_ankle_roll_link", (x, y, -0.03))
                for x, y in ((-0.05, 0.025), (-0.05, -0.025), (0.12, 0.03), (0.12, -0.03))
            ]
            for side in ("left", "right")
        },
        radius=0.005,
        pose=((r"hip_pitch", -0.1), (r"knee", 0.3), (r"ankle_pitch", -0.2)),
        kp=((r"hip|waist", 200.0), (r"knee", 300.0), (r"ankle", 400.0), (r".", 30.0)),
        effort=((r"knee", 139.0), (r"hip|waist", 88.0), (r"ankle", 50.0), (r".", 25.0)),
        armature=((r"knee", 0.025), (r"hip|waist", 0.01), (r"ankle", 0.007), (r".", 0.004)),
        base="pelvis",
    ),
}


def _by_pattern(names, table, default=0.0):
    out = np.full(len(names), default, np.float32)
    for i, n in enumerate(names):
        for pat, val in table:
            if re.search(pat, n):
                out[i] = val
                break
    return out


class HumanoidStand(LeggedEnv):
    """Keep a humanoid (Unitree G1) standing.

    **Dynamics:** floating base, four contact spheres under each sole (the robot's URDF
    collision spheres) against the ground plane, compliant contact; joint position servos
    (:class:`~jaxdyn.envs.actuators.ServoPD`) on all 29 joints tracking
    ``default_pose + action_scale * action`` (``action`` clipped to ``[-1, 1]``, model joint
    order), stiffness by joint group (hips and waist 100, knees 150, ankles 40, arms 30 N m/rad),
    each capped so that ``sqrt(kp / m_eff) * cfg.dt <= 1`` (``m_eff``: the joint's effective
    inertia at the default pose) and damping ``kd = 2 * 0.5 * sqrt(kp * m_eff)`` (half critical),
    effort-limited; implicit integrator, control period ``dt`` in ``n_frames`` simulator steps.

    **Observation** (99): base height (1), base horizontal position (2, it starts at 0),
    gravity direction in base axes (3), base angular and linear velocity in base axes (3 + 3),
    joint angles minus the default pose (29), joint velocities / 10 (29), previous action (29).

    **Reward** per step: ``alive_bonus + upright_weight * u_z - height_weight * |z - z0|
    - velocity_weight * |v_base|^2 - ctrl_cost * |action|^2`` (``u_z``: z component of the
    pelvis z axis; ``z0``: standing height of the pelvis).
    **Metrics:** ``height``, ``upright``, ``diverged``.

    **Reset:** default pose plus ``U(-init_noise, init_noise)`` per joint, pelvis at standing
    height, at rest.

    **Termination** (``done = 1``): pelvis below ``min_height_ratio * z0``, ``u_z <
    min_upright``, or a diverged simulation.
    """

    observe_position = True

    def __init__(
        self,
        robot: str = "g1",
        *,
        dt: float = 0.02,
        n_frames: int = 8,
        action_scale: float = 0.3,
        stiffness: float | None = None,
        friction: float = 0.8,
        alive_bonus: float = 1.0,
        upright_weight: float = 1.0,
        height_weight: float = 2.0,
        velocity_weight: float = 0.05,
        ctrl_cost: float = 0.01,
        min_height_ratio: float = 0.7,
        min_upright: float = 0.7,
        init_noise: float = 0.05,
        model: Model | None = None,
    ) -> None:
        spec = HUMANOIDS.get(robot)
        if spec is None:
            raise ValueError(
                f"HumanoidStand: robot must be one of {sorted(HUMANOIDS)}, got {robot!r}"
            )
        # the HUMANOIDS have no kinematic loops: robots.load gives a Model
        model = cast("Model", robots.load(robot)) if model is None else model
        if not model.topo.floating_base:
            raise ValueError(f"HumanoidStand: needs a floating-base model, got {model}")
        n = model.nv - 6
        names = model.joint_names[1:]  # q[7:] order
        if model.armature is None:  # reflected rotor inertia of the joint actuators
            model = model.with_armature(
                np.concatenate([np.zeros(6), _by_pattern(names, spec["armature"])])
            )
        pose = _by_pattern(names, spec["pose"])
        q0 = np.concatenate([[0, 0, 0, 1, 0, 0, 0], pose]).astype(np.float32)
        fk = jax.jit(forward_kinematics)(model, jnp.asarray(q0))  # jit: op by op is slow
        spheres = [
            _sim.Sphere(f, spec["radius"], p, name=f"{side}{k}")
            for side, pts in spec["feet"].items()
            for k, (f, p) in enumerate(pts)
        ]
        cs = _sim.contact_set(model, spheres)
        # standing height: lowest contact sphere on the ground
        Rb = np.asarray(fk.body.R)[np.asarray(cs.body)]
        pb = np.asarray(fk.body.p)[np.asarray(cs.body)]
        low = np.einsum("cij,cj->ci", Rb, np.asarray(cs.pos)) + pb
        z0 = float(-(low[:, 2] - np.asarray(cs.radius)).min())
        h = dt / n_frames
        m_eff = 1.0 / np.diag(np.asarray(jax.jit(minv)(model, jnp.asarray(q0))))[6:]
        kp = np.minimum(_by_pattern(names, spec["kp"]), m_eff / h**2)
        kd = np.sqrt(kp * m_eff)
        effort = _by_pattern(names, spec["effort"], np.inf)
        mass = float(np.sum(np.asarray(model.mass)))
        if stiffness is None:  # each sphere carries its share of the weight at 2 mm depth
            stiffness = mass * 9.81 / (cs.n / 2) / 2e-3
        damping = 2 * 0.5 * np.sqrt(stiffness * mass / cs.n)
        cfg = _sim.SimConfig(
            dt=h,
            integrator="implicit",
            actuator=ServoPD(kp=jnp.asarray(kp), kd=jnp.asarray(kd), effort=jnp.asarray(effort)),
            contact=_sim.Compliant(
                stiffness=float(stiffness), damping=float(damping), friction=friction, slip=0.05
            ),
            contacts=cs,
        )
        super().__init__(model, cfg, n_frames)
        self.robot = robot
        self.n_joints = n
        self.default_pose = pose
        self.stand_height = z0 + 0.002
        self.action_scale = float(action_scale)
        self.alive_bonus = float(alive_bonus)
        self.upright_weight = float(upright_weight)
        self.height_weight = float(height_weight)
        self.velocity_weight = float(velocity_weight)
        self.ctrl_cost = float(ctrl_cost)
        self.min_height_ratio = float(min_height_ratio)
        self.min_upright = float(min_upright)
        self.init_noise = float(init_noise)

    def initial_pipeline(self, rng: Array) -> _sim.State:
        n = self.init_noise
        joints = self.default_pose + jax.random.uniform(rng, (self.n_joints,), minval=-n, maxval=n)
        base = jnp.asarray([0.0, 0.0, self.stand_height, 1.0, 0.0, 0.0, 0.0])
        return self.pipeline_init(spatial.concatenate([base, joints]), jnp.zeros(self.sys.model.nv))

    def initial_metrics(self, ps: _sim.State, dtype: DTypeLike) -> dict:
        return {"height": ps.q[2], "upright": jnp.ones((), dtype)}

    def reward(self, ps: _sim.State, action: Array) -> tuple:
        up = quat_to_matrix(ps.q[3:7])[2, 2]
        z = ps.q[2]
        reward = (
            self.alive_bonus
            + self.upright_weight * up
            - self.height_weight * jnp.abs(z - self.stand_height)
            - self.velocity_weight * jnp.sum(ps.v[:6] ** 2)
            - self.ctrl_cost * jnp.sum(action * action)
        )
        fell = (z < self.min_height_ratio * self.stand_height) | (up < self.min_upright)
        return reward, fell, {"height": z, "upright": up}

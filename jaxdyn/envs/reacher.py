"""Reacher: an arm brings its end effector to a random target.

Robots (``robot=``): the bundled 7-DoF ``arm7`` (default), Franka ``panda`` from
example-robot-data (its two finger joints locked, so the hand is part of the last link), or
``planar2``, a two-link arm moving in the horizontal plane (the classic Brax / Gym reacher; its
URDF is defined here), which is also the cheapest to compile.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, cast

import jax
import jax.numpy as jnp
import numpy as np

from .. import robots
from .. import sim as _sim
from ..algorithms.kinematics import frame_placement
from ..io.urdf import load_urdf
from .actuators import CompensatedTorque
from .base import SimEnv, State

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model

__all__ = ["ARMS", "Reacher", "load_arm"]

PLANAR2_URDF = """<robot name="planar2">
  <link name="base"/>
  <link name="link1"><inertial><origin xyz="0.15 0 0"/><mass value="1.0"/>
    <inertia ixx="0.001" iyy="0.0080" izz="0.0080" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="link2"><inertial><origin xyz="0.15 0 0"/><mass value="0.5"/>
    <inertia ixx="0.0005" iyy="0.0040" izz="0.0040" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="ee"/>
  <joint name="joint1" type="revolute"><parent link="base"/><child link="link1"/>
    <axis xyz="0 0 1"/><limit lower="-3.1" upper="3.1" effort="5" velocity="10"/></joint>
  <joint name="joint2" type="revolute"><parent link="link1"/><child link="link2"/>
    <origin xyz="0.3 0 0"/><axis xyz="0 0 1"/>
    <limit lower="-2.6" upper="2.6" effort="5" velocity="10"/></joint>
  <joint name="ee_joint" type="fixed"><parent link="link2"/><child link="ee"/>
    <origin xyz="0.3 0 0"/></joint>
</robot>"""

_PANDA_LIMITS = dict(
    lower=(-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973),
    upper=(2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973),
)

#: per robot: end-effector frame, home pose, joint limits (lower, upper), effort limits,
#: default spread of the random target poses around home (rad)
ARMS = {
    "arm7": dict(
        ee="ee",
        home=(0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785),
        lower=(-2.8, -1.7, -2.8, -3.0, -2.9, -0.1, -2.9),
        upper=(2.8, 1.7, 2.8, -0.1, 2.9, 3.7, 2.9),
        effort=(87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0),
        spread=0.6,
    ),
    "panda": dict(
        ee="panda_hand_tcp",
        home=(0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785),
        effort=(87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0),
        spread=0.6,
        **_PANDA_LIMITS,
    ),
    "planar2": dict(
        ee="ee",
        home=(0.0, 1.5),
        lower=(-3.1, -2.6),
        upper=(3.1, 2.6),
        effort=(5.0, 5.0),
        spread=1.2,
    ),
}


def load_arm(robot: str) -> Model:
    """The arm model: ``"arm7"`` (bundled), ``"panda"`` (example-robot-data, finger joints
    made fixed) or ``"planar2"``."""
    if robot not in ARMS:
        raise ValueError(f"load_arm: robot must be one of {sorted(ARMS)}, got {robot!r}")
    if robot == "arm7":
        return cast("Model", robots.load("arm7"))  # the ARMS are trees: Models
    if robot == "planar2":
        return cast("Model", load_urdf(PLANAR2_URDF))
    path, _ = robots.resolve("panda")
    text = open(path, encoding="utf-8").read()
    text = re.sub(r'(<joint\s+name="panda_finger_joint[12]"\s+type=")prismatic', r"\1fixed", text)
    return cast("Model", load_urdf(text))


class Reacher(SimEnv):
    """Reach a random target with the end effector of a torque-controlled arm.

    **Dynamics:** fixed-base arm, torque control over gravity compensation and viscous joint
    damping (:class:`~jaxdyn.envs.actuators.CompensatedTorque`): joint torque
    ``torque_scale * action + g(q) - damping * v``, ``action`` clipped to ``[-1, 1]``; implicit
    integrator, control period ``dt`` in ``n_frames`` simulator steps; no contact.

    **Observation** (``2 n + 9``: 23 for the 7-DoF arms, 13 for ``planar2``): ``q - home``
    (n), ``v`` (n), end-effector position (3), target (3), target minus end effector (3);
    positions in the world frame (m).

    **Reward:** ``-|p_ee - target|`` (m), minus ``ctrl_cost * |action|^2`` (default 0).
    **Metrics:** ``distance``, ``diverged``.

    **Reset:** ``q = home + U(-init_noise, init_noise)``, ``v = 0``; the target is the end
    effector's position at a random pose ``home + U(-target_spread, target_spread)`` (clipped
    to the joint limits), so it is always reachable; it lives in ``info["target"]``.

    **Termination:** none (episodes end by time limit, :class:`~jaxdyn.envs.EpisodeWrapper`),
    except ``done = 1`` if the simulation diverged.
    """

    def __init__(
        self,
        robot: str = "arm7",
        *,
        dt: float = 0.02,
        n_frames: int = 2,
        torque_scale: float | tuple | None = None,
        damping: float = 2.0,
        init_noise: float = 0.1,
        target_spread: float | None = None,
        ctrl_cost: float = 0.0,
        model: Model | None = None,
    ) -> None:
        spec = ARMS.get(robot)
        if spec is None:
            raise ValueError(f"Reacher: robot must be one of {sorted(ARMS)}, got {robot!r}")
        model = load_arm(robot) if model is None else model
        n = len(spec["home"])
        if model.nv != n or model.topo.floating_base:
            raise ValueError(f"Reacher({robot!r}): needs a fixed-base {n}-DoF arm, got {model}")
        if torque_scale is None:
            torque_scale = tuple(0.25 * e for e in spec["effort"])
        actuator = CompensatedTorque(gear=jnp.asarray(torque_scale, jnp.float32), damping=damping)
        cfg = _sim.SimConfig(
            dt=dt / n_frames, integrator="implicit", actuator=actuator, limits=None
        )
        super().__init__(model, cfg, n_frames)
        self.robot = robot
        self.ee_frame = spec["ee"]
        model.frame_index(self.ee_frame)  # raises for an unknown frame
        self.n_joints = n
        self.home = np.asarray(spec["home"], np.float32)
        self.lower = np.asarray(spec["lower"], np.float32)
        self.upper = np.asarray(spec["upper"], np.float32)
        self.init_noise = float(init_noise)
        self.target_spread = float(spec["spread"] if target_spread is None else target_spread)
        self.ctrl_cost = float(ctrl_cost)

    @property
    def action_size(self) -> int:
        return self.n_joints

    @property
    def observation_size(self) -> int:
        """``2 n + 9`` (:meth:`observe`), without tracing :meth:`reset` as the base class's
        does: a script's first line, often its size, came after that trace (and a compile of
        the PRNG key's seed)."""
        return 2 * self.n_joints + 9

    # -- pieces, also used by examples/train_reacher_apg.py through jaxdyn.sim.rollout
    def end_effector(self, q: ArrayLike) -> Array:
        """World position of the end effector ``(3,)``."""
        return frame_placement(self.sys.model, q, self.ee_frame).p

    def observe(self, ps: _sim.State, target: Array) -> Array:
        ee = self.end_effector(ps.q)
        return jnp.concatenate([ps.q - self.home, ps.v, ee, target, target - ee])

    def control(self, action: Array) -> Array:
        """Actuator command from an action (clipped to ``[-1, 1]``)."""
        return jnp.clip(action, -1.0, 1.0)

    def distance(self, q: ArrayLike, target: Array) -> Array:
        return jnp.linalg.norm(self.end_effector(q) - target)

    def sample_target(self, rng: Array) -> Array:
        dq = jax.random.uniform(
            rng, (self.n_joints,), minval=-self.target_spread, maxval=self.target_spread
        )
        q = jnp.clip(self.home + dq, self.lower, self.upper)
        return self.end_effector(q)

    # -- contract
    def reset(self, rng: Array) -> State:
        rng = self.check_rng(rng)
        k_q, k_t = jax.random.split(rng)
        noise = self.init_noise
        q = self.home + jax.random.uniform(k_q, (self.n_joints,), minval=-noise, maxval=noise)
        ps = self.pipeline_init(q, jnp.zeros(self.n_joints))
        target = self.sample_target(k_t).astype(ps.q.dtype)
        zero = jnp.zeros((), ps.q.dtype)
        metrics = {"distance": self.distance(ps.q, target), "diverged": zero}
        return State(ps, self.observe(ps, target), zero, zero, metrics, {"target": target})

    def step(self, state: State, action: Array) -> State:
        self.check_state(state, ("target",))
        action = self.check_action(action)
        ctrl = self.control(action)
        target = state.info["target"]
        ps, bad = self.pipeline_step(state.pipeline_state, ctrl)
        dist = self.distance(ps.q, target)
        reward = -dist - self.ctrl_cost * jnp.sum(ctrl * ctrl)
        done = bad.astype(reward.dtype)
        metrics = {"distance": dist, "diverged": done}
        return state.replace(
            pipeline_state=ps,
            obs=self.observe(ps, target),
            reward=reward,
            done=done,
            metrics={**state.metrics, **metrics},
        )

"""Manipulation: a 7-DoF arm pushes a free cube across a table to a target, on jaxdyn's
contact between bodies (the pusher against the cube: a geom pair of two moving bodies, through
:mod:`jaxdyn.sim.collision`) and against the terrain (the cube and the pusher on the table).

The scene is a bundled MJCF file (``xmls/push_cube.xml``: an original generic arm with joint
axes ``z y z y z y z``, a round pusher at its tip, an 8 cm cube), loaded by
:func:`jaxdyn.load_mjcf` and stepped through its :meth:`~jaxdyn.model.mjcf.MJCFModel.sim_config`
(needs ``mujoco`` to compile the file: ``pip install 'jaxdyn[mjcf]'``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from .. import sim as _sim
from ..algorithms.kinematics import forward_kinematics
from .actuators import ServoPD
from .base import SimEnv, State, contact_model

if TYPE_CHECKING:
    from jax import Array


__all__ = ["PUSH_CUBE_XML", "PushCube"]

#: the bundled scene
PUSH_CUBE_XML = os.path.join(os.path.dirname(__file__), "xmls", "push_cube.xml")

ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 8))


class PushCube(SimEnv):
    """Push a cube lying on a table to a target position with a 7-DoF arm.

    **Scene** (``xmls/push_cube.xml``): a fixed-base arm (joints ``joint1`` .. ``joint7``,
    axes ``z y z y z y z``, shoulder 0.3 m above the table, upper arm and forearm 0.35 m) with
    a sphere pusher of radius 0.025 m at its tip (site ``tip``); a free cube of side
    ``2 * half`` = 0.08 m, 0.2 kg; the table top is the plane ``z = 0``. Collision: the cube and
    the pusher against the table, the pusher against the cube (friction 0.6); the arm's links
    are visual only. ``xml``: another scene with the same names (hinges ``joint1`` ..
    ``joint7``, free joint and box geom ``cube``, site ``tip``; a scene lacking any is
    refused with a ``ValueError`` naming each missing one).

    **Dynamics:** hard contact (default, ``contact="constraint"``: the complementarity model
    :class:`jaxdyn.sim.Constraint` with ``soft=False``; a ``Constraint`` given with ``soft``
    left at ``None`` is MuJoCo's soft contact of the file, as ``sim_config`` makes it;
    ``"compliant"`` or a :class:`jaxdyn.sim.Compliant` for the
    spring-damper model, whose default stiffness, scaled by the cube's mass, lets the stiff
    servos drive the pusher centimetres into the cube), implicit integrator, simulator step
    ``dt / n_frames``. Joint position servos over gravity compensation
    (:class:`~jaxdyn.envs.actuators.ServoPD` with ``gravity=True``, gains ``kp``, ``kd``,
    effort-limited) track
    ``clip(home + action_scale * action, lower, upper)``, ``action`` clipped to ``[-1, 1]``,
    one per arm joint.

    **Observation** (38): arm joint angles minus ``home`` (7), arm joint velocities / 10 (7),
    pusher position (3), cube position (3), the cube's rotation as the first two columns of its
    rotation matrix (6; continuous, unlike a quaternion), cube linear velocity in the world (3),
    target (3: on the table, ``z`` the cube's resting height), cube minus pusher (3), target
    minus cube (3); positions in the world frame (m).

    **Reward** per step, with ``d_reach = |p_cube - p_tip|`` and ``d_push = |p_cube - target|``
    (3-D distances, m)::

        - reach_weight * d_reach - push_weight * d_push
        + success_bonus * [d_push < success_radius] - ctrl_cost * |action|^2

    **Metrics:** ``reach_distance`` (``d_reach``), ``push_distance`` (``d_push``), ``success``
    (1 while ``d_push < success_radius``), ``diverged``.

    **Reset:** arm at ``home + U(-init_noise, init_noise)`` per joint, at rest (the pusher
    about 0.3 m in front of the base, 8 cm above the table); cube resting on the table at
    ``x ~ U(cube_x)``, ``y ~ U(cube_y)``, yaw ``~ U(-pi/4, pi/4)``; target on the table at
    ``x ~ U(target_x)``, ``y ~ U(target_y)`` (in ``info["target"]``), so the cube is pushed away
    from the base.

    **Termination** (``done = 1``): the cube leaves the table (``|x|`` or ``|y|`` of its centre
    beyond ``table_half``, or its centre below the table) or a diverged simulation; otherwise
    episodes end by time limit.
    """

    #: arm pose with the pusher 0.3 m in front of the base and 8 cm above the table
    HOME = (0.0, 0.83, 0.0, 2.19, 0.0, 0.12, 0.0)

    def __init__(
        self,
        *,
        contact: str | _sim.Compliant | _sim.Constraint = "constraint",
        dt: float = 0.04,
        n_frames: int = 8,
        kp: tuple | float = (200.0, 200.0, 100.0, 100.0, 30.0, 30.0, 10.0),
        kd: tuple | float = (20.0, 20.0, 10.0, 10.0, 3.0, 3.0, 1.0),
        effort: tuple | float = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0),
        action_scale: tuple | float = (0.6, 0.6, 0.3, 0.8, 0.3, 0.6, 0.3),
        home: tuple | None = None,
        cube_x: tuple = (0.40, 0.48),
        cube_y: tuple = (-0.1, 0.1),
        target_x: tuple = (0.55, 0.65),
        target_y: tuple = (-0.15, 0.15),
        reach_weight: float = 1.0,
        push_weight: float = 4.0,
        success_radius: float = 0.05,
        success_bonus: float = 1.0,
        ctrl_cost: float = 0.01,
        init_noise: float = 0.05,
        table_half: float = 1.0,
        xml: str | None = None,
    ) -> None:
        from ..io.mjcf import load_mjcf

        cm = contact_model("PushCube", contact, _sim.Compliant, _hard_constraint)
        scene = load_mjcf(PUSH_CUBE_XML if xml is None else xml)
        model = scene.model
        self.half = 0.5 * _check_scene(scene, "the bundled scene" if xml is None else xml)
        actuator = ServoPD(
            kp=_arr(kp), kd=_arr(kd), effort=_arr(effort), dofs=ARM_JOINTS, gravity=True
        )
        # the hard and compliant contact take no limit rows: the arm's limits the spring-damper,
        # named (sim_config would warn); MuJoCo's soft contact (Constraint() with soft None, or
        # the primal Newton solve) gets the file's limit rows, sim_config's default
        rows = _sim.contact.uses_primal_newton(cm) or (
            isinstance(cm, _sim.Constraint) and cm.soft is None
        )
        kw = {} if rows else {"limits": "spring"}
        cfg = scene.sim_config(contact=cm, actuator=actuator, dt=dt / n_frames, **kw)
        super().__init__(model, cfg, n_frames)
        self.scene = scene
        self._frames = (model.frame_index("tip"), model.frame_index("cube"))
        self.arm_q = np.asarray([model.q_slice(j).start for j in ARM_JOINTS])
        self.arm_v = np.asarray([model.v_slice(j).start for j in ARM_JOINTS])
        self.cube_q = model.q_slice("cube")
        self.cube_v = model.v_slice("cube")
        self.home = np.asarray(self.HOME if home is None else home, np.float32)
        if self.home.shape != (7,):
            raise ValueError(f"PushCube: home must have 7 joint angles, got {self.home.shape}")
        self.lower = np.asarray(model.q_lower, np.float32)[self.arm_q]
        self.upper = np.asarray(model.q_upper, np.float32)[self.arm_q]
        self.action_scale = np.broadcast_to(np.asarray(action_scale, np.float32), (7,)).copy()
        self.cube_x, self.cube_y = tuple(cube_x), tuple(cube_y)
        self.target_x, self.target_y = tuple(target_x), tuple(target_y)
        self.reach_weight = float(reach_weight)
        self.push_weight = float(push_weight)
        self.success_radius = float(success_radius)
        self.success_bonus = float(success_bonus)
        self.ctrl_cost = float(ctrl_cost)
        self.init_noise = float(init_noise)
        self.table_half = float(table_half)

    @property
    def action_size(self) -> int:
        return 7

    # -- pieces
    def control(self, action: Array) -> Array:
        """Servo targets from an action (clipped to ``[-1, 1]``), within the joint ranges."""
        a = jnp.clip(action, -1.0, 1.0)
        return jnp.clip(self.home + self.action_scale * a, self.lower, self.upper)

    def positions(self, q: Array) -> tuple[Array, Array, Array]:
        """World positions of the pusher and of the cube's centre, and the cube's rotation:
        ``(p_tip (3,), p_cube (3,), R_cube (3, 3))``."""
        fk = forward_kinematics(self.sys.model, q).frame
        tip, cube = self._frames
        return fk.p[tip], q[self.cube_q][:3], fk.R[cube]

    def distances(self, q: Array, target: Array) -> tuple[Array, Array]:
        """``(d_reach, d_push)``: cube to pusher, cube to target (m)."""
        tip, cube, _ = self.positions(q)
        return jnp.linalg.norm(cube - tip), jnp.linalg.norm(cube - target)

    def reward(self, q: Array, target: Array, action: Array) -> tuple[Array, dict[str, Array]]:
        """``(reward, metrics)`` at the configuration ``q`` after ``action`` (the docstring's
        formula)."""
        d_reach, d_push = self.distances(q, target)
        success = (d_push < self.success_radius).astype(d_push.dtype)
        reward = (
            -self.reach_weight * d_reach
            - self.push_weight * d_push
            + self.success_bonus * success
            - self.ctrl_cost * jnp.sum(action * action)
        )
        metrics = {"reach_distance": d_reach, "push_distance": d_push, "success": success}
        return reward, metrics

    def observe(self, ps: _sim.State, target: Array) -> Array:
        q, v = ps.q, ps.v
        tip, cube, R = self.positions(q)
        cube_vel = R @ v[self.cube_v][3:6]  # free joint: v = [w_body; R^T v_world]
        return jnp.concatenate(
            [
                q[self.arm_q] - self.home,
                0.1 * v[self.arm_v],
                tip,
                cube,
                R[:, 0],
                R[:, 1],
                cube_vel,
                target,
                cube - tip,
                target - cube,
            ]
        )

    def initial_configuration(
        self, arm: Array | np.ndarray, cube_xy: Array | np.ndarray, cube_yaw: Array | np.ndarray
    ) -> Array:
        """The configuration with the arm at ``arm`` (7) and the cube resting on the table at
        ``cube_xy`` turned by ``cube_yaw`` about the vertical."""
        q = jnp.zeros(self.sys.model.nq)
        q = q.at[self.arm_q].set(arm)
        quat = jnp.stack(
            [
                jnp.cos(cube_yaw / 2),
                jnp.zeros_like(cube_yaw),
                jnp.zeros_like(cube_yaw),
                jnp.sin(cube_yaw / 2),
            ]
        )
        pos = jnp.concatenate([cube_xy, jnp.full((1,), self.half)])
        return q.at[self.cube_q].set(jnp.concatenate([pos, quat]))

    # -- contract
    def reset(self, rng: Array) -> State:
        rng = self.check_rng(rng)
        k_a, k_cx, k_cy, k_yaw, k_tx, k_ty = jax.random.split(rng, 6)
        n = self.init_noise
        arm = self.home + jax.random.uniform(k_a, (7,), minval=-n, maxval=n)

        def u(k, lim):
            return jax.random.uniform(k, (), minval=lim[0], maxval=lim[1])

        cube_xy = jnp.stack([u(k_cx, self.cube_x), u(k_cy, self.cube_y)])
        yaw = jax.random.uniform(k_yaw, (), minval=-jnp.pi / 4, maxval=jnp.pi / 4)
        ps = self.pipeline_init(
            self.initial_configuration(arm, cube_xy, yaw), jnp.zeros(self.sys.model.nv)
        )
        dtype = ps.q.dtype
        target = jnp.stack([u(k_tx, self.target_x), u(k_ty, self.target_y), self.half]).astype(
            dtype
        )
        zero = jnp.zeros((), dtype)
        _, metrics = self.reward(ps.q, target, jnp.zeros(7, dtype))
        metrics = {**metrics, "diverged": zero}
        info = {"target": target, **self.contact_info(dtype)}
        return State(ps, self.observe(ps, target), zero, zero, metrics, info)

    def step(self, state: State, action: Array) -> State:
        self.check_state(state, ("target",))
        action = self.check_action(action)
        action = jnp.clip(action, -1.0, 1.0)
        target = state.info["target"]
        ps, bad, contact = self.pipeline_step_info(state.pipeline_state, self.control(action))
        reward, metrics = self.reward(ps.q, target, action)
        cube = ps.q[self.cube_q][:3]
        off = (jnp.max(jnp.abs(cube[:2])) > self.table_half) | (cube[2] < 0.0)
        done = (off | bad).astype(reward.dtype)
        metrics = {**metrics, "diverged": bad.astype(reward.dtype)}
        return state.replace(
            pipeline_state=ps,
            obs=self.observe(ps, target),
            reward=reward,
            done=done,
            metrics={**state.metrics, **metrics},
            info={**state.info, **contact},
        )


def _check_scene(scene, source) -> float:
    """The names :class:`PushCube` needs in a scene (hinges ``joint1`` .. ``joint7``, a free
    joint and a body ``cube``, a site ``tip``, a colliding box geom ``cube``: a primitive
    against the table or a geom of a pair), all checked at once; returns the cube's full side.
    Raises a ``ValueError`` naming ``source`` and every missing name."""
    model = scene.model
    missing = []
    joints = list(model.joint_names)
    width = {j: model.q_slice(j).stop - model.q_slice(j).start for j in joints}
    for j in ARM_JOINTS:
        if width.get(j) != 1:
            missing.append(f"a hinge joint {j!r}")
    if width.get("cube") != 7:
        missing.append("a free joint 'cube' (on the cube's body)")
    if "cube" not in model.frame_names:
        missing.append("a body 'cube'")
    if "tip" not in model.frame_names:
        missing.append("a site 'tip' (the pusher's centre)")
    side = None
    for c in scene.contacts:
        if c.name == "cube" and hasattr(c, "size"):  # a sim.Box primitive (full sides)
            side = float(c.size[0])
    g = scene.geoms
    if side is None and g is not None and "cube" in g.names:
        k = g.names.index("cube")
        if g.type[k] == "box":
            side = 2.0 * float(np.asarray(g.size)[k][0])  # MuJoCo's half-sizes
    if side is None:
        missing.append("a colliding box geom 'cube'")
    if missing:
        geoms = [c.name for c in scene.contacts] + ([] if g is None else list(g.names))
        raise ValueError(
            f"PushCube: {source} lacks {'; '.join(missing)}. The scene needs hinges "
            f"{', '.join(ARM_JOINTS)}, a free body 'cube' (free joint and box geom of that name) "
            f"and a site 'tip'; it has joints {joints} and colliding geoms {geoms}"
        )
    assert side is not None  # (else named missing above)
    return side


def _arr(x):
    return jnp.asarray(x, jnp.float32) if isinstance(x, (tuple, list)) else float(x)


def _hard_constraint() -> _sim.Constraint:
    """The task's ``contact="constraint"``: jaxdyn's hard contact (``soft=False``; the
    scene's ``sim_config`` would make ``Constraint()`` MuJoCo's soft contact)."""
    return _sim.Constraint(soft=False)

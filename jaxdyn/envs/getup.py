"""Whole-body contact: the ``quad12`` quadruped gets up from a fall, its trunk and legs (not only
its feet) touching the ground."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import jax
import jax.numpy as jnp
import numpy as np

from .. import robots, spatial
from .. import sim as _sim
from ..algorithms.kinematics import forward_kinematics
from .actuators import ServoPD
from .base import SimEnv, State, contact_model
from .quadruped import JOINT_KINDS, LEGS, per_joint_kind

if TYPE_CHECKING:
    from jax import Array

    from ..model.model import Model
    from ..sim.geometry import ContactSet

__all__ = ["QuadrupedGetup", "quad12_collision"]


def _capsule(frame, a, b, radius, name):
    """A :class:`jaxdyn.sim.Capsule` around the segment ``a -> b`` (``frame`` coordinates)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    z = (b - a) / np.linalg.norm(b - a)
    x = np.cross([0.0, 1.0, 0.0] if abs(z[1]) < 0.9 else [1.0, 0.0, 0.0], z)
    x /= np.linalg.norm(x)
    R = np.stack([x, np.cross(z, x), z], axis=1)
    return _sim.Capsule(
        frame,
        radius,
        float(np.linalg.norm(b - a)),
        pos=tuple((a + b) / 2),
        rotation=tuple(map(tuple, R.tolist())),
        name=name,
    )


def quad12_collision(
    model: Model,
    *,
    foot_radius: float = 0.02,
    leg_radius: float = 0.02,
    trunk: tuple[float, float, float] = (0.44, 0.16, 0.08),
) -> list[_sim.Box | _sim.Capsule | _sim.Sphere]:
    """Collision geometry of ``quad12`` (its URDF has none), for contact with the ground:

    * the trunk: a :class:`jaxdyn.sim.Box` of full sides ``trunk`` on ``base_link`` (between
      the hip joints, which are 0.4 m apart along x and 0.14 m across);
    * each thigh: a :class:`jaxdyn.sim.Capsule` of radius ``leg_radius`` from the hip (``HFE``)
      to the knee (``KFE``);
    * each shank: a capsule of radius ``foot_radius`` from the knee to the foot; against a plane
      a capsule touches at an end sphere, and its knee end is inside the thigh's, so the shank
      is its foot sphere (:class:`jaxdyn.sim.Sphere` on ``<leg>_FOOT``).

    Returns the primitives (20 contact points); limbs do not collide with each other.
    """
    prims: list[_sim.Box | _sim.Capsule | _sim.Sphere] = [
        _sim.Box("base_link", trunk, name="trunk")
    ]
    for leg in LEGS:
        # the knee joint's origin in thigh coordinates (the shank's joint placement)
        knee = np.asarray(model.Xtree_p[model.body_names.index(f"{leg}_LOWER_LEG")], float)
        prims.append(_capsule(f"{leg}_UPPER_LEG", (0, 0, 0), knee, leg_radius, f"{leg}_thigh"))
        prims.append(_sim.Sphere(f"{leg}_FOOT", foot_radius, name=f"{leg}_foot"))
    return prims


def _axis_quat(axis, angle):
    s = jnp.sin(angle / 2)
    return jnp.stack([jnp.cos(angle / 2), axis[0] * s, axis[1] * s, axis[2] * s])


class QuadrupedGetup(SimEnv):
    """Get up from a fall: ``quad12`` starts lying in a random orientation (on its back, its
    side, its nose) and must stand up, on whole-body contact with the ground.

    **Dynamics:** floating base; the trunk (a box), thighs (capsules) and feet (spheres) of
    :func:`quad12_collision` against the ground plane, compliant contact (default,
    friction ``friction``; ``contact="constraint"``: the complementarity model; or a
    :class:`jaxdyn.sim.Compliant` / :class:`~jaxdyn.sim.Constraint`); joint position servos
    (:class:`~jaxdyn.envs.actuators.ServoPD`, effort-limited to the URDF's 2.7 N m) tracking
    ``default_pose + action_scale * action`` (``action`` clipped to ``[-1, 1]``, model joint
    order; ``action_scale`` per joint kind ``(HAA, HFE, KFE)``, rad; targets clipped to the
    joint limits, so the legs can swing over the trunk), implicit integrator, control period
    ``dt`` in ``n_frames`` simulator steps.

    **Observation** (46): base height (1), gravity direction in base axes (3), base angular and
    linear velocity in base axes (3 + 3), joint angles minus the default pose (12), joint
    velocities / 10 (12), previous action (12).

    **Reward** per step, with ``u_z`` the z component of the base's z axis (1 upright, -1 on
    its back), ``z`` the base height, ``z0`` the standing height and ``e_q`` the joints'
    distance to the default pose (rad)::

        upright_weight * (1 + u_z) / 2
        + height_weight * clip(z / z0, 0, 1) * (1 + u_z) / 2
        - posture_weight * |e_q|^2 / 12 * [u_z > 0.9]
        + stand_bonus * [u_z > 0.9 and z > 0.8 z0]
        - ctrl_cost * |action|^2

    (height counts only as much as the trunk is upright, so standing on the back does not pay;
    the posture term applies once upright). **Metrics:** ``upright`` (``u_z``), ``height``
    (``z``), ``standing`` (the bonus's condition), ``diverged``.

    **Reset:** a uniformly random orientation of the base (``fall_fraction`` of the
    episodes; the others start upright: the task includes staying up), joints at the default
    pose plus ``U(-joint_noise, joint_noise)`` (clipped to the joint limits), the whole body
    ``U(0, drop_height)`` m above the ground at its lowest contact point, at rest.

    **Termination:** none (episodes end by time limit), except ``done = 1`` if the simulation
    diverged.

    **Contact report** (``info``, :meth:`~jaxdyn.envs.SimEnv.pipeline_step_info`):
    ``contact_residual`` and ``contacts_dropped`` of the period's constraint solves.
    ``contact="constraint"`` solves over the :attr:`MAX_CONTACTS` closest of the 20 contact
    spheres (``Constraint(max_contacts=...)``): falls from random orientations under random
    actions bring at most about half of that many within reach of the ground in one step, so
    ``contacts_dropped`` stays 0 there; a cheaper step (``docs/environments.md``).
    """

    #: contact slots the constraint solve keeps (the closest; see the class docstring)
    MAX_CONTACTS = 12

    def __init__(
        self,
        *,
        contact: str | _sim.Compliant | _sim.Constraint = "compliant",
        dt: float = 0.02,
        n_frames: int = 4,
        kp: float = 6.0,
        kd: float = 0.15,
        effort: float = 2.7,
        action_scale: tuple = (1.0, 2.0, 1.5),
        default_pose: tuple = (0.0, 0.7, -1.4),
        friction: float = 0.8,
        upright_weight: float = 1.0,
        height_weight: float = 1.0,
        posture_weight: float = 0.1,
        stand_bonus: float = 1.0,
        ctrl_cost: float = 0.01,
        joint_noise: float = 0.5,
        drop_height: float = 0.05,
        fall_fraction: float = 0.8,
        model: Model | None = None,
    ) -> None:
        # quad12 has no kinematic loops: robots.load gives a Model
        model = cast("Model", robots.load("quad12")) if model is None else model
        if not model.topo.floating_base or model.nv != 18:
            raise ValueError(
                f"QuadrupedGetup: needs quad12 (floating base, 12 joints), got {model}"
            )
        need = ["base_link"] + [f"{leg}_{part}" for leg in LEGS
                                for part in ("UPPER_LEG", "LOWER_LEG", "FOOT")]  # fmt: skip
        lacking = [n for n in need if n not in model.frame_names]
        lacking += [f"body {leg}_LOWER_LEG" for leg in LEGS
                    if f"{leg}_LOWER_LEG" in model.frame_names
                    and f"{leg}_LOWER_LEG" not in model.body_names]  # fmt: skip
        lacking += [
            f"joint {j!r} (names end in _HAA, _HFE or _KFE)"
            for j in model.joint_names[1:]
            if j.split("_")[-1] not in JOINT_KINDS
        ]
        if lacking:
            raise ValueError(
                f"QuadrupedGetup: needs quad12's link and joint names; the model {model.name!r} "
                f"lacks or misnames: {', '.join(lacking)}"
            )
        prims = quad12_collision(model)
        cs = _sim.contact_set(model, prims)
        cm = contact_model(
            "QuadrupedGetup",
            contact,
            lambda: _sim.Compliant(friction=friction, slip=0.05),
            lambda: _sim.Constraint(friction=friction, max_contacts=self.MAX_CONTACTS),
        )
        cfg = _sim.SimConfig(
            dt=dt / n_frames,
            integrator="implicit",
            actuator=ServoPD(kp=kp, kd=kd, effort=effort),
            contact=cm,
            contacts=cs,
        )
        super().__init__(model, cfg, n_frames)
        # joint order of q[7:]: each joint's pose and scale from its name's suffix
        pose = per_joint_kind(model, default_pose)
        scale = per_joint_kind(model, action_scale)
        self.default_pose = pose
        self.lower = np.asarray(model.q_lower, np.float32)[7:]
        self.upper = np.asarray(model.q_upper, np.float32)[7:]
        q = np.concatenate([[0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0], pose])
        self.stand_height = float(-jax.jit(self.lowest_point)(jnp.asarray(q, jnp.float32)))
        self.action_scale = scale
        self.upright_weight = float(upright_weight)
        self.height_weight = float(height_weight)
        self.posture_weight = float(posture_weight)
        self.stand_bonus = float(stand_bonus)
        self.ctrl_cost = float(ctrl_cost)
        self.joint_noise = float(joint_noise)
        self.drop_height = float(drop_height)
        self.fall_fraction = float(fall_fraction)

    @property
    def action_size(self) -> int:
        return 12

    def control(self, action: Array) -> Array:
        """PD targets from an action (clipped to ``[-1, 1]``), within the joint limits."""
        a = jnp.clip(action, -1.0, 1.0)
        return jnp.clip(self.default_pose + self.action_scale * a, self.lower, self.upper)

    def lowest_point(self, q: Array) -> Array:
        """Height of the lowest point of the collision geometry at ``q`` (m; < 0 below the
        ground)."""
        cs = cast("ContactSet", self.sys.cfg.contacts)  # __init__ sets them
        body = forward_kinematics(self.sys.model, q).body
        b = cs.body_index
        z = jnp.einsum("nj,nj->n", body.R[b][:, 2, :], cs.pos.astype(q.dtype)) + body.p[b][:, 2]
        return jnp.min(z - cs.radius.astype(q.dtype))

    def base_frame(self, q: Array) -> tuple[Array, Array]:
        """The base's rotation (columns: its axes in the world) and ``u_z``."""
        R = spatial.quat_to_rot(q[3:7])
        return R, R[2, 2]

    def observe(self, ps: _sim.State, last_action: Array) -> Array:
        R, _ = self.base_frame(ps.q)
        gravity = R.T @ jnp.asarray([0.0, 0.0, -1.0], ps.q.dtype)
        return jnp.concatenate(
            [
                ps.q[2:3],
                gravity,
                ps.v[:3],
                ps.v[3:6],
                ps.q[7:] - self.default_pose,
                0.1 * ps.v[6:],
                last_action,
            ]
        )

    def reward(self, q: Array, action: Array) -> tuple[Array, dict[str, Array]]:
        """``(reward, metrics)`` at the configuration ``q`` after ``action`` (the docstring's
        formula)."""
        _, up = self.base_frame(q)
        z = q[2]
        upright = 0.5 * (1.0 + up)
        height = jnp.clip(z / self.stand_height, 0.0, 1.0)
        is_up = up > 0.9
        standing = (is_up & (z > 0.8 * self.stand_height)).astype(z.dtype)
        eq = q[7:] - self.default_pose
        reward = (
            self.upright_weight * upright
            + self.height_weight * height * upright
            - self.posture_weight * jnp.sum(eq * eq) / 12.0 * is_up.astype(z.dtype)
            + self.stand_bonus * standing
            - self.ctrl_cost * jnp.sum(action * action)
        )
        return reward, {"upright": up, "height": z, "standing": standing}

    def reset(self, rng: Array) -> State:
        rng = self.check_rng(rng)
        k_rot, k_fall, k_yaw, k_j, k_h = jax.random.split(rng, 5)
        # a uniformly random rotation (a normalised Gaussian 4-vector), or upright with a yaw
        g = jax.random.normal(k_rot, (4,))
        fallen = g / jnp.linalg.norm(g)
        yaw = jax.random.uniform(k_yaw, (), minval=-jnp.pi, maxval=jnp.pi)
        upright = _axis_quat(jnp.asarray([0.0, 0.0, 1.0]), yaw)
        falls = jax.random.uniform(k_fall) < self.fall_fraction
        quat = jnp.where(falls, fallen, upright)
        n = self.joint_noise
        joints = self.default_pose + jax.random.uniform(k_j, (12,), minval=-n, maxval=n)
        joints = jnp.clip(joints, self.lower, self.upper)
        q = jnp.concatenate([jnp.zeros(3), quat, joints])
        lift = -self.lowest_point(q) + jax.random.uniform(k_h, (), maxval=self.drop_height)
        q = q.at[2].set(lift)
        ps = self.pipeline_init(q, jnp.zeros(18))
        dtype = ps.q.dtype
        zero = jnp.zeros((), dtype)
        last = jnp.zeros(12, dtype)
        _, metrics = self.reward(ps.q, last)
        metrics = {**metrics, "diverged": zero}
        info = {"last_action": last, **self.contact_info(dtype)}
        return State(ps, self.observe(ps, last), zero, zero, metrics, info)

    def step(self, state: State, action: Array) -> State:
        self.check_state(state, ("last_action",))
        action = self.check_action(action)
        action = jnp.clip(action, -1.0, 1.0)
        ps, bad, contact = self.pipeline_step_info(state.pipeline_state, self.control(action))
        reward, metrics = self.reward(ps.q, action)
        done = bad.astype(reward.dtype)
        info = {**state.info, **contact}
        info["last_action"] = action
        return state.replace(
            pipeline_state=ps,
            obs=self.observe(ps, action),
            reward=reward,
            done=done,
            metrics={**state.metrics, **metrics, "diverged": done},
            info=info,
        )

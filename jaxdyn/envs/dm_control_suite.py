"""DeepMind Control Suite tasks without body-body contact, as MuJoCo Playground defines them
(``mujoco_playground._src.dm_control_suite``): the same MJCF models (bundled, Apache-2.0,
``xmls/dm_control_suite/README.md``), loaded by :func:`jaxdyn.load_mjcf` and stepped by
:mod:`jaxdyn.sim` with :meth:`~jaxdyn.model.mjcf.MJCFModel.sim_config` (MuJoCo's ``Euler``
with ``eulerdamp`` off is jaxdyn's ``"euler"``), and the same control and simulation periods,
observations, rewards (:func:`jaxdyn.envs.rewards.tolerance`), resets (the same PRNG key
splits, so one key gives Playground's initial state) and termination (``done`` only when the
simulation diverges; episodes end by time limit, 1000 control steps in Playground).

Playground's observations and rewards read ``qpos`` / ``qvel`` after the control step but the
derived quantities (``xmat``, ``site_xpos``) of ``mjx.step``, which computes them *before* its
integration: they are those of the state at the start of the last simulator step. The tasks
here do the same (``qk`` below: the configuration before the last simulator step), so that
observations and rewards equal Playground's; dm_control's own environments recompute them
after the step.

Tasks (Tassa et al., "DeepMind Control Suite", 2018):

* :class:`CartpoleBalance` (``swing_up``, ``sparse``): ``cartpole_balance``,
  ``cartpole_balance_sparse``, ``cartpole_swingup``, ``cartpole_swingup_sparse``;
* :class:`PendulumSwingup`: ``pendulum_swingup``;
* :class:`AcrobotSwingup` (``sparse``): ``acrobot_swingup``, ``acrobot_swingup_sparse``;
* :class:`SuiteReacher` (``target_size``): ``reacher_easy``, ``reacher_hard`` (dm_control's
  two-link planar reacher; jaxdyn's own :class:`~jaxdyn.envs.Reacher` is a different task).

Differences from Playground's MJX environments: the cart's rail limits (``range="-1.8 1.8"``)
and the reacher's wrist limits (160 degrees) are jaxdyn's smooth
:class:`jaxdyn.sim.JointLimits` spring-damper, not MuJoCo's limit constraint (``solreflimit``),
so a cart driven into the end of its rail or a wrist into its stop rebounds differently;
away from the limits the physics follows MuJoCo C to rounding. The model needs ``mujoco``
(``pip install 'jaxdyn[mjcf]'``) to be compiled when the environment is built.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from .. import sim as _sim
from ..algorithms.kinematics import forward_kinematics
from .base import SimEnv, State
from .rewards import tolerance

__all__ = [
    "XML_DIR",
    "SuiteEnv",
    "CartpoleBalance",
    "PendulumSwingup",
    "AcrobotSwingup",
    "SuiteReacher",
]

#: the bundled models
XML_DIR = os.path.join(os.path.dirname(__file__), "xmls", "dm_control_suite")


class SuiteEnv(SimEnv):
    """A suite task on a bundled MJCF model: ``ctrl_dt`` control period in
    ``ctrl_dt / sim_dt`` simulator steps of ``sim_dt`` (Playground's ``n_substeps``);
    ``action`` is MuJoCo's ``ctrl`` (clamped to ``ctrlrange`` by the actuator)."""

    xml: str = ""
    #: ``ignore=`` of :func:`jaxdyn.load_mjcf` for the bundled model
    ignore: tuple = ()

    def __init__(self, *, ctrl_dt: float, sim_dt: float):
        from ..io.mjcf import load_mjcf

        n = int(round(ctrl_dt / sim_dt))
        if n < 1 or abs(n * sim_dt - ctrl_dt) > 1e-12 * ctrl_dt:
            raise ValueError(
                f"{type(self).__name__}: ctrl_dt={ctrl_dt} must be a multiple of sim_dt={sim_dt}"
            )
        scene = load_mjcf(os.path.join(XML_DIR, self.xml), ignore=self.ignore)
        self.scene = scene
        super().__init__(scene.model, scene.sim_config(dt=sim_dt), n_frames=n)
        t = scene.model.topo
        # these models are chains of one-DoF joints in MuJoCo's order: q = qpos, v = qvel
        if scene.model.nq != scene.mj_model.nq or list(t.joint_names) != [
            scene.mj_model.joint(j).name for j in range(scene.mj_model.njnt)
        ]:  # pragma: no cover - a property of the bundled files
            raise ValueError(f"{type(self).__name__}: unexpected joint layout in {self.xml}")

    @property
    def action_size(self) -> int:
        return self.sys.cfg.actuator.size(self.sys.model)

    def frames(self, q, names):
        """World rotations ``(k, 3, 3)`` and positions ``(k, 3)`` of the named frames (bodies:
        MuJoCo's ``xmat`` / ``xpos``; sites by their frame name)."""
        fk = forward_kinematics(self.sys.model, q).frame
        idx = np.asarray([self.sys.model.frame_index(n) for n in names])
        return fk.R[idx], fk.p[idx]

    def advance(self, ps, ctrl):
        """One control period (as :meth:`SimEnv.pipeline_step`) and the configuration at the
        start of its last simulator step: ``(next_state, qk, diverged)``."""
        model, cfg = self.sys.model, self.sys.cfg
        vmax = self.divergence_speed

        def frame(carry, _):
            s, _, ok = carry
            n = _sim.step(model, s, ctrl, cfg)
            good = jnp.all(jnp.isfinite(n.q)) & jnp.all(jnp.abs(n.v) < vmax)
            n = jax.tree_util.tree_map(lambda a, b: jnp.where(good, a, b), n, s)
            return (n, s.q, ok & good), None

        init = (ps, ps.q, jnp.asarray(True))
        (nxt, qk, ok), _ = jax.lax.scan(frame, init, None, length=self.n_frames)
        bad = ~ok
        nxt = jax.tree_util.tree_map(lambda a, b: jnp.where(bad, b, a), nxt, ps)
        return nxt, jnp.where(bad, ps.q, qk), bad

    def step(self, state: State, action) -> State:
        self.check_state(state)
        action = self.check_action(action)
        ps, qk, bad = self.advance(state.pipeline_state, action)
        reward, metrics = self.reward(ps, qk, action)
        reward = reward.astype(ps.q.dtype)
        done = bad.astype(reward.dtype)
        return state.replace(
            pipeline_state=ps,
            obs=self.observe(ps, qk),
            reward=reward,
            done=done,
            metrics={**state.metrics, **metrics, "diverged": done},
        )


class CartpoleBalance(SuiteEnv):
    """Cart-pole (dm_control ``cartpole``; Playground ``CartpoleBalance`` /
    ``CartpoleSwingup`` and their ``Sparse`` variants): a motor (``gear=10``, ``ctrl`` in
    ``[-1, 1]``) pushes a cart on a rail carrying an unactuated pole.

    **Observation (5):** cart position, the pole's ``cos`` and ``sin`` (its body z axis: ``zz``,
    ``xz`` of ``xmat``), ``qvel`` (2).
    **Reward:** dense, ``upright * centered * small_control * small_velocity`` with
    ``upright = (cos + 1) / 2``, ``centered = (1 + tolerance(x, margin=2)) / 2``,
    ``small_control = (4 + tolerance(a, margin=1, value_at_margin=0, sigmoid="quadratic")) / 5``,
    ``small_velocity = (1 + tolerance(omega, margin=5)) / 2``; sparse,
    ``tolerance(x, (-0.25, 0.25)) * tolerance(cos, (0.995, 1))``.
    **Reset:** balance: ``x ~ U(-0.1, 0.1)``, pole angle ``~ U(-0.034, 0.034)``; swing-up:
    ``x ~ 0.01 N``, angle ``~ pi + 0.01 N``; ``qvel ~ 0.01 N``.
    **Periods:** control and simulation 0.01 s.
    """

    xml = "cartpole.xml"
    CART_RANGE = (-0.25, 0.25)
    ANGLE_COSINE_RANGE = (0.995, 1.0)

    def __init__(self, swing_up: bool = False, sparse: bool = False, *, ctrl_dt=0.01, sim_dt=0.01):
        super().__init__(ctrl_dt=ctrl_dt, sim_dt=sim_dt)
        self.swing_up, self.sparse = bool(swing_up), bool(sparse)

    def _qpos(self, rng, nq):
        if self.swing_up:
            _, r1, r2, r3 = jax.random.split(rng, 4)
            qpos = jnp.zeros(nq)
            qpos = qpos.at[0].set(0.01 * jax.random.normal(r1))
            qpos = qpos.at[1].set(jnp.pi + 0.01 * jax.random.normal(r2))
            return qpos.at[2:].set(0.1 * jax.random.uniform(r3, (nq - 2,)))
        r1, r2 = jax.random.split(rng, 2)
        qpos = jnp.zeros(nq).at[0].set(jax.random.uniform(r1, (), minval=-0.1, maxval=0.1))
        return qpos.at[1:].set(jax.random.uniform(r2, (nq - 1,), minval=-0.034, maxval=0.034))

    def observe(self, ps, qk):
        R, _ = self.frames(qk, ["pole_1"])
        return jnp.concatenate([ps.q[:1], R[:, 2, 2], R[:, 0, 2], ps.v])

    def reward(self, ps, qk, action):
        """``(reward, metrics)`` of the state ``ps`` reached under ``action`` (``qk``: the
        configuration of the derived quantities, see the module docs)."""
        R, _ = self.frames(qk, ["pole_1"])
        cos, cart = R[0, 2, 2], ps.q[0]
        if self.sparse:
            cart_in = tolerance(cart, self.CART_RANGE)
            angle_in = jnp.prod(tolerance(R[:, 2, 2], self.ANGLE_COSINE_RANGE))
            return cart_in * angle_in, {
                "reward/cart_in_bounds": cart_in,
                "reward/angle_in_bounds": angle_in,
            }
        upright = (cos + 1) / 2
        centered = (1 + tolerance(cart, margin=2)) / 2
        small_control = tolerance(action[0], margin=1, value_at_margin=0, sigmoid="quadratic")
        small_control = (4 + small_control) / 5
        small_velocity = (1 + jnp.min(tolerance(ps.v[1:], margin=5))) / 2
        parts = dict(
            upright=upright,
            centered=centered,
            small_control=small_control,
            small_velocity=small_velocity,
        )
        return upright * centered * small_control * small_velocity, {
            f"reward/{k}": v for k, v in parts.items()
        }

    _METRICS = (
        "reward/upright",
        "reward/centered",
        "reward/small_control",
        "reward/small_velocity",
        "reward/cart_in_bounds",
        "reward/angle_in_bounds",
    )

    def reset(self, rng) -> State:
        rng = self.check_rng(rng)
        model = self.sys.model
        qpos = self._qpos(rng, model.nq)
        rng, r1 = jax.random.split(rng, 2)
        qvel = 0.01 * jax.random.normal(r1, (model.nv,))
        ps = self.pipeline_init(qpos, qvel)
        zero = jnp.zeros((), ps.q.dtype)
        metrics = {k: zero for k in self._METRICS} | {"diverged": zero}
        return State(ps, self.observe(ps, ps.q), zero, zero, metrics, {"rng": rng})


class PendulumSwingup(SuiteEnv):
    """Pendulum swing-up (dm_control ``pendulum``; Playground ``PendulumSwingup``): a
    torque-limited motor (``ctrl`` in ``[-1, 1]``) on a damped pendulum.

    **Observation (3):** the pole's ``xz`` and ``zz`` (``xmat``), its angular velocity.
    **Reward:** ``tolerance(zz, (cos 8 deg, 1))``. **Reset:** angle ``~ U(0, pi)``, at rest.
    **Periods:** control 0.02 s, simulation 0.01 s.
    """

    xml = "pendulum.xml"
    COSINE_BOUND = float(np.cos(np.deg2rad(8)))

    def __init__(self, *, ctrl_dt=0.02, sim_dt=0.01):
        super().__init__(ctrl_dt=ctrl_dt, sim_dt=sim_dt)

    def observe(self, ps, qk):
        R, _ = self.frames(qk, ["pole"])
        return jnp.stack([R[0, 0, 2], R[0, 2, 2], ps.v[0]])

    def reward(self, ps, qk, action):
        R, _ = self.frames(qk, ["pole"])
        return tolerance(R[0, 2, 2], (self.COSINE_BOUND, 1.0)), {}

    def reset(self, rng) -> State:
        rng = self.check_rng(rng)
        rng, r1 = jax.random.split(rng)
        qpos = jnp.zeros(self.sys.model.nq).at[0].set(jax.random.uniform(r1) * jnp.pi)
        ps = self.pipeline_init(qpos, jnp.zeros(self.sys.model.nv))
        zero = jnp.zeros((), ps.q.dtype)
        return State(ps, self.observe(ps, ps.q), zero, zero, {"diverged": zero}, {"rng": rng})


class AcrobotSwingup(SuiteEnv):
    """Acrobot swing-up (dm_control ``acrobot``; Playground ``AcrobotSwingup`` /
    ``AcrobotSwingupSparse``): two links, the elbow actuated (``gear=2``, ``ctrl`` in
    ``[-1, 1]``); bring the tip to the target 4 m up.

    **Observation (6):** the links' ``xz`` (2) and ``zz`` (2) of ``xmat``, ``qvel`` (2).
    **Reward:** ``tolerance(|target - tip|, (0, 0.2), margin)`` with ``margin = 1`` (dense) or
    0 (sparse). **Reset:** angles ``~ U(-pi, pi)``, at rest. **Periods:** 0.01 s both.
    """

    xml = "acrobot.xml"

    def __init__(self, sparse: bool = False, *, ctrl_dt=0.01, sim_dt=0.01):
        super().__init__(ctrl_dt=ctrl_dt, sim_dt=sim_dt)
        self.sparse = bool(sparse)
        m = self.scene.mj_model
        self.target_radius = float(m.site_size[m.site("target").id, 0])
        self.site_names = [self.scene.site_frames["target"], self.scene.site_frames["tip"]]

    def observe(self, ps, qk):
        R, _ = self.frames(qk, ["upper_arm", "lower_arm"])
        return jnp.concatenate([R[:, 0, 2], R[:, 2, 2], ps.v])

    def distance(self, q):
        _, p = self.frames(q, self.site_names)
        return jnp.linalg.norm(p[0] - p[1])

    def reward(self, ps, qk, action):
        dist = self.distance(qk)
        margin = 0.0 if self.sparse else 1.0
        return tolerance(dist, (0.0, self.target_radius), margin=margin), {"distance": dist}

    def reset(self, rng) -> State:
        rng = self.check_rng(rng)
        rng, r1 = jax.random.split(rng, 2)
        nq = self.sys.model.nq
        qpos = jax.random.uniform(r1, (nq,), minval=-jnp.pi, maxval=jnp.pi)
        ps = self.pipeline_init(qpos, jnp.zeros(self.sys.model.nv))
        zero = jnp.zeros((), ps.q.dtype)
        metrics = {"distance": zero, "diverged": zero}
        return State(ps, self.observe(ps, ps.q), zero, zero, metrics, {"rng": rng})


class SuiteReacher(SuiteEnv):
    """Two-link planar reacher (dm_control ``reacher``; Playground ``ReacherEasy`` /
    ``ReacherHard``): motors (``gear=0.05``, ``ctrl`` in ``[-1, 1]``) on the shoulder and the
    wrist (limited to 160 degrees) bring the fingertip to a target in the plane.

    **Observation (6):** ``qpos`` (2), target minus fingertip in the plane (2), ``qvel`` (2).
    **Reward:** ``tolerance(|target - fingertip|, (0, target_size + 0.01))`` (the fingertip's
    radius 0.01). **Reset:** shoulder ``~ U(-pi, pi)``, wrist ``~ U`` over its range, at rest;
    the target at radius ``~ U(0.05, 0.2)``, angle ``~ U(0, 2 pi)``, in ``info["target"]`` (a
    mocap body in Playground's model, fixed here: the target only enters the observation and
    the reward). As in Playground, the observation at reset still sees the target at the
    model's origin (Playground moves the mocap body after ``mjx.forward``).
    **Periods:** control 0.02 s, simulation 0.005 s.
    """

    xml = "reacher.xml"
    ignore = ("mocap",)
    BIG_TARGET, SMALL_TARGET = 0.05, 0.015

    def __init__(self, target_size: float = BIG_TARGET, *, ctrl_dt=0.02, sim_dt=0.005):
        super().__init__(ctrl_dt=ctrl_dt, sim_dt=sim_dt)
        m = self.scene.mj_model
        self.target_size = float(target_size)
        self.radii = self.target_size + float(m.geom_size[m.geom("finger").id, 0])
        w = m.joint("wrist").id
        self.wrist_range = tuple(float(x) for x in m.jnt_range[w])

    def observe(self, ps, qk, target):
        _, p = self.frames(qk, ["finger"])
        return jnp.concatenate([ps.q, target - p[0, :2], ps.v])

    def reward(self, ps, qk, target):
        _, p = self.frames(qk, ["finger"])
        dist = jnp.linalg.norm(target - p[0, :2])
        return tolerance(dist, (0.0, self.radii)), {"distance": dist}

    def reset(self, rng) -> State:
        rng = self.check_rng(rng)
        rng, r1, r2, r3, r4 = jax.random.split(rng, 5)
        lo, hi = self.wrist_range
        qpos = jnp.stack(
            [
                jax.random.uniform(r1, (), minval=-jnp.pi, maxval=jnp.pi),
                jax.random.uniform(r2, (), minval=lo, maxval=hi),
            ]
        )
        ps = self.pipeline_init(qpos, jnp.zeros(self.sys.model.nv))
        angle = jax.random.uniform(r3, ()) * 2 * jnp.pi
        radius = jax.random.uniform(r4, (), minval=0.05, maxval=0.2)
        target = (radius * jnp.stack([jnp.sin(angle), jnp.cos(angle)])).astype(ps.q.dtype)
        zero = jnp.zeros((), ps.q.dtype)
        obs = self.observe(ps, ps.q, jnp.zeros(2, ps.q.dtype))  # Playground: the model's target
        metrics = {"distance": zero, "diverged": zero}
        return State(ps, obs, zero, zero, metrics, {"rng": rng, "target": target})

    def step(self, state: State, action) -> State:
        self.check_state(state, ("target",))
        action = self.check_action(action)
        target = state.info["target"]
        ps, qk, bad = self.advance(state.pipeline_state, action)
        reward, metrics = self.reward(ps, qk, target)
        reward = reward.astype(ps.q.dtype)
        done = bad.astype(reward.dtype)
        return state.replace(
            pipeline_state=ps,
            obs=self.observe(ps, qk, target),
            reward=reward,
            done=done,
            metrics={**state.metrics, **metrics, "diverged": done},
        )

"""DeepMind Control Suite tasks as MuJoCo Playground defines them
(``mujoco_playground._src.dm_control_suite``, ported from dm_control's ``dm_control.suite``):
the same MJCF models (bundled, Apache-2.0, ``xmls/dm_control_suite/README.md``), loaded by
:func:`jaxdyn.load_mjcf` and stepped by :mod:`jaxdyn.sim` with
:meth:`~jaxdyn.model.mjcf.MJCFModel.sim_config` (MuJoCo's ``Euler`` with ``eulerdamp`` off
is jaxdyn's ``"euler"``), and the same control and simulation periods, observations, rewards
(:func:`jaxdyn.envs.rewards.tolerance`), resets (the same PRNG key splits, so one key gives
Playground's initial state) and termination (``done`` only when the simulation diverges;
episodes end by time limit, 1000 control steps in Playground).

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
  two-link planar reacher; jaxdyn's own :class:`~jaxdyn.envs.Reacher` is a different task);
* :class:`PointMass`: ``point_mass_easy`` (a point mass moved by two tendon actuators);
* :class:`Swimmer`: ``swimmer_swimmer6`` (six links in a viscous fluid, MuJoCo's fluid forces);
* :class:`FishSwim`: ``fish_swim`` (a free-floating fish in a fluid);

with contact (:class:`ContactSuiteEnv`: dm_control's models, every contact the file declares
under :class:`jaxdyn.sim.Constraint`):

* :class:`CheetahRun`: ``cheetah_run``;
* :class:`WalkerMove` (``move_speed``): ``walker_stand``, ``walker_walk``, ``walker_run``;
* :class:`HopperTask` (``hopping``): ``hopper_stand``, ``hopper_hop``;
* :class:`FingerSpin`: ``finger_spin``; :class:`FingerTurn` (``target_radius``):
  ``finger_turn_easy``, ``finger_turn_hard``;
* :class:`BallInCup`: ``ball_in_cup_catch`` (a string: a spatial tendon with a length limit);
* :class:`SuiteHumanoid` (``move_speed``): ``dm_humanoid_stand``, ``dm_humanoid_walk``,
  ``dm_humanoid_run`` (dm_control's 21-joint humanoid on a free root; ``humanoid_stand`` is
  jaxdyn's own Unitree G1 task, :class:`~jaxdyn.envs.HumanoidStand`).

Their observations and rewards are dm_control's task functions (``get_observation``,
``get_reward``) of the MuJoCo quantities they read (``xpos``, ``xmat``, ``xipos``,
``subtreelinvel``, joint sensors, ``touch``), with Playground's timing above; ``qpos`` and
``qvel`` in observations are in MuJoCo's joint order (jaxdyn orders a branching tree's joints
by depth: :attr:`SuiteEnv.to_mujoco`). The cheetah, walker, hopper, ball in cup and humanoid
simulate MuJoCo's soft contact (``solref`` / ``solimp``, pyramidal cones) through MuJoCo's
Newton solve (:func:`soft_contact`), the physics of Playground's MJX environments: their
rollouts follow MuJoCo C's through contact (``tests/test_envs_suite_contact.py``), and
``contact="hard"`` gives jaxdyn's hard Coulomb contact instead
(``sim.Constraint(soft=False)``). The finger tasks too, on their file's elliptic
cones (MuJoCo's three-zone cone cost in the Newton solve), their spinner's ``frictionloss``
MuJoCo's dry-friction rows in the same solve (:class:`~jaxdyn.sim.FrictionLoss`; under
``contact="hard"`` jaxdyn's smooth Coulomb friction); the touch sensors read the simulated
contact forces.
The joint limits of the cheetah, walker, hopper, finger, cart-pole and reacher and the ball
in cup's string are MuJoCo's limit constraint
(:meth:`~jaxdyn.io.mjcf.MJCFModel.limit_constraints`: soft rows with ``solreflimit`` /
``solimplimit``, solved with the contacts): driven into their stops by their actuators they
follow MuJoCo C several times closer than under the default :class:`jaxdyn.sim.JointLimits`
or its per-joint spring-damper approximation :meth:`~jaxdyn.io.mjcf.MJCFModel.mujoco_limits`
(measured in ``docs/environments.md``).

The cart-pole and the reacher follow MuJoCo C to rounding, at their stops too, against MuJoCo
with its solve converged (the files' ``iterations="1"`` leaves MuJoCo's own limit force
unconverged at a stop: its rollout differs from its converged one as much as jaxdyn's
does). The model needs ``mujoco``
(``pip install 'jaxdyn[mjcf]'``) to be compiled when the environment is built.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from .. import sim as _sim
from ..algorithms.centroidal import center_of_mass_jacobian
from ..algorithms.kinematics import body_velocities, forward_kinematics, world_state
from ..interop.mujoco import Converter
from ..sim.contact import concat_frames, contact_frames
from .base import SimEnv, State
from .rewards import tolerance

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from jax import Array

    from ..model.model import Model
    from ..sim.contact import ContactFrames
    from ..sim.geoms import Geoms

__all__ = [
    "XML_DIR",
    "SuiteEnv",
    "CartpoleBalance",
    "PendulumSwingup",
    "AcrobotSwingup",
    "SuiteReacher",
    "PointMass",
    "Swimmer",
    "FishSwim",
    "ContactSuiteEnv",
    "CheetahRun",
    "WalkerMove",
    "HopperTask",
    "FingerSpin",
    "FingerTurn",
    "BallInCup",
    "SuiteHumanoid",
]

#: the bundled models
XML_DIR = os.path.join(os.path.dirname(__file__), "xmls", "dm_control_suite")


class SuiteEnv(SimEnv):
    """A suite task on a bundled MJCF model: ``ctrl_dt`` control period in
    ``ctrl_dt / sim_dt`` simulator steps of ``sim_dt`` (Playground's ``n_substeps``);
    ``action`` is MuJoCo's ``ctrl`` (clamped to ``ctrlrange`` by the actuator).

    Actuators with activation dynamics (``dyntype`` ``filter``, ``filterexact``,
    ``integrator``: :class:`jaxdyn.sim.GainBias`) keep their activations in the simulator
    state's ``act`` (MuJoCo's ``act``), carried through ``reset`` (zeros, or a keyframe's
    ``act``: :meth:`keyframe_state`) and every ``step``."""

    xml: str = ""
    #: ``ignore=`` of :func:`jaxdyn.load_mjcf` for the bundled model
    ignore: tuple = ()
    #: the contact model of every contact of the file (``None``: contact off, as the
    #: contact-free models disable it)
    contact = None
    #: the integrator (``None``: the file's, :meth:`~jaxdyn.io.mjcf.MJCFModel.sim_config`)
    integrator = None
    #: ``ignore=`` of :meth:`~jaxdyn.io.mjcf.MJCFModel.sim_config` (each with its reason in the
    #: task's docstring)
    sim_ignore: tuple = ()
    #: joint limits: ``"constraint"``, MuJoCo's limit constraint (soft rows solved with the
    #: contacts, :meth:`~jaxdyn.io.mjcf.MJCFModel.limit_constraints`), ``True``, its
    #: per-joint spring-damper approximation
    #: (:meth:`~jaxdyn.io.mjcf.MJCFModel.mujoco_limits`), or ``False``, the default
    #: :class:`jaxdyn.sim.JointLimits` spring-damper (named, ``limits="spring"``: the default of
    #: ``sim_config`` under MuJoCo's soft contact is the limit rows)
    mujoco_limits: bool | str = False
    #: with ``mujoco_limits="constraint"``: the limit rows' own solver steps where the task has
    #: no constraint contact (``None``: :class:`jaxdyn.sim.LimitConstraints`' default)
    limit_iterations: int | None = None

    if TYPE_CHECKING:  # each task defines them, SuiteReacher and ContactSuiteEnv with their own
        # arguments after ps (their own step calls them)

        def observe(self, ps: _sim.State, *args: Any) -> Array: ...

        def reward(self, ps: _sim.State, *args: Any) -> tuple[Array, dict[str, Array]]: ...

    def __init__(self, *, ctrl_dt: float, sim_dt: float) -> None:
        from ..io.mjcf import load_mjcf

        n = int(round(ctrl_dt / sim_dt))
        if n < 1 or abs(n * sim_dt - ctrl_dt) > 1e-12 * ctrl_dt:
            raise ValueError(
                f"{type(self).__name__}: ctrl_dt={ctrl_dt} must be a multiple of sim_dt={sim_dt}"
            )
        scene = load_mjcf(os.path.join(XML_DIR, self.xml), ignore=self.ignore)
        self.scene = scene
        m: Any = scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        # one-DoF joints (q and v have the same layout) or a free root (q is qpos reordered,
        # v maps to qvel through the free joint's rotation: qvel); jaxdyn orders a branching
        # tree's joints by depth: q = qpos[from_mujoco], qpos = q[to_mujoco]
        one_dof = scene.model.nq == scene.model.nv == m.nq == m.nv == m.njnt
        if not (one_dof or self.free_root):
            raise ValueError(  # pragma: no cover - a property of the bundled files
                f"{type(self).__name__}: unexpected joint layout in {self.xml}"
            )
        self.converter = Converter(scene.model, m)
        self.from_mujoco = self.converter.q_index
        self.to_mujoco = np.argsort(self.from_mujoco)
        if self.mujoco_order and np.any(self.from_mujoco != np.arange(m.nq)):
            raise ValueError(  # pragma: no cover - a property of the bundled files
                f"{type(self).__name__}: {self.xml} is not a chain in MuJoCo's joint order"
            )
        model = self.adjust_model(scene.model)
        kw: dict[str, Any] = {} if self.integrator is None else {"integrator": self.integrator}
        if self.mujoco_limits == "constraint":
            kw["limits"] = "constraint"
            if self.limit_iterations is not None:
                kw["limit_constraints"] = scene.limit_constraints(iterations=self.limit_iterations)
        elif self.mujoco_limits:
            kw["limits"] = scene.mujoco_limits()
        else:  # named: sim_config's default is MuJoCo's limit rows under MuJoCo's contact
            kw["limits"] = "spring"
        # MuJoCo's dry-friction rows where the primal Newton solve takes them; named, the
        # smooth friction elsewhere (the finger's hard contact), as before sim_config's default
        # became the rows (it would warn there)
        primal = _sim.contact.uses_primal_newton(self.contact)
        kw["friction_loss"] = "constraint" if primal else "smooth"
        cfg = scene.sim_config(self.contact, ignore=self.sim_ignore, dt=sim_dt, **kw)
        super().__init__(model, cfg, n_frames=n)

    #: whether the task reads ``q`` / ``v`` as ``qpos`` / ``qvel`` (a chain: the same order)
    mujoco_order = True
    #: whether the model's root is a free joint (:meth:`qvel` maps velocities)
    free_root = False

    def qpos(self, q: Array) -> Array:
        """MuJoCo's ``qpos`` (or, without a free root, ``qvel``: the same layout) of jaxdyn's
        ``q`` (``v``)."""
        return q[..., self.to_mujoco]

    def q_of(self, qpos: Array) -> Array:
        """jaxdyn's ``q`` (or, without a free root, ``v``) of MuJoCo's ``qpos`` (``qvel``)."""
        return qpos[..., self.from_mujoco]

    def qvel(self, q: Array, v: Array) -> Array:
        """MuJoCo's ``qvel`` of jaxdyn's ``v`` at ``q`` (a free root's linear velocity in world
        axes: :meth:`jaxdyn.interop.mujoco.Converter.v_to_mujoco`)."""
        if not self.free_root:
            return self.qpos(v)
        return self.converter.v_to_mujoco(q, v)

    def v_of(self, q: Array, qvel: Array) -> Array:
        """jaxdyn's ``v`` at ``q`` of MuJoCo's ``qvel``."""
        if not self.free_root:
            return self.q_of(qvel)
        return self.converter.v_from_mujoco(q, qvel)

    def adjust_model(self, model: Model) -> Model:
        """The model the task simulates (the task's changes to the file's, if any)."""
        return model

    def keyframe_state(self, name: str) -> _sim.State:
        """The simulator state of the file's ``<key name=...>`` at time 0: its ``qpos``,
        ``qvel`` and, with activation dynamics, ``act`` (MuJoCo's ``mj_resetDataKeyframe``)."""
        if name not in self.scene.keyframes:
            raise ValueError(
                f"{type(self).__name__}: {self.xml} has no keyframe {name!r}; it has "
                f"{sorted(self.scene.keyframes)}"
            )
        q, v = self.scene.keyframes[name]
        act = self.scene.keyframe_act.get(name) if self.act_size else None
        return self.pipeline_init(q, v, act)

    @property
    def action_size(self) -> int:
        actuator: Any = self.sys.cfg.actuator  # SimConfig types it object
        return actuator.size(self.sys.model)

    def frames(self, q: Array, names: Sequence[str]) -> tuple[Array, Array]:
        """World rotations ``(k, 3, 3)`` and positions ``(k, 3)`` of the named frames (bodies:
        MuJoCo's ``xmat`` / ``xpos``; sites by their frame name)."""
        fk = forward_kinematics(self.sys.model, q).frame
        idx = np.asarray([self.sys.model.frame_index(n) for n in names])
        return fk.R[idx], fk.p[idx]

    def advance(self, ps: _sim.State, ctrl: Array) -> tuple[_sim.State, _sim.State, Array]:
        """One control period (as :meth:`SimEnv.pipeline_step`) and the state at the start of
        its last simulator step: ``(next_state, pk, diverged)`` (``pk.q`` is the ``qk`` of the
        module docs)."""
        return self.advance_info(ps, ctrl)[:3]

    def advance_info(
        self, ps: _sim.State, ctrl: Array, forces: Array | None = None
    ) -> tuple[_sim.State, _sim.State, Array, dict[str, Array]]:
        """:meth:`advance` and the contact report of its frames, as
        :meth:`SimEnv.pipeline_step_info`: ``(next_state, pk, diverged, info)``.
        ``forces`` (zeros ``(nc, 3)``, :meth:`ContactSuiteEnv.zero_forces`):
        ``info["contact_forces"]`` too, the contact forces of the last simulator step, from
        ``pk`` under ``ctrl`` (:func:`jaxdyn.sim.step_info`'s ``forces``: what
        :func:`jaxdyn.sim.contact_forces` gives at ``pk``, without solving that step's
        contacts a second time)."""
        model, cfg = self.sys.model, self.sys.cfg
        vmax = self.divergence_speed

        want = forces is not None

        def frame(carry, _):
            s, _, ok, f = carry
            n, info = _sim.step_info(model, s, ctrl, cfg, forces=want)
            good = jnp.all(jnp.isfinite(n.q)) & jnp.all(jnp.abs(n.v) < vmax)
            n = jax.tree_util.tree_map(lambda a, b: jnp.where(good, a, b), n, s)
            if want:  # the last frame's (carried, not stacked over the frames)
                f = info.pop("contact_forces")
            return (n, s, ok & good, f), info

        init = (ps, ps, jnp.asarray(True), forces)
        (nxt, pk, ok, f), infos = jax.lax.scan(frame, init, None, length=self.n_frames)
        bad = ~ok
        nxt = jax.tree_util.tree_map(lambda a, b: jnp.where(bad, b, a), nxt, ps)
        pk = jax.tree_util.tree_map(lambda a, b: jnp.where(bad, b, a), pk, ps)
        info = self.period_info(infos, nxt.q.dtype)
        if f is not None:
            info["contact_forces"] = f
        return nxt, pk, bad, info

    def step(self, state: State, action: Array) -> State:
        return self._period_step(state, action, target=False)

    def target_step(self, state: State, action: Array, observe_state: bool = False) -> State:
        """:meth:`step` of a task whose target is drawn at reset and carried in
        ``info["target"]`` (the reacher, the swimmer, the fish): ``reward(ps, q, target)`` and
        ``observe(ps, q, target)`` at the state before the period's last simulator step (its
        whole :class:`jaxdyn.sim.State` with ``observe_state``)."""
        return self._period_step(state, action, target=True, observe_state=observe_state)

    def _period_step(self, state, action, target: bool, observe_state: bool = False) -> State:
        """One control period: ``reward(ps, q, action)`` and ``observe(ps, q)``, or with
        ``target`` ``reward(ps, q, target)`` and ``observe(ps, q or the state, target)``."""
        self.check_state(state, ("target",) if target else ())
        action = self.check_action(action)
        extra = (state.info["target"],) if target else ()
        ps, pk, bad = self.advance(state.pipeline_state, action)
        reward, metrics = self.reward(ps, pk.q, *(extra or (action,)))
        reward = reward.astype(ps.q.dtype)
        done = bad.astype(reward.dtype)
        return state.replace(
            pipeline_state=ps,
            obs=self.observe(ps, pk if observe_state else pk.q, *extra),
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
    # the rail's ends: MuJoCo's limit constraint (docs/environments.md: the cart follows MuJoCo
    # C's into its stop, the default spring-damper 0.13 m apart); one row, which the first
    # projected-gradient step solves exactly
    mujoco_limits = "constraint"
    limit_iterations = 1
    CART_RANGE = (-0.25, 0.25)
    ANGLE_COSINE_RANGE = (0.995, 1.0)

    def __init__(
        self,
        swing_up: bool = False,
        sparse: bool = False,
        *,
        ctrl_dt: float = 0.01,
        sim_dt: float = 0.01,
    ) -> None:
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

    def observe(self, ps: _sim.State, qk: Array) -> Array:
        R, _ = self.frames(qk, ["pole_1"])
        return jnp.concatenate([ps.q[:1], R[:, 2, 2], R[:, 0, 2], ps.v])

    def reward(self, ps: _sim.State, qk: Array, action: Array) -> tuple[Array, dict[str, Array]]:
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

    def reset(self, rng: Array) -> State:
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

    def __init__(self, *, ctrl_dt: float = 0.02, sim_dt: float = 0.01) -> None:
        super().__init__(ctrl_dt=ctrl_dt, sim_dt=sim_dt)

    def observe(self, ps: _sim.State, qk: Array) -> Array:
        R, _ = self.frames(qk, ["pole"])
        return jnp.stack([R[0, 0, 2], R[0, 2, 2], ps.v[0]])

    def reward(self, ps: _sim.State, qk: Array, action: Array) -> tuple[Array, dict[str, Array]]:
        R, _ = self.frames(qk, ["pole"])
        return tolerance(R[0, 2, 2], (self.COSINE_BOUND, 1.0)), {}

    def reset(self, rng: Array) -> State:
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

    def __init__(
        self, sparse: bool = False, *, ctrl_dt: float = 0.01, sim_dt: float = 0.01
    ) -> None:
        super().__init__(ctrl_dt=ctrl_dt, sim_dt=sim_dt)
        self.sparse = bool(sparse)
        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        self.target_radius = float(m.site_size[m.site("target").id, 0])
        self.site_names = [self.scene.site_frames["target"], self.scene.site_frames["tip"]]

    def observe(self, ps: _sim.State, qk: Array) -> Array:
        R, _ = self.frames(qk, ["upper_arm", "lower_arm"])
        return jnp.concatenate([R[:, 0, 2], R[:, 2, 2], ps.v])

    def distance(self, q: Array) -> Array:
        _, p = self.frames(q, self.site_names)
        return jnp.linalg.norm(p[0] - p[1])

    def reward(self, ps: _sim.State, qk: Array, action: Array) -> tuple[Array, dict[str, Array]]:
        dist = self.distance(qk)
        margin = 0.0 if self.sparse else 1.0
        return tolerance(dist, (0.0, self.target_radius), margin=margin), {"distance": dist}

    def reset(self, rng: Array) -> State:
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
    # the wrist's stops: MuJoCo's limit constraint (docs/environments.md: under the default
    # spring-damper the light wrist driven into its stop diverges); one row, solved exactly by
    # the first projected-gradient step
    mujoco_limits = "constraint"
    limit_iterations = 1
    BIG_TARGET, SMALL_TARGET = 0.05, 0.015

    def __init__(
        self, target_size: float = BIG_TARGET, *, ctrl_dt: float = 0.02, sim_dt: float = 0.005
    ) -> None:
        super().__init__(ctrl_dt=ctrl_dt, sim_dt=sim_dt)
        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        self.target_size = float(target_size)
        self.radii = self.target_size + float(m.geom_size[m.geom("finger").id, 0])
        w = m.joint("wrist").id
        self.wrist_range = tuple(float(x) for x in m.jnt_range[w])

    def observe(self, ps: _sim.State, qk: Array, target: Array) -> Array:
        _, p = self.frames(qk, ["finger"])
        return jnp.concatenate([ps.q, target - p[0, :2], ps.v])

    def reward(self, ps: _sim.State, qk: Array, target: Array) -> tuple[Array, dict[str, Array]]:
        _, p = self.frames(qk, ["finger"])
        dist = jnp.linalg.norm(target - p[0, :2])
        return tolerance(dist, (0.0, self.radii)), {"distance": dist}

    def reset(self, rng: Array) -> State:
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

    def step(self, state: State, action: Array) -> State:
        return self.target_step(state, action)


class PointMass(SuiteEnv):
    """Planar point mass, easy (dm_control ``point_mass`` ``easy``; Playground ``PointMass``):
    two fixed tendons, one per limited slide joint (``root_x``, ``root_y``, damped), each driven
    by a motor (``gear=.1``, ``ctrl`` in ``[-1, 1]``), bring the mass to the target at the
    centre of a walled square.

    **Observation (4):** ``qpos`` (2), ``qvel`` (2).
    **Reward:** ``near_target * small_control`` with ``near_target = tolerance(|target -
    mass|, (0, target_size), margin=target_size)`` (the target geom's radius, ``.015``) and
    ``small_control = (4 + mean(tolerance(a, margin=1, value_at_margin=0,
    sigmoid="quadratic"))) / 5``. **Reset:** each joint ``~ U`` over its range, at rest (the
    easy task: fixed actuator directions, the target fixed at the centre).
    **Periods:** control and simulation 0.02 s (the file's ``timestep``; Playground's 1000
    control steps are dm_control's 20 s time limit). Playground's ``done`` (``qpos`` or
    ``qvel`` not a number) is the divergence of the module docs; nothing else differs.

    The file (Playground's: dm_control's with ``iterations`` / ``ls_iterations`` reduced and
    ``eulerdamp`` disabled) disables contact, and MuJoCo computes none: the mass's sphere rests
    on the ground plane and overlaps the target, and the joints' ranges bring its surface to the
    walls' planes at the stops, past which the soft stops let it go; none of these touches
    is simulated by MuJoCo or here (contact off). The stops are MuJoCo's limit rows
    (``mujoco_limits = "constraint"``).
    """

    xml = "point_mass.xml"
    # the joints' stops: MuJoCo's limit constraint; the two rows act on the two slides of one
    # body (orthogonal axes: a diagonal mass matrix), which the first projected-gradient step
    # solves exactly
    mujoco_limits = "constraint"
    limit_iterations = 1
    _METRICS = ("reward/near_target", "reward/small_control")

    def __init__(self, *, ctrl_dt: float = 0.02, sim_dt: float = 0.02) -> None:
        super().__init__(ctrl_dt=ctrl_dt, sim_dt=sim_dt)
        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        target, mass = m.geom("target"), m.geom("pointmass")
        if m.geom_bodyid[target.id] != 0 or np.any(m.geom_pos[mass.id] != 0):
            raise ValueError(  # pragma: no cover - a property of the bundled file
                f"{type(self).__name__}: {self.xml}: expected the target on the world body "
                "and the mass's geom at its body's origin"
            )
        self.target_size = float(m.geom_size[target.id, 0])
        self.target_pos = np.asarray(m.geom_pos[target.id], float)
        self.lowers = np.asarray(m.jnt_range[:, 0], float)
        self.uppers = np.asarray(m.jnt_range[:, 1], float)

    def observe(self, ps: _sim.State, qk: Array) -> Array:
        """``qpos`` and ``qvel`` after the step (dm_control's ``position``, ``velocity``)."""
        return jnp.concatenate([ps.q, ps.v])

    def distance(self, q: Array) -> Array:
        """The distance from the mass to the target at ``q`` (dm_control's
        ``mass_to_target_dist``, between the geoms' centres)."""
        _, p = self.frames(q, ["pointmass"])
        return jnp.linalg.norm(jnp.asarray(self.target_pos, p.dtype) - p[0])

    def reward(self, ps: _sim.State, qk: Array, action: Array) -> tuple[Array, dict[str, Array]]:
        """``(reward, metrics)`` under ``action`` (``qk``: the configuration of the derived
        quantities, see the module docs)."""
        size = self.target_size
        near_target = tolerance(self.distance(qk), (0.0, size), margin=size)
        control = tolerance(action, margin=1, value_at_margin=0, sigmoid="quadratic")
        small_control = (4 + jnp.mean(control)) / 5
        return near_target * small_control, {
            "reward/near_target": near_target,
            "reward/small_control": small_control,
        }

    def reset(self, rng: Array) -> State:
        rng = self.check_rng(rng)
        rng, r1 = jax.random.split(rng, 2)
        qpos = jax.random.uniform(r1, (self.sys.model.nq,), minval=self.lowers, maxval=self.uppers)
        ps = self.pipeline_init(qpos, jnp.zeros(self.sys.model.nv))
        zero = jnp.zeros((), ps.q.dtype)
        metrics = {k: zero for k in self._METRICS} | {"diverged": zero}
        return State(ps, self.observe(ps, ps.q), zero, zero, metrics, {"rng": rng})


class Swimmer(SuiteEnv):
    """Planar swimmer, six links (dm_control ``swimmer`` ``swimmer6``; Playground
    ``SwimmerSwimmer6``): a head on the plane's slides and hinge (``rootx``, ``rooty``,
    ``rootz``) and a chain of five segments, each hinge (limited to ``360 / 6`` degrees) driven
    by a motor (``gear=5e-4``, ``ctrl`` in ``[-1, 1]``), swims in a viscous fluid
    (``density=3000``: MuJoCo's inertia-based fluid forces, :class:`jaxdyn.sim.Fluid`) to bring
    its nose to a target.

    **Observation (25):** the five hinges' angles (``joints``), the target minus the nose in
    the head's frame, ``x`` and ``y`` (``to_target``), and each body's local ``vx``, ``vy``,
    ``wz`` (``body_velocities``: the head's and the segments' velocimeters and gyros at their
    sites, MuJoCo's ``sensordata``), dm_control's and Playground's order.
    **Reward:** ``tolerance(|target - nose|, (0, target_size), margin=5 * target_size,
    sigmoid="long_tail")`` (the target geom's radius, ``.1``).
    **Reset:** ``rootz ~ U(-pi, pi)``, each hinge ``~ U`` over its range, at rest at the
    origin; the target ``~ U`` over a square of half-side ``.3`` (probability ``.2``) or ``2``,
    in ``info["target"]`` (a mocap body in Playground's model, fixed here: the target only
    enters the observation and the reward). As in Playground, the observation at reset still
    sees the target at the model's position (Playground moves the mocap body after
    ``mjx.forward``; dm_control moves its target geom before the first observation).
    **Periods:** control 0.03 s, simulation 0.003 s (the file's ``timestep``; dm_control's
    0.002 s); Playground's 1000 control steps are dm_control's 30 s time limit. Playground's
    ``done`` (``qpos`` or ``qvel`` not a number) is the divergence of the module docs.

    The file is generated from Playground's ``swimmer.xml`` by Playground's ``_make_model``
    (dm_control's ``get_model_and_assets``, the same chain, sites, motors and sensors); the base
    file is dm_control's with ``iterations`` / ``ls_iterations`` reduced, ``eulerdamp``
    disabled, its ``timestep`` changed and the target a mocap body
    (``xmls/dm_control_suite/README.md``). The hinges' stops are MuJoCo's limit rows
    (``mujoco_limits = "constraint"``). Contact is off.
    """

    xml = "swimmer6.xml"
    ignore = ("mocap",)
    # the hinges' stops: MuJoCo's limit constraint (five rows on one chain, solved together)
    mujoco_limits = "constraint"
    N_LINKS = 6
    _METRICS = ("distance",)

    def __init__(self, *, ctrl_dt: float = 0.03, sim_dt: float = 0.003) -> None:
        super().__init__(ctrl_dt=ctrl_dt, sim_dt=sim_dt)
        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        target, nose, head = m.geom("target"), m.geom("nose"), m.body("head")
        if m.body_mocapid[m.geom_bodyid[target.id]] < 0 or np.any(m.geom_pos[target.id] != 0):
            raise ValueError(  # pragma: no cover - a property of the bundled file
                f"{type(self).__name__}: {self.xml}: expected the target at a mocap body's origin"
            )
        if m.geom_bodyid[nose.id] != head.id:
            raise ValueError(  # pragma: no cover - a property of the bundled file
                f"{type(self).__name__}: {self.xml}: expected the nose on the head"
            )
        self.target_size = float(m.geom_size[target.id, 0])
        #: the target's position in the model (Playground's observation at reset)
        self.model_target = np.asarray(m.body_pos[m.geom_bodyid[target.id]], float)
        self.nose_pos = np.asarray(m.geom_pos[nose.id], float)
        self.lowers = np.asarray(m.jnt_range[3:, 0], float)
        self.uppers = np.asarray(m.jnt_range[3:, 1], float)
        # the velocimeter / gyro sites, in sensordata's order: the head's, then the segments'
        sites = ["head", *(f"site_{i}" for i in range(self.N_LINKS - 1))]
        self.sensor_frames = [self.scene.site_frames[s] for s in sites]
        parent = self.sys.model.topo.frame_parent
        self.sensor_bodies = np.asarray(
            [int(parent[self.sys.model.frame_index(f)]) for f in self.sensor_frames]
        )

    def to_target(self, q: Array, target: Array) -> Array:
        """The target minus the nose in the head's frame, ``x`` and ``y`` (dm_control's
        ``nose_to_target``) at ``q``; ``target`` ``(3,)``."""
        R, p = self.frames(q, ["head"])
        nose = R[0] @ jnp.asarray(self.nose_pos, p.dtype) + p[0]
        return ((target - nose) @ R[0])[:2]

    def body_velocities(self, pk: _sim.State) -> Array:
        """Each body's ``vx``, ``vy``, ``wz`` at its site, in the site's frame (dm_control's
        ``body_velocities``: velocimeter and gyro readings), at ``pk``."""
        model = self.sys.model
        ws = world_state(model, pk.q)  # no floating base: the world state is not centred
        vb, _ = body_velocities(model, ws, pk.v)
        R, p = self.frames(pk.q, self.sensor_frames)
        twist = vb[self.sensor_bodies]  # world axes, about the world origin: [w; v]
        w = twist[:, :3]
        v = twist[:, 3:] + jnp.cross(w, p)
        local_v = jnp.einsum("kji,kj->ki", R, v)
        local_w = jnp.einsum("kji,kj->ki", R, w)
        return jnp.concatenate([local_v[:, :2], local_w[:, 2:]], -1).ravel()

    def target3(self, target: Array) -> Array:
        """The target's position ``(3,)`` of its ``x`` and ``y`` (the model's height)."""
        return jnp.concatenate([target, jnp.asarray(self.model_target[2:], target.dtype)])

    def observe(self, ps: _sim.State, pk: _sim.State, target: Array) -> Array:
        """The hinges' angles after the step, the target in the head's frame and the bodies'
        velocities at ``pk`` (the state before the last simulator step, module docs)."""
        to_target = self.to_target(pk.q, self.target3(target))
        return jnp.concatenate([ps.q[3:], to_target, self.body_velocities(pk)])

    def reward(self, ps: _sim.State, qk: Array, target: Array) -> tuple[Array, dict[str, Array]]:
        """``(reward, metrics)`` (``qk``: the configuration of the derived quantities)."""
        dist = jnp.linalg.norm(self.to_target(qk, self.target3(target)))
        size = self.target_size
        reward = tolerance(dist, (0.0, size), margin=5 * size, sigmoid="long_tail")
        return reward, {"distance": dist}

    def reset(self, rng: Array) -> State:
        rng = self.check_rng(rng)
        rng, r1, r2, r3, r4 = jax.random.split(rng, 5)
        nq = self.sys.model.nq
        qpos = jnp.zeros(nq)
        qpos = qpos.at[2].set(jax.random.uniform(r1, (), minval=-jnp.pi, maxval=jnp.pi))
        hinges = jax.random.uniform(r2, (nq - 3,), minval=self.lowers, maxval=self.uppers)
        qpos = qpos.at[3:].set(hinges)
        ps = self.pipeline_init(qpos, jnp.zeros(self.sys.model.nv))
        box = jnp.where(jax.random.bernoulli(r3, 0.2), 0.3, 2.0)
        target = jax.random.uniform(r4, (2,), minval=-box, maxval=box).astype(ps.q.dtype)
        model_target = jnp.asarray(self.model_target[:2], ps.q.dtype)
        obs = self.observe(ps, ps, model_target)  # Playground: the model's target
        zero = jnp.zeros((), ps.q.dtype)
        metrics = {k: zero for k in self._METRICS} | {"diverged": zero}
        return State(ps, obs, zero, zero, metrics, {"rng": rng, "target": target})

    def step(self, state: State, action: Array) -> State:
        return self.target_step(state, action, observe_state=True)


# ---------------------------------------------------------------------- tasks with contact
class ContactSuiteEnv(SuiteEnv):
    """A suite task whose model touches the floor or other bodies: every contact the file
    declares (the loader's primitives against the floor plane and its geom pairs, with MuJoCo's
    filters and friction) under :attr:`contact`, a :class:`~jaxdyn.sim.Constraint`: MuJoCo's
    soft contact through its Newton solve for the cheetah, walker, hopper, ball in cup and
    humanoid, and on elliptic cones for the finger (:func:`soft_contact`; ``contact="hard"``:
    their :attr:`CONTACT_MODELS`' other entry, jaxdyn's hard Coulomb contact on the Delassus
    matrix).

    Observations and rewards are functions of the state reached ``ps`` and of the
    :meth:`sensors` dict, MuJoCo's ``sensordata`` and derived quantities (``xpos``, ``xmat``,
    ``xipos``, ``subtreelinvel``, ``touch``) of the state ``pk`` at the start of the last
    simulator step under the action (see the module docs: Playground's ``mjx.step``).

    ``info`` carries the constraint solve's report (``contact_residual``,
    ``contacts_dropped``: :meth:`jaxdyn.envs.SimEnv.pipeline_step_info`) after a reset by
    :meth:`episode_start`.

    Options of the contact solve, every contact task's keywords (``None``, the default: the
    task's :attr:`contact` as it is), which make the step cheaper at some cost in accuracy
    (``docs/environments.md``, "Step cost against MJX", measures both against MJX with
    Playground's cut solver; ``benchmarks/suite_step.py``):

    * ``contact``: the contact model by name, ``None`` (the default) the task's
      :attr:`contact`; the cheetah, walker, hopper, ball in cup and humanoid take ``"soft"``
      (their default, :func:`soft_contact`) and ``"hard"`` (``HARD_CONTACT``, their default
      before), the options below then changing the named model;
    * ``solver_iterations``: the accelerated projected gradient steps of each simulator step's
      solve of the contacts and limit rows (:func:`jaxdyn.sim.solve_cone_complementarity`;
      :class:`~jaxdyn.sim.Constraint`'s ``iterations``, 100 by default), a fixed count whose
      cost is most of the step's (the soft contact's Newton solve: its most Newton steps);
    * ``max_contacts``: solve over the ``k`` contact slots of least distance only
      (:class:`~jaxdyn.sim.Constraint`'s ``max_contacts``; the cheetah has 54 slots, the
      hopper 30, the walker 14, of which a few touch at a time): a smaller problem, the same
      solution while at most ``k`` slots hold a contact (``info["contacts_dropped"]`` counts
      those left out), though the unconverged iterates differ (their step size is taken
      over the slots solved). The cheetah, walker and hopper solve over their
      :attr:`MAX_CONTACTS` (6) closest slots by default (:attr:`contact`), as Playground's
      copies of their files cap MJX's contacts (``max_contact_points``: cheetah and hopper 6,
      walker 4); a ``k`` of at least the slots solves over every slot;
    * ``warm_start``: start each solve from the previous simulator step's impulses, carried
      in the state (``pipeline_state.impulses``, zeros after a reset;
      :class:`~jaxdyn.sim.Constraint`'s ``warm_start``; the soft contact's Newton solve
      carries the previous solve's acceleration there, MuJoCo's ``qacc_warmstart``);
    * ``solver_tolerance``: stop the iterations once a step moves the impulses by at most
      this fraction of their largest (:class:`~jaxdyn.sim.Constraint`'s ``tolerance``;
      ``solver_iterations`` is then the most that run), which pays with the warm start;
    * ``solver_polish``: after the iterations, the active-set step on the joint-limit rows
      (their exact impulses given the contacts', kept where it lowers the residual;
      :class:`~jaxdyn.sim.Constraint`'s ``polish``); ``False`` leaves the limit rows at the
      iterations' impulses, one dense step fewer per simulator step.

    ``contact_report`` (``True``, the default): the state's ``info`` carries the solve's
    report (``contact_residual``, ``contacts_dropped``); ``False`` leaves it out, and with it
    the per-simulator-step fixed-point residual (:func:`jaxdyn.sim.step_info`), a diagnostic
    that a training loop carries in its state but never reads: the same observations, rewards
    and simulator states to the bit, a cheaper step (``docs/environments.md``, "Side by side
    with MuJoCo Playground")."""

    contact = _sim.Constraint(soft=False)
    #: whether ``info`` carries the contact solve's report (the ``contact_report`` keyword)
    contact_report: bool = True
    #: the default contact cap of the planar tasks (cheetah, walker, hopper): the most slots
    #: that touch or close within a simulator step seen in their random-action rollouts was
    #: 3 (cheetah) and 5 (walker, hopper), 32 resets x 300 control steps each, under the hard
    #: contact (docs/environments.md; under the soft one the walker's sinking feet close a 7th
    #: now and then); Playground caps MJX's at 6, 4 and 6 (``max_contact_points``)
    MAX_CONTACTS = 6
    #: the most solver steps of the warm-started hopper per simulator step (the cold default
    #: is 100; the walker's :attr:`WalkerMove.SOLVER_ITERATIONS` is 30): on the walker the
    #: batch's trip count under ``vmap`` (its slowest solve) was about 55 while the mean solve
    #: stopped after about 16; the rest of a slow solve continues from the warm start
    SOLVER_ITERATIONS = 40
    #: the most Newton steps per simulator step of the tasks' soft contact
    #: (:func:`soft_contact`; MuJoCo C's converged solve took at most 9 on the walker)
    NEWTON_ITERATIONS = 20
    #: the Newton solve's stopping tolerance (MuJoCo's and MJX's default ``opt.tolerance``)
    NEWTON_TOLERANCE = 1e-8
    #: the contact models that the ``contact=`` keyword names (the cheetah, walker, hopper,
    #: ball in cup and humanoid: ``"soft"``, their default, and ``"hard"``; empty: the task has
    #: one, :attr:`contact`)
    CONTACT_MODELS: dict[str, _sim.Constraint] = {}
    #: ``ignore=`` of :meth:`~jaxdyn.io.mjcf.MJCFModel.sim_config` added to
    #: :attr:`~SuiteEnv.sim_ignore` under a hard contact model (``soft=False``), which has no
    #: counterpart for what it names (the humanoid's ``solimp``)
    hard_sim_ignore: tuple = ()
    #: (the configuration, its contact slot count) of the last contact_frames traced
    _slots: tuple | None = None
    mujoco_order = False
    #: MuJoCo ``<touch>`` sensors of the observation, by site name
    touch_sites: tuple = ()
    #: the metric keys of :meth:`reward` (the same after ``reset`` and ``step``)
    metric_keys: tuple = ()

    #: ``"random"``: dm_control's randomised reset; ``"qpos0"``: the model's ``qpos0`` at
    #: rest, Playground's reset of the tasks that take it (:class:`BallInCup`,
    #: :class:`SuiteHumanoid`)
    reset_mode = "random"
    #: the draws of :meth:`first_free_draw` (set by the tasks that use it)
    reset_tries: int
    #: the joint ranges of :meth:`planar_reset` (set by the tasks that use it)
    lowers: np.ndarray
    uppers: np.ndarray

    def set_reset_mode(self, reset: str) -> None:
        """Check and keep the ``reset=`` argument of a task that offers Playground's reset."""
        if reset not in ("random", "qpos0"):
            raise ValueError(
                f"{type(self).__name__}: reset must be 'random' (dm_control's) or 'qpos0' "
                f"(Playground's), got {reset!r}"
            )
        self.reset_mode = reset

    def qpos0_pose(self) -> Array:
        """The model's ``qpos0`` in jaxdyn's order."""
        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        return self.q_of(jnp.asarray(m.qpos0, self.sys.model.mass.dtype))

    def set_reset_tries(self, reset_tries: int) -> None:
        """Check and keep the ``reset_tries=`` argument of a task whose reset rejects
        penetrating draws (:meth:`first_free_draw`)."""
        n = reset_tries
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(
                f"{type(self).__name__}: reset_tries must be an integer >= 1, got {n!r}"
            )
        self.reset_tries = int(n)

    def first_free_draw(self, rng: Array, draw: Callable[[Array], Array]) -> Array:
        """``draw(key)`` (a configuration in jaxdyn's order) for ``rng`` and, when
        ``self.reset_tries > 1``, for ``reset_tries - 1`` further keys: the first whose bodies
        touch nothing (every contact slot's distance above 0: all kinematics, one batch), the
        first draw if none is free. dm_control's rejection loop (``while physics.data.ncon >
        0``: redraw) with a fixed number of candidates, so that it traces under ``jax.jit``
        and ``jax.vmap``; a draw that is free is the one ``draw(rng)`` gives, so where the
        first candidate is free the reset is that of ``draw`` alone."""
        return self.free_draw_frames(rng, draw)[0]

    def free_draw_frames(
        self, rng: Array, draw: Callable[[Array], Array]
    ) -> tuple[Array, ContactFrames]:
        """:meth:`first_free_draw` and the :meth:`contact_frames` of the configuration it
        picks (at rest), from the batch that checked the candidates (the contact geometry
        traced once: a reset's touch sensors read them, :meth:`touch`)."""
        keys = rng[None]
        if self.reset_tries > 1:
            more = jax.random.split(jax.random.fold_in(rng, 1), self.reset_tries - 1)
            keys = jnp.concatenate([keys, more])
        return self.first_free(jax.vmap(draw)(keys))

    def first_free(self, qs: Array) -> tuple[Array, ContactFrames]:
        """The first of the candidate configurations ``qs (k, nq)`` (jaxdyn's order) whose
        bodies touch nothing (every contact slot's distance above 0), the first if none is,
        and its :meth:`contact_frames` at rest: all kinematics, one batch."""
        qs = qs.astype(self.sys.model.mass.dtype)
        zero_v = jnp.zeros(self.sys.model.nv, qs.dtype)
        frames = jax.vmap(lambda q: self.contact_frames(_sim.State(q, zero_v)))(qs)
        i = jnp.argmax(jnp.all(frames.distance > 0, -1))
        return qs[i], jax.tree_util.tree_map(lambda x: x[i], frames)

    def reset_pose(self, rng: Array, draw: Callable[[Array], Array]) -> Array:
        """The reset's configuration of a task that offers Playground's reset
        (:meth:`set_reset_mode`): :meth:`qpos0_pose` with ``reset="qpos0"``, else
        :meth:`first_free_draw` of ``draw`` (dm_control's randomised reset)."""
        if self.reset_mode == "qpos0":
            return self.qpos0_pose()
        return self.first_free_draw(rng, draw)

    def __init__(
        self,
        *,
        ctrl_dt: float,
        sim_dt: float,
        solver_iterations: int | None = None,
        max_contacts: int | None = None,
        solver_tolerance: float | None = None,
        warm_start: bool | None = None,
        solver_polish: bool | None = None,
        contact: str | None = None,
        contact_report: bool = True,
    ) -> None:
        base = type(self).contact
        if contact is not None:
            models = type(self).CONTACT_MODELS
            if not models:
                raise ValueError(
                    f"{type(self).__name__}: contact must be None (the task has one contact "
                    f"model), got {contact!r}"
                )
            if not isinstance(contact, str) or contact not in models:
                raise ValueError(
                    f"{type(self).__name__}: contact must be None or one of "
                    f"{sorted(models)}, got {contact!r}"
                )
            base = models[contact]
        changes: dict[str, Any] = {}
        for name, n, field in (
            ("solver_iterations", solver_iterations, "iterations"),
            ("max_contacts", max_contacts, "max_contacts"),
        ):
            if n is None:
                continue
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
                raise ValueError(
                    f"{type(self).__name__}: {name} must be None or an integer >= 1, got {n!r}"
                )
            changes[field] = int(n)
        if solver_tolerance is not None:
            tol = solver_tolerance
            if isinstance(tol, bool) or not isinstance(tol, (int, float, np.number)) or tol < 0:
                raise ValueError(
                    f"{type(self).__name__}: solver_tolerance must be None or a number >= 0, "
                    f"got {tol!r}"
                )
            changes["tolerance"] = float(tol)
        for arg, name, flag in (
            ("warm_start", "warm_start", warm_start),
            ("solver_polish", "polish", solver_polish),
        ):
            if flag is None:
                continue
            if not isinstance(flag, bool):
                raise ValueError(
                    f"{type(self).__name__}: {arg} must be None, True or False, got {flag!r}"
                )
            changes[name] = flag
        if not isinstance(contact_report, bool):
            raise ValueError(
                f"{type(self).__name__}: contact_report must be True or False, got "
                f"{contact_report!r}"
            )
        self.contact_report = contact_report
        if changes or base is not type(self).contact:
            # the instance's contact model: the task's (or the named one) with these settings
            self.contact = dataclasses.replace(base, **changes)
        if self.hard_sim_ignore and not self.contact.soft:
            self.sim_ignore = (*self.sim_ignore, *self.hard_sim_ignore)
        super().__init__(ctrl_dt=ctrl_dt, sim_dt=sim_dt)
        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        model = self.sys.model
        self.touch_frames = [self.scene.site_frames[s] for s in self.touch_sites]
        parent = model.topo.frame_parent
        self.touch_bodies = [int(parent[model.frame_index(f)]) for f in self.touch_frames]
        sizes = []
        for s in self.touch_sites:
            i = m.site(s).id
            kind = int(m.site_type[i])
            size = np.asarray(m.site_size[i], float)
            if kind == _mujoco_geom("sphere"):
                size = np.full(3, size[0])
            elif kind != _mujoco_geom("ellipsoid"):  # pragma: no cover - the bundled files
                raise ValueError(
                    f"{type(self).__name__}: touch site {s!r} is not a sphere or an ellipsoid"
                )
            sizes.append(size)
        self.touch_sizes = np.asarray(sizes).reshape(-1, 3)

    # -- MuJoCo's derived quantities and sensors, as functions of a state
    def subtree_linvel(self, ps: _sim.State) -> Array:
        """MuJoCo's ``subtreelinvel`` of the root body (the whole model: these models have one
        tree): the velocity of the centre of mass, world axes."""
        return center_of_mass_jacobian(self.sys.model, ps.q) @ ps.v

    def com_positions(self, q: Array, names: Sequence[str]) -> Array:
        """MuJoCo's ``xipos``: world positions ``(k, 3)`` of the named bodies' centres of mass."""
        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        ipos = np.asarray([m.body_ipos[m.body(n).id] for n in names])
        R, p = self.frames(q, names)
        return jnp.einsum("kij,kj->ki", R, ipos) + p

    def contact_frames(self, ps: _sim.State) -> ContactFrames:
        """Every contact of the step at ``ps`` (:class:`jaxdyn.sim.contact.ContactFrames`, in
        the order of :func:`jaxdyn.sim.contact_forces`)."""
        model, cfg = self.sys.model, self.sys.cfg
        ws = world_state(model, ps.q)  # no floating base: the world state is not centred
        vb, _ = body_velocities(model, ws, ps.v)
        zero = jnp.zeros(3, ws.p.dtype)
        parts = []
        if cfg.contacts is not None:
            parts.append(contact_frames(ws, zero, vb, cfg.contacts, cfg.terrain))
        if cfg.geoms is not None:
            parts.append(cast("Geoms", cfg.geoms).frames(ws, zero, vb))
        frames = concat_frames(parts)
        # the slot count (static), kept for contact_slots with the configuration it is of
        self._slots = (cfg, int(frames.distance.shape[-1]))
        return frames

    @property
    def contact_slots(self) -> int:
        """The number of contact slots ``nc`` (:meth:`contact_frames`' rows; static): the
        count of the last :meth:`contact_frames` traced under the current configuration, else
        of an abstract evaluation of it (``jax.eval_shape``, which traces the contact
        geometry)."""
        cached = getattr(self, "_slots", None)
        if cached is None or cached[0] is not self.sys.cfg:
            nq, nv = self.sys.model.nq, self.sys.model.nv
            dtype = self.sys.model.mass.dtype
            q = jax.ShapeDtypeStruct((nq,), dtype)
            v = jax.ShapeDtypeStruct((nv,), dtype)
            fr = jax.eval_shape(lambda q, v: self.contact_frames(_sim.State(q, v)), q, v)
            return int(fr.distance.shape[-1])
        return cached[1]

    def zero_forces(self, ps: _sim.State) -> Array:
        """Zeros ``(nc, 3)``, one row per contact slot (:attr:`contact_slots`, a static
        count: no contact geometry traced for it): :meth:`SuiteEnv.advance_info`'s
        ``forces``."""
        return jnp.zeros((self.contact_slots, 3), ps.q.dtype)

    def touch(
        self,
        ps: _sim.State,
        ctrl: Array,
        forces: Array | None = None,
        frames: ContactFrames | None = None,
    ) -> Array:
        """MuJoCo's ``touch`` sensors of :attr:`touch_sites` ``(k,)``: the normal forces of the
        contacts on the site's body whose point lies in the site's volume, summed (the forces of
        the first simulator step from ``ps`` under ``ctrl``, :func:`jaxdyn.sim.contact_forces`:
        jaxdyn's contact forces, not MuJoCo's soft-constraint ones). ``forces (nc, 3)``: those
        forces where the caller has them (:meth:`step`: the last simulator step's,
        :meth:`advance_info`), else solved here; ``frames``: :meth:`contact_frames` of ``ps``
        where the caller has them (a reset: :meth:`free_draw_frames`), else computed here."""
        model, cfg = self.sys.model, self.sys.cfg
        fr = self.contact_frames(ps) if frames is None else frames
        f = (
            _sim.contact_forces(model, ps, jnp.asarray(ctrl, ps.q.dtype), cfg)
            if forces is None
            else forces
        )
        fn = jnp.maximum(jnp.sum(f * fr.normal, -1), 0.0)
        body, other = np.asarray(fr.body), np.asarray(fr.other)
        R, p = self.frames(ps.q, self.touch_frames)
        out = []
        for k, b in enumerate(self.touch_bodies):
            on = (body == b) | (other == b)
            local = jnp.einsum("ji,cj->ci", R[k], fr.point - p[k]) / self.touch_sizes[k]
            inside = jnp.sum(local * local, -1) <= 1.0
            out.append(jnp.sum(jnp.where(on & inside, fn, 0.0)))
        return jnp.stack(out)

    def sensors(
        self,
        pk: _sim.State,
        action: Array,
        forces: Array | None = None,
        frames: ContactFrames | None = None,
    ) -> dict:
        """The quantities of :meth:`observe` and :meth:`reward` at the state ``pk`` under
        ``action``: :meth:`state_sensors` and, with :attr:`touch_sites`, ``"touch"``
        (``forces``: the contact forces of the step from ``pk``, ``frames`` its contact frames,
        if known; :meth:`touch`)."""
        out = self.state_sensors(pk)
        if self.touch_sites:
            out["touch"] = self.touch(pk, action, forces, frames)
        return out

    def state_sensors(self, pk: _sim.State) -> dict:
        """The quantities of :meth:`sensors` that are functions of the state alone."""
        raise NotImplementedError

    # -- the environment
    def episode_start(
        self, rng: Array, ps: _sim.State, frames: ContactFrames | None = None
    ) -> State:
        """The :class:`State` of a reset to ``ps`` (sensors under a zero action; ``frames``:
        the :meth:`contact_frames` of ``ps`` where the reset has them)."""
        sensors = self.sensors(ps, jnp.zeros(self.action_size, ps.q.dtype), frames=frames)
        zero = jnp.zeros((), ps.q.dtype)
        metrics = {k: zero for k in self.metric_keys} | {"diverged": zero}
        info = {"rng": rng, **self.report_info(ps.q.dtype)}
        return State(ps, self.observe(ps, sensors), zero, zero, metrics, info)

    def report_info(self, dtype: Any) -> dict[str, Array]:
        """The contact report's entries of a reset's ``info``: :meth:`SimEnv.contact_info`
        with :attr:`contact_report`, else none (:meth:`step` then leaves the report out, and
        XLA the residual's computation with it)."""
        return self.contact_info(dtype) if self.contact_report else {}

    def step(self, state: State, action: Array) -> State:
        self.check_state(state)
        action = self.check_action(action)
        # with touch sensors, the last frame's contact forces (one solve fewer than
        # recomputing them at pk)
        touch = bool(self.touch_sites)
        ps0 = state.pipeline_state
        ps, pk, bad, contact = self.advance_info(
            ps0, action, self.zero_forces(ps0) if touch else None
        )
        forces = contact.pop("contact_forces") if touch else None
        sensors = self.sensors(pk, action, forces)
        reward, metrics = self.reward(ps, sensors, action)
        reward = reward.astype(ps.q.dtype)
        done = bad.astype(reward.dtype)
        # the contact report where the reset put it (episode_start)
        info = {**state.info, **contact} if "contacts_dropped" in state.info else state.info
        return state.replace(
            pipeline_state=ps,
            obs=self.observe(ps, sensors),
            reward=reward,
            done=done,
            metrics={**state.metrics, **metrics, "diverged": done},
            info=info,
        )

    def joint_ranges(self, joints: slice | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """``(lower, upper)`` of MuJoCo joints ``joints`` (a slice of ``jnt_range``)."""
        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        r = np.asarray(m.jnt_range[joints], float)
        return r[:, 0], r[:, 1]

    def planar_draw(self, rng: Array) -> Array:
        """Playground's draw of a planar body's reset (walker, hopper) from the reset's key
        ``rng`` (the same splits): the root's rotation (``qpos[2]``) uniform in ``[-pi, pi]``,
        the joints after it uniform in ``lowers`` .. ``uppers``; a configuration in jaxdyn's
        order, with no collision check."""
        _, r1, r2 = jax.random.split(rng, 3)
        nq = self.sys.model.nq
        qpos = jnp.zeros(nq).at[2].set(jax.random.uniform(r1, (), minval=-jnp.pi, maxval=jnp.pi))
        qpos = qpos.at[3:].set(
            jax.random.uniform(r2, (nq - 3,), minval=self.lowers, maxval=self.uppers)
        )
        return self.q_of(qpos)

    def planar_reset(self, rng: Array) -> State:
        """dm_control's reset of a planar body (walker, hopper): :meth:`planar_draw` (the
        root's rotation uniform in ``[-pi, pi]``, the joints uniform in their ranges), at rest,
        its penetrating draws rejected (:meth:`first_free_draw` of ``reset_tries`` candidates,
        as dm_control's finger, ball in cup and humanoid redraw; Playground keeps them). Where
        the first candidate touches nothing (most resets) the state is Playground's for the
        same key, and ``info["rng"]`` is Playground's in every case. The reset's
        distribution is Playground's conditioned on no contact, dm_control's rejection
        sampling; if every candidate penetrates, the reset keeps the first (Playground's) draw
        (measured over 8192 draws: 13 % of the hopper's draws penetrate, 2 % of the walker's,
        so all of 8 candidates do with a probability near ``0.13 ** 8``, 1e-7)."""
        rng = self.check_rng(rng)
        q, frames = self.free_draw_frames(rng, self.planar_draw)
        ps = self.pipeline_init(q, jnp.zeros(self.sys.model.nv, q.dtype))
        return self.episode_start(jax.random.split(rng, 3)[0], ps, frames)


def soft_contact(**changes: Any) -> _sim.Constraint:
    """The contact tasks' default contact (cheetah, walker, hopper, ball in cup; the humanoid's
    with its own ``max_contacts``; the finger's over every slot, on its file's elliptic
    cones): MuJoCo's soft contact, the
    physics of Playground's MJX environments (and of dm_control's MuJoCo), solved as MuJoCo's
    and MJX's Newton solver (``mj_solNewton``; :class:`jaxdyn.sim.Constraint`'s
    ``soft=True, relaxed=True, solver="newton"``): the geoms' ``solref`` / ``solimp``, the
    file's cone (pyramidal, MuJoCo's default; the finger's elliptic), friction and joint-limit
    rows
    (:meth:`~jaxdyn.io.mjcf.MJCFModel.sim_config`); over the
    :attr:`~ContactSuiteEnv.MAX_CONTACTS` closest slots, warm-started from the previous
    simulator step, stopped at MuJoCo's ``opt.tolerance`` or after
    :attr:`~ContactSuiteEnv.NEWTON_ITERATIONS` steps. ``changes``: other fields of the
    :class:`~jaxdyn.sim.Constraint`.

    Playground's files cut MuJoCo's solver to 2 (walker) or 4 (cheetah, hopper) iterations
    (``<option iterations>``, with ``ls_iterations`` 5 to 10); here the solve runs to MuJoCo's
    tolerance instead: the converged problem, which MuJoCo C solves under the bundled files'
    defaults (100 iterations). The warm start is MuJoCo's (the previous solve's acceleration,
    ``qacc_warmstart``), so that a solve cut to ``solver_iterations=k`` takes MuJoCo's cut
    solve's steps (docs/environments.md)."""
    kw: dict[str, Any] = dict(
        soft=True,
        relaxed=True,
        solver="newton",
        max_contacts=ContactSuiteEnv.MAX_CONTACTS,
        warm_start=True,
        iterations=ContactSuiteEnv.NEWTON_ITERATIONS,
        tolerance=ContactSuiteEnv.NEWTON_TOLERANCE,
    )
    return _sim.Constraint(**(kw | changes))


def _mujoco_geom(name: str) -> int:
    """MuJoCo's ``mjtGeom`` value of a geom type."""
    import mujoco

    # mujoco's enums come from a compiled module without type stubs
    enum = mujoco.mjtGeom  # pyright: ignore[reportAttributeAccessIssue]
    return int(getattr(enum, f"mjGEOM_{name.upper()}"))


class CheetahRun(ContactSuiteEnv):
    """Half-cheetah running (dm_control ``cheetah``; Playground ``CheetahRun``): a planar
    cheetah (root slides x, z and hinge, six actuated joints with springs), rewarded for
    forward speed.

    **Observation (17):** ``qpos[1:]`` (8), ``qvel`` (9). **Reward:**
    ``tolerance(speed, (10, inf), margin=10, value_at_margin=0, sigmoid="linear")``, ``speed``
    the ``subtreelinvel`` of the torso along x. **Reset:** the limited joints uniform in their
    ranges, then ``settle_steps`` (200) simulator steps at zero control (dm_control's
    stabilisation), time back to 0; as dm_control and Playground, no collision check: a draw
    with a leg in the floor (9 % of them) is pushed out during the settling (the root is free
    to slide), which leaves it at rest with a converged solve. **Periods:** 0.01 s both.
    Contact: the bodies against the floor (friction 1, the floor's) and against each other
    (0.4), MuJoCo's soft contact through its Newton solve (:func:`soft_contact`, the files'
    ``solref`` / ``solimp``, as Playground's MJX), solved over the
    :attr:`~ContactSuiteEnv.MAX_CONTACTS` closest of the 54 slots; ``contact="hard"``: jaxdyn's
    hard Coulomb contact (:attr:`HARD_CONTACT`, cold, 100 projected gradient steps).
    """

    xml = "cheetah.xml"
    #: the hard contact (``contact="hard"``): jaxdyn's Coulomb contact, cold, 100 steps
    HARD_CONTACT = _sim.Constraint(soft=False, max_contacts=ContactSuiteEnv.MAX_CONTACTS)
    contact = soft_contact()
    CONTACT_MODELS = {"soft": contact, "hard": HARD_CONTACT}
    mujoco_limits = "constraint"
    RUN_SPEED = 10.0

    def __init__(
        self,
        *,
        ctrl_dt: float = 0.01,
        sim_dt: float = 0.01,
        settle_steps: int = 200,
        solver_iterations: int | None = None,
        max_contacts: int | None = None,
        solver_tolerance: float | None = None,
        warm_start: bool | None = None,
        solver_polish: bool | None = None,
        contact: str | None = None,
        contact_report: bool = True,
    ) -> None:
        super().__init__(
            ctrl_dt=ctrl_dt,
            sim_dt=sim_dt,
            solver_iterations=solver_iterations,
            max_contacts=max_contacts,
            solver_tolerance=solver_tolerance,
            warm_start=warm_start,
            solver_polish=solver_polish,
            contact=contact,
            contact_report=contact_report,
        )
        self.settle_steps = int(settle_steps)
        self.lowers, self.uppers = self.joint_ranges(slice(3, None))

    def state_sensors(self, pk: _sim.State) -> dict[str, Array]:
        return {"speed": self.subtree_linvel(pk)[0]}

    def observe(self, ps: _sim.State, sensors: dict[str, Array]) -> Array:
        return jnp.concatenate([self.qpos(ps.q)[1:], self.qpos(ps.v)])

    def reward(
        self, ps: _sim.State, sensors: dict[str, Array], action: Array
    ) -> tuple[Array, dict[str, Array]]:
        speed = sensors["speed"]
        r = tolerance(
            speed,
            (self.RUN_SPEED, float("inf")),
            margin=self.RUN_SPEED,
            value_at_margin=0,
            sigmoid="linear",
        )
        return r, {"speed": speed}

    metric_keys = ("speed",)

    def reset(self, rng: Array) -> State:
        rng = self.check_rng(rng)
        rng, r1 = jax.random.split(rng, 2)
        nq = self.sys.model.nq
        lo, hi = self.lowers, self.uppers
        qpos = jnp.zeros(nq).at[3:].set(jax.random.uniform(r1, (nq - 3,), minval=lo, maxval=hi))
        ps = self.pipeline_init(self.q_of(qpos), jnp.zeros(self.sys.model.nv))
        if self.settle_steps:
            model, cfg = self.sys.model, self.sys.cfg
            ctrl = jnp.zeros(self.action_size, ps.q.dtype)

            def settle(s, _):
                return _sim.step(model, s, ctrl, cfg), None

            ps, _ = jax.lax.scan(settle, ps, None, length=self.settle_steps)
            ps = self.pipeline_init(ps.q, ps.v, ps.act)  # time back to 0
        return self.episode_start(rng, ps)


class WalkerMove(ContactSuiteEnv):
    """Planar walker (dm_control ``walker``; Playground ``WalkerStand`` / ``WalkerWalk`` /
    ``WalkerRun``): a torso and two three-link legs (root slides z, x and hinge), standing up
    (``move_speed = 0``) or moving forward at ``move_speed`` (1: walk, 8: run).

    **Observation (24):** the ``xx`` and ``xz`` of every body's ``xmat`` (14), the torso's
    height (``xpos`` z, as dm_control; ``height_obs="zz"``: the torso's ``xmat`` ``zz``, which
    Playground's port reads there, its observation exactly), ``qvel`` (9). The reward reads the
    height (``xpos`` z) either way, as both dm_control and Playground do.
    **Reward:** ``stand = (3 standing + upright) / 4`` with
    ``standing = tolerance(height, (1.2, inf), margin=0.6)``, ``upright = (1 + zz) / 2``;
    moving: ``stand (5 move + 1) / 6``, ``move = tolerance(speed, (s, inf), margin=s / 2,
    value_at_margin=0.5, sigmoid="linear")`` on the torso's ``subtreelinvel`` along x.
    **Reset:** root angle ``~ U(-pi, pi)``, the limited joints uniform in their ranges, at rest
    (Playground's draw, the same key splits); a draw with a body in the floor (2 % of
    them) is replaced by the first of ``reset_tries - 1`` (7) further draws that touch
    nothing (:meth:`ContactSuiteEnv.planar_reset`; Playground keeps it, and jaxdyn's
    hard contact, ``contact="hard"``, ejects the body at up to 15 m/s in the first step).
    **Periods:** control 0.025 s, simulation 0.0025 s. Contact: the bodies against the floor
    (friction 0.7; the bodies do not collide with each other), MuJoCo's soft contact through
    its Newton solve (:func:`soft_contact`: the file's ``solref`` / ``solimp``, pyramidal
    cones, the joint-limit rows in the same solve; Playground's MJX physics), over the
    :attr:`~ContactSuiteEnv.MAX_CONTACTS` closest of the 14 slots. ``contact="hard"``: jaxdyn's
    hard Coulomb contact (:attr:`HARD_CONTACT`), warm-started from the previous simulator
    step's impulses (``pipeline_state.impulses``) and stopped at a relative change of 3e-4 or
    after 30 steps, without the limit rows' active-set step (``warm_start=False,
    solver_tolerance=0, solver_iterations=100, solver_polish=True`` for the cold 100
    iterations).
    """

    xml = "walker.xml"
    #: the most solver steps per simulator step of the hard contact (its 10 simulator steps
    #: per control step carry a solve on further than the hopper's 4)
    SOLVER_ITERATIONS = 30
    #: the hard contact (``contact="hard"``): the contact cap, and the solve warm-started from
    #: the previous simulator step's impulses
    #: and stopped once they move by less than 3e-4 relative (its 10 simulator steps per
    #: control step change the contacts little), after at most :attr:`SOLVER_ITERATIONS`
    #: steps and without the limit rows' active-set step (``polish=False``): under ``vmap`` the
    #: batch's slowest solve sets the count, and the warm start carries an unfinished solve on
    #: to the next simulator step (docs/environments.md, "Step cost against MJX")
    HARD_CONTACT = _sim.Constraint(
        soft=False,
        friction=0.7,
        max_contacts=ContactSuiteEnv.MAX_CONTACTS,
        warm_start=True,
        tolerance=3e-4,
        iterations=SOLVER_ITERATIONS,
        polish=False,
    )
    contact = soft_contact()
    CONTACT_MODELS = {"soft": contact, "hard": HARD_CONTACT}
    mujoco_limits = "constraint"
    STAND_HEIGHT = 1.2
    WALK_SPEED, RUN_SPEED = 1.0, 8.0
    metric_keys = ("reward/standing", "reward/upright", "reward/stand", "reward/move")

    def __init__(
        self,
        move_speed: float = 0.0,
        *,
        ctrl_dt: float = 0.025,
        sim_dt: float = 0.0025,
        height_obs: str = "z",
        reset_tries: int = 8,
        solver_iterations: int | None = None,
        max_contacts: int | None = None,
        solver_tolerance: float | None = None,
        warm_start: bool | None = None,
        solver_polish: bool | None = None,
        contact: str | None = None,
        contact_report: bool = True,
    ) -> None:
        if height_obs not in ("z", "zz"):
            raise ValueError(
                f"WalkerMove: height_obs must be 'z' (dm_control: the torso's height) or 'zz' "
                f"(Playground: the torso's xmat zz), got {height_obs!r}"
            )
        self.set_reset_tries(reset_tries)
        super().__init__(
            ctrl_dt=ctrl_dt,
            sim_dt=sim_dt,
            solver_iterations=solver_iterations,
            max_contacts=max_contacts,
            solver_tolerance=solver_tolerance,
            warm_start=warm_start,
            solver_polish=solver_polish,
            contact=contact,
            contact_report=contact_report,
        )
        self.move_speed = float(move_speed)
        self.height_obs = height_obs
        self.lowers, self.uppers = self.joint_ranges(slice(3, None))
        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        self.bodies = [m.body(i).name for i in range(1, m.nbody)]

    def state_sensors(self, pk: _sim.State) -> dict[str, Array]:
        R, p = self.frames(pk.q, self.bodies)
        return {
            "orientations": jnp.stack([R[:, 0, 0], R[:, 0, 2]], -1).reshape(-1),
            "height": p[0, 2],
            "upright": R[0, 2, 2],
            "speed": self.subtree_linvel(pk)[0],
        }

    def observe(self, ps: _sim.State, sensors: dict[str, Array]) -> Array:
        h = sensors["upright"] if self.height_obs == "zz" else sensors["height"]
        return jnp.concatenate([sensors["orientations"], h[None], self.qpos(ps.v)])

    def reward(
        self, ps: _sim.State, sensors: dict[str, Array], action: Array
    ) -> tuple[Array, dict[str, Array]]:
        h = self.STAND_HEIGHT
        standing = tolerance(sensors["height"], (h, float("inf")), margin=h / 2)
        upright = (1 + sensors["upright"]) / 2
        stand = (3 * standing + upright) / 4
        move = jnp.zeros_like(stand)
        reward = stand
        if self.move_speed != 0:
            s = self.move_speed
            move = tolerance(
                sensors["speed"],
                (s, float("inf")),
                margin=s / 2,
                value_at_margin=0.5,
                sigmoid="linear",
            )
            reward = stand * (5 * move + 1) / 6
        parts = dict(standing=standing, upright=upright, stand=stand, move=move)
        return reward, {f"reward/{k}": v for k, v in parts.items()}

    def reset(self, rng: Array) -> State:
        return self.planar_reset(rng)


class HopperTask(ContactSuiteEnv):
    """Planar one-legged hopper (dm_control ``hopper``; Playground ``HopperStand`` /
    ``HopperHop``): standing (``hopping=False``) or hopping forward.

    **Observation (15):** ``qpos[1:]`` (6), ``qvel`` (7), ``log1p`` of the toe and heel
    ``touch`` sensors (2; :meth:`ContactSuiteEnv.touch`). **Reward:**
    ``standing = tolerance(height, (0.6, 2))``, ``height`` the torso's centre of mass above the
    foot's (``xipos`` z); stand: ``standing (4 + mean(tolerance(action, margin=1,
    value_at_margin=0, sigmoid="quadratic"))) / 5``; hop: ``standing * tolerance(speed, (2,
    inf), margin=1, value_at_margin=0.5, sigmoid="linear")`` on the torso's ``subtreelinvel``.
    **Reset:** root angle ``~ U(-pi, pi)``, the limited joints uniform in their ranges, at rest
    (Playground's draw, the same key splits); a draw with a leg inside the torso or the
    floor (13 % of them) is replaced by the first of ``reset_tries - 1`` (7) further
    draws that touch nothing (:meth:`ContactSuiteEnv.planar_reset`; Playground keeps it;
    jaxdyn's hard contact problem, ``contact="hard"``, has no solution where a leg starts
    inside the torso). **Periods:** control 0.02 s, simulation 0.005 s. Contact: the bodies
    against the floor and against each other (friction 1), MuJoCo's soft contact through its
    Newton solve (:func:`soft_contact`; Playground's MJX physics) over the
    :attr:`~ContactSuiteEnv.MAX_CONTACTS` closest of the 30 slots; the touch sensors read its
    forces. ``contact="hard"``: jaxdyn's hard Coulomb contact (:attr:`HARD_CONTACT`),
    warm-started and stopped at a relative change of 1e-4 or after 40 steps, without the limit
    rows' active-set step (as the walker's, whose tolerance is 3e-4). Joint limits: MuJoCo's
    limit constraint
    (:meth:`~jaxdyn.io.mjcf.MJCFModel.limit_constraints`, solved with the contacts); under the
    default :class:`jaxdyn.sim.JointLimits` (underdamped on these limbs) a fallen hopper's
    limbs bounced off their stops for a second longer than MuJoCo's.
    """

    xml = "hopper.xml"
    #: the hard contact (``contact="hard"``), as the walker's (:class:`WalkerMove`): the cap, a
    #: warm start, a tolerance (here 1e-4) after at most
    #: :attr:`~ContactSuiteEnv.SOLVER_ITERATIONS` steps, no limit-row polish
    HARD_CONTACT = _sim.Constraint(
        soft=False,
        max_contacts=ContactSuiteEnv.MAX_CONTACTS,
        warm_start=True,
        tolerance=1e-4,
        iterations=ContactSuiteEnv.SOLVER_ITERATIONS,
        polish=False,
    )
    contact = soft_contact()
    CONTACT_MODELS = {"soft": contact, "hard": HARD_CONTACT}
    touch_sites = ("touch_toe", "touch_heel")
    mujoco_limits = "constraint"
    STAND_HEIGHT, HOP_SPEED = 0.6, 2.0

    def __init__(
        self,
        hopping: bool = False,
        *,
        ctrl_dt: float = 0.02,
        sim_dt: float = 0.005,
        reset_tries: int = 8,
        solver_iterations: int | None = None,
        max_contacts: int | None = None,
        solver_tolerance: float | None = None,
        warm_start: bool | None = None,
        solver_polish: bool | None = None,
        contact: str | None = None,
        contact_report: bool = True,
    ) -> None:
        self.set_reset_tries(reset_tries)
        super().__init__(
            ctrl_dt=ctrl_dt,
            sim_dt=sim_dt,
            solver_iterations=solver_iterations,
            max_contacts=max_contacts,
            solver_tolerance=solver_tolerance,
            warm_start=warm_start,
            solver_polish=solver_polish,
            contact=contact,
            contact_report=contact_report,
        )
        self.hopping = bool(hopping)
        self.metric_keys = (
            ("reward/standing", "reward/hopping")
            if self.hopping
            else ("reward/standing", "reward/small_control")
        )
        self.lowers, self.uppers = self.joint_ranges(slice(3, None))

    def state_sensors(self, pk: _sim.State) -> dict[str, Array]:
        z = self.com_positions(pk.q, ["torso", "foot"])[:, 2]
        return {"height": z[0] - z[1], "speed": self.subtree_linvel(pk)[0]}

    def observe(self, ps: _sim.State, sensors: dict[str, Array]) -> Array:
        q, v = self.qpos(ps.q), self.qpos(ps.v)
        return jnp.concatenate([q[1:], v, jnp.log1p(sensors["touch"])])

    def reward(
        self, ps: _sim.State, sensors: dict[str, Array], action: Array
    ) -> tuple[Array, dict[str, Array]]:
        standing = tolerance(sensors["height"], (self.STAND_HEIGHT, 2.0))
        if self.hopping:
            hopping = tolerance(
                sensors["speed"],
                (self.HOP_SPEED, float("inf")),
                margin=self.HOP_SPEED / 2,
                value_at_margin=0.5,
                sigmoid="linear",
            )
            return standing * hopping, {"reward/standing": standing, "reward/hopping": hopping}
        small = tolerance(action, margin=1, value_at_margin=0, sigmoid="quadratic")
        small = (jnp.mean(small) + 4) / 5
        return standing * small, {"reward/standing": standing, "reward/small_control": small}

    def reset(self, rng: Array) -> State:
        return self.planar_reset(rng)


class FingerSpin(ContactSuiteEnv):
    """Finger spin (dm_control ``finger.spin``; Playground ``FingerSpin``): a two-link planar
    finger (``ctrl`` in ``[-1, 1]``, gears 30 and 15) flicks a free-spinning body on a hinge
    (``frictionloss`` 0.1: MuJoCo's dry-friction row, :class:`jaxdyn.sim.FrictionLoss`, under
    the default soft contact, jaxdyn's smooth Coulomb friction under ``contact="hard"``;
    damping 0.03, the task's), without
    gravity; rewarded while the body spins at ``-15`` rad/s or faster.

    **Observation (9):** the finger's ``qpos`` (2), the spinner's tip relative to its hinge
    in the plane (2), ``qvel`` (3), ``log1p`` of the ``touchtop`` / ``touchbottom`` sensors (2).
    **Reward:** ``hinge velocity <= -15``. **Reset:** the finger's joints uniform in their ranges,
    the hinge ``~ U(-pi, pi)`` (Playground's draw); as dm_control, a draw whose bodies touch is
    replaced by the first of ``reset_tries - 1`` further draws that do not (all kinematics, in
    one batch). **Periods:** control 0.02 s, simulation 0.01 s (dm_control's).

    Integrator: jaxdyn's ``"implicit"`` (MuJoCo's ``implicitfast``, Playground's choice for its
    finger), not the file's ``Euler``: the finger's light links against jaxdyn's smooth joint
    limits (:class:`jaxdyn.sim.JointLimits`, whose damping only ``"implicit"`` integrates
    implicitly) chattered at their stops at 0.01 s under ``Euler``. Joint limits: MuJoCo's
    limit constraint (:meth:`~jaxdyn.io.mjcf.MJCFModel.limit_constraints`, solved with the
    contacts).

    Under ``contact="hard"`` loaded with ``sim_config(ignore=("solimp",))``: the file's geoms
    set ``solimp="0 0.9 0.01"`` (MuJoCo's impedance, a penetration-dependent softness of its
    soft contacts), which :class:`jaxdyn.sim.Constraint`, hard contact, has no counterpart
    for. Contact: MuJoCo's
    soft contact through its Newton solve on the file's elliptic cones
    (``<option cone="elliptic">``; :func:`soft_contact` over every slot), the file's
    ``solimp`` then honoured; ``contact="hard"``: jaxdyn's hard Coulomb contact
    (:attr:`HARD_CONTACT`, the default before; ``solimp`` ignored as above).
    """

    xml = "finger.xml"
    integrator = "implicit"
    mujoco_limits = "constraint"
    #: the hard contact (``contact="hard"``, the default before): jaxdyn's Coulomb contact,
    #: cold, 100 projected gradient steps, over every slot
    HARD_CONTACT = _sim.Constraint(soft=False)
    contact = soft_contact(max_contacts=None)
    CONTACT_MODELS = {"soft": contact, "hard": HARD_CONTACT}
    hard_sim_ignore = ("solimp",)
    touch_sites = ("touchtop", "touchbottom")
    SPIN_VELOCITY = 15.0
    #: the hinge's damping in the task (``None``: the file's)
    HINGE_DAMPING = 0.03

    def __init__(
        self,
        *,
        ctrl_dt: float = 0.02,
        sim_dt: float = 0.01,
        reset_tries: int = 16,
        solver_iterations: int | None = None,
        max_contacts: int | None = None,
        solver_tolerance: float | None = None,
        warm_start: bool | None = None,
        solver_polish: bool | None = None,
        contact: str | None = None,
        contact_report: bool = True,
    ) -> None:
        self.set_reset_tries(reset_tries)
        super().__init__(
            ctrl_dt=ctrl_dt,
            sim_dt=sim_dt,
            solver_iterations=solver_iterations,
            max_contacts=max_contacts,
            solver_tolerance=solver_tolerance,
            warm_start=warm_start,
            solver_polish=solver_polish,
            contact=contact,
            contact_report=contact_report,
        )
        self.lowers, self.uppers = self.joint_ranges(slice(0, 2))
        self.tip_frames = [self.scene.site_frames["tip"], "spinner"]

    def adjust_model(self, model: Model) -> Model:
        if self.HINGE_DAMPING is None:
            return model
        import equinox as eqx

        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        dof = int(self.to_mujoco[m.jnt_dofadr[m.joint("hinge").id]])
        damping = jnp.asarray(model.damping).at[dof].set(self.HINGE_DAMPING)
        return eqx.tree_at(lambda x: x.damping, model, damping)

    def state_sensors(self, pk: _sim.State) -> dict[str, Array]:
        _, p = self.frames(pk.q, self.tip_frames)
        return {
            "position": self.qpos(pk.q)[:2],
            "tip": (p[0] - p[1])[jnp.array([0, 2])],
            "spinner": p[1][jnp.array([0, 2])],
            "hinge_velocity": self.qpos(pk.v)[2],
        }

    def observe(self, ps: _sim.State, sensors: dict[str, Array]) -> Array:
        return jnp.concatenate(
            [sensors["position"], sensors["tip"], self.qpos(ps.v), jnp.log1p(sensors["touch"])]
        )

    def reward(
        self, ps: _sim.State, sensors: dict[str, Array], action: Array
    ) -> tuple[Array, dict[str, Array]]:
        return (sensors["hinge_velocity"] <= -self.SPIN_VELOCITY).astype(ps.q.dtype), {}

    def draw_pose(self, r1: Array, r2: Array) -> tuple[Array, ContactFrames]:
        """The reset's configuration (jaxdyn's order) from the keys of the first draw, and its
        :meth:`~ContactSuiteEnv.contact_frames` (:meth:`~ContactSuiteEnv.first_free`)."""
        lo, hi = self.lowers, self.uppers

        def draw(a, b):
            fingers = jax.random.uniform(a, (2,), minval=lo, maxval=hi)
            return jnp.concatenate(
                [fingers, jax.random.uniform(b, (1,), minval=-jnp.pi, maxval=jnp.pi)]
            )

        qs = draw(r1, r2)[None]
        if self.reset_tries > 1:
            n = self.reset_tries - 1
            more = jax.random.split(jax.random.fold_in(r1, 1), 2 * n)
            qs = jnp.concatenate([qs, jax.vmap(draw)(more[:n], more[n:])])
        # the first free draw (the first draw if none is)
        return self.first_free(self.q_of(qs.astype(self.sys.model.mass.dtype)))

    def reset(self, rng: Array) -> State:
        rng = self.check_rng(rng)
        rng, r1 = jax.random.split(rng, 2)
        r1, r2 = jax.random.split(r1, 2)
        q, frames = self.draw_pose(r1, r2)
        return self.episode_start(rng, self.pipeline_init(q, jnp.zeros_like(q)), frames)


class FingerTurn(FingerSpin):
    """Finger turn (dm_control ``finger.turn_easy`` / ``turn_hard``; Playground
    ``FingerTurnEasy`` / ``FingerTurnHard``): turn the spinner until its tip is inside a target
    of radius ``target_radius`` (0.07 easy, 0.03 hard) on the tip's circle (the file's hinge
    damping).

    **Observation (12):** those of :class:`FingerSpin` (9), the target relative to the hinge in
    the plane (2), the tip's signed distance to the target's surface (1). **Reward:**
    ``distance <= 0``. **Reset:** as :class:`FingerSpin` (Playground's key splits) and the
    target's angle ``~ U(-pi, pi)`` on the circle of radius ``size(cap1).sum()`` about the
    hinge, kept in ``info["target"]`` (its world ``x``, ``z``; dm_control moves a site of the
    model, Playground a mocap body), with the constraint solve's report
    (``contact_residual``, ``contacts_dropped``: :meth:`jaxdyn.envs.SimEnv.pipeline_step_info`)
    as the other contact tasks.
    """

    HINGE_DAMPING = None
    EASY_TARGET, HARD_TARGET = 0.07, 0.03

    def __init__(self, target_radius: float = EASY_TARGET, **kw: Any) -> None:
        super().__init__(**kw)
        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        self.target_radius = float(target_radius)
        self.radius = float(np.sum(m.geom_size[m.geom("cap1").id]))
        self.hinge = np.asarray(m.body_pos[m.body("spinner").id], float)[[0, 2]]

    def observe(self, ps: _sim.State, sensors: dict[str, Array]) -> Array:
        to_target = sensors["target"] - sensors["spinner"]
        dist = jnp.linalg.norm(to_target - sensors["tip"]) - self.target_radius
        return jnp.concatenate([super().observe(ps, sensors), to_target, dist[None]])

    def reward(
        self, ps: _sim.State, sensors: dict[str, Array], action: Array
    ) -> tuple[Array, dict[str, Array]]:
        to_target = sensors["target"] - sensors["spinner"]
        dist = jnp.linalg.norm(to_target - sensors["tip"]) - self.target_radius
        return (dist <= 0).astype(ps.q.dtype), {}

    def reset(self, rng: Array) -> State:
        rng = self.check_rng(rng)
        rng, r1, r2 = jax.random.split(rng, 3)
        r1, r3 = jax.random.split(r1, 2)
        q, frames = self.draw_pose(r1, r3)
        angle = jax.random.uniform(r2, minval=-jnp.pi, maxval=jnp.pi)
        target = self.hinge + self.radius * jnp.stack([jnp.sin(angle), jnp.cos(angle)])
        ps = self.pipeline_init(q, jnp.zeros_like(q))
        target = target.astype(ps.q.dtype)
        sensors = self.sensors(ps, jnp.zeros(self.action_size, ps.q.dtype), frames=frames)
        sensors["target"] = target
        zero = jnp.zeros((), ps.q.dtype)
        obs = self.observe(ps, sensors)
        info = {"rng": rng, "target": target, **self.report_info(ps.q.dtype)}
        return State(ps, obs, zero, zero, {"diverged": zero}, info)

    def step(self, state: State, action: Array) -> State:
        self.check_state(state, ("target",))
        action = self.check_action(action)
        ps0 = state.pipeline_state
        ps, pk, bad, contact = self.advance_info(ps0, action, self.zero_forces(ps0))
        sensors = self.sensors(pk, action, contact.pop("contact_forces"))
        sensors["target"] = state.info["target"]
        reward, _ = self.reward(ps, sensors, action)
        reward = reward.astype(ps.q.dtype)
        done = bad.astype(reward.dtype)
        # the contact report where the reset put it (ContactSuiteEnv.step)
        info = {**state.info, **contact} if "contacts_dropped" in state.info else state.info
        return state.replace(
            pipeline_state=ps,
            obs=self.observe(ps, sensors),
            reward=reward,
            done=done,
            metrics={**state.metrics, "diverged": done},
            info=info,
        )


class BallInCup(ContactSuiteEnv):
    """Ball in cup (dm_control ``ball_in_cup.catch``; Playground ``BallInCup``): a cup on two
    slide joints (``x``, ``z``; springs of 20 N/m, damping 3) driven by motors (``gear=5``,
    ``ctrl`` in ``[-1, 1]``), a ball hanging from it on a string (a spatial tendon between
    the ``ball`` and ``cup`` sites, length limited to 0.3 m); swing the ball into the cup.

    **Observation (8):** ``qpos`` (4), ``qvel`` (4), MuJoCo's joint order (``cup_x``,
    ``cup_z``, ``ball_x``, ``ball_z``). **Reward:** dm_control's ``in_target``, 1 when the
    ball's centre (``xpos``) is inside the ``target`` box site shrunk by the ball's radius in
    ``x`` and ``z``, else 0. **Reset:** ``ball_x ~ U(-0.2, 0.2)``, ``ball_z ~ U(0.2, 0.5)``,
    the cup at its origin, at rest; as dm_control, a draw whose ball touches the cup is
    replaced by the first of ``reset_tries - 1`` further draws that does not (one batch;
    Playground's port resets to ``qpos0``, the ball hanging below the cup: ``reset="qpos0"``).
    **Periods:** control 0.02 s, simulation 0.002 s (dm_control's and Playground's; the
    file's ``Euler`` with ``eulerdamp``: jaxdyn's ``"implicit_damping"``). Contact: the ball
    against the five capsules of the cup and the floor (friction 1), MuJoCo's soft contact
    through its Newton solve (:func:`soft_contact`, Playground's MJX physics: with the ball in
    the shaken cup the rollout equals MuJoCo C's to rounding) over the
    :attr:`~ContactSuiteEnv.MAX_CONTACTS` closest of the 16 slots; ``contact="hard"``:
    jaxdyn's hard Coulomb contact (:attr:`HARD_CONTACT`, the default before).

    The string's length limit is MuJoCo's tendon limit constraint (``mujoco_limits =
    "constraint"``: a soft row on the tendon's length, :class:`jaxdyn.sim.LimitConstraints`'
    ``tendons``, solved with the contacts): the string stretches as MuJoCo's (up to 2 cm when
    the cup is whirled), and the ball swinging or whirled on it follows MuJoCo C to rounding
    (``tests/test_envs_suite_more.py``). Before, it was the smooth spring-damper of
    :class:`jaxdyn.sim.JointLimits` on the tendon's length, :attr:`string_limits` (still the
    configuration's ``limits``, used with ``mujoco_limits = False``), which let it stretch by
    6 mm at most and the ball part from MuJoCo's by 1 cm.
    """

    xml = "ball_in_cup.xml"
    #: the hard contact (``contact="hard"``, the default before): jaxdyn's Coulomb contact,
    #: cold, 100 projected gradient steps, over every slot
    HARD_CONTACT = _sim.Constraint(soft=False)
    contact = soft_contact()
    CONTACT_MODELS = {"soft": contact, "hard": HARD_CONTACT}
    mujoco_limits = "constraint"
    #: the string's spring-damper limit with ``mujoco_limits = False``
    #: (:class:`jaxdyn.sim.JointLimits`; the model has no joint limits)
    string_limits = _sim.JointLimits()
    metric_keys = ()

    def __init__(
        self,
        *,
        ctrl_dt: float = 0.02,
        sim_dt: float = 0.002,
        reset_tries: int = 16,
        reset: str = "random",
        solver_iterations: int | None = None,
        max_contacts: int | None = None,
        solver_tolerance: float | None = None,
        warm_start: bool | None = None,
        solver_polish: bool | None = None,
        contact: str | None = None,
        contact_report: bool = True,
    ) -> None:
        self.set_reset_tries(reset_tries)
        super().__init__(
            ctrl_dt=ctrl_dt,
            sim_dt=sim_dt,
            solver_iterations=solver_iterations,
            max_contacts=max_contacts,
            solver_tolerance=solver_tolerance,
            warm_start=warm_start,
            solver_polish=solver_polish,
            contact=contact,
            contact_report=contact_report,
        )
        self.set_reset_mode(reset)
        import equinox as eqx

        self.sys = eqx.tree_at(lambda s: s.cfg.limits, self.sys, self.string_limits)
        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        t = m.site("target").id
        self.half_size = np.asarray(m.site_size[t, [0, 2]], float)
        self.ball_radius = float(m.geom_size[m.geom("ball").id, 0])
        self.target_frames = [self.scene.site_frames["target"], "ball"]

    def state_sensors(self, pk: _sim.State) -> dict[str, Array]:
        _, p = self.frames(pk.q, self.target_frames)
        return {"ball_to_target": (p[0] - p[1])[jnp.array([0, 2])]}

    def observe(self, ps: _sim.State, sensors: dict[str, Array]) -> Array:
        return jnp.concatenate([self.qpos(ps.q), self.qpos(ps.v)])

    def reward(
        self, ps: _sim.State, sensors: dict[str, Array], action: Array
    ) -> tuple[Array, dict[str, Array]]:
        inside = jnp.abs(sensors["ball_to_target"]) < self.half_size - self.ball_radius
        return jnp.all(inside).astype(ps.q.dtype), {}

    def draw_pose(self, rng: Array) -> Array:
        """The reset's configuration (jaxdyn's order): the first draw of the ball's position
        whose ball touches nothing (the first draw if none is free); ``qpos0`` with
        ``reset="qpos0"`` (:meth:`reset_pose`)."""

        def draw(key):
            r1, r2 = jax.random.split(key)
            x = jax.random.uniform(r1, (), minval=-0.2, maxval=0.2)
            z = jax.random.uniform(r2, (), minval=0.2, maxval=0.5)
            return self.q_of(jnp.stack([0.0, 0.0, x, z]))

        return self.reset_pose(rng, draw)

    def reset(self, rng: Array) -> State:
        rng = self.check_rng(rng)
        rng, r1 = jax.random.split(rng, 2)
        q = self.draw_pose(r1)
        return self.episode_start(rng, self.pipeline_init(q, jnp.zeros_like(q)))


class SuiteHumanoid(ContactSuiteEnv):
    """Humanoid (dm_control ``humanoid``: ``stand``, ``walk``, ``run``; Playground
    ``HumanoidStand`` / ``HumanoidWalk`` / ``HumanoidRun``): a 21-joint humanoid on a free
    root, motors (``ctrl`` in ``[-1, 1]``), standing up (``move_speed = 0``) or moving at
    ``move_speed`` (1: walk, 10: run) in any horizontal direction.

    **Observation (67):** the joint angles (``qpos[7:]``, 21), the head's height (``xpos``
    z), the hands and feet relative to the torso in its axes (12), the torso's z row of
    ``xmat`` (``zx``, ``zy``, ``zz``), the centre of mass velocity (the ``torso_subtreelinvel``
    sensor, world axes), ``qvel`` (27, MuJoCo's: the root's linear velocity in world axes).
    **Reward:** ``small_control * standing * upright * move`` with
    ``standing = tolerance(head height, (1.4, inf), margin=0.35)``,
    ``upright = tolerance(zz, (0.9, inf), sigmoid="linear", margin=1.9, value_at_margin=0)``,
    ``small_control = (4 + mean(tolerance(action, margin=1, value_at_margin=0,
    sigmoid="quadratic"))) / 5``; ``move`` for standing ``mean(tolerance(com velocity xy,
    margin=2))``, moving ``(5 tolerance(|com velocity xy|, (s, inf), margin=s,
    value_at_margin=0, sigmoid="linear") + 1) / 6``.
    **Reset:** dm_control's ``randomize_limited_and_rotational_joints``: the root at the
    model's position, its quaternion ``U(0, 1)^4`` normalised (dm_control's draw), the limited
    hinges uniform in their ranges, at rest; a draw whose bodies touch anything is replaced by
    the first of ``reset_tries - 1`` further draws that does not (one batch; Playground's port
    resets to ``qpos0``, standing: ``reset="qpos0"``). **Metrics:** ``reward/standing``,
    ``upright``, ``stand``, ``small_control``, ``move`` (Playground's). **Periods:** control
    0.025 s, simulation 0.005 s (dm_control's and Playground's). Contact: every pair the
    file declares, with the floor and between the bodies (frictionless, ``condim="1"``),
    MuJoCo's soft contact through its Newton solve (:func:`soft_contact`, Playground's MJX
    physics; its rollouts equal MuJoCo C's to rounding; ``contact="hard"``: jaxdyn's hard
    Coulomb contact, :attr:`HARD_CONTACT`, the default before) over the :attr:`MAX_CONTACTS`
    closest contact slots
    (``Constraint(max_contacts=...)``: the file's 161 pairs give 277 slots, of which a fall
    from standing holds at most about 70 candidates, so the capped solve equals the uncapped
    one there; the cap makes a step many times cheaper; ``info["contacts_dropped"]`` reports a
    step where it left out a touching contact); under the hard contact the geoms' ``solimp``
    is ignored by name (``sim_config(ignore=("solimp",))``, as :class:`FingerSpin`;
    :attr:`~ContactSuiteEnv.hard_sim_ignore`). Joint limits:
    MuJoCo's limit constraint (``mujoco_limits = "constraint"``: soft rows with the file's
    ``solimplimit``, solved with the contacts), as MuJoCo C steps the file; the default
    :class:`jaxdyn.sim.JointLimits` spring-damper is applied explicitly and is unstable at
    this time step on the light feet, where random actions drove it to diverge.
    """

    xml = "humanoid.xml"
    free_root = True
    #: contact slots the constraint solve keeps (the closest; ``jaxdyn.sim.contact_counts``
    #: counts a state's candidates)
    MAX_CONTACTS = 80
    #: the hard contact (``contact="hard"``, the default before): jaxdyn's Coulomb contact,
    #: cold, 100 projected gradient steps, over the :attr:`MAX_CONTACTS` closest slots; the
    #: geoms' ``solimp`` ignored by name (:attr:`~ContactSuiteEnv.hard_sim_ignore`), which it
    #: has no counterpart for
    HARD_CONTACT = _sim.Constraint(soft=False, max_contacts=MAX_CONTACTS)
    contact = soft_contact(max_contacts=MAX_CONTACTS)
    CONTACT_MODELS = {"soft": contact, "hard": HARD_CONTACT}
    hard_sim_ignore = ("solimp",)
    # MuJoCo's limit constraint (soft rows solved with the contacts): the default
    # spring-damper, explicit in the step, is unstable at the light feet (dt * damping / M up
    # to 3.8 at the ankles) and diverged under random actions (docs/environments.md)
    mujoco_limits = "constraint"
    STAND_HEIGHT = 1.4
    WALK_SPEED, RUN_SPEED = 1.0, 10.0
    metric_keys = (
        "reward/standing",
        "reward/upright",
        "reward/stand",
        "reward/small_control",
        "reward/move",
    )
    EXTREMITIES = ("left_hand", "left_foot", "right_hand", "right_foot")

    def __init__(
        self,
        move_speed: float = 0.0,
        *,
        ctrl_dt: float = 0.025,
        sim_dt: float = 0.005,
        reset_tries: int = 8,
        reset: str = "random",
        solver_iterations: int | None = None,
        max_contacts: int | None = None,
        solver_tolerance: float | None = None,
        warm_start: bool | None = None,
        solver_polish: bool | None = None,
        contact: str | None = None,
        contact_report: bool = True,
    ) -> None:
        self.set_reset_tries(reset_tries)
        super().__init__(
            ctrl_dt=ctrl_dt,
            sim_dt=sim_dt,
            solver_iterations=solver_iterations,
            max_contacts=max_contacts,
            solver_tolerance=solver_tolerance,
            warm_start=warm_start,
            solver_polish=solver_polish,
            contact=contact,
            contact_report=contact_report,
        )
        self.set_reset_mode(reset)
        self.move_speed = float(move_speed)
        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        hinges = np.arange(1, m.njnt)  # after the free root
        lo, hi = self.joint_ranges(hinges)
        free = ~np.asarray(m.jnt_limited[hinges], bool)
        self.lowers = np.where(free, -np.pi, lo)
        self.uppers = np.where(free, np.pi, hi)
        self.qpos0 = np.asarray(m.qpos0, float)

    def state_sensors(self, pk: _sim.State) -> dict[str, Array]:
        names = ["torso", "head", *self.EXTREMITIES]
        R, p = self.frames(pk.q, names)
        ext = jnp.einsum("kj,ji->ki", p[2:] - p[0], R[0])  # (p - p_torso) @ R_torso
        return {
            "head_height": p[1, 2],
            "extremities": ext.reshape(-1),
            "torso_vertical": R[0, 2, :],
            "com_velocity": self.subtree_linvel(pk),
        }

    def observe(self, ps: _sim.State, sensors: dict[str, Array]) -> Array:
        return jnp.concatenate(
            [
                self.qpos(ps.q)[7:],
                sensors["head_height"][None],
                sensors["extremities"],
                sensors["torso_vertical"],
                sensors["com_velocity"],
                self.qvel(ps.q, ps.v),
            ]
        )

    def reward(
        self, ps: _sim.State, sensors: dict[str, Array], action: Array
    ) -> tuple[Array, dict[str, Array]]:
        h = self.STAND_HEIGHT
        standing = tolerance(sensors["head_height"], (h, float("inf")), margin=h / 4)
        upright = tolerance(
            sensors["torso_vertical"][2],
            (0.9, float("inf")),
            sigmoid="linear",
            margin=1.9,
            value_at_margin=0,
        )
        small = tolerance(action, margin=1, value_at_margin=0, sigmoid="quadratic")
        small_control = (4 + jnp.mean(small)) / 5
        vxy = sensors["com_velocity"][:2]
        if self.move_speed == 0:
            move = jnp.mean(tolerance(vxy, margin=2))
        else:
            s = self.move_speed
            speed = jnp.sqrt(jnp.sum(vxy * vxy))
            move = tolerance(
                speed, (s, float("inf")), margin=s, value_at_margin=0, sigmoid="linear"
            )
            move = (5 * move + 1) / 6
        stand = standing * upright
        parts = dict(
            standing=standing, upright=upright, stand=stand, small_control=small_control, move=move
        )
        reward = small_control * stand * move
        return reward, {f"reward/{k}": v for k, v in parts.items()}

    def draw_pose(self, rng: Array) -> Array:
        """The reset's configuration (jaxdyn's order): the first draw whose bodies touch
        nothing (the first draw if none is free); ``qpos0`` with ``reset="qpos0"``
        (:meth:`reset_pose`)."""
        lo, hi = self.lowers, self.uppers
        qpos0 = jnp.asarray(self.qpos0)

        def draw(key):
            r1, r2 = jax.random.split(key)
            quat = jax.random.uniform(r1, (4,))
            quat = quat / jnp.linalg.norm(quat)
            hinges = jax.random.uniform(r2, lo.shape, minval=lo, maxval=hi)
            return self.q_of(jnp.concatenate([qpos0[:3], quat, hinges]))

        return self.reset_pose(rng, draw)

    def reset(self, rng: Array) -> State:
        rng = self.check_rng(rng)
        rng, r1 = jax.random.split(rng, 2)
        q = self.draw_pose(r1)
        return self.episode_start(rng, self.pipeline_init(q, jnp.zeros(self.sys.model.nv)))


# ---------------------------------------------------------------------- fish (a fluid)
class FishSwim(SuiteEnv):
    """Fish swim (dm_control ``fish`` ``swim``; Playground ``FishSwim``): a free-floating fish
    in a fluid (``<option density>``: MuJoCo's inertia-based fluid forces,
    :class:`jaxdyn.sim.Fluid`; gravity off) swims its mouth to a target; position actuators
    (``ctrl`` in ``[-1, 1]``) on the tail's two hinges, the fins' pitch hinges and a fixed
    tendon flapping the fins (``fins_flap``; a second, ``fins_sym``, a spring).

    **Observation (24, Playground's order; dm_control's puts ``upright`` after the joint
    angles):** ``upright`` (the torso's ``zz`` of ``xmat``), the joint angles of :attr:`JOINTS`
    (``tail1``, ``tail_twist``, ``tail2``, ``finright_roll``, ``finright_pitch``,
    ``finleft_roll``, ``finleft_pitch``: 7), the target minus the mouth in the mouth geom's
    axes (``(target - geom_xpos) @ geom_xmat``: 3), ``qvel`` (13, MuJoCo's: the root's linear
    velocity in world axes).
    **Reward:** ``(7 in_target + is_upright) / 8`` with ``in_target = tolerance(|target -
    mouth|, (0, radii), margin=2 radii)`` (``radii``: the mouth's and the target's radii) and
    ``is_upright = (upright + 1) / 2``. **Reset:** the root's quaternion a normalised normal
    draw, the joints of :attr:`JOINTS` ``~ U(-.2, .2)``, at rest, the target ``~ U`` over
    ``[-.4, .4] x [-.4, .4] x [.1, .3]`` in ``info["target"]`` (Playground's key splits). As in
    Playground, the root's position is the origin (``qpos`` zeros; dm_control keeps the
    model's ``qpos0``, the torso ``.1`` up), and the observation at reset still sees the target
    at the model's position (Playground moves its mocap body after ``mjx.forward``; here the
    target body is fixed, ``ignore=("mocap",)``: it only enters the observation and the
    reward). **Metrics:** ``reward/in_target``, ``reward/upright`` (Playground's).
    **Periods:** control 0.04 s (dm_control's; Playground's 1000 control steps are its 40 s
    time limit), simulation 0.002 s (Playground's; dm_control's file 0.004 s).

    The file is Playground's: dm_control's ``fish.xml`` with ``timestep`` halved, ``eulerdamp``
    and contact disabled, solver settings cut (without effect: constraints are disabled, so
    there are no constraint rows), the target a mocap body, and the torso's massive (hidden)
    geom a sphere instead of dm_control's thin box (a heavier torso, whose inertia box the
    fluid sees). It has no equality constraints, and MuJoCo computes no contact (``ncon ==
    0``: the file disables contact and constraints; dm_control's, its constraints), even where
    the fish, reset at the origin, overlaps the ground plane: contact stays off here too.
    """

    xml = "fish.xml"
    ignore = ("mocap",)
    free_root = True
    mujoco_order = False  # the tail's chain and the fins branch off the torso
    #: the observed joint angles, in order (dm_control's ``_JOINTS``)
    JOINTS = (
        "tail1",
        "tail_twist",
        "tail2",
        "finright_roll",
        "finright_pitch",
        "finleft_roll",
        "finleft_pitch",
    )
    #: the box the reset draws the target from
    TARGET_LOW, TARGET_HIGH = (-0.4, -0.4, 0.1), (0.4, 0.4, 0.3)
    _METRICS = ("reward/in_target", "reward/upright")

    def __init__(self, *, ctrl_dt: float = 0.04, sim_dt: float = 0.002) -> None:
        super().__init__(ctrl_dt=ctrl_dt, sim_dt=sim_dt)
        m: Any = self.scene.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
        mouth, target = m.geom("mouth"), m.geom("target")
        if m.body(m.geom_bodyid[mouth.id]).name != "torso" or np.any(m.geom_pos[target.id] != 0):
            raise ValueError(  # pragma: no cover - a property of the bundled file
                f"{type(self).__name__}: {self.xml}: expected the mouth on the torso and the "
                "target at its body's origin"
            )
        self.radii = float(m.geom_size[mouth.id, 0] + m.geom_size[target.id, 0])
        self.joint_qposadr = np.asarray([m.jnt_qposadr[m.joint(j).id] for j in self.JOINTS])
        self.mouth_pos = np.asarray(m.geom_pos[mouth.id], float)
        # the mouth geom's position and rotation in the torso's frame (geom_pos, geom_quat)
        w, x, y, z = np.asarray(m.geom_quat[mouth.id], float)
        self.mouth_rot = np.array(
            [
                [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
            ]
        )
        self.target_pos = np.asarray(m.body_pos[m.body("target").id], float)

    def upright_and_target(self, q: Array, target: Array) -> tuple[Array, Array]:
        """The torso's ``zz`` (dm_control's ``upright``) and the target minus the mouth in the
        mouth geom's axes (``mouth_to_target``) at ``q``."""
        R, p = self.frames(q, ["torso"])
        rot = R[0] @ jnp.asarray(self.mouth_rot, R.dtype)  # geom_xmat of the mouth
        mouth = p[0] + R[0] @ jnp.asarray(self.mouth_pos, p.dtype)  # its geom_xpos
        return R[0, 2, 2], (target - mouth) @ rot

    def observe(self, ps: _sim.State, qk: Array, target: Array) -> Array:
        upright, to_target = self.upright_and_target(qk, target)
        joints = self.qpos(ps.q)[self.joint_qposadr]
        return jnp.concatenate([upright[None], joints, to_target, self.qvel(ps.q, ps.v)])

    def reward(self, ps: _sim.State, qk: Array, target: Array) -> tuple[Array, dict[str, Array]]:
        """``(reward, metrics)`` of the state reached ``ps`` (``qk``: the configuration of the
        derived quantities, see the module docs) with the target at ``target``."""
        upright, to_target = self.upright_and_target(qk, target)
        in_target = tolerance(jnp.linalg.norm(to_target), (0.0, self.radii), margin=2 * self.radii)
        is_upright = 0.5 * (upright + 1)
        return (7 * in_target + is_upright) / 8, {
            "reward/in_target": in_target,
            "reward/upright": is_upright,
        }

    def reset(self, rng: Array) -> State:
        rng = self.check_rng(rng)
        rng, r1, r2, r3 = jax.random.split(rng, 4)
        quat = jax.random.normal(r1, (4,))
        joints = jax.random.uniform(r2, (len(self.JOINTS),), minval=-0.2, maxval=0.2)
        qpos = jnp.zeros(self.sys.model.nq).at[3:7].set(quat / jnp.linalg.norm(quat))
        qpos = qpos.at[self.joint_qposadr].set(joints)
        ps = self.pipeline_init(self.q_of(qpos), jnp.zeros(self.sys.model.nv))
        low, high = jnp.asarray(self.TARGET_LOW), jnp.asarray(self.TARGET_HIGH)
        target = jax.random.uniform(r3, (3,), minval=low, maxval=high).astype(ps.q.dtype)
        zero = jnp.zeros((), ps.q.dtype)
        # Playground: the model's target in the first observation
        obs = self.observe(ps, ps.q, jnp.asarray(self.target_pos, ps.q.dtype))
        metrics = {k: zero for k in self._METRICS} | {"diverged": zero}
        return State(ps, obs, zero, zero, metrics, {"rng": rng, "target": target})

    def step(self, state: State, action: Array) -> State:
        return self.target_step(state, action)

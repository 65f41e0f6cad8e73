"""The environment contract (Brax / MuJoCo Playground) and the jaxdyn simulation behind it.

An environment is unbatched and pure:

* ``reset(rng) -> State`` from one PRNG key;
* ``step(state, action) -> State`` with ``action (action_size,)``;
* :class:`State` holds ``pipeline_state`` (here a :class:`jaxdyn.sim.State`: ``q``, ``v``,
  ``t``), ``obs``, ``reward``, ``done`` (``1.0`` when the episode ended), ``metrics`` (a dict of
  scalars, the same keys after ``reset`` and ``step``; ``step`` keeps entries a wrapper added,
  as Brax's ``EvalWrapper`` adds ``reward``) and ``info`` (a dict of per-episode data,
  e.g. a target);
* properties ``observation_size``, ``action_size``, ``backend`` (``"jaxdyn"``), ``dt`` (the
  control period, s: ``n_frames`` simulator steps of ``cfg.dt``), ``unwrapped``; ``sys`` is
  the :class:`System` (model and simulator configuration) the environment steps, the
  attribute Brax's domain-randomisation wrapper swaps for a batch.

Batch with ``jax.vmap`` (or :class:`~jaxdyn.envs.wrappers.VmapWrapper`), compile with
``jax.jit``; :func:`jaxdyn.envs.wrap` adds episodes, auto-reset from a pool of initial states and
domain randomisation for training.

With Brax installed, :class:`Env`, :class:`Wrapper` and :class:`State` *are* Brax's
(``brax.envs.base``), so ``brax.training.agents.ppo.train`` / ``apg.train`` and Brax's own
wrappers take jaxdyn environments unchanged. Without it, equivalent classes defined here take
their place (:data:`HAS_BRAX` says which): ``State`` is a dataclass registered as a pytree with
a ``replace`` method.

Input checks: an action of the wrong shape raises ``ValueError`` naming ``action`` when the step is
traced; a non-finite action is caught under ``jit`` by jaxdyn's value checks
(:func:`jaxdyn.value_checks.error_if`, :mod:`jaxdyn.config`). A step that would leave the simulation
non-finite or faster than :attr:`SimEnv.divergence_speed` (it diverged) keeps the previous physics
state and ends the episode (``done = 1``, ``metrics["diverged"] = 1``), so a training run resets
that environment instead of stopping.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import TYPE_CHECKING, Any, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .. import sim as _sim
from .. import spatial, value_checks

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..model.model import Model


def _import_brax_envs_base():
    """``brax.envs.base``, or None without Brax (the ``rl`` extra). Brax imports MuJoCo's MJX,
    which prints ``Failed to import warp: ...`` twice where the optional NVIDIA Warp is not
    installed (it is not needed here): those two lines are dropped, anything else printed is
    passed on."""
    import contextlib
    import io
    import sys

    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            from brax.envs import base
    except ImportError:  # pragma: no cover - exercised by the no-brax test in a subprocess
        base = None
    finally:
        for line in printed.getvalue().splitlines(keepends=True):
            if not line.startswith(("Failed to import warp:", "Failed to import mujoco_warp:")):
                sys.stdout.write(line)
    return base


_brax_base = _import_brax_envs_base()

#: whether :class:`Env`, :class:`Wrapper` and :class:`State` are Brax's classes
HAS_BRAX = _brax_base is not None

__all__ = [
    "HAS_BRAX",
    "Env",
    "SimEnv",
    "State",
    "System",
    "Wrapper",
    "check_action",
    "check_rng",
    "check_state",
]

# Type checkers see the classes below, the interface jaxdyn's environments keep (Brax's fields
# and methods, with ``pipeline_state`` a jaxdyn.sim.State where Brax's annotation says
# brax.base.State, and the ``replace`` that flax's dataclass adds out of their sight).
if not TYPE_CHECKING and HAS_BRAX:
    State = _brax_base.State
    Env = _brax_base.Env
    Wrapper = _brax_base.Wrapper
else:

    @jax.tree_util.register_pytree_node_class
    @dataclasses.dataclass
    class State:
        """Environment state (the fields of ``brax.envs.base.State``)."""

        pipeline_state: Any
        obs: Any
        reward: Any
        done: Any
        metrics: dict = dataclasses.field(default_factory=dict)
        info: dict = dataclasses.field(default_factory=dict)

        def replace(self, **changes: Any) -> State:
            return dataclasses.replace(self, **changes)

        def tree_flatten(self) -> tuple[tuple[Any, ...], None]:
            return (
                self.pipeline_state,
                self.obs,
                self.reward,
                self.done,
                self.metrics,
                self.info,
            ), None

        @classmethod
        def tree_unflatten(cls, aux: Any, children: Any) -> State:
            return cls(*children)

    class Env(abc.ABC):
        """Interface for training and inference (that of ``brax.envs.base.Env``)."""

        @abc.abstractmethod
        def reset(self, rng: Array) -> State:
            """Resets the environment to an initial state."""

        @abc.abstractmethod
        def step(self, state: State, action: ArrayLike) -> State:
            """Runs one control period."""

        @property
        @abc.abstractmethod
        def observation_size(self) -> int:
            """Size of the observation vector."""

        @property
        @abc.abstractmethod
        def action_size(self) -> int:
            """Size of the action vector."""

        @property
        @abc.abstractmethod
        def backend(self) -> str:
            """The physics backend."""

        @property
        def unwrapped(self) -> Env:
            return self

    class Wrapper(Env):
        """Wraps an environment; attributes it does not define are the wrapped env's."""

        def __init__(self, env: Env) -> None:
            self.env = env

        def reset(self, rng: Array) -> State:
            return self.env.reset(rng)

        def step(self, state: State, action: ArrayLike) -> State:
            return self.env.step(state, action)

        @property
        def observation_size(self) -> int:
            return self.env.observation_size

        @property
        def action_size(self) -> int:
            return self.env.action_size

        @property
        def unwrapped(self) -> Env:
            return self.env.unwrapped

        @property
        def backend(self) -> str:
            return self.unwrapped.backend

        def __getattr__(self, name):
            if name == "__setstate__":
                raise AttributeError(name)
            return getattr(self.env, name)


class System(eqx.Module):
    """What an environment simulates: ``model`` (:class:`jaxdyn.Model`) and ``cfg``
    (:class:`jaxdyn.sim.SimConfig`: time step, integrator, actuator, contact, terrain).

    Both are pytrees whose array and float leaves (masses, inertias, gains, friction, contact
    stiffness, terrain) can be batched for domain randomisation: ``jax.vmap`` over a
    ``System`` with a matching ``in_axes`` tree (:func:`jaxdyn.envs.domain_randomization`).
    """

    model: Any
    cfg: _sim.SimConfig


def _is_key_array(x) -> bool:
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def contact_model(
    owner: str, contact: str | _sim.Compliant | _sim.Constraint, compliant, constraint
):
    """``contact`` as a contact model: a :class:`jaxdyn.sim.Compliant` /
    :class:`jaxdyn.sim.Constraint` as given, ``"compliant"`` / ``"constraint"`` as
    ``compliant()`` / ``constraint()`` (the task's defaults); anything else a ``ValueError``
    naming ``owner``."""
    if isinstance(contact, (_sim.Compliant, _sim.Constraint)):
        return contact
    if contact == "compliant":
        return compliant()
    if contact == "constraint":
        return constraint()
    raise ValueError(
        f"{owner}: contact must be 'compliant', 'constraint' or a jaxdyn.sim.Compliant / "
        f"Constraint, got {contact!r}"
    )


def check_rng(owner: str, rng: Any) -> Array:
    """One PRNG key: a raw ``uint32 (2,)`` key or a typed key of shape ``()``; raises
    ``ValueError`` naming ``rng`` otherwise (a batch of keys needs ``jax.vmap``)."""
    if _is_key_array(rng):
        if rng.shape != ():
            raise ValueError(
                f"{owner}.reset: rng is a batch of keys of shape {tuple(rng.shape)}; reset takes "
                "one key (batch with jax.vmap or jaxdyn.envs.VmapWrapper)"
            )
        return rng
    rng = jnp.asarray(rng)
    if rng.shape != (2,) or rng.dtype != jnp.uint32:
        extra = ""
        if rng.ndim == 2 and rng.shape[-1] == 2:
            extra = " (a batch of keys: batch with jax.vmap or jaxdyn.envs.VmapWrapper)"
        raise ValueError(
            f"{owner}.reset: rng must be one PRNG key (jax.random.PRNGKey(seed): uint32 of shape "
            f"(2,)), got {rng.dtype} of shape {tuple(rng.shape)}{extra}"
        )
    return rng


def check_action(owner: str, action: Any, size: int) -> Array:
    """``action`` as a float array of shape ``(size,)``: a wrong shape raises ``ValueError``
    naming ``action`` (at trace time); a non-finite entry fails a value check under jit when
    jaxdyn's value checks are on."""
    action = jnp.asarray(action)
    if action.shape != (size,):
        extra = ""
        if action.ndim == 2 and action.shape[1:] == (size,):
            extra = " (a batch: wrap the env in jax.vmap or jaxdyn.envs.VmapWrapper)"
        raise ValueError(
            f"{owner}.step: action has shape {tuple(action.shape)}, expected "
            f"(action_size,)=({size},){extra}"
        )
    if not jnp.issubdtype(action.dtype, jnp.floating):
        action = action.astype(jnp.float32)
    return value_checks.error_if(
        action,
        ~jnp.all(jnp.isfinite(action)),
        f"{owner}.step: action has a non-finite entry (NaN or inf)",
    )


_STATE_FIELDS = ("pipeline_state", "obs", "reward", "done", "metrics", "info")

_StateT = TypeVar("_StateT")


def check_state(owner: str, state: _StateT, info_keys: Sequence[str] = ()) -> _StateT:
    """``state`` as ``step`` expects it: an environment :class:`State` (from ``reset`` or
    ``step``: ``pipeline_state``, ``obs``, ``reward``, ``done``, ``metrics``, ``info``) whose
    ``pipeline_state`` is a :class:`jaxdyn.sim.State` and whose ``info`` holds ``info_keys``;
    raises ``TypeError`` (a wrong kind of state: ``None``, the simulator's state, ...) or
    ``ValueError`` (an ``info`` without a key the task keeps there) naming ``state``. Returns
    ``state`` itself (unchanged, like :func:`check_rng` and :func:`check_action` return what
    they checked)."""
    if not all(hasattr(state, f) for f in _STATE_FIELDS):
        kind = "None" if state is None else f"{type(state).__module__}.{type(state).__qualname__}"
        hint = ""
        if isinstance(state, _sim.State):
            hint = (
                ": that is the simulator's state, the environment State's pipeline_state; "
                "pass the State that reset or step returned"
            )
        raise TypeError(
            f"{owner}.step: state must be the environment State returned by reset or step "
            f"(fields {', '.join(_STATE_FIELDS)}), got {kind}{hint}"
        )
    fields: Any = state  # has the State fields (checked above)
    if not isinstance(fields.pipeline_state, _sim.State):
        raise TypeError(
            f"{owner}.step: state.pipeline_state must be a jaxdyn.sim.State, got "
            f"{type(fields.pipeline_state).__name__}"
        )
    info = fields.info
    missing = [k for k in info_keys if not isinstance(info, dict) or k not in info]
    if missing:
        raise ValueError(
            f"{owner}.step: state.info has no {', '.join(map(repr, missing))} (this task keeps "
            f"{', '.join(map(repr, info_keys))} there): pass the State that this environment's "
            "reset or step returned"
        )
    return state


class SimEnv(Env):
    """Base class of the jaxdyn tasks: a :class:`System` stepped by :func:`jaxdyn.sim.step`,
    the counterpart of Brax's ``PipelineEnv``.

    One control period is ``n_frames`` calls of :func:`jaxdyn.sim.step` (each ``cfg.dt``, in
    ``cfg.substeps`` integrator steps) under the same control, in a ``lax.scan``: the step is
    compiled once, however many frames.

    Subclasses implement ``reset``, ``step`` and ``action_size`` with the helpers
    :meth:`pipeline_init`, :meth:`pipeline_step` (one control period, divergence guarded),
    :meth:`check_state`, :meth:`check_action` and :meth:`check_rng`. The physics reads
    ``self.sys`` when traced, so swapping ``sys`` (as Brax's ``DomainRandomizationVmapWrapper``
    does) changes the dynamics.
    """

    #: a velocity coordinate faster than this (rad/s or m/s) counts as a diverged simulation
    divergence_speed: float = 1e3

    def __init__(self, model: Model, cfg: _sim.SimConfig, n_frames: int = 1) -> None:
        if not isinstance(cfg, _sim.SimConfig):
            raise TypeError(f"{type(self).__name__}: cfg must be a jaxdyn.sim.SimConfig")
        if isinstance(n_frames, bool) or not isinstance(n_frames, int) or n_frames < 1:
            raise ValueError(f"{type(self).__name__}: n_frames must be an integer >= 1")
        self.sys = System(model, cfg)
        self.n_frames = n_frames
        self._obs_size = None
        self._impulses: tuple | None = None  # pipeline_init's impulse length, per cfg

    # -- the system
    @property
    def model(self) -> Model:
        """The :class:`jaxdyn.Model` being simulated (``self.sys.model``)."""
        return self.sys.model

    @property
    def cfg(self) -> _sim.SimConfig:
        """The :class:`jaxdyn.sim.SimConfig` (``self.sys.cfg``)."""
        return self.sys.cfg

    @property
    def dt(self) -> float:
        """Control period (s) of one ``step``: ``n_frames * cfg.dt``."""
        return self.sys.cfg.dt * self.n_frames

    @property
    def backend(self) -> str:
        return "jaxdyn"

    @property
    def observation_size(self) -> int:
        if self._obs_size is None:
            s = jax.eval_shape(self.reset, jax.random.PRNGKey(0))
            self._obs_size = int(s.obs.shape[-1])
        return self._obs_size

    # -- helpers for subclasses
    def check_rng(self, rng: ArrayLike) -> Array:
        return check_rng(type(self).__name__, rng)

    def check_action(self, action: ArrayLike) -> Array:
        return check_action(type(self).__name__, action, self.action_size)

    def check_state(self, state: _StateT, info_keys: Sequence[str] = ()) -> _StateT:
        return check_state(type(self).__name__, state, info_keys)

    @property
    def act_size(self) -> int:
        """Number of actuator activations (MuJoCo's ``na``: :attr:`jaxdyn.sim.State.act` of
        an actuator with activation dynamics, :class:`jaxdyn.sim.GainBias`; 0 without)."""
        size = getattr(self.sys.cfg.actuator, "act_size", None)
        return int(size()) if size is not None else 0

    def pipeline_init(self, q: ArrayLike, v: ArrayLike, act: ArrayLike | None = None) -> _sim.State:
        """A :class:`jaxdyn.sim.State` at time 0, in the model's dtype; with activation
        dynamics (:attr:`act_size` > 0) it carries ``act`` (``(act_size,)``; zeros when not
        given, MuJoCo's reset), which :meth:`pipeline_step` advances with ``q`` and ``v``;
        with a warm-started constraint solve (:class:`jaxdyn.sim.Constraint`
        ``warm_start=True``) it carries zero ``impulses`` (:func:`jaxdyn.sim.warm_state`),
        which each step replaces with its solve's."""
        dtype = self.sys.model.mass.dtype
        na = self.act_size
        if na == 0:
            if act is not None and jnp.size(act):
                raise ValueError(
                    f"{type(self).__name__}: act given, but the actuator has no activations"
                )
            act = None
        elif act is None:
            act = jnp.zeros(na, dtype)
        else:
            act = jnp.asarray(act, dtype)
            if act.shape != (na,):
                raise ValueError(
                    f"{type(self).__name__}: act has shape {tuple(act.shape)}, expected "
                    f"(act_size,)=({na},)"
                )
        q, v = jnp.asarray(q, dtype), jnp.asarray(v, dtype)
        state = _sim.State(q, v, jnp.zeros((), dtype), act)
        # the impulses' length (static; jaxdyn.sim.warm_state traces a step's solve for it):
        # found once per configuration, model size and dtype, then zeros of it
        cfg = self.sys.cfg
        key = (self.sys.model.nq, self.sys.model.nv, jnp.dtype(dtype))
        cached = getattr(self, "_impulses", None)
        if cached is not None and cached[0] is cfg and cached[1] == key:
            n = cached[2]
            return state if n == 0 else _sim.State(q, v, state.t, act, jnp.zeros(n, dtype))
        state = _sim.warm_state(self.sys.model, state, cfg)
        n = 0 if state.impulses is None else int(state.impulses.shape[0])
        self._impulses = (cfg, key, n)
        return state

    def pipeline_step(self, pipeline_state: _sim.State, ctrl: Array) -> tuple[_sim.State, Array]:
        """One control period (``n_frames`` simulator steps) under ``ctrl``.

        **Returns:** ``(next_state, diverged)``: where the period produced a non-finite state or a
        speed above :attr:`divergence_speed`, ``next_state`` is ``pipeline_state`` itself and
        ``diverged`` is ``True``.
        """
        return self.pipeline_step_info(pipeline_state, ctrl)[:2]

    def pipeline_step_info(
        self, pipeline_state: _sim.State, ctrl: Array
    ) -> tuple[_sim.State, Array, dict[str, Array]]:
        """:meth:`pipeline_step` and the contact report of its frames
        (:func:`jaxdyn.sim.step_info`: ``contact_residual``, the largest of the frames',
        and ``contacts_dropped``, the most of a frame's): ``(next_state, diverged, info)``.
        A task puts ``info`` in its state's ``info`` (:meth:`contact_info` at reset)."""
        model, cfg = self.sys.model, self.sys.cfg
        vmax = self.divergence_speed

        def frame(s, _):
            n, info = _sim.step_info(model, s, ctrl, cfg)
            ok = jnp.all(jnp.isfinite(n.q)) & jnp.all(jnp.abs(n.v) < vmax)
            # a diverged frame keeps its input, so the next frame's input checks pass
            return jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), n, s), (ok, info)

        if self.n_frames == 1:
            nxt, (ok, info) = frame(pipeline_state, None)
        else:
            nxt, (ok, info) = jax.lax.scan(frame, pipeline_state, None, length=self.n_frames)
            ok = jnp.all(ok)
        bad = ~ok
        nxt = jax.tree_util.tree_map(lambda a, b: jnp.where(bad, b, a), nxt, pipeline_state)
        return nxt, bad, self.period_info(info, nxt.q.dtype)

    @classmethod
    def period_info(cls, infos: dict[str, Array], dtype: DTypeLike) -> dict[str, Array]:
        """A control period's contact report from its frames' reports ``infos`` (one frame's,
        or stacked along a leading axis): the largest of each entry, in the dtypes of
        :meth:`contact_info`."""
        zeros = cls.contact_info(dtype)
        return {k: jnp.max(x).astype(zeros[k].dtype) for k, x in infos.items()}

    @staticmethod
    def contact_info(dtype: DTypeLike) -> dict[str, Array]:
        """The contact report's entries before a first step (zeros): ``contact_residual``
        (``dtype``) and ``contacts_dropped`` (int32); see :meth:`pipeline_step_info`."""
        return {
            "contact_residual": jnp.zeros((), dtype),
            "contacts_dropped": jnp.zeros((), jnp.int32),
        }


def quat_to_matrix(quat):
    """Rotation matrix of a unit quaternion ``[w, x, y, z]`` (jaxdyn's scalar-first order):
    :func:`jaxdyn.spatial.quat_to_rot`."""
    return spatial.quat_to_rot(quat)


class LeggedEnv(SimEnv):
    """The body shared by the floating-base tasks under joint position servos
    (:class:`~jaxdyn.envs.quadruped.Quadruped`, :class:`~jaxdyn.envs.humanoid.HumanoidStand`).

    An action (one per actuated joint, model joint order) is clipped to ``[-1, 1]`` and sets
    the servo targets ``default_pose + action_scale * action``. The observation is the base
    height, (if :attr:`observe_position`) the base's horizontal position, the gravity direction
    in base axes, the base's angular and linear velocity in base axes, the joint angles minus
    the default pose, the joint velocities / 10 and the previous action (``info``'s
    ``last_action``). ``metrics["diverged"]`` is 1 after a diverged step, which ends the
    episode.

    A subclass sets ``n_joints``, ``default_pose`` and ``action_scale`` and implements
    :meth:`initial_pipeline` (the physics state after ``reset``), :meth:`initial_metrics` and
    :meth:`reward` (reward, whether the robot fell, metrics).
    """

    #: the observation holds the base's horizontal position
    observe_position: bool = False
    n_joints: int
    default_pose: Any
    action_scale: float

    @property
    def action_size(self) -> int:
        return self.n_joints

    def control(self, action: Array) -> Array:
        """PD targets from an action (clipped to ``[-1, 1]``)."""
        return self.default_pose + self.action_scale * jnp.clip(action, -1.0, 1.0)

    def observe(self, ps: _sim.State, last_action: Array) -> Array:
        R = quat_to_matrix(ps.q[3:7])
        gravity = R.T @ jnp.asarray([0.0, 0.0, -1.0], ps.q.dtype)
        return jnp.concatenate(
            [ps.q[2:3]]
            + ([ps.q[:2]] if self.observe_position else [])
            + [
                gravity,
                ps.v[:3],
                ps.v[3:6],
                ps.q[7:] - self.default_pose,
                0.1 * ps.v[6:],
                last_action,
            ]
        )

    @abc.abstractmethod
    def initial_pipeline(self, rng: Array) -> _sim.State:
        """The physics state after ``reset`` (:meth:`SimEnv.pipeline_init`)."""

    @abc.abstractmethod
    def initial_metrics(self, ps: _sim.State, dtype: DTypeLike) -> dict:
        """``reset``'s metrics (without ``diverged``)."""

    @abc.abstractmethod
    def reward(self, ps: _sim.State, action: Array) -> tuple:
        """``(reward, fell, metrics)`` after a step to ``ps`` under the clipped ``action``
        (metrics without ``diverged``)."""

    def reset(self, rng: Array) -> State:
        ps = self.initial_pipeline(self.check_rng(rng))
        dtype = ps.q.dtype
        zero = jnp.zeros((), dtype)
        last = jnp.zeros(self.n_joints, dtype)
        metrics = {**self.initial_metrics(ps, dtype), "diverged": zero}
        info = {"last_action": last, **self.contact_info(dtype)}
        return State(ps, self.observe(ps, last), zero, zero, metrics, info)

    def step(self, state: State, action: Array) -> State:
        self.check_state(state)
        action = jnp.clip(self.check_action(action), -1.0, 1.0)
        ps, bad, contact = self.pipeline_step_info(state.pipeline_state, self.control(action))
        reward, fell, metrics = self.reward(ps, action)
        done = (fell | bad).astype(reward.dtype)
        metrics = {**metrics, "diverged": bad.astype(reward.dtype)}
        info = {**state.info, **contact}
        info["last_action"] = action
        return state.replace(
            pipeline_state=ps,
            obs=self.observe(ps, action),
            reward=reward,
            done=done,
            metrics={**state.metrics, **metrics},
            info=info,
        )

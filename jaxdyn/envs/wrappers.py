"""Training wrappers: batching, episodes, auto-reset from a pool of initial states, domain
randomisation.

:func:`wrap` has the signature of ``brax.envs.training.wrap`` and of the trainers'
``wrap_env_fn``, so ``brax.training.agents.ppo.train(env, ..., wrap_env_fn=jaxdyn.envs.wrap)``
trains with these wrappers; Brax's own ``wrap`` accepts jaxdyn environments too.

The difference is the reset. Brax's ``AutoResetWrapper`` caches the first state of each
environment and restarts every later episode from it, so an environment sees one initial state
(and one target) for the whole run. :class:`AutoResetWrapper` here draws, when the batch is
reset, a pool of ``pool_size`` initial states per environment (``jax.vmap`` of the inner
``reset``, on device), keeps it in ``state.info["reset_pool"]``, and restarts a finished episode
from a pool entry picked at random (``state.info["reset_rng"]``): pipeline state, observation
and the task's own ``info`` entries (targets, ...) are replaced; episode bookkeeping is not.
Under domain randomisation each environment's pool is drawn with its own model.

Domain randomisation (:class:`DomainRandomizationVmapWrapper`, as Brax's) vmaps the unbatched
environment over a batch of :class:`~jaxdyn.envs.base.System` (model + simulator
configuration) with an ``in_axes`` tree; :func:`domain_randomization` builds such a function
for link masses, friction, contact stiffness and actuator gains.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp

from .base import State, Wrapper

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike

    from .base import Env, System

__all__ = [
    "AutoResetWrapper",
    "DomainRandomizationVmapWrapper",
    "EpisodeWrapper",
    "VmapWrapper",
    "domain_randomization",
    "wrap",
]

#: ``info`` entries that belong to the wrappers (kept across an auto-reset)
BOOKKEEPING = frozenset(
    {
        "steps",
        "truncation",
        "episode_done",
        "episode_metrics",
        "eval_metrics",
        "first_pipeline_state",
        "first_obs",
        "reset_pool",
        "reset_rng",
        "time_out",
    }
)


def wrap(
    env: Env,
    episode_length: int = 1000,
    action_repeat: int = 1,
    randomization_fn: Callable | None = None,
    pool_size: int = 16,
) -> Wrapper:
    """The training wrapper stack: :class:`VmapWrapper` (or
    :class:`DomainRandomizationVmapWrapper` with ``randomization_fn``), :class:`EpisodeWrapper`,
    :class:`AutoResetWrapper` with ``pool_size`` initial states per environment.

    ``randomization_fn(sys) -> (sys_batch, in_axes)``: the trainers pass
    ``functools.partial(fn, rng=keys)`` with one key per environment (see
    :func:`domain_randomization`).
    """
    if randomization_fn is None:
        env = VmapWrapper(env)
    else:
        env = DomainRandomizationVmapWrapper(env, randomization_fn)
    env = EpisodeWrapper(env, episode_length, action_repeat)
    return AutoResetWrapper(env, pool_size=pool_size)


class VmapWrapper(Wrapper):
    """Batches an environment: ``reset(keys (B, 2))``, ``step(states, actions (B, n))``; with
    ``batch_size``, ``reset`` takes one key and splits it."""

    def __init__(self, env: Env, batch_size: int | None = None) -> None:
        super().__init__(env)
        self.batch_size = batch_size

    def reset(self, rng: Array) -> State:
        if self.batch_size is not None:
            rng = jax.random.split(rng, self.batch_size)
        return jax.vmap(self.env.reset)(rng)

    def step(self, state: State, action: ArrayLike) -> State:
        return jax.vmap(self.env.step)(state, action)


class EpisodeWrapper(Wrapper):
    """Counts steps, ends episodes after ``episode_length`` steps (``info["truncation"] = 1``
    when the time limit, not the task, ended it), repeats each action ``action_repeat`` times
    (rewards summed) and accumulates ``info["episode_metrics"]`` (Brax's semantics)."""

    def __init__(self, env: Env, episode_length: int, action_repeat: int = 1) -> None:
        super().__init__(env)
        if int(episode_length) < 1 or int(action_repeat) < 1:
            raise ValueError(
                f"EpisodeWrapper: episode_length and action_repeat must be >= 1, got "
                f"{episode_length}, {action_repeat}"
            )
        self.episode_length = int(episode_length)
        self.action_repeat = int(action_repeat)

    def reset(self, rng: Array) -> State:
        state = self.env.reset(rng)
        zeros = jnp.zeros_like(state.reward)
        info = dict(state.info)
        info["steps"] = zeros
        info["truncation"] = zeros
        info["episode_done"] = zeros
        em = {"sum_reward": zeros, "length": zeros}
        em.update({k: zeros for k in state.metrics})
        info["episode_metrics"] = em
        return state.replace(info=info)

    def step(self, state: State, action: ArrayLike) -> State:
        def f(s, _):
            ns = self.env.step(s, action)
            return ns, ns.reward

        state, rewards = jax.lax.scan(f, state, (), self.action_repeat)
        reward = jnp.sum(rewards, axis=0)
        info = dict(state.info)
        steps = info["steps"] + self.action_repeat
        limit = steps >= self.episode_length
        done = jnp.where(limit, jnp.ones_like(state.done), state.done)
        info["truncation"] = jnp.where(limit, 1 - state.done, jnp.zeros_like(state.done))
        info["steps"] = steps
        prev = info["episode_done"]
        em = dict(info["episode_metrics"])
        em["sum_reward"] = em["sum_reward"] * (1 - prev) + reward
        em["length"] = em["length"] * (1 - prev) + self.action_repeat
        for k, v in state.metrics.items():
            if k != "reward":
                em[k] = em[k] * (1 - prev) + v
        info["episode_metrics"] = em
        info["episode_done"] = done
        return state.replace(reward=reward, done=done, info=info)


def _task_info_keys(env) -> tuple:
    """The ``info`` keys the unwrapped environment's ``reset`` creates (the task's own)."""
    base = env.unwrapped
    shape = jax.eval_shape(base.reset, jax.random.PRNGKey(0))
    return tuple(k for k in shape.info if k not in BOOKKEEPING)


class AutoResetWrapper(Wrapper):
    """Restarts finished episodes from a pool of ``pool_size`` initial states per environment
    drawn when the batch is reset (see the module docstring); works on a batched environment
    (``done`` of shape ``(B,)``) or an unbatched one (``done`` scalar)."""

    def __init__(self, env: Env, pool_size: int = 16) -> None:
        super().__init__(env)
        if int(pool_size) < 1:
            raise ValueError(f"AutoResetWrapper: pool_size must be >= 1, got {pool_size}")
        self.pool_size = int(pool_size)
        self._task_keys = None

    def _keys(self):
        if self._task_keys is None:
            self._task_keys = _task_info_keys(self.env)
        return self._task_keys

    def reset(self, rng: Array) -> State:
        state = self.env.reset(rng)
        batched = state.done.ndim == 1
        split = lambda k: jax.random.split(k, self.pool_size + 1)
        keys = jax.vmap(split)(rng) if batched else split(rng)  # (B, K+1, 2) or (K+1, 2)
        pool_keys = jnp.swapaxes(keys[:, 1:], 0, 1) if batched else keys[1:]
        own = keys[:, 0] if batched else keys[0]
        pool = jax.vmap(self.env.reset)(pool_keys)  # leading axis K
        entry = {
            "pipeline_state": pool.pipeline_state,
            "obs": pool.obs,
            "info": {k: pool.info[k] for k in self._keys()},
        }
        if batched:  # (K, B, ...) -> (B, K, ...)
            entry = jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), entry)
        info = dict(state.info)
        info["reset_pool"] = entry
        info["reset_rng"] = own
        return state.replace(info=info)

    def step(self, state: State, action: ArrayLike) -> State:
        info = dict(state.info)
        if "steps" in info:
            info["steps"] = jnp.where(state.done, jnp.zeros_like(info["steps"]), info["steps"])
        state = state.replace(done=jnp.zeros_like(state.done), info=info)
        state = self.env.step(state, action)
        info = dict(state.info)
        pool, rng = info["reset_pool"], info["reset_rng"]
        current = {
            "pipeline_state": state.pipeline_state,
            "obs": state.obs,
            "info": {k: info[k] for k in self._keys()},
        }

        def restart(done, current, pool, rng):
            rng, sub = jax.random.split(rng)
            i = jax.random.randint(sub, (), 0, self.pool_size)
            fresh = jax.tree_util.tree_map(lambda x: x[i], pool)
            out = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), fresh, current)
            return out, rng

        if state.done.ndim == 1:
            restart = jax.vmap(restart)
        new, rng = restart(state.done, current, pool, rng)
        info.update(new["info"])
        info["reset_rng"] = rng
        return state.replace(pipeline_state=new["pipeline_state"], obs=new["obs"], info=info)


def _with_system(env: Env) -> Any:
    """The unwrapped environment, which holds the ``sys`` being randomised (a :class:`SimEnv`,
    or Brax's ``PipelineEnv``: typed ``Any``, the attribute no part of the ``Env`` interface)."""
    return env.unwrapped


class DomainRandomizationVmapWrapper(Wrapper):
    """Batches an environment over a batch of systems: ``randomization_fn(env.sys)`` returns
    ``(sys_batch, in_axes)``, ``reset`` / ``step`` are ``jax.vmap``-ed over
    ``(sys_batch, keys or states)`` with ``in_axes`` for the systems (Brax's wrapper; the
    unwrapped environment's ``sys`` is swapped while the batched functions are traced)."""

    def __init__(self, env: Env, randomization_fn: Callable) -> None:
        super().__init__(env)
        self._sys_v, self._in_axes = randomization_fn(_with_system(self.env).sys)

    @contextlib.contextmanager
    def _with_sys(self, sys):
        env = _with_system(self.env)
        old = env.sys
        try:
            env.sys = sys
            yield env
        finally:
            env.sys = old

    def reset(self, rng: Array) -> State:
        def reset(sys, key):
            with self._with_sys(sys) as e:
                return e.reset(key)

        return jax.vmap(reset, in_axes=(self._in_axes, 0))(self._sys_v, rng)

    def step(self, state: State, action: ArrayLike) -> State:
        def step(sys, s, a):
            with self._with_sys(sys) as e:
                return e.step(s, a)

        return jax.vmap(step, in_axes=(self._in_axes, 0, 0))(self._sys_v, state, action)


def _uniform(key, n, bounds, dtype):
    lo, hi = bounds
    return jax.random.uniform(key, (n,), dtype, minval=lo, maxval=hi)


def domain_randomization(
    mass_scale: tuple | None = (0.8, 1.2),
    friction: tuple | None = (0.5, 1.25),
    stiffness_scale: tuple | None = None,
    gain_scale: tuple | None = None,
) -> Callable[[System, Array], tuple[System, Any]]:
    """A ``randomization_fn(sys, rng) -> (sys_batch, in_axes)`` for
    :func:`wrap` / :class:`DomainRandomizationVmapWrapper` and Brax's trainers
    (``ppo.train(..., randomization_fn=...)``), one system per key of ``rng (B, 2)``:

    - ``mass_scale=(lo, hi)``: each body's mass and rotational inertia times a factor drawn
      uniformly per body (centres of mass unchanged);
    - ``friction=(lo, hi)``: the contact model's Coulomb coefficient, drawn per environment;
    - ``stiffness_scale=(lo, hi)``: the compliant contact's stiffness times a factor (needs an
      explicit ``stiffness`` in :class:`jaxdyn.sim.Compliant`);
    - ``gain_scale=(lo, hi)``: the actuator's ``kp`` (:class:`~jaxdyn.envs.actuators.ServoPD`,
      :class:`jaxdyn.sim.PD`) or ``gear`` (torque actuators) times a factor.

    ``None`` leaves a quantity alone. ``in_axes`` is ``0`` on the randomised leaves and ``None``
    elsewhere, so the rest of the system is shared, not copied.
    """

    def randomize(sys, rng):
        rng = jnp.asarray(rng)
        if rng.ndim != 2:
            raise ValueError(
                f"domain_randomization: rng must be a batch of keys (B, 2), got shape "
                f"{tuple(rng.shape)}"
            )
        B = rng.shape[0]
        dtype = sys.model.mass.dtype
        k_mass, k_fric, k_stiff, k_gain = jnp.moveaxis(
            jax.vmap(jax.random.split, (0, None))(rng, 4), 1, 0
        )
        new, where = [], []

        def batch(x):
            return jnp.broadcast_to(jnp.asarray(x, dtype), (B,) + jnp.shape(x))

        if mass_scale is not None:
            nb = sys.model.mass.shape[0]
            s = jax.vmap(lambda k: _uniform(k, nb, mass_scale, dtype))(k_mass)  # (B, nb)
            new += [sys.model.mass * s, sys.model.inertia * s[:, :, None, None]]
            where += [lambda t: t.model.mass, lambda t: t.model.inertia]
        contact = sys.cfg.contact
        if friction is not None and contact is not None:
            mu = jax.vmap(lambda k: _uniform(k, 1, friction, dtype)[0])(k_fric)
            new.append(mu)
            where.append(lambda t: t.cfg.contact.friction)
        if stiffness_scale is not None:
            if contact is None or getattr(contact, "stiffness", None) is None:
                raise ValueError(
                    "domain_randomization: stiffness_scale needs a Compliant contact with an "
                    "explicit stiffness"
                )
            s = jax.vmap(lambda k: _uniform(k, 1, stiffness_scale, dtype)[0])(k_stiff)
            new.append(batch(contact.stiffness) * s)
            where.append(lambda t: t.cfg.contact.stiffness)
        if gain_scale is not None:
            act = sys.cfg.actuator
            name = "kp" if hasattr(act, "kp") else "gear"
            s = jax.vmap(lambda k: _uniform(k, 1, gain_scale, dtype)[0])(k_gain)
            base = jnp.asarray(getattr(act, name), dtype)
            new.append(base[None] * s.reshape((B,) + (1,) * base.ndim))
            where.append(lambda t, name=name: getattr(t.cfg.actuator, name))
        if not new:
            raise ValueError("domain_randomization: nothing to randomise")
        get = lambda t: tuple(w(t) for w in where)
        sys_v = eqx.tree_at(get, sys, tuple(new), is_leaf=lambda x: x is None)
        in_axes = jax.tree_util.tree_map(lambda _: None, sys)
        in_axes = eqx.tree_at(get, in_axes, (0,) * len(new), is_leaf=lambda x: x is None)
        return sys_v, in_axes

    return randomize

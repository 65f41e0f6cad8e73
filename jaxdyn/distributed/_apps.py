"""Rollouts, batched trajectory problems and PPO over every process's devices; checkpoints."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import sim
from ._runtime import (
    _allgather_host,
    assert_same,
    gather,
    global_mesh,
    local_part,
    to_global,
)

if TYPE_CHECKING:
    from jax.sharding import Mesh
    from jax.typing import ArrayLike

    from ..model.model import Model
    from ..trajopt.ddp import Problem, Result

# ----------------------------------------------------------------------------- checkpoints


def _file(path) -> Path:
    path = Path(path)
    return path.with_name(f"{path.name}.process{jax.process_index()}-of-{jax.process_count()}.eqx")


def save(path: str | os.PathLike, tree: Any) -> Path:
    """Write this process's share of ``tree`` (global arrays: the samples on its devices;
    anything else: as it is) to ``<path>.process<i>-of-<n>.eqx``, one file per process (no
    shared file system needed), with equinox's leaf serialisation
    (``equinox.tree_serialise_leaves``: NumPy's format per leaf, read back into a template of
    the same structure). The file is written under a temporary name and renamed, so a process
    ended while writing leaves the previous file whole. Returns the file's path."""
    target = _file(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    eqx.tree_serialise_leaves(tmp, local_part(tree))
    os.replace(tmp, target)
    return target


def load(path: str | os.PathLike, like: Any) -> Any:
    """Read what :func:`save` wrote for this process, into the structure of ``like`` (this
    process's share: its shapes and dtypes). ``FileNotFoundError`` names the file (a run
    resumed with another number of processes looks for other files)."""
    target = _file(path)
    if not target.exists():
        raise FileNotFoundError(
            f"load: no checkpoint {target} for process {jax.process_index()} of "
            f"{jax.process_count()}"
        )
    like = jax.tree_util.tree_map(np.asarray, like)
    return eqx.tree_deserialise_leaves(target, like)


# ----------------------------------------------------------------------------- rollouts


_ROLLOUTS: list = []  # (model, cfg, policy, n_steps, mesh, compiled function), newest last


def _rollout_fn(model, cfg, policy, n_steps, mesh):
    """The sharded rollout of these objects, built once: a new ``sharded_vmap`` is a new
    ``jax.jit`` and would compile again at every call (the objects are kept, so their ids
    stay theirs)."""
    for m, c, p, n, me, fn in _ROLLOUTS:
        if m is model and c is cfg and p is policy and n == n_steps and me == mesh:
            return fn
    if policy is None:
        fn = sim.sharded_vmap(lambda s, u: sim.rollout(model, s, u, cfg=cfg), mesh)
    else:
        fn = sim.sharded_vmap(
            lambda s: sim.rollout(model, s, cfg=cfg, policy=policy, n_steps=n_steps), mesh
        )
    _ROLLOUTS.append((model, cfg, policy, n_steps, mesh, fn))
    del _ROLLOUTS[:-8]
    return fn


def rollout(
    model: Model,
    states: sim.State,
    controls: ArrayLike | None = None,
    *,
    cfg: sim.SimConfig,
    policy: Callable[[sim.State], ArrayLike] | None = None,
    n_steps: int | None = None,
    mesh: Mesh | None = None,
    checkpoint: str | os.PathLike | None = None,
    segment: int | None = None,
) -> sim.State:
    """A batched :func:`jaxdyn.sim.rollout` split over every device of every process.

    ``states`` (and ``controls (B, T, nu)``, open loop, or ``policy`` with ``n_steps``) are
    this process's share of the batch: the same number of samples on every process, a multiple
    of its devices (:func:`check_batch`); ``model`` and ``cfg`` must be the same on every
    process (:func:`assert_same`: a differing one raises on every process). Each device steps
    its samples with the one-device program (:func:`jaxdyn.sim.sharded_vmap`).

    ``checkpoint`` (a path stem) with ``segment`` (steps): the rollout runs in segments of
    ``segment`` steps, each segment's states saved (:func:`save`) before the next starts; run
    again after an interruption with the same arguments, it reads back the segments that every
    process saved and steps only the rest. The trajectory equals the uninterrupted one.

    The call waits for this process's devices, so
    that a check failed on one of them raises its message here, on that process.

    **Returns:** the global trajectory (a :class:`jaxdyn.sim.State` of global arrays,
    ``(B, T, ...)``, ``B`` the global batch); :func:`gather` brings it to every process."""
    mesh = global_mesh() if mesh is None else mesh
    assert_same("rollout: the model", model)
    assert_same("rollout: cfg", cfg)
    if (controls is None) == (policy is None):
        raise ValueError("rollout: give exactly one of controls (B, T, nu) or policy=callable")
    u = None if controls is None else np.asarray(controls)
    if u is None:
        if n_steps is None:
            raise ValueError("rollout: a policy needs n_steps")
        T = int(n_steps)
    else:
        if u.ndim != 3:
            raise ValueError(
                f"rollout: controls has shape {u.shape}, expected (B, T, nu): this "
                "process's batch of open-loop controls"
            )
        T = u.shape[1]
    local_states = jax.tree_util.tree_map(np.asarray, states)
    if local_states.t.ndim == 0:  # one time for the whole batch
        local_states = sim.State(
            local_states.q,
            local_states.v,
            np.full(np.shape(local_states.q)[:1], local_states.t, local_states.t.dtype),
        )
    batch = (local_states,) if u is None else (local_states, u)
    g = to_global(batch, mesh, name="rollout")
    if checkpoint is None:
        # waited for: a failed value check raises here, on the process whose devices failed it
        return jax.block_until_ready(_rollout_fn(model, cfg, policy, T, mesh)(*g))
    if segment is None or int(segment) < 1:
        raise ValueError(f"rollout: a checkpoint needs segment >= 1 (steps), got {segment!r}")
    segment = int(segment)
    bounds = [(a, min(a + segment, T)) for a in range(0, T, segment)]

    def stem(k):
        return f"{checkpoint}.segment{k:06d}"

    # the segments every process has (a process ended mid-run may have saved one more)
    have = 0
    while have < len(bounds) and _file(stem(have)).exists():
        have += 1
    have = int(_allgather_host([have]).min())
    pieces = []
    state = g[0]
    for k, (a, b) in enumerate(bounds):
        if k < have:
            like = jax.tree_util.tree_map(
                lambda x: np.zeros((x.shape[0], b - a) + x.shape[1:], x.dtype), local_states
            )
            piece = to_global(load(stem(k), like), mesh, name="rollout (checkpoint)")
        else:
            args = (state,) if u is None else (state, to_global(u[:, a:b], mesh))
            piece = _rollout_fn(model, cfg, policy, b - a, mesh)(*args)
            save(stem(k), piece)
        pieces.append(piece)
        state = jax.tree_util.tree_map(lambda x: x[:, -1], piece)
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs, axis=1), *pieces)


# ----------------------------------------------------------------------------- trajopt


def solve_sharded(
    problems: Problem,
    xs: ArrayLike | None = None,
    us: ArrayLike | None = None,
    **options: Any,
) -> Result:
    """:func:`jaxdyn.trajopt.solve_sharded` over every device of every process: every process
    passes the whole batch of problems (the same on each: :func:`assert_same`), each device
    solves its share, and every process gets the whole :class:`jaxdyn.trajopt.Result` back as
    NumPy arrays. ``options`` as :func:`jaxdyn.trajopt.solve_sharded` (``devices`` defaults to
    every device of every process)."""
    from ..trajopt import ddp

    assert_same("solve_sharded: the problems", (problems, xs, us))
    options.setdefault("devices", list(global_mesh().devices.flat))
    return gather(ddp.solve_sharded(problems, xs, us, **options))


# ----------------------------------------------------------------------------- PPO


def train_ppo(environment: Any, **ppo_options: Any) -> tuple[Any, Any, Any]:
    """Brax's PPO (``brax.training.agents.ppo.train``) on a jaxdyn environment, over every
    device of every process: Brax ``pmap``s its training step over each process's devices and
    averages the gradients over every device of every process (``lax.pmean`` over the cluster's
    devices), each process stepping ``num_envs / process_count`` environments. The
    environment's model must be the same on every process (:func:`assert_same`: a differing
    one raises on every process). ``ppo_options``: ``ppo.train``'s (``num_envs`` a multiple of
    the number of devices; its ``save_checkpoint_path`` / ``restore_checkpoint_path`` save and
    restore the policy with Orbax). Returns ``ppo.train``'s ``(make_policy, params,
    metrics)``, the same on every process.

    Brax evaluates the policy on process 0 only, while the others go on into the next training
    step and wait there: on CPUs, Gloo gives up on a collective that a process has not joined
    within 30 s, so an evaluation that compiles or runs longer ends the run. Pass
    ``run_evals=False`` there (and evaluate separately, e.g. after training)."""
    from brax.training.agents.ppo import train as ppo

    from .. import envs

    envs.brax_compat()
    model = getattr(environment, "model", None)
    assert_same("train_ppo: the environment", (type(environment).__name__, model))
    n = jax.device_count()
    num_envs = int(ppo_options.get("num_envs", 1))
    if num_envs % n:
        raise ValueError(
            f"train_ppo: num_envs = {num_envs} is not a multiple of the {n} devices of the "
            f"{jax.process_count()} processes"
        )
    return ppo.train(environment=environment, **ppo_options)

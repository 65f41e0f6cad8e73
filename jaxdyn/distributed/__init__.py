"""Runs across several processes (one per host) with JAX's multi-controller runtime.

Every process runs the same program; :func:`initialize` joins them (``jax.distributed``), after
which ``jax.devices()`` lists every device of every process and a one-axis mesh over them
(:func:`global_mesh`) splits a batch across the whole cluster. Each process holds and feeds its
own share of the batch (:func:`to_global`), each device steps its samples with the one-device
program (:func:`jaxdyn.sim.sharded_vmap`, ``jax.shard_map``), and :func:`gather` brings the
results back to every process. On CPUs the processes talk through Gloo
(``jax_cpu_collectives_implementation``); on GPUs through NCCL.

What is here (the recipe and the checks are in ``docs/distributed.md``):

* :func:`initialize`: ``jax.distributed.initialize`` from arguments, from ``JAXDYN_COORDINATOR``
  / ``JAXDYN_NUM_PROCESSES`` / ``JAXDYN_PROCESS_ID`` (set by :func:`launch`), or from what a
  cluster scheduler sets (SLURM, Open MPI, ...: JAX's own detection);
* :func:`assert_same`: a value (a model, a configuration, a batch of problems) that must be the
  same on every process, compared through a fingerprint of its leaves and structure exchanged
  between the processes: a difference raises on every process, naming the processes;
* :func:`to_global` / :func:`gather`: process-local batches to one global array split over the
  mesh (the batch sizes compared across processes first) and back;
* :func:`rollout`: a batched rollout split over every device, optionally in segments saved to a
  checkpoint directory (:func:`save` / :func:`load`, equinox's leaf serialisation, one file per
  process) so that a preempted job resumes where it stopped;
* :func:`solve_sharded`: :func:`jaxdyn.trajopt.solve_sharded` over every device of the cluster;
* :func:`train_ppo`: Brax's PPO (``brax.training.agents.ppo``) on a jaxdyn environment, its
  gradients averaged across every device of every process;
* :func:`launch` (``python -m jaxdyn.distributed -n N script.py ...``): start N local processes
  on the loopback address and end them all as soon as one fails, with its message;
  :func:`main`: run a function in a worker so that an exception ends the process at once (JAX's
  exit handler would otherwise wait for the other processes at a shutdown barrier).
"""

from __future__ import annotations

from ._apps import load, rollout, save, solve_sharded, train_ppo
from ._launch import LaunchError, free_port, launch, main
from ._runtime import (
    ENV_COORDINATOR,
    ENV_LOCAL_CPU_DEVICES,
    ENV_NUM_PROCESSES,
    ENV_PROCESS_ID,
    assert_same,
    check_batch,
    fingerprint,
    gather,
    global_mesh,
    initialize,
    to_global,
)

__all__ = [
    "ENV_COORDINATOR",
    "ENV_LOCAL_CPU_DEVICES",
    "ENV_NUM_PROCESSES",
    "ENV_PROCESS_ID",
    "LaunchError",
    "assert_same",
    "check_batch",
    "fingerprint",
    "free_port",
    "gather",
    "global_mesh",
    "initialize",
    "launch",
    "load",
    "main",
    "rollout",
    "save",
    "solve_sharded",
    "to_global",
    "train_ppo",
]

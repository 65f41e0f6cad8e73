"""Joining the processes, the global mesh, and the checks that every process agrees."""

from __future__ import annotations

import hashlib
import inspect
import os
import re
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jax.sharding import Mesh

from ..sim import sharding

ENV_COORDINATOR = "JAXDYN_COORDINATOR"
ENV_NUM_PROCESSES = "JAXDYN_NUM_PROCESSES"
ENV_PROCESS_ID = "JAXDYN_PROCESS_ID"
ENV_LOCAL_CPU_DEVICES = "JAXDYN_LOCAL_CPU_DEVICES"


def _env_int(name):
    v = os.environ.get(name, "").strip()
    if not v:
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"initialize: ${name} must be an integer, got {v!r}") from None


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_cpu_devices: int | None = None,
    cpu_collectives: str = "gloo",
    initialization_timeout: int = 300,
    heartbeat_timeout_seconds: int = 100,
) -> None:
    """Join this process to the others (``jax.distributed.initialize``). Call it first, before
    anything runs on a device.

    **Arguments:** ``coordinator_address`` (``"host:port"`` of process 0), ``num_processes`` and
    ``process_id``: each from its argument, else from ``$JAXDYN_COORDINATOR``,
    ``$JAXDYN_NUM_PROCESSES`` and ``$JAXDYN_PROCESS_ID`` (what :func:`launch` sets), else left
    to JAX, which reads them from the cluster's scheduler (SLURM, Open MPI, ...).
    ``local_cpu_devices`` (else ``$JAXDYN_LOCAL_CPU_DEVICES``): the number of CPU devices of
    this process (``jax_num_cpu_devices``; one per core to use). ``cpu_collectives``: how CPU
    processes exchange data (``jax_cpu_collectives_implementation``: ``"gloo"`` or ``"mpi"``);
    without it a program over several CPU processes cannot run. The timeouts are
    ``jax.distributed.initialize``'s: a process that stops answering for
    ``heartbeat_timeout_seconds`` ends the others.

    Calling it again in a process that already joined does nothing."""
    if jax.distributed.is_initialized():
        return
    coordinator_address = coordinator_address or os.environ.get(ENV_COORDINATOR) or None
    if num_processes is None:
        num_processes = _env_int(ENV_NUM_PROCESSES)
    if process_id is None:
        process_id = _env_int(ENV_PROCESS_ID)
    if local_cpu_devices is None:
        local_cpu_devices = _env_int(ENV_LOCAL_CPU_DEVICES)
    try:
        if local_cpu_devices is not None:
            jax.config.update("jax_num_cpu_devices", int(local_cpu_devices))
        if cpu_collectives:
            jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    except RuntimeError as e:  # a backend already started
        raise RuntimeError(
            "initialize: call it before anything runs on a device (JAX's backends have started "
            f"and their settings can no longer change): {e}"
        ) from None
    kwargs: dict[str, Any] = {"initialization_timeout": initialization_timeout}
    # heartbeat_timeout_seconds: JAX >= 0.7 (JAX 0.6's heartbeat is fixed)
    if "heartbeat_timeout_seconds" in inspect.signature(jax.distributed.initialize).parameters:
        kwargs["heartbeat_timeout_seconds"] = heartbeat_timeout_seconds
    jax.distributed.initialize(coordinator_address, num_processes, process_id, **kwargs)


def global_mesh(devices: Sequence[Any] | np.ndarray | None = None) -> Mesh:
    """A one-axis mesh named ``"batch"`` over every device of every process (default), in
    process order: process ``i``'s share of a batch lies on its own devices
    (:func:`jaxdyn.sim.batch_mesh` over ``jax.devices()``)."""
    devices = jax.devices() if devices is None else list(devices)
    devices = sorted(devices, key=lambda d: (d.process_index, d.id))
    return sharding.batch_mesh(devices)


# ----------------------------------------------------------------------------- agreement
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def fingerprint(tree: Any) -> bytes:
    """A SHA-256 digest of ``tree``: its structure and static fields (``repr``, memory
    addresses left out) and each array leaf's dtype, shape and bytes (of an array spread over
    several processes: its dtype and shape only)."""
    arrays, static = eqx.partition(tree, eqx.is_array)
    leaves, treedef = jax.tree_util.tree_flatten(arrays)
    h = hashlib.sha256()
    h.update(_ADDRESS.sub("", repr(treedef)).encode())
    h.update(_ADDRESS.sub("", repr(jax.tree_util.tree_flatten(static))).encode())
    for x in leaves:
        h.update(f"{x.dtype}{tuple(x.shape)}".encode())
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            h.update(np.ascontiguousarray(np.asarray(x)).tobytes())
    return h.digest()


#: how long a process waits at :func:`_barrier` for the others (seconds)
BARRIER_TIMEOUT_S = 3600
_BARRIERS = [0]


def _barrier() -> None:
    """Wait until every process is here (the coordination service's barrier, whose timeout is
    :data:`BARRIER_TIMEOUT_S`), so that the collective that follows starts on every process at
    once: on CPUs, Gloo gives up on a collective that a process has not joined within 30 s
    (one process still computing or compiling), and reports that instead of the cause."""
    from ..backend.internals import distributed_client

    client = distributed_client()
    if client is None or jax.process_count() == 1:
        return
    _BARRIERS[0] += 1
    client.wait_at_barrier(f"jaxdyn-{_BARRIERS[0]}", int(BARRIER_TIMEOUT_S * 1000))


def _allgather_host(values) -> np.ndarray:
    """Every process's 1-D int32 ``values``, stacked ``(process_count, n)``, on every process."""
    values = np.asarray(values, np.int32)
    if jax.process_count() == 1:
        return values[None]
    from jax.experimental import multihost_utils

    _barrier()
    return np.asarray(multihost_utils.process_allgather(values))


def assert_same(name: str, tree: Any) -> None:
    """Raise ``ValueError`` on every process unless ``tree`` (a model, a configuration, a batch
    of problems, ...) is the same on every process (:func:`fingerprint`, exchanged between the
    processes). A collective: every process must call it, in the same order."""
    digest = np.frombuffer(fingerprint(tree), np.int32)
    all_ = _allgather_host(digest)
    if (all_ == all_[0]).all():
        return
    groups: dict[bytes, list[int]] = {}
    for i, d in enumerate(all_):
        groups.setdefault(d.tobytes(), []).append(i)
    differ = [i for i, d in enumerate(all_) if not (d == all_[0]).all()]
    raise ValueError(
        f"{name}: differs between processes: process(es) {differ} hold another value than "
        f"process 0 ({len(groups)} different values among the {len(all_)} processes); every "
        "process must build the same one"
    )


def check_batch(name: str, tree: Any, mesh: Mesh | None = None) -> int:
    """Check a process-local batch (every leaf's leading axis) against the other processes':
    the same size on every process, and a multiple of this process's devices of ``mesh``, so
    that the global batch splits evenly over every device. Raises ``ValueError`` on every
    process otherwise; returns the global batch size. A collective."""
    mesh = global_mesh() if mesh is None else mesh
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        raise ValueError(f"{name}: the batch has no arrays")
    sizes = {int(np.shape(x)[0]) if np.ndim(x) else -1 for x in leaves}
    ok = len(sizes) == 1 and -1 not in sizes
    local = sizes.pop() if ok else -1
    all_ = _allgather_host([local])[:, 0]
    if (all_ < 0).any():
        bad = [i for i, s in enumerate(all_) if s < 0]
        raise ValueError(
            f"{name}: on process(es) {bad} the arrays of the batch do not share one leading "
            "(batch) axis"
        )
    if not (all_ == all_[0]).all():
        raise ValueError(
            f"{name}: the processes hold batches of different sizes {all_.tolist()} (process i's "
            "size at position i); every process must feed the same number of samples"
        )
    n = mesh.devices.size
    total = int(all_.sum())
    here = sum(d.process_index == jax.process_index() for d in mesh.devices.flat)
    if total % n or (here and local % here):
        raise ValueError(
            f"{name}: the global batch of {total} samples ({len(all_)} processes x {local}) is "
            f"not a multiple of the mesh's {n} devices: give each process a multiple of its "
            f"{here} devices"
        )
    return total


def to_global(tree: Any, mesh: Mesh | None = None, name: str = "to_global") -> Any:
    """Process-local batches (leading axis) to global arrays split over ``mesh`` (default
    :func:`global_mesh`), process ``i``'s samples on its own devices
    (``jax.make_array_from_process_local_data``), after :func:`check_batch`."""
    mesh = global_mesh() if mesh is None else mesh
    check_batch(name, tree, mesh)
    sh = sharding.batch_sharding(mesh)
    return jax.tree_util.tree_map(
        lambda x: jax.make_array_from_process_local_data(sh, np.asarray(x)), tree
    )


def gather(tree: Any) -> Any:
    """Every array of ``tree`` (global arrays split across processes, or local ones) as one
    NumPy array on every process (``process_allgather``). A collective.

    This process's shards are waited for first: a value check that failed on one of its
    devices raises its message here (the failed shards would otherwise never join the
    collective, and the other processes would wait for them until Gloo's timeout); then every
    process (a barrier), so that a process slower to get here does not exceed Gloo's."""
    tree = jax.block_until_ready(tree)
    if jax.process_count() == 1:
        return jax.tree_util.tree_map(np.asarray, tree)
    from jax.experimental import multihost_utils

    _barrier()
    return jax.tree_util.tree_map(
        lambda x: np.asarray(multihost_utils.process_allgather(x, tiled=True)), tree
    )


def local_part(tree):
    """This process's share of each global array of ``tree`` along the batch axis, as NumPy
    (its devices' shards in order; an array held whole by this process: as it is)."""

    def one(x):
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return np.asarray(x)
        shards = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)
        seen, parts = set(), []
        for s in shards:
            key = s.index[0].start
            if key not in seen:
                seen.add(key)
                parts.append(np.asarray(s.data))
        return np.concatenate(parts)

    return jax.tree_util.tree_map(one, tree)

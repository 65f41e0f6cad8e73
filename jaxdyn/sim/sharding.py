"""Batches across devices with ``jax.sharding`` (one program, data split along the batch).

The simulator's functions are unbatched; a batch is ``jax.vmap`` of them. To spread a batch
over several devices (GPUs of a node, TPU cores, or the CPU's virtual devices), place the
batched inputs on a one-axis :class:`jax.sharding.Mesh` with a ``NamedSharding`` that splits the
leading axis, and evaluate the vmapped function with :func:`sharded_vmap`: every device steps
its slice of the batch with the one-device program (``jax.shard_map``; nothing is gathered on
one device, and jaxdyn's batching rule runs its chunk loop on each device's samples). Under
``jax.set_mesh`` with ``Explicit`` mesh axes (the default of ``jax.make_mesh`` in recent JAX) a
plain ``jax.jit(jax.vmap(...))`` of jaxdyn's functions splits the batch the same way (the
batching rule's algorithms per shard; rollouts, environments and the rest keep the batch split,
their value checks per shard: :func:`jaxdyn.spatial.stack`, :func:`jaxdyn.spatial.on_mesh`).

Multi-host (several machines): call ``jax.distributed.initialize()`` in every process first;
``jax.devices()`` then lists every device of the cluster and :func:`batch_mesh` spans them all
(each process feeds its local slice, e.g. with ``jax.make_array_from_process_local_data``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .. import batching

__all__ = ["batch_mesh", "batch_sharding", "shard_batch", "sharded_vmap"]

AXIS = "batch"


def batch_mesh(devices: Sequence[Any] | np.ndarray | None = None) -> Mesh:
    """A one-axis mesh named ``"batch"`` over ``devices`` (default: every device)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (AXIS,))


def _batch_spec(mesh: Mesh) -> P:
    names = tuple(mesh.axis_names)
    return P(names) if len(names) > 1 else P(*names)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Split the leading (batch) axis over the mesh (all its axes); every other axis
    replicated."""
    return NamedSharding(mesh, _batch_spec(mesh))


def shard_batch(tree: Any, mesh: Mesh | None = None) -> Any:
    """Place every array of ``tree`` (leading axis = batch, divisible by the number of devices)
    on ``mesh``, split along the batch."""
    mesh = batch_mesh() if mesh is None else mesh
    n = mesh.devices.size
    sh = batch_sharding(mesh)

    def put(x):
        if x.shape[0] % n:
            raise ValueError(
                f"shard_batch: batch size {x.shape[0]} is not a multiple of the {n} devices"
            )
        return jax.device_put(x, sh)

    return jax.tree_util.tree_map(put, tree)


def sharded_vmap(
    fn: Callable[..., Any],
    mesh: Mesh | None = None,
    in_axes: int | tuple[int | None, ...] | None = 0,
) -> Callable[..., Any]:
    """``jax.jit(jax.vmap(fn, in_axes))`` with the batch split over ``mesh`` (pass the batched
    inputs through :func:`shard_batch`): each device evaluates ``jax.vmap(fn)`` on its own
    samples (``jax.shard_map`` over the mesh's axes) and holds its shard of the outputs.

    ``in_axes``: ``0`` (batched) or ``None`` (the same value on every device), or a tuple of
    those, one per positional argument. Each device's program is the one-device program on its
    share of the batch: jaxdyn's batching rule evaluates it in cache-sized chunks on the CPU,
    and value checks (:mod:`jaxdyn.config`) look at that device's samples only, so a failed
    check ends the call with its message as on one device. (A plain ``jax.jit(jax.vmap(fn))``
    on arrays sharded over ``Auto`` mesh axes leaves the split to XLA's partitioner, which
    cannot split the chunk loop and gathers the whole batch on every device; with
    ``Explicit`` axes, the default of ``jax.make_mesh`` in recent JAX, jaxdyn's functions split
    the batch as here by themselves.)"""
    mesh = batch_mesh() if mesh is None else mesh
    spec = _batch_spec(mesh)

    @functools.wraps(fn)
    def per_device(*args):
        axes = batching.batch_axes("sharded_vmap", in_axes, len(args))
        in_specs = tuple(spec if a == 0 else P() for a in axes)
        local = jax.vmap(fn, in_axes=axes)
        return batching.shard_map(local, mesh, in_specs, spec)(*args)

    return jax.jit(per_device)

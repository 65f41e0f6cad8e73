"""Batches across devices with ``jax.sharding`` (one program, data split along the batch).

The simulator's functions are unbatched; a batch is ``jax.vmap`` of them. To spread a batch
over several devices (GPUs of a node, TPU cores, or the CPU's virtual devices), place the
batched inputs on a one-axis :class:`jax.sharding.Mesh` with a ``NamedSharding`` that splits the
leading axis, and ``jax.jit`` the vmapped function: XLA partitions the program so that every
device steps its slice of the batch (computation follows the data; nothing is gathered on one
device: :func:`sharded_vmap` turns off the chunk loop of jaxdyn's batching rule, which the
partitioner would gather). Results equal the one-device run to rounding on CPU (until
2026-11-28 bit for bit: a partitioned program leaves out the stores of
:func:`jaxdyn.spatial.store`, which change how XLA fuses, and so rounds, the one-device run).

Multi-host (several machines): call ``jax.distributed.initialize()`` in every process first;
``jax.devices()`` then lists every device of the cluster and :func:`batch_mesh` spans them all
(each process feeds its local slice, e.g. with ``jax.make_array_from_process_local_data``).
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .. import batching

__all__ = ["batch_mesh", "batch_sharding", "shard_batch", "sharded_vmap"]

AXIS = "batch"


def batch_mesh(devices=None) -> Mesh:
    """A one-axis mesh named ``"batch"`` over ``devices`` (default: every device)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (AXIS,))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Split the leading (batch) axis over the mesh; every other axis replicated."""
    return NamedSharding(mesh, P(AXIS))


def shard_batch(tree, mesh: Mesh | None = None):
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


def sharded_vmap(fn, mesh: Mesh | None = None, in_axes=0):
    """``jax.jit(jax.vmap(fn, in_axes))`` whose batched outputs are split over ``mesh`` like
    its batched inputs (pass them through :func:`shard_batch`).

    jaxdyn's functions under ``jax.vmap`` on the CPU run their batch in a loop over chunks
    (:mod:`jaxdyn.batching`), which XLA's partitioner cannot split: it gathers the whole batch
    on every device and each device computes all of it. ``fn`` is traced here with that loop
    off (:func:`jaxdyn.batching.unchunked`); a ``jax.jit(jax.vmap(...))`` of your own on
    sharded CPU arrays wants ``jaxdyn.config.update("vmap_chunk", 0)`` or the same block."""
    mesh = batch_mesh() if mesh is None else mesh

    @functools.wraps(fn)
    def plain(*args):
        with batching.unchunked():
            return fn(*args)

    return jax.jit(jax.vmap(plain, in_axes=in_axes), out_shardings=batch_sharding(mesh))

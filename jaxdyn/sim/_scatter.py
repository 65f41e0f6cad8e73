"""Sums onto static indices with or without XLA scatters.

``jax.ops.segment_sum`` and ``x.at[idx].add`` lower to scatters; XLA:CPU does not fuse a loop
holding one into a single kernel (:func:`jaxdyn.config.fused_cpu_loops`), so with fused loops
the simulation step's sums onto bodies and joints are written with static gathers and
concatenations instead (the indices are numpy arrays fixed when the model is built). Without
fused loops the scatters stay: they are what batched programs on the GPU were measured with.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import config, spatial


def segment_sum(values, index: np.ndarray, num_segments: int):
    """``out[s] = sum of values[i] with index[i] == s`` (``jax.ops.segment_sum`` with a static
    numpy ``index``)."""
    index = np.asarray(index)
    if not config.fused_cpu_loops_enabled():
        return jax.ops.segment_sum(values, index, num_segments=num_segments)
    zero = jnp.zeros(values.shape[1:], values.dtype)
    rows = []
    for s in range(num_segments):
        members = np.nonzero(index == s)[0]
        row = zero
        for i in members:
            row = row + values[int(i)]
        rows.append(row)
    return spatial.stack(rows)


def add_at(x, index: np.ndarray, values):
    """``x.at[index].add(values)`` for a static numpy ``index`` of distinct entries."""
    index = np.asarray(index)
    if not config.fused_cpu_loops_enabled():
        return x.at[index].add(values)
    if len(np.unique(index)) != len(index):
        raise ValueError("add_at: index entries must be distinct")
    where = np.full(x.shape[0], -1)
    where[index] = np.arange(len(index))
    pad = jnp.concatenate([values, jnp.zeros((1,) + values.shape[1:], values.dtype)])
    return x + pad[np.where(where < 0, len(index), where)]

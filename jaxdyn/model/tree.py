"""Level-by-level tree passes over the static topology (the only loops in jaxdyn's algorithms).

The loops run over depth levels in Python at trace time; inside a level everything is one
vectorised expression over the level's bodies. Going out, a level gathers from the previous one
(``parent_local``); coming back, it segment-sums into it.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import joints


def _is_identity(idx, n_parent):
    return len(idx) == n_parent and bool(np.all(idx == np.arange(n_parent)))


def gather_parent(prev, level, root):
    """Values of the parents of ``level``'s bodies; ``root`` (broadcast) at depth 0."""
    if prev is None:
        return jnp.broadcast_to(root, (level.n,) + root.shape)
    idx = level.parent_local
    if _is_identity(idx, prev.shape[0]):
        return prev
    if prev.shape[0] == 1:
        return jnp.broadcast_to(prev, (level.n,) + prev.shape[1:])
    return prev[idx]


def sum_into_parents(x, level, n_parent):
    """Sum the per-body ``x`` of ``level`` into the ``n_parent`` bodies of the level above.

    Written as a product with the constant ``(n_parent, n)`` incidence matrix: XLA:CPU turns it
    into one small dot, where a scatter-add would be a serial loop.
    """
    idx = level.parent_local
    if _is_identity(idx, n_parent):
        return x
    if n_parent == 1:
        return jnp.sum(x, 0, keepdims=True)
    P = np.zeros((n_parent, level.n), np.float64)
    P[idx, np.arange(level.n)] = 1.0
    y = jnp.asarray(P, x.dtype) @ x.reshape(level.n, -1)
    return y.reshape((n_parent,) + x.shape[1:])


def forward_accumulate(topo, incr, root):
    """``x_b = x_parent(b) + incr_b`` with ``x_world = root``: sums along the support of each body."""
    out, prev = [], None
    for lvl in topo.levels:
        prev = gather_parent(prev, lvl, root) + incr[lvl.b0:lvl.b1]
        out.append(prev)
    return jnp.concatenate(out, 0)


def backward_accumulate(topo, x):
    """``X_b = x_b + sum_{c child of b} X_c``: sums over the subtree of each body."""
    out, below = [None] * len(topo.levels), None
    for i in range(len(topo.levels) - 1, -1, -1):
        lvl = topo.levels[i]
        cur = x[lvl.b0:lvl.b1]
        if below is not None:
            cur = cur + sum_into_parents(below, topo.levels[i + 1], lvl.n)
        out[i] = below = cur
    return jnp.concatenate(out, 0)


def kind_runs(topo):
    """Maximal runs of consecutive bodies sharing a joint kind: ``(kind, b0, b1, v0, v1)``."""
    runs = []
    for lvl in topo.levels:
        for g in lvl.groups:
            if runs and runs[-1][0] == g.kind and runs[-1][2] == g.b0:
                k, b0, _, v0, _ = runs[-1]
                runs[-1] = (k, b0, g.b1, v0, g.v1)
            else:
                runs.append((g.kind, g.b0, g.b1, g.v0, g.v1))
    return runs


def dofs_to_bodies(topo, x):
    """Sum per-coordinate rows ``x (nv, ...)`` into their bodies, ``(nb, ...)``."""
    parts = []
    for kind, b0, b1, v0, v1 in kind_runs(topo):
        k = joints.NV[kind]
        xs = x[v0:v1]
        parts.append(xs if k == 1 else jnp.sum(xs.reshape((b1 - b0, k) + xs.shape[1:]), 1))
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)


def bodies_to_dofs(topo, x):
    """Repeat per-body rows ``x (nb, ...)`` for each of the body's coordinates, ``(nv, ...)``."""
    if topo.nv == topo.nb:
        return x
    parts = []
    for kind, b0, b1, _, _ in kind_runs(topo):
        k = joints.NV[kind]
        xs = x[b0:b1]
        if k > 1:
            xs = jnp.broadcast_to(xs[:, None], (b1 - b0, k) + xs.shape[1:])
            xs = xs.reshape(((b1 - b0) * k,) + x.shape[1:])
        parts.append(xs)
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)

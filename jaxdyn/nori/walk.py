"""Level walks over a :class:`~jaxdyn.nori.structure.NoriSystem` in its static order.

Bodies are ordered by depth, then by signature (the layout of their rows), so every level is
a few contiguous groups of identically structured bodies; a step of a walk computes one level,
each group as one vectorised expression. Runs of identical levels (serial chains) go through
one ``lax.scan`` (:func:`jaxdyn.nori.structure.segments`), so the program does not grow with
the chain's length. The walks are :func:`jaxdyn.model.tree.walk` (the level engine) over
Nori's levels; per-level results are kept in a :class:`jaxdyn.model.tree.LevelSeq`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np

from ..model import tree
from .structure import segments

if TYPE_CHECKING:
    from collections.abc import Callable

    from jax import Array

    from .structure import NoriSystem


def group_bodies(system: NoriSystem, li: int, gi: int) -> np.ndarray:
    """jaxdyn indices of the bodies of group ``gi`` of level ``li`` (numpy, ``(G,)``)."""
    _, g0, g1 = system.levels[li].groups[gi]
    return system.order[g0:g1]


def stacked_bodies(system: NoriSystem, la: int, lb: int, gi: int) -> np.ndarray:
    return np.stack([group_bodies(system, li, gi) for li in range(la, lb)])


def _inputs(system, li_range, gather):
    la, lb, stacked = li_range
    lvl = system.levels[la]
    out = []
    for gi in range(len(lvl.groups)):
        idx = stacked_bodies(system, la, lb, gi) if stacked else group_bodies(system, la, gi)
        out.append(gather(lvl.groups[gi][0], idx))
    return out


def _level_in(seq, la, lb, stacked):
    if seq is None:
        return None
    return seq.stack(la, lb) if stacked else seq[la]


def _take(system, gather, level_in):
    return lambda la, lb, stacked: (
        _inputs(system, (la, lb, stacked), gather),
        _level_in(level_in, la, lb, stacked),
    )


def outward(
    system: NoriSystem,
    step: Callable[..., tuple[Any, Any]],
    gather: Callable[[int, np.ndarray], Any],
    level_in: tree.LevelSeq | None = None,
    carry: Any = None,
    last_single: bool = False,
) -> tuple[Any, tree.LevelSeq]:
    """Root to leaves: ``carry, out = step(level, carry, group_inputs, level_input)`` with
    ``carry`` the previous level's value (``None`` at depth 0). ``gather(sig, idx)`` returns a
    group's inputs for body indices ``idx`` (``(G,)``, or ``(L, G)`` for a run).

    ``last_single``: the last level of a run is evaluated on its own (for steps whose inputs
    depend on the next level, which for that level lies outside the run). Walked by
    :func:`jaxdyn.model.tree.walk`."""
    levels = system.levels
    return tree.walk(
        levels,
        segments(system),
        lambda li, c, x: step(levels[li], c, x[0], x[1]),
        _take(system, gather, level_in),
        carry,
        last_single=last_single,
    )


def inward(
    system: NoriSystem,
    step: Callable[..., tuple[Any, Any]],
    gather: Callable[[int, np.ndarray], Any],
    level_in: tree.LevelSeq | None = None,
    carry: Any = None,
) -> tuple[Any, tree.LevelSeq]:
    """Leaves to root: ``carry, out = step(level, child_level, carry, group_inputs,
    level_input)``, ``carry`` holding the child level's values (``None`` at the deepest).
    Walked by :func:`jaxdyn.model.tree.walk`."""
    levels = system.levels
    nl = len(levels)
    return tree.walk(
        levels,
        segments(system),
        lambda li, c, x: step(levels[li], levels[li + 1] if li + 1 < nl else None, c, x[0], x[1]),
        _take(system, gather, level_in),
        carry,
        reverse=True,
    )


def collect(
    system: NoriSystem, seq: tree.LevelSeq, fn: Callable[[Any], Array], per_dof: bool = False
) -> Array:
    """Gather a per-body output of every group into one array in jaxdyn order.

    ``fn(group_output)`` returns ``(G, ...)`` per group (``(L, G, ...)`` inside runs).
    ``per_dof``: the outputs are ``(G, n)`` joint-space rows, assembled into ``(nv,)``."""
    t = system.topo
    pieces, idx = [], []
    starts = {li: ("s", v) for li, v in seq.single.items()}
    for la, lb, v in seq.blocks:
        starts[la] = ("b", (la, lb, v))
    for li in sorted(starts):
        kind, v = starts[li]
        if kind == "s":
            for gi, go in enumerate(v):
                x = fn(go)
                bodies = group_bodies(system, li, gi)
                pieces.append(x)
                idx.append(bodies)
        else:
            la, lb, ys = v
            for gi, go in enumerate(ys):
                x = fn(go)
                bodies = stacked_bodies(system, la, lb, gi)
                pieces.append(x.reshape((-1,) + x.shape[2:]))
                idx.append(bodies.reshape(-1))
    bodies = np.concatenate(idx)
    if per_dof:
        flat = jnp.concatenate([p.reshape(-1) for p in pieces])
        dofs = (
            np.concatenate([np.arange(t.v_start[b], t.v_start[b] + t.nv_j[b]) for b in bodies])
            if len(bodies)
            else np.zeros(0, np.int64)
        )
        perm = np.empty(len(dofs), np.int64)
        perm[dofs] = np.arange(len(dofs))
        return flat[perm]
    flat = jnp.concatenate(pieces, 0)
    perm = np.empty(len(bodies), np.int64)
    perm[bodies] = np.arange(len(bodies))
    return flat[perm]


def take(x: Array, idx: np.ndarray) -> Array:
    """``x[idx]`` for a static integer index array; a slice (and a reshape) when ``idx`` is a
    contiguous ascending range, which XLA fuses where a gather would not be."""
    idx = np.asarray(idx)
    flat = idx.reshape(-1)
    if flat.size and np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):
        y = x[int(flat[0]) : int(flat[0]) + flat.size]
        return y.reshape(idx.shape + x.shape[1:])
    return x[idx]


def level_slices(lvl: Any) -> list[slice]:
    """``slice`` of each group inside its level (level-local indices)."""
    return [slice(g0 - lvl.b0, g1 - lvl.b0) for _, g0, g1 in lvl.groups]

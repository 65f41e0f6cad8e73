"""Static branching structure of a constraint set on a tree (built once, cached).

Notation of Sathya, Decré & Swevers, "PV-OSIMr: A Lowest Order Complexity Algorithm for
Computing the Delassus Matrix" (2024), §I-C:

* ``E`` -- the end-effector links (bodies carrying at least one constraint);
* ``ES(i)`` -- the end effectors supported by link ``i`` (``i`` or its descendants);
* ``N`` -- the links ``i`` with ``|ES(i)| > |ES(j)|`` for every child ``j``, i.e. branching
  points of two or more constrained branches, and end effectors with a constrained descendant;
* ``Nanc(i)`` -- the closest proper ancestor of ``i`` in ``N`` (``-1``: the world);
* ``cca(i, j)`` -- the closest common ancestor (or self) of two links.

Everything here is numpy on the static :class:`~jaxdyn.model.model.Topology`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from ..constraints import layout as constraint_layout

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..constraints import Connect, Weld
    from ..model.model import Topology


class Structure:
    """Branching structure of ``constraints`` on ``topo`` (see the module docstring)."""

    def __init__(self, topo: Topology, constraints: Sequence[Connect | Weld]) -> None:
        lay = constraint_layout(topo, constraints)
        self.topo, self.layout = topo, lay
        nb = topo.nb
        parent = topo.parent
        self.parent = parent
        depth = topo.depth
        self.body_depth = depth
        ee = np.zeros(nb, bool)
        ee[lay.body] = True
        self.is_ee = ee
        # ES sizes and active (supports an end effector)
        n_es = ee.astype(np.int64).copy()
        for b in range(nb - 1, -1, -1):
            if parent[b] >= 0:
                n_es[parent[b]] += n_es[b]
        active = n_es > 0
        self.active = active
        children = [[] for _ in range(nb)]
        for b in range(nb):
            if parent[b] >= 0:
                children[parent[b]].append(b)
        act_children = [[c for c in children[b] if active[c]] for b in range(nb)]
        self.active_children = act_children
        in_n = np.zeros(nb, bool)
        for b in range(nb):
            if not active[b]:
                continue
            k = len(act_children[b])
            in_n[b] = k >= 2 or (ee[b] and k >= 1)
        self.in_n = in_n
        # closest N ancestor (proper) and the top body of the segment below it
        nanc = np.full(nb, -1, np.int64)
        top = np.full(nb, -1, np.int64)
        for b in range(nb):
            p = parent[b]
            if p < 0:
                nanc[b], top[b] = -1, b
            elif in_n[p]:
                nanc[b], top[b] = p, b
            else:
                nanc[b], top[b] = nanc[p], top[p]
        self.nanc, self.top = nanc, top
        self.N = np.nonzero(in_n)[0]
        self.E = np.nonzero(ee)[0]
        self.leaf_E = np.nonzero(ee & ~in_n)[0]
        # N-depth of N nodes (number of N ancestors)
        nd = np.full(nb, -1, np.int64)
        for b in self.N:
            a = nanc[b]
            nd[b] = 0 if a < 0 else nd[a] + 1
        self.n_depth = nd

    # ------------------------------------------------------------------ helpers
    def ancestors(self, b: int) -> list[int]:
        """``b`` and its ancestors, from ``b`` up to the root."""
        out = []
        while b >= 0:
            out.append(int(b))
            b = self.parent[b]
        return out

    def cca(self, i: int, j: int) -> int:
        """Closest common ancestor-or-self of bodies ``i`` and ``j`` (``-1``: the world)."""
        anc = set(self.ancestors(i))
        for b in self.ancestors(j):
            if b in anc:
                return b
        return -1

    def chain(self, b: int) -> list[int]:
        """Node chain of end effector ``b``: ``b``, ``Nanc(b)``, ``Nanc(Nanc(b))``, ..."""
        out = [int(b)]
        a = self.nanc[b]
        while a >= 0:
            out.append(int(a))
            a = self.nanc[a]
        return out


@functools.lru_cache(maxsize=256)
def structure(topo: Topology, constraints: Sequence[Connect | Weld]) -> Structure:
    """Cached :class:`Structure` for ``(topo, constraints)``."""
    return Structure(topo, constraints)

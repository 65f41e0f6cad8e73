"""Row-wise constraint propagation shared by PV-OSIM and EFPA.

Constraint rows are processed as a whole per depth level: at level ``l`` every row whose
constrained link is at depth ``>= l`` is attached to its ancestor ``b_l(r)`` on that level.
Rows are sorted (internally) by decreasing depth of their link, so the rows present at level
``l`` are a prefix ``[0, m_l)``. The per-level plans (:attr:`RowPlan.levels`) are the static
values that PV-OSIM and EFPA hand to :func:`jaxdyn.model.tree.backward_pass` /
:func:`~jaxdyn.model.tree.forward_pass` (``static=``): their sizes change from level to
level, so a run of levels is scanned only where the plans agree (a serial chain's levels
above all its constrained links). Per row the joint quantities ``S``, ``U = H^A S^T`` and
``D^-1`` of ``b_l(r)`` are gathered (padded to the largest joint of the level when joint kinds
mix).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from .. import joints
from ..model import tree
from .structure import structure as get_structure

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array

    from ..constraints import Connect, Weld
    from ..model.model import Level, Topology


class RowPlan:
    """Static row layout per level for ``(topo, constraints)``."""

    def __init__(self, topo: Topology, constraints: Sequence[Connect | Weld]) -> None:
        st = get_structure(topo, constraints)
        lay = st.layout
        self.st = st
        depth = topo.depth
        row_depth = depth[lay.row_body]
        # stable sort by decreasing depth
        order = np.argsort(-row_depth, kind="stable")
        self.order = order  # sorted position -> original row
        self.inv = np.argsort(order)  # original row -> sorted position
        m = lay.m
        self.m = m
        sbody = lay.row_body[order]
        sdepth = row_depth[order]
        nl = len(topo.levels)
        self.levels = []
        for li in range(nl):
            lvl = topo.levels[li]
            ml = int(np.sum(sdepth >= li))
            m_next = int(np.sum(sdepth >= li + 1))
            # ancestor at depth li of each present row's body
            anc = np.empty(ml, np.int64)
            for r in range(ml):
                b = sbody[r]
                while depth[b] > li:
                    b = topo.parent[b]
                anc[r] = b
            kinds = {g.kind for g in lvl.groups if np.any((anc >= g.b0) & (anc < g.b1))}
            kmax = max([joints.NV[k] for k in kinds], default=1)
            same = anc[:, None] == anc[None, :]
            self.levels.append(dict(m=ml, m_next=m_next, local=anc - lvl.b0, kmax=kmax, same=same))
        self.row_body_sorted = sbody
        self.row_depth_sorted = sdepth
        # depth of cca for every (sorted) pair (-1: the world)
        cd = np.full((m, m), -1, np.int64)
        for r in range(m):
            for s in range(r, m):
                c = st.cca(int(sbody[r]), int(sbody[s]))
                cd[r, s] = cd[s, r] = -1 if c < 0 else depth[c]
        self.cca_depth = cd


@functools.lru_cache(maxsize=256)
def row_plan(topo: Topology, constraints: Sequence[Connect | Weld]) -> RowPlan:
    return RowPlan(topo, constraints)


def level_joint_data(
    lvl: Level, S: Array, Us: Sequence[Array], Dinvs: Sequence[Array], kmax: int
) -> tuple[Array, Array, Array]:
    """Per-body ``S (n, kmax, 6)``, ``U (n, 6, kmax)``, ``D^-1 (n, kmax, kmax)`` of the level
    ``lvl`` from its own rows ``S (nv_l, 6)`` and its joint groups' ``U``, ``D^-1`` (joints
    with fewer coordinates zero-padded)."""
    v0 = tree.level_v0(lvl)
    Ss, Uu, Dd = [], [], []
    for gi, g in enumerate(lvl.groups):
        k = joints.NV[g.kind]
        Sg = S[g.v0 - v0 : g.v1 - v0].reshape(g.n, k, 6)
        U, Dinv = Us[gi], Dinvs[gi]
        if k < kmax:
            pad = kmax - k
            Sg = jnp.pad(Sg, ((0, 0), (0, pad), (0, 0)))
            U = jnp.pad(U, ((0, 0), (0, 0), (0, pad)))
            Dinv = jnp.pad(Dinv, ((0, 0), (0, pad), (0, pad)))
        elif k > kmax:  # no row reaches this group: its data is never gathered
            Sg, U, Dinv = Sg[:, :kmax], U[:, :, :kmax], Dinv[:, :kmax, :kmax]
        Ss.append(Sg)
        Uu.append(U)
        Dd.append(Dinv)
    cat = lambda xs: xs[0] if len(xs) == 1 else jnp.concatenate(xs, 0)
    return cat(Ss), cat(Uu), cat(Dd)


def gather_rows(x: Array, local: np.ndarray) -> Array:
    if len(local) == x.shape[0] and np.all(local == np.arange(len(local))):
        return x
    return x[local]

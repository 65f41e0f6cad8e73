"""LTL-OSIM: the Delassus matrix from the sparse ``L^T L`` factorisation of ``M``.

References: R. Featherstone, "Efficient factorization of the joint-space inertia matrix for
branched kinematic trees" (IJRR 2005) -- the ``L^T L`` factorisation (RBDA 2008, Table 6.3,
"LTL"), which keeps the branch-induced sparsity of ``M`` in ``L``; R. Featherstone,
"Exploiting sparsity in operational-space dynamics" (IJRR 2010) -- ``Y = J L^-1``,
``Λ^-1 = Y Y^T`` (PV-OSIMr paper, eqs. 4-6). ``O(n d^2 + m^2 d + m d^2)`` with sparse storage.

Sparse storage: coordinate ``k`` of depth ``δ(k)`` in the coordinate tree (parent ``λ(k)``:
the previous coordinate of the same joint, or the last one of the parent joint) only has
entries in the columns of its ancestors, so row ``k`` of ``L`` is stored as ``δ(k) + 1``
numbers ``L[k, anc_0(k)], ..., L[k, anc_{δ(k)-1}(k)], L[k, k]``. Coordinates of equal depth are
processed together, deepest first: ``L_kk = sqrt(H_kk)``, ``L_ki = H_ki / L_kk``, then
``H_ij -= L_ki L_kj`` for all ancestors ``j`` of ``i`` of ``k`` (one scatter-add per depth
into the compressed rows). The back substitution ``Y L = J`` runs the same way, on the
coordinates that support a constraint; ``Λ^-1 = Y Y^T`` sums over those coordinates only.

The loops run over the depths of the *coordinate* tree (a ``k``-DoF joint spans ``k`` of them),
not over the body levels of :mod:`jaxdyn.model.tree`'s level engine, and each depth is one
scatter-add into the compressed rows: they stay short Python loops here.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from .. import constraints as cons
from ..algorithms.crba import crba_world
from .structure import structure as get_structure

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array

    from ..algorithms.kinematics import WorldState
    from ..constraints import Connect, ConstraintLayout, Weld
    from ..model.model import Model, Topology


def dof_tree(topo: Topology) -> tuple[np.ndarray, np.ndarray]:
    """Coordinate parents ``λ`` and depths of the coordinate tree."""
    nv = topo.nv
    lam = np.full(nv, -1, np.int64)
    for b in range(topo.nb):
        v0, k = int(topo.v_start[b]), int(topo.nv_j[b])
        p = topo.parent[b]
        lam[v0] = -1 if p < 0 else int(topo.v_start[p] + topo.nv_j[p] - 1)
        for i in range(1, k):
            lam[v0 + i] = v0 + i - 1
    dd = np.zeros(nv, np.int64)
    for k in range(nv):
        dd[k] = 0 if lam[k] < 0 else dd[lam[k]] + 1
    return lam, dd


class LTLPlan:
    def __init__(self, topo: Topology, constraints: Sequence[Connect | Weld]) -> None:
        st = get_structure(topo, constraints)
        lay = st.layout
        lam, dd = dof_tree(topo)
        nv = topo.nv
        D = int(dd.max()) + 1
        anc = np.zeros((nv, D), np.int64)
        mask = np.zeros((nv, D), bool)
        for k in range(nv):
            a = k
            anc[k, dd[k]] = k
            while lam[a] >= 0:
                a = lam[a]
                anc[k, dd[a]] = a
            mask[k, : dd[k] + 1] = True
        self.D, self.anc, self.mask = D, anc, mask
        self.K = [np.nonzero(dd == t)[0] for t in range(D)]
        # targets of the updates of level d: rows anc_t(k), t < d, k in K_d (flattened k-major)
        self.targets = [anc[self.K[d], :d].reshape(-1) for d in range(D)]
        self.tri = [np.tril(np.ones((d, d), bool)) for d in range(D)]  # j <= t
        # coordinates supporting at least one constraint row
        support = topo.body_dof_support[lay.row_body].any(0)
        self.active = [support[self.K[t]] for t in range(D)]
        self.m = lay.m


@functools.lru_cache(maxsize=256)
def ltl_plan(topo: Topology, constraints: Sequence[Connect | Weld]) -> LTLPlan:
    return LTLPlan(topo, constraints)


def ltl_factor(M: Array, lp: LTLPlan) -> list[tuple[Array, Array]]:
    """Sparse ``M = L^T L``: per coordinate depth ``d``, ``(diag (n_d,), rows (n_d, d))`` with
    ``rows[:, j] = L[k, anc_j(k)]`` (RBDA Table 6.3, all coordinates of one depth at once)."""
    A = jnp.where(jnp.asarray(lp.mask), M[np.arange(M.shape[0])[:, None], lp.anc], 0)
    out: list = [None] * lp.D
    for d in range(lp.D - 1, -1, -1):
        a = A[lp.K[d]]
        diag = jnp.sqrt(a[:, d])
        row = a[:, :d] / diag[:, None]  # L_ki = H_ki / L_kk
        out[d] = (diag, row)
        if d == 0:
            break
        # H_ij -= L_ki L_kj for i = anc_t(k), j = anc_0..anc_t (k-major, then t)
        upd = jnp.where(jnp.asarray(lp.tri[d]), row[:, :, None] * row[:, None, :], 0)
        upd = upd.reshape(-1, d)
        if d < lp.D:
            upd = jnp.pad(upd, ((0, 0), (0, lp.D - d)))
        A = A.at[lp.targets[d]].add(-upd)
    return out


def delassus_ltl(
    model: Model, ws: WorldState, K: Array, lay: ConstraintLayout, lp: LTLPlan
) -> Array:
    """``Λ^-1 = Y Y^T`` with ``Y = J L^-1`` (PV-OSIMr paper, eqs. 4-6)."""
    M = crba_world(model, ws)
    J = cons.jacobian_from_rows(model, ws, lay, K)
    fac = ltl_factor(M, lp)
    acc = J
    Lam = jnp.zeros((lp.m, lp.m), K.dtype)
    for d in range(lp.D - 1, -1, -1):  # Y[:, k] = (J[:, k] - sum_{desc c} Y[:, c] L[c, k]) / L_kk
        act = lp.active[d]
        if not act.any():
            continue
        diag, row = fac[d]
        Yd = acc[:, lp.K[d]] / diag[None, :]
        Yd = jnp.where(jnp.asarray(act)[None, :], Yd, 0)
        Ya = Yd[:, np.nonzero(act)[0]] if not act.all() else Yd
        Lam = Lam + Ya @ Ya.T
        if d > 0:
            acc = acc.at[:, lp.targets[d]].add(-(Yd[:, :, None] * row[None]).reshape(lp.m, -1))
    return Lam

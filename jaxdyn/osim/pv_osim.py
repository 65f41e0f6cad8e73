"""PV-OSIM: the Delassus matrix in O(n + m^2 d).

Reference: A. S. Sathya, H. Bruyninckx, W. Decré, G. Pipeleers, "An Efficient Constrained
Dynamics Algorithm based on an Equivalent LQR Formulation using Gauss' Principle of Least
Constraint" (2022), as listed in Sathya, Decré & Swevers, "PV-OSIMr" (2024), Algorithm 1.

Backward sweep over the depth levels (world coordinates, ``P_i = 1 - U_i D_i^-1 S_i``):

* line 7: ``L^A_{π(i)} += K^A_i S_i^T D_i^-1 S_i K^{AT}_i`` -- the constraint-space inverse
  inertia grows by one symmetric rank-``k_i`` update per joint, restricted to the rows that
  joint ``i`` supports (the ``O(m^2 d)`` term);
* line 6: ``K^A_{π(i)} = [K^A_{π(i)}; K^A_i P_i^T]`` -- the constraint rows are propagated
  through the joint (``O(m d)``).

``Λ^-1 = L^A_0`` (line 8). All rows of one level are handled as one block (see
:mod:`jaxdyn.osim.rows`); the sweep is :func:`jaxdyn.model.tree.backward_pass` with the
per-level row plans as its static values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp

from ..model import tree
from ..spatial import mv
from .rows import gather_rows, level_joint_data

if TYPE_CHECKING:
    from jax import Array

    from ..algorithms.aba import Inertias
    from ..algorithms.kinematics import WorldState
    from ..model.model import Model
    from .rows import RowPlan


def _outer(Y, X):
    """``Y @ X^T`` for ``(m, k)`` blocks with small ``k`` (unrolled)."""
    out = Y[:, None, 0] * X[None, :, 0]
    for i in range(1, Y.shape[1]):
        out = out + Y[:, None, i] * X[None, :, i]
    return out


def delassus_pv_osim(
    model: Model, ws: WorldState, inertias: Inertias, K: Array, rp: RowPlan
) -> Array:
    """Delassus matrix (constraint order) from a world state, articulated inertias and the
    constraint rows ``K (m, 6)``; ``rp`` is the :class:`~jaxdyn.osim.rows.RowPlan`."""
    m = rp.m
    Us, Dinvs, _ = inertias
    Ks = K[rp.order]
    L = jnp.zeros((m, m), K.dtype)

    def step(lvl, _child, carry, inp, info):
        ml, mn = info["m"], info["m_next"]
        if ml == 0:
            return carry, None
        c, L = carry
        new = Ks[mn:ml]
        c = new if c is None or mn == 0 else jnp.concatenate([c, new], 0)  # line 6 (stack)
        S, U, Dinv = level_joint_data(lvl, inp[2], inp[0], inp[1], info["kmax"])
        S, U, Dinv = (gather_rows(x, info["local"]) for x in (S, U, Dinv))
        X = mv(S, c)  # S_i k_r                       (ml, k)
        Y = mv(Dinv, X)  # D_i^-1 S_i k_r
        upd = jnp.where(info["same"], _outer(Y, X), 0)  # line 7 (rank-k per joint)
        L = L + (upd if ml == m else jnp.pad(upd, ((0, m - ml), (0, m - ml))))
        c = c - mv(U, Y)  # P_i k_r                       line 6
        return (c, L), None

    inputs = (("level", Us), ("level", Dinvs), ("dof", ws.S))
    (_, L), _ = tree.backward_pass(model.topo, step, inputs, (None, L), static=rp.levels)
    return L[rp.inv][:, rp.inv]

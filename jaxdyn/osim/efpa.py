"""EFPA: the extended-force-propagator algorithm, O(n + m d + m^2).

Reference: P. Wensing, R. Featherstone, D. E. Orin, "A reduced-order recursive algorithm for
the computation of the operational-space inertia matrix" (ICRA 2012), in the form of Sathya,
Decré & Swevers, "PV-OSIMr" (2024), Algorithm 2.

* backward sweep (lines 3-7): the constraint-space extended motion propagators
  ``^jK^A_{π(i)} = ^jK^A_i P_i^T`` of every row at every ancestor level (``O(m d)``);
* second forward sweep (lines 8-10): ``^0Ω_i ^iK^{AT}_j = P_i^T (^0Ω_{π(i)} ^{π(i)}K^{AT}_j)
  + S_i^T D_i^-1 S_i ^iK^{AT}_j`` for every row and ancestor (``O(m d)``);
* assembly (lines 11-12): ``Λ^-1[r, s] = ^{c}K_r · (^0Ω_c ^cK^T_s)`` at the closest common
  ancestor ``c`` of the two constrained links (``O(m^2)``).

The two sweeps are :func:`jaxdyn.model.tree.backward_pass` / :func:`~jaxdyn.model.tree.
forward_pass` with the per-level row plans (:mod:`jaxdyn.osim.rows`) as their static values.

World coordinates: ``P_i = 1 - U_i D_i^-1 S_i``, ``P_i^T y = y - S_i^T D_i^-1 U_i^T y``; the
"inverse inertia in each link's frame" of line 10 needs no transform here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from ..model import tree
from ..spatial import mv
from .rows import gather_rows, level_joint_data

if TYPE_CHECKING:
    from jax import Array

    from ..algorithms.aba import Inertias
    from ..algorithms.kinematics import WorldState
    from ..model.model import Model
    from .rows import RowPlan


def delassus_efpa(model: Model, ws: WorldState, inertias: Inertias, K: Array, rp: RowPlan) -> Array:
    """Delassus matrix (constraint order); see :func:`jaxdyn.osim.pv_osim.delassus_pv_osim`."""
    t = model.topo
    nl = len(rp.levels)
    Us, Dinvs, _ = inertias
    Ks = K[rp.order]
    dt = K.dtype

    def back(lvl, _child, c, inp, info):  # backward sweep: CEFP of every row at every level
        ml, mn = info["m"], info["m_next"]
        if ml == 0:
            return c, None
        new = Ks[mn:ml]
        c = new if c is None or mn == 0 else jnp.concatenate([c, new], 0)
        S, U, Dinv = level_joint_data(lvl, inp[2], inp[0], inp[1], info["kmax"])
        S, U, Dinv = (gather_rows(x, info["local"]) for x in (S, U, Dinv))
        Y = mv(Dinv, mv(S, c))
        out = (c, (S, U, Dinv, Y))
        c = c - mv(U, Y)  # line 7
        return c, out

    inputs = (("level", Us), ("level", Dinvs), ("dof", ws.S))
    _, data = tree.backward_pass(t, back, inputs, static=rp.levels)

    def fwd(_lvl, _child, prev, inp, info):  # second forward sweep, line 10
        ml = info["m"]
        if ml == 0:  # (and on every deeper level)
            return prev, None
        S, U, Dinv, Y = inp[0][1]
        St = jnp.swapaxes(S, -1, -2)
        y = mv(St, Y)  # S^T D^-1 S c
        if prev is not None:
            a = prev[:ml]
            y = y + a - mv(St, mv(Dinv, mv(jnp.swapaxes(U, -1, -2), a)))  # + P^T a
        return y, y

    _, Om = tree.forward_pass(t, fwd, (("level", data),), static=rp.levels)
    # assembly (lines 11-12): pairs (r <= s) at the depth of their cca
    C = [data[li] for li in range(nl)]
    zrow = jnp.zeros((1, 6), dt)
    Cst = jnp.concatenate([x[0] for x in C if x is not None] + [zrow], 0)
    Ost = jnp.concatenate([Om[li] for li in range(nl) if Om[li] is not None] + [zrow], 0)
    ia, ib, sym = _pairs(rp)
    vals = jnp.sum(Cst[ia] * Ost[ib], -1)
    return vals[sym]


def _pairs(rp):
    if not hasattr(rp, "_efpa_pairs"):
        m = rp.m
        ms = np.asarray([lv["m"] for lv in rp.levels], np.int64)
        off = np.concatenate([[0], np.cumsum(ms)[:-1]])  # row r of level l at off[l] + r
        zero = int(ms.sum())
        iu, ju = np.triu_indices(m)
        d = rp.cca_depth[iu, ju]
        ia = np.where(d >= 0, off[np.maximum(d, 0)] + iu, zero)
        ib = np.where(d >= 0, off[np.maximum(d, 0)] + ju, zero)
        # output in constraint order: entry (i, j) is sorted pair (inv[i], inv[j])
        pi, pj = rp.inv[:, None], rp.inv[None, :]
        a, b = np.minimum(pi, pj), np.maximum(pi, pj)
        idx = np.zeros((m, m), np.int64)
        idx[iu, ju] = np.arange(len(iu))
        rp._efpa_pairs = (ia, ib, idx[a, b])
    return rp._efpa_pairs

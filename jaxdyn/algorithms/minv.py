"""Analytic inverse of the joint-space inertia matrix.

Reference: Carpentier 2018, "Analytical inverse of the joint space inertia matrix" (O(n^2)):
the ABA (Featherstone 2008, Alg. 7.1) run with zero velocity and gravity on the ``nv`` unit
torques, sharing one articulated-inertia pass; no mass matrix is formed or factorised.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import joints
from ..model import tree
from ..spatial import mm
from . import kinematics as kin
from .aba import articulated_inertias, world_inertia_matrices
from .._precision import full_precision


def minv_world(model, ws, inertias=None):
    """``M^-1`` from a world state: ABA with ``nv`` unit-torque right-hand sides.

    Only the columns that can be nonzero are carried: with bodies sorted by depth, the subtree
    of a body at level ``l`` owns coordinates ``>= v0_l`` (the level's first coordinate), so
    the backward pass at level ``l`` works on columns ``[v0_l, nv)`` and the forward pass
    yields the block ``Minv[rows_l, v0_l:]``; the rest follows by symmetry (Carpentier 2018
    exploits the same subtree sparsity).
    """
    t = model.topo
    dtype = ws.S.dtype
    nv, nl = model.nv, len(t.levels)
    S = ws.S
    Us, Dinvs, _ = inertias if inertias is not None else articulated_inertias(
        model, S, world_inertia_matrices(ws))
    v0 = [lvl.groups[0].v0 for lvl in t.levels]
    us = [None] * nl
    below = None
    for li in range(nl - 1, -1, -1):
        lvl = t.levels[li]
        ncol = nv - v0[li]
        p = None
        if below is not None:
            pb = tree.sum_into_parents(below, t.levels[li + 1], lvl.n)
            p = jnp.concatenate([jnp.zeros(pb.shape[:2] + (v0[li + 1] - v0[li],), dtype), pb], -1)
        ug, pa = [], []
        for gi, g in enumerate(lvl.groups):
            k = joints.NV[g.kind]
            Sg = S[g.v0:g.v1].reshape(g.n, k, 6)
            U, Dinv = Us[li][gi], Dinvs[li][gi]
            # unit torques: tau_g[:, :, c] = 1 at c == own coordinate (relative to v0_l)
            eye = np.zeros((g.n, k, ncol))
            rows = np.arange(g.v0, g.v1) - v0[li]
            eye.reshape(g.n * k, ncol)[np.arange(g.n * k), rows] = 1.0
            u = jnp.asarray(eye, dtype)
            if p is not None:
                pg = p[g.b0 - lvl.b0:g.b1 - lvl.b0]
                u = u - mm(Sg, pg)
                pa.append(pg + mm(U, mm(Dinv, u)))
            else:
                pa.append(mm(U, mm(Dinv, u)))
            ug.append(u)
        us[li] = tuple(ug)
        below = pa[0] if len(pa) == 1 else jnp.concatenate(pa, 0)
    rows_out, prev = [], None
    for li, lvl in enumerate(t.levels):
        if prev is None:
            a = jnp.zeros((lvl.n, 6, nv - v0[li]), dtype)
        else:
            a = tree.gather_parent(prev, lvl, None)[..., v0[li] - v0[li - 1]:]
        parts = []
        for gi, g in enumerate(lvl.groups):
            k = joints.NV[g.kind]
            Sg = S[g.v0:g.v1].reshape(g.n, k, 6)
            U, Dinv, u = Us[li][gi], Dinvs[li][gi], us[li][gi]
            ag = a[g.b0 - lvl.b0:g.b1 - lvl.b0]
            qdd = mm(Dinv, u - mm(jnp.swapaxes(U, -1, -2), ag))  # (n, k, ncol)
            rows_out.append(jnp.concatenate(
                [jnp.zeros((g.n * k, v0[li]), dtype), qdd.reshape(g.n * k, -1)], -1))
            parts.append(ag + mm(jnp.swapaxes(Sg, -1, -2), qdd))
        prev = parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)
    upper = jnp.concatenate(rows_out, 0)
    row_v0 = np.concatenate([np.full(lvl.groups[-1].v1 - lvl.groups[0].v0, v0[li])
                             for li, lvl in enumerate(t.levels)])
    keep = np.arange(nv)[None, :] >= row_v0[:, None]
    return jnp.where(keep, upper, upper.T)


@full_precision
def minv(model, q):
    """Inverse of the joint-space inertia matrix, without forming or factorising ``M``.

    Reference: Carpentier 2018, "Analytical inverse of the joint space inertia matrix"
    (the ABA run with zero velocity and gravity on the ``nv`` unit torques, sharing one
    articulated-inertia pass; O(n^2)).

    **Arguments:** ``q (nq,)``. **Returns:** ``M(q)^-1`` ``(nv, nv)``.
    """
    model, q, _ = kin._prepare(model, "minv", q)
    return minv_world(model, kin.world_state(model, q, centered=True))

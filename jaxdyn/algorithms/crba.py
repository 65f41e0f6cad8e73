"""Composite-rigid-body algorithm (joint-space inertia matrix), in world coordinates.

Reference: Featherstone 2008, Alg. 6.2 (CRBA). In ground coordinates the composite inertia of a
subtree is a plain sum, ``oIc_i = sum_{j in subtree(i)} oI_j``, and
``M[r, c] = oS_r^T oIc_{body(c)} oS_c`` for every coordinate ``r`` on the support of ``c``
(Featherstone eq. 6.19), which is one masked ``nv x 6 x nv`` product.
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import _checks, spatial
from .._precision import full_precision
from ..model import tree
from . import kinematics as kin


def inertia_apply_origin(m, h, Ibar, v):
    """Spatial inertia given about the origin (``m``, ``h = m c``, ``Ibar``) times ``v``."""
    w, vl = v[..., :3], v[..., 3:]
    return jnp.concatenate(
        [spatial.mv(Ibar, w) + spatial.cross(h, vl), m[..., None] * vl - spatial.cross(h, w)], -1
    )


def crba_world(model, ws):
    """Joint-space inertia matrix from a precomputed world state."""
    t = model.topo
    Ic = tree.backward_accumulate(
        t, jnp.concatenate([ws.mass[:, None], ws.h, ws.Ibar.reshape(-1, 9)], -1)
    )
    m, h, Ibar = Ic[:, 0], Ic[:, 1:4], Ic[:, 4:].reshape(-1, 3, 3)
    dm, dh, dI = (tree.bodies_to_dofs(t, x) for x in (m, h, Ibar))
    F = inertia_apply_origin(dm, dh, dI, ws.S)  # (nv, 6): oIc_{body(c)} oS_c
    Mfull = ws.S @ F.T
    anc = t.dof_ancestor
    M = jnp.where(anc, Mfull, jnp.where(anc.T, Mfull.T, 0))
    if model.armature is not None:
        M = M + jnp.diag(model.armature)
    return M


@_checks.public("crba")
@full_precision
def crba(model, q):
    """Joint-space inertia matrix ``M(q)`` (``nv x nv``, symmetric positive definite; only
    semi-definite with massless moving subtrees, see :func:`jaxdyn.load_urdf`), with
    ``model.armature`` on the diagonal when set.

    Reference: Featherstone 2008, Alg. 6.2 (CRBA), in world coordinates.
    """
    model, q, dtype = kin._prepare(model, "crba", q)
    if model.nb == 0:
        return jnp.zeros((0, 0), dtype)
    return crba_world(model, kin.world_state(model, q, centered=True))

"""Articulated-body algorithm (forward dynamics), in world coordinates.

Reference: Featherstone 2008, Alg. 7.1 (ABA, Table 7.1), in ground coordinates: articulated
inertias ``IA`` and bias forces ``pA`` of a child are added to its parent's without a
transform. Multi-DoF joints use the ``k x k`` blocks ``D = S^T U`` of eq. 7.25.

The passes are written for several right-hand sides at once (``pA (nb, 6, r)``,
``tau (nv, r)``): ``r = 1`` is ABA, ``r = nv`` with unit torques is the analytic inverse of
the mass matrix (:mod:`jaxdyn.algorithms.minv` uses the same pieces), and the derivative
code reuses it.
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import _checks, joints, spatial
from ..spatial import mm
from ..model import tree
from . import kinematics as kin
from .rnea import check_f_ext, external_forces_world


def articulated_inertias(model, S, I6):
    """Backward pass on the inertias only (they depend on ``q`` alone).

    ``S (nv, 6)`` world motion subspaces, ``I6 (nb, 6, 6)`` world body inertias.
    Returns per level and group ``U``, ``D^-1`` and the projected inertia
    ``Ia = IA - U D^-1 U^T`` (Featherstone eq. 7.34).
    """
    t = model.topo
    nl = len(t.levels)
    Us, Dinvs, Ias = [None] * nl, [None] * nl, [None] * nl
    below = None
    for li in range(nl - 1, -1, -1):
        lvl = t.levels[li]
        IA = I6[lvl.b0:lvl.b1]
        if below is not None:
            IA = IA + tree.sum_into_parents(below, t.levels[li + 1], lvl.n)
        Ug, Dg, Ia = [], [], []
        for g in lvl.groups:
            k = joints.NV[g.kind]
            Sg = S[g.v0:g.v1].reshape(g.n, k, 6)
            IAg = IA[g.b0 - lvl.b0:g.b1 - lvl.b0]
            if k == 1:  # elementwise forms: one fused kernel instead of batched dots
                s1 = Sg[:, 0]
                U1 = spatial.mv(IAg, s1)
                Dinv = 1 / jnp.sum(s1 * U1, -1)
                U = U1[..., None]
                Dinv = Dinv[:, None, None]
                Ia.append(IAg - U * (Dinv * U1[:, None, :]))
            else:
                U = mm(IAg, jnp.swapaxes(Sg, -1, -2))  # (n, 6, k)
                Dinv = spatial.inv_spd(mm(Sg, U))
                if g.kind == joints.FREE:
                    # S is invertible: nothing of the inertia crosses a free joint. Exact zero
                    # instead of the rounding residue of IA - IA (large in world coordinates).
                    Ia.append(jnp.zeros_like(IAg))
                else:
                    Ia.append(IAg - mm(mm(U, Dinv), jnp.swapaxes(U, -1, -2)))
            Ug.append(U)
            Dg.append(Dinv)
        Us[li], Dinvs[li], Ias[li] = tuple(Ug), tuple(Dg), tuple(Ia)
        below = Ia[0] if len(Ia) == 1 else jnp.concatenate(Ia, 0)
    return Us, Dinvs, Ias


def aba_passes(model, S, I6, pA, c, tau, a0, inertias=None):
    """ABA with ``r`` right-hand sides.

    ``pA (nb, 6, r)`` body bias forces, ``c (nb, 6)`` or ``None`` velocity-product
    accelerations, ``tau (nv, r)``, ``a0 (6, r)`` root acceleration. ``inertias`` may pass a
    precomputed :func:`articulated_inertias`. Returns ``(qdd (nv, r), a (nb, 6, r))``.
    """
    t = model.topo
    nl = len(t.levels)
    Us, Dinvs, Ias = inertias if inertias is not None else articulated_inertias(model, S, I6)
    us = [None] * nl
    below = None
    for li in range(nl - 1, -1, -1):
        lvl = t.levels[li]
        p = pA[lvl.b0:lvl.b1]
        if below is not None:
            p = p + tree.sum_into_parents(below, t.levels[li + 1], lvl.n)
        ug, pa = [], []
        for gi, g in enumerate(lvl.groups):
            k = joints.NV[g.kind]
            s = slice(g.b0 - lvl.b0, g.b1 - lvl.b0)
            Sg = S[g.v0:g.v1].reshape(g.n, k, 6)
            U, Dinv, pg = Us[li][gi], Dinvs[li][gi], p[s]
            u = tau[g.v0:g.v1].reshape((g.n, k) + tau.shape[1:]) - mm(Sg, pg)
            ug.append(u)
            pa_g = pg + mm(U, mm(Dinv, u))
            if c is not None:
                pa_g = pa_g + mm(Ias[li][gi], c[g.b0:g.b1, :, None])
            pa.append(pa_g)
        us[li] = tuple(ug)
        below = pa[0] if len(pa) == 1 else jnp.concatenate(pa, 0)
    qdds, accs, prev = [], [], None
    for li, lvl in enumerate(t.levels):
        a = tree.gather_parent(prev, lvl, a0)
        if c is not None:
            a = a + c[lvl.b0:lvl.b1, :, None]
        parts = []
        for gi, g in enumerate(lvl.groups):
            k = joints.NV[g.kind]
            s = slice(g.b0 - lvl.b0, g.b1 - lvl.b0)
            Sg = S[g.v0:g.v1].reshape(g.n, k, 6)
            U, Dinv, u = Us[li][gi], Dinvs[li][gi], us[li][gi]
            ag = a[s]
            qdd = mm(Dinv, u - mm(jnp.swapaxes(U, -1, -2), ag))  # (n, k, r)
            qdds.append(qdd.reshape((g.n * k,) + qdd.shape[2:]))
            parts.append(ag + mm(jnp.swapaxes(Sg, -1, -2), qdd))
        prev = parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)
        accs.append(prev)
    return jnp.concatenate(qdds, 0), jnp.concatenate(accs, 0)


def world_inertia_matrices(ws):
    """``(nb, 6, 6)`` world-frame spatial inertias."""
    return spatial.inertia_matrix(ws.mass, ws.h, ws.Ibar)


def aba_world(model, ws, qd, tau, f_ext=None, gravity=True):
    """ABA on a precomputed world state. Returns ``(qdd, a, v)``."""
    dtype = ws.S.dtype
    v, vJ = kin.body_velocities(model, ws, qd)
    c = spatial.motion_cross(v, vJ)
    pA = spatial.force_cross(v, kin.inertia_apply(ws.mass, ws.c, ws.Ic, v))
    if f_ext is not None:
        pA = pA - external_forces_world(model, ws, f_ext)
    a0 = kin.gravity_acceleration(model, dtype) if gravity else jnp.zeros(6, dtype)
    qdd, a = aba_passes(model, ws.S, world_inertia_matrices(ws), pA[..., None], c,
                        tau[:, None], a0[:, None])
    return qdd[:, 0], a[..., 0], v


def aba(model, q, v, tau, f_ext=None):
    """Forward dynamics ``a = M(q)^-1 (tau - C(q, v) v - g(q) + sum J_i^T f_ext_i)``.

    Reference: Featherstone 2008, Alg. 7.1 (ABA), in world coordinates.

    **Arguments:** ``q (nq,)``, ``v (nv,)``, ``tau (nv,)``, ``f_ext (nb, 6)`` or ``None``
    (body-frame spatial forces, as in :func:`jaxdyn.rnea`).

    **Returns:** joint accelerations ``(nv,)``.
    """
    fn = "aba"
    v = _checks.as_array(fn, "v", v, (("nv", model.nv),), model)
    tau = _checks.as_array(fn, "tau", tau, (("nv", model.nv),), model)
    model, q, dtype = kin._prepare(model, fn, q, v, tau, f_ext)
    f_ext = check_f_ext(fn, model, f_ext, dtype)
    ws = kin.world_state(model, q, centered=True)
    return aba_world(model, ws, v.astype(dtype), tau.astype(dtype), f_ext)[0]

"""IDSVA: closed-form first-order partial derivatives of inverse dynamics, in ground coordinates.

Reference: S. Singh, R. P. Russell, P. M. Wensing, "Efficient Analytical Derivatives of Rigid-Body
Dynamics Using Spatial Vector Algebra", IEEE RA-L 7(2), 2022 -- Algorithm 1 (IDSVA), the
closed-form partials Eq. 30 (with respect to ``q``) and Eq. 32 (with respect to ``qd``), the
auxiliary quantities ``Psid, Psidd`` of Eq. 31 and the body-level Coriolis factor ``B`` of
Eq. 28. The formulas implemented are the ones of ``/work/shared/notes/idsva.md`` (checked there
against Pinocchio's ``computeRNEADerivatives``):

* per coordinate column ``i`` (body ``b``, parent ``λ``), in world coordinates:
  ``Psid_i = v_λ x S_i``, ``Psidd_i = a_λ x S_i + v_λ x Psid_i``, ``Sd_i = v_b x S_i``;
* per body: ``B_b = (v_b x*) I_b + (I_b v_b) xbar* - I_b (v_b x)`` (twice the factor of Eq. 28,
  so that ``B + B^T = 2 dI/dt``), and the subtree composites ``IC, BC, fC``;
* Algorithm 1's backward-pass vectors ``F1 = IC S``, ``F2 = BC S + IC (Psid + Sd)``,
  ``F3 = BC Psid + IC Psidd + (fC xbar*) S``, ``F4 = BC^T S``;
* for every pair of coordinates with ``body(i)`` ancestor-or-self of ``body(j)``:
  ``dtau_j/dq_i = F1_j . Psidd_i + F4_j . Psid_i`` and
  ``dtau_j/dqd_i = F1_j . (Psid_i + Sd_i) + F4_j . S_i`` (Eq. 30/32, first lines; this form is
  also the one used on the diagonal blocks of multi-DoF joints), and, with ``body(i)`` a *strict*
  ancestor, ``dtau_i/dq_j = S_i . F3_j``, ``dtau_i/dqd_j = S_i . F2_j`` (second lines: Algorithm
  1, lines 19-20); ``dtau/dqdd = M`` with ``M_ij = S_i . F1_j``.

The per-body recursions run level by level (as every jaxdyn pass); the pairwise products of
Algorithm 1's lines 17-20 are written as two dense ``nv x 12 x 2nv`` / ``nv x 6 x 3nv`` products
masked with the static ancestor pattern of the tree (the CRBA pattern, ``topo.dof_ancestor``):
one fat matrix product vectorises far better in XLA than the paper's per-body loop over
subtree column blocks (the flop count is ``O(nv^2)`` instead of ``O(nv d)``).

Derivatives with respect to ``q`` are taken in the tangent space of :func:`jaxdyn.integrate`
(the right increment ``q ⊕ δ``), so they are ``nv x nv`` for every joint kind.
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import _checks, joints, spatial
from ..algorithms import kinematics as kin
from ..algorithms.rnea import check_f_ext, external_forces_world
from ..model import tree


def body_coriolis_terms(mass, h, Ibar, v):
    """Per-body parameters of the body-level Coriolis factor (Singh et al. 2022, Eq. 28, after
    Niemeyer 1990 and Echeandia & Wensing 2021), in a form that is summed over subtrees.

    The algorithm needs (twice) the factor of Eq. 28 for a world-frame inertia ``I`` moving with
    velocity ``v``,

        ``B(I, v) = (v x*) I + (I v) xbar* - I (v x)``  (``B v = 2 v x* I v``, ``B + B^T = 2 İ``).

    With ``X = I (v x)`` one has ``(v x*) I = -X^T``, so ``B = -(X + X^T) + (I v) xbar*``; both
    ``X`` and ``I v`` are linear in the body's inertia, so the composite ``B^C`` of a subtree is
    given by the sums of ``X`` and ``I v``. In 3x3 blocks, with ``W = [w]x``, ``V = [v_l]x``,
    ``H = [h]x`` and ``I = [[Ibar, H], [-H, m 1]]``::

        X = [[Ibar W + H V,  H W],
             [-H W + m V,    m W]]

    so ``X`` is held as ``A = Ibar W + H V``, ``C = H W`` (``H V = v_l h^T - (h.v_l) 1``),
    ``m w`` and ``m v_l``. Returns ``(n, 24)``: ``A (9), C (9), m w (3), m v_l (3)``, and
    ``I v (n, 6)``.
    """
    w, vl = v[..., :3], v[..., 3:]
    eye = jnp.eye(3, dtype=v.dtype)
    hv = jnp.sum(h * vl, -1)[..., None, None]
    hw = jnp.sum(h * w, -1)[..., None, None]
    # rows of Ibar W are Ibar_r x w; H V = vl h^T - (h.vl) 1; H W = w h^T - (h.w) 1
    A = spatial.cross(Ibar, w[..., None, :]) + vl[..., :, None] * h[..., None, :] - hv * eye
    C = w[..., :, None] * h[..., None, :] - hw * eye
    m = mass[..., None]
    n = A.shape[:-2]
    X = jnp.concatenate([A.reshape(n + (9,)), C.reshape(n + (9,)), m * w, m * vl], -1)
    Iv = jnp.concatenate([spatial.mv(Ibar, w) + spatial.cross(h, vl),
                          m * vl - spatial.cross(h, w)], -1)
    return X, Iv


def _X_apply(A, C, mw, mvl, x):
    """``X x`` and ``X^T x`` for the block form of :func:`body_coriolis_terms`."""
    xw, xl = x[..., :3], x[..., 3:]
    At = jnp.swapaxes(A, -1, -2)
    Ct = jnp.swapaxes(C, -1, -2)
    Xx = jnp.concatenate([spatial.mv(A, xw) + spatial.mv(C, xl),
                          -spatial.mv(C, xw) + spatial.cross(mvl, xw) + spatial.cross(mw, xl)], -1)
    XTx = jnp.concatenate([spatial.mv(At, xw) - spatial.mv(Ct, xl) - spatial.cross(mvl, xl),
                           spatial.mv(Ct, xw) - spatial.cross(mw, xl)], -1)
    return Xx + XTx


def _inertia_apply(m, h, Ibar, x):
    """Spatial inertia about the world origin times motion vectors ``x (..., 6)``."""
    w, vl = x[..., :3], x[..., 3:]
    return jnp.concatenate(
        [spatial.mv(Ibar, w) + spatial.cross(h, vl), m[..., None] * vl - spatial.cross(h, w)], -1)


def bodies_to_dofs(topo, x):
    """Repeat per-body rows ``x (nb, ...)`` for each of the body's coordinates, ``(nv, ...)``.

    Same as :func:`jaxdyn.model.tree.bodies_to_dofs`, written with slices and broadcasts per
    run of joint kinds instead of a gather (a gather is a slow scalar loop on XLA:CPU).
    """
    if topo.nv == topo.nb:
        return x
    parts = []
    for kind, b0, b1, _, _ in tree.kind_runs(topo):
        k = joints.NV[kind]
        xs = x[b0:b1]
        if k > 1:
            xs = jnp.broadcast_to(xs[:, None], (b1 - b0, k) + xs.shape[1:])
            xs = xs.reshape(((b1 - b0) * k,) + xs.shape[2:])
        parts.append(xs)
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)


def forward_accumulate_with_parent(topo, incr, root):
    """:func:`jaxdyn.model.tree.forward_accumulate` that also returns each body's parent value
    (``root`` for the bodies at depth 0)."""
    out, par, prev = [], [], None
    for lvl in topo.levels:
        p = tree.gather_parent(prev, lvl, root)
        prev = p + incr[lvl.b0:lvl.b1]
        out.append(prev)
        par.append(p)
    return jnp.concatenate(out, 0), jnp.concatenate(par, 0)


def masked_products(mask1, L1, R1, mask2, L2, R2):
    """``out[r, c] = sum_k L1[r, k] R1[c, k]`` where ``mask1``, else the same with ``L2, R2``
    where ``mask2``, else 0; ``L*``, ``R*`` are tuples of ``(nv, 6)`` blocks.

    Written as unrolled broadcast products (``R`` transposed so the column index is the
    contiguous one) so that XLA emits one loop fusion that writes only the result: under
    ``vmap`` a dense ``dot`` would write (and the select re-read) two full ``nv x nv`` products
    per output, and IDSVA is bound by that memory traffic at large batch.
    """
    def product(L, R):
        acc = None
        for Lb, Rb in zip(L, R):
            RT = Rb.T
            for k in range(Lb.shape[-1]):
                term = Lb[:, k, None] * RT[None, k, :]
                acc = term if acc is None else acc + term
        return acc

    zero = jnp.zeros((), L1[0].dtype)
    return jnp.where(mask1, product(L1, R1), jnp.where(mask2, product(L2, R2), zero))


def idsva_world(model, ws, qd, qdd, f_ext_world=None):
    """RNEA and IDSVA on a world state.

    Reference: Singh, Russell & Wensing 2022, Algorithm 1 (forward pass, lines 1-11: ``v, a``,
    ``Psid, Psidd``, ``Psid + Sd``, ``B``, ``f``; backward pass, lines 12-23: composites and the
    pairwise products), Eqs. 28, 30-32.

    **Arguments:** ``ws`` (:class:`~jaxdyn.algorithms.kinematics.WorldState`); ``qd (nv,)``,
    ``qdd (nv,)``; ``f_ext_world (nb, 6)`` external forces at the world origin, or ``None``.

    **Returns:** ``(tau, dtau_dq, dtau_dv, M)``.
    """
    t = model.topo
    nb, nv = t.nb, t.nv
    dt = ws.S.dtype
    S = ws.S
    h, Ibar = ws.h, ws.Ibar
    a0 = kin.gravity_acceleration(model, dt)
    # --- forward pass (Alg. 1, lines 2-10): velocities, accelerations, body forces
    vJ = kin.joint_velocities(model, ws, qd)
    v, vp = forward_accumulate_with_parent(t, vJ, jnp.zeros(6, dt))
    aJ = tree.dofs_to_bodies(t, S * qdd[:, None]) + spatial.motion_cross(v, vJ)
    a, ap = forward_accumulate_with_parent(t, aJ, a0)
    X, Iv = body_coriolis_terms(ws.mass, h, Ibar, v)
    f = _inertia_apply(ws.mass, h, Ibar, a) + spatial.force_cross(v, Iv)
    if f_ext_world is not None:
        f = f - f_ext_world
    # --- backward pass: subtree composites of I, B (as X and I v) and f (Alg. 1, line 22)
    packed = jnp.concatenate([ws.mass[:, None], h, Ibar.reshape(nb, 9), X, Iv, f], -1)
    comp = tree.backward_accumulate(t, packed)
    d = bodies_to_dofs(t, jnp.concatenate([comp, v, vp, ap], -1))
    mC, hC, IC = d[:, 0], d[:, 1:4], d[:, 4:13].reshape(-1, 3, 3)
    AC, CC = d[:, 13:22].reshape(-1, 3, 3), d[:, 22:31].reshape(-1, 3, 3)
    mwC, mvC, IvC, FC = d[:, 31:34], d[:, 34:37], d[:, 37:43], d[:, 43:49]
    vb, vp, ap = d[:, 49:55], d[:, 55:61], d[:, 61:67]
    tau = jnp.sum(S * FC, -1)
    # --- per-coordinate kinematic quantities (Alg. 1, lines 4-7; Eq. 31)
    Psid = spatial.motion_cross(vp, S)
    Psidd = spatial.motion_cross(ap, S) + spatial.motion_cross(vp, Psid)
    vdJ = Psid + spatial.motion_cross(vb, S)  # Psid + Sd
    # --- backward-pass vectors (Alg. 1, lines 13-16): BC x = -(XC + XC^T) x + x x* (I v)C
    YS = -_X_apply(AC, CC, mwC, mvC, S)
    KS = spatial.force_cross(S, IvC)
    F1 = _inertia_apply(mC, hC, IC, S)
    F2 = YS + KS + _inertia_apply(mC, hC, IC, vdJ)
    F3 = (-_X_apply(AC, CC, mwC, mvC, Psid) + spatial.force_cross(Psid, IvC)
          + _inertia_apply(mC, hC, IC, Psidd) + spatial.force_cross(S, FC))
    F4 = YS - KS
    # --- pairwise products (Alg. 1, lines 17-20), masked with the ancestor pattern
    anc = t.dof_ancestor  # anc[r, c]: body(r) is ancestor-or-self of body(c)
    # dtau_dq[j, i] = F1_j.Psidd_i + F4_j.Psid_i  (i ⪯ j);  dtau_dq[i, j] = S_i.F3_j  (i ≺ j)
    dtau_dq = masked_products(anc.T, (F1, F4), (Psidd, Psid), anc, (S,), (F3,))
    dtau_dv = masked_products(anc.T, (F1, F4), (vdJ, S), anc, (S,), (F2,))
    M = masked_products(anc, (S,), (F1,), anc.T, (F1,), (S,))
    return tau, dtau_dq, dtau_dv, M


def rnea_derivatives_world(model, ws, qd, qdd, f_ext=None):
    """RNEA and IDSVA on a world state: ``(tau, dtau_dq, dtau_dv, M)``."""
    fw = None if f_ext is None else external_forces_world(model, ws, f_ext)
    return idsva_world(model, ws, qd, qdd, fw)


def _prepare_id(fn, model, q, v, a, f_ext):
    v = _checks.as_array(fn, "v", v, (("nv", model.nv),), model)
    a = _checks.as_array(fn, "a", a, (("nv", model.nv),), model)
    model, q, dtype = kin._prepare(model, fn, q, v, a, f_ext)
    f_ext = check_f_ext(fn, model, f_ext, dtype)
    return model, q, v.astype(dtype), a.astype(dtype), f_ext


def rnea_derivatives(model, q, v, a, f_ext=None):
    """Partial derivatives of inverse dynamics ``tau = rnea(q, v, a, f_ext)`` by IDSVA.

    Reference: Singh, Russell & Wensing 2022, "Efficient Analytical Derivatives of Rigid-Body
    Dynamics Using Spatial Vector Algebra", Algorithm 1, Eqs. 30 and 32, in ground coordinates.

    **Arguments:** ``q (nq,)``, ``v (nv,)``, ``a (nv,)``; ``f_ext (nb, 6)`` or ``None``
    (body-frame spatial forces, as in :func:`jaxdyn.rnea`; being fixed in the bodies, they
    rotate with them, which the ``q`` partial includes).

    **Returns:** ``(dtau_dq, dtau_dv, dtau_da)``, each ``(nv, nv)``. ``dtau_dq[:, k]`` is the
    derivative along the ``k``-th coordinate of the right increment ``integrate(q, δ)``
    (Pinocchio's convention: body-frame rotation / twist increments for spherical and free
    joints); ``dtau_da`` is the mass matrix ``M(q)``.
    """
    model, q, v, a, f_ext = _prepare_id("rnea_derivatives", model, q, v, a, f_ext)
    ws = kin.world_state(model, q, centered=True)
    return rnea_derivatives_world(model, ws, v, a, f_ext)[1:]


def fext_tau_tangent(model, ws, df_ext):
    """Directional derivative of ``rnea`` in the external forces: ``-sum_b J_b^T df_b``.

    Linear in ``df_ext (nb, 6)`` (body-frame forces); the placements come from ``ws``.
    """
    t = model.topo
    dF = tree.backward_accumulate(t, external_forces_world(model, ws, df_ext))
    return -jnp.sum(ws.S * bodies_to_dofs(t, dF), -1)

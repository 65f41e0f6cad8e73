"""C-ABA: cluster-based articulated-body forward dynamics.

Reference: M. Chignoli, N. Adrian, S. Kim, P. M. Wensing, "Recursive rigid-body dynamics
algorithms for systems with kinematic loops", IEEE T-RO 2024 (arXiv:2311.13732), Algorithm 2
(§VII, derived from Gauss' principle): ``U_k = I^A_k S_k``, ``D_k = S_k^T U_k``,
``u_k = tau_k - S_k^T p^A_k``, ``I^a_k = I^A_k - U_k D_k^-1 U_k^T``,
``p^a_k = p^A_k + I^a_k c_k + U_k D_k^-1 u_k``, ``I^A_λ += X_k^T I^a_k X_k``,
``p^A_λ += X_k^T p^a_k``; then ``ydd_k = D_k^-1 (u_k - U_k^T a'_k)`` with
``a'_k = X_k a_λ(k) + c_k``, ``a_k = a'_k + S_k ydd_k``.

In world coordinates (:mod:`jaxdyn.clusters.common`), level by level through
:func:`jaxdyn.model.tree.backward_pass` / :func:`~jaxdyn.model.tree.forward_pass`. When every
cluster hangs from a single output body (every robot of the paper) the articulated inertia of a
cluster is block diagonal and what it hands to its parent lands on one body
(:func:`_caba_single_output`); models with a rotor-folding plan
(:func:`jaxdyn.clusters.fold_rotors`) run that on the link tree with exact rotor terms. Without
loops every cluster is one joint and C-ABA is ABA (Featherstone 2008, Alg. 7.1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp

from .. import eager, spatial
from .._precision import full_precision
from ..algorithms import kinematics as kin
from ..algorithms.aba import (
    articulated_bias_force,
    articulated_body_step,
    project_articulated_inertia,
    world_inertia_matrices,
)
from ..model import tree
from .common import (
    all_single_output,
    backward_articulated,
    cluster_view,
    fast_kinematics,
    forward_kinematics,
    receivers_of,
    setup,
    sum_bodies,
)
from .model import ClusterModel, require_cluster_model
from .rotors import rotor_terms, setup_folded
from .state import group_y

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike

__all__ = ["caba"]


@eager.eager_jit
@full_precision
def caba(
    model: ClusterModel, q: ArrayLike, v: ArrayLike, tau: ArrayLike, f_ext: ArrayLike | None = None
) -> Array:
    """Cluster-based forward dynamics (C-ABA): ``a = H^-1 (tau - C)`` in independent
    coordinates.

    Reference: Chignoli et al., T-RO 2024, Algorithm 2 (§VII), in world coordinates; reduces to
    Featherstone's ABA (Alg. 7.1) when every cluster is a single joint. On a model with a
    rotor-folding plan (the default where exact, :func:`jaxdyn.clusters.fold_rotors`) the
    axisymmetric transmission rotors are carried by their parent bodies and the passes run on
    the link tree (not with ``f_ext``).

    **Arguments:** ``model`` (:class:`ClusterModel`; a plain :class:`jaxdyn.Model` raises
    ``TypeError``: use :func:`jaxdyn.aba`); ``q (nq,)``, ``v (nv,)``, ``tau (nv,)``,
    ``f_ext (nb, 6)`` or None (as :func:`jaxdyn.clusters.crnea`). **Returns:** ``a (nv,)``.
    """
    fn = "caba"
    require_cluster_model(fn, model, "jaxdyn.aba")
    if model.topo.fold is not None and f_ext is None:  # rotors carried by their parents
        s, rot = setup_folded(model, fn, q, v, tau, "tau")
        return _caba_single_output(s, rotors=rot)[model.topo.fold.vi_inv]
    s = setup(model, fn, q, v, tau, "tau", f_ext)
    if all_single_output(s.model.topo):
        return _caba_single_output(s)
    return _caba_general(s)


def _caba_general(s):
    """C-ABA in the dense per-body form (any cluster tree, e.g. clusters whose bodies hang from
    several bodies of the parent cluster)."""
    model, ws, tau, dt = s.model, s.ws, s.x, s.dt
    t = model.topo
    gks, v_all = forward_kinematics(model, s.gss, ws, dt, True)
    bo = t.body_order
    m, com, Ic = ws.mass[bo], ws.c[bo], ws.Ic[bo]
    bias = spatial.force_cross(v_all, kin.inertia_apply(m, com, Ic, v_all))
    if s.fw is not None:
        bias = bias - s.fw[bo]
    ab = backward_articulated(model, ws, gks, dt, bias, tau)
    u_all = ab.u
    assert u_all is not None  # (given a bias, the backward pass returns u)
    a0 = kin.gravity_acceleration(model.tree, dt)
    ydds: list = [None] * len(t.groups)

    def forward(lvl, _, a_prev, inp):
        parts = []
        a_out = tree.gather_parent(a_prev, lvl, a0)
        for g in lvl.groups:
            gk = gks[g.index]
            U, Dinv, u = ab.U[g.index], ab.Dinv[g.index], u_all[g.index]
            ap = (a_out[g.b0 - lvl.b0 : g.b1 - lvl.b0].reshape(g.nc, g.nbc, 6) + gk.c).reshape(
                g.nc, 6 * g.nbc
            )
            ydd = jnp.einsum("cyz,cz->cy", Dinv, u - jnp.einsum("cky,ck->cy", U, ap))
            acc = ap + jnp.einsum("cky,cy->ck", gk.S.reshape(g.nc, 6 * g.nbc, g.ny), ydd)
            parts.append(acc.reshape(-1, 6))
            ydds[g.index] = ydd.reshape(-1)
        acc = parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)
        return acc, None

    tree.forward_pass(t, forward, ())
    return jnp.concatenate(ydds)


def _caba_single_output(s, rotors=None):
    """C-ABA when every cluster hangs from one output body (transmissions, differentials,
    loops closed under one parent: every robot of the paper).

    The articulated inertia of a cluster is then block diagonal (one 6x6 block per body) and
    what it hands to its parent lands on one body: ``X_k^T Ia_k X_k = sum_i IA_ii - Ub D^-1
    Ub^T`` with ``Ub = sum_i U_i``, ``X_k^T pa_k = sum_i (pA_i + IA_ii c_i) + Ub D^-1 (u -
    U^T c)``. Everything is written per level and per group of same-signature clusters with
    small products unrolled, as jaxdyn's core ABA.

    ``rotors``: the rotor data of a folded model (:mod:`jaxdyn.clusters.rotors`); its exact
    rotor terms are added."""
    model, ws, v, tau, dt = s.model, s.ws, s.v, s.x, s.dt
    t = model.topo
    bo = t.body_order
    I6 = world_inertia_matrices(ws)[bo]
    # kinematics: spanning-tree velocities and bias forces (jaxdyn's core passes), taken into
    # cluster body order once; per group S_k and c = c_J + v x v_J
    v_t, Ss, cs = fast_kinematics(model, s.gss, ws, dt)
    bias = spatial.force_cross(v_t, kin.inertia_apply(ws.mass, ws.c, ws.Ic, v_t))[bo]
    if s.fw is not None:
        bias = bias - s.fw[bo]
    rterms = None if rotors is None else rotor_terms(rotors[0], rotors[1], ws, v_t, v, dt)
    ng = len(t.groups)
    Ubs, Dinvs, ws_ = [None] * ng, [None] * ng, [None] * ng

    def backward(lvl, child, below, inp):
        li = lvl.groups[0].level
        IAl, pAl = inp
        if below is not None:
            view = cluster_view(t, li + 1)
            IAl = IAl + tree.sum_into_parents_gathered(below[0], view, lvl.n)
            pAl = pAl + tree.sum_into_parents_gathered(below[1], view, lvl.n)
        hI, hp = [], []
        for g in lvl.groups:
            Sk, cg = Ss[g.index], cs[g.index]
            sl = slice(g.b0 - lvl.b0, g.b1 - lvl.b0)
            IA = IAl[sl].reshape(g.nc, g.nbc, 6, 6)
            pA = pAl[sl].reshape(g.nc, g.nbc, 6)
            # U = IA S per body, D = sum_i S_i^T U_i
            prm = model.params[g.index]
            U, Dinv, _ = articulated_body_step(IA, Sk, prm.get("armature"), bodies=True)
            # pA + IA c, and u - U^T c = tau - S^T (pA + IA c) (IA symmetric)
            pc = pA + spatial.mv(IA, cg)
            uc = group_y(g, tau) - sum_bodies(spatial.mv(jnp.swapaxes(Sk, -1, -2), pc))
            Ub = sum_bodies(U)  # (nc, 6, ny)
            rt = None if rterms is None else rterms[g.index]
            if rt is not None:  # rotors carried by the parent (exact terms)
                Ub = Ub + rt[0]
            Ubs[g.index], Dinvs[g.index], ws_[g.index] = Ub, Dinv, uc
            if li > 0:
                # what the cluster hands to its output body: sum_i IA_i - Ub D^-1 Ub^T and
                # sum_i (pA_i + IA_i c_i) + Ub D^-1 (u - U^T c)
                hI.append(project_articulated_inertia(sum_bodies(IA), Ub, Dinv))
                hp.append(
                    articulated_bias_force(sum_bodies(pc), Ub, Dinv, uc)
                    + (0 if rt is None else rt[1])
                )
        if li == 0:
            return None, None
        return (jnp.concatenate(hI, 0), jnp.concatenate(hp, 0)), None

    tree.backward_pass(t, backward, (("body", I6), ("body", bias)))
    # forward: ydd = D^-1 (u - U^T (a_out + c)) = D^-1 (uc - Ub^T a_out), and the accelerations
    # of the bodies the next level hangs from (its receivers)
    a0 = kin.gravity_acceleration(model.tree, dt)
    nl = len(t.levels)
    ydds: list = [None] * ng

    def forward(lvl, _, prev, inp):
        li = lvl.groups[0].level
        parts = []
        recv = receivers_of(t, li)
        for g in lvl.groups:
            Ub, Dinv, uc = Ubs[g.index], Dinvs[g.index], ws_[g.index]
            aout = tree.gather_parent(prev, cluster_view(t, li, g.index, True), a0)  # (nc, 6)
            ydd = spatial.mv(Dinv, uc - spatial.mv(jnp.swapaxes(Ub, -1, -2), aout))
            ydds[g.index] = ydd.reshape(-1)
            if li + 1 < nl:
                lb = g.b0 - lvl.b0
                sel = recv[(recv >= lb) & (recv < lb + g.nc * g.nbc)] - lb
                if sel.size:
                    ci, bi = sel // g.nbc, sel % g.nbc
                    acc = aout[ci] + cs[g.index][ci, bi] + spatial.mv(Ss[g.index][ci, bi], ydd[ci])
                    parts.append(acc)
        return (jnp.concatenate(parts, 0) if parts else None), None

    tree.forward_pass(t, forward, ())
    return jnp.concatenate(ydds)

"""C-RNEA: cluster-based recursive Newton-Euler inverse dynamics.

Reference: M. Chignoli, N. Adrian, S. Kim, P. M. Wensing, "Recursive rigid-body dynamics
algorithms for systems with kinematic loops", IEEE T-RO 2024 (arXiv:2311.13732), Algorithm 1
(§VI): forward pass ``v_k = X_k v_λ(k) + v_J``,
``a_k = X_k a_λ(k) + S_k ydd_k + c_J + v_k x v_J``, ``f_k = I_k a_k + v_k x* I_k v_k - f_ext``;
backward pass ``tau_k = S_k^T f_k``, ``f_λ(k) += X_k^T f_k`` (per body, ``f_k`` is the force
across the cluster joint; the sum inside the cluster happens in ``S_k^T`` through ``X_R^T``).

In world coordinates (:mod:`jaxdyn.clusters.common`), level by level through
:func:`jaxdyn.model.tree.forward_pass` / :func:`~jaxdyn.model.tree.backward_pass`. When every
cluster hangs from one output body (every robot of the paper), spanning-tree velocities come
from jaxdyn's core pass and a cluster hands ``sum_i f_i`` to its output body
(:func:`_crnea_single_output`); models with a rotor-folding plan
(:func:`jaxdyn.clusters.fold_rotors`) run it on the link tree with exact rotor terms. Without
loops every cluster is one joint and C-RNEA is RNEA (Featherstone 2008, Alg. 5.1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp

from .. import eager, spatial
from .._precision import full_precision
from ..algorithms import kinematics as kin
from ..model import tree
from .common import (
    all_single_output,
    cluster_view,
    fast_kinematics,
    forward_kinematics,
    setup,
    sum_bodies,
)
from .model import ClusterModel, require_cluster_model
from .rotors import rotor_terms, setup_folded
from .state import group_y

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike

__all__ = ["crnea"]


@eager.eager_jit
@full_precision
def crnea(
    model: ClusterModel, q: ArrayLike, v: ArrayLike, a: ArrayLike, f_ext: ArrayLike | None = None
) -> Array:
    """Cluster-based inverse dynamics (C-RNEA): ``tau = H(q) a + C(q, v)`` in independent
    coordinates (``tau = G^T tau_tree`` of the spanning tree).

    Reference: Chignoli et al., T-RO 2024, Algorithm 1 (§VI), in world coordinates; RNEA
    (Featherstone 2008, Alg. 5.1) when every cluster is a single joint.

    **Arguments:** ``model`` (:class:`ClusterModel`; a plain :class:`jaxdyn.Model` raises
    ``TypeError``: use :func:`jaxdyn.rnea`); ``q (nq,)`` cluster position (implicit clusters
    must satisfy ``phi(q) = 0``: checked, see :mod:`jaxdyn.clusters.state`); ``v (nv,)``,
    ``a (nv,)`` independent velocity and acceleration; ``f_ext (nb, 6)`` or None: spatial
    forces on the spanning-tree bodies, body coordinates (as :func:`jaxdyn.rnea`).

    **Returns:** ``tau (nv,)``.
    """
    fn = "crnea"
    require_cluster_model(fn, model, "jaxdyn.rnea")
    if model.topo.fold is not None and f_ext is None:  # rotors carried by their parents
        s, rot = setup_folded(model, fn, q, v, a, "a")
        return _crnea_single_output(s, rotors=rot)[model.topo.fold.vi_inv]
    s = setup(model, fn, q, v, a, "a", f_ext)
    if all_single_output(s.model.topo):
        return _crnea_single_output(s)
    return _crnea_general(s)


def _forces(ws, bo, a_all, v_all, fw):
    """``f = I a + v x* I v - f_ext`` per body (cluster body order)."""
    m, com, Ic = ws.mass[bo], ws.c[bo], ws.Ic[bo]
    f = kin.inertia_apply(m, com, Ic, a_all) + spatial.force_cross(
        v_all, kin.inertia_apply(m, com, Ic, v_all)
    )
    return f if fw is None else f - fw[bo]


def _crnea_general(s):
    """C-RNEA in the per-body form (any cluster tree)."""
    model, ws, a, dt = s.model, s.ws, s.x, s.dt
    t = model.topo
    gks, v_all = forward_kinematics(model, s.gss, ws, dt, True)
    a0 = kin.gravity_acceleration(model.tree, dt)
    # accelerations: a_k = X_k a_λ(k) + S_k ydd_k + c_k
    inc = jnp.concatenate(
        [
            (jnp.einsum("cixy,cy->cix", gks[g.index].S, group_y(g, a)) + gks[g.index].c).reshape(
                -1, 6
            )
            for g in t.groups
        ]
    )
    a_all = tree.forward_accumulate(t, inc, a0)
    f = _forces(ws, t.body_order, a_all, v_all, s.fw)
    # backward: f_λ(k) += X_k^T f_k, then tau_k = S_k^T f_k
    F = tree.backward_accumulate(t, f)
    taus = []
    for g in t.groups:
        tau = jnp.einsum("cixy,cix->cy", gks[g.index].S, F[g.b0 : g.b1].reshape(g.nc, g.nbc, 6))
        prm = model.params[g.index]
        if "armature" in prm:
            tau = tau + jnp.einsum("cyz,cz->cy", prm["armature"], group_y(g, a))
        taus.append(tau.reshape(-1))
    return jnp.concatenate(taus)


def _crnea_single_output(s, rotors=None):
    """C-RNEA when every cluster hangs from one output body (see
    :func:`jaxdyn.clusters.caba`): ``a_k = a_out + c_k + S_k ydd_k`` per body,
    ``tau_k = sum_i S_i^T f_i``, and the cluster hands ``sum_i f_i`` to its output body.
    ``rotors``: the rotor data of a folded model (:mod:`jaxdyn.clusters.rotors`): ``tau +=
    Ue^T a_out``, and the cluster hands up ``J (w_dd s + w omega_p x s)`` in addition."""
    model, ws, v, a, dt = s.model, s.ws, s.v, s.x, s.dt
    t = model.topo
    bo = t.body_order
    v_t, Ss, cs = fast_kinematics(model, s.gss, ws, dt)
    rterms = None if rotors is None else rotor_terms(rotors[0], rotors[1], ws, v_t, v, dt, a)
    a0 = kin.gravity_acceleration(model.tree, dt)
    aouts: list = [None] * len(t.groups)

    def forward(lvl, _, prev, inp):
        parts = []
        for g in lvl.groups:
            aout = tree.gather_parent(prev, cluster_view(t, g.level, g.index), a0)  # (nc, 6)
            aouts[g.index] = aout
            acc = aout[:, None] + cs[g.index] + spatial.mv(Ss[g.index], group_y(g, a)[:, None])
            parts.append(acc.reshape(-1, 6))
        acc = parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)
        return acc, acc

    a_all = tree.forward_pass(t, forward, ())[1].flat()
    f = _forces(ws, bo, a_all, v_t[bo], s.fw)
    taus: list = [None] * len(t.groups)

    def backward(lvl, child, below, inp):
        li = lvl.groups[0].level
        F = inp[0]
        if below is not None:
            F = F + tree.sum_into_parents_gathered(below, cluster_view(t, li + 1), lvl.n)
        hs = []
        for g in lvl.groups:
            Sk = Ss[g.index]
            Fg = F[g.b0 - lvl.b0 : g.b1 - lvl.b0].reshape(g.nc, g.nbc, 6)
            tau = sum_bodies(spatial.mv(jnp.swapaxes(Sk, -1, -2), Fg))  # (nc, ny)
            prm = model.params[g.index]
            if "armature" in prm:
                tau = tau + spatial.mv(prm["armature"], group_y(g, a))
            rt = None if rterms is None else rterms[g.index]
            if rt is not None:
                tau = tau + spatial.mv(jnp.swapaxes(rt[0], -1, -2), aouts[g.index])
            taus[g.index] = tau.reshape(-1)
            if li > 0:
                hs.append(sum_bodies(Fg) + (0 if rt is None else rt[1]))
        return (jnp.concatenate(hs, 0) if li > 0 else None), None

    tree.backward_pass(t, backward, (("body", f),))
    return jnp.concatenate(taus)

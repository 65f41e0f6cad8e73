"""``rnea`` and ``aba`` with ``jax.custom_jvp`` rules built on IDSVA / FDSVA.

Reference: Singh, Russell & Wensing 2022 (Algorithm 1, Eqs. 30, 32 for the inverse dynamics
partials; Eq. 5 with AZA/DMM for forward dynamics), registered as JAX forward-mode rules.

The tangent of the output is, with ``T(q)`` mapping ambient configuration tangents (``nq``)
to the tangent space of :func:`jaxdyn.integrate` (``nv``),

* ``rnea``: ``dtau = dtau_dq T(q) dq + dtau_dv dv + M da + dtau_dfext[df_ext] + dtau_dθ[dθ]``;
* ``aba``:  ``dqdd = M^-1 (dtau - dID_dq T(q) dq - dID_dv dv - dID_dfext[df_ext]) + dqdd_dθ[dθ]``

where the partial matrices are computed from the primal inputs only (so the rule is linear in
the tangents: ``jax.linearize``, ``jax.vjp``, ``jax.jacrev`` and ``jax.grad`` transpose it),
and the tangents ``dθ`` of the model's parameters (masses, inertias, placements, axes,
gravity) fall back to forward-mode autodiff of the plain algorithm, for those leaves only.
Tangents that are symbolically zero are skipped (``symbolic_zeros=True``), so e.g.
``jax.grad`` with respect to ``v`` alone does not differentiate the model.

``T(q)``: identity for one-DoF joints; ``δθ = 2 vec(conj(Q) ⊗ dQ)`` for a unit quaternion
``Q``; ``δp = R(Q)^T dp`` for a free joint's position. A quaternion tangent along ``Q`` itself
(changing its norm) is therefore ignored: the rules differentiate the dynamics of the
*normalised* quaternion, which agrees with plain autodiff for every tangent of the unit
sphere (in particular through :func:`jaxdyn.integrate`) but not for radial ones.

Second-order autodiff (``jax.hessian``, ``jacfwd(jacrev(.))``) differentiates the rule
itself, i.e. plain autodiff of IDSVA / FDSVA: exact, just not analytic at second order.

Switch: ``jaxdyn.config.update("analytic_derivatives", False)`` (or
:func:`set_analytic_derivatives`, the context manager :func:`analytic_derivatives`, the
environment variable ``JAXDYN_ANALYTIC_DERIVATIVES=0``) makes :func:`rnea` / :func:`aba` trace
the plain algorithms instead, which JAX then differentiates op by op (for comparison); like every
switch of :mod:`jaxdyn.config`, a change clears JAX's caches so jitted functions retrace.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from .. import batching, config, joints, shell, spatial
from .._precision import full_precision
from ..algorithms import aba as _aba
from ..algorithms import kinematics as kin
from ..algorithms import rnea as _rnea
from ..algorithms.minv import minv_kernel, minv_world
from ..backend.crba_kernel import kernel_usable
from ..model import tree
from . import fd as _fd
from .fd import _prepare_fd, aza, forward_dynamics_world
from .idsva import (
    _prepare_id,
    fext_tau_tangent,
    id_partials,
    id_state_partials,
    rnea_derivatives_world,
)

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model


def set_analytic_derivatives(enabled: bool) -> None:
    """Use the analytic ``custom_jvp`` rules (``True``, the default) or plain autodiff of the
    algorithms (``False``) in :func:`jaxdyn.rnea` and :func:`jaxdyn.aba`:
    ``jaxdyn.config.update("analytic_derivatives", enabled)``.

    A change clears JAX's caches, so functions already jitted retrace with the new value
    (the rule of :mod:`jaxdyn.config`). See also :func:`analytic_derivatives`.
    """
    config.update("analytic_derivatives", bool(enabled))


def analytic_derivatives_enabled() -> bool:
    return config.get("analytic_derivatives")


def analytic_derivatives(enabled: bool) -> AbstractContextManager[None]:
    """Context manager form of :func:`set_analytic_derivatives`
    (``jaxdyn.config.override(analytic_derivatives=enabled)``)::

        with jaxdyn.derivatives.analytic_derivatives(False):
            J_autodiff = jax.jacfwd(jaxdyn.rnea, argnums=2)(model, q, v, a)
    """
    return config.override(analytic_derivatives=bool(enabled))


# ----------------------------------------------------------------------------- tangents


def is_zero_tangent(t: object) -> bool:
    """Whether a ``custom_jvp`` tangent is absent (``None`` or a ``SymbolicZero``)."""
    return t is None or isinstance(t, SymbolicZero)


def configuration_tangent(model: Model, q: Array, dq: Array) -> Array:
    """Map an ambient tangent ``dq (nq,)`` at ``q`` to the tangent space of
    :func:`jaxdyn.integrate` (``nv``): the ``δ`` with ``d/dε integrate(q, ε δ) = dq`` for every
    ``dq`` tangent to the unit-quaternion spheres.

    One-DoF joints: ``δ = dq``; spherical: ``δ = 2 vec(conj(Q) ⊗ dQ)``; free:
    ``[2 vec(conj(Q) ⊗ dQ); R(Q)^T dp]`` (``v = [ω; v]`` in body coordinates). Linear in ``dq``.
    """
    t = model.topo
    out = []
    for kind, b0, b1, _, _ in tree.kind_runs(t):
        n = b1 - b0
        q0 = int(t.q_start[b0])
        nqk = joints.NQ[kind]
        qs = q[q0 : q0 + n * nqk].reshape(n, nqk)
        ds = dq[q0 : q0 + n * nqk].reshape(n, nqk)
        if kind == joints.ONE_DOF:
            out.append(ds[:, 0])
            continue
        Q, dQ = qs[:, -4:], ds[:, -4:]
        w = 2 * spatial.quat_mul(spatial.quat_conj(Q), dQ)[:, 1:]
        if kind == joints.SPHERICAL:
            out.append(w.reshape(-1))
        else:
            R = spatial.quat_to_rot(Q)
            dp = spatial.mv(jnp.swapaxes(R, -1, -2), ds[:, :3])
            out.append(jnp.concatenate([w, dp], -1).reshape(-1))
    return out[0] if len(out) == 1 else jnp.concatenate(out)


def _model_tangent(fn, model, dmodel, args):
    """Forward-mode autodiff of ``fn(model, *args)`` in the model leaves with a nonzero tangent
    (``None`` when every model tangent is a symbolic zero)."""
    leaves, treedef = jax.tree_util.tree_flatten(model)
    tleaves = treedef.flatten_up_to(dmodel)
    idx = [i for i, tl in enumerate(tleaves) if not is_zero_tangent(tl)]
    if not idx:
        return None

    def f(*sel):
        full = list(leaves)
        for i, x in zip(idx, sel):
            full[i] = x
        return fn(jax.tree_util.tree_unflatten(treedef, full), *args)

    _, out = jax.jvp(f, tuple(leaves[i] for i in idx), tuple(tleaves[i] for i in idx))
    return out


def _sum_terms(terms, like):
    terms = [t for t in terms if t is not None]
    if not terms:
        return jnp.zeros_like(like)
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out


# ----------------------------------------------------------------------------- rnea


def _rnea_plain(model, q, v, a, f_ext):
    return _rnea.joint_forces(model, q, v, a, f_ext)


@jax.custom_jvp
def _rnea_cj(model, q, v, a, f_ext):
    return _rnea_plain(model, q, v, a, f_ext)


def _rnea_jvp(primals, tangents):
    model, q, v, a, f_ext = primals
    dmodel, dq, dv, da, dfext = tangents
    ws = kin.world_state(model, q, centered=True)
    terms = []
    if is_zero_tangent(dq) and is_zero_tangent(dv) and is_zero_tangent(da):
        tau = _rnea.rnea_world(model, ws, v, a, f_ext)[0]
    else:
        if kernel_usable(model, ws.S.dtype):
            # jaxdyn's C kernels on the CPU: RNEA's for tau, IDSVA's for the partials (M
            # only where a tangent of a asks for it)
            tau = _rnea.joint_forces(model, q, v, a, f_ext)
            if is_zero_tangent(da):
                (Dq, Dv), M = id_state_partials(model, q, v, a, f_ext), None
            else:
                Dq, Dv, M = id_partials(model, q, v, a, f_ext)
        else:  # XLA's code, M too only where a tangent of a asks for it
            M_too = not is_zero_tangent(da)
            tau, Dq, Dv, M = rnea_derivatives_world(model, ws, v, a, f_ext, M_too)
        if not is_zero_tangent(dq):
            terms.append(Dq @ configuration_tangent(model, q, dq))
        if not is_zero_tangent(dv):
            terms.append(Dv @ dv)
        if not is_zero_tangent(da):
            assert M is not None  # computed where da is not zero
            terms.append(M @ da)
    if f_ext is not None and not is_zero_tangent(dfext):
        terms.append(fext_tau_tangent(model, ws, dfext))
    terms.append(_model_tangent(_rnea_plain, model, dmodel, (q, v, a, f_ext)))
    return tau, _sum_terms(terms, tau)


_rnea_cj.defjvp(_rnea_jvp, symbolic_zeros=True)


@shell.public("rnea", words=batching.capped_when_threaded(_rnea.chunk_words))
@full_precision
def rnea(
    model: Model,
    q: ArrayLike,
    v: ArrayLike,
    a: ArrayLike,
    f_ext: ArrayLike | None = None,
) -> Array:
    """Inverse dynamics ``tau = M(q) a + C(q, v) v + g(q) - sum J_i^T f_ext_i``, with analytic
    derivatives.

    Reference: Featherstone 2008, Alg. 5.1 (RNEA, Table 5.1;
    :func:`jaxdyn.algorithms.rnea.joint_forces`: on the CPU jaxdyn's C kernel, the primal
    only); derivatives (the ``jax.custom_jvp`` rule) by IDSVA, Singh, Russell & Wensing 2022,
    Algorithm 1, Eqs. 30, 32: on the CPU by jaxdyn's C kernel
    (:func:`jaxdyn.derivatives.idsva.id_partials`), else in XLA's code.

    Same arguments and result as :func:`jaxdyn.algorithms.rnea.rnea_plain`; every JAX transform
    works (``jvp``, ``jacfwd``, ``jacrev``, ``grad``, ``vmap``, ``jit``, ``hessian``). See the
    module docstring for the tangent conventions and :func:`set_analytic_derivatives`.
    """
    if not config.get("analytic_derivatives"):
        return _rnea.rnea_plain(model, q, v, a, f_ext)
    model, q, v, a, f_ext = _prepare_id("rnea", model, q, v, a, f_ext)
    if model.nb == 0:
        return jnp.zeros(0, v.dtype)
    return _rnea_cj(model, q, v, a, f_ext)


# ----------------------------------------------------------------------------- aba


def _aba_plain(model, q, v, tau, f_ext, method="sweeps"):
    return _aba.aba_solve(model, q, v, tau, f_ext, method)


@functools.partial(jax.custom_jvp, nondiff_argnums=(5,))
def _aba_cj(model, q, v, tau, f_ext, method):
    # the primal alone (no tangent): the C kernel on the CPU, else the dense form where it is
    # faster (aba.DENSE_MIN_LEVELS)
    return _aba_plain(model, q, v, tau, f_ext, method)


def _aba_jvp(method, primals, tangents):
    # the sweeps, whose articulated inertias the partials reuse
    model, q, v, tau, f_ext = primals
    dmodel, dq, dv, dtau, dfext = tangents
    ws = kin.world_state(model, q, centered=True)
    if all(is_zero_tangent(x) for x in (dq, dv, dtau)) and (
        f_ext is None or is_zero_tangent(dfext)
    ):
        qdd = _aba.aba_world(model, ws, v, tau, f_ext)[0]
        rhs = None
    else:
        dmm = _fd.resolve_method("auto", model.nv) == "dmm"
        kernels = dmm and _fd.by_kernels(model, ws.S.dtype)
        inertias = None
        if kernels:
            # jaxdyn's C kernels on the CPU: ABA's, IDSVA's at its solution, then Minv's
            qdd = _aba.aba_solve(model, q, v, tau, f_ext)
            Dq, Dv = id_state_partials(model, q, v, qdd, f_ext)
        else:
            qdd, Dq, Dv, _, inertias = forward_dynamics_world(model, ws, v, tau, f_ext, False)
        # u = dtau - dID[dq, dv, df_ext]   (Singh et al. 2022, Eq. 5)
        parts = []
        if not is_zero_tangent(dtau):
            parts.append(dtau)
        if not is_zero_tangent(dq):
            parts.append(-(Dq @ configuration_tangent(model, q, dq)))
        if not is_zero_tangent(dv):
            parts.append(-(Dv @ dv))
        if f_ext is not None and not is_zero_tangent(dfext):
            parts.append(-fext_tau_tangent(model, ws, dfext))
        u = _sum_terms(parts, qdd)
        if inertias is None:
            rhs = minv_kernel(model, q) @ u
        elif not dmm:
            rhs = aza(model, ws.S, inertias, u[:, None])[:, 0]
        else:
            rhs = minv_world(model, ws, inertias) @ u
    terms = [rhs, _model_tangent(_aba_plain, model, dmodel, (q, v, tau, f_ext))]
    return qdd, _sum_terms(terms, qdd)


_aba_cj.defjvp(_aba_jvp, symbolic_zeros=True)


@shell.public("aba", words=_aba.chunk_words)
@full_precision
def aba(
    model: Model,
    q: ArrayLike,
    v: ArrayLike,
    tau: ArrayLike,
    f_ext: ArrayLike | None = None,
    method: str = "auto",
) -> Array:
    """Forward dynamics ``qdd = M(q)^-1 (tau - C(q, v) v - g(q) + sum J_i^T f_ext_i)``, with
    analytic derivatives.

    Reference: Featherstone 2008, Alg. 7.1 (ABA, Table 7.1) in world coordinates (on the CPU
    as jaxdyn's C kernel: :func:`jaxdyn.backend.aba_kernel.aba_kernel`); derivatives (the
    ``jax.custom_jvp`` rule) by FDSVA, Singh, Russell & Wensing 2022, Eq. 5 on the IDSVA
    partials (Algorithm 1) at the ABA solution, ``M^-1`` applied by AZA (Eq. 34) or through
    the analytic inverse (DMM) depending on size; with DMM on the CPU from jaxdyn's C kernels
    (ABA's, IDSVA's and Minv's, where :func:`jaxdyn.aba_derivatives` takes them).

    Same arguments (``method``: ``"auto"``, ``"sweeps"`` or ``"dense"``, the primal's
    algorithm; derivatives come from the sweeps or the kernels, whatever the method) and
    result as :func:`jaxdyn.algorithms.aba.aba_plain`; see :func:`rnea`.
    """
    _aba.check_method("aba", method)
    if not config.get("analytic_derivatives"):
        return _aba.aba_plain(model, q, v, tau, f_ext, method=method)
    model, q, v, tau, f_ext = _prepare_fd("aba", model, q, v, tau, f_ext)
    if model.nb == 0:
        return jnp.zeros(0, v.dtype)
    return _aba_cj(model, q, v, tau, f_ext, method)

"""Jacobians of ``integrate`` and ``difference`` on the configuration manifold, and the maps
between ambient and tangent configuration increments.

Every derivative with respect to a configuration is taken in the tangent space of
:func:`jaxdyn.integrate` (right increment, ``q ⊕ δ``), as in Pinocchio and Crocoddyl
(``dIntegrate`` / ``dDifference``, ``StateMultibody::Jintegrate`` / ``Jdiff``). Per joint:

* one-DoF joints: ``q ⊕ v = q + v``: both Jacobians are ``1`` (``difference``: ``-1``, ``1``);
* spherical joints, ``Q ⊕ ω = Q exp(ω)`` on SO(3)::

      d(Q ⊕ ω)/dQ = exp(ω)^T = exp(-ω),    d(Q ⊕ ω)/dω = Jr(ω)

  with the right Jacobian ``Jr(ω) = I - b [ω] + c [ω]^2`` (``b = (1 - cos θ)/θ^2``,
  ``c = (θ - sin θ)/θ^3``); for ``d = Q1 ⊖ Q0 = log(Q0^-1 Q1)``::

      dd/dQ1 = Jr(d)^-1,    dd/dQ0 = -Jl(d)^-1 = -Jr(-d)^-1;

* free joints, ``M ⊕ ξ = M exp(ξ)`` on SE(3) with ``ξ = [ω; v]`` (jaxdyn's order, the base
  twist in base coordinates)::

      d(M ⊕ ξ)/dM = Ad(exp(ξ)^-1),    d(M ⊕ ξ)/dξ = Jr(ξ) = [[Jr(ω), 0], [Qr(ω, v), Jr(ω)]]

  and the same two formulas as SO(3) for ``difference`` with the SE(3) ``Jr``. ``Qr`` is
  Barfoot's ``Q`` at ``(-v, -ω)`` (Barfoot, *State Estimation for Robotics*, 2017, eq. 7.86;
  Sola, Deray & Atchuthan, *A micro Lie theory for state estimation in robotics*, 2018,
  App. D), ``Qr = -Jr(ω) C`` with the ``C`` of Pinocchio's ``Jlog6`` (closed form, outer
  products: :func:`jaxdyn.spatial.se3_log_jacobian`, which a free joint's ``difference``
  Jacobian takes from the relative placement). The SO(3) / SE(3) Jacobians are
  :mod:`jaxdyn.spatial`'s (:func:`~jaxdyn.spatial.so3_right_jacobian` and its kin): their
  scalar coefficients switch to Taylor series below ``θ^2 = 0.5`` (terms to ``θ^12`` or
  beyond, truncation below ``1e-15``), and
  every branch test reads the real part, so the functions stay analytic for complex-step
  inputs.

Ambient tangents (``nq`` entries: quaternion components, positions in the parent frame) map to
the tangent space by :func:`jaxdyn.derivatives.configuration_tangent` and back by
:func:`tangent_to_ambient` (``d/dε integrate(q, ε δ)`` at ``ε = 0``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from .. import joints, spatial
from .._precision import full_precision
from ..derivatives import configuration_tangent
from ..model import tree
from ..spatial import (
    se3_right_jacobian,
    se3_right_jacobian_inv,
    so3_right_jacobian,
    so3_right_jacobian_inv,
)

if TYPE_CHECKING:
    from jax import Array

    from ..model.model import Model

__all__ = [
    "block_diag_matmul",
    "difference_jacobians",
    "integrate_jacobians",
    "so3_right_jacobian",
    "so3_right_jacobian_inv",
    "se3_right_jacobian",
    "se3_right_jacobian_inv",
    "state_difference",
    "state_integrate",
    "tangent_to_ambient",
    "weighted_difference_gauss_newton",
    "configuration_tangent",
]

# ----------------------------------------------------------------------------- assembly


def _runs(model):
    return tree.kind_runs(model.topo)


def _all_one_dof(model):
    return all(k == joints.ONE_DOF for k, *_ in _runs(model))


def _block_diag(model, blocks, dtype):
    """Dense ``(nv, nv)`` from per-run blocks ``(n, k, k)`` (``None``: identity for 1-DoF).

    Assembled by selects and concatenation, without a scatter: XLA:CPU does not compile a
    scatter inside a loop fused into one kernel (``jaxdyn.backend.fused_programs``), and these
    Jacobians sit in the knot loops of a floating-base trajectory optimisation."""
    nv = model.nv
    runs = _runs(model)
    if [r[3] for r in runs] != [0] + [r[4] for r in runs[:-1]] or runs[-1][4] != nv:
        raise AssertionError(f"joint-kind runs of {model.name!r} do not tile its dofs in order")
    rows = []
    for (kind, b0, b1, v0, v1), blk in zip(runs, blocks):
        n, k = b1 - b0, joints.NV[kind]
        if blk is None:
            d = jnp.eye(n * k, dtype=dtype)
        else:  # entry (i, a, j, b): blk[i, a, b] where i == j, else 0
            same = np.eye(n, dtype=bool)[:, None, :, None]
            d = jnp.where(same, jnp.asarray(blk, dtype)[:, :, None, :], 0.0)
            d = d.reshape(n * k, n * k).astype(dtype)
        left, right = jnp.zeros((n * k, v0), dtype), jnp.zeros((n * k, nv - v1), dtype)
        rows.append(jnp.concatenate([left, d, right], 1))
    return jnp.concatenate(rows, 0)


def _pieces(model, x, width):
    t = model.topo
    out = []
    for kind, b0, b1, v0, _ in _runs(model):
        n = b1 - b0
        if width == "q":
            start, k = int(t.q_start[b0]), joints.NQ[kind]
        else:
            start, k = v0, joints.NV[kind]
        out.append(x[start : start + n * k].reshape(n, k))
    return out


@full_precision
def integrate_jacobians(model: Model, q: Array, v: Array) -> tuple[Array, Array]:
    """Jacobians of ``integrate(model, q, v) = q ⊕ v`` in the tangent space:
    ``(d(q ⊕ v)/dq, d(q ⊕ v)/dv)``, each ``(nv, nv)``, block diagonal by joint.

    Pinocchio's ``dIntegrate`` (``ARG0``, ``ARG1``) in jaxdyn's coordinates; see the module
    docstring for the per-joint formulas.
    """
    dtype = jnp.result_type(q, v)
    if _all_one_dof(model):
        eye = jnp.eye(model.nv, dtype=dtype)
        return eye, eye
    Jq, Jv = _integrate_jacobian_blocks(model, q, v)
    return _block_diag(model, Jq, dtype), _block_diag(model, Jv, dtype)


def _integrate_jacobian_blocks(model, q, v):
    """:func:`integrate_jacobians`' per-run blocks ``(n, k, k)`` (``None`` for one-DoF runs,
    the identity), before their assembly into ``(nv, nv)``."""
    Jq, Jv = [], []
    for (kind, *_), vs in zip(_runs(model), _pieces(model, v, "v")):
        if kind == joints.ONE_DOF:
            Jq.append(None)
            Jv.append(None)
        elif kind == joints.SPHERICAL:
            Jq.append(jnp.swapaxes(spatial.quat_to_rot(spatial.exp3_quat(vs)), -1, -2))
            Jv.append(so3_right_jacobian(vs))
        else:
            Jq.append(spatial.se3_ad_inv_exp(vs))
            Jv.append(se3_right_jacobian(vs))
    return Jq, Jv


def block_diag_matmul(model: Model, blocks: list, X: Array) -> Array:
    """``J @ X`` for ``J (nv, nv)`` block diagonal by joint, given by its per-run blocks
    ``(n, k, k)`` (``None``: the identity, as :func:`_block_diag`), and ``X (nv, m)``: each
    run's rows multiplied by its blocks, without the dense ``(nv, nv)`` product (on a floating
    base one ``6 x 6`` block and the legs' identity rows)."""
    out = []
    for (kind, b0, b1, v0, v1), blk in zip(_runs(model), blocks):
        rows = X[v0:v1]
        if blk is None:
            out.append(rows)
        else:
            n, k = b1 - b0, joints.NV[kind]
            y = jnp.einsum("nab,nbm->nam", blk, rows.reshape(n, k, -1))
            out.append(y.reshape(n * k, -1))
    return jnp.concatenate(out, 0)


@full_precision
def difference_jacobians(model: Model, q0: Array, q1: Array) -> tuple[Array, Array]:
    """Jacobians of ``difference(model, q0, q1) = q1 ⊖ q0`` in the tangent spaces of ``q0``
    and ``q1``: ``(d/dq0, d/dq1)``, each ``(nv, nv)``, block diagonal by joint.

    Pinocchio's ``dDifference`` (``ARG0``, ``ARG1``): ``-Jr(-d)^-1`` and ``Jr(d)^-1`` with
    ``d = q1 ⊖ q0`` per spherical / free joint, ``-1`` and ``1`` for one-DoF joints.
    """
    dtype = jnp.result_type(q0, q1)
    if _all_one_dof(model):
        eye = jnp.eye(model.nv, dtype=dtype)
        return -eye, eye
    J0, J1 = _difference_jacobian_blocks(model, q0, q1)
    return _block_diag(model, J0, dtype), _block_diag(model, J1, dtype)


def _difference_jacobian_blocks(model, q0, q1, arg0=True):
    """:func:`difference_jacobians`' per-run blocks ``(n, k, k)`` (``d/dq1``: ``None`` for
    one-DoF runs, the identity), before their assembly into ``(nv, nv)``; ``d/dq0`` is ``None``
    throughout unless ``arg0``.

    A free joint's ``d/dq1 = Jr(d)^-1`` comes from the relative placement ``M = (R, p)`` of
    the two configurations in closed form (:func:`jaxdyn.spatial.se3_log_jacobian`, Pinocchio's
    ``Jlog6``) and ``d/dq0 = -Jr(-d)^-1 = -Jl(d)^-1 = -Jr(d)^-1 Ad(M^-1)`` (``Jl(ξ) =
    Ad(exp ξ) Jr(ξ)``)."""
    dtype = jnp.result_type(q0, q1)
    J0, J1 = [], []
    runs = zip(_runs(model), _pieces(model, q0, "q"), _pieces(model, q1, "q"))
    for (kind, *_), a, b in runs:
        if kind == joints.ONE_DOF:
            J0.append(-jnp.ones((a.shape[0], 1, 1), dtype) if arg0 else None)
            J1.append(None)
        elif kind == joints.SPHERICAL:
            d = joints.difference(kind, a, b)
            J0.append(-so3_right_jacobian_inv(-d) if arg0 else None)
            J1.append(so3_right_jacobian_inv(d))
        else:
            rel, w, p = joints.free_relative(a, b)
            J = spatial.se3_log_jacobian(w, p)
            J1.append(J)
            J0.append(-(J @ spatial.se3_ad_inv(spatial.quat_to_rot(rel), p)) if arg0 else None)
    return J0, J1


@full_precision
def weighted_difference_gauss_newton(
    model: Model, q0: Array, q1: Array, w: Array, r: Array
) -> tuple[Array, Array]:
    """``(J^T (w r), J^T diag(w) J)`` with ``J = d(q1 ⊖ q0)/dq1`` (:func:`difference_jacobians`)
    and ``w``, ``r`` of length ``nv``: the gradient and Gauss-Newton Hessian of
    ``1/2 Σ w_i r_i^2`` for the residual ``r = q1 ⊖ q0``, computed joint by joint (``J`` is block
    diagonal: a one-DoF joint's block is ``1``, a free joint's ``6 x 6``), without the dense
    ``(nv, nv)`` products."""
    dtype = jnp.result_type(q0, q1, w, r)
    if _all_one_dof(model):
        return w * r, _diagonal(w.astype(dtype))
    _, J1 = _difference_jacobian_blocks(model, q0, q1, arg0=False)
    g, H = [], []
    for blk, wp, rp in zip(J1, _pieces(model, w, "v"), _pieces(model, r, "v")):
        if blk is None:  # identity blocks
            g.append((wp * rp).reshape(-1))
            H.append(wp[:, :, None])
        else:
            g.append(jnp.einsum("nab,na->nb", blk, wp * rp).reshape(-1))
            H.append(jnp.einsum("nab,na,nac->nbc", blk, wp, blk))
    return jnp.concatenate(g), _block_diag(model, H, dtype)


def _diagonal(w):
    """``diag(w)`` by a select (no scatter: see :func:`_block_diag`)."""
    n = w.shape[-1]
    return jnp.where(np.eye(n, dtype=bool), w[None, :], jnp.zeros((), w.dtype))


def tangent_to_ambient(model: Model, q: Array, dq: Array) -> Array:
    """``d/dε integrate(model, q, ε dq)`` at ``ε = 0``: a tangent-space increment ``dq (nv,)``
    as an ambient tangent ``(nq,)`` (quaternion components ``Q ⊗ (0, ω)/2``, free-joint
    positions ``R(Q) v``). Linear in ``dq``; :func:`configuration_tangent` inverts it on the
    tangent of the unit-quaternion spheres."""
    if _all_one_dof(model):
        return dq
    out = []
    for (kind, *_), qs, ds in zip(_runs(model), _pieces(model, q, "q"), _pieces(model, dq, "v")):
        if kind == joints.ONE_DOF:
            out.append(ds.reshape(-1))
            continue
        Q = qs[:, -4:]
        w = ds[:, :3]
        zero = jnp.zeros_like(w[:, :1])
        dQ = 0.5 * spatial.quat_mul(Q, jnp.concatenate([zero, w], -1))
        if kind == joints.SPHERICAL:
            out.append(dQ.reshape(-1))
        else:
            dp = spatial.mv(spatial.quat_to_rot(Q), ds[:, 3:])
            out.append(jnp.concatenate([dp, dQ], -1).reshape(-1))
    return jnp.concatenate(out)


# ----------------------------------------------------------------------------- states


def state_integrate(model: Model, x: Array, dx: Array) -> Array:
    """``x ⊕ dx`` for a state ``x = (q, v) (nq + nv,)`` and ``dx = (dq, dv) (2 nv,)``:
    ``(q ⊕ dq, v + dv)`` (Crocoddyl's ``StateMultibody::integrate``)."""
    from ..algorithms.configuration import integrate

    nq, nv = model.nq, model.nv
    return jnp.concatenate([integrate(model, x[:nq], dx[:nv]), x[nq:] + dx[nv:]])


def state_difference(model: Model, x0: Array, x1: Array) -> Array:
    """``x1 ⊖ x0 = (q1 ⊖ q0, v1 - v0) (2 nv,)`` (Crocoddyl's ``StateMultibody::diff``)."""
    from ..algorithms.configuration import difference

    nq = model.nq
    return jnp.concatenate([difference(model, x0[:nq], x1[:nq]), x1[nq:] - x0[nq:]])

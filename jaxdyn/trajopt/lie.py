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
  App. D). The scalar coefficients switch to Taylor series below ``θ^2 = 0.5`` (terms to
  ``θ^12``, truncation below ``1e-15``), and every branch test reads the real part, so the
  functions stay analytic for complex-step inputs.

Ambient tangents (``nq`` entries: quaternion components, positions in the parent frame) map to
the tangent space by :func:`jaxdyn.derivatives.configuration_tangent` and back by
:func:`tangent_to_ambient` (``d/dε integrate(q, ε δ)`` at ``ε = 0``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import joints, spatial
from .._precision import full_precision
from ..derivatives import configuration_tangent
from ..model import tree

__all__ = [
    "difference_jacobians",
    "integrate_jacobians",
    "so3_right_jacobian",
    "so3_right_jacobian_inv",
    "se3_right_jacobian",
    "se3_right_jacobian_inv",
    "state_difference",
    "state_integrate",
    "tangent_to_ambient",
    "configuration_tangent",
]

_SMALL = 0.5  # theta^2 below which the Taylor series are used


def _series(theta2, coefs):
    out = jnp.zeros_like(theta2) + coefs[-1]
    for c in coefs[-2::-1]:
        out = out * theta2 + c
    return out


# Taylor coefficients in theta^2 of b, c, e, c2, c3 (see _coefficients), constant terms first.
_B = (1 / 2, -1 / 24, 1 / 720, -1 / 40320, 1 / 3628800, -1 / 479001600, 1 / 87178291200)
_C = (1 / 6, -1 / 120, 1 / 5040, -1 / 362880, 1 / 39916800, -1 / 6227020800, 1 / 1307674368000)
_E = (1 / 12, 1 / 720, 1 / 30240, 1 / 1209600, 1 / 47900160, 691 / 1307674368000, 1 / 74724249600)
_C2 = (
    1 / 24, -1 / 720, 1 / 40320, -1 / 3628800, 1 / 479001600, -1 / 87178291200,
    1 / 20922789888000,
)  # fmt: skip
_C3 = (
    1 / 120, -1 / 2520, 1 / 120960, -1 / 9979200, 1 / 1245404160, -1 / 217945728000,
    1 / 50812489728000,
)  # fmt: skip


def _coefficients(theta2):
    """``b = (1-cos)/θ²``, ``c = (θ-sin)/θ³``, ``e = 1/θ² - (1+cos)/(2θ sin)``,
    ``c2 = (θ²+2cos-2)/(2θ⁴)``, ``c3 = (2θ-3sin+θcos)/(2θ⁵)`` of ``θ = sqrt(theta2)``."""
    small = jnp.real(theta2) < _SMALL
    t2 = jnp.where(small, jnp.ones_like(theta2), theta2)
    t = jnp.sqrt(t2)
    s, co = jnp.sin(t), jnp.cos(t)
    b = jnp.where(small, _series(theta2, _B), (1 - co) / t2)
    c = jnp.where(small, _series(theta2, _C), (t - s) / (t2 * t))
    e = jnp.where(small, _series(theta2, _E), 1 / t2 - (1 + co) / (2 * t * s))
    c2 = jnp.where(small, _series(theta2, _C2), (t2 + 2 * co - 2) / (2 * t2 * t2))
    c3 = jnp.where(small, _series(theta2, _C3), (2 * t - 3 * s + t * co) / (2 * t2 * t2 * t))
    return b, c, e, c2, c3


def _eye(shape, dtype):
    return jnp.broadcast_to(jnp.eye(3, dtype=dtype), shape + (3, 3))


def so3_right_jacobian(w):
    """``Jr(ω) = I - b [ω] + c [ω]^2`` of SO(3), ``w (..., 3) -> (..., 3, 3)``."""
    b, c, *_ = _coefficients(jnp.sum(w * w, -1))
    K = spatial.skew(w)
    return _eye(w.shape[:-1], w.dtype) - b[..., None, None] * K + c[..., None, None] * (K @ K)


def so3_right_jacobian_inv(w):
    """``Jr(ω)^-1 = I + [ω]/2 + e [ω]^2`` of SO(3)."""
    _, _, e, _, _ = _coefficients(jnp.sum(w * w, -1))
    K = spatial.skew(w)
    return _eye(w.shape[:-1], w.dtype) + 0.5 * K + e[..., None, None] * (K @ K)


def _qr(w, v):
    """Lower-left block of the SE(3) right Jacobian (Barfoot's ``Q(ρ, φ)`` at ``(-v, -ω)``)."""
    theta2 = jnp.sum(w * w, -1)
    _, c1, _, c2, c3 = _coefficients(theta2)
    W, V = spatial.skew(w), spatial.skew(v)
    WV, VW = W @ V, V @ W
    WVW = WV @ W
    c1, c2, c3 = (x[..., None, None] for x in (c1, c2, c3))
    return (
        -0.5 * V
        + c1 * (WV + VW - WVW)
        + c2 * (-(W @ WV) - VW @ W + 3 * WVW)
        + c3 * (WVW @ W + W @ WVW)
    )


def se3_right_jacobian(xi):
    """SE(3) right Jacobian ``Jr(ξ)``, ``ξ = [ω; v] (..., 6) -> (..., 6, 6)``:
    ``[[Jr(ω), 0], [Qr(ω, v), Jr(ω)]]`` (rows and columns ``[angular; linear]``)."""
    w, v = xi[..., :3], xi[..., 3:]
    J = so3_right_jacobian(w)
    Q = _qr(w, v)
    Z = jnp.zeros_like(J)
    return jnp.concatenate([jnp.concatenate([J, Z], -1), jnp.concatenate([Q, J], -1)], -2)


def se3_right_jacobian_inv(xi):
    """``Jr(ξ)^-1 = [[Jr(ω)^-1, 0], [-Jr(ω)^-1 Qr Jr(ω)^-1, Jr(ω)^-1]]``."""
    w, v = xi[..., :3], xi[..., 3:]
    Ji = so3_right_jacobian_inv(w)
    Q = _qr(w, v)
    Z = jnp.zeros_like(Ji)
    return jnp.concatenate(
        [jnp.concatenate([Ji, Z], -1), jnp.concatenate([-(Ji @ Q @ Ji), Ji], -1)], -2
    )


def _rot(w):
    return spatial.quat_to_rot(spatial.exp3_quat(w))


def _se3_ad_inv_exp(xi):
    """``Ad(exp(ξ)^-1) = [[R^T, 0], [-R^T [p], R^T]]`` with ``exp(ξ) = (R, p)``."""
    w, v = xi[..., :3], xi[..., 3:]
    R = _rot(w)
    p = spatial.mv(spatial.left_jacobian_so3(w), v)
    Rt = jnp.swapaxes(R, -1, -2)
    Z = jnp.zeros_like(R)
    return jnp.concatenate(
        [jnp.concatenate([Rt, Z], -1), jnp.concatenate([-(Rt @ spatial.skew(p)), Rt], -1)], -2
    )


# ----------------------------------------------------------------------------- assembly


def _runs(model):
    return tree.kind_runs(model.topo)


def _all_one_dof(model):
    return all(k == joints.ONE_DOF for k, *_ in _runs(model))


def _block_diag(model, blocks, dtype):
    """Dense ``(nv, nv)`` from per-run blocks ``(n, k, k)`` (``None``: identity for 1-DoF)."""
    nv = model.nv
    out = jnp.zeros((nv, nv), dtype)
    for (kind, b0, b1, v0, _v1), blk in zip(_runs(model), blocks):
        n, k = b1 - b0, joints.NV[kind]
        base = v0 + k * np.arange(n)
        rows = (base[:, None, None] + np.arange(k)[None, :, None]) + 0 * np.arange(k)
        cols = (base[:, None, None] + np.arange(k)[None, None, :]) + 0 * rows
        if blk is None:
            blk = jnp.broadcast_to(jnp.eye(k, dtype=dtype), (n, k, k))
        out = out.at[rows, cols].set(blk)
    return out


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
def integrate_jacobians(model, q, v):
    """Jacobians of ``integrate(model, q, v) = q ⊕ v`` in the tangent space:
    ``(d(q ⊕ v)/dq, d(q ⊕ v)/dv)``, each ``(nv, nv)``, block diagonal by joint.

    Pinocchio's ``dIntegrate`` (``ARG0``, ``ARG1``) in jaxdyn's coordinates; see the module
    docstring for the per-joint formulas.
    """
    dtype = jnp.result_type(q, v)
    if _all_one_dof(model):
        eye = jnp.eye(model.nv, dtype=dtype)
        return eye, eye
    Jq, Jv = [], []
    for (kind, *_), vs in zip(_runs(model), _pieces(model, v, "v")):
        if kind == joints.ONE_DOF:
            Jq.append(None)
            Jv.append(None)
        elif kind == joints.SPHERICAL:
            Jq.append(jnp.swapaxes(_rot(vs), -1, -2))
            Jv.append(so3_right_jacobian(vs))
        else:
            Jq.append(_se3_ad_inv_exp(vs))
            Jv.append(se3_right_jacobian(vs))
    return _block_diag(model, Jq, dtype), _block_diag(model, Jv, dtype)


def _difference_pieces(model, q0, q1):
    """Per-run ``q1 ⊖ q0`` pieces ``(n, k)``."""
    out = []
    for (kind, *_), a, b in zip(_runs(model), _pieces(model, q0, "q"), _pieces(model, q1, "q")):
        out.append(joints.difference(kind, a, b))
    return out


@full_precision
def difference_jacobians(model, q0, q1):
    """Jacobians of ``difference(model, q0, q1) = q1 ⊖ q0`` in the tangent spaces of ``q0``
    and ``q1``: ``(d/dq0, d/dq1)``, each ``(nv, nv)``, block diagonal by joint.

    Pinocchio's ``dDifference`` (``ARG0``, ``ARG1``): ``-Jr(-d)^-1`` and ``Jr(d)^-1`` with
    ``d = q1 ⊖ q0`` per spherical / free joint, ``-1`` and ``1`` for one-DoF joints.
    """
    dtype = jnp.result_type(q0, q1)
    if _all_one_dof(model):
        eye = jnp.eye(model.nv, dtype=dtype)
        return -eye, eye
    J0, J1 = [], []
    for (kind, *_), d in zip(_runs(model), _difference_pieces(model, q0, q1)):
        if kind == joints.ONE_DOF:
            J0.append(-jnp.ones((d.shape[0], 1, 1), dtype))
            J1.append(None)
        elif kind == joints.SPHERICAL:
            J0.append(-so3_right_jacobian_inv(-d))
            J1.append(so3_right_jacobian_inv(d))
        else:
            J0.append(-se3_right_jacobian_inv(-d))
            J1.append(se3_right_jacobian_inv(d))
    return _block_diag(model, J0, dtype), _block_diag(model, J1, dtype)


def tangent_to_ambient(model, q, dq):
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


def state_integrate(model, x, dx):
    """``x ⊕ dx`` for a state ``x = (q, v) (nq + nv,)`` and ``dx = (dq, dv) (2 nv,)``:
    ``(q ⊕ dq, v + dv)`` (Crocoddyl's ``StateMultibody::integrate``)."""
    from ..algorithms.configuration import integrate

    nq, nv = model.nq, model.nv
    return jnp.concatenate([integrate(model, x[:nq], dx[:nv]), x[nq:] + dx[nv:]])


def state_difference(model, x0, x1):
    """``x1 ⊖ x0 = (q1 ⊖ q0, v1 - v0) (2 nv,)`` (Crocoddyl's ``StateMultibody::diff``)."""
    from ..algorithms.configuration import difference

    nq = model.nq
    return jnp.concatenate([difference(model, x0[:nq], x1[:nq]), x1[nq:] - x0[nq:]])

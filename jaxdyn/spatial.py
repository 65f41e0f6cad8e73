"""Spatial algebra: rotations, SE(3), 6D motion/force vectors and spatial inertias.

Conventions (Featherstone, *Rigid Body Dynamics Algorithms*, 2008, ch. 2):

* spatial motion and force vectors are ``[angular; linear]``;
* a placement ``(R, p)`` of frame B in frame A holds ``R = A_R_B`` and ``p`` = origin of B
  expressed in A (Pinocchio's ``SE3``); points map as ``x_A = R x_B + p``;
* quaternions are scalar first ``(w, x, y, z)``.

Every function works on the trailing dimensions and broadcasts over leading ones, and stays
analytic (no ``abs``/``conj``) so complex-step differentiation goes through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

import jax
import jax.numpy as jnp
import numpy as np

from . import config as _config

# array primitives whose XLA:CPU form lives in the backend (same names here, as before)
from .backend.fusion import materialize as materialize
from .backend.fusion import sincos as sincos
from .backend.fusion import store as store
from .backend.sharding import concatenate as concatenate
from .backend.sharding import explicit_context as explicit_context
from .backend.sharding import on_mesh as on_mesh
from .backend.sharding import stack as stack

if TYPE_CHECKING:
    from typing import TypeAlias

    from jax import Array

    #: what the functions below take: jax arrays (traced or not) or numpy arrays (numpy
    #: inputs of :func:`unstack`, :func:`mm`, :func:`mv` stay numpy)
    AnyArray: TypeAlias = Array | np.ndarray

# ----------------------------------------------------------------------------- 3D


def skew(w: AnyArray) -> Array:
    """``skew(w) @ x == cross(w, x)``; ``w`` is ``(..., 3)``, returns ``(..., 3, 3)``."""
    x, y, z = unstack(w)
    o = jnp.zeros_like(x)
    return stack([stack([o, -z, y], -1), stack([z, o, -x], -1), stack([-y, x, o], -1)], -2)


def cross_rows(a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    """Cross product of two vectors given as sequences of their three components (arrays of
    any one shape, e.g. component-major rows); returns the three components as a list."""
    return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]


def cross(a: AnyArray, b: AnyArray) -> Array:
    """Cross product on the last axis, written out (works for complex inputs)."""
    return stack(cross_rows(unstack(a), unstack(b)), -1)


def _entry(x: AnyArray, i: int, axis: int) -> Any:
    """``x``'s entry ``i`` along ``axis`` (static), keeping the axis: one ``slice``, where
    ``x[..., i, None]`` traces three primitives (:func:`mm`). numpy inputs stay numpy."""
    if isinstance(x, np.ndarray):
        return np.take(x, [i], axis)
    return jax.lax.slice_in_dim(x, i, i + 1, axis=axis)


def unstack(x: AnyArray, axis: int = -1) -> list[Array]:
    """The entries of ``x`` along ``axis``, as a list: one ``unstack`` primitive, where
    ``x[..., 0], x[..., 1], ...`` traces a slice and a squeeze per entry.

    The algorithms' small helpers (:func:`mm`, :func:`mv`, :func:`cross`, :func:`inv3`, ...)
    take entries apart thousands of times per trace, and the size of the trace sets the time
    to trace, lower and compile: one program holding ``aba`` under ``jax.jvp``, ``jacfwd``,
    ``jacrev``, ``grad`` and ``vmap`` (the derivative tests' program) has about a third fewer
    primitives with these two helpers, and lowers and compiles faster; the compiled code runs
    as fast as before (``docs/design-measurements.md``). numpy inputs stay numpy.
    """
    if isinstance(x, np.ndarray):
        return list(np.moveaxis(x, axis, 0))
    return list(jnp.unstack(x, axis=axis))


def outer_sum(A: AnyArray, B: AnyArray) -> Array:
    """``A^T B`` for component-major ``A (K, n)`` and ``B (K, m)``, as ``K`` broadcast
    multiply-adds whatever ``K`` (:func:`mm` with ``unroll``), which XLA fuses into the kernel
    that consumes the ``(n, m)`` result; under ``jax.vmap`` on the CPU a batched ``dot`` of
    such shapes was a YNNPACK kernel of its own (CRBA, the Coriolis matrix). The factors
    should be stored (:func:`materialize`) unless they are cheap: XLA recomputes a fused
    producer for every entry of the result (IDSVA's products, whose factors it fused, ran
    slower this way than as batched ``dot`` products)."""
    return mm(A.T, B, unroll=True)


@overload  # numpy or a jax array, by the contracted size (see the docstring)
def mm(A: np.ndarray, B: np.ndarray, unroll: bool = False) -> Any: ...
@overload
def mm(A: Array, B: AnyArray, unroll: bool = False) -> Array: ...
@overload
def mm(A: AnyArray, B: Array, unroll: bool = False) -> Array: ...
def mm(A: AnyArray, B: AnyArray, unroll: bool = False) -> Array | np.ndarray:
    """Batched matrix product ``A @ B`` on the trailing axes, unrolled over the (small,
    static) contracted dimension.

    Returns a jax array when ``A`` or ``B`` is one (every call of jaxdyn's algorithms). Two
    numpy inputs give numpy where the product is unrolled (contracted dimension <=
    ``unroll_max``, or ``unroll``: computed by numpy, no device transfer, as
    :func:`unstack` keeps numpy) and a jax array where it is ``jnp.matmul``; wrap the inputs
    in ``jnp.asarray`` for a jax array whatever the sizes.

    Each term is an elementwise broadcast product, so XLA fuses the whole product into its
    neighbours; under ``vmap`` on the CPU this beat a batched ``dot`` of 3x3 or 6x6 blocks
    (``docs/design-measurements.md``). Contractions longer than the
    ``unroll_max`` switch of :mod:`jaxdyn.config` use ``jnp.matmul``, unless ``unroll`` (for
    products whose result the caller stores, where a chain of fused 6-term products would be
    recomputed per consumer element: see :func:`jaxdyn.algorithms.aba.articulated_inertias`).
    """
    k = A.shape[-1]
    if k > _config.get("unroll_max") and not unroll:
        return jnp.matmul(A, B)
    out = _entry(A, 0, -1) * _entry(B, 0, -2)
    for i in range(1, k):
        out = out + _entry(A, i, -1) * _entry(B, i, -2)
    return out


@overload  # numpy or a jax array, by the contracted size (see mm's docstring)
def mv(A: np.ndarray, x: np.ndarray, unroll: bool = False) -> Any: ...
@overload
def mv(A: AnyArray, x: AnyArray, unroll: bool = False) -> Array: ...
def mv(A: AnyArray, x: AnyArray, unroll: bool = False) -> Array | np.ndarray:
    """Batched matrix-vector product ``A @ x`` on the trailing axes (unrolled, see :func:`mm`;
    the same types: numpy for two numpy inputs when unrolled, else a jax array)."""
    k = A.shape[-1]
    if k > _config.get("unroll_max") and not unroll:
        return jnp.matmul(A, x[..., None])[..., 0]
    cols = unstack(A)
    out = cols[0] * _entry(x, 0, -1)
    for i in range(1, k):
        out = out + cols[i] * _entry(x, i, -1)
    return out


def rodrigues(axis: AnyArray, angle: AnyArray) -> Array:
    """Rotation by ``angle`` about the unit ``axis`` (``(..., 3)`` and ``(...)``).

    ``R = I + sin(q) [a] + (1 - cos(q)) (a a^T - |a|^2 I)``, written entry by entry (faster
    under ``vmap`` than broadcasting an identity). A zero axis gives the identity, which is how
    prismatic joints reuse this formula.
    """
    x, y, z = axis[..., 0], axis[..., 1], axis[..., 2]
    s, c = sincos(angle)
    c1 = 1 - c
    d = 1 - c1 * (x * x + y * y + z * z)
    xy, xz, yz = c1 * x * y, c1 * x * z, c1 * y * z
    sx, sy, sz = s * x, s * y, s * z
    return stack(
        [
            stack([d + c1 * x * x, xy - sz, xz + sy], -1),
            stack([xy + sz, d + c1 * y * y, yz - sx], -1),
            stack([xz - sy, yz + sx, d + c1 * z * z], -1),
        ],
        -2,
    )


def quat_to_rot(quat: AnyArray) -> Array:
    """Rotation matrix of the unit quaternion ``(w, x, y, z)`` (``(..., 4)`` -> ``(..., 3, 3)``)."""
    w, x, y, z = unstack(quat)
    xx, yy, zz = x * x, y * y, z * z
    xy, xz, yz = x * y, x * z, y * z
    wx, wy, wz = w * x, w * y, w * z
    return stack(
        [
            stack([1 - 2 * (yy + zz), 2 * (xy - wz), 2 * (xz + wy)], -1),
            stack([2 * (xy + wz), 1 - 2 * (xx + zz), 2 * (yz - wx)], -1),
            stack([2 * (xz - wy), 2 * (yz + wx), 1 - 2 * (xx + yy)], -1),
        ],
        -2,
    )


def quat_mul(a: AnyArray, b: AnyArray) -> Array:
    """Hamilton product of scalar-first quaternions."""
    aw, av = a[..., :1], a[..., 1:]
    bw, bv = b[..., :1], b[..., 1:]
    w = aw * bw - jnp.sum(av * bv, -1, keepdims=True)
    v = aw * bv + bw * av + cross(av, bv)
    return jnp.concatenate([w, v], -1)


def quat_conj(q: Array) -> Array:
    """Inverse of a unit quaternion."""
    return q * jnp.array([1.0, -1.0, -1.0, -1.0], dtype=q.dtype)


def _sinc_terms(theta2):
    """``sin(t)/t``, ``(1-cos t)/t^2`` and ``(t - sin t)/t^3`` of ``t = sqrt(theta2)``.

    Taylor series near zero; the branch test uses the real part only so the functions stay
    analytic for complex-step inputs.
    """
    small = jnp.real(theta2) < 1e-6
    t2 = jnp.where(small, jnp.ones_like(theta2), theta2)
    t = jnp.sqrt(t2)
    a = jnp.where(small, 1 - theta2 / 6 + theta2**2 / 120, jnp.sin(t) / t)
    b = jnp.where(small, 0.5 - theta2 / 24 + theta2**2 / 720, (1 - jnp.cos(t)) / t2)
    c = jnp.where(small, 1 / 6 - theta2 / 120 + theta2**2 / 5040, (t - jnp.sin(t)) / (t2 * t))
    return a, b, c


def exp3_quat(w: AnyArray) -> Array:
    """Unit quaternion of the rotation vector ``w`` (``exp`` on SO(3))."""
    theta2 = jnp.sum(w * w, -1)
    small = jnp.real(theta2) < 1e-8
    t2 = jnp.where(small, jnp.ones_like(theta2), theta2)
    t = jnp.sqrt(t2)
    half_sinc = jnp.where(small, 0.5 - theta2 / 48, jnp.sin(t / 2) / t)
    cos_half = jnp.where(small, 1 - theta2 / 8 + theta2**2 / 384, jnp.cos(t / 2))
    return jnp.concatenate([cos_half[..., None], half_sinc[..., None] * w], -1)


def log3_quat(q: AnyArray) -> Array:
    """Rotation vector of the unit quaternion ``q`` (the inverse of :func:`exp3_quat`).

    Uses the shortest rotation (``w >= 0`` hemisphere).
    """
    sign = jnp.where(jnp.real(q[..., :1]) < 0, -1.0, 1.0).astype(q.dtype)
    q = q * sign
    w, v = q[..., 0], q[..., 1:]
    s2 = jnp.sum(v * v, -1)
    small = jnp.real(s2) < 1e-16
    s = jnp.sqrt(jnp.where(small, jnp.ones_like(s2), s2))
    # theta = 2 atan2(s, w); factor = theta / s
    factor = jnp.where(small, 2 / w - 2 * s2 / (3 * w**3), 2 * jnp.arctan2(s, w) / s)
    return factor[..., None] * v


def log3(R: AnyArray) -> Array:
    """Rotation vector of a rotation matrix (``exp(skew(w)) == R``), for angles below π.

    Differentiable at the identity too: the small-angle branch uses ``t^2 ~ sin(t)^2`` and
    never takes the square root of zero (whose derivative is infinite)."""
    tr = jnp.trace(R, axis1=-2, axis2=-1)
    c = jnp.clip((tr - 1) / 2, -1.0, 1.0)
    vee = stack(
        [R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1]], -1
    )  # 2 sin(t) axis
    s2 = jnp.sum(vee * vee, -1) / 4  # sin(t)^2
    small = s2 < 1e-12
    s = jnp.sqrt(jnp.where(small, 1.0, s2))
    factor = jnp.where(small, 0.5 + s2 / 12, jnp.arctan2(s, c) / (2 * s))
    return factor[..., None] * vee


def left_jacobian_so3(w: AnyArray) -> Array:
    """SO(3) left Jacobian ``V(w) = I + b [w] + c [w]^2`` used by the SE(3) exponential."""
    theta2 = jnp.sum(w * w, -1)
    _, b, c = _sinc_terms(theta2)
    K = skew(w)
    eye = jnp.eye(3, dtype=K.dtype)
    return eye + b[..., None, None] * K + c[..., None, None] * mm(K, K)


def left_jacobian_so3_inv(w: AnyArray) -> Array:
    """Inverse of :func:`left_jacobian_so3`."""
    theta2 = jnp.sum(w * w, -1)
    a, b, _ = _sinc_terms(theta2)
    small = jnp.real(theta2) < 1e-6
    t2 = jnp.where(small, jnp.ones_like(theta2), theta2)
    d = jnp.where(small, 1 / 12 + theta2 / 720, (1 - a / (2 * b)) / t2)
    K = skew(w)
    eye = jnp.eye(3, dtype=K.dtype)
    return eye - 0.5 * K + d[..., None, None] * mm(K, K)


# ----------------------------------------------------------------------------- SO(3) / SE(3)
# right Jacobians (the tangent maps of ``integrate`` / ``difference``: jaxdyn.trajopt.lie)

_JR_SMALL = 0.5  # theta^2 below which the Taylor series are used


def _jr_series(theta2, coefs):
    out = jnp.zeros_like(theta2) + coefs[-1]
    for c in coefs[-2::-1]:
        out = out * theta2 + c
    return out


# Taylor coefficients in theta^2 of b, c, e (see _se3_coefficients), constant terms first.
_B = (1 / 2, -1 / 24, 1 / 720, -1 / 40320, 1 / 3628800, -1 / 479001600, 1 / 87178291200)
_C = (1 / 6, -1 / 120, 1 / 5040, -1 / 362880, 1 / 39916800, -1 / 6227020800, 1 / 1307674368000)
_E = (1 / 12, 1 / 720, 1 / 30240, 1 / 1209600, 1 / 47900160, 691 / 1307674368000, 1 / 74724249600)


def _eye3(shape, dtype):
    return jnp.broadcast_to(jnp.eye(3, dtype=dtype), shape + (3, 3))


def so3_right_jacobian(w: AnyArray) -> Array:
    """``Jr(ω) = I - b [ω] + c [ω]^2`` of SO(3), ``w (..., 3) -> (..., 3, 3)``."""
    b, c, *_ = _se3_coefficients(jnp.sum(w * w, -1))
    K = skew(w)
    return _eye3(w.shape[:-1], w.dtype) - b[..., None, None] * K + c[..., None, None] * (K @ K)


def so3_right_jacobian_inv(w: AnyArray) -> Array:
    """``Jr(ω)^-1 = I + [ω]/2 + e [ω]^2`` of SO(3)."""
    _, _, e, _ = _se3_coefficients(jnp.sum(w * w, -1))
    K = skew(w)
    return _eye3(w.shape[:-1], w.dtype) + 0.5 * K + e[..., None, None] * (K @ K)


# Taylor coefficients in theta^2 of e (as _E, one more term: e = Σ_k (-1)^k B_{2k+2} θ^{2k} /
# (2k+2)!, Bernoulli numbers) and of (de/dθ)/θ = Σ_k 2k e_k θ^{2k-2}
_E8 = _E + (3617 / 510 / 20922789888000,)
_EDOT = tuple(2 * k * _E8[k] for k in range(1, len(_E8)))


def _se3_coefficients(theta2):
    """``b = (1 - cos θ)/θ²``, ``c = (θ - sin θ)/θ³``, ``e = 1/θ² - sin θ / (2 θ (1 - cos θ))`` and
    ``ė/θ = -2/θ⁴ + (1 + sin θ/θ) / (2 θ² (1 - cos θ))`` (its derivative over ``θ``), Taylor
    series below ``θ² = 0.5``; ``e`` is written with ``1 - cos θ``, accurate up to ``θ = π``."""
    small = jnp.real(theta2) < _JR_SMALL
    t2 = jnp.where(small, jnp.ones_like(theta2), theta2)
    t = jnp.sqrt(t2)
    s, one_c = jnp.sin(t), 1 - jnp.cos(t)
    b = jnp.where(small, _jr_series(theta2, _B), one_c / t2)
    c = jnp.where(small, _jr_series(theta2, _C), (t - s) / (t2 * t))
    e = jnp.where(small, _jr_series(theta2, _E8), 1 / t2 - s / (2 * t * one_c))
    edot = jnp.where(
        small, _jr_series(theta2, _EDOT), -2 / (t2 * t2) + (1 + s / t) / (2 * t2 * one_c)
    )
    return b, c, e, edot


def _outer(a, b):
    return a[..., :, None] * b[..., None, :]


def _jlog6_blocks(w, p, theta2, e, edot):
    """``(A, C)`` of ``Jr(ξ)^-1 = [[A, 0], [C A, A]]`` (:func:`se3_log_jacobian`)."""
    e_, edot_, t2_ = e[..., None], edot[..., None], theta2[..., None]
    wp_ = jnp.sum(w * p, -1)[..., None]
    eye = _eye3(w.shape[:-1], w.dtype)
    A = (1 - e_ * t2_)[..., None] * eye + 0.5 * skew(w) + e_[..., None] * _outer(w, w)
    v3 = (edot_ * wp_) * w - (t2_ * edot_ + 2 * e_) * p
    C = _outer(v3, w) + e_[..., None] * _outer(w, p) + (e_ * wp_)[..., None] * eye
    return A, C + 0.5 * skew(p)


def _blocks6(A, B, D):
    """``[[A, 0], [B, D]]`` (``3 x 3`` blocks)."""
    Z = jnp.zeros_like(A)
    return jnp.concatenate([jnp.concatenate([A, Z], -1), jnp.concatenate([B, D], -1)], -2)


def _exp_translation(w, v, b, c):
    """``V(ω) v = v + b ω × v + c ω × (ω × v)``: the translation of ``exp([ω; v])``."""
    wv = cross(w, v)
    return v + b[..., None] * wv + c[..., None] * cross(w, wv)


def se3_log_jacobian(w: AnyArray, p: AnyArray) -> Array:
    """``Jr(ξ)^-1`` at ``ξ = log6(M)`` of ``M = (R, p)``, from ``w = log3(R) (..., 3)`` and the
    translation ``p (..., 3)``, ``(..., 6, 6)``: the derivative of ``log6(M exp(δ))`` at
    ``δ = 0`` in closed form (Pinocchio's ``Jlog6``, ``spatial/log.hxx``, in jaxdyn's
    ``[angular; linear]`` order)::

        Jr(ξ)^-1 = [[A, 0], [C A, A]],   A = Jr(ω)^-1 = (1 - e θ²) I + [ω]/2 + e ω ω^T,
        C = ((ė/θ)(ω·p) ω - (θ² ė/θ + 2 e) p) ω^T + e ω p^T + e (ω·p) I + [p]/2

    (``e``, ``ė/θ`` of :func:`_se3_coefficients`): outer products and one ``3 x 3`` product,
    where Barfoot's ``Q`` (2017, eq. 7.86) takes seven."""
    theta2 = jnp.sum(w * w, -1)
    _, _, e, edot = _se3_coefficients(theta2)
    A, C = _jlog6_blocks(w, p, theta2, e, edot)
    return _blocks6(A, C @ A, A)


def se3_right_jacobian(xi: AnyArray) -> Array:
    """SE(3) right Jacobian ``Jr(ξ)``, ``ξ = [ω; v] (..., 6) -> (..., 6, 6)``:
    ``[[Jr(ω), 0], [-Jr(ω) C, Jr(ω)]]`` (rows and columns ``[angular; linear]``), the inverse
    of :func:`se3_log_jacobian`'s ``[[A, 0], [C A, A]]`` (``A = Jr(ω)^-1``) at the translation
    ``p = V(ω) v`` of ``exp(ξ)``; ``Jr(ω) = I - b [ω] + c [ω]²``."""
    w, v = xi[..., :3], xi[..., 3:]
    theta2 = jnp.sum(w * w, -1)
    b, c, e, edot = _se3_coefficients(theta2)
    eye = _eye3(w.shape[:-1], w.dtype)
    KK = _outer(w, w) - theta2[..., None, None] * eye
    J = eye - b[..., None, None] * skew(w) + c[..., None, None] * KK
    _, C = _jlog6_blocks(w, _exp_translation(w, v, b, c), theta2, e, edot)
    return _blocks6(J, -(J @ C), J)


def se3_right_jacobian_inv(xi: AnyArray) -> Array:
    """``Jr(ξ)^-1``: :func:`se3_log_jacobian` at ``exp(ξ)``'s translation ``p = V(ω) v``."""
    w, v = xi[..., :3], xi[..., 3:]
    theta2 = jnp.sum(w * w, -1)
    b, c, e, edot = _se3_coefficients(theta2)
    A, C = _jlog6_blocks(w, _exp_translation(w, v, b, c), theta2, e, edot)
    return _blocks6(A, C @ A, A)


def se3_ad_inv(R: AnyArray, p: AnyArray) -> Array:
    """``Ad(M^-1) = [[R^T, 0], [-R^T [p], R^T]]`` of ``M = (R, p)``, ``(..., 6, 6)``."""
    Rt = jnp.swapaxes(R, -1, -2)
    Z = jnp.zeros_like(Rt)
    return jnp.concatenate(
        [jnp.concatenate([Rt, Z], -1), jnp.concatenate([-(Rt @ skew(p)), Rt], -1)], -2
    )


def se3_ad_inv_exp(xi: AnyArray) -> Array:
    """``Ad(exp(ξ)^-1)`` (:func:`se3_ad_inv`) with ``exp(ξ) = (R, p)``."""
    w, v = xi[..., :3], xi[..., 3:]
    return se3_ad_inv(quat_to_rot(exp3_quat(w)), mv(left_jacobian_so3(w), v))


# ----------------------------------------------------------------------------- SE(3)


@overload
def se3_compose(
    R1: np.ndarray, p1: np.ndarray, R2: np.ndarray, p2: np.ndarray
) -> tuple[Any, Any]: ...
@overload
def se3_compose(R1: AnyArray, p1: AnyArray, R2: AnyArray, p2: AnyArray) -> tuple[Array, Array]: ...
def se3_compose(
    R1: AnyArray, p1: AnyArray, R2: AnyArray, p2: AnyArray
) -> tuple[Array | np.ndarray, Array | np.ndarray]:
    """``(R1, p1) * (R2, p2)`` (the types of :func:`mm`: numpy for numpy inputs, where the
    products are unrolled; else jax arrays)."""
    return mm(R1, R2), mv(R1, p2) + p1


def se3_inverse(R: AnyArray, p: AnyArray) -> tuple[Array, Array]:
    """Inverse placement."""
    Rt = jnp.swapaxes(R, -1, -2)
    return Rt, -mv(Rt, p)


# ----------------------------------------------------------------------------- 6D vectors


def motion_cross(v: AnyArray, m: AnyArray) -> Array:
    """``v x m`` (Featherstone's ``crm(v) @ m``) for 6D motion vectors."""
    w, vl = v[..., :3], v[..., 3:]
    mw, ml = m[..., :3], m[..., 3:]
    return jnp.concatenate([cross(w, mw), cross(w, ml) + cross(vl, mw)], -1)


def force_cross(v: AnyArray, f: AnyArray) -> Array:
    """``v x* f`` (Featherstone's ``crf(v) @ f``) for a motion ``v`` and a force ``f``."""
    w, vl = v[..., :3], v[..., 3:]
    n, fl = f[..., :3], f[..., 3:]
    return jnp.concatenate([cross(w, n) + cross(vl, fl), cross(w, fl)], -1)


def act_motion(R: AnyArray, p: AnyArray, m: AnyArray) -> Array:
    """Express in frame A a motion given in frame B, where ``(R, p)`` places B in A."""
    w = mv(R, m[..., :3])
    return jnp.concatenate([w, mv(R, m[..., 3:]) + cross(p, w)], -1)


def act_force(R: AnyArray, p: AnyArray, f: AnyArray) -> Array:
    """Express in frame A a force given in frame B, where ``(R, p)`` places B in A."""
    fl = mv(R, f[..., 3:])
    return jnp.concatenate([mv(R, f[..., :3]) + cross(p, fl), fl], -1)


def act_inv_motion(R: AnyArray, p: AnyArray, m: AnyArray) -> Array:
    """Express in frame B a motion given in frame A, where ``(R, p)`` places B in A."""
    Rt = jnp.swapaxes(R, -1, -2)
    w = m[..., :3]
    # R^T (m_lin - p x w) written on the components: the cross product stacked into a vector
    # first was a kernel of its own under jax.vmap (one per call in RNEA's levels: 23 of
    # talos_full's 96), the products the same
    mc = unstack(m)
    pw = cross_rows(unstack(p), mc[:3])
    cols = unstack(Rt)
    lin = cols[0] * (mc[3] - pw[0])[..., None]
    for i in (1, 2):
        lin = lin + cols[i] * (mc[3 + i] - pw[i])[..., None]
    return jnp.concatenate([mv(Rt, w), lin], -1)


def act_inv_force(R: AnyArray, p: AnyArray, f: AnyArray) -> Array:
    """Express in frame B a force given in frame A, where ``(R, p)`` places B in A."""
    Rt = jnp.swapaxes(R, -1, -2)
    fl = f[..., 3:]
    return jnp.concatenate([mv(Rt, f[..., :3] - cross(p, fl)), mv(Rt, fl)], -1)


def motion_matrix(R: AnyArray, p: AnyArray) -> Array:
    """Plücker matrix ``A_X_B`` (6x6) mapping B motion coordinates to A."""
    Z = jnp.zeros_like(R)
    return jnp.concatenate(
        [jnp.concatenate([R, Z], -1), jnp.concatenate([mm(skew(p), R), R], -1)], -2
    )


# ----------------------------------------------------------------------------- inertia


def inertia_matrix(mass: AnyArray, h: AnyArray, Ibar: AnyArray) -> Array:
    """6x6 spatial inertia ``[[Ibar, [h]x], [[h]x^T, m 1]]`` about a frame origin.

    ``mass`` ``(...)``, first moment ``h = m c`` ``(..., 3)``, rotational inertia about the
    origin ``Ibar`` ``(..., 3, 3)`` (Featherstone eq. 2.63).
    """
    H = skew(h)
    o = jnp.zeros_like(mass)
    M = stack([stack([mass, o, o], -1), stack([o, mass, o], -1), stack([o, o, mass], -1)], -2)
    top = jnp.concatenate([Ibar, H], -1)
    bot = jnp.concatenate([-H, M], -1)
    return jnp.concatenate([top, bot], -2)


def inertia_params(
    mass: AnyArray, com: AnyArray, I_com: AnyArray
) -> tuple[AnyArray, AnyArray, AnyArray]:
    """(mass, com, inertia about the COM) -> (mass, h, Ibar about the frame origin)."""
    C = skew(com)
    h = mass[..., None] * com
    Ibar = I_com - mass[..., None, None] * mm(C, C)
    return mass, h, Ibar


def transform_inertia_params(
    R: AnyArray, p: AnyArray, mass: AnyArray, h: AnyArray, Ibar: AnyArray
) -> tuple[AnyArray, Array, Array]:
    """Re-express inertia parameters given in frame B in frame A (``(R, p)`` places B in A)."""
    hA = mv(R, h) + mass[..., None] * p
    Rh = hA - mass[..., None] * p  # = R h
    P = skew(p)
    H = skew(Rh)
    IbarA = (
        mm(mm(R, Ibar), jnp.swapaxes(R, -1, -2))
        - mm(P, H)
        - mm(H, P)
        - mass[..., None, None] * mm(P, P)
    )
    return mass, hA, IbarA


# ----------------------------------------------------------------------------- small inverses


def inv3(A: AnyArray) -> Array:
    """Inverse of ``(..., 3, 3)`` matrices by the adjugate (no pivoting; analytic, so it is safe
    for complex-step inputs; meant for the symmetric positive definite blocks of ABA)."""
    (a, b, c), (d, e, f), (g, h, i) = (unstack(r) for r in unstack(A, -2))
    co = [
        e * i - f * h,
        c * h - b * i,
        b * f - c * e,
        f * g - d * i,
        a * i - c * g,
        c * d - a * f,
        d * h - e * g,
        b * g - a * h,
        a * e - b * d,
    ]
    det = a * co[0] + b * co[3] + c * co[6]
    inv_det = 1 / det
    return (
        stack([stack(co[0:3], -1), stack(co[3:6], -1), stack(co[6:9], -1)], -2)
        * inv_det[..., None, None]
    )


def inv_spd(D: Array) -> Array:
    """Inverse of small symmetric positive definite ``(..., k, k)`` matrices: closed forms for
    ``k`` in 1, 2, 3, 6, ``jnp.linalg.inv`` otherwise.

    ``k = 6`` uses the 3x3 block Schur complement. Written out so that XLA fuses it (a LAPACK
    call per joint would dominate compile and run time) and so that it stays analytic.
    """
    k = D.shape[-1]
    if k == 1:
        return 1 / D
    if k == 2:
        a, b, d = D[..., 0, 0], D[..., 0, 1], D[..., 1, 1]
        det = a * d - b * b
        return stack([stack([d, -b], -1), stack([-b, a], -1)], -2) / det[..., None, None]
    if k == 3:
        return inv3(D)
    if k == 6:
        A, B, C = D[..., :3, :3], D[..., :3, 3:], D[..., 3:, 3:]
        Ai = inv3(A)
        AiB = mm(Ai, B)
        Bt = jnp.swapaxes(B, -1, -2)
        Si = inv3(C - mm(Bt, AiB))
        top_right = -mm(AiB, Si)
        top_left = Ai - mm(top_right, jnp.swapaxes(AiB, -1, -2))
        return jnp.concatenate(
            [
                jnp.concatenate([top_left, top_right], -1),
                jnp.concatenate([jnp.swapaxes(top_right, -1, -2), Si], -1),
            ],
            -2,
        )
    return jnp.linalg.inv(D)


# ----------------------------------------------------------------------------- packed symmetric

#: ``(iu, ju)``: row and column of each entry of a packed symmetric 6x6 (its upper triangle)
TRIU_SYMMETRIC = np.triu_indices(6)
#: ``PACK_SYMMETRIC[i, j]``: position of entry ``(i, j)`` of a symmetric 6x6 in its packed
#: ``(21,)`` vector
PACK_SYMMETRIC = np.zeros((6, 6), np.int64)
PACK_SYMMETRIC[TRIU_SYMMETRIC] = np.arange(21)
PACK_SYMMETRIC[TRIU_SYMMETRIC[::-1]] = np.arange(21)


def pack_symmetric(A: Array) -> Array:
    """Upper triangle ``(..., 21)`` of symmetric ``(..., 6, 6)`` matrices (spatial inertias)."""
    return A[..., TRIU_SYMMETRIC[0], TRIU_SYMMETRIC[1]]


def unpack_symmetric(a: Array) -> Array:
    """Symmetric ``(..., 6, 6)`` from the packed ``(..., 21)`` of :func:`pack_symmetric`."""
    return a[..., PACK_SYMMETRIC]

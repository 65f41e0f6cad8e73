"""What steers XLA:CPU's fusion and vectorisation: arrays stored once into buffers of their
own (:func:`store`, :func:`materialize`) instead of recomputed inside each consumer, and sine and
cosine as vectorisable arithmetic (:func:`sincos`). Values and derivatives are those of the
plain expressions; off the CPU (or with the switches of :mod:`jaxdyn.config` off) the arrays
pass through. Re-exported by :mod:`jaxdyn.spatial`; the algorithms call ``fusion.store`` where
a stored intermediate pays.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from . import ffi
from .sharding import stack

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike

#: pi / 2 to 120 digits, split below into parts whose products with the quadrant are exact
_HALF_PI = Fraction(
    "1.57079632679489661923132169163975144209858469968755291048747229615390820314310449931401741267"
    "105853399107404325664115332354692230477529111586267970406424055872514205135096926055277982231"
    "147447746519098221440548783296672306423782411689339158263560095457282428346173017430522716332"
    "41031565131406"
)


def _cody_waite(bits: int):
    """``pi/2 = c1 + c2 + c3``: ``c1`` and ``c2`` carry ``bits`` significant bits each, so
    ``n c1`` and ``n c2`` are exact for quadrant numbers ``|n| < 2^(p - bits)`` (``p``: the
    float's precision)."""
    parts, rem = [], _HALF_PI
    for _ in range(2):
        m, e = math.frexp(float(rem))
        c = math.ldexp(math.floor(math.ldexp(m, bits)), e - bits)
        parts.append(c)
        rem -= Fraction(c)
    parts.append(float(rem))
    return tuple(parts)


#: per float type: Cody-Waite parts of pi/2 and the Taylor coefficients of sin(r)/r and cos(r)
#: in r^2 (highest first), enough terms for |r| <= pi/4 to the type's precision
_SINCOS = {
    np.dtype(np.float64): (
        _cody_waite(33),
        tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(8, -1, -1)),
        tuple((-1) ** k / math.factorial(2 * k) for k in range(9, -1, -1)),
    ),
    np.dtype(np.float32): (
        _cody_waite(12),
        tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(5, -1, -1)),
        tuple((-1) ** k / math.factorial(2 * k) for k in range(6, -1, -1)),
    ),
}


@jax.custom_jvp
def _sincos_poly(x):
    (c1, c2, c3), ps, pc = _SINCOS[np.dtype(x.dtype)]
    n = jnp.round(x * (2 / math.pi))  # quadrant: x = n pi/2 + r, |r| <= pi/4
    r = ((x - n * c1) - n * c2) - n * c3
    # n may be off by one where x (2/pi) rounds across a half-integer, giving |r| slightly above
    # pi/4 (the polynomials hold there); beyond |n| ~ 2^(p - bits) the reduction rounds by about
    # ulp(x), the angle's own rounding. The clip keeps |sin|, |cos| <= 1 for absurdly large
    # angles (NaN and inf stay NaN).
    r = jnp.clip(r, -1.0, 1.0)
    r2 = r * r
    s = ps[0]
    for c in ps[1:]:
        s = s * r2 + c
    s = s * r
    co = pc[0]
    for c in pc[1:]:
        co = co * r2 + c
    k = n - 4 * jnp.floor(n * 0.25)  # n mod 4, in floating point (no integer overflow)
    odd = (k == 1) | (k == 3)
    sin = jnp.where(odd, co, s)
    cos = jnp.where(odd, s, co)
    return jnp.where(k >= 2, -sin, sin), jnp.where((k == 1) | (k == 2), -cos, cos)


@_sincos_poly.defjvp
def _sincos_poly_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    s, c = _sincos_poly(x)
    return (s, c), (c * dx, -s * dx)


def sincos(x: ArrayLike) -> tuple[Array, Array]:
    """``(sin(x), cos(x))`` with one shared range reduction, as vectorisable arithmetic.

    XLA:CPU evaluates ``jnp.sin`` / ``jnp.cos`` element by element (in float64 about 4-8 times
    the cost of this polynomial form under ``vmap``, for each of the two). Here ``x`` is reduced
    to ``r`` in ``[-pi/4, pi/4]`` by Cody-Waite (pi/2 in three parts) and ``sin r``, ``cos r``
    are their Taylor polynomials, exact to the float type's precision on that interval: the
    results are within 2 ulp of the correctly rounded values for ``|x| < 2^20 pi/2`` (float64;
    ``2^12 pi/2`` in float32) and within ``ulp(x)`` beyond, which is the rounding of the angle
    itself. Derivatives: ``d sin = cos dx``, ``d cos = -sin dx`` (a ``custom_jvp``). Complex
    (complex-step) and other inputs use ``jnp.sin`` / ``jnp.cos``.
    """
    x = jnp.asarray(x)
    if np.dtype(x.dtype) not in _SINCOS:
        return jnp.sin(x), jnp.cos(x)
    s, c = store(*_sincos_poly(x))
    return s, c


def materialize(*xs: Array) -> tuple[Array, ...]:
    """The arrays ``xs`` (one dtype), computed once into a buffer of their own.

    XLA fuses cheap elementwise producers into each of their consumers, and a fused kernel
    evaluates its expression per output element: the 30-odd operations of :func:`sincos`
    feeding the nine entries of a rotation matrix ran nine times per angle (``rodrigues``
    took about three times as long). A
    ``dynamic_update_slice`` of their stack into zeros is not fused into the consumers, so it
    stores them once (``optimization_barrier`` is dropped on the CPU and does not do this).
    What XLA keeps is a copy into another layout: under ``jax.vmap`` (batch leading) the
    batched update becomes a scatter that XLA rewrites into a transposing copy; with the batch
    as the trailing axis the whole-array update was simplified away and nothing was stored
    (``docs/design-measurements.md``).
    Values and derivatives are unchanged. A no-op off the CPU (a GPU recomputes cheaply and
    pays for every extra kernel). Give it two or more arrays: the stack of a single array is a
    reshape, which XLA removes together with the update, so one array alone is not stored
    (seen on ABA's forward sweep, 2026-11-27; stacking it with a copy of itself does store it,
    at twice the bytes, and was no faster there). Nor is an array stacked with a constant
    (Minv's unit torques): XLA folds that stack away too; ``materialize(x, x)[0]`` stores ``x``
    (the backward sweep of :func:`jaxdyn.algorithms.aba.sweeps`). Arrays of different shapes
    must share their first and last dimensions (``R (n, 3, 3)`` and ``p (n, 3)``).
    :func:`store` stores without the copy where jaxdyn's no-op FFI handler is available, and
    falls back to this. The copy is XLA's to keep: the XLA of jaxlib 0.10 keeps it, that of
    jaxlib 0.6.2 (the oldest jaxdyn supports, Python 3.10's newest) removes it and stores
    nothing, so there only :func:`store`'s call stores (``tests/test_spatial.py``).
    """
    same = all(x.shape == xs[0].shape for x in xs)
    ends = {(x.shape[0], x.shape[-1]) if x.ndim >= 2 else None for x in xs}
    if not same and (len(ends) > 1 or None in ends):
        raise ValueError(
            "materialize: arrays of different shapes must share their first and last "
            f"dimensions, got {[x.shape for x in xs]}"
        )
    if jax.default_backend() != "cpu" or any(x.size == 0 for x in xs):
        return xs
    if same:
        st = stack(xs)
        st = jax.lax.dynamic_update_slice(jnp.zeros_like(st), st, (0,) * st.ndim)
        return tuple(st[i] for i in range(len(xs)))
    # Arrays of different shapes are stored as the stack of their rows ``x[:, j, :]`` of one
    # common shape ``(n, w)``, the rows of a rotation ``R (n, 3, 3)`` beside ``p (n, 3)``. A
    # flat concatenation of them would be a no-op under ``vmap``: the batched update of a 1-D
    # array needs no layout change, and XLA removed it together with the store (RNEA's local
    # placements were recomputed in every consumer, and solo12's batched ``rnea`` was slower:
    # docs/design-measurements.md).
    n, w = xs[0].shape[0], xs[0].shape[-1]
    rows = [x.reshape(n, -1, w) for x in xs]
    st = materialize(*(r[:, j] for r in rows for j in range(r.shape[1])))
    out, i = [], 0
    for x, r in zip(xs, rows):
        k = r.shape[1]
        out.append(stack(st[i : i + k], 1).reshape(x.shape))
        i += k
    return tuple(out)


def store(*xs: Array, copy: bool = True) -> tuple[Array, ...]:
    """The arrays ``xs`` (one dtype), computed once into buffers of their own under
    ``jax.vmap`` on the CPU, like :func:`materialize` but without its copy: a call of a no-op
    XLA FFI handler whose results alias its operands (:mod:`jaxdyn.backend.ffi`), through
    which XLA cannot fuse their producers. :func:`materialize` stores them (through a
    transposing copy) where the handler is unavailable or the switch ``ffi_stores`` is off,
    unless ``copy=False`` (then they are returned as they are: for the arrays whose copy cost
    more than it saved); a single evaluation (no ``vmap``) and other platforms leave them to
    XLA. One array alone is stored too (:func:`materialize` stacks it with a copy of itself).
    Values and derivatives are unchanged.

    Stores that cost nothing but a call made storing pay where the copy did not: each level of
    the body placements, the world inertias and motion subspaces, each level of
    :func:`~jaxdyn.model.tree.backward_accumulate`, besides the sine and cosine of the joint
    angles (:func:`sincos`), RNEA's local placements and Minv's backward sweep, which
    :func:`materialize` stored before. ABA's forward sweep keeps the copy (slower this way on
    talos_full), and stores of the 6 x 6 world inertias or of
    :func:`~jaxdyn.model.tree.forward_accumulate`'s levels changed nothing
    (``docs/design-measurements.md``).
    """
    out = ffi.store(*xs) if all(x.size for x in xs) else None
    if out is not None:
        return out
    if not copy:
        return xs
    return (materialize(xs[0], xs[0])[0],) if len(xs) == 1 else materialize(*xs)

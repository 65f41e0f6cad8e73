"""Spatial-algebra primitives with an implementation of their own: :func:`jaxdyn.spatial.sincos`
(the polynomial sine and cosine of the joint transforms) against numpy's ``sin`` / ``cos``, and
:func:`jaxdyn.spatial.materialize` (computed once under ``jax.vmap``, in XLA's compiled program)
with the algorithms whose speed rests on it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn import spatial

_sincos = jax.jit(spatial.sincos)


@pytest.mark.parametrize(
    "dtype, reach, ulps",
    [
        # within 2^20 pi/2 (float64) / 2^12 pi/2 (float32) the range reduction is exact
        (np.float64, 1.6e6, 2.0),
        (np.float32, 6.4e3, 2.0),
    ],
)
def test_sincos_accuracy(dtype, reach, ulps):
    """Within ``ulps`` units in the last place of the float type (relative to 1) of numpy's
    correctly rounded float64 values, over the reach of the exact range reduction, at the
    quadrant boundaries and at tiny angles."""
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            np.linspace(-8.0, 8.0, 20001),
            rng.uniform(-reach, reach, 20000),
            np.arange(-64, 65) * (np.pi / 4),  # octant boundaries: the polynomial's edges
            [0.0, -0.0, 1e-30, -1e-8, 1e-300 if dtype == np.float64 else 1e-37],
        ]
    ).astype(dtype)
    s, c = (np.asarray(y, np.float64) for y in _sincos(jnp.asarray(x)))
    assert s.dtype == c.dtype and _sincos(jnp.asarray(x))[0].dtype == dtype
    x64 = x.astype(np.float64)
    eps = np.finfo(dtype).eps
    assert np.max(np.abs(s - np.sin(x64))) <= ulps * eps
    assert np.max(np.abs(c - np.cos(x64))) <= ulps * eps
    # small angles keep their relative precision (sin x = x to rounding)
    tiny = np.abs(x64) < 1e-6
    np.testing.assert_allclose(s[tiny], np.sin(x64[tiny]), rtol=2 * eps, atol=0)


def test_sincos_beyond_the_exact_reduction():
    """Past ``2^20 pi/2`` the reduction rounds by about ``ulp(x)`` (the angle's own rounding);
    absurd angles stay in ``[-1, 1]``; NaN and infinities give NaN, as ``jnp.sin``."""
    x = np.array([1e7, -3e9, 1e12])
    s, c = (np.asarray(y) for y in _sincos(jnp.asarray(x)))
    assert np.all(np.abs(s - np.sin(x)) <= 4 * np.abs(np.spacing(x)))
    assert np.all(np.abs(c - np.cos(x)) <= 4 * np.abs(np.spacing(x)))
    s, c = (np.asarray(y) for y in _sincos(jnp.asarray([1e300, -1e200, np.inf, -np.inf, np.nan])))
    assert np.all(np.abs(s[:2]) <= 1) and np.all(np.abs(c[:2]) <= 1)
    assert np.all(np.isnan(s[2:])) and np.all(np.isnan(c[2:]))


def test_sincos_derivatives_and_other_types():
    """First and second derivatives are ``cos``, ``-sin``, ...; complex (complex-step) and
    integer inputs go to ``jnp.sin`` / ``jnp.cos``."""
    x = jnp.linspace(-5.0, 5.0, 11)
    ds = jax.vmap(jax.grad(lambda t: spatial.sincos(t)[0]))(x)
    dc = jax.vmap(jax.grad(lambda t: spatial.sincos(t)[1]))(x)
    d2s = jax.vmap(jax.hessian(lambda t: spatial.sincos(t)[0]))(x)
    np.testing.assert_allclose(ds, np.cos(x), rtol=0, atol=4e-16)
    np.testing.assert_allclose(dc, -np.sin(x), rtol=0, atol=4e-16)
    np.testing.assert_allclose(d2s, -np.sin(x), rtol=0, atol=4e-16)
    h = 1e-30
    s, c = spatial.sincos(jnp.asarray([0.7 + 1j * h]))
    np.testing.assert_allclose(np.imag(s) / h, np.cos(0.7), rtol=1e-15)
    np.testing.assert_allclose(np.imag(c) / h, -np.sin(0.7), rtol=1e-15)
    s, c = spatial.sincos(jnp.arange(3))
    np.testing.assert_allclose(s, np.sin(np.arange(3)), rtol=1e-6)


def _kernels_computing(f, x, op):
    """How many computations of ``jax.jit(jax.vmap(f))``'s compiled program evaluate ``op``."""
    lines = jax.jit(jax.vmap(f)).lower(x).compile().as_text().split("\n")
    heads = [i for i, line in enumerate(lines) if line[:1] in "%E" and "{" in line]
    bodies = ["\n".join(lines[a:b]) for a, b in zip(heads, heads[1:] + [len(lines)])]
    return sum(f" {op}(" in b for b in bodies)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="materialize is a no-op off the CPU")
def test_materialize_stores_once_under_vmap():
    """:func:`jaxdyn.spatial.materialize` leaves values unchanged and, under ``jax.vmap``, makes
    XLA compute its arguments in one kernel instead of inside each consumer; also for arrays of
    different shapes (a rotation and a position), whose flat concatenation XLA once removed."""

    def parts(x):
        return jnp.sin(x[:, :9].reshape(-1, 3, 3)), jnp.cos(x[:, 9:])

    def use(R, p):  # two consumers of R: XLA fuses an unstored R into both
        return jnp.concatenate([(R @ p[..., None])[..., 0], 2 * R[:, 0]], -1)

    x = jnp.asarray(np.random.default_rng(0).standard_normal((64, 4, 12)))
    stored = lambda y: use(*spatial.materialize(*parts(y)))  # noqa: E731
    pair = lambda y: use(spatial.materialize(*2 * parts(y)[:1])[0], parts(y)[1])  # noqa: E731
    plain = lambda y: use(*parts(y))  # noqa: E731
    np.testing.assert_array_equal(jax.vmap(stored)(x), jax.vmap(plain)(x))
    assert _kernels_computing(plain, x, "sine") > 1  # the control: XLA does duplicate it
    assert _kernels_computing(stored, x, "sine") == 1
    assert _kernels_computing(pair, x, "sine") == 1
    with pytest.raises(ValueError, match="first and last dimensions"):
        spatial.materialize(jnp.zeros((3, 3)), jnp.zeros(3))


def test_placements_are_stored_by_their_algorithms(solo12, monkeypatch):
    """The callers whose speed rests on :func:`jaxdyn.spatial.materialize` (tested above) still
    call it on what they must not recompute: RNEA's body form (the public ``rnea`` under
    ``jax.vmap``) on its local placements, and :func:`jaxdyn.algorithms.kinematics.chain_placements`
    on each composed step of a single frame's chain. Traced only (``jax.make_jaxpr``)."""
    import jaxdyn
    from jaxdyn.algorithms import kinematics, rnea

    model = solo12.model
    calls = []
    real = spatial.materialize

    def spy(*xs):
        calls.append(tuple(x.shape for x in xs))
        return real(*xs)

    qs = jnp.zeros((rnea.LOCAL_MIN_BATCH, model.nq)).at[:, 3].set(1.0)
    vs = jnp.zeros((rnea.LOCAL_MIN_BATCH, model.nv))

    def trace_rnea():  # a new function each time: no trace cache answers for it
        jax.make_jaxpr(jax.vmap(lambda q, v: jaxdyn.rnea(model, q, v, v)))(qs, vs)

    trace_rnea()  # as if an earlier test had traced it
    monkeypatch.setattr(spatial, "materialize", spy)
    trace_rnea()
    assert ((model.nb, 3, 3), (model.nb, 3)) in calls
    calls.clear()
    foot = max(range(model.nb), key=lambda b: len(kinematics.support_chain(model.topo, b)))
    depth = len(kinematics.support_chain(model.topo, foot))
    jax.make_jaxpr(lambda q: kinematics.chain_placements(model, q, foot))(qs[0])
    assert calls.count(((1, 3, 3), (1, 3))) == depth - 1 > 0

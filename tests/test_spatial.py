"""Spatial-algebra primitives with an implementation of their own: :func:`jaxdyn.spatial.sincos`
(the polynomial sine and cosine of the joint transforms) against numpy's ``sin`` / ``cos``, and
:func:`jaxdyn.spatial.materialize` (computed once under ``jax.vmap``, in XLA's compiled program)
with the algorithms whose speed rests on it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
import pytest

from jaxdyn import _versions, spatial

#: whether this jaxlib's XLA keeps :func:`jaxdyn.spatial.materialize`'s copy (that of jaxlib
#: 0.10 does; that of 0.6.2, the oldest jaxdyn supports, removes it: nothing is stored)
MATERIALIZE_STORES = _versions.release(jaxlib.__version__) >= (0, 10)

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
    dup = _kernels_computing(plain, x, "sine")
    assert dup > 1  # the control: XLA does duplicate it
    for f in (stored, pair):  # stored once; never more kernels than unstored on any jaxlib
        assert _kernels_computing(f, x, "sine") == (1 if MATERIALIZE_STORES else dup)
    with pytest.raises(ValueError, match="first and last dimensions"):
        spatial.materialize(jnp.zeros((3, 3)), jnp.zeros(3))


def test_store_under_vmap_by_a_call():
    """:func:`jaxdyn.spatial.store` leaves values and derivatives unchanged and, under
    ``jax.vmap`` on the CPU, computes its arguments in one kernel by a call of the no-op handler
    (no copy); a single evaluation and ``jax.export`` have no call; the switch ``ffi_stores``
    off (or no handler), it stores by :func:`~jaxdyn.spatial.materialize`'s copy, or not at all
    with ``copy=False``."""
    from jax import export

    import jaxdyn
    from jaxdyn.backend import ffi as U

    def parts(x):
        return jnp.sin(x[:, :9].reshape(-1, 3, 3)), jnp.cos(x[:, 9:])

    def use(R, p):
        return jnp.concatenate([(R @ p[..., None])[..., 0], 2 * R[:, 0]], -1)

    x = jnp.asarray(np.random.default_rng(1).standard_normal((64, 4, 12)))
    stored = lambda y: use(*spatial.store(*parts(y)))  # noqa: E731
    loose = lambda y: use(*spatial.store(*parts(y), copy=False))  # noqa: E731
    plain = lambda y: use(*parts(y))  # noqa: E731
    call = 'custom_call_target="jaxdyn_store"'

    def hlo(f, *a):
        return jax.jit(f).lower(*a).compile().as_text()

    ref = jax.vmap(plain)(x)
    np.testing.assert_allclose(jax.jit(jax.vmap(stored))(x), ref, rtol=1e-15, atol=1e-15)
    g = jax.grad(lambda y: jnp.sum(jax.vmap(stored)(y) ** 2))(x)
    g0 = jax.grad(lambda y: jnp.sum(jax.vmap(plain)(y) ** 2))(x)
    np.testing.assert_allclose(g, g0, rtol=1e-14, atol=1e-14)
    # applied to a tangent (an analytic derivative rule's own computation): its transpose
    lin = jax.linear_transpose(jax.vmap(lambda y: spatial.store(2.0 * y)[0]), x)
    np.testing.assert_array_equal(lin(jnp.ones_like(x))[0], 2.0 * np.ones(x.shape))
    assert call not in hlo(stored, x[0])  # a single evaluation: left to XLA
    exp = export.export(jax.jit(jax.vmap(stored)))(x)
    assert "jaxdyn_store" not in exp.mlir_module().split("loc(")[0]
    np.testing.assert_allclose(exp.call(x), ref, rtol=1e-15, atol=1e-15)
    if U.available():
        assert hlo(jax.vmap(stored), x).count(call) == 1
        # a JVP stores the tangents too (jax.vmap(jax.jacfwd(crba)) ran 2x faster so)
        jvp = jax.vmap(lambda y: jax.jvp(stored, (y,), (2.0 * y,)))
        assert hlo(jvp, x).count(call) == 2
        np.testing.assert_allclose(
            jvp(x)[1],
            jax.vmap(lambda y: jax.jvp(plain, (y,), (2.0 * y,)))(x)[1],
            rtol=1e-14,
            atol=1e-14,
        )
        assert _kernels_computing(stored, x, "sine") == 1
        assert _kernels_computing(loose, x, "sine") == 1
    with jaxdyn.config.override(ffi_stores=False):
        assert call not in hlo(jax.vmap(stored), x)
        once = 1 if MATERIALIZE_STORES else _kernels_computing(plain, x, "sine")
        assert _kernels_computing(stored, x, "sine") == once  # materialize's copy
        assert _kernels_computing(loose, x, "sine") > 1  # not stored
        np.testing.assert_allclose(jax.vmap(stored)(x), ref, rtol=1e-15, atol=1e-15)


def test_placements_are_stored_by_their_algorithms(solo12, monkeypatch):
    """The callers whose speed rests on :func:`jaxdyn.backend.fusion.store` or
    :func:`~jaxdyn.backend.fusion.materialize` (tested above) still call them on what they must not
    recompute: RNEA's body form (the public ``rnea`` under ``jax.vmap``) on its local
    placements, the world state on its inertias and motion subspaces (CRBA under ``jax.vmap``),
    and :func:`jaxdyn.algorithms.kinematics.chain_placements` on each composed step of a single
    frame's chain. Traced only (``jax.make_jaxpr``)."""
    import jaxdyn
    from jaxdyn.algorithms import kinematics, rnea
    from jaxdyn.backend import fusion

    model = solo12.model
    calls = []

    def spy(real):
        def call(*xs, **kw):
            calls.append(tuple(x.shape for x in xs))
            return real(*xs, **kw)

        return call

    qs = jnp.zeros((rnea.LOCAL_MIN_BATCH, model.nq)).at[:, 3].set(1.0)
    vs = jnp.zeros((rnea.LOCAL_MIN_BATCH, model.nv))

    def trace_rnea():  # a new function each time: no trace cache answers for it
        # XLA's RNEA (jaxdyn.rnea runs its C kernel on the CPU: test_rnea_kernel.py)
        with jaxdyn.config.override(cpu_kernels=False):
            jax.make_jaxpr(jax.vmap(lambda q, v: jaxdyn.rnea(model, q, v, v)))(qs, vs)

    trace_rnea()  # as if an earlier test had traced it
    monkeypatch.setattr(fusion, "materialize", spy(fusion.materialize))
    monkeypatch.setattr(fusion, "store", spy(fusion.store))
    trace_rnea()
    assert ((model.nb, 3, 3), (model.nb, 3)) in calls
    calls.clear()
    # XLA's CRBA (jaxdyn.crba itself runs jaxdyn's C kernel on the CPU: test_crba_kernel.py)
    from jaxdyn.algorithms import crba

    ws = lambda q: kinematics.world_state(model, q, centered=True)  # noqa: E731
    jax.make_jaxpr(jax.vmap(lambda q: crba.crba_world(model, ws(q))))(qs)
    assert ((model.nb, 3), (model.nb, 3, 3)) in calls and ((model.nv, 6),) in calls  # c, Ic; S
    calls.clear()
    foot = max(range(model.nb), key=lambda b: len(kinematics.support_chain(model.topo, b)))
    depth = len(kinematics.support_chain(model.topo, foot))
    jax.make_jaxpr(lambda q: kinematics.chain_placements(model, q, foot))(qs[0])
    assert calls.count(((1, 3, 3), (1, 3))) == depth - 1 > 0


def test_mm_mv_return_types_as_documented():
    """:func:`spatial.mm` / :func:`spatial.mv`'s documented types (no compile): a jax input
    gives a jax array; two numpy inputs give numpy where the product is unrolled (3 terms,
    or ``unroll=True``) and a jax array where it is ``jnp.matmul`` (6 terms); the values are
    ``A @ B`` either way."""
    rng = np.random.default_rng(0)
    A3, B3, A6, B6 = (rng.standard_normal(s) for s in ((2, 3, 3), (2, 3, 3), (6, 6), (6, 6)))
    assert isinstance(spatial.mm(A3, B3), np.ndarray)
    assert isinstance(spatial.mv(A3, B3[:, 0]), np.ndarray)
    assert isinstance(spatial.mm(A6, B6, unroll=True), np.ndarray)
    assert isinstance(spatial.mm(A6, B6), jax.Array)
    assert isinstance(spatial.mm(A3, jnp.asarray(B3)), jax.Array)
    assert isinstance(spatial.mv(jnp.asarray(A3), B3[:, 0]), jax.Array)
    np.testing.assert_allclose(spatial.mm(A3, B3), A3 @ B3, rtol=1e-14)
    np.testing.assert_allclose(spatial.mm(A6, B6), A6 @ B6, rtol=1e-12)
    np.testing.assert_allclose(spatial.mv(A3, B3[:, 0]), (A3 @ B3[:, 0, :, None])[..., 0])


def test_se3_log_jacobian_against_autodiff():
    """:func:`spatial.se3_log_jacobian` (Pinocchio's ``Jlog6`` in closed form) is the
    derivative of ``log6(M exp(δ))`` at ``δ = 0``: forward-mode autodiff of jaxdyn's free-joint
    ``difference(identity, M ⊕ δ)`` (quaternion logarithm, ``V(ω)^-1``) to 1e-10, central
    finite differences to 1e-7 (below 3 rad), at rotation angles from zero through the Taylor
    branch's edge (``θ² = 0.5``) to ``π - 1e-9``; :func:`spatial.se3_right_jacobian` at
    ``ξ = log6(M)`` is the derivative of ``log6(exp(ξ)^-1 exp(ξ + δ))`` (autodiff, 1e-10), and
    :func:`spatial.se3_right_jacobian_inv` at ``ξ`` equals ``se3_log_jacobian`` at ``M``."""
    from jaxdyn import joints

    free = joints.FREE
    rng = np.random.default_rng(3)
    thetas = [0.0, 1e-12, 1e-6, 0.3, np.sqrt(0.5) - 1e-9, np.sqrt(0.5) + 1e-9, 1.5, 3.0,
              np.pi - 1e-6, np.pi - 1e-9]  # fmt: skip
    axes = rng.standard_normal((len(thetas), 3))
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    ws = jnp.asarray(np.asarray(thetas)[:, None] * axes)
    ps = jnp.asarray(rng.uniform(-2.0, 2.0, (len(thetas), 3)))
    eye_q = jnp.asarray([0.0, 0, 0, 1, 0, 0, 0])

    def log6(q0, q1, d):  # log6(M0^-1 M1 exp(d)), placements as free-joint configurations
        return joints.difference(free, q0[None], joints.integrate(free, q1[None], d[None]))[0]

    def exp6(xi):
        return joints.integrate(free, eye_q[None], xi[None])[0]

    @jax.jit
    def cases(w, p):
        q1 = jnp.concatenate([p, spatial.exp3_quat(w)])
        z = jnp.zeros(6)
        xi = log6(eye_q, q1, z)
        auto = jax.jacfwd(lambda d: log6(eye_q, q1, d))(z)
        h = 1e-6
        fd = jax.vmap(lambda e: (log6(eye_q, q1, e) - log6(eye_q, q1, -e)) / (2 * h))(
            h * jnp.eye(6)
        ).T
        jr = jax.jacfwd(lambda d: log6(exp6(xi), exp6(xi + d), z))(z)
        return (spatial.se3_log_jacobian(w, p), auto, fd, spatial.se3_right_jacobian(xi), jr,
                spatial.se3_right_jacobian_inv(xi))  # fmt: skip

    got, auto, fd, jr_got, jr_auto, inv = jax.vmap(cases)(ws, ps)
    for i, th in enumerate(thetas):
        err = float(jnp.max(jnp.abs(got[i] - auto[i])))
        assert err < 1e-10, f"theta {th}: |Jlog6 - autodiff| = {err}"
        if th < 3.0:  # (a step of 1e-6 near pi could cross it: log6 jumps there)
            err = float(jnp.max(jnp.abs(got[i] - fd[i])))
            assert err < 1e-7, f"theta {th}: |Jlog6 - finite differences| = {err}"
        err = float(jnp.max(jnp.abs(jr_got[i] - jr_auto[i])))
        assert err < 1e-10, f"theta {th}: |Jr - autodiff| = {err}"
        err = float(jnp.max(jnp.abs(inv[i] - got[i])))
        assert err < 1e-10, f"theta {th}: |se3_right_jacobian_inv - Jlog6| = {err}"
    # the blocks' structure: upper right zero, the diagonal blocks equal
    np.testing.assert_array_equal(np.asarray(got[:, :3, 3:]), 0.0)
    np.testing.assert_array_equal(np.asarray(got[:, :3, :3]), np.asarray(got[:, 3:, 3:]))


def test_difference_jacobians_free_joint_against_autodiff():
    """:func:`jaxdyn.trajopt.lie.difference_jacobians` on quad12 (a free joint and twelve
    revolute ones): ``d/dq1 = Jr(d)^-1`` from the relative placement
    (:func:`spatial.se3_log_jacobian`) and ``d/dq0 = -Jr(d)^-1 Ad(M^-1)`` equal forward-mode
    autodiff of ``difference`` through ``integrate`` (1e-12), bases a small, a large and a
    nearly half-turn rotation apart."""
    import jaxdyn
    from jaxdyn import robots
    from jaxdyn.trajopt import lie

    model = robots.load("quad12")
    nv = model.nv
    rng = np.random.default_rng(5)
    q0 = jaxdyn.integrate(model, jaxdyn.neutral_configuration(model), rng.standard_normal(nv))
    axis = rng.standard_normal(3)
    axis /= np.linalg.norm(axis)

    @jax.jit
    def both(q0, d):
        q1 = jaxdyn.integrate(model, q0, d)
        z = jnp.zeros(nv)
        A0 = jax.jacfwd(lambda e: jaxdyn.difference(model, jaxdyn.integrate(model, q0, e), q1))(z)
        A1 = jax.jacfwd(lambda e: jaxdyn.difference(model, q0, jaxdyn.integrate(model, q1, e)))(z)
        return lie.difference_jacobians(model, q0, q1), (A0, A1)

    for angle in (1e-7, 1.2, np.pi - 1e-6):
        d = rng.standard_normal(nv)
        d[:3] = angle * axis
        (J0, J1), (A0, A1) = both(q0, jnp.asarray(d))
        np.testing.assert_allclose(np.asarray(J1), np.asarray(A1), rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.asarray(J0), np.asarray(A0), rtol=0, atol=1e-12)

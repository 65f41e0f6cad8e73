"""``jaxdyn.rnea_derivatives`` on the CPU by its C kernel
(:func:`jaxdyn.backend.rnea_derivatives_kernel.rnea_derivatives_kernel`, IDSVA in C) against
XLA's code (:func:`jaxdyn.derivatives.idsva.rnea_derivatives_xla`, the switch ``cpu_kernels``
off) and against Pinocchio's ``computeRNEADerivatives``; ``jaxdyn.aba_derivatives``, which
takes its inverse dynamics partials from the kernel, against XLA's code.

Every joint kind (a random tree with free, spherical, revolute and prismatic joints, massless
bodies and armature), a floating humanoid (talos_full), a floating quadruped (solo12), several
roots (baxter): float64 to 1e-12 of the largest entry against XLA's code and to 1e-10 against
Pinocchio, float32 as accurate as XLA's float32 code; external forces, batches that fill no
whole block of vector lanes, nested ``vmap``, a single evaluation; derivatives through the
kernel (``jax.jvp``, ``jax.grad``) equal to XLA's; ``jax.export`` and the switch off without
the kernel's call; ``jax.disable_jit``; the call without ``M`` equal to the call with it.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from jax import export

import jaxdyn
from jaxdyn.backend import ffi
from jaxdyn.backend.crba_kernel import kernel_usable
from jaxdyn.derivatives.idsva import id_partials, id_state_partials

from _kernel_cases import close, configurations, kernel_models
from oracle import RANDOM_ALL_KINDS, all_kinds_tree, robot_case, sym_upper

CALL = "@" + ffi.RNEA_DERIVATIVES_TARGET
#: the primitive of the kernel's call without M
STATE_PRIMITIVE = ffi.RNEA_DERIVATIVES_TARGET + "_state"


@pytest.fixture(scope="module")
def models():
    ms = kernel_models()
    ms["solo12"] = jaxdyn.robots.load("solo12")
    return ms


def _states(model, n, seed, dtype=jnp.float64):
    q = configurations(model, n, seed, scale=3.0)
    rng = np.random.default_rng(seed)
    v, a = (rng.normal(size=(n, model.nv)) for _ in range(2))
    f = rng.normal(size=(n, model.nb, 6))
    return tuple(jnp.asarray(x, dtype) for x in (q, v, a, f))


def _fn(model, fext=True, fn=jaxdyn.rnea_derivatives):
    if fext:
        return jax.vmap(lambda q, v, a, f: fn(model, q, v, a, f))
    return jax.vmap(lambda q, v, a: fn(model, q, v, a))


def _xla(fn, *args):
    """``jax.jit(fn)(*args)`` with the switch ``cpu_kernels`` off (XLA's code), checked to hold
    no kernel call."""
    with jaxdyn.config.override(cpu_kernels=False):
        assert CALL not in jax.jit(fn).lower(*args).as_text()
        return jax.jit(fn)(*args)


def _all_close(got, want, tol):
    for x, y in zip(got, want, strict=True):
        close(x, y, tol)


# talos_full (humanoid) and baxter (several roots) are slow: talos_full's partials are checked
# against Pinocchio below, several roots by test_rnea_kernel's kernel
@pytest.mark.parametrize(
    "name",
    [
        "all_kinds",
        "solo12",
        pytest.param("humanoid", marks=pytest.mark.slow),
        pytest.param("baxter", marks=pytest.mark.slow),
    ],
)
def test_kernel_equals_xla(models, name):
    model = models[name]
    q, v, a, f = _states(model, 19, 0)  # 19: no whole block of 8 (float64) / 16 (float32)
    assert kernel_usable(model, q.dtype)
    g, g0 = jax.jit(_fn(model)), jax.jit(_fn(model, fext=False))
    assert CALL in g.lower(q, v, a, f).as_text() and CALL in g0.lower(q, v, a).as_text()
    ref = _xla(_fn(model), q, v, a, f)
    _all_close(g(q, v, a, f), ref, 1e-12)
    _all_close(g0(q, v, a), _xla(_fn(model, fext=False), q, v, a), 1e-12)
    # a single evaluation (one narrow block), jitted and eagerly; the narrow blocks after 8
    one = jax.jit(lambda q, v, a, f: jaxdyn.rnea_derivatives(model, q, v, a, f))
    _all_close(one(q[5], v[5], a[5], f[5]), [r[5] for r in ref], 1e-12)
    _all_close(jaxdyn.rnea_derivatives(model, q[4], v[4], a[4], f[4]), [r[4] for r in ref], 1e-12)
    for n in (2, 10):
        _all_close(g(q[:n], v[:n], a[:n], f[:n]), [r[:n] for r in ref], 1e-12)
    # the forward-dynamics partials, which take the inverse dynamics partials from the kernel
    fd = jax.jit(_fn(model, fn=jaxdyn.aba_derivatives))
    assert CALL in fd.lower(q, v, a, f).as_text()
    # (through M^-1: 2e-11 of the largest entry seen on JAX 0.6.2's XLA code, all_kinds)
    _all_close(fd(q, v, a, f), _xla(_fn(model, fn=jaxdyn.aba_derivatives), q, v, a, f), 1e-10)
    # float32: 16 lanes, as accurate as XLA's float32 code
    x32 = tuple(x.astype(jnp.float32) for x in (q, v, a, f))
    got32 = g(*x32)
    assert got32[0].dtype == jnp.float32
    ref32 = _xla(_fn(model), *x32)
    for k in range(3):
        scale = max(1.0, float(np.abs(np.asarray(ref[k])).max()))
        err_x = float(np.abs(np.asarray(ref32[k]) - np.asarray(ref[k])).max()) / scale
        close(got32[k], ref[k], max(2 * err_x, 1e-5))


def test_nested_batch_and_derivatives(models):
    model = models["all_kinds_small"]
    q, v, a, f = _states(model, 12, 1)
    # a 2-D batch, and a batch axis that is not the first
    nested = jax.jit(jax.vmap(_fn(model)))
    sh = (3, 4)
    ref = _xla(_fn(model), q, v, a, f)
    got = nested(*(x.reshape(*sh, *x.shape[1:]) for x in (q, v, a, f)))
    _all_close(got, [r.reshape(*sh, *r.shape[1:]) for r in ref], 1e-12)
    k = jax.jit(jax.vmap(lambda q, v, a: jaxdyn.rnea_derivatives(model, q, v, a), in_axes=1))
    want = _xla(_fn(model, fext=False), q[:8], v[:8], a[:8])
    _all_close(k(q[:8].T, v[:8].T, a[:8].T), want, 1e-12)

    # jvp and grad through the kernel's primitive: jax.jvp of XLA's code (its primal too)
    def loss(q, v, a, f):
        dq, dv, M = _fn(model)(q, v, a, f)
        return jnp.sum(jnp.sin(dq)) + jnp.sum(dv * dv) + jnp.sum(jnp.cos(M))

    args = (q[:3], v[:3], a[:3], f[:3])
    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))
    _all_close(grad(*args), _xla(jax.grad(loss, argnums=(0, 1, 2, 3)), *args), 1e-12)
    tangents = tuple(jnp.ones_like(x) * 0.1 for x in args[1:])

    def jvp(v, a, f):
        return jax.jvp(lambda v, a, f: _fn(model)(args[0], v, a, f), (v, a, f), tangents)

    _all_close(jax.jit(jvp)(*args[1:])[1], _xla(jvp, *args[1:])[1], 1e-12)


@pytest.mark.parametrize("name", ["all_kinds", "talos_full", "solo12"])
def test_kernel_equals_pinocchio(name):
    """The kernel's partials against Pinocchio's ``computeRNEADerivatives`` (with external
    forces; armature is not in Pinocchio's model, so the tree has none here)."""
    case = all_kinds_tree(RANDOM_ALL_KINDS[2]) if name == "all_kinds" else robot_case(name)
    model = case.model
    one = jax.jit(lambda q, v, a, f: jaxdyn.rnea_derivatives(model, q, v, a, f))
    s = case.states[0]
    assert CALL in one.lower(s["q"], s["v"], s["a"], s["f_ext"]).as_text()
    pm, c = case.pin_model, case.conv
    for s in case.states:
        pd = pm.createData()
        pq, pv, pa = c.q_to_pin(s["q"]), c.v_to_pin(s["v"]), c.v_to_pin(s["a"])
        res = pin.computeRNEADerivatives(pm, pd, pq, pv, pa, c.f_ext_to_pin(s["f_ext"]))
        want = [c.matrix_from_pin(np.array(x)) for x in res[:2]]
        want.append(c.matrix_from_pin(sym_upper(np.array(res[2]))))
        _all_close(one(s["q"], s["v"], s["a"], s["f_ext"]), want, 1e-10)


def test_export_switch_and_disable_jit(models):
    model = models["all_kinds_small"]
    q, v, a, f = _states(model, 4, 2)
    g = jax.jit(_fn(model))
    with jaxdyn.value_checks.unchecked():
        exported = export.export(jax.jit(_fn(model)))(q, v, a, f)
    assert CALL not in exported.mlir_module()
    _all_close(exported.call(q, v, a, f), g(q, v, a, f), 1e-12)
    with jaxdyn.config.override(cpu_kernels=False):
        assert CALL not in jax.jit(_fn(model)).lower(q, v, a, f).as_text()
    want = jaxdyn.rnea_derivatives(model, q[0], v[0], a[0], f[0])
    with jax.disable_jit():
        got = jaxdyn.rnea_derivatives(model, q[0], v[0], a[0], f[0])
    _all_close(got, want, 1e-12)


def test_state_partials_without_mass_matrix(models):
    """The kernel called without ``M`` (two results: ``id_state_partials``, which
    ``aba_derivatives`` and the JVP rules use) gives the partials of the call with ``M``
    exactly, float64 and float32, a whole block and a narrow one; ``aba_derivatives`` and
    ``jax.jacfwd`` of ``rnea`` in ``q`` call it. (Its XLA form, ``idsva_world`` without ``M``,
    is ``aba_derivatives``' XLA code: ``test_kernel_equals_xla``.)"""
    model = models["all_kinds_small"]
    q, v, a, f = _states(model, 10, 5)  # 10: a block of 8 and a narrow block of 2

    def state(q, v, a, f):
        return id_state_partials(model, q, v, a, f)

    def full(q, v, a, f):
        return id_partials(model, q, v, a, f)[:2]

    s, w = jax.jit(jax.vmap(state)), jax.jit(jax.vmap(full))
    assert CALL in s.lower(q, v, a, f).as_text()
    for dt in (jnp.float64, jnp.float32):
        x = tuple(y.astype(dt) for y in (q, v, a, f))
        for got, want in zip(s(*x), w(*x), strict=True):
            assert got.dtype == dt
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))

    def prims(fn, *args):
        return str(jax.make_jaxpr(fn)(*args))

    fd = jax.vmap(functools.partial(jaxdyn.aba_derivatives, model))
    jq = jax.vmap(jax.jacfwd(functools.partial(jaxdyn.rnea, model)))
    for fn in (fd, jq):  # (a batch: one sample is a small call, XLA's code)
        text = prims(fn, q, v, a)
        assert f"{STATE_PRIMITIVE}[" in text and f"{ffi.RNEA_DERIVATIVES_TARGET}[" not in text

"""jaxdyn.backend.small_calls: an unbatched algorithm inside the caller's ``jax.jit`` compiled
as one XLA:CPU kernel (the switch ``fused_unbatched``, on by default).

Oracle: the same program with the switch off (XLA's usual kernels): values equal to 1e-12, and
derivatives through the call equal too. Structure: the compiled program's entry computation
holds the tagged call and no other kernel than the value check after it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import robots
from jaxdyn.backend import fused_programs, small_calls

pytestmark = pytest.mark.skipif(
    not small_calls.usable(), reason="small calls need jaxlib >= 0.10 on the CPU backend"
)

#: one kernel on quad12 (the derivative algorithms' ``nv x nv`` products exceed
#: ``small_calls.MAX_ELEMENTS`` there, so they keep XLA's usual kernels); ``rnea``, ``aba``
#: and ``minv`` with the switch ``cpu_kernels`` off (on, their C kernels' custom calls keep
#: them out of the call, as ``crba``'s: test_rnea_kernel.py, test_aba_kernel.py,
#: test_minv_kernel.py)
ALGS = ("rnea", "aba", "minv")


@pytest.fixture(scope="module")
def quad():
    """quad12 (a floating base: quaternion checks, the free joint) and a state."""
    model = robots.load("quad12")
    assert isinstance(model, jaxdyn.Model)
    q = jaxdyn.random_configuration(model, jax.random.PRNGKey(0))
    v = jax.random.normal(jax.random.PRNGKey(1), (model.nv,))
    a = jax.random.normal(jax.random.PRNGKey(2), (model.nv,))
    return model, q, v, a


def _args(alg, q, v, a):
    return (q,) if alg in ("crba", "minv") else (q, v, a)


def _entry_ops(compiled) -> list[str]:
    """The operations of the optimised program's entry computation other than parameters,
    constants, bitcasts and tuples (the kernels XLA:CPU launches)."""
    text = str(compiled.as_text())
    entry = text.split("ENTRY", 1)[1].split("\n}", 1)[0]
    skip = ("parameter(", " constant(", " bitcast(", " tuple(", " get-tuple-element(")
    return [ln for ln in entry.splitlines() if " = " in ln and not any(k in ln for k in skip)]


def _compiled(alg, model, args, on, passed):
    f = getattr(jaxdyn, alg)
    with jaxdyn.config.override(fused_unbatched=on, cpu_kernels=False):
        if passed:
            c = jax.jit(lambda m, *x: f(m, *x)).lower(model, *args).compile()
            return c, c(model, *args)
        c = jax.jit(lambda *x: f(model, *x)).lower(*args).compile()
        return c, c(*args)


# closed over: rnea's (aba's and minv's, the same route with other outputs, slow)
@pytest.mark.parametrize(
    "alg,passed",
    [(a, True) for a in ALGS]
    + [("rnea", False)]
    + [pytest.param(a, False, marks=pytest.mark.slow) for a in ALGS if a != "rnea"],
    ids=[f"{a}-model_passed" for a in ALGS]
    + ["rnea-closed_over"]
    + [f"{a}-closed_over" for a in ALGS if a != "rnea"],
)
def test_one_kernel_same_values(quad, alg, passed):
    """``jax.jit(f)`` at batch 1: one tagged call (then the value check), the same values as
    the program of XLA's usual kernels. With the model passed, most model leaves are operands
    the algorithm does not read (which the call must read anyway, or XLA:CPU aborts)."""
    model, q, v, a = quad
    args = _args(alg, q, v, a)
    plain_c, ref = _compiled(alg, model, args, False, passed)
    fused_c, out = _compiled(alg, model, args, True, passed)
    ops = _entry_ops(fused_c)
    calls = [ln for ln in ops if " call(" in ln and 'xla_cpu_small_call="true"' in ln]
    assert len(calls) == 1, ops
    assert all(" call(" in ln or "jaxdyn_check" in ln for ln in ops), ops
    assert not any("xla_cpu_small_call" in ln for ln in _entry_ops(plain_c))
    assert len(_entry_ops(plain_c)) > 10  # what the call replaces
    for x, y in zip(jax.tree.leaves(out), jax.tree.leaves(ref)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-12, atol=1e-12)


def test_derivatives_through_the_call(quad):
    """``jax.grad`` of a jitted function holding the call, and ``jax.jacfwd`` inside ``jit``:
    the analytic derivative rules apply outside the call (the call is the primal), so both
    equal the switch-off derivatives."""
    model, q, v, a = quad

    def loss(q, v, a):
        return jnp.sum(jaxdyn.aba(model, q, v, a) ** 2) + jnp.sum(jaxdyn.rnea(model, q, v, a))

    outs = []
    for on in (False, True):
        with jaxdyn.config.override(fused_unbatched=on):
            g = jax.grad(jax.jit(loss), argnums=(0, 1, 2))(q, v, a)
            j = jax.jit(jax.jacfwd(lambda v: jaxdyn.rnea(model, q, v, a)))(v)
            val = jax.jit(loss)(q, v, a)
            outs.append((g, j, val))
    for x, y in zip(jax.tree.leaves(outs[1]), jax.tree.leaves(outs[0])):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-11, atol=1e-11)


def test_value_check_after_the_call(quad):
    """A value check of the body (a quaternion of ``q`` not of unit norm) still fails the
    program, with its message: its predicate leaves the call and is checked after it (XLA's
    ``rnea``: its C kernel keeps it out of the call, with the check before the kernel)."""
    model, q, v, a = quad
    bad = q.at[3].set(2.0)
    with jaxdyn.config.override(cpu_kernels=False):
        with pytest.raises(jaxdyn.CheckError, match="rnea: a quaternion in q is not of unit"):
            jaxdyn.jit(lambda q: jaxdyn.rnea(model, q, v, a))(bad)
        f = jax.jit(lambda q: jaxdyn.rnea(model, q, v, a))
        hlo = str(f.lower(bad).compile().as_text())
    assert "xla_cpu_small_call" in hlo and "jaxdyn_check" in hlo


def test_fallbacks(quad):
    """Where the body holds what a small call cannot compile (CRBA's C kernel, a custom call)
    the function runs as without the switch; under ``jax.vmap`` (batched) there is no call."""
    model, q, v, a = quad
    hlo = str(jax.jit(lambda q: jaxdyn.crba(model, q)).lower(q).compile().as_text())
    assert "xla_cpu_small_call" not in hlo
    qs = jnp.stack([q, q])
    hlo = jax.jit(jax.vmap(lambda q: jaxdyn.rnea(model, q, v, a))).lower(qs).as_text()
    assert "xla_cpu_small_call" not in hlo
    with pytest.raises(small_calls.Unsupported, match="scatter"):
        small_calls.small_call(lambda x: x.at[jnp.argmax(x)].add(1.0), jnp.ones(3))
    with pytest.raises(small_calls.Unsupported, match="cholesky"):
        small_calls.small_call(lambda x: jnp.linalg.cholesky(x), jnp.eye(3))


@pytest.mark.parametrize(
    ("dims", "shapes"),
    [
        ((((1,), (0,)), ((), ())), ((4, 5), (5, 3))),  # matrix product
        ((((0,), (0,)), ((), ())), ((5, 4), (5, 3))),  # transposed lhs
        ((((2,), (1,)), ((0,), (0,))), ((2, 4, 5), (2, 5, 3))),  # batched
        ((((1, 2), (2, 1)), ((), ())), ((4, 5, 6), (3, 6, 5))),  # two contracting dims
        ((((), ()), ((), ())), ((4,), (3,))),  # outer product
    ],
)
def test_dot_as_sum(dims, shapes):
    """:func:`~jaxdyn.backend.small_calls._dot_as_sum` equals ``lax.dot_general``."""
    rng = np.random.default_rng(0)
    x, y = (jnp.asarray(rng.standard_normal(s)) for s in shapes)
    ref = jax.lax.dot_general(x, y, dims, precision=jax.lax.Precision.HIGHEST)
    out = small_calls._dot_as_sum(x, y, dimension_numbers=dims)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-13, atol=1e-13)


def test_switch_off():
    """With ``fused_unbatched`` off (or on an older jaxlib) no call is tagged."""
    model = robots.load("arm7")
    assert isinstance(model, jaxdyn.Model)
    q = jnp.zeros(model.nq)
    with jaxdyn.config.override(fused_unbatched=False):
        hlo = jax.jit(lambda q: jaxdyn.rnea(model, q, q, q)).lower(q).as_text()
    assert "xla_cpu_small_call" not in hlo
    assert fused_programs.SMALL_CALL["xla_cpu_small_call"] == "true"


def test_safe_primitives_compile_in_one_call():
    """The primitives of :data:`~jaxdyn.backend.small_calls.SAFE` (transcendentals, integer
    powers, gathers, dynamic slices, loops, complex and float32 arithmetic) compile inside one
    call under XLA's default options and give the values of the plain program."""
    from jax import lax

    x, y = jnp.linspace(0.1, 0.9, 7), jnp.linspace(1.1, 1.9, 7)

    def f(x, y):
        parts = [
            jnp.arccos(x),
            jnp.arcsin(x),
            jnp.arctan(x),
            jnp.arctan2(x, y),
            jnp.tan(x),
            jnp.cosh(x),
            jnp.sinh(x),
            lax.pow(x, y),
            jnp.exp2(x),
            jnp.expm1(x),
            jnp.log1p(x),
            jax.nn.sigmoid(x),
            lax.rem(x, y),
            jnp.round(x),
            jnp.sign(x - 0.5),
            jnp.exp(x),
            jnp.log(x),
            jnp.tanh(x),
            lax.rsqrt(x),
            x**3,
            jnp.prod(x) + x,
            jnp.argmax(x).astype(x.dtype) + x,
            x[jnp.array([3, 1, 2, 0, 4, 6, 5])],
            jnp.broadcast_to(lax.dynamic_slice(x, (jnp.argmax(y),), (1,)), (7,)),
            lax.fori_loop(0, 3, lambda i, c: c * 1.5 + jnp.sin(c), x),
            lax.cond(x[0] > 0, lambda: x * 2, lambda: x),
            lax.scan(lambda c, t: (c + t, c * t), 0.0, x)[1],
            jnp.real(jnp.exp(1j * x)) + jnp.abs(x + 1j * y),
            jnp.sin(x.astype(jnp.float32)).astype(x.dtype),
        ]
        return jnp.stack(parts)

    c = jax.jit(lambda x, y: small_calls.small_call(f, x, y)).lower(x, y).compile()
    assert "xla_cpu_small_call" in str(c.as_text())
    out, ref = np.asarray(c(x, y)), np.asarray(jax.jit(f)(x, y))
    np.testing.assert_allclose(out[:-1], ref[:-1], rtol=1e-12, atol=1e-15)  # float64
    np.testing.assert_allclose(out[-1], ref[-1], rtol=1e-6)  # float32

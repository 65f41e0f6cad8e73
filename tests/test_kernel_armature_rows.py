"""jaxdyn's CPU kernels with an armature that differs from sample to sample under ``jax.vmap``
(what a simulation step's ``M + h D`` is: its joint part enters as armature that depends on
the state): the kernels read a row of armature per sample instead of falling back to XLA's
code (a batch of models).

For each kernel (CRBA, Minv, ABA, RNEA and RNEA's derivatives, whose ``M`` holds the armature)
on a tree of every joint kind: the kernel's call is in the program, and its results equal
XLA's code (the switch ``cpu_kernels`` off) to 1e-12 in float64 and to float32's rounding, on
batches that end in a narrow block (34 samples: 32 in blocks of 8 or 16 lanes, then 2); the
armature batched alone (the other operands broadcast), nested ``vmap`` with the armature
batched on the outer axis only, on the inner only and on both, and forward derivatives through
the batched primitive in the armature and ``q``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn.backend import ffi

from _kernel_cases import close, configurations, kernel_models


def _with(model, arm):
    return eqx.tree_at(lambda m: m.armature, model, arm, is_leaf=lambda x: x is None)


#: each kernel as ``f(model, q, v, x) -> array``, with the target its call names
KERNELS = {
    "crba": (lambda m, q, v, x: jaxdyn.crba(m, q), ffi.CRBA_TARGET),
    "minv": (lambda m, q, v, x: jaxdyn.minv(m, q), ffi.MINV_TARGET),
    "aba": (lambda m, q, v, x: jaxdyn.aba(m, q, v, x), ffi.ABA_TARGET),
    "rnea": (lambda m, q, v, x: jaxdyn.rnea(m, q, v, x), ffi.RNEA_TARGET),
    "rnea_derivatives": (
        lambda m, q, v, x: jnp.stack(jaxdyn.rnea_derivatives(m, q, v, x)),
        ffi.RNEA_DERIVATIVES_TARGET,
    ),
}


@pytest.fixture(scope="module")
def case():
    model = kernel_models()["all_kinds_small"]
    n = 34
    rng = np.random.default_rng(7)
    q = configurations(model, n, 7)
    v = jnp.asarray(rng.normal(size=(n, model.nv)))
    x = jnp.asarray(rng.normal(size=(n, model.nv)))
    arm = jnp.asarray(rng.uniform(0.01, 0.8, size=(n, model.nv)))
    return model, q, v, x, arm


@pytest.mark.parametrize("name", list(KERNELS))
def test_armature_rows_equal_xla(case, name):
    model, q, v, x, arm = case
    alg, target = KERNELS[name]

    def f(a, q, v, x):
        return alg(_with(model, a), q, v, x)

    batched = jax.jit(jax.vmap(f))
    assert "@" + target in batched.lower(arm, q, v, x).as_text()  # the kernel, not XLA's code
    got = batched(arm, q, v, x)
    with jaxdyn.config.override(cpu_kernels=False):
        ref = jax.jit(jax.vmap(f))(arm, q, v, x)
        # the armature matters: another row per sample gives another answer
        other = jax.jit(jax.vmap(f))(arm[::-1], q, v, x)
    assert float(jnp.abs(other - ref).max()) > 1e-3 * float(jnp.abs(ref).max())
    close(got, ref, 1e-12)
    # float32 (16 lanes, 32 of the 34 samples in whole blocks): each sample as the kernel
    # computes it alone with its armature as the model's (one narrow block), and near float64
    x32 = [a.astype(jnp.float32) for a in (arm, q, v, x)]
    got32 = batched(*x32)
    assert got32.dtype == jnp.float32
    single = jax.jit(f)
    for i in (0, 17, 33):
        close(got32[i], single(*(a[i] for a in x32)), 1e-6)
    close(got32, ref, 1e-3)
    # the armature batched alone: one sample's q, v, x for every row
    alone = jax.jit(jax.vmap(f, in_axes=(0, None, None, None)))
    assert "@" + target in alone.lower(arm[:5], q[0], v[0], x[0]).as_text()
    with jaxdyn.config.override(cpu_kernels=False):
        ref_alone = jax.jit(jax.vmap(f, in_axes=(0, None, None, None)))(arm[:5], q[0], v[0], x[0])
    close(alone(arm[:5], q[0], v[0], x[0]), ref_alone, 1e-12)


@pytest.mark.parametrize("name", ["aba", pytest.param("minv", marks=pytest.mark.slow)])
def test_armature_rows_nested_vmap(case, name):
    model, q, v, x, arm = case
    alg, _ = KERNELS[name]

    def f(a, q, v, x):
        return alg(_with(model, a), q, v, x)

    r = lambda y: y[:12].reshape((3, 4) + y.shape[1:])  # noqa: E731
    with jaxdyn.config.override(cpu_kernels=False):
        ref = jax.jit(jax.vmap(jax.vmap(f)))(r(arm), r(q), r(v), r(x))
    close(jax.jit(jax.vmap(jax.vmap(f)))(r(arm), r(q), r(v), r(x)), ref, 1e-12)
    # the armature on the outer axis only (a row per outer sample), then on the inner only
    outer = jax.vmap(jax.vmap(f, in_axes=(None, 0, 0, 0)), in_axes=(0, 0, 0, 0))
    inner = jax.vmap(jax.vmap(f, in_axes=(0, 0, 0, 0)), in_axes=(None, 0, 0, 0))
    for g, a in ((outer, arm[:3]), (inner, arm[:4])):
        with jaxdyn.config.override(cpu_kernels=False):
            ref_g = jax.jit(g)(a, r(q), r(v), r(x))
        close(jax.jit(g)(a, r(q), r(v), r(x)), ref_g, 1e-12)


def test_armature_rows_derivatives(case):
    model, q, v, x, arm = case

    def f(a, q):
        return jaxdyn.minv(_with(model, a), q)

    # jax.vmap outside: the batched primitive (a row of armature per sample) differentiated
    def jac(a, q):
        return jax.jacfwd(lambda a, q: jax.vmap(f)(a, q), argnums=(0, 1))(a, q)

    got = jax.jit(jac)(arm[:3], q[:3])
    with jaxdyn.config.override(cpu_kernels=False):
        ref = jax.jit(jac)(arm[:3], q[:3])
    for g, rr in zip(got, ref, strict=True):
        close(g, rr, 1e-11)


def test_armature_of_another_shape_is_refused(case):
    """An armature operand that is neither the model's ``(nv,)`` nor a row per sample fails
    the call, naming it, instead of being read as no armature."""
    from jaxdyn.algorithms.minv import _xla_minv
    from jaxdyn.backend.crba_kernel import minv_kernel

    model, q, *_ = case
    bad = _with(model, jnp.ones((2, model.nv)))  # two rows for one sample
    with pytest.raises(Exception, match="armature operand"):
        jax.block_until_ready(jax.jit(lambda q: minv_kernel(bad, q, _xla_minv))(q[0]))

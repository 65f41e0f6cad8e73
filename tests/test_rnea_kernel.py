"""``jaxdyn.rnea`` on the CPU by its C kernel (:func:`jaxdyn.backend.rnea_kernel.rnea_kernel`)
against XLA's code (:func:`jaxdyn.algorithms.rnea.joint_forces` with the switch
``cpu_kernels`` off, the code every other backend runs) and against Pinocchio's ``rnea``.

Every joint kind (a random tree with free, spherical, revolute and prismatic joints and
massless bodies; with armature against XLA's code), a floating humanoid (talos_full), several
roots (baxter); float64 to 1e-12 of the largest entry against XLA's code and 1e-10 against
Pinocchio, float32 as accurate as XLA's float32 code; external forces (batched and not),
batches that fill no whole block of vector lanes, nested ``vmap``, a single evaluation, the
model closed over or passed in; derivatives (the analytic rules, plain autodiff through the
kernel's XLA fallback, the model's tangents) equal to those with the kernel off; a batch of
models (slow); ``jax.export`` not holding the kernel's call; the switch off (XLA's code).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from jax import export

import jaxdyn
from jaxdyn import robots
from jaxdyn.algorithms import rnea as R
from jaxdyn.backend import ffi

from oracle import RANDOM_ALL_KINDS, all_kinds_tree, robot_case

CALL = "@" + ffi.RNEA_TARGET


@pytest.fixture(scope="module")
def cases():
    return {
        "all_kinds": all_kinds_tree(RANDOM_ALL_KINDS[2]),
        "humanoid": robot_case("talos_full"),
    }


def _states(model, n, seed, dtype=jnp.float64):
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    q = jax.vmap(lambda k: jaxdyn.random_configuration(model, k))(keys)
    rng = np.random.default_rng(seed)
    v, a = (rng.normal(size=(n, model.nv)) for _ in range(2))
    f = rng.normal(size=(n, model.nb, 6))
    return tuple(jnp.asarray(x, dtype) for x in (q, v, a, f))


def _close(got, ref, tol):
    got, ref = np.asarray(got), np.asarray(ref)
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * scale)


def _batched(model, fext=False):
    if fext:
        return jax.jit(jax.vmap(lambda q, v, a, f: jaxdyn.rnea(model, q, v, a, f)))
    return jax.jit(jax.vmap(lambda q, v, a: jaxdyn.rnea(model, q, v, a)))


def _xla(fn, *args):
    """``fn(*args)`` with the switch ``cpu_kernels`` off (XLA's code), checked to hold no
    kernel call."""
    with jaxdyn.config.override(cpu_kernels=False):
        assert CALL not in jax.jit(fn).lower(*args).as_text()
        return jax.jit(fn)(*args)


# talos_full (humanoid) is slow: every joint kind, a floating base among them, is the
# all_kinds tree, which also takes the batching checks (nested vmap, axes, bias forces)
@pytest.mark.parametrize("name", ["all_kinds", pytest.param("humanoid", marks=pytest.mark.slow)])
def test_kernel_equals_xla_and_pinocchio(cases, name):
    case = cases[name]
    model = case.model
    if name == "all_kinds":
        assert set(model.topo.kind.tolist()) == {0, 1, 2}
    q, v, a, f = _states(model, 37, 0)  # 37: no whole block of 8 (float64) / 16 (float32)
    assert R.kernel_usable(model, q.dtype)
    g, gf = _batched(model), _batched(model, fext=True)
    assert CALL in g.lower(q, v, a).as_text() and CALL in gf.lower(q, v, a, f).as_text()
    ref = _xla(jax.vmap(lambda q, v, a: jaxdyn.rnea(model, q, v, a)), q, v, a)
    reff = _xla(jax.vmap(lambda q, v, a, f: jaxdyn.rnea(model, q, v, a, f)), q, v, a, f)
    _close(g(q, v, a), ref, 1e-12)
    _close(gf(q, v, a, f), reff, 1e-12)
    # Pinocchio's rnea (with and without external forces) at the case's states
    one = jax.jit(lambda q, v, a, f: jaxdyn.rnea(model, q, v, a, f))
    zero = np.zeros((model.nb, 6))
    assert CALL in one.lower(q[0], v[0], a[0], f[0]).as_text()
    pm, c = case.pin_model, case.conv
    for s in case.states:
        pd = pm.createData()
        pq, pv, pa = c.q_to_pin(s["q"]), c.v_to_pin(s["v"]), c.v_to_pin(s["a"])
        want = c.v_from_pin(pin.rnea(pm, pd, pq, pv, pa).copy())
        _close(one(s["q"], s["v"], s["a"], zero), want, 1e-10)
        want = c.v_from_pin(pin.rnea(pm, pd, pq, pv, pa, c.f_ext_to_pin(s["f_ext"])).copy())
        _close(one(s["q"], s["v"], s["a"], s["f_ext"]), want, 1e-10)
    # a single evaluation (one narrow block), jitted and eagerly; external forces unbatched
    _close(one(q[5], v[5], a[5], f[5]), reff[5], 1e-12)
    _close(jaxdyn.rnea(model, q[5], v[5], a[5]), ref[5], 1e-12)
    h = jax.jit(jax.vmap(lambda q, v: jaxdyn.rnea(model, q, v, a[0], f[0])))
    want = _xla(jax.vmap(lambda q, v: jaxdyn.rnea(model, q, v, a[0], f[0])), q, v)
    _close(h(q, v), want, 1e-12)
    # the samples left after the whole blocks of 8 lanes: narrow blocks of 2
    for n in (2, 10):
        _close(g(q[:n], v[:n], a[:n]), ref[:n], 1e-12)
    # the model passed in (its leaves operands of the call) instead of closed over
    p = jax.jit(jax.vmap(jaxdyn.rnea, in_axes=(None, 0, 0, 0, 0)))
    _close(p(model, q, v, a, f), reff, 1e-12)
    # float32: 16 lanes, as accurate as XLA's float32 code
    q32, v32, a32, f32 = (x.astype(jnp.float32) for x in (q, v, a, f))
    got32 = gf(q32, v32, a32, f32)
    assert got32.dtype == jnp.float32
    x32 = _xla(jax.vmap(lambda q, v, a, f: jaxdyn.rnea(model, q, v, a, f)), q32, v32, a32, f32)
    scale = float(np.abs(np.asarray(reff)).max())
    err_x = float(np.abs(np.asarray(x32) - np.asarray(reff)).max()) / scale
    tol32 = max(2 * err_x, 1e-5)
    _close(got32, reff, tol32)
    for n in (3, 20):
        _close(gf(q32[:n], v32[:n], a32[:n], f32[:n]), reff[:n], tol32)
    if name == "all_kinds":
        # nested vmap, a batch axis that is not the first
        sh = (3, 4)
        nested = jax.jit(jax.vmap(jax.vmap(lambda q, v, a: jaxdyn.rnea(model, q, v, a))))
        args = (x[:12].reshape(*sh, -1) for x in (q, v, a))
        _close(nested(*args), ref[:12].reshape(*sh, -1), 1e-12)
        k = jax.jit(jax.vmap(lambda q, v, a: jaxdyn.rnea(model, q, v, a), in_axes=1))
        _close(k(q[:8].T, v[:8].T, a[:8].T), ref[:8], 1e-12)
        # bias and gravity forces go through the kernel too
        b = jax.jit(jax.vmap(lambda q, v: jaxdyn.bias_forces(model, q, v)))
        assert CALL in b.lower(q, v).as_text()
        _close(b(q, v), _xla(jax.vmap(lambda q, v: R.bias_forces(model, q, v)), q, v), 1e-12)
        gr = jax.jit(lambda q: jaxdyn.gravity_forces(model, q))
        _close(gr(q[3]), R.gravity_forces_numpy(model, np.asarray(q[3])), 1e-12)


def test_kernel_armature_several_roots():
    tree = all_kinds_tree(RANDOM_ALL_KINDS[1]).model
    arm = np.random.default_rng(4).uniform(0.01, 0.5, tree.nv)
    for model in (tree.with_armature(arm), robots.load("baxter")):
        assert model.armature is not None or int(np.sum(model.topo.parent < 0)) > 1
        q, v, a, f = _states(model, 11, 1)
        gf = _batched(model, fext=True)
        assert CALL in gf.lower(q, v, a, f).as_text()
        fn = jax.vmap(lambda q, v, a, f: jaxdyn.rnea(model, q, v, a, f))
        _close(gf(q, v, a, f), _xla(fn, q, v, a, f), 1e-12)


def test_kernel_derivatives(cases):
    model = cases["all_kinds"].model
    q, v, a, f = _states(model, 3, 2)

    def loss(q, v, a, f, model=model):
        return jnp.sum(
            jnp.sin(jax.vmap(jaxdyn.rnea, in_axes=(None, 0, 0, 0, 0))(model, q, v, a, f))
        )

    args = (q, v, a, f)
    # the analytic rule (IDSVA, its own primal) as with the kernel off
    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))
    want = _xla(jax.grad(loss, argnums=(0, 1, 2, 3)), *args)
    for x, y in zip(grad(*args), want):
        _close(x, y, 1e-12)
    # plain autodiff (no analytic rules): through the kernel's XLA fallback
    with jaxdyn.derivatives.analytic_derivatives(False):
        jk = jax.jit(jax.jacfwd(lambda q, v: jaxdyn.rnea(model, q, v, a[0], f[0]), (0, 1)))
        got = jk(q[0], v[0])
        want = _xla(
            jax.jacfwd(lambda q, v: jaxdyn.rnea(model, q, v, a[0], f[0]), (0, 1)), q[0], v[0]
        )
    for x, y in zip(got, want):
        _close(x, y, 1e-12)
    # the model's tangents (masses): forward-mode autodiff of XLA's code
    import equinox as eqx

    def with_mass(mass):
        return loss(*args, model=eqx.tree_at(lambda m: m.mass, model, mass))

    dm = jax.jit(jax.grad(with_mass))
    dmw = _xla(jax.grad(with_mass), model.mass)
    _close(dm(model.mass), dmw, 1e-12)


@pytest.mark.slow
def test_kernel_batch_of_models(cases):
    import equinox as eqx

    model = cases["all_kinds"].model
    q, v, a, _ = _states(model, 4, 2)
    masses = model.mass[None] * jnp.linspace(0.5, 1.5, 4)[:, None]
    ms = [eqx.tree_at(lambda m: m.mass, model, m) for m in masses]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *ms)
    got = jax.jit(jax.vmap(jaxdyn.rnea))(stacked, q, v, a)
    for i in range(4):
        _close(got[i], _xla(jaxdyn.rnea, ms[i], q[i], v[i], a[i]), 1e-12)


def test_kernel_export_and_switch(cases):
    model = cases["all_kinds"].model
    q, v, a, _ = _states(model, 4, 2)
    g = _batched(model)
    with jaxdyn.value_checks.unchecked():
        exported = export.export(jax.jit(jax.vmap(lambda q, v, a: jaxdyn.rnea(model, q, v, a))))(
            q, v, a
        )
    assert CALL not in exported.mlir_module()
    _close(exported.call(q, v, a), g(q, v, a), 1e-12)
    with jaxdyn.config.override(cpu_kernels=False):
        assert not R.kernel_usable(model, q.dtype)
        assert CALL not in _batched(model).lower(q, v, a).as_text()
    # value checks still run before the kernel (the free joint's quaternion)
    qt = q.at[1, 3].set(2.0)
    with pytest.raises(Exception, match="rnea: a quaternion in q is not of unit norm"):
        jaxdyn.jit(jax.vmap(lambda q, v, a: jaxdyn.rnea(model, q, v, a)))(qt, v, a)


def test_kernels_under_disable_jit():
    """``jax.disable_jit`` (op by op): the kernels' primitives (RNEA's, CRBA's; Minv's shares
    CRBA's rules) evaluate XLA's code instead of compiling a program around themselves, which
    recursed."""
    model = all_kinds_tree(RANDOM_ALL_KINDS[0]).model
    q, v, a, f = (x[0] for x in _states(model, 1, 3))
    want = (jaxdyn.rnea(model, q, v, a, f), jaxdyn.crba(model, q))
    with jax.disable_jit():
        got = (jaxdyn.rnea(model, q, v, a, f), jaxdyn.crba(model, q))
    for x, y in zip(got, want):
        _close(x, y, 1e-12)

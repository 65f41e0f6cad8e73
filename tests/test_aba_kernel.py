"""``jaxdyn.aba`` on the CPU by its C kernel (:func:`jaxdyn.backend.aba_kernel.aba_kernel`)
against XLA's sweeps (:func:`jaxdyn.algorithms.aba.aba_world`, the code every other backend
runs) and against Pinocchio's ``aba``.

Every joint kind (a random tree with free, spherical, revolute and prismatic joints, massless
bodies and armature), several roots (baxter), a floating humanoid (talos_full); with and
without ``f_ext``; float64 to 1e-12 and float32 as accurate as XLA's float32 sweeps, of the
largest entry; batches that fill no whole block of vector lanes, nested ``vmap``, operands
batched on other axes or not at all, a single evaluation jitted and eager; derivatives (XLA's,
through the primitive's rule and through ``jaxdyn.aba``'s analytic one) and a batch of models
(slow); ``jax.export`` not holding the kernel's call; the switch ``cpu_kernels`` off and
``method="dense"`` (XLA's code).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from jax import export

import jaxdyn
from jaxdyn import shell
from jaxdyn.algorithms import aba as A
from jaxdyn.backend import ffi
from jaxdyn.interop.pinocchio import Converter, build_pinocchio_model

from _kernel_cases import close, configurations, kernel_models


def _xla(model, q, v, tau, f_ext=None):
    """XLA's sweeps of one sample (what aba computes without the kernel)."""
    model, q, _ = shell.prepare(model, "aba", q)
    return A._xla_aba(model, q, v, tau, f_ext)


def _inputs(model, n, seed, dtype=jnp.float64):
    rng = np.random.default_rng(seed)
    q = configurations(model, n, seed, dtype=dtype)
    v = jnp.asarray(rng.normal(size=(n, model.nv)), dtype)
    tau = jnp.asarray(rng.normal(size=(n, model.nv)), dtype)
    f_ext = jnp.asarray(rng.normal(size=(n, model.nb, 6)), dtype)
    return q, v, tau, f_ext


@pytest.fixture(scope="module")
def models():
    return kernel_models()


def _pinocchio(model, q, v, tau, f_ext=None):
    """Pinocchio's ``aba`` sample by sample (jaxdyn's model built in Pinocchio, independent
    of URDF parsing)."""
    pm = build_pinocchio_model(model)  # its armature included
    c = Converter(model, pm)
    pd = pm.createData()
    out = []
    for i in range(q.shape[0]):
        args = [c.q_to_pin(np.asarray(q[i])), c.v_to_pin(np.asarray(v[i]))]
        args.append(c.v_to_pin(np.asarray(tau[i])))
        if f_ext is not None:
            args.append(c.f_ext_to_pin(np.asarray(f_ext[i])))
        out.append(c.v_from_pin(pin.aba(pm, pd, *args).copy()))
    return np.stack(out)


# talos_full (humanoid) is slow: every joint kind, a floating base among them, is the
# all_kinds tree, which also takes the batching checks (nested vmap, axes, switch off)
@pytest.mark.parametrize(
    "name", ["all_kinds", "baxter", pytest.param("humanoid", marks=pytest.mark.slow)]
)
def test_kernel_equals_xla_and_pinocchio(models, name):
    model = models[name]
    if name == "all_kinds":
        assert set(model.topo.kind.tolist()) == {0, 1, 2} and model.armature is not None
    if name == "baxter":
        assert int(np.sum(model.topo.parent < 0)) > 1  # several roots
    q, v, tau, fe = _inputs(model, 37, 0)  # 37: no whole block of 8 (float64) or 16 lanes
    f = jax.jit(jax.vmap(lambda q, v, t, fe: jaxdyn.aba(model, q, v, t, fe)))
    g = jax.jit(jax.vmap(lambda q, v, t: jaxdyn.aba(model, q, v, t)))
    assert A.kernel_usable(model, q.dtype)
    assert "@" + ffi.ABA_TARGET in f.lower(q, v, tau, fe).as_text()  # its custom call
    ref_f = jax.jit(jax.vmap(lambda q, v, t, fe: _xla(model, q, v, t, fe)))(q, v, tau, fe)
    ref = jax.jit(jax.vmap(lambda q, v, t: _xla(model, q, v, t)))(q, v, tau)
    got, got_f = g(q, v, tau), f(q, v, tau, fe)
    close(got, ref, 1e-12)
    close(got_f, ref_f, 1e-12)
    # an independent oracle: Pinocchio's aba (C++), on a few samples
    close(got[:4], _pinocchio(model, q[:4], v[:4], tau[:4]), 1e-10)
    close(got_f[:4], _pinocchio(model, q[:4], v[:4], tau[:4], fe[:4]), 1e-10)
    # the model passed in (its leaves operands of the call) instead of closed over
    h = jax.jit(jax.vmap(jaxdyn.aba, in_axes=(None, 0, 0, 0, 0)))
    close(h(model, q, v, tau, fe), ref_f, 1e-12)
    # float32: 16 lanes, as accurate as XLA's sweeps in float32 (the humanoid's light fingers
    # give accelerations of 1e5, where both lose about 1e-4 of the largest)
    x32 = [a.astype(jnp.float32) for a in (q, v, tau)]
    got32 = g(*x32)
    assert got32.dtype == jnp.float32
    scale = max(1.0, float(np.abs(np.asarray(ref)).max()))
    with jaxdyn.config.override(cpu_kernels=False):
        xla32 = jax.jit(jax.vmap(lambda q, v, t: jaxdyn.aba(model, q, v, t)))(*x32)
    err_x = float(np.abs(np.asarray(xla32) - np.asarray(ref)).max()) / scale
    tol32 = max(2 * err_x, 1e-5)
    close(got32, ref, tol32)
    # a single evaluation, jitted and eagerly (one sample: one narrow block); "sweeps" too
    one = jax.jit(lambda q, v, t, fe: jaxdyn.aba(model, q, v, t, fe))
    assert "@" + ffi.ABA_TARGET in one.lower(q[5], v[5], tau[5], fe[5]).as_text()
    close(one(q[5], v[5], tau[5], fe[5]), ref_f[5], 1e-12)
    close(jaxdyn.aba(model, q[5], v[5], tau[5], method="sweeps"), ref[5], 1e-12)
    # the samples left after the whole blocks of 8 (16) lanes: narrow blocks of 2 (4)
    for n in (2, 10):
        close(f(q[:n], v[:n], tau[:n], fe[:n]), ref_f[:n], 1e-12)
    for n in (3, 20):
        close(g(*(a[:n] for a in x32)), ref[:n], tol32)
    if name == "all_kinds":
        # nested vmap, a batch axis other than the first, operands not batched (broadcast)
        r = lambda x: x[:12].reshape((3, 4) + x.shape[1:])  # noqa: E731
        n2 = jax.jit(jax.vmap(jax.vmap(lambda q, v, t, fe: jaxdyn.aba(model, q, v, t, fe))))
        close(n2(r(q), r(v), r(tau), r(fe)), r(ref_f), 1e-12)
        k = jax.jit(jax.vmap(lambda q, v, t: jaxdyn.aba(model, q, v, t), in_axes=(1, 0, 0)))
        close(k(q[:8].T, v[:8], tau[:8]), ref[:8], 1e-12)
        u = jax.jit(jax.vmap(lambda q, fe: jaxdyn.aba(model, q, v[0], tau[0], fe)))
        ref_u = jax.jit(jax.vmap(lambda q, fe: _xla(model, q, v[0], tau[0], fe)))(q[:9], fe[:9])
        close(u(q[:9], fe[:9]), ref_u, 1e-12)
        # the switch off, and method="dense": XLA's code, no custom call
        with jaxdyn.config.override(cpu_kernels=False):
            assert not A.kernel_usable(model, q.dtype)
            fx = jax.jit(jax.vmap(lambda q, v, t: jaxdyn.aba(model, q, v, t)))
            assert "@" + ffi.ABA_TARGET not in fx.lower(q, v, tau).as_text()
            close(fx(q, v, tau), ref, 1e-12)
        dense = jax.jit(lambda q, v, t: jaxdyn.aba(model, q, v, t, method="dense"))
        assert "@" + ffi.ABA_TARGET not in dense.lower(q[0], v[0], tau[0]).as_text()


def test_kernel_derivatives(models):
    model = models["all_kinds_small"]
    assert set(model.topo.kind.tolist()) == {0, 1, 2} and A.kernel_usable(model, jnp.float64)
    q, v, tau, fe = _inputs(model, 3, 2)
    # the primitive's derivatives (aba_plain: JAX differentiates it, the kernel's rule takes
    # XLA's code): equal to differentiating XLA's code, in every operand
    fk = lambda q, v, t, fe: A.aba_plain(model, q, v, t, fe)  # noqa: E731
    fx = lambda q, v, t, fe: _xla(model, q, v, t, fe)  # noqa: E731
    jac = lambda f: jax.jit(jax.vmap(jax.jacfwd(f, argnums=(0, 1, 2, 3))))  # noqa: E731
    for a, b in zip(jac(fk)(q, v, tau, fe), jac(fx)(q, v, tau, fe)):
        close(a, b, 1e-11)

    # jaxdyn.aba's analytic rule, and the model's parameters through the primitive's rule
    # (the mass tangent of _model_tangent), against the switch off
    def loss(m, q, v, t, fe):
        return jnp.sum(jaxdyn.aba(m, q, v, t, fe) ** 2)

    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    got = grad(model, q[0], v[0], tau[0], fe[0])
    with jaxdyn.config.override(cpu_kernels=False):
        ref = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(model, q[0], v[0], tau[0], fe[0])
    close(got[0].mass, ref[0].mass, 1e-10)
    close(got[1], ref[1], 1e-10)
    close(got[2], ref[2], 1e-10)


@pytest.mark.slow
def test_kernel_batch_of_models(models):
    import equinox as eqx

    model = models["all_kinds_small"]
    q, v, tau, _ = _inputs(model, 4, 2)
    # a batch of models (domain randomisation): XLA's code, batched
    masses = model.mass[None] * jnp.linspace(0.5, 1.5, 4)[:, None]
    ms = [eqx.tree_at(lambda m: m.mass, model, m) for m in masses]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *ms)
    got = jax.jit(jax.vmap(jaxdyn.aba))(stacked, q, v, tau)
    xla_one = jax.jit(_xla)
    for i in range(4):
        close(got[i], xla_one(ms[i], q[i], v[i], tau[i]), 1e-12)


def test_kernel_export_and_checks(models):
    model = models["all_kinds_small"]
    q, v, tau, _ = _inputs(model, 4, 2)
    # jax.export: a serialized program must not name this process's kernel
    with jaxdyn.value_checks.unchecked():
        f = jax.jit(jax.vmap(lambda q, v, t: jaxdyn.aba(model, q, v, t)))
        exported = export.export(f)(q, v, tau)
    assert "@" + ffi.ABA_TARGET not in exported.mlir_module()
    close(exported.call(q, v, tau), f(q, v, tau), 1e-12)
    # value checks still run before the kernel (the free joint's quaternion)
    qt = q.at[1, 3].set(2.0)
    with pytest.raises(Exception, match="aba: a quaternion in q is not of unit norm"):
        jaxdyn.jit(jax.vmap(lambda q, v, t: jaxdyn.aba(model, q, v, t)))(qt, v, tau)

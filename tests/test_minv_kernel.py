"""``jaxdyn.minv`` on the CPU by its C kernel (:func:`jaxdyn.backend.crba_kernel.minv_kernel`)
against XLA's sweeps (:func:`jaxdyn.algorithms.minv.minv_world`, the code every other backend
runs) and against ``inv(crba)``; Pinocchio's ``computeMinverse`` is the oracle of both in
``test_pinocchio.py``, and ``test_aba.py`` checks ``minv M = I`` (both now run through the
kernel).

Every joint kind (a random tree with free, spherical, revolute and prismatic joints, massless
bodies and armature), several roots (baxter), a floating humanoid (talos_full); float64 to
1e-12 and float32 to 1e-4 of the largest entry; batches that fill no whole block of vector
lanes, nested ``vmap``, a single evaluation, the model closed over or passed in; derivatives
(XLA's) and a batch of models (slow); ``jax.export`` not holding the kernel's call; the switch
``cpu_kernels`` off (XLA's code).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import jaxdyn
from jaxdyn import shell
from jaxdyn.algorithms import kinematics as kin
from jaxdyn.algorithms import minv as Mi
from jaxdyn.backend import ffi

from _kernel_cases import close, configurations, kernel_models


def _xla(model, q):
    """XLA's sweeps of one sample (what minv computes without the kernel)."""
    model, q, _ = shell.prepare(model, "minv", q)
    return Mi.minv_world(model, kin.world_state(model, q, centered=True))


@pytest.fixture(scope="module")
def models():
    return kernel_models()


# talos_full (humanoid) is slow: every joint kind, a floating base among them, is the
# all_kinds tree, which also takes the batching checks (nested vmap, axes, switch off)
@pytest.mark.parametrize(
    "name", ["all_kinds", "baxter", pytest.param("humanoid", marks=pytest.mark.slow)]
)
def test_kernel_equals_xla_and_inverts_crba(models, name):
    model = models[name]
    if name == "all_kinds":
        assert set(model.topo.kind.tolist()) == {0, 1, 2} and model.armature is not None
    if name == "baxter":
        assert int(np.sum(model.topo.parent < 0)) > 1  # several roots
    q = configurations(model, 37, 0)  # 37: no whole block of 8 (float64) or 16 (float32) lanes
    f = jax.jit(jax.vmap(lambda q: jaxdyn.minv(model, q)))
    assert Mi.kernel_usable(model, q.dtype)
    assert "@" + ffi.MINV_TARGET in f.lower(q).as_text()  # its custom call
    ref = jax.jit(jax.vmap(lambda q: _xla(model, q)))(q)
    got = f(q)
    close(got, ref, 1e-12)
    # an independent oracle: the inverse of CRBA's M (symmetric, as Pinocchio's)
    M = np.asarray(jax.jit(jax.vmap(lambda q: jaxdyn.crba(model, q)))(q))
    close(got, np.linalg.inv(M), 1e-10)
    np.testing.assert_array_equal(np.asarray(got), np.swapaxes(np.asarray(got), -1, -2))
    # the model passed in (its leaves operands of the call) instead of closed over
    g = jax.jit(jax.vmap(jaxdyn.minv, in_axes=(None, 0)))
    close(g(model, q), ref, 1e-12)
    # float32: 16 lanes, as accurate as XLA's sweeps in float32 (the humanoid's light fingers
    # give entries of 1e5, where both lose about 3e-4 of the largest)
    q32 = q.astype(jnp.float32)
    got32 = f(q32)
    assert got32.dtype == jnp.float32
    scale = float(np.abs(np.asarray(ref)).max())
    with jaxdyn.config.override(cpu_kernels=False):
        x32 = jax.jit(jax.vmap(lambda q: jaxdyn.minv(model, q)))(q32)
    err_x = float(np.abs(np.asarray(x32) - np.asarray(ref)).max()) / scale
    tol32 = max(2 * err_x, 1e-5)
    close(got32, ref, tol32)
    # a single evaluation, jitted and eagerly (one sample: one narrow block); "sweeps" too
    one = jax.jit(lambda q: jaxdyn.minv(model, q))
    assert "@" + ffi.MINV_TARGET in one.lower(q[5]).as_text()
    close(one(q[5]), ref[5], 1e-12)
    close(jaxdyn.minv(model, q[5], method="sweeps"), ref[5], 1e-12)
    # the samples left after the whole blocks of 8 (16) lanes: narrow blocks of 2 (4)
    for n in (2, 10):
        close(f(q[:n]), ref[:n], 1e-12)
    for n in (3, 20):
        close(f(q32[:n]), ref[:n], tol32)
    if name == "all_kinds":
        q34 = q[:12].reshape(3, 4, -1)
        h = jax.jit(jax.vmap(jax.vmap(lambda q: jaxdyn.minv(model, q))))
        close(h(q34), ref[:12].reshape(3, 4, model.nv, model.nv), 1e-12)
        k = jax.jit(jax.vmap(lambda q: jaxdyn.minv(model, q), in_axes=1))
        close(k(q[:8].T), ref[:8], 1e-12)
        # the switch off: XLA's code, no custom call
        with jaxdyn.config.override(cpu_kernels=False):
            assert not Mi.kernel_usable(model, q.dtype)
            fx = jax.jit(jax.vmap(lambda q: jaxdyn.minv(model, q)))
            assert "@" + ffi.MINV_TARGET not in fx.lower(q).as_text()
            close(fx(q), ref, 1e-12)


@pytest.mark.slow
def test_kernel_derivatives_and_batch_of_models(models):
    model = models["all_kinds_small"]
    assert set(model.topo.kind.tolist()) == {0, 1, 2} and Mi.kernel_usable(model, jnp.float64)
    q = configurations(model, 4, 2)
    # derivatives are XLA's sweeps': equal to differentiating XLA's code
    jk = jax.jit(jax.vmap(jax.jacfwd(lambda q: jaxdyn.minv(model, q))))(q)
    jx = jax.jit(jax.vmap(jax.jacfwd(lambda q: _xla(model, q))))(q)
    close(jk, jx, 1e-11)
    # a batch of models (domain randomisation): XLA's code, batched
    import equinox as eqx

    masses = model.mass[None] * jnp.linspace(0.5, 1.5, 4)[:, None]
    ms = [eqx.tree_at(lambda m: m.mass, model, m) for m in masses]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *ms)
    got = jax.jit(jax.vmap(jaxdyn.minv))(stacked, q)
    xla_one = jax.jit(_xla)
    for i in range(4):
        close(got[i], xla_one(ms[i], q[i]), 1e-12)


def test_kernel_export_and_checks(models):
    model = models["all_kinds_small"]
    q = configurations(model, 4, 2)
    # jax.export: a serialized program must not name this process's kernel
    with jaxdyn.value_checks.unchecked():
        f = jax.jit(jax.vmap(lambda q: jaxdyn.minv(model, q)))
        exported = export.export(f)(q)
    assert "@" + ffi.MINV_TARGET not in exported.mlir_module()
    close(exported.call(q), f(q), 1e-12)
    # value checks still run before the kernel (the free joint's quaternion)
    qt = q.at[1, 3].set(2.0)
    with pytest.raises(Exception, match="minv: a quaternion in q is not of unit norm"):
        jaxdyn.jit(jax.vmap(lambda q: jaxdyn.minv(model, q)))(qt)

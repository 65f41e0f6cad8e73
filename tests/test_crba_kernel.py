"""``jaxdyn.crba`` on the CPU by its C kernel (:func:`jaxdyn.backend.crba_kernel.crba_kernel`)
against XLA's CRBA (:func:`jaxdyn.algorithms.crba.crba_world`, the code every other backend
runs; Pinocchio's CRBA is the oracle of both in ``test_rnea.py`` and ``test_armature.py``,
which now run through the kernel too).

Every joint kind (a random tree with free, spherical, revolute and prismatic joints, massless
bodies and armature), several roots (baxter), a floating humanoid (talos_full); float64 to
1e-13 and float32 to 1e-5 of the largest entry; batches that fill no whole block of vector
lanes, nested ``vmap``, a single evaluation, the model closed over or passed in; angles far
from zero (the kernel's own sine and cosine); derivatives (XLA's); a batch of models; the
program holding the kernel's call, and ``jax.export`` not holding it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import jaxdyn
from jaxdyn import shell
from jaxdyn.algorithms import crba as C
from jaxdyn.algorithms import kinematics as kin
from jaxdyn.backend import ffi

from _kernel_cases import close, configurations, kernel_models


def _xla(model, q):
    """XLA's CRBA of one sample (what crba computes without the kernel)."""
    model, q, _ = shell.prepare(model, "crba", q)
    return C.crba_world(model, kin.world_state(model, q, centered=True))


@pytest.fixture(scope="module")
def models():
    return kernel_models()


def test_kernel_is_compiled():
    # CI and every machine with a C compiler run the kernel; without one crba falls back to
    # XLA's code (the status says why), which this suite would then test in its place
    assert ffi.available(), ffi.status()
    assert ffi.kernels_available(), ffi.kernel_status()


def test_kernels_compiled_for_this_cpu_else_portable(tmp_path, monkeypatch):
    """The kernels' library is compiled for the running CPU's x86-64 level alone where
    ``/proc/cpuinfo`` tells it (the clone that the portable build's dispatch would pick), with
    the portable build second; a compiler that refuses the first flags builds with the next
    (here the handlers' library, for a fast compile), under the same file name."""
    level = ffi._x86_level()
    flags = ffi.KERNELS.flags()
    if level is None:
        assert flags == [["-O3"]]
    else:
        assert level in ("x86-64", "x86-64-v3", "x86-64-v4")
        assert flags == [["-O3", f"-march={level}", "-DJAXDYN_ONE_TARGET"], ["-O3"]]
    assert ffi.HANDLERS.flags() == [["-O2"]]
    monkeypatch.setattr(ffi.HANDLERS, "flags", lambda: [["-march=no-such-cpu"], ["-O0"]])
    lib = ffi.build(directory=tmp_path)
    assert lib.parent == tmp_path and [p.name for p in tmp_path.iterdir()] == [lib.name]
    monkeypatch.setattr(ffi.HANDLERS, "flags", lambda: [["-march=no-such-cpu"]])
    with pytest.raises(RuntimeError, match="no-such-cpu"):
        ffi.build(directory=tmp_path / "other")
    assert not list((tmp_path / "other").iterdir())


def test_kernel_library_compiled_in_parts_and_linked(tmp_path):
    """The kernels' library is compiled as ``ffi.KERNEL_PARTS`` objects side by side (each
    with its ``JAXDYN_PART``), then linked into one library (here a small source of the same
    layout: each part defines one function, part 0 one that calls the others); a compiler that
    refuses the first flags builds with the next; a part that fails to compile is named in the
    error and leaves no file behind."""
    import ctypes

    src = tmp_path / "parts.c"
    src.write_text(
        "#if JAXDYN_PART == 1\nint one(void) { return 1; }\n#endif\n"
        "#if JAXDYN_PART == 2\nint two(void) { return 2; }\n#endif\n"
        "#if JAXDYN_PART == 0\nextern int one(void), two(void);\n"
        "int all(void) { return 10 * one() + two(); }\n#endif\n"
    )
    assert ffi.KERNEL_PARTS == 3
    lib = ffi._Library("parts", src, (), kernels=True)
    exe, header = ffi._compiler(None)
    out = tmp_path / "out" / "parts.so"
    out.parent.mkdir()
    flags = [["-march=no-such-cpu"], ["-O1"]]
    ffi._compile(lib, exe, header.parents[3], flags, str(tmp_path / "out" / "tmp.so"), out)
    assert ctypes.CDLL(str(out)).all() == 12
    assert sorted(p.name for p in out.parent.iterdir()) == ["parts.so"]  # no objects left
    src.write_text(src.read_text().replace("return 2;", "return 2"))  # part 2 fails
    with pytest.raises(RuntimeError, match="JAXDYN_PART=2"):
        ffi._compile(
            lib, exe, header.parents[3], [["-O1"]], str(tmp_path / "t2.so"), out.parent / "x.so"
        )
    assert sorted(p.name for p in out.parent.iterdir()) == ["parts.so"]
    assert not list(tmp_path.glob("t2.so*"))


def test_trace_takes_the_kernel_before_its_build_ends(models, monkeypatch):
    """A trace takes the kernel while its library is still being built
    (:func:`~jaxdyn.backend.ffi.kernels_expected`: it does not wait); the lowering waits for
    the build and lowers XLA's code where the build failed, with the same values."""
    model = models["baxter"]
    q = configurations(model, 9, 5)
    ref = jax.jit(jax.vmap(lambda q: _xla(model, q)))(q)
    monkeypatch.setattr(ffi, "kernels_expected", lambda: True)
    monkeypatch.setattr(ffi, "kernels_available", lambda: False)
    f = jax.jit(jax.vmap(lambda q: jaxdyn.crba(model, q)))
    traced = f.trace(q)
    assert "jaxdyn_crba[" in str(traced.jaxpr)  # the kernel's primitive, traced
    lowered = traced.lower()
    assert "@" + ffi.CRBA_TARGET not in lowered.as_text()  # lowered as XLA's code
    close(lowered.compile()(q), ref, 1e-13)


# talos_full (humanoid) is slow: every joint kind, a floating base among them, is the
# all_kinds tree, which also takes the batching checks (nested vmap, axes, switch off)
@pytest.mark.parametrize(
    "name", ["all_kinds", "baxter", pytest.param("humanoid", marks=pytest.mark.slow)]
)
def test_kernel_equals_xla(models, name):
    model = models[name]
    kinds = set(model.topo.kind.tolist())
    if name == "all_kinds":
        assert kinds == {0, 1, 2} and model.armature is not None
        assert np.abs(np.asarray(model.dof_axis)[:, 3:]).sum() > 0  # prismatic joints
    if name == "baxter":
        assert int(np.sum(model.topo.parent < 0)) > 1  # several roots
    q = configurations(model, 37, 0)  # 37: no whole block of 8 (float64) or 16 (float32) lanes
    f = jax.jit(jax.vmap(lambda q: jaxdyn.crba(model, q)))
    assert C.kernel_usable(model, q.dtype)
    assert "@" + ffi.CRBA_TARGET in f.lower(q).as_text()  # its custom call
    ref = jax.jit(jax.vmap(lambda q: _xla(model, q)))(q)
    close(f(q), ref, 1e-13)
    # the model passed in (its leaves operands of the call) instead of closed over
    g = jax.jit(jax.vmap(jaxdyn.crba, in_axes=(None, 0)))
    close(g(model, q), ref, 1e-13)
    # float32: 16 lanes
    q32 = q.astype(jnp.float32)
    close(f(q32), ref, 2e-5)
    # a single evaluation, eagerly (one sample: one narrow block)
    close(jaxdyn.crba(model, q[5]), ref[5], 1e-13)
    # the samples left after the whole blocks of 8 (16) lanes take the kernel's narrow
    # blocks of 2 (4) lanes when they are that few: 2 and 10 float64 samples, 3 and 20
    # float32 ones (narrow blocks only, whole blocks then one narrow)
    for n in (2, 10):
        close(f(q[:n]), ref[:n], 1e-13)
    for n in (3, 20):
        close(f(q32[:n]), ref[:n], 2e-5)
    if name == "all_kinds":
        # nested vmap (batch axes (3, 4) flattened by the kernel) and a batch on axis 1
        q34 = q[:12].reshape(3, 4, -1)
        h = jax.jit(jax.vmap(jax.vmap(lambda q: jaxdyn.crba(model, q))))
        close(h(q34), ref[:12].reshape(3, 4, model.nv, model.nv), 1e-13)
        k = jax.jit(jax.vmap(lambda q: jaxdyn.crba(model, q), in_axes=1))
        close(k(q[:8].T), ref[:8], 1e-13)
        # angles far from zero: the kernel's sine and cosine against XLA's
        qb = configurations(model, 16, 1, scale=300.0)
        close(f(qb), jax.jit(jax.vmap(lambda q: _xla(model, q)))(qb), 1e-12)


def test_kernel_derivatives_batch_of_models_export_checks(models):
    model = models["all_kinds_small"]
    assert set(model.topo.kind.tolist()) == {0, 1, 2} and C.kernel_usable(model, jnp.float64)
    q = configurations(model, 8, 2)
    # derivatives are XLA's CRBA's: equal to differentiating XLA's code
    jk = jax.jit(jax.vmap(jax.jacfwd(lambda q: jaxdyn.crba(model, q))))(q)
    jx = jax.jit(jax.vmap(jax.jacfwd(lambda q: _xla(model, q))))(q)
    close(jk, jx, 1e-12)
    loss = lambda m, q: jnp.sum(jaxdyn.crba(m, q) ** 2)  # noqa: E731
    gk = jax.jit(jax.grad(loss))(model, q[0])
    gx = jax.jit(jax.grad(lambda m, q: jnp.sum(_xla(m, q) ** 2)))(model, q[0])
    for a, b in zip(jax.tree.leaves(gk), jax.tree.leaves(gx)):
        close(a, b, 1e-12)
    # a batch of models (domain randomisation): XLA's code, batched
    masses = model.mass[None] * jnp.linspace(0.5, 1.5, 8)[:, None]
    ms = jax.tree.map(lambda *x: jnp.stack(x), *[_with_mass(model, m) for m in masses])
    got = jax.jit(jax.vmap(jaxdyn.crba))(ms, q)
    xla_one = jax.jit(_xla)  # one program for the 8 models (op by op: hundreds of small ones)
    for i in range(8):
        close(got[i], xla_one(_with_mass(model, masses[i]), q[i]), 1e-13)
    # jax.export: a serialized program must not name this process's handler
    # (value checks are host callbacks there, which jax.export refuses: left out)
    with jaxdyn.value_checks.unchecked():
        f = jax.jit(jax.vmap(lambda q: jaxdyn.crba(model, q)))
        exported = export.export(f)(q)
    assert "@" + ffi.CRBA_TARGET not in exported.mlir_module()
    close(exported.call(q), f(q), 1e-13)
    # value checks still run before the kernel (the free joint's quaternion)
    qt = q.at[5, 3].set(2.0)
    with pytest.raises(Exception, match="crba: a quaternion in q is not of unit norm"):
        jaxdyn.jit(jax.vmap(lambda q: jaxdyn.crba(model, q)))(qt)


def _with_mass(model, mass):
    import equinox as eqx

    return eqx.tree_at(lambda m: m.mass, model, mass)


#: a fixed-base chain whose revolute joints turn about an axis of their own frame (the
#: kernels' principal-axis case: the parent's rotation with two columns rotated), every axis
#: and sign, the root one included, beside a tilted revolute and a prismatic joint along an
#: axis (the general case)
_PRINCIPAL = """<robot name="principal">
  <link name="base"/>
  {links}
  {joints}
</robot>"""
_AXES = ("-1 0 0", "0 1 0", "0 0 -1", "1 0 0", "0 -1 0", "0 0 1", "0 0.6 0.8", "0 0 -1")


def _principal_model():
    links, joints = [], []
    for i, axis in enumerate(_AXES):
        links.append(
            f'<link name="l{i}"><inertial><origin xyz="0.05 {0.02 * i} -0.1" rpy="0.1 0 0.2"/>'
            f'<mass value="{1.0 + 0.3 * i}"/><inertia ixx="0.02" ixy="0.001" ixz="0" '
            f'iyy="0.025" iyz="0.002" izz="0.015"/></inertial></link>'
        )
        kind = "prismatic" if i == len(_AXES) - 1 else "revolute"
        limit = '<limit lower="-1" upper="1" effort="1" velocity="1"/>'
        rpy = "0.3 -0.2 0.5" if i == 6 else "0 0 0"
        joints.append(
            f'<joint name="j{i}" type="{kind}"><parent link="{"base" if i == 0 else f"l{i - 1}"}"/>'
            f'<child link="l{i}"/><origin xyz="0.1 0 {0.2 if i else 0}" rpy="{rpy}"/>'
            f'<axis xyz="{axis}"/>{limit}</joint>'
        )
    return jaxdyn.load_urdf(_PRINCIPAL.format(links="".join(links), joints="".join(joints)))


def test_principal_axis_joints_match_xla():
    """Joints about +-e_k of their own frame (the kernels' rotation of two of the parent's
    columns, the root's rotation written directly) give XLA's CRBA, RNEA, ABA and Minv, batched
    and through ``compile_for_latency(dispatch="native")``, at angles far from zero."""
    model = _principal_model()
    q = configurations(model, 5, 7, scale=4.0)
    v = jnp.linspace(-1.0, 1.0, 5 * model.nv).reshape(5, model.nv)
    calls = {
        "crba": lambda m, q, v: jaxdyn.crba(m, q),
        "minv": lambda m, q, v: jaxdyn.minv(m, q),
        "rnea": lambda m, q, v: jaxdyn.rnea(m, q, v, 0.5 * v),
        "aba": lambda m, q, v: jaxdyn.aba(m, q, v, 0.5 * v),
    }
    for name, f in calls.items():
        got = jax.jit(jax.vmap(f, in_axes=(None, 0, 0)))(model, q, v)
        with jaxdyn.config.override(cpu_kernels=False):
            want = jax.jit(jax.vmap(f, in_axes=(None, 0, 0)))(model, q, v)
        close(got, want, 1e-12)
        args = (np.asarray(q[0]),) if name in ("crba", "minv") else (q[0], v[0], 0.5 * v[0])
        native = jaxdyn.compile_for_latency(
            getattr(jaxdyn, name), model, *[np.asarray(a) for a in args], dispatch="native"
        )
        close(native(*[np.asarray(a) for a in args]), want[0], 1e-12)

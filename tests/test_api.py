"""The public API of ``jaxdyn``: every public name bound once, and the top-level functions that
take a Model or a ClusterModel dispatch on its type."""

from __future__ import annotations

import ast
import types
from collections import Counter
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxdyn
from jaxdyn import clusters as C
from jaxdyn import eager, robots, value_checks
from jaxdyn.algorithms import configuration as plain
from jaxdyn.clusters import robots as crobots


def test_all_names_bound_once():
    src = Path(jaxdyn.__file__).read_text()
    bound = Counter()
    for node in ast.parse(src).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            bound.update(t.id for t in node.targets if isinstance(t, ast.Name))
    bound.update(list(jaxdyn._LAZY))  # imported on first use (PEP 562 __getattr__)
    twice = sorted(n for n, c in bound.items() if c > 1)
    assert twice == [], f"bound more than once in jaxdyn/__init__.py: {twice}"
    assert len(jaxdyn.__all__) == len(set(jaxdyn.__all__))
    for name in jaxdyn.__all__:
        assert bound[name] == 1, f"{name} is in __all__ but not bound in __init__.py"
        getattr(jaxdyn, name)
    # no two public names for one object
    objs = Counter(id(getattr(jaxdyn, n)) for n in jaxdyn.__all__)
    dup = sorted(n for n in jaxdyn.__all__ if objs[id(getattr(jaxdyn, n))] > 1)
    assert dup == [], f"two public names for one object: {dup}"
    # every public non-module attribute is listed
    public = {
        k
        for k, v in vars(jaxdyn).items()
        if not k.startswith("_") and not isinstance(v, types.ModuleType)
    }
    assert public <= set(jaxdyn.__all__), sorted(public - set(jaxdyn.__all__))


def test_jax_version_floor():
    """jaxdyn refuses an older JAX at import, with the bound pyproject.toml gives pip."""
    import re
    import subprocess
    import sys

    from jaxdyn import _versions

    text = (Path(jaxdyn.__file__).parents[1] / "pyproject.toml").read_text()
    for pkg in ("jax", "jaxlib"):
        (bound,) = re.findall(rf'"{pkg}>=([0-9.]+)"', text)
        assert _versions.release(bound) == _versions.MIN_JAX, (pkg, bound)
    assert _versions.release(jax.__version__) >= _versions.MIN_JAX
    for ok in ("0.6.2", "0.6.3.dev20250701", "0.10.2", "1", "local-build"):
        _versions.check("jax", ok)
    for old in ("0.6.1", "0.6", "0.4.30"):
        with pytest.raises(ImportError, match=rf"jaxlib >= 0\.6\.2, found jaxlib {old}"):
            _versions.check("jaxlib", old)
    for pkg in ("jax", "jaxlib.version"):  # at import, for each of the two
        code = f"import {pkg}; {pkg}.__version__ = '0.4.30'; import jaxdyn"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode != 0, pkg
        name = pkg.split(".")[0]  # jaxdyn reads jaxlib's version from jaxlib.version
        assert f"jaxdyn needs {name} >= 0.6.2, found {name} 0.4.30" in out.stderr, out.stderr


def test_bound_objects():
    """The analytic-derivative rnea / aba, and the URDF(+) loader."""
    assert jaxdyn.rnea is jaxdyn.derivatives.rnea and jaxdyn.aba is jaxdyn.derivatives.aba
    assert jaxdyn.load_urdf is jaxdyn.io.load_urdf
    assert not hasattr(jaxdyn, "load_cluster_urdf")
    assert isinstance(jaxdyn.load_urdf(str(crobots.path("four_bar"))), C.ClusterModel)
    assert isinstance(jaxdyn.load_urdf(str(robots.resolve("arm7")[0])), jaxdyn.Model)


def test_configuration_dispatch_plain():
    model = robots.load("quad12")
    key = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(
        jaxdyn.neutral_configuration(model), plain.neutral_configuration(model)
    )
    q = jaxdyn.random_configuration(model, key, lower=-0.5, upper=0.5)
    np.testing.assert_array_equal(q, plain.random_configuration(model, key, -0.5, 0.5))
    assert q.shape == (model.nq,)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(q)[3:7]), 1.0, rtol=1e-12)


def test_configuration_dispatch_cluster():
    model = crobots.load("four_bar")
    assert isinstance(model, C.ClusterModel)
    key = jax.random.PRNGKey(5)
    q0 = jaxdyn.neutral_configuration(model)
    np.testing.assert_array_equal(q0, C.neutral_configuration(model))
    assert q0.shape == (model.nq,)
    q = jaxdyn.random_configuration(model, key, scale=0.3)
    np.testing.assert_array_equal(q, C.random_configuration(model, key, scale=0.3))
    # batched and jitted, the model as an argument
    keys = jax.random.split(key, 2)
    qs = jax.jit(jax.vmap(jaxdyn.random_configuration, (None, 0)))(model, keys)
    ref = np.stack([C.random_configuration(model, k) for k in keys])
    np.testing.assert_allclose(qs, ref, rtol=1e-10, atol=1e-12)


#: programs XLA gave while ``_RECORDING``: compiled, or read back from the test session's
#: persistent cache (``tests/conftest.py``; JAX's backend-compile event times both), one event
#: per program (one listener for the process: older JAX cannot unregister one)
_COMPILES, _RECORDING = [], []


def _count_compiles(event, duration, **kwargs):
    if _RECORDING and event == "/jax/core/compile/backend_compile_duration":
        _COMPILES.append(kwargs.get("fun_name", "?"))


jax.monitoring.register_event_duration_secs_listener(_count_compiles)


def test_eager_calls_run_one_compiled_program():
    """A public algorithm called outside any trace runs as one compiled program (run op by op,
    each of its hundreds of operations would be compiled on the first call): the result is
    ``jax.jit``'s, a second call with new values of the same shapes compiles nothing, and
    ``jax.disable_jit`` still runs it op by op (to rounding: XLA fuses differently)."""
    model = robots.load("arm7")
    key = jax.random.PRNGKey(1)
    q = np.asarray(jaxdyn.random_configuration(model, key))
    v = np.asarray(jax.random.normal(key, (model.nv,)))
    q2, v2 = q + 0.1, 2 * v
    _COMPILES.clear()
    _RECORDING[:] = [True]
    try:
        first = jaxdyn.aba(model, q, v, v)
        n_first = len(_COMPILES)
        second = jaxdyn.aba(model, q2, v2, v)
    finally:
        _RECORDING[:] = []
    assert n_first == 1 and len(_COMPILES) == 1, _COMPILES
    np.testing.assert_array_equal(first, jax.jit(jaxdyn.aba)(model, q, v, v))
    np.testing.assert_array_equal(second, jax.jit(jaxdyn.aba)(model, q2, v2, v))
    with jax.disable_jit():
        op_by_op = jaxdyn.aba(model, q, v, v)
    np.testing.assert_allclose(op_by_op, first, rtol=1e-12, atol=1e-12)


def test_eager_calls_of_jax_arrays_take_the_fast_path(monkeypatch):
    """An eager call whose leaves are all concrete JAX arrays (the model and its inputs) goes
    straight to the compiled program without sorting its leaves one by one (at batch 1 that
    sorting cost as much as a third of the call); it runs the same program as the general
    path (no second compile), with the same result, and a call with a numpy leaf still
    takes the general path."""
    model = robots.load("arm7")
    key = jax.random.PRNGKey(3)
    q = jaxdyn.random_configuration(model, key)
    v = jax.random.normal(key, (model.nv,))
    sorted_leaves = []
    dynamic = eager._dynamic
    monkeypatch.setattr(eager, "_dynamic", lambda x: sorted_leaves.append(x) or dynamic(x))
    _COMPILES.clear()
    _RECORDING[:] = [True]
    try:
        fast = jaxdyn.aba(model, q, v, v)
        assert sorted_leaves == []  # the fast path: no leaf sorted
        monkeypatch.setattr(eager, "_ARRAYS", set())  # the general path, same arguments
        general = jaxdyn.aba(model, q, v, v)
        assert len(sorted_leaves) == len(jax.tree_util.tree_leaves((model, q, v, v)))
    finally:
        _RECORDING[:] = []
    assert len(_COMPILES) <= 1, _COMPILES  # one program for both paths
    np.testing.assert_array_equal(fast, general)
    np.testing.assert_array_equal(fast, jax.jit(jaxdyn.aba)(model, q, v, v))
    monkeypatch.undo()
    sorted_leaves.clear()
    monkeypatch.setattr(eager, "_dynamic", lambda x: sorted_leaves.append(x) or dynamic(x))
    np.testing.assert_array_equal(jaxdyn.aba(model, np.asarray(q), v, v), fast)
    assert sorted_leaves  # a numpy leaf: the general path


def test_eager_transformations_run_one_compiled_program():
    """Under JAX's transformations called outside ``jit`` (``jax.jacfwd``, ``jax.grad``,
    ``jax.vmap``) a public algorithm is one compiled program too, which the transformation
    transforms (op by op, ``jacfwd`` of ``aba`` compiled some 500 operations at its first call):
    the results are the derivatives (``M^-1``, ``2 J^T qdd``) and ``jax.jit``'s, a second call
    compiles nothing, a failed value check is a ``CheckError``; inside ``jax.jit`` the
    algorithm is traced inline, as before."""
    model = robots.load("arm7")
    key = jax.random.PRNGKey(2)
    q = np.asarray(jaxdyn.random_configuration(model, key))
    v, tau = (np.asarray(jax.random.normal(k, (model.nv,))) for k in jax.random.split(key))
    jac = jax.jacfwd(jaxdyn.aba, argnums=3)

    def loss(t, q=q):
        return (jaxdyn.aba(model, q, v, t) ** 2).sum()

    qs = np.stack([q, q + 0.1, q - 0.2])
    _COMPILES.clear()
    _RECORDING[:] = [True]
    try:
        J = jac(model, q, v, tau)
        g = jax.grad(loss)(tau)
        Ms = jax.vmap(jaxdyn.crba, (None, 0))(model, qs)
        n_first = len(_COMPILES)
        jac(model, q + 0.1, v, tau)
        jax.grad(loss)(2 * tau)
        jax.vmap(jaxdyn.crba, (None, 0))(model, qs + 0.1)
    finally:
        _RECORDING[:] = []
    # jacfwd: one program; grad: the linearised program and its transpose; vmap: one; the
    # rest are JAX's own eager operations (jacfwd's basis, the loss), about ten
    assert n_first < 30 and len(_COMPILES) == n_first, _COMPILES
    assert 4 <= _COMPILES.count("jit(run)") <= 6, _COMPILES
    ref = jax.jit(jax.vmap(jaxdyn.crba, (None, 0)))(model, qs)
    np.testing.assert_allclose(Ms, ref, rtol=1e-13, atol=1e-13)
    # d qdd / d tau = M^-1, and the gradient of |qdd|^2 is 2 J^T qdd
    np.testing.assert_allclose(J, np.linalg.inv(ref[0]), rtol=1e-10, atol=1e-10)
    qdd = np.asarray(jaxdyn.aba(model, q, v, tau))
    np.testing.assert_allclose(g, 2 * np.asarray(J).T @ qdd, rtol=1e-10, atol=1e-10)
    # inside jit: traced inline (no inner program named after the eager wrapper)
    jaxpr = jax.make_jaxpr(lambda t: jac(model, q, v, t))(tau)
    assert "run" not in {str(e.params.get("name")) for e in jaxpr.jaxpr.eqns}
    # a failed value check under an eager transformation: CheckError, as for a plain call
    quad = robots.load("quad12")
    bad = np.asarray(jaxdyn.neutral_configuration(quad)).copy()
    bad[3:7] *= 2.0
    z = np.zeros((1, quad.nv))
    with pytest.raises(jaxdyn.CheckError, match="rnea: a quaternion in q is not of unit norm"):
        jax.vmap(jaxdyn.rnea, (None, 0, 0, 0))(quad, bad[None], z, z)


def test_eager_cluster_algorithms_run_one_compiled_program():
    """C-RNEA, C-ABA, C-EFPA and the state maps called eagerly: one compiled program each (op
    by op, hundreds), none at a second call, results ``jax.jit``'s, C-ABA inverting C-RNEA,
    the spanning state on the loop constraints."""
    model = crobots.load("four_bar")
    key = jax.random.PRNGKey(4)
    q = np.asarray(jaxdyn.random_configuration(model, key, scale=0.3))
    v, a = (np.asarray(jax.random.normal(k, (model.nv,))) for k in jax.random.split(key))
    ee = (model.tree.frame_names[-1],)
    _COMPILES.clear()
    _RECORDING[:] = [True]
    try:
        tau = jaxdyn.crnea(model, q, v, a)
        qdd = jaxdyn.caba(model, q, v, tau)
        L = jaxdyn.cefpa(model, q, ee)
        s = C.spanning_state(model, q, v, a)
        phi, K, k = C.loop_constraints(model, q, v)
        n_first = len(_COMPILES)
        v2, tau2 = 2 * v, 2 * np.asarray(tau)  # numpy: nothing to compile
        jaxdyn.crnea(model, q, v2, a)
        jaxdyn.caba(model, q, v, tau2)
        jaxdyn.cefpa(model, q, ee)
        C.spanning_state(model, q, v2, a)
        C.loop_constraints(model, q, v2)
    finally:
        _RECORDING[:] = []
    assert _COMPILES == ["jit(run)"] * 5 and n_first == 5, _COMPILES
    # the spanning state satisfies the loop constraints: K qdot = 0, K qdd = k
    np.testing.assert_allclose(phi, 0, atol=1e-9)
    np.testing.assert_allclose(np.asarray(K) @ np.asarray(s.v), 0, atol=1e-9)
    np.testing.assert_allclose(np.asarray(K) @ np.asarray(s.a), k, atol=1e-9)
    np.testing.assert_array_equal(tau, jax.jit(jaxdyn.crnea)(model, q, v, a))
    np.testing.assert_array_equal(L, jax.jit(jaxdyn.cefpa, static_argnums=2)(model, q, ee))
    np.testing.assert_allclose(qdd, a, rtol=1e-9, atol=1e-9)


def test_eager_calls_static_arguments_and_checks():
    """Non-array arguments of an eager call (frame names and indices, options) are given to
    the function as they are, and typed (``1`` and ``True`` are different frames); the value
    checks follow ``value_checks.unchecked`` (which the trajectory optimisers use); constraint
    descriptions without targets are static too, and so are floats (up to
    ``eager.EAGER_FLOAT_KEYS`` distinct values); a description's target is an operand of
    the program (one compile for every target value)."""
    model = robots.load("quad12")
    q = np.asarray(jaxdyn.neutral_configuration(model))
    name = model.frame_names[2]
    J = jaxdyn.jacobian(model, q, name)
    np.testing.assert_array_equal(jaxdyn.jacobian(model, q, 2), J)
    np.testing.assert_array_equal(jaxdyn.jacobian(model, q, np.int64(2)), J)
    world = jax.jit(jaxdyn.jacobian, static_argnums=(2, 3))(model, q, name, "local_world_aligned")
    np.testing.assert_array_equal(jaxdyn.jacobian(model, q, name, "local_world_aligned"), world)
    jaxdyn.frame_placement(model, q, 1)
    with pytest.raises(TypeError, match="frame must be a frame name"):
        jaxdyn.frame_placement(model, q, True)
    bad = q.copy()
    bad[3:7] *= 2.0
    with pytest.raises(jaxdyn.CheckError, match="aba: a quaternion in q is not of unit norm"):
        jaxdyn.aba(model, bad, np.zeros(model.nv), np.zeros(model.nv))
    with value_checks.unchecked():
        assert np.all(np.isfinite(jaxdyn.aba(model, bad, np.zeros(model.nv), np.zeros(model.nv))))
    with pytest.raises(jaxdyn.CheckError, match="aba: a quaternion"):
        jaxdyn.aba(model, bad, np.zeros(model.nv), np.zeros(model.nv))
    # constraint descriptions without targets are static (compared by value); a target
    # (which changes along a trajectory) is an operand: one program for all its values
    weld = jaxdyn.Weld(name, rotation=np.eye(3))
    pin = jaxdyn.Connect(name, target=(0.1, 0.0, 0.2))
    pin2 = jaxdyn.Connect(name, target=(0.3, 0.1, 0.2))
    c3, s3 = np.cos(0.3), np.sin(0.3)
    R2 = np.array([[c3, -s3, 0.0], [s3, c3, 0.0], [0.0, 0.0, 1.0]])  # 0.3 rad about z
    held = [jaxdyn.Weld(name, target=(np.eye(3), (0.1, 0.0, 0.2))), pin]
    held2 = [jaxdyn.Weld(name, target=(R2, (0.2, 0.0, 0.2))), pin2]
    _COMPILES.clear()
    _RECORDING[:] = [True]
    try:
        Jc = jaxdyn.constraint_jacobian(model, q, [weld])
        jaxdyn.constraint_jacobian(model, q, [jaxdyn.Weld(name, rotation=np.eye(3))])
        n_weld = list(_COMPILES)
        _COMPILES.clear()
        err = jaxdyn.constraints.constraint_error(model, q, [pin])
        err2 = jaxdyn.constraints.constraint_error(model, q, [pin2])
        errs = [jaxdyn.constraints.constraint_error(model, q, c) for c in (held, held2)]
        n_target = list(_COMPILES)
    finally:
        _RECORDING[:] = []
    assert n_weld == ["jit(run)"], n_weld
    assert n_target == ["jit(run)"] * 2, n_target  # one per list of kinds, not per target
    assert pin.target == (0.1, 0.0, 0.2)  # the description itself is unchanged
    static_error = jax.jit(jaxdyn.constraints.constraint_error, static_argnums=2)
    for e, c in [(err2, [pin2])] + list(zip(errs, (held, held2))):
        # targets compiled in as constants
        np.testing.assert_allclose(e, static_error(model, q, tuple(c)), rtol=1e-12, atol=1e-12)
    # the description compiled in as a constant (was under jax.disable_jit: op by op, 4.5 of
    # this test's 9.5 CPU-s)
    static_jacobian = jax.jit(jaxdyn.constraint_jacobian, static_argnums=2)
    np.testing.assert_allclose(Jc, static_jacobian(model, q, (weld,)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Jc, jaxdyn.constraint_jacobian(model, q, [jaxdyn.Weld(name)]))
    np.testing.assert_allclose(
        err,
        jax.jit(jaxdyn.constraints.constraint_error, static_argnums=2)(model, q, (pin,)),
        atol=1e-12,
    )


def test_eager_calls_with_floats(monkeypatch):
    """Floats in an eager call (a gain, the numbers of a list) are part of the compiled
    program's key: one compile for a value used again (the README's ``damping=1e-8``: 13 s op
    by op at its first call), and after ``eager.EAGER_FLOAT_KEYS`` distinct values (per model
    and other arguments) further values run op by op instead of compiling at every call; the
    results are ``jax.jit``'s."""
    monkeypatch.setattr(eager, "EAGER_FLOAT_KEYS", 2)
    monkeypatch.setattr(eager, "_FLOAT_KEYS", {})  # earlier tests' keys do not count
    model = robots.load("arm7")
    lists = [[0.1 * (i + k) for i in range(model.nq)] for k in range(3)]
    z = np.zeros(model.nv)
    _COMPILES.clear()
    _RECORDING[:] = [True]
    try:
        first = [jaxdyn.rnea(model, q, z, z) for q in lists[:2]]
        again = jaxdyn.rnea(model, lists[0], z, z)
        n_two = list(_COMPILES)
        _COMPILES.clear()
        third = jaxdyn.rnea(model, lists[2], z, z)
        n_third = list(_COMPILES)
        _COMPILES.clear()
        # other arguments (here external forces): a budget of their own
        jaxdyn.rnea(model, lists[2], z, z, np.zeros((model.nb, 6)))
    finally:
        _RECORDING[:] = []
    assert n_two == ["jit(run)"] * 2, n_two
    assert "jit(run)" not in n_third, n_third  # the third value: op by op
    assert _COMPILES == ["jit(run)"], _COMPILES
    ref = jax.jit(jaxdyn.rnea)
    for q, tau in zip(lists, first + [third]):
        np.testing.assert_allclose(tau, ref(model, np.asarray(q), z, z), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(again, first[0])

"""Cluster models as data (jaxdyn.clusters): topologies hashed by content, constraint parameters
as differentiable / batchable leaves, the rotor-folding plan as static data, the value check of
the loop constraints, the floating-joint check at load, names, types and the module layout."""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import clusters as C
from jaxdyn.clusters import robots

caba_module = importlib.import_module("jaxdyn.clusters.caba")


@functools.cache
def chain():
    """Three links driven by ratio-6 rotors (folded: the rotors are axisymmetric)."""
    return robots.load("revolute_rotor_chain")


def _state(m, seed=0):
    k = jax.random.split(jax.random.PRNGKey(seed), 3)
    q = jax.jit(lambda kk: C.random_configuration(m, kk, scale=0.6))(k[0])
    return q, jax.random.normal(k[1], (m.nv,)), jax.random.normal(k[2], (m.nv,))


def _rel(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return float(np.max(np.abs(x - y)) / max(1.0, float(np.max(np.abs(y)))))


def test_reloaded_models_share_compiled_code():
    """Loading the same file twice gives equal, equally hashed topologies (by content), so a
    jitted function taking the model as an argument is traced once; other parameter values of
    the same structure do not retrace either."""
    path = robots.path("revolute_rotor_chain")
    m1, m2 = C.load_urdf_plus(path), C.load_urdf_plus(path)
    assert m1.topo is not m2.topo
    assert m1.topo == m2.topo and hash(m1.topo) == hash(m2.topo)
    assert m1.tree.topo == m2.tree.topo and m1.topo.fold.links == m2.topo.fold.links
    assert C.fold_rotors(m1, False).topo != m1.topo  # the fold plan is part of the structure
    assert robots.load("four_bar").topo != m1.topo
    traces = []

    @jax.jit
    def f(m, q, v, tau):
        traces.append(None)
        return C.caba(m, q, v, tau)

    q, v, tau = _state(m1)
    a1 = f(m1, q, v, tau)
    a2 = f(m2, q, v, tau)
    heavier = eqx.tree_at(lambda m: m.tree.mass, m2, 2 * m2.tree.mass)
    a3 = f(heavier, q, v, tau)
    assert len(traces) == 1
    np.testing.assert_array_equal(a1, a2)
    assert _rel(a3, a1) > 1e-3


def _set(m, gi, key, x):
    return eqx.tree_at(lambda mm: mm.params[gi][key], m, x)


def test_armature_and_gear_ratios_are_differentiable_leaves():
    """Armature (reflected-inertia model) and gear ratios (``G`` of a geared transmission,
    through the rotor folding) are array leaves: ``jax.grad`` agrees with central differences
    and ``jax.vmap`` runs over a batch of armatures."""
    m = chain()
    ap = C.approximate_model(m, "diagonal")
    gi = ap.topo.cluster_group[0]
    arm = ap.params[gi]["armature"]  # (nc, 1, 1)
    assert arm.shape[1:] == (1, 1) and float(arm[0, 0, 0]) > 0
    q, v, tau = _state(m)
    qa, va = C.approximate_state(m, ap, q, v)
    w = jnp.cos(jnp.arange(m.nv) + 0.5)
    gG = m.topo.cluster_group[0]
    G = m.params[gG]["G"]  # (nc, 2, 1): [1; N] per geared link
    assert m.topo.groups[gG].type == "linear" and float(G[0, 1, 0]) == 6.0

    def cost_arm(a):
        return w @ C.caba(_set(ap, gi, "armature", a), qa, va, tau)

    def cost_G(Gx):
        return w @ C.caba(_set(m, gG, "G", Gx), q, v, tau)

    @jax.jit
    def run(arm, G):
        arms = arm[None] * (1.0 + 0.5 * jnp.arange(3.0))[:, None, None, None]
        batch = jax.vmap(lambda a: C.caba(_set(ap, gi, "armature", a), qa, va, tau))(arms)
        direct = jnp.stack(
            [C.projection_fd(_set(ap, gi, "armature", arms[k]), qa, va, tau) for k in range(3)]
        )
        h = 1e-6
        E = jnp.eye(arm.size).reshape((arm.size,) + arm.shape)
        fd_arm = jax.vmap(lambda e: (cost_arm(arm + h * e) - cost_arm(arm - h * e)) / (2 * h))(E)
        EG = jnp.zeros((G.shape[0],) + G.shape).at[jnp.arange(G.shape[0]), :, 1, 0].set(1.0)
        fd_G = jax.vmap(lambda e: (cost_G(G + h * e) - cost_G(G - h * e)) / (2 * h))(EG)
        return jax.grad(cost_arm)(arm), fd_arm, jax.grad(cost_G)(G), fd_G, batch, direct

    g_arm, fd_arm, g_G, fd_G, batch, direct = run(arm, G)
    assert _rel(g_arm.reshape(-1), fd_arm) < 1e-6
    assert _rel(g_G[:, 1, 0], fd_G) < 1e-6
    assert _rel(batch, direct) < 1e-10
    assert _rel(batch[0], batch[2]) > 1e-6  # the armature matters


def test_rotor_folding_depends_on_static_data_only(monkeypatch):
    """The folded algorithm runs eagerly, jitted with the model closed over, jitted with the
    model as an argument, and vmapped over the model's parameters alike (the plan is static),
    with the same results; the traced program is the same with the model closed over or passed
    in, and for other parameter values."""
    m = chain()
    assert m.rotors_folded
    q, v, tau = _state(m, 1)
    calls = []
    orig = caba_module._caba_single_output

    def spy(s, rotors=None):
        calls.append((rotors is not None, s.model.nb))
        return orig(s, rotors)

    monkeypatch.setattr(caba_module, "_caba_single_output", spy)
    eager = C.caba(m, q, v, tau)
    closed = jax.jit(lambda q, v, t: C.caba(m, q, v, t))(q, v, tau)
    arg = jax.jit(C.caba)(m, q, v, tau)
    masses = m.tree.mass[None] * jnp.array([1.0, 1.5])[:, None]
    batched = jax.jit(
        jax.vmap(
            lambda mass, mm: C.caba(eqx.tree_at(lambda x: x.tree.mass, mm, mass), q, v, tau),
            (0, None),
        )
    )(masses, m)
    assert calls == [(True, m.topo.fold.tree_topo.nb)] * 4
    for x in (closed, arg, batched[0]):
        assert _rel(x, eager) < 1e-13
    unfolded = C.fold_rotors(m, False)
    assert _rel(jax.jit(C.caba)(unfolded, q, v, tau), eager) < 1e-10
    # the same traced program (number of equations) with the model closed over or passed in,
    # and for other values, here a rotor that is no longer axisymmetric (the value check would
    # refuse it at run time)
    rb = m.tree.topo.body_names.index("rotor-1")
    bad = eqx.tree_at(lambda x: x.tree.inertia, m, m.tree.inertia.at[rb, 0, 1].add(1e-5))
    n_eqns = [len(jax.make_jaxpr(lambda q, v, t: C.caba(m, q, v, t))(q, v, tau).eqns)]
    n_eqns += [len(jax.make_jaxpr(C.caba)(mm, q, v, tau).eqns) for mm in (m, bad)]
    assert n_eqns[0] == n_eqns[1] == n_eqns[2]
    with pytest.raises(Exception, match="no longer symmetric about its axis"):
        jax.jit(C.caba)(bad, q, v, tau).block_until_ready()


def _perturbed_dependent(m, dq):
    """The neutral configuration with a dependent coordinate of the first implicit cluster
    moved by ``dq``."""
    q = C.neutral_configuration(m)
    k = next(i for i, n in enumerate(m.q_names) if n not in m.v_names)
    return q.at[k].add(dq)


# [six_bar] slow: a second closed planar loop like four_bar's
@pytest.mark.parametrize(
    "name", ["four_bar", pytest.param("six_bar", marks=pytest.mark.slow), "planar_leg_linkage"]
)
def test_loop_residual_is_checked(name):
    """A ``q`` that violates a loop constraint is refused under jit instead of giving finite
    wrong answers; below the tolerance it passes."""
    m = robots.load(name)
    z = jnp.zeros(m.nv)
    f = jax.jit(lambda m, q: C.caba(m, q, z, z))
    f(m, C.neutral_configuration(m)).block_until_ready()
    f(m, _perturbed_dependent(m, 1e-9)).block_until_ready()  # within the tolerance
    for dq in (0.05, 1e-5):  # 1e-5: about 1e-5 of the loop's scale, above float64's tolerance
        with pytest.raises(Exception, match="violates the loop constraints"):
            f(m, _perturbed_dependent(m, dq)).block_until_ready()


def test_loop_residual_check_eager_float32_and_switch():
    """The loop check raises in eager calls too, tolerates float32 rounding (1e-5 of the loop's
    scale passes in float32), follows the value-check switch; ``loop_constraints`` measures
    any ``q`` without checking it."""
    m = robots.load("four_bar")
    bad = _perturbed_dependent(m, 0.05)
    with pytest.raises(Exception, match="spanning_state: q violates the loop constraints"):
        C.spanning_state(m, bad)
    phi = jax.jit(C.loop_constraints)(m, bad)[0]
    assert float(jnp.max(jnp.abs(phi))) > 1e-3
    z32 = jnp.zeros(m.nv, jnp.float32)
    f32 = jax.jit(lambda m, q: C.caba(m, q, z32, z32))
    f32(m.astype(jnp.float32), _perturbed_dependent(m, 1e-5).astype(jnp.float32))
    with jaxdyn.config.override(value_checks=False):
        out = jax.jit(lambda m, q: C.caba(m, q, z32, z32))(
            m.astype(jnp.float32), bad.astype(jnp.float32)
        )
    assert np.all(np.isfinite(np.asarray(out)))


def test_floating_joint_with_floating_base_is_refused():
    """A URDF+ file whose root link carries its own floating joint refuses
    ``floating_base=True`` (a second free joint above a massless root: a singular mass
    matrix), naming the joint (after the file's warning about its published inertias)."""
    path = robots.path("mini_cheetah")
    for load in (
        lambda: C.load_urdf_plus(path, floating_base=True),
        lambda: jaxdyn.load_urdf(path, floating_base=True),
        lambda: jaxdyn.load_urdf(path, floating_base=True, clusters=False),
    ):
        with pytest.warns(jaxdyn.JaxdynWarning, match="'mini_cheetah'>: .* triangle inequality"):
            with pytest.raises(ValueError, match='joint name="base_to_floating_base"'):
                load()


def test_cluster_algorithms_refuse_tree_models_and_names():
    """``caba`` / ``crnea`` / ``cefpa`` given a plain Model raise TypeError naming the tree
    function; ``jaxdyn.clusters.random_configuration`` / ``neutral_configuration`` are
    ``jaxdyn``'s; the loop constraints are ``loop_constraints`` (``jaxdyn.constraint_jacobian``
    is about contact constraints)."""
    tree = jaxdyn.robots.load("arm7")
    q, v = jnp.zeros(tree.nq), jnp.zeros(tree.nv)
    for fn, args, alt in (
        (C.crnea, (q, v, v), "jaxdyn.rnea"),
        (C.caba, (q, v, v), "jaxdyn.aba"),
        (C.cefpa, (q, (tree.frame_names[-1],)), "jaxdyn.delassus"),
        (C.spanning_state, (q,), "ClusterModel"),
    ):
        with pytest.raises(TypeError, match=alt):
            fn(tree, *args)
    assert jaxdyn.caba is C.caba and jaxdyn.crnea is C.crnea and jaxdyn.cefpa is C.cefpa
    assert C.random_configuration is jaxdyn.random_configuration
    assert C.neutral_configuration is jaxdyn.neutral_configuration
    assert not hasattr(C, "constraint_jacobian") and "loop_constraints" in C.__all__


def test_cluster_modules_import_one_way():
    """``jaxdyn/clusters``: no import cycle between its modules and no function-level
    imports; no private name imported across modules."""
    root = Path(C.__file__).parent
    graph = {}
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                deps.update(n.split(".")[0] for n in names)
                if node.module:
                    private = [a.name for a in node.names if a.name.startswith("_")]
                    assert not private, f"{path.name} imports {private} from .{node.module}"
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = [n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))]
                assert not inner, f"{path.name}:{fn.name} imports inside a function"
        graph[path.stem] = deps - {path.stem}
    del graph["__init__"]
    done, visiting = set(), set()

    def visit(n, stack):
        assert n not in visiting, f"import cycle: {' -> '.join(stack + [n])}"
        if n in done or n not in graph:
            return
        visiting.add(n)
        for d in sorted(graph[n]):
            visit(d, stack + [n])
        visiting.discard(n)
        done.add(n)

    for n in graph:
        visit(n, [])
    assert "algorithms" not in graph
    assert {"crnea", "caba", "cefpa", "common", "baselines"} <= set(graph)


def test_strict_is_threaded_through_the_cluster_loaders():
    """``strict=`` reaches the URDF+ loaders: Mini Cheetah's rotor inertias violate the triangle
    inequality, a warning given once per element by default (the file is parsed once) and an
    error with ``strict=True``."""
    import warnings

    src = robots.path("mini_cheetah")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = jaxdyn.load_urdf(src)
    assert isinstance(m, C.ClusterModel)
    msgs = [str(w.message) for w in caught if issubclass(w.category, jaxdyn.JaxdynWarning)]
    assert msgs and len(msgs) == len(set(msgs)), msgs
    for loader in (jaxdyn.load_urdf, C.load_urdf_plus):
        with pytest.raises(ValueError, match="triangle"):
            loader(src, strict=True)


def test_bundled_robots_load_clean():
    """Issue 55: the bundled URDF+ files load without warnings; the inertias they publish that
    violate the triangle inequality (data/README.md) still warn when the file is loaded as a
    user's file, are refused by strict=True, and any other warning is still shown."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        models = {n: robots.load(n) for n in robots.ROBOTS}
        robots.load("tello_legs")
    assert set(robots.TRIANGLE_AS_PUBLISHED) <= set(models)
    with pytest.warns(jaxdyn.JaxdynWarning, match=r"'mini_cheetah'>: .* 4 link inertias violate"):
        C.load_urdf_plus(robots.path("mini_cheetah"))
    with pytest.raises(ValueError, match="triangle inequality"):
        robots.load("mini_cheetah", strict=True)
    # another count than the documented one (a changed file) is shown
    counts = dict(robots.TRIANGLE_AS_PUBLISHED, double_pendulum=3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(robots, "TRIANGLE_AS_PUBLISHED", counts)
        with pytest.warns(jaxdyn.JaxdynWarning, match=r"'double_pendulum'>: .* 2 link inertias"):
            robots.load("double_pendulum")

"""jaxdyn's cache of serialized executables (:mod:`jaxdyn.backend.executable_cache`): a program
saved by one call is loaded by a later one without tracing and computes the same bits; every
input that decides the program changes the key (a wrong hit would be a silent wrong answer);
what cannot be keyed exactly, traced calls and the switch off run the plain ``jit``.

A new :class:`CachedJit` of the same function stands for a new process (an empty in-process
table: the program comes from the file); the slow test runs two processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.experimental.serialize_executable as serialize_executable
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import robots
from jaxdyn.backend import executable_cache as ec
from jaxdyn.trajopt import costs as C
from jaxdyn.trajopt import ddp


@pytest.fixture
def cache(tmp_path, monkeypatch, no_session_cache):
    """The executable cache on, in ``tmp_path`` (JAX's persistent cache off: an executable read
    back from it is not saved)."""
    monkeypatch.setattr(ec, "enabled", lambda: True)
    monkeypatch.setattr(ec, "cache_path", lambda: tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def arm():
    return robots.load("arm7")


def _problem(model, weight=1e-2, horizon=5, frame="ee"):
    nv = model.nv
    x0 = jnp.concatenate([jaxdyn.neutral_configuration(model), jnp.zeros(nv)])
    run = C.Cost(
        (
            C.Term(C.StateRegularization(x0), weight),
            C.Term(C.ControlRegularization(jnp.zeros(nv)), 1e-3),
        )
    )
    term = C.Cost((C.Term(C.FrameTranslation(frame, jnp.array([0.3, 0.1, 0.5])), 1e2),))
    return ddp.Problem(model, x0, run, term, 0.01, horizon)


def _args(problem, dtype=jnp.float64):
    problem = jax.tree.map(lambda a: jnp.asarray(a, dtype) if eqx.is_array(a) else a, problem)
    T, nv = problem.horizon, problem.model.nv
    xs = jnp.broadcast_to(problem.x0 + 0.05, (T + 1, problem.x0.shape[-1]))
    us = jnp.full((T, nv), 0.1, dtype)
    return problem, xs, us


def _cost_fn():
    """A cached ``trajectory_cost`` (a jaxdyn function: its code is in the key's source
    digest), and the plain ``equinox.filter_jit`` of it."""
    return ec.cached_jit(ddp.trajectory_cost), eqx.filter_jit(ddp.trajectory_cost)


def test_saved_program_loads_and_computes_the_same_bits(cache, arm):
    args = _args(_problem(arm))
    cached, plain = _cost_fn()
    first = cached(*args)
    assert ec.wait()  # written in the background: the call does not wait for it
    assert cached.events == ["saved"]
    assert len(list(cache.glob("*.exe"))) == 1
    again = cached(*args)  # the process's table: neither traced nor loaded again
    assert cached.events == ["saved"]
    other, _ = _cost_fn()  # a new table, as in a new process: the file
    loaded = other(*args)
    assert other.events == ["hit"]
    want = plain(*args)
    for got in (first, again, loaded):
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    # other arrays of the same shapes (not the problem's): the same program, the right values
    us = args[2] * 3.0
    np.testing.assert_array_equal(other(args[0], args[1], us), plain(args[0], args[1], us))


def test_key_changes_with_everything_that_decides_the_program(arm, monkeypatch):
    cached, _ = _cost_fn()
    base = _problem(arm)
    key = cached.key(_args(base))
    assert cached.key(_args(_problem(arm))) == key  # rebuilt equal: the same key
    heavier = eqx.tree_at(lambda m: m.mass, arm, arm.mass.at[3].add(0.1))
    changed = {
        "a cost weight": _args(_problem(arm, weight=2e-2)),
        "a model parameter": _args(_problem(heavier)),
        "the horizon": _args(_problem(arm, horizon=6)),
        "the dtype": _args(base, jnp.float32),
        "a frame of a cost (static)": _args(_problem(arm, frame="hand")),
    }
    for what, args in changed.items():
        assert cached.key(args) != key, what
    assert ec.cached_jit(ddp.rollout).key(_args(base)) != key  # another function
    with jaxdyn.config.override(value_checks=False):
        assert cached.key(_args(base)) != key
    with jax.default_matmul_precision("highest"):
        assert cached.key(_args(base)) != key
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "") + " --xla_dump_to=/nowhere")
    assert cached.key(_args(base)) != key
    monkeypatch.undo()
    # what JAX logs decides nothing: a run with JAX_LOG_COMPILES=1 warms the cache for a plain one
    for option in ("jax_log_compiles", "jax_explain_cache_misses"):
        was = getattr(jax.config, option)
        try:
            jax.config.update(option, not was)
            assert cached.key(_args(base)) == key, option
        finally:
            jax.config.update(option, was)
    # an edited jaxdyn (the digest of its source files)
    monkeypatch.setattr(ec, "_source_digest", lambda: "edited")
    ec._versions.cache_clear()
    try:
        assert cached.key(_args(base)) != key
    finally:
        monkeypatch.undo()
        ec._versions.cache_clear()
    assert cached.key(_args(base)) == key


def test_context_is_recomputed_when_a_setting_changes(monkeypatch):
    # _context keeps its last value while JAX's options, the switches and XLA_FLAGS read the
    # same: every way of changing one of them must show, as _full_context computes it
    base = ec._context()
    assert base == ec._full_context()
    assert ec._context() is base  # nothing changed: the value kept
    seen = [base]

    def check():
        got = ec._context()
        assert got == ec._full_context()
        assert all(got != s for s in seen)
        seen.append(got)

    with jax.numpy_rank_promotion("warn"):  # a thread-local JAX option
        check()
    infs = jax.config.jax_debug_infs  # pyright: ignore[reportAttributeAccessIssue]
    try:
        jax.config.update("jax_debug_infs", not infs)  # a global one, outside jit's key
        check()
    finally:
        jax.config.update("jax_debug_infs", infs)
    monkeypatch.setitem(jaxdyn.config._values, "unroll_max", 7)  # a switch, not by update()
    check()
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "") + " --xla_dump_to=/nowhere")
    check()
    monkeypatch.undo()
    assert ec._context() == base


def test_changed_weight_misses_and_computes_its_own_value(cache, arm):
    cached, plain = _cost_fn()
    a, b = _args(_problem(arm)), _args(_problem(arm, weight=5.0))
    cached(*a)
    other, _ = _cost_fn()
    got = other(*b)
    assert ec.wait()
    assert other.events == ["saved"]  # not a hit on a's file
    np.testing.assert_array_equal(got, plain(*b))
    assert float(got) != float(plain(*a))
    assert len(list(cache.glob("*.exe"))) == 2


class _Offset(eqx.Module):
    """A cost residual of the user's: its code is in no digest."""

    target: jax.Array

    def __call__(self, model, x, u):
        return 2.0 * (x - self.target)


def test_what_cannot_be_keyed_runs_plain(cache, arm):
    problem = _problem(arm)
    mine = eqx.tree_at(
        lambda p: p.running,
        problem,
        C.Cost((C.Term(_Offset(problem.x0), 1.0),)),
    )
    args = _args(mine)
    cached, plain = _cost_fn()
    with pytest.raises(ec.Uncacheable):
        cached.key(args)
    np.testing.assert_array_equal(cached(*args), plain(*args))
    assert cached.events == ["plain"]
    assert not list(cache.glob("*.exe"))
    for value in (lambda x: x, _Offset(problem.x0).__call__, _Offset, np.add, jnp.sin):
        with pytest.raises(ec.Uncacheable):
            ec._stable(value, [])
    with pytest.raises(ValueError, match="not a function of jaxdyn"):
        ec.cached_jit(lambda p: p)


def test_traced_calls_and_the_switch_off_run_plain(cache, arm, monkeypatch):
    args = _args(_problem(arm))
    cached, plain = _cost_fn()
    inside = jax.jit(lambda p, xs, us: cached(p, xs, us))(*args)
    np.testing.assert_array_equal(inside, plain(*args))
    monkeypatch.setattr(ec, "enabled", lambda: False)
    cached(*args)
    assert cached.events == [] and not list(cache.glob("*.exe"))


def test_least_recently_used_files_go(cache, arm, monkeypatch):
    monkeypatch.setattr(ec, "MAX_ENTRIES", 2)
    cached, _ = _cost_fn()
    for i, w in enumerate((1.0, 2.0, 3.0)):
        cached(*_args(_problem(arm, weight=w)))
        assert ec.wait()
        if i == 0:
            (first,) = cache.glob("*.exe")
            os.utime(first, (1.0, 1.0))  # the oldest
    files = list(cache.glob("*.exe"))
    assert len(files) == 2 and first not in files


def test_damaged_file_is_compiled_again(cache, arm):
    args = _args(_problem(arm))
    cached, plain = _cost_fn()
    cached(*args)
    assert ec.wait()
    (path,) = cache.glob("*.exe")
    path.write_bytes(path.read_bytes()[:100])
    other, _ = _cost_fn()
    np.testing.assert_array_equal(other(*args), plain(*args))
    assert ec.wait()
    assert other.events == ["saved"]
    third, _ = _cost_fn()
    third(*args)
    assert third.events == ["hit"]


def test_executable_that_does_not_run_is_dropped(cache, arm, monkeypatch):
    """An executable loaded from disk that fails at its first run (not a value check) is
    dropped with its file, and the plain program answers."""
    args = _args(_problem(arm))
    cached, plain = _cost_fn()
    cached(*args)
    assert ec.wait()
    (path,) = cache.glob("*.exe")

    def broken(*a, **k):
        def run(dyn):
            raise jax.errors.JaxRuntimeError("NOT_FOUND: Function broadcast.1_kernel not found")

        return run

    monkeypatch.setattr(serialize_executable, "deserialize_and_load", broken)
    other, _ = _cost_fn()
    np.testing.assert_array_equal(other(*args), plain(*args))
    assert other.events == ["hit", "plain"] and not path.exists()


def test_enabled_follows_jaxdyns_compilation_cache(monkeypatch):
    """Off where jaxdyn's persistent compilation cache is off (as in this test session), and
    by its own switch."""
    monkeypatch.setattr(jaxdyn.config, "compilation_cache_dir", lambda: None)
    assert not ec.enabled()
    monkeypatch.setattr(jaxdyn.config, "compilation_cache_dir", lambda: "/somewhere")
    assert ec.enabled()
    assert jaxdyn.config.executable_cache(False) is None
    try:
        assert not ec.enabled()
    finally:
        d = jaxdyn.config.executable_cache(True)
    assert ec.enabled() and d == str(ec.cache_path())
    assert ec.cache_path().parent == jaxdyn.config._cache_root() / "executables"
    assert ec.cache_path().name == jaxdyn.config.compilation_cache_path().name


_CHILD = textwrap.dedent(
    """
    import sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    import jaxdyn
    from jaxdyn import robots
    from jaxdyn.trajopt import costs as C, ddp

    m = robots.load("arm7").with_armature(0.01)
    x0 = jnp.concatenate([jaxdyn.neutral_configuration(m), jnp.zeros(m.nv)])
    run = C.Cost((C.Term(C.StateRegularization(x0), 1e-2),
                  C.Term(C.ControlRegularization(jnp.zeros(m.nv)), 1e-3)))
    term = C.Cost((C.Term(C.FrameTranslation("ee", jnp.array([0.3, 0.1, 0.5])), 1e2),))
    res = ddp.fddp(ddp.Problem(m, x0, run, term, 0.01, 10), max_iter=50)
    from jaxdyn.backend import executable_cache
    executable_cache.wait()
    print(ddp._solve_plain.events, int(res.iterations))
    print(np.concatenate([np.asarray(res.xs).ravel(), np.asarray(res.us).ravel()]).tobytes().hex())
    """
)


@pytest.mark.slow  # two processes, one FDDP compile
def test_second_process_loads_the_solve(tmp_path):
    env = dict(
        os.environ,
        JAXDYN_CACHE_DIR=str(tmp_path),
        JAXDYN_COMPILATION_CACHE="1",
        JAXDYN_TRAJOPT_FUSED_LOOPS="0",
    )
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    runs = [
        subprocess.run(
            [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
        ).stdout.splitlines()
        for _ in range(2)
    ]
    assert runs[0][0].startswith("['saved']"), runs[0]
    assert runs[1][0].startswith("['hit']"), runs[1]
    assert runs[0][1] == runs[1][1]  # the same bits
    env["JAXDYN_EXECUTABLE_CACHE"] = "0"
    off = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert off[0].startswith("[]") and off[1] == runs[0][1]


def test_compiler_options_reach_xla_and_key_their_own_program(cache, arm, monkeypatch):
    """A :class:`CachedJit` with ``compiler_options`` compiles with them, cached or not (an
    option XLA does not know fails both ways), under a key of its own; ``fddp(...,
    compile="quick")`` (XLA without LLVM's optimisation) solves as the default program does,
    from a file of its own, and an unknown ``compile`` is refused by name."""
    args = _args(_problem(arm))
    default, plain = _cost_fn()
    bogus = ec.cached_jit(ddp.trajectory_cost, compiler_options={"no_such_xla_option": 1})
    assert bogus.key(args) != default.key(args)
    with pytest.raises(Exception, match="no_such_xla_option"):
        bogus(*args)
    monkeypatch.setattr(ec, "enabled", lambda: False)  # not cached: the options still apply
    with pytest.raises(Exception, match="no_such_xla_option"):
        bogus(*args)
    monkeypatch.setattr(ec, "enabled", lambda: True)
    problem = _problem(arm)
    want = ddp.fddp(problem, max_iter=20)
    got = ddp.fddp(problem, max_iter=20, compile="quick")
    assert ec.wait() and ddp._solve_quick.events[-1] == "saved"
    assert int(got.iterations) == int(want.iterations)
    np.testing.assert_allclose(float(got.cost), float(want.cost), rtol=1e-10)
    np.testing.assert_allclose(got.xs, want.xs, rtol=0, atol=1e-9)
    assert len(list(cache.glob("*.exe"))) == 2  # the default program's file and the quick one's
    with pytest.raises(ValueError, match="compile must be 'default' or 'quick'"):
        ddp.fddp(problem, compile="fast")
    with pytest.raises(TypeError, match="compile= is an option of fddp and ilqr"):
        ddp._options({"compile": "quick"}, jnp.float64)  # solve_batch's, solve_sharded's

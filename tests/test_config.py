"""``jaxdyn.config``: every switch follows one rule (a change clears JAX's caches, so a function
jitted before the change retraces and shows the new behaviour), and the old entry points
delegate to it."""

from __future__ import annotations

import os
import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import config, robots, spatial
from jaxdyn import derivatives as D
from jaxdyn.backend import xla_flags


@pytest.fixture(scope="module")
def small():
    """A 3-body floating-base model and a state (small: compile time)."""
    model = jaxdyn.load_urdf(robots.random_urdf(3, seed=1), floating_base=True)
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jaxdyn.random_configuration(model, k[0])
    v = jax.random.normal(k[1], (model.nv,))
    a = jax.random.normal(k[2], (model.nv,))
    return model, q, v, a


@pytest.fixture(autouse=True)
def _restore():
    before = {n: config.get(n) for n in config.SWITCHES}
    yield
    for n, val in before.items():
        config.update(n, val)


def test_value_checks_rule(small):
    model, q, _, _ = small
    traces = []

    @jax.jit
    def com(q):
        traces.append(config.get("value_checks"))
        return jaxdyn.center_of_mass(model, q)

    bad = q.at[3:7].multiply(1.5)
    assert config.get("value_checks")
    with pytest.raises(
        (eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError), match="center_of_mass"
    ):
        jax.block_until_ready(com(bad))
    assert traces == [True]
    config.update("value_checks", True)  # same value: nothing cleared, no retrace
    com(q)
    assert traces == [True]
    config.update("value_checks", False)
    assert np.all(np.isfinite(com(bad)))  # retraced without the check
    assert traces == [True, False]
    jaxdyn.set_value_checks(True)  # old entry point, same rule
    assert config.get("value_checks") and jaxdyn.value_checks.enabled()
    with pytest.raises(
        (eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError), match="center_of_mass"
    ):
        jax.block_until_ready(com(bad))
    assert traces == [True, False, True]


def test_analytic_derivatives_rule(small):
    """The custom_jvp rule ignores a radial quaternion tangent (it differentiates the dynamics
    of the normalised quaternion); plain autodiff does not: the switch is visible in values."""
    model, q, v, a = small
    dq = jnp.zeros_like(q).at[3:7].set(q[3:7])
    traces = []

    @jax.jit
    def radial(q):
        traces.append(config.get("analytic_derivatives"))
        return jax.jvp(lambda x: jaxdyn.rnea(model, x, v, a), (q,), (dq,))[1]

    assert config.get("analytic_derivatives")
    t_rule = np.asarray(radial(q))
    np.testing.assert_allclose(t_rule, 0.0, atol=1e-12)
    with D.analytic_derivatives(False):  # old context manager, delegating to config.override
        assert not config.get("analytic_derivatives")
        t_plain = np.asarray(radial(q))
    assert traces == [True, False]
    assert np.max(np.abs(t_plain)) > 1e-3
    np.testing.assert_allclose(radial(q), t_rule, atol=1e-12)  # restored: retraced again
    assert traces == [True, False, True]
    D.set_analytic_derivatives(False)
    assert not D.analytic_derivatives_enabled()
    np.testing.assert_allclose(radial(q), t_plain, rtol=1e-12)
    assert traces == [True, False, True, False]


def test_unroll_max_rule():
    A = jnp.arange(9.0).reshape(3, 3)
    B = jnp.eye(3) + 1.0
    traces = []

    @jax.jit
    def f(A, B):
        traces.append(config.get("unroll_max"))
        return spatial.mm(A, B)

    def uses_dot():
        return "dot_general" in f.lower(A, B).as_text()

    ref = np.asarray(A) @ np.asarray(B)
    assert config.get("unroll_max") >= 3
    np.testing.assert_allclose(f(A, B), ref)
    assert not uses_dot()  # unrolled into broadcast products
    n = len(traces)
    with config.override(unroll_max=0):
        np.testing.assert_allclose(f(A, B), ref)
        assert len(traces) == n + 1 and traces[-1] == 0
        assert uses_dot()
    np.testing.assert_allclose(f(A, B), ref)
    assert traces[-1] >= 3 and not uses_dot()


def test_bad_names_and_values():
    with pytest.raises(ValueError, match="jaxdyn.config.update: unknown switch 'nope'"):
        config.update("nope", 1)
    with pytest.raises(ValueError, match="jaxdyn.config.override: unknown switch 'nope'"):
        with config.override(nope=1):
            pass
    with pytest.raises(ValueError, match="unroll_max must be an integer >= 0"):
        config.update("unroll_max", -1)
    with pytest.raises(ValueError, match="unroll_max must be an integer >= 0"):
        config.update("unroll_max", 2.5)
    with pytest.raises(ValueError, match="value_checks must be a bool"):
        config.update("value_checks", None)
    with pytest.raises(ValueError, match="unknown switch"):
        config.get("nope")


def test_environment_variables_read_at_import():
    code = (
        "from jaxdyn import config; "
        "print(config.get('value_checks'), config.get('analytic_derivatives'), "
        "config.get('unroll_max'))"
    )
    env = dict(
        os.environ,
        JAXDYN_VALUE_CHECKS="0",
        JAXDYN_ANALYTIC_DERIVATIVES="false",
        JAXDYN_UNROLL_MAX="7",
    )
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "7"]
    env["JAXDYN_UNROLL_MAX"] = "many"
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode != 0 and "JAXDYN_UNROLL_MAX='many' is invalid" in r.stderr


def test_fused_cpu_loops_flags():
    """The XLA_FLAGS that fused_cpu_loops writes: its options in front (XLA stops reading at
    the first word that is not a --flag, such as TensorFlow's intra_op_parallelism_threads=1),
    merged into an existing --xla_backend_extra_options, a threshold replaced, the ISA and
    YNNPACK flags not repeated; and the call refused once JAX's backend runs (as here)."""
    opt = "--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold="
    out = xla_flags.with_loop_option("--xla_cpu_multi_thread_eigen=false intra_op=1", 100)
    words = out.split()
    assert words[0] == opt + "100"
    assert words[-2:] == ["--xla_cpu_multi_thread_eigen=false", "intra_op=1"]
    assert set(config.FUSED_LOOP_FLAGS) <= set(words[:3])
    assert xla_flags.loop_bytes(out) == 100 and xla_flags.loop_bytes("--a=1 b") == 0
    merged = xla_flags.with_loop_option(
        "--xla_backend_extra_options=foo,xla_cpu_small_while_loop_byte_threshold=5 "
        "--xla_cpu_max_isa=SSE4_2",
        7,
    )
    assert "--xla_backend_extra_options=foo,xla_cpu_small_while_loop_byte_threshold=7" in (
        merged.split()
    )
    assert merged.count("xla_cpu_max_isa") == 1 and "SSE4_2" in merged
    assert xla_flags.loop_bytes(merged) == 7
    jnp.zeros(1).block_until_ready()  # the backend runs
    with pytest.raises(RuntimeError, match="already running"):
        config.fused_cpu_loops()
    # the flags already in XLA_FLAGS (a child process of a fused one): nothing to do, no probe
    old = os.environ.get("XLA_FLAGS")
    try:
        os.environ["XLA_FLAGS"] = xla_flags.with_loop_option("", 1 << 30)
        config.fused_cpu_loops()
    finally:
        if old is None:
            del os.environ["XLA_FLAGS"]
        else:
            os.environ["XLA_FLAGS"] = old
    for bad in (0, -1, 1.5, True, "big"):
        with pytest.raises(ValueError, match="max_bytes must be a positive int"):
            config.fused_cpu_loops(bad)


def test_fast_cpu_compile_flags():
    """The XLA flag of fast_cpu_compile: added in front of XLA_FLAGS unless the user set that
    flag (their value wins), removed again by ``False``; a bad argument named."""
    flag = xla_flags.FAST_COMPILE_FLAGS[0]
    assert xla_flags.with_fast_compile("--a=1 b") == f"{flag} --a=1 b"
    assert xla_flags.with_fast_compile(f"--a=1 {flag}") == f"--a=1 {flag}"
    user = flag.replace("=false", "=true")
    assert xla_flags.with_fast_compile(user) == user
    assert xla_flags.without_fast_compile(f"{flag} --a=1") == "--a=1"
    assert xla_flags.without_fast_compile(user) == user
    with pytest.raises(ValueError, match="enabled must be a bool"):
        config.fast_cpu_compile("yes")


def test_fast_cpu_compile_at_import():
    """A fresh process: importing jaxdyn puts the flag into XLA_FLAGS (on a measured jaxlib),
    ``fast_cpu_compile(False)`` takes it out before JAX starts, ``True`` puts it back; once the
    backend runs, no change is fine and a change is refused (XLA read its flags; the flag is
    put in by hand for that, so that a jaxlib without it is tested too)."""
    code = (
        "import os, jaxdyn, jax.numpy as jnp\n"
        "from jaxdyn import config\n"
        "from jaxdyn.backend import xla_flags as x\n"
        "on = x.fast_compile_supported()\n"
        "print(x.fast_compile_set() == on, config.fast_cpu_compile(False), "
        "config.fast_cpu_compile(True) == on)\n"
        "jnp.zeros(1).block_until_ready()\n"
        "print(config.fast_cpu_compile(True) == on)\n"
        "os.environ['XLA_FLAGS'] = x.FAST_COMPILE_FLAGS[0]\n"
        "try:\n    config.fast_cpu_compile(False)\n"
        "except RuntimeError as e:\n    print('refused', 'already running' in str(e))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAXDYN_FAST_CPU_COMPILE")}
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False", "True", "True", "refused", "True"]


def test_fused_cpu_loops_env_after_jax_started_warns():
    """JAXDYN_FUSED_CPU_LOOPS=1 with JAX already running when jaxdyn is imported: a warning
    that says the flags were ignored, not an import error; the loops are not reported fused."""
    code = (
        "import warnings, jax.numpy as jnp; jnp.zeros(1).block_until_ready(); "
        "warnings.simplefilter('error', RuntimeWarning)\n"
        "try:\n    import jaxdyn\n"
        "except RuntimeWarning as w:\n    print('warned', 'ignored' in str(w))"
    )
    env = dict(os.environ, JAXDYN_FUSED_CPU_LOOPS="1")
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["warned", "True"]


def test_fused_program_is_one_kernel(monkeypatch):
    """jaxdyn.backend.fused_programs: off in the test suite (its switch ``trajopt_fused_loops``,
    ``"auto"`` by default: test_fused_program_in_the_background); asked for, a function called
    with arrays compiles into one XLA:CPU kernel (a call tagged ``xla_cpu_small_call``,
    per-program options: no YNNPACK fusion) and returns what the plain function returns; traced
    inside a caller's jit, or with its switch off, the plain function runs. XLA's default
    compiles the same loop as a while loop of one kernel per operation (its own small-loop
    threshold is far below this loop's bytes)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxdyn.backend import fused_programs

    calls = []

    def loop(x, n):
        def body(c, _):
            c = jnp.tanh(c[::-1] @ jnp.ones((8, 8)) * 0.1 + c) * 0.9
            return c, c

        return jax.lax.scan(body, x, None, length=n)

    def fallback(x, n):
        calls.append("plain")
        return jax.jit(loop, static_argnums=1)(x, n)

    f = fused_programs.fused_jit(loop, fallback, "trajopt_fused_loops")
    x = jnp.linspace(-1.0, 1.0, 8)
    ref = jax.jit(loop, static_argnums=1)(x, 2000)
    assert not jaxdyn.config.get("trajopt_fused_loops")  # off in the suite: the plain program
    f(x, 3)
    assert calls == ["plain"]
    calls.clear()
    if not fused_programs.supported():  # an older jaxlib: the plain program even when asked
        with jaxdyn.config.override(trajopt_fused_loops=True):
            f(x, 3)
        assert calls == ["plain"]
        return
    monkeypatch.setitem(jaxdyn.config._values, "trajopt_fused_loops", True)
    hlo = f.lower(x, 2000).compile().as_text()
    assert any(" call(" in ln and 'xla_cpu_small_call="true"' in ln for ln in hlo.splitlines())
    plain_hlo = jax.jit(loop, static_argnums=1).lower(x, 2000).compile().as_text()
    assert "xla_cpu_small_call" not in plain_hlo  # the loop is too large for XLA's default
    out = f(x, 2000)
    assert calls == []
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ref)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-14, atol=1e-15)
    jax.jit(lambda y: f(y, 3)[0])(x)  # a tracer: the caller's program
    assert calls == ["plain"]
    with jaxdyn.config.override(trajopt_fused_loops=False):
        f(x, 3)
    assert calls == ["plain", "plain"]


def test_trajopt_fused_loops_values(monkeypatch):
    """``trajopt_fused_loops``: ``"auto"`` by default (the test suite sets
    ``JAXDYN_TRAJOPT_FUSED_LOOPS=0``), ``"auto"`` or a boolean from the environment variable and
    :func:`jaxdyn.config.update`; anything else named in the error."""
    assert config.SWITCHES["trajopt_fused_loops"][1] == "auto"
    for raw, want in (("auto", "auto"), (" AUTO ", "auto"), ("1", True), ("off", False)):
        monkeypatch.setenv("JAXDYN_TRAJOPT_FUSED_LOOPS", raw)
        assert config._from_env("trajopt_fused_loops") == want
    monkeypatch.delenv("JAXDYN_TRAJOPT_FUSED_LOOPS")
    assert config._from_env("trajopt_fused_loops") == "auto"
    config.update("trajopt_fused_loops", "Auto")
    assert config.get("trajopt_fused_loops") == "auto"
    config.update("trajopt_fused_loops", True)
    assert config.get("trajopt_fused_loops") is True
    with pytest.raises(ValueError, match="trajopt_fused_loops must be 'auto' or a bool"):
        config.update("trajopt_fused_loops", 2.5)


class _InlineChild:
    """``fused_programs._Child`` run in this process (the child's own code,
    ``_fused_compile.compile_payload``, on the payload), or a given ``(rc, stdout)``."""

    fused = None
    result = None
    started = 0
    over_memory = False

    def __init__(self, payload, out_tree, n_in):
        import threading

        from jaxdyn.backend import _fused_compile

        type(self).started += 1
        self.out_tree, self.n_in = out_tree, n_in
        self.done = threading.Event()
        if type(self).result is not None:
            rc, out = type(self).result
            self.result = (rc, out, b"RuntimeError: refused")
        else:
            self.result = (0, _fused_compile.compile_payload(payload, fused=type(self).fused), b"")
        self.done.set()


def test_fused_program_in_the_background(monkeypatch):
    """Switch ``"auto"``: the first call of a structure runs the plain function and starts a
    compile of the fused program (here in this process: test_fddp_background_fused for the
    child process); a later call runs the fused executable, with the plain function's values;
    another structure (another length) starts again. A failure at any step (the compile, an
    executable that does not load or run, arguments that do not pickle) or a fused program
    slower than the plain one keeps that structure on the plain function and starts nothing
    more for it; inside a caller's jit: the plain function.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxdyn.backend import fused_programs

    calls = []

    def loop(x, n, act=jnp.tanh):
        def body(c, _):
            c = act(c[::-1] @ jnp.ones((8, 8)) * 0.1 + c) * 0.9
            return c, c

        return jax.lax.scan(body, x, None, length=n)

    def fallback(x, n, act=jnp.tanh):
        calls.append("plain")
        return jax.jit(loop, static_argnums=(1, 2))(x, n, act)

    f = fused_programs.fused_jit(loop, fallback, "trajopt_fused_loops", "test:f")
    monkeypatch.setattr(fused_programs, "_Child", _InlineChild)
    monkeypatch.setattr(_InlineChild, "fused", f)
    monkeypatch.setattr(_InlineChild, "result", None)
    monkeypatch.setattr(_InlineChild, "started", 0)
    monkeypatch.setitem(config._values, "trajopt_fused_loops", "auto")  # no cache clear
    x = jnp.linspace(-1.0, 1.0, 8)
    if fused_programs.supported():  # the default: a structure's second call starts the compile
        assert fused_programs.START_AFTER > 3
        _InlineChild.result = (1, b"")  # (not compiled: only the start is checked here)
        for _ in range(fused_programs.START_AFTER - 1):
            f(x, 4)
        assert _InlineChild.started == 0 and not f.pending
        f(x, 4)
        assert _InlineChild.started == 1 and len(f.pending) == 1
        f.pending.clear()
        calls.clear()
        _InlineChild.started, _InlineChild.result = 0, None
    monkeypatch.setattr(fused_programs, "START_AFTER", 1)  # below: the first call starts it
    if not fused_programs.supported():  # an older jaxlib: the plain function, nothing started
        f(x, 3)
        f(x, 3)
        assert calls == ["plain", "plain"] and _InlineChild.started == 0 and not f.pending
        return
    ref = jax.jit(loop, static_argnums=1)(x, 300)
    first = f(x, 300)
    assert calls == ["plain"] and _InlineChild.started == 1 and len(f.pending) == 1
    # the compiled fused program, loaded, run twice against the plain one twice, and kept (the
    # timing rule made deterministic here)
    monkeypatch.setattr(fused_programs.FusedJit, "keep_fused", staticmethod(lambda a, b: True))
    out = f(x, 300)
    assert calls == ["plain"] * 3 and len(f.ready) == 1 and not f.pending
    calls.clear()
    calls.append("plain")
    for a, b, c in zip(jax.tree.leaves(out), jax.tree.leaves(ref), jax.tree.leaves(first)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(np.asarray(c), np.asarray(b), rtol=1e-14, atol=1e-15)
    (key,) = f.ready
    assert 'xla_cpu_small_call="true"' in f.ready[key].as_text()  # the one-kernel program
    f(x, 300)
    assert calls == ["plain"] and _InlineChild.started == 1
    jax.jit(lambda y: f(y, 3)[0])(x)  # a tracer: the caller's program, no compile started
    assert calls == ["plain", "plain"] and _InlineChild.started == 1
    calls.clear()

    # failures: a refused compile, an executable that does not load
    for result in ((1, b""), (0, (1).to_bytes(8, "little") + b"not an executable")):
        _InlineChild.result = result
        n = 7 + len(f.failed)
        f(x, n)
        f(x, n)
        f(x, n)
        assert calls == ["plain"] * 3 and len(f.failed) == (1 if result[0] else 2)
        calls.clear()
    assert _InlineChild.started == 3 and len(f.ready) == 1
    # a fused program that runs slower than the plain one is dropped
    _InlineChild.result = None
    monkeypatch.setattr(fused_programs.FusedJit, "keep_fused", staticmethod(lambda a, b: False))
    f(x, 11)
    slow = f(x, 11)
    f(x, 11)
    assert calls == ["plain"] * 4 and len(f.ready) == 1 and "ran slower" in str(f.failed)
    np.testing.assert_array_equal(np.asarray(slow[0]), np.asarray(f(x, 11)[0]))
    calls.clear()
    # an executable that loads but does not run: its first run raises in the call, plain then
    _InlineChild.result = None

    def broken(dyn):
        raise RuntimeError("NOT_FOUND: Function kernel not found")

    monkeypatch.setattr(f, "_load", lambda key, child: broken)
    f(x, 9)
    f(x, 9)
    f(x, 9)
    assert calls == ["plain"] * 3 and len(f.failed) == 4 and "did not run" in str(f.failed)
    calls.clear()
    # arguments that do not pickle (a static lambda): no compile started
    act = lambda c: jnp.tanh(c)  # noqa: E731
    f(x, 5, act=act)
    f(x, 5, act=act)
    assert calls == ["plain", "plain"] and _InlineChild.started == 5 and len(f.failed) == 5


def test_background_compile_memory_limit(monkeypatch):
    """A background compile's child (a real process) whose resident memory passes
    ``fused_programs.child_memory_limit()`` is killed, and the structure stays on the plain
    function with the reason recorded (here a limit of one byte: killed at once)."""
    import jax.numpy as jnp

    from jaxdyn.backend import fused_programs

    if not fused_programs.supported() or not os.path.exists("/proc/self/status"):
        pytest.skip("no background compile on this jaxlib, or no /proc to read memory from")
    calls = []

    def fallback(x):
        calls.append("plain")
        return x + 1.0

    f = fused_programs.fused_jit(lambda x: x + 1.0, fallback, "trajopt_fused_loops", "x:y")
    monkeypatch.setattr(fused_programs, "CHILD_MEMORY", 1)
    monkeypatch.setattr(fused_programs, "START_AFTER", 1)
    monkeypatch.setitem(config._values, "trajopt_fused_loops", "auto")  # no cache clear
    x = jnp.ones(3)
    f(x)
    assert fused_programs.wait(60)
    f(x)
    f(x)
    assert calls == ["plain"] * 3 and not f.ready
    (why,) = f.failed.values()
    assert "stopped above" in why, why


def test_fused_program_under_single_threaded_eigen(monkeypatch):
    """``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false`` (XLA:CPU then writes small matrix
    products as tiled LLVM IR GEMMs, and arm7's one-kernel FDDP solve took past 16 GB to
    compile): a fused program asked for in this process is compiled by a child process
    (here its code run inline, ``_InlineChild``) started without the flag, the rest of
    ``XLA_FLAGS`` kept, once per structure, and gives the plain function's values; where that
    child fails, the plain function runs, with one warning naming the flag."""
    import warnings

    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxdyn.backend import fused_programs

    assert fused_programs.eigen_single_threaded("--a=1 --xla_cpu_multi_thread_eigen=false")
    assert fused_programs.eigen_single_threaded("--xla_cpu_multi_thread_eigen=0")
    assert not fused_programs.eigen_single_threaded("--xla_cpu_multi_thread_eigen=true")
    assert not fused_programs.eigen_single_threaded("--xla_cpu_max_isa=AVX2")
    assert (
        fused_programs.without_eigen_flag("--a=1 --xla_cpu_multi_thread_eigen=false --b=2")
        == "--a=1 --b=2"
    )
    if not fused_programs.supported():
        pytest.skip("no fused programs on this jaxlib")
    calls = []

    def loop(x):
        return jax.lax.fori_loop(0, 5, lambda i, c: jnp.tanh(c @ jnp.ones((3, 3)) * 0.1), x)

    def fallback(x):
        calls.append("plain")
        return jax.jit(loop)(x)

    f = fused_programs.fused_jit(loop, fallback, "trajopt_fused_loops", "x:y")
    flags = os.environ.get("XLA_FLAGS", "")
    monkeypatch.setenv("XLA_FLAGS", f"{flags} --xla_cpu_multi_thread_eigen=false".strip())
    real_child = fused_programs._Child
    monkeypatch.setattr(_InlineChild, "fused", f)
    monkeypatch.setattr(_InlineChild, "started", 0)
    monkeypatch.setattr(fused_programs, "_Child", _InlineChild)
    x = jnp.linspace(-1.0, 1.0, 3)
    ref = jax.jit(loop)(x)
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(f.call(True, x)), np.asarray(ref), rtol=1e-14)
    assert calls == [] and _InlineChild.started == 1 and len(f.ready) == 1

    envs = []  # the real child's environment

    def popen(args, env=None, **kw):
        envs.append(env)
        raise OSError("not started (test)")

    monkeypatch.setattr(fused_programs, "_Child", real_child)
    monkeypatch.setattr(fused_programs.subprocess, "Popen", popen)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        f.call(True, jnp.ones((2, 3)))
        f.call(True, jnp.ones((2, 3)))
    assert calls == ["plain", "plain"]
    assert len(envs) == 1 and envs[0]["XLA_FLAGS"] == flags.strip()
    msgs = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "--xla_cpu_multi_thread_eigen=false" in msgs[0], msgs
    assert "not started (test)" in msgs[0], msgs


#: a fresh process: a new thread allocates three 20 MB blocks with malloc, touches and frees
#: them, four times; the minor page faults of each time (glibc's allocator as jaxdyn leaves it)
_FAULTS = """
import ctypes, resource, threading
import jaxdyn
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
N = 20 << 20
def work():
    ps = [libc.malloc(N) for _ in range(3)]
    for p in ps:
        ctypes.memset(p, 1, N)
    for p in ps:
        libc.free(p)
def faults():
    r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = threading.Thread(target=work)
    t.start()
    t.join()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0
print(jaxdyn.backend.allocator.keeping_freed_buffers(), *[faults() for _ in range(4)])
"""


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or jaxdyn.backend.allocator._glibc() is None,
    reason="glibc only: jaxdyn leaves other C libraries' allocators alone",
)
def test_keep_freed_buffers_at_import():
    """glibc: importing jaxdyn keeps freed buffers for reuse. Three 20 MB blocks allocated by a
    new thread (as XLA's threads allocate a batch's outputs), touched and freed, fault their
    60 MB in (about 15,000 pages) every time with glibc's defaults
    (``JAXDYN_KEEP_FREED_BUFFERS=0``: every time, the control) and the first time only with
    jaxdyn's settings; a parameter the environment sets is left as set
    (``MALLOC_MMAP_THRESHOLD_=131072``: each block mapped afresh, faults every time)."""

    def run(**env_vars):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        env.pop("GLIBC_TUNABLES", None)
        env.pop("JAXDYN_KEEP_FREED_BUFFERS", None)
        r = subprocess.run(
            [sys.executable, "-c", _FAULTS],
            env=dict(env, **env_vars),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        on, *faults = r.stdout.split()
        return on, [int(f) for f in faults]

    pages = 3 * (20 << 20) // os.sysconf("SC_PAGE_SIZE")
    on, faults = run()
    assert on == "True" and faults[0] >= pages // 2 and max(faults[1:]) < pages // 20, faults
    on, faults = run(JAXDYN_KEEP_FREED_BUFFERS="0")
    assert on == "False" and min(faults[1:]) >= pages // 2, faults
    on, faults = run(MALLOC_MMAP_THRESHOLD_="131072")
    assert on == "True" and min(faults[1:]) >= pages // 2, faults


def test_keep_freed_buffers_switch():
    """``keep_freed_buffers``: a bad argument named; off and on again say so (glibc), and off
    glibc it does nothing and says ``False``."""
    from jaxdyn.backend import allocator

    with pytest.raises(ValueError, match="enabled must be a bool"):
        config.keep_freed_buffers(1)
    glibc = allocator._glibc() is not None
    try:
        assert config.keep_freed_buffers(False) is False
        assert allocator.keeping_freed_buffers() is False
        assert config.keep_freed_buffers(True) is glibc
        assert allocator.keeping_freed_buffers() is glibc
    finally:
        config.keep_freed_buffers(True)

"""jaxdyn.vmap (chunked batching) equals jax.vmap; the benchmark harness runs end to end."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import robots
from jaxdyn.backend import small_calls


@pytest.fixture(scope="module")
def quad():
    m = robots.load("quad12")
    B = 37  # not a multiple of the chunk: the remainder path is exercised
    q = jax.vmap(lambda k: jaxdyn.random_configuration(m, k))(
        jax.random.split(jax.random.PRNGKey(3), B)
    )
    v = jax.random.normal(jax.random.PRNGKey(4), (B, m.nv))
    return m, q, v


def _aba(model, q, v):
    return jaxdyn.aba(model, q, v, v)


@pytest.fixture(scope="module")
def aba_ref(quad):
    """``aba`` over ``quad``'s batch as one ``jax.vmap`` (no chunk loop: ``vmap_chunk=0``),
    compiled once for the tests below (each compiled its own copy)."""
    m, q, v = quad
    with jaxdyn.config.override(vmap_chunk=0):
        return np.asarray(jax.jit(jax.vmap(_aba, in_axes=(None, 0, 0)))(m, q, v))


def _crba_outputs(model, q, v):
    """Two outputs of one shape, an integer and a boolean output (the chunk loop's buffers)."""
    M = jaxdyn.crba(model, q)
    return {"M": M, "M2": 2.0 * M, "i": jnp.argmax(v), "b": v > 0}


@pytest.fixture(scope="module")
def crba_outputs_ref(quad):
    """:func:`_crba_outputs` over ``quad``'s batch as one ``jax.vmap``, compiled once."""
    m, q, v = quad
    with jaxdyn.config.override(vmap_chunk=0):
        out = jax.jit(jax.vmap(_crba_outputs, in_axes=(None, 0, 0)))(m, q, v)
        return jax.tree_util.tree_map(np.asarray, out)


@pytest.mark.parametrize("chunk", [8, None])
def test_chunked_vmap_equals_vmap(quad, aba_ref, chunk):
    m, q, v = quad
    ref = aba_ref
    out = jax.jit(jaxdyn.vmap(_aba, in_axes=(None, 0, 0), chunk_size=chunk))(m, q, v)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("chunk", [8, 37, 64])
def test_chunked_vmap_pytrees_and_equal_chunks(quad, aba_ref, chunk):
    """Pytree arguments and outputs; the batch is cut into equal chunks like the batching
    rule's (37 samples in chunks of at most 8: 5 chunks of 8, the last overlapping the fourth by
    3 samples), and a batch that fits in one chunk is one vmap."""
    from jaxdyn import batching

    m, q, v = quad

    def f(model, state):
        return {"qdd": jaxdyn.aba(model, state["q"], state["v"], state["v"]), "q": state["q"]}

    state = {"q": q, "v": v}
    ref = {"qdd": aba_ref, "q": q}  # jax.vmap(f): one vmap of aba, q passed through
    with jaxdyn.config.override(vmap_chunk=0):  # no loops of aba's own rule in the jaxpr
        jaxpr = jax.make_jaxpr(jaxdyn.vmap(f, in_axes=(None, 0), chunk_size=chunk))(m, state)
    out = jax.jit(jaxdyn.vmap(f, in_axes=(None, 0), chunk_size=chunk))(m, state)
    for k in ref:
        assert out[k].shape == ref[k].shape
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-12, atol=1e-12)
    loops = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]
    n, size, pad = batching.chunk_split(q.shape[0], chunk)
    if chunk < q.shape[0]:
        assert (n, size, pad) == (5, 8, 3)
        assert len(loops) == 1 and loops[0].params["length"] == n  # no remainder program
    else:
        assert not loops


def test_chunk_loop_outputs_of_one_shape_dtypes_and_reverse_mode(quad):
    """The chunk loop stacks each output in a buffer of its own (two outputs of one shape, an
    integer and a boolean output; the buffers start uninitialized, or filled with different
    constants, and every chunk overwrites its part, the overlap of the last chunk included:
    the outputs are compared with one vmap's in test_chunk_loop_buffers_start_uninitialized,
    with the buffers uninitialized and filled), and reverse mode goes through it."""
    m, q, v = quad

    def loss(vm, q, v):
        y = vm(lambda model, q, v: jaxdyn.aba(model, q, v, v), in_axes=(None, 0, 0))(m, q, v)
        return jnp.sum(y**2)

    g = jax.jit(jax.grad(lambda v: loss(jax.vmap, q, v)))(v)
    gc = jax.jit(jax.grad(lambda v: loss(lambda f, in_axes: jaxdyn.vmap(f, in_axes, 8), q, v)))(v)
    np.testing.assert_allclose(gc, g, rtol=1e-10, atol=1e-10)


_UNINIT_CALL = 'custom_call_target="jaxdyn_uninitialized"'


def test_chunk_loop_buffers_start_uninitialized(quad, crba_outputs_ref, tmp_path):
    """On the CPU the chunk loop's output buffers come from a no-op XLA FFI call
    (``jaxdyn.backend.ffi``) instead of a fill: one call per output (two outputs of one shape
    stay two buffers), results equal to the filled buffers' and to one ``vmap``; the switch
    off, under ``jax.export`` and for other platforms the buffers are filled (no call in the
    program); a missing or failing compiler is an error that names it."""
    import shutil

    from jax import export

    from jaxdyn.backend import ffi as U

    m, q, v = quad
    f = _crba_outputs
    jf = jax.jit(jaxdyn.vmap(f, in_axes=(None, 0, 0), chunk_size=8))
    ref = crba_outputs_ref
    calls = []
    for on in (True, False):
        with jaxdyn.config.override(uninitialized_outputs=on):
            compiled = jf.lower(m, q, v).compile()
            calls.append(compiled.as_text().count(_UNINIT_CALL))
            out = compiled(m, q, v)
        for k in ref:
            assert out[k].dtype == ref[k].dtype and out[k].shape == ref[k].shape, k
            np.testing.assert_array_equal(out[k], ref[k], err_msg=k)
    if shutil.which(os.environ.get("CC") or "cc") is None:
        assert not U.available() and "no C compiler" in U.status()
    else:
        assert U.available(), U.status()
    assert calls == [4 if U.available() else 0, 0]
    # op by op (no jit): filled
    _close(jaxdyn.vmap(f, in_axes=(None, 0, 0), chunk_size=8)(m, q, v), ref)
    # a serialized program must not name a handler only this process registered
    with jaxdyn.config.override(value_checks=False):
        g = jax.jit(jaxdyn.vmap(lambda q: jaxdyn.crba(m, q), chunk_size=8))
        exp = export.export(g)(q)
        assert "stablehlo.while" in exp.mlir_module()
        assert "jaxdyn_uninitialized" not in exp.mlir_module().split("loc(")[0]
        assert "custom_call" not in exp.mlir_module()
        _close(exp.call(q), ref["M"])
        low = g.trace(q).lower(lowering_platforms=("cuda",)).as_text()
        assert "stablehlo.while" in low and "custom_call" not in low
    with pytest.raises(RuntimeError, match="no C compiler"):
        U.build(cc="no-such-compiler-jaxdyn", directory=tmp_path)
    with pytest.raises(RuntimeError, match="failed"):
        U.build(cc="false", directory=tmp_path)
    assert not list(tmp_path.iterdir())  # no half-written library left behind
    if U.available():
        with pytest.raises(RuntimeError, match="failed"):  # flags in CC reach the compiler
            U.build(cc=(os.environ.get("CC") or "cc") + " --no-such-flag", directory=tmp_path)
        # an unwritable cache: built under the temporary directory instead
        (tmp_path / "file").write_text("")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("JAXDYN_CACHE_DIR", str(tmp_path / "file" / "cache"))
            assert U.build().parent == U._temp_dir()


def test_handler_background_build_not_started_when_built(monkeypatch):
    """:func:`jaxdyn.backend.ffi.build_in_background` starts nothing where the handlers and
    the kernels are compiled already (found in the cache) or the environment turns it off."""
    import shutil

    from jaxdyn.backend import ffi as U

    if shutil.which(os.environ.get("CC") or "cc") is None:
        pytest.skip("no C compiler: the handler is never built")
    assert U.available(), U.status()
    assert U.kernels_available(), U.kernel_status()
    assert U._built() is not None and U._built(U.KERNELS) is not None
    assert U.build_in_background() is False
    # a later build() does not wait for ever
    assert not U._build_lock.locked() and not U.KERNELS.lock.locked()
    monkeypatch.setenv("JAXDYN_BUILD_HANDLER", "0")
    assert U.build_in_background() is False
    U.build()  # found, returns at once
    U.build_kernels()


def test_kernel_build_timeout_and_exit_leave_nothing(tmp_path, monkeypatch):
    """A kernels' compile that runs past ``COMPILE_TIMEOUT`` fails the build at once, without
    the fallback flags (those are for a compiler that refuses the first, and compile more: a
    loaded machine's timed-out build then took thrice as long), and leaves no file; a process
    that exits during a build removes the library's temporary file too (it left an empty one
    in the cache), not only the compilers' outputs."""
    import sys

    from jaxdyn.backend import ffi as U

    if sys.platform == "win32":
        pytest.skip("a shell script as the compiler")
    log, out = tmp_path / "calls", tmp_path / "cache"
    cc = tmp_path / "slow-cc"  # records its arguments, then sleeps (exec: the kill reaches it)
    cc.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec sleep 30\n')
    cc.chmod(0o755)
    monkeypatch.setattr(U, "COMPILE_TIMEOUT", 0.5)
    monkeypatch.setattr(U.KERNELS, "flags", lambda: [["-O3", "-DFIRST"], ["-O3"]])
    monkeypatch.setattr(U, "_compiling", {})  # this test's, not a background build's
    monkeypatch.setattr(U, "_temporaries", set())
    with pytest.raises(RuntimeError, match="timed out after"):
        U._build(U.KERNELS, str(cc), out)
    calls = log.read_text().splitlines()
    # one compile per core at a time, none started after the timeout
    assert 1 <= len(calls) <= U.KERNEL_PARTS and all("-DFIRST" in c for c in calls), calls
    assert not list(out.iterdir()) and not U._compiling and not U._temporaries

    seen = []

    def compile_then_exit(library, exe, include, flags, tmp, lib):
        seen.append((tmp in U._temporaries, os.path.exists(tmp)))
        U._stop_compiles()  # what the exit runs, the build under way
        seen.append(os.path.exists(tmp))
        raise RuntimeError("stopped")

    monkeypatch.setattr(U, "_compile", compile_then_exit)
    with pytest.raises(RuntimeError, match="stopped"):
        U._build(U.KERNELS, str(cc), out)
    assert seen == [(True, True), False] and not list(out.iterdir())


def test_background_compiles_run_below_the_process_priority(tmp_path, monkeypatch):
    """The compiles of :func:`jaxdyn.backend.ffi.build_in_background` run ``BACKGROUND_NICE``
    below the process (so that they take what its tracing and XLA leave on a machine with few
    cores); a build that the caller waits for runs at the process's own priority."""
    import shutil
    import sys

    from jaxdyn.backend import ffi as U

    if sys.platform == "win32" or shutil.which("nice") is None:
        pytest.skip("no nice")
    monkeypatch.setattr(U, "_compiling", {})
    monkeypatch.setattr(U.KERNELS, "flags", lambda: [["-O3"]])
    own = os.nice(0)

    def cc(n):
        """A compiler's stand-in: writes its ``-o`` output (every part and the link) at
        exactly niceness ``n``, else fails with a message."""
        path = tmp_path / f"cc{n}"
        path.write_text(
            "#!/bin/sh\n"
            f'test "$(nice)" -eq {n} || {{ echo "niceness $(nice)" >&2; exit 3; }}\n'
            'while [ $# -gt 1 ]; do [ "$1" = -o ] && : > "$2"; shift; done\n'
        )
        path.chmod(0o755)
        return str(path)

    assert U.BACKGROUND_NICE > 0
    low = min(own + U.BACKGROUND_NICE, 19)
    assert U._build(U.KERNELS, cc(low), tmp_path / "a", background=True).is_file()
    assert U._build(U.KERNELS, cc(own), tmp_path / "b").is_file()
    if low != own:  # (a process already at the lowest priority cannot go lower)
        with pytest.raises(RuntimeError, match=f"niceness {low}"):
            U._build(U.KERNELS, cc(own), tmp_path / "c", background=True)


_BACKGROUND = """
import os, sys, threading
import jaxdyn
from jaxdyn.backend import ffi
started = any(t.name == "jaxdyn-ffi-build" for t in threading.enumerate())
print("started", started, flush=True)
if sys.argv[1] == "exit":
    sys.exit(0)  # a normal exit, the compiler still running
print("available", ffi.available(), ffi.status(), flush=True)
print("library", ffi.build().parent == ffi.cache_dir(), flush=True)
print("kernels", ffi.kernels_expected(), ffi.kernels_available(), ffi.kernel_status(), flush=True)
print("kernel library", ffi.build_kernels().parent == ffi.cache_dir(), flush=True)
"""


@pytest.mark.slow
def test_handler_builds_in_background_at_import(tmp_path):
    """A process without the compiled handlers and kernels starts their compile when jaxdyn is
    imported (a thread beside the imports and tracing); the first program that needs either
    waits for that build and finds its library in the cache; a process that exits while the
    compiler runs stops it and leaves no half-written library."""
    import shutil
    import subprocess
    import sys

    if shutil.which(os.environ.get("CC") or "cc") is None:
        pytest.skip("no C compiler: the handler is never built")

    # the exiting process's compiler: slow (a shell that sleeps first), so that it still runs
    # at the exit whatever the machine's load (the handlers alone compile in a tenth of a
    # second); SIGTERM ends the shell during its sleep
    slow = tmp_path / "slow-cc"
    slow.write_text(f'#!/bin/sh\nsleep 30\nexec {os.environ.get("CC") or "cc"} "$@"\n')
    slow.chmod(0o755)

    def run(what, cache):
        env = dict(os.environ, JAXDYN_CACHE_DIR=str(cache), TMPDIR=str(tmp_path / "tmp"))
        env.pop("JAXDYN_BUILD_HANDLER", None)
        if what == "exit":
            env["CC"] = str(slow)
        (tmp_path / "tmp").mkdir(exist_ok=True)
        r = subprocess.run(
            [sys.executable, "-c", _BACKGROUND, what], env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout

    out = run("exit", tmp_path / "a")
    assert "started True" in out
    left = list((tmp_path / "a").glob("*.so"))
    assert not left, left  # stopped at exit: neither a library nor its temporary file
    out = run("build", tmp_path / "b")
    assert "started True" in out and "available True registered" in out, out
    assert "library True" in out and "kernels True True registered" in out, out
    assert "kernel library True" in out, out
    assert len(list((tmp_path / "b").glob("uninitialized-*.so"))) == 1
    assert len(list((tmp_path / "b").glob("kernels-*.so"))) == 1
    assert not list((tmp_path / "tmp").glob("jaxdyn-*/*.so"))  # not under the temporary dir


def test_chunked_vmap_bad_axes(quad):
    m, q, v = quad
    for bad, err in ((0, ValueError), (-4, ValueError), (2.5, TypeError), (True, TypeError)):
        with pytest.raises(err, match="chunk_size"):
            jaxdyn.vmap(lambda q: q, chunk_size=bad)
    with pytest.raises(ValueError, match="in_axes"):
        jaxdyn.vmap(lambda q: q, in_axes=(0, 0))(q)
    with pytest.raises(ValueError, match="0 or None"):
        jaxdyn.vmap(lambda q: q, in_axes=1)(q)


def test_bench_quick_smoke(tmp_path, capsys, monkeypatch):
    from jaxdyn import cli  # the harness of benchmarks/, run from the checkout

    # in this test worker, not pinned to one core as a benchmark run is (benchmarks/_env.py)
    monkeypatch.setenv("JAXDYN_BENCH_ALL_CORES", "1")
    # the harness adds --xla_cpu_multi_thread_eigen=false to XLA_FLAGS (benchmarks/_env.py's
    # single_threaded): restored after the test, for the worker's later tests (the fused
    # programs of test_config read it)
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", os.environ.get("OPENBLAS_NUM_THREADS", "1"))

    out = tmp_path / "r.md"
    rc = cli.main(
        [
            "bench",
            "--robots",
            "arm7",
            "--algorithms",
            "rnea",
            "--batches",
            "1,8",
            "--dtypes",
            "float64",
            "--repeats",
            "1",
            "--no-mjx",
            "--no-progress",
            "--chunk",
            "4",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    text = out.read_text()
    assert "arm7" in text and "rnea" in text and "Pinocchio" in text


# ------------------------------------------------- the batching rule of the public functions
# Plain ``jax.vmap`` of a public function runs ``vmap`` in chunks on the CPU
# (jaxdyn.batching.batched); with a chunk of 8 and B = 37 the overlapping last chunk is exercised.


def _plain_and_chunked(fn, *args, in_axes):
    """``jax.jit(jax.vmap(fn))`` with the rule off and with chunks of 8, and whether the chunked
    program has the chunk loop (a ``while``) that the plain one lacks."""
    outs, loops = [], []
    for chunk in (0, 8):
        with jaxdyn.config.override(vmap_chunk=chunk):
            jf = jax.jit(jax.vmap(fn, in_axes=in_axes))
            loops.append("stablehlo.while" in jf.lower(*args).as_text())
            outs.append(jf(*args))
    return outs, loops


def _close(a, b, tol=1e-12):
    """Equal to ``tol`` relative to the largest entry of each leaf."""
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        assert x.shape == y.shape
        scale = max(1.0, float(np.max(np.abs(np.asarray(y)))))
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol * scale)


#: kinematics and energy functions: batched too; ``integrate`` (elementwise) is not
_KINEMATICS = (
    "forward_kinematics frame_placement jacobian joint_jacobians center_of_mass kinetic_energy "
    "potential_energy constraint_placements constraint_jacobian constraint_velocity "
    "constraint_drift constraint_error centroidal_dynamics frame_acceleration"
).split()


def _public_fns():
    """name -> (``f(model, q, v)`` calling the public function, ``in_axes``)."""
    cs = (jaxdyn.Connect("FL_FOOT"), jaxdyn.Connect("HR_FOOT"))
    cs_t = (
        jaxdyn.Connect("FL_FOOT", target=(0.1, 0.0, 0.0)),
        jaxdyn.Weld("HR_FOOT", target=(np.eye(3), (0.0, 0.1, 0.0))),
    )
    C = jaxdyn.constraints
    return {
        "aba": (lambda m, q, v: jaxdyn.aba(m, q, v, v), (None, 0, 0)),
        "minv": (lambda m, q, v: jaxdyn.minv(m, q), (None, 0, None)),
        "crba": (lambda m, q, v: jaxdyn.crba(m, q), (None, 0, None)),
        "coriolis_matrix": (lambda m, q, v: jaxdyn.coriolis_matrix(m, q, v), (None, 0, 0)),
        "rnea_derivatives": (lambda m, q, v: jaxdyn.rnea_derivatives(m, q, v, v), (None, 0, 0)),
        "aba_derivatives": (lambda m, q, v: jaxdyn.aba_derivatives(m, q, v, v), (None, 0, 0)),
        "delassus": (lambda m, q, v: jaxdyn.delassus(m, q, cs), (None, 0, None)),
        "rnea": (lambda m, q, v: jaxdyn.rnea(m, q, v, v), (None, 0, 0)),
        "forward_kinematics": (lambda m, q, v: jaxdyn.forward_kinematics(m, q), (None, 0, None)),
        "frame_placement": (
            lambda m, q, v: jaxdyn.frame_placement(m, q, "FL_FOOT"),
            (None, 0, None),
        ),
        "jacobian": (lambda m, q, v: jaxdyn.jacobian(m, q, "HR_FOOT", "world"), (None, 0, None)),
        "joint_jacobians": (lambda m, q, v: jaxdyn.joint_jacobians(m, q), (None, 0, None)),
        "center_of_mass": (lambda m, q, v: jaxdyn.center_of_mass(m, q), (None, 0, None)),
        "kinetic_energy": (lambda m, q, v: jaxdyn.kinetic_energy(m, q, v), (None, 0, 0)),
        "potential_energy": (lambda m, q, v: jaxdyn.potential_energy(m, q), (None, 0, None)),
        "constraint_placements": (
            lambda m, q, v: C.constraint_placements(m, q, cs),
            (None, 0, None),
        ),
        "constraint_jacobian": (lambda m, q, v: C.constraint_jacobian(m, q, cs), (None, 0, None)),
        "constraint_velocity": (lambda m, q, v: C.constraint_velocity(m, q, v, cs), (None, 0, 0)),
        "constraint_drift": (lambda m, q, v: C.constraint_drift(m, q, v, cs), (None, 0, 0)),
        "constraint_error": (lambda m, q, v: C.constraint_error(m, q, cs_t), (None, 0, None)),
        "integrate": (lambda m, q, v: jaxdyn.integrate(m, q, v), (None, 0, 0)),
        "centroidal_dynamics": (lambda m, q, v: jaxdyn.centroidal_dynamics(m, q, v), (None, 0, 0)),
        "frame_acceleration": (
            lambda m, q, v: jaxdyn.frame_acceleration(m, q, v, v, "FL_FOOT", classical=True),
            (None, 0, 0),
        ),
    }


def _public(name):
    return getattr(jaxdyn, name, None) or getattr(jaxdyn.constraints, name)


@pytest.mark.parametrize(
    "name",
    [
        "aba",
        "minv",
        "crba",
        "coriolis_matrix",
        "rnea_derivatives",
        "aba_derivatives",
        "delassus",
        "rnea",
    ],
)
def test_plain_vmap_runs_chunked_and_equals_vmap(quad, name):
    """The functions that declare a chunk policy (``chunk_words``) run chunked under plain
    ``jax.vmap`` (a chunk loop in the program) with the results of one ``vmap``; the others
    stay one ``vmap`` (test_plain_vmap_of_kinematics_runs_chunked: ``integrate``)."""
    m, q, v = quad
    fn, axes = _public_fns()[name]
    (plain, chunked), (loop_plain, loop_chunked) = _plain_and_chunked(fn, m, q, v, in_axes=axes)
    assert not loop_plain
    assert _public(name).chunk_words is not None
    assert loop_chunked
    _close(chunked, plain)


def test_plain_vmap_of_kinematics_runs_chunked(quad):
    """test_plain_vmap_runs_chunked_and_equals_vmap for the kinematics and energy functions and
    ``integrate``, in one program per mode (each was two compiles of its own): the chunked
    program has one chunk loop per function with a chunk policy (``integrate``, elementwise,
    has none), the plain one none, and the results are one ``vmap``'s."""
    m, q, v = quad
    fns = _public_fns()
    names = _KINEMATICS + ["integrate"]
    for name in names:
        assert (_public(name).chunk_words is not None) == (name != "integrate"), name

    def all_of(m, q, v):
        # each function under its own jax.vmap with its own in_axes (as a user calls it)
        return {k: jax.vmap(fns[k][0], in_axes=fns[k][1])(m, q, v) for k in names}

    outs, whiles = [], []
    for chunk in (0, 8):
        with jaxdyn.config.override(vmap_chunk=chunk):
            jf = jax.jit(all_of)
            whiles.append(jf.lower(m, q, v).as_text().count("stablehlo.while"))
            outs.append(jf(m, q, v))
    assert whiles == [0, len(_KINEMATICS)], whiles
    _close(outs[1], outs[0])


@pytest.fixture(scope="module")
def arm():
    m = robots.load("arm7")
    B = 21
    q = jax.vmap(lambda k: jaxdyn.random_configuration(m, k))(
        jax.random.split(jax.random.PRNGKey(5), B)
    )
    return m, q, jax.random.normal(jax.random.PRNGKey(6), (B, m.nv))


@pytest.fixture(scope="module")
def chain3():
    """A fixed-base chain of three revolute joints and 21 configurations (``arm``'s batch): the
    rule's derivatives and batched models, whose programs grow with the tree, on a short one."""
    m = jaxdyn.load_urdf(
        robots.random_urdf(3, seed=2, joint_types=("revolute",)), floating_base=False
    )
    B = 21
    q = jax.vmap(lambda k: jaxdyn.random_configuration(m, k))(
        jax.random.split(jax.random.PRNGKey(5), B)
    )
    return m, q, jax.random.normal(jax.random.PRNGKey(6), (B, m.nv))


def test_batching_rule_derivatives_and_batched_model(chain3):
    """Gradients under vmap (reverse mode through the rule's custom_jvp) and a batched model
    (domain randomisation, chunked: 21 samples in chunks of 8) are unchanged by the rule."""
    m, q, v = chain3
    loss = lambda q: jnp.sum(jaxdyn.minv(m, q) ** 2)  # noqa: E731
    (g0, g8), _ = _plain_and_chunked(jax.grad(loss), q, in_axes=0)
    _close(g8, g0, 1e-10)
    # reverse mode through a staged jax.jit(jax.vmap(minv)): the rule ran while jit traced
    # (no custom_jvp in the program), so this differentiates the chunk loop itself
    with jaxdyn.config.override(vmap_chunk=8):
        staged = jax.jit(jax.vmap(lambda q: jaxdyn.minv(m, q)))
        assert "stablehlo.while" in staged.lower(q).as_text()
        gj = jax.grad(lambda q: jnp.sum(staged(q) ** 2))(q)
    _close(gj, g0, 1e-10)
    B = q.shape[0]
    scale = 1.0 + 0.1 * jnp.arange(B) / B
    mb = jax.vmap(lambda s: eqx_scale_mass(m, s))(scale)
    (ref, out), (_, loop) = _plain_and_chunked(jaxdyn.minv, mb, q, in_axes=(0, 0))
    assert loop
    _close(out, ref, 1e-10)
    # one sample by the dense route (another algorithm than the batched sweeps; on this shallow
    # tree method="auto" would take the sweeps)
    _close(out[5], jaxdyn.minv(eqx_scale_mass(m, scale[5]), q[5], method="dense"), 1e-10)


def test_rule_batch_size(arm):
    """Algorithms see the batch size while a batching rule (or jaxdyn.vmap) traces them, and 0
    otherwise."""
    from jaxdyn import batching

    m, q, v = arm
    seen = []

    def f(model, q):
        seen.append(batching.rule_batch_size())
        return q * model.mass[0]

    g = batching.batched(f, lambda model, itemsize: 0)
    B = q.shape[0]
    traces = []
    for run in (
        # the rule alone: jax.jit(jax.vmap(g)) runs it while tracing (through custom_vmap, g
        # was traced unbatched first, batch 0, for the output types)
        lambda: jax.jit(jax.vmap(g, in_axes=(None, 0)))(m, q),
        lambda: jax.jit(g)(m, q[0]),
        lambda: jaxdyn.vmap(f, in_axes=(None, 0), chunk_size=4)(m, q),
    ):
        seen.clear()
        run()
        traces.append(list(seen))
    assert traces == [[B], [0], [B]]  # and each traced once
    assert batching.rule_batch_size() == 0


def eqx_scale_mass(m, s):
    import equinox as eqx

    return eqx.tree_at(lambda x: x.mass, m, m.mass * s)


def test_chunk_size_policy():
    from jaxdyn import batching

    assert batching.auto_chunk(0) is None  # no estimate: plain vmap
    assert batching.auto_chunk(1) == batching.CHUNK_MAX  # tiny working sets: the largest chunk
    c64 = batching.auto_chunk(625)  # a 25-coordinate minv
    assert batching.CHUNK_MIN < c64 < batching.CHUNK_MAX and c64 & (c64 - 1) == 0
    assert batching.auto_chunk(2500) < c64  # bigger working sets, smaller chunks
    assert batching.auto_chunk(10**6) == batching.CHUNK_MIN
    assert batching.auto_chunk(625, 4) == 2 * c64  # float32: twice as many samples
    assert batching.chunk_size_for(625, c64) is None  # one chunk: plain vmap
    assert batching.chunk_size_for(625, 4 * c64) == c64
    with jaxdyn.config.override(vmap_chunk=0):
        assert batching.chunk_size_for(2500, 10**6) is None
    with jaxdyn.config.override(vmap_chunk=16):
        assert batching.chunk_size_for(10, 17) == 16
    for bad in (-2, 1.5, "x", True):
        with pytest.raises(ValueError, match="vmap_chunk"):
            jaxdyn.config.update("vmap_chunk", bad)


def test_threaded_chunk_cap(monkeypatch):
    """In a process on several cores the automatic chunk holds at most THREADED_ANGLES one-DoF
    angles (float64; twice in float32), a power of two >= THREADED_CHUNK_MIN; on one core, for
    an explicit ``vmap_chunk`` and for a model without one-DoF joints, no cap."""
    from jaxdyn import batching, joints

    assert batching._ONE_DOF == joints.ONE_DOF
    solo, talos = robots.load("solo12"), robots.load("talos_full")  # 12 and 44 angles
    monkeypatch.setattr(batching, "usable_cores", lambda: 2)
    assert batching.threaded_chunk_cap(solo) == 32 and batching.threaded_chunk_cap(solo, 4) == 64
    assert batching.threaded_chunk_cap(talos) == batching.THREADED_CHUNK_MIN == 8
    assert batching.threaded_chunk_cap(object()) is None
    assert batching.auto_chunk(324) == 128  # solo12 minv without the cap
    assert batching.chunk_size_for(324, 1024, 8, batching.threaded_chunk_cap(solo)) == 32
    with jaxdyn.config.override(vmap_chunk=64):  # an explicit chunk is left as it is
        assert batching.chunk_size_for(324, 1024, 8, 32) == 64
    monkeypatch.setattr(batching, "usable_cores", lambda: 1)
    assert batching.threaded_chunk_cap(solo) is None
    # the policies that take the cap are marked; the shared nv^2 policy itself is left as it is
    capped = batching.capped_when_threaded(batching.nv2_words)
    assert getattr(capped, "threaded_cap")  # noqa: B009 (an attribute pyright does not know)
    assert capped(solo, 8) == batching.nv2_words(solo, 8)
    assert not getattr(batching.nv2_words, "threaded_cap", False)


def test_chunks_split_the_batch_evenly(quad, aba_ref):
    from jaxdyn import batching

    assert batching.chunk_split(1000, 64) == (16, 63, 8)
    assert batching.chunk_split(100, 64) == (2, 50, 0)
    assert batching.chunk_split(128, 64) == (2, 64, 0)
    for B in range(1, 300):
        n, size, pad = batching.chunk_split(B, 64)
        assert size <= 64 and 0 <= pad < n and n * size == B + pad and n == -(-B // 64)
    m, q, v = quad  # 37 samples in chunks of at most 16: 3 chunks of 13 (2 computed twice)
    with jaxdyn.config.override(vmap_chunk=16):
        jf = jax.jit(jax.vmap(lambda q, v: jaxdyn.aba(m, q, v, v)))
        text = str(jax.make_jaxpr(jf)(q, v))
        out = jf(q, v)
    assert "length=3" in text and "f64[13,18]" in text.replace(" ", "")
    # no padded batch of 3 x 13 = 39 samples: the last chunk overlaps the second (the padding
    # and the slice of the outputs back to 37 made the loop up to 2x slower)
    assert "[39," not in text.replace(" ", ""), "padded batch"
    _close(out, aba_ref)  # one vmap (vmap_chunk=0)


def _has_cholesky(fn, *args):
    return "cholesky" in str(jax.make_jaxpr(fn)(*args))


def test_aba_method_auto_chooses_dense_alone_and_sweeps_batched(arm, monkeypatch):
    """``aba(method="auto")`` where its C kernel does not run: the dense solve (a LAPACK
    Cholesky) for one float64 evaluation on a deep tree (outside a one-kernel call: switch
    ``fused_unbatched``, whose call takes the sweeps), the sweeps under ``jax.vmap`` (with the
    chunks switched off too), inside derivatives (also batched), in float32 and on shallow
    trees; the two agree; on the CPU the kernel (no Cholesky), equal to the dense solve."""
    from jaxdyn.algorithms import aba as A

    m, q, v = arm
    assert len(m.topo.levels) >= A.DENSE_MIN_LEVELS and m.nv <= A.DENSE_MAX_NV
    one = lambda q, v: jaxdyn.aba(m, q, v, v)  # noqa: E731
    with jaxdyn.config.override(fused_unbatched=True):  # one kernel: no LAPACK call in it
        alone = lambda q, v: one(q, v)  # noqa: E731  (not one: make_jaxpr caches its trace)
        assert not _has_cholesky(alone, q[0], v[0]) or not small_calls.usable()
    monkeypatch.setitem(jaxdyn.config._values, "fused_unbatched", False)
    # where its C kernel does not run (switch cpu_kernels off) ...
    with jaxdyn.config.override(cpu_kernels=False):
        assert _has_cholesky(one, q[0], v[0])
        assert not _has_cholesky(lambda q, v: jaxdyn.aba(m, q, v, v, method="sweeps"), q[0], v[0])
        assert _has_cholesky(lambda q, v: jaxdyn.aba(m, q, v, v, method="dense"), q[0], v[0])
        assert not _has_cholesky(jax.vmap(one), q, v)
        with jaxdyn.config.override(vmap_chunk=0):
            assert not _has_cholesky(jax.vmap(one), q, v)
        grad = jax.grad(lambda q, v: jnp.sum(one(q, v) ** 2))
        assert not _has_cholesky(grad, q[0], v[0])
        with jaxdyn.config.override(analytic_derivatives=False):
            assert not _has_cholesky(jax.vmap(grad), q, v)
        m32 = m.astype("float32")
        q32, v32 = q[0].astype("float32"), v[0].astype("float32")
        assert not _has_cholesky(lambda q, v: jaxdyn.aba(m32, q, v, v), q32, v32)
        quad = robots.load("quad12")
        assert len(quad.topo.levels) < A.DENSE_MIN_LEVELS
        qq = jaxdyn.neutral_configuration(quad)
        vq = jnp.ones(quad.nv)
        assert not _has_cholesky(lambda q: jaxdyn.aba(quad, q, vq, vq), qq)
        dense = jax.jit(one)(q[0], v[0])
        sweeps = jax.jit(lambda q, v: jaxdyn.aba(m, q, v, v, method="sweeps"))(q[0], v[0])
        _close(dense, sweeps, 1e-11)
        _close(jax.jit(jax.vmap(one))(q, v)[0], sweeps, 1e-11)
    # ... and the kernel (the sweeps' algorithm, no LAPACK) where it does
    assert not _has_cholesky(one, q[0], v[0])
    _close(jax.jit(one)(q[0], v[0]), jaxdyn.aba(m, q[0], v[0], v[0], method="dense"), 1e-11)
    with pytest.raises(ValueError, match="method"):
        jaxdyn.aba(m, q[0], v[0], v[0], method="lu")
    # minv chooses the same way where its C kernel does not run (switch cpu_kernels off) ...
    with jaxdyn.config.override(cpu_kernels=False):
        assert _has_cholesky(lambda q: jaxdyn.minv(m, q), q[0])
        assert not _has_cholesky(jax.vmap(lambda q: jaxdyn.minv(m, q)), q)
        assert not _has_cholesky(lambda q: jaxdyn.minv(m, q, method="sweeps"), q[0])
        _close(
            jax.jit(lambda q: jaxdyn.minv(m, q))(q[0]),
            jaxdyn.minv(m, q[0], method="sweeps"),
            1e-11,
        )
    # ... and takes the kernel (the sweeps' algorithm, no LAPACK) where it does
    assert not _has_cholesky(lambda q: jaxdyn.minv(m, q), q[0])
    _close(jax.jit(lambda q: jaxdyn.minv(m, q))(q[0]), jaxdyn.minv(m, q[0], method="dense"), 1e-11)
    with pytest.raises(ValueError, match="method"):
        jaxdyn.minv(m, q[0], method="lu")


# --------------------------------------------------------------- issue 51, item 1 (h-algos)
def _heavy(m, field, body):
    """``m`` with body ``body``'s mass or rotational inertia set to 1e30: a valid, extremely
    ill-conditioned mass matrix."""
    import equinox as eqx

    val = getattr(m, field)
    big = 1e30 * (jnp.eye(3) if field == "inertia" else 1.0)
    return eqx.tree_at(lambda m: getattr(m, field), m, val.at[body].set(big))


@pytest.mark.parametrize(
    "name, field, body, pin_rtol",
    [
        pytest.param("hextilt", "inertia", 1, 1e-12, id="floating-inertia"),
        pytest.param("arm7", "inertia", 2, 1e-12, id="fixed-inertia", marks=pytest.mark.slow),
        # a fixed base: slow (the ill-conditioned floating case above runs the same routes)
        pytest.param("arm7", "mass", 4, None, id="fixed-mass", marks=pytest.mark.slow),
    ],
)
def test_aba_auto_finite_where_sweeps_are_on_ill_conditioned_mass_matrix(
    name, field, body, pin_rtol
):
    """Issue 51, item 1: ``aba(method="auto")`` evaluated alone takes the dense Cholesky route
    on these deep float64 trees; it returned NaN where the sweeps, ``jax.vmap(aba)`` and
    Pinocchio are finite (inertia 1e30 on a floating-base robot: free fall, 9.81; mass 1e30
    on a fixed base: ~1e16). The dense answer is now kept only where its factorisation is
    trustworthy (``dense_reliable``), else the sweeps' answer is returned: an automatic choice
    of method changes the speed, not whether the answer is finite. ``minv`` likewise. Where
    the problem is still well posed (a huge rotational inertia), the answer is Pinocchio's;
    with a mass of 1e30 both are finite but agree on no digit (``pin_rtol`` None)."""
    import pinocchio as pin

    from jaxdyn.algorithms import aba as A
    from jaxdyn.interop.pinocchio import Converter, build_pinocchio_model

    m = _heavy(robots.load(name), field, body)
    assert len(m.topo.levels) >= A.DENSE_MIN_LEVELS and m.nv <= A.DENSE_MAX_NV
    q, z = jaxdyn.neutral_configuration(m), jnp.zeros(m.nv)
    pm = build_pinocchio_model(m)
    conv = Converter(m, pm)
    ref = conv.v_from_pin(
        pin.aba(pm, pm.createData(), conv.q_to_pin(np.asarray(q)), np.zeros(m.nv), np.zeros(m.nv))
    )
    assert np.all(np.isfinite(ref))
    sweeps = np.asarray(jaxdyn.aba(m, q, z, z, method="sweeps"))
    batched = np.asarray(jax.vmap(lambda q: jaxdyn.aba(m, q, z, z))(q[None])[0])
    assert np.all(np.isfinite(sweeps)) and np.all(np.isfinite(batched))
    # the dense route on its own still breaks down: the guard is what is tested
    assert not np.all(np.isfinite(np.asarray(jaxdyn.aba(m, q, z, z, method="dense"))))
    got = np.asarray(jaxdyn.aba(m, q, z, z))
    assert np.all(np.isfinite(got)), got
    # the same sweeps, compiled in another program: equal up to this matrix's conditioning
    np.testing.assert_allclose(got, sweeps, rtol=1e-6, atol=1e-6 * np.abs(sweeps).max())
    if pin_rtol is not None:
        _close(got, ref, pin_rtol)
    if name != "arm7" or field != "mass":
        return
    mi = np.asarray(jaxdyn.minv(m, q))
    ms = np.asarray(jaxdyn.minv(m, q, method="sweeps"))
    assert np.all(np.isfinite(ms)) and np.all(np.isfinite(mi))
    np.testing.assert_allclose(mi, ms, rtol=1e-6, atol=1e-6 * np.abs(ms).max())


@pytest.mark.slow
def test_aba_auto_keeps_the_dense_route_on_well_conditioned_robots(arm):
    """The guard of item 1 does not fall back on ordinary robots: ``dense_reliable`` holds at
    random configurations of arm7 and panda (else ``method="auto"`` would pay for the sweeps
    after the dense solve), and auto equals the dense answer there."""
    from jaxdyn.algorithms import aba as A
    from jaxdyn.algorithms import kinematics as kin

    m, q, v = arm
    panda = robots.load("panda")
    qp = jax.vmap(lambda k: jaxdyn.random_configuration(panda, k))(
        jax.random.split(jax.random.PRNGKey(7), 8)
    )

    def reliable(model, q):
        ws = kin.world_state(model, q, centered=True)
        M, L = A.dense_factor(model, ws)
        return A.dense_reliable(M, L, jnp.zeros(model.nv, M.dtype))

    assert bool(jnp.all(jax.vmap(lambda q: reliable(m, q))(q)))
    assert bool(jnp.all(jax.vmap(lambda q: reliable(panda, q))(qp)))
    auto = jax.jit(lambda q, v: jaxdyn.aba(m, q, v, v))(q[0], v[0])
    dense = jax.jit(lambda q, v: jaxdyn.aba(m, q, v, v, method="dense"))(q[0], v[0])
    _close(auto, dense, 1e-14)

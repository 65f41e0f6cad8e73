"""jaxdyn.compile_for_latency(..., dispatch="native"): rnea, aba, crba, minv, rnea_derivatives
and aba_derivatives of one sample by jaxdyn's C kernels called through ctypes, without XLA
(jaxdyn.backend.host_calls).

Oracle: ``jax.jit(f)(model, ...)`` (on the CPU the same C kernel called through XLA, after
the same quaternion check and normalisation): equal to 1e-12 of the result's largest entry in
float64, 1e-4 in float32. Models: talos_full (a floating humanoid), solo12 (a free base) and a
random tree of every joint kind with armature (tests/_kernel_cases.py), configurations with
quaternions off the unit sphere within the check's tolerance (the normalisation is exercised).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import latency, robots, shell
from jaxdyn.backend import ffi

from _kernel_cases import close, configurations, kernel_models

pytestmark = pytest.mark.skipif(
    not ffi.kernels_available(), reason=f"jaxdyn's C kernels are not built: {ffi.kernel_status()}"
)

ALGS = ("rnea", "aba", "crba", "minv")


@pytest.fixture(scope="module")
def models():
    k = kernel_models()
    return {
        "talos_full": k["humanoid"],
        "solo12": robots.load("solo12"),
        "all_kinds": k["all_kinds"],
    }


def _state(model, seed, dtype=np.float64, stretch=1.0002):
    """q (its quaternions scaled by ``stretch``: within the check's tolerance, not unit), v,
    a second vector (qdd or tau) and f_ext, as numpy arrays of ``dtype``."""
    q = np.array(configurations(model, 1, seed)[0], np.float64)
    found = shell.quaternion_indices(model.topo)
    if found is not None:
        q[found[0]] *= stretch
    rng = np.random.default_rng(seed)
    v, x = rng.normal(size=model.nv), rng.normal(size=model.nv)
    f_ext = rng.normal(size=(model.nb, 6))
    return tuple(np.asarray(a, dtype) for a in (q, v, x, f_ext))


def _args(alg, state, f_ext):
    q, v, x, fe = state
    if alg in ("crba", "minv"):
        return (q,)
    return (q, v, x, fe) if f_ext else (q, v, x)


@pytest.mark.parametrize("robot", ["talos_full", "solo12", "all_kinds"])
@pytest.mark.parametrize(
    ("alg", "f_ext"),
    [
        ("rnea", False),
        ("rnea", True),
        ("aba", False),
        ("aba", True),
        ("crba", False),
        ("minv", False),
    ],
)
def test_equals_jit_float64(models, robot, alg, f_ext):
    """The native call equals ``jax.jit(f)`` to 1e-12 for two states through one call object;
    its result is a new array each call, and ``out=`` fills the given array."""
    model = models[robot]
    f = getattr(jaxdyn, alg)
    args = _args(alg, _state(model, 1), f_ext)
    call = jaxdyn.compile_for_latency(f, model, *args, dispatch="native")
    assert isinstance(call, latency.NativeCall) and call.dispatch == "native"
    assert call.dtype == np.float64
    jf = jax.jit(f)
    got = call(*args)
    want = np.asarray(jf(model, *args))
    assert isinstance(got, np.ndarray) and got.shape == want.shape and got.dtype == np.float64
    close(got, want, 1e-12)
    args2 = _args(alg, _state(model, 2), f_ext)
    got2 = call(*args2)
    close(got2, np.asarray(jf(model, *args2)), 1e-12)
    close(got, want, 1e-12)  # the first result was not overwritten by the second call
    out = np.full(want.shape, np.nan)
    assert call(*args, out=out) is out
    close(out, want, 1e-12)
    # the caller's q is not normalised in place
    np.testing.assert_array_equal(args[0], _state(model, 1)[0])


@pytest.mark.parametrize("robot", ["talos_full", "solo12", "all_kinds"])
@pytest.mark.parametrize("alg", ALGS)
def test_equals_jit_float32(models, robot, alg):
    """float32 examples: the call computes in float32 (the kernel's float32 run), equal to
    ``jax.jit(f)`` on the same float32 inputs to float32 rounding."""
    model = models[robot]
    f = getattr(jaxdyn, alg)
    args = _args(alg, _state(model, 3, np.float32), False)
    call = jaxdyn.compile_for_latency(f, model, *args, dispatch="native")
    assert call.dtype == np.float32
    got = call(*args)
    want = jax.jit(f)(model, *args)
    assert want.dtype == jnp.float32 and got.dtype == np.float32
    close(got, np.asarray(want), 1e-4)


DERIVATIVES = ("rnea_derivatives", "aba_derivatives")


@pytest.mark.parametrize("robot", ["talos_full", "solo12", "all_kinds"])
@pytest.mark.parametrize("alg", DERIVATIVES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_derivatives_equal_jit(models, robot, alg, dtype):
    """The derivatives' native call (IDSVA; ABA, IDSVA without M, Minv and -Minv times the
    partials composed in C) equals ``jax.jit(f)`` with f_ext (float64: 1e-12 of each
    result's largest entry, two states through one object, each call new arrays, ``out=`` a
    tuple filled in place; float32: 1e-4), and without f_ext on solo12."""
    model = models[robot]
    f = getattr(jaxdyn, alg)
    f_ext = dtype == np.float64 or robot == "all_kinds"
    args = _args(alg, _state(model, 9, dtype), f_ext)
    call = jaxdyn.compile_for_latency(f, model, *args, dispatch="native")
    assert isinstance(call, latency.NativeCall) and call.dtype == dtype
    jf = jax.jit(f)
    tol = 1e-12 if dtype == np.float64 else 1e-4
    got = call(*args)
    want = [np.asarray(w) for w in jf(model, *args)]
    assert isinstance(got, tuple) and len(got) == 3
    for g, w in zip(got, want):
        assert g.shape == (model.nv, model.nv) and g.dtype == dtype
        close(g, w, tol)
    if dtype == np.float32:
        return
    args2 = _args(alg, _state(model, 10), f_ext)
    for g, w in zip(call(*args2), jf(model, *args2)):
        close(g, np.asarray(w), tol)
    for g, w in zip(got, want):  # the first results were not overwritten by the second call
        close(g, w, tol)
    out = tuple(np.full((model.nv, model.nv), np.nan) for _ in range(3))
    assert call(*args, out=out) is out
    for o, w in zip(out, want):
        close(o, w, tol)
    if robot == "solo12":  # without f_ext
        args3 = args[:3]
        call3 = jaxdyn.compile_for_latency(f, model, *args3, dispatch="native")
        for g, w in zip(call3(*args3), jf(model, *args3)):
            close(g, np.asarray(w), tol)


def test_derivatives_refusals(models):
    """The derivatives' calls: a wrong ``out=`` and argument count, a failed quaternion check
    (the jitted path's message) are refused by name."""
    model = models["solo12"]
    q, v, x, _ = _state(model, 11)
    call = jaxdyn.compile_for_latency(jaxdyn.aba_derivatives, model, q, v, x, dispatch="native")
    nv = model.nv
    with pytest.raises(ValueError, match="aba_derivatives: out must be a tuple of three"):
        call(q, v, x, out=np.zeros((3, nv, nv)))
    with pytest.raises(ValueError, match="out must be a tuple of three"):
        call(q, v, x, out=(np.zeros((nv, nv)),) * 2 + (np.zeros((nv, nv), np.float32),))
    with pytest.raises(TypeError, match=r"takes the arguments \(q, v, a, f_ext\)"):
        jaxdyn.compile_for_latency(jaxdyn.rnea_derivatives, model, q, v, dispatch="native")
    bad = _state(model, 11, stretch=1.1)[0]
    with pytest.raises(jaxdyn.CheckError, match="aba_derivatives: a quaternion in q"):
        call(bad, v, x)
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match="aba_derivatives: a quat"):
        jax.block_until_ready(jax.jit(jaxdyn.aba_derivatives)(model, bad, v, x))


def test_other_inputs_converted(models):
    """Lists, integer arrays, non-contiguous views and arrays of another float dtype are
    converted as the jitted path converts them."""
    model = models["solo12"]
    q, v, x, _ = _state(model, 4)
    call = jaxdyn.compile_for_latency(jaxdyn.rnea, model, q, v, x, dispatch="native")
    want = np.asarray(jax.jit(jaxdyn.rnea)(model, q, v, x))
    close(call(list(q), v, x), want, 1e-12)
    v32 = v.astype(np.float32)
    want32 = np.asarray(jax.jit(jaxdyn.rnea)(model, q, v32.astype(np.float64), x))
    close(call(q, v32, x), want32, 1e-12)
    strided = np.repeat(x, 2)[::2]
    assert not strided.flags.c_contiguous
    close(call(q, v, strided), want, 1e-12)
    z = np.zeros(model.nv, np.int64)
    close(call(q, z, z), np.asarray(jax.jit(jaxdyn.rnea)(model, q, z, z)), 1e-12)


def test_bad_shapes_and_counts(models):
    """Wrong shapes (at compile time and per call) and argument counts raise errors naming
    the argument and its expected shape."""
    model = models["solo12"]
    q, v, x, fe = _state(model, 5)
    call = jaxdyn.compile_for_latency(jaxdyn.aba, model, q, v, x, dispatch="native")
    with pytest.raises(ValueError, match=r"aba: tau has shape \(17,\), expected \(18,\)"):
        call(q, v, x[:-1])
    with pytest.raises(ValueError, match=r"aba: q has shape \(\), expected \(19,\)"):
        call(1.0, v, x)
    with pytest.raises(TypeError, match=r"2 arguments given, compiled for 3 \(q, v, tau\)"):
        call(q, v)
    with pytest.raises(TypeError, match="v has dtype complex128"):
        call(q, v + 1j, x)
    with pytest.raises(ValueError, match="out must be a numpy array of shape"):
        call(q, v, x, out=np.zeros(3))
    with pytest.raises(ValueError, match=r"example argument f_ext has shape \(3, 6\), expected"):
        jaxdyn.compile_for_latency(jaxdyn.rnea, model, q, v, x, fe[:3], dispatch="native")
    with pytest.raises(ValueError, match=r"crba: example argument q has shape \(18,\)"):
        jaxdyn.compile_for_latency(jaxdyn.crba, model, q[:-1], dispatch="native")
    with pytest.raises(TypeError, match=r"takes the arguments \(q, v, a, f_ext\)"):
        jaxdyn.compile_for_latency(jaxdyn.rnea, model, q, v, dispatch="native")
    mq = jaxdyn.compile_for_latency(jaxdyn.minv, model, q, dispatch="native")
    with pytest.raises(ValueError, match=r"minv: q has shape \(2, 19\), expected \(19,\)"):
        mq(np.stack([q, q]))


def test_unsupported_function_refused(models):
    """Functions without a C kernel are refused with the list of supported ones."""
    model = models["solo12"]
    q = _state(model, 6)[0]
    for fn in (jaxdyn.forward_kinematics, lambda m, q: jaxdyn.crba(m, q)):
        with pytest.raises(ValueError, match=r"computes jaxdyn.rnea, jaxdyn.aba, jaxdyn.crba"):
            jaxdyn.compile_for_latency(fn, model, q, dispatch="native")
    with pytest.raises(ValueError, match="dispatch must be one of"):
        jaxdyn.compile_for_latency(jaxdyn.crba, model, q, dispatch="c")


def test_quaternion_check(models):
    """A quaternion off the unit sphere beyond the tolerance (or NaN) raises CheckError with
    the jitted path's message; with the value checks off at compile time it is normalised
    and computed as ``jax.jit`` computes the normalised configuration."""
    model = models["solo12"]
    q, v, x, _ = _state(model, 7)
    call = jaxdyn.compile_for_latency(jaxdyn.rnea, model, q, v, x, dispatch="native")
    assert call.checked
    bad = _state(model, 7, stretch=1.1)[0]
    msg = "rnea: a quaternion in q is not of unit norm"
    with pytest.raises(jaxdyn.CheckError, match=msg):
        call(bad, v, x)
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match=msg):  # jax.jit fails too
        jax.block_until_ready(jax.jit(jaxdyn.rnea)(model, bad, v, x))
    nan = q.copy()
    nan[4] = np.nan
    with pytest.raises(jaxdyn.CheckError, match=msg):
        call(nan, v, x)
    close(call(q, v, x), np.asarray(jax.jit(jaxdyn.rnea)(model, q, v, x)), 1e-12)  # still usable
    with jaxdyn.config.override(value_checks=False):
        loose = jaxdyn.compile_for_latency(jaxdyn.rnea, model, q, v, x, dispatch="native")
    # the reference: the jitted path on the normalised q (what it computes with the checks off)
    unit = bad.copy()
    idx = shell.quaternion_indices(model.topo)[0]
    unit[idx] /= np.linalg.norm(unit[idx], axis=-1, keepdims=True)
    want = np.asarray(jax.jit(jaxdyn.rnea)(model, unit, v, x))
    assert not loose.checked
    close(loose(bad, v, x), want, 1e-12)


def test_fallback_without_kernels(models):
    """With the switch ``cpu_kernels`` off the call is XLA's program (``dispatch`` says so),
    with the same values."""
    model = models["solo12"]
    q = _state(model, 8)[0]
    with jaxdyn.config.override(cpu_kernels=False):
        call = jaxdyn.compile_for_latency(jaxdyn.crba, model, q, dispatch="native")
    assert isinstance(call, latency.LatencyCall) and call.dispatch in ("sync", "jax")
    close(call(q), np.asarray(jax.jit(jaxdyn.crba)(model, q)), 1e-12)


def test_threads_share_one_call(models):
    """Four threads calling one native object at once each get their own state's result
    (the object's buffers, which the kernel uses with the GIL released, are taken one call at
    a time): every result equals the same object's single-threaded result bit for bit."""
    import threading

    model = models["talos_full"]
    call = jaxdyn.compile_for_latency(jaxdyn.crba, model, _state(model, 0)[0], dispatch="native")
    qs = [_state(model, s)[0] for s in range(4)]
    want = [call(q) for q in qs]
    bad = []

    def work(k):
        out = np.empty_like(want[k])
        for _ in range(300):
            if not np.array_equal(call(qs[k], out=out), want[k]):
                bad.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, f"{len(bad)} calls of 1200 returned another thread's result"


def test_extension_module_and_ctypes_paths_agree(models, monkeypatch):
    """The calls go through the extension module (``_jaxdyn_host``, built against this
    Python's headers) where ``Python.h`` exists, and its results equal the ``ctypes`` path's
    bit for bit for every function, with and without ``out=`` (a non-contiguous ``out`` as
    well); ``JAXDYN_HOST_MODULE=0`` turns the module off, and the status says so."""
    import sysconfig
    from pathlib import Path

    from jaxdyn.backend import host_calls

    if (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        assert host_calls.host_module_status() == "loaded"
    else:  # pragma: no cover - a Python without its headers
        assert "Python.h" in host_calls.host_module_status()
    model = models["all_kinds"]
    q, v, x, fe = _state(model, 12)
    for name in ("rnea", "aba", "crba", "minv", "rnea_derivatives", "aba_derivatives"):
        args = (q,) if name in ("crba", "minv") else (q, v, x)
        fast = jaxdyn.compile_for_latency(getattr(jaxdyn, name), model, *args, dispatch="native")
        assert fast._fast and isinstance(fast, host_calls.host_module().Call), name
        # the ctypes path: the Python class alone
        plain = latency.NativeCall(name, model, tuple(a.shape for a in args), np.float64)
        assert not plain._fast
        want = plain(*args)
        python_path = []
        fast._call = lambda *a, **k: python_path.append(1)  # what C leaves to Python
        got = fast(*args)
        assert not python_path, name  # numpy arguments of the compiled kind: all in C
        assert fast([float(x) for x in q], *args[1:]) is None and python_path, name
        del fast._call
        if isinstance(want, tuple):
            assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True)), name
            outs = tuple(np.empty_like(w) for w in want)
            assert fast(*args, out=outs) is outs
            assert all(np.array_equal(o, w) for o, w in zip(outs, want)), name
            continue
        assert np.array_equal(got, want), name
        out = np.empty_like(want)
        assert fast(*args, out=out) is out and np.array_equal(out, want), name
        wide = np.zeros((*want.shape[:-1], 2 * want.shape[-1]))
        strided = wide[..., ::2]
        assert fast(*args, out=strided) is strided and np.array_equal(strided, want), name
    calls = []
    crba = jaxdyn.compile_for_latency(jaxdyn.crba, model, q, dispatch="native")
    state = {"tried": False, "ok": False, "why": "", "lib": None}
    monkeypatch.setattr(ffi.HOST_MODULE, "state", state)
    monkeypatch.setenv("JAXDYN_HOST_MODULE", "0")
    monkeypatch.setattr(ffi, "build_host_module", lambda: calls.append(1))
    assert "JAXDYN_HOST_MODULE=0" in host_calls.host_module_status() and not calls
    off = jaxdyn.compile_for_latency(jaxdyn.crba, model, q, dispatch="native")
    assert not off._fast and type(off) is latency.NativeCall
    assert np.array_equal(off(q), crba(q))


def test_extension_module_needs_python_headers(tmp_path, monkeypatch):
    """Without ``Python.h`` the extension module is not built, with a message naming it (the
    calls then take the ``ctypes`` path)."""
    monkeypatch.setattr(ffi, "_python_include", lambda: str(tmp_path))
    with pytest.raises(RuntimeError, match=r"no Python.h in"):
        ffi.build_host_module(directory=tmp_path)

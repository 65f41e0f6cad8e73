"""JAX's persistent compilation cache in jaxdyn's directory
(:func:`jaxdyn.config.compilation_cache`) and the compile log (:mod:`jaxdyn._progress`).

The suite itself runs with both off (``tests/conftest.py``: jaxdyn's cache directory is never
set; the session's own temporary cache, ``JAXDYN_TEST_CACHE``, is switched off around the tests
here); the end-to-end test turns them on in two fresh processes sharing one temporary cache
directory.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxdyn
from jaxdyn import _progress, config

ROOT = Path(__file__).resolve().parent.parent

#: a small batched program holding jaxdyn's FFI custom calls (the value check of q's
#: quaternion, the chunk loop's buffers and stores, the C crba kernel), compiled with value
#: checks on and off; then a failed check through the program read back from the cache
CHILD = r"""
import json, sys
from pathlib import Path
import jax
import numpy as np
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import numpy as np
hits = []
jax.monitoring.register_event_listener(
    lambda e, **k: hits.append(e) if e == "/jax/compilation_cache/cache_hits" else None)
import jaxdyn
from jaxdyn import robots
d = jaxdyn.config.compilation_cache_dir()
def entries():
    return sorted(p.name for p in Path(d).iterdir() if p.name.endswith("-cache"))
m = robots.load("quad12")
q = jnp.stack([jaxdyn.neutral_configuration(m)] * 8)
q = q.at[:, 7:].set(jnp.linspace(-1, 1, 8 * (m.nq - 7)).reshape(8, -1))
f = jaxdyn.jit(jax.vmap(lambda q: jaxdyn.crba(m, q)))
out = {"dir": d, "jax_dir": jax.config.jax_compilation_cache_dir}
out["on"] = np.asarray(f(q)).sum().item()
out["after_on"], out["hits_on"] = entries(), len(hits)
with jaxdyn.config.override(value_checks=False):
    out["off"] = np.asarray(f(q)).sum().item()
out["after_off"] = entries()
try:
    f(q.at[0, 3].set(2.0))
    out["error"] = None
except jaxdyn.CheckError as e:
    out["error"] = str(e)
out["final"] = entries()
print("RESULT " + json.dumps(out))
"""


def _child(cache: Path):
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        JAXDYN_CACHE_DIR=str(cache),
        JAXDYN_COMPILATION_CACHE="1",
        JAXDYN_COMPILE_LOG="1e-9",  # every compile of a jaxdyn program is reported
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",  # every program is written
    )
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    r = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :]), r.stderr


@pytest.mark.slow  # two interpreters with JAX, about 20 s on 2 loaded cores
def test_second_process_reads_the_cache(tmp_path):
    """First process: the cache directory is jaxdyn's (one per version), the program with value
    checks and the one without are two entries, nothing is read before the first (switching
    value checks clears JAX's in-memory caches, so the first process reads back its own entries
    after that). Second process: the same programs are read back (cache hits, no new entry),
    with jaxdyn's C handlers registered before they run: same results, and the value check
    still fails with its message. Both processes log their compiles naming the jaxdyn function
    and the batch."""
    first, err1 = _child(tmp_path)
    assert Path(first["dir"]).parent == tmp_path / "xla"
    assert Path(first["dir"]).name == config.compilation_cache_path().name
    assert first["jax_dir"] == first["dir"]
    assert first["hits_on"] == 0
    on, off = set(first["after_on"]), set(first["after_off"])
    assert on and off > on, "value checks on and off must be distinct programs"
    assert "quaternion" in first["error"]
    assert "jaxdyn: compiled jit(" in err1 and "crba for a batch of 8" in err1

    second, err2 = _child(tmp_path)
    assert second["hits_on"] > 0
    assert second["final"] == first["final"]  # nothing compiled anew: all read back
    assert (second["on"], second["off"]) == (first["on"], first["off"])
    assert second["error"] == first["error"]
    assert "crba for a batch of 8" in err2


@pytest.fixture
def restore_jax_cache(no_session_cache):
    """Start from JAX's cache settings as they are outside the test session (no cache directory:
    ``tests/conftest.py``'s session cache switched off), and leave them so after a test."""
    before = (
        jax.config.jax_compilation_cache_dir,
        jax.config.jax_persistent_cache_min_compile_time_secs,
    )
    yield
    config.compilation_cache(False)
    jax.config.update("jax_compilation_cache_dir", before[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])
    config._reset_jax_cache()


def test_cache_switch(tmp_path, monkeypatch, restore_jax_cache):
    monkeypatch.setenv("JAXDYN_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", raising=False)
    assert jax.config.jax_compilation_cache_dir is None  # the suite runs without
    d = config.compilation_cache(True)
    assert d == str(config.compilation_cache_path()) and Path(d).is_dir()
    assert Path(d).parent == tmp_path / "c" / "xla"
    assert jaxdyn.__version__ in Path(d).name and jax.__version__ in Path(d).name
    assert jax.config.jax_compilation_cache_dir == d == config.compilation_cache_dir()
    assert jax.config.jax_persistent_cache_min_compile_time_secs == config.CACHE_MIN_COMPILE_SECS
    assert config.compilation_cache(True) == d  # idempotent
    assert config.compilation_cache(False) is None
    assert jax.config.jax_compilation_cache_dir is None
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 1.0
    assert config.compilation_cache_dir() is None


def test_cache_never_overrides_the_user(tmp_path, monkeypatch, restore_jax_cache):
    monkeypatch.setenv("JAXDYN_CACHE_DIR", str(tmp_path / "c"))
    user = str(tmp_path / "mine")
    jax.config.update("jax_compilation_cache_dir", user)
    assert config.compilation_cache(True) is None
    assert jax.config.jax_compilation_cache_dir == user
    config.compilation_cache(False)  # leaves the user's directory alone
    assert jax.config.jax_compilation_cache_dir == user
    jax.config.update("jax_compilation_cache_dir", None)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", user)
    assert config.compilation_cache(True) is None
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    # a cache directory that cannot be made: no cache, no error
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("JAXDYN_CACHE_DIR", str(tmp_path / "file"))
    assert config.compilation_cache(True) is None
    assert jax.config.jax_compilation_cache_dir is None


def test_compile_announced_while_it_runs(caplog):
    """A compile that outlasts the threshold is announced while XLA works on it ("compiling X
    for a batch of B..."), from a timer started when lowering ends; the line with the times
    follows. One that ends first is not announced; nor is a program without jaxdyn functions."""
    import threading

    old = _progress.threshold()
    try:
        config.compile_log(0.05)
        with caplog.at_level(logging.WARNING, logger="jaxdyn"):
            _progress._listener(_progress._TRACE, 0.01, fun_name="other")
            _progress._listener(_progress._LOWER, 0.01, fun_name="jit(other)")  # no notes
            assert _progress._state.timer is None
            _progress._listener(_progress._COMPILE, 0.01, fun_name="jit(other)")
            _progress.note("aba", 64)
            _progress._listener(_progress._TRACE, 0.01, fun_name="step")
            _progress._listener(_progress._LOWER, 0.01, fun_name="jit(step)")
            timer = _progress._state.timer
            assert isinstance(timer, threading.Timer)
            timer.join(30)  # "XLA" still compiling when the timer fires
            assert [r.getMessage() for r in caplog.records] == [
                "jaxdyn: compiling jit(step) [aba for a batch of 64]..."
            ]
            _progress._listener(_progress._COMPILE, 0.2, fun_name="jit(step)")
            _progress.note("crba", 8)
            _progress._listener(_progress._LOWER, 0.01, fun_name="jit(fast)")
            fast = _progress._state.timer
            _progress._listener(_progress._COMPILE, 0.01, fun_name="jit(fast)")  # done first
            fast.join(30)
        assert [r.getMessage() for r in caplog.records] == [
            "jaxdyn: compiling jit(step) [aba for a batch of 64]...",
            "jaxdyn: compiled jit(step) [aba for a batch of 64] in 0.2 s (trace 0.0 s, "
            "lowering 0.0 s, XLA 0.2 s)",
        ]
    finally:
        _progress.set_threshold(old)


def test_compile_log_line(caplog):
    """The line names the jit, the jaxdyn functions with their batch, and the phases; programs
    without jaxdyn functions and compiles under the threshold say nothing."""
    old = _progress.threshold()
    try:
        config.compile_log(1.0)
        with caplog.at_level(logging.WARNING, logger="jaxdyn"):
            _progress.note("aba", 1024)
            _progress.note("aba", 1024)
            _progress.note("crba")
            _progress._listener(_progress._TRACE, 0.5, fun_name="step")
            _progress._listener(_progress._LOWER, 0.3, fun_name="step")
            _progress._listener(_progress._COMPILE, 2.0, fun_name="step")
            _progress._listener(_progress._COMPILE, 5.0, fun_name="other")  # no jaxdyn notes
            _progress.note("rnea")
            _progress._listener(_progress._COMPILE, 0.5, fun_name="fast")  # under 1 s
            _progress.note("crba")
            _progress._listener(_progress._COMPILE, 1.5, fun_name="jit(run)")  # eager call
        assert [r.getMessage() for r in caplog.records] == [
            "jaxdyn: compiled jit(step) [aba for a batch of 1024, crba] in 2.8 s "
            "(trace 0.5 s, lowering 0.3 s, XLA 2.0 s)",
            "jaxdyn: compiled an eager call [crba] in 1.5 s (trace 0.0 s, lowering 0.0 s, "
            "XLA 1.5 s)",
        ]
        config.compile_log(None)
        assert _progress.threshold() is None
        with pytest.raises(ValueError, match="seconds"):
            config.compile_log(-1)
    finally:
        _progress.set_threshold(old)


#: persistent-cache hits seen while ``_RECORDING`` (one listener for the process: older JAX
#: cannot unregister one)
_HITS, _RECORDING = [], []
jax.monitoring.register_event_listener(
    lambda event, **kw: (
        _HITS.append(event) if _RECORDING and event == "/jax/compilation_cache/cache_hits" else None
    )
)


def test_session_cache_reads_programs_back():
    """The test session's own cache (``tests/conftest.py``, a temporary directory shared by
    pytest-xdist's workers; not jaxdyn's): a program dropped from JAX's in-memory caches, as
    at the end of every test module, is read back from it instead of compiled again, and
    gives the same result."""
    import conftest

    if conftest.SESSION_CACHE_DIR is None:
        pytest.skip("the session's compilation cache is off (JAXDYN_TEST_CACHE=0)")
    assert jax.config.jax_compilation_cache_dir == conftest.SESSION_CACHE_DIR
    assert config.compilation_cache_dir() is None  # jaxdyn's own stays off in the tests
    x = jax.numpy.linspace(0.0, 1.0, 7)
    f = jax.jit(lambda x: jax.numpy.sin(x) * 3.25 + 0.0123)  # a program no other test has
    first = f(x)
    assert any(p.name.endswith("-cache") for p in Path(conftest.SESSION_CACHE_DIR).iterdir())
    jax.clear_caches()
    _HITS.clear()
    _RECORDING[:] = [True]
    try:
        again = f(x)
    finally:
        _RECORDING[:] = []
    assert len(_HITS) == 1, _HITS
    np.testing.assert_array_equal(again, first)

"""Shared fixtures: float64 JAX, robots loaded once per session (jaxdyn + Pinocchio).

XLA compile time dominates this suite (every robot topology is a different program; measured
on 2 cores: about two thirds of the run is XLA compiling, a quarter tracing and lowering, the
rest running). Unless ``XLA_FLAGS`` already says otherwise, the CPU backend is asked for

* ``--xla_backend_optimization_level=0``: LLVM spends 3-4x less time per compile;
* ``--xla_cpu_use_fusion_emitters=false``: XLA:CPU's older elemental emitters for fusions,
  which compiled the suite's programs 2-2.5x faster again than the MLIR fusion emitters;
* ``--xla_cpu_parallel_codegen_split_count=1``: each program's LLVM module is compiled whole
  instead of in parts for a thread pool (pytest-xdist keeps both cores busy already, and every
  part repeats some of the work), and ``--xla_llvm_disable_expensive_passes=true``: together
  about a tenth less CPU time per compile (four of the suite's programs, Pinocchio's
  comparison bundle among them, compiled side by side with and without them; the results
  differ from the split module's in the last bits only, and not at all from the passes).

JAX is asked to leave Python tracebacks out of the programs' source locations
(``jax_traceback_in_locations_limit=0``; the operations keep their names): a few percent less
lowering and compile time, measured the same way.

The programs run somewhat slower and the arithmetic (IEEE, no fast-math) is unchanged. A flag
this jaxlib does not know would abort the process, so each is probed once in a subprocess
before it is used (the probe's result reaches pytest-xdist's workers through ``XLA_FLAGS``).
Set ``JAXDYN_TEST_XLA_OPT=1`` to keep XLA's defaults.

The session shares its compiled programs through JAX's persistent compilation cache in a
temporary directory (made by the process that starts the session, handed to pytest-xdist's
workers through ``JAXDYN_TEST_CACHE_DIR``, removed at the end; every program is written): a
program another file, worker or earlier module compiled (the same algorithm on the same robot,
again after ``jax.clear_caches``) is read back instead of compiled. ``JAXDYN_TEST_CACHE=0``
switches it off; the ``no_session_cache`` fixture does for one test.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import shutil
import tempfile

# the suite writes nothing into the user's compilation cache (~/.cache/jaxdyn/xla) and prints no
# compile-time lines; tests/test_compile_cache.py turns both on in subprocesses of its own
os.environ.setdefault("JAXDYN_COMPILATION_CACHE", "0")
os.environ.setdefault("JAXDYN_COMPILE_LOG", "0")
# no background compiles of fused trajectory-optimisation solves (switch trajopt_fused_loops,
# "auto" by default: a child process per problem structure); the tests that check them set it
os.environ.setdefault("JAXDYN_TRAJOPT_FUSED_LOOPS", "0")

# LAPACK-backed ops (Cholesky, LU, triangular solves) run in scipy's OpenBLAS; its thread pool
# stalls for milliseconds per call when the cores are busy (measured: a vmapped 40x40 triangular
# solve took up to 13 ms per sample instead of 15 us on 2 loaded cores). OpenBLAS reads this when
# it is loaded: before jaxdyn (whose import loads scipy.linalg), else it keeps one thread per core
# in a run without pytest-xdist (whose workers inherit the variable from this process).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from jaxdyn.backend.internals import reset_compilation_cache  # noqa: E402
from jaxdyn.backend.xla_flags import xla_accepts  # noqa: E402  (imports JAX, which starts no backend yet)

#: compile-time flags of the test run (see the module docstring), in the order they are added
FAST_COMPILE_FLAGS = (
    "--xla_backend_optimization_level=0",
    "--xla_cpu_use_fusion_emitters=false",
    "--xla_cpu_parallel_codegen_split_count=1",
    "--xla_llvm_disable_expensive_passes=true",
)


def _add_fast_compile_flags():
    """Append the :data:`FAST_COMPILE_FLAGS` that ``XLA_FLAGS`` does not set and this jaxlib
    accepts (probed once: pytest-xdist's workers inherit the result and the marker)."""
    flags = os.environ.get("XLA_FLAGS", "")
    missing = [f for f in FAST_COMPILE_FLAGS if f.split("=")[0] not in flags]
    if not missing or os.environ.get("JAXDYN_TEST_XLA_PROBED"):
        return
    if xla_accepts(" ".join([flags] + missing).strip()):
        accepted = missing
    else:  # keep what this jaxlib knows, one flag at a time
        accepted = [f for f in missing if xla_accepts(f"{flags} {f}".strip())]
    os.environ["XLA_FLAGS"] = " ".join([flags] + accepted).strip()
    os.environ["JAXDYN_TEST_XLA_PROBED"] = "1"


if os.environ.get("JAXDYN_TEST_XLA_OPT", "0") in ("0", ""):
    _add_fast_compile_flags()

try:
    _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]  # glibc only (AttributeError elsewhere)
except (OSError, AttributeError):
    _LIBC = None

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
if os.environ.get("JAXDYN_TEST_XLA_OPT", "0") in ("0", "") and hasattr(
    jax.config, "jax_traceback_in_locations_limit"
):
    jax.config.update("jax_traceback_in_locations_limit", 0)  # see the module docstring

import pytest  # noqa: E402

import oracle  # noqa: E402  (tests/ is on sys.path: pytest's rootdir conftest)

# ----------------------------------------------------------------- the session's compile cache
#: ``0`` switches the session's compilation cache off (every process compiles its own programs)
TEST_CACHE_ENV = "JAXDYN_TEST_CACHE"
#: the session's cache directory, made by the process that starts the session (pytest-xdist's
#: controller, or the only process with ``-n 0``) and inherited by the workers
TEST_CACHE_DIR_ENV = "JAXDYN_TEST_CACHE_DIR"
#: the directory this process made (and removes when the session ends), else ``None``
_OWN_CACHE_DIR: str | None = None
#: JAX's minimum compile time for a cache entry, as the session found it
_JAX_MIN_COMPILE_SECS = jax.config.jax_persistent_cache_min_compile_time_secs


def _session_cache_dir() -> str | None:
    """The directory of the session's compilation cache (made here if the session has none
    yet), or ``None`` when ``JAXDYN_TEST_CACHE=0``."""
    global _OWN_CACHE_DIR
    if os.environ.get(TEST_CACHE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    d = os.environ.get(TEST_CACHE_DIR_ENV)
    if not d or not os.path.isdir(d):
        d = tempfile.mkdtemp(prefix="jaxdyn-test-xla-")
        os.environ[TEST_CACHE_DIR_ENV] = d  # before pytest-xdist starts its workers
        _OWN_CACHE_DIR = d
    return d


def use_session_cache(d: str | None) -> None:
    """Point JAX's persistent compilation cache at ``d`` (every program written, however short
    its compile), or switch it off (``None``)."""
    jax.config.update("jax_compilation_cache_dir", d)
    jax.config.update(
        "jax_persistent_cache_min_compile_time_secs", 0.0 if d else _JAX_MIN_COMPILE_SECS
    )
    reset_compilation_cache()  # JAX reads the settings once per process otherwise


#: the session's cache directory (``None``: off)
SESSION_CACHE_DIR = _session_cache_dir()
if SESSION_CACHE_DIR is not None:
    use_session_cache(SESSION_CACHE_DIR)


def pytest_unconfigure(config):
    """The process that made the session's cache directory removes it."""
    if _OWN_CACHE_DIR is not None:
        shutil.rmtree(_OWN_CACHE_DIR, ignore_errors=True)


@pytest.fixture
def no_session_cache():
    """JAX's persistent compilation cache switched off for one test (as it is outside the test
    session: what a test of jaxdyn's own cache settings starts from), then on again."""
    use_session_cache(None)
    try:
        yield
    finally:
        use_session_cache(SESSION_CACHE_DIR)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (``addopts``), except that the files of
    :data:`oracle.SHARED_WORKER_FILES` run in one worker together: every test file runs in one
    worker (its module fixtures compile once), and the oracle sweeps share one compiled
    function per robot (``oracle.Case.jx``, cached for the session in each worker)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LoadFileShared(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return (
                "oracle sweeps" if path.rsplit("/", 1)[-1] in oracle.SHARED_WORKER_FILES else path
            )

    return LoadFileShared(config, log)


def pytest_collection_finish(session):
    """Move what the imports and the collection made (JAX, the test modules, their items) out
    of the cyclic garbage collector's reach (``gc.freeze``): the full collections of the run
    (one per module below, and Python's own) then scan only what the tests made (measured on
    three files: their full collections took a third of the time; the objects frozen live
    until the end of the run anyway); then the youngest generation's threshold is raised
    (:data:`GC_THRESHOLD0`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(int(os.environ.get("JAXDYN_TEST_GC0", GC_THRESHOLD0)), 10, 10)


#: Python's youngest-generation threshold for the run (Python's default: 700). Tracing makes
#: and drops objects by the million, and each 700 net allocations started a collection:
#: measured on test_sim.py with test_trajopt_input.py, about 3 % of the CPU time went to
#: collections that found nothing to free (peak memory unchanged at 100000).
#: ``JAXDYN_TEST_GC0`` overrides it.
GC_THRESHOLD0 = 100_000


@pytest.fixture(scope="session")
def robot_case(request):
    """``oracle.Case`` for the robot named by the (indirect) parameter, loaded once."""
    return oracle.robot_case(request.param)


@pytest.fixture(scope="session")
def arm7():
    return oracle.robot_case("arm7")


@pytest.fixture(scope="session")
def quad12():
    return oracle.robot_case("quad12")


@pytest.fixture(scope="session")
def solo12():
    return oracle.robot_case("solo12")


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop every compiled program when a test module ends.

    Each XLA:CPU executable keeps its machine code in its own memory mappings; a whole-suite run
    that kept all of them hit the kernel's mapping limit (``vm.max_map_count``, 65530 by default)
    and LLVM aborted with "Unable to allocate section memory". Modules share compiled functions
    through module-scope fixtures, so clearing between modules costs no extra compiles.

    The freed heap pages go back to the system here too (``malloc_trim``): a worker's memory
    stays near its largest module's instead of growing with fragmentation. Trimming after every
    test as well (as the suite did) cost more than it kept: the pages are faulted in again by the
    next test (measured on three files, 93 tests: 0.7 GB more page faults, 6-13 % more CPU
    time, a peak 2 % lower). ``JAXDYN_TEST_MALLOC_TRIM=0`` leaves the heap alone.
    """
    yield
    jax.clear_caches()
    gc.collect()
    if _LIBC is not None and os.environ.get("JAXDYN_TEST_MALLOC_TRIM", "1") != "0":
        _LIBC.malloc_trim(0)  # hand the freed code and buffers back to the system

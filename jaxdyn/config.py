"""Global switches of jaxdyn, in one place.

=========================  ================================ =========  =============================
name                       environment variable             default    effect
=========================  ================================ =========  =============================
``value_checks``           ``JAXDYN_VALUE_CHECKS``          ``True``   value checks under ``jit``
                                                                       (unit, finite quaternions in
                                                                       ``q``; traced ``damping``;
                                                                       finite constraint forces);
                                                                       :mod:`jaxdyn.value_checks`
``analytic_derivatives``   ``JAXDYN_ANALYTIC_DERIVATIVES``  ``True``   ``jaxdyn.rnea`` /
                                                                       ``jaxdyn.aba`` differentiate
                                                                       by their analytic
                                                                       ``custom_jvp`` rules (IDSVA /
                                                                       FDSVA); ``False``: plain
                                                                       autodiff of the algorithms
``unroll_max``             ``JAXDYN_UNROLL_MAX``            ``3``      small matrix products
                                                                       (:func:`jaxdyn.spatial.mm`)
                                                                       contracting at most this many
                                                                       terms are unrolled into
                                                                       broadcast products, larger
                                                                       ones use ``matmul``
``vmap_chunk``             ``JAXDYN_VMAP_CHUNK``            ``-1``     most samples per chunk when a
                                                                       public function runs under
                                                                       ``jax.vmap`` on the CPU
                                                                       (:mod:`jaxdyn.batching`):
                                                                       ``-1`` chosen from the
                                                                       model's size, ``0`` plain
                                                                       ``jax.vmap``, ``n > 0`` equal
                                                                       chunks of at most ``n``
``uninitialized_outputs``  ``JAXDYN_UNINITIALIZED_OUTPUTS`` ``True``   the chunk loop's output
                                                                       buffers start uninitialized
                                                                       on the CPU instead of filled
                                                                       (a no-op XLA FFI handler
                                                                       compiled at first use, see
                                                                       :mod:`jaxdyn.backend.ffi`)
``ffi_stores``             ``JAXDYN_FFI_STORES``            ``True``   under ``jax.vmap`` on the
                                                                       CPU, arrays that algorithms
                                                                       must not recompute are kept
                                                                       by a call of that handler
                                                                       (:func:`jaxdyn.backend.fusion.store`)
                                                                       instead of a copy
``cpu_kernels``            ``JAXDYN_CPU_KERNELS``           ``True``   on the CPU, ``crba``,
                                                                       ``minv``, ``aba``, ``rnea``,
                                                                       their derivatives and
                                                                       ``sim.step``'s solves call
                                                                       jaxdyn's C kernels (compiled
                                                                       at first use with that
                                                                       handler,
                                                                       :func:`jaxdyn.algorithms.crba.crba_kernel`);
                                                                       ``False``: XLA's code alone
``trajopt_fused_loops``    ``JAXDYN_TRAJOPT_FUSED_LOOPS``   ``"auto"`` ``True``: on the CPU, a
                                                                       trajectory-optimisation solve
                                                                       called with concrete arrays
                                                                       (``fddp``, ``ilqr``) is
                                                                       compiled into one XLA kernel
                                                                       (jaxlib >= 0.10; two to three
                                                                       times the compile time;
                                                                       :mod:`jaxdyn.backend.fused_programs`,
                                                                       ``docs/trajopt.md``);
                                                                       ``"auto"``: the first solve
                                                                       of a problem structure runs
                                                                       unfused while a child process
                                                                       compiles that kernel, later
                                                                       ones run it once it is ready;
                                                                       ``False``: one kernel per
                                                                       operation and knot
``fused_unbatched``        ``JAXDYN_FUSED_UNBATCHED``       ``True``   on the CPU, an algorithm
                                                                       evaluated alone (no
                                                                       ``vmap``) inside the
                                                                       caller's ``jit`` compiles to
                                                                       one XLA kernel where it can
                                                                       (jaxlib >= 0.10;
                                                                       :mod:`jaxdyn.backend.small_calls`);
                                                                       ``False``: one kernel per
                                                                       fused operation
=========================  ================================ =========  =============================

Each switch is read from its environment variable when jaxdyn is imported (booleans: ``0``,
``false``, ``no``, ``off`` are false, anything else true; ``trajopt_fused_loops``: ``auto``
or a boolean; ``unroll_max``: an integer >= 0;
``vmap_chunk``: an integer >= -1), then
changed with :func:`update` or, for a block of code, :func:`override`::

    jaxdyn.config.update("value_checks", False)
    with jaxdyn.config.override(analytic_derivatives=False, unroll_max=0):
        ...

**One rule for every switch:** switches are read when a function is *traced*, so a change of
value clears JAX's caches (``jax.clear_caches()``): functions already jitted trace again, with
the new value, on their next call. Setting a switch to its current value clears nothing.
The older entry points :func:`jaxdyn.set_value_checks`,
:func:`jaxdyn.derivatives.set_analytic_derivatives` and the context manager
:func:`jaxdyn.derivatives.analytic_derivatives` call :func:`update` / :func:`override`.

**Fused CPU loops** (opt-in, process-wide, before JAX starts its CPU backend):
:func:`fused_cpu_loops` or ``JAXDYN_FUSED_CPU_LOOPS=1`` in the environment. XLA:CPU runs a
``lax.scan`` as one small kernel call per operation per step, which bounds one
trajectory-optimisation problem's knot loops; with these flags it compiles a small loop (at
most ``max_bytes`` accessed) into a single kernel, which makes one FDDP solve faster and its
compile longer (``docs/trajopt.md``, "Fused CPU loops"; ``benchmarks/trajopt.py``). The flags
also turn off XLA's YNNPACK fusions (a loop holding one is not fused) and cap the instruction
set at AVX2 (AVX-512 code for a fused DDP backward pass took too much memory to compile,
jaxlib 0.10.2), so large batched programs in the same process may be slower.
jaxdyn's trajectory-optimisation knots then avoid LAPACK calls, ``constrained_aba`` too, and
``jaxdyn.sim`` avoids scatters (XLA does not fuse a loop holding a custom call or a scatter;
value checks are custom calls, so ``jaxdyn.sim.rollout`` checks before and after its loop):
``benchmarks/sim_one.py`` times one robot's rollout against MuJoCo C.
:func:`fused_cpu_loops_enabled` says whether the flags are set. Without them, one
trajectory-optimisation solve called with arrays on the CPU can still be compiled into one
kernel, per program (switch ``trajopt_fused_loops``: by default in a child process while the
first solves run unfused, :mod:`jaxdyn.backend.fused_programs`).

**Fast CPU compiles** (on by default, process-wide, before JAX starts its CPU backend): when
jaxdyn is imported it adds ``--xla_cpu_use_fusion_emitters=false`` to ``XLA_FLAGS``
(:func:`fast_cpu_compile`; :data:`jaxdyn.backend.xla_flags.FAST_COMPILE_FLAGS`): XLA:CPU then
compiles each fusion with its elemental IR emitter instead of its MLIR fusion emitters: less
CPU time to compile ``jax.jit(jax.vmap(f))`` of the core algorithms, kernels as fast, results
equal to rounding (``docs/design-measurements.md``, "Compile time"; the test suite has run with
the same flag since it was written). Not where ``XLA_FLAGS`` sets that flag, nor
with ``JAXDYN_FAST_CPU_COMPILE=0``, nor once JAX's backends run (jaxdyn imported after the
first array was made), nor on a jaxlib it was not measured with
(:data:`jaxdyn.backend.xla_flags.FAST_COMPILE_JAXLIB`: XLA aborts a process on a flag it does
not know). It applies to every program of the process, jaxdyn's or not.

**Freed buffers kept** (on by default, process-wide, glibc only): when jaxdyn is imported it
asks glibc's allocator to keep freed buffers of up to 32 MB in its heap for reuse, every thread
allocating from the main heap (:func:`keep_freed_buffers`: ``mallopt`` of
``M_MMAP_THRESHOLD``, ``M_TRIM_THRESHOLD`` up to 1 GB kept, ``M_ARENA_MAX`` 1), so that a
batch's large outputs (``nv x nv`` per sample: 20 MB for talos_full's mass matrices at
B = 1024) are not mapped and page-faulted in afresh on every call
(:mod:`jaxdyn.backend.allocator`; ``docs/performance.md``, "Memory allocation"). The process
then holds on to the memory it freed. Not with ``JAXDYN_KEEP_FREED_BUFFERS=0``; a parameter the
environment sets (``MALLOC_ARENA_MAX``, ...) stays as set; ``M_ARENA_MAX`` acts fully only
before JAX starts its CPU backend (jaxdyn imported before the first array is made).

**Persistent compilation cache** (on by default, process-wide): when jaxdyn is imported it
points JAX's persistent compilation cache at ``xla/<jaxdyn, jax and jaxlib versions>`` under
``$JAXDYN_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxdyn``, else ``~/.cache/jaxdyn``
(:func:`compilation_cache_path`), so that a program compiled by one process is read back by the
next. Not where the user set JAX's own (``jax_compilation_cache_dir``,
``JAX_COMPILATION_CACHE_DIR``: never overridden), nor with ``JAXDYN_COMPILATION_CACHE=0``;
:func:`compilation_cache` switches it, :func:`compilation_cache_dir` says where it is.
JAX's cache keys hold the program (value checks on and off are different programs), the
versions, the backend and the XLA flags; programs calling jaxdyn's FFI handlers are kept too
(the handlers are registered when the program is traced, before a cached executable runs).
The directory is not bounded in size (JAX's eviction needs the ``filelock`` package, which
jaxdyn does not require): delete it, or the subdirectories of older versions, at will.

**Executable cache** (on with the persistent cache): a trajectory-optimisation solve called with
arrays on the CPU (``fddp``, ``ilqr``) keeps its compiled program, serialized, in
``executables/<versions>/`` beside ``xla/`` under the same directory, keyed before tracing on
the problem (its structure and its arrays' values), the options, jaxdyn's source and switches,
JAX's configuration, ``XLA_FLAGS``, the versions and the CPU: a later process with the same key
loads it without tracing or lowering (:mod:`jaxdyn.backend.executable_cache`).
:func:`executable_cache` switches it (``JAXDYN_EXECUTABLE_CACHE=0`` at import); it is off
whenever jaxdyn's persistent cache is.

**Compile log**: :func:`compile_log` (``JAXDYN_COMPILE_LOG``, seconds, default 2): a line on
the ``jaxdyn`` logger while a slower compile of a program holding jaxdyn functions runs
("compiling ... for a batch of B...") and one when it is done (:mod:`jaxdyn._progress`).
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = [
    "get",
    "snapshot",
    "update",
    "override",
    "SWITCHES",
    "fused_cpu_loops",
    "fused_cpu_loops_enabled",
    "fast_cpu_compile",
    "keep_freed_buffers",
    "compilation_cache",
    "compilation_cache_dir",
    "compilation_cache_path",
    "compile_log",
    "executable_cache",
    "executable_cache_enabled",
    "executable_cache_path",
]

_FALSE = ("0", "false", "no", "off")


def _bool(name, value):
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE
    if not isinstance(value, (bool, int)):
        raise ValueError(f"jaxdyn.config.update: {name} must be a bool, got {value!r}")
    return bool(value)


def _fused(name, value):
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        return _bool(name, value)
    except ValueError:
        raise ValueError(
            f"jaxdyn.config.update: {name} must be 'auto' or a bool, got {value!r}"
        ) from None


def _nonneg_int(name, value):
    try:
        out = int(value)
    except (TypeError, ValueError):
        out = None
    if (
        out is None
        or out < 0
        or isinstance(value, bool)
        or (isinstance(value, float) and value != out)
    ):
        raise ValueError(f"jaxdyn.config.update: {name} must be an integer >= 0, got {value!r}")
    return out


def _chunk(name, value):
    if isinstance(value, str) and value.strip() == "-1":
        return -1
    if not isinstance(value, str) and not isinstance(value, bool) and value == -1:
        return -1
    try:
        return _nonneg_int(name, value)
    except ValueError:
        raise ValueError(
            f"jaxdyn.config.update: {name} must be -1 (automatic), 0 (plain jax.vmap) or a "
            f"positive chunk size, got {value!r}"
        ) from None


#: name -> (environment variable, default, validator)
SWITCHES = {
    "value_checks": ("JAXDYN_VALUE_CHECKS", True, _bool),
    "analytic_derivatives": ("JAXDYN_ANALYTIC_DERIVATIVES", True, _bool),
    "unroll_max": ("JAXDYN_UNROLL_MAX", 3, _nonneg_int),
    "vmap_chunk": ("JAXDYN_VMAP_CHUNK", -1, _chunk),
    "uninitialized_outputs": ("JAXDYN_UNINITIALIZED_OUTPUTS", True, _bool),
    "ffi_stores": ("JAXDYN_FFI_STORES", True, _bool),
    "cpu_kernels": ("JAXDYN_CPU_KERNELS", True, _bool),
    "trajopt_fused_loops": ("JAXDYN_TRAJOPT_FUSED_LOOPS", "auto", _fused),
    "fused_unbatched": ("JAXDYN_FUSED_UNBATCHED", True, _bool),
}


def _from_env(name):
    env, default, check = SWITCHES[name]
    raw = os.environ.get(env)
    if raw is None or raw.strip() == "":
        return default
    try:
        return check(name, raw)
    except ValueError:
        raise ValueError(
            f"jaxdyn.config: environment variable {env}={raw!r} is invalid "
            f"({name} must be {_EXPECTED.get(check, 'an integer >= 0')})"
        ) from None


_EXPECTED = {_bool: "a bool", _chunk: "an integer >= -1", _fused: "'auto' or a bool"}

_values = {name: _from_env(name) for name in SWITCHES}


def _known(fn, name):
    if name not in SWITCHES:
        raise ValueError(
            f"jaxdyn.config.{fn}: unknown switch {name!r}; known: " + ", ".join(sorted(SWITCHES))
        )


def get(name: str) -> Any:
    """Current value of the switch ``name``."""
    _known("get", name)
    return _values[name]


def snapshot() -> tuple:
    """The current values of all switches, in the order of ``SWITCHES`` (equal between two
    calls where no switch changed: a cheap key of them)."""
    return tuple(_values.values())


def update(name: str, value: Any) -> None:
    """Set the switch ``name`` to ``value``; a change clears JAX's caches (see the module)."""
    _known("update", name)
    value = SWITCHES[name][2](name, value)
    if value != _values[name]:
        import jax

        jax.clear_caches()
        _values[name] = value


@contextlib.contextmanager
def override(**switches: Any) -> Iterator[None]:
    """Set switches for the duration of a ``with`` block, restoring them afterwards (each
    change, in and out, follows the rule of :func:`update`)."""
    for name in switches:
        _known("override", name)
    old = {name: _values[name] for name in switches}
    try:
        for name, value in switches.items():
            update(name, value)
        yield
    finally:
        for name, value in old.items():
            update(name, value)


# ----------------------------------------------------------------------------- fused CPU loops
# XLA:CPU's flags for fused loops (jaxdyn.backend.xla_flags); the switch is this module's
from .backend import xla_flags as _xla_flags  # noqa: E402
from .backend.xla_flags import FUSED_LOOP_FLAGS as FUSED_LOOP_FLAGS  # noqa: E402
from .backend.xla_flags import fused_cpu_loops as fused_cpu_loops  # noqa: E402
from .backend.xla_flags import fused_cpu_loops_enabled as fused_cpu_loops_enabled  # noqa: E402

# their former private names here (code written against them)
_with_loop_option = _xla_flags.with_loop_option
_loop_bytes = _xla_flags.loop_bytes
_xla_accepts = _xla_flags.xla_accepts

if _bool("JAXDYN_FUSED_CPU_LOOPS", os.environ.get("JAXDYN_FUSED_CPU_LOOPS", "0") or "0"):
    try:
        fused_cpu_loops()
    except RuntimeError as e:  # JAX started before jaxdyn was imported: say so, do not fail
        import warnings

        warnings.warn(f"JAXDYN_FUSED_CPU_LOOPS=1 ignored: {e}", RuntimeWarning, stacklevel=2)


# ----------------------------------------------------------------------------- fast CPU compiles
from .backend.xla_flags import fast_cpu_compile as fast_cpu_compile  # noqa: E402

#: environment variable switching :func:`fast_cpu_compile` at import off (``0``)
FAST_COMPILE_ENV = "JAXDYN_FAST_CPU_COMPILE"


def _fast_compile_from_env() -> None:
    """At import: :func:`fast_cpu_compile` unless ``JAXDYN_FAST_CPU_COMPILE`` is false or JAX's
    backends already run (then XLA has read its flags: nothing to do, nothing said)."""
    if not _bool(FAST_COMPILE_ENV, os.environ.get(FAST_COMPILE_ENV, "1") or "1"):
        return
    from .backend.internals import backends_are_initialized

    if not backends_are_initialized():
        fast_cpu_compile(True)


_fast_compile_from_env()


# ----------------------------------------------------------------------------- freed buffers kept
from .backend.allocator import keep_freed_buffers as keep_freed_buffers  # noqa: E402

#: environment variable switching :func:`keep_freed_buffers` at import off (``0``)
KEEP_BUFFERS_ENV = "JAXDYN_KEEP_FREED_BUFFERS"


def _keep_buffers_from_env() -> None:
    """At import: :func:`keep_freed_buffers` unless ``JAXDYN_KEEP_FREED_BUFFERS`` is false."""
    if _bool(KEEP_BUFFERS_ENV, os.environ.get(KEEP_BUFFERS_ENV, "1") or "1"):
        keep_freed_buffers(True)


_keep_buffers_from_env()


# ----------------------------------------------------------------------------- compilation cache
#: environment variable switching jaxdyn's default persistent compilation cache off (``0``)
CACHE_ENV = "JAXDYN_COMPILATION_CACHE"
#: programs whose XLA compile is shorter than this (seconds) are not written to the cache
#: (JAX's own default is 1 s; jaxdyn's eager calls take less, and reading one back costs
#: milliseconds): a warm ``python -m jaxdyn demo`` starts faster at 0.1 than at 0.5, and 0
#: adds JAX's op-by-op programs for nothing (``docs/design-measurements.md``)
CACHE_MIN_COMPILE_SECS = 0.1

#: what :func:`compilation_cache` set: the directory, and the previous minimum compile time
_cache_state: dict = {"dir": None, "min_secs": None}


def _jax_flag(name: str) -> Any:
    """The value of JAX's config flag ``name``: ``jax.config.<name>``, which JAX adds as an
    attribute at run time (type checkers do not see it)."""
    import jax

    return getattr(jax.config, name)


def _cache_root():
    """``$JAXDYN_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxdyn``, else ``~/.cache/jaxdyn`` (the
    convention of :func:`jaxdyn.backend.ffi.cache_dir`)."""
    from pathlib import Path

    env = os.environ.get("JAXDYN_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jaxdyn"


def compilation_cache_path() -> Path:
    """The directory jaxdyn gives JAX's persistent compilation cache: ``xla/`` under jaxdyn's
    cache directory (:func:`_cache_root`), one subdirectory per jaxdyn, jax and jaxlib version
    (JAX's keys name the versions too; the subdirectories keep an upgrade's stale entries
    apart, to be deleted as a whole)."""
    import jax
    import jaxlib.version

    from ._versions import __version__

    name = f"jaxdyn-{__version__}_jax-{jax.__version__}_jaxlib-{jaxlib.version.__version__}"
    return _cache_root() / "xla" / name


def _user_cache_dir() -> bool:
    """Whether the user configured JAX's cache directory (or switched the cache off) other than
    through jaxdyn."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return True
    current = _jax_flag("jax_compilation_cache_dir")
    if current is not None and str(current) != str(_cache_state["dir"]):
        return True
    return not _jax_flag("jax_enable_compilation_cache")


def _reset_jax_cache() -> None:
    """Let JAX read its cache settings again at the next compile (it reads them once per
    process; a compile before jaxdyn was imported would otherwise keep the cache off)."""
    from .backend.internals import reset_compilation_cache

    reset_compilation_cache()


def compilation_cache(enabled: bool = True) -> str | None:
    """Use (or stop using) JAX's persistent compilation cache in jaxdyn's directory
    (:func:`compilation_cache_path`), so that a program compiled by one process is read back by
    the next instead of compiled again. On by default when jaxdyn is imported, unless
    ``JAXDYN_COMPILATION_CACHE=0``, the user set JAX's own cache directory
    (``jax.config.update("jax_compilation_cache_dir", ...)`` or ``JAX_COMPILATION_CACHE_DIR``:
    never overridden) or switched JAX's cache off, or the directory cannot be written.
    Programs compiling in under :data:`CACHE_MIN_COMPILE_SECS` are not written (unless the user
    set ``jax_persistent_cache_min_compile_time_secs``). Returns the directory in use, or
    ``None`` where jaxdyn does not set one. ``compilation_cache(False)`` undoes what jaxdyn set
    (a directory of the user's stays)."""
    import jax

    if not enabled:
        if _cache_state["dir"] is not None:
            if str(_jax_flag("jax_compilation_cache_dir")) == str(_cache_state["dir"]):
                jax.config.update("jax_compilation_cache_dir", None)
            if _cache_state["min_secs"] is not None:
                jax.config.update(
                    "jax_persistent_cache_min_compile_time_secs", _cache_state["min_secs"]
                )
            _cache_state.update(dir=None, min_secs=None)
            _reset_jax_cache()
        return None
    if _cache_state["dir"] is not None:
        return _cache_state["dir"]
    if _user_cache_dir():
        return None
    path = compilation_cache_path()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(path, os.W_OK | os.X_OK):
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    min_secs = _jax_flag("jax_persistent_cache_min_compile_time_secs")
    if min_secs == 1.0 and not os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
        jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECS)
        _cache_state["min_secs"] = min_secs
    _cache_state["dir"] = str(path)
    _reset_jax_cache()
    return _cache_state["dir"]


def compilation_cache_dir() -> str | None:
    """The directory jaxdyn set for JAX's persistent compilation cache, or ``None``
    (:func:`compilation_cache`)."""
    return _cache_state["dir"]


def _cache_from_env() -> None:
    """At import: :func:`compilation_cache` unless ``JAXDYN_COMPILATION_CACHE`` is false."""
    if _bool(CACHE_ENV, os.environ.get(CACHE_ENV, "1") or "1"):
        compilation_cache(True)


# ----------------------------------------------------------------------------- compile log
#: environment variable: seconds above which a compile is reported (``0``: never)
COMPILE_LOG_ENV = "JAXDYN_COMPILE_LOG"


def compile_log(seconds: float | None = 2.0) -> None:
    """Report each compile of a program holding jaxdyn functions that takes longer than
    ``seconds`` (tracing, lowering and XLA together) on the ``jaxdyn`` logger (a line while XLA
    works on it, one with the times when done), at
    level ``WARNING`` so that it shows without any logging set up (:mod:`jaxdyn._progress`);
    ``None`` or ``0``: never. Default 2 s, or ``JAXDYN_COMPILE_LOG`` at import. Silence it
    with this function or ``logging.getLogger("jaxdyn").setLevel(logging.ERROR)``."""
    from . import _progress

    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0
    ):
        raise ValueError(
            f"jaxdyn.config.compile_log: seconds must be a number >= 0 or None, got {seconds!r}"
        )
    _progress.set_threshold(seconds if seconds else None)


# ----------------------------------------------------------------------------- executable cache
EXECUTABLE_CACHE_ENV = "JAXDYN_EXECUTABLE_CACHE"
_executable_cache = {"on": _bool(EXECUTABLE_CACHE_ENV, os.environ.get(EXECUTABLE_CACHE_ENV, "1"))}


def executable_cache(enabled: bool = True) -> str | None:
    """Use (or stop using) jaxdyn's cache of serialized executables
    (:mod:`jaxdyn.backend.executable_cache`; on by default, ``JAXDYN_EXECUTABLE_CACHE=0`` at
    import turns it off). Returns its directory when it is in use (it needs jaxdyn's persistent
    compilation cache, :func:`compilation_cache`), else ``None``; programs already loaded in
    the process stay in use."""
    _executable_cache["on"] = bool(enabled)
    return str(executable_cache_path()) if executable_cache_enabled() else None


def executable_cache_enabled() -> bool:
    """Whether jaxdyn's executable cache is used: its switch (:func:`executable_cache`) on and
    jaxdyn's persistent compilation cache in use (:func:`compilation_cache_dir`)."""
    return bool(_executable_cache["on"]) and compilation_cache_dir() is not None


def executable_cache_path() -> Path:
    """``executables/<jaxdyn, jax and jaxlib versions>`` under jaxdyn's cache directory."""
    return _cache_root() / "executables" / compilation_cache_path().name

"""XLA:CPU's process-wide flags, written into ``XLA_FLAGS`` before JAX starts its CPU backend
(XLA reads them once per process):

* fused loops (:func:`fused_cpu_loops`, opt-in; :mod:`jaxdyn.config`'s docstring says why):
  compiling each small while loop into one kernel;
* fast compiles (:func:`fast_cpu_compile`, on by default where measured): XLA:CPU compiles each
  fusion with its elemental IR emitter instead of its MLIR fusion emitters.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator

from .internals import backends_are_initialized

#: XLA option (in ``--xla_backend_extra_options``) that compiles a while loop accessing fewer
#: bytes than its value into one kernel (XLA:CPU's ``SmallWhileLoopHoistingPass``)
_LOOP_OPTION = "xla_cpu_small_while_loop_byte_threshold"
_EXTRA = "--xla_backend_extra_options="
#: flags that keep the loops fusable (no YNNPACK custom fusions inside) and their code
#: generation bounded (AVX2; see the module docstring)
FUSED_LOOP_FLAGS = ("--xla_cpu_experimental_ynn_fusion_type=", "--xla_cpu_max_isa=AVX2")


#: XLA flags of :func:`fast_cpu_compile`: each fusion compiled by XLA:CPU's elemental IR emitter
#: (straight to LLVM IR) instead of its MLIR fusion emitters (an MLIR pass pipeline per fusion
#: before LLVM's): less compile time for the core algorithms, their batched run times no slower
#: and results equal to rounding (``docs/design-measurements.md``, "Compile time")
FAST_COMPILE_FLAGS = ("--xla_cpu_use_fusion_emitters=false",)
#: ``(major, minor)`` releases of jaxlib whose XLA:CPU was measured with
#: :data:`FAST_COMPILE_FLAGS` (an ``XLA_FLAGS`` entry a jaxlib does not know aborts the process,
#: so other releases get none)
FAST_COMPILE_JAXLIB = ((0, 10),)
#: per-program XLA options of a *quick* compile (``jaxdyn.trajopt.fddp(..., compile="quick")``):
#: LLVM without its optimisation passes and code generation at ``-O0``. On the quad12 FDDP
#: solve with four point contacts (jaxlib 0.10.2, 2-core VM) the compile took 5.9 s against
#: 13.4 s and the solve 353 ms against 114 ms, the same iterations and final cost: for a
#: program that runs a few times, not for a loop of solves
QUICK_COMPILE = {"xla_backend_optimization_level": 0}


def _flag_name(flag: str) -> str:
    return flag.split("=")[0] + "="


def with_fast_compile(flags: str) -> str:
    """``flags`` (an ``XLA_FLAGS`` string) with :data:`FAST_COMPILE_FLAGS` in front, except those
    it sets already (the user's value wins)."""
    words = flags.split()
    new = [f for f in FAST_COMPILE_FLAGS if not any(w.startswith(_flag_name(f)) for w in words)]
    return " ".join(new + words)


def without_fast_compile(flags: str) -> str:
    """``flags`` without the exact words of :data:`FAST_COMPILE_FLAGS`."""
    return " ".join(w for w in flags.split() if w not in FAST_COMPILE_FLAGS)


def fast_compile_supported() -> bool:
    """Whether this jaxlib is one of :data:`FAST_COMPILE_JAXLIB`."""
    import jaxlib.version

    from .._versions import release

    return release(jaxlib.version.__version__)[:2] in FAST_COMPILE_JAXLIB


def fast_compile_set() -> bool:
    """Whether ``XLA_FLAGS`` holds every word of :data:`FAST_COMPILE_FLAGS`."""
    words = os.environ.get("XLA_FLAGS", "").split()
    return all(f in words for f in FAST_COMPILE_FLAGS)


def fast_cpu_compile(enabled: bool = True) -> bool:
    """Ask XLA:CPU to compile each fusion with its elemental IR emitter (:data:`FAST_COMPILE_FLAGS`:
    less compile time for the same kernels' speed, see there), or stop asking (``False``:
    removes what this added). jaxdyn calls it when imported unless
    ``JAXDYN_FAST_CPU_COMPILE=0``. Applies to every program the process compiles afterwards;
    must run before JAX starts its CPU backend (before the first array is made): raises
    ``RuntimeError`` after, as when the flags would change. A flag the user set in
    ``XLA_FLAGS`` stays as set; a jaxlib outside :data:`FAST_COMPILE_JAXLIB` gets nothing.
    Returns whether ``XLA_FLAGS`` now holds the flags."""
    if not isinstance(enabled, bool):
        raise ValueError(f"jaxdyn.config.fast_cpu_compile: enabled must be a bool, got {enabled!r}")
    flags = os.environ.get("XLA_FLAGS", "")
    if enabled and fast_compile_supported():
        new = with_fast_compile(flags)
    elif not enabled:
        new = without_fast_compile(flags)
    else:
        new = flags
    if " ".join(new.split()) != " ".join(flags.split()):
        if backends_are_initialized():
            raise RuntimeError(
                "jaxdyn.config.fast_cpu_compile: JAX's backends are already running, so new XLA "
                "flags would be ignored; call it (or set JAXDYN_FAST_CPU_COMPILE) before the "
                "first JAX array is created"
            )
        os.environ["XLA_FLAGS"] = new
    return fast_compile_set()


def with_loop_option(flags: str, max_bytes: int) -> str:
    """``flags`` (an ``XLA_FLAGS`` string) with the loop threshold set to ``max_bytes`` (merged
    into an existing ``--xla_backend_extra_options``) and :data:`FUSED_LOOP_FLAGS` added."""
    words, found = [], False
    for w in flags.split():
        if w.startswith(_EXTRA):
            opts = [o for o in w[len(_EXTRA) :].split(",") if o and not o.startswith(_LOOP_OPTION)]
            w = _EXTRA + ",".join(opts + [f"{_LOOP_OPTION}={max_bytes}"])
            found = True
        words.append(w)
    new = [] if found else [f"{_EXTRA}{_LOOP_OPTION}={max_bytes}"]
    for f in FUSED_LOOP_FLAGS:
        name = f.split("=")[0] + "="
        if not any(w.startswith(name) for w in words):
            new.append(f)
    # in front: XLA stops reading XLA_FLAGS at the first word that is not a --flag
    return " ".join(new + words)


def loop_bytes(flags: str) -> int:
    """The loop threshold set in ``flags`` (0: none)."""
    out = 0
    for w in flags.split():
        if w.startswith(_EXTRA):
            for o in w[len(_EXTRA) :].split(","):
                if o.startswith(_LOOP_OPTION + "="):
                    try:
                        out = int(o.split("=", 1)[1])
                    except ValueError:
                        out = 0
    return out


def fused_cpu_loops(max_bytes: int = 1 << 30) -> None:
    """Ask XLA:CPU to compile each loop accessing fewer than ``max_bytes`` bytes (XLA's cost
    estimate, summed over the iterations: an FDDP knot scan of arm7 with 100 knots counts
    about 100 MB) into one kernel (see the module docstring): adds the flags to
    ``XLA_FLAGS`` (nothing to do when they are there already). Must run before JAX starts its
    CPU backend (before the first array is made); raises ``RuntimeError`` after. Through
    ``JAXDYN_FUSED_CPU_LOOPS=1`` at import, a backend already running gives a warning."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError(
            f"jaxdyn.config.fused_cpu_loops: max_bytes must be a positive int, got {max_bytes!r}"
        )
    flags = os.environ.get("XLA_FLAGS", "")
    if " ".join(flags.split()) == with_loop_option(flags, max_bytes):
        return  # already set (a child process inherits its parent's XLA_FLAGS)
    if backends_are_initialized():
        raise RuntimeError(
            "jaxdyn.config.fused_cpu_loops: JAX's backends are already running, so new XLA "
            "flags would be ignored; call it (or set JAXDYN_FUSED_CPU_LOOPS=1) before the "
            "first JAX array is created"
        )
    flags = with_loop_option(flags, max_bytes)
    if not xla_accepts(flags):
        raise RuntimeError(
            "jaxdyn.config.fused_cpu_loops: this jaxlib's CPU backend does not start with "
            f"XLA_FLAGS={flags!r} (a flag it does not know aborts the process); fused loops "
            "were written for jaxlib 0.10"
        )
    os.environ["XLA_FLAGS"] = flags


def xla_accepts(flags: str) -> bool:
    """Whether a fresh process starts JAX's CPU backend with ``XLA_FLAGS=flags`` (XLA aborts a
    process on a flag it does not know, so the flags are tried in a child first)."""
    import subprocess
    import sys

    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu", JAXDYN_FUSED_CPU_LOOPS="0")
    try:
        r = subprocess.run(
            [sys.executable, "-c", "import jax; jax.devices()"],
            env=env,
            capture_output=True,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


#: set while a program compiled into one kernel (:mod:`.fused_programs`) is traced
_FUSED_PROGRAM = contextvars.ContextVar("jaxdyn_fused_program", default=False)


@contextlib.contextmanager
def tracing_fused_program() -> Iterator[None]:
    """While a program of :mod:`.fused_programs` is traced: :func:`fused_cpu_loops_enabled`
    answers ``True`` (no custom call in the program)."""
    token = _FUSED_PROGRAM.set(True)
    try:
        yield
    finally:
        _FUSED_PROGRAM.reset(token)


def loop_bytes_set() -> bool:
    """Whether ``XLA_FLAGS`` sets the loop threshold (:func:`fused_cpu_loops`)."""
    return loop_bytes(os.environ.get("XLA_FLAGS", "")) > 0


def fused_cpu_loops_enabled() -> bool:
    """Whether ``XLA_FLAGS`` asks XLA:CPU to fuse small loops (:func:`fused_cpu_loops`) and the
    default backend is the CPU, or a program compiled into one kernel is being traced
    (:mod:`.fused_programs`): trajectory optimisation then keeps its knot loops free of
    LAPACK calls. Read when a function is traced."""
    if _FUSED_PROGRAM.get():
        return True
    if not loop_bytes_set():
        return False
    import jax

    return jax.default_backend() == "cpu"

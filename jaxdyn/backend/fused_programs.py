"""Fused CPU loops for one program: :func:`fused_jit` compiles a function into a single XLA:CPU
kernel without the process-wide ``XLA_FLAGS`` of :mod:`.xla_flags`.

XLA:CPU runs an HLO ``call`` whose frontend attribute ``xla_cpu_small_call`` is ``"true"`` as one
kernel (its thunk emitter hands the callee to the legacy IR emitter, which emits loops and
branches natively); that is what its ``SmallWhileLoopHoistingPass`` does to a while loop
accessing fewer bytes than ``xla_cpu_small_while_loop_byte_threshold``. That threshold is an
entry of the map ``DebugOptions.xla_backend_extra_options``, which JAX's per-program
``compiler_options`` cannot set (jaxlib 0.10.2: "While setting option
xla_backend_extra_options, '...' is not a valid message value": only scalar, string and enum
options are taken), and ``XLA_FLAGS`` is read once per process. So :func:`fused_jit`

* traces the function as an inner ``jax.jit`` inside
  ``jax.experimental.xla_metadata.set_xla_metadata(xla_cpu_small_call="true",
  inlineable="false")``: the call and every operation and nested call in it carry the
  attributes (``inlineable="false"`` keeps XLA's call inliner off them). Tagging the outer call
  alone (``set_xla_metadata`` on its results) compiled a small loop but aborted the process on
  FDDP's program (jaxlib 0.10.2, XLA's IR emitter: "Check failed: ... All or none of the slices
  should have an explicit index");
* compiles the program with the other two flags of :data:`.xla_flags.FUSED_LOOP_FLAGS` as
  per-program ``compiler_options`` (:data:`COMPILER_OPTIONS`; both are taken per program): no
  YNNPACK fusions (one inside the call does not compile: "Fusion kind not implemented on
  CPU"), AVX2 code (bounded compile memory);
* traces the function with :func:`~.xla_flags.fused_cpu_loops_enabled` answering ``True``
  (the callers then keep LAPACK and FFI custom calls out of it).

Not with ``--xla_cpu_multi_thread_eigen=false`` in ``XLA_FLAGS`` (the usual flag for keeping
XLA:CPU on one thread; :func:`eigen_single_threaded`): XLA's dot emitter then writes every
small matrix product as a tiled LLVM IR GEMM instead of a call into Eigen
(``CanEmitTiledLlvmIrGemm`` in XLA's ``dot_op_emitter.cc``; one 7x14 by 14x14 product in a
loop: 0.5 MB of LLVM IR against 36 kB), and one kernel holding a whole FDDP solve then took
unbounded memory to compile (jaxlib 0.10.2, arm7: past 16 GB, against 0.4 GB without the
flag). A per-program ``compiler_options`` of ``True`` does not override that flag (a
``False`` does), so the background compile's child runs without it (its executable calls
Eigen), and under it a fused program asked for in this process (the switch ``True``, or
:meth:`FusedJit.call` with ``on=True``) is compiled by such a child as well, waited for (memory
bounded as below); where that fails, the plain program runs, with a warning naming the flag,
once per :class:`FusedJit`.

Only where that program is the one compiled: a call with concrete arrays on the CPU backend
(inside the caller's own ``jit``, ``vmap`` or ``shard_map`` the arrays are tracers, and the
caller's compile options rule), the switch named by the caller on, and ``XLA_FLAGS`` not fusing
loops already (then the plain program is fused by XLA). Everywhere else, and if XLA refuses the
fused program (``UNIMPLEMENTED``; a warning then), the plain function runs: the same values to
rounding, the same derivatives.

**In the background** (the switch ``"auto"``, ``trajopt_fused_loops``'s default): every call of a
program structure (the static parts, the arrays' shapes and dtypes, jaxdyn's switches and
``jax_enable_x64``) runs the plain program until the fused one is there; the :data:`START_AFTER`-th
(the fifth: a script that solves a few times starts nothing) starts a child Python process that
compiles the fused program (:mod:`._fused_compile`: it unpickles the arguments, compiles, and
returns the executable serialized by ``jax.experimental.serialize_executable``). Later calls of that
structure run the plain program until the child is done, then the fused executable (loaded at the
first call after that, in the calling thread, which runs it and the plain program twice each, waited
for, and keeps the faster for that structure (one kernel is not faster on every program); an
executable that does not run falls back there and then). The compile is in another process so that
it neither holds up the caller nor keeps the interpreter from exiting (a thread still inside XLA's
compile when Python finalizes aborts the process), and so that an abort inside XLA on a program
structure it cannot emit as one kernel stops the child, not the caller. A child that fails
(arguments that do not pickle, a refused or aborted compile, an executable that does not load or
run) leaves that structure on the plain program for the rest of the process (a line on the
``jaxdyn`` logger says why). One child at a time (another structure starts at its next call once the
child is done); a child still compiling when the interpreter exits is killed (one whose parent was
killed by a signal stops by itself). :func:`wait` waits for them."""

from __future__ import annotations

import atexit
import functools
import logging
import os
import pickle
import subprocess
import sys
import threading
import warnings
from typing import TYPE_CHECKING, Any

from . import xla_flags

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import jax.stages

#: the per-program XLA options of fused loops (the process-wide flags of
#: :data:`.xla_flags.FUSED_LOOP_FLAGS` as ``jax.jit(..., compiler_options=...)``)
COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "", "xla_cpu_max_isa": "AVX2"}
#: frontend attributes of the call compiled into one kernel
SMALL_CALL = {"xla_cpu_small_call": "true", "inlineable": "false"}


def concrete_on_cpu(leaves: Any) -> bool:
    """Whether the arrays ``leaves`` (a pytree) are concrete and on the CPU, in a process whose
    default backend is the CPU (numpy arrays included; a tracer of the caller's ``jit``,
    ``vmap`` or ``shard_map`` is not)."""
    import jax
    import jax.core

    if jax.default_backend() != "cpu":
        return False
    for x in jax.tree.leaves(leaves):
        if isinstance(x, jax.core.Tracer):
            return False
        devices = getattr(x, "devices", None)
        if devices is not None and any(d.platform != "cpu" for d in devices()):
            return False
    return True


@functools.cache
def supported() -> bool:
    """Whether this jaxlib compiles the fused program: written for and tested on jaxlib 0.10
    (older XLA:CPU has no ``xla_cpu_experimental_ynn_fusion_type`` option: "No such compile
    option"), with ``jax.experimental.xla_metadata``."""
    import jaxlib.version

    try:
        from jax.experimental import xla_metadata  # noqa: F401
    except ImportError:
        return False
    from .._versions import release

    return release(jaxlib.version.__version__)[:2] >= (0, 10)


#: the :mod:`jaxdyn.config` value of a switch that compiles the fused program in the background
AUTO = "auto"

logger = logging.getLogger("jaxdyn")


#: the ``XLA_FLAGS`` option of :func:`eigen_single_threaded`
EIGEN_THREADS_FLAG = "--xla_cpu_multi_thread_eigen"


def eigen_single_threaded(flags: str | None = None) -> bool:
    """Whether ``flags`` (default: ``XLA_FLAGS``) turn XLA:CPU's multi-threaded Eigen off, with
    which a fused program's small matrix products are compiled as tiled LLVM IR GEMMs (see
    the module)."""
    flags = os.environ.get("XLA_FLAGS", "") if flags is None else flags
    out = False
    for w in flags.split():
        if w.startswith(EIGEN_THREADS_FLAG + "="):
            out = w.split("=", 1)[1].strip().lower() in ("false", "0")
    return out


def without_eigen_flag(flags: str) -> str:
    """``flags`` without :data:`EIGEN_THREADS_FLAG` (the background compile's child)."""
    return " ".join(w for w in flags.split() if not w.startswith(EIGEN_THREADS_FLAG + "="))


class _Child:
    """One background compile: a child Python process running :mod:`._fused_compile` on a
    pickled payload; a daemon thread collects its output (a thread blocked on a pipe is
    harmless at interpreter exit, unlike one inside XLA)."""

    def __init__(self, payload: bytes, out_tree: Any, n_in: int) -> None:
        self.out_tree, self.n_in = out_tree, n_in
        self.result: tuple[int, bytes, bytes] | None = None
        self.done = threading.Event()
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        # Eigen's matrix products, not tiled LLVM IR GEMMs: bounded compile memory (module)
        env["XLA_FLAGS"] = without_eigen_flag(env.get("XLA_FLAGS", ""))
        env["PYTHONPATH"] = os.pathsep.join(
            [root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jaxdyn.backend._fused_compile", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        _CHILDREN.add(self)
        self.over_memory = False
        threading.Thread(target=self._collect, args=(payload,), daemon=True).start()
        threading.Thread(target=self._watch_memory, daemon=True).start()

    def _watch_memory(self) -> None:
        """Kill the child when its resident memory passes :func:`child_memory_limit` (read from
        ``/proc``; where that does not exist, no limit)."""
        limit = child_memory_limit()
        status = f"/proc/{self.proc.pid}/status"
        while not self.done.wait(0.25):
            try:
                with open(status) as f:
                    rss = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmRSS:"))
            except (OSError, StopIteration, ValueError):
                return
            if rss > limit:
                self.over_memory = True
                self.kill()
                return

    def _collect(self, payload: bytes) -> None:
        try:
            out, err = self.proc.communicate(payload)
            self.result = (self.proc.returncode, out, err)
        except Exception as e:  # a broken pipe: the child died early
            self.result = (-1, b"", repr(e).encode())
        finally:
            _CHILDREN.discard(self)
            self.done.set()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


#: the most resident memory a background compile may take (bytes), and the fraction of the
#: machine's memory: the smaller of the two (:func:`child_memory_limit`). Measured on the 2-core
#: VM (jaxlib 0.10.2): UR5's fused solve compiled in 0.4 GB and arm7's in 0.4 GB; arm7's grew
#: past 16 GB (killed) when the child inherited ``--xla_cpu_multi_thread_eigen=false`` (module).
CHILD_MEMORY = 4 << 30
CHILD_MEMORY_FRACTION = 0.25


def child_memory_limit() -> int:
    """The resident-memory limit of a background compile's child: :data:`CHILD_MEMORY`, at most
    :data:`CHILD_MEMORY_FRACTION` of the machine's memory where ``/proc/meminfo`` tells it."""
    limit = CHILD_MEMORY
    try:
        with open("/proc/meminfo") as f:
            total = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemTotal:"))
        limit = min(limit, int(CHILD_MEMORY_FRACTION * total))
    except (OSError, StopIteration, ValueError):
        pass
    return limit


#: the solve of a structure at which the background compile starts (``"auto"``): the fifth, so
#: that a script that solves a problem once, or compiles it and times a few solves (the
#: examples, benchmarks' best-of-3), never starts a child process competing for the cores;
#: repeated solves (an MPC loop, a sweep) do
START_AFTER = 5

#: children still compiling (killed when the interpreter exits)
_CHILDREN: set = set()


@atexit.register
def _kill_children() -> None:
    for child in list(_CHILDREN):
        child.kill()


def wait(timeout: float | None = None) -> bool:
    """Wait until no background compile (see the module) is running, at most ``timeout``
    seconds (``None``: no limit); ``True`` when none is. Its executable is loaded at the next
    call of its program structure."""
    import time

    end = None if timeout is None else time.monotonic() + timeout
    for child in list(_CHILDREN):
        left = None if end is None else max(0.0, end - time.monotonic())
        if not child.done.wait(left):
            return False
    return True


def _signature(dyn) -> tuple:
    """The arrays' part of a background compile's key: shapes, dtypes, weak types (``dyn``: the
    flat array leaves of :func:`_split`)."""
    return tuple((x.shape, x.dtype, getattr(x, "weak_type", False)) for x in dyn)


def _settings() -> tuple:
    """The settings a trace reads besides the arguments: jaxdyn's switches, ``jax_enable_x64``."""

    from .. import config

    return (tuple((n, config.get(n)) for n in sorted(config.SWITCHES)), _x64())


def _x64() -> bool:
    import jax

    return bool(jax.config.jax_enable_x64)  # pyright: ignore[reportAttributeAccessIssue]


def _split(args):
    import equinox as eqx
    import jax

    leaves, treedef = jax.tree.flatten(args)
    mask = tuple(eqx.is_array(x) for x in leaves)
    dyn = [x for x, m in zip(leaves, mask) if m]
    static = tuple(x for x, m in zip(leaves, mask) if not m)
    return dyn, (treedef, mask, static)


def _merge(dyn, static):
    treedef, mask, st = static
    dyn, st = iter(dyn), iter(st)
    return treedef.unflatten([next(dyn) if m else next(st) for m in mask])


class FusedJit:
    """``fn(*args)`` compiled as one XLA:CPU kernel where that is possible (see the module),
    else ``fallback(*args)`` (``fn`` under ``equinox.filter_jit``, as a rule). Arguments as
    ``equinox.filter_jit``'s: array leaves are traced, the other leaves static (hashable).
    ``switch``: the :mod:`jaxdyn.config` switch that turns the fused program on (``True``),
    off (``False``) or compiles it in the background (``"auto"``); ``where``:
    ``"module:attribute"`` of this object, by which a child process finds it (no background
    compile without it)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        fallback: Callable[..., Any],
        switch: str,
        where: str | None = None,
    ) -> None:
        import jax

        self.fn, self.fallback, self.switch, self.where = fn, fallback, switch, where
        self.refused: set = set()  # static parts whose fused program XLA refused
        self.ready: dict = {}  # background: key -> loaded executable (jax.stages.Compiled)
        self.pending: dict = {}  # background: key -> _Child
        self.failed: dict = {}  # background: keys left on the plain program -> why
        self.solves: dict = {}  # background: key -> plain solves before a child starts
        self.warned_eigen = False  # the warning of eigen_single_threaded, once
        self.lock = threading.Lock()  # a compile in a child process waited for, one at a time

        def program(static, dyn):
            from jax.experimental.xla_metadata import set_xla_metadata

            def body(d):
                a, k = _merge(d, static)
                return self.fn(*a, **k)

            with xla_flags.tracing_fused_program(), set_xla_metadata(**SMALL_CALL):
                return jax.jit(body)(dyn)

        self.program = jax.jit(program, static_argnums=0, compiler_options=COMPILER_OPTIONS)

    def usable(self, dyn: Sequence[Any], on: bool | None = None) -> bool:
        """Whether this call compiles the fused program (see the module); ``on``: the switch's
        value for this call (``None``: :mod:`jaxdyn.config`'s)."""

        from .. import config

        on = config.get(self.switch) if on is None else on
        if on is not True or xla_flags.loop_bytes_set() or not supported():
            return False
        return concrete_on_cpu(dyn)

    def background(self, dyn: Sequence[Any], on: Any = None) -> bool:
        """Whether this call takes the background path (see the module): the switch ``"auto"``
        and a call that :meth:`usable` would take with the switch on."""
        from .. import config

        on = config.get(self.switch) if on is None else on
        return on == AUTO and self.where is not None and self.usable(dyn, True)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(None, *args, **kwargs)

    def call(self, on: bool | None, *args: Any, **kwargs: Any) -> Any:
        """``self(*args, **kwargs)`` with the switch ``on`` for this call (``None``: as
        :mod:`jaxdyn.config` has it): callers that know the fused program pays for itself
        (many solves of one structure) ask for it whatever the switch's default."""
        import jax

        dyn, static = _split((args, kwargs))
        if self.background(dyn, on):
            return self._tiered(dyn, static, args, kwargs)
        if static in self.refused or not self.usable(dyn, on):
            return self.fallback(*args, **kwargs)
        if eigen_single_threaded():
            compiled = self._compiled_in_child(dyn, static, args, kwargs)
            if compiled is not None:
                return compiled(dyn)
            if not self.warned_eigen:
                self.warned_eigen = True
                key = (static, _signature(dyn), _settings())
                why = self.failed.get(key, "no child process without a module path")
                warnings.warn(
                    f"jaxdyn: not compiling {getattr(self.fn, '__name__', 'a program')} as one "
                    f"XLA:CPU kernel: XLA_FLAGS holds {EIGEN_THREADS_FLAG}=false, with which "
                    "that compile can take unbounded memory in this process (arm7's FDDP "
                    f"solve: past 16 GB), and the compile in a child process without it failed "
                    f"({why}); running it unfused",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return self.fallback(*args, **kwargs)
        try:
            return self.program(static, dyn)
        except jax.errors.JaxRuntimeError as e:
            msg = str(e)
            if not (
                msg.startswith("UNIMPLEMENTED")
                or msg.startswith("INVALID_ARGUMENT: No such compile option")
            ):
                raise
            self.refused.add(static)
            warnings.warn(
                f"jaxdyn: XLA:CPU did not compile {getattr(self.fn, '__name__', 'a program')} "
                f"as one kernel ({str(e).splitlines()[0]}); running it unfused (switch: "
                f"jaxdyn.config {self.switch!r})",
                RuntimeWarning,
                stacklevel=2,
            )
            return self.fallback(*args, **kwargs)

    def _tiered(self, dyn, static, args, kwargs):
        """The background path (see the module)."""

        key = (static, _signature(dyn), _settings())
        if key not in self.failed:
            compiled = self.ready.get(key)
            child = self.pending.get(key)
            first = compiled is None and child is not None and child.done.is_set()
            if first and child is not None:
                del self.pending[key]
                compiled = self._load(key, child)
            if compiled is not None:
                try:
                    if first:  # its first runs waited for: an error is raised here, not later
                        return self._choose(key, compiled, dyn, args, kwargs)
                    return compiled(dyn)
                except Exception as e:  # an executable that does not run: the plain one
                    self._fail(key, f"the fused executable did not run ({e!r})")
        out = self.fallback(*args, **kwargs)
        if key not in self.failed and key not in self.ready and key not in self.pending:
            self.solves[key] = self.solves.get(key, 0) + 1
            # a structure solved START_AFTER times (repeated solves: MPC, sweeps); a script
            # that solves a few times never starts a child
            if self.solves[key] >= START_AFTER and not _CHILDREN:  # one child at a time
                self._start(key, dyn, args, kwargs, out)
        return out

    def _compiled_in_child(self, dyn, static, args, kwargs):
        """The fused executable of this call's structure compiled by a child process (as the
        background compile's, :class:`_Child`: without :data:`EIGEN_THREADS_FLAG`, its memory
        bounded) and waited for, once per structure; ``None`` where that failed (the reason
        in :attr:`failed`) or this object has no ``where``."""
        if self.where is None:
            return None
        key = (static, _signature(dyn), _settings())
        with self.lock:  # solve_batch's threads: one compile
            if key in self.failed or key in self.ready:
                return self.ready.get(key)
            try:
                shapes = self.program.eval_shape(static, dyn)
                self._start(key, dyn, args, kwargs, shapes)
            except Exception as e:  # a program that does not trace here fails below too
                self._fail(key, f"no compile in a child process ({e!r})")
                return None
            child = self.pending.pop(key, None)
            if child is None:  # _start failed (arguments that do not pickle)
                return None
            child.done.wait()
            return self._load(key, child)

    def _choose(self, key, compiled, dyn, args, kwargs):
        """The first calls of a loaded fused executable: it and the plain program run twice
        each on this call's arguments, in turn, waited for; the one with the shorter of its two
        wall-clock times is kept for the structure (one kernel is not faster on every program:
        the plain program's kernels are XLA's vectorising fusion emitters and LAPACK), and its
        result returned."""
        import time

        import jax

        def timed(f):
            t0 = time.perf_counter()
            out = jax.block_until_ready(f())
            return time.perf_counter() - t0, out

        fused, plain = [], []
        for _ in range(2):
            fused.append(timed(lambda: compiled(dyn)))
            plain.append(timed(lambda: self.fallback(*args, **kwargs)))
        t_fused, out = min(fused, key=lambda r: r[0])
        t_plain = min(t for t, _ in plain)
        if self.keep_fused(t_fused, t_plain):
            return out
        self._fail(
            key,
            f"the fused program ran slower ({t_fused * 1e3:.3g} ms against "
            f"{t_plain * 1e3:.3g} ms unfused)",
        )
        return plain[-1][1]

    @staticmethod
    def keep_fused(t_fused: float, t_plain: float) -> bool:
        """:meth:`_choose`'s rule: the fused program when its time is the shorter."""
        return t_fused < t_plain

    def _fail(self, key, why: str) -> None:
        self.failed[key] = why
        self.ready.pop(key, None)
        logger.info(
            "jaxdyn: %s stays unfused in this process: %s",
            getattr(self.fn, "__name__", "a program"),
            why,
        )

    def _start(self, key, dyn, args, kwargs, out) -> None:
        import jax

        from .. import config

        try:
            # the arguments pickled apart: the child unpickles them once its settings are set
            payload = pickle.dumps(
                dict(
                    where=self.where,
                    x64=_x64(),
                    config={n: config.get(n) for n in config.SWITCHES},
                    call=pickle.dumps((args, kwargs)),
                )
            )
            self.pending[key] = _Child(payload, jax.tree.structure(out), len(dyn))
        except Exception as e:  # arguments that do not pickle (a lambda), no interpreter
            self._fail(key, f"no background compile ({e!r})")

    def _load(self, key, child: _Child):
        from jax.experimental import serialize_executable

        rc, out, err = child.result or (-1, b"", b"")
        if rc != 0:
            lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip("* ")]
            how = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"
            if child.over_memory:
                how = f"stopped above {child_memory_limit() / 2**30:.3g} GiB of memory"
            self._fail(key, f"the background compile failed ({how}: {lines[-1:]})")
            return None
        try:
            import jax

            n_in = int.from_bytes(out[:8], "little")
            if n_in != child.n_in:
                raise ValueError(f"{n_in} inputs compiled, {child.n_in} expected")
            in_tree = jax.tree.structure(((list(range(n_in)),), {}))
            compiled = serialize_executable.deserialize_and_load(out[8:], in_tree, child.out_tree)
        except Exception as e:
            self._fail(key, f"the fused executable did not load ({e!r})")
            return None
        self.ready[key] = compiled
        return compiled

    def lower(self, *args: Any, **kwargs: Any) -> jax.stages.Lowered:
        """The fused program lowered for ``args`` (``jax.stages.Lowered``: its ``compile()``
        and ``as_text()`` show the tagged call), whether or not a call would use it."""
        dyn, static = _split((args, kwargs))
        return self.program.lower(static, dyn)


def fused_jit(
    fn: Callable[..., Any],
    fallback: Callable[..., Any],
    switch: str,
    where: str | None = None,
) -> FusedJit:
    """:class:`FusedJit` of ``fn`` with ``fallback`` (see the module)."""
    return FusedJit(fn, fallback, switch, where)

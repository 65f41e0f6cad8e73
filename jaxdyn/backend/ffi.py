"""Uninitialized output buffers for the chunk loop on the CPU.

:func:`jaxdyn.batching._map_chunks` writes each chunk's outputs into one buffer per output of
the whole batch, and every entry of those buffers is written by some chunk. XLA has no way to
make a buffer without writing it (``lax.empty`` is a fill of zeros on the CPU; its uninitialized
``AllocateBuffer`` exists on GPUs and TPUs only), so the loop began by filling each buffer with a
constant: a pass over the whole output before the loop, as long as writing the output itself,
a noticeable share of the batched call for ``nv x nv`` outputs
(``docs/design-measurements.md``).

:func:`uninitialized` makes the buffer with an XLA FFI custom call whose handler does nothing
(``_uninitialized.c``, a dozen lines of C): XLA allocates its result and leaves it as it is.
The handler is compiled by the system C compiler (``$CC``, else ``cc``) against the running
jaxlib's own FFI header (``jax.ffi.include_dir()``) and cached (``$JAXDYN_CACHE_DIR``, else
``$XDG_CACHE_HOME/jaxdyn``, else ``~/.cache/jaxdyn``, and where that cannot be written a
directory of the user's under the system's temporary directory; one file per source, header,
compiler and flags). A process that does not find it compiled starts that compile in a
background thread when jaxdyn is imported (:func:`build_in_background`;
``JAXDYN_BUILD_HANDLER=0`` turns that off; the compilers at a lower priority,
:data:`BACKGROUND_NICE`), so that the compiler runs beside the imports and
tracing, and the first program that calls the handler waits only for what is left of it (the
handlers' library, a few lines of C at ``-O2``, is usually done before the imports are). It is
used only where it is safe and possible, and the buffer is filled as before otherwise:

* the switch ``jaxdyn.config.update("uninitialized_outputs", False)``
  (``JAXDYN_UNINITIALIZED_OUTPUTS=0``) turns it off;
* on other platforms than the CPU, under ``jax.export`` (a serialized program must not name a
  handler that only this process registered), when run op by op (no ``jit``), and where no
  compiler or no ``jax.ffi`` is available (:func:`status` says why).

The same handler **stores** arrays (:func:`store`, behind :func:`jaxdyn.backend.fusion.store`):
a call of it whose results alias its operands computes nothing and copies nothing, yet XLA
cannot fuse the operands' producers through it, so they are computed once into buffers of their
own instead of inside every consumer. Only under ``jax.vmap`` (a batched call; a single
evaluation leaves the arrays to XLA, where an extra kernel costs more than it saves) and on the
CPU; not with the switch off (``jaxdyn.config.update("ffi_stores", False)``,
``JAXDYN_FFI_STORES=0``), under ``jax.export``, in a program that XLA partitions over several
devices (``jax.sharding``: the partitioner would gather the batch to call the handler on the
whole), nor with :func:`jaxdyn.config.fused_cpu_loops` (XLA does not fuse a loop that holds a
custom call). Elsewhere the arrays pass through unchanged.

A second handler of the same library **checks** values (:func:`check`, behind
:func:`jaxdyn.value_checks.error_if`): a call whose last operand is a predicate fails the program
with its ``message`` attribute where the predicate is true (XLA raises ``INVALID_ARGUMENT:
<message>``), and otherwise passes its other operands through (its results alias them). Unlike
``equinox.error_if``'s host callback it lets JAX's persistent compilation cache keep the
program. Not under ``jax.export`` nor in partitioned programs (``equinox.error_if`` there),
except for a batch split over ``Explicit`` mesh axes: its check runs on each device's samples
(``jax.shard_map`` around the call, in the check's batching rule).

jaxdyn's CPU kernels, written in C where XLA's code stays slower than Pinocchio's C++ however
it is arranged, are a second library, built after the handlers by the same thread:
``jaxdyn_crba``, ``jaxdyn_minv``, ``jaxdyn_rnea``, ``jaxdyn_rnea_derivatives`` and
``jaxdyn_aba`` (``_kernels.c``, ``_crba_kernel.h``, ``_minv_kernel.h``, ``_rnea_kernel.h``,
``_rnea_derivatives_kernel.h``, ``_aba_kernel.h``, one sample per vector lane;
:func:`jaxdyn.backend.crba_kernel.crba_kernel`, :func:`~jaxdyn.backend.crba_kernel.minv_kernel`,
:func:`jaxdyn.backend.rnea_kernel.rnea_kernel`,
:func:`jaxdyn.backend.rnea_derivatives_kernel.rnea_derivatives_kernel` and
:func:`jaxdyn.backend.aba_kernel.aba_kernel`, the switch ``cpu_kernels``). Apart, the
programs that call no kernel (most) never wait for their compile, and a trace that calls one
does not either (:func:`kernels_expected`): the lowering of the kernel's call waits for what is
left of the build (:func:`kernels_available`) and lowers XLA's code should it fail. The kernels
are compiled with ``-O3`` (``-O2`` runs the CRBA kernel slower: ``docs/performance.md``), for
the running CPU's x86-64 level alone where ``/proc/cpuinfo`` tells it (:func:`_x86_level`, in
the file key: the code of the clone that the portable build's dispatch picks on this CPU, for a
fraction of the compile), else with target clones for AVX-512 and AVX2 (GCC on x86-64) chosen
when the library loads. The same library holds two plain C entry points over those kernels,
``jaxdyn_host_init`` and ``jaxdyn_host_run``, which compute one sample without XLA for
``jaxdyn.compile_for_latency(..., dispatch="native")`` (:mod:`jaxdyn.backend.host_calls`). A third
library, that path's CPython extension module (``_host_module.c``: the call object's type, which
takes numpy arrays into the kernel's buffers and returns a new array, in C), is compiled against
the running Python's and numpy's headers (:func:`build_host_module`, at ``-O2``; the include
directories, which name the Python, and numpy's version in its file key) when such a call is
first compiled, never in the background.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import jax
import jax.core
import jax.extend.core
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching, mlir
from jax.sharding import PartitionSpec as P

from .. import config

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

TARGET = "jaxdyn_uninitialized"
#: the same handler under the name of the stores (:func:`store`), so that programs say which
STORE_TARGET = "jaxdyn_store"
#: the value checks' handler (:func:`check`)
CHECK_TARGET = "jaxdyn_check"
#: the mesh axis type under which every array's type carries its sharding (``jax.make_mesh``'s
#: default since JAX 0.7)
EXPLICIT = jax.sharding.AxisType.Explicit
_HERE = Path(__file__).parent
#: the handlers' source (the chunk loop's buffers, the stores, the value checks)
SOURCE = _HERE / "_uninitialized.c"
#: the headers ``SOURCE`` includes (in the library's file key)
HEADERS = (_HERE / "_ffi_util.h",)
#: the CPU kernels' source (:func:`jaxdyn.backend.crba_kernel.crba_kernel`), a library of its own
KERNEL_SOURCE = _HERE / "_kernels.c"
#: the headers ``KERNEL_SOURCE`` includes
KERNEL_HEADERS = (
    _HERE / "_ffi_util.h",
    _HERE / "_crba_kernel.h",
    _HERE / "_minv_kernel.h",
    _HERE / "_rnea_kernel.h",
    _HERE / "_rnea_derivatives_kernel.h",
    _HERE / "_aba_kernel.h",
)
#: the CRBA kernel's target (:func:`jaxdyn.backend.crba_kernel.crba_kernel`)
CRBA_TARGET = "jaxdyn_crba"
#: the Minv kernel's target (:func:`jaxdyn.backend.crba_kernel.minv_kernel`)
MINV_TARGET = "jaxdyn_minv"
#: the RNEA kernel's target (:func:`jaxdyn.backend.rnea_kernel.rnea_kernel`)
RNEA_TARGET = "jaxdyn_rnea"
#: the ABA kernel's target (:func:`jaxdyn.backend.aba_kernel.aba_kernel`)
ABA_TARGET = "jaxdyn_aba"
#: the RNEA derivatives' kernel's target
#: (:func:`jaxdyn.backend.rnea_derivatives_kernel.rnea_derivatives_kernel`)
RNEA_DERIVATIVES_TARGET = "jaxdyn_rnea_derivatives"

logger = logging.getLogger("jaxdyn")


class _Library:
    """One of jaxdyn's shared libraries: its file name's prefix, its source and headers, its
    compile flags, a lock (one build at a time in a process, :func:`build`) and its state
    (``tried``, ``ok``, ``why``: :func:`available`; ``lib``: the loaded library)."""

    def __init__(
        self,
        prefix: str,
        source: Path,
        headers: tuple[Path, ...],
        kernels: bool,
        python: bool = False,
    ):
        self.prefix, self.source, self.headers, self.kernels = prefix, source, headers, kernels
        self.python = python  # a CPython extension module (compiled against Python.h)
        self.lock = threading.Lock()
        self.registering = threading.Lock()  # one registration at a time (_available)
        self.state: dict[str, Any] = {"tried": False, "ok": False, "why": "not tried yet"}
        self.state["lib"] = None

    def flags(self) -> list[list[str]]:
        """The compiles to try, in order, each a list of flags: the handlers, a few lines that
        run once per program, at ``-O2``; the kernels at ``-O3``, for the running CPU's
        x86-64 level alone where it is known (:func:`_x86_level`), and should the compiler
        refuse that ``-march``, portable (target clones, as where the level is unknown)."""
        if self.python:  # the include directories name the Python and numpy (in the file key)
            import numpy

            return [
                [
                    "-O2",
                    "-pthread",
                    "-I",
                    _python_include(),
                    "-I",
                    numpy.get_include(),
                    f"-DJAXDYN_NUMPY={numpy.__version__}",  # the key: numpy's C ABI
                ]
            ]
        if not self.kernels:
            return [["-O2"]]
        level = _x86_level()
        if level is None:
            return [["-O3"]]
        return [["-O3", f"-march={level}", "-DJAXDYN_ONE_TARGET"], ["-O3"]]


#: the handlers (``jaxdyn_uninitialized``, ``jaxdyn_store``, ``jaxdyn_check``)
HANDLERS = _Library("uninitialized", SOURCE, HEADERS, kernels=False)
#: the CPU kernels (``jaxdyn_crba``)
KERNELS = _Library("kernels", KERNEL_SOURCE, KERNEL_HEADERS, kernels=True)
#: the one-sample calls' CPython extension module (``_jaxdyn_host``,
#: :func:`jaxdyn.backend.host_calls.host_module`; its ``state["lib"]`` is the imported module)
HOST_MODULE = _Library("host", _HERE / "_host_module.c", (), kernels=False, python=True)
#: one build of the handlers at a time (:func:`build`)
_build_lock = HANDLERS.lock

#: the instruction sets of x86-64-v3 and x86-64-v4 as ``/proc/cpuinfo`` names them
_V3 = frozenset(("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"))
_V4 = _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


@functools.cache
def _x86_level() -> str | None:
    """The running CPU's x86-64 micro-architecture level (``x86-64-v4``, ``x86-64-v3``,
    ``x86-64``) from the flags of ``/proc/cpuinfo`` on x86-64 Linux, else ``None``. The
    kernels compiled for it alone are the clone that their portable build's dispatch picks on
    this CPU (``target_clones``), for a fraction of the compile; the level is in the library's
    file key, so a cache shared by other CPUs holds one library per level."""
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return None
    have = set(flags.partition(":")[2].split())
    if not have:
        return None
    return "x86-64-v4" if _V4 <= have else "x86-64-v3" if _V3 <= have else "x86-64"


def _python_include() -> str:
    """The running Python's C headers' directory (``sysconfig``'s ``include``; for a virtual
    environment, its base Python's)."""
    import sysconfig

    return sysconfig.get_paths()["include"]


def build_host_module(cc: str | None = None, directory: Path | None = None) -> Path:
    """:func:`build` of the one-sample calls' extension module (``_host_module.c``), against the
    running Python's headers: ``RuntimeError`` where they are missing (``Python.h``: a
    distribution's ``python3-dev``) or the compile fails."""
    include = Path(_python_include())
    if not (include / "Python.h").is_file():
        raise RuntimeError(f"the Python headers are missing: no Python.h in {include}")
    with HOST_MODULE.lock:
        return _build(HOST_MODULE, cc, directory)


def cache_dir() -> Path:
    """Where the compiled libraries are kept (see the module docstring)."""
    env = os.environ.get("JAXDYN_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jaxdyn"


def build(cc: str | None = None, directory: Path | None = None) -> Path:
    """Compile the handlers (``_uninitialized.c``) into a shared library (or find it compiled)
    and return its path. Raises ``RuntimeError`` naming the compiler and its message when it
    fails. One build at a time in a process: a call while another thread builds
    (:func:`build_in_background`) waits for it and then finds its library."""
    with HANDLERS.lock:
        return _build(HANDLERS, cc, directory)


def build_kernels(cc: str | None = None, directory: Path | None = None) -> Path:
    """:func:`build` of the CPU kernels' library (``_kernels.c``)."""
    with KERNELS.lock:
        return _build(KERNELS, cc, directory)


def _compiler(cc: str | None) -> tuple[list[str], Path]:
    """The compiler command (``cc``, else ``$CC``, else ``cc``; it may carry flags or a
    wrapper: ``"ccache gcc"``, ``"gcc -m64"``) and jaxlib's FFI header."""
    include = Path(jax.ffi.include_dir())
    header = include / "xla" / "ffi" / "api" / "c_api.h"
    if not header.is_file():
        raise RuntimeError(f"jaxlib's XLA FFI header is missing: {header}")
    cc = cc or os.environ.get("CC") or "cc"
    words = shlex.split(cc)
    exe = shutil.which(words[0]) if words else None
    if exe is None:
        raise RuntimeError(f"no C compiler: {cc!r} is not on PATH (set CC)")
    return [exe, *words[1:]], header


def _build(
    library: _Library, cc: str | None, directory: Path | None, background: bool = False
) -> Path:
    """The library's file, found or compiled; ``background``: its compiler commands run at the
    lower scheduling priority :data:`BACKGROUND_NICE`, through ``nice`` (where it is on
    ``PATH``) in front of the compiler command, as any wrapper in ``cc`` (not in the file
    key: the same library)."""
    exe, header = _compiler(cc)
    flags = library.flags()
    name = _file_name(library, exe, header, flags)
    nice = shutil.which("nice") if background and BACKGROUND_NICE else None
    if nice:
        exe = [nice, "-n", str(BACKGROUND_NICE), *exe]
    dirs = [Path(directory)] if directory is not None else [cache_dir(), _temp_dir()]
    for d in dirs:
        if (d / name).is_file():
            return d / name
    for d in dirs:  # the cache, else (unwritable) a directory of this user's under /tmp
        try:
            d.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=d)
        except OSError:
            continue
        os.close(fd)
        _temporaries.add(tmp)  # removed at exit should the process end during the compile
        return _compile(library, exe, header.parents[3], flags, tmp, d / name)
    raise RuntimeError(f"no writable directory for the compiled library: {dirs}")


def _file_name(library: _Library, exe: list, header: Path, flags: list[list[str]]) -> str:
    """The library's file name: its prefix and :func:`_key` under the first of ``flags`` (a
    fallback compile, should the first flags be refused, is kept under the same name)."""
    return f"{library.prefix}-{_key(library, exe, header, flags[0])}.so"


def _key(library: _Library, exe: list, header: Path, flags: list[str]) -> str:
    """The library's file key: its sources, the FFI header, the compiler command and flags,
    the platform."""
    return hashlib.sha256(
        library.source.read_bytes()
        + b"".join(h.read_bytes() for h in library.headers)
        + header.read_bytes()
        + " ".join(exe + flags).encode()
        + sys.platform.encode()
    ).hexdigest()[:16]


def _temp_dir() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"jaxdyn-{uid}"


#: the kernels' library is compiled in this many parts side by side, then linked
#: (``JAXDYN_PART`` in ``_kernels.c``: the wide float64 blocks, the wide float32 blocks, and
#: the rest, the longest): a cold process's first kernel call waits for the build
#: (docs/performance.md, "The kernels' library, cold"); 1 compiles the source whole
KERNEL_PARTS = 3
#: seconds a compiler command may run before it is stopped (a hung compiler must not hold the
#: first kernel call for ever; a loaded machine's compile of the kernels' parts took over
#: 120 s, so this is generous). A compile stopped by it fails the build at once: the next
#: flags (:meth:`_Library.flags`, a portable build that compiles every kernel thrice) are for
#: a compiler that refuses the first, not for a slow machine
COMPILE_TIMEOUT = 600.0
#: the ``nice`` increment of the compiles that :func:`build_in_background` starts: below the
#: process's own threads, so that on a machine with few cores the compiler takes what tracing
#: and XLA leave (docs/performance.md, "The kernels' library, cold"), yet not so low that a
#: busy machine starves it (``nice`` 10: about a tenth of a core against each busy thread);
#: 0 turns it off
BACKGROUND_NICE = 10


class _Timeout(RuntimeError):
    """A compiler command stopped after :data:`COMPILE_TIMEOUT` seconds."""


def _cores() -> int:
    """The cores this process may run on (its affinity where the platform tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _run_compiles(cmds: list[list[str]], outputs: list[str]) -> tuple[int, str]:
    """Run the compiler commands side by side, at most one per core (:func:`_cores`), in their
    order as cores free up (each writing its entry of ``outputs``, removed at exit should the
    process end first: :func:`_stop_compiles`); ``(0, "")`` where all succeed, else the first
    failure's return code and message. Raises :class:`_Timeout` where a command ran past
    :data:`COMPILE_TIMEOUT` (all of them stopped, none started after it). One per core: the
    kernels' three parts on two cores ran all at once, so the longest (the first) shared its
    core with a third of the work and finished last, after the others."""
    from concurrent.futures import ThreadPoolExecutor

    lock = threading.Lock()
    procs: list[subprocess.Popen] = []
    late: list[str] = []

    def run(cmd: list[str], out: str) -> tuple[int, str, str] | None:
        with lock:
            if late:
                return None
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            _compiling[p] = out
            procs.append(p)
        try:
            stdout, stderr = p.communicate(timeout=COMPILE_TIMEOUT)
        except subprocess.TimeoutExpired:
            with lock:
                late.append(f"{' '.join(cmd)} timed out after {COMPILE_TIMEOUT:.0f} s")
                for q in procs:  # the others too: the build fails anyway
                    if q.poll() is None:
                        q.kill()
            stdout, stderr = p.communicate()
        finally:
            _compiling.pop(p, None)
        return p.returncode, stdout, stderr

    with ThreadPoolExecutor(max_workers=min(len(cmds), _cores())) as pool:
        results = list(pool.map(run, cmds, outputs))
    if late:
        raise _Timeout(late[0])
    for cmd, r in zip(cmds, results, strict=True):
        if r is not None and r[0] != 0:
            return r[0] or 1, f"{' '.join(cmd)} failed:\n{(r[2] or r[1])[-2000:]}"
    return 0, ""


def _compile(library, exe, include, flags, tmp, lib):
    """Compile ``library`` into ``tmp`` with each of ``flags`` in turn until one compiles,
    then move it to ``lib``; raises with the last compiler message where none does, and at
    once where a compile runs past :data:`COMPILE_TIMEOUT`. The kernels' library is compiled
    in :data:`KERNEL_PARTS` objects side by side, then linked."""
    common = ["-fPIC", "-I", str(include), "-I", str(library.source.parent)]
    parts = KERNEL_PARTS if library.kernels else 1  # (1: the whole source in one compile)
    objs = [f"{tmp}.part{k}.o" for k in range(parts)] if parts > 1 else []
    try:
        for i, fl in enumerate(flags):
            if objs:
                cmds = [
                    [*exe, *fl, *common, f"-DJAXDYN_PART={k}", "-c", str(library.source), "-o", o]
                    for k, o in enumerate(objs)
                ]
                code, msg = _run_compiles(cmds, objs)
                if code == 0:
                    code, msg = _run_compiles([[*exe, *fl, "-shared", *objs, "-o", tmp]], [tmp])
            else:
                cmd = [*exe, *fl, "-shared", *common, str(library.source), "-o", tmp]
                code, msg = _run_compiles([cmd], [tmp])
            if code == 0:
                break
            if i == len(flags) - 1:
                raise RuntimeError(msg)
        os.replace(tmp, lib)  # atomic: processes building at once each install a whole file
    finally:
        for f in (tmp, *objs):
            if os.path.exists(f):
                os.unlink(f)
        _temporaries.discard(tmp)
    return lib


#: compiler processes running -> their output file (:func:`_stop_compiles` at exit)
_compiling: dict = {}
#: the libraries' temporary files (``tempfile.mkstemp``) of the builds under way, removed at
#: exit (:func:`_stop_compiles`): a process that ended during its background build left an
#: empty one in the cache directory
_temporaries: set = set()


@atexit.register
def _stop_compiles() -> None:
    """At exit: stop a compile still running (the background build of a process that needed no
    library) and remove its half-written output and the library's temporary file; the next
    process builds again."""
    for p, tmp in list(_compiling.items()):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            p.terminate()  # the compiler driver removes its temporary files on SIGTERM
            p.wait(timeout=5)
        if p.poll() is None:
            with contextlib.suppress(OSError):
                p.kill()
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    for tmp in list(_temporaries):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def build_in_background() -> bool:
    """Start compiling the libraries that are not compiled yet in a daemon thread, the handlers
    first (a few lines of C), then the kernels (the longer compile), so that the C compiler
    runs beside the process's imports and tracing rather than inside its first trace or
    lowering that needs them, which then waits for what is left (:func:`build`). Called when
    jaxdyn is imported (not with ``JAXDYN_BUILD_HANDLER=0``, nor on Windows or without
    ``jax.ffi``). Returns whether a build was started; a failure is left to :func:`available`
    and :func:`kernels_available`, which try again and say why."""
    if sys.platform == "win32" or not hasattr(jax, "ffi"):
        return False
    if os.environ.get("JAXDYN_BUILD_HANDLER", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    todo = []
    for library in (HANDLERS, KERNELS):
        if library.state["tried"] or not library.lock.acquire(blocking=False):
            continue
        try:
            built = _built(library) is not None
        except Exception:  # no header, no compiler: available() says why
            built = True
        if built:
            library.lock.release()
        else:
            todo.append(library)
    if not todo:
        return False

    def run():
        for library in todo:
            try:
                _build(library, None, None, background=True)
            except Exception as e:  # available() builds again and reports it
                logger.debug("jaxdyn: background build of %s failed: %r", library.source.name, e)
            finally:
                library.lock.release()

    try:
        threading.Thread(target=run, name="jaxdyn-ffi-build", daemon=True).start()
    except RuntimeError:
        for library in todo:
            library.lock.release()
        return False
    return True


def _built(library: _Library = HANDLERS) -> Path | None:
    """The compiled library where one is found (the cache, then the temporary directory)."""
    exe, header = _compiler(None)
    name = _file_name(library, exe, header, library.flags())
    for d in (cache_dir(), _temp_dir()):
        if (d / name).is_file():
            return d / name
    return None


def _load_host_module() -> Any:
    """The one-sample calls' extension module (:data:`HOST_MODULE`), built
    (:func:`build_host_module`) and imported as ``_jaxdyn_host``; ``JAXDYN_HOST_MODULE=0``
    refuses it."""
    import importlib.machinery
    import importlib.util

    if os.environ.get("JAXDYN_HOST_MODULE", "1").strip().lower() in ("0", "false", "no", "off"):
        raise RuntimeError("turned off (JAXDYN_HOST_MODULE=0)")
    path = str(build_host_module())
    loader = importlib.machinery.ExtensionFileLoader("_jaxdyn_host", path)
    spec = importlib.util.spec_from_file_location("_jaxdyn_host", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _register(library: _Library) -> None:
    if library.python:  # an extension module: imported, nothing registered with XLA
        library.state["lib"] = _load_host_module()
        return
    if sys.platform == "win32":
        raise RuntimeError("not built on Windows")
    if not hasattr(jax, "ffi") or not hasattr(jax.ffi, "include_dir"):
        raise RuntimeError(f"jax {jax.__version__} has no jax.ffi")
    lib = ctypes.CDLL(str(build() if library is HANDLERS else build_kernels()))
    if library is HANDLERS:
        for target in (TARGET, STORE_TARGET):
            capsule = jax.ffi.pycapsule(lib.jaxdyn_uninitialized)
            jax.ffi.register_ffi_target(target, capsule, "cpu")
        jax.ffi.register_ffi_target(CHECK_TARGET, jax.ffi.pycapsule(lib.jaxdyn_check), "cpu")
    else:
        jax.ffi.register_ffi_target(CRBA_TARGET, jax.ffi.pycapsule(lib.jaxdyn_crba), "cpu")
        jax.ffi.register_ffi_target(MINV_TARGET, jax.ffi.pycapsule(lib.jaxdyn_minv), "cpu")
        jax.ffi.register_ffi_target(RNEA_TARGET, jax.ffi.pycapsule(lib.jaxdyn_rnea), "cpu")
        jax.ffi.register_ffi_target(ABA_TARGET, jax.ffi.pycapsule(lib.jaxdyn_aba), "cpu")
        capsule = jax.ffi.pycapsule(lib.jaxdyn_rnea_derivatives)
        jax.ffi.register_ffi_target(RNEA_DERIVATIVES_TARGET, capsule, "cpu")
    library.state["lib"] = lib  # kept loaded for the life of the process


def _available(library: _Library) -> bool:
    state = library.state
    if state["tried"]:
        return state["ok"]
    with library.registering:
        if not state["tried"]:
            try:
                _register(library)
                state["ok"], state["why"] = True, "loaded" if library.python else "registered"
            except Exception as e:  # any failure: the callers take XLA's code instead
                state["ok"], state["why"] = False, f"{type(e).__name__}: {e}"
            state["tried"] = True
    return state["ok"]


def available() -> bool:
    """Whether the handlers are registered (compiled and registered at the first call)."""
    return _available(HANDLERS)


def status() -> str:
    """``"registered"``, or why the chunk loop fills its buffers instead."""
    available()
    return HANDLERS.state["why"]


def kernels_available() -> bool:
    """Whether the CPU kernels are registered (compiled and registered at the first call,
    which waits for a build under way)."""
    return _available(KERNELS)


def kernel_status() -> str:
    """``"registered"``, or why the CPU kernels' callers take XLA's code instead."""
    kernels_available()
    return KERNELS.state["why"]


def host_module_available() -> bool:
    """Whether the one-sample calls' extension module is loaded (built and imported at the
    first call; ``HOST_MODULE.state["lib"]`` is the module)."""
    return _available(HOST_MODULE)


def kernels_expected() -> bool:
    """Whether the CPU kernels are registered or being built (by :func:`build_in_background`),
    without waiting for that build: what a trace decides by, so that it runs beside the
    compiler; the lowering of a kernel's call waits for the build
    (:func:`kernels_available`) and takes XLA's code should it fail."""
    if not KERNELS.state["tried"] and KERNELS.lock.locked():
        return True
    return kernels_available()


def _fill(shape, dtype, fill):
    return jnp.full(shape, fill, dtype)


uninitialized_p = jax.extend.core.Primitive("jaxdyn_uninitialized")
uninitialized_p.def_impl(lambda *, shape, dtype, fill, use: _fill(shape, dtype, fill))


def _replicated(shape, dtype):
    """The abstract value of a new array, replicated over the mesh in context like
    ``jnp.zeros``' (under ``jax.set_mesh`` with explicit axes its sharding names that mesh;
    the chunk loop's ``dynamic_update_slice`` requires the buffer's and the chunk's to agree)."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return jax.core.ShapedArray(shape, dtype)
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return jax.core.ShapedArray(shape, dtype, sharding=sharding)


uninitialized_p.def_abstract_eval(lambda *, shape, dtype, fill, use: _replicated(shape, dtype))


def _lower_fill(ctx, *, shape, dtype, fill, use):
    return mlir.lower_fun(lambda: _fill(shape, dtype, fill), multiple_results=False)(ctx)


def _lower_cpu(ctx, *, shape, dtype, fill, use):
    if use and not ctx.module_context.lowering_parameters.for_export and available():
        # ``fill`` as an attribute keeps the buffers of one loop distinct calls (XLA may merge
        # identical side-effect-free instructions, and would then copy the one buffer per output)
        return jax.ffi.ffi_lowering(TARGET)(ctx, fill=np.int64(fill))
    return _lower_fill(ctx, shape=shape, dtype=dtype, fill=fill, use=use)


mlir.register_lowering(uninitialized_p, _lower_fill)
mlir.register_lowering(uninitialized_p, _lower_cpu, platform="cpu")


def uninitialized(shape: Sequence[int], dtype: DTypeLike, fill: int = 0) -> Array:
    """An array of ``shape`` and ``dtype`` whose every entry the caller overwrites: left as XLA
    allocated it where the handler is available (see the module docstring), else filled with
    ``fill`` (give the outputs of one loop different values, so that XLA does not merge their
    fills into one and copy it per output)."""
    use = bool(config.get("uninitialized_outputs"))
    return uninitialized_p.bind(
        shape=tuple(int(s) for s in shape), dtype=np.dtype(dtype), fill=int(fill), use=use
    )


# ------------------------------------------------------------------------------------- stores


def _stores_on() -> bool:
    return bool(config.get("ffi_stores")) and not config.fused_cpu_loops_enabled()


stored_p = jax.extend.core.Primitive("jaxdyn_store")
stored_p.multiple_results = True
stored_p.def_impl(lambda *xs, batched: list(xs))
stored_p.def_abstract_eval(lambda *xs, batched: list(xs))


def _store_batch(args, dims, *, batched):
    return stored_p.bind(*args, batched=True), list(dims)


def _store_jvp(primals, tangents, *, batched):
    # the tangents are stored too, by a call of their own (linear: its transpose is below);
    # passed through unstored, jax.vmap(jax.jacfwd(crba)) and minv's ran about twice as slow
    tangents = list(tangents)
    live = [i for i, t in enumerate(tangents) if type(t) is not ad.Zero]
    if live:
        for i, t in zip(live, stored_p.bind(*[tangents[i] for i in live], batched=batched)):
            tangents[i] = t
    return stored_p.bind(*primals, batched=batched), tangents


def _store_transpose(cts, *xs, batched):
    # the identity's transpose (a store applied to a tangent, by the JVP above or by an
    # analytic derivative rule whose tangent computation reuses a stored algorithm)
    return list(cts)


batching.primitive_batchers[stored_p] = _store_batch
ad.primitive_jvps[stored_p] = _store_jvp
ad.primitive_transposes[stored_p] = _store_transpose


def _lower_identity(ctx, *xs, batched):
    return list(xs)


def _one_device(ctx) -> bool:
    """Whether the program being lowered is partitioned by hand or not at all: XLA's SPMD
    partitioner knows nothing of the handler and would gather a batch split over several
    devices to call it on the whole."""
    ac = ctx.module_context.axis_context
    n = getattr(ac, "num_devices", None)
    if n is not None:
        return n == 1
    mesh, manual = getattr(ac, "mesh", None), getattr(ac, "manual_axes", None)
    if mesh is not None and manual is not None:
        return set(mesh.axis_names) <= set(manual)
    return True


def _handler_call(ctx) -> bool:
    """Whether the program being lowered may call a handler whose results alias its operands
    (stores, checks): not under ``jax.export`` (a handler of this process only), not in a
    program XLA partitions (:func:`_one_device`), and the handler available."""
    return (
        not ctx.module_context.lowering_parameters.for_export and _one_device(ctx) and available()
    )


def _lower_store_cpu(ctx, *xs, batched):
    if batched and _handler_call(ctx):
        aliases = {i: i for i in range(len(xs))}
        return jax.ffi.ffi_lowering(STORE_TARGET, operand_output_aliases=aliases)(ctx, *xs)
    return list(xs)


mlir.register_lowering(stored_p, _lower_identity)
mlir.register_lowering(stored_p, _lower_store_cpu, platform="cpu")


def store(*xs: Array) -> tuple[Array, ...] | None:
    """The arrays ``xs``, unchanged, each computed into a buffer of its own under ``jax.vmap`` on
    the CPU (see the module docstring); ``None`` where the handler is unavailable or the
    switch is off, so that the caller can store them another way."""
    if not xs or jax.default_backend() != "cpu" or not _stores_on() or not available():
        return None  # (other backends: no handler compiled for a call they would not make)
    return tuple(stored_p.bind(*xs, batched=False))


# ------------------------------------------------------------------------------------- checks


def _check_eqx(*xs, message):
    """The check by ``equinox.error_if`` (a host callback): the fallback of :func:`check`."""
    import equinox as eqx

    return list(eqx.error_if(list(xs[:-1]), xs[-1], message))


check_p = jax.extend.core.Primitive("jaxdyn_check")
check_p.multiple_results = True


def _check_impl(*xs, message):
    # called eagerly (outside jit), the primitive runs as a compiled program of its own, so
    # that the check fails the same way as inside one; with jit disabled, in Python
    # (a flag with a context manager: an attribute set at run time, unknown to type checkers)
    if getattr(jax.config, "jax_disable_jit"):  # noqa: B009
        if np.any(np.asarray(xs[-1])):
            raise ValueError(message)
        return list(xs[:-1])
    return jax.jit(lambda *a: check_p.bind(*a, message=message))(*xs)


check_p.def_impl(_check_impl)
check_p.def_abstract_eval(lambda *xs, message: list(xs[:-1]))


def explicit_split(
    xs: Sequence[Any], dims: Sequence[int | None]
) -> tuple[Any, tuple[str, ...], int] | None:
    """``(mesh, axes, n)`` where explicit sharding (``jax.sharding.AxisType.Explicit``, the
    default of ``jax.make_mesh`` since JAX 0.7) splits the batch of the operands ``xs``
    (batched along ``dims``, ``None`` for unbatched ones) over the mesh axes ``axes`` (``n``
    shards), else ``None`` (one device, or ``Auto`` axes, whose shardings the trace does not
    see). The first batched operand whose batch is split decides."""
    for x, d in zip(xs, dims):
        sharding = getattr(jax.typeof(x), "sharding", None) if d is not None else None
        spec, mesh = getattr(sharding, "spec", None), getattr(sharding, "mesh", None)
        if d is None or not spec or len(spec) <= d or spec[d] is None or mesh is None:
            continue
        axes = (spec[d],) if isinstance(spec[d], str) else tuple(spec[d])
        types = dict(zip(mesh.axis_names, mesh.axis_types))
        if axes and all(types.get(a) == EXPLICIT for a in axes):
            return mesh, axes, int(np.prod([mesh.shape[a] for a in axes]))
    return None


def shard_map(
    f: Callable[..., Any],
    mesh: Any,
    in_specs: Any,
    out_specs: Any,
    axis_names: Iterable[str] | None = None,
) -> Callable[..., Any]:
    """``jax.shard_map`` without its replication checks (jaxdyn's own primitives have no rules
    for them), manual over ``axis_names`` (default: every axis of ``mesh``)."""
    kw = {} if axis_names is None else {"axis_names": set(axis_names)}
    return jax.shard_map(
        f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False, **kw
    )


def _check_batch(args, dims, *, message):
    # one predicate for the whole batch: the program fails where any sample fails (as
    # equinox's batched error_if)
    *xs, pred = args
    split = explicit_split(args, dims)
    if split is None:
        return check_p.bind(*xs, jnp.any(pred), message=message), list(dims[:-1])
    # a batch split over Explicit mesh axes: each device checks its own samples with the
    # handler (a program partitioned by XLA would take equinox's callback, which runs on one
    # device: the partitioner gathered the checked arrays onto it, and a failed check there
    # left the other devices waiting at their next collective)
    mesh, axes, _ = split
    moved = [a if d is None else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims)]
    specs = tuple(P() if d is None else P(axes) for d in dims)

    def local(*a):
        return tuple(check_p.bind(*a[:-1], jnp.any(a[-1]), message=message))

    out = shard_map(local, mesh, specs, specs[:-1], axis_names=axes)(*moved)
    return list(out), [None if d is None else 0 for d in dims[:-1]]


def _check_jvp(primals, tangents, *, message):
    # the primal is checked; tangents pass through (the check is the identity on values)
    return check_p.bind(*primals, message=message), list(tangents[:-1])


batching.primitive_batchers[check_p] = _check_batch
ad.primitive_jvps[check_p] = _check_jvp


def _lower_check_eqx(ctx, *xs, message):
    return mlir.lower_fun(functools.partial(_check_eqx, message=message), True)(ctx, *xs)


def _lower_check_cpu(ctx, *xs, message):
    if not _handler_call(ctx):
        return _lower_check_eqx(ctx, *xs, message=message)
    # the arrays pass through the call (its results alias them), so they are computed once
    # before it, as they were before equinox's conditional; a call that read the predicate
    # alone and let the arrays fuse into their consumers was slower on rnea and crba under
    # jax.vmap. It has a side effect (failing
    # the program), so XLA keeps it. (XLA's partitioner requires a sharding of such a call,
    # which JAX sets for its own callbacks by internal means: a partitioned program takes
    # equinox's error_if.)
    aliases = {i: i for i in range(len(xs) - 1)}
    lower = jax.ffi.ffi_lowering(CHECK_TARGET, operand_output_aliases=aliases, has_side_effect=True)
    return lower(ctx, *xs, message=message)


mlir.register_lowering(check_p, _lower_check_eqx)
mlir.register_lowering(check_p, _lower_check_cpu, platform="cpu")


def check_available() -> bool:
    """Whether :func:`check` is a call of jaxdyn's handler (the CPU, the handler compiled)."""
    return jax.default_backend() == "cpu" and available()


def check(xs: Sequence[Array], pred: ArrayLike, message: str) -> list[Array]:
    """The arrays ``xs`` (a list), unchanged, checked: the program fails with ``message``
    (XLA raises it as ``INVALID_ARGUMENT: <message>`` when the result is ready) where any
    entry of the boolean ``pred`` is true. A call of jaxdyn's handler (``jaxdyn_check``) on
    the CPU; a program holding it has no host callback, so JAX's persistent compilation cache
    keeps it. Use where :func:`check_available`; under ``jax.export`` (a handler of this
    process only), in programs partitioned over several devices and on other platforms it is
    lowered as ``equinox.error_if``."""
    pred = jnp.any(jnp.asarray(pred, jnp.bool_))
    return check_p.bind(*xs, pred, message=str(message))


# the C compiler runs beside the imports and tracing that come before the first program that
# calls the handler (:func:`build_in_background`)
build_in_background()

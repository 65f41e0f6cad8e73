"""Compiled programs kept on disk, found again without tracing: :func:`cached_jit`.

JAX's persistent compilation cache (:func:`jaxdyn.config.compilation_cache`) saves XLA's
compile, but its key is the lowered program: a new process still traces the Python function to
a jaxpr and lowers it to StableHLO before it can look the program up. For a trajectory
optimisation solve these two phases take seconds (the whole FDDP iteration, its knots'
derivatives, backward pass and line search), longer than reading the compiled program back. A
function wrapped by :func:`cached_jit` keeps, next to that cache, each program it compiled as a
serialized executable (``jax.experimental.serialize_executable``) under a key computed from the
call's arguments *before* tracing; a later process calling it with the same key loads the
executable and runs it, with no trace, no lowering and no XLA.

**The key** (a SHA-256) holds everything that decides the program, conservatively (a wrong hit
would be a silent wrong answer, a needless miss costs a trace):

* the function (module and qualified name) and the source of jaxdyn (a digest of every
  ``.py``, ``.c`` and ``.h`` file of the package: an edited checkout misses);
* the versions of Python, jax, jaxlib, equinox and numpy, the backend (platform, its version,
  the devices' kind) and the CPU (model and instruction-set flags of ``/proc/cpuinfo``);
  ``XLA_FLAGS``; every JAX configuration value (``jax_enable_x64``, matmul precision, ...)
  but the persistent cache's own; every :mod:`jaxdyn.config` switch (value checks included);
* the static part of the arguments (the pytree structure, its node types and their auxiliary
  data, non-array leaves), written out by :func:`_stable`, which accepts only values it can
  write exactly: numbers, strings, tuples, dicts, numpy arrays, enums, dtypes, and classes and
  plain module-level functions of jaxdyn, JAX, equinox and numpy (with their dataclass fields
  or attributes; instances of jaxdyn's and equinox's classes only). Anything else (a class or
  function of the user's, a user's cost residual, a closure, a lambda, a bound method) makes
  the call uncacheable: it runs as a plain ``jit`` does. The wrapped function itself must be
  jaxdyn's (its code is in the source digest; :class:`CachedJit` refuses others);
* the arrays' shapes, dtypes and weak types, and the *bytes* of those of the arguments named
  by ``values`` (the solve's problem: model, costs, dynamics): the arrays are inputs of the
  program, not constants, but keying on their values too keeps the cache a record of calls that
  were actually made.

**Where:** ``executables/<jaxdyn, jax and jaxlib versions>/`` under jaxdyn's cache directory
(``$JAXDYN_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxdyn``, else ``~/.cache/jaxdyn``; the
directory of :func:`jaxdyn.config.compilation_cache_path` is ``xla/...`` beside it), one file
per key, written atomically; at most :data:`MAX_ENTRIES` files (the least recently used go),
a few megabytes each. Delete it at will.

**When:** only while jaxdyn's persistent compilation cache is in use
(:func:`jaxdyn.config.compilation_cache_dir` is not ``None``: not with
``JAXDYN_COMPILATION_CACHE=0`` nor where the user set JAX's own cache directory), the switch
on (:func:`enable`, ``JAXDYN_EXECUTABLE_CACHE=0`` at import turns it off), on the CPU backend,
for a call with concrete arrays (inside the caller's ``jit`` or ``vmap`` the function is
traced into the caller's program as usual), without ``jax_disable_jit``. A program is saved
only when XLA compiled it in this process: an executable that JAX's persistent cache read back
serializes without some of its kernels (jaxlib 0.10.2 with jaxdyn's
``--xla_cpu_use_fusion_emitters=false``: "Function broadcast.1_kernel not found" when loaded),
so a program already in that cache is saved at its next XLA compile (a new cache directory, a
new jaxdyn). Not saved either: programs with host callbacks or effects (``verbose`` solves:
they would need this process's callbacks), programs calling custom-call targets other than
jaxdyn's FFI handlers and jaxlib's LAPACK kernels (a handler is registered, and LAPACK's
function pointers set, when a program holding it is lowered, which a loaded program skips:
:func:`_prepare` does it for those two before loading), and programs whose executable or
output structure does not serialize (JAX's cache still serves their XLA compile). A file that
does not load (truncated, another jaxlib's) is a miss: the program is compiled again and the
file replaced. The file is written by a thread of its own while the first call returns
(:func:`wait` waits for it; so does the interpreter at exit).

Within a process a wrapped function keeps each compiled executable by its static part, array
shapes and settings, as ``jax.jit`` does: repeated calls neither trace nor hash array bytes.
The results are those of the same program compiled in the process (bitwise).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import io
import logging
import os
import pickle
import platform
import threading
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import config
from . import internals

if TYPE_CHECKING:
    from collections.abc import Callable

#: written into every key: bump when the file format or the key's contents change
FORMAT = 1
#: the most files kept in the directory: saving one more removes the least recently used
#: (a hit refreshes a file's time), so that calls with ever new values (each its own key)
#: do not fill the disk
MAX_ENTRIES = 32
#: modules whose classes and module-level functions :func:`_stable` writes by name
_TRUSTED = ("jaxdyn", "jax", "jaxlib", "equinox", "numpy", "builtins")

logger = logging.getLogger("jaxdyn")

_lock = threading.Lock()
#: the threads writing executables (:meth:`CachedJit._save`) not yet joined
_saving: list = []


def wait(timeout: float | None = None) -> bool:
    """Wait for the executables being written in the background (a program's first call
    returns before its file is written); ``True`` when none is left. The interpreter waits for
    them at exit too (they are not daemon threads)."""
    import time

    end = None if timeout is None else time.monotonic() + timeout
    for t in list(_saving):
        t.join(None if end is None else max(0.0, end - time.monotonic()))
        if t.is_alive():
            return False
        try:
            _saving.remove(t)
        except ValueError:  # removed by another waiter
            pass
    return True


def enable(on: bool = True) -> None:
    """Switch the executable cache on or off for this process
    (:func:`jaxdyn.config.executable_cache`); programs already loaded stay in use."""
    config.executable_cache(on)


def enabled() -> bool:
    """Whether the executable cache is used (:func:`jaxdyn.config.executable_cache_enabled`)."""
    return config.executable_cache_enabled()


def cache_path() -> Path:
    """``executables/<jaxdyn, jax and jaxlib versions>`` under jaxdyn's cache directory."""
    return config.executable_cache_path()


class Uncacheable(Exception):
    """Raised by :func:`_stable` for a value it cannot write exactly."""


def _trusted(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in _TRUSTED


def _type_name(t: type) -> str:
    if not _trusted(t.__module__) or "<locals>" in t.__qualname__:
        raise Uncacheable(f"type {t.__module__}.{t.__qualname__}")
    return f"{t.__module__}:{t.__qualname__}"


def _stable(x: Any, out: list, depth: int = 0) -> None:
    """Append to ``out`` a text that determines ``x`` (equal texts: equal values for every
    purpose of a trace), or raise :class:`Uncacheable`."""
    import numpy as np

    if depth > 64:
        raise Uncacheable("too deep")
    d = depth + 1
    if x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
        out.append(f"{type(x).__name__}:{x!r}")
    elif isinstance(x, enum.Enum):
        out.append(f"enum:{_type_name(type(x))}.{x.name}")
    elif isinstance(x, (tuple, list)):
        if type(x) not in (tuple, list):  # a named tuple
            out.append(f"named:{_type_name(type(x))}")
        out.append(f"{type(x).__name__}[{len(x)}")
        for v in x:
            _stable(v, out, d)
        out.append("]")
    elif isinstance(x, dict):
        out.append(f"dict[{len(x)}")
        items = []
        for k, v in x.items():
            kt: list = []
            _stable(k, kt, d)
            items.append(("".join(kt), v))
        for k, v in sorted(items, key=lambda kv: kv[0]):
            out.append(k)
            _stable(v, out, d)
        out.append("]")
    elif isinstance(x, (set, frozenset)):
        texts = []
        for v in x:
            t: list = []
            _stable(v, t, d)
            texts.append("\x1f".join(t))
        out.append(f"set[{len(x)}" + "\x1e".join(sorted(texts)) + "]")
    elif isinstance(x, np.ndarray):
        a = np.ascontiguousarray(x)
        digest = hashlib.sha256(a.tobytes()).hexdigest()
        out.append(f"ndarray:{a.dtype.str}:{a.shape}:{digest}")
    elif isinstance(x, np.generic):
        out.append(f"scalar:{x.dtype.str}:{x.tobytes().hex()}")
    elif isinstance(x, np.dtype):
        out.append(f"dtype:{x.str}")
    elif isinstance(x, type):
        out.append(f"type:{_type_name(x)}")
    elif isinstance(x, functools.partial):
        out.append("partial(")
        _stable(x.func, out, d)
        _stable(x.args, out, d)
        _stable(x.keywords, out, d)
        out.append(")")
    elif isinstance(x, types.FunctionType):
        q = x.__qualname__
        if not _trusted(x.__module__) or x.__closure__ or "<" in q:
            raise Uncacheable(f"function {x.__module__}.{q}")
        out.append(f"function:{x.__module__}:{q}")
    else:
        # instances are written by their fields: only of jaxdyn's and equinox's own classes
        # (a bound method, a ufunc, a jitted function of JAX's are not written by their type)
        if type(x).__module__.split(".")[0] not in ("jaxdyn", "equinox"):
            raise Uncacheable(f"value of type {type(x).__module__}.{type(x).__qualname__}")
        name = _type_name(type(x))
        digest = getattr(x, "_digest", None)
        if isinstance(digest, str):  # a value whose equality is its digest (model Topology)
            out.append(f"digest:{name}:{digest}")
        elif dataclasses.is_dataclass(x):  # equinox modules included
            out.append(f"fields:{name}(")
            for f in dataclasses.fields(x):
                out.append(f.name + "=")
                _stable(getattr(x, f.name, None), out, d)
            out.append(")")
        elif hasattr(x, "__dict__") and not getattr(type(x), "__slots__", ()):
            out.append(f"object:{name}(")
            _stable(dict(vars(x)), out, d)
            out.append(")")
        else:
            raise Uncacheable(f"value of type {name}")


def _stable_treedef(treedef: Any, out: list, depth: int = 0) -> None:
    """:func:`_stable` of a pytree structure: each node's type and auxiliary data."""
    if depth > 256:
        raise Uncacheable("too deep")
    data = treedef.node_data()
    if data is None:
        out.append("*")
        return
    kind, aux = data
    out.append(f"node:{_type_name(kind)}(")
    _stable(aux, out, depth + 1)
    children = treedef.children()
    out.append(f"|{len(children)}")
    for c in children:
        _stable_treedef(c, out, depth + 1)
    out.append(")")


@functools.cache
def _source_digest() -> str:
    """A digest of jaxdyn's source files (``.py``, ``.c``, ``.h``)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.suffix in (".py", ".c", ".h") and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def _machine() -> str:
    """The CPU's model name and instruction-set flags (``/proc/cpuinfo``), else the platform's
    machine and processor strings."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
        keep = [ln for ln in lines if ln.split(":")[0].strip() in ("model name", "flags")]
        return "\n".join(sorted(set(keep)))
    except OSError:
        return f"{platform.machine()} {platform.processor()}"


#: JAX options that do not decide the program: where and when JAX's own cache writes, and what
#: JAX logs (a cold run with ``JAX_LOG_COMPILES=1`` warms the cache for a plain run)
_UNKEYED_CONFIG = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_enable_compilation_cache",
    "jax_log_compiles",
    "jax_explain_cache_misses",
    "jax_logging_level",
    "jax_debug_log_modules",
)


#: ``(fingerprint, context)`` of the last :func:`_context` computed (one tuple, replaced
#: whole, so that threads read a consistent pair)
_CONTEXT_MEMO: tuple = (None, None)


def _full_context() -> tuple:
    """:func:`_context` computed: every JAX option's value (``repr``), every switch's, and
    ``XLA_FLAGS``."""
    import jax

    values = jax.config.values
    jax_config = tuple((k, repr(v)) for k, v in sorted(values.items()) if k not in _UNKEYED_CONFIG)
    switches = tuple((n, repr(config.get(n))) for n in sorted(config.SWITCHES))
    return (jax_config, switches, os.environ.get("XLA_FLAGS", ""))


def _context() -> tuple:
    """The process's settings a trace or compile reads besides the arguments: JAX's options,
    jaxdyn's switches and ``XLA_FLAGS`` (:func:`_full_context`). Read at every call of a
    :class:`CachedJit`, so computed again only when their raw values changed since the last
    call (:func:`jaxdyn.backend.internals.jax_config_state`, :func:`jaxdyn.config.snapshot`):
    sorting and printing every option costs far more than comparing them."""
    global _CONTEXT_MEMO
    state = internals.jax_config_state()
    if state is None:  # pragma: no cover - a JAX without the holders
        return _full_context()
    fingerprint = (state, config.snapshot(), os.environ.get("XLA_FLAGS", ""))
    last, context = _CONTEXT_MEMO
    try:
        if last is not None and last == fingerprint:
            return context
    except Exception:  # an option's value without a plain ``==`` (compared as unequal)
        pass
    context = _full_context()
    _CONTEXT_MEMO = (fingerprint, context)
    return context


@functools.cache
def _versions() -> tuple:
    import sys

    import equinox
    import jax
    import jaxlib.version
    import numpy as np

    from .._versions import __version__

    return (
        FORMAT,
        sys.version,
        __version__,
        jax.__version__,
        jaxlib.version.__version__,
        equinox.__version__,
        np.__version__,
        _source_digest(),
        _machine(),
    )


def _backend() -> tuple:
    import jax

    devices = jax.devices()
    client = devices[0].client
    return (
        jax.default_backend(),
        getattr(client, "platform_version", ""),
        tuple(d.device_kind for d in devices),
    )


def _signature(dyn) -> tuple:
    """The arrays' part of the in-process key: shape, dtype and weak type of each (the dtype
    objects themselves: printing each dtype's name costs more than the rest of a call's key)."""
    return tuple((tuple(x.shape), x.dtype, bool(getattr(x, "weak_type", False))) for x in dyn)


def _printed_signature(signature: tuple) -> str:
    """:func:`_signature` as the disk key prints it (each dtype by its name)."""
    return repr(tuple((shape, str(dtype), weak) for shape, dtype, weak in signature))


def _concrete_on_cpu(dyn) -> bool:
    """Arrays concrete (no tracer), numpy or on the default CPU device, the backend the CPU."""
    import jax
    import jax.core

    if jax.default_backend() != "cpu":
        return False
    device = jax.devices()[0]
    for x in dyn:
        if isinstance(x, jax.core.Tracer):
            return False
        devices = getattr(x, "devices", None)
        if devices is not None and devices() != {device}:
            return False
    return True


def _missing_sentinel() -> Any:
    try:
        from equinox._module._flatten import MISSING  # equinox's sentinel of absent fields

        return MISSING
    except ImportError:
        return None


class _TreePickler(pickle.Pickler):
    """Pickles a pytree structure; equinox's ``MISSING`` sentinel by reference (its nodes test
    ``is MISSING``, which a pickled copy would fail)."""

    def persistent_id(self, obj):  # noqa: D102
        sentinel = _missing_sentinel()
        if sentinel is not None and obj is sentinel:
            return "equinox.MISSING"
        return None


class _TreeUnpickler(pickle.Unpickler):
    def persistent_load(self, pid):  # noqa: D102
        if pid == "equinox.MISSING":
            return _missing_sentinel()
        raise pickle.UnpicklingError(f"unknown reference {pid!r}")


def _dump_tree(tree: Any) -> bytes:
    with io.BytesIO() as f:
        _TreePickler(f).dump(tree)
        return f.getvalue()


def _load_tree(data: bytes) -> Any:
    return _TreeUnpickler(io.BytesIO(data)).load()


def _split(args):
    from .fused_programs import _split as split  # the fused programs' split of the arguments

    return split(args)


def _merge(dyn, static):
    from .fused_programs import _merge as merge

    return merge(dyn, static)


#: custom-call targets a loaded program may call, and what makes each callable (the call's
#: handler is registered, or initialized, when a program holding it is lowered, which a loaded
#: program skips): jaxdyn's FFI handlers (:func:`.ffi.available`), jaxlib's LAPACK kernels
#: (their function pointers are set by ``jaxlib.lapack``'s ``initialize``); programs calling any
#: other target are not saved
_TARGET_PREFIXES = ("jaxdyn_", "lapack_")
#: targets that XLA resolves itself (sharding annotations)
_XLA_TARGETS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape")

_tls = threading.local()


def _on_event(event: str, **_: Any) -> None:
    if event == "/jax/compilation_cache/cache_hits" and getattr(_tls, "active", False):
        _tls.hit = True


@functools.cache
def _listen_once() -> None:
    import jax.monitoring

    jax.monitoring.register_event_listener(_on_event)


def _custom_calls(text: str) -> set:
    """The custom-call targets of a lowered program's text (``stablehlo.custom_call @name``)."""
    import re

    named = re.findall(r"stablehlo\.custom_call @([A-Za-z0-9_.$-]+)", text)
    generic = re.findall(r'call_target_name = "([^"]*)"', text)
    return set(named) | set(generic)


def _known_target(name: str) -> bool:
    return name.startswith(_TARGET_PREFIXES) or name in _XLA_TARGETS


def _prepare(targets) -> None:
    """Make the custom-call targets of a program to be loaded callable (see
    :data:`_TARGET_PREFIXES`); raises where one cannot be."""
    for t in targets:
        if not _known_target(t):
            raise RuntimeError(f"custom call {t!r}")
    if any(t.startswith("jaxdyn_") for t in targets):
        from . import ffi

        if not ffi.available():
            raise RuntimeError(f"jaxdyn's FFI handlers are not available: {ffi.status()}")
        kernels = (ffi.CRBA_TARGET, ffi.MINV_TARGET, ffi.RNEA_TARGET, ffi.ABA_TARGET)
        if any(k in targets for k in kernels) and not ffi.kernels_available():
            raise RuntimeError(f"jaxdyn's CPU kernels are not available: {ffi.kernel_status()}")
    if any(t.startswith("lapack_") for t in targets):
        from jaxlib import lapack

        # what jaxlib.lapack.prepare_lapack_call does when a program holding one is lowered
        lapack._lapack.initialize()  # pyright: ignore[reportPrivateImportUsage]  # noqa: SLF001


def _evict(directory: Path) -> None:
    """Remove the least recently used files above :data:`MAX_ENTRIES`."""
    try:
        files = []
        for p in directory.glob("*.exe"):
            try:
                files.append((p.stat().st_mtime, p))
            except OSError:  # removed by another process meanwhile
                pass
        for _, p in sorted(files)[: max(0, len(files) - MAX_ENTRIES)]:
            p.unlink(missing_ok=True)
    except OSError:
        pass


class CachedJit:
    """``fn`` compiled as ``equinox.filter_jit`` does (array leaves traced, other leaves
    static), its executables kept on disk and found again without tracing (see the module).
    ``values``: positions of the arguments whose arrays' bytes enter the key;
    ``compiler_options``: XLA's per-program options of its compiles on the CPU (in the key;
    a call that is not cached, on the CPU with concrete arrays, compiles with them too)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        values: tuple[int, ...] = (0,),
        compiler_options: dict[str, Any] | None = None,
    ) -> None:
        import equinox as eqx
        import jax

        if not str(getattr(fn, "__module__", "")).startswith("jaxdyn."):
            raise ValueError(
                f"cached_jit: {fn!r} is not a function of jaxdyn (the key holds jaxdyn's source "
                "digest, not the code of other functions)"
            )
        self.fn, self.values = fn, tuple(values)
        self.options = dict(compiler_options or {})
        self.plain = eqx.filter_jit(fn)
        self.name = f"{fn.__module__}:{fn.__qualname__}"
        if self.options:  # another program of the same function: another key
            self.name += repr(sorted(self.options.items()))
        self.loaded: dict = {}  # in-process key -> jax.stages.Compiled
        self.refused: set = set()  # in-process keys whose program is not saved
        #: in-process keys of executables loaded from disk and not run yet -> their files
        self.untried: dict = {}
        #: how each call of the process went (tests read it): "hit", "saved", "plain"
        self.events: list = []

        def program(static, dyn):
            a, k = _merge(dyn, static)
            return self.fn(*a, **k)

        program.__name__ = getattr(fn, "__name__", "program")
        self.program = jax.jit(program, static_argnums=0, compiler_options=self.options or None)
        _listen_once()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import jax

        if jax.config.jax_disable_jit:  # pyright: ignore[reportAttributeAccessIssue]
            return self.plain(*args, **kwargs)
        dyn, static = _split((args, kwargs))
        if not _concrete_on_cpu(dyn):
            return self.plain(*args, **kwargs)
        if not enabled():
            return self._uncached(static, dyn, args, kwargs)
        try:
            local = (static, _signature(dyn), _context())
            hash(local)
        except TypeError:  # an unhashable static leaf: filter_jit raises its own error
            return self.plain(*args, **kwargs)
        compiled = self.loaded.get(local)
        if compiled is None:
            if local in self.refused:
                self._event("plain")
                return self._uncached(static, dyn, args, kwargs)
            with _lock:
                compiled = self.loaded.get(local) or self._find(local, dyn, static, args)
        if compiled is None:
            self.refused.add(local)
            self._event("plain")
            return self._uncached(static, dyn, args, kwargs)
        if local in self.untried:
            return self._first_run(local, compiled, dyn, args, kwargs)
        return compiled(dyn)

    def _uncached(self, static, dyn, args, kwargs):
        """A call on the CPU that is not cached: the plain ``jit``, or with
        :attr:`options` the program compiled with them (static leaves hashable)."""
        if not self.options:
            return self.plain(*args, **kwargs)
        try:
            hash(static)
        except TypeError:  # an unhashable static leaf: filter_jit raises its own error
            return self.plain(*args, **kwargs)
        return self.program(static, dyn)

    def _first_run(self, local, compiled, dyn, args, kwargs):
        """The first run of an executable loaded from disk, waited for: one that fails for
        another reason than a value check of the program (``INVALID_ARGUMENT``, which the plain
        program raises too) is dropped, its file removed, and the plain program runs."""
        import jax

        path = self.untried.pop(local, None)
        try:
            return jax.block_until_ready(compiled(dyn))
        except Exception as e:
            if str(e).startswith("INVALID_ARGUMENT"):
                raise
            logger.info("jaxdyn: cached executable of %s did not run (%r)", self.name, e)
            self.loaded.pop(local, None)
            self.refused.add(local)
            if path is not None:
                path.unlink(missing_ok=True)
            self._event("plain")
            return self._uncached(local[0], dyn, args, kwargs)

    def _event(self, what: str) -> None:
        if len(self.events) < 1000:
            self.events.append(what)

    def key(self, args: tuple, kwargs: dict | None = None) -> str:
        """The disk key of a call (see the module); raises :class:`Uncacheable`."""

        dyn, static = _split((args, kwargs or {}))
        return self._key(_signature(dyn), static, args, _context())

    def _key(self, signature, static, args, context) -> str:
        import equinox as eqx
        import jax
        import numpy as np

        treedef, mask, leaves = static
        out: list = [self.name, repr(_versions()), repr(_backend()), repr(context)]
        _stable_treedef(treedef, out)
        _stable(leaves, out)
        _stable(mask, out)
        out.append(_printed_signature(signature))
        for i in self.values:
            if i < len(args):
                for x in jax.tree.leaves(args[i]):
                    if eqx.is_array(x):
                        _stable(np.asarray(x), out)
        return hashlib.sha256("\x1d".join(out).encode()).hexdigest()

    def _find(self, local, dyn, static, args):
        """The executable of this call: loaded from disk, else compiled and saved; ``None``
        where the call is not cacheable (the plain ``jit`` runs it)."""
        try:
            key = self._key(local[1], static, args, local[2])
        except Uncacheable as e:
            logger.debug("jaxdyn: %s not cached: %s", self.name, e)
            return None
        path = cache_path() / f"{key}.exe"
        compiled = self._load(path, len(dyn)) if path.is_file() else None
        if compiled is not None:
            self._event("hit")
            self.untried[local] = path
            try:
                os.utime(path)  # recently used (see MAX_ENTRIES)
            except OSError:
                pass
        else:
            compiled = self._compile_and_save(path, static, dyn)
            if compiled is None:
                return None
        self.loaded[local] = compiled
        return compiled

    def _load(self, path: Path, n_in: int):
        import jax
        from jax.experimental import serialize_executable

        try:
            entry = pickle.loads(path.read_bytes())
            if entry["n_in"] != n_in:
                raise ValueError(f"{entry['n_in']} inputs saved, {n_in} given")
            _prepare(entry["targets"])
            in_tree = jax.tree.structure(((list(range(n_in)),), {}))
            out_tree = _load_tree(entry["out_tree"])
            return serialize_executable.deserialize_and_load(entry["exe"], in_tree, out_tree)
        except Exception as e:  # a file that does not load: compiled again and replaced
            logger.info("jaxdyn: cached executable %s not loaded (%r)", path.name, e)
            return None

    def _compile_and_save(self, path: Path, static, dyn):
        """Compile the program (JAX's persistent cache may serve XLA's part) and save it, in a
        thread of its own (:meth:`_save`, :func:`wait`)."""
        lowered = self.program.lower(static, dyn)
        _tls.hit = False
        _tls.active = True
        try:
            compiled = lowered.compile()
        finally:
            _tls.active = False
        if _tls.hit:
            # XLA:CPU's executable read back from JAX's persistent cache serializes without
            # some of its kernels (jaxlib 0.10.2: "Function broadcast.1_kernel not found" when
            # loaded): only executables XLA compiled in this process are saved
            self._event("unsaved")
            return compiled
        unloaded = getattr(compiled._executable, "_unloaded_executable", None)  # noqa: SLF001
        unsafe = [
            name
            for name in ("host_callbacks", "ordered_effects", "unordered_effects", "keepalive")
            if unloaded is None or getattr(unloaded, name, [True])
        ]
        if unsafe:
            logger.debug("jaxdyn: %s not saved (%s)", self.name, ", ".join(unsafe))
            self._event("unsaved")
            return compiled
        # written by a thread of its own: the program's first call (its result, a script's
        # first line) does not wait for the serialization and the file (XLA:CPU's serialize
        # lets the calling thread run); the interpreter joins it at exit, and a file is
        # replaced atomically, so a process stopped meanwhile leaves none or a whole one
        t = threading.Thread(
            target=self._save, args=(path, lowered, compiled, len(dyn)), name="jaxdyn-save"
        )
        _saving[:] = [x for x in _saving if x.is_alive()]
        _saving.append(t)
        t.start()
        return compiled

    def _save(self, path: Path, lowered, compiled, n_in: int) -> None:
        """Write ``compiled`` to ``path`` (:meth:`_compile_and_save`'s thread) unless its
        program calls custom-call targets other than jaxdyn's and LAPACK's."""
        from jax.experimental import serialize_executable

        try:
            targets = _custom_calls(lowered.as_text())
        except Exception as e:
            logger.info("jaxdyn: %s not saved: no program text (%r)", self.name, e)
            self._event("unsaved")
            return
        unknown = sorted(t for t in targets if not _known_target(t))
        if unknown:
            logger.debug("jaxdyn: %s not saved (custom calls %s)", self.name, unknown)
            self._event("unsaved")
            return
        try:
            exe, _, out_tree = serialize_executable.serialize(compiled)
            tree = _dump_tree(out_tree)
            if _load_tree(tree) != out_tree:
                raise ValueError("its output structure does not pickle")
            entry = dict(n_in=n_in, exe=exe, out_tree=tree, targets=sorted(targets))
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL))
            os.replace(tmp, path)  # atomic: a reader sees a whole file or none
            self._event("saved")
            _evict(path.parent)
        except Exception as e:  # not serializable, a directory not writable: not saved
            logger.info("jaxdyn: %s not saved to the executable cache (%r)", self.name, e)
            self._event("unsaved")


def cached_jit(
    fn: Callable[..., Any],
    values: tuple[int, ...] = (0,),
    compiler_options: dict[str, Any] | None = None,
) -> CachedJit:
    """:class:`CachedJit` of ``fn`` (see the module)."""
    return CachedJit(fn, values, compiler_options)

"""glibc's allocator for the CPU backend's large batched buffers.

XLA:CPU allocates every buffer of a program with ``malloc``, from whichever thread runs the
program. A batch's ``nv x nv`` outputs and intermediates are tens of MB (talos_full's mass
matrices at B = 1024 in float64: 20 MB; the derivatives three such). With glibc's defaults:

* a block above ``M_MMAP_THRESHOLD`` (128 kB, raised dynamically up to 32 MB by the largest
  block freed so far) is mapped afresh and unmapped when freed, and free memory above
  ``M_TRIM_THRESHOLD`` at the top of the heap is returned to the system;
* each thread allocates from an *arena* of its own (up to eight per core). A thread's arena
  grows in heaps of at most 64 MB, and a heap that becomes entirely free is unmapped whatever
  the thresholds say.

Either way the next call maps the same amount again, and the kernel zero-fills it page by page
on first touch: about 5,000 minor page faults per 20 MB, which cost more than some of the
algorithms themselves (talos_full ``crba``: 2.5 us per sample of CPU time without them, 12 with
them; ``docs/performance.md``, "Memory allocation"). Which calls fault depended on which of
XLA's threads ran them, so the same program differed by up to 4x from one process to the next.

:func:`keep_freed_buffers` (on by default, when jaxdyn is imported: :mod:`jaxdyn.config`)
sets, through glibc's ``mallopt``: ``M_MMAP_THRESHOLD`` = 32 MB (glibc's largest dynamic
value), ``M_TRIM_THRESHOLD`` = 1 GB (freed buffers stay in the heap for the next call) and
``M_ARENA_MAX`` = 1 (every thread allocates from the main heap, which obeys the trim
threshold). The process then keeps up to 1 GB of freed memory for reuse instead of returning
it, as Pinocchio keeps its ``Data``. Settings the user made in the environment
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_ARENA_MAX``, or their
``GLIBC_TUNABLES`` forms) are left as they are. Off glibc (macOS, Windows, musl) nothing is
done. Buffers above 32 MB are mapped afresh regardless (``docs/performance.md``).
"""

from __future__ import annotations

import ctypes
import os
import threading

#: glibc's ``mallopt`` parameters (``<malloc.h>``)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

#: what :func:`keep_freed_buffers` sets: ``(parameter, value, environment variable, tunable)``
KEEP = (
    (M_MMAP_THRESHOLD, 32 << 20, "MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"),
    (M_TRIM_THRESHOLD, 1 << 30, "MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold"),
    (M_ARENA_MAX, 1, "MALLOC_ARENA_MAX", "glibc.malloc.arena_max"),
)
#: glibc's initial values, which ``keep_freed_buffers(False)`` restores (``M_ARENA_MAX`` 0:
#: glibc's own limit, eight arenas per core); the thresholds then stay fixed (glibc adjusts
#: them dynamically only until a program sets them)
DEFAULTS = {M_MMAP_THRESHOLD: 128 << 10, M_TRIM_THRESHOLD: 128 << 10, M_ARENA_MAX: 0}

_lock = threading.Lock()
_state = {"on": False}


def _glibc():
    """The process's C library when it is glibc (it has ``gnu_get_libc_version``), else
    ``None``."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (glibc only)
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.mallopt.restype = ctypes.c_int
    except (OSError, AttributeError, TypeError):  # not glibc, or no dynamic loader
        return None
    return libc


def _user_set(env: str, tunable: str) -> bool:
    """Whether the environment sets this parameter (variable or ``GLIBC_TUNABLES``)."""
    return env in os.environ or tunable + "=" in os.environ.get("GLIBC_TUNABLES", "")


def keep_freed_buffers(enabled: bool = True) -> bool:
    """Keep freed buffers in glibc's heap for reuse (module docstring), or (``False``) return
    glibc's parameters that this set to their initial values. Process-wide: ``M_ARENA_MAX``
    applies to threads that have not allocated yet, so it acts fully only before JAX starts
    its CPU backend (jaxdyn calls it when imported unless ``JAXDYN_KEEP_FREED_BUFFERS=0``).
    Parameters the environment sets are left alone. Returns whether the settings are now
    in effect (``False`` off glibc and after ``False``)."""
    if not isinstance(enabled, bool):
        raise ValueError(
            f"jaxdyn.config.keep_freed_buffers: enabled must be a bool, got {enabled!r}"
        )
    libc = _glibc()
    if libc is None:
        return False
    with _lock:
        for param, value, env, tunable in KEEP:
            if not _user_set(env, tunable):
                libc.mallopt(param, value if enabled else DEFAULTS[param])
        _state["on"] = enabled
    return enabled


def keeping_freed_buffers() -> bool:
    """Whether :func:`keep_freed_buffers` is in effect."""
    return _state["on"]

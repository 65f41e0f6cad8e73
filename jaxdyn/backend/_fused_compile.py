"""The child process of a background compile (:mod:`.fused_programs`, switch ``"auto"``).

Reads a pickled payload on stdin: ``where`` (``"module:attribute"`` of a
:class:`~.fused_programs.FusedJit`), the parent's ``jax_enable_x64`` and :mod:`jaxdyn.config`
switches, and the call's ``(args, kwargs)`` pickled apart (unpickled once those settings are
set: a float64 array needs ``jax_enable_x64``). Compiles the fused program for them (not
through JAX's persistent compilation cache, see :func:`main`) and writes to stdout the number
of array inputs (8 bytes, little-endian) and the executable serialized by
``jax.experimental.serialize_executable``. Any failure: a non-zero exit status, the reason on
stderr. Exits when its parent is gone; the kernel's out-of-memory killer takes it first. Runs
at the parent's priority (at ``os.nice(10)`` it got a few percent of a core on a loaded
machine: minutes for a compile of tens of seconds).
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys
import threading
import time
from typing import Any


def compile_payload(payload: bytes, fused: Any = None) -> bytes:
    """The child's output for ``payload`` (see the module); ``fused``: the
    :class:`~.fused_programs.FusedJit` (default: found by the payload's ``where``). Raises on
    any failure."""
    data = pickle.loads(payload)
    import jax

    jax.config.update("jax_enable_x64", data["x64"])
    from jax.experimental import serialize_executable

    from jaxdyn import config
    from jaxdyn.backend import fused_programs

    for name, value in data["config"].items():
        config.update(name, value)  # nothing compiled yet: nothing to clear
    if fused is None:
        module, attr = data["where"].split(":")
        fused = getattr(importlib.import_module(module), attr)
    dyn, static = fused_programs._split(pickle.loads(data["call"]))
    compiled = fused.program.lower(static, dyn).compile()
    blob, _, _ = serialize_executable.serialize(compiled)
    return len(dyn).to_bytes(8, "little") + blob


def _exit_with_parent(parent: int) -> None:
    """Stop when the parent is gone (killed by a signal its ``atexit`` did not see: the child
    would otherwise compile on for nothing)."""
    while True:
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(1.0)


def main() -> int:
    # the first process the kernel's out-of-memory killer stops, before the parent (a fused
    # compile took up to 20 GB on the 2-core VM; Linux only, where it exists)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    # the parent's pid from its command line (it may be gone before this runs)
    parent = int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid()
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    import jax

    # compiled here, not read back from JAX's persistent cache: an XLA:CPU executable read from
    # it and serialized again did not run in the parent (jaxlib 0.10.2: "NOT_FOUND: Function
    # jit_body_.14_kernel not found")
    jax.config.update("jax_enable_compilation_cache", False)
    out = compile_payload(sys.stdin.buffer.read())
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

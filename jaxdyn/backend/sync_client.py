"""A private XLA:CPU client that runs every program on the calling thread.

JAX's CPU client hands a program XLA counts at 1000 flops or more to a worker thread
(``jax_cpu_enable_async_dispatch``, on by default) and the caller waits for it: at batch 1 that
hand-off costs about as much as a small robot's dynamics. The switch is read once, when JAX
starts its CPU backend, and holds for every program of the process. This module leaves JAX's
client as it is and makes a second one, synchronous (``make_cpu_client(asynchronous=False)``,
what JAX makes with the switch off), whose one device :func:`device` returns: a ``jax.jit``
whose input and output shardings name that device compiles for that client and runs there,
through JAX's usual C++ dispatch (:func:`jaxdyn.compile_for_latency`).

Uses jaxlib's ``xla_client.make_cpu_client`` (below JAX's public API): :func:`available` says
whether this jaxlib has it (else the caller stays on JAX's client).
"""

from __future__ import annotations

import threading
from typing import Any

_LOCK = threading.Lock()
_CLIENT: list = []  # the client, made at first use


def available() -> bool:
    """Whether this jaxlib can make the client (:func:`device`)."""
    try:
        from jaxlib import xla_client as xc
    except ImportError:  # pragma: no cover - another jaxlib
        return False
    return hasattr(xc, "make_cpu_client")


def device() -> Any:
    """The device of the process's synchronous CPU client (made once, at first use)."""
    with _LOCK:
        if not _CLIENT:
            from jaxlib import xla_client as xc

            _CLIENT.append(xc.make_cpu_client(asynchronous=False))
        return _CLIENT[0].devices()[0]

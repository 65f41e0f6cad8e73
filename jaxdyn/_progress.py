"""One line per slow compile: what was compiled, for which batch, and where the time went.

JAX reports the phases of each compile through :mod:`jax.monitoring` (tracing to a jaxpr,
lowering to StableHLO, XLA's compile or a read of the persistent cache), each with the name of
the jitted function. jaxdyn listens to them, and notes which of its functions a trace went
through (:func:`note`: the public functions, their eager programs and their batching rules,
which know the batch size). When XLA's compile (or the persistent cache's read) of a program
ends and the three phases together took longer than the threshold, one line (wrapped here)
goes to the ``jaxdyn`` logger at level ``WARNING``::

    jaxdyn: compiled jit(step) [aba for a batch of 1024] in 3.4 s (trace 0.3 s,
    lowering 0.2 s, XLA 2.9 s)

While a long compile runs, a line says so first: when XLA has worked on a program for as long
as makes the compile exceed the threshold (at least half the threshold), a timer thread logs ::

    jaxdyn: compiling jit(step) [aba for a batch of 1024]...

and the line above follows when it is done. Programs that hold no jaxdyn function are not
reported. The threshold is 2 s by default,
``JAXDYN_COMPILE_LOG`` (seconds, ``0`` never) at import, :func:`jaxdyn.config.compile_log`
after; ``logging.getLogger("jaxdyn").setLevel(logging.ERROR)`` silences it too.
"""

from __future__ import annotations

import logging
import os
import threading

logger = logging.getLogger("jaxdyn")

#: seconds above which a compile is reported (``None``: never)
_threshold: dict = {"secs": 2.0}

_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_COMPILE = "/jax/core/compile/backend_compile_duration"


class _State(threading.local):
    def __init__(self):
        self.notes: dict = {}  # jaxdyn function name -> set of batch sizes
        self.trace = 0.0
        self.lower = 0.0
        # announces the XLA compile in progress
        self.timer: threading.Timer | None = None


_state = _State()


def set_threshold(secs: float | None) -> None:
    _threshold["secs"] = secs


def threshold() -> float | None:
    return _threshold["secs"]


def note(name: str, batch: int | None = None) -> None:
    """Record that the trace in progress (this thread) goes through jaxdyn's ``name``, under
    ``jax.vmap`` of ``batch`` samples when given."""
    if _threshold["secs"] is None:
        return
    sizes = _state.notes.setdefault(name, set())
    if batch is not None:
        sizes.add(int(batch))


def _what(notes: dict) -> str:
    parts = []
    for name, sizes in notes.items():
        if sizes:
            b = ", ".join(str(s) for s in sorted(sizes))
            parts.append(f"{name} for a batch of {b}")
        else:
            parts.append(name)
    if len(parts) > 4:
        parts = parts[:4] + [f"{len(parts) - 4} more"]
    return ", ".join(parts)


def _label(name: str) -> str:
    if name in ("run", "jit(run)"):  # jaxdyn.eager.compiled's programs
        return "an eager call"
    return name if name.startswith("jit(") else f"jit({name})"


def _cancel() -> None:
    if _state.timer is not None:
        _state.timer.cancel()
        _state.timer = None


def _announce(label: str, what: str) -> None:
    logger.warning("jaxdyn: compiling %s [%s]...", label, what)


def _listener(event: str, duration_secs: float, **kwargs: str | int) -> None:
    duration = duration_secs
    if event == _TRACE:
        _cancel()  # (a lowering that was never compiled: jit(...).lower())
        _state.trace += duration
    elif event == _LOWER:
        _state.lower += duration
        secs = _threshold["secs"]
        _cancel()
        if secs is not None and _state.notes:
            # XLA's compile starts now in this thread; say so if it outlasts the threshold
            delay = max(secs - _state.trace - _state.lower, 0.5 * secs)
            label = _label(str(kwargs.get("fun_name") or "a program"))
            timer = threading.Timer(delay, _announce, (label, _what(_state.notes)))
            timer.daemon = True
            _state.timer = timer
            timer.start()
    elif event == _COMPILE:
        _cancel()
        notes, trace, lower = _state.notes, _state.trace, _state.lower
        _state.notes, _state.trace, _state.lower = {}, 0.0, 0.0
        name = str(kwargs.get("fun_name") or "a program")
        secs = _threshold["secs"]
        total = trace + lower + duration
        if secs is None or not notes or total <= secs:
            return
        logger.warning(
            "jaxdyn: compiled %s [%s] in %.1f s (trace %.1f s, lowering %.1f s, XLA %.1f s)",
            _label(name),
            _what(notes),
            total,
            trace,
            lower,
            duration,
        )


def _from_env() -> None:
    raw = os.environ.get("JAXDYN_COMPILE_LOG", "").strip()
    if not raw:
        return
    if raw.lower() in ("off", "false", "no", "none"):
        set_threshold(None)
        return
    try:
        secs = float(raw)
    except ValueError:
        raise ValueError(
            f"jaxdyn.config: environment variable JAXDYN_COMPILE_LOG={raw!r} is invalid "
            "(seconds >= 0, or 0 for never)"
        ) from None
    if secs < 0:
        raise ValueError(f"jaxdyn.config: JAXDYN_COMPILE_LOG={raw!r} must be >= 0")
    set_threshold(secs if secs > 0 else None)


def _install() -> None:
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_listener)


_from_env()
_install()

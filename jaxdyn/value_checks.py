"""Value checks inside traced programs: unit quaternions in ``q``, finite damping, ... .

Every value check of jaxdyn goes through :func:`error_if`: on the CPU a call of jaxdyn's own
XLA FFI handler (:func:`jaxdyn.backend.ffi.check`), which fails the program with the check's
message and, unlike a host callback, lets JAX's persistent compilation cache keep the program;
elsewhere ``equinox.error_if``. They can be switched off with
``jaxdyn.config.update("value_checks", False)`` (or :func:`set_value_checks`, or
``JAXDYN_VALUE_CHECKS=0``) for the last bit of speed; setting equinox's ``EQX_ON_ERROR``
(``nan``, ``breakpoint``, ``off``) makes them ``equinox.error_if`` with that behaviour. Loops
keep them out where they can (a check is an XLA custom call: a loop holding one is not fused by
:func:`jaxdyn.config.fused_cpu_loops`, and a GPU makes a host round trip for it):
``jaxdyn.sim.rollout`` checks before and after its loop, and the trajectory optimisers'
``ContactDynamics`` guards its inputs itself and traces the constrained solve under
:func:`unchecked`.

How a failed value check reads. A public jaxdyn function called outside ``jit`` raises
:class:`jaxdyn.CheckError` whose message *is* the check's message (one line, e.g.
``crba: a quaternion in q is not of unit norm (tolerance 0.001)``); so does a function compiled
with :func:`jaxdyn.jit` (``jax.jit`` plus this translation; both wait for the result:
:mod:`jaxdyn.eager`). Under a plain ``jax.jit`` on the CPU, XLA reports the failure when the
result is used (JAX dispatches asynchronously: ``block_until_ready``, ``np.asarray``, a later
computation on it) as ``jax.errors.JaxRuntimeError`` (or ``ValueError`` from the cached
executable) reading ``INVALID_ARGUMENT: <message>``. Where the check is ``equinox.error_if``
(GPUs, programs partitioned over devices), XLA raises at the call with ``INTERNAL: CpuCallback
error``, a traceback, and the message last; jaxdyn drops the second copy of that traceback that
JAX logs on stderr (``jax.pure_callback failed``) for its own checks.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp

from . import batching, config
from .backend import ffi, internals, small_calls

if TYPE_CHECKING:
    from jax.typing import ArrayLike

_T = TypeVar("_T")

__all__ = ["enabled", "error_if", "message_of", "set_value_checks", "unchecked"]

#: every message of jaxdyn's value checks (:func:`error_if`; to recognise its errors)
_MESSAGES: set = set()


def set_value_checks(enabled: bool) -> None:
    """Turn the jit-time value checks (e.g. unit quaternions in ``q``) on or off:
    ``jaxdyn.config.update("value_checks", enabled)``.

    The checks are inserted when a function is traced, so a change clears JAX's compilation
    caches (``jax.clear_caches()``): functions already jitted are traced again with the new
    setting on their next call.
    """
    config.update("value_checks", bool(enabled))


def enabled() -> bool:
    """Value checks on (:mod:`jaxdyn.config`) and not left out by :func:`unchecked`."""
    return config.get("value_checks") and not batching._INSIDE.unchecked


def unchecked() -> contextlib.AbstractContextManager[None]:
    """Trace jaxdyn functions without their value checks inside this block (trace time only;
    the switch of :mod:`jaxdyn.config` and JAX's caches are untouched; the batching rules of
    :mod:`jaxdyn.batching`, which may trace later, keep the choice). For callers that guard
    the inputs themselves inside a loop: a check is an XLA custom call (on a GPU a host round
    trip), and a loop holding one is not fused by :func:`jaxdyn.config.fused_cpu_loops`.

    The block is not part of JAX's cache keys: a function JAX traced before, with the checks,
    keeps them when called inside it, and so does a new ``jax.jit`` of the same function
    object (``jax.jit(jaxdyn.rnea)``: JAX's trace cache is keyed by the function). Trace
    inside the block a function of its own (``jax.jit(lambda *a: jaxdyn.rnea(*a))`` made
    there), or switch the checks off for the process (:mod:`jaxdyn.config`, which clears
    JAX's caches)."""
    return batching._inside(unchecked=True)


def error_if(x: _T, pred: ArrayLike, msg: str) -> _T:
    """``x`` (an array or a pytree of them), failing the program with ``msg`` where any entry
    of ``pred`` is true, when value checks are on (:mod:`jaxdyn.config`) and not left out
    (:func:`unchecked`); ``x`` otherwise. Every jaxdyn value check goes through here.

    On the CPU the check is a call of jaxdyn's own XLA FFI handler
    (:func:`jaxdyn.backend.ffi.check`), not ``equinox.error_if``'s host callback: JAX's
    persistent compilation cache refuses programs that hold host callbacks, so with
    ``equinox.error_if`` no program with value checks was ever cached (every first call in a
    new process compiled again, several times as long as a read from the cache).
    Elsewhere (GPUs, ``jax.export``, programs XLA partitions over devices, among them those
    traced under :func:`jaxdyn.batching.unchunked`, but not a batch split over ``Explicit``
    mesh axes, which each device checks with the handler; no C compiler), under JAX's
    transformations called outside ``jit`` (``jax.vmap(jaxdyn.rnea)(...)``: their call cannot
    wait for the result, and equinox's check fails at the call), and with equinox's
    ``EQX_ON_ERROR`` set to anything but ``raise``, ``equinox.error_if``."""
    if not enabled():
        return x
    _MESSAGES.add(msg)
    deferred = small_calls.deferred()
    if deferred is not None:  # inside a call compiled as one kernel: checked after it
        deferred.append((jnp.any(jnp.asarray(pred)), msg))
        return x
    if (
        os.environ.get("EQX_ON_ERROR", "raise") != "raise"
        or batching._INSIDE.unchunked  # traced for a program XLA partitions
        or batching._INSIDE.eqx_checks  # an eager transformation (jaxdyn.eager)
        or not ffi.check_available()
    ):
        return eqx.error_if(x, pred, msg)
    leaves, tree = jax.tree_util.tree_flatten(x)
    leaves = [jnp.asarray(v) for v in leaves]
    return jax.tree_util.tree_unflatten(tree, ffi.check(leaves, pred, msg))


small_calls.check_after = error_if  # checks deferred out of a call compiled as one kernel


def message_of(exc: BaseException) -> str | None:
    """The jaxdyn check message behind ``exc`` (an XLA runtime error raised by jaxdyn's check
    handler, ``INVALID_ARGUMENT: <message>``, or an equinox error), or None."""
    text = str(exc)
    first = text.splitlines()[0] if text else ""
    # XLA's text ends with the message: "INVALID_ARGUMENT: <message>" (JAX 0.10),
    # "INVALID_ARGUMENT: Buffer Definition Event: <message>" (JAX 0.6)
    found = [m for m in _MESSAGES if first.endswith(": " + m) or first == m]
    if found:
        return max(found, key=len)
    msg = internals.equinox_error_message()  # where equinox passes the message out of XLA
    if msg is not None and msg in _MESSAGES and msg in text:
        return msg
    return None


class _DropCallbackTraceback(logging.Filter):
    """Drops JAX's ``jax.pure_callback failed`` log record (a full traceback on stderr) when
    the failed callback is one of jaxdyn's value checks: the exception raised to the caller
    carries the same message."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != "jax.pure_callback failed" or not record.exc_info:
            return True
        exc = record.exc_info[1]
        text = str(exc)
        return not any(m in text for m in _MESSAGES)


_LOG_FILTER = _DropCallbackTraceback()
logging.getLogger(internals.CALLBACK_LOGGER).addFilter(_LOG_FILTER)

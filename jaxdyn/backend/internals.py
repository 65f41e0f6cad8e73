"""JAX's and equinox's internal APIs that jaxdyn uses: the one place outside their public
APIs, each use guarded (a JAX or equinox without it degrades to a documented default instead of
failing at import).

* :data:`STAGING_TRACE`: JAX's staging trace (``jit``, scan bodies, ``make_jaxpr``,
  ``checkpoint``), to tell a transformation evaluated eagerly from one being staged
  (:func:`jaxdyn.eager.is_eager`); ``None`` without it (every traced call then runs as is).
* :func:`equinox_error_message`: the message equinox passes out of XLA for a failed
  ``equinox.error_if`` (to raise :class:`jaxdyn.CheckError` with it).
* :func:`backends_are_initialized`: whether JAX started its backends (XLA flags set later are
  ignored: :func:`jaxdyn.config.fused_cpu_loops`).
* :func:`reset_compilation_cache`: let JAX read its persistent-cache settings again.
* :func:`distributed_client`: the coordination service's client (its barrier).
* :data:`CALLBACK_LOGGER`: the logger on which JAX reports a failed host callback.
* :data:`ARRAY_TYPE`: the class of JAX's concrete arrays (an eager call whose leaves are all
  of it takes :func:`jaxdyn.eager.dispatch`'s fast path); ``None`` without it (every eager
  call then sorts its leaves one by one).
* :data:`BATCH_TRACER`: the class of ``jax.vmap``'s tracers (``jax.vmap(fddp)`` called with
  arrays takes :func:`jaxdyn.trajopt.solve_batch`'s route on the CPU); ``None`` without it
  (``jax.vmap(fddp)`` is then always the batched program); :func:`vmap_is_innermost`: whether
  ``jax.vmap`` is the transformation being traced.
* :func:`jax_config_state`: the current value of every JAX configuration option, read
  from ``jax.config``'s value holders (a cheap key of ``jax.config.values``, which builds a
  dict); ``None`` without them (the caller then reads ``jax.config.values``).
* :func:`staged_vmap_operands` / :func:`staged_vmap_results`: the operands of a call traced by
  ``jax.vmap`` inside ``jax.jit`` (the values under the tracers and their batch axes) and the
  tracers of its batched results, for :func:`jaxdyn.batching.batched` to run its batching rule
  at once (``None`` without them: the rule then runs through ``custom_vmap``).
"""

from __future__ import annotations

import operator
from typing import Any

try:
    from jax._src.interpreters.partial_eval import DynamicJaxprTrace as STAGING_TRACE
except ImportError:  # pragma: no cover - a JAX without it: every traced call runs as is
    STAGING_TRACE = None

try:
    from jax._src.array import ArrayImpl as ARRAY_TYPE
except ImportError:  # pragma: no cover - a JAX without it: no fast path for eager calls
    ARRAY_TYPE = None

try:
    from jax._src.interpreters.batching import BatchTracer as BATCH_TRACER
except ImportError:  # pragma: no cover - a JAX without it: vmap(fddp) stays batched
    BATCH_TRACER = None

try:
    from jax._src import core as _core
    from jax._src.interpreters.batching import BatchTrace as _BATCH_TRACE

    _current_trace = _core.trace_ctx  # the current trace is ``_current_trace.trace``
    _set_current_trace = _core.set_current_trace
except (ImportError, AttributeError):  # pragma: no cover - a JAX without them
    _BATCH_TRACE = _current_trace = _set_current_trace = None


def vmap_is_innermost(leaves: list) -> bool:
    """Whether some of ``leaves`` are ``jax.vmap``'s tracers and ``jax.vmap`` is the innermost
    transformation being traced (not, e.g., a ``jax.jvp`` inside the ``vmap``, whose tracers
    hold the ``vmap``'s: there a ``custom_vmap`` would see a batch the ``jvp`` does not).
    Without JAX's current-trace internals, the first condition alone."""
    if BATCH_TRACER is None or not any(isinstance(a, BATCH_TRACER) for a in leaves):
        return False
    if _BATCH_TRACE is None or _current_trace is None:
        return True
    try:
        return isinstance(_current_trace.trace, _BATCH_TRACE)
    except AttributeError:  # pragma: no cover - another JAX's internals
        return True


def staged_vmap_operands(leaves: list) -> tuple[Any, list, list] | None:
    """``(trace, values, axes)`` when the current trace is a ``jax.vmap`` whose parent is a
    staging trace (``jax.jit``, ``make_jaxpr``: not a differentiation, not another ``vmap``) and
    some of ``leaves`` are its tracers with a batch axis: ``values`` are the arrays under
    ``leaves`` (tracers of the parent trace, or the leaves themselves), ``axes`` their batch
    axes (``None``: not batched). Else ``None``; also where JAX lacks these internals or the
    ``vmap`` names an SPMD or mesh axis."""
    if (
        _BATCH_TRACE is None
        or BATCH_TRACER is None
        or STAGING_TRACE is None
        or _current_trace is None
    ):
        return None
    try:
        trace = _current_trace.trace
        if not isinstance(trace, _BATCH_TRACE) or type(trace.parent_trace) is not STAGING_TRACE:
            return None
        axis = trace.axis_data
        if getattr(axis, "spmd_name", None) is not None or getattr(
            axis, "explicit_mesh_axis", None
        ):
            return None
        infos = [trace.to_batch_info(x) for x in leaves]
    except AttributeError:  # pragma: no cover - another JAX's internals
        return None
    axes = [d if isinstance(d, int) else None for _, d in infos]
    if all(d is None for d in axes):
        return None
    return trace, [v for v, _ in infos], axes


def staged_vmap_results(trace: Any, run: Any, *args: Any) -> list:
    """``run(*args)`` evaluated in ``trace``'s parent (the staging trace of
    :func:`staged_vmap_operands`), its results (a list of arrays batched on their leading axis)
    returned as ``trace``'s tracers."""
    assert _set_current_trace is not None and BATCH_TRACER is not None  # staged_vmap_operands
    with _set_current_trace(trace.parent_trace):
        outs = run(*args)
    return [BATCH_TRACER(trace, o, 0) for o in outs]


#: the logger of JAX's host callbacks (``jax.pure_callback failed`` with a traceback)
CALLBACK_LOGGER = "jax._src.callback"


def equinox_error_message() -> str | None:
    """The message of the last failed ``equinox.error_if`` (where equinox keeps it to pass it
    out of XLA), or None."""
    try:
        from equinox import _jit as eqx_jit
    except ImportError:  # pragma: no cover - an equinox without it
        return None
    info = getattr(eqx_jit, "last_error_info", None)
    return info[0] if info else None


def backends_are_initialized() -> bool:
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def reset_compilation_cache() -> None:
    """JAX reads its cache settings once per process; this makes it read them again at the
    next compile. A JAX without the API keeps its first reading."""
    try:
        from jax._src import compilation_cache as cc

        cc.reset_cache()
    except Exception:  # a private API
        pass


_VALUE = operator.attrgetter("value")
#: the holders of ``jax.config``'s options, as last listed (listed again when their number
#: changes: an option registered later)
_HOLDERS: list = []


def jax_config_state() -> tuple | None:
    """The value of every option of ``jax.config`` (thread-local values included, as
    ``jax.config.values`` reads them), in the order the options were registered: equal
    between two calls where ``jax.config.values`` is. ``None`` where ``jax.config`` keeps no
    value holders (another JAX)."""
    import jax

    holders = getattr(jax.config, "_value_holders", None)
    if not isinstance(holders, dict):  # pragma: no cover - another JAX's internals
        return None
    if len(_HOLDERS) != len(holders):
        _HOLDERS[:] = list(holders.values())
    try:
        return tuple(map(_VALUE, _HOLDERS))
    except AttributeError:  # pragma: no cover - another JAX's holders
        return None


def distributed_client() -> Any:
    """The client of JAX's coordination service (``None`` before ``jax.distributed``)."""
    from jax._src import distributed

    return distributed.global_state.client

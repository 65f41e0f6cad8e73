"""An unbatched algorithm as one XLA:CPU kernel inside the caller's own ``jit``.

At batch 1 a jitted algorithm is dozens to hundreds of small XLA:CPU kernels (one per fusion),
and each kernel launch costs more than the arithmetic in it. XLA:CPU runs an HLO ``call`` whose
frontend attribute ``xla_cpu_small_call`` is ``"true"`` as one kernel (its legacy IR emitter,
see :mod:`.fused_programs`). :func:`small_call` traces a function's body into such a call, so
that ``jax.jit(jaxdyn.aba)`` compiles to one kernel (with the value checks after it). Unlike
:func:`.fused_programs.fused_jit` it works inside the caller's program, whose compile options
jaxdyn cannot set, so the body must compile under XLA:CPU's defaults. What the legacy emitter
of jaxlib 0.10 cannot take inside such a call (each found on a jaxdyn algorithm):

* custom calls (a value check, the CRBA kernel, LAPACK): "Failed to materialize symbols";
  value checks are deferred (:func:`deferring_checks`: their predicates leave the call as
  outputs and are checked after it), the others keep the function out of the call;
* dots: above a few elements the emitter calls Eigen's runtime ("Failed to materialize
  symbols"), and default YNNPACK fusions of ``f64`` dots give "Fusion kind not implemented on
  CPU"; every ``dot_general`` is written as a product and a sum (:func:`_dot_as_sum`);
* a call operand the callee does not read (a model leaf the algorithm leaves unused, passed as
  an argument): the process aborts ("All or none of the slices should have an explicit
  index"), so the call also returns one entry of every operand (:func:`small_call`);
* anything else outside :data:`SAFE` (scatter: "Scatter is not implemented on CPUs", sort,
  random bits, collectives, callbacks): the function runs as it would without the call.

The body is traced once to a jaxpr; calls in it (``jit``, ``custom_jvp``, ``custom_vjp``) are
inlined (this is the primal: derivatives are the callers', see :func:`jaxdyn.batching.batched`)
and the jaxpr is evaluated into the tagged call. Values equal the plain program's to rounding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np

from . import fused_programs, xla_flags

#: primitives the legacy emitter compiles inside a small call without runtime calls
#: (``while``, ``cond`` and ``scan`` whose bodies hold only these too)
SAFE = frozenset(
    """abs acos add and asin atan atan2 broadcast_in_dim ceil clamp concatenate
    convert_element_type copy copy_p cos cosh div dynamic_slice dynamic_update_slice eq exp
    exp2 expm1 floor gather ge gt imag integer_pow iota is_finite le log log1p logistic lt max
    min mul ne neg not or pad pow real reduce_and reduce_max reduce_min reduce_or reduce_prod
    reduce_sum rem reshape rev round rsqrt select_n sign sin sinh slice split sqrt square
    squeeze stack stop_gradient sub tan tanh transpose unstack xor argmax argmin""".split()
)
#: operations on this many elements or more keep a function out of a small call: XLA:CPU
#: hands them to YNNPACK by default (its ``IsInstructionPreferredByYnn``: 4096), which the
#: legacy emitter cannot compile ("Fusion kind not implemented on CPU")
MAX_ELEMENTS = 4096
#: call-like primitives whose jaxpr is inlined (the param holding it)
_INLINE = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
    "checkpoint": "jaxpr",
    "remat": "jaxpr",
}
_LOOPS = {"while", "cond", "scan"}


class Unsupported(Exception):
    """The body holds an operation a small call cannot compile (:data:`SAFE`)."""


# ----------------------------------------------------------------------------- checks
class _Deferred:
    checks: list | None = None


_DEFERRED = _Deferred()


@contextlib.contextmanager
def deferring_checks() -> Iterator[list]:
    """While tracing a small call's body: :func:`jaxdyn.value_checks.error_if` appends
    ``(any(pred), msg)`` to the yielded list instead of inserting its custom call."""
    prev, _DEFERRED.checks = _DEFERRED.checks, []
    try:
        yield _DEFERRED.checks
    finally:
        _DEFERRED.checks = prev


#: the value check applied after a call to each deferred ``(pred, msg)``:
#: :func:`jaxdyn.value_checks.error_if`, which registers itself here when imported (the
#: backend sits below it)
check_after: Callable[[Any, Any, str], Any] | None = None


def tracing() -> bool:
    """Whether a small call's body is being traced (:func:`deferring_checks`): algorithms that
    would call LAPACK there take their custom-call-free form (``jaxdyn.aba``'s sweeps)."""
    return _DEFERRED.checks is not None


def deferred() -> list | None:
    """The list of checks being deferred (:func:`deferring_checks`), else ``None``."""
    return _DEFERRED.checks


# ----------------------------------------------------------------------------- jaxpr rewrite
def _dot_as_sum(lhs, rhs, *, dimension_numbers, preferred_element_type=None, **_):
    """``lax.dot_general`` as a broadcast product summed over the contracting dimensions
    (batch dimensions, then ``lhs``'s free ones, then ``rhs``'s, as ``dot_general``)."""
    (lc, rc), (lb, rb) = dimension_numbers
    lf = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    a = jnp.transpose(lhs, (*lb, *lf, *lc))
    b = jnp.transpose(rhs, (*rb, *rf, *rc))
    nb, nlf, nrf, nc = len(lb), len(lf), len(rf), len(lc)
    a = a.reshape(a.shape[: nb + nlf] + (1,) * nrf + a.shape[nb + nlf :])
    b = b.reshape(b.shape[:nb] + (1,) * nlf + b.shape[nb:])
    dtype = preferred_element_type or jnp.result_type(lhs, rhs)
    prod = a.astype(dtype) * b.astype(dtype)
    return jnp.sum(prod, axis=tuple(range(prod.ndim - nc, prod.ndim))) if nc else prod


def _size(aval) -> int:
    return int(np.prod(getattr(aval, "shape", ()), dtype=np.int64))


def _elements(eqn) -> int:
    """The most elements an operation of ``eqn`` touches: its largest operand or result, and
    for a ``dot_general`` the product :func:`_dot_as_sum` forms."""
    n = max([_size(v.aval) for v in (*eqn.invars, *eqn.outvars)], default=0)
    if eqn.primitive.name == "dot_general":
        (lc, _), _ = eqn.params["dimension_numbers"]
        lhs = eqn.invars[0].aval.shape
        n = max(n, _size(eqn.outvars[0].aval) * int(np.prod([lhs[d] for d in lc], dtype=np.int64)))
    return n


def _check(jaxpr) -> None:
    """:class:`Unsupported` unless every operation of ``jaxpr`` (a ``Jaxpr``), inlined calls
    and loop bodies included, is in :data:`SAFE` or a ``dot_general``, and touches fewer than
    :data:`MAX_ELEMENTS` elements."""
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if _elements(eqn) >= MAX_ELEMENTS:
            raise Unsupported(f"{name} of {_elements(eqn)} elements")
        if name in _INLINE and _INLINE[name] in eqn.params:
            sub = eqn.params[_INLINE[name]]
            _check(getattr(sub, "jaxpr", sub))
        elif name in _LOOPS:
            for sub in _subjaxprs(eqn.params):
                _check(sub)
                if _has_dot(sub):  # loop bodies are bound as they are
                    raise Unsupported(f"{name} with a dot_general")
        elif name != "dot_general" and name not in SAFE:
            raise Unsupported(name)


def _subjaxprs(params) -> list:
    """The jaxprs (``Jaxpr``) among a primitive's ``params`` (alone or in tuples)."""
    out = []
    for p in params.values():
        for x in p if isinstance(p, (tuple, list)) else (p,):
            if isinstance(x, jax.extend.core.ClosedJaxpr):
                out.append(x.jaxpr)
            elif isinstance(x, jax.extend.core.Jaxpr):
                out.append(x)
    return out


def _has_dot(jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            return True
        if any(_has_dot(s) for s in _subjaxprs(eqn.params)):
            return True
    return False


def _eval(jaxpr, consts, args):
    """Evaluate ``jaxpr`` on ``args``, inlining calls and writing dots as sums."""
    env: dict = {}

    def read(v):
        return v.val if isinstance(v, jax.extend.core.Literal) else env[v]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        if name == "dot_general":
            outs = [_dot_as_sum(*invals, **eqn.params)]
        elif name in _INLINE and _INLINE[name] in eqn.params:
            sub = eqn.params[_INLINE[name]]
            if hasattr(sub, "jaxpr"):  # a ClosedJaxpr
                outs = _eval(sub.jaxpr, sub.consts, invals)
            else:
                outs = _eval(sub, (), invals)
        else:
            # (jax 0.10: get_bind_params returns the params alone, as jax.core.eval_jaxpr)
            outs = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))
            if not eqn.primitive.multiple_results:
                outs = [outs]
        for v, x in zip(eqn.outvars, outs):
            env[v] = x
    return [read(v) for v in jaxpr.outvars]


# ----------------------------------------------------------------------------- the call
def usable() -> bool:
    """Whether small calls are made here: the CPU backend and a jaxlib they were written for
    (:func:`.fused_programs.supported`)."""
    return jax.default_backend() == "cpu" and fused_programs.supported()


def small_call(fn: Callable[..., Any], *xs: Any) -> Any:
    """``fn(*xs)`` (``xs``: arrays or tracers; ``fn`` returns a pytree of arrays) traced into
    one call tagged ``xla_cpu_small_call``, its jaxdyn value checks deferred and applied to
    the result after the call (:data:`check_after`). :class:`Unsupported` (before anything is
    staged) when the body holds an operation outside :data:`SAFE` or too large an array."""
    from jax.experimental.xla_metadata import set_xla_metadata

    msgs: list = []

    def body(*ys):
        with deferring_checks() as checks, xla_flags.tracing_fused_program():
            out = fn(*ys)
        msgs[:] = [m for _, m in checks]
        return out, [p for p, _ in checks]

    # traced under the call's metadata, which is part of JAX's trace-cache keys: a function
    # traced inside the body (its checks deferred, no LAPACK) and outside it (checks and all)
    # are two cache entries, never one reused for the other
    with set_xla_metadata(**fused_programs.SMALL_CALL):
        closed, shape = jax.make_jaxpr(body, return_shape=True)(*xs)
    _check(closed.jaxpr)
    if msgs and check_after is None:
        raise Unsupported("value checks without jaxdyn.value_checks")
    tree = jax.tree_util.tree_structure(shape)

    def run(*ys):
        outs = _eval(closed.jaxpr, closed.consts, ys)
        # every operand read inside the call (an unread one aborts XLA:CPU's emitter)
        touch = [jnp.real(jnp.ravel(y)[:1]).astype(jnp.float32) for y in ys if jnp.size(y)]
        return outs, (jnp.concatenate(touch) if touch else None)

    with set_xla_metadata(**fused_programs.SMALL_CALL):
        outs, _ = jax.jit(run)(*xs)
    out, preds = jax.tree_util.tree_unflatten(tree, outs)
    for pred, msg in zip(preds, msgs):
        out = check_after(out, pred, msg)  # type: ignore[misc]  (msgs: registered, above)
    return out

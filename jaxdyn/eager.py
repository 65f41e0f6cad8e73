"""Eager calls as one compiled program, and failed value checks as :class:`jaxdyn.CheckError`.

A public function called outside any trace (eagerly), or under transformations evaluated eagerly
(:func:`is_eager`: ``jax.jacfwd``, ``jax.grad``, ``jax.vmap`` outside ``jax.jit``), runs as one
program compiled for its arguments (:func:`compiled`), instead of op by op (hundreds of small
XLA programs); a failed value check (:mod:`jaxdyn.value_checks`) then raises
:class:`jaxdyn.CheckError` with the check's message (:func:`translate`). Under a staging trace
(``jax.jit``, a loop body) the function runs as is. :func:`dispatch` chooses; :func:`jit` is
``jax.jit`` with the same translation; :func:`eager_jit` is the decorator for functions that
take no :class:`jaxdyn.Model` (the cluster algorithms), and :func:`jaxdyn.shell.public` the one
for those that do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, ParamSpec, TypeVar

import equinox as eqx
import jax
import jax.core
import numpy as np

from . import _progress, batching, value_checks
from .backend import internals
from .errors import CheckError

__all__ = [
    "EAGER_FLOAT_KEYS",
    "OP_BY_OP",
    "compiled",
    "dispatch",
    "eager_jit",
    "is_eager",
    "jit",
    "translate",
]


P = ParamSpec("P")
R = TypeVar("R")


def translate(fn: Callable[P, R]) -> Callable[P, R]:
    """Call ``fn`` and wait for its result; a failed jaxdyn value check is re-raised as
    :class:`jaxdyn.CheckError` whose message is the check's message alone. (XLA reports a
    failed check of jaxdyn's handler when the result is ready, not at the call: JAX dispatches
    asynchronously.)"""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return jax.block_until_ready(fn(*args, **kwargs))
        except CheckError:
            raise
        except (eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError, ValueError) as e:
            msg = value_checks.message_of(e)
            if msg is None:
                raise
            raise CheckError(msg) from None

    return wrapper


def is_eager(leaves: Iterable[Any]) -> bool:
    """Whether the tracers among the arguments' ``leaves`` all come from transformations
    evaluated eagerly (``jax.jacfwd(jaxdyn.aba)(...)``, ``jax.grad``, ``jax.vmap`` called
    outside ``jax.jit``): no staging trace below any of them. Such a call runs op by op like
    an untraced one, and like one it goes through :func:`compiled` (the transformation then
    applies to one compiled program). ``False`` when JAX's trace internals are not as expected
    (the call then runs as is)."""
    staging = internals.STAGING_TRACE
    if staging is None:
        return False
    for x in leaves:
        if isinstance(x, jax.core.Tracer):
            t = getattr(x, "_trace", None)
            if t is None:
                return False
            while t is not None:
                if isinstance(t, staging):
                    return False
                t = getattr(t, "parent_trace", None)
    return True


def dispatch(
    fn: Callable[P, R], plain: Callable[P, R] | None = None, compile_eagerly: bool = True
) -> Callable[P, R]:
    """``fn`` called as the module docstring describes: eagerly (no tracer, or tracers of
    eagerly evaluated transformations, :func:`is_eager`) through :func:`compiled` when
    ``compile_eagerly`` (else, or with leaves it cannot pass, ``plain`` op by op with failed
    checks as :class:`jaxdyn.CheckError`), under a staging trace as is."""
    translated = translate(fn if plain is None else plain)
    program = translate(compiled(fn)) if compile_eagerly else None

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        if (
            program is not None
            and set(map(type, leaves)) == _ARRAYS
            and not getattr(jax.config, "jax_disable_jit")  # noqa: B009 (set at run time)
        ):
            # the common eager call, concrete JAX arrays only (a model and its inputs):
            # straight to the compiled program (no tracers, no static leaves to sort out)
            return program(leaves, treedef, True)
        traced = any(isinstance(x, jax.core.Tracer) for x in leaves)
        if (
            program is not None
            and not getattr(jax.config, "jax_disable_jit")  # noqa: B009 (set at run time)
            and (not traced or is_eager(leaves))
        ):
            out = program(leaves, treedef)
            if out is not OP_BY_OP:
                return out
        if traced:
            _progress.note(name)
            return fn(*args, **kwargs)
        return translated(*args, **kwargs)

    name = getattr(plain if plain is not None else fn, "__name__", "a jaxdyn function")
    return run


def eager_jit(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorator: ``fn`` (returning arrays) runs as one compiled program when called eagerly,
    and under a staging trace as is (:func:`jaxdyn.shell.public` without the model check and
    batching rule; the cluster algorithms, their state maps and baselines). README block "Kinematic
    loops": C-RNEA, C-ABA and C-EFPA on the mini cheetah ran op by op, some 600 XLA
    compiles."""
    return functools.wraps(fn)(dispatch(fn))


#: what :func:`compiled` returns for a call it cannot compile (the caller runs it op by op)
OP_BY_OP = object()
#: the leaf types of an eager call whose leaves are all concrete JAX arrays (:func:`dispatch`'s
#: fast path, which skips the per-leaf sorting of :func:`compiled`: at batch 1 that sorting
#: was a large part of an eager call's time)
_ARRAYS = {internals.ARRAY_TYPE}
#: the static part of such a call, per number of leaves (all arrays: ``None`` each)
_NONES: dict[int, tuple] = {}
#: marks a leaf of an eager call given as its static part and arrays (``eager_split()``)
_SPLIT = object()


def _dynamic(x) -> bool:
    """Leaves an eager call passes to its compiled program as arrays: JAX and numpy arrays
    (and the tracers of transformations evaluated eagerly, :func:`is_eager`).
    Integers, booleans and strings (frame indices and names, options) are static:
    the program is compiled for their value, and the function sees them as given (its type
    checks included). Python and numpy floats (a damping, a gain, the numbers of a nested
    list) are static too, for at most :data:`EAGER_FLOAT_KEYS` distinct values per function,
    model and other arguments (:func:`compiled`); a call with any other leaf runs op by op,
    as before."""
    return isinstance(x, (jax.Array, np.ndarray, jax.core.Tracer))


def _static_ok(x) -> bool:
    """Integers, booleans, strings, floats, and the objects that say so (``eager_static()``:
    the constraint descriptions ``Weld`` / ``Connect`` without targets and ``Inputs`` of
    them, frozen and compared by value)."""
    if isinstance(x, (str, int, float, np.integer, np.bool_, np.floating)):
        return True
    static = getattr(type(x), "eager_static", None)
    return callable(static) and bool(x.eager_static())


#: how many distinct float values (:func:`_static_ok`) an eager function compiles for one
#: model and set of other arguments before further values run op by op. A float option that
#: stays the same from call to call (``constrained_aba(..., damping=1e-8)`` of
#: docs/operational-space.md, which op by op compiles each operation at its first call) then
#: costs one compile; floats that change at every call (a loop over Python numbers) cost a
#: few compiles, about what the first op-by-op call costs, and then run op by op as they did.
EAGER_FLOAT_KEYS = 4


#: per eager program, model and non-float arguments (:func:`compiled`): the keys with
#: floats compiled so far
_FLOAT_KEYS: dict = {}


def _float_shape(static):
    """``static`` with its floats blanked out (``None`` when it holds none): the calls that
    share it differ in their float values only."""
    isfloat = [s is not None and isinstance(s[1], (float, np.floating)) for s in static]
    if not any(isfloat):
        return None
    return tuple((s[0], None) if f else s for s, f in zip(static, isfloat))


def compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` compiled with ``jax.jit`` for eager calls, its static leaves (:func:`_dynamic`)
    and the value-check switch part of the key; called with the flattened arguments
    ``(leaves, treedef)``. A leaf with ``eager_split()`` (a constraint description with a
    target) travels as its static part and arrays, which ``eager_join`` puts together inside
    the program. Returns :data:`OP_BY_OP` when a leaf is none of these (an array, a static
    kind, a splittable object), the key is not hashable, or it holds floats
    and :data:`EAGER_FLOAT_KEYS` other values of them were compiled already for the same
    model and other arguments; the caller then runs ``fn`` op by op.

    Run op by op, an algorithm dispatches hundreds of small XLA programs (each operation
    compiled at its first call); compiled as one program, its first call compiles once and
    the next ones dispatch it like a jitted function."""

    name = getattr(fn, "__name__", "run")

    def run(treedef, static, checks, traced, *dyn):
        _progress.note(name)
        it = iter(dyn)
        leaves = [
            next(it)
            if s is None
            else s[1].eager_join([next(it) for _ in range(s[2])])
            if s[0] is _SPLIT
            else s[1]
            for s in static
        ]
        args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves)
        # under an eager transformation (traced leaves) the call cannot wait for its result,
        # so its checks are equinox's, which fail at the call (error_if)
        with batching._inside(eqx_checks=traced):
            return fn(*args, **kwargs)

    # named run in JAX's logs (tests/test_api.py counts them); jaxdyn's compile log names fn
    run = jax.jit(run, static_argnums=(0, 1, 2, 3))

    def call(leaves, treedef, arrays_only=False):
        if arrays_only:  # every leaf a concrete JAX array (dispatch checked): all dynamic
            static = _NONES.get(len(leaves))
            if static is None:
                static = _NONES.setdefault(len(leaves), (None,) * len(leaves))
            return run(treedef, static, value_checks.enabled(), False, *leaves)
        # None marks an array; static leaves are typed: 1 and True are equal keys, but not
        # the same argument; a split leaf (a constraint with a target) is its static part and
        # the number of arrays it passes
        static, dyn = [], []
        for x in leaves:
            if _dynamic(x):
                static.append(None)
                dyn.append(x)
            elif _static_ok(x):
                static.append((type(x), x))
            elif callable(getattr(type(x), "eager_split", None)):
                part, arrays = x.eager_split()
                static.append((_SPLIT, part, len(arrays)))
                dyn.extend(arrays)
            else:
                return OP_BY_OP
        static = tuple(static)
        try:
            hash((treedef, static))
        except TypeError:
            return OP_BY_OP
        shape = _float_shape(static)
        if shape is not None:  # per model and other options: the float values compiled
            floats = _FLOAT_KEYS.setdefault((run, treedef, shape), set())
            if static not in floats:
                if len(floats) >= EAGER_FLOAT_KEYS:
                    return OP_BY_OP
                floats.add(static)
        traced = any(isinstance(x, jax.core.Tracer) for x in dyn)
        return run(treedef, static, value_checks.enabled(), traced, *dyn)

    return call


def jit(fun: Callable | None = None, **jit_kwargs: Any) -> Any:
    """``jax.jit`` whose failed jaxdyn value checks raise :class:`jaxdyn.CheckError` with the
    check's message as the whole text (instead of XLA's ``INVALID_ARGUMENT: <message>``, or
    ``INTERNAL: CpuCallback error ...`` and a traceback where the check is
    ``equinox.error_if``), at the call: it waits for the result (``jax.block_until_ready``),
    where ``jax.jit`` returns at once and XLA reports the failure when the result is used.
    Same arguments as ``jax.jit``; usable as ``@jaxdyn.jit`` or
    ``jaxdyn.jit(f, static_argnums=...)``. The compiled function is the one ``jax.jit`` makes
    (``.lower`` and ``.trace`` are forwarded)."""
    if fun is None:
        return functools.partial(jit, **jit_kwargs)
    jitted = jax.jit(fun, **jit_kwargs)
    wrapper = translate(jitted)
    for name in ("lower", "trace", "eval_shape", "clear_cache"):
        if hasattr(jitted, name):
            setattr(wrapper, name, getattr(jitted, name))
    return wrapper

"""Argument checks: types and shapes at trace time (always), values under jit (jaxdyn's XLA
FFI check on the CPU, ``equinox.error_if`` elsewhere).

* **Types and shapes** raise at trace time: ``TypeError`` for a wrong model type (a
  :class:`jaxdyn.clusters.ClusterModel` given to a tree algorithm names the cluster function to
  use instead), ``ValueError`` naming the function, the argument and the expected size.
* **Values** (unit quaternions in ``q``, finite damping ...) are checked inside the traced program
  (:func:`error_if`): on the CPU by a call of jaxdyn's own XLA FFI handler, which fails the program
  with the check's message and, unlike a host callback, lets JAX's persistent compilation cache keep
  the program; elsewhere by ``equinox.error_if``. They can be switched off with
  ``jaxdyn.config.update("value_checks", False)`` (or :func:`set_value_checks`, or
  ``JAXDYN_VALUE_CHECKS=0``) for the last bit of speed; setting equinox's ``EQX_ON_ERROR`` (``nan``,
  ``breakpoint``, ``off``) makes them ``equinox.error_if`` with that behaviour. Loops keep them out
  where they can (a check is an XLA custom call: a loop holding one is not fused by
  :func:`jaxdyn.config.fused_cpu_loops`, and a GPU makes a host round trip for it):
  ``jaxdyn.sim.rollout`` checks before and after its loop, and the trajectory optimisers'
  ``ContactDynamics`` guards its inputs itself and traces the constrained solve under
  :func:`unchecked`.

How a failed value check reads. A public jaxdyn function called outside ``jit`` raises
:class:`CheckError` whose message *is* the check's message (one line, e.g.
``crba: a quaternion in q is not of unit norm (tolerance 0.001)``); so does a function compiled
with :func:`jit` (``jax.jit`` plus this translation; both wait for the result). Under a plain
``jax.jit`` on the CPU, XLA reports the failure when the result is used (JAX dispatches
asynchronously: ``block_until_ready``, ``np.asarray``, a later computation on it) as
``jax.errors.JaxRuntimeError`` (or ``ValueError`` from the cached executable) reading
``INVALID_ARGUMENT: <message>``. Where the check is ``equinox.error_if`` (GPUs, programs
partitioned over devices), XLA raises at the call with ``INTERNAL: CpuCallback error``, a
traceback, and the message last; jaxdyn drops the second copy of that traceback that JAX logs
on stderr (``jax.pure_callback failed``) for its own checks.

Warnings at load time (lenient loading of real-world URDFs, see :mod:`jaxdyn.model.urdf`) use
:class:`JaxdynWarning`.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import _progress, _uninitialized, batching, config

__all__ = [
    "CheckError",
    "JaxdynWarning",
    "as_array",
    "check_model",
    "check_quaternions",
    "common_dtype",
    "error_if",
    "jit",
    "set_value_checks",
    "value_checks_enabled",
]


class JaxdynWarning(UserWarning):
    """Warnings of jaxdyn (e.g. a URDF inertia repaired or a ``<mimic>`` dropped at load
    time); filter them with ``warnings.filterwarnings("ignore", category=jaxdyn.JaxdynWarning)``
    or turn them into errors with ``"error"``."""


class CheckError(eqx.EquinoxRuntimeError, ValueError):
    """A value check of jaxdyn failed (e.g. a non-unit quaternion in ``q``).

    Raised by jaxdyn's public functions called outside ``jit`` and by functions compiled with
    :func:`jaxdyn.jit`; the message is the check's own one-line message. A subclass of
    ``equinox.EquinoxRuntimeError`` (what ``equinox.error_if`` raises) and of ``ValueError``.
    """


CheckError.__module__ = "jaxdyn"

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def warn(msg: str) -> None:
    """``warnings.warn(msg, JaxdynWarning)`` attributed to the first caller outside jaxdyn."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        _PACKAGE_DIR + os.sep
    ):
        level += 1
        frame = frame.f_back
    warnings.warn(msg, JaxdynWarning, stacklevel=level)


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


def value_checks_enabled() -> bool:
    """Value checks on (:mod:`jaxdyn.config`) and not left out by :func:`unchecked`."""
    return config.get("value_checks") and not batching._INSIDE.unchecked


def unchecked():
    """Trace jaxdyn functions without their value checks inside this block (trace time only;
    the switch of :mod:`jaxdyn.config` and JAX's caches are untouched; the batching rules of
    :mod:`jaxdyn.batching`, which may trace later, keep the choice). For callers that guard
    the inputs themselves inside a loop: a check is an XLA custom call (on a GPU a host round
    trip), and a loop holding one is not fused by :func:`jaxdyn.config.fused_cpu_loops`."""
    return batching._inside(unchecked=True)


def error_if(x, pred, msg: str):
    """``x`` (an array or a pytree of them), failing the program with ``msg`` where any entry
    of ``pred`` is true, when value checks are on (:mod:`jaxdyn.config`) and not left out
    (:func:`unchecked`); ``x`` otherwise. Every jaxdyn value check goes through here.

    On the CPU the check is a call of jaxdyn's own XLA FFI handler
    (:func:`jaxdyn._uninitialized.check`), not ``equinox.error_if``'s host callback: JAX's
    persistent compilation cache refuses programs that hold host callbacks, so with
    ``equinox.error_if`` no program with value checks was ever cached (every first call in a
    new process compiled again, several times as long as a read from the cache).
    Elsewhere (GPUs, ``jax.export``, programs XLA partitions over devices, among them those
    traced under :func:`jaxdyn.batching.unchunked`, but not a batch split over ``Explicit``
    mesh axes, which each device checks with the handler; no C compiler), under JAX's
    transformations called outside ``jit`` (``jax.vmap(jaxdyn.rnea)(...)``: their call cannot
    wait for the result, and equinox's check fails at the call), and with equinox's
    ``EQX_ON_ERROR`` set to anything but ``raise``, ``equinox.error_if``."""
    if not value_checks_enabled():
        return x
    _MESSAGES.add(msg)
    if (
        os.environ.get("EQX_ON_ERROR", "raise") != "raise"
        or batching._INSIDE.unchunked  # traced for a program XLA partitions
        or batching._INSIDE.eqx_checks  # an eager transformation (_eager_jit)
        or not _uninitialized.check_available()
    ):
        return eqx.error_if(x, pred, msg)
    leaves, tree = jax.tree_util.tree_flatten(x)
    leaves = [jnp.asarray(v) for v in leaves]
    return jax.tree_util.tree_unflatten(tree, _uninitialized.check(leaves, pred, msg))


# ----------------------------------------------------------------------------- error display
def _jaxdyn_message(exc) -> str | None:
    """The jaxdyn check message behind ``exc`` (an XLA runtime error raised by jaxdyn's check
    handler, ``INVALID_ARGUMENT: <message>``, or an equinox error), or None."""
    text = str(exc)
    first = text.splitlines()[0] if text else ""
    # XLA's text ends with the message: "INVALID_ARGUMENT: <message>" (JAX 0.10),
    # "INVALID_ARGUMENT: Buffer Definition Event: <message>" (JAX 0.6)
    found = [m for m in _MESSAGES if first.endswith(": " + m) or first == m]
    if found:
        return max(found, key=len)
    from equinox import _jit as eqx_jit  # where equinox smuggles the message out of XLA

    info = getattr(eqx_jit, "last_error_info", None)
    msg = info[0] if info else None
    if msg in _MESSAGES and msg in text:
        return msg
    return None


def _translate(fn):
    """Call ``fn`` and wait for its result; a failed jaxdyn value check is re-raised as
    :class:`CheckError` whose message is the check's message alone. (XLA reports a failed
    check of jaxdyn's handler when the result is ready, not at the call: JAX dispatches
    asynchronously.)"""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return jax.block_until_ready(fn(*args, **kwargs))
        except CheckError:
            raise
        except (eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError, ValueError) as e:
            msg = _jaxdyn_message(e)
            if msg is None:
                raise
            raise CheckError(msg) from None

    return wrapper


try:  # JAX's staging trace (jit, scan bodies, make_jaxpr, checkpoint): internal, hence guarded
    from jax._src.interpreters.partial_eval import DynamicJaxprTrace as _STAGING
except ImportError:  # pragma: no cover - a JAX without it: every traced call runs as is
    _STAGING = None


def _eager(leaves) -> bool:
    """Whether the tracers among the arguments' ``leaves`` all come from transformations
    evaluated eagerly (``jax.jacfwd(jaxdyn.aba)(...)``, ``jax.grad``, ``jax.vmap`` called
    outside ``jax.jit``): no staging trace below any of them. Such a call runs op by op like
    an untraced one, and like one it goes through :func:`_eager_jit` (the transformation then
    applies to one compiled program). ``False`` when JAX's trace internals are not as expected
    (the call then runs as is)."""
    if _STAGING is None:
        return False
    for x in leaves:
        if isinstance(x, jax.core.Tracer):
            t = getattr(x, "_trace", None)
            if t is None:
                return False
            while t is not None:
                if isinstance(t, _STAGING):
                    return False
                t = getattr(t, "parent_trace", None)
    return True


def _nv2(model, itemsize):
    return model.nv * model.nv


def _kinematics(model, itemsize):
    """About five numbers per body and frame: chunks of 64 samples on talos_full (45 bodies,
    119 frames), 128 (:data:`jaxdyn.batching.CHUNK_MAX`) on solo12 (13, 33); none (one
    ``vmap``) below 40 bodies and frames: chunks made the kinematics, energy and constraint
    functions faster on talos_full and solo12 and slower on arm7 (7 bodies, 19 frames;
    ``docs/design-measurements.md``)."""
    n = model.nb + len(model.frame_names)
    return 5 * n if n >= 40 else 0


#: public functions whose ``jax.vmap`` is evaluated in cache-sized chunks on the CPU
#: (:func:`jaxdyn.batching.batched`), with an estimate of the numbers one sample keeps live
#: (``words(model, itemsize)``), from which the chunk size is chosen
#: (:func:`jaxdyn.batching.auto_chunk`): ``nv x nv`` matrices for the passes that carry them,
#: ABA's 6x6 articulated inertias and RNEA's transforms, velocities, accelerations and forces
#: per body. In float32 too (chunks were as fast or faster: ``batching.CHUNK_BYTES``). The
#: kinematics, energy and constraint-kinematics functions take chunks sized by the number of
#: bodies and frames (:func:`_kinematics`);
#: ``integrate`` / ``difference`` (elementwise on ``q``) stay one ``vmap``.
def _crba_words(model, itemsize):
    """CRBA's chunks: none where its C kernel computes the batch (it keeps a block of samples
    in the cache itself), else as the other ``nv x nv`` algorithms."""
    from .algorithms import crba

    if crba.kernel_usable(model, {4: "float32", 8: "float64"}.get(itemsize, "complex128")):
        return 0
    return _nv2(model, itemsize)


BATCHED = {
    "rnea": lambda m, _: 48 * m.nb,
    "aba": lambda m, _: 36 * m.nb,
    "crba": _crba_words,
    "coriolis_matrix": _nv2,
    "minv": _nv2,
    "rnea_derivatives": lambda m, _: 4 * m.nv * m.nv,
    "aba_derivatives": lambda m, _: 4 * m.nv * m.nv,
    "delassus": _nv2,
    "constrained_aba": _nv2,
    "input_matrix": _nv2,
    **{
        name: _kinematics
        for name in (
            "forward_kinematics",
            "frame_placement",
            "frame_velocity",
            "frame_acceleration",
            "jacobian",
            "joint_jacobians",
            "center_of_mass",
            "center_of_mass_jacobian",
            "centroidal_momentum",
            "centroidal_momentum_matrix",
            "centroidal_momentum_bias",
            "centroidal_dynamics",
            "kinetic_energy",
            "potential_energy",
            "constraint_placements",
            "constraint_jacobian",
            "constraint_velocity",
            "constraint_drift",
            "constraint_error",
        )
    },
}


P = ParamSpec("P")
R = TypeVar("R")


def public(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorator of jaxdyn's public functions ``f(model, ...)``.

    * the model must be a :class:`jaxdyn.Model` (:func:`check_model`: a ``TypeError`` naming
      the cluster function for a :class:`jaxdyn.clusters.ClusterModel`);
    * called outside any trace (eagerly), or under transformations evaluated eagerly
      (:func:`_eager`: ``jax.jacfwd``, ``jax.grad``, ``jax.vmap`` outside ``jax.jit``), the
      functions of :data:`EAGER_JIT` run as one compiled program (:func:`_eager_jit`; the
      transformation then applies to it), and a failed value check raises
      :class:`CheckError` with the check's message; under a staging trace (``jax.jit``, a
      loop body) the function runs as is (the error surfaces where the compiled program
      runs, see the module docstring);
    * for the functions of :data:`BATCHED`, ``jax.vmap`` on the CPU evaluates the batch in
      cache-sized chunks (:func:`jaxdyn.batching.batched`).
    """

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        chunked = batching.batched(fn, BATCHED[name]) if name in BATCHED else fn
        run = _dispatch(chunked, fn, name in EAGER_JIT)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            check_model(name, args[0] if args else kwargs.get("model"))
            return run(*args, **kwargs)

        return wrapper

    return decorate


def _dispatch(fn, plain=None, compile_eagerly: bool = True):
    """``fn`` called as :func:`public` describes: eagerly (no tracer, or tracers of eagerly
    evaluated transformations, :func:`_eager`) through :func:`_eager_jit` when
    ``compile_eagerly`` (else, or with leaves it cannot pass, ``plain`` op by op with failed
    checks as :class:`CheckError`), under a staging trace as is."""
    translated = _translate(fn if plain is None else plain)
    compiled = _translate(_eager_jit(fn)) if compile_eagerly else None

    def run(*args, **kwargs):
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        traced = any(isinstance(x, jax.core.Tracer) for x in leaves)
        if (
            compiled is not None
            and not jax.config.jax_disable_jit
            and (not traced or _eager(leaves))
        ):
            out = compiled(leaves, treedef)
            if out is not _OP_BY_OP:
                return out
        if traced:
            _progress.note(name)
            return fn(*args, **kwargs)
        return translated(*args, **kwargs)

    name = getattr(plain if plain is not None else fn, "__name__", "a jaxdyn function")
    return run


def eager_jit(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorator: ``fn`` (returning arrays) runs as one compiled program when called eagerly,
    and under a staging trace as is (:func:`public` without the model check and batching
    rule; the cluster algorithms, their state maps and baselines). README block "Kinematic
    loops": C-RNEA, C-ABA and C-EFPA on the mini cheetah ran op by op, some 600 XLA
    compiles."""
    return functools.wraps(fn)(_dispatch(fn))


#: public functions that, called eagerly, run as one compiled program (:func:`_eager_jit`):
#: those returning arrays (or named tuples of arrays) alone
EAGER_JIT = frozenset(BATCHED) | {"integrate", "difference", "bias_forces", "gravity_forces"}

_OP_BY_OP = object()
#: marks a leaf of an eager call given as its static part and arrays (``eager_split()``)
_SPLIT = object()


def _dynamic(x) -> bool:
    """Leaves an eager call passes to its compiled program as arrays: JAX and numpy arrays
    (and the tracers of transformations evaluated eagerly, :func:`_eager`).
    Integers, booleans and strings (frame indices and names, options) are static:
    the program is compiled for their value, and the function sees them as given (its type
    checks included). Python and numpy floats (a damping, a gain, the numbers of a nested
    list) are static too, for at most :data:`EAGER_FLOAT_KEYS` distinct values per function,
    model and other arguments (:func:`_eager_jit`); a call with any other leaf runs op by op,
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


#: per eager program, model and non-float arguments (:func:`_eager_jit`): the keys with
#: floats compiled so far
_FLOAT_KEYS: dict = {}


def _float_shape(static):
    """``static`` with its floats blanked out (``None`` when it holds none): the calls that
    share it differ in their float values only."""
    isfloat = [s is not None and isinstance(s[1], (float, np.floating)) for s in static]
    if not any(isfloat):
        return None
    return tuple((s[0], None) if f else s for s, f in zip(static, isfloat))


def _eager_jit(fn):
    """``fn`` compiled with ``jax.jit`` for eager calls, its static leaves (:func:`_dynamic`)
    and the value-check switch part of the key; called with the flattened arguments
    ``(leaves, treedef)``. A leaf with ``eager_split()`` (a constraint description with a
    target) travels as its static part and arrays, which ``eager_join`` puts together inside
    the program. Returns :data:`_OP_BY_OP` when a leaf is none of these (an array, a static
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

    def call(leaves, treedef):
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
                return _OP_BY_OP
        static = tuple(static)
        try:
            hash((treedef, static))
        except TypeError:
            return _OP_BY_OP
        shape = _float_shape(static)
        if shape is not None:  # per model and other options: the float values compiled
            floats = _FLOAT_KEYS.setdefault((run, treedef, shape), set())
            if static not in floats:
                if len(floats) >= EAGER_FLOAT_KEYS:
                    return _OP_BY_OP
                floats.add(static)
        traced = any(isinstance(x, jax.core.Tracer) for x in dyn)
        return run(treedef, static, value_checks_enabled(), traced, *dyn)

    return call


def jit(fun: Callable | None = None, **jit_kwargs: Any) -> Any:
    """``jax.jit`` whose failed jaxdyn value checks raise :class:`CheckError` with the check's
    message as the whole text (instead of XLA's ``INVALID_ARGUMENT: <message>``, or
    ``INTERNAL: CpuCallback error ...`` and a traceback where the check is
    ``equinox.error_if``), at the call: it waits for the result (``jax.block_until_ready``),
    where ``jax.jit`` returns at once and XLA reports the failure when the result is used.
    Same arguments as ``jax.jit``; usable as ``@jaxdyn.jit`` or
    ``jaxdyn.jit(f, static_argnums=...)``. The compiled function is the one ``jax.jit`` makes
    (``.lower`` and ``.trace`` are forwarded)."""
    if fun is None:
        return functools.partial(jit, **jit_kwargs)
    jitted = jax.jit(fun, **jit_kwargs)
    wrapper = _translate(jitted)
    for name in ("lower", "trace", "eval_shape", "clear_cache"):
        if hasattr(jitted, name):
            setattr(wrapper, name, getattr(jitted, name))
    return wrapper


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
logging.getLogger("jax._src.callback").addFilter(_LOG_FILTER)


# ----------------------------------------------------------------------------- models
#: the cluster algorithm to use instead of a tree algorithm given a ClusterModel
_CLUSTER_ALTERNATIVE = {
    "rnea": "jaxdyn.crnea",
    "bias_forces": "jaxdyn.crnea (with a = 0)",
    "gravity_forces": "jaxdyn.crnea (with v = a = 0)",
    "rnea_derivatives": "jax.jacfwd of jaxdyn.crnea",
    "aba": "jaxdyn.caba",
    "aba_derivatives": "jax.jacfwd of jaxdyn.caba",
    "minv": "jax.jacfwd of jaxdyn.caba in tau",
    "crba": "jax.jacfwd of jaxdyn.crnea in a",
    "delassus": "jaxdyn.cefpa",
    "constrained_aba": "jaxdyn.caba",
}


def check_model(fn: str, model) -> None:
    """``TypeError`` unless ``model`` is a :class:`jaxdyn.Model`; a
    :class:`jaxdyn.clusters.ClusterModel` gets the name of the cluster function to use."""
    from .model.model import Model

    if isinstance(model, Model):
        return
    cls = type(model)
    if cls.__name__ == "ClusterModel" and cls.__module__.startswith("jaxdyn.clusters"):
        alt = _CLUSTER_ALTERNATIVE.get(fn)
        use = (
            f"use {alt} for cluster models"
            if alt
            else "use the cluster algorithms (jaxdyn.crnea, jaxdyn.caba, jaxdyn.cefpa)"
        )
        raise TypeError(
            f"jaxdyn.{fn}: model is a jaxdyn.clusters.ClusterModel (a model with kinematic "
            f"loops); jaxdyn.{fn} takes a jaxdyn.Model: {use}, or pass model.tree, its "
            "spanning tree without the loop constraints"
        )
    raise TypeError(f"jaxdyn.{fn}: model must be a jaxdyn.Model, got {cls.__name__}")


# ----------------------------------------------------------------------------- arrays
def as_array(fn, name, x, shape, model):
    """Convert ``x`` (an array or a nested sequence of numbers) to an array and check its
    shape; ``shape`` names its sizes, e.g. ``(("nq", 13),)``."""
    try:
        x = jnp.asarray(x)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"{fn}: {name} must be an array of numbers, got {type(x).__name__} ({e})"
        ) from None
    if not (
        jnp.issubdtype(x.dtype, jnp.number) or jnp.issubdtype(x.dtype, jnp.bool_)
    ):  # pragma: no cover - jnp.asarray accepts numbers and bools only
        raise TypeError(f"{fn}: {name} has dtype {x.dtype}, expected numbers")
    want = tuple(s for _, s in shape)
    if x.shape != want:
        names = ", ".join(n for n, _ in shape)
        sizes = ", ".join(str(s) for _, s in shape)
        extra = ""
        if x.ndim == len(want) + 1 and x.shape[1:] == want:
            extra = " (for a batch, wrap the call in jax.vmap)"
        raise ValueError(
            f"{fn}: {name} has shape {tuple(x.shape)}, expected ({names})=({sizes})"
            f"{',' if len(want) == 1 else ''} for {model.name!r}{extra}"
        )
    return x


def _is_float(dt) -> bool:
    return jnp.issubdtype(dt, jnp.floating) or jnp.issubdtype(dt, jnp.complexfloating)


def default_float():
    """The default floating dtype: float64 with ``jax_enable_x64``, float32 otherwise."""
    return jax.dtypes.canonicalize_dtype(jnp.float64)


def common_dtype(*xs, model=None):
    """The floating (or complex) dtype an algorithm runs in: the promoted dtype of the
    floating inputs; integer and boolean inputs are promoted to the model's floating dtype
    (``model`` given) or to the default float dtype (float64 under ``jax_enable_x64``), not
    to float32."""
    xs = [x for x in xs if x is not None]
    floats = [jnp.asarray(x).dtype for x in xs if _is_float(jnp.asarray(x).dtype)]
    if floats:
        return jnp.result_type(*floats)
    if model is not None and _is_float(model.mass.dtype):
        return jnp.dtype(model.mass.dtype)
    return default_float()


def check_model_dtype(fn, model, dtype) -> None:
    """Refuse to compute in float64 with a model loaded while float64 was disabled: its
    parameters were rounded to float32 at load time, and casting them back would silently
    lose the precision the float64 inputs ask for."""
    if not getattr(model, "x32_load", False):
        return
    real = jnp.finfo(dtype).dtype if _is_float(dtype) else None
    if real is not None and jnp.dtype(real).itemsize > 4:
        raise ValueError(
            f"{fn}: {model.name!r} was loaded while float64 was disabled, so its parameters "
            f"were rounded to float32, but the inputs are {jnp.dtype(dtype).name}. Load the "
            'model after jax.config.update("jax_enable_x64", True), or call '
            "model.astype(jnp.float64) to accept the float32-rounded parameters (or pass "
            "float32 inputs)"
        )


# ----------------------------------------------------------------------------- quaternions
@functools.lru_cache(maxsize=256)
def quaternion_indices(topo):
    """``(idx, owner)``: ``idx (n, 4)`` indices into ``q`` of the quaternions of spherical and
    free joints, ``owner (nq,)`` ``1 + i`` on the entries of quaternion ``i``, 0 elsewhere
    (``None`` without quaternions)."""
    from . import joints

    idx = []
    for j in range(topo.nb):
        k = int(topo.kind[j])
        if k == joints.SPHERICAL:
            idx.append(topo.q_start[j] + np.arange(4))
        elif k == joints.FREE:
            idx.append(topo.q_start[j] + 3 + np.arange(4))
    if not idx:
        return None
    idx = np.stack(idx)
    owner = np.zeros(topo.nq, np.int64)
    owner[idx] = 1 + np.arange(len(idx))[:, None]
    for a in (idx, owner):
        a.setflags(write=False)
    return idx, owner


def check_quaternions(fn, model, q, tol=1e-3):
    """Check and normalise the quaternions of ``q`` (spherical / free joints).

    ``error_if`` (value checks on) a quaternion's squared norm differs from 1 by more than
    ``tol`` or is not finite (NaN); then every quaternion is divided by its norm, so the
    algorithms see unit quaternions even within the tolerance (a quaternion with
    ``|q|^2 = 1.0005`` would otherwise scale rotation matrices by 1.0005 and ``aba`` by
    2.5e-3).

    Derivatives: the norm is a constant for autodiff (``stop_gradient``), so a tangent ``dq``
    passes as ``dq / |q|``: exactly ``dq`` at a unit quaternion, where every derivative is
    unchanged (the analytic rules of :mod:`jaxdyn.derivatives`, which map the tangent into the
    tangent space of :func:`jaxdyn.integrate` and ignore its radial part, and plain autodiff
    alike); off the unit sphere the analytic rules give the exact derivative of the dynamics
    of the normalised quaternion. ``sqrt(sum q^2)`` (not ``|q|``) keeps complex inputs
    analytic (complex-step differentiation).
    """
    found = quaternion_indices(model.topo)
    if found is None:
        return q
    idx, owner = found
    quats = q[idx]
    n2 = jnp.sum(quats * quats, -1)
    if value_checks_enabled() and not jnp.issubdtype(q.dtype, jnp.complexfloating):
        err = jnp.abs(n2 - 1)
        q = error_if(
            q,
            jnp.any(~(err <= tol)),
            f"{fn}: a quaternion in q is not of unit norm (tolerance {tol}) or not finite",
        )
        quats = q[idx]
    # q * (1 / |quaternion| on its entries, 1 elsewhere): a static gather, no scatter
    inv = jnp.concatenate([jnp.ones(1, q.dtype), 1 / jnp.sqrt(jax.lax.stop_gradient(n2))])
    return q * inv[owner]

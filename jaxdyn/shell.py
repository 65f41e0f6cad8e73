"""The public shell: what every public function ``f(model, ...)`` of jaxdyn does around its
algorithm, declared by :func:`public` next to the function.

* **Types and shapes** raise at trace time: ``TypeError`` for a wrong model type (a
  :class:`jaxdyn.clusters.ClusterModel` given to a tree algorithm names the cluster function to
  use instead: :func:`check_model`), ``ValueError`` naming the function, the argument and the
  expected size (:func:`as_array`). :func:`prepare` is the common start of the algorithms: the
  model's type, ``q``'s shape, the working dtype, the quaternions of ``q`` (checked and
  normalised: :func:`check_quaternions`), the model cast to the dtype.
* **Values** are checked inside the traced program (:mod:`jaxdyn.value_checks`).
* **Eager calls** run as one compiled program (:mod:`jaxdyn.eager`).
* **Batches**: a function's chunk policy (``words=``) makes ``jax.vmap`` on the CPU evaluate
  the batch in cache-sized chunks (:func:`jaxdyn.batching.batched`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

import jax
import jax.numpy as jnp
import numpy as np

from . import batching, joints, value_checks
from . import eager as eager_layer
from .model.model import Model

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

__all__ = [
    "as_array",
    "check_model",
    "check_model_dtype",
    "check_quaternions",
    "common_dtype",
    "default_float",
    "prepare",
    "public",
]


P = ParamSpec("P")
R = TypeVar("R")


def public(
    name: str, words: Callable | None = None, eager: bool | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorator of jaxdyn's public functions ``f(model, ...)``.

    * the model must be a :class:`jaxdyn.Model` (:func:`check_model`: a ``TypeError`` naming
      the cluster function for a :class:`jaxdyn.clusters.ClusterModel`);
    * called outside any trace (eagerly), or under transformations evaluated eagerly
      (:func:`jaxdyn.eager.is_eager`: ``jax.jacfwd``, ``jax.grad``, ``jax.vmap`` outside
      ``jax.jit``), a function with ``eager`` (default: those with ``words``; functions
      returning arrays, or named tuples of them, alone) runs as one compiled program
      (:func:`jaxdyn.eager.compiled`; the transformation then applies to it), and a failed
      value check raises :class:`jaxdyn.CheckError` with the check's message; under a staging
      trace (``jax.jit``, a loop body) the function runs as is (the error surfaces where the
      compiled program runs, see :mod:`jaxdyn.value_checks`);
    * ``words`` is the function's chunk policy, declared next to it: with it, ``jax.vmap``
      on the CPU evaluates the batch in cache-sized chunks (:func:`jaxdyn.batching.batched`),
      ``words(model, itemsize)`` estimating the numbers one sample keeps live, from which the
      chunk size is chosen (:func:`jaxdyn.batching.auto_chunk`; ``0``: one ``vmap``). The
      wrapper keeps it as ``chunk_words`` (``None`` without).
    """
    compile_eagerly = words is not None if eager is None else eager

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        # (batching.batched keeps fn's signature: functools.wraps)
        chunked = cast("Callable[P, R]", batching.batched(fn, words)) if words is not None else fn
        run = eager_layer.dispatch(chunked, fn, compile_eagerly)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            check_model(name, args[0] if args else kwargs.get("model"))
            return run(*args, **kwargs)

        wrapper.__dict__["chunk_words"] = words  # (an attribute of the function object)
        return wrapper

    return decorate


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


def check_model(fn: str, model: object) -> None:
    """``TypeError`` unless ``model`` is a :class:`jaxdyn.Model`; a
    :class:`jaxdyn.clusters.ClusterModel` gets the name of the cluster function to use."""
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
def as_array(fn: str, name: str, x: Any, shape: Sequence[tuple[str, int]], model: Any) -> Array:
    """Convert ``x`` (an array or a nested sequence of numbers) to an array and check its
    shape; ``shape`` names its sizes, e.g. ``(("nq", 13),)``; ``model`` (a
    :class:`jaxdyn.Model` or a cluster model) is named in the message."""
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


def default_float() -> np.dtype:
    """The default floating dtype: float64 with ``jax_enable_x64``, float32 otherwise."""
    return jax.dtypes.canonicalize_dtype(jnp.float64)


def common_dtype(*xs: ArrayLike | None, model: Any = None) -> np.dtype:
    """The floating (or complex) dtype an algorithm runs in: the promoted dtype of the
    floating inputs; integer and boolean inputs are promoted to the model's floating dtype
    (``model`` given) or to the default float dtype (float64 under ``jax_enable_x64``), not
    to float32."""
    given = [x for x in xs if x is not None]
    floats = [jnp.asarray(x).dtype for x in given if _is_float(jnp.asarray(x).dtype)]
    if floats:
        return jnp.result_type(*floats)
    if model is not None and _is_float(model.mass.dtype):
        return jnp.dtype(model.mass.dtype)
    return default_float()


def check_model_dtype(fn: str, model: Model, dtype: DTypeLike) -> None:
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


def check_quaternions(fn: str, model: Model, q: Array, tol: float = 1e-3, hint: str = "") -> Array:
    """Check and normalise the quaternions of ``q`` (spherical / free joints).

    :func:`jaxdyn.value_checks.error_if` (value checks on) a quaternion's squared norm
    differs from 1 by more than ``tol`` or is not finite (NaN; ``hint`` is appended to the
    message: what the caller knows of where such a ``q`` comes from); then every quaternion is
    divided by its norm, so the algorithms see unit quaternions even within the tolerance (a
    quaternion with ``|q|^2 = 1.0005`` would otherwise scale rotation matrices by 1.0005 and
    ``aba`` by 2.5e-3).

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
    if value_checks.enabled() and not jnp.issubdtype(q.dtype, jnp.complexfloating):
        err = jnp.abs(n2 - 1)
        q = value_checks.error_if(
            q,
            jnp.any(~(err <= tol)),
            f"{fn}: a quaternion in q is not of unit norm (tolerance {tol}) or not finite{hint}",
        )
        quats = q[idx]
    # q * (1 / |quaternion| on its entries, 1 elsewhere): a static gather, no scatter
    inv = jnp.concatenate([jnp.ones(1, q.dtype), 1 / jnp.sqrt(jax.lax.stop_gradient(n2))])
    return q * inv[owner]


def prepare(
    model: Model, fn: str, q: ArrayLike, *others: ArrayLike | None
) -> tuple[Model, Array, np.dtype]:
    """The common start of the algorithms: check the model's type, shape-check ``q``, choose
    the working dtype of the inputs (integer / boolean inputs take the model's float dtype),
    refuse float64 with a model whose parameters were rounded to float32 at load time, check
    and normalise the quaternions of ``q`` (:func:`check_quaternions`) and cast the model to
    the dtype. ``fn`` names the function in the messages; ``others`` are the other inputs
    (arrays or ``None``) whose dtypes join the choice. Returns ``(model, q, dtype)``."""
    check_model(fn, model)
    q = as_array(fn, "q", q, (("nq", model.nq),), model)
    dtype = common_dtype(q, *others, model=model)
    check_model_dtype(fn, model, dtype)
    q = check_quaternions(fn, model, q.astype(dtype))
    return model.astype(dtype), q, dtype

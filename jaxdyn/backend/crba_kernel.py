"""CRBA and Minv as C kernels on the CPU (``jaxdyn_crba`` and ``jaxdyn_minv`` in
``_kernels.c``, the algorithms in ``_crba_kernel.h`` and ``_minv_kernel.h``): JAX primitives
whose CPU lowering calls the kernel, and whose other lowerings, batches of models and
derivatives use the caller's XLA form of the same algorithm
(:func:`jaxdyn.algorithms.crba.crba_world`, :func:`jaxdyn.algorithms.minv.minv_world`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import jax
import jax.core
import jax.extend
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching, mlir

from .. import config
from . import ffi

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from jax import Array
    from jax.typing import ArrayLike, DTypeLike


# ``model``: a jaxdyn.Model, typed Any (the backend sits below jaxdyn.model: test_architecture)
def kernel_usable(model: Any, dtype: DTypeLike) -> bool:
    """Whether :func:`crba` computes ``M`` by :func:`crba_kernel`: on the CPU (the default
    backend), with the switch ``cpu_kernels`` on, float32 or float64, and jaxdyn's C kernels
    compiled or being compiled (:func:`jaxdyn.backend.ffi.kernels_expected`: the trace does
    not wait for a build under way; the lowering does, and takes XLA's code should it fail)."""
    return (
        bool(config.get("cpu_kernels"))
        and jnp.dtype(dtype) in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64))
        and model.nb > 0
        and jax.default_backend() == "cpu"
        and ffi.kernels_expected()
    )


@functools.lru_cache(maxsize=64)
def _kernel_topology(topo) -> np.ndarray:
    """The kernel's int32 topology operand (see ``jaxdyn_crba`` in ``_kernels.c``)."""
    t = topo
    r, c = np.nonzero(np.triu(t.dof_ancestor))  # r <= c, r's body supports c's
    parts = [[t.nb, t.nq, t.nv, len(r)], t.kind, t.parent, t.q_start, t.v_start, r, c]
    return np.concatenate([np.asarray(x, np.int64) for x in parts]).astype(np.int32)


def _depth_first(parent: np.ndarray) -> np.ndarray:
    """The bodies in depth-first pre-order (each body's subtree right after it)."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(np.asarray(parent).tolist()):
        children.setdefault(int(p), []).append(i)
    order, stack = [], list(reversed(children.get(-1, [])))
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(reversed(children.get(i, [])))
    return np.asarray(order, np.int64)


@functools.lru_cache(maxsize=64)
def _minv_topology(topo) -> np.ndarray:
    """The Minv kernel's int32 topology operand: CRBA's, then the bodies in depth-first order
    (see ``jaxdyn_minv`` in ``_kernels.c``)."""
    order = _depth_first(topo.parent)
    return np.concatenate([_kernel_topology(topo), order.astype(np.int32)])


@functools.lru_cache(maxsize=256)
def armature_leaf(tree_def: Any) -> int | None:
    """The index of a model's armature among its leaves (``tree_def``: the model's), ``None``
    where the model has none."""
    i = jax.tree_util.tree_unflatten(tree_def, list(range(tree_def.num_leaves))).armature
    return i if isinstance(i, int) else None


def armature_rows(tree_def: Any, leaves: Sequence[Any]) -> bool:
    """Whether the model's armature among ``leaves`` is a row per sample (``(..., nv)``, the
    samples' batch dimensions first; see :func:`batched_leaves`)."""
    i = armature_leaf(tree_def)
    return i is not None and jnp.ndim(leaves[i]) > 1


def batched_leaves(
    tree_def: Any,
    leaves: Sequence[Any],
    dims: Sequence[int | None],
    batch_shape: tuple[int, ...],
) -> list | None:
    """The model's ``leaves`` for a kernel's call on samples of ``batch_shape`` (their batch
    dimensions, first) under ``jax.vmap`` (``dims``: the leaves' batch dimensions): as they
    are where no leaf is batched and the armature is the model's; with the armature as a row
    per sample, ``batch_shape + (nv,)``, where it is the one leaf batched or such rows
    already (a simulation step's ``M + h D``, whose joint part is an armature that depends
    on the state: the kernels read a row per sample); ``None`` where another leaf is batched
    (a batch of models: XLA's code)."""
    i = armature_leaf(tree_def)
    if any(d is not None for k, d in enumerate(dims) if k != i):
        return None
    out = list(leaves)
    if i is None:
        return out
    d = dims[i]
    if d is None and jnp.ndim(leaves[i]) == 1:
        return out
    arm = leaves[i][None] if d is None else jnp.moveaxis(leaves[i], d, 0)
    target = (*batch_shape, arm.shape[-1])
    arm = arm.reshape(arm.shape[:1] + (1,) * (len(target) - arm.ndim) + arm.shape[1:])
    out[i] = jnp.broadcast_to(arm, target)
    return out


def over_armature_rows(
    f: Callable[..., Any], tree_def: Any, leaves: Sequence[Any], samples: Sequence[Array]
) -> Any:
    """``f(model, *samples)`` for samples with any leading batch axes, the model's armature
    among ``leaves`` a row per sample where :func:`armature_rows` (else the model's)."""
    i = armature_leaf(tree_def) if armature_rows(tree_def, leaves) else None

    def one(*xs):
        own = list(leaves)
        if i is not None:  # the sample's row of armature first
            own[i], xs = xs[0], xs[1:]
        return f(jax.tree_util.tree_unflatten(tree_def, own), *xs)

    g = one
    for _ in range(samples[0].ndim - 1):
        g = jax.vmap(g)
    return g(*samples) if i is None else g(leaves[i], *samples)


def _xla(tree_def, xla, q, *leaves):
    """The caller's XLA CRBA ``xla(model, q)`` of the prepared ``q`` (any leading batch
    axes; the armature a row per sample where :func:`armature_rows`)."""
    return over_armature_rows(xla, tree_def, leaves, (q,))


def _kernel_call(tree_def, target, q, *leaves):
    """The call of the C kernel ``target`` (``jaxdyn_crba`` or ``jaxdyn_minv``, any leading
    batch axes of ``q``)."""
    model = jax.tree_util.tree_unflatten(tree_def, leaves)
    t, dt = model.topo, q.dtype
    # no armature: an empty operand (zeros would be a kernel of their own, a broadcast)
    arm = model.armature if model.armature is not None else np.zeros(0, dt)
    ops = (
        q,
        model.Xtree_R.reshape(t.nb, 9),
        model.Xtree_p,
        model.dof_axis,  # the kernel reads each body's first axis (row v_start) itself
        model.mass,
        model.com,
        model.inertia.reshape(t.nb, 9),
        arm,
    )
    out = jax.ShapeDtypeStruct(q.shape[:-1] + (t.nv, t.nv), dt)
    call = jax.ffi.ffi_call(target, out)
    topology = _minv_topology(t) if target == ffi.MINV_TARGET else _kernel_topology(t)
    return call(*(x.astype(dt) for x in ops), jnp.asarray(topology))


crba_p = jax.extend.core.Primitive("jaxdyn_crba")
minv_p = jax.extend.core.Primitive("jaxdyn_minv")
_TARGETS = {crba_p: ffi.CRBA_TARGET, minv_p: ffi.MINV_TARGET}


def _crba_abstract(q, *leaves, tree_def, xla):
    model = jax.tree_util.tree_unflatten(tree_def, leaves)
    return jax.core.ShapedArray(q.shape[:-1] + (model.nv, model.nv), q.dtype)


def _register(prim) -> None:
    """The rules of a kernel's primitive (``crba_p``, ``minv_p``): the kernel on the CPU, the
    caller's XLA form ``xla`` elsewhere, for batches of models and for derivatives."""
    target = _TARGETS[prim]

    def impl(q, *leaves, tree_def, xla):
        if getattr(jax.config, "jax_disable_jit"):  # noqa: B009 (op by op: XLA's code, no program)
            return _xla(tree_def, xla, q, *leaves)
        return jax.jit(lambda *a: prim.bind(*a, tree_def=tree_def, xla=xla))(q, *leaves)

    def batch(args, dims, *, tree_def, xla):
        q, *leaves = args
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        qb = (
            jnp.broadcast_to(q, (size, *q.shape))
            if dims[0] is None
            else jnp.moveaxis(q, dims[0], 0)
        )
        own = batched_leaves(tree_def, leaves, dims[1:], qb.shape[:-1])
        if own is None:  # a batch of models: XLA's code, batched
            axes = tuple(dims)
            return jax.vmap(functools.partial(_xla, tree_def, xla), in_axes=axes)(*args), 0
        return prim.bind(qb, *own, tree_def=tree_def, xla=xla), 0

    def jvp(primals, tangents, *, tree_def, xla):
        # derivatives are XLA's code's (the kernel computes the same function), in the
        # operands whose tangents are not symbolically zero only (a model closed over has none)
        live = [i for i, t in enumerate(tangents) if type(t) is not ad.Zero]

        def f(*xs):
            full = list(primals)
            for i, x in zip(live, xs):
                full[i] = x
            return _xla(tree_def, xla, *full)

        return jax.jvp(f, tuple(primals[i] for i in live), tuple(tangents[i] for i in live))

    def lower_cpu(ctx, *args, tree_def, xla):
        # the kernel where the program may call jaxdyn's handlers (not under jax.export, not
        # in a program XLA partitions over devices) and the kernels compiled (this waits for
        # their build, which the trace did not), else XLA's code
        if not ffi._handler_call(ctx) or not ffi.kernels_available():
            return _lower_xla(ctx, *args, tree_def=tree_def, xla=xla)
        call = functools.partial(_kernel_call, tree_def, target)
        return mlir.lower_fun(call, multiple_results=False)(ctx, *args)

    prim.def_impl(impl)
    prim.def_abstract_eval(_crba_abstract)
    batching.primitive_batchers[prim] = batch
    ad.primitive_jvps[prim] = jvp
    mlir.register_lowering(prim, _lower_xla)
    mlir.register_lowering(prim, lower_cpu, platform="cpu")


def _lower_xla(ctx, *args, tree_def, xla):
    return mlir.lower_fun(functools.partial(_xla, tree_def, xla), multiple_results=False)(
        ctx, *args
    )


_register(crba_p)
_register(minv_p)


def crba_kernel(model: Any, q: ArrayLike, xla: Callable[[Any, Array], Array]) -> Array:
    """``M(q)`` of the prepared ``q`` (:func:`jaxdyn.shell.prepare`) by
    jaxdyn's C kernel on the CPU, ``xla(model, q)`` (the algorithm in XLA,
    :func:`jaxdyn.algorithms.crba.crba_world`) where the kernel cannot run and for derivatives.
    The kernel is the same algorithm as ``crba_world`` (world placements
    from the root out, each body's inertia about the world origin, composite inertias summed
    from the leaves in, ``M[r, c] = oS_r^T oIc oS_c`` for every coordinate ``r`` supporting
    ``c``), written in C (``_crba_kernel.h``) with one sample per vector lane (8 in float64,
    16 in float32), computing only the entries that are not structurally zero and writing each
    once into both triangles. XLA's code for this algorithm is bound by the instructions per
    entry of its dense ``nv x nv`` product and by one kernel per level of the tree, and
    stayed slower than Pinocchio's C++ on talos_full however it was arranged; the kernel is
    several times faster (``docs/design-measurements.md``; ``benchmarks/vs_cpp.py``).

    A primitive: under ``jax.vmap`` one call computes the whole batch (a batch of models takes XLA's
    code; an armature batched alone is read as a row per sample); its derivatives are those of
    ``xla`` (``jax.jvp`` of XLA's code); under ``jax.export``, in programs that XLA partitions over
    several devices and on other backends it is lowered as XLA's code.
    """
    leaves, tree_def = jax.tree_util.tree_flatten(model)
    return crba_p.bind(q, *leaves, tree_def=tree_def, xla=xla)


def minv_kernel(model: Any, q: ArrayLike, xla: Callable[[Any, Array], Array]) -> Array:
    """``M(q)^-1`` of the prepared ``q`` by jaxdyn's C kernel on the CPU (``jaxdyn_minv``,
    ``_minv_kernel.h``), ``xla(model, q)`` (:func:`jaxdyn.algorithms.minv.minv_world` on the
    world state) where the kernel cannot run and for derivatives, as :func:`crba_kernel`.

    The kernel is the analytic inverse of Carpentier 2018 (Pinocchio's ``computeMinverse``) in
    world coordinates, from CRBA's kernel's kinematics: articulated inertias and, per body, the
    rows ``Minv[J_i, subtree]`` with the forces on the subtree's columns inwards (one ``6 x nv``
    array shared by the pass), then ``Minv[J_i, c >= v_i] -= D^-1 U^T A_parent[:, c]`` and the
    accelerations ``A_i = A_parent + S_i Minv[J_i, :]`` outwards, in depth-first order; one
    sample per vector lane. XLA's sweeps carry every column a level can reach for each of its
    bodies and recompute small products per column inside its fused loops, which kept a single
    evaluation several times slower than ABA (``docs/performance.md``).
    """
    leaves, tree_def = jax.tree_util.tree_flatten(model)
    return minv_p.bind(q, *leaves, tree_def=tree_def, xla=xla)

"""ABA as a C kernel on the CPU (``jaxdyn_aba`` in ``_kernels.c``, the algorithm in
``_aba_kernel.h``): a JAX primitive whose CPU lowering calls the kernel, and whose other
lowerings, batches of models and derivatives use the caller's XLA form of the same algorithm
(:func:`jaxdyn.algorithms.aba.aba_world`), as :mod:`jaxdyn.backend.crba_kernel`'s.
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

from . import ffi
from .crba_kernel import _kernel_topology

if TYPE_CHECKING:
    from collections.abc import Callable

    from jax import Array
    from jax.typing import ArrayLike

#: the per-sample operands (``q``, ``v``, ``tau``, ``f_ext``) before the model's leaves
NSAMPLE = 4

aba_p = jax.extend.core.Primitive("jaxdyn_aba")


def _xla(tree_def, xla, has_fext, *args):
    """The caller's XLA ABA ``xla(model, q, v, tau, f_ext)`` of the per-sample operands, all
    with the same leading batch axes (``f_ext`` a placeholder unless ``has_fext``)."""
    samples, leaves = args[:NSAMPLE], args[NSAMPLE:]
    model = jax.tree_util.tree_unflatten(tree_def, leaves)

    def one(q, v, tau, f_ext):
        return xla(model, q, v, tau, f_ext if has_fext else None)

    f = one
    for _ in range(samples[0].ndim - 1):
        f = jax.vmap(f, in_axes=(0, 0, 0, 0 if has_fext else None))
    return f(*samples)


def _kernel_call(tree_def, has_fext, q, v, tau, f_ext, *leaves):
    """The call of ``jaxdyn_aba`` (any leading batch axes, the same on every sample operand)."""
    model = jax.tree_util.tree_unflatten(tree_def, leaves)
    t, dt = model.topo, q.dtype
    # absent armature / f_ext: empty operands (zeros would be a kernel of their own)
    arm = model.armature if model.armature is not None else np.zeros(0, dt)
    ops = (
        q,
        v,
        tau,
        f_ext if has_fext else np.zeros(0, dt),
        model.Xtree_R.reshape(t.nb, 9),
        model.Xtree_p,
        model.dof_axis,
        model.mass,
        model.com,
        model.inertia.reshape(t.nb, 9),
        arm,
        model.gravity,
    )
    out = jax.ShapeDtypeStruct(q.shape[:-1] + (t.nv,), dt)
    call = jax.ffi.ffi_call(ffi.ABA_TARGET, out)
    return call(*(jnp.asarray(x).astype(dt) for x in ops), jnp.asarray(_kernel_topology(t)))


def _abstract(q, v, tau, f_ext, *leaves, tree_def, xla, has_fext):
    return jax.core.ShapedArray(v.shape, v.dtype)


def _impl(*args, tree_def, xla, has_fext):
    # op by op, as asked (a jit of the bind would recurse)
    if getattr(jax.config, "jax_disable_jit"):  # noqa: B009 (set at run time)
        return _xla(tree_def, xla, has_fext, *args)
    bind = functools.partial(aba_p.bind, tree_def=tree_def, xla=xla, has_fext=has_fext)
    return jax.jit(bind)(*args)


def _batch(args, dims, *, tree_def, xla, has_fext):
    params = dict(tree_def=tree_def, xla=xla, has_fext=has_fext)
    if any(d is not None for d in dims[NSAMPLE:]):  # a batch of models: XLA's code, batched
        f = functools.partial(_xla, tree_def, xla, has_fext)
        return jax.vmap(f, in_axes=tuple(dims))(*args), 0
    n = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    samples = [
        jnp.moveaxis(a, d, 0) if d is not None else jnp.broadcast_to(a, (n,) + a.shape)
        for a, d in zip(args[:NSAMPLE], dims[:NSAMPLE])
    ]
    if not has_fext:  # the placeholder stays unbatched
        samples[3] = args[3]
    return aba_p.bind(*samples, *args[NSAMPLE:], **params), 0


def _jvp(primals, tangents, *, tree_def, xla, has_fext):
    # derivatives are XLA's code's (the kernel computes the same function), in the operands
    # whose tangents are not symbolically zero only (a model closed over has none)
    live = [i for i, t in enumerate(tangents) if type(t) is not ad.Zero]

    def f(*xs):
        full = list(primals)
        for i, x in zip(live, xs):
            full[i] = x
        return _xla(tree_def, xla, has_fext, *full)

    return jax.jvp(f, tuple(primals[i] for i in live), tuple(tangents[i] for i in live))


def _lower_xla(ctx, *args, tree_def, xla, has_fext):
    f = functools.partial(_xla, tree_def, xla, has_fext)
    return mlir.lower_fun(f, multiple_results=False)(ctx, *args)


def _lower_cpu(ctx, *args, tree_def, xla, has_fext):
    # the kernel where the program may call jaxdyn's handlers and the kernels are compiled
    # (as crba_kernel's lowering), else XLA's code
    if not ffi._handler_call(ctx) or not ffi.kernels_available():
        return _lower_xla(ctx, *args, tree_def=tree_def, xla=xla, has_fext=has_fext)
    call = functools.partial(_kernel_call, tree_def, has_fext)
    return mlir.lower_fun(call, multiple_results=False)(ctx, *args)


aba_p.def_impl(_impl)
aba_p.def_abstract_eval(_abstract)
batching.primitive_batchers[aba_p] = _batch
ad.primitive_jvps[aba_p] = _jvp
mlir.register_lowering(aba_p, _lower_xla)
mlir.register_lowering(aba_p, _lower_cpu, platform="cpu")


def aba_kernel(
    model: Any,
    q: ArrayLike,
    v: ArrayLike,
    tau: ArrayLike,
    f_ext: ArrayLike | None,
    xla: Callable[..., Array],
) -> Array:
    """``qdd`` of the prepared ``q`` (:func:`jaxdyn.shell.prepare`), ``v``, ``tau`` and
    ``f_ext`` (``(nb, 6)`` body-frame forces or ``None``) by jaxdyn's C kernel on the CPU,
    ``xla(model, q, v, tau, f_ext)`` (the algorithm in XLA,
    :func:`jaxdyn.algorithms.aba.aba_world`) where the kernel cannot run and for derivatives.

    The kernel is the articulated-body algorithm of Featherstone 2008, Table 7.1, in world
    coordinates from CRBA's kernel's kinematics (``_aba_kernel.h``): velocities, bias
    accelerations and forces outwards, articulated inertias and bias forces inwards,
    accelerations outwards, body by body with one sample per vector lane. XLA's code runs the
    same passes level by level, one batched kernel per level and pass, whose compile time and
    per-call overhead dominate a single evaluation (``docs/performance.md``).

    A primitive: under ``jax.vmap`` one call computes the whole batch (a batch of models takes
    XLA's code); its derivatives are those of ``xla`` (``jax.jvp`` of XLA's code); under
    ``jax.export``, in programs that XLA partitions over several devices and on other backends
    it is lowered as XLA's code.
    """
    leaves, tree_def = jax.tree_util.tree_flatten(model)
    has_fext = f_ext is not None
    dt = jnp.asarray(v).dtype
    fe = f_ext if has_fext else np.zeros(0, dt)
    return aba_p.bind(q, v, tau, fe, *leaves, tree_def=tree_def, xla=xla, has_fext=has_fext)

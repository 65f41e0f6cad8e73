"""RNEA as a C kernel on the CPU (``jaxdyn_rnea`` in ``_kernels.c``, the algorithm in
``_rnea_kernel.h``): a JAX primitive whose CPU lowering calls the kernel, and whose other
lowerings, batches of models and derivatives use the caller's XLA form of the same algorithm
(:func:`jaxdyn.algorithms.rnea.joint_forces`), as :mod:`jaxdyn.backend.crba_kernel` does for
CRBA and Minv.
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
from .crba_kernel import kernel_usable as kernel_usable

if TYPE_CHECKING:
    from collections.abc import Callable

    from jax import Array
    from jax.typing import ArrayLike


@functools.lru_cache(maxsize=64)
def _topology(topo) -> np.ndarray:
    """The kernel's int32 topology operand: ``jaxdyn_crba``'s without pairs (``_kernels.c``)."""
    t = topo
    parts = [[t.nb, t.nq, t.nv, 0], t.kind, t.parent, t.q_start, t.v_start]
    return np.concatenate([np.asarray(x, np.int64) for x in parts]).astype(np.int32)


def _split(args, n_samples):
    """``(samples, leaves)``: the per-sample operands (``q, qd, qdd`` and ``f_ext`` where
    given) and the model's leaves."""
    return list(args[:n_samples]), list(args[n_samples:])


def _xla(tree_def, xla, n_samples, *args):
    """The caller's XLA RNEA ``xla(model, q, qd, qdd, f_ext)`` of the prepared operands (any
    leading batch axes, the same on every per-sample operand)."""
    samples, leaves = _split(args, n_samples)
    model = jax.tree_util.tree_unflatten(tree_def, leaves)

    def one(q, qd, qdd, *fext):
        return xla(model, q, qd, qdd, fext[0] if fext else None)

    f = one
    for _ in range(samples[0].ndim - 1):
        f = jax.vmap(f)
    return f(*samples)


def _kernel_call(tree_def, n_samples, *args):
    """The call of ``jaxdyn_rnea`` (any leading batch axes)."""
    samples, leaves = _split(args, n_samples)
    model = jax.tree_util.tree_unflatten(tree_def, leaves)
    q, qd, qdd = samples[:3]
    t, dt = model.topo, q.dtype
    fext = samples[3] if n_samples == 4 else np.zeros(0, dt)  # none: an empty operand
    arm = model.armature if model.armature is not None else np.zeros(0, dt)
    ops = (
        q,
        qd,
        qdd,
        fext,
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
    call = jax.ffi.ffi_call(ffi.RNEA_TARGET, out)
    return call(*(jnp.asarray(x).astype(dt) for x in ops), jnp.asarray(_topology(t)))


rnea_p = jax.extend.core.Primitive("jaxdyn_rnea")


def _abstract(*args, tree_def, xla, n_samples):
    q = args[0]
    model = jax.tree_util.tree_unflatten(tree_def, list(args[n_samples:]))
    return jax.core.ShapedArray(q.shape[:-1] + (model.nv,), q.dtype)


def _impl(*args, tree_def, xla, n_samples):
    if jax.config.jax_disable_jit:  # op by op (jax.disable_jit): XLA's code, not a program
        return _xla(tree_def, xla, n_samples, *args)
    bind = functools.partial(rnea_p.bind, tree_def=tree_def, xla=xla, n_samples=n_samples)
    return jax.jit(bind)(*args)


def _batch(args, dims, *, tree_def, xla, n_samples):
    params = {"tree_def": tree_def, "xla": xla, "n_samples": n_samples}
    if any(d is not None for d in dims[n_samples:]):  # a batch of models: XLA's code
        f = functools.partial(_xla, tree_def, xla, n_samples)
        return jax.vmap(f, in_axes=tuple(dims))(*args), 0
    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    samples = [
        jnp.broadcast_to(x, (size, *x.shape)) if d is None else jnp.moveaxis(x, d, 0)
        for x, d in zip(args[:n_samples], dims[:n_samples])
    ]
    return rnea_p.bind(*samples, *args[n_samples:], **params), 0


def _jvp(primals, tangents, *, tree_def, xla, n_samples):
    # derivatives are XLA's code's (the kernel computes the same function), in the operands
    # whose tangents are not symbolically zero only (a model closed over has none)
    live = [i for i, t in enumerate(tangents) if type(t) is not ad.Zero]

    def f(*xs):
        full = list(primals)
        for i, x in zip(live, xs):
            full[i] = x
        return _xla(tree_def, xla, n_samples, *full)

    return jax.jvp(f, tuple(primals[i] for i in live), tuple(tangents[i] for i in live))


def _lower_xla(ctx, *args, tree_def, xla, n_samples):
    f = functools.partial(_xla, tree_def, xla, n_samples)
    return mlir.lower_fun(f, multiple_results=False)(ctx, *args)


def _lower_cpu(ctx, *args, tree_def, xla, n_samples):
    # the kernel where the program may call jaxdyn's handlers and the kernels are compiled
    # (as crba_kernel's lowering), else XLA's code
    if not ffi._handler_call(ctx) or not ffi.kernels_available():  # noqa: SLF001
        return _lower_xla(ctx, *args, tree_def=tree_def, xla=xla, n_samples=n_samples)
    call = functools.partial(_kernel_call, tree_def, n_samples)
    return mlir.lower_fun(call, multiple_results=False)(ctx, *args)


rnea_p.def_impl(_impl)
rnea_p.def_abstract_eval(_abstract)
batching.primitive_batchers[rnea_p] = _batch
ad.primitive_jvps[rnea_p] = _jvp
mlir.register_lowering(rnea_p, _lower_xla)
mlir.register_lowering(rnea_p, _lower_cpu, platform="cpu")


def rnea_kernel(
    model: Any,
    q: ArrayLike,
    qd: ArrayLike,
    qdd: ArrayLike,
    f_ext: ArrayLike | None,
    xla: Callable[[Any, Array, Array, Array, Array | None], Array],
) -> Array:
    """``tau`` of RNEA (Featherstone 2008, Alg. 5.1 / Table 5.1) for the prepared ``q``
    (:func:`jaxdyn.shell.prepare`), ``qd``, ``qdd`` and ``f_ext (nb, 6)`` or ``None``, by
    jaxdyn's C kernel on the CPU, ``xla(model, q, qd, qdd, f_ext)`` (the algorithm in XLA,
    :func:`jaxdyn.algorithms.rnea.joint_forces`) where the kernel cannot run and for
    derivatives.

    The kernel is the world-coordinate form of :func:`jaxdyn.algorithms.rnea.rnea_world`
    (Featherstone 2008, Sec. 5.3) on the kinematics of CRBA's kernel (``_crba_kernel.h``):
    velocities and accelerations outwards, each body's force about the world origin, the
    subtree forces inwards and ``tau = S^T F``, one sample per vector lane (8 in float64, 16
    in float32). A single evaluation is one call instead of XLA's kernels per level of the
    tree, and its compile is one custom call (``docs/performance.md``).

    A primitive: under ``jax.vmap`` one call computes the whole batch (a batch of models takes
    XLA's code); its derivatives are those of ``xla`` (``jax.jvp`` of XLA's code); under
    ``jax.export``, in programs that XLA partitions over several devices and on other backends
    it is lowered as XLA's code.
    """
    leaves, tree_def = jax.tree_util.tree_flatten(model)
    samples = tuple(
        jnp.asarray(x) for x in ((q, qd, qdd) if f_ext is None else (q, qd, qdd, f_ext))
    )
    return rnea_p.bind(*samples, *leaves, tree_def=tree_def, xla=xla, n_samples=len(samples))

"""The primitive of jaxdyn's dynamics kernels on the CPU (``jaxdyn_rnea``, ``jaxdyn_aba`` and
``jaxdyn_rnea_derivatives`` in ``_kernels.c``, whose operands are the same: ``q``, ``qd``, a
third per-sample vector, ``f_ext`` and the model): its CPU lowering calls the kernel, and its
other lowerings, batches of models and derivatives use the caller's XLA form of the same
algorithm, as :mod:`jaxdyn.backend.crba_kernel`'s. :mod:`jaxdyn.backend.rnea_kernel`,
:mod:`jaxdyn.backend.aba_kernel` and :mod:`jaxdyn.backend.rnea_derivatives_kernel` each hold
one.
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
from .crba_kernel import batched_leaves, over_armature_rows

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


def _xla(tree_def, xla, n_samples, *args):
    """The caller's XLA form ``xla(model, q, qd, x, f_ext)`` of the prepared operands (any
    leading batch axes, the same on every per-sample operand: ``q, qd, x`` and ``f_ext``
    where given, ``n_samples`` of them), the model's leaves after them (its armature a row
    per sample where :func:`~jaxdyn.backend.crba_kernel.armature_rows`)."""
    samples, leaves = args[:n_samples], args[n_samples:]

    def one(model, q, qd, x, *fext):
        return xla(model, q, qd, x, fext[0] if fext else None)

    return over_armature_rows(one, tree_def, leaves, samples)


class DynamicsKernel:
    """A JAX primitive calling the C kernel ``target`` (``run_dynamics`` in ``_kernels.c``)
    on the CPU: under ``jax.vmap`` one call computes the whole batch (a batch of models takes XLA's
    code; an armature batched alone is read as a row per sample); its derivatives are ``jax.jvp`` of
    XLA's code; under ``jax.export``, in programs that XLA partitions over several devices, under
    ``jax.disable_jit`` and on other backends it is XLA's code."""

    def __init__(self, target: str, matrices: int = 0, name: str | None = None) -> None:
        """``matrices``: one result ``(..., nv)`` (0), or that many ``(..., nv, nv)`` (a
        tuple; the caller's XLA form returns the same; a kernel may take fewer than its
        most, ``jaxdyn_rnea_derivatives`` two where M is not wanted); ``name``: the
        primitive's, where it is not ``target`` (two primitives of one kernel)."""
        self.target = target
        self.matrices = matrices
        p = self.primitive = jax.extend.core.Primitive(name or target)
        p.multiple_results = matrices > 0
        p.def_impl(self._impl)
        p.def_abstract_eval(self._abstract)
        batching.primitive_batchers[p] = self._batch
        ad.primitive_jvps[p] = self._jvp
        mlir.register_lowering(p, self._lower_xla)
        mlir.register_lowering(p, self._lower_cpu, platform="cpu")

    def __call__(
        self,
        model: Any,
        q: ArrayLike,
        qd: ArrayLike,
        x: ArrayLike,
        f_ext: ArrayLike | None,
        xla: Callable[[Any, Array, Array, Array, Array | None], Any],
    ) -> Any:
        leaves, tree_def = jax.tree_util.tree_flatten(model)
        samples = tuple(
            jnp.asarray(a) for a in ((q, qd, x) if f_ext is None else (q, qd, x, f_ext))
        )
        out = self.primitive.bind(
            *samples, *leaves, tree_def=tree_def, xla=xla, n_samples=len(samples)
        )
        return tuple(out) if self.matrices else out

    def _kernel_call(self, tree_def, n_samples, *args):
        """The call of the kernel (any leading batch axes)."""
        samples, leaves = args[:n_samples], args[n_samples:]
        model = jax.tree_util.tree_unflatten(tree_def, leaves)
        q = samples[0]
        t, dt = model.topo, q.dtype
        # absent f_ext / armature: empty operands (zeros would be a kernel of their own)
        fext = samples[3] if n_samples == 4 else np.zeros(0, dt)
        arm = model.armature if model.armature is not None else np.zeros(0, dt)
        ops = (
            *samples[:3],
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
        if self.matrices:
            out = (jax.ShapeDtypeStruct(q.shape[:-1] + (t.nv, t.nv), dt),) * self.matrices
        else:
            out = jax.ShapeDtypeStruct(q.shape[:-1] + (t.nv,), dt)
        call = jax.ffi.ffi_call(self.target, out)
        return call(*(jnp.asarray(a).astype(dt) for a in ops), jnp.asarray(_topology(t)))

    def _abstract(self, *args, tree_def, xla, n_samples):
        q = args[0]
        nv = jax.tree_util.tree_unflatten(tree_def, list(args[n_samples:])).nv
        if self.matrices:
            return [jax.core.ShapedArray(q.shape[:-1] + (nv, nv), q.dtype)] * self.matrices
        return jax.core.ShapedArray(q.shape[:-1] + (nv,), q.dtype)

    def _impl(self, *args, tree_def, xla, n_samples):
        # op by op, as asked (a jit of the bind would recurse)
        if getattr(jax.config, "jax_disable_jit"):  # noqa: B009 (set at run time)
            return _xla(tree_def, xla, n_samples, *args)
        bind = functools.partial(
            self.primitive.bind, tree_def=tree_def, xla=xla, n_samples=n_samples
        )
        return jax.jit(bind)(*args)

    def _batch(self, args, dims, *, tree_def, xla, n_samples):
        params = {"tree_def": tree_def, "xla": xla, "n_samples": n_samples}
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        samples = [
            jnp.broadcast_to(a, (size, *a.shape)) if d is None else jnp.moveaxis(a, d, 0)
            for a, d in zip(args[:n_samples], dims[:n_samples])
        ]
        leaves = batched_leaves(tree_def, args[n_samples:], dims[n_samples:], samples[0].shape[:-1])
        if leaves is None:  # a batch of models: XLA's code
            f = functools.partial(_xla, tree_def, xla, n_samples)
            out = jax.vmap(f, in_axes=tuple(dims))(*args)
            return (list(out), [0] * self.matrices) if self.matrices else (out, 0)
        out = self.primitive.bind(*samples, *leaves, **params)
        return (out, [0] * self.matrices) if self.matrices else (out, 0)

    def _jvp(self, primals, tangents, *, tree_def, xla, n_samples):
        # derivatives are XLA's code's (the kernel computes the same function), in the
        # operands whose tangents are not symbolically zero only (a model closed over has none)
        live = [i for i, t in enumerate(tangents) if type(t) is not ad.Zero]

        def f(*xs):
            full = list(primals)
            for i, a in zip(live, xs):
                full[i] = a
            return _xla(tree_def, xla, n_samples, *full)

        out, dout = jax.jvp(f, tuple(primals[i] for i in live), tuple(tangents[i] for i in live))
        return (list(out), list(dout)) if self.matrices else (out, dout)

    def _lower_xla(self, ctx, *args, tree_def, xla, n_samples):
        f = functools.partial(_xla, tree_def, xla, n_samples)
        return mlir.lower_fun(f, multiple_results=self.matrices > 0)(ctx, *args)

    def _lower_cpu(self, ctx, *args, tree_def, xla, n_samples):
        # the kernel where the program may call jaxdyn's handlers and the kernels are
        # compiled (as crba_kernel's lowering), else XLA's code
        if not ffi._handler_call(ctx) or not ffi.kernels_available():  # noqa: SLF001
            return self._lower_xla(ctx, *args, tree_def=tree_def, xla=xla, n_samples=n_samples)
        call = functools.partial(self._kernel_call, tree_def, n_samples)
        return mlir.lower_fun(call, multiple_results=self.matrices > 0)(ctx, *args)

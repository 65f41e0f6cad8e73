"""ABA as a C kernel on the CPU (``jaxdyn_aba`` in ``_kernels.c``, the algorithm in
``_aba_kernel.h``): a JAX primitive whose CPU lowering calls the kernel, and whose other
lowerings, batches of models and derivatives use the caller's XLA form of the same algorithm
(:func:`jaxdyn.algorithms.aba.aba_world`), as :mod:`jaxdyn.backend.crba_kernel`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import ffi
from .dynamics_kernel import DynamicsKernel

if TYPE_CHECKING:
    from collections.abc import Callable

    from jax import Array
    from jax.typing import ArrayLike

_KERNEL = DynamicsKernel(ffi.ABA_TARGET)


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

    A primitive: under ``jax.vmap`` one call computes the whole batch (a batch of models takes XLA's
    code; an armature batched alone is read as a row per sample); its derivatives are those of
    ``xla`` (``jax.jvp`` of XLA's code); under ``jax.export``, in programs that XLA partitions over
    several devices and on other backends it is lowered as XLA's code.
    """
    return _KERNEL(model, q, v, tau, f_ext, xla)

"""RNEA as a C kernel on the CPU (``jaxdyn_rnea`` in ``_kernels.c``, the algorithm in
``_rnea_kernel.h``): a JAX primitive whose CPU lowering calls the kernel, and whose other
lowerings, batches of models and derivatives use the caller's XLA form of the same algorithm
(:func:`jaxdyn.algorithms.rnea.joint_forces`), as :mod:`jaxdyn.backend.crba_kernel` does for
CRBA and Minv.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import ffi
from .dynamics_kernel import DynamicsKernel

if TYPE_CHECKING:
    from collections.abc import Callable

    from jax import Array
    from jax.typing import ArrayLike

_KERNEL = DynamicsKernel(ffi.RNEA_TARGET)


def rnea_kernel(
    model: Any,
    q: ArrayLike,
    qd: ArrayLike,
    qdd: ArrayLike,
    f_ext: ArrayLike | None,
    xla: Callable[..., Array],
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

    A primitive: under ``jax.vmap`` one call computes the whole batch (a batch of models takes XLA's
    code; an armature batched alone is read as a row per sample); its derivatives are those of
    ``xla`` (``jax.jvp`` of XLA's code); under ``jax.export``, in programs that XLA partitions over
    several devices and on other backends it is lowered as XLA's code.
    """
    return _KERNEL(model, q, qd, qdd, f_ext, xla)

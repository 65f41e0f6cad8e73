"""The partials of inverse dynamics (IDSVA) as a C kernel on the CPU
(``jaxdyn_rnea_derivatives`` in ``_kernels.c``, the algorithm in
``_rnea_derivatives_kernel.h``): a JAX primitive whose CPU lowering calls the kernel, and whose
other lowerings, batches of models and derivatives use the caller's XLA form of the same
algorithm (:func:`jaxdyn.derivatives.idsva.idsva_world`), as :mod:`jaxdyn.backend.rnea_kernel`
does for RNEA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import ffi
from .dynamics_kernel import DynamicsKernel

if TYPE_CHECKING:
    from collections.abc import Callable

    from jax import Array
    from jax.typing import ArrayLike

_KERNEL = DynamicsKernel(ffi.RNEA_DERIVATIVES_TARGET, matrices=3)
#: the same kernel called with two results: the partials without M, which it then skips
_STATE_KERNEL = DynamicsKernel(
    ffi.RNEA_DERIVATIVES_TARGET, matrices=2, name=ffi.RNEA_DERIVATIVES_TARGET + "_state"
)


def rnea_derivatives_kernel(
    model: Any,
    q: ArrayLike,
    qd: ArrayLike,
    qdd: ArrayLike,
    f_ext: ArrayLike | None,
    xla: Callable[..., tuple[Array, Array, Array]],
) -> tuple[Array, Array, Array]:
    """``(dtau_dq, dtau_dv, M)``, each ``(..., nv, nv)``: the partials of inverse
    dynamics by IDSVA (Singh, Russell & Wensing 2022, "Efficient Analytical Derivatives of
    Rigid-Body Dynamics Using Spatial Vector Algebra", Algorithm 1, Eqs. 28, 30-32, in ground
    coordinates; the partials of Carpentier & Mansard 2018) for the prepared ``q``
    (:func:`jaxdyn.shell.prepare`), ``qd``, ``qdd`` and ``f_ext (nb, 6)`` or ``None``, by
    jaxdyn's C kernel on the CPU, ``xla(model, q, qd, qdd, f_ext)`` (the same three in XLA,
    :func:`jaxdyn.derivatives.idsva.idsva_world`) where the kernel cannot run and for
    derivatives.

    The kernel is :func:`~jaxdyn.derivatives.idsva.idsva_world` in C on the kinematics and
    outward pass of RNEA's kernel (``_rnea_kernel.h``): per body the Coriolis factor and the
    subtree sums of inertia, Coriolis factor and force, per coordinate Algorithm 1's vectors,
    then the pairwise products over each coordinate's ancestors (the paper's loop, not XLA's
    masked dense products), one sample per vector lane (8 in float64, 16 in float32). The
    ``q`` partials are along the right increment of :func:`jaxdyn.integrate`, as XLA's.

    A primitive: under ``jax.vmap`` one call computes the whole batch (a batch of models takes XLA's
    code; an armature batched alone is read as a row per sample); its derivatives are those of
    ``xla`` (``jax.jvp`` of XLA's code); under ``jax.export``, in programs that XLA partitions over
    several devices and on other backends it is lowered as XLA's code.
    """
    return _KERNEL(model, q, qd, qdd, f_ext, xla)


def rnea_state_partials_kernel(
    model: Any,
    q: ArrayLike,
    qd: ArrayLike,
    qdd: ArrayLike,
    f_ext: ArrayLike | None,
    xla: Callable[..., tuple[Array, Array]],
) -> tuple[Array, Array]:
    """``(dtau_dq, dtau_dv)``: :func:`rnea_derivatives_kernel` without ``M``, for the callers
    that drop it (the forward-dynamics partials, which take ``M^-1`` from the Minv kernel; the
    JVP of inverse dynamics without an acceleration tangent). The same kernel called with two
    results, which then neither computes ``M`` (Algorithm 1's ``S_i . F1_j``) nor writes its
    ``nv x nv`` entries per sample; ``xla(model, q, qd, qdd, f_ext)`` returns the same two
    (:func:`jaxdyn.derivatives.idsva.idsva_world` with ``mass_matrix=False``)."""
    return _STATE_KERNEL(model, q, qd, qdd, f_ext, xla)

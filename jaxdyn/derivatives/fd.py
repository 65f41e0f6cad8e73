"""Partial derivatives of forward dynamics (FDSVA): IDSVA at the ABA solution, then ``-M^-1``.

Reference: Singh, Russell & Wensing 2022, §IV-E: with ``qdd = FD(q, qd, tau)`` and the inverse
dynamics partials evaluated at that ``qdd`` (Eq. 5, after Carpentier & Mansard 2018),

    ``dqdd/dq = -M^-1 dtau/dq``,  ``dqdd/dqd = -M^-1 dtau/dqd``,  ``dqdd/dtau = M^-1``.

Two ways to apply ``M^-1`` (Table II, "FDSVA"):

* **DMM** (direct matrix multiply): form ``M^-1`` (Carpentier 2018's ABA-based analytic
  inverse, ``O(n^2)``) and multiply: ``O(n^3)``, but one fat matrix product;
* **AZA** (ABA with zero inputs, Eqs. 33-34): ``ABA(q, qd=0, g=0, f_ext=0, tau=u) = M^-1 u``;
  the articulated inertias depend on ``q`` only, so they are computed once and each right-hand
  column costs one ``O(n)`` bias sweep and acceleration sweep (``O(n^2)`` in all). Here the
  columns are carried together as the trailing axis of the sweep (vectorised, not looped).

The paper reports the AZA/DMM crossover between ``n = 50`` and ``450`` depending on compiler;
:data:`AZA_MIN_NV` holds the one measured for this implementation (see
``benchmarks/derivatives.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp

from .. import batching, shell
from .._precision import full_precision
from ..algorithms import kinematics as kin
from ..algorithms.aba import (
    aba_passes,
    aba_solve,
    articulated_inertias,
    sweeps,
    velocity_terms,
    world_inertia_matrices,
)
from ..algorithms.minv import minv_kernel, minv_world
from ..algorithms.rnea import check_f_ext, external_forces_world
from ..backend import small_calls, xla_flags
from ..backend.crba_kernel import kernel_usable
from ..backend.sharding import explicit_context
from .idsva import chunk_words, id_state_partials, idsva_world

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..algorithms.aba import Inertias
    from ..algorithms.kinematics import WorldState
    from ..model.model import Model


#: ``method="auto"`` uses AZA from this many velocity coordinates on, DMM below. Set from the
#: DMM / AZA sweep over serial chains of ``benchmarks/derivatives.py`` (``benchmarks/RESULTS.md``,
#: "Derivatives"; ``docs/design-measurements.md``): AZA was not faster than DMM at the larger sizes
#: of the sweep (DMM's ``nv^3`` product is one fat kernel, AZA's sweeps are many small ones),
#: so the switch lies beyond the sweep.
AZA_MIN_NV = 128


def by_kernels(model: Model, dtype: DTypeLike) -> bool:
    """Whether the forward-dynamics partials (:func:`aba_derivatives_world`, ``jaxdyn.aba``'s
    analytic rule) take their pieces (``M^-1``; for DMM also ``qdd`` and the inverse dynamics
    partials) from jaxdyn's C kernels: where they run, not inside one XLA:CPU kernel (a
    small call, a fused program), which holds no custom call, and not under a mesh with
    ``Explicit`` axes (the Minv kernel's batching rule keeps no sharding in the batch's type)."""
    return (
        kernel_usable(model, dtype)
        and not small_calls.tracing()
        and not xla_flags.fused_cpu_loops_enabled()
        and not explicit_context()
    )


METHODS = ("auto", "dmm", "aza")


def resolve_method(method: str, nv: int) -> str:
    """``"dmm"`` or ``"aza"`` for ``method`` in :data:`METHODS`."""
    if method not in METHODS:
        raise ValueError(f"aba_derivatives: method must be one of {METHODS}, got {method!r}")
    if method == "auto":
        return "aza" if nv >= AZA_MIN_NV else "dmm"
    return method


def aza(model: Model, S: Array, inertias: Inertias, u: Array) -> Array:
    """``M^-1 u`` for ``u (nv, r)`` by the ABA with zero velocity, gravity and external forces.

    Reference: Singh, Russell & Wensing 2022, §IV-E, Eq. 34 ("AZA"); Featherstone 2008,
    Alg. 7.1 with ``qd = 0``, ``a_0 = 0``, ``f_ext = 0`` (no velocity-product terms).

    ``inertias`` are the precomputed :func:`~jaxdyn.algorithms.aba.articulated_inertias`
    (``U``, ``D^-1`` per level and group); only the bias sweep (articulated forces ``pA``) and
    the acceleration sweep run, on the ``r`` columns at once. Linear in ``u``.
    """
    return sweeps(model, S, inertias, None, None, u, None).field(0).flat()


def forward_dynamics_world(
    model: Model,
    ws: WorldState,
    qd: Array,
    tau: Array,
    f_ext: Array | None = None,
    mass_matrix: bool = True,
) -> tuple[Array, Array, Array, Array | None, Inertias]:
    """ABA sharing its articulated inertias, and IDSVA at its solution.

    Returns ``(qdd, dtau_dq, dtau_dv, M, inertias)`` where the partials are those of inverse
    dynamics at ``(q, qd, qdd)`` (Singh et al. 2022, Eq. 5 needs them there); ``M`` is
    ``None`` with ``mass_matrix=False`` (what the forward-dynamics partials use: they take
    ``M^-1`` from the sweeps, and IDSVA then skips a third of its pairwise products).
    """
    dtype = ws.S.dtype
    I6 = world_inertia_matrices(ws)
    inertias = articulated_inertias(model, ws.S, I6)
    _, c, pA = velocity_terms(model, ws, qd)
    fw = None if f_ext is None else external_forces_world(model, ws, f_ext)
    if fw is not None:
        pA = pA - fw
    a0 = kin.gravity_acceleration(model, dtype)
    qdd, _ = aba_passes(
        model, ws.S, I6, pA[..., None], c, tau[:, None], a0[:, None], inertias=inertias
    )
    qdd = qdd[:, 0]
    _, dtau_dq, dtau_dv, M = idsva_world(model, ws, qd, qdd, fw, mass_matrix)
    return qdd, dtau_dq, dtau_dv, M, inertias


def _dmm(Minv: Array, dtau_dq: Array, dtau_dv: Array) -> tuple[Array, Array]:
    """DMM (Singh et al. 2022, Eq. 5): ``(-M^-1 dtau_dq, -M^-1 dtau_dv)`` as two products
    with ``-M^-1`` (negated once), not one product of ``[dtau_dq dtau_dv]`` then slices or
    two negated products: the concatenation, the slices and the negations are copies of
    ``nv^2`` entries each, which took a quarter to a third of the batched products' time
    (talos_full, B = 1024)."""
    neg = -Minv
    return neg @ dtau_dq, neg @ dtau_dv


def aba_derivatives_world(
    model: Model,
    ws: WorldState,
    qd: Array,
    tau: Array,
    f_ext: Array | None = None,
    method: str = "auto",
    q: Array | None = None,
) -> tuple[Array, Array, Array, Array]:
    """:func:`aba_derivatives` on a world state; returns ``(qdd, dqdd_dq, dqdd_dv, Minv)``.
    With the prepared configuration ``q`` of ``ws``, where jaxdyn's C kernels run and for
    DMM, every piece is a C kernel (fewer XLA kernels to compile, ``docs/performance.md``):
    ``qdd`` by ABA's (:func:`jaxdyn.algorithms.aba.aba_solve`), the inverse dynamics partials
    at ``qdd`` by IDSVA's without ``M`` (:func:`jaxdyn.derivatives.idsva.id_state_partials`)
    and ``Minv`` by
    :func:`jaxdyn.algorithms.minv.minv_kernel`; else ``ws`` feeds XLA's ABA and IDSVA, with
    ``Minv`` from the kernel where it runs or from the sweeps sharing ABA's articulated
    inertias."""
    method = resolve_method(method, model.nv)
    nv = model.nv
    if q is not None and method == "dmm" and by_kernels(model, ws.S.dtype):
        qdd = aba_solve(model, q, qd, tau, f_ext)
        dq, dv = id_state_partials(model, q, qd, qdd, f_ext)
        Minv = minv_kernel(model, q)
        return (qdd, *_dmm(Minv, dq, dv), Minv)
    qdd, dq, dv, _, inertias = forward_dynamics_world(model, ws, qd, tau, f_ext, False)
    if q is not None and by_kernels(model, ws.S.dtype):
        Minv = minv_kernel(model, q)
    else:
        Minv = minv_world(model, ws, inertias)
    if method == "dmm":
        return (qdd, *_dmm(Minv, dq, dv), Minv)
    D = aza(model, ws.S, inertias, -jnp.concatenate([dq, dv], 1))
    return qdd, D[:, :nv], D[:, nv:], Minv


def _prepare_fd(fn, model, q, v, tau, f_ext):
    shell.check_model(fn, model)
    v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    tau = shell.as_array(fn, "tau", tau, (("nv", model.nv),), model)
    f_ext = check_f_ext(fn, model, f_ext)
    model, q, dtype = shell.prepare(model, fn, q, v, tau, f_ext)
    f_ext = None if f_ext is None else f_ext.astype(dtype)
    return model, q, v.astype(dtype), tau.astype(dtype), f_ext


@shell.public("aba_derivatives", words=batching.capped_when_threaded(chunk_words))
@full_precision
def aba_derivatives(
    model: Model,
    q: ArrayLike,
    v: ArrayLike,
    tau: ArrayLike,
    f_ext: ArrayLike | None = None,
    method: str = "auto",
) -> tuple[Array, Array, Array]:
    """Partial derivatives of forward dynamics ``qdd = aba(q, v, tau, f_ext)`` (FDSVA).

    Reference: Singh, Russell & Wensing 2022, §IV-E, Eq. 5 (``-M^-1`` times the IDSVA
    partials of Algorithm 1 at the ABA solution) with DMM or AZA (Eq. 34); ``M^-1`` by the
    ABA-based analytic inverse (Carpentier 2018).

    **Arguments:**

    - ``q (nq,)``, ``v (nv,)``, ``tau (nv,)``; ``f_ext (nb, 6)`` or ``None`` (as in
      :func:`jaxdyn.aba`).
    - ``method``: ``"dmm"`` (form ``M^-1``, then one matrix product), ``"aza"`` (ABA with zero
      inputs on the ``2 nv`` columns, articulated inertias reused) or ``"auto"`` (AZA from
      ``AZA_MIN_NV`` velocity coordinates on).

    **Returns:** ``(dqdd_dq, dqdd_dv, dqdd_dtau)``, each ``(nv, nv)``; ``dqdd_dq`` in the
    tangent space of :func:`jaxdyn.integrate` (right increment), ``dqdd_dtau = M^-1``
    (armature included). NaN where ``M`` is singular (massless moving subtrees without
    armature), as :func:`jaxdyn.aba`.
    """
    shell.check_model("aba_derivatives", model)
    method = resolve_method(method, model.nv)
    model, q, v, tau, f_ext = _prepare_fd("aba_derivatives", model, q, v, tau, f_ext)
    if model.nb == 0:
        z = jnp.zeros((0, 0), v.dtype)
        return z, z, z
    ws = kin.world_state(model, q, centered=True)
    return aba_derivatives_world(model, ws, v, tau, f_ext, method, q)[1:]

"""IDSVA: closed-form first-order partial derivatives of inverse dynamics, in ground coordinates.

Reference: S. Singh, R. P. Russell, P. M. Wensing, "Efficient Analytical Derivatives of Rigid-Body
Dynamics Using Spatial Vector Algebra", IEEE RA-L 7(2), 2022 -- Algorithm 1 (IDSVA), the
closed-form partials Eq. 30 (with respect to ``q``) and Eq. 32 (with respect to ``qd``), the
auxiliary quantities ``Psid, Psidd`` of Eq. 31 and the body-level Coriolis factor ``B`` of
Eq. 28. The formulas implemented are those of ``docs/idsva.md`` in the repository (rebuilt from
the reference codes, checked against Pinocchio's ``computeRNEADerivatives``); in short:

* per coordinate column ``i`` (body ``b``, parent ``λ``), in world coordinates:
  ``Psid_i = v_λ x S_i``, ``Psidd_i = a_λ x S_i + v_λ x Psid_i``, ``Sd_i = v_b x S_i``;
* per body: ``B_b = (v_b x*) I_b + (I_b v_b) xbar* - I_b (v_b x)`` (twice the factor of Eq. 28,
  so that ``B + B^T = 2 dI/dt``), and the subtree composites ``IC, BC, fC``;
* Algorithm 1's backward-pass vectors ``F1 = IC S``, ``F2 = BC S + IC (Psid + Sd)``,
  ``F3 = BC Psid + IC Psidd + (fC xbar*) S``, ``F4 = BC^T S``;
* for every pair of coordinates with ``body(i)`` ancestor-or-self of ``body(j)``:
  ``dtau_j/dq_i = F1_j . Psidd_i + F4_j . Psid_i`` and
  ``dtau_j/dqd_i = F1_j . (Psid_i + Sd_i) + F4_j . S_i`` (Eq. 30/32, first lines; this form is
  also the one used on the diagonal blocks of multi-DoF joints), and, with ``body(i)`` a *strict*
  ancestor, ``dtau_i/dq_j = S_i . F3_j``, ``dtau_i/dqd_j = S_i . F2_j`` (second lines: Algorithm
  1, lines 19-20); ``dtau/dqdd = M`` with ``M_ij = S_i . F1_j``.

The per-body recursions run level by level (as every jaxdyn pass); the pairwise products of
Algorithm 1's lines 17-20 are written as two dense ``nv x 12 x 2nv`` / ``nv x 6 x 3nv`` products
masked with the static ancestor pattern of the tree (the CRBA pattern, ``topo.dof_ancestor``):
one fat matrix product vectorises far better in XLA than the paper's per-body loop over
subtree column blocks (the flop count is ``O(nv^2)`` instead of ``O(nv d)``).

Derivatives with respect to ``q`` are taken in the tangent space of :func:`jaxdyn.integrate`
(the right increment ``q ⊕ δ``), so they are ``nv x nv`` for every joint kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp

from .. import batching, shell, spatial
from .._precision import full_precision
from ..algorithms import kinematics as kin
from ..algorithms.coriolis import body_coriolis_terms, coriolis_apply, inertia_apply, sym6
from ..algorithms.rnea import check_f_ext, external_forces_world
from ..backend.crba_kernel import kernel_usable
from ..backend.rnea_derivatives_kernel import (
    rnea_derivatives_kernel,
    rnea_state_partials_kernel,
)
from ..model import tree

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike

    from ..algorithms.kinematics import WorldState
    from ..model.model import Model, Topology


def forward_accumulate_with_parent(topo: Topology, incr: Array, root: Array) -> tuple[Array, Array]:
    """:func:`jaxdyn.model.tree.forward_accumulate` that also returns each body's parent value
    (``root`` for the bodies at depth 0)."""
    return tree.forward_accumulate(topo, incr, root, with_parent=True)


#: number of row blocks of :func:`masked_products` (at most; whole depth levels per block).
#: One block is fastest both for a single evaluation (fewer kernels) and under ``jax.vmap``
#: (``docs/design-measurements.md``).
PRODUCT_BLOCKS = 1


def dof_blocks(topo: Topology, nblocks: int | None = None) -> list[int]:
    """Split the coordinates into at most ``nblocks`` contiguous runs of whole depth levels
    with about equal numbers of coordinates: boundaries ``[0, e_1, ..., nv]``.

    Bodies are sorted by depth, so if ``body(r)`` is an ancestor of ``body(c)`` then ``r``
    lies in the same or an earlier block than ``c``: across blocks, the ancestor pattern is
    block-triangular.
    """
    nblocks = PRODUCT_BLOCKS if nblocks is None else nblocks
    starts = [lvl.groups[0].v0 for lvl in topo.levels] + [topo.nv]
    edges = [0]
    for k in range(1, nblocks):
        target = k * topo.nv / nblocks
        best = min(starts, key=lambda e: abs(e - target))
        if edges[-1] < best < topo.nv:
            edges.append(best)
    edges.append(topo.nv)
    return edges


def masked_products(
    topo: Topology,
    lower: tuple[Array, Sequence[Array]],
    uppers: tuple[Array, Sequence[Array]],
) -> list[Array]:
    """Algorithm 1's lines 17-20 (products over the subtree columns of each body) for all
    bodies at once, as dense products masked with the static ancestor pattern.

    ``lower = (L, (R_1, R_2, ...))`` and ``uppers = (U, (Q_1, Q_2, ...))``, all ``(nv, K)``.
    Output ``k`` is ``out[r, c] = L[r] . R_k[c]`` where ``body(c)`` is an ancestor-or-self of
    ``body(r)``, ``U[r] . Q_k[c]`` where ``body(r)`` is a strict ancestor of ``body(c)``, and 0
    elsewhere; the outputs beyond ``len(R)`` have no lower part and are symmetric: ``U . Q_k``
    on and above the diagonal blocks, mirrored (the mass matrix).

    Bodies are depth-sorted, not depth-first, so subtrees are not contiguous column ranges;
    but an ancestor's coordinates come first, so across blocks of whole depth levels
    (:func:`dof_blocks`) the pattern is block-triangular: row block ``i`` needs the lower
    products on the columns of blocks ``<= i`` and the upper ones on blocks ``>= i`` only. The
    outputs sharing a left factor are computed by one matrix product per row block, under
    ``jax.vmap`` too: there, broadcast multiply-adds on component-major factors
    (:func:`jaxdyn.spatial.outer_sum`, as CRBA's products), which XLA fuses with the masks and
    with the factors' own computation into the kernels that write the outputs, were slower
    on solo12 and talos_full (``docs/design-measurements.md``).
    """
    anc = topo.dof_ancestor  # anc[r, c]: body(r) is ancestor-or-self of body(c)
    same = topo.dof_body[:, None] == topo.dof_body[None, :]
    strict = anc & ~same
    nv = topo.nv
    edges = dof_blocks(topo)
    L, Rs = lower
    U, Qs = uppers
    nlo, nout = len(Rs), len(Qs)
    dt = U.dtype
    zero = jnp.zeros((), dt)
    rows = [[] for _ in range(nout)]
    for i in range(len(edges) - 1):
        r0, r1 = edges[i], edges[i + 1]
        nu = nv - r0
        up = U[r0:r1] @ jnp.concatenate([Q[r0:] for Q in Qs], 0).T  # (n, nout * nu)
        lo = (L[r0:r1] @ jnp.concatenate([R[:r1] for R in Rs], 0).T) if nlo else None
        mask_lo = anc.T[r0:r1, :r1]
        mask_up = strict[r0:r1, r0:]
        for k in range(nout):
            upk = up[:, k * nu : (k + 1) * nu]
            if k >= nlo:  # symmetric output: the upper part (diagonal blocks included)
                row = jnp.where(anc[r0:r1, r0:], upk, zero)
                rows[k].append(
                    jnp.concatenate([jnp.zeros((r1 - r0, r0), dt), row], 1) if r0 else row
                )
                continue
            assert lo is not None  # k < nlo
            lok = lo[:, k * r1 : (k + 1) * r1]
            parts = [jnp.where(mask_lo[:, :r0], lok[:, :r0], zero)] if r0 else []
            parts.append(
                jnp.where(
                    mask_lo[:, r0:],
                    lok[:, r0:],
                    jnp.where(mask_up[:, : r1 - r0], upk[:, : r1 - r0], zero),
                )
            )
            if r1 < nv:
                parts.append(jnp.where(mask_up[:, r1 - r0 :], upk[:, r1 - r0 :], zero))
            rows[k].append(jnp.concatenate(parts, 1) if len(parts) > 1 else parts[0])
    out = [jnp.concatenate(r, 0) if len(r) > 1 else r[0] for r in rows]
    for k in range(nlo, nout):
        out[k] = out[k] + jnp.where(strict.T, out[k].T, zero)
    return out


def idsva_world(
    model: Model,
    ws: WorldState,
    qd: Array,
    qdd: Array,
    f_ext_world: Array | None = None,
    mass_matrix: bool = True,
) -> tuple[Array, Array, Array, Array | None]:
    """RNEA and IDSVA on a world state.

    Reference: Singh, Russell & Wensing 2022, Algorithm 1 (forward pass, lines 1-11: ``v, a``,
    ``Psid, Psidd``, ``Psid + Sd``, ``B``, ``f``; backward pass, lines 12-23: composites and the
    pairwise products), Eqs. 28, 30-32.

    **Arguments:** ``ws`` (:class:`~jaxdyn.algorithms.kinematics.WorldState`); ``qd (nv,)``,
    ``qdd (nv,)``; ``f_ext_world (nb, 6)`` external forces at the world origin, or ``None``.

    **Returns:** ``(tau, dtau_dq, dtau_dv, M)``; ``M`` is ``None`` with ``mass_matrix=False``
    (the forward-dynamics partials, which take ``M^-1`` from the ABA sweeps: its third of the
    pairwise products is then not computed).
    """
    t = model.topo
    dt = ws.S.dtype
    S = ws.S
    h, Ibar = ws.h, ws.Ibar
    a0 = kin.gravity_acceleration(model, dt)
    # --- forward pass (Alg. 1, lines 2-10): velocities, accelerations, body forces
    vJ = kin.joint_velocities(model, ws, qd)
    v, vp = forward_accumulate_with_parent(t, vJ, jnp.zeros(6, dt))
    aJ = tree.dofs_to_bodies(t, S * qdd[:, None]) + spatial.motion_cross(v, vJ)
    a, ap = forward_accumulate_with_parent(t, aJ, a0)
    BY, Iv = body_coriolis_terms(ws.mass, h, Ibar, v)
    f = inertia_apply(ws.mass, h, Ibar, a) + spatial.force_cross(v, Iv)
    if f_ext_world is not None:
        f = f - f_ext_world
    # --- backward pass: subtree composites of I, B (as Y11, y, I v) and f (Alg. 1, line 22)
    packed = jnp.concatenate([ws.mass[:, None], h, sym6(Ibar), BY, Iv, f], -1)  # (nb, 31)
    comp = tree.backward_accumulate(t, packed)
    d = tree.bodies_to_dofs(t, jnp.concatenate([comp, v, vp, ap], -1))
    mC, hC, IC = d[:, 0], d[:, 1:4], d[:, 4:10]
    Y11, yC, IvC, FC = d[:, 10:16], d[:, 16:19], d[:, 19:25], d[:, 25:31]
    vb, vp, ap = d[:, 31:37], d[:, 37:43], d[:, 43:49]
    tau = jnp.sum(S * FC, -1)
    # --- per-coordinate kinematic quantities (Alg. 1, lines 4-7; Eq. 31)
    Psid = spatial.motion_cross(vp, S)
    Psidd = spatial.motion_cross(ap, S) + spatial.motion_cross(vp, Psid)
    vdJ = Psid + spatial.motion_cross(vb, S)  # Psid + Sd
    # --- backward-pass vectors (Alg. 1, lines 13-16)
    BS, F4 = coriolis_apply(Y11, yC, IvC, S)  # BC S, BC^T S
    BPsid, _ = coriolis_apply(Y11, yC, IvC, Psid)
    F1 = inertia_apply(mC, hC, IC, S)
    F2 = BS + inertia_apply(mC, hC, IC, vdJ)
    F3 = BPsid + inertia_apply(mC, hC, IC, Psidd) + spatial.force_cross(S, FC)
    # --- pairwise products (Alg. 1, lines 17-20), masked with the ancestor pattern:
    # dtau_dq[j, i] = F1_j.Psidd_i + F4_j.Psid_i  (i ⪯ j);  dtau_dq[i, j] = S_i.F3_j  (i ≺ j)
    # dtau_dv likewise with (vdJ, S) and F2; M[i, j] = S_i.F1_j (i ⪯ j), symmetric
    dtau_dq, dtau_dv, *rest = masked_products(
        t,
        (
            jnp.concatenate([F1, F4], -1),
            (jnp.concatenate([Psidd, Psid], -1), jnp.concatenate([vdJ, S], -1)),
        ),
        (S, (F3, F2, F1) if mass_matrix else (F3, F2)),
    )
    M = rest[0] if mass_matrix else None
    if model.armature is not None:  # M + diag(armature); tau + armature * qdd
        tau = tau + model.armature * qdd
        if M is not None:
            M = M + jnp.diag(model.armature)
    return tau, dtau_dq, dtau_dv, M


def rnea_derivatives_world(
    model: Model,
    ws: WorldState,
    qd: Array,
    qdd: Array,
    f_ext: Array | None = None,
    mass_matrix: bool = True,
) -> tuple[Array, Array, Array, Array | None]:
    """RNEA and IDSVA on a world state, ``f_ext`` in body frames: ``(tau, dtau_dq, dtau_dv,
    M)`` (:func:`idsva_world`; ``M`` is ``None`` where ``mass_matrix`` is false)."""
    fw = None if f_ext is None else external_forces_world(model, ws, f_ext)
    return idsva_world(model, ws, qd, qdd, fw, mass_matrix=mass_matrix)


def rnea_derivatives_xla(
    model: Model, q: Array, qd: Array, qdd: Array, f_ext: Array | None = None
) -> tuple[Array, Array, Array]:
    """``(dtau_dq, dtau_dv, M)`` of one prepared sample by XLA's code
    (:func:`rnea_derivatives_world`): the C kernel's fallback and its derivatives."""
    ws = kin.world_state(model, q, centered=True)
    _, dtau_dq, dtau_dv, M = rnea_derivatives_world(model, ws, qd, qdd, f_ext)
    assert M is not None  # mass_matrix=True
    return dtau_dq, dtau_dv, M


def rnea_state_partials_xla(
    model: Model, q: Array, qd: Array, qdd: Array, f_ext: Array | None = None
) -> tuple[Array, Array]:
    """``(dtau_dq, dtau_dv)`` of one prepared sample by XLA's code (:func:`idsva_world`
    without ``M``): the fallback of the C kernel's call without ``M`` and its derivatives."""
    ws = kin.world_state(model, q, centered=True)
    _, dtau_dq, dtau_dv, _ = rnea_derivatives_world(model, ws, qd, qdd, f_ext, False)
    return dtau_dq, dtau_dv


def id_state_partials(
    model: Model, q: Array, qd: Array, qdd: Array, f_ext: Array | None = None
) -> tuple[Array, Array]:
    """``(dtau_dq, dtau_dv)``: :func:`id_partials` without ``M``, for the callers that drop it
    (the kernel then neither computes nor writes it:
    :func:`jaxdyn.backend.rnea_derivatives_kernel.rnea_state_partials_kernel`; XLA's code
    skips Algorithm 1's third pairwise product, :func:`rnea_state_partials_xla`)."""
    if kernel_usable(model, q.dtype):
        return rnea_state_partials_kernel(model, q, qd, qdd, f_ext, rnea_state_partials_xla)
    return rnea_state_partials_xla(model, q, qd, qdd, f_ext)


def id_partials(
    model: Model, q: Array, qd: Array, qdd: Array, f_ext: Array | None = None
) -> tuple[Array, Array, Array]:
    """``(dtau_dq, dtau_dv, M)`` of the prepared operands: on the CPU (float32, float64) by
    jaxdyn's C kernel (:func:`jaxdyn.backend.rnea_derivatives_kernel.rnea_derivatives_kernel`,
    :func:`idsva_world` in C; the switch ``cpu_kernels``), else and for derivatives by XLA's
    code (:func:`rnea_derivatives_xla`)."""
    if kernel_usable(model, q.dtype):
        return rnea_derivatives_kernel(model, q, qd, qdd, f_ext, rnea_derivatives_xla)
    return rnea_derivatives_xla(model, q, qd, qdd, f_ext)


def _prepare_id(fn, model, q, v, a, f_ext):
    shell.check_model(fn, model)
    v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    a = shell.as_array(fn, "a", a, (("nv", model.nv),), model)
    f_ext = check_f_ext(fn, model, f_ext)
    model, q, dtype = shell.prepare(model, fn, q, v, a, f_ext)
    f_ext = None if f_ext is None else f_ext.astype(dtype)
    return model, q, v.astype(dtype), a.astype(dtype), f_ext


def chunk_words(model: Model, itemsize: int) -> int:
    """The derivatives' chunk policy (``words=`` of ``rnea_derivatives`` and
    ``aba_derivatives``): four ``nv x nv`` partials per sample."""
    return 4 * model.nv * model.nv


def id_chunk_words(model: Model, itemsize: int) -> int:
    """``rnea_derivatives``' chunk policy: none where its C kernel computes the batch (it keeps
    a block of samples in the cache itself, as :func:`jaxdyn.algorithms.rnea.chunk_words`),
    else :func:`chunk_words`."""
    if kernel_usable(model, {4: "float32", 8: "float64"}.get(itemsize, "complex128")):
        return 0
    return chunk_words(model, itemsize)


@shell.public("rnea_derivatives", words=batching.capped_when_threaded(id_chunk_words))
@full_precision
def rnea_derivatives(
    model: Model,
    q: ArrayLike,
    v: ArrayLike,
    a: ArrayLike,
    f_ext: ArrayLike | None = None,
) -> tuple[Array, Array, Array]:
    """Partial derivatives of inverse dynamics ``tau = rnea(q, v, a, f_ext)`` by IDSVA.

    Reference: Singh, Russell & Wensing 2022, "Efficient Analytical Derivatives of Rigid-Body
    Dynamics Using Spatial Vector Algebra", Algorithm 1, Eqs. 30 and 32, in ground coordinates.

    **Arguments:** ``q (nq,)``, ``v (nv,)``, ``a (nv,)``; ``f_ext (nb, 6)`` or ``None``
    (body-frame spatial forces, as in :func:`jaxdyn.rnea`; being fixed in the bodies, they
    rotate with them, which the ``q`` partial includes).

    **Returns:** ``(dtau_dq, dtau_dv, dtau_da)``, each ``(nv, nv)``. ``dtau_dq[:, k]`` is the
    derivative along the ``k``-th coordinate of the right increment ``integrate(q, δ)``
    (Pinocchio's convention: body-frame rotation / twist increments for spherical and free
    joints); ``dtau_da`` is the mass matrix ``M(q)``.

    On the CPU computed by jaxdyn's C kernel (:func:`id_partials`; the switch
    ``cpu_kernels``), elsewhere and for its own derivatives by XLA's code.
    """
    model, q, v, a, f_ext = _prepare_id("rnea_derivatives", model, q, v, a, f_ext)
    if model.nb == 0:
        z = jnp.zeros((0, 0), v.dtype)
        return z, z, z
    return id_partials(model, q, v, a, f_ext)


def fext_tau_tangent(model: Model, ws: WorldState, df_ext: Array) -> Array:
    """Directional derivative of ``rnea`` in the external forces: ``-sum_b J_b^T df_b``.

    Linear in ``df_ext (nb, 6)`` (body-frame forces); the placements come from ``ws``.
    """
    t = model.topo
    dF = tree.backward_accumulate(t, external_forces_world(model, ws, df_ext))
    return -jnp.sum(ws.S * tree.bodies_to_dofs(t, dF), -1)

"""Composite-rigid-body algorithm (joint-space inertia matrix), in world coordinates.

Reference: Featherstone 2008, Alg. 6.2 (CRBA). In ground coordinates the composite inertia of a
subtree is a plain sum, ``oIc_i = sum_{j in subtree(i)} oI_j``, and
``M[r, c] = oS_r^T oIc_{body(c)} oS_c`` for every coordinate ``r`` on the support of ``c``
(Featherstone eq. 6.19): six broadcast multiply-adds over ``nv x nv``, masked (XLA's code,
:func:`crba_world`). On the CPU the same algorithm runs as a C kernel
(:func:`jaxdyn.backend.crba_kernel.crba_kernel`, ``jaxdyn/backend/_crba_kernel.h``) that
computes only the supporting pairs, one sample per vector lane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp

from .. import shell, spatial
from .._precision import full_precision
from ..backend import crba_kernel as kernel
from ..backend import fusion
from ..backend.crba_kernel import kernel_usable as kernel_usable
from ..model import tree
from . import kinematics as kin

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model
    from .kinematics import WorldState


def composite_inertias(model: Model, ws: WorldState) -> Array:
    """World composite inertias ``oIc_i = sum_{j in subtree(i)} oI_j`` as ``(nb, 13)`` rows
    ``[m, h, Ibar]`` (mass, first moment and rotational inertia about the world origin)."""
    return tree.backward_accumulate(
        model.topo, jnp.concatenate([ws.mass[:, None], ws.h, ws.Ibar.reshape(-1, 9)], -1)
    )


def subspace_force_rows(model: Model, ws: WorldState, Ic: Array) -> tuple[Array, Array]:
    """``(oS^T, F^T)``, each ``(6, nv)``: the world motion subspace of every coordinate and
    ``F_c = oIc_{body(c)} oS_c``, with the composite inertias ``Ic (nb, 13)`` as
    ``[m, h, Ibar]`` rows (:func:`crba_world`).

    Component-major (one row of ``nv`` numbers per spatial component), so that the product
    ``oS_r^T F_c`` of :func:`crba_world` reads contiguous rows along ``c``; computed from the
    placements (as :func:`jaxdyn.spatial.act_motion` computes ``ws.S``) rather than by
    transposing ``ws.S``, whose transposing copy cost more than the whole computation. The
    body quantities are read as component rows too (``R`` as 9 rows of ``nb``, ``p`` 3,
    ``Ic`` 13), which XLA fuses into the kernel, instead of ``(nb, 3, 3)`` blocks copied per
    coordinate: faster under ``jax.vmap`` in float32 and at batch 1, float64 within noise
    (``docs/design-measurements.md``). The
    subspace rows are stored (:func:`jaxdyn.backend.fusion.store`) before the force rows use them.
    """
    t = model.topo
    R, p, d = (tree.bodies_to_dofs(t, x.T, axis=-1) for x in (ws.R.reshape(t.nb, 9), ws.p, Ic))
    axT = model.dof_axis.T
    w = [sum(R[3 * i + j] * axT[j] for j in range(3)) for i in range(3)]
    u = [sum(R[3 * i + j] * axT[3 + j] for j in range(3)) for i in range(3)]
    v = [ui + ci for ui, ci in zip(u, spatial.cross_rows(list(p), w))]
    # stored before the forces read them: fused into the force rows' kernel, each of its
    # twelve rows recomputed w and v (slower under jax.vmap). The rows are stacked again
    # below: returning the stored stack itself changed XLA's fusions and ran slower.
    S6 = spatial.stack(w + v, 0)
    S6 = fusion.store(S6)[0]
    w, v = list(S6[:3]), list(S6[3:])
    m, h = d[0], list(d[1:4])
    hv, hw = spatial.cross_rows(h, v), spatial.cross_rows(h, w)
    Fa = [sum(d[4 + 3 * i + j] * w[j] for j in range(3)) + hv[i] for i in range(3)]
    Fl = [m * v[i] - hw[i] for i in range(3)]
    return spatial.stack(w + v, 0), spatial.stack(Fa + Fl, 0)


def crba_world(model: Model, ws: WorldState) -> Array:
    """Joint-space inertia matrix from a precomputed world state.

    ``M[r, c] = oS_r^T F_c`` where ``r`` supports ``c`` (and ``F_r^T oS_c`` where ``c``
    supports ``r``, the same number by symmetry), zero elsewhere: both written as six
    broadcast multiply-adds over ``(nv, nv)`` on the component rows of
    :func:`subspace_force_rows`, which XLA fuses with the masks into the kernel that writes
    ``M``. Against a batched ``oS F^T`` product (a YNNPACK kernel after a transposing copy of
    ``F``) and the masked transpose, faster under ``jax.vmap`` on solo12 and talos_full in
    float64 and float32 (``docs/design-measurements.md``).
    """
    t = model.topo
    St, Ft = fusion.store(*subspace_force_rows(model, ws, composite_inertias(model, ws)))
    anc = t.dof_ancestor  # lower: oS_r^T F_c, upper: F_r^T oS_c
    M = jnp.where(anc, spatial.outer_sum(St, Ft), jnp.where(anc.T, spatial.outer_sum(Ft, St), 0))
    if model.armature is not None:
        M = M + jnp.diag(model.armature)
    return M


def _xla_crba(model, q):
    """XLA's CRBA of one prepared ``q``: the C kernel's fallback and its derivatives."""
    return crba_world(model, kin.world_state(model, q, centered=True))


def crba_kernel(model: Model, q: ArrayLike) -> Array:
    """``M(q)`` of the prepared ``q`` by jaxdyn's C kernel on the CPU
    (:func:`jaxdyn.backend.crba_kernel.crba_kernel`), with :func:`crba_world` where the kernel
    cannot run and for derivatives."""
    return kernel.crba_kernel(model, q, _xla_crba)


def chunk_words(model: Model, itemsize: int) -> int:
    """CRBA's chunk policy (``words=`` of :func:`crba`): none where its C kernel computes the
    batch (it keeps a block of samples in the cache itself), else an ``nv x nv`` matrix per
    sample, as the other algorithms that carry one."""
    if kernel_usable(model, {4: "float32", 8: "float64"}.get(itemsize, "complex128")):
        return 0
    return model.nv * model.nv


@shell.public("crba", words=chunk_words)
@full_precision
def crba(model: Model, q: ArrayLike) -> Array:
    """Joint-space inertia matrix ``M(q)`` (``nv x nv``, symmetric positive definite; only
    semi-definite with massless moving subtrees, see :func:`jaxdyn.load_urdf`), with
    ``model.armature`` on the diagonal when set.

    Reference: Featherstone 2008, Alg. 6.2 (CRBA), in world coordinates. On the CPU computed
    by jaxdyn's C kernel (:func:`jaxdyn.backend.crba_kernel.crba_kernel`; the switch
    ``cpu_kernels``), elsewhere and for
    derivatives by XLA's code (:func:`crba_world`).
    """
    model, q, dtype = shell.prepare(model, "crba", q)
    if model.nb == 0:
        return jnp.zeros((0, 0), dtype)
    if kernel_usable(model, dtype):
        return crba_kernel(model, q)  # backend: the C kernel
    return _xla_crba(model, q)

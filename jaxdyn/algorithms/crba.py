"""Composite-rigid-body algorithm (joint-space inertia matrix), in world coordinates.

Reference: Featherstone 2008, Alg. 6.2 (CRBA). In ground coordinates the composite inertia of a
subtree is a plain sum, ``oIc_i = sum_{j in subtree(i)} oI_j``, and
``M[r, c] = oS_r^T oIc_{body(c)} oS_c`` for every coordinate ``r`` on the support of ``c``
(Featherstone eq. 6.19): six broadcast multiply-adds over ``nv x nv``, masked (XLA's code,
:func:`crba_world`). On the CPU the same algorithm runs as a C kernel (:func:`crba_kernel`,
``jaxdyn/_crba_kernel.h``) that computes only the supporting pairs, one sample per vector lane.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching, mlir

from .. import _checks, _uninitialized, spatial
from .. import config as _config
from .._precision import full_precision
from ..model import tree
from . import kinematics as kin

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model


def composite_inertias(model, ws):
    """World composite inertias ``oIc_i = sum_{j in subtree(i)} oI_j`` as ``(nb, 13)`` rows
    ``[m, h, Ibar]`` (mass, first moment and rotational inertia about the world origin)."""
    return tree.backward_accumulate(
        model.topo, jnp.concatenate([ws.mass[:, None], ws.h, ws.Ibar.reshape(-1, 9)], -1)
    )


def subspace_force_rows(model, ws, Ic):
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
    subspace rows are stored (:func:`jaxdyn.spatial.store`) before the force rows use them.
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
    S6 = spatial.store(S6)[0]
    w, v = list(S6[:3]), list(S6[3:])
    m, h = d[0], list(d[1:4])
    hv, hw = spatial.cross_rows(h, v), spatial.cross_rows(h, w)
    Fa = [sum(d[4 + 3 * i + j] * w[j] for j in range(3)) + hv[i] for i in range(3)]
    Fl = [m * v[i] - hw[i] for i in range(3)]
    return spatial.stack(w + v, 0), spatial.stack(Fa + Fl, 0)


def crba_world(model, ws):
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
    St, Ft = spatial.store(*subspace_force_rows(model, ws, composite_inertias(model, ws)))
    anc = t.dof_ancestor  # lower: oS_r^T F_c, upper: F_r^T oS_c
    M = jnp.where(anc, spatial.outer_sum(St, Ft), jnp.where(anc.T, spatial.outer_sum(Ft, St), 0))
    if model.armature is not None:
        M = M + jnp.diag(model.armature)
    return M


# ------------------------------------------------------------------------------- CPU kernel


def kernel_usable(model, dtype) -> bool:
    """Whether :func:`crba` computes ``M`` by :func:`crba_kernel`: on the CPU (the default
    backend), with the switch ``cpu_kernels`` on, float32 or float64, and jaxdyn's C handlers
    compiled (:func:`jaxdyn._uninitialized.available`)."""
    return (
        bool(_config.get("cpu_kernels"))
        and jnp.dtype(dtype) in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64))
        and model.nb > 0
        and jax.default_backend() == "cpu"
        and _uninitialized.available()
    )


@functools.lru_cache(maxsize=64)
def _kernel_topology(topo) -> np.ndarray:
    """The kernel's int32 topology operand (see ``jaxdyn_crba`` in ``_uninitialized.c``)."""
    t = topo
    r, c = np.nonzero(np.triu(t.dof_ancestor))  # r <= c, r's body supports c's
    parts = [[t.nb, t.nq, t.nv, len(r)], t.kind, t.parent, t.q_start, t.v_start, r, c]
    return np.concatenate([np.asarray(x, np.int64) for x in parts]).astype(np.int32)


def _over_batch(f, q, *rest):
    """``f(q, *rest)`` for ``q`` with any leading batch axes (``rest`` unbatched)."""
    for _ in range(q.ndim - 1):
        f = jax.vmap(f, in_axes=(0,) + (None,) * len(rest))
    return f(q, *rest)


def _xla(tree_def, q, *leaves):
    """XLA's CRBA (:func:`crba_world`) of the prepared ``q`` (any leading batch axes)."""
    model = jax.tree_util.tree_unflatten(tree_def, leaves)
    return _over_batch(lambda qq: crba_world(model, kin.world_state(model, qq, centered=True)), q)


def _kernel_call(tree_def, q, *leaves):
    """The call of the C kernel ``jaxdyn_crba`` (any leading batch axes of ``q``)."""
    model = jax.tree_util.tree_unflatten(tree_def, leaves)
    t, dt = model.topo, q.dtype
    arm = model.armature if model.armature is not None else jnp.zeros(t.nv, dt)
    axis = kin.take_rows(model.dof_axis, t.v_start)  # each body's first motion axis
    ops = (
        q,
        model.Xtree_R.reshape(t.nb, 9),
        model.Xtree_p,
        axis,
        model.mass,
        model.com,
        model.inertia.reshape(t.nb, 9),
        arm,
    )
    out = jax.ShapeDtypeStruct(q.shape[:-1] + (t.nv, t.nv), dt)
    call = jax.ffi.ffi_call(_uninitialized.CRBA_TARGET, out)
    return call(*(x.astype(dt) for x in ops), jnp.asarray(_kernel_topology(t)))


crba_p = jax.extend.core.Primitive("jaxdyn_crba")


def _crba_abstract(q, *leaves, tree_def):
    model = jax.tree_util.tree_unflatten(tree_def, leaves)
    return jax.core.ShapedArray(q.shape[:-1] + (model.nv, model.nv), q.dtype)


def _crba_impl(q, *leaves, tree_def):
    return jax.jit(lambda *a: crba_p.bind(*a, tree_def=tree_def))(q, *leaves)


def _crba_batch(args, dims, *, tree_def):
    q, *leaves = args
    if any(d is not None for d in dims[1:]):  # a batch of models: XLA's code, batched
        axes = tuple(dims)
        return jax.vmap(functools.partial(_xla, tree_def), in_axes=axes)(*args), 0
    q = jnp.moveaxis(q, dims[0], 0)
    return crba_p.bind(q, *leaves, tree_def=tree_def), 0


def _crba_jvp(primals, tangents, *, tree_def):
    # derivatives are XLA's CRBA's (the kernel computes the same function), in the operands
    # whose tangents are not symbolically zero only (a model closed over has none)
    live = [i for i, t in enumerate(tangents) if type(t) is not ad.Zero]

    def f(*xs):
        full = list(primals)
        for i, x in zip(live, xs):
            full[i] = x
        return _xla(tree_def, *full)

    return jax.jvp(f, tuple(primals[i] for i in live), tuple(tangents[i] for i in live))


def _lower_xla(ctx, *args, tree_def):
    return mlir.lower_fun(functools.partial(_xla, tree_def), multiple_results=False)(ctx, *args)


def _lower_cpu(ctx, *args, tree_def):
    # the kernel where the program may call jaxdyn's handlers (not under jax.export, not in a
    # program XLA partitions over devices), else XLA's code
    if not _uninitialized._handler_call(ctx):
        return _lower_xla(ctx, *args, tree_def=tree_def)
    call = functools.partial(_kernel_call, tree_def)
    return mlir.lower_fun(call, multiple_results=False)(ctx, *args)


crba_p.def_impl(_crba_impl)
crba_p.def_abstract_eval(_crba_abstract)
batching.primitive_batchers[crba_p] = _crba_batch
ad.primitive_jvps[crba_p] = _crba_jvp
mlir.register_lowering(crba_p, _lower_xla)
mlir.register_lowering(crba_p, _lower_cpu, platform="cpu")


def crba_kernel(model, q):
    """``M(q)`` of the prepared ``q`` (:func:`jaxdyn.algorithms.kinematics._prepare`) by
    jaxdyn's C kernel on the CPU: the same algorithm as :func:`crba_world` (world placements
    from the root out, each body's inertia about the world origin, composite inertias summed
    from the leaves in, ``M[r, c] = oS_r^T oIc oS_c`` for every coordinate ``r`` supporting
    ``c``), written in C (``_crba_kernel.h``) with one sample per vector lane (8 in float64,
    16 in float32), computing only the entries that are not structurally zero and writing each
    once into both triangles. XLA's code for this algorithm is bound by the instructions per
    entry of its dense ``nv x nv`` product and by one kernel per level of the tree, and
    stayed slower than Pinocchio's C++ on talos_full however it was arranged; the kernel is
    several times faster (``docs/design-measurements.md``; ``benchmarks/vs_cpp.py``).

    A primitive: under ``jax.vmap`` one call computes the whole batch (a batch of models takes
    XLA's code); its derivatives are those of :func:`crba_world` (``jax.jvp`` of XLA's code);
    under ``jax.export``, in programs that XLA partitions over several devices and on other
    backends it is lowered as XLA's code.
    """
    leaves, tree_def = jax.tree_util.tree_flatten(model)
    return crba_p.bind(q, *leaves, tree_def=tree_def)


@_checks.public("crba")
@full_precision
def crba(model: Model, q: ArrayLike) -> Array:
    """Joint-space inertia matrix ``M(q)`` (``nv x nv``, symmetric positive definite; only
    semi-definite with massless moving subtrees, see :func:`jaxdyn.load_urdf`), with
    ``model.armature`` on the diagonal when set.

    Reference: Featherstone 2008, Alg. 6.2 (CRBA), in world coordinates. On the CPU computed
    by jaxdyn's C kernel (:func:`crba_kernel`; the switch ``cpu_kernels``), elsewhere and for
    derivatives by XLA's code (:func:`crba_world`).
    """
    model, q, dtype = kin._prepare(model, "crba", q)
    if model.nb == 0:
        return jnp.zeros((0, 0), dtype)
    if kernel_usable(model, dtype):
        return crba_kernel(model, q)
    return crba_world(model, kin.world_state(model, q, centered=True))

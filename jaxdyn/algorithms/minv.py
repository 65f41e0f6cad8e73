"""Analytic inverse of the joint-space inertia matrix.

Reference: Carpentier 2018, "Analytical inverse of the joint space inertia matrix" (O(n^2)):
the ABA (Featherstone 2008, Alg. 7.1) run with zero velocity and gravity on the ``nv`` unit
torques, sharing one articulated-inertia pass; no mass matrix is formed or factorised.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from .. import batching, shell
from .._precision import full_precision
from ..backend import crba_kernel as kernel
from ..backend.crba_kernel import kernel_usable
from ..model import tree
from . import kinematics as kin
from .aba import (
    articulated_inertias,
    check_method,
    column_widths,
    dense_factor,
    guard_dense,
    sweeps,
    use_dense,
    world_inertia_matrices,
)

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model
    from .kinematics import WorldState


def minv_world(
    model: Model,
    ws: WorldState,
    inertias: tuple[tree.LevelSeq, tree.LevelSeq, tree.LevelSeq | None] | None = None,
) -> Array:
    """``M^-1`` from a world state: ABA with ``nv`` unit-torque right-hand sides.

    Only the columns that can be nonzero are carried: with bodies sorted by depth, the subtree
    of a body at level ``l`` owns coordinates ``>= v0_l`` (the level's first coordinate), so
    the backward pass at level ``l`` works on columns ``[v0_l, nv)`` and the forward pass
    yields the block ``Minv[rows_l, v0_l:]``; the rest follows by symmetry (Carpentier 2018
    exploits the same subtree sparsity). The levels of a run scanned by ``lax.scan`` all carry
    the columns of the run's first level (:func:`~jaxdyn.algorithms.aba.column_widths`).
    Every body of a level carries all of the level's columns, though its bias forces are
    nonzero on its subtree's only: the backward sweep restricted to those (one force per
    column, per-column gathers of ``S`` and ``U D^-1``) ran slower under ``jax.vmap`` on
    XLA:CPU, its extra kernels costing more than the flops saved
    (``docs/design-measurements.md``).
    """
    t = model.topo
    dtype = ws.S.dtype
    nv = model.nv
    if inertias is None:
        inertias = articulated_inertias(model, ws.S, world_inertia_matrices(ws))
    widths = column_widths(t)
    eyes = {}
    for li, lvl in enumerate(t.levels):
        v0, v1, w = tree.level_v0(lvl), tree.level_v1(lvl), widths[li]
        # unit torques: 1 at the own coordinate, on the columns [nv - w, nv)
        eye = np.zeros((v1 - v0, w), dtype)
        eye[np.arange(v1 - v0), np.arange(v0, v1) - (nv - w)] = 1.0
        eyes[li] = eye
    qdd = sweeps(model, ws.S, inertias, None, None, tree.LevelSeq(len(t.levels), eyes), None).field(
        0
    )
    rows_out, row_v0 = [], []
    pieces = [(li, li + 1, x[None]) for li, x in qdd.single.items()] + qdd.blocks
    for _la, _lb, x in sorted(pieces, key=lambda blk: blk[0]):
        x = x.reshape((-1, x.shape[-1]))
        w = x.shape[-1]
        rows_out.append(jnp.concatenate([jnp.zeros((x.shape[0], nv - w), dtype), x], -1))
        row_v0.append(np.full(x.shape[0], nv - w))
    upper = jnp.concatenate(rows_out, 0)
    keep = np.arange(nv)[None, :] >= np.concatenate(row_v0)[:, None]
    return jnp.where(keep, upper, upper.T)


def minv_dense(model: Model, ws: WorldState, guarded: bool = False) -> Array:
    """``M^-1`` by CRBA and a LAPACK Cholesky solve (symmetrised; NaN where ``M`` is
    singular). ``guarded`` (``method="auto"``): :func:`minv_world` instead where the
    factorisation is not trustworthy (:func:`~jaxdyn.algorithms.aba.guard_dense`) or the
    inverse not finite."""
    M, L = dense_factor(model, ws)
    X = jsl.cho_solve((L, True), jnp.eye(model.nv, dtype=M.dtype))
    X = 0.5 * (X + X.T)
    if not guarded:
        return X
    return guard_dense(M, L, X, lambda: minv_world(model, ws))


def _xla_minv(model: Model, q: Array) -> Array:
    """XLA's ``M^-1`` of one prepared ``q`` (the sweeps, :func:`minv_world`): the C kernel's
    fallback and its derivatives."""
    return minv_world(model, kin.world_state(model, q, centered=True))


def minv_kernel(model: Model, q: ArrayLike) -> Array:
    """``M(q)^-1`` of the prepared ``q`` by jaxdyn's C kernel on the CPU
    (:func:`jaxdyn.backend.crba_kernel.minv_kernel`), with :func:`minv_world` where the kernel
    cannot run and for derivatives."""
    return kernel.minv_kernel(model, q, _xla_minv)


def chunk_words(model: Model, itemsize: int) -> int:
    """Minv's chunk policy (``words=`` of :func:`minv`): none where its C kernel computes the
    batch (as :func:`jaxdyn.algorithms.crba.chunk_words`), else an ``nv x nv`` matrix per
    sample."""
    if kernel_usable(model, {4: "float32", 8: "float64"}.get(itemsize, "complex128")):
        return 0
    return batching.nv2_words(model, itemsize)


@shell.public("minv", words=batching.capped_when_threaded(chunk_words))
@full_precision
def minv(model: Model, q: ArrayLike, method: str = "auto") -> Array:
    """Inverse of the joint-space inertia matrix, without forming or factorising ``M``.

    Reference: Carpentier 2018, "Analytical inverse of the joint space inertia matrix"
    (the ABA run with zero velocity and gravity on the ``nv`` unit torques, sharing one
    articulated-inertia pass; O(n^2)).

    **Arguments:** ``q (nq,)``; ``method``: ``"sweeps"`` the ABA passes above, ``"dense"``
    CRBA and a Cholesky solve, ``"auto"`` (default): on the CPU (float32, float64) the
    sweeps' algorithm as jaxdyn's C kernel (:func:`minv_kernel`, also for ``"sweeps"``;
    the switch ``cpu_kernels``), elsewhere as :func:`jaxdyn.aba` chooses (the dense form for a
    single float64 evaluation on a deep tree, where it has fewer XLA kernels and is faster;
    the sweeps inside one XLA:CPU kernel (:mod:`jaxdyn.backend.small_calls`), under
    ``jax.vmap``, for derivatives and in float32; the sweeps too where the Cholesky
    factorisation is not trustworthy, as :func:`jaxdyn.aba`).

    **Returns:** ``M(q)^-1`` ``(nv, nv)`` (armature included); NaN where ``M`` is singular
    (massless moving subtrees without armature), as Pinocchio.
    """
    check_method("minv", method)
    model, q, dtype = shell.prepare(model, "minv", q)
    if model.nb == 0:
        return jnp.zeros((0, 0), dtype)
    if method != "dense" and kernel_usable(model, dtype):
        return minv_kernel(model, q)  # backend: the C kernel
    ws = kin.world_state(model, q, centered=True)
    if use_dense(method, model, dtype):
        return minv_dense(model, ws, guarded=method == "auto")
    return minv_world(model, ws)

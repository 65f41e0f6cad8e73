"""The Delassus matrix (inverse operational-space inertia matrix) ``J M^-1 J^T``.

:func:`delassus` dispatches to

* ``"pv_osimr"`` (default) -- PV-OSIMr, O(n + m^2) (Sathya, Decré & Swevers 2024, Alg. 3);
* ``"pv_osim"`` -- PV-OSIM, O(n + m^2 d) (ibid., Alg. 1);
* ``"efpa"`` -- extended force propagator algorithm, O(n + m d + m^2) (ibid., Alg. 2);
* ``"ltl"`` -- sparse ``L^T L`` factorisation of ``M`` (Featherstone 2005/2010; ibid., eqs. 4-6);
* ``"dense"`` -- the reference: ``J`` and ``M`` (CRBA), Cholesky, ``(L^-1 J^T)^T (L^-1 J^T)``.

PV-OSIMr, PV-OSIM and EFPA share one articulated-inertia pass that keeps the symmetric 6x6
inertias packed (:mod:`jaxdyn.osim.inertia`; ``constrained_aba`` passes ABA's own instead).
Everything is pure JAX over static index plans, so ``jit``, ``vmap`` and ``grad`` apply; the
plans are built once per ``(model.topo, constraints)`` and cached.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp
import jax.scipy.linalg as jsl

from .. import batching, shell
from .. import constraints as cons
from .._precision import full_precision
from ..algorithms import kinematics as kin
from ..algorithms.crba import crba_world
from .efpa import delassus_efpa
from .inertia import articulated_inertias_packed, world_inertias_packed
from .ltl import delassus_ltl, ltl_plan
from .pv_osim import delassus_pv_osim
from .pv_osimr import delassus_pv_osimr
from .pv_osimr import plan as osimr_plan
from .rows import row_plan

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike

    from ..algorithms.aba import Inertias
    from ..algorithms.kinematics import WorldState
    from ..constraints import Connect, ConstraintLayout, Weld
    from ..model.model import Model


METHODS = ("pv_osimr", "pv_osim", "efpa", "ltl", "dense")


def check_method(fn: str, method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"{fn}: method must be one of {METHODS}, got {method!r}")


def delassus_dense(model: Model, ws: WorldState, K: Array, lay: ConstraintLayout) -> Array:
    M = crba_world(model, ws)
    J = cons.jacobian_from_rows(model, ws, lay, K)
    L = jnp.linalg.cholesky(M)
    Z = jsl.solve_triangular(L, J.T, lower=True)
    return Z.T @ Z


def delassus_world(
    model: Model,
    ws: WorldState,
    lay: ConstraintLayout,
    K: Array,
    method: str = "pv_osimr",
    inertias: Inertias | None = None,
) -> Array:
    """Delassus matrix from a world state and the constraint rows ``K`` (internal entry); the
    plans are keyed by the layout's descriptions (their geometry, without targets)."""
    topo, constraints = model.topo, lay.constraints
    if method == "dense":
        return delassus_dense(model, ws, K, lay)
    if method == "ltl":
        return delassus_ltl(model, ws, K, lay, ltl_plan(topo, constraints))
    if inertias is None:  # packed pass: U, D^-1 only (the Delassus algorithms need no more)
        inertias = articulated_inertias_packed(model, ws.S, world_inertias_packed(ws))
    if method == "pv_osimr":
        return delassus_pv_osimr(model, ws, inertias, K, osimr_plan(topo, constraints))
    if method == "pv_osim":
        return delassus_pv_osim(model, ws, inertias, K, row_plan(topo, constraints))
    return delassus_efpa(model, ws, inertias, K, row_plan(topo, constraints))


@shell.public("delassus", words=batching.nv2_words)
@full_precision
def delassus(
    model: Model,
    q: ArrayLike,
    constraints: Sequence[Weld | Connect],
    method: str = "pv_osimr",
) -> Array:
    """Delassus matrix ``Λ^-1 = J M(q)^-1 J^T`` of a set of constraints, ``(m, m)``.

    **Arguments:**

    - ``model``, ``q (nq,)``.
    - ``constraints``: a :class:`~jaxdyn.constraints.Weld` / :class:`~jaxdyn.constraints.
      Connect` or a sequence of them; rows follow their order, each in ``[angular; linear]``
      order in its constraint frame (a connect has its 3 linear rows only).
    - ``method``: ``"pv_osimr"`` (default, O(n + m^2)), ``"pv_osim"``, ``"efpa"``, ``"ltl"``
      or ``"dense"`` (see the module docstring).

    **Returns:** the symmetric positive semi-definite ``(m, m)`` matrix.
    """
    fn = "delassus"
    check_method(fn, method)
    _, lay = cons.get_layout(fn, model, constraints)
    model, q, _ = shell.prepare(model, fn, q)
    ws = kin.world_state(model, q)
    K = cons.rows_from_placements(lay, cons.placements_from_state(model, ws, lay))
    return delassus_world(model, ws, lay, K, method)

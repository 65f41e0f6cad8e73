"""Forward dynamics with bilateral constraints, through the Delassus matrix.

Equations (PV-OSIMr paper, eqs. 1-2, with Pinocchio's sign of the constraint force)::

    M qdd + h(q, v) = tau + J^T λ
    J qdd + Jdot v  = a*,      a* = -kd J v - kp e(q)   (Baumgarte; a* = 0 without)

Eliminating ``qdd = qdd_free + M^-1 J^T λ`` gives ``(Λ^-1 + μ 1) λ = a* - Jdot v - J qdd_free``
(eq. 2; ``μ`` = ``damping``, a proximal / compliance regularisation, needed when constraints
are redundant, e.g. four points on one rigid sole). One articulated-inertia pass is shared by
the free ABA (Featherstone 2008, Alg. 7.1), the Delassus matrix (PV-OSIMr by default) and the
final ``M^-1 J^T λ`` pass, which applies the constraint forces as link forces (O(n)).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import _linalg, batching, shell, value_checks
from .. import constraints as cons
from .._precision import full_precision
from ..algorithms import aba as aba_mod
from ..algorithms import kinematics as kin
from ..model import tree
from .delassus import check_method, delassus_world

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike

    from ..algorithms.kinematics import WorldState
    from ..constraints import Connect, ConstraintLayout, Weld
    from ..model.model import Model


class ConstrainedDynamics(NamedTuple):
    """Result of :func:`constrained_aba`."""

    qdd: jax.Array  # (nv,) accelerations
    lam: jax.Array  # (m,) constraint forces (constraint rows' order and frames)


def _static_scalar(x):
    if isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool):
        return float(x)
    if isinstance(x, np.ndarray) and x.shape == () and np.issubdtype(x.dtype, np.number):
        return float(x)
    return None


def _nonneg(fn, name, x):
    """A finite scalar ``>= 0``: checked now when concrete, by ``error_if`` when traced."""
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{fn}: {name} must be a number >= 0, got {x!r}")
    s = _static_scalar(x)
    if s is not None:
        if not (np.isfinite(s) and s >= 0):
            raise ValueError(f"{fn}: {name} must be >= 0 and finite, got {s}")
        return x
    try:
        a = jnp.asarray(x)
    except TypeError:
        raise TypeError(f"{fn}: {name} must be a number >= 0, got {type(x).__name__}") from None
    if a.shape != ():
        raise ValueError(f"{fn}: {name} must be a scalar, got shape {tuple(a.shape)}")
    if not isinstance(a, jax.core.Tracer):
        return _nonneg(fn, name, np.asarray(a))
    return value_checks.error_if(
        a, ~(jnp.isfinite(a) & (a >= 0)), f"{fn}: {name} must be >= 0 and finite"
    )


def link_forces(model: Model, lay: ConstraintLayout, K: Array, lam: Array) -> Array:
    """World-origin spatial forces ``(nb, 6)`` of the constraint forces ``K^T λ`` per body."""
    P = np.zeros((model.nb, lay.m))
    P[lay.row_body, np.arange(lay.m)] = 1.0
    return jnp.asarray(P, K.dtype) @ (K * lam[:, None])


def row_accelerations(
    model: Model, ws: WorldState, lay: ConstraintLayout, K: Array, qdd: Array
) -> Array:
    """``J qdd`` from the rows: ``k_r · sum_{j in support(body r)} S_j qdd_j``."""
    t = model.topo
    aq = tree.forward_accumulate(
        t, tree.dofs_to_bodies(t, ws.S * qdd[:, None]), jnp.zeros(6, qdd.dtype)
    )
    return jnp.sum(K * aq[lay.row_body], -1)


@shell.public("constrained_aba", words=batching.nv2_words)
@full_precision
def constrained_aba(
    model: Model,
    q: ArrayLike,
    v: ArrayLike,
    tau: ArrayLike,
    constraints: Sequence[Weld | Connect],
    baumgarte: tuple[float, float] | None = None,
    damping: float = 0.0,
    targets: ArrayLike | None = None,
    method: str = "pv_osimr",
) -> ConstrainedDynamics:
    """Constrained forward dynamics for bilateral constraints.

    **Arguments:**

    - ``q (nq,)``, ``v (nv,)``, ``tau (nv,)``.
    - ``constraints``: :class:`~jaxdyn.constraints.Weld` / :class:`~jaxdyn.constraints.Connect`
      (a sequence).
    - ``baumgarte``: ``None`` (``J qdd + Jdot v = 0``) or ``(kp, kd)``: the constraint
      acceleration is ``-kd J v - kp e`` with the position error ``e`` of
      :func:`jaxdyn.constraints.constraint_error` (``kp != 0`` needs targets).
    - ``damping``: ``μ >= 0`` added to the Delassus diagonal (finite; a NaN or negative value
      is refused). Redundant constraints need ``damping > 0``: with 0 the system is singular
      and, with value checks on, a value check reports it (NaN otherwise).
    - ``targets``: per-constraint targets overriding the constraints' ``target`` fields.
    - ``method``: Delassus algorithm (see :func:`jaxdyn.delassus`).

    **Returns:** :class:`ConstrainedDynamics` ``(qdd (nv,), lam (m,))`` with
    ``M qdd + h = tau + J^T lam``.
    """
    fn = "constrained_aba"
    check_method(fn, method)
    constraints, lay = cons.get_layout(fn, model, constraints)
    v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    tau = shell.as_array(fn, "tau", tau, (("nv", model.nv),), model)
    kp = kd = None
    if baumgarte is not None:
        try:
            kp, kd = baumgarte
        except (TypeError, ValueError):
            raise ValueError(
                f"{fn}: baumgarte must be None or a pair (kp, kd), got {baumgarte!r}"
            ) from None
        kp = _nonneg(fn, "baumgarte kp", kp)
        kd = _nonneg(fn, "baumgarte kd", kd)
    mu = _nonneg(fn, "damping", damping)  # checked (a traced scalar under jit)
    model, q, dt = shell.prepare(model, fn, q, v, tau)
    v, tau = v.astype(dt), tau.astype(dt)
    use_kp = baumgarte is not None and _static_scalar(kp) != 0.0
    if use_kp:  # validate the targets before any computation
        Rt, pt = cons.target_arrays(fn, constraints, lay, targets, dt)
    ws = kin.world_state(model, q)
    pl = cons.placements_from_state(model, ws, lay)
    K = cons.rows_from_placements(lay, pl)
    I6 = aba_mod.world_inertia_matrices(ws)
    inertias = aba_mod.articulated_inertias(model, ws.S, I6)
    # free dynamics (ABA sharing the articulated inertias)
    _, c, pA = aba_mod.velocity_terms(model, ws, v)
    a0 = kin.gravity_acceleration(model, dt)
    qdd0 = aba_mod.aba_passes(
        model, ws.S, I6, pA[..., None], c, tau[:, None], a0[:, None], inertias
    )[0][:, 0]
    D = delassus_world(model, ws, lay, K, method, inertias=inertias)
    y, drift = cons.kinematic_terms(model, ws, v, lay, pl)
    rhs = -drift - row_accelerations(model, ws, lay, K, qdd0)
    if baumgarte is not None:
        rhs = rhs - jnp.asarray(kd, dt) * y
        if use_kp:
            rhs = rhs - jnp.asarray(kp, dt) * cons.error_from_placements(lay, pl, Rt, pt)
    A = D + jnp.asarray(mu, dt) * jnp.eye(lay.m, dtype=dt)
    lam = _linalg.spd_solve(A, rhs)  # no LAPACK call with fused CPU loops
    lam = value_checks.error_if(
        lam,
        ~jnp.all(jnp.isfinite(lam)),
        f"{fn}: the constraint forces are not finite: the Delassus matrix J M^-1 J^T + "
        "damping 1 is singular (redundant constraints, e.g. four contact points on one rigid "
        "sole, with damping 0; or a singular M) or the inputs are not finite; pass damping > 0 "
        "(e.g. 1e-8)",
    )
    F = link_forces(model, lay, K, lam)
    dq = aba_mod.aba_passes(
        model,
        ws.S,
        I6,
        -F[..., None],
        None,
        jnp.zeros((model.nv, 1), dt),
        jnp.zeros((6, 1), dt),
        inertias,
    )[0][:, 0]
    return ConstrainedDynamics(qdd0 + dq, lam)

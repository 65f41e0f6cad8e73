"""Residual costs of trajectory optimisation (Crocoddyl's ``CostModelResidual`` with a weighted
quadratic activation).

A stage cost is a sum of terms ``1/2 sum_i w_i r_i(x, u)^2``; a :class:`Cost` stacks the
residuals of its terms into one vector ``r`` with weights ``w``, so that

    l = 1/2 r^T W r,   l_x = R_x^T W r,   l_u = R_u^T W r,
    l_xx = R_x^T W R_x,   l_xu = R_x^T W R_u,   l_uu = R_u^T W R_u

(Gauss-Newton Hessians, as Crocoddyl's residual costs). ``R_x`` is the Jacobian in the tangent
space of the state (``x ⊕ dx``, :func:`jaxdyn.trajopt.lie.state_integrate`), taken by
forward-mode autodiff of the residual through ``x ⊕ dx`` at ``dx = 0``. The joint-limit
penalty is ``1/2 w max(0, q - q_max)^2 + 1/2 w min(0, q - q_min)^2``, Crocoddyl's
``ActivationModelQuadraticBarrier`` on the configuration (exact Hessian away from the bounds).

Running costs are multiplied by ``dt`` in the solvers (Crocoddyl's
``IntegratedActionModelEuler``); terminal costs are not.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import spatial
from ..algorithms import kinematics as kin
from ..algorithms.energy import center_of_mass
from . import lie

if TYPE_CHECKING:
    from jax import Array

    from ..model.model import Model

__all__ = [
    "CenterOfMass",
    "ControlRegularization",
    "Cost",
    "FramePlacement",
    "FrameTranslation",
    "JointLimits",
    "SphereAvoidance",
    "StateRegularization",
    "Term",
]


#: while :meth:`Cost.residual` runs: ``(model, x, {body: chain placements})``, so that the
#: terms of one cost on the same body (a frame's position and a clearance around it) compute
#: the body's support chain once (one copy in the traced program instead of one per term)
_CHAINS: contextvars.ContextVar[tuple[Any, Any, dict] | None] = contextvars.ContextVar(
    "jaxdyn_cost_chains", default=None
)


def _frame_pose(model, x, frame):
    """World placement of ``frame`` at the state ``x``: its supporting bodies only
    (``kinematics.frame_pose``), shared by the terms of one :meth:`Cost.residual`."""
    f = model.frame_index(frame)
    b = int(model.topo.frame_parent[f])
    memo = _CHAINS.get()
    if b < 0 or memo is None or memo[0] is not model or memo[1] is not x:
        return kin.frame_pose(model, x[: model.nq], f)
    chains = memo[2]
    if b not in chains:
        chains[b] = kin.chain_placements(model, x[: model.nq], b)
    return kin.frame_in_chain(model, chains[b], f)


#: rotation vector of a rotation matrix, ``log(R)^vee`` (principal branch, ``θ < π``)
log3_matrix = spatial.log3


class StateRegularization(eqx.Module):
    """``r = x ⊖ x_ref`` (``2 nv``; Crocoddyl's ``ResidualModelState``)."""

    reference: jax.Array

    def __call__(self, model: Model, x: Array, u: Array | None) -> Array:
        return lie.state_difference(model, self.reference, x)


class ControlRegularization(eqx.Module):
    """``r = u - u_ref`` (``nu``; Crocoddyl's ``ResidualModelControl``)."""

    reference: jax.Array

    def __call__(self, model: Model, x: Array, u: Array | None) -> Array:
        if u is None:
            raise ValueError("ControlRegularization: a terminal cost has no control")
        return u - self.reference


class FrameTranslation(eqx.Module):
    """``r = p_frame(q) - p_ref`` (world frame; Crocoddyl's ``ResidualModelFrameTranslation``)."""

    frame: str = eqx.field(static=True)
    reference: jax.Array

    def __call__(self, model: Model, x: Array, u: Array | None) -> Array:
        _, p = _frame_pose(model, x, self.frame)
        return p - self.reference


class FramePlacement(eqx.Module):
    """``r = [log(R_ref^T R); p - p_ref]`` (``6``): orientation error in the frame and world
    position error (Crocoddyl's ``ResidualModelFrameRotation`` and
    ``ResidualModelFrameTranslation`` stacked)."""

    frame: str = eqx.field(static=True)
    rotation: jax.Array
    translation: jax.Array

    def __call__(self, model: Model, x: Array, u: Array | None) -> Array:
        R, p = _frame_pose(model, x, self.frame)
        return jnp.concatenate([log3_matrix(self.rotation.T @ R), p - self.translation])


class CenterOfMass(eqx.Module):
    """``r = c(q) - c_ref`` (Crocoddyl's ``ResidualModelCoMPosition``)."""

    reference: jax.Array

    def __call__(self, model: Model, x: Array, u: Array | None) -> Array:
        return center_of_mass(model, x[: model.nq]) - self.reference


class SphereAvoidance(eqx.Module):
    """``r = max(0, radius - |p_frame(q) - center|)``: a quadratic penalty inside a sphere
    (an obstacle with the frame's clearance added to ``radius``)."""

    frame: str = eqx.field(static=True)
    center: jax.Array
    radius: jax.Array | float

    def __call__(self, model: Model, x: Array, u: Array | None) -> Array:
        _, p = _frame_pose(model, x, self.frame)
        d = p - self.center
        dist = jnp.sqrt(jnp.maximum(jnp.sum(d * d), 1e-24))
        return jnp.maximum(self.radius - dist, 0.0)[None]


class JointLimits(eqx.Module):
    """``r = max(0, q_i - upper_i) + min(0, q_i - lower_i)`` over configuration indices
    ``indices`` (one-DoF joints), a quadratic penalty outside ``[lower, upper]`` (Crocoddyl's
    ``ActivationModelQuadraticBarrier``). :meth:`from_model` reads the model's limits."""

    indices: tuple = eqx.field(static=True)
    lower: jax.Array
    upper: jax.Array

    @staticmethod
    def from_model(model: Model, margin: float = 0.0) -> JointLimits:
        lo, hi = model.q_lower, model.q_upper
        if lo is None or hi is None:
            raise ValueError(f"JointLimits.from_model: {model.name!r} has no position limits")
        lo, hi = np.asarray(lo), np.asarray(hi)
        idx = tuple(int(i) for i in np.nonzero(np.isfinite(lo) & np.isfinite(hi))[0])
        return JointLimits(
            idx, jnp.asarray(lo[list(idx)] + margin), jnp.asarray(hi[list(idx)] - margin)
        )

    def __call__(self, model: Model, x: Array, u: Array | None) -> Array:
        q = x[jnp.asarray(self.indices, dtype=jnp.int32)]
        return jnp.maximum(q - self.upper, 0.0) + jnp.minimum(q - self.lower, 0.0)


#: jaxdyn's residuals that do not read the control (``R_u = 0``, :meth:`Cost.derivatives`)
_STATE_ONLY = (
    StateRegularization,
    FrameTranslation,
    FramePlacement,
    CenterOfMass,
    SphereAvoidance,
    JointLimits,
)


class Term(eqx.Module):
    """One cost term ``1/2 sum_i w_i r_i^2``: a residual and its weights (scalar or per
    component)."""

    residual: eqx.Module
    weight: jax.Array | float = 1.0


class Cost(eqx.Module):
    """A stage cost: the sum of its :class:`Term` s."""

    terms: tuple

    def residual(self, model: Model, x: Array, u: Array | None) -> tuple[Array, Array]:
        return self._stack(self._residuals(model, x, u))

    def _stack(self, rs):
        """``(r, w)``: the terms' residuals ``rs`` stacked, and their weights alongside."""
        ws = [
            jnp.broadcast_to(jnp.asarray(t.weight, r.dtype), r.shape)
            for t, r in zip(self.terms, rs)
        ]
        return jnp.concatenate(rs), jnp.concatenate(ws)

    def _residuals(self, model, x, u, terms=None):
        """The residual vector of each term (of ``terms``, default all), the support chains
        of the frames shared (:data:`_CHAINS`)."""
        rs = []
        token = _CHAINS.set((model, x, {}))
        try:
            for t in self.terms if terms is None else terms:
                rs.append(t.residual(model, x, u))
        finally:
            _CHAINS.reset(token)
        return rs

    def value(self, model: Model, x: Array, u: Array | None = None) -> Array:
        """``1/2 r^T W r``."""
        r, w = self.residual(model, x, u)
        return 0.5 * jnp.sum(w * r * r)

    def derivatives(
        self, model: Model, x: Array, u: Array | None = None
    ) -> tuple[Array, Array, Array | None, Array, Array | None, Array | None]:
        """``(l, l_x, l_u, l_xx, l_xu, l_uu)`` with Gauss-Newton Hessians in the tangent space
        (``l_u`` and the blocks with ``u`` are ``None`` for a terminal cost)."""
        ndx = 2 * model.nv
        # state regularisations: their analytic Jacobian (_state_jacobian); the other terms by
        # forward-mode autodiff through x ⊕ dx
        analytic = [isinstance(t.residual, StateRegularization) for t in self.terms]
        others = [t for t, a in zip(self.terms, analytic) if not a]

        def res(dx):
            # the residuals at x ⊕ dx; at dx = 0 (the primal, returned as aux) they are those at
            # x: one trace of the terms' kinematics gives r and R_x
            rs = self._residuals(model, lie.state_integrate(model, x, dx), u, others)
            return jnp.concatenate(rs), rs

        zx = jnp.zeros(ndx, x.dtype)
        Rx_o, rs_o = jax.jacfwd(res, has_aux=True)(zx) if others else (jnp.zeros((0, ndx)), [])
        rs, Rxs, i, rest = [], [], 0, iter(rs_o)
        for t, a in zip(self.terms, analytic):
            if a:
                rs.append(t.residual(model, x, u))
                Rxs.append(_state_jacobian(model, t.residual.reference, x))
            else:
                r_t = next(rest)
                rs.append(r_t)
                Rxs.append(Rx_o[i : i + r_t.shape[0]])
                i += r_t.shape[0]
        Rx = jnp.concatenate(Rxs, 0)
        r, w = self._stack(rs)
        wr = w * r
        l = 0.5 * jnp.sum(wr * r)
        lx = Rx.T @ wr
        WRx = w[:, None] * Rx
        lxx = Rx.T @ WRx
        if u is None:
            return l, lx, None, lxx, None, None
        Ru = self._control_jacobian(model, lie.state_integrate(model, x, zx), u, rs)
        return l, lx, Ru.T @ wr, lxx, WRx.T @ Ru, Ru.T @ (w[:, None] * Ru)

    def _control_jacobian(self, model, x, u, rs):
        """``R_u``: forward-mode autodiff of the terms that read the control only (``rs``:
        each term's residual); the rows of jaxdyn's residuals of the state alone
        (:data:`_STATE_ONLY`) are zero, as their tangents are, and their kinematics is not
        traced again."""
        uses_u = [not isinstance(t.residual, _STATE_ONLY) for t in self.terms]
        sizes, dtype = [r.shape[0] for r in rs], jnp.result_type(*rs)
        if not any(uses_u):
            return jnp.zeros((sum(sizes), u.shape[0]), dtype)
        terms = [t for t, used in zip(self.terms, uses_u) if used]
        Ju = jax.jacfwd(lambda du: jnp.concatenate(self._residuals(model, x, u + du, terms)))(
            jnp.zeros_like(u)
        )
        if all(uses_u):
            return Ju
        # the rows of each term in order: its rows of Ju, or zeros (a residual of the state)
        rows, i = [], 0
        for used, n in zip(uses_u, sizes):
            rows.append(Ju[i : i + n] if used else jnp.zeros((n, u.shape[0]), dtype))
            i += n if used else 0
        return jnp.concatenate(rows, 0)


def _state_jacobian(model, reference, x):
    """``R_x`` of ``r = x ⊖ x_ref`` in the tangent space: ``[[d(q ⊖ q_ref)/dq, 0], [0, 1]]``
    (Pinocchio's ``dDifference`` ``ARG1``, :func:`~jaxdyn.trajopt.lie.difference_jacobians`;
    Crocoddyl's ``ResidualModelState::calcDiff``)."""
    nq, nv = model.nq, model.nv
    dtype = jnp.result_type(reference, x)
    Jq = lie.difference_jacobians(model, reference[:nq], x[:nq])[1]
    Z = jnp.zeros((nv, nv), dtype)
    return jnp.block([[Jq.astype(dtype), Z], [Z, jnp.eye(nv, dtype=dtype)]])


# ----------------------------------------------------------------------------- shape checks


def _shape_error(where, name, x, expected, why=""):
    return ValueError(f"{where}: {name} has shape {tuple(np.shape(x))}, expected {expected}{why}")


def _concrete(x):
    """``x`` as a float numpy array, or ``None`` when it is traced (its values unknown)."""
    if isinstance(x, jax.core.Tracer):
        return None
    return np.asarray(x, dtype=float)


def _want(where, name, x, shape, expected):
    if np.shape(x) != shape:
        raise _shape_error(where, name, x, expected)


def residual_size(residual, model, nu, terminal, where):
    """The length of ``residual``'s vector on ``model`` with ``nu`` controls, its arrays'
    shapes checked (``ValueError`` naming the residual, the field and the expected shape);
    ``None`` for a residual type jaxdyn does not know (not checked)."""
    nx, nv = model.nq + model.nv, model.nv
    name = type(residual).__name__
    if isinstance(residual, StateRegularization):
        _want(where, f"{name}.reference", residual.reference, (nx,), f"(nq + nv,) = ({nx},)")
        return 2 * nv
    if isinstance(residual, ControlRegularization):
        if terminal:
            raise ValueError(f"{where}: ControlRegularization in a terminal cost (no control)")
        _want(where, f"{name}.reference", residual.reference, (nu,), f"(nu,) = ({nu},)")
        return nu
    if isinstance(residual, (FrameTranslation, CenterOfMass)):
        if not isinstance(residual, CenterOfMass):
            model.frame_index(residual.frame)
        _want(where, f"{name}.reference", residual.reference, (3,), "(3,)")
        return 3
    if isinstance(residual, FramePlacement):
        model.frame_index(residual.frame)
        _want(where, f"{name}.rotation", residual.rotation, (3, 3), "(3, 3)")
        _want(where, f"{name}.translation", residual.translation, (3,), "(3,)")
        return 6
    if isinstance(residual, SphereAvoidance):
        model.frame_index(residual.frame)
        _want(where, f"{name}.center", residual.center, (3,), "(3,)")
        _want(where, f"{name}.radius", residual.radius, (), "() (a scalar)")
        return 1
    if isinstance(residual, JointLimits):
        n = len(residual.indices)
        bad = [i for i in residual.indices if not 0 <= int(i) < model.nq]
        if bad:
            raise ValueError(f"{where}: JointLimits.indices {bad} outside [0, nq = {model.nq})")
        _want(where, f"{name}.lower", residual.lower, (n,), f"(len(indices),) = ({n},)")
        _want(where, f"{name}.upper", residual.upper, (n,), f"(len(indices),) = ({n},)")
        lo, hi = _concrete(residual.lower), _concrete(residual.upper)
        for field, b in (("lower", lo), ("upper", hi)):
            if b is not None and np.any(np.isnan(b)):
                raise ValueError(
                    f"{where}: {name}.{field} has NaN entries {np.nonzero(np.isnan(b))[0].tolist()}"
                    " (use -inf / inf for an unbounded coordinate)"
                )
        if lo is not None and hi is not None and np.any(lo > hi):
            i = np.nonzero(lo > hi)[0]
            raise ValueError(
                f"{where}: {name}.lower > upper for entries {i.tolist()} (lower "
                f"{lo[i].tolist()}, upper {hi[i].tolist()})"
            )
        return n
    return None


def check_cost(cost, model, nu, terminal, where):
    """Check the terms of a :class:`Cost` of a problem (:func:`residual_size` and the weights:
    a scalar or one per residual component, finite and ``>= 0`` where known; a
    :class:`JointLimits`' bounds: no NaN, ``lower <= upper``)."""
    if not isinstance(cost, Cost):
        raise TypeError(f"{where}: expected a Cost, got {type(cost).__name__}")
    for i, term in enumerate(cost.terms):
        if not isinstance(term, Term):
            raise TypeError(f"{where}: terms[{i}] is a {type(term).__name__}, expected a Term")
        label = f"{where}.terms[{i}]"
        size = residual_size(term.residual, model, nu, terminal, label)
        if size is not None and np.shape(term.weight) not in ((), (size,)):
            raise _shape_error(
                label,
                f"weight of {type(term.residual).__name__}",
                term.weight,
                f"() or ({size},) (one weight per residual component)",
            )
        w = _concrete(term.weight)
        if w is not None and not np.all(np.isfinite(w) & (w >= 0)):
            raise ValueError(
                f"{label}: weight of {type(term.residual).__name__} must be finite and >= 0 "
                f"(a negative weight makes the cost unbounded below), got {term.weight!r}"
            )

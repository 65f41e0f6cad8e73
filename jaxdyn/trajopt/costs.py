"""Residual costs of trajectory optimisation (Crocoddyl's ``CostModelResidual`` with a weighted
quadratic activation).

A stage cost is a sum of terms ``1/2 sum_i w_i r_i(x, u)^2``; a :class:`Cost` stacks the
residuals of its terms into one vector ``r`` with weights ``w``, so that

    l = 1/2 r^T W r,   l_x = R_x^T W r,   l_u = R_u^T W r,
    l_xx = R_x^T W R_x,   l_xu = R_x^T W R_u,   l_uu = R_u^T W R_u

(Gauss-Newton Hessians, as Crocoddyl's residual costs). ``R_x`` is the Jacobian in the tangent
space of the state (``x ⊕ dx``, :func:`jaxdyn.trajopt.lie.state_integrate`): analytic for
jaxdyn's state, control, frame and joint-limit residuals (the frame residuals' from the frame
Jacobian, as Crocoddyl's ``calcDiff``; :meth:`Cost.derivatives`), forward-mode autodiff of the
residual through ``x ⊕ dx`` at ``dx = 0`` for the others. The joint-limit
penalty is ``1/2 w max(0, q - q_max)^2 + 1/2 w min(0, q - q_min)^2``, Crocoddyl's
``ActivationModelQuadraticBarrier`` on the configuration (exact Hessian away from the bounds).

Running costs are multiplied by ``dt`` in the solvers (Crocoddyl's
``IntegratedActionModelEuler``); terminal costs are not.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import joints, spatial
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


#: while a solver evaluates a cost whose residuals it has computed already (its state
#: regularisations' differences stacked with its other state differences: one copy of the
#: difference in the program, :mod:`jaxdyn.trajopt.ddp`): ``(x, {id(residual): r})``
_GIVEN: contextvars.ContextVar[tuple[Any, dict] | None] = contextvars.ContextVar(
    "jaxdyn_cost_residuals", default=None
)


@contextlib.contextmanager
def given_residuals(x: Array, residuals: dict):
    """While the block runs, the terms of a cost at the state ``x`` whose residual module's
    ``id`` is a key of ``residuals`` take their residual vector from there instead of
    computing it (:meth:`Cost.value`, :meth:`Cost.derivatives`)."""
    token = _GIVEN.set((x, residuals))
    try:
        yield
    finally:
        _GIVEN.reset(token)


def _residual_of(residual, model, x, u):
    """``residual(model, x, u)``, or the vector given for it (:func:`given_residuals`)."""
    given = _GIVEN.get()
    if given is not None and given[0] is x and id(residual) in given[1]:
        return given[1][id(residual)]
    return residual(model, x, u)


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


def _frame_tangents(model, x, frame):
    """``(R, p, w, vp, idx)``: the world placement of ``frame`` at the state ``x`` and the
    columns of its Jacobian in ``local_world_aligned`` (:func:`jaxdyn.jacobian`): the world
    angular velocity ``w (d, 3)`` and the frame origin's world velocity ``vp (d, 3)`` per unit
    velocity of its supporting coordinates ``idx`` (static, ascending). In jaxdyn's tangent
    space (``q ⊕ δ``: a free or spherical joint's increment in its own frame, as its velocity)
    these are the partials of the placement: ``d p(q ⊕ δ)/dδ = vp^T`` and
    ``R^T dR(q ⊕ δ)/dδ = [R^T w^T]`` (Featherstone 2008 §4.4; Crocoddyl's
    ``ResidualModelFrameTranslation::calcDiff`` from Pinocchio's frame Jacobian). The support
    chain's placements are shared through :data:`_CHAINS` like :func:`_frame_pose`'s."""
    from ..algorithms.jacobian import chain_subspaces

    f = model.frame_index(frame)
    b = int(model.topo.frame_parent[f])
    dtype = x.dtype
    if b < 0:  # fixed to the world: no tangents
        none = jnp.zeros((0, 3), dtype)
        return model.frame_R[f], model.frame_p[f], none, none, np.zeros(0, np.int64)
    memo = _CHAINS.get()
    chains = memo[2] if memo is not None and memo[0] is model and memo[1] is x else {}
    if b not in chains:
        chains[b] = kin.chain_placements(model, x[: model.nq], b)
    key = ("subspaces", b)
    if key not in chains:
        chains[key] = chain_subspaces(model, kin.support_chain(model.topo, b), chains[b])
    S, idx = chains[key]
    R, p = kin.frame_in_chain(model, chains[b], f)
    w = S[:, :3]
    return R, p, w, S[:, 3:] + spatial.cross(w, p), idx


def _spread(cols, idx, nv):
    """``(m, nv)`` with the rows of ``cols (d, m)`` as the columns ``idx`` (static) and zeros
    elsewhere, assembled from runs of consecutive columns (no scatter: see
    :func:`jaxdyn.trajopt.lie._block_diag`)."""
    from ..algorithms.jacobian import spread_columns

    m = cols.shape[1]
    if len(idx) == 0:
        return jnp.zeros((m, nv), cols.dtype)
    # spread_columns takes six-wide columns: pad, spread, keep the first m rows
    pad = jnp.concatenate([cols, jnp.zeros((cols.shape[0], 6 - m), cols.dtype)], 1)
    return spread_columns(pad, idx, nv)[:m]


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

    def jacobian(self, model: Model, x: Array) -> tuple[Array, Array]:
        """``(r, R_q (3, nv))``: ``R_q`` the frame Jacobian's linear rows in
        ``local_world_aligned`` (:func:`_frame_tangents`; ``R_v = 0``)."""
        _, p, _, vp, idx = _frame_tangents(model, x, self.frame)
        return p - self.reference, _spread(vp, idx, model.nv)


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

    def jacobian(self, model: Model, x: Array) -> tuple[Array, Array]:
        """``(r, R_q (6, nv))``: rotation rows ``Jr(r_R)^-1 R^T J_ω`` (the right Jacobian of
        SO(3)'s log at ``r_R = log(R_ref^T R)``, :func:`jaxdyn.spatial.so3_right_jacobian_inv`,
        of the frame's angular velocity in its own axes; Crocoddyl's
        ``ResidualModelFrameRotation::calcDiff``), translation rows the linear rows of the
        frame Jacobian in ``local_world_aligned``; ``R_v = 0``."""
        R, p, w, vp, idx = _frame_tangents(model, x, self.frame)
        r_rot = log3_matrix(self.rotation.T @ R)
        # rows of the rotation residual per supporting coordinate: Jr^-1 R^T w_k
        rot = spatial.mv(spatial.so3_right_jacobian_inv(r_rot) @ R.T, w)
        r = jnp.concatenate([r_rot, p - self.translation])
        return r, _spread(jnp.concatenate([rot, vp], 1), idx, model.nv)


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

    def jacobian(self, model: Model, x: Array) -> tuple[Array, Array]:
        """``(r, R_q (1, nv))``: ``R_q = -(d / |d|)^T J_v`` inside the sphere (``d = p -
        center``, ``J_v`` the frame Jacobian's linear rows in ``local_world_aligned``), zero
        outside (and at the centre, as the residual's guarded distance); ``R_v = 0``."""
        _, p, _, vp, idx = _frame_tangents(model, x, self.frame)
        d = p - self.center
        d2 = jnp.sum(d * d)
        dist = jnp.sqrt(jnp.maximum(d2, 1e-24))
        gap = self.radius - dist
        g = jnp.where((gap > 0.0) & (d2 > 1e-24), -d / dist, 0.0)
        return jnp.maximum(gap, 0.0)[None], _spread(spatial.mv(vp, g)[:, None], idx, model.nv)


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
        # moved to JAX by jax.device_put: an eager jnp.asarray compiles a program per shape
        return JointLimits(
            idx,
            jax.device_put(np.asarray(lo[list(idx)] + margin)),
            jax.device_put(np.asarray(hi[list(idx)] - margin)),
        )

    def __call__(self, model: Model, x: Array, u: Array | None) -> Array:
        q = x[jnp.asarray(self.indices, dtype=jnp.int32)]
        return jnp.maximum(q - self.upper, 0.0) + jnp.minimum(q - self.lower, 0.0)

    def tangent_columns(self, model: Model) -> np.ndarray | None:
        """The velocity index of each configuration index (one-DoF joints: ``q ⊕ δ = q + δ``
        there), or ``None`` when an index is a coordinate of a spherical or free joint."""
        t = model.topo
        one = {
            int(t.q_start[k]): int(t.v_start[k])
            for k in range(model.nb)
            if int(t.kind[k]) == joints.ONE_DOF
        }
        if not all(int(i) in one for i in self.indices):
            return None
        return np.asarray([one[int(i)] for i in self.indices], np.int64)

    def jacobian(self, model: Model, x: Array) -> tuple[Array, Array]:
        """``(r, R_q (n, nv))``: ``R_q[i, v(i)] = 1`` where ``q_i`` is outside its bounds, else
        zero (one-DoF coordinates only: :meth:`tangent_columns`); ``R_v = 0``."""
        cols = self.tangent_columns(model)
        if cols is None:
            raise ValueError("JointLimits.jacobian: an index is not a one-DoF coordinate")
        q = x[jnp.asarray(self.indices, dtype=jnp.int32)]
        out = (q > self.upper) | (q < self.lower)
        E = np.zeros((len(cols), model.nv))
        E[np.arange(len(cols)), cols] = 1.0
        r = jnp.maximum(q - self.upper, 0.0) + jnp.minimum(q - self.lower, 0.0)
        return r, jnp.where(out[:, None], jnp.asarray(E, x.dtype), 0.0)


def _analytic_jacobian(residual, model) -> bool:
    """Whether :meth:`Cost.derivatives` takes ``residual``'s ``R_x`` from its ``jacobian``
    method (the frame residuals, and :class:`JointLimits` on one-DoF coordinates) rather than
    from forward-mode autodiff."""
    if isinstance(residual, JointLimits):
        return residual.tangent_columns(model) is not None
    return isinstance(residual, (FrameTranslation, FramePlacement, SphereAvoidance))


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
        of the frames shared (:data:`_CHAINS`), those given taken (:func:`given_residuals`)."""
        rs = []
        token = _CHAINS.set((model, x, {}))
        try:
            for t in self.terms if terms is None else terms:
                rs.append(_residual_of(t.residual, model, x, u))
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
        (``l_u`` and the blocks with ``u`` are ``None`` for a terminal cost).

        The Gauss-Newton terms are sums over the cost's terms (``Σ R_i^T W_i R_i``), so each
        term contributes its own: a :class:`StateRegularization` its analytic Jacobian
        ``R_x = diag(d(q ⊖ q_ref)/dq, I)`` (block diagonal by joint,
        :func:`~jaxdyn.trajopt.lie.weighted_difference_gauss_newton`, Crocoddyl's
        ``ResidualModelState::calcDiff``), a :class:`ControlRegularization` ``R_u = I``, the
        frame residuals (:class:`FrameTranslation`, :class:`FramePlacement`,
        :class:`SphereAvoidance`) and :class:`JointLimits` on one-DoF coordinates their
        ``R_q`` from their ``jacobian`` method (the frame Jacobian's columns on the frame's
        support chain, :func:`_frame_tangents`; Crocoddyl's
        ``ResidualModelFrameTranslation`` / ``FrameRotation::calcDiff``) together
        (:meth:`_kinematic_derivatives`), and the other terms together the forward-mode
        autodiff of their stacked residuals (:meth:`_autodiff_derivatives`, which pushed
        ``2 nv`` tangents through the frames' kinematics and ``integrate``). Only the blocks a
        term has are formed: no dense products with the identity or with zero rows."""
        special = (StateRegularization, ControlRegularization)
        analytic = [_analytic_jacobian(t.residual, model) for t in self.terms]
        kinematic = tuple(t for t, a in zip(self.terms, analytic) if a)
        others = tuple(
            t for t, a in zip(self.terms, analytic) if not a and not isinstance(t.residual, special)
        )
        nv = model.nv
        dtype = x.dtype
        parts = []  # (l, lx, lu, lxx, lxu, luu), None for a zero block
        if kinematic:
            parts.append(self._kinematic_derivatives(model, x, kinematic))
        for t in self.terms:
            res = t.residual
            if isinstance(res, StateRegularization):
                r = _residual_of(res, model, x, u)
                w = jnp.broadcast_to(jnp.asarray(t.weight, r.dtype), r.shape)
                wr = w * r
                gq, Hq = lie.weighted_difference_gauss_newton(
                    model, res.reference[: model.nq], x[: model.nq], w[:nv], r[:nv]
                )
                zero = jnp.zeros((nv, nv), Hq.dtype)
                Hv = lie._diagonal(w[nv:])
                lxx = jnp.concatenate(
                    [jnp.concatenate([Hq, zero], 1), jnp.concatenate([zero, Hv], 1)], 0
                )
                parts.append((0.5 * jnp.sum(wr * r), jnp.concatenate([gq, wr[nv:]]), None,
                              lxx, None, None))  # fmt: skip
            elif isinstance(res, ControlRegularization):
                r = res(model, x, u)  # (a terminal cost: the residual's error)
                w = jnp.broadcast_to(jnp.asarray(t.weight, r.dtype), r.shape)
                wr = w * r
                parts.append((0.5 * jnp.sum(wr * r), None, wr, None, None, lie._diagonal(w)))
        if others or not parts:
            parts.append(Cost(others)._autodiff_derivatives(model, x, u))
        nu = None if u is None else u.shape[0]
        shapes = ((), (2 * nv,), (nu,), (2 * nv, 2 * nv), (2 * nv, nu), (nu, nu))
        out = []
        for i, shape in enumerate(shapes):
            if i in (2, 4, 5) and u is None:
                out.append(None)
                continue
            blocks = [p[i] for p in parts if p[i] is not None]
            total = blocks[0] if blocks else jnp.zeros(shape, dtype)
            for b in blocks[1:]:
                total = total + b
            out.append(total)
        l, lx, lu, lxx, lxu, luu = out
        return l, lx, lu, lxx, lxu, luu

    def _kinematic_derivatives(self, model, x, terms):
        """The Gauss-Newton blocks of ``terms`` (residuals of the configuration with a
        ``jacobian`` method: :func:`_analytic_jacobian`), their ``R_q`` stacked: ``(l, [R_q^T W
        r; 0], None, [[R_q^T W R_q, 0], [0, 0]], None, None)``; frames on the same body share
        its support chain and its Jacobian columns (:func:`_frame_tangents`)."""
        nv = model.nv
        token = _CHAINS.set((model, x, {}))
        try:
            rs, Rqs = zip(*(t.residual.jacobian(model, x) for t in terms))
        finally:
            _CHAINS.reset(token)
        r, w = Cost(terms)._stack(rs)
        Rq = jnp.concatenate(Rqs, 0)
        wr = w * r
        Hq = Rq.T @ (w[:, None] * Rq)
        zero = jnp.zeros((nv, nv), Hq.dtype)
        lxx = jnp.concatenate([jnp.concatenate([Hq, zero], 1), jnp.concatenate([zero, zero], 1)], 0)
        lx = jnp.concatenate([Rq.T @ wr, jnp.zeros(nv, wr.dtype)])
        return 0.5 * jnp.sum(wr * r), lx, None, lxx, None, None

    def _autodiff_derivatives(self, model, x, u):
        """:meth:`derivatives` of the stacked residuals of all the terms by forward-mode
        autodiff (``R_x`` through ``x ⊕ dx``; ``R_u`` of the terms that read the control)."""
        ndx = 2 * model.nv

        def res(dx):
            # the residuals at x ⊕ dx; at dx = 0 (the primal, returned as aux) they are those at
            # x: one trace of the terms' kinematics gives r and R_x
            rs = self._residuals(model, lie.state_integrate(model, x, dx), u)
            return jnp.concatenate(rs), rs

        zx = jnp.zeros(ndx, x.dtype)
        Rx, rs = jax.jacfwd(res, has_aux=True)(zx)
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

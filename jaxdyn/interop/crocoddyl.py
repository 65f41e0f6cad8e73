"""A :class:`jaxdyn.trajopt.Problem` as a Crocoddyl ``ShootingProblem`` (for comparisons).

Crocoddyl and Pinocchio are imported lazily (optional dependencies). The problem is rebuilt
node by node: ``DifferentialActionModelFreeFwdDynamics`` (``ActuationModelFull`` or
``ActuationModelFloatingBase``) inside ``IntegratedActionModelEuler`` of the same ``dt``,
costs ``CostModelResidual`` with ``ActivationModelWeightedQuad`` (the weights of each
:class:`~jaxdyn.trajopt.costs.Term`), states, controls, weights and bounds permuted to
Pinocchio's joint order by :class:`jaxdyn.interop.pinocchio.Converter`.

The differential models' armature is always set, to the model's or to zeros: the crocoddyl
3.2.1 wheel paired with ``pin`` / ``libpinocchio`` 4.1.0 computes the free dynamics without
gravity when no armature is set (its derivatives include gravity), and gives Pinocchio's ABA
once an armature, zero included, is set.

Only state and control residuals are converted: with the same library pair, Crocoddyl's
``ResidualModelFrameTranslation`` and ``ResidualModelFrameRotation`` return wrong values
(zero costs) and crash in ``calcDiff`` (segmentation faults).
"""

from __future__ import annotations

import numpy as np

__all__ = ["to_crocoddyl", "state_to_pin", "control_to_pin", "state_from_pin", "control_from_pin"]


def _u_perm(problem, conv):
    """``pin_u = jaxdyn_u[perm]``."""
    model = problem.model
    B = problem.dynamics.actuation
    nv = model.nv
    if B is None:
        return conv.v_to_pin(np.arange(nv))
    B = np.asarray(B)
    if B.shape != (nv, nv - 6) or not np.array_equal(B, np.eye(nv)[:, 6:]):
        raise ValueError("to_crocoddyl: actuation must be None or FreeDynamics.floating_base")
    tau_index = np.concatenate([np.full(6, -1), np.arange(nv - 6)])  # jaxdyn v order
    return conv.v_to_pin(tau_index)[6:]


def state_to_pin(conv, x):
    """jaxdyn state(s) ``(..., nq + nv)`` in Pinocchio's order."""
    x = np.asarray(x, np.float64)
    if x.ndim > 1:
        return np.stack([state_to_pin(conv, r) for r in x])
    nq = conv.model.nq
    return np.concatenate([conv.q_to_pin(x[:nq]), conv.v_to_pin(x[nq:])])


def state_from_pin(conv, x):
    """Pinocchio state(s) in jaxdyn's order."""
    x = np.asarray(x, np.float64)
    if x.ndim > 1:
        return np.stack([state_from_pin(conv, r) for r in x])
    nq = conv.nq_pin
    return np.concatenate([conv.q_from_pin(x[:nq]), conv.v_from_pin(x[nq:])])


def control_to_pin(problem, conv, u):
    return np.asarray(u)[..., _u_perm(problem, conv)]


def control_from_pin(problem, conv, u):
    return np.asarray(u)[..., np.argsort(_u_perm(problem, conv))]


def _vec(x):
    """A fresh, contiguous float64 copy (Eigen bindings may keep a reference to the buffer)."""
    return np.array(np.asarray(x, dtype=np.float64), dtype=np.float64, order="C", copy=True)


def _tangent_to_pin(conv, w):
    nv = conv.model.nv
    return np.concatenate([conv.v_to_pin(w[:nv]), conv.v_to_pin(w[nv:])])


def _cost_model(state, problem, conv, cost, nu, pin_model):
    import crocoddyl

    from ..trajopt import costs as C

    model = problem.model
    out = crocoddyl.CostModelSum(state, nu)
    for i, term in enumerate(cost.terms):
        r = term.residual
        if isinstance(r, C.StateRegularization):
            dim = 2 * model.nv
            res = crocoddyl.ResidualModelState(state, _vec(state_to_pin(conv, r.reference)), nu)
            w = _tangent_to_pin(conv, np.broadcast_to(np.asarray(term.weight, float), dim))
        elif isinstance(r, C.ControlRegularization):
            dim = nu
            res = crocoddyl.ResidualModelControl(
                state, _vec(control_to_pin(problem, conv, r.reference))
            )
            w = control_to_pin(problem, conv, np.broadcast_to(np.asarray(term.weight, float), dim))
        else:
            raise NotImplementedError(f"to_crocoddyl: no Crocoddyl residual for {type(r).__name__}")
        act = crocoddyl.ActivationModelWeightedQuad(_vec(w))
        out.addCost(f"{type(r).__name__}_{i}", crocoddyl.CostModelResidual(state, act, res), 1.0)
    return out


def to_crocoddyl(problem, pin_model, conv):
    """``(crocoddyl.ShootingProblem, x0_pin)`` of a free-dynamics ``problem``; controls
    bounds, if any, are set on the differential models (``SolverBoxFDDP`` reads them)."""
    import crocoddyl

    from ..trajopt.dynamics import FreeDynamics

    model = problem.model
    if not isinstance(problem.dynamics, FreeDynamics):
        raise NotImplementedError("to_crocoddyl: FreeDynamics only")
    state = crocoddyl.StateMultibody(pin_model)
    if problem.dynamics.actuation is None:
        actuation = crocoddyl.ActuationModelFull(state)
    else:
        actuation = crocoddyl.ActuationModelFloatingBase(state)
    nu = actuation.nu
    arm = 0.0 if model.armature is None else np.asarray(model.armature, float)
    armature = _vec(conv.v_to_pin(arm * np.ones(model.nv)))  # always set: module docstring
    dt = float(problem.dt)

    def dam(cost):
        d = crocoddyl.DifferentialActionModelFreeFwdDynamics(state, actuation, cost)
        d.armature = armature
        if problem.u_lower is not None:
            d.u_lb = _vec(control_to_pin(problem, conv, problem.u_lower))
        if problem.u_upper is not None:
            d.u_ub = _vec(control_to_pin(problem, conv, problem.u_upper))
        return d

    running = crocoddyl.IntegratedActionModelEuler(
        dam(_cost_model(state, problem, conv, problem.running, nu, pin_model)), dt
    )
    terminal = crocoddyl.IntegratedActionModelEuler(
        dam(_cost_model(state, problem, conv, problem.terminal, nu, pin_model)), 0.0
    )
    x0 = _vec(state_to_pin(conv, problem.x0))
    return crocoddyl.ShootingProblem(x0, [running] * problem.horizon, terminal), x0

"""A :class:`jaxdyn.trajopt.Problem` as a Crocoddyl ``ShootingProblem`` (for comparisons).

Crocoddyl and Pinocchio are imported lazily (optional dependencies). The problem is rebuilt
node by node inside ``IntegratedActionModelEuler`` of the same ``dt``:

* :class:`~jaxdyn.trajopt.FreeDynamics` -> ``DifferentialActionModelFreeFwdDynamics``;
  :class:`~jaxdyn.trajopt.ContactDynamics` -> ``DifferentialActionModelContactFwdDynamics``
  (``JMinvJt_damping`` = its ``damping``) with one contact per constraint:
  :class:`~jaxdyn.Connect` -> ``ContactModel3D``, :class:`~jaxdyn.Weld` -> ``ContactModel6D``,
  ``reference`` -> ``LOCAL`` / ``LOCAL_WORLD_ALIGNED``, the constraint's ``target`` -> ``xref``
  / ``pref`` (the origin / identity without one), ``baumgarte (kp, kd)`` -> ``gains``. Each
  contact sits on an operational frame added to a copy of the Pinocchio model at the
  constraint frame (the jaxdyn frame composed with the constraint's ``offset`` and
  ``rotation``); the conventions agree (:mod:`jaxdyn.constraints`: classical acceleration of a
  point, spatial acceleration of a welded frame, Baumgarte error ``log6`` of a weld);
* actuation ``ActuationModelFull`` or ``ActuationModelFloatingBase``;
* costs ``CostModelResidual`` with ``ActivationModelWeightedQuad`` (the weights of each
  :class:`~jaxdyn.trajopt.costs.Term`): ``StateRegularization`` -> ``ResidualModelState``,
  ``ControlRegularization`` -> ``ResidualModelControl``, ``CenterOfMass`` ->
  ``ResidualModelCoMPosition``, ``FrameTranslation`` -> ``ResidualModelFrameTranslation``,
  ``FramePlacement`` -> ``ResidualModelFrameRotation`` and ``ResidualModelFrameTranslation``
  (its two halves);

states, controls, weights and bounds permuted to Pinocchio's joint order by
:class:`jaxdyn.interop.pinocchio.Converter`.

Versions: the crocoddyl 3.2.1 wheel is built against ``pin`` / ``libpinocchio`` 4.0.0. Beside
4.1.0 (what pip picks for it unpinned) its free dynamics lack gravity when no armature is set
(an armature, zero included, gives Pinocchio's ABA: the differential models' armature is
therefore always set, to the model's or to zeros), and its contact dynamics and the
``calcDiff`` of the frame and centre-of-mass residuals crash the process (segmentation
faults). :func:`to_crocoddyl` refuses those parts with a ``RuntimeError`` naming the pair to
install (:func:`version_problem`); the ``test`` extra pins ``pin==4.0.0 libpinocchio==4.0.0``.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .pinocchio import _pinocchio

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from ..model.model import Model
    from ..trajopt.costs import Cost
    from ..trajopt.ddp import Problem
    from .pinocchio import Converter

__all__ = [
    "to_crocoddyl",
    "version_problem",
    "state_to_pin",
    "control_to_pin",
    "state_from_pin",
    "control_from_pin",
]


def _crocoddyl() -> ModuleType:
    """``crocoddyl``, imported at call time (an optional dependency), typed as a plain module:
    its compiled bindings ship no type stubs, so a type checker sees none of their names."""
    import crocoddyl

    return crocoddyl


def version_problem() -> str | None:
    """``None`` when the installed crocoddyl and Pinocchio binaries agree, else a sentence
    saying which parts of Crocoddyl fail and which versions to install (module docstring)."""
    crocoddyl, pin = _crocoddyl(), _pinocchio()
    cv, pv = str(crocoddyl.__version__), str(pin.__version__)
    if cv == "3.2.1" and not pv.startswith("4.0."):
        return (
            f"crocoddyl {cv} with pinocchio {pv}: the crocoddyl 3.2.1 wheel is built against "
            "pinocchio 4.0.0; beside another pinocchio its contact dynamics and the calcDiff "
            "of its frame and centre-of-mass residuals crash the process. Install "
            "pin==4.0.0 libpinocchio==4.0.0 (jaxdyn's test extra)"
        )
    return None


def _require_versions(what):
    msg = version_problem()
    if msg is not None:
        raise RuntimeError(f"to_crocoddyl: {what} refused: {msg}")


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


def state_to_pin(conv: Converter, x: ArrayLike) -> np.ndarray:
    """jaxdyn state(s) ``(..., nq + nv)`` in Pinocchio's order."""
    x = np.asarray(x, np.float64)
    if x.ndim > 1:
        return np.stack([state_to_pin(conv, r) for r in x])
    nq = conv.model.nq
    return np.concatenate([conv.q_to_pin(x[:nq]), conv.v_to_pin(x[nq:])])


def state_from_pin(conv: Converter, x: ArrayLike) -> np.ndarray:
    """Pinocchio state(s) in jaxdyn's order."""
    x = np.asarray(x, np.float64)
    if x.ndim > 1:
        return np.stack([state_from_pin(conv, r) for r in x])
    nq = conv.nq_pin
    return np.concatenate([conv.q_from_pin(x[:nq]), conv.v_from_pin(x[nq:])])


def control_to_pin(problem: Problem, conv: Converter, u: ArrayLike) -> np.ndarray:
    """jaxdyn control(s) ``(..., nu)`` in Pinocchio's (Crocoddyl's) order."""
    return np.asarray(u)[..., _u_perm(problem, conv)]


def control_from_pin(problem: Problem, conv: Converter, u: ArrayLike) -> np.ndarray:
    """Crocoddyl control(s) in jaxdyn's order."""
    return np.asarray(u)[..., np.argsort(_u_perm(problem, conv))]


def _vec(x):
    """A fresh, contiguous float64 copy (Eigen bindings may keep a reference to the buffer)."""
    return np.array(np.asarray(x, dtype=np.float64), dtype=np.float64, order="C", copy=True)


def _tangent_to_pin(conv, w):
    nv = conv.model.nv
    return np.concatenate([conv.v_to_pin(w[:nv]), conv.v_to_pin(w[nv:])])


class _Frames:
    """Operational frames added to a copy of the Pinocchio model (on demand, once per jaxdyn
    frame or constraint) at jaxdyn's placements, so that Crocoddyl's frame ids address
    exactly jaxdyn's frames and constraint points, whatever Pinocchio names its frames."""

    def __init__(self, model, pin_model, conv):
        pin = _pinocchio()
        self.model, self.conv = model, conv
        self.pin_model = pin.Model(pin_model)
        self._ids = {}

    def add(self, key, body, placement):
        pin = _pinocchio()
        if key not in self._ids:
            jid = self.conv.pin_joint_ids[int(body)]
            frame = pin.Frame(f"jaxdyn_{key}", jid, 0, placement, pin.FrameType.OP_FRAME)
            self._ids[key] = self.pin_model.addFrame(frame, False)
        return self._ids[key]

    def frame(self, name):
        pin = _pinocchio()
        m = self.model
        f = m.frame_index(name)
        body = int(m.topo.frame_parent[f])
        R, p = np.asarray(m.frame_R)[f], np.asarray(m.frame_p)[f]
        return self.add(f"frame_{f}", body, pin.SE3(R, p))


def _cost_model(state, problem, conv, cost, nu, frames):
    from ..trajopt import costs as C

    crocoddyl = _crocoddyl()
    model = problem.model
    out = crocoddyl.CostModelSum(state, nu)

    def add(label, res, w):
        act = crocoddyl.ActivationModelWeightedQuad(_vec(w))
        out.addCost(label, crocoddyl.CostModelResidual(state, act, res), 1.0)

    for i, term in enumerate(cost.terms):
        r = term.residual
        label = f"{type(r).__name__}_{i}"
        if isinstance(r, C.StateRegularization):
            res = crocoddyl.ResidualModelState(state, _vec(state_to_pin(conv, r.reference)), nu)
            w = np.broadcast_to(np.asarray(term.weight, float), 2 * model.nv)
            add(label, res, _tangent_to_pin(conv, w))
        elif isinstance(r, C.ControlRegularization):
            res = crocoddyl.ResidualModelControl(
                state, _vec(control_to_pin(problem, conv, r.reference))
            )
            w = control_to_pin(problem, conv, np.broadcast_to(np.asarray(term.weight, float), nu))
            add(label, res, w)
        elif isinstance(r, C.CenterOfMass):
            _require_versions("ResidualModelCoMPosition")
            res = crocoddyl.ResidualModelCoMPosition(state, _vec(r.reference), nu)
            add(label, res, np.broadcast_to(np.asarray(term.weight, float), 3))
        elif isinstance(r, C.FrameTranslation):
            _require_versions("ResidualModelFrameTranslation")
            fid = frames.frame(r.frame)
            res = crocoddyl.ResidualModelFrameTranslation(state, fid, _vec(r.reference), nu)
            add(label, res, np.broadcast_to(np.asarray(term.weight, float), 3))
        elif isinstance(r, C.FramePlacement):
            _require_versions("ResidualModelFrameRotation / FrameTranslation")
            fid = frames.frame(r.frame)
            w = np.broadcast_to(np.asarray(term.weight, float), 6)
            rot = crocoddyl.ResidualModelFrameRotation(
                state, fid, np.array(r.rotation, np.float64), nu
            )
            add(label + "_rotation", rot, w[:3])
            tr = crocoddyl.ResidualModelFrameTranslation(state, fid, _vec(r.translation), nu)
            add(label + "_translation", tr, w[3:])
        else:
            raise NotImplementedError(f"to_crocoddyl: no Crocoddyl residual for {type(r).__name__}")
    return out


def _contact_specs(dynamics, frames):
    """``(frame id, constraint, Pinocchio reference)`` of each constraint of a
    ``ContactDynamics``, its frame added to ``frames`` (module docstring)."""
    from ..constraints import check_constraints, layout

    pin = _pinocchio()
    _require_versions("DifferentialActionModelContactFwdDynamics")
    model = frames.model
    cs = check_constraints("to_crocoddyl", dynamics.constraints)
    lay = layout(model.topo, cs)
    fR, fp = np.asarray(model.frame_R), np.asarray(model.frame_p)
    out = []
    for i, c in enumerate(cs):
        f = int(lay.frame[i])
        placement = pin.SE3(fR[f], fp[f]) * pin.SE3(lay.R_off[i], lay.p_off[i])
        fid = frames.add(f"constraint_{i}", lay.body[i], placement)
        ref = pin.ReferenceFrame.LOCAL if lay.local[i] else pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
        out.append((fid, c, ref))
    return out


def _contacts(state, dynamics, specs, nu):
    """``ContactModelMultiple`` of a ``ContactDynamics`` (module docstring)."""
    crocoddyl, pin = _crocoddyl(), _pinocchio()
    gains = np.zeros(2) if dynamics.baumgarte is None else np.array(dynamics.baumgarte, float)
    out = crocoddyl.ContactModelMultiple(state, nu)
    for i, (fid, c, ref) in enumerate(specs):
        if c.dim == 6:
            if getattr(c, "error", "log6") != "log6" and gains[0] != 0:
                raise ValueError(
                    f"to_crocoddyl: {c.label} has error={c.error!r}; Crocoddyl's "
                    "ContactModel6D stabilises with log6: use Weld(..., error='log6')"
                )
            R, p = (np.eye(3), np.zeros(3)) if c.target is None else c.target
            target = pin.SE3(np.array(R, np.float64), _vec(p))
            contact = crocoddyl.ContactModel6D(state, fid, target, ref, nu, _vec(gains))
        else:
            target = np.zeros(3) if c.target is None else c.target
            contact = crocoddyl.ContactModel3D(state, fid, _vec(target), ref, nu, _vec(gains))
        out.addContact(f"{c.kind}_{i}", contact)
    return out


def to_crocoddyl(problem: Problem, pin_model: Any, conv: Converter) -> tuple[Any, np.ndarray]:
    """``(crocoddyl.ShootingProblem, x0_pin)`` of ``problem`` (free or contact dynamics; the
    conversions in the module docstring); control bounds, if any, are set on the differential
    models (``SolverBoxFDDP`` reads them). ``RuntimeError`` for the parts the installed
    crocoddyl / Pinocchio pair computes wrongly (:func:`version_problem`),
    ``NotImplementedError`` for a residual or an actuation Crocoddyl has no counterpart of."""
    from ..trajopt.dynamics import ContactDynamics, FreeDynamics

    crocoddyl = _crocoddyl()
    # Problem declares its model and costs as ``object`` (it holds any pytree); they are a
    # Model and Costs by construction
    model = cast("Model", problem.model)
    dynamics = problem.dynamics
    if not isinstance(dynamics, (FreeDynamics, ContactDynamics)):
        raise NotImplementedError("to_crocoddyl: FreeDynamics or ContactDynamics only")
    _u_perm(problem, conv)  # actuation check first
    frames = _Frames(model, pin_model, conv)
    contact = isinstance(dynamics, ContactDynamics)
    # every frame is added to the copy before the state is built on it
    specs = _contact_specs(dynamics, frames) if contact else None
    for cost in (problem.running, problem.terminal):
        for term in cast("Cost", cost).terms:
            if hasattr(term.residual, "frame"):
                frames.frame(term.residual.frame)
    state = crocoddyl.StateMultibody(frames.pin_model)
    if dynamics.actuation is None:
        actuation = crocoddyl.ActuationModelFull(state)
    else:
        actuation = crocoddyl.ActuationModelFloatingBase(state)
    nu = actuation.nu
    arm = 0.0 if model.armature is None else np.asarray(model.armature, float)
    armature = _vec(conv.v_to_pin(arm * np.ones(model.nv)))  # always set: module docstring
    dt = float(problem.dt)

    def dam(cost):
        costs = _cost_model(state, problem, conv, cost, nu, frames)
        if isinstance(dynamics, ContactDynamics):  # contact
            d = crocoddyl.DifferentialActionModelContactFwdDynamics(
                state,
                actuation,
                _contacts(state, dynamics, specs, nu),
                costs,
                float(dynamics.damping),
                False,
            )
        else:
            d = crocoddyl.DifferentialActionModelFreeFwdDynamics(state, actuation, costs)
        d.armature = armature
        if problem.u_lower is not None:
            d.u_lb = _vec(control_to_pin(problem, conv, problem.u_lower))
        if problem.u_upper is not None:
            d.u_ub = _vec(control_to_pin(problem, conv, problem.u_upper))
        return d

    running = crocoddyl.IntegratedActionModelEuler(dam(problem.running), dt)
    terminal = crocoddyl.IntegratedActionModelEuler(dam(problem.terminal), 0.0)
    x0 = _vec(state_to_pin(conv, problem.x0))
    return crocoddyl.ShootingProblem(x0, [running] * problem.horizon, terminal), x0

"""Contact dynamics of trajectory optimisation against Crocoddyl (issue 52).

``ContactDynamics`` (bilateral constraints through ``constrained_aba``) and Crocoddyl's
``DifferentialActionModelContactFwdDynamics`` built by :func:`jaxdyn.interop.crocoddyl.
to_crocoddyl` (``ContactModel3D`` / ``ContactModel6D``, ``LOCAL`` and ``LOCAL_WORLD_ALIGNED``,
Baumgarte gains), on solo12 with its feet in contact:

* one Euler node's ``calc`` / ``calcDiff``: ``xnext``, ``Fx``, ``Fu`` and the cost with its
  derivatives (state, control, centre-of-mass, frame-translation and frame-placement
  residuals) agree to 1e-10;
* FDDP solves (a CoM shift on four feet, a trot step on two) reach Crocoddyl's cost in the
  same number of iterations.

Crocoddyl 3.2.1's contact dynamics crash the process beside Pinocchio 4.1 (its wheel is built
against 4.0.0; :func:`jaxdyn.interop.crocoddyl.version_problem`): with another pair the
comparisons skip, saying so, and ``test_to_crocoddyl_refuses_broken_pairs`` checks that
``to_crocoddyl`` refuses instead of crashing. The ``test`` extra pins the working pair.
The solo12 programs compile for minutes on a 2-core CPU: the comparisons are slow tests.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

crocoddyl = pytest.importorskip("crocoddyl")

import jaxdyn  # noqa: E402
from jaxdyn import Connect, Weld  # noqa: E402
from jaxdyn.interop.crocoddyl import (  # noqa: E402
    control_from_pin,
    control_to_pin,
    state_from_pin,
    state_to_pin,
    to_crocoddyl,
    version_problem,
)
from jaxdyn.trajopt import costs as C  # noqa: E402
from jaxdyn.trajopt import ddp  # noqa: E402
from jaxdyn.trajopt.dynamics import ContactDynamics, FreeDynamics, step_derivatives  # noqa: E402

import oracle  # noqa: E402

DT = 0.02
FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")
PAIRING = version_problem()
needs_pairing = pytest.mark.skipif(PAIRING is not None, reason=str(PAIRING))


def _solo():
    case = oracle.robot_case("solo12")
    return case, case.model.with_armature(0.01)


def _standing(case):
    """A standing configuration (Crocoddyl's quadruped example: knees bent), zero velocity."""
    conv, model = case.conv, case.model
    legs = [0.0, 0.8, -1.6] * 2 + [0.0, -0.8, 1.6] * 2  # FL, FR, HL, HR (HAA, HFE, KFE)
    q_pin = np.concatenate([[0.0, 0.0, 0.24, 0.0, 0.0, 0.0, 1.0], legs])
    names = list(case.pin_model.names)
    order = [
        names.index(f"{leg}_{j}") for leg in ("FL", "FR", "HL", "HR") for j in ("HAA", "HFE", "KFE")
    ]
    assert order == sorted(order)  # solo12's Pinocchio joints are in that order
    return np.concatenate([conv.q_from_pin(q_pin), np.zeros(model.nv)])


def test_to_crocoddyl_refuses_broken_pairs():
    """With a crocoddyl / Pinocchio pair that crashes in contact dynamics, ``to_crocoddyl``
    raises (naming the versions to install) instead of building a model that crashes the
    process; with the working pair it builds the contact model."""
    case, model = _solo()
    x0 = _standing(case)
    dyn = ContactDynamics(
        tuple(Connect(f) for f in FEET), FreeDynamics.floating_base(model).actuation
    )
    cost = C.Cost((C.Term(C.StateRegularization(jnp.asarray(x0)), 1.0),))
    problem = ddp.Problem(model, jnp.asarray(x0), cost, cost, DT, 2, dyn)
    if PAIRING is None:
        cp, _ = to_crocoddyl(problem, case.pin_model, case.conv)
        assert cp.runningModels[0].differential.contacts.nc == 12
    else:
        with pytest.raises(RuntimeError, match="pin==4.0.0 libpinocchio==4.0.0"):
            to_crocoddyl(problem, case.pin_model, case.conv)


# ----------------------------------------------------------------------- one node
def _placement(model, q, frame):
    pl = jaxdyn.frame_placement(model, jnp.asarray(q), frame)
    return np.asarray(pl.R), np.asarray(pl.p)


def _rot(seed):
    Q, R = np.linalg.qr(np.random.default_rng(seed).normal(size=(3, 3)))
    Q = Q * np.sign(np.diag(R))
    return Q if np.linalg.det(Q) > 0 else -Q


def _contact_sets(model, q_target):
    """name -> constraints, their targets the constraint placements at ``q_target`` (a
    nearby configuration, so that the Baumgarte position terms act)."""

    def weld(f, ref, offset=(0.0, 0.0, 0.0), rotation=None):
        plain = Weld(f, ref, offset=offset, rotation=rotation)
        pl = jaxdyn.constraints.constraint_placements(model, jnp.asarray(q_target), (plain,))
        return Weld(f, ref, offset, rotation, target=(np.asarray(pl.R[0]), np.asarray(pl.p[0])))

    def connect(f, ref, offset=(0.0, 0.0, 0.0)):
        plain = Connect(f, ref, offset=offset)
        pl = jaxdyn.constraints.constraint_placements(model, jnp.asarray(q_target), (plain,))
        return Connect(f, ref, offset, target=tuple(np.asarray(pl.p[0])))

    return {
        "3d_lwa": tuple(connect(f, "local_world_aligned") for f in FEET),
        "3d_local": tuple(connect(f, "local", (0.01, 0.0, -0.02)) for f in FEET),
        "6d_local": (
            weld("FL_FOOT", "local", (0.01, 0.02, -0.01), _rot(1)),
            weld("HR_FOOT", "local"),
        ),
        "6d_lwa": (
            weld("FR_FOOT", "local_world_aligned"),
            weld("HL_FOOT", "local_world_aligned", (0.0, 0.01, 0.0), _rot(2)),
        ),
    }


NODE_CASES = ("3d_lwa", "3d_local", "6d_local", "6d_lwa")


@pytest.fixture(scope="module")
def node_data():
    case, model = _solo()
    rng = np.random.default_rng(5)
    nv = model.nv
    x = _standing(case)
    q = np.asarray(
        jaxdyn.integrate(model, jnp.asarray(x[: model.nq]), 0.1 * rng.standard_normal(nv))
    )
    x = np.concatenate([q, 0.5 * rng.standard_normal(nv)])
    q_t = np.asarray(jaxdyn.integrate(model, jnp.asarray(q), 0.05 * rng.standard_normal(nv)))
    u = rng.standard_normal(12)
    x_ref = np.concatenate([q_t, np.zeros(nv)])
    running = C.Cost(
        (
            C.Term(
                C.StateRegularization(jnp.asarray(x_ref)), jnp.asarray(rng.uniform(0.5, 2, 2 * nv))
            ),
            C.Term(C.ControlRegularization(jnp.asarray(0.1 * rng.standard_normal(12))), 0.1),
            C.Term(C.CenterOfMass(jnp.asarray([0.1, 0.0, 0.3])), 10.0),
            C.Term(C.FrameTranslation("FL_FOOT", jnp.asarray([0.2, 0.1, 0.05])), 5.0),
            C.Term(
                C.FramePlacement("base_link", jnp.asarray(_rot(3)), jnp.asarray([0.0, 0.0, 0.3])),
                3.0,
            ),
        )
    )
    return case, model, x, u, running, _contact_sets(model, q_t)


def _perm(conv, nv):
    Pv = np.zeros((nv, nv))
    Pv[np.arange(nv), conv.v_to_pin_index] = 1.0
    return np.block([[Pv, 0 * Pv], [0 * Pv, Pv]])


@pytest.mark.slow
@needs_pairing
@pytest.mark.parametrize("name", NODE_CASES)
def test_contact_node_against_crocoddyl(node_data, name):
    """``IntegratedActionModelEuler(DifferentialActionModelContactFwdDynamics)``'s ``calc`` /
    ``calcDiff`` against ``step_derivatives`` and ``Cost.derivatives`` (times ``dt``)."""
    case, model, x, u, running, sets = node_data
    conv = case.conv
    B = FreeDynamics.floating_base(model).actuation
    dyn = ContactDynamics(sets[name], B, baumgarte=(20.0, 3.0))
    terminal = C.Cost(running.terms[:1])
    problem = ddp.Problem(model, jnp.asarray(x), running, terminal, DT, 1, dyn)
    cp, _ = to_crocoddyl(problem, case.pin_model, conv)
    m, d = cp.runningModels[0], cp.runningDatas[0]
    xp, up = state_to_pin(conv, x), control_to_pin(problem, conv, u)
    m.calc(d, xp, up)
    m.calcDiff(d, xp, up)

    @jax.jit
    def ours(x, u):
        x1, Fx, Fu = step_derivatives(model, x, u, DT, dyn)
        return (x1, Fx, Fu) + running.derivatives(model, x, u)

    x1, Fx, Fu, l, lx, lu, lxx, lxu, luu = map(np.asarray, ours(jnp.asarray(x), jnp.asarray(u)))
    P = _perm(conv, model.nv)

    def cu(a):  # control axis (last) to Pinocchio's order
        return control_to_pin(problem, conv, a)

    tol = 1e-10
    oracle.assert_close(state_from_pin(conv, np.asarray(d.xnext)), x1, tol, f"{name}: xnext")
    # the partials go through D^-1: two welds on solo12's three-joint legs make the Delassus
    # matrix ill-conditioned (cond ~1e6; point contacts ~10), as in test_osim's KKT checks
    q = jnp.asarray(x[: model.nq])
    J = np.asarray(jaxdyn.constraints.constraint_jacobian(model, q, sets[name]))
    cond = np.linalg.cond(J @ np.linalg.solve(np.asarray(jaxdyn.crba(model, q)), J.T))
    tol_d = max(tol, 1e-14 * cond)
    oracle.assert_close(P @ Fx @ P.T, d.Fx, tol_d, f"{name}: Fx (cond(D) {cond:.1e})")
    oracle.assert_close(cu(P @ Fu), d.Fu, tol_d, f"{name}: Fu (cond(D) {cond:.1e})")
    oracle.assert_close(DT * l, d.cost, tol, f"{name}: cost")
    oracle.assert_close(DT * P @ lx, d.Lx, tol, f"{name}: Lx")
    oracle.assert_close(DT * cu(lu), d.Lu, tol, f"{name}: Lu")
    oracle.assert_close(DT * P @ lxx @ P.T, d.Lxx, tol, f"{name}: Lxx")
    oracle.assert_close(DT * cu(P @ lxu), d.Lxu, tol, f"{name}: Lxu")
    oracle.assert_close(DT * cu(cu(luu).T), d.Luu, tol, f"{name}: Luu")
    # the contacts act: the constrained step differs from the free one
    x1_free = np.asarray(
        jax.jit(lambda x, u: step_derivatives(model, x, u, DT, FreeDynamics(B))[0])(x, u)
    )
    assert np.max(np.abs(x1_free - x1)) > 1e-3


# ----------------------------------------------------------------------- FDDP solves
def _gait_problem(kind):
    case, model = _solo()
    x0 = jnp.asarray(_standing(case))
    nv, nq = model.nv, model.nq
    B = FreeDynamics.floating_base(model).actuation
    q0 = x0[:nq]
    reg = C.Term(
        C.StateRegularization(x0),
        jnp.concatenate([jnp.full(6, 0.0), jnp.full(12, 1.0), jnp.full(nv, 1.0)]),
    )
    ctrl = C.Term(C.ControlRegularization(jnp.zeros(12)), 1e-2)
    if kind == "com_shift":
        feet = FEET
        com = jaxdyn.center_of_mass(model, q0) + jnp.asarray([0.05, 0.03, 0.0])
        goal = (C.Term(C.CenterOfMass(com), 1e3),)
        horizon = 20
    else:  # trot step: FL and HR in contact, FR and HL forward and up
        feet = ("FL_FOOT", "HR_FOOT")
        goal = tuple(
            C.Term(
                C.FrameTranslation(f, _placement(model, q0, f)[1] + np.array([0.05, 0.0, 0.04])),
                1e3,
            )
            for f in ("FR_FOOT", "HL_FOOT")
        )
        horizon = 15
    dyn = ContactDynamics(
        tuple(Connect(f, "local_world_aligned") for f in feet), B, baumgarte=(0.0, 30.0)
    )
    running = C.Cost(goal + (reg, ctrl))
    terminal = C.Cost(goal + (reg,))
    return case, ddp.Problem(model, x0, running, terminal, DT, horizon, dyn)


@pytest.mark.slow
@needs_pairing
@pytest.mark.parametrize("kind", ["com_shift", "trot_step"])
def test_contact_fddp_against_crocoddyl(kind):
    """FDDP on contact dynamics: jaxdyn's and Crocoddyl's ``SolverFDDP`` from the same
    initial guess reach the same cost in the same number of iterations."""
    case, problem = _gait_problem(kind)
    res = ddp.fddp(problem, max_iter=100)
    assert int(res.status) == 0, res.message()
    assert bool(res.converged)
    cp, x0p = to_crocoddyl(problem, case.pin_model, case.conv)
    solver = crocoddyl.SolverFDDP(cp)
    solver.th_stop = 1e-9
    T, nu = problem.horizon, problem.nu
    assert solver.solve([x0p] * (T + 1), [np.zeros(nu)] * T, 100, False, 1e-9)
    np.testing.assert_allclose(float(res.cost), solver.cost, rtol=1e-8)
    assert int(res.iterations) == solver.iter + 1
    xs = state_from_pin(case.conv, np.array(solver.xs))
    us = control_from_pin(problem, case.conv, np.array(solver.us))
    oracle.assert_close(np.asarray(res.xs), xs, 1e-6, f"{kind}: xs")
    oracle.assert_close(np.asarray(res.us), us, 1e-6, f"{kind}: us")
    us0 = jnp.zeros((T, nu))
    assert float(res.cost) < float(ddp.trajectory_cost(problem, ddp.rollout(problem, us0), us0)) / 2

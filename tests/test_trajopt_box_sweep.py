"""Box-FDDP against Crocoddyl's ``SolverBoxFDDP`` over sweeps of control bounds (issue 52):
the double-pendulum swing-up of ``examples/trajopt_swingup.py`` (horizon 150) and UR5 reaches
(horizon 40, state and control costs). jaxdyn's final cost must not exceed Crocoddyl's
(relative 1e-4: both stop when the expected improvement is below ``th_stop = 5e-5``).

Measured (jaxdyn before the fixes of issue 52 -> after / Crocoddyl 3.2.1, 300 iterations at
most): swing-up ``|u| <= (0.6, 0.3)``: 4.350 (max_iter) -> 2.14865 (36 iterations) / 2.14861
(37); ``(0.4, 0.6)``: 6.3207 / 6.3207 (neither converged; identical iterates);
``0.5`` and ``0.6`` identical to Crocoddyl before and after. Two bounds are left out of the
sweep because the paths part where Crocoddyl's ``BoxQP`` stalls above a knot's optimum and
the two solvers then reach different local minima: ``|u| <= 0.2`` (jaxdyn 189.259 in 132
iterations, Crocoddyl 189.067 in 191: Crocoddyl's QP at knot 87 of iteration 74 returns
``x = (1.6e-4, -2.3e-2)`` with objective 0.235 where ``x = 0`` gives 0, the optimum) and
``0.3`` (neither converges in 300 iterations: 8.073 / 8.034; in 1000 before the acceptance fix
6.914 / 6.970). UR5: 30 reaches with bounds of 1-20 N m, 29 identical to Crocoddyl (iterations
and cost), one at the same cost to 3e-8 in 52 iterations against Crocoddyl's 64.
"""

from __future__ import annotations

import crocoddyl
import jax.numpy as jnp
import numpy as np
import pytest
import test_trajopt as t

from jaxdyn.interop.crocoddyl import to_crocoddyl
from jaxdyn.trajopt import costs as C
from jaxdyn.trajopt import ddp

import oracle

pytestmark = pytest.mark.slow

MAX_ITER = 300
RTOL = 1e-4


def _crocoddyl_cost(case, problem):
    cp, x0p = to_crocoddyl(problem, case.pin_model, case.conv)
    solver = crocoddyl.SolverBoxFDDP(cp)
    T = problem.horizon
    solver.solve([x0p] * (T + 1), [np.zeros(problem.nu)] * T, MAX_ITER, False, 1e-9)
    return solver.cost, solver.iter


def _compare(case, problem, label):
    res = ddp.fddp(problem, max_iter=MAX_ITER)
    assert int(res.status) in (0, 1), (label, res.message())
    cost, it = _crocoddyl_cost(case, problem)
    assert float(res.cost) <= cost * (1 + RTOL), (label, float(res.cost), cost, it)


@pytest.fixture(scope="module")
def pendulum_case():
    case = oracle.robot_case("double_pendulum")
    return case, case.model.with_armature(t.ARMATURE)


@pytest.mark.parametrize("bound", [0.5, (0.6, 0.3), 0.6, (0.4, 0.6), (0.3, 0.6)])
def test_swingup_bounds_sweep(pendulum_case, bound):
    case, model = pendulum_case
    goal = jnp.zeros(4)
    running = C.Cost(
        (
            C.Term(C.StateRegularization(goal), jnp.array([1.0, 1.0, 0.1, 0.1])),
            C.Term(C.ControlRegularization(jnp.zeros(2)), 1e-2),
        )
    )
    terminal = C.Cost((C.Term(C.StateRegularization(goal), 1e3),))
    b = jnp.asarray(bound, jnp.float64) * jnp.ones(2)
    x0 = jnp.array([np.pi, 0.0, 0.0, 0.0])
    problem = ddp.Problem(model, x0, running, terminal, 0.01, 150, u_lower=-b, u_upper=b)
    _compare(case, problem, f"swing-up |u| <= {bound}")


@pytest.fixture(scope="module")
def ur5_case():
    case = oracle.robot_case("ur5")
    model = case.model.with_armature(t.ARMATURE)
    rng = np.random.default_rng(0)
    q0 = np.asarray(case.states[0]["q"])
    reaches = [(q0, q0 + 0.8 * rng.standard_normal(model.nv)) for _ in range(2)]
    return case, model, reaches


@pytest.mark.parametrize("bound", [1.0, 2.0, 5.0, 10.0, 20.0])
@pytest.mark.parametrize("asym", [None, 0.5, 2.0])
def test_ur5_reach_bounds_sweep(ur5_case, bound, asym):
    case, model, reaches = ur5_case
    nv = model.nv
    b = np.full(nv, bound)
    if asym is not None:
        b[1::2] *= asym
    for i, (a, g) in enumerate(reaches):
        problem = t._problem(model, t._states(nv, a), t._states(nv, g), bounds=jnp.asarray(b))
        _compare(case, problem, f"UR5 reach {i}, bounds {b}")

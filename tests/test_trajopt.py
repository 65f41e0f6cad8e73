"""Trajectory optimisation (issue 12): the discrete dynamics' Jacobians and the DDP solvers.

* ``step_derivatives`` (analytic: FDSVA partials and the integrate Jacobians) against forward-
  mode autodiff of the plain step, central finite differences in the tangent space, the
  ``custom_jvp`` of ``step`` against autodiff of ``step_plain``, and Crocoddyl's
  ``IntegratedActionModelEuler(DifferentialActionModelFreeFwdDynamics).calcDiff``: arm7
  (fixed base, one continuous joint) and quad12 (floating base, ``ActuationModelFloatingBase``).
  One compiled function per robot.
* FDDP and box-FDDP against Crocoddyl's ``SolverFDDP`` / ``SolverBoxFDDP`` on the same
  double-pendulum problem (cost, iterations, trajectory), ``jax.vmap`` over four problems
  against one-by-one solves, the control bounds, iLQR reaching FDDP's optimum, and bad input
  (NaN initial state, diverging initial controls) reported by ``status`` / ``check``.
* ``solve_differentiable`` (implicit differentiation of the box-FDDP optimum) against central
  differences of re-solved problems; ``multiple_shooting`` (Levenberg-Marquardt, penalised
  defects) reaching FDDP's optimum with its ``O(1/ρ)`` error; ``gradient_shooting`` (Adam)
  decreasing the cost towards FDDP's, within the control bounds.

The models carry armature (``to_crocoddyl`` sets it in any case: Crocoddyl 3.2.1 with pin
4.1.0 computes the free dynamics without gravity when no armature is set, see
:mod:`jaxdyn.interop.crocoddyl` and ``test_to_crocoddyl_without_armature``).
"""

from __future__ import annotations

import contextlib
import warnings

import crocoddyl
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pinocchio as pin
import pytest

import jaxdyn
from jaxdyn.algorithms.aba import kernel_usable as aba_kernel_usable
from jaxdyn.backend import fused_programs, small_calls
from jaxdyn.derivatives import configuration_tangent
from jaxdyn.interop.crocoddyl import (
    control_from_pin,
    control_to_pin,
    state_from_pin,
    state_to_pin,
    to_crocoddyl,
)
from jaxdyn.trajopt import costs as C
from jaxdyn.trajopt import ddp
from jaxdyn.trajopt.dynamics import FreeDynamics, step, step_derivatives, step_plain
from jaxdyn.trajopt.implicit import solve_differentiable
from jaxdyn.trajopt.lie import state_difference, state_integrate
from jaxdyn.trajopt.shooting import gradient_shooting, multiple_shooting, shooting_cost

import oracle

DT = 0.01
ARMATURE = 0.01
FD_STEP = 1e-6


# ----------------------------------------------------------------------------- step Jacobians


def _all_derivatives(model, x, u, dynamics, checks):
    """Analytic Jacobians and, by ``checks``, ``"custom"``: ``jax.jacfwd`` through the
    ``custom_jvp`` of ``step`` (chained with ``x ⊕ dx``, ambient tangents in and out);
    ``"fd"``: central differences of ``step_plain`` in the tangent space; ``"autodiff"``: the
    autodiff mode. One program per robot."""
    nq = model.nq
    x1, Fx, Fu = step_derivatives(model, x, u, DT, dynamics)
    ndx, nu = Fx.shape[0], Fu.shape[1]
    out = dict(x1=x1, Fx=Fx, Fu=Fu)

    def to_tangent(t):
        return jnp.concatenate([configuration_tangent(model, x1[:nq], t[:nq]), t[nq:]])

    def perturbed(e):
        xe = state_integrate(model, x, e[:ndx])
        return state_difference(model, x1, step_plain(model, xe, u + e[ndx:], DT, dynamics))

    if "custom" in checks:

        def chained(d, du):
            return step(model, state_integrate(model, x, d), u + du, DT, dynamics)

        zx, zu = jnp.zeros(ndx, x.dtype), jnp.zeros(nu, x.dtype)
        Jx, Ju = jax.jacfwd(chained, (0, 1))(zx, zu)
        out["Fx_custom"] = jax.vmap(to_tangent, 1, 1)(Jx)
        out["Fu_custom"] = jax.vmap(to_tangent, 1, 1)(Ju)
    if "fd" in checks:  # one batched plain step over the 2 (ndx + nu) perturbations
        n = ndx + nu
        E = FD_STEP * jnp.eye(n, dtype=x.dtype)
        dx = jax.vmap(perturbed)(jnp.concatenate([E, -E], 0))
        F_fd = ((dx[:n] - dx[n:]) / (2 * FD_STEP)).T
        out["Fx_fd"], out["Fu_fd"] = F_fd[:, :ndx], F_fd[:, ndx:]
    if "autodiff" in checks:
        _, out["Fx_ad"], out["Fu_ad"] = step_derivatives(
            model, x, u, DT, dynamics, derivatives="autodiff"
        )
    return out


# Every check compiles another copy of the dynamics: each robot gets two besides Crocoddyl
# (arm7: central differences and the autodiff mode; quad12, where the tangent maps matter: the
# custom_jvp rule through ambient coordinates).
CHECKS = {"arm7": ("fd", "autodiff"), "quad12": ("custom",)}


@pytest.fixture(scope="module", params=list(CHECKS))
def derivative_case(request):
    case = oracle.robot_case(request.param)
    model = case.model.with_armature(ARMATURE)
    dyn = FreeDynamics.floating_base(model) if model.floating_base else FreeDynamics()
    nu = dyn.nu(model)
    rng = np.random.default_rng(7)
    s = case.states[0]
    x = np.concatenate([np.asarray(s["q"]), np.asarray(s["v"])])
    u = rng.standard_normal(nu)
    fn = jax.jit(_all_derivatives, static_argnums=4)
    out = fn(model, x, u, dyn, CHECKS[request.param])
    return case, model, dyn, x, u, jax.tree.map(np.asarray, out)


def test_step_derivatives_autodiff_fd(derivative_case):
    out = derivative_case[-1]
    checked = 0
    if "Fx_custom" in out:  # the custom_jvp rule of step (jax.jacfwd) = step_derivatives
        oracle.assert_close(out["Fx_custom"], out["Fx"], 1e-13, "Fx: jacfwd(step)")
        oracle.assert_close(out["Fu_custom"], out["Fu"], 1e-13, "Fu: jacfwd(step)")
        checked += 1
    if "Fx_fd" in out:
        oracle.assert_close(out["Fx"], out["Fx_fd"], 1e-7, "Fx analytic vs central differences")
        oracle.assert_close(out["Fu"], out["Fu_fd"], 1e-7, "Fu analytic vs central differences")
        checked += 1
    if "Fx_ad" in out:
        oracle.assert_close(out["Fx"], out["Fx_ad"], 1e-12, "Fx analytic vs autodiff")
        oracle.assert_close(out["Fu"], out["Fu_ad"], 1e-12, "Fu analytic vs autodiff")
        checked += 1
    assert checked >= 1


def _perm(conv, nv):
    """``P`` with ``dx_pin = P dx`` (tangent space)."""
    Pv = np.zeros((nv, nv))
    Pv[np.arange(nv), conv.v_to_pin_index] = 1.0
    P = np.zeros((2 * nv, 2 * nv))
    P[:nv, :nv] = Pv
    P[nv:, nv:] = Pv
    return P


def test_step_derivatives_crocoddyl(derivative_case):
    case, model, dyn, x, u, out = derivative_case
    conv, pm = case.conv, case.pin_model
    state = crocoddyl.StateMultibody(pm)
    act = (
        crocoddyl.ActuationModelFloatingBase(state)
        if model.floating_base
        else crocoddyl.ActuationModelFull(state)
    )
    dam = crocoddyl.DifferentialActionModelFreeFwdDynamics(
        state, act, crocoddyl.CostModelSum(state, act.nu)
    )
    dam.armature = np.full(model.nv, ARMATURE)
    iam = crocoddyl.IntegratedActionModelEuler(dam, DT)
    data = iam.createData()
    problem = ddp.Problem(model, x, C.Cost(()), C.Cost(()), DT, 1, dyn)
    xp, up = state_to_pin(conv, x), control_to_pin(problem, conv, u)
    iam.calc(data, xp, up)
    iam.calcDiff(data, xp, up)
    oracle.assert_close(state_from_pin(conv, data.xnext), out["x1"], 1e-12, "x_next")
    P = _perm(conv, model.nv)
    Fx = P @ out["Fx"] @ P.T
    Fu = control_to_pin(problem, conv, P @ out["Fu"])
    oracle.assert_close(Fx, data.Fx, 1e-10, "Fx vs Crocoddyl")
    oracle.assert_close(Fu, data.Fu, 1e-10, "Fu vs Crocoddyl")


def test_block_diag_assembled_without_scatter(quad12):
    """The tangent-space Jacobians' block diagonal (``lie._block_diag``, in the knot loops of a
    floating-base solve) has no scatter: XLA:CPU refused the fused solve of a floating-base
    problem over it ("Unhandled opcode for elemental IR emission: scatter"). Each block in its
    place, zeros elsewhere, NaN and inf kept where they are (against scipy's block_diag); the
    Jacobians' values: test_step_derivatives_crocoddyl (quad12)."""
    import scipy.linalg

    from jaxdyn.trajopt import lie

    model = quad12.model
    rng = np.random.default_rng(3)
    blocks = []
    for kind, b0, b1, _v0, _v1 in lie._runs(model):
        k = jaxdyn.joints.NV[kind]
        blocks.append(rng.standard_normal((b1 - b0, k, k)))
    blocks[0][0, 1, 2], blocks[-1][-1, 0, 0] = np.nan, np.inf
    ref = scipy.linalg.block_diag(*[b for run in blocks for b in run])
    out = lie._block_diag(model, [jnp.asarray(b) for b in blocks], jnp.float64)
    np.testing.assert_array_equal(np.asarray(out), ref)
    ident = lie._block_diag(model, [jnp.asarray(blocks[0]), None], jnp.float64)
    np.testing.assert_array_equal(np.asarray(ident)[6:, 6:], np.eye(model.nv - 6))
    hlo = jax.jit(lambda b: lie._block_diag(model, b, jnp.float64)).lower(blocks).as_text()
    assert "scatter" not in hlo


def test_to_crocoddyl_without_armature():
    """``to_crocoddyl`` of a model without armature sets a zero armature: the crocoddyl 3.2.1
    wheel with pin 4.1.0 computes the free dynamics without gravity when none is set (UR5 at
    rest: zero acceleration against Pinocchio's 28.7 rad/s^2). The running model's step is
    semi-implicit Euler on Pinocchio's ABA (no JAX program: numpy and Crocoddyl only)."""
    case = oracle.robot_case("ur5")
    model, pm, conv = case.model, case.pin_model, case.conv
    assert model.armature is None or not np.any(np.asarray(model.armature))
    nq, nv = model.nq, model.nv
    x0 = np.concatenate([np.asarray(case.states[0]["q"]), np.zeros(nv)])
    cost = C.Cost((C.Term(C.StateRegularization(jnp.asarray(x0)), 1.0),))
    problem = ddp.Problem(model, jnp.asarray(x0), cost, cost, DT, 1)
    cp, x0p = to_crocoddyl(problem, pm, conv)
    running, data = cp.runningModels[0], cp.runningDatas[0]
    rng = np.random.default_rng(0)
    for u in (np.zeros(nv), rng.standard_normal(nv)):
        running.calc(data, x0p, u)
        q, v = x0p[:nq], x0p[nq:]
        a = pin.aba(pm, pm.createData(), q, v, u)
        assert np.max(np.abs(a)) > 1.0  # gravity acts
        v1 = v + DT * a
        ref = np.concatenate([pin.integrate(pm, q, DT * v1), v1])
        oracle.assert_close(np.asarray(data.xnext), ref, 1e-12, "Crocoddyl step vs ABA")


# ----------------------------------------------------------------------------- solvers

HORIZON = 40


@pytest.fixture(scope="module")
def pendulum():
    case = oracle.robot_case("double_pendulum")
    return case, case.model.with_armature(ARMATURE)


def _problem(model, x0, goal, bounds=None):
    nv = model.nv
    run = C.Cost(
        (
            C.Term(C.StateRegularization(goal), 1e-1),
            C.Term(C.ControlRegularization(jnp.zeros(nv)), 1e-3),
        )
    )
    term = C.Cost((C.Term(C.StateRegularization(goal), 1e2),))
    lo = hi = None
    if bounds is not None:
        lo, hi = -bounds * jnp.ones(nv), bounds * jnp.ones(nv)
    return ddp.Problem(model, x0, run, term, DT, HORIZON, u_lower=lo, u_upper=hi)


def _states(nv, angles):
    return jnp.concatenate([jnp.asarray(angles, jnp.float64), jnp.zeros(nv)])


def _crocoddyl_solve(case, problem, box=False, th_stop=1e-9):
    cp, x0p = to_crocoddyl(problem, case.pin_model, case.conv)
    solver = crocoddyl.SolverBoxFDDP(cp) if box else crocoddyl.SolverFDDP(cp)
    solver.th_stop = th_stop
    T, nu = problem.horizon, problem.nu
    solver.solve([x0p] * (T + 1), [np.zeros(nu)] * T, 200, False, 1e-9)
    xs = state_from_pin(case.conv, np.array(solver.xs))
    us = control_from_pin(problem, case.conv, np.array(solver.us))
    return solver, xs, us


X0 = (0.3, -0.2)
GOAL = (1.4, -0.6)


@pytest.fixture(scope="module", autouse=True)
def _fused_solves():
    """This module's solves called with arrays run the fused program (``jaxdyn.config`` switch
    ``trajopt_fused_loops``, off by default: about twice the compile time): the comparisons with
    Crocoddyl below check it, test_fddp_verbose_every_n against the unfused program; the
    switch's default (off) and the small fused program: test_config.py. On a jaxlib that cannot
    compile it (``fused_programs.supported()``) the switch changes nothing."""
    with jaxdyn.config.override(trajopt_fused_loops=True):
        yield


@pytest.fixture(scope="module")
def fddp_solution(pendulum):
    _, model = pendulum
    nv = model.nv
    problem = _problem(model, _states(nv, X0), _states(nv, GOAL))
    return problem, ddp.fddp(problem, max_iter=200)


def test_fddp_matches_crocoddyl(pendulum, fddp_solution):
    case, _ = pendulum
    problem, res = fddp_solution
    assert int(res.status) == 0, res.message()
    assert bool(res.converged)
    solver, xs, us = _crocoddyl_solve(case, problem)
    np.testing.assert_allclose(float(res.cost), solver.cost, rtol=1e-8)
    # Crocoddyl's iter is the index of the converging iteration
    assert int(res.iterations) == solver.iter + 1
    oracle.assert_close(np.asarray(res.xs), xs, 1e-6, "xs")
    oracle.assert_close(np.asarray(res.us), us, 1e-6, "us")
    # the log: one entry per iteration, the last one is the returned cost
    it = int(res.iterations)
    log = np.asarray(res.log["cost"])
    assert np.all(np.isfinite(log[:it])) and np.all(np.isnan(log[it:]))
    assert log[it - 1] == float(res.cost)
    # jaxdyn's cost of Crocoddyl's trajectory
    np.testing.assert_allclose(
        float(ddp.trajectory_cost(problem, jnp.asarray(xs), jnp.asarray(us))),
        solver.cost,
        rtol=1e-12,
    )


def test_fddp_fused_program_is_one_kernel(fddp_solution, monkeypatch):
    """On the CPU, ``fddp`` called with arrays (the fixture's solve) runs the fused program of
    jaxdyn.backend.fused_programs: the solve is one call tagged ``xla_cpu_small_call`` (XLA:CPU
    emits it as one kernel; test_config's test_fused_program_is_one_kernel compiles a small one),
    compiled with the per-program options. Its result equals the unfused program's (one kernel
    per operation and knot, LAPACK in the backward pass): test_fddp_verbose_every_n (``verbose``
    runs unfused). The compiled solver's HLO: test_fused_solver_hlo (slow)."""
    problem, _ = fddp_solution
    args, static = _solve_args(problem)
    fused = ddp._solve_fused
    if not fused_programs.supported():  # an older jaxlib: the unfused program, switch or not
        assert not fused.usable(jax.tree.leaves(args))
        return
    assert fused.usable(jax.tree.leaves(args))
    assert fused.program._cache_size() >= 1  # the fixture's fddp compiled (and ran) it
    assert 'xla_cpu_small_call = "true"' in fused.lower(*args, **static).as_text()
    # inside a caller's jit the arrays are tracers (the caller's program, compiled with the
    # caller's options: unfused); the switch off: unfused
    seen = []
    jax.jit(lambda a: seen.append(fused.usable([a])) or a)(args[1])
    assert seen == [False]
    monkeypatch.setitem(jaxdyn.config._values, "trajopt_fused_loops", False)  # no cache clear
    assert not fused.usable(jax.tree.leaves(args))


def _solve_args(problem, **options):
    """The solve program's arguments of ``fddp(problem, **options)``."""
    problem, xs, us = ddp._start(problem, None, None, False)
    params, static = ddp._options({"max_iter": 200, **options}, xs.dtype)
    return (problem, xs, us, jnp.asarray(False), params), static


@pytest.mark.slow  # a second compile of the fused solver; test_fddp_fused_program_is_one_kernel
def test_fused_solver_hlo(fddp_solution):
    """The fused solver's compiled HLO: the tagged call, no custom call (LAPACK, FFI) and no
    YNNPACK fusion (neither compiles inside one kernel)."""
    problem, _ = fddp_solution
    args, static = _solve_args(problem)
    hlo = ddp._solve_fused.lower(*args, **static).compile().as_text()
    small = [ln for ln in hlo.splitlines() if " call(" in ln and "xla_cpu_small_call" in ln]
    assert small and "custom-call(" not in hlo and "ynn" not in hlo, hlo[:3000]


#: instructions of a compiled loop body that launch no XLA:CPU kernel
_FREE_OPS = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast"}


def _knot_kernels(hlo, scope, trips):
    """Kernels of one trip of the ``trips``-trip while loop of a compiled HLO text whose body
    holds the named scope ``scope`` (as benchmarks/trajopt_kernels.py counts them)."""
    import re

    comps, cur = {}, None
    for line in hlo.splitlines():
        if line.endswith("{") and not line.startswith(" "):
            cur = comps.setdefault(line.removeprefix("ENTRY ").split()[0].lstrip("%"), [])
        elif line.startswith("}"):
            cur = None
        elif cur is not None:
            cur.append(line)
    counts = []
    for line in (ln for lines in comps.values() for ln in lines):
        if " while(" not in line or f'"known_trip_count":{{"n":"{trips}"' not in line:
            continue
        body = comps[re.search(r"body=%?([\w.\-]+)", line).group(1)]
        if any(scope in ln for ln in body):
            ops = [re.match(r"\s*(?:ROOT )?%?[\w.\-]+ = .*? ([\w\-]+)\(", ln) for ln in body]
            counts.append(sum(1 for m in ops if m and m.group(1) not in _FREE_OPS))
    assert counts, f"no {trips}-trip loop holds {scope!r}"
    return max(counts)


def test_default_knot_kernels(fddp_solution):
    """One knot of the default (unfused) program's rollout and Riccati recursion, counted in
    XLA's compiled HLO (no timing): at batch 1 XLA:CPU's time is bound by the kernels per
    knot. jaxlib 0.10.2, double pendulum: 37 and 33 kernels before the knots' outputs were
    packed, the gains applied as fused sums of products, the trial cost moved after the
    rollout and ``[Fx Fu]`` arranged before the recursion; 31 and 19 after. Should XLA
    change, re-measure with ``python benchmarks/trajopt_kernels.py`` (jaxlib 0.6.2, the oldest
    supported: 33 and 21)."""
    import jaxlib

    from jaxdyn import _versions

    bound = (31, 19) if _versions.release(jaxlib.__version__) >= (0, 10) else (33, 21)
    problem, _ = fddp_solution
    problem = problem.with_bounds()
    xs, us = ddp._initial(problem, None, None)
    D, fs, _, _ = jax.jit(lambda xs, us: ddp._calc_diff(problem, ddp._knot_costs(problem), xs, us))(
        xs, us
    )
    k = jnp.zeros_like(us)
    back = jax.jit(lambda D, fs, us, k: ddp._backward(problem, D, fs, us, 1e-9, False, k))
    back = back.lower(D, fs, us, k).compile()
    B, _ = back(D, fs, us, k)
    fwd = jax.jit(
        lambda xs, us, B: ddp._forward(problem, ddp._knot_costs(problem), xs, us, B, 0.5, False)
    )
    T = problem.horizon
    rollout = _knot_kernels(fwd.lower(xs, us, B).compile().as_text(), "rollout_step", T)
    riccati = _knot_kernels(back.as_text(), "riccati_step", T)
    assert rollout <= bound[0] and riccati <= bound[1], (rollout, riccati, bound)


def _primitive_counts(jaxpr, counts):
    for eqn in jaxpr.eqns:
        counts[eqn.primitive.name] += 1
        for sub in oracle.jaxprs_in_params(eqn.params):
            _primitive_counts(sub, counts)
    return counts


def test_solve_program_holds_only_what_it_runs(fddp_solution):
    """XLA:CPU's compile time grows with the solve program's kernels (docs/trajopt.md, "Time
    to the first solve"): FDDP's program holds no initial rollout (iLQR's runs before it) and a
    problem without bounds no box QP. Traced only (no compile): two scans (the rollout and the
    Riccati recursion) and three while loops (the iterations, the backward pass's retries, the
    line search); with an initial rollout and the box QP's loop there were three and four. The
    box QP's program: test_box_fddp_matches_crocoddyl; iLQR: test_ilqr_reaches_fddp_optimum."""
    import collections

    problem, _ = fddp_solution
    assert problem.u_lower is None and problem.u_upper is None
    args, static = _solve_args(problem)
    jaxpr = jax.make_jaxpr(lambda *a: ddp._solve_program(*a, **static))(*args)
    counts = _primitive_counts(jaxpr.jaxpr, collections.Counter())
    assert (counts["scan"], counts["while"]) == (2, 3), counts


@pytest.mark.slow  # a floating-base solve compiled fused and unfused (minutes of compile); the
# scatter XLA refused in it: test_block_diag_assembled_without_scatter (default run)
def test_fused_floating_base_solve(quad12):
    """A floating-base problem (quad12 floating in space, ``FreeDynamics.floating_base``) runs
    the fused program without XLA refusing it (no warning, nothing in ``refused``) and ends
    where the unfused program does: same iterations, cost to 1e-12."""
    if not fused_programs.supported():
        pytest.skip("this jaxlib cannot compile the fused program (jaxlib < 0.10)")
    model = quad12.model.with_armature(ARMATURE)
    dyn = FreeDynamics.floating_base(model)
    nv, nu = model.nv, dyn.nu(model)
    q0 = jaxdyn.neutral_configuration(model)
    x0 = jnp.concatenate([q0, jnp.zeros(nv)])
    offset = 0.3 * np.cos(np.arange(nv))
    offset[:6] = (0.1, -0.1, 0.05, 0.0, 0.0, 0.0)
    goal = jnp.concatenate([jaxdyn.integrate(model, q0, jnp.asarray(offset)), jnp.zeros(nv)])
    run = C.Cost(
        (
            C.Term(C.StateRegularization(goal), 1e-1),
            C.Term(C.ControlRegularization(jnp.zeros(nu)), 1e-3),
        )
    )
    term = C.Cost((C.Term(C.StateRegularization(goal), 1e2),))
    problem = ddp.Problem(model, x0, run, term, DT, 10, dyn)
    args, _ = _solve_args(problem)
    assert ddp._solve_fused.usable(jax.tree.leaves(args))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a refused compile warns
        fused = ddp.fddp(problem, max_iter=100)
    assert not ddp._solve_fused.refused
    with pytest.MonkeyPatch.context() as mp:  # the unfused program (no cache clear)
        mp.setitem(jaxdyn.config._values, "trajopt_fused_loops", False)
        plain = ddp.fddp(problem, max_iter=100)
    assert int(fused.status) == 0 and int(plain.status) == 0, plain.message()
    assert int(fused.iterations) == int(plain.iterations)
    np.testing.assert_allclose(float(fused.cost), float(plain.cost), rtol=1e-12)
    oracle.assert_close(np.asarray(fused.xs), np.asarray(plain.xs), 1e-9, "xs")


@pytest.mark.slow  # child processes import jaxdyn and compile the fused solve (tens of seconds)
def test_fddp_background_fused(fddp_solution, monkeypatch, caplog):
    """The default switch ``"auto"`` with a real child process (the same path in this process:
    test_config's test_fused_program_in_the_background): the first ``fddp`` runs the plain
    program and starts the child; once it is done the next ``fddp`` runs the fused executable
    it compiled. Both end where the plain program does: same iterations, final cost to 1e-12,
    the same trajectory. A child that fails (here it cannot find the program it is asked for)
    leaves the structure on the plain program, said once on the ``jaxdyn`` logger."""
    if not fused_programs.supported():
        pytest.skip("this jaxlib cannot compile the fused program (jaxlib < 0.10)")
    problem, _ = fddp_solution
    args, static = _solve_args(problem)
    plain = ddp._solve_plain(*args, **static)
    monkeypatch.setitem(jaxdyn.config._values, "trajopt_fused_loops", "auto")  # no cache clear
    # the timed choice between fused and plain made deterministic (test_config checks both)
    monkeypatch.setattr(fused_programs.FusedJit, "keep_fused", staticmethod(lambda a, b: True))
    monkeypatch.setattr(fused_programs, "START_AFTER", 1)  # the first solve starts the child
    fused = ddp._solve_fused
    assert fused.background(jax.tree.leaves(args))
    n_ready = len(fused.ready)
    first = ddp.fddp(problem, max_iter=200)
    assert len(fused.pending) == 1
    assert fused_programs.wait(900)
    second = ddp.fddp(problem, max_iter=200)
    assert not fused.pending and not fused.failed and len(fused.ready) == n_ready + 1
    for r in (first, second):
        assert int(r.status) == 0 and int(r.iterations) == int(plain.iterations)
        np.testing.assert_allclose(float(r.cost), float(plain.cost), rtol=1e-12)
        oracle.assert_close(np.asarray(r.xs), np.asarray(plain.xs), 1e-9, "xs")
        oracle.assert_close(np.asarray(r.us), np.asarray(plain.us), 1e-9, "us")
    lost = fused_programs.fused_jit(
        ddp._solve_program, ddp._solve_plain, "trajopt_fused_loops", "jaxdyn.trajopt.ddp:_nowhere"
    )
    with caplog.at_level("INFO", logger="jaxdyn"):
        outs = [lost(*args, **static)]
        assert fused_programs.wait(300)
        outs += [lost(*args, **static), lost(*args, **static)]
    assert len(lost.failed) == 1 and not lost.ready and not lost.pending
    assert sum("stays unfused" in r.getMessage() for r in caplog.records) == 1
    for r in outs:
        assert int(r.iterations) == int(plain.iterations) and float(r.cost) == float(plain.cost)


def test_box_fddp_matches_crocoddyl(pendulum, fddp_solution):
    case, model = pendulum
    _, free = fddp_solution
    bound = 0.6 * float(np.max(np.abs(np.asarray(free.us))))  # active bounds
    problem = _problem(model, _states(model.nv, X0), _states(model.nv, GOAL), bounds=bound)
    res = ddp.fddp(problem, max_iter=200, th_stop=1e-12)
    assert int(res.status) == 0, res.message()
    us = np.asarray(res.us)
    assert np.all(np.abs(us) <= bound * (1 + 1e-12))
    assert np.sum(np.isclose(np.abs(us), bound)) > 0  # some controls at the bounds
    solver, xs_c, us_c = _crocoddyl_solve(case, problem, box=True, th_stop=1e-12)
    np.testing.assert_allclose(float(res.cost), solver.cost, rtol=1e-6)
    oracle.assert_close(us, us_c, 1e-4, "us (box)")
    assert float(res.cost) > float(free.cost)


#: Random double-pendulum problems (start, goal, control bounds; horizon 40) on which jaxdyn's
#: box-FDDP left Crocoddyl's path: it accepted, from a feasible iterate, trial steps whose
#: expected change was negative (Crocoddyl accepts those only while gaps remain, "do not re-open
#: gaps once feasibility has been achieved"). Measured before the fix, jaxdyn / Crocoddyl:
#: costs 1764.5 / 1505.6 (both 53 iterations), 2.06723 (198) / 2.06678 (57), 399.94 (max_iter) /
#: 399.28 (34), 1867.07 (max_iter) / 1866.97 (40), 1.31557 (115) / 1.31447 (127).
SPLIT_PATHS = (
    ((-1.434, 0.48), (0.96, -0.731), (0.2659, 1.7247)),
    ((0.101, -2.414), (0.388, 0.869), (0.8308, 2.3765)),
    ((-2.046, -0.093), (-0.389, 0.387), (0.5594, 0.1136)),
    ((1.14, -0.377), (-0.263, 0.654), (0.2901, 0.5891)),
    ((2.735, 2.525), (0.675, 0.552), (1.2006, 0.7283)),
)


def test_box_fddp_follows_crocoddyl_paths(pendulum, fddp_solution):
    """Box-FDDP takes Crocoddyl's iterations on problems where an acceptance rule differed
    (same iteration count, cost to 1e-9); the compiled program of the other bounded problems
    (test_box_fddp_matches_crocoddyl)."""
    case, model = pendulum
    nv = model.nv
    for i, (a, g, b) in enumerate(SPLIT_PATHS):
        problem = _problem(model, _states(nv, a), _states(nv, g), bounds=jnp.asarray(b))
        res = ddp.fddp(problem, max_iter=200)
        solver, _, us = _crocoddyl_solve(case, problem, box=True, th_stop=5e-5)
        assert int(res.status) == 0, (i, res.message())
        assert int(res.iterations) == solver.iter + 1, (i, int(res.iterations), solver.iter)
        np.testing.assert_allclose(float(res.cost), solver.cost, rtol=1e-9, err_msg=str(i))
        oracle.assert_close(np.asarray(res.us), us, 1e-6, f"us of problem {i}")


#: the programs XLA gave (compiled, or read from a persistent cache: JAX's backend-compile event
#: times both) while a list of :func:`_compiles` is open; one listener for the process (older JAX
#: cannot unregister one)
_COMPILED: list = []


def _record_compile(event, duration, **kwargs):
    if _COMPILED and event == "/jax/core/compile/backend_compile_duration":
        _COMPILED[-1].append(kwargs.get("fun_name", "?"))


jax.monitoring.register_event_duration_secs_listener(_record_compile)


@contextlib.contextmanager
def _compiles():
    """The names of the programs compiled in the ``with`` block (a list)."""
    names = []
    _COMPILED.append(names)
    try:
        yield names
    finally:
        _COMPILED.remove(names)


#: The batch of the vmapped FDDP tests: 8 problems, the initial guess passed in (fddp's
#: defaults, batched): test_vmap_equals_one_by_one, test_bad_input_reported, the reference of
#: test_solve_batch_equals_vmap and solve_batch's threads share one compiled program (the
#: fused one-problem solve that ``jax.vmap(fddp)`` called with arrays on the CPU runs).
BATCH = 8


def _vmap_fddp(batch, xs=None, us=None):
    """``jax.vmap(fddp)`` over ``batch`` from ``xs`` / ``us`` (default: each ``x0`` repeated,
    zero controls: fddp's own initial guess, batched), ``max_iter=200``."""
    T, nu = batch.horizon, batch.nu
    if xs is None:
        xs = jnp.broadcast_to(batch.x0[:, None], (batch.x0.shape[0], T + 1, batch.x0.shape[1]))
    if us is None:
        us = jnp.zeros((batch.x0.shape[0], T, nu), batch.x0.dtype)
    return jax.vmap(lambda p, x, u: ddp.fddp(p, x, u, max_iter=200))(batch, xs, us)


def _nearby_batch(model, n, bad_at):
    """``n`` problems starting within about 0.01 of ``X0`` (seed 4) and a bad one (a NaN start)
    inserted at ``bad_at``: the list and the stacked batch."""
    nv = model.nv
    rng = np.random.default_rng(4)
    problems = [
        _problem(model, _states(nv, X0 + 0.01 * rng.standard_normal(2)), _states(nv, GOAL))
        for _ in range(n)
    ]
    problems.insert(bad_at, _problem(model, _states(nv, (np.nan, 0.0)), _states(nv, GOAL)))
    return problems, jax.tree.map(lambda *a: jnp.stack(a), *problems)


def _map_lengths(jaxpr):
    """Lengths of the ``scan`` s of a jaxpr (nested ones included) whose body holds a
    ``while`` loop (a ``lax.map`` of a solve), and the number of ``while`` loops outside
    them (a batched solve's)."""
    maps, whiles = [], 0
    for eqn in jaxpr.eqns:
        subs = oracle.jaxprs_in_params(eqn.params)
        if eqn.primitive.name == "scan" and any("while" in str(j) for j in subs):
            maps.append(eqn.params["length"])
            continue
        if eqn.primitive.name == "while":
            whiles += 1
        for sub in subs:
            m, w = _map_lengths(sub)
            maps += m
            whiles += w
    return maps, whiles


def test_warm_started_solves_run_the_first_solves_program(fddp_solution):
    """A solve warm-started from a previous solution (its JAX arrays, numpy arrays or nested
    lists, other thresholds) runs the program of the first ``fddp`` call, which started from
    FDDP's default guess (built in numpy, moved by ``jax.device_put``: the same array types,
    no weak types): nothing compiles again, and the solve starts at the solution (its first
    stopping criterion already below the threshold, the cold solve's is O(10)) and stops at
    the same cost. (How many iterations it then takes to be feasible to FDDP's test at the
    optimum, where the line search's improvements are rounding, differs between JAX versions:
    2 to 5 were seen, the cold solve 4.)"""
    problem, res = fddp_solution
    guesses = {
        "jax": (res.xs, res.us),
        "numpy": (np.asarray(res.xs), np.asarray(res.us)),
        "lists": (np.asarray(res.xs).tolist(), np.asarray(res.us).tolist()),
    }
    for how, (xs, us) in guesses.items():
        with _compiles() as compiled:
            again = ddp.fddp(problem, xs, us, max_iter=200, th_stop=1e-10)
        assert not [n for n in compiled if n in ("jit(program)", "jit(_solve_program)")], how
        assert int(again.status) == 0, how
        assert float(again.log["stop"][0]) < 1e-10 < float(res.log["stop"][0]), how
        np.testing.assert_allclose(float(again.cost), float(res.cost), rtol=1e-9, err_msg=how)


def test_vmap_equals_one_by_one(pendulum, fddp_solution, monkeypatch):
    """``jax.vmap(fddp)`` called with arrays on the CPU solves the members one by one (in host
    threads, as solve_batch), and inside ``jit`` on the CPU too (the program holds a host
    callback to the same threads, no loop): both equal each member's own solve. The
    members' solves and ``fddp`` of one problem (Python-float cost weights and ``dt``, no tag)
    run the program the fixture's ``fddp`` compiled: nothing compiles again, and a member's
    result is bit-identical to its own solve's (iterations, iterates and costs)."""
    _, model = pendulum
    nv = model.nv
    rng = np.random.default_rng(3)
    x0s = [_states(nv, X0 + 0.3 * rng.standard_normal(2)) for _ in range(BATCH)]
    goals = [_states(nv, GOAL + 0.3 * rng.standard_normal(2)) for _ in range(BATCH)]
    problems = [_problem(model, a, b) for a, b in zip(x0s, goals)]
    batch = jax.tree.map(lambda *a: jnp.stack(a), *problems)
    routes, one_by_one = [], ddp._one_by_one
    monkeypatch.setattr(
        ddp, "_one_by_one", lambda *a, **k: routes.append(a[1]) or one_by_one(*a, **k)
    )
    with _compiles() as compiled:
        res_b = _vmap_fddp(batch)
        own = [ddp.fddp(p, max_iter=200) for p in problems]
    # the fused program ("program") or the unfused one (an older jaxlib): the fixture's
    assert not [n for n in compiled if n in ("jit(program)", "jit(_solve_program)")], compiled
    assert routes == [BATCH]  # one by one
    with _compiles() as compiled:
        res_j = eqx.filter_jit(_vmap_fddp)(batch)
    # inside jit the same host threads, through a host callback: the same program again
    assert routes == [BATCH, BATCH]
    assert not [n for n in compiled if n in ("jit(program)", "jit(_solve_program)")], compiled
    text = str(jax.make_jaxpr(_vmap_fddp)(batch))
    maps, whiles = _map_lengths(jax.make_jaxpr(_vmap_fddp)(batch).jaxpr)
    assert "pure_callback" in text and maps == [] and whiles == 0, (maps, whiles)
    for i, r in enumerate(own):
        assert int(r.status) == 0
        np.testing.assert_array_equal(np.asarray(res_b.xs[i]), np.asarray(r.xs), f"xs[{i}]")
        np.testing.assert_array_equal(np.asarray(res_j.xs[i]), np.asarray(r.xs), f"xs[{i}]")
        for how, rb in (("vmap", res_b), ("jit(vmap)", res_j)):
            assert int(rb.iterations[i]) == int(r.iterations), how
            oracle.assert_close(np.asarray(rb.xs[i]), np.asarray(r.xs), 1e-10, f"{how} xs[{i}]")
            np.testing.assert_allclose(float(rb.cost[i]), float(r.cost), rtol=1e-10)
    ddp.check(res_b)


@pytest.mark.slow
def test_jit_vmap_derivatives(pendulum):
    """Derivatives through ``jax.jit(jax.vmap(fddp))`` on the CPU (a host callback to the
    threads of ``jax.vmap(fddp)``, whose forward mode is that of ``lax.map`` of the one-problem
    solve): ``jax.jvp`` of the batch's costs equals each member's own ``jax.jvp`` of ``fddp``,
    and the implicit gradients of :func:`solve_differentiable` under ``jax.jit(jax.vmap)``
    equal each member's own (the members' solves and their backward passes are the same
    computations: equal to rounding)."""
    _, model = pendulum
    nv = model.nv
    rng = np.random.default_rng(5)
    problems = [
        _problem(model, _states(nv, X0 + 0.2 * rng.standard_normal(2)), _states(nv, GOAL))
        for _ in range(2)
    ]
    batch = jax.tree.map(lambda *a: jnp.stack(a), *problems)
    dx0 = jnp.asarray(rng.standard_normal(batch.x0.shape))

    def cost(p, x0):
        return ddp.fddp(eqx.tree_at(lambda q: q.x0, p, x0), max_iter=200).cost

    def batch_cost(x0):
        return jax.vmap(cost)(batch, x0)

    cost_b, tan_b = jax.jit(lambda x0, t: jax.jvp(batch_cost, (x0,), (t,)))(batch.x0, dx0)
    assert "pure_callback" in str(jax.make_jaxpr(jax.vmap(cost))(batch, batch.x0))

    def loss(p, x0):
        us = solve_differentiable(eqx.tree_at(lambda q: q.x0, p, x0), th_stop=1e-12, max_iter=200)
        return jnp.sum(us**2)

    grad_b = jax.jit(jax.grad(lambda x0: jnp.sum(jax.vmap(loss)(batch, x0))))(batch.x0)
    for i, p in enumerate(problems):
        c, t = jax.jvp(lambda x0, p=p: cost(p, x0), (p.x0,), (dx0[i],))
        np.testing.assert_allclose(float(cost_b[i]), float(c), rtol=1e-10)
        np.testing.assert_allclose(float(tan_b[i]), float(t), rtol=1e-8)
        g = jax.grad(lambda x0, p=p: loss(p, x0))(p.x0)
        oracle.assert_close(np.asarray(grad_b[i]), np.asarray(g), 1e-6, f"implicit grad [{i}]")
    # jax.vmap of each member's own jvp (the jvp innermost): the same tangents
    cost_v, tan_v = jax.vmap(lambda p, t: jax.jvp(lambda x0: cost(p, x0), (p.x0,), (t,)))(
        batch, dx0
    )
    np.testing.assert_allclose(np.asarray(cost_v), np.asarray(cost_b), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(tan_v), np.asarray(tan_b), rtol=1e-8)


def test_vmap_of_jvp_keeps_the_batch(pendulum):
    """``jax.vmap`` over problems of a ``jax.jvp`` inside it (an unbatched tangent): the solve
    sees the ``jvp`` innermost and is ``vmap`` of its ``jvp``; every output has one batch axis
    (the batched solve's route, taken because the problems' leaves were ``vmap``'s tracers,
    gave each member the whole batch: cost of shape (B, B)). Shapes only (no compile); values
    of this route: test_jit_vmap_derivatives."""
    _, model = pendulum
    nv = model.nv
    problems = [
        _problem(model, _states(nv, np.asarray(X0) + 0.1 * k), _states(nv, GOAL)) for k in range(3)
    ]
    batch = jax.tree.map(lambda *a: jnp.stack(a), *problems)
    ones = jnp.ones(2 * nv)

    def member(p):
        def res(x0):
            return ddp.fddp(eqx.tree_at(lambda q: q.x0, p, x0), max_iter=3)

        return jax.jvp(res, (p.x0,), (ones,))

    out, tan = jax.eval_shape(jax.vmap(member), batch)
    assert out.cost.shape == tan.cost.shape == (3,)
    assert out.xs.shape == tan.xs.shape == (3, batch.horizon + 1, 2 * nv)


@pytest.mark.parametrize(
    # [ilqr] slow: the rounds and compaction are the solver-independent part [fddp] checks
    "solver",
    ["fddp", pytest.param("ilqr", marks=pytest.mark.slow)],
)
def test_solve_batch_equals_vmap(pendulum, fddp_solution, solver):
    """solve_batch's rounds and compaction (``method="rounds"``), and its default on the CPU
    (``"threads"``: one-problem solves in host threads), leave every member's iterations as
    jax.vmap(fddp) has them (and as ilqr's): same iteration counts, costs and trajectories, in
    the problems' order, a bad member reported in its place. Six members start from the
    fixture's optimum of a nearby problem (a couple of iterations), one from zero controls
    (more), one is bad."""
    _, model = pendulum
    base, sol = fddp_solution
    problems, batch = _nearby_batch(model, 7, bad_at=2)
    warm = np.ones(8, bool)
    warm[5] = False  # the cold member
    xs = jnp.where(warm[:, None, None], sol.xs, jnp.broadcast_to(base.x0, sol.xs.shape))
    us = jnp.where(warm[:, None, None], sol.us, 0.0)
    if solver == "fddp":  # test_vmap_equals_one_by_one's program
        ref = _vmap_fddp(batch, xs, us)
    else:
        ref = jax.vmap(lambda p, u: ddp.ilqr(p, u, max_iter=200))(batch, us)
    schedule = []
    res = ddp.solve_batch(
        batch, xs, us, solver=solver, method="rounds", max_iter=200, round_iters=1,
        min_batch=1, schedule=schedule,
    )  # fmt: skip
    # FDDP: the batch was compacted (8 -> at most 2 members) before the slowest member
    # stopped (iLQR needs 3 iterations from either start here: nothing to compact)
    if solver == "fddp":
        assert min(size for size, _ in schedule) <= 2, (schedule, ref.iterations)
    assert schedule[-1][1] == 0
    # the default on the CPU: one problem after another in two host threads (schedule unused)
    no_rounds, compiled = [], ddp._solve_fused.program._cache_size()
    threads = ddp.solve_batch(
        batch, xs, us, solver=solver, max_iter=200, threads=2, schedule=no_rounds
    )  # fmt: skip
    assert no_rounds == []  # no batched rounds ran
    # the program of the reference's jax.vmap (one by one too): nothing compiled again
    assert ddp._solve_fused.program._cache_size() == compiled
    for how, r in (("rounds", res), ("threads", threads)):
        np.testing.assert_array_equal(np.asarray(r.status), np.asarray(ref.status), how)
        assert int(r.status[2]) >= 2  # (4 from a finite warm start: NaN derivatives)
        np.testing.assert_array_equal(np.asarray(r.iterations), np.asarray(ref.iterations), how)
        np.testing.assert_allclose(np.asarray(r.cost), np.asarray(ref.cost), rtol=1e-12)
        oracle.assert_close(np.asarray(r.us), np.asarray(ref.us), 1e-10, f"us ({solver}, {how})")
        # the logs too (NaN after each member's last iteration; batched rounds against the
        # reference's one-by-one programs round differently: 1.1e-10 seen on jaxlib 0.6.2)
        np.testing.assert_allclose(
            np.asarray(r.log["cost"]), np.asarray(ref.log["cost"]), rtol=1e-9, err_msg=how
        )
    with pytest.raises(ValueError, match="stacked along a leading axis"):
        ddp.solve_batch(problems[0])
    with pytest.raises(ValueError, match="solver must be"):
        ddp.solve_batch(batch, solver="newton")
    with pytest.raises(ValueError, match="method must be 'threads' or 'rounds'"):
        ddp.solve_batch(batch, method="pmap")
    with pytest.raises(ValueError, match="threads must be >= 1"):
        ddp.solve_batch(batch, threads=0)
    with pytest.raises(ValueError, match="us must have the batch size 8 first"):
        ddp.solve_batch(batch, us=us[:3])
    with pytest.raises(ValueError, match="stacked along a leading axis"):
        ddp.solve_sharded(problems[0])
    with pytest.raises(ValueError, match="per_device must be"):
        ddp.solve_sharded(batch, per_device="pmap")
    with pytest.raises(ValueError, match="us must have the batch size 8 first"):
        ddp.solve_sharded(batch, us=us[:3])


@pytest.mark.slow  # a third compile of the solver (the 4-device test_distributed one: slow too)
def test_solve_sharded_on_one_device_equals_vmap(pendulum, fddp_solution):
    """solve_sharded on this process's one device (one problem after another, a lax.map) has
    jax.vmap(fddp)'s statuses, iterations and costs, a bad member included."""
    _, model = pendulum
    _, sol = fddp_solution
    _, batch = _nearby_batch(model, 3, bad_at=1)
    xs = jnp.broadcast_to(sol.xs, (4,) + sol.xs.shape)
    us = jnp.broadcast_to(sol.us, (4,) + sol.us.shape)
    ref = jax.vmap(lambda p, x, u: ddp.fddp(p, x, u, max_iter=200))(batch, xs, us)
    rs = ddp.solve_sharded(batch, xs, us, max_iter=200)
    np.testing.assert_array_equal(np.asarray(rs.status), np.asarray(ref.status))
    assert int(rs.status[1]) >= 2
    np.testing.assert_array_equal(np.asarray(rs.iterations), np.asarray(ref.iterations))
    np.testing.assert_allclose(np.asarray(rs.cost), np.asarray(ref.cost), rtol=1e-12)


_FUSED_CHILD = """
import contextlib, io, json, sys
sys.path[:0] = {paths!r}
import jax
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_num_cpu_devices", 2)
import numpy as np
import jaxdyn, oracle, test_trajopt as t
from jaxdyn.trajopt import ddp
assert jaxdyn.config.fused_cpu_loops_enabled()
model = oracle.robot_case("double_pendulum").model.with_armature(t.ARMATURE)
problem = t._problem(model, t._states(model.nv, t.X0), t._states(model.nv, t.GOAL))
solve = jax.jit(lambda p: ddp.fddp(p, max_iter=200))
hlo = solve.lower(problem).compile().as_text()
r = solve(problem)
# three problems over the two CPU devices (padded to four), one after the other on each
x0s = [t.X0, (t.X0[0] + 0.5, 0.0), (t.X0[0] - 1.0, 0.3)]
batch = jax.tree.map(
    lambda *a: jax.numpy.stack(a),
    *[t._problem(model, t._states(model.nv, x), t._states(model.nv, t.GOAL)) for x in x0s],
)
buf = io.StringIO()  # verbose: XLA's threads print through sys.stdout
with contextlib.redirect_stdout(buf):
    rs = ddp.solve_sharded(batch, max_iter=200, verbose=True)
    jax.block_until_ready(rs)
    jax.effects_barrier()
one = [solve(jax.tree.map(lambda a, i=i: a[i], batch)) for i in range(3)]
print(json.dumps(dict(
    fused=hlo.count("xla_cpu_small_call"), custom=hlo.count("custom-call("),
    iterations=int(r.iterations), cost=float(r.cost), devices=len(jax.devices()),
    sharded_devices=len(rs.cost.devices()),
    sharded_iterations=np.asarray(rs.iterations).tolist(),
    one_iterations=[int(o.iterations) for o in one],
    sharded_cost=np.asarray(rs.cost).tolist(), one_cost=[float(o.cost) for o in one],
    log=buf.getvalue().splitlines(),
)))
"""


@pytest.mark.slow  # opt-in flag; test_osim's test_constrained_aba_fused_loops_route covers its use
def test_fused_cpu_loops_solve(fddp_solution):
    """JAXDYN_FUSED_CPU_LOOPS=1 in a fresh process with two CPU devices: XLA compiles the
    solver's loops into single kernels (xla_cpu_small_call in the program, no custom call left)
    and FDDP takes the same iterations to the same cost as here (default flags; LAPACK and the
    dense route); solve_sharded splits three problems over the two devices (padded to four) and
    returns each problem's own solve."""
    import json
    import os
    import subprocess
    import sys

    problem, res = fddp_solution
    here = os.path.dirname(os.path.abspath(__file__))
    code = _FUSED_CHILD.format(paths=[here, os.path.dirname(here)])
    env = dict(os.environ, JAXDYN_FUSED_CPU_LOOPS="1")
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    import jaxlib

    from jaxdyn import _versions

    if _versions.release(jaxlib.__version__) < (0, 10):
        # the flags are this jaxlib's XLA's (0.10): an older one does not start with them, and
        # jaxdyn says so at import instead of letting XLA abort the process
        assert r.returncode != 0, "an older jaxlib took the fused-loop flags"
        assert "JAXDYN_FUSED_CPU_LOOPS=1 ignored" in r.stderr, r.stderr[-3000:]
        assert "fused loops were written for jaxlib 0.10" in r.stderr, r.stderr[-3000:]
        return
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["fused"] >= 3 and out["custom"] == 0, out
    assert out["iterations"] == int(res.iterations)
    np.testing.assert_allclose(out["cost"], float(res.cost), rtol=1e-10)
    assert out["devices"] == 2 and out["sharded_devices"] == 2, out
    assert out["sharded_iterations"] == out["one_iterations"], out
    assert len(set(out["one_iterations"])) > 1, out  # the members differ
    np.testing.assert_allclose(out["sharded_cost"], out["one_cost"], rtol=1e-12)
    _check_batch_log(out["log"], out["sharded_iterations"])


def _check_batch_log(lines, iterations):
    """A batch's verbose log: one header with a problem column, then for each problem ``i``
    (and no padding copy) the lines of its iterations ``0 .. iterations[i] - 1`` in order,
    each line whole (7 columns; lines printed by several threads do not mix)."""
    assert lines[0].split() == ["problem", "iter", "cost", "stop", "step", "reg", "gap"], lines
    rows = [line.split() for line in lines[1:]]
    assert all(len(r) == 7 for r in rows), lines
    for i, n in enumerate(iterations):
        assert [int(r[1]) for r in rows if int(r[0]) == i] == list(range(n)), (i, lines)
    assert sorted({int(r[0]) for r in rows}) == list(range(len(iterations))), lines


@pytest.mark.slow  # its printed lines; test_solve_batch_equals_vmap checks the batch solve
def test_solve_batch_verbose(pendulum, capfd):
    """solve_batch(verbose=True) names each problem on its lines, through the compaction of
    the batch (four problems, the last from large controls: compacted to it alone)."""
    _, model = pendulum
    x0s = [X0, (X0[0] + 0.5, 0.0), (X0[0] - 1.0, 0.3), (X0[0] + 2.5, -1.0)]
    problems = [_problem(model, _states(model.nv, x), _states(model.nv, GOAL)) for x in x0s]
    batch = jax.tree.map(lambda *a: jnp.stack(a), *problems)
    us = jnp.zeros((4, HORIZON, model.nv)).at[3].set(100.0)
    schedule = []
    res = ddp.solve_batch(
        batch, None, us, max_iter=200, verbose=True, method="rounds", round_iters=1,
        min_batch=1, schedule=schedule,
    )  # fmt: skip
    jax.effects_barrier()
    lines = capfd.readouterr().out.splitlines()
    iterations = np.asarray(res.iterations).tolist()
    assert min(size for size, _ in schedule) == 1, (schedule, iterations)
    _check_batch_log(lines, iterations)
    # one problem after another in two threads: each problem's lines named and whole
    res = ddp.solve_batch(batch, None, us, max_iter=200, verbose=True, threads=2)
    jax.effects_barrier()
    assert np.asarray(res.iterations).tolist() == iterations
    _check_batch_log(capfd.readouterr().out.splitlines(), iterations)


def test_fddp_verbose_every_n(fddp_solution, capfd):
    """fddp's progress: silent by default; ``verbose=3`` prints the header, then iterations
    0, 3, 6, ... and the last (the same solve: same iterations and cost). ``verbose`` runs the
    unfused program (a host callback cannot sit in one kernel), the fixture's the fused one
    (test_fddp_fused_program_is_one_kernel): equal to rounding, iteration by iteration."""
    problem, res = fddp_solution
    jax.block_until_ready(ddp.fddp(problem, max_iter=200))
    jax.effects_barrier()
    assert capfd.readouterr().out == ""
    r = ddp.fddp(problem, max_iter=200, verbose=3)
    jax.effects_barrier()
    lines = capfd.readouterr().out.splitlines()
    n = int(res.iterations)
    assert int(r.iterations) == n
    np.testing.assert_allclose(float(r.cost), float(res.cost), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(r.us), np.asarray(res.us), rtol=1e-9, atol=1e-10)
    # the first iterate is infeasible and ill-conditioned: LAPACK's Cholesky and the unrolled
    # one round differently there (3e-11), not after
    log, log_fused = np.asarray(r.log["cost"])[:n], np.asarray(res.log["cost"])[:n]
    np.testing.assert_allclose(log, log_fused, rtol=1e-9)
    np.testing.assert_allclose(log[1:], log_fused[1:], rtol=1e-12)
    assert lines[0].split() == ["iter", "cost", "stop", "step", "reg", "gap"], lines
    its = [int(line.split()[0]) for line in lines[1:]]
    assert its == sorted(set(range(0, n, 3)) | {n - 1}), (its, n)
    with pytest.raises(ValueError, match="verbose must be"):
        ddp.fddp(problem, verbose=-1)


def test_ilqr_reaches_fddp_optimum(pendulum, fddp_solution):
    problem, res = fddp_solution
    r = ddp.ilqr(problem, max_iter=200)
    assert int(r.status) == 0, r.message()
    np.testing.assert_allclose(float(r.cost), float(res.cost), rtol=1e-7)
    # feasible by construction: the states are the rollout of the controls
    oracle.assert_close(np.asarray(ddp.rollout(problem, r.us)), np.asarray(r.xs), 1e-12, "xs")


def test_bad_input_reported(pendulum, fddp_solution):
    _, model = pendulum
    problem, _ = fddp_solution
    nv = model.nv
    bad = _problem(model, _states(nv, (np.nan, 0.0)), _states(nv, GOAL))
    res = ddp.fddp(bad, max_iter=200)
    assert int(res.status) == 2 and not bool(res.converged)
    assert int(res.iterations) == 0
    with pytest.raises(RuntimeError, match="non-finite cost or state at the initial guess"):
        ddp.check(res)
    # finite states, an overflowing cost (whose derivatives are finite): the first iteration's
    # derivatives sum the initial cost and stop there, as the setup does for non-finite states
    huge = _problem(model, _states(nv, (0.1, 0.0)), _states(nv, (1e200, 0.0)))
    res = ddp.fddp(huge, max_iter=200)
    assert int(res.status) == 2 and int(res.iterations) == 0
    assert not np.isfinite(float(res.cost)) and np.all(np.isnan(np.asarray(res.log["cost"])))
    # a diverging initial rollout: iLQR stops before iterating, never returns NaN silently
    us = jnp.full((HORIZON, nv), 1e200)
    r = ddp.ilqr(problem, us, max_iter=200)
    assert int(r.status) == 2
    with pytest.raises(RuntimeError, match="status 2"):
        ddp.check(r)
    # a bad member of a batch is named (test_vmap_equals_one_by_one's batch: the compiled
    # program is shared)
    batch = jax.tree.map(lambda *a: jnp.stack(a), problem, bad, *[problem] * (BATCH - 2))
    rb = _vmap_fddp(batch)
    assert np.asarray(rb.status).tolist() == [0, 2] + [0] * (BATCH - 2)
    assert np.all(np.isfinite(np.asarray(rb.xs[0])))
    with pytest.raises(RuntimeError, match="problem 1 of the batch"):
        ddp.check(rb)


# Random arm7 reaches (start 0.3 N(0, 1), goal offset 0.6 N(0, 1) per joint: problems 14 and
# 271 of benchmarks/_trajopt_problems.random_problems(arm7, 40, 512, seed 2)) whose first full
# FDDP step diverges: problem 14's trial cost is about 1e155 (finite), problem 271's has a
# first-order term d0 of about -1e9. Crocoddyl rejects both trials (a cost >= 1e30 counts as
# diverged; the th_grad test is on |d0|) and converges in 11 and 10 iterations; jaxdyn, when
# it only rejected non-finite trials and compared d0 without abs, accepted them and ended at
# the regularisation limit (14) or at max_iter with a cost of 1e10 (271).
WILD_REACHES = (14, 271)


def test_fddp_rejects_diverged_trials_as_crocoddyl():
    case = oracle.robot_case("arm7")
    model = case.model.with_armature(ARMATURE)
    noise = np.random.default_rng(2).standard_normal((512, 2, model.nv))[list(WILD_REACHES)]
    q0 = jaxdyn.neutral_configuration(model)
    zero = jnp.zeros(model.nv)
    problems = []
    for n in noise:
        qa = jaxdyn.integrate(model, q0, 0.3 * n[0])
        goal = jnp.concatenate([jaxdyn.integrate(model, qa, 0.6 * n[1]), zero])
        problems.append(_problem(model, jnp.concatenate([qa, zero]), goal))
    batch = jax.tree.map(lambda *a: jnp.stack(a), *problems)
    # the batched program (one while_loop, as on an accelerator: the case that found it);
    # jax.vmap(fddp) on the CPU solves the members one by one, in host threads (it would
    # compile the fused one-problem solve of arm7 here, a longer compile) or, inside jit, by
    # lax.map: test_vmap_equals_one_by_one covers both
    res = ddp.solve_sharded(batch, per_device="vmap", max_iter=60)
    for i, problem in enumerate(problems):
        solver, _, us = _crocoddyl_solve(case, problem)
        assert int(res.status[i]) == 0, f"problem {WILD_REACHES[i]}: status {int(res.status[i])}"
        assert int(res.iterations[i]) == solver.iter + 1
        np.testing.assert_allclose(float(res.cost[i]), solver.cost, rtol=1e-9)
        oracle.assert_close(np.asarray(res.us[i]), us, 1e-6, f"us of problem {WILD_REACHES[i]}")
        # every accepted iterate's cost stayed far below the divergence threshold
        log = np.asarray(res.log["cost"][i])[: int(res.iterations[i])]
        assert np.all(log < 1e3), log


def test_cost_derivatives_gauss_newton(pendulum):
    """l_x, l_u of a Cost are the gradients of its value (tangent space), l_xx its
    Gauss-Newton Hessian."""
    _, model = pendulum
    nv = model.nv
    x = _states(nv, (0.4, 0.1)) + jnp.concatenate([jnp.zeros(nv), jnp.array([0.3, -0.2])])
    u = jnp.array([0.2, -0.1])
    cost = C.Cost(
        (
            C.Term(C.StateRegularization(_states(nv, GOAL)), jnp.array([1.0, 2.0, 0.1, 0.2])),
            C.Term(C.ControlRegularization(jnp.zeros(nv)), 1e-2),
            C.Term(C.FrameTranslation("link2", jnp.array([0.1, 0.0, 0.3])), 3.0),
            C.Term(C.JointLimits((0, 1), jnp.array([-0.2, 0.2]), jnp.array([0.3, 0.5])), 10.0),
            C.Term(C.SphereAvoidance("link2", jnp.array([0.0, 0.05, 0.1]), 0.3), 5.0),
        )
    )

    def everything(cost, x, u):
        gx = jax.grad(lambda d: cost.value(model, state_integrate(model, x, d), u))(
            jnp.zeros(2 * nv)
        )
        gu = jax.grad(lambda uu: cost.value(model, x, uu))(u)
        r = cost.residual(model, x, u)[0]
        return cost.derivatives(model, x, u), gx, gu, cost.value(model, x, u), r

    (l, lx, lu, lxx, lxu, luu), gx, gu, value, r = jax.jit(everything)(cost, x, u)
    assert np.all(np.asarray(r[-3:]) != 0)  # both joint limits and the sphere are active
    np.testing.assert_allclose(float(l), float(value), rtol=1e-14)
    oracle.assert_close(lx, gx, 1e-12, "l_x")
    oracle.assert_close(lu, gu, 1e-12, "l_u")
    assert np.all(np.linalg.eigvalsh(np.asarray(lxx)) > -1e-12)
    oracle.assert_close(luu, 1e-2 * np.eye(nv), 1e-14, "l_uu")
    oracle.assert_close(lxu, np.zeros((2 * nv, nv)), 1e-14, "l_xu")


def test_state_regularization_jacobian_floating_base():
    """``StateRegularization``'s analytic ``R_x`` (``lie.difference_jacobians``) on quad12's
    free flyer, far from the reference (base turned by about 1 rad), equals forward-mode
    autodiff of the residual through ``x ⊕ dx``: ``l_x``, ``l_xx`` of a cost with a frame term
    (autodiff) between two state terms."""
    from jaxdyn import robots

    model = robots.load("quad12")
    nv = model.nv
    rng = np.random.default_rng(7)
    q0 = jaxdyn.neutral_configuration(model)
    q = jaxdyn.integrate(model, q0, 0.6 * rng.standard_normal(nv))
    q_ref = jaxdyn.integrate(model, q0, 0.3 * rng.standard_normal(nv))
    x = jnp.concatenate([q, rng.standard_normal(nv)])
    x_ref = jnp.concatenate([q_ref, rng.standard_normal(nv)])
    cost = C.Cost(
        (
            C.Term(C.StateRegularization(x_ref), jnp.asarray(rng.uniform(0.5, 2.0, 2 * nv))),
            C.Term(C.FrameTranslation("FL_FOOT", jnp.asarray([0.1, 0.2, 0.0])), 3.0),
            C.Term(C.StateRegularization(x), 0.5),
        )
    )

    def both(cost, x):
        r, w = cost.residual(model, x, None)
        Rx = jax.jacfwd(lambda d: cost.residual(model, state_integrate(model, x, d), None)[0])(
            jnp.zeros(2 * nv)
        )
        _, lx, _, lxx, _, _ = cost.derivatives(model, x)
        return (lx, lxx), (Rx.T @ (w * r), Rx.T @ (w[:, None] * Rx))

    got, want = jax.jit(both)(cost, x)
    oracle.assert_close(got[0], want[0], 1e-12, "l_x")
    oracle.assert_close(got[1], want[1], 1e-12, "l_xx")


def test_cost_terms_share_support_chain(pendulum, monkeypatch):
    """The terms of one ``Cost`` on frames of the same body share that body's support chain,
    and ``Cost.derivatives`` traces it once: ``R_x``'s ``jax.jacfwd``, whose primal is the
    residual, evaluates every term (one chain for both frame terms), ``R_u``'s only the terms
    that read the control (here ``Counted``: no chain), not one chain per frame term and
    evaluation (trace only, nothing compiled)."""
    _, model = pendulum
    nv = model.nv
    calls = {"residual": 0, "chain": 0}

    class Counted(eqx.Module):
        def __call__(self, model, x, u):
            calls["residual"] += 1
            return x[:1] * u[:1]

    chain = C.kin.chain_placements

    def counted_chain(*a, **k):
        calls["chain"] += 1
        return chain(*a, **k)

    monkeypatch.setattr(C.kin, "chain_placements", counted_chain)
    cost = C.Cost(
        (
            C.Term(Counted(), 1.0),
            C.Term(C.FrameTranslation("link2", jnp.zeros(3)), 1.0),
            C.Term(C.SphereAvoidance("link2", jnp.zeros(3), 0.3), 1.0),
        )
    )
    x, u = jnp.zeros(2 * nv), jnp.ones(nv)
    jax.eval_shape(lambda x, u: cost.derivatives(model, x, u), x, u)
    assert calls == {"residual": 2, "chain": 1}, calls


def test_cost_control_jacobian_rows(pendulum):
    """``Cost.derivatives`` differentiates only the terms that read the control for ``R_u``
    (jaxdyn's residuals of the state alone get zero rows): ``l_u``, ``l_xu``, ``l_uu`` equal
    those from ``jax.jacfwd`` of the whole stacked residual, with the control terms first,
    between and last, all of them, and none."""
    _, model = pendulum
    nv = model.nv
    x = _states(nv, (0.4, 0.1)) + jnp.concatenate([jnp.zeros(nv), jnp.array([0.3, -0.2])])
    u = jnp.array([0.2, -0.1])

    class Mixed(eqx.Module):  # a residual of the state and the control (not one of jaxdyn's)
        def __call__(self, model, x, u):
            return jnp.sin(x[:nv]) * u + x[nv:] ** 2 * u[::-1]

    state = C.Term(C.StateRegularization(_states(nv, GOAL)), jnp.array([1.0, 2.0, 0.1, 0.2]))
    frame = C.Term(C.FrameTranslation("link2", jnp.array([0.1, 0.0, 0.3])), 3.0)
    sphere = C.Term(C.SphereAvoidance("link2", jnp.array([0.0, 0.05, 0.1]), 0.3), 5.0)
    control = C.Term(C.ControlRegularization(jnp.array([0.05, 0.0])), 1e-2)
    mixed = C.Term(Mixed(), jnp.array([0.5, 2.0]))
    costs = {
        "first": (mixed, state, frame),
        "between": (state, control, frame, mixed, sphere),
        "last": (frame, sphere, control),
        "all": (control, mixed),
        "none": (state, frame, sphere),
    }

    def both(cost, x, u):
        r, w = cost.residual(model, x, u)
        Rx = jax.jacfwd(lambda d: cost.residual(model, state_integrate(model, x, d), u)[0])(
            jnp.zeros(2 * nv)
        )
        Ru = jax.jacfwd(lambda uu: cost.residual(model, x, uu)[0])(u)
        reference = (Ru.T @ (w * r), Rx.T @ (w[:, None] * Ru), Ru.T @ (w[:, None] * Ru))
        _, _, lu, _, lxu, luu = cost.derivatives(model, x, u)
        return (lu, lxu, luu), reference

    for name, terms in costs.items():
        got, want = jax.jit(both)(C.Cost(terms), x, u)
        for g, w_, what in zip(got, want, ("l_u", "l_xu", "l_uu")):
            oracle.assert_close(g, w_, 1e-14, f"{what} ({name})")
        if name == "none":
            assert not np.any(np.asarray(got[0])) and not np.any(np.asarray(got[2]))
        else:
            assert np.any(np.asarray(got[2]))  # the control terms' rows are there


def test_cost_derivatives_analytic_terms_floating_base(quad12):
    """The analytic state and control regularisation terms of ``Cost.derivatives``
    (``R_x = diag(d(q ⊖ q_ref)/dq, I)`` joint by joint, ``R_u = I``) against forward-mode
    autodiff of the stacked residual through ``x ⊕ dx`` (``Cost._autodiff_derivatives``, a
    second algorithm) and ``l_x``, ``l_u`` against ``jax.grad`` of the value, on quad12's
    floating base (the free joint's block is a 6 x 6 ``Jr(d)^-1``), with per-component
    weights, a frame term alongside, and as a terminal cost."""
    model = quad12.model
    nv, nq = model.nv, model.nq
    rng = np.random.default_rng(7)
    q = jaxdyn.integrate(model, jaxdyn.neutral_configuration(model), rng.standard_normal(nv))
    q_ref = jaxdyn.integrate(model, q, 0.8 * rng.standard_normal(nv))
    x = jnp.concatenate([q, jnp.asarray(rng.standard_normal(nv))])
    x_ref = jnp.concatenate([q_ref, jnp.asarray(rng.standard_normal(nv))])
    u = jnp.asarray(rng.standard_normal(nv - 6))
    w_x = jnp.asarray(rng.uniform(0.1, 2.0, 2 * nv))
    state = C.Term(C.StateRegularization(x_ref), w_x)
    w_u = jnp.asarray(rng.uniform(0.1, 2.0, nv - 6))
    control = C.Term(C.ControlRegularization(jnp.asarray(rng.standard_normal(nv - 6))), w_u)
    frame = C.Term(C.FrameTranslation(quad12.jac_frames[0], jnp.array([0.1, 0.0, 0.3])), 3.0)
    cases = {
        "state and control": (C.Cost((state, control)), u),
        "with a frame term": (C.Cost((frame, state, control)), u),
        "terminal": (C.Cost((state,)), None),
    }

    def both(cost, x, u):
        gx = jax.grad(lambda d: cost.value(model, state_integrate(model, x, d), u))(
            jnp.zeros(2 * nv)
        )
        gu = None if u is None else jax.grad(lambda uu: cost.value(model, x, uu))(u)
        return cost.derivatives(model, x, u), cost._autodiff_derivatives(model, x, u), gx, gu

    assert nq == nv + 1
    for name, (cost, uu) in cases.items():
        got, want, gx, gu = jax.jit(both)(cost, x, uu)
        for g, w_, what in zip(got, want, ("l", "l_x", "l_u", "l_xx", "l_xu", "l_uu")):
            if w_ is None:
                assert g is None, (name, what)
                continue
            oracle.assert_close(g, w_, 1e-13, f"{what} ({name})")
        oracle.assert_close(got[1], gx, 1e-12, f"l_x vs jax.grad ({name})")
        if gu is not None:
            oracle.assert_close(got[2], gu, 1e-12, f"l_u vs jax.grad ({name})")
        # the free joint's block is not the identity: the analytic Jacobian is exercised
        assert np.max(np.abs(np.asarray(got[3])[:6, :6] - np.diag(np.asarray(w_x[:6])))) > 1e-3


# [arm7] slow: quad12 (a floating base) takes every cost term the arm has
@pytest.mark.parametrize("name", ["quad12", pytest.param("arm7", marks=pytest.mark.slow)])
def test_cost_kinematic_jacobians(name):
    """The analytic ``R_x`` of the frame residuals and of ``JointLimits`` (frame Jacobian
    columns, ``Cost._kinematic_derivatives``) against three oracles at a random state: the
    cost's Gauss-Newton blocks against forward-mode autodiff of the stacked residual through
    ``x ⊕ dx`` (``Cost._autodiff_derivatives``), each term's ``R_q`` against central
    differences of its residual in the tangent space, and ``FrameTranslation`` /
    ``FramePlacement``'s ``L_x``, ``L_xx`` against Crocoddyl's ``calcDiff``
    (``ResidualModelFrameTranslation`` / ``FrameRotation`` through ``to_crocoddyl``). quad12:
    a foot and the base (the free joint's columns), a ``JointLimits`` reaching into the free
    joint (autodiff, not analytic); arm7: a frame fixed to the world, active limits on both
    sides; both: a sphere with the frame inside and one with the frame outside."""
    case = oracle.robot_case(name)
    model = case.model
    nv = model.nv
    rng = np.random.default_rng(11)
    x = jnp.concatenate([jnp.asarray(case.states[0]["q"]), jnp.asarray(rng.standard_normal(nv))])
    f0, f1 = case.jac_frames[:2]
    p0 = np.asarray(jaxdyn.frame_placement(model, x[: model.nq], f0).p)
    quat = np.array([0.9, 0.1, -0.3, 0.2])
    R_ref = jaxdyn.spatial.quat_to_rot(jnp.asarray(quat / np.linalg.norm(quat)))
    frames = (
        C.Term(C.FrameTranslation(f0, jnp.array([0.1, 0.2, 0.3])), 3.0),
        C.Term(C.FramePlacement(f1, R_ref, jnp.array([0.1, -0.2, 0.3])), jnp.arange(1.0, 7.0)),
    )
    inside = C.Term(C.SphereAvoidance(f0, jnp.asarray(p0 + [0.03, -0.02, 0.05]), 0.3), 5.0)
    outside = C.Term(C.SphereAvoidance(f1, jnp.asarray(p0 + 10.0), 0.3), 5.0)
    if model.floating_base:
        idx = (7, 8, 10)
        base_limits = C.JointLimits((2, 8), jnp.array([0.5, -3.0]), jnp.array([1.0, -2.0]))
        extra = (C.Term(base_limits, 2.0),)
    else:
        idx = (0, 1, 3)
        extra = (C.Term(C.FrameTranslation(case.jac_frames[2], jnp.array([0.0, 0.1, 0.2])), 1.0),)
    qi = np.asarray(x)[list(idx)]
    limits = C.Term(
        C.JointLimits(idx, jnp.asarray(qi + [0.1, -0.3, 0.2]), jnp.asarray(qi + [0.2, -0.1, 0.5])),
        10.0,
    )
    terms = (*frames, inside, outside, limits, *extra)
    cost = C.Cost(terms)
    analytic = [C._analytic_jacobian(t.residual, model) for t in terms]
    assert analytic == [True] * 5 + [not model.floating_base], analytic
    h = 1e-6

    def everything(cost, x):
        def fd(term):  # central differences of one residual in the tangent space of q
            E = h * jnp.eye(2 * nv)[:, :nv].T

            def r(d):
                return term.residual(model, state_integrate(model, x, d), None)

            return ((jax.vmap(r)(E) - jax.vmap(r)(-E)) / (2 * h)).T

        Rqs = [t.residual.jacobian(model, x)[1] for t, a in zip(cost.terms, analytic) if a]
        fds = [fd(t) for t, a in zip(cost.terms, analytic) if a]
        return cost.derivatives(model, x), cost._autodiff_derivatives(model, x, None), Rqs, fds

    got, want, Rqs, fds = jax.jit(everything)(cost, x)
    r = np.asarray(cost.residual(model, x, None)[0])
    assert r[9] > 0 and r[10] == 0  # the first sphere is active, the second not
    assert np.all(r[11:14] != 0)  # every limit is active
    for g, w_, what in zip(got, want, ("l", "l_x", "l_u", "l_xx", "l_xu", "l_uu")):
        if w_ is None:
            assert g is None, what
            continue
        oracle.assert_close(g, w_, 1e-12, f"{name} {what} vs autodiff")
    for t, Rq, F in zip([t for t, a in zip(terms, analytic) if a], Rqs, fds):
        oracle.assert_close(Rq, F, 1e-7, f"{name} {type(t.residual).__name__} R_q vs differences")

    # Crocoddyl's residual models: the terminal cost of the frame terms
    dyn = FreeDynamics.floating_base(model) if model.floating_base else FreeDynamics()
    problem = ddp.Problem(model, x, C.Cost(()), C.Cost(frames), DT, 1, dyn)
    cp, _ = to_crocoddyl(problem, case.pin_model, case.conv)
    tm = cp.terminalModel
    data = tm.createData()
    xp = state_to_pin(case.conv, x)
    tm.calc(data, xp)
    tm.calcDiff(data, xp)
    _, lx, _, lxx, _, _ = jax.jit(lambda x: C.Cost(frames).derivatives(model, x))(x)
    P = _perm(case.conv, nv)
    oracle.assert_close(P @ np.asarray(lx), data.Lx, 1e-10, f"{name} L_x vs Crocoddyl")
    oracle.assert_close(P @ np.asarray(lxx) @ P.T, data.Lxx, 1e-10, f"{name} L_xx vs Crocoddyl")


# ----------------------------------------------------------------------------- implicit gradients
#
# The problems below are the fixtures' double pendulum (horizon 40): every FDDP solve reuses the
# fixture's compiled program (bounds and thresholds are data). What compiles here is the
# backward pass of solve_differentiable (Hessian-vector products and the parameter VJP of the
# single-shooting gradient, second-order autodiff through the ABA: most of this section's time),
# one multiple-shooting program and one Adam program.

#: ``th_stop`` of the solves of the implicit-gradient test: FDDP's stop ``|d1 + d2/2|`` reaches
#: ~1e-23 at these optima (quadratic convergence; its round-off floor ~ Qu^2 / Quu ~ 1e-25), so the
#: controls are the optimum to round-off, which the finite differences below need.
TIGHT = 1e-20
#: The control bound of the implicit-gradient problem: 7 of its 80 optimal controls on it.
IMPLICIT_BOUND = 2.0


def _masses(p):
    return p.model.mass


def test_implicit_gradient_matches_finite_differences(pendulum):
    """``jax.vjp`` of ``solve_differentiable`` (the implicit function theorem on the free
    controls, conjugate gradients with Hessian-vector products) = central differences of
    re-solved problems: ``d/dm Σ|u*|²`` with respect to the two link masses, on the
    box-constrained problem (the controls on a bound are held there, the rest solve
    ``H_ff w = g_f``). Differentiating through an unrolled solver instead would compile a
    second program of this size (the dense Hessian of the shooting cost), so finite differences
    are the reference."""
    _, model = pendulum
    nv = model.nv
    problem = _problem(model, _states(nv, X0), _states(nv, GOAL), bounds=IMPLICIT_BOUND)
    mass = _masses(problem)

    def fddp_us(m):
        res = ddp.fddp(eqx.tree_at(_masses, problem, m), max_iter=200, th_stop=TIGHT)
        assert int(res.status) == 0, res.message()
        return np.asarray(res.us)

    us, pullback = jax.vjp(
        lambda m: solve_differentiable(
            eqx.tree_at(_masses, problem, m), th_stop=TIGHT, max_iter=200
        ),
        mass,
    )
    us_ref = fddp_us(mass)
    np.testing.assert_array_equal(np.asarray(us), us_ref)  # the forward pass is FDDP's
    active = np.abs(us_ref) == IMPLICIT_BOUND
    assert 0 < active.sum() < us_ref.size // 4, active.sum()

    # dU*/dm by central differences. Relative errors of the implicit gradients measured over two
    # losses, with and without bounds: h = 1e-5 1e-11..1.5e-10, h = 1e-4 5e-11..6e-10
    # (truncation, O(h^2)), h = 1e-6 6e-11..8e-10 (round-off, ~eps |U*| / h)
    h = 1e-5
    jac_fd = np.stack(
        [(fddp_us(mass.at[i].add(h)) - fddp_us(mass.at[i].add(-h))) / (2 * h) for i in range(2)],
        -1,
    )
    assert np.all(jac_fd[active] == 0.0)  # the same controls on the bound at m ± h
    loss_bar = 2.0 * us_ref  # d/dU Σ|u|², nonzero on the bound too (there dU*/dm = 0)
    fd = np.einsum("tu,tup->p", loss_bar, jac_fd)
    # only the backward pass compiles (jit of the whole jax.grad would compile FDDP again)
    (grad,) = jax.jit(lambda f, g: f(g))(pullback, jnp.asarray(loss_bar))
    # measured: 1.5e-10 relative to max |fd| (~130); 1e-7 leaves a margin for other CPUs and
    # BLAS while an error of the method (a wrong free set, a missing term) is O(1)
    oracle.assert_close(grad, fd, 1e-7, "d(sum |u*|^2)/d(mass): implicit vs central differences")


# ----------------------------------------------------------------------------- shooting baselines


@eqx.filter_jit
def _gaps_and_cost(problem, xs, us):
    """``max_t |f(x_t, u_t) ⊖ x_{t+1}|`` with ``|x0 ⊖ x_0|``, and the trajectory's cost."""
    model = problem.model
    gaps = jax.vmap(lambda x, u, x1: state_difference(model, x1, step_plain(model, x, u, DT)))(
        xs[:-1], us, xs[1:]
    )
    gap0 = state_difference(model, xs[0], problem.x0)
    gap = jnp.maximum(jnp.max(jnp.abs(gaps)), jnp.max(jnp.abs(gap0)))
    return gap, ddp.trajectory_cost(problem, xs, us)


#: Penalty continuations of multiple_shooting, as arrays (traced: one compiled program for all).
PENALTIES = jnp.array([1e2, 1e4, 1e6, 1e8])
PENALTIES_1E6 = jnp.array([1e2, 1e3, 1e4, 1e6])


def test_multiple_shooting_reaches_fddp_optimum(fddp_solution):
    """Levenberg-Marquardt on the penalised defects reaches FDDP's optimum with the penalty's
    ``O(1/ρ)`` error (measured: controls and states 1.0e-7 relative at ``ρ = 1e8``, cost 2.0e-7,
    defects 3.0e-9; each 100x larger when the continuation stops at ``ρ = 1e6``)."""
    pytest.importorskip("optimistix")
    problem, res = fddp_solution
    boxed = problem.with_bounds()  # the structure of test_multiple_shooting_control_bounds'
    cost_ref = float(res.cost)
    errors = []
    for penalties in (PENALTIES, PENALTIES_1E6):
        xs, us, info = multiple_shooting(boxed, penalties=penalties)
        assert np.all(np.asarray(info["success"])), info
        gap, cost = map(float, _gaps_and_cost(problem, xs, us))
        err = dict(
            us=oracle.scaled_error(us, res.us),
            xs=oracle.scaled_error(xs, res.xs),
            cost=(cost_ref - cost) / cost_ref,
            gap=gap,
        )
        # the penalty relaxes the dynamics: J(z_ρ) <= J(z_ρ) + ρ/2 |c(z_ρ)|² <= J*
        assert err["cost"] > 0, (cost, cost_ref)
        errors.append(err)
    at_1e8, at_1e6 = errors
    assert at_1e8["us"] < 1e-6 and at_1e8["xs"] < 1e-6, at_1e8
    assert at_1e8["cost"] < 2e-6 and at_1e8["gap"] < 3e-8, at_1e8
    for key in at_1e8:  # 100x the penalty, 1/100 the error
        assert 30 < at_1e6[key] / at_1e8[key] < 300, (key, at_1e6, at_1e8)


def test_multiple_shooting_refuses_control_bounds(pendulum):
    """Levenberg-Marquardt is unconstrained: a bounded problem is refused (it used to return
    the unbounded optimum, max |u| 6.24 for bounds +-2, with success=True)."""
    pytest.importorskip("optimistix")
    _, model = pendulum
    boxed = _problem(model, _states(model.nv, X0), _states(model.nv, GOAL), bounds=IMPLICIT_BOUND)
    with pytest.raises(Exception, match="finite control bounds"):
        jax.block_until_ready(multiple_shooting(boxed, penalties=PENALTIES))


#: Adam's step size and step count: measured on this problem, the cost (1088 at u = 0)
#: oscillates during the first 81 steps, then decreases at every step to 1.24x FDDP's optimum
#: at 500 steps (lr 0.3 ends at 1.26x, its last rise at step 115; lr 0.03 at 7.3x).
ADAM_LR, ADAM_STEPS = 0.1, 500

_shooting_cost = eqx.filter_jit(shooting_cost)


def test_gradient_shooting_adam(pendulum, fddp_solution):
    _, model = pendulum
    problem, res = fddp_solution
    nv = model.nv
    opt = optax.adam(ADAM_LR)  # one optimiser object: one compiled program for the three runs
    zeros = jnp.zeros((HORIZON, nv))
    free = problem.with_bounds()  # the structure of the bounded problem below (one program)
    us, costs = gradient_shooting(free, opt, ADAM_STEPS, zeros)
    costs = np.asarray(costs)
    assert costs.shape == (ADAM_STEPS,) and np.all(np.isfinite(costs))
    np.testing.assert_allclose(costs[0], float(_shooting_cost(free, zeros)), rtol=1e-12)
    # decreasing: the best cost of every block of 100 steps is below the previous block's
    # (measured ratios 0.35, 0.25, 0.31, 0.69), and every step lowers it after step 200 (the
    # last rise measured at step 81)
    best = costs.reshape(5, 100).min(1)
    assert np.all(best[1:] < best[:-1]), best
    assert np.all(np.diff(costs[200:]) <= 0)
    final = float(_shooting_cost(free, us))
    assert final <= costs[-1]
    # never below FDDP's (local) optimum, within 1.5x of it (measured 1.244x)
    assert float(res.cost) * (1 - 1e-9) <= final < 1.5 * float(res.cost), (final, res.cost)

    # bounds: the iterates are projected on them (the unbounded Adam result exceeds 1.0)
    bound = 1.0
    boxed = _problem(model, _states(nv, X0), _states(nv, GOAL), bounds=bound)
    us_b, costs_b = gradient_shooting(boxed, opt, ADAM_STEPS, zeros)
    assert float(jnp.max(jnp.abs(us))) > bound
    assert float(jnp.max(jnp.abs(us_b))) <= bound
    assert int(jnp.sum(jnp.abs(us_b) == bound)) > 0
    res_b = ddp.fddp(boxed, max_iter=200, th_stop=1e-12)
    assert int(res_b.status) == 0, res_b.message()
    final_b = float(_shooting_cost(boxed, us_b))
    assert float(res_b.cost) * (1 - 1e-9) <= final_b < float(np.asarray(costs_b)[0]) / 100

    # a non-finite cost from the start: no update, NaN costs, the initial controls returned
    huge = zeros + 1e200
    us_n, costs_n = gradient_shooting(free, opt, ADAM_STEPS, huge)
    assert np.all(np.isnan(np.asarray(costs_n)))
    np.testing.assert_array_equal(np.asarray(us_n), np.asarray(huge))


def test_contact_dynamics_derivatives_and_guard():
    """ContactDynamics (the equations of constrained_aba inside the trajopt step, solved
    through M and the Delassus matrix; arm7 with its end effector held at a point by
    Baumgarte-stabilised rows): the acceleration and the constraint force equal
    ``constrained_aba``'s (articulated-body passes, a second algorithm); the partials of the
    acceleration in the tangent space agree with central differences and with the step's
    autodiff mode (forward-mode autodiff through the solve); a non-finite state gives a NaN
    acceleration
    with value checks on (a solver rejects such a trial step instead of stopping); and the
    step's program holds no value check (a custom call, which fused CPU loops cannot fuse and
    a GPU answers with a host round trip per knot)."""
    from jaxdyn import Connect, robots
    from jaxdyn.trajopt.dynamics import ContactDynamics, step

    model = robots.load("arm7").with_armature(0.01)
    rng = np.random.default_rng(3)
    q = jaxdyn.integrate(model, jaxdyn.neutral_configuration(model), 0.3 * rng.standard_normal(7))
    target = jaxdyn.frame_placement(model, q, "ee_joint").p + 0.01
    dyn = ContactDynamics(
        (Connect("ee_joint", "local_world_aligned", target=tuple(map(float, target))),),
        baumgarte=(10.0, 2.0),
    )
    v, u = jnp.asarray(rng.standard_normal(7)), jnp.asarray(rng.standard_normal(7))
    acc = jax.jit(lambda q, v, u: dyn.acceleration(model, q, v, u))
    derivatives = jax.jit(lambda q, v, u: dyn.derivatives(model, q, v, u))  # also at NaN below
    a, a_q, a_v, a_u = derivatives(q, v, u)
    np.testing.assert_allclose(np.asarray(a), np.asarray(acc(q, v, u)), rtol=1e-12, atol=1e-12)
    ref = jax.jit(
        lambda q, v, u: jaxdyn.constrained_aba(
            model, q, v, u, dyn.constraints, baumgarte=(10.0, 2.0)
        )
    )(q, v, u)
    got = jax.jit(lambda q, v, u: dyn._solve(model, q, v, u))(q, v, u)
    oracle.assert_close(np.asarray(got[0]), np.asarray(ref.qdd), 1e-11, "a vs constrained_aba")
    oracle.assert_close(np.asarray(got[1]), np.asarray(ref.lam), 1e-11, "λ vs constrained_aba")
    x = jnp.concatenate([q, v])
    both = jax.jit(
        lambda x, u: [step_derivatives(model, x, u, 0.01, dyn, d) for d in ("analytic", "autodiff")]
    )(x, u)
    for i, name in ((1, "Fx"), (2, "Fu")):
        oracle.assert_close(np.asarray(both[0][i]), np.asarray(both[1][i]), 1e-10, name)
    h, eye = 1e-6, np.eye(7)

    def central(f):
        return np.stack([(f(h * e) - f(-h * e)) / (2 * h) for e in eye], 1)

    fd_q = central(lambda d: np.asarray(acc(jaxdyn.integrate(model, q, jnp.asarray(d)), v, u)))
    fd_v = central(lambda d: np.asarray(acc(q, v + d, u)))
    fd_u = central(lambda d: np.asarray(acc(q, v, u + d)))
    for name, got, ref in (("a_q", a_q, fd_q), ("a_v", a_v, fd_v), ("a_u", a_u, fd_u)):
        oracle.assert_close(np.asarray(got), ref, 1e-6, name)
    assert np.all(np.isnan(np.asarray(acc(q.at[0].set(jnp.nan), v, u))))
    # the derivatives (solved at a finite stand-in state) are NaN too, partials included
    for out in derivatives(q.at[0].set(jnp.nan), v, u):
        assert np.all(np.isnan(np.asarray(out)))
    x = jnp.concatenate([q, v])

    def rollouts(X, U):  # vmap batches the scan's body after tracing it (batching rules later)
        def one(x, us):
            return jax.lax.scan(lambda x, u: (step(model, x, u, 0.01, dyn),) * 2, x, us)[1]

        return jax.vmap(one)(X, U)

    for f, args in (
        (lambda x, u: step(model, x, u, 0.01, dyn), (x, u)),
        (rollouts, (jnp.stack([x] * 3), jnp.zeros((3, 4, 7)))),
    ):
        outside, inside = oracle.callbacks(jax.make_jaxpr(f)(*args).jaxpr)
        assert not outside and not inside, (outside, inside)


@pytest.mark.slow
def test_contact_dynamics_placement_seed(quad12):
    """ContactDynamics' partials start forward-mode autodiff from the body placements moved
    by the world twists ``S dq`` (``_placement_seed``), not from ``integrate(q, dq)``: on
    quad12 (a free joint) with every kind of row (connect and weld, local and world-aligned,
    log6 and decoupled errors, Baumgarte position gains, damping), at random states, the
    residuals' partials equal those of autodiff through ``integrate`` (the previous path, a
    second computation) to 1e-12, and the step's Jacobians equal the step's autodiff mode
    (forward-mode autodiff through the constrained solve, an independent route) to 1e-10."""
    from jaxdyn import Connect, Weld
    from jaxdyn.trajopt.dynamics import ContactDynamics, _placement_seed

    model = quad12.model.with_armature(0.01)
    nv = model.nv
    rng = np.random.default_rng(11)
    q = jaxdyn.integrate(model, jaxdyn.neutral_configuration(model), 0.3 * rng.standard_normal(nv))
    q = q.at[2].add(0.3)
    feet = {f: jaxdyn.frame_placement(model, q, f) for f in ("FL_FOOT", "FR_FOOT", "HL_FOOT")}

    def near(f):  # a target a few millimetres off the frame: non-zero Baumgarte errors
        return tuple(float(c) + 0.004 for c in feet[f].p)

    p1, p2, p3 = near("FL_FOOT"), near("FR_FOOT"), near("HL_FOOT")
    c, s = np.cos(0.01), np.sin(0.01)  # the weld's target turned 0.01 rad about x
    R3 = np.asarray(feet["HL_FOOT"].R) @ np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    dyn = ContactDynamics(
        (
            Connect("FL_FOOT", "local_world_aligned", target=p1),
            Connect("FR_FOOT", "local", offset=(0.01, -0.02, 0.0), target=p2),
            Weld("HL_FOOT", "local", target=(R3, p3)),
            Weld("base_link", "local_world_aligned", offset=(0.05, 0.0, 0.0), error="decoupled",
                 target=(np.eye(3), (0.0, 0.0, 0.3))),
        ),
        FreeDynamics.floating_base(model).actuation,
        baumgarte=(50.0, 10.0),
        damping=1e-3,
    )  # fmt: skip
    v, u = jnp.asarray(rng.standard_normal(nv)), jnp.asarray(rng.standard_normal(nv - 6))
    x = jnp.concatenate([q, v])

    @jax.jit
    def both(q, v, u, x):
        zero = jnp.zeros(nv, q.dtype)
        seed = _placement_seed(model, q)
        out = []
        for placements in (seed, None):
            out.append(
                jax.jacfwd(
                    lambda dq, vv, p=placements: dyn._residuals(model, q, dq, vv, u, p)[0], (0, 1)
                )(zero, v)
            )
        steps = [step_derivatives(model, x, u, 0.01, dyn, d) for d in ("analytic", "autodiff")]
        return out, steps

    (seeded, plain), (analytic, autodiff) = both(q, v, u, x)
    for i, side in enumerate(("R", "g")):
        for j, arg in enumerate(("q", "v")):
            ref = np.asarray(plain[i][j])
            assert np.max(np.abs(ref)) > 1e-3, (side, arg)  # not trivially zero
            oracle.assert_close(np.asarray(seeded[i][j]), ref, 1e-12, f"{side}_{arg}")
    for i, name in ((1, "Fx"), (2, "Fu")):
        oracle.assert_close(np.asarray(analytic[i]), np.asarray(autodiff[i]), 1e-10, name)


# ------------------------------------------------------------------------------ frame costs
@pytest.mark.parametrize("name", oracle.robot_params("quad12", "talos_full"))
def test_frame_costs_against_pinocchio(name):
    """``FrameTranslation`` / ``FramePlacement`` residuals (computed on the frame's support
    chain, ``kinematics.frame_pose``) against Pinocchio's ``oMf`` and ``log3`` at a random state:
    a foot and the base of quad12, a sole and a fingertip of talos_full."""
    case = oracle.robot_case(name)
    m, pin_out = case.model, case.pin(0)
    x = jnp.concatenate([jnp.asarray(case.states[0]["q"]), jnp.zeros(m.nv)])
    quat = np.array([0.9, 0.1, -0.3, 0.2])
    R_ref = np.asarray(jaxdyn.spatial.quat_to_rot(jnp.asarray(quat / np.linalg.norm(quat))))
    p_ref = np.array([0.1, -0.2, 0.3])
    frames = case.jac_frames
    res = jax.jit(
        lambda x: [
            (
                C.FrameTranslation(f, p_ref)(m, x, None),
                C.FramePlacement(f, R_ref, p_ref)(m, x, None),
            )
            for f in frames
        ]
    )(x)
    for f, (rt, rp) in zip(frames, res):
        R, p = pin_out["frames_R"][f], pin_out["frames_p"][f]
        oracle.assert_close(rt, p - p_ref, 1e-12, f"{name} {f}: FrameTranslation")
        ref = np.concatenate([pin.log3(R_ref.T @ R), p - p_ref])
        oracle.assert_close(rp, ref, 1e-12, f"{name} {f}: FramePlacement")


def test_batch_one_routes(pendulum, fddp_solution, monkeypatch):
    """One problem factors Q_uu with LAPACK and takes jaxdyn's ABA kernel in its rollouts (with
    the switches ``cpu_kernels`` and ``fused_unbatched`` off, aba's dense route on deep float64
    trees); the batched solve (jax.vmap of the
    solve program: accelerators, solve_batch's rounds, solve_sharded's "vmap") must not (a
    LAPACK call under vmap loops over the batch): the batching rules keep the unrolled
    factorisation and the ABA sweeps. jax.vmap(fddp) traced on the CPU calls the host threads
    of jax.vmap(fddp) (a host callback), lax.map of the one-problem solve (the callback's
    derivatives) keeps LAPACK. Checked on the traced
    programs (no compilation). Last
    in this file: its ``jax.clear_caches()`` (the
    fused-loop flag changes the traces) would make every later test compile FDDP again; the
    solve with ``max_iter=200`` is the fixture's trace, taken from JAX's cache."""
    problem, _ = fddp_solution

    def lapack(fn, *args):
        return "cholesky" in str(jax.make_jaxpr(fn)(*args))

    batch = jax.tree.map(lambda a: jnp.stack([a, a]), problem)
    assert lapack(lambda p: ddp.fddp(p, max_iter=200), problem)
    # traced jax.vmap(fddp): a host callback (the members' solves run outside the program);
    # lax.map of the one-problem solve (its derivatives' form): LAPACK there
    one = lambda p: ddp.fddp(p, max_iter=3)  # noqa: E731
    assert "pure_callback" in str(jax.make_jaxpr(jax.vmap(one))(batch))
    assert lapack(lambda b: jax.lax.map(one, b), batch)
    params, static = ddp._options(dict(max_iter=3), problem.x0.dtype)

    def batched(p):
        p, xs, us = ddp._start(p, None, None, False)
        return ddp._solve(p, xs, us, jnp.asarray(False), params, **static)

    assert not lapack(jax.vmap(batched), batch)
    case = oracle.robot_case("arm7")  # 7 levels: the dense route
    model = case.model.with_armature(ARMATURE)
    x = jnp.concatenate([jnp.asarray(case.states[0]["q"]), jnp.asarray(case.states[0]["v"])])
    u = jnp.zeros(model.nv)

    def one(x, u):
        return step_plain(model, x, u, DT)

    # the rollouts' aba: jaxdyn's C kernel where it runs (issues 52/53: one custom call where
    # XLA's code was dozens of kernels), no LAPACK call
    if aba_kernel_usable(model, x.dtype):
        assert "jaxdyn_aba" in str(jax.make_jaxpr(lambda x, u: one(x, u))(x, u))
        assert not lapack(lambda x, u: one(x, u), x, u)
    # XLA's code (switch cpu_kernels off): aba in one XLA:CPU kernel (switch fused_unbatched, on
    # by default) takes the sweeps, no LAPACK call; with the switch off, the dense route
    monkeypatch.setitem(jaxdyn.config._values, "cpu_kernels", False)
    jax.clear_caches()  # (the switch is read when tracing)
    assert "jaxdyn_aba" not in str(jax.make_jaxpr(lambda x, u: one(x, u))(x, u))
    assert not lapack(lambda x, u: one(x, u), x, u) or not small_calls.usable()
    monkeypatch.setitem(jaxdyn.config._values, "fused_unbatched", False)
    assert lapack(one, x, u)
    assert not lapack(jax.vmap(one), jnp.stack([x, x]), jnp.stack([u, u]))
    # and the two routes agree
    np.testing.assert_allclose(
        np.asarray(jax.jit(one)(x, u)),
        np.asarray(jax.jit(jax.vmap(one))(jnp.stack([x, x]), jnp.stack([u, u]))[0]),
        rtol=1e-12,
        atol=1e-12,
    )
    # fused CPU loops (jaxdyn.config.fused_cpu_loops): no LAPACK call in one problem's loops
    # either (XLA does not fuse a loop holding a custom call)
    monkeypatch.setattr(jaxdyn.config, "fused_cpu_loops_enabled", lambda: True)
    jax.clear_caches()  # the traces above are cached (in a process the flags never change)
    assert not lapack(lambda p: ddp.fddp(p, max_iter=3), problem)
    assert not lapack(one, x, u)
    monkeypatch.undo()
    jax.clear_caches()

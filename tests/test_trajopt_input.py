"""Bad trajectory problems are refused at construction (issue 51 item 5, issue 52): each case
used to be accepted and either "converged" to a wrong answer (a control pinned outside its
bound, a negative cost, a 3-vector reference broadcast against a 4-state), ended with "the
regularisation reached its maximum", or failed deep inside JAX ("sub got incompatible
shapes"). Now ``Problem(...)`` raises ``ValueError`` naming the argument and the expected
shape or range. No compilation: these tests only build problems."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn import robots
from jaxdyn.trajopt import costs as C
from jaxdyn.trajopt import ddp


@pytest.fixture(scope="module")
def model():
    return robots.load("double_pendulum").with_armature(0.01)


def _costs(goal=None, u_ref=None, weight=1e-1, frame=None):
    goal = jnp.zeros(4) if goal is None else goal
    u_ref = jnp.zeros(2) if u_ref is None else u_ref
    terms = [C.Term(C.StateRegularization(goal), weight), C.Term(C.ControlRegularization(u_ref))]
    if frame is not None:
        terms.append(C.Term(frame, 1.0))
    return C.Cost(tuple(terms)), C.Cost((C.Term(C.StateRegularization(jnp.zeros(4)), 1e2),))


def _problem(model, **kw):
    args = dict(
        model=model,
        x0=jnp.array([np.pi, 0.0, 0.0, 0.0]),
        running=_costs()[0],
        terminal=_costs()[1],
        dt=0.01,
        horizon=10,
    )
    args.update(kw)
    return ddp.Problem(**args)


def test_valid_problem_builds(model):
    p = _problem(model, u_lower=-jnp.ones(2), u_upper=jnp.ones(2))
    assert p.nu == 2
    # equal bounds (a control fixed) and infinite ones are fine
    _problem(model, u_lower=jnp.array([0.5, -jnp.inf]), u_upper=jnp.array([0.5, jnp.inf]))
    # built under vmap: shapes checked on the members, values unknown there
    x0s = jnp.zeros((3, 4))
    batch = jax.vmap(lambda x: _problem(model, x0=x))(x0s)
    assert batch.x0.shape == (3, 4)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(u_lower=jnp.array([0.5, -1.0]), u_upper=jnp.array([0.2, 1.0])),
         r"u_lower > u_upper for controls \[0\]"),
        (dict(u_lower=jnp.ones(2), u_upper=-jnp.ones(2)),
         r"u_lower > u_upper for controls \[0, 1\]"),
        (dict(u_lower=jnp.array([jnp.nan, -1.0]), u_upper=jnp.ones(2)),
         r"u_lower has NaN entries \[0\]"),
        (dict(u_upper=jnp.array([1.0, jnp.nan])), r"u_upper has NaN entries \[1\]"),
        (dict(u_lower=-jnp.ones(3), u_upper=jnp.ones(3)),
         r"u_lower has shape \(3,\), expected \(nu,\) = \(2,\)"),
        (dict(u_upper=jnp.ones(1)), r"u_upper has shape \(1,\), expected \(nu,\) = \(2,\)"),
        (dict(dt=-0.01), r"dt must be a finite time step > 0, got -0.01"),
        (dict(dt=0.0), r"dt must be a finite time step > 0"),
        (dict(dt=jnp.nan), r"dt must be a finite time step > 0"),
        (dict(dt=jnp.ones(2) * 0.01), r"dt has shape \(2,\), expected a scalar"),
        (dict(horizon=-1), r"horizon must be an integer >= 1, got -1"),
        (dict(horizon=0), r"horizon must be an integer >= 1, got 0"),
        (dict(horizon=2.5), r"horizon must be an integer >= 1, got 2.5"),
        (dict(x0=jnp.zeros(3)), r"x0 has shape \(3,\), expected \(nq \+ nv,\) = \(4,\)"),
        (dict(x0=jnp.zeros((2, 4))), r"x0 has shape \(2, 4\), expected \(nq \+ nv,\) = \(4,\)"),
    ],
)  # fmt: skip
def test_bad_problem_arguments(model, kw, match):
    with pytest.raises(ValueError, match=match):
        _problem(model, **kw)


@pytest.mark.parametrize(
    "costs, match",
    [
        (dict(goal=jnp.zeros(3)),
         r"running.terms\[0\]: StateRegularization.reference has shape \(3,\), expected "
         r"\(nq \+ nv,\) = \(4,\)"),
        (dict(u_ref=jnp.zeros(3)),
         r"running.terms\[1\]: ControlRegularization.reference has shape \(3,\), expected "
         r"\(nu,\) = \(2,\)"),
        (dict(weight=jnp.ones(3)),
         r"running.terms\[0\]: weight of StateRegularization has shape \(3,\), expected \(\) or "
         r"\(4,\)"),
        (dict(frame=C.FrameTranslation("link2", jnp.zeros(2))),
         r"running.terms\[2\]: FrameTranslation.reference has shape \(2,\), expected \(3,\)"),
        (dict(frame=C.FramePlacement("link2", jnp.eye(3), jnp.zeros(1))),
         r"running.terms\[2\]: FramePlacement.translation has shape \(1,\), expected \(3,\)"),
        (dict(frame=C.FramePlacement("link2", jnp.eye(2), jnp.zeros(3))),
         r"FramePlacement.rotation has shape \(2, 2\), expected \(3, 3\)"),
        (dict(frame=C.CenterOfMass(jnp.zeros(4))),
         r"CenterOfMass.reference has shape \(4,\), expected \(3,\)"),
        (dict(frame=C.SphereAvoidance("link2", jnp.zeros(2), 0.1)),
         r"SphereAvoidance.center has shape \(2,\), expected \(3,\)"),
        (dict(frame=C.JointLimits((0, 1), jnp.zeros(1), jnp.ones(2))),
         r"JointLimits.lower has shape \(1,\), expected \(len\(indices\),\) = \(2,\)"),
        (dict(frame=C.JointLimits((0, 5), jnp.zeros(2), jnp.ones(2))),
         r"JointLimits.indices \[5\] outside \[0, nq = 2\)"),
    ],
)  # fmt: skip
def test_bad_cost_shapes(model, costs, match):
    running, terminal = _costs(**costs)
    with pytest.raises(ValueError, match=match):
        _problem(model, running=running, terminal=terminal)


def test_bad_terminal_cost_and_frame(model):
    running, _ = _costs()
    with pytest.raises(
        ValueError, match=r"terminal.terms\[1\]: ControlRegularization in a terminal"
    ):
        _problem(model, terminal=running)
    running, terminal = _costs(frame=C.FrameTranslation("no_such_frame", jnp.zeros(3)))
    with pytest.raises((ValueError, KeyError), match="no_such_frame"):
        _problem(model, running=running, terminal=terminal)
    with pytest.raises(TypeError, match="expected a Cost"):
        _problem(model, running=(C.Term(C.StateRegularization(jnp.zeros(4))),))


@pytest.mark.parametrize(
    "costs, match",
    [
        (dict(weight=-1.0),
         r"running.terms\[0\]: weight of StateRegularization must be finite and >= 0"),
        (dict(weight=jnp.array([1.0, jnp.nan, 1.0, 1.0])),
         r"running.terms\[0\]: weight of StateRegularization must be finite and >= 0"),
        (dict(frame=C.JointLimits((0, 1), jnp.array([0.5, -1.0]), jnp.array([0.2, 1.0]))),
         r"running.terms\[2\]: JointLimits.lower > upper for entries \[0\]"),
        (dict(frame=C.JointLimits((0, 1), jnp.array([-1.0, jnp.nan]), jnp.ones(2))),
         r"running.terms\[2\]: JointLimits.lower has NaN entries \[1\]"),
        (dict(frame=C.JointLimits((0, 1), -jnp.ones(2), jnp.array([jnp.nan, 1.0]))),
         r"running.terms\[2\]: JointLimits.upper has NaN entries \[0\]"),
    ],
)  # fmt: skip
def test_bad_cost_values(model, costs, match):
    """Negative or NaN weights (a cost unbounded below: the solver "failed" at its maximum
    regularisation) and inverted or NaN joint-limit bounds (a penalty on every
    configuration) are refused by name; weight 0 and infinite bounds are fine."""
    running, terminal = _costs(**costs)
    with pytest.raises(ValueError, match=match):
        _problem(model, running=running, terminal=terminal)
    ok = C.JointLimits((0, 1), jnp.array([-jnp.inf, -1.0]), jnp.array([1.0, jnp.inf]))
    _problem(model, running=_costs(weight=0.0, frame=ok)[0])


def test_contact_dynamics_zero_kp_needs_no_target(model):
    """A Baumgarte ``kp`` of zero given as a number needs no constraint target, also under
    ``jax.jit``, where the gains reach ``constrained_aba`` as tracers (the solvers jit the
    problem: the solo12 gaits against Crocoddyl use ``baumgarte=(0, kd)``); a ``kp`` that is
    not zero still asks for the target by name."""
    from jaxdyn.constraints import Connect
    from jaxdyn.trajopt.dynamics import ContactDynamics

    c = (Connect("link2"),)
    q, v, u = jnp.asarray([0.3, -0.2]), jnp.asarray([0.1, 0.4]), jnp.asarray([0.5, -0.1])

    def acc(d, q, v, u):
        return d.acceleration(model, q, v, u)

    dyn = ContactDynamics(c, baumgarte=(0.0, 2.0), damping=1e-3)
    assert dyn.kp_zero
    eager = acc(dyn, q, v, u)
    assert np.all(np.isfinite(eager))
    np.testing.assert_allclose(jax.jit(acc)(dyn, q, v, u), eager, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"constraints\[0\] Connect\('link2'.*has no target"):
        jax.jit(acc)(ContactDynamics(c, baumgarte=(1.0, 2.0), damping=1e-3), q, v, u)


def test_bad_dynamics(model):
    """``ContactDynamics`` refuses negative or NaN Baumgarte gains and damping (passed to
    ``constrained_aba`` unchecked inside the solvers: a silently unstable stabilisation),
    ``baumgarte`` that is no pair, constraints that are not ``Weld`` / ``Connect``, and a
    non-matrix ``actuation``; ``Problem`` and ``step`` refuse an ``actuation`` whose rows are
    not ``nv`` and ``step`` a ``dt`` that is not a finite scalar > 0 (all before compiling)."""
    from jaxdyn.constraints import Connect
    from jaxdyn.trajopt.dynamics import ContactDynamics, FreeDynamics, step

    c = (Connect("link2"),)
    for kw, match in [
        (dict(baumgarte=(-1.0, 1.0)), r"ContactDynamics: baumgarte kp must be finite and >= 0"),
        (dict(baumgarte=(1.0, jnp.nan)), r"ContactDynamics: baumgarte kd must be finite and >= 0"),
        (dict(baumgarte=(1.0, 1.0, 1.0)), r"baumgarte must be None or a pair \(kp, kd\)"),
        (dict(damping=-1e-3), r"ContactDynamics: damping must be finite and >= 0, got -0.001"),
        (dict(damping=jnp.inf), r"ContactDynamics: damping must be finite and >= 0"),
        (dict(actuation=jnp.ones(2)), r"ContactDynamics: actuation has shape \(2,\), expected"),
    ]:
        with pytest.raises(ValueError, match=match):
            ContactDynamics(c, **kw)
    with pytest.raises(ValueError, match=r"ContactDynamics: constraints\[0\] is a str"):
        ContactDynamics(("link2",))
    with pytest.raises(ValueError, match=r"ContactDynamics: constraints is empty"):
        ContactDynamics(())
    with pytest.raises(ValueError, match=r"FreeDynamics: actuation has shape \(2, 2, 2\)"):
        FreeDynamics(jnp.ones((2, 2, 2)))
    assert ContactDynamics(list(c), baumgarte=(0.0, 2.0)).constraints == c  # a list: a tuple
    # gains traced under vmap: shapes only
    jax.vmap(lambda k: ContactDynamics(c, baumgarte=(k, 1.0)))(jnp.ones(3))
    rows = r"dynamics.actuation has shape \(3, 2\), expected \(nv, nu\) = \(2, nu\)"
    for dyn in (FreeDynamics(jnp.ones((3, 2))), ContactDynamics(c, jnp.ones((3, 2)))):
        with pytest.raises(ValueError, match=r"Problem: " + rows):
            _problem(model, dynamics=dyn)
        with pytest.raises(ValueError, match=r"step: " + rows):
            step(model, jnp.zeros(4), jnp.zeros(2), 0.01, dyn)
    for dt, match in [(-0.01, r"step: dt must be a finite time step > 0, got -0.01"),
                      (jnp.nan, r"step: dt must be a finite time step > 0"),
                      (jnp.ones(2), r"step: dt has shape \(2,\), expected a scalar")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            step(model, jnp.zeros(4), jnp.zeros(2), dt)


_NO_COMPILE_CHILD = """
import jax
jax.config.update("jax_enable_x64", True)
import jax.monitoring
import numpy as np

compiled = []


def record(event, duration, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
        compiled.append(kwargs.get("fun_name", "?"))


jax.monitoring.register_event_duration_secs_listener(record)

import jaxdyn
from jaxdyn import Connect, robots
from jaxdyn.algorithms.kinematics import frame_positions_numpy
from jaxdyn.algorithms.rnea import gravity_forces_numpy
from jaxdyn.trajopt import costs as C
from jaxdyn.trajopt import ddp
from jaxdyn.trajopt.dynamics import ContactDynamics, FreeDynamics

arm = robots.load("arm7").with_armature(0.01)
q = np.full(arm.nv, 0.3)
u_g = jax.device_put(gravity_forces_numpy(arm, q))
target = jax.device_put(frame_positions_numpy(arm, q, ["ee"])[0])
x0 = jax.device_put(np.concatenate([q, np.zeros(arm.nv)]))
run = C.Cost((C.Term(C.StateRegularization(x0), 1e-2), C.Term(C.ControlRegularization(u_g), 1e-3),
              C.Term(C.JointLimits.from_model(arm, margin=0.05), 1e3)))
term = C.Cost((C.Term(C.FrameTranslation("ee", target), 1e4),))
problem = ddp.Problem(arm, x0, run, term, 0.01, 20)
for p in (problem, problem.with_bounds()):
    p, xs, us = ddp._start(p, None, None, False)
    params, static = ddp._options({"max_iter": 10, "th_stop": 1e-8}, xs.dtype)
    flag = ddp._as_array(False, bool)

quad = robots.load("quad12").with_armature(np.full(18, 0.01))
feet = ("FL_FOOT", "FR_FOOT")
pos = frame_positions_numpy(quad, jaxdyn.neutral_configuration(quad), feet)
held = tuple(Connect(f, "local_world_aligned", target=tuple(map(float, p)))
             for f, p in zip(feet, pos))
dyn = ContactDynamics(held, FreeDynamics.floating_base(quad).actuation)
print("COMPILED", compiled)
"""


def test_problem_construction_compiles_no_program(tmp_path):
    """Building a trajectory problem from concrete values (``with_armature``,
    ``JointLimits.from_model``, ``FreeDynamics.floating_base``, the numpy targets and gravity
    compensation) and FDDP's start (default initial guess, options, bounds) compile no XLA
    program: in a new process each eager ``jax.numpy`` operation would compile one before
    the solve's (run in a child process: this one has compiled those operations already)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, JAXDYN_COMPILATION_CACHE="0", JAXDYN_CACHE_DIR=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", _NO_COMPILE_CHILD], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("COMPILED")]
    assert line == ["COMPILED []"], out.stdout + out.stderr[-2000:]

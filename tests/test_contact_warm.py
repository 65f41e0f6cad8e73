"""The constraint solve's warm start (``x0``, ``Constraint(warm_start=True)``: the previous
step's impulses carried in ``State.impulses``) and its early stop (``tolerance``): the same
fixed point as the cold, fixed-count solve, derivatives by the implicit function theorem
unchanged, and a simulator state that ``jit`` / ``vmap`` / ``grad`` / ``rollout`` accept.
"""

from __future__ import annotations

from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import sim

BOX = """<robot name="box"><link name="box"><inertial><mass value="2.0"/>
  <inertia ixx="0.0417" iyy="0.0667" izz="0.0833" ixy="0" ixz="0" iyz="0"/></inertial></link>
</robot>"""


def _problem():
    """A 2-contact Coulomb problem whose two contacts slide (test_sim's)."""
    rng = np.random.default_rng(3)
    A = rng.standard_normal((6, 6))
    G = jnp.asarray(A @ A.T + 0.5 * np.eye(6))
    u = jnp.asarray([-1.0, 0.3, -0.2, -0.5, -0.9, 0.1])
    return G, u


solve = jax.jit(
    sim.solve_cone_complementarity,
    static_argnums=3,
    static_argnames=("coulomb", "tolerance"),
)


def test_warm_start_and_tolerance_reach_the_fixed_point():
    """From the solution one step stays there (a cold start one step from zero is far off);
    from a perturbed start, and with the early stop, the solve reaches the cold solve's fixed
    point to rounding."""
    G, u = _problem()
    ref = solve(G, u, 0.6, 2000, coulomb=True)
    assert float(jnp.max(ref[:, 0])) > 0.1  # contacts carry impulses: not vacuous
    x_ref = ref.reshape(-1)
    one_warm = solve(G, u, 0.6, 1, coulomb=True, x0=x_ref)
    one_cold = solve(G, u, 0.6, 1, coulomb=True)
    np.testing.assert_allclose(np.asarray(one_warm), np.asarray(ref), atol=1e-12)
    assert float(jnp.max(jnp.abs(one_cold - ref))) > 1e-2
    x0 = x_ref + 0.3 * jnp.asarray(np.random.default_rng(0).standard_normal(6))
    warm = solve(G, u, 0.6, 2000, coulomb=True, x0=x0)
    np.testing.assert_allclose(np.asarray(warm), np.asarray(ref), atol=1e-10)
    early = solve(G, u, 0.6, 2000, coulomb=True, x0=x0, tolerance=1e-13)
    np.testing.assert_allclose(np.asarray(early), np.asarray(ref), atol=1e-9)
    with pytest.raises(ValueError, match="x0 must have the shape of u"):
        sim.solve_cone_complementarity(G, u, 0.6, 10, x0=jnp.zeros(5))


@pytest.mark.parametrize("cone", [None, "pyramidal"])  # hard; MuJoCo's soft pyramid
def test_solve_contact_impulses_warm_start(cone):
    """``solve_contact_impulses(..., flat=True)`` returns the flat solution in the solver's
    own rows (a pyramid's four edges per contact), and ``x0=`` of it restarts the solve there:
    one iteration from it stays at the converged impulses (one from zero is far off); the
    results of the three-value form are the plain call's."""
    C = sim.contact
    G, u = _problem()
    n = jnp.asarray([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    frames = C.ContactFrames(jnp.asarray([-1e-3, -2e-3]), n, jnp.zeros((2, 3)), jnp.zeros((2, 3)))
    rows, v0 = u.reshape(2, 3), jnp.zeros((2, 3))
    kw = dict(friction=0.6, cone=cone, soft=cone is not None)

    def run(iterations, x0=None):
        c = sim.Constraint(iterations=iterations, **kw)
        return C.solve_contact_impulses(
            c, G, frames, rows, 2e-3, v0, residual=True, x0=x0, flat=True
        )

    lam, res, x = jax.jit(lambda: run(3000))()
    assert x.shape == (2 * (4 if cone == "pyramidal" else 3),)
    assert float(jnp.max(lam[:, 0])) > 0.1 and float(res) < 1e-10  # converged, not vacuous
    c = sim.Constraint(iterations=3000, **kw)
    plain = jax.jit(lambda: C.solve_contact_impulses(c, G, frames, rows, 2e-3, v0))()
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(lam))
    warm = jax.jit(lambda x: run(1, x)[0])(x)
    np.testing.assert_allclose(np.asarray(warm), np.asarray(lam), atol=1e-12)
    cold = jax.jit(lambda: run(1)[0])()
    assert float(jnp.max(jnp.abs(cold - lam))) > 1e-2


def test_warm_started_solve_gradient_matches_finite_differences():
    """The derivative of the warm-started, early-stopped solve is the fixed point's (implicit
    differentiation; none in ``x0``): central differences of the solve agree."""
    G, u = _problem()
    x0 = solve(G, u, 0.6, 2000, coulomb=True).reshape(-1) * 0.9

    @jax.jit
    def f(u, x0):
        lam = sim.solve_cone_complementarity(G, u, 0.6, 3000, coulomb=True, x0=x0, tolerance=1e-14)
        return jnp.sum(jnp.sin(cast("jax.Array", lam)))

    gu, gx = jax.grad(f, argnums=(0, 1))(u, x0)
    assert np.all(np.asarray(gx) == 0.0)
    du = jnp.asarray(np.random.default_rng(1).standard_normal(6))
    eps = 1e-6
    fd = (f(u + eps * du, x0) - f(u - eps * du, x0)) / (2 * eps)
    np.testing.assert_allclose(float(gu @ du), float(fd), rtol=1e-5)
    assert abs(float(fd)) > 1e-2


@pytest.fixture(scope="module")
def box_case():
    """A 2 kg box on its 4 bottom corners, pushed across the floor (sliding), cold and warm
    (with the early stop) configurations."""
    model = cast("jaxdyn.Model", jaxdyn.load_urdf(BOX, floating_base=True))
    corners = [(sx * 0.2, sy * 0.15, -0.1) for sx in (-1, 1) for sy in (-1, 1)]
    cs = sim.contact_set(model, [sim.Point("box", c) for c in corners])
    act = sim.Torque(dofs=tuple(range(6)))
    cold = sim.SimConfig(dt=2e-3, contact=sim.Constraint(iterations=400), contacts=cs, actuator=act)
    warm = sim.SimConfig(
        dt=2e-3,
        contact=sim.Constraint(iterations=400, warm_start=True, tolerance=1e-12),
        contacts=cs,
        actuator=act,
    )
    s0 = sim.State(jaxdyn.neutral_configuration(model).at[2].set(0.1), jnp.zeros(6))
    return model, cold, warm, s0


def test_warm_state_steps_like_the_cold_solve(box_case):
    """``warm_state`` gives the state zero impulses (4 corners x 3 rows); 100 warm-started
    steps of a pushed box (sliding, every step's solve converged) follow the cold, fixed-count
    solve to its convergence, under ``rollout`` and ``jit(vmap(step))``; the carried impulses
    are the step's (their normal rows hold the box's weight); a state without impulses steps
    cold and carries none; a wrong length is refused naming ``state.impulses``."""
    model, cold, warm, s0 = box_case
    sw = sim.warm_state(model, s0, warm)
    assert sw.impulses is not None and sw.impulses.shape == (12,)
    assert sim.warm_state(model, s0, cold).impulses is None
    u = jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0, 30.0, 5.0, 0.0]), (100, 6))
    tc = sim.rollout(model, s0, u, cfg=cold)
    tw = sim.rollout(model, sw, u, cfg=warm)
    # (4 redundant corners: their impulses' split converges slowest; measured 1.1e-8)
    np.testing.assert_allclose(np.asarray(tw.q), np.asarray(tc.q), atol=1e-7)
    np.testing.assert_allclose(np.asarray(tw.v), np.asarray(tc.v), atol=1e-6)
    assert tw.impulses is not None
    lam_n = np.asarray(tw.impulses[-1]).reshape(4, 3)[:, 0]
    # the normal impulses carry the weight over the step (mean of the contact rows)
    np.testing.assert_allclose(lam_n.sum(), 2.0 * 9.81 * 2e-3, rtol=1e-3)
    step = jax.jit(jax.vmap(lambda s, c: sim.step(model, s, c, warm)))
    batch = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), sw)
    out = step(batch, jnp.stack([u[0], u[0]]))
    assert out.impulses is not None and out.impulses.shape == (2, 12)
    np.testing.assert_allclose(np.asarray(out.q[0]), np.asarray(tc.q[0]), atol=1e-12)
    plain = sim.step(model, s0, u[0], warm)
    assert plain.impulses is None
    np.testing.assert_allclose(np.asarray(plain.q), np.asarray(tc.q[0]), atol=1e-12)
    bad = sim.State(s0.q, s0.v, impulses=jnp.zeros(7))
    with pytest.raises(ValueError, match=r"state.impulses has shape \(7,\), expected \(12,\)"):
        sim.step(model, bad, u[0], warm)


def test_warm_started_rollout_gradient_matches_finite_differences(box_case):
    """Reverse mode through 60 warm-started steps of the sliding box (impulses carried in the
    state, the default 100 iterations) is the derivative of the converged fixed point: it
    matches central differences of the cold solve to 1e-6 (measured 1.5e-7). Central
    differences of the warm-started rollout itself differ by 7e-5: the split of the load
    among the 4 redundant corners (set by the regulariser alone, the slowest direction of the
    iterations) is not converged and depends on the start, which the warm start carries from
    step to step; the implicit derivative leaves that out, as it is meant to."""
    model, cold, warm, s0 = box_case
    warm = eqx.tree_at(lambda c: c.contact, warm, sim.Constraint(warm_start=True))
    cold = eqx.tree_at(lambda c: c.contact, cold, sim.Constraint())
    d = jnp.asarray(np.random.default_rng(1).standard_normal(6))
    w = jnp.array([0.0, 0.0, 1.0, 30.0, 5.0, 0.0])
    eps = 1e-5

    def loss(w, cfg):
        s = sim.warm_state(model, s0, cfg)
        tr = sim.rollout(model, s, jnp.broadcast_to(w, (60, 6)), cfg=cfg)
        q, v = tr.q[-1], tr.v[-1]
        return q[2] + jnp.sum(q[:2] ** 2) + jnp.sum(v**2) + q[5]

    vg = jax.jit(jax.value_and_grad(lambda w: loss(w, warm)))
    g = vg(w)[1]
    assert np.all(np.isfinite(np.asarray(g)))
    g_warm = float(g @ d)
    fd_warm = float(vg(w + eps * d)[0] - vg(w - eps * d)[0]) / (2 * eps)
    # the cold solve's values only (its reverse mode against central differences:
    # test_sim.py's test_constraint_gradient_through_a_long_slide, the same box and Constraint())
    cold_loss = jax.jit(lambda w: loss(w, cold))
    fd_cold = float(cold_loss(w + eps * d) - cold_loss(w - eps * d)) / (2 * eps)
    np.testing.assert_allclose(g_warm, fd_cold, rtol=1e-6)
    np.testing.assert_allclose(g_warm, fd_warm, rtol=1e-3)
    assert abs(fd_cold) > 0.01


def test_constraint_refuses_bad_solver_options():
    with pytest.raises(ValueError, match="Constraint: tolerance must be None or a number >= 0"):
        sim.Constraint(tolerance=-1.0)
    with pytest.raises(ValueError, match="Constraint: warm_start must be True or False"):
        sim.Constraint(warm_start=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Constraint: polish must be True or False"):
        sim.Constraint(polish=1)  # type: ignore[arg-type]


def test_suite_task_refuses_bad_solver_options():
    from jaxdyn.envs import dm_control_suite as suite

    with pytest.raises(ValueError, match="WalkerMove: warm_start must be None, True or False"):
        suite.WalkerMove(warm_start=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="WalkerMove: solver_tolerance must be None or a number"):
        suite.WalkerMove(solver_tolerance=-1.0)
    with pytest.raises(ValueError, match="WalkerMove: solver_polish must be None, True or False"):
        suite.WalkerMove(solver_polish=0)  # type: ignore[arg-type]


@pytest.mark.slow
def test_suite_task_carries_the_warm_start():
    """A contact task with ``warm_start=True``: its reset carries zero impulses (the walker's
    14 contact slots x 3 rows and 6 limit rows), ``jit(step)`` keeps the state's structure
    (Brax's contract: the same pytree in and out) and replaces them with the solve's, and
    three control steps stay within the solve's tolerance of the cold one (the walker's hard
    contact, ``contact="hard"``: cold, 100 iterations, polished)."""
    from jaxdyn.envs import dm_control_suite as suite

    warm = suite.WalkerMove(
        contact="hard", warm_start=True, solver_tolerance=1e-8, solver_iterations=400
    )
    cold = suite.WalkerMove(
        contact="hard",
        warm_start=False,
        solver_tolerance=0.0,
        solver_iterations=100,
        solver_polish=True,
    )
    key = jax.random.PRNGKey(0)
    s, c = jax.jit(warm.reset)(key), jax.jit(cold.reset)(key)
    assert s.pipeline_state.impulses is not None
    assert s.pipeline_state.impulses.shape == (48,) and not np.any(s.pipeline_state.impulses)
    assert c.pipeline_state.impulses is None
    act = jnp.full(warm.action_size, 0.3)
    step_w, step_c = jax.jit(warm.step), jax.jit(cold.step)
    for _ in range(3):
        s1 = step_w(s, act)
        assert jax.tree_util.tree_structure(s1) == jax.tree_util.tree_structure(s)
        s, c = s1, step_c(c, act)
    warm.check_state(s)
    assert np.all(np.isfinite(np.asarray(s.pipeline_state.impulses)))
    np.testing.assert_allclose(
        np.asarray(s.pipeline_state.q), np.asarray(c.pipeline_state.q), atol=1e-6
    )
    np.testing.assert_allclose(np.asarray(s.obs), np.asarray(c.obs), atol=1e-5)

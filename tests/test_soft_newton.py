"""MuJoCo's primal Newton solve of the soft contact, ``sim.Constraint(soft=True, relaxed=True,
solver="newton")`` (:mod:`jaxdyn.sim._primal`; issue 56; the default of that contact on
pyramidal cones): the same next velocities as the converged dual solve (``solver="dual"``) of
the same problem, MuJoCo C's rollouts (pyramidal cones, joint limits), derivatives against
finite differences, the default's fallbacks to the dual and the refusals."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import sim
from jaxdyn.sim import _primal
from jaxdyn.sim import contact as C

mujoco = pytest.importorskip("mujoco")

from _mujoco_ref import mujoco_rollout  # noqa: E402
from test_soft_contact import (  # noqa: E402
    CAPSULE_MJCF,
    CAPSULE_PUSH,
    RESTING_BALL_MJCF,
    _quat_gap,
)

# a box on the floor (four contacts, MuJoCo's pyramidal cones) carrying an arm on a limited
# hinge: the arm falls onto its limit (30 degrees) and settles on it (a soft limit row with the
# contacts in one problem); pushed to slide at 0.5 m/s
LIMIT_MJCF = """<mujoco><option timestep="0.002" tolerance="1e-14" iterations="1000"/>
<worldbody><geom name="floor" type="plane" size="5 5 .1" friction="0.7"/>
<body name="base" pos="0 0 0.0999"><freejoint/>
  <geom name="base" type="box" size="0.1 0.1 0.1" mass="2" contype="1" conaffinity="0"/>
  <body name="arm" pos="0.1 0 0.1"><joint name="hinge" axis="0 1 0" range="-30 30"/>
    <geom name="arm" type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.5"
          contype="0" conaffinity="0"/></body></body>
</worldbody></mujoco>"""
LIMIT_PUSH = np.r_[0.5, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0]
# the same under MuJoCo's implicitfast with a damped hinge (M_eff = M + h D applies the
# impulses; the rows are posed with M)
IMPLICIT_MJCF = LIMIT_MJCF.replace("<option ", '<option integrator="implicitfast" ').replace(
    'range="-30 30"', 'range="-30 30" damping="0.02"'
)


def _contact(cfg) -> sim.Constraint:
    assert isinstance(cfg.contact, sim.Constraint)
    return cfg.contact


def _newton(cfg, **kw):
    return dataclasses.replace(
        cfg, contact=dataclasses.replace(_contact(cfg), solver="newton", **kw)
    )


@pytest.mark.filterwarnings("ignore:load_mjcf.*interpenetrate")
@pytest.mark.parametrize(
    "xml, push, steps",
    [
        # three compiles each (the rollout's on the slow ones); default: the limit scene's steps
        pytest.param(CAPSULE_MJCF, CAPSULE_PUSH, 120, marks=pytest.mark.slow, id="capsules"),
        pytest.param(LIMIT_MJCF, LIMIT_PUSH, 150, id="limit"),
        pytest.param(LIMIT_MJCF, LIMIT_PUSH, 150, marks=pytest.mark.slow, id="limit-rollout"),
        pytest.param(IMPLICIT_MJCF, LIMIT_PUSH, 150, marks=pytest.mark.slow, id="implicit"),
    ],
)
def test_newton_is_the_dual_solve_and_mujocos(xml, push, steps, request):
    """From MuJoCo C's states along its rollout (the capsules sliding, rolling and hopping; the
    box sliding while its arm falls onto its joint limit and settles on it), one step of
    ``solver="newton"`` gives the next velocities of the dual solve of the same problem
    converged (3000 projected-gradient iterations) to 1e-10 (seen 5e-14) and MuJoCo C's
    (its NEWTON solver, tolerance 1e-14) to 1e-9; the warm-started rollout with a tolerance
    (MuJoCo's test, 1e-14) is MuJoCo's to 1e-10 m / 1e-10 in orientation at every step."""
    loaded = jaxdyn.load_mjcf(xml)
    limits = xml is not CAPSULE_MJCF
    kw = {"limits": "constraint"} if limits else {}  # MuJoCo's limit rows
    base = loaded.sim_config(
        sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=3000), **kw
    )
    assert _contact(base).cone == "pyramidal"
    assert (base.limit_constraints is not None) == limits
    cfg = _newton(base)
    conv, model = loaded.converter(), loaded.model
    m = mujoco.MjModel.from_xml_string(xml)
    assert m.opt.solver == mujoco.mjtSolver.mjSOL_NEWTON
    qs, vs = mujoco_rollout(m, steps, qvel=push, fields=("qpos", "qvel"))
    u = jnp.zeros(0)
    dual = jax.jit(jax.vmap(lambda s: sim.step(model, s, u, base)))
    newton = jax.jit(jax.vmap(lambda s: sim.step_info(model, s, u, cfg)))
    pick = np.arange(steps // 4, steps - 1, steps // 6)
    q = jnp.asarray(np.stack([conv.q_from_mujoco(qs[k]) for k in pick]))
    v = jnp.asarray(np.stack([conv.v_from_mujoco(qs[k], vs[k]) for k in pick]))
    s = sim.State(q, v, jnp.zeros(len(pick)))
    a = dual(s)
    b, info = newton(s)
    np.testing.assert_allclose(np.asarray(b.v), np.asarray(a.v), rtol=0, atol=1e-10)
    assert float(jnp.max(info["contact_residual"])) < 1e-9
    want = np.stack([conv.v_from_mujoco(qs[k + 1], vs[k + 1]) for k in pick])
    np.testing.assert_allclose(np.asarray(b.v), want, rtol=0, atol=1e-9)
    if limits:  # the arm on its limit in three of the states: the limit row acts
        assert np.sum(qs[pick, 7] > np.deg2rad(30.0)) >= 3
    if request.node.callspec.id == "limit":
        return  # the rollout: the slow cases
    # the warm-started rollout with MuJoCo's tolerance test
    warm = _newton(base, warm_start=True, tolerance=1e-14)
    q0 = np.asarray(loaded.q0)
    s0 = sim.warm_state(model, sim.State(q0, jnp.asarray(conv.v_from_mujoco(q0, push))), warm)
    tr = jax.jit(lambda s: sim.rollout(model, s, jnp.zeros((steps, 0)), cfg=warm))(s0)
    mine = np.array([conv.q_to_mujoco(np.asarray(x)) for x in tr.q])
    for b in range(2 if not limits else 1):
        np.testing.assert_allclose(mine[:, 7 * b : 7 * b + 3], qs[:, 7 * b : 7 * b + 3], atol=1e-10)
        assert _quat_gap(mine[:, 7 * b + 3 : 7 * b + 7], qs[:, 7 * b + 3 : 7 * b + 7]) < 1e-10
    if limits:
        np.testing.assert_allclose(mine[:, 7], qs[:, 7], atol=1e-10)


def _random_problem(seed, nv=5, n=14):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(nv, nv))
    M = A @ A.T + nv * np.eye(nv)
    J = rng.normal(size=(n, nv))
    u = rng.normal(size=n)  # about half the rows active at z = 0
    R = rng.uniform(0.05, 0.5, n)
    return M, J, u, R


def test_newton_solve_is_the_dual_minimiser_and_differentiates():
    """:func:`jaxdyn.sim._primal.newton_solve` on random problems: its impulses ``lam = max(0,
    -(J z + u)) / R`` solve the dual's complementarity (``lam >= 0``, ``w = (J M^-1 J^T + R) lam
    + u >= 0``, ``lam w = 0``, and ``z = M^-1 J^T lam``) to 1e-12, from zero and from a warm
    start; its forward derivative in ``M``, ``J``, ``u``, ``R`` (implicit differentiation) is
    central finite differences' to 1e-6 (relative)."""
    solve = jax.jit(_primal.newton_solve)
    for seed in range(3):
        M, J, u, R = (jnp.asarray(x) for x in _random_problem(seed))
        for z0 in (None, jnp.ones(M.shape[0])):
            z = solve(M, J, u, R, z0)
            lam = _primal.impulses(J, u, R, z)
            w = J @ jnp.linalg.solve(M, J.T @ lam) + R * lam + u
            assert 0 < int(jnp.sum(lam > 0)) < lam.shape[0]
            assert float(jnp.min(w)) > -1e-12 and float(jnp.max(jnp.abs(lam * w))) < 1e-12
            np.testing.assert_allclose(M @ z, J.T @ lam, rtol=0, atol=1e-12)
        rng = np.random.default_rng(10 + seed)
        dirs = [jnp.asarray(rng.normal(size=x.shape)) for x in (M, J, u, R)]
        dirs[0] = dirs[0] + dirs[0].T
        dirs[3] = 0.01 * dirs[3]

        f = jax.jit(lambda t, p, d: _primal.newton_solve(*(x + t * y for x, y in zip(p, d))))
        p = (M, J, u, R)
        dz = jax.jit(lambda p, d: jax.jvp(lambda t: f(t, p, d), (0.0,), (1.0,))[1])(p, dirs)
        eps = 1e-6
        fd = (f(eps, p, dirs) - f(-eps, p, dirs)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(dz), np.asarray(fd), rtol=1e-6, atol=1e-9)
        assert float(jnp.max(jnp.abs(dz))) > 1e-3


@pytest.mark.slow  # three compiles (the dual's derivative); default: the solver's derivative
def test_newton_step_derivative_matches_finite_differences():
    """A ball resting on the floor (its four pyramid edges active): the forward derivative of
    one ``solver="newton"`` step's velocity in the ball's height, its velocity and the
    contacts' ``timeconst`` is central finite differences' to 1e-6 (relative), and that of
    the dual solve (implicit differentiation of the cone problem) to 1e-8."""
    loaded = jaxdyn.load_mjcf(RESTING_BALL_MJCF)
    model = loaded.model
    cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver="newton"))

    def v_next(z0, vx, tc, solver: str = "newton", iterations=100):
        c = dataclasses.replace(_contact(cfg), solref=(tc, 1.0), solver=solver,
                                iterations=iterations)  # fmt: skip
        q = jnp.asarray(loaded.q0).at[2].set(z0)
        v = jnp.zeros(model.nv).at[0].set(vx)
        s = sim.State(q, v)
        return sim.step(model, s, jnp.zeros(0), dataclasses.replace(cfg, contact=c)).v

    f = jax.jit(v_next)
    jvp = jax.jit(lambda x, e: jax.jvp(v_next, x, e)[1])
    x0 = (0.0998, 0.05, 0.02)
    eps = 1e-7
    derivs = []
    for i in range(3):
        e = tuple(float(i == j) for j in range(3))
        d = jvp(x0, e)
        hi = f(*[x + eps * t for x, t in zip(x0, e)])
        lo = f(*[x - eps * t for x, t in zip(x0, e)])
        np.testing.assert_allclose(np.asarray(d), np.asarray((hi - lo) / (2 * eps)), rtol=1e-6,
                                   atol=1e-7 * float(jnp.max(jnp.abs(d))))  # fmt: skip
        assert bool(jnp.all(jnp.isfinite(d))) and float(jnp.max(jnp.abs(d))) > 1e-3
        derivs.append(d)
    dual = jax.jit(lambda x, e: jax.jvp(lambda z0, vx, tc: v_next(z0, vx, tc, "dual", 3000), x, e))
    for i in range(3):
        e = tuple(float(i == j) for j in range(3))
        scale = float(jnp.max(jnp.abs(derivs[i])))
        got = np.asarray(dual(x0, e)[1])
        np.testing.assert_allclose(got, np.asarray(derivs[i]), rtol=1e-8, atol=1e-8 * scale)


@pytest.mark.filterwarnings("ignore:load_mjcf.*interpenetrate")
def test_newton_solver_default_fallbacks_and_refusals():
    """``solver`` is ``None`` (default), ``"dual"`` or ``"newton"``. The default is MuJoCo's
    primal Newton solve on MuJoCo's convex soft problem on either cone (``soft=True``,
    ``relaxed=True``, the cone given or the file's) and the dual solve elsewhere (the hard
    contact, Coulomb's ``relaxed=False``, the dual's ``newton`` steps asked for), which no
    combination refuses; ``"newton"`` takes the convex
    soft problem on either cone (the elliptic one: tests/test_soft_newton_elliptic.py; the hard
    contact and Coulomb's ``relaxed=False`` refused by name) and no ``newton`` steps."""
    uses = C.uses_primal_newton
    with pytest.raises(ValueError, match=r"solver must be one of \(None, 'dual', 'newton'\)"):
        sim.Constraint(soft=True, relaxed=True, solver="cg")
    for soft, relaxed, cone in ((False, True, None), (True, False, None), (True, True, "elliptic")):
        if soft and relaxed:  # MuJoCo's elliptic cones: taken by solver="newton"
            assert uses(sim.Constraint(solver="newton", soft=soft, relaxed=relaxed, cone=cone))
        else:
            with pytest.raises(ValueError, match="solver='newton'.*soft=True and relaxed=True"):
                sim.Constraint(solver="newton", soft=soft, relaxed=relaxed, cone=cone)
        # the default: the primal on MuJoCo's convex soft problem, else the dual
        assert uses(sim.Constraint(soft=soft, relaxed=relaxed, cone=cone)) == (soft and relaxed)
        assert not uses(sim.Constraint(soft=soft, relaxed=relaxed, cone=cone, solver="dual"))
    with pytest.raises(ValueError, match="newton=3 .*unused by solver='newton'.*solver='dual'"):
        sim.Constraint(soft=True, relaxed=True, cone="pyramidal", solver="newton", newton=3)
    pyr = sim.Constraint(soft=True, relaxed=True, cone="pyramidal")
    assert uses(pyr) and uses(dataclasses.replace(pyr, solver="newton"))
    assert not uses(dataclasses.replace(pyr, solver="dual"))
    assert not uses(dataclasses.replace(pyr, newton=3))  # the dual's semismooth steps
    assert not uses(dataclasses.replace(pyr, relaxed=False)) and not uses(sim.Constraint())
    assert not uses(sim.Compliant()) and not uses(None)
    sim.Constraint(soft=True, relaxed=True, solver="newton")  # the cone from the file, later
    loaded = jaxdyn.load_mjcf(CAPSULE_MJCF.replace('cone="pyramidal" ', ""))
    for solver in (None, "newton"):
        cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver=solver))
        assert _contact(cfg).cone == "pyramidal" and uses(cfg.contact)  # the file's (default)
    # cone=None (elliptic) with solver="newton": MuJoCo's elliptic primal, not refused
    dataclasses.replace(cfg, contact=dataclasses.replace(_contact(cfg), cone=None))
    # the default on a file's elliptic cones: the primal too; the dual's semismooth steps the dual
    elliptic = jaxdyn.load_mjcf(CAPSULE_MJCF.replace('cone="pyramidal"', 'cone="elliptic"'))
    cfg = elliptic.sim_config(sim.Constraint(soft=True, relaxed=True))
    assert _contact(cfg).cone == "elliptic" and uses(cfg.contact)
    assert not uses(sim.Constraint(soft=True, relaxed=True, newton=3))


@pytest.mark.slow  # a rollout's compile; default: the limit scene (contacts and a limit row)
def test_newton_condim_rollout_follows_mujoco():
    """``tests/test_condim.py``'s scene on pyramidal cones (condim 3, 4 and 6: torsional and
    rolling edges) with its pendulum's limit row, warm-started ``solver="newton"``: jaxdyn's
    rollout follows MuJoCo C's to 1e-10 in position and orientation (seen 9e-16)."""
    from test_condim import ARM, CONDIM_MJCF, QVEL, STEPS

    xml = CONDIM_MJCF.format(cone="pyramidal").replace("</worldbody>", ARM + "</worldbody>")
    qvel = np.r_[QVEL, 6.0]
    loaded = jaxdyn.load_mjcf(xml)
    contact = sim.Constraint(soft=True, relaxed=True, solver="newton", warm_start=True)
    cfg = loaded.sim_config(contact, limits="constraint")
    assert cfg.limit_constraints is not None and loaded.geoms is not None
    assert loaded.geoms.condim == (3, 4, 6, 4)
    conv, model, q0 = loaded.converter(), loaded.model, np.asarray(loaded.q0)
    s0 = sim.State(jnp.asarray(q0), jnp.asarray(conv.v_from_mujoco(q0, qvel)))
    s0 = sim.warm_state(model, s0, cfg)
    tr = jax.jit(lambda s: sim.rollout(model, s, jnp.zeros((STEPS, 0)), cfg=cfg))(s0)
    q = np.array([conv.q_to_mujoco(np.asarray(x)) for x in tr.q])
    (ref,) = mujoco_rollout(mujoco.MjModel.from_xml_string(xml), STEPS, qvel=qvel)
    np.testing.assert_allclose(q, ref, rtol=0, atol=1e-10)


# a planar walker-like body (slide x, slide z, a hinge; two limited, actuated legs) falling
# onto the floor under random controls; MuJoCo's line search made exact (ls_tolerance), as
# jaxdyn's, so that a solve cut short takes the same steps in both
PLANAR_MJCF = """<mujoco><option timestep="0.004" ls_tolerance="1e-12"/>
<worldbody><geom name="floor" type="plane" size="5 5 .1"/>
<body name="torso" pos="0 0 0.5">
  <joint name="x" type="slide" axis="1 0 0"/><joint name="z" type="slide" axis="0 0 1"/>
  <joint name="ry" axis="0 1 0"/>
  <geom name="torso" type="capsule" fromto="-0.2 0 0 0.2 0 0" size="0.05" mass="3"/>
  <body name="leg" pos="0.2 0 0"><joint name="knee" axis="0 1 0" range="-40 40"/>
    <geom name="leg" type="capsule" fromto="0 0 0 0.05 0 -0.3" size="0.04" mass="1"/></body>
  <body name="leg2" pos="-0.2 0 0"><joint name="hip" axis="0 1 0" range="-20 20"/>
    <geom name="leg2" type="capsule" fromto="0 0 0 -0.05 0 -0.3" size="0.04" mass="1"/></body>
</body></worldbody>
<actuator><motor joint="knee" gear="5"/><motor joint="hip" gear="5"/></actuator></mujoco>"""


def test_newton_warm_start_is_mujocos_qacc_warmstart():
    """The warm start of ``solver="newton"`` is MuJoCo's (``mj_fwdConstraint``: the previous
    solve's acceleration ``qacc_warmstart``, kept where it costs less than ``qacc_smooth``):
    with both solvers cut to 2 Newton steps (MuJoCo's ``opt.iterations = 2``, which binds: a
    cut solve on most contact steps, a rollout 3e-2 from the converged one), jaxdyn's
    rollout of a planar body falling onto the floor under random controls (contacts and limit
    rows) is MuJoCo C's to 1e-10 at every step (seen 3e-16), and the acceleration it carries
    (``State.impulses``) is MuJoCo's ``qacc_warmstart`` to 1e-11 of its largest (seen 2e-15).
    (The previous warm start, ``M^-1 J^T`` of the last impulses, left the walker's cut solve
    0.19 off MuJoCo's in a control step.)"""
    steps, k = 50, 2
    loaded = jaxdyn.load_mjcf(PLANAR_MJCF)
    contact = sim.Constraint(
        soft=True, relaxed=True, solver="newton", warm_start=True, iterations=k, tolerance=1e-8
    )
    cfg = loaded.sim_config(contact, limits="constraint")
    conv, model, q0 = loaded.converter(), loaded.model, np.asarray(loaded.q0)
    assert model.nq == model.nv == 5  # no free joint: qacc is jaxdyn's acceleration
    qvel = np.array([0.5, -1.0, 2.0, 0.0, 0.0])
    ctrl = np.random.default_rng(0).uniform(-1, 1, (steps, 2))
    m = mujoco.MjModel.from_xml_string(PLANAR_MJCF)
    fields = ("qpos", "qacc_warmstart", "ncon", lambda d: d.solver_niter[0])
    m.opt.iterations = 100
    (q_conv,) = mujoco_rollout(m, qvel=qvel, ctrl=ctrl)
    m.opt.iterations = k
    qs, qacc, ncon, niter = mujoco_rollout(m, qvel=qvel, ctrl=ctrl, fields=fields)
    assert np.sum(ncon == 2) >= 10 and np.sum(niter == k) >= 20  # contacts; the cut binds
    assert np.abs(qs - q_conv).max() > 1e-2
    s0 = sim.State(jnp.asarray(q0), jnp.asarray(conv.v_from_mujoco(q0, qvel)))
    s0 = sim.warm_state(model, s0, cfg)
    assert s0.impulses is not None and s0.impulses.shape == (model.nv,)
    tr = jax.jit(lambda s, u: sim.rollout(model, s, u, cfg=cfg))(s0, jnp.asarray(ctrl))
    q = np.array([conv.q_to_mujoco(np.asarray(x)) for x in tr.q])
    np.testing.assert_allclose(q, qs, rtol=0, atol=1e-10)
    assert tr.impulses is not None
    scale = np.abs(qacc).max()
    np.testing.assert_allclose(np.asarray(tr.impulses), qacc, rtol=0, atol=1e-11 * scale)


@pytest.mark.filterwarnings("ignore:load_mjcf.*interpenetrate")
def test_mjcf_default_constraint_is_mujocos_contact():
    """``load_mjcf(...).sim_config(sim.Constraint())`` (``soft`` left at its default ``None``)
    is MuJoCo's contact model of the file (issue 56): the soft contact's convex problem by
    MuJoCo's Newton solve with the file's ``iterations`` (1000) and ``tolerance`` (1e-14),
    warm-started, the caller's other fields kept; from MuJoCo C's states along its rollout one
    step gives MuJoCo C's next velocities to 1e-9 (the hard contact, the old default, misses
    them by far more: checked). ``soft=False`` is the hard contact; ``None`` outside an MJCF
    file (a ``SimConfig`` built directly) is the hard contact too."""
    loaded = jaxdyn.load_mjcf(LIMIT_MJCF)
    c = _contact(loaded.sim_config(sim.Constraint()))
    assert (c.soft, c.relaxed, c.solver, c.cone) == (True, True, "newton", "pyramidal")
    assert (c.iterations, c.tolerance, c.warm_start) == (1000, 1e-14, True)
    assert C.uses_primal_newton(c)
    mine = _contact(loaded.sim_config(sim.Constraint(iterations=7, tolerance=0.0, max_contacts=3)))
    assert (mine.soft, mine.iterations, mine.tolerance, mine.max_contacts) == (True, 7, 0.0, 3)
    hard_cfg = loaded.sim_config(sim.Constraint(soft=False), ignore=("solimp",), limits="spring")
    hard = _contact(hard_cfg)
    assert (hard.soft, hard.relaxed, hard.iterations, hard.warm_start) == (False, False, 100, False)
    assert not C.uses_primal_newton(hard) and C.solver_block_rows(hard) == 3
    plain = dataclasses.replace(
        loaded.sim_config(sim.Constraint()), contact=sim.Constraint()
    ).contact
    assert isinstance(plain, sim.Constraint) and plain.soft is None
    assert not C.uses_primal_newton(plain) and C.solver_block_rows(plain) == 3
    with pytest.raises(ValueError, match="soft must be None, True or False"):
        sim.Constraint(soft=1)  # type: ignore[arg-type]

    steps = 150
    cfg = loaded.sim_config(sim.Constraint())  # the file's limit rows: the default
    assert cfg.limit_constraints is not None and hard_cfg.limit_constraints is None
    conv, model = loaded.converter(), loaded.model
    m = mujoco.MjModel.from_xml_string(LIMIT_MJCF)
    qs, vs = mujoco_rollout(m, steps, qvel=LIMIT_PUSH, fields=("qpos", "qvel"))
    pick = np.arange(steps // 4, steps - 1, steps // 6)
    q = jnp.asarray(np.stack([conv.q_from_mujoco(qs[k]) for k in pick]))
    v = jnp.asarray(np.stack([conv.v_from_mujoco(qs[k], vs[k]) for k in pick]))
    s = jax.vmap(lambda s: sim.warm_state(model, s, cfg))(sim.State(q, v, jnp.zeros(len(pick))))
    u = jnp.zeros(0)
    nxt = jax.jit(jax.vmap(lambda s: sim.step(model, s, u, cfg)))(s)
    want = np.stack([conv.v_from_mujoco(qs[k + 1], vs[k + 1]) for k in pick])
    np.testing.assert_allclose(np.asarray(nxt.v), want, rtol=0, atol=1e-9)
    old = dataclasses.replace(cfg, contact=sim.Constraint(soft=False))
    old_v = jax.jit(jax.vmap(lambda s: sim.step(model, s, u, old)))(sim.State(q, v, s.t))
    assert float(np.max(np.abs(np.asarray(old_v.v) - want))) > 1e-4


@pytest.mark.slow  # two rollout compiles (the value and its forward derivative)
@pytest.mark.filterwarnings("ignore:load_mjcf.*interpenetrate")
def test_mjcf_default_rollout_derivative_matches_finite_differences():
    """Through a warm-started rollout of the MJCF default (``sim_config(sim.Constraint())``:
    MuJoCo's contact by the Newton solve, each solve started from the previous step's
    acceleration, which carries no derivative; the implicit derivative at each solution): the
    forward derivative of the state after 40 steps (the box sliding on four contacts, its arm
    falling onto its limit) in the push speed is central finite differences' to 1e-6
    (relative)."""
    loaded = jaxdyn.load_mjcf(LIMIT_MJCF)
    model, conv = loaded.model, loaded.converter()
    cfg = loaded.sim_config(sim.Constraint(), limits="constraint")
    assert _contact(cfg).warm_start and _contact(cfg).solver == "newton"
    q0 = np.asarray(loaded.q0)

    def final(speed):
        v0 = jnp.asarray(conv.v_from_mujoco(q0, LIMIT_PUSH)) * speed / LIMIT_PUSH[0]
        s0 = sim.warm_state(model, sim.State(jnp.asarray(q0), v0), cfg)
        tr = sim.rollout(model, s0, jnp.zeros((40, 0)), cfg=cfg)
        return jnp.concatenate([tr.q[-1], tr.v[-1]])

    f = jax.jit(final)
    d = jax.jit(lambda x: jax.jvp(final, (x,), (1.0,))[1])(0.5)
    eps = 1e-6
    fd = (f(0.5 + eps) - f(0.5 - eps)) / (2 * eps)
    assert bool(jnp.all(jnp.isfinite(d))) and float(jnp.max(jnp.abs(d))) > 1e-2
    np.testing.assert_allclose(np.asarray(d), np.asarray(fd), rtol=1e-6,
                               atol=1e-6 * float(jnp.max(jnp.abs(d))))  # fmt: skip

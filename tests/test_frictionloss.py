"""MuJoCo's dry joint friction (``frictionloss``, efc type ``mjCNSTR_FRICTION_DOF``) as bounded
rows of the primal Newton solve (:class:`jaxdyn.sim.FrictionLoss`,
:mod:`jaxdyn.sim._primal`): the rows' ``efc_R`` / ``efc_aref``, one step's velocity and
``efc_force`` against MuJoCo C on hinge and slide joints with contacts (pyramidal and
elliptic cones, every zone of the rows), the bounded solve against a projected Gauss-Seidel
solve of its dual and finite differences, and the refusals of the solves that have no such
rows."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import sim
from jaxdyn.sim import _primal

mujoco = pytest.importorskip("mujoco")

# a box on the floor (four contacts) on a slide joint with frictionloss, carrying an arm on a
# hinge with frictionloss and its own solreffriction / solimpfriction: pushed to slide at
# 0.3 m/s, the box slides (its friction row at the bound), stops and sticks (quadratic zone)
# while the arm swings down (its row at either bound)
XML = """<mujoco><option timestep="0.002" tolerance="1e-14" iterations="1000" cone="{cone}"/>
<default><joint solreffriction="0.03 0.8" solimpfriction="0.8 0.9 0.01 0.5 2"/></default>
<worldbody><geom name="floor" type="plane" size="5 5 .1" friction="0.7"/>
<body name="cart" pos="0 0 0.0999">
  <joint name="x" type="slide" axis="1 0 0" frictionloss="0.8"/>
  <joint name="z" type="slide" axis="0 0 1"/>
  <geom name="cart" type="box" size="0.1 0.1 0.1" mass="2"/>
  <body name="arm" pos="0.1 0 0.1"><joint name="hinge" axis="0 1 0" frictionloss="0.2"
      solreffriction="0.01 0.7" solimpfriction="0.7 0.95 0.001"/>
    <geom name="arm" type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.5"
          contype="0" conaffinity="0"/></body></body>
</worldbody></mujoco>"""
NEWTON = sim.Constraint(soft=True, relaxed=True, solver="newton")
STEPS = 300


@pytest.mark.filterwarnings("ignore:load_mjcf.*interpenetrate")
@pytest.mark.parametrize("cone", ["pyramidal", "elliptic"])
def test_friction_rows_step_as_mujoco(cone):
    """From MuJoCo C's states along its rollout, one step with ``friction_loss="constraint"``
    gives MuJoCo's next velocity (its NEWTON solver at tolerance 1e-14) to 1e-12 and the
    friction rows' ``efc_force`` to 1e-9 N, their ``efc_R`` and ``efc_aref`` to 1e-12
    (relative); MuJoCo's rows are in each of their zones (quadratic, and at either bound) in
    the states taken. Without the rows (smooth friction) the step departs by more."""
    xml = XML.format(cone=cone)
    loaded = jaxdyn.load_mjcf(xml)
    cfg = loaded.sim_config(NEWTON, friction_loss="constraint")
    fl = cfg.friction_loss
    assert isinstance(fl, sim.FrictionLoss) and fl.dof == (0, 2)
    smooth = loaded.sim_config(NEWTON, friction_loss="smooth")
    assert smooth.friction_loss is None
    conv, model = loaded.converter(), loaded.model
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    d.qvel[:] = [0.3, 0.0, 0.0]
    pick = set(range(0, STEPS - 1, 13))
    qs, vs, R, aref, force, state = [], [], [], [], [], []
    for k in range(STEPS):
        if k in pick:
            mujoco.mj_forward(m, d)
            rows = d.efc_type == mujoco.mjtConstraint.mjCNSTR_FRICTION_DOF
            assert np.sum(rows) == 2
            R.append(d.efc_R[rows].copy())
            aref.append(d.efc_aref[rows].copy())
            force.append(d.efc_force[rows].copy())
            state.append(d.efc_state[rows].copy())
            qs.append(d.qpos.copy())
            vs.append(d.qvel.copy())
        mujoco.mj_step(m, d)
        if k in pick:
            qs.append(d.qpos.copy())
            vs.append(d.qvel.copy())
    q0, q1 = np.asarray(qs[0::2]), np.asarray(qs[1::2])
    v0, v1 = np.asarray(vs[0::2]), np.asarray(vs[1::2])
    S = mujoco.mjtConstraintState
    seen = set(np.asarray(state).ravel().tolist())
    assert {int(S.mjCNSTRSTATE_QUADRATIC), int(S.mjCNSTRSTATE_LINEARNEG)} <= seen
    assert int(S.mjCNSTRSTATE_LINEARPOS) in seen
    q = jnp.asarray(np.stack([conv.q_from_mujoco(x) for x in q0]))
    v = jnp.asarray(np.stack([conv.v_from_mujoco(x, y) for x, y in zip(q0, v0, strict=True)]))
    want = np.stack([conv.v_from_mujoco(x, y) for x, y in zip(q1, v1, strict=True)])
    s = sim.State(q, v, jnp.zeros(len(q0)))
    u = jnp.zeros(0)
    b, info = jax.jit(jax.vmap(lambda s: sim.step_info(model, s, u, cfg)))(s)
    np.testing.assert_allclose(np.asarray(b.v), want, rtol=0, atol=1e-12)
    assert float(jnp.max(info["contact_residual"])) < 1e-9
    c = jax.jit(jax.vmap(lambda s: sim.step(model, s, u, smooth)))(s)
    assert np.abs(np.asarray(c.v) - want).max() > 1e-4
    # the rows: R, aref (v_free = v: u = -h aref) and the force at the step's velocity
    h = cfg.dt

    def rows(v, vn):
        return fl.primal_rows(model, v, vn, h)

    _, u0, R0, _, _ = jax.vmap(rows)(v, v)
    np.testing.assert_allclose(np.asarray(R0), np.asarray(R), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(-u0 / h), np.asarray(aref), rtol=1e-12, atol=1e-12)
    _, y, R1, lo, hi = jax.vmap(rows)(v, b.v)
    f = np.asarray(jnp.clip(-y / R1, lo, hi)) / h  # the impulses at the step's velocity
    np.testing.assert_allclose(f, np.asarray(force), rtol=0, atol=1e-9)


def _pgs(M, J, u, R, lo, hi, sweeps=20000):
    """The bounded rows' dual ``min 1/2 lam^T (J M^-1 J^T + diag R) lam + u^T lam``, ``lo <=
    lam <= hi``, by projected Gauss-Seidel sweeps (an independent oracle)."""
    A = J @ np.linalg.solve(M, J.T) + np.diag(R)
    lam = np.zeros(len(u))
    for _ in range(sweeps):
        old = lam.copy()
        for i in range(len(u)):
            lam[i] = np.clip(lam[i] - (A[i] @ lam + u[i]) / A[i, i], lo[i], hi[i])
        if np.max(np.abs(lam - old)) < 1e-15:
            break
    return lam


def test_bounded_rows_solve_is_the_dual_minimiser_and_differentiates():
    """:func:`jaxdyn.sim._primal.newton_solve` with impulse bounds (one-sided rows and
    dry-friction rows ``-b <= lam <= b``, some of each at a bound, some inside) on random
    problems: its impulses are projected Gauss-Seidel's on the dual to 1e-10, the pyramidal
    and elliptic solves (no contacts) agree to 1e-12, and its derivative in ``u`` and the
    bounds is the central difference's to 1e-6."""
    rng = np.random.default_rng(3)
    nv, n = 5, 9
    for _ in range(3):
        A = rng.normal(size=(nv, nv))
        M = A @ A.T + nv * np.eye(nv)
        J = rng.normal(size=(n, nv))
        u = rng.normal(size=n)
        R = rng.uniform(0.05, 0.5, n)
        b = rng.uniform(0.2, 3.0, n)
        two = np.arange(n) % 2 == 0  # the friction rows
        lo, hi = np.where(two, -b, 0.0), np.where(two, b, np.inf)
        z = _primal.newton_solve(M, J, u, R, lo=lo, hi=hi)
        lam = np.asarray(_primal.impulses(J, u, R, z, lo, hi))
        want = _pgs(M, J, u, R, lo, hi)
        np.testing.assert_allclose(lam, want, rtol=0, atol=1e-10)
        np.testing.assert_allclose(np.asarray(z), np.linalg.solve(M, J.T @ want), atol=1e-10)
        at = np.isclose(np.abs(lam[two]), b[two])
        assert at.any() and (~at).any()  # both zones of the friction rows
        none = (jnp.zeros((0, 3, nv)), jnp.zeros((0, 3)), jnp.zeros((0, 3)), jnp.zeros(0))
        ze = _primal.newton_solve_elliptic(M, *none, jnp.zeros((0, 2)), J, u, 1 / R, lo=lo, hi=hi)
        np.testing.assert_allclose(np.asarray(ze), np.asarray(z), rtol=0, atol=1e-12)

        def f(t, du, db):
            bb = b + t * db
            lo_, hi_ = jnp.where(two, -bb, 0.0), jnp.where(two, bb, jnp.inf)
            return _primal.newton_solve(M, J, u + t * du, R, lo=lo_, hi=hi_)

        du, db = rng.normal(size=n), rng.normal(size=n)
        _, dz = jax.jvp(lambda t: f(t, du, db), (0.0,), (1.0,))
        eps = 1e-6
        fd = (f(eps, du, db) - f(-eps, du, db)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(dz), np.asarray(fd), rtol=0, atol=1e-6)


@pytest.mark.filterwarnings("ignore:load_mjcf.*interpenetrate")
def test_friction_rows_refused_without_the_primal_solve():
    """The dual and hard solves have no dry-friction rows: ``SimConfig`` refuses
    ``friction_loss`` with them by name; ``sim_config`` refuses an unknown
    ``friction_loss``; ``FrictionLoss`` refuses bad rows and ``MJCFModel.friction_loss`` a
    ball joint's frictionloss."""
    loaded = jaxdyn.load_mjcf(XML.format(cone="pyramidal"))
    cfg = loaded.sim_config(NEWTON, friction_loss="constraint")
    fl = cfg.friction_loss
    for contact in (
        sim.Constraint(),
        sim.Constraint(soft=True, relaxed=True, solver="dual"),
        sim.Compliant(),
    ):
        with pytest.raises(ValueError, match="friction_loss"):
            dataclasses.replace(cfg, contact=contact)
    with pytest.raises(ValueError, match="friction_loss must be"):
        loaded.sim_config(NEWTON, friction_loss="dry")
    with pytest.raises(ValueError, match="frictionloss must be >= 0"):
        dataclasses.replace(fl, frictionloss=-fl.frictionloss)
    with pytest.raises(ValueError, match="solref has shape"):
        dataclasses.replace(fl, solref=fl.solref[:1])
    with pytest.raises(ValueError, match="dof must be distinct"):
        dataclasses.replace(fl, dof=(0, 0))
    with pytest.raises(ValueError, match="not a velocity coordinate"):
        dataclasses.replace(fl, dof=(0, 9)).check_model(loaded.model)
    ball = """<mujoco><worldbody><body><joint type="ball" frictionloss="0.1"/>
      <geom type="sphere" size="0.1"/></body></worldbody></mujoco>"""
    with pytest.raises(ValueError, match="ball or free"):
        jaxdyn.load_mjcf(ball).friction_loss()

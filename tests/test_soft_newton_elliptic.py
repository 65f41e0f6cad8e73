"""MuJoCo's primal Newton solve on elliptic cones (``mj_solNewton`` under ``mjCONE_ELLIPTIC``),
``sim.Constraint(soft=True, relaxed=True, solver="newton")`` with ``cone="elliptic"``
(:func:`jaxdyn.sim._primal.newton_solve_elliptic`): the three zones of MuJoCo's cone cost
(top: separating, no force; bottom: sticking, every row quadratic; middle: sliding, on the
cone's surface) against MuJoCo C's ``efc_state`` / ``efc_force`` / ``qacc`` in one step
(condim 3 and 6, ``impratio``), derivatives against finite differences, and rollouts against
MuJoCo C's (condim 3, 4 and 6 with a joint-limit row)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import sim
from jaxdyn.sim import _primal

mujoco = pytest.importorskip("mujoco")

from _mujoco_ref import mujoco_rollout  # noqa: E402
from test_condim import _mujoco_rows  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:load_mjcf.*interpenetrate")  # on purpose

# a ball at rest on the floor nudged sideways (friction stops it within the step: sticking,
# the bottom zone), a box sliding (its corners on the cone's surface: the middle zone) and a
# ball leaving the floor (its contact separating: the top zone); MuJoCo's Newton solver to
# tolerance 1e-14 with its line search made exact (ls_tolerance: at its default 0.01 the box's
# solve stops 7e-8 from the minimiser) and impratio 1.7 (the regularised cone's mu = friction /
# sqrt(impratio))
ZONES_MJCF = """<mujoco>
<option timestep="0.002" cone="elliptic" impratio="1.7" tolerance="1e-30" iterations="100"
        ls_tolerance="1e-12"/>
<default><geom condim="{condim}" friction="0.6 0.03 0.002"/></default>
<worldbody><geom name="floor" type="plane" size="5 5 .1"/>
<body name="stick" pos="0 0 0.0498"><freejoint/>
  <geom name="stick" contype="1" conaffinity="0" size="0.05" mass="0.5"/></body>
<body name="slide" pos="0.5 0 0.0499"><freejoint/>
  <geom name="slide" contype="1" conaffinity="0" type="box" size="0.1 0.08 0.05" mass="1.5"/>
</body>
<body name="leave" pos="-0.5 0 0.0499"><freejoint/>
  <geom name="leave" contype="1" conaffinity="0" size="0.05" mass="0.4"/></body>
</worldbody></mujoco>"""
ZONES_QVEL = np.r_[
    np.r_[0.002, 0.001, 0, 0, 0, 0.01],  # stick: a nudge friction takes out within the step
    np.r_[1.0, 0.3, 0, 0, 0, 2.0],  # slide: sliding and turning
    np.r_[0.2, 0, 1.0, 0, 0, 0],  # leave: moving up off the floor
]
ELLIPTIC = sim.Constraint(soft=True, relaxed=True, solver="newton", cone="elliptic", impratio=1.7)


def _mujoco_step_problem(condim):
    """MuJoCo C at the scene's first step (``mj_forward``): its contacts in jaxdyn's rows
    (``test_condim._mujoco_rows``), ``M``, ``qacc_smooth``'s free velocity, ``qacc`` and the
    contacts' ``efc_state``."""
    m = mujoco.MjModel.from_xml_string(ZONES_MJCF.format(condim=condim))
    d = mujoco.MjData(m)
    d.qvel[:] = ZONES_QVEL
    mujoco.mj_forward(m, d)
    assert m.opt.solver == mujoco.mjtSolver.mjSOL_NEWTON and d.ncon == 6
    Jc, frames, want = _mujoco_rows(m, d)
    M = np.zeros((m.nv, m.nv))
    mujoco.mj_fullM(m, d, M)
    h = m.opt.timestep
    v_free = d.qvel + h * d.qacc_smooth
    states = [int(d.efc_state[c.efc_address]) for c in d.contact[: d.ncon]]
    return m, d, Jc, frames, want, M, v_free, states


@pytest.fixture(scope="module")
def primal_step():
    """``solve_soft_rows`` on MuJoCo's rows (jitted once for the module's problems)."""

    def run(Minv, Jc, frames, rows, v_rows, h, M):
        return _primal.solve_soft_rows(ELLIPTIC, Minv, Jc, frames, rows, v_rows, h, None, None, M)

    return jax.jit(run)


@pytest.mark.parametrize("condim", [3, 6])
def test_zones_are_mujocos(condim, primal_step):
    """One step of the three-zone scene (condim 3; condim 6: the torsional and rolling rows in
    the cone, ``R_j = R_1 mu_1^2 / mu_j^2``), solved on MuJoCo's own contact rows, free
    velocity, distances and parameters: the contacts' zones are MuJoCo C's ``efc_state``
    (every zone present: ``SATISFIED`` top, ``QUADRATIC`` bottom, ``CONE`` middle), their
    impulses ``h efc_force`` to 1e-10 of the largest and the acceleration MuJoCo's ``qacc``
    to 1e-10 of its largest."""
    m, d, Jc, frames, want, M, v_free, states = _mujoco_step_problem(condim)
    S = mujoco.mjtConstraintState
    zones = (S.mjCNSTRSTATE_SATISFIED, S.mjCNSTRSTATE_QUADRATIC, S.mjCNSTRSTATE_CONE)
    assert set(states) == {int(s) for s in zones}
    h = m.opt.timestep
    w = frames.width
    rows = lambda x: jnp.asarray((Jc @ x).reshape(-1, w))  # noqa: E731
    Minv = jnp.asarray(np.linalg.inv(M))
    lam, lam_l, res, x, z = primal_step(
        Minv, jnp.asarray(Jc), frames, rows(v_free), rows(d.qvel), h, jnp.asarray(M)
    )
    assert lam_l is None and float(res) < 1e-12
    np.testing.assert_allclose(np.asarray(lam), want, rtol=0, atol=1e-10 * np.abs(want).max())
    qacc = (v_free - d.qvel + np.asarray(z)) / h
    np.testing.assert_allclose(qacc, d.qacc, rtol=0, atol=1e-10 * np.abs(d.qacc).max())
    # jaxdyn's zones at its solution are MuJoCo's (0 top, 1 bottom, 2 middle)
    uc, Dc, mu, fr, _ = sim.contact.soft_elliptic_rows(
        ELLIPTIC, frames, jnp.zeros(len(states)), rows(v_free), rows(d.qvel), h
    )
    y = jnp.asarray(Jc).reshape(len(states), w, -1) @ z + uc
    zone = np.asarray(_primal._cone_zones(y, Dc, mu, fr)[4])
    assert [int(zones[k]) for k in zone] == states
    if condim == 6:  # the torsional and rolling rows carry impulses
        assert np.abs(want[:, 3:]).max() > 1e-6 * np.abs(want).max()


@pytest.mark.slow  # the rollout's compile (12 s)
def test_elliptic_rollout_follows_mujoco():
    """``tests/test_condim.py``'s scene on elliptic cones (condim 3, 4 and 6: sliding, spinning
    and rolling contacts, impratio 1.7) with its pendulum's joint-limit row, warm-started
    ``solver="newton"`` on the file's elliptic cones: jaxdyn's rollout follows MuJoCo C's
    (tolerance 1e-14) to 1e-10 in ``qpos`` at every step (seen 1.4e-11)."""
    from test_condim import ARM, CONDIM_MJCF, QVEL, STEPS

    xml = CONDIM_MJCF.format(cone="elliptic").replace("</worldbody>", ARM + "</worldbody>")
    qvel = np.r_[QVEL, 6.0]
    loaded = jaxdyn.load_mjcf(xml)
    contact = sim.Constraint(soft=True, relaxed=True, solver="newton", warm_start=True)
    cfg = loaded.sim_config(contact, limits="constraint")
    assert isinstance(cfg.contact, sim.Constraint) and cfg.contact.cone == "elliptic"
    assert cfg.limit_constraints is not None and _primal_used(cfg)
    conv, model, q0 = loaded.converter(), loaded.model, np.asarray(loaded.q0)
    s0 = sim.State(jnp.asarray(q0), jnp.asarray(conv.v_from_mujoco(q0, qvel)))
    s0 = sim.warm_state(model, s0, cfg)
    tr = jax.jit(lambda s: sim.rollout(model, s, jnp.zeros((STEPS, 0)), cfg=cfg))(s0)
    q = np.array([conv.q_to_mujoco(np.asarray(x)) for x in tr.q])
    (ref,) = mujoco_rollout(mujoco.MjModel.from_xml_string(xml), STEPS, qvel=qvel)
    np.testing.assert_allclose(q, ref, rtol=0, atol=1e-10)


def _primal_used(cfg):
    return sim.contact.uses_primal_newton(cfg.contact)


def test_elliptic_derivatives_match_finite_differences(primal_step):
    """The implicit derivative of the elliptic primal solve (``H dz = -dgrad``, the middle
    zone's cone Hessian included) of the three-zone scene's impulses with respect to the free
    velocity matches central finite differences to 1e-6 relative (float64)."""
    m, d, Jc, frames, want, M, v_free, states = _mujoco_step_problem(3)
    h, w = m.opt.timestep, frames.width
    Minv, Mj, J = jnp.asarray(np.linalg.inv(M)), jnp.asarray(M), jnp.asarray(Jc)
    v_rows = jnp.asarray((Jc @ d.qvel).reshape(-1, w))

    def impulses(vf):
        rows = (J @ vf).reshape(-1, w)
        return primal_step(Minv, J, frames, rows, v_rows, h, Mj)[0].reshape(-1)

    vf = jnp.asarray(v_free)
    dv = jnp.asarray(np.random.default_rng(0).normal(size=m.nv)) * 1e-2
    _, jvp = jax.jvp(impulses, (vf,), (dv,))
    eps = 1e-3  # a 1e-5 m/s step: well above the solve's stopping noise, below a zone change
    fd = (impulses(vf + eps * dv) - impulses(vf - eps * dv)) / (2 * eps)
    scale = float(jnp.abs(fd).max())
    assert scale > 0
    np.testing.assert_allclose(np.asarray(jvp), np.asarray(fd), rtol=0, atol=1e-6 * scale)

"""MuJoCo's primal Newton solve on elliptic cones (``mj_solNewton`` under ``mjCONE_ELLIPTIC``),
``sim.Constraint(soft=True, relaxed=True, solver="newton")`` with ``cone="elliptic"``
(:func:`jaxdyn.sim._primal.newton_solve_elliptic`): the three zones of MuJoCo's cone cost
(top: separating, no force; bottom: sticking, every row quadratic; middle: sliding, on the
cone's surface) against MuJoCo C's ``efc_state`` / ``efc_force`` / ``qacc`` in one step
(condim 3 and 6, ``impratio``), derivatives against finite differences, and rollouts against
MuJoCo C's (condim 3, 4 and 6 with a joint-limit row)."""

import dataclasses

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

"""The defaults of ``load_mjcf(...).sim_config`` under MuJoCo's contact mean what the file means:
joint limits as MuJoCo's soft limit rows and ``frictionloss`` as its dry-friction rows
(``limits`` / ``friction_loss`` left out), checked against MuJoCo C's ``mj_step`` on a
rollout that hits the limits and sticks a joint by its dry friction; the contacts that cannot
take the rows (hard, dual, compliant) warn naming the joints and what they get instead."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import sim

mujoco = pytest.importorskip("mujoco")

from _mujoco_ref import mujoco_rollout  # noqa: E402

# a free box on the floor (pushed to slide, then sticking on its four contacts) beside an arm
# on two limited hinges with frictionloss and damping, the shoulder driven by a motor: the
# elbow hits its limit and the shoulder its upper one; the elbow sticks by its dry friction
# while the shoulder swings. MuJoCo's defaults everywhere else (solref, solimp, tolerance,
# iterations, pyramidal cones); Euler with damping: jaxdyn's "implicit_damping"
XML = """<mujoco><option timestep="0.002" integrator="Euler"/>
<worldbody><geom name="floor" type="plane" size="5 5 .1"/>
<body name="box" pos="0 0 0.1"><freejoint name="box"/>
  <geom name="box" type="box" size="0.1 0.1 0.1" mass="1"/></body>
<body name="base" pos="0 1 0.6">
  <body name="upper"><joint name="shoulder" axis="0 1 0" range="-20 40" frictionloss="0.2"
      damping="0.1"/>
    <geom name="upper" type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.5"
          contype="0" conaffinity="0"/>
    <body name="fore" pos="0.3 0 0"><joint name="elbow" axis="0 1 0" range="-10 10"
        frictionloss="0.3" damping="0.05"/>
      <geom name="fore" type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.2"
            contype="0" conaffinity="0"/></body></body></body>
</worldbody>
<actuator><motor name="shoulder" joint="shoulder" ctrlrange="-4 4"/></actuator></mujoco>"""
STEPS = 250  # 0.5 s
CTRL = np.zeros((STEPS, 1))
CTRL[:60], CTRL[60:150], CTRL[150:] = -3.0, 2.0, 0.5
QVEL = np.r_[0.6, np.zeros(7)]


def _rows(d):
    """MuJoCo's limit rows and the states of its dry-friction rows in ``d`` (after a step: the
    rows of that step's solve)."""
    T = mujoco.mjtConstraint
    lim = int(np.sum(d.efc_type == T.mjCNSTR_LIMIT_JOINT))
    states = d.efc_state[d.efc_type == T.mjCNSTR_FRICTION_DOF]
    return np.r_[lim, np.full(2, -1) if len(states) != 2 else states, d.ncon]


def _rollout(loaded, cfg):
    conv, model, q0 = loaded.converter(), loaded.model, np.asarray(loaded.q0)
    s0 = sim.State(jnp.asarray(q0), jnp.asarray(conv.v_from_mujoco(q0, QVEL)))
    s0 = sim.warm_state(model, s0, cfg)
    tr = jax.jit(lambda s, u: sim.rollout(model, s, u, cfg=cfg))(s0, jnp.asarray(CTRL))
    q = np.array([conv.q_to_mujoco(np.asarray(x)) for x in tr.q])
    v = np.array([conv.v_to_mujoco(np.asarray(a), np.asarray(b)) for a, b in zip(tr.q, tr.v)])
    return q, v


@pytest.mark.filterwarnings("error::jaxdyn.JaxdynWarning")
def test_default_sim_config_steps_as_mujoco():
    """``sim_config(sim.Constraint())`` with ``limits`` and ``friction_loss`` left at their
    defaults takes the file's limit rows and dry-friction rows (the solref / solimp of each),
    and its warm-started rollout of 0.5 s under open-loop controls is MuJoCo C's (``mj_step``,
    Euler, the same timestep) to 1e-10 in ``qpos`` and ``qvel`` at every step (seen 1e-15 and
    2e-14); along it MuJoCo's limit rows act (both hinges, some steps two rows at once), the
    elbow's dry-friction row sticks (its quadratic zone) and slips (at a bound), and the box
    rests on its four contacts. jaxdyn's smooth Coulomb friction in place of the rows
    (``friction_loss="smooth"``, the old default) departs by more than 1e-3. No warning."""
    loaded = jaxdyn.load_mjcf(XML)
    cfg = loaded.sim_config(sim.Constraint())
    assert cfg.integrator == "implicit_damping"
    assert cfg.friction_loss is not None and cfg.friction_loss.dof == (0, 7)
    lim = cfg.limit_constraints
    assert lim is not None and lim.dof == (0, 7)
    m = loaded.mj_model
    np.testing.assert_array_equal(np.asarray(lim.solref), m.jnt_solref[1:])
    np.testing.assert_array_equal(np.asarray(cfg.friction_loss.solimp), m.dof_solimp[6:])
    qs, vs, rows = mujoco_rollout(m, qvel=QVEL, ctrl=CTRL, fields=("qpos", "qvel", _rows))
    S = mujoco.mjtConstraintState
    assert np.sum(rows[:, 0] >= 1) >= 50 and np.any(rows[:, 0] == 2)  # limits hit
    elbow = rows[:, 2]
    assert np.sum(elbow == S.mjCNSTRSTATE_QUADRATIC) >= 10  # stuck by its dry friction
    assert np.any(elbow == S.mjCNSTRSTATE_LINEARNEG) and np.any(elbow == S.mjCNSTRSTATE_LINEARPOS)
    assert np.sum(rows[:, 3] == 4) >= 150  # the box on the floor
    assert np.ptp(qs[:, 7]) > 0.5 and qs[:, 7].max() > np.deg2rad(40)  # the shoulder swings
    q, v = _rollout(loaded, cfg)
    np.testing.assert_allclose(q, qs, rtol=0, atol=1e-10)
    np.testing.assert_allclose(v, vs, rtol=0, atol=1e-10)
    smooth = loaded.sim_config(sim.Constraint(), friction_loss="smooth")
    assert smooth.friction_loss is None and smooth.limit_constraints is not None
    q, _ = _rollout(loaded, smooth)
    assert np.abs(q - qs).max() > 1e-3


def test_contacts_without_the_rows_warn():
    """The hard contact, the dual solve and the compliant contact cannot take MuJoCo's limit
    and dry-friction rows: by default they keep jaxdyn's smooth models and warn
    (:class:`jaxdyn.JaxdynWarning`) naming the joints and what each gets instead; naming the
    smooth models (``limits="spring"``, ``friction_loss="smooth"``) is silent, and so is the
    contact off (``sim_config()``). Explicit values keep working: ``limits="constraint"`` with
    the hard contact, ``friction_loss=None``. A ball joint's frictionloss under MuJoCo's
    contact: rows on the hinges, the ball's smooth friction, with a warning naming it. MuJoCo's
    contact asked of a file without contact geoms: the limit rows alone, the dry friction
    smooth, with a warning."""
    loaded = jaxdyn.load_mjcf(XML)
    for contact in (
        sim.Constraint(soft=False),
        sim.Constraint(soft=True, relaxed=True, solver="dual"),
        sim.Compliant(),
    ):
        with pytest.warns(jaxdyn.JaxdynWarning) as rec:
            cfg = loaded.sim_config(contact)
        assert len(rec) == 1
        msg = str(rec[0].message)
        assert "frictionloss of the joints ['shoulder', 'elbow']" in msg
        assert "limits of the joints ['shoulder', 'elbow']" in msg
        assert 'limits="spring"' in msg and 'friction_loss="smooth"' in msg
        assert cfg.friction_loss is None and cfg.limit_constraints is None
        assert cfg.limits is not None
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cfg = loaded.sim_config(contact, limits="spring", friction_loss="smooth")
        assert cfg.friction_loss is None and cfg.limit_constraints is None
    with pytest.warns(jaxdyn.JaxdynWarning, match="frictionloss of the joints") as rec:
        cfg = loaded.sim_config(sim.Constraint(soft=False), limits="constraint")
    assert "limits of" not in str(rec[0].message) and cfg.limit_constraints is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        off = loaded.sim_config()
        assert off.friction_loss is None and off.limit_constraints is None
        cfg = loaded.sim_config(sim.Constraint(), friction_loss=None, limits=None)
        assert cfg.friction_loss is None and cfg.limit_constraints is None and cfg.limits is None
    with pytest.raises(ValueError, match="limits must be 'constraint', 'spring'"):
        loaded.sim_config(sim.Constraint(), limits="mujoco")
    # MuJoCo's contact asked of a file without contacts: the limit rows alone (their own
    # solve), the dry friction smooth, with a warning saying so
    arm = XML.replace('<geom name="floor" type="plane" size="5 5 .1"/>', "")
    arm = arm[: arm.index('<body name="box"')] + arm[arm.index('<body name="base"') :]
    armed = jaxdyn.load_mjcf(arm)
    assert armed.geoms is None and not armed.contacts
    with pytest.warns(jaxdyn.JaxdynWarning, match="no contact geoms") as rec:
        cfg = armed.sim_config(sim.Constraint())
    assert len(rec) == 1 and "frictionloss of the joints ['shoulder', 'elbow']" in str(
        rec[0].message
    )
    assert cfg.contact is None and cfg.friction_loss is None
    assert cfg.limit_constraints is not None and cfg.limit_constraints.dof == (0, 1)
    ball = XML.replace(
        '<freejoint name="box"/>', '<joint name="ball" type="ball" frictionloss="0.1"/>'
    )
    loaded = jaxdyn.load_mjcf(ball)
    with pytest.warns(jaxdyn.JaxdynWarning, match=r"ball / free joints \['ball'\]"):
        cfg = loaded.sim_config(sim.Constraint())
    assert cfg.friction_loss is not None and len(cfg.friction_loss.dof) == 2

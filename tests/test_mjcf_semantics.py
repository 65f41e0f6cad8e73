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


def _rollout(loaded, cfg, ctrl=CTRL, qvel=QVEL):
    conv, model, q0 = loaded.converter(), loaded.model, np.asarray(loaded.q0)
    s0 = sim.State(jnp.asarray(q0), jnp.asarray(conv.v_from_mujoco(q0, qvel)))
    s0 = sim.warm_state(model, s0, cfg)
    tr = jax.jit(lambda s, u: sim.rollout(model, s, u, cfg=cfg))(s0, jnp.asarray(ctrl))
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
    contact off (``sim_config()``), which takes both rows. Explicit values keep working:
    ``limits="constraint"`` with the hard contact, ``friction_loss=None``. A ball joint's
    frictionloss under MuJoCo's contact: rows on the hinges, the ball's smooth friction, with a
    warning naming it. MuJoCo's contact asked of a file without contact geoms: both rows,
    solved alone, silently."""
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
        assert off.contact is None and off.limit_constraints is not None
        assert off.friction_loss is not None and off.friction_loss.dof == (0, 7)
        cfg = loaded.sim_config(sim.Constraint(), friction_loss=None, limits=None)
        assert cfg.friction_loss is None and cfg.limit_constraints is None and cfg.limits is None
    with pytest.raises(ValueError, match="limits must be 'constraint', 'spring'"):
        loaded.sim_config(sim.Constraint(), limits="mujoco")
    # MuJoCo's contact asked of a file without contacts: both rows, solved alone, silently
    arm = XML.replace('<geom name="floor" type="plane" size="5 5 .1"/>', "")
    arm = arm[: arm.index('<body name="box"')] + arm[arm.index('<body name="base"') :]
    armed = jaxdyn.load_mjcf(arm)
    assert armed.geoms is None and not armed.contacts
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = armed.sim_config(sim.Constraint())
    assert cfg.contact is None and cfg.friction_loss is not None
    assert cfg.friction_loss.dof == (0, 1)
    assert cfg.limit_constraints is not None and cfg.limit_constraints.dof == (0, 1)
    ball = XML.replace(
        '<freejoint name="box"/>', '<joint name="ball" type="ball" frictionloss="0.1"/>'
    )
    loaded = jaxdyn.load_mjcf(ball)
    with pytest.warns(jaxdyn.JaxdynWarning, match=r"ball / free joints \['ball'\]"):
        cfg = loaded.sim_config(sim.Constraint())
    assert cfg.friction_loss is not None and len(cfg.friction_loss.dof) == 2


# ----------------------------------------------------------------------- contact off
# contact-free scenes (sim_config(), contact None): MuJoCo's limit and dry-friction rows by
# default, solved alone. A pendulum falling from horizontal into its range's upper bound
# (Euler); a slider held by its dry friction under a motor below its frictionloss, then pushed
# through it, then braked until it sticks again, beside a hinge whose dry friction gravity
# overcomes until the swing stops it (Euler, armature); a two-hinge arm with both limits and
# frictionloss and damping, the shoulder driven by a motor (Euler with damping); a driven
# limited hinge with frictionloss and a second one coupled to it by a joint equality
# (implicitfast: the equality row eliminated beside the limit and dry-friction rows)
PENDULUM = """<mujoco><option timestep="0.002" integrator="Euler"/><worldbody>
<body name="pole" pos="0 0 1"><joint name="hinge" axis="0 1 0" range="-30 60"/>
  <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.5"/></body>
</worldbody></mujoco>"""
SLIDER = """<mujoco><option timestep="0.002" integrator="Euler"/><worldbody>
<body name="cart" pos="0 0 1"><joint name="slide" type="slide" axis="1 0 0" frictionloss="1"
    armature="0.05"/>
  <geom type="box" size="0.1 0.1 0.1" mass="1"/></body>
<body name="pole" pos="0 1 1"><joint name="swing" axis="0 1 0" frictionloss="0.1"/>
  <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.2"/></body>
</worldbody><actuator><motor name="slide" joint="slide"/></actuator></mujoco>"""
ARM = """<mujoco><option timestep="0.002" integrator="Euler"/><worldbody>
<body name="upper" pos="0 0 1"><joint name="shoulder" axis="0 1 0" range="-20 40"
    frictionloss="0.2" damping="0.1"/>
  <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.5"/>
  <body name="fore" pos="0.3 0 0"><joint name="elbow" axis="0 1 0" range="-10 10"
      frictionloss="0.3" damping="0.05"/>
    <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.2"/></body></body>
</worldbody><actuator><motor name="shoulder" joint="shoulder" ctrlrange="-4 4"/></actuator>
</mujoco>"""
COUPLED = """<mujoco><option timestep="0.002" integrator="implicitfast"/><worldbody>
<body name="a" pos="0 0 1"><joint name="driven" axis="0 1 0" range="-30 45" frictionloss="0.2"
    damping="0.05"/>
  <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.5"/></body>
<body name="b" pos="0 1 1"><joint name="follower" axis="0 1 0" frictionloss="0.05"/>
  <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.2"/></body>
</worldbody><equality><joint joint1="follower" joint2="driven" polycoef="0 0.5 0 0 0"/>
</equality><actuator><motor joint="driven"/></actuator></mujoco>"""
FREE_STEPS = 300  # 0.6 s
FREE_CTRL = {
    "pendulum": np.zeros((FREE_STEPS, 0)),
    "slider": np.r_[np.full(80, 0.5), np.full(80, 3.0), np.full(140, -0.2)][:, None],
    "arm": np.r_[np.full(60, -3.0), np.full(90, 2.0), np.full(150, 0.5)][:, None],
    "coupled": np.r_[np.full(100, 0.1), np.full(100, -1.0), np.full(100, 0.3)][:, None],
}
FREE_XML = {"pendulum": PENDULUM, "slider": SLIDER, "arm": ARM, "coupled": COUPLED}
STUCK, SLIP = 1, 2  # a dry-friction row inside its bounds / at one (no row: 0)


def _free_rows(d):
    """The active limit rows of each joint and the zone of each dof's dry-friction row in
    ``d`` (after a step: that step's solve), from the rows' forces: inside the bound
    (``STUCK``) or at it (``SLIP``)."""
    T = mujoco.mjtConstraint
    lim, zone = np.zeros(d.model.njnt, int), np.zeros(d.model.nv, int)
    for i in range(d.nefc):
        if d.efc_type[i] == T.mjCNSTR_LIMIT_JOINT:
            lim[d.efc_id[i]] += 1
        elif d.efc_type[i] == T.mjCNSTR_FRICTION_DOF:
            inside = abs(d.efc_force[i]) < (1 - 1e-9) * d.efc_frictionloss[i]
            zone[d.efc_id[i]] = STUCK if inside else SLIP
    return np.r_[lim, zone]


@pytest.fixture(scope="module")
def free_scenes():
    """Per scene: the loaded file, its ``sim_config()`` (no warning), MuJoCo C's rollout
    (``qpos``, ``qvel``, :func:`_free_rows`) and jaxdyn's (one compile each)."""
    out = {}
    for name, xml in FREE_XML.items():
        loaded = jaxdyn.load_mjcf(xml)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cfg = loaded.sim_config()
        ctrl, zero = FREE_CTRL[name], np.zeros(loaded.mj_model.nv)
        ref = mujoco_rollout(loaded.mj_model, ctrl=ctrl, fields=("qpos", "qvel", _free_rows))
        out[name] = (loaded, cfg, ref, _rollout(loaded, cfg, ctrl, zero))
    return out


@pytest.mark.parametrize("name", list(FREE_XML))
def test_contact_off_steps_as_mujoco(free_scenes, name):
    """With contact off (``sim_config()``) the limited hinges get MuJoCo's limit rows and the
    joints with ``frictionloss`` its dry-friction rows by default, solved alone (the limit
    rows by their own solve, with dry-friction rows MuJoCo's primal problem of both by Newton
    steps), and the rollout is MuJoCo C's (``mj_step``, the file's integrator: Euler,
    Euler with damping, implicitfast) to 1e-10 in ``qpos`` and ``qvel`` at every step of
    0.6 s (seen up to 7e-13 and 2e-12, on the slider; 1e-15 and 3e-14 on the others). Along
    MuJoCo's rollout the rows act: the pendulum rests on its upper bound's limit row; the
    slider sticks under a push below its frictionloss, slips above it and sticks again, the
    hinge beside it slips under gravity and sticks; on the arm both limits are hit and both
    joints stick and slip; the coupled pair's limit row acts beside its equality."""
    loaded, cfg, (qs, vs, rows), (q, v) = free_scenes[name]
    assert cfg.contact is None
    nj = loaded.mj_model.njnt
    lim, zone = rows[:, :nj], rows[:, nj:]
    if name == "pendulum":
        assert cfg.friction_loss is None and cfg.limit_constraints.dof == (0,)
        assert np.sum(lim[:, 0]) >= 150 and qs.max() > np.deg2rad(60)
    elif name == "slider":
        assert cfg.limit_constraints is None and cfg.friction_loss.dof == (0, 1)
        assert np.all(zone[:80, 0] == STUCK) and np.all(zone[80:160, 0] == SLIP)
        assert np.all(zone[-5:] == STUCK)  # both stuck at the end
        assert np.sum(zone[:, 1] == SLIP) >= 150 and np.sum(zone[:, 1] == STUCK) >= 50
    elif name == "arm":
        assert cfg.limit_constraints.dof == (0, 1) and cfg.friction_loss.dof == (0, 1)
        assert np.all(np.sum(lim > 0, 0) >= 100)  # both limits, 100 steps or more
        assert np.all(np.sum(zone == STUCK, 0) >= 40) and np.all(np.sum(zone == SLIP, 0) >= 150)
    else:
        assert cfg.equalities is not None and cfg.limit_constraints.dof == (0,)
        assert cfg.friction_loss.dof == (0, 1)
        assert np.sum(lim[:, 0] > 0) >= 50 and np.all(np.sum(zone == SLIP, 0) >= 200)
    np.testing.assert_allclose(q, qs, rtol=0, atol=1e-10)
    np.testing.assert_allclose(v, vs, rtol=0, atol=1e-10)


def test_spring_limits_depart_from_mujoco(free_scenes):
    """The pendulum with jaxdyn's spring-damper limit (``limits="spring"``, the default with
    contact off before MuJoCo's rows) departs from MuJoCo C's rollout by more than 1e-3 (the
    default matters; seen 0.05 rad), and names no row."""
    loaded, _, (qs, _, _), _ = free_scenes["pendulum"]
    cfg = loaded.sim_config(limits="spring")
    assert cfg.limit_constraints is None and cfg.friction_loss is None
    q, _ = _rollout(loaded, cfg, FREE_CTRL["pendulum"], np.zeros(1))
    assert np.abs(q - qs).max() > 1e-3


@pytest.fixture(scope="module")
def arm_states(free_scenes):
    """The arm's model, configuration and jaxdyn's states at every step."""
    loaded, cfg, _, (q, v) = free_scenes["arm"]
    return loaded.model, cfg, q, v  # one-DoF chain: jaxdyn's order is MuJoCo's


def test_batched_step_equals_unbatched(arm_states):
    """A jitted, vmapped step of the arm over states where its limit rows act and its joints
    stick and slip equals the jitted unbatched step of each (to rounding)."""
    model, cfg, q, v = arm_states
    ks = np.array([10, 70, 160, 200, 260])
    u = FREE_CTRL["arm"][ks + 1]  # q[k]: the state after step k, before ctrl[k + 1]
    one = jax.jit(lambda q, v, u: sim.step(model, sim.State(q, v), u, cfg))
    many = jax.jit(jax.vmap(one))(q[ks], v[ks], u)
    for i, k in enumerate(ks):
        s = one(q[k], v[k], u[i])
        np.testing.assert_allclose(many.q[i], s.q, rtol=0, atol=1e-13)
        np.testing.assert_allclose(many.v[i], s.v, rtol=0, atol=1e-12)
        np.testing.assert_allclose(s.q, q[k + 1], rtol=0, atol=1e-13)  # the rollout's step


def test_gradient_through_contact_off_rows(arm_states):
    """Reverse mode through 30 steps of the arm (the elbow's limit row and both dry-friction
    rows acting: MuJoCo's primal problem differentiated implicitly) is finite, and its
    directional derivative in the initial velocity agrees with central finite differences
    (step 1e-5) to 1e-6 relative (seen 3e-10)."""
    model, cfg, q, v = arm_states
    k0, n = 170, 30
    ctrl = jnp.asarray(FREE_CTRL["arm"][k0 + 1 : k0 + 1 + n])
    w = jnp.asarray([1.0, 2.0, 0.1, 0.3])

    def loss(v0):
        s = sim.rollout(model, sim.State(jnp.asarray(q[k0]), v0), ctrl, cfg=cfg)
        return w @ jnp.concatenate([s.q[-1], s.v[-1]])

    v0, dv = jnp.asarray(v[k0]), jnp.asarray([1.0, -0.5])
    g = jax.jit(jax.grad(loss))(v0)
    assert np.all(np.isfinite(g)) and np.abs(g).max() > 1e-3
    f, eps = jax.jit(loss), 1e-5
    fd = (f(v0 + eps * dv) - f(v0 - eps * dv)) / (2 * eps)
    np.testing.assert_allclose(g @ dv, fd, rtol=1e-6)


def test_rk4_keeps_the_smooth_models_and_warns():
    """``"rk4"`` takes no constraint rows: with contact off the defaults are the smooth models
    and a :class:`jaxdyn.JaxdynWarning` names the limited joints and those with frictionloss;
    named, they are silent; asking the rows is refused."""
    rk4 = jaxdyn.load_mjcf(ARM.replace('integrator="Euler"', 'integrator="RK4"'))
    with pytest.warns(jaxdyn.JaxdynWarning, match="integrator 'rk4' takes no constraint") as rec:
        cfg = rk4.sim_config()
    msg = str(rec[0].message)
    assert len(rec) == 1 and "frictionloss of the joints ['shoulder', 'elbow']" in msg
    assert "limits of the joints ['shoulder', 'elbow']" in msg
    assert cfg.limit_constraints is None and cfg.friction_loss is None
    arm = jaxdyn.load_mjcf(ARM)
    with pytest.warns(jaxdyn.JaxdynWarning, match="integrator 'rk4'"):
        arm.sim_config(integrator="rk4")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = rk4.sim_config(limits="spring", friction_loss="smooth")
    assert cfg.limit_constraints is None and cfg.friction_loss is None
    with pytest.raises(ValueError, match="friction_loss rows are velocity-level"):
        rk4.sim_config(friction_loss="constraint", limits="spring")

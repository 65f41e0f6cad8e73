"""MuJoCo's scene semantics in :mod:`jaxdyn.sim` (issue 48): joint springs, fixed tendons, the
gain / bias actuator family and ``opt`` settings, from MJCF, against MuJoCo C.

Oracle: MuJoCo's own ``mj_step`` / ``mj_forward``. A contact-free scene exercising every
honoured feature (hinge and slide springs about ``springref``, joint damping and armature,
fixed tendons with a dead-band spring and damping, motor / position (with ``forcerange``) /
velocity / general affine-gain actuators and a motor on a tendon, ``ctrlrange``) is rolled
out for 1 s from the same state under the same open-loop control by MuJoCo C and by
:func:`jaxdyn.sim.step` with :meth:`MJCFModel.sim_config`, per integrator (MuJoCo's ``Euler``
with and without ``eulerdamp``, ``RK4``, ``implicitfast``); float64, states agree to 1e-9.
The forces are compared one by one at a state (``actuator_force``, ``qfrc_passive``). What
jaxdyn.sim cannot honour is refused by name. The RK4 rollout (the slowest to compile) is
``slow``.
"""

from __future__ import annotations

import pytest

mujoco = pytest.importorskip("mujoco")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _mujoco_ref import mujoco_rollout  # noqa: E402

from jaxdyn import sim  # noqa: E402
from jaxdyn.io.mjcf import load_mjcf  # noqa: E402
from jaxdyn.sim.actuators import joint_properties  # noqa: E402

TOL = 1e-9


def scene_xml(integrator="Euler", flags=""):
    return f"""<mujoco model="scene">
  <option timestep="0.002" integrator="{integrator}"><flag contact="disable" {flags}/></option>
  <worldbody>
    <body name="a">
      <joint name="j1" type="hinge" axis="0 1 0" stiffness="2" springref="20" damping="0.3"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.05" mass="1"/>
      <body name="b" pos="0 0 -0.5">
        <joint name="j2" type="hinge" axis="1 0 0" damping="0.1" armature="0.01"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 -0.3" size="0.04" mass="0.7"/>
        <body name="c" pos="0.3 0 -0.3">
          <joint name="j3" type="slide" axis="0 0 1" stiffness="30" springref="0.05"/>
          <geom type="sphere" size="0.05" mass="0.3"/>
        </body>
      </body>
    </body>
    <body name="d" pos="1 0 0">
      <joint name="j4" type="hinge" axis="0 0 1"/>
      <geom type="box" size=".2 .05 .05" mass="0.5"/>
    </body>
  </worldbody>
  <tendon>
    <fixed name="t1" stiffness="5" damping="0.4" springlength="0.1 0.3">
      <joint joint="j1" coef="1"/><joint joint="j2" coef="-0.5"/>
    </fixed>
    <fixed name="t2" damping="0.2"><joint joint="j2" coef="2"/><joint joint="j3" coef="1"/></fixed>
  </tendon>
  <actuator>
    <motor name="m1" joint="j1" gear="2" ctrlrange="-1 1"/>
    <position name="p2" joint="j2" kp="10" kv="0.5" forcerange="-1.5 1.5"/>
    <velocity name="v3" joint="j3" kv="3"/>
    <general name="g4" joint="j4" gaintype="affine" gainprm="2 0.5 -0.1" biastype="affine"
             biasprm="0.1 -1 -0.2"/>
    <motor name="mt" tendon="t1" gear="1.5"/>
  </actuator>
</mujoco>"""


DQ = np.array([0.3, -0.2, 0.1, 0.4])
V0 = np.array([0.5, -1.0, 0.3, 2.0])


def controls(T, h):
    t = np.arange(T) * h
    return np.stack(
        [
            1.3 * np.sin(3 * t),
            0.4 * np.cos(2 * t),
            0.2 * np.sin(t),
            np.cos(5 * t),
            0.5 * np.sin(4 * t),
        ],
        1,
    )


def scene_rollout(m, U):
    """MuJoCo C's ``qpos``, ``qvel`` of the scene from ``qpos0 + DQ``, ``V0`` under ``U``."""
    return mujoco_rollout(m, qpos=m.qpos0 + DQ, qvel=V0, ctrl=U, fields=("qpos", "qvel"))


def jaxdyn_rollout(r, U):
    conv = r.converter()
    q = conv.q_from_mujoco(np.array(r.mj_model.qpos0) + DQ)
    s = sim.State(jnp.asarray(q), jnp.asarray(conv.v_from_mujoco(q, V0)))
    cfg = r.sim_config()
    step = jax.jit(lambda s, u: sim.step(r.model, s, u, cfg))
    qs, vs = [], []
    for u in U:
        s = step(s, jnp.asarray(u))
        q = np.asarray(s.q)
        qs.append(conv.q_to_mujoco(q))
        vs.append(conv.v_to_mujoco(q, np.asarray(s.v)))
    return np.array(qs), np.array(vs)


@pytest.mark.parametrize(
    "integrator, flags, expected",
    [
        ("Euler", "", "implicit_damping"),
        ("Euler", 'eulerdamp="disable"', "euler"),
        pytest.param("RK4", "", "rk4", marks=pytest.mark.slow),
        ("implicitfast", "", "implicit"),
    ],
)
def test_rollout_follows_mujoco(integrator, flags, expected):
    """1 s (500 steps) of the scene under an open-loop control: jaxdyn's states are MuJoCo C's
    to 1e-9 (the motion itself is O(1))."""
    r = load_mjcf(scene_xml(integrator, flags))
    assert r.integrator == expected and r.sim_config().integrator == expected
    U = controls(500, r.timestep)
    qm, vm = scene_rollout(r.mj_model, U)
    qj, vj = jaxdyn_rollout(r, U)
    assert np.abs(qm - qm[0]).max() > 0.3  # it moves
    np.testing.assert_allclose(qj, qm, rtol=0, atol=TOL)
    np.testing.assert_allclose(vj, vm, rtol=0, atol=TOL * 10)


@pytest.fixture(scope="module")
def scene():
    r = load_mjcf(scene_xml())
    m = r.mj_model
    d = mujoco.MjData(m)
    d.qpos[:] = m.qpos0 + DQ
    d.qvel[:] = V0
    d.ctrl[:] = [1.7, 0.4, 0.2, 1.0, 0.5]  # the motor's ctrl is clamped to its ctrlrange
    mujoco.mj_forward(m, d)
    conv = r.converter()
    q = conv.q_from_mujoco(np.array(d.qpos))
    return r, d, conv, jnp.asarray(q), jnp.asarray(conv.v_from_mujoco(q, np.array(d.qvel)))


def test_forces_match_mujoco(scene):
    """Each force at one state: actuator forces (``actuator_force``: the position servo at its
    ``forcerange``), ``qfrc_actuator``, and springs + tendons + damping = ``qfrc_passive``;
    tendon lengths ``ten_length``."""
    r, d, conv, q, v = scene
    ctrl = jnp.asarray(d.ctrl)
    gb = r.gain_bias
    np.testing.assert_allclose(gb.forces(r.model, q, v, ctrl), d.actuator_force, atol=1e-12)
    assert abs(d.actuator_force[1]) == 1.5  # clipped by forcerange
    tau = gb.torques(r.model, q, v, ctrl)
    np.testing.assert_allclose(conv.tau_to_mujoco(q, tau), d.qfrc_actuator, atol=1e-12)
    damping = -joint_properties(r.model)["damping"] * v
    passive = r.springs.forces(r.model, q, v) + r.tendons.forces(r.model, None, q, v) + damping
    np.testing.assert_allclose(conv.tau_to_mujoco(q, passive), d.qfrc_passive, atol=1e-12)
    L, _ = r.tendons.lengths(r.model, q, v)
    np.testing.assert_allclose(L, d.ten_length, atol=1e-12)
    assert [a.tendon for a in r.actuators] == [None] * 4 + ["t1"]
    assert [a.kind for a in r.actuators] == ["motor", "position", "velocity", "affine", "motor"]


def test_implicit_low_rank_solve_is_exact(scene):
    """The ``"implicit"`` step's Woodbury update equals a dense solve of
    ``(M + h (D + U diag(c) U^T)) dv = h (tau - C)`` with ``D`` the diagonal terms and
    ``U diag(c) U^T`` the coupled ones (finite differences of the forces give ``-dtau/dv``)."""
    from jaxdyn.algorithms.crba import crba
    from jaxdyn.algorithms.rnea import rnea_plain as rnea
    from jaxdyn.sim import core

    r, d, conv, q, v = scene
    cfg = r.sim_config(integrator="implicit")
    props = joint_properties(r.model)
    ctrl = jnp.asarray(d.ctrl)
    h = 0.01

    @jax.jit
    def both(q, v, ctrl):
        s1 = sim.step(r.model, sim.State(q, v), ctrl, sim.SimConfig(**{**_fields(cfg), "dt": h}))
        D = -jax.jacfwd(lambda vv: core._controls(r.model, cfg, props, q, vv, ctrl))(v)
        tau = core._controls(r.model, cfg, props, q, v, ctrl)
        rhs = tau - rnea(r.model, q, v, jnp.zeros_like(v))
        return s1.v, v + h * jnp.linalg.solve(crba(r.model, q) + h * D, rhs), D

    v_step, v_dense, D = both(q, v, ctrl)
    assert np.abs(np.asarray(D - jnp.diag(jnp.diag(D)))).max() > 0.1  # coupled
    np.testing.assert_allclose(v_step, v_dense, atol=1e-12)


def _fields(cfg):
    names = ("substeps", "integrator", "actuator", "limits", "springs", "tendons")
    return {k: getattr(cfg, k) for k in names}


# ------------------------------------------------------------------------ refused by name
def _one(body="", extra="", option="", joint=""):
    return f"""<mujoco model="t"><option {option}/>
      <worldbody><site name="s0" pos="0 0 1"/><body name="b">
      <joint name="j" axis="0 1 0" {joint}/><geom size="0.1"/>
      <site name="s1" pos="0.1 0 0"/></body>{body}</worldbody>{extra}</mujoco>"""


@pytest.mark.parametrize(
    "xml, key, match",
    [
        (
            _one(
                body='<geom name="wr" type="sphere" size="0.05" pos="0.05 0 0.5" contype="0" '
                'conaffinity="0"/><site name="sd" pos="0.2 0 0.5"/>',
                extra='<tendon><spatial name="sp"><site site="s0"/><geom geom="wr" '
                'sidesite="sd"/><site site="s1"/></spatial></tendon>',
            ),  # fmt: skip
            "tendon",
            r'<tendon name="sp">: a spatial tendon wrapping around a geom with a sidesite .* '
            "ignored, its passive",
        ),
        (
            _one(
                extra='<tendon><fixed name="fr" frictionloss="1"><joint joint="j" coef="1"/>'
                "</fixed></tendon>"
            ),  # fmt: skip
            "tendon",
            r'<tendon name="fr">: frictionloss',
        ),
        (
            _one(
                body='<body name="bb"><joint name="bj" type="ball" stiffness="3"/>'
                '<geom size=".1"/></body>'
            ),  # fmt: skip
            "passive",
            r'<joint name="bj" type="ball"> stiffness=3: springs of ball',
        ),
        (
            _one(option='viscosity="0.1"').replace("<geom ", '<geom fluidshape="ellipsoid" '),
            "fluid",
            r'<body name="b">: a geom with fluidshape="ellipsoid"',
        ),
        (
            _one(extra='<actuator><general name="ig" joint="j" dyntype="muscle"/></actuator>'),
            "actuator",
            r'<actuator name="ig">: activation dynamics .*ignored, the actuator applies no force',
        ),
    ],
)
@pytest.mark.filterwarnings("ignore:.*geoms interpenetrate at qpos0")  # overlapping test geoms
def test_refused_by_name(xml, key, match):
    with pytest.raises(ValueError, match=match):
        load_mjcf(xml)
    r = load_mjcf(xml, ignore=(key,))
    assert len(r.ignored) == 1 and r.ignored[0].startswith(f"[{key}]")


def test_honoured_features_load():
    """Hinge / slide springs and fixed tendons are no longer refused; ``springref`` in degrees
    is MuJoCo's ``qpos_spring``."""
    r = load_mjcf(_one(joint='stiffness="2" springref="30"'))
    assert r.springs is not None and r.tendons is None and r.ignored == ()
    np.testing.assert_allclose(r.springs.springref, [np.deg2rad(30)], rtol=1e-12)
    cfg = r.sim_config()
    assert cfg.springs is r.springs and cfg.actuator.size(r.model) == 0


def test_sim_config_refusals():
    """MuJoCo's full ``implicit`` integrator is named by ``sim_config`` and accepted with
    ``ignore=``; equality constraints are honoured (``ignore="equality"`` leaves them out:
    tests/test_mjcf_equality.py); flags turn features off as in MuJoCo."""
    r = load_mjcf(_one(option='integrator="implicit"'))
    with pytest.raises(ValueError, match=r'\[integrator\] <option integrator="implicit">'):
        r.sim_config()
    assert r.sim_config(ignore="integrator").integrator == "implicit"
    weld = _one(extra='<equality><weld name="w" body1="b"/></equality>')
    r = load_mjcf(weld)
    assert r.sim_config().equalities.kind == ("weld",)
    assert r.sim_config(ignore=("equality",)).equalities is None
    with pytest.raises(ValueError, match="unknown ignore keys"):
        r.sim_config(ignore=("nope",))
    # MuJoCo's no-slip post-solve changes contact friction: refused where contact is on
    r = load_mjcf(
        _one(option='noslip_iterations="3"', body='<geom type="plane" size="1 1 1" pos="0 0 -1"/>')
    )
    assert r.sim_config().contact is None  # nothing to refuse without a contact model
    for contact in (sim.Constraint(), sim.Constraint(soft=True)):
        with pytest.raises(ValueError, match=r"\[noslip\] <option noslip_iterations=3>"):
            r.sim_config(contact)
        assert r.sim_config(contact, ignore="noslip").contact is not None
    off = load_mjcf(
        _one(
            joint='stiffness="2" damping="1"',
            option="",
            extra='<actuator><motor joint="j" ctrlrange="-1 1"/></actuator>',
        ).replace("<option />", '<option><flag spring="disable" clampctrl="disable"/></option>')
    )
    assert off.springs is None and off.integrator == "implicit_damping"
    assert float(off.gain_bias.ctrl_upper[0]) == np.inf


def test_scene_elements_bad_input():
    with pytest.raises(ValueError, match=r"GainBias: moment has shape \(2, 3\), expected"):
        sim.GainBias(
            moment=np.ones((2, 3)),
            gain=np.ones((2, 3)),
            bias=np.zeros((2, 3)),
            ctrl_lower=-np.inf,
            ctrl_upper=np.inf,
            force_lower=-np.inf,
            force_upper=np.inf,
            dofs=(0, 1),
        )
    with pytest.raises(ValueError, match="Springs: stiffness must be finite and >= 0"):
        sim.Springs(stiffness=np.array([-1.0]), springref=np.zeros(1), dofs=(0,))
    with pytest.raises(ValueError, match=r"Springs: springref has shape \(2,\), expected \(1,\)"):
        sim.Springs(stiffness=np.array([1.0]), springref=np.zeros(2), dofs=(0,))
    with pytest.raises(TypeError, match="SimConfig: tendons must be None or FixedTendons"):
        sim.SimConfig(tendons=3)


STOPS_XML = """<mujoco model="stops">
  <option timestep="0.002"><flag contact="disable"/></option>
  <worldbody>
    <body name="arm">
      <joint name="shoulder" axis="0 0 1" range="-20 20" armature="0.05" damping="0.01"/>
      <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.03" mass="1"/>
    </body>
    <body name="hand" pos="0 1 0">
      <joint name="wrist" axis="0 0 1" range="-10 30" armature="0.02" solreflimit="0.01 0.5"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.3"/>
    </body>
  </worldbody>
</mujoco>"""


def test_mujoco_limits_follow_mujocos_limit_constraint():
    """:meth:`MJCFModel.mujoco_limits` (MuJoCo's ``solreflimit`` per joint, one-sided) against
    MuJoCo C: two hinges in a horizontal plane driven into their stops at 4 and 3 rad/s (the
    wrist with its own, underdamped ``solreflimit``), 0.2 s: the angles follow MuJoCo's
    within 1e-3 rad, the velocities within 0.02 rad/s (measured 2e-4, 5e-3: the impedance's
    ramp over the first millimetre of MuJoCo's ``solimp``, jaxdyn's smoothing), where the
    default :class:`jaxdyn.sim.JointLimits` (one stiffness and damping for every joint)
    misses by 0.1 rad and 1 rad/s.
    Bad input: the direct ``solreflimit`` form, refused by joint name; a per-coordinate
    array of the wrong size, refused naming the expected size."""
    r = load_mjcf(STOPS_XML)
    m = r.mj_model
    limits = r.mujoco_limits()
    assert limits.one_sided and limits.stiffness.shape == (2,)
    T, v0 = 100, np.array([4.0, -3.0])

    def rollout(limits):
        cfg = r.sim_config(limits=limits)

        def f(s, _):
            s = sim.step(r.model, s, jnp.zeros(0), cfg)
            return s, (s.q, s.v)

        s0 = sim.State(jnp.zeros(2), jnp.asarray(v0))
        return jax.jit(lambda s: jax.lax.scan(f, s, None, length=T)[1])(s0)

    qj, vj = (np.asarray(x) for x in rollout(limits))
    qm, vm = mujoco_rollout(m, T, qvel=v0, fields=("qpos", "qvel"))
    assert qm[:, 0].max() > np.radians(20) and qm[:, 1].min() < np.radians(-10)  # both hit
    assert vm[-1, 0] < -0.3 and vm[-1, 1] > 0.3  # and rebound
    assert np.abs(qj - qm).max() < 1e-3
    assert np.abs(vj - vm).max() < 0.02

    m.jnt_solref[1] = [-100.0, -10.0]
    with pytest.raises(ValueError, match="joint 'wrist' has solreflimit=-100 -10"):
        r.mujoco_limits()
    bad = r.sim_config(limits=sim.JointLimits(stiffness=jnp.ones(3), damping=1.0))
    with pytest.raises(ValueError, match=r"JointLimits: stiffness has shape \(3,\), expected \(2,"):
        sim.step(r.model, sim.State(jnp.zeros(2), jnp.zeros(2)), jnp.zeros(0), bad)

"""MuJoCo's equality constraints and activation dynamics in :mod:`jaxdyn.sim` (issue 48), against
MuJoCo C.

Oracle: MuJoCo's own ``mj_forward`` / ``mj_step``. Equality constraints (:class:`jaxdyn.sim.
Equalities`) reproduce MuJoCo's *soft* constraint (solref / solimp, its regulariser from the
inverse weights at ``qpos0``), not a hard one: the constraint force at a state is MuJoCo's
``qfrc_constraint`` to rounding, and rollouts of a scene with a loop closed by a ``connect``, a
free body ``weld`` ed to the world away from its pose and two joints coupled by a quadratic
``joint`` equality follow MuJoCo's to 1e-9, while the violation MuJoCo's soft constraints allow
(``efc_pos``) is pulled in and stays bounded. Activation dynamics (:class:`jaxdyn.sim.GainBias`
with ``dyntype`` integrator / filter / filterexact, ``actrange``, ``actearly``, an
``intvelocity`` servo, a tendon actuator) roll out to 1e-9 with MuJoCo's ``act``.

The Euler rollouts are the default tests; the implicitfast and RK4 rollouts are ``slow`` (the
default ones cover the same code: the force enters every integrator the same way).
"""

from __future__ import annotations

import pytest

mujoco = pytest.importorskip("mujoco")

import dataclasses  # noqa: E402

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _mujoco_ref import mujoco_rollout  # noqa: E402

from jaxdyn import sim  # noqa: E402
from jaxdyn.io.mjcf import load_mjcf  # noqa: E402
from jaxdyn.sim import core  # noqa: E402
from jaxdyn.sim.actuators import joint_properties  # noqa: E402

TOL = 1e-9


def eq_xml(integrator="Euler", free=False):
    """A planar four-bar (three links and a rocker, closed by a site connect), a box on two
    slides and two hinges welded to the world 5 cm and 0.2 rad away from where it starts, two
    pendulums coupled by a quadratic joint equality, an inactive weld. (A free joint is
    left out of the rollouts: its Euler step is MuJoCo's in world axes, jaxdyn's on SE(3),
    ``O(h^2)`` apart per step without any constraint; the force test takes a free body.)"""
    box = (
        "<freejoint/>"
        if free
        else '<joint name="bx" type="slide" axis="1 0 0"/><joint name="bz" type="slide" '
        'axis="0 0 1"/><joint name="by" axis="0 1 0"/><joint name="bw" axis="1 0 0"/>'
    )
    return f"""<mujoco model="eq">
  <option timestep="0.002" integrator="{integrator}"><flag contact="disable"/></option>
  <worldbody>
    <body name="l1">
      <joint name="h1" type="hinge" axis="0 1 0" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.03" mass="1"/>
      <body name="l2" pos="0.5 0 0">
        <joint name="h2" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.03" mass="1"/>
        <body name="l3" pos="0 0 -0.5">
          <joint name="h3" type="hinge" axis="0 1 0"/>
          <geom type="capsule" fromto="0 0 0 -0.4 0 0" size="0.03" mass="1"/>
          <site name="s3" pos="-0.4 0 0"/>
        </body>
      </body>
    </body>
    <body name="l4" pos="0 0 -0.5">
      <joint name="h4" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.1 0 0" size="0.03" mass="0.5"/>
      <site name="s4" pos="0.1 0 0"/>
    </body>
    <body name="box" pos="1 1 1">
      {box}
      <geom type="box" size=".1 .15 .2" mass="2"/>
    </body>
    <body name="p1" pos="0 2 0">
      <joint name="c1" type="hinge" axis="1 0 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03" mass="0.4"/>
    </body>
    <body name="p2" pos="0 2.5 0">
      <joint name="c2" type="hinge" axis="1 0 0"/>
      <geom type="capsule" fromto="0 0 0 0 0.2 -0.3" size="0.03" mass="0.6"/>
    </body>
  </worldbody>
  <equality>
    <connect name="loop" site1="s3" site2="s4"/>
    <weld name="hold" body1="box" torquescale="0.7" solref="0.03 0.9"/>
    <joint name="couple" joint1="c1" joint2="c2" polycoef="0.1 0.5 0.4 0 0"
           solimp="0.8 0.95 0.01 0.4 3"/>
    <weld name="off" body1="l1" body2="l4" active="false"/>
  </equality>
</mujoco>"""


DQ = {"h1": 0.1, "c1": 0.3, "c2": -0.2, "bx": 0.05, "bw": 0.2}


def initial(m):
    d = mujoco.MjData(m)
    for name, dq in DQ.items():
        j = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)
        if j >= 0:
            d.qpos[m.jnt_qposadr[j]] += dq
    d.qvel[:] = np.linspace(-0.5, 0.8, m.nv)
    return d


def rollouts(r, T, ctrl=None, act=False):
    """MuJoCo's and jaxdyn's states (MuJoCo's layout) over ``T`` steps, and MuJoCo's
    ``efc_pos`` and ``act``."""
    m = r.mj_model
    d = initial(m)
    conv = r.converter()
    q = conv.q_from_mujoco(np.array(d.qpos))
    s = sim.State(
        jnp.asarray(q),
        jnp.asarray(conv.v_from_mujoco(q, np.array(d.qvel))),
        act=jnp.zeros(m.na) if act else None,
    )
    cfg = r.sim_config()
    step = jax.jit(lambda s, u: sim.step(r.model, s, u, cfg))
    U = np.zeros((T, m.nu)) if ctrl is None else ctrl
    fields = ("qpos", "qvel", lambda d: np.abs(d.efc_pos).max() if d.nefc else 0.0)
    ref = mujoco_rollout(m, ctrl=U, fields=fields + (("act",) if act else ()), data=d)
    out = dict(zip(("qm", "vm", "pos", "am"), ref)) | {k: [] for k in ("qj", "vj", "aj")}
    for u in U:
        s = step(s, jnp.asarray(u))
        qj = np.asarray(s.q)
        out["qj"].append(conv.q_to_mujoco(qj))
        out["vj"].append(conv.v_to_mujoco(qj, np.asarray(s.v)))
        if act:
            out["aj"].append(np.asarray(s.act))
    return {k: np.array(v) for k, v in out.items()}


@pytest.mark.parametrize(
    "integrator",
    [
        "Euler",
        pytest.param("implicitfast", marks=pytest.mark.slow),
        pytest.param("RK4", marks=pytest.mark.slow),
    ],
)
def test_equalities_follow_mujoco(integrator):
    """0.6 s of the scene: jaxdyn's states are MuJoCo C's to 1e-9. The same soft constraints,
    not hard ones: the violation (``efc_pos``, 0.28 at the start, the joint coupling's) is
    pulled in but, under gravity, settles at MuJoCo's sag of a few centimetres (radians) with
    the default ``solref``, ``solimp``."""
    r = load_mjcf(eq_xml(integrator))
    assert r.equalities.kind == ("connect", "weld", "joint", "weld")
    out = rollouts(r, 300)
    assert np.abs(out["qm"] - out["qm"][0]).max() > 0.05  # it moves
    np.testing.assert_allclose(out["qj"], out["qm"], rtol=0, atol=TOL)
    np.testing.assert_allclose(out["vj"], out["vm"], rtol=0, atol=TOL * 10)
    assert out["pos"][0] > 0.2 and out["pos"][-100:].max() < 0.3 * out["pos"][0]


FLOATING = """<mujoco model="fb"><worldbody>
  <body name="base" pos="0.1 0.2 1"><freejoint/><geom type="box" size=".2 .1 .05" mass="3"/>
    <body name="arm" pos="0.2 0 0"><joint name="a1" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5"/>
      <body name="hand" pos="0.3 0 0"><joint name="a2" axis="1 0 0"/><joint name="a3" type="slide"
        axis="0 0 1"/><geom size="0.05" mass="0.2"/></body></body></body>
  <body name="post" pos="0.6 0.2 1"/>
  </worldbody>
  <equality><connect body1="hand" body2="post" anchor="0 0 0"/>
    <weld body1="arm" body2="base" relpose="0.2 0.01 0 1 0.1 0 0.05" torquescale="2"/>
    <weld body1="hand" relpose="0.1 0 0 0.9 0 0.3 0.1"/>
    <joint joint1="a3" joint2="a1" polycoef="0 1 -0.5 0.2 0.1"/></equality>
</mujoco>"""


@pytest.fixture(scope="module")
def fb_scene():
    r = load_mjcf(FLOATING)
    m = r.mj_model
    d = mujoco.MjData(m)
    d.qpos[:] = m.qpos0
    d.qpos[:3] += [0.02, -0.01, 0.03]  # the base, displaced and turned
    d.qpos[3:7] = np.array([0.98, 0.1, -0.05, 0.1]) / np.linalg.norm([0.98, 0.1, -0.05, 0.1])
    d.qpos[7:] += [0.2, -0.3, 0.05]
    d.qvel[:] = np.linspace(-1.0, 1.2, m.nv)
    conv = r.converter()

    @jax.jit
    def qfrc(eqs, q, v):
        cfg = eqx.tree_at(lambda c: c.equalities, r.sim_config(), eqs)
        props = joint_properties(r.model)
        ws, origin = core._world(r.model, q)
        tau = core._controls(r.model, cfg, props, q, v, jnp.zeros(0))
        bias = core.rnea_world(r.model, ws, v, jnp.zeros_like(v), None)[0]
        tau_eq = core._equality_force(r.model, cfg, ws, origin, q, v, tau - bias, r.timestep)
        return tau_eq, eqs.kinematics(r.model, ws, origin, q, v)[0]

    @jax.jit
    def rows_acc(q, v):
        """The step's acceleration ``(v' - v) / h`` with the rows of a joint solve alone
        (:func:`core._equality_rows`, nothing else in the problem)."""
        cfg = r.sim_config()
        props = joint_properties(r.model)
        ws, origin = core._world(r.model, q)
        tau = core._controls(r.model, cfg, props, q, v, jnp.zeros(0))
        t = core._transport(r.model, v)
        inertias = core.articulated_inertias(r.model, ws.S, core.world_inertia_matrices(ws))

        def solve(X):
            return core.aba_passes(r.model, ws.S, None, None, None, X, None, inertias=inertias)[0]

        h = r.timestep
        bias_t = core.rnea_world(r.model, ws, v, -t, None)[0]
        v_free = v + h * solve((tau - bias_t)[:, None])[:, 0]
        v1 = core._equality_rows(r.model, cfg, ws, origin, q, v, v_free, solve, h, t)[0]
        return (v1 - v) / h

    return r, m, d, conv, qfrc, rows_acc


def test_equality_force_matches_mujoco(fb_scene):
    """At one state of a floating base (free joint: MuJoCo's velocity and force layout through
    the converter; the step's world state centred at the base), with a connect to a static
    body, welds between two bodies (``relpose``, ``torquescale``) and to the world, and a
    quartic joint coupling: the residuals are MuJoCo's ``efc_pos`` and the constraint force is
    its ``qfrc_constraint`` to rounding; switching constraints off (``active``, an array: no
    recompilation) does as MuJoCo's ``eq_active``."""
    r, m, d, conv, qfrc, _ = fb_scene
    assert r.model.topo.floating_base
    for active in ([1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0]):
        d.eq_active[:] = active
        mujoco.mj_forward(m, d)
        q = jnp.asarray(conv.q_from_mujoco(np.array(d.qpos)))
        v = jnp.asarray(conv.v_from_mujoco(q, np.array(d.qvel)))
        eqs = eqx.tree_at(lambda e: e.active, r.equalities, jnp.asarray(active, float))
        tau_eq, res = qfrc(eqs, q, v)
        tau = conv.tau_to_mujoco(q, tau_eq)
        scale = max(1.0, np.abs(d.qfrc_constraint).max())
        np.testing.assert_allclose(tau, d.qfrc_constraint, rtol=0, atol=1e-10 * scale)
        rows = np.repeat(np.asarray(active, bool), [3, 6, 6, 1])
        np.testing.assert_allclose(np.asarray(res)[rows], d.efc_pos, rtol=0, atol=1e-12)
        if all(active):
            assert scale > 10.0
    assert np.abs(d.qfrc_constraint).max() == 0.0


@pytest.mark.slow  # 6 s of compile; default: test_equality_force_matches_mujoco (the rows'
# kinematics and parameters) and test_equality_rows.test_equality_and_limit_rows_follow_mujoco
# (the rows in the joint solve, without a free joint)
def test_equality_rows_match_mujoco(fb_scene):
    """The velocity-level rows of the equalities (:meth:`Equalities.row_problem`, eliminated by
    :func:`jaxdyn.sim.core._equality_rows` as in a joint solve with limits and contacts) alone
    at the floating scene's state: the step's velocity change is ``h`` times MuJoCo's
    ``qacc`` (``Jdot v`` taken in the step's coordinates: the free joint's parent-axes linear
    velocity, MuJoCo's; left in jaxdyn's, 7 off)."""
    r, m, d, conv, _, rows_acc = fb_scene
    d.eq_active[:] = 1
    mujoco.mj_forward(m, d)
    q = jnp.asarray(conv.q_from_mujoco(np.array(d.qpos)))
    v = jnp.asarray(conv.v_from_mujoco(q, np.array(d.qvel)))
    acc = conv.v_to_mujoco(q, np.asarray(rows_acc(q, v)))
    assert np.abs(d.qfrc_constraint).max() > 10.0
    np.testing.assert_allclose(acc, d.qacc, rtol=0, atol=1e-9 * max(1, np.abs(d.qacc).max()))


@pytest.mark.parametrize(
    "version, drift",
    [("3.1.0", False), ("3.6.0", False), ("3.7.0", True), ("3.10.0", True), ("3.17.0", True)]
    + [("4.0.0", True), ("3.7.0.dev20260414", True), ("local", True)],
)
def test_drift_version_cutoff(version, drift):
    """``Jdot v`` on connect / weld rows from MuJoCo 3.7.0 on (its commit 412cee2, "Add Jdot
    correction for connect and weld constraints"; checked by hand against mujoco 3.6.0 and
    3.7.0 wheels with test_equalities_follow_mujoco and test_equality_force_matches_mujoco, the
    latter also covering the free-joint coordinates of ``J a0`` without the term): the loader
    compares release numbers, not strings or the major version alone. Those two tests check
    the installed MuJoCo's setting."""
    from types import SimpleNamespace

    from jaxdyn.io.mjcf import _mujoco_has_jdotv

    assert _mujoco_has_jdotv(SimpleNamespace(__version__=version)) is drift


@pytest.mark.slow  # test_equality_force_matches_mujoco checks the same rows against MuJoCo
@pytest.mark.parametrize("which", ["eq", "floating"])
def test_kinematics_against_autodiff(which):
    """The O(rows nv) rows of ``Equalities.kinematics`` (motion subspaces, body velocities and
    bias accelerations, the weld's quaternion kinematics) against the forward-mode derivatives
    of the residuals along ``q ⊕ t v`` (``jacobian``, ``drift``), at random states far from
    satisfying the constraints; ``floating``: a single floating base (the step's world state
    centred at the base)."""
    r = load_mjcf(eq_xml(free=True) if which == "eq" else FLOATING)
    eqs, model = r.equalities, r.model
    rng = np.random.default_rng(3)

    @jax.jit
    def both(q, v):
        ws, origin = core._world(model, q)
        ra, Ja = eqs.jacobian(model, q)
        return eqs.kinematics(model, ws, origin, q, v), (ra, Ja, eqs.drift(model, q, v))

    for _ in range(3):
        q = jaxdyn_random_q(model, rng)
        v = rng.normal(size=model.nv)
        (r1, J1, d1), (r2, J2, d2) = both(jnp.asarray(q), jnp.asarray(v))
        np.testing.assert_allclose(r1, r2, rtol=0, atol=1e-12)
        np.testing.assert_allclose(J1, J2, rtol=0, atol=1e-10)  # 1 / qw: rounding x 100
        joint = np.concatenate(
            [np.full({"connect": 3, "weld": 6, "joint": 1}[k], k == "joint") for k in eqs.kind]
        )
        assert np.all(np.asarray(d1)[joint] == 0)
        np.testing.assert_allclose(d1, d2, rtol=0, atol=1e-10)
        assert np.abs(np.asarray(d1)).max() > 0.1


def jaxdyn_random_q(model, rng):
    import jaxdyn

    return np.asarray(
        jaxdyn.random_configuration(model, jax.random.PRNGKey(int(rng.integers(1e6))))
    )


def act_xml(integrator="Euler"):
    return f"""<mujoco model="act">
  <option timestep="0.002" integrator="{integrator}"><flag contact="disable"/></option>
  <worldbody>
    <body name="a"><joint name="j1" type="hinge" axis="0 1 0" damping="0.2"/>
      <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.03" mass="1"/>
      <body name="b" pos="0.4 0 0"><joint name="j2" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.4" size="0.03" mass="0.5"/>
        <body name="c" pos="0 0 -0.4"><joint name="j3" type="slide" axis="1 0 0"/>
          <geom type="sphere" size="0.05" mass="0.3"/></body></body></body>
  </worldbody>
  <tendon><fixed name="t"><joint joint="j1" coef="1"/><joint joint="j3" coef="-2"/></fixed></tendon>
  <actuator>
    <intvelocity name="iv" joint="j1" kp="20" kv="1" actrange="-0.5 0.5"/>
    <general name="fl" joint="j2" dyntype="filter" dynprm="0.05" gainprm="3" ctrlrange="-1 1"
             ctrllimited="true"/>
    <general name="fe" joint="j3" dyntype="filterexact" dynprm="0.03" gainprm="2"
             biastype="affine" biasprm="0 -10 -0.5" actearly="true"/>
    <general name="in" tendon="t" dyntype="integrator" gainprm="0.5" actlimited="true"
             actrange="-1 2" actearly="true"/>
    <motor name="m" joint="j2" gear="0.5"/>
  </actuator>
</mujoco>"""


def act_controls(T, h):
    t = np.arange(T) * h
    return np.stack(
        [
            np.sin(3 * t),
            1.5 * np.cos(2 * t),
            0.3 * np.sin(5 * t),
            2 * np.sin(t),
            0.2 * np.cos(4 * t),
        ],
        1,
    )


@pytest.mark.parametrize(
    "integrator", ["Euler", pytest.param("implicitfast", marks=pytest.mark.slow)]
)
def test_activation_dynamics_follow_mujoco(integrator):
    """1 s under an open-loop control: states and activations are MuJoCo's to 1e-9; the
    intvelocity servo's activation reaches its ``actrange`` (clipped), the filter's control
    its ``ctrlrange``."""
    r = load_mjcf(act_xml(integrator))
    gb = r.gain_bias
    assert gb.dyn == ("integrator", "filter", "filterexact", "integrator", "none")
    assert gb.act_size() == r.mj_model.na == 4
    assert [a.dyntype for a in r.actuators][:3] == ["integrator", "filter", "filterexact"]
    out = rollouts(r, 500, act_controls(500, r.timestep), act=True)
    assert np.abs(out["am"][:, 0]).max() == 0.5  # at its actrange
    np.testing.assert_allclose(out["aj"], out["am"], rtol=0, atol=TOL)
    np.testing.assert_allclose(out["qj"], out["qm"], rtol=0, atol=TOL)
    np.testing.assert_allclose(out["vj"], out["vm"], rtol=0, atol=TOL * 10)


def test_activation_bad_input():
    r = load_mjcf(act_xml())
    cfg = r.sim_config()
    s = sim.State(jnp.asarray(r.q0), jnp.zeros(r.model.nv))
    with pytest.raises(ValueError, match=r"step: the actuator has 4 activation\(s\)"):
        sim.step(r.model, s, jnp.zeros(5), cfg)
    with pytest.raises(ValueError, match="state.act"):
        sim.step(r.model, sim.State(s.q, s.v, act=jnp.zeros(3)), jnp.zeros(5), cfg)
    with pytest.raises(ValueError, match="activation dynamics are stepped as MuJoCo"):
        r.sim_config(integrator="rk4")
    with pytest.raises(ValueError, match="GainBias.forces: actuators with activation"):
        r.gain_bias.forces(r.model, s.q, s.v, jnp.zeros(5))
    with pytest.raises(ValueError, match="activation dynamics"):
        r.sim_actuator()
    with pytest.raises(ValueError, match=r"GainBias: dyn must hold one of"):
        dataclasses.replace(r.gain_bias, dyn=("nope",) * 5)
    with pytest.raises(ValueError, match=r"GainBias: dynprm has shape \(2,\), expected \(5,\)"):
        dataclasses.replace(r.gain_bias, dynprm=np.ones(2))


@pytest.mark.parametrize(
    "extra, key, match",
    [
        (
            '<tendon><fixed name="t"><joint joint="j" coef="1"/></fixed></tendon>'
            '<equality><tendon name="te" tendon1="t"/></equality>',
            "equality",
            r'<equality><tendon name="te">: tendon constraints',
        ),
        (
            '<actuator><general name="mu" joint="j" dyntype="muscle"/></actuator>',
            "actuator",
            r'<actuator name="mu">: activation dynamics other than integrator / filter',
        ),
    ],
)
def test_still_refused_by_name(extra, key, match):
    xml = f"""<mujoco><worldbody><body name="b"><joint name="j" axis="0 1 0"/>
      <geom size="0.1"/></body></worldbody>{extra}</mujoco>"""
    with pytest.raises(ValueError, match=match):
        load_mjcf(xml)
    r = load_mjcf(xml, ignore=(key,))
    assert len(r.ignored) == 1 and r.ignored[0].startswith(f"[{key}]")
    assert r.equalities is None


def test_sim_config_equalities():
    r = load_mjcf(eq_xml())
    assert r.sim_config().equalities is r.equalities
    assert r.sim_config(ignore="equality").equalities is None
    assert len(r.constraints) == 1 and r.constraints[0].kind == "weld"  # the box to the world
    with pytest.raises(TypeError, match="SimConfig: equalities must be None or Equalities"):
        sim.SimConfig(equalities=3)
    bad = dataclasses.replace(r.equalities, body2=(-1, -1, 99, 0))  # joint 2: q index 99
    ws, origin = core._world(r.model, jnp.asarray(r.q0))
    v = jnp.zeros(r.model.nv)
    with pytest.raises(ValueError, match=r"constraint 2 \(joint\): body2=99 is not the q index"):
        bad.kinematics(r.model, ws, origin, jnp.asarray(r.q0), v)
    bad = dataclasses.replace(r.equalities, body1=(40, 0, 0, 0))
    with pytest.raises(ValueError, match=r"constraint 0 \(connect\): body1=40 is not a body"):
        bad.kinematics(r.model, ws, origin, jnp.asarray(r.q0), v)
    with pytest.raises(ValueError, match=r"Equalities: diag has shape \(3,\), expected \(16,\)"):
        eqx.tree_at(lambda e: e.diag, r.equalities, jnp.ones(3)).__check_init__()


@pytest.mark.slow  # the forward rows: test_equality_force_matches_mujoco
def test_rollout_gradient_through_equalities():
    """Reverse mode through 20 steps of the floating scene, starting with every constraint
    satisfied (zero residual norms: the impedance's norm has a safe derivative there), against
    central differences."""
    r = load_mjcf(FLOATING)
    cfg = r.sim_config()

    def loss(v0):
        traj = sim.rollout(r.model, sim.State(jnp.asarray(r.q0), v0), jnp.zeros((20, 0)), cfg=cfg)
        return jnp.sum(traj.q[-1] ** 2) + jnp.sum(traj.v[-1] ** 2)

    v0 = jnp.zeros(r.model.nv)
    g = jax.jit(jax.grad(loss))(v0)
    f = jax.jit(loss)
    assert bool(jnp.all(jnp.isfinite(g)))
    eps = 1e-3
    for k in (0, 4, 7):
        e = jnp.zeros(r.model.nv).at[k].set(eps)
        fd = (f(v0 + e) - f(v0 - e)) / (2 * eps)
        assert float(g[k]) == pytest.approx(float(fd), rel=1e-6, abs=1e-6)


SPATIAL = """<mujoco model="sp"><option timestep="0.002"><flag contact="disable"/></option>
<worldbody><site name="w0" pos="0.3 0 0.2"/>
 <body name="a"><joint name="h1" axis="0 1 0" damping="0.1"/>
   <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.03" mass="1"/>
   <site name="s1" pos="0.25 0 0.05"/>
   <body name="b" pos="0.5 0 0"><joint name="h2" axis="1 0 0"/>
     <geom type="capsule" fromto="0 0 0 0 0 -0.4" size="0.03" mass="1"/>
     <site name="s2" pos="0.05 0 -0.3"/></body></body>
</worldbody>
<tendon><spatial name="t" stiffness="40" damping="2" springlength="0.5 0.6"><site site="w0"/>
  <site site="s1"/><site site="s2"/></spatial>
  <spatial name="t2" damping="1"><site site="w0"/><site site="s2"/></spatial></tendon></mujoco>"""


def test_spatial_tendons_follow_mujoco():
    """Straight spatial tendons through sites (a dead-band spring over three sites, a damper
    from the world): lengths and velocities are MuJoCo's ``ten_length`` / ``ten_velocity`` and
    1 s of MuJoCo's Euler agrees to 1e-9."""
    r = load_mjcf(SPATIAL)
    assert r.spatial_tendons.paths == ((0, 1, 2), (0, 2)) and r.tendons is None
    m = r.mj_model
    d = mujoco.MjData(m)
    d.qpos[:] = [0.3, 0.5]
    d.qvel[:] = [1.0, -2.0]
    mujoco.mj_forward(m, d)
    conv = r.converter()
    q = jnp.asarray(conv.q_from_mujoco(np.array(d.qpos)))
    v = jnp.asarray(conv.v_from_mujoco(q, np.array(d.qvel)))
    L, Ld = r.spatial_tendons.lengths(r.model, q, v)
    np.testing.assert_allclose(L, d.ten_length, rtol=0, atol=1e-12)
    np.testing.assert_allclose(Ld, d.ten_velocity, rtol=0, atol=1e-12)
    cfg = r.sim_config()
    step = jax.jit(lambda s: sim.step(r.model, s, jnp.zeros(0), cfg))
    (qm,) = mujoco_rollout(m, 500, data=d)
    s, err = sim.State(q, v), 0.0
    for qm_k in qm:
        s = step(s)
        err = max(err, np.abs(conv.q_to_mujoco(np.asarray(s.q)) - qm_k).max())
    assert err < TOL and abs(qm[-1, 0] - 0.3) > 0.3
    with pytest.raises(ValueError, match=r"SpatialTendons: path 0 must list at least two"):
        dataclasses.replace(r.spatial_tendons, paths=((0,), (0, 2)))

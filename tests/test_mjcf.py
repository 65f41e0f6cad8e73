"""MJCF models (:func:`jaxdyn.load_mjcf`) and :mod:`jaxdyn.interop.mujoco` against MuJoCo C.

MuJoCo is the second oracle here: its compiled ``mjModel`` is the model, and ``mj_fullM``,
``mj_rne`` / ``qfrc_bias``, body and site placements (``xpos`` / ``xmat``, ``site_xpos`` /
``site_xmat``), ``mj_jacSite`` / ``mj_jacBody``, geom placements and the equality constraints'
``efc_pos`` / ``efc_J`` are compared, in MuJoCo's coordinates (through the
:class:`~jaxdyn.interop.mujoco.Converter`), at random states, float64,
``max|jaxdyn - mujoco| <= 1e-9 * max(1, max|mujoco|)``. Armature is aligned by comparing
``rnea`` with ``M qacc + qfrc_bias`` (``mj_fullM`` includes the armature, ``mj_rne`` does
not); both sides use the model's gravity.

Default set: dm_control's humanoid (free joint, 27 dofs), an inline model exercising every
mapped feature (``ref`` on hinge and slide, several joints on one body, ball joint, bodies
without joints, two trees, inertial frames, sites, actuators, contact geoms, connect / weld to
the world) and solo12 (an example-robot-data URDF) through MuJoCo's URDF import, loaded by
``jaxdyn.load_urdf``. ``slow``: a sweep (mass matrix, inverse dynamics, body and site
placements) over shipped MJCF models with distinct features (every model shipped by dm_control's
suite, MuJoCo's test data and mujoco-mjx's with ``JAXDYN_MJCF_SWEEP=1``), and ur5 / panda /
solo12 URDFs through MuJoCo's import, loaded by ``load_urdf`` or ``load_mjcf``.
"""

from __future__ import annotations

import functools
import glob
import os
import subprocess
import sys

import pytest

mujoco = pytest.importorskip("mujoco")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn import robots  # noqa: E402
from jaxdyn.algorithms.aba import aba_plain as aba  # noqa: E402
from jaxdyn.algorithms.crba import crba  # noqa: E402
from jaxdyn.algorithms.kinematics import forward_kinematics  # noqa: E402
from jaxdyn.algorithms.rnea import bias_forces, gravity_forces  # noqa: E402
from jaxdyn.algorithms.rnea import rnea_plain as rnea  # noqa: E402
from jaxdyn.constraints import constraint_error, constraint_jacobian  # noqa: E402
from jaxdyn.interop.mujoco import Converter, mujoco_model_from_urdf  # noqa: E402
from jaxdyn.io.mjcf import FEATURES, load_mjcf  # noqa: E402
from jaxdyn.sim import contact_set  # noqa: E402
from jaxdyn.sim.geometry import Box, Capsule, Sphere  # noqa: E402

from oracle import assert_close  # noqa: E402

RTOL = 1e-9
STATES = (0, 1)

FEATURES_XML = """
<mujoco model="features">
  <compiler angle="radian"/>
  <option timestep="0.004"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="torso" pos="0 0 1" quat="0.9 0.1 0.2 0.3">
      <freejoint name="root"/>
      <inertial pos="0.01 0.02 -0.03" quat="0.8 0.1 -0.3 0.2" mass="3" diaginertia="0.1 0.2 0.3"/>
      <geom name="torso_box" type="box" size="0.1 0.15 0.2" mass="0"/>
      <site name="imu" pos="0.05 0 0.1" euler="0.1 -0.2 0.3"/>
      <body name="arm" pos="0.2 0 0" euler="0.1 0.2 0.3">
        <joint name="shoulder_x" type="hinge" axis="1 0 0" pos="0 0 0.05" ref="0.3" range="-1 1"
               damping="0.5" armature="0.01" frictionloss="0.2"/>
        <joint name="shoulder_y" type="hinge" axis="0 1 1" pos="0.02 0 0"/>
        <geom name="upper" type="capsule" fromto="0 0 0 0.3 0.05 0" size="0.04"/>
        <body name="slider" pos="0.3 0 0">
          <joint name="slide" type="slide" axis="1 0.5 0" ref="0.1" range="-0.2 0.3"
                 damping="2"/>
          <geom name="slider_ball" type="sphere" size="0.05" pos="0.02 0 0" mass="0.4"/>
          <site name="tip" pos="0.1 0 0"/>
          <body name="wrist" pos="0.1 0 0">
            <joint name="wrist" type="ball" pos="0 0.01 0" armature="0.02"/>
            <geom name="hand" type="box" size="0.03 0.02 0.01" pos="0.03 0 0" euler="0.2 0 0"/>
            <site name="hand_site" pos="0.05 0.01 0" euler="0 0.3 0"/>
          </body>
        </body>
      </body>
      <body name="leg" pos="0 0 -0.2">
        <joint name="hip" axis="0 1 0" range="-0.5 1.5"/>
        <geom name="foot" type="sphere" size="0.05" pos="0 0 -0.3"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03" contype="0" conaffinity="0"/>
        <body name="shoe" pos="0 0 -0.3" euler="0 0 0.4">
          <geom name="sole" type="box" size="0.05 0.04 0.01" mass="0.2"/>
          <site name="sole_site" pos="0 0 -0.01"/>
        </body>
      </body>
    </body>
    <body name="pendulum" pos="1 0 1">
      <joint name="pend" axis="0 1 0"/>
      <geom name="rod" type="capsule" fromto="0 0 0 0 0 -0.5" size="0.02"/>
      <body name="bob" pos="0 0 -0.5">
        <joint name="bob" axis="1 0 0" ref="-0.2"/>
        <geom name="bob_ball" type="sphere" size="0.04"/>
      </body>
    </body>
  </worldbody>
  <equality>
    <connect name="hold" body1="bob" anchor="0 0 -0.1"/>
    <weld name="stick" body1="world" body2="wrist" anchor="0.01 0.02 0.03"
          relpose="0.5 0.1 1.2 0.9 0.1 -0.2 0.3"/>
  </equality>
  <actuator>
    <motor name="m_shoulder" joint="shoulder_x" gear="2" ctrlrange="-1 1"/>
    <position name="p_hip" joint="hip" kp="10" kv="1"/>
    <velocity name="v_slide" joint="slide" kv="3"/>
  </actuator>
  <keyframe>
    <key name="home" qpos="0 0 1 1 0 0 0 0.3 0 0.1 1 0 0 0 0.2 0 -0.2"/>
  </keyframe>
</mujoco>
"""


# --------------------------------------------------------------------------- MuJoCo side
def full_m(m, d):
    """``mj_fullM`` (MuJoCo >= 3.5 takes ``d``; older versions ``d.qM``)."""
    M = np.zeros((m.nv, m.nv))
    try:
        mujoco.mj_fullM(m, d, M)
    except TypeError:
        mujoco.mj_fullM(m, M, d.qM)
    return M


def random_mj_state(m, seed):
    """``(qpos, qvel, qacc)``: unit quaternions, hinges / slides in ``qpos0 ± 1``."""
    rng = np.random.default_rng(seed)
    qpos = np.array(m.qpos0, float)
    for j in range(m.njnt):
        a, t = int(m.jnt_qposadr[j]), int(m.jnt_type[j])
        if t == 0:
            qpos[a : a + 3] = rng.normal(size=3)
            u = rng.normal(size=4)
            qpos[a + 3 : a + 7] = u / np.linalg.norm(u)
        elif t == 1:
            u = rng.normal(size=4)
            qpos[a : a + 4] = u / np.linalg.norm(u)
        else:
            qpos[a] += rng.uniform(-1, 1)
    return qpos, rng.normal(size=m.nv), rng.normal(size=m.nv)


def mujoco_reference(m, qpos, qvel, qacc, sites, bodies):
    """MuJoCo C quantities at one state (MuJoCo's coordinates)."""
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = qpos, qvel
    mujoco.mj_forward(m, d)
    M = full_m(m, d)
    d.qacc[:] = qacc
    rne = np.zeros(m.nv)
    mujoco.mj_rne(m, d, 1, rne)
    ref = dict(
        M=M,
        bias=np.array(d.qfrc_bias),
        tau=M @ qacc + np.array(d.qfrc_bias),
        rne_noarm=rne,
        xpos=np.array(d.xpos),
        xmat=np.array(d.xmat).reshape(-1, 3, 3),
        site_xpos=np.array(d.site_xpos),
        site_xmat=np.array(d.site_xmat).reshape(-1, 3, 3),
        geom_xpos=np.array(d.geom_xpos),
        geom_xmat=np.array(d.geom_xmat).reshape(-1, 3, 3),
    )
    jacs = []
    for s in sites:
        jp, jr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        mujoco.mj_jacSite(m, d, jp, jr, s)
        jacs.append(np.vstack([jp, jr]))
    for b in bodies:
        jp, jr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        mujoco.mj_jacBody(m, d, jp, jr, b)
        jacs.append(np.vstack([jp, jr]))
    ref["jac"] = np.array(jacs).reshape(-1, 6, m.nv)
    d.qvel[:] = 0
    mujoco.mj_forward(m, d)
    ref["gravity"] = np.array(d.qfrc_bias)
    return ref


# --------------------------------------------------------------------------- jaxdyn side
def jaxdyn_light(model, q, v, a):
    """What the sweeps compare: mass matrix, inverse dynamics, every frame (smaller program)."""
    kin = forward_kinematics(model, q)
    return dict(M=crba(model, q), tau=rnea(model, q, v, a), frame_R=kin.frame.R,
                frame_p=kin.frame.p)  # fmt: skip


def jaxdyn_all(model, q, v, a, tau, jac_frames, constraints):
    """Everything compared (one compiled program per robot: ``Case.fn``)."""
    kin = forward_kinematics(model, q)
    jac = [jaxdyn.jacobian(model, q, f, "local_world_aligned") for f in jac_frames]
    extra = {}
    if constraints:
        extra["c_err"] = constraint_error(model, q, constraints)
        extra["c_jac"] = constraint_jacobian(model, q, constraints)
    return dict(
        **extra,
        body_R=kin.body.R,
        body_p=kin.body.p,
        M=crba(model, q),
        tau=rnea(model, q, v, a),
        bias=bias_forces(model, q, v),
        gravity=gravity_forces(model, q),
        aba=aba(model, q, v, tau),
        frame_R=kin.frame.R,
        frame_p=kin.frame.p,
        jac=jnp.stack(jac) if jac else jnp.zeros((0, 6, model.nv)),
    )


class Case:
    """One robot: a jaxdyn model, MuJoCo's model, and both sides at ``STATES``."""

    def __init__(self, name, model, m, site_frames=None, constraints=(), light=False, max_jac=4):
        """``light``: one state, and only ``jaxdyn_light``'s quantities (the sweeps)."""
        self.name, self.model, self.m, self.light = name, model, m, light
        if light:
            self.fn = jax.jit(lambda model, q, v, a, tau: jaxdyn_light(model, q, v, a))
            max_jac = 0
        else:
            self.fn = jax.jit(
                lambda model, q, v, a, tau: jaxdyn_all(
                    model, q, v, a, tau, self.jac_frames, tuple(constraints)
                )
            )
        self.conv = Converter(model, m)
        frames = set(model.frame_names)
        site_names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_SITE, s) for s in range(m.nsite)]
        body_names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b) for b in range(m.nbody)]
        # frames by MuJoCo name: sites (load_mjcf: site_frames), bodies
        site_frame = site_frames or {n: n for n in site_names}
        self.sites = [s for s, n in enumerate(site_names) if site_frame.get(n) in frames]
        self.site_frames = [site_frame[site_names[s]] for s in self.sites]
        self.bodies = [b for b, n in enumerate(body_names) if b > 0 and n in frames]
        self.body_frames = [body_names[b] for b in self.bodies]
        # Jacobians: a few sites, then a few bodies (the last ones: the deepest in MuJoCo order)
        self.jac_sites = self.sites[:max_jac]
        self.jac_bodies = self.bodies[-max(1, max_jac - len(self.jac_sites)) :] if max_jac else []
        self.jac_frames = tuple(
            [site_frame[site_names[s]] for s in self.jac_sites]
            + [body_names[b] for b in self.jac_bodies]
        )
        self.states = [random_mj_state(m, seed) for seed in (STATES[:1] if light else STATES)]

    @functools.cached_property
    def results(self):
        out = []
        for qpos, qvel, qacc in self.states:
            ref = mujoco_reference(self.m, qpos, qvel, qacc, self.jac_sites, self.jac_bodies)
            q = self.conv.q_from_mujoco(qpos)
            v = self.conv.v_from_mujoco(q, qvel)
            a = self.conv.a_from_mujoco(q, v, qacc)
            tau = self.conv.tau_from_mujoco(q, ref["tau"])
            jx = jax.tree_util.tree_map(np.asarray, self.fn(self.model, q, v, a, tau))
            out.append((q, v, a, ref, jx))
        return out


class MJCFCase(Case):
    def __init__(self, name, source, ignore="all", light=False):
        self.loaded = load_mjcf(source, ignore=ignore)
        r = self.loaded
        super().__init__(
            name,
            r.model,
            r.mj_model,
            site_frames=r.site_frames,
            constraints=() if light else r.constraints,
            light=light,
        )


def dm_control_suite(name):
    import dm_control

    return os.path.join(os.path.dirname(dm_control.__file__), "suite", f"{name}.xml")


@functools.cache
def case(name) -> Case:
    kind, _, what = name.partition(":")
    if kind == "dm_control":
        return MJCFCase(name, dm_control_suite(what))
    if kind == "inline":
        return MJCFCase(name, FEATURES_XML, ignore=())
    path, floating = robots.resolve(what)
    m = mujoco_model_from_urdf(path, floating_base=floating)
    if kind == "urdf_mjcf":  # MuJoCo's URDF import, then load_mjcf of the compiled model
        return MJCFCase(name, m)
    # kind == "urdf": jaxdyn's own URDF loader against MuJoCo's import of the same file
    return Case(name, jaxdyn.load_urdf(path, floating_base=floating), m)


def check_case(c: Case):
    conv = c.conv
    for i, (q, v, a, ref, jx) in enumerate(c.results):
        msg = f"{c.name} state {i}"
        assert_close(conv.matrix_to_mujoco(q, jx["M"]), ref["M"], RTOL, f"{msg}: M")
        assert_close(conv.tau_to_mujoco(q, jx["tau"]), ref["tau"], RTOL, f"{msg}: rnea")
        # mj_rne leaves the armature out
        arm = np.zeros(c.model.nv) if c.model.armature is None else np.asarray(c.model.armature)
        arm_mj = np.zeros(c.model.nv)
        arm_mj[conv.v_index] = arm
        qacc = conv.a_to_mujoco(q, v, a)
        assert_close(ref["rne_noarm"] + arm_mj * qacc, ref["tau"], RTOL, f"{msg}: mj_rne")
        if not c.light:
            bias = conv.bias_from_mujoco(q, v, ref["bias"], ref["M"])
            assert_close(jx["bias"], bias, RTOL, f"{msg}: bias (qfrc_bias)")
            g = conv.tau_to_mujoco(q, jx["gravity"])
            assert_close(g, ref["gravity"], RTOL, f"{msg}: gravity")
            eig = np.linalg.eigvalsh(ref["M"])
            if eig[0] > 1e-9 * max(1.0, eig[-1]):  # (massless moving bodies: no aba)
                assert_close(jx["aba"], a, RTOL, f"{msg}: aba of MuJoCo's M qacc + qfrc_bias")
        index = {n: f for f, n in enumerate(c.model.frame_names)}
        for what, ids, names in (("site", c.sites, c.site_frames), ("", c.bodies, c.body_frames)):
            f = [index[n] for n in names]
            pos, mat = ref[f"{what}_xpos".lstrip("_")], ref[f"{what}_xmat".lstrip("_")]
            assert_close(jx["frame_p"][f], pos[ids], RTOL, f"{msg}: {what or 'body'} positions")
            assert_close(jx["frame_R"][f], mat[ids], RTOL, f"{msg}: {what or 'body'} rotations")
        if not c.light:
            J = np.array([conv.jacobian_to_mujoco(q, Jf) for Jf in jx["jac"]])
            J = J.reshape(ref["jac"].shape)
            assert_close(J, ref["jac"], RTOL, f"{msg}: Jacobians of {c.jac_frames}")


# --------------------------------------------------------------------------- robots
DEFAULT = ("dm_control:humanoid", "inline:features", "urdf:solo12")


@pytest.mark.parametrize("name", DEFAULT)
def test_against_mujoco(name):
    c = case(name)
    assert c.jac_frames, f"{name}: nothing to compare Jacobians on"
    check_case(c)


def test_humanoid_shape():
    c = case("dm_control:humanoid")
    assert (c.model.nq, c.model.nv) == (28, 27) and c.model.floating_base
    assert c.model.joint_names[0] == "root" and len(c.sites) > 0
    # every MuJoCo body and site is a frame
    assert len(c.bodies) == c.m.nbody - 1 and len(c.sites) == c.m.nsite


# --------------------------------------------------------------------------- the inline model
def test_features_mapping():
    c = case("inline:features")
    r, m, model, conv = c.loaded, c.m, c.model, c.conv
    assert r.ignored == () and r.timestep == pytest.approx(0.004)
    assert not model.floating_base  # two trees: the free torso and a fixed pendulum
    # one jaxdyn body per joint: the first of two joints of "arm" is a massless body
    assert "arm/shoulder_x" in model.body_names and "arm" in model.body_names
    assert float(model.mass[model.body_names.index("arm/shoulder_x")]) == 0.0
    # "shoe" has no joint: merged into "leg", still a frame
    assert "shoe" not in model.body_names and "shoe" in model.frame_names
    # joint properties in jaxdyn's v order equal MuJoCo's per dof (and q for ranges)
    vi = conv.v_index
    assert_close(model.armature, np.array(m.dof_armature)[vi], 0, "armature")
    dof_damping = np.array(m.dof_damping)
    for u in range(m.nu):  # actuator_damping (MuJoCo >= 3.3) folds into the coordinate's
        if hasattr(m, "actuator_damping"):
            d = int(m.jnt_dofadr[m.actuator_trnid[u, 0]])
            dof_damping[d] += m.actuator_gear[u, 0] ** 2 * m.actuator_damping[u]
    assert_close(model.damping, dof_damping[vi], 0, "damping")
    assert_close(model.friction, np.array(m.dof_frictionloss)[vi], 0, "friction")
    lo, hi = np.asarray(model.q_lower), np.asarray(model.q_upper)
    for j in ("shoulder_x", "slide", "hip"):
        jid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j)
        sl = model.q_slice(j)
        assert (lo[sl][0], hi[sl][0]) == tuple(m.jnt_range[jid]), j
    assert np.all(np.isinf(lo[model.q_slice("shoulder_y")]))
    assert np.all(np.isinf(lo[model.q_slice("wrist")]))
    # q is MuJoCo's qpos (ref folded into the joint placement): qpos0 and the keyframe
    assert_close(r.q0, conv.q_from_mujoco(np.array(m.qpos0)), 0, "q0")
    assert r.q0[model.q_slice("shoulder_x")][0] == pytest.approx(0.3)
    assert r.q0[model.q_slice("bob")][0] == pytest.approx(-0.2)
    qk, vk = r.keyframes["home"]
    assert_close(qk, conv.q_from_mujoco(np.array(m.key_qpos[0])), 0, "keyframe q")
    assert vk.shape == (model.nv,)


def test_features_actuators():
    r = case("inline:features").loaded
    model = r.model
    acts = {a.name: a for a in r.actuators}
    assert [a.name for a in r.actuators] == ["m_shoulder", "p_hip", "v_slide"]
    mo, po, ve = acts["m_shoulder"], acts["p_hip"], acts["v_slide"]
    assert (mo.kind, mo.gear, mo.gain, mo.ctrlrange) == ("motor", 2.0, 1.0, (-1.0, 1.0))
    assert mo.dof == model.v_slice("shoulder_x").start
    assert (po.kind, po.gain, po.bias) == ("position", 10.0, (0.0, -10.0, -1.0))
    assert (ve.kind, ve.gain, ve.bias) == ("velocity", 3.0, (0.0, 0.0, -3.0))
    eff = np.asarray(model.effort_limit)
    assert eff[model.v_slice("shoulder_x")][0] == 2.0  # |gear| * max|ctrlrange|
    assert np.isinf(eff[model.v_slice("shoulder_y")][0])
    with pytest.raises(ValueError, match="no single jaxdyn.sim equivalent"):
        r.sim_actuator()


def test_actuator_force_matches_mujoco():
    """The documented force law of each Actuator record against MuJoCo's qfrc_actuator."""
    c = case("inline:features")
    m, r, conv = c.m, c.loaded, c.conv
    d = mujoco.MjData(m)
    qpos, qvel, _ = c.states[0]
    d.qpos[:], d.qvel[:] = qpos, qvel
    d.ctrl[:] = [1.7, 0.4, -0.3]  # the motor's ctrl is clamped to its ctrlrange
    mujoco.mj_forward(m, d)
    q = conv.q_from_mujoco(qpos)
    v = conv.v_from_mujoco(q, qvel)
    tau = np.zeros(c.model.nv)
    for a, u in zip(r.actuators, d.ctrl):
        if a.ctrlrange is not None:
            u = np.clip(u, *a.ctrlrange)
        qj, vj = q[c.model.q_slice(a.joint)][0], v[a.dof]
        f = a.gain * u + a.bias[0] + a.bias[1] * a.gear * qj + a.bias[2] * a.gear * vj
        if a.forcerange is not None:
            f = np.clip(f, *a.forcerange)
        tau[a.dof] += a.gear * f
    assert_close(conv.tau_to_mujoco(q, tau), d.qfrc_actuator, RTOL, "qfrc_actuator")


def test_features_contacts():
    c = case("inline:features")
    r, m, model = c.loaded, c.m, c.model
    np.testing.assert_allclose(r.terrain.normal, [0, 0, 1])
    assert float(r.terrain.height) == 0.0
    names = {g.name: g for g in r.contacts}
    # the capsule with contype = conaffinity = 0 and the floor itself are not contacts
    assert set(names) == {"torso_box", "upper", "slider_ball", "hand", "foot", "sole", "rod",
                          "bob_ball"}  # fmt: skip
    assert isinstance(names["upper"], Capsule) and isinstance(names["hand"], Box)
    assert isinstance(names["foot"], Sphere) and names["sole"].frame == "shoe"
    # the contact spheres in the world against MuJoCo's geom placements
    cs = contact_set(model, r.contacts)
    qpos, _, _ = c.states[1]
    d = mujoco.MjData(m)
    d.qpos[:] = qpos
    mujoco.mj_forward(m, d)
    jx = c.results[1][4]
    R, p = jx["body_R"][cs.body_index], jx["body_p"][cs.body_index]
    world = np.einsum("nij,nj->ni", R, np.asarray(cs.pos)) + p
    expected, radius = [], []
    for g in r.contacts:
        gid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, g.name)
        x, X, size = d.geom_xpos[gid], d.geom_xmat[gid].reshape(3, 3), m.geom_size[gid]
        if isinstance(g, Sphere):
            expected.append(x)
            radius.append(size[0])
        elif isinstance(g, Capsule):
            expected += [x - X[:, 2] * size[1], x + X[:, 2] * size[1]]
            radius += [size[0]] * 2
        else:
            for sx in (-1, 1):
                for sy in (-1, 1):
                    for sz in (-1, 1):
                        expected.append(x + X @ (np.array([sx, sy, sz]) * size[:3]))
                        radius.append(0.0)
    assert_close(world, np.array(expected), RTOL, "contact sphere centres")
    assert_close(cs.radius, np.array(radius), 0, "contact radii")


def test_features_equalities():
    """connect / weld to the world: error and Jacobian rows against MuJoCo's efc rows."""
    c = case("inline:features")
    r, m, conv = c.loaded, c.m, c.conv
    assert [type(k).__name__ for k in r.constraints] == ["Connect", "Weld"]
    assert r.constraint_active == (True, True)
    connect, weld = r.constraints
    assert connect.frame == "bob" and weld.frame == "wrist"
    m.opt.jacobian = mujoco.mjtJacobian.mjJAC_DENSE
    for (qpos, _, _), (q, _, _, _, jx) in zip(c.states, c.results):
        d = mujoco.MjData(m)
        d.qpos[:] = qpos
        mujoco.mj_forward(m, d)
        T = conv.velocity_map(q)
        rows = {}
        for e in range(m.neq):
            sel = (d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY) & (d.efc_id == e)
            rows[e] = (np.array(d.efc_pos)[sel], np.array(d.efc_J).reshape(-1, m.nv)[sel])
        err, J = jx["c_err"], jx["c_jac"] @ T.T
        # connect: body1 (moving) point - world point, 3 rows in world axes
        assert_close(err[:3], rows[0][0], RTOL, "connect error")
        assert_close(J[:3], rows[0][1], RTOL, "connect Jacobian")
        # weld with body1 = world: MuJoCo's rows are body1 - body2, jaxdyn's moving - target
        assert_close(-err[6:], rows[1][0][:3], RTOL, "weld position error")
        assert_close(-J[6:], rows[1][1][:3], RTOL, "weld translation rows")
        # rotation error: jaxdyn's is the rotation vector (angle t), MuJoCo's the imaginary
        # part of the error quaternion (sin(t / 2); torquescale 1 here)
        angle = np.linalg.norm(err[3:6])
        assert np.sin(angle / 2) == pytest.approx(np.linalg.norm(rows[1][0][3:]), rel=1e-9)


# --------------------------------------------------------------------------- converter
def test_converter_round_trips():
    c = case("dm_control:humanoid")
    conv = c.conv
    qpos, qvel, qacc = c.states[0]
    q = conv.q_from_mujoco(qpos)
    assert_close(conv.q_to_mujoco(q), qpos, 0, "q")
    v = conv.v_from_mujoco(q, qvel)
    assert_close(conv.v_to_mujoco(q, v), qvel, 1e-14, "v")
    a = conv.a_from_mujoco(q, v, qacc)
    assert_close(conv.a_to_mujoco(q, v, a), qacc, 1e-14, "a")
    T = conv.velocity_map(q)
    assert_close(T.T @ T, np.eye(c.model.nv), 1e-14, "T orthogonal")
    M = np.random.default_rng(0).normal(size=(c.model.nv,) * 2)
    assert_close(conv.matrix_from_mujoco(q, conv.matrix_to_mujoco(q, M)), M, 1e-13, "M")
    # the free joint: MuJoCo's linear velocity is in world axes, jaxdyn's in body axes
    R = c.results[0][4]["body_R"][0]
    assert_close(qvel[0:3], R @ v[3:6], 1e-14, "free linear")
    assert_close(qvel[3:6], v[0:3], 0, "free angular")
    # JAX arrays in, under jit
    qj = jnp.asarray(q)
    out = jax.jit(conv.v_to_mujoco)(qj, jnp.asarray(v))
    assert_close(out, qvel, 1e-14, "v (jit)")


def test_converter_mismatch():
    c = case("inline:features")
    with pytest.raises(ValueError, match="sizes differ"):
        Converter(c.model, case("dm_control:humanoid").m)
    with pytest.raises(ValueError, match="no MuJoCo joint"):
        Converter(load_mjcf(_mjcf()).model, mujoco.MjModel.from_xml_string(
            _mjcf().replace('name="j"', 'name="k"')))  # fmt: skip


# --------------------------------------------------------------------------- errors
def _mjcf(body="", extra="", option=""):
    return f"""<mujoco model="t"><option {option}/>
      <worldbody><body name="b"><joint name="j" axis="0 1 0"/><geom size="0.1"/>
      <site name="s1" pos="0.1 0 0"/></body>{body}</worldbody>{extra}</mujoco>"""


def test_unsupported_features_named():
    xml = (
        _mjcf(
            extra='<tendon><spatial name="tnd"><site site="s1"/><geom geom="wr" sidesite="s0"/>'
            '<site site="s0"/></spatial></tendon>',
            option='density="1.2"',
        )
        .replace('<geom size="0.1"/>', '<geom size="0.1" fluidshape="ellipsoid"/>', 1)
        .replace(
            "<worldbody>",
            '<worldbody><site name="s0" pos="0 0 1"/><geom name="wr" type="sphere" size="0.05" '
            'pos="0.05 0 0.5" contype="0" conaffinity="0"/>',
        )
    )  # a spatial tendon wrapping a sphere with a side site (without one it is honoured)
    with pytest.raises(ValueError) as e:
        load_mjcf(xml)
    msg = str(e.value)
    assert "tendon" in msg and '"tnd"' in msg and 'fluidshape="ellipsoid"' in msg
    assert "ignore=('fluid', 'tendon')" in msg
    r = load_mjcf(xml, ignore=("tendon", "fluid"))
    assert len(r.ignored) == 2 and r.model.nv == 1
    r = load_mjcf(xml, ignore="all")
    assert len(r.ignored) == 2


@pytest.mark.parametrize(
    "xml, match",
    [
        (_mjcf(body='<body name="g" gravcomp="1"><joint/><geom size=".1"/></body>'), "gravcomp"),
        (_mjcf(body='<body name="k" mocap="true"><geom size=".1"/></body>'), "mocap"),
        (
            _mjcf(
                extra='<tendon><fixed name="tf"><joint joint="j" coef="1"/></fixed></tendon>'
                '<equality><tendon tendon1="tf"/></equality>'
            ),
            "tendon constraints",
        ),
        (_mjcf(extra='<actuator><motor name="mt" tendon="x"/></actuator>'), '"mt".*spatial'),
        (
            _mjcf(extra='<actuator><general name="mu" joint="j" dyntype="muscle"/></actuator>'),
            '"mu"',
        ),
        (  # static geometry loads (a pair of jaxdyn.sim.Geoms); a pair without a narrow phase
            _mjcf(  # (heightfield - heightfield: MuJoCo has none either)
                body='<geom name="obst" type="hfield" hfield="h" pos="1 0 0"/>',
                extra='<asset><hfield name="h" nrow="2" ncol="2" size="1 1 .1 .05" '
                'elevation="0 0 0 0"/></asset>',
            ).replace('<geom size="0.1"/>', '<geom name="hb" type="hfield" hfield="h"/>'),
            '"obst" type="hfield".*"hb" type="hfield"',
        ),
        (
            _mjcf(body='<body name="bb"><joint type="ball"/><geom size=".1"/></body>').replace(
                '<joint type="ball"/>', '<joint name="bj" type="ball" range="0 1"/>'
            ),
            '"bj"',
        ),
    ],
)
@pytest.mark.filterwarnings("ignore:.*geoms interpenetrate at qpos0")  # overlapping test geoms
def test_unsupported_feature_errors(xml, match):
    if "tendon=" in xml:  # a spatial tendon (a fixed one is honoured)
        xml = xml.replace(
            "<actuator>",
            '<tendon><spatial name="x"><site site="s1"/><site site="s0"/></spatial></tendon>'
            "<actuator>",
        ).replace("<worldbody>", '<worldbody><site name="s0" pos="0 0 1"/>')
    with pytest.raises(ValueError, match=match):
        load_mjcf(xml)
    load_mjcf(xml, ignore="all")  # the rigid-body model still loads


def test_tendon_armature_is_an_error():
    xml = _mjcf(extra='<tendon><fixed name="ta" armature="0.1"><joint joint="j" coef="1"/>'
                '</fixed></tendon>')  # fmt: skip
    try:
        mujoco.MjModel.from_xml_string(xml)
    except ValueError:
        pytest.skip("this MuJoCo has no tendon armature")  # MuJoCo < 3.3
    with pytest.raises(ValueError, match='tendon name="ta".*armature'):
        load_mjcf(xml, ignore="all")


def test_bad_input():
    with pytest.raises(ValueError, match="unknown ignore keys"):
        load_mjcf(_mjcf(), ignore=("tendons",))
    with pytest.raises(ValueError, match="MuJoCo's compiler"):
        load_mjcf("<mujoco><worldbody><body><joint type='nope'/></body></worldbody></mujoco>")
    with pytest.raises(FileNotFoundError):
        load_mjcf("/nonexistent/model.xml")
    with pytest.raises(TypeError, match="source must be"):
        load_mjcf(3)
    assert set(FEATURES) >= {"tendon", "fluid", "equality", "geom", "actuator"}


def test_float32_range_names_the_element():
    """With float64 disabled, a value MuJoCo compiled that float32 cannot hold is refused at load
    with its element named (it was cast to inf: NaN in the mass matrix), as ``load_urdf``
    does; infinite joint ranges (no limit) stay."""
    from oracle import enable_x64

    def robot(mass="1", lim="-1 1", armature="0"):
        return (
            '<mujoco><worldbody><body name="b1"><joint name="j1" type="hinge" axis="0 0 1"/>'
            f'<geom type="sphere" size="0.1" mass="{mass}"/><body name="b2" pos="0 0 1">'
            f'<joint name="j2" type="hinge" limited="true" range="{lim}" armature="{armature}"/>'
            '<geom type="sphere" size="0.1" mass="1"/></body></body></worldbody></mujoco>'
        )

    with enable_x64(False):
        assert load_mjcf(robot()).model.mass.dtype == jnp.float32
        with pytest.raises(ValueError, match=r'<body name="b1">: mass 1e\+39 .*float32.*x64'):
            load_mjcf(robot(mass="1e39"))
        with pytest.raises(ValueError, match=r'<joint name="j2" type="hinge">: q_upper 1.75e\+39'):
            load_mjcf(robot(lim="-1 1e41"))  # degrees
        with pytest.raises(ValueError, match=r'<joint name="j2" type="hinge">: armature'):
            load_mjcf(robot(armature="1e39"))
    M = crba(load_mjcf(robot(mass="1e39")).model, jnp.zeros(2))  # float64 holds it
    assert M.dtype == jnp.float64 and np.all(np.isfinite(np.asarray(M)))


def test_load_dispatch(tmp_path):
    path = tmp_path / "m.xml"
    path.write_text(FEATURES_XML)
    model = jaxdyn.load(path)
    assert isinstance(model, jaxdyn.Model) and model.nv == case("inline:features").model.nv
    urdf = robots.resolve("arm7")[0]
    assert jaxdyn.load(urdf).nv == jaxdyn.load_urdf(urdf).nv
    bad = tmp_path / "x.xml"
    bad.write_text("<sdf/>")
    with pytest.raises(ValueError, match="root element <sdf>"):
        jaxdyn.load(bad)
    # a MjModel and a MjSpec load as the file does
    assert load_mjcf(mujoco.MjModel.from_xml_path(str(path))).model.nv == model.nv
    assert load_mjcf(mujoco.MjSpec.from_file(str(path))).model.nv == model.nv


def test_assets(tmp_path):
    """``assets`` (MuJoCo's VFS) serve includes of XML text and of a file."""
    main = '<mujoco><include file="body.xml"/></mujoco>'
    assets = {"body.xml": _mjcf().encode()}
    assert load_mjcf(main, assets=assets).model.nv == 1
    path = tmp_path / "main.xml"
    path.write_text(main)
    assert load_mjcf(path, assets=assets).model.nv == 1
    with pytest.raises(ValueError, match="body.xml"):
        load_mjcf(path)


def test_sim_actuator_motors():
    xml = _mjcf(extra='<actuator><motor joint="j" gear="3"/></actuator>')
    act = load_mjcf(xml).sim_actuator()
    assert type(act).__name__ == "Torque" and float(act.gear[0]) == 3.0 and act.dofs == (0,)


def test_import_without_mujoco(tmp_path):
    """``import jaxdyn`` does not import mujoco (nor scipy's Qhull: the collision module's unit
    hulls are built on first use); without mujoco URDF loads and MJCF says how to get it."""
    code = f"""
import sys
import jaxdyn
assert "mujoco" not in sys.modules, "import jaxdyn imported mujoco"
assert "scipy.spatial" not in sys.modules, "import jaxdyn imported scipy.spatial"
sys.modules["mujoco"] = None  # as if not installed
m = jaxdyn.load({str(robots.resolve("arm7")[0])!r})
assert m.nv > 0
try:
    jaxdyn.load_mjcf("<mujoco/>")
except ImportError as e:
    assert "jaxdyn[mjcf]" in str(e), e
else:
    raise AssertionError("no ImportError")
print("ok")
"""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


# --------------------------------------------------------------------------- untrusted files
# Issue 51: an MJCF file opens nothing outside its directory unless trusted=True; its numbers
# and sizes are checked, by element, before they reach MuJoCo's compiler or the dynamics.
TOKEN = "JAXDYN_OUTSIDE_TOKEN_7f3a"
TET_OBJ = "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n"
BODY = '<worldbody><body name="b"><joint name="j"/><geom size=".1"/></body></worldbody>'


class _Watched:
    """A FIFO standing for a file outside the model's directory. Whoever opens it for reading
    (Python or MuJoCo's C code) blocks until a writer comes: a thread polls it with
    non-blocking writes (which fail while nobody reads), so an open is detected, served
    ``payload`` (the token) and released instead of hanging the test."""

    def __init__(self, path, payload):
        import threading

        self.path, self.payload, self.opened = str(path), payload.encode(), False
        os.mkfifo(self.path)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        import time

        while not self.stop.is_set():
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: no reader
                time.sleep(0.001)
                continue
            self.opened = True
            try:
                os.write(fd, self.payload)
            finally:
                os.close(fd)

    def close(self):
        self.stop.set()
        self.thread.join()


def _outside_secret(kind):
    body = f'<body name="{TOKEN}"><joint/><geom size=".1"/></body>'
    if kind == "xml":
        return f"<mujoco><worldbody>{body}</worldbody></mujoco>"
    return TOKEN  # a mesh / texture / height field that is not one


# (name, main file, outside file name): {out} is the outside directory, relative or absolute
OUTSIDE = {
    "include ..": ('<mujoco><include file="../out/secret.xml"/></mujoco>', "secret.xml"),
    "include absolute": ('<mujoco><include file="{out}/secret.xml"/></mujoco>', "secret.xml"),
    "include symlink": ('<mujoco><include file="link.xml"/></mujoco>', "secret.xml"),
    "include nested": ('<mujoco><include file="sub/inner.xml"/></mujoco>', "secret.xml"),
    "model/attach": (
        '<mujoco><asset><model name="s" file="../out/secret.xml"/></asset>'
        '<worldbody><attach model="s" prefix="p-"/></worldbody></mujoco>',
        "secret.xml",
    ),
    "meshdir": (
        f'<mujoco><compiler meshdir="../out"/><asset><mesh name="m" file="tet.obj"/></asset>'
        f"{BODY}</mujoco>",
        "tet.obj",
    ),
    "assetdir absolute": (
        f'<mujoco><compiler assetdir="{{out}}"/><asset><mesh name="m" file="tet.obj"/></asset>'
        f"{BODY}</mujoco>",
        "tet.obj",
    ),
    "mesh absolute": (
        f'<mujoco><asset><mesh name="m" file="{{out}}/tet.obj"/></asset>{BODY}</mujoco>',
        "tet.obj",
    ),
    "texturedir": (
        '<mujoco><compiler texturedir="../out"/><asset><texture name="t" type="2d" '
        f'file="t.png"/></asset>{BODY}</mujoco>',
        "t.png",
    ),
    "hfield": (
        '<mujoco><asset><hfield name="h" file="../out/h.png" size="1 1 1 1"/></asset>'
        f"{BODY}</mujoco>",
        "h.png",
    ),
}


@pytest.mark.parametrize("case_", sorted(OUTSIDE))
def test_outside_file_refused_unread(tmp_path, case_):
    """Every route by which an MJCF file names another file (``<include>``, ``<model>``,
    ``meshdir`` / ``texturedir`` / ``assetdir``, absolute mesh / texture / height-field paths,
    a symbolic link) is refused when it leaves the model's directory, with a message that
    names the element and echoes nothing of the outside file, which is never opened (it is a
    FIFO: an open by MuJoCo's C code would be seen)."""
    main, name = OUTSIDE[case_]
    model, out = tmp_path / "model", tmp_path / "out"
    (model / "sub").mkdir(parents=True)
    out.mkdir()
    (model / "sub" / "inner.xml").write_text(
        '<mujoco><include file="../../out/secret.xml"/></mujoco>'
    )
    os.symlink(out / "secret.xml", model / "link.xml")
    path = model / "main.xml"
    path.write_text(main.replace("{out}", str(out)))
    watch = _Watched(out / name, _outside_secret("xml" if name.endswith(".xml") else "file"))
    try:
        with pytest.raises(ValueError) as e:
            load_mjcf(path)
    finally:
        watch.close()
    msg = str(e.value)
    assert "outside the model's directory" in msg and "trusted=True" in msg, msg
    assert TOKEN not in msg, msg
    assert not watch.opened, f"{case_}: the outside file was opened"


def test_system_files_refused_unread(tmp_path):
    """``/etc/passwd`` and ``/proc/self/environ`` are refused by path, nothing of them in the
    message."""
    env = os.environ.get("PATH", "")
    for target in ("/etc/passwd", "/proc/self/environ"):
        path = tmp_path / "m.xml"
        path.write_text(f'<mujoco><include file="{target}"/></mujoco>')
        with pytest.raises(ValueError, match=f"<include file='{target}'>: refers to a file "
                           "outside") as e:  # fmt: skip
            load_mjcf(path)
        assert "root:" not in str(e.value) and (not env or env not in str(e.value))


def test_trusted_opts_in(tmp_path):
    """``trusted=True`` hands the file to MuJoCo as it is: the include outside loads."""
    (tmp_path / "out").mkdir()
    (tmp_path / "model").mkdir()
    (tmp_path / "out" / "body.xml").write_text(f"<mujoco>{BODY}</mujoco>")
    path = tmp_path / "model" / "main.xml"
    path.write_text('<mujoco><include file="../out/body.xml"/></mujoco>')
    with pytest.raises(ValueError, match="outside the model's directory"):
        load_mjcf(path)
    assert load_mjcf(path, trusted=True).model.nv == 1
    assert jaxdyn.load(path, trusted=True).nv == 1
    with pytest.raises(TypeError, match="trusted must be True or False"):
        load_mjcf(path, trusted="yes")


def test_xml_text_reads_no_file(tmp_path, monkeypatch):
    """MJCF text has no directory: its files come from ``assets=`` only (MuJoCo read them
    relative to the working directory)."""
    (tmp_path / "body.xml").write_text(f"<mujoco>{BODY}</mujoco>")
    monkeypatch.chdir(tmp_path)
    text = '<mujoco><include file="body.xml"/></mujoco>'
    with pytest.raises(ValueError, match=r"<include file='body.xml'>: not in assets="):
        load_mjcf(text)
    assert load_mjcf(text, assets={"body.xml": (tmp_path / "body.xml").read_bytes()}).model.nv
    assert load_mjcf(text, trusted=True).model.nv == 1


@pytest.mark.filterwarnings("ignore:.*geoms interpenetrate at qpos0")  # overlapping test geoms
def test_inside_files_load_as_mujoco_reads_them(tmp_path):
    """Files inside the directory (includes in a subdirectory and their own includes, a
    ``meshdir`` mesh with its default name, a sub-model attached) give the model MuJoCo's own
    ``from_xml_path`` compiles, which jaxdyn's route reads in memory."""
    (tmp_path / "parts" / "more").mkdir(parents=True)
    (tmp_path / "meshes").mkdir()
    (tmp_path / "meshes" / "tet.obj").write_text(TET_OBJ)
    (tmp_path / "parts" / "arm.xml").write_text(
        '<mujoco><include file="more/hand.xml"/><worldbody><body name="arm" pos="1 0 0">'
        '<joint name="a"/><geom type="mesh" mesh="tet" density="500"/></body></worldbody>'
        "</mujoco>"
    )
    (tmp_path / "parts" / "more" / "hand.xml").write_text(
        '<mujoco><worldbody><body name="hand"><joint name="h" type="slide"/>'
        '<geom size=".1" mass="2"/></body></worldbody></mujoco>'
    )
    (tmp_path / "parts" / "tool.xml").write_text(
        '<mujoco><worldbody><body name="tool"><joint name="t"/><geom size=".2 .1" '
        'type="capsule"/></body></worldbody></mujoco>'
    )
    path = tmp_path / "main.xml"
    path.write_text(
        '<mujoco><compiler meshdir="meshes"/><asset><mesh file="tet.obj"/>'
        '<model name="tool" file="parts/tool.xml"/></asset><include file="parts/arm.xml"/>'
        '<worldbody><attach model="tool" prefix="t-"/></worldbody></mujoco>'
    )
    r = load_mjcf(path, ignore="geom")
    ref = mujoco.MjModel.from_xml_path(str(path))
    assert r.mj_model.nbody == ref.nbody == 4 and r.model.nv == 3
    for f in ("body_mass", "body_inertia", "body_ipos", "body_iquat", "mesh_vertnum"):
        np.testing.assert_array_equal(getattr(r.mj_model, f), getattr(ref, f), err_msg=f)


def test_model_directory_through_a_symlink(tmp_path):
    """A model reached through a symbolic link to its directory reads the files inside that
    directory (the check compares resolved paths)."""
    (tmp_path / "real" / "parts").mkdir(parents=True)
    (tmp_path / "real" / "parts" / "body.xml").write_text(f"<mujoco>{BODY}</mujoco>")
    (tmp_path / "real" / "m.xml").write_text('<mujoco><include file="parts/body.xml"/></mujoco>')
    os.symlink(tmp_path / "real", tmp_path / "link")
    assert load_mjcf(tmp_path / "link" / "m.xml").model.nv == 1


def test_urdf_through_mujoco_untrusted(tmp_path):
    """A URDF compiled by MuJoCo takes the same route: its ``<mesh filename>`` is read by
    jaxdyn (MuJoCo's default ``strippath`` for URDF: the file name, in the model's directory);
    with ``strippath="false"`` one outside is refused unread."""
    urdf = robots.resolve("arm7")[0]
    assert load_mjcf(urdf).model.nv == load_mjcf(urdf, trusted=True).model.nv == 7
    (tmp_path / "model").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "model" / "tet.obj").write_text(TET_OBJ)
    link = (
        '<link name="{0}"><inertial><mass value="1"/><inertia ixx="1" ixy="0" ixz="0" '
        'iyy="1" iyz="0" izz="1"/></inertial><visual><geometry><mesh filename="{1}"/>'
        "</geometry></visual></link>"
    )
    (tmp_path / "out" / "tet.obj").write_text(TET_OBJ)
    outside = str(tmp_path / "out" / "tet.obj")
    for mesh, ok in (("package://robot/meshes/tet.obj", True), (outside, False)):
        path = tmp_path / "model" / "r.urdf"
        keep = "" if ok else '<mujoco><compiler strippath="false"/></mujoco>'
        path.write_text(
            '<robot name="r">' + keep + link.format("base", mesh) + link.format("arm", mesh)
            + '<joint name="j" type="revolute"><parent link="base"/><child link="arm"/>'
            '<axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>'
            "</robot>"
        )  # fmt: skip
        if ok:
            assert load_mjcf(path, ignore="geom").model.nv == 1
            continue
        with pytest.raises(ValueError, match="outside the model's directory"):
            load_mjcf(path, ignore="geom")


def test_not_a_regular_file_inside(tmp_path):
    """A FIFO (or device) inside the directory is refused by kind, not opened."""
    path = tmp_path / "m.xml"
    path.write_text('<mujoco><include file="fifo.xml"/></mujoco>')
    watch = _Watched(tmp_path / "fifo.xml", f"<mujoco>{BODY}</mujoco>")
    try:
        with pytest.raises(ValueError, match="fifo.xml'>: not a regular file"):
            load_mjcf(path)
    finally:
        watch.close()
    assert not watch.opened


def test_doctype_refused(tmp_path):
    path = tmp_path / "m.xml"
    path.write_text('<!DOCTYPE m [<!ENTITY e SYSTEM "/etc/passwd">]><mujoco model="&e;"/>')
    with pytest.raises(ValueError, match="DOCTYPE/entity declarations are not allowed"):
        load_mjcf(path)


def _no_compile(monkeypatch):
    """Make MuJoCo's compiler fail the test if it is reached."""

    def boom(*a, **k):
        raise AssertionError("MuJoCo's compiler ran on a file that should be refused first")

    monkeypatch.setattr(mujoco.MjModel, "from_xml_string", staticmethod(boom))
    monkeypatch.setattr(mujoco.MjModel, "from_xml_path", staticmethod(boom))


def _include_chain(tmp_path, n):
    for i in range(n):
        (tmp_path / f"c{i}.xml").write_text(f'<mujoco><include file="c{i + 1}.xml"/></mujoco>')
    (tmp_path / f"c{n}.xml").write_text(f"<mujoco>{BODY}</mujoco>")
    return tmp_path / "c0.xml"


SIZES = {
    "nkey": (f'<mujoco><size nkey="100000000"/>{BODY}</mujoco>', r"<size nkey='100000000'>"),
    "memory": (f'<mujoco><size memory="64G"/>{BODY}</mujoco>', r"<size memory='64G'>"),
    "njmax": (f'<mujoco><size njmax="1e9"/>{BODY}</mujoco>', r"<size njmax='1e9'>"),
    "nuser_body": (
        f'<mujoco><size nuser_body="1000000"/>{BODY}</mujoco>',
        r"<size nuser_body='1000000'>: more than 1000",
    ),
    "bodies": (
        "<mujoco><worldbody>" + '<body><geom size=".1"/></body>' * 2001 + "</worldbody></mujoco>",
        "2001 bodies",
    ),
    "replicate": (
        '<mujoco><worldbody><replicate count="100" offset="1 0 0"><replicate count="1000" '
        'offset="0 1 0"><body><joint/><geom size=".1"/></body></replicate></replicate>'
        "</worldbody></mujoco>",
        "100000 bodies",
    ),
    "keys": (
        f"<mujoco>{BODY}<keyframe>" + "<key/>" * 10001 + "</keyframe></mujoco>",
        "10001 keyframes",
    ),
    "nesting": (
        "<mujoco><worldbody>" + "<body>" * 401 + "</body>" * 401 + "</worldbody></mujoco>",
        "nested deeper than 400",
    ),
    "include chain": (None, "nested deeper than 400"),
}


@pytest.mark.parametrize("what", sorted(SIZES))
def test_absurd_sizes_refused_before_compiling(tmp_path, monkeypatch, what):
    """Sizes that keep MuJoCo's compiler busy for minutes or exhaust memory (10^4 bodies,
    ``nkey`` 10^8, a chain of includes past the nesting MuJoCo allows inline) are refused,
    naming the element, before the compiler runs; ``trusted=True`` lifts the limits."""
    text, match = SIZES[what]
    if text is None:
        path = _include_chain(tmp_path, 400)
    else:
        path = tmp_path / "m.xml"
        path.write_text(text)
    with monkeypatch.context() as mp:
        _no_compile(mp)
        with pytest.raises(ValueError, match=match) as e:
            load_mjcf(path)
    assert "trusted=True lifts" in str(e.value)
    if what == "include chain":  # within the limit: loads
        (tmp_path / "ok").mkdir()
        assert load_mjcf(_include_chain(tmp_path / "ok", 100)).model.nv == 1
    elif what == "nesting":
        ok = text.replace("<body>" * 401, "<body>" * 300).replace("</body>" * 401, "</body>" * 300)
        assert load_mjcf(ok).model.nv == 0


def _values_xml(pos="0 0 0", joint="", geom='mass="1"', option="", extra=""):
    return (
        f'<mujoco><option {option}/><worldbody><body name="b" pos="{pos}"><joint name="j" '
        f'{joint}/><geom size=".1" {geom}/></body></worldbody>{extra}</mujoco>'
    )


J = r'<joint name="j" type="hinge">'
VALUES = {
    "body pos": (_values_xml(pos="1e300 0 0"), r'<body name="b">: pos 1e\+300 exceeds 1e\+50'),
    "gravity": (_values_xml(option='gravity="0 0 1e308"'), r"<option gravity>: gravity 1e\+308"),
    "armature": (_values_xml(joint='armature="1e300"'), J + r": armature 1e\+300 exceeds"),
    "mass": (_values_xml(geom='mass="1e60"'), r'<body name="b">: mass 1e\+60 exceeds'),
    "damping inf": (_values_xml(joint='damping="inf"'), J + ": damping inf is not a finite"),
    "frictionloss nan": (_values_xml(joint='frictionloss="nan"'), J + ": frictionloss nan"),
    "kp nan": (
        _values_xml(extra='<actuator><position name="p" joint="j" kp="nan"/></actuator>'),
        r'<actuator name="p">: gain \(gainprm\) nan',
    ),
    "gear inf": (
        _values_xml(extra='<actuator><motor name="m" joint="j" gear="inf"/></actuator>'),
        r'<actuator name="m">: gear inf',
    ),
    "keyframe nan": (
        _values_xml(extra='<keyframe><key name="k" qpos="nan"/></keyframe>'),
        r'<key name="k">: qpos nan',
    ),
    "timestep 0": (_values_xml(option='timestep="0"'), r"<option timestep=0.0>: .*positive"),
    "timestep -1": (_values_xml(option='timestep="-1"'), r"<option timestep=-1.0>"),
    "timestep nan": (_values_xml(option='timestep="nan"'), r"<option timestep=nan>"),
    "connect nan": (
        _values_xml(extra='<equality><connect name="c" body1="b" anchor="nan 0 0"/></equality>'),
        r'<equality><connect name="c">: data \(anchor / relpose\) nan',
    ),
    "weld nan": (
        _values_xml(
            extra='<equality><weld name="w" body1="b" relpose="0 0 0 nan 0 0 0"/></equality>'
        ),
        r'<equality><weld name="w">: data',
    ),
    "range nan": (_values_xml(joint='limited="true" range="0 nan"'), J + ": range nan"),
    "axis overflow": (  # found by fuzzing: MuJoCo's normalisation gives a zero axis
        _values_xml(joint='axis="1e200 1 1"'),
        J + r": axis \[0.0, 0.0, 0.0\] after MuJoCo's normalisation",
    ),
    "quat overflow": (
        _values_xml().replace('pos="0 0 0"', 'quat="1e200 0 0 1"'),
        r'<body name="b">: quat \[0.0, 0.0, 0.0, 0.0\] after',
    ),
}


@pytest.mark.parametrize("what", sorted(VALUES))
def test_values_checked_by_element(what):
    """Values MuJoCo's compiler lets through (NaN, inf, finite numbers whose products overflow,
    a timestep that is not positive) are refused naming the element: they gave NaN dynamics,
    NaN actuator gains, keyframes and constraints, or a NaN step."""
    xml, match = VALUES[what]
    with pytest.raises(ValueError, match=match):
        load_mjcf(xml)


def test_values_bound_float32():
    """float32 models take parameters up to 1e6 (products of six stay finite): mass 3e38
    (representable in float32) gave NaN dynamics; float64 takes it."""
    from oracle import enable_x64

    with enable_x64(False):
        with pytest.raises(
            ValueError, match=r'<body name="b">: mass 3e\+38 exceeds 1e\+06.*float32.*x64'
        ):
            load_mjcf(_values_xml(geom='mass="3e38"'))
    r = load_mjcf(_values_xml(geom='mass="3e38"'))
    assert np.isfinite(np.asarray(rnea(r.model, r.q0, 0 * r.q0, 0 * r.q0))).all()


def test_names_not_utf8(tmp_path):
    """A name that is not UTF-8: a ValueError naming the place (was a bare
    UnicodeDecodeError); through ``trusted=True`` MuJoCo's model names the object."""
    path = tmp_path / "m.xml"
    path.write_bytes(b'<mujoco><worldbody><body name="b\xe9"><joint/><geom size=".1"/></body>'
                     b"</worldbody></mujoco>")  # fmt: skip
    with pytest.raises(ValueError, match=r"m.xml: malformed XML at line 1, column 33"):
        load_mjcf(path)
    with pytest.raises(ValueError, match=r"name of MuJoCo body #1 .*is not UTF-8"):
        load_mjcf(path, trusted=True)


def test_ignore_type_named():
    with pytest.raises(TypeError, match=r"ignore must be a key .*got 5"):
        load_mjcf(_mjcf(), ignore=5)
    with pytest.raises(TypeError, match="assets must be a dict"):
        load_mjcf(_mjcf(), assets=[b"x"])


@pytest.mark.slow
def test_shipped_mjcf_self_contained():
    """Every shipped model MuJoCo compiles from its path compiles identically from jaxdyn's
    self-contained copy (includes expanded, files read in memory): same bodies, inertias,
    geoms, meshes, textures, height fields, ranges and keyframes."""
    from jaxdyn.io.mjcf import _self_contained

    fields = (
        *("body_mass", "body_inertia", "body_pos", "body_quat", "body_ipos", "geom_size"),
        *("geom_pos", "mesh_vertnum", "tex_height", "hfield_nrow", "jnt_range", "key_qpos"),
    )
    n = 0
    for p in shipped_mjcf_files():
        try:
            ref = mujoco.MjModel.from_xml_path(p)
        except ValueError:
            continue
        xml, vfs, _, _ = _self_contained(p, None)
        m = mujoco.MjModel.from_xml_string(xml, vfs)
        assert (m.nbody, m.nq, m.ngeom) == (ref.nbody, ref.nq, ref.ngeom), p
        for f in fields:
            np.testing.assert_array_equal(getattr(m, f), getattr(ref, f), err_msg=f"{p}: {f}")
        n += 1
    assert n > 20


# --------------------------------------------------------------------------- slow sweeps
def shipped_mjcf_files():
    files = []
    try:
        import dm_control

        files += sorted(glob.glob(os.path.join(os.path.dirname(dm_control.__file__), "suite",
                                               "*.xml")))  # fmt: skip
    except ImportError:  # pragma: no cover
        pass
    root = os.path.dirname(mujoco.__file__)
    files += sorted(glob.glob(os.path.join(root, "testdata", "*.xml")))
    files += sorted(glob.glob(os.path.join(root, "mjx", "test_data", "**", "*.xml"),
                              recursive=True))  # fmt: skip
    return files


# CI runs ``slow`` too: by default the sweep takes models with distinct features (planar
# slide / hinge with ref, equalities and tendons to ignore, ball joints, mocap and gravcomp,
# the tendon-armature refusal, a hand of many hinges and sites); JAXDYN_MJCF_SWEEP=1 takes
# every shipped model (all of them agreed with MuJoCo to 3e-15 when the loader was written:
# docs/mjcf.md).
REPRESENTATIVE = (
    "suite/cheetah.xml",
    "suite/manipulator.xml",
    "suite/quadruped.xml",
    "testdata/model.xml",
    "test_data/pendula.xml",
    "tendon/armature.xml",
    "shadow_hand/right_hand.xml",
)
SWEEP = [
    p
    for p in shipped_mjcf_files()
    if os.environ.get("JAXDYN_MJCF_SWEEP", "0") not in ("0", "")
    or any(p.endswith(os.path.join(*r.split("/"))) for r in REPRESENTATIVE)
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "path", SWEEP, ids=lambda p: os.path.relpath(p, os.path.dirname(p) + "/..")
)
def test_shipped_mjcf(path):
    """Every shipped MJCF model MuJoCo compiles: ``load_mjcf(ignore="all")`` matches MuJoCo C
    (mass matrix, inverse dynamics, body and site placements) or refuses with the one feature
    that changes the rigid-body model (tendon armature)."""
    try:
        m = mujoco.MjModel.from_xml_path(path)
    except ValueError as e:
        pytest.skip(f"MuJoCo's own compiler refuses it: {str(e)[:120]}")
    try:
        c = MJCFCase(path, m, light=True)
    except ValueError as e:
        assert "tendon armature" in str(e), e
        return
    if c.model.nv == 0:
        assert m.nv == 0
        return
    check_case(c)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["urdf:ur5", "urdf_mjcf:panda", "urdf_mjcf:solo12"])
def test_urdf_through_mujoco(name):
    """example-robot-data URDFs compiled by MuJoCo: jaxdyn's URDF loader (``urdf:``) or
    ``load_mjcf`` of MuJoCo's import (``urdf_mjcf:``) against MuJoCo C."""
    route, _, robot = name.partition(":")
    path, floating = robots.resolve(robot)
    m = mujoco_model_from_urdf(path, floating_base=floating)
    if route == "urdf_mjcf":
        c = MJCFCase(name, m, light=True)
    else:
        c = Case(name, jaxdyn.load_urdf(path, floating_base=floating), m, light=True)
    check_case(c)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["anymal", "hyq", "romeo"])
def test_urdf_mujoco_refuses(name):
    """MuJoCo's compiler refuses these URDFs (inertias it deems invalid, massless moving
    bodies): the error names the file."""
    path, floating = robots.resolve(name)
    with pytest.raises(ValueError, match=rf"{name}.*MuJoCo's compiler"):
        mujoco_model_from_urdf(path, floating_base=floating)

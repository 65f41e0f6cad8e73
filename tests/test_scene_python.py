"""Scenes composed in Python (issue 56): ``sim.Scene`` of URDF robots, free objects and static
geometry. Checked against the same scene written as MJCF by hand (``load_mjcf``: the same
model, geoms, pairs and primitives) and against MuJoCo C on that MJCF (mass matrix, bias
forces, the contact depths at the start); stepping under ``jax.jit(jax.vmap(...))``."""

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import robots, sim
from jaxdyn.sim.scene import penetration

mujoco = pytest.importorskip("mujoco")
pytest.importorskip("example_robot_data")

ARM = robots.resolve("double_pendulum_simple")[0]  # example-robot-data: 3 box links, fixed base
YAW = 0.4
ARM_POSE = dict(pos=(0.0, -0.3, 0.55), quat=(np.cos(YAW / 2), 0.0, 0.0, np.sin(YAW / 2)))
C45 = np.cos(np.pi / 4)


def _scene(arm):
    """A double pendulum (fixed base, rotated 0.4 rad about z) beside a table; on the table a
    crate 2 mm deep, a ball 0.5 mm deep, a capsule lying 1 mm deep, an upright can 1 mm above;
    a puck 0.5 mm into the ground."""
    return sim.Scene(
        sim.Robot(arm, urdf=ARM, name="arm", **ARM_POSE),
        objects=[
            sim.FreeBox("crate", (0.1, 0.1, 0.1), mass=1.0, pos=(0.0, 0.0, 0.548)),
            sim.FreeSphere("ball", 0.04, density=500.0, pos=(0.2, 0.1, 0.5395)),
            sim.FreeCapsule("rod", 0.02, 0.1, pos=(-0.2, 0.1, 0.519), quat=(C45, 0, C45, 0)),
            sim.FreeCylinder("can", 0.03, 0.08, density=300.0, pos=(0.2, -0.15, 0.541)),
            sim.FreeCylinder("puck", 0.05, 0.02, pos=(1.0, 0.0, 0.0095)),
        ],
        world=[sim.Ground(), sim.StaticBox("table", (0.8, 0.8, 0.05), pos=(0, 0, 0.475))],
    )


SCENE_MJCF = f"""<mujoco><option timestep="0.002"/>
<worldbody>
  <geom name="ground" type="plane" size="5 5 .1"/>
  <geom name="table" type="box" size="0.4 0.4 0.025" pos="0 0 0.475"/>
  <body name="arm/base_link" pos="0 -0.3 0.55" quat="{np.cos(YAW / 2)} 0 0 {np.sin(YAW / 2)}">
    <inertial pos="0 0 0" mass="0.1" diaginertia="1 1 1"/>
    <geom name="arm/base_link/collision0" type="box" size="0.025 0.025 0.025"/>
    <body name="arm/link1" pos="0.025 0 0">
      <joint name="arm/joint1" type="hinge" axis="1 0 0"/>
      <inertial pos="0 0 0.05" mass="0.2" diaginertia="0.000177083 0.000177083 0.000020833"/>
      <geom name="arm/link1/collision0" type="box" size="0.0125 0.0125 0.05" pos="0 0 0.05"/>
      <body name="arm/link2" pos="0.0125 0 0.1">
        <joint name="arm/joint2" type="hinge" axis="1 0 0"/>
        <inertial pos="0 0 0.1" mass="0.3" diaginertia="0.001015625 0.001015625 0.002"/>
        <geom name="arm/link2/collision0" type="box" size="0.0125 0.0125 0.1" pos="0 0 0.1"/>
      </body>
    </body>
  </body>
  <body name="crate" pos="0 0 0.548"><freejoint name="crate"/>
    <geom name="crate" type="box" size="0.05 0.05 0.05" mass="1"/></body>
  <body name="ball" pos="0.2 0.1 0.5395"><freejoint name="ball"/>
    <geom name="ball" type="sphere" size="0.04" density="500"/></body>
  <body name="rod" pos="-0.2 0.1 0.519" quat="{C45} 0 {C45} 0"><freejoint name="rod"/>
    <geom name="rod" type="capsule" size="0.02 0.05"/></body>
  <body name="can" pos="0.2 -0.15 0.541"><freejoint name="can"/>
    <geom name="can" type="cylinder" size="0.03 0.04" density="300"/></body>
  <body name="puck" pos="1 0 0.0095"><freejoint name="puck"/>
    <geom name="puck" type="cylinder" size="0.05 0.01"/></body>
</worldbody>
<contact><exclude body1="arm/base_link" body2="arm/link1"/></contact>
</mujoco>"""
# the exclude: URDF skips adjacent links (urdf_geoms), MuJoCo's parent filter does not skip a
# child of a body welded to the world


@pytest.fixture(scope="module")
def arm():
    return jaxdyn.load_urdf(ARM)


@pytest.fixture(scope="module")
def built(arm):
    """The scene built in Python and the MJCF one (both warn of their interpenetrations)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scene = _scene(arm)
        loaded = jaxdyn.load_mjcf(SCENE_MJCF)
    return scene, loaded, [str(w.message) for w in caught]


def _names(names, pairs):
    return {frozenset((names[a], names[b])) for a, b in pairs}


def test_scene_is_the_handwritten_mjcf(built):
    """The scene built in Python and its MJCF written by hand (``load_mjcf``): one model with
    the same joints in the same order, the same dynamics parameters (placements, axes, masses,
    centres of mass and inertias: the free objects' from their densities), the same reference
    configuration, the same geoms (bodies,
    poses in their bodies, sizes, bounding radii), the same pairs (MuJoCo's filters: the
    robot's adjacent links skipped, two static geoms never, the ground's spheres, capsules and
    boxes as primitives, the cylinders against it as pairs) and the same primitives."""
    scene, loaded, _ = built
    m, ml = scene.model, loaded.model
    assert m.joint_names == ml.joint_names
    assert m.joint_names[:2] == ("arm/joint1", "crate")  # depth-sorted: the parts interleave
    np.testing.assert_allclose(scene.q0, np.asarray(loaded.q0), atol=1e-12)
    for f in ("Xtree_R", "Xtree_p", "dof_axis", "mass", "com", "inertia", "gravity"):
        a, b = np.asarray(getattr(m, f)), np.asarray(getattr(ml, f))
        np.testing.assert_allclose(a, b, atol=1e-12, err_msg=f)  # every dynamics parameter
    g, gl = scene.geoms, loaded.geoms
    assert _names(g.names, g.pairs) == _names(gl.names, gl.pairs)
    assert frozenset(("arm/base_link/collision0", "arm/link2/collision0")) in _names(
        g.names, g.pairs
    )
    assert frozenset(("arm/link1/collision0", "arm/link2/collision0")) not in _names(
        g.names, g.pairs
    )
    assert frozenset(("ground", "puck")) in _names(g.names, g.pairs)
    i = {n: k for k, n in enumerate(gl.names)}
    for k, n in enumerate(g.names):
        j = i[n]
        assert g.body[k] == gl.body[j] and g.type[k] == gl.type[j], n
        for f in ("size", "pos", "rot", "rbound", "friction"):
            if f == "size" and g.type[k] == "plane":
                continue  # MuJoCo's plane size is for rendering: the plane is infinite
            a, b = np.asarray(getattr(g, f)[k]), np.asarray(getattr(gl, f)[j])
            np.testing.assert_allclose(a, b, atol=1e-12, err_msg=f"{n} {f}")
    c, cl = scene.contacts, loaded.contacts
    cs = sim.contact_set(ml, loaded.contacts)
    assert sorted(c.names) == sorted(cs.names) and len(cl) == 5  # 3 arm/crate boxes, ball, rod
    j = {n: k for k, n in enumerate(cs.names)}
    order = [j[n] for n in c.names]
    assert c.body == tuple(cs.body[k] for k in order)
    np.testing.assert_allclose(np.asarray(c.pos), np.asarray(cs.pos)[order], atol=1e-12)
    np.testing.assert_allclose(np.asarray(c.radius), np.asarray(cs.radius)[order], atol=1e-12)
    assert scene.terrain is not None and float(scene.terrain.height) == 0.0


@pytest.mark.slow  # the same parameters as load_mjcf's model: test_scene_is_the_handwritten_mjcf
def test_scene_dynamics_match_mujoco(built):
    """Mass matrix and bias forces (RNEA) of the scene's model (the robot's links, the free
    objects' masses and inertias from their densities: box, sphere, capsule, cylinder) equal
    MuJoCo C's on the MJCF (``mj_fullM``, ``qfrc_bias``) at a random state, to 1e-10."""
    scene, loaded, _ = built
    model = scene.model
    conv = loaded.converter()
    rng = np.random.default_rng(3)
    q = scene.q0 + 0.3 * rng.standard_normal(model.nq)
    for name in ("crate", "ball", "rod", "can", "puck"):
        iq = scene.q_index[name][3:]
        q[iq] /= np.linalg.norm(q[iq])
    v = rng.standard_normal(model.nv)
    m = loaded.mj_model
    d = mujoco.MjData(m)
    d.qpos[:] = conv.q_to_mujoco(q)
    d.qvel[:] = conv.v_to_mujoco(q, v)
    mujoco.mj_forward(m, d)
    M_mj = np.zeros((m.nv, m.nv))
    try:
        mujoco.mj_fullM(m, d, M_mj)  # MuJoCo >= 3.5
    except TypeError:
        mujoco.mj_fullM(m, M_mj, d.qM)
    # one compiled program: RNEA on a batch, M's columns as rnea(q, 0, e_i) - rnea(q, 0, 0)
    n = model.nv
    vs = np.vstack([np.zeros((n + 1, n)), v])
    acc = np.vstack([np.eye(n), np.zeros((2, n))])
    tau = np.asarray(jax.jit(jax.vmap(lambda v, a: jaxdyn.rnea(model, q, v, a)))(vs, acc))
    M, b = (tau[:n] - tau[n]).T, tau[n + 1]
    np.testing.assert_allclose(np.asarray(M), conv.matrix_from_mujoco(q, M_mj), atol=1e-10)
    ref = conv.bias_from_mujoco(q, v, np.array(d.qfrc_bias), M_mj)
    np.testing.assert_allclose(np.asarray(b), ref, atol=1e-10)


def test_start_interpenetration_warns_with_mujoco_depths(built):
    """The scene warns of its interpenetrating pairs at ``q0``, naming them and their depth as
    ``load_mjcf`` does; the depths (support functions of the shapes, numpy) equal MuJoCo C's
    contact distances on the MJCF (crate-table 2 mm box-box, rod-table 1 mm capsule-box,
    puck-ground 0.5 mm cylinder-plane, ball-table 0.5 mm sphere-box) to 1e-6, and the pairs
    MuJoCo finds apart are apart (the can 1 mm above the table)."""
    scene, loaded, messages = built
    ours = [s for s in messages if s.startswith("Scene")]
    assert len(ours) == 1, messages
    for pair in ("'crate'-'table' (2 mm)", "'rod'-'table' (1 mm)", "'ground'-'puck' (0.5 mm)",
                 "'ball'-'table' (0.5 mm)"):  # fmt: skip
        assert pair in ours[0], ours[0]
    m = loaded.mj_model
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    names = jaxdyn.io.mjcf.mujoco_names(m, "geom")
    ref = {}
    for con in d.contact[: d.ncon]:
        key = frozenset((names[con.geom1], names[con.geom2]))
        ref[key] = max(ref.get(key, -np.inf), -float(con.dist))
    depth = {frozenset(k): v for k, v in scene.penetrations().items()}
    deep = {k for k, v in depth.items() if v > 1e-9}
    assert deep <= set(ref), deep - set(ref)
    assert {frozenset(("crate", "table")), frozenset(("ground", "puck"))} <= deep
    for k, v in ref.items():
        np.testing.assert_allclose(depth[k], v, atol=1e-6, err_msg=str(k))
    for k in set(depth) - set(ref):
        assert depth[k] < 1e-9, (k, depth[k])


def test_support_function_depth_is_exact_on_known_geometry():
    """``penetration`` of two unit-radius spheres 1.5 apart (0.5 deep), of two boxes turned
    45 degrees (corner into face: the depth along the face normal) and a cylinder lying on a
    plane (its rim): the geometry by hand."""
    from jaxdyn.sim.scene import _G, _support_of

    def geom(t, size, R=None, p=None):
        R = np.eye(3) if R is None else R
        p = np.zeros(3) if p is None else p
        return _support_of(_G("g", "g", "g", -1, t, size, R, p, 1.0, 3, None, 1.0), R, p)

    s1 = geom("sphere", [1, 0, 0])
    s2 = geom("sphere", [1, 0, 0], p=np.array([1.5, 0, 0]))
    np.testing.assert_allclose(penetration(s1, s2), 0.5, atol=1e-9)
    c, s = np.cos(np.pi / 4), np.sin(np.pi / 4)
    Rz = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    b1 = geom("box", [0.5, 0.5, 0.5])
    b2 = geom("box", [0.5, 0.5, 0.5], Rz, np.array([0.5 + 0.5 * np.sqrt(2) - 0.1, 0, 0]))
    np.testing.assert_allclose(penetration(b1, b2), 0.1, atol=1e-9)
    Ry = np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]]) @ np.array(
        [[c, 0, s], [0, 1, 0], [-s, 0, c]]
    )  # the axis along x
    cyl = geom("cylinder", [0.1, 0.3, 0], Ry, np.array([0, 0, 0.09]))
    plane = geom("plane", [0, 0, 0])
    np.testing.assert_allclose(penetration(plane, cyl), 0.01, atol=1e-12)


def test_mass_properties_of_a_mesh_are_its_hulls():
    """A free mesh cube (a vertex inside, offset by 0.1 in x in its frame) has the box's mass
    and inertia at the density (a second algorithm: tetrahedra of the hull) and its centre of
    mass at the offset."""
    cube = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float)
    verts = np.vstack([cube * [0.1, 0.05, 0.02], [[0.01, 0.0, 0.0]]]) + [0.1, 0, 0]
    mesh = sim.FreeMesh("die", verts, density=800.0)
    box = sim.FreeBox("box", (0.2, 0.1, 0.04), density=800.0)
    _, _, _, m1, c1, I1, _ = mesh._geom
    _, _, _, m2, c2, I2, _ = box._geom
    np.testing.assert_allclose(m1, 800 * 0.2 * 0.1 * 0.04, rtol=1e-12)
    np.testing.assert_allclose(m1, m2, rtol=1e-12)
    np.testing.assert_allclose(c1, [0.1, 0, 0], atol=1e-12)
    np.testing.assert_allclose(I1, I2, atol=1e-14)


def test_bad_input_is_refused_by_name(arm):
    """Unsupported shapes by name (a heightfield, a plane as an object, a cone), wrong-shaped
    poses and sizes naming the argument and the expected size, a contact primitive given as
    an object, duplicate names, a deny list naming nothing, a robot configuration of the wrong
    size, a state of the wrong size."""
    with pytest.raises(ValueError, match=r"FreeObject 'x': shape 'cone' is not supported"):
        sim.FreeObject("x", "cone", (1.0,))
    with pytest.raises(ValueError, match=r"shape 'hfield' is not supported.*Heightfield"):
        sim.StaticGeom("x", "hfield", (1.0,))
    with pytest.raises(ValueError, match=r"'plane' is not supported.*sim.Ground"):
        sim.FreeObject("x", "plane", (1.0,))
    with pytest.raises(ValueError, match=r"pos has shape \(2,\), expected \(3,\)"):
        sim.FreeBox("crate", (0.1, 0.1, 0.1), pos=(0.0, 1.0))
    with pytest.raises(ValueError, match=r"quat has shape \(3,\), expected \(4,\)"):
        sim.StaticBox("table", (1, 1, 0.1), quat=(1, 0, 0))
    with pytest.raises(ValueError, match=r"size has shape \(2,\), expected \(3,\) \(3 full"):
        sim.FreeBox("crate", (0.1, 0.1))
    with pytest.raises(ValueError, match=r"size has shape \(1,\), expected \(2,\) \(radius, len"):
        sim.FreeObject("rod", "capsule", (0.1,))
    with pytest.raises(ValueError, match=r"vertices has shape \(3, 3\), expected \(n, 3\)"):
        sim.FreeMesh("die", np.eye(3))
    with pytest.raises(ValueError, match=r"Robot 'arm': q has shape \(3,\), expected \(nq,\)"):
        sim.Robot(arm, name="arm", q=np.zeros(3))
    with pytest.raises(ValueError, match=r"Robot 'arm': pos has shape \(4,\), expected \(3,\)"):
        sim.Robot(arm, name="arm", pos=np.zeros(4))
    with pytest.raises(TypeError, match=r"contact primitive on a model frame.*sim.FreeSphere"):
        sim.Scene(objects=[sim.Sphere("base_link", 0.1)])
    with pytest.raises(ValueError, match=r"repeated: \['crate'\]"):
        sim.Scene(objects=[sim.FreeSphere("crate", 0.1), sim.FreeBox("crate", (1, 1, 1))])
    with pytest.raises(ValueError, match=r"deny entry \('ball', 'nothing'\) names 'nothing'"):
        sim.Scene(objects=[sim.FreeSphere("ball", 0.1)], deny=[("ball", "nothing")])
    with pytest.raises(ValueError, match=r"one Ground at most"):
        sim.Scene(world=[sim.Ground(), sim.Ground(name="floor")])
    scene = sim.Scene(objects=[sim.FreeSphere("ball", 0.1, pos=(0, 0, 1))], world=[sim.Ground()])
    with pytest.raises(ValueError, match=r"Scene.state: q has shape \(6,\), expected \(..., 7\)"):
        scene.state(q=np.zeros(6))


def test_deny_allow_entries_are_pairs_of_names():
    """``deny`` / ``allow`` take any pair-like of two names (lists as tuples) and refuse, naming
    the argument and the entry, a pair of the wrong length, a non-string name (an index used
    to pass through as "no part" or fail inside ``len``), a bare string, an unknown name."""
    objs = [sim.FreeSphere("ball", 0.1, pos=(0, 0, 1)), sim.FreeSphere("cue", 0.1, pos=(1, 0, 1))]
    assert sim.Scene(objects=objs).geoms is not None
    assert sim.Scene(objects=objs, deny=[["ball", "cue"]]).geoms is None
    assert sim.Scene(objects=objs, deny=[np.array(["cue", "ball"])]).geoms is None
    for what in ("deny", "allow"):
        for bad in (("ball",), ("ball", "cue", "ball"), ("ball", 1), (0, 1), 5, "ball", None):
            with pytest.raises(
                ValueError,
                match=rf"Scene: {what} entries must be pairs \(a, b\) "
                rf"of two names \(str\), got {re.escape(repr(bad))}",
            ):
                sim.Scene(objects=objs, **{what: [bad]})
        with pytest.raises(
            ValueError,
            match=rf"{what} entry \('ball', 'nothing'\) names "
            r"'nothing', which is no part",
        ):
            sim.Scene(objects=objs, **{what: [["ball", "nothing"]]})
        with pytest.raises(ValueError, match=rf"Scene: {what} must be a list of pairs"):
            sim.Scene(objects=objs, **{what: 3})


def test_deny_and_parts(arm):
    """``deny`` removes the pairs of two parts, or of a robot's link and a part; ``q_index``
    / ``joints`` address a part's coordinates in the scene."""
    kw = dict(objects=[sim.FreeSphere("ball", 0.05, pos=(0, 0, 1))], world=[sim.Ground()])
    robot = sim.Robot(arm, urdf=ARM, name="arm", pos=(0.5, 0, 0.5))
    full = sim.Scene(robot, **kw)
    no_ball = sim.Scene(robot, deny=[("arm", "ball")], **kw)
    no_link = sim.Scene(robot, deny=[("arm/link2", "ball")], **kw)
    pairs = {n: _names(s.geoms.names, s.geoms.pairs) for n, s in
             (("full", full), ("no_ball", no_ball), ("no_link", no_link))}  # fmt: skip
    with_ball = {p for p in pairs["full"] if "ball" in p}
    assert len(with_ball) == 3
    assert not {p for p in pairs["no_ball"] if "ball" in p}
    assert {p for p in pairs["no_link"] if "ball" in p} == with_ball - {
        frozenset(("ball", "arm/link2/collision0"))
    }
    assert full.joints("arm") == ("arm/joint1", "arm/joint2") and full.joints("ball") == ()
    assert full.model.nq == 9 and len(full.q_index["ball"]) == 7
    np.testing.assert_allclose(full.q0[full.q_index["ball"]], [0, 0, 1, 1, 0, 0, 0])


def test_allow_brings_back_a_robots_skipped_pairs(arm):
    """``allow`` adds pairs a robot's own geoms skip (adjacent links: the pendulum's two moving
    links, and its first link with the fixed base, which overlap: warned) and nothing else;
    ``deny`` wins over it;
    an ``allow`` naming nothing is refused by name."""
    robot = sim.Robot(arm, urdf=ARM, name="arm", pos=(0.5, 0, 0.5))
    kw = dict(objects=[sim.FreeSphere("ball", 0.05, pos=(0, 0, 1))])
    g = sim.Scene(robot, **kw).geoms
    full = _names(g.names, g.pairs)
    links = ("arm/link1", "arm/link2")
    with pytest.warns(UserWarning, match="base_link/collision0'-'arm/link1"):  # they overlap
        allowed = sim.Scene(robot, allow=[links, ("arm/base_link", "arm/link1")], **kw).geoms
    g1, g2, g0 = "arm/link1/collision0", "arm/link2/collision0", "arm/base_link/collision0"
    assert frozenset((g1, g2)) not in full and frozenset((g0, g1)) not in full
    assert _names(allowed.names, allowed.pairs) == full | {frozenset((g1, g2)),
                                                           frozenset((g0, g1))}  # fmt: skip
    both = sim.Scene(robot, allow=[links], deny=[(g1, g2)], **kw).geoms
    assert _names(both.names, both.pairs) == full
    with pytest.raises(ValueError, match=r"allow entry .* names 'arm/link9'"):
        sim.Scene(robot, allow=[("arm/link1", "arm/link9")], **kw)
    with pytest.raises(ValueError, match=r"allow entries must be pairs \(a, b\) of two names"):
        sim.Scene(robot, allow=["arm/link1"], **kw)


QUAD_FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")


@pytest.mark.slow  # the scene's assembly: test_scene_is_the_handwritten_mjcf; its stepping
# under jit(vmap) with geom pairs: tests/test_scene.py::test_scene_steps_under_jit_vmap
def test_two_robots_step_in_one_jit_vmap(arm):
    """Two robots (the fixed double pendulum from URDF with its collision boxes, the floating
    quad12 with spheres on its feet) and a ball in one scene: a batch of states steps in one
    ``jax.jit(jax.vmap(step))`` (Compliant), each element equal to the step taken alone; the
    quadruped falls (gravity) while the pendulum, balanced upright, stays; the ball thrown at
    the pendulum's upper link pushes it."""
    quad = jaxdyn.load_urdf(str(robots.DATA_DIR / "quad12.urdf"), floating_base=True)
    scene = sim.Scene(
        sim.Robot(arm, urdf=ARM, name="arm", pos=(0.0, 0.5, 0.0)),
        sim.Robot(quad, name="quad", pos=(0, 0, 0.6),
                  contacts=[sim.Sphere(f, 0.02) for f in QUAD_FEET]),
        objects=[sim.FreeSphere("ball", 0.03, mass=0.2, pos=(0.045, 0.3, 0.2))],
        world=[sim.Ground()],
    )  # fmt: skip
    assert scene.model.nq == 2 + 19 + 7 and not scene.model.floating_base
    cfg = scene.sim_config(sim.Compliant(), limits=None)
    model = scene.model
    nu = cfg.actuator.size(model)
    assert nu == 14  # the robots' joints (free joints left out)
    vb = np.zeros((3, model.nv))
    vb[1:, scene.v_index["ball"][3:]] = [0.0, 3.0, 0.0]  # thrown at the upper link (+y)
    vb[2, scene.v_index["quad"][5]] = 0.5
    s = scene.state(v=vb)  # q0 broadcast to the batch
    f = jax.jit(jax.vmap(lambda s: sim.rollout(model, s, jnp.zeros((40, nu)), cfg=cfg)))
    tr = f(s)
    qa = np.asarray(tr.q[:, -1][:, scene.q_index["arm"]])
    qq = np.asarray(tr.q[:, -1][:, scene.q_index["quad"]])
    np.testing.assert_allclose(qa[0], 0.0, atol=1e-12)  # balanced upright
    assert np.abs(qa[1]).max() > 1e-3  # hit by the ball
    np.testing.assert_allclose(qa[1], qa[2], atol=1e-12)  # the quadruped does not matter
    assert qq[0, 2] < 0.6 - 0.5 * 9.81 * (40 * 0.002) ** 2 * 0.9  # falling
    assert abs(qq[2, 2] - qq[0, 2]) > 1e-3  # its own initial velocity
    one = jax.jit(lambda s: sim.rollout(model, s, jnp.zeros((40, nu)), cfg=cfg))
    for i in range(3):
        ti = one(jax.tree_util.tree_map(lambda x, i=i: x[i], s))
        np.testing.assert_allclose(np.asarray(tr.q[i]), np.asarray(ti.q), atol=1e-10)


REST_STEPS = 300


@pytest.mark.slow  # minutes of compilation (box-box pairs with Constraint(newton=3)); the
# scene's assembly: test_scene_is_the_handwritten_mjcf; resting boxes between free bodies:
# tests/test_scene.py::test_stack_box_capsule_mesh_rest_like_mujoco (slow too)
def test_box_rests_on_table_beside_a_robot(arm):
    """The URDF double pendulum beside a static table with a free box dropped 1 cm onto it
    (``Constraint(newton=3)``): the box comes to rest on the table at the geometric height
    (1e-6 m, no drift, at rest) and at MuJoCo C's height on the same scene (1 mm: MuJoCo's
    soft contact sinks a little); the pendulum's links are in pairs with the box (its pairs
    with the table, which it cannot reach, denied: fewer box-box pairs to compile)."""
    scene = sim.Scene(
        sim.Robot(arm, urdf=ARM, name="arm", **ARM_POSE),
        objects=[sim.FreeBox("crate", (0.1, 0.1, 0.1), mass=1.0, pos=(0.0, 0.0, 0.56))],
        world=[sim.Ground(), sim.StaticBox("table", (0.8, 0.8, 0.05), pos=(0, 0, 0.475))],
        deny=[("arm", "table")],
    )
    names = _names(scene.geoms.names, scene.geoms.pairs)
    assert frozenset(("arm/link1/collision0", "crate")) in names
    assert not any("table" in p and any(n.startswith("arm/") for n in p) for p in names)
    cfg = scene.sim_config(sim.Constraint(newton=3), limits=None)
    model = scene.model
    run = jax.jit(lambda s: sim.rollout(model, s, jnp.zeros((REST_STEPS, 2)), cfg=cfg))
    tr = run(scene.state())
    zc = np.asarray(tr.q[:, scene.q_index["crate"][2]])
    np.testing.assert_allclose(zc[-1], 0.55, atol=1e-6)
    assert abs(zc[-1] - zc[-100]) < 1e-6
    assert np.abs(np.asarray(tr.v[-1])).max() < 1e-5
    xml = (
        SCENE_MJCF.replace('pos="0 0 0.548"', 'pos="0 0 0.56"').split('<body name="ball"')[0]
        + "</worldbody>"
        + SCENE_MJCF.split("</worldbody>")[1]
    )
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    for _ in range(REST_STEPS):
        mujoco.mj_step(m, d)
    np.testing.assert_allclose(zc[-1], d.qpos[4], atol=1e-3)  # qpos: 2 hinges, then the crate


def test_base_pose_places_fixed_and_floating_robots(arm):
    """A fixed base at ``pos`` / ``quat`` and a floating base started there (composed with the
    pose in its ``q``): every body of each robot in the scene is the robot's own body moved by
    the base pose, at a random configuration (numpy forward kinematics of both models)."""
    from jaxdyn.algorithms.kinematics import body_placements_numpy
    from jaxdyn.sim.scene import _rotation

    quad = robots.load("quad12")
    rng = np.random.default_rng(0)
    qq = np.concatenate([[0.1, -0.2, 0.3], [0.9, 0.1, -0.2, 0.3], rng.uniform(-1, 1, 12)])
    qq[3:7] /= np.linalg.norm(qq[3:7])
    pose = dict(pos=(1.0, 2.0, 0.5), quat=(0.8, 0.2, -0.1, 0.4))
    scene = sim.Scene(
        sim.Robot(arm, name="arm", **pose),
        sim.Robot(quad, name="quad", q=qq, **pose),
        objects=[sim.FreeSphere("ball", 0.1, pos=(0, 0, 1))],
    )
    Rb, pb = _rotation("", pose["quat"], None), np.asarray(pose["pos"])
    qa = rng.uniform(-1, 1, 2)
    q = scene.q0.copy()
    q[scene.q_index["arm"]] = qa
    Rs, ps = body_placements_numpy(scene.model, q)
    for name, model, qm in (("arm", arm, qa), ("quad", quad, qq)):
        R, p = body_placements_numpy(model, qm)
        b = scene.body[name]
        np.testing.assert_allclose(Rs[b], Rb @ R, atol=1e-12)
        np.testing.assert_allclose(ps[b], p @ Rb.T + pb, atol=1e-12)
    f = scene.model.frame_index("arm/base_link")  # a world frame of the fixed base
    np.testing.assert_allclose(np.asarray(scene.model.frame_R[f]), Rb, atol=1e-12)
    np.testing.assert_allclose(np.asarray(scene.model.frame_p[f]), pb, atol=1e-12)


def test_mjcf_robot_keeps_its_contact_parameters():
    """A robot loaded from MJCF (``load_mjcf``: its model and geoms) keeps its geoms'
    ``margin``, ``solref`` and ``solmix`` in the scene; the scene's own objects take MuJoCo's
    defaults (margin 0, solref (0.02, 1), solmix 1), so the pairs mix them as MuJoCo would."""
    xml = """<mujoco><worldbody>
      <body name="a" pos="0 0 1"><freejoint/>
        <geom name="ga" type="sphere" size="0.1" margin="0.01" solref="0.05 1" solmix="2"/></body>
      <body name="b" pos="1 0 1"><freejoint/><geom name="gb" type="capsule" size="0.1 0.1"/></body>
    </worldbody></mujoco>"""
    loaded = jaxdyn.load_mjcf(xml)
    scene = sim.Scene(
        sim.Robot(loaded.model, geoms=loaded.geoms, name="m", q=loaded.q0),  # q0: its qpos0
        objects=[sim.FreeSphere("ball", 0.05, pos=(0, 1, 1))],
    )
    g = scene.geoms
    k = {n: i for i, n in enumerate(g.names)}
    assert frozenset(("m/ga", "ball")) in _names(g.names, g.pairs)
    np.testing.assert_allclose(np.asarray(g.margin)[[k["m/ga"], k["ball"]]], [0.01, 0.0])
    np.testing.assert_allclose(np.asarray(g.solref)[k["m/ga"]], [0.05, 1.0])
    np.testing.assert_allclose(np.asarray(g.solref)[k["ball"]], [0.02, 1.0])
    np.testing.assert_allclose(np.asarray(g.solmix)[[k["m/ga"], k["ball"]]], [2.0, 1.0])

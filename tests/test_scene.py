"""Contact between any bodies (issue 56): collision geoms from MJCF files, MuJoCo's pair
filters, body-body contacts in both contact models, checked against MuJoCo C on the same
scenes."""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import sim

mujoco = pytest.importorskip("mujoco")

from _mujoco_ref import mujoco_rollout  # noqa: E402

FILTER_MJCF = """<mujoco><option timestep="0.002"/>
<worldbody>
  <geom name="floor" type="plane" size="5 5 .1"/>
  <geom name="wall" type="sphere" size="0.3" pos="0 0 0.1"/>
  <geom name="ghost" type="sphere" size="0.3" pos="0 0 0.1" contype="0" conaffinity="0"/>
  <body name="a" pos="0 0 0.1"><freejoint/>
    <geom name="a0" type="sphere" size="0.2" mass="1"/>
    <geom name="a1" type="capsule" size="0.1 0.1" mass="1"/>
    <body name="b"><joint type="hinge" axis="0 0 1"/>
      <geom name="b0" type="sphere" size="0.2" mass="1"/>
      <body name="c"><joint type="hinge" axis="0 1 0"/>
        <geom name="c0" type="capsule" size="0.1 0.1" mass="1"/>
        <geom name="c1" type="sphere" size="0.2" mass="1" contype="2" conaffinity="2"/>
      </body>
    </body>
  </body>
  <body name="d" pos="0 0 0.1"><freejoint/>
    <geom name="d0" type="sphere" size="0.2" mass="1"/>
    <geom name="d1" type="sphere" size="0.15" mass="1" contype="2" conaffinity="0"/>
  </body>
  <body name="e" pos="0 0 0.1"><freejoint/><geom name="e0" type="capsule" size="0.1 0.1" mass="1"/>
  </body>
</worldbody>
<contact><exclude body1="d" body2="e"/></contact>
</mujoco>"""


def _name_pairs(names, pairs):
    return {frozenset((names[a], names[b])) for a, b in pairs}


@pytest.mark.filterwarnings("ignore:.*geoms interpenetrate at qpos0")  # every geom overlaps
def test_pairs_follow_mujoco_filters():
    """The pairs of a loaded MJCF (primitives against the ground plane and the geom pairs) are
    exactly those MuJoCo's collision detection finds when every geom overlaps every other:
    contype / conaffinity, an ``<exclude>``, geoms of one body, a parent and its child (b-a,
    c-b) skipped, a grandchild (c-a) and the world's children kept, two static geoms never."""
    loaded = jaxdyn.load_mjcf(FILTER_MJCF)
    m = loaded.mj_model
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    names = jaxdyn.io.mjcf.mujoco_names(m, "geom")
    expected = {frozenset((names[c.geom1], names[c.geom2])) for c in d.contact[: d.ncon]}
    got = _name_pairs(loaded.geoms.names, loaded.geoms.pairs)
    got |= {frozenset(("floor", p.name)) for p in loaded.contacts}
    assert got == expected, sorted(map(sorted, got ^ expected))
    assert frozenset(("c0", "a0")) in got and frozenset(("b0", "a0")) not in got
    body = dict(zip(loaded.geoms.names, loaded.geoms.body, strict=True))
    assert body["wall"] == -1 and body["a0"] != body["c0"]


REST_MJCF = """<mujoco><option timestep="0.002"/>
<worldbody>
  <geom name="floor" type="plane" size="5 5 .1" friction="0.5 0.005 0.0001"/>
  <geom name="table" type="box" size="0.3 0.3 0.05" pos="0 0 0.05" contype="2" conaffinity="2"/>
  <body name="ball" pos="0 0 0.15"><freejoint/>
    <geom name="ball" type="sphere" size="0.05" mass="0.5" contype="3" conaffinity="3"/></body>
  <body name="crate" pos="1 0 0.1"><freejoint/>
    <geom name="crate" type="box" size="0.1 0.1 0.1" mass="2"/></body>
  <body name="top" pos="1.02 0.01 0.25"><freejoint/>
    <geom name="top" type="sphere" size="0.05" mass="0.5"/></body>
</worldbody></mujoco>"""
REST_STEPS = 400


@pytest.fixture(scope="module")
def rest_scene():
    """A ball on a static table, a free crate on the floor with a ball on it: the loaded model,
    its Constraint configuration and one jitted rollout of ``REST_STEPS`` steps."""
    loaded = jaxdyn.load_mjcf(REST_MJCF)
    # 3 Newton steps after the APGD: with the default 100 APGD steps alone the stack (a ball on
    # the crate on the floor) is solved to a residual that leaves the crate 40 um deep and
    # tilted, and the ball rolls off at 0.3 mm/s (400 steps: 0.5 um, 26 um/s)
    contact = sim.Constraint(soft=False, newton=3)
    cfg = loaded.sim_config(contact=contact, actuator=sim.Torque(dofs=()))
    model = loaded.model
    run = jax.jit(lambda s, cfg: sim.rollout(model, s, jnp.zeros((REST_STEPS, 0)), cfg=cfg))
    return loaded, cfg, run


def _mujoco_heights(xml, steps):
    return mujoco_rollout(mujoco.MjModel.from_xml_string(xml), steps)[0][:, 2::7]


@pytest.mark.slow
def test_resting_bodies_match_mujoco(rest_scene):
    """Resting contact between bodies, ``Constraint`` against MuJoCo C: a ball on a static
    table (sphere-box against the world), a crate on the floor (its corners against the plane)
    and a ball on the crate (sphere-box between two free bodies) stay at MuJoCo's heights
    within 1 mm (MuJoCo's soft contacts sink 0.1-0.4 mm; jaxdyn's hard ones within 1e-8 m of
    the geometric heights) and do not drift (below 1e-6 m over the last 200 steps); the bodies
    stay at rest (speeds below 1e-5)."""
    loaded, cfg, run = rest_scene
    model = loaded.model
    tr = run(sim.State(loaded.q0, jnp.zeros(model.nv)), cfg)
    z = np.asarray(tr.q[:, 2::7])
    ref = _mujoco_heights(REST_MJCF, REST_STEPS)
    np.testing.assert_allclose(z[-1], ref[-1], atol=1e-3)
    np.testing.assert_allclose(z[-1], [0.15, 0.1, 0.25], atol=1e-8)
    assert np.abs(z[-1] - z[-200]).max() < 1e-6, z[-1] - z[-200]
    assert np.abs(np.asarray(tr.v[-1])).max() < 1e-5


@pytest.mark.slow
def test_body_contacts_without_the_pipeline_fall_through(rest_scene):
    """The same scene without its geom pairs (``geoms=None``): the balls fall through the table
    and the crate, so the test above depends on the body-body contacts."""
    loaded, cfg, run = rest_scene
    bare = sim.SimConfig(
        dt=cfg.dt, contact=cfg.contact, contacts=cfg.contacts, actuator=cfg.actuator
    )
    tr = run(sim.State(loaded.q0, jnp.zeros(loaded.model.nv)), bare)
    z = np.asarray(tr.q[-1, 2::7])
    assert z[0] < 0.1 and z[2] < 0.2  # through the table and the crate


BALL_MJCF = """<mujoco><option timestep="0.002"/><worldbody>
  <geom type="plane" size="5 5 .1"/>
  <body name="ball" pos="0 0 0.4"><freejoint/><geom type="sphere" size="0.1" mass="1"/></body>
</worldbody></mujoco>"""


def test_compliant_impact_depth_near_mujoco():
    """A 0.1 m ball dropped from 0.4 m onto the default ``Compliant``: its deepest sink at
    impact is within 25 % of MuJoCo C's (17.7 mm; jaxdyn 21.8 mm: both are a critically damped
    50 rad/s spring on the ball's mass, MuJoCo's impedance 0.9-0.95 also removes 90 % of
    gravity inside the contact); the old default (stiffness from 5 mm of static sink, a quarter
    of critical damping) sank 43.6 mm. At rest it sinks ``g timeconst^2`` (3.9 mm)."""
    loaded = jaxdyn.load_mjcf(BALL_MJCF)
    cfg = loaded.sim_config(contact=sim.Compliant(), actuator=sim.Torque(dofs=()))
    tr = sim.rollout(loaded.model, sim.State(loaded.q0, jnp.zeros(6)), jnp.zeros((300, 0)), cfg=cfg)
    z = np.asarray(tr.q[:, 2])
    ref = _mujoco_heights(BALL_MJCF, 300)[:, 0]
    sink, ref_sink = 0.1 - z.min(), 0.1 - ref.min()
    assert abs(sink - ref_sink) < 0.25 * ref_sink, (sink, ref_sink)
    np.testing.assert_allclose(0.1 - z[-1], 9.81 * 0.02**2, rtol=1e-3)


INCLINE = np.radians(20.0)
INCLINE_MJCF = """<mujoco><option timestep="0.002"/><worldbody>
  <geom type="plane" size="5 5 .1" zaxis="{s} 0 {c}" friction="0.5 0.005 0.0001"/>
  <body name="box" pos="{x} 0 {z}" zaxis="{s} 0 {c}"><freejoint/>
    <geom type="box" size="0.2 0.15 0.1" mass="2" friction="0.5 0.005 0.0001"/></body>
</worldbody></mujoco>""".format(
    s=np.sin(INCLINE), c=np.cos(INCLINE), x=0.1 * np.sin(INCLINE), z=0.1 * np.cos(INCLINE)
)


@pytest.mark.slow
def test_compliant_box_sticks_on_incline_like_mujoco():
    """A box on a 20 degree incline below its friction angle (26.6 degrees): the default
    ``Compliant`` (regularised friction, ``slip = 1e-3``) creeps at 1.06 mm/s, no faster than
    MuJoCo C's soft friction (1.8 mm/s, pyramidal cones); the old ``slip = 1e-2`` crept
    10.6 mm/s. Measured from 0.5 s to 1 s (after settling)."""
    loaded = jaxdyn.load_mjcf(INCLINE_MJCF)
    cfg = loaded.sim_config(contact=sim.Compliant(), actuator=sim.Torque(dofs=()))
    tr = sim.rollout(loaded.model, sim.State(loaded.q0, jnp.zeros(6)), jnp.zeros((500, 0)), cfg=cfg)
    q = np.asarray(tr.q)
    rate = np.linalg.norm(q[-1, :3] - q[249, :3]) / 0.5
    xs = mujoco_rollout(mujoco.MjModel.from_xml_string(INCLINE_MJCF), 500)[0][:, :3]
    ref = np.linalg.norm(xs[-1] - xs[249]) / 0.5
    assert rate < ref and rate < 1.5e-3, (rate, ref)
    assert rate > 0  # regularised friction: it creeps, slowly


def test_interpenetrating_start_warns_and_unsupported_pair_is_refused():
    """Two free spheres loaded 5 cm into each other: a warning naming the pair; a pair the
    narrow phase does not have (a heightfield against a heightfield, as in MuJoCo) is refused
    by name (never dropped), loaded without it with ``ignore=('geom',)``."""
    xml = """<mujoco><worldbody>
      <body name="a" pos="0 0 1"><freejoint/><geom name="ga" type="sphere" size="0.1"/></body>
      <body name="b" pos="0.15 0 1"><freejoint/><geom name="gb" type="sphere" size="0.1"/></body>
    </worldbody></mujoco>"""
    with pytest.warns(UserWarning, match=r"'ga'-'gb' \(50 mm\)"):
        jaxdyn.load_mjcf(xml)
    bad = xml.replace(
        "<worldbody>",
        '<asset><hfield name="h" nrow="2" ncol="2" size="1 1 .1 .05" elevation="0 0 0 0"/>'
        '</asset><worldbody><geom name="hf" type="hfield" hfield="h"/>',
    ).replace('pos="0.15 0 1"', 'pos="0.5 0 1"')
    bad = bad.replace(
        'size="0.1"/></body>',
        'size="0.1"/><geom name="hh" type="hfield" hfield="h" pos="0 0 0.5"/></body>',
        1,
    )
    match = r'<geom name="hf" type="hfield">-<geom name="hh" type="hfield">.*jaxdyn.sim has no'
    with pytest.raises(ValueError, match=match):
        jaxdyn.load_mjcf(bad)
    geoms = jaxdyn.load_mjcf(bad, ignore=("geom",)).geoms
    pairs = {(geoms.names[a], geoms.names[b]) for a, b in geoms.pairs}
    assert pairs == {("hf", "ga"), ("hf", "gb"), ("ga", "gb"), ("hh", "gb")}


@pytest.fixture(scope="module")
def drop_scene():
    """A ball dropped onto a free crate resting on the floor (sphere-box between bodies, the
    crate's corners against the plane), ``Constraint``."""
    xml = REST_MJCF.replace('pos="1.02 0.01 0.25"', 'pos="1.02 0.01 0.27"')
    loaded = jaxdyn.load_mjcf(xml)
    cfg = loaded.sim_config(contact=sim.Constraint(soft=False), actuator=sim.Torque(dofs=()))
    return loaded, cfg


@pytest.fixture(scope="module")
def drop_steps(drop_scene):
    """``jax.jit(jax.vmap(step))`` of the drop scene over ``(q, v)`` for a configuration
    (compiled once per static configuration, shared by its tests)."""
    model = drop_scene[0].model
    step = lambda q, v, cfg: sim.step(model, sim.State(q, v), jnp.zeros(0), cfg)  # noqa: E731
    return jax.jit(jax.vmap(step, in_axes=(0, 0, None)))


def test_scene_steps_under_jit_vmap(drop_scene, drop_steps):
    """Several free bodies and static geometry step in one ``jax.jit(jax.vmap(step))``: a batch
    of four states equals the four steps taken one by one (to 1e-12)."""
    loaded, cfg = drop_scene
    model = loaded.model
    rng = np.random.default_rng(0)
    v = jnp.asarray(rng.standard_normal((4, model.nv)) * 0.5)
    q = jnp.broadcast_to(loaded.q0, (4, model.nq))
    one = jax.jit(lambda q, v: sim.step(model, sim.State(q, v), jnp.zeros(0), cfg))
    out = drop_steps(q, v, cfg)
    for i in range(4):
        s = one(q[i], v[i])
        np.testing.assert_allclose(np.asarray(out.q[i]), np.asarray(s.q), atol=1e-12)
        np.testing.assert_allclose(np.asarray(out.v[i]), np.asarray(s.v), atol=1e-12)


def test_constraint_max_contacts_equals_the_uncapped_solve(drop_scene, drop_steps):
    """``Constraint(max_contacts=k)`` solves over the ``k`` closest contact slots: with ``k``
    at least the candidates that ``sim.contact_counts`` counts (fewer than the scene's slots:
    the empty slots and the pairs whose bounding spheres are apart are left out), a step from
    four moving states equals the uncapped solve's to 1e-12; bad caps are refused."""
    loaded, cfg = drop_scene
    model = loaded.model
    rng = np.random.default_rng(1)
    v = jnp.asarray(rng.standard_normal((4, model.nv)) * 0.5)
    q = jnp.broadcast_to(loaded.q0, (4, model.nq))
    cand, touch = jax.jit(jax.vmap(lambda q, v: sim.contact_counts(model, sim.State(q, v), cfg)))(
        q, v
    )
    slots = jax.eval_shape(
        lambda s: sim.contact_forces(model, s, jnp.zeros(0), cfg), sim.State(q[0], v[0])
    ).shape[0]
    k = int(cand.max())
    assert 0 < int(touch.min()) and k < slots  # the cap leaves slots out, contacts touch

    full = drop_steps(q, v, cfg)
    capped = drop_steps(q, v, eqx.tree_at(lambda c: c.contact, cfg, sim.Constraint(max_contacts=k)))
    np.testing.assert_allclose(np.asarray(capped.q), np.asarray(full.q), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(capped.v), np.asarray(full.v), rtol=0, atol=1e-12)
    assert float(jnp.max(jnp.abs(full.v - v))) > 1e-3  # the contacts acted
    for bad in (0, True, 2.5):
        with pytest.raises(ValueError, match="max_contacts"):
            sim.Constraint(max_contacts=bad)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["constraint", "compliant", "capped"])
def test_contact_rich_gradient_matches_finite_differences(drop_scene, kind):
    """Reverse mode through 40 steps of a ball thrown onto a free crate resting on the floor
    (the ball lands on the crate at step ~20: body-body impact, then sliding contact; the
    crate's four corners on the floor throughout): finite, and the directional derivative in
    the ball's initial velocity matches central differences (Constraint: the implicit-function
    gradient of the cone complementarity, to 1e-4 relative)."""
    loaded, cfg = drop_scene
    model = loaded.model
    # the implicit-function gradient is the exact solution's: converged by 3 Newton steps (with
    # 100 APGD steps alone the stack's solve is 0.2 % off in this derivative)
    # capped: the solve over the 8 closest slots, fewer than the scene's 12 candidates (a
    # run-time choice of contacts: its indices carry no derivative, the chosen ones' values do)
    contact = {
        "compliant": sim.Compliant(),
        "constraint": sim.Constraint(soft=False, newton=3),
        "capped": sim.Constraint(soft=False, newton=3, max_contacts=8),
    }[kind]
    cfg = loaded.sim_config(contact=contact, actuator=sim.Torque(dofs=()))
    q0 = loaded.q0

    def loss(v_ball):
        v = jnp.zeros(model.nv).at[12:18].set(v_ball)
        tr = sim.rollout(model, sim.State(q0, v), jnp.zeros((40, 0)), cfg=cfg)
        return jnp.sum(tr.q[-1, 7:10] ** 2) + jnp.sum(tr.q[-1, 14:17] ** 2) + tr.v[-1, 15]

    vg = jax.jit(jax.value_and_grad(loss))
    v0 = jnp.array([0.3, -0.2, 0.1, 0.4, 0.1, -0.5])
    val, g = vg(v0)
    assert np.all(np.isfinite(np.asarray(g))) and float(jnp.max(jnp.abs(g))) > 1e-3
    d = jnp.asarray(np.random.default_rng(2).standard_normal(6))
    eps = 1e-6
    fd = (vg(v0 + eps * d)[0] - vg(v0 - eps * d)[0]) / (2 * eps)
    np.testing.assert_allclose(float(g @ d), float(fd), rtol=1e-4)


STACK_MJCF = """<mujoco><option timestep="0.002"/>
<asset><mesh name="cube" vertex="-.05 -.05 -.05  .05 -.05 -.05  -.05 .05 -.05  .05 .05 -.05
  -.05 -.05 .05  .05 -.05 .05  -.05 .05 .05  .05 .05 .05"/></asset>
<worldbody>
  <geom name="floor" type="plane" size="5 5 .1"/>
  <geom name="table" type="box" size="0.4 0.4 0.05" pos="0 0 0.05" contype="7" conaffinity="7"
    friction="0.5 0.005 0.0001"/>
  <body name="box1" pos="-0.15 0 0.2"><freejoint/>
    <geom name="box1" type="box" size="0.1 0.1 0.1" mass="2" friction="0.5 0.005 0.0001"/></body>
  <body name="box2" pos="-0.13 0.01 0.36"><freejoint/>
    <geom name="box2" type="box" size="0.08 0.07 0.06" mass="1"/></body>
  <body name="rod" pos="0.2 -0.2 0.13" euler="0 90 0"><freejoint/>
    <geom name="rod" type="capsule" size="0.03 0.1" mass="0.5" contype="2" conaffinity="2"/></body>
  <body name="die" pos="0.2 0.2 0.15"><freejoint/>
    <geom name="die" type="mesh" mesh="cube" mass="0.3" contype="4" conaffinity="4"/></body>
</worldbody></mujoco>"""


@pytest.fixture(scope="module")
def stack_scene():
    loaded = jaxdyn.load_mjcf(STACK_MJCF)
    cfg = loaded.sim_config(
        contact=sim.Constraint(soft=False, newton=3), actuator=sim.Torque(dofs=())
    )
    model = loaded.model
    run = jax.jit(lambda s, cfg: sim.rollout(model, s, jnp.zeros((REST_STEPS, 0)), cfg=cfg))
    return loaded, cfg, run


@pytest.mark.slow
def test_stack_box_capsule_mesh_rest_like_mujoco(stack_scene):
    """A stack of three boxes (a static table, a box on it, a smaller box on that: box-box
    face contacts, 4 of 8 slots each), a capsule lying on the table (capsule-box) and a convex
    mesh cube on it (box-mesh, its convex hull) come to rest at MuJoCo C's heights within 1 mm
    and at the geometric heights within 1e-6 m, without drift (1e-6 m over 200 steps)."""
    loaded, cfg, run = stack_scene
    assert set(loaded.geoms.type) == {"box", "capsule", "mesh"}
    tr = run(sim.State(loaded.q0, jnp.zeros(loaded.model.nv)), cfg)
    z = np.asarray(tr.q[:, 2::7])
    ref = _mujoco_heights(STACK_MJCF, REST_STEPS)
    np.testing.assert_allclose(z[-1], ref[-1], atol=1e-3)
    np.testing.assert_allclose(z[-1], [0.2, 0.36, 0.13, 0.15], atol=1e-6)
    assert np.abs(z[-1] - z[-200]).max() < 1e-6, z[-1] - z[-200]
    assert np.abs(np.asarray(tr.v[-1])).max() < 1e-4


@pytest.mark.slow
def test_box_sliding_on_a_box_stops_where_coulomb_says(stack_scene):
    """The lower box pushed along the table at 1 m/s (friction max(0.5, 0.5) on box-box; the
    upper box rides along, its friction of 1 holding it): it stops after ``v^2 / (2 mu g)``
    (0.102 m) within 2 %, as MuJoCo C's does within 5 % (soft contact)."""
    loaded, cfg, run = stack_scene
    v0 = jnp.zeros(loaded.model.nv).at[3].set(1.0).at[9].set(1.0)  # box1, box2: vx (body axes)
    tr = run(sim.State(loaded.q0, v0), cfg)
    d = float(tr.q[-1, 0] - loaded.q0[0])
    np.testing.assert_allclose(d, 1.0 / (2 * 0.5 * 9.81), rtol=2e-2)
    m = mujoco.MjModel.from_xml_string(STACK_MJCF)
    dm = mujoco.MjData(m)
    dm.qvel[0] = dm.qvel[6] = 1.0
    for _ in range(REST_STEPS):
        mujoco.mj_step(m, dm)
    np.testing.assert_allclose(dm.qpos[0] - (-0.15), 1.0 / (2 * 0.5 * 9.81), rtol=5e-2)


CHAIN_URDF = """<robot name="chain">
  <link name="base"><collision><geometry><box size="0.4 0.4 0.1"/></geometry></collision></link>
  <link name="l1"><inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01" izz="0.01"
      ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><origin xyz="0 0 0.2"/><geometry><capsule radius="0.05" length="0.3"/></geometry>
    </collision></link>
  <link name="l2"><inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01" izz="0.01"
      ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><origin xyz="0 0 0.2"/><geometry><sphere radius="0.06"/></geometry></collision>
  </link>
  <link name="tool"><collision><origin xyz="0 0 0.3"/><geometry><mesh filename="cube.obj"/>
    </geometry></collision></link>
  <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/><origin xyz="0 0 0.05"/>
    <axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="10" velocity="10"/></joint>
  <joint name="j2" type="revolute"><parent link="l1"/><child link="l2"/><origin xyz="0 0 0.4"/>
    <axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="10" velocity="10"/></joint>
  <joint name="t" type="fixed"><parent link="l2"/><child link="tool"/></joint>
</robot>"""
CUBE_OBJ = "\n".join(
    [f"v {x} {y} {z}" for x in (-0.05, 0.05) for y in (-0.05, 0.05) for z in (-0.05, 0.05)]
    + ["v 0 0 0"]  # a vertex inside: not convex as a vertex set
    + ["f 1 2 4", "f 1 4 3", "f 5 7 8", "f 5 8 6", "f 1 5 6", "f 1 6 2"]
    + ["f 3 4 8", "f 3 8 7", "f 1 3 7", "f 1 7 5", "f 2 6 8", "f 2 8 4"]
)


def test_urdf_collision_geoms(tmp_path):
    """URDF ``<collision>`` elements as geoms: a base box fixed to the world (a world geom), a
    capsule, a sphere and an OBJ mesh (its convex hull; a warning names it, as a vertex lies
    inside) on a link welded to the sphere's. Adjacent links are skipped (base-l1, l1-l2 and
    l1-tool: the tool is welded to l2), geoms of one body too (l2-tool); ``allow`` brings an
    adjacent pair back, ``deny`` removes one. The contact of the folded arm's sphere with the
    base box has MuJoCo's depth (the geometry by hand)."""
    (tmp_path / "chain.urdf").write_text(CHAIN_URDF)
    (tmp_path / "cube.obj").write_text(CUBE_OBJ)
    model = jaxdyn.load_urdf(str(tmp_path / "chain.urdf"))
    with pytest.warns(UserWarning, match=r"link 'tool' <collision> 0 \(cube.obj\): .*not convex"):
        g = sim.urdf_geoms(model, tmp_path / "chain.urdf")
    assert g.type == ("box", "capsule", "sphere", "mesh") and g.body[0] == -1
    assert _name_pairs(g.names, g.pairs) == {
        frozenset(("base/collision0", "l2/collision0")),
        frozenset(("base/collision0", "tool/collision0")),
    }
    assert np.asarray(g.hulls.value[3].vertices).shape == (8, 3)
    with pytest.warns(UserWarning, match="not convex"):
        g2 = sim.urdf_geoms(
            model, tmp_path / "chain.urdf", allow=[("base", "l1")], deny=[("base", "tool")]
        )
    assert _name_pairs(g2.names, g2.pairs) == {
        frozenset(("base/collision0", "l2/collision0")),
        frozenset(("base/collision0", "l1/collision0")),
    }
    # folded: l1 at 90 + 5.7 deg about y points along +x and slightly down, l2 folds back by a
    # further 174.3 deg, along -x: the sphere's centre at (0.4 cos 0.1 - 0.2, 0,
    # 0.05 - 0.4 sin 0.1), just inside the base box (half-sizes 0.2 0.2 0.05 at the origin),
    # 2 mm from its +x face: 62 mm deep along +x
    from jaxdyn.algorithms import kinematics as kin

    q = jnp.array([np.pi / 2 + 0.1, np.pi - 0.1])
    ws = kin.world_state(model, q)
    fr = jax.jit(lambda ws: g2.frames(ws, jnp.zeros(3), jnp.zeros((model.nb, 6))))(ws)
    R, p = g2.world_poses(ws, jnp.zeros(3))
    c = np.array([0.4 * np.cos(0.1) - 0.2, 0.0, 0.05 - 0.4 * np.sin(0.1)])
    np.testing.assert_allclose(np.asarray(p[2]), c, atol=1e-12)
    h = np.array([0.2, 0.2, 0.05])
    depth = -np.min(h - np.abs(c)) - 0.06
    # the sphere-box pair's slot (force +f on the arm's l2), after base-capsule's 3
    k = [i for i, b in enumerate(fr.body) if b == g2.body[2]][0]
    np.testing.assert_allclose(float(fr.distance[k]), depth, atol=1e-9)
    np.testing.assert_allclose(np.asarray(fr.normal[k]), [1.0, 0.0, 0.0], atol=1e-9)


# ------------------------------------------------------------------------------ heightfields
HF_ELEV = np.array(
    [
        [0.0, 0.2, 0.5, 0.1, 0.0, 0.3],
        [0.4, 1.0, 1.0, 1.0, 0.2, 0.0],
        [0.1, 1.0, 1.0, 1.0, 0.6, 0.1],
        [0.3, 1.0, 1.0, 1.0, 0.0, 0.5],
        [0.0, 0.4, 0.1, 0.7, 0.2, 0.0],
    ]
)
HF_MJCF = f"""<mujoco><option timestep="0.002"/><asset>
  <hfield name="h" nrow="5" ncol="6" size="0.5 0.4 0.1 0.05"
    elevation="{" ".join(map(str, HF_ELEV.ravel()))}"/></asset>
<worldbody><geom name="hf" type="hfield" hfield="h" euler="0 0 5"/>
  <body name="ball" pos="-0.1 0 0.3"><freejoint/><geom name="ball" size="0.05" mass="1"/></body>
  <body name="pebble" pos="0.3 -0.2 0.2"><freejoint/><geom name="pebble" size="0.03"/></body>
</worldbody></mujoco>"""


def _frames_fn(loaded):
    """Contact frames of ``loaded.geoms`` at a configuration (jitted)."""
    from jaxdyn.algorithms import kinematics as kin
    from jaxdyn.sim.core import _world

    def f(q):
        ws, origin = _world(loaded.model, q)
        vb, _ = kin.body_velocities(loaded.model, ws, jnp.zeros(loaded.model.nv))
        return loaded.geoms.frames(ws, origin, vb)

    return jax.jit(f)


def test_hfield_geoms_load_and_match_mujoco():
    """An MJCF ``hfield`` geom (elevation inline) loads as a geom of ``loaded.geoms`` with
    MuJoCo's heights (normalised data times the elevation, rows from +y down); at random
    poses of the two balls the contacts of each pair have MuJoCo's deepest distance
    (mj_collision, EPA converged: to 1e-8)."""
    loaded = jaxdyn.load_mjcf(HF_MJCF)
    g = loaded.geoms
    assert g.type == ("hfield", "sphere", "sphere") and not loaded.contacts
    names = {(g.names[a], g.names[b]) for a, b in g.pairs}
    assert names == {("hf", "ball"), ("hf", "pebble"), ("ball", "pebble")}
    hf = g.hulls.value[0]
    # MuJoCo's layout: the first row given is the last (+y) grid row; data stored in float32
    np.testing.assert_allclose(np.asarray(hf.heights), np.flipud(HF_ELEV) * 0.1, atol=1e-8)
    m = mujoco.MjModel.from_xml_string(HF_MJCF)
    m.opt.ccd_tolerance, m.opt.ccd_iterations = 1e-12, 2000  # EPA converged
    d = mujoco.MjData(m)
    frames = _frames_fn(loaded)
    rng = np.random.default_rng(4)
    hits = 0
    for _ in range(8):
        q = np.array(loaded.q0)
        q[0:3] = [rng.uniform(-0.4, 0.4), rng.uniform(-0.3, 0.3), rng.uniform(0.02, 0.14)]
        q[7:10] = [rng.uniform(-0.4, 0.4), rng.uniform(-0.3, 0.3), rng.uniform(0.0, 0.12)]
        d.qpos[:] = q  # jaxdyn's q is MuJoCo's qpos
        mujoco.mj_forward(m, d)
        fr = frames(jnp.asarray(q))
        dist = np.asarray(fr.distance)
        other = np.asarray(fr.other)
        body = np.asarray(fr.body)
        for bname in ("ball", "pebble"):
            gid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, bname)
            mj = [c.dist for c in d.contact[: d.ncon] if {c.geom1, c.geom2} == {0, gid}]
            b = loaded.model.topo.body_names.index(bname)
            mine = dist[(other == -1) & (body == b)]
            if mj:
                hits += 1
                assert abs(mine.min() - min(mj)) < 1e-8, (bname, mine, mj)
            else:
                assert mine.min() > -1e-10
    assert hits >= 6


def _png_gray(path, img):
    """Write ``img`` (rows, cols) uint8 as a greyscale PNG (zlib, no dependency)."""
    import struct
    import zlib

    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    rows, cols = img.shape
    raw = b"".join(b"\x00" + bytes(r) for r in img.astype(np.uint8))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", cols, rows, 8, 0, 0, 0, 0))
    path.write_bytes(png + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_hfield_from_png_inside_the_model_directory(tmp_path):
    """An ``hfield`` read from a PNG file next to the model (the untrusted loader hands it to
    MuJoCo itself, reading nothing outside the directory): heights are the grey levels,
    normalised to [0, 1] and scaled by the elevation, the image's top row at +y (MuJoCo's
    convention). A path that leaves the directory is refused (see test_mjcf)."""
    img = np.array([[0, 50, 100, 150], [200, 250, 10, 20], [30, 40, 60, 255]])
    _png_gray(tmp_path / "terrain.png", img)
    (tmp_path / "scene.xml").write_text(
        '<mujoco><asset><hfield name="t" file="terrain.png" size="1 1 0.4 0.1"/></asset>'
        '<worldbody><geom type="hfield" hfield="t"/><body pos="0 0 1"><freejoint/>'
        '<geom size="0.1"/></body></worldbody></mujoco>'
    )
    hf = jaxdyn.load_mjcf(tmp_path / "scene.xml").geoms.hulls.value[0]
    want = np.flipud(img) / 255.0 * 0.4
    np.testing.assert_allclose(np.asarray(hf.heights), want, atol=1e-6)


@pytest.mark.slow  # 40 s of compile; default: test_hfield_geoms_load_and_match_mujoco
def test_ball_dropped_on_hfield_rests_at_the_surface():
    """A ball dropped from 0.3 m onto the plateau of a bumpy heightfield (``Constraint``,
    3 Newton steps): comes to rest with its bottom on the surface (plateau 0.1 m) to 1e-8 m;
    MuJoCo C's soft contact within 1 mm of it."""
    xml = HF_MJCF.replace('euler="0 0 5"', "").replace('pos="0.3 -0.2 0.2"', 'pos="0.3 -0.2 0.5"')
    loaded = jaxdyn.load_mjcf(xml)
    cfg = loaded.sim_config(contact=sim.Constraint(soft=False, newton=3))
    model = loaded.model
    n = 600
    tr = jax.jit(
        lambda q: sim.rollout(model, sim.State(q, jnp.zeros(model.nv)), jnp.zeros((n, 0)), cfg=cfg)
    )(loaded.q0)
    z = np.asarray(tr.q[:, 2])
    assert z.min() > 0.15 - 1e-3  # no tunnelling
    np.testing.assert_allclose(z[-100:], 0.15, atol=1e-8)
    np.testing.assert_allclose(np.asarray(tr.q[-1, :2]), [-0.1, 0.0], atol=1e-8)
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_step(m, d, n)
    assert abs(d.qpos[2] - 0.15) < 1e-3


# ------------------------------------------------------------------------ contact parameters
PARAM_MJCF = """<mujoco><option timestep="0.002"/>
<default><default class="soft"><geom solref="0.03 0.8" solmix="3"/></default></default>
<worldbody>
  <geom name="floor" type="plane" size="5 5 .1" margin="0.004"/>
  <body name="a" pos="0 0 0.3"><freejoint/>
    <geom name="a" size="0.1" margin="0.02" gap="0.01" mass="1"/></body>
  <body name="b" pos="0.3 0 0.3"><freejoint/>
    <geom name="b" size="0.05" margin="0.01" class="soft" mass="0.5"/></body>
  <body name="c" pos="-0.3 0 0.3"><freejoint/>
    <geom name="c" type="box" size="0.05 0.06 0.04" solref="0.05 1.2" mass="0.5"/></body>
</worldbody></mujoco>"""


@pytest.fixture(scope="module")
def param_scene():
    loaded = jaxdyn.load_mjcf(PARAM_MJCF)
    return loaded, _frames_fn(loaded)


def test_margin_gap_solref_match_mujoco(param_scene):
    """Per-geom ``margin`` / ``solref`` / ``solmix`` (a ``<default>`` class too), against
    MuJoCo 4.0's contacts at random poses: every pair MuJoCo reports has jaxdyn's distance
    ``dist - margin`` (the two geoms' margins summed: MuJoCo's ``dist - includemargin``, to
    1e-12), acting (``< 0``) exactly where MuJoCo's contact is not excluded (MuJoCo's ``gap``
    only adds excluded contacts up to ``margin + gap``), and MuJoCo's mixed ``solref``; no
    other pair is closer than its margin. Geoms with contact parameters against the ground
    are geom pairs, not primitives."""
    loaded, frames = param_scene
    assert not loaded.contacts and loaded.geoms.margin is not None
    m = mujoco.MjModel.from_xml_string(PARAM_MJCF)
    d = mujoco.MjData(m)
    names = loaded.model.topo.body_names
    rng = np.random.default_rng(7)
    seen = {"act": 0, "gap": 0}
    for _ in range(12):
        q = np.array(loaded.q0)
        for k in range(3):
            q[7 * k : 7 * k + 3] = rng.uniform(-0.12, 0.12, 3) * [1, 1, 0] + [
                0.14 * (k - 1),
                0,
                0.06 + 0.05 * rng.uniform(),
            ]
            qq = rng.normal(size=4)
            q[7 * k + 3 : 7 * k + 7] = qq / np.linalg.norm(qq)
        d.qpos[:] = q
        mujoco.mj_forward(m, d)
        fr = frames(jnp.asarray(q))
        dist, sref = np.asarray(fr.distance), np.asarray(fr.solref)
        body, other = np.asarray(fr.body), np.asarray(fr.other)
        mj = {}
        for c in d.contact[: d.ncon]:
            key = frozenset(int(m.geom_bodyid[g]) - 1 for g in (c.geom1, c.geom2))
            mj.setdefault(key, []).append(c)
        for key in {frozenset((int(b), int(o))) for b, o in zip(body, other, strict=True)}:
            sel = np.array([frozenset((b, o)) == key for b, o in zip(body, other, strict=True)])
            mine = dist[sel]
            if key not in mj:
                assert mine.min() > 0, ([names[b] for b in key if b >= 0], mine.min())
                continue
            cs = mj[key]
            active = any(not c.exclude for c in cs)
            seen["act" if active else "gap"] += 1
            if not active:  # in the gap: no force in MuJoCo, none in jaxdyn (may be masked)
                assert mine.min() > 0
                continue
            want = min(c.dist - c.includemargin for c in cs)
            assert abs(mine.min() - want) < 1e-12, (key, mine.min(), want)
            np.testing.assert_allclose(sref[sel][0], cs[0].solref, atol=1e-15)
    assert seen["act"] > 5 and seen["gap"] >= 1


def test_solref_gives_compliant_gains_and_constraint_baumgarte(param_scene):
    """Each contact's mixed ``solref`` (``ContactFrames.solref``) sets ``Compliant``'s
    per-contact gains ``k = m / (timeconst dampratio)^2``, ``c = 2 m / timeconst`` (a number
    given to ``Compliant`` overrides it) and ``Constraint``'s Baumgarte fraction
    ``dt / timeconst`` (the impulse that removes a resting penetration ``d`` with a unit
    Delassus matrix is ``-beta d / dt``)."""
    from jaxdyn.sim.contact import contact_mass, solve_contact_impulses

    loaded, frames = param_scene
    q = np.array(loaded.q0)
    q[2], q[9], q[16] = 0.09, 0.04, 0.03  # every ball into the floor
    fr = frames(jnp.asarray(q))
    sref = np.asarray(fr.solref)
    model = loaded.model
    m = np.asarray(contact_mass(model, fr.body, fr.other))
    k, c = sim.Compliant().gains(model, jnp.float64, fr.body, fr.other, fr.solref)
    np.testing.assert_allclose(np.asarray(k), m / (sref[:, 0] * sref[:, 1]) ** 2, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(c), 2 * m / sref[:, 0], rtol=1e-14)
    assert len(set(np.round(sref[:, 0], 12))) == 3  # three different mixes
    k2, _ = sim.Compliant(timeconst=0.05).gains(model, jnp.float64, fr.body, fr.other, fr.solref)
    np.testing.assert_allclose(np.asarray(k2), m / (0.05 * sref[:, 1]) ** 2, rtol=1e-14)
    hit = np.asarray(fr.distance) < 0
    n = int(hit.sum())
    sub = type(fr)(
        fr.distance[hit], fr.normal[hit], fr.point[hit], fr.velocity[hit], None,
        tuple(int(b) for b in np.asarray(fr.body)[hit]),
        tuple(int(o) for o in np.asarray(fr.other)[hit]), solref=fr.solref[hit],
    )  # fmt: skip
    dt = 0.002
    lam = solve_contact_impulses(
        sim.Constraint(iterations=3), jnp.eye(3 * n), sub, jnp.zeros((n, 3)), dt
    )
    beta = dt / sref[hit, 0]
    np.testing.assert_allclose(
        np.asarray(lam[:, 0]), -beta * np.asarray(fr.distance)[hit] / dt, rtol=1e-5
    )


@pytest.mark.parametrize(
    "attr, key",
    [('solimp="0.8 0.9 0.01"', "solimp"), ('solref="-1000 -10"', "solref")],
)
def test_unhonoured_contact_parameters_refused_by_sim_config(attr, key):
    """``solimp`` off MuJoCo's default (an impedance jaxdyn's contact models do not have) and
    ``solref`` in the direct (negative) form: ``sim_config`` refuses them naming the geom and
    the key; ``ignore=(key,)`` simulates without them (``loaded.geoms`` keeps them: the
    contacts of the configuration get MuJoCo's defaults)."""
    xml = PARAM_MJCF.replace('<geom name="b" size="0.05"', f'<geom name="b" {attr} size="0.05"')
    loaded = jaxdyn.load_mjcf(xml)
    with pytest.raises(ValueError, match=rf'\[{key}\] <geom name="b" type="sphere">'):
        loaded.sim_config(contact=sim.Compliant())
    cfg = loaded.sim_config(contact=sim.Compliant(), ignore=(key,))
    assert getattr(loaded.geoms, key) is not None and cfg.geoms.solimp is None
    assert np.all(np.asarray(cfg.geoms.solref) > 0)
    assert loaded.sim_config().contact is None  # without contact: nothing to refuse


@pytest.mark.slow  # 30 s of compile; default: test_margin_gap_solref_match_mujoco
def test_ball_with_margin_rests_at_the_margin():
    """A ball with ``margin="0.01"`` dropped on the floor (``Constraint``, 3 Newton steps):
    rests 1 cm above it (MuJoCo's contact acts below the margin), to 1e-8 m; MuJoCo C's ball
    within 1 mm of that height."""
    xml = """<mujoco><option timestep="0.002"/><worldbody>
      <geom name="floor" type="plane" size="5 5 .1"/>
      <body name="a" pos="0 0 0.2"><freejoint/><geom name="a" size="0.1" margin="0.01"/></body>
    </worldbody></mujoco>"""
    loaded = jaxdyn.load_mjcf(xml)
    assert not loaded.contacts  # a geom pair: it carries its margin
    cfg = loaded.sim_config(contact=sim.Constraint(soft=False, newton=3))
    model = loaded.model
    tr = jax.jit(
        lambda q: sim.rollout(model, sim.State(q, jnp.zeros(6)), jnp.zeros((400, 0)), cfg=cfg)
    )(loaded.q0)
    np.testing.assert_allclose(np.asarray(tr.q[-50:, 2]), 0.11, atol=1e-8)
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_step(m, d, 400)
    assert abs(d.qpos[2] - 0.11) < 1e-3


@pytest.mark.slow  # 70 s of compile (161 geom pairs); default: test_margin_gap_solref_match_mujoco
def test_self_colliding_humanoid_falls_limp_without_interpenetrating():
    """dm_control's humanoid (20 capsules and spheres on 16 bodies, self-collision on: 161
    geom pairs after MuJoCo's filters, the floor included) falls limp for 1.5 s from ``qpos0``
    (its ``solref`` 0.015 per contact, ``solimp`` refused by name and ignored; ``Compliant``,
    the ``"implicit"`` integrator at its 5 ms step), beside MuJoCo C: no geom pair of either
    interpenetrates deeper than 15 mm (deepest: jaxdyn 9.6 mm, MuJoCo 12.2 mm),
    limbs touch each other and the floor, and the fall ends low."""
    import dm_control

    path = str(Path(dm_control.__file__).parent / "suite" / "humanoid.xml")
    loaded = jaxdyn.load_mjcf(path)
    assert loaded.geoms.n == 20 and len(loaded.geoms.pairs) == 161
    with pytest.raises(ValueError, match="solimp"):
        loaded.sim_config(contact=sim.Compliant())
    cfg = loaded.sim_config(contact=sim.Compliant(), ignore=("solimp",), integrator="implicit")
    model, n = loaded.model, 300
    ctrl = jnp.zeros((n, len(loaded.actuators)))
    tr = jax.jit(lambda q: sim.rollout(model, sim.State(q, jnp.zeros(model.nv)), ctrl, cfg=cfg))(
        loaded.q0
    )
    dist = np.asarray(jax.jit(jax.vmap(_frames_fn(loaded)))(tr.q).distance)  # (n, slots)
    fr = _frames_fn(loaded)(loaded.q0)
    floor = np.asarray(fr.other) < 0
    worst = -dist.min()
    assert worst < 0.015, worst
    assert dist[:, ~floor].min() < 0 and dist[:, floor].min() < 0  # self and floor contacts
    assert float(tr.q[-1, 2]) < 0.6  # the torso came down
    m = mujoco.MjModel.from_xml_path(path)
    d = mujoco.MjData(m)
    worst_mj = 0.0
    for _ in range(n):
        mujoco.mj_step(m, d)
        if d.ncon:
            worst_mj = max(worst_mj, -min(c.dist for c in d.contact[: d.ncon]))
    assert worst_mj < 0.015, worst_mj


# 2 x 60 s of compile; default: test_constraint_max_contacts_equals_the_uncapped_solve
@pytest.mark.slow
def test_self_colliding_humanoid_falls_with_capped_constraint():
    """The humanoid of the test above with ``Constraint(max_contacts=64)`` (the 64 closest of
    its 277 contact slots): 300 steps of a limp fall from ``qpos0`` follow the uncapped
    ``Constraint`` while no more than 64 slots hold a candidate (``sim.contact_counts``; to
    1e-9 over the first 60 steps, in float64), and the whole fall, as the uncapped one and
    MuJoCo's, ends low without a geom pair interpenetrating deeper than 15 mm."""
    import dm_control

    path = str(Path(dm_control.__file__).parent / "suite" / "humanoid.xml")
    loaded = jaxdyn.load_mjcf(path)
    model, n, k = loaded.model, 300, 64
    ctrl = jnp.zeros((n, len(loaded.actuators)))

    def fall(contact, steps):
        cfg = loaded.sim_config(contact=contact, ignore=("solimp",))
        s = sim.State(loaded.q0, jnp.zeros(model.nv))
        return cfg, jax.jit(lambda s: sim.rollout(model, s, ctrl[:steps], cfg=cfg))(s)

    cfg, tr = fall(sim.Constraint(soft=False, max_contacts=k), n)
    _, full = fall(sim.Constraint(soft=False), 60)
    counts = jax.vmap(lambda q, v: sim.contact_counts(model, sim.State(q, v), cfg))
    cand = np.asarray(jax.jit(counts)(tr.q, tr.v)[0])
    m = min(int(np.argmax(cand > k)) if np.any(cand > k) else n, 60)
    assert m > 30, cand  # the steps after the first state of more candidates than k may differ
    np.testing.assert_allclose(np.asarray(tr.q[:m]), np.asarray(full.q[:m]), atol=1e-9)
    dist = np.asarray(jax.jit(jax.vmap(_frames_fn(loaded)))(tr.q).distance)
    assert -dist.min() < 0.015, -dist.min()
    assert float(tr.q[-1, 2]) < 0.6  # the torso came down


PRIORITY_MJCF = """<mujoco><worldbody>
  <geom name="floor" type="plane" size="5 5 .1" friction="0.3" solref="0.05 1.5" priority="1"/>
  <body name="a" pos="0 0 0.099"><freejoint/>
    <geom name="a" size="0.1" friction="0.9" solref="0.01 0.5" condim="1"/></body>
  <body name="b" pos="1 0 0.099"><freejoint/>
    <geom name="b" size="0.1" friction="0.9" solref="0.01 0.5" condim="1" priority="2"/></body>
  <body name="c" pos="2 0 0.099"><freejoint/>
    <geom name="c" size="0.1" friction="0.9" solref="0.01 0.5" solmix="3" priority="1"/></body>
  <body name="d" pos="2 0 0.298"><freejoint/>
    <geom name="d" size="0.1" friction="0.5" solref="0.03 0.9" priority="3"/></body>
</worldbody></mujoco>"""


def test_geom_priority_picks_the_pairs_parameters_as_mujoco():
    """MJCF geom ``priority``: a pair whose geoms' priorities differ takes friction, condim
    and solref from the geom of higher priority (the floor's 0.3 and solref for ``a``, whose
    own condim 1 is overridden; ``b``'s condim 1 makes its floor contact frictionless; ``d``
    gives its pair with ``c`` its own friction 0.5, below ``c``'s 0.9); equal priorities
    combine (``c`` on the floor: friction max, solref mixed by solmix 3:1). Each contact's
    friction and solref equal MuJoCo's ``mj_collision`` contacts (``friction[0]``, 0 where
    the contact's ``dim`` is 1)."""
    with pytest.warns(UserWarning, match="interpenetrate"):  # resting 1 mm deep
        loaded = jaxdyn.load_mjcf(PRIORITY_MJCF)
    assert not loaded.contacts and loaded.geoms.priority is not None
    fr = _frames_fn(loaded)(loaded.q0)
    m = mujoco.MjModel.from_xml_string(PRIORITY_MJCF)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    assert d.ncon == 4
    dist, mu, sref = (np.asarray(x) for x in (fr.distance, fr.friction, fr.solref))
    for c in d.contact[: d.ncon]:
        key = {int(m.geom_bodyid[g]) - 1 for g in (c.geom1, c.geom2)}
        sel = np.array([{b, o} == key for b, o in zip(fr.body, fr.other, strict=True)])
        sel &= dist < 0
        assert sel.any(), key
        want_mu = c.friction[0] if c.dim > 1 else 0.0
        np.testing.assert_allclose(mu[sel], want_mu, atol=1e-15)
        np.testing.assert_allclose(sref[sel], np.broadcast_to(c.solref, sref[sel].shape),
                                   atol=1e-15)  # fmt: skip
    # the four cases above are the four MuJoCo answers
    got = sorted((float(c.friction[0]) * (c.dim > 1), *map(float, c.solref))
                 for c in d.contact[: d.ncon])  # fmt: skip
    np.testing.assert_allclose(got, [(0.0, 0.01, 0.5), (0.3, 0.05, 1.5), (0.5, 0.03, 0.9),
                                     (0.9, 0.02, 0.75)], atol=1e-12)  # fmt: skip


def test_override_flag_sets_every_pair_margin_and_solref():
    """``<option o_margin o_solref><flag override="enable"/>``: every pair's margin and solref
    are the option's (MuJoCo's ``mj_assignMargin`` / ``mj_assignRef``), whatever the geoms
    say: jaxdyn's distance is MuJoCo's ``dist - includemargin`` and its solref MuJoCo's."""
    xml = """<mujoco><option o_margin="0.03" o_solref="0.04 0.7"><flag override="enable"/>
      </option><worldbody><geom name="floor" type="plane" size="5 5 .1" margin="0.1"/>
      <body name="a" pos="0 0 0.12"><freejoint/><geom name="a" size="0.1" solref="0.01 2"/>
      </body></worldbody></mujoco>"""
    loaded = jaxdyn.load_mjcf(xml)
    fr = _frames_fn(loaded)(loaded.q0)
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    c = d.contact[0]
    assert d.ncon == 1 and abs(c.includemargin - 0.03) < 1e-15
    np.testing.assert_allclose(float(fr.distance.min()), c.dist - c.includemargin, atol=1e-12)
    np.testing.assert_allclose(np.asarray(fr.solref)[0], c.solref, atol=1e-15)

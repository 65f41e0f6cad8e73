"""Contact between any bodies (issue 56): collision geoms from MJCF files, MuJoCo's pair
filters, body-body contacts in both contact models, checked against MuJoCo C on the same
scenes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import sim

mujoco = pytest.importorskip("mujoco")

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


def test_pairs_follow_mujoco_filters():
    """The pairs of a loaded MJCF (primitives against the ground plane and the geom pairs) are
    exactly those MuJoCo's collision detection finds when every geom overlaps every other:
    contype / conaffinity, an ``<exclude>``, geoms of one body, a parent and its child (b-a,
    c-b) skipped, a grandchild (c-a) and the world's children kept, two static geoms never."""
    loaded = jaxdyn.load_mjcf(FILTER_MJCF)
    m = loaded.mj_model
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    names = jaxdyn.model.mjcf.mujoco_names(m, "geom")
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
    contact = sim.Constraint(newton=3)
    cfg = loaded.sim_config(contact=contact, actuator=sim.Torque(dofs=()))
    model = loaded.model
    run = jax.jit(lambda s, cfg: sim.rollout(model, s, jnp.zeros((REST_STEPS, 0)), cfg=cfg))
    return loaded, cfg, run


def _mujoco_heights(xml, steps):
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    out = []
    for _ in range(steps):
        mujoco.mj_step(m, d)
        out.append(d.qpos[2::7].copy())
    return np.asarray(out)


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
    m = mujoco.MjModel.from_xml_string(INCLINE_MJCF)
    d = mujoco.MjData(m)
    xs = []
    for _ in range(500):
        mujoco.mj_step(m, d)
        xs.append(d.qpos[:3].copy())
    ref = np.linalg.norm(xs[-1] - xs[249]) / 0.5
    assert rate < ref and rate < 1.5e-3, (rate, ref)
    assert rate > 0  # regularised friction: it creeps, slowly


def test_interpenetrating_start_warns_and_unsupported_pair_is_refused():
    """Two free spheres loaded 5 cm into each other: a warning naming the pair; a pair the
    narrow phase does not have is refused by name (never dropped), loaded without contact
    geometry with ``ignore=('geom',)``."""
    xml = """<mujoco><worldbody>
      <body name="a" pos="0 0 1"><freejoint/><geom name="ga" type="sphere" size="0.1"/></body>
      <body name="b" pos="0.15 0 1"><freejoint/><geom name="gb" type="sphere" size="0.1"/></body>
    </worldbody></mujoco>"""
    with pytest.warns(UserWarning, match=r"'ga'-'gb' \(50 mm\)"):
        jaxdyn.load_mjcf(xml)
    bad = (
        xml.replace(
            'type="sphere" size="0.1"/></body>\n      <body name="b"',
            'type="sphere" size="0.1"/></body>\n      <body name="b"',
        )
        .replace(
            '<geom name="gb" type="sphere" size="0.1"/>', '<geom name="gb" type="mesh" mesh="m"/>'
        )
        .replace(
            "<worldbody>",
            '<asset><mesh name="m" vertex="0 0 0 1 0 0 0 1 0 0 0 1"/></asset><worldbody>',
        )
    )
    with pytest.raises(
        ValueError, match=r'<geom name="ga" type="sphere">-<geom name="gb" type="mesh">'
    ):
        jaxdyn.load_mjcf(bad)
    assert jaxdyn.load_mjcf(bad, ignore=("geom",)).geoms is None


@pytest.fixture(scope="module")
def drop_scene():
    """A ball dropped onto a free crate resting on the floor (sphere-box between bodies, the
    crate's corners against the plane), ``Constraint``."""
    xml = REST_MJCF.replace('pos="1.02 0.01 0.25"', 'pos="1.02 0.01 0.27"')
    loaded = jaxdyn.load_mjcf(xml)
    cfg = loaded.sim_config(contact=sim.Constraint(), actuator=sim.Torque(dofs=()))
    return loaded, cfg


def test_scene_steps_under_jit_vmap(drop_scene):
    """Several free bodies and static geometry step in one ``jax.jit(jax.vmap(step))``: a batch
    of four states equals the four steps taken one by one (to 1e-12)."""
    loaded, cfg = drop_scene
    model = loaded.model
    rng = np.random.default_rng(0)
    v = jnp.asarray(rng.standard_normal((4, model.nv)) * 0.5)
    q = jnp.broadcast_to(loaded.q0, (4, model.nq))
    one = jax.jit(lambda q, v: sim.step(model, sim.State(q, v), jnp.zeros(0), cfg))
    many = jax.jit(jax.vmap(lambda q, v: sim.step(model, sim.State(q, v), jnp.zeros(0), cfg)))
    out = many(q, v)
    for i in range(4):
        s = one(q[i], v[i])
        np.testing.assert_allclose(np.asarray(out.q[i]), np.asarray(s.q), atol=1e-12)
        np.testing.assert_allclose(np.asarray(out.v[i]), np.asarray(s.v), atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["constraint", "compliant"])
def test_contact_rich_gradient_matches_finite_differences(drop_scene, kind):
    """Reverse mode through 40 steps of a ball thrown onto a free crate resting on the floor
    (the ball lands on the crate at step ~20: body-body impact, then sliding contact; the
    crate's four corners on the floor throughout): finite, and the directional derivative in
    the ball's initial velocity matches central differences (Constraint: the implicit-function
    gradient of the cone complementarity, to 1e-4 relative)."""
    loaded, cfg = drop_scene
    model = loaded.model
    if kind == "compliant":
        cfg = loaded.sim_config(contact=sim.Compliant(), actuator=sim.Torque(dofs=()))
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

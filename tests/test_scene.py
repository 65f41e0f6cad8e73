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

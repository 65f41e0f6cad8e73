"""MJCF explicit contact pairs (``<contact><pair>``, issue 56): MuJoCo collides them whatever
its filters say (``contype`` / ``conaffinity``, ``<exclude>``), with their own ``condim``,
``friction``, ``solref``, ``solreffriction``, ``solimp`` and ``margin``, and each replaces the
dynamic pair of its two geoms (``mj_collision`` merges the predefined pairs and skips the
broad phase's duplicates, ``mj_collideGeomPair``). Checked against MuJoCo C's contacts
(``mj_collision``) and its rollout with ``Constraint(soft=True)``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import sim

mujoco = pytest.importorskip("mujoco")

from _mujoco_ref import mujoco_rollout  # noqa: E402

# a box pushed to slide on the floor through its explicit pair (its own friction, solref,
# solimp, solreffriction and margin; it replaces the dynamic box-floor pair), a ball on the box
# (the bodies are <exclude>d: only the pair, with its own friction, makes them touch) and a rod
# that collides with nothing (contype = conaffinity = 0) but the floor, through a frictionless
# (condim 1) pair
PAIR_MJCF = """<mujoco><option timestep="0.002" cone="{cone}" tolerance="1e-14" iterations="1000"/>
<worldbody><geom name="floor" type="plane" size="5 5 .1" friction="0.5"/>
<body name="box" pos="0 0 0.0526"><freejoint/>
  <geom name="box" type="box" size="0.1 0.1 0.05" mass="1"/></body>
<body name="ball" pos="0.02 0 0.1426"><freejoint/>
  <geom name="ball" size="0.04" mass="0.2" solref="0.01 1"/></body>
<body name="rod" pos="0.6 0 0.0336"><freejoint/>
  <geom name="rod" type="capsule" size="0.03 0.1" euler="0 88 0" mass="0.3"
        contype="0" conaffinity="0"/></body>
</worldbody>
<contact><exclude body1="box" body2="ball"/>
  <pair geom1="box" geom2="floor" friction="0.3 0.3" solref="0.03 0.8" margin="0.003"
        solimp="0.8 0.95 0.002 0.4 3" solreffriction="0.1 1"/>
  <pair geom1="ball" geom2="box" friction="0.8 0.8"/>
  <pair geom1="rod" geom2="floor" condim="1" solref="-5000 -60"/>
</contact></mujoco>"""
PUSH = np.r_[1.0, 0.2, 0.0, 0.0, 0.0, 0.0, np.zeros(12)]  # the box's MuJoCo qvel
STEPS = 60


@pytest.fixture(scope="module")
def loaded():
    return jaxdyn.load_mjcf(PAIR_MJCF.format(cone="elliptic"))


def _frames(loaded, cfg):
    """The geom pairs' contact frames of ``cfg.geoms`` at a configuration (jitted)."""
    from jaxdyn.algorithms import kinematics as kin
    from jaxdyn.sim.core import _world

    def f(q):
        ws, origin = _world(loaded.model, q)
        vb, _ = kin.body_velocities(loaded.model, ws, jnp.zeros(loaded.model.nv))
        return cfg.geoms.frames(ws, origin, vb)

    return jax.jit(f)


def test_pairs_load_as_geoms_with_their_parameters(loaded):
    """Every explicit pair is a pair of ``Geoms`` (the rod and the box are no primitives of
    the floor: their contact with it is their pair's), with MuJoCo's compiled ``pair_*``
    values; the dynamic box-floor and ball-box pairs are gone (replaced, excluded)."""
    g = loaded.geoms
    assert not loaded.contacts and g.explicit is not None and len(g.explicit) == 3
    m = loaded.mj_model
    names = [tuple(sorted((g.names[g.pairs[k][0]], g.names[g.pairs[k][1]]))) for k in g.explicit]
    geom = lambda i: mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, i)  # noqa: E731
    mj = [tuple(sorted((geom(m.pair_geom1[i]), geom(m.pair_geom2[i])))) for i in loaded.pair_ids]
    assert names == mj and sorted(loaded.pair_ids) == [0, 1, 2]  # MuJoCo's order: by bodies
    assert sorted(names) == [("ball", "box"), ("box", "floor"), ("floor", "rod")]
    every = sorted(tuple(sorted((g.names[a], g.names[b]))) for a, b in g.pairs)
    assert every == sorted([*names, ("ball", "floor")])  # one pair each, the ball's dynamic
    row = {pr: j for j, pr in enumerate(names)}
    box, ball, rod = row[("box", "floor")], row[("ball", "box")], row[("floor", "rod")]
    assert [g.pair_condim[j] for j in (box, ball, rod)] == [3, 3, 1]
    np.testing.assert_array_equal(np.asarray(g.pair_friction)[[box, ball, rod]], [0.3, 0.8, 1])
    np.testing.assert_array_equal(np.asarray(g.pair_margin)[[box, ball, rod]], [0.003, 0, 0])
    np.testing.assert_array_equal(np.asarray(g.pair_solreffriction)[box], [0.1, 1.0])
    # what only soft contact honours is refused by name for the others
    refused = (
        r'(?s)\[solimp\] <pair geom1="floor" geom2="box">.*'
        r'\[solref\] <pair geom1="floor" geom2="rod">.*\[solreffriction\]'
    )
    with pytest.raises(ValueError, match=refused):
        loaded.sim_config(sim.Constraint(soft=False))
    hard = loaded.sim_config(sim.Compliant(), ignore=("solimp", "solref", "solreffriction"))
    fr = _frames(loaded, hard)(jnp.asarray(loaded.q0))
    box = np.array([b == 0 and o == -1 for b, o in zip(fr.body, fr.other, strict=True)])
    np.testing.assert_allclose(np.asarray(fr.solref)[box], [[0.03, 0.8]] * box.sum())
    np.testing.assert_allclose(np.asarray(fr.friction)[box], 0.3)
    rod = np.array([b == 2 for b in fr.body])
    np.testing.assert_allclose(np.asarray(fr.solref)[rod], [[0.02, 1.0]] * rod.sum())  # default
    np.testing.assert_allclose(np.asarray(fr.friction)[rod], 0.0)  # condim 1


def test_pair_contacts_are_mujocos(loaded):
    """At disturbed poses (every body a little into what it rests on), jaxdyn's acting slots
    are MuJoCo's ``mj_collision`` contacts one for one (no duplicate of a replaced pair): the
    same distance ``dist - includemargin`` (the box's pair margin), point and normal (1e-12),
    friction (0 for the condim-1 rod), ``solref``, ``solimp`` and ``solreffriction``."""
    cfg = loaded.sim_config(sim.Constraint(soft=True))
    frames = _frames(loaded, cfg)
    m = loaded.mj_model
    d = mujoco.MjData(m)
    rng = np.random.default_rng(3)
    for _ in range(3):
        q = np.array(loaded.q0)
        down = rng.uniform(0.002, 0.004, 3)  # the box, the ball into the box, the rod
        q[[2, 9, 16]] -= [down[0], down[0] + down[1], 0.008 + down[2]]
        for b in range(3):
            qq = np.r_[1.0, rng.normal(scale=0.01, size=3)]
            q[7 * b + 3 : 7 * b + 7] = qq / np.linalg.norm(qq)
        d.qpos[:] = q
        mujoco.mj_forward(m, d)
        fr = frames(jnp.asarray(q))
        act = np.nonzero(np.asarray(fr.distance) < 0)[0]
        assert d.ncon == len(act) >= 7  # box 4, ball 1, rod 2: none twice
        mine = sorted(act, key=lambda i: tuple(np.round(np.asarray(fr.point[i]), 9)))
        theirs = sorted(d.contact[: d.ncon], key=lambda c: tuple(np.round(c.pos, 9)))
        for i, c in zip(mine, theirs, strict=True):
            bodies = [int(m.geom_bodyid[g]) - 1 for g in c.geom]
            assert {fr.body[i], fr.other[i]} == set(bodies)
            sign = 1.0 if bodies[1] == fr.body[i] else -1.0  # the normal onto jaxdyn's body
            np.testing.assert_allclose(float(fr.distance[i]), c.dist - c.includemargin, atol=1e-12)
            np.testing.assert_allclose(np.asarray(fr.point[i]), c.pos, atol=1e-12)
            np.testing.assert_allclose(np.asarray(fr.normal[i]), sign * c.frame[:3], atol=1e-12)
            np.testing.assert_allclose(float(fr.friction[i]), c.friction[0] * (c.dim > 1))
            np.testing.assert_allclose(np.asarray(fr.solref[i]), c.solref, atol=1e-15)
            np.testing.assert_allclose(np.asarray(fr.solimp[i]), c.solimp, atol=1e-15)
            np.testing.assert_allclose(np.asarray(fr.solreffriction[i]), c.solreffriction)


@pytest.mark.parametrize("cone", ["elliptic", "pyramidal"])  # pyramidal: no solreffriction
def test_pair_rollout_is_mujocos(loaded, cone):
    """MuJoCo C (Newton at tolerance 1e-14) and ``Constraint(soft=True)`` on the scene,
    0.12 s: the box slides on its pair's friction, solref, solimp, solreffriction and margin,
    the ball rides it through the excluded bodies' pair, the rod tips over onto its
    frictionless pair with a direct solref: positions and orientations agree to 1e-9 at every
    step (seen 3e-11 m and 2.3e-10 with elliptic cones; converged: more iterations or Newton
    steps leave it, and the ball on the box drifts from MuJoCo's alike without pairs)."""
    if cone != "elliptic":
        loaded = jaxdyn.load_mjcf(PAIR_MJCF.format(cone=cone))
    cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=300))
    conv, q0, model = loaded.converter(), np.asarray(loaded.q0), loaded.model
    v0 = jnp.asarray(conv.v_from_mujoco(q0, PUSH))
    tr = jax.jit(lambda q, v: sim.rollout(model, sim.State(q, v), jnp.zeros((STEPS, 0)), cfg=cfg))(
        jnp.asarray(q0), v0
    )
    mine = np.array([conv.q_to_mujoco(np.asarray(q)) for q in tr.q])
    (ref,) = mujoco_rollout(loaded.mj_model, STEPS, qvel=PUSH)
    for b in range(3):
        np.testing.assert_allclose(mine[:, 7 * b : 7 * b + 3], ref[:, 7 * b : 7 * b + 3], atol=1e-9)
        qa, qb = mine[:, 7 * b + 3 : 7 * b + 7], ref[:, 7 * b + 3 : 7 * b + 7]
        s = np.sign(np.sum(qa * qb, -1, keepdims=True))
        assert np.abs(qa - s * qb).max() < 1e-9
    assert ref[-1, 0] - ref[0, 0] > 0.05  # the box slid
    if cone == "elliptic":  # where the pair's solreffriction moves it (MuJoCo's own runs)
        plain = PAIR_MJCF.format(cone=cone).replace(' solreffriction="0.1 1"', "")
        (other,) = mujoco_rollout(mujoco.MjModel.from_xml_string(plain), STEPS, qvel=PUSH)
        assert np.abs(other[-1, :3] - ref[-1, :3]).max() > 1e-5
    # the rod tips over its lower end onto the floor, which pushes it up only (frictionless)
    assert np.abs(ref[-1, 17:21] - ref[0, 17:21]).max() > 1e-3
    assert np.abs(ref[:, 14:16] - [0.6, 0.0]).max() < 1e-12


def test_pair_friction_jaxdyn_lacks_refused_by_name():
    """A pair's two sliding coefficients when they differ (anisotropic friction;
    ``<pair friction="0.8">`` leaves the second at MuJoCo's default 1) are refused naming the
    pair, under the ``"geom"`` key; ``ignore=("geom",)`` keeps its (first) sliding friction.
    A pair's condim 4 / 6 (torsional / rolling friction) loads; ``Compliant`` refuses it
    under ``"condim"`` (``ignore=("condim",)``: condim 3), as a geom's."""
    xml = PAIR_MJCF.format(cone="elliptic").replace('condim="1"', 'condim="4"')
    loaded = jaxdyn.load_mjcf(xml)
    assert 4 in loaded.geoms.pair_condim and loaded.geoms.pair_spin is not None
    with pytest.raises(
        ValueError, match=r'\[condim\] <pair geom1="floor" geom2="rod">: condim \[4\]'
    ):
        loaded.sim_config(sim.Compliant(), ignore=("solimp", "solref", "solreffriction"))
    cfg = loaded.sim_config(
        sim.Compliant(), ignore=("solimp", "solref", "solreffriction", "condim")
    )
    assert set(cfg.geoms.pair_condim) == {3} and cfg.geoms.pair_spin is None
    # MuJoCo's two sliding coefficients (friction[0], friction[1]: anisotropic) differ
    xml = PAIR_MJCF.format(cone="elliptic").replace('friction="0.8 0.8"', 'friction="0.8"')
    with pytest.raises(
        ValueError, match=r'\[geom\] <pair geom1="box" geom2="ball">: friction 0.8 1 '
    ):
        jaxdyn.load_mjcf(xml)
    loaded = jaxdyn.load_mjcf(xml, ignore=("geom",))
    assert 0.8 in np.asarray(loaded.geoms.pair_friction)


# the spinning sphere (condim 4) and the rolling ball (condim 6) of test_condim's scene, their
# condim and torsional / rolling friction given by explicit pairs with the floor (the geoms
# condim 3, other friction), beside the box's own condim-4 geom
SPIN_PAIRS_MJCF = """<mujoco>
<option timestep="0.002" cone="{cone}" impratio="1.7" tolerance="1e-14" iterations="1000"/>
<worldbody><geom name="floor" type="plane" size="5 5 .1" friction="0.5 0.01 0.001"/>
<body name="top" pos="0 0 0.09964"><freejoint/>
  <geom name="top" contype="1" conaffinity="0" size="0.1" mass="1" friction="0.9 0.2 0.1"/>
</body>
<body name="roller" pos="0.5 0 0.04982"><freejoint/>
  <geom name="roller" contype="1" conaffinity="0" size="0.05" mass="0.4"/></body>
<body name="box" pos="-0.5 0 0.0499"><freejoint/>
  <geom name="box" contype="1" conaffinity="0" type="box" size="0.1 0.08 0.05" mass="1.5"
        condim="4" friction="0.7 0.05 0"/></body>
</worldbody><contact>
  <pair geom1="floor" geom2="top" condim="4" friction="0.6 0.6 0.03 0.002 0.002"/>
  <pair geom1="floor" geom2="roller" condim="6" friction="0.8 0.8 0.02 0.01 0.01"/>
</contact></mujoco>"""


@pytest.mark.filterwarnings("ignore:load_mjcf.*interpenetrate")  # on purpose
# [pyramidal] slow: test_condim follows MuJoCo with condim 4 / 6 in both cones
@pytest.mark.parametrize("cone", ["elliptic", pytest.param("pyramidal", marks=pytest.mark.slow)])
def test_pair_condim_4_and_6_rollout_is_mujocos(cone):
    """Explicit pairs of condim 4 and 6 (their torsional / rolling friction from the pair's
    friction 5-vector, not the geoms') under ``Constraint(soft=True, relaxed=True)`` follow
    MuJoCo C for 40 steps: positions to 1e-10, velocities to 1e-8; the sphere's spin and the
    ball's rolling slow down by the pairs' coefficients."""
    xml = SPIN_PAIRS_MJCF.format(cone=cone)
    qvel = np.r_[0, 0, 0, 0, 0, 25.0, 1.0, 0, 0, 0, 20.0, 3.0, 0, 0, 0, 0, 0, 8.0]
    loaded = jaxdyn.load_mjcf(xml)
    g = loaded.geoms
    assert sorted(g.pair_condim) == [4, 6]
    cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=1500))
    conv, model, steps = loaded.converter(), loaded.model, 40
    q0 = np.asarray(loaded.q0)
    v0 = conv.v_from_mujoco(q0, qvel)
    tr = jax.jit(lambda q, v: sim.rollout(model, sim.State(q, v), jnp.zeros((steps, 0)), cfg=cfg))(
        jnp.asarray(q0), jnp.asarray(v0)
    )
    q = np.array([conv.q_to_mujoco(np.asarray(x)) for x in tr.q])
    v = np.array([conv.v_to_mujoco(np.asarray(a), np.asarray(b)) for a, b in zip(tr.q, tr.v)])
    m = mujoco.MjModel.from_xml_string(xml)
    q_ref, v_ref = mujoco_rollout(m, steps, qvel=qvel, fields=("qpos", "qvel"))
    np.testing.assert_allclose(q, q_ref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(v, v_ref, rtol=0, atol=1e-8)
    assert v_ref[-1, 5] < 25.0 - 0.5 and v_ref[-1, 10] < 20.0 - 0.5  # spin and rolling slowed


ARM_MJCF = """<mujoco><worldbody>
<body name="base" pos="0 0 0.5"><freejoint/><geom name="base" type="box" size="0.1 0.1 0.05"/>
  <body name="arm" pos="0 0 -0.1"><joint name="j" type="hinge" axis="0 1 0"/>
    <geom name="arm" type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/></body></body>
</worldbody><contact>
  <pair geom1="base" geom2="arm" margin="0.02" friction="0.4 0.4" solref="0.05 1"/>
</contact></mujoco>"""


def test_scene_keeps_explicit_pairs():
    """A :class:`jaxdyn.sim.Robot` of MJCF geoms with an explicit pair (here a parent and its
    child, which MuJoCo's filter drops) keeps it in a ``Scene``, with its own parameters: the
    scene's contacts of the pair are the loaded file's (distance with the pair's margin,
    friction, solref; its condim 6's torsional and rolling friction)."""
    from jaxdyn.algorithms import kinematics as kin
    from jaxdyn.sim.core import _world

    xml = ARM_MJCF.replace('friction="0.4 0.4"', 'condim="6" friction="0.4 0.4 0.01 0.002 0.002"')
    loaded = jaxdyn.load_mjcf(xml)
    assert loaded.geoms.explicit == (0,)
    q = np.array(loaded.q0)
    q[7] = -0.3  # the arm swung up into the base
    with pytest.warns(UserWarning, match="interpenetrate"):
        scene = sim.Scene(sim.Robot(loaded.model, geoms=loaded.geoms, name="r", q=q))
    g = scene.geoms
    assert g.explicit is not None and len(g.explicit) == 1
    assert {g.names[x] for x in g.pairs[g.explicit[0]]} == {"r/base", "r/arm"}
    np.testing.assert_array_equal(g.pair_friction, [0.4])
    np.testing.assert_array_equal(g.pair_margin, [0.02])

    def frames(model, geoms, q):
        def f(q):
            ws, origin = _world(model, q)
            vb, _ = kin.body_velocities(model, ws, jnp.zeros(model.nv))
            return geoms.frames(ws, origin, vb)

        fr = jax.jit(f)(jnp.asarray(q))
        act = np.asarray(fr.distance) < 0
        return [np.asarray(x)[act] for x in (fr.distance, fr.friction, fr.solref, fr.spin)]

    mine = frames(scene.model, g, scene.q0)
    want = frames(loaded.model, loaded.geoms, q)
    assert len(want[0]) >= 1
    for a, b in zip(mine, want, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-12)
    np.testing.assert_allclose(want[1], 0.4)
    np.testing.assert_allclose(want[2], [[0.05, 1.0]] * len(want[2]))
    np.testing.assert_allclose(want[3], [[0.01, 0.002]] * len(want[3]))


def test_pair_with_a_heightfield():
    """An explicit pair of a heightfield and a ball that collides with nothing else
    (``contype="0"``), with its own margin and friction: each of jaxdyn's acting slots is one
    of MuJoCo's contacts (``dist - includemargin`` to 1e-12), with the pair's friction."""
    from test_scene import HF_MJCF, _frames_fn

    xml = HF_MJCF.replace(
        '<geom name="ball" size="0.05" mass="1"/>',
        '<geom name="ball" size="0.05" mass="1" contype="0" conaffinity="0"/>',
    ).replace(
        "</worldbody>",
        '</worldbody><contact><pair geom1="hf" geom2="ball" margin="0.01" friction="0.6 0.6"/>'
        "</contact>",
    )
    loaded = jaxdyn.load_mjcf(xml)
    assert loaded.geoms.explicit is not None and loaded.pair_ids == (0,)
    m = loaded.mj_model
    d = mujoco.MjData(m)
    q = np.array(loaded.q0)
    q[2] = 0.12
    d.qpos[:] = q
    mujoco.mj_forward(m, d)
    fr = _frames_fn(loaded)(jnp.asarray(q))
    ball = [c for c in d.contact[: d.ncon] if 1 in (int(m.geom_bodyid[g]) for g in c.geom)]
    want = np.array([c.dist - c.includemargin for c in ball])
    assert all(abs(c.includemargin - 0.01) < 1e-15 for c in ball)
    act = [i for i in range(len(fr.body)) if fr.body[i] == 0 and float(fr.distance[i]) < 0]
    assert len(act) >= 3
    for i in act:
        assert np.abs(want - float(fr.distance[i])).min() < 1e-12
    np.testing.assert_array_equal(np.asarray(fr.friction)[act], 0.6)


def test_geoms_explicit_fields_checked(loaded):
    """``sim.Geoms``' explicit-pair fields are checked with errors naming them."""
    import dataclasses

    g = loaded.geoms
    bad = (
        (dict(pair_condim=(3, 3)), "pair_condim must be 3 values"),
        (dict(pair_condim=(3, 5, 1)), "pair_condim must be 3 values of 1, 3, 4 or 6"),
        (dict(pair_condim=(3, 4, 1)), "pair_condim 4 / 6 .* needs pair_spin"),
        (dict(pair_spin=np.zeros((2, 2))), r"pair_spin has shape \(2, 2\)"),
        (dict(pair_margin=np.zeros(2)), r"pair_margin has shape \(2,\)"),
        (dict(pair_friction=None), "need pair_friction and pair_condim"),
        (dict(explicit=(0, 0, 1)), "must be distinct indices"),
        (dict(explicit=None), "given without explicit"),
    )
    for change, match in bad:
        with pytest.raises(ValueError, match=match):
            dataclasses.replace(g, **change)


@pytest.mark.slow  # 20-30 s of compile
def test_mjx_humanoid_with_its_foot_pairs_is_mujocos():
    """mujoco-mjx's humanoid (``test_data/humanoid/humanoid.xml``), whose only contacts are
    four explicit ``<pair>`` of its feet and the floor (every geom has ``contype="0"``),
    dropped for 0.75 s under ``Constraint(soft=True)`` with MuJoCo's limit constraints
    (pyramidal cones, the file's): jaxdyn's configuration follows MuJoCo C's to 1e-10 at
    every step (seen 4e-15), on six to eight foot contacts (MuJoCo's)."""
    from pathlib import Path

    mjx = pytest.importorskip("mujoco.mjx")
    path = Path(mjx.__file__).parent / "test_data" / "humanoid" / "humanoid.xml"
    if not path.exists():
        pytest.skip("mujoco-mjx ships no test_data/humanoid/humanoid.xml")
    loaded = jaxdyn.load_mjcf(str(path))
    m = loaded.mj_model
    assert m.npair == 4 and loaded.geoms.explicit == (0, 1, 2, 3) and not loaded.contacts
    m.opt.tolerance, m.opt.iterations = 1e-14, 1000
    soft = sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=300)
    cfg = loaded.sim_config(soft, limits="constraint")
    conv, q0, steps = loaded.converter(), np.asarray(loaded.q0), 150
    zero = jnp.zeros((steps, m.nu))
    tr = jax.jit(lambda q: sim.rollout(loaded.model, sim.State(q, jnp.zeros(m.nv)), zero, cfg=cfg))(
        jnp.asarray(q0)
    )
    mine = np.array([conv.q_to_mujoco(np.asarray(q)) for q in tr.q])
    ref, ncon = mujoco_rollout(m, steps, fields=("qpos", lambda d: d.ncon))
    assert ncon.min() >= 6 and ref[0, 2] - ref[-1, 2] > 0.1  # it fell onto its feet
    np.testing.assert_allclose(mine, ref, atol=1e-10)


def test_explicit_defaults_are_mujocos(loaded):
    """``pair_margin`` / ``pair_solref`` / ``pair_solreffriction`` ``None``: MuJoCo's defaults
    (margin 0: the box's distances move by its pair margin, 3 mm; solref ``(0.02, 1)``;
    solreffriction ``(0, 0)``, none reported); friction and condim stay the pair's."""
    import dataclasses

    cfg = loaded.sim_config(sim.Compliant(), ignore=("solimp", "solref", "solreffriction"))
    g = cfg.geoms  # (the file's solimp left out: Compliant has none)
    bare = dataclasses.replace(g, pair_margin=None, pair_solref=None, pair_solreffriction=None)
    q = jnp.asarray(loaded.q0)
    fr = _frames(loaded, cfg)(q)
    fb = _frames(loaded, dataclasses.replace(cfg, geoms=bare))(q)
    box = np.array([b == 0 and o == -1 for b, o in zip(fr.body, fr.other, strict=True)])
    np.testing.assert_allclose(np.asarray(fb.distance)[box], np.asarray(fr.distance)[box] + 0.003)
    np.testing.assert_array_equal(np.asarray(fb.solref)[box], [[0.02, 1.0]] * box.sum())
    np.testing.assert_array_equal(np.asarray(fb.friction), np.asarray(fr.friction))
    assert fb.solreffriction is None and fr.solreffriction is not None


# <flag override="enable">: o_friction, o_solref, o_solimp and o_margin replace every contact's
# (a primitive ball, a condim-4 top, a box through an explicit pair with its own parameters)
OVERRIDE_MJCF = """<mujoco><option timestep="0.002" cone="elliptic" tolerance="1e-14"
  iterations="1000" o_friction="0.25 0.25 0.02 0.001 0.001" o_solref="0.03 0.9"
  o_solimp="0.85 0.95 0.002 0.5 2" o_margin="0.001"><flag override="enable"/></option>
<worldbody><geom name="floor" type="plane" size="5 5 .1" friction="0.9 0.1 0.01"/>
<body name="ball" pos="0 0.5 0.0495"><freejoint/><geom name="ball" size="0.05" mass="0.5"/></body>
<body name="top" pos="0.5 0 0.0495"><freejoint/>
  <geom name="top" size="0.05" mass="0.5" condim="4" friction="0.6 0.03 0.002"/></body>
<body name="box" pos="0 0 0.0495"><freejoint/>
  <geom name="box" type="box" size="0.1 0.1 0.05" mass="1"/></body>
</worldbody>
<contact><pair geom1="box" geom2="floor" friction="0.7 0.7" solref="0.05 1"/></contact>
</mujoco>"""


@pytest.mark.filterwarnings("ignore:load_mjcf.*interpenetrate")  # on purpose
def test_override_replaces_every_contacts_parameters():
    """``<option><flag override="enable">``: MuJoCo's ``o_friction`` (sliding and torsional),
    ``o_solref``, ``o_solimp`` and ``o_margin`` replace every contact's, a primitive's, a
    condim-4 geom pair's and an explicit pair's (whose own friction and solref are
    overridden too): jaxdyn's acting contacts carry MuJoCo C's friction vector, ``solref``,
    ``solimp`` and ``dist - includemargin``, and a 100-step soft-contact rollout (the box and
    the ball pushed, the top spinning) follows MuJoCo C to 1e-9 (seen 1.6e-10; with the files'
    own friction, as before, the box 6 cm apart); an anisotropic ``o_friction`` is refused
    by name."""
    from jaxdyn.sim import core

    jax.config.update("jax_enable_x64", True)
    loaded = jaxdyn.load_mjcf(OVERRIDE_MJCF)
    cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=300))
    model = loaded.model
    m = loaded.mj_model
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)

    @jax.jit
    def frames_at(q):
        ws, origin = core._world(model, q)
        fr = core._contact_kinematics(model, cfg, ws, origin, jnp.zeros(model.nv))[1]
        return fr, fr.point + origin

    fr, point = frames_at(jnp.asarray(loaded.q0))
    act = np.nonzero(np.asarray(fr.distance) < 0)[0]
    assert len(act) == d.ncon == 6  # the ball, the top, the box's four corners
    for c in d.contact[: d.ncon]:
        i = act[int(np.argmin(np.linalg.norm(np.asarray(point)[act] - c.pos, axis=1)))]
        np.testing.assert_allclose(np.asarray(point[i]), c.pos, atol=1e-12)
        np.testing.assert_allclose(float(fr.distance[i]), c.dist - c.includemargin, atol=1e-12)
        np.testing.assert_allclose(float(fr.friction[i]), c.friction[0], rtol=1e-15)
        spin = float(np.asarray(fr.spin)[i, 0])
        np.testing.assert_allclose(spin, c.friction[2] if c.dim == 4 else 0.0, rtol=1e-15)
        np.testing.assert_allclose(np.asarray(fr.solref[i]), c.solref, rtol=1e-15)
        np.testing.assert_allclose(np.asarray(fr.solimp[i]), c.solimp, rtol=1e-15)
    assert {float(c.friction[0]) for c in d.contact[: d.ncon]} == {0.25}

    steps = 100
    qvel = np.zeros(m.nv)
    qvel[[0, 1]] = 1.0, 0.3  # the ball
    qvel[[11]] = 20.0  # the top spinning
    qvel[[12, 13]] = 0.8, -0.2  # the box
    (ref,) = mujoco_rollout(m, steps, qvel=qvel)
    conv = loaded.converter()
    q0 = np.asarray(loaded.q0)
    tr = jax.jit(lambda q, v: sim.rollout(model, sim.State(q, v), jnp.zeros((steps, 0)), cfg=cfg))(
        jnp.asarray(q0), jnp.asarray(conv.v_from_mujoco(q0, qvel))
    )
    q = np.array([conv.q_to_mujoco(np.asarray(x)) for x in tr.q])
    np.testing.assert_allclose(q, ref, rtol=0, atol=1e-9)
    assert np.abs(ref[-1, [0, 14]] - ref[0, [0, 14]]).min() > 0.05  # they slid

    xml = OVERRIDE_MJCF.replace('o_friction="0.25 0.25', 'o_friction="0.25 0.3')
    with pytest.raises(ValueError, match=r'\[geom\] <option o_friction="0.25 0.3 0.02'):
        jaxdyn.load_mjcf(xml)
    loaded = jaxdyn.load_mjcf(xml, ignore=("geom",))
    assert np.all(np.asarray(loaded.geoms.friction) == 0.25)


def test_scene_keeps_solimp_and_direct_solref():
    """``load_mjcf(...).geoms`` keeps the file's ``solimp`` and direct (negative) ``solref``,
    the geoms' and the explicit pairs', and a :class:`jaxdyn.sim.Scene` of that robot keeps
    them: with ``Constraint(soft=True)`` the scene's contacts carry the loaded file's
    ``solref`` / ``solimp`` (an explicit pair's; a geom's own on the scene's ground, where
    such a geom is a geom pair, not a primitive), and the contact models without an impedance
    refuse them by name instead of dropping them (``load_mjcf``'s ``sim_config`` with
    ``ignore``: MuJoCo's defaults, as before)."""
    from jaxdyn.algorithms import kinematics as kin
    from jaxdyn.sim.core import _world

    xml = ARM_MJCF.replace('solref="0.05 1"', 'solref="-2000 -30" solimp="0.8 0.9 0.01 0.5 2"')
    loaded = jaxdyn.load_mjcf(xml)
    g = loaded.geoms
    np.testing.assert_array_equal(g.pair_solimp, [[0.8, 0.9, 0.01, 0.5, 2.0]])
    np.testing.assert_array_equal(g.pair_solref, [[-2000.0, -30.0]])
    q = np.array(loaded.q0)
    q[7] = -0.3  # the arm swung up into the base
    with pytest.warns(UserWarning, match="interpenetrate"):
        scene = sim.Scene(sim.Robot(loaded.model, geoms=g, name="r", q=q))
    np.testing.assert_array_equal(scene.geoms.pair_solimp, g.pair_solimp)
    np.testing.assert_array_equal(scene.geoms.pair_solref, g.pair_solref)
    for model, match in (
        (sim.Constraint(), r"cfg.geoms.pair_solref has an entry <= 0"),
        (sim.Compliant(), r"cfg.geoms.pair_solref has an entry <= 0"),
        (
            sim.Constraint(baumgarte=0.2),
            r"(r/base-r/arm|r/arm-r/base): pair_solimp off MuJoCo's default",
        ),
    ):
        with pytest.raises(ValueError, match=match):
            scene.sim_config(model)
    # the file's own sim_config: refused by name, or MuJoCo's defaults when ignored
    with pytest.raises(ValueError, match=r"\[solimp\](.|\n)*\[solref\]"):
        loaded.sim_config(sim.Constraint(soft=False))
    hard = loaded.sim_config(sim.Constraint(soft=False), ignore=("solimp", "solref"))
    assert hard.geoms.pair_solimp is None
    np.testing.assert_array_equal(hard.geoms.pair_solref, [[0.02, 1.0]])

    def frames(model, geoms, q):
        def f(q):
            ws, origin = _world(model, q)
            vb, _ = kin.body_velocities(model, ws, jnp.zeros(model.nv))
            fr = geoms.frames(ws, origin, vb)
            return fr.distance, fr.solref, fr.solimp

        d, sr, si = (np.asarray(x) for x in jax.jit(f)(jnp.asarray(q)))
        return sr[d < 0], si[d < 0]

    want = frames(loaded.model, loaded.sim_config(sim.Constraint(soft=True)).geoms, q)
    mine = frames(scene.model, scene.sim_config(sim.Constraint(soft=True)).geoms, scene.q0)
    assert len(want[0]) >= 1 and np.all(want[0] == [-2000.0, -30.0])
    for a, b in zip(mine, want, strict=True):
        np.testing.assert_array_equal(a, b)

    # a geom's own solimp / direct solref on the scene's ground: a geom pair that keeps them
    xml = """<mujoco><worldbody><body name="b" pos="0 0 0.09"><freejoint/>
      <geom name="s" size="0.1" solimp="0.8 0.9 0.01 0.5 2" solref="-1000 -10"/></body>
      <body name="c" pos="1 0 0.11"><freejoint/><geom name="t" size="0.1"/></body>
    </worldbody></mujoco>"""
    loaded = jaxdyn.load_mjcf(xml)  # one pair, s-t (apart)
    with pytest.warns(UserWarning, match="interpenetrate"):
        scene = sim.Scene(
            sim.Robot(loaded.model, geoms=loaded.geoms, name="r", q=loaded.q0),
            world=[sim.Ground()],
        )
    assert scene.contacts is not None and set(scene.contacts.names) == {"r/t"}
    sr, si = frames(scene.model, scene.geoms, scene.q0)  # touching: s on the ground
    # MuJoCo C's contact of the same sphere on a floor plane (its mj_contactParam mix)
    m = mujoco.MjModel.from_xml_string(
        xml.replace("<worldbody>", '<worldbody><geom type="plane" size="5 5 .1"/>')
    )
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    assert d.ncon == 1 and len(sr) == 1
    np.testing.assert_allclose(sr[0], d.contact[0].solref, rtol=1e-15)
    np.testing.assert_allclose(si[0], d.contact[0].solimp, rtol=1e-15)
    assert sr[0][0] == -1000.0 and si[0][0] != 0.9  # the geom's own, mixed with the ground's
    with pytest.raises(ValueError, match=r"cfg.geoms.solref has an entry <= 0"):
        scene.sim_config(sim.Compliant())

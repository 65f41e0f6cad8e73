"""Issue 56's remaining contact items: the terrain's own friction mixed with the primitives'
(MuJoCo C on the same scene), the constraint solve's report (``sim.step_info``: residual,
contacts left out by ``max_contacts``), ``QuadrupedGetup``'s default cap, and bad input found
at load (a primitive's condim on the ground refused by name, a primitive starting inside the
ground warned of by name)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import sim

mujoco = pytest.importorskip("mujoco")

from _mujoco_ref import mujoco_rollout  # noqa: E402

# two boxes sliding on a floor of friction 0.4: "a" (0.1) takes the floor's, "c" (0.2,
# priority 1) its own (MuJoCo's mj_contactParam); elliptic cones, MuJoCo's soft contact
FRICTION_MJCF = """<mujoco><option timestep="0.002" cone="elliptic" tolerance="1e-14"
  iterations="1000"/>
<worldbody><geom name="floor" type="plane" size="5 5 .1" friction="0.4"/>
<body name="a" pos="0 0 0.05"><freejoint/>
  <geom name="a" contype="1" conaffinity="0" type="box" size="0.1 0.1 0.05" mass="1"
        friction="0.1"/></body>
<body name="c" pos="0 1 0.05"><freejoint/>
  <geom name="c" contype="1" conaffinity="0" type="box" size="0.1 0.1 0.05" mass="1"
        friction="0.2" priority="1"/></body>
</worldbody></mujoco>"""


def test_terrain_friction_mixes_with_the_primitives_like_mujoco():
    """The boxes are contact primitives against the floor plane: their friction is the pair's
    as MuJoCo mixes it (the floor's 0.4 for ``a``, ``c``'s own 0.2 by priority), not the
    contact model's default 1. Pushed at 1 m/s, both slide to a stop; jaxdyn's soft contact
    (``relaxed=True``: MuJoCo's problem) follows MuJoCo C to 1e-9 m over 0.3 s (seen: 4e-11;
    with friction 1 on both, as before, 0.08 m and 0.16 m apart)."""
    steps = 150
    push = np.zeros(12)
    push[0::6], push[1::6] = 1.0, 0.3
    (ref,) = mujoco_rollout(mujoco.MjModel.from_xml_string(FRICTION_MJCF), steps, qvel=push)
    loaded = jaxdyn.load_mjcf(FRICTION_MJCF)
    cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=200))
    np.testing.assert_array_equal(np.asarray(cfg.contacts.friction), [0.4] * 8 + [0.2] * 8)
    conv = loaded.converter()
    q0 = np.asarray(loaded.q0)
    step = jax.jit(lambda s: sim.step_info(loaded.model, s, jnp.zeros(0), cfg))
    s = sim.State(jnp.asarray(q0), jnp.asarray(conv.v_from_mujoco(q0, push)))
    mine, residual = [], []
    for _ in range(steps):
        s, info = step(s)
        mine.append(conv.q_to_mujoco(np.asarray(s.q)))
        residual.append(float(info["contact_residual"]))
    mine = np.array(mine)
    # the report of these converged solves (sim.step_info): a small residual, nothing dropped
    assert 0 < max(residual) < 1e-6 and int(info["contacts_dropped"]) == 0
    for b in range(2):
        np.testing.assert_allclose(mine[:, 7 * b : 7 * b + 3], ref[:, 7 * b : 7 * b + 3], atol=1e-9)
    # the distances Coulomb's law gives with the mixed friction in 0.3 s (a stops, c slides)
    v0, a = np.hypot(1.0, 0.3), np.array([0.4, 0.2]) * 9.81
    t = np.minimum(steps * 0.002, v0 / a)
    slid = [np.hypot(*(ref[-1, [k, k + 1]] - ref[0, [k, k + 1]])) for k in (0, 7)]
    np.testing.assert_allclose(slid, v0 * t - a * t * t / 2, rtol=0.03)
    # a contact model's own friction still overrides the geoms'
    own = loaded.sim_config(sim.Constraint(soft=False, friction=0.9))
    assert own.contacts.friction is not None and own.contact.friction == 0.9


def test_contact_set_friction_checked():
    """``contact_set(friction=...)``: one number >= 0 per primitive, refused by name else."""
    model = jaxdyn.robots.load("quad12")
    prims = [sim.Sphere("FL_FOOT", 0.02), sim.Box("base_link", (0.4, 0.1, 0.1))]
    cs = sim.contact_set(model, prims, friction=[0.3, 0.7])
    np.testing.assert_array_equal(np.asarray(cs.friction), [0.3] + [0.7] * 8)
    for bad in ([0.3], [0.3, -1.0], [0.3, np.nan]):
        with pytest.raises(ValueError, match="contact_set: friction must be one finite number"):
            sim.contact_set(model, prims, friction=bad)


# a box resting on its face: four corners touch
BOX_MJCF = """<mujoco><option timestep="0.002"/>
<worldbody><geom name="floor" type="plane" size="5 5 .1"/>
<body name="a" pos="0 0 0.05"><freejoint/>
  <geom name="a" type="box" size="0.1 0.1 0.05" mass="1"/></body>
</worldbody></mujoco>"""


def test_step_info_reports_the_solve():
    """``sim.step_info`` reports the constraint solve (one program, both failures): on the
    box sliding on its face, a solve stopped after 3 projected gradient steps leaves a
    residual above 1e-2 (its impulses percents off Coulomb's law; converged solves report
    under 1e-6:
    test_terrain_friction_mixes_with_the_primitives_like_mujoco), and ``max_contacts=2`` on
    the 4 touching corners reports the 2 it left out, every step. (The capped solve equals the
    uncapped one while nothing is dropped:
    test_scene.py::test_constraint_max_contacts_equals_the_uncapped_solve.)"""
    jax.config.update("jax_enable_x64", True)
    loaded = jaxdyn.load_mjcf(BOX_MJCF)
    cfg = loaded.sim_config(sim.Constraint(soft=False, iterations=3, max_contacts=2))
    step = jax.jit(lambda s: sim.step_info(loaded.model, s, jnp.zeros(0), cfg))
    s = sim.State(jnp.asarray(loaded.q0, jnp.float64), jnp.zeros(6).at[3].set(1.0))
    for _ in range(3):
        s, info = step(s)
        assert float(info["contact_residual"]) > 0.01 and int(info["contacts_dropped"]) == 2


def test_step_info_forces_are_contact_forces():
    """``sim.step_info(..., forces=True)`` reports ``contact_forces`` of the step's last
    substep: with one substep, ``sim.contact_forces`` at the step's start (the same solve, bit
    for bit; the suite's touch sensors read it instead of solving the step again), with two,
    ``contact_forces`` at the state after the first; the state and the other entries are
    :func:`step_info`'s without it. A ``forces`` that is not a bool, or ``forces=True``
    without a contact model, is refused by name."""
    jax.config.update("jax_enable_x64", True)
    loaded = jaxdyn.load_mjcf(BOX_MJCF)
    cfg = loaded.sim_config(sim.Constraint(soft=False, iterations=30))
    u = jnp.zeros(0)
    s = sim.State(jnp.asarray(loaded.q0, jnp.float64), jnp.zeros(6).at[3].set(1.0))
    n, info = sim.step_info(loaded.model, s, u, cfg, forces=True)
    n0, info0 = sim.step_info(loaded.model, s, u, cfg)
    f = sim.contact_forces(loaded.model, s, u, cfg)
    assert float(jnp.max(jnp.abs(f[:, 2]))) > 1.0  # the box rests on its corners
    np.testing.assert_array_equal(np.asarray(info["contact_forces"]), np.asarray(f))
    np.testing.assert_array_equal(np.asarray(n.q), np.asarray(n0.q))
    assert set(info) == set(info0) | {"contact_forces"}
    cfg2 = loaded.sim_config(sim.Constraint(soft=False, iterations=30), substeps=2)
    _, info2 = sim.step_info(loaded.model, s, u, cfg2, forces=True)
    half = loaded.sim_config(sim.Constraint(soft=False, iterations=30), dt=cfg2.dt / 2)
    mid = sim.step(loaded.model, s, u, half)
    np.testing.assert_allclose(
        np.asarray(info2["contact_forces"]),
        np.asarray(sim.contact_forces(loaded.model, mid, u, cfg2)),
        atol=1e-12,
    )
    with pytest.raises(ValueError, match="step_info: forces must be True or False"):
        sim.step_info(loaded.model, s, u, cfg, forces=1)
    free = loaded.sim_config(None)
    with pytest.raises(ValueError, match="step_info: forces=True needs a contact model"):
        sim.step_info(loaded.model, s, u, free, forces=True)


def test_getup_default_cap():
    """``QuadrupedGetup(contact="constraint")`` caps its solve at ``MAX_CONTACTS`` of its 20
    contact spheres (checked against the uncapped solve: test_getup_cap_agrees_with_uncapped;
    its ``state.info`` carries the report: test_envs_contact's
    test_getup_contract_and_trunk_contact)."""
    from jaxdyn import envs

    env = envs.QuadrupedGetup(contact="constraint")
    assert env.cfg.contact.max_contacts == envs.QuadrupedGetup.MAX_CONTACTS < env.cfg.contacts.n


@pytest.mark.slow
def test_getup_cap_agrees_with_uncapped():
    """Slow (the default suite covers the capped solve and its report on a small scene,
    test_step_info_reports_the_solve): ``QuadrupedGetup(contact="constraint")`` (float64)
    dropped from 0.3 m in random orientations under random actions, 16 episodes of 1 s; from
    each state of the uncapped rollout, one control step capped at ``MAX_CONTACTS`` and one
    uncapped: the report says no contact was left out; the two agree to 1e-10 in the median
    (seen: 8e-12), and where they differ by more than ``tol`` (1e-8, 1e-6, 1e-4) a solve
    reports a residual above ``tol / 10`` (seen: above ``tol / 4``): the differences are the
    solves' tolerance (100 projected gradient steps that have not converged on an impact:
    the residual's 90th percentile is 1e-4), not the cap. Whole rollouts drift apart from
    such differences, as falls amplify them."""
    from jaxdyn.envs import QuadrupedGetup

    jax.config.update("jax_enable_x64", True)
    model = jaxdyn.robots.load("quad12").astype(jnp.float64)
    b, t = 16, 50
    keys = jax.random.split(jax.random.PRNGKey(0), b)
    acts = jax.random.uniform(jax.random.PRNGKey(1), (t, b, 12), minval=-1, maxval=1)
    envs = [
        QuadrupedGetup(
            contact=sim.Constraint(friction=0.8, max_contacts=k),
            fall_fraction=1.0,
            drop_height=0.3,
            model=model,
        )
        for k in (None, QuadrupedGetup.MAX_CONTACTS)
    ]
    env = envs[0]

    def roll(s):
        def body(s, a):
            return jax.vmap(env.step)(s, a), s.pipeline_state

        return jax.lax.scan(body, s, acts)[1]

    states = jax.jit(roll)(jax.jit(jax.vmap(env.reset))(keys))
    flat = jax.tree_util.tree_map(lambda x: x.reshape((-1, *x.shape[2:])), states)
    ctrl = jax.vmap(env.control)(acts.reshape(-1, 12))
    (s0, _, r0), (s1, _, r1) = (jax.jit(jax.vmap(e.pipeline_step_info))(flat, ctrl) for e in envs)
    assert int(r0["contacts_dropped"].max()) == 0 and int(r1["contacts_dropped"].max()) == 0
    dq = np.abs(np.asarray(s1.q - s0.q)).max(-1)
    res = np.maximum(np.asarray(r0["contact_residual"]), np.asarray(r1["contact_residual"]))
    assert np.median(dq) < 1e-10
    for tol in (1e-8, 1e-6, 1e-4):
        assert np.all(res[dq > tol] > tol / 10), tol


def test_bad_contact_input_found_at_load():
    """A geom with condim 6 (torsional and rolling friction) on the ground plane is a geom pair
    (not a primitive) that ``Constraint()`` (hard or soft) takes; ``Compliant`` refuses it by
    name, saying which model takes it (it was once silently taken as condim 3), unless
    ``ignore=("condim",)`` (condim 3); a primitive starting inside the ground gets a warning
    naming the pair and the depth."""
    xml = BOX_MJCF.replace('mass="1"/>', 'mass="1" condim="6"/>')
    loaded = jaxdyn.load_mjcf(xml)
    assert not loaded.contacts and getattr(loaded.geoms, "condim", None) == (3, 6)
    with pytest.raises(
        ValueError,
        match=r'<geom name="a" type="box">: condim \[6\].*Constraint\(\) \(hard or soft=True\) '
        "takes it",
    ):
        loaded.sim_config(sim.Compliant())
    for model in (sim.Constraint(), sim.Constraint(soft=True)):
        assert getattr(loaded.sim_config(model).geoms, "spin", None) is not None
    plain = loaded.sim_config(sim.Compliant(), ignore=("condim",)).geoms
    assert getattr(plain, "condim", None) == (3, 3) and getattr(plain, "spin", 0) is None
    sunk = BOX_MJCF.replace('pos="0 0 0.05"', 'pos="0 0 0.04"')
    with pytest.warns(UserWarning, match=r"'a'-'floor' \(10 mm\)"):
        jaxdyn.load_mjcf(sunk)


def test_solve_residual_of_pyramid_edges():
    """:func:`sim.contact.solve_residual` on pyramid edge impulses ``(nc, 4)`` (soft contact's
    ``cone="pyramidal"`` reports it through ``sim.step_info``): 0 at the solve's answer, far
    from 0 at an arbitrary point, relaxed and Coulomb."""
    rng = np.random.default_rng(0)
    A = rng.normal(size=(12, 12))
    G, u = A @ A.T + np.eye(12), rng.normal(size=12)
    for coulomb in (False, True):
        lam = sim.contact.solve_cone_complementarity(
            G, u, 0.5, 200, 5, coulomb=coulomb, cone="pyramidal"
        )
        assert lam.shape == (3, 4)
        assert float(sim.contact.solve_residual(G, u, 0.5, lam, coulomb)) < 1e-6
        assert float(sim.contact.solve_residual(G, u, 0.5, jnp.ones((3, 4)), coulomb)) > 0.1


def test_scene_ground_friction_honours_geom_priority():
    """``sim.Scene`` mixes a primitive's friction with the ground's by MuJoCo's
    ``mj_contactParam`` (``sim.geoms.pair_choice``, as ``Geoms`` and ``load_mjcf`` do): a geom
    of higher ``priority`` gives its own (0.2 on a ground of 0.4; the larger, 0.4, before),
    equal priorities the larger (0.4 against 0.1)."""
    xml = """<mujoco><worldbody>
    <body name="a" pos="0 0 0.5"><freejoint/><geom type="sphere" size="0.1" mass="1"/></body>
    <body name="b" pos="1 0 0.5"><freejoint/><geom type="sphere" size="0.1" mass="1"/></body>
    </worldbody></mujoco>"""
    loaded = jaxdyn.load_mjcf(xml)
    m = loaded.model
    geoms = sim.Geoms(
        size=np.array([[0.1, 0.0, 0.0]] * 2),
        pos=np.zeros((2, 3)),
        rot=np.stack([np.eye(3)] * 2),
        friction=np.array([0.2, 0.1]),
        rbound=np.array([0.1, 0.1]),
        body=(m.body_names.index("a"), m.body_names.index("b")),
        type=("sphere", "sphere"),
        condim=(3, 3),
        names=("ga", "gb"),
        pairs=(),
        priority=(1, 0),
    )
    robot = sim.Robot(m, geoms=geoms, q=loaded.q0, name="r")
    scene = sim.Scene(robot, world=[sim.Ground(friction=0.4)])
    np.testing.assert_array_equal(np.asarray(scene.contacts.friction), [0.2, 0.4])


def test_terrain_own_friction_mixed_with_the_spheres():
    """``sim.Plane`` / ``sim.Heightfield`` ``friction``: the terrain's own Coulomb coefficient,
    mixed with each contact sphere's as MuJoCo mixes two geoms' (the larger); a contact set
    without friction takes the terrain's; ``None`` (the default) leaves the contact set's, as
    before; a contact model's own ``friction`` still overrides both. Bad values refused by
    name."""
    from jaxdyn.algorithms.kinematics import body_velocities, world_state

    model = jaxdyn.robots.load("quad12")
    prims = [sim.Sphere("FL_FOOT", 0.02), sim.Sphere("FR_FOOT", 0.02)]
    q = jaxdyn.neutral_configuration(model)
    ws = world_state(model, q)
    vb, _ = body_velocities(model, ws, jnp.zeros(model.nv))
    zero = jnp.zeros(3)

    def mu(cs, terrain):
        fr = sim.contact.contact_frames(ws, zero, vb, cs, terrain).friction
        return None if fr is None else np.asarray(fr)

    own = sim.contact_set(model, prims, friction=[0.2, 0.5])
    bare = sim.contact_set(model, prims)
    hf = sim.Heightfield(np.zeros((3, 3)), origin=(-1.0, -1.0), spacing=(1.0, 1.0), friction=0.3)
    for terrain in (sim.Plane(friction=0.3), hf):
        np.testing.assert_array_equal(mu(own, terrain), [0.3, 0.5])
        np.testing.assert_array_equal(mu(bare, terrain), [0.3, 0.3])
    np.testing.assert_array_equal(mu(own, sim.Plane()), [0.2, 0.5])  # today's
    assert mu(bare, sim.Plane()) is None  # the contact model's (1)
    cfg = sim.SimConfig(contact=sim.Constraint(friction=0.9), contacts=own, terrain=hf)
    assert cfg.contact.friction == 0.9  # overrides the frames' (sim.contact._friction)
    for bad in (-0.1, np.inf, (0.3, 0.4)):
        with pytest.raises(ValueError, match="Plane: friction must be"):
            sim.Plane(friction=bad)
    with pytest.raises(ValueError, match="Heightfield: friction must be"):
        sim.Heightfield(np.zeros((2, 2)), friction=-1.0)

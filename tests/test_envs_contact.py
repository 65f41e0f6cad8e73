"""The contact tasks of jaxdyn.envs: :class:`PushCube` (a 7-DoF arm pushes a free cube on a
table: contact between two moving bodies) and :class:`QuadrupedGetup` (quad12 gets up from a
fall: trunk and legs against the ground).

Default tests (no step compiled): the registry, the observation size traced, the rewards
against a hand computation on constructed states (the pusher's position from MuJoCo C's own
kinematics), the collision geometry's placement. Compiling a step of these tasks takes tens of
seconds, so the physics (shapes and finiteness under ``jit(vmap)``, a cube resting on the
table, the pusher moving the cube, the trunk resting on the ground) and a few PPO iterations
are ``slow``.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn import envs, sim

pytest.importorskip("mujoco")  # PushCube's MJCF scene is compiled by MuJoCo


@pytest.fixture(scope="module")
def push():
    return envs.make("push_cube")


@pytest.fixture(scope="module")
def getup():
    return envs.make("quadruped_getup")


def _quat_x(angle):
    return np.array([np.cos(angle / 2), np.sin(angle / 2), 0.0, 0.0])


def push_configuration(env, arm, cube_pos, cube_quat):
    q = np.zeros(env.sys.model.nq)
    q[env.arm_q] = arm
    q[env.cube_q] = np.concatenate([cube_pos, cube_quat])
    return q


# ----------------------------------------------------------------------------- default tests


def test_registry(push):
    assert type(push) is envs.PushCube and envs.ENVIRONMENTS["push_cube"] is envs.PushCube
    assert envs.ENVIRONMENTS["quadruped_getup"] is envs.QuadrupedGetup
    with pytest.raises(ValueError, match="contact must be 'compliant', 'constraint' or a"):
        envs.PushCube(contact="soft")


def test_push_scene_pairs(push):
    """The scene as loaded: the pusher-cube geom pair between the two moving bodies, the cube
    and the pusher as primitives against the table, the arm's links colliding with nothing."""
    cfg, m = push.sys.cfg, push.sys.model
    g = cfg.geoms
    pairs = {tuple(sorted((g.names[a], g.names[b]))) for a, b in g.pairs}
    assert pairs == {("cube", "pusher")}
    assert sorted(cfg.contacts.names) == sorted(["pusher"] + [f"cube[{k}]" for k in range(8)])
    assert push.action_size == 7  # (the observation's size: the slow contract test)
    assert m.nv == 13 and isinstance(cfg.contact, sim.Constraint)


def test_push_reward_by_hand(push):
    """Reward and metrics on a constructed state against the docstring's formula, the
    pusher's position from MuJoCo C (``mj_kinematics`` of the same file, ``site_xpos``)."""
    import mujoco

    arm = push.home + np.array([0.1, -0.2, 0.3, 0.1, -0.2, 0.1, 0.5], np.float32)
    cube = np.array([0.47, 0.03, 0.04])
    yaw = 0.3
    quat = np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
    q = push_configuration(push, arm, cube, quat)
    target = np.array([0.6, -0.1, 0.04])
    action = np.array([0.5, -0.3, 0.0, 1.0, 0.2, 0.0, -0.4])

    mj = push.scene.mj_model
    data = mujoco.MjData(mj)
    data.qpos[:7] = arm  # MuJoCo's order: the arm's joints, then the cube's free joint
    data.qpos[7:] = np.concatenate([cube, quat])
    mujoco.mj_kinematics(mj, data)
    tip = data.site_xpos[mj.site("tip").id]
    d_reach = np.linalg.norm(cube - tip)
    d_push = np.linalg.norm(cube - target)
    want = -1.0 * d_reach - 4.0 * d_push - 0.01 * action @ action  # defaults, no success

    r, m = push.reward(jnp.asarray(q, jnp.float32), jnp.asarray(target), jnp.asarray(action))
    np.testing.assert_allclose(float(m["reach_distance"]), d_reach, rtol=1e-5)
    np.testing.assert_allclose(float(m["push_distance"]), d_push, rtol=1e-6)
    np.testing.assert_allclose(float(r), want, rtol=1e-5)
    assert float(m["success"]) == 0.0
    # within success_radius of the target: the bonus
    q2 = push_configuration(push, arm, target + [0.03, 0.0, 0.0], quat)
    r2, m2 = push.reward(jnp.asarray(q2, jnp.float32), jnp.asarray(target), jnp.zeros(7))
    assert float(m2["success"]) == 1.0
    want2 = -float(m2["reach_distance"]) - 4.0 * 0.03 + 1.0
    np.testing.assert_allclose(float(r2), want2, rtol=1e-5)


def test_push_control_within_limits(push):
    """Servo targets: home + action_scale * clip(action), clipped to the joint ranges."""
    ctrl = np.asarray(push.control(jnp.full(7, 5.0)))
    np.testing.assert_allclose(
        ctrl, np.minimum(push.home + push.action_scale, push.upper), rtol=1e-6
    )
    assert push.home[3] + push.action_scale[3] > push.upper[3]  # the elbow's target is clipped


def test_getup_collision_geometry(getup):
    """quad12's collision geometry: a thigh capsule runs from the hip joint to the knee joint
    (its end spheres at the two joints' origins), the feet are spheres on the foot frames, and
    the standing height is the feet's depth below the base at the default pose."""
    m, cs = getup.sys.model, getup.sys.cfg.contacts
    assert cs.n == 8 + 4 * 3  # trunk corners; per leg: two thigh end spheres and the foot
    for leg in ("FL", "HR"):
        thigh = m.body_names.index(f"{leg}_UPPER_LEG")
        ends = [i for i, n in enumerate(cs.names) if n.startswith(f"{leg}_thigh")]
        assert [cs.body[i] for i in ends] == [thigh, thigh]
        knee = np.asarray(m.Xtree_p[m.body_names.index(f"{leg}_LOWER_LEG")])
        got = sorted(map(tuple, np.asarray(cs.pos)[ends].round(6)))
        assert got == sorted([(0.0, 0.0, 0.0), tuple(knee.round(6))])
    # standing on the feet at the default pose (hip 0.7, knee -1.4 rad): thigh and shank, 0.16 m
    # each, at 0.7 rad from the vertical, plus the foot radius
    assert getup.stand_height == pytest.approx(0.32 * np.cos(0.7) + 0.02, abs=1e-6)


def test_getup_reward_by_hand(getup):
    """Reward and metrics against the docstring's formula: tilted 0.3 rad about x (upright
    enough for the posture term), low and high; on its back (no height credit)."""
    z0 = getup.stand_height
    joints = getup.default_pose + 0.1 * np.arange(12) / 12
    action = np.linspace(-1, 1, 12)
    ctrl = 0.01 * action @ action
    eq2 = np.sum((joints - getup.default_pose) ** 2) / 12
    for angle, z in ((0.3, 0.5 * z0), (0.3, 0.9 * z0), (np.pi, 0.05)):
        q = np.concatenate([[0.1, -0.2, z], _quat_x(angle), joints])
        r, m = getup.reward(jnp.asarray(q, jnp.float32), jnp.asarray(action, jnp.float32))
        uz = np.cos(angle)
        upright = (1 + uz) / 2
        is_up = uz > 0.9
        standing = float(is_up and z > 0.8 * z0)
        want = upright + min(z / z0, 1.0) * upright - 0.1 * eq2 * is_up + standing - ctrl
        np.testing.assert_allclose(float(m["upright"]), uz, atol=1e-6)
        assert float(m["standing"]) == standing and float(m["height"]) == pytest.approx(z)
        np.testing.assert_allclose(float(r), want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------- slow tests
# (the default tests above cover the rewards and the geometry; these compile the steps)

B = 4


@pytest.fixture(scope="module")
def push_fns(push):
    return jax.jit(jax.vmap(push.reset)), jax.jit(jax.vmap(push.step))


@pytest.fixture(scope="module")
def getup_fns(getup):
    return jax.jit(jax.vmap(getup.reset)), jax.jit(jax.vmap(getup.step))


def _finite(state):
    return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree_util.tree_leaves(state))


def _run(step, s, action, n):
    for _ in range(n):
        s = step(s, action)
    return s


@pytest.mark.slow  # (compiles PushCube's step: tens of seconds)
def test_push_contract_and_resting_cube(push, push_fns):
    """jit(vmap) shapes and finiteness; under the home pose the cube rests on the table: it
    sinks no more than 2 mm (its compliant contact) and neither slides nor tips."""
    reset, step = push_fns
    s = reset(jax.random.split(jax.random.PRNGKey(0), B))
    assert s.obs.shape == (B, 38) and s.reward.shape == (B,) and s.info["target"].shape == (B, 3)
    cube0 = np.asarray(s.pipeline_state.q[:, push.cube_q])
    np.testing.assert_allclose(cube0[:, 2], 0.04)
    s1 = _run(step, s, jnp.zeros((B, 7)), 25)  # 1 s
    assert s1.obs.shape == (B, 38) and set(s1.metrics) == set(s.metrics) and _finite(s1)
    assert not np.any(np.asarray(s1.done))
    cube = np.asarray(s1.pipeline_state.q[:, push.cube_q])
    assert np.all(cube[:, 2] > 0.04 - 2e-3) and np.all(cube[:, 2] < 0.04 + 1e-4)
    np.testing.assert_allclose(cube[:, :2], cube0[:, :2], atol=2e-3)
    np.testing.assert_allclose(np.abs(cube[:, 3]), np.abs(cube0[:, 3]), atol=1e-3)


def _sphere_box_distance(tip, cube, R, half, radius):
    """Signed distance between the pusher (a sphere) and the cube (a box), by hand."""
    p = R.T @ (tip - cube)
    out = np.linalg.norm(p - np.clip(p, -half, half))
    inside = min(half - np.abs(p))  # depth below the nearest face, for a centre inside
    return (out if out > 0 else -inside) - radius


@pytest.mark.slow  # (compiles PushCube's step)
def test_pusher_moves_the_cube(push, push_fns):
    """The arm lowers the pusher to the table and sweeps it forward: a cube in its way is pushed
    along +x, the pusher never more than 1 cm into it; a cube out of its way stays in place."""
    _, step = push_fns
    reset0 = push.reset(jax.random.PRNGKey(1))
    states = []
    for y in (0.0, 0.5):  # in the pusher's way, out of it
        cube = np.array([0.385, y, 0.04])
        q = push_configuration(push, push.home, cube, np.array([1.0, 0, 0, 0]))
        ps = push.pipeline_init(q, np.zeros(push.sys.model.nv))
        states.append(reset0.replace(pipeline_state=ps))
    s = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *states, *states)  # batch of 4
    # servo targets (joint2, joint4, joint6) putting the pusher at (0.3, 0, 0.045), then at
    # (0.5, 0, 0.045), 2 cm above the table (inverse kinematics of the scene, hand down)
    down = jnp.asarray([0.0, 0.194, 0.0, -0.051, 0.0, -0.124, 0.0])
    sweep = jnp.asarray([0.0, 0.485, 0.0, -0.907, 0.0, 0.727, 0.0])
    x0 = np.asarray(s.pipeline_state.q[:, push.cube_q][:, 0])
    depth = []
    for k in range(40):
        s = step(s, jnp.tile(down if k < 15 else sweep, (4, 1)))
        tip, cube, R = map(np.asarray, jax.vmap(push.positions)(s.pipeline_state.q))
        depth.append(_sphere_box_distance(tip[0], cube[0], R[0], push.half, 0.025))
    x = np.asarray(s.pipeline_state.q[:, push.cube_q][:, 0])
    assert x[0] - x0[0] > 0.05, (x0, x)
    assert min(depth) > -0.01, min(depth)  # (passing through would reach -0.065)
    assert min(depth) < 1e-3  # (they touched)
    assert abs(x[1] - x0[1]) < 1e-3, (x0, x)
    assert _finite(s)


@pytest.mark.slow  # (compiles QuadrupedGetup's step: tens of seconds)
def test_getup_contract_and_trunk_contact(getup, getup_fns):
    """jit(vmap) shapes and finiteness from random falls; on its back under the default pose
    the robot rests on its trunk: the base settles at the trunk's half height (4 cm, minus the
    compliant contact's sink), not through the ground."""
    reset, step = getup_fns
    s = reset(jax.random.split(jax.random.PRNGKey(0), B))
    assert s.obs.shape == (B, 46) and s.reward.shape == (B,)
    low = jax.vmap(getup.lowest_point)(s.pipeline_state.q)
    assert np.all(np.asarray(low) >= -1e-6) and np.all(np.asarray(low) <= getup.drop_height)
    q = np.concatenate([[0.0, 0.0, 0.3], _quat_x(np.pi), getup.default_pose])
    ps = getup.pipeline_init(q, np.zeros(18))
    back = jax.tree_util.tree_map(lambda x: x[0], s).replace(pipeline_state=ps)
    s = jax.tree_util.tree_map(lambda a, b: a.at[0].set(b), s, back)
    s = _run(step, s, jnp.zeros((B, 12)), 50)  # 1 s
    assert _finite(s) and not np.any(np.asarray(s.done)) and set(s.metrics) == set(back.metrics)
    # the contact report (SimEnv.pipeline_step_info): zeros without constraint contact
    assert {"contact_residual", "contacts_dropped"} <= set(s.info)
    assert not np.any(np.asarray(s.info["contacts_dropped"]))
    z, up = float(s.pipeline_state.q[0, 2]), float(s.metrics["upright"][0])
    assert up < -0.99 and 0.04 - 3e-3 < z < 0.04, (z, up)
    assert np.all(np.asarray(jax.vmap(getup.lowest_point)(s.pipeline_state.q)) > -3e-3)


@pytest.mark.slow  # (compiles Brax's PPO training step on each task: minutes)
@pytest.mark.parametrize("name", ["push_cube", "quadruped_getup"])
def test_ppo_iterations_finite(name):
    """A few PPO iterations through jaxdyn's wrappers, without NaN (the examples train them)."""
    if not envs.HAS_BRAX:
        pytest.fail("this test needs Brax: pip install 'jaxdyn[test]'")
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo

    seen = []
    make_policy, params, _ = ppo.train(
        environment=envs.make(name),
        wrap_env_fn=envs.wrap,
        num_timesteps=2 * 8 * 5 * 2,
        num_evals=2,
        episode_length=10,
        num_envs=8,
        num_eval_envs=4,
        batch_size=8,
        num_minibatches=2,
        unroll_length=5,
        num_updates_per_batch=1,
        network_factory=lambda *a, **k: ppo_networks.make_ppo_networks(
            *a, policy_hidden_layer_sizes=(8,), value_hidden_layer_sizes=(8,), **k
        ),
        progress_fn=lambda step, m: seen.append(float(m["eval/episode_reward"])),
    )
    assert len(seen) >= 2 and np.all(np.isfinite(seen)), seen
    leaves = jax.tree_util.tree_leaves(params)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in leaves)


def test_push_cube_custom_scene_names_what_it_lacks():
    """``PushCube(xml=...)``: a scene without the names the task reads is refused with one
    error naming each missing one (here the cube renamed ``block``, the site ``tip`` gone),
    not a bare ``list.index`` error; a cube whose geom is a geom pair (its own ``solref``:
    not a primitive against the table) is found there, with the same side."""
    src = Path(envs.manipulation.PUSH_CUBE_XML).read_text()
    renamed = src.replace('"cube"', '"block"').replace('<site name="tip" pos="0 0 0.11"/>', "")
    with pytest.raises(ValueError) as e:
        envs.PushCube(xml=renamed)
    msg = str(e.value)
    for want in ("free joint 'cube'", "body 'cube'", "site 'tip'", "box geom 'cube'", "block"):
        assert want in msg, (want, msg)
    paired = src.replace('type="box" size="0.04 0.04 0.04"', 'type="box" size="0.04 0.04 0.04" '
                         'solref="0.01 1"')  # fmt: skip
    assert paired != src
    env = envs.PushCube(xml=paired)
    assert "cube" in env.sys.cfg.geoms.names and env.half == pytest.approx(0.04)


def test_getup_model_names_what_it_lacks():
    """``QuadrupedGetup(model=...)``: an 18-DoF floating-base model without quad12's link and
    joint names (here the shanks renamed) is refused naming them, not a bare ``list.index``
    error."""
    from jaxdyn import load_urdf, robots

    path, _ = robots.resolve("quad12")
    text = Path(path).read_text().replace("_LOWER_LEG", "_SHANK").replace("_KFE", "_KNEE")
    model = load_urdf(text, floating_base=True)
    assert model.nv == 18
    with pytest.raises(ValueError, match="lacks or misnames: FL_LOWER_LEG") as e:
        envs.QuadrupedGetup(model=model)
    assert "'FL_KNEE'" in str(e.value)

"""More DeepMind Control Suite machinery and tasks (:mod:`jaxdyn.envs.dm_control_suite`)
against MuJoCo C and dm_control: activation states (``State.act``) carried by the suite
environments; ``ball_in_cup_catch``; dm_control's humanoid (``dm_humanoid_stand`` / ``walk`` /
``run``).

Oracles: MuJoCo C (``mj_step``) on the same MJCF from the same state under the same controls;
dm_control's task functions (``get_observation``, ``get_reward``) on the same MuJoCo states
(the ``dm`` fixture of ``test_envs_suite_contact``).
"""

from __future__ import annotations

import pytest

mujoco = pytest.importorskip("mujoco")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

# dm_control's environments (the fixture patches dm_control's index table for this MuJoCo)
from test_envs_suite_contact import _dm_eval  # noqa: E402
from test_envs_suite_contact import dm as dm  # noqa: E402

from jaxdyn import envs, sim  # noqa: E402
from jaxdyn.envs import dm_control_suite as suite  # noqa: E402

# ------------------------------------------------------------------ activation states (act)
#: two hinges under a first-order filter (``filter``), its exact discretisation
#: (``filterexact``, ``actearly``) and an integrator (``intvelocity``, ``actrange``), a plain
#: motor between them (no activation); a keyframe with activations
ACT_XML = """
<mujoco>
  <option timestep="0.005" integrator="Euler"><flag eulerdamp="disable" contact="disable"/></option>
  <worldbody>
    <body name="a">
      <joint name="j0" type="hinge" axis="0 1 0" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      <body name="b" pos="0.3 0 0">
        <joint name="j1" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.025"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <general joint="j0" dyntype="filter" dynprm="0.03" gainprm="2" ctrlrange="-1 1"/>
    <motor joint="j1" gear="0.5" ctrlrange="-1 1"/>
    <general joint="j1" dyntype="filterexact" dynprm="0.02" gainprm="1.5" actearly="true"/>
    <intvelocity joint="j0" kp="3" actrange="-0.4 0.4"/>
  </actuator>
  <keyframe>
    <key name="start" qpos="0.3 -0.5" qvel="0.2 0.1" act="0.5 -0.3 0.1"/>
  </keyframe>
</mujoco>
"""


class _ActTask(suite.SuiteEnv):
    """A bare suite environment on :data:`ACT_XML` (observation: ``q``, ``v``, ``act``)."""

    def __init__(self, path):
        self.xml = str(path)  # an absolute path: os.path.join keeps it
        super().__init__(ctrl_dt=0.01, sim_dt=0.005)

    def observe(self, ps, qk):
        return jnp.concatenate([ps.q, ps.v, ps.act])

    def reward(self, ps, qk, action):
        return jnp.zeros((), ps.q.dtype), {}

    def reset(self, rng):
        ps = self.pipeline_init(jnp.zeros(2), jnp.zeros(2))
        zero = jnp.zeros((), ps.q.dtype)
        return suite.State(ps, self.observe(ps, ps.q), zero, zero, {"diverged": zero}, {})


@pytest.fixture(scope="module")
def act_task(tmp_path_factory):
    path = tmp_path_factory.mktemp("act") / "act.xml"
    path.write_text(ACT_XML)
    env = _ActTask(path)
    return env, jax.jit(env.step)


def test_activation_state_carried_like_mujoco(act_task):
    """A suite environment whose actuators have activation dynamics: ``reset`` carries zero
    activations, :meth:`~jaxdyn.envs.dm_control_suite.SuiteEnv.keyframe_state` the keyframe's
    ``act`` (the loader's ``keyframe_act``, MuJoCo's ``key_act``), and ``step`` advances
    ``q``, ``v`` and ``act`` as MuJoCo C's ``mj_step`` does from that keyframe under changing
    controls (clamped by ``ctrlrange`` / ``actrange``), to 1e-10 over 8 control steps."""
    env, step = act_task
    m = env.scene.mj_model
    assert env.act_size == m.na == 3
    s0 = env.reset(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(s0.pipeline_state.act, np.zeros(3))
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("start").id)
    ps = env.keyframe_state("start")
    np.testing.assert_array_equal(ps.act, d.act)
    np.testing.assert_array_equal(env.qpos(ps.q), d.qpos)
    s = s0.replace(pipeline_state=ps)
    rng = np.random.default_rng(0)
    for k in range(8):
        u = rng.uniform(-1.5, 1.5, m.nu)  # beyond ctrlrange: clamped
        s = step(s, jnp.asarray(u))
        d.ctrl[:] = u
        mujoco.mj_step(m, d, env.n_frames)
        got = s.pipeline_state
        np.testing.assert_allclose(got.act, d.act, atol=1e-10, rtol=0, err_msg=str(k))
        np.testing.assert_allclose(env.qpos(got.q), d.qpos, atol=1e-10, rtol=0)
        np.testing.assert_allclose(env.qpos(got.v), d.qvel, atol=1e-10, rtol=0)
    assert np.abs(d.act).max() > 0.1 and float(s.done) == 0.0
    with pytest.raises(ValueError, match="no keyframe 'home'"):
        env.keyframe_state("home")
    with pytest.raises(ValueError, match=r"act has shape \(2,\), expected \(act_size,\)=\(3,\)"):
        env.pipeline_init(jnp.zeros(2), jnp.zeros(2), jnp.zeros(2))


# ---------------------------------------------------------------------------- ball in cup
@pytest.fixture(scope="module")
def bic():
    """``ball_in_cup_catch`` and its observation / reward as a compiled function of a state."""
    env = envs.make("ball_in_cup_catch")

    @jax.jit
    def evaluate(q, v, a):
        pk = sim.State(q, v)
        s = env.state_sensors(pk)
        return env.observe(pk, s), env.reward(pk, s, a)[0]

    return env, evaluate


def test_ball_in_cup_functions_match_dm_control(bic, dm):
    """``ball_in_cup_catch``'s observation (``qpos``, ``qvel`` in MuJoCo's order) and reward
    (``in_target``) as functions of a state, against dm_control's ``get_observation`` /
    ``get_reward`` on the same MuJoCo state, to 1e-12: random states (the ball anywhere within
    the string's reach, the cup displaced), and the ball put just inside and just outside the
    target box along x and z (the reward is 1 on some states and 0 on others)."""
    env, evaluate = bic
    ref = dm("ball_in_cup", "catch")
    rng = np.random.default_rng(3)
    states = []
    for _ in range(4):
        cup = rng.uniform(-0.2, 0.2, 2)
        states.append((np.r_[cup, rng.uniform(-0.25, 0.25), rng.uniform(0.0, 0.4)], None))
    lim = 0.05 - 0.025  # the target's half size minus the ball's radius
    for dx, dz in ((0, 0), (lim - 1e-3, 0), (lim + 1e-3, 0), (0, lim - 1e-3), (0, -lim - 1e-3)):
        cup = rng.uniform(-0.1, 0.1, 2)  # ball world = (0, 0.2) + qpos; target = (0, 0.55) + cup
        states.append((np.r_[cup, cup[0] + dx, cup[1] + 0.35 + dz], None))
    rewards = []
    for q, _ in states:
        v, a = rng.standard_normal(4), rng.uniform(-1.3, 1.3, 2)
        got_obs, got_rew = evaluate(jnp.asarray(env.q_of(q)), jnp.asarray(env.q_of(v)), a)
        want_obs, want_rew, _ = _dm_eval(ref, q, v, a)
        np.testing.assert_allclose(got_obs, want_obs, atol=1e-12, rtol=0)
        assert float(got_rew) == want_rew
        rewards.append(want_rew)
    assert rewards[4:] == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert env.dt == pytest.approx(0.02) and env.n_frames == 10
    assert env.scene.ignored == () and env.sys.cfg.spatial_tendons is not None


# slow: a compile of the contact step (the default test above covers the observation and the
# reward; test_activation_state_carried_like_mujoco, SuiteEnv.advance)
#: scenario -> (MuJoCo qpos, qvel, control of step k, control steps)
BIC_ROLLOUTS = {
    # dropped into the cup: it rests there (reward 1 at the end)
    "rest": ([0.0, 0.0, 0.0, 0.35], [0.0, 0.0, 0.0, 0.0], lambda k: (0.0, 0.0), 50),
    # thrown up against the cup's underside: it bounces off and hangs below on the string
    "bounce": ([0.0, 0.0, 0.0, 0.1], [0.0, 0.0, 0.0, 2.0], lambda k: (0.0, 0.0), 50),
    # released to the side: it swings on the taut string
    "swing": ([0.0, 0.0, 0.25, 0.15], [0.0, 0.0, 0.0, 0.0], lambda k: (0.0, 0.0), 100),
    # the cup jerked up and sideways, then released; the cup whirled
    "jerk": ([0.0] * 4, [0.0] * 4, lambda k: (1.0, -1.0) if k < 10 else (0.0, 0.0), 100),
    "whirl": ([0.0] * 4, [0.0] * 4, lambda k: (np.sin(0.6 * k), np.cos(0.6 * k)), 100),
}


@pytest.mark.slow
def test_ball_in_cup_outcome_like_mujoco(bic):
    """From the same state under the same controls, jaxdyn's ``ball_in_cup_catch`` against
    MuJoCo C (``mj_step``, dm_control's model and periods): the string holds the ball as
    MuJoCo's (its length, :class:`jaxdyn.sim.SpatialTendons`, stretches past the 0.3 m limit by
    up to 2 cm as MuJoCo's soft limit, both MuJoCo's tendon limit constraint; under the former
    spring-damper 6 mm at most); where nothing touches (the swing and the whirl on the string)
    the ball follows MuJoCo's states to 1e-10 (seen: 2e-15); the dropped ball rests in the cup
    (reward 1 over the last 10 steps in both, the same position to 5 mm); the thrown ball
    bounces off the cup's underside (its vertical speed reverses within one control step of
    MuJoCo's, it never enters the target) and hangs below the cup at the end in both (to 1 cm);
    after the swing and the jerk the ball hangs at MuJoCo's position to 2 cm."""
    env, _ = bic
    m = env.scene.mj_model
    step = jax.jit(env.step)
    length = jax.jit(lambda q: env.sys.cfg.spatial_tendons.jacobian(env.sys.model, q)[0][0])
    target, ball = m.site("target").id, m.body("ball").id
    for name, (qpos, qvel, control, n) in BIC_ROLLOUTS.items():
        d = mujoco.MjData(m)
        d.qpos[:], d.qvel[:] = qpos, qvel
        mujoco.mj_forward(m, d)
        ps = env.pipeline_init(env.q_of(np.asarray(qpos)), env.q_of(np.asarray(qvel)))
        s = env.episode_start(jax.random.PRNGKey(0), ps)
        lengths, rewards, vz, err = [], [], [], 0.0
        for k in range(n):
            u = np.asarray(control(k), float)
            s = step(s, jnp.asarray(u))
            d.ctrl[:] = u
            mujoco.mj_step(m, d, env.n_frames)
            rel = np.abs(d.site_xpos[target, [0, 2]] - d.xpos[ball, [0, 2]])
            rewards.append((float(s.reward), float(np.all(rel < 0.025))))
            lengths.append((float(length(s.pipeline_state.q)), float(d.ten_length[0])))
            vz.append((float(env.qpos(s.pipeline_state.v)[3]), float(d.qvel[3])))
            err = max(err, float(np.abs(env.qpos(np.asarray(s.pipeline_state.q)) - d.qpos).max()))
        q = np.asarray(env.qpos(s.pipeline_state.q))
        lengths, rewards, vz = np.asarray(lengths), np.asarray(rewards), np.asarray(vz)
        assert float(s.done) == 0.0, name
        assert lengths[:, 0].max() < 0.3 + 2.5e-2, name
        assert lengths[:, 1].max() < 0.3 + 2.5e-2, name
        if name in ("swing", "whirl"):
            assert lengths[:, 1].max() > 0.3 and err < 1e-10, name
        if name == "rest":
            assert np.all(rewards[-10:] == 1.0)
            np.testing.assert_allclose(q, d.qpos, atol=5e-3)
        elif name == "bounce":
            assert np.all(rewards == 0.0)
            down = np.argmax(vz < 0.5, axis=0)  # the first step after the hit
            assert abs(int(down[0]) - int(down[1])) <= 1 and down[0] > 0
            assert q[3] < 0.0 and d.qpos[3] < 0.0  # hangs below the cup (ball_z < 0)
            np.testing.assert_allclose(q, d.qpos, atol=1e-2)
        elif name in ("swing", "jerk"):
            np.testing.assert_allclose(q, d.qpos, atol=2e-2)


def test_playground_reset_qpos0():
    """``reset="qpos0"`` (Playground's reset of ``BallInCup`` and the humanoid): the reset's
    pose is MuJoCo's ``qpos0`` (jaxdyn's order), for any key; a bad mode is refused naming
    ``reset``. (Model loading only: the pose is drawn before any compiled step.)"""
    env = envs.make("ball_in_cup_catch", reset="qpos0")
    m = env.scene.mj_model
    for seed in (0, 1):
        q = np.asarray(env.draw_pose(jax.random.PRNGKey(seed)))
        np.testing.assert_array_equal(env.qpos(q), m.qpos0)
    assert envs.make("ball_in_cup_catch").reset_mode == "random"
    with pytest.raises(ValueError, match="BallInCup: reset must be 'random'"):
        envs.make("ball_in_cup_catch", reset="zero")
    with pytest.raises(ValueError, match="SuiteHumanoid: reset must be 'random'"):
        envs.make("dm_humanoid_walk", reset="keyframe")


@pytest.mark.slow
def test_ball_in_cup_reset_is_collision_free():
    """``ball_in_cup_catch``'s reset (dm_control: redraw until nothing touches): every state of
    a batch is free of contact in MuJoCo, the ball in dm_control's ranges, the cup at rest at
    its origin (the default ``test_ball_in_cup_functions_match_dm_control`` covers the
    observation of a state)."""
    env = envs.make("ball_in_cup_catch")
    m = env.scene.mj_model
    d = mujoco.MjData(m)
    s = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), 64))
    obs = np.asarray(s.obs)
    np.testing.assert_array_equal(obs[:, [0, 1, 4, 5, 6, 7]], 0.0)
    assert np.all(np.abs(obs[:, 2]) <= 0.2) and np.all((obs[:, 3] >= 0.2) & (obs[:, 3] <= 0.5))
    for q in np.asarray(s.pipeline_state.q):
        d.qpos[:] = env.qpos(q)
        mujoco.mj_forward(m, d)
        assert d.ncon == 0


# ------------------------------------------------------------------------------- humanoid
#: dm_control task -> jaxdyn name
HUMANOID = {"stand": "dm_humanoid_stand", "walk": "dm_humanoid_walk", "run": "dm_humanoid_run"}


def test_humanoid_functions_match_dm_control(dm):
    """dm_control's humanoid tasks (stand, walk, run): observation (67: joint angles, head
    height, extremities in the torso's axes, the torso's vertical, the centre of mass velocity
    sensor, ``qvel`` with the free root's linear velocity in world axes) and reward as
    functions of a state and an action, against dm_control's ``get_observation`` /
    ``get_reward`` on the same MuJoCo state, to 1e-12: contact-free states, upright or tilted
    (the root's quaternion near identity or random), the root moving up to 3 m/s
    horizontally; each task's reward varies over them (the slow set draws resets; it has no
    humanoid rollout)."""
    import copy

    first = envs.make("dm_humanoid_stand")
    made = {"stand": first}  # the other tasks: the same model, another move_speed
    for t in HUMANOID:
        if t != "stand":
            made[t] = copy.copy(first)
            made[t].move_speed = type(first).WALK_SPEED if t == "walk" else first.RUN_SPEED
    assert envs.make("dm_humanoid_run").move_speed == made["run"].move_speed
    refs = {t: dm("humanoid", t) for t in HUMANOID}

    @jax.jit
    def evaluate(q, v, a):
        pk = sim.State(q, v)
        s = first.state_sensors(pk)
        return {t: (e.observe(pk, s), e.reward(pk, s, a)[0]) for t, e in made.items()}

    m = refs["stand"].physics.model
    ph = refs["stand"].physics
    rng = np.random.default_rng(7)
    states = []
    while len(states) < 6:
        q = np.asarray(m.qpos0, float).copy()
        tilt = len(states) % 3 == 2
        quat = rng.standard_normal(4) if tilt else np.r_[1.0, 0.1 * rng.standard_normal(3)]
        q[3:7] = quat / np.linalg.norm(quat)
        q[2] = 1.6 if tilt else rng.uniform(1.2, 1.5)
        lo, hi = m.jnt_range[1:, 0], m.jnt_range[1:, 1]
        q[7:] = rng.uniform(lo, hi) * 0.3
        v = rng.standard_normal(m.nv)
        v[:2] = rng.uniform(-3, 3, 2)
        with ph.reset_context():
            ph.data.qpos[:] = q
        if ph.data.ncon == 0:
            states.append((q, v, rng.uniform(-1.3, 1.3, m.nu)))
    rewards = {t: [] for t in HUMANOID}
    for q, v, a in states:
        qj = jnp.asarray(first.q_of(q))
        got = evaluate(qj, first.v_of(qj, jnp.asarray(v)), jnp.asarray(a))
        for t, ref in refs.items():
            want_obs, want_rew, ncon = _dm_eval(ref, q, v, a)
            assert ncon == 0
            np.testing.assert_allclose(got[t][0], want_obs, atol=1e-12, rtol=0)
            assert float(got[t][1]) == pytest.approx(want_rew, abs=1e-12)
            rewards[t].append(want_rew)
    for t in HUMANOID:
        assert np.ptp(rewards[t]) > 1e-3, t
    assert first.dt == pytest.approx(0.025) and first.n_frames == 5
    # the joint limits are MuJoCo's limit constraint on every limited hinge (the default
    # spring-damper, explicit in the step, diverged at the ankles under random actions:
    # test_humanoid_random_actions_like_mujoco)
    lc = first.sys.cfg.limit_constraints
    assert lc is not None and first.mujoco_limits == "constraint"
    assert len(lc.dof) == int(np.sum(m.jnt_limited)) == 21


@pytest.fixture(scope="module")
def humanoid():
    """``dm_humanoid_stand`` and its compiled ``step`` (slow tests only: the contact step
    compiles the solve of 161 geom pairs)."""
    env = envs.make("dm_humanoid_stand")
    return env, jax.jit(env.step)


@pytest.mark.slow
def test_humanoid_reset_is_collision_free():
    """``dm_humanoid_stand``'s reset (dm_control's ``randomize_limited_and_rotational_joints``,
    redrawn until nothing touches): every state of a batch is free of contact in MuJoCo, the
    hinges inside their ranges, the root at the model's position with a unit quaternion of
    non-negative entries (dm_control's draw), at rest. (Slow: the reset traces the 161 contact
    pairs of each draw; the default ``test_humanoid_functions_match_dm_control`` covers the
    observation of a state.)"""
    env = envs.make("dm_humanoid_stand")
    m = env.scene.mj_model
    d = mujoco.MjData(m)
    s = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), 16))
    assert s.obs.shape == (16, 67)
    np.testing.assert_array_equal(s.pipeline_state.v, 0.0)
    lo, hi = m.jnt_range[1:, 0], m.jnt_range[1:, 1]
    for q in np.asarray(s.pipeline_state.q):
        d.qpos[:] = env.qpos(q)
        mujoco.mj_forward(m, d)
        assert d.ncon == 0
        np.testing.assert_allclose(d.qpos[:3], m.qpos0[:3], atol=1e-15)
        assert np.linalg.norm(d.qpos[3:7]) == pytest.approx(1.0) and np.all(d.qpos[3:7] >= 0)
        assert np.all(lo <= d.qpos[7:]) and np.all(d.qpos[7:] <= hi)


@pytest.mark.slow
def test_humanoid_falls_like_mujoco(humanoid):
    """From the model's standing pose (``qpos0``) at rest under zero control, jaxdyn's
    ``dm_humanoid_stand`` against MuJoCo C for 2 s (80 control steps): the humanoid falls in
    both (the stand reward from above 0.9 at the first step to 0 at the end), and lies on the
    floor with the torso (root) and the head at MuJoCo's heights to 1.5 cm and 1 cm (measured:
    0.3 and 0.5 cm at 2 s under the hard contact, the default before, whose contact
    transients parted from MuJoCo's soft ones by up to 10 cm on the way down; the soft default's
    rollout under random controls equals MuJoCo's to rounding:
    ``test_envs_suite_contact.py::test_rollout_equals_mujoco``). (Slow: the step compiles the
    contact solve of 161 geom pairs, a minute or more; the default
    ``test_humanoid_functions_match_dm_control`` covers the observation and the reward.)"""
    env, step = humanoid
    m = env.scene.mj_model
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    ps = env.pipeline_init(env.q_of(d.qpos.copy()), jnp.zeros(m.nv))
    s = env.episode_start(jax.random.PRNGKey(0), ps)
    a = np.zeros(m.nu)
    rewards = []
    for _ in range(80):
        s = step(s, jnp.asarray(a))
        mujoco.mj_step(m, d, env.n_frames)
        rewards.append(float(s.reward))
    q = np.asarray(env.qpos(s.pipeline_state.q))
    assert float(s.done) == 0.0
    assert rewards[0] > 0.9 and rewards[-1] < 1e-3
    assert q[2] < 0.5 and d.qpos[2] < 0.5  # both fell
    assert abs(q[2] - d.qpos[2]) < 1.5e-2
    assert abs(float(s.obs[21]) - d.xpos[m.body("head").id, 2]) < 1e-2


@pytest.mark.slow
def test_humanoid_random_actions_like_mujoco(humanoid):
    """Uniformly random actions in ``[-1, 1]`` (what RL training samples at the start) from 4
    of ``dm_humanoid_stand``'s random resets (in the air, limbs anywhere in their ranges), 12
    control steps (0.3 s) against MuJoCo C on the same file from the same states under the same
    actions: no step diverges and the largest joint speed of every control step stays within
    a factor 1.6 of MuJoCo's largest (MuJoCo: at most about 50 rad/s; with the default
    ``JointLimits`` spring-damper, explicit in the step with ``dt * damping / M`` up to 3.8 at
    the ankles, each of these 4 episodes diverged within 10 control steps); until the first contact
    (nothing touches in the first 2 control steps) the states follow MuJoCo's limit
    constraint to 1e-6. (Slow: shares ``test_humanoid_falls_like_mujoco``'s compiled step;
    the default ``test_humanoid_functions_match_dm_control`` checks the limit constraint is
    configured, and ``tests/test_limit_constraints.py`` checks the rows against MuJoCo.)"""
    env, step = humanoid
    m = env.scene.mj_model
    d = mujoco.MjData(m)
    rng = np.random.default_rng(0)
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    for key in keys:
        s = env.reset(key)
        d.qpos[:] = env.qpos(np.asarray(s.pipeline_state.q))
        d.qvel[:] = 0.0
        mujoco.mj_forward(m, d)
        for k in range(12):
            a = rng.uniform(-1.0, 1.0, m.nu)
            s = step(s, jnp.asarray(a))
            d.ctrl[:] = a
            mujoco.mj_step(m, d, env.n_frames)
            assert float(s.done) == 0.0, k
            q = np.asarray(s.pipeline_state.q)
            v = np.asarray(env.qvel(s.pipeline_state.q, s.pipeline_state.v))
            assert np.all(np.isfinite(v))
            assert np.abs(v).max() < 1.6 * max(np.abs(d.qvel).max(), 30.0), k
            if k < 2:
                assert d.ncon == 0
                np.testing.assert_allclose(env.qpos(q), d.qpos, atol=1e-6)

"""``fish_swim`` (:class:`jaxdyn.envs.dm_control_suite.FishSwim`) against dm_control and MuJoCo C.

Oracles: dm_control's task functions (``dm_control.suite.fish``'s ``Swim.get_observation`` /
``get_reward``) on the same MuJoCo states; MuJoCo C's ``mj_step`` on the bundled MJCF from the
environment's reset state under the same controls (the file's solver settings do not matter:
its constraints are disabled, MuJoCo has no constraint rows), with the observation and the
reward from MuJoCo's ``xmat`` / ``geom_xpos`` / ``geom_xmat`` and
``dm_control.utils.rewards.tolerance``.
"""

from __future__ import annotations

import pytest

mujoco = pytest.importorskip("mujoco")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

# dm_control's environments (the fixture patches dm_control's index table for this MuJoCo)
from test_envs_suite_contact import dm as dm  # noqa: E402

from jaxdyn import envs, sim  # noqa: E402
from jaxdyn.envs import dm_control_suite as suite  # noqa: E402

TOL = 1e-8
#: dm_control's observation order (joint angles, upright, target, velocity) from Playground's
DM_ORDER = np.r_[1:8, 0, 8:24]


@pytest.fixture(scope="module")
def task():
    env = envs.make("fish_swim")
    return env, jax.jit(env.reset), jax.jit(env.step)


def _mujoco_obs(env, m, d, joints, upright_body):
    """Playground's observation of MuJoCo's ``d`` (its derived quantities as they are)."""
    mouth, target = m.geom("mouth").id, m.geom("target").id
    to_target = (d.geom_xpos[target] - d.geom_xpos[mouth]) @ d.geom_xmat[mouth].reshape(3, 3)
    upright = d.xmat[upright_body, 8]
    return np.concatenate([[upright], d.qpos[joints], to_target, d.qvel]), to_target, upright


def test_functions_match_dm_control(task, dm):
    """Observation and reward as functions of a state and a target against dm_control's
    ``fish`` ``swim`` task on the same MuJoCo state (its target geom moved to the target), to
    rounding: random poses (any orientation), velocities and joint angles, targets in the
    task's box and at multiples of ``radii`` from the mouth (the reward takes values across
    its range)."""
    env = task[0]
    ref = dm("fish", "swim")
    ph = ref.physics

    @jax.jit
    def evaluate(qpos, qvel, target):
        q = env.q_of(qpos)
        pk = sim.State(q, env.v_of(q, qvel))
        return env.observe(pk, q, target), env.reward(pk, q, target)[0]

    rng = np.random.default_rng(3)
    in_target = []
    for k in range(8):
        q = np.concatenate([0.2 * rng.standard_normal(3), rng.standard_normal(4), np.zeros(7)])
        q[3:7] /= np.linalg.norm(q[3:7])
        q[7:] = rng.uniform(-1, 1, 7)
        v = rng.standard_normal(ph.model.nv)
        with ph.reset_context():
            ph.data.qpos[:], ph.data.qvel[:] = q, v
        if k < 3:
            target = rng.uniform(env.TARGET_LOW, env.TARGET_HIGH)
        else:  # at 0.5, 1.5, 2.5, 3.5, 5 radii from the mouth
            u = rng.standard_normal(3)
            r = (0.5, 1.5, 2.5, 3.5, 5.0)[k - 3] * env.radii
            target = ph.named.data.geom_xpos["mouth"] + r * u / np.linalg.norm(u)
        with ph.reset_context():
            ph.named.model.geom_pos["target"] = target
            ph.data.qpos[:], ph.data.qvel[:] = q, v
        want_obs = np.concatenate([np.ravel(x) for x in ref.task.get_observation(ph).values()])
        want_reward = float(ref.task.get_reward(ph))
        assert ph.data.ncon == 0
        obs, reward = evaluate(jnp.asarray(q), jnp.asarray(v), jnp.asarray(target))
        np.testing.assert_allclose(np.asarray(obs)[DM_ORDER], want_obs, atol=1e-12, rtol=0)
        assert float(reward) == pytest.approx(want_reward, abs=1e-12)
        upright = 0.5 * (ph.named.data.xmat["torso", "zz"] + 1)
        in_target.append((8 * want_reward - upright) / 7)
    assert max(in_target) == pytest.approx(1) and min(in_target) < 1e-3
    assert sum(0.05 < x < 0.95 for x in in_target) >= 2


def test_follows_mujoco(task):
    """From the reset state of key 0, constant controls (two beyond the control range: MuJoCo
    clamps them) for 1 s (25 control steps of 20 simulator steps): jaxdyn's states follow
    MuJoCo C's ``mj_step`` on the file to 1e-8 at every control step (seen 1e-14), MuJoCo
    computing no contact (``ncon == 0``) and no constraint row; the observation and the reward
    are Playground's formulas of MuJoCo's quantities at the state before the step's last
    integration (as ``mjx.step`` leaves them), the target MuJoCo's mocap body; the reset's
    observation sees the model's target (Playground's reset)."""
    tol = pytest.importorskip("dm_control.utils.rewards").tolerance
    env, reset, step = task
    m = mujoco.MjModel.from_xml_path(f"{suite.XML_DIR}/{env.xml}")
    d = mujoco.MjData(m)
    joints, torso = env.joint_qposadr, m.body("torso").id
    s = reset(jax.random.PRNGKey(0))
    d.qpos[:] = env.qpos(np.asarray(s.pipeline_state.q))
    mujoco.mj_forward(m, d)
    np.testing.assert_allclose(s.obs, _mujoco_obs(env, m, d, joints, torso)[0], atol=1e-14)
    d.mocap_pos[0] = np.asarray(s.info["target"])
    action = np.array([1.4, -0.6, -1.3, 0.5, -0.8])
    speed = 0.0
    for _ in range(round(1.0 / env.dt)):
        s = step(s, jnp.asarray(action))
        d.ctrl[:] = action
        mujoco.mj_step(m, d, env.n_frames - 1)
        mujoco.mj_kinematics(m, d)  # the derived quantities of the last step's start
        _, to_target, upright = _mujoco_obs(env, m, d, joints, torso)
        mujoco.mj_step(m, d)
        ps = s.pipeline_state
        np.testing.assert_allclose(env.qpos(ps.q), d.qpos, atol=TOL, rtol=0)
        np.testing.assert_allclose(env.qvel(ps.q, ps.v), d.qvel, atol=TOL, rtol=0)
        want = np.concatenate([[upright], d.qpos[joints], to_target, d.qvel])
        np.testing.assert_allclose(s.obs, want, atol=TOL, rtol=0)
        in_target = tol(np.linalg.norm(to_target), (0, env.radii), margin=2 * env.radii)
        assert float(s.reward) == pytest.approx((7 * in_target + (upright + 1) / 2) / 8, abs=TOL)
        assert float(s.done) == 0.0 and d.ncon == 0 and d.nefc == 0
        speed = max(speed, np.abs(d.qvel).max())
    assert speed > 0.5  # the tail and fins beat


def test_registered_reset_and_batched(task):
    """Registered by name; Playground's reset (the key split in four: the root's quaternion a
    normalised normal draw, the joints ``U(-.2, .2)``, the target uniform in its box; the root
    at the origin, at rest); ``jax.vmap``-batched reset and step with the contract's shapes
    (traced, not run) and the same metric keys."""
    env = task[0]
    assert envs.ENVIRONMENTS["fish_swim"] is suite.FishSwim
    assert (env.observation_size, env.action_size) == (24, 5)
    assert env.dt == pytest.approx(0.04) and env.n_frames == 20
    keys = jax.random.split(jax.random.PRNGKey(1), 4)
    s = jax.jit(jax.vmap(env.reset))(keys)
    for k, q, target in zip(keys, np.asarray(s.pipeline_state.q), np.asarray(s.info["target"])):
        _, r1, r2, r3 = jax.random.split(k, 4)
        quat = np.asarray(jax.random.normal(r1, (4,)))
        qpos = env.qpos(q)
        np.testing.assert_allclose(qpos[3:7], quat / np.linalg.norm(quat), atol=1e-15)
        want = jax.random.uniform(r2, (7,), minval=-0.2, maxval=0.2)
        np.testing.assert_allclose(qpos[env.joint_qposadr], want, rtol=1e-14, atol=1e-15)
        assert np.all(qpos[:3] == 0) and qpos.shape == (14,)
        lo, hi = jnp.asarray(env.TARGET_LOW), jnp.asarray(env.TARGET_HIGH)
        np.testing.assert_allclose(
            target, jax.random.uniform(r3, (3,), minval=lo, maxval=hi), rtol=1e-14, atol=1e-15
        )
    assert np.all(np.asarray(s.pipeline_state.v) == 0) and s.obs.shape == (4, 24)
    s1 = jax.eval_shape(jax.vmap(env.step), s, jnp.zeros((4, 5)))
    assert s1.obs.shape == (4, 24) and s1.reward.shape == (4,) and s1.done.shape == (4,)
    assert set(s1.metrics) == set(s.metrics) == {"reward/in_target", "reward/upright", "diverged"}

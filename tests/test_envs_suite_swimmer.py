"""``swimmer_swimmer6`` (:class:`jaxdyn.envs.dm_control_suite.Swimmer`) against dm_control and
MuJoCo C.

Oracles: dm_control's task functions (``dm_control.suite.swimmer``'s ``get_observation`` /
``get_reward`` of ``swimmer6``) on the same MuJoCo states and targets; MuJoCo C's ``mj_step``
on the bundled MJCF from the environment's reset state under the same controls, its solve
converged as in ``tests/test_envs_suite_point_mass.py`` (on this rollout the file's
``iterations="4"`` already gives the converged states), with the observation from MuJoCo's
``qpos``, ``geom_xpos``, ``xmat`` and ``sensordata`` (dm_control's formulas) and the reward
from ``dm_control.utils.rewards``.
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


@pytest.fixture(scope="module")
def task():
    env = envs.make("swimmer_swimmer6")
    return env, jax.jit(env.reset), jax.jit(env.step)


def _mujoco_obs(m, d):
    """dm_control's ``swimmer`` observation of MuJoCo's quantities, flattened in its order."""
    target, nose = d.geom_xpos[m.geom("target").id], d.geom_xpos[m.geom("nose").id]
    to_target = ((target - nose) @ d.xmat[m.body("head").id].reshape(3, 3))[:2]
    velocities = d.sensordata[12:].reshape(-1, 6)[:, [0, 1, 5]].ravel()
    return np.concatenate([d.qpos[3:], to_target, velocities])


def test_functions_match_dm_control(task, dm):
    """Observation and reward as functions of a state and a target against dm_control's
    ``swimmer6`` task on the same MuJoCo state, to rounding: random poses (hinges in and
    beyond their ranges) and velocities, the target inside, within its margin and beyond it
    from the nose (the reward takes values across ``[0, 1]``)."""
    env = task[0]
    ref = dm("swimmer", "swimmer6")
    ph = ref.physics

    @jax.jit
    def evaluate(q, v, target):
        pk = sim.State(q, v)
        return env.observe(pk, pk, target), env.reward(pk, q, target)[0]

    rng = np.random.default_rng(5)
    size = env.target_size
    rewards = []
    for r in (0.5 * size, 0.9 * size, 2 * size, 4 * size, 8 * size, 1.5):
        q = np.concatenate([rng.normal(0, 0.5, 2), rng.uniform(-np.pi, np.pi, 1)])
        q = np.concatenate([q, rng.uniform(-1.3, 1.3, 5) * env.uppers])
        v = rng.standard_normal(8)
        with ph.reset_context():
            ph.data.qpos[:], ph.data.qvel[:] = q, v
        angle = rng.uniform(0, 2 * np.pi)
        target = ph.named.data.geom_xpos["nose", :2] + r * np.array([np.cos(angle), np.sin(angle)])
        ph.named.model.geom_pos["target", :2] = target
        with ph.reset_context():
            ph.data.qpos[:], ph.data.qvel[:] = q, v
        want_obs = np.concatenate([np.ravel(x) for x in ref.task.get_observation(ph).values()])
        want_reward = float(ref.task.get_reward(ph))
        obs, reward = evaluate(jnp.asarray(q), jnp.asarray(v), jnp.asarray(target))
        np.testing.assert_allclose(obs, want_obs, atol=1e-12, rtol=0)
        assert float(reward) == pytest.approx(want_reward, abs=1e-12)
        rewards.append(want_reward)
    assert max(rewards) == 1.0 and 0.05 < sorted(rewards)[2] < 0.9 and min(rewards) < 0.02


def test_follows_mujoco(task):
    """From the reset state of key 0, fixed open-loop controls (four random ``ctrl`` vectors in
    ``[-1, 1]``, each held a quarter of the time) for 1 s: jaxdyn's states follow MuJoCo C's
    (the fluid forces, the motors, the hinges' stops: limit rows active in MuJoCo) to 1e-8 at
    every control step, and so do the observation (the quantities of the state before the
    step's last integration, as ``mjx.step`` leaves them for Playground, and at reset the
    model's target) and the reward."""
    tol = pytest.importorskip("dm_control.utils.rewards").tolerance
    env, reset, step = task
    m = mujoco.MjModel.from_xml_path(f"{suite.XML_DIR}/{env.xml}")
    m.opt.iterations, m.opt.ls_iterations, m.opt.tolerance = 100, 50, 1e-14
    d = mujoco.MjData(m)
    s = reset(jax.random.PRNGKey(0))
    d.qpos[:], d.qvel[:] = np.asarray(s.pipeline_state.q), np.asarray(s.pipeline_state.v)
    mujoco.mj_forward(m, d)
    np.testing.assert_allclose(s.obs, _mujoco_obs(m, d), atol=1e-14, rtol=0)
    d.mocap_pos[0, :2] = np.asarray(s.info["target"])
    size = env.target_size
    controls = np.random.default_rng(0).uniform(-1, 1, (4, 5))
    n = round(1.0 / env.dt)
    rows = 0
    for k in range(n):
        action = controls[4 * k // n]
        s = step(s, jnp.asarray(action))
        d.ctrl[:] = action
        mujoco.mj_step(m, d, env.n_frames - 1)
        mujoco.mj_forward(m, d)  # the quantities before the last simulator step
        obs = _mujoco_obs(m, d)
        dist = np.linalg.norm(obs[5:7])
        rows = max(rows, int(d.nefc))
        mujoco.mj_step(m, d)
        obs[:5] = d.qpos[3:]
        np.testing.assert_allclose(s.pipeline_state.q, d.qpos, atol=TOL, rtol=0)
        np.testing.assert_allclose(s.pipeline_state.v, d.qvel, atol=TOL, rtol=0)
        np.testing.assert_allclose(s.obs, obs, atol=TOL, rtol=0)
        want = tol(dist, (0, size), margin=5 * size, sigmoid="long_tail")
        assert float(s.reward) == pytest.approx(want, abs=TOL)
        assert float(s.done) == 0.0
    assert rows > 0  # hinges went into their stops


def test_registered_reset_and_batched(task):
    """Registered by name; Playground's reset (``rootz`` and the hinges uniform from the
    second and third keys of the split, the target's half-side and position from the fourth
    and fifth, at rest at the origin); ``jax.vmap``-batched reset and step with the contract's
    shapes (traced, not run) and the same metric keys."""
    env = task[0]
    assert envs.ENVIRONMENTS["swimmer_swimmer6"] is suite.Swimmer
    assert (env.observation_size, env.action_size) == (25, 5)
    assert env.dt == pytest.approx(0.03) and env.n_frames == 10
    keys = jax.random.split(jax.random.PRNGKey(1), 4)
    s = jax.jit(jax.vmap(env.reset))(keys)
    lo, hi = env.lowers, env.uppers
    for k, q, target in zip(keys, np.asarray(s.pipeline_state.q), np.asarray(s.info["target"])):
        _, r1, r2, r3, r4 = jax.random.split(k, 5)
        # the same draws to rounding (XLA may fuse the draw's scaling differently under jit)
        assert np.all(q[:2] == 0)
        draw = jax.random.uniform(r1, (), minval=-np.pi, maxval=np.pi)
        np.testing.assert_allclose(q[2], draw, rtol=1e-14, atol=1e-15)
        draw = jax.random.uniform(r2, (5,), minval=lo, maxval=hi)
        np.testing.assert_allclose(q[3:], draw, rtol=1e-14, atol=1e-15)
        box = 0.3 if jax.random.bernoulli(r3, 0.2) else 2.0
        draw = jax.random.uniform(r4, (2,), minval=-box, maxval=box)
        np.testing.assert_allclose(target, draw, rtol=1e-14, atol=1e-15)
    assert np.all(np.asarray(s.pipeline_state.v) == 0) and s.obs.shape == (4, 25)
    s1 = jax.eval_shape(jax.vmap(env.step), s, jnp.zeros((4, 5)))
    assert s1.obs.shape == (4, 25) and s1.reward.shape == (4,) and s1.done.shape == (4,)
    assert set(s1.metrics) == set(s.metrics) == {"distance", "diverged"}

"""``point_mass_easy`` (:class:`jaxdyn.envs.dm_control_suite.PointMass`) against dm_control and
MuJoCo C.

Oracles: dm_control's task functions (``dm_control.suite.point_mass``'s ``get_observation`` /
``get_reward``) on the same MuJoCo states; MuJoCo C's ``mj_step`` on the bundled MJCF from the
environment's reset state under the same controls, its solve converged (the file's
``iterations="1"`` leaves MuJoCo's own limit force unconverged at a stop), with the
observation and the reward from MuJoCo's ``qpos`` / ``qvel`` / ``geom_xpos`` and
``dm_control.utils.rewards.tolerance``.
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

TOL = 1e-9


@pytest.fixture(scope="module")
def task():
    env = envs.make("point_mass_easy")
    return env, jax.jit(env.reset), jax.jit(env.step)


def test_functions_match_dm_control(task, dm):
    """Observation and reward as functions of a state and an action against dm_control's
    ``point_mass`` ``easy`` task on the same MuJoCo state, to rounding: random states in and
    beyond the joints' ranges and actions in and beyond ``[-1, 1]``, and states inside the
    target, within its margin and beyond it (the reward takes values across ``[0, 1]``)."""
    env = task[0]
    ref = dm("point_mass", "easy")

    @jax.jit
    def evaluate(q, v, a):
        pk = sim.State(q, v)
        return env.observe(pk, q), env.reward(pk, q, a)[0]

    rng = np.random.default_rng(5)
    size = env.target_size
    states = [(rng.uniform(-0.32, 0.32, 2), rng.standard_normal(2), rng.uniform(-1.3, 1.3, 2))]
    for r in (0.3 * size, 0.9 * size, 1.5 * size, 2.5 * size, 0.2):
        angle = rng.uniform(0, 2 * np.pi)
        q = r * np.array([np.cos(angle), np.sin(angle)])
        states.append((q, rng.standard_normal(2), rng.uniform(-1.3, 1.3, 2)))
    rewards = []
    for q, v, a in states:
        obs, reward = evaluate(jnp.asarray(q), jnp.asarray(v), jnp.asarray(a))
        want_obs, want_reward, ncon = _dm_eval(ref, q, v, a)
        assert ncon == 0
        np.testing.assert_allclose(obs, want_obs, atol=1e-12, rtol=0)
        assert float(reward) == pytest.approx(want_reward, abs=1e-12)
        rewards.append(want_reward)
    assert max(rewards) > 0.7 and 0.05 < sorted(rewards)[3] < 0.7 and min(rewards) < 0.01


def test_follows_mujoco_into_its_stops(task):
    """From the reset state of key 0 (both joints near a stop), a constant action beyond the
    control range (MuJoCo clamps it) drives the mass into a corner for 1 s (the file's 50
    control steps of one simulator step): jaxdyn's states follow MuJoCo C's to 1e-9 at every
    step, both joints going past their (soft) stops, both limit rows active in MuJoCo; the
    observation and the reward are dm_control's formulas of MuJoCo's quantities (``geom_xpos``
    at the state before the step's integration, as ``mjx.step`` leaves it for Playground)."""
    tol = pytest.importorskip("dm_control.utils.rewards").tolerance
    env, reset, step = task
    m = mujoco.MjModel.from_xml_path(f"{suite.XML_DIR}/{env.xml}")
    m.opt.iterations, m.opt.ls_iterations, m.opt.tolerance = 100, 50, 1e-14
    lo, hi = m.jnt_range.T
    d = mujoco.MjData(m)
    s = reset(jax.random.PRNGKey(0))
    d.qpos[:], d.qvel[:] = np.asarray(s.pipeline_state.q), np.asarray(s.pipeline_state.v)
    mujoco.mj_forward(m, d)
    np.testing.assert_allclose(s.obs, np.concatenate([d.qpos, d.qvel]), atol=1e-15)
    action = np.array([-1.5, 1.5])
    target, mass = m.geom("target").id, m.geom("pointmass").id
    size = m.geom_size[target, 0]
    past = np.zeros(2)
    rows = 0
    for _ in range(round(1.0 / env.dt)):
        s = step(s, jnp.asarray(action))
        d.ctrl[:] = action
        mujoco.mj_step(m, d, env.n_frames)
        np.testing.assert_allclose(s.pipeline_state.q, d.qpos, atol=TOL, rtol=0)
        np.testing.assert_allclose(s.pipeline_state.v, d.qvel, atol=10 * TOL, rtol=0)
        np.testing.assert_allclose(s.obs, np.concatenate([d.qpos, d.qvel]), atol=10 * TOL)
        dist = np.linalg.norm(d.geom_xpos[target] - d.geom_xpos[mass])
        small = tol(action, margin=1, value_at_margin=0, sigmoid="quadratic").mean()
        want = tol(dist, (0, size), margin=size) * (4 + small) / 5
        assert float(s.reward) == pytest.approx(want, abs=1e-12)
        assert float(s.done) == 0.0
        past = np.maximum(past, np.maximum(lo - d.qpos, d.qpos - hi))
        rows = max(rows, int(d.nefc))
    assert np.all(past > 2e-4) and rows == 2  # both joints went into their stops


def test_registered_reset_and_batched(task):
    """Registered by name; Playground's reset (each joint uniform over its range from the
    second half of the key's split, at rest); ``jax.vmap``-batched reset and step with the
    contract's shapes (traced, not run) and the same metric keys."""
    env = task[0]
    assert envs.ENVIRONMENTS["point_mass_easy"] is suite.PointMass
    assert (env.observation_size, env.action_size) == (4, 2)
    assert env.dt == pytest.approx(0.02) and env.n_frames == 1
    keys = jax.random.split(jax.random.PRNGKey(1), 4)
    s = jax.jit(jax.vmap(env.reset))(keys)
    lo, hi = env.lowers, env.uppers
    for k, q in zip(keys, np.asarray(s.pipeline_state.q)):
        want = jax.random.uniform(jax.random.split(k)[1], (2,), minval=lo, maxval=hi)
        np.testing.assert_allclose(q, want, rtol=1e-14, atol=1e-15)  # to rounding: jit vs eager
    assert np.all(np.asarray(s.pipeline_state.v) == 0) and s.obs.shape == (4, 4)
    s1 = jax.eval_shape(jax.vmap(env.step), s, jnp.zeros((4, 2)))
    assert s1.obs.shape == (4, 4) and s1.reward.shape == (4,) and s1.done.shape == (4,)
    assert set(s1.metrics) == set(s.metrics) >= {"reward/near_target", "reward/small_control"}

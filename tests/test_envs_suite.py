"""DeepMind Control Suite tasks (:mod:`jaxdyn.envs.dm_control_suite`) against MuJoCo C and
dm_control.

Oracles: MuJoCo C steps the same bundled MJCF from the environment's reset state under the same
actions (``n_substeps`` ``mj_step`` per control step, ``ctrl`` = action, clamped by MuJoCo):
jaxdyn's states follow to 1e-9 (float64) over 25 control steps; observations are built from
MuJoCo's ``xmat`` / ``site_xpos`` / ``qvel`` and rewards with ``dm_control.utils.rewards``
(dm_control's own ``tolerance``) as Playground's tasks define them; MuJoCo's ``mj_step``
leaves ``xmat`` / ``site_xpos`` at the state before its integration, as ``mjx.step`` does for
Playground. The default set steps ``cartpole_swingup`` and ``reacher_easy``; the other tasks'
rollouts and a short Brax PPO run on ``cartpole_balance`` are ``slow``.
"""

from __future__ import annotations

import pytest

mujoco = pytest.importorskip("mujoco")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxdyn import envs  # noqa: E402
from jaxdyn.envs import dm_control_suite as suite  # noqa: E402
from jaxdyn.envs.rewards import SIGMOIDS, tolerance  # noqa: E402

TOL = 1e-9
STEPS = 25


def _dm_rewards():
    return pytest.importorskip("dm_control.utils.rewards")


def _mj_model(xml):
    return mujoco.MjModel.from_xml_path(f"{suite.XML_DIR}/{xml}")


def _cartpole(d, m, action, sparse=False):
    tol = _dm_rewards().tolerance
    obs = np.concatenate([d.qpos[:1], d.xmat[2:, 8], d.xmat[2:, 2], d.qvel])
    cos, cart = d.xmat[2, 8], d.qpos[0]
    if sparse:
        return obs, tol(cart, (-0.25, 0.25)) * np.prod(tol(d.xmat[2:, 8], (0.995, 1)))
    upright = (cos + 1) / 2
    centered = (1 + tol(cart, margin=2)) / 2
    small_control = (4 + tol(action[0], margin=1, value_at_margin=0, sigmoid="quadratic")) / 5
    small_velocity = (1 + np.min(tol(d.qvel[1:], margin=5))) / 2
    return obs, upright * centered * small_control * small_velocity


def _pendulum(d, m, action):
    tol = _dm_rewards().tolerance
    b = m.body("pole").id
    obs = np.array([d.xmat[b, 2], d.xmat[b, 8], d.qvel[0]])
    return obs, tol(d.xmat[b, 8], (np.cos(np.deg2rad(8)), 1))


def _acrobot(d, m, action, sparse=False):
    tol = _dm_rewards().tolerance
    ids = [m.body("upper_arm").id, m.body("lower_arm").id]
    obs = np.concatenate([d.xmat[ids, 2], d.xmat[ids, 8], d.qvel])
    dist = np.linalg.norm(d.site_xpos[m.site("target").id] - d.site_xpos[m.site("tip").id])
    radius = m.site_size[m.site("target").id, 0]
    return obs, tol(dist, (0, radius), margin=0.0 if sparse else 1.0)


def _reacher(d, m, action):
    tol = _dm_rewards().tolerance
    t, f = m.geom("target").id, m.geom("finger").id
    delta = d.geom_xpos[t, :2] - d.geom_xpos[f, :2]
    radii = m.geom_size[t, 0] + m.geom_size[f, 0]  # the model's target: reacher_easy's
    return np.concatenate([d.qpos, delta, d.qvel]), tol(np.linalg.norm(delta), (0, radii))


CASES = {
    "reacher_easy": _reacher,
    "cartpole_swingup": _cartpole,
    "cartpole_balance_sparse": lambda d, m, a: _cartpole(d, m, a, sparse=True),
    "pendulum_swingup": _pendulum,
    "acrobot_swingup": _acrobot,
    "acrobot_swingup_sparse": lambda d, m, a: _acrobot(d, m, a, sparse=True),
}
#: in the default set: one task with one simulator step per control step, one with four
SLOW_CASES = (
    "cartpole_balance_sparse",
    "acrobot_swingup",
    "acrobot_swingup_sparse",
    "pendulum_swingup",
)


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(n, marks=pytest.mark.slow) if n in SLOW_CASES else n for n in sorted(CASES)
    ],
)
def task(request):
    env = envs.make(request.param)
    return request.param, env, jax.jit(env.reset), jax.jit(env.step)


def test_follows_mujoco(task):
    """Reset, then ``STEPS`` control steps of actions in and beyond ``[-1, 1]``: jaxdyn's state,
    observation and reward against MuJoCo C + dm_control's reward formula."""
    name, env, reset, step = task
    m = env.scene.mj_model
    d = mujoco.MjData(m)
    s = reset(jax.random.PRNGKey(3))
    d.qpos[:], d.qvel[:] = np.asarray(s.pipeline_state.q), np.asarray(s.pipeline_state.v)
    mujoco.mj_forward(m, d)
    obs, _ = CASES[name](d, m, np.zeros(env.action_size))
    np.testing.assert_allclose(s.obs, obs, atol=1e-12)
    if "target" in s.info:  # Playground moves the mocap target after its reset's forward
        d.mocap_pos[0, :2] = np.asarray(s.info["target"])
    n_sub = env.n_frames
    actions = 1.5 * np.sin(0.7 * np.arange(STEPS))[:, None] * np.ones(env.action_size)
    moved = 0.0
    for a in actions:
        s = step(s, jnp.asarray(a))
        d.ctrl[:] = a
        for _ in range(n_sub):
            mujoco.mj_step(m, d)
        obs, reward = CASES[name](d, m, a)
        np.testing.assert_allclose(s.pipeline_state.q, d.qpos, atol=TOL, rtol=0)
        np.testing.assert_allclose(s.pipeline_state.v, d.qvel, atol=10 * TOL, rtol=0)
        np.testing.assert_allclose(s.obs, obs, atol=10 * TOL, rtol=0)
        np.testing.assert_allclose(float(s.reward), reward, atol=1e-8)
        assert float(s.done) == 0.0
        moved = max(moved, float(np.abs(d.qvel).max()))
    assert moved > 0.05  # the actions moved it


def test_reset_matches_playground_distribution():
    """Playground's reset draws (same PRNG splits): cartpole swing-up hangs down, balance is
    near upright, the pendulum starts in ``[0, pi)``, the acrobot in ``[-pi, pi)``."""
    keys = jax.random.split(jax.random.PRNGKey(0), 16)
    up = jax.jit(jax.vmap(envs.make("cartpole_swingup").reset))(keys)
    assert np.all(np.abs(np.asarray(up.pipeline_state.q[:, 1]) - np.pi) < 0.05)
    bal = jax.jit(jax.vmap(envs.make("cartpole_balance").reset))(keys)
    assert np.all(np.abs(np.asarray(bal.pipeline_state.q)) <= 0.1)
    assert np.all(np.abs(np.asarray(bal.pipeline_state.q[:, 1])) <= 0.034)


@pytest.mark.parametrize("sigmoid", SIGMOIDS)
def test_tolerance_is_dm_controls(sigmoid):
    """:func:`jaxdyn.envs.rewards.tolerance` against ``dm_control.utils.rewards.tolerance`` for
    every sigmoid, inside, at and beyond the margin, and with ``margin = 0``."""
    ref = _dm_rewards().tolerance
    x = np.linspace(-4, 5, 37)
    vam = 0.0 if sigmoid in ("cosine", "linear", "quadratic") else 0.1
    for bounds, margin in (((-1.0, 0.5), 2.0), ((0.0, 0.0), 1.0), ((0.2, 1.0), 0.0)):
        got = tolerance(jnp.asarray(x), bounds, margin, sigmoid, vam)
        want = ref(x, bounds=bounds, margin=margin, sigmoid=sigmoid, value_at_margin=vam)
        np.testing.assert_allclose(got, want, atol=1e-14)
    with pytest.raises(ValueError, match="margin must be >= 0"):
        tolerance(x, margin=-1.0)
    with pytest.raises(ValueError, match="lower <= upper"):
        tolerance(x, (1.0, 0.0))


def test_registered_and_batched():
    """Every suite task is registered by name, resets and steps under ``jax.vmap`` with the
    contract's shapes (traced, not run: the rollouts above run them) and keeps its metric
    keys."""
    names = [
        "cartpole_balance",
        "cartpole_balance_sparse",
        "cartpole_swingup",
        "cartpole_swingup_sparse",
        "pendulum_swingup",
        "acrobot_swingup",
        "acrobot_swingup_sparse",
        "reacher_easy",
        "reacher_hard",
    ]
    assert set(names) <= set(envs.ENVIRONMENTS)
    env = envs.make("acrobot_swingup_sparse")
    assert env.sparse and (env.observation_size, env.action_size) == (6, 1)
    keys = jax.random.split(jax.random.PRNGKey(1), 4)
    s = jax.eval_shape(jax.vmap(env.reset), keys)  # shapes only: no compilation
    s1 = jax.eval_shape(jax.vmap(env.step), s, jnp.zeros((4, 1)))
    assert s1.obs.shape == (4, 6) and s1.reward.shape == (4,)
    assert set(s1.metrics) == set(s.metrics)
    assert envs.make("pendulum_swingup").dt == pytest.approx(0.02)
    with pytest.raises(ValueError, match="multiple of sim_dt"):
        suite.PendulumSwingup(ctrl_dt=0.015)


@pytest.mark.slow
def test_brax_ppo_smoke():
    """brax.training's PPO trains ``cartpole_balance`` unchanged for a few iterations."""
    ppo = pytest.importorskip("brax.training.agents.ppo.train")
    env = envs.make("cartpole_balance")
    make_inference, params, metrics = ppo.train(
        environment=env,
        num_timesteps=2048,
        episode_length=50,
        num_envs=16,
        batch_size=16,
        num_minibatches=2,
        unroll_length=8,
        num_updates_per_batch=1,
        num_evals=2,
        seed=0,
    )
    assert np.isfinite(float(metrics["eval/episode_reward"]))


#: a constant action that drives the task's limited joint into its stop, and the control steps
STOPS = {"cartpole_swingup": ((1.0,), 100), "reacher_easy": ((1.0, -1.0), 50)}


@pytest.mark.parametrize("task", sorted(STOPS), indirect=True)
def test_stops_follow_mujoco(task):
    """The cart driven into the end of its rail and the reacher's wrist into its stop (from
    the reset state; 1 s): MuJoCo's limit constraint (the tasks' ``mujoco_limits =
    "constraint"``, one row solved exactly by one projected-gradient step) follows MuJoCo C's
    states to 1e-9 at every step, against MuJoCo's solve converged (the files'
    ``iterations="1"`` leaves MuJoCo's own rollout 6 mm / 3e-3 rad from its converged one).
    Under the default spring-damper the cart ended 0.13 m (RMS) from MuJoCo's and the reacher
    diverged (docs/environments.md)."""
    name, env, reset, step = task
    action, steps = STOPS[name]
    m = env.scene.mj_model
    m.opt.iterations, m.opt.ls_iterations, m.opt.tolerance = 100, 50, 1e-14
    lo, hi = m.jnt_range[m.jnt_limited.astype(bool)].T
    d = mujoco.MjData(m)
    s = reset(jax.random.PRNGKey(3))
    d.qpos[:], d.qvel[:] = np.asarray(s.pipeline_state.q), np.asarray(s.pipeline_state.v)
    if "target" in s.info:
        d.mocap_pos[0, :2] = np.asarray(s.info["target"])
    past = 0.0
    for _ in range(steps):
        s = step(s, jnp.asarray(action))
        d.ctrl[:] = action
        mujoco.mj_step(m, d, env.n_frames)
        np.testing.assert_allclose(s.pipeline_state.q, d.qpos, atol=TOL, rtol=0)
        np.testing.assert_allclose(s.pipeline_state.v, d.qvel, atol=10 * TOL, rtol=0)
        q = d.qpos[m.jnt_qposadr[m.jnt_limited.astype(bool)]]
        past = max(past, float(np.max(np.maximum(lo - q, q - hi))))
    assert past > 0.02  # MuJoCo's joint went into its (soft) stop

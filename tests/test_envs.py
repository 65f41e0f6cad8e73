"""jaxdyn.envs: the Brax / Playground contract, training wrappers, auto-reset pool, domain
randomisation, Brax's wrappers and trainer on a jaxdyn environment.

Compilation dominates: the cheap :class:`Reacher` carries the contract tests, and jitted
functions are built once per module (fixtures). The quadruped and humanoid are traced
(``jax.eval_shape``) here and simulated in the ``slow`` tests. Tests that need Brax say so and
fail with a clear message if it is missing (it is in the ``test`` extra).
"""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import envs

from _tiny_ppo import TINY_PPO, tiny_ppo_kwargs

B = 4  # batch of environments in the wrapper tests


def need_brax():
    if not envs.HAS_BRAX:
        pytest.fail("this test needs Brax: pip install 'jaxdyn[test]' (or 'jaxdyn[rl]')")
    import brax.envs  # noqa: F401

    return brax


@pytest.fixture(scope="module")
def reacher():
    """The two-link planar reacher: the cheapest task to compile."""
    return envs.Reacher("planar2")


@pytest.fixture(scope="module")
def reacher_fns(reacher):
    return jax.jit(jax.vmap(reacher.reset)), jax.jit(jax.vmap(reacher.step))


@pytest.fixture(scope="module")
def wrapped(reacher):
    """jaxdyn's training stack on the reacher: short episodes, a pool of 8 initial states."""
    w = envs.wrap(reacher, episode_length=3, pool_size=8)
    return w, jax.jit(w.reset), jax.jit(w.step)


def keys(n, seed=0):
    return jax.random.split(jax.random.PRNGKey(seed), n)


# ------------------------------------------------------------------------------ contract


def test_contract_shapes_and_properties(reacher, reacher_fns):
    reset, step = reacher_fns
    assert reacher.observation_size == 13 and reacher.action_size == 2
    assert reacher.backend == "jaxdyn"
    assert reacher.dt == pytest.approx(0.02)
    assert reacher.unwrapped is reacher
    s = reset(keys(B))
    assert isinstance(s, envs.State)
    assert s.obs.shape == (B, 13) and s.reward.shape == (B,) and s.done.shape == (B,)
    assert s.pipeline_state.q.shape == (B, 2) and s.info["target"].shape == (B, 3)
    s1 = step(s, jnp.full((B, 2), 0.5))
    assert s1.obs.shape == (B, 13) and set(s1.metrics) == set(s.metrics) == {"distance", "diverged"}
    np.testing.assert_allclose(np.asarray(s1.pipeline_state.t), 0.02, rtol=1e-6)
    # the reward is minus the end-effector distance to the target
    np.testing.assert_allclose(
        np.asarray(s1.reward), -np.asarray(s1.metrics["distance"]), rtol=1e-6
    )
    d = jax.vmap(reacher.distance)(s1.pipeline_state.q, s1.info["target"])
    np.testing.assert_allclose(np.asarray(s1.metrics["distance"]), np.asarray(d), rtol=1e-6)
    assert not np.any(np.asarray(s1.done))
    # the state moved under a nonzero action, and it is a pytree with a working replace
    assert float(jnp.max(jnp.abs(s1.pipeline_state.v))) > 1e-3
    r = s1.replace(reward=jnp.zeros(B))
    assert float(jnp.sum(r.reward)) == 0.0 and r.obs is s1.obs
    leaves = jax.tree_util.tree_leaves(s1)
    assert all(isinstance(x, jax.Array) for x in leaves)


def test_eval_shape_of_tasks():
    """The 7-DoF reacher and the quadruped trace with the contract's shapes, without compiling
    (jax.eval_shape); the humanoid and the constraint-contact quadruped are in
    test_humanoid_stands_briefly (slow: building G1 compiles its kinematics)."""
    cases = [(envs.Reacher("arm7"), 23, 7), (envs.Quadruped(), 46, 12)]
    check_traces(cases)


def check_traces(cases):
    for env, n_obs, n_act in cases:
        s = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
        s1 = jax.eval_shape(env.step, s, jax.ShapeDtypeStruct((n_act,), s.obs.dtype))
        assert s.obs.shape == s1.obs.shape == (n_obs,), type(env).__name__
        assert env.action_size == n_act and env.observation_size == n_obs
        assert s1.reward.shape == () and s1.done.shape == ()
        assert set(s1.metrics) == set(s.metrics)
        assert set(s1.info) == set(s.info)


def test_bad_input(reacher, reacher_fns):
    reset, step = reacher_fns
    batch = reset(keys(B))
    s = jax.tree_util.tree_map(lambda x: x[0], batch)
    with pytest.raises(ValueError, match=r"Reacher.step: action has shape \(6,\), expected"):
        reacher.step(s, jnp.zeros(6))
    with pytest.raises(ValueError, match=r"action has shape \(3, 2\).*VmapWrapper"):
        reacher.step(s, jnp.zeros((3, 2)))
    with pytest.raises(ValueError, match="Reacher.reset: rng"):
        reacher.reset(keys(3))
    with pytest.raises(ValueError, match="Reacher.reset: rng must be one PRNG key"):
        reacher.reset(jnp.zeros(3))
    with pytest.raises(Exception, match="action has a non-finite entry"):
        step(batch, jnp.full((B, 2), jnp.nan)).obs.block_until_ready()
    # a jaxdyn value check like the others: jaxdyn.jit raises CheckError with its message
    with pytest.raises(jaxdyn.CheckError, match=r"^Reacher.step: action has a non-finite entry"):
        jaxdyn.jit(reacher.step)(s, jnp.array([0.0, jnp.inf]))
    with pytest.raises(ValueError, match="unknown environment 'nope'"):
        envs.make("nope")
    with pytest.raises(ValueError, match="robot must be one of"):
        envs.Reacher("ur5")
    with pytest.raises(ValueError, match="pool_size must be >= 1"):
        envs.AutoResetWrapper(envs.VmapWrapper(reacher), pool_size=0)


def test_step_names_a_wrong_state(reacher, reacher_fns):
    """``env.step`` given something else than the State of ``reset`` / ``step`` says what it
    expects (it raised AttributeError for ``None`` or the simulator's state and KeyError for an
    ``info`` without the task's key)."""
    reset, _ = reacher_fns
    s = jax.tree_util.tree_map(lambda x: x[0], reset(keys(1)))
    a = jnp.zeros(reacher.action_size)
    with pytest.raises(TypeError, match=r"Reacher.step: state must be the environment State.*None"):
        reacher.step(None, a)
    with pytest.raises(TypeError, match="simulator's state, the environment State's pipeline"):
        reacher.step(s.pipeline_state, a)
    with pytest.raises(TypeError, match=r"state.pipeline_state must be a jaxdyn.sim.State"):
        reacher.step(s.replace(pipeline_state=s.obs), a)
    with pytest.raises(ValueError, match=r"Reacher.step: state.info has no 'target'"):
        reacher.step(s.replace(info={}), a)
    assert np.isfinite(float(reacher.step(s, a).reward))  # the check passes a good state
    assert reacher.check_state(s, ("target",)) is s  # and returns it, as annotated


# ------------------------------------------------------------------------------ wrappers


def test_auto_reset_draws_fresh_initial_states(wrapped):
    """Episodes of 3 steps: every restart takes a pool entry at random, so one environment
    sees several initial states and targets over 8 episodes (Brax's AutoResetWrapper would
    repeat its first one), and each restart is a genuine reset (t = 0, zero velocity)."""
    w, reset, step = wrapped
    s = reset(keys(B))
    pool = s.info["reset_pool"]
    assert pool["pipeline_state"].q.shape == (B, 8, 2) and pool["info"]["target"].shape == (B, 8, 3)
    # the pool holds distinct states
    assert len(np.unique(np.round(np.asarray(pool["info"]["target"][0]), 6), axis=0)) == 8
    targets = [np.asarray(s.info["target"])]
    a = jnp.zeros((B, 2))
    for i in range(24):
        s = step(s, a)
        if (i + 1) % 3 == 0:
            assert np.all(np.asarray(s.done) == 1)
            assert np.all(np.asarray(s.pipeline_state.t) == 0)
            assert np.all(np.asarray(s.pipeline_state.v) == 0)
            # the new episode's observation is that of the restored state
            obs = jax.vmap(w.unwrapped.observe)(s.pipeline_state, s.info["target"])
            np.testing.assert_allclose(np.asarray(s.obs), np.asarray(obs), rtol=1e-6)
            targets.append(np.asarray(s.info["target"]))
        else:
            assert not np.any(np.asarray(s.done))
            assert np.all(np.asarray(s.info["steps"]) == (i + 1) % 3)
    targets = np.stack(targets)  # (episodes, B, 3)
    for e in range(B):
        distinct = len(np.unique(np.round(targets[:, e], 6), axis=0))
        assert distinct >= 4, (e, distinct)
    # episode bookkeeping survives the restarts: lengths of finished episodes are 3
    np.testing.assert_allclose(np.asarray(s.info["episode_metrics"]["length"]), 3.0)


def test_domain_randomization_changes_dynamics(reacher, reacher_fns):
    """A batch of reachers with link masses scaled by U(0.5, 1.5), the first one kept
    nominal: the same initial state and torque give different motions, lighter arms moving
    further, and the nominal member moves exactly as the plain environment."""
    reset, step = reacher_fns
    same = jax.tree_util.tree_map(lambda x: jnp.stack([x[0]] * B), reset(keys(B, 3)))
    s_ref = jax.tree_util.tree_map(lambda x: x[0], same)
    a = jnp.full(2, 0.5)
    randomize = envs.domain_randomization(mass_scale=(0.5, 1.5), friction=None)

    def fn(sys):
        sys_v, in_axes = randomize(sys, keys(B, 1))
        mass = sys_v.model.mass.at[0].set(sys.model.mass)
        inertia = sys_v.model.inertia.at[0].set(sys.model.inertia)
        sys_v = eqx.tree_at(lambda t: (t.model.mass, t.model.inertia), sys_v, (mass, inertia))
        return sys_v, in_axes

    w = envs.DomainRandomizationVmapWrapper(reacher, fn)
    assert w._sys_v.model.mass.shape == (B, reacher.model.mass.shape[0])
    # the batch shares every leaf it does not randomise
    assert w._in_axes.model.mass == 0 and w._in_axes.model.com is None
    s = jax.jit(w.step)(same, jnp.tile(a, (B, 1)))
    q = np.asarray(s.pipeline_state.q)
    nominal = step(same, jnp.tile(a, (B, 1)))  # the plain environment, batched
    np.testing.assert_allclose(q[0], np.asarray(nominal.pipeline_state.q[0]), rtol=1e-6, atol=1e-9)
    assert np.ptp(q, axis=0).max() > 1e-4  # the environments differ
    scale = np.asarray(w._sys_v.model.mass / reacher.model.mass)[1:].mean(1)
    moved = np.linalg.norm(q[1:] - np.asarray(s_ref.pipeline_state.q), axis=1)
    assert np.corrcoef(scale, moved)[0, 1] < 0


def test_brax_wrappers_accept_the_env(reacher):
    """brax.envs.training.wrap (VmapWrapper, EpisodeWrapper, AutoResetWrapper) takes a jaxdyn
    environment: reset and a few steps to the end of an episode run and restart."""
    need_brax()
    from brax.envs import training

    w = training.wrap(reacher, episode_length=2)
    s = jax.jit(w.reset)(keys(B))
    step = jax.jit(w.step)
    s = step(s, jnp.zeros((B, 2)))
    s = step(s, jnp.zeros((B, 2)))
    assert np.all(np.asarray(s.done) == 1) and np.all(np.isfinite(np.asarray(s.obs)))
    # Brax restarts from the cached first state (the behaviour jaxdyn's pool replaces)
    np.testing.assert_allclose(
        np.asarray(s.pipeline_state.q), np.asarray(s.info["first_pipeline_state"].q)
    )


def test_without_brax_in_a_subprocess():
    """With Brax unimportable, jaxdyn.envs falls back to its own State / Env / Wrapper."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["brax"] = None  # import brax -> ImportError
        import jax, jax.numpy as jnp
        import jaxdyn.envs as envs
        assert not envs.HAS_BRAX
        env = envs.Reacher("planar2")
        s = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
        assert type(s) is envs.State and s.obs.shape == (13,)
        w = envs.wrap(env, episode_length=5, pool_size=2)
        keys = jax.ShapeDtypeStruct((3, 2), jnp.uint32)
        sw = jax.eval_shape(w.reset, keys)
        sw1 = jax.eval_shape(w.step, sw, jax.ShapeDtypeStruct((3, 2), jnp.float32))
        assert sw1.obs.shape == (3, 13) and sw1.info["reset_pool"]["obs"].shape == (3, 2, 13)
        r = s.replace(reward=1.0)
        tree = jax.tree_util.tree_structure
        assert r.reward == 1.0 and tree(r) == tree(s)
        print("fallback ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "fallback ok" in out.stdout


def test_brax_compat():
    installed = envs.brax_compat()
    assert callable(jax.device_put_replicated)
    x = jax.device_put_replicated({"a": jnp.arange(3.0)}, jax.local_devices()[:1])
    assert x["a"].shape == (1, 3)
    assert envs.brax_compat() == [] or installed  # idempotent


def test_brax_compat_applied_on_import():
    """Issue 55: with Brax installed, ``import jaxdyn.envs`` makes Brax's trainers' use of
    ``jax.device_put_replicated`` work without an explicit :func:`envs.brax_compat` (a fresh
    process; Brax's own helper, which its PPO/APG/SAC trainers call). On a JAX that removed the
    name, the same process without the import gets JAX's ``AttributeError``."""
    need_brax()
    code = textwrap.dedent(
        """
        import jax, jax.numpy as jnp
        from brax.training import pmap
        removed = not hasattr(jax, "device_put_replicated")
        if removed:
            try:
                pmap.bcast_local_devices({"a": jnp.ones(3)})
                raise SystemExit("expected JAX's AttributeError")
            except AttributeError:
                pass
        import jaxdyn.envs
        x = pmap.bcast_local_devices({"a": jnp.arange(3.0)})
        assert x["a"].shape == (1, 3) and jnp.all(x["a"][0] == jnp.arange(3.0))
        print("compat ok", removed)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "compat ok" in out.stdout


# ------------------------------------------------------------------------------ training


@pytest.mark.slow
def test_tiny_ppo_runs_end_to_end(reacher):
    """brax.training.agents.ppo.train on the reacher with jaxdyn's wrappers and domain
    randomisation, as a user runs it (no explicit brax_compat): a few iterations with tiny
    networks, finite metrics and parameters. (Slow: PPO compiles the environment step into its
    training and its evaluation programs.)"""
    need_brax()
    from brax.training.agents.ppo import train as ppo

    # no envs.brax_compat() call: importing jaxdyn.envs applied it (issue 55)
    seen = []
    make_policy, params, metrics = ppo.train(
        environment=reacher,
        **tiny_ppo_kwargs(
            randomization_fn=envs.domain_randomization(mass_scale=(0.9, 1.1), friction=None),
            progress_fn=lambda step, m: seen.append((step, m)),
        ),
    )
    assert len(seen) == 2 and seen[-1][0] >= TINY_PPO["num_timesteps"]
    for _, m in seen:
        assert np.isfinite(float(m["eval/episode_reward"]))
        assert float(m["eval/episode_reward"]) < 0  # minus distances
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(params))
    policy = make_policy(params, deterministic=True)
    s = jax.jit(reacher.reset)(jax.random.PRNGKey(0))
    action, _ = policy(s.obs, jax.random.PRNGKey(1))
    assert action.shape == (2,) and np.all(np.abs(np.asarray(action)) <= 1)


# ------------------------------------------------------------------------------ slow


@pytest.mark.slow
@pytest.mark.parametrize("contact", ["compliant", "constraint"])
def test_quadruped_stands_under_default_pose(contact):
    """quad12 holding its default pose (zero action) stays up for 2 s on either contact model:
    no termination, no divergence, the base within 5 cm below its standing height (the servos
    are soft: kp = 6 N m/rad lets the knees give about 3 cm under the robot's weight)."""
    env = envs.Quadruped(contact=contact)
    w = envs.wrap(env, episode_length=1000, pool_size=2)
    s = jax.jit(w.reset)(keys(2))
    step = jax.jit(w.step)
    for _ in range(100):
        s = step(s, jnp.zeros((2, 12)))
        assert not np.any(np.asarray(s.done))
    z = np.asarray(s.pipeline_state.q[:, 2])
    assert np.all((z < env.stand_height) & (z > env.stand_height - 0.05)), (z, env.stand_height)
    assert np.all(np.asarray(s.metrics["upright"]) > 0.95)


@pytest.mark.slow
def test_quadruped_friction_randomization():
    """Randomised friction changes how far the quadruped slides under the same actions."""
    env = envs.Quadruped()
    fn = functools.partial(
        envs.domain_randomization(mass_scale=None, friction=(0.05, 1.5)), rng=keys(3, 2)
    )
    w = envs.DomainRandomizationVmapWrapper(env, fn)
    s0 = jax.jit(env.reset)(jax.random.PRNGKey(0))
    s = jax.vmap(lambda _: s0)(jnp.arange(3))
    step = jax.jit(w.step)
    act = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (40, 12)), s0.obs.dtype)
    for a in act:
        s = step(s, jnp.tile(a, (3, 1)))
    xy = np.asarray(s.pipeline_state.q[:, :2])
    assert np.ptp(xy, axis=0).max() > 1e-3


@pytest.mark.slow
def test_humanoid_stands_briefly():
    """G1 traces with the contract's shapes, and holding its default pose it stays up for 1 s
    (the task's starting point)."""
    env = envs.HumanoidStand()
    check_traces([(env, 99, 29), (envs.make("quadruped_stand", contact="constraint"), 46, 12)])
    s = jax.jit(env.reset)(jax.random.PRNGKey(0))
    step = jax.jit(env.step)
    for _ in range(50):
        s = step(s, jnp.zeros(env.action_size))
        assert float(s.done) == 0
    assert float(s.metrics["upright"]) > 0.95
    assert abs(float(s.pipeline_state.q[2]) - env.stand_height) < 0.05


@pytest.mark.slow
def test_divergence_ends_the_episode():
    """A step that blows up (absurd torques) keeps the previous physics state, finite, and ends
    the episode with metrics["diverged"] = 1 instead of stopping a training run. The arm's URDF
    effort limits would clip the absurd torques, so they are lifted (``effort <= 0``: unclipped)."""
    model = envs.reacher.load_arm("planar2")
    model = eqx.tree_at(lambda m: m.effort_limit, model, jnp.zeros_like(model.effort_limit))
    env = envs.Reacher("planar2", torque_scale=1e9, damping=0.0, model=model)
    s = jax.jit(env.reset)(jax.random.PRNGKey(0))
    s1 = jax.jit(env.step)(s, jnp.ones(2))
    assert float(s1.done) == 1 and float(s1.metrics["diverged"]) == 1
    np.testing.assert_array_equal(np.asarray(s1.pipeline_state.q), np.asarray(s.pipeline_state.q))
    assert np.all(np.isfinite(np.asarray(s1.obs))) and np.isfinite(float(s1.reward))

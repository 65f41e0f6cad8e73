"""DeepMind Control Suite tasks with contact (:mod:`jaxdyn.envs.dm_control_suite`: cheetah,
walker, hopper, finger) against dm_control and MuJoCo C.

Oracles:

* observations and rewards: dm_control's own task code (``dm_control.suite.<domain>``'s
  ``get_observation`` / ``get_reward``) on a MuJoCo state, against the environment's functions of
  the same state (joint order mapped by :class:`jaxdyn.interop.mujoco.Converter`): equal to
  rounding, on states without contact (where MuJoCo's touch sensors read 0) in the default set;
  the touch sensors themselves (jaxdyn's contact forces, not MuJoCo's soft-constraint ones) in
  the slow set, by which sensor reads a contact;
* physics: rollouts from MuJoCo's initial state under a fixed open-loop control, jaxdyn's
  ``env.step`` against ``mj_step``: the bodies fall and come to rest at the same heights
  (slow: each task's step is a compile of the contact pipeline of a minute or more on a loaded
  2-core machine).

dm_control 1.0.50's index table (``mjbindings.sizes``) names MuJoCo fields that the installed
MuJoCo dropped; the ``dm`` fixture removes those names from the table before building
dm_control's ``Physics`` (nothing else is changed).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest

mujoco = pytest.importorskip("mujoco")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxdyn import envs, sim  # noqa: E402

#: domain -> (jaxdyn task per dm_control task)
DOMAINS = {
    "cheetah": {"run": "cheetah_run"},
    "walker": {"stand": "walker_stand", "walk": "walker_walk", "run": "walker_run"},
    "hopper": {"stand": "hopper_stand", "hop": "hopper_hop"},
    "finger": {
        "spin": "finger_spin",
        "turn_easy": "finger_turn_easy",
        "turn_hard": "finger_turn_hard",
    },
}


@pytest.fixture(scope="module")
def dm():
    """``load(domain, task)``: dm_control's environment (after a reset), whose ``physics`` and
    ``task`` are the oracles."""
    os.environ.setdefault("MUJOCO_GL", "disable")  # dm_control: no renderer (none is used)
    pytest.importorskip("dm_control")
    from dm_control.mujoco.wrapper.mjbindings import sizes

    m = mujoco.MjModel.from_xml_string("<mujoco/>")
    for struct, obj in (("mjmodel", m), ("mjdata", mujoco.MjData(m))):
        for field in [f for f in sizes.array_sizes[struct] if not hasattr(obj, f)]:
            del sizes.array_sizes[struct][field]
    from dm_control import suite

    def load(domain, task):
        env = suite.load(domain, task, task_kwargs={"random": 0})
        env.reset()
        return env

    return load


def _dm_eval(env, q, v, a):
    """dm_control's observation (flattened in its order) and reward at ``(qpos, qvel)`` under
    ``ctrl = a``; MuJoCo's contact count there."""
    ph = env.physics
    with ph.reset_context():
        ph.data.qpos[:], ph.data.qvel[:], ph.data.ctrl[:] = q, v, a
    obs = np.concatenate([np.ravel(x) for x in env.task.get_observation(ph).values()])
    return obs, float(env.task.get_reward(ph)), int(ph.data.ncon)


def _contact_free_states(env, rng, n, lift, spread):
    """``n`` random ``(qpos, qvel, ctrl)`` without contact in MuJoCo: joints uniform in their
    ranges shrunk by ``spread`` about 0 (hinges without one in ``[-pi, pi]``), the root
    ``lift`` m up, moving forward (the
    root's x slide at 4 m/s more: the speed rewards are not all 0)."""
    m = env.physics.model
    ph = env.physics
    out = []
    while len(out) < n:
        lo, hi = m.jnt_range[:, 0].copy(), m.jnt_range[:, 1].copy()
        free = m.jnt_limited == 0
        lo[free], hi[free] = -np.pi, np.pi
        q = rng.uniform(lo, hi) * np.where(free, 1.0, spread)
        slide = m.jnt_type == mujoco.mjtJoint.mjJNT_SLIDE
        q[slide] = 0.3 * rng.standard_normal(slide.sum())
        if lift:
            q[m.joint("rootz").qposadr[0]] += lift
        v, a = rng.standard_normal(m.nv), rng.uniform(-1.3, 1.3, m.nu)
        if "rootx" in [m.joint(j).name for j in range(m.njnt)]:
            v[m.joint("rootx").dofadr[0]] += 4.0
        with ph.reset_context():
            ph.data.qpos[:] = q
        if ph.data.ncon == 0:
            out.append((q, v, a))
    return out


@pytest.mark.parametrize("domain", sorted(DOMAINS))
def test_functions_match_dm_control(domain, dm):
    """Observation and reward of every task of the domain, as functions of a state and an
    action, against dm_control's ``get_observation`` / ``get_reward`` on the same MuJoCo
    state (contact-free: the touch sensors read 0 in both), to rounding; and the reward
    actually varies over the states (the comparison is not between constants). Finger: the
    sparse rewards on both sides of their thresholds (hinge velocities of -16 and -14 rad/s;
    the spinner turned to put its tip on the turn tasks' targets, which dm_control's reset drew
    and which jaxdyn's tasks take from ``info``)."""
    tasks = DOMAINS[domain]
    made = {t: envs.make(name) for t, name in tasks.items()}
    # Playground's walker observation: the torso's xmat zz at entry 14 (MuJoCo's, below)
    playground = (
        {"walk_zz": envs.make("walker_walk", height_obs="zz")} if domain == "walker" else {}
    )
    first = next(iter(made.values()))
    refs = {t: dm(domain, t) for t in tasks}
    targets = {
        t: jnp.asarray(refs[t].physics.model.ptr.site("target").pos[[0, 2]])
        for t in tasks
        if t.startswith("turn")
    }

    @jax.jit
    def evaluate(q, v, a):
        pk = sim.State(q, v)
        s = first.state_sensors(pk)
        if first.touch_sites:
            s["touch"] = jnp.zeros(len(first.touch_sites), q.dtype)
        out = {}
        for t, e in {**made, **playground}.items():
            st = {**s, "target": targets[t]} if t in targets else s
            out[t] = e.observe(pk, st), e.reward(pk, st, a)[0]
        return out

    rng = np.random.default_rng(5)
    lift, spread = {
        "cheetah": (0.5, 1.0),
        "walker": (0.4, 0.3),
        "hopper": (0.6, 0.3),
        "finger": (0.0, 1.0),
    }[domain]
    states = _contact_free_states(next(iter(refs.values())), rng, 4, lift, spread)
    if domain == "finger":
        states += [(q, v * [0, 0, 1] + [0, 0, w], a) for (q, v, a), w in zip(states, (-16, -14))]
        for t in targets:  # the hinge angle that puts the tip nearest the target
            ph = refs[t].physics
            q, v, a = states[0]

            def dist(angle, ph=ph, q=q):
                with ph.reset_context():
                    ph.data.qpos[:] = [q[0], q[1], angle]
                return ph.dist_to_target()

            angles = np.linspace(-np.pi, np.pi, 721)
            best = angles[np.argmin([dist(x) for x in angles])]
            states.append((np.array([q[0], q[1], best]), v, a))
    rewards = {t: [] for t in tasks}
    for q, v, a in states:
        got = evaluate(jnp.asarray(first.q_of(q)), jnp.asarray(first.q_of(v)), jnp.asarray(a))
        for t, ref in refs.items():
            want_obs, want_rew, ncon = _dm_eval(ref, q, v, a)
            assert ncon == 0
            np.testing.assert_allclose(got[t][0], want_obs, atol=1e-12, rtol=0)
            assert float(got[t][1]) == pytest.approx(want_rew, abs=1e-12)
            rewards[t].append(want_rew)
            if t == "walk" and playground:
                zz = ref.physics.named.data.xmat["torso", "zz"]
                assert abs(zz - want_obs[14]) > 1e-3  # the state tells the two apart
                want_obs[14] = zz
                np.testing.assert_allclose(got["walk_zz"][0], want_obs, atol=1e-12, rtol=0)
                assert float(got["walk_zz"][1]) == pytest.approx(want_rew, abs=1e-12)
    for t in tasks:
        assert np.ptp(rewards[t]) > 1e-3, t


def test_walker_height_obs_refused_by_name():
    """A ``height_obs`` other than dm_control's ``"z"`` or Playground's ``"zz"`` is refused by
    name before the model loads (the ``"zz"`` observation: ``test_functions_match_dm_control``)."""
    with pytest.raises(ValueError, match="height_obs must be 'z'.*got 'height'"):
        envs.make("walker_walk", height_obs="height")


def _playground_planar_qpos(m, key):
    """Playground's reset draw of the walker and the hopper (``rng, r1, r2 = split(rng, 3)``,
    ``qpos[2] ~ U(-pi, pi)``, the joints after the root uniform in MuJoCo's ``jnt_range``), in
    MuJoCo's order: the test's own copy of the draw, from the model's ranges."""
    _, r1, r2 = jax.random.split(key, 3)
    q = jnp.zeros(m.nq).at[2].set(jax.random.uniform(r1, (), minval=-jnp.pi, maxval=jnp.pi))
    lo, hi = m.jnt_range[3:, 0], m.jnt_range[3:, 1]
    return q.at[3:].set(jax.random.uniform(r2, (m.nq - 3,), minval=lo, maxval=hi))


# [walker_stand] slow: the same planar reset as the hopper's, on another body
@pytest.mark.parametrize(
    "name", ["hopper_stand", pytest.param("walker_stand", marks=pytest.mark.slow)]
)
def test_planar_reset_rejects_penetrating_draws(name):
    """The walker's and hopper's reset configuration (``first_free_draw`` of ``planar_draw``:
    dm_control's redraw-while-``ncon > 0`` with 8 candidates) over 2048 keys: none penetrates
    (every contact slot's distance > 0 under the collision pipeline), and MuJoCo C finds no
    contact (``ncon == 0``) at the same ``qpos`` for the replaced draws and a few others; where
    Playground's draw for the key (the test's own copy) touches nothing the reset is that draw,
    and where it penetrates (the batch holds such keys: the check can fail) the reset differs.
    Kinematics only (the reset's solve and step: the slow
    ``test_planar_reset_solves_converge``)."""
    from jaxdyn.envs.dm_control_suite import ContactSuiteEnv

    env = envs.make(name)
    assert isinstance(env, ContactSuiteEnv)
    m = env.scene.mj_model
    keys = jax.random.split(jax.random.PRNGKey(7), 2048)
    zero_v = jnp.zeros(env.sys.model.nv)

    @jax.jit
    def draws(keys):
        def one(k):
            q = env.first_free_draw(k, env.planar_draw)
            want = _playground_planar_qpos(m, k)
            d = env.contact_frames(sim.State(q, zero_v)).distance
            d0 = env.contact_frames(sim.State(env.q_of(want), zero_v)).distance
            return env.qpos(q), want, jnp.min(d), jnp.min(d0)

        return jax.vmap(one)(keys)

    qpos, want, dmin, dmin0 = map(np.asarray, draws(keys))
    replaced = dmin0 <= 0
    assert np.all(dmin > 0)
    assert replaced.sum() >= 10, replaced.sum()  # about 13 % (hopper), 2 % (walker)
    # the same draw (XLA may round the uniform's scaling differently in the two programs)
    np.testing.assert_allclose(qpos[~replaced], want[~replaced], rtol=0, atol=1e-12)
    assert np.all(np.max(np.abs(qpos[replaced] - want[replaced]), axis=1) > 1e-6)
    lo, hi = m.jnt_range[3:, 0], m.jnt_range[3:, 1]
    assert np.all((lo <= qpos[:, 3:]) & (qpos[:, 3:] <= hi))
    d = mujoco.MjData(m)
    for i in [*np.flatnonzero(replaced), *range(8)]:
        for q, expect_free in ((qpos[i], True), (want[i], not replaced[i])):
            d.qpos[:] = q
            mujoco.mj_forward(m, d)
            assert (d.ncon == 0) == expect_free, (i, d.ncon)


def test_reset_tries_refused_by_name():
    """``reset_tries`` (the candidates of the walker's, hopper's, finger's, ball in cup's and
    humanoid's reset) must be an integer >= 1, refused by name before the model loads."""
    for name in ("walker_walk", "hopper_hop", "finger_spin"):
        for bad in (0, -1, 2.5, True, "8"):
            with pytest.raises(ValueError, match="reset_tries must be an integer >= 1"):
                envs.make(name, reset_tries=bad)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hopper_hop", "walker_walk"])
def test_planar_reset_solves_converge(name):
    """After the walker's and hopper's reset (64 keys, ``jit(vmap(reset))``), five control
    steps under zero action: every step's contact solve converged (``info["contact_residual"]``
    below 1e-6: [residual levels](docs/simulation.md); with Playground's penetrating draws kept
    the hopper's reached 1.7e-2 in the first step) and no speed above 1 after the first
    (the penetrating states were ejected at up to 15 m/s, the others fell at 0.2-0.5); the
    reset's state is ``first_free_draw``'s configuration at rest with
    Playground's ``info["rng"]``. The solve runs to convergence (cold, 100 iterations, the
    limit rows polished: the tasks' settings before their warm start and iteration caps,
    whose early stop leaves residuals of the order of their tolerance by design), so that
    the residual measures what the reset's state asks of it."""
    from jaxdyn.envs.dm_control_suite import ContactSuiteEnv

    env = envs.make(
        name, warm_start=False, solver_tolerance=0.0, solver_iterations=100, solver_polish=True
    )
    assert isinstance(env, ContactSuiteEnv)
    keys = jax.random.split(jax.random.PRNGKey(11), 64)
    zero = jnp.zeros((64, env.action_size))

    @jax.jit
    def run(keys):
        s = jax.vmap(env.reset)(keys)
        q = jax.vmap(lambda k: env.first_free_draw(k, env.planar_draw))(keys)

        def control_step(st, _):
            st = jax.vmap(env.step)(st, zero)
            vmax = jnp.max(jnp.abs(st.pipeline_state.v), -1)
            return st, (st.info["contact_residual"], vmax)

        s1, (res, vmax) = jax.lax.scan(control_step, s, None, length=5)
        return s, q, res, vmax, s1.done

    s, q, res, vmax, done = run(keys)
    np.testing.assert_allclose(np.asarray(s.pipeline_state.q), np.asarray(q), rtol=0, atol=1e-12)
    assert not np.any(np.asarray(s.pipeline_state.v))
    rng = jax.vmap(lambda k: jax.random.split(k, 3)[0])(keys)
    np.testing.assert_array_equal(np.asarray(s.info["rng"]), np.asarray(rng))
    assert float(np.max(res)) < 1e-6, float(np.max(res))
    assert not np.any(np.asarray(done))
    # the first control step from rest: gravity's 0.2-0.5 m/s, no ejection from a penetration
    assert float(np.max(vmax[0])) < 1.0, float(np.max(vmax[0]))


@pytest.mark.parametrize(
    "name",
    [
        "cheetah_run",
        "walker_walk",
        "hopper_hop",
        "finger_turn_easy",
        "ball_in_cup_catch",
        "dm_humanoid_walk",
    ],
)
def test_solver_options(name):
    """``solver_iterations``, ``max_contacts`` and ``solver_polish`` (every contact task's
    keywords; one task per constructor) set the step count, the contact cap and the limit rows'
    active-set step of the simulated :class:`jaxdyn.sim.Constraint` and change nothing else of
    the task's contact model (every other setting and array as the class's), nor the class's
    own; a value that is not an integer >= 1 (a bool for ``solver_polish``) is refused naming
    the keyword, before the model loads. (What they cost in accuracy and gain in time:
    ``benchmarks/suite_step.py``, docs/environments.md.)"""
    from jaxdyn.envs.dm_control_suite import ContactSuiteEnv

    env = envs.make(name, solver_iterations=7, max_contacts=5)
    assert isinstance(env, ContactSuiteEnv)
    polish = type(env).contact.polish
    env = envs.make(name, solver_iterations=7, max_contacts=5, solver_polish=not polish)
    assert isinstance(env, ContactSuiteEnv)
    c, c0 = env.sys.cfg.contact, type(env).contact
    assert isinstance(c, sim.Constraint) and (c.iterations, c.max_contacts) == (7, 5)
    assert c.polish is (not polish) and c0.polish is polish
    iterations = (type(env).SOLVER_ITERATIONS, type(env).NEWTON_ITERATIONS, 100)
    assert c0.iterations in iterations and c0.max_contacts != 5
    leaves0, _ = jax.tree_util.tree_flatten(c0)
    leaves, _ = jax.tree_util.tree_flatten(c)
    assert len(leaves) == len(leaves0)
    for a, b in zip(leaves, leaves0):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    changed = ("iterations", "max_contacts", "polish")
    if c0.soft:  # the soft contact's cone=None: the file's (sim_config; the finger's elliptic)
        want = "elliptic" if name.startswith("finger") else "pyramidal"
        assert c0.cone is None and c.cone == want
        changed += ("cone",)
    fields = [f for f in type(c).__dataclass_fields__ if f not in changed]
    assert all(repr(getattr(c, f)) == repr(getattr(c0, f)) for f in fields)
    for key in ("solver_iterations", "max_contacts"):
        for bad in (0, -3, 2.5, True, "20"):
            with pytest.raises(ValueError, match=rf"{key} must be None or an integer >= 1"):
                envs.make(name, **{key: bad})
    for bad in (0, 1, "true"):
        with pytest.raises(ValueError, match="solver_polish must be None, True or False"):
            envs.make(name, solver_polish=bad)


def test_registered_and_batched():
    """The contact tasks are registered by name (which name is which variant:
    ``test_functions_match_dm_control``); ``reset`` traces under ``jax.vmap`` and ``step`` with
    the contract's shapes and the same metric keys, ``finger_turn``'s with the contact report
    in ``info`` (shapes only, no compilation; the slow rollouts step a batch)."""
    names = [
        "cheetah_run",
        "walker_stand",
        "walker_walk",
        "walker_run",
        "hopper_stand",
        "hopper_hop",
        "finger_spin",
        "finger_turn_easy",
        "finger_turn_hard",
    ]
    assert set(names) <= set(envs.ENVIRONMENTS)
    env = envs.make("walker_walk")
    assert env.dt == pytest.approx(0.025) and env.n_frames == 10
    s = jax.eval_shape(jax.vmap(env.reset), jax.random.split(jax.random.PRNGKey(1), 3))
    assert s.obs.shape == (3, 24)
    one = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), s)
    s1 = jax.eval_shape(env.step, one, jnp.zeros(6))
    assert s1.obs.shape == (24,) and s1.reward.shape == ()
    assert set(s1.metrics) == set(s.metrics)
    # FingerTurn's own reset and step carry the contact report as the other tasks
    # (SimEnv.pipeline_step_info), in the dtypes of SimEnv.contact_info
    turn = envs.make("finger_turn_easy")
    s = jax.eval_shape(turn.reset, jax.random.PRNGKey(1))
    s1 = jax.eval_shape(turn.step, s, jnp.zeros(2))
    for st in (s, s1):
        assert st.info["contact_residual"].dtype == st.obs.dtype
        assert st.info["contacts_dropped"].dtype == jnp.int32
        assert "target" in st.info
    # step's zero_forces: the slot count kept from the reset's trace (no geometry traced)
    nc = jax.eval_shape(turn.contact_frames, s.pipeline_state).distance.shape[0]
    assert turn.contact_slots == nc > 0


def test_contact_report_off_leaves_it_out():
    """``contact_report=False``: no ``contact_residual`` / ``contacts_dropped`` in ``info``
    after ``reset`` and ``step`` (FingerTurn's own reset and step too), the other ``info``
    entries kept; a non-bool refused by name."""
    for name in ("walker_walk", "finger_turn_easy"):
        on: Any = envs.make(name)  # a ContactSuiteEnv (make returns the Env base type)
        off: Any = envs.make(name, contact_report=False)
        assert on.contact_report and not off.contact_report
        for env, has in ((on, True), (off, False)):
            s = jax.eval_shape(env.reset, jax.random.PRNGKey(1))
            s1 = jax.eval_shape(env.step, s, jnp.zeros(env.action_size))
            for st in (s, s1):
                assert ("contact_residual" in st.info) is has
                assert ("contacts_dropped" in st.info) is has
                assert "rng" in st.info
    with pytest.raises(ValueError, match="HopperTask: contact_report must be True or False"):
        envs.make("hopper_hop", contact_report=1)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["walker_walk", "hopper_hop"])
def test_contact_report_off_is_bit_identical(name):
    """``contact_report=False`` changes nothing but ``info``: the same observations, rewards,
    metrics and simulator states to the bit along a batched rollout under random actions
    (the walker's and the hopper's, whose touch sensors read the solve's forces), from
    resets and on through the bodies' contacts with the floor."""
    B, T = 4, 40
    keys = jax.random.split(jax.random.PRNGKey(3), B)
    runs = []
    for env in (envs.make(name), envs.make(name, contact_report=False)):
        acts = jax.random.uniform(jax.random.PRNGKey(4), (T, B, env.action_size), minval=-1)

        def roll(s, acts, env=env):
            def f(s, a):
                s = jax.vmap(env.step)(s, a)
                return s, (s.obs, s.reward, s.pipeline_state, s.metrics)

            return jax.lax.scan(f, s, acts)[1]

        s0 = jax.vmap(env.reset)(keys)
        runs.append((s0.obs, jax.jit(roll)(s0, acts)))
    on, off = runs
    leaves_on, leaves_off = jax.tree_util.tree_leaves(on), jax.tree_util.tree_leaves(off)
    assert len(leaves_on) == len(leaves_off)
    for a, b in zip(leaves_on, leaves_off):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the rollout reaches the floor (the comparison covers contact steps)
    env: Any = envs.make(name)
    q = on[1][2].q.reshape(-1, env.model.nq)
    d = jax.vmap(lambda q: env.contact_frames(sim.State(q, jnp.zeros(env.model.nv))).distance)(q)
    assert bool(jnp.any(d <= 0))


@pytest.mark.slow
def test_reset_frames_and_slot_count_shared():
    """A reset traces the contact geometry once for its draw and its touch sensors: the frames
    of the configuration :meth:`~jaxdyn.envs.dm_control_suite.ContactSuiteEnv.first_free` picks
    from the batch of candidates equal :meth:`contact_frames` of that configuration computed on
    their own (to rounding: one batched, one not), and ``contact_slots`` (``step``'s
    ``zero_forces``, a static count) is their row count, kept from the last trace (the
    finger: two candidates, the first in the spinner, the second free). Slow: the finger's
    contact geometry compiles twice (batched and not), over a minute on a loaded machine;
    ``test_registered_and_batched`` checks the count by shapes."""
    from jaxdyn.envs.dm_control_suite import ContactSuiteEnv

    env = envs.make("finger_spin")
    assert isinstance(env, ContactSuiteEnv)
    qs = env.q_of(jnp.asarray([[0.0, 0.0, 0.0], [-1.0, 1.5, 0.0]], env.sys.model.mass.dtype))

    @jax.jit
    def both(qs):
        q, fr = env.first_free(qs)
        return q, fr, env.contact_frames(sim.State(q, jnp.zeros_like(q)))

    q, fr, want = both(qs)
    np.testing.assert_array_equal(q, qs[1])
    assert float(jnp.min(want.distance)) > 0  # the second candidate is free
    for field in ("distance", "point", "normal"):
        np.testing.assert_allclose(getattr(fr, field), getattr(want, field), rtol=0, atol=1e-12)
    assert env.contact_slots == fr.distance.shape[0] > 0
    fresh = envs.make("finger_spin")  # nothing traced yet: found by an abstract evaluation
    assert isinstance(fresh, ContactSuiteEnv) and fresh.contact_slots == env.contact_slots


def test_contact_tasks_default_to_soft_contact():
    """The cheetah, walker, hopper, ball in cup and humanoid simulate MuJoCo's soft contact
    through the Newton solve by default
    (:func:`~jaxdyn.envs.dm_control_suite.soft_contact`: the files' solref / solimp and
    pyramidal cones, the physics of Playground's MJX environments; the humanoid's ``solimp``
    no longer ignored, and its own cap of 80 slots); ``contact="hard"`` is jaxdyn's hard
    Coulomb contact (the class's ``HARD_CONTACT``; the humanoid's ``solimp`` then ignored by
    name), with the solver keywords applied to whichever model is named; a ``contact`` that is
    not a model's name is refused naming the keyword before the model loads. The finger tasks
    too, on their file's elliptic cones (MuJoCo's three-zone cost in the Newton solve), over
    every slot; ``contact="hard"`` keeps the hard contact and ignores the file's ``solimp``.
    Configuration only (the physics:
    ``test_rollout_equals_mujoco``)."""
    from jaxdyn.envs.dm_control_suite import ContactSuiteEnv, FingerSpin, soft_contact

    for name in (
        "cheetah_run",
        "walker_walk",
        "hopper_hop",
        "ball_in_cup_catch",
        "dm_humanoid_stand",
    ):
        env = envs.make(name)
        assert isinstance(env, ContactSuiteEnv)
        cap = type(env).MAX_CONTACTS
        assert cap == (80 if name == "dm_humanoid_stand" else ContactSuiteEnv.MAX_CONTACTS)
        c = env.sys.cfg.contact
        assert isinstance(c, sim.Constraint)
        assert (c.soft, c.relaxed, c.solver, c.cone) == (True, True, "newton", "pyramidal")
        assert (c.warm_start, c.tolerance) == (True, ContactSuiteEnv.NEWTON_TOLERANCE)
        assert c.iterations == ContactSuiteEnv.NEWTON_ITERATIONS
        assert c.max_contacts == cap and c.friction is None
        assert repr(type(env).contact) == repr(soft_contact(max_contacts=cap))
        assert type(env).CONTACT_MODELS["soft"] is type(env).contact
        assert "solimp" not in env.sim_ignore
        hard = envs.make(name, contact="hard", solver_iterations=9)
        assert isinstance(hard, ContactSuiteEnv)
        h = hard.sys.cfg.contact
        assert isinstance(h, sim.Constraint) and not h.soft and h.solver is None
        assert h.iterations == 9
        want = dataclasses.replace(type(env).CONTACT_MODELS["hard"], iterations=9)
        assert repr(h) == repr(want)
        assert hard.sim_ignore == (("solimp",) if name == "dm_humanoid_stand" else ())
        refused = r"contact must be None or one of \['hard', 'soft'\]"
        for bad in ("soft newton", "Hard", 1, True):
            with pytest.raises(ValueError, match=refused):
                envs.make(name, contact=bad)
    for name in ("finger_spin", "finger_turn_easy", "finger_turn_hard"):
        finger = envs.make(name)
        assert isinstance(finger, FingerSpin)
        assert finger.scene.mj_model.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC
        c = finger.sys.cfg.contact
        assert isinstance(c, sim.Constraint)
        assert (c.soft, c.relaxed, c.solver, c.cone) == (True, True, "newton", "elliptic")
        assert sim.contact.uses_primal_newton(c) and c.max_contacts is None
        assert repr(FingerSpin.contact) == repr(soft_contact(max_contacts=None))
        assert "solimp" not in finger.sim_ignore
        hard = envs.make(name, contact="hard")
        h = hard.sys.cfg.contact
        assert isinstance(h, sim.Constraint) and not h.soft and hard.sim_ignore == ("solimp",)


def test_contacts_loaded_explicitly():
    """The bundled files load with nothing dropped (no ``ignore=``: every colliding geom is
    simulated, as the loader's primitives against the floor or its geom pairs; under the hard
    contact the finger's ``solimp`` is ignored by name in ``sim_config``, with its reason),
    under :class:`jaxdyn.sim.Constraint`, with MuJoCo's friction against the floor (the
    larger of the two geoms'), which the loader leaves to the contact model for the
    primitives."""
    for name in ("cheetah_run", "walker_walk", "hopper_hop", "finger_spin"):
        env = envs.make(name)
        assert env.scene.ignored == () and env.ignore == () and env.sim_ignore == ()
        env = envs.make(name, contact="hard")  # the hard contact's friction (the soft: each's)
        # the finger's solimp (MuJoCo's impedance), refused by name without it
        assert env.sim_ignore == (("solimp",) if name.startswith("finger") else ())
        cfg = env.sys.cfg
        assert isinstance(cfg.contact, sim.Constraint) and cfg.contacts is not None
        m = env.scene.mj_model
        plane = int(mujoco.mjtGeom.mjGEOM_PLANE)
        floor = [g for g in range(m.ngeom) if int(m.geom_type[g]) == plane][0]
        prims = [c.name for c in env.scene.contacts]
        mu = {max(m.geom_friction[m.geom(p).id, 0], m.geom_friction[floor, 0]) for p in prims}
        assert len(mu) == 1
        assert (cfg.contact.friction or 1.0) == pytest.approx(mu.pop()), name


# ----------------------------------------------------------------------------- slow: physics
#: task -> (seconds, constant control)
ROLLOUTS = {
    "cheetah_run": (2.0, 0.0),
    "walker_stand": (1.5, 0.5),
    "hopper_stand": (2.0, 0.0),
    "finger_spin": (1.0, (1.0, 0.0)),
}


@pytest.fixture(scope="module", params=sorted(ROLLOUTS))
def rollout(request):
    """A task's environment and its step over a batch (two copies of one state)."""
    name = request.param
    kw = {"settle_steps": 0} if name == "cheetah_run" else {}
    env = envs.make(name, **kw)
    return name, env, jax.jit(jax.vmap(env.step))


def _run(env, step, seconds, u):
    """MuJoCo C from the model's initial pose (``qpos0``, at rest; the task's hinge damping
    for the finger) under the constant control ``u``, and jaxdyn's batched ``step`` from the
    same state: the final ``(qpos, qvel)`` of both, jaxdyn's in MuJoCo's joint order."""
    m = env.scene.mj_model
    if hasattr(env, "HINGE_DAMPING"):
        m.dof_damping[m.joint("hinge").dofadr[0]] = env.HINGE_DAMPING
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    ps = env.pipeline_init(env.q_of(d.qpos.copy()), env.q_of(d.qvel.copy()))
    s = env.episode_start(jax.random.PRNGKey(0), ps)
    s = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), s)
    a = np.broadcast_to(np.asarray(u, float), (m.nu,)).copy()
    d.ctrl[:] = a
    for _ in range(int(round(seconds / env.dt))):
        s = step(s, jnp.asarray(np.stack([a, a])))
        mujoco.mj_step(m, d, env.n_frames)
    q, v = np.asarray(s.pipeline_state.q), np.asarray(s.pipeline_state.v)
    assert np.array_equal(q[0], q[1]) and float(s.done.max()) == 0.0
    return env.qpos(q[0]), env.qpos(v[0]), d.qpos.copy(), d.qvel.copy()


@pytest.mark.slow
def test_outcome_like_mujoco(rollout):
    """From MuJoCo's initial pose under a constant control, jaxdyn's batched ``step`` against
    MuJoCo C: cheetah, walker and hopper fall and come to rest on the floor (the torso's speeds
    below 0.05, every speed below 0.1; the hopper's limbs did so only with MuJoCo's joint
    limits, then :meth:`~jaxdyn.io.mjcf.MJCFModel.mujoco_limits`, now the tasks' limit
    constraint, :meth:`~jaxdyn.io.mjcf.MJCFModel.limit_constraints`: under the default
    :class:`jaxdyn.sim.JointLimits` they still moved by 0.2 rad/s at 2 s), the torso (root
    slide z) within 1 cm of MuJoCo's height, after 2 s (cheetah, hopper:
    at 1 s both still settle, the cheetah's sprung feet by 0.07 (jaxdyn) and 0.14 rad/s
    (MuJoCo), the hopper's limbs by up to 3 rad/s (jaxdyn), its torso by 0.08 rad/s (MuJoCo))
    or 1.5 s (walker, which starts balanced upright and tips over); the finger, driven at its
    proximal joint, hits the spinner and turns it the same way (negative, dm_control's
    rewarded direction, by more than a quarter turn in 1 s) and rests at its joint limit as in
    MuJoCo."""
    name, env, step = rollout
    _check_outcome(name, env, *_run(env, step, *ROLLOUTS[name]))


#: task -> the solver options whose rollout :func:`test_outcome_like_mujoco_with_options` checks
#: (those docs/environments.md measures against MJX)
OPTIONS = {
    "cheetah_run": {"max_contacts": 8},
    "hopper_stand": {"max_contacts": 8},
    "walker_stand": {"solver_iterations": 20, "max_contacts": 8},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_outcome_like_mujoco_with_options(name):
    """The contact tasks' cheaper solves (``max_contacts``, ``solver_iterations``: the settings
    docs/environments.md measures against MJX) keep :func:`test_outcome_like_mujoco`'s outcome
    against MuJoCo C: the same fall and rest, the torso within 1 cm of MuJoCo's height."""
    kw = {"settle_steps": 0} if name == "cheetah_run" else {}
    env = envs.make(name, **kw, **OPTIONS[name])
    step = jax.jit(jax.vmap(env.step))
    _check_outcome(name, env, *_run(env, step, *ROLLOUTS[name]))


#: the open-loop rollouts of :func:`test_rollout_equals_mujoco`: seconds, and the most
#: ``|qpos|``, ``|qvel|`` difference from MuJoCo C allowed at any control step (measured over
#: 1 s: 2e-14 / 8e-13 walker, 7e-14 / 2e-13 hopper, 2e-15 / 9e-14 cheetah, 8e-17 / 1e-15
#: ball in cup, 3e-13 / 5e-12 humanoid)
EQUAL_ROLLOUT = (1.0, 1e-9, 1e-8)
#: the MuJoCo ``qpos`` that :func:`test_rollout_equals_mujoco` starts from where it is not
#: ``qpos0`` (the ball in cup's hangs below the cup, touching nothing: here the ball is
#: dropped into the cup, which the random controls then shake)
EQUAL_ROLLOUT_START = {"ball_in_cup_catch": [0.0, 0.0, 0.0, 0.35]}


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    ["cheetah_run", "walker_walk", "hopper_hop", "ball_in_cup_catch", "dm_humanoid_stand"],
)
def test_rollout_equals_mujoco(name):
    """The contact tasks' default physics (MuJoCo's soft contact through the Newton solve,
    :func:`~jaxdyn.envs.dm_control_suite.soft_contact`) is MuJoCo's: from MuJoCo's initial
    state (``qpos0`` at rest; the cheetah without its settling; the ball in cup's ball dropped
    into the cup, :data:`EQUAL_ROLLOUT_START`), under uniform random controls in ``[-1, 1]``
    held for each control step (the same open-loop sequence for both), jaxdyn's ``env.step``
    against ``n_frames`` calls of ``mj_step`` (the bundled files' Newton solver: 100
    iterations, tolerance 1e-8, pyramidal cones, all of MuJoCo's contacts against jaxdyn's 6
    closest slots, the humanoid's 80), float64: ``qpos`` and ``qvel`` within
    :data:`EQUAL_ROLLOUT`'s bounds at every control step over 1 s, through the falls, the
    feet's impacts and sliding, the ball's landing in the shaken cup, the humanoid's fall
    onto the floor (frictionless capsules, ``condim=1``), the joint limits and the ball in
    cup's string (every rollout makes contact: checked). For the walker, the ball in cup and
    the humanoid the hard contact (``contact="hard"``, the default before) departs from
    MuJoCo by more than 1e-3 over the same rollout (the bound tells the two models apart;
    measured: walker above 1e-3, ball in cup 1e-2, humanoid 1.7)."""
    from jaxdyn.envs.dm_control_suite import ContactSuiteEnv

    seconds, tol_q, tol_v = EQUAL_ROLLOUT
    kw = {"settle_steps": 0} if name == "cheetah_run" else {}
    hard = name in ("walker_walk", "ball_in_cup_catch", "dm_humanoid_stand")
    models = ("soft", "hard") if hard else ("soft",)
    for model in models:
        env = envs.make(name, contact=model, **kw)
        assert isinstance(env, ContactSuiteEnv)
        m = env.scene.mj_model
        d = mujoco.MjData(m)
        if name in EQUAL_ROLLOUT_START:
            d.qpos[:] = EQUAL_ROLLOUT_START[name]
        mujoco.mj_forward(m, d)
        q0 = env.q_of(d.qpos.copy())
        ps = env.pipeline_init(q0, env.v_of(q0, d.qvel.copy()))
        s = env.episode_start(jax.random.PRNGKey(0), ps)
        step = jax.jit(env.step)
        controls = np.random.default_rng(0).uniform(-1, 1, (int(round(seconds / env.dt)), m.nu))
        dq, dv, touched = [], [], 0
        for u in controls:
            d.ctrl[:] = u
            mujoco.mj_step(m, d, env.n_frames)
            touched = max(touched, d.ncon)
            s = step(s, jnp.asarray(u))
            q, v = s.pipeline_state.q, s.pipeline_state.v
            dq.append(np.abs(np.asarray(env.qpos(q)) - d.qpos).max())
            dv.append(np.abs(np.asarray(env.qvel(q, v)) - d.qvel).max())
        assert touched >= 1 and float(s.done) == 0.0
        if model == "soft":
            assert max(dq) < tol_q and max(dv) < tol_v, (name, max(dq), max(dv))
        else:
            assert max(dq) > 1e-3, (name, max(dq))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cheetah_run", "walker_walk", "hopper_hop"])
def test_default_contact_cap_drops_nothing(name):
    """The planar tasks' default cap (``ContactSuiteEnv.MAX_CONTACTS`` = 6 of the cheetah's 54,
    the walker's 14 and the hopper's 30 slots) leaves out no slot that touches or closes within
    a simulator step (``info["contacts_dropped"]`` 0: the capped problem is the uncapped one,
    test_scene.py::test_constraint_max_contacts_equals_the_uncapped_solve) along random-action
    rollouts of a batch of resets (16 x 60 control steps; falls, landings and a fallen body's
    limbs on the floor), and ``max_contacts`` of at least the slots solves over all of them.
    The walker under its soft contact (the default; the counts above are of the hard one) is
    the exception: its feet sink into the floor by the soft constraint's penetration and a
    7th slot closes now and then (measured: one slot in 2 of the 960 control steps; allowed:
    one slot in at most 1 % of them), where Playground caps MJX's walker at 4 slots."""
    from jaxdyn.envs.dm_control_suite import ContactSuiteEnv

    env = envs.make(name)
    assert isinstance(env, ContactSuiteEnv)
    k = env.sys.cfg.contact.max_contacts
    assert k == ContactSuiteEnv.MAX_CONTACTS == 6
    B, T = 16, 60
    states = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(4), B))
    nc = int(jax.eval_shape(env.contact_frames, env.reset(jax.random.PRNGKey(0)).pipeline_state)
             .distance.shape[0])  # fmt: skip
    assert nc > k
    full = envs.make(name, max_contacts=nc)
    assert full.sys.cfg.contact.max_contacts == nc  # k >= the slots: every slot solved

    zi = int(env.scene.mj_model.joint("rootz").qposadr[0])

    @jax.jit
    def roll(s, key):
        def body(s, kk):
            a = jax.random.uniform(kk, (B, env.action_size), s.obs.dtype, -1, 1)
            s = jax.vmap(env.step)(s, a)
            z = jax.vmap(env.qpos)(s.pipeline_state.q)[:, zi]
            return s, (s.info["contacts_dropped"], z)

        return jax.lax.scan(body, s, jax.random.split(key, T))

    s, (dropped, z) = roll(states, jax.random.PRNGKey(5))
    assert float(jnp.max(s.done)) == 0.0
    if name == "walker_walk":  # soft contact: a 7th slot closes now and then (see above)
        assert int(jnp.max(dropped)) <= 1 and int(jnp.sum(dropped > 0)) <= B * T // 100
    else:
        assert int(jnp.max(dropped)) == 0
    assert float(jnp.max(z)) - float(jnp.min(z)) > 0.1  # the bodies moved (fell, hopped)


def _check_outcome(name, env, q, v, q_mj, v_mj):
    """:func:`test_outcome_like_mujoco`'s checks of jaxdyn's final ``(q, v)`` against MuJoCo's
    (``_run``)."""
    m = env.scene.mj_model
    if name == "finger_spin":
        hinge = m.joint("hinge").qposadr[0]
        assert q[hinge] < -np.pi / 2 and q_mj[hinge] < -np.pi / 2
        assert abs(q[0] - q_mj[0]) < 0.05  # the proximal joint at its limit in both
        return
    z = m.joint("rootz").qposadr[0]
    z0 = float(m.qpos0[z])
    assert q[z] < z0 - 0.05 and q_mj[z] < z0 - 0.05  # both fell
    assert abs(q[z] - q_mj[z]) < 0.01
    root = [m.joint(j).dofadr[0] for j in ("rootx", "rootz", "rooty")]
    assert np.abs(v[root]).max() < 0.05 and np.abs(v_mj[root]).max() < 0.05  # the torso rests
    assert np.abs(v).max() < 0.1 and np.abs(v_mj).max() < 0.1


def _limit_rollout(cls, mujoco_limits, ctrl, seconds=1.0):
    """``cls`` built with ``mujoco_limits`` (``False``: the default
    :class:`jaxdyn.sim.JointLimits`; ``True``: :meth:`~jaxdyn.io.mjcf.MJCFModel.mujoco_limits`;
    ``"constraint"``: :meth:`~jaxdyn.io.mjcf.MJCFModel.limit_constraints`), its
    ``pipeline_step`` and MuJoCo C (the finger: the task's hinge damping and integrator) from
    ``qpos0`` at rest under the constant ``ctrl``: the limited joints' angles of both at every
    control step ``(T, k)`` and the joints' ranges ``(k, 2)``."""
    env = type(cls.__name__, (cls,), {"mujoco_limits": mujoco_limits})()
    m = env.scene.mj_model
    if getattr(env, "HINGE_DAMPING", None) is not None:
        m.dof_damping[m.joint("hinge").dofadr[0]] = env.HINGE_DAMPING
    if env.integrator == "implicit":
        m.opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    lim = np.array([m.jnt_qposadr[j] for j in range(m.njnt) if m.jnt_limited[j]])
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    ps = env.pipeline_init(env.q_of(d.qpos.copy()), env.q_of(d.qvel.copy()))
    step = jax.jit(env.pipeline_step)
    d.ctrl[:] = ctrl
    qj, qm = [], []
    for _ in range(int(round(seconds / env.dt))):
        ps, bad = step(ps, jnp.asarray(ctrl, ps.q.dtype))
        assert not bool(bad)
        mujoco.mj_step(m, d, env.n_frames)
        qj.append(env.qpos(np.asarray(ps.q))[lim])
        qm.append(d.qpos[lim].copy())
    return np.array(qj), np.array(qm), m.jnt_range[[j for j in range(m.njnt) if m.jnt_limited[j]]]


@pytest.mark.slow
@pytest.mark.parametrize(
    "task, ctrl",
    [("WalkerMove", (-1.0,) * 6), ("FingerSpin", (-1.0, 1.0))],
)
def test_mujoco_limits_too_soft_under_strong_motors(task, ctrl):
    """Why the walker and the finger use MuJoCo's limit constraint
    (:meth:`~jaxdyn.io.mjcf.MJCFModel.limit_constraints`, their default) and not a
    spring-damper (docs/environments.md, the table of the suite's joint limits): their motors
    driving every joint into its stop for 1 s, from ``qpos0`` at rest, against MuJoCo C. With
    :meth:`~jaxdyn.io.mjcf.MJCFModel.mujoco_limits` (a per-joint spring-damper, which does not
    cancel the pushing force as MuJoCo's limit constraint does) the joints go more than twice
    as far past their stops as MuJoCo's and the angles' RMS error is larger than under the
    default :class:`jaxdyn.sim.JointLimits` (measured: walker 0.68 against MuJoCo's 0.25 rad,
    errors 0.28 against 0.09 rad; finger 2.2 against 0.22 rad, errors 0.98 against 0.09 rad);
    with the limit constraint the joints go no farther past than MuJoCo's and the error is
    under a third of the default's (walker 0.24 rad past, error 0.008; finger 0.217 as MuJoCo's,
    error 2e-16: its rows posed with ``M`` under the hinge damping of ``implicitfast``, as
    MuJoCo's; with ``M + h D``, as first merged, 0.16 and 0.026; 4e-8 while the solve scaled
    the limit rows to the idle spinner contacts' mean diagonal). (The default
    ``test_mjcf_scene.test_mujoco_limits_follow_mujocos_limit_constraint`` covers
    ``mujoco_limits`` and ``test_limit_constraints.test_limit_constraint_follows_mujoco`` the
    limit constraint.)"""
    from jaxdyn.envs import dm_control_suite as suite

    cls = getattr(suite, task)
    assert cls.mujoco_limits == "constraint"
    qd, qm, rng = _limit_rollout(cls, False, np.asarray(ctrl))
    ql, qm2, _ = _limit_rollout(cls, True, np.asarray(ctrl))
    qc, qm3, _ = _limit_rollout(cls, "constraint", np.asarray(ctrl))
    assert np.array_equal(qm, qm2) and np.array_equal(qm, qm3)

    def past(q):
        return float(np.maximum(np.maximum(rng[:, 0] - q, q - rng[:, 1]), 0.0).max())

    def rms(q):
        return np.sqrt(np.mean((q - qm) ** 2))

    assert past(qm) > 0.05  # MuJoCo's joints are pushed into their (soft) stops
    assert past(ql) > 2 * past(qm)
    assert rms(ql) > 2 * rms(qd)
    assert past(qc) < 1.05 * past(qm)
    assert rms(qc) < rms(qd) / 3
    if task == "FingerSpin":  # the finger never touches the spinner: only limit rows, whose
        # block the solve scales to its own step (contact._row_scaling), so the default 100
        # iterations reach the exact impulses beside the idle spinner contacts (seen 2e-16)
        assert rms(qc) < 1e-12


@pytest.mark.slow
def test_hopper_touch_sensors_read_the_contacts():
    """The hopper's touch sensors (MuJoCo's ``<touch>`` on the toe and heel sites) against
    MuJoCo's ``sensordata`` at the same states: the foot 1 mm into the floor, flat, on its toe
    and on its heel (ankle +-0.3 rad), landing at 0.5 m/s and at rest. Under the default soft
    contact (MuJoCo's, through its Newton solve) the readings equal MuJoCo's to 1e-9 relative
    (measured 1e-14), zeros included; under the hard contact (``contact="hard"``, whose
    impulses differ from MuJoCo's soft forces) the same sensors read a contact on landing.
    (The default ``test_functions_match_dm_control`` covers the contact-free readings.)"""
    from jaxdyn.envs.dm_control_suite import ContactSuiteEnv

    env, hard = envs.make("hopper_stand"), envs.make("hopper_stand", contact="hard")
    assert isinstance(env, ContactSuiteEnv) and isinstance(hard, ContactSuiteEnv)
    m = env.scene.mj_model
    d = mujoco.MjData(m)
    touch, touch_hard = jax.jit(env.touch), jax.jit(hard.touch)
    floor = m.geom("floor").id
    ids = [m.sensor(s).adr[0] for s in env.touch_sites]
    patterns = []
    for ankle in (0.0, 0.3, -0.3):
        for vz in (-0.5, 0.0):
            d.qpos[:] = 0.0
            d.qpos[m.joint("ankle").qposadr[0]] = ankle
            for _ in range(3):  # lower the hopper until the foot's deepest point is 1 mm in
                mujoco.mj_forward(m, d)
                foot = [m.geom("foot").id]
                dist = mujoco.mj_geomDistance(m, d, floor, foot[0], 1.0, None)
                d.qpos[m.joint("rootz").qposadr[0]] -= dist + 1e-3
            d.qvel[:] = 0.0
            d.qvel[m.joint("rootz").dofadr[0]] = vz
            mujoco.mj_forward(m, d)
            want = np.asarray(d.sensordata[ids])
            q, v = jnp.asarray(env.q_of(d.qpos.copy())), jnp.asarray(env.q_of(d.qvel.copy()))
            got = np.asarray(touch(sim.State(q, v), jnp.zeros(m.nu)))
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * want.max())
            if vz < 0:  # landing: each contact must push, in both contact models
                got = np.asarray(touch_hard(sim.State(q, v), jnp.zeros(m.nu)))
                assert np.array_equal(got > 1e-6, want > 1e-6), (ankle, got, want)
                patterns.append(tuple(want > 1e-6))
    assert patterns == [(True, True), (True, False), (False, True)]


@pytest.mark.slow
def test_finger_reset_is_collision_free():
    """``finger_spin``'s reset (dm_control: redraw until nothing touches): every state of a
    batch is free of contact in MuJoCo, inside the joint ranges."""
    env = envs.make("finger_spin")
    m = env.scene.mj_model
    d = mujoco.MjData(m)
    s = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), 64))
    lo, hi = m.jnt_range[:2, 0], m.jnt_range[:2, 1]
    for q in np.asarray(s.pipeline_state.q):
        d.qpos[:] = env.qpos(q)
        mujoco.mj_forward(m, d)
        assert d.ncon == 0
        assert np.all(lo <= d.qpos[:2]) and np.all(d.qpos[:2] <= hi)


@pytest.mark.slow
def test_brax_ppo_smoke_with_contact():
    """brax.training's PPO trains ``walker_stand`` (contact with the floor) unchanged for a few
    iterations (the contact-free counterpart: ``test_envs_suite.test_brax_ppo_smoke``)."""
    ppo = pytest.importorskip("brax.training.agents.ppo.train")
    env = envs.make("walker_stand")
    _, _, metrics = ppo.train(
        environment=env,
        num_timesteps=1024,
        episode_length=20,
        num_envs=8,
        batch_size=8,
        num_minibatches=2,
        unroll_length=4,
        num_updates_per_batch=1,
        num_evals=2,
        seed=0,
    )
    assert np.isfinite(float(metrics["eval/episode_reward"]))


@pytest.mark.slow
def test_finger_rollout_follows_mujoco():
    """``finger_spin``'s default physics (MuJoCo's soft contact on the file's elliptic cones,
    the Newton solve's three-zone cost) against MuJoCo C: 1 s of random controls driving the
    finger into the spinner (the proximal joint's control biased to ``[0, 1]``; contacts in
    a third of the control steps, sliding on the cone's surface), jaxdyn's ``env.step``
    against ``n_frames`` calls of ``mj_step``, with the spinner's ``frictionloss`` (MuJoCo's
    dry-friction row on both sides: :class:`jaxdyn.sim.FrictionLoss` in the Newton solve) and
    MuJoCo's hinge damping set to the task's: ``qpos`` and ``qvel`` within
    :data:`EQUAL_ROLLOUT`'s bounds at every control step (measured 1.3e-13 / 5.7e-13, the
    friction row in all three of its zones; MuJoCo at its tolerance 1e-8, jaxdyn at the
    task's); the hard contact (the spinner's smooth friction) departs by more than 1e-3."""
    from jaxdyn.envs.dm_control_suite import FingerSpin

    for model in ("soft", "hard"):
        env = envs.make("finger_spin", contact=model)
        assert isinstance(env, FingerSpin)
        m = env.scene.mj_model
        assert m.dof_frictionloss[m.jnt_dofadr[m.joint("hinge").id]] > 0
        assert (env.sys.cfg.friction_loss is not None) == (model == "soft")
        m.dof_damping[m.jnt_dofadr[m.joint("hinge").id]] = env.HINGE_DAMPING
        d = mujoco.MjData(m)
        mujoco.mj_forward(m, d)
        q0 = env.q_of(d.qpos.copy())
        s = env.episode_start(jax.random.PRNGKey(0), env.pipeline_init(q0, env.v_of(q0, d.qvel)))
        step = jax.jit(env.step)
        controls = np.random.default_rng(0).uniform(-1, 1, (int(round(1.0 / env.dt)), m.nu))
        controls[:, 0] = 0.5 + 0.5 * controls[:, 0]
        dq, dv, touched = [], [], 0
        for u in controls:
            d.ctrl[:] = u
            mujoco.mj_step(m, d, env.n_frames)
            touched += d.ncon > 0
            s = step(s, jnp.asarray(u))
            q, v = s.pipeline_state.q, s.pipeline_state.v
            dq.append(np.abs(np.asarray(env.qpos(q)) - d.qpos).max())
            dv.append(np.abs(np.asarray(env.qvel(q, v)) - d.qvel).max())
        assert touched >= 10
        if model == "soft":
            assert max(dq) < EQUAL_ROLLOUT[1] and max(dv) < EQUAL_ROLLOUT[2], (max(dq), max(dv))
        else:
            assert max(dq) > 1e-3, max(dq)

"""Brax PPO on a DeepMind Control Suite task, side by side: MuJoCo Playground's MJX environment
and jaxdyn's port of the same task (:mod:`jaxdyn.envs.dm_control_suite`), the same PPO
configuration (Playground's ``dm_control_suite_params.brax_ppo_config``), one process, the same
machine (issue 48).

Per backend it reports: wall-clock to the first evaluation whose mean episode return reaches
``--threshold`` (from the start of ``ppo.train``, compilation included), the final return after
``--timesteps`` environment steps, the total wall-clock and CPU time, the wall-clock of the
compilations, and the process CPU time of one compiled training period (the epochs between two
evaluations: simulator and PPO update, without compiler or evaluation) with its environment
steps per CPU second, beside Brax's own ``training/sps`` (wall-clock; on a loaded machine it
measures the load).

The RESULTS.md run: ``--tasks suite`` trains cartpole_balance, cheetah_run, walker_walk,
hopper_hop, point_mass_easy, swimmer_swimmer6 and fish_swim (:data:`SUITE`) one after the
other on their :data:`CPU_BUDGETS`, each task's two backends in two
child processes at the same time, each pinned to a core of its own (single-threaded XLA), and
writes the section of RESULTS.md (``--results``) from their JSON files (``--out-dir``)::

    python benchmarks/playground_side_by_side.py --tasks suite --compare-states 100

(``PYTHONPATH`` naming Playground's site-packages where it is installed apart;
``--compare-states 100`` adds the section's second table, each task's :func:`compare_states`,
after the training runs.)

The seed sweep (its own section, :data:`SECTION_SEEDS`, beside the single run's)::

    python benchmarks/playground_side_by_side.py --tasks walker_walk,cheetah_run --seeds 0-4

trains each task once per seed (the seeds one after the other, as ``--tasks`` does), keeps the
per-seed figures in ``--seeds-json`` (:data:`SEEDS_JSON`; a task trained again replaces its
runs there, the other tasks keep theirs: :func:`merge_sweeps`) and writes the section of their
final returns: per seed, mean ± standard deviation, and Welch's t-test of the difference of the two
backends' means (:func:`welch`, :func:`seed_verdict`). ``--report-seeds
benchmarks/playground_seeds.json`` writes that section again without training. A seed's
returns do not depend on the machine's load (single-threaded XLA on a CPU), its timings do.

Playground is optional: ``pip install playground`` (the ``mujoco_playground`` package; it pins
``warp-lang``, ``orbax-checkpoint``, ... that jaxdyn does not need: install it in a separate
environment). Its environments run MJX's JAX implementation here (``impl="jax"``; Playground's
default ``"warp"`` needs NVIDIA Warp). Without it, ``--backend jaxdyn`` trains jaxdyn's port
alone and ``both`` says what is missing.

Budgets: ``--full`` takes Playground's published configuration (2048 environments, 60 M steps
for cartpole; GPU-sized); otherwise each budget option (``--timesteps``, ``--num-envs``,
``--batch-size``, ``--num-minibatches``, ``--updates-per-batch``, ``--num-evals``,
``--num-eval-envs``) not given takes the task's :data:`CPU_BUDGETS` entry, else
:data:`DEFAULT_BUDGET`. Examples::

    python benchmarks/playground_side_by_side.py --task cartpole_balance --timesteps 300000
    python benchmarks/playground_side_by_side.py --task cartpole_swingup --full --backend both
    python benchmarks/playground_side_by_side.py --tasks walker_walk,hopper_hop --results ''

Where the time goes (measured, walker_walk and hopper_hop at 32 environments, one compiled
training period of 7,680 steps): the two backends' training periods cost the same process CPU
time (jaxdyn's environment step costs what Playground's does, ``suite_step.py``; the wrappers
are Brax's on both sides, restarting from the cached first state, float32 on both sides), so
a gap in Brax's ``training/sps`` on a loaded machine is the load. Brax compiles its evaluation
twice on both backends (its first call's parameters are weakly typed and not sharded as the
later calls', which come out of the ``pmap``-ed training epoch): one more compilation in
``compile s``, not in the training periods.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's jaxdyn

#: jaxdyn task -> Playground environment
TASKS = {
    "cartpole_balance": "CartpoleBalance",
    "cartpole_balance_sparse": "CartpoleBalanceSparse",
    "cartpole_swingup": "CartpoleSwingup",
    "cartpole_swingup_sparse": "CartpoleSwingupSparse",
    "pendulum_swingup": "PendulumSwingup",
    "acrobot_swingup": "AcrobotSwingup",
    "acrobot_swingup_sparse": "AcrobotSwingupSparse",
    "reacher_easy": "ReacherEasy",
    "reacher_hard": "ReacherHard",
    "cheetah_run": "CheetahRun",
    "walker_stand": "WalkerStand",
    "walker_walk": "WalkerWalk",
    "walker_run": "WalkerRun",
    "hopper_stand": "HopperStand",
    "hopper_hop": "HopperHop",
    "point_mass_easy": "PointMass",
    "swimmer_swimmer6": "SwimmerSwimmer6",
    "fish_swim": "FishSwim",
    "finger_spin": "FingerSpin",
    "finger_turn_easy": "FingerTurnEasy",
    "finger_turn_hard": "FingerTurnHard",
    "ball_in_cup_catch": "BallInCup",
    "dm_humanoid_stand": "HumanoidStand",
    "dm_humanoid_walk": "HumanoidWalk",
    "dm_humanoid_run": "HumanoidRun",
}

#: the domains of the tasks with contact (jaxdyn's ``ContactSuiteEnv``: their ``contact_report``
#: keyword, :func:`jaxdyn_env`)
CONTACT_DOMAINS = ("cheetah", "walker", "hopper", "finger", "ball_in_cup", "dm_humanoid")

#: the return threshold of "wall-clock to threshold" (``--threshold`` overrides): 700 for the
#: cart-pole (Playground's PPO ends near 1000 on balance), 100 elsewhere (a low bar that the
#: CPU-sized budgets can reach; Playground's published runs go far beyond it)
THRESHOLDS = {"cartpole_balance": 700.0, "cartpole_balance_sparse": 700.0}

#: the CPU-sized budget of each task that ``--tasks`` (the RESULTS.md run) trains, where the
#: command line does not set it: ``timesteps``, ``num_envs`` / ``batch_size`` /
#: ``num_minibatches`` / ``updates_per_batch`` (Brax's ``num_updates_per_batch``),
#: ``num_evals``, ``num_eval_envs``. Each fits a few minutes of one idle core per backend,
#: cold compilation included, so that ``--tasks suite`` runs in about 17 minutes on an idle
#: 2-core machine (both backends of a task at once, one core each; measured 2026-12-03 on the
#: Intel VM; the first four tasks' budgets estimated from the process CPU time of each run on
#: the loaded VM, 2026-11-30: the slower backend of each task took about 1.5 (cartpole), 3 to
#: 4 (cheetah, MJX's compilation), 3 (walker) and 3 (hopper) CPU minutes)
CPU_BUDGETS = {
    # the contact-free tasks share one budget, the contact tasks another (copied per task: a
    # run may change its own)
    **{
        task: dict(
            timesteps=307_200, num_envs=128, batch_size=128, num_minibatches=4,
            updates_per_batch=4, num_evals=6, num_eval_envs=16,
        )
        for task in ("cartpole_balance", "point_mass_easy", "swimmer_swimmer6", "fish_swim")
    },
    **{
        task: dict(
            timesteps=184_320, num_envs=32, batch_size=32, num_minibatches=4,
            updates_per_batch=4, num_evals=5, num_eval_envs=8,
        )
        for task in ("cheetah_run", "walker_walk", "hopper_hop")
    },
}  # fmt: skip
#: the tasks of the RESULTS.md section (``--tasks suite``)
SUITE = (
    "cartpole_balance", "cheetah_run", "walker_walk", "hopper_hop",
    "point_mass_easy", "swimmer_swimmer6", "fish_swim",
)  # fmt: skip
#: the budget options' defaults for a task without a :data:`CPU_BUDGETS` entry
DEFAULT_BUDGET = dict(
    timesteps=300_000, num_envs=256, batch_size=256, num_minibatches=8, updates_per_batch=4,
    num_evals=5, num_eval_envs=16,
)  # fmt: skip

#: Playground's ``brax_ppo_config`` for the suite (mujoco_playground/config/
#: dm_control_suite_params.py, playground 0.2.0), used when Playground is not installed
PLAYGROUND_PPO = dict(
    num_timesteps=60_000_000,
    num_evals=10,
    reward_scaling=10.0,
    episode_length=1000,
    normalize_observations=True,
    action_repeat=1,
    unroll_length=30,
    num_minibatches=32,
    num_updates_per_batch=16,
    discounting=0.995,
    learning_rate=1e-3,
    entropy_cost=1e-2,
    num_envs=2048,
    batch_size=1024,
    num_resets_per_eval=10,
)


def ppo_config(task: str, args) -> dict:
    """Playground's configuration for the task (its own function when installed), cut to the
    CPU-sized budget unless ``--full``."""
    try:
        from mujoco_playground.config import dm_control_suite_params

        cfg = dict(dm_control_suite_params.brax_ppo_config(TASKS[task]).to_dict())
    except ImportError:
        cfg = dict(PLAYGROUND_PPO)
        if task.startswith("acrobot"):
            cfg["num_timesteps"] = 100_000_000
    if args.full and args.full_timesteps:
        cfg["num_timesteps"] = args.full_timesteps
    if not args.full:
        cfg.update(
            num_timesteps=args.timesteps,
            num_envs=args.num_envs,
            batch_size=args.batch_size,
            num_minibatches=args.num_minibatches,
            num_updates_per_batch=args.updates_per_batch,
            num_evals=args.num_evals,
            episode_length=args.episode_length,
            num_eval_envs=args.num_eval_envs,
            # Brax runs num_resets_per_eval training steps at least per evaluation: Playground's
            # 10 would multiply a CPU budget (timesteps rounded up to evals x 10 x batches)
            num_resets_per_eval=args.resets_per_eval,
        )
    return cfg


def playground_env(task: str):
    """Playground's MJX environment and its Brax wrapper, or ``(None, reason)``."""
    try:
        from mujoco_playground import registry, wrapper
    except ImportError as e:
        return None, f"mujoco_playground is not importable ({e}); pip install playground"
    env = registry.load(TASKS[task], config_overrides={"impl": "jax"})
    return (env, wrapper.wrap_for_brax_training), None


def jaxdyn_env(task: str, options: dict | None = None):
    """jaxdyn's port; the walker with Playground's observation (``height_obs="zz"``: the
    torso's ``zz`` where dm_control, jaxdyn's default, observes its height) and the ball in
    cup and the humanoid with Playground's reset (``reset="qpos0"``, where dm_control,
    jaxdyn's default, draws random poses), so that both backends train on the same task.
    The contact tasks train with ``contact_report=False``: Brax's PPO carries the state's
    ``info`` through its loop but never reads the contact solve's report, whose fixed-point
    residual would otherwise be computed on every simulator step (the same observations,
    rewards and physics to the bit; Playground's state carries no such diagnostic).
    ``options``: further keywords of the task (``--jaxdyn-option``: the contact solve's
    ``solver_iterations``, ``solver_polish``, ``contact_report=true``, ...)."""
    from jaxdyn import envs

    kw: dict = {}
    if task.startswith("walker"):
        kw = {"height_obs": "zz"}
    elif task == "ball_in_cup_catch" or task.startswith("dm_humanoid"):
        kw = {"reset": "qpos0"}
    if task.startswith(CONTACT_DOMAINS):
        kw["contact_report"] = False
    kw.update(options or {})
    return envs.make(task, **kw), None  # Brax's own training wrappers


def parse_options(items) -> dict:
    """``--jaxdyn-option KEY=VALUE`` items as keywords: each value read as JSON (``100``,
    ``true``, ``3e-4``), else kept as a string."""
    out = {}
    for item in items or ():
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise SystemExit(f"--jaxdyn-option: {item!r} is not KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


#: JAX's monitoring events of one compilation: tracing, lowering to StableHLO, XLA
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def _union_length(spans) -> float:
    """The length of the union of the intervals ``spans``."""
    total, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def _phases(marks) -> list[dict]:
    """The phases between consecutive ``marks`` (``(kind, step, wall, cpu, voluntary context
    switches)``, in order): each ``kind`` ``"train"`` (Brax's ``policy_params_fn``, called
    after the training epochs of an evaluation period) or ``"eval"`` (``progress_fn``, after
    the evaluation) closes the phase since the mark before it."""
    out = []
    for a, b in zip(marks, marks[1:]):
        out.append(
            dict(
                kind=b[0],
                step=b[1],
                seconds=b[2] - a[2],
                cpu_seconds=b[3] - a[3],
                voluntary_switches=b[4] - a[4],
            )
        )
    return out


def _epoch_figures(phases) -> tuple[float | None, float | None]:
    """``(cpu_seconds_per_epoch, env_steps_per_cpu_second)`` of :func:`train` from its
    :func:`_phases`: the CPU time of the last compiled training period and the environment
    steps per CPU second over all of them. The training periods are the ``"train"`` phases
    after the first one, which closes at step 0 (Brax calls ``policy_params_fn`` once before
    its loop), and after the second, whose epoch compiles; ``None`` where none is left."""
    periods = [p for p in phases if p["kind"] == "train"]
    periods = [dict(b, steps=b["step"] - a["step"]) for a, b in zip(periods, periods[1:])]
    compiled = periods[1:]
    if not compiled:
        return None, None
    cpu = sum(p["cpu_seconds"] for p in compiled)
    return compiled[-1]["cpu_seconds"], sum(p["steps"] for p in compiled) / cpu


def train(backend: str, env, wrap_fn, cfg: dict, seed: int, threshold: float) -> dict:
    """One ``ppo.train``. Besides the returns: ``compile_seconds``, the wall-clock of every
    compilation in it (JAX's monitoring events: tracing, lowering, XLA), and the wall-clock and
    process CPU time of each training period (Brax's training epochs between two evaluations)
    and each evaluation apart (``phases``; marked by Brax's ``policy_params_fn``, which it
    calls between the two, and ``progress_fn``). From them, over the training periods after
    the first (compiled before: ``num_evals`` >= 3): ``cpu_seconds_per_epoch``, the process
    CPU time of one training period, and ``env_steps_per_cpu_second``, its environment steps
    per CPU second (the simulator and PPO's update without the compiler and the evaluation,
    and far less sensitive to a loaded machine than Brax's wall-clock ``training/sps``);
    ``cpu_seconds_last_epoch``, the last training period and its evaluation together (the
    figure of earlier runs)."""
    import resource

    import jax
    from brax.training.agents.ppo import train as ppo

    evals = []
    marks = []  # (kind, step, wall, cpu, voluntary context switches)
    spans = []  # (start, end) of each compilation event; nested traces overlap: their union

    def on_event(event, duration, **_):
        if event in COMPILE_EVENTS:
            end = time.perf_counter()
            spans.append((end - duration, end))

    def mark(kind, step):
        ru = resource.getrusage(resource.RUSAGE_SELF)
        marks.append((kind, int(step), time.perf_counter(), time.process_time(), ru.ru_nvcsw))

    jax.monitoring.register_event_duration_secs_listener(on_event)
    t0, c0 = time.perf_counter(), time.process_time()
    mark("start", 0)

    def progress(step, metrics):
        mark("eval", step)
        evals.append(
            dict(
                step=int(step),
                time=time.perf_counter() - t0,
                cpu=time.process_time() - c0,
                reward=float(metrics["eval/episode_reward"]),
                sps=float(metrics.get("training/sps", float("nan"))),
            )
        )
        e = evals[-1]
        print(
            f"  [{backend}] {step:>10d} steps  return {e['reward']:8.2f}  {e['time']:7.1f} s  "
            f"{e['sps']:9.0f} steps/s  (CPU {e['cpu']:.1f} s)",
            flush=True,
        )

    kw = dict(
        cfg,
        environment=env,
        progress_fn=progress,
        policy_params_fn=lambda step, *_: mark("train", step),
        seed=seed,
    )
    if wrap_fn is not None:
        kw["wrap_env_fn"] = wrap_fn
    try:
        ppo.train(**kw)
    finally:
        jax.monitoring.unregister_event_duration_listener(on_event)
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    reached = [e for e in evals if e["reward"] >= threshold]
    sps = sorted(e["sps"] for e in evals[2:] if e["sps"] == e["sps"])
    phases = _phases(marks)
    per_epoch, steps_cpu = _epoch_figures(phases)
    return dict(
        backend=backend,
        final_return=evals[-1]["reward"] if evals else float("nan"),
        seconds_to_threshold=reached[0]["time"] if reached else None,
        total_seconds=total,
        cpu_seconds=cpu,
        compile_seconds=_union_length(spans),
        cpu_seconds_last_epoch=evals[-1]["cpu"] - evals[-2]["cpu"] if len(evals) >= 3 else None,
        cpu_seconds_per_epoch=per_epoch,
        env_steps_per_cpu_second=steps_cpu,
        # Brax's training/sps of the evaluation periods after the first (whose epoch compiles)
        env_steps_per_second=sps[len(sps) // 2] if sps else None,
        evals=evals,
        phases=phases,
    )


def check(task: str, n_steps: int, seed: int) -> dict:
    """Both environments from the same key under the same actions: the largest differences of
    the observations and rewards over ``n_steps`` control steps (Playground's float32 MJX
    against jaxdyn's port in the default dtype). The tasks with contact diverge after the first
    contact (MuJoCo's soft constraints against jaxdyn's :class:`jaxdyn.sim.Constraint`), and
    where the port follows dm_control rather than Playground the observations differ by design
    (``finger_*``: dm_control's model, with its touch sensors and colliding decorations, at
    dm_control's 0.01 s step). The walker's and hopper's resets are Playground's where
    Playground's draw for the key touches nothing; where it penetrates jaxdyn's reset draws
    again (``ContactSuiteEnv.planar_reset``) and the two start apart."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    made, why = playground_env(task)
    if made is None:
        return dict(missing=why)
    pg = made[0]
    jd = jaxdyn_env(task)[0]
    key = jax.random.PRNGKey(seed)
    a, b = jax.jit(pg.reset)(key), jax.jit(jd.reset)(key)
    step_a, step_b = jax.jit(pg.step), jax.jit(jd.step)
    d_obs = [float(np.abs(np.asarray(a.obs) - np.asarray(b.obs)).max())]
    d_rew = []
    for k in range(n_steps):
        u = jnp.full((jd.action_size,), 0.8 * np.sin(0.3 * k), jnp.float32)
        a, b = step_a(a, u), step_b(b, u)
        d_obs.append(float(np.abs(np.asarray(a.obs) - np.asarray(b.obs)).max()))
        d_rew.append(abs(float(a.reward) - float(b.reward)))
    return dict(steps=n_steps, max_obs_diff=max(d_obs), max_reward_diff=max(d_rew))


#: why the hopper's touch entries differ: the contact forces of two solves of MuJoCo's soft
#: contact (the hopper's default, :func:`jaxdyn.envs.dm_control_suite.soft_contact`)
_TOUCH = (
    "touch: contact forces of Playground's MJX solve (float32, the file's cut solver settings), "
    "jaxdyn's solved to MuJoCo's tolerance (float64)"
)

#: observation entries that differ by design, per task: (slice, why)
#: (the walker's height entry, dm_control's torso z where Playground reads the torso's zz,
#: is compared on Playground's definition: :func:`jaxdyn_env` passes ``height_obs="zz"``)
OBS_BY_DESIGN = {
    "hopper_stand": (slice(13, 15), _TOUCH),
    "hopper_hop": (slice(13, 15), _TOUCH),
}


def compare_states(task: str, n_steps: int, seed: int) -> dict:
    """Observation and reward of both environments as functions of the SAME physical state:
    states along a Playground rollout (from one key, the open-loop actions of :func:`check`),
    each given to Playground's ``_get_obs`` / ``_get_reward`` (after ``mjx.forward``, which
    computes the sensors) and to jaxdyn's ``observe`` / ``reward`` (at ``q, v`` converted from
    ``qpos, qvel``). Unlike :func:`check` this does not depend on the two simulators following
    the same trajectory through contact. The entries of :data:`OBS_BY_DESIGN` are reported
    apart. Tasks whose reward reads a target (reacher, finger) are left to :func:`check`; the
    swimmer's and the fish's target is the model's position on both sides (Playground's
    ``make_data`` leaves the mocap body there)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from mujoco import mjx

    made, why = playground_env(task)
    if made is None:
        return dict(missing=why)
    pg = made[0]
    jd = jaxdyn_env(task)[0]
    from jaxdyn.envs.dm_control_suite import ContactSuiteEnv, FishSwim, SuiteReacher, Swimmer

    if isinstance(jd, SuiteReacher) or task.startswith("finger"):
        return dict(skipped="the reward reads the target of the episode's info; see --check")
    from mujoco_playground._src import mjx_env

    def pg_fns(qpos, qvel, action):
        data = mjx_env.make_data(
            pg.mj_model,
            qpos=qpos,
            qvel=qvel,
            ctrl=action,
            impl=pg.mjx_model.impl.value,
            naconmax=pg._config.naconmax,
            njmax=pg._config.njmax,
        )
        data = mjx.forward(pg.mjx_model, data)
        metrics = {}
        return pg._get_obs(data, {}), pg._get_reward(data, action, {}, metrics)

    def jd_fns(qpos, qvel, action):
        dt = jd.sys.model.mass.dtype
        q = jd.q_of(qpos.astype(dt))
        ps = jd.pipeline_init(q, jd.v_of(q, qvel.astype(dt)))
        a = action.astype(dt)
        # the swimmer's and the fish's target: the model's position, where Playground's
        # make_data leaves its mocap body (the episode's target is drawn at reset)
        if isinstance(jd, Swimmer):
            target = jnp.asarray(jd.model_target[:2], dt)
            return jd.observe(ps, ps, target), jd.reward(ps, ps.q, target)[0]
        if isinstance(jd, FishSwim):
            target = jnp.asarray(jd.target_pos, dt)
            return jd.observe(ps, ps.q, target), jd.reward(ps, ps.q, target)[0]
        if isinstance(jd, ContactSuiteEnv):
            sensors = jd.sensors(ps, a)
            return jd.observe(ps, sensors), jd.reward(ps, sensors, a)[0]
        return jd.observe(ps, ps.q), jd.reward(ps, ps.q, a)[0]

    pg_fns, jd_fns = jax.jit(pg_fns), jax.jit(jd_fns)
    state = jax.jit(pg.reset)(jax.random.PRNGKey(seed))
    step = jax.jit(pg.step)
    design = OBS_BY_DESIGN.get(task)
    keep = np.ones(jd.observation_size, bool)
    if design is not None:
        keep[design[0]] = False
    d_obs, d_design, d_rew, r_pg = [], [], [], []
    for k in range(n_steps):
        u = jnp.full((jd.action_size,), 0.8 * np.sin(0.3 * k), jnp.float32)
        qpos, qvel = state.data.qpos, state.data.qvel
        oa, ra = (np.asarray(x, float) for x in pg_fns(qpos, qvel, u))
        ob, rb = (np.asarray(x, float) for x in jd_fns(qpos, qvel, u))
        if oa.shape != ob.shape:
            return dict(obs_size=(oa.shape, ob.shape))
        d = np.abs(oa - ob)
        d_obs.append(float(d[keep].max()))
        d_design.append(float(d[~keep].max()) if design is not None else 0.0)
        d_rew.append(abs(float(ra) - float(rb)))
        r_pg.append(float(ra))
        state = step(state, u)
    out = dict(
        states=n_steps,
        obs_size=int(jd.observation_size),
        max_obs_diff=max(d_obs),
        max_reward_diff=max(d_rew),
        reward_range=[min(r_pg), max(r_pg)],
    )
    if design is not None:
        out["by_design"] = dict(
            entries=[design[0].start, design[0].stop], why=design[1], max_diff=max(d_design)
        )
    return out


def _num(x) -> str:
    return "-" if x is None else f"{x:.0f}"


SECTION = "## MuJoCo Playground side by side (DM Control Suite, Brax PPO, CPU)"
#: the section of runs made on a GPU (``device`` in their JSON)
SECTION_GPU = "## MuJoCo Playground side by side on a GPU (DM Control Suite, Brax PPO)"


def _device() -> str:
    """``platform: device kind`` of JAX's default device (``cpu: cpu``, ``gpu: NVIDIA H200``)."""
    import jax

    d = jax.devices()[0]
    return f"{d.platform}: {d.device_kind}"


def _versions() -> str:
    from _env import dist_version

    names = ("jax", "jaxlib", "mujoco", "mujoco-mjx", "brax", "playground")
    return ", ".join(f"{n} {dist_version(n)}" for n in names)


def _run_rows(d, cpu_columns: bool) -> list[str]:
    """The table rows of one task's training runs (MJX first): with ``cpu_columns`` the CPU
    section's process-time columns (CPU s, CPU s of the last epoch) beside compile s."""
    c = d["config"]
    shape = (
        f"{c['num_envs']} / {c['batch_size']} / {c['num_minibatches']} / "
        f"{c['num_updates_per_batch']}"
    )
    out = []
    for r in sorted(d["results"], key=lambda r: r["backend"] != "mjx"):
        st, sps = r["seconds_to_threshold"], r["env_steps_per_second"]
        steps = max([e["step"] for e in r.get("evals", [])], default=c["num_timesteps"])
        cells = [
            d["task"],
            f"{steps:,}",
            shape,
            f"{d['threshold']:g}",
            "MJX (Playground)" if r["backend"] == "mjx" else "jaxdyn",
            f"{r['final_return']:.1f}",
            "not reached" if st is None else f"{st:.0f}",
            f"{r['total_seconds']:.0f}",
        ]
        if cpu_columns:
            cells.append(f"{r.get('cpu_seconds', float('nan')):.0f}")
        cells.append(_num(r.get("compile_seconds")))
        if cpu_columns:
            per = r.get("cpu_seconds_per_epoch")
            cells.append("-" if per is None else f"{per:.2f}")
            steps_cpu = r.get("env_steps_per_cpu_second")
            cells.append("-" if steps_cpu is None else f"{steps_cpu:,.0f}")
        cells.append("-" if sps is None else f"{sps:,.0f}")
        out.append("| " + " | ".join(cells) + " |")
    width = 13 if cpu_columns else 10
    for m in d.get("missing", []):
        out.append(f"| {d['task']} | | | | {m} |" + " |" * (width - 5))
    return out


def report(paths, out: str, note: str = "") -> str:
    """The RESULTS.md section of the runs' JSON files (``--out`` of a training run, or of
    ``--compare-states``): one table of the training runs, one of the state comparisons, the
    machine, the versions and the date; written into ``out`` (:func:`_env.write_section`)."""
    import datetime
    import os
    import platform
    from pathlib import Path

    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    from _env import cpu_name, git_commit, write_section

    runs, comps = [], []
    for p in paths:
        d = json.loads(Path(p).read_text())
        (runs if "results" in d else comps).append(d)
    commit = git_commit()
    gpu = [d for d in runs if d.get("device", "").startswith("gpu")]
    if gpu and len(gpu) != len(runs):
        raise ValueError("report: GPU and CPU runs go to separate sections (report them apart)")
    if gpu:
        return _report_gpu(runs, out, commit, note)
    lines = [
        SECTION,
        "",
        "`python benchmarks/playground_side_by_side.py --tasks suite` (issue 48): Brax PPO with "
        "Playground's configuration for the suite (`dm_control_suite_params.brax_ppo_config`: "
        "learning rate, discount, entropy, reward scaling, unroll 30, observation "
        "normalisation, Brax's default networks) cut to the CPU-sized budgets of the script's "
        "`CPU_BUDGETS` (and one reset per evaluation: Brax runs at least "
        "`num_resets_per_eval` training steps per evaluation, and Playground's 10 would round "
        'a CPU budget up tenfold), on Playground\'s MJX environment (`impl="jax"`, float32) '
        "and on jaxdyn's port (float32), seed 0, one seed, both through Brax's training "
        "wrappers (Playground's `wrap_for_brax_training` for its environment, Brax's "
        "`envs.training.wrap` for jaxdyn's: both restart a finished episode from the cached "
        "first state). **The budgets are far below Playground's published ones** (60 M "
        "environment steps, 2048 environments, batch 1024): the returns say whether both learn "
        "the same task at the start, not where they end. Return: mean episode return of the "
        "evaluation episodes (1000 control steps). Time to threshold: from the start of "
        "`ppo.train` (compilation included) to the first evaluation at or above it. Total s, "
        "CPU s: wall-clock and process CPU time of the whole `ppo.train` (compilation "
        "included). Compile s: wall-clock of the compilations in it (JAX's monitoring events: "
        "tracing, lowering, XLA). CPU s / epoch: process CPU time of the last training period "
        "(the training epochs between two evaluations, compiled before, with Brax's batch "
        "reset after it; evaluation excluded); env steps / CPU s: environment steps of the "
        "compiled training periods per CPU second of them (the simulator and PPO's update, "
        "without the compiler and the evaluation). Env steps/s: Brax's `training/sps` "
        "(wall-clock of the training epochs alone, median over the evaluation periods after "
        "the first, whose epoch compiles; '-': one such period or none).",
        "",
        "| task | env steps | envs / batch / minibatches / updates | threshold | backend "
        "| final return | s to threshold | total s | CPU s | compile s | CPU s / epoch "
        "| env steps / CPU s | env steps/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    merged = {}  # one row group per task (``--backend mjx`` and ``jaxdyn`` runs together)
    for d in runs:
        m = merged.setdefault(d["task"], dict(d, results=[], missing=[]))
        if d["config"] != m["config"]:
            raise ValueError(f"report: {d['task']}: the runs' PPO configurations differ")
        m["results"] += d["results"]
        m["missing"] += d.get("missing", [])
    for d in merged.values():
        d["results"].sort(key=lambda r: r["backend"] != "mjx")
        lines += _run_rows(d, cpu_columns=True)
    if comps:
        lines += [
            "",
            "Observations and rewards on the same physical state (`--compare-states 100`: the "
            "states of a 100-step Playground rollout from one key under open-loop actions, given "
            "to Playground's `_get_obs` / `_get_reward` after `mjx.forward` and to jaxdyn's "
            "`observe` / `reward`; largest absolute differences; Playground computes in float32, "
            "jaxdyn in float64):",
            "",
            "| task | obs size | max obs diff | max reward diff | Playground's reward range "
            "| differs by design |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for d in comps:
            if "states" not in d:
                lines.append(f"| {d['task']} | {d.get('skipped') or d.get('missing')} | | | | |")
                continue
            bd = d.get("by_design")
            design = (
                ""
                if bd is None
                else f"entries {bd['entries']}: {bd['why']} (max {bd['max_diff']:.2g})"
            )
            lo, hi = d["reward_range"]
            lines.append(
                f"| {d['task']} | {d['obs_size']} | {d['max_obs_diff']:.1e} "
                f"| {d['max_reward_diff']:.1e} | {lo:.3f} .. {hi:.3f} | {design} |"
            )
    lines += [
        "",
        f"Machine: {cpu_name()}, {platform.machine()}, {os.cpu_count()} cores; {_versions()}; "
        f"jaxdyn {commit}; {datetime.date.today().isoformat()}." + (f" {note}" if note else ""),
    ]
    text = "\n".join(lines) + "\n"
    write_section(out, text)
    return text


def _report_gpu(runs, out, commit, note) -> str:
    """The GPU section of :func:`report`: the runs' device, host and versions as recorded by
    the run itself (the GPU machine, not the one rendering the report)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _env import write_section

    d0 = runs[0]
    lines = [
        SECTION_GPU,
        "",
        f"Run {d0.get('date', '?')} on **{d0['device']}** (host {d0.get('host', '?')}); "
        f"{d0.get('versions', '?')}; jaxdyn {commit}. `python benchmarks/"
        "playground_side_by_side.py --full --full-timesteps N --task T` (issue 48): Brax PPO "
        "with Playground's own configuration for the task (`dm_control_suite_params."
        "brax_ppo_config`: 2048 environments, batch 1024, its minibatches, updates, "
        "evaluations and resets) with the environment steps cut to N (Playground publishes 60 M; "
        'the GPU was lent for minutes), on Playground\'s MJX environment (`impl="jax"`) and on '
        "jaxdyn's port, seed 0, one after the other in one process on the same GPU. Return: "
        "mean episode return of the evaluation episodes (1000 control steps). Time to "
        "threshold: from the start of `ppo.train` (compilation included) to the first "
        "evaluation at or above it. Env steps/s: Brax's `training/sps` (training phases only, "
        "median over the evaluation periods after the first, whose epoch compiles; runs "
        "before 2026-11-30: over all of them). Compile s: wall-clock of the compilations inside "
        "`ppo.train` (JAX's monitoring events).",
        "",
        "| task | env steps | envs / batch / minibatches / updates | threshold | backend "
        "| final return | s to threshold | total s | compile s | env steps/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for d in runs:
        lines += _run_rows(d, cpu_columns=False)
    if note:
        lines += ["", note]
    text = "\n".join(lines) + "\n"
    write_section(out, text)
    return text


#: the section of a seed sweep (``--tasks T --seeds S``), beside :data:`SECTION`
SECTION_SEEDS = "## MuJoCo Playground side by side over seeds (DM Control Suite, Brax PPO, CPU)"
#: the seed sweep's per-seed records (``--seeds-json``'s default), from which
#: ``--report-seeds`` writes its section again without training
SEEDS_JSON = Path(__file__).resolve().parent / "playground_seeds.json"
#: the per-seed figures of a training run that a seed sweep keeps (:func:`seed_records`)
SEED_FIELDS = (
    "final_return",
    "seconds_to_threshold",
    "total_seconds",
    "cpu_seconds",
    "compile_seconds",
    "env_steps_per_cpu_second",
    "env_steps_per_second",
)


def welch(a, b) -> dict | None:
    """Welch's unequal-variance t-test of the means of the samples ``a`` and ``b`` (Welch,
    Biometrika 34, 1947): ``diff = mean(b) - mean(a)``, its two-sided 95 % confidence interval
    ``low`` .. ``high`` (Student's t quantile at the Welch-Satterthwaite degrees of freedom
    ``df``) and the two-sided ``p``; ``None`` where a sample has fewer than two values. Two
    samples without spread: the interval is the difference itself, ``p`` 1 where the means are
    equal, else 0."""
    import math
    import statistics

    from scipy import stats

    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return None
    diff = statistics.fmean(b) - statistics.fmean(a)
    wa, wb = statistics.variance(a) / na, statistics.variance(b) / nb
    if wa + wb == 0:
        return dict(diff=diff, low=diff, high=diff, df=float(na + nb - 2), p=float(diff == 0))
    df = (wa + wb) ** 2 / (wa**2 / (na - 1) + wb**2 / (nb - 1))
    se = math.sqrt(wa + wb)
    half = float(stats.t.ppf(0.975, df)) * se
    p = float(2 * stats.t.sf(abs(diff) / se, df))
    return dict(diff=diff, low=diff - half, high=diff + half, df=df, p=p)


def paired(a, b) -> dict | None:
    """The paired t-test of ``b - a`` (Student's, on the per-seed differences; the same seed
    gives both backends the same initial networks and the same keys, so their returns
    correlate): ``diff``, its 95 % interval ``low`` .. ``high``, ``p``; ``None`` under two
    pairs. Differences without spread: the interval is the difference, ``p`` 1 or 0."""
    import math
    import statistics

    from scipy import stats

    d = [y - x for x, y in zip(a, b, strict=True)]
    if len(d) < 2:
        return None
    diff, se = statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d))
    if se == 0:
        return dict(diff=diff, low=diff, high=diff, p=float(diff == 0))
    half = float(stats.t.ppf(0.975, len(d) - 1)) * se
    p = float(2 * stats.t.sf(abs(diff) / se, len(d) - 1))
    return dict(diff=diff, low=diff - half, high=diff + half, p=p)


def _side(test: dict) -> str:
    if test["low"] <= 0.0 <= test["high"]:
        return "same"
    return "higher" if test["diff"] > 0 else "lower"


def seed_verdict(test: dict | None, pair: dict | None = None) -> str:
    """The sweep table's verdict of :func:`welch` (MJX ``a``, jaxdyn ``b``): the same within
    seed noise where the 95 % interval of the difference holds 0, else which is higher; with
    :func:`paired`'s ``pair``, also its verdict where it differs."""
    if test is None:
        return "- (fewer than 2 seeds)"
    side = _side(test)
    out = "same within seed noise" if side == "same" else f"jaxdyn {side}"
    if pair is not None and _side(pair) != side:
        word = "the same" if _side(pair) == "same" else f"jaxdyn {_side(pair)}"
        out += f" (Welch); {word} paired by seed"
    return out


def seed_records(paths) -> tuple[list[dict], dict]:
    """The per-seed records of a sweep's training runs (their ``--out`` JSON files): one per
    run and backend, ``task``, ``backend``, ``seed`` (the JSON's, else the ``_s<seed>`` of the
    file name the sweep gives it) and :data:`SEED_FIELDS`; and per task its ``threshold`` and
    PPO ``config`` (which must be the same for every seed and backend)."""
    import re

    records, tasks = [], {}
    for p in paths:
        d = json.loads(Path(p).read_text())
        seed = d.get("seed")
        if seed is None:
            m = re.search(r"_s(\d+)\.json$", str(p))
            if m is None:
                raise ValueError(f"seed_records: {p}: no seed in the JSON nor in the file name")
            seed = int(m.group(1))
        t = tasks.setdefault(d["task"], dict(threshold=d["threshold"], config=d["config"]))
        if t["config"] != d["config"]:
            raise ValueError(f"seed_records: {d['task']}: the runs' PPO configurations differ")
        for r in d["results"]:
            rec = dict(task=d["task"], backend=r["backend"], seed=int(seed))
            records.append(rec | {k: r.get(k) for k in SEED_FIELDS})
    records.sort(key=lambda r: (r["seed"], r["backend"] != "mjx"))
    return records, tasks


def _median(xs) -> float | None:
    import statistics

    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _pair(a, b, fmt) -> str:
    return " / ".join("-" if x is None else format(x, fmt) for x in (a, b))


def seed_rows(sweep: dict) -> list[str]:
    """The rows of the seed sweep's table, one per task (in the order of its records): each
    backend's final return per seed (in seed order; '-' for a seed it lacks), its mean and
    sample standard deviation, :func:`welch`'s difference jaxdyn - MJX with its 95 % interval,
    ``p`` and :func:`seed_verdict`, and the medians over the seeds of the total wall-clock
    and of the environment steps per CPU second (MJX / jaxdyn)."""
    import statistics

    out = []
    for task in dict.fromkeys(r["task"] for r in sweep["runs"]):
        runs = [r for r in sweep["runs"] if r["task"] == task]
        seeds = sorted({r["seed"] for r in runs})
        side = {b: {r["seed"]: r for r in runs if r["backend"] == b} for b in ("mjx", "jaxdyn")}
        ret = {b: [r["final_return"] for r in side[b].values()] for b in side}
        cells = [task, ", ".join(map(str, seeds))]
        for b in ("mjx", "jaxdyn"):
            per = [side[b].get(s) for s in seeds]
            cells.append(", ".join("-" if r is None else f"{r['final_return']:.1f}" for r in per))
            xs = ret[b]
            sd = f"{statistics.stdev(xs):.1f}" if len(xs) >= 2 else "-"
            cells.append(f"{statistics.fmean(xs):.1f} ± {sd}" if xs else "-")
        test = welch(ret["mjx"], ret["jaxdyn"])
        both = [s for s in seeds if s in side["mjx"] and s in side["jaxdyn"]]
        pair = paired(*([side[b][s]["final_return"] for s in both] for b in ("mjx", "jaxdyn")))
        for t in (test, pair):
            if t is None:
                cells += ["-", "-"]
            else:
                cells.append(f"{t['diff']:+.1f} ({t['low']:+.1f} .. {t['high']:+.1f})")
                cells.append(f"{t['p']:.2f}" if t["p"] >= 0.01 else f"{t['p']:.0e}")
        lower = sum(
            side["jaxdyn"][s]["final_return"] < side["mjx"][s]["final_return"] for s in both
        )
        cells.append(f"{lower} of {len(both)}")
        cells.append(seed_verdict(test, pair))
        for key, fmt in (("total_seconds", ".0f"), ("env_steps_per_cpu_second", ",.0f")):
            mjx, jd = (_median(r[key] for r in side[b].values()) for b in ("mjx", "jaxdyn"))
            cells.append(_pair(mjx, jd, fmt))
        out.append("| " + " | ".join(cells) + " |")
    return out


def report_seeds(sweep: dict, out: str) -> str:
    """The RESULTS.md section of a seed sweep (:data:`SECTION_SEEDS`; the dict of
    :func:`sweep_of`, as ``--seeds-json`` keeps it): its table (:func:`seed_rows`) with the
    statistical test it applies, the machine, versions and commit of the sweep; written into
    ``out`` (:func:`_env.write_section`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _env import write_section

    budgets = "; ".join(
        f"{task} {t['config']['num_timesteps']:,} steps, {t['config']['num_envs']} envs"
        for task, t in sweep["tasks"].items()
    )
    lines = [
        SECTION_SEEDS,
        "",
        "`python benchmarks/playground_side_by_side.py --tasks T --seeds S` (issue 48): the "
        "training runs of the section above (Playground's PPO configuration cut to the "
        f"script's `CPU_BUDGETS`: {budgets}; Playground's MJX environment and jaxdyn's port, "
        "float32, both backends of a task at the same time, one core each, cold compilations) "
        "repeated over Brax PPO's `seed` (network initialisation, resets, action sampling). "
        "Final return: the last evaluation's mean episode return, per seed in seed order, then "
        "mean ± sample standard deviation over the seeds. Test of 'the same final return "
        "within seed noise': Welch's unequal-variance t-test of the two backends' final "
        "returns, two-sided at 5 %: jaxdyn − MJX with its 95 % confidence interval (Student's "
        "t at the Welch-Satterthwaite degrees of freedom) and p; 'same within seed noise' "
        "where the interval holds 0, else 'jaxdyn higher' / 'jaxdyn lower'. With a few seeds "
        "the interval is wide: 'same' says that these seeds cannot tell the backends apart by "
        "more than the interval, not that they are equal. Beside it the paired t-test of the "
        "per-seed differences (a seed gives both backends the same initial networks and the "
        "same keys, so their returns correlate across seeds and the pairing removes that "
        "part of the noise; the verdict names its answer where it differs from Welch's). "
        "Total s (wall-clock of `ppo.train`) and env steps / CPU s (as above): medians over "
        "the seeds, MJX / jaxdyn, measured under the load that the machine line gives; the "
        "section above holds the idle timings.",
        "",
        "| task | seeds | MJX final return per seed | MJX mean ± sd | jaxdyn final return per "
        "seed | jaxdyn mean ± sd | jaxdyn − MJX (95 % CI) | Welch p | paired by seed: jaxdyn − MJX "
        "(95 % CI) | paired p | seeds with jaxdyn lower | verdict "
        "| total s, median | env steps / CPU s, median |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *seed_rows(sweep),
    ]
    parts = sweep_parts(sweep)
    for part in parts:
        which = f"{', '.join(part['tasks'])}: " if len(parts) > 1 else ""
        lines += [
            "",
            f"{which}Machine: {part.get('machine', '?')}; {part.get('versions', '?')}; jaxdyn "
            f"{part.get('commit', '?')}; {part.get('date', '?')}. {part.get('note', '')}".rstrip(),
        ]
    text = "\n".join(lines) + "\n"
    write_section(out, text)
    return text


def sweep_of(paths, note: str) -> dict:
    """The seed sweep's record (``--seeds-json``): :func:`seed_records` of the runs' JSON files
    with the machine, versions, commit and date of now, and ``note`` (how it ran)."""
    import datetime

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _env import cpu_name, git_commit

    records, tasks = seed_records(paths)
    return dict(
        machine=f"{cpu_name()}, {platform.machine()}, {os.cpu_count()} cores",
        versions=_versions(),
        commit=git_commit(),
        date=datetime.date.today().isoformat(),
        note=note,
        tasks=tasks,
        runs=records,
    )


_META = ("machine", "versions", "commit", "date", "note")


def sweep_parts(sweep: dict) -> list[dict]:
    """The sweeps a record holds (:func:`merge_sweeps`), each with its ``tasks`` (names) and
    :data:`_META` (machine, versions, commit, date, note); a record of one sweep
    (:func:`sweep_of`) is one part of all its tasks."""
    if "sweeps" in sweep:
        return sweep["sweeps"]
    return [{k: sweep.get(k) for k in _META} | {"tasks": list(sweep["tasks"])}]


def merge_sweeps(old: dict, new: dict) -> dict:
    """The record ``old`` with the sweep ``new`` written into it: a task that ``new`` trained
    takes ``new``'s runs, configuration and machine line (its runs in ``old`` are dropped: runs
    of other commits or machines are not mixed in one row), the other tasks of ``old`` keep
    theirs, each part with its own machine line (:func:`sweep_parts`)."""
    tasks = set(new["tasks"])
    parts = []
    for part in sweep_parts(old):
        left = [t for t in part["tasks"] if t not in tasks]
        if left:
            parts.append(part | {"tasks": left})
    parts += sweep_parts(new)
    return {
        "tasks": {t: c for t, c in old["tasks"].items() if t not in tasks} | new["tasks"],
        "runs": [r for r in old["runs"] if r["task"] not in tasks] + list(new["runs"]),
        "sweeps": parts,
    }


def write_sweep(sweep: dict, seeds_json: str, results: str) -> None:
    """Keep the sweep's record in ``seeds_json`` (merged into the record there, if any:
    :func:`merge_sweeps`) and its section in ``results`` (either ``''``: not written)."""
    if seeds_json != "":
        if Path(seeds_json).exists():
            sweep = merge_sweeps(json.loads(Path(seeds_json).read_text()), sweep)
        Path(seeds_json).write_text(json.dumps(sweep, indent=1) + "\n")
        print(f"per-seed records in {seeds_json}")
    if results != "":
        print(report_seeds(sweep, results))


def resolve_budget(args) -> None:
    """Each budget option of ``args`` not given on the command line (``None``) set from the
    task's :data:`CPU_BUDGETS` entry, else from :data:`DEFAULT_BUDGET`."""
    for k, v in CPU_BUDGETS.get(args.task, DEFAULT_BUDGET).items():
        if getattr(args, k) is None:
            setattr(args, k, v)


#: options of the command line that ``--tasks`` does not pass on to its children
_DRIVER_OPTIONS = {
    "--tasks": 1,
    "--out-dir": 1,
    "--sequential": 0,
    "--time-limit": 1,
    "--warm-cache": 0,
    "--compare-states": 1,  # run by children of their own, after the training
    "--seeds": 1,  # each child gets its --seed
    "--seeds-json": 1,
}


def _child_args(argv) -> list[str]:
    """``argv`` without the options of the ``--tasks`` driver (:data:`_DRIVER_OPTIONS`)."""
    out, skip = [], 0
    for a in argv:
        if skip:
            skip -= 1
            continue
        name = a.split("=", 1)[0]
        if name in _DRIVER_OPTIONS:
            skip = _DRIVER_OPTIONS[name] if "=" not in a else 0
            continue
        out.append(a)
    return out


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: comma-separated seeds and ranges (``0,1,2``, ``0-4``, ``0-2,7``), in order,
    each once."""
    seeds = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            seeds += range(int(lo), int(hi or lo) + 1)
        except ValueError:
            raise SystemExit(f"--seeds: {part!r} is not a seed or a range a-b of seeds") from None
    if not seeds:
        raise SystemExit(f"--seeds: no seed in {text!r}")
    return list(dict.fromkeys(seeds))


def run_tasks(args, argv) -> int:
    """``--tasks``: each task in turn, its two backends in child processes of this script
    (``--task T --backend B --out DIR/T_B.json``, the other options passed on). With two
    cores or more and without ``--sequential`` the two run at the same time, each pinned to a
    core of its own (``--core``), with XLA's Eigen threads and OpenBLAS's pool off
    (``_env.single_threaded``): on an idle machine each gets one core, as in
    ``suite_step.py``; JAX's persistent compilation cache is off in the children unless
    ``--warm-cache`` (compile s and s to threshold then count cold compilations, whatever
    earlier runs left in the cache). Then the RESULTS.md section of all the runs
    (:func:`report`) goes to ``--results`` (``''``: none), its machine line saying how they
    ran. With ``--seeds`` each task is trained once per seed (the seeds one after the other,
    each seed's tasks in turn; the children's files ``T_B_s<seed>.json``), and the runs go to
    the seed sweep's record (``--seeds-json``) and section (:func:`report_seeds`) instead."""
    import subprocess
    import tempfile
    from pathlib import Path

    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    from _env import SINGLE_THREAD_FLAGS

    tasks = list(SUITE) if args.tasks == "suite" else args.tasks.split(",")
    bad = [t for t in tasks if t not in TASKS]
    if bad:
        raise SystemExit(f"--tasks: unknown task(s) {bad}; choose from {sorted(TASKS)}")
    seeds = parse_seeds(args.seeds) if args.seeds else None
    if seeds and args.compare_states:
        raise SystemExit("--seeds: without --compare-states (the state comparison takes no seed)")
    jobs = (
        [(task, seed) for seed in seeds for task in tasks] if seeds else [(t, None) for t in tasks]
    )
    out_dir = Path(args.out_dir or tempfile.mkdtemp(prefix="playground_side_by_side_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:
        cores = list(range(os.cpu_count() or 1))
    together = len(cores) >= 2 and not args.sequential
    env = dict(os.environ)
    if not args.warm_cache:
        env["JAXDYN_COMPILATION_CACHE"] = "0"
    if together:
        flags = env.get("XLA_FLAGS", "")
        if "xla_cpu_multi_thread_eigen" not in flags:
            env["XLA_FLAGS"] = (flags + " " + SINGLE_THREAD_FLAGS).strip()
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
    rest = _child_args(argv)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    paths, left, failed = [], [], []
    for task, seed in jobs:
        name = task if seed is None else f"{task} seed {seed}"
        if time.perf_counter() - t0 > 60 * args.time_limit:
            left.append(name)
            continue
        runs = []
        for i, backend in enumerate(("mjx", "jaxdyn")):
            stem = f"{task}_{backend}" + ("" if seed is None else f"_s{seed}")
            path = out_dir / f"{stem}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), *rest]
            cmd += ["--task", task, "--backend", backend, "--out", str(path)]
            if seed is not None:
                cmd += ["--seed", str(seed)]
            if together:
                cmd += ["--core", str(cores[-1 - i])]
            print(f"[{time.perf_counter() - t0:6.0f} s] {name} {backend}: {' '.join(cmd)}")
            log = open(out_dir / f"{stem}.log", "w", encoding="utf-8")
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
            runs.append((backend, path, proc, log))
            if not together:
                proc.wait()
        for backend, path, proc, log in runs:
            rc = proc.wait()
            log.close()
            if path.exists():  # also a run that says what was missing (no Playground)
                paths.append(str(path))
            if rc != 0:
                failed.append(f"{name} {backend} (exit {rc}, log {out_dir / (path.stem + '.log')})")
        print(f"[{time.perf_counter() - t0:6.0f} s] {name} done", flush=True)
    if args.compare_states:  # the section's second table: two tasks at a time, one core each
        done = [t for t in tasks if t not in left]
        for i in range(0, len(done), 2 if together else 1):
            runs = []
            for j, task in enumerate(done[i : i + (2 if together else 1)]):
                path = out_dir / f"{task}_states.json"
                cmd = [sys.executable, str(Path(__file__).resolve()), *rest]
                cmd += ["--task", task, "--compare-states", str(args.compare_states)]
                cmd += ["--out", str(path)]
                if together:
                    cmd += ["--core", str(cores[-1 - j])]
                log = open(out_dir / f"{task}_states.log", "w", encoding="utf-8")
                proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
                runs.append((task, path, proc, log))
            for task, path, proc, log in runs:
                rc = proc.wait()
                log.close()
                if path.exists():
                    paths.append(str(path))
                if rc != 0:
                    failed.append(f"{task} --compare-states (exit {rc})")
        print(f"[{time.perf_counter() - t0:6.0f} s] state comparisons done", flush=True)
    minutes = (time.perf_counter() - t0) / 60
    how = (
        "both backends of a task at the same time, each pinned to one core "
        f"(`{SINGLE_THREAD_FLAGS}`, OPENBLAS_NUM_THREADS=1), the tasks one after the other"
        if together
        else "the backends and tasks one after the other"
    )
    how += (
        "; JAX's persistent compilation cache on (compilations may be read from it)"
        if args.warm_cache
        else "; JAX's persistent compilation cache off (every compilation cold)"
    )
    command = " ".join(["python benchmarks/playground_side_by_side.py", *argv])
    load = f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    note = f"`{command}`: {how}; {minutes:.1f} min; {load}."
    if left:
        note += f" Not run (past --time-limit {args.time_limit:g} min): {', '.join(left)}."
    if args.note:
        note += " " + args.note
    for f in failed:
        print(f"failed: {f}")
    out = str(here / "RESULTS.md") if args.results is None else args.results
    if paths and seeds:
        seeds_json = str(SEEDS_JSON) if args.seeds_json is None else args.seeds_json
        write_sweep(sweep_of(paths, note), seeds_json, out)
    elif paths and out != "":
        print(report(paths, out, note))
    print(f"runs in {out_dir}; {minutes:.1f} min")
    return 0 if paths and not failed else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=sorted(TASKS), default="cartpole_balance")
    p.add_argument("--backend", choices=("both", "jaxdyn", "mjx"), default="both")
    p.add_argument("--full", action="store_true", help="Playground's published budget")
    p.add_argument(
        "--full-timesteps",
        type=int,
        help="with --full: Playground's configuration with this many environment steps (Brax "
        "rounds it up to evaluations x resets per evaluation x one training step's steps: "
        "about 98 M with Playground's suite configuration)",
    )
    p.add_argument(
        "--tasks",
        help="train these tasks (comma-separated, or 'suite': " + ",".join(SUITE) + ") one "
        "after the other, each backend in a child process of its own (both at once, one core "
        "each, where the machine has two), and write the RESULTS.md section of the runs",
    )
    p.add_argument(
        "--out-dir", help="with --tasks: the runs' JSON files go here (default: a temporary one)"
    )
    p.add_argument(
        "--sequential",
        action="store_true",
        help="with --tasks: the two backends of a task one after the other (each on all cores)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=25.0,
        metavar="MIN",
        help="with --tasks: no task starts after this many minutes (the report names those left)",
    )
    p.add_argument(
        "--warm-cache",
        action="store_true",
        help="with --tasks: the children keep JAX's persistent compilation cache on (default: "
        "off, JAXDYN_COMPILATION_CACHE=0, so that every compilation is a cold one)",
    )
    p.add_argument(
        "--core", type=int, help="pin this process to this core (set by --tasks for its children)"
    )
    # the budget: an option given here, else the task's CPU_BUDGETS entry, else DEFAULT_BUDGET
    p.add_argument("--timesteps", type=int)
    p.add_argument("--num-envs", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--num-minibatches", type=int)
    p.add_argument("--updates-per-batch", type=int)
    p.add_argument("--num-evals", type=int)
    p.add_argument("--episode-length", type=int, default=1000)
    p.add_argument("--num-eval-envs", type=int, help="episodes per evaluation")
    p.add_argument(
        "--resets-per-eval",
        type=int,
        default=1,
        help="Brax's num_resets_per_eval without --full (Playground's: 10)",
    )
    p.add_argument("--threshold", type=float, help="episode return (default: THRESHOLDS, else 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--jaxdyn-option",
        action="append",
        metavar="KEY=VALUE",
        help="a keyword of jaxdyn's task (repeatable; VALUE read as JSON): "
        "solver_iterations=100, solver_polish=true, ...",
    )
    p.add_argument(
        "--seeds",
        help="with --tasks: train each task once per seed (comma-separated, ranges a-b: 0-4) "
        "and write the seed sweep's record (--seeds-json) and RESULTS.md section (final "
        "return per seed, mean ± sd, Welch's test) instead of the single run's",
    )
    p.add_argument(
        "--seeds-json",
        help=f"the seed sweep's per-seed record (default {SEEDS_JSON.name} beside this script; "
        "'': none)",
    )
    p.add_argument(
        "--report-seeds",
        nargs="+",
        metavar="JSON",
        help="only write the seed sweep's RESULTS.md section from its record (--seeds-json), "
        "or from its training runs' --out files (T_B_s<seed>.json; the record is then written "
        "too, with --note)",
    )
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument(
        "--check",
        type=int,
        metavar="N",
        help="only compare the two environments over N control steps from one key",
    )
    p.add_argument(
        "--compare-states",
        type=int,
        metavar="N",
        help="only compare observations and rewards on the same N states (a Playground "
        "rollout); with --tasks: after the training runs, for each task (the section's second "
        "table)",
    )
    p.add_argument(
        "--report",
        nargs="+",
        metavar="JSON",
        help="only write the RESULTS.md section of these runs' --out files",
    )
    p.add_argument("--results", default=None, help="the results file of --report")
    p.add_argument("--note", default="", help="a sentence on the machine for --report")
    args = p.parse_args(argv)
    if args.core is not None:  # before JAX starts its threads, which inherit the affinity
        os.sched_setaffinity(0, {args.core})
    resolve_budget(args)
    if args.tasks:
        return run_tasks(args, argv if argv is not None else sys.argv[1:])
    if args.report_seeds:
        results = str(SEEDS_JSON.parent / "RESULTS.md") if args.results is None else args.results
        first = json.loads(Path(args.report_seeds[0]).read_text())
        if len(args.report_seeds) == 1 and "runs" in first:  # the sweep's record
            write_sweep(first, "", results)
        else:  # its training runs' files
            seeds_json = str(SEEDS_JSON) if args.seeds_json is None else args.seeds_json
            write_sweep(sweep_of(args.report_seeds, args.note), seeds_json, results)
        return 0
    if args.report:
        out = args.results or str(Path(__file__).resolve().parent / "RESULTS.md")
        print(report(args.report, out, args.note))
        return 0
    if args.compare_states:
        res = dict(task=args.task, **compare_states(args.task, args.compare_states, args.seed))
        print(json.dumps(res))
        if args.out:
            with open(args.out, "w", encoding="utf-8") as f:
                json.dump(res, f)
        return 0
    if args.check:
        print(json.dumps(check(args.task, args.check, args.seed)))
        return 0

    from jaxdyn.envs import brax_compat

    brax_compat()  # Brax 0.14's trainers on this JAX (both backends train through them)
    cfg = ppo_config(args.task, args)
    if args.threshold is None:
        args.threshold = THRESHOLDS.get(args.task, 100.0)
    print(f"task {args.task}, PPO config: {json.dumps(cfg)}", flush=True)
    results, missing = [], []
    backends = ("mjx", "jaxdyn") if args.backend == "both" else (args.backend,)
    for backend in backends:
        made, why = (
            playground_env(args.task)
            if backend == "mjx"
            else jaxdyn_env(args.task, parse_options(args.jaxdyn_option))
        )
        if made is None:
            missing.append(f"{backend}: {why}")
            print(f"skipping {backend}: {why}", flush=True)
            continue
        env, wrap_fn = made if backend == "mjx" else (made, None)
        results.append(train(backend, env, wrap_fn, cfg, args.seed, args.threshold))
    print("\nbackend  final return  s to threshold  total s  env steps/s")
    for r in results:
        st = r["seconds_to_threshold"]
        sps = r["env_steps_per_second"]
        print(
            f"{r['backend']:<8} {r['final_return']:12.1f}  "
            f"{'-' if st is None else f'{st:.1f}':>14}  {r['total_seconds']:7.1f}  "
            f"{'-' if sps is None else f'{sps:.0f}':>11}"
        )
    for m in missing:
        print(f"missing: {m}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(
                dict(
                    task=args.task,
                    device=_device(),
                    versions=_versions(),
                    host=f"{platform.machine()}, {os.cpu_count()} cores",
                    date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    threshold=args.threshold,
                    seed=args.seed,
                    jaxdyn_options=parse_options(args.jaxdyn_option),
                    config=cfg,
                    results=results,
                    missing=missing,
                ),
                f,
            )
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())

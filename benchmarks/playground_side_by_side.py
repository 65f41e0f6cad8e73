"""Brax PPO on a DeepMind Control Suite task, side by side: MuJoCo Playground's MJX environment
and jaxdyn's port of the same task (:mod:`jaxdyn.envs.dm_control_suite`), the same PPO
configuration (Playground's ``dm_control_suite_params.brax_ppo_config``), one process, the same
machine (issue 48).

Per backend it reports: wall-clock to the first evaluation whose mean episode return reaches
``--threshold`` (from the start of ``ppo.train``, compilation included), the final return after
``--timesteps`` environment steps, the total wall-clock, and environment steps per second over
training (``training/sps`` from Brax's progress metrics: steps of the training phases per
second of their wall-clock, compilation and evaluation excluded).

Playground is optional: ``pip install playground`` (the ``mujoco_playground`` package; it pins
``warp-lang``, ``orbax-checkpoint``, ... that jaxdyn does not need: install it in a separate
environment). Its environments run MJX's JAX implementation here (``impl="jax"``; Playground's
default ``"warp"`` needs NVIDIA Warp). Without it, ``--backend jaxdyn`` trains jaxdyn's port
alone and ``both`` says what is missing.

Budgets: ``--full`` takes Playground's published configuration (2048 environments, 60 M steps
for cartpole; GPU-sized); the defaults are a CPU-sized cut of it (``--num-envs``,
``--batch-size``, ``--timesteps``). Examples::

    python benchmarks/playground_side_by_side.py --task cartpole_balance --timesteps 300000
    python benchmarks/playground_side_by_side.py --task cartpole_swingup --full --backend both
"""

from __future__ import annotations

import argparse
import json
import sys
import time

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
    "finger_spin": "FingerSpin",
    "finger_turn_easy": "FingerTurnEasy",
    "finger_turn_hard": "FingerTurnHard",
    "ball_in_cup_catch": "BallInCup",
    "dm_humanoid_stand": "HumanoidStand",
    "dm_humanoid_walk": "HumanoidWalk",
    "dm_humanoid_run": "HumanoidRun",
}

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
    if not args.full:
        cfg.update(
            num_timesteps=args.timesteps,
            num_envs=args.num_envs,
            batch_size=args.batch_size,
            num_minibatches=args.num_minibatches,
            num_updates_per_batch=args.updates_per_batch,
            num_evals=args.num_evals,
            episode_length=args.episode_length,
        )
    cfg.pop("num_resets_per_eval", None)  # not an argument of brax 0.14's ppo.train
    return cfg


def playground_env(task: str):
    """Playground's MJX environment and its Brax wrapper, or ``(None, reason)``."""
    try:
        from mujoco_playground import registry, wrapper
    except ImportError as e:
        return None, f"mujoco_playground is not importable ({e}); pip install playground"
    env = registry.load(TASKS[task], config_overrides={"impl": "jax"})
    return (env, wrapper.wrap_for_brax_training), None


def jaxdyn_env(task: str):
    from jaxdyn import envs

    return envs.make(task), None  # Brax's own training wrappers


def train(backend: str, env, wrap_fn, cfg: dict, seed: int, threshold: float) -> dict:
    from brax.training.agents.ppo import train as ppo

    evals = []
    t0 = time.perf_counter()

    def progress(step, metrics):
        evals.append(
            dict(
                step=int(step),
                time=time.perf_counter() - t0,
                reward=float(metrics["eval/episode_reward"]),
                sps=float(metrics.get("training/sps", float("nan"))),
            )
        )
        print(f"  [{backend}] {step:>10d} steps  return {evals[-1]['reward']:8.2f}", flush=True)

    kw = dict(cfg, environment=env, progress_fn=progress, seed=seed)
    if wrap_fn is not None:
        kw["wrap_env_fn"] = wrap_fn
    ppo.train(**kw)
    total = time.perf_counter() - t0
    reached = [e for e in evals if e["reward"] >= threshold]
    sps = [e["sps"] for e in evals if e["sps"] == e["sps"]]
    return dict(
        backend=backend,
        final_return=evals[-1]["reward"] if evals else float("nan"),
        seconds_to_threshold=reached[0]["time"] if reached else None,
        total_seconds=total,
        env_steps_per_second=max(sps) if sps else None,
        evals=evals,
    )


def check(task: str, n_steps: int, seed: int) -> dict:
    """Both environments from the same key under the same actions: the largest differences of
    the observations and rewards over ``n_steps`` control steps (Playground's float32 MJX
    against jaxdyn's port in the default dtype). The tasks with contact diverge after the first
    contact (MuJoCo's soft constraints against jaxdyn's :class:`jaxdyn.sim.Constraint`), and
    where the port follows dm_control rather than Playground the observations differ by design
    (``walker_*``: the torso's height, not its ``zz``; ``finger_*``: dm_control's model, with
    its touch sensors and colliding decorations, at dm_control's 0.01 s step; ``ball_in_cup_catch``
    and ``dm_humanoid_*`` reset as dm_control, to random states, where Playground's reset to
    ``qpos0``)."""
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=sorted(TASKS), default="cartpole_balance")
    p.add_argument("--backend", choices=("both", "jaxdyn", "mjx"), default="both")
    p.add_argument("--full", action="store_true", help="Playground's published budget")
    p.add_argument("--timesteps", type=int, default=300_000)
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--num-minibatches", type=int, default=8)
    p.add_argument("--updates-per-batch", type=int, default=4)
    p.add_argument("--num-evals", type=int, default=5)
    p.add_argument("--episode-length", type=int, default=1000)
    p.add_argument("--threshold", type=float, default=700.0, help="episode return")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument(
        "--check",
        type=int,
        metavar="N",
        help="only compare the two environments over N control steps from one key",
    )
    args = p.parse_args(argv)
    if args.check:
        print(json.dumps(check(args.task, args.check, args.seed)))
        return 0

    from jaxdyn.envs import brax_compat

    brax_compat()  # Brax 0.14's trainers on this JAX (both backends train through them)
    cfg = ppo_config(args.task, args)
    print(f"task {args.task}, PPO config: {json.dumps(cfg)}", flush=True)
    results, missing = [], []
    backends = ("mjx", "jaxdyn") if args.backend == "both" else (args.backend,)
    for backend in backends:
        made, why = playground_env(args.task) if backend == "mjx" else jaxdyn_env(args.task)
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
            json.dump(dict(task=args.task, config=cfg, results=results, missing=missing), f)
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())

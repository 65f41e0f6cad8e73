"""Brax PPO on the jaxdyn quadruped: ``quad12`` learns to walk forward.

The environment is ``jaxdyn.envs.Quadruped`` (floating base, compliant foot contact, joint
position servos; reward: forward speed + upright + alive, minus a control cost; an episode ends
when the robot falls). ``brax.training.agents.ppo.train`` trains it unchanged, with jaxdyn's
training wrappers (``wrap_env_fn=jaxdyn.envs.wrap``: auto-reset from a pool of random initial
states) and, in the full configuration, domain randomisation of link masses and friction.

Configurations:

* default (small, for a CPU): 128 environments, ~0.4 M environment steps, 64x64 networks;
  most of the wall time is compilation. The script checks that the evaluation return and the
  forward speed after training beat those before training by a clear margin.
* ``--full`` (for a GPU): 4096 environments, 50 M steps, 256x256x128 networks, domain
  randomisation of link masses and friction.

The learning curve (evaluation return and forward speed against environment steps) is saved as
``examples/figures/quadruped_ppo.png`` (``--out`` to change), and a video of the trained
policy walking (``jaxdyn.viz``, MuJoCo's headless renderer) beside it as
``quadruped_ppo.mp4`` (``--video`` to change, ``--video ''`` for none).

Run: ``pip install '.[rl]' && python examples/train_quadruped_ppo.py [--full]``
(``--timesteps 100000`` for a quick look at the outputs, without the check).
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import jax
import numpy as np

try:
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo
except ImportError as e:  # pragma: no cover
    raise SystemExit(f"this example needs Brax: pip install 'jaxdyn[rl]' ({e})") from None

import jaxdyn.envs

SMALL = dict(
    num_timesteps=400_000,
    num_evals=9,
    episode_length=250,
    num_envs=128,
    num_eval_envs=64,
    batch_size=128,
    num_minibatches=4,
    unroll_length=20,
    num_updates_per_batch=4,
    learning_rate=1e-3,
    entropy_cost=1e-2,
    discounting=0.97,
    reward_scaling=1.0,
    normalize_observations=True,
    hidden=(64, 64),
    randomize=False,
)

FULL = dict(
    num_timesteps=50_000_000,
    num_evals=26,
    episode_length=1000,
    num_envs=4096,
    num_eval_envs=1024,
    batch_size=1024,
    num_minibatches=32,
    unroll_length=20,
    num_updates_per_batch=4,
    learning_rate=3e-4,
    entropy_cost=1e-2,
    discounting=0.97,
    reward_scaling=1.0,
    normalize_observations=True,
    hidden=(256, 256, 128),
    randomize=True,
)


def film(env, inference_fn, path, seconds=4.0):
    """A video of ``inference_fn`` (Brax's ``(obs, key) -> (action, extras)``) driving ``env``
    for ``seconds``, the camera following the base."""
    try:
        from jaxdyn import viz

        qs, _ = viz.env_rollout(env, lambda o, k: inference_fn(o, k)[0], int(seconds / env.dt))
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        viz.save_rollout(viz.Scene.from_env(env), qs, path, dt=env.dt, progress=True)
        print(f"policy video: {path}")
    except ImportError as e:
        print(f"no policy video ({e}; pip install '.[rl]')")
    except RuntimeError as e:  # no OpenGL (EGL / OSMesa) on this machine: see docs/viz.md
        print(f"no policy video: {e}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the GPU configuration")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--timesteps",
        type=int,
        default=None,
        help="environment steps (default: the configuration's); a smaller budget for a quick "
        "look at the outputs skips the check that training improved the policy",
    )
    parser.add_argument(
        "--out",
        default=os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "figures", "quadruped_ppo.png"
        ),
    )
    parser.add_argument("--video", default=None, help="policy video (.mp4 / .gif / .html)")
    args = parser.parse_args(argv)
    if args.video is None:
        args.video = os.path.splitext(args.out)[0] + ".mp4"
    cfg = dict(FULL if args.full else SMALL)
    quick = args.timesteps is not None and args.timesteps < cfg["num_timesteps"]
    if args.timesteps is not None:
        cfg["num_timesteps"] = args.timesteps
        cfg["num_evals"] = min(cfg["num_evals"], 4)
    hidden = cfg.pop("hidden")
    randomize = cfg.pop("randomize")

    env = jaxdyn.envs.Quadruped()
    print(
        f"{type(env).__name__}: obs {env.observation_size}, actions {env.action_size}, "
        f"dt {env.dt} s, devices {jax.devices()}"
    )
    network_factory = functools.partial(
        ppo_networks.make_ppo_networks,
        policy_hidden_layer_sizes=hidden,
        value_hidden_layer_sizes=hidden,
    )
    randomization_fn = (
        jaxdyn.envs.domain_randomization(mass_scale=(0.8, 1.2), friction=(0.5, 1.25))
        if randomize
        else None
    )

    curve = []
    t0 = time.time()

    def progress(step, metrics):
        r = float(metrics["eval/episode_reward"])
        v = float(metrics["eval/episode_forward_velocity"]) / max(
            float(metrics["eval/avg_episode_length"]), 1.0
        )
        curve.append((step, r, v, time.time() - t0))
        print(
            f"  steps {step:>10,d}  eval return {r:8.2f}  mean forward speed {v:6.3f} m/s  "
            f"episode length {float(metrics['eval/avg_episode_length']):6.1f}  "
            f"[{time.time() - t0:6.1f} s]",
            flush=True,
        )

    make_policy, params, _ = ppo.train(
        environment=env,
        wrap_env_fn=jaxdyn.envs.wrap,
        randomization_fn=randomization_fn,
        network_factory=network_factory,
        progress_fn=progress,
        seed=args.seed,
        **cfg,
    )
    elapsed = time.time() - t0
    steps, ret, speed, _ = map(np.asarray, zip(*curve))
    print(
        f"trained {steps[-1]:,d} steps in {elapsed:.0f} s: eval return {ret[0]:.1f} -> "
        f"{ret[-1]:.1f}, forward speed {speed[0]:.3f} -> {speed[-1]:.3f} m/s"
    )

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(9, 3.4))
        ax[0].plot(steps / 1e6, ret, "o-")
        ax[0].set_xlabel("environment steps (millions)")
        ax[0].set_ylabel("evaluation return")
        ax[1].plot(steps / 1e6, speed, "o-", color="C1")
        ax[1].set_xlabel("environment steps (millions)")
        ax[1].set_ylabel("mean forward speed (m/s)")
        fig.suptitle(
            f"Brax PPO on jaxdyn Quadruped (quad12), {'full' if args.full else 'small'} "
            f"config, {elapsed:.0f} s"
        )
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        fig.savefig(args.out, dpi=120)
        print(f"learning curve: {args.out}")
    except ImportError:
        print("matplotlib not installed: no learning curve plot (pip install '.[rl]')")
    if args.video:
        film(env, make_policy(params, deterministic=True), args.video)

    if quick:
        print(f"--timesteps {args.timesteps}: below the configuration's budget, no check")
        return curve
    # the check: training improved the policy clearly
    margin = 0.2 * abs(ret[0]) + 10.0
    assert ret[-1] > ret[0] + margin, (ret[0], ret[-1])
    assert speed[-1] > speed[0] + 0.05, (speed[0], speed[-1])
    print(
        "OK: the evaluation return rose from",
        round(float(ret[0]), 1),
        "to",
        round(float(ret[-1]), 1),
    )
    return curve


if __name__ == "__main__":
    main()

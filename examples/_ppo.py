"""What the Brax PPO examples share (``train_quadruped_ppo.py``, ``train_push_cube_ppo.py``,
``train_quadruped_getup_ppo.py``): the training run with its printed progress, the learning
curve (matplotlib) and a video of the trained policy (``jaxdyn.viz``, MuJoCo's headless
renderer)."""

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

FIGURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "figures")

#: the contact tasks' PPO configuration (``ppo.train``'s keywords, plus ``hidden``: the layer
#: sizes); each example overrides what its task needs (the episode length)
CONFIG = dict(
    num_timesteps=300_000,
    num_evals=6,
    episode_length=100,
    num_envs=128,
    num_eval_envs=64,
    batch_size=128,
    num_minibatches=4,
    unroll_length=10,
    num_updates_per_batch=4,
    learning_rate=1e-3,
    entropy_cost=1e-2,
    discounting=0.97,
    reward_scaling=1.0,
    normalize_observations=True,
    hidden=(64, 64),
)


def parser(doc, name):
    """The examples' command line: ``--timesteps``, ``--seed``, ``--out``, ``--video``."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--timesteps", type=int, default=None, help="environment steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(FIGURES, f"{name}.png"), help="curve PNG")
    p.add_argument("--video", default=None, help="policy video (.mp4 / .gif / .html; '' for none)")
    return p


def train(env, cfg, metrics=(), title=""):
    """Brax PPO on ``env`` with jaxdyn's training wrappers (``jaxdyn.envs.wrap``) and the
    configuration ``cfg`` (``ppo.train``'s keywords, plus ``hidden``: the layer sizes).
    ``metrics``: names of ``env``'s metrics to print and plot (their mean per step of the
    evaluation episodes). Returns ``(make_policy, params, curve)``, ``curve`` a dict of arrays
    (``steps``, ``return``, each metric, ``seconds``)."""
    cfg = dict(cfg)
    hidden = cfg.pop("hidden")
    network_factory = functools.partial(
        ppo_networks.make_ppo_networks,
        policy_hidden_layer_sizes=hidden,
        value_hidden_layer_sizes=hidden,
    )
    print(
        f"{type(env).__name__}: obs {env.observation_size}, actions {env.action_size}, "
        f"dt {env.dt} s, {cfg['num_timesteps']:,d} steps, devices {jax.devices()}",
        flush=True,
    )
    rows = []
    t0 = time.time()

    def progress(step, m):
        length = max(float(m["eval/avg_episode_length"]), 1.0)
        r = float(m["eval/episode_reward"])
        vals = [float(m[f"eval/episode_{k}"]) / length for k in metrics]
        rows.append((step, r, *vals, time.time() - t0))
        extra = "  ".join(f"{k} {v:7.3f}" for k, v in zip(metrics, vals))
        print(
            f"  steps {step:>9,d}  eval return {r:9.2f}  {extra}  [{time.time() - t0:6.1f} s]",
            flush=True,
        )

    make_policy, params, _ = ppo.train(
        environment=env,
        wrap_env_fn=jaxdyn.envs.wrap,
        network_factory=network_factory,
        progress_fn=progress,
        **cfg,
    )
    cols = list(map(np.asarray, zip(*rows)))
    curve = {"steps": cols[0], "return": cols[1], "seconds": cols[-1]}
    curve.update({k: cols[2 + i] for i, k in enumerate(metrics)})
    print(
        f"trained {int(curve['steps'][-1]):,d} steps in {curve['seconds'][-1]:.0f} s: "
        f"eval return {curve['return'][0]:.2f} -> {curve['return'][-1]:.2f}",
        flush=True,
    )
    return make_policy, params, curve


def run(env, cfg, metrics, args, name, scene):
    """The examples' whole run: :func:`train` ``env`` with ``cfg``, :func:`plot` the curve to
    ``args.out`` (titled ``Brax PPO on jaxdyn <name>``, steps and seconds) and :func:`film` the
    trained policy to ``args.video`` (default: ``args.out`` with ``.mp4``). ``metrics``: name ->
    axis label; ``scene``: a callable returning the :class:`jaxdyn.viz.Scene`. The curve."""
    make_policy, params, curve = train(env, cfg, tuple(metrics))
    title = (
        f"Brax PPO on jaxdyn {name}, {int(curve['steps'][-1]):,d} steps, "
        f"{curve['seconds'][-1]:.0f} s"
    )
    plot(curve, metrics, args.out, title)
    video = args.video if args.video is not None else args.out.rsplit(".", 1)[0] + ".mp4"
    film(env, scene, make_policy(params, deterministic=True), video)
    return curve


def plot(curve, metrics, path, title):
    """The evaluation return and ``metrics`` (name -> axis label) against environment steps."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no learning curve plot (pip install '.[rl]')")
        return
    n = 1 + len(metrics)
    fig, axes = plt.subplots(1, n, figsize=(4.3 * n, 3.4))
    steps = curve["steps"] / 1e3
    axes[0].plot(steps, curve["return"], "o-")
    axes[0].set_ylabel("evaluation return")
    for i, (k, label) in enumerate(metrics.items(), 1):
        axes[i].plot(steps, curve[k], "o-", color=f"C{i}")
        axes[i].set_ylabel(label)
    for ax in axes:
        ax.set_xlabel("environment steps (thousands)")
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"learning curve: {path}")


def film(env, scene, inference_fn, path, seconds=4.0):
    """A video of ``inference_fn`` (Brax's ``(obs, key) -> (action, extras)``) driving ``env``
    for ``seconds``; ``scene``: a callable returning the :class:`jaxdyn.viz.Scene`."""
    if not path:
        return
    try:
        from jaxdyn import viz

        qs, _ = viz.env_rollout(env, lambda o, k: inference_fn(o, k)[0], int(seconds / env.dt))
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        viz.save_rollout(scene(), qs, path, dt=env.dt, progress=True)
        print(f"policy video: {path}")
    except ImportError as e:
        print(f"no policy video ({e}; pip install '.[rl]')")
    except RuntimeError as e:  # no OpenGL (EGL / OSMesa) on this machine: see docs/viz.md
        print(f"no policy video: {e}")

"""Analytic policy gradients: a 7-DoF arm learns to reach random targets by differentiating
the episode return through the simulator.

The task is ``jaxdyn.envs.Reacher`` (bundled ``arm7``, or ``--robot panda``): torque control
over gravity compensation, reward ``-|p_ee - target|``. The policy, a small MLP from the
environment's observation to the action, runs inside ``jaxdyn.sim.rollout`` (one
``lax.scan``); ``jax.grad`` of the mean distance over the episode with respect to the policy
parameters flows back through the contact-free arm dynamics, and optax's Adam follows it. No
value function, no sampling: one deterministic gradient per batch of episodes.

The trained policy is then run through the environment API (``jax.vmap(env.step)``) on
held-out targets; the script checks that the final end-effector distance dropped at least
threefold and prints the learning curve, saved as ``examples/figures/reacher_apg.png``, and
films the trained policy reaching a held-out target (``reacher_apg.mp4`` beside it; ``--video``
to change, ``--video ''`` for none; needs ``pip install '.[viz]'``).
``--brax`` additionally trains with Brax's APG trainer (``brax.training.agents.apg``) on the
same environment, for comparison.

Run: ``python examples/train_reacher_apg.py`` (most of the wall time is the compilation of
the gradient of the rollout; ``--iterations 2 --horizon 5`` for a quick look at the outputs,
without the check).
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxdyn.envs
from jaxdyn import sim


def init_mlp(key, sizes):
    params = []
    for k, (m, n) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:])):
        params.append((jax.random.normal(k, (m, n)) * np.sqrt(1.0 / m), jnp.zeros(n)))
    w, b = params[-1]
    params[-1] = (0.01 * w, b)  # start close to "do nothing" (gravity compensation holds)
    return params


def mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return jnp.tanh(x @ w + b)


def film(env, params, path, seconds=2.0):
    """A video of the trained policy reaching one held-out target (drawn as a green ball)."""
    try:
        from jaxdyn import viz

        qs, s0 = viz.env_rollout(env, lambda o, k: mlp(params, o), int(seconds / env.dt), 7)
        scene = viz.Scene.from_env(env)
        target = np.asarray(s0.info["target"], float).reshape(-1)[:3]
        scene.geoms.append(viz.Geom(-1, "sphere", (0.03,), p=target, rgba=(0.2, 0.8, 0.3, 1)))
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        viz.save_rollout(scene, qs, path, dt=env.dt, progress=True)
        print(f"policy video: {path}")
    except ImportError as e:
        print(f"no policy video ({e}; pip install '.[rl]')")
    except RuntimeError as e:  # no OpenGL (EGL / OSMesa) on this machine: see docs/viz.md
        print(f"no policy video: {e}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--robot", default="arm7", choices=["arm7", "panda"])
    parser.add_argument("--iterations", type=int, default=120)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--horizon", type=int, default=100, help="control steps per episode")
    parser.add_argument("--brax", action="store_true", help="also run Brax's APG trainer")
    parser.add_argument(
        "--out",
        default=os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "figures", "reacher_apg.png"
        ),
    )
    parser.add_argument("--video", default=None, help="policy video (.mp4 / .gif / .html)")
    args = parser.parse_args(argv)
    if args.video is None:
        args.video = os.path.splitext(args.out)[0] + ".mp4"

    # one simulator step per control step (n_frames=1), so that the rollout below and env.step
    # are the same dynamics at the same control rate
    env = jaxdyn.envs.Reacher(args.robot, dt=0.01, n_frames=1)
    model, cfg = env.model, env.cfg
    T = args.horizon
    print(
        f"Reacher({args.robot}): obs {env.observation_size}, actions {env.action_size}, "
        f"{T} steps of {env.dt} s per episode, batch {args.batch}"
    )

    def episode_cost(params, state0, target):
        """Mean end-effector distance over one episode (minus the return per step)."""

        def policy(s):
            return env.control(mlp(params, env.observe(s, target)))

        traj = sim.rollout(model, state0, policy=policy, n_steps=T, cfg=cfg)
        return jnp.mean(jax.vmap(env.distance, (0, None))(traj.q, target))

    def batch_cost(params, keys):
        states = jax.vmap(env.reset)(keys)
        costs = jax.vmap(episode_cost, (None, 0, 0))(
            params, states.pipeline_state, states.info["target"]
        )
        return jnp.mean(costs)

    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(5e-3))

    @jax.jit
    def update(params, opt_state, key):
        cost, grads = jax.value_and_grad(batch_cost)(params, jax.random.split(key, args.batch))
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, cost

    # held-out evaluation through the environment API
    eval_keys = jax.random.split(jax.random.PRNGKey(12345), 256)
    reset, step = jax.jit(jax.vmap(env.reset)), jax.jit(jax.vmap(env.step))

    def evaluate(params):
        s = reset(eval_keys)
        act = jax.jit(jax.vmap(lambda p, o: mlp(p, o), (None, 0)))
        ret = np.zeros(len(eval_keys))
        for _ in range(T):
            s = step(s, act(params, s.obs))
            ret += np.asarray(s.reward)
        return float(np.mean(ret)), float(np.mean(s.metrics["distance"]))

    key = jax.random.PRNGKey(0)
    params = init_mlp(key, (env.observation_size, 64, 64, env.action_size))
    opt_state = opt.init(params)
    ret0, final0 = evaluate(params)
    print(f"before training: return {ret0:.2f}, final distance {100 * final0:.1f} cm")

    t0 = time.time()
    curve = []
    for it in range(args.iterations):
        key, sub = jax.random.split(key)
        params, opt_state, cost = update(params, opt_state, sub)
        curve.append(float(cost))
        if it == 0:
            print(f"  first update (compilation included): {time.time() - t0:.1f} s")
        if it % 25 == 0 or it == args.iterations - 1:
            print(
                f"  iteration {it:4d}  mean distance {100 * curve[-1]:6.2f} cm  "
                f"[{time.time() - t0:6.1f} s]",
                flush=True,
            )
    elapsed = time.time() - t0
    ret1, final1 = evaluate(params)
    print(
        f"after {args.iterations} updates ({elapsed:.0f} s): return {ret0:.2f} -> {ret1:.2f}, "
        f"final distance {100 * final0:.1f} -> {100 * final1:.1f} cm (256 held-out targets)"
    )

    brax_curve = None
    if args.brax:
        from brax.training.agents.apg import train as apg

        brax_curve = []
        tb = time.time()

        def progress(it, metrics):
            brax_curve.append((it, float(metrics["eval/episode_reward"])))
            print(
                f"  brax apg eval {it}: return {brax_curve[-1][1]:.2f} [{time.time() - tb:.0f} s]"
            )

        apg.train(
            environment=env,
            episode_length=T,
            policy_updates=args.iterations,
            horizon_length=T,
            num_envs=args.batch,
            num_evals=6,
            num_eval_envs=64,
            learning_rate=3e-3,
            wrap_env_fn=jaxdyn.envs.wrap,
            progress_fn=progress,
        )

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        ax.plot(100 * np.asarray(curve), label="jax.grad through jaxdyn.sim.rollout")
        ax.set_xlabel("policy update")
        ax.set_ylabel("mean end-effector distance (cm)")
        ax.set_yscale("log")
        ax.set_title(
            f"APG, Reacher({args.robot}): final distance {100 * final0:.1f} -> "
            f"{100 * final1:.1f} cm ({elapsed:.0f} s incl. compilation)",
            fontsize=8,
        )
        if brax_curve:
            its, rets = zip(*brax_curve)
            ax.plot(
                np.asarray(its) * args.iterations / max(its[-1], 1),
                -100 * np.asarray(rets) / T,
                "s--",
                label="Brax APG (eval)",
            )
        ax.legend(fontsize=8)
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        fig.savefig(args.out, dpi=120)
        print(f"learning curve: {args.out}")
    except ImportError:
        print("matplotlib not installed: no plot (pip install '.[rl]')")
    if args.video:
        film(env, params, args.video)

    assert np.isfinite(curve).all()
    if args.iterations < 120:
        print(f"--iterations {args.iterations}: below the default 120, no check")
        return curve
    assert final1 < final0 / 3, (final0, final1)
    assert ret1 > ret0, (ret0, ret1)
    print(f"OK: final distance {100 * final0:.1f} cm -> {100 * final1:.1f} cm")
    return curve


if __name__ == "__main__":
    main()

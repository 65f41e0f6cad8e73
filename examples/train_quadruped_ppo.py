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

import _ppo

import jaxdyn.envs

#: the CPU configuration: the contact tasks' PPO configuration (``_ppo.CONFIG``) with longer
#: episodes and unrolls and a larger budget
SMALL = dict(_ppo.CONFIG, num_timesteps=400_000, num_evals=9, episode_length=250, unroll_length=20)

#: the GPU configuration (``--full``), with domain randomisation of link masses and friction
FULL = dict(
    _ppo.CONFIG,
    num_timesteps=50_000_000,
    num_evals=26,
    episode_length=1000,
    num_envs=4096,
    num_eval_envs=1024,
    batch_size=1024,
    num_minibatches=32,
    unroll_length=20,
    learning_rate=3e-4,
    hidden=(256, 256, 128),
)


def main(argv=None):
    parser = _ppo.parser(__doc__, "quadruped_ppo")
    parser.add_argument("--full", action="store_true", help="the GPU configuration")
    args = parser.parse_args(argv)
    cfg = dict(FULL if args.full else SMALL, seed=args.seed)
    # a smaller budget, for a quick look at the outputs, skips the check that training improved
    # the policy
    quick = args.timesteps is not None and args.timesteps < cfg["num_timesteps"]
    if args.timesteps is not None:
        cfg["num_timesteps"] = args.timesteps
        cfg["num_evals"] = min(cfg["num_evals"], 4)
    if args.full:
        cfg["randomization_fn"] = jaxdyn.envs.domain_randomization(
            mass_scale=(0.8, 1.2), friction=(0.5, 1.25)
        )
    env = jaxdyn.envs.Quadruped()
    metrics = {"forward_velocity": "mean forward speed (m/s)"}

    def scene():
        from jaxdyn import viz

        return viz.Scene.from_env(env)

    name = f"Quadruped (quad12), {'full' if args.full else 'small'} config"
    curve = _ppo.run(env, cfg, metrics, args, name, scene)

    if quick:
        print(f"--timesteps {args.timesteps}: below the configuration's budget, no check")
        return curve
    # the check: training improved the policy clearly
    ret, speed = curve["return"], curve["forward_velocity"]
    margin = 0.2 * abs(ret[0]) + 10.0
    assert ret[-1] > ret[0] + margin, (ret[0], ret[-1])
    assert speed[-1] > speed[0] + 0.05, (speed[0], speed[-1])
    print(f"OK: the evaluation return rose from {ret[0]:.1f} to {ret[-1]:.1f}")
    return curve


if __name__ == "__main__":
    main()

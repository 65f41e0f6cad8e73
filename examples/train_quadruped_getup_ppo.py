"""Brax PPO on jaxdyn's QuadrupedGetup: ``quad12`` learns to get up from a fall.

The environment is ``jaxdyn.envs.QuadrupedGetup`` (``jaxdyn.envs.make("quadruped_getup")``):
the robot starts lying in a random orientation, its trunk (a box), thighs (capsules) and feet
(spheres) in compliant contact with the ground; joint position servos; reward: uprightness,
standing height (counted as much as the trunk is upright) and a bonus while standing.
``brax.training.agents.ppo.train`` trains it unchanged, with jaxdyn's training wrappers.

Default configuration (small, for a CPU): 128 environments, 300k environment steps in
150-step episodes (3 s), 64x64 networks; compilation takes a large part of the wall time. The
return, the mean uprightness and the time spent standing rise as the policy learns to roll over
from its back and side; a reliable get-up takes millions of steps. The learning curve
(evaluation return, mean uprightness and the fraction of time standing) is saved as
``examples/figures/quadruped_getup_ppo.png`` (``--out``), a video of the trained policy beside
it as ``quadruped_getup_ppo.mp4`` (``--video``; ``--video ''`` for none).

Run: ``pip install '.[rl]' && python examples/train_quadruped_getup_ppo.py [--timesteps N]``.
"""

from __future__ import annotations

import _ppo

import jaxdyn.envs

CONFIG = dict(_ppo.CONFIG, episode_length=150)


def main(argv=None):
    args = _ppo.parser(__doc__, "quadruped_getup_ppo").parse_args(argv)
    cfg = dict(CONFIG, seed=args.seed)
    if args.timesteps is not None:
        cfg["num_timesteps"] = args.timesteps
    env = jaxdyn.envs.make("quadruped_getup")
    metrics = {"upright": "mean upright (z of the trunk's z axis)", "standing": "time standing"}

    def scene():
        from jaxdyn import viz

        return viz.Scene.from_env(env)

    return _ppo.run(env, cfg, metrics, args, "QuadrupedGetup (quad12)", scene)


if __name__ == "__main__":
    main()

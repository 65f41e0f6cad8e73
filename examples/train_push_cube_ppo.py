"""Brax PPO on jaxdyn's PushCube: a 7-DoF arm learns to push a cube across a table to a target.

The environment is ``jaxdyn.envs.PushCube`` (``jaxdyn.envs.make("push_cube")``): the bundled
MJCF scene ``jaxdyn/envs/xmls/push_cube.xml`` (an arm with a round pusher, a free cube on a
table) on jaxdyn's contact between bodies (the pusher against the cube) and against the table;
joint position servos over gravity compensation; reward: minus the pusher-cube and cube-target
distances, plus a bonus while the cube is within 5 cm of the target.
``brax.training.agents.ppo.train`` trains it unchanged, with jaxdyn's training wrappers
(``wrap_env_fn=jaxdyn.envs.wrap``: auto-reset from a pool of random initial states).

Default configuration (small, for a CPU): 128 environments, 300k environment steps in
100-step episodes (4 s), 64x64 networks; compilation takes a large part of the wall time. The
return rises as the policy learns to reach behind the cube and push it toward the target (the
cube-target distance falls); pushing it all the way takes millions of steps. The learning curve
(evaluation return, mean pusher-cube and cube-target distances against environment steps) is
saved as ``examples/figures/push_cube_ppo.png`` (``--out``), a video of the trained policy
beside it as ``push_cube_ppo.mp4`` (``--video``; ``--video ''`` for none).

Run: ``pip install '.[rl]' && python examples/train_push_cube_ppo.py [--timesteps N]``.
"""

from __future__ import annotations

import _ppo

import jaxdyn.envs

CONFIG = dict(_ppo.CONFIG, episode_length=100)


def main(argv=None):
    args = _ppo.parser(__doc__, "push_cube_ppo").parse_args(argv)
    cfg = dict(CONFIG, seed=args.seed)
    if args.timesteps is not None:
        cfg["num_timesteps"] = args.timesteps
    env = jaxdyn.envs.make("push_cube")
    metrics = {"reach_distance": "pusher-cube distance (m)", "push_distance": "cube-target (m)"}

    def scene():
        from jaxdyn import viz

        return viz.Scene.load(jaxdyn.envs.manipulation.PUSH_CUBE_XML)

    return _ppo.run(env, cfg, metrics, args, "PushCube", scene)


if __name__ == "__main__":
    main()

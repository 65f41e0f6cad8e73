"""The tiny Brax PPO run of the training tests (``tests/test_envs.py``'s end-to-end run and
``tests/test_distributed.py``'s two-process case): two training iterations of 8-unit networks
on 8 environments with 8-step episodes, jaxdyn's training wrappers."""

from __future__ import annotations

#: ``ppo.train``'s keywords without Brax objects: a budget of two iterations of
#: ``batch_size x num_minibatches x unroll_length`` environment steps
TINY_PPO = dict(
    num_timesteps=2 * 8 * 4 * 2,
    episode_length=8,
    num_envs=8,
    num_eval_envs=4,
    batch_size=8,
    num_minibatches=2,
    unroll_length=4,
    num_updates_per_batch=1,
    num_evals=2,
    seed=1,
)


def tiny_ppo_kwargs(**overrides):
    """:data:`TINY_PPO` with ``wrap_env_fn=jaxdyn.envs.wrap`` and 8-unit policy and value
    networks, then ``overrides`` (imports Brax)."""
    import functools

    from brax.training.agents.ppo import networks as ppo_networks

    from jaxdyn import envs

    network_factory = functools.partial(
        ppo_networks.make_ppo_networks,
        policy_hidden_layer_sizes=(8,),
        value_hidden_layer_sizes=(8,),
    )
    return {
        **TINY_PPO,
        "wrap_env_fn": envs.wrap,
        "network_factory": network_factory,
        **overrides,
    }

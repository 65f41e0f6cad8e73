"""Compatibility of Brax's trainers with recent JAX.

Brax 0.14 (the current release) calls ``jax.device_put_replicated``, which JAX 0.10 removed
(google/brax issue #671): ``brax.training.agents.ppo.train`` and ``apg.train`` then stop with
``AttributeError`` before the first step, whatever the environment.
:func:`brax_compat` installs the drop-in replacement from JAX's pmap migration guide
(``jax.device_put`` of the stacked value with a ``NamedSharding`` over the devices) when, and
only when, the name is missing. Nothing is changed on a JAX that still has it.

``import jaxdyn.envs`` calls it when Brax is installed, so users of these environments never
meet the ``AttributeError``. What that changes, besides Brax's trainers running: the module
``jax`` gains the attribute ``device_put_replicated`` (this replacement), so any code in the
process that calls it gets the stacked, sharded value instead of JAX's ``AttributeError``
(its result is a ``jax.Array`` over the same devices, as JAX's own function returned), and a
``hasattr(jax, "device_put_replicated")`` test says ``True``. Code that imports Brax's trainers
without ``jaxdyn.envs`` calls :func:`brax_compat` itself (it is idempotent).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["brax_compat"]


def _device_put_replicated(x, devices):
    """``x`` stacked ``len(devices)`` times, the stacked axis sharded over ``devices``."""
    devices = list(devices)
    mesh = jax.sharding.Mesh(np.array(devices), ("i",))  # the axis name of Brax's pmaps
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("i"))
    return jax.tree_util.tree_map(
        lambda y: jax.device_put(jnp.stack([jnp.asarray(y)] * len(devices)), sharding), x
    )


def brax_compat() -> list:
    """Make Brax's trainers run on this JAX; returns the names installed (empty if none was
    needed). ``import jaxdyn.envs`` calls it when Brax is installed; calling it again does
    nothing."""
    installed = []
    try:
        jax.device_put_replicated  # noqa: B018 - the attribute access is the test
    except AttributeError:
        jax.device_put_replicated = _device_put_replicated
        installed.append("jax.device_put_replicated")
    return installed

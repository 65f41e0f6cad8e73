"""Argument checks: shapes at trace time (always), values under jit via ``equinox.error_if``.

Value checks can be switched off with ``jaxdyn.config.update("value_checks", False)`` (or
:func:`set_value_checks`, or ``JAXDYN_VALUE_CHECKS=0``) for the last bit of speed; equinox's own
``EQX_ON_ERROR`` setting applies as well.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from . import config


def set_value_checks(enabled: bool) -> None:
    """Turn the jit-time value checks (e.g. unit quaternions in ``q``) on or off:
    ``jaxdyn.config.update("value_checks", enabled)``.

    The checks are inserted when a function is traced, so a change clears JAX's compilation
    caches (``jax.clear_caches()``): functions already jitted are traced again with the new
    setting on their next call.
    """
    config.update("value_checks", bool(enabled))


def value_checks_enabled() -> bool:
    return config.get("value_checks")


def as_array(fn, name, x, shape, model):
    """Convert ``x`` to an array and check its shape; ``shape`` names its sizes, e.g.
    ``(("nq", 13),)``."""
    x = jnp.asarray(x)
    want = tuple(s for _, s in shape)
    if x.shape != want:
        names = ", ".join(n for n, _ in shape)
        sizes = ", ".join(str(s) for _, s in shape)
        extra = ""
        if x.ndim == len(want) + 1 and x.shape[1:] == want:
            extra = " (for a batch, wrap the call in jax.vmap)"
        raise ValueError(
            f"{fn}: {name} has shape {tuple(x.shape)}, expected ({names})=({sizes})"
            f"{',' if len(want) == 1 else ''} for {model.name!r}{extra}"
        )
    return x


def common_dtype(*xs):
    """The floating (or complex) dtype the algorithm runs in."""
    dt = jnp.result_type(*[x for x in xs if x is not None])
    if not (jnp.issubdtype(dt, jnp.floating) or jnp.issubdtype(dt, jnp.complexfloating)):
        dt = jnp.result_type(dt, jnp.float32)
    return dt


def check_quaternions(fn, model, q, tol=1e-3):
    """``error_if`` the quaternions in ``q`` are not of unit norm (spherical / free joints)."""
    from . import joints

    if not config.get("value_checks") or jnp.issubdtype(q.dtype, jnp.complexfloating):
        return q
    t = model.topo
    idx = []
    for j in range(t.nb):
        k = int(t.kind[j])
        if k == joints.SPHERICAL:
            idx.append(t.q_start[j] + np.arange(4))
        elif k == joints.FREE:
            idx.append(t.q_start[j] + 3 + np.arange(4))
    if not idx:
        return q
    quats = q[np.stack(idx)]
    err = jnp.abs(jnp.sum(quats * quats, -1) - 1)
    return eqx.error_if(
        q, jnp.any(err > tol), f"{fn}: a quaternion in q is not of unit norm (tolerance {tol})"
    )

"""Shaped rewards of the DeepMind Control Suite: :func:`tolerance`.

The semantics of ``dm_control.utils.rewards.tolerance`` (Tassa et al., "DeepMind Control
Suite", 2018, section 2.2: rewards in ``[0, 1]``, 1 inside a target interval and falling off
smoothly outside it), written with ``jax.numpy`` as MuJoCo Playground's port
(``mujoco_playground._src.reward``) is, so that the suite's tasks in
:mod:`jaxdyn.envs.dm_control_suite` give the same rewards as Playground's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:
    from jax import Array

__all__ = ["SIGMOIDS", "tolerance"]

#: the sigmoid shapes of :func:`tolerance` (``value_at_margin`` may be 0 for the first four)
SIGMOIDS = (
    "cosine",
    "linear",
    "quadratic",
    "reciprocal",
    "gaussian",
    "hyperbolic",
    "long_tail",
    "tanh_squared",
)


def _sigmoid(x, value_at_1: float, sigmoid: str):
    """A sigmoid of ``x >= 0`` equal to 1 at 0 and ``value_at_1`` at 1."""
    if sigmoid in ("cosine", "linear", "quadratic"):
        if not 0 <= value_at_1 < 1:
            raise ValueError(
                f"tolerance: value_at_margin must be in [0, 1) for {sigmoid!r}, got {value_at_1}"
            )
    elif not 0 < value_at_1 < 1:
        raise ValueError(
            f"tolerance: value_at_margin must be in (0, 1) for {sigmoid!r}, got {value_at_1}"
        )
    if sigmoid == "gaussian":
        scale = np.sqrt(-2 * np.log(value_at_1))
        return jnp.exp(-0.5 * (x * scale) ** 2)
    if sigmoid == "hyperbolic":
        scale = np.arccosh(1 / value_at_1)
        return 1 / jnp.cosh(x * scale)
    if sigmoid == "long_tail":
        scale = np.sqrt(1 / value_at_1 - 1)
        return 1 / ((x * scale) ** 2 + 1)
    if sigmoid == "reciprocal":
        scale = 1 / value_at_1 - 1
        return 1 / (jnp.abs(x) * scale + 1)
    if sigmoid == "cosine":
        s = x * (np.arccos(2 * value_at_1 - 1) / np.pi)
        return jnp.where(jnp.abs(s) < 1, (1 + jnp.cos(np.pi * s)) / 2, 0.0)
    if sigmoid == "linear":
        s = x * (1 - value_at_1)
        return jnp.where(jnp.abs(s) < 1, 1 - s, 0.0)
    if sigmoid == "quadratic":
        s = x * np.sqrt(1 - value_at_1)
        return jnp.where(jnp.abs(s) < 1, 1 - s * s, 0.0)
    if sigmoid == "tanh_squared":
        scale = np.arctanh(np.sqrt(1 - value_at_1))
        return 1 - jnp.tanh(x * scale) ** 2
    raise ValueError(f"tolerance: sigmoid must be one of {SIGMOIDS}, got {sigmoid!r}")


def tolerance(
    x: Array,
    bounds: tuple[float, float] = (0.0, 0.0),
    margin: float = 0.0,
    sigmoid: str = "gaussian",
    value_at_margin: float = 0.1,
) -> Array:
    """1 where ``bounds[0] <= x <= bounds[1]``; outside, with ``margin > 0``,
    ``sigmoid(d / margin)`` of the distance ``d`` to the nearest bound (``value_at_margin`` at
    ``d = margin``), with ``margin = 0`` zero. Elementwise on ``x``; ``bounds``, ``margin``,
    ``sigmoid`` and ``value_at_margin`` are static numbers (``ValueError`` naming the argument
    when ``bounds[0] > bounds[1]`` or ``margin < 0``)."""
    lower, upper = bounds
    if lower > upper:
        raise ValueError(f"tolerance: bounds must satisfy lower <= upper, got {bounds}")
    if margin < 0:
        raise ValueError(f"tolerance: margin must be >= 0, got {margin}")
    x = jnp.asarray(x)
    inside = (lower <= x) & (x <= upper)
    if margin == 0:
        return jnp.where(inside, 1.0, 0.0).astype(x.dtype)
    d = jnp.where(x < lower, lower - x, x - upper) / margin
    return jnp.where(inside, 1.0, _sigmoid(d, value_at_margin, sigmoid)).astype(x.dtype)

"""Checks of the numeric parameters of the simulation's modules (contact models, actuators,
joint limits, terrain): at construction for numbers (``ValueError`` naming the argument), and
by :func:`check_config` for what a configuration holds when a step runs (numbers set with
``eqx.tree_at`` at trace time, traced ones -- a batch of frictions under ``jax.vmap``, a
parameter being differentiated -- by a value check naming the argument), so that a NaN
stiffness is not reported as a diverged integration."""

from __future__ import annotations

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import value_checks


def check_module(module):
    """The construction-time checks of an ``eqx.Module`` whose class lists its parameters in
    ``_RULES``: ``(attribute, lower bound or None, strict)``, each finite and within its
    bound (call from ``__check_init__``)."""
    for name, lo, strict in type(module)._RULES:
        check_number(type(module).__name__, name, getattr(module, name), lo, strict)


def _requirement(lo, strict) -> str:
    return "finite" if lo is None else f"finite and {'>' if strict else '>='} {lo:g}"


def _bad(a, lo, strict):
    bad = ~np.isfinite(a)
    if lo is not None:
        bad = bad | ((a <= lo) if strict else (a < lo))
    return bool(np.any(bad))


def check_number(owner: str, name: str, value, lo=None, strict=False):
    """Raise ``ValueError`` naming ``owner``'s ``name`` when the concrete ``value`` (``None``:
    a default derived later, nothing to check; a tracer: checked by :func:`check_config`)
    is non-finite or below its bound."""
    if value is None or isinstance(value, jax.core.Tracer):
        return
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{owner}: {name} must be a number, got {value!r}") from None
    if _bad(a, lo, strict):
        raise ValueError(f"{owner}: {name} must be {_requirement(lo, strict)}, got {value!r}")


def check_config(fn: str, cfg, x):
    """``x`` guarded by the checks of ``cfg``'s parameters: a concrete value raises
    ``ValueError`` here (one set with ``eqx.tree_at`` bypasses the constructor's check), a
    traced one fails a value check naming it (``fn: cfg.contact.stiffness must be finite and
    > 0``) when value checks are on; and ``cfg.dt`` finite and > 0."""
    parts = [
        ("cfg.contact", cfg.contact),
        ("cfg.actuator", cfg.actuator),
        ("cfg.limits", cfg.limits),
        ("cfg.terrain", cfg.terrain),
        ("cfg.springs", getattr(cfg, "springs", None)),
        ("cfg.tendons", getattr(cfg, "tendons", None)),
        ("cfg.spatial_tendons", getattr(cfg, "spatial_tendons", None)),
    ]
    checks = value_checks.enabled()
    items = [("cfg.dt", cfg.dt, 0.0, True)]
    for prefix, obj in parts:
        for name, lo, strict in getattr(type(obj), "_RULES", ()):
            items.append((f"{prefix}.{name}", getattr(obj, name), lo, strict))
    for label, value, lo, strict in items:
        if value is None:
            continue
        if not isinstance(value, jax.core.Tracer):
            check_number(fn, label, value, lo, strict)
            continue
        if not checks:
            continue
        v = jnp.asarray(value)
        bad = ~jnp.isfinite(v)
        if lo is not None:
            bad = bad | ((v <= lo) if strict else (v < lo))
        x = value_checks.error_if(
            x, jnp.any(bad), f"{fn}: {label} must be {_requirement(lo, strict)}"
        )
    return x

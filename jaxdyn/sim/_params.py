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
        ("cfg.fluid", getattr(cfg, "fluid", None)),
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
    return check_solref(fn, cfg, x)


def check_solref(fn: str, cfg, x=None):
    """``x`` guarded against contacts' ``solref`` (``cfg.contacts`` / ``cfg.geoms``) that the
    contact model reads as ``(timeconst, dampratio)`` (its ``_solref_columns``: the hard
    ``Constraint`` and ``Compliant``) but that hold MuJoCo's direct form ``(-stiffness,
    -damping)``, an entry <= 0 (only ``Constraint(soft=True)`` honours it; the others would
    take a negative time constant: a negative Baumgarte fraction or stiffness). Concrete
    values raise ``ValueError`` here; traced ones fail a value check with the same message
    when value checks are on and ``x`` is given (unchecked otherwise)."""
    columns = getattr(cfg.contact, "_solref_columns", None)
    cols = list(columns()) if columns is not None else []
    if not cols:
        return x
    model = type(cfg.contact).__name__
    if model == "Constraint":
        model = "Constraint(soft=False)"
    for label, part, name in (
        ("cfg.contacts", cfg.contacts, "solref"),
        ("cfg.geoms", cfg.geoms, "solref"),
        ("cfg.geoms", cfg.geoms, "pair_solref"),  # an explicit pair's (MJCF <contact><pair>)
    ):
        solref = getattr(part, name, None)
        if solref is None:
            continue
        msg = (
            f"{fn}: {label}.{name} has an entry <= 0 or non-finite (MuJoCo's direct form "
            f"(-stiffness, -damping)), which {model} reads as (timeconst, dampratio): use "
            "jaxdyn.sim.Constraint(soft=True), which honours it, or positive (timeconst, "
            "dampratio)"
        )
        if not isinstance(solref, jax.core.Tracer):
            a = np.asarray(solref, float).reshape(-1, 2)[:, cols]
            if a.size and not np.all(np.isfinite(a) & (a > 0)):
                raise ValueError(msg)
            continue
        if x is None or not value_checks.enabled():
            continue
        v = jnp.asarray(solref).reshape(-1, 2)[:, np.asarray(cols)]
        x = value_checks.error_if(x, ~jnp.all(jnp.isfinite(v) & (v > 0)), msg)
    return x

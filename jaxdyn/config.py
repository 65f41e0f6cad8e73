"""Global switches of jaxdyn, in one place.

=========================  ===============================  =======  ==========================
name                       environment variable             default  effect
=========================  ===============================  =======  ==========================
``value_checks``           ``JAXDYN_VALUE_CHECKS``          ``True`` ``equinox.error_if`` value
                                                                     checks under ``jit`` (unit,
                                                                     finite quaternions in ``q``;
                                                                     traced ``damping``; finite
                                                                     constraint forces); see
                                                                     :mod:`jaxdyn._checks`
``analytic_derivatives``   ``JAXDYN_ANALYTIC_DERIVATIVES``  ``True`` ``jaxdyn.rnea`` /
                                                                     ``jaxdyn.aba`` differentiate
                                                                     by their analytic
                                                                     ``custom_jvp`` rules (IDSVA /
                                                                     FDSVA); ``False``: plain
                                                                     autodiff of the algorithms
``unroll_max``             ``JAXDYN_UNROLL_MAX``            ``3``    small matrix products
                                                                     (:func:`jaxdyn.spatial.mm`)
                                                                     contracting at most this
                                                                     many terms are unrolled into
                                                                     broadcast products, larger
                                                                     ones use ``matmul``
``vmap_chunk``             ``JAXDYN_VMAP_CHUNK``            ``-1``   samples per chunk when a
                                                                     public function runs under
                                                                     ``jax.vmap`` on the CPU
                                                                     (:mod:`jaxdyn.batching`):
                                                                     ``-1`` chosen from the
                                                                     model's size, ``0`` plain
                                                                     ``jax.vmap``, ``n > 0``
                                                                     chunks of ``n``
=========================  ===============================  =======  ==========================

Each switch is read from its environment variable when jaxdyn is imported (booleans: ``0``,
``false``, ``no``, ``off`` are false, anything else true; ``unroll_max``: an integer >= 0;
``vmap_chunk``: an integer >= -1), then
changed with :func:`update` or, for a block of code, :func:`override`::

    jaxdyn.config.update("value_checks", False)
    with jaxdyn.config.override(analytic_derivatives=False, unroll_max=0):
        ...

**One rule for every switch:** switches are read when a function is *traced*, so a change of
value clears JAX's caches (``jax.clear_caches()``): functions already jitted trace again, with
the new value, on their next call. Setting a switch to its current value clears nothing.
The older entry points :func:`jaxdyn.set_value_checks`,
:func:`jaxdyn.derivatives.set_analytic_derivatives` and the context manager
:func:`jaxdyn.derivatives.analytic_derivatives` call :func:`update` / :func:`override`.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["get", "update", "override", "SWITCHES"]

_FALSE = ("0", "false", "no", "off")


def _bool(name, value):
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE
    if not isinstance(value, (bool, int)):
        raise ValueError(f"jaxdyn.config.update: {name} must be a bool, got {value!r}")
    return bool(value)


def _nonneg_int(name, value):
    try:
        out = int(value)
    except (TypeError, ValueError):
        out = None
    if (
        out is None
        or out < 0
        or isinstance(value, bool)
        or (isinstance(value, float) and value != out)
    ):
        raise ValueError(f"jaxdyn.config.update: {name} must be an integer >= 0, got {value!r}")
    return out


def _chunk(name, value):
    if isinstance(value, str) and value.strip() == "-1":
        return -1
    if not isinstance(value, str) and not isinstance(value, bool) and value == -1:
        return -1
    try:
        return _nonneg_int(name, value)
    except ValueError:
        raise ValueError(
            f"jaxdyn.config.update: {name} must be -1 (automatic), 0 (plain jax.vmap) or a "
            f"positive chunk size, got {value!r}"
        ) from None


#: name -> (environment variable, default, validator)
SWITCHES = {
    "value_checks": ("JAXDYN_VALUE_CHECKS", True, _bool),
    "analytic_derivatives": ("JAXDYN_ANALYTIC_DERIVATIVES", True, _bool),
    "unroll_max": ("JAXDYN_UNROLL_MAX", 3, _nonneg_int),
    "vmap_chunk": ("JAXDYN_VMAP_CHUNK", -1, _chunk),
}


def _from_env(name):
    env, default, check = SWITCHES[name]
    raw = os.environ.get(env)
    if raw is None or raw.strip() == "":
        return default
    try:
        return check(name, raw)
    except ValueError:
        raise ValueError(
            f"jaxdyn.config: environment variable {env}={raw!r} is invalid "
            f"({name} must be {_EXPECTED.get(check, 'an integer >= 0')})"
        ) from None


_EXPECTED = {_bool: "a bool", _chunk: "an integer >= -1"}

_values = {name: _from_env(name) for name in SWITCHES}


def _known(fn, name):
    if name not in SWITCHES:
        raise ValueError(
            f"jaxdyn.config.{fn}: unknown switch {name!r}; known: " + ", ".join(sorted(SWITCHES))
        )


def get(name: str):
    """Current value of the switch ``name``."""
    _known("get", name)
    return _values[name]


def update(name: str, value) -> None:
    """Set the switch ``name`` to ``value``; a change clears JAX's caches (see the module)."""
    _known("update", name)
    value = SWITCHES[name][2](name, value)
    if value != _values[name]:
        import jax

        jax.clear_caches()
        _values[name] = value


@contextlib.contextmanager
def override(**switches):
    """Set switches for the duration of a ``with`` block, restoring them afterwards (each
    change, in and out, follows the rule of :func:`update`)."""
    for name in switches:
        _known("override", name)
    old = {name: _values[name] for name in switches}
    try:
        for name, value in switches.items():
            update(name, value)
        yield
    finally:
        for name, value in old.items():
            update(name, value)

"""jaxdyn's warning and error types, and :func:`warn`.

* :class:`JaxdynWarning`: warnings at load time (lenient loading of real-world URDFs, see
  :mod:`jaxdyn.model.urdf`) and of the simulator.
* :class:`CheckError`: a value check failed (:mod:`jaxdyn.value_checks`, raised by the eager
  layer :mod:`jaxdyn.eager` and :func:`jaxdyn.jit`).
"""

from __future__ import annotations

import os
import sys
import warnings

import equinox as eqx

__all__ = ["CheckError", "JaxdynWarning", "warn"]


class JaxdynWarning(UserWarning):
    """Warnings of jaxdyn (e.g. a URDF inertia repaired or a ``<mimic>`` dropped at load
    time); filter them with ``warnings.filterwarnings("ignore", category=jaxdyn.JaxdynWarning)``
    or turn them into errors with ``"error"``."""


class CheckError(eqx.EquinoxRuntimeError, ValueError):
    """A value check of jaxdyn failed (e.g. a non-unit quaternion in ``q``).

    Raised by jaxdyn's public functions called outside ``jit`` and by functions compiled with
    :func:`jaxdyn.jit`; the message is the check's own one-line message. A subclass of
    ``equinox.EquinoxRuntimeError`` (what ``equinox.error_if`` raises) and of ``ValueError``.
    """


CheckError.__module__ = "jaxdyn"

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def warn(msg: str) -> None:
    """``warnings.warn(msg, JaxdynWarning)`` attributed to the first caller outside jaxdyn."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        _PACKAGE_DIR + os.sep
    ):
        level += 1
        frame = frame.f_back
    warnings.warn(msg, JaxdynWarning, stacklevel=level)

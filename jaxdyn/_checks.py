"""Compatibility: the names of the former ``jaxdyn._checks`` hub, which is now split by job.

* ``JaxdynWarning``, ``CheckError``, ``warn``: :mod:`jaxdyn.errors`;
* ``error_if``, ``unchecked``, ``set_value_checks``, ``value_checks_enabled``:
  :mod:`jaxdyn.value_checks` (the last is ``value_checks.enabled``);
* ``jit``, ``eager_jit``, ``EAGER_FLOAT_KEYS``, ``_dispatch``, ``_eager_jit``:
  :mod:`jaxdyn.eager` (the last two are ``eager.dispatch`` / ``eager.compiled``);
* ``public``, ``as_array``, ``common_dtype``, ``check_model``, ``check_model_dtype``,
  ``check_quaternions``, ``default_float``, ``quaternion_indices``: :mod:`jaxdyn.shell` (with
  ``shell.prepare``, formerly ``jaxdyn.algorithms.kinematics._prepare``);
* ``BATCHED`` is gone: each public function declares its chunk policy next to itself
  (``shell.public(name, words=...)``) and keeps it as ``chunk_words``.

No module of jaxdyn imports this one (``tests/test_architecture.py``); it is kept for code
written against the former names.
"""

from .eager import EAGER_FLOAT_KEYS as EAGER_FLOAT_KEYS
from .eager import compiled as _eager_jit
from .eager import dispatch as _dispatch
from .eager import eager_jit as eager_jit
from .eager import jit as jit
from .errors import CheckError as CheckError
from .errors import JaxdynWarning as JaxdynWarning
from .errors import warn as warn
from .shell import as_array as as_array
from .shell import check_model as check_model
from .shell import check_model_dtype as check_model_dtype
from .shell import check_quaternions as check_quaternions
from .shell import common_dtype as common_dtype
from .shell import default_float as default_float
from .shell import public as public
from .shell import quaternion_indices as quaternion_indices
from .value_checks import enabled as value_checks_enabled
from .value_checks import error_if as error_if
from .value_checks import set_value_checks as set_value_checks
from .value_checks import unchecked as unchecked

__all__ = [
    "EAGER_FLOAT_KEYS",
    "CheckError",
    "JaxdynWarning",
    "_dispatch",
    "_eager_jit",
    "as_array",
    "check_model",
    "check_model_dtype",
    "check_quaternions",
    "common_dtype",
    "default_float",
    "eager_jit",
    "error_if",
    "jit",
    "public",
    "quaternion_indices",
    "set_value_checks",
    "unchecked",
    "value_checks_enabled",
    "warn",
]

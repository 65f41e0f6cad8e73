"""Matrix-product precision of jaxdyn's public functions.

JAX's default precision for float32 matrix products lets GPUs and TPUs use reduced-precision
units (TF32 on NVIDIA Ampere and later, bfloat16 passes on TPUs): about 1e-3 relative error,
against 1e-7 for true float32. A dynamics library promising exact results cannot accept that
silently, so every public entry point traces its body under
``jax.default_matmul_precision(PRECISION)`` ("highest": true float32 / float64 products).
CPUs compute full precision either way. Set :data:`PRECISION` (before tracing) to ``"default"``
to let the accelerator choose.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import jax

P = ParamSpec("P")
R = TypeVar("R")

#: precision of matrix products inside jaxdyn's public functions (see the module docstring)
PRECISION = "highest"


def full_precision(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorator: trace ``fn`` under ``jax.default_matmul_precision(PRECISION)``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with jax.default_matmul_precision(PRECISION):
            return fn(*args, **kwargs)

    return wrapper

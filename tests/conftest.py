"""Shared fixtures: float64 JAX, robots loaded once per session (jaxdyn + Pinocchio).

XLA compile time dominates this suite (every robot topology is a different program). Unless
``XLA_FLAGS`` already says otherwise, the CPU backend is asked for
``--xla_backend_optimization_level=0``: LLVM then spends 3-4x less time per compile, the
programs run somewhat slower, and the arithmetic (IEEE, no fast-math) is unchanged. Set
``JAXDYN_TEST_XLA_OPT=1`` to keep XLA's default optimisation.
"""

from __future__ import annotations

import os

if os.environ.get("JAXDYN_TEST_XLA_OPT", "0") in ("0", "") and (
    "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", "")
):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()

# LAPACK-backed ops (Cholesky, LU, triangular solves) run in scipy's OpenBLAS; its thread pool
# stalls for milliseconds per call when the cores are busy (measured: a vmapped 40x40 triangular
# solve took up to 13 ms per sample instead of 15 us on 2 loaded cores).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import pytest  # noqa: E402

import oracle  # noqa: E402  (tests/ is on sys.path: pytest's rootdir conftest)


@pytest.fixture(scope="session")
def robot_case(request):
    """``oracle.Case`` for the robot named by the (indirect) parameter, loaded once."""
    return oracle.robot_case(request.param)


@pytest.fixture(scope="session")
def arm7():
    return oracle.robot_case("arm7")


@pytest.fixture(scope="session")
def quad12():
    return oracle.robot_case("quad12")


@pytest.fixture(scope="session")
def solo12():
    return oracle.robot_case("solo12")

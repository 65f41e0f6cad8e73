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

#: Robots whose parametrized cases run only in the slow set (``-m slow``): every robot is a
#: separate XLA compile of each algorithm. The default run keeps the bundled arm7 (fixed base)
#: and quad12 (floating base), example-robot-data's solo12 (a file parsed by Pinocchio too) and
#: the random trees (every joint kind); the slow set adds the rest of example-robot-data and
#: the variants of a few module-local case lists (a 25-link random chain, more IIM inputs).
SLOW_ROBOTS = frozenset(
    ("ur5", "panda", "anymal", "hyq", "talos_reduced", "talos_full", "romeo", "double_pendulum")
    + ("tree-chain25", "hand_tips", "quad12_mixed", "pendulum_full")
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark the parametrized cases of :data:`SLOW_ROBOTS` slow (before ``-m`` selects)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and any(
            isinstance(v, str) and v in SLOW_ROBOTS for v in callspec.params.values()
        ):
            item.add_marker(pytest.mark.slow)


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


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop every compiled program when a test module ends.

    Each XLA:CPU executable keeps its machine code in its own memory mappings; a whole-suite run
    that kept all of them hit the kernel's mapping limit (``vm.max_map_count``, 65530 by default)
    and LLVM aborted with "Unable to allocate section memory". Modules share compiled functions
    through module-scope fixtures, so clearing between modules costs no extra compiles.
    """
    yield
    jax.clear_caches()

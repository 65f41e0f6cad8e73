"""Single-threaded CPU settings shared by the benchmark scripts (import before JAX runs).

Pinocchio runs on one thread, so XLA does too: ``XLA_FLAGS`` gets
``--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`` unless it already names
the eigen threading. ``OPENBLAS_NUM_THREADS`` defaults to 1: JAX's LAPACK calls (Cholesky,
triangular solves, LU) run in scipy's OpenBLAS, whose thread pool stalled for milliseconds per
call on a loaded 2-core machine.
"""

import os

SINGLE_THREAD_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def single_threaded() -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " " + SINGLE_THREAD_FLAGS).strip()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

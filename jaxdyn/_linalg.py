"""Small dense linear algebra in plain JAX operations (no LAPACK custom calls).

The simulator solves many small systems (``n`` = a robot's ``nv`` or three times its number of
contacts) under ``vmap``. jaxlib's CPU LAPACK kernels run a batch through a parallel batch map
on XLA's intra-op thread pool; with jax 0.10 a vmapped step that chained several of them
(Cholesky, triangular solves) wedged that pool on its second call at batch 1024 (every thread
waiting in ``ParallelBatchMap``), and per-matrix LAPACK calls are slow for matrices this small
anyway. Here the factorisations are written as ``n`` vectorised column steps (unrolled at trace
time; ``n`` is static), which XLA fuses across the batch on every backend.

Only for the small ``n`` of per-step systems: the traced program grows with ``n``.

:func:`spd_solve` and :func:`general_solve` are the exceptions: they call LAPACK where the caller
allows it (``general_solve``: above a few rows) and XLA:CPU is not asked to fuse loops
(:func:`jaxdyn.config.fused_cpu_loops`, which a custom call blocks).
"""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.linalg as jsl

from . import config

__all__ = [
    "cho_solve",
    "cholesky",
    "general_solve",
    "lu_apply",
    "lu_factor",
    "lu_solve",
    "solve_lower",
    "solve_upper",
    "spd_inverse",
    "spd_solve",
]


def cholesky(A):
    """Lower Cholesky factor ``L`` of a symmetric positive definite ``A (n, n)``
    (``A = L L^T``): ``n`` right-looking steps, each one fused rank-one update."""
    n = A.shape[-1]
    rows = jnp.arange(n)
    L = jnp.zeros_like(A)
    for k in range(n):
        d = jnp.sqrt(A[k, k])
        col = jnp.where(rows >= k, A[:, k] / d, 0.0)
        L = L.at[:, k].set(col)
        A = A - col[:, None] * col[None, :]
    return L


def solve_lower(L, b):
    """``L^-1 b`` for lower-triangular ``L (n, n)``; ``b (n,)`` or ``(n, k)``."""
    n = L.shape[-1]
    vec = b.ndim == 1
    B = b[:, None] if vec else b
    rows = jnp.arange(n)
    X = jnp.zeros_like(B)
    for k in range(n):
        x = B[k] / L[k, k]
        X = X.at[k].set(x)
        B = B - jnp.where(rows > k, L[:, k], 0.0)[:, None] * x[None, :]
    return X[:, 0] if vec else X


def solve_upper(U, b):
    """``U^-1 b`` for upper-triangular ``U (n, n)``; ``b (n,)`` or ``(n, k)``."""
    n = U.shape[-1]
    vec = b.ndim == 1
    B = b[:, None] if vec else b
    rows = jnp.arange(n)
    X = jnp.zeros_like(B)
    for k in range(n - 1, -1, -1):
        x = B[k] / U[k, k]
        X = X.at[k].set(x)
        B = B - jnp.where(rows < k, U[:, k], 0.0)[:, None] * x[None, :]
    return X[:, 0] if vec else X


def cho_solve(L, b):
    """``A^-1 b`` from the Cholesky factor ``L`` of ``A``."""
    return solve_upper(L.T, solve_lower(L, b))


def spd_solve(A, b, lapack: bool = True):
    """``A^-1 b`` for a symmetric positive definite ``A`` (NaN where it is not): LAPACK's
    Cholesky and triangular solves (two custom calls) when ``lapack`` and fused CPU loops are
    off, else :func:`cholesky` and :func:`cho_solve` (no custom call, so a loop holding it can
    be compiled into one kernel)."""
    if lapack and not config.fused_cpu_loops_enabled():
        return jsl.cho_solve(jsl.cho_factor(A, lower=True), b)
    return cho_solve(cholesky(A), b)


def spd_inverse(A):
    """``A^-1`` of a symmetric positive definite ``A (n, n)`` (Cholesky, then ``n`` columns)."""
    L = cholesky(A)
    Linv = solve_lower(L, jnp.eye(A.shape[-1], dtype=A.dtype))
    return Linv.T @ Linv


def lu_factor(A):
    """LU factorisation with partial pivoting of ``A (n, n)``: ``(LU, perm)`` with ``A[perm] =
    L U`` (unit lower ``L`` below the diagonal of ``LU``, ``U`` on and above it). Row swaps by
    ``where`` (no data-dependent control flow)."""
    n = A.shape[-1]
    rows = jnp.arange(n)
    perm = rows
    M = A
    for k in range(n):
        p = jnp.argmax(jnp.where(rows >= k, jnp.abs(M[:, k]), -1.0))
        swap = lambda x: jnp.where(
            (rows == k).reshape((n,) + (1,) * (x.ndim - 1)),
            x[p],
            jnp.where((rows == p).reshape((n,) + (1,) * (x.ndim - 1)), x[k], x),
        )
        M, perm = swap(M), swap(perm)
        f = jnp.where(rows > k, M[:, k] / M[k, k], 0.0)
        M = M - f[:, None] * jnp.where(jnp.arange(n) > k, M[k], 0.0)[None, :]
        M = M.at[:, k].set(jnp.where(rows > k, f, M[:, k]))
    return M, perm


def lu_apply(LU, perm, b):
    """``A^-1 b`` from :func:`lu_factor`; linear in ``b`` (so it transposes under autodiff)."""
    n = LU.shape[-1]
    vec = b.ndim == 1
    B = (b[:, None] if vec else b)[perm]
    rows = jnp.arange(n)
    for k in range(n):  # unit lower solve
        B = B - jnp.where(rows > k, LU[:, k], 0.0)[:, None] * B[k][None, :]
    x = solve_upper(jnp.triu(LU), B)
    return x[:, 0] if vec else x


def lu_solve(A, b):
    """``A^-1 b`` for a general square ``A (n, n)`` (:func:`lu_factor`, :func:`lu_apply`);
    ``b (n,)`` or ``(n, k)``."""
    LU, perm = lu_factor(A)
    return lu_apply(LU, perm, b)


GENERAL_SOLVE_UNROLLED_MAX = 6
"""Largest ``n`` that :func:`general_solve` solves with the unrolled :func:`lu_solve`."""


def general_solve(A, b):
    """``A^-1 b`` for a general square ``A (n, n)``; ``b (n,)`` or ``(n, k)``: the unrolled
    :func:`lu_solve` for ``n <= GENERAL_SOLVE_UNROLLED_MAX`` or when fused CPU loops are on
    (:func:`jaxdyn.config.fused_cpu_loops_enabled`), else LAPACK's LU with partial pivoting
    (``getrf`` / ``getrs`` through :func:`jax.numpy.linalg.solve`), whose cost does not grow
    the traced program. Both are linear in ``b`` (they transpose under autodiff)."""
    if A.shape[-1] <= GENERAL_SOLVE_UNROLLED_MAX or config.fused_cpu_loops_enabled():
        return lu_solve(A, b)
    return jnp.linalg.solve(A, b)

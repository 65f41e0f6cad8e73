"""The box QP of box-FDDP (``jaxdyn.trajopt.box_qp``, a primal active-set method) against an
exact reference: the minimum over every assignment of the coordinates to {free, lower bound,
upper bound} of the equality-constrained QP (``3^n`` linear solves, the optimum is one of them).

The projected Newton method that box_qp used before (Tassa, Mansard & Todorov 2014, Crocoddyl's
``BoxQP``) stopped above the optimum on 20 of the 301 random QPs below (worst gap 730x the
optimum's magnitude) and on the example of issue 52, where a free coordinate sits close to its
bound and the Hessian is badly scaled.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.trajopt import box_qp


def _objective(H, q, x):
    return 0.5 * x @ H @ x + q @ x


def exact_box_qp(H, q, lo, hi):
    """The optimum by enumeration of the active sets (exact for strictly convex QPs)."""
    n = len(q)
    best, xbest = np.inf, None
    for s in itertools.product((0, 1, 2), repeat=n):
        s = np.asarray(s)
        x = np.where(s == 1, lo, np.where(s == 2, hi, 0.0))
        F = s == 0
        if not np.all(np.isfinite(x[~F])):
            continue
        if F.any():
            x[F] = np.linalg.solve(H[np.ix_(F, F)], -(q[F] + H[np.ix_(F, ~F)] @ x[~F]))
        if np.all(x >= lo - 1e-12) and np.all(x <= hi + 1e-12):
            f = _objective(H, q, x)
            if f < best:
                best, xbest = f, x
    return best, xbest


def kkt_residual(H, q, lo, hi, x):
    """``|x - clip(x - (H x + q), lo, hi)|_inf``: zero exactly at the optimum."""
    g = H @ x + q
    return np.max(np.abs(x - np.clip(x - g, lo, hi)))


def random_qps(seed, count):
    """Small, badly scaled QPs (eigenvalues 1e-1 .. 1e5), boxes around a random centre whose
    sides span 1e-2 .. 3 (the optimum usually has coordinates on the bounds)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n = int(rng.integers(2, 5))
        Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
        H = (Q * 10.0 ** rng.uniform(-1, 5, n)) @ Q.T
        H = 0.5 * (H + H.T)
        q = rng.standard_normal(n) * 10 ** rng.uniform(0, 3)
        c = 0.3 * rng.standard_normal(n)
        w = 10 ** rng.uniform(-2, 0.5, (2, n))
        x0 = rng.standard_normal(n)  # a warm start, also outside the box
        out.append((H, q, c - w[0], c + w[1], x0))
    return out


_one = jax.jit(lambda H, q, lo, hi, x0: box_qp(H, q, lo, hi, x0))
_solve = jax.jit(jax.vmap(_one))


def _check(H, q, lo, hi, x, free, L, label):
    f_ref, _ = exact_box_qp(H, q, lo, hi)
    f = _objective(H, q, x)
    assert np.all(x >= lo) and np.all(x <= hi), label
    scale = max(1.0, abs(f_ref))
    assert f - f_ref <= 1e-9 * scale, (label, f, f_ref)
    gscale = np.max(np.abs(q)) + np.max(np.abs(H)) * max(1.0, np.max(np.abs(x)))
    assert kkt_residual(H, q, lo, hi, x) <= 1e-10 * gscale, (label, x)
    # free: not held at a bound by the gradient; L: the Cholesky factor of H on it
    g = H @ x + q
    clamped = ((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0))
    np.testing.assert_array_equal(free, ~clamped, err_msg=label)
    F = np.asarray(free)
    np.testing.assert_allclose((L @ L.T)[np.ix_(F, F)], H[np.ix_(F, F)], rtol=1e-12, err_msg=label)
    np.testing.assert_allclose(L[np.ix_(~F, ~F)], np.eye(int((~F).sum())), err_msg=label)


def test_box_qp_issue_example():
    """Issue 52's QP: projected Newton stopped at x = (-0.018068, -0.0088), objective -1.078;
    the optimum has x_0 on its lower bound, objective -1.9905."""
    H = np.array([[51553.7, -96612.7], [-96612.7, 182418.9]])
    q = np.array([415.43, -717.15])
    lo = np.array([-0.01808, -0.28227])
    hi = np.array([1.18192, 0.31773])
    for x0 in (np.zeros(2), np.array([0.5, 0.0])):
        x, free, L = map(np.asarray, _one(H, q, lo, hi, x0))
        _check(H, q, lo, hi, x, free, L, f"issue example, x0={x0}")
        assert x[0] == lo[0] and not free[0] and free[1]
        np.testing.assert_allclose(_objective(H, q, x), -1.9905251378328601, rtol=1e-12)


def test_box_qp_random_against_enumeration():
    """301 random QPs (seeded), each from zero and from a random warm start."""
    qps = random_qps(0, 301)
    checked = 0
    for n in (2, 3, 4):
        group = [p for p in qps if len(p[1]) == n]
        H, q, lo, hi, x0 = (np.stack(a) for a in zip(*group))
        for start in (np.zeros_like(x0), x0):
            x, free, L = map(np.asarray, _solve(H, q, lo, hi, start))
            for i in range(len(group)):
                _check(H[i], q[i], lo[i], hi[i], x[i], free[i], L[i], f"n={n} problem {i}")
                checked += 1
    assert checked == 2 * 301
    # bounds active at the optimum: the set exercises the active-set logic
    active = 0
    for H, q, lo, hi, _ in qps:
        _, xr = exact_box_qp(H, q, lo, hi)
        active += np.any((xr == lo) | (xr == hi))
    assert active > 250, active


@pytest.mark.parametrize(
    "lo, hi",
    [
        ((-np.inf, -np.inf, -np.inf), (np.inf, np.inf, np.inf)),  # unbounded: Newton's step
        ((0.2, -1.0, -np.inf), (0.2, 1.0, 0.1)),  # an equal pair of bounds, one side open
        ((1.0, 1.0, 1.0), (2.0, 2.0, 2.0)),  # every coordinate on a bound
    ],
)
def test_box_qp_special_boxes(lo, hi):
    H = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, -0.2], [0.5, -0.2, 2.0]])
    q = np.array([1.0, -2.0, 3.0])
    lo, hi = np.asarray(lo), np.asarray(hi)
    x, free, L = map(np.asarray, _one(H, q, lo, hi, np.array([5.0, -5.0, 0.3])))
    _check(H, q, lo, hi, x, free, L, f"{lo} {hi}")
    if np.all(np.isinf(lo)):
        np.testing.assert_allclose(x, np.linalg.solve(H, -q), rtol=1e-13)
    fixed = lo == hi
    np.testing.assert_array_equal(x[fixed], lo[fixed])


def test_box_qp_jit_vmap_shapes():
    """Batched, the QPs are solved member by member (a while_loop runs until the last)."""
    qps = random_qps(5, 8)
    group = [p for p in qps if len(p[1]) == 3][:3]
    H, q, lo, hi, x0 = (jnp.asarray(np.stack(a)) for a in zip(*group))
    xb, fb, _ = _solve(H, q, lo, hi, x0)
    for i in range(len(group)):
        x1, f1, _ = _one(H[i], q[i], lo[i], hi[i], x0[i])
        np.testing.assert_allclose(np.asarray(xb[i]), np.asarray(x1), rtol=1e-13, atol=1e-15)
        np.testing.assert_array_equal(np.asarray(fb[i]), np.asarray(f1))

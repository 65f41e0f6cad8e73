"""MuJoCo's primal Newton solve of the soft one-sided rows (``Constraint(solver="newton")``).

The dual problem of the soft pyramidal contact and the joint-limit rows (impulses ``lam >= 0``
of one-sided rows ``J (n, nv)`` with regulariser ``R (n,)`` and free row velocity ``u``)

    min_{lam >= 0} 1/2 lam^T (J M^-1 J^T + diag(R)) lam + u^T lam

is the dual of the unconstrained primal in the velocity change ``z = v - v_free`` (MuJoCo's
``qacc - qacc_smooth`` times the step; MuJoCo's Computation chapter, "Solver"; Todorov 2014)

    min_z 1/2 z^T M z + sum_i 1/2 D_i min(0, J_i z + u_i)^2,   D = 1 / R,

with ``lam = D max(0, -(J z + u))`` and ``z = M^-1 J^T lam`` at the solution (one is the
other's optimality condition). The cost is convex and piecewise quadratic; MuJoCo's
``mj_solNewton`` (MJX ``solver.py``) minimises it by Newton's method, ``H = M + J^T diag(D
active) J`` (``nv x nv``), each step followed by an exact line search on the 1-D piecewise
quadratic. Here the same: :func:`newton_solve`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .. import _linalg as linalg

#: the line search's most pieces visited per Newton step (each an exact 1-D minimisation)
LINE_STEPS = 30


def _cost(M, J, u, D, z):
    y = J @ z + u
    return 0.5 * z @ (M @ z) + 0.5 * jnp.sum(D * jnp.minimum(y, 0.0) ** 2)


def _gradient(M, J, u, D, z):
    """The primal cost's gradient ``M z + J^T (D min(0, J z + u))``: 0 at the solution."""
    y = J @ z + u
    return M @ z + J.T @ (D * jnp.minimum(y, 0.0))


def _line_search(z, d, y, e, Mz, Md, D):
    """The exact minimiser ``alpha >= 0`` of ``f(alpha)`` (the cost along ``z + alpha d``;
    ``y = J z + u``, ``e = J d``, ``Mz``, ``Md``): ``f'`` is piecewise linear, increasing; each
    pass minimises the quadratic of the piece at ``alpha`` (the rows active there), kept when
    its minimiser lies in the same piece (then it is the exact minimiser), else a bracketed
    bisection step (a safeguard: ``f'(lo) < 0 < f'(hi)``)."""
    dMd = jnp.maximum(d @ Md, jnp.finfo(z.dtype).tiny)
    zMd = z @ Md

    def piece(alpha):
        act = y + alpha * e < 0
        De = jnp.where(act, D * e, 0.0)
        slope = dMd + De @ e
        icpt = zMd + De @ y
        return act, icpt + alpha * slope, -icpt / slope

    def cond(c):
        return ~c[3] & (c[4] < LINE_STEPS)

    def body(c):
        alpha, lo, hi, _, k = c
        act, fp, star = piece(alpha)
        lo = jnp.where(fp < 0, alpha, lo)
        hi = jnp.where(fp < 0, hi, alpha)
        same = jnp.all((y + star * e < 0) == act)
        inside = (star > lo) & (star < hi)
        mid = jnp.where(jnp.isinf(hi), 2 * lo + 1, 0.5 * (lo + hi))
        nxt = jnp.where(inside | same, star, mid)
        return nxt, lo, hi, same | (fp == 0), k + 1

    one = jnp.ones((), z.dtype)
    init = (one, jnp.zeros((), z.dtype), jnp.full((), jnp.inf, z.dtype), jnp.zeros((), bool), 0)
    alpha = jax.lax.while_loop(cond, body, init)[0]
    return jnp.maximum(alpha, 0.0)


def _newton(M, J, u, R, z0, iterations, tolerance):
    """:func:`newton_solve`'s minimiser ``z`` and the Newton steps it took."""
    D = 1.0 / R
    dtype = M.dtype
    zero = jnp.zeros(M.shape[0], dtype)
    if z0 is not None:  # MuJoCo's warm start: kept where it costs less than the free step
        better = _cost(M, J, u, D, z0) < _cost(M, J, u, D, zero)
        z = jnp.where(better, z0, zero)
    else:
        z = zero
    nv = M.shape[0]
    # MuJoCo's scale of the stopping tests: 1 / (mean inertia * nv)
    scale = 1.0 / jnp.maximum(jnp.mean(jnp.diagonal(M)) * nv, jnp.finfo(dtype).tiny)
    tol = -1.0 if tolerance is None else tolerance

    def cond(c):
        return ~c[3] & (c[2] < iterations)

    def body(c):
        z, y, k, _ = c
        act = y < 0
        Da = jnp.where(act, D, 0.0)
        g = M @ z + J.T @ (Da * y)
        H = M + (J * Da[:, None]).T @ J
        d = -linalg.spd_solve(H, g)
        e = J @ d
        alpha = _line_search(z, d, y, e, M @ z, M @ d, D)
        z1 = z + alpha * d
        y1 = J @ z1 + u
        # exact: the new point lies in the piece whose quadratic the step minimised
        done = jnp.all((y1 < 0) == act)
        cost0 = 0.5 * z @ (M @ z) + 0.5 * jnp.sum(Da * y * y)
        cost1 = 0.5 * z1 @ (M @ z1) + 0.5 * jnp.sum(D * jnp.minimum(y1, 0.0) ** 2)
        small = (scale * (cost0 - cost1) < tol) | (scale * jnp.linalg.norm(g) < tol)
        return z1, y1, k + 1, done | small

    init = (z, J @ z + u, 0, jnp.zeros((), bool))
    z, _, k, _ = jax.lax.while_loop(cond, body, init)
    return z, k


@functools.partial(jax.custom_jvp, nondiff_argnums=(5, 6))
def _solve(M, J, u, R, z0, iterations, tolerance):
    return _newton(M, J, u, R, z0, iterations, tolerance)[0]


@_solve.defjvp
def _solve_jvp(iterations, tolerance, primals, tangents):
    # implicit differentiation of the optimality condition grad(z; M, J, u, R) = 0:
    # H dz = -d(grad) at fixed z, H = M + J^T diag(D active) J (the warm start z0 moves the
    # iterates, not the minimiser: no derivative in it)
    M, J, u, R, z0 = primals
    dM, dJ, du, dR, _ = tangents
    z = _newton(M, J, u, R, z0, iterations, tolerance)[0]
    _, rhs = jax.jvp(
        lambda M_, J_, u_, R_: _gradient(M_, J_, u_, 1.0 / R_, z), (M, J, u, R), (dM, dJ, du, dR)
    )
    Da = jnp.where(J @ z + u < 0, 1.0 / R, 0.0)
    H = M + (J * Da[:, None]).T @ J
    return z, -linalg.spd_solve(H, rhs)


def newton_solve(M, J, u, R, z0=None, iterations=100, tolerance=None):
    """The minimiser ``z (nv,)`` of the primal cost (module docstring) of the one-sided soft rows
    ``J (n, nv)``, ``u (n,)``, ``R (n,) > 0`` with the mass matrix ``M (nv, nv)``, by MuJoCo's
    Newton steps (``mj_solNewton``), each with an exact line search: from ``z0`` where it costs
    less than ``0`` (MuJoCo's warm start from ``qacc_warmstart``), at most ``iterations`` steps,
    stopping once a step lands in the piece of the cost it minimised (the exact minimiser, to
    rounding) or, with ``tolerance``, once a step lowers the cost, or the gradient is, below
    ``tolerance`` in MuJoCo's scale ``1 / (mean(diag M) nv)`` (MJX's ``opt.tolerance`` test).
    Derivatives by implicit differentiation of the optimality condition (``H dz = -dgrad``,
    ``H = M + J^T diag(D active) J``); none through ``z0``."""
    z0 = jnp.zeros(M.shape[0], M.dtype) if z0 is None else z0
    return _solve(M, J, u, R, z0, iterations, tolerance)


def impulses(J, u, R, z):
    """The rows' impulses ``lam = max(0, -(J z + u)) / R`` at the primal point ``z``."""
    return jnp.maximum(-(J @ z + u), 0.0) / R


def residual(J, u, R, lam, Minv):
    """The dual problem's relative fixed-point residual of ``lam``: ``max |F(lam) - lam|`` over
    ``max(|lam|, |F(lam)|)``, ``F(lam) = max(0, -(J M^-1 J^T lam + u)) / R`` (the map whose fixed
    point is the solution; ``Minv`` the inverse mass matrix), no derivative (a diagnostic)."""
    J, u, R, lam, Minv = (jax.lax.stop_gradient(x) for x in (J, u, R, lam, Minv))
    F = impulses(J, u, R, Minv @ (J.T @ lam))
    scale = jnp.maximum(jnp.max(jnp.abs(lam), initial=0.0), jnp.max(jnp.abs(F), initial=0.0))
    tiny = jnp.finfo(lam.dtype).tiny
    return jnp.max(jnp.abs(F - lam), initial=0.0) / jnp.maximum(scale, tiny)


def solve_soft_rows(contact, Minv, Jc, frames, rows, v_rows, dt, extra=None, z0=None, M=None):
    """MuJoCo's soft pyramidal contact (``contact``: ``Constraint(soft=True, relaxed=True,
    cone="pyramidal")``, solver ``"newton"`` or the default,
    :func:`jaxdyn.sim.contact.uses_primal_newton`; its rows
    :func:`jaxdyn.sim.contact.soft_pyramid_rows`)
    and the one-sided rows ``extra = (J_l (k, nv), u_l (k,), R_l (k,))`` (joint limits;
    ``None``: none) solved in the primal (:func:`newton_solve`) with the inverse mass matrix
    ``Minv (nv, nv)`` (the ``M`` of MuJoCo's ``A = J M^-1 J^T``). ``Jc (nc w, nv)``: the
    contacts' rows ``[n, t1, t2, ...]``, ``rows``, ``v_rows (nc, w)`` their free and initial
    velocities (:func:`jaxdyn.sim.contact.contact_problem`); ``z0 (nv,)``: the warm start, a
    velocity change from the free velocity (MuJoCo's ``qacc_warmstart - qacc_smooth`` times
    the step; ``None``: none), kept where it costs less than ``0`` (:func:`newton_solve`);
    ``M``: the mass matrix itself where the caller has it (CRBA's; ``None``: ``Minv``'s
    inverse, which in float32 loses ``cond(M)`` times the rounding).

    Returns ``(lam (nc, w), lam_l (k,) or None, residual, x, z)``: the contact impulses in the
    rows ``[n, t1, t2, ...]``, the extra rows', the dual fixed-point residual (:func:`residual`),
    the flat impulses ``x`` (edges per contact, then the extra rows) and the velocity change
    ``z = M^-1 J^T x``."""
    from . import contact as C

    nc, w = frames.distance.shape[0], frames.width
    nv = Minv.shape[0]
    Jr = Jc.reshape(nc, w, nv)
    Jn = Jr[:, 0]
    diag_n = jnp.sum((Jn @ Minv) * Jn, -1)
    u, R, _, _, E = C.soft_pyramid_rows(contact, frames, diag_n, rows, v_rows, dt)
    J = jnp.einsum("cij,cjk->cik", E, Jr).reshape(-1, nv)  # the edges' rows
    if extra is not None:
        J = jnp.concatenate([J, extra[0]])
        u = jnp.concatenate([u, extra[1]])
        R = jnp.concatenate([R, extra[2]])
    Minv = 0.5 * (Minv + Minv.T)
    if M is None:
        M = linalg.spd_solve(Minv, jnp.eye(nv, dtype=Minv.dtype))
    M = 0.5 * (M + M.T)
    z = newton_solve(M, J, u, R, z0, contact.iterations, contact.tolerance)
    x = impulses(J, u, R, z)
    res = residual(J, u, R, x, Minv)
    ne = E.shape[1]
    lam = jnp.einsum("ci,cij->cj", x[: nc * ne].reshape(nc, ne), E)
    lam_l = None if extra is None else x[nc * ne :]
    return lam, lam_l, res, x, z

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

MuJoCo's dry-friction rows (``frictionloss``, efc type ``mjCNSTR_FRICTION_DOF``) are scalar rows
whose impulse is bounded on both sides, ``lo <= lam <= hi`` (``-+ h frictionloss``), where a
one-sided row has ``lo = 0``, ``hi = inf``: each scalar row's cost is the convex function with
``lam = clip(-D y, lo, hi)``, ``y = J z + u`` (:func:`_scalar_rows`): ``1/2 D y^2`` while ``-D
y`` lies inside the bounds (MuJoCo's quadratic state) and linear beyond, ``-lam y - 1/2 R lam^2``
(its ``LINEARNEG`` / ``LINEARPOS`` states; 0 for a one-sided row's satisfied side).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .. import _linalg as linalg

#: the line search's most pieces visited per Newton step (each an exact 1-D minimisation)
LINE_STEPS = 30


def _bounds(n, dtype, lo, hi):
    """The scalar rows' impulse bounds ``(lo, hi)``: ``(None, None)`` where neither is given
    (every row one-sided: the solves keep their one-sided arithmetic, static), else both
    arrays, ``0`` and ``inf`` (one-sided) where one is not given."""
    if lo is None and hi is None:
        return None, None
    lo = jnp.zeros(n, dtype) if lo is None else jnp.asarray(lo, dtype)
    hi = jnp.full(n, jnp.inf, dtype) if hi is None else jnp.asarray(hi, dtype)
    return lo, hi


def _scalar_rows(y, D, lo, hi):
    """The scalar rows at ``y = J z + u``: ``(cost (n,), lam (n,), quad (n,), zone (n,))``: the
    impulses ``lam = clip(-D y, lo, hi)`` (``-d cost / d y``), whether a row is in its
    quadratic zone (the cost's Hessian ``D`` there, 0 elsewhere) and its zone (0 quadratic,
    1 at ``lo``, 2 at ``hi``: MuJoCo's ``efc_state`` quadratic / satisfied or ``LINEARPOS`` /
    ``LINEARNEG``). The cost is ``1/2 D y^2`` in the quadratic zone, ``-lam y - 1/2 lam^2 /
    D`` on the linear ones (continuous, convex). ``lo = hi = None``: every row one-sided
    (``0``, ``inf``)."""
    if lo is None:  # one-sided rows: quadratic where y < 0, else satisfied (no cost)
        quad = y < 0
        lam = jnp.where(quad, -D * y, 0.0)
        return jnp.where(quad, 0.5 * D * y * y, 0.0), lam, quad, jnp.where(quad, 0, 1)
    f = -D * y
    lam = jnp.clip(f, lo, hi)
    at_lo, at_hi = f <= lo, f >= hi
    quad = ~at_lo & ~at_hi
    lin = jnp.where(quad, 0.0, lam)
    cost = jnp.where(quad, 0.5 * D * y * y, -lin * y - 0.5 * lin * lin / D)
    zone = jnp.where(quad, 0, jnp.where(at_hi, 2, 1))
    return cost, lam, quad, zone


def _cost(M, J, u, D, lo, hi, z):
    y = J @ z + u
    return 0.5 * z @ (M @ z) + jnp.sum(_scalar_rows(y, D, lo, hi)[0])


def _gradient(M, J, u, D, lo, hi, z):
    """The primal cost's gradient ``M z - J^T lam``, ``lam = clip(-D (J z + u), lo, hi)``: 0
    at the solution."""
    y = J @ z + u
    return M @ z - J.T @ _scalar_rows(y, D, lo, hi)[1]


def _line_search(z, d, y, e, Mz, Md, D, lo, hi):
    """The exact minimiser ``alpha >= 0`` of ``f(alpha)`` (the cost along ``z + alpha d``;
    ``y = J z + u``, ``e = J d``, ``Mz``, ``Md``, the rows' bounds ``lo``, ``hi``): ``f'`` is
    piecewise linear, increasing; each
    pass minimises the quadratic of the piece at ``alpha`` (the rows' zones there), kept when
    its minimiser lies in the same piece (then it is the exact minimiser), else a bracketed
    bisection step (a safeguard: ``f'(lo) < 0 < f'(hi)``)."""
    dMd = jnp.maximum(d @ Md, jnp.finfo(z.dtype).tiny)
    zMd = z @ Md

    def piece(alpha):
        _, lam, quad, zone = _scalar_rows(y + alpha * e, D, lo, hi)
        De = jnp.where(quad, D * e, 0.0)
        slope = dMd + De @ e
        icpt = zMd + De @ y
        if lo is not None:  # the linear rows' constant slopes
            icpt = icpt - jnp.where(quad, 0.0, lam) @ e
        return zone, icpt + alpha * slope, -icpt / slope

    def cond(c):
        return ~c[3] & (c[4] < LINE_STEPS)

    def body(c):
        alpha, a_lo, a_hi, _, k = c
        zone, fp, star = piece(alpha)
        a_lo = jnp.where(fp < 0, alpha, a_lo)
        a_hi = jnp.where(fp < 0, a_hi, alpha)
        same = jnp.all(_scalar_rows(y + star * e, D, lo, hi)[3] == zone)
        inside = (star > a_lo) & (star < a_hi)
        mid = jnp.where(jnp.isinf(a_hi), 2 * a_lo + 1, 0.5 * (a_lo + a_hi))
        nxt = jnp.where(inside | same, star, mid)
        return nxt, a_lo, a_hi, same | (fp == 0), k + 1

    one = jnp.ones((), z.dtype)
    init = (one, jnp.zeros((), z.dtype), jnp.full((), jnp.inf, z.dtype), jnp.zeros((), bool), 0)
    alpha = jax.lax.while_loop(cond, body, init)[0]
    return jnp.maximum(alpha, 0.0)


def _start(M, cost, z0):
    """The Newton solves' start and the scale of their stopping tests: MuJoCo's warm start
    ``z0`` where it costs less than the free step (``z = 0``), and ``1 / (mean inertia *
    nv)``. ``cost``: ``z -> `` the solve's cost."""
    dtype = M.dtype
    nv = M.shape[0]
    zero = jnp.zeros(nv, dtype)
    z = zero if z0 is None else jnp.where(cost(z0) < cost(zero), z0, zero)
    scale = 1.0 / jnp.maximum(jnp.mean(jnp.diagonal(M)) * nv, jnp.finfo(dtype).tiny)
    return z, scale


def _newton(M, J, u, R, lo, hi, z0, iterations, tolerance):
    """:func:`newton_solve`'s minimiser ``z`` and the Newton steps it took."""
    D = 1.0 / R
    z, scale = _start(M, lambda z: _cost(M, J, u, D, lo, hi, z), z0)
    tol = -1.0 if tolerance is None else tolerance

    def cond(c):
        return ~c[3] & (c[2] < iterations)

    def body(c):
        z, y, k, _ = c
        rows0, lam, quad, zone = _scalar_rows(y, D, lo, hi)
        Da = jnp.where(quad, D, 0.0)
        g = M @ z - J.T @ lam
        H = M + (J * Da[:, None]).T @ J
        d = -linalg.spd_solve(H, g)
        e = J @ d
        alpha = _line_search(z, d, y, e, M @ z, M @ d, D, lo, hi)
        z1 = z + alpha * d
        y1 = J @ z1 + u
        rows1, _, _, zone1 = _scalar_rows(y1, D, lo, hi)
        # exact: the new point lies in the piece whose quadratic the step minimised
        done = jnp.all(zone1 == zone)
        cost0 = 0.5 * z @ (M @ z) + jnp.sum(rows0)
        cost1 = 0.5 * z1 @ (M @ z1) + jnp.sum(rows1)
        small = (scale * (cost0 - cost1) < tol) | (scale * jnp.linalg.norm(g) < tol)
        return z1, y1, k + 1, done | small

    init = (z, J @ z + u, 0, jnp.zeros((), bool))
    z, _, k, _ = jax.lax.while_loop(cond, body, init)
    return z, k


@functools.partial(jax.custom_jvp, nondiff_argnums=(7, 8))
def _solve(M, J, u, R, lo, hi, z0, iterations, tolerance):
    return _newton(M, J, u, R, lo, hi, z0, iterations, tolerance)[0]


@_solve.defjvp
def _solve_jvp(iterations, tolerance, primals, tangents):
    # implicit differentiation of the optimality condition grad(z; M, J, u, R) = 0:
    # H dz = -d(grad) at fixed z, H = M + J^T diag(D quadratic) J (the warm start z0 moves the
    # iterates, not the minimiser: no derivative in it)
    M, J, u, R, lo, hi, z0 = primals
    dM, dJ, du, dR, dlo, dhi, _ = tangents
    z = _newton(M, J, u, R, lo, hi, z0, iterations, tolerance)[0]
    _, rhs = jax.jvp(
        lambda M_, J_, u_, R_, lo_, hi_: _gradient(M_, J_, u_, 1.0 / R_, lo_, hi_, z),
        (M, J, u, R, lo, hi),
        (dM, dJ, du, dR, dlo, dhi),
    )
    Da = jnp.where(_scalar_rows(J @ z + u, 1.0 / R, lo, hi)[2], 1.0 / R, 0.0)
    H = M + (J * Da[:, None]).T @ J
    return z, -linalg.spd_solve(H, rhs)


def newton_solve(M, J, u, R, z0=None, iterations=100, tolerance=None, lo=None, hi=None):
    """The minimiser ``z (nv,)`` of the primal cost (module docstring) of the soft rows
    ``J (n, nv)``, ``u (n,)``, ``R (n,) > 0`` with the impulse bounds ``lo``, ``hi (n,)``
    (``None``: ``0``, ``inf``, one-sided rows; MuJoCo's dry-friction rows ``-+ h
    frictionloss``) with the mass matrix ``M (nv, nv)``, by MuJoCo's
    Newton steps (``mj_solNewton``), each with an exact line search: from ``z0`` where it costs
    less than ``0`` (MuJoCo's warm start from ``qacc_warmstart``), at most ``iterations`` steps,
    stopping once a step lands in the piece of the cost it minimised (the exact minimiser, to
    rounding) or, with ``tolerance``, once a step lowers the cost, or the gradient is, below
    ``tolerance`` in MuJoCo's scale ``1 / (mean(diag M) nv)`` (MJX's ``opt.tolerance`` test).
    Derivatives by implicit differentiation of the optimality condition (``H dz = -dgrad``,
    ``H = M + J^T diag(D quadratic) J``); none through ``z0``."""
    z0 = jnp.zeros(M.shape[0], M.dtype) if z0 is None else z0
    lo, hi = _bounds(J.shape[0], M.dtype, lo, hi)
    return _solve(M, J, u, R, lo, hi, z0, iterations, tolerance)


def impulses(J, u, R, z, lo=None, hi=None):
    """The rows' impulses ``lam = clip(-(J z + u) / R, lo, hi)`` at the primal point ``z``
    (``None`` bounds: ``0``, ``inf``)."""
    lo, hi = _bounds(J.shape[0], z.dtype, lo, hi)
    f = -(J @ z + u) / R
    return jnp.maximum(f, 0.0) if lo is None else jnp.clip(f, lo, hi)


def residual(J, u, R, lam, Minv, lo=None, hi=None):
    """The dual problem's relative fixed-point residual of ``lam``: ``max |F(lam) - lam|`` over
    ``max(|lam|, |F(lam)|)``, ``F(lam) = clip(-(J M^-1 J^T lam + u) / R, lo, hi)`` (the map whose
    fixed point is the solution; ``Minv`` the inverse mass matrix), no derivative (a
    diagnostic)."""
    J, u, R, lam, Minv = (jax.lax.stop_gradient(x) for x in (J, u, R, lam, Minv))
    F = impulses(J, u, R, Minv @ (J.T @ lam), lo, hi)
    scale = jnp.maximum(jnp.max(jnp.abs(lam), initial=0.0), jnp.max(jnp.abs(F), initial=0.0))
    tiny = jnp.finfo(lam.dtype).tiny
    return jnp.max(jnp.abs(F - lam), initial=0.0) / jnp.maximum(scale, tiny)


def solve_rows(Minv, M, J, u, R, lo=None, hi=None, z0=None, iterations=100, tolerance=None):
    """MuJoCo's primal problem of the scalar rows ``(J, u, R)`` (their impulses bounded by
    ``lo`` / ``hi`` where given) minimised by :func:`newton_solve`: ``(x, res, z)``, the
    impulses (:func:`impulses`), the solve's :func:`residual` and the velocity change.
    ``Minv`` and ``M`` (``None``: the inverse of ``Minv``) the inverse and plain mass
    matrices, each taken symmetric."""
    Minv = 0.5 * (Minv + Minv.T)
    if M is None:
        M = linalg.spd_solve(Minv, jnp.eye(Minv.shape[0], dtype=Minv.dtype))
    M = 0.5 * (M + M.T)
    z = newton_solve(M, J, u, R, z0, iterations, tolerance, lo, hi)
    x = impulses(J, u, R, z, lo, hi)
    return x, residual(J, u, R, x, Minv, lo, hi), z


def solve_soft_rows(contact, Minv, Jc, frames, rows, v_rows, dt, extra=None, z0=None, M=None):
    """MuJoCo's soft pyramidal contact (``contact``: ``Constraint(soft=True, relaxed=True,
    cone="pyramidal")``, solver ``"newton"`` or the default,
    :func:`jaxdyn.sim.contact.uses_primal_newton`; its rows
    :func:`jaxdyn.sim.contact.soft_pyramid_rows`)
    and the scalar rows ``extra = (J_l (k, nv), u_l (k,), R_l (k,))`` (one-sided: joint limits)
    or ``(J_l, u_l, R_l, lo_l, hi_l)`` (with the impulse bounds: MuJoCo's dry-friction rows;
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
    if contact.cone != "pyramidal":
        return _solve_elliptic_rows(contact, Minv, Jr, frames, diag_n, rows, v_rows, dt, extra,
                                    z0, M)  # fmt: skip
    u, R, _, _, E = C.soft_pyramid_rows(contact, frames, diag_n, rows, v_rows, dt)
    J = jnp.einsum("cij,cjk->cik", E, Jr).reshape(-1, nv)  # the edges' rows
    lo = hi = None
    if extra is not None:
        Js, us, Rs, los, his = _extra_rows(extra, nv, Minv.dtype)
        if los is not None and his is not None:  # bounded rows: the edges' bounds 0, inf
            lo = jnp.concatenate([jnp.zeros_like(u), los])
            hi = jnp.concatenate([jnp.full_like(u, jnp.inf), his])
        J, u, R = jnp.concatenate([J, Js]), jnp.concatenate([u, us]), jnp.concatenate([R, Rs])
    x, res, z = solve_rows(Minv, M, J, u, R, lo, hi, z0, contact.iterations, contact.tolerance)
    ne = E.shape[1]
    lam = jnp.einsum("ci,cij->cj", x[: nc * ne].reshape(nc, ne), E)
    lam_l = None if extra is None else x[nc * ne :]
    return lam, lam_l, res, x, z


def _extra_rows(extra, nv, dtype):
    """:func:`solve_soft_rows`' scalar rows ``extra`` as ``(J, u, R, lo, hi)`` (``None``: no
    rows; three entries: one-sided rows, ``lo = hi = None``)."""
    if extra is None:
        z = jnp.zeros(0, dtype)
        return jnp.zeros((0, nv), dtype), z, z, None, None
    J, u, R = extra[:3]
    lo, hi = (None, None) if len(extra) == 3 else extra[3:]
    return (J, u, R, *_bounds(J.shape[0], dtype, lo, hi))


# ---------------------------------------------------------------------------------------------
# MuJoCo's elliptic cones (mjCONE_ELLIPTIC) in the primal problem


def _cone_zones(y, D, mu, fr):
    """MuJoCo's ``mj_constraintUpdate`` (elliptic case) on the contact blocks ``y (nc, w)``
    (``h jar``: the rows ``[n, t1, t2, ...]`` of ``J z + u``), ``D (nc, w)`` (``1 / R``),
    ``mu (nc,)`` (the regularised cone's, MuJoCo's ``mjContact.mu``; ``<= 0``: a frictionless
    contact, its normal a one-sided row) and ``fr (nc, w - 1)`` (``mjContact.friction``).

    In MuJoCo's scaled space ``U = (mu y_0, fr_j y_j)``, ``N = U_0``, ``T = |U_t|``: the top
    zone ``N >= mu T`` costs nothing, the bottom zone ``mu N + T <= 0`` costs ``1/2 sum_j D_j
    y_j^2`` (each row quadratic), the middle zone ``1/2 Dm (N - mu T)^2`` with ``Dm = D_0 /
    (mu^2 (1 + mu^2))``. Returns ``(cost (nc,), force (nc, w), H (nc, w, w), middle (nc,),
    zone (nc,))``: the force ``-d cost / d y`` (the impulses), the cost's Hessian in ``y``
    (MuJoCo's ``mjContact.H`` in the middle zone, ``diag(D)`` in the bottom one) and the zone
    (0 top, 1 bottom, 2 middle)."""
    dtype = y.dtype
    w = y.shape[1]
    fl = mu <= 0  # frictionless: the normal row alone (D_t = 0)
    mus = jnp.where(fl, 1.0, mu)
    U0 = y[:, 0] * mus
    Ut = y[:, 1:] * fr
    T2 = jnp.sum(Ut * Ut, -1)
    pos = T2 > 0
    T = jnp.where(pos, jnp.sqrt(jnp.where(pos, T2, 1.0)), 0.0)
    N = U0
    top = (N >= mus * T) | (~pos & (N >= 0))
    bottom = ~top & ((mus * N + T <= 0) | (~pos & (N < 0)))
    top = jnp.where(fl, y[:, 0] >= 0, top)
    bottom = jnp.where(fl, y[:, 0] < 0, bottom)
    middle = ~top & ~bottom
    Ts = jnp.where(middle & pos, T, 1.0)
    Dm = D[:, 0] / (mus * mus * (1 + mus * mus))
    NmT = N - mus * T
    cost_b = 0.5 * jnp.sum(D * y * y, -1)
    cost_m = 0.5 * Dm * NmT * NmT
    cost = jnp.where(bottom, cost_b, jnp.where(middle, cost_m, 0.0))
    f0 = -Dm * NmT * mus
    f_m = jnp.concatenate([f0[:, None], -(f0 / Ts)[:, None] * Ut * fr], 1)
    force = jnp.where(bottom[:, None], -D * y, jnp.where(middle[:, None], f_m, 0.0))
    # the middle zone's Hessian (mj_constraintUpdate's cone Hessian): diag(s) A diag(s) Dm,
    # s = (mu, fr), A = [[1, -mu/T U_t^T], [-mu/T U_t, mu N/T^3 U_t U_t^T + (mu^2 - mu N/T) I]]
    a0 = (-mus / Ts)[:, None] * Ut
    At = (mus * N / Ts**3)[:, None, None] * Ut[:, :, None] * Ut[:, None, :]
    At = At + (mus * mus - mus * N / Ts)[:, None, None] * jnp.eye(w - 1, dtype=dtype)
    top_row = jnp.concatenate([jnp.ones_like(mus)[:, None], a0], 1)
    A = jnp.concatenate([top_row[:, None, :], jnp.concatenate([a0[:, :, None], At], 2)], 1)
    s = jnp.concatenate([mus[:, None], fr], 1)
    H_m = Dm[:, None, None] * s[:, :, None] * A * s[:, None, :]
    H_b = D[:, :, None] * jnp.eye(w, dtype=dtype)
    H = jnp.where(bottom[:, None, None], H_b, jnp.where(middle[:, None, None], H_m, 0.0))
    zone = jnp.where(top, 0, jnp.where(bottom, 1, 2))
    return cost, force, H, middle, zone


def _elliptic_parts(M, Jc, uc, Dc, mu, fr, Js, us, Ds, los, his, z):
    """The elliptic primal cost at ``z``: ``(cost, grad, H, forces of the blocks (nc, w),
    forces of the scalar rows, middle (nc,), zones (nc,), scalar rows' zones)``; ``grad = M z -
    J^T force``, ``H = M + sum_c J_c^T H_c J_c + J_s^T diag(D_s quadratic) J_s`` (the scalar
    rows with the impulse bounds ``los``, ``his``: :func:`_scalar_rows`)."""
    y = jnp.einsum("cik,k->ci", Jc, z) + uc
    ys = Js @ z + us
    cost_c, fc, Hc, middle, zone = _cone_zones(y, Dc, mu, fr)
    cost_s, fs, quad, zone_s = _scalar_rows(ys, Ds, los, his)
    Mz = M @ z
    cost = 0.5 * z @ Mz + jnp.sum(cost_c) + jnp.sum(cost_s)
    grad = Mz - jnp.einsum("cik,ci->k", Jc, fc) - Js.T @ fs
    Das = jnp.where(quad, Ds, 0.0)
    H = M + jnp.einsum("cik,cij,cjl->kl", Jc, Hc, Jc) + (Js * Das[:, None]).T @ Js
    return cost, grad, H, fc, fs, middle, zone, zone_s


def _elliptic_line_search(M, Jc, uc, Dc, mu, fr, Js, us, Ds, los, his, z, d, g):
    """The minimiser ``alpha >= 0`` of the (convex) cost along ``z + alpha d`` by safeguarded
    Newton steps on its derivative ``f'(alpha)`` (increasing): each a Newton step on the
    three-zone cost's pieces (MuJoCo's ``PrimalLinesearch`` evaluates the same quadratic and
    cone pieces), kept inside the bracket ``f'(lo) < 0 < f'(hi)``, else a bisection; ``g``:
    the gradient at ``z`` (``f'(0) = g^T d < 0``)."""
    dtype = z.dtype
    y0 = jnp.einsum("cik,k->ci", Jc, z) + uc
    e = jnp.einsum("cik,k->ci", Jc, d)
    ys0, es = Js @ z + us, Js @ d
    Md = M @ d
    zMd, dMd = z @ Md, jnp.maximum(d @ Md, jnp.finfo(dtype).tiny)
    eps = jnp.finfo(dtype).eps

    def slopes(alpha):
        _, fc, Hc, _, _ = _cone_zones(y0 + alpha * e, Dc, mu, fr)
        _, fs, quad, _ = _scalar_rows(ys0 + alpha * es, Ds, los, his)
        fp = zMd + alpha * dMd - jnp.sum(fc * e) - fs @ es
        fpp = jnp.einsum("ci,cij,cj->", e, Hc, e) + jnp.sum(jnp.where(quad, Ds * es * es, 0.0))
        fpp = dMd + fpp
        return fp, fpp

    def cond(c):
        return ~c[3] & (c[4] < LINE_STEPS)

    def body(c):
        alpha, lo, hi, _, k = c
        fp, fpp = slopes(alpha)
        lo = jnp.where(fp < 0, alpha, lo)
        hi = jnp.where(fp < 0, hi, alpha)
        star = alpha - fp / jnp.maximum(fpp, jnp.finfo(dtype).tiny)
        inside = (star > lo) & (star < hi)
        mid = jnp.where(jnp.isinf(hi), 2 * lo + 1, 0.5 * (lo + hi))
        nxt = jnp.where(inside, star, mid)
        done = (fp == 0) | (jnp.abs(nxt - alpha) <= 4 * eps * jnp.abs(alpha))
        return jnp.where(fp == 0, alpha, nxt), lo, hi, done, k + 1

    one = jnp.ones((), dtype)
    init = (one, jnp.zeros((), dtype), jnp.full((), jnp.inf, dtype), g @ d >= 0, 0)
    alpha = jax.lax.while_loop(cond, body, init)[0]
    return jnp.where(g @ d < 0, jnp.maximum(alpha, 0.0), 0.0)


def _newton_elliptic(M, Jc, uc, Dc, mu, fr, Js, us, Ds, los, his, z0, iterations, tolerance):
    """:func:`newton_solve_elliptic`'s minimiser ``z`` and the Newton steps it took."""
    dtype = M.dtype
    args = (M, Jc, uc, Dc, mu, fr, Js, us, Ds, los, his)
    z, scale = _start(M, lambda z: _elliptic_parts(*args, z)[0], z0)
    tol = -1.0 if tolerance is None else tolerance
    eps = jnp.finfo(dtype).eps

    def cond(c):
        return ~c[2] & (c[1] < iterations)

    def body(c):
        z, k, _ = c
        cost0, g, H, _, _, middle, zone, zone_s = _elliptic_parts(*args, z)
        d = -linalg.spd_solve(H, g)
        alpha = _elliptic_line_search(*args, z, d, g)
        z1 = z + alpha * d
        cost1, _, _, _, _, _, zone1, zone_s1 = _elliptic_parts(*args, z1)
        # exact: no cone on its surface and the new point in the quadratic piece the step
        # minimised; else once the step is at rounding level or the line search stays put
        exact = ~jnp.any(middle) & jnp.all(zone1 == zone) & jnp.all(zone_s1 == zone_s)
        step = jnp.max(jnp.abs(alpha * d), initial=0.0)
        tiny = step <= 4 * eps * jnp.maximum(jnp.max(jnp.abs(z1), initial=0.0), eps)
        # (not on the cost: near the minimiser its rounding hides steps of sqrt(eps) |z|)
        small = (scale * (cost0 - cost1) < tol) | (scale * jnp.linalg.norm(g) < tol)
        return z1, k + 1, exact | tiny | (alpha == 0) | small

    z, k, _ = jax.lax.while_loop(cond, body, (z, 0, jnp.zeros((), bool)))
    return z, k


@functools.partial(jax.custom_jvp, nondiff_argnums=(12, 13))
def _solve_elliptic(M, Jc, uc, Dc, mu, fr, Js, us, Ds, los, his, z0, iterations, tolerance):
    args = (M, Jc, uc, Dc, mu, fr, Js, us, Ds, los, his)
    return _newton_elliptic(*args, z0, iterations, tolerance)[0]


@_solve_elliptic.defjvp
def _solve_elliptic_jvp(iterations, tolerance, primals, tangents):
    # implicit differentiation of grad(z; params) = 0: H dz = -d(grad) at fixed z (the middle
    # zone's cost is twice differentiable there; no derivative through the warm start z0)
    M, Jc, uc, Dc, mu, fr, Js, us, Ds, los, his, z0 = primals
    params = (M, Jc, uc, Dc, mu, fr, Js, us, Ds, los, his)
    z = _newton_elliptic(M, Jc, uc, Dc, mu, fr, Js, us, Ds, los, his, z0, iterations, tolerance)[0]

    def grad(M, Jc, uc, Dc, mu, fr, Js, us, Ds, los, his):
        return _elliptic_parts(M, Jc, uc, Dc, mu, fr, Js, us, Ds, los, his, z)[1]

    _, rhs = jax.jvp(grad, params, tuple(tangents[:11]))
    H = _elliptic_parts(M, Jc, uc, Dc, mu, fr, Js, us, Ds, los, his, z)[2]
    return z, -linalg.spd_solve(H, rhs)


def newton_solve_elliptic(M, Jc, uc, Dc, mu, fr, Js, us, Ds, z0=None, iterations=100,
                          tolerance=None, lo=None, hi=None):  # fmt: skip
    """The minimiser ``z (nv,)`` of MuJoCo's primal cost with elliptic contact cones
    (``mj_solNewton`` under ``mjCONE_ELLIPTIC``): ``1/2 z^T M z`` plus each contact block's
    three-zone cost (:func:`_cone_zones`; ``Jc (nc, w, nv)``, ``uc (nc, w)``, ``Dc (nc, w)``,
    ``mu (nc,)``, ``fr (nc, w - 1)``) plus the one-sided scalar rows' ``1/2 D_s min(0, J_s z +
    u_s)^2`` (``Js (k, nv)``, ``us``, ``Ds (k,)``: joint limits; with the impulse bounds ``lo``,
    ``hi (k,)`` the bounded rows' cost, :func:`newton_solve`: MuJoCo's dry-friction rows), by
    Newton steps on ``H = M + sum_c J_c^T H_c J_c + J_s^T diag(D_s quadratic) J_s`` (MuJoCo's
    ``HessianCone`` adds the cone blocks to the factor of the rest; here the sum is factored),
    each with a line search (:func:`_elliptic_line_search`). Stops after ``iterations`` steps,
    once a step without a cone on its surface lands in the quadratic piece it minimised
    (exact), once a step is at rounding level or the line search stays at ``alpha = 0``, or
    with ``tolerance`` on MuJoCo's tests (:func:`newton_solve`). From ``z0`` where it costs
    less than ``0`` (MuJoCo's warm start). Derivatives by implicit differentiation (``H dz =
    -dgrad``); none through ``z0``."""
    z0 = jnp.zeros(M.shape[0], M.dtype) if z0 is None else z0
    lo, hi = _bounds(Js.shape[0], M.dtype, lo, hi)
    args = (M, Jc, uc, Dc, mu, fr, Js, us, Ds, lo, hi)
    return _solve_elliptic(*args, z0, iterations, tolerance)


def elliptic_forces(Jc, uc, Dc, mu, fr, Js, us, Ds, z, lo=None, hi=None):
    """The contact blocks' impulses ``(nc, w)`` and the scalar rows' ``(k,)`` at ``z``
    (:func:`_cone_zones`' force, ``clip(-D_s (J_s z + u_s), lo, hi)``; ``None`` bounds: ``0``,
    ``inf``)."""
    y = jnp.einsum("cik,k->ci", Jc, z) + uc
    fc = _cone_zones(y, Dc, mu, fr)[1]
    lo, hi = _bounds(Js.shape[0], z.dtype, lo, hi)
    return fc, _scalar_rows(Js @ z + us, Ds, lo, hi)[1]


def elliptic_residual(Jc, uc, Dc, mu, fr, Js, us, Ds, fc, fs, Minv, lo=None, hi=None):
    """:func:`residual` of the elliptic problem: the relative fixed-point residual of the
    impulses ``(fc, fs)`` under the map ``F`` = the forces (:func:`elliptic_forces`) at ``z =
    M^-1 J^T lam`` (no derivative: a diagnostic)."""
    args = [jax.lax.stop_gradient(x) for x in (Jc, uc, Dc, mu, fr, Js, us, Ds, fc, fs, Minv)]
    Jc, uc, Dc, mu, fr, Js, us, Ds, fc, fs, Minv = args
    z = Minv @ (jnp.einsum("cik,ci->k", Jc, fc) + Js.T @ fs)
    Fc, Fs = elliptic_forces(Jc, uc, Dc, mu, fr, Js, us, Ds, z, lo, hi)
    lam = jnp.concatenate([fc.reshape(-1), fs])
    F = jnp.concatenate([Fc.reshape(-1), Fs])
    scale = jnp.maximum(jnp.max(jnp.abs(lam), initial=0.0), jnp.max(jnp.abs(F), initial=0.0))
    return jnp.max(jnp.abs(F - lam), initial=0.0) / jnp.maximum(scale, jnp.finfo(lam.dtype).tiny)


def _solve_elliptic_rows(contact, Minv, Jr, frames, diag_n, rows, v_rows, dt, extra, z0, M):
    """:func:`solve_soft_rows` on MuJoCo's elliptic cones (``Constraint(cone=None)`` or
    ``"elliptic"``): the contacts' rows ``[n, t1, t2, ...]`` themselves
    (:func:`jaxdyn.sim.contact.soft_elliptic_rows`), :func:`newton_solve_elliptic`."""
    from . import contact as C

    nc, w, nv = Jr.shape
    uc, Dc, mu, fr, _ = C.soft_elliptic_rows(contact, frames, diag_n, rows, v_rows, dt)
    dtype = Minv.dtype
    Js, us, Rs, lo, hi = _extra_rows(extra, nv, dtype)
    Ds = 1.0 / Rs
    Minv = 0.5 * (Minv + Minv.T)
    if M is None:
        M = linalg.spd_solve(Minv, jnp.eye(nv, dtype=dtype))
    M = 0.5 * (M + M.T)
    args = (Jr, uc, Dc, mu, fr, Js, us, Ds)
    z = newton_solve_elliptic(M, *args, z0, contact.iterations, contact.tolerance, lo, hi)
    lam, lam_l = elliptic_forces(*args, z, lo, hi)
    res = elliptic_residual(*args, lam, lam_l, Minv, lo, hi)
    x = jnp.concatenate([lam.reshape(-1), lam_l])
    return lam, (None if extra is None else lam_l), res, x, z

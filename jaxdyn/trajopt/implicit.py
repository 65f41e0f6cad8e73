"""Gradients of an optimal trajectory with respect to the problem's parameters by implicit
differentiation.

At a (local) optimum ``U*`` of the single-shooting cost ``J(U; θ) = Σ_t dt l(x_t, u_t) +
l_T(x_T)``, ``x_{t+1} = step(x_t, u_t)``, the first-order condition ``∇_U J(U*(θ); θ) = 0``
holds on the free controls (those not at a bound), so by the implicit function theorem

    dU*/dθ = -H^-1 ∂²J/∂U∂θ,   H = ∇²_U J (free block; the controls at a bound stay there)

(e.g. Amos & Kolter, "OptNet", ICML 2017; Blondel et al., "Efficient and modular implicit
differentiation", NeurIPS 2022). :func:`solve_differentiable` returns ``U*`` with a
``jax.custom_vjp``: the backward pass solves ``H w = ḡ`` by conjugate gradients with
Hessian-vector products (forward-over-reverse autodiff of ``J`` through the plain step) and
returns ``-(∂/∂θ) [∇_U J · w]`` for every array leaf ``θ`` of the problem (model parameters,
initial state, cost references and weights, ``dt``). Reverse mode through the solver's
iterations is never taken.

The solution must be a strict local minimum (``H`` positive definite on the free controls);
the gradient is that of the returned iterate, so solve to a tight ``th_stop``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp

from .ddp import fddp
from .shooting import shooting_cost

if TYPE_CHECKING:
    from jax import Array

    from .ddp import Problem

__all__ = ["solve_differentiable"]


def _free_mask(problem, us, atol):
    lo, hi = problem.with_bounds().bounds()
    return ~((us <= lo + atol) | (us >= hi - atol))


def _cg(A, b, tol, maxiter):
    """Conjugate gradients for SPD ``A`` (a function), ``lax.while_loop``."""
    x = jnp.zeros_like(b)
    r = b
    p = r
    rs = jnp.vdot(r, r)
    b2 = jnp.maximum(jnp.vdot(b, b), jnp.finfo(b.dtype).tiny)

    def cond(c):
        return (c[4] < maxiter) & (c[3] > tol**2 * b2)

    def body(c):
        x, r, p, rs, k = c
        Ap = A(p)
        alpha = rs / jnp.vdot(p, Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        rs_new = jnp.vdot(r, r)
        p = r + (rs_new / rs) * p
        return x, r, p, rs_new, k + 1

    x, *_ = jax.lax.while_loop(cond, body, (x, r, p, rs, 0))
    return x


def solve_differentiable(
    problem: Problem,
    us_init: Array | None = None,
    *,
    cg_tol: float = 1e-12,
    cg_maxiter: int | None = None,
    **options: Any,
) -> Array:
    """FDDP's optimal controls ``U* (T, nu)``, differentiable in the problem's array leaves
    by implicit differentiation (see the module docstring). ``options`` go to
    :func:`jaxdyn.trajopt.fddp` (e.g. ``th_stop``, ``max_iter``); the states are
    ``rollout(problem, U*)``. Differentiate with ``jax.grad`` / ``jax.vjp`` (reverse mode).
    """
    params, static = eqx.partition(problem, eqx.is_inexact_array)

    @jax.custom_vjp
    def solve(params):
        p = eqx.combine(params, static)
        return fddp(p, None, us_init, **options).us

    def fwd(params):
        us = solve(params)
        return us, (params, us)

    def bwd(res, g):
        params, us = res
        p = eqx.combine(params, static)
        free = _free_mask(p, us, 1e-9)

        def grad_u(prm, u):
            return jax.grad(lambda uu: shooting_cost(eqx.combine(prm, static), uu, False))(u)

        def hvp(w):
            return jax.jvp(lambda u: grad_u(params, u), (us,), (w,))[1]

        def A(w):
            return jnp.where(free, hvp(jnp.where(free, w, 0.0)), w)

        n = us.size
        w = _cg(A, jnp.where(free, g, 0.0), cg_tol, cg_maxiter or 4 * n)
        w = jnp.where(free, w, 0.0)
        _, vjp = jax.vjp(lambda prm: grad_u(prm, us), params)
        (dparams,) = vjp(-w)
        return (dparams,)

    solve.defvjp(fwd, bwd)
    return solve(params)

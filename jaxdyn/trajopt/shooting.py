"""Shooting baselines of the DDP solvers: gradient-based single shooting with optax, and
direct multiple shooting as nonlinear least squares with optimistix (Levenberg-Marquardt).

The controls ``U`` are the decision variables; the cost ``J(U) = Σ_t dt l(x_t, u_t) +
l_T(x_T)`` of the rollout from ``x0`` is differentiated in reverse mode through
:func:`jaxdyn.trajopt.dynamics.step` (whose ``custom_jvp`` uses the analytic step Jacobians;
``jax.grad`` transposes it) and minimised by an optax optimiser for a fixed number of steps,
controls projected onto their bounds after each step. One ``lax.scan``, jit-compiled,
``jax.vmap``-able.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp

from .. import value_checks
from .ddp import _boxed, trajectory_cost
from .dynamics import step, step_plain
from .lie import state_difference, state_integrate

if TYPE_CHECKING:
    import optax
    from jax import Array

    from .ddp import Problem

__all__ = ["gradient_shooting", "multiple_shooting", "shooting_cost"]


def shooting_cost(problem: Problem, us: Array, analytic: bool = True) -> Array:
    """``J(U)``: the cost of the rollout of ``us (T, nu)`` from ``problem.x0`` (through
    :func:`step` when ``analytic``, else :func:`step_plain`)."""
    f_step = step if analytic else step_plain

    def f(x, u):
        x1 = f_step(problem.model, x, u, problem.dt, problem.dynamics)
        return x1, x1

    _, xs = jax.lax.scan(f, problem.x0, us)
    xs = jnp.concatenate([problem.x0[None], xs], 0)
    return trajectory_cost(problem, xs, us)


@eqx.filter_jit
def gradient_shooting(
    problem: Problem,
    optimizer: optax.GradientTransformation,
    steps: int,
    us: Array | None = None,
    analytic: bool = True,
) -> tuple[Array, Array]:
    """Minimise ``J(U)`` with ``optimizer`` (an ``optax.GradientTransformation``) for
    ``steps`` steps from ``us`` (zeros by default). Returns ``(us, costs (steps,))``, the
    costs before each step; a non-finite cost (a diverging rollout) stops the updates: the
    last controls with a finite cost are returned and the remaining costs are NaN."""
    import optax

    p = problem.with_bounds()
    lo, hi = p.bounds()
    if us is None:
        us = jnp.zeros((problem.horizon, problem.nu), jnp.asarray(problem.x0).dtype)
    vg = jax.value_and_grad(lambda u: shooting_cost(p, u, analytic))
    state = optimizer.init(us)

    def body(carry, _):
        us, last, state, ok = carry  # last: the latest controls with a finite cost
        cost, g = vg(us)
        ok = ok & jnp.isfinite(cost) & jnp.all(jnp.isfinite(g))
        last = jnp.where(ok, us, last)
        upd, new_state = optimizer.update(g, state, us)
        new_us = jnp.clip(cast("Array", optax.apply_updates(us, upd)), lo, hi)
        us = jnp.where(ok, new_us, last)
        state = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new_state, state)
        return (us, last, state, ok), jnp.where(ok, cost, jnp.nan)

    init = (us, us, state, jnp.asarray(True))
    (us, last, _, ok), costs = jax.lax.scan(body, init, None, length=steps)
    # the final update is kept only if its cost is finite
    final_ok = ok & jnp.isfinite(shooting_cost(p, us, analytic))
    us = jnp.where(final_ok, us, last)
    return us, costs


def _multiple_shooting_residuals(z, args):
    problem, xs_ref, penalty = args
    model, dt = problem.model, problem.dt
    dxs, us = z
    xs = jax.vmap(lambda x, d: state_integrate(model, x, d))(xs_ref, dxs)

    def run(x, u):
        r, w = problem.running.residual(model, x, u)
        return jnp.sqrt(dt * w) * r

    def defect(x, u, x1):
        return state_difference(model, x1, step(model, x, u, dt, problem.dynamics))

    rT, wT = problem.terminal.residual(model, xs[-1], None)
    sp = jnp.sqrt(penalty)
    return (
        jax.vmap(run)(xs[:-1], us),
        jnp.sqrt(wT) * rT,
        sp * state_difference(model, xs[0], problem.x0),
        sp * jax.vmap(defect)(xs[:-1], us, xs[1:]),
    )


@eqx.filter_jit
def multiple_shooting(
    problem: Problem,
    xs: Array | None = None,
    us: Array | None = None,
    *,
    penalties: Sequence[float] = (1e2, 1e4, 1e6, 1e8),
    rtol: float = 1e-10,
    atol: float = 1e-10,
    max_steps: int = 200,
) -> tuple[Array, Array, dict[str, Any]]:
    """Direct multiple shooting as nonlinear least squares, solved by Levenberg-Marquardt
    (``optimistix.LevenbergMarquardt``).

    Decision variables: the states as tangent increments ``dx_t`` around the initial guess
    ``xs`` (so they stay on the configuration manifold, ``x_t = xs_t ⊕ dx_t``) and the controls.
    Residuals: ``sqrt(dt W) r(x_t, u_t)``, ``sqrt(W_T) r_T(x_T)`` and the dynamics defects
    ``sqrt(ρ) (f(x_t, u_t) ⊖ x_{t+1})``, ``sqrt(ρ) (x0 ⊖ x_0)``: a quadratic penalty on the
    continuity constraints, whose solution tends to the constrained optimum as ``ρ`` grows
    (error ``O(1/ρ)``). ``ρ`` runs through ``penalties``, each solve warm-started from the
    previous one (continuation; a large ``ρ`` from the start makes Levenberg-Marquardt crawl).
    The residual Jacobians are forward-mode autodiff of the residuals, i.e. the analytic
    ``custom_jvp`` of :func:`step` for the dynamics. Dense linear algebra (QR): small problems.

    Control bounds are not handled (Levenberg-Marquardt is unconstrained): a problem with a
    finite ``u_lower`` / ``u_upper`` fails a value check (use :func:`fddp`, whose box-FDDP
    honours them, or :func:`gradient_shooting`).

    **Returns:** ``(xs (T+1, nx), us (T, nu), info)`` with ``info["steps"]`` and
    ``info["success"]`` per penalty.
    """
    import optimistix as optx

    T, nx, nu = problem.horizon, problem.x0.shape[-1], problem.nu
    dtype = jnp.asarray(problem.x0).dtype
    xs_ref = jnp.broadcast_to(problem.x0, (T + 1, nx)) if xs is None else xs
    us = jnp.zeros((T, nu), dtype) if us is None else us
    if problem.u_lower is not None or problem.u_upper is not None:
        us = value_checks.error_if(
            us,
            _boxed(problem),
            "multiple_shooting: the problem has finite control bounds (u_lower / u_upper), "
            "which multiple shooting does not handle; use fddp (box-FDDP) or gradient_shooting",
        )
    ndx = 2 * problem.model.nv
    solver = optx.LevenbergMarquardt(rtol=rtol, atol=atol)

    def solve(z, penalty):
        sol = optx.least_squares(
            _multiple_shooting_residuals,
            solver,
            z,
            args=(problem, xs_ref, penalty),
            max_steps=max_steps,
            throw=False,
        )
        ok = sol.result == optx.RESULTS.successful
        return sol.value, (sol.stats["num_steps"], ok)

    z0 = (jnp.zeros((T + 1, ndx), dtype), us)
    (dxs, us), (steps, ok) = jax.lax.scan(solve, z0, jnp.asarray(penalties, dtype))
    xs = jax.vmap(lambda x, d: state_integrate(problem.model, x, d))(xs_ref, dxs)
    return xs, us, dict(steps=steps, success=ok)

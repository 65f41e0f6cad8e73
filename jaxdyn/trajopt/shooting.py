"""Gradient-based single shooting with optax: the first-order baseline of the DDP solvers.

The controls ``U`` are the decision variables; the cost ``J(U) = Σ_t dt l(x_t, u_t) +
l_T(x_T)`` of the rollout from ``x0`` is differentiated in reverse mode through
:func:`jaxdyn.trajopt.dynamics.step` (whose ``custom_jvp`` uses the analytic step Jacobians;
``jax.grad`` transposes it) and minimised by an optax optimiser for a fixed number of steps,
controls projected onto their bounds after each step. One ``lax.scan``, jit-compiled,
``jax.vmap``-able.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .ddp import trajectory_cost
from .dynamics import step, step_plain

__all__ = ["gradient_shooting", "shooting_cost"]


def shooting_cost(problem, us, analytic: bool = True):
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
def gradient_shooting(problem, optimizer, steps: int, us=None, analytic: bool = True):
    """Minimise ``J(U)`` with ``optimizer`` (an ``optax.GradientTransformation``) for
    ``steps`` steps from ``us`` (zeros by default). Returns ``(us, costs (steps,))``, the
    costs before each step; a non-finite cost stops the updates (the last finite controls are
    returned and the remaining costs are NaN)."""
    import optax

    p = problem.with_bounds()
    lo, hi = p.bounds()
    if us is None:
        us = jnp.zeros((problem.horizon, problem.nu), jnp.asarray(problem.x0).dtype)
    vg = jax.value_and_grad(lambda u: shooting_cost(p, u, analytic))
    state = optimizer.init(us)

    def body(carry, _):
        us, state, ok = carry
        cost, g = vg(us)
        ok = ok & jnp.isfinite(cost) & jnp.all(jnp.isfinite(g))
        upd, new_state = optimizer.update(g, state, us)
        new_us = jnp.clip(optax.apply_updates(us, upd), lo, hi)
        us = jnp.where(ok, new_us, us)
        state = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new_state, state)
        return (us, state, ok), jnp.where(ok, cost, jnp.nan)

    (us, _, _), costs = jax.lax.scan(body, (us, state, jnp.asarray(True)), None, length=steps)
    return us, costs

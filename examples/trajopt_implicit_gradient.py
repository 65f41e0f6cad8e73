"""Gradient of an optimal trajectory with respect to the model's parameters, by implicit
differentiation of the optimality conditions.

A double pendulum (example-robot-data, or the two-link chain of ``trajopt_swingup.py``) moves
from ``q = (0.3, -0.2)`` to ``q = (1.4, -0.6)`` in 0.4 s (FDDP, 40 Euler steps). The loss is
the optimal control effort ``L = Σ_t |u*_t|²``; its gradient with respect to the two link
masses and the initial state comes from
:func:`jaxdyn.trajopt.implicit.solve_differentiable` (implicit function theorem on
``∇_U J = 0``: one conjugate-gradient solve with Hessian-vector products, no differentiation
through the solver's iterations) and is checked against central finite differences of
re-solved problems. Saves ``examples/figures/trajopt_implicit_gradient.mp4`` (the optimal
motion whose effort is differentiated) and ``trajopt_implicit_gradient_cost.png`` (FDDP's cost
per iteration).

Run: ``python examples/trajopt_implicit_gradient.py``; a few minutes on a laptop CPU, mostly
compilation.
"""

import equinox as eqx
import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from trajopt_swingup import load, scene  # noqa: E402

from jaxdyn.trajopt import costs as C  # noqa: E402
from jaxdyn.trajopt import ddp  # noqa: E402
from jaxdyn.trajopt.implicit import solve_differentiable  # noqa: E402

from _outputs import save_solution  # noqa: E402


def main():
    model = load().with_armature(0.01)
    x0 = jnp.array([0.3, -0.2, 0.0, 0.0])
    goal = jnp.array([1.4, -0.6, 0.0, 0.0])
    running = C.Cost(
        (
            C.Term(C.StateRegularization(goal), 1e-1),
            C.Term(C.ControlRegularization(jnp.zeros(2)), 1e-3),
        )
    )
    terminal = C.Cost((C.Term(C.StateRegularization(goal), 1e2),))
    problem = ddp.Problem(model, x0, running, terminal, 0.01, 40)

    def loss(mass, x0):
        p = eqx.tree_at(lambda p: (p.model.mass, p.x0), problem, (mass, x0))
        us = solve_differentiable(p, th_stop=1e-20, max_iter=200)
        return jnp.sum(us**2)

    # the loss first: its program (the solve) is the smaller of the two compiled here
    f = jax.jit(loss)
    print(f"L = {float(f(model.mass, x0)):.8f}", flush=True)
    g_mass, g_x0 = jax.jit(jax.grad(loss, (0, 1)))(model.mass, x0)
    h = 1e-5
    fd_mass = np.array(
        [
            (f(model.mass.at[i].add(h), x0) - f(model.mass.at[i].add(-h), x0)) / (2 * h)
            for i in range(2)
        ]
    )
    fd_x0 = np.array(
        [
            (f(model.mass, x0.at[i].add(h)) - f(model.mass, x0.at[i].add(-h))) / (2 * h)
            for i in range(4)
        ]
    )
    print("dL/d(mass)   implicit:", np.array2string(np.asarray(g_mass), precision=8))
    print("             central differences:", np.array2string(fd_mass, precision=8))
    print("dL/d(x0)     implicit:", np.array2string(np.asarray(g_x0), precision=8))
    print("             central differences:", np.array2string(fd_x0, precision=8))
    scale = max(1.0, float(np.max(np.abs(fd_mass))), float(np.max(np.abs(fd_x0))))
    err = max(
        np.max(np.abs(np.asarray(g_mass) - fd_mass)), np.max(np.abs(np.asarray(g_x0) - fd_x0))
    )
    print(f"max difference {err:.2e} (relative {err / scale:.1e})")
    assert err / scale < 1e-6, "implicit gradient disagrees with finite differences"
    res = ddp.fddp(problem, th_stop=1e-20, max_iter=200)  # the solution differentiated above
    save_solution(
        lambda: scene(model),
        res,
        "trajopt_implicit_gradient",
        float(problem.dt),
        "double pendulum, the solution differentiated: cost per iteration",
    )


if __name__ == "__main__":
    main()

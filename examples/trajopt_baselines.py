"""FDDP against its baselines on one small problem: direct multiple shooting by
Levenberg-Marquardt (optimistix) and gradient-based single shooting (optax Adam).

The double pendulum of ``trajopt_swingup.py`` moves from ``q = (0.3, -0.2)`` to
``q = (1.4, -0.6)`` in 0.4 s (40 Euler steps). Solved by

* :func:`jaxdyn.trajopt.fddp` (second order in the controls, Riccati recursion);
* :func:`jaxdyn.trajopt.multiple_shooting`: states and controls as unknowns, dynamics defects
  as penalised residuals (continuation ρ = 1e2 ... 1e8), Levenberg-Marquardt with the analytic
  step Jacobians;
* :func:`jaxdyn.trajopt.gradient_shooting`: Adam on the single-shooting cost, 500 steps.

Prints iterations, solve time and final cost of each; checks that multiple shooting reaches
FDDP's optimum (controls to 1e-5, the penalty's O(1/ρ) error) and that Adam's cost is above it.
Saves ``examples/figures/trajopt_baselines.mp4`` (FDDP's motion) and
``trajopt_baselines_cost.png`` (FDDP's cost per iteration beside Adam's per step).

Run: ``python examples/trajopt_baselines.py``; a few minutes on a laptop CPU, mostly
compilation.
"""

import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from trajopt_swingup import load, scene  # noqa: E402

from jaxdyn import trajopt as to  # noqa: E402

from _outputs import save_solution  # noqa: E402


def timed(fn):
    jax.block_until_ready(fn())  # compile
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - t0


def main():
    model = load().with_armature(0.01)
    x0 = jnp.array([0.3, -0.2, 0.0, 0.0])
    goal = jnp.array([1.4, -0.6, 0.0, 0.0])
    running = to.Cost(
        (
            to.Term(to.StateRegularization(goal), 1e-1),
            to.Term(to.ControlRegularization(jnp.zeros(2)), 1e-3),
        )
    )
    terminal = to.Cost((to.Term(to.StateRegularization(goal), 1e2),))
    problem = to.Problem(model, x0, running, terminal, 0.01, 40)

    # each method's row as soon as it is solved
    res, t_fddp = timed(lambda: to.fddp(problem, max_iter=200))
    to.check(res, allow_max_iter=False)
    print(f"{'method':>34} {'iterations':>10} {'ms':>8} {'final cost':>14}")
    print(f"{'FDDP':>34} {int(res.iterations):10d} {t_fddp * 1e3:8.1f} {float(res.cost):14.10f}")
    (xs_ms, us_ms, info), t_ms = timed(lambda: to.multiple_shooting(problem))
    cost_ms = float(to.trajectory_cost(problem, xs_ms, us_ms))
    print(f"{'multiple shooting, LM (optimistix)':>34} {int(np.sum(info['steps'])):10d} "
          f"{t_ms * 1e3:8.1f} {cost_ms:14.10f}")  # fmt: skip
    (us_adam, costs), t_adam = timed(lambda: to.gradient_shooting(problem, optax.adam(0.3), 500))
    cost_adam = float(to.trajectory_cost(problem, to.rollout(problem, us_adam), us_adam))
    print(f"{'single shooting, Adam (optax)':>34} {500:10d} {t_adam * 1e3:8.1f} {cost_adam:14.10f}")
    du = float(jnp.max(jnp.abs(us_ms - res.us)))
    print(f"multiple shooting vs FDDP: controls differ by {du:.1e}; defects max "
          f"{float(jnp.max(jnp.abs(xs_ms - to.rollout(problem, us_ms)))):.1e}")  # fmt: skip
    assert bool(np.all(info["success"])), info
    assert du < 1e-5, du
    assert cost_adam >= float(res.cost) - 1e-12
    save_solution(
        lambda: scene(model),
        res,
        "trajopt_baselines",
        float(problem.dt),
        "double pendulum, q (0.3, -0.2) -> (1.4, -0.6): cost per iteration",
        others={"single shooting, Adam (optax)": np.asarray(costs)},
    )


if __name__ == "__main__":
    main()

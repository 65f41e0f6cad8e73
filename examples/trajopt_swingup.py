"""Double-pendulum swing-up with torque limits: box-FDDP through the analytic step Jacobians.

The double pendulum of example-robot-data (falling back to a two-link chain written here when
the package is missing) starts hanging down, ``q = (π, 0)``, at rest, and must reach the
upright ``q = (0, 0)`` at rest after 1.5 s (150 Euler steps of 10 ms) with both torques
limited to ``|u| <= 0.6`` N m, too weak to lift it directly: it has to swing. Costs: running
``1/2 |x ⊖ x_goal|²_W + 1/2 10^-2 |u|²`` (times dt), terminal ``1/2 10^3 |x_T ⊖ x_goal|²``.

Solved twice by :func:`jaxdyn.trajopt.fddp` (feasibility-driven DDP, Mastalli et al. 2020;
the control bounds by box-FDDP, Tassa, Mansard & Todorov 2014): with the
analytic derivatives of :func:`jaxdyn.trajopt.dynamics.step_derivatives` (FDSVA partials and
the integrate Jacobians) and with ``derivatives="autodiff"`` (forward-mode autodiff of the
plain step). Prints iterations, solve time, compile time and final cost of each, checks that
both converged to the same trajectory, that the torques respect the bounds and that the
pendulum ends upright, and saves ``examples/figures/trajopt_swingup.png`` (angles and torques),
``trajopt_swingup_cost.png`` (cost per iteration) and ``trajopt_swingup.mp4`` (the motion).

Run: ``python examples/trajopt_swingup.py [--verbose]``; a minute or two on a laptop CPU,
mostly compilation.
"""

import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn import robots  # noqa: E402
from jaxdyn.trajopt import costs as C  # noqa: E402
from jaxdyn.trajopt import ddp  # noqa: E402

from _outputs import save_solution  # noqa: E402

FIG = Path(__file__).resolve().parent / "figures" / "trajopt_swingup.png"
DT, T, BOUND = 0.01, 150, 0.6

TWO_LINKS = """<robot name="double_pendulum">
  <link name="base_link"/>
  <link name="link1"><inertial><origin xyz="0 0 0.05"/><mass value="0.27"/>
    <inertia ixx="3e-4" iyy="3e-4" izz="1e-5" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="link2"><inertial><origin xyz="0 0 0.1"/><mass value="0.33"/>
    <inertia ixx="1e-3" iyy="1e-3" izz="1e-5" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="joint1" type="revolute"><parent link="base_link"/><child link="link1"/>
    <axis xyz="1 0 0"/><limit lower="-10" upper="10" effort="1" velocity="10"/></joint>
  <joint name="joint2" type="revolute"><parent link="link1"/><child link="link2"/>
    <origin xyz="0 0 0.1"/><axis xyz="1 0 0"/>
    <limit lower="-10" upper="10" effort="1" velocity="10"/></joint>
</robot>"""


def load():
    try:
        return robots.load("double_pendulum")
    except Exception as e:  # example-robot-data missing
        print(f"example-robot-data's double_pendulum unavailable ({e}); using a two-link chain")
        return jaxdyn.load_urdf(TWO_LINKS)


def scene(model):
    """The double pendulum to film (``jaxdyn.viz``): its meshes, or a stick figure of
    ``model``; it hangs below its base, so no ground is drawn."""
    from jaxdyn import viz

    try:
        return viz.Scene.load("double_pendulum", terrain=None)
    except (ValueError, OSError):  # example-robot-data missing: a stick figure
        return viz.Scene.from_model(model, terrain=None)


def swingup_problem():
    """The swing-up from hanging to upright with the box ``|u| <= BOUND`` (box-FDDP);
    ``benchmarks/trajopt_fused_choice.py`` solves it too."""
    model = load().with_armature(0.01)
    goal = jnp.zeros(4)
    x0 = jnp.array([np.pi, 0.0, 0.0, 0.0])
    running = C.Cost(
        (
            C.Term(C.StateRegularization(goal), jnp.array([1.0, 1.0, 0.1, 0.1])),
            C.Term(C.ControlRegularization(jnp.zeros(2)), 1e-2),
        )
    )
    terminal = C.Cost((C.Term(C.StateRegularization(goal), 1e3),))
    lim = BOUND * jnp.ones(2)
    return ddp.Problem(model, x0, running, terminal, DT, T, u_lower=-lim, u_upper=lim)


def main(verbose=False):
    problem = swingup_problem()
    model = problem.model
    goal = np.zeros(4)

    results = {}
    print(f"{'derivatives':>12} {'iterations':>10} {'solve ms':>9} {'ms/iter':>8} "
          f"{'compile s':>9} {'final cost':>16}")  # fmt: skip
    for mode in ("analytic", "autodiff"):
        t0 = time.perf_counter()
        res = jax.block_until_ready(
            ddp.fddp(problem, max_iter=300, derivatives=mode, verbose=verbose)
        )
        first = time.perf_counter() - t0
        best = np.inf
        for _ in range(3):
            t0 = time.perf_counter()
            res = jax.block_until_ready(
                ddp.fddp(problem, max_iter=300, derivatives=mode, verbose=verbose)
            )
            best = min(best, time.perf_counter() - t0)
        ddp.check(res, allow_max_iter=False)
        it = int(res.iterations)
        print(f"{mode:>12} {it:10d} {best * 1e3:9.1f} {best * 1e3 / it:8.2f} "
              f"{first - best:9.1f} {float(res.cost):16.10f}")  # fmt: skip
        results[mode] = res

    a, b = results["analytic"], results["autodiff"]
    # the two derivative modes agree to rounding, so both runs take the same steps
    assert int(a.iterations) == int(b.iterations), (int(a.iterations), int(b.iterations))
    np.testing.assert_allclose(float(a.cost), float(b.cost), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(a.xs), np.asarray(b.xs), atol=1e-6)
    us, xs = np.asarray(a.us), np.asarray(a.xs)
    assert np.all(np.abs(us) <= BOUND + 1e-12), "torque bounds violated"
    saturated = np.mean(np.isclose(np.abs(us), BOUND))
    final_error = float(np.max(np.abs(xs[-1] - np.asarray(goal))))
    assert final_error < 1e-2, f"not upright at the end: |x_T - goal| = {final_error}"
    print(f"final state error {final_error:.2e}; torques at the bound {100 * saturated:.0f}% "
          f"of the time; both derivative modes agree")  # fmt: skip

    save_solution(
        lambda: scene(model),
        a,
        "trajopt_swingup",
        DT,
        "double-pendulum swing-up: cost per iteration",
    )

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no figure")
        return results
    t = DT * np.arange(T + 1)
    fig, ax = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    ax[0].plot(t, xs[:, 0], label="joint 1")
    ax[0].plot(t, xs[:, 1], label="joint 2")
    ax[0].axhline(0.0, color="k", lw=0.5)
    ax[0].set_ylabel("angle (rad)")
    ax[0].legend()
    ax[0].set_title(f"double-pendulum swing-up, box-FDDP ({int(a.iterations)} iterations)")
    ax[1].step(t[:-1], us[:, 0], where="post", label="u1")
    ax[1].step(t[:-1], us[:, 1], where="post", label="u2")
    for s in (-BOUND, BOUND):
        ax[1].axhline(s, color="r", ls="--", lw=0.8)
    ax[1].set_ylabel("torque (N m)")
    ax[1].set_xlabel("time (s)")
    ax[1].legend()
    fig.tight_layout()
    FIG.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIG, dpi=110)
    print(f"saved {FIG}")
    return results


if __name__ == "__main__":
    main(verbose="--verbose" in sys.argv)

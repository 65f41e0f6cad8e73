"""Base motion of a standing quadruped with its feet held by bilateral constraints (FDDP
through ``constrained_aba``).

The bundled quad12 (floating base, 12 actuated joints; ``solo12`` from example-robot-data is
not used so that the example runs without it) stands with bent knees; each foot is attached to
its initial position by a 3D point constraint (:class:`jaxdyn.Connect`, Baumgarte
stabilisation), the dynamics are :class:`jaxdyn.trajopt.ContactDynamics` (jaxdyn's
constrained forward dynamics, derivatives by the implicit function theorem) with an unactuated
base. In 1 s (50 Euler steps of 20 ms) the base must move 6 cm down and 4 cm sideways and stop
there. Running cost: posture and velocity regularisation, small torques; terminal: base
position (weight 10^4) and velocity.

The solves are compiled *quickly* (``fddp(..., compile="quick")``: XLA without LLVM's
optimisation passes): this script solves the problem twice, and the quick compile takes less
than half the default one's time for a solve about three times as long (an MPC loop of such
solves keeps the default).

Prints the iterations and the final cost as soon as the first solve is done, then the time of a
second solve (compiled), the base position error and the largest foot drift
(the constraints hold to the Euler discretisation); checks that FDDP converged, that the base
reached its target to 5 mm and that the feet stayed within 5 mm; saves
``examples/figures/trajopt_quadruped.png`` (base position and joint torques).

Run: ``python examples/trajopt_quadruped.py [--verbose]``; a few minutes on a laptop CPU,
mostly compilation.
"""

import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn import Connect, robots  # noqa: E402
from jaxdyn.algorithms.kinematics import frame_positions_numpy  # noqa: E402
from jaxdyn.trajopt import costs as C  # noqa: E402
from jaxdyn.trajopt import ddp  # noqa: E402
from jaxdyn.trajopt.dynamics import ContactDynamics, FreeDynamics  # noqa: E402

from _outputs import save_solution  # noqa: E402

FIG = Path(__file__).resolve().parent / "figures" / "trajopt_quadruped.png"
FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")
DT, T = 0.02, 50
SHIFT = np.array([0.0, 0.04, -0.06])
#: XLA options of the programs that run once (the checks' kinematics): LLVM's optimisation
#: passes take most of their compile time and save microseconds of run time
ONE_OFF = {"xla_backend_optimization_level": 0}
#: the solves' compile (see the module docstring): "quick" for a problem solved twice
QUICK = "quick"


def shift_problem():
    """``(problem, feet, target)``: quad12 on its four feet (point contacts at their
    positions in the bent-knee start), its base moved by ``SHIFT``; ``feet``: the feet's
    positions, ``target``: the base's; ``benchmarks/trajopt_fused_choice.py`` solves it too."""
    model = robots.load("quad12").with_armature(0.01)
    nv = model.nv
    # the problem's arrays in numpy, each moved to JAX once: eager jax.numpy operations each
    # compile a program in a new process, before the solve's (its first line)
    q0 = np.array(jaxdyn.neutral_configuration(model))
    # bent knees: hips forward, knees back (every leg the same), base 30 cm up
    q0[7:] = np.tile([0.0, 0.7, -1.4], 4)
    q0[2] = 0.30

    # the frames' positions at q0 in numpy (frame_positions_numpy: no program compiled); the
    # checks below compare them with jaxdyn's frame_placement along the solution, its first
    # configuration included
    *feet, base0 = frame_positions_numpy(model, q0, FEET + ("base_link",))
    feet = dict(zip(FEET, feet))
    constraints = tuple(
        Connect(f, "local_world_aligned", target=tuple(float(c) for c in feet[f])) for f in FEET
    )
    B = FreeDynamics.floating_base(model).actuation
    dyn = ContactDynamics(constraints, B, baumgarte=(100.0, 20.0))
    x0 = jax.device_put(np.concatenate([q0, np.zeros(nv)]))
    target = base0 + SHIFT
    w_state = jax.device_put(np.concatenate([np.full(nv, 1e-1), np.full(nv, 1.0)]))
    w_terminal = jax.device_put(np.concatenate([np.zeros(nv), np.full(nv, 10.0)]))
    running = C.Cost(
        (
            C.Term(C.StateRegularization(x0), w_state),
            C.Term(C.ControlRegularization(jax.device_put(np.zeros(nv - 6))), 1e-4),
        )
    )
    terminal = C.Cost(
        (
            C.Term(C.FrameTranslation("base_link", jax.device_put(target)), 1e4),
            C.Term(C.StateRegularization(x0), w_terminal),
        )
    )
    return ddp.Problem(model, x0, running, terminal, DT, T, dyn), feet, target


def main(verbose=False):
    problem, feet, target = shift_problem()
    model = problem.model
    base0 = target - SHIFT

    # the first result as soon as it is known: the first call compiles the solve program (or
    # loads it: jaxdyn's executable cache), the checks below compile a program of their own
    t0 = time.perf_counter()
    res = jax.block_until_ready(ddp.fddp(problem, max_iter=200, verbose=verbose, compile=QUICK))
    first = time.perf_counter() - t0
    ddp.check(res, allow_max_iter=False)
    it = int(res.iterations)
    print(f"FDDP with 4 point contacts: {it} iterations, final cost {float(res.cost):.6f} "
          f"(first call {first:.1f} s, compile included)", flush=True)  # fmt: skip
    t0 = time.perf_counter()
    jax.block_until_ready(ddp.fddp(problem, max_iter=200, verbose=verbose, compile=QUICK))
    solve = time.perf_counter() - t0
    print(f"solve again (compiled, {QUICK}): {solve:.2f} s ({solve * 1e3 / it:.0f} ms/iteration)")

    # the frames' positions along the solution from one compiled program (one per frame when
    # called eagerly), compiled without LLVM's optimisation passes (ONE_OFF)
    def positions(xs):
        qs = xs[:, : model.nq]
        frame = FEET + ("base_link",)
        return [jax.vmap(lambda q, f=f: jaxdyn.frame_placement(model, q, f).p)(qs) for f in frame]

    *path, base = (np.asarray(p) for p in jax.jit(positions, compiler_options=ONE_OFF)(res.xs))
    drift = max(float(np.max(np.linalg.norm(p - feet[f], axis=1))) for f, p in zip(FEET, path))
    err = float(np.linalg.norm(base[-1] - target))
    print(f"base target error {1e3 * err:.2f} mm; largest foot drift {1e3 * drift:.2f} mm")
    assert err < 5e-3, f"base missed its target by {err} m"
    assert drift < 5e-3, f"feet drifted by {drift} m"

    def scene():
        from jaxdyn import viz

        return viz.Scene.from_model(model)

    save_solution(scene, res, "trajopt_quadruped", DT, "quad12, feet held: cost per iteration")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no figure")
        return res
    t = DT * np.arange(T + 1)
    us = np.asarray(res.us)
    fig, ax = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for i, lab in enumerate("xyz"):
        ax[0].plot(t, base[:, i] - base0[i], label=f"base {lab}")
        ax[0].axhline(SHIFT[i], color="k", lw=0.5, ls="--")
    ax[0].set_ylabel("base displacement (m)")
    ax[0].legend(fontsize=8)
    ax[0].set_title(f"quad12, feet held, FDDP ({it} iterations)")
    ax[1].plot(t[:-1], us)
    ax[1].set_ylabel("joint torques (N m)")
    ax[1].set_xlabel("time (s)")
    fig.tight_layout()
    FIG.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIG, dpi=110)
    print(f"saved {FIG}")
    return res


if __name__ == "__main__":
    main(verbose="--verbose" in sys.argv)

"""Reaching around an obstacle with the bundled 7-DoF arm (FDDP, analytic derivatives).

The end effector ``ee`` starts at rest in a bent posture and must reach, after 1 s (100 Euler
steps of 10 ms), the point that turning the first joint by 1.4 rad would bring it to, at rest.
A sphere of radius 0.1 m sits on the way (where turning the first joint by 0.7 rad would put
the end effector); the end effector and the wrist (``hand``) keep a 3 cm clearance through the
penalty :class:`jaxdyn.trajopt.costs.SphereAvoidance`, and the joints stay inside their URDF
limits through :class:`~jaxdyn.trajopt.costs.JointLimits` (quadratic penalties). Running cost:
posture and velocity regularisation, control regularisation around gravity compensation at the
start, both penalties; terminal: end-effector position (weight 10^4) and velocity.

:func:`jaxdyn.trajopt.fddp` from the start state repeated and gravity-compensating controls,
its program compiled *quickly* (``compile="quick"``: XLA without LLVM's optimisation, for a
problem solved twice; the default compile takes longer and solves about three times faster:
``docs/trajopt.md``). Prints the iterations and the final cost as soon as the first solve is
done, then the time of a second solve (compiled), the final position error and the smallest
clearance; checks that the solver converged, that the end effector ends within 1 cm of the
target and that the clearance is kept (to 5 mm); saves
``examples/figures/trajopt_arm_reach.png`` (end-effector path around the sphere, seen from
above and from the side).

Run: ``python examples/trajopt_arm_reach.py [--verbose]``; a minute or two on a laptop CPU,
mostly compilation.
"""

import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn import robots  # noqa: E402
from jaxdyn.algorithms.kinematics import frame_positions_numpy  # noqa: E402
from jaxdyn.algorithms.rnea import gravity_forces_numpy  # noqa: E402
from jaxdyn.trajopt import costs as C  # noqa: E402
from jaxdyn.trajopt import ddp  # noqa: E402

from _outputs import save_solution  # noqa: E402

FIG = Path(__file__).resolve().parent / "figures" / "trajopt_arm_reach.png"
DT, T = 0.01, 100
RADIUS, CLEARANCE = 0.10, 0.03
#: XLA options of the programs that run once (the checks' kinematics): LLVM's optimisation
#: passes take most of their compile time and save microseconds of run time
ONE_OFF = {"xla_backend_optimization_level": 0}


#: the arm's start posture
Q_A = np.array([0.0, 0.3, 0.0, -1.5, 0.0, 1.8, 0.0])


def reach_problem():
    """``(problem, us0, target, center)``: the reach (arm7, joint limits, the obstacle sphere
    around ``center`` avoided by the hand and the end effector) and its initial controls
    (gravity compensation at the start); ``benchmarks/trajopt_fused_choice.py`` solves it too."""
    model = robots.load("arm7").with_armature(0.01)
    nv = model.nv
    q_a = Q_A
    # target, obstacle centre and gravity compensation at the start in numpy, and the
    # problem's arrays moved to JAX once each: a compiled program (or eager jax.numpy
    # operations, one program each) would compile before the solve's, before its first line
    turned = [q_a + np.eye(nv)[0] * a for a in (1.4, 0.7)]
    target, center = (frame_positions_numpy(model, q, ["ee"])[0] for q in turned)
    u_g = jax.device_put(gravity_forces_numpy(model, q_a))
    x0 = jax.device_put(np.concatenate([q_a, np.zeros(nv)]))
    limits = C.JointLimits.from_model(model, margin=0.05)
    avoid = tuple(
        C.Term(C.SphereAvoidance(f, jax.device_put(center), RADIUS + CLEARANCE), 1e4)
        for f in ("ee", "hand")
    )
    w_state = jax.device_put(np.concatenate([np.full(nv, 1e-2), np.full(nv, 1e-1)]))
    w_terminal = jax.device_put(np.concatenate([np.zeros(nv), np.ones(nv)]))
    running = C.Cost(
        (
            C.Term(C.StateRegularization(x0), w_state),
            C.Term(C.ControlRegularization(u_g), 1e-3),
            C.Term(limits, 1e3),
        )
        + avoid
    )
    terminal = C.Cost(
        (
            C.Term(C.FrameTranslation("ee", jax.device_put(target)), 1e4),
            C.Term(C.StateRegularization(x0), w_terminal),
        )
        + avoid
    )
    us0 = jax.device_put(np.broadcast_to(np.asarray(u_g), (T, nv)))
    return ddp.Problem(model, x0, running, terminal, DT, T), us0, target, center


def main(verbose=False):
    problem, us0, target, center = reach_problem()
    model = problem.model
    nv = model.nv
    q_a = Q_A

    def ee(q):
        return jaxdyn.frame_placement(model, q, "ee").p

    # the first result as soon as it is known: the first call compiles the solve program (or
    # loads it: jaxdyn's executable cache), the checks below compile a program of their own
    t0 = time.perf_counter()
    res = jax.block_until_ready(
        ddp.fddp(problem, us=us0, max_iter=300, verbose=verbose, compile="quick")
    )
    first = time.perf_counter() - t0
    ddp.check(res, allow_max_iter=False)
    it = int(res.iterations)
    print(f"FDDP: {it} iterations, final cost {float(res.cost):.6f} (first call {first:.1f} s, "
          "compile included)", flush=True)  # fmt: skip
    t0 = time.perf_counter()
    jax.block_until_ready(ddp.fddp(problem, us=us0, max_iter=300, verbose=verbose, compile="quick"))
    solve = time.perf_counter() - t0
    print(
        f"solve again (compiled, quick): {solve * 1e3:.0f} ms ({solve * 1e3 / it:.1f} ms/iteration)"
    )

    # the naive motion, turning joint 1 alone, would drive the end effector through the sphere
    q_naive = q_a[None] + np.linspace(0, 1.4, 50)[:, None] * np.eye(nv)[0]
    path, hand, naive = (
        np.asarray(p)
        for p in jax.jit(
            lambda xs, qn: (
                jax.vmap(ee)(xs[:, :nv]),
                jax.vmap(lambda q: jaxdyn.frame_placement(model, q, "hand").p)(xs[:, :nv]),
                jax.vmap(ee)(qn),
            ),
            compiler_options=ONE_OFF,
        )(res.xs, q_naive)
    )
    c = np.asarray(center)
    clearance = (
        min(np.min(np.linalg.norm(path - c, axis=1)), np.min(np.linalg.norm(hand - c, axis=1)))
        - RADIUS
    )
    err = float(np.linalg.norm(path[-1] - np.asarray(target)))
    naive_clearance = float(np.min(np.linalg.norm(naive - c, axis=1))) - RADIUS
    print(f"final end-effector error {1e3 * err:.2f} mm; smallest clearance to the sphere "
          f"{1e3 * clearance:.1f} mm (asked {1e3 * CLEARANCE:.0f} mm; turning joint 1 alone: "
          f"{1e3 * naive_clearance:.0f} mm)")  # fmt: skip
    assert err < 1e-2, f"target missed by {err} m"
    assert clearance > CLEARANCE - 5e-3, f"clearance {clearance} m"
    assert naive_clearance < 0, "the obstacle does not block the naive motion"

    def scene():  # the arm, the obstacle (red) and the target (green)
        from jaxdyn import viz

        sc = viz.Scene.from_model(model)
        sc.geoms.append(
            viz.Geom(-1, "sphere", (RADIUS,), p=np.asarray(c), rgba=(0.9, 0.2, 0.2, 0.5))
        )
        sc.geoms.append(
            viz.Geom(-1, "sphere", (0.02,), p=np.asarray(target), rgba=(0.2, 0.8, 0.3, 1))
        )
        return sc

    save_solution(
        scene, res, "trajopt_arm_reach", DT, "arm7 reach around a sphere: cost per iteration"
    )

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no figure")
        return res
    fig, ax = plt.subplots(1, 2, figsize=(9, 4))
    for a, (i, j), name in zip(ax, ((0, 1), (0, 2)), ("top view (x, y)", "side view (x, z)")):
        a.add_patch(plt.Circle((c[i], c[j]), RADIUS, color="r", alpha=0.3, label="obstacle"))
        a.plot(path[:, i], path[:, j], "b.-", ms=3, label="end effector")
        a.plot(hand[:, i], hand[:, j], "g.-", ms=2, alpha=0.6, label="hand")
        a.plot(*np.asarray(target)[[i, j]], "k*", ms=12, label="target")
        a.set_aspect("equal")
        a.set_title(name)
    ax[0].legend(fontsize=8)
    fig.suptitle(f"arm7 reach around a sphere, FDDP ({it} iterations)")
    fig.tight_layout()
    FIG.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIG, dpi=110)
    print(f"saved {FIG}")
    return res


if __name__ == "__main__":
    main(verbose="--verbose" in sys.argv)

"""Does the one-kernel FDDP program (``trajopt_fused_loops``) pay for its compile? The fused and
the unfused solve program of one problem, side by side in one process, interleaved.

Usage: ``python benchmarks/trajopt_fused_choice.py [--rounds 7] [problem ...]`` (default:
every problem below, each in a fresh child process, one after another).

Problems (float64, FDDP, default settings of a fresh process: no ``XLA_FLAGS``, no pinning;
the persistent compilation caches off, so that compiles are compiles):

* ``arm7_T50``, ``arm7_T100``, ``arm7_T200``, ``ur5_T100``, ``quad12_T50``: the joint-space
  reaches of ``benchmarks/trajopt.py`` (``quad12`` floating in space);
* ``swingup_box``: ``examples/trajopt_swingup.py``'s double pendulum with control bounds
  (box-FDDP), T = 150;
* ``arm_reach``: ``examples/trajopt_arm_reach.py`` (arm7, joint limits, obstacle avoidance,
  an end-effector target), T = 100;
* ``quadruped_contact``: ``examples/trajopt_quadruped.py`` (quad12, four point contacts,
  :class:`~jaxdyn.trajopt.ContactDynamics`), T = 50.

In each child, both programs called the same way (``jaxdyn.trajopt.ddp._solve_fused.call(on,
...)`` with the arguments ``fddp`` passes: ``on=False`` the unfused program, ``on=True`` the
fused one, compiled in this process): the first solve of each (its compile: the first call's
CPU time less a solve's), then ``--rounds`` rounds of one unfused and one fused solve,
alternately: medians of CPU time (``time.process_time``, every thread's) and wall time per
solve; iterations and final costs of both (asserted equal to 1e-9). One JSON line per problem.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

PROBLEMS = (
    "arm7_T50",
    "arm7_T100",
    "arm7_T200",
    "ur5_T100",
    "quad12_T50",
    "swingup_box",
    "arm_reach",
    "quadruped_contact",
)


def build(name):
    """``(problem, us0 or None, max_iter)`` of a problem named as in the module."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    from jaxdyn.trajopt import costs as C
    from jaxdyn.trajopt import ddp

    if name.split("_T")[0] in ("arm7", "ur5", "quad12"):
        from _trajopt_problems import MAX_ITER, load_model
        from trajopt import single_problem

        robot, T = name.split("_T")
        model, _, _ = load_model(robot)
        return single_problem(model, int(T), 0), None, MAX_ITER
    sys.path.insert(0, str(ROOT / "examples"))
    from jaxdyn import robots

    if name == "swingup_box":
        from trajopt_swingup import BOUND, DT, T, load  # pyright: ignore[reportMissingImports]

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
        return (
            ddp.Problem(model, x0, running, terminal, DT, T, u_lower=-lim, u_upper=lim),
            None,
            300,
        )
    if name == "arm_reach":
        from trajopt_arm_reach import CLEARANCE, DT, RADIUS, T  # pyright: ignore[reportMissingImports]

        from jaxdyn.algorithms.kinematics import frame_positions_numpy
        from jaxdyn.algorithms.rnea import gravity_forces_numpy

        model = robots.load("arm7").with_armature(0.01)  # pyright: ignore[reportAttributeAccessIssue]
        nv = model.nv
        q_a = np.array([0.0, 0.3, 0.0, -1.5, 0.0, 1.8, 0.0])
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
        return ddp.Problem(model, x0, running, terminal, DT, T), us0, 300
    if name == "quadruped_contact":
        from trajopt_quadruped import DT, FEET, SHIFT, T  # pyright: ignore[reportMissingImports]

        from jaxdyn import Connect
        from jaxdyn.algorithms.kinematics import frame_positions_numpy
        from jaxdyn.trajopt.dynamics import ContactDynamics, FreeDynamics

        model = robots.load("quad12").with_armature(0.01)  # pyright: ignore[reportAttributeAccessIssue]
        nv = model.nv
        q0 = np.array(jaxdyn_neutral(model))
        q0[7:] = np.tile([0.0, 0.7, -1.4], 4)
        q0[2] = 0.30
        *feet, base0 = frame_positions_numpy(model, q0, FEET + ("base_link",))
        feet = dict(zip(FEET, feet))
        constraints = tuple(
            Connect(f, "local_world_aligned", target=tuple(float(c) for c in feet[f])) for f in FEET
        )
        B = FreeDynamics.floating_base(model).actuation
        dyn = ContactDynamics(constraints, B, baumgarte=(100.0, 20.0))
        x0 = jax.device_put(np.concatenate([q0, np.zeros(nv)]))
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
                C.Term(C.FrameTranslation("base_link", jax.device_put(base0 + SHIFT)), 1e4),
                C.Term(C.StateRegularization(x0), w_terminal),
            )
        )
        return ddp.Problem(model, x0, running, terminal, DT, T, dyn), None, 200
    raise ValueError(f"unknown problem {name!r}; known: {PROBLEMS}")


def jaxdyn_neutral(model):
    import jaxdyn

    return jaxdyn.neutral_configuration(model)


def child(name, rounds):
    import jax
    import numpy as np

    from jaxdyn.trajopt import ddp

    problem, us0, max_iter = build(name)
    p, xs, us = ddp._start(problem, None, us0, False)
    params, static = ddp._options(dict(max_iter=max_iter), xs.dtype)
    flag = ddp._as_array(False, bool)

    def unfused():  # the same call as fused's: only the program differs
        return ddp._solve_fused.call(False, p, xs, us, flag, params, **static)

    def fused():
        return ddp._solve_fused.call(True, p, xs, us, flag, params, **static)

    def timed(f):
        c0, w0 = time.process_time(), time.perf_counter()
        out = jax.block_until_ready(f())
        return time.process_time() - c0, time.perf_counter() - w0, out

    first_u = timed(unfused)
    first_f = timed(fused)
    assert ddp._solve_fused.usable(jax.tree.leaves((p, xs, us)), True)
    rows = []
    for _ in range(rounds):
        rows.append((timed(unfused), timed(fused)))
    ru, rf = rows[-1][0][2], rows[-1][1][2]
    cu, cf = float(ru.cost), float(rf.cost)
    assert int(ru.iterations) == int(rf.iterations), (ru.iterations, rf.iterations)
    assert abs(cu - cf) <= 1e-9 * abs(cu), (cu, cf)

    def med(i, j):
        return float(np.median([r[i][j] for r in rows]))

    out = dict(
        name=name,
        iters=int(ru.iterations),
        status=int(ru.status),
        cost=cu,
        rel=abs(cu - cf) / abs(cu),
        unfused_cpu=med(0, 0),
        unfused_wall=med(0, 1),
        fused_cpu=med(1, 0),
        fused_wall=med(1, 1),
        fused_wins_cpu=sum(r[1][0] < r[0][0] for r in rows),
        compile_unfused_cpu=first_u[0] - med(0, 0),
        compile_fused_cpu=first_f[0] - med(1, 0),
        rounds=rounds,
        load=os.getloadavg()[0],
    )
    out["ratio_cpu"] = out["fused_cpu"] / out["unfused_cpu"]
    print(json.dumps(out), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("problems", nargs="*", default=list(PROBLEMS))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args(argv)
    if a.child:
        return child(a.problems[0], a.rounds)
    env = dict(os.environ, JAXDYN_COMPILATION_CACHE="0")
    for name in a.problems:
        r = subprocess.run(
            [sys.executable, __file__, "--child", "--rounds", str(a.rounds), name],
            env=env,
            capture_output=True,
            text=True,
        )
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode != 0 or not lines:
            print(json.dumps(dict(name=name, error=r.stderr.strip().splitlines()[-3:])), flush=True)
        else:
            print(lines[-1], flush=True)


if __name__ == "__main__":
    main()

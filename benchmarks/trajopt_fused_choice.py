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

    jax.config.update("jax_enable_x64", True)

    if name.split("_T")[0] in ("arm7", "ur5", "quad12"):
        from _trajopt_problems import MAX_ITER, load_model
        from trajopt import single_problem

        robot, T = name.split("_T")
        model, _, _ = load_model(robot)
        return single_problem(model, int(T), 0), None, MAX_ITER
    sys.path.insert(0, str(ROOT / "examples"))  # the examples' own problems
    if name == "swingup_box":
        from trajopt_swingup import swingup_problem  # pyright: ignore[reportMissingImports]

        return swingup_problem(), None, 300
    if name == "arm_reach":
        from trajopt_arm_reach import reach_problem  # pyright: ignore[reportMissingImports]

        problem, us0, _, _ = reach_problem()
        return problem, us0, 300
    if name == "quadruped_contact":
        from trajopt_quadruped import shift_problem  # pyright: ignore[reportMissingImports]

        return shift_problem()[0], None, 200
    raise ValueError(f"unknown problem {name!r}; known: {PROBLEMS}")


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

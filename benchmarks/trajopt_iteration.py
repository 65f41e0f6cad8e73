"""jaxdyn's FDDP in default settings against Crocoddyl's ``SolverFDDP``: time per iteration,
interleaved in one process, and the CPU time of the first solve's compile.

    python benchmarks/trajopt_iteration.py                       # ur5, T = 100
    python benchmarks/trajopt_iteration.py --robot solo12 --horizon 50 --rounds 7

The problem is ``benchmarks/trajopt.py``'s single problem (a reach to a goal posture from a
perturbed start, state and control regularisation, ``th_stop = 1e-9``) on any bundled or
example-robot-data robot (a floating base as ``ActuationModelFloatingBase``). jaxdyn:
``jaxdyn.trajopt.fddp(problem)`` called directly as a user does, in a fresh process (the
persistent compilation cache off, so the first call compiles); its compile time is the
first call's CPU time less a solve's (the unfused program: the switch ``trajopt_fused_loops``
is ``"auto"`` by default, so a child process compiles the fused solve meanwhile; its CPU time
is not this process's). The script waits for that child (``--wait`` seconds at most,
:func:`jaxdyn.backend.fused_programs.wait`), then ``--rounds`` rounds, each one Crocoddyl solve and
one jaxdyn solve, in CPU time (``time.process_time``: the machine may be shared); the
reported ratio is the median over rounds of jaxdyn's time per iteration over Crocoddyl's.
Single-threaded and pinned to one core (``benchmarks/_env.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--robot", default="ur5")
    ap.add_argument("--horizon", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument(
        "--wait", type=float, default=600.0, help="most seconds to wait for the fused program"
    )
    a = ap.parse_args(argv)
    import _env

    _env.single_threaded()
    os.environ.setdefault("JAXDYN_COMPILATION_CACHE", "0")
    import crocoddyl
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    from _trajopt_problems import MAX_ITER, goal_state, make_problem
    from trajopt import load

    import jaxdyn
    from jaxdyn.interop.crocoddyl import to_crocoddyl
    from jaxdyn.trajopt import ddp

    model, pm, conv = load(a.robot)
    rng = np.random.default_rng(a.seed)
    q0 = jaxdyn.integrate(
        model, jaxdyn.neutral_configuration(model), 0.3 * rng.standard_normal(model.nv)
    )
    offset = 0.8 * np.cos(np.arange(model.nv))
    if model.floating_base:
        offset[:6] = (0.3, -0.2, 0.1, 0.0, 0.0, 0.0)
    problem = make_problem(
        model, a.horizon, jnp.concatenate([q0, jnp.zeros(model.nv)]), goal_state(model, q0, offset)
    )

    cp, x0p = to_crocoddyl(problem, pm, conv)
    if hasattr(cp, "nthreads"):
        cp.nthreads = 1
    T, nu = problem.horizon, problem.nu

    def croc():
        s = crocoddyl.SolverFDDP(cp)
        s.th_stop = 1e-9
        t0 = time.process_time()
        s.solve([x0p] * (T + 1), [np.zeros(nu)] * T, MAX_ITER, False, 1e-9)
        return time.process_time() - t0, s.iter + 1, s.cost

    def jx():
        t0 = time.process_time()
        r = jax.block_until_ready(ddp.fddp(problem, max_iter=MAX_ITER))
        return time.process_time() - t0, int(r.iterations), float(r.cost)

    from jaxdyn.backend import fused_programs

    first, _, _ = jx()
    for _ in range(fused_programs.START_AFTER - 1):  # repeated solves start the compile
        jx()
    w0 = time.perf_counter()
    # the default switch trajopt_fused_loops="auto": a child process compiles the fused solve
    # once a structure is solved repeatedly (START_AFTER solves), while the solves run
    # unfused; the rounds time what runs once it is ready
    fused_programs.wait(a.wait)
    waited = time.perf_counter() - w0
    jx()  # loads the fused executable (once)
    rows = [(croc(), jx()) for _ in range(a.rounds)]
    fused = bool(ddp._solve_fused.ready)
    for why in ddp._solve_fused.failed.values():
        print(f"background compile: {why}")
    t_j = float(np.median([j[0] for _, j in rows]))
    (_, it_c, cost_c), (_, it_j, cost_j) = rows[-1]
    ratios = [(j[0] / j[1]) / (c[0] / c[1]) for c, j in rows]
    each = ", ".join(f"{r:.2f}" for r in ratios)
    t_c = float(np.median([c[0] for c, _ in rows]))
    print(
        f"{a.robot}, T = {T}: Crocoddyl {it_c} it, {t_c / it_c * 1e3:.3f} ms/it, cost "
        f"{cost_c:.10g}; jaxdyn default {it_j} it, {t_j / it_j * 1e3:.3f} ms/it, cost "
        f"{cost_j:.10g}; per iteration {np.median(ratios):.2f}x Crocoddyl (median of "
        f"{a.rounds} interleaved rounds, CPU time; rounds {each}); "
        f"first solve's compile {first - t_j:.1f} s of CPU; "
        f"{'fused' if fused else 'unfused'} program timed, after {waited:.1f} s of wall-clock "
        f"waiting for the background compile (switch trajopt_fused_loops "
        f"{jaxdyn.config.get('trajopt_fused_loops')!r}); load average {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

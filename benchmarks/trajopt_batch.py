"""A CPU batch of FDDP problems: jaxdyn's batched routes against Crocoddyl's ``SolverFDDP``
solving the problems one by one, interleaved in one process.

    python benchmarks/trajopt_batch.py                          # 64 UR5 reaches, T = 100
    python benchmarks/trajopt_batch.py --batch 16 --rounds 3 --modes threads

The problems are ``benchmarks/_trajopt_problems.random_problems`` (random start and goal
postures, seed 2) on ``--robot``, ``th_stop = 1e-9``, at most 200 iterations, float64.
Modes (jaxdyn, as a user writes them, in default settings, on every core this process may
use):

* ``vmap``: ``jax.vmap(fddp)(problems)`` called with arrays: on the CPU the members one by
  one in host threads, as ``threads``;
* ``jit_vmap``: ``jax.jit(jax.vmap(fddp))(problems)``: on the CPU the members one after
  another inside the program (``lax.map`` of the unfused one-problem solve, one core; on
  accelerators one batched ``while_loop``, every member iterating until the slowest stops);
* ``threads``: ``solve_batch(problems)``: its default on the CPU, each problem solved by the
  one-problem program (fused into one kernel) in one host thread per core;
* ``sharded``: ``solve_sharded(problems)``: ``lax.map`` on each CPU device (one device unless
  ``JAX_NUM_CPU_DEVICES`` says more);
* ``batched``: ``solve_sharded(problems, per_device="vmap")``: the batched ``while_loop`` (what
  ``jax.jit(jax.vmap(fddp))`` runs on accelerators; every member iterates until the slowest
  stops);
* ``rounds``: ``solve_batch(problems, method="rounds")``: batched rounds of 10 iterations,
  the running members compacted.

After one call of each (the compile; its CPU time is reported), ``--rounds`` rounds of one
Crocoddyl pass over the batch (one thread) and one call of each mode, each timed in CPU time
(``time.process_time``, all threads) and wall time. Reported: medians, and the ratios of
Crocoddyl's median time to each mode's (problems per second relative to Crocoddyl). On a shared
machine only the CPU-time ratios compare the work done; the wall-time ratio is what a user
sees on an idle machine when the mode uses its cores in parallel. Every member's iterations
and final cost are checked against Crocoddyl's (cost to 1e-9 relative).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # this checkout's jaxdyn
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--robot", default="ur5")
    ap.add_argument("--horizon", type=int, default=100)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--modes", default="vmap,threads,jit_vmap,rounds")
    a = ap.parse_args(argv)
    import crocoddyl
    import equinox as eqx
    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    import pinocchio as pin
    from _trajopt_problems import MAX_ITER, load_model, random_problems

    from jaxdyn.interop.crocoddyl import to_crocoddyl
    from jaxdyn.interop.pinocchio import Converter
    from jaxdyn.trajopt import ddp

    model, xml, floating = load_model(a.robot)
    pm = (
        pin.buildModelFromXML(xml, pin.JointModelFreeFlyer())
        if floating
        else (pin.buildModelFromXML(xml))
    )
    conv = Converter(model, pm)
    T, B = a.horizon, a.batch
    stacked = random_problems(model, T, B, 2)
    arrays, static = eqx.partition(stacked, eqx.is_array)
    arrays = jax.tree.map(np.asarray, arrays)
    probs = [eqx.combine(jax.tree.map(lambda x, i=i: x[i], arrays), static) for i in range(B)]
    nu = probs[0].nu
    cps = []
    for p in probs:
        cp, x0p = to_crocoddyl(p, pm, conv)
        cp.nthreads = 1
        cps.append((cp, x0p))

    def croc():
        its, costs = [], []
        for cp, x0p in cps:
            s = crocoddyl.SolverFDDP(cp)
            s.th_stop = 1e-9
            s.solve([x0p] * (T + 1), [np.zeros(nu)] * T, MAX_ITER, False, 1e-9)
            its.append(s.iter + 1)
            costs.append(s.cost)
        return np.array(its), np.array(costs)

    vm = jax.vmap(lambda p: ddp.fddp(p, max_iter=MAX_ITER))
    jit_vm = jax.jit(vm)
    modes = {
        "vmap": lambda: vm(stacked),
        "jit_vmap": lambda: jit_vm(stacked),
        "threads": lambda: ddp.solve_batch(stacked, max_iter=MAX_ITER),
        "rounds": lambda: ddp.solve_batch(stacked, method="rounds", max_iter=MAX_ITER),
        "sharded": lambda: ddp.solve_sharded(stacked, max_iter=MAX_ITER),
        "batched": lambda: ddp.solve_sharded(stacked, per_device="vmap", max_iter=MAX_ITER),
    }
    modes = {k: modes[k] for k in a.modes.split(",")}

    def timed(f):
        c0, w0 = time.process_time(), time.perf_counter()
        r = jax.block_until_ready(f())
        return time.process_time() - c0, time.perf_counter() - w0, r

    _, _, (its_c, cost_c) = timed(croc)
    for name, f in modes.items():
        c, w, r = timed(f)
        its = np.asarray(r.iterations)
        assert np.all(np.asarray(r.status) == 0), (name, np.asarray(r.status))
        assert np.array_equal(its, its_c), (name, its, its_c)
        rel = np.max(np.abs(np.asarray(r.cost) - cost_c) / np.abs(cost_c))
        assert rel < 1e-9, (name, rel)
        print(f"{name}: first call {c:.1f} s CPU ({w:.1f} s wall); cost rel. diff. {rel:.1e}")
    times = {k: [] for k in ["crocoddyl", *modes]}
    for _ in range(a.rounds):
        times["crocoddyl"].append(timed(croc)[:2])
        for name, f in modes.items():
            times[name].append(timed(f)[:2])
    med = {k: np.median(np.array(v), axis=0) for k, v in times.items()}
    c_cpu, c_wall = med["crocoddyl"]
    print(
        f"{a.robot}, T = {T}, {B} problems, iterations {its_c.min()}-{its_c.max()} (sum "
        f"{its_c.sum()}), {len(os.sched_getaffinity(0))} cores allowed, load average "
        f"{os.getloadavg()[0]:.1f}; medians of {a.rounds} interleaved rounds"
    )
    print("| solver | CPU s | wall s | vs Crocoddyl (CPU) | vs Crocoddyl (wall) |")
    print("|---|---:|---:|---:|---:|")
    for k, (cpu, wall) in med.items():
        print(f"| {k} | {cpu:.3f} | {wall:.3f} | {c_cpu / cpu:.2f}x | {c_wall / wall:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

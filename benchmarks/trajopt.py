"""Trajectory optimisation: jaxdyn's FDDP against Crocoddyl's ``SolverFDDP`` (C++, float64) on
the same problems, in one run.

Usage: ``python benchmarks/trajopt.py [--batch 64] [--out benchmarks/RESULTS.md]``

Problems (Euler steps of ``dt = 10 ms``, running cost ``dt (1/2 w_x |x ⊖ x_goal|² + 1/2 w_u
|u|²)``, terminal ``1/2 W |x_T ⊖ x_goal|²``, initial guess ``x0`` repeated and zero controls,
``th_stop = 1e-9``, at most 200 iterations; the models carry armature 0.01, see
:mod:`jaxdyn.interop.crocoddyl`):

* ``arm7``: the bundled 7-DoF arm, full actuation, T = 100, a joint-space reach;
* ``quad12``: the bundled quadruped floating in space (``ActuationModelFloatingBase``: the
  base moves only through the legs), T = 50, a goal posture and base orientation.

For each: Crocoddyl's solve time, iterations and final cost; jaxdyn's (``jaxdyn.trajopt.fddp``
with analytic derivatives, and with ``derivatives="autodiff"``) compile time, solve time,
iterations and final cost; time per iteration. Batch: ``--batch`` arm7 problems with random
goals, Crocoddyl solving them one after the other against one ``jax.vmap``-ed jaxdyn solve
(throughput: problems per second). Single-threaded (benchmarks/_env.py); writes the
``## Trajectory optimisation`` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import _env

_env.single_threaded()
import os  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import crocoddyl  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn.interop.crocoddyl import to_crocoddyl  # noqa: E402
from jaxdyn.interop.pinocchio import Converter  # noqa: E402
from jaxdyn.trajopt import ddp  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _trajopt_problems import (  # noqa: E402
    MAX_ITER,
    goal_state,
    load_model,
    make_problem,
    random_problems,  # noqa: E402
)

from _env import cpu_name, write_section  # noqa: E402

RTOL = 1e-6


def load(name):
    model, xml, floating = load_model(name)
    pm = (
        pin.buildModelFromXML(xml, pin.JointModelFreeFlyer())
        if floating
        else pin.buildModelFromXML(xml)
    )
    return model, pm, Converter(model, pm)


def crocoddyl_solve(problem, pm, conv, repeats=3):
    cp, x0p = to_crocoddyl(problem, pm, conv)
    if hasattr(cp, "nthreads"):
        cp.nthreads = 1
    T, nu = problem.horizon, problem.nu
    best, solver = np.inf, None
    for _ in range(repeats):
        s = crocoddyl.SolverFDDP(cp)
        s.th_stop = 1e-9
        t0 = time.perf_counter()
        ok = s.solve([x0p] * (T + 1), [np.zeros(nu)] * T, MAX_ITER, False, 1e-9)
        best = min(best, time.perf_counter() - t0)
        solver = s
    return dict(time=best, iters=solver.iter + 1, cost=solver.cost, ok=ok)


def jaxdyn_solve(problem, derivatives="analytic", repeats=3, batched=False):
    def f(p):
        return ddp.fddp(p, max_iter=MAX_ITER, derivatives=derivatives)

    fn = jax.jit(jax.vmap(f) if batched else f)
    t0 = time.perf_counter()
    compiled = fn.lower(problem).compile()
    return _timed_solves(lambda: compiled(problem), repeats, time.perf_counter() - t0)


def jaxdyn_fused(problem, repeats=3):
    """``jaxdyn.trajopt.fddp(problem)`` called with arrays (no ``jax.jit`` of one's own) with
    the ``jaxdyn.config`` switch ``trajopt_fused_loops`` on: on the CPU the solve compiled into
    one kernel, per program, in the first call (the default ``"auto"`` compiles it in a child
    process while the first solves run unfused). Compile time: the first call's time less a
    solve's."""
    import jaxdyn

    with jaxdyn.config.override(trajopt_fused_loops=True):
        t0 = time.perf_counter()
        jax.block_until_ready(ddp.fddp(problem, max_iter=MAX_ITER))
        first = time.perf_counter() - t0
        r = _timed_solves(lambda: ddp.fddp(problem, max_iter=MAX_ITER), repeats, 0.0)
    r["compile"] = first - r["time"]
    return r


def _timed_solves(solve, repeats, compile_s, **extra):
    """Best of ``repeats`` calls of ``solve()`` and the last result's iterations, costs and
    statuses (one dict for every jaxdyn row)."""
    best, res = np.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = jax.block_until_ready(solve())
        best = min(best, time.perf_counter() - t0)
    return dict(
        time=best,
        compile=compile_s,
        iters=np.asarray(res.iterations),
        cost=np.asarray(res.cost),
        status=np.asarray(res.status),
        **extra,
    )


def optax_baseline(problem, steps=500, lr=0.1):
    """Adam on the single-shooting cost (reverse mode through the analytic step)."""
    import optax

    from jaxdyn.trajopt.shooting import gradient_shooting

    opt = optax.adam(lr)
    t0 = time.perf_counter()
    us, costs = jax.block_until_ready(gradient_shooting(problem, opt, steps))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    us, costs = jax.block_until_ready(gradient_shooting(problem, opt, steps))
    t = time.perf_counter() - t0
    final = float(ddp.trajectory_cost(problem, ddp.rollout(problem, us), us))
    return dict(time=t, compile=first - t, iters=steps, cost=final, lr=lr)


#: the row of ``fddp(problem)`` with the switch ``trajopt_fused_loops`` on
#: (:func:`jaxdyn_fused`); the other modes are ``jax.jit(lambda p: fddp(p, derivatives=mode))``
#: in default settings, which compiles the caller's program (one kernel per operation and knot)
DEFAULT = "analytic, trajopt_fused_loops on (fddp(problem))"


def single(name, T, seed, modes=(DEFAULT, "analytic", "autodiff"), baseline=True):
    model, pm, conv = load(name)
    rng = np.random.default_rng(seed)
    q0 = jaxdyn.neutral_configuration(model)
    q0 = jaxdyn.integrate(model, q0, 0.3 * rng.standard_normal(model.nv))
    x0 = jnp.concatenate([q0, jnp.zeros(model.nv)])
    offset = 0.8 * np.cos(np.arange(model.nv))
    if model.floating_base:  # momentum: the legs can turn the base, not move its centre
        offset[:6] = (0.3, -0.2, 0.1, 0.0, 0.0, 0.0)
    goal = goal_state(model, q0, offset)
    problem = make_problem(model, T, x0, goal)
    cro = crocoddyl_solve(problem, pm, conv)
    rows = []
    for mode in modes:
        jx = jaxdyn_fused(problem) if mode == DEFAULT else jaxdyn_solve(problem, mode)
        assert int(jx["status"]) == 0, f"{name} {mode}: status {int(jx['status'])}"
        rel = abs(float(jx["cost"]) - cro["cost"]) / abs(cro["cost"])
        assert rel < RTOL, f"{name} {mode}: cost {float(jx['cost'])} vs Crocoddyl {cro['cost']}"
        rows.append((mode, jx, rel))
        print(f"{name} jaxdyn {mode}: {jx['time'] * 1e3:.1f} ms, {int(jx['iters'])} it, "
              f"cost {float(jx['cost']):.10g}, compile {jx['compile']:.1f} s")  # fmt: skip
    print(f"{name} Crocoddyl: {cro['time'] * 1e3:.1f} ms, {cro['iters']} it, cost "
          f"{cro['cost']:.10g}")  # fmt: skip
    adam = optax_baseline(problem) if name == "arm7" and baseline else None
    if adam is not None:
        print(f"{name} optax Adam: {adam['time'] * 1e3:.1f} ms, {adam['iters']} steps, cost "
              f"{adam['cost']:.10g}")  # fmt: skip
    return name, T, cro, rows, adam


def batch(name, T, B, seed):
    model, pm, conv = load(name)
    stacked = random_problems(model, T, B, seed)  # fixed base
    problems = [jax.tree.map(lambda a, i=i: a[i], stacked) for i in range(B)]
    t_cro, it_cro, cost_cro, ok_cro = 0.0, [], [], []
    for p in problems:
        c = crocoddyl_solve(p, pm, conv, repeats=1)
        t_cro += c["time"]
        it_cro.append(c["iters"])
        cost_cro.append(c["cost"])
        ok_cro.append(c["ok"])
    out = {}
    solvers = {
        "analytic": lambda: jaxdyn_solve(stacked, "analytic", repeats=2, batched=True),
        "autodiff": lambda: jaxdyn_solve(stacked, "autodiff", repeats=2, batched=True),
        # rounds of ROUND_ITERS batched iterations, the running members compacted
        "analytic, solve_batch": lambda: solve_rounds_timed(stacked, repeats=2),
    }
    for mode, solve in solvers.items():
        jx = solve()
        # compared where both converged (a wild first step can diverge differently: Pinocchio
        # wraps the continuous joint's angle difference, jaxdyn does not)
        both = (jx["status"] == 0) & np.array(ok_cro)
        rel = np.max(np.abs(jx["cost"] - np.array(cost_cro))[both] / np.abs(cost_cro)[both])
        print(f"batch {mode}: {int(both.sum())} of {B} converged in both")
        assert both.sum() >= 0.9 * B, f"batch {mode}: statuses {jx['status']}"
        assert rel < RTOL, f"batch {mode}: cost mismatch {rel}"
        out[mode] = (jx, rel)
        rounds = f", rounds {jx['schedule']}" if "schedule" in jx else ""
        print(f"batch {B} jaxdyn {mode}: {jx['time']:.3f} s, max it {int(jx['iters'].max())}"
              f"{rounds}, compile {jx['compile']:.1f} s")  # fmt: skip
    print(f"batch {B} Crocoddyl: {t_cro:.3f} s, iterations {min(it_cro)}..{max(it_cro)}")
    return dict(B=B, T=T, name=name, t_cro=t_cro, it_cro=it_cro, jx=out)


ROUND_ITERS, MIN_BATCH = 5, 4  # solve_batch's rounds on the CPU


def solve_rounds_timed(stacked, repeats=2):
    """``jaxdyn.trajopt.solve_batch`` timed as :func:`jaxdyn_solve` times a solve: best of
    ``repeats`` after a first call (its host loop cannot be lowered, so the compile time is
    that call's), with the rounds' schedule."""

    def solve(schedule=None):
        return ddp.solve_batch(
            stacked, max_iter=MAX_ITER, method="rounds", round_iters=ROUND_ITERS,
            min_batch=MIN_BATCH, schedule=schedule,
        )  # fmt: skip

    schedule = []
    t0 = time.perf_counter()
    jax.block_until_ready(solve(schedule))
    return _timed_solves(solve, repeats, time.perf_counter() - t0, schedule=schedule)


SINGLES = (("arm7", 100, 0), ("quad12", 50, 1))


def fused_singles():
    """The one-problem solves again in a child process started with
    ``JAXDYN_FUSED_CPU_LOOPS=1`` (XLA flags are per process, :func:`jaxdyn.config.fused_cpu_loops`),
    analytic derivatives, with the child's own Crocoddyl reference: ``{name: (cro, jx, rel)}``."""
    return _env.fused_child(__file__, "--fused-child")


def _fused_child():
    import json

    assert jaxdyn.config.fused_cpu_loops_enabled(), os.environ.get("XLA_FLAGS")
    out = {}
    for name, T, seed in SINGLES:
        _, _, cro, rows, _ = single(name, T, seed, modes=("analytic",), baseline=False)
        _, jx, rel = rows[0]
        jx = {k: float(jx[k]) for k in ("time", "compile", "iters", "cost")}
        out[name] = (dict(cro, ok=bool(cro["ok"])), jx, rel)
    print(json.dumps(out))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    ap.add_argument("--fused-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.fused_child:
        return _fused_child()
    singles = [single(*args) for args in SINGLES]
    fused = fused_singles()
    b = batch("arm7", 100, a.batch, 2)
    body = [
        f"Machine: {cpu_name()}, {platform.machine()}; jax {jax.__version__}, crocoddyl "
        f"{crocoddyl.__version__}; single-threaded XLA ({_env.threading_note()}), "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end of the run, "
        f"Crocoddyl with one thread; float64; run {time.strftime('%Y-%m-%d %H:%M')} UTC by "
        "`python benchmarks/trajopt.py`.",
        "",
        "FDDP (Mastalli et al. 2020) on the same problems: Euler steps of 10 ms, state "
        "regularisation to a goal (w = 0.1, terminal 100), control regularisation (w = 1e-3), "
        "initial guess x0 repeated and zero controls, `th_stop = 1e-9`; armature 0.01 (see "
        "`jaxdyn/interop/crocoddyl.py`). Crocoddyl: `SolverFDDP` (C++), best of 3 solves. "
        "jaxdyn: `jaxdyn.trajopt.fddp` jit-compiled, best of 3 solves after compilation "
        "(compile time separate): the `trajopt_fused_loops` row calls `fddp(problem)` directly "
        "with that `jaxdyn.config` switch on (off by default: on the CPU the solve is then "
        "compiled into one XLA kernel; its compile time is the first call's less a solve's); "
        "the other jaxdyn rows wrap it in `jax.jit(lambda p: fddp(p, derivatives=...))` in "
        "default settings, compiled one kernel per operation and knot. Iterations: iterations "
        "performed (Crocoddyl's `iter + 1`). "
        f"Final costs agree to the stated relative difference (asserted < {RTOL:g}). The "
        "optax row is the first-order baseline (`jaxdyn.trajopt.gradient_shooting`: Adam on "
        "the single-shooting cost, reverse mode through the analytic step), a fixed number of "
        "steps from zero controls; its relative difference is to Crocoddyl's optimum. On arm7 "
        "the zero-torque rollout falls under gravity (cost 2.9e5) and Adam does not recover: "
        "its rollouts diverge within 10 steps at lr >= 0.03 (the last finite controls are "
        "kept) and stall near 2.3e5 at lr 0.01, which is the case for a second-order method.",
        "",
        "The fused-CPU-loops rows come from a second process started with "
        "`JAXDYN_FUSED_CPU_LOOPS=1` (`jaxdyn.config.fused_cpu_loops`: XLA:CPU compiles each "
        "of the solver's knot loops into one kernel instead of one kernel per operation and "
        "step; the flags are per process); their ratio is to that process's own Crocoddyl "
        "solve (same problem, best of 3).",
        "",
        "| problem | solver | iterations | ms / solve | ms / iteration | per iteration vs "
        "Crocoddyl | final cost | rel. diff. | compile s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def row(name, T, solver, it, t, cost, rel, compile_s, vs):
        rel = "" if rel is None else f"{rel:.1e}"
        comp = "" if compile_s is None else f"{compile_s:.1f}"
        return (
            f"| {name}, T = {T} | {solver} | {it} | {t * 1e3:.2f} | {t * 1e3 / it:.3f} | "
            f"{vs} | {float(cost):.10g} | {rel} | {comp} |"
        )

    for name, T, cro, rows, adam in singles:
        per_it = cro["time"] / cro["iters"]
        body.append(row(name, T, "Crocoddyl FDDP", cro["iters"], cro["time"], cro["cost"],
                        None, None, "1.00x"))  # fmt: skip
        for mode, jx, rel in rows:
            it = int(jx["iters"])
            vs = f"{jx['time'] / it / per_it:.2f}x"
            body.append(row(name, T, f"jaxdyn FDDP, {mode}", it, jx["time"], jx["cost"], rel,
                            jx["compile"], vs))  # fmt: skip
        f_cro, jx, rel = fused[name]
        it = int(jx["iters"])
        vs = f"{jx['time'] / it / (f_cro['time'] / f_cro['iters']):.2f}x"
        body.append(row(name, T, "jaxdyn FDDP, analytic, fused CPU loops", it, jx["time"],
                        jx["cost"], rel, jx["compile"], vs))  # fmt: skip
        if adam is not None:
            rel = (adam["cost"] - cro["cost"]) / abs(cro["cost"])
            body.append(
                f"| {name}, T = {T} | optax Adam (lr {adam['lr']:g}), single shooting | "
                f"{adam['iters']} steps | {adam['time'] * 1e3:.2f} | "
                f"{adam['time'] * 1e3 / adam['iters']:.3f} | | {adam['cost']:.10g} | "
                f"{rel:+.1e} | {adam['compile']:.1f} |"
            )
    B = b["B"]
    body += [
        "",
        f"Batch: {B} arm7 problems (T = {b['T']}, random start and goal postures). Crocoddyl "
        "solves them one after the other; jaxdyn solves them in one `jax.jit(jax.vmap(fddp))` "
        "call (on the CPU one problem after another inside the program, `lax.map`, each "
        "iterating as long as it needs; on accelerators one batched `while_loop`, which "
        "iterates until its slowest member converges). Per knot and batched iteration "
        "(B = 64, measured separately, 2026-11-26): the derivatives 5.9 us, the backward pass "
        "5.0 us, each forward trial 1.9 us, about what Crocoddyl spends per knot and iteration "
        "in C++ (12 us), so batching alone does not multiply the throughput on two cores; the "
        "batch also runs every member for its slowest member's iterations. `solve_batch` "
        f"(`jaxdyn.trajopt.solve_batch`, rounds of {ROUND_ITERS} iterations, min_batch "
        f"{MIN_BATCH}) gathers the members still running into a smaller batch after each round "
        f"(rounds: {', '.join(map(str, b['jx']['analytic, solve_batch'][0]['schedule']))}, as "
        "(batch size, members running)). Solving the batch one problem after another on each "
        'core instead (`solve_sharded`, fused CPU loops) is in "Batched MPC on a many-core '
        'CPU".',
        "",
        "| solver | iterations | s / batch | problems / s | vs Crocoddyl | max rel. cost diff. "
        "| compile s |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| Crocoddyl FDDP, one by one | {min(b['it_cro'])}-{max(b['it_cro'])} | "
        f"{b['t_cro']:.3f} | {B / b['t_cro']:.1f} | 1.00x | | |",
    ]
    for mode, (jx, rel) in b["jx"].items():
        its = jx["iters"]
        how = "" if "solve_batch" in mode else ", vmap"
        body.append(
            f"| jaxdyn FDDP, {mode}{how} | {int(its.min())}-{int(its.max())} | "
            f"{jx['time']:.3f} | {B / jx['time']:.1f} | {b['t_cro'] / jx['time']:.2f}x | "
            f"{rel:.1e} | {jx['compile']:.1f} |"
        )
    write_section(Path(a.out), "## Trajectory optimisation\n\n" + "\n".join(body))
    print("\n".join(body))


if __name__ == "__main__":
    main()

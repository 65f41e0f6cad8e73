"""Trajectory optimisation: jaxdyn's FDDP against Crocoddyl's ``SolverFDDP`` (C++, float64) on
the same problems, in one run.

Usage: ``python benchmarks/trajopt.py [--batch 64] [--rounds 3] [--quick] [--out ...]``

Problems (Euler steps of ``dt = 10 ms``, running cost ``dt (1/2 w_x |x ⊖ x_goal|² + 1/2 w_u
|u|²)``, terminal ``1/2 W |x_T ⊖ x_goal|²``, initial guess ``x0`` repeated and zero controls,
``th_stop = 1e-9``, at most 200 iterations; the models carry armature 0.01, which
:func:`jaxdyn.interop.crocoddyl.to_crocoddyl` always gives Crocoddyl explicitly):

* ``arm7``: the bundled 7-DoF arm, full actuation, T = 100, a joint-space reach;
* ``quad12``: the bundled quadruped floating in space (``ActuationModelFloatingBase``: the
  base moves only through the legs), T = 50, a goal posture and base orientation.

Every measurement runs in a child process of its own (a fresh process: default settings, the
persistent compilation cache off so that compile times are compiles), capped in memory (an
address-space limit and a watchdog on its resident memory) and in time, so that a compile that
blows up becomes a row saying so instead of exhausting the machine:

* one problem, pinned to one core (``benchmarks/_env.py``), in CPU time (``time.process_time``)
  and wall time, rounds interleaved with Crocoddyl's solve of the same problem:
  ``fddp(problem)`` as a user calls it (first solves: the unfused program; then, after the
  background compile of ``trajopt_fused_loops="auto"``, the program it kept), ``derivatives=
  "autodiff"`` and the optax baseline (arm7); a second child started with
  ``JAXDYN_FUSED_CPU_LOOPS=1`` runs ``fddp(problem)`` there (on the other core, meanwhile);
* a batch of ``--batch`` random arm7 reaches (T = 100) on every core the machine has:
  Crocoddyl one by one (one thread) against ``jax.vmap(fddp)(problems)``,
  ``solve_batch(problems)``, ``jax.jit(jax.vmap(fddp))(problems)`` and ``jax.lax.map`` of
  ``fddp`` in a ``jit``; problems per second in wall time and per CPU-second.

Writes the ``## Trajectory optimisation`` section of benchmarks/RESULTS.md. ``--quick`` (a
check of the script, not for RESULTS.md): arm7 only, a batch of 16, two rounds, no autodiff or
optax rows, and nothing written unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # this checkout's jaxdyn

import _env  # noqa: E402

RTOL = 1e-6
SINGLES = (("arm7", 100, 0), ("quad12", 50, 1))
#: a child's limits: resident memory (the watchdog kills it above), address space
#: (``RLIMIT_AS``: allocations fail above, a backstop between two polls), CPU seconds
#: (``RLIMIT_CPU``, per process: whatever the machine's load) and, a last resort on a loaded
#: machine, wall-clock seconds
CHILD_RSS = 5 << 30
CHILD_AS = 12 << 30
CHILD_CPU = 600
CHILD_TIMEOUT = 3600.0


# ----------------------------------------------------------------------------- capped children


def run_capped(args, env=None, cores=None, rss=CHILD_RSS, timeout=CHILD_TIMEOUT):
    """``python trajopt.py *args`` in a child process capped in memory and time (see the
    module), on ``cores`` (``None``: every core of the machine). Returns ``(result, info)``:
    the JSON of its last stdout line (``None`` when it failed) and ``dict(why=..., peak_rss=...,
    wall=...)``, ``why`` ``None`` when it succeeded, else a sentence."""
    import resource

    env = dict(os.environ if env is None else env)
    env.setdefault("JAXDYN_COMPILATION_CACHE", "0")  # a fresh process compiles
    allowed = cores if cores is not None else set(range(os.cpu_count() or 1))

    def limits():  # in the child, before it execs Python
        resource.setrlimit(resource.RLIMIT_AS, (CHILD_AS, CHILD_AS))
        resource.setrlimit(resource.RLIMIT_CPU, (CHILD_CPU, CHILD_CPU + 10))
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, allowed)

    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limits,
    )
    state: dict[str, Any] = dict(peak=0, killed=None)

    def watch():
        status = f"/proc/{proc.pid}/status"
        while proc.poll() is None:
            try:
                with open(status) as f:
                    fields = dict(ln.split(":", 1) for ln in f if ":" in ln)
                now = int(fields["VmRSS"].split()[0]) * 1024
                state["peak"] = max(state["peak"], int(fields["VmHWM"].split()[0]) * 1024)
            except (OSError, KeyError, ValueError):
                now = 0
            if now > rss:
                state["killed"] = f"stopped above {rss / 2**30:.3g} GiB of resident memory"
            elif time.perf_counter() - t0 > timeout:
                state["killed"] = f"stopped after {timeout:.0f} s"
            if state["killed"]:
                proc.kill()
                return
            time.sleep(0.25)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, err = proc.communicate()
    watcher.join()
    info: dict[str, Any] = dict(peak_rss=state["peak"], wall=time.perf_counter() - t0, why=None)
    sys.stdout.write(out)
    if proc.returncode == 0:
        try:
            return json.loads(out.strip().splitlines()[-1]), info
        except (ValueError, IndexError):
            info["why"] = "no result printed"
            return None, info
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if state["killed"]:
        info["why"] = state["killed"]
    elif proc.returncode in (-24, -9) and "bad_alloc" not in err:  # SIGXCPU (then SIGKILL)
        info["why"] = f"stopped after {CHILD_CPU} s of CPU time"
    elif "bad_alloc" in err or "MemoryError" in err or "RESOURCE_EXHAUSTED" in err:
        info["why"] = f"out of memory at the {CHILD_AS / 2**30:.3g} GiB address-space limit"
    else:
        info["why"] = f"exit status {proc.returncode}: {lines[-1] if lines else ''}"
    sys.stderr.write(err[-3000:])
    return None, info


# ----------------------------------------------------------------------------- child: helpers


def _setup_jax():
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def load(name):
    """``(model, pinocchio model, converter)`` of a bundled robot (armature 0.01), with
    ``jax_enable_x64`` on (float64 problems; ``trajopt_cores.py`` and ``trajopt_gpu.py`` call
    it too)."""
    _setup_jax()
    import pinocchio as pin
    from _trajopt_problems import load_model

    from jaxdyn.interop.pinocchio import Converter

    model, xml, floating = load_model(name)
    pm = (
        pin.buildModelFromXML(xml, pin.JointModelFreeFlyer())
        if floating
        else pin.buildModelFromXML(xml)
    )
    return model, pm, Converter(model, pm)


def single_problem(model, T, seed):
    import jax.numpy as jnp
    import numpy as np
    from _trajopt_problems import goal_state, make_problem

    import jaxdyn

    rng = np.random.default_rng(seed)
    q0 = jaxdyn.neutral_configuration(model)
    q0 = jaxdyn.integrate(model, q0, 0.3 * rng.standard_normal(model.nv))
    x0 = jnp.concatenate([q0, jnp.zeros(model.nv)])
    offset = 0.8 * np.cos(np.arange(model.nv))
    if model.floating_base:  # momentum: the legs can turn the base, not move its centre
        offset[:6] = (0.3, -0.2, 0.1, 0.0, 0.0, 0.0)
    return make_problem(model, T, x0, goal_state(model, q0, offset))


def crocoddyl_solver(problem, pm, conv):
    """A function solving ``problem`` with Crocoddyl's ``SolverFDDP`` (one thread) and
    returning ``(iterations, cost, converged)``. :func:`~jaxdyn.interop.crocoddyl.to_crocoddyl`
    sets the models' armature explicitly and refuses a Pinocchio / Crocoddyl pair that
    computes wrong dynamics (``version_problem``)."""
    import crocoddyl
    import numpy as np
    from _trajopt_problems import MAX_ITER

    from jaxdyn.interop.crocoddyl import to_crocoddyl, version_problem

    bad = version_problem()
    if bad is not None:
        raise RuntimeError(f"benchmarks/trajopt.py: {bad}")
    cp, x0p = to_crocoddyl(problem, pm, conv)
    if hasattr(cp, "nthreads"):
        cp.nthreads = 1
    T, nu = problem.horizon, problem.nu

    def solve():
        s = crocoddyl.SolverFDDP(cp)
        s.th_stop = 1e-9
        ok = s.solve([x0p] * (T + 1), [np.zeros(nu)] * T, MAX_ITER, False, 1e-9)
        return s.iter + 1, float(s.cost), bool(ok)

    return solve


def crocoddyl_solve(problem, pm, conv, repeats=3):
    """Crocoddyl's solve of ``problem``, best wall time of ``repeats``:
    ``dict(time=..., iters=..., cost=..., ok=...)`` (``trajopt_cores.py``, ``trajopt_gpu.py``)."""
    solve = crocoddyl_solver(problem, pm, conv)
    best, res = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = solve()
        best = min(best, time.perf_counter() - t0)
    assert res is not None
    return dict(time=best, iters=res[0], cost=res[1], ok=res[2])


def timed(f):
    """``(CPU s, wall s, f())``: CPU time of every thread of the process."""
    import jax

    c0, w0 = time.process_time(), time.perf_counter()
    out = jax.block_until_ready(f())
    return time.process_time() - c0, time.perf_counter() - w0, out


def thread_times() -> dict[str, tuple[int, str]]:
    """``{thread id: (CPU ns, allowed cores)}`` of this process's threads (Linux
    ``/proc/self/task``: ``schedstat``'s run time, ``Cpus_allowed_list``); empty elsewhere."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for t in tids:
        try:
            with open(f"/proc/self/task/{t}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"/proc/self/task/{t}/status") as f:
                allowed = next(ln.split(":", 1)[1].strip() for ln in f
                               if ln.startswith("Cpus_allowed_list"))  # fmt: skip
        except (OSError, StopIteration, ValueError, IndexError):
            continue
        out[t] = (ns, allowed)
    return out


def interleaved(croc, jx, rounds) -> dict[str, Any]:
    """``rounds`` rounds of one Crocoddyl solve and one ``jx()`` solve, timed: medians of CPU
    and wall time of each, iterations and costs of the last, and the ratio of jaxdyn's median
    CPU time per iteration to the median of Crocoddyl's in the same rounds (the ratio of the
    two figures the table prints side by side; ``ratio_rounds``: the per-round ratios)."""
    import numpy as np

    t0 = thread_times()
    rows = [(timed(croc), timed(jx)) for _ in range(rounds)]
    t1 = thread_times()
    # the threads that ran during the rounds and the cores each was allowed: CPU time counts
    # them all (XLA:CPU runs a program's kernels on worker threads beside the calling one)
    ran = {t: a for t, (ns, a) in t1.items() if ns > t0.get(t, (0, a))[0]}
    (_, _, (it_c, cost_c, _)), (_, _, r) = rows[-1]
    it_j = int(r.iterations)
    cro_cpu = float(np.median([c[0] for c, _ in rows]))
    cpu = float(np.median([j[0] for _, j in rows]))
    return dict(
        cro=dict(
            cpu=cro_cpu,
            wall=float(np.median([c[1] for c, _ in rows])),
            iters=it_c,
            cost=cost_c,
        ),
        cpu=cpu,
        wall=float(np.median([j[1] for _, j in rows])),
        iters=it_j,
        cost=float(r.cost),
        status=int(r.status),
        ratio=(cpu / it_j) / (cro_cpu / it_c),
        ratio_rounds=[(j[0] / it_j) / (c[0] / it_c) for c, j in rows],
        threads=len(ran),
        thread_cores=sorted(set(ran.values())),
        cpu_over_wall=sum(j[0] > j[1] for _, j in rows),
        rel=abs(float(r.cost) - cost_c) / abs(cost_c),
    )


# ----------------------------------------------------------------------------- child: one problem


def child_single(name, T, seed, rounds, extras):
    """One problem (see the module): Crocoddyl, ``fddp(problem)`` in default settings before
    and after the background compile, autodiff and optax (``extras``)."""
    _env.single_threaded()
    jax = _setup_jax()
    import resource

    from _trajopt_problems import MAX_ITER

    import jaxdyn
    from jaxdyn.backend import fused_programs
    from jaxdyn.trajopt import ddp

    model, pm, conv = load(name)
    problem = single_problem(model, T, seed)
    croc = crocoddyl_solver(problem, pm, conv)
    out: dict[str, Any] = dict(name=name, T=T, switch=str(jaxdyn.config.get("trajopt_fused_loops")))

    def jx():
        return ddp.fddp(problem, max_iter=MAX_ITER)

    # the default: the first solves run the unfused program (its compile in the first call)
    first, _, _ = timed(jx)
    n = rounds + 1
    r = interleaved(croc, jx, rounds)
    r["compile"] = first - r["cpu"]
    out["default"] = r
    while n < fused_programs.START_AFTER:  # repeated solves start the background compile
        timed(jx)
        n += 1
    w0 = time.perf_counter()
    done = fused_programs.wait(CHILD_TIMEOUT / 4)
    waited = time.perf_counter() - w0
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    timed(jx)  # loads the fused executable and keeps the faster program
    r = interleaved(croc, jx, rounds)
    r["waited"] = waited
    r["child_cpu"] = c0.ru_utime + c0.ru_stime
    r["fused"] = bool(ddp._solve_fused.ready)
    why = list(ddp._solve_fused.failed.values())
    r["why"] = why[0] if why else (None if done else "the background compile did not finish")
    out["after"] = r
    if "autodiff" in extras:
        f = jax.jit(lambda p: ddp.fddp(p, max_iter=MAX_ITER, derivatives="autodiff"))
        first, _, _ = timed(lambda: f(problem))
        r = interleaved(croc, lambda: f(problem), rounds)
        r["compile"] = first - r["cpu"]
        out["autodiff"] = r
    if "optax" in extras:
        out["optax"] = optax_baseline(problem, out["default"]["cro"]["cost"])
    print(json.dumps(out))


def optax_baseline(problem, cost_cro, steps=500, lr=0.1):
    """Adam on the single-shooting cost (reverse mode through the analytic step)."""
    import optax

    from jaxdyn.trajopt import ddp
    from jaxdyn.trajopt.shooting import gradient_shooting

    opt = optax.adam(lr)
    first, _, _ = timed(lambda: gradient_shooting(problem, opt, steps))
    cpu, wall, (us, _) = timed(lambda: gradient_shooting(problem, opt, steps))
    final = float(ddp.trajectory_cost(problem, ddp.rollout(problem, us), us))
    return dict(
        cpu=cpu, wall=wall, compile=first - cpu, iters=steps, cost=final, lr=lr,
        rel=(final - cost_cro) / abs(cost_cro),
    )  # fmt: skip


def child_fused_loops(names, rounds):
    """``fddp(problem)`` in a process started with ``JAXDYN_FUSED_CPU_LOOPS=1`` (XLA:CPU fuses
    every small loop of the process; the flags are per process)."""
    _env.single_threaded()
    _setup_jax()
    from _trajopt_problems import MAX_ITER

    import jaxdyn
    from jaxdyn.trajopt import ddp

    assert jaxdyn.config.fused_cpu_loops_enabled(), os.environ.get("XLA_FLAGS")
    out: dict[str, Any] = {}
    for name, T, seed in SINGLES:
        if name not in names:
            continue
        model, pm, conv = load(name)
        problem = single_problem(model, T, seed)
        croc = crocoddyl_solver(problem, pm, conv)

        def jx(problem=problem):
            return ddp.fddp(problem, max_iter=MAX_ITER)

        first, _, _ = timed(jx)
        r = interleaved(croc, jx, rounds)
        r["compile"] = first - r["cpu"]
        out[name] = r
        print(f"fused loops {name}: {r['cpu'] * 1e3:.1f} ms CPU, {r['iters']} it, "
              f"{r['ratio']:.2f}x Crocoddyl per iteration", file=sys.stderr)  # fmt: skip
    print(json.dumps(out))


# ----------------------------------------------------------------------------- child: the batch


def child_batch(B, rounds):
    """``B`` arm7 reaches (see the module), every core; medians of ``rounds`` rounds."""
    jax = _setup_jax()
    import equinox as eqx
    import numpy as np
    from _trajopt_problems import MAX_ITER, random_problems

    from jaxdyn.trajopt import ddp

    model, pm, conv = load("arm7")
    T = 100
    stacked = random_problems(model, T, B, 2)
    arrays, static = eqx.partition(stacked, eqx.is_array)
    arrays = jax.tree.map(np.asarray, arrays)
    probs = [eqx.combine(jax.tree.map(lambda x, i=i: x[i], arrays), static) for i in range(B)]
    solvers = [crocoddyl_solver(p, pm, conv) for p in probs]

    def croc():
        its, costs, oks = zip(*(s() for s in solvers))
        return np.array(its), np.array(costs), np.array(oks)

    def one(p):
        return ddp.fddp(p, max_iter=MAX_ITER)

    vm = jax.vmap(one)
    jit_vm = jax.jit(vm)
    jit_map = jax.jit(lambda ps: jax.lax.map(one, ps))
    modes = {
        "vmap": lambda: vm(stacked),
        "solve_batch": lambda: ddp.solve_batch(stacked, max_iter=MAX_ITER),
        "jit_vmap": lambda: jit_vm(stacked),
        "jit_map": lambda: jit_map(stacked),
    }
    _, _, (its_c, cost_c, ok_c) = timed(croc)
    iters_cro = [int(its_c.min()), int(its_c.max()), int(its_c.sum())]
    out: dict[str, Any] = dict(B=B, T=T, iters_cro=iters_cro, cores=os.cpu_count(), jx={})
    for name, f in modes.items():
        c, w, r = timed(f)
        its, st = np.asarray(r.iterations), np.asarray(r.status)
        both = (st == 0) & ok_c
        rel = float(np.max(np.abs(np.asarray(r.cost) - cost_c)[both] / np.abs(cost_c)[both]))
        assert both.sum() >= 0.9 * B, f"batch {name}: statuses {st}"
        assert rel < RTOL, f"batch {name}: cost mismatch {rel}"
        out["jx"][name] = dict(
            first_cpu=c, first_wall=w, rel=rel, iters=[int(its.min()), int(its.max())],
            same_iters=int((its == its_c).sum()),
        )  # fmt: skip
        print(f"batch {name}: first call {c:.1f} s CPU ({w:.1f} s wall), cost rel. diff. "
              f"{rel:.1e}", file=sys.stderr)  # fmt: skip
    times = {k: [] for k in ["crocoddyl", *modes]}
    for _ in range(rounds):
        times["crocoddyl"].append(timed(croc)[:2])
        for name, f in modes.items():
            times[name].append(timed(f)[:2])
    med = {k: np.median(np.array(v), axis=0) for k, v in times.items()}
    out["cro"] = dict(cpu=float(med["crocoddyl"][0]), wall=float(med["crocoddyl"][1]))
    for name in modes:
        out["jx"][name].update(cpu=float(med[name][0]), wall=float(med[name][1]))
    out["load"] = os.getloadavg()[0]
    print(json.dumps(out))


# ----------------------------------------------------------------------------- the parent


def _ms(s):
    return f"{s * 1e3:.2f}"


def single_rows(res, fused):
    """The one-problem table's rows of one problem."""
    name, T = res["name"], res["T"]
    label = f"{name}, T = {T}"
    d = res["default"]
    cro = d["cro"]
    per_it = f"{cro['cpu'] * 1e3 / cro['iters']:.3f}"
    rows = [
        f"| {label} | Crocoddyl FDDP | {cro['iters']} | {_ms(cro['cpu'])} | {_ms(cro['wall'])} "
        f"| {per_it} | {per_it} | 1.00x | {cro['cost']:.10g} | | |"
    ]

    def row(solver, r, comp):
        c = r["cro"]
        return (
            f"| {label} | {solver} | {r['iters']} | {_ms(r['cpu'])} | {_ms(r['wall'])} | "
            f"{r['cpu'] * 1e3 / r['iters']:.3f} | {c['cpu'] * 1e3 / c['iters']:.3f} | "
            f"{r['ratio']:.2f}x | {r['cost']:.10g} | {r['rel']:.1e} | {comp} |"
        )

    rows.append(row("jaxdyn `fddp(problem)`, first solves (unfused program)", d,
                    f"{d['compile']:.1f}"))  # fmt: skip
    a = res["after"]
    kept = "fused program kept" if a["fused"] else f"unfused kept: {a['why']}"
    rows.append(row(f"jaxdyn `fddp(problem)` after the background compile ({kept})", a,
                    f"{a['child_cpu']:.1f} (child)"))  # fmt: skip
    if "autodiff" in res:
        r = res["autodiff"]
        rows.append(row('jaxdyn `jax.jit(fddp(p, derivatives="autodiff"))`', r,
                        f"{r['compile']:.1f}"))  # fmt: skip
    f_res, f_info = fused
    if f_res is not None and name in f_res:
        r = f_res[name]
        rows.append(row("jaxdyn `fddp(problem)`, `JAXDYN_FUSED_CPU_LOOPS=1` (own process)", r,
                        f"{r['compile']:.1f}"))  # fmt: skip
    elif f_res is None:
        rows.append(f"| {label} | jaxdyn, `JAXDYN_FUSED_CPU_LOOPS=1` | not measured: "
                    f"{f_info['why']} | | | | | | | | |")  # fmt: skip
    if "optax" in res:
        r = res["optax"]
        rows.append(
            f"| {label} | optax Adam (lr {r['lr']:g}), single shooting | {r['iters']} steps | "
            f"{_ms(r['cpu'])} | {_ms(r['wall'])} | {r['cpu'] * 1e3 / r['iters']:.3f} | | | "
            f"{r['cost']:.10g} | {r['rel']:+.1e} | {r['compile']:.1f} |"
        )
    return rows


def pin_note(results, fused) -> str:
    """A sentence on the threads of the one-problem rows (:func:`interleaved`'s ``threads``,
    ``thread_cores``) and on the rows whose median CPU time exceeds their median wall time."""
    rows = []
    for res in results:
        for key, what in (("default", "first solves"), ("after", "after the background "
                          "compile"), ("autodiff", "autodiff")):  # fmt: skip
            if key in res:
                rows.append((f"{res['name']} {what}", res[key]))
    for name, (f_res, _) in fused.items():
        if f_res is not None and name in f_res:
            rows.append((f"{name} `JAXDYN_FUSED_CPU_LOOPS=1`", f_res[name]))
    cores = sorted({c for _, r in rows for c in r.get("thread_cores", [])})
    if not cores:
        return ""
    most = max(r.get("threads", 0) for _, r in rows)
    single = all("," not in c and "-" not in c for c in cores)
    text = (
        " CPU time is the whole process's, every thread's (XLA:CPU runs a program's kernels "
        f"on worker threads beside the calling one: up to {most} threads of a jaxdyn process "
        "used CPU during its rounds), and "
        + (
            f"each thread that ran was allowed a single core (core {' or '.join(cores)})"
            if single
            else f"the threads that ran were allowed cores {' / '.join(cores)}"
        )
        + " (read from `/proc/self/task`)"
    )
    over = [f"{label} ({r['cpu_over_wall']} of its rounds)" for label, r in rows
            if r["cpu"] > r["wall"]]  # fmt: skip
    if not over:
        return text + "."
    if single:
        return (
            text + f". Median CPU time above median wall time ({', '.join(over)}) therefore "
            "comes neither from a second core (each thread was pinned to one) nor from the "
            "background compile's child (another process: its CPU time is the compile "
            "column, read from `RUSAGE_CHILDREN`, never in a row's CPU time); its cause is "
            "not established (a loaded machine did not reproduce it), so compare CPU times "
            "with CPU times and wall times with wall times."
        )
    return (
        text + f"; threads ran on more than one core, so CPU time may exceed wall time "
        f"({', '.join(over)})."
    )


def batch_rows(b):
    B, cro = b["B"], b["cro"]
    lo, hi, _ = b["iters_cro"]
    rows = [
        f"| Crocoddyl FDDP, one by one (one thread) | {lo}-{hi} | {cro['wall']:.3f} | "
        f"{B / cro['wall']:.1f} | 1.00x | {cro['cpu']:.3f} | {B / cro['cpu']:.1f} | 1.00x | | |"
    ]
    what = {
        "vmap": "`jax.vmap(fddp)(problems)`",
        "solve_batch": "`jaxdyn.trajopt.solve_batch(problems)`",
        "jit_vmap": "`jax.jit(jax.vmap(fddp))(problems)`",
        "jit_map": "`jax.jit(lambda ps: jax.lax.map(fddp, ps))(problems)`",
    }
    for name, r in b["jx"].items():
        lo, hi = r["iters"]
        rows.append(
            f"| jaxdyn FDDP, {what[name]} | {lo}-{hi} | {r['wall']:.3f} | {B / r['wall']:.1f} | "
            f"{cro['wall'] / r['wall']:.2f}x | {r['cpu']:.3f} | {B / r['cpu']:.1f} | "
            f"{cro['cpu'] / r['cpu']:.2f}x | {r['rel']:.1e} | {r['first_cpu']:.1f} |"
        )
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per timing")
    ap.add_argument("--quick", action="store_true", help="a check of the script (see --help)")
    ap.add_argument("--out", default=None, help="results file (default benchmarks/RESULTS.md)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        kind, *rest = a.child
        if kind == "single":
            name, T, seed, extras = rest[0], int(rest[1]), int(rest[2]), rest[3:]
            return child_single(name, T, seed, a.rounds, extras)
        if kind == "fused-loops":
            return child_fused_loops(rest, a.rounds)
        if kind == "batch":
            return child_batch(a.batch, a.rounds)
        raise SystemExit(f"unknown child {kind!r}")

    t_start = time.perf_counter()
    rounds = 2 if a.quick else a.rounds
    B = 16 if a.quick else a.batch
    out = a.out if (a.out or a.quick) else str(HERE / "RESULTS.md")
    singles = SINGLES[:1] if a.quick else SINGLES
    extras = [] if a.quick else ["autodiff"]
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    one = {cores[-1]}  # the one-problem children (benchmarks/_env.py pins to the last core)
    other = {cores[0]}  # the fused-loops child, meanwhile
    r_flags = ["--rounds", str(rounds)]

    fused_box: dict[str, Any] = {}

    def fused_child():  # one process per problem: one that fails leaves the others' rows
        env = dict(os.environ, JAXDYN_FUSED_CPU_LOOPS="1", JAXDYN_BENCH_ALL_CORES="1")
        for name, _, _ in singles:
            fused_box[name] = run_capped([*r_flags, "--child", "fused-loops", name], env, other)

    th = threading.Thread(target=fused_child)
    th.start()
    results, peaks = [], {}
    for name, T, seed in singles:
        ex = extras + (["optax"] if name == "arm7" and not a.quick else [])
        env = dict(os.environ, JAXDYN_BENCH_ALL_CORES="1")  # the child stays on `one`
        res, info = run_capped([*r_flags, "--child", "single", name, str(T), str(seed), *ex],
                               env, one)  # fmt: skip
        peaks[name] = info["peak_rss"]
        if res is None:
            raise SystemExit(f"benchmarks/trajopt.py: the {name} child failed: {info['why']}")
        results.append(res)
    th.join()
    for name, (_, info) in fused_box.items():
        peaks[f"{name} fused loops"] = info["peak_rss"]
    b, b_info = run_capped([*r_flags, "--batch", str(B), "--child", "batch"])
    peaks["batch"] = b_info["peak_rss"]
    total = time.perf_counter() - t_start

    import crocoddyl
    import jax

    cmd = "python benchmarks/trajopt.py" + (" --quick" if a.quick else "")
    load = os.getloadavg()[0]
    shared = " (shared and loaded: compare CPU times)" if load > 1.5 else ""
    machine = (
        f"Machine: {_env.cpu_name()}, {platform.machine()}, {os.cpu_count()} cores; jax "
        f"{jax.__version__}, crocoddyl {crocoddyl.__version__}; float64; load average "
        f"{load:.1f} at the end of the run{shared}"
        f"; run {time.strftime('%Y-%m-%d %H:%M')} UTC by `{cmd}` ({total / 60:.1f} min, "
        f"children's peak resident memory {max(peaks.values()) / 2**30:.2f} GiB)."
    )
    body = [
        machine,
        "",
        "FDDP (Mastalli et al. 2020) on the same problems: Euler steps of 10 ms, state "
        "regularisation to a goal (w = 0.1, terminal 100), control regularisation (w = 1e-3), "
        "initial guess x0 repeated and zero controls, `th_stop = 1e-9`, at most 200 "
        "iterations; armature 0.01, given to Crocoddyl explicitly "
        "(`jaxdyn/interop/crocoddyl.py`, crocoddyl 3.2.1 with pin 4.0.0). Each problem is "
        "measured in a fresh process of its own (the persistent compilation cache off, so the "
        f"compiles are compiles; capped at {CHILD_RSS / 2**30:g} GiB resident, "
        f"{CHILD_AS / 2**30:g} GiB of address space and {CHILD_CPU} s of CPU, so that a "
        "compile that blows up is a row saying so), pinned to one core "
        "(`--xla_cpu_multi_thread_eigen=false`; "
        f"Crocoddyl with one thread), {rounds} rounds of one Crocoddyl solve and one jaxdyn "
        "solve interleaved: medians of CPU time (`time.process_time`) and wall time per "
        "solve. Each jaxdyn row has rounds of its own, with Crocoddyl solves of their own (the "
        "machine's load changes between rows): the column after jaxdyn's CPU ms per iteration "
        "is the median of those Crocoddyl solves, and the ratio is the one of these two "
        "columns (ratio of the medians; the Crocoddyl row is the first solves' rounds). "
        "Iterations: iterations performed (Crocoddyl's `iter + 1`). Final costs "
        f"agree to the stated relative difference (asserted < {RTOL:g})."
        + pin_note(results, fused_box),
        "",
        "`fddp(problem)` is what a user calls, in default settings (switch "
        f"`trajopt_fused_loops` = `{results[0]['switch']}`): its first solves of a problem "
        "structure run the unfused program (one XLA:CPU kernel per operation and knot; compile "
        "time: the first call's CPU time less a solve's); the fifth solve starts a child "
        "process compiling the solve as one fused XLA:CPU kernel (capped at 4 GiB of memory), "
        "and the first solve after it is done times both programs and keeps the faster "
        '(`docs/trajopt.md`, "Fused CPU loops"); its compile column is that child\'s CPU '
        "time. The `JAXDYN_FUSED_CPU_LOOPS=1` row comes from another process started so "
        "(XLA:CPU fuses every small loop of that process), run on the other core meanwhile "
        "(its Crocoddyl column: that process's own Crocoddyl solves). The autodiff row "
        "differentiates the dynamics step by forward mode instead of the analytic "
        "derivatives, inside the caller's `jax.jit` (unfused). The optax row is the "
        "first-order baseline "
        "(`jaxdyn.trajopt.gradient_shooting`: Adam on the single-shooting cost), a fixed "
        "number of steps from zero controls; its relative difference is to Crocoddyl's "
        "optimum (on arm7 the zero-torque rollout falls under gravity and Adam does not "
        "recover).",
        "",
        "| problem | solver | iterations | CPU ms / solve | wall ms / solve | CPU ms / "
        "iteration | Crocoddyl CPU ms / iteration, same rounds | per iteration vs Crocoddyl "
        "(CPU) | final cost | rel. diff. | compile CPU s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        body += single_rows(res, fused_box[res["name"]])
    if b is None:
        b = dict(B=B, T=100, iters_cro=["?", "?", "?"], cores=os.cpu_count())
    lo, hi, tot = b["iters_cro"]
    body += [
        "",
        f"Batch: {b['B']} arm7 reaches (T = {b['T']}, random start and goal postures, "
        f"{lo}-{hi} iterations, {tot} in all), in a fresh process on all {b['cores']} cores "
        "in default settings (no XLA flags of the benchmark's). Crocoddyl solves them one "
        "after the other on one thread; jaxdyn as a user writes it first: `jax.vmap(fddp)` "
        "and `solve_batch` called with arrays solve the problems one after another, one host "
        "thread per core, each by the one-problem solve compiled into one fused XLA:CPU kernel "
        "(one program for both: the compile column of the second is what is left); "
        "`jax.jit(jax.vmap(fddp))` runs the same threads and program from inside the "
        "caller's program (a host callback; its compile column is what is left, the "
        "callback's trace); `jax.lax.map` of `fddp` in a `jit` (what `jax.jit(jax.vmap(fddp))` "
        "ran before) solves them one after another inside the program, unfused, on one core "
        "(XLA:CPU runs a program's loops one after another). Every member iterates only as "
        "long as it needs. "
        f"Medians of {rounds} rounds interleaved; problems per second in wall time (the "
        "issue's measure: on an idle machine, what a user gets from the cores) and per "
        "CPU-second (the work, what a loaded machine still compares); compile: the first "
        "call's CPU time (all threads). Final costs compared where both converged.",
        "",
        "| solver | iterations | wall s / batch | problems / s | vs Crocoddyl (wall) | CPU s / "
        "batch | problems / CPU-s | vs Crocoddyl (CPU) | max rel. cost diff. | first call "
        "CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    if "jx" in b:
        body += batch_rows(b)
    else:
        body.append(f"| not measured: {b_info['why']} | | | | | | | | | |")
    section = "## Trajectory optimisation\n\n" + "\n".join(body)
    if out:
        _env.write_section(Path(out), section)
    print(section)
    print(f"total {total:.0f} s; peak resident memory of the children (GiB): "
          + ", ".join(f"{k} {v / 2**30:.2f}" for k, v in peaks.items()))  # fmt: skip


if __name__ == "__main__":
    main()

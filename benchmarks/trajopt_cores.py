"""Batched MPC on a many-core CPU: B arm7 reaching problems solved by
``jaxdyn.trajopt.solve_sharded`` (one CPU device per core, each device solving its share one
problem after another, fused CPU loops) and by Crocoddyl's ``SolverFDDP``, one by one on one
core and in N processes on N cores, all on this machine in one run.

    python benchmarks/trajopt_cores.py                       # every allowed core; writes RESULTS.md
    python benchmarks/trajopt_cores.py --json /tmp/tc.json --no-write   # e.g. on the GPU's host
    python benchmarks/trajopt_cores.py --from-json /tmp/tc.json         # render those results

The problems are those of ``benchmarks/trajopt.py``'s batch table (arm7, T = 100, Euler steps of
10 ms, random start and goal postures from seed 2), float64, FDDP with ``th_stop = 1e-9``.

* jaxdyn: a child process started with ``JAXDYN_FUSED_CPU_LOOPS=1`` (XLA compiles each knot loop
  into one kernel, :func:`jaxdyn.config.fused_cpu_loops`) and ``jax_num_cpu_devices = N``
  solves the batch with ``solve_sharded(problems, devices=jax.devices())`` (best of 3 solves
  after compilation), the process pinned to the k cores it uses: k = 1 and k = N, and k = N
  with XLA's default flags.
* Crocoddyl: worker processes, each pinned to its own core, convert their share of the
  problems (problem i goes to worker i mod N), wait until all are ready, then solve their
  share one problem after another (best of 3 solves each, as ``trajopt.py``). One worker is
  the one-by-one baseline; N workers are Crocoddyl on the same cores as jaxdyn. A batch's time
  is the largest of its workers' sums.

Writes the section "## Batched MPC on a many-core CPU" of benchmarks/RESULTS.md (one table per
machine; a later run on the same CPU model and core count replaces its table).
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
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

TITLE = "## Batched MPC on a many-core CPU"
T, SEED = 100, 2


def _cores():
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def _child(args, env_extra=None, stdin=None):
    env = dict(os.environ, JAX_PLATFORMS="cpu", **(env_extra or {}))
    return subprocess.Popen(
        [sys.executable, __file__, *args],
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _last_json(proc, what):
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- jaxdyn child


def jaxdyn_child(batch, ncores, cores, repeats=3):
    """``solve_sharded`` over ``ncores`` CPU devices, this process pinned to ``cores``."""
    os.sched_setaffinity(0, {int(c) for c in cores.split(",")})
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
    ).strip()
    import jax

    jax.config.update("jax_num_cpu_devices", ncores)
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    from _trajopt_problems import MAX_ITER, load_model, random_problems

    import jaxdyn
    from jaxdyn.trajopt import ddp

    model = load_model("arm7")[0]
    probs = random_problems(model, T, batch, SEED)

    def solve():
        return jax.block_until_ready(ddp.solve_sharded(probs, max_iter=MAX_ITER))

    t0 = time.perf_counter()
    r = solve()
    compile_s = time.perf_counter() - t0
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = solve()
        best = min(best, time.perf_counter() - t0)
    rows = [
        dict(
            devices=len(jax.devices()),
            solve_s=best,
            compile_s=compile_s - best,
            iters=np.asarray(r.iterations).tolist(),
            costs=np.asarray(r.cost).tolist(),
            status=np.asarray(r.status).tolist(),
        )
    ]
    print(
        json.dumps(
            dict(fused=jaxdyn.config.fused_cpu_loops_enabled(), jax=jax.__version__, rows=rows)
        )
    )


# ----------------------------------------------------------------------------- Crocoddyl worker


def crocoddyl_worker(batch, index, nworkers, core):
    os.environ["JAXDYN_BENCH_ALL_CORES"] = "1"  # trajopt.py would pin to the last core
    import trajopt as TB  # noqa: E402 - its load() turns jax_enable_x64 on

    os.sched_setaffinity(0, {core})
    import jax
    from _trajopt_problems import random_problems

    model, pm, conv = TB.load("arm7")
    stacked = random_problems(model, T, batch, SEED)
    mine = list(range(index, batch, nworkers))
    problems = [jax.tree.map(lambda a, i=i: a[i], stacked) for i in mine]
    print("ready", flush=True)
    sys.stdin.readline()  # go
    out = []
    for i, p in zip(mine, problems, strict=True):
        c = TB.crocoddyl_solve(p, pm, conv, repeats=3)
        out.append(dict(i=i, time=c["time"], iters=int(c["iters"]), cost=float(c["cost"]),
                        ok=bool(c["ok"])))  # fmt: skip
    print(json.dumps(out), flush=True)


def crocoddyl(batch, cores):
    """Workers pinned to ``cores``, started together once all have converted their problems."""
    procs = [
        _child(
            ["--crocoddyl-worker", str(batch), str(i), str(len(cores)), str(c)],
            stdin=subprocess.PIPE,
        )
        for i, c in enumerate(cores)
    ]
    for p in procs:
        line = p.stdout.readline()
        if line.strip() != "ready":
            _, err = p.communicate()
            raise RuntimeError(f"Crocoddyl worker failed:\n{line}{err[-3000:]}")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    per = [_last_json(p, "Crocoddyl worker") for p in procs]
    solves = sorted((s for w in per for s in w), key=lambda s: s["i"])
    return dict(
        cores=len(cores),
        solve_s=max(sum(s["time"] for s in w) for w in per),
        iters=[s["iters"] for s in solves],
        costs=[s["cost"] if s["ok"] else float("nan") for s in solves],
    )


# ----------------------------------------------------------------------------- driver


def run(batch, ncores):
    import _env

    cores = _cores()[:ncores]
    res = dict(
        cpu=_env.cpu_name(),
        cores_allowed=len(_cores()),
        ncores=len(cores),
        batch=batch,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        host=os.uname().nodename,
    )
    res["crocoddyl_one"] = crocoddyl(batch, cores[-1:])
    print("Crocoddyl, one core:", res["crocoddyl_one"]["solve_s"], flush=True)
    res["crocoddyl_all"] = crocoddyl(batch, cores)
    print(f"Crocoddyl, {len(cores)} cores:", res["crocoddyl_all"]["solve_s"], flush=True)
    runs = [("jaxdyn_fused", "1", cores[-1:]), ("jaxdyn_fused", "1", cores), ("jaxdyn", "0", cores)]
    for key, fused, cs in runs:
        args = ["--jaxdyn-child", str(batch), str(len(cs)), ",".join(map(str, cs))]
        proc = _child(args, env_extra={"JAXDYN_FUSED_CPU_LOOPS": fused})
        out = _last_json(proc, key)
        res.setdefault(key, dict(out, rows=[]))["rows"] += out["rows"]
        print(key, [(r["devices"], r["solve_s"]) for r in out["rows"]], flush=True)
    return res


def _table(res):
    import numpy as np

    B = res["batch"]
    one, allc = res["crocoddyl_one"], res["crocoddyl_all"]
    ref = np.asarray(one["costs"])
    rate1, rate_n = B / one["solve_s"], B / allc["solve_s"]

    def row(name, cores, t, iters, costs=None, compile_s=None, same=None):
        rate = B / t
        rel = ""
        if costs is not None:
            c = np.asarray(costs)
            ok = np.isfinite(c) & np.isfinite(ref)
            rel = f"{np.max(np.abs(c[ok] - ref[ok]) / np.abs(ref[ok])):.1e}"
        return (
            f"| {name} | {cores} | {min(iters)}-{max(iters)} | {t:.3f} | {rate:,.0f} | "
            f"{rate / rate1:.1f}x | {'' if same is None else f'{rate / same:.2f}x'} | {rel} | "
            f"{'' if compile_s is None else f'{compile_s:.1f}'} |"
        )

    n = res["ncores"]
    out = [
        f"### {res['cpu']}, {n} cores",
        "",
        f"Run {res['date']} (jax {res['jaxdyn_fused']['jax']}); batch of {B}; "
        f"{res['cores_allowed']} cores allowed, {n} used.",
        "",
        "| solver | cores | iterations | s / batch | problems / s | vs Crocoddyl, one core "
        "| vs Crocoddyl, same cores | max rel. cost diff. | compile s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        row("Crocoddyl FDDP, one by one", 1, one["solve_s"], one["iters"], same=rate1),
        row(
            f"Crocoddyl FDDP, {n} processes",
            n,
            allc["solve_s"],
            allc["iters"],
            allc["costs"],
            same=rate_n,
        ),  # fmt: skip
    ]
    for key, label in (("jaxdyn_fused", "fused CPU loops"), ("jaxdyn", "default XLA flags")):
        for r in res[key]["rows"]:
            k = r["devices"]
            out.append(
                row(
                    f"jaxdyn solve_sharded, {label}",
                    k,
                    r["solve_s"],
                    r["iters"],
                    r["costs"],
                    r["compile_s"],
                    same=rate1 if k == 1 else rate_n,
                )
            )
    return "\n".join(out)


def render(results) -> str:
    out = [
        TITLE,
        "",
        "`python benchmarks/trajopt_cores.py` (see its docstring): 64 arm7 reaching problems "
        f'(T = {T}, those of the batch table of "Trajectory optimisation"), FDDP, float64, '
        "everything on the CPU named. jaxdyn: `jaxdyn.trajopt.solve_sharded(problems)` "
        "in a process pinned to k cores with `jax_num_cpu_devices = k`: each of the k CPU "
        "devices solves its share one problem after "
        "another (`lax.map`), so a problem iterates only as long as it needs; rows with fused "
        "CPU loops (`JAXDYN_FUSED_CPU_LOOPS=1`) and with XLA's default flags; best of 3 solves "
        "after compilation. Crocoddyl: `SolverFDDP` (C++, one thread) in worker processes, "
        "each pinned to one core and solving its share one after another (best of 3 solves "
        "each), all started together; the batch's time is the slowest worker's. Ratios: "
        "problems per second over Crocoddyl's one-by-one rate (the issue's baseline), and over "
        "Crocoddyl run on the same number of cores. Cost diff.: largest relative difference "
        "from Crocoddyl's one-by-one costs.",
    ]
    for res in results:
        out += ["", _table(res)]
    return "\n".join(out) + "\n" + READING


READING = """
Reading: on the 16-core host of the H100 machine (the OS's 16 cores; Crocoddyl's 16
processes reach 8.5x its one-core rate, so they are not 16 independent full cores) jaxdyn
solves the batch of 64 at **11.0x Crocoddyl's one-by-one throughput**, the issue's "10x when
64+ problems are solved at once", and 1.30x Crocoddyl given the same 16 cores; per core
jaxdyn's fused solve is 1.3-1.5x Crocoddyl's on both CPUs. Without fused loops a CPU device
runs its problem as thousands of small kernels and the 16 devices scale poorly (2.0x). The
same batch on the H100 GPU is latency-bound (section "Trajectory optimisation on a GPU":
1.8x on the H200); XLA's CUDA-graph command buffers for loops
(`--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL`) took it from 0.351 to 0.313 s on the
H100 (B = 1024: 0.873 to 0.815 s), and `--xla_gpu_command_buffer_unroll_loops=true` on top
failed in XLA ("Recorded commands are not empty"). For batched MPC at B = 64 a many-core CPU
is the better machine; from B = 1024 the GPU.
"""


def _merge_existing(results):
    """Keep the tables of other machines already in the section (stored as JSON beside it)."""
    store = HERE / "gpu_runs" / "trajopt_cores.json"
    old = json.loads(store.read_text()) if store.exists() else []
    keys = {(r["cpu"], r["ncores"]) for r in results}
    merged = [r for r in old if (r["cpu"], r["ncores"]) not in keys] + list(results)
    store.write_text(json.dumps(merged, indent=1))
    return merged


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--cores", type=int, default=0, help="cores to use (default: all allowed)")
    p.add_argument("--json", help="write the raw results here")
    p.add_argument("--from-json", nargs="+", help="render these result files")
    p.add_argument("--no-write", action="store_true", help="do not write RESULTS.md")
    p.add_argument("--out", default=str(HERE / "RESULTS.md"))
    p.add_argument("--jaxdyn-child", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--crocoddyl-worker", nargs=4, type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.jaxdyn_child:
        return jaxdyn_child(int(a.jaxdyn_child[0]), int(a.jaxdyn_child[1]), a.jaxdyn_child[2])
    if a.crocoddyl_worker:
        return crocoddyl_worker(*a.crocoddyl_worker)
    if a.from_json:
        results = [json.loads(Path(f).read_text()) for f in a.from_json]
    else:
        res = run(a.batch, a.cores or len(_cores()))
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1))
        results = [res]
    if a.no_write:
        print(_table(results[-1]))
        return
    from _env import write_section

    text = render(_merge_existing(results))
    print(text)
    write_section(a.out, text)


if __name__ == "__main__":
    main()

"""Batch-1 latency of jaxdyn's algorithms against Pinocchio's C++, with JAX's dispatch floor.

    python benchmarks/batch1.py                        # solo12, talos_full
    python benchmarks/batch1.py --robots solo12 --rounds 5 --out /tmp/r.md
    python benchmarks/batch1.py --robots solo12 --algs rnea --rounds 3 --out /tmp/r.md

One robot at a time (no ``vmap``), float64, one pinned core on both sides (as
``benchmarks/vs_cpp.py``). Every call waits for its result (``jax.block_until_ready``), as a
control loop does (``compile_for_latency``'s numpy results are ready when returned). Per
robot, in one process per dispatch mode of JAX's CPU client (the mode is fixed when JAX starts
its backend, so the two cannot share a process):

* *async*: JAX's default (``jax_cpu_enable_async_dispatch``): a program XLA counts at over
  1000 flops is handed to a worker thread, and the caller waits for it;
* *sync*: ``jax.config.update("jax_cpu_enable_async_dispatch", False)``: every program runs on
  the calling thread.

Rows: the *floor*, a jitted identity with the same arguments (``q, v, a`` with the model
closed over; the model passed as an argument, as ``jax.jit(jaxdyn.rnea)(model, ...)``); each
algorithm jitted with the model passed and closed over (``jax.jit(lambda q, v, a: f(model,
q, v, a))``), and passed with the switch ``fused_unbatched`` off (XLA's usual kernels instead
of one: :mod:`jaxdyn.backend.small_calls`); the eager call ``f(model, q, v, a)`` (jaxdyn
compiles it once and dispatches it: :mod:`jaxdyn.eager`); and ``jaxdyn.compile_for_latency(f,
model, q, v, a)`` called with numpy arrays and returning numpy arrays (:mod:`jaxdyn.latency`:
the model closed over, the arguments packed into one vector, a synchronous XLA:CPU client of
jaxdyn's own in both modes of the process); ``compile_for_latency(f, model, q, v, a,
dispatch="native")`` (rnea, crba, aba, minv, rnea_derivatives, aba_derivatives: jaxdyn's C
kernels called without XLA through jaxdyn's extension module, :mod:`jaxdyn.backend.host_calls`;
new numpy arrays per call), and the same call object's ``ctypes`` path (the Python class
alone, what a Python without its headers gets); *in-program loop, per
evaluation*: the algorithm evaluated ``LOOP`` times in one program (``lax.fori_loop``, each
evaluation depending on the last, value checks off), the time per evaluation: its own
computation without the per-call work of JAX's dispatch and XLA's runtime, which the floor
rows measure (a jitted identity, and an identity through ``compile_for_latency``). Kernels:
the operations of the optimised program's entry computation other than parameters,
constants, bitcasts and tuples (what XLA:CPU's runtime launches; its loop-free programs at
batch 1). Times are medians over
``--rounds`` rounds that interleave every row; wall time (``time.perf_counter``) and the
process's CPU time (``time.process_time``, which on a loaded machine is the steadier of the
two).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _env import cpu_name, git_commit, single_threaded, write_section  # noqa: E402

ALGS = ("rnea", "crba", "aba", "minv", "rnea_derivatives", "aba_derivatives")
#: eager calls are timed for these (the others compile the same way)
EAGER = ("rnea", "aba")
#: evaluations per call of the *kernel alone* rows (a loop of dependent evaluations)
LOOP = 100
HEADING = "## Batch-1 latency against Pinocchio C++"


def _args(alg, st):
    return (st["q"],) if alg in ("crba", "minv") else (st["q"], st["v"], st["a"])


def _kernels(compiled) -> int:
    text = compiled.as_text()
    entry = text.split("ENTRY", 1)[1].split("\n}", 1)[0] if "ENTRY" in text else text
    skip = ("parameter(", " constant(", " bitcast(", " tuple(", " get-tuple-element(")
    return sum(1 for ln in entry.splitlines() if " = " in ln and not any(k in ln for k in skip))


def _looped(f, model, args):
    """``f(model, *args)`` evaluated :data:`LOOP` times in one program (``lax.fori_loop``, each
    evaluation's arguments shifted by 1e-300 times the previous result's first entry, so that
    XLA neither hoists nor drops one), without value checks: the algorithm's own computation
    per evaluation, the one-kernel call inside the loop's body, without the per-call work of
    JAX's dispatch and XLA's runtime. Compiled here."""
    import jax
    import jax.numpy as jnp

    import jaxdyn

    def run(*xs):
        def body(_, c):
            d = jnp.ravel(jax.tree_util.tree_leaves(f(model, *c))[0])[0]
            return tuple(x + 1e-300 * d for x in c)

        return jax.lax.fori_loop(0, LOOP, body, tuple(xs))

    with jaxdyn.value_checks.unchecked():
        return jax.jit(run).lower(*args).compile()


def measure(robot: str, sync: bool, rounds: int, calls: int, algs=ALGS) -> dict:
    """The rows of one robot in this process (``sync``: JAX's dispatch made synchronous)."""
    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_enable_async_dispatch", not sync)
    import jaxdyn
    from jaxdyn import robots

    model = robots.load(robot)
    key = jax.random.PRNGKey(0)
    st = {
        "q": jaxdyn.random_configuration(model, key),
        "v": jax.random.normal(jax.random.PRNGKey(1), (model.nv,)),
        "a": jax.random.normal(jax.random.PRNGKey(2), (model.nv,)),
    }
    rows = [
        ("floor", "identity, closed over", jax.jit(lambda q, v, a: q), _args("rnea", st), None),
        (
            "floor",
            "identity, model passed",
            jax.jit(lambda m, q, v, a: q),
            (model, *_args("rnea", st)),
            None,
        ),
    ]
    npst = tuple(np.asarray(x) for x in _args("rnea", st))
    ident = jaxdyn.compile_for_latency(lambda m, q, v, a: q, model, *npst)
    rows.append(("floor", "identity, compile_for_latency (numpy)", ident, npst, None))
    per = {}  # evaluations per call of a row (1 where absent)
    for alg in algs:
        f = getattr(jaxdyn, alg)
        args = _args(alg, st)
        jp = jax.jit(f)
        jc = jax.jit(lambda *x, f=f: f(model, *x))
        rows.append((alg, "passed", jp, (model, *args), jp.lower(model, *args).compile()))
        # the same call with XLA's usual kernels (switch fused_unbatched off), for the A/B
        with jaxdyn.config.override(fused_unbatched=False):
            off = jax.jit(lambda *x, f=f: f(*x)).lower(model, *args).compile()
        rows.append((alg, "passed, one kernel off", off, (model, *args), off))
        rows.append((alg, "closed over", jc, args, None))
        npargs = tuple(np.asarray(x) for x in args)
        lat = jaxdyn.compile_for_latency(f, model, *npargs)
        rows.append((alg, "compile_for_latency (numpy)", lat, npargs, None))
        if alg in jaxdyn.latency.NATIVE_FUNCTIONS:
            nat = jaxdyn.compile_for_latency(f, model, *npargs, dispatch="native")
            if isinstance(nat, jaxdyn.latency.NativeCall):  # else the kernels are not built
                rows.append((alg, "compile_for_latency native (numpy)", nat, npargs, None))
                if nat._fast:  # the same call's ctypes path (the Python class), for the A/B
                    native = jaxdyn.latency.NativeCall
                    plain = native(nat.__name__, model, nat.shapes, nat.dtype)
                    rows.append((alg, "native, ctypes path", plain, npargs, None))
        if alg in EAGER:
            rows.append((alg, "eager", f, (model, *args), None))
        rows.append((alg, "in-program loop, per evaluation", _looped(f, model, args), args, None))
        per[(alg, "in-program loop, per evaluation")] = LOOP
    times = {(r[0], r[1]): {"wall": [], "cpu": []} for r in rows}
    ready = jax.block_until_ready
    for _, _, fn, args, _ in rows:
        jax.block_until_ready(fn(*args))
    for _ in range(rounds):
        for alg, how, fn, args, _ in rows:
            k = per.get((alg, how), 1)
            n = max(2, calls // k)  # calls of this row; n * k evaluations
            # numpy results (compile_for_latency) are ready when returned: no
            # block_until_ready, whose walk over the result costs about 1 us of its own
            numpy_out = (jaxdyn.latency.LatencyCall, jaxdyn.latency.NativeCall)
            wait = (lambda r: r) if isinstance(fn, numpy_out) else ready
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(n):
                wait(fn(*args))
            times[(alg, how)]["wall"].append((time.perf_counter() - t0) / (n * k) * 1e6)
            times[(alg, how)]["cpu"].append((time.process_time() - c0) / (n * k) * 1e6)
    out = {}
    for alg, how, _, _, compiled in rows:
        t = times[(alg, how)]
        out[f"{alg}|{how}"] = {
            "wall_us": statistics.median(t["wall"]),
            "cpu_us": statistics.median(t["cpu"]),
            "kernels": None if compiled is None else _kernels(compiled),
        }
    return out


def _pinocchio(robot: str) -> dict:
    import pinocchio_cpp

    from jaxdyn import robots

    path, fb = robots.resolve(robot)
    pin = pinocchio_cpp.time_pinocchio(str(path), fb)
    return {a: pin["ns_per_call"][a]["best"] / 1e3 for a in ALGS if a in pin["ns_per_call"]}


def render(results: dict, args) -> str:
    import jax

    import jaxdyn

    lines = [
        HEADING,
        "",
        f"`python benchmarks/batch1.py` on {cpu_name()}, one pinned core, jax {jax.__version__}, "
        f"jaxdyn {jaxdyn.__version__} ({git_commit()}), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        + (f"; {args.note}" if args.note else "."),
        "",
        "One robot at a time, float64, every call waiting for its result. us per call, median "
        f"of {args.rounds} interleaved rounds; *async*: JAX's default dispatch, *sync*: "
        '`jax.config.update("jax_cpu_enable_async_dispatch", False)` (one process each). '
        "Ratio: jaxdyn wall time / Pinocchio C++ (the issue's target <= 2). *floor*: a jitted "
        "identity with the same arguments. *compile_for_latency (numpy)*: "
        "`jaxdyn.compile_for_latency(f, model, *args)` called with numpy arrays, numpy out, on "
        "jaxdyn's own synchronous client whatever the process's mode. *compile_for_latency "
        'native (numpy)*: the same with `dispatch="native"`, jaxdyn\'s C kernel called without '
        "XLA (rnea, crba, aba, minv, rnea_derivatives, aba_derivatives) through jaxdyn's "
        "extension module (the call object's type in C: the arguments' checks and copies, the "
        "kernel and a new result array without a Python frame); *native, ctypes path*: the "
        "Python class alone (`jaxdyn.latency.NativeCall`: ctypes and Python's checks and "
        "copies), what a Python without its headers (no Python.h) or `JAXDYN_HOST_MODULE=0` "
        "gets. "
        "*in-program loop, per "
        f"evaluation*: {LOOP} dependent evaluations in one program (`lax.fori_loop`, no value "
        "checks), time per evaluation (the computation without the per-call dispatch). "
        "Kernels: the optimised program's entry operations (model passed).",
    ]
    for robot, res in results.items():
        pin = res["pinocchio"]
        lines += [
            "",
            f"### {robot}",
            "",
            "| function | call | Pinocchio us | async wall us | ratio | sync wall us | ratio "
            "| async CPU us | sync CPU us | kernels |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for key, a in res["async"].items():
            s = res["sync"].get(key, {})
            alg, how = key.split("|")
            p = pin.get(alg)

            def ratio(x, p=p):
                return "-" if p is None or x is None else f"{x / p:.1f}"

            lines.append(
                f"| {alg} | {how} | {'-' if p is None else f'{p:.2f}'} "
                f"| {a['wall_us']:.1f} | {ratio(a['wall_us'])} "
                f"| {s.get('wall_us', float('nan')):.1f} | {ratio(s.get('wall_us'))} "
                f"| {a['cpu_us']:.1f} | {s.get('cpu_us', float('nan')):.1f} "
                f"| {'-' if a['kernels'] is None else a['kernels']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python benchmarks/batch1.py", description=(__doc__ or "").split("\n")[0]
    )
    p.add_argument("--robots", default="solo12,talos_full")
    p.add_argument("--algs", default=",".join(ALGS), help="algorithms (development runs)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=300, help="calls per row and round")
    p.add_argument("--out", default=str(HERE / "RESULTS.md"))
    p.add_argument("--note", default="", help="a line about the machine (load, sharing)")
    p.add_argument("--child", help=argparse.SUPPRESS)  # robot,mode: one measurement as JSON
    a = p.parse_args(argv)
    single_threaded()
    if a.child:
        robot, mode = a.child.split(",")
        algs = tuple(x for x in a.algs.split(",") if x)
        print(json.dumps(measure(robot, mode == "sync", a.rounds, a.calls, algs)))
        return 0
    results = {}
    for robot in a.robots.split(","):
        res = {"pinocchio": _pinocchio(robot)}
        for mode in ("async", "sync"):
            cmd = [sys.executable, __file__, "--child", f"{robot},{mode}"]
            cmd += ["--rounds", str(a.rounds), "--calls", str(a.calls), "--algs", a.algs]
            r = subprocess.run(cmd, capture_output=True, text=True, check=True)
            res[mode] = json.loads(r.stdout.strip().splitlines()[-1])
            print(f"[{robot}] {mode} done", flush=True)
        results[robot] = res
    section = render(results, a)
    print(section)
    write_section(a.out, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""jaxdyn under the plain ``jax.jit(jax.vmap(f))`` users write, against Pinocchio's C++.

    python benchmarks/vs_cpp.py                      # solo12, talos_full; float64, float32
    python benchmarks/vs_cpp.py --robots solo12 --dtypes float64 --out /tmp/r.md
    python benchmarks/vs_cpp.py --plain-only --plain-rounds 2 --out /tmp/r.md   # headline only

Two measurements, one section. The headline, **plain process** (what README gives a user;
:func:`plain_rounds`): jaxdyn in fresh child processes started with this script's environment
minus ``XLA_FLAGS``, ``MALLOC_*`` and ``GLIBC_TUNABLES`` (:func:`plain_env`), not pinned, no
``mallopt``, JAX's default threads, each algorithm as README's API tour writes it
(``jax.jit(jax.vmap(alg, in_axes=(None, 0, ...)))`` called with the model; ``--plain-form
closed``: the model closed over), B = 1024, float64 and float32, per sample the median of
at least :data:`PLAIN_CALLS` calls (and :data:`PLAIN_MIN_S` seconds of calls) after a
warm-up right before them. Pinocchio C++ is timed in its own process just before and after
each algorithm's calls, and the ratio is taken within a round and its median over the rounds
(``--plain-rounds``), so that a loaded machine weighs on both sides of it. The table gives
each ratio against the issue's targets (PASS/FAIL) and the CPU seconds per wall second of
jaxdyn's calls (above 1: more than one thread ran them).

Then the **tuned process** tables, labelled with the settings a user must apply to get them:
one machine, one core on both sides (the process pinned to one core: XLA's runtime would
otherwise run independent kernels on a second core, see ``benchmarks/_env.py``; Pinocchio's
loop on the same core), freed buffers kept by glibc (``mallopt``). For each robot:

* Pinocchio C++ per call (``benchmarks/pinocchio_cpp.py`` compiles ``pinocchio_cpp/bench.cpp``
  with ``-O3 -march=native`` against the ``pin`` wheel's headers; without a compiler it falls
  back to the Python bindings and the table says so);
* jaxdyn per sample at batch ``B`` (default 1024) under ``jax.jit(jax.vmap(f))`` -- the batching
  rule of jaxdyn's public functions evaluates it in cache-sized chunks on the CPU
  (:mod:`jaxdyn.batching`) -- and, for comparison, with that rule switched off
  (``jaxdyn.config.update("vmap_chunk", 0)``: one ``vmap`` over the whole batch); for crba and
  aba, computed on the CPU by jaxdyn's C kernels (``cpu_kernels``), the comparison is XLA's
  code for the same algorithm (``cpu_kernels=False``);
* batch-1 latency of ``jax.jit(f)`` (``--latency``, float64) with the model as an argument
  and closed over (``jax.jit(lambda q: f(model, q))``, where its arrays are constants that
  the kinematics fold at trace time), of ``jaxdyn.compile_for_latency(..., dispatch=
  "native")`` (jaxdyn's C kernels without XLA, numpy in and out), and the number of XLA
  kernels of the first;
* the arithmetic: flops per sample from XLA's cost analysis of the traced (unoptimised)
  batched program, the rate it achieves (GFLOP/s) and the share of this core's measured
  float64/float32 peak (a large single-threaded matrix product). The optimised program's count
  is kept in the JSON (``flops_compiled``) but not used: where XLA fuses a whole level's
  product into a kernel that uses a slice of it, the analysis counts the whole product in each
  such kernel (talos_full's body placements: 44,666 flops optimised against 9,685 traced),
  work the kernel never does.

Ratios are jaxdyn time / Pinocchio time per sample (< 1: jaxdyn is faster). Pinocchio is
float64 only; float32 rows are compared with the same float64 Pinocchio numbers. The section
"Plain jax.vmap against Pinocchio C++" of ``benchmarks/RESULTS.md`` is (re)written.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _env  # noqa: E402
from _env import cpu_name, reuse_freed_buffers, single_threaded, timed, write_section  # noqa: E402

ALGS = ("rnea", "crba", "aba", "minv", "rnea_derivatives", "aba_derivatives")
#: algorithms computed by a C kernel of jaxdyn's on the CPU (``cpu_kernels``)
KERNELS = ("crba", "aba")
#: algorithms whose Pinocchio result is one triangle; ``<alg>_full`` times it mirrored
FULL = ("crba", "minv")
#: issue targets: ratio to Pinocchio C++ per sample at B = 1024, float64
TARGETS = {
    "rnea": 1.0,
    "crba": 1.0,
    "aba": 1.0,
    "minv": 1.0,
    "rnea_derivatives": 1.2,
    "aba_derivatives": 1.2,
}


#: environment variables that tune a process for a benchmark; the plain process runs without
#: them (with everything else of the caller's environment)
TUNING_ENV = ("XLA_FLAGS", "GLIBC_TUNABLES")
TUNING_ENV_PREFIXES = ("MALLOC_",)
#: the environment this script started with (before :func:`_env.single_threaded` adds to it)
_START_ENV = dict(os.environ)
#: the cores this script was allowed at the start (before the tuned runs pin it)
_START_CORES = _env.cores_note()


def plain_env(env=None) -> dict:
    """``env`` (default: this script's starting environment) without the tuning variables
    (:data:`TUNING_ENV`, ``MALLOC_*``): the environment of the plain process."""
    env = dict(_START_ENV if env is None else env)
    return {
        k: v
        for k, v in env.items()
        if k not in TUNING_ENV and not k.startswith(TUNING_ENV_PREFIXES)
    }


def _fn(alg):
    import jaxdyn

    return {
        "rnea": (jaxdyn.rnea, ("q", "v", "a")),
        "crba": (jaxdyn.crba, ("q",)),
        "aba": (jaxdyn.aba, ("q", "v", "tau")),
        "minv": (jaxdyn.minv, ("q",)),
        "rnea_derivatives": (jaxdyn.rnea_derivatives, ("q", "v", "a")),
        "aba_derivatives": (jaxdyn.aba_derivatives, ("q", "v", "tau")),
    }[alg]


def peak_gflops(dtype: str) -> float:
    """Single-threaded matrix-product rate of this core (GFLOP/s): the practical peak."""
    import jax
    import jax.numpy as jnp

    n = 768
    a = jnp.ones((n, n), dtype) * 0.5
    f = jax.jit(lambda x: x @ x)
    return 2 * n**3 / timed(f, (a,), repeats=5, min_time=0.2) / 1e9


def _states(model, B, dtype, seed=0):
    import jax
    import numpy as np

    import jaxdyn

    keys = jax.random.split(jax.random.PRNGKey(seed), B)
    q = jax.jit(jax.vmap(lambda k: jaxdyn.random_configuration(model, k, dtype=dtype)))(keys)
    rng = np.random.default_rng(seed)
    st = {"q": q}
    for k, s in (("v", 1.0), ("a", 1.0), ("tau", 10.0)):
        st[k] = jax.numpy.asarray(s * rng.standard_normal((B, model.nv)), dtype)
    return st


def _first_call(jf, args) -> float:
    """Seconds of the first call of a jitted function (trace, compile and one run)."""
    import jax

    t0 = time.perf_counter()
    jax.block_until_ready(jf(*args))
    return time.perf_counter() - t0


def _flops(stage):
    """Flops of a ``Lowered`` (the traced program) or ``Compiled`` (the optimised one)."""
    ca = stage.cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    return float((ca or {}).get("flops", float("nan")))


def _set_flops(row, jf, args, B):
    """The per-sample flops of ``jf(*args)`` (loop-free: XLA counts a loop body once), traced
    and optimised."""
    lowered = jf.lower(*args)
    row["flops"] = _flops(lowered) / B
    row["flops_compiled"] = _flops(lowered.compile()) / B


def _kernels(compiled) -> int:
    """Instructions of the entry computation of the optimised HLO (fusions, calls, custom
    calls, loops): the kernels XLA:CPU launches per call."""
    text = compiled.as_text()
    entry = text.split("ENTRY", 1)[1] if "ENTRY" in text else text
    body = entry.split("\n}", 1)[0]
    return sum(1 for ln in body.splitlines() if " = " in ln and "parameter(" not in ln)


def bench_robot(name, dtypes, B, latency, log):
    import jax
    import numpy as np
    import pinocchio_cpp

    import jaxdyn
    from jaxdyn import robots
    from jaxdyn.algorithms import crba as crba_mod
    from jaxdyn.batching import chunk_size_for

    path, fb = robots.resolve(name)
    log(f"[{name}] Pinocchio ...")
    pin = pinocchio_cpp.time_pinocchio(str(path), fb)
    pin_ns = {a: pin["ns_per_call"][a]["best"] for a in ALGS if a in pin["ns_per_call"]}
    # crba and minv mirrored to the full symmetric matrix, as jaxdyn returns them
    full_ns = {a: pin["ns_per_call"].get(f"{a}_full", {}).get("best") for a in FULL}
    model = robots.load(name)
    rows = []
    for dtype in dtypes:
        st = _states(model, B, dtype)
        for alg in ALGS:
            f, names = _fn(alg)
            args = tuple(st[k] for k in names)
            row = {"robot": name, "dtype": dtype, "alg": alg, "pin_ns": pin_ns.get(alg)}
            row["pin_full_ns"] = full_ns.get(alg)
            words = getattr(jaxdyn, alg).chunk_words
            itemsize = 8 if dtype == "float64" else 4
            row["chunk"] = (
                None if words is None else chunk_size_for(words(model, itemsize), B, itemsize)
            )
            # functions without a batching rule: "rule" and "plain" are the same program; where
            # jaxdyn's C kernel computes the batch (crba on the CPU), "plain" is XLA's code
            row["kernel"] = alg in KERNELS and crba_mod.kernel_usable(model, dtype)
            variants = (("rule", -1, True), ("plain", 0, True)) if words else (("rule", -1, True),)
            if row["kernel"]:
                variants = (("rule", -1, True), ("plain", -1, False))
            for key, chunk, kernels in variants:
                with jaxdyn.config.override(vmap_chunk=chunk, cpu_kernels=kernels):
                    # timed through the jitted function (C++ dispatch), not the Compiled object,
                    # whose Python call path alone costs about 0.2 ms
                    jf = jax.jit(jax.vmap(f, in_axes=(None,) + (0,) * len(args)))
                    row[f"{key}_compile_s"] = _first_call(jf, (model, *args))
                    row[f"{key}_ns"] = timed(jf, (model, *args)) / B * 1e9
                    if key == "plain" and not row["kernel"]:
                        # XLA counts a loop body once: flops of the loop-free one
                        _set_flops(row, jf, (model, *args), B)
            if row["kernel"]:  # XLA's cost analysis does not see inside the kernel
                row["flops"] = row["flops_compiled"] = float("nan")
            if not words:
                # no rule: the program is already loop-free
                row["plain_ns"], row["plain_compile_s"] = row["rule_ns"], row["rule_compile_s"]
                _set_flops(row, jf, (model, *args), B)
            if latency and dtype == "float64":
                one = tuple(x[0] for x in args)
                j1 = jax.jit(f)
                _first_call(j1, (model, *one))
                row["b1_ns"] = timed(j1, (model, *one)) * 1e9
                row["b1_kernels"] = _kernels(j1.lower(model, *one).compile())
                # the model closed over (what a user's jax.jit(lambda q: f(model, q)) compiles):
                # its arrays are constants, which jaxdyn's kinematics fold at trace time
                jc = jax.jit(lambda *a, f=f: f(model, *a))
                _first_call(jc, one)
                row["b1c_ns"] = timed(jc, one) * 1e9
                # without XLA: compile_for_latency's native dispatch (jaxdyn's C kernels
                # through ctypes, numpy in and out), where the kernels are built
                row["b1n_ns"] = None
                if alg in jaxdyn.latency.NATIVE_FUNCTIONS:
                    npone = tuple(np.asarray(x) for x in one)
                    nat = jaxdyn.compile_for_latency(f, model, *npone, dispatch="native")
                    if isinstance(nat, jaxdyn.latency.NativeCall):
                        row["b1n_ns"] = timed(nat, npone, block=False) * 1e9
            rows.append(row)
            log(
                f"[{name}] {dtype} {alg}: rule {row['rule_ns'] / 1e3:.2f} us, plain "
                f"{row['plain_ns'] / 1e3:.2f} us, Pinocchio "
                f"{(row['pin_ns'] or float('nan')) / 1e3:.2f} us"
            )
    return pin, rows


# ----------------------------------------------------------------------------- plain process
#: timed calls of each function in the plain process (after a warm-up call); their median
PLAIN_CALLS = 5
#: and at least this many seconds of them: a batch of solo12's ``crba`` (the C kernel) is 0.4 ms,
#: so five calls were 2 ms, in which one preemption or one call that maps its output afresh
#: (about 550 page faults, 1.3 ms) moved the median: its rounds' ratios ranged 0.61-2.92
PLAIN_MIN_S = 0.05
#: calls after the first (compile) before the timed ones
WARMUP_CALLS = 3
#: and at least this many seconds of them, right before the timed calls (after Pinocchio's
#: run before them): the first calls after a second of idling ran slower (talos_full's
#: ``crba``, 2026-12-03, the Intel VM: the first 5-8 calls after Pinocchio's run 3.6-3.9 us per
#: sample against 2.2 after), which the median of 10-15 calls then took for the kernel's time
WARMUP_MIN_S = 0.1


#: Pinocchio's C++ benchmark around each algorithm of the plain process: seconds per repeat,
#: repeats (its median is taken)
PIN_MIN_TIME, PIN_REPEATS = 0.01, 5


def _pin_now(pin_argv, alg) -> tuple[float, float]:
    """ns per call of ``alg`` (median and best of the repeats) from one run of Pinocchio's C++
    benchmark (``pin_argv``: the binary and its arguments; it times all algorithms, about a
    second)."""
    r = subprocess.run(pin_argv, capture_output=True, text=True, check=True)
    t = json.loads(r.stdout)["ns_per_call"][alg]
    return t["median"], t["best"]


def plain_child(robot, dtype, B, algs, form="argument", calls=PLAIN_CALLS, pin_argv=None):
    """In a plain process (:func:`plain_rounds` starts it): each algorithm as README writes it,
    ``jax.jit(jax.vmap(alg, in_axes=(None, 0, ...)))`` called with the model (``form=
    "argument"``) or ``jax.jit(jax.vmap(lambda q, ...: alg(model, q, ...)))`` (``"closed"``),
    at batch ``B``; the first call (compile), then with ``pin_argv`` (Pinocchio's C++
    benchmark, a process of its own) Pinocchio timed, then at least :data:`WARMUP_CALLS` calls
    and :data:`WARMUP_MIN_S` seconds of them as warm-up (glibc's heap settles over the first
    calls, and the first calls after idling run slow), then the median of at least ``calls``
    calls and :data:`PLAIN_MIN_S` seconds of them (``block_until_ready``), then Pinocchio
    timed again: Pinocchio is timed just before and just after jaxdyn's calls, so that the
    load of a shared machine weighs on both sides of the ratio.
    Returns ``{alg: {"ns",
    "cpu", "compile_s", "calls_ns", "pin_ns"}}``: ns per sample, CPU seconds per wall second
    of the timed calls (above 1: the call ran on several threads), the first call's seconds
    and Pinocchio's ns per call (``pin_ns``: the mean of the medians before and after;
    ``pin_best_ns``: the best repeat of both; ``None`` without ``pin_argv``)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    from jaxdyn import robots

    model = robots.load(robot)
    st = _states(model, B, dtype)
    out = {}
    for alg in algs:
        f, names = _fn(alg)
        args = tuple(st[k] for k in names)
        if form == "closed":
            jf = jax.jit(jax.vmap(lambda *a, f=f: f(model, *a)))
        else:
            jf = jax.jit(jax.vmap(f, in_axes=(None,) + (0,) * len(args)))
            args = (model, *args)
        compile_s = _first_call(jf, args)
        pin0 = _pin_now(pin_argv, alg) if pin_argv else None
        # then the warm-up (glibc's heap settles over the first calls; the first calls after
        # idling, here during Pinocchio's run, are slow), right before the timed calls
        n, w0 = 0, time.perf_counter()
        while n < WARMUP_CALLS or time.perf_counter() - w0 < WARMUP_MIN_S:
            jax.block_until_ready(jf(*args))
            n += 1
        walls, cpu0, w0 = [], time.process_time(), time.perf_counter()
        while len(walls) < calls or time.perf_counter() - w0 < PLAIN_MIN_S:
            t0 = time.perf_counter()
            jax.block_until_ready(jf(*args))
            walls.append(time.perf_counter() - t0)
        cpu = (time.process_time() - cpu0) / (time.perf_counter() - w0)
        pin1 = _pin_now(pin_argv, alg) if pin0 else None
        ns = [w / B * 1e9 for w in walls]
        out[alg] = {"ns": statistics.median(ns), "cpu": cpu, "compile_s": compile_s}
        out[alg].update(calls_ns=ns, pin_ns=None, pin_best_ns=None)
        if pin0 and pin1:
            out[alg]["pin_ns"] = (pin0[0] + pin1[0]) / 2
            out[alg]["pin_best_ns"] = min(pin0[1], pin1[1])
    return out


def _plain_process(robot, dtype, B, algs, form, env, pin_argv=None):
    """:func:`plain_child` in a fresh process with ``env``; its result."""
    code = (
        f"import sys, json; sys.path.insert(0, {str(HERE)!r}); import vs_cpp; "
        f"print('JSON', json.dumps(vs_cpp.plain_child({robot!r}, {dtype!r}, {B}, "
        f"{list(algs)!r}, {form!r}, pin_argv={pin_argv!r})))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=HERE.parent
    )
    if r.returncode != 0:
        raise RuntimeError(f"plain process ({robot}, {dtype}) failed:\n{r.stderr[-3000:]}")
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("JSON ")][-1]
    return json.loads(line[5:])


def plain_rounds(robots, dtypes, B, rounds, algs=ALGS, form="argument", log=print):
    """The plain-process measurement (module docstring): ``rounds`` rounds, each running
    jaxdyn in one fresh plain process per robot and dtype (:func:`plain_child`, environment
    :func:`plain_env`, no pinning, no ``mallopt``), Pinocchio's C++ benchmark (its own
    process) timed around each algorithm's calls (without the C++ build: the Python bindings,
    once per round). Returns ``{robot: (pin_info, rows)}``, one row per dtype and algorithm
    with every round's times (``pin_ns``, ``ns``: per sample; ``ratio``: ``ns / pin_ns`` of the
    same round) and their medians."""
    import pinocchio_cpp

    from jaxdyn import robots as robots_mod

    env = plain_env()
    results = {}
    rows = {}
    for k in range(rounds):
        for name in robots:
            path, fb = robots_mod.resolve(name)
            pin = pinocchio_cpp.time_pinocchio(
                str(path), fb, min_time=PIN_MIN_TIME, repeats=PIN_REPEATS
            )
            results.setdefault(name, (pin, []))
            pin_ns = {a: pin["ns_per_call"][a]["median"] for a in ALGS if a in pin["ns_per_call"]}
            pin_best = {a: pin["ns_per_call"][a]["best"] for a in ALGS if a in pin["ns_per_call"]}
            binary = pinocchio_cpp.build() if pin["source"] == "c++" else None
            pin_argv = None
            if binary is not None:
                pin_argv = [str(binary), str(path), "1" if fb else "0", "256"]
                pin_argv += [repr(PIN_MIN_TIME), str(PIN_REPEATS)]
            for dtype in dtypes:
                t0 = time.perf_counter()
                got = _plain_process(name, dtype, B, algs, form, env, pin_argv)
                for alg in algs:
                    row = rows.setdefault(
                        (name, dtype, alg),
                        {"robot": name, "dtype": dtype, "alg": alg, "runs": []},
                    )
                    g = got[alg]
                    ref = g["pin_ns"] or pin_ns.get(alg)
                    best = g["pin_best_ns"] or pin_best.get(alg)
                    row["runs"].append(
                        {
                            "pin_ns": ref,
                            "ns": g["ns"],
                            "cpu": g["cpu"],
                            "compile_s": g["compile_s"],
                            "ratio": g["ns"] / ref if ref else None,
                            "best_ratio": min(g["calls_ns"]) / best if best else None,
                        }
                    )
                log(
                    f"[plain, round {k + 1}/{rounds}] {name} {dtype} "
                    f"({time.perf_counter() - t0:.0f} s): "
                    + ", ".join(
                        f"{a} {rows[(name, dtype, a)]['runs'][-1]['ratio'] or float('nan'):.2f}x"
                        for a in algs
                    )
                )
    for (name, _, _), row in rows.items():
        for key in ("pin_ns", "ns", "cpu", "compile_s", "ratio", "best_ratio"):
            vals = [r[key] for r in row["runs"] if r.get(key) is not None]
            row[key] = statistics.median(vals) if vals else None
        results[name][1].append(row)
    return results


def _num(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _pin_desc(results) -> str:
    """Pinocchio's version and build, from the first robot's timing (``"?"`` where unknown)."""
    pin = next(iter(results.values()))[0] if results else {}
    src, flags = pin.get("source", "?"), pin.get("flags", "")
    return f"{pin.get('pinocchio_version', '?')} ({src}" + (
        f", `{flags}`)" if flags and src == "c++" else ")"
    )


def render_plain(results, B, rounds, form) -> str:
    """The headline table: the plain process's ratios and the targets."""
    call = (
        "jax.jit(jax.vmap(lambda q, ...: alg(model, q, ...)))"
        if form == "closed"
        else "jax.jit(jax.vmap(alg, in_axes=(None, 0, ...)))(model, q, ...)"
    )
    lines = [
        "### Plain process (what README gives a user)",
        "",
        f"jaxdyn in a fresh process with the caller's environment minus `XLA_FLAGS`, "
        "`MALLOC_*` and `GLIBC_TUNABLES`: not pinned, JAX's default threads, glibc's allocator "
        f"as jaxdyn leaves it; `{call}` as README writes it, B = {B}, per sample: the median "
        f"of at least {PLAIN_CALLS} calls and {PLAIN_MIN_S:g} s of calls after the first call "
        f"(compile) and, right before the timed calls, a warm-up of at least {WARMUP_CALLS} "
        f"calls and {WARMUP_MIN_S:g} s. Pinocchio "
        f"{_pin_desc(results)}, one thread, "
        "timed in its own process just before and just after each algorithm's calls (the "
        f"mean of the two); {rounds} rounds, each in fresh processes. *ratio*: the median over "
        "the rounds of jaxdyn / Pinocchio of the same round (< 1: jaxdyn faster); *range*: "
        "the rounds' lowest and highest ratio; *best*: the "
        "median over the rounds of jaxdyn's fastest call / Pinocchio's fastest repeat (on a "
        "loaded machine Pinocchio's short repeats escape the load more often than jaxdyn's "
        "calls of the whole batch); *CPU/wall*: CPU seconds per "
        "second of jaxdyn's timed calls (above 1: XLA ran them on more than one thread). "
        "Targets (issue 53): <= 1.0 (rnea, crba, aba, minv) and <= 1.2 (derivatives), "
        "float64 and float32 against float64 Pinocchio.",
        "",
        "| robot | dtype | algorithm | Pinocchio us | jaxdyn us | ratio | range | target "
        "| best | CPU/wall | first call s |",
        "|---|---|---|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    nan = float("nan")
    for name, (_, rows) in results.items():
        for r in rows:
            tgt = TARGETS[r["alg"]]
            ratios = [x["ratio"] for x in r["runs"] if x["ratio"] is not None]
            ratio = r["ratio"]
            mark = "-" if ratio is None else ("PASS" if ratio <= tgt else "FAIL")
            rng = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"
            lines.append(
                f"| {name} | {r['dtype']} | {r['alg']} | {(r['pin_ns'] or nan) / 1e3:.2f} "
                f"| {r['ns'] / 1e3:.2f} | {'-' if ratio is None else f'{ratio:.2f}'} | {rng} "
                f"| <= {tgt} {mark} | {_num(r.get('best_ratio'))} | {r['cpu']:.2f} "
                f"| {r['compile_s']:.1f} |"
            )
    lines.append("")
    return "\n".join(lines)


def _r(x, ref):
    if x is None or ref is None:
        return "-"
    return f"{x / ref:.2f}"


def _full(row) -> str:
    """The ratio to Pinocchio's mirrored (full-matrix) call, its time in parentheses."""
    ref = row.get("pin_full_ns")
    return "-" if ref is None else f"{_r(row['rule_ns'], ref)} ({ref / 1e3:.2f})"


HEADING = "## Plain jax.vmap against Pinocchio C++"


def machine_line() -> str:
    """The section's first line: command, machine, versions, date."""
    import jax

    import jaxdyn

    return (
        f"`python benchmarks/vs_cpp.py` on {cpu_name()} ({_START_CORES} to this script), "
        f"jax {jax.__version__}, jaxdyn {jaxdyn.__version__}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."
    )


def tuned_settings(args) -> str:
    """What a user must apply to get the tuned tables' figures."""
    mall = (
        "`MALLOC_TRIM_THRESHOLD_=1073741824 MALLOC_MMAP_THRESHOLD_=33554432` (glibc keeps "
        "freed buffers; set inside the process with `mallopt`, `benchmarks/_env.py` "
        "reuse_freed_buffers)"
        if not args.no_mallopt
        else "glibc's allocator as configured (`--no-mallopt`)"
    )
    return (
        f"the process pinned to one core (`taskset -c N`), "
        f"`XLA_FLAGS={_env.SINGLE_THREAD_FLAGS}`, `OPENBLAS_NUM_THREADS=1`, {mall}"
    )


def render(results, B, peaks, args, plain=None) -> str:
    """The section: the plain-process table (``plain``: :func:`render_plain`'s text) first,
    then the tuned tables (``results``; none with ``--plain-only``)."""
    lines = [HEADING, "", machine_line(), ""]
    if plain:
        lines += [plain, ""]
    if not results:
        return "\n".join(lines)
    lines += [
        "### Tuned process: one pinned core, single-threaded XLA, freed buffers kept",
        "",
        f"Settings a user must apply to get these figures: {tuned_settings(args)}. "
        "One thread each side.",
        "",
        f"jaxdyn: per sample at batch {B} under the plain `jax.jit(jax.vmap(f))`. "
        "*rule*: jaxdyn's batching rule (the default: chunked on the CPU, chunk size in the "
        "table, sized for the core's private L2 cache), *plain*: the rule switched off "
        "(`vmap_chunk=0`, one vmap over the whole batch). crba and aba on the CPU are jaxdyn's "
        "C kernels (`cpu_kernels`, the default): *rule* is the kernel (one call for the batch, "
        "chunk 'none'), *plain* XLA's code for the same "
        "algorithm (`cpu_kernels=False`, in its rule's chunks), and flops '-' (XLA's cost "
        "analysis does not see inside the kernel). "
        "Ratios are jaxdyn time / Pinocchio time per call (< 1: jaxdyn faster); the issue's "
        "targets are <= 1.0 (rnea, crba, aba, minv) and <= 1.2 (derivatives) in float64. "
        "Pinocchio's crba and minv fill the upper triangle only; jaxdyn returns the full "
        "symmetric matrix: *full* is the ratio to Pinocchio's call followed by the mirror "
        "of its upper triangle that Pinocchio documents for a full matrix (its time in "
        "parentheses). Times through the jitted function (the model passed as an "
        "argument), compile = first call. Flops: XLA cost analysis of the traced (unoptimised) "
        "one-vmap program per sample (the optimised program's count is 1.1-4.6x higher: a "
        "kernel that fuses a whole level's product to use a slice of it is charged the whole "
        "product); "
        f"GFLOP/s achieved against this core's measured peak (single-thread matmul: "
        f"{peaks.get('float64', float('nan')):.1f} GFLOP/s float64, "
        f"{peaks.get('float32', float('nan')):.1f} float32). "
        + (
            f"Every time is the median of {args.runs} runs, each in a fresh process (on this "
            "shared VM the same program timed in two processes differed by up to 2x)."
            if args.runs > 1
            else "One run: machine noise is +-20 % run to run, compare ratios within it."
        ),
        "",
    ]
    for name, (pin, rows) in results.items():
        src = pin.get("source", "?")
        flags = pin.get("flags", "")
        lines += [
            f"#### {name}",
            "",
            f"Pinocchio {pin.get('pinocchio_version', '?')} ({src}"
            + (f", `{flags}`" if flags and src == "c++" else "")
            + ").",
            "",
            "| dtype | algorithm | Pinocchio us | rule us | ratio | full | plain us | ratio "
            "| chunk | target | flops/sample | GFLOP/s | % peak | first call s (rule / plain) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for r in rows:
            pin_ns = r["pin_ns"]
            ratio = r["rule_ns"] / pin_ns if pin_ns else None
            tgt = TARGETS[r["alg"]]
            mark = "-" if ratio is None else ("PASS" if ratio <= tgt else "MISS")
            nan = float("nan")
            gf = r["flops"] / r["rule_ns"] if r["rule_ns"] else nan
            pk = peaks.get(r["dtype"])
            lines.append(
                f"| {r['dtype']} | {r['alg']} | {(pin_ns or float('nan')) / 1e3:.2f} "
                f"| {r['rule_ns'] / 1e3:.2f} | {_r(r['rule_ns'], pin_ns)} "
                f"| {_full(r)} | {r['plain_ns'] / 1e3:.2f} | {_r(r['plain_ns'], pin_ns)} "
                f"| {r['chunk'] or 'none'} "
                f"| <= {tgt} {mark if r['dtype'] == 'float64' else ''} "
                + (
                    "| - | - | - "
                    if r.get("kernel")
                    else f"| {r['flops']:.0f} | {gf:.2f} | {100 * gf / pk if pk else nan:.0f} "
                )
                + f"| {r['rule_compile_s']:.1f} / {r['plain_compile_s']:.1f} |"
            )
        lat = [r for r in rows if "b1_ns" in r]
        if lat:
            lines += [
                "",
                "Batch-1 latency per call, float64 (issue 53's target: <= 2x Pinocchio): "
                "`jax.jit(f)` with the model passed and closed over, and "
                '`jaxdyn.compile_for_latency(f, model, *args, dispatch="native")` called with '
                "numpy arrays (jaxdyn's C kernels without XLA; '-' where the kernels are not "
                "built):",
                "",
                "| algorithm | Pinocchio us | jaxdyn us | ratio | model closed over us | ratio "
                "| native us | ratio | XLA kernels |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for r in lat:
                nat = r.get("b1n_ns")
                lines.append(
                    f"| {r['alg']} | {(r['pin_ns'] or float('nan')) / 1e3:.2f} "
                    f"| {r['b1_ns'] / 1e3:.2f} | {_r(r['b1_ns'], r['pin_ns'])} "
                    f"| {r['b1c_ns'] / 1e3:.2f} | {_r(r['b1c_ns'], r['pin_ns'])} "
                    + (
                        f"| {nat / 1e3:.2f} | {_r(nat, r['pin_ns'])} "
                        if nat is not None
                        else "| - | - "
                    )
                    + f"| {r['b1_kernels']} |"
                )
        lines.append("")
    return "\n".join(lines)


def _measure(a):
    single_threaded()
    a.mallopt = not a.no_mallopt and reuse_freed_buffers()
    import jax

    jax.config.update("jax_enable_x64", True)

    def log(msg):
        print(msg, flush=True)

    dtypes = a.dtypes.split(",")
    peaks = {d: peak_gflops(d) for d in dtypes}
    log(f"peak GFLOP/s: {peaks}")
    results = {}
    for name in a.robots.split(","):
        results[name] = bench_robot(name, dtypes, a.batch, not a.no_latency, log)
        jax.clear_caches()
    return results, peaks


#: per-run numbers of a row that are aggregated over runs (the median)
_TIMES = (
    "pin_ns",
    "pin_full_ns",
    "rule_ns",
    "plain_ns",
    "b1_ns",
    "rule_compile_s",
    "plain_compile_s",
)


def _runs_in_children(a, argv):
    """Run the measurement ``a.runs`` times, each in a fresh process, and combine them: each
    timing of each row is the median over the runs (the Pinocchio times too)."""
    import statistics
    import subprocess
    import tempfile

    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            out = Path(tmp) / f"run{i}.json"
            args = [x for x in (sys.argv[1:] if argv is None else argv)]
            cmd = [sys.executable, str(Path(__file__).resolve()), *args, "--json", str(out)]
            print(f"== run {i + 1} of {a.runs} (fresh process)", flush=True)
            subprocess.run(cmd, check=True)
            runs.append(json.loads(out.read_text()))
    results = {}
    for name in runs[0]["results"]:
        pins = [r["results"][name][0] for r in runs]
        rows = []
        for k, row in enumerate(runs[0]["results"][name][1]):
            agg = dict(row)
            for key in _TIMES:
                vals = [r["results"][name][1][k].get(key) for r in runs]
                vals = [v for v in vals if v is not None]
                if vals:
                    agg[key] = statistics.median(vals)
            rows.append(agg)
        results[name] = (pins[0], rows)
    peaks = {d: statistics.median(r["peaks"][d] for r in runs) for d in runs[0]["peaks"]}
    return results, peaks


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python benchmarks/vs_cpp.py", description=(__doc__ or "").split("\n")[0]
    )
    p.add_argument("--robots", default="solo12,talos_full")
    p.add_argument("--dtypes", default="float64,float32")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--no-latency", action="store_true", help="skip the batch-1 latency rows")
    p.add_argument("--out", default=str(HERE / "RESULTS.md"))
    p.add_argument(
        "--runs",
        type=int,
        default=3,
        help="measure in this many fresh processes and report each cell's median (the same "
        "program timed in two processes on a shared VM differed by up to 2x)",
    )
    p.add_argument(
        "--no-mallopt",
        action="store_true",
        help="leave glibc's allocator as it is (by default freed buffers are kept for reuse: "
        "benchmarks/_env.py reuse_freed_buffers)",
    )
    p.add_argument(
        "--plain-only",
        action="store_true",
        help="only the plain-process table (quick iteration; the section then holds only it)",
    )
    p.add_argument("--no-plain", action="store_true", help="skip the plain-process table")
    p.add_argument(
        "--plain-rounds",
        type=int,
        default=3,
        help="rounds of the plain-process table (each: Pinocchio, then one fresh jaxdyn "
        "process per robot and dtype); the ratio is the median of the rounds' ratios",
    )
    p.add_argument(
        "--plain-form",
        choices=("argument", "closed"),
        default="argument",
        help="the plain table's call: the model as an argument with in_axes None (README's "
        "API tour) or closed over by the vmapped lambda",
    )
    p.add_argument("--json", help=argparse.SUPPRESS)  # a child run writes its raw results here
    a = p.parse_args(argv)
    if a.plain_only and a.no_plain:
        p.error("--plain-only and --no-plain exclude each other")
    plain = None
    if not a.no_plain and not a.json:
        # before anything below pins this process or sets XLA_FLAGS: the plain processes
        # inherit neither (plain_env; the affinity is the caller's)
        pr = plain_rounds(
            a.robots.split(","), a.dtypes.split(","), a.batch, a.plain_rounds, form=a.plain_form
        )
        plain = render_plain(pr, a.batch, a.plain_rounds, a.plain_form)
        print(plain, flush=True)
    results, peaks = {}, {}
    if not a.plain_only:
        single_threaded()  # the children inherit the one core
        if a.runs > 1 and not a.json:
            results, peaks = _runs_in_children(a, argv)
        else:
            results, peaks = _measure(a)
            if a.json:
                Path(a.json).write_text(json.dumps({"results": results, "peaks": peaks}))
                return 0
    section = render(results, a.batch, peaks, a, plain)
    print(section)
    write_section(a.out, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

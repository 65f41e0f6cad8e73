#!/usr/bin/env python
"""Benchmark: analytic derivatives (IDSVA / FDSVA) vs JAX autodiff vs Pinocchio, on the CPU.

Per-sample time of

* **analytic** -- ``jaxdyn.rnea_derivatives`` (IDSVA, Singh, Russell & Wensing 2022, Alg. 1)
  and ``jaxdyn.aba_derivatives`` (FDSVA: IDSVA at the ABA solution, then ``-M^-1`` by DMM or
  AZA, ``method="auto"``);
* **jacfwd** / **jacrev** -- ``jax.jacfwd`` / ``jax.jacrev`` of the *plain* algorithms
  (``jaxdyn.algorithms.rnea.rnea_plain`` / ``aba.aba_plain``) in ``(δ, v, a|tau)`` with
  ``q = integrate(q0, δ)``, i.e. the same ``nv x nv`` partials by autodiff;
* **Pinocchio** -- ``pin.computeRNEADerivatives`` / ``pin.computeABADerivatives`` called from
  Python in a loop over pre-converted states (float64 only; the float32 rows are compared with
  the same float64 numbers);

for ID and FD partials, batch 1 (``jax.jit(f)``), 64 and 1024 (``jax.jit(jaxdyn.vmap(f))``:
``jax.vmap`` evaluated in chunks of 8 samples (``--chunk``) so that intermediates stay in
cache; one extra
row times plain ``jax.vmap`` at batch 1024), float64 and float32, on solo12 and talos_full; and a
sweep over serial revolute chains of 5 to 100 bodies (float64, batch 64) comparing the DMM and
AZA ways of applying ``M^-1`` (the crossover sets ``jaxdyn.derivatives.fd.AZA_MIN_NV``).

Timing: CPU time of this process (``time.process_time``, which counts every thread; the process
is pinned to one core and ``XLA_FLAGS="--xla_cpu_multi_thread_eigen=false"`` is set before JAX
starts, benchmarks/_env.py), each cell the median of 5 repeats of >= 30 ms after a warm-up.
Ratios to Pinocchio are *paired*: every jaxdyn repeat is followed by a Pinocchio repeat and the
median of the per-pair ratios is reported, so load changes on a shared machine cancel. Compile
time is the CPU time of ``jit(...).lower(...).compile()``; memory is XLA's
``temp_size_in_bytes`` of the compiled program (its peak scratch memory) at batch 1024.

Usage: ``python benchmarks/derivatives.py [--quick] [--out benchmarks/RESULTS.md]
[--json results.json]``. The markdown goes under the heading ``## Derivatives`` of ``--out``
(replacing a previous such section, leaving the rest of the file alone).
"""

from __future__ import annotations

import os
import sys

from _env import (  # noqa: E402
    cpu_name,
    git_commit,
    reuse_freed_buffers,
    single_threaded,
    write_section,
)

if "--multi-thread" not in sys.argv:
    single_threaded()

MALLOPT = "--no-mallopt" not in sys.argv and reuse_freed_buffers()

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jaxdyn  # noqa: E402
from jaxdyn import robots  # noqa: E402
from jaxdyn.algorithms.aba import aba_plain  # noqa: E402
from jaxdyn.algorithms.rnea import rnea_plain  # noqa: E402
from jaxdyn.derivatives import fd as fd_module  # noqa: E402

CHUNK = 8  # jaxdyn.vmap chunk (--chunk); 8 was fastest for talos_full ID at B=1024 (4..64)
REPEATS = 5
MIN_TIME = 0.03
N_PIN = 128

# ----------------------------------------------------------------------------- functions


def analytic_id(model, q, v, a):
    return jaxdyn.rnea_derivatives(model, q, v, a)


def analytic_fd(model, q, v, tau, method="auto"):
    return jaxdyn.aba_derivatives(model, q, v, tau, method=method)


def _autodiff(jac, plain):
    def f(model, q, v, x):
        def g(d, v_, x_):
            return plain(model, jaxdyn.integrate(model, q, d), v_, x_)

        return jac(g, argnums=(0, 1, 2))(jnp.zeros(model.nv, q.dtype), v, x)

    return f


FUNCTIONS = {
    ("ID", "analytic"): analytic_id,
    ("ID", "jacfwd"): _autodiff(jax.jacfwd, rnea_plain),
    ("ID", "jacrev"): _autodiff(jax.jacrev, rnea_plain),
    ("FD", "analytic"): analytic_fd,
    ("FD", "jacfwd"): _autodiff(jax.jacfwd, aba_plain),
    ("FD", "jacrev"): _autodiff(jax.jacrev, aba_plain),
}


def batched(fn, batch, chunk="default"):
    if chunk == "default":
        chunk = CHUNK
    if batch == 1:
        return fn
    if chunk is None:
        return jax.vmap(fn, in_axes=(None, 0, 0, 0))
    return jaxdyn.vmap(fn, in_axes=(None, 0, 0, 0), chunk_size=chunk)


# ----------------------------------------------------------------------------- timing


def cpu_time_per_call(fn, min_time=MIN_TIME):
    n, t0 = 0, time.process_time()
    while True:
        fn()
        n += 1
        t = time.process_time() - t0
        if t >= min_time:
            return t / n


def paired(jx_fn, pin_fn, repeats=REPEATS):
    """Median per-call CPU times of both, and the median of the per-pair ratios (3 repeats
    only when one call takes more than 0.2 s)."""
    t0 = time.process_time()
    jx_fn()
    if time.process_time() - t0 > 0.2:
        repeats = min(repeats, 3)
    if pin_fn is not None:
        pin_fn()
    tj, tp, ratios = [], [], []
    for _ in range(repeats):
        tj.append(cpu_time_per_call(jx_fn))
        if pin_fn is not None:
            tp.append(cpu_time_per_call(pin_fn))
            ratios.append(tj[-1] / tp[-1])
    med = statistics.median
    return med(tj), (med(tp) if tp else None), (med(ratios) if ratios else None)


# ----------------------------------------------------------------------------- models


def load(name):
    if name.startswith("chain"):
        n = int(name[5:])
        xml = robots.random_urdf(
            n,
            1000 + n,
            joint_types=("revolute",),
            p_fixed=0.0,
            branching=0.0,
            massless_prob=0.0,
            name=name,
        )
        model = jaxdyn.load_urdf(xml, floating_base=False)
        return model, None
    path, floating = robots.resolve(name)
    return robots.load(name), (path, floating)


_PIN_REF_CACHE = {}


def _pin_model(name, model, src):
    """Pinocchio model of robot ``name`` (from its URDF, or built from the jaxdyn model) and
    the converter, built once per robot."""
    if name not in _PIN_REF_CACHE:
        import pinocchio as pin

        from jaxdyn.interop.pinocchio import Converter, build_pinocchio_model

        if src is None:
            pm = build_pinocchio_model(model)
        else:
            path, floating = src
            pm = (
                pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())
                if floating
                else pin.buildModelFromUrdf(str(path))
            )
        _PIN_REF_CACHE[name] = (pm, Converter(model, pm))
    return _PIN_REF_CACHE[name]


def pinocchio_setup(name, model, src, q, v, x):
    import pinocchio as pin

    pm, c = _pin_model(name, model, src)
    pd = pm.createData()
    n = min(N_PIN, len(q))
    qs = [c.q_to_pin(np.asarray(q[i], np.float64)) for i in range(n)]
    vs = [c.v_to_pin(np.asarray(v[i], np.float64)) for i in range(n)]
    xs = [c.v_to_pin(np.asarray(x[i], np.float64)) for i in range(n)]

    def make(f):
        def run():
            for i in range(n):
                f(pm, pd, qs[i], vs[i], xs[i])

        return run, n

    return {"ID": make(pin.computeRNEADerivatives), "FD": make(pin.computeABADerivatives)}


def states(model, batch, dtype, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), batch)
    q = jax.vmap(lambda k: jaxdyn.random_configuration(model, k, dtype=dtype))(keys)
    rng = np.random.default_rng(seed)
    v = jnp.asarray(rng.normal(size=(batch, model.nv)), dtype)
    x = jnp.asarray(rng.normal(size=(batch, model.nv)), dtype)
    return q, v, x


def compile_cell(fn, model, q, v, x):
    t0 = time.process_time()
    compiled = jax.jit(fn).lower(model, q, v, x).compile()
    ct = time.process_time() - t0
    try:
        mem = compiled.memory_analysis().temp_size_in_bytes / 2**20
    except Exception:  # pragma: no cover - backend without memory analysis
        mem = float("nan")
    return compiled, ct, mem


# ----------------------------------------------------------------------------- runs


def robot_block(name, batches, dtypes, methods, log):
    model64, src = load(name)
    rows = []
    pin_runs = None
    for dtype_name in dtypes:
        dtype = jnp.dtype(dtype_name)
        model = model64.astype(dtype)
        for batch in batches:
            q, v, x = states(model, max(batch, 1), dtype)
            if pin_runs is None:
                q64, v64, x64 = states(model64.astype(jnp.float64), N_PIN, jnp.float64)
                pin_runs = pinocchio_setup(name, model64, src, q64, v64, x64)
            for kind in ("ID", "FD"):
                for method in methods(dtype_name, batch):
                    chunk = None if method == "analytic (jax.vmap)" else CHUNK
                    fn = FUNCTIONS[(kind, method.split(" ")[0])]
                    args = (q[0], v[0], x[0]) if batch == 1 else (q, v, x)
                    compiled, ct, mem = compile_cell(batched(fn, batch, chunk), model, *args)

                    def jx_run(compiled=compiled, args=args):
                        jax.block_until_ready(compiled(model, *args))

                    run, n = pin_runs[kind]
                    per_call, pin_call, ratio = paired(jx_run, run)
                    us = per_call / batch * 1e6
                    pin_us = pin_call / n * 1e6
                    ratio = ratio * n / batch
                    err = None
                    if batch > 1 and method.startswith("analytic") and dtype_name == "float64":
                        out = compiled(model, *args)
                        err = 0.0
                        q64, v64, x64 = (np.asarray(t, np.float64) for t in (q, v, x))
                        for i in range(2):
                            ref = _pin_at(kind, name, model64, src, q64[i], v64[i], x64[i])
                            for a_, b_ in zip(out[:2], ref):
                                err = max(
                                    err,
                                    float(
                                        np.max(np.abs(np.asarray(a_[i]) - b_))
                                        / max(1.0, np.max(np.abs(b_)))
                                    ),
                                )
                    row = dict(
                        robot=name,
                        nv=model.nv,
                        kind=kind,
                        method=method,
                        dtype=dtype_name,
                        batch=batch,
                        us=us,
                        pin_us=pin_us,
                        ratio=ratio,
                        compile_s=ct,
                        temp_mb=mem,
                        err=err,
                    )
                    rows.append(row)
                    log(
                        f"{name:>10} {dtype_name} B={batch:<5} {kind} {method:<20} "
                        f"{us:9.2f} us/sample  pin {pin_us:7.2f}  ratio {ratio:6.2f}  "
                        f"compile {ct:5.1f}s  temp {mem:7.1f} MB"
                        + (f"  err {err:.1e}" if err is not None else "")
                    )
    return rows


def _pin_at(kind, name, model, src, q, v, x):
    """Pinocchio partials at one state (jaxdyn order)."""
    import pinocchio as pin

    pm, c = _pin_model(name, model, src)
    f = pin.computeRNEADerivatives if kind == "ID" else pin.computeABADerivatives
    pd = pm.createData()  # keep alive: the returned matrices are views into it
    r = f(pm, pd, c.q_to_pin(q), c.v_to_pin(v), c.v_to_pin(x))
    return [c.matrix_from_pin(np.array(m)) for m in r[:2]]


def chain_block(sizes, batch, log):
    rows = []
    for n in sizes:
        name = f"chain{n}"
        model64, src = load(name)
        model = model64.astype(jnp.float64)
        q, v, x = states(model, batch, jnp.float64)
        pin_runs = pinocchio_setup(name, model64, src, q, v, x)
        cells = (
            ("ID", "analytic", analytic_id),
            ("FD", "dmm", lambda *a: analytic_fd(*a, method="dmm")),
            ("FD", "aza", lambda *a: analytic_fd(*a, method="aza")),
        )
        for kind, method, fn in cells:
            compiled, ct, mem = compile_cell(batched(fn, batch), model, q, v, x)

            def jx_run(compiled=compiled):
                jax.block_until_ready(compiled(model, q, v, x))

            run, npin = pin_runs[kind]
            per_call, pin_call, ratio = paired(jx_run, run)
            row = dict(
                robot=name,
                nv=model.nv,
                kind=kind,
                method=method,
                dtype="float64",
                batch=batch,
                us=per_call / batch * 1e6,
                pin_us=pin_call / npin * 1e6,
                ratio=ratio * npin / batch,
                compile_s=ct,
                temp_mb=mem,
            )
            rows.append(row)
            log(
                f"{name:>10} B={batch} {kind} {method:<8} {row['us']:9.2f} us/sample  pin "
                f"{row['pin_us']:7.2f}  ratio {row['ratio']:6.2f}  compile {ct:5.1f}s"
            )
    return rows


# ----------------------------------------------------------------------------- report


def _fmt(x, digits=3):
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "-"
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def render(meta, rows, chain_rows):
    L = ["## Derivatives", ""]
    L += [
        f"- Date: {meta['date']}; command: `{meta['command']}`; total run time "
        f"{meta['elapsed_min']:.1f} min",
        f"- CPU: {meta['cpu']}; load average at start {meta['load_start']}, at end "
        f"{meta['load_end']}",
        f"- jax {jax.__version__}, pinocchio {meta['pin']}, git {meta['git']}",
        f"- XLA_FLAGS='{os.environ.get('XLA_FLAGS', '')}'; glibc mallopt (freed buffers "
        f"reused, `--no-mallopt` to disable): {'on' if meta['mallopt'] else 'off'}",
        "- Times are **CPU time of the benchmark process** per sample (median of 5 repeats "
        ">= 30 ms; 3 when one call exceeds 0.2 s), so time-slicing by other processes on the "
        "shared machine does not count; "
        "ratios to Pinocchio are paired (median of per-repeat ratios, jaxdyn repeat then "
        "Pinocchio repeat). Pinocchio is called from Python (~0.5 us binding overhead per "
        "call), float64 only. B=1: `jax.jit(f)` per call; B>=64: `jax.jit(jaxdyn.vmap(f))` "
        f"(chunks of {CHUNK}); the `analytic (jax.vmap)` rows use plain `jax.vmap`.",
        "- Analytic = `jaxdyn.rnea_derivatives` (IDSVA) / `jaxdyn.aba_derivatives` "
        "(`method='auto'`); jacfwd / jacrev = autodiff of the plain `rnea` / `aba` through "
        "`integrate` (the same nv x nv partials). Memory: XLA temp buffer of the compiled "
        "program. err: max |analytic - Pinocchio| / max(1, max|Pinocchio|) on 2 samples.",
        "",
    ]

    # targets
    def cell(robot, kind, method, dtype="float64", batch=1024):
        for r in rows:
            if (r["robot"], r["kind"], r["method"], r["dtype"], r["batch"]) == (
                robot,
                kind,
                method,
                dtype,
                batch,
            ):
                return r
        return None

    if meta.get("merged"):
        L += [f"- {meta['merged']}", ""]
    L += [
        "- The plot of the finite-difference error against the step (the V) is "
        "`benchmarks/figures/derivatives_fd_step.png`, made by "
        "`python examples/compare_derivatives.py solo12 "
        "benchmarks/figures/derivatives_fd_step.png` (error and timing tables: run the "
        "example).",
        "",
    ]
    L += [
        "### Targets (talos_full, float64, batch 1024, per sample)",
        "",
        "| target | measured | status |",
        "|---|---|---|",
    ]
    a, j = cell("talos_full", "ID", "analytic"), cell("talos_full", "ID", "jacfwd")
    if a and j:
        s = j["us"] / a["us"]
        L.append(
            f"| analytic ID partials >= 3x faster than jacfwd of RNEA | {s:.2f}x "
            f"({_fmt(a['us'])} us vs {_fmt(j['us'])} us) | "
            f"{'PASS' if s >= 3 else '**MISS**'} |"
        )
    if a:
        L.append(
            f"| analytic ID partials <= 1.5x Pinocchio computeRNEADerivatives | "
            f"{a['ratio']:.2f}x ({_fmt(a['us'])} us vs {_fmt(a['pin_us'])} us) | "
            f"{'PASS' if a['ratio'] <= 1.5 else '**MISS**'} |"
        )
    f = cell("talos_full", "FD", "analytic")
    if f:
        L.append(
            f"| analytic FD partials <= 1.5x Pinocchio computeABADerivatives | "
            f"{f['ratio']:.2f}x ({_fmt(f['us'])} us vs {_fmt(f['pin_us'])} us) | "
            f"{'PASS' if f['ratio'] <= 1.5 else '**MISS**'} |"
        )
    L.append("")
    for dtype in ("float64", "float32"):
        sub = [r for r in rows if r["dtype"] == dtype]
        if not sub:
            continue
        L += [
            f"### Per-sample time, {dtype} (us; ratio to Pinocchio in parentheses)",
            "",
            "| robot | partials | method | Pinocchio us/call | B=1 | B=64 | B=1024 | "
            "compile s (B=1024) | temp MB (B=1024) | err |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        keys = []
        for r in sub:
            k = (r["robot"], r["kind"], r["method"])
            if k not in keys:
                keys.append(k)
        for robot, kind, method in keys:
            cells = {
                r["batch"]: r
                for r in sub
                if (r["robot"], r["kind"], r["method"]) == (robot, kind, method)
            }
            pin_us = next(iter(cells.values()))["pin_us"]
            big = cells.get(1024) or cells[max(cells)]
            errs = [r["err"] for r in cells.values() if r.get("err") is not None]
            line = [robot, kind, method, _fmt(pin_us)]
            for b in (1, 64, 1024):
                r = cells.get(b)
                line.append("-" if r is None else f"{_fmt(r['us'])} ({r['ratio']:.2f}x)")
            line += [
                f"{big['compile_s']:.1f}",
                _fmt(big["temp_mb"]),
                f"{max(errs):.0e}" if errs else "-",
            ]
            L.append("| " + " | ".join(line) + " |")
        L.append("")
    if chain_rows:
        b = chain_rows[0]["batch"]
        L += [
            f"### Serial chains (revolute, fixed base), float64, batch {b}: DMM vs AZA",
            "",
            "| bodies | ID analytic us (ratio) | FD DMM us (ratio) | FD AZA us (ratio) | "
            "AZA/DMM | Pinocchio ID us | Pinocchio FD us | compile s ID / DMM / AZA |",
            "|---|---|---|---|---|---|---|---|",
        ]
        sizes = sorted({r["nv"] for r in chain_rows})
        faster = []
        for n in sizes:
            c = {r["method"]: r for r in chain_rows if r["nv"] == n}
            ratio = c["aza"]["us"] / c["dmm"]["us"]
            if ratio < 1:
                faster.append(n)
            L.append(
                f"| {n} | {_fmt(c['analytic']['us'])} ({c['analytic']['ratio']:.2f}x) | "
                f"{_fmt(c['dmm']['us'])} ({c['dmm']['ratio']:.2f}x) | "
                f"{_fmt(c['aza']['us'])} ({c['aza']['ratio']:.2f}x) | {ratio:.2f} | "
                f"{_fmt(c['analytic']['pin_us'])} | {_fmt(c['dmm']['pin_us'])} | "
                f"{c['analytic']['compile_s']:.1f} / {c['dmm']['compile_s']:.1f} / "
                f"{c['aza']['compile_s']:.1f} |"
            )
        L += [
            "",
            f"AZA faster than DMM at nv = {faster or 'none'} in this run; "
            f"`method='auto'` switches to AZA at nv >= {fd_module.AZA_MIN_NV}.",
            "",
        ]
    return "\n".join(L) + "\n"


def main(argv=None):
    global CHUNK
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--robots", default="solo12,talos_full")
    p.add_argument("--chains", default="5,10,20,35,50,75,100")
    p.add_argument("--chain-batch", type=int, default=64)
    p.add_argument("--quick", action="store_true", help="float64 only, fewer chains")
    p.add_argument("--out", default=None, help="markdown file to put the section into")
    p.add_argument("--json", default=None)
    p.add_argument("--multi-thread", action="store_true", help="leave XLA's threading alone")
    p.add_argument(
        "--no-mallopt",
        action="store_true",
        help="leave glibc's allocator alone (outputs are faulted in on every call)",
    )
    p.add_argument("--chunk", type=int, default=CHUNK, help="jaxdyn.vmap chunk size")
    p.add_argument(
        "--merge",
        default=None,
        help="JSON of an earlier run (--json): keep its rows for the robots not run "
        "now, and its chain sweep when --chains is empty",
    )
    args = p.parse_args(argv)
    CHUNK = args.chunk
    t_start = time.time()

    def log(msg):
        print(f"[{time.time() - t_start:6.0f}s] {msg}", flush=True)

    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    dtypes = ("float64",) if args.quick else ("float64", "float32")

    def methods(dtype, batch):
        if dtype == "float32":
            return ("analytic", "jacfwd") if batch == 1024 else ()
        m = ["analytic", "jacfwd"]
        if batch == 1024:
            m.append("jacrev")
        if batch == 1024:
            m.append("analytic (jax.vmap)")
        return tuple(m)

    rows = []
    for name in [r for r in args.robots.split(",") if r]:
        batches = (1, 64, 1024)
        rows += robot_block(name, batches, dtypes, methods, log)
    chains = [int(c) for c in args.chains.split(",") if c]
    if args.quick:
        chains = chains[::2]
    chain_rows = chain_block(chains, args.chain_batch, log) if chains else []
    merged = None
    if args.merge:
        old = json.loads(Path(args.merge).read_text())
        now = {r["robot"] for r in rows}
        keep = [r for r in old["rows"] if r["robot"] not in now]
        rows = keep + rows
        parts = sorted({r["robot"] for r in keep})
        if not chain_rows and old.get("chains"):
            chain_rows = old["chains"]
            parts.append("the chain sweep")
        om = old["meta"]
        merged = (
            f"Rows of {', '.join(parts)} are from an earlier run ({om['date']}, "
            f"`{om['command']}`, chunk {om.get('chunk', 32)}, mallopt "
            f"{'on' if om.get('mallopt') else 'off'}, load {om['load_start']})."
            if parts
            else None
        )
    try:
        import pinocchio as pin

        pin_version = pin.__version__
    except Exception:  # pragma: no cover
        pin_version = "?"
    git = git_commit()
    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        command="python " + " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
        elapsed_min=(time.time() - t_start) / 60,
        cpu=f"{cpu_name()} ({os.cpu_count()} logical cores)",
        load_start=load_start,
        load_end=" ".join(f"{x:.2f}" for x in os.getloadavg()),
        pin=pin_version,
        git=git,
        chunk=CHUNK,
        mallopt=MALLOPT,
        merged=merged,
    )
    text = render(meta, rows, chain_rows)
    print(text)
    if args.out:
        write_section(args.out, text)
    if args.json:
        Path(args.json).write_text(
            json.dumps(dict(meta=meta, rows=rows, chains=chain_rows), indent=1)
        )


if __name__ == "__main__":
    main()

"""jaxdyn and MJX on a GPU, side by side in one process: per-sample time of rnea, crba, aba and
minv (jaxdyn) and of ``mjx.inverse``, ``mjx.forward`` and the CRB mass matrix (MJX) on the same
robots, states drawn the same way, at batch sizes up to 65536, float32 and float64.

    python benchmarks/gpu.py --json /tmp/gpu.json            # on the GPU machine
    python benchmarks/gpu.py --from-json /tmp/gpu.json       # render the "## GPU" section

The current section: ``--from-json`` of the files in ``benchmarks/gpu_runs/`` (1-4: an H100,
14-15: an H200, in that order), the last card's runs first (see
:func:`render`).

Each cell is ``jax.jit(jax.vmap(f))`` on device-resident inputs (``jax.jit(f)`` at B=1), timed
by jaxdyn's benchmark harness (``benchmarks/harness.py``: warm-up, then the median of repeats,
each ending in ``block_until_ready``). Plain ``jax.vmap``: the cache-sized chunks of
``jaxdyn.vmap`` are for CPUs. Pinocchio is not installed on the GPU machine; every jaxdyn output
is checked against jaxdyn float64 on the same machine's CPU backend (itself checked against
Pinocchio to ~1e-12 by the test suite), and the Pinocchio times quoted for scale are the
single-core CPU times of the ``## Per-sample time`` tables above (another machine).

Only this file's section of ``benchmarks/RESULTS.md`` (from ``## GPU`` to the next ``## ``
heading) is replaced.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from _env import write_section

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

ROBOTS = ("solo12", "talos_full", "panda")
ALGS = ("rnea", "crba", "aba", "minv")
#: ``--algorithms`` may add these (stacked outputs ``(d/dq, d/dv, M or M^-1)``).
DERIV_ALGS = ("rnea_derivatives", "aba_derivatives")
MJX_FNS = ("inverse", "forward", "crb")
BATCHES = (1, 1024, 8192, 65536)
DTYPES = ("float32", "float64")


def _cpu_refs(case, algs):
    """Reference outputs for the first ``bench.N_CHECK`` states: jaxdyn, float64, CPU backend."""
    import jax
    import numpy as np

    import harness as bench

    cpu = jax.devices("cpu")[0]
    refs = {}
    with jax.default_device(cpu):
        model = case.model.astype("float64")
        for alg in algs:
            f, names = bench._jaxdyn_fn(alg)
            xs = [jax.device_put(np.asarray(case.states[k][: bench.N_CHECK]), cpu) for k in names]
            refs[alg] = np.asarray(
                jax.jit(jax.vmap(f, in_axes=(None,) + (0,) * len(xs)))(model, *xs)
            )
    return refs


def _cell(out, rec, name, measure, log):
    """Run one cell (``measure()`` returns its record), keep errors, log a line naming it."""
    import harness as bench

    try:
        rec.update(measure())
    except Exception as e:  # noqa: BLE001 - reported in the table
        rec["error"] = bench._one_line(e)
    rec.pop("times", None)
    out.append(rec)
    what = f"{rec['robot']} {rec['dtype']} {name} B={rec['batch']}"
    if "per_sample_s" in rec:
        err = f", err {rec['err']:.1e}" if rec.get("err") is not None else ""
        log(
            f"{what}: {rec['per_sample_s'] * 1e6:.4f} us/sample{err}, "
            f"compile {rec['compile_s']:.1f} s"
        )
    else:
        log(f"{what}: {rec['error']}")


def run(robots, algs, mjx_fns, batches, mjx_batches, dtypes, repeats, log, json_out=None):
    import jax

    jax.config.update("jax_enable_x64", True)
    import harness as bench

    dev = jax.devices()[0]
    res = {
        "env": bench.environment(),
        "device": f"{dev.platform}: {dev.device_kind}",
        "config": dict(
            robots=robots,
            algs=algs,
            mjx_fns=mjx_fns,
            batches=batches,
            mjx_batches=mjx_batches,
            dtypes=dtypes,
            repeats=repeats,
        ),
        "robots": {},
        "jaxdyn": [],
        "mjx": [],
    }
    t_start = time.perf_counter()
    kw = dict(repeats=repeats, min_time=0.05, max_time=2.0)
    for rname in robots:
        case = bench._Case(rname, n_states=max(batches), seed=0)
        case.refs = _cpu_refs(case, algs)
        res["robots"][rname] = case.info
        mc = None
        if mjx_fns:
            try:
                mc = bench._MjxCase(case)
            except Exception as e:  # noqa: BLE001 - reported in the table
                case.info["mjx"] = f"could not load: {bench._one_line(e)}"
        for dtype in dtypes:
            for alg in algs:
                for b in batches:
                    _cell(
                        res["jaxdyn"],
                        {"robot": rname, "dtype": dtype, "alg": alg, "batch": b},
                        alg,
                        lambda: bench._bench_jaxdyn(case, alg, dtype, b, **kw),
                        log,
                    )
            for fn in mjx_fns if mc is not None else ():
                for b in mjx_batches:
                    _cell(
                        res["mjx"],
                        {"robot": rname, "dtype": dtype, "fn": fn, "batch": b},
                        f"mjx.{fn}",
                        lambda: bench._bench_mjx(mc, fn, dtype, b, **kw),
                        log,
                    )
            jax.clear_caches()
        res["total_s"] = time.perf_counter() - t_start
        if json_out:  # after each robot: a run cut short keeps what it measured
            Path(json_out).write_text(json.dumps(res, indent=1, default=str))
    return res


CLUSTER_ROBOTS = ("mini_cheetah", "mit_humanoid")
CLUSTER_FNS = ("caba", "projection_fd", "lagrange_fd", "aba_links", "crnea", "projected_rnea")


def run_clusters(robots, batches, dtypes, repeats, log, json_out=None):
    """Kinematic-loop algorithms on the accelerator: C-ABA against the projection and Lagrange
    methods and plain ABA on the link-only tree, C-RNEA against projected RNEA (plain
    ``jax.jit(jax.vmap(f))``). Checked: ``caba(crnea(a)) = a``."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    from jaxdyn import clusters as C
    from jaxdyn.algorithms.aba import aba_plain as plain_aba
    from jaxdyn.clusters import robots as crobots

    import harness as bench

    dev = jax.devices()[0]
    res = {
        "env": bench.environment(),
        "device": f"{dev.platform}: {dev.device_kind}",
        "config": dict(
            robots=robots,
            algs=[],
            mjx_fns=[],
            batches=batches,
            dtypes=dtypes,
            repeats=repeats,
            clusters=list(CLUSTER_FNS),
        ),
        "robots": {},
        "jaxdyn": [],
        "mjx": [],
        "clusters": [],
    }
    t_start = time.perf_counter()
    for rname in robots:
        m = crobots.load(rname)
        links = C.approximate_model(m, "none")
        n = max(batches)
        k = jax.random.split(jax.random.PRNGKey(0), 3)
        q = np.asarray(
            jax.jit(jax.vmap(lambda kk: C.random_configuration(m, kk, scale=0.5)))(
                jax.random.split(k[0], n)
            )
        )
        v = np.asarray(jax.random.normal(k[1], (n, m.nv)))
        a = np.asarray(jax.random.normal(k[2], (n, m.nv)))
        tau = np.asarray(jax.jit(jax.vmap(lambda q, v, a: C.crnea(m, q, v, a)))(q, v, a))
        qt = np.asarray(
            jax.vmap(lambda q: C.spanning_configuration(links, C.approximate_state(m, links, q)))(q)
        )
        va = v[:, np.array([m.v_names.index(x) for x in links.v_names])]
        fns = {
            "caba": (lambda q, v, t: C.caba(m, q, v, t), (q, v, tau), a),
            "projection_fd": (lambda q, v, t: C.projection_fd(m, q, v, t), (q, v, tau), a),
            "lagrange_fd": (lambda q, v, t: C.lagrange_fd(m, q, v, t), (q, v, tau), a),
            "aba_links": (lambda q, v, t: plain_aba(links.tree, q, v, t), (qt, va, tau), None),
            "crnea": (lambda q, v, a: C.crnea(m, q, v, a), (q, v, a), tau),
            "projected_rnea": (lambda q, v, a: C.projected_rnea(m, q, v, a), (q, v, a), tau),
        }
        res["robots"][rname] = {"nq": m.nq, "nv": m.nv, "nb": m.nb, "links": links.tree.nb}
        for dtype in dtypes:
            for fn, (f, args, ref) in fns.items():
                for b in batches:

                    def measure(f=f, args=args, ref=ref, b=b, dtype=dtype):
                        xs = [jnp.asarray(x[:b], dtype) for x in args]
                        jf = jax.jit(jax.vmap(f))
                        t0 = time.perf_counter()
                        jf.lower(*xs).compile()
                        rec = {"compile_s": time.perf_counter() - t0}
                        out = jax.block_until_ready(jf(*xs))
                        if ref is not None:
                            rec["err"] = bench._rel_err(out, ref[:b])
                        rec.update(
                            bench._measure(
                                lambda: jf(*xs),
                                repeats=repeats,
                                min_time=0.05,
                                max_time=2.0,
                                block=jax.block_until_ready,
                            )
                        )
                        rec["per_sample_s"] = rec["call_s"] / b
                        return rec

                    _cell(
                        res["clusters"],
                        {"robot": rname, "dtype": dtype, "fn": fn, "batch": b},
                        fn,
                        measure,
                        log,
                    )
            jax.clear_caches()
        res["total_s"] = time.perf_counter() - t_start
        if json_out:
            Path(json_out).write_text(json.dumps(res, indent=1, default=str))
    return res


def _render_clusters(results) -> list[str]:
    cl = {}
    for res in results:
        for r in res.get("clusters", []):
            cl[(r["robot"], r["dtype"], r["fn"], r["batch"])] = r
    if not cl:
        return []
    batches = sorted({k[3] for k in cl})
    robots = list(dict.fromkeys(k[0] for k in cl))
    L = [
        "### GPU, kinematic loops (cluster algorithms, us/sample)",
        "",
        "`python benchmarks/gpu.py --clusters`: C-ABA against the projection and Lagrange "
        "methods and plain `jaxdyn.aba` on the link-only tree; C-RNEA against projected RNEA; "
        "plain `jax.jit(jax.vmap(f))`. In brackets: time relative to C-ABA (C-RNEA for "
        "projected RNEA). Error: max relative error of `caba(crnea(a))` against `a` "
        "(of C-RNEA against the C-RNEA float64 torques).",
        "",
    ]
    head = ["robot", "dtype", "method"] + [f"B={b}" for b in batches] + ["max err"]
    L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rname in robots:
        for dtype in DTYPES:
            for fn in CLUSTER_FNS:
                recs = [cl.get((rname, dtype, fn, b)) for b in batches]
                if not any(recs):
                    continue
                base = "crnea" if fn in ("crnea", "projected_rnea") else "caba"
                cells = []
                for b, r in zip(batches, recs):
                    c = _t(r)
                    ref = cl.get((rname, dtype, base, b))
                    if fn != base and r and ref and "per_sample_s" in r and "per_sample_s" in ref:
                        c += f" ({r['per_sample_s'] / ref['per_sample_s']:.2f}x)"
                    cells.append(c)
                errs = [r["err"] for r in recs if r and r.get("err") is not None]
                L.append(
                    "| "
                    + " | ".join([rname, dtype, fn] + cells + [f"{max(errs):.1e}" if errs else ""])
                    + " |"
                )
    return L + [""]


def _t(rec):
    if not rec or "per_sample_s" not in rec:
        return "error" if rec and rec.get("error") else "-"
    s = rec["per_sample_s"] * 1e6
    return f"{s:.3g}" if s < 100 else f"{s:.0f}"


def render(results: list[dict], heading: str = "GPU") -> str:
    """The ``## <heading>`` section from one or more result files, one section for every card.

    The runs on the card of the last file are merged (later ones win per cell) into the
    section's tables; the runs on each other card follow, merged the same way, under
    ``### Earlier runs on <card>`` (their own machine, versions and dates; their tables one
    heading level down): the cells the current card has not measured (MJX, the kinematic
    loops, other robots) stay in the one section, labelled with the card and date they come
    from.
    """
    by_device: dict[str, list[dict]] = {}
    for res in results:
        by_device.setdefault(res["device"], []).append(res)
    current = by_device.pop(results[-1]["device"])
    text = _render_runs(current, heading)
    for device, runs in by_device.items():
        sub = _render_runs(runs, heading, notes=False).splitlines()
        dates = sorted({r["env"]["date"][:10] for r in runs})
        only = _measured_only_in(runs, current)
        sub[0] = f"### Earlier runs on {device.removeprefix('gpu: ')} ({', '.join(dates)})" + (
            f": {_and(only)} measured there only" if only else ""
        )
        sub = [f"#{ln}" if ln.startswith("### GPU") else ln for ln in sub]
        text = text.rstrip("\n") + "\n\n" + "\n".join(sub).rstrip("\n") + "\n"
    return text


def _and(words: list[str]) -> str:
    return " and ".join(filter(None, [", ".join(words[:-1]), words[-1]]))


def _measured_only_in(runs: list[dict], current: list[dict]) -> list[str]:
    """What ``runs`` measured and ``current`` did not: MJX, robots, the kinematic loops."""

    def kinds(rs):
        return (
            any(r["mjx"] for r in rs),
            {x["robot"] for r in rs for x in r["jaxdyn"]},
            any(r.get("clusters") for r in rs),
        )

    (mjx, robots, clusters), (mjx_now, robots_now, clusters_now) = kinds(runs), kinds(current)
    out = ["MJX"] if mjx and not mjx_now else []
    out += sorted(robots - robots_now)
    return out + (["the kinematic loops"] if clusters and not clusters_now else [])


def _render_runs(results: list[dict], heading: str, notes: bool = True) -> str:
    """The section's text for runs on one card (merged; later ones win); ``notes``: with the
    paragraphs on what the tables measure (once per section)."""
    import harness as bench

    jd, mj, robots = {}, {}, {}
    for res in results:
        for r in res["jaxdyn"]:
            jd[(r["robot"], r["dtype"], r["alg"], r["batch"])] = r
        for r in res["mjx"]:
            mj[(r["robot"], r["dtype"], r["fn"], r["batch"])] = r
        robots.update(res["robots"])
    # the header names the last run with core cells (cluster-only runs are listed below)
    res = next((r for r in reversed(results) if r["jaxdyn"] or r["mjx"]), results[-1])
    env = res["env"]
    batches = sorted({k[3] for k in jd})
    dtypes = [d for d in DTYPES if any(k[1] == d for k in jd)]
    L = [
        f"## {heading}",
        "",
        f"Run: {env['date']} on **{res['device']}** (host: {env['cpu']}, {env['cores']} "
        f"cores); jax {env['jax']}, jaxlib {env['jaxlib']}, mujoco {env['mujoco']}, "
        f"mujoco-mjx {env['mujoco-mjx']}, jaxdyn git {env['jaxdyn_commit']}. "
        "Command: `python benchmarks/gpu.py` (see its docstring); "
        f"total {sum(r.get('total_s', 0) for r in results) / 60:.1f} min.",
        "",
    ]
    if notes:
        L += [
            "Per-sample time in microseconds (wall time of one batched call / B; B=1 is the "
            "latency of one unbatched `jit(f)` call, launch overhead included). Every jaxdyn "
            "output is compared with jaxdyn float64 on the CPU backend (max relative error over "
            f"{bench.N_CHECK} samples, all batch sizes). MJX rows: `jit(vmap(f))` on the same "
            "URDF (see the MJX section above for what each function computes); the ratio is MJX "
            "time / jaxdyn time for the matching algorithm at the same B (> 1: jaxdyn faster).",
            "",
            "Matrix products: JAX's default float32 precision lets the GPU use TF32; the first "
            "run measured float32 errors of 4e-4 (crba) to 1e-3 (talos aba) against 1e-7 at full "
            "precision, so jaxdyn's public functions now trace their products at "
            "`Precision.HIGHEST` (`jaxdyn._precision`; tests/test_precision.py). Float64 is not "
            "affected.",
            "",
        ]
    if len(results) > 1:
        L += ["Runs merged here (a later run's cell replaces an earlier one's):", ""]
        for i, r in enumerate(results, 1):
            cells = len(r["jaxdyn"]) + len(r["mjx"]) + len(r.get("clusters", []))
            c = r["config"]
            what = (
                f"jaxdyn {', '.join(c['algs']) or 'none'}; MJX {', '.join(c['mjx_fns']) or 'none'}"
            )
            if c.get("clusters"):
                what = f"clusters: {', '.join(c['clusters'])}"
            L.append(
                f"{i}. {r['env']['date']}, git {r['env']['jaxdyn_commit']}: {cells} cells "
                f"({', '.join(c['dtypes'])}; {what}), {r.get('total_s', 0) / 60:.1f} min"
            )
        L.append("")
    for dtype in dtypes:
        L += [f"### GPU, {dtype} (us/sample)", ""]
        head = ["robot", "algorithm"] + [("B=1 us/call" if b == 1 else f"B={b}") for b in batches]
        head += ["samples/s at largest B", "compile s (largest B)", "max rel err vs CPU f64"]
        L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for rname in robots:
            for alg in ALGS + DERIV_ALGS:
                recs = [jd.get((rname, dtype, alg, b)) for b in batches]
                if not any(recs):
                    continue
                errs = [r["err"] for r in recs if r and r.get("err") is not None]
                big = next((r for r in reversed(recs) if r), {})  # the largest B measured
                rate = f"{1 / big['per_sample_s']:.3g}" if "per_sample_s" in big else "-"
                L.append(
                    "| "
                    + " | ".join(
                        [rname, alg]
                        + [_t(r) for r in recs]
                        + [
                            rate,
                            f"{big['compile_s']:.1f}" if "compile_s" in big else "-",
                            f"{max(errs):.1e}" if errs else "n/a",
                        ]
                    )
                    + " |"
                )
            for fn in MJX_FNS:
                alg = bench.MJX_INFO[fn][0]
                recs = [mj.get((rname, dtype, fn, b)) for b in batches]
                if not any(recs):
                    continue
                cells = []
                for b, r in zip(batches, recs):
                    j = jd.get((rname, dtype, alg, b))
                    c = _t(r)
                    if r and "per_sample_s" in r and j and "per_sample_s" in j:
                        c += f" ({r['per_sample_s'] / j['per_sample_s']:.1f}x)"
                    if r and r.get("out_dtype") and r["out_dtype"] != dtype:
                        c += f" [{r['out_dtype']}]"
                    cells.append(c if r else "-")
                big = next((r for r in reversed(recs) if r), {})
                rate = f"{1 / big['per_sample_s']:.3g}" if "per_sample_s" in big else "-"
                L.append(
                    "| "
                    + " | ".join(
                        [rname, f"MJX {fn} (vs {alg})"]
                        + cells
                        + [rate, f"{big['compile_s']:.1f}" if "compile_s" in big else "-", ""]
                    )
                    + " |"
                )
        L.append("")
    L += _render_clusters(results)
    return "\n".join(L) + "\n"


def _csv(s, conv=str):
    return tuple(conv(x) for x in s.split(",") if x)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--robots", type=_csv, default=ROBOTS)
    p.add_argument("--algorithms", type=_csv, default=ALGS)
    p.add_argument("--mjx-fns", type=_csv, default=MJX_FNS, help="'' for none")
    p.add_argument("--batches", type=lambda s: _csv(s, int), default=BATCHES)
    p.add_argument("--mjx-batches", type=lambda s: _csv(s, int), default=BATCHES[1:])
    p.add_argument("--dtypes", type=_csv, default=DTYPES)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--clusters",
        action="store_true",
        help="time the kinematic-loop algorithms instead (--robots default: "
        + ",".join(CLUSTER_ROBOTS)
        + ")",
    )
    p.add_argument("--json", help="write the raw results here")
    p.add_argument("--from-json", nargs="+", help="render these result files instead of running")
    p.add_argument("--out", default=str(HERE / "RESULTS.md"))
    a = p.parse_args(argv)
    if a.from_json:
        results = [json.loads(Path(f).read_text()) for f in a.from_json]
    else:

        def log(s):
            print(s, flush=True)

        if a.clusters:
            robots = CLUSTER_ROBOTS if a.robots == ROBOTS else a.robots
            res = run_clusters(robots, a.batches, a.dtypes, a.repeats, log, a.json)
            results = [res]
        else:
            res = run(
                a.robots,
                a.algorithms,
                a.mjx_fns,
                a.batches,
                tuple(b for b in a.mjx_batches if b in a.batches),
                a.dtypes,
                a.repeats,
                log,
                a.json,
            )
            results = [res]
    section = render(results)
    print(section)
    if a.out:
        write_section(a.out, section)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())

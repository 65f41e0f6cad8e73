"""Cluster-dynamics benchmark: the relative timings of the paper's Tables II-IV, and a scaling
plot on transmission chains.

    python benchmarks/clusters.py                       # writes the "## Clusters" section
    python benchmarks/clusters.py --batch 256 --out /tmp/r.md --no-plot

Reference: Chignoli, Adrian, Kim & Wensing, "Recursive rigid-body dynamics algorithms for
systems with kinematic loops" (T-RO 2024), §IX: Table II (inverse dynamics: C-RNEA vs projected
RNEA and the reflected-inertia approximation), Table III (forward dynamics: C-ABA vs projection
method, Lagrange multipliers, approximation) and Table IV (inverse OSIM: C-EFPA vs projection).
The paper times single calls in C++; here every method is ``jax.jit(jax.vmap(f))`` at one batch
size (default 1024, float64, single-threaded XLA:CPU), per-sample time = median over repeats.
Relative cells are ``(t_method / t_cluster - 1) * 100 %`` (positive: the method is slower than
the cluster algorithm), as in the paper's tables.

The scaling plot (``benchmarks/figures/clusters_scaling.png``) times C-ABA, the projection method
and Lagrange multipliers on chains of geared transmissions (GT) and parallel belt transmissions
(PBT) of 2..24 links (grbda's uniform parameters, :func:`jaxdyn.clusters.robots.transmission_chain`).

Only this file's section of ``benchmarks/RESULTS.md`` (from ``## Clusters`` to the next ``## ``
heading) is replaced; the other sections are kept.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen="
                               "false intra_op_parallelism_threads=1").strip()
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

from jaxdyn import clusters as C  # noqa: E402
from jaxdyn.clusters import robots  # noqa: E402

#: robot -> end effectors for the OSIM table (feet, and hands for the humanoids)
ROBOTS = {
    "tello_humanoid": ("left-foot", "right-foot", "left-elbow", "right-elbow"),
    "mit_humanoid": ("left_ankle_link", "right_ankle_link", "left_elbow_link",
                     "right_elbow_link"),
    "mini_cheetah": ("FR_knee_link", "FL_knee_link", "HR_knee_link", "HL_knee_link"),
    "jvrc1_humanoid": ("left-ankle-pitch", "right-ankle-pitch", "left-wrist-yaw",
                       "right-wrist-yaw"),
}


def _timer(f, args, min_time=0.05, repeats=5):
    """Median wall time of one call of the compiled ``f(*args)`` (inputs pre-built)."""
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            jax.block_until_ready(f(*args))
            n += 1
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        times.append(dt / n)
    return statistics.median(times)


def _inputs(m, batch, seed=0):
    k = jax.random.split(jax.random.PRNGKey(seed), 4)
    q = jax.jit(jax.vmap(lambda kk: C.random_configuration(m, kk, scale=0.5)))(
        jax.random.split(k[0], batch))
    v = jax.random.normal(k[1], (batch, m.nv))
    a = jax.random.normal(k[2], (batch, m.nv))
    return jax.block_until_ready((q, v, a))


def time_robot(name, ees, batch, log):
    m = robots.load(name)
    q, v, a = _inputs(m, batch)
    tau = jax.jit(jax.vmap(lambda q, v, a: C.crnea(m, q, v, a)))(q, v, a)
    approx = None
    try:
        approx = C.approximate_model(m, "diagonal")
        qa, va = jax.vmap(lambda q, v: C.approximate_state(m, approx, q, v))(q, v)
    except ValueError as e:  # implicit loops (Tello's differentials)
        log(f"  {name}: no reflected-inertia approximation ({e})")
    fns = {
        "crnea": (lambda q, v, a: C.crnea(m, q, v, a), (q, v, a)),
        "projected_rnea": (lambda q, v, a: C.projected_rnea(m, q, v, a), (q, v, a)),
        "caba": (lambda q, v, t: C.caba(m, q, v, t), (q, v, tau)),
        "projection_fd": (lambda q, v, t: C.projection_fd(m, q, v, t), (q, v, tau)),
        "lagrange_fd": (lambda q, v, t: C.lagrange_fd(m, q, v, t), (q, v, tau)),
        "cefpa": (lambda q: C.cefpa(m, q, ees), (q,)),
        "projected_osim": (lambda q: C.projected_osim(m, q, ees), (q,)),
    }
    if approx is not None:
        fns.update({
            "approx_rnea": (lambda q, v, a: C.crnea(approx, q, v, a), (qa, va, a)),
            "approx_aba": (lambda q, v, t: C.caba(approx, q, v, t), (qa, va, tau)),
            "approx_efpa": (lambda q: C.cefpa(approx, q, ees), (qa,)),
        })
    out = {"nv": m.nv, "nb": m.nb, "clusters": m.n_clusters}
    for k, (f, args) in fns.items():
        jf = jax.jit(jax.vmap(f))
        t0 = time.perf_counter()
        jf.lower(*args).compile()
        ct = time.perf_counter() - t0
        t = _timer(jf, args) / batch
        out[k] = t
        log(f"  {name:16s} {k:16s} {t * 1e6:9.2f} us/sample  (compile {ct:.1f} s)")
    return out


def time_chains(lengths, batch, log):
    res = {}
    for kind in ("GT", "PBT"):
        for n in lengths:
            m = robots.transmission_chain(n, kind)
            q, v, a = _inputs(m, batch)
            tau = jax.jit(jax.vmap(lambda q, v, a: C.crnea(m, q, v, a)))(q, v, a)
            for k, f in (("caba", C.caba), ("projection_fd", C.projection_fd),
                         ("lagrange_fd", C.lagrange_fd)):
                jf = jax.jit(jax.vmap(lambda q, v, t, f=f: f(m, q, v, t)))
                t = _timer(jf, (q, v, tau), min_time=0.03, repeats=3) / batch
                res[(kind, n, k)] = t
                log(f"  {kind} n={n:2d} {k:14s} {t * 1e6:9.2f} us/sample")
    return res


def _pct(t, ref):
    return f"{(t / ref - 1) * 100:+.0f} %"


def render(results, chains, batch, meta):
    L = ["## Clusters", "",
         "Kinematic-loop (cluster) algorithms of Chignoli et al. (T-RO 2024) against the paper's "
         "baselines: `python benchmarks/clusters.py` (per-sample time of "
         f"`jax.jit(jax.vmap(f))`, batch {batch}, float64, single-threaded XLA:CPU, median of 5 "
         "repeats; random valid states). Relative cells: `(t_method / t_cluster - 1)`, positive = "
         "slower than the cluster algorithm, as in the paper's Tables II-IV.", "",
         f"- Date: {meta['date']}; CPU: {meta['cpu']}; load average at start "
         f"{meta['load0']}, at end {meta['load1']}; jax {jax.__version__}.",
         "- Approximate = reflected-inertia link tree with diagonal armature "
         "(`approximate_model(m, 'diagonal')`, rotors removed); Tello has none (its "
         "differentials are implicit loops).",
         "- The Lagrange and projection methods build the dense spanning-tree `H` by jaxdyn's "
         "CRBA; the projected RNEA is jaxdyn's spanning-tree RNEA followed by `G^T`.", ""]
    L += ["### Table II analogue: inverse dynamics (C-RNEA)", "",
          "| robot | nv | C-RNEA us | projected RNEA | approximate RNEA |", "|---|---|---|---|---|"]
    for name, r in results.items():
        ap = _pct(r["approx_rnea"], r["crnea"]) if "approx_rnea" in r else "n/a"
        L.append(f"| {name} | {r['nv']} | {r['crnea'] * 1e6:.2f} | "
                 f"{_pct(r['projected_rnea'], r['crnea'])} | {ap} |")
    L += ["", "### Table III analogue: forward dynamics (C-ABA)", "",
          "| robot | C-ABA us | projection method | Lagrange multipliers | approximate ABA |",
          "|---|---|---|---|---|"]
    for name, r in results.items():
        ap = _pct(r["approx_aba"], r["caba"]) if "approx_aba" in r else "n/a"
        L.append(f"| {name} | {r['caba'] * 1e6:.2f} | {_pct(r['projection_fd'], r['caba'])} | "
                 f"{_pct(r['lagrange_fd'], r['caba'])} | {ap} |")
    L += ["", "### Table IV analogue: inverse operational-space inertia (C-EFPA, 4 end effectors)",
          "", "| robot | C-EFPA us | projected inverse OSIM | approximate EFPA |",
          "|---|---|---|---|"]
    for name, r in results.items():
        ap = _pct(r["approx_efpa"], r["cefpa"]) if "approx_efpa" in r else "n/a"
        L.append(f"| {name} | {r['cefpa'] * 1e6:.2f} | {_pct(r['projected_osim'], r['cefpa'])} "
                 f"| {ap} |")
    if chains:
        lengths = sorted({n for (_, n, _) in chains})
        L += ["", "### Scaling on transmission chains (forward dynamics, us/sample)", "",
              "![scaling](figures/clusters_scaling.png)", "",
              "| chain | links | C-ABA | projection | Lagrange |", "|---|---|---|---|---|"]
        for kind in ("GT", "PBT"):
            for n in lengths:
                c = [chains[(kind, n, k)] * 1e6 for k in ("caba", "projection_fd",
                                                          "lagrange_fd")]
                L.append(f"| {kind} | {n} | {c[0]:.2f} | {c[1]:.2f} | {c[2]:.2f} |")
    L += ["", "Notes: the paper times single C++ calls; these are batched JAX programs, where "
          "dense baselines (one batched matrix factorisation) are relatively cheaper than in "
          "serial code for small systems, and the cluster algorithms pay per-level kernel "
          "launches. The machine may be shared: compare cells of one run only.", ""]
    return "\n".join(L)


def plot(chains, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    labels = {"caba": "C-ABA", "projection_fd": "projection method",
              "lagrange_fd": "Lagrange multipliers"}
    for ax, kind in zip(axes, ("GT", "PBT")):
        lengths = sorted({n for (k, n, _) in chains if k == kind})
        for k, lab in labels.items():
            ax.plot(lengths, [chains[(kind, n, k)] * 1e6 for n in lengths], "o-", label=lab)
        ax.set_title(f"{kind} chain")
        ax.set_xlabel("links")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("us / sample (batch, float64, 1 thread)")
    axes[0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def write_section(section, out):
    out = Path(out)
    text = out.read_text() if out.exists() else "# jaxdyn benchmark results\n"
    lines = text.split("\n")
    start = next((i for i, l in enumerate(lines) if l.strip() == "## Clusters"), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + section
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
                   len(lines))
        new = "\n".join(lines[:start] + section.rstrip("\n").split("\n") + [""] + lines[end:])
    out.write_text(new.rstrip("\n") + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--robots", default=",".join(ROBOTS))
    p.add_argument("--lengths", default="2,4,8,12,16,20,24")
    p.add_argument("--chain-batch", type=int, default=None, help="default: --batch")
    p.add_argument("--out", default=str(HERE / "RESULTS.md"))
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--no-chains", action="store_true")
    args = p.parse_args(argv)

    def log(s):
        print(s, flush=True)

    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                cpu=f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical "
                    "cores", load0=" ".join(f"{x:.1f}" for x in os.getloadavg()))
    results = {}
    for name in args.robots.split(","):
        log(f"{name}:")
        results[name] = time_robot(name, ROBOTS[name], args.batch, log)
    chains = {}
    if not args.no_chains:
        lengths = [int(x) for x in args.lengths.split(",")]
        chains = time_chains(lengths, args.chain_batch or args.batch, log)
        if not args.no_plot:
            plot(chains, HERE / "figures" / "clusters_scaling.png")
    meta["load1"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    section = render(results, chains, args.batch, meta)
    write_section(section, args.out)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

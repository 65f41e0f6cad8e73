"""Cluster-dynamics benchmark: the paper's Tables II-IV (relative timings), the scaling plot on
transmission chains, and the accuracy experiment on the MIT Humanoid leg.

    python benchmarks/clusters.py                       # writes the "## Clusters" section
    python benchmarks/clusters.py --batch 256 --out /tmp/r.md --no-plot

Reference: Chignoli, Adrian, Kim & Wensing, "Recursive rigid-body dynamics algorithms for
systems with kinematic loops" (T-RO 2024), §IX: Table II (inverse dynamics: C-RNEA vs projected
RNEA and the reflected-inertia approximation), Table III (forward dynamics: C-ABA vs projection
method, Lagrange multipliers, approximation), Table IV (inverse OSIM: C-EFPA vs projection),
Fig. 11 (forward-dynamics time of GT / PBT chains of 2..24 links) and Fig. 14 (torque error of
the approximate and unconstrained inverse dynamics on the MIT Humanoid leg).
The paper times single calls in C++; here every method is ``jax.jit(jaxdyn.vmap(f,
chunk_size=32))`` (``jax.vmap`` evaluated 32 samples at a time in a ``lax.map`` loop, so that
intermediates stay in cache; ``--chunk 0`` for plain ``jax.vmap``) at one batch size (default
1024, float64, single-threaded XLA:CPU), all methods alike. Per-sample time = median over repeats
of the process CPU time (``time.process_time``: robust to other processes time-slicing the shared
cores; XLA runs single-threaded here, so it equals the compute time), with the methods of one robot
timed in interleaved rounds so that load changes hit them alike, each robot (and chain length)
in a fresh process.
Relative cells are ``(t_method / t_cluster - 1) * 100 %`` (positive: the method is slower than
the cluster algorithm), as in the paper's tables.

Targets (issue 4): C-ABA faster than the projection and Lagrange methods on every robot at batch
1024; C-ABA on Mini Cheetah within 2x of plain ABA (``jaxdyn.aba``) on its link-only tree.

Only this file's section of ``benchmarks/RESULTS.md`` (from ``## Clusters`` to the next ``## ``
heading) is replaced; the other sections are kept.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _env import cores_note, single_threaded, write_section  # noqa: E402

single_threaded()
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn  # noqa: E402

jax.config.update("jax_enable_x64", True)

from jaxdyn import clusters as C  # noqa: E402
from jaxdyn.algorithms.aba import aba_plain as plain_aba  # noqa: E402
from jaxdyn.clusters import robots  # noqa: E402

#: robot -> end effectors for the OSIM table (feet, and hands for the humanoids)
ROBOTS = {
    "mit_humanoid": ("left_ankle_link", "right_ankle_link", "left_elbow_link", "right_elbow_link"),
    "tello_humanoid": ("left-foot", "right-foot", "left-elbow", "right-elbow"),
    "mini_cheetah": ("FR_knee_link", "FL_knee_link", "HR_knee_link", "HL_knee_link"),
    "gt_chain": ("link11", "link5"),
    "pbt_chain": ("link11", "link5"),
    "jvrc1_humanoid": (
        "left-ankle-pitch",
        "right-ankle-pitch",
        "left-wrist-yaw",
        "right-wrist-yaw",
    ),
}

#: The paper's Tables II-IV (relative %, ``(t / t_cluster - 1) * 100``). Our text copy of the
#: paper lost the robot names of five of the six columns (only "JVRC-1", last, survived); the
#: order used here, MIT Humanoid, Tello, Mini Cheetah, GT, PBT, JVRC-1, is inferred from the
#: text (the C-EFPA speed-ups "are small" for the PBT chain and Tello: +7.80 and +6.3) and from
#: the order the robots are introduced in §IX.
PAPER_ORDER = (
    "mit_humanoid",
    "tello_humanoid",
    "mini_cheetah",
    "gt_chain",
    "pbt_chain",
    "jvrc1_humanoid",
)
PAPER = {
    "approx_rnea": (-40.3, -36.2, -41.0, -42.0, -59.6, -37.7),
    "projected_rnea": (+38.0, +37.8, +36.7, +35.9, +22.4, +36.6),
    "approx_aba": (-34.1, -34.6, -35.3, -38.6, -49.4, -38.4),
    "projection_fd": (+86.8, +73.5, +21.0, +32.5, +22.2, +87.3),
    "lagrange_fd": (+133.1, +119.8, +76.3, +106.2, +82.7, +212.8),
    "approx_efpa": (-35.7, -52.1, -28.6, -37.4, -51.4, -22.54),
    "projected_osim": (+51.8, +6.3, +19.0, +23.2, +7.80, +107.4),
}


def paper(key, robot):
    return PAPER[key][PAPER_ORDER.index(robot)]


def load_robot(name):
    """Bundled robot, or the paper's 12-link chains (grbda's uniform parameters)."""
    if name == "gt_chain":
        return robots.transmission_chain(12, "GT")
    if name == "pbt_chain":
        return robots.transmission_chain(12, "PBT")
    return robots.load(name)


#: samples per chunk of :func:`jaxdyn.vmap` (None: plain ``jax.vmap``); set by ``--chunk``
CHUNK = 32


def batched(f):
    """The batched entry point used for every method: ``jax.jit(jaxdyn.vmap(f, 0, CHUNK))``."""
    return jax.jit(jaxdyn.vmap(f, 0, chunk_size=CHUNK))


def _once(f, args, min_time):
    """Process CPU time of one call of the compiled ``f(*args)``, averaged over a loop of at
    least ``min_time`` seconds."""
    n, t0 = 0, time.process_time()
    while True:
        jax.block_until_ready(f(*args))
        n += 1
        dt = time.process_time() - t0
        if dt >= min_time:
            return dt / n


def time_interleaved(fns, min_time=0.05, rounds=7):
    """Median per-call time of each compiled ``fns[name] = (f, args)``, measured in
    ``rounds`` rounds that time every method once in turn (interleaved, so that load changes
    on the shared machine hit all methods alike; ratios are taken from the same rounds)."""
    for f, args in fns.values():
        jax.block_until_ready(f(*args))
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, (f, args) in fns.items():
            times[k].append(_once(f, args, min_time))
    return {k: statistics.median(v) for k, v in times.items()}


def _inputs(m, batch, seed=0):
    k = jax.random.split(jax.random.PRNGKey(seed), 4)
    q = jax.jit(jax.vmap(lambda kk: C.random_configuration(m, kk, scale=0.5)))(
        jax.random.split(k[0], batch)
    )
    v = jax.random.normal(k[1], (batch, m.nv))
    a = jax.random.normal(k[2], (batch, m.nv))
    return jax.block_until_ready((q, v, a))


def time_robot(name, ees, batch, log):
    m = load_robot(name)
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
        fns.update(
            {
                "approx_rnea": (lambda q, v, a: C.crnea(approx, q, v, a), (qa, va, a)),
                "approx_aba": (lambda q, v, t: C.caba(approx, q, v, t), (qa, va, tau)),
                "approx_efpa": (lambda q: C.cefpa(approx, q, ees), (qa,)),
            }
        )
        # plain ABA (jaxdyn.aba, no clusters) on the link-only tree (rotors removed)
        links = C.approximate_model(m, "none")
        lt = links.tree
        qt = jax.vmap(lambda q: C.spanning_configuration(links, q))(qa)
        fns["aba_links"] = (lambda q, v, t: plain_aba(lt, q, v, t), (qt, va, tau))
    out = {"nv": m.nv, "nb": m.nb, "clusters": m.n_clusters}
    compiled, ctime = {}, {}
    for k, (f, args) in fns.items():
        t0 = time.perf_counter()
        compiled[k] = (batched(f).lower(*args).compile(), args)
        ctime[k] = time.perf_counter() - t0
    res = time_interleaved(compiled)
    for k in fns:
        out[k] = res[k] / batch
        log(f"  {name:16s} {k:16s} {out[k] * 1e6:9.2f} us/sample  (compile {ctime[k]:.1f} s)")
    return out


def time_chains(lengths, batch, log, kinds=("GT", "PBT")):
    res = {}
    for kind in kinds:
        for n in lengths:
            m = robots.transmission_chain(n, kind)
            q, v, a = _inputs(m, batch)
            tau = jax.jit(jax.vmap(lambda q, v, a: C.crnea(m, q, v, a)))(q, v, a)
            fns = {
                k: (
                    batched(lambda q, v, t, f=f: f(m, q, v, t)).lower(q, v, tau).compile(),
                    (q, v, tau),
                )
                for k, f in (
                    ("caba", C.caba),
                    ("projection_fd", C.projection_fd),
                    ("lagrange_fd", C.lagrange_fd),
                )
            }
            r = time_interleaved(fns, min_time=0.03, rounds=5)
            for k, t in r.items():
                res[(kind, n, k)] = t / batch
                log(f"  {kind} n={n:2d} {k:14s} {t / batch * 1e6:9.2f} us/sample")
    return res


def _pct(t, ref):
    return f"{(t / ref - 1) * 100:+.0f} %"


def _cell(r, key, ref, name):
    """``ours (paper)`` relative cell."""
    ours = _pct(r[key], r[ref]) if key in r else "n/a"
    pp = f"{paper(key, name):+.1f} %" if name in PAPER_ORDER else "-"
    return f"{ours} ({pp})"


# ----------------------------------------------------------------------------- accuracy


def accuracy(log, duration=5.0, dt=5e-4, amplitude=0.5, freqs=(0.25, 0.5, 0.75, 1.5)):
    """MIT Humanoid leg, every joint on ``q_i(t) = A sin(omega t)`` (grbda's end-effector
    tracking benchmark: ``A = 0.5``, ``omega / 2 pi`` in {0.25, 0.5, 0.75, 1.5} Hz, 5 s at
    ``dt = 5e-4``); torques of C-RNEA (exact), the reflected-inertia approximations (diagonal,
    block-diagonal) and the unconstrained link tree. Returns per-frequency time series and the RMS
    error per joint."""
    m = robots.load("mit_humanoid_leg")
    kinds = {
        "diagonal": "approximate (diagonal)",
        "block_diagonal": "approximate (block)",
        "none": "unconstrained",
    }
    approx = {k: C.approximate_model(m, k) for k in kinds}
    t = jnp.arange(0.0, duration + 0.5 * dt, dt)
    out = {"t": np.asarray(t), "names": m.v_names, "kinds": kinds, "runs": {}}

    @jax.jit
    def run(omega):
        ph = omega * t[:, None] + jnp.zeros(m.nv)
        q, v, a = (
            amplitude * jnp.sin(ph),
            amplitude * omega * jnp.cos(ph),
            -amplitude * omega**2 * jnp.sin(ph),
        )
        res = {"exact": jax.vmap(lambda q, v, a: C.crnea(m, q, v, a))(q, v, a)}
        for k, ap in approx.items():
            qa, va = jax.vmap(lambda q, v: C.approximate_state(m, ap, q, v))(q, v)
            res[k] = jax.vmap(lambda q, v, a, ap=ap: C.crnea(ap, q, v, a))(qa, va, a)
        return res

    for f in freqs:
        r = jax.tree_util.tree_map(np.asarray, run(2 * np.pi * f))
        rms = {k: np.sqrt(np.mean((r[k] - r["exact"]) ** 2, axis=0)) for k in kinds}
        out["runs"][f] = dict(tau=r, rms=rms, max=np.max(np.abs(r["exact"]), axis=0))
        log(
            f"  accuracy {f} Hz: ankle RMS "
            + ", ".join(f"{kinds[k]} {rms[k][-1]:.4f} Nm" for k in kinds)
            + f"; max |tau_ankle| "
            f"{out['runs'][f]['max'][-1]:.3f} Nm"
        )
    return out


def plot_accuracy(acc, path, freq):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = acc["runs"][freq]
    names = acc["names"]
    fig, axes = plt.subplots(len(names), 1, figsize=(8, 2.0 * len(names)), sharex=True)
    for j, ax in enumerate(axes):
        for k, lab in acc["kinds"].items():
            ax.plot(acc["t"], r["tau"][k][:, j] - r["tau"]["exact"][:, j], label=lab, lw=1)
        ax.set_ylabel(f"{names[j]}\nerror (Nm)", fontsize=7)
        ax.grid(True, alpha=0.3)
    axes[0].set_title(f"MIT Humanoid leg, q_i = 0.5 sin(2 pi {freq} t): torque minus C-RNEA")
    axes[0].legend(fontsize=7)
    axes[-1].set_xlabel("t (s)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- report


def _entry():
    return (
        "jax.jit(jax.vmap(f))" if CHUNK is None else f"jax.jit(jaxdyn.vmap(f, chunk_size={CHUNK}))"
    )


def render(results, chains, acc, batch, meta):
    L = [
        "## Clusters",
        "",
        "Kinematic-loop (cluster) algorithms of Chignoli et al. (T-RO 2024) against the paper's "
        "baselines: `python benchmarks/clusters.py` (per-sample time of "
        f"`{_entry()}`, batch {batch}, every method alike, float64, single-threaded XLA:CPU, "
        "process CPU time (`time.process_time`), median of 7 rounds that time all methods of a "
        "robot in turn, one process per robot; random valid states). Relative cells: "
        "`(t_method / t_cluster - 1)`, positive = slower than the cluster algorithm, as in the "
        "paper's Tables II-IV; **ours (paper)**.",
        "",
        f"- Date: {meta['date']}; CPU: {meta['cpu']}; load average at start "
        f"{meta['load0']}, at end {meta['load1']}; jax {jax.__version__}.",
        "- Approximate = reflected-inertia link tree with diagonal armature "
        "(`approximate_model(m, 'diagonal')`, rotors removed); Tello has none here (its "
        "differentials are implicit loops whose independent coordinates are the rotors).",
        "- The Lagrange and projection methods build the dense spanning-tree `H` by jaxdyn's "
        "CRBA; the projected RNEA is jaxdyn's spanning-tree RNEA followed by `G^T`; Lagrange "
        "solves one KKT system by LU.",
        "- Paper columns: our text copy of the paper lost five of the six column labels; the "
        "mapping MIT Humanoid, Tello, Mini Cheetah, GT, PBT, JVRC-1 is inferred (see "
        "`PAPER_ORDER` in the script).",
        "",
    ]
    # targets
    L += ["### Targets", ""]
    for name, r in results.items():
        ok = r["caba"] < r["projection_fd"] and r["caba"] < r["lagrange_fd"]
        L.append(
            f"- {'PASS' if ok else 'MISS'}: C-ABA faster than projection and Lagrange on "
            f"{name} (batch {batch}): C-ABA {r['caba'] * 1e6:.2f} us, projection "
            f"{r['projection_fd'] * 1e6:.2f} us, Lagrange {r['lagrange_fd'] * 1e6:.2f} us"
        )
    if "mini_cheetah" in results and "aba_links" in results["mini_cheetah"]:
        r = results["mini_cheetah"]
        ratio = r["caba"] / r["aba_links"]
        L.append(
            f"- {'PASS' if ratio <= 2.0 else 'MISS'}: C-ABA on Mini Cheetah within 2x of "
            f"plain ABA (`jaxdyn.aba`) on its link-only tree: {r['caba'] * 1e6:.2f} us vs "
            f"{r['aba_links'] * 1e6:.2f} us = {ratio:.2f}x"
        )
    L += [
        "",
        "### Table II analogue: inverse dynamics (C-RNEA)",
        "",
        "| robot | nv | C-RNEA us | projected RNEA | approximate RNEA |",
        "|---|---|---|---|---|",
    ]
    for name, r in results.items():
        L.append(
            f"| {name} | {r['nv']} | {r['crnea'] * 1e6:.2f} | "
            f"{_cell(r, 'projected_rnea', 'crnea', name)} | "
            f"{_cell(r, 'approx_rnea', 'crnea', name)} |"
        )
    L += [
        "",
        "### Table III analogue: forward dynamics (C-ABA)",
        "",
        "| robot | C-ABA us | projection method | Lagrange multipliers | approximate ABA | "
        "plain ABA, link-only tree |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        al = _pct(r["aba_links"], r["caba"]) if "aba_links" in r else "n/a"
        L.append(
            f"| {name} | {r['caba'] * 1e6:.2f} | {_cell(r, 'projection_fd', 'caba', name)} "
            f"| {_cell(r, 'lagrange_fd', 'caba', name)} | "
            f"{_cell(r, 'approx_aba', 'caba', name)} | {al} |"
        )
    L += [
        "",
        "### Table IV analogue: inverse operational-space inertia (C-EFPA; 4 end effectors, "
        "2 on the chains)",
        "",
        "| robot | C-EFPA us | projected inverse OSIM | approximate EFPA |",
        "|---|---|---|---|",
    ]
    for name, r in results.items():
        L.append(
            f"| {name} | {r['cefpa'] * 1e6:.2f} | "
            f"{_cell(r, 'projected_osim', 'cefpa', name)} | "
            f"{_cell(r, 'approx_efpa', 'cefpa', name)} |"
        )
    if chains:
        lengths = sorted({n for (_, n, _) in chains})
        L += [
            "",
            "### Scaling on transmission chains (forward dynamics, us/sample; paper Fig. 11)",
            "",
            "![scaling](figures/clusters_scaling.png)",
            "",
            "| chain | links | C-ABA | projection | Lagrange |",
            "|---|---|---|---|---|",
        ]
        for kind in ("GT", "PBT"):
            for n in lengths:
                c = [chains[(kind, n, k)] * 1e6 for k in ("caba", "projection_fd", "lagrange_fd")]
                L.append(f"| {kind} | {n} | {c[0]:.2f} | {c[1]:.2f} | {c[2]:.2f} |")
        hi = lengths[-1]
        lo = 12 if 12 in lengths and hi > 12 else lengths[0]
        L.append("")
        for kind in ("GT", "PBT"):
            g = ", ".join(
                f"{lab} {chains[(kind, hi, k)] / chains[(kind, lo, k)]:.2f}x"
                for k, lab in (
                    ("caba", "C-ABA"),
                    ("projection_fd", "projection"),
                    ("lagrange_fd", "Lagrange"),
                )
            )
            L.append(
                f"- {kind}: time growth from {lo} to {hi} links ({hi / lo:.1f}x the links): {g}."
            )
    if acc:
        names = acc["names"]
        L += [
            "",
            "### Accuracy: MIT Humanoid leg (paper §IX-B, Fig. 14)",
            "",
            "Every joint follows `q_i(t) = 0.5 sin(omega t)` for 5 s at dt = 5e-4 (grbda's "
            "tracking benchmark); RMS over time of the torque difference to C-RNEA (Nm), per "
            "joint, and in % of the joint's maximum exact torque. The paper's ankle values were "
            "lost from our text copy (its Fig. 14 / §IX-B: unconstrained error large, the "
            "diagonal approximation reduces it, neither is exact).",
            "",
            "![accuracy](figures/clusters_accuracy.png)",
            "",
            "| omega/2pi (Hz) | model | " + " | ".join(names) + " |",
            "|---|---|" + "---|" * len(names),
        ]
        for f, run in acc["runs"].items():
            for k, lab in acc["kinds"].items():
                cells = [
                    f"{run['rms'][k][j]:.4f} ({100 * run['rms'][k][j] / run['max'][j]:.1f} %)"
                    for j in range(len(names))
                ]
                L.append(f"| {f} | {lab} | " + " | ".join(cells) + " |")
    L += [
        "",
        "Notes: the paper times single C++ calls; these are batched JAX programs, where "
        "dense baselines (one batched matrix factorisation) are relatively cheaper than in "
        "serial code for small systems, and the cluster algorithms pay per-level kernel "
        "launches. The machine may be shared: compare cells of one run only; repeated runs moved "
        "single cells by up to ~20 % (e.g. the 12-link GT chain in the robot table and in the "
        "scaling table are separate measurements of the same model).",
        "",
        "C-RNEA, C-ABA and C-EFPA carry transmission rotors that are symmetric about their "
        "axis (Mini Cheetah, MIT Humanoid, GT and PBT chains, Tello's geared joints; not "
        "JVRC-1's, whose rotor inertias are symmetric about another axis, nor the rotors inside "
        "Tello's differentials, which stay implicit clusters) by their parent "
        "bodies, exactly (`jaxdyn.clusters.fold_rotors`, applied at load): the passes run on "
        "the link tree (13 "
        "bodies instead of 25 on Mini Cheetah) and each rotor adds `J [s; 0] G` to its "
        "cluster's `Ub` and its gyroscopic torque to what the cluster hands its parent. Before "
        "that change C-ABA ran on the 25-body spanning tree and took 2.05x plain ABA on Mini "
        "Cheetah.",
        "",
    ]
    return "\n".join(L)


def plot(chains, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    labels = {
        "caba": "C-ABA",
        "projection_fd": "projection method",
        "lagrange_fd": "Lagrange multipliers",
    }
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
    plt.close(fig)


def _worker(spec, batch, log):
    """One isolated timing job (run in its own process by :func:`_isolated`)."""
    what, _, rest = spec.partition(":")
    if what == "robot":
        return time_robot(rest, ROBOTS[rest], batch, log)
    kind, n = rest.split(":")
    return {
        f"{k}|{nn}|{m}": t for (k, nn, m), t in time_chains([int(n)], batch, log, (kind,)).items()
    }


def _isolated(spec, args, log):
    """Run ``spec`` in a fresh Python process and return its result. Every robot (and chain
    length) is timed in its own process: in one long-lived process the timings of later robots
    drifted upwards (by up to 30 %, allocator / cache state left by earlier jobs), which biased
    the comparison between robots run early and late."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        spec,
        "--batch",
        str(args.batch),
        "--chunk",
        str(args.chunk),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
        else:
            log(line)
    if proc.returncode != 0 or result is None:
        raise RuntimeError(f"worker {spec} failed:\n{proc.stderr[-3000:]}")
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--robots", default=",".join(ROBOTS))
    p.add_argument("--lengths", default="2,4,6,8,12,16,20,24")
    p.add_argument("--chain-batch", type=int, default=None, help="default: --batch")
    p.add_argument("--out", default=str(HERE / "RESULTS.md"))
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--no-chains", action="store_true")
    p.add_argument("--no-accuracy", action="store_true")
    p.add_argument(
        "--chunk",
        type=int,
        default=32,
        help="jaxdyn.vmap chunk size for every method (0: plain jax.vmap)",
    )
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--in-process",
        action="store_true",
        help="time everything in this process (default: one process per job)",
    )
    args = p.parse_args(argv)
    global CHUNK
    CHUNK = args.chunk or None

    def log(s):
        print(s, flush=True)

    if args.worker:
        print("RESULT " + json.dumps(_worker(args.worker, args.batch, log)), flush=True)
        return 0

    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        cpu=f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical cores "
        f"({cores_note()})",
        load0=" ".join(f"{x:.1f}" for x in os.getloadavg()),
    )
    acc = None
    if not args.no_accuracy:
        acc = accuracy(log)
        if not args.no_plot:
            plot_accuracy(acc, HERE / "figures" / "clusters_accuracy.png", 0.5)
    results = {}
    for name in args.robots.split(","):
        log(f"{name}:")
        results[name] = (
            time_robot(name, ROBOTS[name], args.batch, log)
            if args.in_process
            else _isolated(f"robot:{name}", args, log)
        )
    chains = {}
    if not args.no_chains:
        lengths = [int(x) for x in args.lengths.split(",")]
        cb = args.chain_batch or args.batch
        if args.in_process:
            chains = time_chains(lengths, cb, log)
        else:
            for kind in ("GT", "PBT"):
                for n in lengths:
                    r = _isolated(
                        f"chain:{kind}:{n}", argparse.Namespace(batch=cb, chunk=args.chunk), log
                    )
                    chains.update(
                        {
                            (k, int(nn), m): t
                            for key, t in r.items()
                            for k, nn, m in [key.split("|")]
                        }
                    )
        if not args.no_plot:
            plot(chains, HERE / "figures" / "clusters_scaling.png")
    meta["load1"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    section = render(results, chains, acc, args.batch, meta)
    write_section(args.out, section)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

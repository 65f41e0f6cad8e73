"""Delassus matrix benchmarks: operation counts and run times (PV-OSIMr paper, §IV).

    python benchmarks/osim.py            # all parts, ~3 min on an idle 2-core machine
    python benchmarks/osim.py --quick    # smaller grids (smoke run, < 1 min)
    python benchmarks/osim.py --parts talos,pinocchio

Parts (each appends to the ``## Delassus (PV-OSIMr)`` section of ``benchmarks/RESULTS.md``,
replacing an older version of that section only; figures go to ``benchmarks/figures/``):

* ``scaling`` -- the mechanism of the paper's Fig. 3a (Sathya et al. 2024, §IV-B; the
  authors' ``examples/long_tree.m``): a floating-base stem of ``n`` revolute links with ``b``
  branches of 7 revolute links attached at each end of the stem, a 6D weld at every branch
  tip (``m = 12 b``). Operation counts of PV-OSIM, EFPA and PV-OSIMr against the stem
  length for ``b = 1, 2, 4, 7, 10`` reproduce Fig. 3b-f (``osim_scaling_ops.png``); run time
  per sample on a subset (``osim_scaling_time.png``).
* ``talos`` -- talos_full standing (Fig. 4): a 6D weld per foot; four 3D connects per sole
  (12D per foot); feet and both wrists welded (the §IV-E caveat case): operation counts of all
  methods and time per sample at batch 1024, next to Pinocchio's ``computeDelassusMatrix``
  (``osim_talos.png``).
* ``pinocchio`` -- per-sample time of ``jit(vmap(delassus))`` (PV-OSIMr) at batch 1024 against
  Pinocchio's ``computeDelassusMatrix`` per call, on solo12 (a 3D connect per foot) and
  talos_full (a 6D weld per foot); target: no slower than 1.5x.

Operation counts are XLA's cost analysis (``flops``) of the lowered, not yet optimised HLO of
``jax.jit(delassus)`` for one sample: the arithmetic the algorithm asks for, like the CasADi
instruction counts of the paper. The compiled module's analysis
(``lower(...).compile().cost_analysis()``) is also reported for the humanoid: it counts fused
elementwise chains several times over (e.g. 300k "flops" for the 47-level forward kinematics
of a 40-link stem whose lowered HLO has 14k, executed in 2.5 us) and so is not a measure of
work done; it also needs a compile per point, which the scaling grid cannot afford.

Single-threaded XLA (``--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1``),
float64, jaxdyn value checks on (library default). Times: the minimum and the median over
repeats of the per-sample time of one batched call (the machine is shared: the minimum is the
better estimate of the undisturbed cost).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

if "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen"
                               "=false intra_op_parallelism_threads=1").strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn import Connect, Weld, robots  # noqa: E402

HERE = Path(__file__).resolve().parent
FIGDIR = HERE / "figures"
RESULTS = HERE / "RESULTS.md"
SECTION = "## Delassus (PV-OSIMr)"
TARGET_RATIO = 1.5


# ============================================================================ helpers
def write_section(path: Path, heading: str, body: str) -> None:
    """Replace the section ``heading`` (up to the next ``## `` heading) or append it."""
    text = path.read_text() if path.exists() else "# jaxdyn benchmark results\n"
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.strip() == heading), None)
    new = [heading, ""] + body.rstrip().splitlines() + [""]
    if start is None:
        out = lines + ([""] if lines and lines[-1].strip() else []) + new
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
                   len(lines))
        out = lines[:start] + new + lines[end:]
    path.write_text("\n".join(out).rstrip() + "\n")


def time_per_sample(f, args, batch, repeats=9, min_time=0.03):
    """(min, median) seconds per sample of ``f(*args)`` (batched, already compiled)."""
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            jax.block_until_ready(f(*args))
            n += 1
            el = time.perf_counter() - t0
            if el >= min_time:
                break
        ts.append(el / n / batch)
    return min(ts), float(np.median(ts))


def lowered_flops(f, *args):
    return float(jax.jit(f).lower(*args).cost_analysis()["flops"])


def env_lines():
    try:
        import pinocchio as pin

        pv = pin.__version__
    except Exception:  # pragma: no cover
        pv = "not installed"
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    return [f"- Date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical cores; "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
            f"- jax {jax.__version__}, pinocchio {pv}; XLA_FLAGS={os.environ['XLA_FLAGS']!r}; "
            "float64"]


def random_states(model, batch, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), batch)
    return jax.jit(jax.vmap(lambda k: jaxdyn.random_configuration(model, k)))(keys)


# ============================================================================ mechanisms
def mechanism_urdf(stem: int, branches: int, branch_len: int = 7) -> tuple[str, list]:
    """The Fig. 3a mechanism: stem ``s0..s{stem-1}`` (``s0`` becomes the floating base),
    ``branches`` chains of ``branch_len`` revolute links at each end of the stem."""
    axes = ("0 0 1", "0 1 0", "1 0 0")
    out = ['<?xml version="1.0"?><robot name="stem">']

    def link(name):
        return (f'<link name="{name}"><inertial><origin xyz="0.1 0.01 0" rpy="0 0 0"/>'
                '<mass value="1"/><inertia ixx="0.01" ixy="0" ixz="0" iyy="0.02" iyz="0" '
                'izz="0.02"/></inertial></link>')

    def joint(name, parent, child, xyz, k):
        return (f'<joint name="{name}" type="revolute"><parent link="{parent}"/>'
                f'<child link="{child}"/><origin xyz="{xyz}" rpy="0.3 0 0"/>'
                f'<axis xyz="{axes[k % 3]}"/><limit lower="-3" upper="3" effort="1" '
                'velocity="1"/></joint>')

    out.append(link("s0"))
    for i in range(1, stem):
        out += [link(f"s{i}"), joint(f"js{i}", f"s{i - 1}", f"s{i}", "0.2 0 0", i)]
    tips = []
    for side, att in (("a", f"s{stem - 1}"), ("b", "s0")):
        for k in range(branches):
            parent = att
            for j in range(branch_len):
                nm = f"b{side}{k}_{j}"
                xyz = "0.2 0.05 0" if j else f"0 {0.1 * k} 0.1"
                out += [link(nm), joint(f"j{nm}", parent, nm, xyz, j + k)]
                parent = nm
            tips.append(parent)
    out.append("</robot>")
    return "".join(out), tips


def mechanism(stem, branches):
    xml, tips = mechanism_urdf(stem, branches)
    model = jaxdyn.load_urdf(xml, floating_base=True)
    return model, tuple(Weld(t) for t in tips)


# ============================================================================ parts
SCALING_METHODS = ("pv_osim", "efpa", "pv_osimr")
COLORS = {"pv_osim": "tab:blue", "efpa": "tab:orange", "pv_osimr": "tab:green",
          "ltl": "tab:red", "dense": "tab:gray", "pinocchio": "black"}
LABELS = {"pv_osim": "PV-OSIM", "efpa": "EFPA", "pv_osimr": "PV-OSIMr", "ltl": "LTL",
          "dense": "dense (Cholesky)", "pinocchio": "Pinocchio"}


def part_scaling(quick, log):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    branches = (1, 2, 4) if quick else (1, 2, 4, 7, 10)
    stems = (1, 10, 30) if quick else (1, 10, 25, 50, 100)
    ops = {}  # (b, method) -> list of flops over stems
    t0 = time.time()
    for b in branches:
        for n in stems:
            model, cs = mechanism(n, b)
            q = jaxdyn.neutral_configuration(model)
            for meth in SCALING_METHODS:
                fl = lowered_flops(lambda q: jaxdyn.delassus(model, q, cs, meth), q)
                ops.setdefault((b, meth), []).append(fl)
        log(f"  scaling ops b={b}: done ({time.time() - t0:.0f} s)")
    fig, axs = plt.subplots(1, len(branches), figsize=(4 * len(branches), 3.4))
    for ax, b in zip(np.atleast_1d(axs), branches):
        for meth in SCALING_METHODS:
            ax.plot(stems, np.asarray(ops[(b, meth)]) / 1e3, "o-", color=COLORS[meth],
                    label=LABELS[meth], ms=3)
        ax.set_title(f"{b} branch{'es' if b > 1 else ''} each side (m = {12 * b})")
        ax.set_xlabel("links in the stem")
        ax.grid(alpha=0.3)
    np.atleast_1d(axs)[0].set_ylabel("XLA flops (thousands)")
    np.atleast_1d(axs)[0].legend(fontsize=8)
    fig.suptitle("Delassus matrix of the Fig. 3a mechanism: operation count (lowered HLO)")
    fig.tight_layout()
    FIGDIR.mkdir(exist_ok=True)
    fig.savefig(FIGDIR / "osim_scaling_ops.png", dpi=110)
    plt.close(fig)

    # run time on a subset
    tb, tstems = (2,), ((5, 25) if quick else (5, 25, 50))
    tmeth = ("pv_osim", "efpa", "pv_osimr")
    batch = 64
    times, compiles = {}, {}
    for b in tb:
        for n in tstems:
            model, cs = mechanism(n, b)
            qs = random_states(model, batch)
            for meth in tmeth:
                f = jax.jit(jax.vmap(lambda q: jaxdyn.delassus(model, q, cs, meth)))
                c0 = time.time()
                f.lower(qs).compile()
                compiles[(b, n, meth)] = time.time() - c0
                times[(b, n, meth)] = time_per_sample(f, (qs,), batch)
        log(f"  scaling times b={b}: done ({time.time() - t0:.0f} s)")
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for meth in tmeth:
        ax.plot(tstems, [times[(tb[0], n, meth)][0] * 1e6 for n in tstems], "o-",
                color=COLORS[meth], label=LABELS[meth])
    ax.set_xlabel("links in the stem")
    ax.set_ylabel(f"us per sample (min, batch {batch})")
    ax.set_title(f"Fig. 3a mechanism, {tb[0]} branches each side: run time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(FIGDIR / "osim_scaling_time.png", dpi=110)
    plt.close(fig)

    md = ["### Scaling mechanism (paper Fig. 3)", "",
          "Operation counts (thousands of XLA flops, lowered HLO, one sample) against the "
          "stem length; ratios to PV-OSIMr in parentheses. Figure: "
          "[figures/osim_scaling_ops.png](figures/osim_scaling_ops.png).", "",
          "| branches | m | stem | " + " | ".join(LABELS[x] for x in SCALING_METHODS) + " |",
          "|---|---|---|" + "---|" * len(SCALING_METHODS)]
    for b in branches:
        for i, n in enumerate(stems):
            ref = ops[(b, "pv_osimr")][i]
            cells = [f"{ops[(b, x)][i] / 1e3:.1f} ({ops[(b, x)][i] / ref:.2f}x)"
                     for x in SCALING_METHODS]
            md.append(f"| {b} | {12 * b} | {n} | " + " | ".join(cells) + " |")
    md += ["", f"Run time per sample (min / median over repeats, batch {batch}, us) and compile "
               "time (s); figure: [figures/osim_scaling_time.png](figures/osim_scaling_time.png).",
           "", "| branches | stem | " + " | ".join(LABELS[x] for x in tmeth) + " |",
           "|---|---|" + "---|" * len(tmeth)]
    for b in tb:
        for n in tstems:
            cells = [f"{times[(b, n, x)][0] * 1e6:.1f} / {times[(b, n, x)][1] * 1e6:.1f} "
                     f"(compile {compiles[(b, n, x)]:.0f} s)" for x in tmeth]
            md.append(f"| {b} | {n} | " + " | ".join(cells) + " |")
    return md, ops


# ---------------------------------------------------------------- Pinocchio helpers
def pin_setup(name, cs):
    import pinocchio as pin

    from jaxdyn.interop.pinocchio import Converter

    path, floating = robots.resolve(name)
    model = jaxdyn.load_urdf(str(path), floating_base=floating)
    pm = (pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer()) if floating
          else pin.buildModelFromUrdf(str(path)))
    conv = Converter(model, pm)
    cms = pin.StdVec_RigidConstraintModel()
    for c in cs:
        if c.reference != "local":
            raise ValueError("Pinocchio's computeDelassusMatrix is used with LOCAL constraints")
        fr = pm.frames[pm.getFrameId(c.frame, pin.FrameType.BODY)]
        Roff = np.eye(3) if c.rotation is None else np.asarray(c.rotation)
        ct = pin.ContactType.CONTACT_6D if c.dim == 6 else pin.ContactType.CONTACT_3D
        cms.append(pin.RigidConstraintModel(ct, pm, fr.parentJoint,
                                            fr.placement * pin.SE3(Roff, np.asarray(c.offset)),
                                            pin.ReferenceFrame.LOCAL))
    cds = pin.StdVec_RigidConstraintData()
    for cm in cms:
        cds.append(cm.createData())
    return model, pm, conv, cms, cds


def pin_time(pm, conv, cms, cds, qs, repeats=7):
    """(min, median) seconds per ``computeDelassusMatrix`` call, and the matrices of the
    first states (jaxdyn row order)."""
    import pinocchio as pin

    data = pm.createData()
    qps = [conv.q_to_pin(np.asarray(q)) for q in np.asarray(qs)[:256]]
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for q in qps:
            pin.computeDelassusMatrix(pm, data, q, cms, cds, 0.0)
        ts.append((time.perf_counter() - t0) / len(qps))
    return min(ts), float(np.median(ts))


def pin_delassus(pm, conv, cms, cds, cs, q):
    import pinocchio as pin

    D = pin.computeDelassusMatrix(pm, pm.createData(), conv.q_to_pin(np.asarray(q)), cms, cds,
                                  0.0)
    perm, r = [], 0
    for c in cs:
        perm += [r + 3, r + 4, r + 5, r, r + 1, r + 2] if c.dim == 6 else [r, r + 1, r + 2]
        r += c.dim
    return D[np.ix_(perm, perm)]


def sole_points(ref="local"):
    return tuple(Connect(f, ref, offset=(x, y, -0.01))
                 for f in ("left_sole_link", "right_sole_link")
                 for x in (0.1, -0.1) for y in (0.05, -0.05))


TALOS_CASES = {
    "6D weld per foot": (Weld("left_sole_link"), Weld("right_sole_link")),
    "4 x 3D connect per sole (12D per foot)": sole_points(),
    "6D welds on feet and wrists": (Weld("left_sole_link"), Weld("right_sole_link"),
                                    Weld("arm_left_7_link"), Weld("arm_right_7_link")),
}
ALL_METHODS = ("pv_osimr", "pv_osim", "efpa", "ltl", "dense")


def part_talos(quick, batch, log):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = time.time()
    rows, opsd = [], {}
    cases = list(TALOS_CASES.items())
    for ci, (label, cs) in enumerate(cases):
        model, pm, conv, cms, cds = pin_setup("talos_full", cs)
        q0 = jaxdyn.neutral_configuration(model)
        qs = random_states(model, batch, seed=ci)
        timed = ALL_METHODS if (ci == 0 and not quick) else ("pv_osimr", "pv_osim")
        D_ref = pin_delassus(pm, conv, cms, cds, cs, qs[0])
        for meth in ALL_METHODS:
            f1 = lambda q, meth=meth: jaxdyn.delassus(model, q, cs, meth)
            lo = jax.jit(f1).lower(q0)
            pre = float(lo.cost_analysis()["flops"])
            post = float(lo.compile().cost_analysis()["flops"]) if meth in timed else None
            opsd[(label, meth)] = pre
            tm = comp = err = None
            if meth in timed:
                f = jax.jit(jax.vmap(f1))
                c0 = time.time()
                f.lower(qs).compile()
                comp = time.time() - c0
                tm = time_per_sample(f, (qs,), batch)
                D = np.asarray(f(qs)[0])
                err = float(np.max(np.abs(D - D_ref)) / max(1.0, np.max(np.abs(D_ref))))
            rows.append((label, meth, pre, post, tm, comp, err))
        pt = pin_time(pm, conv, cms, cds, qs)
        rows.append((label, "pinocchio", None, None, pt, None, None))
        log(f"  talos '{label}': done ({time.time() - t0:.0f} s)")
    fig, axs = plt.subplots(1, len(cases), figsize=(4.2 * len(cases), 3.4))
    for ax, (label, _) in zip(axs, cases):
        vals = [opsd[(label, m)] / 1e3 for m in ALL_METHODS]
        ax.bar([LABELS[m] for m in ALL_METHODS], vals, color=[COLORS[m] for m in ALL_METHODS])
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelrotation=45, labelsize=8)
        ax.grid(alpha=0.3, axis="y")
    axs[0].set_ylabel("XLA flops (thousands)")
    fig.suptitle("talos_full: Delassus matrix operation count (lowered HLO, whole computation)")
    fig.tight_layout()
    FIGDIR.mkdir(exist_ok=True)
    fig.savefig(FIGDIR / "osim_talos.png", dpi=110)
    plt.close(fig)
    md = ["### talos_full humanoid (paper Fig. 4)", "",
          "Whole computation from `q` (kinematics, articulated inertias, Delassus). Flops: "
          "lowered HLO (`pre`) and compiled module (`post`, over-counts fused chains, see the "
          f"module docstring). Time: us per sample at batch {batch}, min / median over "
          "repeats; Pinocchio: `computeDelassusMatrix` per call (LOCAL constraints). `err`: "
          "max deviation from Pinocchio's matrix relative to max(1, max|D|). Figure: "
          "[figures/osim_talos.png](figures/osim_talos.png).", "",
          "| case | method | kflops pre | kflops post | us/sample (min / median) | "
          "ratio to Pinocchio (min) | compile s | err vs Pinocchio |",
          "|---|---|---|---|---|---|---|---|"]
    pin_min = {r[0]: r[4][0] for r in rows if r[1] == "pinocchio"}
    for label, meth, pre, post, tm, comp, err in rows:
        md.append("| " + " | ".join([
            label, LABELS[meth],
            "" if pre is None else f"{pre / 1e3:.1f}",
            "" if post is None else f"{post / 1e3:.1f}",
            "" if tm is None else f"{tm[0] * 1e6:.2f} / {tm[1] * 1e6:.2f}",
            "" if tm is None else f"{tm[0] / pin_min[label]:.2f}x",
            "" if comp is None else f"{comp:.1f}",
            "" if err is None else f"{err:.1e}"]) + " |")
    return md, rows


PIN_CASES = {
    "solo12": tuple(Connect(f) for f in ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")),
    "talos_full": TALOS_CASES["6D weld per foot"],
}


def part_pinocchio(batch, talos_rows, log):
    md = ["### Against Pinocchio (batch {})".format(batch), "",
          "`jit(vmap(jaxdyn.delassus))` (PV-OSIMr, the default) per sample against Pinocchio's "
          "`computeDelassusMatrix` per call (C++, one state at a time, from Python), same "
          "states; min / median over repeats. Target: ratio <= "
          f"{TARGET_RATIO}.", "",
          "| robot | constraints | m | jaxdyn us/sample | Pinocchio us/call | ratio (min) | "
          "ratio (median) | target |", "|---|---|---|---|---|---|---|---|"]
    res = {}
    for name, cs in PIN_CASES.items():
        reuse = [r for r in talos_rows if name == "talos_full" and r[0] == "6D weld per foot"]
        if reuse:
            tj = next(r[4] for r in reuse if r[1] == "pv_osimr")
            tp = next(r[4] for r in reuse if r[1] == "pinocchio")
        else:
            model, pm, conv, cms, cds = pin_setup(name, cs)
            qs = random_states(model, batch)
            f = jax.jit(jax.vmap(lambda q: jaxdyn.delassus(model, q, cs)))
            tj = time_per_sample(f, (qs,), batch)
            tp = pin_time(pm, conv, cms, cds, qs)
        m = sum(c.dim for c in cs)
        desc = ", ".join(dict.fromkeys(f"{type(c).__name__}" for c in cs))
        r_min, r_med = tj[0] / tp[0], tj[1] / tp[1]
        res[name] = (tj, tp)
        md.append(f"| {name} | {len(cs)} x {desc} | {m} | {tj[0] * 1e6:.2f} / {tj[1] * 1e6:.2f} "
                  f"| {tp[0] * 1e6:.2f} / {tp[1] * 1e6:.2f} | {r_min:.2f}x | {r_med:.2f}x | "
                  f"{'PASS' if r_min <= TARGET_RATIO else 'MISS'} |")
        log(f"  pinocchio {name}: jaxdyn {tj[0] * 1e6:.2f} us, pinocchio {tp[0] * 1e6:.2f} us")
    return md, res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="scaling,talos,pinocchio")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--out", default=str(RESULTS), help="markdown file (section replaced)")
    args = ap.parse_args(argv)
    parts = args.parts.split(",")
    t0 = time.time()

    def log(msg):
        print(msg, flush=True)

    md = [f"Written by `benchmarks/osim.py{' --quick' if args.quick else ''}` "
          "(see its docstring for the method).", ""] + env_lines() + [""]
    talos_rows = []
    if "scaling" in parts:
        log("scaling mechanism ...")
        m, _ = part_scaling(args.quick, log)
        md += m + [""]
    if "talos" in parts:
        log("talos_full ...")
        m, talos_rows = part_talos(args.quick, args.batch, log)
        md += m + [""]
    if "pinocchio" in parts:
        log("against Pinocchio ...")
        m, _ = part_pinocchio(args.batch, talos_rows, log)
        md += m + [""]
    md.append(f"Total run time {time.time() - t0:.0f} s.")
    write_section(Path(args.out), SECTION, "\n".join(md))
    log(f"wrote section '{SECTION}' of {args.out} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

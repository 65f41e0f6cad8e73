"""Delassus matrix benchmarks: operation counts and run times (PV-OSIMr paper, §IV).

    python benchmarks/osim.py            # all parts, ~10 min on an idle 2-core machine
    python benchmarks/osim.py --quick    # smaller grids (smoke run)
    python benchmarks/osim.py --parts talos,pinocchio --chunk 0   # plain jax.vmap

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
* ``hands`` -- the Fig. 5 cases with a generated 5-finger hand in place of the Shadow hand, a
  3D connect on every fingertip: the hand alone, on talos_full's left wrist, on both wrists,
  and both hands with the feet welded (``osim_hands.png``).
* ``pinocchio`` -- per-sample time of the batched ``delassus`` (PV-OSIMr) at batch 1024
  against Pinocchio's ``computeDelassusMatrix`` per call, on solo12 (a 3D connect per foot)
  and talos_full (a 6D weld per foot); target: no slower than 1.5x.

The timed batched program is ``jax.jit(jaxdyn.vmap(f, chunk_size=32))`` (``--chunk``; 0 for
plain ``jax.jit(jax.vmap(f))``, which the ``pinocchio`` part also reports).

Operation counts are XLA's cost analysis (``flops``) of the lowered, not yet optimised HLO of
``jax.jit(delassus)`` for one sample: the arithmetic the algorithm asks for, like the CasADi
instruction counts of the paper. The compiled module's analysis
(``lower(...).compile().cost_analysis()``, of the timed batched program, per sample) is also
reported for the humanoid: it counts fused
elementwise chains several times over (e.g. 300k "flops" for the 47-level forward kinematics
of a 40-link stem whose lowered HLO has 14k, executed in 2.5 us) and so is not a measure of
work done; it also needs a compile per point, which the scaling grid cannot afford.

Single-threaded XLA (``--xla_cpu_multi_thread_eigen=false``, one core: benchmarks/_env.py),
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

from _env import cores_note, single_threaded, write_section  # noqa: E402

single_threaded()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn import Connect, Weld, robots  # noqa: E402

HERE = Path(__file__).resolve().parent
FIGDIR = HERE / "figures"
RESULTS = HERE / "RESULTS.md"
SECTION = "## Delassus (PV-OSIMr)"
TARGET_RATIO = 1.5


# ============================================================================ helpers
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


#: samples per chunk of ``jaxdyn.vmap`` (``None``: plain ``jax.vmap``); set by ``--chunk``
CHUNK = jaxdyn.batching.DEFAULT_CHUNK


def batched(f, chunk="default"):
    """The timed batched program: ``jax.jit(jaxdyn.vmap(f, chunk_size=CHUNK))``."""
    return jax.jit(jaxdyn.vmap(f, chunk_size=CHUNK if chunk == "default" else chunk))


def entry_point(chunk="default"):
    c = CHUNK if chunk == "default" else chunk
    return "jax.jit(jax.vmap(f))" if c is None else f"jax.jit(jaxdyn.vmap(f, chunk_size={c}))"


def lowered_flops(f, *args):
    return float(jax.jit(f).lower(*args).cost_analysis()["flops"])


def env_lines():
    try:
        import pinocchio as pin

        pv = pin.__version__
    except Exception:  # pragma: no cover
        pv = "not installed"
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    return [
        f"- Date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical cores; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        f"- jax {jax.__version__}, pinocchio {pv}; XLA_FLAGS={os.environ['XLA_FLAGS']!r} "
        f"({cores_note()}); float64",
    ]


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
        return (
            f'<link name="{name}"><inertial><origin xyz="0.1 0.01 0" rpy="0 0 0"/>'
            '<mass value="1"/><inertia ixx="0.01" ixy="0" ixz="0" iyy="0.02" iyz="0" '
            'izz="0.02"/></inertial></link>'
        )

    def joint(name, parent, child, xyz, k):
        return (
            f'<joint name="{name}" type="revolute"><parent link="{parent}"/>'
            f'<child link="{child}"/><origin xyz="{xyz}" rpy="0.3 0 0"/>'
            f'<axis xyz="{axes[k % 3]}"/><limit lower="-3" upper="3" effort="1" '
            'velocity="1"/></joint>'
        )

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
COLORS = {
    "pv_osim": "tab:blue",
    "efpa": "tab:orange",
    "pv_osimr": "tab:green",
    "ltl": "tab:red",
    "dense": "tab:gray",
    "pinocchio": "black",
}
LABELS = {
    "pv_osim": "PV-OSIM",
    "efpa": "EFPA",
    "pv_osimr": "PV-OSIMr",
    "ltl": "LTL",
    "dense": "dense (Cholesky)",
    "pinocchio": "Pinocchio",
}


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
            ax.plot(
                stems,
                np.asarray(ops[(b, meth)]) / 1e3,
                "o-",
                color=COLORS[meth],
                label=LABELS[meth],
                ms=3,
            )
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
    tb, tstems = (2,), ((5, 25) if quick else (5, 50))
    tmeth = ("pv_osim", "efpa", "pv_osimr")
    batch = 64
    times, compiles = {}, {}
    for b in tb:
        for n in tstems:
            model, cs = mechanism(n, b)
            qs = random_states(model, batch)
            for meth in tmeth:
                f = batched(lambda q: jaxdyn.delassus(model, q, cs, meth))
                c0 = time.time()
                f.lower(qs).compile()
                compiles[(b, n, meth)] = time.time() - c0
                times[(b, n, meth)] = time_per_sample(f, (qs,), batch)
        log(f"  scaling times b={b}: done ({time.time() - t0:.0f} s)")
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for meth in tmeth:
        ax.plot(
            tstems,
            [times[(tb[0], n, meth)][0] * 1e6 for n in tstems],
            "o-",
            color=COLORS[meth],
            label=LABELS[meth],
        )
    ax.set_xlabel("links in the stem")
    ax.set_ylabel(f"us per sample (min, batch {batch})")
    ax.set_title(f"Fig. 3a mechanism, {tb[0]} branches each side: run time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(FIGDIR / "osim_scaling_time.png", dpi=110)
    plt.close(fig)

    md = [
        "### Scaling mechanism (paper Fig. 3)",
        "",
        "Operation counts (thousands of XLA flops, lowered HLO, one sample) against the "
        "stem length; ratios to PV-OSIMr in parentheses. Figure: "
        "[figures/osim_scaling_ops.png](figures/osim_scaling_ops.png).",
        "",
        "| branches | m | stem | " + " | ".join(LABELS[x] for x in SCALING_METHODS) + " |",
        "|---|---|---|" + "---|" * len(SCALING_METHODS),
    ]
    for b in branches:
        for i, n in enumerate(stems):
            ref = ops[(b, "pv_osimr")][i]
            cells = [
                f"{ops[(b, x)][i] / 1e3:.1f} ({ops[(b, x)][i] / ref:.2f}x)" for x in SCALING_METHODS
            ]
            md.append(f"| {b} | {12 * b} | {n} | " + " | ".join(cells) + " |")
    md += [
        "",
        f"Run time per sample (min / median over repeats, batch {batch}, "
        f"`{entry_point()}`, us) and compile time (s); figure: "
        "[figures/osim_scaling_time.png](figures/osim_scaling_time.png).",
        "",
        "| branches | stem | " + " | ".join(LABELS[x] for x in tmeth) + " |",
        "|---|---|" + "---|" * len(tmeth),
    ]
    for b in tb:
        for n in tstems:
            cells = [
                f"{times[(b, n, x)][0] * 1e6:.1f} / {times[(b, n, x)][1] * 1e6:.1f} "
                f"(compile {compiles[(b, n, x)]:.0f} s)"
                for x in tmeth
            ]
            md.append(f"| {b} | {n} | " + " | ".join(cells) + " |")
    return md, ops


# ---------------------------------------------------------------- Pinocchio helpers
def pin_setup(name, cs):
    """jaxdyn model, Pinocchio model, converter and Pinocchio constraint models of ``cs``
    (``Converter.constraint_models_to_pin``). ``name``: a robot name or ``(xml, floating)``."""
    import pinocchio as pin

    from jaxdyn.interop.pinocchio import Converter

    if isinstance(name, tuple):
        xml, floating = name
        model = jaxdyn.load_urdf(xml, floating_base=floating)
        pm = (
            pin.buildModelFromXML(xml, pin.JointModelFreeFlyer())
            if floating
            else pin.buildModelFromXML(xml)
        )
    else:
        path, floating = robots.resolve(name)
        model = jaxdyn.load_urdf(str(path), floating_base=floating)
        pm = (
            pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())
            if floating
            else pin.buildModelFromUrdf(str(path))
        )
    if any(c.reference != "local" for c in cs):
        raise ValueError("Pinocchio's computeDelassusMatrix is used with LOCAL constraints")
    conv = Converter(model, pm)
    cms, cds = conv.constraint_models_to_pin(cs)
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

    D = pin.computeDelassusMatrix(pm, pm.createData(), conv.q_to_pin(np.asarray(q)), cms, cds, 0.0)
    perm = conv.constraint_rows_from_pin(cs)
    return D[np.ix_(perm, perm)]


def sole_points(ref="local"):
    return tuple(
        Connect(f, ref, offset=(x, y, -0.01))
        for f in ("left_sole_link", "right_sole_link")
        for x in (0.1, -0.1)
        for y in (0.05, -0.05)
    )


TALOS_CASES = {
    "6D weld per foot": (Weld("left_sole_link"), Weld("right_sole_link")),
    "4 x 3D connect per sole (12D per foot)": sole_points(),
    "6D welds on feet and wrists": (
        Weld("left_sole_link"),
        Weld("right_sole_link"),
        Weld("arm_left_7_link"),
        Weld("arm_right_7_link"),
    ),
}
ALL_METHODS = ("pv_osimr", "pv_osim", "efpa", "ltl", "dense")


# ---------------------------------------------------------------- hand-like subtree (Fig. 5)
def hand_elements(prefix, parent, origin="0 0 -0.1"):
    """URDF links and joints of a 5-finger hand (thumb: 3 links, the others 4; abduction
    then flexion joints, 19 DoF) whose palm is fixed to ``parent`` (or is the root if
    ``parent`` is None), and the names of its fingertip frames."""
    rng = np.random.default_rng(len(prefix))

    def inertial(mass, length):
        d = rng.uniform(0.5, 1.5, 3) * mass * length**2 / 12 + 2e-5
        return (
            f'<inertial><origin xyz="0 0 {length / 2}" rpy="0 0 0"/><mass value="{mass}"/>'
            f'<inertia ixx="{d[0]}" ixy="0" ixz="0" iyy="{d[1]}" iyz="0" izz="{d[2]}"/>'
            "</inertial>"
        )

    out = [f'<link name="{prefix}palm">{inertial(0.4, 0.1)}</link>']
    if parent is not None:
        out.append(
            f'<joint name="{prefix}palm_joint" type="fixed"><parent link="{parent}"/>'
            f'<child link="{prefix}palm"/><origin xyz="{origin}" rpy="3.14159 0 0"/>'
            "</joint>"
        )
    tips = []
    for i in range(5):
        up = f"{prefix}palm"
        for j in range(3 if i == 0 else 4):
            length = 0.05 - 0.006 * j
            link = f"{prefix}f{i}_{j}"
            out.append(f'<link name="{link}">{inertial(0.1 - 0.015 * j, length)}</link>')
            xyz = f"0.03 {-0.04 + 0.02 * i} 0.1" if j == 0 else f"0 0 {0.05 - 0.006 * (j - 1)}"
            rpy = "0.3 0 -0.8" if (i == 0 and j == 0) else "0 0 0"
            out.append(
                f'<joint name="{link}_joint" type="revolute"><parent link="{up}"/>'
                f'<child link="{link}"/><origin xyz="{xyz}" rpy="{rpy}"/>'
                f'<axis xyz="{"0 0 1" if j == 0 else "0 1 0"}"/><limit lower="-2" '
                'upper="2" effort="1" velocity="1"/></joint>'
            )
            up = link
        out.append(
            f'<link name="{prefix}tip{i}"/><joint name="{prefix}tip{i}_joint" '
            f'type="fixed"><parent link="{up}"/><child link="{prefix}tip{i}"/>'
            f'<origin xyz="0.005 0 {length}" rpy="0 0 0"/></joint>'
        )
        tips.append(f"{prefix}tip{i}")
    return "".join(out), tips


def hand_robots():
    """The Fig. 5 robots: ``(label, (xml, floating), constraints)`` for (a) a hand alone,
    (b) talos_full with a hand on the left wrist, (c) on both wrists, (d) (c) standing."""
    solo, tips = hand_elements("", None)
    hand_xml = f'<?xml version="1.0"?><robot name="hand">{solo}</robot>'
    tip_cs = lambda names: tuple(Connect(t) for t in names)  # noqa: E731
    talos = robots.resolve("talos_full")[0].read_text()
    cut = talos.rindex("</robot>")
    left, ltips = hand_elements("lh_", "arm_left_7_link")
    right, rtips = hand_elements("rh_", "arm_right_7_link")
    one = talos[:cut] + left + talos[cut:]
    two = talos[:cut] + left + right + talos[cut:]
    feet = TALOS_CASES["6D weld per foot"]
    return [
        ("(a) hand, 3D per fingertip", (hand_xml, False), tip_cs(tips)),
        ("(b) talos + left hand", (one, True), tip_cs(ltips)),
        ("(c) talos + two hands", (two, True), tip_cs(ltips + rtips)),
        ("(d) (c) + 6D weld per foot", (two, True), tip_cs(ltips + rtips) + feet),
    ]


def part_humanoid(title, cases, quick, batch, log, fig_name, time_all):
    """Operation counts of every method, time per sample (batch ``batch``, the batched entry
    point of :func:`batched`), Pinocchio's ``computeDelassusMatrix`` per call and the
    deviation from it, for ``cases = [(label, robot, constraints)]``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = time.time()
    rows, opsd, dims = [], {}, {}
    for ci, (label, robot, cs) in enumerate(cases):
        model, pm, conv, cms, cds = pin_setup(robot, cs)
        dims[label] = (model.nv, sum(c.dim for c in cs))
        q0 = jaxdyn.neutral_configuration(model)
        qs = random_states(model, batch, seed=ci)
        timed = ALL_METHODS if (time_all and not quick) else ("pv_osimr", "pv_osim")
        D_ref = pin_delassus(pm, conv, cms, cds, cs, qs[0])
        for meth in ALL_METHODS:
            f1 = lambda q, meth=meth: jaxdyn.delassus(model, q, cs, meth)  # noqa: E731
            pre = lowered_flops(f1, q0)
            opsd[(label, meth)] = pre
            tm = comp = err = post = None
            if meth in timed:
                f = batched(f1)
                c0 = time.time()
                compiled = f.lower(qs).compile()
                comp = time.time() - c0
                # a chunked program is a loop: XLA counts its body (one chunk) once
                per = CHUNK if CHUNK and batch > CHUNK and batch % CHUNK == 0 else batch
                post = float(compiled.cost_analysis()["flops"]) / per
                tm = time_per_sample(f, (qs,), batch)
                D = np.asarray(f(qs)[0])
                err = float(np.max(np.abs(D - D_ref)) / max(1.0, np.max(np.abs(D_ref))))
            rows.append((label, meth, pre, post, tm, comp, err))
        pt = pin_time(pm, conv, cms, cds, qs)
        rows.append((label, "pinocchio", None, None, pt, None, None))
        log(
            f"  {title} '{label}' (nv {model.nv}, m {sum(c.dim for c in cs)}): done "
            f"({time.time() - t0:.0f} s)"
        )
    fig, axs = plt.subplots(1, len(cases), figsize=(4.0 * len(cases), 3.4))
    for ax, (label, _, _) in zip(np.atleast_1d(axs), cases):
        vals = [opsd[(label, m)] / 1e3 for m in ALL_METHODS]
        ax.bar([LABELS[m] for m in ALL_METHODS], vals, color=[COLORS[m] for m in ALL_METHODS])
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelrotation=45, labelsize=8)
        ax.grid(alpha=0.3, axis="y")
    np.atleast_1d(axs)[0].set_ylabel("XLA flops (thousands)")
    fig.suptitle(f"{title}: Delassus matrix operation count (lowered HLO, whole computation)")
    fig.tight_layout()
    FIGDIR.mkdir(exist_ok=True)
    fig.savefig(FIGDIR / fig_name, dpi=110)
    plt.close(fig)
    md = [
        "| case | nv | m | method | kflops pre | kflops post | us/sample (min / median) | "
        "ratio to Pinocchio (min) | compile s | err vs Pinocchio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    pin_min = {r[0]: r[4][0] for r in rows if r[1] == "pinocchio"}
    for label, meth, pre, post, tm, comp, err in rows:
        md.append(
            "| "
            + " | ".join(
                [
                    label,
                    str(dims[label][0]),
                    str(dims[label][1]),
                    LABELS[meth],
                    "" if pre is None else f"{pre / 1e3:.1f}",
                    "" if post is None else f"{post / 1e3:.1f}",
                    "" if tm is None else f"{tm[0] * 1e6:.2f} / {tm[1] * 1e6:.2f}",
                    "" if tm is None else f"{tm[0] / pin_min[label]:.2f}x",
                    "" if comp is None else f"{comp:.1f}",
                    "" if err is None else f"{err:.1e}",
                ]
            )
            + " |"
        )
    md += ["", ratio_line(rows)]
    return md, rows


def ratio_line(rows):
    """PV-OSIMr's time over PV-OSIM's (min) per case, from ``part_humanoid``'s rows."""
    tmin = {(r[0], r[1]): r[4][0] for r in rows if r[4] is not None}
    cases = dict.fromkeys(r[0] for r in rows)
    parts = [
        f"{c}: {tmin[(c, 'pv_osimr')] / tmin[(c, 'pv_osim')]:.2f}"
        for c in cases
        if (c, "pv_osimr") in tmin and (c, "pv_osim") in tmin
    ]
    return (
        "PV-OSIMr time / PV-OSIM time (min, same run; < 1: PV-OSIMr faster): "
        + "; ".join(parts)
        + "."
    )


def part_talos(quick, batch, log):
    cases = [(label, "talos_full", cs) for label, cs in TALOS_CASES.items()]
    md, rows = part_humanoid("talos_full", cases, quick, batch, log, "osim_talos.png", True)
    head = [
        "### talos_full humanoid (paper Fig. 4)",
        "",
        "Whole computation from `q` (kinematics, articulated inertias, Delassus). Flops: "
        "lowered HLO (`pre`) and compiled batched module per sample (`post`, over-counts "
        "fused chains, see the module docstring). Time: us per sample at batch "
        f"{batch} through `{entry_point()}`, min / median over repeats; Pinocchio: "
        "`computeDelassusMatrix` per call (LOCAL constraints, built by "
        "`Converter.constraint_models_to_pin`). `err`: max deviation from Pinocchio's "
        "matrix relative to max(1, max|D|). Figure: "
        "[figures/osim_talos.png](figures/osim_talos.png).",
        "",
    ]
    return head + md, rows


def part_hands(quick, batch, log):
    md, rows = part_humanoid(
        "hand-like subtree", hand_robots(), quick, batch, log, "osim_hands.png", True
    )
    head = [
        "### Hand-like subtrees (paper Fig. 5)",
        "",
        "A 5-finger, 19-DoF hand (thumb 3 links, fingers 4; generated URDF, "
        "`hand_elements`) in place of the Shadow hand, a 3D connect on every fingertip: "
        "(a) the hand alone (fixed palm), (b) fixed to talos_full's left wrist, (c) to both "
        "wrists, (d) (c) with a 6D weld per foot. Columns as above. Figure: "
        "[figures/osim_hands.png](figures/osim_hands.png).",
        "",
    ]
    return head + md, rows


PIN_CASES = {
    "solo12": tuple(Connect(f) for f in ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")),
    "talos_full": TALOS_CASES["6D weld per foot"],
}


def part_pinocchio(batch, talos_rows, log):
    md = [
        f"### Against Pinocchio (batch {batch})",
        "",
        f"jaxdyn's `delassus` (PV-OSIMr, the default) per sample, batched with `{entry_point()}` "
        "(the batched entry point: `jaxdyn.vmap` evaluates `jax.vmap` in chunks so that the "
        "intermediates stay in cache), and with plain `jax.jit(jax.vmap(f))` for comparison, "
        "against Pinocchio's `computeDelassusMatrix` per call (C++, one state at a time, "
        "from Python), same states; min / median over repeats. Target: ratio (min) <= "
        f"{TARGET_RATIO} with the batched entry point. PV-OSIMr, PV-OSIM and EFPA share one "
        "articulated-inertia pass that keeps the symmetric inertias packed (21 entries) and "
        "sums children into parents with static gathers (`jaxdyn/osim/inertia.py`).",
        "",
        "| robot | constraints | m | jaxdyn us/sample | plain jax.vmap us/sample | "
        "Pinocchio us/call | ratio (min) | ratio (median) | plain vmap ratio (min) | target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    res = {}
    for name, cs in PIN_CASES.items():
        model, pm, conv, cms, cds = pin_setup(name, cs)
        qs = random_states(model, batch)
        f1 = lambda q: jaxdyn.delassus(model, q, cs)  # noqa: E731
        reuse = [r for r in talos_rows if name == "talos_full" and r[0] == "6D weld per foot"]
        if reuse:
            tj = next(r[4] for r in reuse if r[1] == "pv_osimr")
        else:
            tj = time_per_sample(batched(f1), (qs,), batch)
        tv = time_per_sample(batched(f1, chunk=None), (qs,), batch)
        tp = pin_time(pm, conv, cms, cds, qs)
        m = sum(c.dim for c in cs)
        desc = ", ".join(dict.fromkeys(f"{type(c).__name__}" for c in cs))
        r_min, r_med = tj[0] / tp[0], tj[1] / tp[1]
        res[name] = (tj, tp, tv)
        md.append(
            f"| {name} | {len(cs)} x {desc} | {m} | {tj[0] * 1e6:.2f} / {tj[1] * 1e6:.2f} "
            f"| {tv[0] * 1e6:.2f} / {tv[1] * 1e6:.2f} "
            f"| {tp[0] * 1e6:.2f} / {tp[1] * 1e6:.2f} | {r_min:.2f}x | {r_med:.2f}x | "
            f"{tv[0] / tp[0]:.2f}x | {'PASS' if r_min <= TARGET_RATIO else 'MISS'} |"
        )
        log(
            f"  pinocchio {name}: jaxdyn {tj[0] * 1e6:.2f} us (plain vmap {tv[0] * 1e6:.2f}), "
            f"pinocchio {tp[0] * 1e6:.2f} us"
        )
    return md, res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="scaling,talos,hands,pinocchio")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--out", default=str(RESULTS), help="markdown file (section replaced)")
    ap.add_argument(
        "--chunk",
        type=int,
        default=jaxdyn.batching.DEFAULT_CHUNK,
        help="chunk size of jaxdyn.vmap for the timed programs (0: plain jax.vmap)",
    )
    args = ap.parse_args(argv)
    global CHUNK
    CHUNK = args.chunk or None
    parts = args.parts.split(",")
    t0 = time.time()

    def log(msg):
        print(msg, flush=True)

    md = (
        [
            f"Written by `benchmarks/osim.py{' --quick' if args.quick else ''}` "
            "(see its docstring for the method).",
            "",
        ]
        + env_lines()
        + [""]
    )
    talos_rows = []
    if "scaling" in parts:
        log("scaling mechanism ...")
        m, _ = part_scaling(args.quick, log)
        md += m + [""]
    if "talos" in parts:
        log("talos_full ...")
        m, talos_rows = part_talos(args.quick, args.batch, log)
        md += m + [""]
    if "hands" in parts:
        log("hand-like subtrees ...")
        m, _ = part_hands(args.quick, args.batch, log)
        md += m + [""]
    if "pinocchio" in parts:
        log("against Pinocchio ...")
        m, _ = part_pinocchio(args.batch, talos_rows, log)
        md += m + [""]
    md.append(f"Total run time {time.time() - t0:.0f} s.")
    write_section(args.out, SECTION + "\n\n" + "\n".join(md))
    log(f"wrote section '{SECTION}' of {args.out} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

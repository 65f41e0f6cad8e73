"""Inertia-weighted input matrix benchmarks: IIM vs eUFM vs dense (Krög et al., §6).

    python benchmarks/iwim.py            # ~10 min on an idle 2-core machine
    python benchmarks/iwim.py --quick    # smoke run

* n-link pendulum (§6.1, Fig. 2, Table 1), ``n`` = 1 .. 50, with a single input (the last
  joint) and fully actuated: per-sample time of ``jit(vmap(input_matrix(..., method)))`` for
  ``"iim"``, ``"eufm"`` and ``"dense"``, next to plain ABA (the O(n) baseline of the paper).
  Figure: ``benchmarks/figures/iwim_pendulum.png``. Chains of ``>= MIN_SCAN_RUN`` links are
  evaluated by ``lax.scan`` (``jaxdyn.model.tree.segments``), so every method compiles in a
  few seconds at any ``n``.
* humanoid (§6.2, Table 2): a 24-DoF humanoid with 8 contact points -- talos_full reduced to
  its legs (12), torso (2), shoulders and elbows (4) by turning every other joint into a fixed
  one (:func:`humanoid24_urdf`), plus the floating base: ``nv = 24``; 4 point contacts per sole
  (3D forces, ``jaxdyn.Connect``): ``nu = 24 + 18 = 42`` inputs (:class:`jaxdyn.Inputs`), as
  in the paper. Pinocchio (C++, called per sample from Python) gives reference times for
  ``aba`` and for ``computeMinverse`` + ``aba`` + the product ``Minv B``.

The paper's numbers (Matlab, O(n) method of Bremer, 100 random states) are printed beside
ours; absolute times are not comparable (language, machine, what is timed), so the tables
compare the ratios to the O(n) forward dynamics as well.

Writes the ``## Input matrix (IIM)`` section of ``benchmarks/RESULTS.md`` (replacing an older
version of that section only). Single-threaded XLA, float64; times are min / median over
repeats of the per-sample time of one batched call; flops are XLA's cost analysis of the
lowered HLO of one sample (see ``benchmarks/osim.py`` for why not the compiled module's), taken
with the chain passes unrolled (the cost analysis counts a ``lax.scan`` body once).

Note on eUFM: the paper's eUFM re-runs the whole O(n) forward dynamics ``nu + 1`` times. Here
it is ``jax.vmap`` of ABA over the ``nu + 1`` unit inputs, and vmap does not batch what does
not depend on the input -- kinematics and articulated inertias are computed once -- so in JAX
the eUFM already shares most of what the IIM shares; it still pays the velocity-product and
gravity terms and a subtraction per input.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _env import single_threaded  # noqa: E402

single_threaded()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn import Connect, Inputs, robots  # noqa: E402
from jaxdyn.model import tree  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from osim import env_lines, lowered_flops, time_per_sample  # noqa: E402

from _env import write_section  # noqa: E402

FIGDIR = HERE / "figures"
RESULTS = HERE / "RESULTS.md"
SECTION = "## Input matrix (IIM)"
METHODS = ("iim", "eufm", "dense")
COLORS = {"iim": "tab:green", "eufm": "tab:orange", "dense": "tab:gray", "aba": "black"}
LABELS = {
    "iim": "IIM",
    "eufm": "eUFM",
    "dense": "dense (CRBA + Cholesky)",
    "aba": "ABA (O(n) baseline)",
}


def pendulum_urdf(n: int) -> str:
    """``n``-link pendulum, revolute joints about y (the IIM paper's §6.1 test system)."""
    out = ['<?xml version="1.0"?><robot name="pendulum"><link name="base"/>']
    parent = "base"
    for i in range(n):
        out.append(
            f'<link name="l{i}"><inertial><origin xyz="0 0 -0.25" rpy="0 0 0"/>'
            '<mass value="1"/><inertia ixx="0.02" ixy="0" ixz="0" iyy="0.021" iyz="0" '
            'izz="0.001"/></inertial></link>'
        )
        z = 0.0 if i == 0 else -0.5
        out.append(
            f'<joint name="j{i}" type="revolute"><parent link="{parent}"/>'
            f'<child link="l{i}"/><origin xyz="0 0 {z}" rpy="0 0 0"/><axis xyz="0 1 0"/>'
            '<limit lower="-3" upper="3" effort="1" velocity="1"/></joint>'
        )
        parent = f"l{i}"
    out.append("</robot>")
    return "".join(out)


#: the paper's Table 1 (50-link pendulum) and Table 2 (humanoid), ms (Matlab)
PAPER_T1 = {"iim": (12.21, 13.22), "eufm": (10.30, 205.85), "aba": (6.65, 7.26)}
PAPER_T2 = {"iim": 4.13, "eufm": 67.20, "aba": 2.72}
#: joints of talos_full kept moving in the 24-DoF humanoid (18 actuated + the floating base)
HUMANOID_JOINTS = tuple(f"leg_{s}_{i}_joint" for s in ("left", "right") for i in range(1, 7)) + (
    "torso_1_joint",
    "torso_2_joint",
    "arm_left_1_joint",
    "arm_left_4_joint",
    "arm_right_1_joint",
    "arm_right_4_joint",
)
SOLES = ("left_sole_link", "right_sole_link")


def humanoid24_urdf() -> str:
    """talos_full with every joint but :data:`HUMANOID_JOINTS` fixed (its links merge into
    their parents' bodies, masses and inertias kept): 18 actuated joints, 24 DoF floating."""
    import xml.etree.ElementTree as ET

    path, _ = robots.resolve("talos_full")
    root = ET.fromstring(path.read_text())
    for j in root.iter("joint"):
        if j.get("type") != "fixed" and j.get("name") not in HUMANOID_JOINTS:
            j.set("type", "fixed")
            for tag in ("axis", "limit", "mimic", "dynamics", "safety_controller"):
                for el in j.findall(tag):
                    j.remove(el)
    return ET.tostring(root, encoding="unicode")


def pinocchio_humanoid_times(xml, B_cols, batch, repeats=5):
    """Per-sample seconds of Pinocchio's ``aba`` and of ``computeMinverse`` + ``aba`` +
    ``Minv @ B`` (random states, ``B`` a fixed ``(nv, nu)`` matrix), min over repeats."""
    import pinocchio as pin

    pm = pin.buildModelFromXML(xml, pin.JointModelFreeFlyer())
    pd = pm.createData()
    rng = np.random.default_rng(0)
    qs = [pin.randomConfiguration(pm, -np.ones(pm.nq), np.ones(pm.nq)) for _ in range(batch)]
    vs, taus = rng.normal(size=(batch, pm.nv)), rng.normal(size=(batch, pm.nv))
    B = np.asarray(B_cols)
    out = {}
    for key in ("aba", "minv"):
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for q, v, tau in zip(qs, vs, taus):
                if key == "aba":
                    pin.aba(pm, pd, q, v, tau)
                else:
                    Minv = pin.computeMinverse(pm, pd, q)
                    Minv = np.triu(Minv) + np.triu(Minv, 1).T
                    pin.aba(pm, pd, q, v, np.zeros(pm.nv))
                    Minv @ B
            ts.append((time.perf_counter() - t0) / batch)
        out[key] = (min(ts), float(np.median(ts)))
    return out


def check_split(model, B_or_inputs, qs, vs, n=4, seed=3):
    """Max relative deviation of ``qdd0 + Bhat u`` from ``jaxdyn.aba(q, v, B u)`` (IIM)."""

    def one(q, v, u):
        qdd0, Bhat = jaxdyn.input_matrix(model, q, v, B_or_inputs, "iim")
        B = (
            jaxdyn.build_input_matrix(model, q, B_or_inputs)
            if isinstance(B_or_inputs, Inputs)
            else B_or_inputs
        )
        return qdd0 + Bhat @ u, jaxdyn.aba(model, q, v, B @ u)

    nu = jax.eval_shape(
        lambda q, v: jaxdyn.input_matrix(model, q, v, B_or_inputs).Bhat, qs[0], vs[0]
    ).shape[1]
    u = jax.random.normal(jax.random.PRNGKey(seed), (n, nu))
    a, b = (np.asarray(x) for x in jax.jit(jax.vmap(one))(qs[:n], vs[:n], u))
    return float(np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b))))


def bench_case(model, B_or_inputs, batch, seed=0, with_aba=True, methods=METHODS):
    """Times (min, median), compile times and flops of each method (and ABA)."""
    keys = jax.random.split(jax.random.PRNGKey(seed), batch)
    qs = jax.jit(jax.vmap(lambda k: jaxdyn.random_configuration(model, k)))(keys)
    vs = jax.random.normal(jax.random.PRNGKey(seed + 1), (batch, model.nv))
    q0, v0 = qs[0], vs[0]
    out = {}
    fns = {
        m: (lambda m: lambda q, v: jaxdyn.input_matrix(model, q, v, B_or_inputs, m))(m)
        for m in methods
    }
    if with_aba:
        fns["aba"] = lambda q, v: jaxdyn.aba(model, q, v, jnp.zeros_like(v))
    ref = None
    for k, f1 in fns.items():
        # XLA's cost analysis counts a while loop's body once: count the unrolled program
        saved, tree.MIN_SCAN_RUN = tree.MIN_SCAN_RUN, 10**9
        try:
            fl = lowered_flops(f1, q0, v0)
        finally:
            tree.MIN_SCAN_RUN = saved
        f = jax.jit(jax.vmap(f1))
        c0 = time.time()
        f.lower(qs, vs).compile()
        comp = time.time() - c0
        t = time_per_sample(f, (qs, vs), batch)
        err = None
        if k in METHODS:
            Bh = np.asarray(f(qs, vs).Bhat)
            if ref is None:
                ref = Bh
            err = float(np.max(np.abs(Bh - ref)) / max(1.0, np.max(np.abs(ref))))
        out[k] = dict(time=t, compile=comp, flops=fl, err=err)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--n-max", type=int, default=50, help="largest pendulum (the paper: 50)")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    t0 = time.time()
    ns = (
        (1, 10)
        if args.quick
        else tuple(n for n in (1, 2, 5, 10, 20, 30, 40, 50) if n <= args.n_max)
    )
    res = {}
    for n in ns:
        model = jaxdyn.load_urdf(pendulum_urdf(n))
        for kind in ("single", "full"):
            if n == 1 and kind == "full":  # one link: single input == fully actuated
                res[(n, kind)] = res[(n, "single")]
                continue
            B = np.eye(n)[:, -1:] if kind == "single" else np.eye(n)
            res[(n, kind)] = bench_case(
                model, jnp.asarray(B), args.batch, with_aba=(kind == "single")
            )
            if kind == "full":
                res[(n, kind)]["aba"] = res[(n, "single")]["aba"]
        comp = max(r["compile"] for kind in ("single", "full") for r in res[(n, kind)].values())
        print(
            f"pendulum n={n}: done ({time.time() - t0:.0f} s, slowest compile {comp:.1f} s)",
            flush=True,
        )

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, kind in zip(axs, ("single", "full")):
        for k in METHODS + ("aba",):
            ax.plot(
                ns,
                [res[(n, kind)][k]["time"][0] * 1e6 for n in ns],
                "o-",
                color=COLORS[k],
                label=LABELS[k],
                ms=3,
            )
        ax.set_title("(a) single input (last joint)" if kind == "single" else "(b) fully actuated")
        ax.set_xlabel("links n")
        ax.grid(alpha=0.3)
    axs[0].set_ylabel(f"us per sample (min, batch {args.batch})")
    axs[0].legend(fontsize=8)
    fig.suptitle("n-link pendulum: free accelerations and M^-1 B (IIM paper, Fig. 2)")
    fig.tight_layout()
    FIGDIR.mkdir(exist_ok=True)
    fig.savefig(FIGDIR / "iwim_pendulum.png", dpi=110)
    plt.close(fig)

    # humanoid: 24 DoF, 4 points per sole (24 contact forces) + 18 joint torques
    hum = None
    if not args.quick:
        xml = humanoid24_urdf()
        model = jaxdyn.load_urdf(xml, floating_base=True)
        assert model.nv == 24, model.nv
        contacts = tuple(
            Connect(f, offset=(x, y, -0.01))
            for f in SOLES
            for x in (0.1, -0.1)
            for y in (0.05, -0.05)
        )
        inputs = Inputs("all", contacts)
        hum = bench_case(model, inputs, args.batch)
        keys = jax.random.split(jax.random.PRNGKey(0), 8)
        qs = jax.jit(jax.vmap(lambda k: jaxdyn.random_configuration(model, k)))(keys)
        vs = jax.random.normal(jax.random.PRNGKey(1), (8, model.nv))
        hum_split = check_split(model, inputs, qs, vs)
        B0 = np.asarray(jax.jit(lambda q: jaxdyn.build_input_matrix(model, q, inputs))(qs[0]))
        nu = B0.shape[1]
        hum_pin = pinocchio_humanoid_times(xml, B0, args.batch)
        print(f"humanoid: done ({time.time() - t0:.0f} s)", flush=True)

    split_err = {
        n: check_split(
            m,
            jnp.asarray(np.eye(n)),
            *(lambda qs: (qs, qs[::-1]))(
                jax.random.uniform(jax.random.PRNGKey(n), (4, n), minval=-2, maxval=2)
            ),
        )
        for n, m in ((n, jaxdyn.load_urdf(pendulum_urdf(n))) for n in ns[-1:])
    }
    worst = max(
        [r[k]["err"] for r in res.values() for k in METHODS]
        + list(split_err.values())
        + ([hum[k]["err"] for k in METHODS] + [hum_split] if hum else [])
    )
    if worst > 1e-9:
        raise SystemExit(f"methods disagree: max relative deviation {worst:.1e}")

    md = (
        [
            f"Written by `benchmarks/iwim.py{' --quick' if args.quick else ''}` (see its "
            "docstring for the method).",
            "",
        ]
        + env_lines()
        + [""]
    )
    md += [
        "### n-link pendulum (paper Fig. 2, Table 1)",
        "",
        f"us per sample (min / median, batch {args.batch}); `err`: max deviation of `Bhat` "
        "of eUFM and dense from the IIM's, relative to max(1, max|Bhat|). Figure: "
        "[figures/iwim_pendulum.png](figures/iwim_pendulum.png). Compile s: "
        "`jit(vmap(.)).lower().compile()`, the slowest of the four programs of the row.",
        "",
        "| n | inputs | IIM | eUFM | dense | ABA | IIM / ABA | eUFM / IIM | kflops IIM / eUFM "
        "/ dense | compile s | max err |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in ns:
        for kind in ("single", "full"):
            if n == 1 and kind == "full":
                continue
            r = res[(n, kind)]
            cell = lambda k: f"{r[k]['time'][0] * 1e6:.2f} / {r[k]['time'][1] * 1e6:.2f}"
            err = max(r[k]["err"] for k in METHODS)
            inp = "1 (= n)" if n == 1 else ("1" if kind == "single" else f"{n} (all)")
            md.append(
                f"| {n} | {inp} | {cell('iim')} | "
                f"{cell('eufm')} | {cell('dense')} | {cell('aba')} | "
                f"{r['iim']['time'][0] / r['aba']['time'][0]:.2f} | "
                f"{r['eufm']['time'][0] / r['iim']['time'][0]:.2f} | "
                f"{r['iim']['flops'] / 1e3:.1f} / {r['eufm']['flops'] / 1e3:.1f} / "
                f"{r['dense']['flops'] / 1e3:.1f} | "
                f"{max(x['compile'] for x in r.values()):.1f} | {err:.1e} |"
            )
    nl = ns[-1]
    md += [
        "",
        f"`qdd0 + Bhat u` vs `jaxdyn.aba(q, v, B u)` (n = {nl}, fully actuated, 4 random "
        f"states): max relative deviation {split_err[nl]:.1e}.",
        "",
    ]
    if nl == 50:
        md += [
            "Table 1 beside ours (n = 50; paper: ms, Matlab; ours: us per sample, min; "
            "ratios to the O(n) forward dynamics / ABA in brackets):",
            "",
            "| method | paper single | paper fully act. | ours single | ours fully act. |",
            "|---|---|---|---|---|",
        ]
        for k, lab in (("iim", "IIM"), ("eufm", "eUFM"), ("aba", "O(n) / ABA")):
            ps, pf = PAPER_T1[k]
            os_, of = res[(50, "single")][k]["time"][0], res[(50, "full")][k]["time"][0]
            a_s, a_f = res[(50, "single")]["aba"]["time"][0], res[(50, "full")]["aba"]["time"][0]
            md.append(
                f"| {lab} | {ps:.2f} ({ps / PAPER_T1['aba'][0]:.2f}x) | "
                f"{pf:.2f} ({pf / PAPER_T1['aba'][1]:.2f}x) | {os_ * 1e6:.2f} "
                f"({os_ / a_s:.2f}x) | {of * 1e6:.2f} ({of / a_f:.2f}x) |"
            )
        md.append("")
        md.append(
            f"dense (CRBA + Cholesky, not in the paper): "
            f"{res[(50, 'single')]['dense']['time'][0] * 1e6:.2f} / "
            f"{res[(50, 'full')]['dense']['time'][0] * 1e6:.2f} us (single / fully act.)."
        )
    if hum is not None:
        md += [
            "",
            "### Humanoid (paper Table 2)",
            "",
            "24-DoF humanoid (talos_full reduced by `humanoid24_urdf()`: legs, torso, "
            "shoulders, elbows; floating base), 4 point contacts per sole: 24 contact forces "
            f"+ 18 torques = nu = {nu} inputs (`jaxdyn.Inputs`). us per sample (min / median,"
            f" batch {args.batch}), compile s, kflops (lowered HLO); paper: ms (Matlab), "
            "ratios to the O(n) method in brackets.",
            "",
            "| method | paper | ours us/sample | ours / ABA (min) | compile s | kflops | max err |",
            "|---|---|---|---|---|---|---|",
        ]
        for k in METHODS + ("aba",):
            r = hum[k]
            err = "" if r["err"] is None else f"{r['err']:.1e}"
            paper = (
                f"{PAPER_T2[k]:.2f} ({PAPER_T2[k] / PAPER_T2['aba']:.2f}x)"
                if k in PAPER_T2
                else "-"
            )
            md.append(
                f"| {LABELS[k]} | {paper} | {r['time'][0] * 1e6:.2f} / "
                f"{r['time'][1] * 1e6:.2f} | {r['time'][0] / hum['aba']['time'][0]:.2f} | "
                f"{r['compile']:.1f} | {r['flops'] / 1e3:.1f} | {err} |"
            )
        for k, lab in (
            ("aba", "Pinocchio `aba` (C++ from Python, per sample)"),
            ("minv", "Pinocchio `computeMinverse` + `aba(q, v, 0)` + `Minv @ B`"),
        ):
            t = hum_pin[k]
            md.append(
                f"| {lab} | - | {t[0] * 1e6:.2f} / {t[1] * 1e6:.2f} | "
                f"{t[0] / hum['aba']['time'][0]:.2f} | - | - | |"
            )
        md += [
            "",
            f"`qdd0 + Bhat u` vs `jaxdyn.aba(q, v, B u)` (8 random states): max "
            f"relative deviation {hum_split:.1e}. Paper: IIM / O(n) = "
            f"{PAPER_T2['iim'] / PAPER_T2['aba']:.2f}, eUFM / IIM = "
            f"{PAPER_T2['eufm'] / PAPER_T2['iim']:.1f}; ours: IIM / ABA = "
            f"{hum['iim']['time'][0] / hum['aba']['time'][0]:.2f}, eUFM / IIM = "
            f"{hum['eufm']['time'][0] / hum['iim']['time'][0]:.2f}.",
        ]
    md.append("")
    md.append(f"Total run time {time.time() - t0:.0f} s.")
    write_section(args.out, SECTION + "\n\n" + "\n".join(md))
    print(f"wrote section '{SECTION}' of {args.out} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

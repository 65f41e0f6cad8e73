"""Inertia-weighted input matrix benchmarks: IIM vs eUFM vs dense (Krög et al., §6).

    python benchmarks/iwim.py            # ~3 min on an idle 2-core machine
    python benchmarks/iwim.py --quick    # smoke run

* n-link pendulum (§6.1), ``n`` up to 50, with a single input (the last joint) and fully
  actuated: per-sample time of ``jit(vmap(input_matrix(..., method)))`` for ``"iim"``,
  ``"eufm"`` and ``"dense"``, next to plain ABA (the O(n) baseline of the paper's Table 1).
  Figure: ``benchmarks/figures/iwim_pendulum.png``.
* humanoid (§6.2, Table 2): talos_full with 4 point contacts per sole (24 contact forces) and
  every joint actuated (44 torques): ``nu = 68`` inputs, :class:`jaxdyn.Inputs`.

Writes the ``## Input matrix (IIM)`` section of ``benchmarks/RESULTS.md`` (replacing an older
version of that section only). Single-threaded XLA, float64; times are min / median over
repeats of the per-sample time of one batched call; flops are XLA's cost analysis of the
lowered HLO of one sample (see ``benchmarks/osim.py`` for why not the compiled module's).

Note on eUFM: the paper's eUFM re-runs the whole O(n) forward dynamics ``nu + 1`` times. Here
it is ``jax.vmap`` of ABA over the ``nu + 1`` unit inputs, and vmap does not batch what does
not depend on the input -- kinematics and articulated inertias are computed once -- so in JAX
the eUFM already shares most of what the IIM shares; it still pays the velocity-product and
gravity terms and a subtraction per input.
"""

from __future__ import annotations

import argparse
import os
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
from jaxdyn import Connect, Inputs, robots  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from osim import env_lines, lowered_flops, time_per_sample, write_section  # noqa: E402

FIGDIR = HERE / "figures"
RESULTS = HERE / "RESULTS.md"
SECTION = "## Input matrix (IIM)"
METHODS = ("iim", "eufm", "dense")
COLORS = {"iim": "tab:green", "eufm": "tab:orange", "dense": "tab:gray", "aba": "black"}
LABELS = {"iim": "IIM", "eufm": "eUFM", "dense": "dense (CRBA + Cholesky)",
          "aba": "ABA (O(n) baseline)"}


def pendulum_urdf(n: int) -> str:
    """``n``-link pendulum, revolute joints about y (the IIM paper's §6.1 test system)."""
    out = ['<?xml version="1.0"?><robot name="pendulum"><link name="base"/>']
    parent = "base"
    for i in range(n):
        out.append(f'<link name="l{i}"><inertial><origin xyz="0 0 -0.25" rpy="0 0 0"/>'
                   '<mass value="1"/><inertia ixx="0.02" ixy="0" ixz="0" iyy="0.021" iyz="0" '
                   'izz="0.001"/></inertial></link>')
        z = 0.0 if i == 0 else -0.5
        out.append(f'<joint name="j{i}" type="revolute"><parent link="{parent}"/>'
                   f'<child link="l{i}"/><origin xyz="0 0 {z}" rpy="0 0 0"/><axis xyz="0 1 0"/>'
                   '<limit lower="-3" upper="3" effort="1" velocity="1"/></joint>')
        parent = f"l{i}"
    out.append("</robot>")
    return "".join(out)


def bench_case(model, B_or_inputs, batch, seed=0, with_aba=True, methods=METHODS):
    """Times (min, median), compile times and flops of each method (and ABA)."""
    keys = jax.random.split(jax.random.PRNGKey(seed), batch)
    qs = jax.jit(jax.vmap(lambda k: jaxdyn.random_configuration(model, k)))(keys)
    vs = jax.random.normal(jax.random.PRNGKey(seed + 1), (batch, model.nv))
    q0, v0 = qs[0], vs[0]
    out = {}
    fns = {m: (lambda m: lambda q, v: jaxdyn.input_matrix(model, q, v, B_or_inputs, m))(m)
           for m in methods}
    if with_aba:
        fns["aba"] = lambda q, v: jaxdyn.aba(model, q, v, jnp.zeros_like(v))
    ref = None
    for k, f1 in fns.items():
        fl = lowered_flops(f1, q0, v0)
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
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    t0 = time.time()
    ns = (1, 10) if args.quick else (1, 5, 10, 20, 50)
    res = {}
    for n in ns:
        model = jaxdyn.load_urdf(pendulum_urdf(n))
        for kind in ("single", "full"):
            B = np.eye(n)[:, -1:] if kind == "single" else np.eye(n)
            res[(n, kind)] = bench_case(model, jnp.asarray(B), args.batch,
                                        with_aba=(kind == "single"))
            if kind == "full":
                res[(n, kind)]["aba"] = res[(n, "single")]["aba"]
        print(f"pendulum n={n}: done ({time.time() - t0:.0f} s)", flush=True)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, kind in zip(axs, ("single", "full")):
        for k in METHODS + ("aba",):
            ax.plot(ns, [res[(n, kind)][k]["time"][0] * 1e6 for n in ns], "o-",
                    color=COLORS[k], label=LABELS[k], ms=3)
        ax.set_title("single input (last joint)" if kind == "single" else "fully actuated")
        ax.set_xlabel("links n")
        ax.grid(alpha=0.3)
    axs[0].set_ylabel(f"us per sample (min, batch {args.batch})")
    axs[0].legend(fontsize=8)
    fig.suptitle("n-link pendulum: free accelerations and M^-1 B (IIM paper, Fig. 2)")
    fig.tight_layout()
    FIGDIR.mkdir(exist_ok=True)
    fig.savefig(FIGDIR / "iwim_pendulum.png", dpi=110)
    plt.close(fig)

    # humanoid: talos_full, 4 points per sole (24 contact forces) + 44 joint torques
    hum = None
    if not args.quick:
        model = robots.load("talos_full")
        contacts = tuple(Connect(f, offset=(x, y, -0.01))
                         for f in ("left_sole_link", "right_sole_link")
                         for x in (0.1, -0.1) for y in (0.05, -0.05))
        inputs = Inputs("all", contacts)
        hum = bench_case(model, inputs, args.batch)
        print(f"humanoid: done ({time.time() - t0:.0f} s)", flush=True)

    md = [f"Written by `benchmarks/iwim.py{' --quick' if args.quick else ''}` (see its "
          "docstring for the method).", ""] + env_lines() + [""]
    md += ["### n-link pendulum (paper Fig. 2, Table 1)", "",
           f"us per sample (min / median, batch {args.batch}); `err`: max deviation of `Bhat` "
           "from the IIM's, relative. Figure: "
           "[figures/iwim_pendulum.png](figures/iwim_pendulum.png).", "",
           "| n | inputs | IIM | eUFM | dense | ABA | IIM / ABA | eUFM / IIM | kflops IIM / eUFM "
           "/ dense | max err |", "|---|---|---|---|---|---|---|---|---|---|"]
    for n in ns:
        for kind in ("single", "full"):
            r = res[(n, kind)]
            cell = lambda k: f"{r[k]['time'][0] * 1e6:.2f} / {r[k]['time'][1] * 1e6:.2f}"
            err = max(r[k]["err"] for k in METHODS)
            md.append(f"| {n} | {'1' if kind == 'single' else n} | {cell('iim')} | "
                      f"{cell('eufm')} | {cell('dense')} | {cell('aba')} | "
                      f"{r['iim']['time'][0] / r['aba']['time'][0]:.2f} | "
                      f"{r['eufm']['time'][0] / r['iim']['time'][0]:.2f} | "
                      f"{r['iim']['flops'] / 1e3:.1f} / {r['eufm']['flops'] / 1e3:.1f} / "
                      f"{r['dense']['flops'] / 1e3:.1f} | {err:.1e} |")
    if hum is not None:
        md += ["", "### Humanoid (paper Table 2)", "",
               "talos_full (nv = 50), 44 actuated joints and 4 point contacts per sole: "
               f"nu = 68 inputs (`jaxdyn.Inputs`). us per sample (min / median, batch "
               f"{args.batch}), compile s, kflops (lowered HLO).", "",
               "| method | us/sample | ratio to ABA (min) | compile s | kflops | max err |",
               "|---|---|---|---|---|---|"]
        for k in METHODS + ("aba",):
            r = hum[k]
            err = "" if r["err"] is None else f"{r['err']:.1e}"
            md.append(f"| {LABELS[k]} | {r['time'][0] * 1e6:.2f} / {r['time'][1] * 1e6:.2f} | "
                      f"{r['time'][0] / hum['aba']['time'][0]:.2f} | {r['compile']:.1f} | "
                      f"{r['flops'] / 1e3:.1f} | {err} |")
    md.append("")
    md.append(f"Total run time {time.time() - t0:.0f} s.")
    write_section(Path(args.out), SECTION, "\n".join(md))
    print(f"wrote section '{SECTION}' of {args.out} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

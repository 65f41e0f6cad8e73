"""Nori's sparse-matrix dynamics (jaxdyn.nori): flops and run times.

    python benchmarks/nori.py            # all parts, ~20 min on an idle 2-core machine
    python benchmarks/nori.py --quick    # smaller grids (smoke run)

Parts (written to the ``## Nori sparse dynamics`` section of ``benchmarks/RESULTS.md``,
replacing an older version of that section only; figures to ``benchmarks/figures/``):

* ``chains`` -- paper Fig. 1: forward dynamics of serial chains of ``N_B`` revolute links
  (random geometry, fixed base), ``N_B = 2 .. 100``. Flops: the symbolic count of the scalar
  LU on the worst-case pattern (factorisation and one solve) with the tree ordering and with
  scipy's best column ordering (COLAMD / MMD), and XLA's cost analysis of the lowered
  ``jax.jit(nori.forward_dynamics)`` and ``jax.jit(jaxdyn.aba)`` for one sample, with the
  chain passes unrolled (the cost analysis counts a ``lax.scan`` body once). Time per sample
  of both at batch ``--batch`` (scans on). ``nori_fig1.png``.
* ``loadcells`` -- paper Fig. 2: joint-torque estimation of a floating serial chain whose end
  links stand on load cells (normal force and in-plane torques) on a slippery floor (zero
  tangential forces known, the paper's eq. 24), every joint acceleration known: the sparse
  estimator (``nori.estimate``: multifrontal Cholesky of the normal equations in the tree
  order) against a dense solve of the same weighted least squares (``nori.assemble`` then
  ``jnp.linalg.solve`` of ``D^T W D``). Flops (XLA, one sample) and time per sample.
  ``nori_fig2.png``.
* ``robots`` -- time per sample at batch 1024 of ``nori.inverse_dynamics`` /
  ``nori.forward_dynamics`` against ``jaxdyn.rnea`` / ``jaxdyn.aba`` on solo12 and
  talos_full (float64), under plain ``jax.vmap`` and ``jaxdyn.vmap`` (chunks of 32); plus the
  ordering report (fill and flops of every ordering) of both robots.

Single-threaded XLA (``benchmarks/_env.py``), float64, value checks on. Times: the compared
programs are timed in turn over several rounds (the machine is shared); per program the
minimum and the median of the rounds' minimal per-sample times of one batched call.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from _env import single_threaded, write_section  # noqa: E402

single_threaded()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn import nori, robots  # noqa: E402
from jaxdyn.model import tree  # noqa: E402
from jaxdyn.nori import analysis  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from osim import env_lines, lowered_flops, time_per_sample  # noqa: E402

FIGDIR = HERE / "figures"
RESULTS = HERE / "RESULTS.md"
SECTION = "## Nori sparse dynamics"


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except Exception:  # pragma: no cover
        pass
    return "unknown"


def chain_urdf(n, seed=0):
    return robots.random_urdf(
        n,
        seed,
        joint_types=("revolute",),
        p_fixed=0.0,
        branching=0.0,
        massless_prob=0.0,
        name=f"chain{n}",
    )


class unrolled:
    """Context: every level pass unrolled (for XLA's cost analysis)."""

    def __enter__(self):
        self.prev = tree.MIN_SCAN_RUN
        tree.MIN_SCAN_RUN = 10**9

    def __exit__(self, *exc):
        tree.MIN_SCAN_RUN = self.prev


def states(model, batch, seed=0):
    k = jax.random.split(jax.random.PRNGKey(seed), 3)
    q = jax.jit(jax.vmap(lambda kk: jaxdyn.random_configuration(model, kk)))(
        jax.random.split(k[0], batch)
    )
    v = jax.random.normal(k[1], (batch, model.nv))
    t = jax.random.normal(k[2], (batch, model.nv))
    return q, v, t


def timed(f, args, batch):
    t0 = time.perf_counter()
    jax.block_until_ready(f(*args))
    comp = time.perf_counter() - t0
    return time_per_sample(f, args, batch), comp


def timed_together(fs, args, batch, rounds=4):
    """Compile each of ``fs``, then time them in turn for ``rounds`` rounds (the machine is
    shared: interleaving exposes every function to the same load); per function the minimum
    and the median of the rounds' minima, and the compile time."""
    comp = []
    for f in fs:
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        comp.append(time.perf_counter() - t0)
    mins = [[] for _ in fs]
    for _ in range(rounds):
        for i, f in enumerate(fs):
            mins[i].append(time_per_sample(f, args, batch, repeats=5)[0])
    return [((min(m), float(np.median(m))), c) for m, c in zip(mins, comp)]


# ============================================================================ Fig. 1
def part_chains(ns, batch, log):
    rows = []
    for n in ns:
        model = jaxdyn.load_urdf(chain_urdf(n))
        sfd = nori.build(model, nori.forward_dynamics_knowns(), check=False)
        an = analysis.analyze(sfd, model, orderings=("COLAMD", "MMD_ATA", "MMD_AT_PLUS_A"))
        best = an.best_scipy()
        tr = an.orderings["tree"]
        q, v, t = states(model, batch)
        fe = jnp.zeros((model.nb, 6))
        fn = lambda q, v, t: nori.forward_dynamics(model, q, v, t)
        fa = lambda q, v, t: jaxdyn.aba(model, q, v, t)
        with unrolled():
            x_n = lowered_flops(fn, q[0], v[0], t[0])
            x_a = lowered_flops(fa, q[0], v[0], t[0])
        jn, ja = jax.jit(jax.vmap(fn)), jax.jit(jax.vmap(fa))
        (tn, cn), (ta, ca) = timed_together((jn, ja), (q, v, t), batch)
        err = float(jnp.max(jnp.abs(jn(q, v, t) - ja(q, v, t))))
        rows.append(
            dict(
                n=n,
                tree_f=tr.factor_flops,
                tree_s=tr.solve_flops,
                tree_fill=tr.fill,
                sp=best.name,
                sp_f=best.factor_flops,
                sp_s=best.solve_flops,
                sp_fill=best.fill,
                xla_n=x_n,
                xla_a=x_a,
                t_n=tn,
                t_a=ta,
                c_n=cn,
                c_a=ca,
                err=err,
            )
        )
        del fe
        log(
            f"chain N_B={n}: nori {tn[0] * 1e6:.2f} us, aba {ta[0] * 1e6:.2f} us, "
            f"compile {cn:.1f}/{ca:.1f} s"
        )
    return rows


def fig1(rows, batch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n"] for r in rows]
    fig, axs = plt.subplots(1, 2, figsize=(10, 3.8))
    ax = axs[0]
    ax.plot(
        ns,
        [r["tree_f"] + r["tree_s"] for r in rows],
        "o-",
        ms=3,
        label="sparse LU, tree ordering (symbolic: factor + solve)",
    )
    ax.plot(
        ns,
        [r["sp_f"] + r["sp_s"] for r in rows],
        "s-",
        ms=3,
        label="sparse LU, best scipy ordering (symbolic)",
    )
    ax.plot(ns, [r["xla_n"] for r in rows], "^--", ms=3, label="nori.forward_dynamics (XLA)")
    ax.plot(ns, [r["xla_a"] for r in rows], "k.-", ms=3, label="jaxdyn.aba (XLA)")
    ax.set_xlabel("links N_B")
    ax.set_ylabel("flops per sample")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("(a) floating point operations")
    ax = axs[1]
    ax.plot(ns, [r["t_n"][0] * 1e6 for r in rows], "^-", ms=3, label="nori.forward_dynamics")
    ax.plot(ns, [r["t_a"][0] * 1e6 for r in rows], "k.-", ms=3, label="jaxdyn.aba")
    ax.set_xlabel("links N_B")
    ax.set_ylabel(f"us per sample (min, batch {batch})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("(b) time")
    fig.suptitle("Forward dynamics of a serial chain (Nori, Fig. 1)")
    fig.tight_layout()
    FIGDIR.mkdir(exist_ok=True)
    fig.savefig(FIGDIR / "nori_fig1.png", dpi=110)
    plt.close(fig)


# ============================================================================ Fig. 2
def loadcell_problem(n):
    model = jaxdyn.load_urdf(chain_urdf(n, seed=4), floating_base=True)
    ends = (model.body_names[0], model.body_names[-1])
    mid = tuple(model.body_names[1:-1])
    known = [
        nori.ExternalWrench(mid),
        nori.JointTorque("root_joint"),
        nori.JointAcceleration(),
        nori.ExternalWrench(ends, ("fx", "fy")),
    ]
    sensors = [nori.LoadCells(ends[0]), nori.LoadCells(ends[1])]
    rng = np.random.default_rng(0)
    q0 = analysis.random_q(model, rng)
    system = nori.build(model, known, sensors, check_states=[q0])
    return model, system, mid


def part_loadcells(ns, batch, dense_max, log):
    rows = []
    for n in ns:
        model, system, mid = loadcell_problem(n)
        rng = np.random.default_rng(1)
        qs = jnp.asarray(np.stack([analysis.random_q(model, rng) for _ in range(batch)]))
        vs = jnp.asarray(rng.normal(size=(batch, model.nv)))
        ys = [
            jnp.zeros((batch, len(mid), 6)),
            jnp.zeros((batch, 6)),
            jnp.asarray(rng.normal(size=(batch, model.nv))),
            jnp.zeros((batch, 2, 2)),
            jnp.asarray(rng.normal(size=(batch, 3))),
            jnp.asarray(rng.normal(size=(batch, 3))),
        ]
        std = 1e-3

        def sparse(q, v, y):
            return nori.estimate(
                system, model, q, v, y, dynamics_std=std, known_std=std, sensor_std=std
            ).tau

        def dense(q, v, y):
            D, r = nori.assemble(system, model, q, v, y)
            d = jnp.linalg.solve(D.T @ D, D.T @ r)  # equal weights: W = 1/std^2 cancels
            return nori.assembly.split_solution(system, d)[2]

        with unrolled():
            x_s = lowered_flops(sparse, qs[0], vs[0], [y[0] for y in ys])
            x_d = lowered_flops(dense, qs[0], vs[0], [y[0] for y in ys]) if n <= dense_max else None
        t_s, c_s = timed(jax.jit(jax.vmap(sparse)), (qs, vs, ys), batch)
        row = dict(
            n=n,
            rows=system.n_rows,
            vars=system.n_vars,
            xla_s=x_s,
            xla_d=x_d,
            t_s=t_s,
            c_s=c_s,
            t_d=None,
            err=None,
        )
        if n <= dense_max:
            fd = jax.jit(jax.vmap(dense))
            t_d, _ = timed(fd, (qs, vs, ys), batch)
            row["t_d"] = t_d
            row["err"] = float(
                jnp.max(jnp.abs(fd(qs, vs, ys) - jax.jit(jax.vmap(sparse))(qs, vs, ys)))
            )
        rows.append(row)
        log(
            f"load cells N_B={n}: sparse {t_s[0] * 1e6:.1f} us"
            + (f", dense {row['t_d'][0] * 1e6:.1f} us" if row["t_d"] else "")
        )
    return rows


def fig2(rows, batch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(1, 2, figsize=(10, 3.8))
    ns = [r["n"] for r in rows]
    dn = [r["n"] for r in rows if r["xla_d"]]
    axs[0].semilogy(ns, [r["xla_s"] for r in rows], "^-", ms=3, label="sparse (nori.estimate)")
    axs[0].semilogy(
        dn, [r["xla_d"] for r in rows if r["xla_d"]], "s-", ms=3, label="dense (assemble + solve)"
    )
    axs[0].set_ylabel("flops per sample (XLA)")
    axs[1].semilogy(ns, [r["t_s"][0] * 1e6 for r in rows], "^-", ms=3, label="sparse")
    axs[1].semilogy(dn, [r["t_d"][0] * 1e6 for r in rows if r["t_d"]], "s-", ms=3, label="dense")
    axs[1].set_ylabel(f"us per sample (min, batch {batch})")
    for ax in axs:
        ax.set_xlabel("links N_B")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Joint torques from load cells at the end links (Nori, Fig. 2)")
    fig.tight_layout()
    fig.savefig(FIGDIR / "nori_fig2.png", dpi=110)
    plt.close(fig)


# ============================================================================ robots
def part_robots(names, batch, log):
    out = []
    for name in names:
        model = robots.load(name)
        q, v, t = states(model, batch, seed=3)
        sid = nori.build(model, nori.inverse_dynamics_knowns(), analyze=True)
        sfd = nori.build(model, nori.forward_dynamics_knowns(), analyze=True)
        fns = {
            "nori ID": lambda q, v, a: nori.inverse_dynamics(model, q, v, a),
            "rnea": lambda q, v, a: jaxdyn.rnea(model, q, v, a),
            "nori FD": lambda q, v, t: nori.forward_dynamics(model, q, v, t),
            "aba": lambda q, v, t: jaxdyn.aba(model, q, v, t),
        }
        res = {"name": name, "nb": model.nb, "nv": model.nv, "id": sid.analysis, "fd": sfd.analysis}
        for key, f in fns.items():
            with unrolled():
                res[key, "flops"] = lowered_flops(f, q[0], v[0], t[0])
        for pair in (("nori ID", "rnea"), ("nori FD", "aba")):
            progs = [jax.jit(jax.vmap(fns[k])) for k in pair]
            progs += [jax.jit(jaxdyn.vmap(fns[k], chunk_size=32)) for k in pair]
            timings = timed_together(progs, (q, v, t), batch)
            for i, key in enumerate(pair):
                res[key, "vmap"], res[key, "chunk"] = timings[i], timings[i + 2]
                log(
                    f"{name} {key}: {res[key, 'vmap'][0][0] * 1e6:.2f} us (vmap), "
                    f"{res[key, 'chunk'][0][0] * 1e6:.2f} us (chunk 32)"
                )
        out.append(res)
    return out


# ============================================================================ report
def us(t):
    return f"{t[0] * 1e6:.2f} / {t[1] * 1e6:.2f}"


def report(chains, cells, robs, batch_chain, batch_cells, flags):
    L = []
    L.append(
        "F. Nori, *Inverse, forward and other dynamic computations computationally optimized "
        "with sparse matrix factorizations*: the Newton-Euler equations as one sparse system "
        "`D(q, v) d = r` over `d = {a_i, f_i, tau_i, f^x_i, qdd_i}` plus measurement rows, "
        "factorised in an ordering fixed offline (`jaxdyn.nori`, `docs/nori.md`). "
        "Written by `python benchmarks/nori.py`."
    )
    L.append("")
    L.extend(flags)
    L.append("")
    if chains:
        L.append("### Forward dynamics of serial chains (paper Fig. 1)")
        L.append("")
        L.append(
            "Revolute chains with random geometry, fixed base. *Symbolic*: flops of the scalar "
            "LU of `D` on its worst-case pattern, factorisation + one solve (`sum_k |L_k| (1 + 2 "
            "|U_k|) + 2 nnz(L + U)`), tree ordering (no pivoting) and the best of scipy's "
            "SuperLU column orderings (with its threshold row pivoting). *XLA*: cost analysis of "
            "the lowered program for one sample, passes unrolled (nori's XLA count includes the "
            "kinematics and the assembly of the blocks, the symbolic count only the LU). Time: "
            f"min / median us per sample, `jax.jit(jax.vmap(f))`, batch {batch_chain}, scans on, "
            "nori and aba timed in turn over 4 rounds. Max |nori - aba| over the batch in the "
            "last column."
        )
        L.append("")
        L.append(
            "| N_B | tree: fill | tree: flops | scipy best: ordering, fill | scipy best: flops | "
            "XLA nori | XLA aba | nori us | aba us | compile nori / aba (s) | max diff |"
        )
        L.append("| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in chains:
            L.append(
                f"| {r['n']} | {r['tree_fill']} | {r['tree_f'] + r['tree_s']} | {r['sp']}, "
                f"{r['sp_fill']} | {r['sp_f'] + r['sp_s']} | {r['xla_n']:.0f} | "
                f"{r['xla_a']:.0f} | {us(r['t_n'])} | {us(r['t_a'])} | {r['c_n']:.1f} / "
                f"{r['c_a']:.1f} | {r['err']:.1e} |"
            )
        L.append("")
        L.append("![Fig. 1 analogue](figures/nori_fig1.png)")
        L.append("")
    if cells:
        L.append("### Load-cell torque estimation (paper Fig. 2)")
        L.append("")
        L.append(
            "Floating serial chain, load cells `(nx, ny, fz)` under both end links, zero "
            "tangential forces known (slippery floor, eq. 24), every joint acceleration known, "
            "the base unactuated: over-determined, solved by weighted least squares. Sparse: "
            "`nori.estimate` (multifrontal Cholesky in the tree order). Dense: `nori.assemble` "
            "then `jnp.linalg.solve(D^T D, D^T r)`. XLA flops for one sample; min / median us "
            f"per sample, batch {batch_cells}."
        )
        L.append("")
        L.append(
            "| N_B | rows x unknowns | XLA sparse | XLA dense | sparse us | dense us | "
            "compile sparse (s) | max diff |"
        )
        L.append("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in cells:
            xd = "-" if r["xla_d"] is None else f"{r['xla_d']:.0f}"
            td = "-" if r["t_d"] is None else us(r["t_d"])
            er = "-" if r["err"] is None else f"{r['err']:.1e}"
            L.append(
                f"| {r['n']} | {r['rows']} x {r['vars']} | {r['xla_s']:.0f} | {xd} | "
                f"{us(r['t_s'])} | {td} | {r['c_s']:.1f} | {er} |"
            )
        L.append("")
        L.append("![Fig. 2 analogue](figures/nori_fig2.png)")
        L.append("")
    if robs:
        L.append("### solo12 and talos_full, batch 1024 (float64)")
        L.append("")
        L.append(
            "Time per sample, min / median us (the four programs of a pair timed in turn over 4 "
            "rounds); `vmap`: `jax.jit(jax.vmap(f))`, `chunk`: "
            "`jax.jit(jaxdyn.vmap(f, chunk_size=32))`. Flops: XLA cost analysis, one sample, "
            "passes unrolled."
        )
        L.append("")
        L.append("| robot | function | XLA flops | us (vmap) | us (chunk 32) | compile (s) |")
        L.append("| --- | --- | ---: | ---: | ---: | ---: |")
        for r in robs:
            for key in ("nori ID", "rnea", "nori FD", "aba"):
                L.append(
                    f"| {r['name']} | {key} | {r[key, 'flops']:.0f} | {us(r[key, 'vmap'][0])} | "
                    f"{us(r[key, 'chunk'][0])} | {r[key, 'vmap'][1]:.1f} |"
                )
        L.append("")
        for r in robs:
            for what in ("id", "fd"):
                an = r[what]
                L.append(
                    f"Orderings, {r['name']} {'inverse' if what == 'id' else 'forward'} dynamics "
                    f"(`D` {an.n_rows} x {an.n_vars}, worst-case nnz {an.nnz}; triangularisable: "
                    f"{an.triangular}):"
                )
                L.append("")
                L.append(an.table())
                L.append("")
    return "\n".join(L)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parts", default="chains,loadcells,robots")
    ap.add_argument("--batch", type=int, default=1024, help="batch of the robots part")
    ap.add_argument("--chain-batch", type=int, default=256)
    ap.add_argument("--cell-batch", type=int, default=32)
    ap.add_argument("--dense-max", type=int, default=24, help="largest chain solved densely")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    t0 = time.time()

    def log(msg):
        print(f"[{time.time() - t0:6.0f} s] {msg}", flush=True)

    flags = [
        f"- Machine: {cpu_model()}; " + env_lines()[0].split("; ", 1)[1],
        env_lines()[1],
        "- `OPENBLAS_NUM_THREADS=1`; jaxdyn value checks on.",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
    ]
    chain_ns = (2, 10) if args.quick else (2, 5, 10, 20, 30, 40, 60, 80, 100)
    cell_ns = (4, 8) if args.quick else (4, 8, 12, 16, 24, 32, 48, 64)
    chains = part_chains(chain_ns, args.chain_batch, log) if "chains" in parts else []
    if chains:
        fig1(chains, args.chain_batch)
    cells = (
        part_loadcells(cell_ns, args.cell_batch, args.dense_max, log)
        if "loadcells" in parts
        else []
    )
    if cells:
        fig2(cells, args.cell_batch)
    robs = (
        part_robots(
            ("solo12",) if args.quick else ("solo12", "talos_full"),
            64 if args.quick else args.batch,
            log,
        )
        if "robots" in parts
        else []
    )
    body = report(chains, cells, robs, args.chain_batch, args.cell_batch, flags)
    write_section(args.out, SECTION + "\n\n" + body)
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()

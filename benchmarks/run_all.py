"""Regenerate ``benchmarks/RESULTS.md``: every benchmark script, one after another, each writing
its own section through the shared writer (``_env.write_section``), then the file put in order.

    python benchmarks/run_all.py --list               # the benchmarks, their sections and scripts
    python benchmarks/run_all.py                      # every CPU benchmark (hours on 2 cores)
    python benchmarks/run_all.py vs_cpp sim           # only these
    python benchmarks/run_all.py --gpu gpu sim_gpu    # the GPU ones, on a machine with a GPU
    python benchmarks/run_all.py first_result --with first_result="--no-demo --examples none"
    python benchmarks/run_all.py --arrange            # only order the file and its preamble

Each benchmark runs as its own process (``python benchmarks/<script>.py``, with its default
options, the ones of ``--with`` and the results file), so that it sets its own XLA flags and
pins itself to one core before JAX starts (``_env.single_threaded``). A section is the latest
run of its benchmark: it replaces the whole previous section (earlier runs live in git), and
names the machine, the versions and the date. Sections no benchmark writes any more are kept
at the end and listed. Needs the ``bench`` extra (``pip install -e '.[bench]'``); the GPU
benchmarks (``--gpu``) need a GPU, and ``trajopt_gpu`` / ``sim_gpu`` also Crocoddyl / MuJoCo.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Benchmark:
    name: str  #: the script ``benchmarks/<name>.py``
    sections: tuple  #: the ``## `` headings it writes, in the file's order
    what: str
    gpu: bool = False
    out_flag: str = "--out"  #: the option naming the results file
    args: tuple = field(default=())  #: default options
    #: how to run it, for a benchmark run_all does not start (it needs its own environment)
    manual: str = ""


BENCHMARKS = (
    Benchmark(
        "core",
        ("## Core algorithms against Pinocchio and MJX",),
        "rnea, crba, aba, minv against Pinocchio (bindings) and MJX, batches 1-8192",
        out_flag="--results",
    ),
    Benchmark(
        "vs_cpp",
        ("## Plain jax.vmap against Pinocchio C++",),
        "jax.jit(jax.vmap(f)) against Pinocchio's C++, with the derivatives",
    ),
    Benchmark(
        "batch1",
        ("## Batch-1 latency against Pinocchio C++",),
        "one robot at a time: jit and eager calls, JAX's dispatch floor, async and sync dispatch",
    ),
    Benchmark(
        "centroidal",
        ("## Centroidal dynamics, frame motion and the Coriolis matrix against Pinocchio C++",),
        "centroidal, frame-motion and Coriolis functions against Pinocchio's C++",
    ),
    Benchmark("derivatives", ("## Derivatives",), "IDSVA / FDSVA against Pinocchio"),
    Benchmark("osim", ("## Delassus (PV-OSIMr)",), "Delassus matrix: PV-OSIMr and baselines"),
    Benchmark("iwim", ("## Input matrix (IIM)",), "the input matrix (IIM)"),
    Benchmark("clusters", ("## Clusters",), "C-RNEA, C-ABA, C-EFPA and baselines"),
    Benchmark("nori", ("## Nori sparse dynamics",), "Nori's sparse dynamics"),
    Benchmark("mjcf", ("## MJCF humanoid",), "an MJCF humanoid against MuJoCo C and MJX"),
    Benchmark(
        "collision",
        ("## Collision pipeline: a self-colliding humanoid",),
        "Geoms.frames of dm_control's humanoid (161 geom pairs) against MuJoCo C's mj_collision",
    ),
    Benchmark(
        "mjx_contact",
        ("## Contact scenes against MJX",),
        "jaxdyn.sim and MJX stepping the same contact-rich MJCF scenes (humanoid, arm + cube, "
        "quadruped)",
    ),
    Benchmark(
        "suite_step",
        ("## DM Control Suite: one env step against MJX (CPU)",),
        "one control step of the DM Control Suite ports against Playground's MJX environments "
        "and MJX with the file's and Playground's solver",
    ),
    Benchmark(
        "sim",
        (
            "## Simulation",
            "## Simulation: reverse mode through long rollouts",
            # written from another machine's JSON: sim.py --host-json FILE
            "## Simulation: MJX at large batch on another CPU",
        ),
        "batched steps with contact against MJX and jaxsim; reverse mode through rollouts",
    ),
    Benchmark(
        "sim_one",
        ("## Simulation: one robot on a CPU",),
        "one robot's rollout against MuJoCo C",
    ),
    Benchmark("trajopt", ("## Trajectory optimisation",), "FDDP / box-FDDP against Crocoddyl"),
    Benchmark(
        "trajopt_cores",
        ("## Batched MPC on a many-core CPU",),
        "a batch of FDDP problems over every core",
    ),
    Benchmark(
        "sharded",
        ("## Batches over several CPU devices",),
        "sharded_vmap against XLA's partitioner",
    ),
    Benchmark("distributed", ("## Rollouts across processes",), "rollouts over processes"),
    Benchmark("first_result", ("## Time to first result",), "cold and warm time to a result"),
    Benchmark(
        "playground_side_by_side",
        (
            "## MuJoCo Playground side by side (DM Control Suite, Brax PPO, CPU)",
            # --tasks T --seeds S, or --report-seeds benchmarks/playground_seeds.json
            "## MuJoCo Playground side by side over seeds (DM Control Suite, Brax PPO, CPU)",
        ),
        "Brax PPO on Playground's MJX suite tasks and jaxdyn's ports",
        manual="Playground goes in its own environment: run the script there with --tasks "
        "suite --compare-states 100 (the seven tasks' two backends and state comparisons, about "
        "17 minutes on an idle 2-core machine; its docstring, docs/environments.md)",
    ),
    Benchmark(
        "gpu",
        ("## GPU",),
        "the algorithms against MJX on a GPU (runs on other cards folded in: gpu.py's render)",
        gpu=True,
    ),
    Benchmark("sim_gpu", ("## Simulation on a GPU",), "steps with contact on a GPU", gpu=True),
    Benchmark(
        "contact_gpu",
        ("## Contact on a GPU",),
        "contact scenes and the suite ports against MJX on a GPU",
        gpu=True,
    ),
    Benchmark(
        "trajopt_gpu",
        ("## Trajectory optimisation on a GPU",),
        "batches of FDDP problems on a GPU against Crocoddyl",
        gpu=True,
    ),
)
BY_NAME = {b.name: b for b in BENCHMARKS}
ORDER = [h for b in BENCHMARKS for h in b.sections]


def command(b: Benchmark, out: Path, extra: str = "") -> list[str]:
    """The command line that runs ``b`` into the results file ``out``."""
    return [
        sys.executable,
        str(HERE / f"{b.name}.py"),
        *b.args,
        *shlex.split(extra),
        b.out_flag,
        str(out),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python benchmarks/run_all.py",
        description="Run the benchmarks; each writes its section of the results file.",
    )
    p.add_argument("names", nargs="*", help="benchmarks to run (default: every CPU one)")
    p.add_argument("--gpu", action="store_true", help="with no names: the GPU benchmarks")
    p.add_argument("--list", action="store_true", help="list the benchmarks and stop")
    p.add_argument("--arrange", action="store_true", help="only order the results file")
    p.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="the results file")
    p.add_argument(
        "--with",
        dest="extra",
        action="append",
        default=[],
        metavar="NAME=OPTIONS",
        help="options for one benchmark's script, e.g. --with vs_cpp='--runs 2'",
    )
    p.add_argument("--keep-going", action="store_true", help="go on after a failed benchmark")
    a = p.parse_args(argv)
    if a.list:
        for b in BENCHMARKS:
            kind = "GPU" if b.gpu else "own env" if b.manual else "CPU"
            print(f"{b.name:14} {kind}  benchmarks/{b.name}.py: {b.what}")
            for h in b.sections:
                print(f"{'':20}{h}")
        return 0
    unknown = [n for n in a.names if n not in BY_NAME]
    extra = {}
    for item in a.extra:
        name, sep, opts = item.partition("=")
        if not sep or name not in BY_NAME:
            p.error(f"--with {item!r}: expected NAME=OPTIONS with NAME one of {sorted(BY_NAME)}")
        extra[name] = opts
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; one of {', '.join(BY_NAME)}")
    if str(HERE) not in sys.path:  # imported as a module (the tests), not run as a script
        sys.path.insert(0, str(HERE))
    from _env import arrange

    names = a.names or [b.name for b in BENCHMARKS if b.gpu == a.gpu and not b.manual]
    failed = []
    for name in [] if a.arrange else names:
        b = BY_NAME[name]
        if b.manual:
            print(f"== {name}: not started here. {b.manual}", flush=True)
            continue
        cmd = command(b, a.out, extra.get(name, ""))
        print(f"== {name}: {shlex.join(cmd)}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, cwd=HERE).returncode
        print(f"== {name}: exit {rc} after {time.perf_counter() - t0:.0f} s", flush=True)
        if rc != 0:
            failed.append(name)
            if not a.keep_going:
                break
    others = arrange(a.out, ORDER)
    if others:
        print(f"sections no benchmark writes (kept at the end): {'; '.join(others)}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

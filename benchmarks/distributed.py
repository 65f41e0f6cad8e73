"""Batched rollouts with contact across processes (``jaxdyn.distributed``): steps per second of
one process against two joined on the loopback address (Gloo collectives), and one process
over every device it has (a GPU, or several CPU devices).

    python benchmarks/distributed.py                 # 1 vs 2 processes on this machine
    python benchmarks/distributed.py --local         # one process, its devices (e.g. a GPU)
    python benchmarks/distributed.py --no-write

Workload: quad12 with its four feet in compliant contact, PD position servos, the implicit
integrator, dt = 2 ms, float32; a global batch of B robots dropped from random heights, T
steps each, split evenly over every device of every process (:func:`jaxdyn.distributed.rollout`).
Steps/s = B * T / wall-clock time of the rollout (best of the repeats, after a compiling call).
Writes the section "## Rollouts across processes" of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _env  # noqa: E402

TITLE = "## Rollouts across processes"
FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")


def worker(B, T, repeats, distributed):
    import jax
    import numpy as np

    from jaxdyn import distributed as dist

    if distributed:
        dist.initialize()
    import jaxdyn
    from jaxdyn import robots, sim

    m = robots.load("quad12")
    cs = sim.contact_set(m, [sim.Sphere(f, 0.02) for f in FEET])
    cfg = sim.SimConfig(dt=2e-3, contact=sim.Compliant(), contacts=cs, actuator=sim.PD(20.0, 0.5))
    P, me = jax.process_count(), jax.process_index()
    q0 = np.asarray(jaxdyn.neutral_configuration(m), np.float32)
    rng = np.random.default_rng(0)
    q = np.tile(q0, (B, 1))
    q[:, 2] = 0.3 + 0.2 * rng.random(B)
    lo, hi = me * B // P, (me + 1) * B // P
    ref = np.tile(q0[7:], (hi - lo, T, 1))
    states = sim.State(q[lo:hi], np.zeros((hi - lo, m.nv), np.float32))
    run = lambda: dist.rollout(m, states, ref, cfg=cfg)  # noqa: E731
    run()  # compile
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t)
    out = {
        "processes": P,
        "devices": jax.device_count(),
        "platform": jax.devices()[0].platform,
        "device_kind": jax.devices()[0].device_kind,
        "B": B,
        "T": T,
        "seconds": best,
        "steps_per_s": B * T / best,
    }
    if me == 0:
        print(json.dumps(out), flush=True)


def _last_json(text):
    return json.loads(text.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--local", action="store_true", help="one process over its own devices")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"), help="the results file")
    args = ap.parse_args()
    if args.worker:
        from jaxdyn import distributed as dist

        dist.main(worker, args.batch, args.steps, args.repeats, True)
        return
    load = os.getloadavg()[0]
    if args.local:
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            worker(args.batch, args.steps, args.repeats, False)
        rows = [("1 process, its devices", _last_json(buf.getvalue()))]
    else:
        from jaxdyn.distributed import launch

        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent)] + sys.path))
        cmd = [__file__, "--worker", f"--batch={args.batch}", f"--steps={args.steps}",
               f"--repeats={args.repeats}"]  # fmt: skip
        rows = []
        for label, n, k in (
            ("1 process x 1 CPU device", 1, 1),
            ("1 process x 2 CPU devices", 1, 2),
            ("2 processes x 1 CPU device", 2, 1),
        ):
            res = launch(cmd, n, local_cpu_devices=k, env=env, timeout=600)
            rows.append((label, _last_json(res[0].stdout)))
    import jax

    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    base = rows[0][1]["steps_per_s"]
    sub = "### " + (
        f"{rows[0][1]['device_kind']} ({rows[0][1]['platform']})" if args.local else
        f"{_env.cpu_name()}, {_env.cores_note()}"
    )  # fmt: skip
    lines = [
        TITLE,
        "",
        "`python benchmarks/distributed.py` (`--local`: one process over its own devices). "
        "quad12, four feet in compliant contact, PD servos, implicit integrator, dt = 2 ms, "
        "float32; a global batch of B robots, T steps each, split evenly over every device of "
        "every process (`jaxdyn.distributed.rollout`); steps/s = B * T / wall-clock time (best "
        "of the repeats after a compiling call). Processes joined on 127.0.0.1 with Gloo. "
        "Across hosts the rollout itself exchanges nothing; each call adds the agreement "
        'checks and `gather` over the network (docs/distributed.md, "What to expect across '
        'hosts").',
        "",
        sub,
        "",
        f"jax {jax.__version__}, {when}; 1-minute load average {load:.1f} before the runs "
        "(a machine shared with other jobs runs every row slower, and the rows one after another "
        "under a load that changes).",
        "",
        "| run | devices | B | T | s | steps/s | vs first row |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, r in rows:
        lines.append(
            f"| {label} | {r['devices']} | {r['B']} | {r['T']} | {r['seconds']:.3f} | "
            f"{r['steps_per_s']:.0f} | {r['steps_per_s'] / base:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        _env.write_section(args.out, text)


if __name__ == "__main__":
    main()

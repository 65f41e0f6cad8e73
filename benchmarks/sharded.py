"""A batch split over several CPU devices: ``jaxdyn.sim.sharded_vmap`` (``jax.shard_map``, each
device runs the one-device program, chunk loop included, on its share) against the program
that XLA's partitioner splits (``jax.jit(jax.vmap(f))`` on sharded arrays with the batching
rule's chunk loop off, ``jaxdyn.batching.unchunked``: what ``sharded_vmap`` did until
2026-11-28, and what a plain ``jax.jit(jax.vmap(f))`` on arrays sharded over ``Auto`` mesh axes
needs not to gather the batch), all in one process.

    python benchmarks/sharded.py                          # every allowed core; writes RESULTS.md
    python benchmarks/sharded.py --robots solo12 --no-write

One CPU device per allowed core (``--xla_force_host_platform_device_count``), XLA's
single-threaded CPU flags, float64, B = 1024 split evenly; times per sample (wall clock of
the whole batch / B, best of 5 repeats, each at least 0.2 s). Writes the section "## Batches
over several CPU devices" of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _env  # noqa: E402

TITLE = "## Batches over several CPU devices"
ALGORITHMS = ("rnea", "crba", "aba", "minv", "rnea_derivatives", "aba_derivatives")


def _functions(jaxdyn, model):
    return {
        "rnea": lambda q, v: jaxdyn.rnea(model, q, v, v),
        "crba": lambda q, v: jaxdyn.crba(model, q),
        "aba": lambda q, v: jaxdyn.aba(model, q, v, v),
        "minv": lambda q, v: jaxdyn.minv(model, q),
        "rnea_derivatives": lambda q, v: jaxdyn.rnea_derivatives(model, q, v, v),
        "aba_derivatives": lambda q, v: jaxdyn.aba_derivatives(model, q, v, v),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--robots", default="solo12,talos_full")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--devices", type=int, default=None, help="default: one per allowed core")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"), help="the results file")
    args = ap.parse_args(argv)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    ndev = args.devices or cores
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = (
        f"{flags} {_env.SINGLE_THREAD_FLAGS} --xla_force_host_platform_device_count={ndev}"
    ).strip()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    _env.reuse_freed_buffers()

    import jax

    jax.config.update("jax_enable_x64", True)
    import jaxdyn
    from jaxdyn import batching, robots, sim
    from jaxdyn.sim import sharding

    mesh = sim.batch_mesh()

    def partitioned(fn):
        def plain(*a):
            with batching.unchunked():
                return fn(*a)

        return jax.jit(jax.vmap(plain), out_shardings=sharding.batch_sharding(mesh))

    B = args.batch
    rows = []
    for name in args.robots.split(","):
        model = robots.load(name)
        keys = jax.random.split(jax.random.PRNGKey(0), B)
        q = jax.vmap(lambda k, m=model: jaxdyn.random_configuration(m, k))(keys)
        v = jax.random.normal(jax.random.PRNGKey(1), (B, model.nv))
        qs, vs = sim.shard_batch((q, v), mesh)
        fns = _functions(jaxdyn, model)
        for alg in args.algorithms.split(","):
            old, new = partitioned(fns[alg]), sim.sharded_vmap(fns[alg], mesh)
            # interleaved, twice: this VM's speed drifts between minutes
            t_old = min(_env.timed(old, (qs, vs)) for _ in range(2)) / B * 1e6
            t_new = min(_env.timed(new, (qs, vs)) for _ in range(2)) / B * 1e6
            rows.append((name, alg, t_old, t_new))
            print(f"{name:12s} {alg:18s} partitioned {t_old:8.2f}  sharded_vmap {t_new:8.2f} us")

    import datetime

    rev = _env.git_commit()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        TITLE,
        "",
        f"`python benchmarks/sharded.py` on {_env.cpu_name()}, {cores} cores allowed, {ndev} CPU "
        f"devices (`--xla_force_host_platform_device_count`, `{_env.SINGLE_THREAD_FLAGS}`), "
        f"jax {jax.__version__}, git {rev}, {when}. float64, B = {B} split evenly over the "
        "devices; us per sample (the batch's wall-clock time / B, best of the repeats). "
        "*partitioned*: `jax.jit(jax.vmap(f))` on the sharded arrays with the batching rule's "
        "chunk loop off (`jaxdyn.batching.unchunked`; what `sim.sharded_vmap` did before "
        "2026-11-28; with the loop on, XLA's partitioner gathers the batch on every device); "
        "*sharded_vmap*: `jaxdyn.sim.sharded_vmap(f)` (`jax.shard_map`: each device runs the "
        "one-device program, chunk loop included, on its share).",
        "",
        "| robot | algorithm | partitioned us | sharded_vmap us | ratio |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [f"| {r} | {a} | {o:.2f} | {n:.2f} | {n / o:.2f} |" for r, a, o, n in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        _env.write_section(args.out, text)


if __name__ == "__main__":
    main()

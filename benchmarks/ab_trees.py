"""Time the same jaxdyn functions from two (or more) source trees, interleaved, on whatever
backend JAX picks (written for bisecting a GPU slowdown between commits within one lease).

    git archive <rev> jaxdyn | tar -x -C /tmp/old          # a tree per revision
    python benchmarks/ab_trees.py /tmp/old . --rounds 2    # old, new, old, new

Each (tree, round) runs in a fresh process (two versions of the package cannot share one),
which prints one JSON line: per-sample microseconds of ``jax.jit(jax.vmap(f))``, median of 15
calls after a warm-up, float64, for rnea / crba / aba / minv on solo12 and talos_full at the
batch sizes of ``--batches``. The summary gives each tree's mean over rounds and its ratio to
the first tree's. Robots come from example-robot-data (``EXAMPLE_ROBOT_DATA_DIR`` on a machine
without it installed; see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import jaxdyn, jaxdyn.robots
res = {}
for rname in sys.argv[2].split(","):
    m = jaxdyn.robots.load(rname)
    for B in [int(b) for b in sys.argv[3].split(",")]:
        keys = jax.random.split(jax.random.PRNGKey(0), B)
        q = jax.jit(jax.vmap(lambda k: jaxdyn.random_configuration(m, k, dtype="float64")))(keys)
        rng = np.random.default_rng(0)
        v = jnp.asarray(rng.standard_normal((B, m.nv)))
        a = jnp.asarray(rng.standard_normal((B, m.nv)))
        cases = {"rnea": (jaxdyn.rnea, (q, v, a)), "crba": (jaxdyn.crba, (q,)),
                 "aba": (jaxdyn.aba, (q, v, a)), "minv": (jaxdyn.minv, (q,))}
        for alg, (f, xs) in cases.items():
            jf = jax.jit(jax.vmap(f, in_axes=(None,) + (0,) * len(xs)))
            jax.block_until_ready(jf(m, *xs))
            ts = []
            for _ in range(15):
                t = time.perf_counter()
                jax.block_until_ready(jf(m, *xs))
                ts.append(time.perf_counter() - t)
            res[f"{rname} {alg} B={B}"] = float(np.median(ts)) / B * 1e6
print(json.dumps(res))
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trees", nargs="+", help="folders holding a jaxdyn/ package")
    p.add_argument("--robots", default="solo12,talos_full")
    p.add_argument("--batches", default="8192,65536")
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args(argv)
    runs: dict[str, list[dict]] = {t: [] for t in a.trees}
    for r in range(a.rounds):
        for t in a.trees:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, t, a.robots, a.batches],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            runs[t].append(json.loads(out.strip().splitlines()[-1]))
            print(f"round {r + 1}, {t}: {runs[t][-1]}", flush=True)
    base = a.trees[0]
    print("\nus per sample, mean over rounds (ratio to " + base + ")")
    for key in runs[base][0]:
        means = {t: sum(d[key] for d in runs[t]) / len(runs[t]) for t in a.trees}
        cells = [f"{t}: {m:.4f} ({m / means[base]:.2f})" for t, m in means.items()]
        print(f"{key:26s} " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""XLA:CPU compile options against compile time and run time, alternated in one process (issue 53).

Usage::

    python benchmarks/compile_options.py [--fns rnea,aba_derivatives] [--fddp] [--rounds 2]
        [--options '{"name": {"xla_option": value}, ...}']

Each function (``jax.jit(jax.vmap(f))`` on talos_full, batch 1024, float64; ``--fddp``: the
one-problem FDDP solve program of ``benchmarks/trajopt.py``'s quad12 problem, T = 50) is
lowered afresh (``jax.clear_caches()``, jaxdyn's persistent caches off) and compiled once per
option set per round, the option sets alternated, each with ``compiler_options`` (per program:
what ``jax.jit(...).lower(...).compile(compiler_options=...)`` accepts; XLA's
``xla_backend_extra_options`` and LLVM's own options are process-wide, ``XLA_FLAGS``, and need
one process per setting). Printed per compile: wall-clock and CPU seconds of the process
(``time.process_time``, XLA's compile threads included: what a loaded machine inflates least),
the compiled program's run time (CPU time, median of repeated calls) and its largest
difference from the first option set's results. The default option sets are those
``docs/performance.md`` ("Compile time") reports; none was adopted. Prints; writes nothing.
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
sys.path.insert(0, str(HERE.parent))  # this checkout's jaxdyn

#: option sets compared by default (the first is the reference)
DEFAULT_OPTIONS = {
    "default": {},
    "fast_compile_preset": {"xla_cpu_opt_preset": "CPU_OPT_PRESET_FAST_COMPILE"},
    "no_expensive_passes": {"xla_llvm_disable_expensive_passes": True},
    "avx2": {"xla_cpu_max_isa": "AVX2"},
    "vector_width_128": {"xla_cpu_prefer_vector_width": 128},
    "split_4": {"xla_cpu_parallel_codegen_split_count": 4},
    "opt_level_2": {"xla_backend_optimization_level": 2},
}


def _algorithms(names, batch):
    import jax
    import jax.numpy as jnp

    import jaxdyn
    from jaxdyn import robots

    m = robots.load("talos_full")
    keys = jax.random.split(jax.random.PRNGKey(0), batch)
    q = jax.jit(jax.vmap(lambda k: jaxdyn.random_configuration(m, k)))(keys)
    v = jnp.linspace(-1.0, 1.0, batch * m.nv).reshape(batch, m.nv)
    out = {}
    for name in names:
        alg = getattr(jaxdyn, name)
        if name in ("crba", "minv"):
            out[name] = (jax.vmap(lambda q, alg=alg: alg(m, q)), (q,), batch)
        else:
            out[name] = (jax.vmap(lambda q, v, alg=alg: alg(m, q, v, v)), (q, v), batch)
    return out


def _fddp():
    """The quad12 solve program of ``benchmarks/trajopt.py`` as a function of its arrays."""
    import equinox as eqx
    import jax.numpy as jnp
    import numpy as np
    from _trajopt_problems import MAX_ITER, goal_state, load_model, make_problem

    import jaxdyn
    from jaxdyn.trajopt import ddp

    model, _, _ = load_model("quad12")
    rng = np.random.default_rng(1)
    q0 = jaxdyn.integrate(
        model, jaxdyn.neutral_configuration(model), 0.3 * rng.standard_normal(model.nv)
    )
    offset = 0.8 * np.cos(np.arange(model.nv))
    offset[:6] = (0.3, -0.2, 0.1, 0.0, 0.0, 0.0)
    x0 = jnp.concatenate([q0, jnp.zeros(model.nv)])
    problem = make_problem(model, 50, x0, goal_state(model, q0, offset))
    problem, xs, us = ddp._start(problem, None, None, False)
    params, static = ddp._options({"max_iter": MAX_ITER}, xs.dtype)
    dynamic, rest = eqx.partition((problem, xs, us, params), eqx.is_array)

    def solve(dynamic):
        p, x, u, par = eqx.combine(dynamic, rest)
        r = ddp._solve_program(p, x, u, jnp.asarray(False), par, **static)
        return r.xs, r.us, r.iterations

    return {"fddp quad12": (solve, (dynamic,), 1)}


def main() -> None:
    p = argparse.ArgumentParser(description="XLA:CPU compile options against compile and run time")
    p.add_argument(
        "--fns", default="rnea,aba_derivatives", help="jaxdyn algorithms, comma-separated"
    )
    p.add_argument("--fddp", action="store_true", help="also the quad12 FDDP solve program")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--calls", type=int, default=15, help="timed calls per compiled program")
    p.add_argument("--options", default=None, help="JSON: {name: compiler_options}")
    a = p.parse_args()
    os.environ.setdefault("JAXDYN_COMPILATION_CACHE", "0")
    os.environ.setdefault("JAXDYN_EXECUTABLE_CACHE", "0")
    os.environ.setdefault("JAXDYN_COMPILE_LOG", "0")
    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    options = json.loads(a.options) if a.options else DEFAULT_OPTIONS
    fns = _algorithms([n for n in a.fns.split(",") if n], 1024)
    if a.fddp:
        fns.update(_fddp())
    for name, (f, args, per) in fns.items():
        ref = None
        for r in range(a.rounds):
            for key, opts in options.items():
                jax.clear_caches()
                lowered = jax.jit(f).lower(*args)
                t0, c0 = time.perf_counter(), time.process_time()
                compiled = lowered.compile(compiler_options=opts) if opts else lowered.compile()
                t1, c1 = time.perf_counter(), time.process_time()
                out = jax.block_until_ready(compiled(*args))
                times = []
                for _ in range(a.calls):
                    c = time.process_time()
                    jax.block_until_ready(compiled(*args))
                    times.append(time.process_time() - c)
                leaves = [np.asarray(x, np.float64) for x in jax.tree.leaves(out)]
                ref = leaves if ref is None else ref
                diff = max(float(np.max(np.abs(x - y))) for x, y in zip(leaves, ref))
                run = np.median(times) / per * 1e6
                print(
                    f"{name:18s} round {r} {key:22s} compile {t1 - t0:5.2f} s wall "
                    f"{c1 - c0:5.2f} s CPU | run {run:9.2f} us CPU per call/sample | "
                    f"max diff {diff:.1e}",
                    flush=True,
                )


if __name__ == "__main__":
    main()

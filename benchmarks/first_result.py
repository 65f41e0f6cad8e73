"""Time to first result: each example and ``python -m jaxdyn demo`` in fresh processes, with a
cold and a warm persistent compilation cache, and the compile times of the core algorithms.

* **Runs.** Each command starts in a new interpreter with ``JAXDYN_CACHE_DIR`` pointing at a
  new temporary directory (cold: nothing compiled, jaxdyn's C handler included), then again
  with the same directory (warm: JAX's persistent cache holds what the first run compiled, see
  :func:`jaxdyn.config.compilation_cache`, and jaxdyn's executable cache the trajectory
  optimisation solves, loaded without tracing: :func:`jaxdyn.config.executable_cache`).
  Reported: seconds from the start of the process to its first line on stdout (the first
  useful output) and to its exit. A run still going after ``--timeout`` seconds is stopped
  (its total reads ``> timeout``); the long training examples get short options
  (:data:`QUICK`).
* **Compile table.** ``jax.jit(jax.vmap(f))`` on one robot (default talos_full, batch 1024,
  float64; ``--batch 1``: ``jax.jit(f)`` on one sample) for rnea, crba, aba, minv,
  rnea_derivatives and aba_derivatives, and ``sim.step`` of quad12 standing on its feet
  (the README's scene, :data:`SIM_TABLE`) with either contact model, with the phases apart
  through ``jax.stages``:
  ``.trace()`` (Python tracing to a jaxpr), ``.lower()`` (StableHLO) and ``.compile()``
  (XLA), each as wall-clock and as the process's CPU time (``time.process_time``: what a
  loaded machine inflates least), the number of StableHLO operations of the lowered program,
  then ``.compile()`` again after ``jax.clear_caches()`` with the persistent cache warm (a
  read of the cache instead of XLA). The table's process has a cold cache directory too, so
  ``import jaxdyn`` starts the C compiler on the CPU kernels' library in the background; the
  rows start once it is ready, and the section says how long after the import that was (and
  the compiler's CPU time): a one-time build per machine and versions, reported apart from
  the programs' compiles (which a first call made sooner would wait for in its lowering).

Writes its section ("Time to first result") to ``benchmarks/RESULTS.md`` with the machine,
versions and date. ``--note`` adds a line (e.g. that the machine was shared).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _env import cpu_name, write_section  # noqa: E402

#: options that make the long examples short (``{tmp}``: a temporary directory for their
#: figures, so that a benchmark run leaves the repository's figures alone)
QUICK = {
    "train_reacher_apg.py": ["--iterations", "3", "--out", "{tmp}/reacher_apg.png"],
    "train_quadruped_ppo.py": ["--out", "{tmp}/quadruped_ppo.png"],
}

#: the algorithms of the compile table
TABLE = ("rnea", "crba", "aba", "minv", "rnea_derivatives", "aba_derivatives")
#: the simulator's rows of the compile table: ``sim.step`` of quad12 standing on its four foot
#: spheres (the README's scene: implicit, ``PD(20, 0.5)``, dt = 2 ms), with either contact model,
#: whatever ``--robot``
SIM_TABLE = ("sim.step quad12 Compliant", "sim.step quad12 Constraint")


def timed_run(cmd, env=None, cwd=None, timeout: float = 300.0) -> dict:
    """Run ``cmd``; return ``first`` (seconds to its first stdout line, ``None`` if none),
    ``total`` (seconds to its exit, ``None`` when stopped at ``timeout``), ``rc`` and the
    last lines of its stderr (``err``)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(
        cmd,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    killed = threading.Event()

    def stop():
        killed.set()
        p.kill()

    timer = threading.Timer(timeout, stop)
    timer.start()
    err: list = []
    reader = threading.Thread(target=lambda: err.extend(p.stderr), daemon=True)
    reader.start()
    first = None
    try:
        for _line in p.stdout:
            if first is None:
                first = time.perf_counter() - t0
        p.wait()
    finally:
        timer.cancel()
    total = time.perf_counter() - t0
    reader.join(timeout=5)
    return {
        "first": first,
        "total": None if killed.is_set() else total,
        "rc": p.returncode,
        "err": "".join(err[-3:]).strip(),
    }


def _commands(examples, demo: bool, tmp: str):
    out = []
    for name in examples:
        extra = [a.format(tmp=tmp) for a in QUICK.get(name, [])]
        out.append(
            (f"examples/{name}" + (" (quick)" if extra else ""), ["examples/" + name, *extra])
        )
    if demo:
        out.append(("python -m jaxdyn demo", ["-m", "jaxdyn", "demo"]))
    return out


def _child_env(cache: str) -> dict:
    """The environment of a measured child: jaxdyn of this checkout (``PYTHONPATH``: a script
    in ``examples/`` would otherwise import an installed one), its cache in ``cache``, no
    cache directory of the user's, and ``TMPDIR`` in ``cache`` too: jaxdyn's C handler,
    when not in its cache, is also looked for in a directory of this user's under the
    temporary directory (:mod:`jaxdyn.backend.ffi`), which the tests fill; a cold run must
    build it as a user's first run does."""
    path = os.environ.get("PYTHONPATH", "")
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT) + (os.pathsep + path if path else ""),
        JAXDYN_CACHE_DIR=cache,
        TMPDIR=cache,
        JAXDYN_COMPILATION_CACHE="1",
        MPLBACKEND="Agg",
        PYTHONUNBUFFERED="1",
    )
    for k in ("JAX_COMPILATION_CACHE_DIR", "JAXDYN_COMPILE_LOG"):
        env.pop(k, None)
    return env


def measure_runs(examples, demo: bool, timeout: float) -> list:
    """Cold and warm runs of each command (see the module docstring)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="jaxdyn-first-result-") as tmp:
        # the examples run from a copy in ``tmp`` (their working directory): what they save
        # (figures, videos, a plot in the working directory) stays out of the checkout
        skip = shutil.ignore_patterns("figures", "__pycache__")
        shutil.copytree(ROOT / "examples", Path(tmp) / "examples", ignore=skip)
        for label, args in _commands(examples, demo, tmp):
            cache = tempfile.mkdtemp(dir=tmp)
            env = _child_env(cache)
            cold = timed_run([sys.executable, "-u", *args], env, tmp, timeout)
            warm = timed_run([sys.executable, "-u", *args], env, tmp, timeout)
            cold["timeout"] = warm["timeout"] = timeout
            rows.append((label, cold, warm))
            print(label, _cell(cold), _cell(warm), flush=True)
            shutil.rmtree(cache, ignore_errors=True)
    return rows


def measure_compiles(robot: str, batch: int) -> list:
    """Trace / lower / XLA compile / compile from a warm cache of ``jax.jit(jax.vmap(f))``."""
    import jax
    import jax.numpy as jnp

    t_import, c_children = time.perf_counter(), _children_cpu()
    import jaxdyn
    from jaxdyn import robots
    from jaxdyn.backend import ffi

    jax.config.update("jax_enable_x64", True)
    # the CPU kernels' library: compiled by the C compiler in the background from the import
    # (a cold cache directory), waited for here so that the table's first row is a compile
    registered = ffi.kernels_available()
    build = {
        "ready": time.perf_counter() - t_import,
        "cpu": _children_cpu() - c_children,
        "status": "registered" if registered else ffi.kernel_status(),
    }
    m = robots.load(robot)
    keys = jax.random.split(jax.random.PRNGKey(0), batch)
    q = jax.jit(jax.vmap(lambda k: jaxdyn.random_configuration(m, k)))(keys)
    v = jnp.linspace(-1.0, 1.0, batch * m.nv).reshape(batch, m.nv)
    fns = {
        "rnea": (lambda q, v: jaxdyn.rnea(m, q, v, v), (q, v)),
        "crba": (lambda q: jaxdyn.crba(m, q), (q,)),
        "aba": (lambda q, v: jaxdyn.aba(m, q, v, v), (q, v)),
        "minv": (lambda q: jaxdyn.minv(m, q), (q,)),
        "rnea_derivatives": (lambda q, v: jaxdyn.rnea_derivatives(m, q, v, v), (q, v)),
        "aba_derivatives": (lambda q, v: jaxdyn.aba_derivatives(m, q, v, v), (q, v)),
    }
    fns.update(_sim_steps(batch))
    rows = []
    for name in TABLE + SIM_TABLE:
        f, args = fns[name]
        if batch == 1:
            args = jax.tree.map(lambda a: a[0], args)
        times = {}
        for phase in ("cold", "warm"):
            jax.clear_caches()
            jf = jax.jit(f if batch == 1 else jax.vmap(f))
            t0, c0 = time.perf_counter(), time.process_time()
            traced = jf.trace(*args)
            t1, c1 = time.perf_counter(), time.process_time()
            lowered = traced.lower()
            t2, c2 = time.perf_counter(), time.process_time()
            compiled = lowered.compile()
            t3, c3 = time.perf_counter(), time.process_time()
            jax.block_until_ready(compiled(*args))
            if phase == "cold":
                times.update(trace=t1 - t0, lower=t2 - t1, compile=t3 - t2)
                times.update(trace_cpu=c1 - c0, lower_cpu=c2 - c1, compile_cpu=c3 - c2)
                times["ops"] = hlo_ops(lowered.as_text())
            else:
                times["warm"] = t3 - t2
        rows.append((name, times))
        print(name, {k: round(t, 2) for k, t in times.items()}, flush=True)
    rows.append(("kernel library", build))
    return rows


def _sim_steps(batch: int) -> dict:
    """The :data:`SIM_TABLE` functions and their batched arguments (standing states, the
    standing posture as the servo targets)."""
    import jax
    import jax.numpy as jnp

    import jaxdyn
    from jaxdyn import robots, sim

    m = robots.load("quad12")
    assert isinstance(m, jaxdyn.Model)
    feet = [sim.Sphere(f, 0.02) for f in ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")]
    q0 = jaxdyn.neutral_configuration(m).at[2].set(0.34)
    dq = 0.05 * jax.random.normal(jax.random.PRNGKey(0), (batch, m.nv))
    s = sim.State(
        jax.vmap(lambda d: jaxdyn.integrate(m, q0, d))(dq),
        jnp.zeros((batch, m.nv)),
        jnp.zeros(batch),
    )
    u = jnp.broadcast_to(q0[7:], (batch, 12))
    out = {}
    for name, contact in zip(
        SIM_TABLE, (sim.Compliant(friction=1.0), sim.Constraint(friction=1.0))
    ):
        cfg = sim.SimConfig(
            dt=2e-3,
            contact=contact,
            contacts=sim.contact_set(m, feet),
            actuator=sim.PD(kp=20.0, kd=0.5),
        )
        out[name] = (lambda s, u, cfg=cfg: sim.step(m, s, u, cfg), (s, u))
    return out


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (the C compiler's processes)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def hlo_ops(text: str) -> int:
    """Number of StableHLO operations in a lowered program's text (``.lower().as_text()``)."""
    return sum(
        1 for line in text.splitlines() if " = stablehlo." in line or '= "stablehlo.' in line
    )


def _s(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def _cell(r) -> tuple:
    total = f"> {r.get('timeout', 0):.0f}" if r["total"] is None else _s(r["total"])
    if r["total"] is not None and r["rc"] != 0:
        total += f" (exit {r['rc']})"
    return _s(r["first"]), total


def render(runs, compiles, meta: dict) -> str:
    """The markdown section (see the module docstring)."""
    lines = [
        "## Time to first result",
        "",
        f"{meta['date']}; {meta['machine']}; {meta['versions']}. "
        "`python benchmarks/first_result.py`: each command in a fresh process, cold (new "
        "`JAXDYN_CACHE_DIR`: nothing compiled) then warm (the same directory: JAX's "
        "persistent compilation cache and jaxdyn's executable cache filled by the cold run). "
        "Seconds from the process's start "
        "to its first line on stdout and to its exit.",
    ]
    if meta.get("note"):
        lines += ["", meta["note"]]
    if runs:
        lines += [
            "",
            "| command | cold: first line | cold: total | warm: first line | warm: total |",
            "|---|---:|---:|---:|---:|",
        ]
        for label, cold, warm in runs:
            lines.append(f"| {label} | " + " | ".join(_cell(cold) + _cell(warm)) + " |")
    if compiles:
        lines += [
            "",
            f"Compile times of `jax.jit(jax.vmap(f))`, {meta['robot']} (the `sim.step` rows: "
            f"quad12 on its feet, implicit, PD servos), batch {meta['batch']}, "
            "float64 (seconds, wall-clock / CPU time of the process; `jax.stages`: `.trace()`, "
            "`.lower()`, `.compile()`; ops: StableHLO operations of the lowered program; the "
            "last column is `.compile()` again after `jax.clear_caches()`, read from the "
            "persistent cache):",
            "",
            "| function | trace | lower | XLA compile | ops | compile, warm cache |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        build = dict(compiles).get("kernel library")
        for name, t in compiles:
            if name == "kernel library":
                continue
            cells = [f"{_s(t[k])} / {_s(t.get(k + '_cpu'))}" for k in ("trace", "lower", "compile")]
            lines.append(
                f"| {name} | " + " | ".join(cells) + f" | {t.get('ops', '-')} | "
                f"{_s(t.get('warm'))} |"
            )
        if build is not None and build["cpu"] < 0.05:  # no compiler ran: found compiled
            lines += [
                "",
                "The CPU kernels' library was found compiled (no C compiler ran in the table's "
                f"process; kernels {build['status']}).",
            ]
        elif build is not None:
            lines += [
                "",
                "The table's process starts with an empty cache directory, so `import jaxdyn` "
                "starts the C compiler on the CPU kernels' library in a background thread (once "
                "per machine, compiler and jaxdyn/jaxlib versions; kept in the cache directory): "
                f"it was ready {_s(build['ready'])} s after the import began "
                f"({_s(build['cpu'])} CPU-s in the compiler's processes; kernels "
                f"{build['status']}). The rows start once it is ready: a first call made "
                "sooner waits for the rest of that build in its lowering, the cold runs above "
                "include that wait.",
            ]
    return "\n".join(lines) + "\n"


def _meta(a) -> dict:
    import jax
    import jaxlib

    import jaxdyn

    return {
        "date": datetime.date.today().isoformat(),
        "machine": f"{cpu_name()}, {os.cpu_count()} cores, {platform.system()}",
        "versions": f"Python {platform.python_version()}, jax {jax.__version__}, "
        f"jaxlib {jaxlib.__version__}, jaxdyn {jaxdyn.__version__}",
        "note": a.note,
        "robot": a.robot,
        "batch": a.batch,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python benchmarks/first_result.py", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--examples",
        default="all",
        help="comma-separated file names in examples/ ('all'; 'none' for no example)",
    )
    p.add_argument("--no-demo", action="store_true", help="skip `python -m jaxdyn demo`")
    p.add_argument("--no-compile-table", action="store_true")
    p.add_argument("--robot", default="talos_full", help="robot of the compile table")
    p.add_argument("--batch", type=int, default=1024, help="batch of the compile table")
    p.add_argument(
        "--timeout", type=float, default=300.0, help="seconds per run before it is stopped"
    )
    p.add_argument("--note", default="", help="a line added under the section's heading")
    p.add_argument("--out", default=str(HERE / "RESULTS.md"))
    a = p.parse_args(argv)
    if a.examples == "all":
        examples = sorted(  # not the examples' shared modules (_ppo.py, _outputs.py)
            x.name for x in (ROOT / "examples").glob("*.py") if not x.name.startswith("_")
        )
    elif a.examples in ("", "none"):
        examples = []
    else:
        examples = [x.strip() for x in a.examples.split(",") if x.strip()]
        missing = [x for x in examples if not (ROOT / "examples" / x).is_file()]
        if missing:
            p.error(f"--examples: not in examples/: {', '.join(missing)}")
    runs = measure_runs(examples, not a.no_demo, a.timeout) if examples or not a.no_demo else []
    compiles = [] if a.no_compile_table else _compiles_in_child(a)
    section = render(runs, compiles, _meta(a))
    print(section)
    write_section(a.out, section)
    return 0


def _compiles_in_child(a) -> list:
    """:func:`measure_compiles` in a fresh process with its own persistent cache directory (so
    that the cold column compiles and the warm one reads what it wrote)."""
    import json

    with tempfile.TemporaryDirectory(prefix="jaxdyn-compile-table-") as cache:
        env = dict(_child_env(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
        code = (
            "import json, sys; sys.path.insert(0, sys.argv[1]); import first_result as f; "
            "print('JSON ' + json.dumps(f.measure_compiles(sys.argv[2], int(sys.argv[3]))))"
        )
        r = subprocess.run(
            [sys.executable, "-c", code, str(HERE), a.robot, str(a.batch)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise RuntimeError(f"compile table failed:\n{r.stderr[-3000:]}")
        line = [x for x in r.stdout.splitlines() if x.startswith("JSON ")][-1]
        return [tuple(x) for x in json.loads(line[5:])]


if __name__ == "__main__":
    sys.exit(main())

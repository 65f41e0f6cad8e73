"""Contact-rich scenes and the DM Control Suite ports against MJX on a GPU, side by side in one
process (issues 56 and 48: "at least MJX's steps/s at equal fidelity ... >= 3x on a GPU at
B = 8192"; "steps/s >= MJX's on both").

    python benchmarks/contact_gpu.py --json /tmp/contact_gpu.json        # on the GPU machine
    python benchmarks/contact_gpu.py --from-json benchmarks/gpu_runs/18_contact_h200.json

Two parts (``--parts``), float32, every function ``jax.jit(jax.vmap(...))`` on device-resident
states:

* ``scenes``: the MJCF scenes of ``benchmarks/mjx_contact.py`` (dm_control's self-colliding
  humanoid falling limp, jaxdyn's arm + cube ``push_cube``, quad12 standing on position servos
  with a trunk box, thigh capsules and foot spheres), the same file in both engines: jaxdyn's
  ``sim.step`` with the file's ``sim_config`` (``Constraint``: ``Constraint()``, the file's
  default, MuJoCo's contact model solved by Newton; the humanoid's ``capped``: the hard
  ``Constraint(soft=False, max_contacts=mjx_contact.CAPS[...])``; ``Compliant``
  reported apart) and ``mjx.step`` with the file's solver and integrator, ``--T`` steps in a
  ``lax.scan`` per call (the final state kept). Sanity: after ``--sanity-steps`` steps at the
  first batch size, the height of a body and the touching contacts in both engines.
* ``suite``: ``benchmarks/suite_step.py``'s tasks (walker_walk, hopper_hop, cheetah_run,
  cartpole_balance): one control step of jaxdyn's environment (``env.step``: ``n_frames``
  simulator steps, observation and reward) against ``n_frames`` ``mjx.step`` in a ``lax.scan``
  on the same file (MJX: physics alone), with the file's solver and with Playground's cut one.

Timing: compile = wall-clock of ``lower`` + ``compile`` of the first call (``--compile-workers
N`` > 0 first compiles every function in ``N`` processes at once, sharing JAX's persistent
compilation cache, and reports their compile times; the timing process starts when they have
all stopped, and reads the cache);
then one warm-up call and rounds of calls (state fed back), the median over ``--rounds``
rounds of the wall-clock per call, each round ending in ``block_until_ready``. Every row checks
that its final state is finite. Results go to ``--json`` after every cell; ``--from-json``
renders the section ``## Contact on a GPU`` of ``benchmarks/RESULTS.md`` (only that section).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

TITLE = "## Contact on a GPU"
SCENES = ("push_cube", "quadruped", "humanoid")
SUITE = ("walker", "hopper", "cheetah", "cartpole")


def cells(parts, batches, uncapped_max, tasks=None):
    """Every ``(part, task, engine, B)`` to measure, in order (``tasks``: only these)."""
    out = []
    if "scenes" in parts:
        for s in SCENES:
            for B in batches:
                engines = ["jaxdyn Constraint", "jaxdyn Compliant", "MJX"]
                if s == "humanoid":
                    engines = ["jaxdyn Constraint capped"] + engines
                    if B > uncapped_max:  # 277 slots: a 831-row Delassus matrix per env
                        engines.remove("jaxdyn Constraint")
                out += [("scenes", s, e, B) for e in engines]
    if "suite" in parts:
        for s in SUITE:
            for B in batches:
                out += [("suite", s, e, B) for e in ("jaxdyn", "MJX", "MJX (Playground's solver)")]
    out.sort(key=lambda c: c[1] == "humanoid")  # the heaviest last (a run cut short keeps the rest)
    return [c for c in out if tasks is None or c[1] in tasks]


class Cache:
    """The scenes' and environments' built objects, shared by the cells of one process."""

    def __init__(self):
        self.scene, self.env = {}, {}

    def get_scene(self, name):
        import mjx_contact

        if name not in self.scene:
            self.scene[name] = mjx_contact.Scene(name)
        return self.scene[name]

    def get_env(self, name):
        import suite_step

        if name not in self.env:
            self.env[name] = suite_step.build(name)
        return self.env[name]


def build_cell(cache, cell, T):
    """``(fn, args, finite)``: the jitted function of one cell, its arguments (the state
    first; ``fn`` returns the next state) and a check of an output."""
    import jax
    import jax.numpy as jnp

    part, name, engine, B = cell
    if part == "scenes":
        import mjx_contact as mc

        sc = cache.get_scene(name)
        qpos = mc.initial_qpos(sc.m, sc.m.qpos0, B, name)
        _, roll, prepare = mc.ENGINES[engine](sc, T)
        if engine == "MJX":
            return roll, (sc.mjx_states(qpos),), lambda d: jnp.all(jnp.isfinite(d.qpos))
        return roll, (prepare(sc.jaxdyn_states(qpos)),), lambda s: jnp.all(jnp.isfinite(s.q))
    import suite_step as ss

    env = cache.get_env(name)
    states, act = ss.start(env, B)
    if engine == "jaxdyn":
        fn = jax.jit(jax.vmap(env.step))
        return fn, (states, act), lambda s: jnp.all(jnp.isfinite(s.obs))
    it = None if engine == "MJX" else ss.PLAYGROUND_ITERATIONS[name]
    fn, (dx, a) = ss.mjx_fn(env, states, act, it)
    return fn, (dx, a), lambda d: jnp.all(jnp.isfinite(d.qpos))


def steps_per_call(cell, T):
    return cell[3] * (T if cell[0] == "scenes" else 1)


def measure(cache, cell, T, rounds, min_time, compile_s=None):
    import jax

    fn, args, finite = build_cell(cache, cell, T)
    t = time.perf_counter()
    compiled = fn.lower(*args).compile()
    rec = dict(part=cell[0], task=cell[1], engine=cell[2], batch=cell[3])
    rec["compile_s"] = compile_s if compile_s is not None else time.perf_counter() - t
    rec["compile_this_process_s"] = time.perf_counter() - t
    state, rest = args[0], args[1:]
    state = jax.block_until_ready(compiled(state, *rest))  # warm-up
    per_call = []
    for _ in range(rounds):
        n, t0 = 0, time.perf_counter()
        while True:
            state = compiled(state, *rest)
            n += 1
            if n >= 2 and time.perf_counter() - t0 >= min_time:
                jax.block_until_ready(state)
                break
        per_call.append((time.perf_counter() - t0) / n)
    s = statistics.median(per_call)
    rec["s_per_call"] = s
    rec["steps_per_s"] = steps_per_call(cell, T) / s
    rec["finite"] = bool(finite(state))
    return rec, state


def sanity(cache, name, B, T, steps):
    """Height of the scene's body and touching contacts after ``steps`` steps, both engines."""
    import jax
    import mjx_contact as mc
    import numpy as np

    sc = cache.get_scene(name)
    qpos = mc.initial_qpos(sc.m, sc.m.qpos0, B, name)
    out = []
    engines = ["jaxdyn Constraint capped" if name in mc.CAPS else "jaxdyn Constraint", "MJX"]
    for e in engines:
        _, roll, prepare = mc.ENGINES[e](sc, T)
        s = prepare(sc.mjx_states(qpos) if e == "MJX" else sc.jaxdyn_states(qpos))
        for _ in range(max(1, steps // T)):
            s = roll(s)
        z, nc = sc.mjx_probe(s) if e == "MJX" else sc.jaxdyn_probe(jax.block_until_ready(s))
        z, nc = np.asarray(z), np.asarray(nc)
        out.append(
            dict(
                task=name,
                engine=e,
                body=sc.body,
                batch=B,
                steps=steps,
                z_mean=float(z.mean()),
                z_min=float(z.min()),
                z_max=float(z.max()),
                contacts=float(nc.mean()),
                finite=bool(np.all(np.isfinite(z))),
            )
        )
    return out


def _meta():
    import jax

    dev = jax.devices()[0]
    try:
        import mujoco

        mj = mujoco.__version__
    except ImportError:
        mj = "not installed"
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _env import git_commit  # JAXDYN_GIT_REV on a copy of the tree without .git

    return dict(
        device=f"{dev.platform}: {dev.device_kind}",
        host=f"{platform.machine()}, {os.cpu_count()} cores",
        jax=jax.__version__,
        mujoco=mj,
        git=git_commit(),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )


def compile_worker(todo, T, out):
    """Compile each cell of ``todo`` (JAX's persistent cache keeps the executables) and write
    ``{cell: compile seconds}`` to ``out``."""
    cache, res = Cache(), {}
    for cell in todo:
        try:
            fn, args, _ = build_cell(cache, cell, T)
            t = time.perf_counter()
            fn.lower(*args).compile()
            res["|".join(map(str, cell))] = time.perf_counter() - t
        except Exception as e:  # noqa: BLE001 - the timing process reports it
            res["|".join(map(str, cell))] = f"error: {str(e).splitlines()[0][:200]}"
        Path(out).write_text(json.dumps(res))


class Compilers:
    """``workers`` processes compiling the cells (round robin) into JAX's persistent cache; the
    timing process starts once they have all stopped."""

    def __init__(self, todo, T, workers, tmp):
        self.procs, self.outs = [], []
        Path(tmp).mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
        for w in range(workers):
            part = todo[w::workers]
            if not part:
                continue
            out = Path(tmp) / f"compile_{w}.json"
            out.unlink(missing_ok=True)
            spec = Path(tmp) / f"cells_{w}.json"
            spec.write_text(json.dumps(part))
            args = [sys.executable, __file__, "--worker", str(spec), str(out), "--T", str(T)]
            self.procs.append(subprocess.Popen(args, env=env))
            self.outs.append(out)

    def done(self) -> dict:
        res = {}
        for o in self.outs:
            try:
                res.update(json.loads(o.read_text()))
            except (OSError, ValueError):  # not written yet, or being written
                pass
        return res

    def wait_for(self, key):
        """The compile seconds (or error) of ``key``, once every worker has stopped: XLA's
        autotuning runs kernels on the GPU while it compiles, which would slow the timed calls
        (a first run that timed while the workers compiled measured a quadruped's B = 1024
        step slower than its B = 8192 one)."""
        for p in self.procs:
            p.wait()
        return self.done().get(key)


def run(args):
    import jax

    # jaxdyn's persistent compilation cache is on by default (jaxdyn.config); MJX's programs
    # go through the same JAX cache once jaxdyn is imported
    import jaxdyn  # noqa: F401

    batches = [int(b) for b in args.batches.split(",")]
    tasks = args.tasks.split(",") if args.tasks else None
    todo = [tuple(c) for c in cells(args.parts.split(","), batches, args.uncapped_max, tasks)]
    res = dict(_meta(), T=args.T, rows=[], sanity=[], compile_workers=args.compile_workers)
    t_start = time.perf_counter()
    compilers = Compilers(todo, args.T, args.compile_workers, args.tmp)
    cache = Cache()
    for cell in todo:
        key = "|".join(map(str, cell))
        c = compilers.wait_for(key) if compilers.procs else None
        try:
            rec, _ = measure(
                cache, cell, args.T, args.rounds, args.min_time, c if isinstance(c, float) else None
            )
        except Exception as e:  # noqa: BLE001 - reported in the table
            rec = dict(
                part=cell[0],
                task=cell[1],
                engine=cell[2],
                batch=cell[3],
                error=str(e).splitlines()[0][:300],
            )
        res["rows"].append(rec)
        print(json.dumps(rec), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=1))
        jax.clear_caches()  # the executables are freed (device memory), the disk cache stays
    if "scenes" in args.parts and args.sanity_steps > 0:
        for s in SCENES:
            if tasks is not None and s not in tasks:
                continue
            try:
                res["sanity"] += sanity(cache, s, args.sanity_batch, args.T, args.sanity_steps)
            except Exception as e:  # noqa: BLE001
                res["sanity"].append(dict(task=s, error=str(e).splitlines()[0][:300]))
            print(json.dumps(res["sanity"][-2:]), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(res, indent=1))
    res["total_s"] = time.perf_counter() - t_start
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return res


def render(res) -> str:
    T = res["T"]
    par = (
        f"each function compiled by one of {res['compile_workers']} processes compiling at "
        "once on the host into JAX's persistent cache (its wall-clock there reported); the "
        "timing process read them from the cache"
        if res.get("compile_workers")
        else "compiled in the timing process"
    )
    out = [
        TITLE,
        "",
        f"Run {res['date']} on **{res['device']}** (host {res['host']}); jax {res['jax']}, "
        f"mujoco / MJX {res['mujoco']}; jaxdyn git {res['git']}; float32; "
        f"`python benchmarks/contact_gpu.py` (see its docstring); total "
        f"{res.get('total_s', 0) / 60:.1f} min.",
        "",
        'Scenes: the MJCF files of the CPU section "Contact scenes against MJX" in both '
        f"engines, zero controls, {T} steps per call (`lax.scan` inside "
        "`jax.jit(jax.vmap(...))`); jaxdyn `Constraint` (`Constraint()`, the file's default: "
        "MuJoCo's contact model by Newton's solve; the humanoid's `capped`: the hard "
        "`Constraint(soft=False, max_contacts=80)`, its solve over "
        "the 80 closest of 277 contact slots), `Compliant` (spring-damper, apart), MJX with "
        "the file's solver and integrator. Suite: one control step of jaxdyn's environment "
        "(`env.step`: `n_frames` simulator steps, observation, reward) against `n_frames` "
        "`mjx.step` (physics alone) on the same file, with the file's solver and with "
        "Playground's `iterations` / `ls_iterations`. Steps/s count environment (control) "
        "steps; vs MJX: jaxdyn's steps/s over MJX's with the file's solver at the same B (> 1: "
        "jaxdyn faster); vs MJX cut: over MJX's with Playground's solver (the suite). "
        f"Compile: {par}. Finite: the state after the timed calls.",
        "",
        "| part | task | engine | B | steps/s | us per call | vs MJX | vs MJX cut | compile s "
        "| finite |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    rows = res["rows"]
    ok = [r for r in rows if "steps_per_s" in r]
    mjx = {(r["task"], r["batch"]): r for r in ok if r["engine"] == "MJX"}
    cut = {(r["task"], r["batch"]): r for r in ok if r["engine"].startswith("MJX (")}
    for r in rows:
        head = f"| {r['part']} | {r['task']} | {r['engine']} | {r['batch']} |"
        if "error" in r:
            out.append(f"{head} {r['error'][:120]} | | | | | |")
            continue

        def ratio(ref, r=r):
            m = ref.get((r["task"], r["batch"]))
            if r["engine"].startswith("MJX") or m is None:
                return ""
            return f"{r['steps_per_s'] / m['steps_per_s']:.2f}x"

        out.append(
            f"{head} {r['steps_per_s']:,.0f} | {r['s_per_call'] * 1e6:,.0f} | {ratio(mjx)} | "
            f"{ratio(cut)} | "
            f"{r['compile_s']:.1f} | {'yes' if r['finite'] else 'NO'} |"
        )
    for note in res.get("notes", []):
        out += ["", note]
    if res.get("sanity"):
        s0 = next((s for s in res["sanity"] if "batch" in s), None)
        if s0 is not None:
            out += [
                "",
                f"Sanity (B = {s0['batch']}, after {s0['steps']} steps from the same states): "
                "the height of a body (m; mean, min - max over the batch) and the contacts "
                "touching (closer than 1 mm), mean per environment.",
                "",
                "| scene | engine | body | height (m) | min - max | contacts |",
                "|---|---|---|---|---|---|",
            ]
        for s in res["sanity"]:
            if "error" in s:
                out.append(f"| {s['task']} | {s['error'][:120]} | | | | |")
            else:
                z = f"{s['z_mean']:.4f}" if s["finite"] else "diverged"
                out.append(
                    f"| {s['task']} | {s['engine']} | {s['body']} | {z} | "
                    f"{s['z_min']:.4f} - {s['z_max']:.4f} | {s['contacts']:.1f} |"
                )
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--parts", default="scenes,suite")
    p.add_argument("--tasks", default="", help="only these scenes / environments (',')")
    p.add_argument("--batches", default="1024,8192")
    p.add_argument("--T", type=int, default=10, help="simulator steps per call (scenes)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min-time", type=float, default=0.3, help="seconds per round (at least)")
    p.add_argument(
        "--uncapped-max",
        type=int,
        default=1024,
        help="largest B of the humanoid's uncapped Constraint",
    )
    p.add_argument("--sanity-steps", type=int, default=200)
    p.add_argument("--sanity-batch", type=int, default=256)
    p.add_argument("--compile-workers", type=int, default=0, help="0: compile in-process")
    p.add_argument("--tmp", default="/tmp")
    p.add_argument("--json", help="write the raw results here (after every cell)")
    p.add_argument("--from-json", help="render this result file instead of running")
    p.add_argument("--out", default=str(HERE / "RESULTS.md"))
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        todo = [tuple(c) for c in json.loads(Path(a.worker[0]).read_text())]
        import jaxdyn  # noqa: F401 - its persistent cache

        compile_worker(todo, a.T, a.worker[1])
        return
    if a.from_json:
        from _env import write_section

        text = render(json.loads(Path(a.from_json).read_text()))
        write_section(a.out, text)
        print(text)
        return
    res = run(a)
    print(render(res))


if __name__ == "__main__":
    main()

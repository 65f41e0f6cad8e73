"""jaxdyn.sim and MJX stepping the same quadruped on a GPU, side by side in one process.

    python benchmarks/sim_gpu.py --json /tmp/sim_gpu.json          # on the GPU machine
    python benchmarks/sim_gpu.py --from-json /tmp/sim_gpu.json     # write the RESULTS section

    python benchmarks/sim_gpu.py --robot solo12 --json /tmp/solo12.json   # example-robot-data's

The robot, contact and controller are those of ``benchmarks/sim.py`` (``--robot quad12``, the
bundled quadruped: a floating base, 12 PD-servoed joints (kp = 20, kd = 0.5), 4 foot spheres on
a ground plane, dt = 2 ms, mu = 1; ``--robot solo12``: Solo-12 from example-robot-data (only its
URDF is read: ``EXAMPLE_ROBOT_DATA_DIR`` may point at a folder holding
``solo_description/robots/solo12.urdf``), the same feet and standing height, kp = 5, kd = 0.1),
float32: jaxdyn's ``jax.jit(jax.vmap(step))`` for compliant contact with
the implicit and the semi-implicit Euler integrators and for constraint contact (100 APGD
iterations), the Brax-contract environment ``jaxdyn.envs.Quadruped`` (``env.step``), and
MJX's ``jax.jit(jax.vmap(mjx.step))`` on the same URDF compiled by MuJoCo (same spheres,
gains and time step, ``implicitfast``, default Newton solver). Each cell steps a batch of
standing states (joints perturbed by 0.05 rad) on the device; time per batched step is the
best of 5 repeats of at least 0.2 s, each ending in ``block_until_ready``; compile time (the
first call) separately. The JSON is written after every cell, so a run cut short keeps what
it measured.

Only this file's section of ``benchmarks/RESULTS.md`` ("## Simulation on a GPU") is replaced.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import sim as S  # noqa: E402  (benchmarks/sim.py: the robot, cases and states)

from _env import timed, write_section  # noqa: E402

CASES = ("compliant, implicit", "compliant, euler", "constraint, euler (100 APGD)")
BATCHES = (1024, 8192, 65536)
TITLE = "## Simulation on a GPU"


def _save(path, res):
    if path:
        Path(path).write_text(json.dumps(res, indent=1))


def _time(rec, f, args, finite):
    """Compile (first call), time ``f(*args)`` and check ``finite(output)``, into ``rec``; an
    exception is recorded as the cell's error."""
    import jax

    try:
        t0 = time.perf_counter()
        out = jax.block_until_ready(f(*args))
        rec["compile_s"] = time.perf_counter() - t0
        rec["step_s"] = timed(f, args)
        rec["finite"] = bool(finite(out))
    except Exception as e:  # noqa: BLE001 - reported in the table
        rec["error"] = str(e).split("\n")[0][:200]
    return rec


def run(batches, cases, mjx_on, json_out=None, dtype="float32", env_on=True, robot="quad12"):
    import jax
    import jax.numpy as jnp

    dev = jax.devices()[0]
    res = dict(
        device=f"{dev.platform}: {getattr(dev, 'device_kind', '?')}",
        host=platform.processor() or platform.machine(),
        jax=jax.__version__,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        dtype=dtype,
        rows=[],
    )
    m, cfgs = S.jaxdyn_cases(dtype, robot)
    for B in batches:
        for name in cases:
            cfg = cfgs[name]
            st, ref = S.batch_states(m, B, dtype, height=S.ROBOTS[robot][2])
            U = jnp.broadcast_to(ref, (B, len(ref)))
            f = jax.jit(jax.vmap(lambda s, u, cfg=cfg: S.sim.step(m, s, u, cfg)))
            rec = dict(engine="jaxdyn", case=name, batch=B, robot=robot)
            _time(rec, f, (st, U), lambda out: jnp.all(jnp.isfinite(out.q)))
            res["rows"].append(rec)
            _save(json_out, res)
            print(rec, flush=True)
        if env_on:
            res["rows"].append(_env_cell(B, dtype, robot))
            _save(json_out, res)
            print(res["rows"][-1], flush=True)
        if mjx_on:
            res["rows"].append(_mjx_cell(B, dtype, robot))
            _save(json_out, res)
            print(res["rows"][-1], flush=True)
    return res


def _env_cell(B, dtype, robot):
    """``jax.jit(jax.vmap(env.step))`` of the Brax-contract quadruped environment
    (:class:`jaxdyn.envs.Quadruped`: observation, reward, termination; one env step is
    ``n_frames = 4`` simulator steps of 5 ms) on a batch of reset states, zero actions."""
    import jax
    import jax.numpy as jnp

    from jaxdyn import envs

    env = envs.Quadruped(robot)
    rec = dict(
        engine="jaxdyn env", case="Quadruped (4 sim steps per env step)", batch=B, robot=robot
    )
    st = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), B))
    act = jnp.zeros((B, env.action_size), dtype)
    return _time(
        rec, jax.jit(jax.vmap(env.step)), (st, act), lambda o: jnp.all(jnp.isfinite(o.obs))
    )


def _mjx_cell(B, dtype, robot):
    import jax
    import jax.numpy as jnp

    rec = dict(engine="MJX", case="implicitfast, Newton solver", batch=B, robot=robot)
    try:
        import mujoco
        from mujoco import mjx

        mx, batch = S.mjx_batch(B, dtype, robot)
        rec["mujoco"] = mujoco.__version__
    except Exception as e:  # noqa: BLE001 - reported in the table
        rec["error"] = str(e).split("\n")[0][:200]
        return rec
    f = jax.jit(jax.vmap(lambda d: mjx.step(mx, d)))
    return _time(rec, f, (batch,), lambda out: jnp.all(jnp.isfinite(out.qpos)))


def render(res) -> str:
    rows = [dict(r, robot=r.get("robot", "quad12")) for r in res["rows"]]  # early runs: quad12
    mjx = {(r["robot"], r["batch"]): r for r in rows if r["engine"] == "MJX" and "step_s" in r}
    mj_version = next((r["mujoco"] for r in mjx.values() if "mujoco" in r), "?")
    dates = ", ".join(sorted({r.get("date", res["date"]) for r in rows}))
    out = [
        TITLE,
        "",
        f"Runs {dates} on **{res['device']}** (host {res['host']}); jax {res['jax']}, "
        f"mujoco / MJX {mj_version}; {res['dtype']}; `python benchmarks/sim_gpu.py` (see its "
        "docstring). Two quadrupeds, each with 4 foot spheres on a plane and dt = 2 ms: solo12 "
        "(Solo-12 from example-robot-data, the robot the issue's goal names; PD kp = 5, kd = 0.1, "
        "Solo's own servo range) and quad12 (the bundled 12-joint quadruped of the CPU table "
        "above; kp = 20, kd = 0.5). `jax.jit(jax.vmap(step))` over a batch of standing states "
        "kept on the device; MJX steps the same URDF compiled by MuJoCo (same spheres, gains and "
        "time step, `implicitfast`, Newton). Ratio: jaxdyn's steps/s over MJX's on the same "
        "robot and batch (> 1: jaxdyn faster). `jaxdyn env` rows: "
        "`jax.jit(jax.vmap(env.step))` of `jaxdyn.envs.Quadruped` (Brax's contract: "
        "observation, reward, termination; one env step = 4 simulator steps of 5 ms, "
        "compliant contact, implicit integrator), zero actions from reset states; their "
        "steps/s are env steps.",
        "",
        "| robot | engine | contact, integrator | batch | us per batched step | steps/s | vs MJX "
        "| compile s |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    order = {"MJX": 0, "jaxdyn": 1, "jaxdyn env": 2}
    robot_order = {"solo12": 0, "quad12": 1}
    key = lambda r: (robot_order.get(r["robot"], 2), r["batch"], order.get(r["engine"], 3))  # noqa: E731
    for r in sorted(rows, key=key):
        head = f"| {r['robot']} | {r['engine']} | {r['case']}"
        if "step_s" not in r:
            out.append(f"{head}: {r.get('error', '?')} | {r['batch']} | | | | |")
            continue
        sps = r["batch"] / r["step_s"]
        ratio, ref = "", mjx.get((r["robot"], r["batch"]))
        if r["engine"] == "jaxdyn" and ref:
            ratio = f"{sps / (r['batch'] / ref['step_s']):.1f}x"
        flag = "" if r.get("finite", True) else " (non-finite!)"
        out.append(
            f"{head}{flag} | {r['batch']} | {r['step_s'] * 1e6:,.0f} "
            f"| {sps:,.0f} | {ratio} | {r['compile_s']:.1f} |"
        )
    goal = next(
        (r for r in rows if (r["robot"], r["engine"], r["case"], r["batch"])
         == ("solo12", "jaxdyn", "compliant, implicit", 8192) and "step_s" in r),
        None,
    )  # fmt: skip
    if goal and ("solo12", 8192) in mjx:
        x = mjx[("solo12", 8192)]["step_s"] / goal["step_s"]
        out += ["", f"Goal (>= 2x MJX's steps/s at batch 8192, float32, solo12, compliant "
                f"contact): {x:.1f}x with the implicit integrator."]  # fmt: skip
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--robot", default="quad12", choices=("quad12", "solo12"))
    p.add_argument("--batches", default=",".join(map(str, BATCHES)))
    p.add_argument("--cases", default=";".join(CASES), help="jaxdyn cases, ';'-separated")
    p.add_argument("--skip-mjx", action="store_true")
    p.add_argument("--skip-env", action="store_true", help="no environment rows")
    p.add_argument("--json", help="write the raw results here (after every cell)")
    p.add_argument(
        "--from-json", nargs="+", help="render these result files (rows merged) instead of running"
    )
    p.add_argument("--out", default=str(HERE / "RESULTS.md"))
    a = p.parse_args(argv)
    if a.from_json:
        files = [json.loads(Path(f).read_text()) for f in a.from_json]
        rows = [dict(r, date=r.get("date", f["date"])) for f in files for r in f["rows"]]
        res = dict(files[0], rows=rows)
    else:
        res = run(
            [int(b) for b in a.batches.split(",")],
            [c.strip() for c in a.cases.split(";") if c.strip()],
            not a.skip_mjx,
            a.json,
            env_on=not a.skip_env,
            robot=a.robot,
        )
    text = render(res)
    print(text)
    if a.from_json:
        write_section(a.out, text)


if __name__ == "__main__":
    main()

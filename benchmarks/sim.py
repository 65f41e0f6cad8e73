"""Simulation throughput (jaxdyn.sim vs MJX on the same robot) and the memory of reverse mode
through long rollouts.

Usage: ``python benchmarks/sim.py [--batches 1024,4096] [--dtype float32] [--skip-mjx]
[--out benchmarks/RESULTS.md]``

1. Steps per second of ``jax.jit(jax.vmap(step))`` on the bundled quad12 quadruped (floating
   base, 12 PD-servoed joints, 4 foot spheres on a ground plane), dt = 2 ms, for each contact
   model / integrator, against MJX (``mujoco.mjx``) stepping the same robot: the same URDF
   compiled by MuJoCo, the same foot spheres, floor, PD gains (``position`` actuators with
   ``kv``) and time step, ``implicitfast``. Compile times are reported separately.
2. Reverse mode through 1000 steps (quad12, compliant contact, implicit integrator):
   ``jax.grad`` of a loss on the final state with ``checkpoint=None | "step" | "sqrt"``: XLA's
   temporary memory for the compiled gradient, its run time and compile time.

Everything runs single-threaded (benchmarks/_env.py), in one process, and writes the
``## Simulation`` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import _env

_env.single_threaded()

import argparse
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxdyn
from jaxdyn import robots, sim

HERE = Path(__file__).resolve().parent
FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")
DT, KP, KD, RADIUS, MU = 2e-3, 20.0, 0.5, 0.02, 1.0
STAND = 0.335  # base height with straight legs and the feet on the ground (spheres touching)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def timed(fn, args, repeats=5, min_time=0.2):
    """Best time per call of a compiled ``fn(*args)`` (each repeat runs >= ``min_time``)."""
    jax.block_until_ready(fn(*args))
    best = np.inf
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            jax.block_until_ready(fn(*args))
            n += 1
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        best = min(best, dt / n)
    return best


def jaxdyn_cases(dtype):
    m = robots.load("quad12").astype(dtype)
    cs = sim.contact_set(m, [sim.Sphere(f, RADIUS) for f in FEET])
    pd = sim.PD(KP, KD)
    return m, {
        "compliant, euler": sim.SimConfig(
            dt=DT, integrator="euler", contact=sim.Compliant(friction=MU), contacts=cs, actuator=pd
        ),
        "compliant, implicit": sim.SimConfig(
            dt=DT,
            integrator="implicit",
            contact=sim.Compliant(friction=MU),
            contacts=cs,
            actuator=pd,
        ),
        "constraint, euler (100 APGD)": sim.SimConfig(
            dt=DT,
            integrator="euler",
            contact=sim.Constraint(friction=MU),
            contacts=cs,
            actuator=pd,
        ),
    }


def batch_states(m, B, dtype, key=0):
    q0 = jaxdyn.neutral_configuration(m, dtype=dtype).at[2].set(STAND)
    dq = 0.05 * jax.random.normal(jax.random.PRNGKey(key), (B, m.nv), dtype)
    q = jax.vmap(lambda d: jaxdyn.integrate(m, q0, d))(dq)
    return sim.State(q, jnp.zeros((B, m.nv), dtype), jnp.zeros(B, dtype)), q0[7:]


def bench_jaxdyn(batches, dtype):
    m, cases = jaxdyn_cases(dtype)
    rows = []
    for name, cfg in cases.items():
        for B in batches:
            S, ref = batch_states(m, B, dtype)
            U = jnp.broadcast_to(ref, (B, 12))
            f = jax.jit(jax.vmap(lambda s, u, cfg=cfg: sim.step(m, s, u, cfg)))
            t0 = time.perf_counter()
            c = f.lower(S, U).compile()
            tc = time.perf_counter() - t0
            t = timed(c, (S, U))
            out = c(S, U)
            ok = bool(jnp.all(jnp.isfinite(out.q)))
            rows.append(("jaxdyn", name, B, t / B * 1e6, B / t, tc, ok))
            print(f"jaxdyn {name:30s} B={B:6d} {t / B * 1e6:8.3f} us/step  compile {tc:5.1f} s")
    return rows


def mjx_model():
    """quad12 for MuJoCo: its URDF through MuJoCo's compiler (static links kept as bodies), a
    free joint, a floor, foot spheres and position servos with the same gains."""
    import mujoco

    path, _ = robots.resolve("quad12")
    xml = Path(path).read_text()
    xml = xml.replace(
        '<robot name="quad12">',
        '<robot name="quad12"><mujoco><compiler fusestatic="false" discardvisual="true"/></mujoco>',
    )
    spec = mujoco.MjSpec.from_string(xml)
    spec.option.timestep = DT
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    base = spec.body("base_link")
    base.add_freejoint()
    spec.worldbody.add_geom(
        type=mujoco.mjtGeom.mjGEOM_PLANE, size=[10, 10, 0.1], friction=[MU, 0.005, 0.0001]
    )
    for f in FEET:
        spec.body(f).add_geom(
            type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[RADIUS, 0, 0], friction=[MU, 0.005, 0.0001]
        )
    for j in spec.joints:
        if j.type == mujoco.mjtJoint.mjJNT_HINGE:
            spec.add_actuator(
                trntype=mujoco.mjtTrn.mjTRN_JOINT,
                target=j.name,
                gaintype=mujoco.mjtGain.mjGAIN_FIXED,
                gainprm=[KP] + [0] * 9,
                biastype=mujoco.mjtBias.mjBIAS_AFFINE,
                biasprm=[0, -KP, -KD] + [0] * 7,
            )
    return spec.compile()


def bench_mjx(batches, dtype):
    import mujoco
    from mujoco import mjx

    mm = mjx_model()
    mx = mjx.put_model(mm)
    rows = []
    for B in batches:
        d = mujoco.MjData(mm)
        d.qpos[2] = STAND
        d.qpos[3:7] = [1, 0, 0, 0]
        dx = mjx.put_data(mm, d)
        rng = jax.random.normal(jax.random.PRNGKey(0), (B, mm.nv), dtype)
        qpos = jnp.broadcast_to(jnp.asarray(d.qpos, dtype), (B, mm.nq))
        qpos = qpos.at[:, 7:].add(0.05 * rng[:, 6:])
        batch = jax.vmap(lambda q: dx.replace(qpos=q, ctrl=jnp.zeros(mm.nu, dtype)))(qpos)
        f = jax.jit(jax.vmap(lambda d: mjx.step(mx, d)))
        t0 = time.perf_counter()
        c = f.lower(batch).compile()
        tc = time.perf_counter() - t0
        t = timed(c, (batch,))
        ok = bool(jnp.all(jnp.isfinite(c(batch).qpos)))
        rows.append(("MJX", "implicitfast, Newton solver", B, t / B * 1e6, B / t, tc, ok))
        print(f"MJX    B={B:6d} {t / B * 1e6:8.3f} us/step  compile {tc:5.1f} s")
    return rows


def bench_checkpoint(dtype, T=1000):
    m, cases = jaxdyn_cases(dtype)
    cfg = cases["compliant, implicit"]
    S, ref = batch_states(m, 1, dtype)
    s0 = jax.tree_util.tree_map(lambda x: x[0], S)
    rows = []
    for ck in (None, "step", "sqrt"):

        def loss(offset, ck=ck):
            tr = sim.rollout(
                m, s0, policy=lambda s: ref + offset, n_steps=T, cfg=cfg, checkpoint=ck
            )
            return jnp.sum(tr.q[-1] ** 2)

        g = jax.jit(jax.grad(loss))
        x = jnp.zeros(12, dtype)
        t0 = time.perf_counter()
        c = g.lower(x).compile()
        tc = time.perf_counter() - t0
        mem = c.memory_analysis()
        temp = getattr(mem, "temp_size_in_bytes", float("nan")) / 2**20
        t = timed(c, (x,), repeats=3, min_time=0.0)
        rows.append((str(ck), temp, t, tc))
        print(f"checkpoint={ck!s:5s} temp {temp:8.1f} MiB  grad {t:6.2f} s  compile {tc:5.1f} s")
    return rows


def write_section(path: Path, heading: str, body: str) -> None:
    """Replace the section ``heading`` (up to the next ``## `` heading) or append it."""
    text = path.read_text() if path.exists() else "# jaxdyn benchmark results\n"
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.strip() == heading), None)
    new = [heading, ""] + body.rstrip().splitlines() + [""]
    if start is None:
        out = lines + ([""] if lines and lines[-1].strip() else []) + new
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        out = lines[:start] + new + lines[end:]
    path.write_text("\n".join(out).rstrip() + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1024,4096")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--skip-mjx", action="store_true")
    ap.add_argument("--skip-checkpoint", action="store_true")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    a = ap.parse_args(argv)
    if a.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    dtype = jnp.dtype(a.dtype)
    batches = [int(b) for b in a.batches.split(",")]
    rows = bench_jaxdyn(batches, dtype)
    if not a.skip_mjx:
        rows += bench_mjx(batches, dtype)
    ck = [] if a.skip_checkpoint else bench_checkpoint(jnp.dtype(jnp.float32))
    mjx_best = {r[2]: r[4] for r in rows if r[0] == "MJX"}
    body = [
        f"Machine: {cpu_name()}, {platform.machine()}; jax {jax.__version__}; single-threaded "
        f"XLA (`{_env.SINGLE_THREAD_FLAGS}`); {a.dtype}; run {time.strftime('%Y-%m-%d %H:%M')} "
        "UTC by `python benchmarks/sim.py`.",
        "",
        "quad12 (floating base, 12 PD joints, kp = 20, kd = 0.5), 4 foot spheres on a plane, "
        "dt = 2 ms, `jax.jit(jax.vmap(step))`; MJX steps the same robot (its URDF compiled by "
        "MuJoCo, same spheres, gains and time step, `implicitfast`, default Newton solver). "
        "Ratio: jaxdyn steps/s over MJX's at the same batch.",
        "",
        "| engine | contact, integrator | batch | us/step | steps/s | vs MJX | compile s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for eng, name, B, us, sps, tc, ok in rows:
        ratio = f"{sps / mjx_best[B]:.2f}x" if eng == "jaxdyn" and B in mjx_best else ""
        flag = "" if ok else " (non-finite!)"
        body.append(f"| {eng} | {name}{flag} | {B} | {us:.2f} | {sps:,.0f} | {ratio} | {tc:.1f} |")
    if ck:
        body += [
            "",
            "Reverse mode through 1000 steps (quad12, compliant contact, implicit integrator, "
            "float32): `jax.grad` of a loss on the final state with respect to 12 PD offsets.",
            "",
            "| checkpoint | XLA temp memory (MiB) | gradient time (s) | compile (s) |",
            "|---|---:|---:|---:|",
        ]
        for name, temp, t, tc in ck:
            body.append(f"| {name} | {temp:.1f} | {t:.2f} | {tc:.1f} |")
    write_section(Path(a.out), "## Simulation", "\n".join(body))
    print("\n".join(body))


if __name__ == "__main__":
    main()

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

from _env import cpu_name, timed  # noqa: E402

HERE = Path(__file__).resolve().parent
FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")
DT, KP, KD, RADIUS, MU = 2e-3, 20.0, 0.5, 0.02, 1.0
STAND = 0.34  # base height of quad12 with straight legs and the foot spheres on the ground


SOLE = [(x, y, 0.0) for x in (-0.1, 0.1) for y in (-0.05, 0.05)]
ROBOTS = {
    # name: (contact primitives, PD gains, standing base height)
    "quad12": (lambda: [sim.Sphere(f, RADIUS) for f in FEET], (KP, KD), STAND),
    "talos_full": (
        lambda: [sim.Point(s, c) for s in ("left_sole_link", "right_sole_link") for c in SOLE],
        (500.0, 5.0),
        1.083,
    ),
}


def jaxdyn_cases(dtype, robot="quad12"):
    m = robots.load(robot, floating_base=True).astype(dtype)
    geoms, (kp, kd), _ = ROBOTS[robot]
    cs = sim.contact_set(m, geoms())
    pd = sim.PD(kp, kd)
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


def batch_states(m, B, dtype, key=0, height=STAND, clearance=0.01):
    """``B`` standing states: the joints perturbed by 0.05 rad (normal), the base upright and
    ``clearance`` above its standing height. (Perturbing the base too started some samples
    with the feet centimetres inside the ground: the stiff contact then launched them, and the
    explicit steps diverged within 150 steps.)"""
    q0 = jaxdyn.neutral_configuration(m, dtype=dtype).at[2].set(height + clearance)
    dq = 0.05 * jax.random.normal(jax.random.PRNGKey(key), (B, m.nv), dtype)
    dq = dq.at[:, :6].set(0.0)
    q = jax.vmap(lambda d: jaxdyn.integrate(m, q0, d))(dq)
    return sim.State(q, jnp.zeros((B, m.nv), dtype), jnp.zeros(B, dtype)), q0[7:]


def bench_jaxdyn(batches, dtype, robot="quad12", cases=None):
    m, cfgs = jaxdyn_cases(dtype, robot)
    rows = []
    for name, cfg in cfgs.items():
        if cases and name not in cases:
            continue
        for B in batches:
            S, ref = batch_states(m, B, dtype, height=ROBOTS[robot][2])
            U = jnp.broadcast_to(ref, (B, len(ref)))
            f = jax.jit(jax.vmap(lambda s, u, cfg=cfg: sim.step(m, s, u, cfg)))
            t0 = time.perf_counter()
            c = f.lower(S, U).compile()
            tc = time.perf_counter() - t0
            try:
                t = timed(c, (S, U))
            except jax.errors.JaxRuntimeError as e:  # a value check fired: record, go on
                msg = str(e).split("\n")[0][:120]
                rows.append((f"jaxdyn {robot}", name + " (value check fired)", B, *[np.nan] * 2))
                rows[-1] = (*rows[-1], tc, False)
                print(f"jaxdyn {robot} {name:30s} B={B:6d} FAILED: {msg}", flush=True)
                continue
            out = c(S, U)
            ok = bool(jnp.all(jnp.isfinite(out.q)))
            rows.append((f"jaxdyn {robot}", name, B, t / B * 1e6, B / t, tc, ok))
            print(
                f"jaxdyn {robot} {name:30s} B={B:6d} {t / B * 1e6:8.3f} us/step  "
                f"compile {tc:5.1f} s",
                flush=True,
            )
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


MJX_CHILD = """
import sys, json, time
sys.path.insert(0, {here!r})
import _env
_env.single_threaded()
import jax, jax.numpy as jnp
import sim as S
B, dtype = {B}, jnp.dtype({dtype!r})
if dtype == jnp.float64:
    jax.config.update("jax_enable_x64", True)
import mujoco
from mujoco import mjx
mm = S.mjx_model()
mx = mjx.put_model(mm)
d = mujoco.MjData(mm)
d.qpos[2] = S.STAND
d.qpos[3:7] = [1, 0, 0, 0]
dx = mjx.put_data(mm, d)
rng = jax.random.normal(jax.random.PRNGKey(0), (B, mm.nv), dtype)
qpos = jnp.broadcast_to(jnp.asarray(d.qpos, dtype), (B, mm.nq)).at[:, 7:].add(0.05 * rng[:, 6:])
batch = jax.vmap(lambda q: dx.replace(qpos=q, ctrl=jnp.zeros(mm.nu, dtype)))(qpos)
f = jax.jit(jax.vmap(lambda d: mjx.step(mx, d)))
t0 = time.perf_counter()
c = f.lower(batch).compile()
tc = time.perf_counter() - t0
t = S.timed(c, (batch,))
ok = bool(jnp.all(jnp.isfinite(c(batch).qpos)))
print(json.dumps(dict(t=t, tc=tc, ok=ok)))
"""


def bench_mjx(batches, dtype, timeout=900):
    """MJX in a child process per batch size: jaxlib 0.10's batched LAPACK kernels (MJX's
    Cholesky) can wedge XLA's CPU thread pool (seen at B = 4096); a wedged run is reported as
    such instead of hanging the benchmark."""
    import json
    import subprocess
    import sys

    rows = []
    for B in batches:
        code = MJX_CHILD.format(here=str(HERE), B=B, dtype=jnp.dtype(dtype).name)
        try:
            r = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
            )
            res = json.loads(r.stdout.strip().splitlines()[-1])
        except subprocess.TimeoutExpired:
            rows.append(
                (
                    "MJX",
                    "implicitfast, Newton solver: HUNG (jaxlib LAPACK)",
                    B,
                    *[np.nan] * 3,
                    False,
                )
            )
            print(f"MJX    B={B:6d} timed out after {timeout} s (wedged)")
            continue
        except (ValueError, IndexError):
            print(r.stderr[-2000:])
            raise
        t, tc = res["t"], res["tc"]
        rows.append(("MJX", "implicitfast, Newton solver", B, t / B * 1e6, B / t, tc, res["ok"]))
        print(f"MJX    B={B:6d} {t / B * 1e6:8.3f} us/step  compile {tc:5.1f} s")
    return rows


def bench_checkpoint(dtype, T=1000):
    m, cases = jaxdyn_cases(dtype, "quad12")
    cfg = cases["compliant, implicit"]
    S, ref = batch_states(m, 1, dtype)
    s0 = jax.tree_util.tree_map(lambda x: x[0], S)
    rows, ref_g = [], None
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
        grad = np.asarray(c(x))
        ref_g = grad if ref_g is None else ref_g  # the first row: checkpoint=None
        diff = float(np.max(np.abs(grad - ref_g)) / max(np.max(np.abs(ref_g)), 1e-30))
        if not np.all(np.isfinite(grad)):
            diff = float("nan")
        rows.append((str(ck), temp, t, tc, diff))
        print(
            f"checkpoint={ck!s:5s} temp {temp:8.1f} MiB  grad {t:6.2f} s  compile {tc:5.1f} s  "
            f"|g - g_None| / |g_None| = {diff:.1e}"
        )
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,64,1024,8192")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--skip-mjx", action="store_true")
    ap.add_argument("--mjx-batches", default="1,64,1024", help="MJX batch sizes (child processes)")
    ap.add_argument("--mjx-timeout", type=float, default=300, help="wedged after (s)")
    ap.add_argument("--skip-checkpoint", action="store_true")
    ap.add_argument(
        "--only-checkpoint", action="store_true", help="only the reverse-mode checkpoint table"
    )
    ap.add_argument("--skip-talos", action="store_true")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    a = ap.parse_args(argv)
    if a.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    dtype = jnp.dtype(a.dtype)
    batches = [int(b) for b in a.batches.split(",")]
    if a.only_checkpoint:
        write_checkpoint_section(a.out, bench_checkpoint(jnp.dtype(jnp.float32)))
        return
    rows = bench_jaxdyn(batches, dtype, "quad12")
    if not a.skip_mjx:
        rows += bench_mjx([int(b) for b in a.mjx_batches.split(",")], dtype, a.mjx_timeout)
    if not a.skip_talos:
        rows += bench_jaxdyn(
            [b for b in batches if b <= 1024], dtype, "talos_full", ("compliant, implicit",)
        )
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
        "talos_full (50 DoF; 8 sole-corner contact points, kp = 500, kd = 5): jaxdyn only.",
        "",
        "| engine | contact, integrator | batch | us/step | steps/s | vs MJX | compile s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for eng, name, B, us, sps, tc, ok in rows:
        quad = eng == "jaxdyn quad12"
        ratio = f"{sps / mjx_best[B]:.2f}x" if quad and np.isfinite(mjx_best.get(B, np.nan)) else ""
        flag = "" if ok else " (non-finite!)"
        body.append(f"| {eng} | {name}{flag} | {B} | {us:.2f} | {sps:,.0f} | {ratio} | {tc:.1f} |")
    _env.write_section(a.out, "## Simulation\n\n" + "\n".join(body))
    print("\n".join(body))
    if ck:
        write_checkpoint_section(a.out, ck)


def write_checkpoint_section(out, ck):
    body = [
        "## Simulation: reverse mode through long rollouts",
        "",
        f"Machine: {cpu_name()}; jax {jax.__version__}; single-threaded XLA; run "
        f"{time.strftime('%Y-%m-%d %H:%M')} UTC by `python benchmarks/sim.py` "
        "(`--only-checkpoint` for this table alone).",
        "",
        "`jax.grad` of a loss on the final state of a 1000-step rollout with respect to 12 PD "
        "offsets (quad12 standing, compliant contact, implicit integrator, dt = 2 ms, float32), "
        '`sim.rollout(..., checkpoint=...)`: `None` stores every step\'s residuals, `"step"` '
        'stores the states and recomputes each step, `"sqrt"` stores sqrt(T) states and '
        "recomputes segments. XLA temp memory from `compiled.memory_analysis()`; the "
        "gradients of the three modes are compared (last column): in float32, 1000 steps of "
        "contact amplify rounding until the gradient is noise, so a large value there is not "
        "a checkpointing error; float64 agrees to 1e-12 (see the note under the table).",
        "",
        "| checkpoint | XLA temp memory (MiB) | gradient time (s) | compile (s) "
        "| gradient vs None (max rel.) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, temp, t, tc, diff in ck:
        body.append(f"| {name} | {temp:.1f} | {t:.2f} | {tc:.1f} | {diff:.1e} |")
    _env.write_section(out, "\n".join(body))
    print("\n".join(body))


if __name__ == "__main__":
    main()

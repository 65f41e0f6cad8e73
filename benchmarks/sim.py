"""Simulation throughput (jaxdyn.sim vs MJX and jaxsim on the same robot) and the memory of
reverse mode through long rollouts.

Usage: ``python benchmarks/sim.py [--batches 1024,4096] [--dtype float32] [--skip-mjx]
[--skip-jaxsim] [--jaxsim-python .venv-jaxsim/bin/python] [--out benchmarks/RESULTS.md]``

1. Steps per second of ``jax.jit(jax.vmap(step))`` on the bundled quad12 quadruped (floating
   base, 12 PD-servoed joints, 4 foot spheres on a ground plane), dt = 2 ms, for each contact
   model / integrator, against MJX (``mujoco.mjx``) stepping the same robot: the same URDF
   compiled by MuJoCo, the same foot spheres, floor, PD gains (``position`` actuators with
   ``kv``) and time step, ``implicitfast``. Compile times are reported separately.
2. The same against jaxsim (ami-iit's JAX simulator, ``pip install jaxsim``) on quad12 and
   talos_full: its soft (Hunt-Crossley with exponents 0, i.e. jaxdyn's linear spring-damper
   gains), relaxed-rigid and rigid contact models, semi-implicit Euler or RK4, the same URDF
   with the same contact geometry as collision shapes, PD gains, effort limits, joint-limit
   springs, time step and batch sizes. jaxsim runs in a child process per case and batch
   (``benchmarks/_jaxsim_child.py``), under ``--jaxsim-python`` (default: this interpreter if
   it has jaxsim, else the rows are skipped with a note); a robot it cannot load gets a row
   saying why. A sanity table gives the base height after ``--sanity-steps`` steps (B = 8) in
   both engines; ``--smoke`` prints only that, for ``--jaxsim-batches``, and writes nothing.
3. Reverse mode through 1000 steps (quad12, compliant contact, implicit integrator):
   ``jax.grad`` of a loss on the final state with ``checkpoint=None | "step" | "sqrt"``: XLA's
   temporary memory for the compiled gradient, its run time and compile time.

Everything runs single-threaded (benchmarks/_env.py; the MJX and jaxsim children too), and
writes the ``## Simulation`` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import _env

_env.single_threaded()
_env.reuse_freed_buffers()  # as vs_cpp.py: large batch buffers reused, not faulted in per call
import argparse
import functools
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
STAND = 0.34  # base height of quad12 (and solo12) with straight legs, foot spheres on the ground


SOLE = [(x, y, 0.0) for x in (-0.1, 0.1) for y in (-0.05, 0.05)]
ROBOTS = {
    # name: (contact primitives, PD gains, standing base height)
    "quad12": (lambda: [sim.Sphere(f, RADIUS) for f in FEET], (KP, KD), STAND),
    # Solo-12 (example-robot-data): the same joint and foot names, legs and standing height;
    # Solo's own servo gains (its light shanks make kd = 0.5 unstable in explicit steps)
    "solo12": (lambda: [sim.Sphere(f, RADIUS) for f in FEET], (5.0, 0.1), STAND),
    "talos_full": (
        lambda: [sim.Point(s, c) for s in ("left_sole_link", "right_sole_link") for c in SOLE],
        (500.0, 5.0),
        1.083,
    ),
}
# the jaxdyn cases timed for a robot
JAXDYN_TIMED = {
    "quad12": (
        "compliant, euler",
        "compliant, implicit",
        "compliant, rk4",
        "constraint, euler (100 APGD)",
    ),
    "talos_full": ("compliant, implicit", "constraint, implicit (100 APGD)"),
}


def jaxdyn_cases(dtype, robot="quad12"):
    m = robots.load(robot, floating_base=True).astype(dtype)
    geoms, (kp, kd), _ = ROBOTS[robot]
    cs = sim.contact_set(m, geoms())
    pd = sim.PD(kp, kd)

    def cfg(integrator, contact):
        return sim.SimConfig(
            dt=DT, integrator=integrator, contact=contact, contacts=cs, actuator=pd
        )

    compliant, constraint = sim.Compliant(friction=MU), sim.Constraint(friction=MU)
    return m, {
        "compliant, euler": cfg("euler", compliant),
        "compliant, implicit": cfg("implicit", compliant),
        # jaxsim's soft contact with RK4 is compared with this one
        "compliant, rk4": cfg("rk4", compliant),
        "constraint, euler (100 APGD)": cfg("euler", constraint),
        # talos_full's PD(500, 5) is unstable in any step explicit in the joint damping
        "constraint, implicit (100 APGD)": cfg("implicit", constraint),
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
            # timed through the jitted function (its C++ dispatch): calling the Compiled object
            # of f.lower().compile() costs a fraction of a millisecond of Python per call
            t0, c = time.perf_counter(), f
            try:
                jax.block_until_ready(f(S, U))  # compiles (and runs once)
                tc = time.perf_counter() - t0
                t = timed(c, (S, U))
            except jax.errors.JaxRuntimeError as e:  # a value check fired: record, go on
                tc = time.perf_counter() - t0
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


def mjx_model(robot="quad12"):
    """A quadruped (quad12 or solo12) for MuJoCo: its URDF through MuJoCo's compiler (static
    links kept as bodies; the URDF's visual and collision elements dropped, solo12's name mesh
    files), a free joint, a floor, foot spheres and position servos with the same gains."""
    import mujoco

    spec = _env.urdf_mjspec(robot)
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
    kp, kd = ROBOTS[robot][1]
    for j in spec.joints:
        if j.type == mujoco.mjtJoint.mjJNT_HINGE:
            spec.add_actuator(
                trntype=mujoco.mjtTrn.mjTRN_JOINT,
                target=j.name,
                gaintype=mujoco.mjtGain.mjGAIN_FIXED,
                gainprm=[kp] + [0] * 9,
                biastype=mujoco.mjtBias.mjBIAS_AFFINE,
                biasprm=[0, -kp, -kd] + [0] * 7,
            )
    return spec.compile()


def mjx_batch(B, dtype, robot="quad12"):
    """MJX's quadruped (:func:`mjx_model` on the device) and ``B`` standing states: base upright
    at the standing height, joints perturbed by 0.05 rad (normal), zero controls."""
    import mujoco
    from mujoco import mjx

    mm = mjx_model(robot)
    d = mujoco.MjData(mm)
    d.qpos[2] = ROBOTS[robot][2]
    d.qpos[3:7] = [1, 0, 0, 0]
    dx = mjx.put_data(mm, d)
    rng = jax.random.normal(jax.random.PRNGKey(0), (B, mm.nv), dtype)
    qpos = jnp.broadcast_to(jnp.asarray(d.qpos, dtype), (B, mm.nq))
    qpos = qpos.at[:, 7:].add(0.05 * rng[:, 6:])
    batch = jax.vmap(lambda q: dx.replace(qpos=q, ctrl=jnp.zeros(mm.nu, dtype)))(qpos)
    return mjx.put_model(mm), batch


MJX_CHILD = """
import sys, json, time
sys.path.insert(0, {here!r})
import _env
_env.single_threaded()
_env.reuse_freed_buffers()
import jax, jax.numpy as jnp
import sim as S
B, dtype = {B}, jnp.dtype({dtype!r})
if dtype == jnp.float64:
    jax.config.update("jax_enable_x64", True)
from mujoco import mjx
mx, batch = S.mjx_batch(B, dtype)
f = jax.jit(jax.vmap(lambda d: mjx.step(mx, d)))
t0 = time.perf_counter()
c = f  # timed through the jitted function (a Compiled object's call costs Python time)
jax.block_until_ready(c(batch))
tc = time.perf_counter() - t0
t = S.timed(c, (batch,))
ok = bool(jnp.all(jnp.isfinite(c(batch).qpos)))
print(json.dumps(dict(t=t, tc=tc, ok=ok)))
"""


def bench_mjx(batches, dtype, timeout=900):
    """MJX in a child process per batch size: with jaxlib 0.10.2 on the CPU, MJX's vmapped
    step (its batched LAPACK Cholesky) deadlocks from B = 256: the first call or two return,
    a later call of the same compiled step never does, every XLA thread idle (gdb), with and
    without the single-thread flags and ``reuse_freed_buffers``, Newton or CG solver, Euler or
    implicitfast; B = 128 runs. A wedged run is reported as such instead of hanging the
    benchmark."""
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


# jaxsim: the case name, its contact model and integrator, and the jaxdyn case of the same kind
# that the ratio column compares it with (compliant with compliant at the same integrator,
# constraint with the constraint-like models); where jaxdyn does not time that case for the
# robot (talos_full), the robot's first JAXDYN_TIMED case.
JAXSIM_CASES = {
    "soft-euler": (
        "soft, semi-implicit Euler",
        "soft",
        "SemiImplicitEuler",
        "compliant, euler",
    ),
    "soft-rk4": ("soft, RK4", "soft", "RungeKutta4", "compliant, rk4"),
    "relaxed-rigid": (
        "relaxed-rigid, semi-implicit Euler",
        "relaxed_rigid",
        "SemiImplicitEuler",
        "constraint, euler (100 APGD)",
    ),
    "rigid": (
        "rigid (QP), semi-implicit Euler",
        "rigid",
        "SemiImplicitEuler",
        "constraint, euler (100 APGD)",
    ),
}
# jaxsim collision shapes replacing the URDF's: quad12's foot spheres, talos_full's sole
# rectangles (a box whose 4 bottom corners are jaxdyn's sole points).
JAXSIM_GEOMETRY = {
    "quad12": {"spheres": {"links": list(FEET), "radius": RADIUS}},
    "talos_full": {"soles": {"links": ["left_sole_link", "right_sole_link"], "points": SOLE}},
}
JAXSIM_CHILD = HERE / "_jaxsim_child.py"
#: jaxsim's rigid contact solves a QP per sample and step (about 30 ms per sample on quad12's
#: 104 contact points in the smoke run): larger batches would take minutes per timed call
RIGID_MAX_BATCH = 64


def jaxsim_python(option):
    """The interpreter that runs jaxsim, and ``None, why`` when there is none. jaxsim is not
    imported here: it switches on float64 for the whole process at import."""
    import importlib.util
    import shutil
    import sys

    if option:
        exe = shutil.which(option) or option
        if not Path(exe).is_file():
            return None, f"--jaxsim-python {option}: no such interpreter"
        return exe, ""
    if importlib.util.find_spec("jaxsim") is not None:
        return sys.executable, ""
    return None, (
        f"jaxsim is not installed in {sys.executable} and --jaxsim-python was not given "
        "(see benchmarks/README.md: jaxsim)"
    )


@functools.lru_cache
def compliant_gains(robot, dtype):
    """jaxdyn's default compliant-contact stiffness and damping for the robot (from its mass)."""
    m = robots.load(robot, floating_base=True).astype(dtype)
    k, c = sim.Compliant(friction=MU).gains(m, jnp.dtype(dtype))
    return float(k), float(c)


def jaxsim_spec(robot, dtype, case, B, mode, steps=0, sphere_points=50):
    """The child's JSON spec: the robot's URDF and contact geometry, PD gains, effort limits
    (read by the child), standing height, and jaxdyn's compliant-contact gains."""
    path, _ = robots.resolve(robot)
    k, c = compliant_gains(robot, jnp.dtype(dtype).name)
    _, (kp, kd), height = ROBOTS[robot]
    _, model, integrator, _ = JAXSIM_CASES[case]
    return dict(
        urdf=str(path),
        robot=robot,
        **JAXSIM_GEOMETRY[robot],
        kp=kp,
        kd=kd,
        height=height,
        clearance=0.01,
        dt=DT,
        mu=MU,
        stiffness=k,
        damping=c,
        dtype=jnp.dtype(dtype).name,
        contact_model=model,
        integrator=integrator,
        batch=B,
        mode=mode,
        steps=steps,
        sphere_points=sphere_points,
    )


def run_jaxsim_child(python, spec, timeout):
    """One child: its JSON answer, or ``{"error": ...}`` for a crash or a timeout."""
    import json
    import subprocess

    try:
        r = subprocess.run(
            [python, str(JAXSIM_CHILD), json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "timeout": True}
    for line in reversed(r.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    err = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    return {"error": f"child exited {r.returncode}: {err[-1][:200] if err else 'no output'}"}


def bench_jaxsim(python, robot, batches, dtype, cases, timeout, sphere_points):
    """Rows ``(robot, case label, B, us/step, steps/s, compile s, ok, note)`` and the info of
    the last child that loaded the robot. After a load error the robot gets that one row."""
    rows, info = [], {}
    for case in cases:
        label = JAXSIM_CASES[case][0]
        for B in batches:
            if case == "rigid" and B > RIGID_MAX_BATCH:
                why = f"not run above B = {RIGID_MAX_BATCH} (a QP per sample and step)"
                rows.append((robot, label, B, *[float("nan")] * 3, False, why))
                continue
            spec = jaxsim_spec(robot, dtype, case, B, "time", sphere_points=sphere_points)
            res = run_jaxsim_child(python, spec, timeout)
            if "error" in res:
                nan = float("nan")
                if res.get("stage") in ("import", "load"):  # the same for every case: one row
                    what = "jaxsim does not import" if res["stage"] == "import" else "does not load"
                    print(f"jaxsim {robot}: {res['error']}", flush=True)
                    return [(robot, what, B, nan, nan, nan, False, res["error"])], {}
                rows.append((robot, label, B, nan, nan, nan, False, res["error"]))
                print(f"jaxsim {robot} {label:34s} B={B:6d} FAILED: {res['error']}", flush=True)
                continue
            info = res["info"]
            t, tc = res["t"], res["tc"]
            rows.append((robot, label, B, t / B * 1e6, B / t, tc, res["ok"], ""))
            print(
                f"jaxsim {robot} {label:34s} B={B:6d} {t / B * 1e6:8.3f} us/step  "
                f"compile {tc:5.1f} s  ({info['points']} contact points)",
                flush=True,
            )
    return rows, info


def jaxdyn_heights(robot, B, dtype, steps):
    """Base heights ``(B,)`` after ``steps`` steps of each jaxdyn case that the benchmark times
    for the robot, from :func:`batch_states` (``{case: z}``, NaN where a sample diverged). The
    value checks are off meanwhile, so that one diverging sample does not stop the batch."""
    m, cfgs = jaxdyn_cases(dtype, robot)
    checks = jaxdyn.config.get("value_checks")
    jaxdyn.set_value_checks(False)
    out = {}
    try:
        for name, cfg in cfgs.items():
            if name not in JAXDYN_TIMED.get(robot, cfgs):
                continue
            S, ref = batch_states(m, B, dtype, height=ROBOTS[robot][2])
            U = jnp.broadcast_to(ref, (B, len(ref)))
            f = jax.jit(jax.vmap(lambda s, u, cfg=cfg: sim.step(m, s, u, cfg)))
            for _ in range(steps):
                S = f(S, U)
            finite = np.all(np.isfinite(np.asarray(S.q)), axis=1)
            out[name] = np.where(finite, np.asarray(S.q[:, 2], dtype=float), np.nan)
    finally:
        jaxdyn.set_value_checks(checks)
    return out


def sanity_rows(python, robots_, B, dtype, steps, cases, timeout, sphere_points):
    """``(robot, engine, case, B, z min, z mean, z max, note)``: base heights after ``steps``
    steps of every jaxdyn case and every jaxsim case, from standing states."""
    rows = []
    for robot in robots_:
        for name, z in jaxdyn_heights(robot, B, dtype, steps).items():
            rows.append((robot, "jaxdyn", name, B, *_zstats(z), _znote(z)))
            print(f"jaxdyn {robot} {name:34s} B={B:5d} {_zline(z)}", flush=True)
        if python is None:
            continue
        for case in cases:
            label = JAXSIM_CASES[case][0]
            spec = jaxsim_spec(robot, dtype, case, B, "rollout", steps, sphere_points)
            res = run_jaxsim_child(python, spec, timeout)
            if "error" in res:
                rows.append((robot, "jaxsim", label, B, *_zstats(np.full(B, np.nan)), res["error"]))
                print(f"jaxsim {robot} {label:34s} B={B:5d} {res['error']}", flush=True)
                if res.get("stage") in ("import", "load"):
                    break  # its other cases would say the same
                continue
            z = np.asarray(res["z"], dtype=float)
            rows.append((robot, "jaxsim", label, B, *_zstats(z), _znote(z)))
            print(f"jaxsim {robot} {label:34s} B={B:5d} {_zline(z)}", flush=True)
    return rows


def _zstats(z):
    """min, mean, max of the finite heights (NaN if none)."""
    z = np.asarray(z, dtype=float)
    z = z[np.isfinite(z)]
    if z.size == 0:
        return (np.nan,) * 3
    return float(np.min(z)), float(np.mean(z)), float(np.max(z))


def _znote(z):
    bad = int(np.sum(~np.isfinite(np.asarray(z, dtype=float))))
    return f"{bad}/{len(z)} diverged (non-finite)" if bad else ""


def _zline(z):
    lo, mean, hi = _zstats(z)
    note = _znote(z)
    if not np.isfinite(mean):
        return f"base z: all {len(z)} diverged (non-finite)"
    return f"base z min {lo:.4f} mean {mean:.4f} max {hi:.4f} m" + (f"  {note}" if note else "")


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


HOST_TITLE = "## Simulation: MJX at large batch on another CPU"


def host_section(path) -> str:
    """The jaxdyn and MJX rows of a JSON written on another machine's CPU, where MJX runs at
    large batches (jaxlib 0.10.2 deadlocks on MJX's step from B = 256, see :func:`bench_mjx`;
    0.11.2 does not). Produced on the GPU machine's host CPU with ``JAX_PLATFORMS=cpu``::

        import _env, json, time; _env.single_threaded(); _env.reuse_freed_buffers()
        import jax, sim as S
        rows = S.bench_jaxdyn([64, 1024, 8192], "float32", "quad12",
                              cases=("compliant, implicit", "compliant, euler"))
        for B in (64, 1024, 8192):
            rows += S.bench_mjx([B], "float32", timeout=70)
        date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        json.dump(dict(cpu=_env.cpu_name(), jax=jax.__version__, date=date, rows=rows),
                  open(path, "w"))
    """
    import json

    d = json.loads(Path(path).read_text())
    if "date" not in d:
        raise ValueError(f"{path}: no 'date' (when the run was taken): add it to the JSON")
    rows = [tuple(r) for r in d["rows"]]
    mjx = {r[2]: r[4] for r in rows if r[0] == "MJX" and np.isfinite(r[4])}
    body = [
        HOST_TITLE,
        "",
        f"{d['cpu']} (the GPU machine's host, {d.get('cores', 16)} cores, one thread used: "
        f"single-threaded XLA), jax {d['jax']}, float32, run {d['date']}, "
        "`benchmarks/sim.py`'s quad12 cases "
        "(see `host_section` there); MJX's child processes as in the table above. On this "
        "repository's machine (jax 0.10.2) MJX deadlocks from B = 256; with jax 0.11.2 it "
        f"runs, so this table gives the side-by-side at B = 1024 and 8192 (`{Path(path).name}`"
        " in `benchmarks/gpu_runs/`). Ratio: jaxdyn steps/s over MJX's at the same batch.",
        "",
        "| engine | contact, integrator | batch | us/step | steps/s | vs MJX | compile s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for eng, name, B, us, sps, tc, ok in sorted(rows, key=lambda r: (r[2], r[0] != "MJX")):
        ratio = f"{sps / mjx[B]:.1f}x" if eng != "MJX" and B in mjx else ""
        flag = "" if ok or not np.isfinite(us) else " (non-finite!)"
        body.append(f"| {eng} | {name}{flag} | {B} | {us:.2f} | {sps:,.0f} | {ratio} | {tc:.1f} |")
    return "\n".join(body) + "\n"


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
    ap.add_argument("--skip-jaxsim", action="store_true")
    ap.add_argument(
        "--jaxsim-python",
        default=None,
        help="interpreter with jaxsim installed (default: this one if it has jaxsim)",
    )
    ap.add_argument("--jaxsim-batches", default="1,64,1024", help="jaxsim batch sizes")
    ap.add_argument(
        "--jaxsim-cases", default=",".join(JAXSIM_CASES), help=f"of {','.join(JAXSIM_CASES)}"
    )
    ap.add_argument("--jaxsim-timeout", type=float, default=600, help="per child process (s)")
    ap.add_argument(
        "--jaxsim-sphere-points",
        type=int,
        default=50,
        help="jaxsim's samples of a collision sphere (the lower half are kept)",
    )
    ap.add_argument(
        "--sanity-steps", type=int, default=100, help="steps of the base-height table, 0: none"
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="only the base heights after --sanity-steps steps, jaxdyn and jaxsim, at each of "
        "--jaxsim-batches; prints, writes nothing",
    )
    ap.add_argument(
        "--host-json",
        help="write the section 'Simulation: MJX at large batch on another CPU' from this "
        "JSON (see host_section) and stop",
    )
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    a = ap.parse_args(argv)
    if a.host_json:
        text = host_section(a.host_json)
        _env.write_section(a.out, text)
        print(text)
        return
    if a.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    dtype = jnp.dtype(a.dtype)
    batches = [int(b) for b in a.batches.split(",")]
    js_batches = [int(b) for b in a.jaxsim_batches.split(",")]
    js_cases = [c for c in a.jaxsim_cases.split(",") if c]
    if unknown := [c for c in js_cases if c not in JAXSIM_CASES]:
        ap.error(f"--jaxsim-cases: unknown {unknown}, choose from {list(JAXSIM_CASES)}")
    js_robots = ["quad12"] + ([] if a.skip_talos else ["talos_full"])
    js_python, js_why = (None, "--skip-jaxsim") if a.skip_jaxsim else jaxsim_python(a.jaxsim_python)
    if js_python is None and not a.skip_jaxsim:
        print(f"jaxsim skipped: {js_why}", flush=True)

    def sanity(B):
        return sanity_rows(
            js_python,
            js_robots,
            B,
            dtype,
            a.sanity_steps,
            js_cases,
            a.jaxsim_timeout,
            a.jaxsim_sphere_points,
        )

    if a.smoke:
        for B in js_batches:
            sanity(B)
        return
    if a.only_checkpoint:
        write_checkpoint_section(a.out, bench_checkpoint(dtype), a.dtype)
        return
    rows = bench_jaxdyn(batches, dtype, "quad12", JAXDYN_TIMED["quad12"])
    if not a.skip_mjx:
        rows += bench_mjx([int(b) for b in a.mjx_batches.split(",")], dtype, a.mjx_timeout)
    if not a.skip_talos:
        rows += bench_jaxdyn(batches, dtype, "talos_full", JAXDYN_TIMED["talos_full"])
    js_rows, js_info, heights = [], {}, []
    if js_python is not None:
        for robot in js_robots:
            bs = js_batches if robot == "quad12" else [b for b in js_batches if b <= 1024]
            r, info = bench_jaxsim(
                js_python, robot, bs, dtype, js_cases, a.jaxsim_timeout, a.jaxsim_sphere_points
            )
            js_rows += r
            js_info[robot] = info
    if a.sanity_steps > 0 and js_python is not None:
        heights = sanity(8)
    ck = [] if a.skip_checkpoint else bench_checkpoint(dtype)
    mjx_best = {r[2]: r[4] for r in rows if r[0] == "MJX"}
    body = [
        f"Machine: {cpu_name()}, {platform.machine()}; jax {jax.__version__}; single-threaded "
        f"XLA ({_env.threading_note()}); glibc keeps freed buffers for reuse in every "
        f"engine's process (`_env.reuse_freed_buffers`); {a.dtype}; run "
        f"{time.strftime('%Y-%m-%d %H:%M')} UTC by `python benchmarks/sim.py`; jaxdyn, MJX and "
        "jaxsim timed through their jitted functions.",
        "",
        "quad12 (floating base, 12 PD joints, kp = 20, kd = 0.5), 4 foot spheres on a plane, "
        "dt = 2 ms, `jax.jit(jax.vmap(step))`; MJX steps the same robot (its URDF compiled by "
        "MuJoCo, same spheres, gains and time step, `implicitfast`, default Newton solver). "
        "Ratio: jaxdyn steps/s over MJX's at the same batch.",
        "",
        "talos_full (50 DoF; 8 sole-corner contact points, kp = 500, kd = 5): jaxdyn here, "
        "jaxsim below.",
        "",
        "| engine | contact, integrator | batch | us/step | steps/s | vs MJX | compile s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for eng, name, B, us, sps, tc, ok in rows:
        quad = eng == "jaxdyn quad12"
        ratio = f"{sps / mjx_best[B]:.2f}x" if quad and np.isfinite(mjx_best.get(B, np.nan)) else ""
        flag = "" if ok or not np.isfinite(us) else " (non-finite!)"  # a HUNG row has no time
        body.append(f"| {eng} | {name}{flag} | {B} | {us:.2f} | {sps:,.0f} | {ratio} | {tc:.1f} |")
    if not a.skip_jaxsim:
        body += jaxsim_section(rows, js_rows, js_info, js_python, js_why, a, heights)
    _env.write_section(a.out, "## Simulation\n\n" + "\n".join(body))
    print("\n".join(body))
    if ck:
        write_checkpoint_section(a.out, ck)


def jaxsim_section(rows, js_rows, js_info, python, why, a, sanity):
    """The jaxsim part of the Simulation section: set-up, differences, table, sanity table."""
    if python is None:
        return ["", f"jaxsim: not run ({why})."]
    info = next((i for i in js_info.values() if i), {})
    pts = {r: i.get("points") for r, i in js_info.items() if i}
    jd = {(r[0].split(" ", 1)[1], r[1], r[2]): r[4] for r in rows if r[0].startswith("jaxdyn")}
    pair = {v[0]: v[3] for v in JAXSIM_CASES.values()}
    out = [
        "",
        f"**jaxsim** {info.get('jaxsim', '?')} (jax {info.get('jax', '?')}, `{python}`), one "
        "child process per case and batch, single-threaded XLA, float32 via `JAX_ENABLE_X64=0`: "
        "`jax.jit(jax.vmap(step))` with `step = js.model.step(model, data, "
        "joint_force_references=tau)`, the model closed over (a constant, as jaxdyn's and "
        "MJX's), data in the inertial velocity representation. Same URDF, dt, PD law "
        "`tau = clip(kp (0 - q) - kd v, +-effort)` computed outside jaxsim, joint-limit springs "
        "(1e3 N m/rad, 10 N m s/rad), URDF joint damping/friction, standing states and batch "
        "sizes as jaxdyn. Differences: contact geometry -- jaxsim turns a collision sphere "
        f"into points sampled on its surface ({a.jaxsim_sphere_points} samples, the lower half "
        "kept), each a point contact with the plane, so quad12 has "
        f"{pts.get('quad12', '?')} contact points where jaxdyn has 4 sphere contacts (the "
        "lowest sample is 0.5 mm above the sphere's bottom); talos_full's soles are boxes "
        "whose 4 bottom corners are jaxdyn's 8 points (identical). Soft = jaxsim's "
        "Hunt-Crossley with exponents p = q = 0, i.e. jaxdyn's linear spring-damper per "
        "point with jaxdyn's default gains (MuJoCo's solref (0.02, 1) on the robot's mass "
        "m: k = m / 0.02^2, c = 2 m / 0.02), without jaxdyn's "
        "0.1 mm smoothing; its friction is a tangential spring (a per-point deformation "
        "state) projected on the Coulomb cone, jaxdyn's is regularised Coulomb; mu = 1 "
        "everywhere. Relaxed-rigid (MuJoCo-like soft constraints, L-BFGS, jaxsim's defaults: "
        "50 iterations, tol 1e-6) and rigid (a QP per step, qpax) are compared with jaxdyn's "
        "constraint solver (100 APGD iterations). jaxsim has semi-implicit Euler and RK4 but "
        "no integrator implicit in the joint damping (jaxdyn's `implicit`): with kd = 0.5 on "
        "quad12's light legs (kd dt / I > 2) jaxsim's compliant semi-implicit Euler diverges "
        "(jaxdyn's `euler` treats the contact forces implicitly and stays finite, but its "
        "explicit joint damping makes the legs vibrate, bounded by the effort limits: use "
        "`implicit` there), RK4, explicit in the contact's damping too, is past its stable "
        "step at these gains in both; with kp = 500, kd = 5 talos_full "
        "diverges in every jaxsim case (see the base heights). The timed call always steps the "
        "same standing batch, so divergence does not enter the times. jaxdyn / jaxsim: jaxdyn's "
        "steps/s at the same batch over jaxsim's (> 1: jaxdyn faster), for the jaxdyn case "
        "named: the same contact kind and integrator on quad12; on talos_full, where jaxdyn "
        "times the implicit integrator only (its PD(500, 5) is unstable in a step explicit in "
        "the joint damping), the same contact kind.",
        "",
        "| robot | jaxsim contact, integrator | batch | us/step | steps/s | compile s "
        "| jaxdyn case | jaxdyn / jaxsim |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for robot, label, B, us, sps, tc, ok, note in js_rows:
        if note:
            out.append(f"| {robot} | {label}: {note} | {B} | | | | | |")
            continue
        # the paired case, else a timed case of the same contact kind, else any timed one
        kind = pair[label].split(",")[0]
        timed_cases = JAXDYN_TIMED.get(robot, ())
        same_kind = [c for c in timed_cases if c.split(",")[0] == kind]
        case = next((c for c in (pair[label], *same_kind, *timed_cases) if (robot, c, B) in jd), "")
        ref = jd.get((robot, case, B), np.nan)
        ratio = f"{ref / sps:.2f}x" if np.isfinite(ref) else ""
        flag = "" if ok else " (non-finite!)"
        out.append(
            f"| {robot} | {label}{flag} | {B} | {us:.2f} | {sps:,.0f} | {tc:.1f} "
            f"| {case if ratio else ''} | {ratio} |"
        )
    if sanity:
        out += [
            "",
            f"Base height after {a.sanity_steps} steps ({a.sanity_steps * DT:.1f} s) from the "
            "standing states (1 cm above standing height, joints perturbed by 0.05 rad), "
            f"B = {sanity[0][3]}: min / mean / max over the batch (m).",
            "",
            "| robot | engine | contact, integrator | base z min | mean | max | note |",
            "|---|---|---|---:|---:|---:|---|",
        ]
        for robot, eng, name, _, lo, mean, hi, note in sanity:
            if np.isfinite(mean):
                z = f"{lo:.4f} | {mean:.4f} | {hi:.4f}"
            else:
                z = "| |"  # three empty cells
            out.append(f"| {robot} | {eng} | {name} | {z} | {note or ''} |")
    return out


def write_checkpoint_section(out, ck, dtype="float32"):
    body = [
        "## Simulation: reverse mode through long rollouts",
        "",
        f"Machine: {cpu_name()}; jax {jax.__version__}; single-threaded XLA; run "
        f"{time.strftime('%Y-%m-%d %H:%M')} UTC by `python benchmarks/sim.py` "
        "(`--only-checkpoint` for this table alone).",
        "",
        "`jax.grad` of a loss on the final state of a 1000-step rollout with respect to 12 PD "
        f"offsets (quad12 standing, compliant contact, implicit integrator, dt = 2 ms, {dtype}), "
        '`sim.rollout(..., checkpoint=...)`: `None` stores every step\'s residuals, `"step"` '
        'stores the states and recomputes each step, `"sqrt"` stores sqrt(T) states and '
        "recomputes segments. XLA temp memory from `compiled.memory_analysis()`; the "
        "gradients of the three modes are compared (last column)"
        + (
            ": in float32, 1000 steps of contact amplify rounding until the gradient is noise, "
            "so a large value there is not a checkpointing error (run `--only-checkpoint "
            "--dtype float64` for the comparison)."
            if dtype == "float32"
            else ": the modes recompute the same steps, so they agree to rounding."
        ),
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

"""One robot on a CPU: a rollout of quad12 (batch 1) by jaxdyn.sim with XLA's default flags and
with fused CPU loops, beside MuJoCo C stepping the same robot.

Usage: ``python benchmarks/sim_one.py [--steps 1000] [--out benchmarks/RESULTS.md]``

jaxdyn: ``jax.jit(lambda s, u: sim.rollout(m, s, u, cfg=cfg))`` over ``--steps`` steps of 2 ms
(one ``lax.scan``), float64, quad12 standing on its four foot spheres (the cases of
``benchmarks/sim.py``), with value checks on (the default: checked before and after the loop)
and off, and again in a child process started with ``JAXDYN_FUSED_CPU_LOOPS=1``
(:func:`jaxdyn.config.fused_cpu_loops`: XLA:CPU compiles a loop holding no custom call and no
scatter into one kernel; the flags are per process). MuJoCo C: ``mujoco.rollout.rollout`` (its
C loop over ``mj_step``, one thread) on the model of ``sim.mjx_model`` (the same URDF compiled
by MuJoCo, same spheres, gains and time step, ``implicitfast``, Newton solver). Best of 5 after
the first call (compile time separate). Writes ``## Simulation: one robot on a CPU``.
"""

from __future__ import annotations

import _env

_env.single_threaded()
_env.reuse_freed_buffers()
import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn import sim  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sim as S  # noqa: E402

from _env import cpu_name, write_section  # noqa: E402

CASES = ("compliant, euler", "compliant, implicit", "constraint, euler (100 APGD)")
REPEATS = 5


def _best(fn, *args):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    best = np.inf
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return best, first, out


def jaxdyn_rows(steps, checks):
    """``{case: (us per step, compile s, finite)}`` for value checks on or off."""
    jaxdyn.config.update("value_checks", checks)
    m, cfgs = S.jaxdyn_cases(jnp.float64, "quad12")
    states, ref = S.batch_states(m, 1, jnp.float64)
    s0 = jax.tree.map(lambda a: a[0], states)
    U = jnp.broadcast_to(ref, (steps, len(ref)))
    out = {}
    for name in CASES:
        f = jax.jit(lambda s, u, cfg=cfgs[name]: sim.rollout(m, s, u, cfg=cfg))
        t, first, traj = _best(f, s0, U)
        ok = bool(jnp.all(jnp.isfinite(traj.q)))
        out[name] = (t / steps * 1e6, first - t, ok)
        print(f"fused={jaxdyn.config.fused_cpu_loops_enabled()} checks={checks} {name}: "
              f"{t / steps * 1e6:.2f} us/step, compile {first - t:.1f} s")  # fmt: skip
    return out


def mujoco_row(steps):
    """MuJoCo C: us per ``mj_step`` in ``mujoco.rollout.rollout`` (one thread)."""
    import mujoco
    from mujoco import rollout

    mm = S.mjx_model("quad12")
    d = mujoco.MjData(mm)
    d.qpos[2] = S.STAND
    d.qpos[3:7] = [1, 0, 0, 0]
    mujoco.mj_forward(mm, d)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    x0 = np.empty(mujoco.mj_stateSize(mm, spec))
    mujoco.mj_getState(mm, d, x0, spec)
    ctrl = np.tile(d.qpos[7:], (1, steps, 1))
    best = np.inf
    for _ in range(REPEATS + 1):
        t0 = time.perf_counter()
        state, _ = rollout.rollout(mm, d, x0[None], ctrl)
        best = min(best, time.perf_counter() - t0)
    assert np.all(np.isfinite(state)), "MuJoCo rollout diverged"
    print(f"MuJoCo C: {best / steps * 1e6:.2f} us/step")
    return best / steps * 1e6, mujoco.__version__


def _child(steps):
    assert jaxdyn.config.fused_cpu_loops_enabled(), os.environ.get("XLA_FLAGS")
    print(json.dumps(dict(on=jaxdyn_rows(steps, True), off=jaxdyn_rows(steps, False))))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return _child(a.steps)
    on, off = jaxdyn_rows(a.steps, True), jaxdyn_rows(a.steps, False)
    fused_both = _env.fused_child(__file__, "--child", "--steps", str(a.steps))
    fused_on, fused = fused_both["on"], fused_both["off"]
    mj, mj_version = mujoco_row(a.steps)
    body = [
        f"Machine: {cpu_name()}, {platform.machine()}; jax {jax.__version__}, mujoco "
        f"{mj_version}; single-threaded ({_env.threading_note()}); float64; run "
        f"{time.strftime('%Y-%m-%d %H:%M')} UTC by `python benchmarks/sim_one.py`.",
        "",
        f"quad12 standing on its four foot spheres (the cases of the Simulation table, PD kp = "
        f"20, kd = 0.5, dt = 2 ms), one robot, a {a.steps}-step rollout: jaxdyn "
        "`jax.jit(lambda s, u: sim.rollout(m, s, u, cfg=cfg))` (one `lax.scan`) with XLA's "
        "default flags, value checks on (the default; `rollout` checks before and after its "
        "loop, none inside) and off, and in a process started with `JAXDYN_FUSED_CPU_LOOPS=1` "
        "(XLA:CPU then compiles the step loop into one kernel; a loop holding a custom call "
        "such as a value check would not be fused), checks on and off. MuJoCo C: "
        "`mujoco.rollout.rollout` (C loop over `mj_step`, one thread), the same robot compiled "
        "by MuJoCo, `implicitfast`, Newton solver. Best of "
        f"{REPEATS} after the first call. Ratio: jaxdyn's time per step over MuJoCo C's (< 1: "
        "jaxdyn faster); MuJoCo's rows do not depend on jaxdyn's contact model.",
        "",
        "| contact, integrator | jaxdyn, checks on (us/step) | jaxdyn, checks off | jaxdyn, "
        "fused CPU loops, checks on | fused, checks off | MuJoCo C (us/step) | fused (checks "
        "on) vs MuJoCo C | compile s (default / fused) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in CASES:
        rows = (on, off, fused_on, fused)
        assert all(r[name][2] for r in rows), f"{name}: rollout not finite"
        body.append(
            f"| {name} | {on[name][0]:.2f} | {off[name][0]:.2f} | {fused_on[name][0]:.2f} | "
            f"{fused[name][0]:.2f} | {mj:.2f} | {fused_on[name][0] / mj:.2f}x | "
            f"{on[name][1]:.1f} / {fused_on[name][1]:.1f} |"
        )
    write_section(Path(a.out), "## Simulation: one robot on a CPU\n\n" + "\n".join(body))
    print("\n".join(body))


if __name__ == "__main__":
    main()

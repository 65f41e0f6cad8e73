"""The collision pipeline of a self-colliding humanoid: dm_control's humanoid (20 collision
geoms, 161 pairs after MuJoCo's filters: capsule-capsule, sphere-capsule, the floor) through
``jaxdyn.sim.Geoms.frames`` (every pair's narrow phase, the broad-phase mask, the contacts'
kinematics), beside MuJoCo C's ``mj_collision`` on the same state.

Usage: ``python benchmarks/collision.py [--batches 1,64] [--caps 80,32]
[--out benchmarks/RESULTS.md]``

The state: the humanoid falling limp (MuJoCo C, 150 steps of 5 ms from ``qpos0``: feet on the
floor, limbs about to touch each other). jaxdyn: ``jax.jit(jax.vmap(frames))`` over a batch of
that state, float64, single-threaded XLA; best of 5 after the first call (compile time
separate). MuJoCo C: ``mj_collision`` after ``mj_kinematics`` (broad phase, mid phase and
narrow phase of the same pairs), one thread. Then one ``sim.step`` from that state with
``sim.Constraint()`` (the solve over all 277 contact slots) and with
``sim.Constraint(max_contacts=k)`` for each ``k`` of ``--caps`` (the ``k`` closest slots):
``jax.jit`` at batch 1, compile and step in process CPU time (the machine may be shared),
timed interleaved, and the largest velocity difference from the uncapped step. Writes
``## Collision pipeline: a self-colliding humanoid``.
"""

from __future__ import annotations

import _env

_env.single_threaded()
import argparse  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn import sim  # noqa: E402

from _env import cpu_name, timed, write_section  # noqa: E402

HERE = Path(__file__).resolve().parent
SECTION = "## Collision pipeline: a self-colliding humanoid"


def humanoid_path() -> str:
    import dm_control

    return str(Path(dm_control.__file__).parent / "suite" / "humanoid.xml")


def _frames_fn(loaded):
    from jaxdyn.algorithms import kinematics as kin
    from jaxdyn.sim.core import _world

    model = loaded.model

    def frames(q):
        ws, origin = _world(model, q)
        vb, _ = kin.body_velocities(model, ws, jnp.zeros(model.nv, q.dtype))
        f = loaded.geoms.frames(ws, origin, vb)
        return f.distance, f.normal, f.point

    return frames


def step_rows(loaded, state, caps):
    """Table rows of one Constraint step with each ``max_contacts`` of ``caps`` (``None``
    first: the uncapped reference), and the number of candidate contacts of ``state``."""
    import statistics

    model = loaded.model
    u = jnp.zeros(len(loaded.actuators))
    fns, compile_cpu, out = {}, {}, {}
    for k in caps:
        cfg = loaded.sim_config(
            contact=sim.Constraint(soft=False, max_contacts=k), ignore=("solimp",)
        )
        fns[k] = jax.jit(lambda s, cfg=cfg: sim.step(model, s, u, cfg))
        c0 = time.process_time()
        out[k] = jax.block_until_ready(fns[k](state))
        compile_cpu[k] = time.process_time() - c0
    cpu = {k: [] for k in caps}
    for _ in range(7):  # interleaved rounds: a loaded machine slows all alike
        for k in caps:
            n, c0 = 0, time.process_time()
            while n < 3 or time.process_time() - c0 < 0.05:
                jax.block_until_ready(fns[k](state))
                n += 1
            cpu[k].append((time.process_time() - c0) / n)
    med = {k: statistics.median(cpu[k]) for k in caps}
    rows = []
    for k in caps:
        dv = float(jnp.max(jnp.abs(out[k].v - out[None].v)))
        name = "`Constraint()`" if k is None else f"`Constraint(max_contacts={k})`"
        rows.append(f"| {name} | {compile_cpu[k]:.1f} | {med[k] * 1e6:.0f} | "
                    f"{med[None] / med[k]:.1f}x | {dv:.1e} |")  # fmt: skip
    cfg = loaded.sim_config(contact=sim.Constraint(soft=False), ignore=("solimp",))
    cand = int(jax.jit(lambda s: sim.contact_counts(model, s, cfg))(state)[0])
    return rows, cand


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--steps", type=int, default=150, help="MuJoCo steps to the timed state")
    ap.add_argument("--caps", default="80,32", help="Constraint max_contacts values to time")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    args = ap.parse_args(argv)
    import mujoco

    load0 = os.getloadavg()[0]
    path = humanoid_path()
    loaded = jaxdyn.load_mjcf(path)
    g = loaded.geoms
    m = mujoco.MjModel.from_xml_path(path)
    d = mujoco.MjData(m)
    mujoco.mj_step(m, d, args.steps)
    q = jnp.asarray(loaded.converter().q_from_mujoco(np.array(d.qpos)))
    frames = _frames_fn(loaded)
    rows = []
    for B in [int(b) for b in args.batches.split(",")]:
        fn = jax.jit(jax.vmap(frames))
        qb = jnp.broadcast_to(q, (B, q.shape[0]))
        t0 = time.perf_counter()
        jax.block_until_ready(fn(qb))
        compile_s = time.perf_counter() - t0
        t = timed(fn, (qb,))
        rows.append(f"| jaxdyn `Geoms.frames` | {B} | {t * 1e6:.1f} | {t / B * 1e6:.2f} | "
                    f"{compile_s:.1f} |")  # fmt: skip
    mujoco.mj_kinematics(m, d)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.5:
        mujoco.mj_collision(m, d)
        n += 1
    t_mj = (time.perf_counter() - t0) / n
    rows.append(f"| MuJoCo C `mj_collision` | 1 | {t_mj * 1e6:.1f} | {t_mj * 1e6:.2f} | - |")
    ncon = int(np.asarray(frames(q)[0] < 0).sum())
    v = jnp.asarray(loaded.converter().v_from_mujoco(q, np.array(d.qvel)))
    caps = [None] + [int(k) for k in args.caps.split(",") if k]
    steps, cand = step_rows(loaded, sim.State(q, v), caps)
    body = [
        SECTION,
        "",
        f"Machine: {cpu_name()}, {platform.machine()}; jax {jax.__version__}, mujoco "
        f"{mujoco.__version__}; single-threaded XLA ({_env.threading_note()}); run "
        f"{time.strftime('%Y-%m-%d %H:%M')} UTC by `python benchmarks/collision.py`; load "
        f"average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end on "
        f"{os.cpu_count()} cores (other work shares the machine when it exceeds 1: then it was "
        "loaded, wall times inflated; the step table is process CPU time).",
        "",
        f"dm_control's humanoid: {g.n} collision geoms, {len(g.pairs)} pairs after MuJoCo's "
        f"filters, {int(frames(q)[0].shape[0])} contact slots; the state after {args.steps} "
        f"steps of a limp fall ({ncon} slots touching, MuJoCo {d.ncon} contacts). jaxdyn: "
        "`jax.jit(jax.vmap(Geoms.frames))`, float64, best of 5; MuJoCo C: `mj_collision` "
        "after `mj_kinematics`, one thread.",
        "",
        "| pipeline | batch | us per call | us per state | compile (s) |",
        "|---|---|---|---|---|",
        *rows,
        "",
        f"One `sim.step` (`Constraint`, the file's `sim_config`, `solimp` ignored) from that "
        f"state, `jax.jit`, batch 1, float64: {cand} of the slots hold a candidate contact "
        "(`sim.contact_counts`); `max_contacts = k` solves over the k closest slots (a "
        "Delassus matrix of 3k rows instead of 3 x 277), equal to the uncapped step to "
        "rounding while k >= the candidates. Process CPU time (compile: the first call; "
        "step: median of interleaved rounds).",
        "",
        "| contact | compile CPU (s) | step CPU (us) | speed-up | max abs dv vs uncapped |",
        "|---|---|---|---|---|",
        *steps,
    ]
    print("\n".join(body))
    if args.out:
        write_section(args.out, "\n".join(body))


if __name__ == "__main__":
    main()

"""jaxdyn on an MJCF humanoid beside MJX on the same file.

Usage: ``python benchmarks/mjcf.py [--batches 1,128,1024] [--dtypes float32,float64]
[--mjx-timeout 900] [--skip-mjx] [--out benchmarks/RESULTS.md]``

The humanoid is mujoco-mjx's ``test_data/humanoid/humanoid.xml`` (dm_control's
``suite/humanoid.xml`` if mujoco-mjx is absent): free joint + 21 hinges, nq = 28, nv = 27.
jaxdyn loads it with :func:`jaxdyn.load_mjcf` (nothing ignored: the file loads whole; the
benchmark times the rigid-body model, not its springs or contacts); MJX (``mujoco.mjx``, its
JAX implementation) runs the same compiled ``MjModel`` with constraints, passive forces,
actuation and contacts disabled, so both compute the same rigid-body dynamics (armature
included on both sides). Timed, per sample, as ``jax.jit(jax.vmap(f))`` (``jax.jit(f)`` at
batch 1) on random states:

- ``rnea`` next to ``mjx.inverse`` (kinematics, com, CRB mass matrix and its factorisation,
  RNE bias, ``qfrc_inverse = M qacc + bias``);
- ``crba`` next to ``mjx.kinematics`` + ``com_pos`` + ``crb`` + ``full_m`` (dense ``M``);
- ``aba`` next to ``mjx.forward`` (kinematics, com, CRB + Cholesky, bias, ``M qacc = tau -
  bias``; MJX has no ABA).

MJX runs in a child process with a time limit (batch <= 1024: jaxlib's batched LAPACK can stall
XLA's CPU thread pool at large batches). Single-threaded XLA (benchmarks/_env.py); the MJX model
and data template are closed over as constants, as MJX's own benchmark does. Writes the
``## MJCF humanoid`` section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import _env

_env.single_threaded()
import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from _env import cpu_name, timed, write_section  # noqa: E402

HERE = Path(__file__).resolve().parent
PAIRS = (("rnea", "inverse"), ("crba", "crb"), ("aba", "forward"))


def humanoid_path() -> str:
    try:
        import mujoco.mjx

        p = Path(mujoco.mjx.__file__).parent / "test_data" / "humanoid" / "humanoid.xml"
        if p.exists():
            return str(p)
    except ImportError:
        pass
    import dm_control

    return str(Path(dm_control.__file__).parent / "suite" / "humanoid.xml")


def mj_states(mm, n, seed=1):
    """MuJoCo ``qpos, qvel, qacc, tau`` batches: unit quaternions, hinges around ``qpos0``."""
    rng = np.random.default_rng(seed)
    qpos = np.tile(np.asarray(mm.qpos0), (n, 1))
    for j in range(mm.njnt):
        adr, typ = int(mm.jnt_qposadr[j]), int(mm.jnt_type[j])
        if typ == 0:
            qpos[:, adr : adr + 3] = rng.uniform(-1, 1, (n, 3))
            qu = rng.standard_normal((n, 4))
            qpos[:, adr + 3 : adr + 7] = qu / np.linalg.norm(qu, axis=1, keepdims=True)
        elif typ == 1:
            qu = rng.standard_normal((n, 4))
            qpos[:, adr : adr + 4] = qu / np.linalg.norm(qu, axis=1, keepdims=True)
        else:
            qpos[:, adr] += rng.uniform(-1, 1, n)
    return qpos, rng.standard_normal((n, mm.nv)), rng.standard_normal((n, mm.nv))


def _compile_and_time(f, args, batch):
    jf = jax.jit(f) if batch == 1 else jax.jit(jax.vmap(f))
    a = tuple(x[0] for x in args) if batch == 1 else args
    t0 = time.perf_counter()
    c = jf.lower(*a).compile()
    tc = time.perf_counter() - t0
    t = timed(c, a)
    ok = all(bool(jnp.all(jnp.isfinite(y))) for y in jax.tree_util.tree_leaves(c(*a)))
    return t / batch * 1e6, tc, ok


def bench_jaxdyn(path, batches, dtype):
    import jaxdyn

    r = jaxdyn.load_mjcf(path)  # the whole file (nothing needs ignoring)
    model, conv = r.model.astype(dtype), r.converter()
    qpos, qvel, qacc = mj_states(r.mj_model, max(batches))
    q = np.array([conv.q_from_mujoco(x) for x in qpos])
    v = np.array([conv.v_from_mujoco(a, b) for a, b in zip(q, qvel)])
    q, v, a = (jnp.asarray(x, dtype) for x in (q, v, qacc))
    fns = {
        "rnea": (lambda q, v, a: jaxdyn.rnea(model, q, v, a), (q, v, a)),
        "crba": (lambda q: jaxdyn.crba(model, q), (q,)),
        "aba": (lambda q, v, t: jaxdyn.aba(model, q, v, t), (q, v, 10 * a)),
    }
    out = {}
    for name, (f, args) in fns.items():
        for B in batches:
            us, tc, ok = _compile_and_time(f, tuple(x[:B] for x in args), B)
            out[f"{name}/{B}"] = (us, tc, ok)
            print(
                f"jaxdyn {name:5s} {dtype.name} B={B:5d} {us:9.3f} us/sample  compile {tc:5.1f} s"
            )
    return out, r


def bench_mjx(path, batches, dtype):
    import mujoco
    from mujoco import mjx

    mm = mujoco.MjModel.from_xml_path(path)
    D = mujoco.mjtDisableBit
    off = D.mjDSBL_CONSTRAINT | D.mjDSBL_ACTUATION | D.mjDSBL_CONTACT
    for flag in ("mjDSBL_PASSIVE", "mjDSBL_SPRING", "mjDSBL_DAMPER"):
        if hasattr(D, flag):
            off |= getattr(D, flag)
    mm.opt.disableflags |= int(off)
    try:
        mx = mjx.put_model(mm, impl="jax")
        dx = mjx.make_data(mx, impl="jax")
    except TypeError:  # older mujoco-mjx: no impl argument
        mx = mjx.put_model(mm)
        dx = mjx.make_data(mx)

    def cast(x):
        if isinstance(x, (np.ndarray, jax.Array)) and jnp.issubdtype(x.dtype, jnp.floating):
            return x.astype(dtype)
        return x

    mx, dx = jax.tree_util.tree_map(cast, mx), jax.tree_util.tree_map(cast, dx)
    qpos, qvel, qacc = (jnp.asarray(x, dtype) for x in mj_states(mm, max(batches)))

    def inverse(qpos, qvel, qacc):
        return mjx.inverse(mx, dx.replace(qpos=qpos, qvel=qvel, qacc=qacc)).qfrc_inverse

    def crb(qpos):
        d = mjx.crb(mx, mjx.com_pos(mx, mjx.kinematics(mx, dx.replace(qpos=qpos))))
        return mjx.full_m(mx, d)

    def forward(qpos, qvel, tau):
        return mjx.forward(mx, dx.replace(qpos=qpos, qvel=qvel, qfrc_applied=tau)).qacc

    fns = {
        "inverse": (inverse, (qpos, qvel, qacc)),
        "crb": (crb, (qpos,)),
        "forward": (forward, (qpos, qvel, 10 * qacc)),
    }
    out = {}
    for name, (f, args) in fns.items():
        for B in batches:
            us, tc, ok = _compile_and_time(f, tuple(x[:B] for x in args), B)
            out[f"{name}/{B}"] = (us, tc, ok)
            print(f"MJX {name:8s} {dtype.name} B={B:5d} {us:9.3f} us/sample  compile {tc:5.1f} s")
    return out


def run_mjx_child(path, batches, dtype_name, timeout):
    """MJX timings from a child process (``None`` on timeout or failure)."""
    cmd = [sys.executable, __file__, "--mjx-child", "--batches", ",".join(map(str, batches)),
           "--dtypes", dtype_name, "--path", path]  # fmt: skip
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ)
    except subprocess.TimeoutExpired:
        print(f"MJX {dtype_name}: timed out after {timeout} s")
        return None, f"timed out after {timeout} s"
    for line in p.stdout.splitlines():
        if line.startswith("MJX "):
            print(line)
        if line.startswith("JSON "):
            return json.loads(line[5:]), ""
    print(p.stderr[-3000:])
    return None, f"child failed (exit {p.returncode})"


def _fmt(us):
    return f"{us:,.2f}" if us < 100 else f"{us:,.0f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,128,1024")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--skip-mjx", action="store_true")
    ap.add_argument("--mjx-timeout", type=float, default=900)
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    ap.add_argument("--path", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mjx-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    batches = [int(b) for b in a.batches.split(",")]
    path = a.path or humanoid_path()
    if a.mjx_child:
        name = a.dtypes
        if name == "float64":
            jax.config.update("jax_enable_x64", True)
        res = bench_mjx(path, [b for b in batches if b <= 1024], jnp.dtype(name))
        print("JSON " + json.dumps(res))
        return
    rows, loaded, notes = [], None, []
    load0 = os.getloadavg()[0]
    for name in a.dtypes.split(","):
        # float32 runs with x64 off (MJX promotes parts of a float32 model otherwise)
        jax.config.update("jax_enable_x64", name == "float64")
        jx, loaded = bench_jaxdyn(path, batches, jnp.dtype(name))
        mj, why = ({}, "skipped") if a.skip_mjx else run_mjx_child(
            path, batches, name, a.mjx_timeout
        )  # fmt: skip
        if mj is None:
            mj = {}
            notes.append(f"MJX {name}: {why}")
        for jname, mname in PAIRS:
            for B in batches:
                j = jx[f"{jname}/{B}"]
                m = mj.get(f"{mname}/{B}")
                ok = j[2] and (m is None or m[2])
                cells = [name, f"{jname} / mjx {mname}" + ("" if ok else " (non-finite!)"),
                         str(B), _fmt(j[0]), _fmt(m[0]) if m else "n/a",
                         f"{m[0] / j[0]:.2f}x" if m else "", f"{j[1]:.1f}",
                         f"{m[1]:.1f}" if m else ""]  # fmt: skip
                rows.append("| " + " | ".join(cells) + " |")
    mm = loaded.mj_model
    import mujoco

    body = [
        f"Machine: {cpu_name()}, {platform.machine()}; jax {jax.__version__}, mujoco "
        f"{mujoco.__version__}; single-threaded XLA ({_env.threading_note()}); run "
        f"{time.strftime('%Y-%m-%d %H:%M')} UTC by `python benchmarks/mjcf.py`; load average "
        f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end on {os.cpu_count()} "
        "cores (other work shares the machine when it exceeds 1).",
        "",
        f"`{Path(path).parent.name}/{Path(path).name}` from "
        f"{'mujoco-mjx test data' if 'mjx' in path else 'dm_control suite'} (nq = {mm.nq}, "
        f"nv = {mm.nv}, {mm.nbody - 1} bodies, armature), loaded by `jaxdyn.load_mjcf` "
        "(the whole file; the rigid-body model timed) and by MJX from the same "
        "compiled MjModel with constraints, passive forces, actuation and contacts disabled. "
        "Per-sample microseconds of `jax.jit(jax.vmap(f))` (`jax.jit(f)` at batch 1) on random "
        "states; MJX at batch <= 1024 only. `mjx inverse` = kinematics, com, CRB mass matrix + "
        "factorisation, RNE bias, M qacc + bias; `mjx crb` = kinematics, com, CRB, dense M "
        "(`full_m`); `mjx forward` = kinematics, com, CRB + Cholesky, bias, solve (no ABA). "
        "Ratio: MJX time over jaxdyn's (> 1: jaxdyn faster).",
        "",
        "| dtype | jaxdyn / MJX | batch | jaxdyn us/sample | MJX us/sample | MJX / jaxdyn | "
        "jaxdyn compile s | MJX compile s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]
    if notes:
        body += ["", "Notes: " + "; ".join(notes) + "."]
    write_section(Path(a.out), "## MJCF humanoid\n\n" + "\n".join(body))
    print("\n".join(body))


if __name__ == "__main__":
    main()

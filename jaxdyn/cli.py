"""The ``jaxdyn`` command line.

Subcommands::

    jaxdyn info ROBOT [--floating | --fixed]     # model summary: tree, sizes, masses, joints
    jaxdyn demo [--batch N] [--dtype float32|float64]
                                                 # batched ABA / RNEA / CRBA on the bundled robots
    jaxdyn bench ...                             # benchmarks (see ``jaxdyn bench --help``)
    jaxdyn render MODEL TRAJ.npz -o out.mp4      # film a trajectory (.mp4 .gif .html .png)
    jaxdyn sim MODEL --seconds 2 -o fall.mp4     # drop the robot on the ground and film it
    jaxdyn view MODEL [TRAJ.npz]                 # browser viewer with joint sliders (prints URL)

``jaxdyn bench`` runs the repository's harness (``benchmarks/harness.py``: jaxdyn against
Pinocchio and MJX, PASS/MISS targets) when jaxdyn runs from a checkout, and otherwise (an
installed package, or ``--standalone``) times jaxdyn alone: ``jax.jit(jax.vmap(f))`` per sample
and its compile time, on bundled robots. The options README lists (``--quick``, ``--robots``,
``--algorithms``, ``--batches``, ``--dtypes``, ``--repeats``, ``--out``) work in both modes.

``ROBOT`` is a URDF file path, a bundled robot (``arm7``, ``quad12``) or an example-robot-data
name (``ur5``, ``panda``, ``solo12``, ... ; needs ``pip install example-robot-data``).

User errors (unknown robot, malformed URDF, bad arguments) print one ``error: ...`` line on
stderr and exit with status 2. ``demo`` exits with 1 if its consistency checks fail.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from jax.typing import DTypeLike

__all__ = ["main"]


class UserError(Exception):
    """An error caused by the user's input: reported on one line, exit status 2."""


def _one_line(e: BaseException) -> str:
    msg = " ".join(str(e).split())
    return msg or type(e).__name__


# --------------------------------------------------------------------------- helpers
def _load(robot: str, floating_base):
    from . import robots

    try:
        path, default_fb = robots.resolve(robot)
        fb = default_fb if floating_base is None else floating_base
        model = robots.load(str(path), floating_base=fb)
    except (ValueError, TypeError, OSError) as e:
        raise UserError(_one_line(e)) from None
    return path, model


def _timeit(fn, *args, repeat: int = 5):
    """Median wall time of ``fn(*args)`` (blocked until ready) over ``repeat`` calls."""
    import jax

    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _fmt_time(s: float) -> str:
    if s >= 1.0:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.2f} us"
    return f"{s * 1e9:.0f} ns"


# --------------------------------------------------------------------------- info
_FLOATING = "floating (root_joint: q = [x y z qw qx qy qz], v = [w; v] in base coordinates)"


def _cmd_info(args) -> int:
    import numpy as np

    from . import joints
    from .clusters.model import ClusterModel

    path, loaded = _load(args.robot, args.floating_base)
    out = []
    if isinstance(loaded, ClusterModel):  # a URDF+ file: its clusters, then its spanning tree
        model = loaded.tree
        out += [loaded.describe(), "", "spanning tree (the loops and couplings cut):"]
    else:
        model = loaded
    t = model.topo
    mass = np.asarray(model.mass, dtype=float)
    out += [
        model.describe(),
        "",
        f"source      {path}",
        f"base        {_FLOATING if model.floating_base else 'fixed'}",
        f"nq / nv     {model.nq} / {model.nv}",
        f"bodies      {model.nb}",
        f"depth       {model.depth}",
        f"total mass  {mass.sum():.6g} kg",
        f"frames      {len(model.frame_names)}",
        "",
        f"joints in q/v order ({len(model.joint_names)}):",
    ]
    wj = max([len("joint")] + [len(n) for n in t.joint_names])
    wb = max([len("body")] + [len(n) for n in t.body_names])
    out.append(
        f"  {'#':>3}  {'joint':<{wj}}  {'type':<9}  {'q':<7}  {'v':<7}  "
        f"{'body':<{wb}}  {'parent':<{wb}}  mass [kg]"
    )
    for b in range(t.nb):
        q0, v0 = int(t.q_start[b]), int(t.v_start[b])
        qs = f"{q0}:{q0 + int(t.nq_j[b])}"
        vs = f"{v0}:{v0 + int(t.nv_j[b])}"
        p = int(t.parent[b])
        parent = t.body_names[p] if p >= 0 else ("world" if model.floating_base else t.root_name)
        kind = joints.KIND_NAMES[int(t.kind[b])]
        out.append(
            f"  {b:>3}  {t.joint_names[b]:<{wj}}  {kind:<9}  {qs:<7}  {vs:<7}  "
            f"{t.body_names[b]:<{wb}}  {parent:<{wb}}  {mass[b]:.6g}"
        )
    if not model.floating_base:
        out.append(f"  (root link {t.root_name!r} is welded to the world)")
    print("\n".join(out))
    return 0


# --------------------------------------------------------------------------- demo
def _max_rel(got, ref):
    """Largest per-sample relative error ``|got - ref| / |ref|`` (2-norms; inf if not finite)."""
    import numpy as np

    num = np.linalg.norm(got - ref, axis=-1)
    den = np.maximum(np.linalg.norm(ref, axis=-1), np.finfo(np.float64).tiny)
    r = num / den
    return float(r.max()) if np.all(np.isfinite(r)) else float("inf")


DEMO_ROBOTS = ("arm7", "quad12")


def _demo_robot(name: str, batch: int, dtype, n_check: int, tol: float) -> bool:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxdyn

    from . import robots

    model = robots.load(name).astype(dtype)
    print("=" * 78)
    print(model.describe())
    print()

    kq, kv, kt = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.jit(jax.vmap(lambda k: jaxdyn.random_configuration(model, k, dtype=dtype)))(
        jax.random.split(kq, batch)
    )
    v = jax.random.normal(kv, (batch, model.nv), dtype)
    tau = 5.0 * jax.random.normal(kt, (batch, model.nv), dtype)
    f_aba = jax.jit(jax.vmap(jaxdyn.aba, in_axes=(None, 0, 0, 0)))
    f_rnea = jax.jit(jax.vmap(jaxdyn.rnea, in_axes=(None, 0, 0, 0)))
    f_crba = jax.jit(jax.vmap(jaxdyn.crba, in_axes=(None, 0)))

    def compile_(f, *a):
        t = time.perf_counter()
        c = f.lower(*a).compile()
        return c, time.perf_counter() - t

    def report(label, compiled, ct, *a):
        rt = _timeit(compiled, *a)
        print(
            f"  {label:<34} compile {ct:6.2f} s   run {_fmt_time(rt):>9} / batch "
            f"= {_fmt_time(rt / batch):>9} / sample"
        )

    print(
        f"{name}: batch of {batch} random states, {jnp.dtype(dtype).name}, "
        f"device {jax.devices()[0].platform}"
    )
    c_aba, t_aba = compile_(f_aba, model, q, v, tau)
    qdd = c_aba(model, q, v, tau)
    report("aba   (forward dynamics)", c_aba, t_aba, model, q, v, tau)
    c_rnea, t_rnea = compile_(f_rnea, model, q, v, qdd)
    tau_back = c_rnea(model, q, v, qdd)
    report("rnea  (inverse dynamics)", c_rnea, t_rnea, model, q, v, qdd)
    c_crba, t_crba = compile_(f_crba, model, q)
    M = c_crba(model, q)
    report("crba  (mass matrix)", c_crba, t_crba, model, q)

    # Check 1: qdd from ABA against solve(M, tau - b) on a few samples (solved in float64).
    k = min(n_check, batch)
    b = jax.jit(jax.vmap(jaxdyn.bias_forces, in_axes=(None, 0, 0)))(model, q[:k], v[:k])
    M_k, b_k, tau_k = (np.asarray(x, dtype=np.float64) for x in (M[:k], b, tau[:k]))
    ref = np.linalg.solve(M_k, (tau_k - b_k)[..., None])[..., 0]
    got = np.asarray(qdd[:k], dtype=np.float64)
    rel = _max_rel(got, ref)
    ok1 = bool(rel < tol)
    print(
        f"  check aba == solve(crba, tau - bias_forces), {k} samples: "
        f"max rel. err {rel:.1e}  {'OK' if ok1 else 'FAILED'}"
    )
    # Check 2: inverse of forward dynamics, on the whole batch.
    rel2 = _max_rel(np.asarray(tau_back, np.float64), np.asarray(tau, np.float64))
    ok2 = bool(rel2 < tol)
    print(
        f"  check rnea(q, v, aba(q, v, tau)) == tau, {batch} samples: "
        f"max rel. err {rel2:.1e}  {'OK' if ok2 else 'FAILED'}"
    )
    return ok1 and ok2


def _cmd_demo(args) -> int:
    import jax

    if args.batch < 1:
        raise UserError(f"--batch must be >= 1, got {args.batch}")
    x64 = args.dtype == "float64"
    # JAX adds its flags to jax.config at run time: type checkers do not see them
    previous = bool(jax.config.jax_enable_x64)  # pyright: ignore[reportAttributeAccessIssue]
    t0 = time.perf_counter()
    try:
        if x64 and not previous:
            jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        dtype = jnp.float64 if x64 else jnp.float32
        tol = 1e-8 if x64 else 1e-2
        ok = True
        for name in DEMO_ROBOTS:
            ok &= _demo_robot(name, args.batch, dtype, n_check=8, tol=tol)
    finally:
        if x64 and not previous:
            jax.config.update("jax_enable_x64", False)
    print("=" * 78)
    print(
        f"demo {'passed' if ok else 'FAILED'} in {time.perf_counter() - t0:.1f} s "
        "(compile times dominate; run times are per call of the jitted, vmapped function)"
    )
    return 0 if ok else 1


# --------------------------------------------------------------------------- bench
def _harness_dir():
    """The repository's ``benchmarks/`` folder when jaxdyn runs from a checkout, else ``None``
    (an installed package has no benchmark harness)."""
    from pathlib import Path

    d = Path(__file__).resolve().parent.parent / "benchmarks"
    return d if (d / "harness.py").is_file() and (d / "_env.py").is_file() else None


def _cmd_bench(rest) -> int:
    rest = list(rest)
    standalone = "--standalone" in rest
    rest = [a for a in rest if a != "--standalone"]
    d = None if standalone else _harness_dir()
    if d is None:
        return _bench_standalone(rest)
    import importlib.util

    if str(d) not in sys.path:
        sys.path.insert(0, str(d))  # as when a script of benchmarks/ runs: harness imports _env
    path = d / "harness.py"
    try:
        harness = sys.modules.get("harness")
        if harness is None or getattr(harness, "__file__", None) != str(path):
            # by path: another module named ``harness`` on sys.path must not be picked up
            spec = importlib.util.spec_from_file_location("harness", path)
            if spec is None or spec.loader is None:  # (a .py file has both)
                raise UserError(f"jaxdyn bench: cannot load the benchmark harness {path}")
            harness = importlib.util.module_from_spec(spec)
            sys.modules["harness"] = harness
            try:
                spec.loader.exec_module(harness)
            except BaseException:
                del sys.modules["harness"]
                raise
    except ModuleNotFoundError as e:
        raise UserError(
            f"jaxdyn bench: the benchmark harness ({path}) needs the "
            f"package {e.name!r}: pip install 'jaxdyn[bench]'"
        ) from None
    try:
        rc = harness.main(rest)
    except SystemExit as e:  # argparse inside the harness
        rc = e.code
    if rc is None:
        return 0
    return rc if isinstance(rc, int) else 1


_STANDALONE_ALGS = ("rnea", "crba", "aba", "minv")
_DTYPES = ("float32", "float64")
#: ``--quick``: a smoke run of a few seconds (explicit options override each entry)
_QUICK = {
    "robots": ["arm7"],
    "algorithms": ["rnea", "aba"],
    "batches": [64],
    "dtypes": ["float64"],
    "repeats": 3,
}
_DEFAULTS = {
    "robots": ["quad12"],
    "algorithms": list(_STANDALONE_ALGS),
    "batches": [1024],
    "dtypes": ["float32"],
    "repeats": 5,
}


def _csv(what: str, conv: Callable[[str], Any] = str) -> Callable[[str], list]:
    """argparse type: a comma-separated list of ``what``, each converted by ``conv``."""

    def parse(text: str) -> list:
        try:
            items = [conv(x.strip()) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {what} list {text!r}") from None
        if not items:
            raise argparse.ArgumentTypeError(f"empty list of {what}s")
        return items

    return parse


def _bench_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxdyn bench",
        description="Time jaxdyn alone: per-sample time of jax.jit(jax.vmap(f)) and its compile "
        "time, for f in rnea / crba / aba / minv. (From a checkout of the repository "
        "this command runs the full harness of benchmarks/harness.py instead, with "
        "Pinocchio and MJX; --standalone forces this mode.) The options of both modes "
        "that README lists (--quick, --robots, --algorithms, --batches, --dtypes, --repeats, "
        "--out) mean the same in both.",
    )
    p.add_argument(
        "--robots",
        "--robot",
        dest="robots",
        type=_csv("robot"),
        default=None,
        metavar="LIST",
        help="comma-separated bundled robots (arm7, quad12), URDF paths or example-robot-data "
        "names (default quad12)",
    )
    p.add_argument(
        "--algorithms",
        "--algs",
        dest="algorithms",
        type=_csv("algorithm"),
        default=None,
        metavar="LIST",
        help=f"comma-separated subset of {','.join(_STANDALONE_ALGS)} (default all)",
    )
    p.add_argument(
        "--batches",
        "--batch",
        dest="batches",
        type=_csv("batch", conv=int),
        default=None,
        metavar="N[,N...]",
        help="batch sizes (default 1024)",
    )
    p.add_argument(
        "--dtypes",
        "--dtype",
        dest="dtypes",
        type=_csv("dtype"),
        default=None,
        metavar="float32|float64[,...]",
        help="floating-point types (default float32)",
    )
    p.add_argument(
        "--repeats", type=int, default=None, help="timed calls, their median (default 5)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run (a few seconds): arm7, rnea+aba, batch 64, float64, 3 repeats; "
        "explicit options override",
    )
    p.add_argument("--out", default=None, metavar="FILE", help="write a Markdown report to FILE")
    return p


def _bench_standalone(argv) -> int:
    try:
        a = _bench_parser().parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    preset = _QUICK if a.quick else _DEFAULTS
    opts = {k: preset[k] if getattr(a, k) is None else getattr(a, k) for k in _DEFAULTS}
    for name, choices in (("algorithms", _STANDALONE_ALGS), ("dtypes", _DTYPES)):
        bad = [x for x in opts[name] if x not in choices]
        if bad:
            raise UserError(f"--{name}: unknown {', '.join(bad)}; choose from {', '.join(choices)}")
    if any(b < 1 for b in opts["batches"]) or opts["repeats"] < 1:
        raise UserError("--batches and --repeats must be >= 1")
    if a.out is not None:
        from pathlib import Path

        parent = Path(a.out).expanduser().resolve().parent
        if not parent.is_dir():
            raise UserError(f"--out {a.out}: the folder {parent} does not exist")
    models = {r: _load(r, None)[1] for r in opts["robots"]}  # unknown robots before any timing

    import jax

    x64 = "float64" in opts["dtypes"]
    # JAX adds its flags to jax.config at run time: type checkers do not see them
    previous = bool(jax.config.jax_enable_x64)  # pyright: ignore[reportAttributeAccessIssue]
    try:
        if x64 and not previous:
            jax.config.update("jax_enable_x64", True)
        rows = [
            row
            for r in opts["robots"]
            for dtype in opts["dtypes"]
            for batch in opts["batches"]
            for row in _bench_run(models[r], opts["algorithms"], batch, dtype, opts["repeats"])
        ]
    finally:
        if x64 and not previous:
            jax.config.update("jax_enable_x64", False)
    if a.out is not None:
        with open(os.path.expanduser(a.out), "w") as f:
            f.write(_bench_markdown(rows, ["jaxdyn", "bench"] + list(argv)))
        print(f"wrote {a.out}", file=sys.stderr)
    return 0


def _bench_run(model, algs, B: int, dtype: DTypeLike, repeats: int) -> list[dict]:
    """Time ``jit(vmap(f))`` of each of ``algs`` on ``model`` at batch ``B``; print a line per
    algorithm and return the rows of the report."""
    import jax
    import jax.numpy as jnp

    import jaxdyn

    dtype = jnp.dtype(dtype)
    model = model.astype(dtype)
    kq, kv, kt = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.jit(jax.vmap(lambda k: jaxdyn.random_configuration(model, k, dtype=dtype)))(
        jax.random.split(kq, B)
    )
    v = jax.random.normal(kv, (B, model.nv), dtype)
    u = jax.random.normal(kt, (B, model.nv), dtype)
    calls = {
        "rnea": (jaxdyn.rnea, (q, v, u)),
        "crba": (jaxdyn.crba, (q,)),
        "aba": (jaxdyn.aba, (q, v, u)),
        "minv": (jaxdyn.minv, (q,)),
    }
    print(model.describe())
    print(
        f"jaxdyn bench (jaxdyn alone): {model.name}, batch {B}, {dtype.name}, device "
        f"{jax.devices()[0].platform}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"
    )
    rows = []
    for alg in algs:
        f, xs = calls[alg]
        axes = (None,) + (0,) * len(xs)
        jf = jax.jit(jax.vmap(f, in_axes=axes))
        t = time.perf_counter()
        compiled = jf.lower(model, *xs).compile()
        ct = time.perf_counter() - t
        jax.block_until_ready(compiled(model, *xs))  # warm-up
        rt = _timeit(compiled, model, *xs, repeat=repeats)
        print(
            f"  {alg:<5} compile {ct:6.2f} s   run {_fmt_time(rt):>9} / batch "
            f"= {_fmt_time(rt / B):>9} / sample"
        )
        rows.append(
            dict(
                robot=model.name,
                nq=model.nq,
                nv=model.nv,
                dtype=dtype.name,
                batch=B,
                algorithm=alg,
                compile_s=ct,
                batch_s=rt,
                device=jax.devices()[0].platform,
            )
        )
    return rows


def _bench_markdown(rows, argv) -> str:
    """The ``--out`` report: how it was run, then one table row per timing."""
    import platform

    import jax

    from . import __version__

    lines = [
        "# jaxdyn bench (jaxdyn alone)",
        "",
        f"`{' '.join(argv)}`: jaxdyn {__version__}, JAX {jax.__version__}, Python "
        f"{platform.python_version()}, device {rows[0]['device'] if rows else '-'}, "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}. Per-sample time of "
        "`jax.jit(jax.vmap(f))` (median of the timed calls, after a warm-up) and its compile "
        "time.",
        "",
        "| robot | nq / nv | dtype | batch | algorithm | compile | per batch | per sample |",
        "|---|---|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['robot']} | {r['nq']} / {r['nv']} | {r['dtype']} | {r['batch']} | "
            f"{r['algorithm']} | {r['compile_s']:.2f} s | {_fmt_time(r['batch_s'])} | "
            f"{_fmt_time(r['batch_s'] / r['batch'])} |"
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- viz: render, sim, view
# (jaxdyn.viz; imported only by these commands)
_MODEL_HELP = "URDF path, MJCF file (.xml), bundled robot (arm7, quad12) or example-robot-data name"


def _viz_scene(args):
    try:
        from .viz import Scene
    except ImportError as e:  # pragma: no cover - numpy-only parts; MuJoCo is checked later
        raise UserError(f"{_one_line(e)} (pip install 'jaxdyn[viz]')") from None
    try:
        return Scene.load(
            args.model, floating_base=args.floating_base, allow_outside=args.allow_outside
        )
    except (ValueError, TypeError, OSError) as e:
        raise UserError(_one_line(e)) from None


def _viz_trajectory(path, model):
    """``(q (T, nq) or (B, T, nq), dt or None, forces or None)`` from a ``.npz`` file with
    ``q`` (also ``qs``), optional ``dt`` and ``forces``."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            key = "q" if "q" in z else "qs" if "qs" in z else None
            if key is None:
                raise UserError(f"{path}: no array 'q' (T, nq) in the file; it has {sorted(z)}")
            q = np.asarray(z[key], float)
            dt = float(z["dt"]) if "dt" in z else None
            forces = np.asarray(z["forces"], float) if "forces" in z else None
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: {_one_line(e)}") from None
    if q.ndim not in (2, 3) or q.shape[-1] != model.nq:
        raise UserError(
            f"{path}: q has shape {q.shape}, expected (T, nq) or (B, T, nq) with "
            f"nq={model.nq} for {model.name!r}"
        )
    if not np.all(np.isfinite(q)):
        raise UserError(f"{path}: q has non-finite entries")
    return q, dt, forces


def _viz_write(scene, q, dt, out, args, forces=None):
    """Write ``q`` (every ``dt`` s) to ``out`` (:func:`jaxdyn.viz.save_rollout`)."""
    from . import viz

    fs = forces if args.forces else None
    try:
        viz.save_rollout(
            scene,
            q,
            out,
            dt=dt,
            fps=args.fps,
            width=args.width,
            height=args.height,
            camera=viz.Camera(follow=None if args.fixed_camera else "base"),
            forces=fs,
            contact_points=args.contacts and fs is None,
            progress=True,
        )
    except (ImportError, ValueError, RuntimeError) as e:  # (RuntimeError: no OpenGL)
        raise UserError(_one_line(e)) from None
    print(f"wrote {out}")


def _cmd_render(args) -> int:
    scene = _viz_scene(args)
    q, dt, forces = _viz_trajectory(args.trajectory, scene.cluster or scene.model)
    dt = args.dt or dt or 0.02
    _viz_forces(args, scene, q, forces)
    _viz_write(scene, q, dt, args.output, args, forces)
    return 0


def _viz_forces(args, scene, q, forces) -> None:
    """Check ``--forces`` / ``--contacts`` against the trajectory file; give ``scene`` the
    contact spheres that ``jaxdyn sim`` uses when it has none."""
    if not (args.forces or args.contacts):
        return
    if args.forces and forces is None:
        raise UserError(f"--forces: {args.trajectory} has no array 'forces'")
    if scene.contacts is None:  # the contact boxes of `jaxdyn sim` (same geometry)
        from .viz.drop import contacts_from_geometry

        scene.contacts = contacts_from_geometry(scene)
    nc = scene.contacts.n
    if args.forces and (forces.shape[-2:] != (nc, 3) or forces.shape[:-2] != q.shape[:-1]):
        raise UserError(
            f"{args.trajectory}: forces has shape {forces.shape}, expected "
            f"{q.shape[:-1] + (nc, 3)} (the model's {nc} contact spheres)"
        )


def _cmd_sim(args) -> int:
    import numpy as np

    from .viz.drop import drop

    if not args.seconds > 0:
        raise UserError(f"--seconds must be > 0, got {args.seconds}")
    scene = _viz_scene(args)
    n = int(round(args.seconds / args.dt))
    print(
        f"simulating {scene.model.name}: {args.seconds} s, {n} steps of {args.dt} s "
        "(compiling first)",
        file=sys.stderr,
        flush=True,
    )
    t0 = time.perf_counter()
    try:
        q, forces, scene = drop(
            scene,
            args.seconds,
            height=args.drop_height,
            dt=args.dt,
            hold=not args.limp,
            forces=args.forces,
            progress=True,
        )
    except ValueError as e:
        raise UserError(_one_line(e)) from None
    print(f"simulated in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    if args.save:
        extra: dict[str, Any] = {} if forces is None else {"forces": forces}
        np.savez(args.save, q=q, dt=args.dt, **extra)
        print(f"wrote {args.save} (q {q.shape}, dt{', forces' if extra else ''})")
    _viz_write(scene, q, args.dt, args.output, args, forces)
    return 0


def _cmd_view(args) -> int:
    from .viz.server import serve

    scene = _viz_scene(args)
    q, dt, forces = None, args.dt or 0.02, None
    if args.trajectory:
        q, dt_file, forces = _viz_trajectory(args.trajectory, scene.cluster or scene.model)
        dt = args.dt or dt_file or dt
    elif args.forces:
        raise UserError("--forces needs a trajectory file with its forces (TRAJ.npz)")
    _viz_forces(args, scene, q, forces)
    try:
        server = serve(
            scene,
            q,
            dt=dt,
            host=args.host,
            port=args.port,
            block=False,
            forces=forces if args.forces else None,
            contact_points=args.contacts and not args.forces,
        )
    except OSError as e:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {_one_line(e)}") from None
    except ValueError as e:
        raise UserError(_one_line(e)) from None
    print(f"jaxdyn view: {server.url}  (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()
        return 0


def _add_base_flags(p) -> None:
    """``--floating`` / ``--fixed`` (``floating_base``: None keeps the file's or robot's own)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--floating",
        dest="floating_base",
        action="store_const",
        const=True,
        default=None,
        help="attach the root link by a free joint (root_joint)",
    )
    g.add_argument(
        "--fixed",
        dest="floating_base",
        action="store_const",
        const=False,
        help="weld the root link to the world",
    )


def _add_viz_parsers(sub) -> None:
    def model_args(p):
        p.add_argument("model", metavar="MODEL", help=_MODEL_HELP)
        _add_base_flags(p)
        p.add_argument(
            "--allow-outside",
            action="store_true",
            help="let a URDF read meshes outside its directory / package",
        )

    def output_args(p):
        p.add_argument(
            "-o",
            "--output",
            required=True,
            metavar="OUT",
            help="output: .mp4, .gif, .html (the viewer page) or .png (first step)",
        )
        p.add_argument("--width", type=int, default=640, help="frame width (default 640)")
        p.add_argument("--height", type=int, default=480, help="frame height (default 480)")
        p.add_argument("--fps", type=float, default=30.0, help="video frame rate (default 30)")
        p.add_argument("--fixed-camera", action="store_true", help="do not follow the base")
        p.add_argument(
            "--contacts", action="store_true", help="mark the contact points touching the ground"
        )

    pr = sub.add_parser(
        "render",
        help="render a trajectory (.npz) to a video, page or image",
        description="Render the configurations q (T, nq) of TRAJ.npz "
        "(optional dt, forces) of MODEL to a video, an HTML page or a PNG.",
    )
    model_args(pr)
    pr.add_argument("trajectory", metavar="TRAJ.npz", help="npz with q (T, nq), optional dt")
    output_args(pr)
    pr.add_argument(
        "--dt",
        type=float,
        default=None,
        help="time step of q (default: the file's dt, else 0.02 s)",
    )
    pr.add_argument("--forces", action="store_true", help="draw the file's contact forces")
    pr.set_defaults(func=_cmd_render)

    ps = sub.add_parser(
        "sim",
        help="drop the robot on the ground and film it",
        description="Simulate MODEL dropped on the ground with compliant "
        "contact (PD servos holding its nominal pose, or --limp) and film it.",
    )
    model_args(ps)
    ps.add_argument("--seconds", type=float, default=2.0, help="simulated time (default 2)")
    ps.add_argument("--dt", type=float, default=2e-3, help="time step (default 0.002 s)")
    ps.add_argument(
        "--drop-height",
        dest="drop_height",
        type=float,
        default=0.3,
        help="metres above standing (default 0.3)",
    )
    ps.add_argument("--limp", action="store_true", help="no servos: the robot falls limp")
    ps.add_argument("--save", metavar="TRAJ.npz", help="also save q, dt (and the forces)")
    ps.add_argument(
        "--no-forces", dest="forces", action="store_false", help="do not draw the contact forces"
    )
    output_args(ps)
    ps.set_defaults(func=_cmd_sim)

    pv = sub.add_parser(
        "view",
        help="serve the browser viewer (joint sliders, time slider)",
        description="Serve MODEL (and TRAJ.npz) in the browser viewer; "
        "prints the URL. Sliders move the joints (jaxdyn computes the poses).",
    )
    model_args(pv)
    pv.add_argument("trajectory", metavar="TRAJ.npz", nargs="?", help="optional trajectory")
    pv.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free)")
    pv.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    pv.add_argument("--dt", type=float, default=None, help="time step of the trajectory")
    pv.add_argument("--forces", action="store_true", help="draw the file's contact forces")
    pv.add_argument(
        "--contacts", action="store_true", help="mark the contact points touching the ground"
    )
    pv.set_defaults(func=_cmd_view)


# --------------------------------------------------------------------------- parser
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxdyn",
        description="Rigid-body dynamics in JAX: fast, batched, differentiable and exact.",
    )
    from . import __version__

    p.add_argument("--version", action="version", version=f"jaxdyn {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")

    pi = sub.add_parser(
        "info",
        help="print a model summary (tree, sizes, masses, joints)",
        description="Print a model summary: tree, nq/nv, bodies, depth, masses, "
        "frames and joint names in q/v order.",
    )
    pi.add_argument(
        "robot",
        metavar="ROBOT",
        help="URDF path, bundled robot (arm7, quad12) or example-robot-data name",
    )
    _add_base_flags(pi)
    pi.set_defaults(func=_cmd_info)

    pd = sub.add_parser(
        "demo",
        help="batched forward dynamics on the bundled arm and quadruped",
        description="Load the bundled arm7 and quad12, run jit(vmap(aba)) over "
        "random states, check it and time aba / rnea / crba.",
    )
    pd.add_argument(
        "--batch",
        type=int,
        default=1024,
        metavar="N",
        help="number of random states (default 1024)",
    )
    pd.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        default="float32",
        help="floating-point type (default float32)",
    )
    pd.set_defaults(func=_cmd_demo)

    _add_viz_parsers(sub)

    sub.add_parser(
        "bench",
        add_help=False,
        help="time the algorithms (jaxdyn bench --help; from a checkout: the full "
        "harness of benchmarks/, against Pinocchio and MJX)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``jaxdyn`` command line with ``argv`` (default ``sys.argv[1:]``); return the
    exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "bench":
            return _cmd_bench(argv[1:])
        parser = _parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help, --version, usage errors (argparse prints them)
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        if args.cmd is None:
            parser.print_help(sys.stderr)
            return 2
        return args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `jaxdyn info talos_full | head`
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes stdout
        except (OSError, ValueError, AttributeError):
            pass
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

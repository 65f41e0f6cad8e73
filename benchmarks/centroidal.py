"""Centroidal dynamics, frame motion and the Coriolis matrix against Pinocchio C++:
``python benchmarks/centroidal.py``.

jaxdyn's ``centroidal_momentum_matrix`` (``A_G``), ``centroidal_momentum_bias``
(``Adot_G v``) and ``centroidal_dynamics`` (both, with ``h_G``, the centre of mass and the
mass) per sample at batch ``B`` under the plain ``jax.jit(jax.vmap(f))`` (the batching rule's
chunks on the CPU), float64 and float32, and the batch-1 latency of ``jax.jit(f)``; against
Pinocchio compiled as C++ (``benchmarks/pinocchio_cpp.py``): ``ccrba`` (``A_G``, ``h_G`` and the
centre of mass, one call) and ``computeCentroidalMomentumTimeVariation`` at zero acceleration
(``h_G`` and ``Adot_G v``). ``centroidal_dynamics`` is compared with the sum of the two
Pinocchio calls. Frame motion: ``frame_velocity`` and ``frame_acceleration(classical=True)``
in ``"local_world_aligned"`` of the frame Pinocchio's benchmark uses (its model's last frame)
against ``forwardKinematics`` plus ``getFrameVelocity`` / ``getFrameClassicalAcceleration``.
``coriolis_matrix`` against ``computeCoriolisMatrix``.
Writes the section "Centroidal dynamics, frame motion and the Coriolis matrix against
Pinocchio C++" of
``benchmarks/RESULTS.md`` (``--out``). One thread each side (``benchmarks/_env.py``).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _env  # noqa: E402
from _env import cpu_name, reuse_freed_buffers, single_threaded, timed, write_section  # noqa: E402

#: jaxdyn function name -> (argument names, Pinocchio algorithms whose times add up to it)
FUNCTIONS = {
    "centroidal_momentum_matrix": (("q",), ("ccrba",)),
    "centroidal_momentum_bias": (("q", "v"), ("centroidal_bias",)),
    "centroidal_dynamics": (("q", "v"), ("ccrba", "centroidal_bias")),
    "coriolis_matrix": (("q", "v"), ("coriolis",)),
    "frame_velocity": (("q", "v"), ("frame_velocity",)),
    "frame_acceleration": (("q", "v", "a"), ("frame_acceleration",)),
}
FRAME_FUNCTIONS = ("frame_velocity", "frame_acceleration")


def bench_robot(name, dtypes, B, log):
    import jax
    import pinocchio_cpp
    from vs_cpp import _first_call, _states

    import jaxdyn
    from jaxdyn import robots

    path, fb = robots.resolve(name)
    log(f"[{name}] Pinocchio ...")
    pin = pinocchio_cpp.time_pinocchio(str(path), fb)
    pin_ns = {a: t["best"] for a, t in pin["ns_per_call"].items()}
    model = robots.load(name)
    rows = []
    for dtype in dtypes:
        st = _states(model, B, dtype)
        for fname, (names, pin_algs) in FUNCTIONS.items():
            f = getattr(jaxdyn, fname)
            if fname in FRAME_FUNCTIONS:
                frame = pin.get("notes", {}).get("frame")
                if frame not in model.frame_names:
                    log(f"[{name}] {fname}: Pinocchio's frame {frame!r} is not a jaxdyn frame")
                    continue
                kw = {"reference": "local_world_aligned"}
                kw.update({"classical": True} if fname == "frame_acceleration" else {})
                f = functools.partial(f, frame=frame, **kw)
            args = tuple(st[k] for k in names)
            jf = jax.jit(jax.vmap(f, in_axes=(None,) + (0,) * len(args)))
            row = {"robot": name, "dtype": dtype, "fn": fname}
            row["pin_ns"] = (
                sum(pin_ns[a] for a in pin_algs) if all(a in pin_ns for a in pin_algs) else None
            )
            row["compile_s"] = _first_call(jf, (model, *args))
            row["ns"] = timed(jf, (model, *args)) / B * 1e9
            if dtype == "float64":
                one = tuple(x[0] for x in args)
                j1 = jax.jit(f)
                _first_call(j1, (model, *one))
                row["b1_ns"] = timed(j1, (model, *one)) * 1e9
            rows.append(row)
            log(f"[{name}] {dtype} {fname}: {row['ns'] / 1e3:.2f} us per sample")
    return pin, rows


def _r(x, ref):
    return "-" if x is None or not ref else f"{x / ref:.2f}"


def render(results, B) -> str:
    import jax

    import jaxdyn

    lines = [
        "## Centroidal dynamics, frame motion and the Coriolis matrix against Pinocchio C++",
        "",
        f"`python benchmarks/centroidal.py` on {cpu_name()}, one thread each side "
        f"({_env.threading_note()}), jax {jax.__version__}, jaxdyn {jaxdyn.__version__}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. jaxdyn per sample at batch {B} "
        "under the plain `jax.jit(jax.vmap(f))` (random states), batch 1 = one `jax.jit(f)` "
        "call; Pinocchio C++ per call: `ccrba` (`A_G`, `h_G`, centre of mass) for "
        "`centroidal_momentum_matrix`, `computeCentroidalMomentumTimeVariation` at zero "
        "acceleration (`h_G`, `Adot_G v`) for `centroidal_momentum_bias`, their sum for "
        "`centroidal_dynamics`; `forwardKinematics` plus `getFrameVelocity` / "
        "`getFrameClassicalAcceleration` (local world aligned) of the frame named below for "
        "`frame_velocity` / `frame_acceleration(..., classical=True)` (Pinocchio places "
        "every body; jaxdyn's frame functions place the frame's supporting bodies only, "
        "`kinematics.chain_placements`); "
        "`computeCoriolisMatrix` for `coriolis_matrix`. "
        "Ratio: jaxdyn / Pinocchio (< 1: jaxdyn faster). One run: "
        "machine noise is +-20 % run to run.",
        "",
    ]
    for name, (pin, rows) in results.items():
        lines += [
            f"### {name}",
            "",
            f"Pinocchio {pin.get('pinocchio_version', '?')} ({pin.get('source', '?')}); frame "
            f"`{pin.get('notes', {}).get('frame', '?')}`.",
            "",
            "| dtype | function | Pinocchio us | jaxdyn us | ratio | batch 1 us | ratio "
            "| first call s |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            pin_ns = r["pin_ns"]
            b1 = r.get("b1_ns")
            lines.append(
                f"| {r['dtype']} | {r['fn']} | {(pin_ns or float('nan')) / 1e3:.2f} "
                f"| {r['ns'] / 1e3:.2f} | {_r(r['ns'], pin_ns)} "
                f"| {'-' if b1 is None else f'{b1 / 1e3:.2f}'} | {_r(b1, pin_ns)} "
                f"| {r['compile_s']:.1f} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python benchmarks/centroidal.py", description=__doc__.split("\n")[0]
    )
    p.add_argument("--robots", default="solo12,talos_full")
    p.add_argument("--dtypes", default="float64,float32")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--out", default=str(HERE / "RESULTS.md"))
    a = p.parse_args(argv)
    single_threaded()
    reuse_freed_buffers()
    import jax

    jax.config.update("jax_enable_x64", True)
    results = {}
    for name in a.robots.split(","):
        results[name] = bench_robot(name, a.dtypes.split(","), a.batch, print)
        jax.clear_caches()
    section = render(results, a.batch)
    print(section)
    write_section(a.out, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time Pinocchio's C++ algorithms directly, not through its Python bindings.

Why: every call through Pinocchio's Python bindings (``pinocchio.rnea(model, data, q, v, a)``)
pays roughly 0.5 us of Python/boost::python overhead (argument conversion, dispatch), which for
small robots is a large part of the call and flatters a batched library compared against it.
This module compiles ``pinocchio_cpp/bench.cpp`` against the headers and libraries of the
installed ``pin`` wheel and times the algorithms the way a C++ user calls them: one
``pinocchio::Data``, a loop over pre-drawn random states, no Python in the loop.

What is timed (per call, single thread, Pinocchio's default conventions): ``rnea``, ``crba``
(upper triangle of M only, as Pinocchio computes it), ``crba_full`` (``crba``, then the strictly
lower triangle copied from the upper one, the idiom Pinocchio documents: the full symmetric
``M`` that jaxdyn's ``crba`` returns), ``aba``, ``minv`` (``computeMinverse``, upper triangle
only), ``minv_full`` (mirrored likewise), ``rnea_derivatives`` (``computeRNEADerivatives``),
``aba_derivatives`` (``computeABADerivatives``), ``fk`` (``forwardKinematics(model, data, q)``),
``jacobians`` (``computeJointJacobians``), ``ccrba`` (centroidal momentum matrix, momentum and
centre of mass), ``centroidal_bias`` (``computeCentroidalMomentumTimeVariation`` at zero
acceleration), ``coriolis`` (``computeCoriolisMatrix``), ``frame_velocity`` /
``frame_acceleration`` (``forwardKinematics`` with ``v`` / ``v, a`` and ``getFrameVelocity`` /
``getFrameClassicalAcceleration`` of the model's last frame, named in ``notes["frame"]``, in
``LOCAL_WORLD_ALIGNED``). Each loops cyclically over ``n_states`` random states; the inner count
is calibrated so that one repeat lasts at least ``min_time``; the best and the median of
``repeats`` repeats are reported in ns per call.

How it is built (:func:`build`): ``c++ -O3 -march=native -DNDEBUG -std=c++17`` with the compile
definitions that Pinocchio's CMake package exports (read from
``<prefix>/lib/cmake/pinocchio/pinocchioTargets.cmake``), linked to ``libpinocchio_parsers`` and
``libpinocchio_default`` of the wheel (for the URDF parser) with an rpath. Two choices matter:

* ``PINOCCHIO_ENABLE_TEMPLATE_INSTANTIATION`` is *not* defined (by default): the algorithms are
  instantiated in ``bench.cpp`` and compiled with ``-march=native``, as in a from-source build
  for the machine. ``build(library_instances=True)`` (CLI ``--library-instances``) defines it,
  as Pinocchio's CMake target ``pinocchio::pinocchio`` does for its users: calls whose template
  arguments match the wheel's explicit instantiations (e.g. ``rnea``, ``computeJointJacobians``)
  then go to the wheel's pre-compiled code (built for generic x86-64), the rest is still
  compiled here. On an AMD EPYC (AVX2) both gave the same times within noise, except
  ``aba_derivatives`` on talos_full (~30 % slower with the library instances).
* ``-DEIGEN_MAX_ALIGN_BYTES=16 -DEIGEN_MALLOC_ALREADY_ALIGNED=1``: the wheel is compiled for
  SSE2 (16-byte Eigen alignment, plain ``malloc``); with AVX enabled Eigen would otherwise switch
  to 32-byte alignment and its hand-made aligned allocator, so a ``Model`` built by the parser
  library would be freed with the wrong ``free`` (a crash). These flags keep the ABI of the
  wheel while the code still uses AVX/FMA instructions.

The compile takes minutes and several GB of memory; the binary is cached in
``pinocchio_cpp/build/`` under a hash of the source, the compiler, the flags and the Pinocchio
version, so it is rebuilt only when one of them changes. Requirements besides ``pin``: a C++
compiler, ``pip install cmeel-eigen cmeel-urdfdom-headers`` (Eigen and urdfdom headers: the
``pin`` wheel ships neither). Without them :func:`time_pinocchio` falls back to timing the
Python bindings (:func:`time_python_fallback`), and says so in ``"source"``.

Only the standard library and numpy are imported at module level; ``pinocchio`` (fallback and
check) and ``jaxdyn`` (CLI robot names) are imported when needed.

CLI::

    python benchmarks/pinocchio_cpp.py solo12 talos_full [--check] [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _env import cpu_name  # noqa: E402  (benchmarks/_env.py: stdlib only)

__all__ = [
    "ALGORITHMS",
    "build",
    "build_command",
    "build_error",
    "check_against_bindings",
    "find_prefix",
    "time_cpp",
    "time_pinocchio",
    "time_python_fallback",
]

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "pinocchio_cpp" / "bench.cpp"
BUILD_DIR = HERE / "pinocchio_cpp" / "build"

#: algorithm keys of ``ns_per_call``, in output order
ALGORITHMS = (
    "rnea",
    "crba",
    "crba_full",
    "aba",
    "minv",
    "minv_full",
    "rnea_derivatives",
    "aba_derivatives",
    "fk",
    "jacobians",
    "ccrba",
    "centroidal_bias",
    "coriolis",
    "frame_velocity",
    "frame_acceleration",
)

OPT_FLAGS = ("-O3", "-march=native", "-DNDEBUG", "-std=c++17")
#: keep the Eigen ABI of the (SSE2) wheel libraries while compiling with AVX (module docstring)
ABI_FLAGS = ("-DEIGEN_MAX_ALIGN_BYTES=16", "-DEIGEN_MALLOC_ALREADY_ALIGNED=1")

#: used when the CMake package file cannot be read (values of pin 4.1)
_DEFAULT_DEFINITIONS = (
    "BOOST_MPL_LIMIT_LIST_SIZE=30",
    "BOOST_MPL_LIMIT_VECTOR_SIZE=30",
    "BOOST_MPL_CFG_NO_PREPROCESSED_HEADERS",
    "BOOST_FUSION_INVOKE_MAX_ARITY=12",
    "PINOCCHIO_WITH_URDFDOM",
    "PINOCCHIO_URDFDOM_HEADERS_MAJOR_VERSION=3",
    "PINOCCHIO_URDFDOM_HEADERS_MINOR_VERSION=0",
    "PINOCCHIO_URDFDOM_HEADERS_PATCH_VERSION=0",
)

#: why the last :func:`build` returned ``None`` (``None`` after a successful build)
build_error: str | None = None


# --------------------------------------------------------------------------------------------
# locating the wheel's C++ files


def find_prefix() -> Path | None:
    """The cmeel prefix of the installed ``pin`` wheel (``<site-packages>/cmeel.prefix``),
    or ``None``. It holds ``include/pinocchio``, ``include/boost``, ``include/eigen3`` (from
    ``cmeel-eigen``) and ``lib/libpinocchio_*.so``; :func:`build` checks what is missing."""
    candidates = []
    spec = importlib.util.find_spec("pinocchio")  # locates the package without importing it
    if spec is not None and spec.origin:
        # <site-packages>/cmeel.prefix/lib/python3.X/site-packages/pinocchio/__init__.py
        candidates += [p for p in Path(spec.origin).resolve().parents if p.name == "cmeel.prefix"]
    spec = importlib.util.find_spec("cmeel")
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).resolve().parent.parent / "cmeel.prefix")
    candidates += [Path(p) / "cmeel.prefix" for p in sys.path if p]
    for c in candidates:
        if (c / "include" / "pinocchio").is_dir():
            return c
    return None


def _missing(prefix: Path) -> list[str]:
    """What :func:`build` needs from ``prefix`` and does not find, with the install hint."""
    need = [
        ("include/pinocchio/config.hpp", "pip install pin"),
        ("include/boost/version.hpp", "pip install cmeel-boost"),
        ("include/eigen3/Eigen/Core", "pip install cmeel-eigen"),
        ("include/urdfdom_headers/urdf_model/model.h", "pip install cmeel-urdfdom-headers"),
        ("lib/libpinocchio_parsers.so", "pip install pin"),
        ("lib/libpinocchio_default.so", "pip install pin"),
        ("lib/liburdfdom_model.so", "pip install cmeel-urdfdom"),
    ]
    return [f"{prefix / rel} ({hint})" for rel, hint in need if not (prefix / rel).exists()]


def _pinocchio_version(prefix: Path) -> str:
    text = (prefix / "include" / "pinocchio" / "config.hpp").read_text()
    m = re.search(r'#\s*define\s+PINOCCHIO_VERSION\s+"([^"]+)"', text)
    return m.group(1) if m else "unknown"


def _compile_definitions(prefix: Path, library_instances: bool) -> list[str]:
    """The ``INTERFACE_COMPILE_DEFINITIONS`` of Pinocchio's ``pinocchio_headers`` and
    ``pinocchio_parsers`` CMake targets, without generator expressions and (unless
    ``library_instances``) without ``PINOCCHIO_ENABLE_TEMPLATE_INSTANTIATION``."""
    targets = prefix / "lib" / "cmake" / "pinocchio" / "pinocchioTargets.cmake"
    defs: list[str] = []
    try:
        text = targets.read_text()
    except OSError:
        text = ""
    for name in ("pinocchio_headers", "pinocchio_parsers"):
        m = re.search(
            rf"set_target_properties\(pinocchio::{name} PROPERTIES(.*?)\n\)", text, re.DOTALL
        )
        d = m and re.search(r'INTERFACE_COMPILE_DEFINITIONS "([^"]*)"', m.group(1))
        if d:
            defs += [x for x in d.group(1).split(";") if x and "$<" not in x]
    if not any(x.startswith("PINOCCHIO_WITH_URDFDOM") for x in defs):
        defs = list(_DEFAULT_DEFINITIONS)
    # collision support needs coal's headers and is not used here
    defs = [x for x in defs if not x.startswith("PINOCCHIO_WITH_COLLISION")]
    defs = [x for x in defs if x != "PINOCCHIO_ENABLE_TEMPLATE_INSTANTIATION"]
    if library_instances:
        defs.append("PINOCCHIO_ENABLE_TEMPLATE_INSTANTIATION")
    return list(dict.fromkeys(defs))


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


# --------------------------------------------------------------------------------------------
# building


def build_command(
    prefix: Path, compiler: str, output: Path, library_instances: bool = False
) -> tuple[list[str], str]:
    """``(argv, flags)``: the compile/link command for ``bench.cpp`` and the flags (without
    paths) that the binary reports."""
    defs = [f"-D{d}" for d in _compile_definitions(prefix, library_instances)]
    flags = " ".join([*OPT_FLAGS, *ABI_FLAGS, *defs])
    inc = prefix / "include"
    lib = prefix / "lib"
    argv = [
        compiler,
        *OPT_FLAGS,
        *ABI_FLAGS,
        *defs,
        f'-DBENCH_FLAGS="{flags}"',
        f"-I{inc}",
        f"-I{inc / 'eigen3'}",
        f"-I{inc / 'urdfdom_headers'}",
        f"-I{inc / 'urdfdom'}",
        str(SOURCE),
        "-o",
        str(output),
        f"-L{lib}",
        "-lpinocchio_parsers",
        "-lpinocchio_default",
        "-lurdfdom_model",
        f"-Wl,-rpath,{lib}",
    ]
    return argv, flags


def build(force: bool = False, *, library_instances: bool = False, verbose: bool = True):
    """Compile ``bench.cpp`` (once; cached) and return the binary's path, or ``None`` with the
    reason in :data:`build_error` when there is no compiler, a header or library is missing, or
    the compile fails (its log is kept next to the binary)."""
    global build_error
    build_error = None
    compiler = _compiler()
    prefix = find_prefix()
    if compiler is None:
        build_error = "no C++ compiler found (c++, g++, clang++ or $CXX)"
    elif prefix is None:
        build_error = "no cmeel prefix with include/pinocchio found (pip install pin)"
    elif missing := _missing(prefix):
        build_error = "missing " + "; ".join(missing)
    if build_error:
        return None

    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    argv, _ = build_command(prefix, compiler, Path("BIN"), library_instances)
    key = hashlib.sha256(
        "\0".join([SOURCE.read_text(), version, *argv, _pinocchio_version(prefix)]).encode()
    ).hexdigest()[:16]
    binary = BUILD_DIR / f"bench-{key}"
    if binary.is_file() and not force:
        return binary

    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_name(binary.name + f".tmp{os.getpid()}")
    argv, _ = build_command(prefix, compiler, tmp, library_instances)
    if verbose:
        print(
            f"pinocchio_cpp: compiling {SOURCE.name} (takes minutes, several GB of memory)",
            file=sys.stderr,
            flush=True,
        )
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    log = binary.with_suffix(".log")
    log.write_text(" ".join(argv) + "\n\n" + proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr[-300:])
        build_error = f"compile failed ({first.strip()}); full log: {log}"
        return None
    tmp.replace(binary)
    if verbose:
        print(
            f"pinocchio_cpp: built {binary} in {time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    return binary


# --------------------------------------------------------------------------------------------
# timing


def time_cpp(
    urdf_path,
    floating_base: bool,
    n_states: int = 256,
    min_time: float = 0.05,
    repeats: int = 7,
    *,
    library_instances: bool = False,
) -> dict:
    """Time the C++ algorithms on one robot; raises ``RuntimeError`` when the binary cannot
    be built. Returns the binary's JSON (``pinocchio_version``, ``eigen_version``,
    ``compiler``, ``flags``, ``nq``, ``nv``, ``notes``, ``ns_per_call: {alg: {"best",
    "median"}}``) plus ``source``, ``cpu``, ``urdf`` and ``floating_base``."""
    binary = build(library_instances=library_instances)
    if binary is None:
        raise RuntimeError(f"cannot build the Pinocchio C++ benchmark: {build_error}")
    argv = [str(binary), str(urdf_path), "1" if floating_base else "0"]
    argv += [str(int(n_states)), repr(float(min_time)), str(int(repeats))]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    out = json.loads(proc.stdout)
    source = "c++ (wheel's pre-compiled instances)" if library_instances else "c++"
    out.update(source=source, cpu=cpu_name(), urdf=str(urdf_path))
    out["floating_base"] = bool(floating_base)
    return out


def _load_bindings_model(urdf_path, floating_base: bool):
    import pinocchio as pin

    if floating_base:
        model = pin.buildModelFromUrdf(str(urdf_path), pin.JointModelFreeFlyer())
        model.lowerPositionLimit[:3] = -1.0  # finite bounds for randomConfiguration
        model.upperPositionLimit[:3] = 1.0
    else:
        model = pin.buildModelFromUrdf(str(urdf_path))
    return pin, model


def time_python_fallback(
    urdf_path,
    floating_base: bool,
    n_states: int = 256,
    min_time: float = 0.05,
    repeats: int = 7,
    reason: str | None = None,
) -> dict:
    """The same measurement as :func:`time_cpp` through Pinocchio's Python bindings (each
    call includes the bindings' overhead). Same output structure; ``source`` names the
    fallback and ``reason``."""
    pin, model = _load_bindings_model(urdf_path, floating_base)
    data = model.createData()
    rng = np.random.default_rng(0)
    states = [
        (
            pin.randomConfiguration(model),
            rng.uniform(-1, 1, model.nv),
            rng.uniform(-1, 1, model.nv),
            rng.uniform(-1, 1, model.nv),
        )
        for _ in range(n_states)
    ]
    calls = {
        "rnea": (pin.rnea, lambda s: (s[0], s[1], s[2])),
        "crba": (pin.crba, lambda s: (s[0],)),
        "aba": (pin.aba, lambda s: (s[0], s[1], s[3])),
        "minv": (pin.computeMinverse, lambda s: (s[0],)),
        # the bindings mirror already (notes below): the same calls
        "crba_full": (pin.crba, lambda s: (s[0],)),
        "minv_full": (pin.computeMinverse, lambda s: (s[0],)),
        "rnea_derivatives": (pin.computeRNEADerivatives, lambda s: (s[0], s[1], s[2])),
        "aba_derivatives": (pin.computeABADerivatives, lambda s: (s[0], s[1], s[3])),
        "fk": (pin.forwardKinematics, lambda s: (s[0],)),
        "jacobians": (pin.computeJointJacobians, lambda s: (s[0],)),
        "ccrba": (pin.ccrba, lambda s: (s[0], s[1])),
        "centroidal_bias": (
            pin.computeCentroidalMomentumTimeVariation,
            lambda s: (s[0], s[1], np.zeros_like(s[1])),
        ),
        "coriolis": (pin.computeCoriolisMatrix, lambda s: (s[0], s[1])),
    }
    fid = model.nframes - 1
    lwa = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED

    def frame_velocity(model, data, q, v):
        pin.forwardKinematics(model, data, q, v)
        return pin.getFrameVelocity(model, data, fid, lwa)

    def frame_acceleration(model, data, q, v, a):
        pin.forwardKinematics(model, data, q, v, a)
        return pin.getFrameClassicalAcceleration(model, data, fid, lwa)

    calls["frame_velocity"] = (frame_velocity, lambda s: (s[0], s[1]))
    calls["frame_acceleration"] = (frame_acceleration, lambda s: (s[0], s[1], s[2]))

    def run(fn, args, count):
        n = len(args)
        t0 = time.perf_counter()
        for k in range(count):
            fn(model, data, *args[k % n])
        return time.perf_counter() - t0

    ns_per_call = {}
    for alg, (fn, pick) in calls.items():
        args = [pick(s) for s in states]
        run(fn, args, len(args))  # warm-up
        count = 1
        while (t := run(fn, args, count)) < min_time:
            count = int(count * min(max(1.2 * min_time / t if t > 0 else 10, 2), 100)) + 1
        ns = sorted(run(fn, args, count) * 1e9 / count for _ in range(repeats))
        ns_per_call[alg] = {"best": ns[0], "median": statistics.median(ns)}

    why = reason or build_error or "not requested"
    return {
        "pinocchio_version": pin.__version__,
        "eigen_version": None,
        "compiler": None,
        "flags": None,
        "nq": model.nq,
        "nv": model.nv,
        "n_states": n_states,
        "min_time_s": min_time,
        "repeats": repeats,
        "notes": {
            "crba": "full symmetric M (the bindings copy the upper triangle to the lower)",
            "minv": "full symmetric M^-1 (the bindings copy the upper triangle to the lower)",
            "crba_full": "full symmetric M (the same call as crba)",
            "minv_full": "full symmetric M^-1 (the same call as minv)",
            "frame": model.frames[fid].name,
        },
        "ns_per_call": ns_per_call,
        "source": f"python bindings (no C++ compiler/headers: {why})",
        "cpu": cpu_name(),
        "urdf": str(urdf_path),
        "floating_base": bool(floating_base),
    }


def time_pinocchio(urdf_path, floating_base: bool, allow_bindings: bool = False, **kw) -> dict:
    """:func:`time_cpp` when the C++ benchmark builds; else a ``RuntimeError`` that names what
    is missing, or with ``allow_bindings`` :func:`time_python_fallback` (``source`` says which,
    and why). The tables that compare with "Pinocchio C++" call it without ``allow_bindings``:
    a venv without the headers (``pip install '.[bench]'``) once gave them the bindings' times,
    1.6-5x the C++ ones, under a C++ heading."""
    library_instances = kw.pop("library_instances", False)
    if build(library_instances=library_instances) is not None:
        return time_cpp(urdf_path, floating_base, library_instances=library_instances, **kw)
    if not allow_bindings:
        raise RuntimeError(
            f"cannot build the Pinocchio C++ benchmark ({build_error}); install the bench "
            "extra (pip install '.[bench]'), or time the Python bindings on purpose with "
            "pinocchio_cpp.py's own CLI"
        )
    return time_python_fallback(urdf_path, floating_base, reason=build_error, **kw)


# --------------------------------------------------------------------------------------------
# correctness check


def check_against_bindings(urdf_path, floating_base: bool, seed: int = 0) -> float:
    """Max abs difference between the C++ binary's ``rnea`` and ``aba`` and the Python
    bindings' on the same random ``q, v, a, tau`` (written with 17 significant digits, so both
    read bit-identical inputs). Expect ~1e-12 (the two are compiled differently)."""
    binary = build()
    if binary is None:
        raise RuntimeError(f"cannot build the Pinocchio C++ benchmark: {build_error}")
    pin, model = _load_bindings_model(urdf_path, floating_base)
    data = model.createData()
    rng = np.random.default_rng(seed)
    if hasattr(pin, "seed"):
        pin.seed(seed)  # pinocchio.randomConfiguration draws from std::rand
    q = np.asarray(pin.randomConfiguration(model))
    v, a, tau = (rng.uniform(-1, 1, model.nv) for _ in range(3))
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        for x in (q, v, a, tau):
            f.write(" ".join(format(float(e), ".17g") for e in x) + "\n")
        path = f.name
    try:
        argv = [str(binary), str(urdf_path), "1" if floating_base else "0", "--check", path]
        proc = subprocess.run(argv, capture_output=True, text=True)
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    cpp = json.loads(proc.stdout)
    ref_rnea = np.array(pin.rnea(model, data, q, v, a))
    ref_aba = np.array(pin.aba(model, data, q, v, tau))
    return float(
        max(
            np.max(np.abs(np.array(cpp["rnea"]) - ref_rnea)),
            np.max(np.abs(np.array(cpp["aba"]) - ref_aba)),
        )
    )


# --------------------------------------------------------------------------------------------
# CLI


def _table(results: dict[str, dict]) -> str:
    names = list(results)
    width = max(10, *(len(n) for n in names))
    head = f"{'ns/call (best / median)':<26}" + "".join(f"{n:>{width + 12}}" for n in names)
    lines = [head, "-" * len(head)]
    notes = next(iter(results.values())).get("notes", {})
    for alg in ALGORITHMS:
        note = notes.get(alg, "")
        label = alg + (" (upper tri.)" if note.startswith("upper") else "")
        label += " (symmetric)" if note.startswith("full") else ""
        cells = ""
        for n in names:
            t = results[n]["ns_per_call"].get(alg)
            cell = f"{t['best']:.0f} / {t['median']:.0f}" if t else "-"
            cells += f"{cell:>{width + 12}}"
        lines.append(f"{label:<26}{cells}")
    lines.append(
        f"{'nq / nv':<26}"
        + "".join(
            f"{str(results[n]['nq']) + ' / ' + str(results[n]['nv']):>{width + 12}}" for n in names
        )
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "robots",
        nargs="*",
        default=["solo12", "talos_full"],
        help="robot names (jaxdyn.robots.resolve) or URDF paths",
    )
    ap.add_argument("--n-states", type=int, default=256)
    ap.add_argument("--min-time", type=float, default=0.05, help="seconds per repeat")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--force-build", action="store_true", help="recompile even if cached")
    ap.add_argument(
        "--library-instances",
        action="store_true",
        help="call the wheel's pre-compiled template instances (generic x86-64)",
    )
    ap.add_argument(
        "--bindings", action="store_true", help="time the Python bindings instead (the fallback)"
    )
    ap.add_argument(
        "--check", action="store_true", help="also compare C++ rnea/aba with the Python bindings"
    )
    ap.add_argument("--json", type=Path, help="write the raw results here")
    args = ap.parse_args(argv)

    from jaxdyn import robots

    if args.force_build:
        build(force=True, library_instances=args.library_instances)
    kw = dict(n_states=args.n_states, min_time=args.min_time, repeats=args.repeats)
    results, checks = {}, {}
    for name in args.robots:
        path, fb = robots.resolve(name)
        if args.bindings:
            results[name] = time_python_fallback(path, fb, **kw)
            results[name]["source"] = "python bindings (requested with --bindings)"
        else:
            results[name] = time_pinocchio(
                path, fb, allow_bindings=True, library_instances=args.library_instances, **kw
            )
        if args.check:
            checks[name] = check_against_bindings(path, fb)

    first = next(iter(results.values()))
    print(_table(results))
    print(f"source: {first['source']}")
    print(
        f"pinocchio {first['pinocchio_version']}, eigen {first['eigen_version']}, "
        f"compiler {first['compiler']}"
    )
    print(f"flags: {first['flags']}")
    print(
        f"CPU: {first['cpu']}; {args.n_states} states, {args.repeats} repeats "
        f">= {args.min_time} s each"
    )
    for name, diff in checks.items():
        print(f"check {name}: max |C++ - bindings| over rnea, aba = {diff:.3g}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "checks": checks}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

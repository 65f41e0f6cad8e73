"""Full benchmark matrix of jaxdyn against Pinocchio and MJX; writes its section ("Core
algorithms against Pinocchio and MJX") of benchmarks/RESULTS.md.

    python benchmarks/core.py                 # full matrix (about 15-25 min on 2 cores)
    python benchmarks/core.py --results FILE  # the section into another results file
    python benchmarks/core.py --dtypes float64 --out /tmp/r.md   # the report alone, whole

Robots solo12, talos_full (floating base) and panda (fixed-base arm); rnea, crba, aba, minv;
batches 1 (unbatched jit latency), 64, 1024, 8192; float64 and float32; Pinocchio per call; MJX
inverse/forward at batch 1024. Single-threaded XLA by default (``--multi-thread`` to disable).
See benchmarks/README.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Set the single-thread XLA flags before anything imports jax (the harness does it too,
    # but only takes effect if the CPU backend does not exist yet).
    if "--multi-thread" not in argv:
        from _env import single_threaded

        single_threaded()
    import harness as bench

    defaults = [
        "--robots",
        "solo12,talos_full,panda",
        "--batches",
        "1,64,1024,8192",
        "--dtypes",
        "float64,float32",
        "--mjx-fns",
        "inverse,forward",
        "--mjx-batches",
        "1024",
    ]
    results = HERE / "RESULTS.md"
    if "--results" in argv:  # the results file to merge into (benchmarks/run_all.py --out)
        k = argv.index("--results")
        results = Path(argv[k + 1])
        del argv[k : k + 2]
    merge = not any(a == "--out" or a.startswith("--out=") for a in argv)
    if merge:  # write the core report to a temporary file, then merge it into RESULTS.md
        import tempfile

        tmp = Path(tempfile.mkdtemp()) / "core.md"
        defaults += ["--out", str(tmp)]
    # later options win in argparse, so user arguments override the defaults
    rc = bench.main(defaults + argv, prog="python benchmarks/core.py")
    if merge and tmp.exists():
        from _env import write_section

        write_section(results, core_section(tmp.read_text()))
    return rc


SECTION = "## Core algorithms against Pinocchio and MJX"


def core_section(report: str) -> str:
    """The harness's report (``# `` title, machine lines, ``## `` tables) as one section of
    the results file: :data:`SECTION`, the machine lines, and its headings one level down."""
    lines = report.strip("\n").splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    lines = ["#" + ln if ln.startswith("##") else ln for ln in lines]
    return "\n".join([SECTION, "", "Written by `python benchmarks/core.py`.", *lines]) + "\n"


if __name__ == "__main__":
    sys.exit(main())

"""Full benchmark matrix of jaxdyn against Pinocchio and MJX; writes benchmarks/RESULTS.md.

    python benchmarks/core.py                 # full matrix (about 15-25 min on 2 cores)
    python benchmarks/core.py --dtypes float64 --out /tmp/r.md   # any `jaxdyn bench` option

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
    merge = not any(a == "--out" or a.startswith("--out=") for a in argv)
    if merge:  # write the core report to a temporary file, then merge it into RESULTS.md
        import tempfile

        tmp = Path(tempfile.mkdtemp()) / "core.md"
        defaults += ["--out", str(tmp)]
    # later options win in argparse, so user arguments override the defaults
    rc = bench.main(defaults + argv, prog="python benchmarks/core.py")
    if merge and tmp.exists():
        merge_into(tmp.read_text(), HERE / "RESULTS.md")
    return rc


def merge_into(core: str, out: Path):
    """``out`` = the core report followed by the sections of ``out`` that other scripts wrote
    (``## `` headings the core report does not have: Delassus, IIM, derivatives, clusters, GPU)."""
    own = {line.rstrip() for line in core.splitlines() if line.startswith("## ")}
    keep, cur = [], None
    for line in out.read_text().splitlines(keepends=True) if out.exists() else []:
        if line.startswith("## "):
            cur = None if line.rstrip() in own else []
            if cur is not None:
                keep.append(cur)
        if cur is not None:
            cur.append(line)
    out.write_text(core.rstrip("\n") + "\n\n" + "".join("".join(c) for c in keep))


if __name__ == "__main__":
    sys.exit(main())

"""Where a batched jaxdyn call spends its time, XLA kernel by kernel (Linux, XLA:CPU).

    python benchmarks/kernel_profile.py --robot talos_full --alg crba
    python benchmarks/kernel_profile.py --robot solo12 --alg aba --dtype float32 --top 15

Times ``jax.jit(jax.vmap(f))`` at batch ``--batch`` (pinned to one core, as the other
benchmarks), samples the process with ``perf record`` (software clock: virtual machines often
have no hardware counters) and attributes each sample to the XLA kernel it fell in. XLA's
generated kernels carry no symbols (this XLA writes no perf map), so the script has XLA write
every kernel's object file (``--xla_dump_to``), finds each kernel's code in the process's
executable memory (``/proc/self/mem``) by byte windows that occur exactly once, and charges a
sample to the kernel whose code holds its address. Samples in named code (XLA's runtime, the
FFI calls, ``memmove``) are listed by symbol. Prints per kernel the share of samples and the
microseconds per sample that share stands for, and the file of the optimised HLO, where each
kernel is the fusion of the same name.

Unlike the JAX profiler's per-thunk times (which disagreed with ablations on this machine) it
measures the plain call, and it agrees with them: talos_full CRBA's ``M`` kernel, 1.47 us of
3.55 here, against 1.57 saved by removing it. Needs ``perf`` (``perf_event_paranoid`` <= 1, or
root) and ``objcopy`` (binutils).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

ARGS = {  # the batched arguments after the model, by algorithm
    "rnea": "qva",
    "crba": "q",
    "aba": "qva",
    "minv": "q",
    "rnea_derivatives": "qva",
    "aba_derivatives": "qva",
    "forward_kinematics": "q",
    "centroidal_momentum_matrix": "q",
    "coriolis_matrix": "qv",
}


def locate(kernels: dict, blobs: list, window: int = 24, tries: int = 16) -> dict:
    """``{name: [(start, end), ...]}``: where each kernel's code (``kernels[name]``, the bytes of
    its object file's text section) lies in the memory ``blobs`` (``(address, bytes)`` pairs).
    Relocated instructions differ between file and memory, so the code is found by windows of
    ``window`` bytes taken at ``tries`` offsets: the first window that occurs exactly once
    places the kernel; where none does (the same kernel compiled into two programs), the
    window with the fewest places gives them all. Kernels not found are left out."""
    out = {}
    for name, code in kernels.items():
        n = len(code)
        best = None
        for off in range(0, max(1, n - window), max(1, n // tries)):
            w = code[off : off + window]
            hits = []
            for lo, blob in blobs:
                i = blob.find(w)
                while i >= 0 and len(hits) < 8:
                    hits.append(lo + i - off)
                    i = blob.find(w, i + 1)
            if hits and (best is None or len(hits) < len(best)):
                best = hits
            if len(hits) == 1:
                break
        if best:
            out[name] = [(h, h + n) for h in best]
    return out


def attribute(ips: collections.Counter, spans: dict) -> tuple[collections.Counter, int]:
    """Samples per kernel from sample counts per address, and the count found in no kernel."""
    bounds = sorted((s, e, k) for k, places in spans.items() for s, e in places)
    starts = [s for s, _, _ in bounds]
    per, lost = collections.Counter(), 0
    for ip, c in ips.items():
        i = bisect.bisect_right(starts, ip) - 1
        if i >= 0 and ip < bounds[i][1]:
            per[bounds[i][2]] += c
        else:
            lost += c
    return per, lost


def _executable_memory() -> list:
    blobs = []
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb") as mem:
        for line in maps:
            f = line.split()
            if "x" not in f[1] or len(f) >= 6:  # executable, anonymous (JIT code)
                continue
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            try:
                mem.seek(lo)
                blobs.append((lo, mem.read(hi - lo)))
            except OSError:
                continue
    return blobs


def _kernels(dump: Path, module: str) -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for o in glob.glob(f"{dump}/{module}.*.obj-file.*_kernel_module.o"):
            name = re.sub(r".*obj-file\.(.*)_kernel_module\.o$", r"\1", o)
            b = Path(tmp) / "k.bin"
            subprocess.run(
                ["objcopy", "-O", "binary", "--only-section=.ltext", o, str(b)], check=True
            )
            out[name] = b.read_bytes()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--robot", default="talos_full", help="bundled or example-robot-data name")
    ap.add_argument("--alg", default="crba", choices=sorted(ARGS))
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    ap.add_argument("--seconds", type=float, default=4.0, help="how long perf samples")
    ap.add_argument("--top", type=int, default=25, help="kernels listed")
    a = ap.parse_args(argv)
    missing = [t for t in ("perf", "objcopy") if shutil.which(t) is None]
    if missing or not sys.platform.startswith("linux"):
        print(f"kernel_profile: needs Linux with perf and objcopy (missing: {missing})")
        return 2
    dump = Path(tempfile.mkdtemp(prefix="jaxdyn-kprof-"))
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={dump}").strip()

    import _env

    _env.single_threaded()
    _env.reuse_freed_buffers()
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", a.dtype == "float64")
    import jaxdyn
    from jaxdyn import robots

    m = robots.load(a.robot)
    B = a.batch
    keys = jax.random.split(jax.random.PRNGKey(0), B)
    q = jax.vmap(lambda k: jaxdyn.random_configuration(m, k))(keys)
    other = {"q": q, "v": jnp.full((B, m.nv), 0.1, q.dtype), "a": jnp.full((B, m.nv), 0.2, q.dtype)}
    args = tuple(other[c] for c in ARGS[a.alg])
    fn = getattr(jaxdyn, a.alg)
    f = jax.jit(jax.vmap(lambda *x: fn(m, *x)))
    jax.block_until_ready(f(*args))
    t, n = time.perf_counter(), 0
    while time.perf_counter() - t < 1.0:
        jax.block_until_ready(f(*args))
        n += 1
    per_sample = (time.perf_counter() - t) / n / B * 1e6
    module = sorted({p.name.split(".")[0] for p in dump.glob("*jit__lambda*")})[-1]
    data = dump / "perf.data"
    rec = subprocess.Popen(
        [
            "perf",
            "record",
            "-e",
            "cpu-clock",
            "-F",
            "4000",
            "-p",
            str(os.getpid()),
            "-o",
            str(data),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)
    t = time.perf_counter()
    while time.perf_counter() - t < a.seconds:
        jax.block_until_ready(f(*args))
    rec.terminate()
    err = rec.communicate()[1]
    if not data.is_file():
        print(f"kernel_profile: perf record failed: {err.strip()[-500:]}")
        return 2
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "ip,sym"], capture_output=True, text=True
    ).stdout
    total, ips, named = 0, collections.Counter(), collections.Counter()
    for line in script.splitlines():
        parts = line.split(None, 1)
        if not parts:
            continue
        total += 1
        if len(parts) == 1 or "unknown" in parts[1]:
            ips[int(parts[0], 16)] += 1
        else:
            named[parts[1][:70]] += 1
    kernels = _kernels(dump, module)
    spans = locate(kernels, _executable_memory())
    per, lost = attribute(ips, spans)
    print(
        f"{a.robot} {a.alg} {a.dtype} B={B}: {per_sample:.3f} us per sample; {total} samples, "
        f"{len(spans)} of {len(kernels)} kernels located, {lost} samples in unlocated JIT code"
    )
    rows = [(c, k) for k, c in per.items()] + [(c, f"[{k}]") for k, c in named.items()]
    for c, k in sorted(rows, reverse=True)[: a.top]:
        print(f"{100 * c / total:5.1f} %  {per_sample * c / total:7.3f} us  {k}")
    print(f"optimised HLO: {dump}/{module}.jit__lambda.cpu_after_optimizations.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Single-core CPU settings shared by the benchmark scripts (import before JAX runs).

Pinocchio runs on one thread, so jaxdyn runs on one core too:

* the process is pinned to one core (``os.sched_setaffinity``; every thread started later,
  XLA's and OpenBLAS's included, inherits it). The flags alone do not make XLA single-threaded:
  its runtime runs independent kernels of a program concurrently on its thread pool. Measured on
  the 2-core VM (2026-11-26), ``jax.jit(jax.vmap(aba))`` on talos_full at B = 1024 used 1.74 s
  of CPU per second of wall time with the flags (7.3 us per sample) and 1.00 pinned (10.2 us);
  ``aba_derivatives`` 1.57 (54 us) against 1.00 (70 us). Results before that date were measured
  without the pin. ``JAXDYN_BENCH_ALL_CORES=1`` leaves the affinity alone;
* ``XLA_FLAGS`` gets ``--xla_cpu_multi_thread_eigen=false`` (Eigen's own threads off) unless
  it already names the eigen threading. (Earlier runs also passed TensorFlow's
  ``intra_op_parallelism_threads=1``, which XLA does not read: XLA stops reading ``XLA_FLAGS``
  at the first word that is not a ``--flag``.)
* ``OPENBLAS_NUM_THREADS`` defaults to 1: JAX's LAPACK calls (Cholesky, triangular solves, LU)
  run in scipy's OpenBLAS, whose thread pool stalled for milliseconds per call on a loaded
  2-core machine.
"""

import os

SINGLE_THREAD_FLAGS = "--xla_cpu_multi_thread_eigen=false"


def single_threaded(pin: bool = True) -> None:
    """The flags and ``OPENBLAS_NUM_THREADS`` below, and (``pin``) :func:`one_core`."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " " + SINGLE_THREAD_FLAGS).strip()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if pin:
        one_core()


def one_core():
    """Pin this process to its last allowed core (see the module docstring); returns the core,
    or ``None`` where affinity is not available or ``JAXDYN_BENCH_ALL_CORES=1``."""
    if os.environ.get("JAXDYN_BENCH_ALL_CORES", "0") not in ("0", ""):
        return None
    try:
        core = max(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})
    except (AttributeError, OSError):  # not Linux
        return None
    return core


def cores_note() -> str:
    """``"pinned to one core"`` or ``"N cores allowed"``, for the results' machine lines."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count()
    return "pinned to one core" if n == 1 else f"{n} cores allowed"


def threading_note() -> str:
    """How the run was threaded (flags and cores), for the results' machine lines."""
    return f"`{SINGLE_THREAD_FLAGS}`, {cores_note()}"


def fused_child(script, *args):
    """Run ``script *args`` in a child process started with ``JAXDYN_FUSED_CPU_LOOPS=1`` (XLA's
    flags are per process: :func:`jaxdyn.config.fused_cpu_loops`); echo its output and return
    the JSON of its last line."""
    import json
    import subprocess
    import sys

    env = dict(os.environ, JAXDYN_FUSED_CPU_LOOPS="1")
    r = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True
    )
    if r.returncode != 0:
        raise RuntimeError(f"fused-loop child {script} failed:\n{r.stderr[-3000:]}")
    print(r.stdout, end="")
    return json.loads(r.stdout.strip().splitlines()[-1])


def reuse_freed_buffers() -> bool:
    """Keep freed buffers in glibc's heap (no trimming, no ``mmap`` below 32 MB), so that a
    batch's large outputs and intermediates are reused from one call to the next instead of
    being mapped and faulted in afresh, as Pinocchio reuses its ``Data``. Without it the same
    program timed on this VM varied by up to 2x from run to run, and page faults cost ~15 us
    per talos_full sample of the derivatives (about 10 minor faults per sample). Returns
    whether it took effect (``False`` off glibc). Users get the same with the environment
    variables ``MALLOC_TRIM_THRESHOLD_=1073741824 MALLOC_MMAP_THRESHOLD_=33554432``; jaxdyn
    itself sets these and ``M_ARENA_MAX`` = 1 when imported (``jaxdyn.config.keep_freed_buffers``,
    ``jaxdyn/backend/allocator.py``), so this adds nothing unless that is switched off."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-1, 1 << 30) and libc.mallopt(-3, 1 << 25))
    except (OSError, AttributeError):  # not glibc
        return False


RESULTS_TITLE = "# jaxdyn benchmark results"
RESULTS_PREAMBLE = (
    "Written by `python benchmarks/run_all.py` (one section per benchmark; "
    "`python benchmarks/run_all.py --list` names the script of each). Every section is the "
    "latest run of its benchmark and says the machine, the versions and the date it was "
    "taken (the GPU section keeps, labelled with its card and date, what only a run on "
    "another card measured); earlier runs are in the file's git history. How the numbers are "
    "taken: "
    "`benchmarks/README.md`."
)


def _sections(text: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """``text`` split into the lines before the first ``## `` heading and the sections
    ``(heading, lines)``, each from its ``## `` line to the next one."""
    head, sections = [], []
    for ln in text.splitlines():
        if ln.startswith("## "):
            sections.append((ln.strip(), [ln]))
        elif sections:
            sections[-1][1].append(ln)
        else:
            head.append(ln)
    return head, sections


def _join(head: list[str], sections) -> str:
    parts = ["\n".join(head).strip("\n")] + ["\n".join(lines).strip("\n") for _, lines in sections]
    return "\n\n".join(p for p in parts if p) + "\n"


def write_section(path, section: str) -> None:
    """Put ``section`` (markdown starting with its ``## heading`` line) into the results file
    ``path``: it replaces the whole section of that heading (up to the next ``## ``), so the
    file holds the latest run of each benchmark (earlier ones are in git), or it is appended.
    The shared writer of every benchmark script (``benchmarks/run_all.py`` runs them all and
    then orders the file with :func:`arrange`)."""
    from pathlib import Path

    path = Path(path)
    heading = section.lstrip("\n").split("\n", 1)[0].strip()
    if not heading.startswith("## "):
        raise ValueError(f"write_section: the section must start with a '## ' heading: {heading!r}")
    new = section.strip("\n").splitlines()
    if any(ln.startswith("## ") for ln in new[1:]):
        raise ValueError(f"write_section: {heading!r}: one '## ' section at a time")
    text = path.read_text() if path.exists() else RESULTS_TITLE + "\n"
    head, sections = _sections(text)
    for k, (h, _) in enumerate(sections):
        if h == heading:
            sections[k] = (heading, new)
            break
    else:
        sections.append((heading, new))
    path.write_text(_join(head, sections))


def arrange(path, order: list[str]) -> list[str]:
    """Give the results file ``path`` its title and preamble (:data:`RESULTS_PREAMBLE`) and
    put its sections in ``order`` (``## `` headings); sections not in ``order`` follow, in
    their order. Returns their headings (no benchmark writes them any more)."""
    from pathlib import Path

    path = Path(path)
    _, sections = _sections(path.read_text() if path.exists() else "")
    rank = {h: k for k, h in enumerate(order)}
    known = sorted((s for s in sections if s[0] in rank), key=lambda s: rank[s[0]])
    others = [s for s in sections if s[0] not in rank]
    path.write_text(_join([RESULTS_TITLE, "", RESULTS_PREAMBLE], known + others))
    return [h for h, _ in others]


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s ``model name``), else what ``platform``
    knows: the processor, else the machine type (``aarch64``, where ``/proc/cpuinfo`` has no
    model name and ``platform.processor()`` is empty), else ``"unknown CPU"``."""
    import platform
    from pathlib import Path

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def dist_version(dist: str) -> str:
    """The installed version of the distribution ``dist``, else ``"not installed"``."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def git_commit() -> str:
    """The commit of this checkout for the results' machine lines, the one reader of every
    benchmark script: ``git rev-parse --short HEAD``, with `` (+ uncommitted changes)`` where
    the tracked files differ from it (``git status --porcelain --untracked-files=no``);
    ``JAXDYN_GIT_REV`` as it is where set (a copy of the tree without ``.git``, such as the
    GPU machine's); ``"unknown"`` where git cannot say (no git, not a checkout)."""
    import subprocess
    from pathlib import Path

    rev = os.environ.get("JAXDYN_GIT_REV", "")
    if rev:
        return rev
    root = Path(__file__).resolve().parent.parent

    def git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=5)

    try:
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode != 0 or not head.stdout.strip():
            return "unknown"
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + (" (+ uncommitted changes)" if dirty else "")


def timed(fn, args, repeats=5, min_time=0.2, block=True):
    """Best time per call of a compiled ``fn(*args)`` (each repeat runs >= ``min_time``).
    ``block=False``: calls of a function that returns finished results (numpy arrays), timed
    without ``jax.block_until_ready`` (about a microsecond of Python per call). JAX is
    imported here, not at module level: :func:`single_threaded` must run first."""
    import time

    import jax

    def wait(x):
        return jax.block_until_ready(x) if block else x

    wait(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            wait(fn(*args))
            n += 1
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        best = min(best, dt / n)
    return best


def urdf_mjspec(robot: str):
    """A bundled robot's URDF (``jaxdyn.robots.resolve``) through MuJoCo's compiler as an
    ``mujoco.MjSpec``: static links kept as bodies, the URDF's visual and collision elements
    dropped (the benchmarks add their own geometry)."""
    import re
    from pathlib import Path

    import mujoco

    from jaxdyn import robots

    path, _ = robots.resolve(robot)
    xml = Path(path).read_text()
    xml = re.sub(r"<(visual|collision)\b.*?</\1>", "", xml, flags=re.S)
    xml = re.sub(
        r"(<robot\b[^>]*>)",
        r'\1<mujoco><compiler fusestatic="false" discardvisual="true"/></mujoco>',
        xml,
        count=1,
    )
    return mujoco.MjSpec.from_string(xml)

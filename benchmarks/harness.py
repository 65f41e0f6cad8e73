"""Benchmark harness: jaxdyn against Pinocchio (and MJX) on the CPU.

What is measured (see ``benchmarks/README.md`` for how to read the tables):

* **jaxdyn** -- per-sample time of ``jax.jit(jax.vmap(f))`` for ``f`` in ``rnea``, ``crba``,
  ``aba``, ``minv`` at each batch size, on pre-built device inputs, every call followed by
  ``block_until_ready``; the median of several repeats, each at least ``min_time`` long, after a
  warm-up. At batch 1 the unbatched ``jax.jit(f)`` is timed instead (latency of one call).
  The compile time ``jax.jit(jax.vmap(f)).lower(...).compile()`` is timed separately (it shares
  the executable cache with the jitted function, so the timed calls do not recompile).
* **Pinocchio** -- ``pin.rnea / crba / aba / computeMinverse`` from Python, in a loop over
  pre-converted states (:class:`jaxdyn.interop.pinocchio.Converter`): per call = total / n.
  Pinocchio is float64 only; the float32 tables compare against the same float64 numbers.
* **MJX** (``mujoco-mjx``) on the same URDF (visuals/collisions stripped, free joint added for
  floating-base robots, constraints/passive forces/armature off): ``mjx.inverse`` (next to
  ``rnea``; it also builds and factors ``M``), ``mjx.forward`` (next to ``aba``; it computes
  ``M``, its Cholesky factor, the bias forces and solves -- much more than ABA) and optionally
  ``kinematics + com_pos + crb`` (next to ``crba``).
* XLA cost analysis (flops and bytes accessed per sample) and the number of operations in the
  optimized HLO entry computation (each is roughly one kernel launch on XLA:CPU), which explains
  most of the batch-1 latency.

Single-threaded by default: ``benchmarks/_env.py`` pins the process to one core and sets
``XLA_FLAGS="--xla_cpu_multi_thread_eigen=false"`` before JAX creates its CPU backend
(``--multi-thread`` turns this off). Pinocchio, MuJoCo and tqdm are imported lazily: they are
not runtime dependencies of jaxdyn (``pip install 'jaxdyn[bench]'``).

This file lives in the repository's ``benchmarks/`` folder, not in the installed package; it
imports its neighbour ``_env`` (``benchmarks/`` is on ``sys.path`` when a script there runs, and
``jaxdyn bench`` puts it there when run from a checkout).

Entry points: :func:`main` (``jaxdyn bench ...`` from a checkout, and ``benchmarks/core.py``)
and :func:`run` (returns the raw results as a dict); :func:`render_markdown` formats them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _env import (
    SINGLE_THREAD_FLAGS,
    cores_note,
    cpu_name,
    dist_version,
    git_commit,
    single_threaded,
)

__all__ = ["main", "run", "render_markdown", "configure_threads", "ALGORITHMS"]

#: chunk size for ``jaxdyn.vmap`` (``--chunk``); ``None`` times plain ``jax.vmap``
CHUNK = None

ALGORITHMS = ("rnea", "crba", "aba", "minv")
DEFAULT_ROBOTS = ("solo12", "talos_full", "panda")
DEFAULT_BATCHES = (1, 64, 1024, 8192)
DEFAULT_DTYPES = ("float64", "float32")
MJX_FNS = ("inverse", "forward", "crb")
DEFAULT_MJX_FNS = ("inverse", "forward")
DEFAULT_MJX_BATCHES = (1024,)
REF_BATCH = 1024  # batch of the targets and of the reported compile time

#: MJX function -> (jaxdyn algorithm it is shown next to, what it computes)
MJX_INFO = {
    "inverse": (
        "rnea",
        "mjx.inverse: kinematics, com, CRB mass matrix + Cholesky, bias (RNE), "
        "qfrc_inverse = M qacc + bias",
    ),
    "forward": (
        "aba",
        "mjx.forward: kinematics, com, CRB mass matrix + Cholesky, bias (RNE), "
        "solve M qacc = tau - bias (no ABA)",
    ),
    "crb": ("crba", "mjx.kinematics + com_pos + crb, dense M via mjx.full_m"),
}

#: Targets of the issue: (robot, algorithm) at float64, batch 1024, ratio to Pinocchio
TARGET_RATIO = 1.5
TARGET_RATIO_CELLS = [(r, a) for r in ("talos_full", "solo12") for a in ("rnea", "crba", "aba")]
TARGET_COMPILE_S = 5.0
TARGET_COMPILE_CELL = ("talos_full", "aba")

N_CHECK = 4  # samples compared against Pinocchio in each cell
N_PIN_STATES = 256  # distinct states cycled through in the Pinocchio loop


# ============================================================================ environment
def configure_threads(single_thread: bool = True) -> str:
    """Put the single-thread flags into ``XLA_FLAGS`` if JAX's CPU backend does not exist yet.

    Returns a one-line description of what was done (recorded in the results).
    """
    if not single_thread:
        return "multi-threaded (XLA defaults)"
    current = os.environ.get("XLA_FLAGS", "")
    preset = "xla_cpu_multi_thread_eigen" in current
    started = _backend_initialized()
    # XLA_FLAGS, OPENBLAS_NUM_THREADS and one core (benchmarks/_env.py); not the core once JAX
    # runs (``jaxdyn bench`` called in a process that computed already): its threads exist and
    # only the calling thread would be pinned
    single_threaded(pin=not started)
    if preset:
        status = f"XLA_FLAGS={current!r} (set before start)"
    else:
        status = f"XLA_FLAGS={os.environ['XLA_FLAGS']!r}"
    status += f"; {cores_note()}"
    if started:
        status += " (WARNING: the JAX backend was already initialised, flags may be ignored)"
    return status


def _backend_initialized() -> bool:
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(getattr(xla_bridge, "_backends", {}))
    except Exception:  # pragma: no cover - private API moved
        return False


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "n/a"


def environment() -> dict:
    """Machine and library versions."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        affinity = os.cpu_count()
    import jax

    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "cores_usable": affinity,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": dist_version("jaxlib"),
        "jaxdyn": dist_version("jaxdyn"),
        "jaxdyn_commit": git_commit(),
        "pinocchio": next(
            (v for v in (dist_version("pin"), dist_version("pinocchio")) if v != "not installed"),
            "not installed",
        ),
        "example-robot-data": dist_version("example-robot-data"),
        "mujoco": dist_version("mujoco"),
        "mujoco-mjx": dist_version("mujoco-mjx"),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "jax_backend": jax.default_backend(),
    }


# ============================================================================ progress
class _Progress:
    """tqdm if installed (and stderr is used), else a plain stderr counter."""

    def __init__(self, total: int, enabled: bool = True):
        self.total, self.n, self.enabled = total, 0, enabled
        self._bar = None
        self._t0 = time.perf_counter()
        if not enabled:
            return
        try:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total, file=sys.stderr, unit="cell", dynamic_ncols=True, leave=True
            )
        except Exception:
            self._bar = None

    def describe(self, text: str):
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_description_str(text, refresh=True)
        else:
            el = time.perf_counter() - self._t0
            print(f"[{self.n}/{self.total} {el:6.0f} s] {text}", file=sys.stderr, flush=True)

    def step(self, k: int = 1):
        self.n += k
        if self._bar is not None:
            self._bar.update(k)

    def write(self, text: str):
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self):
        if self._bar is not None:
            self._bar.close()


# ============================================================================ timing
def _measure(call, *, repeats: int, min_time: float, max_time: float, block, partner=None) -> dict:
    """Median over repeats of the time of one ``call()``; each repeat runs ``inner`` calls
    (each blocked) and lasts at least ``min_time`` s. The number of repeats is lowered (not
    below 3) when ``repeats`` of them would take longer than ``max_time`` s; a call slower than
    ``5 * max_time`` is run once only (``repeats = 1`` in the record).

    ``partner()``, if given, runs one repeat of the reference (Pinocchio) and returns its time
    per call; it is run after each repeat, and ``ratio`` is the median of the paired ratios,
    which cancels most of the load changes of a shared machine."""
    t0 = time.perf_counter()
    block(call())  # warm-up
    est = time.perf_counter() - t0
    if est > 5 * max_time:  # pathological cell: the warm-up is the measurement
        rec = {"call_s": est, "min_s": est, "max_s": est, "repeats": 1, "inner": 1}
        if partner is not None:
            p = partner()
            rec.update(partner_s=p, ratio=est / p)
        return rec
    t0 = time.perf_counter()
    block(call())
    est = max(time.perf_counter() - t0, 1e-7)
    inner = max(1, math.ceil(min_time / est))
    reps = max(3, min(repeats, int(max_time // (inner * est))))
    reps = min(reps, repeats)
    times, ptimes = [], []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(inner):
            block(call())
        times.append((time.perf_counter() - t) / inner)
        if partner is not None:
            ptimes.append(partner())
    rec = {
        "call_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "repeats": reps,
        "inner": inner,
        "times": times,
    }
    if ptimes:
        rec.update(
            partner_s=statistics.median(ptimes),
            partner_times=ptimes,
            ratio=statistics.median(t / p for t, p in zip(times, ptimes)),
        )
    return rec


def _hlo_ops(text: str) -> tuple[int, dict]:
    """Non-trivial instructions of the ENTRY computation of optimized HLO text (each fusion,
    dot, copy, custom-call, ... is about one kernel launch on XLA:CPU)."""
    i = text.find("\nENTRY")
    if i < 0:
        return -1, {}
    body = text[i + 1 :]
    j = body.find("\n}")
    body = body[:j] if j >= 0 else body
    trivial = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"}
    ops: Counter = Counter()
    pat = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(?:\([^=]*?\)|\S+)\s+([a-z][\w\-]*)\(")
    for line in body.splitlines()[1:]:
        m = pat.match(line)
        if m and m.group(1) not in trivial:
            ops[m.group(1)] += 1
    return sum(ops.values()), dict(ops.most_common())


def _cost(compiled) -> tuple[float | None, float | None]:
    try:
        ca = compiled.cost_analysis()
    except Exception:
        return None, None
    if isinstance(ca, (list, tuple)):
        ca = ca[0] if ca else {}
    if not isinstance(ca, dict):
        return None, None
    return ca.get("flops"), ca.get("bytes accessed")


def _rel_err(out, ref) -> float:
    import numpy as np

    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        return float("nan")
    scale = max(1.0, float(np.max(np.abs(ref))))
    return float(np.max(np.abs(out - ref))) / scale


def _one_line(e: BaseException) -> str:
    msg = " ".join(str(e).split())
    msg = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
    return msg[:300]


# ============================================================================ robots / states
class _Case:
    """One robot: jaxdyn model, Pinocchio model and converter, states and reference outputs."""

    def __init__(self, name: str, n_states: int, seed: int = 0):
        import jax
        import numpy as np

        import jaxdyn
        from jaxdyn import robots

        self.name = name
        self.path, fb = robots.resolve(name)
        self.model = robots.load(str(self.path), floating_base=fb)
        m = self.model
        self.floating = bool(m.floating_base)
        keys = jax.random.split(jax.random.PRNGKey(seed), n_states)
        rc = jax.jit(jax.vmap(lambda k: jaxdyn.random_configuration(m, k, dtype="float64")))
        rng = np.random.default_rng(seed)
        self.states = {
            "q": np.asarray(rc(keys), dtype=np.float64),
            "v": rng.standard_normal((n_states, m.nv)),
            "a": rng.standard_normal((n_states, m.nv)),
            "tau": rng.standard_normal((n_states, m.nv)) * 10.0,
        }
        self.pin = None
        self.pin_error = None
        self.refs: dict = {}
        self.info = {
            "robot": name,
            "urdf": self.path.name,
            "nq": m.nq,
            "nv": m.nv,
            "nb": m.nb,
            "depth": m.depth,
            "floating_base": self.floating,
        }

    # ---------------------------------------------------------------- pinocchio
    def setup_pinocchio(self):
        try:
            import numpy as np
            import pinocchio as pin

            from jaxdyn.interop.pinocchio import Converter

            if self.floating:
                pm = pin.buildModelFromUrdf(str(self.path), pin.JointModelFreeFlyer())
            else:
                pm = pin.buildModelFromUrdf(str(self.path))
            conv = Converter(self.model, pm)
            n = min(N_PIN_STATES, len(self.states["q"]))
            st = {k: np.ascontiguousarray(v[:n]) for k, v in self.states.items()}
            pst = {
                "q": [np.ascontiguousarray(conv.q_to_pin(x)) for x in st["q"]],
                "v": [np.ascontiguousarray(conv.v_to_pin(x)) for x in st["v"]],
                "a": [np.ascontiguousarray(conv.v_to_pin(x)) for x in st["a"]],
                "tau": [np.ascontiguousarray(conv.v_to_pin(x)) for x in st["tau"]],
            }
            self.pin = (pin, pm, pm.createData(), conv, pst)
            self.info.update(pin_nq=int(pm.nq), pin_nv=int(pm.nv))
            # reference outputs (jaxdyn order, full symmetric matrices)
            data = pm.createData()
            sym = lambda M: np.triu(M) + np.triu(M, 1).T  # noqa: E731
            refs = {a: [] for a in ALGORITHMS}
            for i in range(N_CHECK):
                q, v, acc, tau = (pst[k][i] for k in ("q", "v", "a", "tau"))
                refs["rnea"].append(conv.v_from_pin(pin.rnea(pm, data, q, v, acc).copy()))
                refs["crba"].append(conv.matrix_from_pin(sym(pin.crba(pm, data, q).copy())))
                refs["aba"].append(conv.v_from_pin(pin.aba(pm, data, q, v, tau).copy()))
                refs["minv"].append(
                    conv.matrix_from_pin(sym(pin.computeMinverse(pm, data, q).copy()))
                )
            self.refs = {a: np.stack(r) for a, r in refs.items()}
        except Exception as e:  # pinocchio missing or model mismatch
            self.pin = None
            self.pin_error = _one_line(e)

    def pin_call(self, alg: str):
        pin, pm, data, _, pst = self.pin
        n = len(pst["q"])
        if alg == "rnea":
            f, args = pin.rnea, list(zip(pst["q"], pst["v"], pst["a"]))
        elif alg == "crba":
            f, args = pin.crba, [(q,) for q in pst["q"]]
        elif alg == "aba":
            f, args = pin.aba, list(zip(pst["q"], pst["v"], pst["tau"]))
        elif alg == "minv":
            f, args = pin.computeMinverse, [(q,) for q in pst["q"]]
        else:  # pragma: no cover
            raise ValueError(alg)
        assert len(args) == n
        return f, pm, data, args


def _stacked(f):
    """``f`` with its tuple of ``(nv, nv)`` outputs stacked into one array (one dtype and one
    error for the tables; every output is still computed)."""
    import jax.numpy as jnp

    def g(*args):
        return jnp.stack(f(*args))

    return g


def _jaxdyn_fn(alg: str):
    import jaxdyn

    return {
        "rnea": (jaxdyn.rnea, ("q", "v", "a")),
        "crba": (jaxdyn.crba, ("q",)),
        "aba": (jaxdyn.aba, ("q", "v", "tau")),
        "minv": (jaxdyn.minv, ("q",)),
        "rnea_derivatives": (_stacked(jaxdyn.rnea_derivatives), ("q", "v", "a")),
        "aba_derivatives": (_stacked(jaxdyn.aba_derivatives), ("q", "v", "tau")),
    }[alg]


# ============================================================================ cells
def _pin_repeat(case: _Case, alg: str, min_time: float):
    """A calibrated Pinocchio repeat: ``rep()`` loops over the pre-converted states for about
    ``min_time`` s and returns the time per call."""
    f, pm, data, args = case.pin_call(alg)
    for a in args[:16]:
        f(pm, data, *a)
    t = time.perf_counter()
    for a in args:
        f(pm, data, *a)
    est = max((time.perf_counter() - t) / len(args), 1e-9)
    inner = max(len(args), math.ceil(min_time / est))
    calls = (args * math.ceil(inner / len(args)))[:inner]

    def rep() -> float:
        t = time.perf_counter()
        for a in calls:
            f(pm, data, *a)
        return (time.perf_counter() - t) / len(calls)

    rep.inner = inner
    return rep


def _bench_pinocchio(rep, *, repeats) -> dict:
    times = [rep() for _ in range(max(3, repeats))]
    return {
        "call_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "repeats": len(times),
        "inner": rep.inner,
    }


def _bench_jaxdyn(
    case: _Case, alg: str, dtype: str, batch: int, *, repeats, min_time, max_time, partner=None
) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    f, names = _jaxdyn_fn(alg)
    model = case.model.astype(dtype)
    n = max(batch, 1)
    xs = [jnp.asarray(case.states[k][:n], dtype=dtype) for k in names]
    if batch == 1:  # unbatched latency of jit(f)
        jf = jax.jit(f)
        args = (model, *[x[0] for x in xs])
    else:
        in_axes = (None,) + (0,) * len(xs)
        if CHUNK:
            import jaxdyn

            jf = jax.jit(jaxdyn.vmap(f, in_axes=in_axes, chunk_size=CHUNK))
        else:
            jf = jax.jit(jax.vmap(f, in_axes=in_axes))
        args = (model, *xs)
    jax.block_until_ready(args)
    rec: dict = {}
    t0 = time.perf_counter()
    lowered = jf.lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    rec.update(lower_s=t1 - t0, compile_s=t2 - t0)
    flops, nbytes = _cost(compiled)
    rec.update(flops=flops, bytes=nbytes)
    try:
        nops, ops = _hlo_ops(compiled.as_text())
    except Exception:
        nops, ops = -1, {}
    rec.update(hlo_ops=nops, hlo_op_kinds=ops)
    del compiled, lowered
    t = time.perf_counter()
    out = jax.block_until_ready(jf(*args))
    rec["first_call_s"] = time.perf_counter() - t
    rec["out_dtype"] = str(out.dtype)
    if alg in case.refs:
        k = min(N_CHECK, n)
        o = np.asarray(out)[None] if batch == 1 else np.asarray(out)[:k]
        rec["err"] = _rel_err(o, case.refs[alg][:k])
    rec.update(
        _measure(
            lambda: jf(*args),
            repeats=repeats,
            min_time=min_time,
            max_time=max_time,
            block=jax.block_until_ready,
            partner=partner,
        )
    )
    rec["per_sample_s"] = rec["call_s"] / n
    if "ratio" in rec:  # per sample / Pinocchio per call, paired repeat by repeat
        rec["ratio"] /= n
    return rec


# ---------------------------------------------------------------------------- MJX
def _strip_urdf(text: str) -> str:
    text = re.sub(r"<visual\b.*?</visual\s*>", "", text, flags=re.S)
    text = re.sub(r"<visual\b[^>]*/>", "", text)
    text = re.sub(r"<collision\b.*?</collision\s*>", "", text, flags=re.S)
    text = re.sub(r"<collision\b[^>]*/>", "", text)
    return text


class _MjxCase:
    """The robot in MuJoCo/MJX, comparable dynamics: no contacts, constraints, passive forces or
    armature. Raises (caught by the caller) if MuJoCo cannot load the URDF."""

    def __init__(self, case: _Case):
        import contextlib
        import io

        import mujoco
        import numpy as np

        with contextlib.redirect_stdout(io.StringIO()):  # "Failed to import warp" noise
            from mujoco import mjx
        self.mujoco, self.mjx = mujoco, mjx
        text = _strip_urdf(case.path.read_text())
        with tempfile.TemporaryDirectory() as d:
            fn = Path(d) / (case.path.stem + "_nomesh.urdf")
            fn.write_text(text)
            spec = mujoco.MjSpec.from_file(str(fn))
        if case.floating:
            body = spec.worldbody.first_body()
            if body is None:
                raise ValueError("MuJoCo model has no body to attach a free joint to")
            body.add_freejoint()
        mm = spec.compile()
        for flag in (
            "mjDSBL_CONSTRAINT",
            "mjDSBL_CONTACT",
            "mjDSBL_PASSIVE",
            "mjDSBL_SPRING",
            "mjDSBL_DAMPER",
        ):  # names differ between MuJoCo versions
            if hasattr(mujoco.mjtDisableBit, flag):
                mm.opt.disableflags |= int(getattr(mujoco.mjtDisableBit, flag))
        mm.dof_damping[:] = 0.0
        mm.dof_armature[:] = 0.0
        mm.dof_frictionloss[:] = 0.0
        mm.jnt_stiffness[:] = 0.0
        self.mm = mm
        self.nq, self.nv = int(mm.nq), int(mm.nv)
        if self.nv != case.model.nv:
            raise ValueError(f"MuJoCo model has nv={self.nv}, jaxdyn {case.model.nv}")
        # random states: hinge/slide angles around qpos0, unit quaternions for free/ball joints
        rng = np.random.default_rng(1)
        n = len(case.states["q"])
        qpos = np.tile(mm.qpos0, (n, 1))
        for j in range(mm.njnt):
            adr, typ = int(mm.jnt_qposadr[j]), int(mm.jnt_type[j])
            if typ == mujoco.mjtJoint.mjJNT_FREE:
                qpos[:, adr : adr + 3] = rng.uniform(-1, 1, (n, 3))
                qu = rng.standard_normal((n, 4))
                qpos[:, adr + 3 : adr + 7] = qu / np.linalg.norm(qu, axis=1, keepdims=True)
            elif typ == mujoco.mjtJoint.mjJNT_BALL:
                qu = rng.standard_normal((n, 4))
                qpos[:, adr : adr + 4] = qu / np.linalg.norm(qu, axis=1, keepdims=True)
            else:
                qpos[:, adr] += rng.uniform(-1, 1, n)
        self.states = {
            "qpos": qpos,
            "qvel": rng.standard_normal((n, self.nv)),
            "qacc": rng.standard_normal((n, self.nv)),
            "tau": rng.standard_normal((n, self.nv)) * 10.0,
        }
        self._put = {}

    def put(self, dtype):
        """MJX model and data in ``dtype`` (call under the same x64 setting as their use)."""
        if dtype not in self._put:
            import jax
            import jax.numpy as jnp
            import numpy as np

            mjx = self.mjx
            mx = mjx.put_model(self.mm, impl="jax")
            dx = mjx.make_data(mx, impl="jax")

            def cast(x):
                if isinstance(x, (np.ndarray, jax.Array)) and jnp.issubdtype(x.dtype, jnp.floating):
                    return x.astype(dtype)
                return x

            self._put[dtype] = (jax.tree_util.tree_map(cast, mx), jax.tree_util.tree_map(cast, dx))
        return self._put[dtype]

    def fn(self, name):
        mjx = self.mjx

        def inverse(mx, dx, qpos, qvel, qacc):
            return mjx.inverse(mx, dx.replace(qpos=qpos, qvel=qvel, qacc=qacc)).qfrc_inverse

        def forward(mx, dx, qpos, qvel, tau):
            return mjx.forward(mx, dx.replace(qpos=qpos, qvel=qvel, qfrc_applied=tau)).qacc

        def crb(mx, dx, qpos):
            d = dx.replace(qpos=qpos)
            d = mjx.crb(mx, mjx.com_pos(mx, mjx.kinematics(mx, d)))
            return mjx.full_m(mx, d)

        return {
            "inverse": (inverse, ("qpos", "qvel", "qacc")),
            "forward": (forward, ("qpos", "qvel", "tau")),
            "crb": (crb, ("qpos",)),
        }[name]


def _bench_mjx(mc: _MjxCase, name: str, dtype: str, batch: int, **kw) -> dict:
    import contextlib

    import jax

    # With jax_enable_x64 on, MJX promotes parts of a float32 model to float64; run float32
    # cells with x64 off (tracing, compiling and timing all inside the context).
    ctx = jax.enable_x64(False) if dtype == "float32" else contextlib.nullcontext()
    with ctx:
        return _bench_mjx_inner(mc, name, dtype, batch, **kw)


def _bench_mjx_inner(
    mc: _MjxCase, name: str, dtype: str, batch: int, *, repeats, min_time, max_time
) -> dict:
    import jax
    import jax.numpy as jnp

    f, names = mc.fn(name)
    mx, dx = mc.put(dtype)
    n = max(batch, 1)
    xs = [jnp.asarray(mc.states[k][:n], dtype=dtype) for k in names]

    # The model and the data template are closed over (constants), as in MJX's own
    # benchmark: passed as jit arguments, XLA compiles of MJX took minutes here.
    def g(*x):
        return f(mx, dx, *x)

    if batch == 1:
        jf = jax.jit(g)
        args = tuple(x[0] for x in xs)
    else:
        jf = jax.jit(jax.vmap(g))
        args = tuple(xs)
    rec: dict = {}
    t0 = time.perf_counter()
    lowered = jf.lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    rec.update(lower_s=t1 - t0, compile_s=time.perf_counter() - t0)
    flops, nbytes = _cost(compiled)
    rec.update(flops=flops, bytes=nbytes)
    try:
        rec["hlo_ops"] = _hlo_ops(compiled.as_text())[0]
    except Exception:
        rec["hlo_ops"] = -1
    try:
        rec["out_dtype"] = str(lowered.out_info.dtype)
    except Exception:
        pass
    del compiled, lowered
    rec.update(
        _measure(
            lambda: jf(*args),
            repeats=repeats,
            min_time=min_time,
            max_time=max_time,
            block=jax.block_until_ready,
        )
    )
    rec["per_sample_s"] = rec["call_s"] / n
    return rec


# ============================================================================ driver
def run(
    robots=DEFAULT_ROBOTS,
    algorithms=ALGORITHMS,
    batches=DEFAULT_BATCHES,
    dtypes=DEFAULT_DTYPES,
    repeats: int = 5,
    out=None,
    mjx: bool = True,
    *,
    mjx_fns=DEFAULT_MJX_FNS,
    mjx_batches=DEFAULT_MJX_BATCHES,
    min_time: float = 0.03,
    max_time: float = 1.0,
    pinocchio: bool = True,
    value_checks: bool | None = None,
    single_thread: bool = True,
    progress: bool = True,
    command: str | None = None,
    json_out=None,
    seed: int = 0,
) -> dict:
    """Run the benchmark matrix and return the results (a JSON-serialisable dict).

    ``out``: write the Markdown report there (e.g. ``benchmarks/RESULTS.md``); ``json_out``:
    write the raw results as JSON. ``mjx_batches`` is intersected with ``batches`` (if the
    intersection is empty, the largest batch is used). ``max_time``: seconds a cell's timed
    repeats may take before their number is cut (to no fewer than 3).
    """
    threads = configure_threads(single_thread)
    import jax

    jax.config.update("jax_enable_x64", True)
    import jaxdyn

    if value_checks is not None:
        jaxdyn.set_value_checks(bool(value_checks))
    from jaxdyn import value_checks as checks_mod

    robots, algorithms = list(robots), list(algorithms)
    batches = sorted({int(b) for b in batches})
    dtypes = list(dtypes)
    mjx_fns = list(mjx_fns) if mjx else []
    mjx_b = sorted(set(batches) & {int(b) for b in mjx_batches}) or [max(batches)]
    t_start = time.perf_counter()
    res: dict = {
        "env": environment(),
        "threads": threads,
        "value_checks": checks_mod.enabled(),
        "command": command,
        "config": {
            "robots": robots,
            "algorithms": algorithms,
            "batches": batches,
            "dtypes": dtypes,
            "repeats": repeats,
            "min_time": min_time,
            "max_time": max_time,
            "mjx_fns": mjx_fns,
            "mjx_batches": mjx_b,
        },
        "loadavg_start": _loadavg(),
        "robots": {},
        "jaxdyn": [],
        "pinocchio": [],
        "mjx": [],
        "notes": [],
    }

    n_cells = (
        len(robots)
        * len(dtypes)
        * (len(algorithms) * (len(batches) + int(pinocchio)) + len(mjx_fns) * len(mjx_b))
    )
    bar = _Progress(n_cells, enabled=progress)
    try:
        for rname in robots:
            bar.describe(f"{rname}: loading")
            try:
                case = _Case(rname, n_states=max(max(batches), N_PIN_STATES), seed=seed)
            except Exception as e:
                msg = f"{rname}: could not load ({_one_line(e)}); skipped"
                res["notes"].append(msg)
                bar.write(msg)
                bar.step(n_cells // max(1, len(robots)))
                continue
            if pinocchio:
                case.setup_pinocchio()
                if case.pin_error:
                    res["notes"].append(f"{rname}: Pinocchio unavailable ({case.pin_error})")
            res["robots"][rname] = case.info
            mc = None
            if mjx_fns:
                try:
                    mc = _MjxCase(case)
                    case.info["mjx"] = f"loaded (nq={mc.nq}, nv={mc.nv})"
                except Exception as e:
                    case.info["mjx"] = f"could not load: {_one_line(e)}"
            for dtype in dtypes:
                # Pinocchio first, in the same block as the jaxdyn cells it is compared with
                pin_reps = {}
                for alg in algorithms if pinocchio else []:
                    bar.describe(f"{rname} {dtype} pinocchio {alg}")
                    rec = {"robot": rname, "dtype_block": dtype, "alg": alg}
                    if case.pin is None:
                        rec["error"] = case.pin_error or "not run"
                    else:
                        try:
                            pin_reps[alg] = _pin_repeat(case, alg, min_time)
                            rec.update(_bench_pinocchio(pin_reps[alg], repeats=repeats))
                        except Exception as e:
                            rec["error"] = _one_line(e)
                    res["pinocchio"].append(rec)
                    bar.step()
                for alg in algorithms:
                    for b in batches:
                        bar.describe(f"{rname} {dtype} {alg} B={b}")
                        rec = {"robot": rname, "dtype": dtype, "alg": alg, "batch": b}
                        try:
                            rec.update(
                                _bench_jaxdyn(
                                    case,
                                    alg,
                                    dtype,
                                    b,
                                    repeats=repeats,
                                    min_time=min_time,
                                    max_time=max_time,
                                    partner=pin_reps.get(alg),
                                )
                            )
                        except Exception as e:
                            rec["error"] = _one_line(e)
                            bar.write(f"{rname} {dtype} {alg} B={b}: {rec['error']}")
                        res["jaxdyn"].append(rec)
                        bar.step()
                for fn in mjx_fns:
                    for b in mjx_b:
                        bar.describe(f"{rname} {dtype} mjx.{fn} B={b}")
                        rec = {
                            "robot": rname,
                            "dtype": dtype,
                            "fn": fn,
                            "batch": b,
                            "compare": MJX_INFO[fn][0],
                        }
                        if mc is None:
                            rec["error"] = case.info.get("mjx", "not loaded")
                        else:
                            try:
                                rec.update(
                                    _bench_mjx(
                                        mc,
                                        fn,
                                        dtype,
                                        b,
                                        repeats=repeats,
                                        min_time=min_time,
                                        max_time=max_time,
                                    )
                                )
                            except Exception as e:
                                rec["error"] = _one_line(e)
                                bar.write(f"{rname} {dtype} mjx.{fn} B={b}: {rec['error']}")
                        res["mjx"].append(rec)
                        bar.step()
            jax.clear_caches()
    finally:
        bar.close()
    res["loadavg_end"] = _loadavg()
    res["total_s"] = time.perf_counter() - t_start
    if json_out:
        Path(json_out).write_text(json.dumps(res, indent=1, default=str))
    if out:
        Path(out).write_text(render_markdown(res))
    return res


# ============================================================================ report
def _us(s) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "n/a"
    us = s * 1e6
    if us >= 1000:
        return f"{us:,.0f}"
    if us >= 100:
        return f"{us:.0f}"
    if us >= 10:
        return f"{us:.1f}"
    return f"{us:.2f}"


def _fmt_ratio(r: float) -> str:
    return f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def _ratio(x, ref) -> str:
    if x is None or ref is None or not ref:
        return ""
    return _fmt_ratio(x / ref)


def _si(x) -> str:
    if x is None:
        return "n/a"
    for unit, f in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= f:
            return f"{x / f:.3g} {unit}"
    return f"{x:.3g}"


def _pin_table(res) -> dict:
    return {(r["robot"], r["dtype_block"], r["alg"]): r.get("call_s") for r in res["pinocchio"]}


def _jd_table(res) -> dict:
    return {(r["robot"], r["dtype"], r["alg"], r["batch"]): r for r in res["jaxdyn"]}


def _mjx_table(res) -> dict:
    return {(r["robot"], r["dtype"], r["fn"], r["batch"]): r for r in res["mjx"]}


def _ref_batch(batches) -> int | None:
    vb = [b for b in batches if b > 1]
    if not vb:
        return None
    return REF_BATCH if REF_BATCH in vb else vb[-1]


def targets(res) -> list[dict]:
    """The issue's targets: PASS / MISS / not measured."""
    pin, jd = _pin_table(res), _jd_table(res)
    rows = []
    for robot, alg in TARGET_RATIO_CELLS:
        rec = jd.get((robot, "float64", alg, REF_BATCH))
        p = pin.get((robot, "float64", alg))
        what = f"{robot} {alg}, float64, B={REF_BATCH}, per sample <= {TARGET_RATIO}x Pinocchio"
        if rec is None or "per_sample_s" not in rec or not p:
            rows.append({"target": what, "value": "not measured", "status": "n/a"})
            continue
        if rec.get("ratio") is not None:  # paired with Pinocchio repeat by repeat
            r, p = rec["ratio"], rec["partner_s"]
        else:
            r = rec["per_sample_s"] / p
        rows.append(
            {
                "target": what,
                "value": f"{r:.2f}x ({_us(rec['per_sample_s'])} us vs {_us(p)} us)",
                "status": "PASS" if r <= TARGET_RATIO else "MISS",
            }
        )
    robot, alg = TARGET_COMPILE_CELL
    rec = jd.get((robot, "float64", alg, REF_BATCH))
    what = f"{robot} compile of jit(vmap({alg})), float64, B={REF_BATCH}, < {TARGET_COMPILE_S:g} s"
    if rec is None or "compile_s" not in rec:
        rows.append({"target": what, "value": "not measured", "status": "n/a"})
    else:
        c = rec["compile_s"]
        rows.append(
            {
                "target": what,
                "value": f"{c:.2f} s",
                "status": "PASS" if c < TARGET_COMPILE_S else "MISS",
            }
        )
    return rows


def render_markdown(res) -> str:
    """The report: environment, targets, per-sample tables, MJX, XLA cost analysis."""
    env, cfg = res["env"], res["config"]
    pin, jd, mj = _pin_table(res), _jd_table(res), _mjx_table(res)
    batches = cfg["batches"]
    rb = _ref_batch(batches)
    L = ["# jaxdyn benchmark results", ""]
    L += [
        f"- Date: {env['date']}",
        f"- CPU: {env['cpu']} ({env['cores']} logical cores, {env['cores_usable']} usable); "
        f"{env['platform']}",
        f"- Load average (1, 5, 15 min) at start: {res['loadavg_start']}, at end: "
        f"{res.get('loadavg_end', 'n/a')}",
        f"- Python {env['python']}, jax {env['jax']}, jaxlib {env['jaxlib']}, "
        f"jaxdyn {env['jaxdyn']} (git {env['jaxdyn_commit']}), pinocchio {env['pinocchio']}, "
        f"example-robot-data {env['example-robot-data']}, mujoco {env['mujoco']}, "
        f"mujoco-mjx {env['mujoco-mjx']}",
        f"- Threads: {res['threads']}",
        f"- jaxdyn value checks (`eqx.error_if` on quaternion norms): "
        f"{'on (library default)' if res['value_checks'] else 'off'}",
        f"- Command: `{res.get('command') or 'benchmarks/harness.py run(...)'}`",
        f"- Repeats: median of up to {cfg['repeats']} repeats of >= {cfg['min_time'] * 1e3:.0f}"
        f" ms each (fewer, at least 3, when a cell would exceed {cfg['max_time']:g} s); "
        f"total run time {res.get('total_s', 0) / 60:.1f} min",
        "",
    ]
    notes = list(res["notes"])
    try:
        load1 = float(str(res["loadavg_start"]).split()[0])
        load2 = float(str(res.get("loadavg_end", "0")).split()[0])
        if max(load1, load2) > 0.75 * (env.get("cores_usable") or 1):
            notes.append(
                f"**The machine was busy** (load average {load1:.1f} at start, "
                f"{load2:.1f} at end, on {env.get('cores_usable')} usable cores): "
                "absolute times are inflated and noisy; the paired ratios are the "
                "most reliable numbers here, and single cells may still be off by "
                "±50 %."
            )
    except (ValueError, IndexError):
        pass
    if notes:
        L += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]

    L += [
        "## Robots",
        "",
        "| robot | URDF | nq | nv | bodies | depth | floating base | MJX |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r, i in res["robots"].items():
        L.append(
            f"| {r} | {i['urdf']} | {i['nq']} | {i['nv']} | {i['nb']} | {i['depth']} | "
            f"{'yes' if i['floating_base'] else 'no'} | {i.get('mjx', 'not run')} |"
        )
    L.append("")

    tg = [t for t in targets(res) if t["status"] != "n/a"]
    L += ["## Targets", ""]
    if tg:
        L += ["| target | measured | status |", "|---|---|---|"]
        L += [f"| {t['target']} | {t['value']} | **{t['status']}** |" for t in tg]
    else:
        L += [
            f"Not measured in this run (they need float64, B={REF_BATCH} on talos_full and solo12)."
        ]
    L += [
        "",
        "Ratios are jaxdyn per sample / Pinocchio per call (< 1: jaxdyn faster), the "
        "median of ratios of repeats taken alternately (jaxdyn, Pinocchio, jaxdyn, ...), so "
        "that load changes on a shared machine cancel; the Pinocchio time shown is the "
        "median of the repeats paired with that cell.",
        "",
    ]

    for dtype in cfg["dtypes"]:
        L += [f"## Per-sample time, {dtype} (microseconds; ratio to Pinocchio)", ""]
        L += [
            "Cells: time (ratio to Pinocchio). The ratio is paired: the median over "
            "repeats of (jaxdyn repeat / the Pinocchio repeat run right after it), so it can "
            "differ from the quotient of the two columns when the machine's load changes. "
            "'Pinocchio us/call' is measured at the start of the block."
            + (
                " Pinocchio is float64 only; the float32 ratios use its float64 times."
                if dtype != "float64"
                else ""
            ),
            "",
        ]
        head = ["robot", "algorithm", "Pinocchio us/call"]
        head += [("B=1 jit(f) us/call" if b == 1 else f"B={b} us/sample") for b in batches]
        head += [f"compile s (B={rb})" if rb else "compile s", "max err vs Pinocchio"]
        L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in res["robots"]:
            for alg in cfg["algorithms"]:
                p = pin.get((r, dtype, alg))
                cells = [r, alg, _us(p)]
                errs = []
                for b in batches:
                    rec = jd.get((r, dtype, alg, b), {})
                    if "per_sample_s" in rec:
                        rt = (
                            _fmt_ratio(rec["ratio"])
                            if rec.get("ratio") is not None
                            else _ratio(rec["per_sample_s"], p)
                        )
                        if rec.get("repeats") == 1:
                            rt += ", 1 run"
                        cells.append(f"{_us(rec['per_sample_s'])}" + (f" ({rt})" if rt else ""))
                    else:
                        cells.append("error" if rec.get("error") else "-")
                    if rec.get("err") is not None:
                        errs.append(rec["err"])
                crec = jd.get((r, dtype, alg, rb), {}) if rb else {}
                cells.append(f"{crec['compile_s']:.2f}" if "compile_s" in crec else "-")
                odt = {jd.get((r, dtype, alg, b), {}).get("out_dtype") for b in batches}
                odt = sorted(x for x in odt - {None, dtype})
                cells.append(
                    (f"{max(errs):.1e}" if errs else "n/a")
                    + (f" (output {', '.join(odt)}!)" if odt else "")
                )
                L.append("| " + " | ".join(cells) + " |")
        L.append("")

    if res["mjx"]:
        mb = cfg["mjx_batches"]
        L += [
            "## MJX (mujoco-mjx) on the same robots",
            "",
            "MJX is timed the same way (`jit(vmap(f))` per sample, `jit(f)` at B=1), on the same "
            "URDF (meshes stripped, free joint added for floating bases, constraints, passive "
            "forces and armature disabled). Each row is compared with the jaxdyn algorithm named "
            "in the second column; ratios are to Pinocchio's time for that algorithm. What "
            "each MJX function computes:",
            "",
        ]
        for fn in cfg["mjx_fns"]:
            L.append(f"- `{fn}` (vs {MJX_INFO[fn][0]}): {MJX_INFO[fn][1]}")
        L.append("")
        for dtype in cfg["dtypes"]:
            L += [f"### MJX, {dtype} (microseconds; ratio to Pinocchio)", ""]
            head = ["robot", "MJX function (vs)", "Pinocchio us/call"]
            head += [("B=1 jit(f) us/call" if b == 1 else f"B={b} us/sample") for b in mb]
            head += ["jaxdyn at the same B", "compile s (largest B)", "note"]
            L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for r in res["robots"]:
                for fn in cfg["mjx_fns"]:
                    alg = MJX_INFO[fn][0]
                    p = pin.get((r, dtype, alg))
                    cells = [r, f"{fn} ({alg})", _us(p)]
                    note, jdc = "", []
                    for b in mb:
                        rec = mj.get((r, dtype, fn, b), {})
                        if "per_sample_s" in rec:
                            rt = _ratio(rec["per_sample_s"], p)
                            cells.append(f"{_us(rec['per_sample_s'])}" + (f" ({rt})" if rt else ""))
                            if rec.get("repeats") == 1:
                                cells[-1] += " [1 run]"
                            if rec.get("out_dtype") and rec["out_dtype"] != dtype:
                                note = f"output is {rec['out_dtype']}"
                        else:
                            cells.append("n/a")
                            note = note or rec.get("error", "")
                        j = jd.get((r, dtype, alg, b), {})
                        jdc.append(_us(j.get("per_sample_s")) if j else "-")
                    cells.append(" / ".join(jdc))
                    crec = mj.get((r, dtype, fn, mb[-1]), {})
                    cells.append(f"{crec['compile_s']:.1f}" if "compile_s" in crec else "-")
                    cells.append(note.replace("|", "/")[:160])
                    L.append("| " + " | ".join(cells) + " |")
            L.append("")

    L += [
        "## XLA cost analysis and kernel count",
        "",
        "From `jax.jit(f).lower(...).compile()`: `cost_analysis()` flops and bytes accessed "
        "(divided by the batch), and the number of non-trivial operations in the optimized HLO "
        "ENTRY computation (fusions, dots, copies, custom calls, ...; each is about one kernel "
        "launch on XLA:CPU, ~0.3-0.5 us each). B=1 is the unbatched `jit(f)`; "
        "'us/op' = batch-1 latency / ops. GFLOP/s and GB/s are what the per-sample time at "
        f"B={rb} implies.",
        "",
    ]
    for dtype in cfg["dtypes"]:
        L += [f"### {dtype}", ""]
        head = ["robot", "algorithm", "B=1 us", "HLO ops B=1", "us/op", "flops B=1", "bytes B=1"]
        if rb:
            head += [
                f"HLO ops B={rb}",
                f"flops/sample B={rb}",
                f"bytes/sample B={rb}",
                "GFLOP/s",
                "GB/s",
            ]
        L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in res["robots"]:
            for alg in cfg["algorithms"]:
                r1 = jd.get((r, dtype, alg, 1), {})
                cells = [r, alg]
                if r1 and "call_s" in r1:
                    ops = r1.get("hlo_ops", -1)
                    cells += [
                        _us(r1["call_s"]),
                        str(ops),
                        f"{r1['call_s'] * 1e6 / ops:.2f}" if ops and ops > 0 else "n/a",
                        _si(r1.get("flops")),
                        _si(r1.get("bytes")),
                    ]
                else:
                    cells += ["-"] * 5
                if rb:
                    rr = jd.get((r, dtype, alg, rb), {})
                    if rr and "per_sample_s" in rr:
                        fl = rr["flops"] / rb if rr.get("flops") else None
                        by = rr["bytes"] / rb if rr.get("bytes") else None
                        ps = rr["per_sample_s"]
                        cells += [
                            str(rr.get("hlo_ops", -1)),
                            _si(fl),
                            _si(by),
                            f"{fl / ps / 1e9:.2f}" if fl else "n/a",
                            f"{by / ps / 1e9:.2f}" if by else "n/a",
                        ]
                    else:
                        cells += ["-"] * 5
                L.append("| " + " | ".join(cells) + " |")
        L.append("")
    L += ["See `benchmarks/README.md` for how these numbers are taken and how to read them.", ""]
    return "\n".join(L)


def render_summary(res) -> str:
    """Short console summary: the targets and the headline ratios."""
    L = [
        f"  [{t['status']:>4}] {t['target']}: {t['value']}"
        for t in targets(res)
        if t["status"] != "n/a"
    ]
    return "\n".join(L) if L else "  (no target cells in this run)"


# ============================================================================ CLI
def _csv(kind, allowed=None, conv=str):
    def parse(s):
        items = [x.strip() for x in s.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"empty {kind} list")
        out = []
        for x in items:
            try:
                v = conv(x)
            except ValueError:
                raise argparse.ArgumentTypeError(f"bad {kind}: {x!r}") from None
            if allowed is not None and v not in allowed:
                raise argparse.ArgumentTypeError(
                    f"unknown {kind} {x!r} (choose from {', '.join(map(str, allowed))})"
                )
            if conv is int and v < 1:
                raise argparse.ArgumentTypeError(f"{kind} must be >= 1: {x!r}")
            out.append(v)
        return out

    return parse


QUICK = {
    "robots": ["arm7"],
    "algorithms": ["rnea", "aba"],
    "batches": [1, 64],
    "dtypes": ["float64"],
    "repeats": 3,
    "min_time": 0.01,
    "mjx_fns": [],
    "mjx_batches": [64],
}


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Per-sample time of jaxdyn's rnea/crba/aba/minv under jit(vmap) against "
        "Pinocchio (and MJX), plus compile times and XLA cost analysis. Writes a "
        "Markdown report with --out.",
    )
    p.add_argument(
        "--robots",
        type=_csv("robot"),
        default=None,
        help=f"comma-separated robot names or URDF paths (default {','.join(DEFAULT_ROBOTS)})",
    )
    p.add_argument(
        "--algorithms",
        "--algs",
        type=_csv("algorithm", ALGORITHMS),
        default=None,
        help=f"subset of {','.join(ALGORITHMS)} (default all)",
    )
    p.add_argument(
        "--batches",
        type=_csv("batch", conv=int),
        default=None,
        help="batch sizes; 1 times the unbatched jit(f) "
        f"(default {','.join(map(str, DEFAULT_BATCHES))})",
    )
    p.add_argument(
        "--dtypes",
        type=_csv("dtype", ("float32", "float64")),
        default=None,
        help="float64 and/or float32 (default float64,float32)",
    )
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per cell (default 5)")
    p.add_argument(
        "--min-time", type=float, default=None, help="minimum seconds per repeat (default 0.03)"
    )
    p.add_argument(
        "--max-cell-time",
        type=float,
        default=1.0,
        help="seconds the repeats of one cell may take before fewer (>= 3) are run (default 1.0)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run (< 1 min): arm7, rnea+aba, B=1,64, float64, no MJX (give "
        "--mjx-fns to add it, at B=64); explicit options override",
    )
    p.add_argument(
        "--chunk",
        type=int,
        default=None,
        help="time jaxdyn.vmap(f, chunk_size=N) (cache-sized chunks) instead of jax.vmap(f)",
    )
    p.add_argument("--no-mjx", action="store_true", help="skip MJX")
    p.add_argument(
        "--mjx-fns",
        type=_csv("MJX function", MJX_FNS),
        default=None,
        help=f"subset of {','.join(MJX_FNS)} (default {','.join(DEFAULT_MJX_FNS)})",
    )
    p.add_argument(
        "--mjx-batches",
        type=_csv("batch", conv=int),
        default=None,
        help="MJX batch sizes, intersected with --batches (default 1024: MJX "
        "compiles take 10-30 s each)",
    )
    p.add_argument("--no-pinocchio", action="store_true", help="skip Pinocchio")
    p.add_argument(
        "--multi-thread",
        action="store_true",
        help="do not set the single-thread XLA_FLAGS (by default "
        f"XLA_FLAGS='{SINGLE_THREAD_FLAGS}' is set before JAX starts)",
    )
    p.add_argument(
        "--no-value-checks",
        action="store_true",
        help="jaxdyn.set_value_checks(False) (default: library default)",
    )
    p.add_argument("--out", default=None, help="write the Markdown report to this file")
    p.add_argument("--json", default=None, help="write the raw results as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--from-json",
        default=None,
        metavar="FILE",
        help="do not run: re-render the report of a --json file (with --out)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random states")
    return p


def main(argv: list[str] | None = None, prog: str = "jaxdyn bench") -> int:
    """Command line: parse ``argv``, run, print the tables, write ``--out``. Returns the exit
    status (0 ok, 2 bad arguments / nothing could run)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser(prog)
    try:
        a = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    global CHUNK
    CHUNK = a.chunk

    def pick(name, default):
        v = getattr(a, name)
        if v is not None:
            return v
        return QUICK[name] if a.quick and name in QUICK else default

    if a.from_json:
        try:
            res = json.loads(Path(a.from_json).read_text())
        except (OSError, ValueError) as e:
            print(f"error: {_one_line(e)}", file=sys.stderr)
            return 2
        text = render_markdown(res)
        if a.out:
            Path(a.out).write_text(text)
        print(text)
        return 0
    robots = pick("robots", list(DEFAULT_ROBOTS))
    kw = dict(
        robots=robots,
        algorithms=pick("algorithms", list(ALGORITHMS)),
        batches=pick("batches", list(DEFAULT_BATCHES)),
        dtypes=pick("dtypes", list(DEFAULT_DTYPES)),
        repeats=pick("repeats", 5),
        min_time=pick("min_time", 0.03),
        max_time=a.max_cell_time,
        mjx=not a.no_mjx,
        mjx_fns=pick("mjx_fns", list(DEFAULT_MJX_FNS)),
        mjx_batches=pick("mjx_batches", list(DEFAULT_MJX_BATCHES)),
        pinocchio=not a.no_pinocchio,
        value_checks=False if a.no_value_checks else None,
        single_thread=not a.multi_thread,
        progress=not a.no_progress,
        out=a.out,
        json_out=a.json,
        seed=a.seed,
        command=" ".join([prog] + argv),
    )
    if kw["repeats"] < 1 or kw["min_time"] <= 0 or kw["max_time"] <= 0:
        print("error: --repeats, --min-time and --max-cell-time must be positive", file=sys.stderr)
        return 2
    # unknown robot names are a usage error (checked before any timing)
    from jaxdyn import robots as _robots

    for r in robots:
        try:
            _robots.resolve(r)
        except (ValueError, OSError) as e:
            print(f"error: {' '.join(str(e).split()) or type(e).__name__}", file=sys.stderr)
            return 2
    res = run(**kw)
    print(render_markdown(res))
    print("Targets:\n" + render_summary(res))
    if a.out:
        print(f"wrote {a.out}", file=sys.stderr)
    if not res["jaxdyn"] or all("error" in r for r in res["jaxdyn"]):
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

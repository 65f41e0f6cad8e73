"""Every benchmark script starts: ``python benchmarks/<script>.py --help`` imports it (and the
modules it takes its helpers from) and parses its options. A script whose imports rotted
(``benchmarks/trajopt.py`` once imported a helper from a module that had moved it) fails here
instead of at the next benchmark run. In the slow set: each script starts its own interpreter
and JAX."""

from __future__ import annotations

import functools
import os
import re
import statistics
import subprocess
import sys
import typing
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
#: modules of helpers and child processes (``_*.py``) are not scripts with options
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))


@pytest.mark.slow
def test_every_benchmark_script_starts():
    assert "trajopt.py" in SCRIPTS and "vs_cpp.py" in SCRIPTS
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    failed, pending = {}, list(SCRIPTS)
    while pending:  # two at a time: each is an interpreter with JAX (a few hundred MB)
        batch, pending = pending[:2], pending[2:]
        procs = {
            name: subprocess.Popen(
                [sys.executable, str(BENCH / name), "--help"],
                cwd=BENCH,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name in batch
        }
        for name, p in procs.items():
            out, err = p.communicate(timeout=300)
            if p.returncode != 0 or "usage" not in out.lower():
                failed[name] = (p.returncode, err.strip().splitlines()[-3:])
    assert not failed, failed


def test_benchmarks_run_on_one_core():
    """benchmarks/_env.single_threaded() pins the process to one core (XLA's runtime would run
    kernels on a second one whatever its flags) and sets only flags XLA reads (it stops at the
    first word that is not a --flag); JAXDYN_BENCH_ALL_CORES=1 leaves the affinity alone."""
    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs Linux affinity and two cores to tell pinned from not")
    code = (
        "import os, _env; _env.single_threaded(); "
        "print(len(os.sched_getaffinity(0)), all(w.startswith('--') for w in "
        "os.environ['XLA_FLAGS'].split()))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAXDYN_BENCH_ALL_CORES")}
    run = functools.partial(
        subprocess.run, [sys.executable, "-c", code], cwd=BENCH, capture_output=True, text=True
    )
    assert run(env=env).stdout.split() == ["1", "True"]
    n = len(os.sched_getaffinity(0))
    assert run(env=dict(env, JAXDYN_BENCH_ALL_CORES="1")).stdout.split() == [str(n), "True"]


def test_kernel_profile_places_kernels_and_samples():
    """benchmarks/kernel_profile.py's matching (no perf needed): kernels are found in memory by
    byte windows that occur once, despite bytes that relocation changed, and samples are
    charged to the kernel whose code holds them."""
    sys.path.insert(0, str(BENCH))
    try:
        import kernel_profile as kp
    finally:
        sys.path.remove(str(BENCH))
    import collections
    import random

    rng = random.Random(0)
    a = bytes(rng.randrange(256) for _ in range(300))
    b = bytes(rng.randrange(256) for _ in range(200))
    filler = bytes(rng.randrange(256) for _ in range(1000))
    moved = bytearray(a)
    moved[0:8] = b"\x00" * 8  # a relocated address in the first window: the next one places it
    memory = filler[:100] + bytes(moved) + filler[100:400] + b + filler[400:]
    base = 0x7F0000000000
    spans = kp.locate({"a": a, "b": b, "absent": bytes(range(64))}, [(base, memory)])
    assert spans == {"a": [(base + 100, base + 400)], "b": [(base + 700, base + 900)]}
    # the same kernel in two programs: both places
    twice = kp.locate({"b": b}, [(base, memory), (2 * base, b)])
    assert twice == {"b": [(base + 700, base + 900), (2 * base, 2 * base + 200)]}
    ips = collections.Counter({base + 100: 2, base + 399: 1, base + 750: 5, base + 50: 7})
    per, lost = kp.attribute(ips, spans)
    assert per == {"a": 3, "b": 5} and lost == 7


def test_vs_cpp_reports_the_full_matrix_ratio():
    """benchmarks/vs_cpp.py's table: crba and minv are compared with Pinocchio's call (upper
    triangle) and, in the *full* column, with that call plus the mirror to the full symmetric
    matrix jaxdyn returns; the other rows have no such column."""
    sys.path.insert(0, str(BENCH))
    try:
        import vs_cpp
    finally:
        sys.path.remove(str(BENCH))
    import argparse

    def row(alg, pin, full, rule):
        return {
            "robot": "r", "dtype": "float64", "alg": alg, "pin_ns": pin, "pin_full_ns": full,
            "rule_ns": rule, "plain_ns": rule, "chunk": 16, "flops": 1e3,
            "rule_compile_s": 1.0, "plain_compile_s": 1.0,
        }  # fmt: skip

    rows = [row("crba", 2000.0, 2500.0, 3000.0), row("rnea", 1000.0, None, 500.0)]
    args = argparse.Namespace(runs=1, no_mallopt=False)
    text = vs_cpp.render({"r": ({"source": "c++"}, rows)}, 1024, {"float64": 100.0}, args)
    lines = {ln.split("|")[2].strip(): ln for ln in text.splitlines() if ln.startswith("| float")}
    assert "| 1.50 | 1.20 (2.50) |" in lines["crba"] and "MISS" in lines["crba"]
    assert "| 0.50 | - |" in lines["rnea"] and "PASS" in lines["rnea"]


def test_vs_cpp_plain_process_environment_and_table():
    """benchmarks/vs_cpp.py's plain process: the caller's environment without the tuning
    variables (XLA_FLAGS, MALLOC_*, GLIBC_TUNABLES), everything else kept; its table comes
    first in the section, ratio = median over rounds of each round's jaxdyn / Pinocchio, marked
    against the issue's targets, the tuned tables after it under the settings they need."""
    import argparse

    vs_cpp = _bench_module("vs_cpp")
    env = {
        "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false",
        "MALLOC_ARENA_MAX": "1",
        "MALLOC_TRIM_THRESHOLD_": "1",
        "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1",
        "PATH": "/bin",
        "JAXDYN_CACHE_DIR": "/tmp/x",
    }
    assert vs_cpp.plain_env(env) == {"PATH": "/bin", "JAXDYN_CACHE_DIR": "/tmp/x"}

    def row(alg, pins, nss):
        runs = [
            {"pin_ns": p, "ns": n, "cpu": 1.0, "compile_s": 1.0, "ratio": n / p, "best_ratio": 0.5}
            for p, n in zip(pins, nss)
        ]
        out = {"robot": "r", "dtype": "float64", "alg": alg, "runs": runs}
        for k in ("pin_ns", "ns", "cpu", "compile_s", "ratio", "best_ratio"):
            out[k] = statistics.median(x[k] for x in runs)
        return out

    rows = [
        # paired ratios 0.8, 1.5, 0.9: median 0.9 (the medians' ratio would be 1.0)
        row("rnea", [1000.0, 2000.0, 1000.0], [800.0, 3000.0, 900.0]),
        row("rnea_derivatives", [1000.0, 1000.0, 1000.0], [1300.0, 1250.0, 1100.0]),
    ]
    plain = vs_cpp.render_plain({"r": ({}, rows)}, 1024, 3, "argument")
    lines = {ln.split("|")[3].strip(): ln for ln in plain.splitlines() if ln.startswith("| r ")}
    assert "| 0.90 | 0.80-1.50 | <= 1.0 PASS | 0.50 |" in lines["rnea"]
    assert "| 1.25 | 1.10-1.30 | <= 1.2 FAIL |" in lines["rnea_derivatives"]
    args = argparse.Namespace(runs=1, no_mallopt=False)
    text = vs_cpp.render({}, 1024, {}, args, plain)
    assert text.startswith(vs_cpp.HEADING) and "### Plain process" in text
    assert "### Tuned" not in text  # --plain-only: the plain table alone
    trow = {
        "robot": "r", "dtype": "float64", "alg": "rnea", "pin_ns": 1000.0, "pin_full_ns": None,
        "rule_ns": 500.0, "plain_ns": 500.0, "chunk": 16, "flops": 1e3,
        "rule_compile_s": 1.0, "plain_compile_s": 1.0,
    }  # fmt: skip
    text = vs_cpp.render({"r": ({"source": "c++"}, [trow])}, 1024, {"float64": 1.0}, args, plain)
    assert text.index("### Plain process") < text.index("### Tuned process")
    assert "taskset" in text and "MALLOC_TRIM_THRESHOLD_" in text


def _bench_module(name):
    sys.path.insert(0, str(BENCH))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(BENCH))


def test_write_section_replaces_the_whole_section(tmp_path):
    """benchmarks/_env.write_section, the writer every benchmark shares: a section is the latest
    run of its benchmark, replaced whole (earlier runs live in git, not in the file); the other
    sections stay as they are; a new one is appended; one ``## `` section per call."""
    write_section = _bench_module("_env").write_section
    p = tmp_path / "R.md"
    p.write_text(
        "# R\n\n## A\n\nold intro\n\n### solo12\n\nold table\n\n"
        "### Stop 1\n\nold run\n\n## B\n\nb\n"
    )
    write_section(p, "## A\n\nnew intro\n\n### solo12\n\nnew table\n")
    assert p.read_text() == "# R\n\n## A\n\nnew intro\n\n### solo12\n\nnew table\n\n## B\n\nb\n"
    write_section(p, "## C\n\nc\n")
    assert p.read_text().endswith("## B\n\nb\n\n## C\n\nc\n")
    with pytest.raises(ValueError, match="one '## ' section"):
        write_section(p, "## D\n\nd\n\n## E\n")
    with pytest.raises(ValueError, match="must start with a '## ' heading"):
        write_section(p, "### D\n")


def test_run_all_writes_the_results_file(tmp_path):
    """benchmarks/run_all.py runs a (tiny) benchmark script, which writes its section into the
    results file named by --out through the shared writer, then puts the file in order: title
    and preamble, sections in the registry's order, sections no benchmark writes at the end."""
    run_all = _bench_module("run_all")
    out = tmp_path / "R.md"
    out.write_text(
        "# old title\n\nold preamble\n\n## Unknown\n\nu\n\n## Time to first result\n\n"
        "old table\n\n### Stop 3\n\nold run\n\n## Derivatives\n\nd\n"
    )
    tiny = "--examples none --no-demo --no-compile-table --note tiny-run"
    rc = run_all.main(["first_result", "--out", str(out), "--with", f"first_result={tiny}"])
    assert rc == 0
    text = out.read_text()
    assert text.startswith(
        _bench_module("_env").RESULTS_TITLE + "\n\nWritten by `python benchmarks/run_all.py`"
    )
    headings = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert headings == ["## Derivatives", "## Time to first result", "## Unknown"], headings
    assert "tiny-run" in text and "old table" not in text and "Stop 3" not in text
    assert "old preamble" not in text and "\nd\n" in text and "\nu\n" in text
    with pytest.raises(SystemExit):
        run_all.main(["no_such_benchmark", "--out", str(out)])


def test_results_file_is_one_section_per_benchmark():
    """benchmarks/RESULTS.md as run_all.py leaves it: every ``## `` section belongs to a
    benchmark of the registry (and appears once), in the registry's order, after the title and
    preamble; no per-session logs."""
    run_all, env = _bench_module("run_all"), _bench_module("_env")
    text = (BENCH / "RESULTS.md").read_text()
    head, sections = env._sections(text)
    assert "\n".join(head).strip() == f"{env.RESULTS_TITLE}\n\n{env.RESULTS_PREAMBLE}"
    headings = [h for h, _ in sections]
    assert set(headings) <= set(run_all.ORDER), set(headings) - set(run_all.ORDER)
    assert headings == sorted(headings, key=run_all.ORDER.index)
    assert not re.search(r"^#+ .*\b[Ss]top \d+", text, re.M)
    for b in run_all.BENCHMARKS:
        assert (BENCH / f"{b.name}.py").is_file(), b.name
    undated = [h for h, body in sections if not re.search(r"\b20\d\d-\d\d-\d\d\b", "\n".join(body))]
    assert not undated, f"sections that name no date: {undated}"


#: the runs behind RESULTS.md's GPU section, in the order gpu.py --from-json reads them
GPU_RUNS = (
    "1_jaxdyn_f32_f64_default_precision.json",
    "2_mjx_f64.json",
    "3_jaxdyn_mjx_f32.json",
    "4_clusters_f32.json",
    "14_jaxdyn_h200_f32_f64.json",
    "15_derivatives_h200_f32_f64.json",
)


def test_gpu_section_is_one_section_for_every_card():
    """benchmarks/gpu.py renders runs on two cards as one ``## GPU`` section: the last card's
    runs (the H200) in its tables, the other card's (an H100) under ``### Earlier runs on``,
    named with its date and with what only it measured; RESULTS.md's section is that render of
    the files in benchmarks/gpu_runs/."""
    import json

    gpu, env = _bench_module("gpu"), _bench_module("_env")
    runs = [json.loads((BENCH / "gpu_runs" / f).read_text()) for f in GPU_RUNS]
    sys.path.insert(0, str(BENCH))  # render imports the harness
    try:
        text = gpu.render(runs)
    finally:
        sys.path.remove(str(BENCH))
    lines = text.splitlines()
    assert [ln for ln in lines if ln.startswith("## ")] == ["## GPU"]
    current, _, earlier = text.partition("\n### Earlier runs on ")
    assert "on **gpu: NVIDIA H200**" in current and "H100" not in current
    assert "| solo12 | aba_derivatives |" in current and "MJX" not in current.split("###")[1]
    assert earlier.startswith(
        "NVIDIA H100 80GB HBM3 (2026-11-22): MJX, panda and the kinematic loops measured there "
        "only\n"
    ), earlier[:200]
    assert "#### GPU, float32 (us/sample)" in earlier and "\n### " not in earlier
    assert "| panda | MJX crb (vs crba) |" in earlier
    _, sections = env._sections((BENCH / "RESULTS.md").read_text())
    (body,) = [b for h, b in sections if h == "## GPU"]
    assert "\n".join(body).strip() == text.strip()


def test_first_result_script(tmp_path):
    """benchmarks/first_result.py: a run's first stdout line and exit are timed, a run past its
    timeout is stopped, the section's tables are rendered and written (no jaxdyn program runs
    here: the measured commands are tiny Python processes)."""
    sys.path.insert(0, str(BENCH))
    try:
        import first_result
    finally:
        sys.path.remove(str(BENCH))
    code = "import sys, time; print('a', flush=True); time.sleep(0.3); sys.exit(3)"
    r = first_result.timed_run([sys.executable, "-c", code], timeout=60)
    assert r["first"] is not None and r["total"] >= r["first"] + 0.25 and r["rc"] == 3
    r = first_result.timed_run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert r["first"] is None and r["total"] is None
    cold = {"first": 5.04, "total": 12.0, "rc": 0, "timeout": 300}
    warm = {"first": 1.0, "total": None, "rc": -9, "timeout": 300}
    meta = {
        "date": "D",
        "machine": "M",
        "versions": "V",
        "note": "loaded",
        "robot": "R",
        "batch": 8,
    }
    times = {"trace": 1.0, "lower": 0.5, "compile": 9.0, "warm": 0.3, "ops": 12}
    times.update(trace_cpu=0.9, lower_cpu=0.4, compile_cpu=4.0)
    build = {"ready": 4.84, "cpu": 9.1, "status": "registered"}
    compiles = [("aba", times), ("kernel library", build)]
    text = first_result.render([("python -m jaxdyn demo", cold, warm)], compiles, meta)
    assert "| python -m jaxdyn demo | 5.0 | 12.0 | 1.0 | > 300 |" in text
    assert "| aba | 1.0 / 0.9 | 0.5 / 0.4 | 9.0 / 4.0 | 12 | 0.3 |" in text
    assert "| kernel library" not in text  # a sentence under the table, not a row
    assert "ready 4.8 s after the import began (9.1 CPU-s" in text
    found = [("aba", times), ("kernel library", dict(build, cpu=0.0))]
    text = first_result.render([], found, meta)
    assert "library was found compiled (no C compiler ran" in text and "ready" not in text
    assert "\nloaded\n" in text
    assert first_result.hlo_ops('%0 = stablehlo.add %a, %b\n%1 = "stablehlo.scatter"(%0)\n') == 2
    out = tmp_path / "R.md"
    first_result.main(["--examples", "none", "--no-demo", "--no-compile-table", "--out", str(out)])
    assert out.read_text().startswith("# jaxdyn benchmark results\n\n## Time to first result\n")
    with pytest.raises(SystemExit):
        first_result.main(["--examples", "nope.py", "--out", str(out)])


def test_mjx_contact_scene_and_table(tmp_path):
    """benchmarks/mjx_contact.py's pieces, without compiling a step: the quadruped scene it
    writes as MJCF has QuadrupedGetup's collision geometry (trunk box, thigh capsules, foot
    spheres: the same primitives, robot against floor only) and 12 position servos, loads in
    jaxdyn and MJX; the section's table gives each jaxdyn row its ratio to MJX's steps/s at the
    same scene, call and batch, and says the machine was shared."""
    pytest.importorskip("mujoco")
    import argparse

    import numpy as np

    import jaxdyn
    from jaxdyn import robots
    from jaxdyn.envs.getup import quad12_collision

    mc = _bench_module("mjx_contact")
    xml = mc.quadruped_xml()
    loaded = jaxdyn.load_mjcf(xml)
    want = {p.name: p for p in quad12_collision(robots.load("quad12"))}
    got = {p.name: p for p in loaded.contacts}
    assert set(got) == set(want) and loaded.geoms is None  # no pair but robot-floor
    for n, p in want.items():
        assert type(got[n]) is type(p), n
        assert got[n].frame == p.frame, n  # (MjSpec.to_xml rounds the capsules' quat: 1e-7)
        np.testing.assert_allclose([(*c, r) for c, r in got[n].spheres()],
                                   [(*c, r) for c, r in p.spheres()], atol=1e-6)  # fmt: skip
    assert len(loaded.actuators) == 12
    from mujoco import mjx

    mjx.put_model(__import__("mujoco").MjModel.from_xml_string(xml))
    rows = [
        ("s", "jaxdyn Constraint", "step", 4, 10.0, 400.0, 9.0, 1.0),
        ("s", "MJX", "step", 4, 40.0, 100.0, 30.0, 2.0),
    ]
    sanity = [("s", "MJX", 0.5, 0.4, 0.6, 3.0, True), ("s", "jaxdyn Constraint", 0, 0, 0, 0, 0)]
    infos = {"s": dict(geoms=3, pairs=2, nv=6, dt=0.002, body="b", solver="NEWTON",
                       integrator="EULER")}  # fmt: skip
    args = argparse.Namespace(rollout_batch=4, sanity_steps=20, T=10, settle=15)
    fidelity = [
        ("s", "MJX", 0.0, 0.0, None, None, None),
        ("s", "jaxdyn Constraint", 2.5e-4, 1e-4, 3e-7, 6e-8, 0),
    ]
    text = mc.section(rows, sanity, infos, args, 3.0, fidelity)
    assert text.startswith(mc.SECTION + "\n") and "load average 3.0 at the start" in text
    assert (
        "| s | MJX | 0.0e+00 | 0.0e+00 |  |  |  |" in text
        and "| s | jaxdyn Constraint | 2.5e-04 | 1.0e-04 | 3.0e-07 | 6.0e-08 | 0 |" in text
    )
    assert "settles its batch (B = 4, 20 steps" in text
    assert "(the machine was shared with other work: wall times are inflated" in text
    assert "| s | jaxdyn Constraint | step | 4 | 400 | 10.0 | 9.0 | 4.00x | 1.0 |" in text
    assert "| s | MJX | b | 0.5000 |" in text and "| s | jaxdyn Constraint | b | diverged |" in text
    # a later run of another scene keeps this one's rows in each table
    out = tmp_path / "R.md"
    _bench_module("_env").write_section(out, text)
    rows_t = [("t", *r[1:]) for r in rows]
    fid_t = [("t", *fidelity[1][1:])]
    text_t = mc.section(rows_t, [("t", *sanity[0][1:])], {"t": infos["s"]}, args, 3.0, fid_t)
    both = mc.keep_other_scenes(text_t, out, {"t": infos["s"]})
    for table in both.split("\n\n"):
        if table.startswith("| scene"):
            assert "\n| s |" in table and "\n| t |" in table, table
    assert "The rows of s are from an earlier run" in both
    # a third run (scene u) names the runs of s and t once each, without nesting the notes
    both = both.replace("load average 3.0 at the start", "load average 4.0 at the start", 1)
    _bench_module("_env").write_section(out, both)
    rows_u = [("u", *r[1:]) for r in rows]
    sanity_u, fid_u = [("u", *sanity[0][1:])], [("u", *fidelity[1][1:])]
    text_u = mc.section(rows_u, sanity_u, {"u": infos["s"]}, args, 5.0, fid_u)
    three = mc.keep_other_scenes(text_u, out, {"u": infos["s"]})
    note = next(ln for ln in three.splitlines() if ln.startswith("Machine: "))
    assert note.count("The rows of") == 2 and note.count("load average") == 3, note
    assert "The rows of s are from an earlier run (its sanity rows: B = 4, 20 steps): " in note
    assert "load average 3.0" in note.split("The rows of s")[1], note
    assert "load average 4.0" in note.split("The rows of t")[1].split("The rows of s")[0], note
    # a fourth run (scene s again) keeps t's rows from the run that measured them (named in the
    # note's second part), u's from the third run
    _bench_module("_env").write_section(out, three)
    text_s = mc.section(rows, sanity, {"s": infos["s"]}, args, 6.0, fidelity)
    four = mc.keep_other_scenes(text_s, out, {"s": infos["s"]})
    note = next(ln for ln in four.splitlines() if ln.startswith("Machine: "))
    assert note.count("The rows of") == 2 and "load average 3.0" not in note, note
    assert "load average 4.0" in note.split("The rows of t")[1].split("The rows of u")[0], note
    assert "load average 5.0" in note.split("The rows of u")[1].split("The rows of t")[0], note
    # each engine's fidelity reference is its own problem, converged: soft stays soft (a
    # hard reference would measure the two models' difference), no cap, cold, no early stop
    from jaxdyn import sim

    ref = mc.reference_contact(
        sim.Constraint(soft=True, relaxed=True, max_contacts=80, warm_start=True, tolerance=1e-7)
    )
    assert ref.soft and ref.relaxed and ref.iterations == mc.REF_ITERATIONS
    assert ref.max_contacts is None and not ref.warm_start and ref.tolerance is None
    hard = mc.reference_contact(mc.warm_contact("humanoid"))
    assert not hard.soft and not hard.relaxed and hard.iterations == mc.REF_ITERATIONS
    assert hard.max_contacts is None and not hard.warm_start and hard.tolerance is None


def test_mjx_contact_chunks_and_batches():
    """benchmarks/mjx_contact.py's batching: ``mjx_chunked`` (MJX above MJX_CHUNK
    environments, as lax.map over chunks) gives vmap's result, a zero-size leaf included, and
    refuses a batch that is not a multiple of the chunk; ``take`` slices or repeats a batch."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    mc = _bench_module("mjx_contact")
    B = 2 * mc.MJX_CHUNK
    x = {"a": jnp.arange(B * 3.0).reshape(B, 3), "e": jnp.zeros((B, 0))}
    f = lambda d: {"a": jnp.sin(d["a"]) * d["a"][0], "e": d["e"] + 1}  # noqa: E731
    got, want = jax.jit(mc.mjx_chunked(f))(x), jax.vmap(f)(x)
    np.testing.assert_array_equal(np.asarray(got["a"]), np.asarray(want["a"]))
    assert got["e"].shape == (B, 0)
    with pytest.raises(ValueError, match="multiples of"):
        mc.mjx_chunked(f)({"a": jnp.zeros((B + 1, 3)), "e": jnp.zeros((B + 1, 0))})
    s = {"q": jnp.arange(4.0)}
    np.testing.assert_array_equal(np.asarray(mc.take(s, 6)["q"]), [0, 1, 2, 3, 0, 1])
    np.testing.assert_array_equal(np.asarray(mc.take(s, 2)["q"]), [0, 1])


def test_cpu_name_falls_back_to_the_machine_type(monkeypatch):
    """benchmarks/_env.cpu_name, the CPU every benchmark (the harness too) records: the
    ``model name`` of ``/proc/cpuinfo``; where there is none (aarch64) and
    ``platform.processor()`` is empty, the machine type, not ``"unknown CPU"``."""
    import pathlib
    import platform

    cpu_name = _bench_module("_env").cpu_name
    monkeypatch.setattr(pathlib.Path, "read_text", lambda self, *a, **k: "processor\t: 0\n")
    monkeypatch.setattr(platform, "processor", lambda: "")
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert cpu_name() == "aarch64"
    monkeypatch.setattr(pathlib.Path, "read_text", lambda self, *a, **k: "Model Name : Xeon\n")
    assert cpu_name() == "Xeon"


def test_suite_step_section():
    """benchmarks/suite_step.py's section, without compiling a step: jaxdyn's default row, its
    option rows labelled as options, MJX's two solvers, each row's speed against Playground's
    own env where it ran (else MJX with Playground's cut solver) at the same env and batch,
    the solver errors, the resets with a
    penetrating contact, the phases a time limit left out, and the load (said shared above
    1.5); registered in run_all (one section per benchmark)."""
    import argparse

    ss = _bench_module("suite_step")
    rows = [
        ("walker", "float32", 32, "jaxdyn", 500.0, 1.0, 60.0, 0.012, 0.012),
        ("walker", "float32", 32, "jaxdyn, max_contacts=8", 400.0, 1.2, 50.0, 0.007, 0.007),
        ("walker", "float32", 32, "MJX", 2000.0, 0.25, 30.0, None, None),
        ("walker", "float32", 32, "MJX (Playground's solver)", 250.0, 2.0, 20.0, 2.0, 2.0),
        ("walker", "float64", 32, "jaxdyn", 700.0, 1.0, 60.0, 0.03, 0.03),
    ]
    args = argparse.Namespace(
        rounds=5, calls=4, fidelity_steps=20, reference_iterations=400, time_limit=90.0
    )
    notes = {"penetrating": {("walker", "float32"): (0, 32)}, "skipped": ["hopper (float64)"]}
    text = ss.section(rows, args, 3.0, 0.5, notes, "python benchmarks/suite_step.py")
    assert text.startswith(ss.SECTION + "\n\n`python benchmarks/suite_step.py` on ")
    assert "load average 3.0 at the start, 0.5 at the end (the machine was shared" in text
    assert "| walker | 32 | jaxdyn (default) | 500 | 0.50 | 60.0 | 1.2e-02 |" in text
    assert "| walker | 32 | jaxdyn, option `max_contacts=8` | 400 | 0.62 | 50.0 | 7.0e-03 |" in text
    assert "| walker | 32 | MJX (the file's solver) | 2000 | 0.12 | 30.0 | (reference) |" in text
    assert "| walker | 32 | MJX (Playground's solver) | 250 | 1.00 | 20.0 | 2.0e+00 |" in text
    # no MJX row in the float64 table: no ratio there
    assert "float64:" in text and "| walker | 32 | jaxdyn (default) | 700 |  | 60.0 |" in text
    assert "walker float32 0 of 32." in text
    assert "Not run (past `--time-limit 90` minutes): hopper (float64)." in text
    assert "shared" not in ss.section(rows, args, 0.2, 0.4, {}, "c")
    # Playground's own env, where it ran, is the comparison of its env and batch
    env_row = ("walker", "float32", 32, ss.ENV_LABEL, 200.0, 2.5, 10.0, 0.9, 0.9)
    text = ss.section([*rows, env_row], args, 0.2, 0.4, {}, "c")
    assert "| walker | 32 | jaxdyn (default) | 500 | 0.40 | 60.0 | 1.2e-02 |" in text
    assert "| walker | 32 | Playground's env (MJX) | 200 | 1.00 | 10.0 | 9.0e-01 |" in text
    text = ss.section(rows, args, 0.2, 0.4, {"no playground": True}, "c")
    assert "Playground's own environment did not run" in text
    # the start: the resets, or (--settle) the states after that many random-action steps
    assert "(jaxdyn's resets: the first steps, in which the bodies mostly fall;" in text
    settled = argparse.Namespace(**vars(args), settle=100)
    text = ss.section(rows, settled, 0.2, 0.4, {}, "c")
    assert "(jaxdyn's resets after 100 control steps under random actions" in text
    run_all = _bench_module("run_all")
    assert run_all.BY_NAME["suite_step"].sections == (ss.SECTION,)


def test_one_git_commit_reader(monkeypatch):
    """benchmarks/_env.git_commit is the one reader of the commit: this checkout's short hash
    (with ``(+ uncommitted changes)`` where tracked files differ), ``JAXDYN_GIT_REV`` where set
    (a tree without .git), ``"unknown"`` where git cannot say; no other script runs
    ``git rev-parse`` itself."""
    env = _bench_module("_env")
    monkeypatch.delenv("JAXDYN_GIT_REV", raising=False)
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=BENCH, capture_output=True, text=True
    ).stdout.strip()
    got = env.git_commit()
    if rev:
        assert got == rev or got == rev + " (+ uncommitted changes)", got
    else:  # pragma: no cover - a tree without git
        assert got == "unknown"
    monkeypatch.setenv("JAXDYN_GIT_REV", "abc1234")
    assert env.git_commit() == "abc1234"
    monkeypatch.delenv("JAXDYN_GIT_REV")

    def no_git(*a, **k):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert env.git_commit() == "unknown"
    readers = [p.name for p in BENCH.glob("*.py") if "rev-parse" in p.read_text()]
    assert readers == ["_env.py"], readers


def _fake_children(monkeypatch, pg, child):
    """Stand-ins for the side-by-side driver's child processes: ``subprocess.Popen`` of a
    command with ``--out`` calls ``child(cmd, **kw)`` (which writes the run's JSON where the
    driver asked for it) and exits 0; other commands (git, ...) run. Returns the list the
    children's commands are appended to."""
    launched = []
    popen = subprocess.Popen

    class FakeChild:
        def __new__(cls, cmd, **kw):
            if "--out" not in cmd:  # git, ...
                return popen(cmd, **kw)
            return super().__new__(cls)

        def __init__(self, cmd, **kw):
            launched.append(cmd)
            child(cmd, **kw)

        def wait(self):
            return 0

    monkeypatch.setattr(subprocess, "Popen", FakeChild)
    monkeypatch.setattr(pg.os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    return launched


def _pg_run(task, backend, config, **extra):
    """One training run's JSON as benchmarks/playground_side_by_side.py writes it."""
    result = dict(
        backend=backend,
        final_return=31.5,
        seconds_to_threshold=None,
        total_seconds=120.0,
        cpu_seconds=40.0,
        compile_seconds=60.0,
        cpu_seconds_last_epoch=3.9,
        env_steps_per_second=1500.0,
        evals=[dict(step=0), dict(step=7680), dict(step=15360)],
        **extra,
    )
    return dict(task=task, threshold=100.0, config=config, results=[result], missing=[])


def test_playground_side_by_side_pieces(tmp_path, monkeypatch):
    """benchmarks/playground_side_by_side.py without Playground and without training: the
    training periods' CPU figures from the phases its callbacks mark (the period before
    Brax's loop and the compiling one left out), the budgets (an option given wins over the
    task's CPU_BUDGETS entry), the --tasks driver (each task's two backends as children on
    two different cores, its own options not passed on, the section written from their JSON
    files) and the section's columns, '-' for figures a run did not record."""
    import json

    pg = _bench_module("playground_side_by_side")
    marks = [
        ("start", 0, 0.0, 0.0, 0),
        ("eval", 0, 50.0, 10.0, 5),
        ("train", 0, 50.0, 10.0, 5),
        ("train", 7680, 90.0, 20.0, 9),  # the epoch that compiles
        ("eval", 7680, 95.0, 22.0, 9),
        ("train", 15360, 98.0, 24.0, 9),
        ("eval", 15360, 99.0, 25.0, 9),
        ("train", 23040, 102.0, 28.0, 9),
        ("eval", 23040, 103.0, 29.0, 9),
    ]
    phases = pg._phases(marks)
    assert [p["kind"] for p in phases] == ["eval", "train"] + ["train", "eval"] * 3
    assert phases[2] == dict(
        kind="train", step=7680, seconds=40.0, cpu_seconds=10.0, voluntary_switches=4
    )
    per_epoch, steps_cpu = pg._epoch_figures(phases)
    assert per_epoch == pytest.approx(3.0)  # the last period: 25 -> 28 CPU s
    assert steps_cpu == pytest.approx(2 * 7680 / (2.0 + 3.0))
    assert pg._epoch_figures(pg._phases(marks[:5])) == (None, None)

    args = pg.argparse.Namespace(task="walker_walk", timesteps=1000, num_envs=None)
    args.__dict__.update(dict.fromkeys(pg.DEFAULT_BUDGET, None) | dict(timesteps=1000))
    pg.resolve_budget(args)
    assert args.timesteps == 1000 and args.num_envs == pg.CPU_BUDGETS["walker_walk"]["num_envs"]
    assert set(pg.SUITE) <= set(pg.CPU_BUDGETS) <= set(pg.TASKS)
    assert pg._child_args(["--tasks", "suite", "--time-limit=9", "--seed", "1"]) == ["--seed", "1"]

    def child(cmd, **kw):
        assert kw["env"]["JAXDYN_COMPILATION_CACHE"] == "0"  # cold compilations
        out = Path(cmd[cmd.index("--out") + 1])
        if "--compare-states" in cmd:
            assert "--backend" not in cmd
            states = dict(states=20, obs_size=24, max_obs_diff=4e-7, max_reward_diff=3e-7)
            states.update(reward_range=[0.0, 0.1], task=cmd[cmd.index("--task") + 1])
            out.write_text(json.dumps(states))
            return
        assert "--compare-states" not in cmd
        task, backend = cmd[cmd.index("--task") + 1], cmd[cmd.index("--backend") + 1]
        config = dict(num_envs=32, batch_size=32, num_minibatches=4, num_updates_per_batch=4)
        config["num_timesteps"] = 15360
        extra = dict(cpu_seconds_per_epoch=2.07, env_steps_per_cpu_second=3641.9)
        run = _pg_run(task, backend, config, **(extra if backend == "jaxdyn" else {}))
        out.write_text(json.dumps(run))

    launched = _fake_children(monkeypatch, pg, child)
    out = tmp_path / "R.md"
    argv = ["--tasks", "walker_walk", "--out-dir", str(tmp_path), "--results", str(out)]
    assert pg.main([*argv, "--seed", "3", "--compare-states", "20"]) == 0
    assert len(launched) == 3  # the two training runs, then the state comparison
    launched.pop()
    cores = {c[c.index("--core") + 1] for c in launched}
    assert cores == {"0", "1"}
    assert all("--tasks" not in c and c[c.index("--seed") + 1] == "3" for c in launched)
    text = out.read_text()
    assert pg.SECTION in text and "CPU s / epoch | env steps / CPU s | env steps/s |" in text
    row = (
        "| walker_walk | 15,360 | 32 / 32 / 4 / 4 | 100 | {} | 31.5 | not reached | 120 | 40 | 60 |"
    )
    assert row.format("MJX (Playground)") + " - | - | 1,500 |" in text
    assert row.format("jaxdyn") + " 2.07 | 3,642 | 1,500 |" in text
    assert "both backends of a task at the same time, each pinned to one core" in text
    assert "persistent compilation cache off (every compilation cold)" in text
    assert text.index("MJX (Playground)") < text.index("| jaxdyn |")
    assert "| walker_walk | 24 | 4.0e-07 | 3.0e-07 | 0.000 .. 0.100 |  |" in text


def test_playground_side_by_side_seed_sweep(tmp_path, monkeypatch):
    """benchmarks/playground_side_by_side.py --seeds without training: Welch's test against
    SciPy's own (``ttest_ind(equal_var=False)``: p and the 95 % interval), its verdict (the
    interval holding 0 or not; fewer than two seeds: no test; two samples without spread), the
    driver (each seed's children get --seed, their files _s<seed>, the single run's section
    left alone) and the section of the per-seed record, written again from that record and
    from the runs' files by --report-seeds."""
    import json

    from scipy import stats

    pg = _bench_module("playground_side_by_side")
    a, b = [172.9, 160.2, 181.0, 150.3], [141.4, 158.8, 120.5]
    test = pg.welch(a, b)
    ref = stats.ttest_ind(b, a, equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert test["p"] == pytest.approx(ref.pvalue, rel=1e-9)  # pyright: ignore[reportAttributeAccessIssue]
    assert (test["low"], test["high"]) == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert test["diff"] == pytest.approx(statistics.fmean(b) - statistics.fmean(a))
    assert pg.seed_verdict(test) == "same within seed noise" and test["p"] > 0.05
    apart = pg.welch([100.0, 110.0, 120.0], [60.0, 70.0, 80.0])
    assert apart["p"] < 0.05 and apart["high"] < 0 and pg.seed_verdict(apart) == "jaxdyn lower"
    assert pg.seed_verdict(pg.welch([60.0, 70.0, 80.0], [100.0, 110.0, 121.0])) == "jaxdyn higher"
    assert pg.welch([1.0], [1.0, 2.0]) is None and pg.seed_verdict(None).startswith("-")
    flat = pg.welch([0.0, 0.0], [0.0, 0.0, 0.0])
    assert flat["p"] == 1.0 and pg.seed_verdict(flat) == "same within seed noise"
    assert pg.seed_verdict(pg.welch([0.0, 0.0], [0.5, 0.5])) == "jaxdyn higher"
    x, y = [172.9, 144.8, 162.3, 135.3], [141.4, 113.8, 135.0, 89.6]
    pair, ref = pg.paired(x, y), stats.ttest_rel(y, x)
    ci = ref.confidence_interval(0.95)  # pyright: ignore[reportAttributeAccessIssue]
    assert pair["p"] == pytest.approx(ref.pvalue, rel=1e-9)  # pyright: ignore[reportAttributeAccessIssue]
    assert (pair["low"], pair["high"]) == pytest.approx((ci.low, ci.high), rel=1e-9)
    verdict = pg.seed_verdict(pg.welch(x, y), pair)
    assert verdict == "same within seed noise (Welch); jaxdyn lower paired by seed"
    assert pg.paired([1.0], [2.0]) is None
    assert pg.parse_seeds("0-2,7,1") == [0, 1, 2, 7]
    with pytest.raises(SystemExit, match="--seeds"):
        pg.parse_seeds("0,x")

    returns = {  # task -> backend -> final return per seed
        "walker_walk": dict(mjx=[100.0, 110.0, 120.0], jaxdyn=[60.0, 70.0, 80.0]),
        "cheetah_run": dict(mjx=[100.0, 110.0, 120.0], jaxdyn=[105.0, 125.0, 95.0]),
    }

    def child(cmd, **kw):
        task, backend = cmd[cmd.index("--task") + 1], cmd[cmd.index("--backend") + 1]
        seed = int(cmd[cmd.index("--seed") + 1])
        out = Path(cmd[cmd.index("--out") + 1])
        assert out.name == f"{task}_{backend}_s{seed}.json"
        config = dict(num_envs=32, batch_size=32, num_minibatches=4, num_updates_per_batch=4)
        config["num_timesteps"] = 15360
        extra = dict(env_steps_per_cpu_second=3641.9) if backend == "jaxdyn" else {}
        run = _pg_run(task, backend, config, **extra)
        result = typing.cast(list, run["results"])[0]
        result["final_return"] = returns[task][backend][seed]
        result["total_seconds"] = 120.0 if backend == "mjx" else 90.0 + seed
        out.write_text(json.dumps(dict(run, seed=seed)))

    launched = _fake_children(monkeypatch, pg, child)
    monkeypatch.setattr(pg, "_versions", lambda: "versions")
    results, record = tmp_path / "R.md", tmp_path / "seeds.json"
    results.write_text(f"# Results\n\n{pg.SECTION}\n\nthe single run's table\n")
    runs = tmp_path / "runs"
    argv = ["--tasks", "walker_walk,cheetah_run", "--seeds", "0-2", "--out-dir", str(runs)]
    argv += ["--results", str(results), "--seeds-json", str(record)]
    assert pg.main(argv) == 0
    assert len(launched) == 12
    assert [(c[c.index("--task") + 1], c[c.index("--seed") + 1]) for c in launched[:4]] == [
        ("walker_walk", "0"), ("walker_walk", "0"), ("cheetah_run", "0"), ("cheetah_run", "0"),
    ]  # fmt: skip
    assert all("--seeds" not in c and "--seeds-json" not in c for c in launched)
    text = results.read_text()
    assert "the single run's table" in text and pg.SECTION_SEEDS in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| walker_walk")]
    assert rows == [
        "| walker_walk | 0, 1, 2 | 100.0, 110.0, 120.0 | 110.0 ± 10.0 | 60.0, 70.0, 80.0 "
        "| 70.0 ± 10.0 | -40.0 (-62.7 .. -17.3) | 8e-03 | -40.0 (-40.0 .. -40.0) | 0e+00 | 3 of 3 "
        "| jaxdyn lower | 120 / 91 | - / 3,642 |"
    ]
    assert "| cheetah_run | 0, 1, 2 |" in text and "| same within seed noise |" in text
    assert "Welch's unequal-variance t-test" in text
    sweep = json.loads(record.read_text())
    assert len(sweep["runs"]) == 12 and {r["seed"] for r in sweep["runs"]} == {0, 1, 2}
    assert "phases" not in sweep["runs"][0] and "evals" not in sweep["runs"][0]

    section = text[text.index(pg.SECTION_SEEDS) :]
    results.write_text(f"# Results\n\n{pg.SECTION}\n\nthe single run's table\n")
    assert pg.main(["--report-seeds", str(record), "--results", str(results)]) == 0
    assert results.read_text()[results.read_text().index(pg.SECTION_SEEDS) :] == section
    files = sorted(str(p) for p in runs.glob("*_s*.json"))
    record2 = tmp_path / "again.json"
    argv = ["--report-seeds", *files, "--results", str(results), "--seeds-json", str(record2)]
    assert pg.main(argv) == 0

    def key(r):
        return r["task"], r["seed"], r["backend"]

    assert sorted(json.loads(record2.read_text())["runs"], key=key) == sorted(
        sweep["runs"], key=key
    )
    assert rows[0] in results.read_text()

    # a later sweep of another task and of cheetah_run again: merged into the record
    returns["cheetah_run"] = {"mjx": [1.0, 2.0], "jaxdyn": [3.0, 4.0]}
    monkeypatch.setattr(pg, "_versions", lambda: "later versions")
    argv = ["--tasks", "cheetah_run", "--seeds", "0-1", "--out-dir", str(tmp_path / "later")]
    assert pg.main([*argv, "--results", str(results), "--seeds-json", str(record)]) == 0
    merged = json.loads(record.read_text())
    assert [(p["tasks"], p["versions"]) for p in merged["sweeps"]] == [
        (["walker_walk"], "versions"), (["cheetah_run"], "later versions"),
    ]  # fmt: skip
    assert sorted({(r["task"], r["seed"]) for r in merged["runs"]}) == [
        ("cheetah_run", 0), ("cheetah_run", 1), *(("walker_walk", s) for s in range(3)),
    ]  # fmt: skip
    text = results.read_text()
    assert rows[0] in text and "| cheetah_run | 0, 1 | 1.0, 2.0 | 1.5 ± 0.7 | 3.0, 4.0 |" in text
    assert "walker_walk: Machine:" in text and "cheetah_run: Machine:" in text

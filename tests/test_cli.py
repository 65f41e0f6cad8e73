"""The ``jaxdyn`` command line (``jaxdyn.cli.main``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxdyn
from jaxdyn import cli, robots
from jaxdyn.clusters import ClusterModel


def _run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _field(out: str, name: str) -> str:
    m = re.search(rf"^{re.escape(name)}\s+(.+)$", out, re.M)
    assert m, f"no {name!r} line in:\n{out}"
    return m.group(1).strip()


def test_info_bundled(capsys):
    rc, out, err = _run(capsys, "info", "arm7")
    assert rc == 0, err
    model = robots.load("arm7")
    assert model.describe() in out
    assert _field(out, "nq / nv") == f"{model.nq} / {model.nv}"
    assert _field(out, "bodies") == str(model.nb)
    assert _field(out, "depth") == str(model.depth)
    assert _field(out, "frames") == str(len(model.frame_names))
    assert float(_field(out, "total mass").split()[0]) == pytest.approx(
        float(np.sum(np.asarray(model.mass))), rel=1e-5
    )
    # joint names listed in q/v order
    positions = [out.index(f"  {n}  ") for n in model.joint_names]
    assert positions == sorted(positions)


def test_info_floating_override(capsys):
    rc, out, _ = _run(capsys, "info", "quad12", "--fixed")
    assert rc == 0
    assert "root_joint" not in out
    assert _field(out, "nq / nv") == "12 / 12"
    rc, out, _ = _run(capsys, "info", "quad12")
    assert rc == 0
    assert "root_joint" in out
    assert _field(out, "nq / nv") == "19 / 18"
    rc, _, err = _run(capsys, "info", "quad12", "--fixed", "--floating")
    assert rc == 2 and "not allowed with" in err


def test_info_urdf_path(tmp_path, capsys):
    urdf = robots.random_urdf(8, seed=3, joint_types=("revolute", "prismatic", "spherical"))
    path = tmp_path / "random.urdf"
    path.write_text(urdf)
    model = jaxdyn.load_urdf(str(path), floating_base=True)

    rc, out, err = _run(capsys, "info", str(path), "--floating")
    assert rc == 0, err
    assert _field(out, "source") == str(path)
    assert _field(out, "nq / nv") == f"{model.nq} / {model.nv}"
    assert _field(out, "bodies") == str(model.nb)
    assert model.joint_names[0] == "root_joint"
    positions = [out.index(f"  {n}  ") for n in model.joint_names]
    assert positions == sorted(positions)
    # per-body masses are printed (mass is the last column of the joint table)
    rows = [
        line
        for line in out.splitlines()
        if re.match(r"^\s+\d+\s", line) and line.split()[1] in model.joint_names
    ]
    assert len(rows) == model.nb
    np.testing.assert_allclose(
        [float(r.split()[-1]) for r in rows], np.asarray(model.mass), rtol=1e-5
    )


def test_info_urdf_plus(capsys):
    """A URDF+ file (loop / coupling tags) loads as a ClusterModel: ``info`` describes its
    clusters and the table of its spanning tree (it raised AttributeError on ``model.mass``)."""
    path = Path(jaxdyn.__file__).parent / "clusters" / "data" / "four_bar.urdf"
    model = jaxdyn.load_urdf(str(path))
    assert isinstance(model, ClusterModel)
    tree = model.tree

    rc, out, err = _run(capsys, "info", str(path))
    assert rc == 0, err
    assert model.describe() in out and tree.describe() in out
    assert _field(out, "nq / nv") == f"{tree.nq} / {tree.nv}"
    assert _field(out, "bodies") == str(tree.nb)
    positions = [out.index(f"  {n}  ") for n in tree.joint_names]
    assert positions == sorted(positions)


def test_unknown_robot(capsys):
    rc, out, err = _run(capsys, "info", "no_such_robot_xyz")
    assert rc == 2
    assert out == ""
    assert err.startswith("error: ") and "no_such_robot_xyz" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_urdf(tmp_path, capsys):
    path = tmp_path / "bad.urdf"
    path.write_text(
        '<robot name="r"><link name="a"/><joint name="j" type="revolute">'
        '<parent link="a"/><child link="missing"/></joint></robot>'
    )
    rc, _, err = _run(capsys, "info", str(path))
    assert rc == 2
    assert err.startswith("error: ") and "missing" in err
    assert err.count("\n") == 1

    path.write_text("<robot name='r'><link name='a'>")  # not well-formed XML
    rc, _, err = _run(capsys, "info", str(path))
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1


def test_usage_errors(capsys):
    rc, _, err = _run(capsys)
    assert rc == 2 and "usage" in err
    rc, _, err = _run(capsys, "frobnicate")
    assert rc == 2 and "invalid choice" in err
    rc, _, err = _run(capsys, "demo", "--batch", "0")
    assert rc == 2 and err.startswith("error: ")


def test_demo_small(capsys):
    rc, out, err = _run(capsys, "demo", "--batch", "8")
    assert rc == 0, out + err
    for name in cli.DEMO_ROBOTS:
        assert robots.load(name).describe() in out
    assert out.count("OK") == 2 * len(cli.DEMO_ROBOTS)
    assert "FAILED" not in out
    for alg in ("aba", "rnea", "crba"):
        assert len(re.findall(rf"^\s+{alg}\b.*compile .* / sample$", out, re.M)) == 2
    assert "demo passed" in out


def test_python_dash_m():
    r = subprocess.run(
        [sys.executable, "-m", "jaxdyn", "info", "nope_robot"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2
    assert r.stderr.startswith("error: unknown robot 'nope_robot'")
    assert "Traceback" not in r.stderr


def test_bench_harness_from_checkout(capsys):
    """From a checkout, ``jaxdyn bench`` is the harness of benchmarks/harness.py."""
    d = cli._harness_dir()
    assert d is not None and (d / "harness.py").is_file()
    rc, out, _ = _run(capsys, "bench", "--help")
    assert rc == 0
    assert "usage: jaxdyn bench" in out
    assert "--no-mjx" in out and "Pinocchio" in out  # harness options
    assert "--robots LIST" not in out


def test_bench_standalone(monkeypatch, capsys):
    """Without benchmarks/ (an installed package), ``jaxdyn bench`` times jaxdyn alone."""
    monkeypatch.setattr(cli, "_harness_dir", lambda: None)
    rc, out, _ = _run(capsys, "bench", "--help")
    assert rc == 0 and "usage: jaxdyn bench" in out
    assert "--robots LIST" in out and "--no-mjx" not in out
    rc, out, err = _run(
        capsys,
        "bench",
        "--robot",
        "arm7",
        "--batch",
        "4",
        "--algorithms",
        "rnea,aba",
        "--dtype",
        "float64",
        "--repeats",
        "1",
    )
    assert rc == 0, err
    assert robots.load("arm7").describe() in out
    assert "batch 4, float64" in out
    for alg in ("rnea", "aba"):
        assert (
            len(
                re.findall(
                    rf"^\s+{alg}\s+compile\s+[\d.]+ s\s+run .* / batch = .* / sample$", out, re.M
                )
            )
            == 1
        ), out
    assert not re.search(r"^\s+(crba|minv)\s", out, re.M)
    rc, out, err = _run(capsys, "bench", "--algorithms", "rnea,nope")
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and "nope" in err and err.count("\n") == 1


def test_bench_standalone_flag(capsys):
    """``--standalone`` selects jaxdyn-alone timing from a checkout too."""
    assert cli._harness_dir() is not None
    rc, out, _ = _run(capsys, "bench", "--standalone", "--help")
    assert rc == 0 and "--robots LIST" in out and "--no-mjx" not in out


def test_bench_installed_package(tmp_path):
    """Issue 55: ``jaxdyn bench`` as ``pip install .`` gives it (the wheel holds the ``jaxdyn``
    package only, no ``benchmarks/``) honours the options README lists: ``--quick``,
    ``--robots``, ``--out`` and the rest. Run in a process that imports a copy of the package
    from a folder without ``benchmarks/`` (and not this checkout)."""
    import shutil

    pkg = shutil.copytree(
        Path(jaxdyn.__file__).parent,
        tmp_path / "site" / "jaxdyn",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    out = tmp_path / "report.md"
    code = (
        "import sys, jaxdyn, jaxdyn.cli as c; "
        f"assert jaxdyn.__file__.startswith({str(pkg)!r}), jaxdyn.__file__; "
        "assert c._harness_dir() is None; "
        "assert not any(p.endswith('benchmarks') for p in sys.path), sys.path; "
        "sys.exit(c.main(sys.argv[1:]))"
    )
    argv = ["bench", "--quick", "--robots", "arm7", "--algorithms", "rnea", "--batches", "2"]
    r = subprocess.run(
        [sys.executable, "-c", code, *argv, "--repeats", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path / "site",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "batch 2, float64" in r.stdout  # --quick's dtype, the explicit batch
    assert re.search(r"^\s+rnea\s+compile .* / sample$", r.stdout, re.M), r.stdout
    assert not re.search(r"^\s+aba\s", r.stdout, re.M)  # --algorithms overrides --quick's
    report = out.read_text()
    assert "| arm7 | 7 / 7 | float64 | 2 | rnea |" in report, report
    assert f"wrote {out}" in r.stderr

    r = subprocess.run(
        [sys.executable, "-c", code, "bench", "--robots", "arm7", "--nope"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path / "site",
    )
    assert r.returncode == 2 and "unrecognized arguments: --nope" in r.stderr


def test_bench_standalone_quick_and_lists(monkeypatch, capsys):
    """``--quick`` presets (overridden by explicit options), comma lists of robots, batches
    and dtypes, and usage errors for bad lists and an --out in a missing folder."""
    monkeypatch.setattr(cli, "_harness_dir", lambda: None)
    a = cli._bench_parser().parse_args(["--quick", "--robot", "quad12,arm7", "--dtype", "float32"])
    assert (a.robots, a.dtypes, a.batches, a.quick) == (["quad12", "arm7"], ["float32"], None, True)
    rc, _, err = _run(capsys, "bench", "--batches", "4,x")
    assert rc == 2 and "invalid batch list" in err
    rc, _, err = _run(capsys, "bench", "--dtypes", "float16")
    assert rc == 2 and err.startswith("error: --dtypes") and "float16" in err
    rc, out, err = _run(capsys, "bench", "--quick", "--out", "/no/such/folder/r.md")
    assert rc == 2 and out == "" and err.startswith("error: --out") and err.count("\n") == 1
    rc, out, err = _run(capsys, "bench", "--robots", "arm7,no_such_robot_xyz")
    assert rc == 2 and out == "" and "no_such_robot_xyz" in err


def test_readme_bench_options_are_honoured():
    """Every ``jaxdyn bench`` option of the Command line sections of README.md and
    docs/getting-started.md exists in the installed package's parser and in the checkout's
    harness."""
    root = Path(__file__).resolve().parent.parent
    block = "\n".join(
        re.search(r"^## Command line\n+```\n(.*?)^```", p.read_text(), re.M | re.S).group(1)
        for p in (root / "README.md", root / "docs" / "getting-started.md")
    )
    # the bench lines: those starting with "jaxdyn bench" and their indented continuations
    bench = "\n".join(re.findall(r"^jaxdyn bench.*(?:\n {2,}.*)*", block, re.M))
    flags = set(re.findall(r"--[a-z][a-z-]*", bench)) - {"--standalone", "--help"}
    assert {"--quick", "--robots", "--out"} <= flags, flags
    installed = cli._bench_parser()._option_string_actions
    assert flags <= set(installed), flags - set(installed)
    sys.path.insert(0, str(cli._harness_dir()))
    try:
        import harness
    finally:
        sys.path.pop(0)
    in_harness = harness._parser("jaxdyn bench")._option_string_actions
    assert flags <= set(in_harness), flags - set(in_harness)

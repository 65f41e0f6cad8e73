"""Every ```python block of README.md, and of the documentation pages that teach the API
(:data:`PAGES`), runs as written, on its own (a fresh namespace: no block may use a name
another block defined). A block that appears word for word on two pages (README's API tour is
also the first program of docs/getting-started.md) runs once. One substitution: the API
tour's ``B = 4096`` runs with a small batch (compile time is the same, the run is shorter).

The blocks of :data:`SCRIPT_PAGES` run as scripts in the slow set, each in a fresh process in a
temporary directory (they set JAX's configuration, write files, start several processes); a
marker comment on the line before a block says how it runs when not as ``python block.py``:
``<!-- tests: python -m jaxdyn.distributed ... -->`` through the launcher, or
``<!-- tests: not run (reason) -->`` for a block that needs what a CPU test machine lacks (a
GPU, the network)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import pytest

import jaxdyn

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# The pages whose blocks are complete programs on the default suite's dependencies (README's
# former sections moved there). docs/trajopt.md, viz.md, distributed.md and mjcf.md (longer
# compiles, a renderer, several processes): SCRIPT_PAGES below.
PAGES = [
    README,
    *(
        ROOT / "docs" / f"{name}.md"
        for name in (
            "getting-started",
            "derivatives",
            "clusters",
            "operational-space",
            "simulation",
            "interop",
        )
    ),
]
SUBSTITUTIONS = {"B = 4096\n": "B = 8\n"}


def _blocks():
    out, seen = [], set()
    for page in PAGES:
        text = page.read_text()
        for m in re.finditer(r"^```python\n(.*?)^```", text, re.M | re.S):
            heading = re.findall(r"^#+ (.+)$", text[: m.start()], re.M)
            code = m.group(1)
            if code not in seen:
                seen.add(code)
                out.append(
                    (page.relative_to(ROOT).as_posix(), heading[-1] if heading else "top", code)
                )
    return out


BLOCKS = _blocks()


def test_blocks_found():
    assert len(BLOCKS) >= 7, "README.md and docs: fewer ```python blocks than expected"
    for page in PAGES:  # every listed page still has a block to run
        assert "```python\n" in page.read_text(), f"{page}: no ```python block"
    assert sum(p == "README.md" for p, _, _ in BLOCKS) >= 3, "README.md: fewer snippets"
    for old in SUBSTITUTIONS:
        assert sum(old in code for _, _, code in BLOCKS) == 1, f"substitution {old!r} unused"


@pytest.mark.parametrize(
    "i",
    range(len(BLOCKS)),
    ids=[
        f"{i}-{re.sub(r'[^A-Za-z]+', '_', p + '_' + h)[:40]}" for i, (p, h, _) in enumerate(BLOCKS)
    ],
)
def test_readme_block(i):
    page, heading, code = BLOCKS[i]
    for old, new in SUBSTITUTIONS.items():
        code = code.replace(old, new)
    namespace = {"__name__": f"readme_block_{i}"}
    try:
        with warnings.catch_warnings():  # a reader would see them: the docs' data load clean
            warnings.simplefilter("error", jaxdyn.JaxdynWarning)
            exec(compile(code, f"{page} block {i} ({heading})", "exec"), namespace)
    finally:
        namespace.clear()
        jax.clear_caches()  # the blocks share nothing: free their programs before the next one


def test_mjcf_block_needs_only_the_mjcf_extra():
    """Issue 55: the MJCF example runs after ``pip install '.[mjcf]'`` (MuJoCo), without
    packages that extra does not install (it used dm_control's files)."""
    import sys

    (code,) = [c for _, h, c in BLOCKS if h.startswith("MJCF")]
    imported = set(re.findall(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", code, re.M))
    allowed = {"jaxdyn", "jax", "numpy", "scipy", "equinox", "mujoco"}
    assert imported <= allowed | set(sys.stdlib_module_names), imported


# ----------------------------------------------------------------------------- script pages
SCRIPT_PAGES = [ROOT / "docs" / f"{name}.md" for name in ("trajopt", "viz", "distributed", "mjcf")]
LAUNCHER = "python -m jaxdyn.distributed "
_MARKER = re.compile(r"<!-- tests: (.*?) -->\n$")


def _script_blocks():
    out = []
    for page in SCRIPT_PAGES:
        text = page.read_text()
        for i, m in enumerate(re.finditer(r"^```python\n(.*?)^```", text, re.M | re.S)):
            marker = _MARKER.search(text[: m.start()])  # on the line right before the fence
            name = page.relative_to(ROOT).as_posix()
            out.append((name, i, marker.group(1) if marker else None, m.group(1)))
    return out


SCRIPT_BLOCKS = _script_blocks()
RUN = [b for b in SCRIPT_BLOCKS if b[2] is None or b[2].startswith(LAUNCHER)]


def test_script_blocks_run_or_say_why():
    """Each block of the script pages runs (as a script or through the launcher) or its
    marker gives the reason it cannot on a CPU test machine; most run."""
    for page in SCRIPT_PAGES:
        assert "```python\n" in page.read_text(), f"{page}: no ```python block"
    for page, i, marker, _ in SCRIPT_BLOCKS:
        if marker is not None and not marker.startswith(LAUNCHER):
            assert re.fullmatch(r"not run \(.{10,}\)", marker), f"{page} block {i}: {marker!r}"
    assert len(RUN) >= 5, [b[:3] for b in SCRIPT_BLOCKS]


# slow: each block compiles a larger program in a fresh process (a 100-knot FDDP, a renderer, a
# two-process rollout); test_readme_block runs README's and the API pages' blocks by default,
# test_script_blocks_run_or_say_why checks the markers
@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=[f"{p}-{i}" for p, i, _, _ in RUN])
def test_script_page_block(block, tmp_path):
    page, i, marker, code = block
    script = tmp_path / "block.py"
    script.write_text(code)
    cmd = [sys.executable, str(script)]
    if marker is not None:  # the launcher: python -m jaxdyn.distributed <its options> script
        cmd = [sys.executable, *shlex.split(marker)[1:], str(script)]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    r = subprocess.run(
        cmd,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": path},
    )
    out = f"{page} block {i}:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    assert r.returncode == 0, out
    assert "JaxdynWarning" not in r.stderr, out  # a reader would see it: the docs' data load clean

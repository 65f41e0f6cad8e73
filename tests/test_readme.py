"""Every ```python block of README.md, and of the documentation pages that teach the API
(:data:`PAGES`), runs as written, on its own (a fresh namespace: no block may use a name
another block defined). A block that appears word for word on two pages (README's API tour is
also the first program of docs/getting-started.md) runs once. One substitution: the API
tour's ``B = 4096`` runs with a small batch (compile time is the same, the run is shorter)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import jax
import pytest

import jaxdyn

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# The pages whose blocks are complete programs on the default suite's dependencies (README's
# former sections moved there). docs/trajopt.md, viz.md, distributed.md and mjcf.md show
# fragments, or need a renderer or several processes: their own tests cover them.
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

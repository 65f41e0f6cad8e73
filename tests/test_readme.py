"""Every ```python block of README.md runs as written, on its own (a fresh namespace: no block
may use a name another block defined). One substitution: the API tour's ``B = 4096`` runs
with a small batch (compile time is the same, the run is shorter)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import jax
import pytest

import jaxdyn

README = Path(__file__).resolve().parent.parent / "README.md"
SUBSTITUTIONS = {"B = 4096\n": "B = 8\n"}


def _blocks():
    text = README.read_text()
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.M | re.S):
        heading = re.findall(r"^#+ (.+)$", text[: m.start()], re.M)
        out.append((heading[-1] if heading else "top", m.group(1)))
    return out


BLOCKS = _blocks()


def test_blocks_found():
    assert len(BLOCKS) >= 5, "README.md: fewer ```python blocks than expected"
    for old in SUBSTITUTIONS:
        assert sum(old in code for _, code in BLOCKS) == 1, f"substitution {old!r} unused"


@pytest.mark.parametrize(
    "i",
    range(len(BLOCKS)),
    ids=[f"{i}-{re.sub(r'[^A-Za-z]+', '_', h)[:30]}" for i, (h, _) in enumerate(BLOCKS)],
)
def test_readme_block(i):
    heading, code = BLOCKS[i]
    for old, new in SUBSTITUTIONS.items():
        code = code.replace(old, new)
    namespace = {"__name__": f"readme_block_{i}"}
    try:
        with warnings.catch_warnings():  # a reader would see them: README's data load clean
            warnings.simplefilter("error", jaxdyn.JaxdynWarning)
            exec(compile(code, f"README.md block {i} ({heading})", "exec"), namespace)
    finally:
        namespace.clear()
        jax.clear_caches()  # the blocks share nothing: free their programs before the next one


def test_mjcf_block_needs_only_the_mjcf_extra():
    """Issue 55: the MJCF example runs after ``pip install '.[mjcf]'`` (MuJoCo), without
    packages that extra does not install (it used dm_control's files)."""
    import sys

    (code,) = [c for h, c in BLOCKS if h.startswith("MJCF")]
    imported = set(re.findall(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", code, re.M))
    allowed = {"jaxdyn", "jax", "numpy", "scipy", "equinox", "mujoco"}
    assert imported <= allowed | set(sys.stdlib_module_names), imported

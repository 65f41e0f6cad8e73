"""``import jaxdyn`` imports the core algorithms only; the heavier subpackages (``sim``,
``clusters``, ``io``, ``nori``, ``osim``, ``trajopt``) on first use (PEP 562 ``__getattr__`` in
``jaxdyn/__init__.py``), with the same public names, and old import paths still working.

Each check runs in a fresh interpreter: this one has imported everything already."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import jaxdyn

HEAVY = ("sim", "clusters", "io", "nori", "osim", "trajopt", "envs", "viz", "interop")


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_import_leaves_heavy_subpackages_out():
    _run(
        "import sys, jaxdyn\n"
        f"heavy = [m for m in sys.modules if m.split('.')[1:2] and m.split('.')[1] in {HEAVY!r}"
        " and m.startswith('jaxdyn.')]\n"
        "assert not heavy, heavy\n"
        "assert 'equinox' in sys.modules  # the Model is an equinox Module: core\n"
    )


def test_each_lazy_name_resolves_alone():
    """Every lazy name, in its own fresh process, as an attribute and by ``from jaxdyn import``:
    the same object as the subpackage's own, and bound in the package afterwards.

    One interpreter imports the core (``import jaxdyn``, no lazy name touched, the subpackage
    not imported yet: asserted in each child) and forks a child per name (a fresh interpreter
    per name where there is no ``os.fork``): the children skip the start-up and JAX's import
    that a fresh ``python -c`` per name repeated (most of the test's time)."""
    checks = []
    for name, (package, attr) in sorted(jaxdyn._LAZY.items()):
        want = f"importlib.import_module('jaxdyn.{package}')"
        if attr is not None:
            want = f"getattr({want}, {attr!r})"
        checks.append(
            (
                name,
                f"assert 'jaxdyn.{package}' not in sys.modules; "
                f"assert {name!r} not in vars(jaxdyn); "
                f"from jaxdyn import {name} as x; "
                f"assert x is jaxdyn.{name} is {want}; assert {name!r} in vars(jaxdyn); "
                f"assert {name!r} in dir(jaxdyn)",
            )
        )
    _run(
        "import importlib, os, subprocess, sys, traceback\n"
        "import jaxdyn\n"
        f"checks = {checks!r}\n"
        "failed = []\n"
        "for name, code in checks:\n"
        "    if not hasattr(os, 'fork'):\n"
        "        head = 'import importlib, sys, jaxdyn; '\n"
        "        r = subprocess.run([sys.executable, '-c', head + code], capture_output=True,\n"
        "                           text=True)\n"
        "        if r.returncode:\n"
        "            failed.append((name, r.stderr[-2000:]))\n"
        "        continue\n"
        "    pid = os.fork()\n"
        "    if pid == 0:  # the child: the check, then out without the parent's exit handlers\n"
        "        try:\n"
        "            exec(code)\n"
        "        except BaseException:\n"
        "            traceback.print_exc()\n"
        "            sys.stderr.flush()\n"
        "            os._exit(1)\n"
        "        os._exit(0)\n"
        "    if os.waitpid(pid, 0)[1] != 0:\n"
        "        failed.append(name)\n"
        "assert not failed, failed\n"
        "assert not [n for n, _ in checks if n in vars(jaxdyn)]  # the parent resolved none\n"
    )


def test_public_surface_unchanged():
    """``__all__``, ``dir`` and the attributes the former eager imports bound."""
    _run(
        "import jaxdyn, importlib\n"
        "missing = [n for n in jaxdyn.__all__ if n not in dir(jaxdyn)]\n"
        "assert not missing, missing\n"
        "for n in jaxdyn.__all__: getattr(jaxdyn, n)\n"
        "import jaxdyn.sim\n"
        "from jaxdyn.sim import step\n"
        "assert step is jaxdyn.sim.step\n"
        "try:\n"
        "    jaxdyn.no_such_name\n"
        "except AttributeError as e:\n"
        "    assert 'no_such_name' in str(e)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
    )


def test_old_paths_before_their_new_modules():
    """The old paths of ``jaxdyn._compat`` work when their new modules are not imported yet:
    ``jaxdyn.model.mjcf`` (``jaxdyn.io.mjcf``), ``jaxdyn.clusters.urdfplus.load_urdf``."""
    _run(
        "import sys, jaxdyn\n"
        "import jaxdyn.model.mjcf as old\n"
        "import jaxdyn.io.mjcf as new\n"
        "assert old is new and sys.modules['jaxdyn.model.mjcf'] is new\n"
        "assert new.__spec__.name == 'jaxdyn.io.mjcf', new.__spec__\n"
        "assert jaxdyn.model.mjcf is new\n"
    )
    _run("import sys, jaxdyn\nassert jaxdyn.model.mjcf is sys.modules['jaxdyn.io.mjcf']\n")
    _run(
        "import sys, jaxdyn\n"
        "from jaxdyn.clusters.urdfplus import load_urdf\n"
        "assert load_urdf is jaxdyn.io.urdf.load_urdf\n"
        "import jaxdyn.clusters.urdfplus as m\n"
        "assert type(m.__loader__).__name__ == 'SourceFileLoader', m.__loader__\n"
    )


def test_type_checking_imports_match():
    """The ``if TYPE_CHECKING:`` imports of ``jaxdyn/__init__.py`` (what pyright sees) name
    each lazy name once, from the subpackage it is loaded from."""
    tree = ast.parse(Path(jaxdyn.__file__).read_text())
    seen = {}
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.level == 1
                for a in imp.names:
                    assert a.asname == a.name
                    seen[a.name] = (
                        (imp.module, None) if imp.module is None else (imp.module, a.name)
                    )
    want = {
        name: (None, None) if attr is None else (package, attr)
        for name, (package, attr) in jaxdyn._LAZY.items()
    }
    assert seen == want

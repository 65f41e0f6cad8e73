"""The package's import graph: no cycles, imports flow one way through the layers, private
names stay inside their package, and old import paths of moved names still work.

The graph is read from the source (``ast``), every import counted: at the top of a module and
inside functions (an import deferred to call time is still a dependency). An import ``from
jaxdyn.pkg import Name`` of a name that ``pkg/__init__.py`` re-exports counts as an import of
the module that defines it.
"""

from __future__ import annotations

import ast
import importlib
import re
import warnings
from pathlib import Path

import pytest

import jaxdyn
from jaxdyn import _compat

ROOT = Path(jaxdyn.__file__).parent

#: The layers, bottom first: a module may import its own layer and those below. A module's
#: layer is that of the longest prefix listed. ``backend`` (XLA:CPU machinery) and the switches
#: and error types sit below everything; loaders (``io``) above the models they build and the
#: sim / constraint objects MJCF files describe; applications on top.
LAYERS = [
    # 0: below all: switches, versions, error types, XLA:CPU backend
    (
        "jaxdyn._versions",
        "jaxdyn.config",
        "jaxdyn._progress",
        "jaxdyn._precision",
        "jaxdyn.errors",
        "jaxdyn.backend",
    ),
    # 1: batching rules, dense linear algebra, the value checks and eager compilation
    ("jaxdyn.batching", "jaxdyn._linalg", "jaxdyn.value_checks", "jaxdyn.eager"),
    ("jaxdyn.spatial",),
    ("jaxdyn.joints",),
    # model, and the map between a model and MuJoCo's (joints only)
    ("jaxdyn.model", "jaxdyn.interop.mujoco"),
    # the public shell: the decorator of the public functions, input checks (prepare)
    ("jaxdyn.shell", "jaxdyn._checks"),
    ("jaxdyn.algorithms",),
    (
        "jaxdyn.derivatives",
        "jaxdyn.clusters",
        "jaxdyn.osim",
        "jaxdyn.constraints",
        "jaxdyn.iwim",
        "jaxdyn.nori",
    ),
    ("jaxdyn.sim",),
    ("jaxdyn.io",),
    # applications (and the package's front: jaxdyn/__init__.py, the CLI, old paths)
    (
        "jaxdyn",
        "jaxdyn.__main__",
        "jaxdyn._api",
        "jaxdyn._compat",
        "jaxdyn.cli",
        "jaxdyn.envs",
        "jaxdyn.trajopt",
        "jaxdyn.viz",
        "jaxdyn.robots",
        "jaxdyn.distributed",
        "jaxdyn.interop",
        "jaxdyn.latency",
    ),
]

#: Imports allowed to run against the layer order, each with its reason (not counted in the
#: cycle check either: each is deferred to call time).
ALLOWED_UPWARD: dict = {
    ("jaxdyn.sim.geoms", "jaxdyn.viz.scene"): (
        "URDF collision meshes read by viz.scene's mesh reader (read_mesh, resolve_mesh) at "
        "call time; to move into a reader below sim"
    ),
}

#: modules kept for code written against former names; no module of jaxdyn imports them
COMPAT_MODULES = ("jaxdyn._checks",)

#: the one place where JAX's and equinox's internals may be used (``jaxdyn/backend``)
INTERNALS = ("jax._src", "equinox._jit", "equinox._")


def _layer_of(module: str) -> int:
    best, rank = -1, None
    for i, names in enumerate(LAYERS):
        for prefix in names:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    assert rank is not None, f"{module} is in no layer of tests/test_architecture.py"
    return rank


def _modules() -> dict:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = ["jaxdyn", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _package(module: str) -> str:
    """The module's package (``jaxdyn.algorithms`` for ``jaxdyn.algorithms.rnea``)."""
    path = MODULES[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _reexports(module: str) -> dict:
    """``name -> defining module`` of a package's ``from .x import name`` lines."""
    out = {}
    tree = ast.parse(MODULES[module].read_text())
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            src = f"{module}.{node.module}"
            for a in node.names:
                if src in MODULES:
                    out[a.asname or a.name] = src
    return out


def _imports():
    """``(importer, imported module, name or None, line)`` for every import of jaxdyn."""
    out = []
    for module, path in MODULES.items():
        pkg = _package(module)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "jaxdyn":
                        out.append((module, a.name, None, node.lineno))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                if src.split(".")[0] != "jaxdyn":
                    continue
                for a in node.names:
                    sub = f"{src}.{a.name}"
                    if sub in MODULES or sub in _compat.MODULES:
                        out.append((module, sub, None, node.lineno))
                    else:
                        out.append((module, src, a.name, node.lineno))
    return out


IMPORTS = _imports()


def _target(src: str, name: str | None) -> str:
    """The module an import depends on (a package's re-export followed to its source)."""
    if name is not None and src in MODULES and MODULES[src].name == "__init__.py":
        return _reexports(src).get(name, src)
    return src


def _edges() -> dict:
    edges: dict = {}
    for module, src, name, line in IMPORTS:
        target = _target(src, name)
        if target != module and target in MODULES:
            edges.setdefault(module, {}).setdefault(target, line)
    return edges


def test_no_cycles():
    edges = _edges()
    for module, target in ALLOWED_UPWARD:
        edges.get(module, {}).pop(target, None)
    cycles, state, stack = [], {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t) :] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(MODULES):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_layers():
    bad = []
    for module, targets in _edges().items():
        for target, line in targets.items():
            if _layer_of(target) > _layer_of(module) and (module, target) not in ALLOWED_UPWARD:
                bad.append(
                    f"{MODULES[module].relative_to(ROOT.parent)}:{line}: {module} "
                    f"(layer {_layer_of(module)}) imports {target} (layer {_layer_of(target)})"
                )
    assert not bad, "imports against the layer order:\n" + "\n".join(sorted(bad))


def test_allow_list_is_needed():
    """Every allowed upward import still exists (a stale entry would hide a new one)."""
    edges = _edges()
    stale = [pair for pair in ALLOWED_UPWARD if pair[1] not in edges.get(pair[0], {})]
    assert not stale, f"ALLOWED_UPWARD entries no longer used: {stale}"


def _top(module: str) -> str:
    """The first-level package (``jaxdyn.algorithms``), or the module itself at the top."""
    return ".".join(module.split(".")[:2])


def test_no_private_names_across_packages():
    """``from jaxdyn.x import _name`` only within x's own first-level package; a private module
    of a subpackage (``jaxdyn.sim._params``) likewise. Private modules at the top
    (``jaxdyn._precision``) are the package's shared internals."""
    bad = []
    for module, src, name, line in IMPORTS:
        where = f"{MODULES[module].relative_to(ROOT.parent)}:{line}"
        private = name is not None and name.startswith("_") and not name.startswith("__")
        if private and _top(src) != _top(module):
            bad.append(f"{where}: {module} imports {src}.{name}")
        leaf = src.rpartition(".")[2]
        if (
            name is None
            and leaf.startswith("_")
            and src.count(".") >= 2
            and _top(src) != _top(module)
        ):
            bad.append(f"{where}: {module} imports the private module {src}")
    # ``module._name`` on a module imported from another subpackage
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        alias = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for m, src, name, _ in _resolve_from(module, node):
                    if name is None:
                        alias[m] = src
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in alias
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and _sub(alias[node.value.id]) != _sub(module)
            ):
                where = f"{path.relative_to(ROOT.parent)}:{node.lineno}"
                bad.append(f"{where}: {module} uses {alias[node.value.id]}.{node.attr}")
    assert not bad, "private names imported across packages:\n" + "\n".join(sorted(bad))


def _sub(module: str) -> str:
    """The subpackage of a module (``jaxdyn.clusters``), or ``jaxdyn`` for the modules at the
    top (``jaxdyn.batching``: the package's own shared internals)."""
    top = _top(module)
    return top if top in MODULES and MODULES[top].name == "__init__.py" else "jaxdyn"


def _resolve_from(module: str, node):
    """``(local name, module, None)`` for each submodule a ``from ... import`` binds."""
    pkg = _package(module)
    if node.level:
        base = pkg.split(".")
        base = base[: len(base) - (node.level - 1)]
        src = ".".join(base + ([node.module] if node.module else []))
    else:
        src = node.module or ""
    for a in node.names:
        sub = f"{src}.{a.name}"
        if sub in MODULES:
            yield a.asname or a.name, sub, None, node.lineno


def test_no_old_paths_inside():
    """No module of jaxdyn imports a name through its old (compatibility) path."""
    old = set(_compat.MODULES) | {f"{m}.{n}" for m, n in (*_compat.NAMES, *_compat.DEPRECATED)}
    old |= set(COMPAT_MODULES)
    bad = [
        f"{m}:{line} imports {src if name is None else f'{src}.{name}'}"
        for m, src, name, line in IMPORTS
        if src in old or (name is not None and f"{src}.{name}" in old)
    ]
    for module, path in MODULES.items():
        if module in ("jaxdyn._compat", *COMPAT_MODULES):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                dotted = _dotted(node)
                if dotted and any(dotted == o or dotted.startswith(o + ".") for o in old):
                    bad.append(f"{module}:{node.lineno} uses {dotted}")
    assert not bad, bad


def _dotted(node) -> str | None:
    """``a.b.c`` of an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


@pytest.mark.parametrize("old", sorted(_compat.MODULES))
def test_old_module_paths_work(old):
    assert importlib.import_module(old) is importlib.import_module(_compat.MODULES[old])


@pytest.mark.parametrize("key", sorted(_compat.NAMES), ids=".".join)
def test_old_name_paths_work(key):
    module, name = key
    new_module, _, new_name = _compat.NAMES[key].rpartition(".")
    got = getattr(importlib.import_module(module), name)
    assert got is getattr(importlib.import_module(new_module), new_name)


URDF = """<robot name="r"><link name="a"/><link name="b"><inertial><mass value="1"/>
<inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/></inertial></link>
<joint name="j" type="revolute"><parent link="a"/><child link="b"/><axis xyz="0 0 1"/>
</joint></robot>"""


@pytest.mark.parametrize("key", sorted(_compat.DEPRECATED), ids=".".join)
def test_deprecated_paths_warn(key):
    module, name = key
    use, path = _compat.DEPRECATED[key]
    with pytest.warns(DeprecationWarning, match=f"{module}.{name} is deprecated: use"):
        got = getattr(importlib.import_module(module), name)
    new_module, _, new_name = path.rpartition(".")
    assert got is getattr(importlib.import_module(new_module), new_name)


def test_deprecated_tree_loader_works():
    """``jaxdyn.model.load_urdf``: the spanning-tree Model, as before (clusters=False)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from jaxdyn.model import load_urdf
    # one warning, not two (the import machinery's hasattr probe does not warn)
    assert [w.category for w in caught] == [DeprecationWarning], caught
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = load_urdf(URDF)
        want = jaxdyn.load_urdf(URDF)
    assert isinstance(model, jaxdyn.Model) and model.nv == want.nv == 1
    assert model.joint_names == want.joint_names


def test_single_public_names():
    """One ``load_urdf``, ``rnea`` and ``aba`` in the package (the other paths are the
    deprecated aliases above)."""
    import jaxdyn.algorithms.aba as aba_mod
    import jaxdyn.algorithms.rnea as rnea_mod

    assert jaxdyn.load_urdf is jaxdyn.io.load_urdf
    assert jaxdyn.load is jaxdyn.io.load and jaxdyn.load_mjcf is jaxdyn.io.load_mjcf
    assert "rnea" not in vars(rnea_mod) and "aba" not in vars(aba_mod)
    assert jaxdyn.rnea is jaxdyn.derivatives.rnea and jaxdyn.aba is jaxdyn.derivatives.aba


def test_internals_in_one_place():
    """``jax._src`` and equinox's private modules only in ``jaxdyn/backend`` (guarded there)."""
    bad = []
    for module, path in MODULES.items():
        if module.startswith("jaxdyn.backend"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for n in names:
                if n.startswith(INTERNALS):
                    bad.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {n}")
    assert not bad, bad


def test_former_checks_names():
    """``jaxdyn._checks`` (split by job) still offers the names code used from it."""
    from jaxdyn import _checks, eager, errors, shell, value_checks

    assert _checks.value_checks_enabled is value_checks.enabled
    assert _checks.error_if is value_checks.error_if and _checks.unchecked is value_checks.unchecked
    assert _checks.public is shell.public and _checks.as_array is shell.as_array
    assert _checks.eager_jit is eager.eager_jit and _checks._eager_jit is eager.compiled
    assert _checks.CheckError is errors.CheckError is jaxdyn.CheckError
    assert all(hasattr(_checks, n) for n in _checks.__all__)


# ---------------------------------------------------------------- annotations of the public API


def _private(module: str) -> bool:
    return any(p.startswith("_") for p in module.split("."))


def _reexported_from_private() -> dict:
    """``defining module -> names`` that a public package re-exports from a private module
    (``jaxdyn.distributed``'s ``from ._runtime import ...``)."""
    out: dict = {}
    for module, path in MODULES.items():
        if path.name != "__init__.py" or _private(module):
            continue
        for name, src in _reexports(module).items():
            if _private(src):
                out.setdefault(src, set()).add(name)
    return out


def _missing_annotations(fn, method: bool) -> list:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
    if method and not static and params:
        params = params[1:]  # self / cls
    params += [p for p in (a.vararg, a.kwarg) if p is not None]
    missing = [p.arg for p in params if p.annotation is None]
    if fn.returns is None:
        missing.append("return")
    return missing


def _dunder_all(tree: ast.Module) -> set | None:
    """The names of a module's literal ``__all__``, or None without one."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return None


def _unannotated() -> dict:
    """``module:qualname -> [unannotated parameters, "return"]`` of the public functions (a
    public module's non-underscore functions, or those of its ``__all__``; those a public package
    re-exports from a private module) and of the public methods (non-underscore, ``__init__``,
    ``__call__``) of their classes, read from the source."""
    fns = (ast.FunctionDef, ast.AsyncFunctionDef)
    private_exports = _reexported_from_private()
    out = {}
    for module, path in sorted(MODULES.items()):
        if module.endswith("__main__"):
            continue
        tree = ast.parse(path.read_text())
        if _private(module):
            wanted = private_exports.get(module, set())
        else:
            wanted = _dunder_all(tree)  # None: every non-underscore name
        for node in tree.body:
            public = not node.name.startswith("_") if isinstance(node, (*fns, ast.ClassDef)) else 0
            if not public or (wanted is not None and node.name not in wanted):
                continue
            if isinstance(node, fns):
                if missing := _missing_annotations(node, method=False):
                    out[f"{module}:{node.name}"] = missing
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if not isinstance(item, fns):
                        continue
                    if item.name.startswith("_") and item.name not in ("__init__", "__call__"):
                        continue
                    if missing := _missing_annotations(item, method=True):
                        out[f"{module}:{node.name}.{item.name}"] = missing
    return out


def test_public_functions_are_annotated():
    """Every public function and method annotates its parameters and its return (pyright and
    users' type checkers see ``Unknown`` otherwise)."""
    missing = _unannotated()
    assert not missing, "public functions without annotations (parameters / return):\n" + (
        "\n".join(f"  {k}: {', '.join(v)}" for k, v in sorted(missing.items()))
    )


#: a ``for`` loop (or comprehension) over levels: its iterable names ``levels`` (a topology's,
#: Nori's, a row plan's), the level count ``nl`` or a level partition (``segments(...)``) ...
LEVEL_ITER = re.compile(r"\blevels\b|\bsegments\(|\bnl\b")
#: ... whose body computes on arrays (traced: plan builders loop over levels in numpy)
TRACED = re.compile(r"\bjnp\.|\bjax\.|\blax\.|\bmm\(|\bmv\(")


def test_level_loops_only_in_tree():
    """One level engine: no module but ``jaxdyn/model/tree.py`` runs its own loop over depth
    levels at trace time; the passes go through ``tree.walk`` / ``forward_pass`` /
    ``backward_pass`` (per-level row plans as their ``static`` values, Nori's levels through
    ``walk``). Loops over other static structures (PV-OSIMr's N-depths, LTL's coordinate
    depths) are not level loops of the kinematic tree and are not matched."""
    bad = []
    for module, path in MODULES.items():
        if module == "jaxdyn.model.tree":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.For):
                it = ast.unparse(node.iter)
                body = "\n".join(ast.unparse(b) for b in node.body)
            elif isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
                it = " ".join(ast.unparse(g.iter) for g in node.generators)
                parts = (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)
                body = " ".join(ast.unparse(p) for p in parts)
            else:
                continue
            if LEVEL_ITER.search(it) and TRACED.search(body):
                bad.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: for ... in {it}")
    assert not bad, bad

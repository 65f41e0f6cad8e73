"""Old import paths of names that moved, kept working (``tests/test_architecture.py`` checks
each one, and that no module of jaxdyn itself uses them).

Installed by ``jaxdyn/__init__.py`` (:func:`install`): the aliases are set from the top, so no
layer imports the one above it to offer them. The modules imported by then get them at once;
the others (``jaxdyn/__init__.py`` imports ``io``, ``clusters``, ``sim``, ... on first use) when
they are imported, through a finder on ``sys.meta_path`` (:class:`_Finder`).

* :data:`MODULES`: ``jaxdyn.model.mjcf`` is :mod:`jaxdyn.io.mjcf`, ``jaxdyn._uninitialized``
  is :mod:`jaxdyn.backend.ffi` (the same module objects).
* :data:`NAMES`: ``jaxdyn.clusters.urdfplus.load_urdf`` is :func:`jaxdyn.load_urdf`.
* :data:`DEPRECATED` (a ``DeprecationWarning`` when the old name is looked up):

  - ``jaxdyn.model.load_urdf`` and ``jaxdyn.model.build.load_urdf``: the tree-only URDF loader,
    now ``jaxdyn.load_urdf(..., clusters=False)`` (a :class:`jaxdyn.Model` for every file; the
    one difference: a file whose root link has its own ``floating`` joint now refuses
    ``floating_base=True``, whose two stacked free joints made the mass matrix singular);
  - ``jaxdyn.algorithms.rnea.rnea`` and ``jaxdyn.algorithms.aba.aba``: RNEA / ABA without the
    analytic derivative rules, now ``rnea_plain`` / ``aba_plain`` of the same modules (one
    public ``rnea`` and one ``aba``: ``jaxdyn.rnea`` / ``jaxdyn.aba``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings

#: old module path -> new module path (the same module object under both names)
MODULES = {"jaxdyn.model.mjcf": "jaxdyn.io.mjcf", "jaxdyn._uninitialized": "jaxdyn.backend.ffi"}

#: (old module, name) -> dotted path of the object kept under the old path as is
NAMES = {("jaxdyn.clusters.urdfplus", "load_urdf"): "jaxdyn.io.urdf.load_urdf"}

#: (old module, name) -> (what to use instead, dotted path of the object the old name gives)
DEPRECATED = {
    ("jaxdyn.model", "load_urdf"): ("jaxdyn.load_urdf", "jaxdyn._compat.tree_load_urdf"),
    ("jaxdyn.model.build", "load_urdf"): ("jaxdyn.load_urdf", "jaxdyn._compat.tree_load_urdf"),
    ("jaxdyn.algorithms.rnea", "rnea"): (
        "jaxdyn.rnea (jaxdyn.algorithms.rnea.rnea_plain without the analytic derivatives)",
        "jaxdyn.algorithms.rnea.rnea_plain",
    ),
    ("jaxdyn.algorithms.aba", "aba"): (
        "jaxdyn.aba (jaxdyn.algorithms.aba.aba_plain without the analytic derivatives)",
        "jaxdyn.algorithms.aba.aba_plain",
    ),
}


def tree_load_urdf(source, floating_base: bool = False, gravity=(0.0, 0.0, -9.81), strict=None):
    """``jaxdyn.load_urdf(source, floating_base, gravity, clusters=False, strict=strict)``: a
    :class:`jaxdyn.Model` for every file (deprecated ``jaxdyn.model.load_urdf``)."""
    from .io.urdf import load_urdf

    return load_urdf(
        source, floating_base=floating_base, gravity=gravity, clusters=False, strict=strict
    )


tree_load_urdf.__name__ = tree_load_urdf.__qualname__ = "load_urdf"


def _resolve(path: str):
    if path in MODULES:  # an old module path, as an attribute of its parent
        return importlib.import_module(path)
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _module_getattr(module: str, names: dict, previous=None):
    """A module ``__getattr__`` giving the old names of ``module`` (``names``: name -> (what to
    use instead, or None for a name kept as is, dotted path of the object)), then asking the
    module's own ``__getattr__`` (``previous``), if any."""

    def __getattr__(name):
        if name not in names:
            if previous is not None:
                return previous(name)
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        use, path = names[name]
        # ``from package import name`` asks twice: the import machinery's ``hasattr`` probe
        # (``_handle_fromlist``), then the import itself; warn on the latter only.
        if use is not None and sys._getframe(1).f_code.co_name != "_handle_fromlist":
            warnings.warn(
                f"{module}.{name} is deprecated: use {use}", DeprecationWarning, stacklevel=2
            )
        return _resolve(path)

    return __getattr__


def _per_module() -> dict:
    """old module -> {name: (what to use instead or None, dotted path)}: every name of
    :data:`NAMES` and :data:`DEPRECATED`, and the old module paths as attributes of their
    parent packages."""
    out: dict = {}
    for old in MODULES:
        parent, _, leaf = old.rpartition(".")
        out.setdefault(parent, {})[leaf] = (None, old)
    for (module, name), new in NAMES.items():
        out.setdefault(module, {})[name] = (None, new)
    for (module, name), target in DEPRECATED.items():
        out.setdefault(module, {})[name] = target
    return out


def _patch(module) -> None:
    """Give an imported ``module`` its old names (a module ``__getattr__`` resolving them on
    first use, so that ``jaxdyn.clusters.urdfplus.load_urdf`` does not import ``jaxdyn.io``
    before it is asked for)."""
    names = _PER_MODULE[module.__name__]
    previous = vars(module).get("__getattr__")
    module.__getattr__ = _module_getattr(module.__name__, names, previous)


class _AliasLoader(importlib.abc.Loader):
    """Loads an old module path as the new module object itself (not a copy)."""

    def __init__(self, new: str):
        self.new = new
        self.spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self.spec  # the import machinery set the alias's spec on it


class _PatchingLoader(importlib.abc.Loader):
    """The module's own loader, then :func:`_patch`."""

    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = self.inner
        if module.__spec__ is not None:
            module.__spec__.loader = self.inner
        self.inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Old module paths (:data:`MODULES`) and the modules given old names (:func:`_patch`) that
    are imported after ``jaxdyn`` (its subpackages are imported on first use)."""

    def find_spec(self, fullname, path, target=None):
        if fullname in MODULES:
            return importlib.util.spec_from_loader(fullname, _AliasLoader(MODULES[fullname]))
        if fullname in _PER_MODULE and fullname not in sys.modules:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
            return spec
        return None


_PER_MODULE = _per_module()


def install() -> None:
    """Set the old paths: now for the modules imported already, on import for the others
    (``jaxdyn/__init__.py`` imports its heavier subpackages on first use)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    for old, new in MODULES.items():
        if new in sys.modules:
            parent, _, leaf = old.rpartition(".")
            sys.modules[old] = sys.modules[new]
            setattr(sys.modules[parent], leaf, sys.modules[new])
    for module in _PER_MODULE:
        if module in sys.modules:
            _patch(sys.modules[module])

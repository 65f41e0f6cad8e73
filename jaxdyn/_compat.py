"""Old import paths of names that moved, kept working (``tests/test_architecture.py`` checks
each one, and that no module of jaxdyn itself uses them).

Installed by ``jaxdyn/__init__.py`` once every subpackage is imported: the aliases are set from
the top, so no layer imports the one above it to offer them.

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
    module, _, name = path.rpartition(".")
    return getattr(sys.modules[module], name)


def _module_getattr(module: str, names: dict):
    def __getattr__(name):
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        use, path = names[name]
        warnings.warn(f"{module}.{name} is deprecated: use {use}", DeprecationWarning, stacklevel=2)
        return _resolve(path)

    return __getattr__


def install() -> None:
    """Set the old paths (the modules involved are imported already)."""
    for old, new in MODULES.items():
        parent, _, leaf = old.rpartition(".")
        sys.modules[old] = sys.modules[new]
        setattr(sys.modules[parent], leaf, sys.modules[new])
    for (module, name), new in NAMES.items():
        setattr(sys.modules[module], name, _resolve(new))
    per_module: dict = {}
    for (module, name), target in DEPRECATED.items():
        per_module.setdefault(module, {})[name] = target
    for module, names in per_module.items():
        sys.modules[module].__getattr__ = _module_getattr(module, names)

"""The oldest JAX jaxdyn runs on, checked when jaxdyn is imported (this module is its first
import).

``pyproject.toml`` states the same bound for pip (``tests/test_api.py`` keeps the two equal);
the check here is for installs that bypass it (``pip install --no-deps``, a checkout on
``PYTHONPATH``): an older JAX lacks APIs jaxdyn uses (``jax.extend.core.Primitive``,
``jax.ffi``) and would fail somewhere inside a trace with a message that names neither.
"""

from __future__ import annotations

import re

#: jaxdyn's own version (``jaxdyn.__version__``; pyproject.toml states it too)
__version__ = "0.1.0"

#: the oldest release of jax and jaxlib jaxdyn is tested with: CI's Python 3.10 lane gets 0.6.2
#: (JAX's newest for Python 3.10) and runs the default suite on it, as on the newest JAX
MIN_JAX = (0, 6, 2)


def release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: ``"0.10.2.dev20261101"`` ->
    ``(0, 10, 2)``; ``()`` when it starts with no number."""
    m = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def check(package: str, version: str) -> None:
    """Raise ``ImportError`` naming ``package``, its ``version`` and the bound when the version
    is older than :data:`MIN_JAX` (an unparsable version passes: a local build)."""
    found = release(version)
    if found and found + (0,) * (len(MIN_JAX) - len(found)) < MIN_JAX:
        need = ".".join(map(str, MIN_JAX))
        raise ImportError(
            f"jaxdyn needs {package} >= {need}, found {package} {version}: "
            f"pip install --upgrade 'jax>={need}' 'jaxlib>={need}'"
        )


def _check_installed() -> None:
    """jaxlib first, before ``import jax`` (whose own check of jaxlib would speak first)."""
    import jaxlib.version

    check("jaxlib", jaxlib.version.__version__)
    import jax

    check("jax", jax.__version__)


_check_installed()

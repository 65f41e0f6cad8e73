"""jaxdyn: rigid-body dynamics in JAX, fast, batched, differentiable and exact.

Spatial vectors are ``[angular; linear]`` (Featherstone). A floating base has
``q = [x, y, z, qw, qx, qy, qz]`` and ``v = [ω; v]`` in base coordinates.

Every public name is bound once. ``jaxdyn.rnea`` / ``jaxdyn.aba`` are the algorithms with
analytic ``custom_jvp`` rules (:mod:`jaxdyn.derivatives`; the plain ones are
``jaxdyn.algorithms.rnea.rnea_plain`` / ``jaxdyn.algorithms.aba.aba_plain``); the loaders are
:mod:`jaxdyn.io`'s:
``jaxdyn.load_urdf`` reads URDF and URDF+ files (:func:`jaxdyn.io.load_urdf`: a file with loop
tags gives a :class:`jaxdyn.clusters.ClusterModel`, any other a :class:`Model`);
``jaxdyn.load_mjcf`` reads MJCF (MuJoCo XML) through MuJoCo's compiler
(:mod:`jaxdyn.io.mjcf`, ``pip install 'jaxdyn[mjcf]'``) and ``jaxdyn.load`` picks the loader
from the file's root element; ``random_configuration`` / ``neutral_configuration`` accept both
model types. Global switches are in :mod:`jaxdyn.config`.

``import jaxdyn`` imports the tree algorithms; ``sim``, ``clusters``, ``io``, ``nori``,
``osim``, ``trajopt`` and ``interop`` (and the names re-exported from them) are imported on
first use (:data:`_LAZY`, PEP 562), under the same names.
"""

import importlib as _importlib
import typing as _typing

from . import _versions as _versions  # first: refuses a JAX older than jaxdyn needs
from ._versions import __version__ as __version__

from . import config as config
from .eager import jit as jit
from .errors import CheckError as CheckError
from .errors import JaxdynWarning as JaxdynWarning
from .value_checks import set_value_checks as set_value_checks
from .algorithms.configuration import difference as difference
from .algorithms.configuration import integrate as integrate
from .algorithms.centroidal import Centroidal as Centroidal
from .algorithms.centroidal import centroidal_dynamics as centroidal_dynamics
from .algorithms.centroidal import centroidal_momentum as centroidal_momentum
from .algorithms.centroidal import centroidal_momentum_bias as centroidal_momentum_bias
from .algorithms.centroidal import centroidal_momentum_matrix as centroidal_momentum_matrix
from .algorithms.centroidal import center_of_mass_jacobian as center_of_mass_jacobian
from .algorithms.coriolis import coriolis_matrix as coriolis_matrix
from .algorithms.crba import crba as crba
from .algorithms.energy import center_of_mass as center_of_mass
from .algorithms.energy import kinetic_energy as kinetic_energy
from .algorithms.energy import potential_energy as potential_energy
from .algorithms.frame_motion import frame_acceleration as frame_acceleration
from .algorithms.frame_motion import frame_velocity as frame_velocity
from .algorithms.jacobian import jacobian as jacobian
from .algorithms.jacobian import joint_jacobians as joint_jacobians
from .algorithms.kinematics import forward_kinematics as forward_kinematics
from .algorithms.kinematics import frame_placement as frame_placement
from .algorithms.minv import minv as minv
from .algorithms.rnea import bias_forces as bias_forces
from .algorithms.rnea import gravity_forces as gravity_forces
from .batching import vmap as vmap
from .model import Model as Model

# Operational-space quantities (issue #5): constraints, Delassus matrix, constrained dynamics,
# inertia-weighted input matrix.
from . import constraints as constraints
from .constraints import Connect as Connect
from .constraints import Weld as Weld
from .constraints import constraint_jacobian as constraint_jacobian
from .iwim import Inputs as Inputs
from .iwim import build_input_matrix as build_input_matrix
from .iwim import input_matrix as input_matrix

# Analytical derivatives (issue #3): IDSVA / FDSVA partials, and rnea / aba with custom_jvp
# rules built on them.
from . import derivatives as derivatives
from .derivatives import aba as aba
from .derivatives import aba_derivatives as aba_derivatives
from .derivatives import rnea as rnea
from .derivatives import rnea_derivatives as rnea_derivatives

# One robot at a time with the least overhead per call (issue #53): numpy in, numpy out,
# a synchronous XLA:CPU client of jaxdyn's own.
from .latency import compile_for_latency as compile_for_latency

#: Names imported on first use (PEP 562 ``__getattr__``, issue #53: ``import jaxdyn`` stays
#: cheap; ``jaxdyn.sim``, ``from jaxdyn import sim``, ``import jaxdyn.sim`` work as before):
#: name -> (subpackage, attribute of it, or None for the subpackage itself).
_LAZY: dict[str, tuple[str, str | None]] = {
    # OSIM / constrained dynamics (issue #5)
    "osim": ("osim", None),
    "constrained_aba": ("osim", "constrained_aba"),
    "delassus": ("osim", "delassus"),
    # Kinematic loops by clusters of bodies (issue #4): URDF+ models, C-RNEA / C-ABA / C-EFPA
    # (Chignoli et al., T-RO 2024) and their projected / Lagrange / reflected-inertia baselines.
    "clusters": ("clusters", None),
    "caba": ("clusters", "caba"),
    "cefpa": ("clusters", "cefpa"),
    "crnea": ("clusters", "crnea"),
    # Loaders (jaxdyn.io, above the models they build): URDF / URDF+, MJCF through MuJoCo's
    # compiler (issue #14; the optional ``mujoco`` package is imported only when an MJCF file is
    # loaded), and a loader dispatching on the file's root element.
    "io": ("io", None),
    "load": ("io", "load"),
    "load_mjcf": ("io", "load_mjcf"),
    "load_urdf": ("io", "load_urdf"),
    "interop": ("interop", None),
    # Functions taking a Model or a ClusterModel (defined with the clusters: jaxdyn._api).
    "neutral_configuration": ("_api", "neutral_configuration"),
    "random_configuration": ("_api", "random_configuration"),
    # Nori's sparse-matrix dynamics (issue #13): inverse, forward dynamics and estimation as one
    # sparse linear system, orderings optimised offline.
    "nori": ("nori", None),
    # Simulation (issue #11): batched rollouts with contact on the configuration manifold.
    "sim": ("sim", None),
    # Trajectory optimisation (issue #12): FDDP / iLQR / box-FDDP with analytic step Jacobians.
    "trajopt": ("trajopt", None),
}

if _typing.TYPE_CHECKING:  # what the lazy names are, for type checkers
    from . import clusters as clusters
    from . import interop as interop
    from . import io as io
    from . import nori as nori
    from . import osim as osim
    from . import sim as sim
    from . import trajopt as trajopt
    from ._api import neutral_configuration as neutral_configuration
    from ._api import random_configuration as random_configuration
    from .clusters import caba as caba
    from .clusters import cefpa as cefpa
    from .clusters import crnea as crnea
    from .io import load as load
    from .io import load_mjcf as load_mjcf
    from .io import load_urdf as load_urdf
    from .osim import constrained_aba as constrained_aba
    from .osim import delassus as delassus
else:  # hidden from type checkers, which would take any misspelt name for a lazy one

    def __getattr__(name: str) -> _typing.Any:
        """Import a lazy name of :data:`_LAZY` on first use and bind it in the package."""
        try:
            package, attr = _LAZY[name]
        except KeyError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        module = _importlib.import_module(f"{__name__}.{package}")
        value = module if attr is None else getattr(module, attr)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY})


# JAX's persistent compilation cache in jaxdyn's directory, unless switched off (jaxdyn.config)
config._cache_from_env()

# Old import paths of names that moved (jaxdyn.model.mjcf, jaxdyn.model.load_urdf, ...)
from . import _compat  # noqa: E402

_compat.install()

__all__ = [
    "Centroidal",
    "CheckError",
    "Connect",
    "Inputs",
    "JaxdynWarning",
    "Model",
    "Weld",
    "aba",
    "aba_derivatives",
    "bias_forces",
    "build_input_matrix",
    "caba",
    "center_of_mass",
    "center_of_mass_jacobian",
    "centroidal_dynamics",
    "centroidal_momentum",
    "centroidal_momentum_bias",
    "centroidal_momentum_matrix",
    "cefpa",
    "clusters",
    "compile_for_latency",
    "config",
    "constrained_aba",
    "constraint_jacobian",
    "constraints",
    "coriolis_matrix",
    "crba",
    "crnea",
    "delassus",
    "derivatives",
    "difference",
    "forward_kinematics",
    "frame_acceleration",
    "frame_placement",
    "frame_velocity",
    "gravity_forces",
    "input_matrix",
    "integrate",
    "jacobian",
    "io",
    "jit",
    "joint_jacobians",
    "kinetic_energy",
    "load",
    "load_mjcf",
    "load_urdf",
    "minv",
    "neutral_configuration",
    "nori",
    "potential_energy",
    "random_configuration",
    "rnea",
    "rnea_derivatives",
    "set_value_checks",
    "sim",
    "trajopt",
    "vmap",
]

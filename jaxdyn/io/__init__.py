"""Loaders: robot files to models, one layer above the models they build.

* :func:`load_urdf` (``jaxdyn.load_urdf``): URDF and URDF+ files (:mod:`jaxdyn.io.urdf`);
* :func:`load_urdf_plus`: a URDF+ file as a :class:`jaxdyn.clusters.ClusterModel`
  (:func:`jaxdyn.clusters.load_urdf_plus`);
* :func:`load_mjcf` (``jaxdyn.load_mjcf``): MJCF through MuJoCo's compiler
  (:mod:`jaxdyn.io.mjcf`, ``pip install 'jaxdyn[mjcf]'``);
* :func:`load` (``jaxdyn.load``): either, chosen by the file's root element.

The layers below hold what the loaders use: the URDF parser
(:func:`jaxdyn.model.urdf.parse_urdf`, text to a description), the compilers of a description
(:func:`jaxdyn.model.build_model`, :func:`jaxdyn.clusters.build`) and the model types. The
MJCF loader also builds :mod:`jaxdyn.sim`'s contact geometry and actuators and
:mod:`jaxdyn.constraints`' loop closures, so this package sits above them; nothing below it
imports it (``tests/test_architecture.py``).
"""

from ..clusters.urdfplus import load_urdf_plus as load_urdf_plus
from .mjcf import MJCFModel as MJCFModel
from .mjcf import load as load
from .mjcf import load_mjcf as load_mjcf
from .urdf import load_urdf as load_urdf

__all__ = ["MJCFModel", "load", "load_mjcf", "load_urdf", "load_urdf_plus"]

"""Simulation: batched rollouts with contact, on the configuration manifold.

* :class:`State`, :class:`SimConfig`, :func:`step`, :func:`rollout` (:mod:`jaxdyn.sim.core`);
* contact geometry on frames (:class:`Sphere`, :class:`Point`, :class:`Box`, :class:`Capsule`,
  compiled by :func:`contact_set`) against a :class:`Plane` or a :class:`Heightfield`
  (:mod:`jaxdyn.sim.geometry`);
* collision geoms on any bodies and the pairs that may touch, :class:`Geoms` (from MJCF:
  ``load_mjcf(...).geoms``; from URDF: :func:`urdf_geoms`), through the narrow phase of
  :mod:`jaxdyn.sim.collision` (:mod:`jaxdyn.sim.geoms`);
* scenes composed in Python: :class:`Scene` of :class:`Robot` s, free objects
  (:class:`FreeObject`, :func:`FreeBox`, :func:`FreeSphere`, ...) and static geometry
  (:class:`Ground`, :class:`StaticGeom`, :func:`StaticBox`) as one model (:mod:`jaxdyn.sim.scene`);
* contact models :class:`Compliant` and :class:`Constraint` (:mod:`jaxdyn.sim.contact`);
* actuators :class:`Torque`, :class:`PD`, MuJoCo's gain / bias family :class:`GainBias`, and
  :class:`JointLimits`, joint :class:`Springs`, :class:`FixedTendons`,
  :class:`SpatialTendons`
  (:mod:`jaxdyn.sim.actuators`);
* MuJoCo's equality constraints (connect, weld, joint) as soft constraints,
  :class:`Equalities` (:mod:`jaxdyn.sim.equality`), and its joint-limit constraint,
  :class:`LimitConstraints`, and its dry joint friction, :class:`FrictionLoss`
  (:mod:`jaxdyn.sim.limits`);
* MuJoCo's inertia-based fluid forces, :class:`Fluid` (:mod:`jaxdyn.sim.fluid`);
* batches over several devices: :func:`batch_mesh`, :func:`shard_batch`,
  :func:`sharded_vmap` (:mod:`jaxdyn.sim.sharding`).
"""

from .actuators import PD as PD
from .actuators import FixedTendons as FixedTendons
from .actuators import GainBias as GainBias
from .actuators import JointLimits as JointLimits
from .actuators import SpatialTendons as SpatialTendons
from .actuators import Springs as Springs
from .actuators import Torque as Torque
from .actuators import joint_properties as joint_properties
from .contact import Compliant as Compliant
from .contact import Constraint as Constraint
from .contact import solve_cone_complementarity as solve_cone_complementarity
from .core import SimConfig as SimConfig
from .core import State as State
from .core import contact_counts as contact_counts
from .core import contact_forces as contact_forces
from .core import rollout as rollout
from .core import step as step
from .core import step_info as step_info
from .core import warm_state as warm_state
from .equality import Equalities as Equalities
from .fluid import Fluid as Fluid
from .geometry import Box as Box
from .geometry import Capsule as Capsule
from .geometry import ContactSet as ContactSet
from .geometry import Heightfield as Heightfield
from .geometry import Plane as Plane
from .geometry import Point as Point
from .geometry import Sphere as Sphere
from .geometry import contact_set as contact_set
from .geoms import Geoms as Geoms
from .geoms import urdf_geoms as urdf_geoms
from .limits import FrictionLoss as FrictionLoss
from .limits import LimitConstraints as LimitConstraints
from .scene import FreeBox as FreeBox
from .scene import FreeCapsule as FreeCapsule
from .scene import FreeCylinder as FreeCylinder
from .scene import FreeMesh as FreeMesh
from .scene import FreeObject as FreeObject
from .scene import FreeSphere as FreeSphere
from .scene import Ground as Ground
from .scene import Robot as Robot
from .scene import Scene as Scene
from .scene import StaticBox as StaticBox
from .scene import StaticGeom as StaticGeom
from .sharding import batch_mesh as batch_mesh
from .sharding import shard_batch as shard_batch
from .sharding import sharded_vmap as sharded_vmap

__all__ = [
    "PD",
    "Box",
    "Capsule",
    "Compliant",
    "Constraint",
    "ContactSet",
    "Equalities",
    "FixedTendons",
    "Fluid",
    "FreeBox",
    "FreeCapsule",
    "FreeCylinder",
    "FreeMesh",
    "FreeObject",
    "FreeSphere",
    "FrictionLoss",
    "GainBias",
    "Geoms",
    "Ground",
    "Heightfield",
    "JointLimits",
    "LimitConstraints",
    "Plane",
    "Point",
    "Robot",
    "Scene",
    "SimConfig",
    "SpatialTendons",
    "Springs",
    "Sphere",
    "State",
    "StaticBox",
    "StaticGeom",
    "batch_mesh",
    "shard_batch",
    "sharded_vmap",
    "Torque",
    "contact_counts",
    "contact_forces",
    "contact_set",
    "joint_properties",
    "rollout",
    "solve_cone_complementarity",
    "step",
    "step_info",
    "warm_state",
    "urdf_geoms",
]

"""Dynamics of systems with local kinematic loops, by clusters of bodies.

Reference: M. Chignoli, N. Adrian, S. Kim, P. M. Wensing, "Recursive rigid-body dynamics
algorithms for systems with kinematic loops", IEEE Transactions on Robotics, 2024
(arXiv:2311.13732); the C++ reference implementation is ``ROAM-Lab-ND/generalized_rbda``.

* Models: :func:`load_urdf_plus` (URDF+ files: ``<coupling>``, ``<loop>``, ``independent=``,
  and URDF ``<mimic>``), :func:`build` (programmatic, with the specifications of
  :mod:`jaxdyn.clusters.spec`), :mod:`jaxdyn.clusters.robots` (bundled URDF+ robots, Tello,
  generated chains); :func:`fold_rotors` (axisymmetric rotors carried by their parents, applied
  by default where exact), :func:`with_armature`.
* Algorithms, one per module: :func:`crnea` (inverse dynamics, :mod:`~jaxdyn.clusters.crnea`),
  :func:`caba` (forward dynamics, :mod:`~jaxdyn.clusters.caba`), :func:`cefpa` (inverse
  operational-space inertia, :mod:`~jaxdyn.clusters.cefpa`); their shared pieces in
  :mod:`jaxdyn.clusters.common`.
* State maps (:mod:`jaxdyn.clusters.state`): :func:`spanning_state` (``q``, ``qdot = G v``,
  ``qdd = G a + g``, ``G``, ``g``), :func:`loop_constraints` (``phi``, ``K``, ``k`` of the loop
  constraints), :func:`project_configuration`, and :func:`random_configuration` /
  :func:`neutral_configuration`, the same functions as ``jaxdyn.random_configuration`` /
  ``jaxdyn.neutral_configuration`` (they take a :class:`jaxdyn.Model` or a
  :class:`ClusterModel`).
* Baselines (same signatures, :mod:`jaxdyn.clusters.baselines`): :func:`projected_rnea`,
  :func:`projection_fd`, :func:`lagrange_fd`, :func:`projected_osim`, and
  :func:`approximate_model` (reflected inertia / unconstrained link trees).

Imports flow one way: ``spec -> model -> state -> common -> rotors -> crnea / caba / cefpa ->
baselines``, ``urdfplus -> robots``.
"""

from . import robots as robots
from . import spec as spec
from .baselines import (
    APPROXIMATIONS,
    approximate_model,
    approximate_state,
    lagrange_fd,
    projected_osim,
    projected_rnea,
    projection_fd,
)
from .caba import caba
from .cefpa import cefpa
from .crnea import crnea
from .model import ClusterModel, with_armature
from .quantities import cluster_quantities
from .rotors import fold_rotors
from .spec import (
    Cluster,
    Coupling,
    ImplicitConstraint,
    LinearConstraint,
    Mimic,
    PointLoop,
    belt_transmission,
    geared_transmission,
    tello_hip_differential_phi,
    tello_knee_ankle_differential_phi,
)
from .state import (
    SpanningState,
    loop_constraints,
    neutral_configuration,
    project_configuration,
    random_configuration,
    spanning_configuration,
    spanning_state,
)
from .urdfplus import build, load_urdf_plus

__all__ = [
    "APPROXIMATIONS",
    "Cluster",
    "ClusterModel",
    "Coupling",
    "ImplicitConstraint",
    "LinearConstraint",
    "Mimic",
    "PointLoop",
    "SpanningState",
    "approximate_model",
    "approximate_state",
    "belt_transmission",
    "build",
    "caba",
    "cefpa",
    "cluster_quantities",
    "crnea",
    "fold_rotors",
    "geared_transmission",
    "lagrange_fd",
    "load_urdf_plus",
    "loop_constraints",
    "neutral_configuration",
    "project_configuration",
    "projected_osim",
    "projected_rnea",
    "projection_fd",
    "random_configuration",
    "spanning_configuration",
    "spanning_state",
    "tello_hip_differential_phi",
    "tello_knee_ankle_differential_phi",
    "with_armature",
]

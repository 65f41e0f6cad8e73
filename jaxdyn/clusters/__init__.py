"""Dynamics of systems with local kinematic loops, by clusters of bodies.

Reference: M. Chignoli, N. Adrian, S. Kim, P. M. Wensing, "Recursive rigid-body dynamics
algorithms for systems with kinematic loops", IEEE Transactions on Robotics, 2024
(arXiv:2311.13732); the C++ reference implementation is ``ROAM-Lab-ND/generalized_rbda``.

* Models: :func:`load_urdf_plus` (URDF+ files: ``<coupling>``, ``<loop>``, ``independent=``,
  and URDF ``<mimic>``), :func:`build` (programmatic, with the specifications of
  :mod:`jaxdyn.clusters.spec`), :mod:`jaxdyn.clusters.robots` (bundled URDF+ robots, Tello,
  generated chains).
* Algorithms: :func:`crnea` (inverse dynamics), :func:`caba` (forward dynamics), :func:`cefpa`
  (inverse operational-space inertia).
* State maps: :func:`spanning_state` (``q``, ``qdot = G v``, ``qdd = G a + g``, ``G``, ``g``),
  :func:`constraint_jacobian` (``phi``, ``K``, ``k``), :func:`random_configuration`,
  :func:`project_configuration`, :func:`neutral_configuration`.
* Baselines (same signatures): :func:`projected_rnea`, :func:`projection_fd`,
  :func:`lagrange_fd`, :func:`projected_osim`, and :func:`approximate_model` (reflected
  inertia / unconstrained link trees).
"""

from . import robots as robots
from . import spec as spec
from .algorithms import caba, crnea
from .baselines import (
    APPROXIMATIONS,
    approximate_model,
    approximate_state,
    lagrange_fd,
    projected_osim,
    projected_rnea,
    projection_fd,
)
from .cefpa import cefpa
from .model import ClusterModel, build, with_armature
from .quantities import cluster_quantities
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
    constraint_jacobian,
    neutral_configuration,
    project_configuration,
    random_configuration,
    spanning_configuration,
    spanning_state,
)
from .urdfplus import load_urdf_plus

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
    "constraint_jacobian",
    "crnea",
    "geared_transmission",
    "lagrange_fd",
    "load_urdf_plus",
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

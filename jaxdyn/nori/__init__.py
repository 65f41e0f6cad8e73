"""Dynamics as one sparse linear system: Nori's formulation, orderings optimised offline.

F. Nori, "Inverse, forward and other dynamic computations computationally optimized with
sparse matrix factorizations". The Newton-Euler equations of a kinematic tree (eq. 3) are
linear in the dynamic variables ``d = {a_i, f_i, tau_i, f^x_i, qdd_i}`` once the kinematics
``(q, v)`` are known: ``D(q, v) d + b(q, v) = 0`` (eq. 5, 6). Known quantities and sensor
readings add rows ``D_Y d + b_Y = 0`` (eq. 8, 15, 17). Inverse dynamics, forward dynamics and
sensor-based estimation are then the same sparse problem with different rows, solved by a
sparse factorisation whose row and column permutations are chosen once, offline, on the
worst-case sparsity pattern (§IV-D, Remark 4).

Public API:

* quantities and sensors (:mod:`jaxdyn.nori.sensors`): :class:`JointTorque`,
  :class:`JointAcceleration`, :class:`ExternalWrench`, :func:`LoadCells`,
  :class:`ForceTorque`, :class:`Accelerometer`, :class:`Gyroscope`;
  :func:`inverse_dynamics_knowns`, :func:`forward_dynamics_knowns`;
* :func:`build` -- offline: rows, tree ordering, well-posedness (a clear error naming the
  unobservable quantities), optionally the ordering report (:func:`analyze`);
* :func:`solve` -- the square system by the tree LU (:class:`Solution`);
* :func:`estimate` -- weighted least squares / MAP with sensor standard deviations (BERDY);
* :func:`inverse_dynamics`, :func:`forward_dynamics` -- same arguments and results as
  :func:`jaxdyn.rnea` / :func:`jaxdyn.aba`, through the sparse system;
* :func:`assemble` -- the dense ``D``, ``r`` (oracle, dense baseline).

All run-time functions are pure: ``jit`` (the system is static: close over it or pass it as a
static argument), ``vmap`` and ``grad`` apply. See ``docs/nori.md`` for the formulation, the
orderings and the estimator.
"""

from .analysis import Analysis, analyze
from .assembly import assemble
from .build import build, forward_dynamics, inverse_dynamics
from .estimate import estimate
from .factor import Solution, solve
from .sensors import (
    COMPONENTS,
    Accelerometer,
    ExternalWrench,
    ForceTorque,
    Gyroscope,
    JointAcceleration,
    JointTorque,
    LoadCells,
    forward_dynamics_knowns,
    inverse_dynamics_knowns,
)
from .structure import NoriSystem

__all__ = [
    "COMPONENTS",
    "Accelerometer",
    "Analysis",
    "ExternalWrench",
    "ForceTorque",
    "Gyroscope",
    "JointAcceleration",
    "JointTorque",
    "LoadCells",
    "NoriSystem",
    "Solution",
    "analyze",
    "assemble",
    "build",
    "estimate",
    "forward_dynamics",
    "forward_dynamics_knowns",
    "inverse_dynamics",
    "inverse_dynamics_knowns",
    "solve",
]

"""Operational-space quantities: the Delassus matrix and constrained forward dynamics.

* :func:`delassus` -- ``J M^-1 J^T`` by PV-OSIMr (default), PV-OSIM, EFPA, LTL or dense;
* :func:`constrained_aba` -- forward dynamics with bilateral constraints.
"""

from .constrained import ConstrainedDynamics, constrained_aba
from .delassus import METHODS, delassus

__all__ = ["METHODS", "ConstrainedDynamics", "constrained_aba", "delassus"]

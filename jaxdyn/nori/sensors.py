"""Known quantities and sensors: the measurement rows ``D_Y d + b_Y = y`` of Nori's eq. (17).

Every class below describes a linear function of the dynamic variables
``d = {a_i, f_i, tau_i, f^x_i, qdd_i}`` of one body (paper §III-A; all in body ``i``
coordinates, Remark 1), plus a state-dependent offset. Passed to :func:`jaxdyn.nori.build` as
``known=`` the rows are exact (the paper's eq. 8 / 9 for inverse dynamics, eq. 15 for forward
dynamics); passed as ``sensors=`` they are measurements with a standard deviation ``std``
(weighted least squares / MAP in :func:`jaxdyn.nori.estimate`; exact rows in
:func:`jaxdyn.nori.solve`).

Spatial vectors are ``[angular; linear]``; wrench components are named
``("nx", "ny", "nz", "fx", "fy", "fz")``. A ``frame`` is any frame of the model (a URDF link or
joint, ``model.frame_names``); its placement in its body is fixed.

=====================  ===========================  ==================================
class                  rows (``y`` shape)            measured quantity
=====================  ===========================  ==================================
:class:`JointTorque`       ``(n_j,)``; all: ``(nv,)``  ``tau_j`` (eq. 15)
:class:`JointAcceleration` ``(n_j,)``; all: ``(nv,)``  ``qdd_j`` (eq. 8)
:class:`ExternalWrench`    ``(k,)``; all: ``(nb, 6)``  components of ``f^x_b`` at ``frame``
                           (a tuple of frames:
                           ``(len, k)``)
:class:`LoadCells`         ``(3,)``                    ``(nx, ny, fz)`` of ``f^x_b`` at
                                                        ``frame`` (paper eq. 19)
:class:`ForceTorque`       ``(6,)``                    ``f_j`` (wrench through joint ``j``)
                                                        at ``frame``
:class:`Accelerometer`     ``(3,)``                    proper linear acceleration of
                                                        ``frame``'s origin, frame axes
:class:`Gyroscope`         ``(3,)``                    angular acceleration, frame axes
=====================  ===========================  ==================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    pass

__all__ = [
    "COMPONENTS",
    "Accelerometer",
    "ExternalWrench",
    "ForceTorque",
    "Gyroscope",
    "JointAcceleration",
    "JointTorque",
    "LoadCells",
    "forward_dynamics_knowns",
    "inverse_dynamics_knowns",
]

#: names of the six components of a wrench ``[n; f]`` (angular first)
COMPONENTS = ("nx", "ny", "nz", "fx", "fy", "fz")


def _target(cls, x, what, many=False):
    if x is None:
        return None
    if many and isinstance(x, (list, tuple)):
        if not x:
            raise ValueError(f"{cls}: {what} is an empty sequence")
        return tuple(_target(cls, e, what) for e in x)
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (str, int, np.integer)):
        kinds = (
            "a name (str), an index (int), a tuple of them"
            if many
            else "a name (str), an index (int)"
        )
        raise ValueError(f"{cls}: {what} must be {kinds} or None, got {x!r}")
    return x if isinstance(x, str) else int(x)


def _std(cls, std):
    if std is None:
        return None
    a = np.asarray(std, dtype=np.float64)
    if a.ndim > 1 or not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"{cls}: std must be a positive number or a vector of them, got {std!r}")
    return float(a) if a.ndim == 0 else tuple(float(v) for v in a)


def _components(cls, comps):
    if comps is None:
        return COMPONENTS
    if isinstance(comps, str):
        comps = (comps,)
    comps = tuple(comps)
    bad = [c for c in comps if c not in COMPONENTS]
    if bad or not comps or len(set(comps)) != len(comps):
        raise ValueError(
            f"{cls}: components must be distinct names among {COMPONENTS}, got {comps!r}"
        )
    return comps


class _Spec:
    """Common behaviour: a frozen, hashable description with a label for messages."""

    kind = "spec"

    @property
    def label(self) -> str:
        name = getattr(self, "name", None)
        if name:
            return name
        args = ", ".join(
            f"{k}={getattr(self, k)!r}"
            for k in self._label_fields
            if getattr(self, k) is not None and getattr(self, k) != self._defaults.get(k)
        )
        return f"{type(self).__name__}({args})"

    _label_fields: tuple = ()
    _defaults: dict = {}


@dataclass(frozen=True)
class JointTorque(_Spec):
    """Joint torque ``tau_j`` (all ``n_j`` coordinates of joint ``j``; paper eq. 15).

    ``joint=None``: every joint at once, ``y`` of shape ``(nv,)`` in ``v`` order (the
    ``tau`` of :func:`jaxdyn.aba`); a tuple of joints: their coordinates concatenated in the
    order given. For a floating base, ``tau`` of ``root_joint`` is the wrench applied to the
    base through its free joint (zero for a real robot).
    """

    joint: str | int | None = None
    std: float | tuple | None = None
    name: str | None = None

    kind = "tau"
    _label_fields = ("joint",)

    def __post_init__(self):
        object.__setattr__(self, "joint", _target("JointTorque", self.joint, "joint", True))
        object.__setattr__(self, "std", _std(self.label, self.std))


@dataclass(frozen=True)
class JointAcceleration(_Spec):
    """Joint acceleration ``qdd_j`` (paper eq. 8); ``joint=None``: every joint, ``y (nv,)``;
    a tuple of joints: their coordinates concatenated in the order given.

    For a floating base, ``qdd`` of ``root_joint`` is the base's spatial acceleration
    ``[dω/dt; dv/dt]`` in base coordinates (jaxdyn's convention).
    """

    joint: str | int | None = None
    std: float | tuple | None = None
    name: str | None = None

    kind = "qdd"
    _label_fields = ("joint",)

    def __post_init__(self):
        object.__setattr__(self, "joint", _target("JointAcceleration", self.joint, "joint", True))
        object.__setattr__(self, "std", _std(self.label, self.std))


@dataclass(frozen=True)
class ExternalWrench(_Spec):
    """Components of the external wrench ``f^x_b`` on the body ``b`` carrying ``frame``,
    expressed at ``frame`` (origin and axes): ``y = E (^frame X*_b) f^x_b``.

    The paper has one external wrench per body (``f^x_i``, eq. 3); a wrench given at a frame
    is that body's total external wrench moved to the frame. ``frame=None``: every body at its
    own frame, ``y (nb, 6)`` -- the ``f_ext`` of :func:`jaxdyn.rnea` (``components`` must then
    be all six); a tuple of ``k`` frames: ``y (k, len(components))``.

    Known zero components model contact assumptions, e.g. the paper's slippery floor (eq. 24):
    ``ExternalWrench("left_sole_link", ("fx", "fy"))`` known to be zero.
    """

    frame: str | int | None = None
    components: tuple | None = None
    std: float | tuple | None = None
    name: str | None = None

    kind = "fx"
    _label_fields = ("frame", "components")
    _defaults = {"components": COMPONENTS}

    def __post_init__(self):
        object.__setattr__(self, "frame", _target("ExternalWrench", self.frame, "frame", True))
        object.__setattr__(self, "components", _components("ExternalWrench", self.components))
        if self.frame is None and self.components != COMPONENTS:
            raise ValueError(
                "ExternalWrench(frame=None) stands for every body's whole wrench; "
                "components need a frame"
            )
        object.__setattr__(self, "std", _std(self.label, self.std))


def LoadCells(
    frame: str | int, std: float | tuple | None = None, name: str | None = None
) -> ExternalWrench:
    """Load cells under a foot (paper §VI, eq. 19): the normal force and the two in-plane
    torques ``y = (nx, ny, fz)`` of the external wrench at ``frame`` (``z`` normal to the
    sole). Four load cells give exactly these three numbers."""
    return ExternalWrench(frame, ("nx", "ny", "fz"), std=std, name=name or f"LoadCells({frame!r})")


@dataclass(frozen=True)
class ForceTorque(_Spec):
    """6-axis force/torque sensor in joint ``joint``: the wrench ``f_j`` transmitted to the
    joint's child body from its parent (paper's ``f_i``), expressed at ``frame`` (a frame of
    the child body; default its own frame): ``y = ^frame X*_j f_j``, ``[n; f]``.

    A sensor between two links welded by a fixed joint lies inside one jaxdyn body and cannot
    be described by the paper's variables; place it at the moving joint next to it, or
    measure the distal external wrench with :class:`ExternalWrench`.
    """

    joint: str | int
    frame: str | int | None = None
    std: float | tuple | None = None
    name: str | None = None

    kind = "ft"
    _label_fields = ("joint", "frame")

    def __post_init__(self):
        if self.joint is None:
            raise ValueError("ForceTorque: joint is required")
        object.__setattr__(self, "joint", _target("ForceTorque", self.joint, "joint"))
        object.__setattr__(self, "frame", _target("ForceTorque", self.frame, "frame"))
        object.__setattr__(self, "std", _std(self.label, self.std))


@dataclass(frozen=True)
class Accelerometer(_Spec):
    """Accelerometer at ``frame``: the proper acceleration (classical acceleration of the
    frame's origin minus gravity) in frame axes, ``y (3,)``: affine in the body's ``a_b``
    (which carries the fictitious ``-g`` of the base, paper §IV-A), with a velocity offset
    ``ω x (v + ω x r)``."""

    frame: str | int
    std: float | tuple | None = None
    name: str | None = None

    kind = "acc"
    _label_fields = ("frame",)

    def __post_init__(self):
        if self.frame is None:
            raise ValueError("Accelerometer: frame is required")
        object.__setattr__(self, "frame", _target("Accelerometer", self.frame, "frame"))
        object.__setattr__(self, "std", _std(self.label, self.std))


@dataclass(frozen=True)
class Gyroscope(_Spec):
    """Gyroscope at ``frame``, used through its time derivative: the angular acceleration
    ``dω/dt`` of the body in frame axes, ``y (3,)`` (the angular velocity itself is kinematic:
    it is given by ``v``, not by the dynamic variables ``d``)."""

    frame: str | int
    std: float | tuple | None = None
    name: str | None = None

    kind = "gyro"
    _label_fields = ("frame",)

    def __post_init__(self):
        if self.frame is None:
            raise ValueError("Gyroscope: frame is required")
        object.__setattr__(self, "frame", _target("Gyroscope", self.frame, "frame"))
        object.__setattr__(self, "std", _std(self.label, self.std))


def inverse_dynamics_knowns() -> tuple[JointAcceleration, ExternalWrench]:
    """The knowns of inverse dynamics (paper eq. 7-9): every ``qdd_i`` and every ``f^x_i``.
    Values ``(qdd (nv,), f_ext (nb, 6))``."""
    return (JointAcceleration(), ExternalWrench())


def forward_dynamics_knowns() -> tuple[JointTorque, ExternalWrench]:
    """The knowns of forward dynamics (paper eq. 13, 15): every ``tau_i`` and every ``f^x_i``.
    Values ``(tau (nv,), f_ext (nb, 6))``."""
    return (JointTorque(), ExternalWrench())

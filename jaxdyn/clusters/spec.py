"""Constraint specifications for cluster models (the programmatic side of URDF+).

Every specification names joints or links of a spanning tree; :func:`jaxdyn.clusters.build`
resolves it against the compiled tree, groups the bodies it touches into a cluster
(Chignoli, Adrian, Kim & Wensing, "Recursive rigid-body dynamics algorithms for systems with
kinematic loops", §IV: the cluster connectivity tree, C-CT) and turns it into the constraint of
that cluster (§II-B, eqs. for ``phi(q) = 0`` / ``q = gamma(y)``):

* linear (explicit after elimination) -- :class:`Coupling` (URDF+ ``<coupling>``, gears and
  belts), :class:`Mimic` (URDF ``<mimic>``), :class:`LinearConstraint` (any ``K q = k0``) and the
  helpers :func:`geared_transmission`, :func:`belt_transmission`;
* implicit (nonlinear ``phi(q) = 0``) -- :class:`PointLoop` (URDF+ ``<loop>``: two points coincide)
  and :class:`ImplicitConstraint` (a user function, e.g. the Tello differentials
  :func:`tello_hip_differential_phi`, :func:`tello_knee_ankle_differential_phi`);
* :class:`Cluster` -- force a set of links into one cluster without adding a constraint.

Specifications are frozen dataclasses (hashable), so they can sit in static model data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from .. import spatial

if TYPE_CHECKING:
    from jax import Array

__all__ = [
    "Coupling",
    "Mimic",
    "LinearConstraint",
    "PointLoop",
    "ImplicitConstraint",
    "Cluster",
    "geared_transmission",
    "belt_transmission",
    "tello_hip_differential_phi",
    "tello_knee_ankle_differential_phi",
]


def _tuple(x, name, where):
    if isinstance(x, str):
        return (x,)
    try:
        return tuple(x)
    except TypeError:
        raise ValueError(f"{where}: {name} must be a sequence, got {x!r}") from None


@dataclass(frozen=True)
class Coupling:
    """Rolling coupling of URDF+ (``<coupling type="rolling">``).

    ``ratio * (sum of the joint angles on the predecessor -> NCA path)
    = (sum of the joint angles on the successor -> NCA path)``, NCA being the nearest common
    ancestor of the two links (a geared transmission: predecessor = link, successor = rotor,
    ``q_rotor = ratio q_link``). Linear, hence explicit after eliminating the dependent
    coordinates (the joints flagged ``independent="false"``).
    """

    predecessor: str
    successor: str
    ratio: float
    name: str | None = None

    def __post_init__(self):
        r = float(self.ratio)
        if not np.isfinite(r):
            raise ValueError(f"Coupling {self.name!r}: non-finite ratio {self.ratio!r}")
        object.__setattr__(self, "ratio", r)


@dataclass(frozen=True)
class Mimic:
    """URDF ``<mimic>``: ``q[joint] = multiplier * q[target] + offset`` (``joint`` dependent)."""

    joint: str
    target: str
    multiplier: float = 1.0
    offset: float = 0.0
    name: str | None = None


@dataclass(frozen=True)
class LinearConstraint:
    """A linear constraint ``K q[joints] = k0`` on one-DoF joints.

    ``K`` is ``(m, len(joints))``; ``dependent`` optionally names the ``m`` joints eliminated
    (their coordinates become ``G``'s lower block, ``-K_d^-1 K_i``); the others stay independent.
    """

    joints: tuple
    K: tuple | np.ndarray  # a tuple of rows once built
    k0: tuple | None = None
    dependent: tuple | None = None
    name: str | None = None

    def __post_init__(self):
        where = f"LinearConstraint {self.name!r}"
        jn = _tuple(self.joints, "joints", where)
        K = np.atleast_2d(np.asarray(self.K, float))
        if K.ndim != 2 or K.shape[1] != len(jn):
            raise ValueError(
                f"{where}: K has shape {K.shape}, expected (m, {len(jn)}) for joints {list(jn)}"
            )
        if not np.all(np.isfinite(K)):
            raise ValueError(f"{where}: K is not finite")
        k0 = np.zeros(K.shape[0]) if self.k0 is None else np.asarray(self.k0, float).reshape(-1)
        if k0.shape != (K.shape[0],):
            raise ValueError(f"{where}: k0 has {k0.size} entries, expected {K.shape[0]}")
        dep = None if self.dependent is None else _tuple(self.dependent, "dependent", where)
        if dep is not None:
            bad = [d for d in dep if d not in jn]
            if bad:
                raise ValueError(f"{where}: dependent joints {bad} are not among joints {list(jn)}")
        object.__setattr__(self, "joints", jn)
        object.__setattr__(self, "K", tuple(map(tuple, K.tolist())))
        object.__setattr__(self, "k0", tuple(k0.tolist()))
        object.__setattr__(self, "dependent", dep)


@dataclass(frozen=True)
class PointLoop:
    """Loop closure of URDF+ (``<loop>``): a point fixed on the predecessor link and a point
    fixed on the successor link coincide (``phi = p_pred - p_succ = 0``, written in the frame of
    the links' nearest common ancestor; rows of ``phi`` that do not depend on ``q`` -- e.g. the
    out-of-plane row of a planar linkage -- are dropped, and only as many independent rows as the
    loop removes degrees of freedom are kept).

    ``predecessor_xyz`` / ``successor_xyz`` are the points in the link frames.
    """

    predecessor: str
    successor: str
    predecessor_xyz: tuple = (0.0, 0.0, 0.0)
    successor_xyz: tuple = (0.0, 0.0, 0.0)
    name: str | None = None

    def __post_init__(self):
        for attr in ("predecessor_xyz", "successor_xyz"):
            x = np.asarray(getattr(self, attr), float).reshape(-1)
            if x.shape != (3,) or not np.all(np.isfinite(x)):
                raise ValueError(
                    f"PointLoop {self.name!r}: {attr} must be 3 finite numbers, "
                    f"got {getattr(self, attr)!r}"
                )
            object.__setattr__(self, attr, tuple(x.tolist()))


@dataclass(frozen=True)
class ImplicitConstraint:
    """A user implicit constraint ``phi(q[joints]) = 0`` (JAX-traceable, ``(n,) -> (m,)``).

    ``independent`` names the ``n - m`` joints kept as independent coordinates. ``scale``
    optionally maps independent joints to a velocity scale ``s``: the independent velocity is
    ``qdot_joint / s`` (the Tello differentials use the post-gearbox rotor speed, ``s = N``).
    """

    joints: tuple
    phi: Callable
    independent: tuple
    scale: tuple | dict | None = None  # ((joint, s), ...) once built; or {joint: s}
    name: str | None = None

    def __post_init__(self):
        where = f"ImplicitConstraint {self.name!r}"
        jn = _tuple(self.joints, "joints", where)
        ind = _tuple(self.independent, "independent", where)
        bad = [j for j in ind if j not in jn]
        if bad:
            raise ValueError(f"{where}: independent joints {bad} are not among joints {list(jn)}")
        if not callable(self.phi):
            raise ValueError(f"{where}: phi must be callable")
        sc = ()
        if self.scale is not None:
            items = self.scale.items() if isinstance(self.scale, dict) else self.scale
            sc = tuple((str(j), float(s)) for j, s in items)
            for j, s in sc:
                if j not in ind:
                    raise ValueError(f"{where}: scale given for {j!r}, which is not independent")
                if not np.isfinite(s) or s == 0:
                    raise ValueError(f"{where}: scale of {j!r} must be finite and nonzero")
        object.__setattr__(self, "joints", jn)
        object.__setattr__(self, "independent", ind)
        object.__setattr__(self, "scale", sc)


@dataclass(frozen=True)
class Cluster:
    """Put the bodies of ``links`` in one cluster (no constraint; ``G = I``).

    Used e.g. by the block-diagonal reflected-inertia models; all bodies of the group whose
    parents lie outside it must share one parent cluster (checked)."""

    links: tuple
    name: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "links", _tuple(self.links, "links", f"Cluster {self.name!r}"))


# One constraint specification, as :func:`jaxdyn.clusters.build` takes them.
ConstraintSpec = Coupling | Mimic | LinearConstraint | PointLoop | ImplicitConstraint | Cluster


# ----------------------------------------------------------------------------- helpers


def geared_transmission(
    link_joint: str, rotor_joint: str, ratio: float, name: str | None = None
) -> LinearConstraint:
    """Geared transmission / rotor (grbda ``RevoluteWithRotor``): ``q_rotor = ratio q_link``,
    ``G = [1; ratio]``, ``K = [ratio, -1]`` (paper §VII, Fig. 1)."""
    return LinearConstraint(
        joints=(link_joint, rotor_joint),
        K=((float(ratio), -1.0),),
        dependent=(rotor_joint,),
        name=name or f"{rotor_joint}_gear",
    )


def belt_transmission(
    link_joints: Sequence[str],
    rotor_joints: Sequence[str],
    gear_ratios: Sequence[float],
    belt_ratios: Sequence[Sequence[float]],
    name: str | None = None,
) -> LinearConstraint:
    """Parallel belt transmission (grbda ``RevolutePairWithRotor`` / ``RevoluteTripleWithRotor``).

    Links ``l_1 -> l_2 -> ...`` in series, rotors ``r_i`` on the body that carries ``l_1``:
    ``q_{r_i} = N_i sum_{j <= i} (prod_{k <= j} beta_{i k}) q_{l_j}`` (cumulative belt products;
    ``belt_ratios[i]`` lists ``beta_{i1}, ..., beta_{ii}``). E.g. MIT Humanoid knee/ankle:
    ``N = (6, 6)``, ``beta = ((2,), (2, 1))``: ``q_kr = 12 q_k``, ``q_ar = 12 (q_k + q_a)``.
    """
    links, rotors = tuple(link_joints), tuple(rotor_joints)
    n = len(links)
    where = f"belt_transmission {name!r}"
    if len(rotors) != n or len(gear_ratios) != n or len(belt_ratios) != n:
        raise ValueError(
            f"{where}: need as many rotors, gear ratios and belt-ratio rows as links ({n})"
        )
    K = np.zeros((n, 2 * n))
    for i in range(n):
        betas = np.asarray(belt_ratios[i], float).reshape(-1)
        if betas.size != i + 1:
            raise ValueError(f"{where}: belt_ratios[{i}] must have {i + 1} entries")
        cum = np.cumprod(betas)
        K[i, : i + 1] = float(gear_ratios[i]) * cum
        K[i, n + i] = -1.0
    return LinearConstraint(
        joints=links + rotors, K=K, dependent=rotors, name=name or "belt_transmission"
    )


# ----------------------------------------------------------------------------- Tello


def tello_hip_differential_phi(q: Array, N: float = 6.0) -> Array:
    """Tello hip differential, ``q = (q_rotor1, q_rotor2, q_gimbal, q_thigh)`` (pre-gearbox rotor
    angles, then link angles); ``y = q_rotor / N``. From grbda
    ``scripts/matlab/derive_tello_hip_differential.m`` (the MATLAB form)."""
    y1, y2 = q[0] / N, q[1] / N
    l1, l2 = q[2], q[3]
    s, c = jnp.sin, jnp.cos

    def one(y, sg):
        return (
            57 * s(y) / 2500
            - 49 * c(l1) / 5000
            - sg * 399 * s(l1) / 20000
            - 8 * c(y) * c(l2) / 625
            - 57 * c(l1) * s(l2) / 2500
            - sg * 7 * s(y) * s(l1) / 625
            + sg * 7 * s(l1) * s(l2) / 625
            - 8 * c(l1) * s(y) * s(l2) / 625
            + 3021 / 160000
        )

    return spatial.stack([one(y1, 1.0), one(y2, -1.0)])


def tello_knee_ankle_differential_phi(q: Array, N: float = 6.0) -> Array:
    """Tello knee-ankle differential, ``q = (q_rotor1, q_rotor2, q_shin, q_foot)``; from grbda
    ``scripts/matlab/derive_tello_knee_ankle_differential.m``."""
    y1, y2 = q[0] / N, q[1] / N
    l1, l2 = q[2], q[3]
    pi = jnp.pi
    d = y1 / 2 - y2 / 2
    phi1 = (
        21 * jnp.cos(d + 1979 * pi / 4500) / 6250
        - 13 * jnp.cos(d + 493 * pi / 1500) / 625
        - 273 * jnp.cos(pi / 9) / 12500
        - 7 * jnp.sin(d + l2 + 231 * pi / 500) / 2500
        + 91 * jnp.sin(l2 + 2 * pi / 15) / 5000
        - 147 * jnp.sin(l2 + pi / 45) / 50000
        + 163349 / 6250000
    )
    phi2 = l1 - y2 / 2 - y1 / 2
    return spatial.stack([phi1, phi2])

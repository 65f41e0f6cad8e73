"""Scenes composed in Python: robots, free objects and static world geometry in one model.

:class:`Scene` puts one or more robots (:class:`Robot`: a jaxdyn :class:`~jaxdyn.Model` from
URDF, URDF+ or MJCF with its collision :class:`~jaxdyn.sim.geoms.Geoms`, placed by a base
pose), free objects (:class:`FreeObject`, or :func:`FreeBox`, :func:`FreeSphere`,
:func:`FreeCapsule`, :func:`FreeCylinder`, :func:`FreeMesh`: a free joint each, mass and
inertia from a density or given) and static geometry (:class:`Ground`, a plane;
:class:`StaticGeom` / :func:`StaticBox`: tables, walls, obstacles) side by side:

* one :class:`~jaxdyn.Model` with several roots (:func:`jaxdyn.model.compose.compose`, the
  loaders' tree machinery; bodies, joints and frames named ``part/name``);
* the :class:`~jaxdyn.sim.geoms.Geoms` of every pair that may touch, filtered as MuJoCo does
  (a robot's own pairs as its geoms table has them: :func:`~jaxdyn.sim.geoms.urdf_geoms`
  skips adjacent links, takes ``allow`` / ``deny``; pairs across parts all kept, except two
  static geoms and the pairs of ``deny``);
* the ground as :func:`jaxdyn.load_mjcf` has it: the terrain plane, with the moving spheres,
  capsules and boxes on it as exact primitives (:func:`~jaxdyn.sim.geometry.contact_set`);
  other shapes (cylinders, ellipsoids, meshes) against it as geom pairs;
* the initial configuration :attr:`Scene.q0`, :meth:`Scene.state` and
  :meth:`Scene.sim_config`, so that ``jax.jit(jax.vmap(lambda s: sim.step(scene.model, s,
  ctrl, cfg)))`` steps the whole scene.

Shapes and sizes follow :mod:`jaxdyn.sim.geometry` and URDF: full side lengths of a box,
radius and full length of a capsule / cylinder (along the local z axis), radius of a sphere,
semi-axes of an ellipsoid, the vertices of a mesh (collided as their convex hull). Poses:
``pos (3,)`` and a unit quaternion ``quat (4,)`` ``(w, x, y, z)`` (MuJoCo's, jaxdyn's free-joint
``q``) or a rotation matrix ``rot (3, 3)``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..model.compose import BodyPart, ModelPart, compose
from ..model.model import Model
from . import collision
from .geoms import Geoms, Static, pair_choice, urdf_geoms

if TYPE_CHECKING:
    import numpy.typing as npt
    from jax.typing import ArrayLike

    from .contact import Compliant, Constraint
    from .core import SimConfig, State

__all__ = [
    "FreeBox",
    "FreeCapsule",
    "FreeCylinder",
    "FreeMesh",
    "FreeObject",
    "FreeSphere",
    "Ground",
    "Robot",
    "SHAPES",
    "Scene",
    "StaticBox",
    "StaticGeom",
]

#: the shapes of free objects and static geometry (every pair of them has a narrow phase)
SHAPES = ("sphere", "capsule", "ellipsoid", "cylinder", "box", "mesh")
_SIZE_N = {"sphere": 1, "capsule": 2, "cylinder": 2, "ellipsoid": 3, "box": 3}
_SIZE_WHAT = {
    "sphere": "(radius,)",
    "capsule": "(radius, length)",
    "cylinder": "(radius, length)",
    "ellipsoid": "(3 semi-axes)",
    "box": "(3 full side lengths)",
}


# ------------------------------------------------------------------------------ checks
def _array(owner, what, x, shape, expected):
    """``x`` as finite float64 of ``shape``, or ``ValueError`` naming ``what`` and the size."""
    try:
        a = np.asarray(x, float)
    except (TypeError, ValueError):
        raise ValueError(
            f"{owner}: {what} must be numbers of shape {expected}, got {x!r}"
        ) from None
    if a.shape != shape:
        raise ValueError(f"{owner}: {what} has shape {a.shape}, expected {expected}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{owner}: {what} must be finite, got {a.tolist()}")
    return a


def _rotation(owner, quat, rot):
    """The rotation of a pose given by ``quat (4,)`` (w, x, y, z; normalised) or ``rot``."""
    if rot is not None:
        if quat is not None:
            raise ValueError(f"{owner}: give quat or rot, not both")
        R = _array(owner, "rot", rot, (3, 3), "(3, 3)")
        if not np.allclose(R.T @ R, np.eye(3), atol=1e-9) or np.linalg.det(R) < 0:
            raise ValueError(f"{owner}: rot must be a rotation matrix (orthonormal, det +1)")
        return R
    q = _array(
        owner, "quat", (1.0, 0.0, 0.0, 0.0) if quat is None else quat, (4,), "(4,) (w, x, y, z)"
    )
    n = np.linalg.norm(q)
    if n < 1e-9:
        raise ValueError(f"{owner}: quat must not be zero")
    w, x, y, z = q / n
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _quat(R):
    """The unit quaternion (w, x, y, z, ``w >= 0``) of a rotation matrix (Shepperd's method)."""
    t = np.trace(R)
    if t > 0:
        s = 2 * np.sqrt(1 + t)
        q = [s / 4, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(R)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2 * np.sqrt(1 + R[i, i] - R[j, j] - R[k, k])
        q = np.zeros(4)
        q[0] = (R[k, j] - R[j, k]) / s
        q[1 + i] = s / 4
        q[1 + j] = (R[j, i] + R[i, j]) / s
        q[1 + k] = (R[k, i] + R[i, k]) / s
    q = np.asarray(q, float)
    return q if q[0] >= 0 else -q


def _positive(owner, what, x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: {what} must be a number, got {x!r}") from None
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{owner}: {what} must be finite and > 0, got {x!r}")
    return v


def _name(kind, name):
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"{kind}: name must be a non-empty string without '/', got {name!r}")
    return name


class _Shape:
    """Size in MuJoCo's ``geom_size`` layout, convex hull (meshes), bounding radius, and the
    mass properties of the solid at unit density: ``(volume, com (3,), inertia (3, 3) about
    the com per unit density)``."""

    def __init__(self, owner, shape, size, vertices):
        if not isinstance(shape, str) or shape not in SHAPES:
            raise ValueError(
                f"{owner}: shape {shape!r} is not supported; supported: {', '.join(SHAPES)}"
                + (" (heightfields: sim.Heightfield terrain)" if shape == "hfield" else "")
                + (" (the ground: sim.Ground)" if shape == "plane" else "")
            )
        self.type, self.hull = shape, None
        if shape == "mesh":
            if size is not None:
                raise ValueError(f"{owner}: a mesh takes vertices, not size")
            v = np.asarray(vertices if vertices is not None else np.zeros((0, 3)), float)
            if v.ndim != 2 or v.shape[1] != 3 or v.shape[0] < 4:
                raise ValueError(
                    f"{owner}: vertices has shape {v.shape}, expected (n, 3) with n >= 4"
                )
            if not np.all(np.isfinite(v)):
                raise ValueError(f"{owner}: vertices must be finite")
            self.hull = collision.hull_from_points(v)
            hv = np.asarray(self.hull.vertices, float)
            self.size = np.ptp(hv, axis=0) / 2
            self.rbound = float(np.max(np.linalg.norm(hv, axis=1)))
            self.vertices = v
            return
        if vertices is not None:
            raise ValueError(f"{owner}: only a mesh takes vertices")
        n = _SIZE_N[shape]
        s = _array(owner, "size", size, (n,), f"({n},) {_SIZE_WHAT[shape]} for a {shape}")
        if np.any(s <= 0):
            raise ValueError(f"{owner}: size must be > 0, got {s.tolist()}")
        out = np.zeros(3)
        if shape == "sphere":
            out[0] = s[0]
            rb = s[0]
        elif shape in ("capsule", "cylinder"):
            out[:2] = s[0], s[1] / 2
            rb = s[0] + s[1] / 2 if shape == "capsule" else np.hypot(s[0], s[1] / 2)
        elif shape == "box":
            out[:] = s / 2
            rb = np.linalg.norm(out)
        else:
            out[:] = s
            rb = s.max()
        self.size, self.rbound = out, float(rb)

    def unit_mass(self):
        s, t = self.size, self.type
        if t == "sphere":
            r = s[0]
            V = 4 / 3 * np.pi * r**3
            return V, np.zeros(3), np.eye(3) * 0.4 * V * r**2
        if t == "box":
            a, b, c = 2 * s
            V = a * b * c
            return V, np.zeros(3), np.diag([b * b + c * c, a * a + c * c, a * a + b * b]) * V / 12
        if t == "ellipsoid":
            a, b, c = s
            V = 4 / 3 * np.pi * a * b * c
            return V, np.zeros(3), np.diag([b * b + c * c, a * a + c * c, a * a + b * b]) * V / 5
        r, h = s[0], 2 * s[1]
        Vc = np.pi * r * r * h
        if t == "cylinder":
            Ix = Vc * (3 * r * r + h * h) / 12
            return Vc, np.zeros(3), np.diag([Ix, Ix, Vc * r * r / 2])
        if t == "capsule":  # a cylinder and two hemispheres (MuJoCo's formula)
            Vs = 4 / 3 * np.pi * r**3
            Ix = Vc * (3 * r * r + h * h) / 12 + Vs * (0.4 * r * r + h * h / 4 + 3 * h * r / 8)
            return Vc + Vs, np.zeros(3), np.diag([Ix, Ix, (Vc / 2 + 0.4 * Vs) * r * r])
        return _hull_mass(self.vertices)


def _hull_mass(points):
    """Volume, centroid and inertia about it (unit density) of the convex hull of ``points``:
    the hull's triangles as tetrahedra to an interior point, ``int x x^T dV = V/20 (sum x_i
    x_i^T + (sum x_i)(sum x_i)^T)`` per tetrahedron (Tonon, J. Math. Stat. 1(1), 2005)."""
    from scipy.spatial import ConvexHull

    h = ConvexHull(points)
    o = points[h.vertices].mean(axis=0)
    V, first, second = 0.0, np.zeros(3), np.zeros((3, 3))
    for tri in h.simplices:
        x = np.vstack([np.zeros(3), points[tri] - o])
        vol = abs(np.linalg.det(x[1:])) / 6
        s = x.sum(axis=0)
        V += vol
        first += vol * s / 4
        second += vol / 20 * (x.T @ x + np.outer(s, s))
    c = first / V
    C = second - V * np.outer(c, c)  # about the centroid
    return V, c + o, np.trace(C) * np.eye(3) - C


# ------------------------------------------------------------------------------ parts
@dataclass(frozen=True, eq=False)
class FreeObject:
    """A free rigid body of one collision shape: ``shape`` (one of :data:`SHAPES`) of ``size``
    (see the module docstring; a mesh: ``vertices (n, 3)``, in the body frame), its body frame
    at ``pos`` / ``quat`` (or ``rot``) in the world at the start (a primitive's frame is its
    centre, a mesh's the frame of its vertices).

    Mass properties: uniform ``density`` (kg/m^3, default 1000) over the solid (a mesh: its
    convex hull); ``mass`` scales them to that mass; ``inertia`` (``(3,)`` principal moments or
    ``(3, 3)``, about the centre of mass in body axes) and ``com (3,)`` replace them.
    ``friction``: its Coulomb coefficient (a pair takes the larger of its two geoms', its
    primitives on the ground too; a contact model's own ``friction`` overrides it), or
    MuJoCo's three ``(sliding, torsional, rolling)`` (a number: MuJoCo's default torsional and
    rolling ``0.005``, ``0.0001``); ``condim`` 3 (friction), 1 (frictionless), 4 (torsional
    friction too) or 6 (rolling friction too; 4 and 6: :class:`~jaxdyn.sim.contact.Constraint`
    only, the pair's condim the larger of its two geoms', its torsional and rolling friction
    mixed as the sliding one, :class:`~jaxdyn.sim.geoms.Geoms` ``spin``; such a geom meets
    the ground as a geom pair, not a primitive). ``v``: initial velocity ``[ω; v]`` in body
    coordinates (jaxdyn's free joint), default zero."""

    name: str
    shape: str
    size: object = None
    pos: object = (0.0, 0.0, 0.0)
    quat: object = None
    rot: object = None
    mass: float | None = None
    density: float = 1000.0
    inertia: object = None
    com: object = None
    vertices: object = None
    friction: float | tuple[float, float, float] = 1.0
    condim: int = 3
    v: object = None
    _geom: Any = field(init=False, repr=False, default=None)  # set by __post_init__

    def __post_init__(self):
        owner = f"{type(self).__name__} {self.name!r}"
        _name(type(self).__name__, self.name)
        geom = _Shape(owner, self.shape, self.size, self.vertices)
        R = _rotation(owner, self.quat, self.rot)
        p = _array(owner, "pos", self.pos, (3,), "(3,)")
        density = _positive(owner, "density", self.density)
        V, c, I = geom.unit_mass()
        mass, I = density * V, density * I
        if self.mass is not None:
            m = _positive(owner, "mass", self.mass)
            I, mass = I * (m / mass), m
        if self.com is not None:
            c = _array(owner, "com", self.com, (3,), "(3,)")
        if self.inertia is not None:
            Ig = np.asarray(self.inertia, float)
            if Ig.shape == (3,):
                Ig = np.diag(Ig)
            Ig = _array(owner, "inertia", Ig, (3, 3), "(3,) principal moments or (3, 3)")
            if not np.allclose(Ig, Ig.T) or np.linalg.eigvalsh(Ig).min() < 0:
                raise ValueError(f"{owner}: inertia must be symmetric positive semi-definite")
            I = Ig
        v = np.zeros(6) if self.v is None else _array(owner, "v", self.v, (6,), "(6,) [ω; v]")
        _friction_condim(owner, self.friction, self.condim)
        object.__setattr__(self, "_geom", (geom, R, p, mass, c, I, v))


@dataclass(frozen=True, eq=False)
class StaticGeom:
    """Static world geometry (a table, a wall, an obstacle): ``shape`` of ``size`` (as
    :class:`FreeObject`) at ``pos`` / ``quat`` (or ``rot``) in the world; ``friction``,
    ``condim`` as :class:`FreeObject`'s."""

    name: str
    shape: str
    size: object = None
    pos: object = (0.0, 0.0, 0.0)
    quat: object = None
    rot: object = None
    vertices: object = None
    friction: float | tuple[float, float, float] = 1.0
    condim: int = 3
    _geom: Any = field(init=False, repr=False, default=None)  # set by __post_init__

    def __post_init__(self):
        owner = f"{type(self).__name__} {self.name!r}"
        _name(type(self).__name__, self.name)
        geom = _Shape(owner, self.shape, self.size, self.vertices)
        R = _rotation(owner, self.quat, self.rot)
        p = _array(owner, "pos", self.pos, (3,), "(3,)")
        _friction_condim(owner, self.friction, self.condim)
        object.__setattr__(self, "_geom", (geom, R, p))


@dataclass(frozen=True, eq=False)
class Ground:
    """The ground plane ``normal . x = height`` (the scene's terrain, one at most):
    ``friction`` mixed with each geom's on it (MuJoCo's ``mj_contactParam``,
    :func:`jaxdyn.sim.geoms.pair_choice`: the larger of the two, the geom's own where its
    ``priority`` is higher; a number or ``(sliding, torsional, rolling)`` as
    :class:`FreeObject`'s; condim 3: its geom pairs,
    cylinders, ellipsoids and meshes, and the spheres, capsules and boxes that touch it as
    primitives, :attr:`jaxdyn.sim.ContactSet.friction`, as in :func:`jaxdyn.load_mjcf`)."""

    height: float = 0.0
    normal: npt.ArrayLike = (0.0, 0.0, 1.0)
    name: str = "ground"
    friction: float | tuple[float, float, float] = 1.0

    def __post_init__(self):
        owner = f"Ground {self.name!r}"
        _name("Ground", self.name)
        n = _array(owner, "normal", self.normal, (3,), "(3,)")
        if np.linalg.norm(n) < 1e-9:
            raise ValueError(f"{owner}: normal must not be zero")
        object.__setattr__(self, "normal", tuple(n / np.linalg.norm(n)))
        h = _array(owner, "height", self.height, (), "a number")
        object.__setattr__(self, "height", float(h))
        _friction_condim(owner, self.friction, 3)


#: MuJoCo's default torsional and rolling friction (``geom friction="1 0.005 0.0001"``)
_SPIN = (0.005, 0.0001)


def _friction_condim(owner, friction, condim):
    """``(sliding, (torsional, rolling))`` of a part's ``friction`` (a number, MuJoCo's default
    torsional and rolling friction, or MuJoCo's three), checked with its ``condim``."""
    f = np.asarray(friction, float) if np.ndim(friction) else None
    if f is None:
        f = np.r_[_array(owner, "friction", friction, (), "a number"), _SPIN]
    elif f.shape != (3,) or not np.all(np.isfinite(f)):
        raise ValueError(
            f"{owner}: friction must be a number or (sliding, torsional, rolling), got {friction!r}"
        )
    if np.any(f < 0):
        raise ValueError(f"{owner}: friction must be >= 0, got {friction!r}")
    if isinstance(condim, bool) or condim not in (1, 3, 4, 6):
        raise ValueError(
            f"{owner}: condim must be 1 (frictionless), 3, 4 (torsional friction) or 6 "
            f"(rolling friction), got {condim!r}"
        )
    return float(f[0]), (float(f[1]), float(f[2]))


def FreeBox(name: str, size: npt.ArrayLike, **kw: Any) -> FreeObject:
    """A free box of full side lengths ``size (3,)`` (:class:`FreeObject`'s keywords)."""
    return FreeObject(name, "box", size, **kw)


def FreeSphere(name: str, radius: float, **kw: Any) -> FreeObject:
    """A free sphere of ``radius`` (:class:`FreeObject`'s keywords)."""
    return FreeObject(name, "sphere", (radius,), **kw)


def FreeCapsule(name: str, radius: float, length: float, **kw: Any) -> FreeObject:
    """A free capsule of ``radius`` around a segment of ``length`` along its z axis."""
    return FreeObject(name, "capsule", (radius, length), **kw)


def FreeCylinder(name: str, radius: float, length: float, **kw: Any) -> FreeObject:
    """A free cylinder of ``radius`` and ``length`` along its z axis."""
    return FreeObject(name, "cylinder", (radius, length), **kw)


def FreeMesh(name: str, vertices: npt.ArrayLike, **kw: Any) -> FreeObject:
    """A free convex mesh: the convex hull of ``vertices (n, 3)`` (body frame)."""
    return FreeObject(name, "mesh", vertices=vertices, **kw)


def StaticBox(name: str, size: npt.ArrayLike, **kw: Any) -> StaticGeom:
    """A static box of full side lengths ``size (3,)`` (a table top, a wall)."""
    return StaticGeom(name, "box", size, **kw)


@dataclass(frozen=True, eq=False)
class Robot:
    """A robot in a :class:`Scene`: a :class:`~jaxdyn.Model` (``jaxdyn.load_urdf``,
    ``load_mjcf(...).model``, ...) with its collision geoms, either ``geoms`` (a
    :class:`~jaxdyn.sim.geoms.Geoms` on ``model``'s bodies; its pairs are the robot's own
    pairs) or ``urdf`` (the URDF file ``model`` was loaded from: its ``<collision>`` elements
    through :func:`~jaxdyn.sim.geoms.urdf_geoms` with ``allow``, ``deny``, ``package_dirs``,
    ``allow_outside`` and ``friction``: adjacent links skipped), and ``contacts``: contact
    primitives on its frames (:class:`~jaxdyn.sim.geometry.Sphere`, ``Point``, ``Box``,
    ``Capsule``, e.g. a quadruped's feet), which become geoms of the same shapes (no pairs
    among the robot's own geoms).

    ``name`` (default: the model's) prefixes its joints, bodies and frames in the scene
    (``"arm/joint1"``). ``pos`` / ``quat`` (or ``rot``): the base pose in the world (a fixed
    base: where the root link is fixed; a floating base: its initial pose, set in ``q``).
    ``q (nq,)``: the initial configuration in the model's own layout (default: neutral; an
    MJCF robot: ``q=load_mjcf(...).q0``, its ``qpos0``)."""

    model: Model
    geoms: Geoms | None = None
    urdf: str | os.PathLike | None = None
    contacts: tuple = ()
    name: str | None = None
    pos: object = (0.0, 0.0, 0.0)
    quat: object = None
    rot: object = None
    q: object = None
    allow: tuple = ()
    deny: tuple = ()
    package_dirs: tuple = ()
    allow_outside: bool = False
    friction: float = 1.0
    _pose: Any = field(init=False, repr=False, default=None)  # set by __post_init__

    def __post_init__(self):
        if not isinstance(self.model, Model):
            raise TypeError(
                f"Robot: model must be a jaxdyn Model, got {type(self.model).__name__} (a "
                "ClusterModel: load it with clusters=False)"
            )
        name = self.model.name if self.name is None else self.name
        object.__setattr__(self, "name", _name("Robot", str(name).replace("/", "_")))
        owner = f"Robot {self.name!r}"
        if self.geoms is not None and self.urdf is not None:
            raise ValueError(f"{owner}: give geoms or urdf, not both")
        if self.geoms is not None and not isinstance(self.geoms, Geoms):
            raise TypeError(f"{owner}: geoms must be a jaxdyn.sim.Geoms, got {self.geoms!r}")
        geoms = self.geoms
        if self.urdf is not None:
            geoms = urdf_geoms(
                self.model,
                self.urdf,
                allow=self.allow,
                deny=self.deny,
                package_dirs=self.package_dirs,
                allow_outside=self.allow_outside,
                friction=self.friction,
                keep_unpaired=True,
            )
            object.__setattr__(self, "geoms", geoms)
        if geoms is not None:
            bad = [f"{n!r} ({t})" for n, t in zip(geoms.names, geoms.type) if t not in SHAPES]
            if bad:
                raise ValueError(
                    f"{owner}: geoms {', '.join(bad)}: shape not supported in a scene; "
                    f"supported: {', '.join(SHAPES)}"
                )
            if any(b >= self.model.nb for b in geoms.body):
                raise ValueError(f"{owner}: geoms are on bodies the model does not have")
        from .geometry import PRIMITIVES

        prims = (self.contacts,) if isinstance(self.contacts, PRIMITIVES) else self.contacts
        prims = tuple(prims)
        for c in prims:
            if not isinstance(c, PRIMITIVES):
                raise TypeError(
                    f"{owner}: contacts must be Sphere, Point, Box or Capsule, got {c!r}"
                )
            self.model.frame_index(c.frame)  # an unknown frame: ValueError naming it
        object.__setattr__(self, "contacts", prims)
        R = _rotation(owner, self.quat, self.rot)
        p = _array(owner, "pos", self.pos, (3,), "(3,)")
        nq = self.model.nq
        if self.q is None:  # neutral: zero angles, identity quaternions (numpy: no compile)
            from .. import joints as J

            t = self.model.topo
            q = np.zeros(nq)
            for b in range(t.nb):
                k = int(t.kind[b])
                if k != J.ONE_DOF:
                    q[int(t.q_start[b]) + (3 if k == J.FREE else 0)] = 1.0
        else:
            q = _array(owner, "q", self.q, (nq,), f"(nq,) = ({nq},), the model's own layout")
        object.__setattr__(self, "_pose", (R, p, q))


# ------------------------------------------------------------------------------ the scene
class _G:
    """A geom of the scene while it is assembled."""

    def __init__(self, name, part, link, body, typ, size, R, p, friction, condim, hull, rbound):
        self.name, self.part, self.link, self.body = name, part, link, body
        self.type, self.size, self.R, self.p = typ, np.asarray(size, float), R, p
        self.friction, self.condim, self.hull, self.rbound = friction, condim, hull, rbound
        self.margin, self.solref, self.solmix = 0.0, None, 1.0  # MuJoCo's defaults
        self.solimp = None  # MuJoCo's default (an MJCF robot's own: Constraint(soft=True))
        self.priority = 0
        self.spin = None  # torsional / rolling friction (an MJCF robot's condim 4 / 6 geoms)


class Scene:
    """Robots, free objects and static world geometry in one model (the module docstring).

    ``Scene(robot, ..., objects=[...], world=[...], deny=[...])``: ``robots`` are
    :class:`Robot` (a bare :class:`~jaxdyn.Model` is a robot without geoms at the origin),
    ``objects`` :class:`FreeObject`, ``world`` :class:`Ground` (one at most) and
    :class:`StaticGeom`. ``deny``: pairs ``(a, b)`` that never collide, each a part's name
    (every geom of the robot / object), ``"robot/link"`` (the geoms of that link) or a geom's
    full name (``"robot/link/collision0"``, ``"crate"``). ``allow``: pairs ``(a, b)`` named
    the same way that collide although a robot's own geoms skip them (adjacent links, pairs its
    ``sim.Geoms`` leaves out); never geoms of one body or two static geoms; ``deny`` wins
    where both name a pair. Each pair is any sequence of two name strings (a tuple, a list);
    anything else, or a name of nothing in the scene, is a ``ValueError`` naming the entry.
    ``gravity``: the scene's (default:
    the robots', which must agree; else ``-9.81 z``).

    Attributes: ``model`` (one :class:`~jaxdyn.Model`; names ``part/name``, a free object's
    joint, body and frame its name), ``geoms`` (:class:`~jaxdyn.sim.geoms.Geoms` or ``None``),
    ``contacts`` (the ground's :class:`~jaxdyn.sim.geometry.ContactSet` or ``None``),
    ``terrain`` (the ground :class:`~jaxdyn.sim.geometry.Plane` or ``None``), ``q0`` / ``v0``
    (the start), ``q_index`` / ``v_index`` / ``body`` (per part: its coordinates and bodies in
    the scene, in the part's own order: ``q[scene.q_index["arm"]]`` is the arm's ``q``).

    A pair of geoms interpenetrating deeper than 0.1 mm at ``q0`` gets a warning naming the
    pair and the depth (as :func:`jaxdyn.load_mjcf`).
    """

    def __init__(
        self,
        *robots: Robot | Model,
        objects: Iterable[FreeObject] | FreeObject = (),
        world: Iterable[Ground | StaticGeom] | Ground | StaticGeom = (),
        deny: Iterable[Sequence[str]] = (),
        allow: Iterable[Sequence[str]] = (),
        name: str = "scene",
        gravity: npt.ArrayLike | None = None,
    ) -> None:
        robots = tuple(r if isinstance(r, Robot) else _as_robot(r) for r in robots)
        objects, world = _listed("objects", objects), _listed("world", world)
        for o in objects:
            if not isinstance(o, FreeObject):
                raise TypeError(
                    f"Scene: objects must be FreeObject (FreeBox, FreeSphere, ...), got "
                    f"{type(o).__name__} {o!r}" + _hint(o)
                )
        grounds = [w for w in world if isinstance(w, Ground)]
        for w in world:
            if not isinstance(w, (Ground, StaticGeom)):
                raise TypeError(
                    f"Scene: world must be Ground or StaticGeom (StaticBox, ...), got "
                    f"{type(w).__name__} {w!r}" + _hint(w)
                )
        if len(grounds) > 1:
            raise ValueError(
                f"Scene: one Ground at most (the terrain), got {[g.name for g in grounds]}; "
                "walls: StaticBox"
            )
        # (a Robot's name is a str once built)
        names = (
            [cast(str, r.name) for r in robots]
            + [o.name for o in objects]
            + [w.name for w in world]
        )
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"Scene: part names must be unique; repeated: {dup}")
        self.name = name
        parts = [ModelPart(cast(str, r.name), r.model, r._pose[0], r._pose[1]) for r in robots]
        parts += [BodyPart(o.name, o._geom[3], o._geom[4], o._geom[5]) for o in objects]
        comp = compose(parts, name=name, gravity=gravity)
        self.model = model = comp.model
        self.body, self.q_index, self.v_index = comp.body, comp.q_index, comp.v_index
        self.robots, self.objects, self.world = tuple(robots), tuple(objects), tuple(world)

        # ---------------------------------------------------------- initial state
        from .. import joints as J

        q0, v0 = np.zeros(model.nq), np.zeros(model.nv)
        for r in robots:
            R, p, q = r._pose
            q = q.copy()
            t = r.model.topo
            for b in range(t.nb):  # free joints on the world: the base pose composed with q's
                if int(t.parent[b]) < 0 and int(t.kind[b]) == J.FREE:
                    i = int(t.q_start[b])
                    Rq = _rotation(f"Robot {r.name!r}: q", q[i + 3 : i + 7], None)
                    q[i : i + 3] = R @ q[i : i + 3] + p
                    q[i + 3 : i + 7] = _quat(R @ Rq)
            q0[self.q_index[r.name]] = q
        for o in objects:
            _, R, p, *_rest = o._geom
            q0[self.q_index[o.name]] = np.concatenate([p, _quat(R)])
            v0[self.v_index[o.name]] = o._geom[6]
        self.q0, self.v0 = q0, v0

        # ---------------------------------------------------------- geoms
        gs, self_pairs, explicit = [], [], {}
        for r in robots:
            g = r.geoms
            if g is None:
                continue
            R, p, _ = r._pose
            off = len(gs)
            bmap = self.body[r.name]
            grot, gpos, gsize = (np.asarray(x, float) for x in (g.rot, g.pos, g.size))
            gfr, grb = np.asarray(g.friction, float), np.asarray(g.rbound, float)
            for k in range(g.n):
                b = int(g.body[k])
                gR, gp = grot[k], gpos[k]
                if b < 0:
                    gR, gp = R @ gR, R @ gp + p
                link = g.names[k].split("/")[0]
                gs.append(
                    _G(
                        f"{r.name}/{g.names[k]}",
                        r.name,
                        f"{r.name}/{link}",
                        -1 if b < 0 else int(bmap[b]),
                        g.type[k],
                        gsize[k],
                        gR,
                        gp,
                        float(gfr[k]),
                        int(g.condim[k]),
                        None if g.hulls is None else g.hulls.value.get(k),
                        float(grb[k]),
                    )
                )
                for f in ("margin", "solref", "solmix", "solimp", "spin"):  # an MJCF robot's
                    if getattr(g, f) is not None:
                        setattr(gs[-1], f, np.asarray(getattr(g, f), float)[k])
                if g.priority is not None:
                    gs[-1].priority = int(g.priority[k])
            self_pairs += [(off + a, off + b) for a, b in g.pairs]
            for j, k in enumerate(g.explicit or ()):  # MJCF <contact><pair>: own parameters
                a, b = g.pairs[k]
                explicit[frozenset((off + a, off + b))] = _explicit_row(g, j)
        for r in robots:
            R, p, _ = r._pose
            for k, c in enumerate(r.contacts):
                gs.append(_primitive_geom(r, k, c, self.body[r.name], R, p))
        for o in objects:
            geom = o._geom[0]
            gs.append(
                _G(
                    o.name,
                    o.name,
                    o.name,
                    int(self.body[o.name][0]),
                    geom.type,
                    geom.size,
                    np.eye(3),
                    np.zeros(3),
                    _friction_condim(o.name, o.friction, o.condim)[0],
                    o.condim,
                    geom.hull,
                    geom.rbound,
                )
            )
            gs[-1].spin = _friction_condim(o.name, o.friction, o.condim)[1]
        for w in world:
            if isinstance(w, Ground):
                continue
            geom, R, p = w._geom
            gs.append(
                _G(
                    w.name,
                    w.name,
                    w.name,
                    -1,
                    geom.type,
                    geom.size,
                    R,
                    p,
                    _friction_condim(w.name, w.friction, w.condim)[0],
                    w.condim,
                    geom.hull,
                    geom.rbound,
                )
            )
            gs[-1].spin = _friction_condim(w.name, w.friction, w.condim)[1]
        ground = grounds[0] if grounds else None
        if ground is not None:
            n = np.asarray(ground.normal)
            Rg = _plane_frame(n)
            gs.append(
                _G(
                    ground.name,
                    ground.name,
                    ground.name,
                    -1,
                    "plane",
                    np.zeros(3),
                    Rg,
                    n * ground.height,
                    _friction_condim(ground.name, ground.friction, 3)[0],
                    3,
                    None,
                    np.inf,
                )
            )
            gs[-1].spin = _friction_condim(ground.name, ground.friction, 3)[1]
        deny_s, allow_s = _named_pairs("deny", deny, gs), _named_pairs("allow", allow, gs)

        def named(pairs_s, a, b):
            ka = {gs[a].part, gs[a].link, gs[a].name}
            kb = {gs[b].part, gs[b].link, gs[b].name}
            return any((x, y) in pairs_s or (y, x) in pairs_s for x in ka for y in kb)

        own = {frozenset(pr) for pr in self_pairs}
        pairs = []
        for i in range(len(gs)):
            for j in range(i + 1, len(gs)):
                gi, gj = gs[i], gs[j]
                if gi.body == gj.body or (gi.body < 0 and gj.body < 0):
                    continue
                if gi.part == gj.part and frozenset((i, j)) not in own and not named(allow_s, i, j):
                    continue
                if named(deny_s, i, j):
                    continue
                pairs.append((i, j) if _ordered(gi.type, gj.type) else (j, i))

        # the ground: moving spheres, capsules and boxes as exact primitives (load_mjcf's way)
        prims, as_prim, prim_friction = [], set(), []
        if ground is not None:
            from .geometry import Box, Capsule, Sphere

            gi = len(gs) - 1
            for a, b in pairs:
                if gi not in (a, b):
                    continue
                k = b if a == gi else a
                g = gs[k]
                if g.type not in ("sphere", "capsule", "box"):
                    continue
                p1, p2 = g.priority, gs[gi].priority
                cond = pair_choice(np, p1, p2, g.condim, gs[gi].condim)
                if cond > 3 or not _plain(g):
                    continue  # torsional friction, contact parameters: a geom pair (load_mjcf's)
                f, Rf, pf = self._body_frame(g.body)
                R, p = Rf.T @ g.R, Rf.T @ (g.p - pf)
                if g.type == "sphere":
                    prims.append(Sphere(f, float(g.size[0]), pos=tuple(p), name=g.name))
                elif g.type == "capsule":
                    prims.append(
                        Capsule(
                            f,
                            float(g.size[0]),
                            2 * float(g.size[1]),
                            pos=tuple(p),
                            rotation=R,
                            name=g.name,
                        )
                    )
                else:
                    prims.append(Box(f, tuple(2 * g.size), pos=tuple(p), rotation=R, name=g.name))
                as_prim.add((a, b))
                # the pair's friction as Geoms mixes it (MuJoCo's mj_contactParam: the larger at
                # equal priorities; condim 1, frictionless)
                mu = pair_choice(np, p1, p2, g.friction, gs[gi].friction)
                prim_friction.append(0.0 if cond == 1 else float(mu))
        self._gs, self._pairs, self._prim_pairs = gs, pairs, as_prim
        pairs = [pr for pr in pairs if pr not in as_prim]
        self.geoms = _table(gs, pairs, explicit)
        self.terrain, self.contacts = None, None
        if ground is not None:
            from .geometry import Plane, contact_set

            self.terrain = Plane(normal=ground.normal, height=ground.height)
            if prims:
                self.contacts = contact_set(model, prims, friction=prim_friction)
        self._warn_penetrating()

    # ------------------------------------------------------------------ helpers
    def _body_frame(self, b):
        """A frame on moving body ``b``: its name and placement in the body."""
        t = self.model.topo
        if not hasattr(self, "_frames_np"):  # numpy once (indexing JAX arrays compiles)
            self._frames_np = (np.asarray(self.model.frame_R), np.asarray(self.model.frame_p))
        f = int(np.nonzero(t.frame_parent == b)[0][0])
        return t.frame_names[f], self._frames_np[0][f], self._frames_np[1][f]

    def _warn_penetrating(self, depth=1e-4):
        """Warn about the pairs interpenetrating deeper than ``depth`` at ``q0``."""
        deep = {k: d for k, d in self.penetrations(near=depth).items() if d > depth}
        if deep:
            listed = ", ".join(
                f"{a!r}-{b!r} ({v * 1e3:.3g} mm)" for (a, b), v in list(deep.items())[:6]
            )
            more = f" ... ({len(deep)} in all)" if len(deep) > 6 else ""
            warnings.warn(
                f"Scene {self.name!r}: geoms interpenetrate at q0: {listed}{more}; the contact "
                "solver pushes them apart in the first steps",
                stacklevel=3,
            )

    # ------------------------------------------------------------------ public
    def penetrations(
        self, q: ArrayLike | None = None, near: float | None = None
    ) -> dict[tuple[str, str], float]:
        """``{(geom 1, geom 2): depth}`` of every pair that may touch (the ground's
        primitives included) at ``q`` (default :attr:`q0`): ``depth > 0`` an
        interpenetration, ``< 0`` the gap. Numpy (:func:`penetration` of the shapes' support
        functions): independent of the narrow phase, no compilation. ``near``: only the pairs
        whose bounding spheres are closer than ``near`` apart (the others are left out)."""
        q = (
            self.q0
            if q is None
            else _array(
                "Scene.penetrations", "q", q, (self.model.nq,), f"(nq,) = ({self.model.nq},)"
            )
        )
        from ..algorithms.kinematics import body_placements_numpy

        R, p = body_placements_numpy(self.model, q)
        out = {}
        for a, b in self._pairs:
            ga, gb = self._gs[a], self._gs[b]
            (Ra, pa), (Rb, pb) = _pose(ga, R, p), _pose(gb, R, p)
            if near is not None and np.isfinite(ga.rbound) and np.isfinite(gb.rbound):
                if np.linalg.norm(pa - pb) > ga.rbound + gb.rbound + near:
                    continue
            out[(ga.name, gb.name)] = penetration(_support_of(ga, Ra, pa), _support_of(gb, Rb, pb))
        return out

    def joints(self, part: str) -> tuple[str, ...]:
        """The moving joints of a part (a robot's, in the scene's names; free joints left
        out): ``Torque(dofs=scene.joints("arm"))`` drives that robot only."""
        t = self.model.topo
        if part not in self.body:
            raise ValueError(f"Scene: no part {part!r}; parts: {list(self.body)}")
        from .. import joints as J

        return tuple(t.joint_names[b] for b in sorted(self.body[part]) if int(t.kind[b]) != J.FREE)

    def shapes(self) -> tuple:
        """Every collision geom of the scene, for drawing and inspection: ``(name, frame, type,
        size, R, p, vertices)`` with ``frame`` the model frame it is fixed to (``None``: the
        world), ``size`` in MuJoCo's ``geom_size`` layout (half sizes), ``R``, ``p`` its pose
        in the frame, ``vertices`` a mesh's hull vertices (``None`` otherwise). The ground
        plane is left out (:attr:`terrain`)."""
        out = []
        for g in self._gs:
            if g.type == "plane":
                continue
            frame, R, p = None, g.R, g.p
            if g.body >= 0:
                frame, Rf, pf = self._body_frame(g.body)
                R, p = Rf.T @ g.R, Rf.T @ (g.p - pf)
            verts = None if g.hull is None else np.asarray(g.hull.vertices, float)
            out.append((g.name, frame, g.type, tuple(g.size), R, p, verts))
        return tuple(out)

    def state(self, q: ArrayLike | None = None, v: ArrayLike | None = None) -> State:
        """A :class:`~jaxdyn.sim.core.State` at ``q`` / ``v`` (default :attr:`q0` /
        :attr:`v0`); batched (``(B, nq)``, ``(B, nv)``, either broadcast against the other)
        for ``jax.vmap``, with a time ``t`` of the batch's shape."""
        import jax.numpy as jnp

        from .core import State

        model = self.model
        q = self.q0 if q is None else q
        v = self.v0 if v is None else v
        for what, x, n in (("q", q, model.nq), ("v", v, model.nv)):
            if np.shape(x)[-1:] != (n,):
                raise ValueError(
                    f"Scene.state: {what} has shape {np.shape(x)}, expected (..., {n}) "
                    f"(the scene's n{what})"
                )
        dtype = model.mass.dtype
        batch = np.broadcast_shapes(np.shape(q)[:-1], np.shape(v)[:-1])
        q = jnp.broadcast_to(jnp.asarray(q, dtype), batch + (model.nq,))
        v = jnp.broadcast_to(jnp.asarray(v, dtype), batch + (model.nv,))
        return State(q, v, jnp.zeros(batch, dtype))

    def sim_config(
        self, contact: Compliant | Constraint | None = None, **overrides: Any
    ) -> SimConfig:
        """A :class:`~jaxdyn.sim.core.SimConfig` of the scene: ``contact`` (a
        :class:`~jaxdyn.sim.contact.Constraint` or :class:`~jaxdyn.sim.contact.Compliant`;
        ``None``: no contact) on every pair (:attr:`geoms`) and the ground's primitives
        (:attr:`contacts` on :attr:`terrain`); ``overrides``: any other field (``dt``,
        ``actuator`` (default :class:`~jaxdyn.sim.actuators.Torque` on every coordinate but the
        free joints': ``ctrl`` of the robots' joints in ``v`` order), ``integrator``, ...)."""
        from .core import SimConfig

        kw = {}
        if contact is not None and (self.contacts is not None or self.geoms is not None):
            kw["contact"] = contact
            kw["geoms"] = self.geoms
            if self.contacts is not None:
                kw["contacts"] = self.contacts
                kw["terrain"] = self.terrain
        kw.update(overrides)
        return SimConfig(**kw)

    def __repr__(self):
        return (
            f"Scene({self.name!r}, robots={[r.name for r in self.robots]}, "
            f"objects={[o.name for o in self.objects]}, world={[w.name for w in self.world]}, "
            f"nq={self.model.nq}, pairs={len(self._pairs)})"
        )


def _pose(g, R, p):
    """World pose of scene geom ``g`` from the body placements ``R``, ``p``."""
    if g.body < 0:
        return g.R, g.p
    return R[g.body] @ g.R, R[g.body] @ g.p + p[g.body]


def _support_of(g, R, p):
    """The support function ``h(n) = max_{x in g} n . x`` of a geom at pose ``R``, ``p``
    (``n (k, 3)`` -> ``(k,)``); a plane: ``("plane", normal, offset)``."""
    s, t = g.size, g.type
    if t == "plane":
        return ("plane", R[:, 2], float(R[:, 2] @ p))
    if t == "sphere":
        return lambda n: n @ p + s[0]
    if t == "capsule":
        a = R[:, 2] * s[1]
        return lambda n: n @ p + np.abs(n @ a) + s[0]
    if t == "box":
        h = lambda n: n @ p + np.abs(n @ R) @ s  # noqa: E731
        h.axes = h.edges = R.T  # face normals and edge directions (the separating axes)
        return h
    if t == "ellipsoid":
        return lambda n: n @ p + np.linalg.norm((n @ R) * s, axis=1)
    if t == "cylinder":
        a = R[:, 2]

        def h(n):
            na = n @ a
            return n @ p + s[1] * np.abs(na) + s[0] * np.sqrt(np.maximum(0.0, 1.0 - na * na))

        return h
    V = np.asarray(g.hull.vertices, float) @ R.T + p  # a mesh: its hull's vertices
    h = lambda n: np.max(n @ V.T, axis=1)  # noqa: E731
    h.axes = np.asarray(g.hull.normals, float) @ R.T
    e = np.asarray(g.hull.vertices, float)[np.asarray(g.hull.edges)]
    h.edges = (e[:, 1] - e[:, 0]) @ R.T
    return h


def _sphere_points(k):
    """``k`` unit vectors spread over the sphere (a Fibonacci lattice)."""
    i = np.arange(k) + 0.5
    z = 1 - 2 * i / k
    r = np.sqrt(1 - z * z)
    phi = np.pi * (1 + 5**0.5) * i
    return np.column_stack([r * np.cos(phi), r * np.sin(phi), z])


def penetration(ha, hb, k=2000) -> float:
    """Penetration depth of two convex sets given by their support functions (> 0: they
    overlap by that much; < 0: apart by that distance): ``min_{|n| = 1} h_a(n) + h_b(-n)``,
    the support function of the Minkowski difference ``A - B`` at its minimum (the distance of
    the origin to its boundary). Two polytopes (boxes, hulls): over their face normals and the
    cross products of their edge directions, where the minimum lies (the separating axis
    theorem); otherwise over ``k`` directions refined by Nelder-Mead. Independent of the
    narrow phase of :mod:`jaxdyn.sim.collision` (numpy only); a plane ``ha`` / ``hb``
    (``("plane", normal, offset)``): ``offset - min_B n . x``."""
    if isinstance(ha, tuple):
        ha, hb = hb, ha
    if isinstance(hb, tuple):
        _, n, off = hb
        return float(off + ha(-n[None])[0])
    from scipy.optimize import minimize

    poly = hasattr(ha, "axes") and hasattr(hb, "axes")
    axes = [] if poly else [_sphere_points(k)]
    for h in (ha, hb):
        if hasattr(h, "axes"):
            axes += [h.axes, -h.axes]
    if poly:
        c = np.cross(ha.edges[:, None], hb.edges[None]).reshape(-1, 3)  # edge-edge axes
        c = c[np.linalg.norm(c, axis=1) > 1e-9]
        c /= np.linalg.norm(c, axis=1, keepdims=True)
        axes += [c, -c]
    dirs = np.concatenate(axes)
    f = ha(dirs) + hb(-dirs)
    if poly:
        return float(f.min())
    best = float(f.min())
    for i in np.argsort(f)[:2]:
        n0 = dirs[i]
        x0 = np.array([np.arccos(np.clip(n0[2], -1, 1)), np.arctan2(n0[1], n0[0])])

        def g(x):
            st = np.sin(x[0])
            n = np.array([[st * np.cos(x[1]), st * np.sin(x[1]), np.cos(x[0])]])
            return float(ha(n)[0] + hb(-n)[0])

        r = minimize(g, x0, method="Nelder-Mead", options=dict(xatol=1e-9, fatol=1e-12))
        best = min(best, float(r.fun))
    return best


def _primitive_geom(r, k, c, bmap, Rb, pb):
    """A contact primitive of robot ``r`` on a frame as a scene geom."""
    from .geometry import Box, Capsule, Sphere

    m = r.model
    f = m.frame_index(c.frame)
    b = int(m.topo.frame_parent[f])
    Rf, pf = np.asarray(m.frame_R, float)[f], np.asarray(m.frame_p, float)[f]
    pos = np.asarray(c.pos, float)
    rot = np.asarray(c.rotation, float) if isinstance(c, (Box, Capsule)) else np.eye(3)
    size = np.zeros(3)
    if isinstance(c, Box):
        typ, size[:] = "box", np.asarray(c.size) / 2
        rb = float(np.linalg.norm(size))
    elif isinstance(c, Capsule):
        typ, size[:2] = "capsule", (c.radius, c.length / 2)
        rb = c.radius + c.length / 2
    else:
        typ = "sphere"
        size[0] = c.radius if isinstance(c, Sphere) else 0.0
        rb = size[0]
    R, p = Rf @ rot, Rf @ pos + pf
    if b < 0:
        R, p = Rb @ R, Rb @ p + pb
    fname = m.frame_names[f]
    name = f"{r.name}/{c.name if c.name is not None else f'{fname}/{typ}{k}'}"
    return _G(
        name,
        r.name,
        f"{r.name}/{fname}",
        -1 if b < 0 else int(bmap[b]),
        typ,
        size,
        R,
        p,
        r.friction,
        3,
        None,
        float(rb),
    )


def _as_robot(r: object) -> Robot:
    if isinstance(r, Model):
        return Robot(r)
    raise TypeError(
        f"Scene: robots must be Robot or Model, got {type(r).__name__} {r!r}" + _hint(r)
    )


def _hint(x):
    from .geometry import PRIMITIVES

    if isinstance(x, PRIMITIVES):
        return (
            f" (sim.{type(x).__name__} is a contact primitive on a model frame; a scene "
            f"object: sim.Free{type(x).__name__ if type(x).__name__ != 'Point' else 'Sphere'}"
            "(name, ...))"
        )
    return ""


def _listed(what: str, x: Any) -> list[Any]:
    if isinstance(x, (FreeObject, StaticGeom, Ground)):
        return [x]
    try:
        return list(x)
    except TypeError:
        raise TypeError(f"Scene: {what} must be a list, got {type(x).__name__}") from None


def _ordered(t1, t2):
    return collision.GEOM_TYPES[t1] <= collision.GEOM_TYPES[t2]


def _plane_frame(n):
    """The smallest rotation taking the z axis to ``n`` (the identity for the floor)."""
    z = np.array([0.0, 0.0, 1.0])
    c, a = float(z @ n), np.cross(z, n)
    if c < -1 + 1e-12:
        return np.diag([1.0, -1.0, -1.0])
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + K + K @ K / (1 + c)


def _named_pairs(what, pairs, gs):
    """``deny`` / ``allow`` (``what``) as a set of name pairs, each name a part, link or geom
    of ``gs``; anything else a ``ValueError`` naming ``what``."""
    keys = {k for g in gs for k in (g.part, g.link, g.name)}
    out = set()
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise ValueError(f"Scene: {what} must be a list of pairs (a, b) of names, got {pairs!r}")
    for pr in pairs:
        try:  # any pair-like (tuple, list, array of two names), normalised to a tuple
            pair = None if isinstance(pr, (str, bytes)) else tuple(pr)
        except TypeError:
            pair = None
        if pair is None or len(pair) != 2 or not all(isinstance(k, str) for k in pair):
            raise ValueError(
                f"Scene: {what} entries must be pairs (a, b) of two names (str), got {pr!r}"
            )
        for k in pair:
            if k not in keys:
                raise ValueError(
                    f"Scene: {what} entry {pair!r} names {k!r}, which is no part, link or geom "
                    "of the scene"
                )
        out.add(pair)
    return out


_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)  # MuJoCo's default solimp


def _plain(g) -> bool:
    """Whether the scene geom ``g`` has MuJoCo's default contact parameters (``margin``,
    ``solref``, ``solimp``): on the ground it may then be a primitive (a contact set carries
    none of them), else it is a geom pair, as :func:`jaxdyn.load_mjcf` decides."""
    return (
        g.margin == 0
        and (g.solref is None or np.allclose(g.solref, (0.02, 1.0), rtol=0, atol=0))
        and (g.solimp is None or np.allclose(g.solimp, _SOLIMP, rtol=0, atol=0))
    )


def _explicit_row(g, j):
    """Explicit pair ``j`` of the :class:`Geoms` ``g``: its contact parameters (MuJoCo's
    defaults where ``g`` has none)."""
    row = lambda x, default: default if x is None else np.asarray(x, float)[j]  # noqa: E731
    return (
        int(g.pair_condim[j]),
        float(np.asarray(g.pair_friction, float)[j]),
        float(row(g.pair_margin, 0.0)),
        row(g.pair_solref, np.array([0.02, 1.0])),
        None if g.pair_solimp is None else row(g.pair_solimp, None),
        row(g.pair_solreffriction, np.zeros(2)),
        row(g.pair_spin, np.zeros(2)),
    )


def _table(gs, pairs, explicit=None):
    """The :class:`Geoms` of the geoms used by ``pairs`` (``None`` without pairs); ``explicit``:
    ``{frozenset((g1, g2)): row}`` of the robots' explicit pairs (:func:`_explicit_row`), which
    keep their own parameters."""
    if not pairs:
        return None
    used = sorted({k for pr in pairs for k in pr})
    index = {k: i for i, k in enumerate(used)}
    hulls = {index[k]: gs[k].hull for k in used if gs[k].type == "mesh"}
    extra = {}
    if any(gs[k].margin != 0 for k in used):
        extra["margin"] = np.array([gs[k].margin for k in used], float)
    if any(gs[k].solref is not None or gs[k].solmix != 1 for k in used):
        extra["solref"] = np.array(
            [(0.02, 1.0) if gs[k].solref is None else gs[k].solref for k in used], float
        )
        extra["solmix"] = np.array([gs[k].solmix for k in used], float)
    if any(gs[k].solimp is not None for k in used):  # MuJoCo's impedance (soft contact)
        extra["solimp"] = np.array(
            [_SOLIMP if gs[k].solimp is None else gs[k].solimp for k in used], float
        )
    if len({gs[k].priority for k in used}) > 1:
        extra["priority"] = tuple(gs[k].priority for k in used)
    if any(gs[k].condim > 3 for k in used):  # condim 4 / 6 (sim.Constraint)
        extra["spin"] = np.array([(0.0, 0.0) if gs[k].spin is None else gs[k].spin for k in used])
    ex = [n for n, pr in enumerate(pairs) if frozenset(pr) in (explicit or {})]
    if ex:
        rows = [explicit[frozenset(pairs[n])] for n in ex]  # type: ignore[index]
        col = lambda c: np.array([r[c] for r in rows], float)  # noqa: E731
        extra.update(
            explicit=tuple(ex),
            pair_condim=tuple(r[0] for r in rows),
            pair_friction=col(1),
            pair_margin=col(2),
            pair_solref=col(3),
            pair_solimp=(
                np.array([_SOLIMP if r[4] is None else r[4] for r in rows], float)
                if any(r[4] is not None for r in rows)
                else None
            ),
            pair_solreffriction=col(5) if np.any(col(5) != 0) else None,
            pair_spin=col(6) if any(r[0] > 3 for r in rows) else None,
        )
    return Geoms(
        **extra,
        size=np.array([gs[k].size for k in used], float),
        pos=np.array([gs[k].p for k in used], float),
        rot=np.array([gs[k].R for k in used], float),
        friction=np.array([gs[k].friction for k in used], float),
        rbound=np.array([gs[k].rbound for k in used], float),
        body=tuple(gs[k].body for k in used),
        type=tuple(gs[k].type for k in used),
        condim=tuple(gs[k].condim for k in used),
        names=tuple(gs[k].name for k in used),
        pairs=tuple((index[a], index[b]) for a, b in pairs),
        hulls=Static(hulls) if hulls else None,
    )

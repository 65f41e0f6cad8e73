"""Contact geometry: primitives attached to frames, and the terrain they touch.

A robot touches the ground through a few primitives fixed to its frames. Against a plane or a
heightfield every primitive reduces exactly (plane) or to first order (heightfield) to spheres:

* :class:`Sphere` -- centre and radius; :class:`Point` is a sphere of radius 0;
* :class:`Box` -- its 8 corners (a convex polytope touches a plane first at a vertex);
* :class:`Capsule` -- the two end spheres of its segment (the deepest point of a segment below
  a plane is one of its ends).

:func:`contact_set` compiles a list of primitives into a :class:`ContactSet` of spheres: the
body each sphere moves with (static numpy) and its centre in body coordinates and radius (array
leaves: differentiable and batchable for domain randomisation).

Terrains: :class:`Plane` (``n . x = height``) and :class:`Heightfield` (a regular grid of
heights, bilinear in between, the normal from its gradient).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import spatial
from ..model.urdf import rpy_to_matrix
from . import _params

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt
    from jax import Array

    from ..model.model import Model


__all__ = [
    "Box",
    "Capsule",
    "ContactSet",
    "Heightfield",
    "Plane",
    "Point",
    "Sphere",
    "contact_set",
]


def _vec(owner, what, x, n=3):
    a = np.asarray(x, dtype=float).reshape(-1)
    if a.shape != (n,) or not np.all(np.isfinite(a)):
        raise ValueError(f"{owner}: {what} must be {n} finite numbers, got {x!r}")
    return tuple(float(v) for v in a)


def _nonneg(owner, what, x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: {what} must be a number, got {x!r}") from None
    if not np.isfinite(v) or v < 0:
        raise ValueError(f"{owner}: {what} must be finite and >= 0, got {x!r}")
    return v


def _frame(owner, frame):
    if isinstance(frame, bool) or not isinstance(frame, (str, int, np.integer)):
        raise TypeError(f"{owner}: frame must be a frame name or index, got {frame!r}")
    return frame


@dataclass(frozen=True)
class Sphere:
    """A sphere of ``radius`` centred at ``pos`` in ``frame`` coordinates."""

    frame: str | int
    radius: float
    pos: tuple = (0.0, 0.0, 0.0)
    name: str | None = None

    def __post_init__(self):
        label = self.name or f"Sphere({self.frame!r})"
        object.__setattr__(self, "frame", _frame(label, self.frame))
        object.__setattr__(self, "radius", _nonneg(label, "radius", self.radius))
        object.__setattr__(self, "pos", _vec(label, "pos", self.pos))

    def spheres(self) -> list[tuple[tuple, float]]:
        return [(self.pos, self.radius)]


@dataclass(frozen=True)
class Point:
    """A contact point at ``pos`` in ``frame`` coordinates (a sphere of radius 0)."""

    frame: str | int
    pos: tuple = (0.0, 0.0, 0.0)
    name: str | None = None

    def __post_init__(self):
        label = self.name or f"Point({self.frame!r})"
        object.__setattr__(self, "frame", _frame(label, self.frame))
        object.__setattr__(self, "pos", _vec(label, "pos", self.pos))

    def spheres(self) -> list[tuple[tuple, float]]:
        return [(self.pos, 0.0)]


def _rotation(label, rpy, rotation):
    if rotation is not None:
        R = np.asarray(rotation, float)
        if R.shape != (3, 3) or not np.allclose(R.T @ R, np.eye(3), atol=1e-9):
            raise ValueError(f"{label}: rotation must be a 3x3 rotation matrix")
        return R
    return rpy_to_matrix(_vec(label, "rpy", rpy))


@dataclass(frozen=True)
class Box:
    """A box of full side lengths ``size`` centred at ``pos``, rotated by ``rpy`` (URDF
    roll-pitch-yaw) or ``rotation`` in ``frame`` coordinates; contacts at its 8 corners."""

    frame: str | int
    size: tuple
    pos: tuple = (0.0, 0.0, 0.0)
    rpy: tuple = (0.0, 0.0, 0.0)
    rotation: tuple | np.ndarray | None = None  # a 3x3 array is stored as a tuple
    name: str | None = None

    def __post_init__(self):
        label = self.name or f"Box({self.frame!r})"
        object.__setattr__(self, "frame", _frame(label, self.frame))
        size = _vec(label, "size", self.size)
        if min(size) < 0:
            raise ValueError(f"{label}: size must be >= 0, got {self.size!r}")
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "pos", _vec(label, "pos", self.pos))
        R = _rotation(label, self.rpy, self.rotation)
        object.__setattr__(self, "rotation", tuple(map(tuple, R)))

    def spheres(self) -> list[tuple[tuple, float]]:
        R, h = np.asarray(self.rotation), 0.5 * np.asarray(self.size)
        signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
        corners = (signs * h) @ R.T + np.asarray(self.pos)
        return [(tuple(c), 0.0) for c in corners]


@dataclass(frozen=True)
class Capsule:
    """A capsule of ``radius`` around a segment of ``length`` along the local z axis, centred at
    ``pos`` and rotated by ``rpy`` / ``rotation`` in ``frame``: its two end spheres."""

    frame: str | int
    radius: float
    length: float
    pos: tuple = (0.0, 0.0, 0.0)
    rpy: tuple = (0.0, 0.0, 0.0)
    rotation: tuple | np.ndarray | None = None  # a 3x3 array is stored as a tuple
    name: str | None = None

    def __post_init__(self):
        label = self.name or f"Capsule({self.frame!r})"
        object.__setattr__(self, "frame", _frame(label, self.frame))
        object.__setattr__(self, "radius", _nonneg(label, "radius", self.radius))
        object.__setattr__(self, "length", _nonneg(label, "length", self.length))
        object.__setattr__(self, "pos", _vec(label, "pos", self.pos))
        R = _rotation(label, self.rpy, self.rotation)
        object.__setattr__(self, "rotation", tuple(map(tuple, R)))

    def spheres(self) -> list[tuple[tuple, float]]:
        z = np.asarray(self.rotation)[:, 2] * 0.5 * self.length
        c = np.asarray(self.pos)
        return [(tuple(c - z), self.radius), (tuple(c + z), self.radius)]


PRIMITIVES = (Sphere, Point, Box, Capsule)


class ContactSet(eqx.Module):
    """Contact spheres compiled for one model (see :func:`contact_set`).

    ``body`` (static tuple, one per sphere): the moving body each sphere is fixed to;
    ``pos (nc, 3)``: centres in body coordinates; ``radius (nc,)``; ``names``: one label per
    sphere (the primitive's name, with ``[k]`` for primitives of several spheres).

    ``friction (nc,)``: each sphere's Coulomb coefficient against the terrain (MuJoCo's pair
    mixing of the primitive's geom and the terrain's: the larger of the two, or the geom of
    higher ``priority``'s; :meth:`jaxdyn.io.mjcf.MJCFModel.sim_config` and
    :class:`jaxdyn.sim.Scene` fill it); ``None``: the contact model's (else 1). A contact
    model's own ``friction`` overrides it.

    ``solref (nc, 2)``, ``solimp (nc, 5)``, ``invweight (nc,)``: each sphere's MuJoCo
    ``solref``, ``solimp`` and ``diagApprox`` (:attr:`jaxdyn.sim.contact.ContactFrames.solref`,
    ``solimp``, ``invweight``; ``None``: the contact model's or MuJoCo's defaults, the Delassus
    matrix's diagonal); :meth:`jaxdyn.io.mjcf.MJCFModel.sim_config` fills them from an MJCF
    file for ``Constraint(soft=True)``.

    ``axis (nc, 3)``: a :class:`Capsule`'s end spheres carry the capsule's axis (body
    coordinates; zeros on the other spheres): against a :class:`Plane` it is the contact's
    first tangent (:attr:`jaxdyn.sim.contact.ContactFrames.tangent`), the axis of MuJoCo's
    pyramid (``mjc_PlaneCapsule``); ``None``: MuJoCo's default contact frames.
    """

    pos: jnp.ndarray
    radius: jnp.ndarray
    body: tuple = eqx.field(static=True)
    names: tuple = eqx.field(static=True)
    solref: jnp.ndarray | None = None
    solimp: jnp.ndarray | None = None
    invweight: jnp.ndarray | None = None
    friction: jnp.ndarray | None = None
    axis: jnp.ndarray | None = None

    def __check_init__(self):
        n = len(self.names)
        for name, shape in (
            ("solref", (n, 2)),
            ("solimp", (n, 5)),
            ("invweight", (n,)),
            ("friction", (n,)),
            ("axis", (n, 3)),
        ):
            x = getattr(self, name)
            if x is not None and np.shape(x) != shape:
                raise ValueError(f"ContactSet: {name} has shape {np.shape(x)}, expected {shape}")

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def body_index(self) -> np.ndarray:
        return np.asarray(self.body, np.int64)


def contact_set(
    model: Model,
    geoms: Sequence[Sphere | Point | Box | Capsule],
    *,
    friction: npt.ArrayLike | None = None,
) -> ContactSet:
    """Compile contact primitives (:class:`Sphere`, :class:`Point`, :class:`Box`,
    :class:`Capsule`) on ``model``'s frames into a :class:`ContactSet`.

    ``friction``: ``None`` (default: the contact model's), or each primitive's Coulomb
    coefficient against the terrain (one number per primitive, ``>= 0``; given to each of its
    spheres: :attr:`ContactSet.friction`).

    Raises ``ValueError`` for an unknown frame, a frame fixed to the world (it cannot move, so
    it cannot make contact) and a frame on a body that carries no mass, itself or below it (a
    force on it would have no inertia to act on).
    """
    if isinstance(geoms, PRIMITIVES):
        geoms = (geoms,)
    geoms = tuple(geoms)
    if not geoms:
        raise ValueError("contact_set: no contact primitives given")
    t = model.topo
    mass = np.asarray(model.mass, float)
    subtree_mass = mass.copy()
    for b in range(t.nb - 1, -1, -1):
        if t.parent[b] >= 0:
            subtree_mass[t.parent[b]] += subtree_mass[b]
    for g in geoms:
        if not isinstance(g, PRIMITIVES):
            raise TypeError(
                f"contact_set: expected Sphere, Point, Box or Capsule, got {type(g).__name__}"
            )
    fr = None
    if friction is not None:
        fr = np.asarray(friction, float).reshape(-1)
        if fr.shape != (len(geoms),) or not np.all(np.isfinite(fr)) or np.any(fr < 0):
            raise ValueError(
                f"contact_set: friction must be one finite number >= 0 per primitive "
                f"({len(geoms)}), got {friction!r}"
            )
    defaults = [f"{type(g).__name__}({g.frame!r})" for g in geoms]
    bodies, pos, radius, names, frs, axes = [], [], [], [], [], []
    for gi, g in enumerate(geoms):
        label = g.name
        if label is None:  # default labels: numbered where several primitives share a frame
            label = defaults[gi] + (f"#{gi}" if defaults.count(defaults[gi]) > 1 else "")
        f = model.frame_index(g.frame)
        b = int(t.frame_parent[f])
        if b < 0:
            raise ValueError(
                f"contact_set: {label} is on frame {t.frame_names[f]!r}, which is fixed to the "
                "world; it cannot move, so it cannot make contact"
            )
        if not subtree_mass[b] > 0:
            raise ValueError(
                f"contact_set: {label} is on frame {t.frame_names[f]!r} of the massless body "
                f"{t.body_names[b]!r} (nothing below it carries mass either): a contact force "
                "there would have no inertia to act on"
            )
        Rf, pf = model.frame_R[f], model.frame_p[f]
        sph = g.spheres()
        for k, (c, r) in enumerate(sph):
            bodies.append(b)
            pos.append(spatial.mv(Rf, jnp.asarray(c, Rf.dtype)) + pf)
            radius.append(r)
            names.append(label if len(sph) == 1 else f"{label}[{k}]")
            frs.append(0.0 if fr is None else fr[gi])
            z = np.asarray(g.rotation)[:, 2] if isinstance(g, Capsule) else np.zeros(3)
            axes.append(spatial.mv(Rf, jnp.asarray(z, Rf.dtype)))
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"contact_set: contact names must be unique, repeated: {dup}")
    dtype = model.frame_p.dtype
    return ContactSet(
        pos=spatial.stack(pos).astype(dtype),
        radius=jnp.asarray(radius, dtype),
        body=tuple(int(b) for b in bodies),
        names=tuple(names),
        friction=None if fr is None else jnp.asarray(frs, dtype),
        axis=spatial.stack(axes).astype(dtype)
        if any(isinstance(g, Capsule) for g in geoms)
        else None,
    )


# ----------------------------------------------------------------------------------- terrain
def _terrain_friction(owner, friction) -> Any:
    """A terrain's ``friction``: ``None``, or one number ``>= 0`` (refused by name else)."""
    if friction is None or isinstance(friction, jax.core.Tracer):
        return friction
    if np.ndim(friction) != 0:
        raise ValueError(f"{owner}: friction must be None or one number, got {friction!r}")
    _params.check_number(owner, "friction", friction, 0.0)
    return np.asarray(float(friction))


class Plane(eqx.Module):
    """The half-space below ``normal . x = height`` (``normal`` is normalised; default: the
    ground ``z = 0``). ``friction``: the terrain's own Coulomb coefficient (``None``, the
    default: none, each contact's is its contact set's), mixed with each contact sphere's as
    MuJoCo mixes two geoms' (the larger; a contact set without ``friction`` takes the
    terrain's; :func:`jaxdyn.sim.contact.contact_frames`)."""

    # numpy when built, jax arrays where traced (pytree leaves)
    normal: jnp.ndarray | np.ndarray
    height: jnp.ndarray | np.ndarray
    friction: jnp.ndarray | np.ndarray | None

    def __init__(
        self,
        normal: npt.ArrayLike = (0.0, 0.0, 1.0),
        height: float = 0.0,
        friction: float | None = None,
    ) -> None:
        n = np.asarray(normal, float).reshape(-1)
        if n.shape != (3,) or not np.all(np.isfinite(n)) or np.linalg.norm(n) == 0:
            raise ValueError(f"Plane: normal must be 3 finite numbers, not all zero; got {normal}")
        self.normal = n / np.linalg.norm(n)
        _params.check_number("Plane", "height", height)
        self.height = np.asarray(float(height))
        self.friction = _terrain_friction("Plane", friction)

    _RULES = (("height", None, False), ("friction", 0.0, False))

    def query(self, x: Array) -> tuple[Array, Array]:
        """Signed distance of points ``x (..., 3)`` to the surface and the surface normal."""
        n = self.normal.astype(x.dtype)
        return x @ n - self.height.astype(x.dtype), jnp.broadcast_to(n, x.shape)


class Heightfield(eqx.Module):
    """Terrain ``z = h(x, y)`` from a regular grid: ``heights[i, j]`` is the height at
    ``(origin[0] + i * spacing[0], origin[1] + j * spacing[1])``, bilinear in between and held
    at the edge value outside the grid.

    ``query`` returns the unit normal ``n = (-h_x, -h_y, 1) / |.|`` and the distance along it
    ``(z - h(x, y)) n_z`` (exact on a planar patch, first order otherwise: fine for spheres small
    against the terrain's curvature, as in most learning simulators).

    ``friction``: the terrain's own Coulomb coefficient, as :class:`Plane`'s.
    """

    # numpy when built, jax arrays where traced (pytree leaves)
    heights: jnp.ndarray | np.ndarray
    origin: jnp.ndarray | np.ndarray
    spacing: jnp.ndarray | np.ndarray
    friction: jnp.ndarray | np.ndarray | None

    _RULES = (("friction", 0.0, False),)

    def __init__(
        self,
        heights: npt.ArrayLike,
        spacing: npt.ArrayLike = (0.1, 0.1),
        origin: npt.ArrayLike = (0.0, 0.0),
        friction: float | None = None,
    ) -> None:
        h = np.asarray(heights, float)
        if h.ndim != 2 or min(h.shape) < 2 or not np.all(np.isfinite(h)):
            raise ValueError("Heightfield: heights must be a finite 2-D grid of at least 2 x 2")
        sp = np.asarray(spacing, float).reshape(-1)
        if sp.shape != (2,) or not np.all(sp > 0):
            raise ValueError(f"Heightfield: spacing must be 2 positive numbers, got {spacing}")
        self.heights = h
        self.spacing = sp
        self.origin = np.asarray(_vec("Heightfield", "origin", origin, 2))
        self.friction = _terrain_friction("Heightfield", friction)

    def query(self, x: Array) -> tuple[Array, Array]:
        dtype = x.dtype
        h = self.heights.astype(dtype)
        nx, ny = h.shape
        u = (x[..., :2] - self.origin.astype(dtype)) / self.spacing.astype(dtype)
        ux = jnp.clip(u[..., 0], 0.0, nx - 1.0)
        uy = jnp.clip(u[..., 1], 0.0, ny - 1.0)
        i = jnp.clip(jnp.floor(ux).astype(jnp.int32), 0, nx - 2)
        j = jnp.clip(jnp.floor(uy).astype(jnp.int32), 0, ny - 2)
        fx, fy = ux - i, uy - j
        h00, h10, h01, h11 = h[i, j], h[i + 1, j], h[i, j + 1], h[i + 1, j + 1]
        z = (h00 * (1 - fx) + h10 * fx) * (1 - fy) + (h01 * (1 - fx) + h11 * fx) * fy
        inside_x = (u[..., 0] > 0) & (u[..., 0] < nx - 1)
        inside_y = (u[..., 1] > 0) & (u[..., 1] < ny - 1)
        dzdx = ((h10 - h00) * (1 - fy) + (h11 - h01) * fy) / self.spacing[0].astype(dtype)
        dzdy = ((h01 - h00) * (1 - fx) + (h11 - h10) * fx) / self.spacing[1].astype(dtype)
        dzdx, dzdy = jnp.where(inside_x, dzdx, 0.0), jnp.where(inside_y, dzdy, 0.0)
        n = spatial.stack([-dzdx, -dzdy, jnp.ones_like(dzdx)], -1)
        n = n / jnp.sqrt(jnp.sum(n * n, -1, keepdims=True))
        return (x[..., 2] - z) * n[..., 2], n


TERRAINS = (Plane, Heightfield)

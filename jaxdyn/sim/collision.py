"""Narrow-phase collision between pairs of geoms, in pure JAX (MuJoCo's conventions).

Each geom is a type, a size array laid out as MuJoCo's ``geom_size`` and a world pose (``pos``
(3,), rotation matrix ``mat`` (3, 3) whose columns are the geom's axes in world coordinates):

==========  =============================  ===================================================
type        ``size``                       shape
==========  =============================  ===================================================
plane       ignored                        the plane through ``pos`` with normal ``mat[:, 2]``
sphere      ``[r]``                        ball of radius ``r``
capsule     ``[r, h]``                     segment ``pos +- h mat[:, 2]`` swept by a ball ``r``
ellipsoid   ``[a, b, c]``                  semi-axes along the columns of ``mat``
cylinder    ``[r, h]``                     radius ``r``, half-length ``h`` along ``mat[:, 2]``
box         ``[hx, hy, hz]``               half-sizes along the columns of ``mat``
mesh        a :class:`Hull`                convex hull (vertices in geom coordinates)
==========  =============================  ===================================================

A pair function ``collide_<t1>_<t2>(size1, pos1, mat1, size2, pos2, mat2, margin=0.0)`` returns
a :class:`Contact` with a FIXED number of slots per pair type (:data:`NCON`), as MJX does:

* ``dist`` (n,): signed distance between the surfaces at the contact (< 0: penetration depth),
  the true signed distance also when the geoms are apart (within the pair's method);
* ``pos`` (n, 3): MuJoCo's contact position, the midpoint between the two surfaces;
* ``normal`` (n, 3): unit normal pointing from geom 1 to geom 2 (MuJoCo's ``frame[0:3]``).

A slot that holds no contact has ``dist = NO_CONTACT`` (a large finite number, 1e10, so that
arithmetic on it stays finite and its gradient is zero); callers keep the slots with
``dist < margin``. ``margin`` (keyword, default 0) only matters to the pairs that choose a subset
of candidate points (polytope manifolds): points within ``margin`` are kept as candidates.

Pairs follow MuJoCo's order (the lower type of :data:`GEOM_TYPES` first): :func:`collide`
dispatches on the two static types, :data:`NCON` says which pairs exist and how many slots each
returns. All functions are ``jit``/``vmap``/``grad``-safe (norms and divisions are guarded at
degenerate configurations) in float32 and float64.

Methods: closest points of segments and boxes (C. Ericson, *Real-Time Collision Detection*,
2005, ch. 5.1); the separating-axis theorem for boxes and convex polyhedra (S. Gottschalk,
M. Lin, D. Manocha, "OBBTree", SIGGRAPH 1996; Ericson ch. 4.4 and 5.2.1) with edge-edge axes
pruned by the Gauss-map Minkowski-face test (D. Gregorius, "The separating axis test between
convex polyhedra", GDC 2013) and a face-face manifold by clipping the incident face against the
reference face (Sutherland-Hodgman, Ericson ch. 8.3).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "GEOM_TYPES",
    "NCON",
    "NO_CONTACT",
    "PAIRS",
    "Contact",
    "collide",
]

#: MuJoCo's ``mjtGeom`` numbering (``mjGEOM_PLANE`` = 0, ...): pairs are ordered by it
GEOM_TYPES = {
    "plane": 0,
    "hfield": 1,
    "sphere": 2,
    "capsule": 3,
    "ellipsoid": 4,
    "cylinder": 5,
    "box": 6,
    "mesh": 7,
}

#: ``dist`` of a slot that holds no contact (finite so that arithmetic on it stays finite)
NO_CONTACT = 1e10


class Contact(NamedTuple):
    """Contacts of one geom pair: ``dist`` (n,), ``pos`` (n, 3), ``normal`` (n, 3) (geom 1 ->
    geom 2); unused slots have ``dist = NO_CONTACT``."""

    dist: jax.Array
    pos: jax.Array
    normal: jax.Array


# ------------------------------------------------------------------------------ helpers


def _eps(x):
    return jnp.finfo(jnp.result_type(x)).eps


def _dot(a, b):
    return jnp.sum(a * b, axis=-1)


def _safe_norm(v, eps=None):
    """|v| with a finite gradient at v = 0 (the gradient there is 0)."""
    n2 = _dot(v, v)
    tiny = (_eps(v) if eps is None else eps) ** 2
    ok = n2 > tiny
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, n2, 1.0)), 0.0)


def _normalize(v, fallback):
    """v / |v|, or ``fallback`` where |v| is (numerically) zero; gradient-safe."""
    n2 = _dot(v, v)[..., None]
    ok = n2 > (100 * _eps(v)) ** 2
    inv = jnp.where(ok, jax.lax.rsqrt(jnp.where(ok, n2, 1.0)), 0.0)
    return jnp.where(ok, v * inv, fallback)


def _safe_div(a, b, eps=None):
    tiny = 100 * _eps(b) if eps is None else eps
    ok = jnp.abs(b) > tiny
    return jnp.where(ok, a / jnp.where(ok, b, 1.0), 0.0)


def _contact(dist, pos, normal):
    dist = jnp.atleast_1d(dist)
    return Contact(dist, jnp.reshape(pos, (-1, 3)), jnp.reshape(normal, (-1, 3)))


def _concat(*cs):
    return Contact(*(jnp.concatenate(x, axis=0) for x in zip(*cs, strict=True)))


def _flip(c):
    """The same contacts seen from the other geom (normal reversed)."""
    return Contact(c.dist, c.pos, -c.normal)


def _mask(c, valid):
    return Contact(jnp.where(valid, c.dist, NO_CONTACT), c.pos, c.normal)


def _cast(*xs):
    dt = jnp.result_type(*[jnp.asarray(x) for x in xs if not hasattr(x, "faces")])
    if not jnp.issubdtype(dt, jnp.floating):
        dt = jnp.result_type(float)
    return dt


# ------------------------------------------------------------------------------ plane pairs


def collide_plane_sphere(size1, pos1, mat1, size2, pos2, mat2, margin=0.0):
    """Plane - sphere: 1 contact, exact (the sphere's lowest point)."""
    n = mat1[:, 2]
    r = size2[0]
    dist = _dot(pos2 - pos1, n) - r
    pos = pos2 - n * (r + dist / 2)
    return _contact(dist, pos, n)


def collide_plane_capsule(size1, pos1, mat1, size2, pos2, mat2, margin=0.0):
    """Plane - capsule: 2 contacts, the end spheres of the segment (exact: the lowest point of a
    segment is one of its ends; both are returned so that a lying capsule rests on two)."""
    seg = mat2[:, 2] * size2[1]
    a = collide_plane_sphere(size1, pos1, mat1, size2, pos2 + seg, mat2)
    b = collide_plane_sphere(size1, pos1, mat1, size2, pos2 - seg, mat2)
    return _concat(a, b)


_BOX_SIGNS = np.array(
    [[1 if i & 1 else -1, 1 if i & 2 else -1, 1 if i & 4 else -1] for i in range(8)], float
)


def collide_plane_box(size1, pos1, mat1, size2, pos2, mat2, margin=0.0):
    """Plane - box: 4 contacts, the 4 corners below the box centre along the plane normal
    (exactly MuJoCo's ``mjc_PlaneBox``: corners ``dist`` apart from the plane; a box resting flat
    gets its 4 bottom corners)."""
    n = mat1[:, 2]
    corners = (_BOX_SIGNS * size2[:3]) @ mat2.T  # (8, 3) relative to the box centre
    ldist = corners @ n
    _, idx = jax.lax.top_k(-ldist, 4)
    c = corners[idx]
    ld = ldist[idx]
    dist = _dot(pos2 - pos1, n) + ld
    pos = pos2 + c - n * (dist / 2)[:, None]
    con = _contact(dist, pos, jnp.broadcast_to(n, (4, 3)))
    return _mask(con, ld <= 0)


def collide_plane_cylinder(size1, pos1, mat1, size2, pos2, mat2, margin=0.0):
    """Plane - cylinder: 4 contacts as MuJoCo's ``mjc_PlaneCylinder``: the deepest rim point,
    the rim point above it on the other disk, and two more points of the near disk that make an
    equilateral triangle with the first (so a cylinder standing on a disk rests on 3 points)."""
    n = mat1[:, 2]
    r, h = size2[0], size2[1]
    axis = mat2[:, 2]
    prj = _dot(n, axis)
    axis = jnp.where(prj > 0, -axis, axis)
    prj = -jnp.abs(prj)
    dist0 = _dot(pos2 - pos1, n)
    vec = axis * prj - n
    vec = _normalize(vec, mat2[:, 0]) * r
    prjvec = _dot(vec, n)
    axis = axis * h
    prj = prj * h
    d1 = dist0 + prj + prjvec
    d2 = dist0 - prj + prjvec
    d3 = dist0 + prj - prjvec / 2
    side = _normalize(jnp.cross(vec, axis), mat2[:, 1]) * (r * np.sqrt(3.0) / 2)
    p1 = pos2 + vec + axis
    p2 = pos2 + vec - axis
    p3 = pos2 + side + axis - vec / 2
    p4 = pos2 - side + axis - vec / 2
    dist = jnp.stack([d1, d2, d3, d3])
    pts = jnp.stack([p1, p2, p3, p4]) - n * (dist / 2)[:, None]
    return _contact(dist, pts, jnp.broadcast_to(n, (4, 3)))


def collide_plane_ellipsoid(size1, pos1, mat1, size2, pos2, mat2, margin=0.0):
    """Plane - ellipsoid: 1 contact, exact: the ellipsoid's support point along -normal,
    ``x = c - R S^2 R^T n / |S R^T n|`` (S = diag of the semi-axes)."""
    n = mat1[:, 2]
    ln = (mat2.T @ n) * size2[:3]  # S R^T n
    s = _safe_norm(ln)
    lowest = pos2 - mat2 @ (size2[:3] * _safe_div(ln, s))
    dist = _dot(lowest - pos1, n)
    return _contact(dist, lowest - n * dist / 2, n)


# ------------------------------------------------------------------------------ sphere / capsule


def _sphere_sphere(p1, r1, mat1, p2, r2, mat2):
    d = p2 - p1
    fallback = _normalize(jnp.cross(mat1[:, 2], mat2[:, 2]), jnp.array([1.0, 0.0, 0.0], d.dtype))
    n = _normalize(d, fallback)
    dist = _safe_norm(d) - r1 - r2
    pos = p1 + n * (r1 + dist / 2)
    return _contact(dist, pos, n)


def collide_sphere_sphere(size1, pos1, mat1, size2, pos2, mat2, margin=0.0):
    """Sphere - sphere: 1 contact, exact (coincident centres: the normal is the cross product of
    the z axes, or x, as MuJoCo)."""
    return _sphere_sphere(pos1, size1[0], mat1, pos2, size2[0], mat2)


def _closest_on_segment(p, c, axis):
    """Point of the segment ``c +- axis`` closest to ``p`` (Ericson 5.1.2)."""
    x = jnp.clip(_safe_div(_dot(p - c, axis), _dot(axis, axis)), -1.0, 1.0)
    return c + x * axis


def collide_sphere_capsule(size1, pos1, mat1, size2, pos2, mat2, margin=0.0):
    """Sphere - capsule: 1 contact, exact (closest point of the capsule's segment)."""
    q = _closest_on_segment(pos1, pos2, mat2[:, 2] * size2[1])
    return _sphere_sphere(pos1, size1[0], mat1, q, size2[0], mat2)


def _segment_segment(p1, a1, p2, a2):
    """Closest points of segments ``p1 +- a1`` and ``p2 +- a2`` (Ericson 5.1.9); also whether
    they are parallel (then the returned pair is the one MuJoCo's capsule pair starts with)."""
    dif = p1 - p2
    ma = _dot(a1, a1)
    mb = -_dot(a1, a2)
    mc = _dot(a2, a2)
    u = -_dot(a1, dif)
    v = _dot(a2, dif)
    det = ma * mc - mb * mb
    parallel = jnp.abs(det) < 1e3 * _eps(det) * (ma * mc + 1e-30)
    x1 = _safe_div(mc * u - mb * v, det)
    x2 = _safe_div(ma * v - mb * u, det)
    # clamp x1, recompute x2; clamp x2, recompute x1 (MuJoCo's mjc_CapsuleCapsule order)
    x2 = jnp.where(x1 > 1, _safe_div(v - mb, mc), jnp.where(x1 < -1, _safe_div(v + mb, mc), x2))
    x1 = jnp.clip(x1, -1.0, 1.0)
    x1 = jnp.where(
        x2 > 1,
        jnp.clip(_safe_div(u - mb, ma), -1, 1),
        jnp.where(x2 < -1, jnp.clip(_safe_div(u + mb, ma), -1, 1), x1),
    )
    x2 = jnp.clip(x2, -1.0, 1.0)
    # parallel: x1 = +1 and -1, each with the closest x2
    xp2a = jnp.clip(_safe_div(v - mb, mc), -1, 1)
    xp2b = jnp.clip(_safe_div(v + mb, mc), -1, 1)
    q1 = jnp.where(parallel, p1 + a1, p1 + x1 * a1)
    q2 = jnp.where(parallel, p2 + xp2a * a2, p2 + x2 * a2)
    return q1, q2, parallel, (p1 - a1, p2 + xp2b * a2)


def collide_capsule_capsule(size1, pos1, mat1, size2, pos2, mat2, margin=0.0):
    """Capsule - capsule: 2 slots, exact closest points of the two segments (Ericson 5.1.9) in
    slot 0; for parallel axes a second contact from the other end of segment 1 as MuJoCo
    (``mjc_CapsuleCapsule``), otherwise slot 1 is empty."""
    a1 = mat1[:, 2] * size1[1]
    a2 = mat2[:, 2] * size2[1]
    q1, q2, parallel, (s1, s2) = _segment_segment(pos1, a1, pos2, a2)
    c0 = _sphere_sphere(q1, size1[0], mat1, q2, size2[0], mat2)
    c1 = _mask(_sphere_sphere(s1, size1[0], mat1, s2, size2[0], mat2), parallel)
    return _concat(c0, c1)


# ------------------------------------------------------------------------------ box pairs


def collide_sphere_box(size1, pos1, mat1, size2, pos2, mat2, margin=0.0):
    """Sphere - box: 1 contact, exact. Centre outside the box: the closest point of the box
    (Ericson 5.1.4); centre inside: the nearest face, normal along its axis."""
    r = size1[0]
    h = size2[:3]
    c = mat2.T @ (pos1 - pos2)  # sphere centre in box coordinates
    q = jnp.clip(c, -h, h)
    d = q - c
    dn = _safe_norm(d)
    outside = dn > 0
    # inside: the face with the least depth
    depth = h - jnp.abs(c)
    i = jnp.argmin(depth)
    e = jax.nn.one_hot(i, 3, dtype=c.dtype)
    s = jnp.where(c[i] >= 0, 1.0, -1.0)
    n_in = -s * e  # from the sphere into the box: opposite the face's outward normal
    dist_in = -depth[i] - r
    n_out = _normalize(d, n_in)
    n_loc = jnp.where(outside, n_out, n_in)
    dist = jnp.where(outside, dn - r, dist_in)
    pos_loc = c + n_loc * (r + dist / 2)
    return _contact(dist, pos2 + mat2 @ pos_loc, mat2 @ n_loc)


# ------------------------------------------------------------------------------ dispatch

_NAMES = {v: k for k, v in GEOM_TYPES.items()}

#: pair functions by (type 1, type 2) names, type 1 <= type 2 in :data:`GEOM_TYPES`
PAIRS = {
    ("plane", "sphere"): collide_plane_sphere,
    ("plane", "capsule"): collide_plane_capsule,
    ("plane", "ellipsoid"): collide_plane_ellipsoid,
    ("plane", "cylinder"): collide_plane_cylinder,
    ("plane", "box"): collide_plane_box,
    ("sphere", "sphere"): collide_sphere_sphere,
    ("sphere", "capsule"): collide_sphere_capsule,
    ("sphere", "box"): collide_sphere_box,
    ("capsule", "capsule"): collide_capsule_capsule,
}

#: number of contact slots each pair returns, by (type 1, type 2) names
NCON = {
    ("plane", "sphere"): 1,
    ("plane", "capsule"): 2,
    ("plane", "ellipsoid"): 1,
    ("plane", "cylinder"): 4,
    ("plane", "box"): 4,
    ("sphere", "sphere"): 1,
    ("sphere", "capsule"): 1,
    ("sphere", "box"): 1,
    ("capsule", "capsule"): 2,
}


def _type_name(t, what):
    if isinstance(t, str) and t in GEOM_TYPES:
        return t
    if isinstance(t, (int, np.integer)) and not isinstance(t, bool) and int(t) in _NAMES:
        return _NAMES[int(t)]
    raise ValueError(
        f"collide: {what} must be a geom type name {sorted(GEOM_TYPES)} or its MuJoCo number, "
        f"got {t!r}"
    )


def collide(type1, type2, size1, pos1, mat1, size2, pos2, mat2, margin=0.0):
    """Contacts between geom 1 of ``type1`` and geom 2 of ``type2`` (static: names or MuJoCo
    ``mjtGeom`` numbers) with the pair function of :data:`PAIRS`; returns :data:`NCON` slots.

    The pair is normally given in MuJoCo's order (lower type first); given the other way round
    the geoms are swapped and the normals reversed, so the normal still points from geom 1 to
    geom 2. A pair without a function raises ``NotImplementedError`` naming it."""
    n1, n2 = _type_name(type1, "type1"), _type_name(type2, "type2")
    if GEOM_TYPES[n1] > GEOM_TYPES[n2]:
        return _flip(collide(n2, n1, size2, pos2, mat2, size1, pos1, mat1, margin=margin))
    fn = PAIRS.get((n1, n2))
    if fn is None:
        raise NotImplementedError(f"collide: no narrow-phase function for the pair {n1}-{n2}")
    dt = _cast(size1, pos1, mat1, size2, pos2, mat2)

    def conv(x):
        return x if hasattr(x, "faces") else jnp.asarray(x, dt)

    args = [conv(x) for x in (size1, pos1, mat1, size2, pos2, mat2)]
    return fn(*args, margin=margin)

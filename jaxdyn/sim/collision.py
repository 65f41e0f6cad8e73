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
hfield      an :class:`HField`             heightfield: MuJoCo's triangular prisms of a grid
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
reference face (Sutherland-Hodgman, Ericson ch. 8.3). The ellipsoid pairs run GJK / EPA on
the exact shapes' support functions (:mod:`jaxdyn.sim.gjk`, MuJoCo's ``mjc_Convex``); the
cylinder pairs with cylinders, boxes and meshes add MuJoCo's ``multiccd`` contacts (the same
pair turned by 1e-3 rad; the exact single contact is ``exact_cylinder_*``). Heightfields are
MuJoCo's (``mjc_ConvexHField``): each grid cell two triangular prisms down to the base, each a
convex polytope for the pair functions above (ellipsoids and cylinders by GJK / EPA).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import spatial
from ._soft import MINVAL
from .gjk import _cross, _dot, _eps, convex_pair

if TYPE_CHECKING:
    from typing import TypeAlias

    import numpy.typing as npt
    from jax.typing import ArrayLike

    #: a geom's size: MuJoCo's ``geom_size`` entries, or a :class:`Hull` (mesh) or an
    #: :class:`HField` (heightfield)
    GeomSize: TypeAlias = "ArrayLike | Hull | HField"

__all__ = [
    "GEOM_TYPES",
    "HField",
    "NCON",
    "NO_CONTACT",
    "PAIRS",
    "Contact",
    "Hull",
    "box_hull",
    "collide",
    "cylinder_hull",
    "ellipsoid_hull",
    "hfield",
    "hfield_prism_contacts",
    "hull_from_points",
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


# _eps, _dot, _cross (cross product on the last axis, broadcasting; cheaper to trace than
# ``jnp.cross``): gjk's, imported above


def _clip(x, lo, hi):
    return jnp.minimum(jnp.maximum(x, lo), hi)


def _next(x, axis=0):
    """``x`` shifted by one along ``axis`` (cyclic: element i holds x[i + 1])."""
    n = x.shape[axis]
    return jnp.take(x, np.r_[1:n, 0], axis=axis)


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
    tiny = 100 * _eps(jnp.asarray(b)) if eps is None else eps
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
    dt = jnp.result_type(*[jnp.asarray(x) for x in xs if not isinstance(x, (Hull, HField))])
    if not jnp.issubdtype(dt, jnp.floating):
        dt = jnp.result_type(float)
    return dt


# ------------------------------------------------------------------------------ plane pairs


def collide_plane_sphere(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Plane - sphere: 1 contact, exact (the sphere's lowest point)."""
    n = mat1[:, 2]
    r = size2[0]
    dist = _dot(pos2 - pos1, n) - r
    pos = pos2 - n * (r + dist / 2)
    return _contact(dist, pos, n)


def collide_plane_capsule(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Plane - capsule: 2 contacts, the end spheres of the segment (exact: the lowest point of a
    segment is one of its ends; both are returned so that a lying capsule rests on two)."""
    seg = mat2[:, 2] * size2[1]
    a = collide_plane_sphere(size1, pos1, mat1, size2, pos2 + seg, mat2)
    b = collide_plane_sphere(size1, pos1, mat1, size2, pos2 - seg, mat2)
    return _concat(a, b)


_BOX_SIGNS = np.array(
    [[1 if i & 1 else -1, 1 if i & 2 else -1, 1 if i & 4 else -1] for i in range(8)], float
)


def collide_plane_box(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Plane - box: 4 contacts, the 4 corners below the box centre along the plane normal
    (exactly MuJoCo's ``mjc_PlaneBox``: corners ``dist`` apart from the plane; a box resting flat
    gets its 4 bottom corners)."""
    n = mat1[:, 2]
    # (8, 3) corners relative to the box centre
    corners = (jnp.asarray(_BOX_SIGNS, size2.dtype) * size2[:3]) @ mat2.T
    ldist = corners @ n
    _, idx = jax.lax.top_k(-ldist, 4)
    c = corners[idx]
    ld = ldist[idx]
    dist = _dot(pos2 - pos1, n) + ld
    pos = pos2 + c - n * (dist / 2)[:, None]
    con = _contact(dist, pos, jnp.broadcast_to(n, (4, 3)))
    return _mask(con, ld <= 0)


def collide_plane_cylinder(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
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
    side = _normalize(_cross(vec, axis), mat2[:, 1]) * (r * float(np.sqrt(3.0)) / 2)
    p1 = pos2 + vec + axis
    p2 = pos2 + vec - axis
    p3 = pos2 + side + axis - vec / 2
    p4 = pos2 - side + axis - vec / 2
    dist = jnp.stack([d1, d2, d3, d3])
    pts = jnp.stack([p1, p2, p3, p4]) - n * (dist / 2)[:, None]
    return _contact(dist, pts, jnp.broadcast_to(n, (4, 3)))


def collide_plane_ellipsoid(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
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
    fallback = _normalize(_cross(mat1[:, 2], mat2[:, 2]), jnp.array([1.0, 0.0, 0.0], d.dtype))
    n = _normalize(d, fallback)
    dist = _safe_norm(d) - r1 - r2
    pos = p1 + n * (r1 + dist / 2)
    return _contact(dist, pos, n)


def collide_sphere_sphere(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Sphere - sphere: 1 contact, exact (coincident centres: the normal is the cross product of
    the z axes, or x, as MuJoCo)."""
    return _sphere_sphere(pos1, size1[0], mat1, pos2, size2[0], mat2)


def _closest_on_segment(p, c, axis):
    """Point of the segment ``c +- axis`` closest to ``p`` (Ericson 5.1.2)."""
    x = _clip(_safe_div(_dot(p - c, axis), _dot(axis, axis)), -1.0, 1.0)
    return c + x * axis


def collide_sphere_capsule(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
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
    x1 = _clip(x1, -1.0, 1.0)
    x1 = jnp.where(
        x2 > 1,
        _clip(_safe_div(u - mb, ma), -1, 1),
        jnp.where(x2 < -1, _clip(_safe_div(u + mb, ma), -1, 1), x1),
    )
    x2 = _clip(x2, -1.0, 1.0)
    # parallel: x1 = +1 and -1, each with the closest x2
    xp2a = _clip(_safe_div(v - mb, mc), -1, 1)
    xp2b = _clip(_safe_div(v + mb, mc), -1, 1)
    q1 = jnp.where(parallel, p1 + a1, p1 + x1 * a1)
    q2 = jnp.where(parallel, p2 + xp2a * a2, p2 + x2 * a2)
    return q1, q2, parallel, (p1 - a1, p2 + xp2b * a2)


def collide_capsule_capsule(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
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


def collide_sphere_box(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Sphere - box: 1 contact, exact. Centre outside the box: the closest point of the box
    (Ericson 5.1.4); centre inside: the nearest face, normal along its axis."""
    r = size1[0]
    h = size2[:3]
    c = mat2.T @ (pos1 - pos2)  # sphere centre in box coordinates
    q = _clip(c, -h, h)
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


def _point_box(p, h, pos2, mat2):
    """Signed distance from the point ``p`` (world) to the box ``h`` at (pos2, mat2)."""
    c = mat2.T @ (p - pos2)
    q = _clip(c, -h, h)
    return jnp.where(jnp.any(jnp.abs(c) > h), _safe_norm(q - c), jnp.max(jnp.abs(c) - h))


def _min_on_segment(sdf, c, axis, iters=64):
    """``t`` in [-1, 1] minimising the convex function ``sdf(c + t axis)`` (golden-section
    search, Kiefer 1953; a signed distance to a convex set is convex along a line). The search
    sees no gradient: by the envelope theorem the gradient of the minimum is that of ``sdf`` at
    the minimiser."""
    c, axis = jax.lax.stop_gradient(c), jax.lax.stop_gradient(axis)
    g = float(np.sqrt(5.0) - 1) / 2
    one = jnp.ones((), c.dtype)

    def body(_, ab):
        a, b = ab
        x1, x2 = b - g * (b - a), a + g * (b - a)
        left = sdf(c + x1 * axis) < sdf(c + x2 * axis)
        return jnp.where(left, a, x1), jnp.where(left, x2, b)

    a, b = jax.lax.fori_loop(0, iters, body, (-one, one))
    ts = jnp.stack([(a + b) / 2, -one, one])
    vals = jax.vmap(lambda t: sdf(c + t * axis))(ts)
    return ts[jnp.argmin(vals)]


def _best_t(ts, value):
    """The candidate of ``ts`` in [-1, 1] with the least ``value`` (differentiable in the
    candidates: inside a convex polytope the minimum sits at a kink, where the envelope theorem
    of :func:`_min_on_segment` does not hold and the minimiser moves with the pose)."""
    ts = _clip(ts, -1.0, 1.0)
    return ts[jnp.argmin(jax.vmap(value)(ts))]


def _min_max_lines(m, b):
    """``t`` in [-1, 1] minimising ``max_k m_k t + b_k`` (a 1-D linear programme: an end or the
    crossing of two lines)."""
    i, j = np.triu_indices(m.shape[0], 1)
    dm = m[i] - m[j]
    cross = jnp.where(jnp.abs(dm) > 1e-12, _safe_div(b[j] - b[i], dm, 1e-12), -1.0)
    one = jnp.ones((1,), m.dtype)
    return _best_t(jnp.concatenate([-one, one, cross]), lambda t: jnp.max(m * t + b))


def _min_in_cylinder(c, a, r, h):
    """``t`` in [-1, 1] minimising ``max(|c_xy + t a_xy| - r, |c_z + t a_z| - h)`` (cylinder
    coordinates): the ends, the minimisers of each term and the crossings of the radial term
    with each cap (roots of a quadratic)."""
    axy2 = _dot(a[:2], a[:2])
    cand = [jnp.ones((), c.dtype), -jnp.ones((), c.dtype)]
    cand.append(_safe_div(-_dot(c[:2], a[:2]), axy2, 1e-12))
    cand.append(_safe_div(-c[2], a[2], 1e-12))
    for s in (1.0, -1.0):  # |c_xy + t a_xy| = s z(t) - h + r
        k0, k1 = s * c[2] - h + r, s * a[2]
        qa = axy2 - k1 * k1
        qb = 2 * (_dot(c[:2], a[:2]) - k1 * k0)
        qc = _dot(c[:2], c[:2]) - k0 * k0
        disc = qb * qb - 4 * qa * qc
        sq = jnp.where(disc > 0, jnp.sqrt(jnp.where(disc > 0, disc, 1.0)), 0.0)
        lin = _safe_div(-qc, qb, 1e-12)
        for sg in (1.0, -1.0):
            root = _safe_div(-qb + sg * sq, 2 * qa, 1e-12)
            cand.append(jnp.where(jnp.abs(qa) > 1e-12, root, lin))

    def value(t):
        p = c + t * a
        return jnp.maximum(_safe_norm(p[:2]) - r, jnp.abs(p[2]) - h)

    return _best_t(jnp.stack(cand), value)


def _end_slots(contact_at, t, tol=1e-6):
    """The segment's two end spheres as extra slots (dropped where the deepest slot is at that
    end, so that no contact is given twice)."""
    ends = [contact_at(jnp.asarray(s, t.dtype)) for s in (1.0, -1.0)]
    ends[0] = _mask(ends[0], t < 1 - tol)
    ends[1] = _mask(ends[1], t > -1 + tol)
    return ends


def collide_capsule_box(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Capsule - box: 3 slots. Slot 0: the point of the capsule's segment nearest the box
    (deepest when it touches: the minimum of the box's signed distance along the segment,
    golden-section search) as a sphere - box contact; slots 1, 2: the segment's end spheres
    against the box (so that a capsule lying on a face rests on both ends), dropped where they
    repeat slot 0. MuJoCo's ``mjc_CapsuleBox`` returns the same deepest contact (where the
    segment does not enter the box) and a heuristic second point."""
    h = size2[:3]
    axis = mat1[:, 2] * size1[1]
    t = _min_on_segment(lambda p: _point_box(p, h, pos2, mat2), pos1, axis)
    # the segment enters the box: the exact minimiser of max_i |c_i(t)| - h_i
    c, a = mat2.T @ (pos1 - pos2), mat2.T @ axis
    sgn = jnp.array([1.0, -1.0], c.dtype)[:, None]
    t_in = _min_max_lines((sgn * a).reshape(-1), (sgn * c - h).reshape(-1))
    t = jnp.where(_point_box(pos1 + t * axis, h, pos2, mat2) < 0, t_in, t)

    def at(s):
        return collide_sphere_box(size1, pos1 + s * axis, mat1, size2, pos2, mat2)

    return _concat(at(t), *_end_slots(at, t))


# ------------------------------------------------------------------------------ cylinders


def _sphere_cylinder(c, r, mat1, size2, pos2, mat2):
    """Exact sphere (centre c, radius r) - cylinder contact (closest point of the solid
    cylinder; centre inside: the nearest of side and caps)."""
    rc, h = size2[0], size2[1]
    q = mat2.T @ (c - pos2)
    rho = _safe_norm(q[:2])
    radial = _normalize(q[:2], jnp.array([1.0, 0.0], q.dtype))
    inside = (rho < rc) & (jnp.abs(q[2]) < h)
    # outside: the closest point of the solid cylinder
    cl = jnp.concatenate([radial * jnp.minimum(rho, rc), _clip(q[2:], -h, h)])
    d = cl - q
    dn = _safe_norm(d)
    # inside: nearest of the side (normal radial) and the caps (normal +-z)
    side_depth, cap_depth = rc - rho, h - jnp.abs(q[2])
    sz = jnp.where(q[2] >= 0, 1.0, -1.0)
    n_side = jnp.concatenate([-radial, jnp.zeros(1, q.dtype)])
    n_cap = jnp.array([0.0, 0.0, 1.0], q.dtype) * -sz
    use_side = side_depth < cap_depth
    n_in = jnp.where(use_side, n_side, n_cap)
    dist_in = -jnp.minimum(side_depth, cap_depth) - r
    n_loc = jnp.where(inside, n_in, _normalize(d, n_in))
    dist = jnp.where(inside, dist_in, dn - r)
    pos_loc = q + n_loc * (r + dist / 2)
    return _contact(dist, pos2 + mat2 @ pos_loc, mat2 @ n_loc)


def _point_cylinder(p, size2, pos2, mat2):
    return _sphere_cylinder(p, 0.0, None, size2, pos2, mat2).dist[0]


def collide_sphere_cylinder(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Sphere - cylinder: 1 contact, exact (closest point of the solid cylinder, Ericson 5.1)."""
    return _sphere_cylinder(pos1, size1[0], mat1, size2, pos2, mat2)


def collide_capsule_cylinder(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Capsule - cylinder: 3 slots as :func:`collide_capsule_box`: the segment point nearest the
    cylinder (exact signed distance minimised along the segment) and the two end spheres."""
    axis = mat1[:, 2] * size1[1]
    t = _min_on_segment(lambda p: _point_cylinder(p, size2, pos2, mat2), pos1, axis)
    t_in = _min_in_cylinder(mat2.T @ (pos1 - pos2), mat2.T @ axis, size2[0], size2[1])
    t = jnp.where(_point_cylinder(pos1 + t * axis, size2, pos2, mat2) < 0, t_in, t)

    def at(s):
        return _sphere_cylinder(pos1 + s * axis, size1[0], mat1, size2, pos2, mat2)

    return _concat(at(t), *_end_slots(at, t))


# ------------------------------------------------------------------------------ convex polytopes


class Hull(NamedTuple):
    """A convex polytope in geom coordinates (a pytree of arrays; build it with
    :func:`hull_from_points` or :func:`box_hull`):

    * ``vertices`` (V, 3) and the outward unit ``normals`` (F, 3) of its faces;
    * ``faces`` (F, P) int: each face's vertices counter-clockwise about its normal, padded to P
      by repeating the last one;
    * ``edges`` (E, 2) int and ``edge_faces`` (E, 2) int: each edge's end vertices and its two
      faces.
    """

    # numpy where static (hull_from_points: the topology fixed at compile time)
    vertices: jax.Array | np.ndarray
    normals: jax.Array | np.ndarray
    faces: jax.Array | np.ndarray
    edges: jax.Array | np.ndarray
    edge_faces: jax.Array | np.ndarray


def hull_from_points(points: npt.ArrayLike, tol: float = 1e-9) -> Hull:
    """The convex hull of ``points`` (N, 3) as a :class:`Hull`, coplanar facets merged into
    polygons (scipy's Qhull; a box mesh gives 6 quadrilaterals, not 12 triangles). Static numpy
    arrays: the topology is fixed at compile time."""
    from scipy.spatial import ConvexHull

    pts = np.asarray(points, float).reshape(-1, 3)
    if pts.shape[0] < 4 or not np.all(np.isfinite(pts)):
        raise ValueError(f"hull_from_points: need >= 4 finite points (N, 3), got {pts.shape}")
    h = ConvexHull(pts)
    scale = max(float(np.ptp(pts, axis=0).max()), 1e-300)
    keep = np.asarray(h.vertices)
    remap = {int(v): k for k, v in enumerate(keep)}
    verts = pts[keep]
    # group the triangles of one plane
    groups = []
    for s_idx, eq in enumerate(h.equations):
        for g in groups:
            if np.abs(g[0][:3] - eq[:3]).max() < tol * 10 and abs(g[0][3] - eq[3]) < tol * scale:
                g[1].update(int(v) for v in h.simplices[s_idx])
                break
        else:
            groups.append((eq, set(int(v) for v in h.simplices[s_idx])))
    normals, faces = [], []
    for eq, vs in groups:
        n = eq[:3] / np.linalg.norm(eq[:3])
        idx = np.array(sorted(vs))
        p = pts[idx]
        c = p.mean(axis=0)
        u = p[0] - c
        u = u / np.linalg.norm(u)
        w = np.cross(n, u)
        ang = np.arctan2((p - c) @ w, (p - c) @ u)
        order = [remap[int(k)] for k in idx[np.argsort(ang)]]  # counter-clockwise about n
        normals.append(n)
        faces.append(order)
    pmax = max(len(f) for f in faces)
    face_arr = np.array([f + [f[-1]] * (pmax - len(f)) for f in faces], dtype=np.int32)
    edge_map = {}
    for fi, f in enumerate(faces):
        for a, b in zip(f, f[1:] + f[:1], strict=True):
            edge_map.setdefault((min(a, b), max(a, b)), []).append(fi)
    bad = [e for e, fs in edge_map.items() if len(fs) != 2]
    if bad:
        raise ValueError(f"hull_from_points: hull edges {bad[:3]} do not join two faces")
    edges = np.array(list(edge_map), dtype=np.int32)
    edge_faces = np.array(list(edge_map.values()), dtype=np.int32)
    return Hull(verts, np.array(normals), face_arr, edges, edge_faces)


@functools.cache
def _unit_box() -> Hull:
    """The box of half-sizes 1 as a :class:`Hull`, built on first use (scipy's Qhull is not
    loaded by ``import jaxdyn``)."""
    return hull_from_points(_BOX_SIGNS)


def box_hull(size: ArrayLike) -> Hull:
    """The box of half-sizes ``size`` (3,) as a :class:`Hull` (vertices scale with ``size``,
    differentiably)."""
    size = jnp.asarray(size)
    unit = _unit_box()
    return unit._replace(vertices=jnp.asarray(unit.vertices, size.dtype) * size[:3])


def _jnp_hull(h):
    return Hull(*(jnp.asarray(x) for x in h))


def _world(hull, pos, mat):
    v = jnp.asarray(hull.vertices, pos.dtype) @ mat.T + pos
    n = jnp.asarray(hull.normals, pos.dtype) @ mat.T
    return v, n


def _select(pts, d, valid, k):
    """``k`` of the candidate contacts: the deepest, then farthest-point sampling (each next
    point the farthest from those chosen), which keeps the corners of a contact patch. Returns
    indices (k,) and whether each slot holds a distinct valid point."""
    scale = jnp.max(jnp.where(valid[:, None], jnp.abs(pts), 0.0)) + 1.0
    tiny = (1e3 * _eps(pts) * scale) ** 2
    i0 = jnp.argmin(jnp.where(valid, d, jnp.inf))
    idx, ok = [i0], [jnp.any(valid)]
    mind = jnp.where(valid, _dot(pts - pts[i0], pts - pts[i0]), -1.0)
    for _ in range(k - 1):
        i = jnp.argmax(mind)
        idx.append(i)
        ok.append(mind[i] > tiny)
        mind = jnp.minimum(mind, _dot(pts - pts[i], pts - pts[i]))
    return jnp.stack(idx), jnp.stack(ok)


def _face_manifold(vR, nR, facesR, f, vI, nI, facesI, margin, k, tol):
    """Contacts of the incident face of polytope I on the reference face ``f`` of polytope R:
    the incident polygon clipped by the reference face's side planes (Sutherland-Hodgman,
    Ericson 8.3.4), written order-free as its possible vertices: incident vertices inside the
    reference prism, reference vertices inside the incident prism (projected onto the incident
    face) and crossings of their edges. Returns points on I's surface, their signed distances to
    the reference plane and the reference normal."""
    n = nR[f]
    ref = vR[facesR[f]]  # (P, 3)
    g = jnp.argmin(nI @ n)  # the incident face: the most anti-parallel
    m = nI[g]
    inc = vI[facesI[g]]  # (Q, 3)
    r0 = ref[0]
    re = _next(ref) - ref
    rs = _cross(re, n)  # outward side-plane normals of the reference face (P, 3)
    ie = _next(inc) - inc
    # side planes of the incident face projected along n (counter-clockwise about m ~ -n)
    is_ = _cross(n, ie)

    def inside_ref(x):  # x (..., 3) -> (...)
        s = jnp.einsum("pk,...pk->...p", rs, x[..., None, :] - ref)
        return jnp.all(s <= tol * _safe_norm(rs), axis=-1)

    # incident vertices in the reference prism
    ok_q = inside_ref(inc)
    # reference vertices inside the projected incident face, moved along n onto its plane
    s_r = jnp.einsum("qk,pqk->pq", is_, ref[:, None, :] - inc[None])
    ok_r = jnp.all(s_r <= tol * _safe_norm(is_), axis=-1)
    lam = _safe_div((inc[0] - ref) @ m, _dot(m, n))
    p_r = ref + lam[:, None] * n
    ok_r = ok_r & (jnp.abs(_dot(m, n)) > 1e-6)
    # crossings of incident edges with reference side planes
    den = rs @ ie.T  # (P, Q)
    t = _safe_div(jnp.einsum("pk,pqk->pq", rs, ref[:, None, :] - inc[None]), den)
    x = inc[None] + t[..., None] * ie[None]  # (P, Q, 3)
    ok_x = (t >= 0) & (t <= 1) & (jnp.abs(den) > tol) & inside_ref(x)
    # I's deepest vertex along n (the separating-axis depth): a candidate where the clipped
    # face misses it (deep or skewed overlap), so that the deepest slot has the true depth
    ds = (vI - r0) @ n
    sup = vI[jnp.argmin(ds)]
    pts = jnp.concatenate([inc, p_r, x.reshape(-1, 3), sup[None]])
    d = (pts - r0) @ n
    inside = jnp.concatenate([ok_q, ok_r, ok_x.reshape(-1)])
    dmin = jnp.min(jnp.where(inside, d[:-1], jnp.inf))
    inside = jnp.concatenate([inside, (dmin > d[-1] + tol)[None]])
    dmin = jnp.minimum(dmin, d[-1])
    valid = inside & ((d <= margin) | (d <= dmin + tol))
    idx, ok = _select(pts, d, valid, k)
    return pts[idx], d[idx], ok, n


def _polytope_polytope(hA, posA, matA, hB, posB, matB, margin, k):
    """Separating-axis test between two convex polytopes (Gottschalk et al. 1996; Ericson 5.2.1)
    on the face normals of both and the cross products of edge pairs that make a face of the
    Minkowski difference (Gregorius 2013, so that each edge axis is a supporting one). The axis
    of least penetration (largest separation; faces preferred on ties) gives either a face
    contact (up to ``k`` points, :func:`_face_manifold`) or one edge-edge contact at the closest
    points of the two edges."""
    hA, hB = _jnp_hull(hA), _jnp_hull(hB)
    vA, nA = _world(hA, posA, matA)
    vB, nB = _world(hB, posB, matB)
    cA, cB = jnp.mean(vA, axis=0), jnp.mean(vB, axis=0)
    scale = jnp.maximum(jnp.max(jnp.abs(vA - cA)), jnp.max(jnp.abs(vB - cB)))
    tol = 1e3 * _eps(vA) * scale
    # face axes: separation of B from face f of A, and of A from face f of B
    offA = _dot(nA, vA[hA.faces[:, 0]])
    sepA = jnp.min(nA @ vB.T, axis=1) - offA
    offB = _dot(nB, vB[hB.faces[:, 0]])
    sepB = jnp.min(nB @ vA.T, axis=1) - offB
    # edge axes
    a0, a1 = vA[hA.edges[:, 0]], vA[hA.edges[:, 1]]
    b0, b1 = vB[hB.edges[:, 0]], vB[hB.edges[:, 1]]
    eA, eB = a1 - a0, b1 - b0
    na, nb = nA[hA.edge_faces[:, 0]], nA[hA.edge_faces[:, 1]]
    nc, nd = -nB[hB.edge_faces[:, 0]], -nB[hB.edge_faces[:, 1]]
    bxa = _cross(nb, na)
    dxc = _cross(nd, nc)
    cba = nc @ bxa.T  # (EB, EA)
    dba = nd @ bxa.T
    adc = na @ dxc.T  # (EA, EB)
    bdc = nb @ dxc.T
    mink = (cba.T * dba.T < 0) & (adc * bdc < 0) & (cba.T * bdc > 0)
    ax = _cross(eA[:, None, :], eB[None, :, :])  # (EA, EB, 3)
    la = _safe_norm(ax)
    lref = _safe_norm(eA)[:, None] * _safe_norm(eB)[None, :]
    nonpar = la > 1e-6 * lref
    u = _safe_div(ax, la[..., None])
    u = jnp.where((_dot(u, a0[:, None, :] - cA) < 0)[..., None], -u, u)
    sepE = _dot(u, b0[None] - a0[:, None])
    sepE = jnp.where(mink & nonpar, sepE, -NO_CONTACT)
    fA, fB = jnp.argmax(sepA), jnp.argmax(sepB)
    sA, sB = sepA[fA], sepB[fB]
    iE = jnp.argmax(sepE.reshape(-1))
    sE = sepE.reshape(-1)[iE]
    ia, ib = iE // sepE.shape[1], iE % sepE.shape[1]
    use_edge = sE > jnp.maximum(sA, sB) + tol
    ref_a = sA >= sB - tol

    # face contacts, reference face on A or on B
    if all(x.shape == y.shape for x, y in zip(hA, hB, strict=True)):  # one manifold, selected
        sel = [jnp.where(ref_a, x, y) for x, y in ((vA, vB), (nA, nB), (hA.faces, hB.faces))]
        oth = [jnp.where(ref_a, y, x) for x, y in ((vA, vB), (nA, nB), (hA.faces, hB.faces))]
        f = jnp.where(ref_a, fA, fB)
        (vR, nR, facesR), (vI, nI, facesI) = sel, oth
        pr, dr, face_ok, nr = _face_manifold(vR, nR, facesR, f, vI, nI, facesI, margin, k, tol)
        face_pts = pr - nr * (dr / 2)[:, None]
        face_d = dr
        face_n = jnp.where(ref_a, nr, -nr)
    else:
        pa, da, oka, n_a = _face_manifold(vA, nA, hA.faces, fA, vB, nB, hB.faces, margin, k, tol)
        pb, db, okb, n_b = _face_manifold(vB, nB, hB.faces, fB, vA, nA, hA.faces, margin, k, tol)
        face_pts = jnp.where(ref_a, pa - n_a * (da / 2)[:, None], pb - n_b * (db / 2)[:, None])
        face_d = jnp.where(ref_a, da, db)
        face_ok = jnp.where(ref_a, oka, okb)
        face_n = jnp.where(ref_a, n_a, -n_b)
    # edge contact
    q1, q2, _, _ = _segment_segment(
        (a0[ia] + a1[ia]) / 2, eA[ia] / 2, (b0[ib] + b1[ib]) / 2, eB[ib] / 2
    )
    edge_pos = (q1 + q2) / 2
    first = jnp.arange(k) == 0
    dist = jnp.where(use_edge, jnp.where(first, sE, NO_CONTACT), face_d)
    ok = jnp.where(use_edge, first, face_ok)
    pos = jnp.where(use_edge, jnp.broadcast_to(edge_pos, (k, 3)), face_pts)
    normal = jnp.broadcast_to(jnp.where(use_edge, u[ia, ib], face_n), (k, 3))
    return _mask(Contact(dist, pos, normal), ok)


def _as_hull(x):
    if isinstance(x, Hull):
        return x
    raise TypeError(f"a mesh geom is described by a Hull (hull_from_points), got {type(x)}")


def collide_box_box(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Box - box: 8 slots, by the separating-axis test (15 axes; Gottschalk et al. 1996) with a
    clipped face-face manifold (a box resting flat on another gets the corners of the overlap
    polygon, up to 8) or one edge-edge contact; see :func:`_polytope_polytope`."""
    return _polytope_polytope(box_hull(size1), pos1, mat1, box_hull(size2), pos2, mat2, margin, 8)


def collide_box_mesh(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Box - convex mesh (``size2`` a :class:`Hull`): 8 slots, as :func:`collide_box_box`."""
    return _polytope_polytope(box_hull(size1), pos1, mat1, _as_hull(size2), pos2, mat2, margin, 8)


def collide_mesh_mesh(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Convex mesh - convex mesh (``size1``, ``size2`` :class:`Hull` s): 8 slots, separating
    axes on the hulls with a clipped face manifold (:func:`_polytope_polytope`)."""
    h1, h2 = _as_hull(size1), _as_hull(size2)
    return _polytope_polytope(h1, pos1, mat1, h2, pos2, mat2, margin, 8)


def collide_plane_mesh(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Plane - convex mesh: 4 slots: the deepest vertex, then the vertices within ``margin`` of
    the plane chosen by farthest-point sampling (a face lying on the plane gets its corners)."""
    hull = _jnp_hull(_as_hull(size2))
    n = mat1[:, 2]
    v, _ = _world(hull, pos2, mat2)
    d = (v - pos1) @ n
    valid = (d <= margin) | (d <= jnp.min(d))
    idx, ok = _select(v, d, valid, 4)
    pos = v[idx] - n * (d[idx] / 2)[:, None]
    return _mask(Contact(d[idx], pos, jnp.broadcast_to(n, (4, 3))), ok)


def _point_hull(p, hull, pos, mat):
    """Signed distance from ``p`` to the hull and the hull's closest surface point: outside,
    the nearest point of its faces (each face: the projection if inside the polygon, else the
    nearest point of its edges); inside, the face of least depth."""
    hull = _jnp_hull(hull)
    v, nrm = _world(hull, pos, mat)
    poly = v[hull.faces]  # (F, P, 3)
    plane = _dot(nrm, p - poly[:, 0])  # (F,)
    proj = p - plane[:, None] * nrm
    e = _next(poly, 1) - poly
    side = _cross(e, nrm[:, None, :])
    ins = jnp.all(_dot(side, proj[:, None, :] - poly) <= 0, axis=1)
    t = _clip(_safe_div(_dot(p - poly, e), _dot(e, e)), 0.0, 1.0)
    on_e = poly + t[..., None] * e  # (F, P, 3)
    de = _dot(on_e - p, on_e - p)
    j = jnp.argmin(de, axis=1)
    on_edge = jnp.take_along_axis(on_e, j[:, None, None], axis=1)[:, 0]
    cl = jnp.where(ins[:, None], proj, on_edge)  # (F, 3)
    d2 = _dot(cl - p, cl - p)
    fo = jnp.argmin(d2)
    fi = jnp.argmax(plane)
    inside = plane[fi] <= 0
    dist = jnp.where(inside, plane[fi], _safe_norm(cl[fo] - p))
    closest = jnp.where(inside, proj[fi], cl[fo])
    return dist, closest, jnp.where(inside, -nrm[fi], _normalize(cl[fo] - p, -nrm[fi]))


def _sphere_hull(c, r, hull, pos, mat):
    dist, _, n = _point_hull(c, hull, pos, mat)
    dist = dist - r
    return _contact(dist, c + n * (r + dist / 2), n)


def collide_sphere_mesh(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Sphere - convex mesh: 1 contact, exact (nearest point of the hull's faces; centre inside:
    the face of least depth)."""
    return _sphere_hull(pos1, size1[0], _as_hull(size2), pos2, mat2)


def collide_capsule_mesh(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
    """Capsule - convex mesh: 3 slots as :func:`collide_capsule_box` (the segment point nearest
    the hull and the two end spheres)."""
    hull = _as_hull(size2)
    axis = mat1[:, 2] * size1[1]
    t = _min_on_segment(lambda p: _point_hull(p, hull, pos2, mat2)[0], pos1, axis)
    # the segment enters the hull: the exact minimiser of max_f n_f . x(t) - d_f
    v, nrm = _world(_jnp_hull(hull), pos2, mat2)
    off = _dot(nrm, v[jnp.asarray(hull.faces)[:, 0]])
    t_in = _min_max_lines(nrm @ axis, nrm @ pos1 - off)
    t = jnp.where(_point_hull(pos1 + t * axis, hull, pos2, mat2)[0] < 0, t_in, t)

    def at(s):
        return _sphere_hull(pos1 + s * axis, size1[0], hull, pos2, mat2)

    return _concat(at(t), *_end_slots(at, t))


# ------------------------------------------------------------------------------ curved hulls

#: sides of the prism that stands for a cylinder against boxes, meshes and cylinders
CYLINDER_SIDES = 16


@functools.cache
def _unit_cylinder(n: int) -> Hull:
    """The prism of ``n`` sides circumscribing the cylinder of radius 1 and half-height 1,
    built once per ``n`` on first use."""
    a = 2 * np.pi * (np.arange(n) + 0.5) / n
    # circumscribed polygon: its edges touch the circle, so it never misses a contact; the
    # radial error is at most r (1 / cos(pi / n) - 1) (2.0 % of r for n = 16)
    rr = 1 / np.cos(np.pi / n)
    ring = np.column_stack([rr * np.cos(a), rr * np.sin(a), np.zeros(n)])
    return hull_from_points(np.concatenate([ring + [0, 0, 1], ring - [0, 0, 1]]))


def _unit_sphere_points(level=2):
    """Vertices of an icosphere (icosahedron subdivided ``level`` times), on the unit sphere."""
    t = (1 + 5**0.5) / 2
    v = [[-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0], [0, -1, t], [0, 1, t], [0, -1, -t]]
    v += [[0, 1, -t], [t, 0, -1], [t, 0, 1], [-t, 0, -1], [-t, 0, 1]]
    pts = np.array(v, float)
    pts /= np.linalg.norm(pts, axis=1, keepdims=True)
    from scipy.spatial import ConvexHull

    for _ in range(level):
        tri = ConvexHull(pts).simplices
        mids = [
            (pts[a] + pts[b]) / 2
            for f in tri
            for a, b in ((f[0], f[1]), (f[1], f[2]), (f[2], f[0]))
        ]
        pts = np.unique(np.round(np.concatenate([pts, np.array(mids)]), 12), axis=0)
        pts /= np.linalg.norm(pts, axis=1, keepdims=True)
    return pts


@functools.cache
def _unit_sphere() -> Hull:
    """The icosphere polytope inscribed in the unit sphere, built on first use."""
    return hull_from_points(_unit_sphere_points())


def cylinder_hull(size: ArrayLike, sides: int | None = None) -> Hull:
    """The cylinder ``[r, h]`` as a prism circumscribing it (:data:`CYLINDER_SIDES` sides),
    a :class:`Hull` scaled differentiably by ``size`` (an approximation; the pair functions
    use the exact cylinder)."""
    size = jnp.asarray(size)
    u = _unit_cylinder(CYLINDER_SIDES if sides is None else int(sides))
    scale = jnp.stack([size[0], size[0], size[1]])
    return u._replace(vertices=jnp.asarray(u.vertices, size.dtype) * scale)


def ellipsoid_hull(size: ArrayLike) -> Hull:
    """The ellipsoid ``[a, b, c]`` as the inscribed polytope of a subdivided icosahedron (162
    vertices) scaled by the semi-axes (a linear map keeps a hull's faces; the normals are
    recomputed). Its surface lies within 1.8 % of the largest semi-axis inside the ellipsoid (an
    approximation; the pair functions use the exact shape)."""
    size = jnp.asarray(size)[:3]
    unit = _unit_sphere()
    n = jnp.asarray(unit.normals, size.dtype) / size  # normals map by S^-1
    n = n / _safe_norm(n)[:, None]
    return unit._replace(vertices=jnp.asarray(unit.vertices, size.dtype) * size, normals=n)


def _shape_hull(t, size):
    return {"box": box_hull, "cylinder": cylinder_hull, "ellipsoid": ellipsoid_hull}.get(
        t, _as_hull
    )(size)


# ------------------------------------------------------------------------------ GJK / EPA pairs


def _local_support(t, size, dt):
    """A geom's core as a support function in its own frame (local direction ``u`` -> the
    core's farthest point along ``u``; MuJoCo's ``mjc_<type>Support`` of
    engine_collision_convex.c), an interior point and the radius swept about the core: a sphere
    is its centre and radius, a capsule its segment and radius, the other shapes themselves
    (radius 0)."""
    zero = jnp.zeros((), dt)
    origin = jnp.zeros(3, dt)
    if t == "sphere":
        return (lambda u: origin), origin, size[0]
    if t == "capsule":
        ax = jnp.zeros(3, dt).at[2].set(size[1])
        return (lambda u: jnp.where(u[2] >= 0, ax, -ax)), origin, size[0]
    if t == "ellipsoid":
        s = size[:3]
        return (lambda u: s * _normalize(s * u, jnp.zeros_like(u).at[0].set(1.0))), origin, zero
    if t == "cylinder":
        r, h = size[0], size[1]

        def cyl(u):
            rad = r * _normalize(u[:2], jnp.zeros_like(u[:2]))
            return jnp.stack([rad[0], rad[1], jnp.where(u[2] >= 0, h, -h)])

        return cyl, origin, zero
    if t == "box":
        s = size[:3]
        return (lambda u: jnp.where(u >= 0, s, -s)), origin, zero
    if t == "mesh":
        v = jnp.asarray(_as_hull(size).vertices, dt)
        return (lambda u: v[jnp.argmax(v @ u)]), jnp.mean(v, axis=0), zero
    raise NotImplementedError(t)  # pragma: no cover - the pairs below are the only callers


def _core_support(t, size, pos, mat):
    """:func:`_local_support` in world coordinates: the support function (world direction ->
    world point), the interior point, the radius, and ``rigid(x, d)``: the core's point ``x``
    (a witness point with outward direction ``d``, values only) carried with the geom's pose and
    size (translated and rotated with the geom, moved as the support point along ``d`` moves
    with the size), the point whose motion differentiates the distance when the support along
    ``d`` is a whole face or edge."""
    sg = jax.lax.stop_gradient
    loc, c, r = _local_support(t, size, pos.dtype)

    def sup(d):
        return pos + mat @ loc(d @ mat)

    def rigid(x, d):
        u = sg(d @ mat)
        q = loc(u)
        return pos + mat @ (sg(mat.T @ (x - pos)) + q - sg(q))

    return sup, pos + mat @ c, r, rigid


def _convex_pair(t1, t2, name="collide", epa_iters=None):
    def fn(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
        s1, c1, r1, g1 = _core_support(t1, size1, pos1, mat1)
        s2, c2, r2, g2 = _core_support(t2, size2, pos2, mat2)
        ei = None if epa_iters is None else epa_iters(pos1.dtype)
        d, p, n = convex_pair(
            lambda u: (s1(u), s2(-u)),
            c1,
            c2,
            r1,
            r2,
            epa_iters=ei,
            rigid=lambda xa, xb, u: (g1(xa, u), g2(xb, -u)),
        )
        return _contact(d, p, n)

    fn.__name__ = f"{name}_{t1}_{t2}"
    fn.__doc__ = (
        f"{t1.capitalize()} - {t2}: 1 contact, exact: GJK distance / EPA penetration on the "
        "shapes' support functions (:func:`jaxdyn.sim.gjk.convex_pair`), MuJoCo's "
        "``mjc_Convex`` with ``multiccd`` disabled (one contact)."
    )
    return fn


collide_sphere_ellipsoid = _convex_pair("sphere", "ellipsoid")
collide_capsule_ellipsoid = _convex_pair("capsule", "ellipsoid")
collide_ellipsoid_ellipsoid = _convex_pair("ellipsoid", "ellipsoid")
collide_ellipsoid_cylinder = _convex_pair("ellipsoid", "cylinder")
collide_ellipsoid_box = _convex_pair("ellipsoid", "box")
collide_ellipsoid_mesh = _convex_pair("ellipsoid", "mesh")


#: the cylinder pairs' exact deepest contact (one contact, GJK / EPA; :func:`_convex_pair`)
exact_cylinder_cylinder = _convex_pair("cylinder", "cylinder", "exact")
exact_cylinder_box = _convex_pair("cylinder", "box", "exact")
exact_cylinder_mesh = _convex_pair("cylinder", "mesh", "exact")

#: MuJoCo's ``multiccd`` constants (``mjc_Convex``): the perturbation angle (rad) and the
#: distinctness tolerance relative to the smaller bounding radius
MULTICCD_ANGLE = 1e-3
MULTICCD_TOL = 1e-3


def _rbound(t, size):
    """MuJoCo's ``geom_rbound`` of a cylinder, box or convex mesh (its frame's origin)."""
    if t == "cylinder":
        return jnp.sqrt(size[0] ** 2 + size[1] ** 2)
    if t == "box":
        return jnp.sqrt(_dot(size[:3], size[:3]))
    v = jnp.asarray(_as_hull(size).vertices)
    return jnp.max(jnp.sqrt(jnp.sum(v * v, axis=1)))


def mujoco_tangents(n, tangent=None):
    """MuJoCo's contact tangents ``(s1, s2)`` of the unit normals ``n (nc, 3)`` (its
    ``mju_makeFrame``): ``s1`` the given ``tangent (nc, 3)`` (:attr:`ContactFrames.tangent`)
    where ``|tangent|^2 >= 0.25``, else (and with ``tangent=None``) ``e_y``, or ``e_z`` where
    ``|n_y| >= 0.5``; made orthogonal to ``n`` and normalised (``e_x`` where nothing is left:
    a tangent along the normal); ``s2 = n x s1``: the axes of MuJoCo's pyramidal cones."""
    ey = jnp.broadcast_to(jnp.asarray([0.0, 1.0, 0.0], n.dtype), n.shape)
    ez = jnp.broadcast_to(jnp.asarray([0.0, 0.0, 1.0], n.dtype), n.shape)
    a = jnp.where(((n[:, 1] < 0.5) & (n[:, 1] > -0.5))[:, None], ey, ez)
    if tangent is not None:
        given = jnp.sum(tangent * tangent, -1) >= 0.25
        a = jnp.where(given[:, None], tangent.astype(n.dtype), a)
    s1 = a - jnp.sum(n * a, -1, keepdims=True) * n
    n2 = jnp.sum(s1 * s1, -1, keepdims=True)
    ok = n2 >= MINVAL**2  # MuJoCo's mju_normalize3: e_x below mjMINVAL
    ex = jnp.broadcast_to(jnp.asarray([1.0, 0.0, 0.0], n.dtype), n.shape)
    s1 = jnp.where(ok, s1 / jnp.sqrt(jnp.where(ok, n2, 1.0)), ex)  # finite derivatives at 0
    return s1, spatial.cross(n, s1)


def _multiccd_epa_iters(dt):
    """EPA iterations of the turned pairs of :func:`_multiccd_pair`: half the first contact's
    (their penetration is within the perturbation of the first's)."""
    from .gjk import EPA_ITERS

    return EPA_ITERS[jnp.finfo(dt).bits // 8] // 2


def _multiccd_pair(t1, t2):
    exact = _convex_pair(t1, t2, "exact")
    turned_pair = _convex_pair(t1, t2, "exact", epa_iters=_multiccd_epa_iters)
    nslot = 5

    def fn(size1, pos1, mat1, size2, pos2, mat2, margin: float | jax.Array = 0.0):
        sg = jax.lax.stop_gradient
        c0 = exact(size1, pos1, mat1, size2, pos2, mat2)
        d0, p0, n0 = c0.dist[0], c0.pos[0], c0.normal[0]
        tol = MULTICCD_TOL * jnp.minimum(_rbound(t1, sg(size1)), _rbound(t2, sg(size2)))
        o = sg(p0)
        rots = []
        for axis in mujoco_tangents(sg(n0)[None]):  # mju_makeFrame's tangents, (1, 3) each
            for angle in (-MULTICCD_ANGLE, MULTICCD_ANGLE):
                rots.append(spatial.rodrigues(axis[0], jnp.asarray(angle, axis.dtype)))
        R = jnp.stack(rots)  # (4, 3, 3)

        def turned(r):
            # geom 1 turned by r, geom 2 by r^T, both about the first contact (mju_rotateFrame)
            q1 = pos1 + (o - pos1) - r @ (o - pos1)
            q2 = pos2 + (o - pos2) - r.T @ (o - pos2)
            c = turned_pair(size1, q1, r @ mat1, size2, q2, r.T @ mat2)
            return c.dist[0], c.pos[0], c.normal[0]

        dk, pk, nk = jax.vmap(turned)(R)
        # the first contact and each new one far (> tol) from all kept before it
        pts = [p0]
        keep = []
        for k in range(4):
            far = jnp.all(
                jnp.stack([jnp.sqrt(_dot(pk[k] - q, pk[k] - q)) > tol for q in pts])
                | ~jnp.stack([jnp.array(True)] + keep)
            )
            ok = (d0 < margin) & (dk[k] < margin) & far
            keep.append(ok)
            pts.append(pk[k])
        keep = jnp.stack(keep)
        dist = jnp.concatenate([d0[None], jnp.where(keep, d0, NO_CONTACT)])
        pos = jnp.concatenate([p0[None], jnp.where(keep[:, None], pk, 0.0)])
        nrm = jnp.concatenate([n0[None], jnp.where(keep[:, None], nk, 0.0)])
        return Contact(dist, pos, nrm)

    fn.__name__ = f"collide_{t1}_{t2}"
    fn.__doc__ = (
        (
            f"{t1.capitalize()} - {t2}: {nslot} slots, MuJoCo's ``mjc_Convex`` with ``multiccd`` "
            "(its default): slot 0 the exact GJK / EPA contact (:data:`exact_{t1}_{t2}`); slots "
            "1-4 the contacts of the same pair with geom 1 turned by -+ :data:`MULTICCD_ANGLE` "
            "about the contact frame's two tangents (``mju_makeFrame``) through the first "
            "contact and geom 2 turned back, each kept where it penetrates and lies farther than "
            ":data:`MULTICCD_TOL` times the smaller bounding radius from those kept before it, "
            "with the first contact's depth (a cylinder standing on a flat face rests on its rim)."
        )
        .replace("{t1}", t1)
        .replace("{t2}", t2)
    )
    return fn


collide_cylinder_cylinder = _multiccd_pair("cylinder", "cylinder")
collide_cylinder_box = _multiccd_pair("cylinder", "box")
collide_cylinder_mesh = _multiccd_pair("cylinder", "mesh")


# ------------------------------------------------------------------------------ heightfields


@jax.tree_util.register_pytree_node_class
class HField:
    """A heightfield geom's data, MuJoCo's layout: ``heights`` (nrow, ncol), the elevation in
    metres (MuJoCo's normalised ``hfield_data`` times ``size[2]``) of the grid point at
    ``x = -size[0] + 2 size[0] c / (ncol - 1)``, ``y = -size[1] + 2 size[1] r / (nrow - 1)``
    (row ``r``, column ``c``, geom coordinates); ``size`` (4,) MuJoCo's ``hfield_size``
    ``[radius_x, radius_y, elevation_z, base_z]`` (the solid reaches down to ``-base_z``).

    ``window = (rows, cols)`` (static): the number of grid cells about the other geom's centre
    that a pair examines; :func:`hfield` sizes it from the largest distance ``reach`` of the
    other geom's surface from its centre (its bounding-sphere radius plus the margin), so that
    every cell under the geom is in the window. A pytree: ``heights`` and ``size`` are
    differentiable leaves."""

    def __init__(
        self, heights: jax.Array | np.ndarray, size: jax.Array | np.ndarray, window: Sequence[int]
    ) -> None:
        self.heights, self.size, self.window = heights, size, tuple(int(w) for w in window)

    def tree_flatten(self) -> tuple[tuple[Any, Any], tuple[int, ...]]:
        return (self.heights, self.size), self.window

    @classmethod
    def tree_unflatten(cls, window: tuple[int, ...], leaves: Sequence[Any]) -> HField:
        heights, size = leaves
        return cls(heights, size, window)

    def __repr__(self):
        return f"HField(shape={np.shape(self.heights)}, window={self.window})"


def hfield(heights: npt.ArrayLike, size: npt.ArrayLike, reach: float) -> HField:
    """An :class:`HField` of ``heights`` (nrow, ncol) in metres and MuJoCo's ``size`` (4,)
    whose pairs see every cell within ``reach`` (metres, static) of the other geom's centre."""
    h = np.asarray(heights, float)
    s = np.asarray(size, float).reshape(-1)
    if h.ndim != 2 or min(h.shape) < 2 or not np.all(np.isfinite(h)):
        raise ValueError(f"hfield: heights must be a finite (nrow, ncol) grid, >= 2 x 2; {h.shape}")
    if s.shape != (4,) or not np.all(np.isfinite(s)) or np.any(s[[0, 1, 3]] <= 0):
        raise ValueError(f"hfield: size must be [rx, ry, elevation, base], rx, ry, base > 0; {s}")
    reach = float(reach)
    if not np.isfinite(reach) or reach < 0:
        raise ValueError(f"hfield: reach must be finite and >= 0, got {reach}")
    nrow, ncol = h.shape
    dx, dy = 2 * s[0] / (ncol - 1), 2 * s[1] / (nrow - 1)
    cols = min(ncol - 1, int(np.ceil(2 * reach / dx)) + 1)
    rows = min(nrow - 1, int(np.ceil(2 * reach / dy)) + 1)
    return HField(h, s, (rows, cols))


@functools.cache
def _prism_topology():
    """Faces, edges and edge faces of the prism over a triangle ``(p0, p1, p2)``
    (counter-clockwise in x-y), vertices ``[p0, p1, p2]`` at the base, then the same three at
    the top: a :func:`hull_from_points` of a reference prism, renumbered."""
    ref = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [0, 1, 1]], float)
    h = hull_from_points(ref)
    idx = [int(np.argmin(np.abs(ref - v).sum(1))) for v in np.asarray(h.vertices)]
    remap = np.asarray(idx)
    return remap[np.asarray(h.faces)], remap[np.asarray(h.edges)], np.asarray(h.edge_faces)


def _prism_hull(v):
    """The :class:`Hull` of a prism with vertices ``v`` (6, 3) laid out as
    :func:`_prism_topology` (normals from the vertices: its top follows the heights)."""
    f, edges, edge_faces = _prism_topology()  # built once, on first use
    n = _cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]])
    n = _normalize(n, jnp.array([0.0, 0.0, 1.0], v.dtype))
    return Hull(v, n, f, edges, edge_faces)


def hfield_prisms(hf, centre):
    """Vertices ``(2 rows cols, 6, 3)`` (geom coordinates) of the triangular prisms of the
    :class:`HField` ``hf`` in its window about ``centre`` (3,) (the other geom's centre in the
    heightfield's coordinates): each cell between grid columns ``c, c+1`` and rows ``r, r+1``
    is cut along the diagonal from ``(c, r)`` to ``(c+1, r+1)`` into two triangles, each the top
    of a prism whose base is at ``-size[3]``, as MuJoCo's ``mjc_ConvexHField``."""
    heights = jnp.asarray(hf.heights)
    size = jnp.asarray(hf.size, centre.dtype)
    nrow, ncol = heights.shape
    rows, cols = hf.window
    dx = 2 * size[0] / (ncol - 1)
    dy = 2 * size[1] / (nrow - 1)
    # the window's first cell: centred on the geom, kept inside the grid
    c0 = jnp.floor((centre[0] + size[0]) / dx - cols / 2 + 0.5)
    r0 = jnp.floor((centre[1] + size[1]) / dy - rows / 2 + 0.5)
    c0 = jnp.clip(c0, 0, ncol - 1 - cols).astype(jnp.int32)
    r0 = jnp.clip(r0, 0, nrow - 1 - rows).astype(jnp.int32)
    h = jax.lax.dynamic_slice(heights.astype(centre.dtype), (r0, c0), (rows + 1, cols + 1))
    x = (c0 + jnp.arange(cols + 1)).astype(centre.dtype) * dx - size[0]
    y = (r0 + jnp.arange(rows + 1)).astype(centre.dtype) * dy - size[1]
    X, Y = jnp.meshgrid(x, y)  # (rows + 1, cols + 1), [r, c]
    P = jnp.stack([X, Y, h], -1)

    def corner(dr, dc):
        return P[dr : dr + rows, dc : dc + cols].reshape(-1, 3)

    p00, p10, p01, p11 = corner(0, 0), corner(0, 1), corner(1, 0), corner(1, 1)
    # counter-clockwise in x-y: (c, r+1), (c, r), (c+1, r+1) and (c, r), (c+1, r), (c+1, r+1)
    tri = jnp.concatenate([jnp.stack([p01, p00, p11], 1), jnp.stack([p00, p10, p11], 1)])
    base = tri.at[..., 2].set(-size[3])
    return jnp.concatenate([base, tri], 1)


#: the geoms whose heightfield prisms run GJK / EPA on the exact shape (:func:`_prism_convex`)
_HFIELD_CONVEX = ("ellipsoid", "cylinder")


def _prism_support(v, pos1, mat1):
    """The prism ``v`` (6, 3) (heightfield coordinates, :func:`hfield_prisms`) as a support
    function (world direction -> world vertex; MuJoCo's ``mjc_prism_support``), its centroid,
    and ``rigid(x, d)``: the prism's point ``x`` (world, values only) carried with the prism, the
    heightfield's pose and its heights: ``x``'s barycentric coordinates in the top triangle
    (x-y) and its height fraction between the base and the top surface are held, so that a
    witness point on the top face moves with the interpolated surface (Danskin's theorem then
    gives the derivative of the depth in the heights)."""
    sg = jax.lax.stop_gradient

    def sup(d):
        u = d @ mat1
        return pos1 + mat1 @ v[jnp.argmax(v @ u)]

    def rigid(x, d):
        del d
        vs = sg(v)
        xl = sg(mat1.T @ (x - pos1))
        top = vs[3:]
        # barycentric coordinates of xl's (x, y) in the top triangle
        e1, e2, q = top[1, :2] - top[0, :2], top[2, :2] - top[0, :2], xl[:2] - top[0, :2]
        det = e1[0] * e2[1] - e1[1] * e2[0]
        l1 = (q[0] * e2[1] - q[1] * e2[0]) / det
        l2 = (e1[0] * q[1] - e1[1] * q[0]) / det
        lam = jnp.stack([1 - l1 - l2, l1, l2])
        zb = vs[0, 2]
        zt = lam @ top[:, 2]
        t = (xl[2] - zb) / jnp.where(zt > zb, zt - zb, 1.0)
        moved = lam @ v[3:]  # (x, y, z_top) moving with the grid and the heights
        z = v[0, 2] + t * (moved[2] - v[0, 2])
        local = jnp.stack([moved[0], moved[1], z])
        return pos1 + mat1 @ (xl + local - sg(local))

    return sup, pos1 + mat1 @ jnp.mean(v, axis=0), rigid


def _prism_candidates(t2, prisms, pos1, mat1, size2, pos2, mat2, k):
    """Indices of the ``k`` prisms (``prisms`` (P, 6, 3), heightfield coordinates) of least
    separation from geom 2 along the prisms' own face normals (top, three walls, base: a
    separating-axis lower bound of the signed distance, from geom 2's support function), the
    ones whose GJK / EPA is run (a fixed count: MuJoCo skips the prisms its bounds rule out)."""
    sg = jax.lax.stop_gradient
    sup2, _, r2, _ = _core_support(t2, sg(size2), sg(pos2), sg(mat2))
    prisms = sg(prisms)

    def sep(v):
        a = _prism_hull(v).normals @ sg(mat1).T  # (5, 3) world, outward
        lo = jax.vmap(lambda n: _dot(n, sup2(-n)))(a) - r2  # geom 2's least extent along a
        hi = jnp.max((v @ sg(mat1).T + sg(pos1)) @ a.T, axis=0)  # the prism's greatest
        return jnp.max(lo - hi)

    return jax.lax.top_k(-jax.vmap(sep)(prisms), k)[1]


def _prism_convex(t2, v, pos1, mat1, size2, pos2, mat2):
    """One heightfield prism ``v`` against an ellipsoid or cylinder: GJK / EPA
    (:func:`jaxdyn.sim.gjk.convex_pair`) on the prism's and the exact shape's support functions,
    as MuJoCo's ``mjc_ConvexHField`` runs its general convex collider on each prism; the
    normal from the heightfield to geom 2."""
    s1, c1, g1 = _prism_support(v, pos1, mat1)
    s2, c2, r2, g2 = _core_support(t2, size2, pos2, mat2)
    d, p, n = convex_pair(
        lambda u: (s1(u), s2(-u)),
        c1,
        c2,
        0.0,
        r2,
        rigid=lambda xa, xb, u: (g1(xa, u), g2(xb, -u)),
    )
    # EPA's witness points are barycentric on its polytope (less accurate than its normal where
    # the prism's side is an edge or a face); where geom 2's support along -n is one point (an
    # ellipsoid; a cylinder's rim point when n is neither along nor across its axis) the
    # contact is that point moved back by half the distance (MuJoCo's midpoint)
    u = jax.lax.stop_gradient(n) @ mat2
    x2 = s2(-jax.lax.stop_gradient(n))
    if t2 == "cylinder":
        lat = jnp.sqrt(u[0] ** 2 + u[1] ** 2)
        unique = (lat > 0.05) & (jnp.abs(u[2]) > 0.05)
        p = jnp.where(unique, x2 - d / 2 * n, p)
    else:
        p = x2 - d / 2 * n
    return _contact(d, p, n)


def hfield_prism_contacts(
    t2: str,
    hf: HField,
    pos1: jax.Array,
    mat1: jax.Array,
    size2: jax.Array | np.ndarray | Hull,
    pos2: jax.Array,
    mat2: jax.Array,
    margin: float | jax.Array = 0.0,
    candidates: int | None = None,
) -> Contact:
    """Contacts ``(prisms, k)`` of geom 2 (``t2``: sphere, capsule, ellipsoid, cylinder, box or
    mesh) with every prism of the window of the heightfield ``hf`` (at ``pos1``, ``mat1``),
    normals from the heightfield to geom 2: a sphere the exact closest point of each prism
    (``k = 1``), a capsule as :func:`collide_capsule_mesh` (``k = 3``), the others separating
    axes on polytopes with a clipped face manifold (:func:`_polytope_polytope`, ``k = 4``),
    an ellipsoid or a cylinder by GJK / EPA on its exact shape (:func:`_prism_convex`,
    ``k = 1``). ``candidates`` (static; ellipsoid and cylinder only): only that many prisms of
    the window, those of least separation along their own face normals
    (:func:`_prism_candidates`), are run (the others are not returned)."""
    prisms = hfield_prisms(hf, mat1.T @ (pos2 - pos1))
    if candidates is not None and t2 in _HFIELD_CONVEX and candidates < prisms.shape[0]:
        prisms = prisms[_prism_candidates(t2, prisms, pos1, mat1, size2, pos2, mat2, candidates)]

    def one(v):
        if t2 in _HFIELD_CONVEX:
            return _prism_convex(t2, v, pos1, mat1, size2, pos2, mat2)
        hull = _prism_hull(v)
        if t2 == "sphere":
            return _flip(_sphere_hull(pos2, size2[0], hull, pos1, mat1))
        if t2 == "capsule":
            return _flip(collide_capsule_mesh(size2, pos2, mat2, hull, pos1, mat1, margin))
        h2 = _shape_hull(t2, size2)
        return _polytope_polytope(hull, pos1, mat1, h2, pos2, mat2, margin, 4)

    return jax.vmap(one)(prisms)


#: contact slots of a heightfield pair after the prisms' contacts are reduced
HFIELD_SLOTS = {"sphere": 4, "capsule": 6, "ellipsoid": 4, "cylinder": 4}
#: prisms run by GJK / EPA in a heightfield pair with an ellipsoid / cylinder
#: (:func:`_prism_candidates`)
HFIELD_CANDIDATES = {"ellipsoid": 6, "cylinder": 6}
HFIELD_SLOTS_POLYTOPE = 8


def _hfield_pair(t2):
    k = HFIELD_SLOTS.get(t2, HFIELD_SLOTS_POLYTOPE)

    def fn(size1, pos1, mat1, size2, pos2, mat2, margin=0.0):
        if not isinstance(size1, HField):
            raise TypeError(f"a heightfield geom is described by an HField (hfield), got {size1}")
        c = hfield_prism_contacts(
            t2, size1, pos1, mat1, size2, pos2, mat2, margin, HFIELD_CANDIDATES.get(t2)
        )
        d, p, n = c.dist.reshape(-1), c.pos.reshape(-1, 3), c.normal.reshape(-1, 3)
        dmin = jnp.min(d)
        valid = (d < NO_CONTACT / 2) & ((d <= margin) | (d <= dmin))
        idx, ok = _select(p, d, valid, min(k, d.shape[0]))
        out = _mask(Contact(d[idx], p[idx], n[idx]), ok)
        if idx.shape[0] < k:  # a window of fewer candidates than slots: pad
            pad = k - idx.shape[0]
            out = _concat(
                out,
                Contact(
                    jnp.full((pad,), NO_CONTACT, d.dtype),
                    jnp.zeros((pad, 3), d.dtype),
                    jnp.zeros((pad, 3), d.dtype),
                ),
            )
        return out

    fn.__name__ = f"collide_hfield_{t2}"
    fn.__doc__ = (
        f"Heightfield (``size1`` an :class:`HField`) - {t2}: {k} slots, the deepest contact of "
        "the prisms of the window (:func:`hfield_prism_contacts`), then farthest-point sampling "
        "of the others within ``margin`` (:func:`_select`)."
    )
    return fn


collide_hfield_sphere = _hfield_pair("sphere")
collide_hfield_capsule = _hfield_pair("capsule")
collide_hfield_ellipsoid = _hfield_pair("ellipsoid")
collide_hfield_cylinder = _hfield_pair("cylinder")
collide_hfield_box = _hfield_pair("box")
collide_hfield_mesh = _hfield_pair("mesh")


# ------------------------------------------------------------------------------ dispatch

_NAMES = {v: k for k, v in GEOM_TYPES.items()}

#: pair functions by (type 1, type 2) names, type 1 <= type 2 in :data:`GEOM_TYPES`
PAIRS: dict[tuple[str, str], Callable[..., Contact]] = {
    ("plane", "sphere"): collide_plane_sphere,
    ("plane", "capsule"): collide_plane_capsule,
    ("plane", "ellipsoid"): collide_plane_ellipsoid,
    ("plane", "cylinder"): collide_plane_cylinder,
    ("plane", "box"): collide_plane_box,
    ("sphere", "sphere"): collide_sphere_sphere,
    ("sphere", "capsule"): collide_sphere_capsule,
    ("sphere", "cylinder"): collide_sphere_cylinder,
    ("sphere", "box"): collide_sphere_box,
    ("capsule", "capsule"): collide_capsule_capsule,
    ("capsule", "cylinder"): collide_capsule_cylinder,
    ("capsule", "box"): collide_capsule_box,
    ("plane", "mesh"): collide_plane_mesh,
    ("sphere", "mesh"): collide_sphere_mesh,
    ("capsule", "mesh"): collide_capsule_mesh,
    ("box", "box"): collide_box_box,
    ("box", "mesh"): collide_box_mesh,
    ("mesh", "mesh"): collide_mesh_mesh,
    ("sphere", "ellipsoid"): collide_sphere_ellipsoid,
    ("capsule", "ellipsoid"): collide_capsule_ellipsoid,
    ("ellipsoid", "ellipsoid"): collide_ellipsoid_ellipsoid,
    ("ellipsoid", "cylinder"): collide_ellipsoid_cylinder,
    ("ellipsoid", "box"): collide_ellipsoid_box,
    ("ellipsoid", "mesh"): collide_ellipsoid_mesh,
    ("cylinder", "cylinder"): collide_cylinder_cylinder,
    ("cylinder", "box"): collide_cylinder_box,
    ("cylinder", "mesh"): collide_cylinder_mesh,
    ("hfield", "sphere"): collide_hfield_sphere,
    ("hfield", "capsule"): collide_hfield_capsule,
    ("hfield", "ellipsoid"): collide_hfield_ellipsoid,
    ("hfield", "cylinder"): collide_hfield_cylinder,
    ("hfield", "box"): collide_hfield_box,
    ("hfield", "mesh"): collide_hfield_mesh,
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
    ("sphere", "cylinder"): 1,
    ("sphere", "box"): 1,
    ("capsule", "capsule"): 2,
    ("capsule", "cylinder"): 3,
    ("capsule", "box"): 3,
    ("plane", "mesh"): 4,
    ("sphere", "mesh"): 1,
    ("capsule", "mesh"): 3,
    ("box", "box"): 8,
    ("box", "mesh"): 8,
    ("mesh", "mesh"): 8,
    ("sphere", "ellipsoid"): 1,
    ("capsule", "ellipsoid"): 1,
    ("ellipsoid", "ellipsoid"): 1,
    ("ellipsoid", "cylinder"): 1,
    ("ellipsoid", "box"): 1,
    ("ellipsoid", "mesh"): 1,
    ("cylinder", "cylinder"): 5,
    ("cylinder", "box"): 5,
    ("cylinder", "mesh"): 5,
    **{
        ("hfield", t): HFIELD_SLOTS.get(t, HFIELD_SLOTS_POLYTOPE)
        for t in ("sphere", "capsule", "ellipsoid", "cylinder", "box", "mesh")
    },
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


def collide(
    type1: str | int,
    type2: str | int,
    size1: GeomSize,
    pos1: jax.Array,
    mat1: jax.Array,
    size2: GeomSize,
    pos2: jax.Array,
    mat2: jax.Array,
    margin: float | jax.Array = 0.0,
) -> Contact:
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
        return x if isinstance(x, (Hull, HField)) else jnp.asarray(x, dt)

    args = [conv(x) for x in (size1, pos1, mat1, size2, pos2, mat2)]
    if any(isinstance(x, (Hull, HField)) for x in args):
        return fn(*args, margin=margin)
    return _traced_once(n1, n2)(*args, jnp.asarray(margin, dt))


@functools.cache
def _traced_once(n1: str, n2: str):
    """The pair function of ``(n1, n2)`` under one :func:`jax.jit` of its own: a scene's
    contact geometry is traced several times in one program (a reset's pose draw, each
    substep's contact frames, derivatives) and by every environment of the same geoms; the
    jitted pair is traced once per argument shape and ``jax.vmap`` batches its program once
    (JAX caches both), where a plain call traced the GJK / EPA loops anew each time. XLA inlines
    the call: the same computation."""
    fn = PAIRS[(n1, n2)]
    return jax.jit(lambda s1, p1, m1, s2, p2, m2, margin: fn(s1, p1, m1, s2, p2, m2, margin=margin))

"""Exact distance and penetration of two convex shapes given by their support functions, in
pure JAX: GJK for the distance, EPA for the penetration depth, both with fixed iteration counts
(``jit``/``vmap``-safe, no data-dependent Python control flow) in float32 and float64.

A shape pair is one function ``support(d) -> (a, b)``: ``a`` the point of shape A farthest
along ``d``, ``b`` the point of shape B farthest along ``-d`` (world coordinates, ``d`` not
necessarily unit); ``a - b`` is then the support point of the Minkowski difference
``K = A - B`` along ``d``. Shapes are kept as their "cores" (a sphere as its centre, a capsule
as its segment) with the radii added afterwards (``radius``), which makes GJK converge in a
few iterations where one shape is round and saves EPA where only the radii overlap.

* :func:`gjk`: E. G. Gilbert, D. W. Johnson, S. S. Keerthi, "A fast procedure for computing the
  distance between complex objects in three-dimensional space", IEEE J. Robot. Autom. 1988,
  with the closest point of the simplex found as the best of its sub-simplices whose affine
  projection of the origin has non-negative barycentric coordinates (the sub-simplex test of
  Johnson's algorithm, written branch-free);
* :func:`epa`: the expanding polytope algorithm (G. van den Bergen, "Proximity queries and
  penetration depth computation on 3D game objects", GDC 2001): the face of the polytope
  nearest the origin is expanded by the support point along its normal until the support adds
  nothing (to a tolerance). The polytope lives in fixed arrays (one new vertex per iteration,
  faces in free slots with the face across each of their edges, for the horizon).

:func:`convex_pair` combines them in MuJoCo's convention (``mjc_Convex`` / ``mjc_ccd``, MuJoCo
``engine_collision_gjk.c``): signed distance (< 0 in penetration), witness points on both
surfaces, their midpoint as the contact position, and the unit normal from A to B. Its distance
is differentiable in the shapes' poses: by Danskin's theorem the signed distance is
``-(h_A(n) + h_B(-n))`` at the optimal normal ``n`` (``h`` the support functions), so the
iterations run on stopped gradients and the distance is re-evaluated at the final normal.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["convex_pair", "epa", "gjk"]

Support = Callable[[jax.Array], tuple[jax.Array, jax.Array]]

#: GJK and EPA iterations of :func:`convex_pair` by dtype (float32, float64)
GJK_ITERS = {4: 24, 8: 40}
EPA_ITERS = {4: 32, 8: 64}


def _eps(x):
    return jnp.finfo(jnp.result_type(x)).eps


def _dot(a, b):
    return jnp.sum(a * b, axis=-1)


def _cross(a, b):
    """Cross product on the last axis (broadcasting; cheaper to trace than ``jnp.cross``)."""
    a, b = jnp.broadcast_arrays(a, b)
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return jnp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


# ------------------------------------------------------------------------------ GJK

#: the edges and triangles of a 4-slot simplex
_EDGES = [(i, j) for i in range(4) for j in range(i + 1, 4)]
_TRIS = [(i, j, k) for i in range(4) for j in range(i + 1, 4) for k in range(j + 1, 4)]


def _closest_on_subsets(w, active):
    """The point of the convex hull of the active simplex points ``w`` (4, 3) nearest the
    origin: for every sub-simplex of active points, the affine projection of the origin and its
    barycentric coordinates; the nearest projection with coordinates >= 0 is the answer (a
    point of the hull, and the hull's nearest point is such a projection). Returns the
    barycentric weights (4,) (0 outside the chosen sub-simplex) and whether the origin lies
    inside a full tetrahedron."""
    dt = w.dtype
    eps = _eps(w)
    scale = jnp.max(jnp.abs(w)) + 1e-30
    cands, lams = [], []
    # vertices
    for i in range(4):
        lam = jnp.zeros(4, dt).at[i].set(1.0)
        ok = active[i]
        cands.append(jnp.where(ok, _dot(w[i], w[i]), jnp.inf))
        lams.append(lam)
    # edges
    for i, j in _EDGES:
        e = w[j] - w[i]
        ee = _dot(e, e)
        t = jnp.where(ee > (eps * scale) ** 2, -_dot(w[i], e) / jnp.where(ee > 0, ee, 1.0), -1.0)
        ok = active[i] & active[j] & (t > 0) & (t < 1)
        p = w[i] + t * e
        lam = jnp.zeros(4, dt).at[i].set(1 - t).at[j].set(t)
        cands.append(jnp.where(ok, _dot(p, p), jnp.inf))
        lams.append(lam)
    # triangles
    for i, j, k in _TRIS:
        a, b, c = w[i], w[j], w[k]
        n = _cross(b - a, c - a)
        nn = _dot(n, n)
        good = nn > (eps * scale**2) ** 2 * 1e2
        inv = 1.0 / jnp.where(good, nn, 1.0)
        # barycentric coordinates of the origin's projection onto the plane
        la = _dot(_cross(b, c), n) * inv
        lb = _dot(_cross(c, a), n) * inv
        lc = _dot(_cross(a, b), n) * inv
        ok = active[i] & active[j] & active[k] & good & (la > 0) & (lb > 0) & (lc > 0)
        p = la * a + lb * b + lc * c
        lam = jnp.zeros(4, dt).at[i].set(la).at[j].set(lb).at[k].set(lc)
        cands.append(jnp.where(ok, _dot(p, p), jnp.inf))
        lams.append(lam)
    # tetrahedron: the origin inside
    a, b, c, d = w
    vol = _dot(b - a, _cross(c - a, d - a))
    good = jnp.abs(vol) > eps * scale**3 * 1e2
    inv = 1.0 / jnp.where(good, vol, 1.0)
    # barycentric coordinates of the origin: volumes with the origin in place of a vertex
    la = _dot(b, _cross(c, d)) * inv
    lb = _dot(-a, _cross(c - a, d - a)) * inv
    lc = _dot(b - a, _cross(-a, d - a)) * inv
    ld = 1 - la - lb - lc
    inside = jnp.all(active) & good & (la >= 0) & (lb >= 0) & (lc >= 0) & (ld >= 0)
    cands.append(jnp.where(inside, 0.0, jnp.inf))
    lams.append(jnp.stack([la, lb, lc, ld]))
    cands = jnp.stack(cands)
    best = jnp.argmin(cands)
    return jnp.stack(lams)[best], inside & (best == cands.shape[0] - 1)


def gjk(
    support: Support, v0: jax.Array, iters: int, tol: float | None = None
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """GJK distance between the shapes of ``support`` (Gilbert et al. 1988), ``iters`` fixed
    iterations (frozen once converged), starting from the point ``v0`` of ``K = A - B`` (e.g.
    the difference of the shapes' centres).

    Returns ``(v, w, wa, wb, lam, inside)``: ``v`` the point of ``K`` nearest the origin (its
    norm the distance), the final simplex ``w`` (4, 3) with its points on A and B, the
    barycentric weights ``lam`` (4,) of ``v`` (0 on unused slots) and whether the origin is
    inside ``K`` (a tetrahedron of support points encloses it)."""
    dt = v0.dtype
    tol = 1e3 * float(jnp.finfo(dt).eps) if tol is None else tol
    z = jnp.zeros((4, 3), dt)

    def body(_, s):
        v, w, wa, wb, lam, inside, done = s
        a, b = support(-v)
        p = a - b
        vv = _dot(v, v)
        # convergence: no support point is closer along v (relative gap), or the origin is in
        stop = done | inside | (vv - _dot(v, p) <= tol * vv) | (vv < (_eps(v) * 1e2) ** 2)
        active = lam > 0
        slot = jnp.argmin(active)  # a free slot (the chosen sub-simplex has <= 3 points)
        w2, wa2, wb2 = w.at[slot].set(p), wa.at[slot].set(a), wb.at[slot].set(b)
        act2 = active.at[slot].set(True)
        lam2, ins2 = _closest_on_subsets(w2, act2)
        v2 = lam2 @ w2
        # a step that does not bring the simplex closer (round-off) is not taken
        stop = stop | (_dot(v2, v2) >= vv)
        keep = lambda old, new: jnp.where(stop, old, new)  # noqa: E731
        return (
            keep(v, v2),
            keep(w, w2),
            keep(wa, wa2),
            keep(wb, wb2),
            keep(lam, lam2),
            keep(inside, ins2),
            stop,
        )

    # the first point: the support along -v0
    a, b = support(-v0)
    lam = jnp.zeros(4, dt).at[0].set(1.0)
    w, wa, wb = z.at[0].set(a - b), z.at[0].set(a), z.at[0].set(b)
    s = (a - b, w, wa, wb, lam, jnp.array(False), jnp.array(False))
    v, w, wa, wb, lam, inside, _ = jax.lax.fori_loop(0, iters, body, s)
    return v, w, wa, wb, lam, inside


# ------------------------------------------------------------------------------ EPA


def _first(mask, size: int, fill: int):
    """The indices of the first ``size`` true entries of ``mask`` (``fill`` past the last), as
    ``jnp.nonzero(mask, size=size, fill_value=fill)`` but by one cumulative sum and scatter."""
    rank = jnp.cumsum(mask) - 1
    at = jnp.where(mask & (rank < size), rank, size)
    idx = jnp.arange(mask.shape[0], dtype=jnp.int32)
    return jnp.full(size, fill, jnp.int32).at[at].set(idx, mode="drop")


#: the faces of a tetrahedron (0, 1, 2, 3), counter-clockwise seen from outside when the
#: tetrahedron is positively oriented (det[v1 - v0, v2 - v0, v3 - v0] > 0)
_TET_FACES = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]], np.int32)


def epa(
    support: Support,
    w0: jax.Array,
    wa0: jax.Array,
    wb0: jax.Array,
    iters: int,
    tol: float | None = None,
    flood: int = 8,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Penetration of the shapes of ``support`` by the expanding polytope algorithm (van den
    Bergen 2001), ``iters`` fixed iterations from the tetrahedron ``w0`` (4, 3) of support points
    (``wa0``, ``wb0`` on A and B), which need not enclose the origin: the face of least signed
    distance (negative where the origin is outside it) is expanded first.

    Returns ``(depth, normal, xa, xb)``: the signed distance of the nearest face's plane from
    the origin (the penetration depth, > 0 in penetration), its outward unit normal (from A to
    B) and the witness points on A and B (the origin's projection on that face, mapped by its
    barycentric coordinates). Where the expansion does not converge (out of iterations, or
    stopped by a degenerate update) the least support value seen and its direction are returned
    instead (an upper bound of the depth). ``flood``: the steps of the flood fill that finds the
    faces seen from a new point."""
    dt = w0.dtype
    eps = float(jnp.finfo(dt).eps)
    tol = 1e2 * eps if tol is None else tol
    nv = 4 + iters
    nf = 2 * nv - 4
    scale = jnp.max(jnp.abs(w0 - jnp.mean(w0, axis=0))) + 1e-30
    # orient the tetrahedron positively
    vol = _dot(w0[1] - w0[0], _cross(w0[2] - w0[0], w0[3] - w0[0]))
    perm = jnp.where(vol < 0, jnp.array([1, 0, 2, 3]), jnp.arange(4))
    V = jnp.zeros((nv, 3), dt).at[:4].set(w0[perm])
    VA = jnp.zeros((nv, 3), dt).at[:4].set(wa0[perm])
    VB = jnp.zeros((nv, 3), dt).at[:4].set(wb0[perm])
    faces = jnp.zeros((nf, 3), jnp.int32).at[:4].set(_TET_FACES)
    alive = jnp.zeros(nf, bool).at[:4].set(True)

    def plane(V, F):
        a, b, c = V[F[..., 0]], V[F[..., 1]], V[F[..., 2]]
        n = _cross(b - a, c - a)
        ln = jnp.sqrt(_dot(n, n))
        good = ln > 1e2 * eps * scale**2
        n = n / jnp.where(good, ln, 1.0)[..., None]
        return n, _dot(n, a), good

    normal, dist, _ = plane(V, faces)
    # directed edge (a, b) -> the face holding it
    # adj[f, k]: the face across edge k of face f (its vertices k -> k + 1)
    adj0 = np.zeros((4, 3), np.int32)
    for f, fv in enumerate(_TET_FACES):
        for k in range(3):
            a, b = fv[k], fv[(k + 1) % 3]
            for g, gv in enumerate(_TET_FACES):
                if any(gv[j] == b and gv[(j + 1) % 3] == a for j in range(3)):
                    adj0[f, k] = g
    adj = jnp.zeros((nf, 3), jnp.int32).at[:4].set(adj0)
    kk = np.array([0, 1, 2])
    kn = np.array([1, 2, 0])

    def body(it, s):
        V, VA, VB, faces, normal, dist, alive, adj, done, conv0, best = s
        f = jnp.argmin(jnp.where(alive, dist, jnp.inf))
        n = normal[f]
        a, b = support(n)
        p = a - b
        gap = _dot(n, p) - dist[f]
        conv = gap <= tol * scale
        # the least support value seen (an upper bound of the depth) and its normal
        hp = _dot(n, p)
        better = ~done & (hp < best[0])
        best = (jnp.where(better, hp, best[0]), jnp.where(better, n, best[1]))
        iv = 4 + it
        # faces seen from p: the connected set about f (flood fill over the edges' twins, so
        # that a far face seen by round-off is not removed)
        seen = alive & (_dot(normal, p - V[faces[:, 0]]) > tol * scale)
        ea, eb = faces[:, kk], faces[:, kn]  # (nf, 3)
        twin = adj
        vis = jnp.zeros_like(seen).at[f].set(True)
        for _ in range(flood):
            vis = vis | (seen & jnp.any(vis[twin], axis=1))
        hor = (vis[:, None] & ~vis[twin]).reshape(-1)
        nh = jnp.sum(hor)
        hid = _first(hor, nv, 0)
        valid = jnp.arange(nv) < nh
        ha, hb = ea.reshape(-1)[hid], eb.reshape(-1)[hid]
        newf = jnp.stack([ha, hb, jnp.full_like(ha, iv)], axis=1).astype(jnp.int32)
        n_new, d_new, good = plane(V.at[iv].set(p), newf)
        # a degenerate new face or a horizon that is not one simple loop (too few edges, a
        # vertex starting two edges) stops the expansion
        starts = jnp.zeros(nv + 1, jnp.int32).at[jnp.where(valid, ha, nv)].add(1)
        bad = jnp.any(valid & ~good) | (nh < 3) | jnp.any(starts[:nv] > 1)
        stop = done | conv | bad
        # the update, as scatters that are dropped (out-of-bounds indices) once stopped
        go = ~stop
        iv_w = jnp.where(go, iv, nv)
        V, VA, VB = (x.at[iv_w].set(y, mode="drop") for x, y in ((V, p), (VA, a), (VB, b)))
        alive = alive & ~(vis & go)
        slots = _first(~alive, nv, nf)
        valid = valid & go
        slots = jnp.where(valid, slots, nf).astype(jnp.int32)  # out of bounds: dropped
        faces = faces.at[slots].set(newf, mode="drop")
        alive = alive.at[slots].set(True, mode="drop")
        normal = normal.at[slots].set(n_new, mode="drop")
        dist = dist.at[slots].set(d_new, mode="drop")
        # adjacency: a new face (ha, hb, iv) borders the unseen face across (ha, hb) and the
        # new faces that start at hb / end at ha
        tw = twin.reshape(-1)[hid]  # the unseen face across each horizon edge
        start = jnp.zeros(nv + 1, jnp.int32).at[jnp.where(valid, ha, nv)].set(slots, mode="drop")
        end = jnp.zeros(nv + 1, jnp.int32).at[jnp.where(valid, hb, nv)].set(slots, mode="drop")
        adj = adj.at[slots].set(jnp.stack([tw, start[hb], end[ha]], axis=1), mode="drop")
        # the unseen face's edge (hb, ha) now borders the new face
        ktw = jnp.argmax(faces[tw] == hb[:, None], axis=1)
        adj = adj.at[jnp.where(valid, tw, nf), ktw].set(slots, mode="drop")
        return (V, VA, VB, faces, normal, dist, alive, adj, stop, conv0 | (~done & conv), best)

    best = (jnp.array(jnp.inf, dt), jnp.zeros(3, dt))
    s = (V, VA, VB, faces, normal, dist, alive, adj, jnp.array(False), jnp.array(False), best)
    V, VA, VB, faces, normal, dist, alive, adj, _, conv, best = jax.lax.fori_loop(0, iters, body, s)
    f = jnp.argmin(jnp.where(alive, dist, jnp.inf))
    n, d = normal[f], dist[f]
    i, j, k = faces[f, 0], faces[f, 1], faces[f, 2]
    a, b, c = V[i], V[j], V[k]
    q = d * n  # the origin's projection on the face
    area = _cross(b - a, c - a)
    inv = 1.0 / jnp.where(jnp.abs(_dot(area, n)) > 0, _dot(area, n), 1.0)
    la = _dot(_cross(b - q, c - q), n) * inv
    lb = _dot(_cross(c - q, a - q), n) * inv
    lc = 1 - la - lb
    xa = la * VA[i] + lb * VA[j] + lc * VA[k]
    xb = la * VB[i] + lb * VB[j] + lc * VB[k]
    # not converged (out of iterations, or stopped by a degenerate update): the direction of the
    # least support value seen, an upper bound of the depth (Newton's method may finish it)
    # (the witness points stay those of the nearest face)
    hb, nb = best
    use = ~conv & jnp.isfinite(hb)
    return jnp.where(use, hb, d), jnp.where(use, nb, n), xa, xb


# ------------------------------------------------------------------------------ polish


def _tangents(n):
    """Two unit vectors completing ``n`` to an orthonormal frame."""
    ex, ey = jnp.array([1.0, 0, 0], n.dtype), jnp.array([0, 1.0, 0], n.dtype)
    a = jnp.where(jnp.abs(n[0]) < 0.6, ex, ey)
    t1 = _cross(n, a)
    t1 = t1 / jnp.sqrt(_dot(t1, t1))
    return t1, _cross(n, t1)


def _newton_normal(support: Support, n, steps: int):
    """Newton's method on the unit sphere for the optimal normal: both the distance of separated
    shapes and the depth of penetrating ones are ``-min h(n)`` / ``min h(n)`` over unit ``n`` of
    the Minkowski difference's support function ``h(n) = n . s(n)`` (``s`` its support point, the
    gradient of ``h``; its Jacobian the Hessian). The Riemannian gradient is the tangential part
    of ``s``, the Riemannian Hessian ``P (ds/dn) P - h P`` (``P`` the tangent projector; P.-A.
    Absil, R. Mahony, R. Sepulchre, *Optimization Algorithms on Matrix Manifolds*, 2008,
    ch. 5.5 and 6). A step is kept only where it shrinks the tangential gradient, so a normal
    at a kink of the support (a face or an edge of a flat shape) stays as GJK/EPA found it.
    Returns the normal, the support points along it on A and B, and whether a step was kept."""

    def pts(n):
        a, b = support(n)
        return a - b, a - b

    def body(_, st):
        n, ok = st
        t1, t2 = _tangents(n)
        T = jnp.stack([t1, t2], axis=1)  # (3, 2)
        J, p = jax.jacfwd(pts, has_aux=True)(n)
        h = _dot(n, p)
        g = T.T @ p
        A = T.T @ J @ T - h * jnp.eye(2, dtype=n.dtype)
        det = A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]
        good = (det > 0) & (A[0, 0] + A[1, 1] > 0)  # positive definite: a minimum
        inv = jnp.array([[A[1, 1], -A[0, 1]], [-A[1, 0], A[0, 0]]]) / jnp.where(good, det, 1.0)
        xi = -T @ (inv @ g)
        n2 = n + xi
        n2 = n2 / jnp.sqrt(_dot(n2, n2))
        p2, _ = pts(n2)
        g2 = p2 - _dot(n2, p2) * n2
        h2 = _dot(n2, p2)
        small = _dot(xi, xi) < 0.01  # a local step (GJK/EPA found the basin)
        lower = h2 <= h + 1e2 * _eps(h) * (jnp.abs(h) + jnp.sqrt(_dot(p, p)))
        take = good & small & lower & (_dot(g2, g2) < _dot(g, g)) & jnp.all(jnp.isfinite(n2))
        return jnp.where(take, n2, n), ok | take

    n, ok = jax.lax.fori_loop(0, steps, body, (n, jnp.array(False)))
    a, b = support(n)
    return n, a, b, ok


# ------------------------------------------------------------------------------ pair

#: directions of a regular tetrahedron (the fallback start of EPA)
_TET_DIRS = np.array([[1, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]], float) / np.sqrt(3)


def convex_pair(
    support: Support,
    center_a: jax.Array,
    center_b: jax.Array,
    radius_a: jax.Array | float = 0.0,
    radius_b: jax.Array | float = 0.0,
    gjk_iters: int | None = None,
    epa_iters: int | None = None,
    newton: int = 3,
    rigid: Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]] | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Signed distance, contact position and normal of two convex shapes, MuJoCo's convention
    (``mjc_Convex``): ``support`` the pair's support function on the shapes' cores, ``center_a``,
    ``center_b`` interior points of the cores, ``radius_a``, ``radius_b`` the radii swept about
    them (a sphere: a point and its radius; a capsule: a segment and its radius).

    GJK (:func:`gjk`) on the cores; where they intersect, EPA (:func:`epa`) from GJK's enclosing
    tetrahedron (or a tetrahedron of support points along fixed directions); then ``newton``
    Newton steps on the normal (:func:`_newton_normal`) where the support is smooth. Returns
    ``dist`` (signed distance of the surfaces, < 0 in penetration), ``pos`` (the midpoint of the two
    witness points on the surfaces) and ``normal`` (unit, from A to B). ``dist`` and ``pos`` are
    differentiable in whatever ``support`` depends on (Danskin: at the optimal normal ``n`` the
    signed distance is ``-(h_A(n) + h_B(-n))``); the normal's gradient is zero. ``rigid(xa, xb,
    n)``, where given, carries the witness points with the shapes (see
    ``collision._core_support``): their motion differentiates the distance where a support
    along ``n`` is a whole face or edge (the support point there is any of its points)."""
    dt = jnp.result_type(center_a, center_b)
    key = jnp.finfo(dt).bits // 8
    gi = GJK_ITERS[key] if gjk_iters is None else gjk_iters
    ei = EPA_ITERS[key] if epa_iters is None else epa_iters
    sg = jax.lax.stop_gradient

    def sup(d):
        a, b = support(sg(d))
        return sg(a), sg(b)

    v0 = sg(center_a - center_b)
    v, w, wa, wb, lam, inside = gjk(sup, v0, gi)
    vn = jnp.sqrt(_dot(v, v))
    scale = jnp.max(jnp.abs(w - jnp.mean(w, axis=0))) + jnp.sqrt(_dot(v0, v0)) + 1e-30
    sep = ~inside & (vn > 1e2 * _eps(v) * scale)
    # EPA's start: GJK's tetrahedron where it encloses the origin, else fixed directions
    dirs = jnp.asarray(_TET_DIRS, dt)
    ta, tb = jax.vmap(sup)(dirs)
    w0 = jnp.where(inside, w, ta - tb)
    wa0 = jnp.where(inside, wa, ta)
    wb0 = jnp.where(inside, wb, tb)
    depth, n_epa, xa_epa, xb_epa = epa(sup, w0, wa0, wb0, ei)
    n_gjk = -v / jnp.where(sep, vn, 1.0)
    normal = jnp.where(sep, n_gjk, n_epa)
    xa = jnp.where(sep, lam @ wa, xa_epa)
    xb = jnp.where(sep, lam @ wb, xb_epa)
    d = jnp.where(sep, vn, -depth)
    # polish the normal by Newton's method on the sphere where the support is smooth
    normal, xa_n, xb_n, polished = (sg(x) for x in _newton_normal(support, sg(normal), newton))
    xa = jnp.where(polished, xa_n, xa)
    xb = jnp.where(polished, xb_n, xb)
    d = jnp.where(polished, -_dot(normal, xa_n - xb_n), d)
    # differentiable re-evaluation at the final normal (values kept from the iterations)
    n = sg(normal)
    if rigid is None:
        a, b = support(n)
        a, b = xa + a - sg(a), xb + b - sg(b)
    else:
        a, b = rigid(sg(xa), sg(xb), n)
    d_re = -_dot(n, a - b)
    d = d + d_re - sg(d_re)
    xa, xb = a, b
    ra = jnp.asarray(radius_a, dt)
    rb = jnp.asarray(radius_b, dt)
    xa = xa + ra * n
    xb = xb - rb * n
    return d - ra - rb, (xa + xb) / 2, normal

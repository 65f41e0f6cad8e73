"""Collision geoms on a model's bodies, the pairs of them that may touch, and their contacts.

A :class:`Geoms` table holds every collision geom of a scene: the body it moves with (static;
``-1`` for the world: tables, walls, the floor), its type (static, MuJoCo's names: ``plane``,
``hfield``, ``sphere``, ``capsule``, ``ellipsoid``, ``cylinder``, ``box``, ``mesh``), its size
in MuJoCo's ``geom_size`` layout, its pose in the body's frame, its friction and contact
parameters (``margin``, ``solref``; array leaves: differentiable, batchable for domain
randomisation), and the pairs of geoms that may touch.

Broad phase: the pairs are fixed when the table is built, from the model file's filters
(:func:`jaxdyn.load_mjcf` applies MuJoCo's: ``contype`` / ``conaffinity``, ``<exclude>``, geoms
of one body or of a parent and its child never collide unless the parent is the world; its
explicit ``<contact><pair>`` are pairs whatever the filters say, with their own contact
parameters, :attr:`Geoms.explicit`), so the step's program has a fixed shape under ``jax.jit``
and ``jax.vmap``; at run time a pair whose bounding spheres (MuJoCo's ``geom_rbound``) are
apart is masked. Narrow phase: the pair functions of :mod:`jaxdyn.sim.collision` (MuJoCo's
conventions: a fixed number of slots per pair type, ``dist < 0`` a penetration, the normal from
geom 1 to geom 2, unused slots far apart).

Each slot becomes a contact between two bodies (:class:`~jaxdyn.sim.contact.ContactFrames`):
the force ``+f`` on the body of geom 2 and ``-f`` on geom 1's (the world's share dropped), at
MuJoCo's contact point (midway between the surfaces), with the friction of the pair combined as
MuJoCo does (the larger of the two geoms'; ``condim = 1``, the larger of the two, is
frictionless).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import spatial
from ..model.urdf import parse_numbers
from .contact import ContactFrames

if TYPE_CHECKING:
    from jax import Array

    from ..algorithms.kinematics import WorldState
    from ..model.model import Model

__all__ = ["Geoms", "GEOM_TYPES", "urdf_geoms"]

#: geom types of the pipeline, in MuJoCo's ``mjtGeom`` order (pairs are ordered by it)
GEOM_TYPES = ("plane", "hfield", "sphere", "capsule", "ellipsoid", "cylinder", "box", "mesh")


class Static:
    """A static value of a pytree compared by identity (hulls' numpy arrays are not hashable)."""

    def __init__(self, value):
        self.value = value

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


def _order(t1, t2):
    return GEOM_TYPES.index(t1) <= GEOM_TYPES.index(t2)


def pair_choice(xp, p1, p2, x1, x2):
    """MuJoCo's ``mj_contactParam`` friction / condim of geom pairs (elementwise): the value of
    the geom of higher ``priority`` (``p1``, ``p2``), the larger of the two where they are
    equal; ``xp``: ``jax.numpy`` or ``numpy`` (see :func:`contact_param`)."""
    first, second = p1 > p2, p2 > p1
    return xp.where(first, x1, xp.where(second, x2, xp.maximum(x1, x2)))


def contact_param(xp, p1, p2, solmix, solref=None, solimp=None):
    """MuJoCo's ``mj_contactParam`` ``(solref, solimp)`` of geom pairs (elementwise over pairs;
    one implementation for :meth:`Geoms.frames`, ``xp = jax.numpy``, and the MJCF loader's
    float64 numpy, ``xp = numpy``): the geom of higher ``priority`` (``p1``, ``p2``) gives the
    pair's parameters; equal priorities mix them with ``mix = w1 / (w1 + w2)`` of ``solmix =
    (w1, w2)`` (0.5 when both weights are below ``mjMINVAL``, 0 or 1 when one is).
    ``solref = (s1, s2)`` ``(..., 2)`` and ``solimp = (i1, i2)`` ``(..., 5)`` (``None``: not
    computed, ``None`` returned): a ``solref`` is the elementwise minimum of the two unless
    both are in the standard (positive) form or the priorities differ."""
    first, second = p1 > p2, p2 > p1
    w1, w2 = xp.asarray(solmix[0]), xp.asarray(solmix[1])
    tiny = 1e-15  # MuJoCo's mjMINVAL
    both = (w1 >= tiny) & (w2 >= tiny)
    one = xp.where(w1 < tiny, xp.where(w2 < tiny, 0.5, 0.0), 1.0)  # a weight below tiny
    mix = xp.where(both, w1 / xp.where(both, w1 + w2, 1.0), one)
    mix = xp.where(first, 1.0, xp.where(second, 0.0, mix))[..., None]
    ref = imp = None
    if solref is not None:
        s1, s2 = solref
        mixed = mix * s1 + (1 - mix) * s2
        standard = (s1[..., :1] > 0) & (s2[..., :1] > 0)
        same = xp.asarray(first | second)[..., None]
        ref = xp.where(standard | same, mixed, xp.minimum(s1, s2))
    if solimp is not None:
        imp = mix * solimp[0] + (1 - mix) * solimp[1]
    return ref, imp


class Geoms(eqx.Module):
    """Collision geoms and their pairs (see the module docstring).

    Array leaves ``(ng, ...)``: ``size (ng, 3)`` (MuJoCo's ``geom_size``: sphere ``[r]``,
    capsule / cylinder ``[r, half-length]``, box / ellipsoid half-sizes), ``pos (ng, 3)`` and
    ``rot (ng, 3, 3)`` (the geom's frame in its body's, columns its axes), ``friction (ng,)``,
    ``rbound (ng,)`` (bounding-sphere radius about ``pos``; ``inf`` for planes).

    Static: ``body`` (jaxdyn body index, ``-1`` the world), ``type`` (names of
    :data:`GEOM_TYPES`), ``condim``, ``names``, ``pairs`` (``(g1, g2)`` with geom 1 first
    in MuJoCo's type order) and ``hulls`` (a :class:`Static` holding a dict geom ->
    :class:`jaxdyn.sim.collision.Hull` in geom coordinates, for the ``mesh`` geoms, and ->
    :class:`jaxdyn.sim.collision.HField` for the ``hfield`` geoms; their ``rbound`` is
    ``inf``).

    Contact parameters (array leaves, ``None``: MuJoCo's defaults), combined per pair as
    MuJoCo 4.0's ``mj_collideGeoms`` does: ``margin (ng,)`` (the pair's: the sum of the two
    geoms'; a slot's ``distance`` is reported as ``dist - margin``, so that the contact acts
    from ``dist < margin`` and rests at that distance, MuJoCo's ``includemargin``; MuJoCo's
    ``gap`` only adds contacts beyond the margin that never carry a force); ``solref (ng, 2)``
    (``timeconst, dampratio``) mixed with the weights ``solmix (ng,)`` (``w1 / (w1 + w2)``),
    given to the contact models per contact (:attr:`ContactFrames.solref`; two ``solref`` of
    which one is in MuJoCo's direct, negative form combine by their elementwise minimum, as
    MuJoCo does); ``solimp (ng, 5)`` mixed with the same weights, and ``invweight (ng,)``
    (MuJoCo's ``body_invweight0`` translation entry of each geom's body, 0 for the world's)
    summed per pair: what ``Constraint(soft=True)`` uses (:attr:`ContactFrames.solimp`,
    :attr:`ContactFrames.invweight`).

    ``priority`` (static, ``(ng,)`` ints; ``None``: all 0): MuJoCo's geom ``priority``. A pair
    whose geoms' priorities differ takes its friction, condim and solref from the geom of
    higher priority instead of combining them (``mj_contactParam``: no ``max``, no
    ``solmix``); equal priorities combine as above.

    ``spin (ng, 2)`` (array leaf, ``None``: none): each geom's torsional and rolling friction
    (MuJoCo's ``geom_friction[1:3]``), needed where a geom's ``condim`` is 4 (torsional) or 6
    (rolling); mixed per pair as the sliding friction (priority, else the larger) and clamped
    to MuJoCo's ``mjMINMU``, on the pairs whose condim has the rows
    (:attr:`ContactFrames.spin`; :class:`Constraint` only, hard or soft).

    Explicit pairs (MuJoCo's ``<contact><pair>``, ``mj_collideGeoms`` of a ``pair_*``
    entry): ``explicit`` (static, ``None``: none) the indices in ``pairs`` of the pairs that
    carry their own contact parameters, which replace the geoms' combined ones for every slot
    of that pair: ``pair_condim`` (static ints, 1, 3, 4 or 6), ``pair_friction (ne,)`` (the
    sliding coefficient), ``pair_spin (ne, 2)`` (the torsional and rolling coefficients,
    MuJoCo's ``pair_friction[2:4]``; needed where a ``pair_condim`` is 4 or 6, clamped to
    ``mjMINMU`` as the geoms' ``spin``), and, ``None`` for MuJoCo's defaults,
    ``pair_margin (ne,)`` (the pair's margin itself, not a sum), ``pair_solref (ne, 2)``,
    ``pair_solimp (ne, 5)`` and ``pair_solreffriction (ne, 2)`` (``(0, 0)``: the contact's
    ``solref``; it reaches the contacts as :attr:`ContactFrames.solreffriction`, the other
    slots ``(0, 0)``).
    """

    # numpy when built (loaders), jax arrays where traced (pytree leaves)
    size: jnp.ndarray | np.ndarray
    pos: jnp.ndarray | np.ndarray
    rot: jnp.ndarray | np.ndarray
    friction: jnp.ndarray | np.ndarray
    rbound: jnp.ndarray | np.ndarray
    body: tuple = eqx.field(static=True)
    type: tuple = eqx.field(static=True)
    condim: tuple = eqx.field(static=True)
    names: tuple = eqx.field(static=True)
    pairs: tuple = eqx.field(static=True)
    hulls: Static | None = eqx.field(static=True, default=None)
    margin: jnp.ndarray | np.ndarray | None = None
    solref: jnp.ndarray | np.ndarray | None = None
    solmix: jnp.ndarray | np.ndarray | None = None
    priority: tuple | None = eqx.field(static=True, default=None)
    solimp: jnp.ndarray | np.ndarray | None = None
    invweight: jnp.ndarray | None = None
    spin: jnp.ndarray | np.ndarray | None = None
    explicit: tuple | None = eqx.field(static=True, default=None)
    pair_condim: tuple | None = eqx.field(static=True, default=None)
    pair_friction: jnp.ndarray | np.ndarray | None = None
    pair_margin: jnp.ndarray | np.ndarray | None = None
    pair_solref: jnp.ndarray | np.ndarray | None = None
    pair_solimp: jnp.ndarray | np.ndarray | None = None
    pair_solreffriction: jnp.ndarray | np.ndarray | None = None
    pair_spin: jnp.ndarray | np.ndarray | None = None

    _PAIR_FIELDS = (
        ("pair_friction", ()),
        ("pair_margin", ()),
        ("pair_solref", (2,)),
        ("pair_solimp", (5,)),
        ("pair_solreffriction", (2,)),
        ("pair_spin", (2,)),
    )

    def _check_explicit(self):
        """The explicit pairs' fields (see the class docstring)."""
        given = [f for f, _ in self._PAIR_FIELDS if getattr(self, f) is not None]
        if self.explicit is None:
            if given or self.pair_condim is not None:
                raise ValueError(f"Geoms: {given or ['pair_condim']} given without explicit")
            return
        ex = tuple(self.explicit)
        ne = len(ex)
        if len(set(ex)) != ne or not all(0 <= int(k) < len(self.pairs) for k in ex):
            raise ValueError(f"Geoms: explicit {ex} must be distinct indices of the pairs")
        if self.pair_friction is None or self.pair_condim is None:
            raise ValueError("Geoms: explicit pairs need pair_friction and pair_condim")
        if len(self.pair_condim) != ne or any(int(c) not in (1, 3, 4, 6) for c in self.pair_condim):
            raise ValueError(
                f"Geoms: pair_condim must be {ne} values of 1, 3, 4 or 6, got {self.pair_condim}"
            )
        if self.pair_spin is None and any(int(c) > 3 for c in self.pair_condim):
            raise ValueError(
                "Geoms: pair_condim 4 / 6 (torsional / rolling friction) needs pair_spin, the "
                "pairs' (torsional, rolling) friction (ne, 2)"
            )
        for name, tail in self._PAIR_FIELDS:
            x = getattr(self, name)
            if x is not None and np.shape(x) != (ne, *tail):
                raise ValueError(f"Geoms: {name} has shape {np.shape(x)}, expected {(ne, *tail)}")

    def __check_init__(self):
        self._check_explicit()
        ng = len(self.names)
        bad = sorted({c for c in self.condim} - {1, 3, 4, 6})
        if bad:
            raise ValueError(f"Geoms: condim must be 1, 3, 4 or 6 (MuJoCo's), got {bad}")
        if self.spin is None and any(c > 3 for c in self.condim):
            raise ValueError(
                "Geoms: condim 4 / 6 (torsional / rolling friction) needs spin, the geoms' "
                "(torsional, rolling) friction (ng, 2)"
            )
        if self.priority is not None and len(self.priority) != ng:
            raise ValueError(f"Geoms: priority has {len(self.priority)} entries, not {ng}")
        for name, n in (("body", ng), ("type", ng), ("condim", ng)):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Geoms: {name} has {len(getattr(self, name))} entries, not {ng}")
        for name, shape in (
            ("margin", (ng,)),
            ("solref", (ng, 2)),
            ("solimp", (ng, 5)),
            ("invweight", (ng,)),
            ("spin", (ng, 2)),
        ):
            x = getattr(self, name)
            if x is not None and np.shape(x) != shape:
                raise ValueError(f"Geoms: {name} has shape {np.shape(x)}, expected {shape}")
        if self.solmix is not None and np.shape(self.solmix) != (ng,):
            raise ValueError(f"Geoms: solmix has shape {np.shape(self.solmix)}, expected {(ng,)}")
        for t in self.type:
            if t not in GEOM_TYPES:
                raise ValueError(f"Geoms: unknown geom type {t!r}; known: {GEOM_TYPES}")
        for g1, g2 in self.pairs:
            if not (0 <= g1 < ng and 0 <= g2 < ng) or g1 == g2:
                raise ValueError(f"Geoms: bad pair {(g1, g2)} of {ng} geoms")
            if not _order(self.type[g1], self.type[g2]):
                raise ValueError(
                    f"Geoms: pair {self.names[g1]!r}-{self.names[g2]!r} not in MuJoCo's type "
                    f"order ({self.type[g1]} after {self.type[g2]})"
                )
            if self.body[g1] == self.body[g2]:
                raise ValueError(
                    f"Geoms: pair {self.names[g1]!r}-{self.names[g2]!r} is on one body"
                )

    @property
    def n(self) -> int:
        return len(self.names)

    def contact_dims(self) -> np.ndarray:
        """Each pair's condim (static, ``mj_contactParam``: :func:`pair_choice`; an explicit
        pair's own ``pair_condim``)."""
        if not self.pairs:
            return np.zeros(0, np.int64)
        i1, i2 = (np.asarray(x) for x in zip(*self.pairs, strict=True))
        pr = np.zeros(self.n, np.int64) if self.priority is None else np.asarray(self.priority)
        cd = np.asarray(self.condim)
        out = np.asarray(pair_choice(np, pr[i1], pr[i2], cd[i1], cd[i2]), np.int64)
        if self.explicit is not None and self.pair_condim is not None:
            out[np.asarray(self.explicit, np.int64)] = np.asarray(self.pair_condim, np.int64)
        return out

    def groups(self) -> list[tuple[tuple[str, str], np.ndarray, np.ndarray]]:
        """The pairs grouped by type: ``[((t1, t2), g1 (k,), g2 (k,)), ...]`` (static)."""
        return [(key, i1, i2) for key, i1, i2, _ in self._groups()]

    def _groups(self):
        """:meth:`groups` with each pair's index in ``pairs``: ``[(key, g1, g2, k), ...]``."""
        out = {}
        for k, (g1, g2) in enumerate(self.pairs):
            out.setdefault((self.type[g1], self.type[g2]), []).append((g1, g2, k))
        return [(key, *(np.asarray([x[j] for x in v]) for j in range(3))) for key, v in out.items()]

    def world_poses(self, ws: WorldState, origin: Array) -> tuple[Array, Array]:
        """Rotations ``(ng, 3, 3)`` and positions ``(ng, 3)`` of the geoms in the world-state
        frame (world axes, positions relative to ``origin``)."""
        body = np.asarray(self.body, np.int64)
        world = body < 0
        dtype = ws.p.dtype
        rot, pos = self.rot.astype(dtype), self.pos.astype(dtype)
        Rb = ws.R[np.maximum(body, 0)]
        pb = ws.p[np.maximum(body, 0)]
        if np.any(world):
            w = jnp.asarray(world)
            Rb = jnp.where(w[:, None, None], jnp.eye(3, dtype=dtype), Rb)
            pb = jnp.where(w[:, None], -origin, pb)
        return Rb @ rot, spatial.mv(Rb, pos) + pb

    def frames(self, ws: WorldState, origin: Array, body_velocity: Array) -> ContactFrames:
        """The contacts of every pair's slots as :class:`ContactFrames` (slots without a
        contact, or whose bounding spheres are apart, at ``collision.NO_CONTACT`` distance);
        a plane - capsule pair's carry the capsule's axis as their ``tangent`` (MuJoCo's
        ``mjc_PlaneCapsule``: the first axis of their pyramids)."""
        from . import collision

        R, p = self.world_poses(ws, origin)
        dtype = p.dtype
        dims = self.contact_dims()  # each pair's condim (an explicit pair's own)
        top = int(dims.max(initial=0))
        nspin = {4: 1, 6: 2}.get(top, 0)  # the contacts' torsional / rolling columns
        size = self.size.astype(dtype)
        rb = self.rbound.astype(dtype)
        fr = self.friction.astype(dtype)
        zero = jnp.zeros(self.n, dtype)
        margin = zero if self.margin is None else jnp.asarray(self.margin, dtype)
        parts = []
        hulls = {} if self.hulls is None else self.hulls.value
        # explicit pairs (<contact><pair>): each pair's row of the pair_* arrays, -1 for none
        row_of = {} if self.explicit is None else {int(k): j for j, k in enumerate(self.explicit)}
        want_sr = self.solref is not None or self.pair_solref is not None
        want_si = self.solimp is not None or self.pair_solimp is not None
        for (t1, t2), i1, i2, ks in self._groups():
            if t1 == "hfield" and t2 != "mesh":  # one call per heightfield, partners batched
                order = np.argsort(i1, kind="stable")
                i1, i2, ks = i1[order], i2[order], ks[order]
            mg = margin[i1] + margin[i2]  # MuJoCo: the sum of the two
            rows = np.asarray([row_of.get(int(k), -1) for k in ks], np.int64)
            isx = rows >= 0  # static: the group's explicit pairs
            erow, isxj = np.maximum(rows, 0), jnp.asarray(isx)

            def explicit(field, mixed, erow=erow, isxj=isxj, isx=isx):
                """``mixed`` with the explicit pairs' ``field`` where they give it."""
                x = getattr(self, field)
                if x is None or not isx.any():
                    return mixed
                x = jnp.asarray(x, dtype)[erow]
                return jnp.where(isxj.reshape(isxj.shape + (1,) * (x.ndim - 1)), x, mixed)

            if isx.any():  # the pair's margin replaces the sum (MuJoCo: pair_margin)
                pm = np.zeros(len(row_of)) if self.pair_margin is None else self.pair_margin
                mg = jnp.where(isxj, jnp.asarray(pm, dtype)[erow], mg)
            if t1 == "hfield" and t2 != "mesh":
                cs = []
                for a in dict.fromkeys(i1.tolist()):
                    sel = i1 == a
                    b = i2[sel]
                    cs.append(
                        jax.vmap(
                            lambda s2, p2, m2, mgi, a=a, t2=t2: collision.collide(
                                "hfield", t2, hulls[a], p[a], R[a], s2, p2, m2, margin=mgi
                            )
                        )(size[b], p[b], R[b], mg[np.nonzero(sel)[0]])
                    )
                c = collision.Contact(*(jnp.concatenate(x) for x in zip(*cs, strict=True)))
            elif {"mesh", "hfield"} & {t1, t2}:  # one call per pair: hulls differ in sizes
                cs = []
                for j, (a, b) in enumerate(zip(i1, i2, strict=True)):
                    s1 = hulls[int(a)] if t1 in ("mesh", "hfield") else size[a]
                    s2 = hulls[int(b)] if t2 == "mesh" else size[b]
                    cs.append(
                        collision.collide(t1, t2, s1, p[a], R[a], s2, p[b], R[b], margin=mg[j])
                    )
                c = collision.Contact(*(jnp.stack(x) for x in zip(*cs, strict=True)))
            else:
                c = jax.vmap(
                    lambda s1, p1, m1, s2, p2, m2, mgi, t1=t1, t2=t2: collision.collide(
                        t1, t2, s1, p1, m1, s2, p2, m2, margin=mgi
                    )
                )(size[i1], p[i1], R[i1], size[i2], p[i2], R[i2], mg)
            k = c.dist.shape[1]
            apart = jnp.sqrt(jnp.sum((p[i1] - p[i2]) ** 2, -1)) - rb[i1] - rb[i2] - mg
            far = jnp.where(jnp.isfinite(apart), apart > 0, False)  # planes: never apart
            # the contact acts below the margin (MuJoCo's includemargin): distances from there
            dist = jnp.where(
                far[:, None], jnp.asarray(collision.NO_CONTACT, dtype), c.dist - mg[:, None]
            )
            b1 = np.asarray(self.body, np.int64)[i1]
            b2 = np.asarray(self.body, np.int64)[i2]
            # the force +f goes to a moving body: where geom 2 is the world's, the pair is
            # seen from geom 1 (normal reversed)
            flip = b2 < 0
            sign = jnp.asarray(np.where(flip, -1.0, 1.0), dtype)[:, None, None]
            body = np.where(flip, b1, b2)
            other = np.where(flip, b2, b1)
            # MuJoCo's mj_contactParam: friction and condim (pair_choice), solref, solimp
            pr = np.zeros(self.n, np.int64) if self.priority is None else np.asarray(self.priority)
            p1, p2 = pr[i1], pr[i2]
            mu = pair_choice(jnp, p1, p2, fr[i1], fr[i2])
            cond = dims[ks]
            if isx.any():  # an explicit pair's friction replaces the mixed one
                mu = explicit("pair_friction", mu)
            mu = jnp.where(jnp.asarray(cond == 1), 0.0, mu)
            if nspin:  # condim 4 / 6: MuJoCo's mjMINMU on the sliding friction too
                mu = jnp.where(jnp.asarray(cond >= 4), jnp.maximum(mu, 1e-5), mu)
            sr = si = iw = srf = None
            if self.solref is not None or self.solimp is not None:
                w = jnp.ones(self.n, dtype) if self.solmix is None else jnp.asarray(self.solmix)
                w1, w2 = w[i1].astype(dtype), w[i2].astype(dtype)
                sref = None if self.solref is None else jnp.asarray(self.solref, dtype)
                simp = None if self.solimp is None else jnp.asarray(self.solimp, dtype)
                pair, imp = contact_param(
                    jnp,
                    p1,
                    p2,
                    (w1, w2),
                    solref=None if sref is None else (sref[i1], sref[i2]),
                    solimp=None if simp is None else (simp[i1], simp[i2]),
                )
                sr = None if pair is None else jnp.repeat(pair, k, axis=0)
                si = None if imp is None else jnp.repeat(imp, k, axis=0)
            if self.explicit is not None:  # explicit pairs: their own solref, solimp
                n = len(i1)
                if want_sr:
                    base = sr[::k] if sr is not None else _default(n, _SOLREF, dtype)
                    sr = jnp.repeat(explicit("pair_solref", base), k, axis=0)
                if want_si:
                    base = si[::k] if si is not None else _default(n, _SOLIMP, dtype)
                    si = jnp.repeat(explicit("pair_solimp", base), k, axis=0)
                if self.pair_solreffriction is not None:
                    srf = jnp.repeat(
                        explicit("pair_solreffriction", _default(n, (0, 0), dtype)), k, 0
                    )
            if self.invweight is not None:
                iwg = jnp.asarray(self.invweight, dtype)
                iw = jnp.repeat(iwg[i1] + iwg[i2], k)
            spin = None
            if nspin:  # torsional / rolling friction (mj_contactParam, mjMINMU) where condim has it
                sg = jnp.zeros((self.n, 2), dtype) if self.spin is None else self.spin
                sg = jnp.asarray(sg, dtype)
                mix = pair_choice(jnp, p1[:, None], p2[:, None], sg[i1], sg[i2])
                mix = explicit("pair_spin", mix)  # an explicit pair's own (MuJoCo's pair_friction)
                has = jnp.asarray(np.stack([cond >= 4, cond >= 6], -1))
                spin = jnp.where(has, jnp.maximum(mix, 1e-5), 0.0)[:, :nspin]  # mjMINMU
                spin = jnp.repeat(spin, k, axis=0)
            # MuJoCo's mjc_PlaneCapsule: the capsule's axis is the contacts' first tangent
            # (ContactFrames.tangent; zeros: MuJoCo's default frame)
            plane_capsule = (t1, t2) in (("plane", "capsule"), ("capsule", "plane"))
            if plane_capsule:
                cap = i2 if t2 == "capsule" else i1
                tg = jnp.repeat(R[cap][:, :, 2], k, axis=0)
            else:
                tg = jnp.zeros((len(i1) * k, 3), dtype)
            parts.append(
                (
                    dist.reshape(-1),
                    (sign * c.normal).reshape(-1, 3),
                    c.pos.reshape(-1, 3),
                    jnp.repeat(mu, k),
                    np.repeat(body, k),
                    np.repeat(other, k),
                    sr,
                    si,
                    iw,
                    tg,
                    plane_capsule,
                    spin,
                    srf,
                )
            )
        dist = jnp.concatenate([x[0] for x in parts])
        normal = jnp.concatenate([x[1] for x in parts])
        point = jnp.concatenate([x[2] for x in parts])
        mu = jnp.concatenate([x[3] for x in parts])
        body = np.concatenate([x[4] for x in parts])
        other = np.concatenate([x[5] for x in parts])

        def vel(b):
            vb = body_velocity[np.maximum(b, 0)]
            v = vb[:, 3:] + spatial.cross(vb[:, :3], point)
            return jnp.where(jnp.asarray(b >= 0)[:, None], v, 0.0) if np.any(b < 0) else v

        velocity = vel(body) - vel(other)
        has = lambda j: any(x[j] is not None for x in parts)  # noqa: E731
        solref = jnp.concatenate([x[6] for x in parts]) if has(6) else None
        solimp = jnp.concatenate([x[7] for x in parts]) if has(7) else None
        invweight = None if self.invweight is None else jnp.concatenate([x[8] for x in parts])
        turned = any(x[10] for x in parts)
        tangent = jnp.concatenate([x[9] for x in parts]) if turned else None
        has_srf = self.pair_solreffriction is not None
        srf = jnp.concatenate([x[12] for x in parts]) if has_srf else None
        return ContactFrames(
            dist,
            normal,
            point,
            velocity,
            mu,
            tuple(int(b) for b in body),
            tuple(int(b) for b in other),
            solref=solref,
            solimp=solimp,
            invweight=invweight,
            tangent=tangent,
            spin=jnp.concatenate([x[11] for x in parts]) if nspin else None,
            solreffriction=srf,
        )


_SOLREF = (0.02, 1.0)  # MuJoCo's default solref and solimp
_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)


def _default(n, value, dtype):
    """``value`` repeated ``(n, len(value))``."""
    return jnp.broadcast_to(jnp.asarray(value, dtype), (n, len(value)))


# ------------------------------------------------------------------------------------ URDF
def _urdf_floats(text, n, what):
    """``n`` finite numbers of a URDF attribute (``what`` names it in the error)."""
    return parse_numbers(text or "", n, what)


def urdf_geoms(
    model: Model,
    source: str | os.PathLike,
    *,
    allow: Iterable[tuple[str, str]] = (),
    deny: Iterable[tuple[str, str]] = (),
    package_dirs: Sequence[str | os.PathLike] = (),
    allow_outside: bool = False,
    friction: float = 1.0,
    keep_unpaired: bool = False,
) -> Geoms | None:
    """The ``<collision>`` elements of a URDF file as :class:`Geoms` on ``model``'s links
    (``model`` loaded from the same file), with the pairs that may touch: geoms on different
    bodies, except bodies adjacent in the tree (a joint between them: a parent and its child)
    and the link pairs of ``deny``; ``allow``: link pairs that collide even though adjacent.
    ``None`` when no pair remains (with ``keep_unpaired``: the geoms without a pair, for
    :class:`jaxdyn.sim.Scene`, which pairs them with the other parts'; ``None`` without geoms).

    Shapes: ``sphere``, ``box``, ``cylinder``, ``capsule`` and ``mesh`` (its convex hull, scipy's
    Qhull; STL and OBJ read directly, other formats through ``trimesh``, the ``viz`` extra; a
    non-convex mesh gets a warning naming it; mesh paths as :func:`jaxdyn.viz.scene
    .resolve_mesh`: inside the URDF's directory or package unless ``allow_outside``). A pair of
    shapes without a narrow phase raises ``ValueError`` naming the two elements.
    ``friction``: every geom's Coulomb coefficient (URDF has none)."""
    import warnings
    import xml.etree.ElementTree as ET
    from pathlib import Path

    from ..model.urdf import rpy_to_matrix
    from ..viz.scene import read_mesh, resolve_mesh
    from . import collision

    source = Path(source)
    root = ET.parse(source).getroot()
    urdf_dir = source.resolve().parent
    t = model.topo
    frames = {n: i for i, n in enumerate(model.frame_names)}
    body, types, sizes, rots, poss, names, links, hulls = [], [], [], [], [], [], [], {}
    for link in root.findall("link"):
        lname = link.get("name")
        if lname not in frames:
            raise ValueError(f"urdf_geoms: link {lname!r} of {source.name} is not in the model")
        f = frames[lname]
        b = int(t.frame_parent[f])
        Rf, pf = np.asarray(model.frame_R[f], float), np.asarray(model.frame_p[f], float)
        for k, el in enumerate(link.findall("collision")):
            what = f"link {lname!r} <collision> {k}"
            o = el.find("origin")
            R, p = np.eye(3), np.zeros(3)
            if o is not None:
                R = np.asarray(rpy_to_matrix(_urdf_floats(o.get("rpy", "0 0 0"), 3, what)))
                p = _urdf_floats(o.get("xyz", "0 0 0"), 3, what)
            g = el.find("geometry")
            shape = g[0] if g is not None and len(g) else None
            if shape is None:
                raise ValueError(f"urdf_geoms: {source.name}: {what} has no <geometry>")
            size = np.zeros(3)
            if shape.tag == "sphere":
                size[0] = _urdf_floats(shape.get("radius"), 1, f"{what} <sphere radius>")[0]
            elif shape.tag == "box":
                size[:] = _urdf_floats(shape.get("size"), 3, f"{what} <box size>") / 2
            elif shape.tag in ("cylinder", "capsule"):
                size[0] = _urdf_floats(shape.get("radius"), 1, f"{what} radius")[0]
                size[1] = _urdf_floats(shape.get("length"), 1, f"{what} length")[0] / 2
            elif shape.tag == "mesh":
                scale = _urdf_floats(shape.get("scale", "1 1 1"), 3, f"{what} <mesh scale>")
                path = resolve_mesh(
                    shape.get("filename") or "", urdf_dir, package_dirs, allow_outside
                )
                verts = read_mesh(path)[0] * scale
                hull = collision.hull_from_points(verts)
                if not _convex(verts, hull):
                    warnings.warn(
                        f"urdf_geoms: {what} ({path.name}): the mesh is not convex; it "
                        "collides as its convex hull",
                        stacklevel=2,
                    )
                hulls[len(names)] = hull
                size[:] = np.ptp(np.asarray(hull.vertices), axis=0) / 2
            else:
                raise ValueError(f"urdf_geoms: {source.name}: {what}: unknown <{shape.tag}>")
            body.append(b)
            types.append(shape.tag)
            sizes.append(size)
            rots.append(Rf @ R)
            poss.append(Rf @ p + pf)
            names.append(f"{lname}/collision{k}")
            links.append(lname)
    allow_s = {frozenset(p) for p in allow}
    deny_s = {frozenset(p) for p in deny}
    pairs, bad = [], []
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            bi, bj = body[i], body[j]
            key = frozenset((links[i], links[j]))
            if bi == bj or key in deny_s:
                continue
            adjacent = (bi >= 0 and int(t.parent[bi]) == bj) or (
                bj >= 0 and int(t.parent[bj]) == bi
            )
            if adjacent and key not in allow_s:
                continue
            a, c = (i, j) if _order(types[i], types[j]) else (j, i)
            if (types[a], types[c]) not in collision.PAIRS:
                bad.append(f"{names[a]} ({types[a]})-{names[c]} ({types[c]})")
                continue
            pairs.append((a, c))
    if bad:
        raise ValueError(
            f"urdf_geoms: {source.name}: no narrow phase for {', '.join(bad[:6])}"
            + (f" ... ({len(bad)} in all)" if len(bad) > 6 else "")
            + "; deny=[(link1, link2), ...] skips a pair"
        )
    if not names or not (pairs or keep_unpaired):
        return None
    rb = []
    for k, ty in enumerate(types):
        s = sizes[k]
        rb.append(
            {"sphere": s[0], "capsule": s[0] + s[1], "cylinder": np.hypot(s[0], s[1])}.get(
                ty, float(np.linalg.norm(s))
            )
            if ty != "mesh"
            else float(np.max(np.linalg.norm(np.asarray(hulls[k].vertices), axis=1)))
        )
    return Geoms(
        size=np.asarray(sizes),
        pos=np.asarray(poss),
        rot=np.asarray(rots),
        friction=np.full(len(names), float(friction)),
        rbound=np.asarray(rb, float),
        body=tuple(body),
        type=tuple(types),
        condim=(3,) * len(names),
        names=tuple(names),
        pairs=tuple(pairs),
        hulls=Static(hulls) if hulls else None,
    )


def _convex(verts, hull, rtol=1e-6) -> bool:
    """Whether every vertex lies on the surface of ``hull`` (none strictly inside)."""
    n = np.asarray(hull.normals, float)
    off = np.max(np.asarray(hull.vertices, float) @ n.T, axis=0)
    scale = float(np.ptp(verts, axis=0).max())
    return bool(np.all((verts @ n.T - off).max(axis=1) >= -rtol * scale))

"""Contact models: compliant (penalty) and constraint-based (complementarity, on the Delassus
matrix), with one API.

Both start from the same kinematics (:func:`contact_frames`): for every contact sphere its
signed distance ``d`` to the terrain, the normal ``n``, the contact point ``x = c - r n`` and
the point's velocity.

**Compliant** (:class:`Compliant`): a smooth spring-damper along the normal and regularised
Coulomb friction,

    pen = eps softplus(-d / eps),   fn = smax0(k pen - c vn pen / (pen + eps)),
    ft = -mu fn vt / sqrt(|vt|^2 + vs^2),

where ``smax0(x) = x sigmoid(x / (k eps))``. Every term is smooth, so gradients stay finite at
zero penetration, zero slip and zero velocity; ``eps`` (``smoothing``) and ``vs`` (``slip``)
set how far the smooth model departs from the hard one (a resting contact creeps at speeds of
order ``vs``).

**Constraint** (:class:`Constraint`): a velocity-level time-stepping contact (Stewart &
Trinkle 1996): with the Delassus matrix ``G = J M^-1 J^T`` of the contact points (rows
``[n, t1, t2]`` per contact) and the contact velocity ``u = J v_free + b`` the step would reach
without contact, find impulses ``lam`` in the friction cones ``K = {|lam_t| <= mu lam_n}``
and contact velocities ``w = G_r lam + u`` that satisfy Coulomb's law: no impulse on a
separating contact (``w_n > 0``), a sticking one at ``w = 0``, a sliding one on the cone's
surface opposing its slip at ``w_n = 0``. In De Saxce's form (De Saxce & Feng 1998; Acary &
Brogliato 2008, ch. 13) that is the fixed point

    lam = P_K(lam - rho (w + mu |w_t| e_n))   (any rho > 0),

where ``G_r = G + R`` carries a small regularisation ``R = r diag(G)`` (soft contact; makes
``G_r`` positive definite with redundant contacts). ``b`` lets the normal velocity close a gap
``d > 0`` within the step and removes a penetration at rate ``baumgarte / dt``.

Without the term ``mu |w_t| e_n`` the fixed point is Anitescu 2006's convex relaxation (the
minimiser of ``1/2 lam^T G_r lam + u^T lam`` over the cones, as in MuJoCo and Drake's SAP):
its solution exists and is unique, but a *sliding* contact leaves the step with the normal
velocity ``w_n = mu |w_t|``: a box sliding at 2 m/s (mu = 0.5, 2 ms steps) rises at 0.8 m/s
after one step, loses a fifth of its speed and hops 33 mm. ``Constraint(relaxed=True)`` keeps
that formulation; the default solves Coulomb's law by the same accelerated projected gradient
with the De Saxce term in its gradient (a fixed-point iteration that has no convergence proof
in general, as Coulomb friction problems have no uniqueness; in practice it converges as fast
as the relaxed problem's).

Accelerated projected gradient runs a fixed number of steps by default (no data-dependent
control flow, only matrix-vector products and cone projections: the same program on CPU and
GPU; ``Constraint(tolerance=...)`` stops them early instead, and ``warm_start=True`` starts
them from the previous step's impulses, carried in the simulator state) of size
``1 / L`` with ``L >= lambda_max(S G_r S)`` (:func:`lambda_max_bound`), ``S`` a diagonal
scaling that brings scalar rows (joint limits) to the contacts' weight (a light joint's limit
row beside a torso's contacts then converges with them; the identity without such rows);
derivatives are *not*
taken through the iterations but by implicit differentiation of the fixed point:
``(I - dF/dlam) dlam = dF/dG dG + dF/du du + dF/dmu dmu`` (:func:`solve_cone_complementarity`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, cast

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import _linalg as linalg
from .. import spatial
from . import _params, _scatter, _soft
from .collision import NO_CONTACT, mujoco_tangents

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..algorithms.kinematics import WorldState
    from ..model.model import Model
    from .geometry import ContactSet, Heightfield, Plane

__all__ = [
    "Compliant",
    "Constraint",
    "ContactFrames",
    "contact_frames",
    "compliant_forces",
    "compliant_damping",
    "solve_cone_complementarity",
    "project_cone",
]


class ContactFrames(eqx.Module):
    """Per-contact kinematics (arrays ``(nc, ...)``, world axes; positions relative to the
    origin of the world state they were computed from).

    A contact acts between ``body`` (static, one per contact), which receives the force ``+f``,
    and ``other`` (static; ``-1``: the world, the terrain), which receives ``-f``; ``normal``
    points from ``other`` to ``body`` and ``velocity`` is the velocity of ``body``'s point at
    ``point`` relative to ``other``'s. ``friction (nc,)``: each contact's Coulomb coefficient
    (``None``: the contact model's); ``solref (nc, 2)``: each contact's MuJoCo ``solref``
    ``(timeconst, dampratio)`` (``None``: the contact model's; see :class:`Compliant`,
    :class:`Constraint`); ``solimp (nc, 5)``: each contact's MuJoCo ``solimp`` and
    ``invweight (nc,)``: the sum of its two bodies' MuJoCo ``body_invweight0`` (translation;
    the world's 0), the ``diagApprox`` of its rows (both used by ``Constraint(soft=True)``
    only; ``None``: MuJoCo's default ``solimp``, and the Delassus matrix's own diagonal);
    ``tangent (nc, 3)``: each contact's given first tangent, the axis of MuJoCo's pyramid
    (``mjContact.frame[3:6]`` before ``mju_makeFrame``: a capsule's axis on a plane,
    ``mjc_PlaneCapsule``); a row shorter than 0.5, and ``None``, MuJoCo's default frame
    (zeros, as MuJoCo's ``tangent``, rather than NaN: a NaN row would poison gradients through
    the ``where`` that drops it; :func:`mujoco_tangents`, ``Constraint(cone="pyramidal")``
    only); ``spin (nc, 1)`` or ``(nc, 2)``: each contact's torsional and (second column)
    rolling friction coefficients, MuJoCo's ``condim`` 4 and 6 (``mjContact.friction[2]``,
    ``[3:5]``), ``0`` where a contact has no such rows (its condim is lower); the contacts then
    have rows ``[n, t1, t2, n_w]`` or ``[n, t1, t2, n_w, t1_w, t2_w]``, the last ones on the
    relative angular velocity (``None``: condim 1 / 3 only; :class:`Constraint` only);
    ``solreffriction (nc, 2)``: each contact's MuJoCo ``solreffriction`` (an MJCF
    ``<contact><pair>``'s; ``(0, 0)``, and ``None``, the contact's ``solref``;
    ``Constraint(soft=True)`` with elliptic cones only, where the contact model gives none)."""

    distance: jnp.ndarray  # (nc,) signed distance to the terrain (< 0: penetration)
    normal: jnp.ndarray  # (nc, 3) terrain normal (unit)
    point: jnp.ndarray  # (nc, 3) contact point x = c - r n
    velocity: jnp.ndarray  # (nc, 3) velocity of the body point at x
    friction: jnp.ndarray | None = None
    body: tuple = eqx.field(static=True, default=())
    other: tuple = eqx.field(static=True, default=())
    solref: jnp.ndarray | None = None
    solimp: jnp.ndarray | None = None
    invweight: jnp.ndarray | None = None
    tangent: jnp.ndarray | None = None
    spin: jnp.ndarray | None = None
    solreffriction: jnp.ndarray | None = None

    @property
    def width(self) -> int:
        """The rows of each contact (static): 3 (``[n, t1, t2]``), 4 with torsional friction,
        6 with rolling friction (:attr:`spin`)."""
        return 3 if self.spin is None else (4 if self.spin.shape[-1] == 1 else 6)

    def split_velocity(self) -> tuple[Array, Array]:
        vn = jnp.sum(self.velocity * self.normal, -1)
        return vn, self.velocity - vn[:, None] * self.normal

    @property
    def body_index(self) -> np.ndarray:
        return np.asarray(self.body, np.int64)

    @property
    def other_index(self) -> np.ndarray:
        return np.asarray(self.other, np.int64)


#: MuJoCo's default ``solref``: the contact models' time constant and damping ratio where neither
#: they nor the contacts give one
DEFAULT_TIMECONST = 0.02
DEFAULT_DAMPRATIO = 1.0
#: :class:`Constraint`'s fraction of a penetration removed per step where neither it nor the
#: contacts give one
DEFAULT_BAUMGARTE = 0.2


def _fill(parts, name: str, default) -> Array | None:
    """The per-contact field ``name`` of ``parts`` concatenated, ``default`` (one contact's
    value) in the rows of a part without it; ``None`` when no part has it."""
    if all(getattr(p, name) is None for p in parts):
        return None
    rows = []
    for p in parts:
        x = getattr(p, name)
        if x is None:
            shape = p.distance.shape + np.shape(default)
            x = jnp.broadcast_to(jnp.asarray(default, p.distance.dtype), shape)
        rows.append(x)
    return jnp.concatenate(rows, 0)


def concat_frames(parts):
    """One :class:`ContactFrames` of the contacts of ``parts`` (in order)."""
    parts = [p for p in parts if p is not None]
    if len(parts) == 1:
        return parts[0]
    cat = lambda xs: jnp.concatenate(xs, 0)  # noqa: E731
    fr = _fill(parts, "friction", 1.0)
    sr = _fill(parts, "solref", np.array([DEFAULT_TIMECONST, DEFAULT_DAMPRATIO]))  # MuJoCo's
    si = _fill(parts, "solimp", np.array(_soft.DEFAULT_SOLIMP))
    iw = _fill(parts, "invweight", np.nan)  # NaN: the Delassus matrix's diagonal
    tg = _fill(parts, "tangent", np.zeros(3))  # zeros: MuJoCo's default frame
    k = max((p.spin.shape[-1] for p in parts if p.spin is not None), default=0)
    sp = None
    if k:  # the parts' torsional / rolling friction, 0 (no such rows) where a part has none
        sp = jnp.concatenate(
            [
                jnp.zeros(p.distance.shape + (k,), p.distance.dtype)
                if p.spin is None
                else jnp.pad(p.spin, ((0, 0), (0, k - p.spin.shape[-1])))
                for p in parts
            ],
            0,
        )
    srf = _fill(parts, "solreffriction", np.zeros(2))  # (0, 0): the contact's solref
    return ContactFrames(
        cat([p.distance for p in parts]),
        cat([p.normal for p in parts]),
        cat([p.point for p in parts]),
        cat([p.velocity for p in parts]),
        fr,
        sum((p.body for p in parts), ()),
        sum((p.other for p in parts), ()),
        solref=sr,
        solimp=si,
        invweight=iw,
        tangent=tg,
        spin=sp,
        solreffriction=srf,
    )


def contact_frames(
    ws: WorldState,
    origin: Array,
    body_velocity: Array,
    cs: ContactSet,
    terrain: Plane | Heightfield,
    friction: ArrayLike | None = None,
    midpoint: bool = False,
) -> ContactFrames:
    """Contact kinematics from a world state.

    ``ws``: :class:`~jaxdyn.algorithms.kinematics.WorldState` (positions relative to
    ``origin``, the world position of its origin); ``body_velocity (nb, 6)``: spatial velocities
    at that origin; ``cs``: :class:`~jaxdyn.sim.geometry.ContactSet`; ``terrain``: a
    :class:`~jaxdyn.sim.geometry.Plane` or :class:`~jaxdyn.sim.geometry.Heightfield`;
    ``friction``: the contacts' Coulomb coefficient (scalar; ``None``: the contact set's,
    :attr:`~jaxdyn.sim.geometry.ContactSet.friction`, if it has one, mixed with the terrain's
    own ``friction`` where it gives one as MuJoCo mixes two geoms' of equal priority, the
    larger; the terrain's alone for a contact set without one); ``midpoint``: the
    contact point midway between the sphere's surface and the terrain's (MuJoCo's
    ``x = c - (r + d / 2) n``) instead of the sphere's deepest point ``c - r n`` (soft contact,
    :class:`Constraint`, where it moves the tangent rows' lever arm by ``d / 2``).
    """
    b = cs.body_index
    R, p = ws.R[b], ws.p[b]
    dtype = p.dtype
    centre = spatial.mv(R, cs.pos.astype(dtype)) + p
    dist, n = terrain.query(centre + origin)
    radius = cs.radius.astype(dtype)
    x = centre - (radius + 0.5 * (dist - radius) if midpoint else radius)[:, None] * n
    vb = body_velocity[b]
    vel = vb[:, 3:] + spatial.cross(vb[:, :3], x)
    if friction is None:
        friction = getattr(cs, "friction", None)
        ground = getattr(terrain, "friction", None)
        if ground is not None:  # the terrain's own, mixed as MuJoCo's geoms: the larger
            ground = jnp.asarray(ground, dtype)
            friction = ground if friction is None else jnp.maximum(friction, ground)
    fr = None if friction is None else jnp.broadcast_to(jnp.asarray(friction, dtype), dist.shape)
    sr = getattr(cs, "solref", None)
    si = getattr(cs, "solimp", None)
    iw = getattr(cs, "invweight", None)
    # a capsule's end sphere on a plane: MuJoCo's mjc_PlaneCapsule gives the contact frame the
    # capsule's axis as its first tangent (its pyramid turns with the capsule)
    from .geometry import Plane

    axis = getattr(cs, "axis", None)
    tangent = None
    if axis is not None and isinstance(terrain, Plane):
        tangent = spatial.mv(R, jnp.asarray(axis, dtype))
    return ContactFrames(
        dist - radius,
        n,
        x,
        vel,
        fr,
        tuple(cs.body),
        (-1,) * len(cs.body),
        solref=None if sr is None else jnp.asarray(sr, dtype),
        solimp=None if si is None else jnp.asarray(si, dtype),
        invweight=None if iw is None else jnp.asarray(iw, dtype),
        tangent=tangent,
    )


def _bodies_sum(values, frames, nb, sign_other=-1.0, scale_other=None):
    """Per-body sums ``(nb, ...)`` of per-contact ``values (nc, ...)``: ``+values`` on each
    contact's ``body``, ``sign_other * values`` on its ``other`` (the world's share dropped)."""
    body, other = frames.body_index, frames.other_index
    moving = other >= 0
    if not np.any(moving):
        return _scatter.segment_sum(values, body, nb)
    vo = values[np.nonzero(moving)[0]] * sign_other
    idx = np.concatenate([body, other[moving]])
    return _scatter.segment_sum(jnp.concatenate([values, vo], 0), idx, nb)


def contact_wrenches(ws, frames, point, force):
    """Per-body spatial forces at the world-state origin ``(nb, 6)`` from point forces
    ``force (nc, 3)`` (world axes) applied at ``point (nc, 3)``: ``+force`` on each contact's
    ``body``, ``-force`` on its ``other``."""
    w = jnp.concatenate([spatial.cross(point, force), force], -1)
    return _bodies_sum(w, frames, ws.R.shape[0])


# ------------------------------------------------------------------------------- compliant
class Compliant(eqx.Module):
    """Compliant contact: smooth spring-damper normal force, regularised Coulomb friction.

    - ``stiffness`` (N/m per contact) and ``damping`` (N s/m per contact): ``None`` (default)
      derives them per contact, as MuJoCo's ``solref = (timeconst, dampratio)`` does, from the
      mass ``m`` the contact pushes: ``k = m / (timeconst dampratio)^2``,
      ``c = 2 m / timeconst`` (critically damped at ``dampratio = 1``: a 50 rad/s mass-spring
      on the contact at ``timeconst = 0.02``). ``timeconst`` / ``dampratio``: ``None``
      (default) takes each contact's ``solref`` (:attr:`ContactFrames.solref`: an MJCF file's
      geoms, mixed per pair as MuJoCo does), else MuJoCo's default ``(0.02, 1)``; a number
      applies to every contact. A contact ``solref`` read here must be positive: MuJoCo's
      direct form ``(-stiffness, -damping)`` is refused naming ``solref`` (use
      ``Constraint(soft=True)``), as for :class:`Constraint`'s ``baumgarte``.
      ``m`` is the mass of the body tree
      the contact moves (the whole robot for a foot: its weight, not its limb's, rests on it;
      one object of a scene for that object), the reduced mass ``m1 m2 / (m1 + m2)`` of the two
      trees of a contact between bodies. Given numbers apply to every contact.
    - ``friction``: Coulomb coefficient ``mu`` of every contact; ``None`` (default): each
      contact's own (the geoms' of :class:`~jaxdyn.sim.geoms.Geoms`, combined as MuJoCo does;
      1 for the spheres of a :class:`~jaxdyn.sim.geometry.ContactSet`).
    - ``slip`` (m/s): regularisation speed of friction ``vs``: a contact loaded below its
      friction limit creeps at a speed of order ``vs`` (a box on a 20 degree incline with
      ``mu = 0.5``: ``1.06 vs``; MuJoCo C's soft friction creeps at 1.8 mm/s there).
    - ``smoothing`` (m): softplus width ``eps`` of the penetration.

    The damping and, above all, the friction's viscosity ``mu fn / vs`` at low slip are stiff
    as seen from a light limb (its contact point's apparent inverse mass ``J M^-1 J^T``): the
    ``"euler"``, ``"implicit"`` and ``"implicit_damping"`` integrators take them implicitly
    (:func:`compliant_damping`: that part of the step is stable at any ``dt``, and with it the
    spring, explicit, for ``dt < 4 timeconst`` at ``dampratio = 1``, linearised), ``"rk4"``
    explicitly (it
    needs steps of the order of ``vs / (mu fn J M^-1 J^T)``).
    """

    stiffness: float | None = None
    damping: float | None = None
    friction: float | None = None
    slip: float = 1e-3
    smoothing: float = 1e-4
    timeconst: float | None = None
    dampratio: float | None = None

    _RULES = (
        ("stiffness", 0.0, True),
        ("damping", 0.0, False),
        ("friction", 0.0, False),
        ("slip", 0.0, True),
        ("smoothing", 0.0, True),
        ("timeconst", 0.0, True),
        ("dampratio", 0.0, True),
    )

    def __check_init__(self):
        _params.check_module(self)

    def _solref_columns(self) -> tuple[int, ...]:
        """The columns of the contacts' ``solref`` that :meth:`gains` reads as ``(timeconst,
        dampratio)`` (checked positive by :func:`jaxdyn.sim._params.check_solref`)."""
        cols = ()
        if self.timeconst is None and (self.stiffness is None or self.damping is None):
            cols += (0,)
        if self.dampratio is None and self.stiffness is None:
            cols += (1,)
        return cols

    def gains(
        self,
        model: Model,
        dtype: DTypeLike,
        body: Sequence[int] | None = None,
        other: Sequence[int] | None = None,
        solref: Array | None = None,
    ) -> tuple[Array, Array]:
        """Stiffness and damping: scalars for the model's total mass (``body=None``), or one per
        contact ``(nc,)`` for contacts on the bodies ``body`` (static ints), each against
        ``other`` (static ints, ``-1`` the world; ``None``: all against the world), with the
        contacts' ``solref (nc, 2)`` where ``timeconst`` / ``dampratio`` are ``None``."""
        if body is None:
            m = jnp.sum(model.mass).astype(dtype)
        else:
            m = contact_mass(model, body, other).astype(dtype)
        tc, dr = self.timeconst, self.dampratio
        if solref is not None and body is not None:
            solref = jnp.asarray(solref, dtype)
            tc = solref[:, 0] if tc is None else tc
            dr = solref[:, 1] if dr is None else dr
        tc = jnp.asarray(DEFAULT_TIMECONST if tc is None else tc, dtype)
        dr = jnp.asarray(DEFAULT_DAMPRATIO if dr is None else dr, dtype)
        k = m / (tc * dr) ** 2 if self.stiffness is None else self.stiffness
        c = 2.0 * m / tc if self.damping is None else self.damping
        shape = jnp.broadcast_shapes(jnp.shape(m), jnp.shape(tc), jnp.shape(dr))
        return (
            jnp.broadcast_to(jnp.asarray(k, dtype), shape),
            jnp.broadcast_to(jnp.asarray(c, dtype), shape),
        )


def tree_roots(topo) -> np.ndarray:
    """The root body (``parent < 0``) of every body's tree, ``(nb,)`` static."""
    root = np.arange(topo.nb)
    for b in range(topo.nb):
        p = int(topo.parent[b])
        if p >= 0:
            root[b] = root[p]
    return root


def contact_mass(model, body, other=None):
    """Mass each contact pushes ``(nc,)``: the mass of the tree of ``body`` (static ints), or
    the reduced mass ``m1 m2 / (m1 + m2)`` with the tree of ``other`` where ``other >= 0``
    (``-1``: the world, infinitely heavy)."""
    t = model.topo
    root = tree_roots(t)
    tm = _scatter.segment_sum(model.mass, root, t.nb)[root]  # (nb,) tree masses
    m = tm[np.asarray(body, np.int64)]
    if other is None:
        return m
    other = np.asarray(other, np.int64)
    mo = tm[np.maximum(other, 0)]
    moving = jnp.asarray(other >= 0)
    return jnp.where(moving, m * mo / jnp.where(moving, m + mo, 1.0), m)


def _friction(contact, frames, dtype):
    """Each contact's Coulomb coefficient: the contact model's if it gives one, else the
    frames' (the geoms'), else 1."""
    if contact.friction is not None:
        return jnp.asarray(contact.friction, dtype)
    if frames.friction is not None:
        return frames.friction.astype(dtype)
    return jnp.asarray(1.0, dtype)


def compliant_forces(
    contact: Compliant,
    k: Array,
    c: Array,
    frames: ContactFrames,
    friction_normal: Array | None = None,
    friction_speed: Array | None = None,
    gate: Array | None = None,
) -> Array:
    """World-axes forces ``(nc, 3)`` of the compliant model at ``frames.point``.

    The implicit steps linearise these forces in the contact velocity with three quantities
    held at the step's velocity (every other derivative -- in the configuration, the
    parameters -- still flows through them; :func:`compliant_damping`): ``friction_normal
    (nc,)``, the normal force inside the friction term, ``friction_speed (nc,)``, the
    regularised slip speed ``sqrt(|vt|^2 + vs^2)`` of its denominator, which makes the friction
    a viscous force ``-(mu fn / s) vt`` of frozen viscosity, and ``gate (nc,)``, the factor
    ``sigmoid(x / (k eps))`` of the normal force's smooth clamp ``smax0``, which makes the
    normal force linear in the velocity (see :func:`jaxdyn.sim.core` ``_contact_inertias``)."""
    dtype = frames.distance.dtype
    eps = jnp.asarray(contact.smoothing, dtype)
    pen = eps * jax.nn.softplus(-frames.distance / eps)
    vn, vt = frames.split_velocity()
    raw = k * pen - c * vn * pen / (pen + eps)
    fn = raw * (jax.nn.sigmoid(raw / (k * eps)) if gate is None else gate)
    vs2 = jnp.asarray(contact.slip, dtype) ** 2
    fn_t = fn if friction_normal is None else friction_normal
    s = jnp.sqrt(jnp.sum(vt * vt, -1) + vs2) if friction_speed is None else friction_speed
    mu = _friction(contact, frames, dtype)
    ft = -(mu * fn_t / s)[:, None] * vt
    return fn[:, None] * frames.normal + ft


def compliant_damping(
    contact: Compliant, k: Array, c: Array, frames: ContactFrames
) -> tuple[Array, Array]:
    """``(d_n, d_t)`` (each ``(nc,)``): the velocity Jacobian of :func:`compliant_forces` as the
    implicit steps linearise it, ``-df/du = d_n n n^T + d_t (I - n n^T)`` in the velocity
    ``u`` of the contact point, with the friction's normal force and slip speed and the normal
    force's clamp factor held at ``frames.velocity`` (``friction_normal``, ``friction_speed``,
    ``gate``): ``d_n = sigmoid(raw / (k eps)) c pen / (pen + eps)`` (the normal damping,
    through the clamp's factor) and ``d_t = mu max(fn, 0) / s`` (the friction's frozen
    viscosity). Both are >= 0 (a symmetric positive semi-definite ``K``): the clamp's own
    derivative is not (``smax0`` has a negative slope where a fast separation drives ``raw``
    below 0), nor is ``fn`` (``smax0`` dips below 0 there), and through a light limb a
    negative ``h d G`` beyond 1 made the step's ``M + h J^T K J`` indefinite.
    In closed form, so that derivatives in the configuration and the parameters flow through
    it as through the forces."""
    dtype = frames.distance.dtype
    eps = jnp.asarray(contact.smoothing, dtype)
    pen = eps * jax.nn.softplus(-frames.distance / eps)
    vn, vt = frames.split_velocity()
    damp = c * pen / (pen + eps)  # -d raw / d vn
    raw = k * pen - damp * vn
    gate = jax.nn.sigmoid(raw / (k * eps))
    s = jnp.sqrt(jnp.sum(vt * vt, -1) + jnp.asarray(contact.slip, dtype) ** 2)
    fn = jnp.maximum(raw * gate, 0.0)  # smax0 dips below 0 (by 0.28 k eps at most)
    return gate * damp, _friction(contact, frames, dtype) * fn / s


# ------------------------------------------------------------------------------ constraint
class Constraint(eqx.Module):
    """Constraint-based contact solved on the Delassus matrix (see the module docstring).

    - ``friction``: Coulomb coefficient ``mu`` of every contact; ``None`` (default): each
      contact's own (as :class:`Compliant`).
    - ``iterations``: accelerated projected gradient steps, ``newton``: semismooth Newton
      steps after them (static; see :func:`solve_cone_complementarity`); with the primal
      solve (``solver`` below) ``iterations`` is its most Newton steps.
    - ``tolerance`` (static): ``None`` (default) runs all ``iterations``; a number stops them
      once a step moves the (scaled) impulses by at most ``tolerance`` times their largest
      entry (``iterations`` then the most that run; a ``while_loop``: under ``vmap`` the
      batch's slowest problem sets the count).
    - ``warm_start`` (static): ``False`` (default) starts every solve from zero impulses;
      ``True`` from the previous step's, carried in the simulator state
      (:attr:`jaxdyn.sim.State.impulses`, per contact slot; :func:`jaxdyn.sim.warm_state`
      gives a state its first, zeros; a state without them starts from zero and carries
      none), as MuJoCo warm-starts its solver from ``qacc_warmstart``; the primal Newton
      solve (``solver`` below) carries MuJoCo's own start there instead, the previous
      solve's acceleration ``qacc`` (``(nv,)``). With ``tolerance`` the solve then stops
      after few iterations where the contacts change little between steps.
    - ``polish`` (static): ``True`` (default) follows the iterations, where the problem has
      scalar rows after the contacts (joint limits, :mod:`jaxdyn.sim.limits`), with one
      safeguarded active-set step on those rows (their exact impulses given the contacts',
      kept where it lowers the residual: :func:`solve_cone_complementarity`'s ``polish``);
      ``False`` leaves them at the iterations' impulses, one small dense solve and two
      residual evaluations fewer per step (the DM Control Suite walker and hopper, whose
      warm-started solve runs on across their simulator steps).
    - ``baumgarte``: fraction of a penetration removed per step; ``None`` (default): each
      contact's from its ``solref`` (:attr:`ContactFrames.solref`, an MJCF file's geoms),
      ``min(1, dt / timeconst)`` (the penetration then decays with MuJoCo's time constant;
      ``dampratio`` has no counterpart in a velocity-level correction), else 0.2. A contact's
      ``solref`` in MuJoCo's direct form ``(-stiffness, -damping)`` (an entry <= 0: what
      ``sim_config(Constraint(soft=True))`` of an MJCF file may give the contacts) is refused
      naming ``solref`` (use ``soft=True``): a ``ValueError`` from :class:`SimConfig` and
      :func:`jaxdyn.sim.step` / ``rollout`` when the values are concrete, a value check when
      traced (with value checks off, :func:`jaxdyn.set_value_checks`, a traced one is not
      checked and gives a negative fraction).
    - ``regularization``: ``r`` of ``R = r diag(G)`` (soft contact).
    - ``relaxed`` (static): ``False`` (default) solves Coulomb's law (De Saxce's correction);
      ``True`` Anitescu's convex relaxation, whose sliding contacts leave the ground at the
      normal velocity ``mu |v_t|`` per step (see the module docstring).
    - ``max_contacts`` (static): ``None`` (default) solves over every contact slot of the
      scene (every slot of every geom pair, :class:`~jaxdyn.sim.geoms.Geoms`, and every contact
      sphere); an integer ``k`` solves over the ``k`` slots of least distance only
      (:func:`closest_contacts`, a fixed-size top-k, as MJX caps its contacts): the Delassus
      matrix is ``3k x 3k`` instead of ``3 nc x 3 nc``, which is what makes a scene of many
      pairs (a self-colliding humanoid: 161 pairs, 277 slots) cheap. The result is the
      uncapped one (to rounding) whenever at most ``k`` slots hold a candidate contact (their
      bounding spheres overlap and the narrow phase returned a point; :func:`live_contacts`);
      beyond that the farthest candidates are dropped, which changes the result only if one of
      them would have carried an impulse. :func:`jaxdyn.sim.contact_counts` counts the
      candidates of a state, to compare with ``k``.
    - ``soft`` (static): ``False`` is the hard contact above; ``True`` is MuJoCo's
      soft contact (Todorov 2014; MuJoCo's Computation chapter, soft constraints): each
      touching contact (``distance < 0``: MuJoCo's ``dist < margin``) is a row of
      MuJoCo's dual problem ``min 1/2 f^T (A + R) f + f^T (J a0 - aref)`` over its elliptic
      cone, with ``aref = -b J v - k d(r) r`` on the normal, ``-b J v`` on the tangents, and
      ``R = (1 - d) / d * diagApprox`` on all three rows (:mod:`jaxdyn.sim._soft`; ``r`` the
      distance, ``d(r)`` the impedance of ``solimp``, ``k``, ``b`` from ``solref``;
      ``diagApprox`` the contact's ``invweight``, :attr:`ContactFrames.invweight`, else the
      normal row of ``A``). Taken at the velocity level (impulse ``h f`` on the step's free
      velocity) it is MuJoCo's step, with ``A = J M^-1 J^T`` of the plain ``M`` also under the
      ``"implicit"`` / ``"implicit_damping"`` integrators (whose ``M + h D`` then applies the
      impulses, as MuJoCo's ``mj_EulerSkip`` / ``mj_implicitSkip``).
      ``baumgarte`` and ``regularization`` are then unused; ``relaxed=True`` is MuJoCo's
      problem (its sliding contacts lift at ``mu |v_t|`` as MuJoCo's do). ``None``
      (default): the scene's own model. Where the scene is an MJCF file
      (``load_mjcf(...).sim_config(Constraint())``) that is MuJoCo's, what the file means and
      MJX computes: :meth:`jaxdyn.io.mjcf.MJCFModel.mujoco_contact` makes it ``soft=True,
      relaxed=True`` solved by MuJoCo's Newton solve with the file's ``opt.iterations`` and
      ``opt.tolerance``, warm-started. Elsewhere (a :class:`jaxdyn.sim.SimConfig` built
      directly, :class:`jaxdyn.sim.Scene`) ``None`` is the hard contact, as ``False``.
    - ``solref``, ``solimp`` (soft only): ``None`` (default) takes each contact's
      (:attr:`ContactFrames.solref` / ``solimp``: an MJCF file's geoms, mixed per pair as
      MuJoCo's ``mj_contactParam``), else MuJoCo's defaults ``(0.02, 1)`` and
      ``(0.9, 0.95, 0.001, 0.5, 2)``; given (2 and 5 numbers), they apply to every contact.
      ``solref`` in MuJoCo's direct form ``(-stiffness, -damping)`` is honoured.
    - ``solreffriction`` (soft only): MuJoCo's ``solreffriction`` (2 numbers, either form, of
      one sign), the reference of the elliptic cones' friction rows: their damping ``b`` (the
      tangents' ``aref = -b J_t v``) from it instead of from ``solref`` (MuJoCo's
      ``mj_makeImpedance``; ``refsafe`` applies to it alike); ``None`` (default) or ``(0, 0)``
      (MuJoCo's default): the contact's ``solref``. MuJoCo reads it on elliptic cones only, and
      so does this (unused with ``cone="pyramidal"``). Given, it applies to every contact;
      ``None`` takes each contact's (:attr:`ContactFrames.solreffriction`: an MJCF file gives
      it on ``<contact><pair>`` only, :func:`jaxdyn.io.load_mjcf`).
    - ``impratio`` (soft only): MuJoCo's ``opt.impratio``: the tangent rows' ``R`` is the
      normal's over it and the cone's ``mu`` is ``friction / sqrt(impratio)``.
    - ``refsafe`` (static, soft only): MuJoCo's ``refsafe`` (``timeconst >= 2 h``).
    - ``cone`` (static, soft only): ``None`` (default) or ``"elliptic"``: MuJoCo's elliptic
      cones (above); ``"pyramidal"``: MuJoCo's pyramidal cones (its default ``<option
      cone>``; ``load_mjcf(...).sim_config`` gives the file's where ``cone`` is ``None``):
      four edge rows ``J_n +- mu J_sk`` per contact on MuJoCo's contact axes
      (:func:`pyramid_edges`), the distance in every edge's ``aref``, one regulariser ``R = 2
      mu^2 / impratio (1 - d) / d (1 + mu^2) diagApprox`` and a force ``>= 0`` per edge
      (:func:`_soft_pyramid`); with ``relaxed=False``, De Saxce's term of the pyramid.
    - ``solver`` (static): which problem the soft contact's step solves. ``"dual"``: the dual
      problem above on the Delassus matrix (accelerated projected gradient, ``iterations`` of
      them, then ``newton`` semismooth steps): every contact model (the hard contact's only
      solve). ``"newton"``: MuJoCo's primal problem, as MuJoCo's and MJX's Newton solver
      (``mj_solNewton``): minimise over the velocity change ``z`` the convex piecewise
      quadratic ``1/2 z^T M z + sum_i 1/2 min(0, J_i z + u_i)^2 / R_i`` of the pyramid edges,
      joint-limit rows (and MuJoCo's equality rows, eliminated into ``M``) by Newton steps on
      ``H = M + J^T diag(active / R) J`` (``nv x nv``), each with an exact line search
      (:mod:`jaxdyn.sim._primal`); the same impulses (``lam = max(0, -(J z + u)) / R``) as the
      converged dual solve. ``iterations`` is then the most Newton steps; they stop once a step
      lands in the piece of the cost it minimised (the exact solution: no ``tolerance`` needed)
      or, with ``tolerance``, once the cost or its gradient falls below ``tolerance`` in
      MuJoCo's scale (MJX's ``opt.tolerance``); ``warm_start`` starts them from the previous
      solve's acceleration (MuJoCo's ``qacc_warmstart``, carried in
      :attr:`jaxdyn.sim.State.impulses`: the velocity change ``h qacc - (v_free - v)``) where
      that costs less than the free step, as ``mj_fwdConstraint``, so that a solve cut to
      a few ``iterations`` takes MuJoCo's cut solve's steps; ``newton`` and ``polish`` are
      unused;
      :func:`jaxdyn.sim.step_info`'s residual is the dual's fixed-point residual of the
      impulses (:func:`jaxdyn.sim._primal.residual`). Takes ``soft=True``, ``relaxed=True``
      (:data:`NEWTON_CONES`), on either cone: on MuJoCo's elliptic cones (``cone=None`` /
      ``"elliptic"``) the contacts' rows ``[n, t1, t2, ...]`` with MuJoCo's three-zone cone
      cost (:func:`jaxdyn.sim._primal.newton_solve_elliptic`; not piecewise quadratic: the
      steps stop at rounding level or on ``tolerance``). ``None`` (default): ``"newton"`` where it
      applies (``soft=True``, ``relaxed=True``, ``newton=0``: MuJoCo's problem on either cone,
      as ``load_mjcf(...).sim_config`` sets up from a file's ``<option cone>``), else
      ``"dual"`` (the hard contact, Coulomb's ``relaxed=False``, ``newton`` steps asked for):
      :func:`uses_primal_newton` (on elliptic cones the dual's default 100 iterations stop
      short of the converged problem that the Newton solve reaches: docs/simulation.md). The default
      ``iterations=100`` is MuJoCo's ``opt.iterations`` for both; the primal's exact stop
      makes MuJoCo's ``opt.tolerance`` (``1e-8``) unneeded for accuracy (a ``tolerance`` only
      stops it earlier).
    - MuJoCo's ``condim`` 4 and 6: contacts with torsional / rolling friction
      (:attr:`ContactFrames.spin`: an MJCF file's geoms, scene objects' ``friction`` triples)
      get MuJoCo's torsional and rolling rows on the relative angular velocity, on either cone
      of the soft contact (:func:`_soft_problem`, :func:`_soft_pyramid`) and on the hard
      contact's elliptic cone (MuJoCo's ``sum_j (f_j / mu_j)^2 <= f_n^2``, solved in scaled
      rows, :func:`_spin_scaling`; the Baumgarte term on the normal row only, the
      regulariser ``r diag`` of the scaled rows; with ``relaxed=False`` De Saxce's term
      ``mu_1 |y_t| = (sum_j (mu_j w_j)^2)^(1/2)`` over all friction rows).
    """

    friction: float | None = None
    iterations: int = eqx.field(static=True, default=100)
    newton: int = eqx.field(static=True, default=0)
    baumgarte: float | None = None
    regularization: float = 1e-6
    relaxed: bool = eqx.field(static=True, default=False)
    max_contacts: int | None = eqx.field(static=True, default=None)
    soft: bool | None = eqx.field(static=True, default=None)
    solref: jnp.ndarray | None = None
    solimp: jnp.ndarray | None = None
    impratio: float = 1.0
    refsafe: bool = eqx.field(static=True, default=True)
    cone: str | None = eqx.field(static=True, default=None)
    solreffriction: jnp.ndarray | None = None
    tolerance: float | None = eqx.field(static=True, default=None)
    warm_start: bool = eqx.field(static=True, default=False)
    polish: bool = eqx.field(static=True, default=True)
    solver: str | None = eqx.field(static=True, default=None)

    _RULES = (
        ("friction", 0.0, False),
        ("baumgarte", 0.0, False),
        ("regularization", 0.0, False),
        ("impratio", 0.0, True),
    )

    def _solref_columns(self) -> tuple[int, ...]:
        """The columns of the contacts' ``solref`` that the hard contact reads as ``(timeconst,
        dampratio)`` (``timeconst`` for ``baumgarte=None``; the soft contact reads either form)."""
        return () if self.soft or self.baumgarte is not None else (0,)

    def __check_init__(self):
        _params.check_module(self)
        if self.soft is not None and not isinstance(self.soft, bool):
            raise ValueError(f"Constraint: soft must be None, True or False, got {self.soft!r}")
        for name, n in (("solref", 2), ("solimp", 5), ("solreffriction", 2)):
            x = getattr(self, name)
            leaves = jax.tree_util.tree_leaves(x)
            if x is None or any(isinstance(v, jax.core.Tracer) for v in leaves):
                continue
            a = np.asarray(x, float)
            if a.shape != (n,) or not np.all(np.isfinite(a)):
                raise ValueError(
                    f"Constraint: {name} must be None or {n} finite numbers, got {x!r}"
                )
            if not self.soft:
                raise ValueError(f"Constraint: {name} is a parameter of soft=True contact")
            if name == "solreffriction" and (a[0] > 0) != (a[1] > 0):
                raise ValueError(
                    "Constraint: solreffriction must be (timeconst, dampratio) > 0, "
                    f"(-stiffness, -damping) <= 0 or (0, 0), not mixed; got {x!r}"
                )
        if self.cone not in (None, "elliptic", "pyramidal"):
            raise ValueError(
                f"Constraint: cone must be None, 'elliptic' or 'pyramidal', got {self.cone!r}"
            )
        if self.cone == "pyramidal" and not self.soft:
            raise ValueError("Constraint: cone='pyramidal' is a parameter of soft=True contact")
        for name, least in (("iterations", 1), ("newton", 0)):
            n = getattr(self, name)
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < least:
                raise ValueError(f"Constraint: {name} must be an integer >= {least}, got {n!r}")
        tol = self.tolerance
        if tol is not None and (
            isinstance(tol, bool)
            or not isinstance(tol, (int, float, np.floating, np.integer))
            or not np.isfinite(tol)
            or tol < 0
        ):
            raise ValueError(f"Constraint: tolerance must be None or a number >= 0, got {tol!r}")
        if not isinstance(self.warm_start, bool):
            raise ValueError(
                f"Constraint: warm_start must be True or False, got {self.warm_start!r}"
            )
        if not isinstance(self.polish, bool):
            raise ValueError(f"Constraint: polish must be True or False, got {self.polish!r}")
        if self.solver not in SOLVERS:
            raise ValueError(
                f"Constraint: solver must be one of {SOLVERS} (None: 'newton' where it applies, "
                f"else 'dual'), got {self.solver!r}"
            )
        if self.solver == "newton" and not (self.soft and self.relaxed):
            raise ValueError(
                "Constraint: solver='newton' (MuJoCo's primal Newton solve) takes soft=True and "
                f"relaxed=True ({NEWTON_CONES}), got soft={self.soft!r}, "
                f"relaxed={self.relaxed!r}"
            )
        if self.solver == "newton" and self.newton:
            raise ValueError(
                f"Constraint: newton={self.newton!r} (the dual solve's semismooth steps) is unused "
                "by solver='newton' (MuJoCo's primal Newton solve); use solver='dual' for them"
            )
        k = self.max_contacts
        if k is not None and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1):
            raise ValueError(f"Constraint: max_contacts must be None or an integer >= 1, got {k!r}")


#: the values of ``Constraint.solver``
SOLVERS = (None, "dual", "newton")

#: what ``Constraint(solver="newton")`` solves
NEWTON_CONES = (
    "MuJoCo's convex soft problem, on pyramidal or elliptic cones; Coulomb's relaxed=False and "
    "the hard contact: use solver='dual' there (solver=None picks it)"
)


def uses_primal_newton(contact: object) -> bool:
    """Whether ``contact``'s step solves MuJoCo's primal problem by Newton steps
    (``Constraint(solver="newton")``, :mod:`jaxdyn.sim._primal`) rather than the dual one:
    ``solver="newton"``, or ``solver=None`` (the default) on MuJoCo's soft convex problem
    (``soft=True``, ``relaxed=True``, pyramidal or elliptic cones) without the dual's
    ``newton`` steps; Coulomb's law (``relaxed=False``) and the hard contact fall back to the
    dual solve (static)."""
    if not isinstance(contact, Constraint):
        return False
    if contact.solver is not None:
        return contact.solver == "newton"
    return bool(contact.soft) and contact.relaxed and contact.newton == 0


def solver_block_rows(contact: Constraint, width: int = 3) -> int:
    """The rows of one contact's block in the cone problem ``contact`` solves (static):
    ``[n, t1, t2]`` (3) for the hard contact, the contact's ``width`` rows
    (:attr:`ContactFrames.width`) on soft elliptic cones, ``2 (width - 1)`` pyramid edges on
    soft pyramidal ones (:func:`contact_problem`)."""
    if not contact.soft:
        return 3
    return 2 * (width - 1) if contact.cone == "pyramidal" else width


def live_contacts(distance):
    """Which contact slots hold a candidate contact (``(nc,)`` bools): all but the empty slots
    of the narrow phase and the pairs whose bounding spheres are apart, which
    :meth:`jaxdyn.sim.geoms.Geoms.frames` reports at ``collision.NO_CONTACT`` distance and which
    never carry an impulse."""
    return distance < 0.5 * NO_CONTACT


def closest_contacts(distance, k):
    """Indices ``(k,)`` (ascending) of the ``k`` contact slots of least ``distance (nc,)``
    (``jax.lax.top_k``: a fixed size under ``jit`` / ``vmap``); every candidate
    (:func:`live_contacts`) is among them when there are at most ``k``."""
    _, idx = jax.lax.top_k(-jax.lax.stop_gradient(distance), k)
    return jnp.sort(idx)


def take_contacts(frames, idx):
    """The contacts ``idx`` (traced indices) of ``frames``: their arrays gathered, with no
    static ``body`` / ``other`` (the caller gathers ``frames.body_index[idx]``)."""
    take = lambda x: None if x is None else x[idx]  # noqa: E731
    return ContactFrames(
        frames.distance[idx],
        frames.normal[idx],
        frames.point[idx],
        frames.velocity[idx],
        take(frames.friction),
        solref=take(frames.solref),
        solimp=take(frames.solimp),
        invweight=take(frames.invweight),
        tangent=take(frames.tangent),
        spin=take(frames.spin),
        solreffriction=take(frames.solreffriction),
    )


def tangent_basis(n):
    """Two unit tangents ``(t1, t2)`` completing the unit normals ``n (nc, 3)`` to a right-handed
    frame (smooth in ``n`` away from ``n = -e_x``)."""
    # t1 = the x axis minus its normal part, chosen from e_x / e_y by the larger remainder
    ex = jnp.broadcast_to(jnp.asarray([1.0, 0.0, 0.0], n.dtype), n.shape)
    ey = jnp.broadcast_to(jnp.asarray([0.0, 1.0, 0.0], n.dtype), n.shape)
    a = jnp.where((jnp.abs(n[:, 0]) < 0.9)[:, None], ex, ey)
    t1 = a - jnp.sum(a * n, -1, keepdims=True) * n
    t1 = t1 / jnp.sqrt(jnp.sum(t1 * t1, -1, keepdims=True))
    return t1, spatial.cross(n, t1)


def project_cone(lam: Array, mu: ArrayLike) -> Array:
    """Euclidean projection of ``lam (..., 3) = [lam_n, lam_t1, lam_t2]`` onto the second-order
    cone ``|lam_t| <= mu lam_n``."""
    ln, lt = _cone_projection(lam[..., 0], lam[..., 1:], mu, -1)
    return jnp.concatenate([ln[..., None], lt], -1)


def _cone_projection(ln, lt, mu, axis):
    """:func:`project_cone` of the normal parts ``ln`` and the tangent parts ``lt`` (their
    components along ``axis``: ``-1`` for cones stored ``[n, t1, t2]``, ``0`` for rows stored
    ``(width, nc)``, the iterations' layout in :func:`_solve_fixed`): ``(ln', lt')``."""
    nt2 = jnp.sum(lt * lt, axis)
    safe = jnp.where(nt2 > 0, nt2, 1.0)
    nt = jnp.where(nt2 > 0, jnp.sqrt(safe), 0.0)
    inside = nt <= mu * ln
    polar = mu * nt <= -ln
    ln_b = (ln + mu * nt) / (1 + mu * mu)
    scale = jnp.where(nt2 > 0, mu * ln_b / jnp.sqrt(safe), 0.0)
    e = lambda a: jnp.expand_dims(a, axis)  # noqa: E731
    ln = jnp.where(polar, 0.0, jnp.where(inside, ln, ln_b))
    lt = jnp.where(e(polar), 0.0, jnp.where(e(inside), lt, e(scale) * lt))
    return ln, lt


def _safe_norm(x, axis=-1):
    """``|x|`` over ``axis`` with derivative 0 (not NaN) at ``x = 0``."""
    n2 = jnp.sum(x * x, axis)
    return jnp.where(n2 > 0, jnp.sqrt(jnp.where(n2 > 0, n2, 1.0)), 0.0)


def _desaxce(w, mu, coulomb, nc, width, pyramid=None):
    """The velocities ``w`` (flat: ``nc`` contact blocks of ``width`` rows, then scalar rows)
    the fixed-point map steps along: with ``coulomb``, De Saxce's modified velocity ``w + mu
    |w_t| e_n`` of each cone ``[n, t1, t2]`` (its complementarity with the cone is Coulomb's
    law), or on pyramid edge rows ``[n + mu s1, n - mu s1, n + mu s2, n - mu s2]``
    (:func:`pyramid_edges`: pairs of edges ``n +- mu_k s_k``) De Saxce's term of the pyramid
    ``{sum_k |f_sk| / mu_k <= f_n}``, ``max_k mu_k |w_sk| = max_k |w_k+ - w_k-| / 2``, added to
    every edge; the scalar rows (frictionless) as they are. ``pyramid`` (static): whether the
    blocks are pyramid edges (``None``: ``width == 4``)."""
    if not coulomb:
        return w
    k = nc * width
    wc = w[:k].reshape(nc, width)
    if _is_pyramid(width, pyramid):
        pair = jnp.abs(wc[:, 0::2] - wc[:, 1::2])
        wc = wc + 0.5 * jnp.max(pair, -1, keepdims=True)
    else:
        wc = wc.at[:, 0].add(mu * _safe_norm(wc[:, 1:]))
    return jnp.concatenate([wc.reshape(-1), w[k:]])


def _is_pyramid(width, pyramid):
    """Whether contact blocks of ``width`` rows are pyramid edges (``pyramid`` static; ``None``:
    ``width == 4``, MuJoCo's condim-3 pyramid)."""
    return width == 4 if pyramid is None else bool(pyramid)


def _project_rows(x, mu, nc, width, pyramid=None):
    """The projection onto ``K`` of flat impulses: each contact block's cone
    (:func:`project_cone` on rows ``[n, t...]``, any number of tangent rows, or pyramid edges
    ``>= 0``), ``max(0, .)`` on the scalar rows."""
    k = nc * width
    xc = x[:k].reshape(nc, width)
    pc = jnp.maximum(xc, 0.0) if _is_pyramid(width, pyramid) else project_cone(xc, mu)
    return jnp.concatenate([pc.reshape(-1), jnp.maximum(x[k:], 0.0)])


def _flat_map(x, G, u, mu, rho, coulomb, nc, width, pyramid=None):
    """The fixed-point map ``F(x) = P_K(x - rho w(x))``, ``w = G x + u`` (:func:`_desaxce`), on
    flat impulses ``x``: ``nc`` blocks of ``width`` rows (second-order cones ``[n, t1, t2]``
    or pyramid edges) followed by scalar one-sided rows (impulse ``>= 0``, no friction:
    joint-limit rows); ``rho`` per row (:func:`_row_steps`)."""
    w = _desaxce(G @ x + u, mu, coulomb, nc, width, pyramid)
    return _project_rows(x - rho * w, mu, nc, width, pyramid)


def _residual_jacobian(lam, G, u, mu, rho, coulomb, nc, width, pyramid=None):
    """``F(lam) - lam`` (:func:`_flat_map`, flat ``lam``) and its Jacobian in ``lam`` (forward
    mode: one matrix-vector product per row, the cone projection's and De Saxce's term's
    derivatives included)."""

    def res(x):
        return _flat_map(x, G, u, mu, rho, coulomb, nc, width, pyramid) - x

    return res(lam), jax.jacfwd(res)(lam)


def _row_steps(G, nc, width):
    """The fixed-point map's ``rho`` per row: ``1 / trace`` of each contact's diagonal block
    (any ``> 0``), ``1 / G_ii`` on the scalar rows after them."""
    d = jnp.diagonal(G)
    k = nc * width
    rho_c = 1.0 / jnp.sum(d[:k].reshape(nc, width), -1)
    return jnp.concatenate([jnp.repeat(rho_c, width), 1.0 / d[k:]])


def lambda_max_bound(A, factors=None):
    """An upper bound of the largest eigenvalue of a symmetric positive semi-definite ``A``,
    never below it: the smaller of the largest absolute row sum (Gershgorin's discs: tight when
    ``A`` is nearly block diagonal, contacts on separate light bodies) and
    ``||A^2||_F^(1/2) = (sum_i lambda_i^4)^(1/4)`` (at most ``rank(A)^(1/4)`` times
    ``lambda_max``: tight when one direction dominates, as the redundant contacts of a box
    face). One matrix product; the step of the projected gradient must not exceed
    ``1 / lambda_max``, and an estimate from below (power iteration from a fixed start, which
    a symmetric contact set can make orthogonal to the top eigenvector) let it diverge.

    ``factors = (U, V, d)`` (optional): ``A = U V + diag(d)`` (to rounding) with ``U (n, r)``,
    ``V (r, n)`` of a rank ``r`` below ``n`` (a Delassus matrix ``J M^-1 J^T`` plus its
    regulariser): the Frobenius term from them (:func:`_trace_fourth_power`), the same bound to
    rounding at ``O(n r^2)``."""
    rows = jnp.max(jnp.sum(jnp.abs(A), -1))
    if factors is None:
        A2 = A @ A
        return jnp.minimum(rows, jnp.sqrt(jnp.sqrt(jnp.sum(A2 * A2))))
    return jnp.minimum(rows, jnp.sqrt(jnp.sqrt(_trace_fourth_power(*factors))))


def _trace_fourth_power(U, V, d):
    """``trace(A^4) = ||A^2||_F^2`` of the symmetric ``A = U V + diag(d)`` (``U (n, r)``,
    ``V (r, n)``, ``d (n,)``) from ``r x r`` products only: with ``P = U V`` and ``D =
    diag(d)``, ``trace((P + D)^4) = tr P^4 + 4 tr P^3 D + 4 tr P^2 D^2 + 2 tr (P D)^2 + 4 tr P
    D^3 + tr D^4`` (the 16 words of the expansion grouped by cyclic equivalence), each a trace
    of ``C_k = V D^k U (r, r)``: ``O(n r^2)`` instead of the ``O(n^3)`` of ``A @ A``."""
    C0 = V @ U
    C1 = (V * d) @ U
    C2 = (V * (d * d)) @ U
    C00 = C0 @ C0
    tr = lambda X, Y: jnp.sum(X * Y.T)  # noqa: E731  (trace(X Y))
    p_diag = jnp.sum(U * V.T, -1)  # diag(P)
    return (
        tr(C00, C00)
        + 4 * tr(C00, C1)
        + 4 * tr(C0, C2)
        + 2 * tr(C1, C1)
        + 4 * jnp.sum(p_diag * d**3)
        + jnp.sum(d**4)
    )


def _row_scaling(G, live, nc, width):
    """The scaling ``s`` (flat, ``(nc width + nl,)``) that brings the scalar rows after the
    contact blocks to the contacts' weight: 1 on the contact rows, ``sqrt(d_c / G_ii)`` on the
    scalar rows, ``d_c`` the mean diagonal of the live contact rows (1 without any; 1 where
    ``G_ii`` is not positive). ``lam = s x`` keeps ``x`` in the same cones (each is scaled by
    one number) and De Saxce's term scales with it, so the fixed point is the same; rows of
    very different weight (a light joint's limit row, ``G_ii`` 1e5, beside a heavy body's
    contacts, 0.1) no longer share the step size of the heaviest."""
    d = jnp.diagonal(G)
    k = nc * width
    live_c = jnp.repeat(live[:nc], width)
    count = jnp.sum(live_c)
    d_c = jnp.where(count > 0, jnp.sum(d[:k] * live_c) / jnp.maximum(count, 1.0), 1.0)
    d_l = d[k:]
    pos = (d_l > 0) & (d_c > 0)
    s_l = jnp.where(pos, jnp.sqrt(jnp.where(pos, d_c / jnp.where(pos, d_l, 1.0), 1.0)), 1.0)
    return jnp.concatenate([jnp.ones(k, G.dtype), s_l])


def _polish_rows(lam, G, u, mu, rho, live, coulomb, nc, width, pyramid=None):
    """One safeguarded active-set step on the scalar rows after the ``nc`` contact blocks
    (a semismooth Newton step on the scalar rows alone, as :func:`_solve_fixed`'s ``newton``
    steps on all rows): with the contact impulses held, the scalar rows that carry an impulse
    (``lam > 0``, live) take the exact impulses of their block, ``G_AA lam_A = -(u_A + G_Ac
    lam_c)`` (an unrolled Cholesky of the few scalar rows: ``G`` is positive definite), the
    others 0; kept only if it lowers the fixed-point residual ``max |F(lam) - lam|``
    (:func:`_flat_map`) and is finite. Where no contact row carries an impulse (the finger's
    limit rows beside its idle spinner contacts) and the projected gradient found the active
    rows, this is the exact solution, to rounding, of a problem whose iterations otherwise stop
    short of it (their step is set by the contacts' block); elsewhere it improves the scalar
    rows or is discarded."""
    k = nc * width
    lam_l = lam[k:]
    act = (lam_l > 0) & (live[nc:] > 0)
    both = act[:, None] & act[None, :]
    Gll = G[k:, k:]
    Ga = jnp.where(both, Gll, 0.0) + jnp.diag(jnp.where(act, 0.0, 1.0).astype(G.dtype))
    w = G @ lam + u  # one product of G: the trial's velocities follow from it
    rhs = jnp.where(act, Gll @ lam_l - w[k:], 0.0)  # -(u_A + G_Ac lam_c)
    trial_l = linalg.spd_solve(Ga, rhs, lapack=False)
    trial = jnp.concatenate([lam[:k], trial_l])
    w_t = w + G[:, k:] @ (trial_l - lam_l)

    def residual(x, w_):
        g = _desaxce(w_, mu, coulomb, nc, width, pyramid)
        return _project_rows(x - rho * g, mu, nc, width, pyramid) - x

    res, res_t = residual(lam, w), residual(trial, w_t)
    ok = (jnp.max(jnp.abs(res_t)) < jnp.max(jnp.abs(res))) & jnp.all(jnp.isfinite(trial))
    return jnp.where(ok, trial, lam)


def _solve_fixed(
    G,
    u,
    mu,
    live,
    iterations,
    newton,
    coulomb,
    width=3,
    nl=0,
    pyramid=None,
    factors=None,
    x0=None,
    tol=None,
    polish=True,
):
    """Accelerated projected gradient (Nesterov, with gradient-based adaptive restart) on
    ``min 1/2 lam^T G lam + u^T lam, lam in K`` (Mazhar et al. 2015's APGD, as in Chrono):
    ``iterations`` steps of size ``1 / L``, ``L >= lambda_max(S G S)``, on ``x = S^-1 lam``
    (the diagonal scaling ``S`` of :func:`_row_scaling` that brings the scalar rows to the
    contacts' weight; constant on each cone: the same solution), only matrix-vector products
    and cone projections; with ``coulomb`` the gradient ``G lam + u`` carries De Saxce's term
    ``mu |w_t| e_n`` (:func:`_desaxce`); with scalar rows, one safeguarded active-set step
    on them (:func:`_polish_rows`: their exact impulses given the contacts'); then
    ``newton`` safeguarded semismooth Newton steps on the fixed-point residual ``F(lam) -
    lam`` (a step is kept only if it lowers the residual; its linear system solved by
    :func:`jaxdyn._linalg.general_solve`). ``live``: 1 on the candidate
    contacts (and scalar rows), 0 on the empty slots, whose impulses stay 0 (their free
    velocity ``u_n ~ NO_CONTACT / dt`` puts every iterate in the polar cone): ``L`` bounds the
    candidates' block of ``S G S`` only (``S`` from the candidates), so the iterates are the same
    whether the solve carries empty slots or not (:attr:`Constraint.max_contacts`).
    ``width`` (static): 3 for the rows ``[n, t1, t2]`` of second-order cones, 4 for pyramid
    edges (:func:`pyramid_edges`; impulses ``>= 0``, ``mu`` unused); ``nl`` (static): scalar
    one-sided rows after the contact blocks (impulse ``>= 0``, :func:`_flat_map`).
    ``factors = (U, V, d)``: ``G = U V + diag(d)`` to rounding with ``U (n, r)``, ``V (r, n)``
    (the contact Jacobian and ``M^-1 J^T``, :func:`solve_cone_complementarity`): the
    iterations' products ``G y`` as ``U (V y) + d y`` and ``L`` from them
    (:func:`lambda_max_bound`), ``O(n r)`` per step instead of ``O(n^2)`` (ignored with scalar
    rows). Returns the flat impulses ``(nc width + nl,)``, the per-row ``rho`` and ``mu`` per
    contact.

    ``x0`` (flat, ``None``: zeros): the impulses the iterations start from (a warm start:
    the previous step's, as MuJoCo starts from ``qacc_warmstart``), projected onto ``K`` and
    zero on the empty slots. ``tol`` (static; ``None``: all ``iterations`` run, a ``scan``):
    a ``while_loop`` that stops once a step moves the scaled impulses by at most ``tol``
    times their largest entry, ``max |x_{k+1} - y_k| <= tol max |x_{k+1}|`` (the projected
    gradient step at the extrapolated point: zero at the fixed point), or after
    ``iterations`` steps; under ``vmap`` it runs until every problem of the batch has
    stopped."""
    n = u.shape[0]
    nc = (n - nl) // width
    dtype = u.dtype
    rho = _row_steps(G, nc, width)
    mu_c = jnp.broadcast_to(mu, (nc,)).astype(dtype)
    live = live.astype(dtype)
    m = jnp.concatenate([jnp.repeat(live[:nc], width), live[nc:]])
    # iterate on x = lam / s, the problem (S G S, S u) of the scaling S that brings the
    # scalar rows to the contacts' weight (none without scalar rows: the same iterates)
    s = _row_scaling(G, live, nc, width) if nl else jnp.ones(n, dtype)
    Gs = G * s[:, None] * s[None, :] if nl else G
    us = u * s if nl else u
    factors = None if nl else factors
    if factors is not None:
        U, V, d = factors
        # lambda_max_bound of the candidates' block diag(m) G diag(m) without forming it: its
        # row sums |G| m (times m), its Frobenius term from the masked factors
        rows = jnp.max(m * (jnp.abs(Gs) @ m))
        fourth = _trace_fourth_power(U * m[:, None], V * m[None, :], d * m)
        L = jnp.minimum(rows, jnp.sqrt(jnp.sqrt(fourth)))
    else:
        L = lambda_max_bound(Gs * m[:, None] * m[None, :])
    step = 1.0 / jnp.where(L > 0, L, jnp.max(jnp.diagonal(Gs)))  # no candidates: any step
    if x0 is None:
        start = jnp.zeros(n, dtype)
    else:  # the warm start: in K, zero on the empty slots
        start = m * _project_rows(jnp.asarray(x0, dtype) / s, mu_c, nc, width, pyramid)
    if not nl and not _is_pyramid(width, pyramid):
        x = _apgd_rows(Gs, us, mu_c, step, factors, iterations, coulomb, nc, width, start, tol)
    else:
        x = _apgd(Gs, us, mu_c, step, iterations, coulomb, nc, width, pyramid, start, tol, factors)
    lam = s * x if nl else x
    if nl and polish:  # the scalar rows' exact impulses given the contacts' (where that lowers
        # the residual)
        lam = _polish_rows(lam, G, u, mu_c, rho, live, coulomb, nc, width, pyramid)

    def newton_step(lam, _):
        res, Jr = _residual_jacobian(lam, G, u, mu_c, rho, coulomb, nc, width, pyramid)
        trial = lam + linalg.general_solve(Jr, -res)
        res_t = _flat_map(trial, G, u, mu_c, rho, coulomb, nc, width, pyramid) - trial
        ok = (jnp.sum(res_t * res_t) < jnp.sum(res * res)) & jnp.all(jnp.isfinite(trial))
        return jnp.where(ok, trial, lam), None

    if newton:
        lam, _ = jax.lax.scan(newton_step, lam, None, length=newton)
    return lam, rho, mu_c


def _iterate(apgd, start, iterations, tol):
    """The iterate of ``apgd`` (``(x, y, theta) -> (x, y, theta, x - y)``, one accelerated
    step) from ``(start, start, 1)``: ``iterations`` steps (``tol`` ``None``, a ``scan``), or a
    ``while_loop`` stopping once a step moves the iterate by at most ``tol`` times its largest
    entry (:func:`_solve_fixed`)."""
    one = jnp.ones((), start.dtype)
    if tol is None:
        (x, _, _), _ = jax.lax.scan(
            lambda c, _: (apgd(c)[:3], None), (start, start, one), None, length=iterations
        )
        return x

    def more(c):
        x, _, _, k, moved = c
        big = jnp.max(jnp.abs(x), initial=0.0)
        return (k < iterations) & ~(moved <= tol * big)

    def body(c):
        x, y, th, dx = apgd(c[:3])
        return x, y, th, c[3] + 1, jnp.max(jnp.abs(dx), initial=0.0)

    inf = jnp.asarray(jnp.inf, start.dtype)
    return jax.lax.while_loop(more, body, (start, start, one, jnp.zeros((), jnp.int32), inf))[0]


def _apgd(
    Gs, us, mu_c, step, iterations, coulomb, nc, width, pyramid, start=None, tol=None, factors=None
):
    """The accelerated projected gradient steps of :func:`_solve_fixed` on flat impulses
    (contact blocks, then scalar rows) from ``start`` (``None``: zeros; :func:`_iterate`);
    ``factors = (U, V, d)``: the products ``G y`` as ``U (V y) + d y`` (pyramid edges without
    scalar rows, :func:`solve_contact_impulses`)."""
    dtype = us.dtype
    start = jnp.zeros_like(us) if start is None else start
    if factors is None:
        matvec = lambda y: Gs @ y  # noqa: E731
    else:
        U, V, d = factors
        matvec = lambda y: U @ (V @ y) + d * y  # noqa: E731

    def apgd(carry):
        x, y, th = carry
        g = _desaxce(matvec(y) + us, mu_c, coulomb, nc, width, pyramid)
        xn = _project_rows(y - step * g, mu_c, nc, width, pyramid)
        thn = 0.5 * (1 + jnp.sqrt(1 + 4 * th * th))
        restart = g @ (xn - x) > 0
        yn = jnp.where(restart, xn, xn + ((th - 1) / thn) * (xn - x))
        return xn, yn, jnp.where(restart, 1.0, thn).astype(dtype), xn - y

    return _iterate(apgd, start, iterations, tol)


def _apgd_rows(Gs, us, mu_c, step, factors, iterations, coulomb, nc, width, start=None, tol=None):
    """:func:`_apgd` on second-order cones without scalar rows, the iterate held as rows
    ``(width, nc)`` (each row of every contact contiguous: the cone projection and De Saxce's
    term vectorise over the contacts, not over a block's three rows): the same steps (to the
    rounding of the sums' order); ``factors = (U, V, d)``: the products ``G y`` as ``U (V y) + d
    y`` (:func:`_solve_fixed`)."""
    dtype = us.dtype
    rows = lambda z: z.reshape(nc, width).T  # noqa: E731  (flat blocks -> (width, nc))
    u_r = rows(us)
    start = jnp.zeros_like(us) if start is None else start
    if factors is not None:
        U, V, d = factors
        r = U.shape[1]
        U_r = U.reshape(nc, width, r).transpose(1, 0, 2).reshape(-1, r)  # rows' order
        V_r = V.reshape(r, nc, width).transpose(0, 2, 1).reshape(r, -1)
        d_r = rows(d)

        def matvec(y):
            return (U_r @ (V_r @ y.reshape(-1))).reshape(width, nc) + d_r * y
    else:
        n = nc * width
        G_r = Gs.reshape(nc, width, nc, width).transpose(1, 0, 3, 2).reshape(n, n)

        def matvec(y):
            return (G_r @ y.reshape(-1)).reshape(width, nc)

    def apgd(carry):
        x, y, th = carry
        g = matvec(y) + u_r
        if coulomb:  # De Saxce's modified velocity (_desaxce)
            g = g.at[0].add(mu_c * _safe_norm(g[1:], 0))
        z = y - step * g
        ln, lt = _cone_projection(z[0], z[1:], mu_c, 0)
        xn = jnp.concatenate([ln[None], lt], 0)
        thn = 0.5 * (1 + jnp.sqrt(1 + 4 * th * th))
        restart = jnp.sum(g * (xn - x)) > 0
        yn = jnp.where(restart, xn, xn + ((th - 1) / thn) * (xn - x))
        return xn, yn, jnp.where(restart, 1.0, thn).astype(dtype), xn - y

    return _iterate(apgd, rows(start), iterations, tol).T.reshape(-1)


@functools.partial(jax.custom_jvp, nondiff_argnums=(6, 7, 8, 9, 10, 11, 12, 13))
def _solve(
    G, u, mu, live, factors, x0, iterations, newton, coulomb, width, nl, pyramid, tol, polish
):
    args = (iterations, newton, coulomb, width, nl, pyramid)
    return _solve_fixed(G, u, mu, live, *args, factors=factors, x0=x0, tol=tol, polish=polish)[0]


@_solve.defjvp
def _solve_jvp(iterations, newton, coulomb, width, nl, pyramid, tol, polish, primals, tangents):
    # factors: G's, to rounding (no tangent of their own); the warm start x0 moves the
    # iterates, not the fixed point: no derivative in it
    G, u, mu, live, factors, x0 = primals
    dG, du, dmu, _, _, _ = tangents
    args = (iterations, newton, coulomb, width, nl, pyramid)
    lam, rho, mu_c = _solve_fixed(
        G, u, mu, live, *args, factors=factors, x0=x0, tol=tol, polish=polish
    )
    nc = mu_c.shape[0]
    _, Jr = _residual_jacobian(lam, G, u, mu_c, rho, coulomb, nc, width, pyramid)
    _, rhs = jax.jvp(
        lambda G_, u_, mu_: _flat_map(
            lam, G_, u_, jnp.broadcast_to(mu_, mu_c.shape), rho, coulomb, nc, width, pyramid
        ),
        (G, u, mu),
        (dG, du, dmu),
    )
    return lam, linalg.general_solve(Jr, -rhs)


def solve_cone_complementarity(
    G: Array,
    u: Array,
    mu: ArrayLike,
    iterations: int = 100,
    newton: int = 0,
    *,
    coulomb: bool = False,
    live: ArrayLike | None = None,
    cone: str = "elliptic",
    rows: int = 0,
    width: int | None = None,
    factors: tuple[Array, Array, Array] | None = None,
    x0: Array | None = None,
    tolerance: float | None = None,
    polish: bool = True,
) -> Array | tuple[Array, Array]:
    """Impulses ``lam (nc, 3)`` with ``lam_i`` in the friction cone ``|lam_t| <= mu lam_n``,
    ``G lam + u`` in its dual and complementary to it (Anitescu's convex relaxation of Coulomb
    friction): the fixed point of ``lam = P_K(lam - rho (G lam + u))``, equivalently the
    minimiser of ``1/2 lam^T G lam + u^T lam`` over the cones. With ``coulomb=True``, Coulomb's
    law itself: the fixed point of ``lam = P_K(lam - rho (w + mu |w_t| e_n))``, ``w = G lam +
    u`` (De Saxce's modified velocity: a sliding contact at ``w_n = 0``, not ``mu |w_t|``).

    ``G (3nc, 3nc)`` symmetric positive definite (regularise a semi-definite Delassus matrix
    first), ``u (3nc,)`` the free contact velocity, rows ``[n, t1, t2]`` per contact; ``mu``
    scalar or ``(nc,)``. ``iterations`` accelerated projected gradient steps, then ``newton``
    semismooth Newton steps: a fixed count (no data-dependent control flow, no factorisation
    unless ``newton > 0``); derivatives by implicit differentiation of the fixed point (not
    through the iterations; one dense solve per differentiated step). ``live (nc,)`` bools
    (``None``: all): the contacts whose block of ``G`` bounds the step size; the others must be
    empty slots whose impulse is 0 (:func:`live_contacts`).

    ``cone="pyramidal"``: MuJoCo's pyramidal cone; ``G (4nc, 4nc)`` and ``u (4nc,)`` are in the
    rows of the pyramid's edges (:func:`pyramid_edges`), the impulses ``lam (nc, 4) >= 0`` (one
    per edge: the orthant is the cone, ``mu`` is in the rows and unused here) and
    ``coulomb=True`` adds De Saxce's term of the pyramid (:func:`_desaxce`).

    ``rows`` (static): scalar one-sided rows after the contact blocks (frictionless, impulse
    ``>= 0``: MuJoCo's joint-limit rows), in ``G``, ``u`` and ``live`` (then ``(nc + rows,)``);
    returns ``(lam, lam_rows (rows,))``. Each costs one row of ``G``, not a block.

    ``width`` (static): the rows of each contact block (``None``: 3, 4 for
    ``cone="pyramidal"``): an elliptic block ``[n, t_1 ... t_k]`` with any number of tangent
    rows (the cone ``|lam_t| <= mu lam_n``; MuJoCo's condim 4 / 6 after their scaling,
    :func:`_soft_problem`), a pyramid's ``2 (condim - 1)`` edges.

    ``factors = (U, V, d)`` (optional, no scalar rows): ``G = U V + diag(d)`` to rounding,
    ``U (n, r)``, ``V (r, n)`` of a rank ``r`` below ``n`` (``J``, ``M^-1 J^T`` and the
    regulariser of a Delassus matrix of more rows than the model has dofs): the iterations'
    products and the step's bound use them (``O(n r)`` per step instead of ``O(n^2)``), the
    same iterates to rounding; ``G`` is still used for the rest (row steps, residual,
    derivatives).

    ``x0`` (flat ``(nc width + rows,)``, ``None``: zeros): the impulses the iterations start
    from, a warm start (the previous step's solution; no derivative is taken in it: the
    result is differentiated as the fixed point). ``tolerance`` (static, ``None``: every
    iteration runs): stop the iterations early once a step moves the (scaled) impulses by at
    most ``tolerance`` times their largest entry (:func:`_solve_fixed`); ``iterations`` is
    then the most that run. ``polish`` (static; with ``rows``): the safeguarded active-set step on
    the scalar rows after the iterations (:func:`_polish_rows`); ``False`` skips it.
    """
    if cone not in ("elliptic", "pyramidal"):
        raise ValueError(f"solve_cone_complementarity: cone must be 'elliptic' or 'pyramidal', "
                         f"got {cone!r}")  # fmt: skip
    pyramid = cone == "pyramidal"
    width = (4 if pyramid else 3) if width is None else int(width)
    nl = int(rows)
    nc = (u.shape[0] - nl) // width
    live = jnp.ones(nc + nl, u.dtype) if live is None else jnp.asarray(live).astype(u.dtype)
    mu = jnp.asarray(mu, u.dtype)
    x0 = jnp.zeros(u.shape, u.dtype) if x0 is None else jnp.asarray(x0, u.dtype)
    if x0.shape != u.shape:
        raise ValueError(
            f"solve_cone_complementarity: x0 must have the shape of u {u.shape}, got {x0.shape}"
        )
    tol = None if tolerance is None else float(tolerance)
    settings = (int(iterations), int(newton), bool(coulomb), width, nl, pyramid, tol, bool(polish))
    lam = _solve(G, u, mu, live, None if nl else factors, x0, *settings)
    lam_c = lam[: nc * width].reshape(nc, width)
    return (lam_c, lam[nc * width :]) if nl else lam_c


def _relative_support(xp, supp, body, other):
    """``supp[body] - supp[other]`` (``(nc, nv)``: +1 / -1 on the dofs that move only the body /
    only the other body; ``other = -1``, the world, supports none), with ``xp`` numpy for static
    indices or ``jax.numpy`` for traced ones."""
    return supp[body] - xp.where((other >= 0)[:, None], supp[xp.maximum(other, 0)], 0)


def point_jacobian(model, ws, frames, point, body=None, other=None):
    """Linear-velocity Jacobians of the contact points, world axes: ``(nc, 3, nv)``: the
    velocity of ``frames.body``'s point relative to ``frames.other``'s, ``J_body(p) -
    J_other(p)`` (the world's is zero; the dofs both bodies hang from cancel). ``body``,
    ``other`` ``(nc,)``: traced body indices instead of the frames' static ones (contacts chosen
    at run time, :func:`closest_contacts`)."""
    t = model.topo
    supp = np.asarray(t.body_dof_support, np.int64)
    S = ws.S  # (nv, 6) at the world-state origin
    lin = S[None, :, 3:] + spatial.cross(S[None, :, :3], point[:, None, :])  # (nc, nv, 3)
    if body is not None:
        if other is None:
            raise ValueError("point_jacobian: body and other are given together")
        w = _relative_support(jnp, jnp.asarray(supp, lin.dtype), body, other)
        return jnp.swapaxes(w[..., None] * lin, 1, 2)
    w = _relative_support(np, supp, frames.body_index, frames.other_index)
    J = (
        jnp.asarray(w, lin.dtype)[..., None] * lin
        if np.any(w < 0)
        else (jnp.where(jnp.asarray(w > 0)[..., None], lin, 0.0))
    )
    return jnp.swapaxes(J, 1, 2)


def rotation_jacobian(model, ws, frames, body=None, other=None):
    """Angular-velocity Jacobians of the contacts, world axes: ``(nc, 3, nv)``: the angular
    velocity of ``frames.body`` relative to ``frames.other`` (MuJoCo's ``jacdifr`` of
    ``mj_contactJacobian``, the torsional / rolling rows of condim 4 / 6); ``body``, ``other``
    as :func:`point_jacobian`'s."""
    supp = np.asarray(model.topo.body_dof_support, np.int64)
    ang = ws.S[None, :, :3]  # (1, nv, 3)
    if body is not None:
        w = _relative_support(jnp, jnp.asarray(supp, ang.dtype), body, other)
    else:
        w = jnp.asarray(_relative_support(np, supp, frames.body_index, frames.other_index))
    return jnp.swapaxes(w.astype(ang.dtype)[..., None] * ang, 1, 2)


def solve_residual(G, u, mu, lam, coulomb, rows=None, pyramid=None):
    """The relative fixed-point residual of impulses ``lam (nc, 3)`` (or pyramid edge impulses
    ``(nc, 4)``; with ``rows (k,)``, the impulses of the scalar one-sided rows after them,
    :func:`solve_cone_complementarity`'s ``rows``) of the cone problem ``(G, u, mu)``:
    ``max |F(lam) - lam|`` over ``max(|lam|, |F(lam)|)`` (a scalar, 0 at the solution; about 1
    when ``lam`` is far from it), with ``F`` the projected step of :func:`_flat_map` and
    ``rho`` the solver's; no derivative (a diagnostic). ``pyramid``: whether ``lam``'s blocks
    are pyramid edges (``None``: 4 wide)."""
    nc, width = lam.shape
    x = lam.reshape(-1) if rows is None else jnp.concatenate([lam.reshape(-1), rows])
    G, u, mu, x = (jax.lax.stop_gradient(y) for y in (G, u, mu, x))
    rho = _row_steps(G, nc, width)
    mu_c = jnp.broadcast_to(mu, (nc,)).astype(x.dtype)
    F = _flat_map(x, G, u, mu_c, rho, coulomb, nc, width, pyramid)
    scale = jnp.maximum(jnp.max(jnp.abs(x), initial=0.0), jnp.max(jnp.abs(F), initial=0.0))
    tiny = jnp.finfo(x.dtype).tiny
    return jnp.max(jnp.abs(F - x), initial=0.0) / jnp.maximum(scale, tiny)


def solve_contact_impulses(
    contact: Constraint,
    G,
    frames,
    v_free_rows,
    dt,
    v_rows=None,
    *,
    residual=False,
    factors=None,
    x0=None,
    flat=False,
):
    """Regularise ``G`` and solve for the impulses of the constraint model.

    ``v_free_rows (nc, w)``: contact velocities ``[n, t1, t2]`` of the contact-free step
    (``w = 3``; :attr:`ContactFrames.width` rows with condim 4 / 6: the angular rows
    ``[n_w, t1_w, t2_w]`` after them); ``v_rows (nc, w)``: those at the step's start (soft
    contact's reference acceleration). Returns impulses ``(nc, w)`` in the same rows; with
    ``residual=True``, ``(impulses, residual)``: the solve's relative fixed-point residual
    (:func:`solve_residual`). ``factors = (J, V)`` (optional): ``G = J V`` to rounding, ``J (n,
    nv)`` the rows' Jacobian and ``V = M^-1 J^T (nv, n)``, ``nv`` below ``n``: the solve's
    products use them where the problem is ``G`` plus a diagonal (elliptic cones without
    condim 4 / 6; :func:`solve_cone_complementarity`) or ``E G E^T`` plus a diagonal (MuJoCo's
    pyramid edges ``E``, soft contact: the factors ``E J``, ``M^-1 J^T E^T``), the same
    iterates to rounding.

    ``x0`` (optional): the start of the solve (the flat solution of an earlier solve of the
    same slots: a warm start, :attr:`jaxdyn.sim.State.impulses`); ``flat=True`` appends the
    flat solution ``x`` in the solver's own rows (:func:`solve_problem`) to the results:
    ``(impulses, x)``, or ``(impulses, residual, x)`` with ``residual=True``.
    """
    problem = contact_problem(contact, G, frames, v_free_rows, dt, v_rows)
    settings = (contact.iterations, contact.newton, not contact.relaxed)
    Gr, E = problem[0], problem[4]
    fac = None
    if factors is not None and E is None:  # Gr = G + diag(d): d the regulariser as applied
        fac = (*factors, jnp.diagonal(Gr) - jnp.diagonal(G))
    elif factors is not None and E is not None and E.shape[1] > E.shape[2]:
        # pyramid edges: Gr = E G E^T + diag(R) = (E J)(M^-1 J^T E^T) + diag(d), d the
        # regulariser as applied (to rounding)
        J, V = factors
        nc, ne, w = E.shape
        Ue = jnp.einsum("cij,cjk->cik", E, J.reshape(nc, w, -1)).reshape(nc * ne, -1)
        Ve = jnp.einsum("kcj,cij->kci", V.reshape(-1, nc, w), E).reshape(-1, nc * ne)
        fac = (Ue, Ve, jnp.diagonal(Gr) - jnp.sum(Ue * Ve.T, -1))
    lam, _, res, x = solve_problem(
        *problem, *settings, residual=residual, factors=fac, x0=x0, tolerance=contact.tolerance
    )
    out = (lam,) + ((res,) if residual else ()) + ((x,) if flat else ())
    return out if len(out) > 1 else lam


def solve_problem(
    Gr,
    u,
    mu,
    live,
    E,
    iterations,
    newton,
    coulomb,
    rows=0,
    residual=True,
    factors=None,
    x0=None,
    tolerance=None,
    polish=True,
):
    """Solve the cone problem ``(Gr, u, mu, live, E)`` of :func:`contact_problem` (with
    ``rows`` scalar one-sided rows after its contact blocks in ``Gr``, ``u`` and ``live``:
    joint limits, :func:`jaxdyn.sim.limits.solve`) by :func:`solve_cone_complementarity`:
    ``(lam (nc, w), lam_rows (rows,), residual)``, the contact impulses in the rows ``[n,
    t1, t2]`` (``w = 3``; condim 4 / 6: ``[n, t1, t2, n_w(, t1_w, t2_w)]``; a pyramid's edge
    impulses ``f``, or the scaled rows of condim 4 / 6, mapped through ``E^T f``), the scalar
    rows' impulses (``None`` without), the solve's relative residual (:func:`solve_residual`,
    on the problem as solved; ``None`` with ``residual=False``) and the flat solution ``x``
    in the solver's own rows (``(nc w_e + rows,)``, ``w_e`` the blocks' rows: 3, a pyramid's
    edges, condim 4 / 6's scaled rows), what a next solve of the same slots warm-starts from
    (``x0``, with ``tolerance``: :func:`solve_cone_complementarity`); ``factors``:
    :func:`solve_cone_complementarity`'s."""
    pyramid = E is not None and E.shape[1] > E.shape[2]  # edges (else a scaling of the rows)
    cone = "pyramidal" if pyramid else "elliptic"
    width = 3 if E is None else E.shape[1]
    out = solve_cone_complementarity(
        Gr, u, mu, iterations, newton, coulomb=coulomb, live=live, cone=cone, rows=rows,
        width=width, factors=factors, x0=x0, tolerance=tolerance, polish=polish,
    )  # fmt: skip
    lam, lam_r = cast("tuple[Array, Array]", out) if rows else (cast("Array", out), None)
    res = solve_residual(Gr, u, mu, lam, coulomb, rows=lam_r, pyramid=pyramid) if residual else None
    x = lam.reshape(-1) if lam_r is None else jnp.concatenate([lam.reshape(-1), lam_r])
    lam = lam if E is None else jnp.einsum("ci,cij->cj", lam, E)  # to the rows [n, t1, t2, ...]
    return lam, lam_r, res, x


def contact_problem(contact: Constraint, G, frames, v_free_rows, dt, v_rows=None):
    """The cone problem :func:`solve_contact_impulses` solves: ``(Gr, u, mu (nc,), live (nc,),
    E)``, ``Gr`` the Delassus matrix ``G`` plus the contact model's diagonal regulariser and
    ``u`` the free velocities, in the rows ``[n, t1, t2]`` (``E = None``: second-order cones,
    ``(3nc, 3nc)``, ``(3nc,)``) or in those of MuJoCo's pyramid edges (``cone="pyramidal"``:
    ``E (nc, 4, 3)`` from :func:`pyramid_edges`, ``(4nc, 4nc)``, ``(4nc,)``; the impulses
    ``f (nc, 4)`` act as ``E^T f``). With condim 4 / 6 (:attr:`ContactFrames.width` ``w``
    rows ``[n, t1, t2, n_w, ...]``) the pyramid has ``2 (w - 1)`` edges and an elliptic
    problem is in scaled rows, ``E (nc, w, w)`` diagonal (:func:`_spin_scaling`).
    Other rows (joint limits, :mod:`jaxdyn.sim.limits`) are appended to it by the caller."""
    if contact.soft:
        return _soft_problem(contact, G, frames, v_free_rows, v_rows, dt)
    dtype = G.dtype
    d = frames.distance
    if contact.baumgarte is not None:
        beta = jnp.asarray(contact.baumgarte, dtype)
    elif frames.solref is not None:
        beta = jnp.minimum(1.0, dt / jnp.asarray(frames.solref[:, 0], dtype))
    else:
        beta = jnp.asarray(DEFAULT_BAUMGARTE, dtype)
    b = jnp.where(d > 0, d, beta * d) / dt  # close a gap within the step, remove a penetration
    u = v_free_rows.at[:, 0].add(b)
    E = None
    if frames.spin is None:
        mu = jnp.broadcast_to(_friction(contact, frames, dtype), d.shape)
    else:  # condim 4 / 6: the scaled rows of MuJoCo's elliptic cone (_spin_scaling)
        mu, S, E = _spin_scaling(contact, frames, dtype)
        s = S.reshape(-1)
        G = G * s[:, None] * s[None, :]
        u = S * u
        # the rows a contact lacks (S = 0: zero rows, no impulse either way) get the normal
        # row's diagonal instead of eps alone: the implicit derivative's Jacobian (I - dF /
        # dlam) is then regular there (with eps it was singular to rounding: NaN gradients)
        w = frames.width
        normal = jnp.repeat(jnp.diagonal(G)[0::w], w)
        G = G + jnp.diag(jnp.where(s == 0, normal, 0.0))
    Gr = G + jnp.diag(contact.regularization * jnp.diag(G) + jnp.finfo(dtype).eps)
    return Gr, u.reshape(-1), mu, live_contacts(d), E


def _spin_scaling(contact: Constraint, frames: ContactFrames, dtype):
    """``(mu (nc,), S (nc, w), E (nc, w, w))`` of contacts with torsional / rolling rows
    (condim 4 / 6, :attr:`ContactFrames.spin`) on MuJoCo's elliptic cone ``sum_j (f_j /
    mu_j)^2 <= f_n^2`` (``mu_j``: :func:`friction_rows`): the rows ``j`` solved scaled, ``f_j =
    (mu_j / mu_1) y_j`` (``S``: 1 on the normal, ``mu_j / mu_1`` on the friction rows; 0 on the
    rows a contact lacks, which then carry nothing; 1 where ``mu_1 = 0``, whose cone holds no
    friction), so that the cone is the round ``|y_t| <= mu_1 f_n`` of every other contact;
    ``E = diag(S)`` maps the solved ``y`` back (``f = E^T y``, :func:`solve_problem`)."""
    nc, w = frames.distance.shape[0], frames.width
    fr = friction_rows(contact, frames, dtype)
    mu = fr[:, 0]
    pos = mu > 0
    scale = jnp.where(pos[:, None], fr / jnp.where(pos, mu, 1.0)[:, None], 1.0)
    S = jnp.concatenate([jnp.ones((nc, 1), dtype), scale], 1)
    return mu, S, S[:, :, None] * jnp.eye(w, dtype=dtype)


#: the refusal of condim 4 / 6 by the contact model that does not take it
CONDIM_HARD = (
    "condim 4 / 6 (torsional / rolling friction): the Compliant contact model has condim 1 "
    "and 3 only; Constraint() (hard or soft=True) takes it"
)


def friction_rows(contact: Constraint, frames: ContactFrames, dtype) -> Array:
    """Each contact's friction coefficients per friction row ``(nc, width - 1)``: MuJoCo's
    ``mjContact.friction`` ``(sliding, sliding[, torsional[, rolling, rolling]])``
    (:attr:`ContactFrames.spin`; 0 on the rows a contact does not have), the sliding ones
    :func:`_friction`'s (the contact model's where it gives one)."""
    nc = frames.distance.shape[0]
    mu = jnp.broadcast_to(_friction(contact, frames, dtype), (nc,))
    cols = [mu, mu]
    if frames.spin is not None:
        sp = frames.spin.astype(dtype)
        cols.append(sp[:, 0])
        if sp.shape[1] > 1:
            cols += [sp[:, 1], sp[:, 1]]
    return jnp.stack(cols, -1)


def _soft_parameters(contact: Constraint, frames: ContactFrames, dtype):
    """Each contact's ``solref (nc, 2)`` and clamped ``solimp (nc, 5)`` for ``soft=True``: the
    contact model's where it gives them, else the frames', else MuJoCo's defaults."""
    nc = frames.distance.shape[0]

    def pick(own, theirs, default, n):
        if own is not None:
            return jnp.broadcast_to(jnp.asarray(own, dtype), (nc, n))
        if theirs is not None:
            return jnp.asarray(theirs, dtype)
        return jnp.broadcast_to(jnp.asarray(default, dtype), (nc, n))

    solref = pick(contact.solref, frames.solref, _soft.DEFAULT_SOLREF, 2)
    solimp = pick(contact.solimp, frames.solimp, _soft.DEFAULT_SOLIMP, 5)
    return solref, _soft.clamp_solimp(solimp)


def _soft_gains(contact, frames, diag_n, dt):
    """``(h, k, b, imp, diagApprox, solref, solimp)`` of each contact of :func:`_soft_problem`
    (``diag_n (nc,)``: the normal rows' Delassus diagonal, the fallback of MuJoCo's
    ``invweight``)."""
    dtype = diag_n.dtype
    h = jnp.asarray(dt, dtype)
    r = frames.distance
    solref, solimp = _soft_parameters(contact, frames, dtype)
    k, b = _soft.gains(solref, solimp[:, 1], h, contact.refsafe)
    imp = _soft.impedance(solimp, jnp.where(r < 0, r, 0.0))
    diag = diag_n if frames.invweight is None else jnp.asarray(frames.invweight, dtype)
    diag = jnp.where(jnp.isnan(diag), diag_n, diag)
    return h, k, b, imp, diag, solref, solimp


def _soft_problem(contact, G, frames, v_free_rows, v_rows, dt):
    """MuJoCo's soft contact (:class:`Constraint` ``soft=True``) at the velocity level, the
    cone problem (:func:`contact_problem`) of the impulses ``lam = h f`` of MuJoCo's dual
    problem ``min 1/2 f^T (A + R) f + f^T (J a0 - aref)`` over the cones, i.e.
    ``min 1/2 lam^T (A + R) lam + lam^T u`` with ``u = J v_free - J v - h aref``
    (``J v_free = J v + h J a0``); contacts that do not touch (``distance >= 0``, MuJoCo has
    no row for them) and empty slots carry none.

    Elliptic cones (MuJoCo's ``mj_makeImpedance``): ``R_0 = (1 - d) / d diagApprox`` on the
    normal, ``R_1 = R_0 / impratio`` on the sliding rows and ``R_j = R_1 mu_1^2 / mu_j^2`` on
    the torsional and rolling rows of condim 4 / 6 (:func:`friction_rows`), the cone
    MuJoCo's ``sum_j (f_j / mu_j)^2 <= f_n^2``. With condim 4 / 6 the rows ``j >= 3`` are
    solved scaled, ``f_j = (mu_j / mu_1) y_j``: the cone is then ``|y_t| <= mu_1 f_n`` and
    every friction row's ``R`` is ``R_1``; returned as the scaling ``E (nc, w, w)`` (diagonal:
    ``lam = E^T y``)."""
    dtype = G.dtype
    w = frames.width
    h, k, b, imp, diag, solref, solimp = _soft_gains(contact, frames, jnp.diagonal(G)[0::w], dt)
    if contact.cone == "pyramidal":
        return _soft_pyramid(contact, G, frames, v_free_rows, v_rows, h, k, b, imp, diag)
    r = frames.distance
    active = r < 0
    u = _elliptic_free(contact, frames, v_free_rows, v_rows, h, k, b, imp, solref, solimp)
    # not touching: a free normal velocity that puts every iterate in the polar cone
    u = u.at[:, 0].set(jnp.where(active, u[:, 0], jnp.asarray(NO_CONTACT, dtype) / h))
    Rn = _soft.regulariser(imp, diag)
    ratio = jnp.asarray(contact.impratio, dtype)
    Rt = Rn / jnp.maximum(_soft.MINVAL, ratio)
    R = jnp.concatenate([Rn[:, None], jnp.repeat(Rt[:, None], w - 1, 1)], 1).reshape(-1)
    if w == 3:  # MuJoCo's cone: the friction itself (impratio is in R only)
        mu = friction_rows(contact, frames, dtype)[:, 0]
        return G + jnp.diag(R), u.reshape(-1), mu, active, None
    # condim 4 / 6: y_j = f_j mu_1 / mu_j (0 on the rows a contact lacks: they carry nothing)
    mu, S, E = _spin_scaling(contact, frames, dtype)
    s = S.reshape(-1)
    Gs = G * s[:, None] * s[None, :] + jnp.diag(R)
    return Gs, (S * u).reshape(-1), mu, active, E


def _elliptic_free(contact, frames, v_free_rows, v_rows, h, k, b, imp, solref, solimp):
    """The free row velocities ``u = J v_free - J v - h aref`` ``(nc, w)`` of the elliptic
    cones' rows ``[n, t1, t2, ...]`` (:func:`_soft_problem`): ``aref = -b J_n v - k d(r) r``
    on the normal, ``-b_t J_t v`` on the friction rows (``b_t``: ``solreffriction``'s damping
    where it is given and not ``(0, 0)``, MuJoCo's ``mj_makeImpedance``)."""
    dtype = v_rows.dtype
    nc = frames.distance.shape[0]
    aref_n = _soft.reference(k, b, imp, frames.distance, v_rows[:, 0])
    b_t = b  # the friction rows' damping: solreffriction's where it is given and not (0, 0)
    given = contact.solreffriction  # the contact model's, else the contacts' (<pair>)
    given = frames.solreffriction if given is None else given
    if given is not None:
        srf = jnp.broadcast_to(jnp.asarray(given, dtype), (nc, 2))
        on = (srf[:, 0] != 0) | (srf[:, 1] != 0)
        # (0, 0) rows take solref's gains: no division by a zero timeconst in either branch
        _, b_f = _soft.gains(jnp.where(on[:, None], srf, solref), solimp[:, 1], h, contact.refsafe)
        b_t = jnp.where(on, b_f, b)
    aref = jnp.concatenate([aref_n[:, None], -b_t[:, None] * v_rows[:, 1:]], 1)
    return v_free_rows - v_rows - h * aref


def soft_elliptic_rows(contact: Constraint, frames, diag_n, v_free_rows, v_rows, dt):
    """The rows of MuJoCo's elliptic cones for the primal Newton solve of
    ``Constraint(solver="newton")`` (:func:`jaxdyn.sim._primal.newton_solve_elliptic`), in the
    contacts' rows ``[n, t1, t2, ...]`` (MuJoCo's ``mjCNSTR_CONTACT_ELLIPTIC`` rows): ``(u (nc,
    w), D (nc, w), mu (nc,), friction (nc, w - 1), active (nc,))``. As MuJoCo's
    ``mj_makeImpedance``: ``R_0 = (1 - d) / d diagApprox`` on the normal, ``R_1 = R_0 /
    impratio`` on the sliding rows, ``R_j = R_1 mu_1^2 / mu_j^2`` on the torsional and rolling
    ones, ``D = 1 / R`` (0 on the rows a contact lacks and on the contacts that do not touch:
    MuJoCo has no row there), the regularised cone's ``mu = mu_1 sqrt(R_1 / R_0)``
    (``mjContact.mu``; 0 on a frictionless contact) and the friction rows' coefficients
    (``mjContact.friction``, :func:`friction_rows`). ``diag_n (nc,)``: the normal rows'
    Delassus diagonal (the fallback of MuJoCo's ``invweight``)."""
    h, k, b, imp, diag, solref, solimp = _soft_gains(contact, frames, diag_n, dt)
    dtype = diag.dtype
    active = frames.distance < 0
    u = _elliptic_free(contact, frames, v_free_rows, v_rows, h, k, b, imp, solref, solimp)
    fr = friction_rows(contact, frames, dtype)
    R0 = _soft.regulariser(imp, diag)
    R1 = R0 / jnp.maximum(_soft.MINVAL, jnp.asarray(contact.impratio, dtype))
    mu = fr[:, 0] * jnp.sqrt(R1 / R0)
    has = fr > 0
    f1 = fr[:, :1]
    Rt = R1[:, None] * f1 * f1 / jnp.where(has, fr * fr, 1.0)
    Rt = Rt.at[:, :2].set(R1[:, None])  # the sliding rows: R_1 itself
    Dt = jnp.where(has & (f1 > 0), 1.0 / Rt, 0.0)
    D = jnp.concatenate([(1.0 / R0)[:, None], Dt], 1)
    D = jnp.where(active[:, None], D, 0.0)
    mu = jnp.where(active & (fr[:, 0] > 0), mu, 0.0)
    return u, D, mu, fr, active


def pyramid_edges(n, mu, tangent=None):
    """MuJoCo's pyramidal cone (``mj_instantiateContact``): ``E (nc, 2 (w - 1), w)``, the
    edge rows ``n +- mu_k r_k`` of each friction row ``r_k`` in the rows ``[n, t1, t2, ...]``
    of :func:`tangent_basis`: ``[n + mu s1, n - mu s1, n + mu s2, n - mu s2]`` for condim 3
    (``s1``, ``s2``: :func:`mujoco_tangents` of ``n`` and the contacts' given ``tangent``,
    ``None``: MuJoCo's default frame; a pyramid is not symmetric about its normal, its axes are
    MuJoCo's), then ``n +- mu_3 n_w`` (torsional, condim 4) and ``n +- mu_4 s1_w``,
    ``n +- mu_5 s2_w`` (rolling, condim 6; ``_w``: on the angular rows). An edge's velocity is
    ``E w`` and its impulse ``f >= 0`` acts as ``E^T f``. ``mu``: scalar or ``(nc,)`` (condim
    3), or ``(nc, w - 1)`` per friction row (:func:`friction_rows`); a torsional or rolling
    row of friction 0 (a contact without it) gives two zero edges."""
    t1, t2 = tangent_basis(n)
    s1, s2 = mujoco_tangents(n, tangent)
    mu = jnp.asarray(mu, n.dtype)
    if mu.ndim < 2:
        mu = jnp.broadcast_to(mu, n.shape[:1])[:, None] * jnp.ones(2, n.dtype)
    nc, k = mu.shape
    w = k + 1
    dot = lambda a, c: jnp.sum(a * c, -1)  # noqa: E731
    one = jnp.ones(nc, n.dtype)
    zero = jnp.zeros(nc, n.dtype)
    axes = [jnp.stack([dot(t1, s), dot(t2, s)], -1) for s in (s1, s2)]  # (nc, 2) in (t1, t2)
    rows = []
    for j in range(k):
        d = jnp.zeros((nc, w), n.dtype)
        if j in (0, 1):  # sliding: s1, s2 on the rows t1, t2
            d = d.at[:, 1:3].set(axes[j])
        elif j == 2:  # torsional: the normal's angular row
            d = d.at[:, 3].set(one)
        else:  # rolling: s1, s2 on the angular rows t1_w, t2_w
            d = d.at[:, 4:6].set(axes[j - 3])
        base = jnp.stack([one] + [zero] * (w - 1), -1)
        edge_p = base + mu[:, j : j + 1] * d
        edge_m = base - mu[:, j : j + 1] * d
        if j >= 2:  # a contact without the row: no edges (MuJoCo has none)
            has = (mu[:, j] > 0)[:, None]
            edge_p, edge_m = jnp.where(has, edge_p, 0.0), jnp.where(has, edge_m, 0.0)
        rows += [edge_p, edge_m]
    return jnp.stack(rows, 1)


def _soft_pyramid(contact, G, frames, v_free_rows, v_rows, h, k, b, imp, diag):
    """:func:`_soft_problem` on MuJoCo's pyramidal cones (``Constraint(cone="pyramidal")``;
    MuJoCo's ``mj_instantiateContact``, ``mj_diagApprox``, ``mj_makeImpedance``): per contact
    two edge rows ``J_n +- mu_k J_k`` per friction row (:func:`pyramid_edges`, on the
    contacts' given tangents; condim 4 / 6: the torsional and rolling rows too, with their own
    ``mu_k``), each with the contact's distance as its violation (``aref = -b J_edge v -
    k d(r) r`` on every edge), ``diagApprox = (1 + mu^2) diagApprox_n`` (the first edge's) and
    the common regulariser ``R = 2 mu_r^2 (1 - d) / d diagApprox`` on every edge, ``mu_r = mu
    sqrt(1 / impratio)`` (the regularised cone's ``mu``); impulses ``f >= 0`` per edge. A
    contact with ``mu = 0`` (condim 1) is MuJoCo's frictionless row; the edges of the rows a
    contact lacks (condim below the scene's) carry nothing. Returns the edge rows' problem and
    ``E`` (the impulses ``f`` act on the rows ``[n, t1, t2, ...]`` as ``E^T f``)."""
    u, R, mu, active, E = _pyramid_rows(contact, frames, v_free_rows, v_rows, h, k, b, imp, diag)
    nc, ne, w = E.shape
    Gw = G.reshape(nc, w, nc, w)
    Ge = jnp.einsum("aij,ajbk,blk->aibl", E, Gw, E).reshape(ne * nc, ne * nc)
    return Ge + jnp.diag(R), u, mu, active, E


def soft_pyramid_rows(contact: Constraint, frames, diag_n, v_free_rows, v_rows, dt):
    """The rows of :func:`_soft_pyramid`'s problem without its Delassus matrix (what the
    primal Newton solve of ``Constraint(solver="newton")`` takes, :mod:`jaxdyn.sim._primal`):
    ``(u (nc ne,), R (nc ne,), mu (nc,), active (nc,), E (nc, ne, w))``; ``diag_n (nc,)``: the
    normal rows' Delassus diagonal (the fallback of MuJoCo's ``invweight``)."""
    h, k, b, imp, diag, _, _ = _soft_gains(contact, frames, diag_n, dt)
    return _pyramid_rows(contact, frames, v_free_rows, v_rows, h, k, b, imp, diag)


def _pyramid_rows(contact, frames, v_free_rows, v_rows, h, k, b, imp, diag):
    dtype = diag.dtype
    nc, w = frames.distance.shape[0], frames.width
    ne = 2 * (w - 1)
    r = frames.distance
    active = r < 0
    fr = friction_rows(contact, frames, dtype)
    mu = fr[:, 0]
    E = pyramid_edges(frames.normal, fr, frames.tangent)  # (nc, ne, w)
    edges = lambda x: jnp.einsum("cij,cj->ci", E, x)  # noqa: E731
    aref = -b[:, None] * edges(v_rows) - (k * imp * r)[:, None]
    u = edges(v_free_rows - v_rows) - h * aref
    inert = jnp.concatenate([jnp.zeros((nc, 4), bool), (fr[:, 2:] <= 0).repeat(2, 1)], 1)
    live = active[:, None] & ~inert
    u = jnp.where(live, u, jnp.asarray(NO_CONTACT, dtype) / h)
    R0 = _soft.regulariser(imp, diag + mu * mu * diag)  # MuJoCo's tran + fri^2 tran
    R1 = R0 / jnp.maximum(_soft.MINVAL, jnp.asarray(contact.impratio, dtype))
    mu_r = mu * jnp.sqrt(R1 / R0)
    # mu = 0 (condim 1): MuJoCo's one frictionless row with R0; four equal edges with 4 R0 each
    # share its impulse equally, the same problem (MuJoCo's condim-3 pyramid would have R = 0)
    R = jnp.repeat(jnp.where(mu > 0, 2 * mu_r * mu_r * R0, 4 * R0), ne)
    return u.reshape(-1), R, mu, active, E

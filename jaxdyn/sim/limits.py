"""MuJoCo's joint-limit constraint in :mod:`jaxdyn.sim`: one-sided soft constraint rows of
hinge and slide joints, solved with the contact rows (:class:`LimitConstraints`).

MuJoCo (``mj_instantiateLimit``; Todorov 2014, "Convex and analytically-invertible dynamics with
contacts and constraints", ICRA; MuJoCo's documentation, Computation: soft constraints) gives
every limited hinge or slide joint a row per side whose distance ``dist = q - lower`` (lower
side, Jacobian ``+1`` on the joint's dof) or ``dist = upper - q`` (upper side, Jacobian ``-1``)
is below the joint's ``margin`` (jaxdyn: one row per joint, on its nearer side, the same rows
while the range is at least ``2 margin`` wide). A row with violation ``r = dist - margin``
and velocity ``J v`` carries a force ``f >= 0`` of the soft constraint

    aref = -b (J v) - k imp(r) r,      R = (1 - imp) / imp * dof_invweight0,

(:mod:`jaxdyn.sim._soft`: ``k``, ``b`` of ``solreflimit``, ``imp`` of ``solimplimit``), a row of
MuJoCo's dual problem ``min 1/2 f^T (A + R) f + f^T (J a0 - aref)`` over ``f >= 0`` and the
contacts' cones, solved together with the contact rows. At the velocity level (impulses
``lam = h f`` on the step's free velocity, as :class:`jaxdyn.sim.Constraint` with
``soft=True``; :meth:`LimitConstraints.row_problem`) the row is a scalar row appended to the
contact problem (:func:`solve`), impulse ``>= 0`` without friction, beside the contacts'
second-order cones or MuJoCo's pyramids (``Constraint(cone="pyramidal")``): one row of ``G``
each (:func:`jaxdyn.sim.solve_cone_complementarity`'s ``rows``). Unlike a spring-damper
(:class:`jaxdyn.sim.JointLimits`), the limit cancels the share ``imp`` of whatever pushes a
joint into its stop (a strong actuator), as MuJoCo's does.

A limited tendon gets the same row on its length ``L`` (MuJoCo's tendon limit: ``dist = L -
lower`` with the tendon's Jacobian, or ``upper - L`` with its negative; the tendon's
``solreflimit``, ``solimplimit``, ``margin`` and ``tendon_invweight0``). Under the implicit
integrators (``M_eff = M + h D``) the rows are posed with the plain ``M`` and act through
``M_eff``, as MuJoCo's constraint force enters its ``Euler`` / ``implicitfast`` step
(:func:`solve`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import joints
from . import _soft
from . import contact as C
from .collision import NO_CONTACT

if TYPE_CHECKING:
    from collections.abc import Callable

    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model
    from .actuators import FixedTendons, SpatialTendons

__all__ = ["FrictionLoss", "LimitConstraints"]


class LimitConstraints(eqx.Module):
    """MuJoCo's joint-limit constraint rows (module docs), ``n`` of them: one per limited hinge
    or slide joint, acting on the side the joint is nearer to (MuJoCo's rows of the two sides
    are never active together while ``upper - lower >= 2 margin``; a joint narrower than that
    is given as two rows, one per side, with the other bound infinite).

    Static: ``dof`` (the joint's velocity coordinate) and ``qpos`` (its position coordinate)
    per row; ``refsafe`` (MuJoCo's ``refsafe``: ``timeconst >= 2 h``); ``iterations``,
    ``newton``: the solver's steps when the configuration has no
    :class:`~jaxdyn.sim.Constraint` contact and no dry-friction rows (with a contact, the rows
    are solved in its problem and with its settings;
    :func:`~jaxdyn.sim.solve_cone_complementarity`; with :class:`FrictionLoss` rows and no
    contact, with them by the primal Newton solve).

    Tendon rows (static ``tendons``, after the joint rows): ``("fixed", i)`` or
    ``("spatial", i)`` per row, the ``i``-th tendon of the configuration's
    :class:`~jaxdyn.sim.actuators.FixedTendons` / ``SpatialTendons``: MuJoCo's tendon limit,
    the same row on the tendon's length ``L`` (``dist = L - lower`` with Jacobian the tendon's
    ``J``, or ``upper - L`` with ``-J``) with the tendon's ``solreflimit``, ``solimplimit``,
    ``margin`` and ``diag`` its ``tendon_invweight0``. (Give the tendon itself no
    ``lower`` / ``upper``, or its spring-damper acts too.)

    Arrays: ``lower``, ``upper (n,)`` (the range; ``-inf`` / ``inf`` for a side without a
    limit), ``margin (n,)`` (MuJoCo's joint ``margin``: a side acts from ``dist < margin``,
    ``dist = q - lower`` or ``upper - q``), ``solref (n, 2)`` (``solreflimit``, either form),
    ``solimp (n, 5)`` (``solimplimit``) and ``diag (n,)`` (MuJoCo's ``efc_diagApprox`` of the
    row: ``dof_invweight0``).

    :meth:`jaxdyn.io.mjcf.MJCFModel.limit_constraints` builds them from an MJCF file,
    :meth:`from_model` from a model's ``q_lower`` / ``q_upper``. In a
    :class:`~jaxdyn.sim.SimConfig` (``limit_constraints=``) they replace the spring-damper of
    ``cfg.limits`` on their joints (which still limits the other joints and the tendons) and
    need a velocity-level integrator (``"euler"``, ``"implicit"``, ``"implicit_damping"``)."""

    lower: jnp.ndarray
    upper: jnp.ndarray
    margin: jnp.ndarray
    solref: jnp.ndarray
    solimp: jnp.ndarray
    diag: jnp.ndarray
    dof: tuple = eqx.field(static=True)
    qpos: tuple = eqx.field(static=True)
    tendons: tuple = eqx.field(static=True, default=())
    refsafe: bool = eqx.field(static=True, default=True)
    iterations: int = eqx.field(static=True, default=100)
    newton: int = eqx.field(static=True, default=0)

    def __check_init__(self):
        if len(self.qpos) != len(self.dof):
            raise ValueError(
                f"LimitConstraints: dof and qpos need one entry per row, got {len(self.dof)} "
                f"and {len(self.qpos)}"
            )
        for k, t in enumerate(self.tendons):
            ok = isinstance(t, tuple) and len(t) == 2 and t[0] in ("fixed", "spatial")
            if not (ok and isinstance(t[1], (int, np.integer)) and t[1] >= 0):
                raise ValueError(
                    f"LimitConstraints: tendons[{k}] must be ('fixed', i) or ('spatial', i) "
                    f"with i >= 0, got {t!r}"
                )
        n = len(self.dof) + len(self.tendons)
        shapes = {
            "lower": (n,),
            "upper": (n,),
            "margin": (n,),
            "solref": (n, 2),
            "solimp": (n, 5),
            "diag": (n,),
        }
        concrete = True
        for name, shape in shapes.items():
            value = getattr(self, name)
            if isinstance(value, jax.core.Tracer):
                concrete = False
                continue
            if np.shape(value) != shape:
                raise ValueError(
                    f"LimitConstraints: {name} has shape {np.shape(value)}, expected {shape}"
                )
            a = np.asarray(value, float)
            ok = ~np.isnan(a) if name in ("lower", "upper") else np.isfinite(a)
            if not np.all(ok):
                raise ValueError(f"LimitConstraints: {name} must be finite")
        if concrete and n:
            lo, hi = np.asarray(self.lower, float), np.asarray(self.upper, float)
            margin = np.asarray(self.margin, float)
            one = np.isfinite(lo) != np.isfinite(hi)
            bad = np.nonzero(~one & ~(hi - lo >= 2 * margin))[0]
            if len(bad):
                i = int(bad[0])
                raise ValueError(
                    f"LimitConstraints: row {i}: upper - lower = {hi[i] - lo[i]:g} is below "
                    f"2 margin = {2 * margin[i]:g}: both sides can act at once; give the joint "
                    "two rows, one per side (the other bound -inf / inf)"
                )
        for name, least in (("iterations", 1), ("newton", 0)):
            k = getattr(self, name)
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < least:
                raise ValueError(
                    f"LimitConstraints: {name} must be an integer >= {least}, got {k!r}"
                )

    @property
    def rows(self) -> int:
        return len(self.dof) + len(self.tendons)

    def check_tendons(
        self,
        fixed: FixedTendons | None,
        spatial: SpatialTendons | None,
        owner: str = "LimitConstraints",
    ) -> None:
        """Refuse (``ValueError`` from ``owner``) a tendon row whose tendon ``fixed`` /
        ``spatial`` (the configuration's ``FixedTendons`` / ``SpatialTendons``) lacks."""
        for k, (kind, i) in enumerate(self.tendons):
            src = fixed if kind == "fixed" else spatial
            if src is None or i >= src.size():
                raise ValueError(
                    f"{owner}: tendon row {k} is {kind} tendon {i}, but the "
                    f"configuration has {0 if src is None else src.size()} {kind} tendons"
                )

    def tendon_rows(
        self,
        model: Model,
        fixed: FixedTendons | None,
        spatial: SpatialTendons | None,
        q: Array,
    ) -> tuple[Array, Array]:
        """``(L (k,), J (k, nv))``: the lengths and Jacobians of the tendon rows' tendons
        (``fixed``, ``spatial``: the configuration's ``FixedTendons`` / ``SpatialTendons``)."""
        self.check_tendons(fixed, spatial)
        LJ = {}  # each kind's (L, J) of all its tendons, computed once
        L, J = [], []
        for kind, i in self.tendons:
            if kind not in LJ:
                src = cast("FixedTendons | SpatialTendons", fixed if kind == "fixed" else spatial)
                LJ[kind] = src.jacobian(model, q)
            L.append(LJ[kind][0][i])
            J.append(LJ[kind][1][i])
        return jnp.stack(L), jnp.stack(J)

    @classmethod
    def from_model(
        cls,
        model: Model,
        solref: ArrayLike | tuple[float, ...] = _soft.DEFAULT_SOLREF,
        solimp: ArrayLike | tuple[float, ...] = _soft.DEFAULT_SOLIMP,
        margin: float = 0.0,
        q0: ArrayLike | None = None,
        **static: Any,
    ) -> LimitConstraints:
        """A row for each hinge and slide joint with a finite ``q_lower`` or ``q_upper`` (two,
        one per side, where the range is narrower than ``2 margin``), with one ``solref``,
        ``solimp`` and ``margin`` for all and ``diag`` MuJoCo's ``dof_invweight0`` of a one-DoF
        joint, the diagonal of ``M^-1`` at ``q0`` (default: the neutral configuration).
        ``static``: ``refsafe``, ``iterations``, ``newton``."""
        from ..algorithms.configuration import neutral_configuration
        from ..algorithms.crba import crba
        from .actuators import joint_properties

        props = joint_properties(model)
        lo, hi = np.asarray(props["lower"], float), np.asarray(props["upper"], float)
        t = model.topo
        q = neutral_configuration(model) if q0 is None else jnp.asarray(q0, model.mass.dtype)
        minv = np.diag(np.linalg.inv(np.asarray(crba(model, q), float)))
        rows = []
        for b in range(t.nb):
            if int(t.kind[b]) != joints.ONE_DOF:
                continue
            qi, vi = int(t.q_start[b]), int(t.v_start[b])
            rows += [(vi, qi, a, z) for a, z in row_bounds(lo[qi], hi[qi], margin)]
        n = len(rows)
        dtype = model.mass.dtype
        rep = lambda x, k: jnp.broadcast_to(jnp.asarray(x, dtype), (n, k))  # noqa: E731
        col = lambda k: jnp.asarray(np.asarray([r[k] for r in rows], float).reshape(n), dtype)  # noqa: E731
        return cls(
            lower=col(2),
            upper=col(3),
            margin=jnp.full(n, margin, dtype),
            solref=rep(solref, 2),
            solimp=rep(solimp, 5),
            diag=jnp.asarray(minv[np.asarray([r[0] for r in rows], np.int64)], dtype),
            dof=tuple(r[0] for r in rows),
            qpos=tuple(r[1] for r in rows),
            **static,
        )

    def check_model(self, model: Model) -> None:
        """Raise ``ValueError`` if a row's ``dof`` / ``qpos`` is not the coordinate pair of a
        hinge or slide joint of ``model`` (static)."""
        t = model.topo
        for i, (d, qi) in enumerate(zip(self.dof, self.qpos, strict=True)):
            ok = 0 <= d < t.nv
            if ok:
                b = int(t.dof_body[d])
                ok = int(t.kind[b]) == joints.ONE_DOF and int(t.q_start[b]) == qi
            if not ok:
                raise ValueError(
                    f"LimitConstraints: row {i}: dof={d}, qpos={qi} is not the coordinate pair "
                    f"of a hinge or slide joint of {model.name!r}"
                )

    def distance(self, q: Array) -> tuple[Array, Array]:
        """``(dist, side)``, one per joint row: MuJoCo's ``efc_pos`` of each row's nearer side,
        ``q - lower`` (``side = +1``, Jacobian ``+1``) or ``upper - q`` (``side = -1``)."""
        dtype = q.dtype
        n = len(self.dof)
        x = q[np.asarray(self.qpos, np.int64)]
        below = x - jnp.asarray(self.lower, dtype)[:n]
        above = jnp.asarray(self.upper, dtype)[:n] - x
        lower = below <= above
        return jnp.where(lower, below, above), jnp.where(lower, 1.0, -1.0).astype(dtype)

    def jacobian(self, side: Array, nv: int, tendon_J: Array | None = None) -> Array:
        """``J (n, nv)``: ``side`` on each joint row's dof, ``side`` times the tendon's
        Jacobian (``tendon_J (k, nv)``, :meth:`tendon_rows`) on each tendon row."""
        n = len(self.dof)
        J = jnp.zeros((n, nv), side.dtype)
        J = J.at[np.arange(n), np.asarray(self.dof, np.int64)].set(side[:n])
        if not self.tendons:
            return J
        assert tendon_J is not None, "LimitConstraints.jacobian: tendon rows need tendon_J"
        return jnp.concatenate([J, side[n:, None] * tendon_J.astype(side.dtype)], 0)

    def row_problem(
        self,
        q: Array,
        v: Array,
        v_free: Array,
        h: ArrayLike,
        tendon: tuple[Array, Array] | None = None,
    ) -> tuple[Array, Array, Array, Array]:
        """The rows of the velocity-level problem (:func:`solve`): ``(u, R, active, side)``,
        each ``(n,)``: ``u = J v_free - J v - h aref`` (``NO_CONTACT / h`` where the row is
        inactive, ``dist >= margin``: MuJoCo has no row there, and the impulse is 0), the
        regulariser ``R``, whether the row is active and its side (:meth:`distance`).
        ``tendon``: :meth:`tendon_rows` where there are tendon rows."""
        dtype = v.dtype
        h = jnp.asarray(h, dtype)
        dof = np.asarray(self.dof, np.int64)
        x, xd, xd_free = q[np.asarray(self.qpos, np.int64)], v[dof], v_free[dof]
        if self.tendons:
            if tendon is None:
                raise ValueError("LimitConstraints.row_problem: tendon rows need tendon=(L, J)")
            L, Jt = tendon
            x = jnp.concatenate([x, L.astype(dtype)])
            xd = jnp.concatenate([xd, Jt @ v])
            xd_free = jnp.concatenate([xd_free, Jt @ v_free])
        below = x - jnp.asarray(self.lower, dtype)
        above = jnp.asarray(self.upper, dtype) - x
        lower = below <= above
        dist = jnp.where(lower, below, above)
        side = jnp.where(lower, 1.0, -1.0).astype(dtype)
        r = dist - jnp.asarray(self.margin, dtype)
        active = r < 0
        r = jnp.where(active, r, 0.0)  # (an infinite bound: no row, and no inf in the algebra)
        solimp = _soft.clamp_solimp(jnp.asarray(self.solimp, dtype))
        k, b = _soft.gains(jnp.asarray(self.solref, dtype), solimp[:, 1], h, self.refsafe)
        imp = _soft.impedance(solimp, r)
        aref = _soft.reference(k, b, imp, r, side * xd)
        u = side * (xd_free - xd) - h * aref
        u = jnp.where(active, u, jnp.asarray(NO_CONTACT, dtype) / h)
        R = _soft.regulariser(imp, jnp.asarray(self.diag, dtype))
        return u, R, active, side


def row_bounds(lo: float, hi: float, margin: float) -> list[tuple[float, float]]:
    """``(lower, upper)`` of the rows of a joint with the range ``[lo, hi]`` (``-inf`` / ``inf``
    where it has no bound): none, one, or one per side where both can act at once
    (``hi - lo < 2 margin``)."""
    if not (np.isfinite(lo) or np.isfinite(hi)):
        return []
    if np.isfinite(lo) and np.isfinite(hi) and hi - lo < 2 * margin:
        return [(lo, np.inf), (-np.inf, hi)]
    return [(lo, hi)]


def primal_rows(
    limits: LimitConstraints,
    model: Model,
    q: Array,
    v: Array,
    v_free: Array,
    h: ArrayLike,
    tendons: tuple = (None, None),
) -> tuple[Array, Array, Array]:
    """The limit rows ``(J (n, nv), u (n,), R (n,))`` of :func:`solve`'s problem (one-sided
    rows: impulse ``>= 0``) for the primal Newton solve of ``Constraint(solver="newton")``
    (:func:`jaxdyn.sim._primal.solve_soft_rows`); ``v_free``: the free velocity under the
    ``M`` the rows are posed with (MuJoCo's plain ``M``)."""
    limits.check_model(model)
    tendon = limits.tendon_rows(model, tendons[0], tendons[1], q) if limits.tendons else None
    u, R, _, side = limits.row_problem(q, v, v_free, h, tendon)
    J = limits.jacobian(side, model.nv, None if tendon is None else tendon[1])
    return J.astype(v.dtype), u, R


def solve(
    limits: LimitConstraints,
    model: Model,
    q: Array,
    v: Array,
    v_free: Array,
    solve_minv: Callable[[Array], Array],
    h: ArrayLike,
    contact: C.Constraint | None = None,
    Jc: Array | None = None,
    frames=None,
    rows: Array | None = None,
    v_rows: Array | None = None,
    solve_m: Callable[[Array], Array] | None = None,
    v_free_m: Array | None = None,
    tendons: tuple = (None, None),
    x0: Array | None = None,
) -> tuple[Array, Array | None, Array, Array]:
    """The step's velocity change ``dv (nv,)`` of the limit rows solved together with the
    contacts of the constraint model ``contact`` (``None``: the limit rows alone), the
    contact impulses ``(nc, 3)`` (``None`` without contacts) and the solve's relative residual
    (:func:`jaxdyn.sim.contact.solve_residual`), and the flat solution in the solver's rows
    (:func:`jaxdyn.sim.contact.solve_problem`'s ``x``: the contact blocks, then the limit
    rows), which ``x0`` takes to warm-start the next step's solve (``None``: zeros).

    ``solve_minv(X (nv, k))``: ``M_eff^-1 X`` (the step's ABA sweeps); ``v``, ``v_free``: the
    velocities at the step's start and after the constraint-free step; with ``contact``:
    ``Jc (w nc, nv)`` the contact rows ``[n, t1, t2]`` (``w = 3``; condim 4 / 6: the angular
    rows after them, :attr:`~jaxdyn.sim.contact.ContactFrames.width`), ``frames`` their
    :class:`~jaxdyn.sim.contact.ContactFrames`, ``rows (nc, w)`` ``Jc v_free`` and ``v_rows``
    ``Jc v`` (soft contact) as :func:`jaxdyn.sim.contact.contact_problem` takes them. One
    problem: ``G = J M_eff^-1 J^T`` of all rows, the contact model's regulariser on the
    contact block, the limits' on theirs.

    ``tendons``: the configuration's ``(FixedTendons, SpatialTendons)`` (each or ``None``),
    for the tendon rows (:meth:`LimitConstraints.tendon_rows`).

    ``solve_m``, ``v_free_m``: ``M^-1 X`` with the plain mass matrix and the free velocity
    under it, for an integrator whose ``M_eff`` is not ``M`` (``"implicit"``,
    ``"implicit_damping"``; ``None``: ``M_eff = M``). MuJoCo computes the force of its soft
    rows with ``M`` (``mj_fwdConstraint``: ``A = J M^-1 J^T``, ``J qacc_smooth``,
    ``qacc_smooth = M^-1 qfrc_smooth``) and only then steps with ``M_eff``
    (``mj_EulerSkip`` and ``mj_implicitSkip`` solve ``M_eff qacc = qfrc_smooth +
    qfrc_constraint``); so here the soft rows (the limits, and the contacts with
    ``contact.soft``) are posed with ``G = J M^-1 J^T`` among themselves and ``u`` from
    ``v_free_m``, and their impulses act through ``M_eff^-1`` (``dv``). The hard contacts'
    rows (jaxdyn's model, no MuJoCo counterpart) and their coupling to the soft rows keep
    ``M_eff``, so that a hard contact's velocity condition holds for the step's velocity
    (the matrix stays symmetric and at least ``J M_eff^-1 J^T``: ``M^-1 >= M_eff^-1``)."""
    limits.check_model(model)
    dtype = v.dtype
    n = limits.rows
    tendon = limits.tendon_rows(model, tendons[0], tendons[1], q) if limits.tendons else None
    v_free_l = v_free if v_free_m is None else v_free_m
    u_l, R_l, live_l, side = limits.row_problem(q, v, v_free_l, h, tendon)
    Jl = limits.jacobian(side, model.nv, None if tendon is None else tendon[1])
    nrow = 0 if Jc is None else Jc.shape[0]
    J = Jl if Jc is None else jnp.concatenate([Jc, Jl], 0)
    MinvJT = solve_minv(J.T)
    G = J @ MinvJT
    if solve_m is not None:  # the soft rows among themselves with the plain M (MuJoCo's A)
        s0 = nrow if contact is not None and not contact.soft else 0
        G = G.at[s0:, s0:].set(J[s0:] @ solve_m(J[s0:].T))
    G = 0.5 * (G + G.T)
    E = None
    iterations, newton, coulomb = limits.iterations, limits.newton, False
    tolerance, polish = None, True
    if contact is None:  # the limit rows alone
        Gr, u, mu, live = G + jnp.diag(R_l), u_l, jnp.zeros(0, dtype), live_l
    else:
        Gr_c, u_c, mu_c, live_c, E = C.contact_problem(
            contact, G[:nrow, :nrow], frames, rows, h, v_rows
        )
        # each limit row a scalar row after the contact blocks (impulse >= 0, no friction)
        Gcl = G[:nrow, nrow:]
        if E is not None:  # into the pyramid's edge rows (or condim 4 / 6's scaled rows)
            nc, ne, w = E.shape
            Gcl = jnp.einsum("cij,cjm->cim", E, Gcl.reshape(nc, w, n)).reshape(ne * nc, n)
        Gll = G[nrow:, nrow:] + jnp.diag(R_l)
        Gr = jnp.block([[Gr_c, Gcl], [Gcl.T, Gll]])
        u = jnp.concatenate([u_c, u_l])
        mu = mu_c  # (nc,), G's dtype
        live = jnp.concatenate([jnp.asarray(live_c).astype(dtype), live_l.astype(dtype)])
        iterations, newton, coulomb = contact.iterations, contact.newton, not contact.relaxed
        tolerance, polish = contact.tolerance, contact.polish
    lam_c, lam_l, res, x = C.solve_problem(
        Gr, u, mu, live, E, iterations, newton, coulomb, rows=n, x0=x0, tolerance=tolerance,
        polish=polish,
    )  # fmt: skip
    assert lam_l is not None and res is not None  # rows=n > 0 (check_model), residual on
    dv = MinvJT @ jnp.concatenate([lam_c.reshape(-1), lam_l])
    return dv, (None if contact is None else lam_c), res, x


class FrictionLoss(eqx.Module):
    """MuJoCo's dry joint friction (``frictionloss``; efc type ``mjCNSTR_FRICTION_DOF``): a
    soft constraint row per velocity coordinate ``dof`` (static), its Jacobian the unit vector
    of the coordinate, its force bounded by ``|f| <= frictionloss``, solved in the primal
    Newton solve of :class:`~jaxdyn.sim.Constraint` (``solver="newton"``, pyramidal and
    elliptic cones; :func:`jaxdyn.sim._primal.newton_solve`): the row's cost is quadratic
    while its force is inside the bound and linear beyond (MuJoCo's primal cost). The row sits
    at ``efc_pos = 0``: impedance ``imp = d(0)`` of ``solimp`` (its ``dmin``), reference
    ``aref = -b v`` (``b`` of ``solref``, MuJoCo's ``solreffriction``; Todorov 2014, ICRA),
    regulariser ``R = (1 - imp) / imp * diag`` (``diag``: ``dof_invweight0``). Per row:
    ``frictionloss (n,) >= 0``, ``solref (n, 2)`` (either form), ``solimp (n, 5)``, ``diag
    (n,)``; ``refsafe`` (static): MuJoCo's ``timeconst >= 2 h``.

    In a :class:`~jaxdyn.sim.SimConfig` (``friction_loss=``) its coordinates' smooth Coulomb
    friction (the model's ``friction``) is left out. Without contact (``contact=None``) the
    rows are solved with the :class:`LimitConstraints` rows alone, MuJoCo's primal problem of
    those rows minimised by the same Newton steps. The dual solves, the hard
    :class:`~jaxdyn.sim.Constraint` and :class:`~jaxdyn.sim.Compliant` contact have no such
    rows and refuse it.
    :meth:`jaxdyn.io.mjcf.MJCFModel.friction_loss` builds it from an MJCF file."""

    frictionloss: jnp.ndarray
    solref: jnp.ndarray
    solimp: jnp.ndarray
    diag: jnp.ndarray
    dof: tuple = eqx.field(static=True)
    refsafe: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        n = len(self.dof)
        if len(set(self.dof)) != n or any(
            isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in self.dof
        ):
            raise ValueError(
                f"FrictionLoss: dof must be distinct integers >= 0 (velocity coordinates), got "
                f"{self.dof!r}"
            )
        for name, shape in (
            ("frictionloss", (n,)),
            ("solref", (n, 2)),
            ("solimp", (n, 5)),
            ("diag", (n,)),
        ):
            value = getattr(self, name)
            if isinstance(value, jax.core.Tracer):
                continue
            if np.shape(value) != shape:
                raise ValueError(
                    f"FrictionLoss: {name} has shape {np.shape(value)}, expected {shape}"
                )
            a = np.asarray(value, float)
            if not np.all(np.isfinite(a)):
                raise ValueError(f"FrictionLoss: {name} must be finite")
            if name in ("frictionloss", "diag") and np.any(a < 0):
                raise ValueError(f"FrictionLoss: {name} must be >= 0")

    def check_model(self, model: Model) -> None:
        """Raise ``ValueError`` if a row's ``dof`` is not a velocity coordinate of ``model``."""
        for i, d in enumerate(self.dof):
            if d >= model.nv:
                raise ValueError(
                    f"FrictionLoss: row {i}: dof={d} is not a velocity coordinate of "
                    f"{model.name!r} (nv={model.nv})"
                )

    def primal_rows(
        self, model: Model, v: Array, v_free: Array, h: ArrayLike
    ) -> tuple[Array, Array, Array, Array, Array]:
        """The rows ``(J (n, nv), u (n,), R (n,), lo (n,), hi (n,))`` of the primal Newton
        solve (:func:`jaxdyn.sim._primal.solve_soft_rows`): ``u = J v_free - J v - h aref``,
        the impulse bounds ``-+ h frictionloss``; ``v_free``: the free velocity under the ``M``
        the rows are posed with (MuJoCo's plain ``M``)."""
        self.check_model(model)
        dtype = v.dtype
        h = jnp.asarray(h, dtype)
        dof = np.asarray(self.dof, np.int64)
        J = jnp.asarray(np.eye(model.nv)[dof], dtype)
        solimp = _soft.clamp_solimp(jnp.asarray(self.solimp, dtype))
        _, b = _soft.gains(jnp.asarray(self.solref, dtype), solimp[:, 1], h, self.refsafe)
        imp = _soft.impedance(solimp, jnp.zeros(len(dof), dtype))
        aref = _soft.reference(0.0, b, imp, 0.0, v[dof])
        u = (v_free[dof] - v[dof]) - h * aref
        R = _soft.regulariser(imp, jnp.asarray(self.diag, dtype))
        bound = h * jnp.asarray(self.frictionloss, dtype)
        return J, u, R, -bound, bound

"""MuJoCo's joint-limit constraint in :mod:`jaxdyn.sim`: one-sided soft constraint rows of
hinge and slide joints, solved with the contact rows (:class:`LimitConstraints`).

MuJoCo (``mj_instantiateLimit``; Todorov 2014, "Convex and analytically-invertible dynamics with
contacts and constraints", ICRA; MuJoCo's documentation, Computation: soft constraints) gives
every limited hinge or slide joint a row per side whose distance ``dist = q - lower`` (lower
side, Jacobian ``+1`` on the joint's dof) or ``dist = upper - q`` (upper side, Jacobian ``-1``)
is below the joint's ``margin``. A row with violation ``r = dist - margin`` and velocity
``J v`` carries a force ``f >= 0`` of the soft constraint

    aref = -b (J v) - k imp(r) r,      R = (1 - imp) / imp * dof_invweight0,

(:mod:`jaxdyn.sim._soft`: ``k``, ``b`` of ``solreflimit``, ``imp`` of ``solimplimit``), a row of
MuJoCo's dual problem ``min 1/2 f^T (A + R) f + f^T (J a0 - aref)`` over ``f >= 0`` and the
contacts' cones, solved together with the contact rows. At the velocity level (impulses
``lam = h f`` on the step's free velocity, as :class:`jaxdyn.sim.Constraint` with
``soft=True``) the row is a frictionless contact: a cone ``[n, t1, t2]`` with ``mu = 0`` whose
tangent rows carry nothing (:meth:`LimitConstraints.cone_rows`), appended to the contact
problem (:func:`solve`). Unlike a spring-damper (:class:`jaxdyn.sim.JointLimits`), the limit
cancels the share ``imp`` of whatever pushes a joint into its stop (a strong actuator), as
MuJoCo's does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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

__all__ = ["LimitConstraints"]


class LimitConstraints(eqx.Module):
    """MuJoCo's joint-limit constraint rows (module docs), ``n`` of them: one per limited side
    of a hinge or slide joint.

    Static: ``dof`` (the joint's velocity coordinate), ``qpos`` (its position coordinate) and
    ``side`` (``+1``: a lower limit, ``dist = q - limit``; ``-1``: an upper one, ``dist = limit
    - q``) per row; ``refsafe`` (MuJoCo's ``refsafe``: ``timeconst >= 2 h``); ``iterations``,
    ``newton``: the solver's steps when the configuration has no
    :class:`~jaxdyn.sim.Constraint` contact (with one, the rows are solved in its problem and
    with its settings; :func:`~jaxdyn.sim.solve_cone_complementarity`).

    Arrays: ``limit (n,)`` (the bound), ``margin (n,)`` (MuJoCo's joint ``margin``: the row acts
    from ``dist < margin``), ``solref (n, 2)`` (``solreflimit``, either form), ``solimp (n,
    5)`` (``solimplimit``) and ``diag (n,)`` (MuJoCo's ``efc_diagApprox`` of the row:
    ``dof_invweight0``).

    :meth:`jaxdyn.io.mjcf.MJCFModel.limit_constraints` builds them from an MJCF file,
    :meth:`from_model` from a model's ``q_lower`` / ``q_upper``. In a
    :class:`~jaxdyn.sim.SimConfig` (``limit_constraints=``) they replace the spring-damper of
    ``cfg.limits`` on their joints (which still limits the other joints and the tendons) and
    need a velocity-level integrator (``"euler"``, ``"implicit"``, ``"implicit_damping"``)."""

    limit: jnp.ndarray
    margin: jnp.ndarray
    solref: jnp.ndarray
    solimp: jnp.ndarray
    diag: jnp.ndarray
    dof: tuple = eqx.field(static=True)
    qpos: tuple = eqx.field(static=True)
    side: tuple = eqx.field(static=True)
    refsafe: bool = eqx.field(static=True, default=True)
    iterations: int = eqx.field(static=True, default=100)
    newton: int = eqx.field(static=True, default=0)

    def __check_init__(self):
        n = len(self.dof)
        if len(self.qpos) != n or len(self.side) != n:
            raise ValueError(
                f"LimitConstraints: dof, qpos and side need one entry per row ({n}), got "
                f"{len(self.dof)}, {len(self.qpos)} and {len(self.side)}"
            )
        if any(s not in (1, -1) for s in self.side):
            raise ValueError(f"LimitConstraints: side must hold +1 or -1, got {self.side}")
        shapes = {
            "limit": (n,),
            "margin": (n,),
            "solref": (n, 2),
            "solimp": (n, 5),
            "diag": (n,),
        }
        for name, shape in shapes.items():
            value = getattr(self, name)
            if isinstance(value, jax.core.Tracer):
                continue
            if np.shape(value) != shape:
                raise ValueError(
                    f"LimitConstraints: {name} has shape {np.shape(value)}, expected {shape}"
                )
            if not np.all(np.isfinite(np.asarray(value, float))):
                raise ValueError(f"LimitConstraints: {name} must be finite")
        for name, least in (("iterations", 1), ("newton", 0)):
            k = getattr(self, name)
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < least:
                raise ValueError(
                    f"LimitConstraints: {name} must be an integer >= {least}, got {k!r}"
                )

    @property
    def rows(self) -> int:
        return len(self.dof)

    @classmethod
    def from_model(
        cls,
        model: Model,
        solref: ArrayLike = _soft.DEFAULT_SOLREF,
        solimp: ArrayLike = _soft.DEFAULT_SOLIMP,
        margin: float = 0.0,
        q0: ArrayLike | None = None,
        **static,
    ) -> LimitConstraints:
        """A row for every finite ``q_lower`` / ``q_upper`` of the model's hinge and slide
        joints, with one ``solref``, ``solimp`` and ``margin`` for all and ``diag`` MuJoCo's
        ``dof_invweight0`` of a one-DoF joint, the diagonal of ``M^-1`` at ``q0`` (default: the
        neutral configuration). ``static``: ``refsafe``, ``iterations``, ``newton``."""
        from ..algorithms.configuration import neutral_configuration
        from ..algorithms.crba import crba
        from .actuators import joint_properties

        props = joint_properties(model)
        lo, hi = np.asarray(props["lower"], float), np.asarray(props["upper"], float)
        t = model.topo
        q = neutral_configuration(model) if q0 is None else jnp.asarray(q0, model.mass.dtype)
        minv = np.diag(np.linalg.inv(np.asarray(crba(model, q), float)))
        dofs, qs, sides, limits = [], [], [], []
        for b in range(t.nb):
            if int(t.kind[b]) != joints.ONE_DOF:
                continue
            qi, vi = int(t.q_start[b]), int(t.v_start[b])
            for side, bound in ((1, lo[qi]), (-1, hi[qi])):
                if np.isfinite(bound):
                    dofs.append(vi)
                    qs.append(qi)
                    sides.append(side)
                    limits.append(bound)
        n = len(dofs)
        dtype = model.mass.dtype
        rep = lambda x, k: jnp.broadcast_to(jnp.asarray(x, dtype), (n, k))  # noqa: E731
        return cls(
            limit=jnp.asarray(np.asarray(limits, float).reshape(n), dtype),
            margin=jnp.full(n, margin, dtype),
            solref=rep(solref, 2),
            solimp=rep(solimp, 5),
            diag=jnp.asarray(minv[np.asarray(dofs, np.int64)].reshape(n), dtype),
            dof=tuple(dofs),
            qpos=tuple(qs),
            side=tuple(sides),
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

    def distance(self, q: Array) -> Array:
        """MuJoCo's ``efc_pos`` of the rows ``(n,)``: ``q - lower`` / ``upper - q``."""
        dtype = q.dtype
        side = jnp.asarray(self.side, dtype)
        return side * (q[np.asarray(self.qpos, np.int64)] - jnp.asarray(self.limit, dtype))

    def jacobian(self, nv: int, dtype) -> Array:
        """``J (n, nv)``: ``side`` on each row's dof (a constant)."""
        J = np.zeros((self.rows, nv))
        J[np.arange(self.rows), np.asarray(self.dof, np.int64)] = self.side
        return jnp.asarray(J, dtype)

    def cone_rows(
        self, q: Array, v: Array, v_free: Array, h: ArrayLike
    ) -> tuple[Array, Array, Array]:
        """The rows as frictionless contacts of the velocity-level cone problem
        (:func:`jaxdyn.sim.contact.contact_problem`): ``(u (3n,), R (3n,), active (n,))``,
        ``u = J v_free - J v - h aref`` on each normal row (``NO_CONTACT / h`` where the row is
        inactive, ``dist >= margin``: MuJoCo has no row there, and the impulse is 0), 0 on
        the tangent rows, and the regulariser ``R`` (the tangent rows': the normal's, any
        positive value does: their Jacobian rows are 0 and ``mu = 0``)."""
        dtype = v.dtype
        h = jnp.asarray(h, dtype)
        side = jnp.asarray(self.side, dtype)
        dof = np.asarray(self.dof, np.int64)
        r = self.distance(q) - jnp.asarray(self.margin, dtype)
        active = r < 0
        solimp = _soft.clamp_solimp(jnp.asarray(self.solimp, dtype))
        k, b = _soft.gains(jnp.asarray(self.solref, dtype), solimp[:, 1], h, self.refsafe)
        imp = _soft.impedance(solimp, jnp.where(active, r, 0.0))
        aref = _soft.reference(k, b, imp, r, side * v[dof])
        u = side * (v_free[dof] - v[dof]) - h * aref
        u = jnp.where(active, u, jnp.asarray(NO_CONTACT, dtype) / h)
        R = _soft.regulariser(imp, jnp.asarray(self.diag, dtype))
        zero = jnp.zeros_like(u)
        return (
            jnp.stack([u, zero, zero], -1).reshape(-1),
            jnp.stack([R, R, R], -1).reshape(-1),
            active,
        )


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
) -> tuple[Array, Array | None]:
    """The step's velocity change ``dv (nv,)`` of the limit rows solved together with the
    contacts of the constraint model ``contact`` (``None``: the limit rows alone), and the
    contact impulses ``(nc, 3)`` (``None`` without contacts).

    ``solve_minv(X (nv, k))``: ``M_eff^-1 X`` (the step's ABA sweeps); ``v``, ``v_free``: the
    velocities at the step's start and after the constraint-free step; with ``contact``:
    ``Jc (3nc, nv)`` the contact rows ``[n, t1, t2]``, ``frames`` their
    :class:`~jaxdyn.sim.contact.ContactFrames`, ``rows (nc, 3)`` ``Jc v_free`` and ``v_rows``
    ``Jc v`` (soft contact) as :func:`jaxdyn.sim.contact.contact_problem` takes them. One
    problem: ``G = J M_eff^-1 J^T`` of all rows, the contact model's regulariser on the
    contact block, the limits' on theirs."""
    limits.check_model(model)
    dtype = v.dtype
    nv = model.nv
    n = limits.rows
    Jl = limits.jacobian(nv, dtype)
    u_l, R_l, live_l = limits.cone_rows(q, v, v_free, h)
    Jl3 = jnp.zeros((3 * n, nv), dtype).at[0::3].set(Jl)
    nrow = 0 if Jc is None else Jc.shape[0]
    J = Jl3 if Jc is None else jnp.concatenate([Jc, Jl3], 0)
    MinvJT = solve_minv(J.T)
    G = J @ MinvJT
    G = 0.5 * (G + G.T)
    if contact is None:
        Gr = G + jnp.diag(R_l)
        u, mu, live = u_l, jnp.zeros(n, dtype), live_l
        iterations, newton, coulomb = limits.iterations, limits.newton, False
    else:
        Gr_c, u_c, mu_c, live_c = C.contact_problem(
            contact, G[:nrow, :nrow], frames, rows, h, v_rows
        )
        reg = jnp.concatenate([jnp.diagonal(Gr_c) - jnp.diagonal(G)[:nrow], R_l])
        Gr = G + jnp.diag(reg)
        u = jnp.concatenate([u_c, u_l])
        mu = jnp.concatenate([mu_c.astype(dtype), jnp.zeros(n, dtype)])
        live = jnp.concatenate([jnp.asarray(live_c), live_l])
        iterations, newton, coulomb = contact.iterations, contact.newton, not contact.relaxed
    lam = C.solve_cone_complementarity(Gr, u, mu, iterations, newton, coulomb=coulomb, live=live)
    dv = MinvJT @ lam.reshape(-1)
    return dv, (None if contact is None else lam[: nrow // 3])

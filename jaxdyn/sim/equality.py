"""MuJoCo's equality constraints as soft constraints in :mod:`jaxdyn.sim` (connect, weld, joint).

:class:`Equalities` holds a scene's ``<equality>`` elements (``connect`` and ``weld`` between two
bodies or a body and the world, body or site semantics; ``joint`` with a quartic
``polycoef``) and applies them as MuJoCo does (Todorov 2014, "Convex and analytically-invertible
dynamics with contacts and constraints", ICRA; MuJoCo's ``mj_instantiateEquality``,
``mj_makeImpedance`` and its solver on equality rows): each constraint has a residual ``r(q)``
and a Jacobian ``J`` (``d r / dt = J v``), and the constraint force ``f`` is the one of the
*soft* constraint

    aref = -b (J v) - k imp r - Jdot v,     (A + R) f = aref - J a0,     tau_eq = J^T f,

with ``a0 = M^-1 (tau - C)`` the unconstrained acceleration, ``A = J M^-1 J^T`` (the Delassus
matrix), ``R = (1 - imp) / imp * diagApprox`` the regularisation, and from ``solref =
(timeconst, dampratio)`` (``timeconst`` raised to ``2 h`` unless MuJoCo's ``refsafe`` is off)
and ``solimp = (dmin, dmax, width, mid, power)``: ``b = 2 / (dmax timeconst)``, ``k = 1 /
(dmax timeconst dampratio)^2`` (or ``solref = (-stiffness, -damping)``: ``k = stiffness /
dmax^2``, ``b = damping / dmax``) and ``imp`` MuJoCo's impedance of the violation (the norm of
the constraint's rows for connect and weld). Without other constraint rows this is the
minimiser of MuJoCo's convex problem, which its solvers reach exactly for a quadratic cost, so
the forces agree with MuJoCo's to rounding. ``Jdot v`` (the constraint acceleration at
``a = 0``) is the term MuJoCo 3.7.0 and later put on the connect / weld rows (none has it
on joint rows). Older releases leave it out (``with_drift=False``), which makes ``J a0``
depend on the velocity coordinates: there jaxdyn takes it in MuJoCo's (a free joint's linear
velocity in world axes: ``J (a0 + c)``, ``c = w x v_b`` on its linear rows). ``diagApprox`` is
MuJoCo's approximation of ``diag(A)`` from the inverse weights at ``qpos0``
(``body_invweight0``, ``dof_invweight0``): constant rows of :attr:`Equalities.diag`.

Without a constraint solve in the step, ``tau_eq`` enters it as a force, at every evaluation
of the accelerations (each RK4 stage), computed with the plain mass matrix as MuJoCo's
``qfrc_constraint``: the implicit integrators treat it explicitly (MuJoCo's ``Euler`` and
``implicitfast`` do too). Where the step solves constraint rows (joint limits,
:class:`~jaxdyn.sim.LimitConstraints`, or :class:`~jaxdyn.sim.Constraint` contact), MuJoCo
solves the equality rows in the same problem, and so does jaxdyn: :meth:`Equalities.row_problem`
gives them at the velocity level (impulses ``lam = h f``, unbounded), and the step eliminates
them exactly from the problem of the other rows (``jaxdyn.sim.core._equality_rows``, a Schur
complement), which has the minimiser of the one problem.

Residuals (MuJoCo's ``efc_pos``), points ``p1``, ``p2`` and orientations ``R1``, ``R2`` in the
world:

* connect: ``p1 - p2`` (3 rows);
* weld: ``p1 - p2`` and ``torquescale * im(quat(R2^T R1))`` (6 rows; the relative pose
  ``relpose`` folded into ``R1``);
* joint: ``q1 - ref1 - c0 - (c1 x + c2 x^2 + c3 x^3 + c4 x^4)`` with ``x = q2 - ref2``, or
  ``q1 - ref1 - c0`` without a second joint (1 row).

The Jacobians are the exact derivatives of these residuals along ``q ⊕ dv`` (MuJoCo's
``efc_J``): :meth:`Equalities.kinematics` forms them, and ``Jdot v``, in O(rows nv) from the
step's motion subspaces, body velocities and bias accelerations; :meth:`Equalities.jacobian`
and :meth:`Equalities.drift` are the forward-mode derivatives of :meth:`Equalities.residual`,
a second algorithm (slower to compile) that the tests compare them with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import spatial
from ..algorithms import kinematics as kin
from ..algorithms.configuration import integrate
from ..model import tree
from . import _soft

if TYPE_CHECKING:
    from collections.abc import Callable

    from jax import Array
    from jax.typing import ArrayLike

    from ..algorithms.kinematics import WorldState
    from ..model.model import Model

__all__ = ["Equalities"]

KINDS = ("connect", "weld", "joint")
_ROWS = {"connect": 3, "weld": 6, "joint": 1}
_MINVAL = _soft.MINVAL


class Equalities(eqx.Module):
    """MuJoCo's equality constraints ``connect``, ``weld`` and ``joint`` (module docs), ``n``
    of them, rows stacked in order.

    Static: ``kind`` (``"connect"``, ``"weld"`` or ``"joint"`` per constraint); ``body1``,
    ``body2`` (jaxdyn body of each side of a connect / weld, ``-1``: the world; for a joint
    constraint the ``q`` indices of its joints, ``body2 = -1`` without a second one);
    ``refsafe`` (MuJoCo's ``refsafe``: ``timeconst >= 2 h``).

    Arrays: ``point1``, ``point2`` ``(n, 3)`` (the constrained points in their bodies' frames;
    world coordinates on the world side), ``rot1``, ``rot2`` ``(n, 3, 3)`` (the welded frames'
    orientations in their bodies), ``torquescale (n,)``, ``ref1``, ``ref2 (n,)`` and
    ``polycoef (n, 5)`` (joint constraints: MuJoCo's ``qpos0`` of the joints and ``polycoef``),
    ``solref (n, 2)``, ``solimp (n, 5)``, ``diag (rows,)`` (MuJoCo's ``efc_diagApprox`` per row)
    and ``active (n,)`` (1 or 0; MuJoCo's ``eq_active``: an array, so switching a constraint
    does not recompile). Entries a kind does not use are ignored."""

    point1: jnp.ndarray
    point2: jnp.ndarray
    rot1: jnp.ndarray
    rot2: jnp.ndarray
    torquescale: jnp.ndarray
    ref1: jnp.ndarray
    ref2: jnp.ndarray
    polycoef: jnp.ndarray
    solref: jnp.ndarray
    solimp: jnp.ndarray
    diag: jnp.ndarray
    active: jnp.ndarray
    kind: tuple = eqx.field(static=True)
    body1: tuple = eqx.field(static=True)
    body2: tuple = eqx.field(static=True)
    refsafe: bool = eqx.field(static=True, default=True)
    with_drift: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        n = len(self.kind)
        bad = [k for k in self.kind if k not in KINDS]
        if bad:
            raise ValueError(f"Equalities: kind must be one of {KINDS}, got {bad[0]!r}")
        if len(self.body1) != n or len(self.body2) != n:
            raise ValueError(
                f"Equalities: body1 and body2 need one entry per constraint ({n}), got "
                f"{len(self.body1)} and {len(self.body2)}"
            )
        shapes = {
            "point1": (n, 3),
            "point2": (n, 3),
            "rot1": (n, 3, 3),
            "rot2": (n, 3, 3),
            "torquescale": (n,),
            "ref1": (n,),
            "ref2": (n,),
            "polycoef": (n, 5),
            "solref": (n, 2),
            "solimp": (n, 5),
            "diag": (self.rows,),
            "active": (n,),
        }
        for name, shape in shapes.items():
            value = getattr(self, name)
            if isinstance(value, jax.core.Tracer):
                continue
            if np.shape(value) != shape:
                raise ValueError(
                    f"Equalities: {name} has shape {np.shape(value)}, expected {shape}"
                )
            if not np.all(np.isfinite(np.asarray(value, float))):
                raise ValueError(f"Equalities: {name} must be finite")

    def check_model(self, model: Model) -> None:
        """Raise ``ValueError`` if a body or joint index does not exist in ``model`` (static)."""
        t = model.topo
        for i, kind in enumerate(self.kind):
            for side, b in (("body1", self.body1[i]), ("body2", self.body2[i])):
                if kind != "joint" and not -1 <= b < t.nb:
                    raise ValueError(
                        f"Equalities: constraint {i} ({kind}): {side}={b} is not a body of "
                        f"{model.name!r} (nb={t.nb}) or -1 (the world)"
                    )
                if kind == "joint" and (b >= 0 or side == "body1"):
                    _q_to_v(t, b, f"Equalities: constraint {i} (joint): {side}")

    @property
    def rows(self) -> int:
        """Number of constraint rows (3 per connect, 6 per weld, 1 per joint constraint)."""
        return sum(_ROWS[k] for k in self.kind)

    def size(self) -> int:
        return len(self.kind)

    # ------------------------------------------------------------------ residual, Jacobian
    def residual(self, model: Model, q: Array) -> Array:
        """The stacked residuals ``(rows,)`` at ``q`` (MuJoCo's ``efc_pos`` of the rows)."""
        dtype = q.dtype
        need = any(k != "joint" for k in self.kind)
        if need and model.nb:
            R, p = kin.body_placements(model, q)
        out = []
        for i, kind in enumerate(self.kind):
            if kind == "joint":
                c = jnp.asarray(self.polycoef[i], dtype)
                r = q[self.body1[i]] - self.ref1[i] - c[0]
                if self.body2[i] >= 0:
                    x = q[self.body2[i]] - self.ref2[i]
                    r = r - x * (c[1] + x * (c[2] + x * (c[3] + x * c[4])))
                out.append(r[None])
                continue
            sides = []
            for b, P, Rl in (
                (self.body1[i], self.point1[i], self.rot1[i]),
                (self.body2[i], self.point2[i], self.rot2[i]),
            ):
                P, Rl = jnp.asarray(P, dtype), jnp.asarray(Rl, dtype)
                if b < 0:
                    sides.append((P, Rl))
                else:
                    sides.append((R[b] @ P + p[b], R[b] @ Rl))
            (p1, R1), (p2, R2) = sides
            out.append(p1 - p2)
            if kind == "weld":
                out.append(jnp.asarray(self.torquescale[i], dtype) * _quat_im(R2.T @ R1))
        return jnp.concatenate(out)

    def jacobian(self, model: Model, q: Array) -> tuple[Array, Array]:
        """``(r (rows,), J (rows, nv))``: the residuals and their derivatives along
        ``q ⊕ dv`` at ``dv = 0`` (``d r / dt = J v``)."""
        zero = jnp.zeros(model.nv, q.dtype)

        def res(dv):
            return self.residual(model, integrate(model, q, dv))

        return self.residual(model, q), jax.jacfwd(res)(zero)

    def drift(self, model: Model, q: Array, v: Array) -> Array:
        """``Jdot v (rows,)``: the second derivative of the residuals along ``q ⊕ t v`` at
        ``t = 0`` (the constraint acceleration at zero ``a``), zero on joint rows."""
        dtype = v.dtype

        def r(t):
            return self.residual(model, integrate(model, q, t * v))

        def rdot(t):
            return jax.jvp(r, (t,), (jnp.ones((), dtype),))[1]

        jdv = jax.jvp(rdot, (jnp.zeros((), dtype),), (jnp.ones((), dtype),))[1]
        body = np.concatenate([np.full(_ROWS[k], k != "joint") for k in self.kind])
        return jnp.where(body, jdv, 0.0)

    def kinematics(
        self, model: Model, ws: WorldState, origin: Array, q: Array, v: Array
    ) -> tuple[Array, Array, Array]:
        """``(r, J, Jdot v)`` from the step's world state ``ws`` (centred at ``origin``, the
        floating base's position) and ``v``, in O(rows nv): the rows of :meth:`residual`,
        :meth:`jacobian` and :meth:`drift` from the bodies' world motion subspaces, spatial
        velocities and bias accelerations (Featherstone 2008, sec. 4.2 / 5.3), the weld's
        rotation rows by the quaternion kinematics ``d qQ / dt = (0, u) qQ / 2`` of
        ``qQ = quat(R2^T R1)``, ``u = R2^T (w1 - w2)`` (MuJoCo's rotation Jacobian)."""
        self.check_model(model)
        t = model.topo
        dtype = v.dtype
        nv = model.nv
        if any(k != "joint" for k in self.kind) and model.nb:
            vb, vJ = kin.body_velocities(model, ws, v)
            ab = tree.forward_accumulate(
                t, spatial.motion_cross(vb, vJ), jnp.zeros(6, dtype)
            )  # body accelerations at zero qdd, no gravity
            supp = np.asarray(t.body_dof_support, bool)
            S = ws.S
        rs, Js, ds = [], [], []
        for i, kind in enumerate(self.kind):
            if kind == "joint":
                c = jnp.asarray(self.polycoef[i], dtype)
                r = q[self.body1[i]] - self.ref1[i] - c[0]
                J = jnp.zeros(nv, dtype).at[_q_to_v(t, self.body1[i])].set(1.0)
                if self.body2[i] >= 0:
                    x = q[self.body2[i]] - self.ref2[i]
                    r = r - x * (c[1] + x * (c[2] + x * (c[3] + x * c[4])))
                    deriv = c[1] + x * (2 * c[2] + x * (3 * c[3] + x * 4 * c[4]))
                    J = J.at[_q_to_v(t, self.body2[i])].add(-deriv)
                rs.append(r[None])
                Js.append(J[None])
                ds.append(jnp.zeros(1, dtype))  # MuJoCo: no Jdot v on joint rows
                continue
            sides = []
            for b, P, Rl in (
                (self.body1[i], self.point1[i], self.rot1[i]),
                (self.body2[i], self.point2[i], self.rot2[i]),
            ):
                P, Rl = jnp.asarray(P, dtype), jnp.asarray(Rl, dtype)
                if b < 0:
                    z3, zJ = jnp.zeros(3, dtype), jnp.zeros((3, nv), dtype)
                    sides.append((P - origin, Rl, zJ, zJ, z3, z3, z3, z3))
                    continue
                Pw, Rw = ws.R[b] @ P + ws.p[b], ws.R[b] @ Rl
                m = jnp.asarray(supp[b])[:, None]
                Jw = jnp.where(m, S[:, :3], 0.0).T
                Jp = jnp.where(m, S[:, 3:] + spatial.cross(S[:, :3], Pw), 0.0).T
                w, vo = vb[b, :3], vb[b, 3:]
                al, ao = ab[b, :3], ab[b, 3:]
                vp = vo + spatial.cross(w, Pw)
                ap = ao + spatial.cross(al, Pw) + spatial.cross(w, vp)
                sides.append((Pw, Rw, Jp, Jw, w, vp, al, ap))
            (p1, R1, Jp1, Jw1, w1, _, al1, a1), (p2, R2, Jp2, Jw2, w2, _, al2, a2) = sides
            rs.append(p1 - p2)
            Js.append(Jp1 - Jp2)
            ds.append(a1 - a2)
            if kind == "weld":
                ts = jnp.asarray(self.torquescale[i], dtype)
                Q = R2.T @ R1
                qw = 0.5 * jnp.sqrt(jnp.maximum(1 + jnp.trace(Q), _MINVAL))
                x = jnp.stack([Q[2, 1] - Q[1, 2], Q[0, 2] - Q[2, 0], Q[1, 0] - Q[0, 1]]) / (4 * qw)
                eye = jnp.eye(3, dtype=dtype)
                E = 0.5 * ts * (qw * eye - spatial.skew(x))
                u = R2.T @ (w1 - w2)
                udot = R2.T @ (al1 - al2 - spatial.cross(w2, w1 - w2))
                wdot = -0.5 * (u @ x)
                xdot = 0.5 * (qw * u + spatial.cross(u, x))
                Edot = 0.5 * ts * (wdot * eye - spatial.skew(xdot))
                rs.append(ts * x)
                Js.append(E @ (R2.T @ (Jw1 - Jw2)))
                ds.append(Edot @ u + E @ udot)
        return jnp.concatenate(rs), jnp.concatenate(Js), jnp.concatenate(ds)

    # ------------------------------------------------------------------ soft constraint
    def _row_params(self, r, h):
        """Per row: ``k``, ``b``, ``imp`` (``mj_makeImpedance``)."""
        dtype = r.dtype
        ks, bs, imps = [], [], []
        start = 0
        for i, kind in enumerate(self.kind):
            n = _ROWS[kind]
            ri = r[start : start + n]
            start += n
            pos = ri[0] if kind == "joint" else _safe_norm(ri)
            solimp = _soft.clamp_solimp(jnp.asarray(self.solimp[i], dtype))
            k, b = _soft.gains(jnp.asarray(self.solref[i], dtype), solimp[1], h, self.refsafe)
            imp = _soft.impedance(solimp, pos)
            ks.append(jnp.full(n, k))
            bs.append(jnp.full(n, b))
            imps.append(jnp.full(n, imp))
        return jnp.concatenate(ks), jnp.concatenate(bs), jnp.concatenate(imps)

    def forces(
        self,
        model: Model,
        ws: WorldState,
        origin: Array,
        q: Array,
        v: Array,
        a0_solve: Callable[[Array], tuple[Array, Array]],
        h: ArrayLike,
    ) -> tuple[Array, Array]:
        """The constraint rows' forces ``f (rows,)`` and ``J (rows, nv)``: ``tau_eq = J^T f``.

        ``ws``, ``origin``: the step's (centred) world state and its origin
        (:meth:`kinematics`); ``a0_solve(X (nv, k)) -> (a0 (nv,), M^-1 X)``: the
        unconstrained acceleration and the mass matrix's inverse applied to ``X`` (one set of
        ABA sweeps)."""
        dtype = v.dtype
        r, J, jdv = self.kinematics(model, ws, origin, q, v)
        on = self._on(dtype)
        J = J * on[:, None]
        r = r * on
        a0, MinvJT = a0_solve(J.T)
        A = J @ MinvJT
        k, b, imp = self._row_params(r, jnp.asarray(h, dtype))
        diag = jnp.asarray(self.diag, dtype)
        Rreg = _soft.regulariser(imp, diag)
        aref = _soft.reference(k, b, imp, r, J @ v)
        if self.with_drift:
            aref = aref - on * jdv
        else:  # J a0 in MuJoCo's coordinates: J (a0 + c), c its free joints' convective term
            aref = aref - J @ _free_joint_convection(model.topo, v)
        f = jnp.linalg.solve(A + jnp.diag(Rreg), aref - J @ a0)
        return f, J

    def row_problem(
        self,
        model: Model,
        ws: WorldState,
        origin: Array,
        q: Array,
        v: Array,
        v_free: Array,
        h: ArrayLike,
        transport: Array | None = None,
    ) -> tuple[Array, Array, Array]:
        """The rows of the velocity-level problem that MuJoCo solves them in, with its
        joint-limit and contact rows (:func:`jaxdyn.sim.limits.solve`, the contact problem):
        ``(J (rows, nv), u (rows,), R (rows,))`` with the impulses ``lam = h f`` unbounded
        (projection the identity) and ``(J M^-1 J^T + diag(R)) lam + u`` the rows' velocity
        residual, zero at the solution: ``u = J v_free - J v - h aref``, ``v_free`` the
        constraint-free step's velocity (``v + h (a0 + transport)``), ``aref`` as in
        :meth:`forces` with ``Jdot v`` taken in the step's coordinates (``Jdot v - J
        transport``, ``transport`` the free joints' parent-axes term of the step, ``None``
        without free joints: the same ``J a0 + Jdot v`` as :meth:`forces`). Alone (no other
        row) the solution is ``h`` times :meth:`forces`' ``f``. Inactive constraints have
        zero rows (``J = 0``, ``u = 0``: impulse 0)."""
        dtype = v.dtype
        h = jnp.asarray(h, dtype)
        r, J, jdv = self.kinematics(model, ws, origin, q, v)
        on = self._on(dtype)
        J = J * on[:, None]
        r = r * on
        k, b, imp = self._row_params(r, h)
        R = _soft.regulariser(imp, jnp.asarray(self.diag, dtype))
        aref = _soft.reference(k, b, imp, r, J @ v)
        if self.with_drift:
            aref = aref - on * jdv
            if transport is not None:
                aref = aref + J @ transport
        # (without Jdot v, MuJoCo's J a0 in its coordinates is J (a0 + transport): v_free's)
        return J, J @ (v_free - v) - h * aref, R

    def _on(self, dtype):
        """``(rows,)``: 1 on the rows of active constraints (:attr:`active`), 0 elsewhere."""
        return jnp.concatenate(
            [
                jnp.full(_ROWS[k], jnp.asarray(self.active[i], dtype))
                for i, k in enumerate(self.kind)
            ]
        )


def _free_joint_convection(topo, v):
    """``c (nv,)``: ``w x v_b`` on each free joint's linear velocity coordinates, zero
    elsewhere. MuJoCo's free-joint linear velocity is the body origin's in world axes,
    jaxdyn's in the body's, so MuJoCo's acceleration of the same motion is ``T (a + c)``
    (``jaxdyn.interop.mujoco.Converter``). Without ``Jdot v`` in ``aref`` (MuJoCo before 3.7)
    the force depends on the coordinates through ``J a0``: MuJoCo's is jaxdyn's ``J (a0 + c)``
    (``J`` maps jaxdyn's ``v``)."""
    from .. import joints

    c = jnp.zeros_like(v)
    for b in range(topo.nb):
        if int(topo.kind[b]) == joints.FREE:
            v0 = int(topo.v_start[b])
            c = c.at[v0 + 3 : v0 + 6].set(spatial.cross(v[v0 : v0 + 3], v[v0 + 3 : v0 + 6]))
    return c


def _q_to_v(topo, qi: int, what: str = "Equalities: joint") -> int:
    """The velocity coordinate of the one-DoF joint whose position is ``q[qi]``."""
    from .. import joints

    hit = np.nonzero(np.asarray(topo.q_start) == qi)[0]
    if not len(hit) or int(topo.kind[int(hit[0])]) != joints.ONE_DOF:
        raise ValueError(f"{what}={qi} is not the q index of a hinge or slide joint")
    return int(topo.v_start[int(hit[0])])


def _safe_norm(x):
    n2 = jnp.sum(x * x)
    pos = n2 > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, n2, 1.0)), 0.0)


def _quat_im(Q):
    """Imaginary part of the unit quaternion (``w >= 0``) of the rotation ``Q``:
    ``sin(t / 2) a`` for the rotation by ``t`` about ``a``."""
    vee = jnp.stack([Q[2, 1] - Q[1, 2], Q[0, 2] - Q[2, 0], Q[1, 0] - Q[0, 1]])
    return vee / (2 * jnp.sqrt(jnp.maximum(1 + jnp.trace(Q), _MINVAL)))

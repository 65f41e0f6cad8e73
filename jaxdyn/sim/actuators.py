"""Actuators (control -> joint torques) and passive joint forces.

Actuators act on a static list of velocity coordinates (``dofs``; by default every coordinate
except a floating base's six). :class:`Torque` applies ``tau = gear * ctrl``; :class:`PD`
servos one-DoF joints to position targets, ``tau = kp (ctrl - q) - kd v``. Either is clipped to
the model's effort limits where they are finite.

Passive forces (:func:`passive_forces`): viscous joint damping ``-damping v``, smooth Coulomb
joint friction ``-friction v / sqrt(v^2 + vs^2)``, and joint limits as a one-sided smooth spring
damper ``k_l pen - c_l v`` outside ``[lower, upper]`` (:class:`JointLimits`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import joints
from . import _params, _scatter

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..model.model import Model

__all__ = [
    "DYNTYPES",
    "FixedTendons",
    "GainBias",
    "JointLimits",
    "PD",
    "SpatialTendons",
    "Springs",
    "Torque",
    "actuated_dofs",
    "joint_properties",
    "passive_forces",
]


def actuated_dofs(model: Model, dofs: Sequence[str | int] | None = None) -> np.ndarray:
    """Static indices of the actuated velocity coordinates: ``dofs`` (joint names or coordinate
    indices), or every coordinate except a floating base's six."""
    t = model.topo
    if dofs is None:
        skip = np.zeros(t.nv, bool)
        for b in range(t.nb):
            if int(t.kind[b]) == joints.FREE:
                skip[t.v_start[b] : t.v_start[b] + 6] = True
        return np.nonzero(~skip)[0]
    out = []
    for d in dofs:
        if isinstance(d, str):
            sl = model.v_slice(d)
            out.extend(range(sl.start, sl.stop))
        elif isinstance(d, (int, np.integer)) and not isinstance(d, bool):
            if not 0 <= int(d) < t.nv:
                raise ValueError(f"actuator dofs: index {d} out of range [0, {t.nv})")
            out.append(int(d))
        else:
            raise TypeError(f"actuator dofs: expected joint names or indices, got {d!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"actuator dofs: a coordinate is listed twice in {list(dofs)}")
    return np.asarray(out, np.int64)


def dof_positions(model, dofs) -> np.ndarray:
    """``q`` index of each velocity coordinate in ``dofs``; raises for coordinates of
    spherical or free joints (they have no scalar position)."""
    t = model.topo
    out = []
    for d in dofs:
        b = int(t.dof_body[d])
        if int(t.kind[b]) != joints.ONE_DOF:
            raise ValueError(
                f"PD actuator: coordinate {d} belongs to the {joints.KIND_NAMES[int(t.kind[b])]} "
                f"joint {t.joint_names[b]!r}, which has no scalar position target"
            )
        out.append(int(t.q_start[b]))
    return np.asarray(out, np.int64)


class Torque(eqx.Module):
    """Torque (force) actuators: ``tau[dofs] = gear * ctrl``."""

    gear: float | Array = 1.0  # a scalar or one per actuated coordinate
    dofs: tuple | None = eqx.field(static=True, default=None)

    _RULES = (("gear", None, False),)

    def __check_init__(self):
        _params.check_module(self)

    def size(self, model: Model) -> int:
        return len(actuated_dofs(model, self.dofs))

    def velocity_gain(self, model: Model, dtype: DTypeLike) -> Array:
        return jnp.zeros(model.nv, dtype)

    def torques(self, model: Model, q: Array, v: Array, ctrl: Array) -> Array:
        idx = actuated_dofs(model, self.dofs)
        return _scatter.add_at(jnp.zeros(model.nv, v.dtype), idx, self.gear * ctrl)


class PD(eqx.Module):
    """Joint position servos on one-DoF joints: ``tau = kp (ctrl - q) - kd v``; ``kp``, ``kd``
    scalars or one per actuated coordinate."""

    kp: float | Array = 50.0
    kd: float | Array = 1.0
    dofs: tuple | None = eqx.field(static=True, default=None)

    _RULES = (("kp", 0.0, False), ("kd", 0.0, False))

    def __check_init__(self):
        _params.check_module(self)

    def size(self, model: Model) -> int:
        return len(actuated_dofs(model, self.dofs))

    def velocity_gain(self, model: Model, dtype: DTypeLike) -> Array:
        idx = actuated_dofs(model, self.dofs)
        kd = jnp.broadcast_to(jnp.asarray(self.kd, dtype), (len(idx),))
        return _scatter.add_at(jnp.zeros(model.nv, dtype), idx, kd)

    def torques(self, model: Model, q: Array, v: Array, ctrl: Array) -> Array:
        idx = actuated_dofs(model, self.dofs)
        qi = q[dof_positions(model, idx)]
        tau = self.kp * (ctrl - qi) - self.kd * v[idx]
        return _scatter.add_at(jnp.zeros(model.nv, v.dtype), idx, tau)


class JointLimits(eqx.Module):
    """Joint position limits as a one-sided smooth spring-damper (N m/rad, N m s/rad; N/m,
    N s/m for prismatic joints), active outside the model's ``[lower, upper]``.

    ``stiffness`` and ``damping`` are one value for every joint, or arrays ``(nv,)``, one per
    velocity coordinate (the entries of one-DoF joints are used): MuJoCo's limit constraint
    scaled by each joint's effective inertia, :meth:`jaxdyn.io.mjcf.MJCFModel.mujoco_limits`.
    Tendon length limits take the scalar form only."""

    stiffness: float | jnp.ndarray = 1e3
    damping: float | jnp.ndarray = 10.0
    smoothing: float = 1e-3
    #: whether a limit only pushes (MuJoCo's limit force is one-sided: a joint leaving its
    #: limit is not held back by the damper); ``False``: the spring-damper pulls too
    one_sided: bool = eqx.field(default=False, static=True)

    _RULES = (("stiffness", 0.0, False), ("damping", 0.0, False), ("smoothing", 0.0, True))

    def __check_init__(self):
        _params.check_module(self)
        for name in ("stiffness", "damping"):
            if np.ndim(getattr(self, name)) > 1:
                raise ValueError(
                    f"JointLimits: {name} has shape {np.shape(getattr(self, name))}, expected "
                    "a number or (nv,) (one per velocity coordinate)"
                )

    def per_coordinate(self, name: str, nv: int, idx: ArrayLike, dtype: DTypeLike) -> Array:
        """``stiffness`` or ``damping`` at the velocity coordinates ``idx`` of a model with
        ``nv`` of them."""
        value = jnp.asarray(getattr(self, name), dtype)
        if value.ndim == 0:
            return value
        if value.shape != (nv,):
            raise ValueError(
                f"JointLimits: {name} has shape {value.shape}, expected ({nv},) (one per "
                "velocity coordinate of the model) or a number"
            )
        return value[idx]


def joint_properties(model: Model) -> dict[str, Array]:
    """Joint properties of the model (read from URDF ``<limit>`` / ``<dynamics>``, see
    :class:`jaxdyn.Model`), with their defaults where the model has none: ``armature``,
    ``damping``, ``friction``, ``effort``, ``velocity`` ``(nv,)`` and ``lower``, ``upper``
    ``(nq,)``."""
    nq, nv = model.nq, model.nv
    dtype = model.mass.dtype

    def get(name, default, n):
        value = getattr(model, name, None)
        if value is None:
            return jnp.full(n, default, dtype)
        return jnp.broadcast_to(jnp.asarray(value, dtype), (n,))

    return dict(
        armature=get("armature", 0.0, nv),
        damping=get("damping", 0.0, nv),
        friction=get("friction", 0.0, nv),
        effort=get("effort_limit", jnp.inf, nv),
        velocity=get("velocity_limit", jnp.inf, nv),
        lower=get("q_lower", -jnp.inf, nq),
        upper=get("q_upper", jnp.inf, nq),
    )


def clip_effort(tau, effort):
    """Clip to ``[-effort, effort]`` where ``effort > 0`` (many URDFs write ``effort="0"`` for
    "not given"; those coordinates are not clipped)."""
    lim = jnp.where(effort > 0, effort, jnp.inf)
    return jnp.clip(tau, -lim, lim)


def passive_forces(
    model: Model,
    props: dict[str, Array],
    limits: JointLimits | None,
    q: Array,
    v: Array,
    slip: float = 1e-2,
    skip: tuple = (),
) -> Array:
    """Damping, friction and joint-limit forces ``(nv,)``; ``skip``: velocity coordinates
    whose limits are not applied here (constraint rows instead,
    :class:`jaxdyn.sim.limits.LimitConstraints`)."""
    dtype = v.dtype
    tau = -props["damping"].astype(dtype) * v
    fr = props["friction"].astype(dtype)
    tau = tau - fr * v / jnp.sqrt(v * v + slip * slip)
    if limits is None:
        return tau
    t = model.topo
    one = np.asarray([int(t.kind[int(t.dof_body[d])]) == joints.ONE_DOF for d in range(t.nv)])
    one[np.asarray(skip, np.int64)] = False
    if not one.any():
        return tau
    idx = np.nonzero(one)[0]
    qidx = np.asarray([int(t.q_start[int(t.dof_body[d])]) for d in idx], np.int64)
    qd = q[qidx]
    lo, hi = props["lower"].astype(dtype)[qidx], props["upper"].astype(dtype)[qidx]
    eps = jnp.asarray(limits.smoothing, dtype)
    below = jnp.where(jnp.isfinite(lo), eps * jax.nn.softplus((lo - qd) / eps), 0.0)
    above = jnp.where(jnp.isfinite(hi), eps * jax.nn.softplus((qd - hi) / eps), 0.0)
    k = limits.per_coordinate("stiffness", t.nv, idx, dtype)
    c = limits.per_coordinate("damping", t.nv, idx, dtype)
    return _scatter.add_at(tau, idx, _spring_damper(k, c, eps, below, above, v[idx], limits))


def _spring_damper(k, c, eps, below, above, xd, limits):
    """The limit force of the smoothed violations ``below`` / ``above`` at the rate ``xd``."""
    if limits.one_sided:  # each side's spring-damper, pushing only
        push_up = k * below - c * (below / (below + eps)) * xd
        push_down = k * above + c * (above / (above + eps)) * xd
        return jnp.maximum(push_up, 0.0) - jnp.maximum(push_down, 0.0)
    gate = (below + above) / (below + above + eps)
    return k * (below - above) - c * gate * xd


# ------------------------------------------------------------------ MuJoCo's scene elements


def _one_dof_coords(model, dofs):
    """``(v indices, q indices)`` of the static one-DoF coordinates ``dofs``."""
    idx = np.asarray(dofs, np.int64).reshape(-1)
    return idx, dof_positions(model, idx)


def _check_matrix(owner, name, value, rows, cols):
    if value is None or isinstance(value, jax.core.Tracer):
        return
    shape = np.shape(value)
    if len(shape) != 2 or (rows is not None and shape[0] != rows) or shape[1] != cols:
        want = f"({rows if rows is not None else 'n'}, {cols})"
        raise ValueError(f"{owner}: {name} has shape {shape}, expected {want} (one column per dof)")


class Springs(eqx.Module):
    """Joint springs on one-DoF joints (MuJoCo's joint ``stiffness`` and ``springref``):
    ``tau[dofs] += -stiffness (q - springref)``, ``stiffness`` and ``springref`` one per entry
    of ``dofs`` (static velocity coordinates of hinge or slide joints; jaxdyn's ``q`` of such a
    joint is MuJoCo's ``qpos``)."""

    stiffness: jnp.ndarray
    springref: jnp.ndarray
    dofs: tuple = eqx.field(static=True)

    _RULES = (("stiffness", 0.0, False), ("springref", None, False))

    def __check_init__(self):
        _params.check_module(self)
        for name in ("stiffness", "springref"):
            value = getattr(self, name)
            if not isinstance(value, jax.core.Tracer) and np.shape(value) not in (
                (),
                (len(self.dofs),),
            ):
                raise ValueError(
                    f"Springs: {name} has shape {np.shape(value)}, expected ({len(self.dofs)},) "
                    "(one per entry of dofs) or a scalar"
                )

    def forces(self, model: Model, q: Array, v: Array) -> Array:
        idx, qidx = _one_dof_coords(model, self.dofs)
        dtype = v.dtype
        k = jnp.asarray(self.stiffness, dtype)
        tau = -k * (q[qidx] - jnp.asarray(self.springref, dtype))
        return _scatter.add_at(jnp.zeros(model.nv, dtype), idx, tau)


class FixedTendons(eqx.Module):
    """Fixed tendons (MuJoCo's ``<tendon><fixed>``): lengths ``L = coef q[dofs]`` (``coef
    (nt, k)``, one column per static one-DoF coordinate of ``dofs``), velocities
    ``Ldot = coef v[dofs]``, and their passive forces, applied as ``tau[dofs] += coef^T f``:

    * a spring with a dead band (MuJoCo's ``springlength``, two values):
      ``f = -stiffness (L - lower_spring)`` below ``lower_spring``,
      ``-stiffness (L - upper_spring)`` above ``upper_spring``, zero between;
    * viscous damping ``f = -damping Ldot``;
    * length limits ``[lower, upper]`` (``-inf`` / ``inf`` where none), as the joint limits:
      the one-sided smooth spring-damper of the configuration's :class:`JointLimits` (MuJoCo:
      a constraint with its own ``solreflimit``).

    Their velocity terms couple the coordinates (``coef^T diag(damping) coef``): the
    ``"implicit"`` integrator treats them exactly (a low-rank update of its ABA solve)."""

    coef: jnp.ndarray
    stiffness: jnp.ndarray
    lower_spring: jnp.ndarray
    upper_spring: jnp.ndarray
    damping: jnp.ndarray
    lower: jnp.ndarray
    upper: jnp.ndarray
    dofs: tuple = eqx.field(static=True)

    _RULES = (("stiffness", 0.0, False), ("damping", 0.0, False), ("coef", None, False))

    def __check_init__(self):
        _params.check_module(self)
        _check_matrix("FixedTendons", "coef", self.coef, None, len(self.dofs))

    def size(self) -> int:
        return int(np.shape(self.coef)[0])

    def lengths(self, model: Model, q: Array, v: Array) -> tuple[Array, Array]:
        """``(L, Ldot)`` ``(nt,)`` each."""
        idx, qidx = _one_dof_coords(model, self.dofs)
        coef = jnp.asarray(self.coef, v.dtype)
        return coef @ q[qidx], coef @ v[idx]

    def jacobian(self, model: Model, q: Array) -> tuple[Array, Array]:
        """``(L (nt,), J (nt, nv))``, as :meth:`SpatialTendons.jacobian`."""
        idx, qidx = _one_dof_coords(model, self.dofs)
        coef = jnp.asarray(self.coef, q.dtype)
        J = _scatter.add_at(jnp.zeros((model.nv, self.size()), q.dtype), idx, coef.T).T
        return coef @ q[qidx], J

    def forces(self, model: Model, limits: JointLimits | None, q: Array, v: Array) -> Array:
        L, Ld = self.lengths(model, q, v)
        f = _tendon_forces(self, limits, L, Ld)
        idx, _ = _one_dof_coords(model, self.dofs)
        tau = jnp.asarray(self.coef, v.dtype).T @ f
        return _scatter.add_at(jnp.zeros(model.nv, v.dtype), idx, tau)

    def velocity_factors(
        self, model: Model, limits: JointLimits | None, q: Array, v: Array
    ) -> tuple[Array, Array]:
        """``(U (nv, nt), c (nt,))`` with ``-d tau / d v = U diag(c) U^T``."""
        L, Ld = self.lengths(model, q, v)
        _, c = jax.jvp(lambda ld: _tendon_forces(self, limits, L, ld), (Ld,), (jnp.ones_like(Ld),))
        return self.jacobian(model, q.astype(v.dtype))[1].T, -c


class SpatialTendons(eqx.Module):
    """MuJoCo's spatial tendons (``<tendon><spatial>``, MuJoCo's ``mj_tendon``): paths through
    sites, over pulleys and around spheres and cylinders without a side site. The length is
    the sum of the path's pieces, each divided by the divisor of the last pulley before it (1
    before any): a straight segment ``|p_{k+1} - p_k|`` between consecutive sites; for a
    site-geom-site triple, MuJoCo's ``mju_wrap``: the tangent points ``t_0``, ``t_1`` on the
    circle of the geom's radius (in the plane of the two sites and the sphere's centre; in the
    cylinder's cross-section, heights along the helix), the shorter of the two wraps,
    ``|t_0 - p_0| + arc + |p_1 - t_1|``, or the straight ``|p_1 - p_0|`` where that segment
    misses the circle (a branch: ``jnp.where`` on both). ``Ldot = J v`` with ``J = sum_k u_k^T
    (J_{k+1} - J_k) / divisor`` over the straight pieces (``u_k`` the unit directions, ``J_k``
    the point Jacobians of the sites and of the tangent points, the latter moving with the
    geom's body; the arc adds none), MuJoCo's ``ten_J``. Passive forces are those of
    :class:`FixedTendons` (dead-band spring, damping, length limits), applied as
    ``tau += J^T f``.

    ``points (ns, 3)``: the sites in their bodies' frames (world coordinates for a site on
    the world); static ``bodies`` (jaxdyn body of each site, ``-1``: the world) and ``paths``
    (per tendon, its elements in order: a site index ``i``; ``("pulley", divisor)``;
    ``("sphere", g)`` / ``("cylinder", g)`` with ``g`` a wrapping geom's index; a path starts
    and ends with a site, a geom sits between two sites); the wrapping geoms' ``geom_pos (ng,
    3)``, ``geom_rot (ng, 3, 3)`` (the cylinder's axis its ``z``) in their bodies' frames,
    ``geom_radius (ng,)`` and static ``geom_bodies``; ``stiffness``, ``lower_spring``,
    ``upper_spring``, ``damping``, ``lower``, ``upper`` ``(nt,)`` as in :class:`FixedTendons`.
    Their damping couples the coordinates through ``J``: ``"implicit"`` treats it exactly."""

    points: jnp.ndarray
    stiffness: jnp.ndarray
    lower_spring: jnp.ndarray
    upper_spring: jnp.ndarray
    damping: jnp.ndarray
    lower: jnp.ndarray
    upper: jnp.ndarray
    bodies: tuple = eqx.field(static=True)
    paths: tuple = eqx.field(static=True)
    geom_pos: jnp.ndarray | None = None
    geom_rot: jnp.ndarray | None = None
    geom_radius: jnp.ndarray | None = None
    geom_bodies: tuple = eqx.field(static=True, default=())

    _RULES = (("stiffness", 0.0, False), ("damping", 0.0, False))

    def __check_init__(self):
        _params.check_module(self)
        ns, ng = len(self.bodies), len(self.geom_bodies)
        if not isinstance(self.points, jax.core.Tracer) and np.shape(self.points) != (ns, 3):
            raise ValueError(
                f"SpatialTendons: points has shape {np.shape(self.points)}, expected ({ns}, 3)"
            )
        for name, shape in (
            ("geom_pos", (ng, 3)),
            ("geom_rot", (ng, 3, 3)),
            ("geom_radius", (ng,)),
        ):
            value = getattr(self, name)
            if ng and value is None:
                raise ValueError(f"SpatialTendons: wrapping geoms need {name}")
            if value is not None and not isinstance(value, jax.core.Tracer):
                if np.shape(value) != shape:
                    raise ValueError(
                        f"SpatialTendons: {name} has shape {np.shape(value)}, expected {shape}"
                    )
        for k, path in enumerate(self.paths):
            _check_path(k, path, ns, ng)

    def size(self) -> int:
        return len(self.paths)

    def jacobian(self, model: Model, q: Array) -> tuple[Array, Array]:
        """``(L (nt,), J (nt, nv))``."""
        from ..algorithms import kinematics as kin

        dtype = q.dtype
        t = model.topo
        ws = kin.world_state(model, q)
        supp = np.asarray(t.body_dof_support, bool)
        zero_jac = jnp.zeros((3, model.nv), dtype)

        def point_jac(b, p):
            if b < 0:
                return zero_jac
            lin = ws.S[:, 3:] + jnp.cross(ws.S[:, :3], p)
            return jnp.where(jnp.asarray(supp[b])[:, None], lin, 0.0).T

        def place(b, local):
            return local if b < 0 else ws.R[b] @ local + ws.p[b]

        P = jnp.asarray(self.points, dtype)
        pts = [place(b, P[i]) for i, b in enumerate(self.bodies)]
        jacs = [point_jac(b, p) for b, p in zip(self.bodies, pts)]
        frames = []
        for g, b in enumerate(self.geom_bodies):
            pos = jnp.asarray(self.geom_pos, dtype)[g]
            rot = jnp.asarray(self.geom_rot, dtype)[g]
            frames.append((rot, pos) if b < 0 else (ws.R[b] @ rot, ws.R[b] @ pos + ws.p[b]))

        def segment(pa, ja, pb, jb):
            d = pb - pa
            n = _safe_norm(d)
            u = d / jnp.where(n < _MINVAL, 1.0, n)
            return n, u @ (jb - ja)

        Ls, Js = [], []
        for path in self.paths:
            L = jnp.zeros((), dtype)
            J = jnp.zeros(model.nv, dtype)
            divisor = 1.0
            k = 0
            while k < len(path) - 1:
                e0, e1 = path[k], path[k + 1]
                if _is_pulley(e0) or _is_pulley(e1):
                    if _is_pulley(e0):
                        divisor = max(_MINVAL, float(e0[1]))
                    k += 1
                    continue
                if not isinstance(e1, tuple):  # site - site
                    n, j = segment(pts[e0], jacs[e0], pts[e1], jacs[e1])
                    L, J = L + n / divisor, J + j / divisor
                    k += 1
                    continue
                kind, g = e1  # site - geom - site
                e2 = path[k + 2]
                rot, pos = frames[g]
                radius = jnp.asarray(self.geom_radius, dtype)[g]
                wlen, t0, t1 = _wrap(pts[e0], pts[e2], pos, rot, radius, kind == "sphere")
                gb = self.geom_bodies[g]
                n_s, j_s = segment(pts[e0], jacs[e0], pts[e2], jacs[e2])
                n0, j0 = segment(pts[e0], jacs[e0], t0, point_jac(gb, t0))
                n1, j1 = segment(t1, point_jac(gb, t1), pts[e2], jacs[e2])
                wraps = wlen >= 0
                L = L + jnp.where(wraps, n0 + wlen + n1, n_s) / divisor
                J = J + jnp.where(wraps, j0 + j1, j_s) / divisor
                k += 2
            Ls.append(L)
            Js.append(J)
        return jnp.stack(Ls), jnp.stack(Js)

    def lengths(self, model: Model, q: Array, v: Array) -> tuple[Array, Array]:
        """``(L, Ldot)`` ``(nt,)`` each."""
        L, J = self.jacobian(model, q)
        return L, J @ v

    def forces(self, model: Model, limits: JointLimits | None, q: Array, v: Array) -> Array:
        L, J = self.jacobian(model, q)
        return J.T @ _tendon_forces(self, limits, L, J @ v)

    def velocity_factors(
        self, model: Model, limits: JointLimits | None, q: Array, v: Array
    ) -> tuple[Array, Array]:
        """``(U (nv, nt), c (nt,))`` with ``-d tau / d v = U diag(c) U^T`` (``U = J^T``)."""
        L, J = self.jacobian(model, q)
        Ld = J @ v
        _, c = jax.jvp(
            lambda ld: _tendon_forces(self, limits, L, ld),
            (Ld,),
            (jnp.ones_like(Ld),),
        )
        return J.T, -c


_MINVAL = 1e-15  # MuJoCo's mjMINVAL
_WRAP_KINDS = ("sphere", "cylinder")


def _is_pulley(e) -> bool:
    return isinstance(e, tuple) and e[0] == "pulley"


def _check_path(k: int, path, ns: int, ng: int) -> None:
    """A :class:`SpatialTendons` path's elements (see its docstring), else a ``ValueError``."""
    where = f"SpatialTendons: path {k}"
    if len([e for e in path if not isinstance(e, tuple)]) < 2:
        raise ValueError(f"{where} must list at least two site indices in [0, {ns})")
    for j, e in enumerate(path):
        if not isinstance(e, tuple):
            if not 0 <= int(e) < ns:
                raise ValueError(f"{where} must list at least two site indices in [0, {ns})")
            continue
        if _is_pulley(e):
            if len(e) != 2 or not float(e[1]) > 0:
                raise ValueError(f"{where}: element {j} {e!r}: a pulley needs a divisor > 0")
            continue
        if len(e) != 2 or e[0] not in _WRAP_KINDS:
            raise ValueError(
                f"{where}: element {j} {e!r} is not a site index, ('pulley', divisor) or "
                "('sphere' | 'cylinder', geom)"
            )
        if not 0 <= int(e[1]) < ng:
            raise ValueError(f"{where}: element {j} {e!r}: a geom index in [0, {ng})")
        sites = [path[j - 1] if j else None, path[j + 1] if j + 1 < len(path) else None]
        if any(s is None or isinstance(s, tuple) for s in sites):
            raise ValueError(f"{where}: element {j} {e!r}: a wrapping geom sits between two sites")
    if isinstance(path[0], tuple) or isinstance(path[-1], tuple):
        raise ValueError(f"{where} must start and end with a site")


def _safe_norm(x: Array) -> Array:
    """``|x|`` with a finite (zero) gradient at ``x = 0``."""
    sq = x @ x
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def _safe_sqrt(x: Array) -> Array:
    pos = x > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def _normalize(x: Array) -> Array:
    """MuJoCo's ``mju_normalize``: ``x / |x|``, ``e_0`` where ``|x| < mjMINVAL``."""
    n = _safe_norm(x)
    small = n < _MINVAL
    e0 = jnp.zeros_like(x).at[0].set(1.0)
    return jnp.where(small, e0, x / jnp.where(small, 1.0, n))


def _acos(x: Array) -> Array:
    """``mju_acos``: ``acos`` of ``x`` clipped to ``[-1, 1]`` (a finite gradient at the ends)."""
    inside = jnp.abs(x) < 1
    return jnp.where(inside, jnp.arccos(jnp.where(inside, x, 0.0)), jnp.where(x > 0, 0.0, jnp.pi))


def _safe_div(a: Array, b: Array) -> Array:
    ok = b != 0
    return jnp.where(ok, a / jnp.where(ok, b, 1.0), 0.0)


def _is_intersect(p1: Array, p2: Array, p3: Array, p4: Array) -> Array:
    """Whether the 2-D segments ``p1 p2`` and ``p3 p4`` intersect (``is_intersect`` of MuJoCo's
    engine_util_misc.c; parallel ones do not)."""
    det = (p4[1] - p3[1]) * (p2[0] - p1[0]) - (p4[0] - p3[0]) * (p2[1] - p1[1])
    a = _safe_div((p4[0] - p3[0]) * (p1[1] - p3[1]) - (p4[1] - p3[1]) * (p1[0] - p3[0]), det)
    b = _safe_div((p2[0] - p1[0]) * (p1[1] - p3[1]) - (p2[1] - p1[1]) * (p1[0] - p3[0]), det)
    return (jnp.abs(det) >= _MINVAL) & (a >= 0) & (a <= 1) & (b >= 0) & (b <= 1)


def _wrap_circle(d: Array, rad: Array) -> tuple[Array, Array]:
    """MuJoCo's ``wrap_circle`` without a side site: the tangent points ``(4,)`` from the 2-D
    points ``d (4,)`` to the circle of radius ``rad`` about the origin (the shorter path) and
    the arc length between them, ``-1`` where the segment misses the circle."""
    d0, d1 = d[:2], d[2:]
    sqlen0, sqlen1, sqrad = d0 @ d0, d1 @ d1, rad * rad
    dif = d1 - d0
    dd = dif @ dif
    a = jnp.clip(-(dif @ d0) / jnp.maximum(dd, _MINVAL), 0.0, 1.0)
    tmp = a * dif + d0
    miss = tmp @ tmp > sqrad
    invalid = (sqlen0 < sqrad) | (sqlen1 < sqrad) | (rad < _MINVAL) | (dd < _MINVAL) | miss
    sqrt0, sqrt1 = _safe_sqrt(sqlen0 - sqrad), _safe_sqrt(sqlen1 - sqrad)
    l0, l1 = jnp.where(invalid, 1.0, sqlen0), jnp.where(invalid, 1.0, sqlen1)
    sols, goods = [], []
    for sgn in (1.0, -1.0):
        r0, r1 = sgn * rad * sqrt0, sgn * rad * sqrt1
        s0 = jnp.stack([d0[0] * sqrad + r0 * d0[1], d0[1] * sqrad - r0 * d0[0]]) / l0
        s1 = jnp.stack([d1[0] * sqrad - r1 * d1[1], d1[1] * sqrad + r1 * d1[0]]) / l1
        good = -((s0 - s1) @ (s0 - s1))
        sols.append((s0, s1))
        goods.append(jnp.where(_is_intersect(d0, s0, d1, s1), -10000.0, good))
    first = goods[0] > goods[1]
    s0 = jnp.where(first, sols[0][0], sols[1][0])
    s1 = jnp.where(first, sols[0][1], sols[1][1])
    invalid = invalid | _is_intersect(d0, s0, d1, s1)
    angle = _acos(_normalize(s0) @ _normalize(s1))  # MuJoCo's length_circle
    cross = s0[1] * s1[0] - s0[0] * s1[1]
    flip = ((cross > 0) & ~first) | ((cross < 0) & first)
    wlen = rad * jnp.where(flip, 2 * jnp.pi - angle, angle)
    return jnp.where(invalid, -1.0, wlen), jnp.concatenate([s0, s1])


def _wrap(
    x0: Array, x1: Array, xpos: Array, xmat: Array, rad: Array, sphere: bool
) -> tuple[Array, Array, Array]:
    """MuJoCo's ``mju_wrap``: the wrap length (``-1``: no wrap) and the two tangent points
    (world) of the path from ``x0`` to ``x1`` around the sphere / cylinder (axis: the frame's
    ``z``) of radius ``rad`` at ``(xpos, xmat)``, without a side site."""
    p0, p1 = xmat.T @ (x0 - xpos), xmat.T @ (x1 - xpos)
    too_close = (_safe_norm(p0) < _MINVAL) | (_safe_norm(p1) < _MINVAL)
    dtype = x0.dtype
    if sphere:
        axis0 = _normalize(p0)
        normal = jnp.cross(p0, p1)
        nrm = _safe_norm(normal)
        ab = jnp.abs(axis0)
        i = jnp.where(
            (ab[1] > ab[0]) & (ab[1] > ab[2]), 1, jnp.where((ab[2] > ab[0]) & (ab[2] > ab[1]), 2, 0)
        )
        alt = _normalize(jnp.cross(axis0, jnp.ones(3, dtype).at[i].set(0.0)))
        normal = jnp.where(nrm < _MINVAL, alt, normal / jnp.where(nrm < _MINVAL, 1.0, nrm))
        axis1 = _normalize(jnp.cross(normal, axis0))
    else:
        axis0, axis1 = jnp.eye(3, dtype=dtype)[0], jnp.eye(3, dtype=dtype)[1]
    d = jnp.stack([p0 @ axis0, p0 @ axis1, p1 @ axis0, p1 @ axis1])
    wlen, pnt = _wrap_circle(d, rad)
    r0 = axis0 * pnt[0] + axis1 * pnt[1]
    r1 = axis0 * pnt[2] + axis1 * pnt[3]
    if not sphere:  # the helix: heights in proportion to the unrolled length
        L0 = _safe_norm(p0[:2] - r0[:2])
        L1 = _safe_norm(p1[:2] - r1[:2])
        tot = jnp.where(wlen < 0, 1.0, L0 + wlen + L1)
        tot = jnp.where(tot == 0, 1.0, tot)
        z0 = p0[2] + (p1[2] - p0[2]) * L0 / tot
        z1 = p0[2] + (p1[2] - p0[2]) * (L0 + wlen) / tot
        r0, r1 = r0.at[2].set(z0), r1.at[2].set(z1)
        h = z1 - z0
        wlen = jnp.where(wlen < 0, wlen, _safe_sqrt(wlen * wlen + h * h))
    wlen = jnp.where(too_close, -1.0, wlen)
    return wlen, xmat @ r0 + xpos, xmat @ r1 + xpos


def _tendon_forces(
    tendons: FixedTendons | SpatialTendons, limits: JointLimits | None, L: Array, Ld: Array
) -> Array:
    """A fixed or spatial tendon's passive forces ``(nt,)`` at lengths ``L`` and velocities
    ``Ld``: the dead-band spring, damping and the length limits (:class:`FixedTendons`)."""
    dtype = L.dtype
    k = jnp.asarray(tendons.stiffness, dtype)
    lo_s = jnp.asarray(tendons.lower_spring, dtype)
    hi_s = jnp.asarray(tendons.upper_spring, dtype)
    f = -k * (jnp.minimum(L - lo_s, 0.0) + jnp.maximum(L - hi_s, 0.0))
    f = f - jnp.asarray(tendons.damping, dtype) * Ld
    if limits is not None:
        f = f + _limit_forces(limits, L, Ld, tendons.lower, tendons.upper)
    return f


def _limit_forces(limits, x, xd, lower, upper):
    """The one-sided smooth spring-damper of :class:`JointLimits` on coordinates ``x``."""
    if np.ndim(limits.stiffness) or np.ndim(limits.damping):
        raise ValueError(
            "JointLimits: stiffness and damping per velocity coordinate (arrays) do not apply "
            "to tendon length limits; give numbers"
        )
    dtype = x.dtype
    lo, hi = jnp.asarray(lower, dtype), jnp.asarray(upper, dtype)
    eps = jnp.asarray(limits.smoothing, dtype)
    below = jnp.where(jnp.isfinite(lo), eps * jax.nn.softplus((lo - x) / eps), 0.0)
    above = jnp.where(jnp.isfinite(hi), eps * jax.nn.softplus((x - hi) / eps), 0.0)
    k, c = jnp.asarray(limits.stiffness, dtype), jnp.asarray(limits.damping, dtype)
    return _spring_damper(k, c, eps, below, above, xd, limits)


DYNTYPES = ("none", "integrator", "filter", "filterexact")


class GainBias(eqx.Module):
    """MuJoCo's actuators of the gain / bias family (``motor``, ``position``, ``velocity``,
    ``general`` with ``gaintype`` fixed or affine and ``biastype`` none or affine), on joint or
    fixed-tendon transmissions, with MuJoCo's activation dynamics ``none``, ``integrator``,
    ``filter`` or ``filterexact`` (MuJoCo's ``mj_fwdActuation``)::

        c     = clip(ctrl, ctrl_lower, ctrl_upper)
        L, Ld = moment q[dofs], moment v[dofs]             # actuator lengths, velocities
        force = (gain0 + gain1 L + gain2 Ld) c + bias0 + bias1 L + bias2 Ld
        force = clip(force, force_lower, force_upper)
        tau[dofs] += moment^T force

    ``moment (nu, k)``: one row per actuator (``gear`` on its joint's column, or ``gear`` times
    the tendon's coefficients), one column per static one-DoF coordinate of ``dofs``;
    ``gain``, ``bias`` ``(nu, 3)``; the ranges ``(nu,)`` (``-inf`` / ``inf`` where
    unlimited). ``ctrl`` has ``nu`` entries, in MuJoCo's actuator order. Velocity terms
    (``gain2 c + bias2``) enter the ``"implicit"`` integrator exactly (a low-rank update of its
    solve), as MuJoCo's ``implicitfast``.

    Activation dynamics (``dyn``, static, one of :data:`DYNTYPES` per actuator; ``()``: none):
    an actuator with dynamics has an activation ``act`` (:attr:`jaxdyn.sim.State.act`, one
    entry per such actuator in actuator order, MuJoCo's ``act``) that replaces ``c`` in the
    force, ``act_dot = c`` (``integrator``) or ``(c - act) / dynprm`` (``filter``,
    ``filterexact``), advanced by each integrator step ``h`` as MuJoCo's ``mj_advance``:
    ``act' = act + h act_dot`` (``filterexact``: ``act + act_dot dynprm (1 - exp(-h /
    dynprm))``), clipped to ``[act_lower, act_upper]`` (MuJoCo's ``actrange`` where
    ``actlimited``; ``-inf`` / ``inf`` otherwise). With ``actearly`` (static, per actuator)
    the force uses ``act'`` instead of ``act`` (no one-step delay). ``dynprm``, ``act_lower``,
    ``act_upper`` ``(nu,)``: entries of actuators without dynamics are ignored."""

    moment: jnp.ndarray
    gain: jnp.ndarray
    bias: jnp.ndarray
    ctrl_lower: jnp.ndarray | np.ndarray  # numpy: MJCF's ranges, driven()'s -inf / inf
    ctrl_upper: jnp.ndarray | np.ndarray
    force_lower: jnp.ndarray
    force_upper: jnp.ndarray
    dofs: tuple = eqx.field(static=True)
    dynprm: jnp.ndarray | None = None
    act_lower: jnp.ndarray | None = None
    act_upper: jnp.ndarray | None = None
    dyn: tuple = eqx.field(static=True, default=())
    actearly: tuple = eqx.field(static=True, default=())

    _RULES = (("moment", None, False), ("gain", None, False), ("bias", None, False))

    def __check_init__(self):
        _params.check_module(self)
        _check_matrix("GainBias", "moment", self.moment, None, len(self.dofs))
        nu = int(np.shape(self.moment)[0])
        for name in ("gain", "bias"):
            _check_matrix("GainBias", name, getattr(self, name), nu, 3)
        if not self.dyn:
            return
        if len(self.dyn) != nu or any(d not in DYNTYPES for d in self.dyn):
            raise ValueError(
                f"GainBias: dyn must hold one of {DYNTYPES} per actuator ({nu}), got {self.dyn!r}"
            )
        if self.actearly and len(self.actearly) != nu:
            raise ValueError(f"GainBias: actearly needs one entry per actuator ({nu})")
        for name in ("dynprm", "act_lower", "act_upper"):
            value = getattr(self, name)
            if value is None:
                raise ValueError(f"GainBias: activation dynamics need {name} (one per actuator)")
            if not isinstance(value, jax.core.Tracer) and np.shape(value) != (nu,):
                raise ValueError(f"GainBias: {name} has shape {np.shape(value)}, expected ({nu},)")
        if not isinstance(self.dynprm, jax.core.Tracer):
            tau = np.asarray(self.dynprm, float)[self._stateful()]
            if not np.all(np.isfinite(tau)) or np.any(tau < 0):
                raise ValueError("GainBias: dynprm (time constants) must be finite and >= 0")

    def size(self, model: Model) -> int:
        return int(np.shape(self.moment)[0])

    # ---------------------------------------------------------------- activation dynamics
    def _stateful(self) -> np.ndarray:
        """Static indices of the actuators with an activation."""
        return np.asarray([i for i, d in enumerate(self.dyn) if d != "none"], np.int64)

    def act_size(self) -> int:
        """Number of activations (MuJoCo's ``na``)."""
        return len(self._stateful())

    def _clip_ctrl(self, ctrl):
        dtype = ctrl.dtype
        return jnp.clip(
            ctrl, jnp.asarray(self.ctrl_lower, dtype), jnp.asarray(self.ctrl_upper, dtype)
        )

    def next_act(self, ctrl: Array, act: Array, h: Array | float) -> Array:
        """The activations after one integrator step ``h`` (MuJoCo's ``mj_nextActivation``)."""
        idx = self._stateful()
        dtype = act.dtype
        c = self._clip_ctrl(ctrl)[idx]
        tau = jnp.maximum(jnp.asarray(self.dynprm, dtype)[idx], 1e-15)  # mjMINVAL
        integ = np.asarray([self.dyn[i] == "integrator" for i in idx])
        exact = np.asarray([self.dyn[i] == "filterexact" for i in idx])
        act_dot = jnp.where(integ, c, (c - act) / tau)
        step = jnp.where(exact, tau * -jnp.expm1(-h / tau), h)
        lo = jnp.asarray(self.act_lower, dtype)[idx]
        hi = jnp.asarray(self.act_upper, dtype)[idx]
        return jnp.clip(act + act_dot * step, lo, hi)

    def inputs(self, ctrl: Array, act: Array, h: Array | float | None) -> Array:
        """What multiplies each actuator's gain during a step from ``act``: the clamped
        control, or the activation (``act'`` with ``actearly``)."""
        c = self._clip_ctrl(ctrl)
        idx = self._stateful()
        if not len(idx):
            return c
        x = act
        early = np.asarray([bool(self.actearly[i]) if self.actearly else False for i in idx])
        if early.any():
            assert h is not None, "GainBias.inputs: actearly needs the step h"
            x = jnp.where(early, self.next_act(ctrl, act, h), act)
        return c.at[idx].set(x)

    def driven(self) -> GainBias:
        """This actuator driven by :meth:`inputs` directly (no clamp, no dynamics): what a step
        applies once the inputs are known."""
        inf = np.full(np.shape(self.ctrl_lower), np.inf)
        return GainBias(
            moment=self.moment,
            gain=self.gain,
            bias=self.bias,
            ctrl_lower=-inf,
            ctrl_upper=inf,
            force_lower=self.force_lower,
            force_upper=self.force_upper,
            dofs=self.dofs,
        )

    def velocity_gain(
        self, model: Model, dtype: DTypeLike
    ) -> Array:  # the coupled velocity terms: velocity_factors
        return jnp.zeros(model.nv, dtype)

    def _force(self, c, L, Ld):
        dtype = L.dtype
        g, b = jnp.asarray(self.gain, dtype), jnp.asarray(self.bias, dtype)
        f = (g[:, 0] + g[:, 1] * L + g[:, 2] * Ld) * c + b[:, 0] + b[:, 1] * L + b[:, 2] * Ld
        return jnp.clip(
            f, jnp.asarray(self.force_lower, dtype), jnp.asarray(self.force_upper, dtype)
        )

    def _parts(self, model, q, v, ctrl):
        idx, qidx = _one_dof_coords(model, self.dofs)
        dtype = v.dtype
        mom = jnp.asarray(self.moment, dtype)
        c = jnp.clip(ctrl, jnp.asarray(self.ctrl_lower, dtype), jnp.asarray(self.ctrl_upper, dtype))
        return idx, mom, c, mom @ q[qidx], mom @ v[idx]

    def forces(
        self,
        model: Model,
        q: Array,
        v: Array,
        ctrl: Array,
        act: Array | None = None,
        h: Array | float | None = None,
    ) -> Array:
        """The actuator forces ``(nu,)`` (MuJoCo's ``actuator_force``); with activation
        dynamics at the activations ``act`` (and the step ``h`` where ``actearly``)."""
        if self.act_size():
            if act is None or (h is None and any(self.actearly)):
                raise ValueError(
                    "GainBias.forces: actuators with activation dynamics need act (and h with "
                    "actearly)"
                )
            return self.driven().forces(model, q, v, self.inputs(ctrl, act, h))
        _, _, c, L, Ld = self._parts(model, q, v, ctrl)
        return self._force(c, L, Ld)

    def torques(self, model: Model, q: Array, v: Array, ctrl: Array) -> Array:
        idx, mom, c, L, Ld = self._parts(model, q, v, ctrl)
        tau = mom.T @ self._force(c, L, Ld)
        return _scatter.add_at(jnp.zeros(model.nv, v.dtype), idx, tau)

    def velocity_factors(
        self, model: Model, q: Array, v: Array, ctrl: Array
    ) -> tuple[Array, Array]:
        """``(U (nv, nu), c (nu,))`` with ``-d tau / d v = U diag(c) U^T``."""
        idx, mom, c, L, Ld = self._parts(model, q, v, ctrl)
        _, dfd = jax.jvp(lambda ld: self._force(c, L, ld), (Ld,), (jnp.ones_like(Ld),))
        U = _scatter.add_at(jnp.zeros((model.nv, mom.shape[0]), v.dtype), idx, mom.T)
        return U, -dfd

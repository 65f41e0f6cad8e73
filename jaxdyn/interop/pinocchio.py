"""Map states, joint order, forces and Jacobians between jaxdyn and Pinocchio.

Pinocchio differs from jaxdyn in four places, all handled here:

* joint order: matched by joint name (jaxdyn orders joints by depth, Pinocchio depth-first);
* free flyer: Pinocchio's ``q = [x y z qx qy qz qw]`` and ``v = [v; ω]`` against jaxdyn's
  ``q = [x y z qw qx qy qz]`` and ``v = [ω; v]`` (both body-frame velocities at the base origin);
* continuous joints: Pinocchio stores ``(cos θ, sin θ)`` (``nq = 2``), jaxdyn the angle;
* spatial vectors: Pinocchio is ``[linear; angular]``, jaxdyn ``[angular; linear]``.

The velocity map is a permutation, so it also maps accelerations, torques, the rows and columns
of ``M``, and tangent-space derivatives. Pinocchio itself is only imported by
:func:`build_pinocchio_model`, :meth:`Converter.f_ext_to_pin` and
:meth:`Converter.constraint_models_to_pin` (jaxdyn constraints as Pinocchio rigid constraint
models; the row map is :meth:`Converter.constraint_rows_to_pin`).
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

import jax.numpy as jnp
import numpy as np

from .. import joints

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike

    from ..constraints import Connect, Weld
    from ..model.model import Model

#: a jax or a numpy array (the conversions keep the kind they are given)
_A = TypeVar("_A", "Array", np.ndarray)

_SWAP6 = np.array([3, 4, 5, 0, 1, 2])


def _xp(x: object) -> Any:
    return np if isinstance(x, np.ndarray) else jnp


def _pinocchio() -> ModuleType:
    """``pinocchio``, imported at call time (an optional dependency), typed as a plain module:
    its compiled bindings ship no type stubs, so a type checker sees none of their names."""
    import pinocchio

    return pinocchio


class Converter:
    """Converter between a jaxdyn ``model`` and a Pinocchio ``pin_model`` of the same robot.

    Joints are matched by name; the free flyer may be named ``root_joint`` in both.
    """

    def __init__(self, model: Model, pin_model: Any) -> None:
        t = model.topo
        self.model, self.pin_model = model, pin_model
        self.nq_pin, self.nv_pin = int(pin_model.nq), int(pin_model.nv)
        pin_names = list(pin_model.names)
        if self.nv_pin != model.nv:
            raise ValueError(f"Converter: nv differs (jaxdyn {model.nv}, pinocchio {self.nv_pin})")
        v_to = np.full(model.nv, -1)  # v_pin[i] = v[v_to[i]]
        q_plan: list[tuple[int, int, int, int]] = []  # (kind, ours q0, pin q0, pin nq)
        self.pin_joint_ids: list[int] = []
        for b in range(t.nb):
            name = t.joint_names[b]
            if name not in pin_names:
                raise ValueError(
                    f"Converter: jaxdyn joint {name!r} has no Pinocchio joint of that name"
                )
            jid = pin_names.index(name)
            self.pin_joint_ids.append(jid)
            jm = pin_model.joints[jid]
            kind, q0, v0 = int(t.kind[b]), int(t.q_start[b]), int(t.v_start[b])
            nvk = joints.NV[kind]
            if jm.nv != nvk:
                raise ValueError(
                    f"Converter: joint {name!r} has nv={jm.nv} in Pinocchio, {nvk} in jaxdyn"
                )
            if kind == joints.FREE:
                v_to[jm.idx_v : jm.idx_v + 6] = v0 + _SWAP6
            else:
                v_to[jm.idx_v : jm.idx_v + nvk] = v0 + np.arange(nvk)
            q_plan.append((kind, q0, int(jm.idx_q), int(jm.nq)))
        if np.any(v_to < 0):
            raise ValueError("Converter: some Pinocchio coordinates have no jaxdyn joint")
        self.v_to_pin_index = v_to.astype(np.int64)
        self.v_from_pin_index = np.argsort(v_to).astype(np.int64)
        self._q_plan = q_plan
        self._fext_joint = np.array(self.pin_joint_ids)
        self.pin_njoints = int(pin_model.njoints)

    # ------------------------------------------------------------------ configurations
    def q_to_pin(self, q: _A) -> _A:
        """jaxdyn ``q (nq,)`` -> Pinocchio ``q (nq_pin,)``."""
        xp = _xp(q)
        if not self._q_plan:  # zero-DoF model
            return q[:0]
        parts: list[Any] = [None] * len(self._q_plan)
        order = np.argsort([p[2] for p in self._q_plan])
        for i, (kind, q0, _, nq_pin) in enumerate(self._q_plan):
            if kind == joints.FREE:
                parts[i] = xp.concatenate([q[q0 : q0 + 3], q[q0 + 4 : q0 + 7], q[q0 + 3 : q0 + 4]])
            elif kind == joints.SPHERICAL:
                parts[i] = xp.concatenate([q[q0 + 1 : q0 + 4], q[q0 : q0 + 1]])
            elif nq_pin == 2:
                parts[i] = xp.stack([xp.cos(q[q0]), xp.sin(q[q0])])
            else:
                parts[i] = q[q0 : q0 + 1]
        return xp.concatenate([parts[i] for i in order])

    def q_from_pin(self, q_pin: _A) -> _A:
        """Pinocchio ``q (nq_pin,)`` -> jaxdyn ``q (nq,)``."""
        xp = _xp(q_pin)
        if not self._q_plan:
            return q_pin[:0]
        parts = []
        for kind, _, p0, nq_pin in self._q_plan:  # plan is in jaxdyn order
            x = q_pin[p0 : p0 + nq_pin]
            if kind == joints.FREE:
                parts.append(xp.concatenate([x[:3], x[6:7], x[3:6]]))
            elif kind == joints.SPHERICAL:
                parts.append(xp.concatenate([x[3:4], x[:3]]))
            elif nq_pin == 2:
                parts.append(xp.arctan2(x[1:2], x[0:1]))
            else:
                parts.append(x)
        return xp.concatenate(parts)

    # ------------------------------------------------------------------ tangent vectors
    def v_to_pin(self, v: _A, axis: int = -1) -> _A:
        """jaxdyn ``v``/``a``/``tau`` (or a matrix along ``axis``) -> Pinocchio order."""
        return _xp(v).take(v, self.v_to_pin_index, axis=axis)

    def v_from_pin(self, v_pin: _A, axis: int = -1) -> _A:
        """Pinocchio ``v``/``a``/``tau`` (or a matrix along ``axis``) -> jaxdyn order."""
        return _xp(v_pin).take(v_pin, self.v_from_pin_index, axis=axis)

    def matrix_to_pin(self, M: _A) -> _A:
        """An ``nv x nv`` matrix (``M``, ``M^-1``, derivative blocks) -> Pinocchio order."""
        return self.v_to_pin(self.v_to_pin(M, axis=0), axis=1)

    def matrix_from_pin(self, M_pin: _A) -> _A:
        return self.v_from_pin(self.v_from_pin(M_pin, axis=0), axis=1)

    def jacobian_to_pin(self, J: _A) -> _A:
        """A ``6 x nv`` jaxdyn Jacobian (``[ω; v]`` rows) -> Pinocchio (``[v; ω]`` rows)."""
        return self.v_to_pin(_xp(J).take(J, _SWAP6, axis=-2), axis=-1)

    def jacobian_from_pin(self, J_pin: _A) -> _A:
        return self.v_from_pin(_xp(J_pin).take(J_pin, _SWAP6, axis=-2), axis=-1)

    @staticmethod
    def motion_to_pin(m: _A) -> _A:
        """``[ω; v]`` -> ``[v; ω]`` (also for forces: ``[n; f]`` -> ``[f; n]``)."""
        return _xp(m).take(m, _SWAP6, axis=-1)

    motion_from_pin = motion_to_pin

    def f_ext_to_pin(self, f_ext: ArrayLike) -> list[Any]:
        """Per-body forces ``(nb, 6)`` in body frames -> Pinocchio's per-joint ``ForceVector``."""
        pin = _pinocchio()

        f_ext = np.asarray(f_ext)
        out = [pin.Force.Zero() for _ in range(self.pin_njoints)]
        for b, jid in enumerate(self.pin_joint_ids):
            fb = self.motion_to_pin(f_ext[b])
            out[jid] = pin.Force(fb[:3], fb[3:])
        return out

    # ------------------------------------------------------------------ constraints
    def constraint_models_to_pin(
        self, constraints: Weld | Connect | Sequence[Weld | Connect]
    ) -> tuple[Any, Any]:
        """Pinocchio rigid constraint models of jaxdyn constraints (:mod:`jaxdyn.constraints`).

        The map, constraint by constraint (``constraints`` keep their order):

        * :class:`~jaxdyn.constraints.Weld` -> ``CONTACT_6D``, :class:`~jaxdyn.constraints.
          Connect` -> ``CONTACT_3D``;
        * ``reference="local"`` -> ``ReferenceFrame.LOCAL``, ``"local_world_aligned"`` ->
          ``LOCAL_WORLD_ALIGNED``;
        * ``joint1_id``: the Pinocchio joint of the body carrying the frame (a jaxdyn body frame
          is its joint's frame, as in Pinocchio), ``joint1_placement``: the frame's placement in
          that body composed with ``SE3(rotation, offset)``; ``joint2_id = 0`` (the world),
          ``joint2_placement``: the constraint's ``target`` if set (identity otherwise; only
          Baumgarte terms use it).

        Rows: a weld's 6 rows are ``[angular; linear]`` in jaxdyn and ``[linear; angular]`` in
        Pinocchio (:meth:`constraint_rows_to_pin`), a connect's 3 linear rows agree; the
        velocity/acceleration conventions agree (see :mod:`jaxdyn.constraints`). Pinocchio
        4.1's ``computeDelassusMatrix`` treats ``LOCAL_WORLD_ALIGNED`` models as ``LOCAL``
        (its ``getConstraintJacobian`` and ``constraintDynamics`` do not).

        **Returns:** ``(models, datas)``: ``pin.StdVec_RigidConstraintModel`` and the matching
        ``pin.StdVec_RigidConstraintData``.
        """
        pin = _pinocchio()

        from ..constraints import check_constraints, layout

        cs = check_constraints("constraint_models_to_pin", constraints)
        lay = layout(self.model.topo, cs)
        fR, fp = np.asarray(self.model.frame_R), np.asarray(self.model.frame_p)
        models = pin.StdVec_RigidConstraintModel()
        for i, c in enumerate(cs):
            f = int(lay.frame[i])
            placement = pin.SE3(fR[f], fp[f]) * pin.SE3(lay.R_off[i], lay.p_off[i])
            ref = (
                pin.ReferenceFrame.LOCAL if lay.local[i] else pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
            )
            ct = pin.ContactType.CONTACT_6D if c.dim == 6 else pin.ContactType.CONTACT_3D
            if c.target is None:
                target = pin.SE3.Identity()
            elif c.dim == 6:
                target = pin.SE3(np.asarray(c.target[0]), np.asarray(c.target[1]))
            else:
                target = pin.SE3(np.eye(3), np.asarray(c.target))
            jid = self.pin_joint_ids[int(lay.body[i])]
            models.append(
                pin.RigidConstraintModel(ct, self.pin_model, jid, placement, 0, target, ref)
            )
        datas = pin.StdVec_RigidConstraintData()
        for cm in models:
            datas.append(cm.createData())
        return models, datas

    @staticmethod
    def constraint_rows_to_pin(
        constraints: Weld | Connect | Sequence[Weld | Connect],
    ) -> np.ndarray:
        """Row permutation ``p`` with ``x_pin = x[p]`` for the stacked rows of ``constraints``
        (Delassus matrix: ``D_pin = D[p][:, p]``, Jacobian rows, forces ``λ``): the 6 rows of a
        weld swap their angular and linear halves, a connect's 3 rows stay."""
        from ..constraints import check_constraints

        perm, r = [], 0
        for c in check_constraints("constraint_rows_to_pin", constraints):
            perm += [r + 3, r + 4, r + 5, r, r + 1, r + 2] if c.dim == 6 else [r, r + 1, r + 2]
            r += c.dim
        return np.asarray(perm, np.int64)

    constraint_rows_from_pin = constraint_rows_to_pin  # the permutation is an involution


def build_pinocchio_model(model: Model) -> Any:
    """A Pinocchio model with jaxdyn's bodies, joints and inertias (frames are not copied).

    Useful as an oracle independent of URDF parsing (e.g. for spherical joints, which URDF
    lacks). Joints are added depth-first (Pinocchio's algorithms need subtrees to be
    contiguous) and keep jaxdyn's joint names, so :class:`Converter` maps between the two.
    ``model.armature`` (if set) becomes ``pin_model.armature``.
    """
    pin = _pinocchio()

    t = model.topo
    pm = pin.Model()
    pm.name = model.name
    R, p = np.asarray(model.Xtree_R), np.asarray(model.Xtree_p)
    axis = np.asarray(model.dof_axis)
    mass, com, inertia = (np.asarray(x) for x in (model.mass, model.com, model.inertia))
    children: dict[int, list[int]] = {b: [] for b in range(-1, t.nb)}
    for b in range(t.nb):
        children[int(t.parent[b])].append(b)
    order, stack = [], list(reversed(children[-1]))
    while stack:
        b = stack.pop()
        order.append(b)
        stack.extend(reversed(children[b]))
    pin_id = {-1: 0}
    for b in order:
        kind = int(t.kind[b])
        if kind == joints.FREE:
            jm = pin.JointModelFreeFlyer()
        elif kind == joints.SPHERICAL:
            jm = pin.JointModelSpherical()
        else:
            s = axis[t.v_start[b]]
            if np.linalg.norm(s[:3]) > 0:
                jm = pin.JointModelRevoluteUnaligned(*s[:3])
            else:
                jm = pin.JointModelPrismaticUnaligned(*s[3:])
        jid = pm.addJoint(pin_id[int(t.parent[b])], jm, pin.SE3(R[b], p[b]), t.joint_names[b])
        pin_id[b] = jid
        pm.appendBodyToJoint(jid, pin.Inertia(mass[b], com[b], inertia[b]), pin.SE3.Identity())
    pm.gravity = pin.Motion(np.concatenate([np.asarray(model.gravity), np.zeros(3)]))
    if model.armature is not None:
        pm.armature = Converter(model, pm).v_to_pin(np.asarray(model.armature, float))
    return pm

"""Map states, forces, mass matrices and Jacobians between jaxdyn and MuJoCo.

For a jaxdyn model of a MuJoCo model (:func:`jaxdyn.load_mjcf`, or :func:`jaxdyn.load_urdf` of
a URDF that MuJoCo compiled), joints matched by name. The differences, all handled here:

* joint order: jaxdyn orders joints by tree depth, MuJoCo depth-first;
* free joint: MuJoCo's ``qpos = [x; qw qx qy qz]`` is jaxdyn's ``q`` (world position, unit
  quaternion scalar first), but its ``qvel = [v; ω]`` is the linear velocity of the body origin
  **in world axes** then the angular velocity in body axes, where jaxdyn's ``v = [ω; v_b]`` has
  both in body axes: ``qvel = [R v_b; ω]`` with ``R`` the body's orientation. The map ``T(q)``
  (``qvel = T(q) v``) depends on ``q``, and is orthogonal, so forces map as velocities
  (``qfrc = T tau``), matrices as ``M_mj = T M T^T`` and accelerations pick up ``Ṫ v``:
  ``qacc = T a + [R (ω x v_b); 0]``;
* ball joints: the same ``q`` (``w x y z``) and ``v`` (angular velocity in the child frame);
* hinge and slide joints: jaxdyn's ``q`` *is* ``qpos`` (:func:`jaxdyn.load_mjcf` folds
  ``qpos0`` / ``ref`` into the joint placement), so the map is a reordering;
* Jacobians: ``mj_jac`` / ``mj_jacSite`` / ``mj_jacBody`` return ``jacp`` (translation) and
  ``jacr`` (rotation) in world axes at a point, against jaxdyn's ``[angular; linear]`` rows;
  ``jacobian(model, q, frame, reference="local_world_aligned")`` at the same point is
  ``[jacr; jacp] T(q)`` (:meth:`Converter.jacobian_to_mujoco` gives ``[jacp; jacr]``).

Inverse dynamics: ``rnea(model, q, v, a) = T^T (M_mj qacc + qfrc_bias)`` with
``qacc = a_to_mujoco(q, v, a)`` and ``M_mj`` from ``mj_fullM`` (which includes the armature;
``mj_rne(flg_acc=1)`` leaves it out: add ``dof_armature * qacc``). jaxdyn's ``bias_forces`` is
not ``T^T qfrc_bias`` for a free joint: see :meth:`Converter.bias_from_mujoco`.
Works on numpy and JAX arrays (unbatched; ``jax.vmap`` the methods for batches).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar, cast

import jax.numpy as jnp
import numpy as np

from .. import joints

if TYPE_CHECKING:
    from jax import Array


#: a jax or a numpy array (the conversions keep the kind they are given; ``cast`` where the
#: type checker loses the kind through numpy's ``.T``)
_A = TypeVar("_A", "Array", np.ndarray)

_FREE, _BALL, _SLIDE, _HINGE = 0, 1, 2, 3
_SWAP6 = np.array([3, 4, 5, 0, 1, 2])


def _xp(x: object) -> Any:
    return np if isinstance(x, np.ndarray) else jnp


def _quat_to_mat(xp, q):
    q = q / xp.sqrt(xp.sum(q * q))
    w, x, y, z = q[0], q[1], q[2], q[3]
    return xp.stack(
        [
            xp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)]),
            xp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)]),
            xp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]),
        ]
    )


#: how to install what :func:`import_mujoco` needs
MJCF_HINT = "pip install 'jaxdyn[mjcf]'"


def import_mujoco() -> ModuleType:
    """The ``mujoco`` module (MuJoCo's compiler, an optional dependency), or ``ImportError``
    saying how to install it."""
    try:
        import mujoco
    except ImportError as e:
        raise ImportError(
            f"loading MJCF needs MuJoCo's compiler (the mujoco package): {MJCF_HINT}"
        ) from e
    return mujoco


# ------------------------------------------------------------------------------- names
def decode_name(raw: bytes, objtype: str, i: int) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as e:
        raise ValueError(
            f"load_mjcf: the name of MuJoCo {objtype} #{i} (0-based) is not UTF-8 text "
            f"({e.reason} at byte {e.start}: {raw[max(e.start - 8, 0) : e.end + 8]!r}); "
            "MJCF files are UTF-8 (or declare their encoding)"
        ) from None


def mujoco_names(mj_model: Any, objtype: str) -> list:
    """Names of MuJoCo's objects of one type (``"body"``, ``"jnt"``, ``"site"``, ``"geom"``,
    ``"actuator"``, ``"eq"``, ``"key"``) as jaxdyn uses them: unnamed ones are
    ``"<objtype><id>"`` (made unique)."""
    n = {
        "body": mj_model.nbody,
        "jnt": mj_model.njnt,
        "site": mj_model.nsite,
        "geom": mj_model.ngeom,
        "actuator": mj_model.nu,
        "eq": mj_model.neq,
        "key": mj_model.nkey,
        "tendon": mj_model.ntendon,
    }[objtype]
    adr = getattr(mj_model, f"name_{objtype}adr")
    raw = bytes(mj_model.names)
    names = [decode_name(raw[int(adr[i]) :].split(b"\0", 1)[0], objtype, i) for i in range(n)]
    taken = set(names)
    out = []
    for i, s in enumerate(names):
        if not s:
            s = f"{objtype}{i}"
            while s in taken:
                s += "_"
            taken.add(s)
        out.append(s)
    return out


class Converter:
    """Converter between a jaxdyn ``model`` (a :class:`jaxdyn.Model` or an
    :class:`~jaxdyn.io.mjcf.MJCFModel`) and a compiled ``mujoco.MjModel`` of the same robot.

    Joints are matched by name (unnamed MuJoCo joints are ``jnt<id>``, as
    :func:`jaxdyn.load_mjcf` names them). Attributes: ``q_index`` (``q = qpos[q_index]``),
    ``v_index`` (MuJoCo dof of each jaxdyn velocity coordinate, before the free-joint
    rotation).
    """

    def __init__(self, model: Any, mj_model: Any) -> None:
        model = getattr(model, "model", model)
        t = model.topo
        self.model, self.mj_model = model, mj_model
        if int(mj_model.nq) != model.nq or int(mj_model.nv) != model.nv:
            raise ValueError(
                f"Converter: sizes differ (jaxdyn nq={model.nq} nv={model.nv}, MuJoCo "
                f"nq={mj_model.nq} nv={mj_model.nv})"
            )
        names = mujoco_names(mj_model, "jnt")
        index = {n: j for j, n in enumerate(names)}
        q_index = np.full(model.nq, -1, np.int64)
        v_index = np.full(model.nv, -1, np.int64)
        free = []  # (jaxdyn q start, jaxdyn v start)
        for b in range(t.nb):
            name = t.joint_names[b]
            if name not in index:
                raise ValueError(
                    f"Converter: jaxdyn joint {name!r} has no MuJoCo joint of that name"
                )
            j = index[name]
            kind, typ = int(t.kind[b]), int(mj_model.jnt_type[j])
            ok = {joints.FREE: (_FREE,), joints.SPHERICAL: (_BALL,)}.get(kind, (_HINGE, _SLIDE))
            if typ not in ok:
                raise ValueError(
                    f"Converter: joint {name!r} is {joints.KIND_NAMES[kind]} in jaxdyn, MuJoCo "
                    f"type {typ}"
                )
            q0, v0 = int(t.q_start[b]), int(t.v_start[b])
            qa, da = int(mj_model.jnt_qposadr[j]), int(mj_model.jnt_dofadr[j])
            nq, nv = joints.NQ[kind], joints.NV[kind]
            q_index[q0 : q0 + nq] = qa + np.arange(nq)
            if kind == joints.FREE:
                v_index[v0 : v0 + 6] = da + _SWAP6
                free.append((q0, v0))
            else:
                v_index[v0 : v0 + nv] = da + np.arange(nv)
        if np.any(q_index < 0) or len(set(v_index.tolist())) != model.nv:  # pragma: no cover
            raise ValueError("Converter: some MuJoCo coordinates have no jaxdyn joint")
        self.q_index, self.v_index = q_index, v_index
        self._q_inv = np.argsort(q_index)
        self._free = tuple(free)

    # ------------------------------------------------------------------ configurations
    def q_to_mujoco(self, q: _A) -> _A:
        """jaxdyn ``q`` -> MuJoCo ``qpos`` (a reordering)."""
        return q[self._q_inv]

    def q_from_mujoco(self, qpos: _A) -> _A:
        """MuJoCo ``qpos`` -> jaxdyn ``q``."""
        return qpos[self.q_index]

    # ------------------------------------------------------------------ the velocity map
    def velocity_map(self, q: _A) -> _A:
        """``T (nv, nv)`` with ``qvel = T @ v`` at jaxdyn configuration ``q``: a permutation,
        with the free joints' world rotations on their linear rows. ``T`` is orthogonal."""
        xp = _xp(q)
        nv = self.model.nv
        P = np.zeros((nv, nv))
        P[self.v_index, np.arange(nv)] = 1.0
        if not self._free:
            return xp.asarray(P, dtype=q.dtype)
        D = xp.eye(nv, dtype=q.dtype)
        for q0, v0 in self._free:
            R = _quat_to_mat(xp, q[q0 + 3 : q0 + 7])
            sl = slice(v0 + 3, v0 + 6)
            if xp is np:
                D[sl, sl] = R
            else:
                D = D.at[sl, sl].set(R)
        return xp.asarray(P, dtype=q.dtype) @ D

    def _drift(self, q: _A, v: _A) -> _A:
        """``c`` with ``qacc = T (a + c)``: ``ω x v_b`` on each free joint's linear part."""
        xp = _xp(v)
        c = xp.zeros_like(v)
        for _, v0 in self._free:
            w, vl = v[v0 : v0 + 3], v[v0 + 3 : v0 + 6]
            cross = xp.cross(w, vl)
            if xp is np:
                c[v0 + 3 : v0 + 6] = cross
            else:
                c = c.at[v0 + 3 : v0 + 6].set(cross)
        return c

    def v_to_mujoco(self, q: _A, v: _A) -> _A:
        """jaxdyn ``v`` -> MuJoCo ``qvel`` at ``q``. Also generalized forces: ``tau`` ->
        ``qfrc`` (``T`` is orthogonal)."""
        return self.velocity_map(q) @ v

    def v_from_mujoco(self, q: _A, qvel: _A) -> _A:
        """MuJoCo ``qvel`` (or ``qfrc``: ``qfrc_bias``, ``mj_rne``'s result) -> jaxdyn order and
        coordinates, at jaxdyn configuration ``q``."""
        return cast("_A", self.velocity_map(q).T @ qvel)

    tau_to_mujoco = v_to_mujoco
    tau_from_mujoco = v_from_mujoco

    def a_to_mujoco(self, q: _A, v: _A, a: _A) -> _A:
        """jaxdyn acceleration ``a`` -> MuJoCo ``qacc`` (``T a + Ṫ v``)."""
        return self.velocity_map(q) @ (a + self._drift(q, v))

    def a_from_mujoco(self, q: _A, v: _A, qacc: _A) -> _A:
        """MuJoCo ``qacc`` -> jaxdyn ``a`` at ``(q, v)`` (jaxdyn's ``q`` and ``v``)."""
        return cast("_A", self.velocity_map(q).T @ qacc - self._drift(q, v))

    def bias_from_mujoco(self, q: _A, v: _A, qfrc_bias: _A, M_mj: _A) -> _A:
        """MuJoCo's ``qfrc_bias`` (with its mass matrix ``M_mj``, ``mj_fullM``) -> jaxdyn's
        ``bias_forces(model, q, v)``.

        Not a plain force map where the model has a free joint: jaxdyn's zero acceleration is
        MuJoCo's ``qacc0 = a_to_mujoco(q, v, 0)`` (the body-axes linear velocity turns with the
        body), so ``bias = T^T (qfrc_bias + M_mj qacc0)``."""
        qacc0 = self.a_to_mujoco(q, v, _xp(v).zeros_like(v))
        return self.tau_from_mujoco(q, qfrc_bias + M_mj @ qacc0)

    def matrix_to_mujoco(self, q: _A, M: _A) -> _A:
        """An ``nv x nv`` jaxdyn matrix (mass matrix, its inverse) -> MuJoCo's ``T M T^T``."""
        T = self.velocity_map(q)
        return cast("_A", T @ M @ T.T)

    def matrix_from_mujoco(self, q: _A, M_mj: _A) -> _A:
        """MuJoCo's ``nv x nv`` matrix (``mj_fullM``) -> jaxdyn's ``T^T M T``."""
        T = self.velocity_map(q)
        return cast("_A", T.T @ M_mj @ T)

    def jacobian_to_mujoco(self, q: _A, J: _A) -> _A:
        """A jaxdyn ``6 x nv`` Jacobian (``[angular; linear]`` rows, world axes at the point:
        ``reference="local_world_aligned"``) -> MuJoCo's stacked ``[jacp; jacr]``."""
        xp = _xp(J)
        return xp.take(J, _SWAP6, axis=0) @ self.velocity_map(q).T

    def jacobian_from_mujoco(self, q: _A, J_mj: _A) -> _A:
        """MuJoCo's stacked ``[jacp; jacr]`` (``6 x nv``) -> jaxdyn ``[angular; linear]`` rows
        (``local_world_aligned``) over jaxdyn's ``v``."""
        xp = _xp(J_mj)
        return xp.take(J_mj, _SWAP6, axis=0) @ self.velocity_map(q)


def mujoco_model_from_urdf(source: str | os.PathLike, floating_base: bool = False) -> Any:
    """Compile a URDF with MuJoCo's URDF importer, for comparisons with :func:`jaxdyn.load_urdf`
    (and for :func:`jaxdyn.load_mjcf`).

    ``source``: a path or the URDF text. ``<visual>`` and ``<collision>`` elements are removed
    (their meshes need not exist; neither changes the dynamics), fixed joints are kept as bodies
    (``fusestatic="false"``, so every link stays a named body) and MuJoCo's mass / inertia
    bounds are off. ``floating_base=True`` adds a free joint named ``"root_joint"`` (jaxdyn's
    root joint name) to the root link's body, as ``load_urdf(..., floating_base=True)``.
    Returns a ``mujoco.MjModel``; MuJoCo's compiler errors (e.g. an inertia that is not
    positive definite, a moving body without mass) are raised as ``ValueError`` naming the
    source.
    """
    import xml.etree.ElementTree as ET

    mujoco = import_mujoco()
    text = source if isinstance(source, str) and source.lstrip().startswith("<") else None
    label = "<URDF string>" if text is not None else os.fspath(source)
    if text is None:
        with open(os.fspath(source)) as f:
            text = f.read()
    root = ET.fromstring(text)
    if root.tag != "robot":
        raise ValueError(f"mujoco_model_from_urdf: {label}: root element <{root.tag}>, not <robot>")
    for link in root.findall("link"):
        for tag in ("visual", "collision"):
            for el in link.findall(tag):
                link.remove(el)
    for el in root.findall("mujoco"):
        root.remove(el)
    ext = ET.SubElement(root, "mujoco")
    ET.SubElement(
        ext,
        "compiler",
        fusestatic="false",
        discardvisual="false",
        balanceinertia="false",
        boundmass="0",
        boundinertia="0",
    )
    try:
        spec = mujoco.MjSpec.from_string(ET.tostring(root, encoding="unicode"))
        if floating_base:
            spec.worldbody.first_body().add_freejoint(name="root_joint")
        return spec.compile()
    except ValueError as e:
        msg = str(e).strip().replace("\n", "; ")
        raise ValueError(f"mujoco_model_from_urdf: {label}: MuJoCo's compiler: {msg}") from None

"""The compiled robot model: static topology (numpy) plus parameter leaves (JAX arrays).

Bodies are numbered so that every depth level of the tree is a contiguous range, and inside a
level the joints of one kind are contiguous too: bodies are sorted by ``(depth, joint kind,
parent's index, URDF depth-first order)``.
Velocity coordinates follow the body order, so a (level, kind) group owns a contiguous slice of
``v`` as well. A tree pass is then a Python loop over the few static levels, each step a
slice, a gather from the previous level and a segment-sum into it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import joints

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike, DTypeLike


@dataclass(frozen=True)
class Group:
    """Bodies ``[b0, b1)`` of one joint kind in one level; they own ``q[q0:q1]``, ``v[v0:v1]``."""

    kind: int
    b0: int
    b1: int
    q0: int
    q1: int
    v0: int
    v1: int

    @property
    def n(self) -> int:
        return self.b1 - self.b0


@dataclass(frozen=True)
class Level:
    """Bodies ``[b0, b1)`` at one depth; ``parent_local[i]`` indexes the previous level."""

    b0: int
    b1: int
    parent_local: np.ndarray  # (n,) int, -1 at depth 0 (the world)
    groups: tuple

    @property
    def n(self) -> int:
        return self.b1 - self.b0


class Topology:
    """Static, hashable description of the tree (numpy only, built once).

    Attributes are plain numpy arrays / tuples; equality and hashing go through a digest of the
    contents so that two models with the same structure share compiled code.
    """

    def __init__(self, **fields: Any) -> None:
        for k, v in fields.items():
            object.__setattr__(self, k, v)
        h = hashlib.sha256()
        for k in sorted(fields):
            v = fields[k]
            h.update(k.encode())
            if isinstance(v, np.ndarray):
                h.update(str(v.dtype).encode() + str(v.shape).encode() + v.tobytes())
            else:
                h.update(repr(v).encode())
        object.__setattr__(self, "_digest", h.hexdigest())

    def __setattr__(self, k, v):  # pragma: no cover - immutability guard
        raise AttributeError("Topology is immutable")

    #: dense ``(nb, nb)`` / ``(nb, nv)`` / ``(nv, nv)`` patterns derived from ``parent``, built
    #: on first use (loading stays linear in the number of links; the algorithms that need
    #: them are quadratic anyway) and not part of the digest (``parent`` and ``nv_j`` are)
    _DERIVED = ("support", "body_dof_support", "dof_ancestor")

    def __getattr__(self, k):
        if k not in Topology._DERIVED:
            raise AttributeError(k)
        nb, parent = self.nb, self.parent
        # support[b, c]: body c is body b or one of its ancestors (parents come first)
        support = np.zeros((nb, nb), bool)
        for b in range(nb):
            if parent[b] >= 0:
                support[b] = support[parent[b]]
            support[b, b] = True
        # body_dof_support[b, r]: velocity coordinate r moves body b (row nb = world: none)
        body_dof_support = np.zeros((nb + 1, self.nv), bool)
        body_dof_support[:nb] = support[:, self.dof_body]
        # dof_ancestor[r, c]: body of r is an ancestor-or-self of body of c (CRBA's pattern)
        dof_ancestor = support[self.dof_body][:, self.dof_body].T
        for name, v in zip(Topology._DERIVED, (support, body_dof_support, dof_ancestor)):
            v.setflags(write=False)
            object.__setattr__(self, name, v)
        return getattr(self, k)

    def __hash__(self):
        return hash(self._digest)

    def __eq__(self, other):
        return isinstance(other, Topology) and other._digest == self._digest

    def __repr__(self):
        return f"Topology(nb={self.nb}, nq={self.nq}, nv={self.nv}, depth={len(self.levels)})"


class Model(eqx.Module):
    """A rigid-body tree compiled for JAX.

    Parameters are array leaves, so ``jax.grad`` with respect to a model works:

    * ``Xtree_R (nb, 3, 3)``, ``Xtree_p (nb, 3)``: placement of each body's joint frame in its
      parent body's frame (Featherstone's ``Xtree``, as a rotation and a translation);
    * ``dof_axis (nv, 6)``: motion-subspace column of each velocity coordinate in its body's
      frame (``[angular; linear]``);
    * ``mass (nb,)``, ``com (nb, 3)``, ``inertia (nb, 3, 3)``: body mass, centre of mass in the
      body frame, rotational inertia about the centre of mass in body axes (links merged by
      fixed joints included);
    * ``frame_R (nf, 3, 3)``, ``frame_p (nf, 3)``: placement of each frame in its body;
    * ``gravity (3,)``: the world gravity vector;
    * ``armature (nv,)`` or ``None`` (no armature, the default): rotor inertia reflected on
      each velocity coordinate, added to the diagonal of the mass matrix wherever it appears
      (``crba``, ``rnea``, ``aba``, ``minv``, kinetic energy, the derivatives, the Delassus
      matrix and constrained dynamics), as Pinocchio's ``model.armature``. Set it with
      :meth:`with_armature`; a small armature is the usual fix of a singular mass matrix
      (moving joints whose subtrees carry no mass).

    Joint properties read from URDF ``<limit>`` / ``<dynamics>`` (``None`` when the file has
    none; the simulator :mod:`jaxdyn.sim` uses them, the dynamics algorithms do not):

    * ``q_lower``, ``q_upper (nq,)``: position limits of one-DoF joints (``-inf`` / ``inf``
      elsewhere and for continuous joints), Pinocchio's ``lowerPositionLimit`` /
      ``upperPositionLimit``;
    * ``effort_limit``, ``velocity_limit (nv,)``: ``<limit effort velocity>`` (``inf`` if not
      given);
    * ``damping``, ``friction (nv,)``: viscous and Coulomb joint friction of ``<dynamics>``.

    They are array leaves like the others (differentiable, batchable for domain
    randomisation); change them with ``eqx.tree_at`` (``is_leaf=lambda x: x is None`` when a
    field is ``None``).

    Everything else (parents, levels, index ranges, names) lives in the static ``topo``;
    ``x32_load`` (static) records that the parameters were rounded to float32 at load time
    (``jax_enable_x64`` off), so that float64 inputs are refused instead of silently computing
    with float32 parameters (:meth:`astype` clears it).
    """

    Xtree_R: jax.Array
    Xtree_p: jax.Array
    dof_axis: jax.Array
    mass: jax.Array
    com: jax.Array
    inertia: jax.Array
    frame_R: jax.Array
    frame_p: jax.Array
    gravity: jax.Array
    topo: Topology = eqx.field(static=True)
    armature: jax.Array | None = None
    x32_load: bool = eqx.field(static=True, default=False)
    q_lower: jax.Array | None = None
    q_upper: jax.Array | None = None
    effort_limit: jax.Array | None = None
    velocity_limit: jax.Array | None = None
    damping: jax.Array | None = None
    friction: jax.Array | None = None

    # ------------------------------------------------------------------ sizes and names
    @property
    def nq(self) -> int:
        return self.topo.nq

    @property
    def nv(self) -> int:
        return self.topo.nv

    @property
    def nb(self) -> int:
        """Number of moving bodies (the world is not counted)."""
        return self.topo.nb

    @property
    def name(self) -> str:
        return self.topo.name

    @property
    def joint_names(self) -> tuple:
        """Names of the moving joints, in q / v order."""
        return self.topo.joint_names

    @property
    def body_names(self) -> tuple:
        """Name of the URDF link that carries each body."""
        return self.topo.body_names

    @property
    def frame_names(self) -> tuple:
        return self.topo.frame_names

    @property
    def parent(self) -> np.ndarray:
        return self.topo.parent

    @property
    def floating_base(self) -> bool:
        return self.topo.floating_base

    @property
    def depth(self) -> int:
        return len(self.topo.levels)

    def joint_index(self, name: str) -> int:
        try:
            return self.topo.joint_names.index(name)
        except ValueError:
            raise ValueError(
                f"{self.name}: no joint named {name!r}; joints are {list(self.joint_names)}"
            ) from None

    def frame_index(self, frame: str | int) -> int:
        """Index of a frame given by name or index (link and joint names are frames)."""
        if isinstance(frame, (bool, np.bool_)) or not isinstance(frame, (str, int, np.integer)):
            raise TypeError(
                f"{self.name}: frame must be a frame name (str) or an index (int), got "
                f"{type(frame).__name__} {frame!r}"
            )
        if isinstance(frame, (int, np.integer)):
            if not 0 <= frame < len(self.topo.frame_names):
                raise ValueError(
                    f"{self.name}: frame index {frame} out of range [0, {len(self.frame_names)})"
                )
            return int(frame)
        try:
            return self.topo.frame_names.index(frame)
        except ValueError:
            raise ValueError(
                f"{self.name}: no frame named {frame!r}; frames are {list(self.frame_names)}"
            ) from None

    def _joint(self, fn, joint) -> int:
        """Index of a moving joint given by name or index (``0 <= index < nb``)."""
        if isinstance(joint, str):
            return self.joint_index(joint)
        if isinstance(joint, (bool, np.bool_)) or not isinstance(joint, (int, np.integer)):
            raise TypeError(
                f"{self.name}.{fn}: joint must be a joint name (str) or an index (int), got "
                f"{type(joint).__name__} {joint!r}"
            )
        if not 0 <= joint < self.nb:
            raise IndexError(
                f"{self.name}.{fn}: joint index {int(joint)} out of range [0, {self.nb}) "
                f"(the {self.nb} moving joints, in q / v order: model.joint_names)"
            )
        return int(joint)

    def q_slice(self, joint: str | int) -> slice:
        """The slice of ``q`` of a joint (name, or index into ``joint_names``)."""
        j = self._joint("q_slice", joint)
        return slice(int(self.topo.q_start[j]), int(self.topo.q_start[j] + self.topo.nq_j[j]))

    def v_slice(self, joint: str | int) -> slice:
        """The slice of ``v`` of a joint (name, or index into ``joint_names``)."""
        j = self._joint("v_slice", joint)
        return slice(int(self.topo.v_start[j]), int(self.topo.v_start[j] + self.topo.nv_j[j]))

    def total_mass(self) -> Array:
        return jnp.sum(self.mass)

    def astype(self, dtype: DTypeLike) -> Model:
        """The same model with every parameter leaf cast to ``dtype`` (an explicit choice of
        precision: clears ``x32_load``)."""
        out = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype), self)
        if out.x32_load:
            out = dataclasses.replace(out, x32_load=False)
        return out

    def with_armature(self, armature: ArrayLike) -> Model:
        """The same model with ``armature`` (a scalar for every coordinate, or ``(nv,)``, in
        ``v`` order: ``model.v_slice(name)``) added to the diagonal of the mass matrix; ``None``
        removes it. Armature must be finite and ``>= 0`` (checked when concrete).

        Typical use: ``model.with_armature(1e-6)`` makes the mass matrix of a model with
        massless moving subtrees regular (see :func:`jaxdyn.load_urdf`'s warning).
        """
        if armature is None:
            return eqx.tree_at(lambda m: m.armature, self, None, is_leaf=lambda x: x is None)
        # a concrete armature in numpy, then one transfer: eager jax.numpy operations each
        # compile a program in a new process (three here, before a script's first result)
        traced = isinstance(armature, jax.core.Tracer)
        a = jnp.asarray(armature) if traced else np.asarray(armature)
        if not (jnp.issubdtype(a.dtype, jnp.floating) or jnp.issubdtype(a.dtype, jnp.integer)):
            raise TypeError(
                f"{self.name}.with_armature: armature must be real numbers, got {a.dtype}"
            )
        if a.ndim == 0:
            a = (jnp if traced else np).broadcast_to(a, (self.nv,))
        if a.shape != (self.nv,):
            raise ValueError(
                f"{self.name}.with_armature: armature has shape {tuple(a.shape)}, expected a "
                f"scalar or (nv,)=({self.nv},)"
            )
        a = a.astype(self.mass.dtype)
        if not traced:
            an = np.asarray(a)
            a = jax.device_put(an)
            if not np.all(np.isfinite(an)) or np.any(an < 0):
                bad = [self._dof_name(i) for i in np.nonzero(~(an >= 0) | ~np.isfinite(an))[0]]
                raise ValueError(
                    f"{self.name}.with_armature: armature must be finite and >= 0; bad at {bad[:8]}"
                )
        return eqx.tree_at(lambda m: m.armature, self, a, is_leaf=lambda x: x is None)

    def _dof_name(self, i) -> str:
        b = int(self.topo.dof_body[i])
        k = int(i - self.topo.v_start[b])
        name = self.topo.joint_names[b]
        return name if self.topo.nv_j[b] == 1 else f"{name}[{k}]"

    def __repr__(self):
        return (
            f"Model({self.name!r}, nq={self.nq}, nv={self.nv}, nb={self.nb}, "
            f"depth={self.depth}, floating_base={self.floating_base})"
        )

    def describe(self) -> str:
        """Human-readable tree (used by ``jaxdyn info``)."""
        t = self.topo
        lines = [
            f"{self.name}: nq={self.nq} nv={self.nv} bodies={self.nb} depth={self.depth} "
            f"frames={len(t.frame_names)} floating_base={self.floating_base} "
            f"mass={float(np.sum(np.asarray(self.mass))):.4g} kg"
        ]
        children = {i: [] for i in range(-1, t.nb)}
        for b in range(t.nb):
            children[int(t.parent[b])].append(b)
        mass = np.asarray(self.mass)

        def walk(b, prefix):
            kids = children[b]
            for k, c in enumerate(kids):
                last = k == len(kids) - 1
                kind = joints.KIND_NAMES[int(t.kind[c])]
                lines.append(
                    f"{prefix}{'`-- ' if last else '|-- '}{t.body_names[c]}  "
                    f"[{t.joint_names[c]}: {kind}, q{t.q_start[c]}:{t.q_start[c] + t.nq_j[c]}, "
                    f"v{t.v_start[c]}:{t.v_start[c] + t.nv_j[c]}]  m={mass[c]:.4g}"
                )
                walk(c, prefix + ("    " if last else "|   "))

        lines.append("world" if self.floating_base else f"{t.root_name}  (world)")
        walk(-1, "")
        return "\n".join(lines)


def make_topology(
    name: str,
    parent: Sequence[int] | np.ndarray,
    kind: Sequence[int] | np.ndarray,
    joint_names: Sequence[str],
    body_names: Sequence[str],
    frame_names: Sequence[str],
    frame_parent: Sequence[int] | np.ndarray,
    floating_base: bool,
    root_name: str,
    urdf_robot: object | None = None,
) -> Topology:
    """Derive every static index structure from the parent array of depth-sorted bodies."""
    parent = np.asarray(parent, dtype=np.int64)
    kind = np.asarray(kind, dtype=np.int64)
    nb = len(parent)
    if np.any(parent >= np.arange(nb)):
        raise AssertionError("bodies must be topologically sorted")
    depth = np.zeros(nb, np.int64)
    for b in range(nb):
        depth[b] = 0 if parent[b] < 0 else depth[parent[b]] + 1
    if np.any(np.diff(depth) < 0):
        raise AssertionError("bodies must be sorted by depth")
    nq_j = np.array([joints.NQ[int(k)] for k in kind], np.int64)
    nv_j = np.array([joints.NV[int(k)] for k in kind], np.int64)
    q_start = np.cumsum(np.concatenate([[0], nq_j]))[:-1].astype(np.int64)
    v_start = np.cumsum(np.concatenate([[0], nv_j]))[:-1].astype(np.int64)
    nq, nv = int(nq_j.sum()), int(nv_j.sum())

    levels = []
    bounds = np.searchsorted(depth, np.arange(int(depth.max()) + 2 if nb else 0))
    for d in range(len(bounds) - 1):
        b0, b1 = int(bounds[d]), int(bounds[d + 1])
        if d == 0:
            parent_local = -np.ones(b1 - b0, np.int64)
        else:
            parent_local = parent[b0:b1] - levels[-1].b0
        groups = []
        for k in (joints.ONE_DOF, joints.SPHERICAL, joints.FREE):
            kidx = np.nonzero(kind[b0:b1] == k)[0] + b0
            if len(kidx) == 0:
                continue
            g0, g1 = int(kidx[0]), int(kidx[-1]) + 1
            if g1 - g0 != len(kidx):
                raise AssertionError("joint kinds must be contiguous inside a level")
            groups.append(
                Group(
                    k,
                    g0,
                    g1,
                    int(q_start[g0]),
                    int(q_start[g1 - 1] + nq_j[g1 - 1]),
                    int(v_start[g0]),
                    int(v_start[g1 - 1] + nv_j[g1 - 1]),
                )
            )
        levels.append(Level(b0, b1, parent_local, tuple(groups)))

    dof_body = np.repeat(np.arange(nb), nv_j)
    return Topology(
        name=name,
        nb=nb,
        nq=nq,
        nv=nv,
        parent=parent,
        kind=kind,
        depth=depth,
        nq_j=nq_j,
        nv_j=nv_j,
        q_start=q_start,
        v_start=v_start,
        levels=tuple(levels),
        dof_body=dof_body,
        joint_names=tuple(joint_names),
        body_names=tuple(body_names),
        frame_names=tuple(frame_names),
        frame_parent=np.asarray(frame_parent, np.int64),
        floating_base=bool(floating_base),
        root_name=root_name,
    )

"""Cluster models: a spanning tree plus local loop constraints, compiled for JAX.

Reference: M. Chignoli, N. Adrian, S. Kim, P. M. Wensing, "Recursive rigid-body dynamics
algorithms for systems with kinematic loops" (IEEE T-RO 2024; arXiv:2311.13732), §IV (cluster
connectivity tree, C-CT) and §V (cluster spatial quantities). Conventions and the checked
formulas are restated in ``docs/clusters.md`` of the repository.

Construction (:func:`build_clusters`; :func:`jaxdyn.clusters.build` adds the rotor folding):

1. the URDF's spanning tree is compiled by :func:`jaxdyn.model.build_model` (fixed joints merged);
2. every constraint names the joints it couples; the bodies of those joints, together with all
   bodies on their tree paths up to (excluding) the nearest common proper ancestor, form one
   cluster -- for a loop between two links this is "all bodies strictly below the nearest common
   ancestor" (paper §IV-A; URDF+ takes strongly connected components, which is the same set);
   clusters that share bodies are merged; bodies in no loop are one-body clusters;
3. the parent of a cluster is the cluster holding the parents of its bodies; they must all lie in
   one cluster (else ``ValueError``);
4. clusters are sorted by depth in the cluster tree, then by *signature* (type, sizes,
   constraint structure), so that clusters that can be computed by one vectorised expression are
   contiguous (a :class:`Group`); a depth of the cluster tree is a :class:`jaxdyn.model.model.Level`
   (the same definition as the tree's: bodies ``[b0, b1)`` in cluster body order,
   ``parent_local`` the output body of each one in the previous level, and its groups).

Per cluster ``k`` with bodies ``b_1..b_n`` (body order = parent before child), spanning
coordinates ``q_k`` (the bodies' joints) and independent velocity ``ydot_k``:

* ``out[i]``: the output body ``o(b_i)`` = nearest ancestor of ``b_i`` outside the cluster
  (index into the previous level's bodies; ``-1`` = world). This is the connectivity of the
  cluster transform ``X_k`` (paper eq. (20)): block row ``i`` holds ``^{b_i}X_{o(b_i)}`` in the
  column of ``o(b_i)``.
* ``Ab[i, j] = 1`` iff ``b_j`` is an in-cluster ancestor-or-self of ``b_i``: the sparsity of
  the remap ``X_R`` (paper eq. (22)); ``A[i, d]`` the same per spanning coordinate.
* ``G``, ``g`` (paper eqs. (6)-(8)): explicit clusters ``q = G y + off``;
  implicit clusters ``phi(q) = 0`` with ``G = P [I; -K_d^-1 K_i]``, ``g = P [0; K_d^-1 k]``.
* ``S_k = X_R blkdiag(S_b) G`` (paper eq. (23)).

Static structure and parameters are kept apart, as in :class:`jaxdyn.Model`: the
:class:`ClusterTopology` (numpy and Python only) is hashed and compared by content, so that
loading the same file twice shares compiled code; every real-valued parameter of the
constraints is an array leaf of the :class:`ClusterModel` (``model.params[group]``: ``G`` and
``off`` of explicit clusters, which hold the gear and belt ratios; the point offsets and linear
coefficients of loop constraints; ``armature``), differentiable and batchable like the spanning
tree's masses and inertias.

jaxdyn evaluates everything in world coordinates (as its core algorithms do, Featherstone 2008
§5.3): then ``^{b}X_{o(b)}`` and the ``X_R`` blocks are identities, ``X_k`` is the 0/1 selection
``out`` and ``X_R`` the 0/1 ancestor incidence ``A``; :func:`jaxdyn.clusters.cluster_quantities`
returns the local-frame forms as well.

State of a cluster model: position ``q`` (per cluster: explicit -> ``y``, implicit -> the spanning
coordinates, which must satisfy ``phi = 0``; one-body clusters -> the joint's own ``q``, with
quaternions) and velocity ``v = ydot``. ``model.q_names`` / ``model.v_names`` name every entry.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import joints, spatial
from ..model import Model, build_model
from ..model import build as build_mod
from ..model.model import Group as TreeGroup
from ..model.model import Level, Topology, make_topology
from ..model.urdf import URDFRobot, parse_urdf
from . import spec as S

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterable, Mapping

    from jax import Array
    from jax.typing import ArrayLike, DTypeLike


TREE, LINEAR, IMPLICIT = "tree", "linear", "implicit"

# ----------------------------------------------------------------------------- content digest


def _digest_update(h, x):
    """Feed ``x`` (nested numpy / Python data, dataclasses, topologies) into the hash ``h``."""
    if isinstance(x, (ClusterTopology, Topology)):
        h.update(b"T" + x._digest.encode())
    elif isinstance(x, np.ndarray):
        h.update(b"A" + str(x.dtype).encode() + str(x.shape).encode() + x.tobytes())
    elif isinstance(x, (tuple, list)):
        h.update(b"(" + str(len(x)).encode())
        for y in x:
            _digest_update(h, y)
        h.update(b")")
    elif isinstance(x, dict):
        h.update(b"{" + str(len(x)).encode())
        for k in sorted(x):
            h.update(repr(k).encode())
            _digest_update(h, x[k])
        h.update(b"}")
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        h.update(b"D" + type(x).__qualname__.encode())
        for f in dataclasses.fields(x):
            h.update(f.name.encode())
            _digest_update(h, getattr(x, f.name))
    elif callable(x) and not isinstance(x, type):
        # functions (user constraint functions): by identity; the topology keeps a reference,
        # so the identity is not reused while it lives
        name = getattr(x, "__qualname__", type(x).__qualname__)
        h.update(f"F{getattr(x, '__module__', '')}.{name}@{id(x)}".encode())
    else:
        h.update(b"R" + type(x).__name__.encode() + repr(x).encode())


def digest(*xs: ArrayLike | None) -> str:
    """SHA-256 of the content of ``xs`` (see :class:`ClusterTopology`)."""
    h = hashlib.sha256()
    for x in xs:
        _digest_update(h, x)
    return h.hexdigest()


# ----------------------------------------------------------------------------- items


@dataclass(frozen=True)
class PointItem:
    """``phi = (p_pred - p_succ)[rows]`` in the nearest-common-ancestor frame."""

    Lp: int
    Ls: int
    rows: tuple

    kind = "point"
    leaf_keys = ("off_p", "off_s")

    @property
    def key(self) -> tuple:
        return ("point", self.Lp, self.Ls, self.rows)

    @property
    def r(self) -> int:
        return len(self.rows)

    @staticmethod
    def _point(qp, XR, Xp, ax, off):
        """The point ``off`` of the last path body, in the frame above the first one:
        ``p <- Xtree (XJ(q) p)`` going up the path, with Rodrigues' vector formula
        ``XJ p = p cos q + (a x p) sin q + a (a.p)(1 - cos q) + a_lin q`` (a revolute axis ``a``
        or a prismatic axis ``a_lin``; the other is zero)."""
        p = off
        for j in range(qp.shape[0] - 1, -1, -1):
            a, al, th = ax[j, :3], ax[j, 3:], qp[j]
            c, s = jnp.cos(th), jnp.sin(th)
            p = p * c + jnp.cross(a, p) * s + a * (jnp.dot(a, p) * (1 - c)) + al * th
            p = jnp.dot(XR[j], p) + Xp[j]
        return p

    def data(self, tree: Model, static: dict, leaves: dict, pre: str) -> dict:
        out = {}
        for side in ("p", "s"):
            b = static[pre + "body_" + side]  # (nc, L) spanning body indices
            out["XR_" + side] = tree.Xtree_R[b]
            out["Xp_" + side] = tree.Xtree_p[b]
            out["ax_" + side] = tree.dof_axis[static[pre + "dof_" + side]]
            out["idx_" + side] = static[pre + "idx_" + side]
            out["off_" + side] = leaves[pre + "off_" + side]
        return out

    def phi(self, qc: Array, d: dict) -> Array:
        dt = qc.dtype
        pp = self._point(
            qc[d["idx_p"]],
            d["XR_p"].astype(dt),
            d["Xp_p"].astype(dt),
            d["ax_p"].astype(dt),
            d["off_p"].astype(dt),
        )
        ps = self._point(
            qc[d["idx_s"]],
            d["XR_s"].astype(dt),
            d["Xp_s"].astype(dt),
            d["ax_s"].astype(dt),
            d["off_s"].astype(dt),
        )
        return (pp - ps)[np.asarray(self.rows)]


@dataclass(frozen=True)
class LinItem:
    """``phi = K q[idx] - k0`` (inside an implicit cluster)."""

    nidx: int
    r: int

    kind = "lin"
    leaf_keys = ("K", "k0")

    @property
    def key(self) -> tuple:
        return ("lin", self.nidx, self.r)

    def data(self, tree: Model, static: dict, leaves: dict, pre: str) -> dict:
        return {"idx": static[pre + "idx"], "K": leaves[pre + "K"], "k0": leaves[pre + "k0"]}

    def phi(self, qc: Array, d: dict) -> Array:
        return d["K"].astype(qc.dtype) @ qc[d["idx"]] - d["k0"].astype(qc.dtype)


@dataclass(frozen=True)
class FnItem:
    """``phi = fn(q[idx])`` for a user function."""

    fn: Callable[..., Any]
    nidx: int
    r: int | None

    kind = "fn"
    leaf_keys = ()

    @property
    def key(self) -> tuple:
        return ("fn", self.fn, self.nidx, self.r)

    def data(self, tree: Model, static: dict, leaves: dict, pre: str) -> dict:
        return {"idx": static[pre + "idx"]}

    def phi(self, qc: Array, d: dict) -> Array:
        return jnp.asarray(self.fn(qc[d["idx"]]), qc.dtype).reshape(-1)


@dataclass
class _Item:
    """A resolved constraint (build time only)."""

    name: str
    where: str
    J: list  # bodies whose joints it involves (clustering)
    type: str  # 'lin' | 'point' | 'fn'
    coords: list  # bodies (one-DoF joints) in constraint-column / fn-input order
    K: np.ndarray | None = None
    k0: np.ndarray | None = None
    fn: Callable[..., Any] | None = None
    path_p: list = field(default_factory=list)  # bodies, NCA-exclusive -> link, top-down
    path_s: list = field(default_factory=list)
    off_p: np.ndarray | None = None
    off_s: np.ndarray | None = None
    flags: dict = field(default_factory=dict)  # body -> bool (independent?)
    scale: dict = field(default_factory=dict)  # body -> velocity scale


# ----------------------------------------------------------------------------- static data


@dataclass(frozen=True, eq=False)
class Group(TreeGroup):
    """``nc`` clusters of one signature at one level of the cluster tree.

    A :class:`jaxdyn.model.model.Group` (the tree's definition: bodies ``[b0, b1)``, here in
    cluster body order, ``q[q0:q1]``, ``v[v0:v1]``; ``n = b1 - b0`` bodies) whose ``kind`` is
    the group's full static signature (its type, sizes and every static array below): groups
    with equal kinds are computed by the same code, which is what
    :func:`jaxdyn.model.tree.segments` relies on. ``type`` is ``"tree"``, ``"linear"`` or
    ``"implicit"``.

    Cluster ``c`` of the group owns ``q[q0 + c nqc : q0 + (c+1) nqc]`` and
    ``v[v0 + c ny : ...]``, and the ``nbc`` bodies ``b0 + c nbc ..``. Arrays are numpy,
    ``(nc, ...)``. Its real-valued parameters are the leaves ``model.params[index]``
    (``leaf_keys``); ``static`` holds the structural ones (index arrays, 0/1 patterns).
    """

    kind: tuple  # the static signature (a tree Group's kind is a joint kind)
    type: str
    key: tuple
    index: int
    level: int
    nc: int
    nbc: int
    nvs: int
    nqs: int
    nqc: int
    ny: int
    m: int
    cl0: int
    lb0: int
    body: np.ndarray  # (nc, nbc) spanning-tree body indices
    dof: np.ndarray  # (nc, nvs) spanning v indices
    qidx: np.ndarray  # (nc, nqs) spanning q indices
    A: np.ndarray  # (nc, nbc, nvs) dof on in-cluster ancestor-or-self of body
    B: np.ndarray  # (nc, nbc, nvs) dof belongs to body
    Ab: np.ndarray  # (nc, nbc, nbc) in-cluster ancestor-or-self
    out: np.ndarray  # (nc, nbc) previous-level body index of the output body, -1 = world
    static: dict
    leaf_keys: tuple
    items: tuple = ()  # ((template, prefix), ...) for implicit groups

    @property
    def T(self) -> int:
        """Number of (cluster, body, body) inertia blocks."""
        return self.nc * self.nbc * self.nbc


class ClusterTopology:
    """Static description of a cluster model (numpy / Python only, immutable).

    Equality and hashing go through a digest of the contents (as
    :class:`jaxdyn.model.model.Topology`), so that two models of the same structure (e.g. the
    same file loaded twice) share compiled code. It holds no real-valued model parameter (those
    are leaves of :class:`ClusterModel`) except build-time derived data: the constraint
    specifications the model was built from (``constraints``), the velocity scales of implicit
    clusters' independent coordinates (part of the coordinates' definition, as in
    ``G_left_inverse``) and the loop-residual scale of each implicit cluster (``phi_scale``,
    for the value check of ``q``).
    """

    # the fields (set once, by keyword, in __init__)
    name: str
    G_left_inverse: np.ndarray  # (nv, nv_tree): E with E G = 1 (picks independent coordinates)
    levels: tuple[Level, ...]
    groups: tuple[Group, ...]
    n_clusters: int
    nq: int
    nv: int
    q_names: tuple[str, ...]
    v_names: tuple[str, ...]
    cluster_names: tuple[str, ...]
    cluster_group: tuple[int, ...]
    cluster_bodies: tuple[tuple[int, ...], ...]
    cluster_parent: np.ndarray
    cluster_level: np.ndarray
    body_cluster: np.ndarray
    body_level_index: np.ndarray
    level_b0: np.ndarray
    body_order: np.ndarray
    span_q_src: np.ndarray
    span_v_src: np.ndarray
    constraints: tuple
    has_loops: bool
    # the rotor-folding plan (jaxdyn.clusters.fold_rotors): a jaxdyn.clusters.rotors.RotorFold
    # or None (not imported here: rotors imports this module)
    fold: Any
    _digest: str
    _fields: tuple[str, ...]

    def __init__(self, **fields: Any) -> None:
        for k, v in fields.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_digest", digest(*(fields[k] for k in sorted(fields))))
        object.__setattr__(self, "_fields", tuple(sorted(fields)))

    def __setattr__(self, k, v):  # pragma: no cover - immutability guard
        raise AttributeError("ClusterTopology is immutable")

    def replace(self, **kw: Any) -> ClusterTopology:
        return ClusterTopology(**{**{k: getattr(self, k) for k in self._fields}, **kw})

    def __hash__(self):
        return hash(self._digest)

    def __eq__(self, other):
        return isinstance(other, ClusterTopology) and other._digest == self._digest

    def __repr__(self):
        return (
            f"ClusterTopology({self.name!r}, clusters={self.n_clusters}, nq={self.nq}, "
            f"nv={self.nv}, depth={len(self.levels)})"
        )


class ClusterModel(eqx.Module):
    """A rigid-body system with local kinematic loops, as a tree of clusters.

    * ``tree``: the spanning-tree :class:`jaxdyn.Model` (masses, inertias, placements);
    * ``params``: one dict per group of clusters (``topo.groups``) of array leaves, the
      constraints' real-valued parameters: ``G (nc, nvs, ny)`` and ``off (nc, nvs)`` of
      explicit clusters (``q = G y + off``: gear and belt ratios), ``qref`` (a valid
      configuration found at build time), the point offsets (``it<k>_off_p``, ``it<k>_off_s``)
      and linear coefficients (``it<k>_K``, ``it<k>_k0``) of implicit ones, and ``armature
      (nc, ny, ny)`` where set (:func:`with_armature`);
    * ``topo``: the static :class:`ClusterTopology`, with the rotor-folding plan
      (:func:`jaxdyn.clusters.fold_rotors`) when the model has one.

    Every leaf is differentiable and batchable (``jax.grad`` / ``jax.vmap`` over a model, as
    for :class:`jaxdyn.Model`). Build with :func:`jaxdyn.clusters.build` or
    :func:`jaxdyn.clusters.load_urdf_plus`.
    """

    tree: Model
    params: tuple
    topo: ClusterTopology = eqx.field(static=True)

    @property
    def name(self) -> str:
        return self.topo.name

    @property
    def nq(self) -> int:
        """Size of the cluster position vector (see :attr:`q_names`)."""
        return self.topo.nq

    @property
    def nv(self) -> int:
        """Number of independent velocities (degrees of freedom)."""
        return self.topo.nv

    @property
    def nb(self) -> int:
        return self.tree.nb

    @property
    def n_clusters(self) -> int:
        return self.topo.n_clusters

    @property
    def q_names(self) -> tuple:
        """Names of the entries of the cluster position ``q``: the independent coordinates of
        explicit clusters, every spanning coordinate of implicit (loop) clusters."""
        return self.topo.q_names

    @property
    def joint_names(self) -> tuple:
        """The independent coordinates, named after their spanning-tree joints, in ``v`` /
        ``a`` / ``tau`` order (same as :attr:`v_names`). Map a state of these coordinates to
        the spanning tree (``model.tree``, e.g. to compare with Pinocchio) with
        :func:`~jaxdyn.clusters.spanning_state`."""
        return self.topo.v_names

    @property
    def v_names(self) -> tuple:
        return self.topo.v_names

    @property
    def cluster_names(self) -> tuple:
        return self.topo.cluster_names

    @property
    def gravity(self) -> jax.Array:
        return self.tree.gravity

    @property
    def rotors_folded(self) -> bool:
        """Whether the algorithms carry axisymmetric rotors by their parents
        (:func:`jaxdyn.clusters.fold_rotors`)."""
        return self.topo.fold is not None

    def group_params(self, g: Group | int) -> dict:
        """The parameter leaves of group ``g`` (a :class:`Group` or its index)."""
        return self.params[g if isinstance(g, int) else g.index]

    def astype(self, dtype: DTypeLike) -> ClusterModel:
        """The same model with every parameter leaf cast to ``dtype``."""
        params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype), self.params)
        return ClusterModel(self.tree.astype(dtype), params, self.topo)

    def __repr__(self):
        return (
            f"ClusterModel({self.name!r}, nq={self.nq}, nv={self.nv}, nb={self.nb}, "
            f"clusters={self.n_clusters}, depth={len(self.topo.levels)})"
        )

    def describe(self) -> str:
        """One line per cluster: type, bodies, parent cluster, sizes."""
        t = self.topo
        lines = [repr(self)]
        for c in range(t.n_clusters):
            g = t.groups[t.cluster_group[c]]
            bodies = [self.tree.body_names[b] for b in t.cluster_bodies[c]]
            par = t.cluster_parent[c]
            lines.append(
                f"  [{c}] {t.cluster_names[c]} ({g.type}, level {g.level}, parent "
                f"{'world' if par < 0 else par}): bodies {bodies}, n_span={g.nvs}, n_y={g.ny}"
            )
        if t.fold is not None:
            lines.append(
                f"  rotors carried by their parents: "
                f"{[self.tree.body_names[b] for b in t.fold.rotor_body]}"
            )
        return "\n".join(lines)


def require_cluster_model(fn: str, model: ClusterModel, alternative: str | None = None) -> None:
    """``TypeError`` unless ``model`` is a :class:`ClusterModel`; a plain
    :class:`jaxdyn.Model` gets the name of the tree function to use (``alternative``)."""
    if isinstance(model, ClusterModel):
        return
    if isinstance(model, Model):
        use = f"use {alternative} for a jaxdyn.Model" if alternative else "it has no loops"
        raise TypeError(
            f"jaxdyn.clusters.{fn}: model is a jaxdyn.Model (a tree without loop "
            f"constraints); {fn} takes a jaxdyn.clusters.ClusterModel: {use}, or load the "
            "model with jaxdyn.clusters.load_urdf_plus to get its cluster form"
        )
    raise TypeError(
        f"jaxdyn.clusters.{fn}: model must be a jaxdyn.clusters.ClusterModel, got "
        f"{type(model).__name__}"
    )


# ----------------------------------------------------------------------------- tree helpers


class _Ctx:
    def __init__(self, tree: Model, robot: URDFRobot | None):
        t = tree.topo
        self.tree, self.t, self.robot = tree, t, robot
        self.parent = np.asarray(t.parent)
        self.kind = np.asarray(t.kind)
        self.joint_body = {n: i for i, n in enumerate(t.joint_names)}
        self.frame = {n: i for i, n in enumerate(t.frame_names)}
        self.frame_parent = np.asarray(t.frame_parent)
        self.frame_R = np.asarray(tree.frame_R)
        self.frame_p = np.asarray(tree.frame_p)
        self.link_names = set(tree.body_names)
        if robot is not None:
            self.link_names |= {l.name for l in robot.links}
            self.welded_joints = {j.name for j in robot.joints if j.type == "fixed"}
        else:
            self.welded_joints = set()

    def ancestors(self, b):
        """``[b, parent(b), ..., -1]``."""
        out = [b]
        while b >= 0:
            b = int(self.parent[b])
            out.append(b)
        return out

    def nca(self, bodies):
        """Nearest common ancestor-or-self of ``bodies`` (``-1`` is the world)."""
        lists = [self.ancestors(b) for b in bodies]
        common = set(lists[0]).intersection(*map(set, lists[1:]))
        for b in lists[0]:
            if b in common:
                return b
        return -1  # pragma: no cover

    def path_below(self, b, a):
        """Bodies from ``b`` up to (excluding) its ancestor ``a``, top-down."""
        out = []
        while b != a:
            if b < 0:
                raise AssertionError("a is not an ancestor of b")  # pragma: no cover
            out.append(b)
            b = int(self.parent[b])
        return out[::-1]

    def joint(self, name, where):
        if name in self.joint_body:
            return self.joint_body[name]
        if name in self.welded_joints:
            raise ValueError(
                f"{where}: joint {name!r} is fixed (merged into its parent body); "
                "only moving joints can be constrained"
            )
        raise ValueError(f"{where}: no moving joint named {name!r}")

    def link(self, name, where):
        """``(body, R, p)``: the body carrying link ``name`` and the link's placement in it."""
        f = self.frame.get(name)
        if f is None or (name not in self.link_names):
            raise ValueError(f"{where}: no link named {name!r}")
        return int(self.frame_parent[f]), self.frame_R[f], self.frame_p[f]

    def one_dof(self, b, where):
        if b < 0 or int(self.kind[b]) != joints.ONE_DOF:
            jn = "the world" if b < 0 else repr(self.t.joint_names[b])
            raise ValueError(
                f"{where}: joint {jn} is not a one-DoF (revolute/prismatic) joint; "
                "only one-DoF joints can be coupled"
            )

    def one_dof_joints(self, names, where):
        """Bodies of distinct, moving, one-DoF joints ``names``."""
        bs = [self.joint(j, where) for j in names]
        if len(set(bs)) != len(bs):
            raise ValueError(f"{where}: repeated joint")
        for b in bs:
            self.one_dof(b, where)
        return bs


def _resolve(spec, ctx: _Ctx, flags_urdf):
    """Specification -> _Item (or ('group', bodies))."""
    if isinstance(spec, S.Coupling):
        where = f'URDF+ <coupling name="{spec.name}">'
        bp, _, _ = ctx.link(spec.predecessor, where + " <predecessor>")
        bs, _, _ = ctx.link(spec.successor, where + " <successor>")
        if bp == bs:
            raise ValueError(f"{where}: predecessor and successor are the same body")
        a = ctx.nca([bp, bs])
        pp, ps = ctx.path_below(bp, a), ctx.path_below(bs, a)
        coords = pp + ps
        for b in coords:
            ctx.one_dof(b, where)
        if not pp or not ps:
            raise ValueError(
                f"{where}: one link is an ancestor of the other; a rolling coupling "
                "needs two branches below their common ancestor"
            )
        K = np.concatenate([np.full(len(pp), spec.ratio), -np.ones(len(ps))])[None]
        return _Item(spec.name or "coupling", where, coords, "lin", coords, K=K, k0=np.zeros(1))
    if isinstance(spec, S.Mimic):
        where = f'URDF <joint name="{spec.joint}"> <mimic>'
        bm, bt = ctx.joint(spec.joint, where), ctx.joint(spec.target, where)
        ctx.one_dof(bm, where)
        ctx.one_dof(bt, where)
        K = np.array([[float(spec.multiplier), -1.0]])
        return _Item(
            spec.name or f"{spec.joint}_mimic",
            where,
            [bt, bm],
            "lin",
            [bt, bm],
            K=K,
            k0=np.array([-float(spec.offset)]),
            flags={bm: False},
        )
    if isinstance(spec, S.LinearConstraint):
        where = f"LinearConstraint {spec.name!r}"
        bs = ctx.one_dof_joints(spec.joints, where)
        flags = {}
        if spec.dependent is not None:
            flags = {b: (j not in spec.dependent) for j, b in zip(spec.joints, bs)}
        return _Item(
            spec.name or "linear",
            where,
            bs,
            "lin",
            bs,
            K=np.asarray(spec.K, float),
            k0=np.asarray(spec.k0, float),
            flags=flags,
        )
    if isinstance(spec, S.ImplicitConstraint):
        where = f"ImplicitConstraint {spec.name!r}"
        bs = ctx.one_dof_joints(spec.joints, where)
        flags = {b: (j in spec.independent) for j, b in zip(spec.joints, bs)}
        scale = {ctx.joint_body[j]: s for j, s in spec.scale or ()}  # a tuple once built
        return _Item(
            spec.name or "implicit", where, bs, "fn", bs, fn=spec.phi, flags=flags, scale=scale
        )
    if isinstance(spec, S.PointLoop):
        where = f'URDF+ <loop name="{spec.name}">'
        bp, Rp, tp = ctx.link(spec.predecessor, where + " <predecessor>")
        bs, Rs, ts = ctx.link(spec.successor, where + " <successor>")
        if bp == bs:
            raise ValueError(f"{where}: predecessor and successor are on the same body")
        a = ctx.nca([bp, bs])
        pp, ps = ctx.path_below(bp, a), ctx.path_below(bs, a)
        for b in pp + ps:
            ctx.one_dof(b, where)
        off_p = Rp @ np.asarray(spec.predecessor_xyz) + tp
        off_s = Rs @ np.asarray(spec.successor_xyz) + ts
        return _Item(
            spec.name or "loop",
            where,
            pp + ps,
            "point",
            pp + ps,
            path_p=pp,
            path_s=ps,
            off_p=off_p,
            off_s=off_s,
        )
    if isinstance(spec, S.Cluster):
        where = f"Cluster {spec.name!r}"
        bodies = []
        for l in spec.links:
            b, _, _ = ctx.link(l, where)
            if b < 0:
                raise ValueError(f"{where}: link {l!r} is the fixed root (world)")
            bodies.append(b)
        return ("group", sorted(set(bodies)), where)
    raise ValueError(f"build: unknown constraint specification {spec!r}")


# ----------------------------------------------------------------------------- implicit helpers


@functools.cache
def _phi_jac_fn(item_keys_templates):
    """jit'd ``(phi, K)`` of one cluster's items (build time), cached per structure."""
    templates = item_keys_templates

    def phi(qc, datas):
        return jnp.concatenate([t.phi(qc, d) for t, d in zip(templates, datas)])

    return jax.jit(lambda qc, datas: (phi(qc, datas), jax.jacfwd(phi)(qc, datas)))


class _TemplateTuple(tuple):
    """Tuple of templates hashed by their keys (for the cache above)."""

    def __hash__(self):
        return hash(tuple(t.key for t in self))

    def __eq__(self, other):
        return isinstance(other, tuple) and tuple(t.key for t in self) == tuple(
            t.key for t in other
        )


#: keys of the item parameters that are structural (index arrays)
_STATIC_ITEM_KEYS = ("idx", "body_p", "dof_p", "idx_p", "body_s", "dof_s", "idx_s")


def _leaf_element(infos, cs):
    """``element(k, i)`` for :func:`jaxdyn.model.build.cast_params` over a group's stacked
    leaves: the file's elements behind cluster ``cs[i]`` and what its leaf ``k`` is (a gear
    ratio beyond float32's range becomes an infinite ``G``, and the dynamics NaN)."""
    what = {
        "G": "velocity map, from the ratios",
        "off": "offset, from the ratios",
        "qref": "reference configuration",
    }

    def element(k, i):
        item = k.split("_", 1)[1] if k.startswith("it") and "_" in k else k
        return f"{infos[cs[i]]['where']} ({what.get(k, 'constraint parameter ' + item)})"

    return element


def _item_template_and_params(it: _Item, local, ctx):
    """Template + per-cluster params (unstacked) of one item inside a cluster."""
    if it.type == "lin":
        assert it.K is not None  # a linear item's
        idx = np.array([local[b] for b in it.coords], np.int64)
        return LinItem(len(idx), it.K.shape[0]), {"idx": idx, "K": it.K, "k0": it.k0}
    if it.type == "fn":
        assert it.fn is not None  # a function item's
        idx = np.array([local[b] for b in it.coords], np.int64)
        return FnItem(it.fn, len(idx), None), {"idx": idx}
    prm = {}
    for side, path, off in (("p", it.path_p, it.off_p), ("s", it.path_s, it.off_s)):
        prm["body_" + side] = np.array(path, np.int64)
        prm["dof_" + side] = np.array([int(ctx.t.v_start[b]) for b in path], np.int64)
        prm["idx_" + side] = np.array([local[b] for b in path], np.int64)
        prm["off_" + side] = np.asarray(off, float)
    return PointItem(len(it.path_p), len(it.path_s), (0, 1, 2)), prm


def _np_data(template, tree, prm):
    """Item data (unstacked, jnp) for build-time evaluation."""
    stacked = {k: np.asarray(v)[None] for k, v in prm.items()}
    d = template.data(tree, stacked, stacked, "")
    return {k: jnp.asarray(v[0]) for k, v in d.items()}


# ----------------------------------------------------------------------------- build


def check_floating_joints(robot: URDFRobot, floating_base: bool) -> None:
    """``ValueError`` if ``floating_base`` is asked for a file whose massless root link carries
    only ``floating`` joints (the URDF+ robots' own free joint): the root link would be a
    massless free body whose motion the file's free joints undo, a singular mass matrix. A root
    with mass, or with any other moving or fixed child, keeps the mass matrix regular."""
    if not floating_base:
        return
    links = {l.name: l for l in robot.links}
    roots = set(links) - {j.child for j in robot.joints}
    for r in roots:
        inertial = links[r].inertial
        if inertial is not None and float(inertial.mass) > 0.0:
            continue
        out = [j for j in robot.joints if j.parent == r]
        if out and all(j.type == "floating" for j in out):
            j = out[0]
            raise ValueError(
                f'URDF <joint name="{j.name}" type="floating">: the file carries its own '
                f"floating joint below its massless root link {r!r}; load it with "
                "floating_base=False (floating_base=True would add a second free joint, "
                "root_joint, above a massless root: a singular mass matrix)"
            )


def build_clusters(
    source: str | os.PathLike | URDFRobot | Model,
    constraints: Sequence[S.ConstraintSpec] = (),
    *,
    floating_base: bool = False,
    gravity: Sequence[float] = (0.0, 0.0, -9.81),
    independent: Mapping[str, bool] | None = None,
    name: str | None = None,
    strict: bool | None = None,
) -> ClusterModel:
    """Compile a spanning tree and constraint specifications into a :class:`ClusterModel`
    (without rotor folding: :func:`jaxdyn.clusters.build` is this followed by
    :func:`jaxdyn.clusters.fold_rotors`). Arguments as :func:`jaxdyn.clusters.build`."""
    robot = None
    if isinstance(source, Model):
        tree = source
    else:
        robot = source if isinstance(source, URDFRobot) else parse_urdf(source, strict=strict)
        check_floating_joints(robot, floating_base)
        tree = build_model(robot, floating_base=floating_base, gravity=gravity, strict=strict)
    ctx = _Ctx(tree, robot)
    t = tree.topo
    nb = t.nb
    flags_urdf = {}
    for jn, val in (independent or {}).items():
        if jn not in ctx.joint_body:
            if jn in ctx.welded_joints:
                continue
            raise ValueError(f"build: independent= given for unknown joint {jn!r}")
        flags_urdf[ctx.joint_body[jn]] = bool(val)

    items, groupings = [], []
    for sp in constraints:
        r = _resolve(sp, ctx, flags_urdf)
        if isinstance(r, tuple):
            groupings.append(r)
        else:
            items.append(r)

    # --- clustering: union-find over bodies
    uf = list(range(nb))

    def find(x):
        while uf[x] != x:
            uf[x] = uf[uf[x]]
            x = uf[x]
        return x

    def union(x, y):
        rx, ry = find(x), find(y)
        if rx != ry:
            uf[max(rx, ry)] = min(rx, ry)

    for it in items:
        a = ctx.nca([int(ctx.parent[b]) for b in it.J])
        for b in it.J:
            for c in ctx.path_below(b, a):
                union(it.J[0], c)
    for _, bodies, _ in groupings:
        for b in bodies[1:]:
            union(bodies[0], b)
    comp = {}
    for b in range(nb):
        comp.setdefault(find(b), []).append(b)
    clusters = sorted(comp.values(), key=lambda bs: bs[0])
    cl_of = np.empty(nb, np.int64)
    for c, bs in enumerate(clusters):
        cl_of[bs] = c

    def cl_label(c):
        return [t.body_names[b] for b in clusters[c]]

    # parent clusters
    cpar = []
    for c, bs in enumerate(clusters):
        outside = {int(ctx.parent[b]) for b in bs if int(ctx.parent[b]) not in bs}
        pcs = sorted({-1 if p < 0 else int(cl_of[p]) for p in outside})
        if len(pcs) != 1:
            culprits = [it.where for it in items if set(it.J) & set(bs)]
            culprits += [w for _, gb, w in groupings if set(gb) & set(bs)]
            desc = ", ".join("world" if p < 0 else str(cl_label(p)) for p in pcs)
            raise ValueError(
                f"{'; '.join(culprits) or 'build'}: the cluster of bodies {cl_label(c)} has "
                f"parents outside it in {len(pcs)} different clusters ({desc}); a loop's outside "
                "parents must all lie in one cluster"
            )
        cpar.append(pcs[0])
    cdepth: list[int | None] = [None] * len(clusters)

    def depth_of(c: int) -> int:
        d = cdepth[c]
        if d is None:
            d = cdepth[c] = 0 if cpar[c] < 0 else depth_of(cpar[c]) + 1
        return d

    for c in range(len(clusters)):
        depth_of(c)
    items_of = [[] for _ in clusters]
    for it in items:
        items_of[int(cl_of[it.J[0]])].append(it)

    # --- per-cluster compilation
    infos = [
        _compile_cluster(c, clusters[c], items_of[c], ctx, flags_urdf) for c in range(len(clusters))
    ]

    # --- order: depth, then signature (first appearance), then first body
    order = sorted(range(len(clusters)), key=lambda c: (cdepth[c], clusters[c][0]))
    key_rank = {}
    for c in order:
        key_rank.setdefault((cdepth[c], infos[c]["key"]), len(key_rank))
    order.sort(key=lambda c: (cdepth[c], key_rank[(cdepth[c], infos[c]["key"])], clusters[c][0]))
    new_of = {c: i for i, c in enumerate(order)}
    return _assemble(tree, ctx, order, new_of, clusters, cpar, cdepth, infos, name, constraints)


def _compile_cluster(c, bodies, its, ctx: _Ctx, flags_urdf):
    """Per-cluster data: type, signature key, params, names."""
    t, tree = ctx.t, ctx.tree
    n = len(bodies)
    local_body = {b: i for i, b in enumerate(bodies)}
    dofs, qidx, dof_body = [], [], []
    for i, b in enumerate(bodies):
        v0, q0 = int(t.v_start[b]), int(t.q_start[b])
        dofs += list(range(v0, v0 + int(t.nv_j[b])))
        qidx += list(range(q0, q0 + int(t.nq_j[b])))
        dof_body += [i] * int(t.nv_j[b])
    nvs, nqs = len(dofs), len(qidx)
    A = np.zeros((n, nvs))
    B = np.zeros((n, nvs))
    Ab = np.zeros((n, n))
    for i, b in enumerate(bodies):
        for a in ctx.ancestors(b):
            if a in local_body:
                Ab[i, local_body[a]] = 1.0
    for d, i in enumerate(dof_body):
        B[i, d] = 1.0
        A[:, d] = Ab[:, i]
    jn = [t.joint_names[b] for b in bodies]
    info: dict[str, Any] = dict(
        bodies=bodies,
        dofs=np.array(dofs),
        qidx=np.array(qidx),
        A=A,
        B=B,
        Ab=Ab,
        nvs=nvs,
        nqs=nqs,
        n=n,
        static={},
        leaves={},
        items=(),
    )
    if not its:
        kinds = tuple(int(ctx.kind[b]) for b in bodies)
        info.update(ind=list(range(nvs)), ind_scale=np.ones(nvs))
        info.update(
            type=TREE,
            key=(TREE, n, nvs, nqs, kinds),
            ny=nvs,
            nqc=nqs,
            m=0,
            name=jn[0] if n == 1 else "+".join(jn),
        )
        qn, vn = [], []
        for b in bodies:
            nq, nv = int(t.nq_j[b]), int(t.nv_j[b])
            qn += [t.joint_names[b]] if nq == 1 else [f"{t.joint_names[b]}[{k}]" for k in range(nq)]
            vn += [t.joint_names[b]] if nv == 1 else [f"{t.joint_names[b]}[{k}]" for k in range(nv)]
        info.update(q_names=qn, v_names=vn)
        return info
    for it in its:
        for b in bodies:
            ctx.one_dof(b, f"{it.where} (cluster of joints {jn})")
    its = sorted(its, key=lambda it: min(local_body[b] for b in it.J))
    cname = "+".join(it.name for it in its)
    where = "; ".join(it.where for it in its)
    info["where"] = where  # the file's elements, for the float32 range check of the leaves
    # flags: URDF attribute, overridden by the specifications
    flags = [flags_urdf.get(b) for b in bodies]
    scale = np.ones(nvs)
    for it in its:
        for b, f in it.flags.items():
            flags[local_body[b]] = f
        for b, s in it.scale.items():
            scale[local_body[b]] = s
    templates, prms = [], []
    for it in its:
        tp, prm = _item_template_and_params(it, local_body, ctx)
        templates.append(tp)
        prms.append(prm)
    if all(it.type == "lin" for it in its):
        K = np.zeros((0, nvs))
        k0 = np.zeros(0)
        for _tp, prm in zip(templates, prms):
            Kt = np.zeros((prm["K"].shape[0], nvs))
            Kt[:, prm["idx"]] = prm["K"]
            K = np.concatenate([K, Kt])
            k0 = np.concatenate([k0, prm["k0"]])
        rank = np.linalg.matrix_rank(K)
        if rank < K.shape[0]:
            raise ValueError(
                f"{where}: the linear constraints of cluster {jn} are redundant "
                f"(rank {rank} < {K.shape[0]} rows)"
            )
        dep, ind = _choose_dependent(K, flags, jn, where)
        Kd, Ki = K[:, dep], K[:, ind]
        Pi = np.eye(nvs)[:, ind]
        Pd = np.eye(nvs)[:, dep]
        Kdinv = np.linalg.inv(Kd)
        G = Pi - Pd @ Kdinv @ Ki
        off = Pd @ Kdinv @ k0
        ny = len(ind)
        info.update(ind=ind, ind_scale=np.ones(len(ind)))
        info.update(
            type=LINEAR,
            key=(LINEAR, n, nvs, ny),
            ny=ny,
            nqc=ny,
            m=len(dep),
            name=cname,
            static={"dep": np.isin(np.arange(nvs), dep) * 1.0, "Gnz": (G != 0) * 1.0},
            leaves={"G": G, "off": off},
            q_names=[jn[i] for i in ind],
            v_names=[jn[i] for i in ind],
        )
        return info
    # implicit: phi = concat(items)
    # 1. rows of point loops that depend on q (at random configurations)
    rng = np.random.default_rng(0)
    qs = [rng.uniform(-np.pi, np.pi, nvs) for _ in range(3)]
    for k, (tp, prm, it) in enumerate(zip(templates, prms, its)):
        if isinstance(tp, PointItem) or isinstance(tp, FnItem):
            f = _phi_jac_fn(_TemplateTuple([tp]))
            d = (_np_data(tp, tree, prm),)
            evals = [f(jnp.asarray(q), d) for q in qs]
            Ks = np.stack([np.asarray(e[1]) for e in evals])  # (3, r, nvs)
            if isinstance(tp, FnItem):
                templates[k] = FnItem(tp.fn, len(prm["idx"]), Ks.shape[1])
                continue
            live = [r for r in range(3) if np.max(np.abs(Ks[:, r])) > 1e-10]
            dead = [r for r in range(3) if r not in live]
            for r in dead:
                vals = [float(np.asarray(e[0])[r]) for e in evals]
                if max(abs(v) for v in vals) > 1e-9:
                    raise ValueError(
                        f"{it.where}: the points never meet (coordinate {'xyz'[r]} "
                        f"of the gap is constant, {vals[0]:.6g})"
                    )
            rows = []
            for r in live:  # keep rows that add rank at every sample
                cand = rows + [r]
                if all(np.linalg.matrix_rank(Kq[cand], tol=1e-9) == len(cand) for Kq in Ks):
                    rows = cand
            if not rows:
                raise ValueError(f"{it.where}: the loop does not constrain any joint")
            templates[k] = PointItem(tp.Lp, tp.Ls, tuple(rows))
    tt = _TemplateTuple(templates)
    f = _phi_jac_fn(tt)
    datas = tuple(_np_data(tp, tree, prm) for tp, prm in zip(templates, prms))
    m = sum(tp.r for tp in templates)
    if m >= nvs:
        raise ValueError(
            f"{where}: the constraints of cluster {jn} leave no degree of freedom "
            f"({m} equations, {nvs} coordinates)"
        )
    # 2. a valid configuration (min-norm Newton from 0, then perturbed starts)
    qref = None
    for attempt in range(12):
        q = (
            np.zeros(nvs)
            if attempt == 0
            else rng.uniform(-0.5, 0.5, nvs) * min(1.0, 0.25 * attempt)
        )
        for _ in range(200):
            ph, K = (np.asarray(x) for x in f(jnp.asarray(q), datas))
            if np.max(np.abs(ph)) < 1e-14:
                break
            q = q - np.linalg.lstsq(K, ph, rcond=None)[0]
        ph, K = (np.asarray(x) for x in f(jnp.asarray(q), datas))
        if (
            np.all(np.isfinite(ph))
            and np.max(np.abs(ph)) < 1e-12
            and np.linalg.matrix_rank(K, tol=1e-8) == m
        ):
            qref = q
            break
    if qref is None:
        raise ValueError(
            f"{where}: could not find a configuration of cluster {jn} satisfying the "
            "constraints (Newton from 0 and random starts failed), or its constraint "
            "Jacobian is rank deficient there"
        )
    dep, ind = _choose_dependent(K, flags, jn, where)
    ny = len(ind)
    Pi = np.eye(nvs)[:, ind]
    Pd = np.eye(nvs)[:, dep]
    # the size of the loop residual for a unit change of the coordinates (value check of q)
    phi_scale = max(float(np.max(np.sum(np.abs(K), 1))), 1e-300)
    static = {"Pi": Pi, "Pd": Pd, "scale": scale[ind], "phi_scale": np.array(phi_scale)}
    leaves = {"qref": qref}
    for k, prm in enumerate(prms):
        for key, v in prm.items():
            (static if key in _STATIC_ITEM_KEYS else leaves)[f"it{k}_{key}"] = v
    info.update(ind=ind, ind_scale=scale[ind])
    key = (IMPLICIT, n, nvs, ny, tuple(tp.key for tp in templates))
    info.update(
        type=IMPLICIT,
        key=key,
        ny=ny,
        nqc=nvs,
        m=m,
        name=cname,
        static=static,
        leaves=leaves,
        items=tuple((tp, f"it{k}_") for k, tp in enumerate(templates)),
        q_names=list(jn),
        v_names=[jn[i] for i in ind],
    )
    return info


def _choose_dependent(K, flags, jn, where):
    """Dependent coordinates: the ``independent="false"`` ones, completed automatically."""
    m, nvs = K.shape
    dep = [i for i in range(nvs) if flags[i] is False]
    if len(dep) > m:
        raise ValueError(
            f"{where}: {len(dep)} joints of cluster {jn} are flagged dependent "
            f"({[jn[i] for i in dep]}), but the constraints remove only {m} "
            "degree(s) of freedom"
        )
    for i in reversed(range(nvs)):
        if len(dep) == m:
            break
        if flags[i] is None and np.linalg.matrix_rank(K[:, dep + [i]], tol=1e-9) == len(dep) + 1:
            dep.append(i)
    dep.sort()
    if len(dep) < m or np.linalg.cond(K[:, dep]) > 1e10:
        raise ValueError(
            f"{where}: cannot eliminate {m} coordinate(s) of cluster {jn}: the "
            f"constraint Jacobian is singular in the dependent coordinates "
            f"{[jn[i] for i in dep]} (check the independent= flags)"
        )
    ind = [i for i in range(nvs) if i not in dep]
    return dep, ind


def _group_signature(info0, nc, arrays):
    """The ``kind`` of a :class:`Group`: its type and a digest of everything static that the
    algorithms read (sizes, patterns, index arrays)."""
    return (info0["type"], digest(info0["key"], nc, arrays))


def _assemble(tree, ctx, order, new_of, clusters, cpar, cdepth, infos, name, constraints):
    t = tree.topo
    nb = t.nb
    ncl = len(order)
    dt = tree.Xtree_p.dtype
    # groups, in cluster order
    groups_raw = []  # (level, key, [old cluster ids])
    for c in order:
        k = (cdepth[c], infos[c]["key"])
        if groups_raw and groups_raw[-1][0] == k:
            groups_raw[-1][1].append(c)
        else:
            groups_raw.append((k, [c]))
    # body order and level-local indices
    level_bodies = {}
    body_level_index = np.full(nb, -1, np.int64)
    for (lvl, _), cs in groups_raw:
        lb = level_bodies.setdefault(lvl, [])
        for c in cs:
            for b in clusters[c]:
                body_level_index[b] = len(lb)
                lb.append(b)
    nlev = max(level_bodies) + 1 if level_bodies else 0
    level_b0 = np.cumsum([0] + [len(level_bodies[l]) for l in range(nlev)]).astype(np.int64)
    groups, params, q0, v0, cl0 = [], [], 0, 0, 0
    lb0 = {l: 0 for l in range(nlev)}
    q_names, v_names, cluster_names = [], [], []
    cluster_group, cluster_bodies, cluster_parent = [], [], []
    span_q_src = np.full(t.nq, -1, np.int64)
    span_v_src = np.full(t.nv, -1, np.int64)
    flat_q = flat_v = 0  # offsets in the cluster-ordered flat spanning vectors
    E_rows = []  # (row, spanning dof, value) of the left inverse E of G
    for (lvl, key), cs in groups_raw:
        inf0 = infos[cs[0]]
        nc, n = len(cs), inf0["n"]
        outs = np.zeros((nc, n), np.int64)
        for ci, c in enumerate(cs):
            for i, b in enumerate(clusters[c]):
                o = int(ctx.parent[b])
                while o >= 0 and o in clusters[c]:
                    o = int(ctx.parent[o])
                outs[ci, i] = -1 if o < 0 else body_level_index[o]
        static = {k: np.stack([infos[c]["static"][k] for c in cs]) for k in inf0["static"]}
        leaves = {k: np.stack([infos[c]["leaves"][k] for c in cs]) for k in inf0["leaves"]}
        arrays = dict(
            body=np.array([clusters[c] for c in cs], np.int64),
            dof=np.stack([infos[c]["dofs"] for c in cs]).astype(np.int64),
            qidx=np.stack([infos[c]["qidx"] for c in cs]).astype(np.int64),
            A=np.stack([infos[c]["A"] for c in cs]),
            B=np.stack([infos[c]["B"] for c in cs]),
            Ab=np.stack([infos[c]["Ab"] for c in cs]),
            out=outs,
        )
        b0 = int(level_b0[lvl]) + lb0[lvl]
        g = Group(
            kind=_group_signature(inf0, nc, (arrays, static, inf0["items"])),
            b0=b0,
            b1=b0 + nc * n,
            q0=q0,
            q1=q0 + nc * inf0["nqc"],
            v0=v0,
            v1=v0 + nc * inf0["ny"],
            type=inf0["type"],
            key=key,
            index=len(groups),
            level=lvl,
            nc=nc,
            nbc=n,
            nvs=inf0["nvs"],
            nqs=inf0["nqs"],
            nqc=inf0["nqc"],
            ny=inf0["ny"],
            m=inf0["m"],
            cl0=cl0,
            lb0=lb0[lvl],
            static=static,
            leaf_keys=tuple(sorted(leaves)),
            items=inf0["items"],
            **arrays,
        )
        groups.append(g)
        params.append(build_mod.cast_params(leaves, np.dtype(dt), _leaf_element(infos, cs)))
        for ci, c in enumerate(cs):
            inf = infos[c]
            q_names += inf["q_names"]
            v_names += inf["v_names"]
            cluster_names.append(inf["name"])
            cluster_group.append(len(groups) - 1)
            cluster_bodies.append(tuple(clusters[c]))
            cluster_parent.append(-1 if cpar[c] < 0 else new_of[cpar[c]])
            for k, (i, sc) in enumerate(zip(inf["ind"], inf["ind_scale"])):
                E_rows.append((v0 + ci * inf["ny"] + k, int(inf["dofs"][i]), 1.0 / sc))
            span_q_src[inf["qidx"]] = flat_q + np.arange(inf["nqs"])
            span_v_src[inf["dofs"]] = flat_v + np.arange(inf["nvs"])
            flat_q += inf["nqs"]
            flat_v += inf["nvs"]
        q0 += nc * g.nqc
        v0 += nc * g.ny
        cl0 += nc
        lb0[lvl] += nc * n
    assert np.all(span_q_src >= 0) and np.all(span_v_src >= 0)
    levels = []
    for l in range(nlev):
        gs = tuple(g for g in groups if g.level == l)
        parent_local = np.concatenate([g.out.reshape(-1) for g in gs])
        levels.append(Level(int(level_b0[l]), int(level_b0[l + 1]), parent_local, gs))
    cluster_level = [groups[cluster_group[c]].level for c in range(ncl)]
    body_order = (
        np.concatenate([np.asarray(level_bodies[l], np.int64) for l in range(nlev)])
        if nlev
        else np.zeros(0, np.int64)
    )
    body_cluster = np.full(nb, -1, np.int64)
    for c, bs in enumerate(cluster_bodies):
        body_cluster[list(bs)] = c
    nv_c = sum(g.nc * g.ny for g in groups)
    E = np.zeros((nv_c, t.nv))
    for r, c, val in E_rows:
        E[r, c] = val
    topo = ClusterTopology(
        name=name or t.name,
        G_left_inverse=E,
        levels=tuple(levels),
        groups=tuple(groups),
        n_clusters=ncl,
        nq=sum(g.nc * g.nqc for g in groups),
        nv=nv_c,
        q_names=tuple(q_names),
        v_names=tuple(v_names),
        cluster_names=tuple(cluster_names),
        cluster_group=tuple(cluster_group),
        cluster_bodies=tuple(cluster_bodies),
        cluster_parent=np.array(cluster_parent, np.int64),
        cluster_level=np.array(cluster_level, np.int64),
        body_cluster=body_cluster,
        body_level_index=body_level_index,
        level_b0=level_b0,
        body_order=body_order,
        span_q_src=span_q_src,
        span_v_src=span_v_src,
        constraints=tuple(constraints),
        has_loops=any(g.type != TREE for g in groups),
        fold=None,
    )
    return ClusterModel(tree, tuple(params), topo)


def with_armature(model: ClusterModel, armature: Sequence[ArrayLike | None]) -> ClusterModel:
    """The same model with a constant joint-space inertia ``R_k`` added per cluster
    (``armature[c]``: ``(ny_c, ny_c)``, or ``None``): ``tau += R ydd`` in C-RNEA, ``D_k += R_k``
    in C-ABA / C-EFPA. This is the reflected-inertia ("approximate") model of the paper's §IX-B
    when ``model`` is the link-only tree. The armature becomes the leaf
    ``model.params[group]["armature"] (nc, ny, ny)`` of every group with one (zeros for its
    clusters given ``None``); entries may be traced (differentiable)."""
    require_cluster_model("with_armature", model)
    t = model.topo
    params = []
    dt = model.tree.Xtree_p.dtype
    for g, prm in zip(t.groups, model.params):
        arm = [armature[g.cl0 + c] for c in range(g.nc)]
        if all(a is None for a in arm):
            params.append(prm)
            continue
        R = spatial.stack(
            [
                jnp.zeros((g.ny, g.ny), dt) if a is None else jnp.asarray(a, dt).reshape(g.ny, g.ny)
                for a in arm
            ]
        )
        params.append(dict(prm, armature=R))
    return ClusterModel(model.tree, tuple(params), t)


def drop_bodies(tree: Model, drop: Iterable[int], name: str | None = None) -> Model:
    """The spanning tree without the (leaf) bodies ``drop`` and the frames attached to them;
    the kept parameters are the leaves of ``tree`` (gathered, so traced leaves stay traced)."""
    t = tree.topo
    drop = {int(b) for b in drop}
    keep = [b for b in range(t.nb) if b not in drop]
    new = {b: i for i, b in enumerate(keep)}
    parent = np.array([-1 if t.parent[b] < 0 else new[int(t.parent[b])] for b in keep], np.int64)
    kind = np.asarray(t.kind)[keep]
    dofs = (
        np.concatenate([np.arange(t.v_start[b], t.v_start[b] + t.nv_j[b]) for b in keep])
        if keep
        else np.zeros(0, np.int64)
    ).astype(np.int64)
    fkeep = np.array(
        [f for f in range(len(t.frame_names)) if int(t.frame_parent[f]) not in drop], np.int64
    )
    fparent = [-1 if t.frame_parent[f] < 0 else new[int(t.frame_parent[f])] for f in fkeep]
    topo = make_topology(
        name=name or t.name + "_links",
        parent=parent,
        kind=kind,
        joint_names=[t.joint_names[b] for b in keep],
        body_names=[t.body_names[b] for b in keep],
        frame_names=[t.frame_names[f] for f in fkeep],
        frame_parent=fparent,
        floating_base=t.floating_base,
        root_name=t.root_name,
    )
    return reindex_tree(tree, topo, np.array(keep, np.int64), dofs, fkeep)


#: the per-body, per-coordinate and per-frame leaves of :class:`jaxdyn.Model`
_BODY_LEAVES = ("Xtree_R", "Xtree_p", "mass", "com", "inertia")
_DOF_LEAVES = ("dof_axis", "armature")
_FRAME_LEAVES = ("frame_R", "frame_p")


def _gather(x, idx):
    """``x[idx]`` for a static index array; concrete leaves (build time) are gathered in numpy,
    which compiles nothing."""
    if isinstance(x, jax.core.Tracer):
        return x[idx]
    return jnp.asarray(np.asarray(x)[idx], x.dtype)


def reindex_tree(
    tree: Model,
    topo: Topology,
    bodies: np.ndarray | Sequence[int],
    dofs: np.ndarray | Sequence[int],
    frames: np.ndarray | Sequence[int],
    **replace: Any,
) -> Model:
    """A :class:`jaxdyn.Model` on ``topo`` whose per-body / per-coordinate / per-frame leaves
    are those of ``tree`` at ``bodies`` / ``dofs`` / ``frames`` (``replace`` overrides leaves);
    other fields are copied."""
    kw = {}
    for f in dataclasses.fields(tree):
        x = getattr(tree, f.name)
        if f.name in replace:
            x = replace[f.name]
        elif f.name == "topo":
            x = topo
        elif x is None:
            pass
        elif f.name in _BODY_LEAVES:
            x = _gather(x, bodies)
        elif f.name in _DOF_LEAVES:
            x = _gather(x, dofs)
        elif f.name in _FRAME_LEAVES:
            x = _gather(x, frames)
        kw[f.name] = x
    return type(tree)(**kw)

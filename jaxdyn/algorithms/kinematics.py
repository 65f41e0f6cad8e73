"""Forward kinematics and the world-frame quantities the dynamics algorithms share.

jaxdyn's dynamics run in world (ground) coordinates, as Pinocchio's ``Convention::WORLD``
algorithms and IDSVA do (Featherstone 2008 §5.3 notes the equivalence): once every body's
placement ``oMi`` is known, motion subspaces ``oS``, inertias ``oI``, velocities and forces are
expressed at the world origin, so the backward passes are plain sums over subtrees and need no
transforms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, cast

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import batching, joints, shell, spatial
from .._precision import full_precision
from ..backend import fusion
from ..model import tree

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..model.model import Model, Topology


class Placements(NamedTuple):
    """World placements: ``R[i]`` and ``p[i]`` place body (or frame) ``i`` in the world."""

    R: jax.Array
    p: jax.Array


class Kinematics(NamedTuple):
    """Result of :func:`forward_kinematics`: bodies ``(nb, ...)`` and frames ``(nf, ...)``."""

    body: Placements
    frame: Placements


def _kind_runs_q(model: Model, q: Any) -> Iterator[tuple[int, int, int, int, int, Array]]:
    """``(kind, b0, b1, v0, v1, qs)`` for each run of :func:`~jaxdyn.model.tree.kind_runs`, with
    the run's configuration ``qs (b1 - b0, nq_kind)`` (``q (nq,)``: a jax or numpy array)."""
    t = model.topo
    for kind, b0, b1, v0, v1 in tree.kind_runs(t):
        nqk = joints.NQ[kind]
        q0 = int(t.q_start[b0])
        yield kind, b0, b1, v0, v1, q[q0 : q0 + (b1 - b0) * nqk].reshape(b1 - b0, nqk)


def joint_placements(model: Model, q: ArrayLike) -> tuple[Array, Array]:
    """Per-body ``XJ`` as ``(R (nb,3,3), p (nb,3))`` (joint transforms of every kind)."""
    parts = []
    for kind, _, _, v0, v1, qs in _kind_runs_q(model, q):
        axis = model.dof_axis[v0:v1] if kind == joints.ONE_DOF else None
        parts.append(joints.joint_transform(kind, qs, axis))
    if len(parts) == 1:
        return parts[0]
    return (jnp.concatenate([p[0] for p in parts], 0), jnp.concatenate([p[1] for p in parts], 0))


def _local(kind, XR, Xp, axis, qs):
    """``liMi`` of bodies of one joint kind from their ``Xtree`` (``XR (n, 3, 3)``,
    ``Xp (n, 3)``), one-DoF screws ``axis (n, 6)`` (unused otherwise) and configurations
    ``qs (n, nq_kind)``, as :func:`local_placements` describes."""
    if kind == joints.ONE_DOF:
        XRc, axc = _concrete(XR), _concrete(axis)
        if XRc is not None and axc is not None:
            # the model's products computed here, in numpy (XLA did not fold them, and at
            # batch 1 their kernel was one more for the runtime to run beside the others;
            # jax.ensure_compile_time_eval made first calls slower): a row m of Xtree_R
            # times skew(k) is m x k
            k = axc[:, None, :3]
            XK = np.cross(XRc, k)
            XK, XK2 = jnp.asarray(XK, XR.dtype), jnp.asarray(np.cross(XK, k), XR.dtype)
            lin = jnp.asarray((XRc @ axc[:, 3:, None])[..., 0], XR.dtype)
        else:
            K = spatial.skew(axis[:, :3])
            XK = spatial.mm(XR, K)
            XK2 = spatial.mm(XK, K)
            lin = spatial.mv(XR, axis[:, 3:])
        ang = qs[:, 0]
        s, c = spatial.sincos(ang)
        c1 = 1 - c
        R = XR + s[:, None, None] * XK + c1[:, None, None] * XK2
        return R, Xp + ang[:, None] * lin
    RJ, pJ = joints.joint_transform(kind, qs, None)
    return spatial.mm(XR, RJ), spatial.mv(XR, pJ) + Xp


def local_placements(model: Model, q: ArrayLike) -> tuple[Array, Array]:
    """Placements ``liMi = Xtree_i XJ_i`` of every body in its parent, ``(R (nb,3,3), p (nb,3))``.

    For one-DoF joints, Rodrigues' formula ``XJ = I + sin(q) K + (1 - cos(q)) K^2`` (``K`` the
    skew matrix of the joint's rotation axis, zero for prismatic joints) makes ``liMi`` affine in
    ``sin q`` and ``1 - cos q``: ``R = Xtree_R + sin(q) Xtree_R K + (1 - cos q) Xtree_R K^2`` and
    ``p = Xtree_p + q Xtree_R l`` (``l`` the translation axis). The two products of
    ``Xtree_R`` depend on the model alone (computed in numpy when the model is known at trace
    time: XLA did not fold them, and ran them as a kernel of their own on every call), so each
    joint costs 18 multiply-adds instead of a rotation and a 3x3 product (rnea, crba, aba,
    minv faster under ``vmap``: ``docs/design-measurements.md``).
    """
    Rs, ps = [], []
    for kind, b0, b1, v0, v1, qs in _kind_runs_q(model, q):
        axis = take_rows(model.dof_axis, range(v0, v1)) if kind == joints.ONE_DOF else None
        XR, Xp = (take_rows(x, range(b0, b1)) for x in (model.Xtree_R, model.Xtree_p))
        R, p = _local(kind, XR, Xp, axis, qs)
        Rs.append(R)
        ps.append(p)
    if len(Rs) == 1:
        return Rs[0], ps[0]
    return jnp.concatenate(Rs, 0), jnp.concatenate(ps, 0)


def body_placements(model: Model, q: ArrayLike) -> Placements:
    """World placements ``oMi`` of the bodies by one outward level pass (Featherstone Alg. 4.1)."""
    if model.nb == 0:  # zero-DoF model: no moving body
        dt = model.Xtree_R.dtype
        return Placements(jnp.zeros((0, 3, 3), dt), jnp.zeros((0, 3), dt))
    R, p = local_placements(model, q)
    # each body's [R | p] as one (3, 4) array, so that a level's placements are one array
    # computed by one kernel (R and p apart were two kernels per level under jax.vmap):
    # oMi = oMp liMi is [Rp Rl | Rp pl + pp], the products unchanged
    H = jnp.concatenate([R, p[..., None]], -1)

    def step(lvl, _, prev, inp):
        (Hl,) = inp
        if prev is not None:
            Hp = tree.gather_parent(prev, lvl, None)
            Hl = spatial.mm(Hp[..., :3], Hl)
            Hl = jnp.concatenate([Hl[..., :3], Hl[..., 3:] + Hp[..., 3:]], -1)
        # each level stored (spatial.store), else XLA recomputes the earlier levels' products
        # inside the later ones (slower on solo12, talos_full unchanged). Not by
        # materialize's copy, which was slower on talos_full
        (Hl,) = fusion.store(Hl, copy=False)
        return Hl, Hl

    H = tree.forward_pass(model.topo, step, (("body", H),))[1].flat()
    return Placements(H[..., :3], H[..., 3])


def body_placements_numpy(model: Model, q: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """World placements ``R (nb, 3, 3)``, ``p (nb, 3)`` of the bodies at a concrete ``q`` in
    numpy float64: :func:`body_placements`' outward pass (Featherstone Alg. 4.1) with the joint
    transforms of :func:`jaxdyn.joints.joint_transform` (Rodrigues' formula for one-DoF joints,
    the normalised quaternion's rotation for spherical and free joints), without compiling a
    program (scene building, an example's targets before its first compile)."""
    t = model.topo
    q = np.asarray(q, float)
    XR, Xp = np.asarray(model.Xtree_R, float), np.asarray(model.Xtree_p, float)
    axis = np.asarray(model.dof_axis, float)
    R, p = np.zeros((t.nb, 3, 3)), np.zeros((t.nb, 3))
    for b in range(t.nb):
        k, qb = int(t.kind[b]), q[t.q_start[b] : t.q_start[b] + t.nq_j[b]]
        if k == joints.ONE_DOF:
            a = axis[t.v_start[b]]
            w = a[:3]
            K = np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])
            RJ = np.eye(3) + np.sin(qb[0]) * K + (1 - np.cos(qb[0])) * K @ K
            pJ = a[3:] * qb[0]
        elif k == joints.SPHERICAL:
            RJ, pJ = _quaternion_matrix(qb), np.zeros(3)
        else:
            RJ, pJ = _quaternion_matrix(qb[3:]), qb[:3]
        Rl, pl = XR[b] @ RJ, XR[b] @ pJ + Xp[b]
        par = int(t.parent[b])
        if par < 0:
            R[b], p[b] = Rl, pl
        else:
            R[b], p[b] = R[par] @ Rl, R[par] @ pl + p[par]
    return R, p


def frame_placements_numpy(
    model: Model, q: ArrayLike, frames: Iterable[str]
) -> tuple[np.ndarray, np.ndarray]:
    """World placements ``R (len(frames), 3, 3)``, ``p (len(frames), 3)`` of the named frames at
    a concrete ``q``, in numpy float64: each frame's placement in its parent body composed with
    the body's from :func:`body_placements_numpy` (:func:`frame_placement` without compiling a
    program: a script's targets before its first compile)."""
    Rb, pb = body_placements_numpy(model, q)
    fR, fp = np.asarray(model.frame_R, float), np.asarray(model.frame_p, float)
    R, p = [], []
    for name in frames:
        f = model.frame_index(name)
        b = int(model.topo.frame_parent[f])
        if b < 0:  # a frame on the world
            R.append(fR[f])
            p.append(fp[f])
        else:
            R.append(Rb[b] @ fR[f])
            p.append(Rb[b] @ fp[f] + pb[b])
    return (
        np.reshape(np.asarray(R, float), (-1, 3, 3)),
        np.reshape(np.asarray(p, float), (-1, 3)),
    )


def frame_positions_numpy(model: Model, q: ArrayLike, frames: Iterable[str]) -> np.ndarray:
    """World positions ``(len(frames), 3)`` of the named frames at a concrete ``q``, in numpy
    float64: the ``p`` of :func:`frame_placements_numpy` (:func:`frame_placement`'s ``p``
    without compiling a program: a problem's targets before the first compile of a process)."""
    return frame_placements_numpy(model, q, frames)[1]


def _quaternion_matrix(quat: np.ndarray) -> np.ndarray:
    """The rotation matrix of the quaternion ``(w, x, y, z)``, normalised first (numpy)."""
    w, x, y, z = quat / np.linalg.norm(quat)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def support_chain(topo: Topology, b: int) -> tuple:
    """The bodies supporting body ``b`` (its ancestors and itself), root first; ``()`` for the
    world (``b < 0``)."""
    chain = []
    while b >= 0:
        chain.append(int(b))
        b = int(topo.parent[b])
    return tuple(reversed(chain))


def _concrete(x):
    """``x`` as a numpy array when its value is known at trace time (a model array closed
    over by ``jit``), else ``None`` (a traced argument, or an array spread over processes)."""
    if x is None or isinstance(x, jax.core.Tracer):
        return None
    if not getattr(x, "is_fully_addressable", True):
        return None
    return np.asarray(x)


def take_rows(x: ArrayLike, idx: Iterable[int] | np.ndarray) -> Any:
    """``x[idx]`` for a static index list, as one gather (a numpy array where ``x`` is known at
    trace time; ``x`` itself or one slice where the indices are consecutive). Assembled from
    slices (runs of consecutive indices) and a concatenate instead, it was as fast under
    ``jax.vmap``, but at batch 1 the slices were separate XLA kernels that the runtime ran
    concurrently, handing them to other threads (several times the latency)."""
    idx = np.asarray(idx, np.int64)
    xc = _concrete(x)
    if xc is not None:
        return xc[idx]  # numpy: stays known at trace time
    x = cast("Array", x)  # a tracer or a jax array spread over processes (_concrete)
    if len(idx) and np.array_equal(idx, np.arange(idx[0], idx[0] + len(idx))):
        return x if len(idx) == len(x) else x[int(idx[0]) : int(idx[0]) + len(idx)]
    return x[idx]


def chain_placements(model: Model, q: ArrayLike, b: int) -> Placements:
    """World placements of the bodies supporting body ``b`` only (:func:`support_chain`, root
    first), ``R (d, 3, 3)``, ``p (d, 3)`` for ``d`` bodies: what a single frame needs, without
    the rest of the tree (:func:`body_placements`).

    The local placements of the chain (:func:`local_placements`' forms) are computed together,
    one vectorised expression per joint kind, then composed one body at a time down the chain
    (Featherstone 2008, Alg. 4.1 restricted to one path), each step stored once
    (:func:`jaxdyn.backend.fusion.materialize`): unstored, XLA recomputed the earlier steps inside
    every consumer of a later one, most of all in derivatives (the trajopt ``FramePlacement``
    residual's ``jax.jacfwd`` and arm7's ``jacobian`` got faster, batched and at batch 1;
    ``docs/design-measurements.md``). Computed body by body, the independent local placements
    were separate XLA kernels that the runtime dispatched to other threads, at several times
    the batch-1 latency (:func:`take_rows`).
    """
    t = model.topo
    chain = support_chain(t, b)
    local = {}
    for kind in sorted({int(t.kind[k]) for k in chain}):
        ks = [k for k in chain if int(t.kind[k]) == kind]
        nq = joints.NQ[kind]
        qs = take_rows(q, [int(t.q_start[k]) + i for k in ks for i in range(nq)]).reshape(-1, nq)
        axis = None
        if kind == joints.ONE_DOF:
            axis = take_rows(model.dof_axis, [int(t.v_start[k]) for k in ks])
        R, p = _local(kind, take_rows(model.Xtree_R, ks), take_rows(model.Xtree_p, ks), axis, qs)
        for i, k in enumerate(ks):
            local[k] = (R[i : i + 1], p[i : i + 1])
    Rs, ps = [], []
    for k in chain:
        R, p = local[k]
        if Rs:  # compose with the parent's world placement
            R, p = fusion.materialize(spatial.mm(Rs[-1], R), spatial.mv(Rs[-1], p) + ps[-1])
        Rs.append(R)
        ps.append(p)
    return Placements(jnp.concatenate(Rs, 0), jnp.concatenate(ps, 0))


def frame_in_chain(model: Model, placements: Placements, f: int) -> Placements:
    """World placement of frame ``f`` from its body's :func:`chain_placements` (the body
    last)."""
    R, p = placements.R[-1], placements.p[-1]
    return Placements(spatial.mm(R, model.frame_R[f]), spatial.mv(R, model.frame_p[f]) + p)


def frame_pose(model: Model, q: ArrayLike, f: int) -> Placements:
    """World placement of frame ``f`` (an index) from the placements of its supporting bodies
    only; no input checks (:func:`frame_placement` is the checked form)."""
    b = int(model.topo.frame_parent[f])
    if b < 0:  # fixed to the world
        return Placements(model.frame_R[f], model.frame_p[f])
    return frame_in_chain(model, chain_placements(model, q, b), f)


#: the former name of :func:`jaxdyn.shell.prepare` (for code written against it)
_prepare = shell.prepare


def frame_placements(model: Model, body: Placements) -> Placements:
    """World placements of every frame from the body placements."""
    t = model.topo
    dt = body.R.dtype
    Rb = jnp.concatenate([body.R, jnp.eye(3, dtype=dt)[None]], 0)  # row nb is the world
    pb = jnp.concatenate([body.p, jnp.zeros((1, 3), dt)], 0)
    fp = t.frame_parent % (t.nb + 1)
    Rp, pp = Rb[fp], pb[fp]
    return Placements(spatial.mm(Rp, model.frame_R), spatial.mv(Rp, model.frame_p) + pp)


@shell.public("forward_kinematics", words=batching.kinematics_words)
@full_precision
def forward_kinematics(model: Model, q: ArrayLike) -> Kinematics:
    """World placements of all bodies and frames.

    Reference: Featherstone 2008, Alg. 4.1 (one outward pass, here vectorised per depth level).

    **Arguments:** ``model``; ``q (nq,)``.

    **Returns:** :class:`Kinematics` with ``body.R (nb,3,3)``, ``body.p (nb,3)``,
    ``frame.R (nf,3,3)``, ``frame.p (nf,3)``; frame order is ``model.frame_names``.
    """
    model, q, _ = shell.prepare(model, "forward_kinematics", q)
    body = body_placements(model, q)
    return Kinematics(body, frame_placements(model, body))


@shell.public("frame_placement", words=batching.kinematics_words)
@full_precision
def frame_placement(model: Model, q: ArrayLike, frame: str | int) -> Placements:
    """World placement ``(R (3,3), p (3,))`` of one frame (name or index), from the placements
    of the frame's supporting bodies only (:func:`chain_placements`)."""
    if isinstance(frame, (bool, np.bool_)) or not isinstance(frame, (str, int, np.integer)):
        raise TypeError(
            f"frame_placement: frame must be a frame name (str) or an index (int) into "
            f"model.frame_names, got {type(frame).__name__} {frame!r}"
        )
    f = model.frame_index(frame)
    model, q, _ = shell.prepare(model, "frame_placement", q)
    return frame_pose(model, q, f)


# ----------------------------------------------------------------------------- world quantities


class WorldState(NamedTuple):
    """World-frame quantities of one configuration (shared by the dynamics algorithms)."""

    R: jax.Array  # (nb,3,3) body rotations
    p: jax.Array  # (nb,3) body positions
    S: jax.Array  # (nv,6) motion subspace columns at the world origin
    mass: jax.Array  # (nb,)
    c: jax.Array  # (nb,3) centres of mass in the world
    Ic: jax.Array  # (nb,3,3) rotational inertias about the centres of mass, world axes

    @property
    def h(self) -> Array:
        """First moments ``m c`` about the world origin."""
        return self.mass[:, None] * self.c

    @property
    def Ibar(self) -> Array:
        """Rotational inertias about the world origin, ``Ic + m (|c|^2 1 - c c^T)``."""
        return com_to_origin(self.mass, self.c, self.Ic)


def com_to_origin(mass: Array, c: Array, Ic: Array) -> Array:
    """Rotational inertia about the origin from the one about the centre of mass ``c``."""
    # written entry by entry: the broadcast ``eye * |c|^2 - c c^T`` form ran slower under vmap
    x, y, z = spatial.unstack(c)
    mx, my, mz = mass * x, mass * y, mass * z
    xx, yy, zz, xy, xz, yz = mx * x, my * y, mz * z, mx * y, mx * z, my * z
    return Ic + spatial.stack(
        [
            spatial.stack([yy + zz, -xy, -xz], -1),
            spatial.stack([-xy, xx + zz, -yz], -1),
            spatial.stack([-xz, -yz, xx + yy], -1),
        ],
        -2,
    )


def world_state(model: Model, q: ArrayLike, centered: bool = False) -> WorldState:
    """Placements, world motion subspaces ``oS = oX_i S_i`` and world inertias ``oI_i``.

    With ``centered=True`` and a floating base, the ground frame is translated to the base's
    origin (axes unchanged). Joint-space results (``tau``, ``qdd``, ``M``) are invariant under
    that translation, while world inertias about a distant origin carry ``m |p|^2`` terms that
    cost precision quadratically with the distance; the dynamics algorithms use it.
    """
    R, p = body_placements(model, q)
    if centered and model.topo.floating_base:
        p = p - p[:1]
    return world_state_from_placements(model, R, p)


def world_state_from_placements(model: Model, R: Array, p: Array) -> WorldState:
    """:func:`world_state` from the body placements ``R (nb, 3, 3)``, ``p (nb, 3)``."""
    t = model.topo
    Rd, pd = tree.bodies_to_dofs(t, R), tree.bodies_to_dofs(t, p)
    S = spatial.act_motion(Rd, pd, model.dof_axis)
    c = spatial.mv(R, model.com) + p
    Ic = spatial.mm(spatial.mm(R, model.inertia), jnp.swapaxes(R, -1, -2))
    # stored (spatial.store), not recomputed by each consumer: ABA and Minv faster (two
    # calls: all three in one made CRBA slower)
    c, Ic = fusion.store(c, Ic, copy=False)
    (S,) = fusion.store(S, copy=False)
    return WorldState(R, p, S, model.mass, c, Ic)


def inertia_apply(m: Array, c: Array, Ic: Array, v: Array) -> Array:
    """Spatial inertia (mass ``m``, centre of mass ``c``, inertia ``Ic`` about it, all in the
    frame of ``v``) times a motion vector ``v (..., 6)``: ``[Ic w + c x l; l]`` with the
    momentum ``l = m (v + w x c)``."""
    w = v[..., :3]
    lin = m[..., None] * (v[..., 3:] + spatial.cross(w, c))
    return jnp.concatenate([spatial.mv(Ic, w) + spatial.cross(c, lin), lin], -1)


def joint_velocities(model: Model, ws: WorldState, qd: Array) -> Array:
    """Per-body joint velocity ``vJ_i = oS_i qd_i`` in world coordinates, ``(nb, 6)``."""
    return tree.dofs_to_bodies(model.topo, ws.S * qd[:, None])


def body_velocities(model: Model, ws: WorldState, qd: Array) -> tuple[Array, Array]:
    """World-frame spatial velocities of all bodies, ``(nb, 6)``, and the joint velocities."""
    vJ = joint_velocities(model, ws, qd)
    root = jnp.zeros(6, vJ.dtype)
    return tree.forward_accumulate(model.topo, vJ, root), vJ


def gravity_acceleration(model: Model, dtype: DTypeLike) -> Array:
    """The fictitious root acceleration ``a_0 = -[0; g]`` that accounts for gravity."""
    return jnp.concatenate([jnp.zeros(3, dtype), -model.gravity.astype(dtype)])

"""One :class:`~jaxdyn.model.model.Model` from several: robots and free bodies side by side.

A scene of several robots and free objects is one tree with several roots (the world's
children), as :func:`jaxdyn.load_mjcf` builds from a file with several ``<freejoint>`` bodies.
:func:`compose` collects the bodies of the parts (each part's bodies, joints, inertias, joint
properties and frames; a fixed-base part placed on the world by its base pose) and compiles
them with the loaders' machinery (:func:`~jaxdyn.model.build.sort_tree`,
:func:`~jaxdyn.model.build.model_params`, :func:`~jaxdyn.model.build.cast_params`,
:func:`~jaxdyn.model.model.make_topology`): the bodies are sorted by depth, so the parts'
coordinates interleave in ``q`` / ``v``; :class:`Composed` holds each part's index arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import jax
import numpy as np

from .. import joints
from .build import LIMITS, cast_params, model_params, sort_tree
from .model import Model, make_topology

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import ArrayLike

__all__ = ["BodyPart", "Composed", "ModelPart", "compose"]

_PROPS_Q = ("q_lower", "q_upper")
_PROPS_V = ("effort_limit", "velocity_limit", "damping", "friction")
_DEFAULT = {
    "q_lower": -np.inf,
    "q_upper": np.inf,
    "effort_limit": np.inf,
    "velocity_limit": np.inf,
    "damping": 0.0,
    "friction": 0.0,
}


class ModelPart(NamedTuple):
    """A model placed in the scene: its names get the prefix ``name + "/"``; a fixed-base
    model's root joints and world frames are moved by the base pose ``(R, p)`` (a floating
    base's pose lives in ``q``, the pose is not applied)."""

    name: str
    model: Model
    R: np.ndarray
    p: np.ndarray


class BodyPart(NamedTuple):
    """A free rigid body (a free joint on the world): ``mass``, ``com (3,)`` and ``inertia
    (3, 3)`` about the centre of mass in body axes; its body, joint and frame are ``name``."""

    name: str
    mass: float
    com: np.ndarray
    inertia: np.ndarray


class Composed(NamedTuple):
    """:func:`compose`'s result: ``model`` and, per part name, the scene's ``body`` indices of
    the part's bodies (``(nb_part,)``, in the part's order), its ``q_index (nq_part,)`` and
    ``v_index (nv_part,)`` (``q_scene[q_index[name]]`` is the part's ``q`` in its own layout)."""

    model: Model
    body: dict
    q_index: dict
    v_index: dict


def _np(x: ArrayLike) -> np.ndarray:
    """A float numpy copy of a model's array (the optional ones are checked for ``None`` by
    the caller)."""
    return np.asarray(x, float)


def compose(
    parts: Sequence[ModelPart | BodyPart],
    name: str = "scene",
    gravity: ArrayLike | None = None,
) -> Composed:
    """One model of the ``parts`` (:class:`ModelPart` and :class:`BodyPart`), side by side on
    the world. ``gravity``: the scene's (default: the first model part's, else ``-9.81 z``);
    model parts whose gravity differs raise ``ValueError`` naming them. Joint properties
    (limits, damping, friction, armature) are kept where a part has them (defaults elsewhere:
    no limit, zero)."""
    names = [p.name for p in parts]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"compose: part names must be unique; repeated: {dup}")
    models = [p.model for p in parts if isinstance(p, ModelPart)]
    if gravity is None:
        gravity = _np(models[0].gravity) if models else np.array([0.0, 0.0, -9.81])
    gravity = np.asarray(gravity, float)
    for p in parts:
        if isinstance(p, ModelPart) and not np.allclose(_np(p.model.gravity), gravity):
            raise ValueError(
                f"compose: part {p.name!r} has gravity {_np(p.model.gravity).tolist()}, the "
                f"scene {gravity.tolist()}: load every robot with the same gravity"
            )
    have = {k for m in models for k in (*_PROPS_Q, *_PROPS_V) if getattr(m, k) is not None}
    armature = any(m.armature is not None for m in models)

    bodies, local = [], []  # body dicts (as the loaders'); (part, local body) of each
    frames = []  # (name, global dfs body or -1, R, p)
    for pi, part in enumerate(parts):
        pre = part.name + "/"
        off = len(bodies)
        if isinstance(part, BodyPart):
            bodies.append(
                dict(
                    parent=-1,
                    kind=joints.FREE,
                    X=(np.eye(3), np.zeros(3)),
                    axis=np.eye(6),
                    mass=float(part.mass),
                    com=np.asarray(part.com, float),
                    inertia=np.asarray(part.inertia, float),
                    joint=part.name,
                    body=part.name,
                    q={k: np.full(7, _DEFAULT[k]) for k in _PROPS_Q},
                    v={k: np.full(6, _DEFAULT[k]) for k in _PROPS_V},
                    armature=np.zeros(6),
                )
            )
            local.append((pi, 0))
            frames.append((part.name, off, np.eye(3), np.zeros(3)))
            continue
        m, t = part.model, part.model.topo
        Rb, pb = np.asarray(part.R, float), np.asarray(part.p, float)
        XR, Xp = _np(m.Xtree_R), _np(m.Xtree_p)
        axis = _np(m.dof_axis)
        for b in range(t.nb):
            q0, nq = int(t.q_start[b]), int(t.nq_j[b])
            v0, nv = int(t.v_start[b]), int(t.nv_j[b])
            par = int(t.parent[b])
            R, p = XR[b], Xp[b]
            if par < 0 and int(t.kind[b]) != joints.FREE:  # on the world: the base pose
                R, p = Rb @ R, Rb @ p + pb
            bodies.append(
                dict(
                    parent=-1 if par < 0 else off + par,
                    kind=int(t.kind[b]),
                    X=(R, p),
                    axis=axis[v0 : v0 + nv],
                    mass=float(m.mass[b]),
                    com=_np(m.com[b]),
                    inertia=_np(m.inertia[b]),
                    joint=pre + t.joint_names[b],
                    body=pre + t.body_names[b],
                    q={
                        k: _np(getattr(m, k))[q0 : q0 + nq]
                        if getattr(m, k) is not None
                        else np.full(nq, _DEFAULT[k])
                        for k in _PROPS_Q
                    },
                    v={
                        k: _np(getattr(m, k))[v0 : v0 + nv]
                        if getattr(m, k) is not None
                        else np.full(nv, _DEFAULT[k])
                        for k in _PROPS_V
                    },
                    armature=_np(m.armature)[v0 : v0 + nv]
                    if m.armature is not None
                    else np.zeros(nv),
                )
            )
            local.append((pi, b))
        fR, fp = _np(m.frame_R), _np(m.frame_p)
        for f, fname in enumerate(t.frame_names):
            b = int(t.frame_parent[f])
            R, p = fR[f], fp[f]
            if b < 0:
                R, p = Rb @ R, Rb @ p + pb
            frames.append((pre + fname, -1 if b < 0 else off + b, R, p))

    tree = sort_tree(bodies)
    order, remap = tree.order, tree.remap
    nb = len(bodies)
    dof_axis = [bodies[o]["axis"] for o in order]
    dof_axis = np.concatenate(dof_axis) if nb else np.zeros((0, 6))
    params = model_params(
        tree,
        dof_axis,
        np.array([bodies[o]["mass"] for o in order]),
        np.array([bodies[o]["com"] for o in order]).reshape(nb, 3),
        np.array([bodies[o]["inertia"] for o in order]).reshape(nb, 3, 3),
        [f[2] for f in frames],
        [f[3] for f in frames],
        gravity,
        **{
            k: np.concatenate([bodies[o]["q" if k in _PROPS_Q else "v"][k] for o in order])
            if nb
            else np.zeros(0)
            for k in sorted(have)
        },
    )
    if armature:
        params["armature"] = np.concatenate([bodies[o]["armature"] for o in order])
    parent, kind = tree.parent, tree.kind
    single_free_root = nb > 0 and kind[0] == joints.FREE and int(np.sum(parent < 0)) == 1
    topo = make_topology(
        name=name,
        parent=parent,
        kind=kind,
        joint_names=[bodies[o]["joint"] for o in order],
        body_names=[bodies[o]["body"] for o in order],
        frame_names=[f[0] for f in frames],
        frame_parent=[remap(f[1]) for f in frames],
        floating_base=bool(single_free_root),
        root_name="world",
    )
    dtype = jax.dtypes.canonicalize_dtype(np.float64)

    def element(k, i):
        if k in ("frame_R", "frame_p"):
            return f"scene {name!r}: frame {frames[i][0]!r}"
        return f"scene {name!r}: {k}[{i}]"

    leaves = cast_params(params, dtype, element, unbounded=LIMITS, bounded=True)
    model = Model(**leaves, topo=topo, x32_load=dtype != np.float64)

    body_of, q_index, v_index = {}, {}, {}
    for p in parts:
        body_of[p.name], q_index[p.name], v_index[p.name] = [], [], []
    for g, (pi, _b) in enumerate(local):  # global dfs order = each part's body order
        nbi = remap(g)
        pn = parts[pi].name
        body_of[pn].append(nbi)
        q0, v0 = int(topo.q_start[nbi]), int(topo.v_start[nbi])
        q_index[pn].extend(range(q0, q0 + int(topo.nq_j[nbi])))
        v_index[pn].extend(range(v0, v0 + int(topo.nv_j[nbi])))
    as_arr = {k: np.asarray(v, np.int64) for k, v in body_of.items()}
    return Composed(
        model,
        as_arr,
        {k: np.asarray(v, np.int64) for k, v in q_index.items()},
        {k: np.asarray(v, np.int64) for k, v in v_index.items()},
    )

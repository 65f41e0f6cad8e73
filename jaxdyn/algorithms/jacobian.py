"""Frame Jacobians.

Reference: Featherstone 2008 §4.4 (the body Jacobian is the motion subspaces of the supporting
joints, transformed to a common frame); reference frames as Pinocchio's ``LOCAL``, ``WORLD`` and
``LOCAL_WORLD_ALIGNED``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from .. import batching, shell, spatial
from .._precision import full_precision
from . import kinematics as kin

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model
    from .kinematics import Placements


REFERENCES = ("local", "world", "local_world_aligned")


def frame_argument(fn: str, model: Model, frame: str | int, reference: str) -> int:
    """The index of ``frame`` (a name or an index into ``model.frame_names``), with
    ``reference`` checked against :data:`REFERENCES`; errors name ``fn``."""
    if not isinstance(reference, str) or reference not in REFERENCES:
        raise ValueError(f"{fn}: reference must be one of {REFERENCES}, got {reference!r}")
    if isinstance(frame, (bool, np.bool_)) or not isinstance(frame, (str, int, np.integer)):
        raise TypeError(
            f"{fn}: frame must be a frame name (str) or an index (int) into "
            f"model.frame_names, got {type(frame).__name__} {frame!r}"
        )
    return model.frame_index(frame)


@shell.public("joint_jacobians", words=batching.kinematics_words)
@full_precision
def joint_jacobians(model: Model, q: ArrayLike) -> Array:
    """Motion subspace of every coordinate at the world origin, ``(6, nv)`` (Pinocchio's
    ``computeJointJacobians`` in ``WORLD``)."""
    model, q, dtype = shell.prepare(model, "joint_jacobians", q)
    if model.nb == 0:
        return jnp.zeros((6, 0), dtype)
    return kin.world_state(model, q).S.T


def chain_subspaces(
    model: Model, chain: Sequence[int], placements: Placements
) -> tuple[Array, np.ndarray]:
    """World motion subspaces ``(d, 6)`` of the coordinates of the bodies ``chain`` (placed
    by ``placements``, as :func:`jaxdyn.algorithms.kinematics.chain_placements` returns
    them) and those coordinates' indices (ascending: bodies are sorted by depth)."""
    t = model.topo
    nvj = t.nv_j[list(chain)]
    idx = np.concatenate([np.arange(t.v_start[k], t.v_start[k] + t.nv_j[k]) for k in chain])
    rep = np.repeat(np.arange(len(chain)), nvj)  # each body once per coordinate
    R, p = (kin.take_rows(x, rep) for x in placements)
    return spatial.act_motion(R, p, kin.take_rows(model.dof_axis, idx)), idx


def frame_chain(model: Model, q: ArrayLike, f: int) -> tuple[Array, np.ndarray, Array, Array]:
    """What the single-frame functions need of a moving frame ``f``: ``(S, idx, R, p)``, the
    world motion subspaces ``S (d, 6)`` of its supporting coordinates ``idx`` and the frame's
    world placement, from its supporting bodies only."""
    b = int(model.topo.frame_parent[f])
    pl = kin.chain_placements(model, q, b)
    S, idx = chain_subspaces(model, kin.support_chain(model.topo, b), pl)
    R, p = kin.frame_in_chain(model, pl, f)
    return S, idx, R, p


def spread_columns(cols: Array, idx: np.ndarray, nv: int) -> Array:
    """``(6, nv)`` with ``cols (d, 6)`` as the columns ``idx`` (ascending) and zeros
    elsewhere, assembled from contiguous runs (no scatter)."""
    dt = cols.dtype
    parts, at, i = [], 0, 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        if idx[i] > at:
            parts.append(jnp.zeros((6, int(idx[i]) - at), dt))
        parts.append(cols[i : j + 1].T)
        at, i = int(idx[j]) + 1, j + 1
    if at < nv:
        parts.append(jnp.zeros((6, nv - at), dt))
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, 1)


@shell.public("jacobian", words=batching.kinematics_words)
@full_precision
def jacobian(
    model: Model,
    q: ArrayLike,
    frame: str | int,
    reference: str = "local_world_aligned",
) -> Array:
    """Jacobian of a frame's spatial velocity ``[ω; v]`` with respect to ``v``, ``(6, nv)``.

    Only the frame's supporting bodies are placed
    (:func:`jaxdyn.algorithms.kinematics.chain_placements`): the columns of the other
    coordinates are zero.

    **Arguments:**

    - ``frame``: frame name (any URDF link or joint) or index into ``model.frame_names``.
    - ``reference``: ``"local"`` (frame axes, at the frame origin), ``"world"`` (world axes, at
      the world origin) or ``"local_world_aligned"`` (world axes, at the frame origin).
    """
    f = frame_argument("jacobian", model, frame, reference)
    model, q, dtype = shell.prepare(model, "jacobian", q)
    t = model.topo
    b = int(t.frame_parent[f])
    if b < 0:  # a frame fixed to the world (every frame of a model without moving bodies)
        return jnp.zeros((6, model.nv), dtype)
    S, idx, R, p = frame_chain(model, q, f)
    if reference == "world":
        return spread_columns(S, idx, model.nv)
    w, vp = S[:, :3], S[:, 3:] + spatial.cross(S[:, :3], p)
    if reference == "local":
        Rt = R.T
        w, vp = spatial.mv(Rt, w), spatial.mv(Rt, vp)
    return spread_columns(jnp.concatenate([w, vp], 1), idx, model.nv)

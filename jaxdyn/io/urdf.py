"""The URDF loader: :func:`load_urdf` (``jaxdyn.load_urdf``), URDF and URDF+ files.

The file is parsed once (:func:`jaxdyn.model.urdf.parse_urdf`, which validates it and refuses
DTDs / entities) and compiled by the model layer that fits it: the spanning tree by
:func:`jaxdyn.model.build_model`, a file with URDF+ loop tags by
:func:`jaxdyn.clusters.urdfplus.build_plus`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, overload

from ..clusters.model import check_floating_joints
from ..clusters.urdfplus import build_plus
from ..model.build import build_model
from ..model.urdf import parse_urdf

if TYPE_CHECKING:
    from ..clusters.model import ClusterModel
    from ..model.model import Model

__all__ = ["load_urdf"]


@overload
def load_urdf(
    source: str | os.PathLike,
    floating_base: bool = ...,
    gravity: Sequence[float] = ...,
    *,
    clusters: Literal[False],
    fold_rotors: bool = ...,
    strict: bool | None = ...,
) -> Model: ...


@overload
def load_urdf(
    source: str | os.PathLike,
    floating_base: bool = ...,
    gravity: Sequence[float] = ...,
    clusters: bool | None = ...,
    fold_rotors: bool = ...,
    strict: bool | None = ...,
) -> Model | ClusterModel: ...


def load_urdf(
    source: str | os.PathLike,
    floating_base: bool = False,
    gravity: Sequence[float] = (0.0, 0.0, -9.81),
    clusters: bool | None = None,
    fold_rotors: bool = True,
    strict: bool | None = None,
) -> Model | ClusterModel:
    """Load a URDF or URDF+ file (path) or XML text: ``jaxdyn.load_urdf``.

    **Arguments:**

    - ``source``: path to a ``.urdf`` file, or the XML text itself.
    - ``floating_base``: attach the root link to the world by a free joint ``root_joint`` with
      ``q = [x, y, z, qw, qx, qy, qz]`` and ``v = [ω; v]`` in base coordinates. A file whose
      root link carries its own ``floating`` joint refuses ``floating_base=True``
      (``ValueError`` naming the joint: two stacked free joints give a singular mass matrix).
    - ``gravity``: world gravity vector.
    - ``clusters``: ``None`` (default): a file with URDF+ ``<coupling>`` or ``<loop>`` tags
      gives a :class:`~jaxdyn.clusters.ClusterModel` (its cluster tree, for
      :func:`jaxdyn.crnea` / :func:`jaxdyn.caba` / :func:`jaxdyn.cefpa`), any other file a
      plain :class:`~jaxdyn.Model`; ``True``: always the cluster model (``<mimic>`` joints
      then become linear couplings); ``False``: always the plain spanning-tree
      :class:`~jaxdyn.Model` (loop tags and ``<mimic>`` ignored, as Pinocchio's default).
    - ``fold_rotors``: for a cluster model, as :func:`jaxdyn.clusters.build`.
    - ``strict``: ``None`` (default): load every file Pinocchio loads, with a
      :class:`jaxdyn.JaxdynWarning` naming each element repaired, dropped or suspicious
      (rounding-size negative inertia eigenvalues clipped, ``<mimic>`` naming a missing joint
      dropped, inertias violating the triangle inequality, moving joints whose subtrees carry
      no mass); ``True``: each of those is an error; ``False``: also repair inertias that are
      not physically valid (nearest valid inertia, with a warning). See
      :mod:`jaxdyn.model.urdf` for the table.

    **Returns:** a :class:`~jaxdyn.Model` or a :class:`~jaxdyn.clusters.ClusterModel` (see
    ``clusters``). Malformed input raises ``ValueError`` naming the element at fault. A
    fixed-base file without moving joints gives a zero-DoF model (``nq = nv = 0``; its frames
    still have placements, the algorithms return empty arrays).

    Massless subtrees: a moving joint whose subtree carries no mass (and, for a revolute or
    spherical joint, no rotational inertia) makes the mass matrix singular. The model loads
    with a warning naming the joints; ``crba`` and ``rnea`` are fine, while ``aba``, ``minv``,
    ``aba_derivatives`` and the Delassus matrix return NaN (no finite answer exists, as in
    Pinocchio). The usual fix is armature: ``model.with_armature(1e-6)`` (or per coordinate).

    Parameters are stored in the default float dtype: with ``jax_enable_x64`` off they are
    rounded to float32 (the model remembers it and refuses float64 inputs later: enable x64
    before loading). Numbers whose products overflow (e.g. ``xyz="1e200 0 0"``) raise naming
    the element, and so does any parameter beyond
    :data:`jaxdyn.model.build.MAGNITUDE_BOUND` (joint limits excepted), within which ``rnea``
    and ``aba`` cannot overflow.
    """
    robot = parse_urdf(source, strict=strict)  # parsed once: each warning is given once
    check_floating_joints(robot, floating_base)
    if clusters is None:
        clusters = any(el.tag in ("coupling", "loop") for el in robot.extra)
    if clusters:
        return build_plus(robot, source, (), floating_base, gravity, None, fold_rotors, strict)
    return build_model(robot, floating_base=floating_base, gravity=gravity, strict=strict)

"""URDF+ reader: URDF plus ``<coupling>``, ``<loop>`` and the joint attribute ``independent``.

URDF+ is the format of ``ROAM-Lab-ND/generalized_rbda`` (parsed there by the
``mit-biomimetics/urdfdom`` fork):

* ``<joint ... independent="true|false">``: whether the joint's coordinate is kept as an
  independent coordinate of its cluster;
* ``<coupling name type="rolling"><predecessor link/><successor link/><ratio value/></coupling>``:
  ``ratio * sum(q on predecessor -> NCA path) = sum(q on successor -> NCA path)``;
* ``<loop name type="revolute"><predecessor link><origin xyz/></predecessor>
  <successor link><origin xyz/></successor><axis xyz/></loop>``: the two points coincide
  (position constraint; the ``<axis>`` of a revolute loop joint adds no equation for the planar
  linkages it is used for, and is only checked for syntax).

URDF ``<mimic>`` tags become linear couplings as well. The file is first parsed (and validated)
by :func:`jaxdyn.model.urdf.parse_urdf`, which refuses DTDs/entities; its unknown top-level tags
(``<coupling>``, ``<loop>``) arrive as raw elements in ``URDFRobot.extra``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..model import urdf as _urdf
from . import spec as S
from .model import ClusterModel, build_clusters
from .rotors import fold_rotors as _fold_rotors

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

    from ..model import Model
    from ..model.urdf import URDFRobot

_COUPLING_TYPES = ("rolling",)
_LOOP_TYPES = ("revolute",)


def _link_child(el, tag, where, with_origin):
    found = el.findall(tag)
    if len(found) != 1:
        raise ValueError(f"{where}: expected exactly one <{tag}>, found {len(found)}")
    ch = found[0]
    link = ch.get("link")
    if link is None or not link.strip():
        raise ValueError(f"{where} <{tag}>: missing link attribute")
    xyz = (0.0, 0.0, 0.0)
    if with_origin:
        o = ch.findall("origin")
        if len(o) > 1:
            raise ValueError(f"{where} <{tag}>: more than one <origin>")
        if o:
            if o[0].get("rpy") is not None:
                _urdf.parse_numbers(o[0].get("rpy"), 3, f"{where} <{tag}> <origin rpy>")
            if o[0].get("xyz") is not None:
                xyz = tuple(
                    _urdf.parse_numbers(o[0].get("xyz"), 3, f"{where} <{tag}> <origin xyz>")
                )
    return link, xyz


def parse_extras(
    robot: URDFRobot, xml_root: ET.Element
) -> tuple[list[S.ConstraintSpec], dict[str, bool]]:
    """URDF+ constraint specifications and ``independent`` flags of a parsed robot.

    Returns ``(constraints, independent)``."""
    constraints = []
    names = set()
    for el in robot.extra:
        if el.tag not in ("coupling", "loop"):
            continue
        name = el.get("name")
        if name is None or not name.strip():
            raise ValueError(f"URDF+ <{el.tag}>: missing or empty name attribute")
        where = f'URDF+ <{el.tag} name="{name}">'
        if name in names:
            raise ValueError(f"{where}: duplicate constraint name")
        names.add(name)
        typ = el.get("type")
        if el.tag == "coupling":
            if typ is not None and typ not in _COUPLING_TYPES:
                raise ValueError(
                    f"{where}: unsupported coupling type {typ!r} (expected one of "
                    f"{_COUPLING_TYPES})"
                )
            pred, _ = _link_child(el, "predecessor", where, False)
            succ, _ = _link_child(el, "successor", where, False)
            r = el.findall("ratio")
            if len(r) != 1:
                raise ValueError(f"{where}: expected exactly one <ratio>, found {len(r)}")
            if r[0].get("value") is None:
                raise ValueError(f"{where} <ratio>: missing value attribute")
            ratio = float(_urdf.parse_numbers(r[0].get("value"), 1, f"{where} <ratio value>")[0])
            if ratio == 0.0:
                raise ValueError(f"{where} <ratio>: zero ratio")
            constraints.append(S.Coupling(pred, succ, ratio, name))
        else:
            if typ is not None and typ not in _LOOP_TYPES:
                raise ValueError(
                    f"{where}: unsupported loop type {typ!r} (expected one of {_LOOP_TYPES})"
                )
            pred, xp = _link_child(el, "predecessor", where, True)
            succ, xs = _link_child(el, "successor", where, True)
            ax = el.findall("axis")
            if len(ax) > 1:
                raise ValueError(f"{where}: more than one <axis>")
            if ax and ax[0].get("xyz") is not None:
                _urdf.parse_numbers(ax[0].get("xyz"), 3, f"{where} <axis xyz>")
            constraints.append(S.PointLoop(pred, succ, xp, xs, name))
    for j in robot.joints:
        if j.mimic is not None:
            target, mult, off = j.mimic
            constraints.append(S.Mimic(j.name, target, mult, off))
    independent = {}
    for el in xml_root.iter("joint"):
        val = el.get("independent")
        if val is None:
            continue
        jn = el.get("name")
        if val.strip().lower() not in ("true", "false", "1", "0"):
            raise ValueError(
                f'URDF+ <joint name="{jn}">: independent={val!r} is not a boolean (true/false)'
            )
        independent[jn] = val.strip().lower() in ("true", "1")
    return constraints, independent


def build(
    source: str | os.PathLike | URDFRobot | Model,
    constraints: Sequence[S.ConstraintSpec] = (),
    *,
    floating_base: bool = False,
    gravity: Sequence[float] = (0.0, 0.0, -9.81),
    independent: Mapping[str, bool] | None = None,
    name: str | None = None,
    fold_rotors: bool = True,
    strict: bool | None = None,
) -> ClusterModel:
    """Build a :class:`ClusterModel` from a spanning tree and constraint specifications.

    Reference: Chignoli et al., T-RO 2024, §IV (cluster connectivity tree built from the
    spanning tree and the loop constraints).

    **Arguments:**

    - ``source``: URDF path / XML text (its spanning tree; URDF+ tags are *not* read here, see
      :func:`load_urdf_plus`), a parsed :class:`~jaxdyn.model.urdf.URDFRobot`, or a compiled
      :class:`jaxdyn.Model`.
    - ``constraints``: sequence of :mod:`jaxdyn.clusters.spec` objects
      (:class:`~jaxdyn.clusters.Coupling`, :class:`~jaxdyn.clusters.Mimic`,
      :class:`~jaxdyn.clusters.LinearConstraint`, :class:`~jaxdyn.clusters.PointLoop`,
      :class:`~jaxdyn.clusters.ImplicitConstraint`, :class:`~jaxdyn.clusters.Cluster`).
    - ``floating_base``, ``gravity``: as :func:`jaxdyn.load_urdf` (a file whose root link
      carries its own ``floating`` joint refuses ``floating_base=True``).
    - ``independent``: optional ``{joint name: bool}``, URDF+'s ``independent=`` flags (which
      spanning coordinates stay independent in constrained clusters; unflagged coordinates are
      chosen automatically, from the last one backwards, so that ``K_d`` is invertible).
    - ``fold_rotors``: carry axisymmetric transmission rotors by their parent bodies in the
      cluster algorithms where that is exact (:func:`jaxdyn.clusters.fold_rotors`; default);
      ``False``: the algorithms work on every body of the spanning tree.
    - ``strict``: as :func:`jaxdyn.load_urdf` (lenient loading with warnings by default).

    **Returns:** the compiled :class:`ClusterModel`. Inconsistent input raises ``ValueError``
    naming the constraint at fault.
    """
    model = build_clusters(
        source,
        constraints,
        floating_base=floating_base,
        gravity=gravity,
        independent=independent,
        name=name,
        strict=strict,
    )
    return _fold_rotors(model) if fold_rotors else model


def load_urdf_plus(
    source: str | os.PathLike,
    floating_base: bool = False,
    gravity: Sequence[float] = (0.0, 0.0, -9.81),
    constraints: Sequence[S.ConstraintSpec] = (),
    name: str | None = None,
    fold_rotors: bool = True,
    strict: bool | None = None,
) -> ClusterModel:
    """Load a URDF+ file (path or XML text) as a :class:`~jaxdyn.clusters.ClusterModel`.

    Reference: Chignoli et al., T-RO 2024, §IV (cluster connectivity tree built from the
    spanning tree and the loop constraints).

    **Arguments:**

    - ``source``: path or XML text. A plain URDF gives a model whose clusters are single joints
      (then :func:`~jaxdyn.clusters.crnea` / :func:`~jaxdyn.clusters.caba` equal
      :func:`jaxdyn.rnea` / :func:`jaxdyn.aba`), except that ``<mimic>`` joints are coupled.
    - ``floating_base``, ``gravity``: as :func:`jaxdyn.load_urdf`. The URDF+ robots of
      generalized_rbda carry their own ``floating`` joint: keep ``floating_base=False``
      (``True`` raises ``ValueError`` naming that joint).
    - ``constraints``: extra specifications (:mod:`jaxdyn.clusters.spec`) added to the file's.
    - ``fold_rotors``: as :func:`build`.
    - ``strict``: as :func:`jaxdyn.load_urdf`.

    **Returns:** the :class:`ClusterModel`. Malformed tags raise ``ValueError`` naming the
    element (e.g. ``URDF+ <coupling name="knee">: missing <ratio>``).
    """
    robot = _urdf.parse_urdf(source, strict=strict)  # validates, refuses DTDs
    return build_plus(robot, source, constraints, floating_base, gravity, name, fold_rotors, strict)


def build_plus(
    robot: URDFRobot,
    source: str | os.PathLike,
    constraints: Sequence[S.ConstraintSpec],
    floating_base: bool,
    gravity: Sequence[float],
    name: str | None,
    fold_rotors: bool,
    strict: bool | None,
) -> ClusterModel:
    """The cluster model of a parsed URDF+ file (its extra tags read from ``source``)."""
    cons, independent = parse_extras(robot, _urdf.read_xml(source))
    return build(
        robot,
        tuple(cons) + tuple(constraints),
        floating_base=floating_base,
        gravity=gravity,
        independent=independent,
        name=name,
        fold_rotors=fold_rotors,
        strict=strict,
    )

"""Strict, safe URDF parser producing a plain Python / numpy description.

The parser treats model files as untrusted input:

* any ``<!DOCTYPE ...>`` or ``<!ENTITY ...>`` declaration is refused *before*
  a tree is built (blocks "billion laughs" expansion and external entities);
* every problem raises :class:`ValueError` whose message names the element at
  fault, e.g. ``URDF <joint name="knee">: unknown joint type 'bogus'``.

No JAX here: the result (:class:`URDFRobot`) is later turned into a JAX model.

Lenient, explained loading
--------------------------
Real-world URDFs carry rounding noise and small mistakes that Pinocchio accepts. jaxdyn loads
every file Pinocchio loads, says what it did with a :class:`jaxdyn.JaxdynWarning` naming the
element, and refuses what cannot be given a meaning. ``strict`` selects the policy:

==========================================  ====================  ==============  =============
situation                                   ``strict=None``       ``strict=True`` ``False``
                                            (default)
==========================================  ====================  ==============  =============
inertia eigenvalue ``>= -1e-12 max(1, tr)`` kept as is (rounding) kept            kept
inertia eigenvalue ``>= -INERTIA_RTOL s``   clipped to 0, warning error           clipped
more negative eigenvalue (not PSD)          error                 error           projected,
                                                                                  warning
principal moments ``a + b < c - tol``       warning, kept (as     error           projected,
(triangle inequality, ``tol`` as above)     Pinocchio)                            warning
``<mimic>`` naming a missing joint          dropped, warning      error           dropped
==========================================  ====================  ==============  =============

``s`` is the robot's inertia scale, the largest principal moment of any link of the file, and
:data:`INERTIA_RTOL` = 1e-6: a negative eigenvalue a millionth of the largest link inertia (e.g.
-3.5e-8 kg m^2 on TIAGo's 1 mg antenna links, against 0.55 kg m^2) is rounding in the file, a
larger one (-0.021 kg m^2 on romeo_laas_small's torso) is a wrong inertia. "Projected" is the
nearest physically valid inertia in the Frobenius norm: the principal axes are kept and the
principal moments are projected onto the cone ``a + b >= c`` (which implies ``a, b, c >= 0``);
the warning gives the size of the correction.

Why the triangle inequality only warns by default: a rigid body's principal moments satisfy
``a + b >= c`` (they are sums of the second moments of its mass distribution), so a violation
is a physically impossible body; but the dynamics stay well defined (the spatial inertia is
still positive definite for a positive mass), Pinocchio accepts such files, and several shipped
robots have them (Allegro hand fingertips, PR2 sensor mounts, ANYmal C cameras). A warning
naming the link keeps those robots loadable and comparable with Pinocchio, ``strict=True``
refuses them, ``strict=False`` repairs them. The default gives one warning per file, naming
every such link.
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from xml.parsers import expat

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = [
    "URDFInertial",
    "URDFLink",
    "URDFJoint",
    "URDFRobot",
    "parse_urdf",
    "rpy_to_matrix",
    "project_inertia",
    "JOINT_TYPES",
    "INERTIA_RTOL",
]

#: Relative tolerance of the inertia checks, against the largest principal moment of any link
#: of the file (see the module docstring).
INERTIA_RTOL = 1e-6

#: Joint types accepted by :func:`parse_urdf` (``planar`` is not supported).
JOINT_TYPES = ("revolute", "continuous", "prismatic", "fixed", "floating", "spherical")
_AXIS_TYPES = ("revolute", "continuous", "prismatic")
#: Top-level tags that are silently ignored (everything else unknown goes to ``extra``).
_IGNORED_TOP = ("material", "gazebo", "transmission")


@dataclass
class URDFInertial:
    """Mass properties of a link (URDF ``<inertial>``)."""

    mass: float
    xyz: np.ndarray  # (3,) origin of the inertial frame in the link frame
    rpy: np.ndarray  # (3,) roll-pitch-yaw of the inertial frame in the link frame
    inertia: np.ndarray  # (3,3) symmetric rotational inertia about the COM, in the inertial frame


@dataclass
class URDFLink:
    """A URDF link; ``inertial`` is None for a massless link."""

    name: str
    inertial: URDFInertial | None


@dataclass
class URDFJoint:
    """A URDF joint connecting ``parent`` link to ``child`` link."""

    name: str
    type: str  # one of JOINT_TYPES
    parent: str
    child: str
    xyz: np.ndarray  # (3,) <origin xyz>, default zeros
    rpy: np.ndarray  # (3,) <origin rpy>, default zeros
    axis: np.ndarray  # (3,) unit vector, default (1,0,0)
    mimic: tuple[str, float, float] | None = None  # (joint, multiplier, offset)
    #: ``<limit>``: (lower, upper, effort, velocity); position bounds of continuous joints and
    #: missing attributes are +-inf (no limit)
    limit: tuple[float, float, float, float] | None = None
    #: ``<dynamics>``: (damping, friction), missing attributes 0
    dynamics: tuple[float, float] | None = None


@dataclass
class URDFRobot:
    """A parsed URDF model (links and joints in document order)."""

    name: str
    links: list[URDFLink]
    joints: list[URDFJoint]
    root: str
    extra: list = field(default_factory=list)  # raw Elements of other top-level tags


# --------------------------------------------------------------------------- helpers
def rpy_to_matrix(rpy: ArrayLike) -> np.ndarray:
    """Rotation matrix of URDF roll-pitch-yaw: ``R = Rz(yaw) @ Ry(pitch) @ Rx(roll)``."""
    r, p, y = (float(v) for v in np.asarray(rpy, dtype=float).reshape(3))
    cr, sr, cp, sp, cy, sy = (
        math.cos(r),
        math.sin(r),
        math.cos(p),
        math.sin(p),
        math.cos(y),
        math.sin(y),
    )
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def _warn(msg: str) -> None:
    from ..errors import warn

    warn(msg)


def _check_strict(strict) -> None:
    if strict not in (None, True, False):
        raise TypeError(f"URDF: strict must be None, True or False, got {strict!r}")


def project_inertia(inertia: ArrayLike) -> np.ndarray:
    """The physically valid rotational inertia nearest to ``inertia`` (Frobenius norm).

    Valid means principal moments satisfying the triangle inequality ``a + b >= c`` (hence
    ``>= 0``). The set is invariant under rotations, so the nearest point keeps the principal
    axes; the principal moments are projected onto the polyhedral cone of the three
    inequalities (every face of the cone is tried; the nearest feasible candidate is the
    projection).
    """
    I = 0.5 * (np.asarray(inertia, float) + np.asarray(inertia, float).T)
    lam, V = np.linalg.eigh(I)
    A = np.array([[-1.0, 1.0, 1.0], [1.0, -1.0, 1.0], [1.0, 1.0, -1.0]])  # A lam >= 0
    tol = 1e-15 * max(1.0, float(np.max(np.abs(lam))))
    best, best_d = np.zeros(3), np.inf  # replaced: mask 7 (the cone's apex 0) is feasible
    for mask in range(8):
        act = A[[k for k in range(3) if mask >> k & 1]]
        x = lam if len(act) == 0 else lam - act.T @ np.linalg.solve(act @ act.T, act @ lam)
        if np.all(A @ x >= -tol):
            d = float(np.linalg.norm(x - lam))
            if d < best_d:
                best, best_d = x, d
    out = V @ np.diag(best) @ V.T
    return 0.5 * (out + out.T)


def parse_numbers(text: str, n: int, where: str) -> np.ndarray:
    """Parse exactly ``n`` finite whitespace-separated numbers from ``text``."""
    parts = text.split()
    if len(parts) != n:
        raise ValueError(
            f"{where}: expected {n} number{'s' if n != 1 else ''}, got {len(parts)} ({text!r})"
        )
    vals = []
    for p in parts:
        try:
            if "_" in p:  # Python's float() accepts "1_0"; XML numbers do not
                raise ValueError
            v = float(p)
        except ValueError:
            raise ValueError(f"{where}: cannot parse {p!r} as a number") from None
        if not math.isfinite(v):
            raise ValueError(f"{where}: non-finite number {p!r}")
        vals.append(v)
    return np.array(vals, dtype=float)


def _one(el: ET.Element, tag: str, where: str) -> ET.Element | None:
    """The unique child ``<tag>`` of ``el`` (None if absent; error if repeated)."""
    found = el.findall(tag)
    if len(found) > 1:
        raise ValueError(f"{where}: more than one <{tag}>")
    return found[0] if found else None


def _origin(el: ET.Element, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(xyz, rpy) of the optional ``<origin>`` child of ``el`` (zeros by default)."""
    o = _one(el, "origin", where)
    xyz, rpy = np.zeros(3), np.zeros(3)
    if o is not None:
        if (text := o.get("xyz")) is not None:
            xyz = parse_numbers(text, 3, f"{where} <origin xyz>")
        if (text := o.get("rpy")) is not None:
            rpy = parse_numbers(text, 3, f"{where} <origin rpy>")
    return xyz, rpy


def _name(el: ET.Element, index: int) -> str:
    """The mandatory, non-empty ``name`` attribute of a link/joint."""
    name = el.get("name")
    if name is None or not name.strip():
        raise ValueError(
            f"URDF <{el.tag}> #{index} (0-based, in document order): "
            "missing or empty name attribute"
        )
    return name


# --------------------------------------------------------------------------- security / XML
def read_xml(source: str | bytes | os.PathLike, kind: str = "URDF") -> ET.Element:
    """Load ``source`` (path, XML text or bytes), refuse DTDs, return the root Element.
    ``kind`` begins the error messages (``"URDF"``; the MJCF loader names the file)."""

    def _refuse(*_args):
        raise ValueError(
            f"{kind}: DOCTYPE/entity declarations are not allowed (untrusted model file)"
        )

    lead = ""  # leading whitespace stripped from XML text (an <?xml?> must come first)
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    elif isinstance(source, str) and source.lstrip("\ufeff \t\r\n").startswith("<"):
        data = source.lstrip("\ufeff \t\r\n")
        lead = source[: len(source) - len(data)]
    elif isinstance(source, (str, os.PathLike)):
        try:
            with open(source, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ValueError(f"{kind}: cannot read file {os.fspath(source)!r}: {e}") from e
    else:
        raise TypeError(
            f"parse_urdf: expected a path, XML str or bytes, got {type(source).__name__}"
        )

    # Pass 1: a bare expat parser that aborts on any DOCTYPE / entity declaration.
    p = expat.ParserCreate()
    p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    p.StartDoctypeDeclHandler = _refuse
    p.EntityDeclHandler = _refuse
    p.UnparsedEntityDeclHandler = _refuse
    p.ExternalEntityRefHandler = _refuse

    def malformed(line: int, col: int, why: str) -> ValueError:
        # report positions in the caller's text, before the leading whitespace was stripped
        if line == 1:
            col += len(lead) - lead.rfind("\n") - 1
        return ValueError(
            f"{kind}: malformed XML at line {line + lead.count(chr(10))}, column {col + 1}: {why}"
        )

    try:
        p.Parse(data, True)
    except expat.ExpatError as e:
        raise malformed(e.lineno, e.offset, expat.ErrorString(e.code)) from None
    # Pass 2: the document is DTD-free, build the tree.
    try:
        return ET.fromstring(data)
    except ET.ParseError as e:  # pragma: no cover - pass 1 catches the same errors
        raise malformed(*e.position, str(e)) from None


# --------------------------------------------------------------------------- elements
def _parse_link(el: ET.Element, index: int) -> URDFLink:
    name = _name(el, index)
    where = f'URDF <link name="{name}">'
    iel = _one(el, "inertial", where)
    if iel is None:
        return URDFLink(name, None)
    where += " <inertial>"
    xyz, rpy = _origin(iel, where)
    mel = _one(iel, "mass", where)
    if mel is None:
        raise ValueError(f"{where}: missing <mass>")
    value = mel.get("value")
    if value is None:
        raise ValueError(f"{where} <mass>: missing value attribute")
    mass = float(parse_numbers(value, 1, f"{where} <mass value>")[0]) + 0.0
    if mass < 0.0:
        raise ValueError(f"{where}: negative mass {mass}")
    inertia = np.zeros((3, 3))
    nel = _one(iel, "inertia", where)
    if nel is not None:
        comps = {}
        for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz"):
            text = nel.get(k)
            if text is None:
                raise ValueError(f"{where} <inertia>: missing {k} attribute")
            comps[k] = float(parse_numbers(text, 1, f"{where} <inertia {k}>")[0])
        inertia = np.array(
            [
                [comps["ixx"], comps["ixy"], comps["ixz"]],
                [comps["ixy"], comps["iyy"], comps["iyz"]],
                [comps["ixz"], comps["iyz"], comps["izz"]],
            ]
        )
    return URDFLink(name, URDFInertial(mass, xyz, rpy, inertia))


def _check_inertias(links: list[URDFLink], strict, robot_name: str = "") -> None:
    """The inertia policy of the module docstring, applied in place to every link."""
    eigs = {}
    for l in links:
        if l.inertial is not None:
            eigs[l.name] = np.linalg.eigvalsh(l.inertial.inertia)
    if not eigs:
        return
    scale = max(float(np.max(np.abs(e))) for e in eigs.values())
    tol = INERTIA_RTOL * scale
    triangle = []  # (link, principal moments, violation): one warning for the file
    for l in links:
        inert = l.inertial
        if inert is None:  # (the links with an inertial are those of eigs)
            continue
        eig = eigs[l.name]
        where = f'URDF <link name="{l.name}"> <inertial> <inertia>'
        I = inert.inertia
        silent = 1e-12 * max(1.0, abs(np.trace(I)))
        if eig.min() < -silent:
            if eig.min() >= -tol and strict is not True:  # rounding in the file: clip
                lam, V = np.linalg.eigh(I)
                J = V @ np.diag(np.maximum(lam, 0.0)) @ V.T
                inert.inertia = 0.5 * (J + J.T)
                _warn(
                    f"{where}: negative principal moment {eig.min():.3g} (rounding: above "
                    f"-{INERTIA_RTOL:g} x the largest link inertia {scale:.3g}) clipped to 0"
                )
                eig = np.linalg.eigvalsh(inert.inertia)
            elif strict is False:
                _repair(where, inert, "not positive semi-definite", eig)
                continue
            else:
                hint = (
                    "strict=True refuses the rounding-size negative eigenvalues that are "
                    "clipped by default"
                    if eig.min() >= -tol
                    else "load with strict=False to replace it by the nearest physically "
                    "valid inertia"
                )
                raise ValueError(
                    f"{where}: not positive semi-definite (eigenvalues {eig.tolist()}); {hint}"
                )
        # triangle inequality on the principal moments (a <= b <= c: a + b >= c)
        gap = eig[0] + eig[1] - eig[2]
        if gap < -max(tol, silent):
            if strict is False:
                _repair(where, inert, "principal moments violate the triangle inequality", eig)
            elif strict is True:
                raise ValueError(
                    f"{where}: principal moments {eig.tolist()} violate the triangle inequality "
                    "a + b >= c (no rigid body has this inertia); strict=None loads it with a "
                    "warning, strict=False replaces it by the nearest valid inertia"
                )
            else:
                triangle.append((l.name, eig, -gap))
    if triangle:
        shown = [
            f'<link name="{n}"> <inertial> <inertia> ({e[0]:.4g} + {e[1]:.4g} < {e[2]:.4g})'
            for n, e, _ in triangle[:12]
        ]
        more = f" and {len(triangle) - 12} more" if len(triangle) > 12 else ""
        _warn(
            f"URDF <robot name={robot_name!r}>: the principal moments a <= b <= c of "
            f"{len(triangle)} link inertia{'s' if len(triangle) > 1 else ''} violate the "
            f"triangle inequality a + b >= c (no rigid body has such an inertia): "
            f"{', '.join(shown)}{more}; kept as given (as Pinocchio); strict=False projects "
            "them onto the nearest valid inertias, strict=True refuses them"
        )


def _repair(where, inert, why, eig) -> None:
    old = inert.inertia
    new = project_inertia(old)
    inert.inertia = new
    d = float(np.linalg.norm(new - old))
    rel = d / max(float(np.linalg.norm(old)), 1e-300)
    _warn(
        f"{where}: {why} (principal moments {eig.tolist()}); replaced by the nearest physically "
        f"valid inertia (strict=False): correction {d:.3g} in Frobenius norm ({rel:.1%} of the "
        f"inertia), principal moments now {np.linalg.eigvalsh(new).tolist()}"
    )


def _link_ref(el: ET.Element, tag: str, where: str) -> str:
    ref = _one(el, tag, where)
    if ref is None:
        raise ValueError(f"{where}: missing <{tag}>")
    link = ref.get("link")
    if link is None or not link.strip():
        raise ValueError(f"{where} <{tag}>: missing link attribute")
    return link


def _parse_joint(el: ET.Element, index: int) -> URDFJoint:
    name = _name(el, index)
    where = f'URDF <joint name="{name}">'
    jtype = el.get("type")
    if jtype is None:
        raise ValueError(f"{where}: missing type attribute")
    if jtype == "planar":
        raise ValueError(f"{where}: joint type 'planar' is not supported")
    if jtype not in JOINT_TYPES:
        raise ValueError(f"{where}: unknown joint type {jtype!r} (expected one of {JOINT_TYPES})")
    parent, child = _link_ref(el, "parent", where), _link_ref(el, "child", where)
    if parent == child:
        raise ValueError(f"{where}: parent and child are the same link {parent!r}")
    xyz, rpy = _origin(el, where)
    axis = np.array([1.0, 0.0, 0.0])
    ael = _one(el, "axis", where)
    if ael is not None:
        text = ael.get("xyz")
        if text is None:
            raise ValueError(f"{where} <axis>: missing xyz attribute")
        a = parse_numbers(text, 3, f"{where} <axis xyz>")
        big = float(np.max(np.abs(a)))
        if big > 0.0:  # scaled first: the norm of (0, 0, 1e200) overflowed to inf, axis 0
            a = a / big
        norm = float(np.linalg.norm(a))
        if norm > 0.0:
            axis = a / norm
        elif jtype in _AXIS_TYPES:
            raise ValueError(f"{where}: zero axis on a {jtype} joint")
        # a zero axis on fixed/floating/spherical joints is meaningless: keep the default
    mimic = None
    mel = _one(el, "mimic", where)
    if mel is not None:
        target = mel.get("joint")
        if target is None or not target.strip():
            raise ValueError(f"{where} <mimic>: missing joint attribute")
        mult = float(parse_numbers(mel.get("multiplier", "1"), 1, f"{where} <mimic multiplier>")[0])
        off = float(parse_numbers(mel.get("offset", "0"), 1, f"{where} <mimic offset>")[0])
        mimic = (target, mult, off)
    limit = None
    lel = _one(el, "limit", where)
    if lel is not None:

        def attr(key, default):
            v = lel.get(key)
            return default if v is None else float(parse_numbers(v, 1, f"{where} <limit {key}>")[0])

        inf = float("inf")
        lower, upper = attr("lower", -inf), attr("upper", inf)
        if jtype == "continuous":  # URDF: continuous joints have no position limits
            lower, upper = -inf, inf
        effort, velocity = attr("effort", inf), attr("velocity", inf)
        if lower > upper:
            _warn(f"{where} <limit>: lower {lower} > upper {upper}; position limits ignored")
            lower, upper = -inf, inf
        if effort < 0 or velocity < 0:
            _warn(f"{where} <limit>: negative effort or velocity; their absolute values are used")
            effort, velocity = abs(effort), abs(velocity)
        limit = (lower, upper, effort, velocity)
    dynamics = None
    del_ = _one(el, "dynamics", where)
    if del_ is not None:
        vals = []
        for key in ("damping", "friction"):
            v = del_.get(key)
            x = 0.0 if v is None else float(parse_numbers(v, 1, f"{where} <dynamics {key}>")[0])
            if x < 0:
                _warn(f"{where} <dynamics>: negative {key} {x}; its absolute value is used")
                x = abs(x)
            vals.append(x)
        dynamics = tuple(vals)
    return URDFJoint(name, jtype, parent, child, xyz, rpy, axis, mimic, limit, dynamics)


# --------------------------------------------------------------------------- topology
def _find_root(links: list[URDFLink], joints: list[URDFJoint]) -> str:
    """Check the joints form a single tree over all links; return its root link."""
    parent_joint: dict[str, URDFJoint] = {j.child: j for j in joints}
    roots = [l.name for l in links if l.name not in parent_joint]
    if len(roots) > 1:
        raise ValueError(
            f"URDF <robot>: more than one root link {roots} "
            "(the links form several disconnected trees)"
        )
    reached: set[str] = set()
    if roots:
        children: dict[str, list[str]] = {}
        for j in joints:
            children.setdefault(j.parent, []).append(j.child)
        stack = [roots[0]]
        while stack:
            n = stack.pop()
            reached.add(n)
            stack.extend(children.get(n, []))
    stray = [l.name for l in links if l.name not in reached]
    if stray:  # every stray link has exactly one parent: walking up must loop
        seen: list[str] = []
        seen_set: set[str] = set()
        n = stray[0]
        while n not in seen_set:
            seen.append(n)
            seen_set.add(n)
            n = parent_joint[n].parent
        cycle = seen[seen.index(n) :]
        names = [parent_joint[c].name for c in reversed(cycle)]
        lead = "no root link: " if not roots else ""
        raise ValueError(
            f'URDF <joint name="{names[0]}">: {lead}joints {names} form a '
            f"kinematic loop over links {list(reversed(cycle))}"
        )
    return roots[0]


# former private names (code written against them, e.g. in other branches)
_read_xml = read_xml
_numbers = parse_numbers


def parse_urdf(source: str | bytes | os.PathLike, strict: bool | None = None) -> URDFRobot:
    """Parse a URDF model.

    ``source`` is a path (str or os.PathLike), XML text (a str that starts with
    ``<`` after leading whitespace) or XML bytes. Raises ValueError, naming the
    offending element, on any malformed, unsupported or inconsistent input.

    ``strict``: ``None`` (default) loads what Pinocchio loads, with a
    :class:`jaxdyn.JaxdynWarning` for every repaired or dropped element; ``True`` makes those
    errors; ``False`` also repairs inertias that are not physically valid (see the module
    docstring for the table).
    """
    _check_strict(strict)
    root_el = read_xml(source)
    if root_el.tag != "robot":
        raise ValueError(f"URDF: root element is <{root_el.tag}>, expected <robot>")
    rname = root_el.get("name")
    if rname is None or not rname.strip():
        raise ValueError("URDF <robot>: missing or empty name attribute")

    links: list[URDFLink] = []
    joints: list[URDFJoint] = []
    seen_links: set[str] = set()
    seen_joints: set[str] = set()
    extra: list[ET.Element] = []
    for el in root_el:
        if el.tag == "link":
            link = _parse_link(el, len(links))
            if link.name in seen_links:
                raise ValueError(f'URDF <link name="{link.name}">: duplicate link name')
            seen_links.add(link.name)
            links.append(link)
        elif el.tag == "joint":
            joint = _parse_joint(el, len(joints))
            if joint.name in seen_joints:
                raise ValueError(f'URDF <joint name="{joint.name}">: duplicate joint name')
            seen_joints.add(joint.name)
            joints.append(joint)
        elif el.tag not in _IGNORED_TOP:
            extra.append(el)
    if not links:
        raise ValueError(f'URDF <robot name="{rname}">: no <link> elements')

    link_names = {l.name for l in links}
    joint_names = {j.name for j in joints}
    child_of: dict[str, str] = {}
    for j in joints:
        where = f'URDF <joint name="{j.name}">'
        for role, link in (("parent", j.parent), ("child", j.child)):
            if link not in link_names:
                raise ValueError(f"{where}: {role} link {link!r} does not exist")
        if j.child in child_of:
            raise ValueError(
                f"{where}: link {j.child!r} is already the child of joint "
                f"{child_of[j.child]!r} (a link can have only one parent)"
            )
        child_of[j.child] = j.name
        if j.mimic is not None:
            if j.mimic[0] == j.name:
                raise ValueError(f"{where} <mimic>: a joint cannot mimic itself")
            if j.mimic[0] not in joint_names:
                if strict is True:
                    raise ValueError(f"{where} <mimic>: joint {j.mimic[0]!r} does not exist")
                _warn(
                    f"{where} <mimic>: joint {j.mimic[0]!r} does not exist; the <mimic> is "
                    "dropped and the joint stays independent (as in Pinocchio); strict=True "
                    "makes this an error"
                )
                j.mimic = None
    root = _find_root(links, joints)
    _check_inertias(links, strict, rname)
    return URDFRobot(rname, links, joints, root, extra)

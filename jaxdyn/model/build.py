"""Compile a parsed URDF tree into a :class:`~jaxdyn.model.model.Model`.

Fixed joints are merged: the child link's inertia is added to the body it is welded to, and the
link (and the joint) stay available as frames for kinematics. With ``floating_base=True`` the
root link becomes a body attached to the world by a free joint named ``root_joint`` (as in
Pinocchio); otherwise the root link is the world.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import numpy as np

from .. import joints
from .model import Model, make_topology
from .urdf import URDFRobot, _check_strict, rpy_to_matrix

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt
    from jax.typing import DTypeLike

_KIND = {
    "revolute": joints.ONE_DOF,
    "continuous": joints.ONE_DOF,
    "prismatic": joints.ONE_DOF,
    "spherical": joints.SPHERICAL,
    "floating": joints.FREE,
}

ROOT_JOINT = "root_joint"


def _compose(A, B):
    (RA, pA), (RB, pB) = A, B
    return RA @ RB, RA @ pB + pA


def _finite(x) -> bool:
    return bool(np.all(np.isfinite(x)))


#: The largest magnitude of a model parameter (length, mass, inertia, armature, damping,
#: friction, gravity) that the URDF and MJCF loaders accept, per working dtype. The algorithms
#: multiply up to six of them (ABA's ``U D^-1 U^T`` is of order ``m^2 L^4``): with every
#: parameter within the bound, ``(1e50)^6 = 1e300`` stays inside float64's range and
#: ``(1e6)^6 = 1e36`` inside float32's, so ``rnea`` / ``aba`` of a loaded model cannot
#: overflow into NaN through the size of its numbers. Joint limits (``q_lower``, ``q_upper``,
#: ``effort_limit``, ``velocity_limit``) are not bounded (infinite means no limit).
MAGNITUDE_BOUND = {"float64": 1e50, "float32": 1e6}

#: the joint properties that may be infinite or beyond :data:`MAGNITUDE_BOUND` (no limit)
LIMITS = ("q_lower", "q_upper", "effort_limit", "velocity_limit")


def magnitude_bound(dtype: DTypeLike) -> float:
    """:data:`MAGNITUDE_BOUND` of the working ``dtype`` (float64's for anything wider)."""
    return MAGNITUDE_BOUND.get(np.dtype(dtype).name, MAGNITUDE_BOUND["float64"])


def x64_hint(dtype: DTypeLike) -> str:
    """The fix for a value float32 cannot take ("" in float64)."""
    if np.dtype(dtype) == np.float64:
        return ""
    return '; enable float64 first: jax.config.update("jax_enable_x64", True)'


def cast_params(
    params: dict,
    dtype: np.dtype,
    element: Callable[[str, int], str],
    unbounded: tuple = (),
    bounded: bool = False,
) -> dict:
    """The model parameters ``params`` (numpy) as JAX arrays of ``dtype`` (float32 unless
    ``jax_enable_x64``). A value that is not finite in ``dtype`` raises ``ValueError`` naming
    ``element(k, i)``, the file's element behind entry ``i`` of parameter ``k`` (a value
    ``dtype`` cannot hold would become inf, and the dynamics NaN), except the infinite entries
    of the parameters named in ``unbounded`` (no limit: joint ranges). With ``bounded`` a
    finite value beyond :func:`magnitude_bound` (whose products overflow in the algorithms)
    is refused the same way, except in ``unbounded``. Shared by the URDF and MJCF loaders."""
    leaves = {}
    bound = magnitude_bound(dtype)
    for k, x in params.items():
        x = np.asarray(x, float)
        with np.errstate(over="ignore"):
            y = x.astype(dtype)
        over = ~np.isfinite(y)
        if k in unbounded:
            over &= ~np.isinf(x)
        elif bounded:
            big = np.isfinite(y) & (np.abs(x) > bound)
            if np.any(big) and not np.any(over):
                i = int(np.argwhere(big)[0][0]) if big.ndim else 0
                raise ValueError(
                    f"{element(k, i)}: {too_big(k, float(np.max(np.abs(x[big]))), dtype)}"
                )
        if np.any(over):
            i = int(np.argwhere(over)[0][0]) if over.ndim else 0
            v = float(np.max(np.abs(x[over])))
            what = (
                "is not finite"
                if not np.isfinite(v)
                else f"is not representable in {dtype.name} (largest {np.finfo(dtype).max:.3g})"
            )
            raise ValueError(f"{element(k, i)}: {k} {v:.3g} {what}" + x64_hint(dtype))
        # device_put, not jnp.asarray: called eagerly, JAX 0.10's asarray of a numpy array
        # (lax.stage) compiles an XLA program per shape, each a first load of a model paid
        leaves[k] = jax.device_put(y)
    return leaves


def too_big(what: str, value: float, dtype: DTypeLike) -> str:
    """The message of a finite parameter beyond :func:`magnitude_bound`."""
    return (
        f"{what} {value:.3g} exceeds {magnitude_bound(dtype):g}, the largest magnitude jaxdyn "
        f"accepts in a {np.dtype(dtype).name} model (products of such numbers overflow in the "
        "dynamics algorithms: check the units)" + x64_hint(dtype)
    )


def _overflow(where: str, what: str) -> ValueError:
    return ValueError(
        f"{where}: {what} are not finite (the numbers of the file overflow double precision "
        "when combined); check the units and magnitudes"
    )


def depth_order(bodies: Sequence[dict]) -> tuple[list, dict]:
    """Order of the bodies (dicts with ``parent`` (earlier index or -1) and ``kind``): by depth,
    inside a level by (joint kind, parent's new index, given order), so that levels and kind
    groups are contiguous and parent indices are sorted. Returns the order (old indices) and
    the map old index -> new index."""
    depth = []
    for b in bodies:
        depth.append(0 if b["parent"] < 0 else depth[b["parent"]] + 1)
    by_depth = [[] for _ in range(max(depth, default=-1) + 1)]
    for i, d in enumerate(depth):
        by_depth[d].append(i)
    order, new_index = [], {}
    for at_d in by_depth:
        at_d.sort(key=lambda i: (bodies[i]["kind"], new_index.get(bodies[i]["parent"], -1), i))
        for i in at_d:
            new_index[i] = len(order)
            order.append(i)
    return order, new_index


class SortedTree(NamedTuple):
    """The bodies of a loader in depth order (:func:`depth_order`) and their arrays."""

    order: list  # old indices, in the new order
    new_index: dict  # old index -> new index
    parent: np.ndarray  # (nb,) new parent indices, -1 for the world
    kind: np.ndarray  # (nb,) joint kinds
    Xtree_R: np.ndarray  # (nb, 3, 3)
    Xtree_p: np.ndarray  # (nb, 3)

    def remap(self, b: int) -> int:
        """New index of old body ``b`` (-1, the world, stays -1)."""
        return -1 if b < 0 else self.new_index[b]


def sort_tree(bodies: Sequence[dict]) -> SortedTree:
    """:func:`depth_order` of the bodies (dicts with ``parent``, ``kind`` and ``X = (R, p)``,
    the joint's placement in the parent), with the topology and placement arrays in that
    order. Shared by the URDF and MJCF loaders."""
    order, new_index = depth_order(bodies)
    nb = len(bodies)
    parent = np.array(
        [-1 if bodies[o]["parent"] < 0 else new_index[bodies[o]["parent"]] for o in order], np.int64
    )
    kind = np.array([bodies[o]["kind"] for o in order], np.int64)
    Xtree_R = np.array([bodies[o]["X"][0] for o in order], float).reshape(nb, 3, 3)
    Xtree_p = np.array([bodies[o]["X"][1] for o in order], float).reshape(nb, 3)
    return SortedTree(order, new_index, parent, kind, Xtree_R, Xtree_p)


def model_params(
    tree: SortedTree,
    dof_axis: npt.ArrayLike,
    mass: npt.ArrayLike,
    com: npt.ArrayLike,
    inertia: npt.ArrayLike,
    frame_R: Sequence[Any] | np.ndarray,
    frame_p: npt.ArrayLike,
    gravity: npt.ArrayLike,
    **more: Any,
) -> dict:
    """The parameter arrays of a :class:`~jaxdyn.model.model.Model` (numpy, float64) in the
    order of ``tree``, the frames' placements as ``(nf, 3, 3)`` / ``(nf, 3)``; ``more``: the
    optional ones (joint properties, armature). Shared by the URDF and MJCF loaders, which
    then cast them (:func:`cast_params`)."""
    nf = len(frame_R)
    return dict(
        Xtree_R=tree.Xtree_R,
        Xtree_p=tree.Xtree_p,
        dof_axis=np.array(dof_axis, float).reshape(-1, 6),
        mass=mass,
        com=com,
        inertia=inertia,
        frame_R=np.array(frame_R, float).reshape(nf, 3, 3),
        frame_p=np.array(frame_p, float).reshape(nf, 3),
        gravity=gravity,
        **more,
    )


def build_model(
    robot: URDFRobot,
    floating_base: bool = False,
    gravity: Sequence[float] = (0.0, 0.0, -9.81),
    strict: bool | None = None,
) -> Model:
    """Compile a parsed :class:`URDFRobot` (see :func:`jaxdyn.load_urdf`)."""
    _check_strict(strict)
    g = np.asarray(gravity, float)
    if g.shape != (3,) or not _finite(g):
        raise ValueError(f"load_urdf: gravity must be 3 finite numbers, got {gravity!r}")
    links = {l.name: l for l in robot.links}
    children = {l.name: [] for l in robot.links}
    for j in robot.joints:
        children[j.parent].append(j)

    ident = (np.eye(3), np.zeros(3))
    # Depth-first walk in document order. Bodies are recorded as dicts; -1 is the world.
    bodies = []  # name, joint, kind, parent(dfs index), Xtree, axis(es)
    link_body = {}  # link -> (body dfs index, placement of link frame in body)
    joint_frames = []  # (joint name, body, placement)

    root = robot.root
    if floating_base:
        bodies.append(
            dict(link=root, joint=ROOT_JOINT, kind=joints.FREE, parent=-1, X=ident, axis=None)
        )
        link_body[root] = (0, ident)
    else:
        link_body[root] = (-1, ident)

    def add(j):
        """Record joint ``j`` (its parent link is placed already) and place its child link."""
        body, T = link_body[j.parent]
        with np.errstate(over="ignore", invalid="ignore"):
            Tj = _compose(T, (rpy_to_matrix(j.rpy), np.asarray(j.xyz, float)))
        if not (_finite(Tj[0]) and _finite(Tj[1])):
            raise _overflow(
                f'URDF <joint name="{j.name}"> <origin>',
                f"the placement of link {j.child!r} in its body (composed along the fixed "
                "joints above it)",
            )
        if j.type == "fixed":
            link_body[j.child] = (body, Tj)
            joint_frames.append((j.name, body, Tj))
            return
        if j.type not in _KIND:
            raise ValueError(f"URDF <joint name={j.name!r}>: unsupported joint type {j.type!r}")
        # <mimic> couplings belong to the cluster models (kinematic loops); on a plain tree the
        # joint stays independent, as in Pinocchio's default.
        kind = _KIND[j.type]
        axis = np.asarray(j.axis, float)
        if j.type == "prismatic":
            ax6 = np.concatenate([np.zeros(3), axis])
        else:
            ax6 = np.concatenate([axis, np.zeros(3)])
        bodies.append(
            dict(
                link=j.child,
                joint=j.name,
                kind=kind,
                parent=body,
                X=Tj,
                axis=ax6,
                limit=j.limit,
                dynamics=j.dynamics,
            )
        )
        link_body[j.child] = (len(bodies) - 1, ident)
        joint_frames.append((j.name, len(bodies) - 1, ident))

    # Pre-order depth-first walk with an explicit stack (no recursion: trees of any depth).
    stack = [iter(children[root])]
    while stack:
        j = next(stack[-1], None)
        if j is None:
            stack.pop()
            continue
        add(j)
        stack.append(iter(children[j.child]))
    # no moving joint and a fixed base: a zero-DoF model (nq = nv = nb = 0), every link a frame

    tree = sort_tree(bodies)
    order, new_index, parent, kind = tree.order, tree.new_index, tree.parent, tree.kind
    remap = tree.remap
    nb = len(bodies)
    dof_axis = []
    for o in order:
        b = bodies[o]
        if b["kind"] == joints.ONE_DOF:
            dof_axis.append(b["axis"])
        else:
            dof_axis.extend(np.eye(6)[: joints.NV[b["kind"]]])

    # inertias: accumulate (m, h, Ibar) of every link in its body's frame
    m_acc = np.zeros(nb)
    h_acc = np.zeros((nb, 3))
    I_acc = np.zeros((nb, 3, 3))
    body_links = [[] for _ in range(nb)]  # URDF links merged into each body
    for lname, (b, (R, p)) in link_body.items():
        inert = links[lname].inertial
        if b >= 0:
            body_links[new_index[b]].append(lname)
        if inert is None or b < 0:
            continue
        bi = new_index[b]
        with np.errstate(over="ignore", invalid="ignore"):
            Ri = rpy_to_matrix(inert.rpy)
            c = R @ np.asarray(inert.xyz, float) + p
            Ic = R @ Ri @ np.asarray(inert.inertia, float) @ Ri.T @ R.T
            m = float(inert.mass)
            C = skew(c)
            terms = (m * c, Ic - m * C @ C)
        if not all(_finite(x) for x in terms):
            with np.errstate(over="ignore"):
                dist = float(np.sqrt(np.sum(np.abs(c) ** 2)))
            raise _overflow(
                f'URDF <link name="{lname}"> <inertial>',
                f"its mass moments about its body's frame (mass {m:.3g}, centre of mass at "
                f"distance {dist:.3g})",
            )
        m_acc[bi] += m
        h_acc[bi] += terms[0]
        I_acc[bi] += terms[1]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # checked just below
        com, inertia = inertias_about_com(m_acc, h_acc, I_acc)
    for bi in range(nb):
        if not (_finite(m_acc[bi]) and _finite(com[bi]) and _finite(inertia[bi])):
            names = ", ".join(f'<link name="{n}">' for n in body_links[bi])
            raise _overflow(
                f"URDF {names} <inertial>", "the mass, centre of mass and inertia of their body"
            )

    # frames: every link, then every joint whose name is not already a frame
    frame_names, frame_parent, frame_R, frame_p = [], [], [], []
    frame_set: set[str] = set()
    for l in robot.links:
        b, (R, p) = link_body.get(l.name, (None, None))
        if b is None:  # pragma: no cover - parser guarantees connectivity
            continue
        frame_names.append(l.name)
        frame_set.add(l.name)
        frame_parent.append(remap(b))
        frame_R.append(R)
        frame_p.append(p)
    for name, b, (R, p) in joint_frames:
        if name in frame_set:
            continue
        frame_names.append(name)
        frame_set.add(name)
        frame_parent.append(remap(b))
        frame_R.append(R)
        frame_p.append(p)

    _warn_massless(robot, strict, order, bodies, parent, kind, m_acc, inertia, floating_base)

    topo = make_topology(
        name=robot.name,
        parent=parent,
        kind=kind,
        joint_names=[bodies[o]["joint"] for o in order],
        body_names=[bodies[o]["link"] for o in order],
        frame_names=frame_names,
        frame_parent=frame_parent,
        floating_base=floating_base,
        root_name=root,
    )
    props = _joint_properties(bodies, order)
    params = model_params(tree, dof_axis, m_acc, com, inertia, frame_R, frame_p, g, **props)
    dtype = jax.dtypes.canonicalize_dtype(np.float64)  # float32 unless jax_enable_x64
    leaves = cast_params(
        params,
        dtype,
        lambda k, i: "URDF " + _element(k, i, order, bodies, body_links, frame_names, topo),
        unbounded=LIMITS,  # no <limit>: infinite bounds
        bounded=True,
    )
    return Model(**leaves, topo=topo, x32_load=dtype != np.float64)


#: the URDF element of each joint property (:func:`_joint_properties`)
_PROPERTY_ELEMENT = {
    "q_lower": "<limit lower>",
    "q_upper": "<limit upper>",
    "effort_limit": "<limit effort>",
    "velocity_limit": "<limit velocity>",
    "damping": "<dynamics damping>",
    "friction": "<dynamics friction>",
}


def _joint_properties(bodies, order) -> dict:
    """``q_lower``/``q_upper (nq,)`` and ``effort_limit``/``velocity_limit``/``damping``/
    ``friction (nv,)`` from the joints' ``<limit>`` and ``<dynamics>`` (no limit: +-inf; no
    dynamics: 0; quaternion and free-joint coordinates: +-inf). Empty when the file gives no
    ``<limit>`` or ``<dynamics>`` at all (the model's fields stay ``None``)."""
    if not any(bodies[o].get("limit") or bodies[o].get("dynamics") for o in order):
        return {}
    inf = np.inf
    lo, hi, eff, vel, damp, fric = [], [], [], [], [], []
    for o in order:
        b = bodies[o]
        nq, nv = joints.NQ[b["kind"]], joints.NV[b["kind"]]
        limit = b.get("limit") or (-inf, inf, inf, inf)
        dyn = b.get("dynamics") or (0.0, 0.0)
        if b["kind"] == joints.ONE_DOF:
            lo.append(limit[0])
            hi.append(limit[1])
        else:
            lo.extend([-inf] * nq)
            hi.extend([inf] * nq)
            limit, dyn = (-inf, inf, inf, inf), (0.0, 0.0)
        eff.extend([limit[2]] * nv)
        vel.extend([limit[3]] * nv)
        damp.extend([dyn[0]] * nv)
        fric.extend([dyn[1]] * nv)
    return dict(
        q_lower=lo, q_upper=hi, effort_limit=eff, velocity_limit=vel, damping=damp, friction=fric
    )


def _element(leaf, i, order, bodies, body_links, frame_names, topo) -> str:
    """The URDF element behind entry ``i`` of the parameter ``leaf``."""
    if leaf in ("Xtree_R", "Xtree_p"):
        return f'<joint name="{bodies[order[i]]["joint"]}"> <origin>'
    if leaf in _PROPERTY_ELEMENT:  # per configuration or velocity coordinate
        start = topo.q_start if leaf in ("q_lower", "q_upper") else topo.v_start
        b = int(np.searchsorted(start, i, side="right")) - 1
        return f'<joint name="{bodies[order[b]]["joint"]}"> {_PROPERTY_ELEMENT[leaf]}'
    if leaf in ("mass", "com", "inertia"):
        return " ".join(f'<link name="{n}">' for n in body_links[i]) + " <inertial>"
    if leaf in ("frame_R", "frame_p"):
        return f"frame {frame_names[i]!r} (link or joint) <origin>"
    return "<robot>"


def _warn_massless(robot, strict, order, bodies, parent, kind, mass, inertia, floating_base):
    """Warn (``strict=True``: raise) about moving joints whose subtree has no mass (a prismatic
    or free joint) or neither mass nor rotational inertia (revolute, spherical): the mass
    matrix is then singular."""
    nb = len(order)
    m_sub = np.array(mass, float)
    tr_sub = np.array([np.trace(I) for I in inertia], float) if nb else np.zeros(0)
    for b in range(nb - 1, -1, -1):  # children come after their parents
        if parent[b] >= 0:
            m_sub[parent[b]] += m_sub[b]
            tr_sub[parent[b]] += tr_sub[b]
    bad = []
    for b in range(nb):
        rot_only = kind[b] == joints.SPHERICAL or (
            kind[b] == joints.ONE_DOF and np.linalg.norm(bodies[order[b]]["axis"][:3]) > 0
        )
        if m_sub[b] <= 0 and (not rot_only or tr_sub[b] <= 0):
            bad.append(bodies[order[b]]["joint"])
    if not bad:
        return
    names = bad if len(bad) <= 12 else bad[:12] + [f"... ({len(bad)} in all)"]
    msg = (
        f"URDF <robot name={robot.name!r}>: moving joints {names} carry subtrees without mass"
        " (or, for rotations, without inertia): the mass matrix is singular, so aba, minv,"
        " aba_derivatives and the Delassus matrix return NaN (as Pinocchio does); add armature"
        " (model.with_armature(1e-6), or per coordinate) or give the links an <inertial>"
    )
    if strict is True:
        raise ValueError(msg + "; strict=True makes this an error")
    from ..errors import warn

    warn(msg)


def skew(w: Sequence[float] | np.ndarray) -> np.ndarray:
    """``[w]x`` of a 3-vector in numpy (model building and numpy references): ``skew(w) @ x``
    is ``np.cross(w, x)``."""
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def inertias_about_com(
    m_acc: np.ndarray, h_acc: np.ndarray, I_acc: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each body's centre of mass and rotational inertia about it, ``(com (nb, 3), Ic (nb, 3,
    3))``, from its accumulated mass, first moment ``h = m c`` and rotational inertia ``I``
    about its origin (``Ic = I + m [c]x [c]x``); a massless body's centre is its origin."""
    nb = len(m_acc)
    com = np.where(m_acc[:, None] > 0, h_acc / np.where(m_acc > 0, m_acc, 1.0)[:, None], 0.0)
    Ic = [I_acc[i] + m_acc[i] * skew(com[i]) @ skew(com[i]) for i in range(nb)]
    return com, np.array(Ic, float).reshape(nb, 3, 3)

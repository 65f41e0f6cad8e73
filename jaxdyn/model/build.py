"""Compile a parsed URDF tree into a :class:`~jaxdyn.model.model.Model`.

Fixed joints are merged: the child link's inertia is added to the body it is welded to, and the
link (and the joint) stay available as frames for kinematics. With ``floating_base=True`` the
root link becomes a body attached to the world by a free joint named ``root_joint`` (as in
Pinocchio); otherwise the root link is the world.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import joints
from .model import Model, make_topology
from .urdf import URDFRobot, parse_urdf, rpy_to_matrix

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


def load_urdf(source, floating_base: bool = False, gravity=(0.0, 0.0, -9.81)) -> Model:
    """Load a URDF file (path) or URDF XML text into a :class:`Model`.

    **Arguments:**

    - ``source``: path to a ``.urdf`` file, or the XML text itself.
    - ``floating_base``: attach the root link to the world by a free joint ``root_joint`` with
      ``q = [x, y, z, qw, qx, qy, qz]`` and ``v = [ω; v]`` in base coordinates.
    - ``gravity``: world gravity vector.

    **Returns:** the compiled :class:`Model`. Malformed input raises ``ValueError`` naming the
    URDF element at fault.
    """
    robot = parse_urdf(source)
    return build_model(robot, floating_base=floating_base, gravity=gravity)


def build_model(robot: URDFRobot, floating_base: bool = False, gravity=(0.0, 0.0, -9.81)) -> Model:
    """Compile a parsed :class:`URDFRobot` (see :func:`load_urdf`)."""
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
        Tj = _compose(T, (rpy_to_matrix(j.rpy), np.asarray(j.xyz, float)))
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
        bodies.append(dict(link=j.child, joint=j.name, kind=kind, parent=body, X=Tj, axis=ax6))
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
    if len(bodies) == 0:
        raise ValueError(
            f"URDF <robot name={robot.name!r}>: no moving joint; nothing to simulate "
            "(use floating_base=True for a single free body)"
        )

    # Sort by depth; inside a level by (joint kind, parent's new index, URDF depth-first order),
    # so that levels and kind groups are contiguous and parent indices are sorted.
    depth = []
    for b in bodies:
        depth.append(0 if b["parent"] < 0 else depth[b["parent"]] + 1)
    by_depth = [[] for _ in range(max(depth) + 1)]
    for i, d in enumerate(depth):
        by_depth[d].append(i)
    order, new_index = [], {}
    for at_d in by_depth:
        at_d.sort(key=lambda i: (bodies[i]["kind"], new_index.get(bodies[i]["parent"], -1), i))
        for i in at_d:
            new_index[i] = len(order)
            order.append(i)
    nb = len(bodies)

    def remap(b):
        return -1 if b < 0 else new_index[b]

    parent = np.array([remap(bodies[o]["parent"]) for o in order], np.int64)
    kind = np.array([bodies[o]["kind"] for o in order], np.int64)

    Xtree_R = np.stack([bodies[o]["X"][0] for o in order])
    Xtree_p = np.stack([bodies[o]["X"][1] for o in order])
    dof_axis = []
    for o in order:
        b = bodies[o]
        if b["kind"] == joints.ONE_DOF:
            dof_axis.append(b["axis"])
        else:
            dof_axis.extend(np.eye(6)[: joints.NV[b["kind"]]])
    dof_axis = np.array(dof_axis, float).reshape(-1, 6)

    # inertias: accumulate (m, h, Ibar) of every link in its body's frame
    m_acc = np.zeros(nb)
    h_acc = np.zeros((nb, 3))
    I_acc = np.zeros((nb, 3, 3))
    for lname, (b, (R, p)) in link_body.items():
        inert = links[lname].inertial
        if inert is None or b < 0:
            continue
        bi = new_index[b]
        Ri = rpy_to_matrix(inert.rpy)
        c = R @ np.asarray(inert.xyz, float) + p
        Ic = R @ Ri @ np.asarray(inert.inertia, float) @ Ri.T @ R.T
        m = float(inert.mass)
        C = _skew(c)
        m_acc[bi] += m
        h_acc[bi] += m * c
        I_acc[bi] += Ic - m * C @ C
    com = np.where(m_acc[:, None] > 0, h_acc / np.where(m_acc > 0, m_acc, 1.0)[:, None], 0.0)
    inertia = np.stack([I_acc[i] + m_acc[i] * _skew(com[i]) @ _skew(com[i]) for i in range(nb)])

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
    return Model(
        Xtree_R=jnp.asarray(Xtree_R),
        Xtree_p=jnp.asarray(Xtree_p),
        dof_axis=jnp.asarray(dof_axis),
        mass=jnp.asarray(m_acc),
        com=jnp.asarray(com),
        inertia=jnp.asarray(inertia),
        frame_R=jnp.asarray(np.stack(frame_R)),
        frame_p=jnp.asarray(np.stack(frame_p)),
        gravity=jnp.asarray(np.asarray(gravity, float)),
        topo=topo,
    )


def _skew(w):
    return np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])

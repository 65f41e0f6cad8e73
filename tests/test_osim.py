"""Constraints, the Delassus matrix (PV-OSIMr, PV-OSIM, EFPA, LTL, dense) and constrained
forward dynamics, float64.

References are computed independently of jaxdyn, with Pinocchio: constraint Jacobians from
Pinocchio's joint Jacobians (shifted to the constraint point and rotated here, in numpy; the
Pinocchio model is built joint by joint from the jaxdyn model, so spherical / free joints and
frames without a URDF link work too), ``M`` and ``h`` from Pinocchio, ``J M^-1 J^T`` and KKT
systems with numpy solves, velocities and drifts from Pinocchio's ``forwardKinematics``; and
Pinocchio's ``computeDelassusMatrix`` / ``constraintDynamics`` through the converter
(Pinocchio orders 6D rows ``[linear; angular]``; its ``computeDelassusMatrix`` treats
``LOCAL_WORLD_ALIGNED`` constraints as ``LOCAL`` in pin 4.1, so world-aligned sets are compared
with ``J_pin M_pin^-1 J_pin^T`` from ``getConstraintJacobian``). Agreement:
``max|x - ref| <= 1e-10 max(1, max|ref|)``.

Compile time dominates: each (robot, constraint set) is one jitted, vmapped function that
returns every method at two states (module-scope caches).
"""

from __future__ import annotations

import functools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import jaxdyn
from jaxdyn import robots, shell
from jaxdyn.constraints import (
    Connect,
    Weld,
    constraint_drift,
    constraint_error,
    constraint_velocity,
    link_constraint_matrices,
)
from jaxdyn.interop.pinocchio import Converter, build_pinocchio_model
from jaxdyn.osim import METHODS, constrained_aba, delassus

from oracle import assert_close, robot_params, sym_upper

RTOL = 1e-10
NSTATES = 2


# =========================================================================== test robots
def hand_urdf(n_fingers=5, seed=0) -> str:
    """A palm with ``n_fingers`` fingers (thumb: 3 links, the others 4), revolute joints
    (abduction about z, then flexion about y), a fixed ``tip{i}`` link at each fingertip."""
    rng = np.random.default_rng(seed)

    def inertial(mass, length):
        d = rng.uniform(0.5, 1.5, 3) * mass * length**2 / 12 + 2e-5
        c = rng.uniform(-0.2, 0.2, 3) * length
        return (
            f'<inertial><origin xyz="{c[0]} {c[1]} {c[2] + length / 2}" rpy="0 0 0"/>'
            f'<mass value="{mass}"/><inertia ixx="{d[0]}" ixy="0" ixz="0" iyy="{d[1]}" '
            f'iyz="0" izz="{d[2]}"/></inertial>'
        )

    out = [
        '<?xml version="1.0"?><robot name="hand">',
        f'<link name="palm">{inertial(0.4, 0.1)}</link>',
    ]
    for i in range(n_fingers):
        n_links = 3 if i == 0 else 4
        parent = "palm"
        y = -0.04 + 0.02 * i
        for j in range(n_links):
            length = 0.05 - 0.006 * j
            link = f"f{i}_{j}"
            out.append(f'<link name="{link}">{inertial(0.1 - 0.015 * j, length)}</link>')
            xyz = f"0.03 {y} 0.1" if j == 0 else f"0 0 {0.05 - 0.006 * (j - 1)}"
            rpy = "0.3 0 -0.8" if (i == 0 and j == 0) else "0 0 0"
            axis = "0 0 1" if j == 0 else "0 1 0"
            out.append(
                f'<joint name="j{i}_{j}" type="revolute"><parent link="{parent}"/>'
                f'<child link="{link}"/><origin xyz="{xyz}" rpy="{rpy}"/>'
                f'<axis xyz="{axis}"/><limit lower="-2" upper="2" effort="1" '
                f'velocity="1"/></joint>'
            )
            parent = link
        out.append(
            f'<link name="tip{i}"/><joint name="tip{i}_joint" type="fixed">'
            f'<parent link="{parent}"/><child link="tip{i}"/>'
            f'<origin xyz="0.005 0 {length}" rpy="0 0 0"/></joint>'
        )
    out.append("</robot>")
    return "".join(out)


SOLO_FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")
SOLE = ((0.1, 0.05), (0.1, -0.05), (-0.1, 0.05), (-0.1, -0.05))  # talos sole corners


def _sole_points(ref):
    return tuple(
        Connect(f, ref, offset=(x, y, -0.01))
        for f in ("left_sole_link", "right_sole_link")
        for x, y in SOLE
    )


def _rot(seed):
    A = np.random.default_rng(seed).normal(size=(3, 3))
    Q, R = np.linalg.qr(A)
    Q = Q * np.sign(np.diag(R))
    return Q if np.linalg.det(Q) > 0 else -Q


#: name -> (robot loader key, constraint set)
CASES = {
    "solo12_feet3d": ("solo12", tuple(Connect(f) for f in SOLO_FEET)),
    "solo12_mixed": (
        "solo12",
        (
            Weld("FL_FOOT", "local", offset=(0.01, 0.02, -0.03), rotation=_rot(1)),
            Connect("HR_FOOT", "world_aligned", offset=(0.02, 0.0, 0.01)),
            Weld("FR_FOOT", "world_aligned", offset=(0.0, 0.01, 0.0)),
            Connect("FL_FOOT", "local", offset=(0.0, -0.02, 0.0)),  # two constraints on one link
            Connect("FL_UPPER_LEG", "local"),  # an end effector with a constrained descendant
            Weld("base_link", "local", offset=(0.1, 0.0, 0.0)),  # on the floating base
        ),
    ),
    "solo12_independent": (
        "solo12",
        (
            Connect("FL_FOOT", "local", offset=(0.01, 0.02, -0.03)),
            Connect("HR_FOOT", "world_aligned", offset=(0.02, 0.0, 0.01)),
            Weld("base_link", "local", offset=(0.05, -0.02, 0.01), rotation=_rot(2)),
            Connect("HL_FOOT", "local", offset=(0.0, -0.02, 0.0)),
        ),
    ),
    "talos_feet6d": ("talos_full", (Weld("left_sole_link"), Weld("right_sole_link"))),
    "talos_feet4x3d": ("talos_full", _sole_points("local")),
    "talos_feet4x3d_wa": (
        "talos_full",
        _sole_points("local_world_aligned")
        + (
            Weld("gripper_left_fingertip_3_link", "world_aligned"),
            Connect("arm_right_7_link", "local", offset=(0.0, 0.0, -0.1)),
        ),
    ),
    "hand_tips": ("hand", tuple(Connect(f"tip{i}") for i in range(5))),
    "hand_float_redundant": (
        "hand_float",
        tuple(
            Connect("tip2", "local", offset=o)
            for o in ((0.0, 0.0, 0.0), (0.01, 0.0, 0.0), (0.0, 0.01, 0.0), (0.0, 0.0, 0.01))
        )
        + (Connect("tip0", "world_aligned"), Weld("tip4", "local")),
    ),
    "hand_float_tips": (
        "hand_float",
        tuple(Connect(f"tip{i}", "world_aligned", offset=(0.0, 0.003 * i, 0.0)) for i in range(5))
        + (Weld("f2_1"), Connect("f2_2", offset=(0.01, 0.0, 0.0))),
    ),
}


@functools.cache
def get_model(key):
    if key == "hand":
        return jaxdyn.load_urdf(hand_urdf(), floating_base=False)
    if key == "hand_float":
        return jaxdyn.load_urdf(hand_urdf(), floating_base=True)
    if key.startswith("tree"):
        return random_tree(key)
    return robots.load(key)


class PinCase:
    """Pinocchio's model of a robot (from the same URDF file) and the converter."""

    def __init__(self, key):
        path, floating = robots.resolve(key)
        self.model = get_model(key)
        self.pin_model = (
            pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())
            if floating
            else pin.buildModelFromUrdf(str(path))
        )
        self.conv = Converter(self.model, self.pin_model)

    def frame_id(self, name):
        pm = self.pin_model
        for t in (pin.FrameType.BODY, pin.FrameType.FIXED_JOINT, pin.FrameType.JOINT):
            if pm.existFrame(name, t):
                return pm.getFrameId(name, t)
        raise KeyError(name)


@functools.cache
def pin_case(key):
    return PinCase(key)


# random trees (urdf route, or with spherical / floating joints) and random constraint sets
TREES = {
    "tree_a": dict(n=10, seed=3, floating=True, joint_types=("revolute", "prismatic")),
    "tree_b": dict(
        n=12, seed=5, floating=False, joint_types=("revolute", "prismatic", "spherical", "floating")
    ),
    "tree_c": dict(n=14, seed=11, floating=True, joint_types=("revolute", "spherical")),
    "tree_grad": dict(n=6, seed=6, floating=True, joint_types=("revolute", "prismatic")),
}


@functools.cache
def random_tree(key):
    """A random tree whose mass matrix is well conditioned at the test states (seeds tried
    deterministically)."""
    p = TREES[key]
    for k in range(20):
        xml = robots.random_urdf(
            p["n"],
            p["seed"] + 7919 * k,
            joint_types=p["joint_types"],
            p_fixed=0.2,
            massless_prob=0.0,
            branching=0.6,
        )
        model = jaxdyn.load_urdf(xml, floating_base=p["floating"])
        pm = build_pinocchio_model(model)
        conv = Converter(model, pm)
        ok = True
        for i in range(NSTATES):
            q = conv.q_to_pin(
                np.asarray(jaxdyn.random_configuration(model, jax.random.PRNGKey(7 + i)))
            )
            ev = np.linalg.eigvalsh(sym_upper(pin.crba(pm, pm.createData(), q)))
            ok &= bool(ev[0] > 1e-6 * ev[-1])
        if ok:
            return model
    raise RuntimeError(f"no well-conditioned random tree for {key}")


def random_constraints(model, seed, n):
    """``n`` random constraints on random moving frames (types, references, offsets,
    rotations; repeated frames allowed)."""
    rng = np.random.default_rng(seed)
    t = model.topo
    frames = [f for f in range(len(t.frame_names)) if t.frame_parent[f] >= 0]
    out = []
    for i in range(n):
        f = t.frame_names[frames[int(rng.integers(len(frames)))]]
        ref = ("local", "local_world_aligned")[int(rng.integers(2))]
        off = tuple(rng.uniform(-0.2, 0.2, 3))
        if rng.random() < 0.4:
            out.append(Weld(f, ref, offset=off, rotation=_rot(seed * 100 + i)))
        else:
            out.append(Connect(f, ref, offset=off))
    return tuple(out)


for _k, _n in (("tree_a", 4), ("tree_b", 5), ("tree_c", 6)):
    CASES[f"{_k}_random"] = (_k, ("random", _k, _n))


def case_constraints(name):
    key, cs = CASES[name]
    if isinstance(cs, tuple) and cs and cs[0] == "random":
        _, k, n = cs
        return random_constraints(get_model(key), TREES[k]["seed"], n)
    return cs


@functools.cache
def states(key, n=NSTATES):
    model = get_model(key)
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    qs = np.stack(
        [
            np.asarray(jaxdyn.random_configuration(model, jax.random.PRNGKey(7 + i)))
            for i in range(n)
        ]
    )
    return dict(q=qs, v=rng.normal(size=(n, model.nv)), tau=rng.normal(size=(n, model.nv)))


# =========================================================================== jaxdyn side
def _all_delassus(model, q, cs):
    """All methods sharing one world state and articulated-inertia pass (internal entry
    points: a smaller program to compile than five calls of the public function, which
    ``test_public_delassus`` covers)."""
    from jaxdyn import constraints as C
    from jaxdyn.algorithms import aba as A
    from jaxdyn.algorithms import kinematics as kin
    from jaxdyn.osim.delassus import delassus_world
    from jaxdyn.osim.inertia import articulated_inertias_packed, world_inertias_packed

    lay = C.layout(model.topo, cs)
    model, q, _ = shell.prepare(model, "test", q)
    ws = kin.world_state(model, q)
    K = C.rows_from_placements(lay, C.placements_from_state(model, ws, lay))
    # the packed articulated-inertia pass that jaxdyn.delassus uses
    inertias = articulated_inertias_packed(model, ws.S, world_inertias_packed(ws))
    out = {m: delassus_world(model, ws, lay, K, m, inertias) for m in METHODS}
    # and the ABA pass that constrained_aba shares with PV-OSIMr
    out["pv_osimr_aba"] = delassus_world(
        model,
        ws,
        lay,
        K,
        "pv_osimr",
        A.articulated_inertias(model, ws.S, A.world_inertia_matrices(ws)),
    )
    out["J"] = C.jacobian_from_rows(model, ws, lay, K)
    return out


@functools.cache
def jaxdyn_results(name):
    """Every Delassus method at every state: one jitted, vmapped program per case. The
    ``PUBLIC`` case goes through the public ``jaxdyn.delassus`` / ``constraint_jacobian``."""
    key, _ = CASES[name]
    model, cs = get_model(key), case_constraints(name)
    if name == PUBLIC:

        def all_public(q):
            out = {m: jaxdyn.delassus(model, q, cs, method=m) for m in METHODS}
            out["J"] = jaxdyn.constraint_jacobian(model, q, cs)
            out["default"] = jaxdyn.delassus(model, q, cs)
            return out

        f = jax.jit(jax.vmap(all_public))
    else:
        f = jax.jit(jax.vmap(lambda q: _all_delassus(model, q, cs)))
    return jax.tree_util.tree_map(np.asarray, f(jnp.asarray(states(key)["q"])))


PUBLIC = "hand_tips"


# =========================================================================== references
@functools.cache
def pin_built(key):
    """Pinocchio model built joint by joint from the jaxdyn model (works for spherical / free
    joints; joints matched by name through the converter)."""
    model = get_model(key)
    pm = build_pinocchio_model(model)
    return pm, Converter(model, pm)


def _point_data(key, c, data):
    """Joint id, joint placement, constraint frame rotation and the point in joint
    coordinates of constraint ``c`` (from the model's static frame data)."""
    model = get_model(key)
    f = model.frame_index(c.frame)
    jid = pin_built(key)[1].pin_joint_ids[int(model.topo.frame_parent[f])]
    oMi = data.oMi[jid]
    Rf, pf = np.asarray(model.frame_R[f]), np.asarray(model.frame_p[f])
    Roff = np.eye(3) if c.rotation is None else np.asarray(c.rotation)
    r = Rf @ np.asarray(c.offset) + pf  # point in joint coordinates
    Rc = oMi.rotation @ Rf @ Roff  # constraint frame in the world
    return jid, oMi, Rc, r


def reference_delassus(key, q, cs):
    """``J`` and ``J M^-1 J^T`` from Pinocchio's joint Jacobians (LOCAL_WORLD_ALIGNED,
    shifted to the constraint point and rotated here) and Pinocchio's CRBA."""
    pm, conv = pin_built(key)
    data = pm.createData()
    qp = conv.q_to_pin(np.asarray(q))
    M = conv.matrix_from_pin(sym_upper(pin.crba(pm, pm.createData(), qp)))
    pin.computeJointJacobians(pm, data, qp)
    rows = []
    for c in cs:
        jid, oMi, Rc, r = _point_data(key, c, data)
        Jj = conv.jacobian_from_pin(
            np.array(pin.getJointJacobian(pm, data, jid, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED))
        )
        w, v = Jj[:3], Jj[3:]
        rw = oMi.rotation @ r
        vp = v - np.cross(rw, w.T).T  # v + w x r
        A = Rc.T if c.reference == "local" else np.eye(3)
        rows.append(np.concatenate([A @ w, A @ vp]) if c.dim == 6 else A @ vp)
    J = np.concatenate(rows)
    return J, J @ np.linalg.solve(M, J.T)


def reference_placements(key, q, cs):
    """World placement of each constraint frame (targets), as ``Weld.target`` /
    ``Connect.target`` values."""
    pm, conv = pin_built(key)
    data = pm.createData()
    pin.forwardKinematics(pm, data, conv.q_to_pin(np.asarray(q)))
    out = []
    for c in cs:
        jid, oMi, Rc, r = _point_data(key, c, data)
        p = oMi.rotation @ r + oMi.translation
        out.append((Rc, p) if c.dim == 6 else p)
    return tuple(out)


def reference_dynamics(key, q, v):
    """``M`` and ``h = C v + g`` from Pinocchio."""
    pm, conv = pin_built(key)
    data = pm.createData()
    qp, vp = conv.q_to_pin(np.asarray(q)), conv.v_to_pin(np.asarray(v))
    M = conv.matrix_from_pin(sym_upper(pin.crba(pm, data, qp)))
    h = conv.v_from_pin(pin.rnea(pm, data, qp, vp, np.zeros(pm.nv)).copy())
    return M, h


def reference_kinematics(key, q, v, cs):
    """Constraint velocity ``J v`` and drift ``Jdot v`` from Pinocchio's joint velocities and
    accelerations at ``a = 0`` (Pinocchio's conventions: spatial acceleration of weld frames,
    classical acceleration of connect points)."""
    pm, conv = pin_built(key)
    data = pm.createData()
    pin.forwardKinematics(
        pm, data, conv.q_to_pin(np.asarray(q)), conv.v_to_pin(np.asarray(v)), np.zeros(pm.nv)
    )
    vel, acc = [], []
    for c in cs:
        jid, oMi, Rc, r = _point_data(key, c, data)
        w, vl = data.v[jid].angular, data.v[jid].linear  # joint frame
        al, al_lin = data.a[jid].angular, data.a[jid].linear
        vpt = vl + np.cross(w, r)
        a_spatial = al_lin + np.cross(al, r)
        a_classical = a_spatial + np.cross(w, vpt)
        A = (Rc.T if c.reference == "local" else np.eye(3)) @ oMi.rotation
        if c.dim == 6:
            vel.append(np.concatenate([A @ w, A @ vpt]))
            acc.append(np.concatenate([A @ al, A @ a_spatial]))
        else:
            vel.append(A @ vpt)
            acc.append(A @ a_classical)
    return np.concatenate(vel), np.concatenate(acc)


def _pin_perm(cs):
    perm, r = [], 0
    for c in cs:
        perm += [r + 3, r + 4, r + 5, r, r + 1, r + 2] if c.dim == 6 else [r, r + 1, r + 2]
        r += c.dim
    return np.asarray(perm)


def pin_constraint_models(case, cs):
    pm = case.pin_model
    models = pin.StdVec_RigidConstraintModel()
    for c in cs:
        fr = pm.frames[case.frame_id(c.frame)]
        Roff = np.eye(3) if c.rotation is None else np.asarray(c.rotation)
        placement = fr.placement * pin.SE3(Roff, np.asarray(c.offset))
        ref = (
            pin.ReferenceFrame.LOCAL
            if c.reference == "local"
            else pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
        )
        ct = pin.ContactType.CONTACT_6D if c.dim == 6 else pin.ContactType.CONTACT_3D
        models.append(pin.RigidConstraintModel(ct, pm, fr.parentJoint, placement, ref))
    datas = pin.StdVec_RigidConstraintData()
    for cm in models:
        datas.append(cm.createData())
    return models, datas


def pin_delassus(case, cs, q):
    """Pinocchio's Delassus matrix in jaxdyn's row order: ``computeDelassusMatrix`` for
    LOCAL sets, ``J_pin M_pin^-1 J_pin^T`` otherwise."""
    pm, conv = case.pin_model, case.conv
    data = pm.createData()
    qp = conv.q_to_pin(np.asarray(q))
    models, datas = pin_constraint_models(case, cs)
    D = pin.computeDelassusMatrix(pm, data, qp, models, datas, 0.0)
    perm = _pin_perm(cs)
    if all(c.reference == "local" for c in cs):
        return D[np.ix_(perm, perm)]
    pin.computeJointJacobians(pm, data, qp)
    pin.updateFramePlacements(pm, data)
    J = np.concatenate(
        [pin.getConstraintJacobian(pm, data, cm, cd) for cm, cd in zip(models, datas)]
    )
    M = sym_upper(pin.crba(pm, data, qp))
    return (J @ np.linalg.solve(M, J.T))[np.ix_(perm, perm)]


# =========================================================================== tests
# slow: [tree_b_random], [tree_c_random] (tree_a_random stays) and [solo12_independent]
# (solo12_mixed has its joint kinds and frames and more); talos cases: the robot tier
@pytest.mark.parametrize(
    "name",
    robot_params(*CASES, slow=("tree_b_random", "tree_c_random", "solo12_independent")),
)
def test_delassus_methods_against_reference(name):
    """Every method (and ``constraint_jacobian``) against ``J M^-1 J^T`` from Pinocchio's
    joint Jacobians and CRBA."""
    key, _ = CASES[name]
    cs = case_constraints(name)
    res = jaxdyn_results(name)
    m = sum(c.dim for c in cs)
    for i in range(NSTATES):
        q = states(key)["q"][i]
        J, D = reference_delassus(key, q, cs)
        assert D.shape == (m, m)
        assert_close(res["J"][i], J, RTOL, err_msg=f"{name} state {i}: J")
        extra = ("default",) if name == PUBLIC else ("pv_osimr_aba",)
        for meth in METHODS + extra:
            assert_close(res[meth][i], D, RTOL, err_msg=f"{name} state {i}: {meth}")
            if meth in ("pv_osimr", "efpa"):  # assembled from the upper triangle, mirrored
                assert np.array_equal(res[meth][i], res[meth][i].T), f"{name}: {meth} symmetry"


PIN_CASES = ("solo12_feet3d", "solo12_mixed", "talos_feet6d", "talos_feet4x3d", "talos_feet4x3d_wa")


@pytest.mark.parametrize("name", robot_params(*PIN_CASES))
def test_delassus_against_pinocchio(name):
    key, _ = CASES[name]
    case, cs = pin_case(key), case_constraints(name)
    res = jaxdyn_results(name)
    for i in range(NSTATES):
        ref = pin_delassus(case, cs, states(key)["q"][i])
        for meth in ("pv_osimr", "ltl"):
            assert_close(res[meth][i], ref, RTOL, err_msg=f"{name} state {i}: {meth} vs pin")


def test_converter_constraint_models():
    """``Converter.constraint_models_to_pin`` (built from jaxdyn's frame data) equals the
    models built here from Pinocchio's own URDF frames, and its row map takes jaxdyn's
    Delassus matrix to Pinocchio's ``computeDelassusMatrix``."""
    for name in ("solo12_mixed", "talos_feet4x3d_wa"):
        key, _ = CASES[name]
        case, cs = pin_case(key), case_constraints(name)
        ours, _ = case.conv.constraint_models_to_pin(cs)
        ref, _ = pin_constraint_models(case, cs)
        for c, a, b in zip(cs, ours, ref):
            assert (a.type, a.reference_frame, a.joint1_id, a.joint2_id) == (
                b.type,
                b.reference_frame,
                b.joint1_id,
                b.joint2_id,
            ), c.label
            assert np.allclose(
                a.joint1_placement.homogeneous, b.joint1_placement.homogeneous, rtol=0, atol=1e-12
            ), c.label
        np.testing.assert_array_equal(case.conv.constraint_rows_to_pin(cs), _pin_perm(cs))
    key, _ = CASES["talos_feet6d"]
    case, cs = pin_case(key), case_constraints("talos_feet6d")
    q = states(key)["q"][0]
    models, datas = case.conv.constraint_models_to_pin(cs)
    D = pin.computeDelassusMatrix(
        case.pin_model, case.pin_model.createData(), case.conv.q_to_pin(q), models, datas, 0.0
    )
    p = case.conv.constraint_rows_to_pin(cs)
    assert_close(jaxdyn_results("talos_feet6d")["pv_osimr"][0][np.ix_(p, p)], D, RTOL)


def test_packed_inertias():
    """The packed world inertias of the Delassus pass are the upper triangles of ABA's."""
    from jaxdyn.algorithms import aba as A
    from jaxdyn.algorithms import kinematics as kin
    from jaxdyn.osim import inertia

    model = get_model("tree_c")
    ws = kin.world_state(model, jnp.asarray(states("tree_c")["q"][0]))
    full = np.asarray(A.world_inertia_matrices(ws))
    packed = np.asarray(inertia.world_inertias_packed(ws))
    assert packed.shape == (model.topo.nb, 21)
    np.testing.assert_allclose(np.asarray(inertia.unpack(packed)), full, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(
        np.asarray(inertia.pack(full)), full[(slice(None), *np.triu_indices(6))]
    )


def test_structure_of_cases():
    """The cases exercise what PV-OSIMr distinguishes: branching links in N, end effectors
    in N, several constraints per link, constraints meeting only at the world."""
    from jaxdyn.osim.structure import structure

    seen = dict(ee_in_N=0, multi=0, branch=0, world_cca=0, deep_N=0)
    for name in CASES:
        key, _ = CASES[name]
        model, cs = get_model(key), case_constraints(name)
        st = structure(model.topo, cs)
        seen["ee_in_N"] += bool(np.any(st.in_n & st.is_ee))
        seen["branch"] += bool(np.any(st.in_n & ~st.is_ee))
        seen["multi"] += len(set(st.layout.body)) < st.layout.nc
        roots = {st.ancestors(int(b))[-1] for b in st.E}
        seen["world_cca"] += len(roots) > 1
        seen["deep_N"] += bool(np.any(st.n_depth >= 2))
    assert all(seen.values()), seen


# ------------------------------------------------------------------- constraint quantities
CHECK = "solo12_mixed"


@functools.cache
def kinematic_results():
    key, _ = CASES[CHECK]
    model, cs = get_model(key), case_constraints(CHECK)
    st = states(key)
    q, v = jnp.asarray(st["q"][0]), jnp.asarray(st["v"][0])
    tgt = reference_placements(key, q, cs)

    def f(q, v):
        def err(s):
            return constraint_error(model, jaxdyn.integrate(model, q, s * v), cs, tgt)

        e, de = jax.jvp(err, (0.0,), (1.0,))
        return dict(
            drift=constraint_drift(model, q, v, cs),
            vel=constraint_velocity(model, q, v, cs),
            err=e,
            derr=de,
            links=link_constraint_matrices(model, q, cs)[1],
            K=jaxdyn.constraints.constraint_rows(model, q, cs)[0],
        )

    return model, cs, jax.tree_util.tree_map(np.asarray, jax.jit(f)(q, v))


def test_drift_velocity_and_error():
    """``J v`` and ``Jdot v`` (Pinocchio's conventions: spatial acceleration of weld frames,
    classical acceleration of connect points) against Pinocchio's joint velocities and
    accelerations; the position error vanishes at the target and its derivative is ``J v``."""
    model, cs, res = kinematic_results()
    key = CASES[CHECK][0]
    st = states(key)
    vel, drift = reference_kinematics(key, st["q"][0], st["v"][0], cs)
    assert_close(res["vel"], vel, RTOL, err_msg="J v")
    assert_close(res["drift"], drift, RTOL, err_msg="Jdot v")
    assert np.max(np.abs(drift)) > 1e-2  # not trivially zero
    assert_close(res["err"], np.zeros_like(res["err"]), RTOL, err_msg="error at the target")
    assert_close(res["derr"], res["vel"], RTOL, err_msg="d/dt error == J v at the target")
    # per-link K_i stack the rows of the constraints on that link, in constraint order
    bodies = [int(model.topo.frame_parent[model.frame_index(c.frame)]) for c in cs]
    links = tuple(dict.fromkeys(bodies))
    row_body = np.repeat(bodies, [c.dim for c in cs])
    assert len(res["links"]) == len(links)
    for b, Kb in zip(links, res["links"]):
        # the same rows; XLA may fuse the two uses of the placements differently (an ulp)
        np.testing.assert_allclose(Kb, res["K"][row_body == b], rtol=0, atol=1e-15 * 4)
    assert res["links"][0].shape == (9, 6)  # FL_FOOT weld + connect


def test_weld_error_is_log6():
    """The Baumgarte position error of a weld is Pinocchio's ``log6(M*^-1 M)`` (as Crocoddyl's
    ``ContactModel6D``), in the frame's axes or rotated to world axes; a connect's is
    ``A (p - p*)``. Targets from a configuration 0.3 rad away, so that the error is far from
    its first-order part (the former ``[log3; R^T (p - p*)]`` differs from log6 by 1e-3 here)."""
    key = "solo12"
    model, cs = get_model(key), case_constraints(CHECK)
    st = states(key)
    q, v = st["q"][0], st["v"][0]
    pm, conv = pin_built(key)
    q_t = conv.q_from_pin(pin.integrate(pm, conv.q_to_pin(q), conv.v_to_pin(0.3 * v)))
    tgt = reference_placements(key, q_t, cs)
    err = np.asarray(jax.jit(lambda q: constraint_error(model, q, cs, tgt))(jnp.asarray(q)))
    # each constraint frame's world placement at q (a weld on the connect's point gives its axes)
    now = reference_placements(
        key, q, tuple(Weld(c.frame, c.reference, c.offset, c.rotation) for c in cs)
    )
    rows, gap = [], 0.0
    for c, t, (R, p) in zip(cs, tgt, now):
        A = R.T if c.reference == "local" else np.eye(3)  # row axes
        if c.dim == 6:
            rel = pin.log6(pin.SE3(t[0], t[1]).actInv(pin.SE3(R, p)))
            w, lin = rel.angular, rel.linear
            if c.reference != "local":
                w, lin = R @ w, R @ lin
            rows.append(np.concatenate([w, lin]))
            gap = max(gap, np.max(np.abs(lin - A @ (p - t[1]))))
        else:
            rows.append(A @ (p - np.asarray(t)))
    assert_close(err, np.concatenate(rows), RTOL, err_msg="constraint_error vs pin.log6")
    assert gap > 1e-4  # the test tells log6 from the decoupled error
    # a set of connects only (no rotation error computed): the same rows A (p - p*)
    only = [i for i, c in enumerate(cs) if c.dim == 3]
    assert only and len(only) < len(cs)
    conn = tuple(cs[i] for i in only)
    err_c = jax.jit(lambda q: constraint_error(model, q, conn, tuple(tgt[i] for i in only)))(
        jnp.asarray(q)
    )
    assert_close(np.asarray(err_c), np.concatenate([rows[i] for i in only]), RTOL,
                 err_msg="connect-only constraint_error vs Pinocchio")  # fmt: skip


# ------------------------------------------------------------------- constrained dynamics
def _kkt(key, q, v, tau, J, drift, damping, rhs_extra):
    """Solve ``[[M, -J^T], [J, μ 1]] [qdd; λ] = [tau - h; a* - Jdot v]``; also returns the
    matrix and right-hand side."""
    M, h = reference_dynamics(key, q, v)
    m = J.shape[0]
    KKT = np.block([[M, -J.T], [J, damping * np.eye(m)]])
    rhs = np.concatenate([tau - h, -drift + rhs_extra])
    sol = np.linalg.solve(KKT, rhs)
    return sol[: len(M)], sol[len(M) :], KKT, rhs


CONSTRAINED = {
    # name: (case, baumgarte, damping)
    "solo12_feet3d": ("solo12_feet3d", None, 0.0),
    "solo12_baumgarte": ("solo12_independent", (20.0, 3.0), 0.0),
    "hand_redundant_damped": ("hand_float_redundant", (5.0, 1.0), 1e-3),
}


@functools.cache
def constrained_results(name):
    case_name, bg, damping = CONSTRAINED[name]
    key, _ = CASES[case_name]
    model, cs = get_model(key), case_constraints(case_name)
    st = states(key)
    # targets: the constraint placements at a nearby configuration
    pm, conv = pin_built(key)
    q_t = conv.q_from_pin(
        pin.integrate(pm, conv.q_to_pin(st["q"][0]), conv.v_to_pin(0.05 * st["v"][0]))
    )
    tgt = reference_placements(key, q_t, cs)

    def f(q, v, tau):
        out = constrained_aba(
            model, q, v, tau, cs, baumgarte=bg, damping=damping, targets=tgt if bg else None
        )
        return dict(
            qdd=out.qdd,
            lam=out.lam,
            drift=constraint_drift(model, q, v, cs),
            vel=constraint_velocity(model, q, v, cs),
            err=constraint_error(model, q, cs, tgt),
        )

    res = jax.jit(jax.vmap(f))(*(jnp.asarray(st[k]) for k in ("q", "v", "tau")))
    return model, cs, bg, damping, jax.tree_util.tree_map(np.asarray, res)


@pytest.mark.parametrize("name", list(CONSTRAINED))
def test_constrained_aba_against_kkt(name):
    model, cs, bg, damping, res = constrained_results(name)
    key = CASES[CONSTRAINED[name][0]][0]
    st = states(key)
    for i in range(NSTATES):
        q, v, tau = st["q"][i], st["v"][i], st["tau"][i]
        J, D = reference_delassus(key, q, cs)
        vel, drift = reference_kinematics(key, q, v, cs)
        extra = 0.0
        if bg is not None:
            extra = -bg[1] * vel - bg[0] * res["err"][i]
        qdd, lam, KKT, rhs = _kkt(key, q, v, tau, J, drift, damping, extra)
        # the KKT equations hold to round-off (residual relative to the size of the terms)
        x = np.concatenate([res["qdd"][i], res["lam"][i]])
        scale = np.max(np.abs(KKT) * np.abs(x)[None, :]) + np.max(np.abs(rhs))
        assert np.max(np.abs(KKT @ x - rhs)) <= RTOL * scale, f"{name} state {i}: residual"
        # and the solution agrees with numpy's KKT solve to the accuracy the elimination
        # allows: the Delassus matrix is accurate to ~1e-13 relative, λ to cond(Λ^-1 + μ) times
        tol = max(RTOL, 1e-13 * np.linalg.cond(D + damping * np.eye(len(D))))
        assert_close(res["qdd"][i], qdd, tol, err_msg=f"{name} state {i}: qdd")
        assert_close(res["lam"][i], lam, tol, err_msg=f"{name} state {i}: lambda")


@pytest.mark.parametrize("name", ["solo12_feet3d", "solo12_independent"])
def test_constrained_aba_against_pinocchio(name):
    """``pin.constraintDynamics`` (no Baumgarte) against ``constrained_aba``."""
    key, _ = CASES[name]
    case, cs = pin_case(key), case_constraints(name)
    model = case.model
    st = states(key)
    fn = jax.jit(lambda q, v, tau: constrained_aba(model, q, v, tau, cs))
    pm, conv = case.pin_model, case.conv
    for i in range(NSTATES):
        q, v, tau = st["q"][i], st["v"][i], st["tau"][i]
        out = fn(q, v, tau)
        models, datas = pin_constraint_models(case, cs)
        data = pm.createData()
        pin.initConstraintDynamics(pm, data, models, datas)
        prox = pin.ProximalSettings(1e-14, 0.0, 1)
        ddq = pin.constraintDynamics(
            pm, data, conv.q_to_pin(q), conv.v_to_pin(v), conv.v_to_pin(tau), models, datas, prox
        )
        lam = np.concatenate(
            [
                d.contact_force.vector[[3, 4, 5, 0, 1, 2]] if c.dim == 6 else d.contact_force.linear
                for c, d in zip(cs, datas)
            ]
        )
        tol = max(RTOL, 1e-13 * np.linalg.cond(reference_delassus(key, q, cs)[1]))
        assert_close(
            np.asarray(out.qdd), conv.v_from_pin(ddq), tol, err_msg=f"{name} state {i}: qdd vs pin"
        )
        assert_close(np.asarray(out.lam), lam, tol, err_msg=f"{name} state {i}: lambda vs pin")


@pytest.mark.slow  # reverse mode of the same sweeps: test_iwim's gradient test
def test_delassus_gradient():
    """``jax.grad`` through PV-OSIMr, PV-OSIM, EFPA and LTL equals the dense method's."""
    model = get_model("tree_grad")
    cs = (
        Connect("link6", "local", offset=(0.1, 0.0, 0.0)),
        Weld("link5", "world_aligned"),
        Connect("link4", "world_aligned"),
        Connect("link2", "local"),
        Connect("link3"),
    )
    q = jnp.asarray(states("tree_grad")["q"][0])
    m = sum(c.dim for c in cs)
    W = jnp.asarray(np.random.default_rng(0).normal(size=(m, m)))

    def loss(dq, meth):
        return jnp.sum(W * delassus(model, jaxdyn.integrate(model, q, dq), cs, meth))

    g = jax.jit(lambda dq: {m: jax.grad(loss)(dq, m) for m in METHODS})(jnp.zeros(model.nv))
    for meth in METHODS:
        assert_close(np.asarray(g[meth]), np.asarray(g["dense"]), RTOL, err_msg=f"grad {meth}")
    assert np.max(np.abs(np.asarray(g["dense"]))) > 1e-3


# ------------------------------------------------------------------- errors
def test_bad_inputs_raise():
    model = get_model("solo12")
    q = states("solo12")["q"][0]
    feet = CASES["solo12_feet3d"][1]
    with pytest.raises(ValueError, match="method must be one of"):
        delassus(model, q, feet, "cholesky")
    with pytest.raises(ValueError, match=r"constraints\[1\].*no frame named 'nope'"):
        delassus(model, q, (Connect("FL_FOOT"), Connect("nope")))
    with pytest.raises(ValueError, match="empty"):
        delassus(model, q, ())
    with pytest.raises(ValueError, match=r"constraints\[0\] is a str"):
        delassus(model, q, ("FL_FOOT",))
    with pytest.raises(ValueError, match="reference must be one of"):
        Connect("FL_FOOT", "world")
    with pytest.raises(ValueError, match="offset must be 3"):
        Weld("FL_FOOT", offset=(1.0, 2.0))
    with pytest.raises(ValueError, match="not a rotation"):
        Weld("FL_FOOT", rotation=np.ones((3, 3)))
    with pytest.raises(ValueError, match="q has shape"):
        delassus(model, q[:-1], feet)
    arm = get_model("hand")
    with pytest.raises(ValueError, match=r"constraints\[0\].*fixed to the world"):
        delassus(arm, np.zeros(arm.nq), (Weld("palm"),))
    v = np.zeros(model.nv)
    with pytest.raises(ValueError, match=r"has no target"):
        constrained_aba(model, q, v, v, feet, baumgarte=(1.0, 1.0))
    with pytest.raises(ValueError, match="targets has 1 entries"):
        constrained_aba(model, q, v, v, feet, baumgarte=(1.0, 1.0), targets=(None,))
    with pytest.raises(ValueError, match="damping must be >= 0"):
        constrained_aba(model, q, v, v, feet, damping=-1.0)
    with pytest.raises(ValueError, match="baumgarte must be None or a pair"):
        constrained_aba(model, q, v, v, feet, baumgarte=1.0)
    with pytest.raises(ValueError, match="tau has shape"):
        constrained_aba(model, q, v, v[:3], feet)


def test_constraints_are_hashable_and_cached():
    from jaxdyn.osim.pv_osimr import plan

    a = (Connect("FL_FOOT", offset=[0, 0, 0.1]), Weld("HR_FOOT", "world_aligned"))
    b = (Connect("FL_FOOT", offset=(0.0, 0.0, 0.1)), Weld("HR_FOOT", "local_world_aligned"))
    assert a == b and hash(a) == hash(b)
    topo = get_model("solo12").topo
    assert plan(topo, a) is plan(topo, b)


def test_pv_osimr_pair_assembly(monkeypatch):
    """PV-OSIMr's large-m assembly (the m (m + 1) / 2 pair products of eq. (17), used above
    ``PAIR_M`` rows) forced on a small case with K-started leaves of widths 3 and 6 and
    chains of different lengths: equals the reference, exactly symmetric."""
    from jaxdyn.osim import pv_osimr

    name = "talos_feet4x3d_wa"
    key, _ = CASES[name]
    model, cs = get_model(key), case_constraints(name)
    q = states(key)["q"][0]
    monkeypatch.setattr(pv_osimr, "PAIR_M", 0)
    pv_osimr.plan.cache_clear()
    try:
        assert pv_osimr.plan(model.topo, cs).pairs
        D = np.asarray(jax.jit(lambda q: delassus(model, q, cs))(q))
    finally:
        pv_osimr.plan.cache_clear()
    assert_close(D, reference_delassus(key, q, cs)[1], RTOL, err_msg=f"{name}: pair assembly")
    assert np.array_equal(D, D.T)


def test_constrained_aba_fused_loops_route(monkeypatch):
    """With fused CPU loops (jaxdyn.config.fused_cpu_loops) the constraint forces are solved
    by the unrolled Cholesky factorisation, not LAPACK (XLA does not fuse a loop holding a
    custom call): no cholesky primitive in the program, and the same qdd and forces."""
    model = robots.load("quad12")
    feet = tuple(Connect(f) for f in ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT"))
    q = jaxdyn.integrate(model, jaxdyn.neutral_configuration(model), 0.2 * jnp.cos(jnp.arange(18)))
    v, tau = 0.3 * jnp.sin(jnp.arange(18.0)), jnp.linspace(-1.0, 1.0, 18)

    def f(q):
        return constrained_aba(model, q, v, tau, feet)

    def lapack():
        return "cholesky" in str(jax.make_jaxpr(f)(q))

    ref = jax.jit(f)(q)
    assert lapack()
    monkeypatch.setattr(jaxdyn.config, "fused_cpu_loops_enabled", lambda: True)
    jax.clear_caches()
    assert not lapack()
    out = jax.jit(f)(q)
    monkeypatch.undo()
    jax.clear_caches()
    assert float(jnp.max(jnp.abs(ref.lam))) > 1.0
    assert_close(np.asarray(out.qdd), np.asarray(ref.qdd), 1e-10, err_msg="qdd")
    assert_close(np.asarray(out.lam), np.asarray(ref.lam), 1e-10, err_msg="lam")


def test_weld_error_choice():
    """``Weld(error=...)``: the decoupled error (MuJoCo's weld, what load_mjcf builds) is
    ``[log3(R*^T R); R^T (p - p*)]`` in local axes; a weld list mixing both conventions gives
    each its own rows; an unknown name is refused."""
    key = "solo12"
    model, q = get_model(key), jnp.asarray(states(key)["q"][0])
    R = np.asarray(_rot(1))
    tgt = (R, np.array([0.1, -0.2, 0.3]))
    log6 = Weld("FL_FOOT", "local", target=tgt)
    dec = Weld("FL_FOOT", "local", target=tgt, error="decoupled")
    e6 = np.asarray(constraint_error(model, q, (log6,)))
    ed = np.asarray(constraint_error(model, q, (dec,)))
    ((Rn, pn),) = reference_placements(key, q, (Weld("FL_FOOT", "local"),))
    w = pin.log3(R.T @ Rn)
    assert_close(ed, np.concatenate([w, Rn.T @ (pn - tgt[1])]), RTOL, err_msg="decoupled")
    assert_close(e6[:3], w, RTOL, err_msg="log6 angular part")
    assert np.max(np.abs(e6[3:] - ed[3:])) > 1e-4  # the two linear parts differ here
    both = np.asarray(constraint_error(model, q, (dec, log6)))
    assert_close(both, np.concatenate([ed, e6]), RTOL, err_msg="mixed")
    with pytest.raises(ValueError, match="error must be 'log6' or 'decoupled'"):
        Weld("FL_FOOT", error="mujoco")

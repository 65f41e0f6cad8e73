"""The compiled model: sizes, names, topology invariants, merged fixed joints, ``describe()``.

Sizes and names are checked against Pinocchio's model of the same URDF and against the URDF
text itself (read with ElementTree); no JAX computation is needed here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import joints, robots

from oracle import (
    RANDOM_ALL_KINDS,
    RANDOM_URDF,
    ROBOTS,
    all_kinds_tree,
    robot_case,
    robot_params,
    tree_id,
    urdf_joints,
    urdf_link_masses,
    urdf_tree,
)

CASES = {name: (lambda name=name: robot_case(name)) for name in ROBOTS}
for _p in RANDOM_URDF[2::2]:
    CASES[f"tree-{tree_id(_p)}"] = lambda p=_p: urdf_tree(p)
for _p in RANDOM_ALL_KINDS:
    CASES[f"tree-all-kinds-{tree_id(_p)}"] = lambda p=_p: all_kinds_tree(p)


@pytest.fixture(params=robot_params(*CASES), scope="module")
def case(request):
    return CASES[request.param]()


def test_sizes_and_joint_names_match_pinocchio(case):
    m, pm = case.model, case.pin_model
    pin_joints = list(pm.names)[1:]  # without "universe"
    assert set(m.joint_names) == set(pin_joints), "joint name sets differ"
    assert len(m.joint_names) == len(set(m.joint_names)) == m.nb == pm.njoints - 1
    assert m.nv == pm.nv
    n_two = sum(pm.joints[j].nq == 2 for j in range(1, pm.njoints))  # continuous: (cos, sin)
    assert m.nq == pm.nq - n_two
    assert m.floating_base == ("root_joint" in m.joint_names)
    # per joint sizes and parents agree with Pinocchio
    t = m.topo
    names = list(pm.names)
    for b, name in enumerate(m.joint_names):
        j = names.index(name)
        assert t.nv_j[b] == pm.joints[j].nv, name
        parent = pm.names[pm.parents[j]]
        expected = -1 if parent == "universe" else m.joint_names.index(parent)
        assert t.parent[b] == expected, f"parent of {name}"


def test_body_names_are_the_child_links(case):
    """Body b is the URDF child link of joint b (the root link for the free flyer), and
    Pinocchio attaches that link's BODY frame to the same joint."""
    m, pm = case.model, case.pin_model
    jts = urdf_joints(case.xml)
    for b, (joint, link) in enumerate(zip(m.joint_names, m.body_names)):
        expected = m.topo.root_name if joint == "root_joint" else jts[joint][2]
        assert link == expected, f"body {b}: {link} != {expected}"
        frame = pm.frames[case.pin_frames[link]]
        assert pm.names[frame.parentJoint] == joint, f"Pinocchio attaches {link} elsewhere"


def test_topology_invariants(case):
    """Levels are contiguous depth ranges, parents come first, joint kinds are contiguous
    inside a level, and q / v slices tile the state vectors in body order."""
    t = case.model.topo
    nb = t.nb
    assert np.all(t.parent < np.arange(nb)), "a parent after its child"
    depth = np.array([0 if t.parent[b] < 0 else t.depth[t.parent[b]] + 1 for b in range(nb)])
    np.testing.assert_array_equal(t.depth, depth, err_msg="depth")
    assert np.all(np.diff(t.depth) >= 0), "bodies not sorted by depth"
    b = 0
    for d, lvl in enumerate(t.levels):
        assert lvl.b0 == b and lvl.b1 > lvl.b0, f"level {d} not contiguous"
        assert np.all(t.depth[lvl.b0 : lvl.b1] == d)
        if d:
            prev = t.levels[d - 1]
            np.testing.assert_array_equal(lvl.parent_local + prev.b0, t.parent[lvl.b0 : lvl.b1])
        g0 = lvl.b0
        kinds = []
        for g in lvl.groups:
            assert g.b0 == g0 and np.all(t.kind[g.b0 : g.b1] == g.kind), f"level {d} group"
            assert (g.q0, g.v0) == (t.q_start[g.b0], t.v_start[g.b0])
            kinds.append(g.kind)
            g0 = g.b1
        assert g0 == lvl.b1 and len(set(kinds)) == len(kinds), f"kinds not contiguous in {d}"
        b = lvl.b1
    assert b == nb
    np.testing.assert_array_equal(t.nq_j, [joints.NQ[int(k)] for k in t.kind])
    np.testing.assert_array_equal(t.nv_j, [joints.NV[int(k)] for k in t.kind])
    np.testing.assert_array_equal(t.q_start, np.r_[0, np.cumsum(t.nq_j)[:-1]])
    np.testing.assert_array_equal(t.v_start, np.r_[0, np.cumsum(t.nv_j)[:-1]])
    assert t.q_start[-1] + t.nq_j[-1] == t.nq and t.v_start[-1] + t.nv_j[-1] == t.nv
    m = case.model
    for j, name in enumerate(m.joint_names):
        assert m.q_slice(name) == m.q_slice(j) == slice(t.q_start[j], t.q_start[j] + t.nq_j[j])
        assert m.v_slice(name) == slice(t.v_start[j], t.v_start[j] + t.nv_j[j])


def test_fixed_joints_are_merged(case):
    """Total mass is the sum of the URDF link masses that move (all of them for a floating
    base; for a fixed base, minus the links welded to the world), equal to Pinocchio's."""
    m, pm = case.model, case.pin_model
    masses = urdf_link_masses(case.xml)
    jts = urdf_joints(case.xml)
    parent_joint = {c: (name, t, p) for name, (t, p, c) in jts.items()}

    def moves(link):
        while link in parent_joint:
            _, t, p = parent_joint[link]
            if t != "fixed":
                return True
            link = p
        return m.floating_base

    expected = sum(mass for link, mass in masses.items() if moves(link))
    total = float(np.sum(m.mass))
    np.testing.assert_allclose(total, expected, rtol=1e-12, err_msg="sum of moving link masses")
    pin_total = sum(pm.inertias[j].mass for j in range(1, pm.njoints))
    np.testing.assert_allclose(total, pin_total, rtol=1e-12, err_msg="Pinocchio's total mass")
    n_moving = sum(t != "fixed" for t, _, _ in jts.values()) + m.floating_base
    assert m.nb == n_moving
    # every link and every URDF joint is a frame
    assert set(masses) | set(jts) == set(m.frame_names)


def test_describe_lists_every_joint_and_body(case):
    m = case.model
    text = m.describe()
    assert f"nq={m.nq} nv={m.nv}" in text
    for name in m.joint_names + m.body_names:
        assert name in text, name
    assert text.count("\n") == m.nb + 1  # header, root line, one line per body


def test_model_is_a_pytree_with_static_topology():
    a = robots.load("quad12")
    b = robots.load("quad12")
    assert a.topo == b.topo and hash(a.topo) == hash(b.topo)  # compiled code is shared
    leaves = jax.tree_util.tree_leaves(a)
    # 9 dynamics parameters + 6 joint properties of the URDF's <limit> elements (issue 11)
    assert len(leaves) == 15 and all(isinstance(x, jax.Array) for x in leaves)
    assert {x.dtype for x in leaves} == {jnp.dtype(jnp.float64)}
    a32 = a.astype(jnp.float32)
    assert {x.dtype for x in jax.tree_util.tree_leaves(a32)} == {jnp.dtype(jnp.float32)}
    assert a32.topo == a.topo
    assert robots.load("arm7").topo != a.topo


def test_several_root_children():
    """Three chains hanging from the root link: fixed base -> three depth-0 bodies; floating
    base -> three children of the free-flyer body, plus a fixed child of the root."""
    link = (
        '<link name="{0}"><inertial><mass value="1"/><inertia ixx="0.1" ixy="0" ixz="0" '
        'iyy="0.1" iyz="0" izz="0.1"/></inertial></link>'
    )
    joint = (
        '<joint name="{0}" type="{1}"><parent link="{2}"/><child link="{3}"/>'
        '<origin xyz="0.1 0.2 0.3"/><axis xyz="0 0 1"/></joint>'
    )
    body = [link.format(n) for n in ("root", "a", "b", "c", "d", "w")]
    body += [
        joint.format("ja", "revolute", "root", "a"),
        joint.format("jb", "prismatic", "root", "b"),
        joint.format("jw", "fixed", "root", "w"),
        joint.format("jc", "continuous", "root", "c"),
        joint.format("jd", "revolute", "c", "d"),
    ]
    xml = '<robot name="star">' + "".join(body) + "</robot>"
    fixed = jaxdyn.load_urdf(xml)
    assert sorted(fixed.joint_names[b] for b in range(fixed.nb) if fixed.parent[b] < 0) == [
        "ja",
        "jb",
        "jc",
    ]
    assert fixed.depth == 2 and fixed.nb == 4
    float_ = jaxdyn.load_urdf(xml, floating_base=True)
    assert float_.joint_names[0] == "root_joint" and float_.parent[0] == -1
    assert sorted(float_.joint_names[b] for b in range(float_.nb) if float_.parent[b] == 0) == [
        "ja",
        "jb",
        "jc",
    ]
    np.testing.assert_allclose(np.sum(float_.mass), 6.0, rtol=1e-15)
    np.testing.assert_allclose(np.sum(fixed.mass), 4.0, rtol=1e-15)  # root and w are welded
    assert "w" in fixed.frame_names and "jw" in fixed.frame_names


PARENT_MAPS = (
    ([0, 0, 0, 1, 2], 3),  # talos_full: the torso's three children, then two chains
    ([1, 2, 3, 4], 5),  # a childless parent first
    ([0, 0, 0, 0, 1, 1, 1, 1], 2),  # two hands of four fingers
    ([1, 1, 3, 5, 5, 7], 8),  # alternate parents childless
    ([2, 0, 1], 3),  # contiguous, not sorted (cluster views)
    ([0, 1, 0], 2),  # not contiguous: the incidence product / gathers
    ([1, 0, 0, 2], 3),
)


@pytest.mark.parametrize("idx, n_parent", PARENT_MAPS, ids=lambda x: str(x))
def test_parent_maps(idx, n_parent):
    """``tree.gather_parent`` / ``sum_into_parents`` / ``sum_into_parents_gathered`` equal
    their definition (``x[parent]`` and the incidence-matrix product) for every layout of
    children, and maps whose children of a parent are contiguous take the slice plan (no
    ``gather`` or ``dot_general`` in the trace)."""
    from types import SimpleNamespace

    from jaxdyn.model import tree

    level = SimpleNamespace(parent_local=np.array(idx), n=len(idx))
    rng = np.random.default_rng(len(idx) + n_parent)
    prev = rng.normal(size=(n_parent, 3))
    P = np.zeros((n_parent, len(idx)))
    P[idx, np.arange(len(idx))] = 1.0
    for rest in ((6, 2), (6, 7)):  # a reduce over the children / strided adds
        x = rng.normal(size=(len(idx),) + rest)
        ref = np.einsum("pc,cij->pij", P, x)
        for f in (tree.sum_into_parents, tree.sum_into_parents_gathered):
            np.testing.assert_allclose(f(jnp.asarray(x), level, n_parent), ref, rtol=1e-14)
    np.testing.assert_array_equal(tree.gather_parent(jnp.asarray(prev), level, None), prev[idx])
    kids = [np.nonzero(np.array(idx) == p)[0] for p in range(n_parent) if p in idx]
    contiguous = all(k[-1] - k[0] == len(k) - 1 for k in kids)
    prims = str(jax.make_jaxpr(lambda a: tree.sum_into_parents(a, level, n_parent))(x))
    assert contiguous == ("dot_general" not in prims), prims
    prims = str(jax.make_jaxpr(lambda a: tree.gather_parent(a, level, None))(prev))
    assert "gather" not in prims, prims


def test_bundled_robots_sum_into_parents_by_slices():
    """Every level of the bundled robots (bodies sorted by parent inside a level) has a slice
    plan, so no tree pass falls back to the incidence product."""
    from jaxdyn.model import tree

    for name in ("talos_full", "solo12", "panda"):
        t = robots.load(name).topo
        for lvl, child in zip(t.levels[:-1], t.levels[1:]):
            plan = tree._slice_plan(child.parent_local, lvl.n, True)
            assert plan is not None, (name, child.parent_local)

"""Checks of the bundled URDFs, the example-robot-data table and random_urdf.

Only stdlib ``xml.etree`` and numpy are used here (not jaxdyn's parser, not JAX).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from jaxdyn import robots

MOVING = ("revolute", "continuous", "prismatic", "spherical", "floating")


def _floats(s: str | None, n: int, default: float = 0.0) -> np.ndarray:
    if s is None:
        return np.full(n, default)
    v = np.array([float(x) for x in s.split()])
    assert v.shape == (n,)
    return v


def _inertia(el: ET.Element) -> np.ndarray:
    g = {k: float(el.get(k, "0")) for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
    return np.array(
        [
            [g["ixx"], g["ixy"], g["ixz"]],
            [g["ixy"], g["iyy"], g["iyz"]],
            [g["ixz"], g["iyz"], g["izz"]],
        ]
    )


def _check_inertia(inertia: np.ndarray, where: str) -> None:
    assert np.allclose(inertia, inertia.T), where
    ev = np.linalg.eigvalsh(inertia)
    assert ev.min() > 0, f"{where}: not positive definite {ev}"
    tol = 1e-12 * ev.max()
    # triangle inequality on principal moments (and the diagonal, which must hold too)
    assert ev[0] + ev[1] >= ev[2] - tol, f"{where}: principal moments {ev}"
    d = np.diag(inertia)
    for i in range(3):
        assert d[i] <= d[(i + 1) % 3] + d[(i + 2) % 3] + tol, f"{where}: diagonal {d}"


def _tree_structure(root: ET.Element):
    links = [l.get("name") for l in root.findall("link")]
    assert len(set(links)) == len(links), "duplicate link names"
    joints = root.findall("joint")
    names = [j.get("name") for j in joints]
    assert len(set(names)) == len(names), "duplicate joint names"
    children = Counter(j.find("child").get("link") for j in joints)
    parents = [j.find("parent").get("link") for j in joints]
    for p in parents:
        assert p in links, p
    for c in children:
        assert c in links, c
    roots = [l for l in links if children[l] == 0]
    assert len(roots) == 1, f"roots: {roots}"
    assert all(children[l] == 1 for l in links if l != roots[0])
    # connected / acyclic: walking up from any link reaches the root
    parent_of = {j.find("child").get("link"): j.find("parent").get("link") for j in joints}
    for l in links:
        seen = set()
        while l != roots[0]:
            assert l not in seen, "cycle"
            seen.add(l)
            l = parent_of[l]
    return links, joints, roots[0]


def _check_robot_file(path: Path, root_name: str, n_moving: int):
    root = ET.parse(path).getroot()
    assert root.tag == "robot"
    links, joints, r = _tree_structure(root)
    assert r == root_name
    types = Counter(j.get("type") for j in joints)
    assert sum(types[t] for t in MOVING) == n_moving
    assert set(types) <= {"revolute", "continuous", "prismatic", "fixed"}
    for j in joints:
        if j.get("type") == "fixed":
            continue
        axis = _floats(j.find("axis").get("xyz"), 3)
        assert abs(np.linalg.norm(axis) - 1.0) < 1e-12, (j.get("name"), axis)
    for l in root.findall("link"):
        inertial = l.find("inertial")
        if inertial is None:
            continue
        assert float(inertial.find("mass").get("value")) > 0
        _check_inertia(_inertia(inertial.find("inertia")), f"{path.name}:{l.get('name')}")
    return root, {j.get("name"): j for j in joints}, types


def _total_mass(root: ET.Element) -> float:
    return sum(
        float(l.find("inertial/mass").get("value"))
        for l in root.findall("link")
        if l.find("inertial") is not None
    )


def _rpy(j: ET.Element) -> np.ndarray:
    o = j.find("origin")
    return _floats(None if o is None else o.get("rpy"), 3)


def test_bundled_table():
    assert set(robots.BUNDLED) == {"arm7", "quad12"}
    assert robots.BUNDLED["arm7"][1] is False
    assert robots.BUNDLED["quad12"][1] is True
    for name, (path, fb) in robots.BUNDLED.items():
        p, f = robots.resolve(name)
        assert p.is_file() and Path(p) == Path(path) and f == fb


def test_arm7():
    path, _ = robots.resolve("arm7")
    root, joints, types = _check_robot_file(path, "base", 7)
    assert types["revolute"] == 6 and types["continuous"] == 1
    assert 16.0 < _total_mass(root) < 20.0
    axes = [
        _floats(j.find("axis").get("xyz"), 3) for j in joints.values() if j.find("axis") is not None
    ]
    # one negative aligned axis and one unaligned axis
    assert any(np.allclose(a, [0, 0, -1]) for a in axes)
    assert any(np.count_nonzero(np.abs(a) > 1e-12) > 1 for a in axes)
    # joint origins with rpy, inertial origins with rpy, off-diagonal inertias
    assert any(np.any(_rpy(j) != 0) for j in joints.values())
    inertials = root.findall("link/inertial")
    assert any(np.any(_floats(i.find("origin").get("rpy"), 3) != 0) for i in inertials)
    assert all(np.any(_inertia(i.find("inertia"))[np.triu_indices(3, 1)] != 0) for i in inertials)
    # massive hand on a fixed joint, massless ee frame fixed to the hand
    hand_j = [j for j in joints.values() if j.find("child").get("link") == "hand"][0]
    assert hand_j.get("type") == "fixed" and hand_j.find("parent").get("link") == "link7"
    ee_j = [j for j in joints.values() if j.find("child").get("link") == "ee"][0]
    assert ee_j.get("type") == "fixed" and ee_j.find("parent").get("link") == "hand"
    links = {l.get("name"): l for l in root.findall("link")}
    assert links["hand"].find("inertial") is not None
    assert links["ee"].find("inertial") is None


def test_quad12():
    path, fb = robots.resolve("quad12")
    assert fb is True
    root, joints, types = _check_robot_file(path, "base_link", 12)
    assert types["revolute"] == 12
    assert 2.0 < _total_mass(root) < 3.0
    for leg in ("FL", "FR", "HL", "HR"):
        for jn, axis in (("HAA", [1, 0, 0]), ("HFE", [0, 1, 0]), ("KFE", [0, 1, 0])):
            j = joints[f"{leg}_{jn}"]
            assert j.get("type") == "revolute"
            assert np.allclose(_floats(j.find("axis").get("xyz"), 3), axis)
        foot = [j for j in joints.values() if j.find("child").get("link") == f"{leg}_FOOT"]
        assert len(foot) == 1 and foot[0].get("type") == "fixed"
        assert foot[0].find("parent").get("link") == f"{leg}_LOWER_LEG"
    imu = [j for j in joints.values() if j.find("child").get("link") == "imu"]
    assert len(imu) == 1 and imu[0].get("type") == "fixed"
    assert imu[0].find("parent").get("link") == "base_link"
    links = {l.get("name"): l for l in root.findall("link")}
    assert links["imu"].find("inertial") is None


@pytest.mark.parametrize("seed", [0, 1, 7, 123])
@pytest.mark.parametrize("n", [1, 3, 12, 40])
def test_random_urdf_tree(seed, n):
    text = robots.random_urdf(n, seed)
    assert text == robots.random_urdf(n, seed)  # deterministic
    root = ET.fromstring(text)
    links, joints, r = _tree_structure(root)
    assert r == "base"
    assert len(links) == n + 1 and len(joints) == n
    assert root.find("link[@name='base']/inertial") is not None
    for j in joints:
        t = j.get("type")
        assert t in {"revolute", "prismatic", "continuous", "fixed"}
        if t != "fixed":
            axis = _floats(j.find("axis").get("xyz"), 3)
            assert abs(np.linalg.norm(axis) - 1.0) < 1e-12
        xyz = _floats(j.find("origin").get("xyz"), 3)
        assert np.all(np.abs(xyz) <= 0.5)
    for l in root.findall("link"):
        i = l.find("inertial")
        if i is not None:
            m = float(i.find("mass").get("value"))
            assert 0.1 <= m <= 5.0
            _check_inertia(_inertia(i.find("inertia")), l.get("name"))


def test_random_urdf_seeds_differ_and_features():
    assert robots.random_urdf(10, 0) != robots.random_urdf(10, 1)
    roots = [ET.fromstring(robots.random_urdf(30, s)) for s in range(10)]
    joints = [j for r in roots for j in r.findall("joint")]
    types = Counter(j.get("type") for j in joints)
    for t in ("revolute", "prismatic", "continuous", "fixed"):
        assert types[t] > 0, types
    axes = [j.find("axis").get("xyz") for j in joints if j.find("axis") is not None]
    assert any(a in ("0 0 -1", "0 -1 0", "-1 0 0") for a in axes)
    assert any(a in ("0 0 1", "0 1 0", "1 0 0") for a in axes)
    assert any(np.count_nonzero(_floats(a, 3)) == 3 for a in axes)
    massless = sum(1 for r in roots for l in r.findall("link") if l.find("inertial") is None)
    assert massless > 0
    # branching: some robot where the root has several children and some link has >1 child
    root_children = [
        sum(1 for j in r.findall("joint") if j.find("parent").get("link") == "base") for r in roots
    ]
    assert max(root_children) >= 2
    assert any(
        max(
            Counter(
                j.find("parent").get("link")
                for j in r.findall("joint")
                if j.find("parent").get("link") != "base"
            ).values()
        )
        >= 2
        for r in roots
    )
    # chains: branching=0 gives a single chain
    chain = ET.fromstring(robots.random_urdf(8, 3, branching=0.0))
    for i, j in enumerate(chain.findall("joint")):
        assert j.find("parent").get("link") == ("base" if i == 0 else f"link{i}")


def test_random_urdf_options():
    r = ET.fromstring(robots.random_urdf(25, 5, joint_types=("spherical", "floating"), p_fixed=0.0))
    types = Counter(j.get("type") for j in r.findall("joint"))
    assert set(types) == {"spherical", "floating"}
    r = ET.fromstring(robots.random_urdf(10, 5, p_fixed=1.0))
    assert {j.get("type") for j in r.findall("joint")} == {"fixed"}
    r = ET.fromstring(robots.random_urdf(10, 5, massless_prob=0.0, name="foo"))
    assert r.get("name") == "foo"
    assert all(l.find("inertial") is not None for l in r.findall("link"))
    r = ET.fromstring(robots.random_urdf(0, 0))
    assert [l.get("name") for l in r.findall("link")] == ["base"]
    # numbers round-trip exactly (17 significant digits)
    text = robots.random_urdf(5, 11)
    for l in ET.fromstring(text).findall("link/inertial/mass"):
        v = float(l.get("value"))
        assert f"{v:.17g}" == l.get("value")


def test_resolve_file_and_unknown(tmp_path):
    f = tmp_path / "x.urdf"
    f.write_text(robots.random_urdf(2, 0))
    assert robots.resolve(f) == (f, False)
    assert robots.resolve(str(f)) == (f, False)
    with pytest.raises(ValueError, match="arm7"):
        robots.resolve("definitely_not_a_robot")


def test_example_robot_data_paths():
    root = robots.example_robot_data_dir()
    assert root is not None, (
        "example-robot-data is not installed (pip install example-robot-data); "
        "it is part of the test extra"
    )
    for name in ("ur5", "panda", "solo12", "anymal", "hyq", "talos_reduced", "talos_full", "romeo"):
        assert name in robots.EXAMPLE_ROBOT_DATA
    missing = [rel for rel, _ in robots.EXAMPLE_ROBOT_DATA.values() if not (root / rel).is_file()]
    assert not missing, f"missing example-robot-data files under {root}: {missing}"
    for name, (rel, fb) in robots.EXAMPLE_ROBOT_DATA.items():
        p, f = robots.resolve(name)
        assert p == root / rel and p.is_file() and f == fb
        r = ET.parse(p).getroot()
        assert r.tag == "robot" and r.findall("link"), name

"""Tests for the strict, safe URDF parser (jaxdyn.model.urdf)."""

import math
import time

import numpy as np
import pytest

from jaxdyn.model.urdf import URDFRobot, parse_urdf, rpy_to_matrix


def robot(body: str, name: str = "r") -> str:
    return f'<robot name="{name}">{body}</robot>'


def joint(name, parent, child, jtype="revolute", inner=""):
    return (
        f'<joint name="{name}" type="{jtype}"><parent link="{parent}"/>'
        f'<child link="{child}"/>{inner}</joint>'
    )


LINKS_AB = '<link name="a"/><link name="b"/>'


# ------------------------------------------------------------------ valid parsing
ARM = """<?xml version="1.0"?>
<!-- a comment -->
<robot name="arm">
  <material name="red"><color rgba="1 0 0 1"/></material>
  <link name="base">
    <inertial>
      <origin xyz="0 0 0.1" rpy="0.1 0.2 0.3"/>
      <mass value="2.5"/>
      <inertia ixx="2" ixy="0.1" ixz="0.2" iyy="2.5" iyz="0.3" izz="3"/>
    </inertial>
    <visual><geometry><box size="1 1 1"/></geometry></visual>
    <collision><geometry><box size="1 1 1"/></geometry></collision>
  </link>
  <joint name="shoulder" type="revolute">
    <origin xyz="0 0 1" rpy="0 0 1.5707963267948966"/>
    <parent link="base"/>
    <child link="upper"/>
    <axis xyz="0 0 2"/>
    <limit lower="-1" upper="1" effort="10" velocity="1"/>
    <dynamics damping="0.1"/>
    <safety_controller k_velocity="1"/>
    <calibration rising="0"/>
  </joint>
  <link name="upper">
    <inertial><mass value="1"/></inertial>
  </link>
  <joint name="elbow" type="continuous">
    <parent link="upper"/><child link="fore"/>
  </joint>
  <link name="fore"/>
  <joint name="grip" type="prismatic">
    <parent link="fore"/><child link="finger"/>
    <axis xyz="3 4 0"/>
    <mimic joint="elbow" multiplier="2" offset="0.5"/>
  </joint>
  <link name="finger"/>
  <joint name="weld" type="fixed"><parent link="fore"/><child link="tool"/></joint>
  <link name="tool"/>
  <joint name="ball" type="spherical"><parent link="tool"/><child link="ballchild"/></joint>
  <link name="ballchild"/>
  <gazebo reference="base"/>
  <transmission name="t"/>
  <coupling name="c1" joints="elbow grip"/>
  <loop name="l1"/>
</robot>
"""


def test_valid_robot_structure_and_order():
    r = parse_urdf(ARM)
    assert isinstance(r, URDFRobot)
    assert r.name == "arm"
    assert [l.name for l in r.links] == ["base", "upper", "fore", "finger", "tool", "ballchild"]
    assert [j.name for j in r.joints] == ["shoulder", "elbow", "grip", "weld", "ball"]
    assert [j.type for j in r.joints] == [
        "revolute",
        "continuous",
        "prismatic",
        "fixed",
        "spherical",
    ]
    assert r.root == "base"
    assert [e.tag for e in r.extra] == ["coupling", "loop"]
    assert r.extra[0].get("joints") == "elbow grip"
    sh = r.joints[0]
    assert (sh.parent, sh.child) == ("base", "upper")


def test_inertial_values_and_symmetric_fill():
    r = parse_urdf(ARM)
    inert = r.links[0].inertial
    assert inert.mass == 2.5
    np.testing.assert_allclose(inert.xyz, [0, 0, 0.1])
    np.testing.assert_allclose(inert.rpy, [0.1, 0.2, 0.3])
    expected = np.array([[2, 0.1, 0.2], [0.1, 2.5, 0.3], [0.2, 0.3, 3]])
    np.testing.assert_array_equal(inert.inertia, expected)
    np.testing.assert_array_equal(inert.inertia, inert.inertia.T)
    assert inert.inertia.shape == (3, 3)


def test_defaults():
    r = parse_urdf(ARM)
    upper = r.links[1].inertial  # inertial without origin / inertia
    assert upper.mass == 1.0
    np.testing.assert_array_equal(upper.xyz, np.zeros(3))
    np.testing.assert_array_equal(upper.rpy, np.zeros(3))
    np.testing.assert_array_equal(upper.inertia, np.zeros((3, 3)))
    assert r.links[2].inertial is None  # no <inertial>
    elbow = r.joints[1]  # no origin, no axis
    np.testing.assert_array_equal(elbow.xyz, np.zeros(3))
    np.testing.assert_array_equal(elbow.rpy, np.zeros(3))
    np.testing.assert_array_equal(elbow.axis, [1.0, 0.0, 0.0])
    assert elbow.mimic is None
    for j in r.joints:
        assert j.xyz.shape == j.rpy.shape == j.axis.shape == (3,)


def test_origin_with_only_one_attribute():
    r = parse_urdf(robot(LINKS_AB + joint("j", "a", "b", inner='<origin xyz="1 2 3"/>')))
    np.testing.assert_array_equal(r.joints[0].xyz, [1, 2, 3])
    np.testing.assert_array_equal(r.joints[0].rpy, np.zeros(3))
    r = parse_urdf(robot(LINKS_AB + joint("j", "a", "b", inner='<origin rpy="0.1 0 0"/>')))
    np.testing.assert_array_equal(r.joints[0].xyz, np.zeros(3))
    np.testing.assert_array_equal(r.joints[0].rpy, [0.1, 0, 0])


def test_axis_normalised_and_origin():
    r = parse_urdf(ARM)
    np.testing.assert_allclose(r.joints[0].axis, [0, 0, 1])
    np.testing.assert_allclose(r.joints[2].axis, [0.6, 0.8, 0])
    np.testing.assert_allclose(r.joints[0].xyz, [0, 0, 1])
    np.testing.assert_allclose(r.joints[0].rpy, [0, 0, math.pi / 2])


@pytest.mark.parametrize(
    "xyz, unit", [("0 0 1e200", [0, 0, 1]), ("3e-300 4e-300 0", [0.6, 0.8, 0])]
)
def test_axis_normalised_without_overflow(xyz, unit):
    """Found by fuzzing: the norm of ``0 0 1e200`` overflowed to inf and the axis silently
    became zero (a prismatic joint that did not move: NaN in aba); subnormal axes keep their
    direction (their squares underflowed: a "zero axis" error)."""
    assert ARM.count('<axis xyz="0 0 2"/>') == 1
    r = parse_urdf(ARM.replace('<axis xyz="0 0 2"/>', f'<axis xyz="{xyz}"/>'))
    np.testing.assert_allclose(r.joints[0].axis, unit, rtol=1e-15)


def test_mimic():
    r = parse_urdf(ARM)
    assert r.joints[2].mimic == ("elbow", 2.0, 0.5)
    r = parse_urdf(
        robot(
            '<link name="a"/><link name="b"/><link name="c"/>'
            + joint("j1", "a", "b")
            + joint("j2", "b", "c", inner='<mimic joint="j1"/>')
        )
    )
    assert r.joints[1].mimic == ("j1", 1.0, 0.0)  # default multiplier / offset


def test_zero_axis_allowed_on_fixed_joint():
    r = parse_urdf(robot(LINKS_AB + joint("j", "a", "b", "fixed", '<axis xyz="0 0 0"/>')))
    np.testing.assert_array_equal(r.joints[0].axis, [1, 0, 0])


def test_floating_joint_and_single_link():
    r = parse_urdf(robot(LINKS_AB + joint("j", "a", "b", "floating")))
    assert r.joints[0].type == "floating" and r.root == "a"
    r = parse_urdf(robot('<link name="only"/>'))
    assert r.root == "only" and r.joints == [] and r.extra == []


def test_root_not_first_in_document():
    r = parse_urdf(
        robot(
            '<link name="b"/><link name="c"/><link name="a"/>'
            + joint("j2", "b", "c")
            + joint("j1", "a", "b")
        )
    )
    assert r.root == "a"
    assert [j.name for j in r.joints] == ["j2", "j1"]


def test_zero_mass_with_nonzero_inertia_and_psd_inertia():
    r = parse_urdf(
        robot(
            '<link name="a"><inertial><mass value="0"/>'
            '<inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/>'
            "</inertial></link>"
        )
    )
    assert r.links[0].inertial.mass == 0.0
    # singular (rank-deficient) PSD inertia, e.g. a thin rod, is fine
    r = parse_urdf(
        robot(
            '<link name="a"><inertial><mass value="1"/>'
            '<inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="0"/>'
            "</inertial></link>"
        )
    )
    assert r.links[0].inertial.inertia[2, 2] == 0.0


def test_sources_path_pathlike_bytes_and_whitespace(tmp_path):
    f = tmp_path / "arm.urdf"
    f.write_text(ARM)
    for src in (f, str(f), ARM.encode(), "\n   " + ARM.lstrip()):
        r = parse_urdf(src)
        assert r.name == "arm" and len(r.links) == 6


def test_utf8_bytes_with_encoding_declaration():
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?><robot name="r\u00e9"><link name="\u00e9"/></robot>'
    )
    r = parse_urdf(xml.encode("utf-8"))
    assert r.name == "r\u00e9" and r.root == "\u00e9"


# ------------------------------------------------------------------ rpy convention
def _rx(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])


def _ry(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def _rz(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def _axis_angle(axis, angle):
    """Rodrigues' formula: an independent construction of a rotation."""
    k = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + math.sin(angle) * K + (1 - math.cos(angle)) * K @ K


def test_rpy_to_matrix_convention():
    rng = np.random.default_rng(0)
    for _ in range(20):
        r, p, y = rng.uniform(-math.pi, math.pi, 3)
        R = rpy_to_matrix([r, p, y])
        expected = _axis_angle([0, 0, 1], y) @ _axis_angle([0, 1, 0], p) @ _axis_angle([1, 0, 0], r)
        np.testing.assert_allclose(R, expected, atol=1e-12)
        np.testing.assert_allclose(R, _rz(y) @ _ry(p) @ _rx(r), atol=1e-12)
        np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-12)
        assert np.linalg.det(R) == pytest.approx(1.0)


def test_rpy_to_matrix_single_axes():
    # yaw of 90 deg maps x to y; roll of 90 deg maps y to z; pitch of 90 deg maps z to x
    np.testing.assert_allclose(
        rpy_to_matrix((0, 0, math.pi / 2)) @ [1, 0, 0], [0, 1, 0], atol=1e-15
    )
    np.testing.assert_allclose(
        rpy_to_matrix((math.pi / 2, 0, 0)) @ [0, 1, 0], [0, 0, 1], atol=1e-15
    )
    np.testing.assert_allclose(
        rpy_to_matrix((0, math.pi / 2, 0)) @ [0, 0, 1], [1, 0, 0], atol=1e-15
    )
    np.testing.assert_array_equal(rpy_to_matrix(np.zeros(3)), np.eye(3))
    assert rpy_to_matrix([0.1, 0.2, 0.3]).shape == (3, 3)


# ------------------------------------------------------------------ security
BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<robot name="&lol9;"><link name="a"/></robot>
"""

EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE robot [ <!ENTITY x SYSTEM "file:///etc/passwd"> ]>
<robot name="r"><link name="&x;"/></robot>
"""

EXTERNAL_DTD = """<?xml version="1.0"?>
<!DOCTYPE robot SYSTEM "http://example.invalid/evil.dtd">
<robot name="r"><link name="a"/></robot>
"""

PARAM_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE robot [ <!ENTITY % p SYSTEM "file:///etc/passwd"> %p; ]>
<robot name="r"><link name="a"/></robot>
"""


@pytest.mark.parametrize(
    "doc",
    [
        BILLION_LAUGHS,
        EXTERNAL_ENTITY,
        EXTERNAL_DTD,
        PARAM_ENTITY,
        '<!DOCTYPE robot><robot name="r"><link name="a"/></robot>',
    ],
)
def test_doctype_and_entities_refused(doc):
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="DOCTYPE/entity declarations are not allowed"):
        parse_urdf(doc)
    with pytest.raises(ValueError, match="DOCTYPE/entity"):
        parse_urdf(doc.encode())
    assert time.perf_counter() - t0 < 1.0


def test_doctype_refused_from_file(tmp_path):
    f = tmp_path / "evil.urdf"
    f.write_text(EXTERNAL_ENTITY)
    with pytest.raises(ValueError, match="DOCTYPE/entity"):
        parse_urdf(f)


def test_undefined_entity_reference_is_malformed():
    with pytest.raises(ValueError, match=r"malformed XML at line 1"):
        parse_urdf('<robot name="&x;"><link name="a"/></robot>')


# ------------------------------------------------------------------ errors
def test_malformed_xml_reports_line_and_column():
    with pytest.raises(ValueError, match=r"URDF: malformed XML at line 3, column \d+"):
        parse_urdf('<robot name="r">\n<link name="a">\n</robot>')
    with pytest.raises(ValueError, match="malformed XML"):
        parse_urdf(b"<robot")


def test_missing_file():
    with pytest.raises(ValueError, match="cannot read file"):
        parse_urdf("/nonexistent/dir/model.urdf")


def test_root_element_not_robot():
    with pytest.raises(ValueError, match=r"root element is <model>, expected <robot>"):
        parse_urdf('<model name="r"><link name="a"/></model>')


def test_robot_without_name_or_links():
    with pytest.raises(ValueError, match=r"URDF <robot>: missing"):
        parse_urdf('<robot><link name="a"/></robot>')
    with pytest.raises(ValueError, match=r'<robot name="r">: no <link>'):
        parse_urdf(robot(""))


@pytest.mark.parametrize(
    "body, match",
    [
        ("<link/>", r"URDF <link> #0.*missing or empty name"),
        ('<link name="a"/><link name=""/>', r"URDF <link> #1.*missing or empty name"),
        (
            LINKS_AB + '<joint type="fixed"><parent link="a"/><child link="b"/></joint>',
            r"URDF <joint> #0.*missing or empty name",
        ),
    ],
)
def test_missing_names(body, match):
    with pytest.raises(ValueError, match=match):
        parse_urdf(robot(body))


def test_duplicate_names():
    with pytest.raises(ValueError, match=r'<link name="a">: duplicate link name'):
        parse_urdf(robot('<link name="a"/><link name="a"/>'))
    with pytest.raises(ValueError, match=r'<joint name="j">: duplicate joint name'):
        parse_urdf(
            robot(
                '<link name="a"/><link name="b"/><link name="c"/>'
                + joint("j", "a", "b")
                + joint("j", "b", "c")
            )
        )


def test_joint_types():
    with pytest.raises(ValueError, match=r"<joint name=\"knee\">: unknown joint type 'bogus'"):
        parse_urdf(robot(LINKS_AB + joint("knee", "a", "b", "bogus")))
    with pytest.raises(
        ValueError, match=r"<joint name=\"knee\">: joint type 'planar' is not supported"
    ):
        parse_urdf(robot(LINKS_AB + joint("knee", "a", "b", "planar")))
    with pytest.raises(ValueError, match=r"<joint name=\"knee\">: missing type"):
        parse_urdf(
            robot(LINKS_AB + '<joint name="knee"><parent link="a"/><child link="b"/></joint>')
        )


def test_missing_parent_child_or_link_attribute():
    with pytest.raises(ValueError, match=r'<joint name="j">: missing <parent>'):
        parse_urdf(robot(LINKS_AB + '<joint name="j" type="fixed"><child link="b"/></joint>'))
    with pytest.raises(ValueError, match=r'<joint name="j">: missing <child>'):
        parse_urdf(robot(LINKS_AB + '<joint name="j" type="fixed"><parent link="a"/></joint>'))
    with pytest.raises(ValueError, match=r'<joint name="j"> <parent>: missing link attribute'):
        parse_urdf(
            robot(LINKS_AB + '<joint name="j" type="fixed"><parent/><child link="b"/></joint>')
        )
    with pytest.raises(ValueError, match=r'<joint name="j"> <child>: missing link attribute'):
        parse_urdf(
            robot(LINKS_AB + '<joint name="j" type="fixed"><parent link="a"/><child/></joint>')
        )
    with pytest.raises(ValueError, match=r'<joint name="j">: more than one <child>'):
        parse_urdf(
            robot(
                LINKS_AB + '<joint name="j" type="fixed"><parent link="a"/>'
                '<child link="b"/><child link="b"/></joint>'
            )
        )


def test_undeclared_links():
    with pytest.raises(ValueError, match=r"<joint name=\"j2\">: child link 'nope' does not exist"):
        parse_urdf(robot(LINKS_AB + joint("j1", "a", "b") + joint("j2", "b", "nope")))
    with pytest.raises(
        ValueError, match=r"<joint name=\"j2\">: parent link 'ghost' does not exist"
    ):
        parse_urdf(robot(LINKS_AB + joint("j1", "a", "b") + joint("j2", "ghost", "a")))


def test_link_child_of_two_joints():
    with pytest.raises(
        ValueError, match=r"<joint name=\"j2\">: link 'c' is already the child of joint 'j1'"
    ):
        parse_urdf(
            robot(
                '<link name="a"/><link name="b"/><link name="c"/>'
                + joint("j1", "a", "c")
                + joint("j2", "b", "c")
            )
        )


def test_parent_equals_child():
    with pytest.raises(
        ValueError, match=r"<joint name=\"self\">: parent and child are the same link 'a'"
    ):
        parse_urdf(robot(LINKS_AB + joint("self", "a", "a")))


def test_cycle_without_root():
    with pytest.raises(
        ValueError, match=r'URDF <joint name="j\d">: no root link: joints .* kinematic loop'
    ):
        parse_urdf(robot(LINKS_AB + joint("j1", "a", "b") + joint("j2", "b", "a")))


def test_loop_detached_from_root():
    body = (
        '<link name="base"/><link name="a"/><link name="b"/><link name="c"/>'
        + joint("j1", "a", "b")
        + joint("j2", "b", "c")
        + joint("j3", "c", "a")
    )
    with pytest.raises(
        ValueError, match=r'URDF <joint name="j\d">: joints .*j1.*kinematic loop'
    ) as ei:
        parse_urdf(robot(body))
    msg = str(ei.value)
    assert "j2" in msg and "j3" in msg and "no root" not in msg


def test_several_roots():
    with pytest.raises(ValueError, match=r"URDF <robot>: more than one root link \['a', 'c'\]"):
        parse_urdf(robot('<link name="a"/><link name="b"/><link name="c"/>' + joint("j", "a", "b")))


@pytest.mark.parametrize("jtype", ["revolute", "continuous", "prismatic"])
def test_zero_axis_on_moving_joint(jtype):
    with pytest.raises(ValueError, match=rf'<joint name="j">: zero axis on a {jtype} joint'):
        parse_urdf(robot(LINKS_AB + joint("j", "a", "b", jtype, '<axis xyz="0 0 0"/>')))


def test_axis_without_xyz():
    with pytest.raises(ValueError, match=r'<joint name="j"> <axis>: missing xyz'):
        parse_urdf(robot(LINKS_AB + joint("j", "a", "b", inner="<axis/>")))


@pytest.mark.parametrize(
    "inner, match",
    [
        ('<origin xyz="1 2"/>', r'<joint name="j"> <origin xyz>: expected 3 numbers, got 2'),
        ('<origin xyz="1 2 3 4"/>', r'<joint name="j"> <origin xyz>: expected 3 numbers, got 4'),
        ('<origin rpy="0 0 x"/>', r"<joint name=\"j\"> <origin rpy>: cannot parse 'x' as a number"),
        ('<origin rpy="0 0 1_0"/>', r"<joint name=\"j\"> <origin rpy>: cannot parse '1_0'"),
        ('<origin xyz="0 nan 0"/>', r"<joint name=\"j\"> <origin xyz>: non-finite number 'nan'"),
        ('<origin xyz="0 inf 0"/>', r"<joint name=\"j\"> <origin xyz>: non-finite number 'inf'"),
        (
            '<origin xyz="0 1e400 0"/>',
            r"<joint name=\"j\"> <origin xyz>: non-finite number '1e400'",
        ),
        ('<axis xyz="1 0"/>', r'<joint name="j"> <axis xyz>: expected 3 numbers'),
        ('<axis xyz="1 0 -inf"/>', r'<joint name="j"> <axis xyz>: non-finite'),
        ("<origin/><origin/>", r'<joint name="j">: more than one <origin>'),
    ],
)
def test_bad_joint_numbers(inner, match):
    with pytest.raises(ValueError, match=match):
        parse_urdf(robot(LINKS_AB + joint("j", "a", "b", inner=inner)))


def inertial_link(inner: str, name: str = "foot") -> str:
    return robot(f'<link name="{name}"><inertial>{inner}</inertial></link>')


I_OK = '<inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/>'


@pytest.mark.parametrize(
    "inner, match",
    [
        ('<mass value="-1.0"/>', r'<link name="foot"> <inertial>: negative mass -1.0'),
        (I_OK, r'<link name="foot"> <inertial>: missing <mass>'),
        ("<mass/>", r'<link name="foot"> <inertial> <mass>: missing value'),
        (
            '<mass value="heavy"/>',
            r"<link name=\"foot\"> <inertial> <mass value>: cannot parse 'heavy'",
        ),
        (
            '<mass value="1 2"/>',
            r'<link name="foot"> <inertial> <mass value>: expected 1 number, got 2',
        ),
        ('<mass value="nan"/>', r'<link name="foot"> <inertial> <mass value>: non-finite'),
        (
            '<mass value="1"/><mass value="1"/>',
            r'<link name="foot"> <inertial>: more than one <mass>',
        ),
        (
            '<mass value="1"/><origin xyz="0 0"/>',
            r'<link name="foot"> <inertial> <origin xyz>: expected 3 numbers',
        ),
        (
            '<mass value="1"/><origin rpy="a b c"/>',
            r'<link name="foot"> <inertial> <origin rpy>: cannot parse',
        ),
        (
            '<mass value="1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0"/>',
            r'<link name="foot"> <inertial> <inertia>: missing izz',
        ),
        (
            '<mass value="1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1 2" iyz="0" izz="1"/>',
            r'<link name="foot"> <inertial> <inertia iyy>: expected 1 number',
        ),
        (
            '<mass value="1"/><inertia ixx="1" ixy="zero" ixz="0" iyy="1" iyz="0" izz="1"/>',
            r"<link name=\"foot\"> <inertial> <inertia ixy>: cannot parse 'zero'",
        ),
        (
            '<mass value="1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="inf"/>',
            r'<link name="foot"> <inertial> <inertia izz>: non-finite',
        ),
        (
            '<mass value="1"/><inertia ixx="-1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/>',
            r'<link name="foot"> <inertial> <inertia>: not positive semi-definite',
        ),
        (
            '<mass value="1"/><inertia ixx="1" ixy="2" ixz="0" iyy="1" iyz="0" izz="1"/>',
            r'<link name="foot"> <inertial> <inertia>: not positive semi-definite',
        ),
        (
            '<mass value="0"/><inertia ixx="1" ixy="2" ixz="0" iyy="1" iyz="0" izz="1"/>',
            r'<link name="foot"> <inertial> <inertia>: not positive semi-definite',
        ),
    ],
)
def test_bad_inertial(inner, match):
    with pytest.raises(ValueError, match=match):
        parse_urdf(inertial_link(inner))


def test_duplicate_inertial():
    with pytest.raises(ValueError, match=r'<link name="foot">: more than one <inertial>'):
        parse_urdf(
            robot(
                '<link name="foot"><inertial><mass value="1"/></inertial>'
                '<inertial><mass value="1"/></inertial></link>'
            )
        )


def test_psd_tolerance():
    # a tiny negative eigenvalue from round-off is tolerated
    r = parse_urdf(
        inertial_link(
            '<mass value="1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="-1e-14"/>'
        )
    )
    assert r.links[0].inertial.inertia[2, 2] == -1e-14


def test_mimic_errors():
    """A <mimic> naming a missing joint is an error with strict=True (it was the default until
    issue 15: now it is dropped with a warning, see test_mimic_missing_joint_dropped)."""
    three = '<link name="a"/><link name="b"/><link name="c"/>'
    with pytest.raises(
        ValueError, match=r"<joint name=\"j2\"> <mimic>: joint 'ghost' does not exist"
    ):
        parse_urdf(
            robot(
                three
                + joint("j1", "a", "b")
                + joint("j2", "b", "c", inner='<mimic joint="ghost"/>')
            ),
            strict=True,
        )
    with pytest.raises(ValueError, match=r'<joint name="j2"> <mimic>: missing joint attribute'):
        parse_urdf(robot(three + joint("j1", "a", "b") + joint("j2", "b", "c", inner="<mimic/>")))
    with pytest.raises(ValueError, match=r'<joint name="j2"> <mimic multiplier>: cannot parse'):
        parse_urdf(
            robot(
                three
                + joint("j1", "a", "b")
                + joint("j2", "b", "c", inner='<mimic joint="j1" multiplier="x"/>')
            )
        )
    with pytest.raises(ValueError, match=r'<joint name="j2"> <mimic>: a joint cannot mimic itself'):
        parse_urdf(
            robot(
                three + joint("j1", "a", "b") + joint("j2", "b", "c", inner='<mimic joint="j2"/>')
            )
        )


def test_bad_source_type():
    with pytest.raises(TypeError):
        parse_urdf(12345)


def test_malformed_position_counts_stripped_leading_whitespace():
    # positions refer to the caller's text (expat reports 1-based lines, 0-based columns)
    with pytest.raises(ValueError, match=r"malformed XML at line 4, column 3: mismatched tag"):
        parse_urdf('\n\n  <robot name="r">\n</rob>')
    with pytest.raises(ValueError, match=r"malformed XML at line 1, column 36: mismatched tag"):
        parse_urdf('  <robot name="r"><link name="a"></robot>')


def _chain_urdf(n):
    inert = (
        '<inertial><mass value="1"/>'
        '<inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/></inertial>'
    )
    parts = [f'<robot name="chain"><link name="l0">{inert}</link>']
    for i in range(1, n):
        parts.append(
            f'<link name="l{i}">{inert}</link><joint name="j{i}" type="revolute">'
            f'<parent link="l{i - 1}"/><child link="l{i}"/><origin xyz="0 0 0.1"/>'
            '<axis xyz="0 0 1"/></joint>'
        )
    return "".join(parts) + "</robot>"


def test_deep_chain_builds_without_recursion():
    """A chain deeper than Python's recursion limit loads (the tree walk uses an explicit stack)
    and leaves the interpreter's recursion limit alone."""
    import sys

    from jaxdyn.model.build import build_model

    limit = sys.getrecursionlimit()
    n = limit + 200
    model = build_model(parse_urdf(_chain_urdf(n)))
    assert sys.getrecursionlimit() == limit
    assert model.nv == n - 1
    assert list(model.topo.parent[:3]) == [-1, 0, 1]
    assert int(model.topo.depth.max()) == n - 2
    assert model.topo.frame_names[:2] == ("l0", "l1")
    assert model.topo.support[5, 0] and not model.topo.support[0, 5]


def test_duplicate_name_far_apart_detected():
    """Duplicate checks are set lookups (linear loading) and still catch the last duplicate."""
    text = _chain_urdf(400).replace("</robot>", '<link name="l3"/></robot>')
    with pytest.raises(ValueError, match='link name="l3".*duplicate'):
        parse_urdf(text)

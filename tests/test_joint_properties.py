"""Joint properties read from URDF ``<limit>`` / ``<dynamics>`` (model leaves used by the
simulator), against Pinocchio's parser of the same files."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

import jaxdyn
from jaxdyn import robots

from oracle import robot_params


@pytest.mark.parametrize("name", robot_params("panda", "solo12", "talos_full"))
def test_limits_match_pinocchio(name):
    path, _ = robots.resolve(name)
    model = jaxdyn.load_urdf(str(path))
    pm = pin.buildModelFromUrdf(str(path))
    checked = 0
    for j, jname in enumerate(model.joint_names):
        if not pm.existJointName(jname):
            continue
        pj = pm.joints[pm.getJointId(jname)]
        if pj.nq != 1:  # continuous joints are (cos, sin) in Pinocchio
            continue
        qj, vj = model.q_slice(j).start, model.v_slice(j).start
        ours = [
            model.q_lower[qj],
            model.q_upper[qj],
            model.effort_limit[vj],
            model.velocity_limit[vj],
            model.damping[vj],
            model.friction[vj],
        ]
        ref = [
            pm.lowerPositionLimit[pj.idx_q],
            pm.upperPositionLimit[pj.idx_q],
            pm.effortLimit[pj.idx_v],
            pm.velocityLimit[pj.idx_v],
            pm.damping[pj.idx_v],
            pm.friction[pj.idx_v],
        ]
        np.testing.assert_allclose(np.asarray(ours, float), np.asarray(ref, float), rtol=1e-12)
        checked += 1
    assert checked >= 7


LIMITS = """<robot name="lim">
  <link name="a"><inertial><mass value="1"/>
    <inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="b"><inertial><mass value="1"/>
    <inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="c"><inertial><mass value="1"/>
    <inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="j1" type="revolute"><parent link="a"/><child link="b"/><axis xyz="0 0 1"/>
    <limit lower="-1" upper="2" effort="5" velocity="3"/>
    <dynamics damping="0.1" friction="0.2"/></joint>
  <joint name="j2" type="continuous"><parent link="b"/><child link="c"/><axis xyz="0 1 0"/>
    <limit lower="-1" upper="1" effort="7"/></joint>
</robot>"""


def test_limits_semantics_and_floating_base():
    m = jaxdyn.load_urdf(LIMITS, floating_base=True)
    inf = np.inf
    np.testing.assert_array_equal(np.asarray(m.q_lower), [-inf] * 7 + [-1, -inf])
    np.testing.assert_array_equal(np.asarray(m.q_upper), [inf] * 7 + [2, inf])
    np.testing.assert_array_equal(np.asarray(m.effort_limit), [inf] * 6 + [5, 7])
    np.testing.assert_array_equal(np.asarray(m.velocity_limit), [inf] * 6 + [3, inf])
    np.testing.assert_array_equal(np.asarray(m.damping), [0] * 6 + [0.1, 0])
    np.testing.assert_array_equal(np.asarray(m.friction), [0] * 6 + [0.2, 0])
    # a file without <limit> / <dynamics>: the fields stay None (the pytree is unchanged)
    bare = LIMITS.replace('<limit lower="-1" upper="2" effort="5" velocity="3"/>', "")
    bare = bare.replace('<dynamics damping="0.1" friction="0.2"/>', "")
    bare = bare.replace('<limit lower="-1" upper="1" effort="7"/>', "")
    assert jaxdyn.load_urdf(bare).q_lower is None


def test_bad_limits_warn():
    bad = LIMITS.replace('lower="-1" upper="2"', 'lower="2" upper="-1"')
    with pytest.warns(jaxdyn.JaxdynWarning, match=r'joint name="j1"> <limit>: lower 2.0 > upper'):
        m = jaxdyn.load_urdf(bad)
    assert np.isinf(float(m.q_lower[0]))
    with pytest.raises(ValueError, match=r'<joint name="j1"> <limit upper>: cannot parse'):
        jaxdyn.load_urdf(LIMITS.replace('upper="2"', 'upper="two"'))

"""Errors: wrong shapes, non-unit quaternions, unknown frames, bad URDF input.

Shape errors are raised at trace time (before any computation), so these tests are cheap; the
quaternion check is an ``equinox.error_if`` evaluated at run time.
"""

from __future__ import annotations

import re

import equinox as eqx
import jax
import numpy as np
import pytest

import jaxdyn

from oracle import assert_close, robot_case

QUAT_MSG = "a quaternion in q is not of unit norm"
#: What an ``equinox.error_if`` raised inside ``jax.jit`` looks like to the caller: the first
#: (traced) call raises ``jax.errors.JaxRuntimeError``; later calls of the cached executable
#: go through jax's C++ dispatch, which raises ``ValueError("INTERNAL: CpuCallback error...")``
#: with the same message (JAX 0.10 / equinox 0.13 behaviour, not jaxdyn's).
JIT_ERRORS = (jax.errors.JaxRuntimeError, ValueError)


@pytest.fixture(scope="module")
def quad(quad12):
    """quad12 (floating base: a quaternion in q) and a valid state."""
    m = quad12.model
    s = quad12.states[0]
    return m, dict(
        q=s["q"],
        v=s["v"],
        a=s["a"],
        tau=s["tau"],
        f_ext=s["f_ext"],
        q0=s["q"],
        q1=quad12.states[1]["q"],
    )


# (function name, argument names in order, extra keyword arguments)
SIGNATURES = (
    ("rnea", ("q", "v", "a", "f_ext"), {}),
    ("crba", ("q",), {}),
    ("aba", ("q", "v", "tau", "f_ext"), {}),
    ("minv", ("q",), {}),
    ("bias_forces", ("q", "v"), {}),
    ("gravity_forces", ("q",), {}),
    ("forward_kinematics", ("q",), {}),
    ("frame_placement", ("q",), {"frame": "FL_FOOT"}),
    ("jacobian", ("q",), {"frame": "FL_FOOT"}),
    ("joint_jacobians", ("q",), {}),
    ("center_of_mass", ("q",), {}),
    ("kinetic_energy", ("q", "v"), {}),
    ("potential_energy", ("q",), {}),
    ("integrate", ("q", "v"), {}),
    ("difference", ("q0", "q1"), {}),
)
EXPECTED = {
    "q": ("nq", 19),
    "q0": ("nq", 19),
    "q1": ("nq", 19),
    "v": ("nv", 18),
    "a": ("nv", 18),
    "tau": ("nv", 18),
    "f_ext": ("nb, 6", "13, 6"),
}
CASES = [(fn, args, kw, bad) for fn, args, kw in SIGNATURES for bad in args]


def _wrong(x):
    """Same rank, one entry short in the first axis."""
    return np.asarray(x)[:-1]


@pytest.mark.parametrize("fn, args, kw, bad", CASES, ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_wrong_shape_names_function_argument_and_size(quad, fn, args, kw, bad):
    m, state = quad
    values = [(_wrong(state[a]) if a == bad else state[a]) for a in args]
    names, size = EXPECTED[bad]
    shape = re.escape(", ".join(map(str, _wrong(state[bad]).shape)))
    pattern = (
        rf"^{fn}: {bad} has shape \({shape},?\), "
        rf"expected \({re.escape(names)}\)=\({re.escape(str(size))},?\)"
    )
    with pytest.raises(ValueError, match=pattern):
        getattr(jaxdyn, fn)(m, *values, **kw)


@pytest.mark.parametrize("fn, args, kw, bad", CASES[:3], ids=[f"{c[0]}-{c[3]}" for c in CASES[:3]])
def test_batched_input_suggests_vmap(quad, fn, args, kw, bad):
    m, state = quad
    values = [(np.stack([state[a]] * 2) if a == bad else state[a]) for a in args]
    with pytest.raises(ValueError, match=rf"^{fn}: {bad} has shape .*wrap the call in jax\.vmap"):
        getattr(jaxdyn, fn)(m, *values, **kw)


def test_wrong_shape_under_jit_and_vmap(quad):
    """The same errors surface through jax.jit and jax.vmap (raised while tracing)."""
    m, s = quad
    with pytest.raises(ValueError, match=r"^crba: q has shape \(18,\)"):
        jax.jit(jaxdyn.crba)(m, s["q"][:-1])
    with pytest.raises(ValueError, match=r"^rnea: v has shape \(17,\)"):
        jax.vmap(jaxdyn.rnea, in_axes=(None, None, 0, None))(m, s["q"], np.zeros((4, 17)), s["a"])


# --------------------------------------------------------------------------- quaternions
def _bad_quaternion(q):
    q = np.array(q)
    q[3:7] *= 1.5  # root free joint: [x y z qw qx qy qz]
    return q


def test_non_unit_quaternion_raises_under_jit(quad):
    m, s = quad
    q = _bad_quaternion(s["q"])
    f = jax.jit(lambda m, q, v, a: jaxdyn.rnea(m, q, v, a))
    with pytest.raises(jax.errors.JaxRuntimeError, match=f"rnea: {QUAT_MSG}"):
        jax.block_until_ready(f(m, q, s["v"], s["a"]))  # first call: traced and compiled
    # a unit quaternion passes through the same compiled function
    assert np.all(np.isfinite(f(m, s["q"], s["v"], s["a"])))
    with pytest.raises(JIT_ERRORS, match=f"rnea: {QUAT_MSG}"):
        jax.block_until_ready(f(m, q, s["v"], s["a"]))  # cached executable


def test_non_unit_quaternion_raises_under_vmap(quad):
    """One bad sample in a batch is enough to raise; a clean batch passes."""
    m, s = quad
    qs = np.stack([s["q"], s["q"], _bad_quaternion(s["q"])])
    f = jax.jit(jax.vmap(lambda q: jaxdyn.center_of_mass(m, q)))
    assert np.all(np.isfinite(f(qs[:2])))
    with pytest.raises(JIT_ERRORS, match=f"center_of_mass: {QUAT_MSG}"):
        jax.block_until_ready(f(qs))


def test_non_unit_quaternion_raises_eagerly(quad):
    m, s = quad
    with pytest.raises(eqx.EquinoxRuntimeError, match=f"crba: {QUAT_MSG}"):
        jaxdyn.crba(m, _bad_quaternion(s["q"]))


def test_quaternion_tolerance(quad):
    """A quaternion off by less than the tolerance (1e-3 in norm squared) is accepted."""
    m, s = quad
    q = np.array(s["q"])
    q[3:7] *= np.sqrt(1 + 5e-4)
    f = jax.jit(lambda m, q: jaxdyn.center_of_mass(m, q))
    assert np.all(np.isfinite(f(m, q)))
    q[3:7] *= np.sqrt(1 + 2e-3)
    with pytest.raises(JIT_ERRORS, match=f"center_of_mass: {QUAT_MSG}"):
        jax.block_until_ready(f(m, q))


def test_value_checks_can_be_disabled(quad):
    m, s = quad
    q = _bad_quaternion(s["q"])
    jaxdyn.set_value_checks(False)
    try:
        # traced after the switch: no check (a fresh function, so nothing is cached)
        tau = jax.jit(lambda m, q, v, a: jaxdyn.rnea(m, q, v, a))(m, q, s["v"], s["a"])
        assert np.all(np.isfinite(tau))
        com = jax.jit(lambda m, q: jaxdyn.center_of_mass(m, q))(m, q)
        assert np.all(np.isfinite(com))
    finally:
        jaxdyn.set_value_checks(True)
    with pytest.raises(JIT_ERRORS, match=f"center_of_mass: {QUAT_MSG}"):
        jax.block_until_ready(jax.jit(lambda m, q: jaxdyn.center_of_mass(m, q))(m, q))
    with pytest.raises(eqx.EquinoxRuntimeError, match=f"crba: {QUAT_MSG}"):
        jaxdyn.crba(m, q)


def test_value_checks_do_not_change_results(quad):
    """``error_if`` is the identity on values: results with and without the checks agree
    (to rounding: XLA may fuse the two programs differently)."""
    m, s = quad
    outs = []
    for enabled in (True, False):
        jaxdyn.set_value_checks(enabled)
        try:
            f = jax.jit(lambda m, q, v, tau: (jaxdyn.aba(m, q, v, tau), jaxdyn.crba(m, q)))
            outs.append(jax.tree_util.tree_map(np.asarray, f(m, s["q"], s["v"], s["tau"])))
        finally:
            jaxdyn.set_value_checks(True)
    for a, b in zip(*outs):
        assert_close(a, b, 1e-13, err_msg="value checks changed a result")


def test_value_checks_disabled_for_a_fresh_jit_of_a_traced_function(quad):
    """JAX caches traces per function: ``set_value_checks`` must invalidate them, or a
    ``jax.jit(jaxdyn.rnea)`` traced before the switch would keep checking."""
    m, s = quad
    q = _bad_quaternion(s["q"])
    jax.jit(jaxdyn.rnea)(m, s["q"], s["v"], s["a"])  # traced with the checks on
    jaxdyn.set_value_checks(False)
    try:
        tau = jax.block_until_ready(jax.jit(jaxdyn.rnea)(m, q, s["v"], s["a"]))
    finally:
        jaxdyn.set_value_checks(True)
    assert np.all(np.isfinite(tau))


# --------------------------------------------------------------------------- frames
@pytest.mark.parametrize("fn", ["jacobian", "frame_placement"])
def test_unknown_frame_lists_frames(quad, fn):
    m, s = quad
    with pytest.raises(ValueError, match=r"no frame named 'nope'; frames are \[.*'FL_FOOT'.*\]"):
        getattr(jaxdyn, fn)(m, s["q"], "nope")
    with pytest.raises(ValueError, match=r"frame index 1000 out of range"):
        getattr(jaxdyn, fn)(m, s["q"], 1000)


def test_unknown_jacobian_reference(quad):
    m, s = quad
    with pytest.raises(ValueError, match=r"jacobian: reference must be one of .*'LOCAL'"):
        jaxdyn.jacobian(m, s["q"], "FL_FOOT", "LOCAL")


def test_frame_index_and_joint_index():
    m = robot_case("arm7").model
    f = m.frame_index("ee")
    assert m.frame_names[f] == "ee" and m.frame_index(f) == f
    with pytest.raises(ValueError, match=r"no joint named 'nope'; joints are \[.*'joint1'"):
        m.joint_index("nope")
    with pytest.raises(ValueError, match="no joint named 'nope'"):
        m.q_slice("nope")


# --------------------------------------------------------------------------- URDF
def _robot(body):
    return (
        f'<robot name="r"><link name="a"><inertial><mass value="1"/>'
        f'<inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial></link>'
        f"{body}</robot>"
    )


def _joint(name, parent, child, jtype="revolute"):
    return (
        f'<joint name="{name}" type="{jtype}"><parent link="{parent}"/>'
        f'<child link="{child}"/><axis xyz="0 0 1"/></joint>'
    )


BAD_URDF = {
    "unknown joint type": (
        _robot('<link name="b"/>' + _joint("knee", "a", "b", "bogus")),
        r'<joint name="knee">: unknown joint type \'bogus\'',
    ),
    "cycle": (
        _robot(
            '<link name="b"/><link name="c"/>' + _joint("j1", "b", "c") + _joint("j2", "c", "b")
        ),
        r'<joint name="j\d">: joints \[.*\] form a kinematic loop over links',
    ),
    "two parents": (
        _robot(
            '<link name="b"/><link name="c"/>'
            + _joint("j1", "a", "b")
            + _joint("j2", "c", "b")
            + _joint("j3", "a", "c")
        ),
        r'<joint name="j2">: link \'b\' is already the child of joint \'j1\'',
    ),
    "loop without root": (
        '<robot name="r"><link name="a"/><link name="b"/>'
        + _joint("j1", "a", "b")
        + _joint("j2", "b", "a")
        + "</robot>",
        r'<joint name="j\d">: no root link: joints .* form a kinematic loop',
    ),
    "negative mass": (
        _robot(
            '<link name="b"><inertial><mass value="-2"/></inertial></link>' + _joint("j", "a", "b")
        ),
        r'<link name="b"> <inertial>: negative mass',
    ),
    "entity expansion": (
        '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x "aaaa">'
        '<!ENTITY y "&x;&x;&x;&x;">]>' + _robot('<link name="&y;"/>'),
        r"DOCTYPE/entity declarations are not allowed",
    ),
    "missing link": (
        _robot(_joint("j", "a", "ghost")),
        r'<joint name="j">: child link \'ghost\' does not exist',
    ),
}


@pytest.mark.parametrize("what", list(BAD_URDF))
def test_bad_urdf_names_the_element(what):
    xml, match = BAD_URDF[what]
    with pytest.raises(ValueError, match=match):
        jaxdyn.load_urdf(xml)
    with pytest.raises(ValueError, match=match):
        jaxdyn.load_urdf(xml, floating_base=True)


def test_bad_urdf_file(tmp_path):
    xml, match = BAD_URDF["negative mass"]
    p = tmp_path / "bad.urdf"
    p.write_text(xml)
    with pytest.raises(ValueError, match=match):
        jaxdyn.load_urdf(str(p))
    with pytest.raises(ValueError, match="cannot read file"):
        jaxdyn.load_urdf(str(tmp_path / "missing.urdf"))


def test_urdf_without_moving_joint():
    xml = _robot('<link name="b"/>' + _joint("weld", "a", "b", "fixed"))
    with pytest.raises(ValueError, match="no moving joint"):
        jaxdyn.load_urdf(xml)
    m = jaxdyn.load_urdf(xml, floating_base=True)  # a single free body is fine
    assert (m.nq, m.nv, m.nb) == (7, 6, 1)

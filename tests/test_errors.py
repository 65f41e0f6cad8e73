"""Errors: wrong shapes, non-unit quaternions, unknown frames, bad URDF input.

Shape errors are raised at trace time (before any computation), so these tests are cheap; the
quaternion check is a value check evaluated at run time (jaxdyn's XLA FFI check on the CPU,
``equinox.error_if`` where that is unavailable).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn

from oracle import assert_close, robot_case

QUAT_MSG = "a quaternion in q is not of unit norm"
#: What a failed value check inside ``jax.jit`` looks like to the caller: the first (traced)
#: call raises ``jax.errors.JaxRuntimeError``; later calls of the cached executable go through
#: jax's C++ dispatch, which may raise ``ValueError`` with the same message (``INVALID_ARGUMENT:
#: <message>`` from jaxdyn's check, ``INTERNAL: CpuCallback error...`` from equinox's; JAX 0.10
#: behaviour, not jaxdyn's).
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
    """Issue 15 changed this: a fixed-base file without moving joints used to be refused ("no
    moving joint"); it is now a zero-DoF model (tests/test_zero_dof.py runs the algorithms)."""
    xml = _robot('<link name="b"/>' + _joint("weld", "a", "b", "fixed"))
    m = jaxdyn.load_urdf(xml)
    assert (m.nq, m.nv, m.nb) == (0, 0, 0) and set(m.frame_names) == {"a", "b", "weld"}
    m = jaxdyn.load_urdf(xml, floating_base=True)  # a single free body is fine
    assert (m.nq, m.nv, m.nb) == (7, 6, 1)


# --------------------------------------------------------------------------- issue 10 defects
def _quat_scaled(q, factor):
    q = np.array(q)
    q[3:7] *= factor
    return q


def test_nan_quaternion_fails(quad):
    m, s = quad
    q = np.array(s["q"])
    q[4] = np.nan
    with pytest.raises(jaxdyn.CheckError, match=f"crba: {QUAT_MSG}.*or not finite"):
        jaxdyn.crba(m, q)
    with pytest.raises(JIT_ERRORS, match=f"center_of_mass: {QUAT_MSG}"):
        jax.block_until_ready(jax.jit(lambda m, q: jaxdyn.center_of_mass(m, q))(m, q))


_aba = jax.jit(jaxdyn.aba)


def test_quaternions_within_tolerance_are_normalised(quad):
    """|q|^2 = 1.0005 used to give a 2.5e-3 relative error in aba: the algorithms now see the
    normalised quaternion."""
    m, s = quad
    q = _quat_scaled(s["q"], np.sqrt(1.0005))
    ref = _aba(m, s["q"], s["v"], s["tau"])
    assert_close(_aba(m, q, s["v"], s["tau"]), ref, 1e-12, err_msg="aba, |q|^2 = 1.0005")


def _first_line(e) -> str:
    return str(e).splitlines()[0]


def test_error_message_is_the_first_line(quad, caplog):
    """A failed value check reads as its message: eagerly and with jaxdyn.jit, the whole text
    of a jaxdyn.CheckError (a ValueError and an equinox.EquinoxRuntimeError); under a plain
    jax.jit, JAX's logged copy of the callback traceback is dropped."""
    m, s = quad
    q = _bad_quaternion(s["q"])
    want = f"crba: {QUAT_MSG} (tolerance 0.001) or not finite"
    with pytest.raises(jaxdyn.CheckError) as e:
        jaxdyn.crba(m, q)
    assert str(e.value) == want and isinstance(e.value, (ValueError, eqx.EquinoxRuntimeError))
    f = jaxdyn.jit(lambda m, q: jaxdyn.crba(m, q))
    for _ in range(2):  # traced call, then the cached executable
        with pytest.raises(jaxdyn.CheckError) as e:
            jax.block_until_ready(f(m, q))
        assert _first_line(e.value) == want
    assert np.all(np.isfinite(f(m, s["q"])))
    caplog.clear()
    with caplog.at_level("DEBUG", logger="jax._src.callback"):
        with pytest.raises(JIT_ERRORS, match=want.replace("(", r"\(").replace(")", r"\)")):
            jax.block_until_ready(jax.jit(lambda m, q: jaxdyn.crba(m, q))(m, q))
    assert not [r for r in caplog.records if "pure_callback failed" in r.getMessage()]


def _handler_checks() -> bool:
    from jaxdyn.backend import ffi

    return ffi.check_available()


def test_value_check_is_a_handler_call_without_host_callbacks(quad):
    """On the CPU (handler compiled) a value check is a call of jaxdyn's FFI handler: the
    program holds no host callback, and a failure reads ``INVALID_ARGUMENT: <message>`` when
    the result is used. Without the handler it is equinox.error_if's callback."""
    m, s = quad
    f = jax.jit(lambda m, q: jaxdyn.rnea(m, q, s["v"], s["a"]))
    text = f.lower(m, s["q"]).as_text()
    want = f"rnea: {QUAT_MSG} (tolerance 0.001) or not finite"
    with pytest.raises(JIT_ERRORS) as e:
        jax.block_until_ready(f(m, _bad_quaternion(s["q"])))
    if _handler_checks():
        assert "jaxdyn_check" in text and "callback" not in text
        # JAX 0.6 puts "Buffer Definition Event: " before the message
        line = _first_line(e.value)
        assert line.startswith("INVALID_ARGUMENT: ") and line.endswith(f": {want}"), line
    else:
        assert "callback" in text and want in str(e.value)


def test_value_checks_fall_back_to_equinox(quad, monkeypatch):
    """Where jaxdyn's handler cannot serve (no compiler, another platform), the same checks are
    equinox.error_if's, with the same message; under jax.vmap one bad sample fails the call."""
    from jaxdyn.backend import ffi

    monkeypatch.setattr(ffi, "check_available", lambda: False)
    m, s = quad
    f = jax.jit(jax.vmap(lambda q: jaxdyn.crba(m, q)))
    qs = np.stack([s["q"], _bad_quaternion(s["q"])])
    assert "callback" in f.lower(qs).as_text()
    with pytest.raises(JIT_ERRORS, match=f"crba: {QUAT_MSG}"):
        jax.block_until_ready(f(qs))
    assert np.all(np.isfinite(f(qs[:1])))


def test_value_check_with_jit_disabled(quad):
    """Under jax.disable_jit() the check runs in Python and a failure is a CheckError."""
    m, s = quad
    with jax.disable_jit():
        assert np.all(np.isfinite(jaxdyn.center_of_mass(m, s["q"])))
        with pytest.raises(jaxdyn.CheckError, match=f"center_of_mass: {QUAT_MSG}"):
            jaxdyn.center_of_mass(m, _bad_quaternion(s["q"]))


_CACHED = """
import os, sys
import jax
import jaxdyn
from jaxdyn import robots
m = robots.load("quad12")
q = jaxdyn.neutral_configuration(m)
jax.block_until_ready(jax.jit(lambda q: jaxdyn.crba(m, q))(q))
print(jaxdyn.value_checks.enabled(), sorted(os.listdir(sys.argv[1])))
"""


def test_programs_with_value_checks_enter_the_persistent_cache(tmp_path):
    """JAX's persistent compilation cache refuses programs holding host callbacks (equinox's
    error_if); with jaxdyn's handler a program with value checks is written to it."""
    import os

    env = dict(
        os.environ,
        JAX_COMPILATION_CACHE_DIR=str(tmp_path),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PLATFORMS="cpu",
    )
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CACHED), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    checks, files = r.stdout.strip().split(" ", 1)
    assert checks == "True"
    cached = "jit__lambda" in files
    assert cached == _handler_checks(), files


def test_jit_wrapper_passes_other_errors_through():
    with pytest.raises(ValueError, match="not a jaxdyn message"):
        jaxdyn.jit(lambda x: (_ for _ in ()).throw(ValueError("not a jaxdyn message")))(1.0)


def test_frame_argument_types(quad):
    m, s = quad
    for fn in (jaxdyn.jacobian, jaxdyn.frame_placement):
        for bad in (True, np.bool_(False), 1.5, None, ("FL_FOOT",)):
            with pytest.raises(TypeError, match=r"frame must be a frame name \(str\) or an "):
                fn(m, s["q"], bad)
    with pytest.raises(TypeError, match="frame must be a frame name"):
        m.frame_index(True)
    assert m.frame_index(np.int64(2)) == 2


def test_q_slice_and_v_slice_bounds(quad):
    m, _ = quad
    assert m.v_slice(0) == slice(0, 6) and m.v_slice(m.nb - 1).stop == m.nv
    assert m.q_slice(np.int64(0)) == slice(0, 7)
    for fn in ("v_slice", "q_slice"):
        for bad in (-1, 10000, m.nb):
            with pytest.raises(
                IndexError, match=rf"{fn}: joint index {bad} out of range \[0, 13\)"
            ):
                getattr(m, fn)(bad)
        with pytest.raises(TypeError, match=rf"{fn}: joint must be a joint name"):
            getattr(m, fn)(True)
        with pytest.raises(TypeError, match=rf"{fn}: joint must be a joint name"):
            getattr(m, fn)(1.0)


def test_f_ext_accepts_array_likes(quad):
    m, s = quad
    shapes = [
        jax.eval_shape(lambda f: jaxdyn.rnea(m, s["q"], s["v"], s["a"], f), f_ext)
        for f_ext in (s["f_ext"], s["f_ext"].tolist())
    ]
    assert shapes[0] == shapes[1]
    tiny = jaxdyn.load_urdf(jaxdyn.robots.random_urdf(2, 0, p_fixed=0.0, massless_prob=0.0))
    z = np.zeros(tiny.nv)
    fe = np.arange(12.0).reshape(2, 6)
    # a list of floats compiles with its values as constants (an array is the program's
    # input): equal to rounding, against the array op by op
    with jax.disable_jit():
        ref = jaxdyn.rnea(tiny, z, z, z, fe)
    np.testing.assert_allclose(jaxdyn.rnea(tiny, z, z, z, fe.tolist()), ref, rtol=1e-13)
    with pytest.raises(TypeError, match="rnea: f_ext must be an array of numbers"):
        jaxdyn.rnea(tiny, z, z, z, [[1.0] * 6, [1.0] * 5])


def test_cluster_model_given_to_tree_algorithms():
    from jaxdyn.clusters import robots as crobots

    cm = jaxdyn.load_urdf(crobots.path("four_bar"))
    q = np.zeros(cm.nq)
    v = np.zeros(cm.nv)
    calls = {
        "aba": (lambda: jaxdyn.aba(cm, q, v, v), "jaxdyn.caba"),
        "rnea": (lambda: jaxdyn.rnea(cm, q, v, v), "jaxdyn.crnea"),
        "aba_derivatives": (lambda: jaxdyn.aba_derivatives(cm, q, v, v), "caba"),
        "rnea_derivatives": (lambda: jaxdyn.rnea_derivatives(cm, q, v, v), "crnea"),
        "crba": (lambda: jaxdyn.crba(cm, q), "crnea"),
        "minv": (lambda: jaxdyn.minv(cm, q), "caba"),
        "bias_forces": (lambda: jaxdyn.bias_forces(cm, q, v), "crnea"),
        "gravity_forces": (lambda: jaxdyn.gravity_forces(cm, q), "crnea"),
        "delassus": (lambda: jaxdyn.delassus(cm, q, jaxdyn.Connect("x")), "jaxdyn.cefpa"),
        "constrained_aba": (
            lambda: jaxdyn.constrained_aba(cm, q, v, v, jaxdyn.Connect("x")),
            "jaxdyn.caba",
        ),
        "forward_kinematics": (lambda: jaxdyn.forward_kinematics(cm, q), "model.tree"),
        "jacobian": (lambda: jaxdyn.jacobian(cm, q, 0), "model.tree"),
        "center_of_mass": (lambda: jaxdyn.center_of_mass(cm, q), "model.tree"),
        "kinetic_energy": (lambda: jaxdyn.kinetic_energy(cm, q, v), "model.tree"),
        "integrate": (lambda: jaxdyn.integrate(cm, q, v), "model.tree"),
        "input_matrix": (lambda: jaxdyn.input_matrix(cm, q, v, jaxdyn.Inputs()), "model.tree"),
    }
    for name, (call, hint) in calls.items():
        with pytest.raises(
            TypeError,
            match=rf"^jaxdyn\.{name}: model is a jaxdyn\.clusters\."
            rf"ClusterModel.*{re.escape(hint)}",
        ):
            call()
    with pytest.raises(TypeError, match=r"jaxdyn\.crba: model must be a jaxdyn\.Model, got str"):
        jaxdyn.crba("arm7", q)


_constrained = jaxdyn.jit(
    lambda m, q, v, tau, d, cs: jaxdyn.constrained_aba(m, q, v, tau, cs, damping=d, method="dense"),
    static_argnums=5,
)


def test_constrained_aba_damping_and_redundant_constraints(quad):
    m, s = quad
    args = (m, s["q"], s["v"], s["tau"])
    cs = (jaxdyn.Connect("FL_FOOT"), jaxdyn.Connect("HR_FOOT"))
    for bad in (np.nan, -1.0, np.inf, np.float64(np.nan), np.array(np.nan)):
        with pytest.raises(ValueError, match=r"constrained_aba: damping must be >= 0 and finite"):
            jaxdyn.constrained_aba(*args, cs, damping=bad)
    with pytest.raises(TypeError, match="damping must be a number"):
        jaxdyn.constrained_aba(*args, cs, damping=True)
    with pytest.raises(ValueError, match=r"baumgarte kd must be >= 0 and finite, got nan"):
        jaxdyn.constrained_aba(*args, cs, baumgarte=(0.0, np.nan))
    # traced damping (an argument of the compiled function): equinox.error_if
    redundant = (jaxdyn.Connect("FL_FOOT"), jaxdyn.Connect("FL_FOOT"))
    with pytest.raises(jaxdyn.CheckError, match=r"^constrained_aba: damping must be >= 0 and"):
        _constrained(*args, jnp.asarray(np.nan), redundant)
    with pytest.raises(
        jaxdyn.CheckError,
        match=r"^constrained_aba: the constraint forces are "
        r"not finite.*redundant constraints.*damping > 0",
    ):
        _constrained(*args, jnp.asarray(0.0), redundant)
    out = _constrained(*args, jnp.asarray(1e-8), redundant)
    assert np.all(np.isfinite(out.qdd)) and np.all(np.isfinite(out.lam))


def test_value_checks_follow_the_switch(quad):
    """Every value check is in the traced program (jaxdyn's check primitive on the CPU, else
    equinox.error_if's callback) only while jaxdyn.config's value_checks is on."""
    m, s = quad
    cs = (jaxdyn.Connect("FL_FOOT"),)

    def f(q, d):
        return jaxdyn.constrained_aba(m, q, s["v"], s["tau"], cs, damping=d, method="dense")

    def callbacks():
        text = str(jax.make_jaxpr(f)(s["q"], 1e-8))
        return text.count("jaxdyn_check") + text.count("pure_callback")

    assert callbacks() >= 3  # quaternion, damping, constraint forces
    with jaxdyn.config.override(value_checks=False):
        assert callbacks() == 0

"""Lenient, explained loading (issue 15) and the load-time defects of issue 10.

Parsing and model building only, plus two small compiled checks (a massless subtree with and
without armature, against Pinocchio): cheap.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import jaxdyn
from jaxdyn.interop.pinocchio import Converter
from jaxdyn.model import urdf as U
from jaxdyn.model.urdf import parse_urdf, project_inertia

from oracle import RTOL64, assert_close, enable_x64, sym_upper


def _inertial(mass, I, xyz="0 0 0"):
    ixx, ixy, ixz, iyy, iyz, izz = I
    return (
        f'<inertial><origin xyz="{xyz}"/><mass value="{mass}"/>'
        f'<inertia ixx="{ixx}" ixy="{ixy}" ixz="{ixz}" iyy="{iyy}" iyz="{iyz}" izz="{izz}"/>'
        "</inertial>"
    )


def _link(name, inertial=""):
    return f'<link name="{name}">{inertial}</link>'


def _joint(name, parent, child, jtype="revolute", xyz="0 0 0.1", axis="0 1 0", extra=""):
    ax = (
        f'<axis xyz="{axis}"/><limit lower="-3" upper="3" effort="1" velocity="1"/>'
        if jtype != "fixed"
        else ""
    )
    return (
        f'<joint name="{name}" type="{jtype}"><parent link="{parent}"/><child link="{child}"/>'
        f'<origin xyz="{xyz}"/>{ax}{extra}</joint>'
    )


def _robot(*parts, name="r"):
    return f'<robot name="{name}">' + "".join(parts) + "</robot>"


BIG = (0.5, 0, 0, 0.4, 0, 0.3)  # the robot's inertia scale: 0.5


def _two_links(I_small, mass=1.0):
    return _robot(
        _link("base", _inertial(5.0, BIG)),
        _link("small", _inertial(mass, I_small)),
        _joint("j", "base", "small"),
    )


def _recorded(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    return out, [x for x in w if issubclass(x.category, jaxdyn.JaxdynWarning)]


def test_warning_class_is_exported():
    assert issubclass(jaxdyn.JaxdynWarning, UserWarning)
    assert jaxdyn.JaxdynWarning is jaxdyn.errors.JaxdynWarning


# ------------------------------------------------------------------ inertia eigenvalues
def test_rounding_size_negative_eigenvalue_clipped_with_warning():
    """TIAGo's antenna case: -3.5e-8 against a robot inertia scale of 0.5 (7e-8 relative)."""
    I = (1e-8, 0, 0, 2e-8, 0, -3.5e-8)
    r, w = _recorded(parse_urdf, _two_links(I))
    eig = np.linalg.eigvalsh(r.links[1].inertial.inertia)
    assert eig.min() >= 0 and np.allclose(eig, [0, 1e-8, 2e-8], atol=1e-20)
    assert len(w) == 1 and '<link name="small"> <inertial> <inertia>' in str(w[0].message)
    assert "clipped to 0" in str(w[0].message)
    assert w[0].filename == __file__  # attributed to the caller, not to jaxdyn
    with pytest.raises(ValueError, match=r'<link name="small"> .*not positive semi-definite'):
        parse_urdf(_two_links(I), strict=True)
    # a negative eigenvalue beyond INERTIA_RTOL of the scale is refused (current message)
    big = (1e-8, 0, 0, 2e-8, 0, -1e-5)
    with pytest.raises(
        ValueError,
        match=r'<link name="small"> .*not positive semi-definite.*'
        r"strict=False",
    ):
        parse_urdf(_two_links(big))
    assert U.INERTIA_RTOL == 1e-6


def test_non_psd_inertia_repaired_with_strict_false():
    I = (0.01, 0.03, 0, 0.01, 0, 0.02)  # eigenvalues -0.02, 0.02, 0.04
    with pytest.raises(
        ValueError,
        match=r'<link name="small"> <inertial> <inertia>: not '
        r"positive semi-definite",
    ):
        parse_urdf(_two_links(I))
    r, w = _recorded(parse_urdf, _two_links(I), strict=False)
    new = r.links[1].inertial.inertia
    ev = np.linalg.eigvalsh(new)
    assert ev[0] >= -1e-15 and ev[0] + ev[1] >= ev[2] - 1e-15
    assert np.allclose(
        new, project_inertia(np.array([[0.01, 0.03, 0], [0.03, 0.01, 0], [0, 0, 0.02]]))
    )
    msg = str(w[0].message)
    assert '<link name="small">' in msg and "correction" in msg and "Frobenius" in msg


def test_project_inertia_is_the_nearest_valid_inertia():
    rng = np.random.default_rng(0)
    A = np.array([[-1.0, 1, 1], [1, -1, 1], [1, 1, -1]])
    for _ in range(20):
        X = rng.normal(size=(3, 3))
        I = X + X.T
        P = project_inertia(I)
        lam = np.linalg.eigvalsh(P)
        assert np.all(A @ lam >= -1e-12) and np.allclose(P, P.T)
        assert np.allclose(project_inertia(P), P, atol=1e-12)  # idempotent
        d = np.linalg.norm(P - I)
        # no valid inertia sampled near I is nearer (random rotations and valid moments)
        for _ in range(200):
            s = np.abs(rng.normal(size=3)) * np.abs(lam).max()
            mom = np.array([s[1] + s[2], s[0] + s[2], s[0] + s[1]])
            Q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
            assert np.linalg.norm(Q @ np.diag(mom) @ Q.T - I) >= d - 1e-12
    valid = np.diag([1.0, 2.0, 2.5])
    np.testing.assert_allclose(project_inertia(valid), valid, atol=1e-15)


def test_triangle_inequality_warns_strict_refuses_lenient_projects():
    I = (0.001, 0, 0, 0.001, 0, 0.01)  # PR2's sensor mount: a + b < c
    r, w = _recorded(parse_urdf, _two_links(I))
    np.testing.assert_array_equal(r.links[1].inertial.inertia, np.diag([0.001, 0.001, 0.01]))
    assert len(w) == 1 and "triangle inequality" in str(w[0].message)
    assert '<link name="small">' in str(w[0].message)
    with pytest.raises(ValueError, match=r'<link name="small"> .*triangle inequality'):
        parse_urdf(_two_links(I), strict=True)
    r, w = _recorded(parse_urdf, _two_links(I), strict=False)
    ev = np.linalg.eigvalsh(r.links[1].inertial.inertia)
    assert ev[0] + ev[1] >= ev[2] - 1e-15 and "nearest physically valid" in str(w[0].message)
    # rounding-size violations are silent (icub's 1e-20 inertias)
    _, w = _recorded(parse_urdf, _two_links((1e-20, 0, 0, 1e-20, 0, 3e-20)))
    assert w == []


def test_strict_must_be_none_or_bool():
    with pytest.raises(TypeError, match="strict must be None, True or False"):
        parse_urdf(_two_links(BIG), strict="yes")


# ------------------------------------------------------------------ mimic
MIMIC = _robot(
    _link("base", _inertial(1.0, BIG)),
    _link("a", _inertial(1.0, BIG)),
    _link("b", _inertial(1.0, BIG)),
    _joint("ja", "base", "a"),
    _joint("jb", "a", "b", extra='<mimic joint="index_q1" multiplier="2"/>'),
)


def test_mimic_missing_joint_dropped():
    """alex_psyonic_hands: <mimic joint="index_q1"> where the joints are Left_index_q1, ..."""
    r, w = _recorded(parse_urdf, MIMIC)
    assert r.joints[1].mimic is None
    assert len(w) == 1
    assert "<joint name=\"jb\"> <mimic>: joint 'index_q1' does not exist" in str(w[0].message)
    m, w = _recorded(jaxdyn.load_urdf, MIMIC)
    assert isinstance(m, jaxdyn.Model) and m.nv == 2 and len(w) == 1
    with pytest.raises(ValueError, match="joint 'index_q1' does not exist"):
        jaxdyn.load_urdf(MIMIC, strict=True)


# ------------------------------------------------------------------ overflow, non-finite
def test_overflowing_numbers_name_the_element():
    far = _robot(
        _link("base", _inertial(1.0, BIG)),
        _link("arm", _inertial(1.0, BIG, xyz="1e200 0 0")),
        _joint("j", "base", "arm"),
    )
    with pytest.raises(ValueError, match=r'<link name="arm"> <inertial>: .*not finite'):
        jaxdyn.load_urdf(far)
    heavy = _robot(
        _link("base", _inertial(1.0, BIG)),
        _link("arm", _inertial(1e150, BIG, xyz="1e80 0 0")),
        _joint("j", "base", "arm"),
    )
    with pytest.raises(ValueError, match=r'<link name="arm"> <inertial>: .*not finite'):
        jaxdyn.load_urdf(heavy)
    chain = _robot(
        _link("base", _inertial(1.0, BIG)),
        _link("a"),
        _link("b"),
        _link("c", _inertial(1.0, BIG)),
        _joint("f1", "base", "a", "fixed", xyz="1e308 0 0"),
        _joint("f2", "a", "b", "fixed", xyz="1e308 0 0"),
        _joint("j", "b", "c"),
    )
    with pytest.raises(ValueError, match=r'<joint name="f2"> <origin>: .*not finite'):
        jaxdyn.load_urdf(chain)


@pytest.mark.parametrize(
    "link, joint, match",
    [
        (_inertial(1.7e308, BIG), "0 0 0.1", r'<link name="arm"> <inertial>: mass 1.7e\+308'),
        (_inertial(1.0, (1e200, 0, 0, 1e200, 0, 1e200)), "0 0 0.1", r"inertia 1e\+200"),
        (_inertial(1.0, BIG), "1e308 0 0", r'<joint name="j"> <origin>: Xtree_p 1e\+308'),
        (_inertial(1e60, BIG), "0 0 0.1", r"mass 1e\+60 exceeds 1e\+50.*float64"),
    ],
)
def test_finite_but_huge_numbers_name_the_element(link, joint, match):
    """Finite numbers whose products overflow in the algorithms (mass 1.7e308, inertia 1e200,
    xyz 1e308 loaded and gave NaN dynamics) are refused beyond the magnitude bound, naming the
    element; a model within it has finite dynamics."""
    xml = _robot(
        _link("base", _inertial(1.0, BIG)),
        _link("arm", link),
        _joint("j", "base", "arm", xyz=joint),
    )
    with pytest.raises(ValueError, match=match):
        jaxdyn.load_urdf(xml)


def test_magnitude_bound_keeps_the_dynamics_finite():
    """At the bound (1e50 in float64: masses, lengths and inertias together) ``rnea`` and
    ``aba`` at rest under gravity are finite; in float32 the bound is 1e6."""
    from jaxdyn.model.build import MAGNITUDE_BOUND

    b = MAGNITUDE_BOUND["float64"]
    xml = _robot(
        _link("base", _inertial(1.0, BIG)),
        _link("arm", _inertial(b, (b, 0, 0, b, 0, b), xyz=f"{b / 2} 0 0")),
        _link("hand", _inertial(b, (b, 0, 0, b, 0, b), xyz=f"0 {b / 2} 0")),
        _joint("j", "base", "arm", xyz=f"0 0 {b / 2}"),
        _joint("k", "arm", "hand", xyz=f"{b / 2} 0 0", axis="1 0 0"),
    )
    m = jaxdyn.load_urdf(xml, gravity=(0, 0, -b))
    z = jnp.zeros(m.nv)
    assert np.isfinite(np.asarray(jaxdyn.rnea(m, z, z, z))).all()
    assert np.isfinite(np.asarray(jaxdyn.aba(m, z, z, z))).all()
    heavy = _robot(
        _link("base", _inertial(1.0, BIG)),
        _link("arm", _inertial(2e6, BIG)),
        _joint("j", "base", "arm"),
    )
    with enable_x64(False):
        with pytest.raises(ValueError, match=r"mass 2e\+06 exceeds 1e\+06.*float32.*x64"):
            jaxdyn.load_urdf(heavy)
    assert jaxdyn.load_urdf(heavy).nv == 1


def test_float32_range_names_the_element():
    """With float64 disabled, parameters beyond float32's range are refused at load."""
    xml = _robot(
        _link("base", _inertial(1.0, BIG)),
        _link("arm", _inertial(1e39, BIG)),
        _joint("j", "base", "arm"),
    )
    with enable_x64(False):
        with pytest.raises(
            ValueError,
            match=r'<link name="arm"> <inertial>: mass .*float32.*'
            r"jax_enable_x64",
        ):
            jaxdyn.load_urdf(xml)
    assert jaxdyn.load_urdf(xml).mass.dtype == jnp.float64  # fine in float64


def test_float32_range_names_the_joint_property():
    """Joint properties go through the same range check as the other parameters (a damping
    beyond float32's range made the dynamics NaN); a missing <limit> (infinite bounds) is
    not an overflow."""
    bad = _robot(
        _link("base", _inertial(1.0, BIG)),
        _link("arm", _inertial(1.0, BIG)),
        _joint("j", "base", "arm", extra='<dynamics damping="1e39" friction="0"/>'),
    )
    with enable_x64(False):
        with pytest.raises(
            ValueError,
            match=r'URDF <joint name="j"> <dynamics damping>: damping 1e\+39 .*float32',
        ):
            jaxdyn.load_urdf(bad)
        unlimited = jaxdyn.load_urdf(
            _robot(
                _link("base", _inertial(1.0, BIG)),
                _link("arm", _inertial(1.0, BIG)),
                '<joint name="j" type="revolute"><parent link="base"/><child link="arm"/>'
                '<axis xyz="0 1 0"/><dynamics damping="0.5" friction="0"/></joint>',
            )
        )
        assert np.isinf(np.asarray(unlimited.q_lower)).all()
        assert np.asarray(unlimited.damping).tolist() == [0.5]
    assert jaxdyn.load_urdf(bad).damping.dtype == jnp.float64  # fine in float64


def test_gravity_must_be_finite():
    with pytest.raises(ValueError, match="gravity must be 3 finite numbers"):
        jaxdyn.load_urdf(_two_links(BIG), gravity=(0, 0, np.nan))


# ------------------------------------------------------------------ float64 after loading
def test_float64_after_loading_in_float32_is_refused_with_the_fix():
    xml = _two_links(BIG)
    with enable_x64(False):
        m32 = jaxdyn.load_urdf(xml)
    assert m32.mass.dtype == jnp.float32 and m32.x32_load
    q64 = np.zeros(m32.nq)
    for fn in (lambda q: jaxdyn.crba(m32, q), lambda q: jaxdyn.rnea(m32, q, q, q)):
        with pytest.raises(
            ValueError,
            match=r"loaded while float64 was disabled.*"
            r'jax_enable_x64", True\).*model.astype\(jnp.float64\)',
        ):
            jax.eval_shape(fn, q64)
    # float32 inputs stay fine; an explicit astype accepts the rounded parameters
    assert jax.eval_shape(lambda q: jaxdyn.crba(m32, q), q64.astype(np.float32)).dtype == (
        jnp.float32
    )
    m = m32.astype(jnp.float64)
    assert not m.x32_load and jax.eval_shape(lambda q: jaxdyn.crba(m, q), q64).dtype == (
        jnp.float64
    )
    assert not jaxdyn.load_urdf(xml).x32_load  # loaded under x64


def test_integer_inputs_take_the_model_dtype():
    m = jaxdyn.load_urdf(_two_links(BIG))
    qi, vb = np.zeros(m.nq, np.int32), np.zeros(m.nv, bool)
    for f in (
        lambda q, v: jaxdyn.aba(m, q, v, v),
        lambda q, v: jaxdyn.rnea(m, q, v, v),
        lambda q, v: jaxdyn.crba(m, q),
        lambda q, v: jaxdyn.kinetic_energy(m, q, v),
        lambda q, v: jaxdyn.bias_forces(m, q, v),
        lambda q, v: jaxdyn.gravity_forces(m, q),
        lambda q, v: jaxdyn.integrate(m, q, v),
        lambda q, v: jaxdyn.aba_derivatives(m, q, v, v)[0],
    ):
        assert jax.eval_shape(f, qi, vb).dtype == jnp.float64
    m32 = m.astype(jnp.float32)
    assert jax.eval_shape(lambda q: jaxdyn.crba(m32, q), qi).dtype == jnp.float32


# ------------------------------------------------------------------ massless subtrees
MASSLESS = _robot(
    _link("base", _inertial(2.0, BIG)),
    _link("upper", _inertial(1.0, (0.02, 0, 0, 0.03, 0, 0.025), xyz="0 0 0.2")),
    _link("finger"),
    _link("tip"),
    _joint("shoulder", "base", "upper", axis="0 1 0"),
    _joint("finger_joint", "upper", "finger", axis="1 0 0"),
    _joint("slide", "upper", "tip", "prismatic", axis="0 0 1"),
    name="massless",
)


def test_massless_subtree_warns_naming_the_joints():
    m, w = _recorded(jaxdyn.load_urdf, MASSLESS)
    assert len(w) == 1
    msg = str(w[0].message)
    assert "['finger_joint', 'slide']" in msg and "with_armature" in msg and "NaN" in msg
    with pytest.raises(ValueError, match=r"moving joints \['finger_joint', 'slide'\]"):
        jaxdyn.load_urdf(MASSLESS, strict=True)
    # a prismatic joint needs mass; rotational inertia is enough for a revolute one
    xml = MASSLESS.replace('<link name="tip"></link>', _link("tip", _inertial(0.0, BIG)))
    xml = xml.replace('<link name="finger"></link>', _link("finger", _inertial(0.0, BIG)))
    _, w = _recorded(jaxdyn.load_urdf, xml)
    assert len(w) == 1 and "moving joints ['slide']" in str(w[0].message)


@pytest.fixture(scope="module")
def massless():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", jaxdyn.JaxdynWarning)
        m = jaxdyn.load_urdf(MASSLESS)
    pm = pin.buildModelFromXML(MASSLESS)
    return m, pm, Converter(m, pm)


def _everything(model, q, v, a, tau):
    return {
        "rnea": jaxdyn.rnea(model, q, v, a),
        "crba": jaxdyn.crba(model, q),
        "aba": jaxdyn.aba(model, q, v, tau),
        "minv": jaxdyn.minv(model, q),
        "ke": jaxdyn.kinetic_energy(model, q, v),
        "aba_d": jaxdyn.aba_derivatives(model, q, v, tau),
        "rnea_d": jaxdyn.rnea_derivatives(model, q, v, a),
        "jac_aba": jax.jacfwd(jaxdyn.aba, argnums=3)(model, q, v, tau),
    }


_everything_jit = jax.jit(_everything)


def test_massless_subtree_nan_policy_and_armature_fix(massless):
    """Without armature aba / minv / aba_derivatives are NaN (as Pinocchio); with armature
    every quantity agrees with Pinocchio given the same ``pin_model.armature``. (A zero
    armature leaf, so that one compiled function serves both; the model without the leaf is
    checked on Romeo in test_aba.py and example-robot-data's walk.)"""
    m, pm, conv = massless
    rng = np.random.default_rng(0)
    q, v, a, tau = (rng.normal(size=m.nv) for _ in range(4))
    out = jax.tree_util.tree_map(np.asarray, _everything_jit(m.with_armature(0.0), q, v, a, tau))
    assert np.all(np.isnan(out["aba"])) and np.all(np.isnan(out["minv"]))
    assert np.all(np.isnan(out["aba_d"][2]))
    pd = pm.createData()
    assert np.all(np.isnan(pin.aba(pm, pd, conv.q_to_pin(q), *map(conv.v_to_pin, (v, tau)))))
    assert np.all(np.isfinite(out["crba"])) and np.all(np.isfinite(out["rnea"]))

    arm = np.array([0.0, 0.01, 0.02])[: m.nv]  # in jaxdyn's v order
    ma = m.with_armature(arm)
    assert ma.armature.shape == (m.nv,) and m.armature is None
    out = jax.tree_util.tree_map(np.asarray, _everything_jit(ma, q, v, a, tau))
    pm.armature = conv.v_to_pin(arm)
    qp, vp, ap, tp = conv.q_to_pin(q), conv.v_to_pin(v), conv.v_to_pin(a), conv.v_to_pin(tau)
    ref = {
        "rnea": conv.v_from_pin(pin.rnea(pm, pd, qp, vp, ap).copy()),
        "crba": conv.matrix_from_pin(sym_upper(pin.crba(pm, pd, qp))),
        "aba": conv.v_from_pin(pin.aba(pm, pd, qp, vp, tp).copy()),
        "minv": conv.matrix_from_pin(sym_upper(pin.computeMinverse(pm, pd, qp))),
        "ke": pin.computeKineticEnergy(pm, pd, qp, vp),
    }
    for k, r in ref.items():
        assert_close(out[k], r, RTOL64, err_msg=k)
    pin.computeABADerivatives(pm, pd, qp, vp, tp)
    for mine, theirs in zip(out["aba_d"], (pd.ddq_dq, pd.ddq_dv, sym_upper(pd.Minv))):
        assert_close(mine, conv.matrix_from_pin(np.array(theirs)), RTOL64, err_msg="aba_d")
    assert_close(out["jac_aba"], out["aba_d"][2], RTOL64, err_msg="jacfwd(aba) in tau")
    pin.computeRNEADerivatives(pm, pd, qp, vp, ap)
    assert_close(out["rnea_d"][2], conv.matrix_from_pin(sym_upper(pd.M)), RTOL64, err_msg="M")
    assert_close(out["rnea_d"][0], conv.matrix_from_pin(np.array(pd.dtau_dq)), RTOL64)
    # build_pinocchio_model carries the armature
    pm2 = jaxdyn.interop.pinocchio.build_pinocchio_model(ma)
    np.testing.assert_array_equal(Converter(ma, pm2).v_from_pin(np.array(pm2.armature)), arm)


def test_with_armature_arguments(massless):
    m = massless[0]
    np.testing.assert_array_equal(m.with_armature(0.5).armature, np.full(m.nv, 0.5))
    assert m.with_armature(0.5).with_armature(None).armature is None
    with pytest.raises(ValueError, match=r"armature has shape \(2,\), expected a scalar or"):
        m.with_armature(np.ones(2))
    with pytest.raises(ValueError, match=r"finite and >= 0; bad at \['finger_joint'\]"):
        m.with_armature(np.array([0.0, -1.0, 0.0]))
    with pytest.raises(ValueError, match="finite and >= 0"):
        m.with_armature(np.nan)


def test_robots_load_strict():
    m, w = _recorded(jaxdyn.robots.load, "tiago_no_hand")
    assert m.nv == 12 and any("clipped to 0" in str(x.message) for x in w)
    with pytest.raises(ValueError, match="base_antenna_left_link.*not positive semi-definite"):
        jaxdyn.robots.load("tiago_no_hand", strict=True)

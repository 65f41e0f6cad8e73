"""jaxdyn against Pinocchio (the independent oracle), float64: random trees through every
algorithm, the oracle's own model builder and ``jaxdyn.interop.pinocchio``.

The named robots are compared algorithm by algorithm in test_rnea.py (RNEA, CRBA), test_aba.py
(ABA, Minv) and test_kinematics.py (kinematics, Jacobians, centre of mass, energies); here every
random tree goes through all of those comparisons at once (one compile per tree). Every
comparison is ``max|jaxdyn - pinocchio| <= RTOL64 * max(1, max|pinocchio|)`` with
``RTOL64 = 1e-10``. Robots: example-robot-data models and the bundled ones (both loaded by
Pinocchio from the same URDF file), random URDF trees (Pinocchio parses the same XML) and random
trees with spherical / free joints anywhere (URDF lacks spherical joints: Pinocchio's model is
written joint by joint from the same URDF text by ``oracle.pin_model_from_urdf``). The
converter and ``jaxdyn.interop.pinocchio.build_pinocchio_model`` are tested here as well.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

from jaxdyn import joints
from jaxdyn.interop.pinocchio import Converter, build_pinocchio_model

from oracle import (
    DYNAMICS_KEYS,
    FORWARD_KEYS,
    KINEMATIC_KEYS,
    RANDOM_ALL_KINDS,
    RANDOM_URDF,
    RTOL64,
    STATES,
    all_kinds_tree,
    assert_close,
    compare,
    compare_frames,
    compare_jacobians,
    pin_model_from_urdf,
    robot_case,
    robot_params,
    slow_params,
    sym_upper,
    tree_id,
    urdf_joints,
    urdf_tree,
)

# the oracle sweeps (test_rnea, test_crba, test_aba, test_kinematics, test_pinocchio) share one
# compiled function per robot (``oracle.Case.jx``): under ``-n`` one worker runs them all
# (``oracle.SHARED_WORKER_FILES``)


def _compare_all(case):
    """Dynamics, kinematics, frames and Jacobians at every state; every frame known to
    Pinocchio."""
    for i in STATES:
        compare(case, i, DYNAMICS_KEYS + FORWARD_KEYS + KINEMATIC_KEYS)
        compare_frames(case, i)
        compare_jacobians(case, i)
    missing = set(case.model.frame_names) - set(case.pin(0)["frames_R"])
    assert not missing, f"{case.name}: frames unknown to Pinocchio: {sorted(missing)}"


# =========================================================================== random URDF trees
@pytest.mark.parametrize(
    # the smallest fixed / floating trees of each kind stay in the default run
    "params",
    # (n3-s3-float: the spherical/free tree n5-s21-float of the next test is the floating one)
    slow_params(
        RANDOM_URDF, ("n12-s7-float", "n25-s10-fixed", "n6-s5-float", "n3-s3-float"), ids=tree_id
    ),
)
def test_random_urdf_tree(params):
    case = urdf_tree(params)
    _compare_all(case)


def test_random_urdf_trees_cover_the_hard_cases():
    """The random trees above really contain fixed joints, massless links (also attached by
    moving joints), several root children, every joint type and both base kinds."""
    seen = dict(
        fixed=0,
        massless=0,
        massless_moving=0,
        root_children=0,
        revolute=0,
        prismatic=0,
        continuous=0,
        floating=0,
        fixed_base=0,
        deep=0,
    )
    for params in RANDOM_URDF:
        case = urdf_tree(params)
        root = ET.fromstring(case.xml)
        massless = {l.get("name") for l in root.findall("link") if l.find("inertial") is None}
        jts = urdf_joints(case.xml)
        types = [t for t, _, _ in jts.values()]
        seen["fixed"] += "fixed" in types
        seen["massless"] += bool(massless)
        seen["massless_moving"] += any(t != "fixed" and c in massless for t, _, c in jts.values())
        seen["root_children"] += sum(p == "base" for _, p, _ in jts.values()) >= 2
        for t in ("revolute", "prismatic", "continuous"):
            seen[t] += t in types
        seen["floating"] += case.floating
        seen["fixed_base"] += not case.floating
        seen["deep"] += case.model.depth >= 6
    missing = [k for k, v in seen.items() if v == 0]
    assert not missing, f"random trees never contain: {missing} ({seen})"


# ================================================================ random trees, all joint kinds
@pytest.mark.parametrize(
    "params", slow_params(RANDOM_ALL_KINDS, ("n12-s23-float", "n3-s26-fixed"), ids=tree_id)
)
def test_random_tree_spherical_free(params):
    """Spherical and free joints anywhere in the tree (Pinocchio model written from the URDF
    text by ``oracle.pin_model_from_urdf``, since URDF has no spherical joint)."""
    case = all_kinds_tree(params)
    _compare_all(case)


def test_random_spherical_free_trees_cover_all_kinds():
    """Spherical and free joints are drawn, also below the root."""
    kinds = set()
    for params in RANDOM_ALL_KINDS:
        t = all_kinds_tree(params).model.topo
        kinds |= {(int(k), bool(t.parent[b] >= 0)) for b, k in enumerate(t.kind)}
    want = {
        (joints.ONE_DOF, True),
        (joints.SPHERICAL, True),
        (joints.FREE, True),
        (joints.FREE, False),
        (joints.SPHERICAL, False),
    }
    assert want <= kinds, f"(kind, below the root) never drawn: {want - kinds}"


def test_pin_model_from_urdf_matches_pinocchio_parser():
    """The oracle's own URDF -> Pinocchio builder agrees with Pinocchio's URDF parser."""
    case = urdf_tree(RANDOM_URDF[4])
    pm = pin_model_from_urdf(case.xml, case.floating)
    conv = Converter(case.model, pm)
    for i, s in enumerate(case.states):
        q, qa = conv.q_to_pin(s["q"]), case.conv.q_to_pin(s["q"])
        assert_close(
            conv.matrix_from_pin(sym_upper(pin.crba(pm, pm.createData(), q))),
            case.pin(i)["crba"],
            RTOL64,
            err_msg="M: pin_model_from_urdf vs pin.buildModelFromXML",
        )
        d = pm.createData()
        pin.framesForwardKinematics(pm, d, q)
        d2 = case.pin_model.createData()
        pin.framesForwardKinematics(case.pin_model, d2, qa)
        for name, fid in case.pin_frames.items():
            assert_close(
                d.oMf[pm.getFrameId(name)].homogeneous,
                d2.oMf[fid].homogeneous,
                RTOL64,
                err_msg=f"frame {name}: pin_model_from_urdf vs pin.buildModelFromXML",
            )


# =========================================================== jaxdyn.interop.build_pinocchio_model
def _order_differs_from_dfs(model):
    """jaxdyn orders bodies by depth; True when that is not a depth-first order."""
    t = model.topo
    order, stack = [], [b for b in range(t.nb) if t.parent[b] < 0][::-1]
    while stack:
        b = stack.pop()
        order.append(b)
        stack.extend([c for c in range(t.nb) if t.parent[c] == b][::-1])
    return order != list(range(t.nb))


BUILD_CASES = (("urdf", RANDOM_URDF[4]), ("xml", RANDOM_ALL_KINDS[1]), ("xml", RANDOM_ALL_KINDS[2]))


def _build_case(route, params):
    return urdf_tree(params) if route == "urdf" else all_kinds_tree(params)


def _pin_eval(pm, conv, s):
    d = pm.createData()
    q = conv.q_to_pin(s["q"])
    v, a, tau = (conv.v_to_pin(s[k]) for k in ("v", "a", "tau"))
    return dict(
        rnea=conv.v_from_pin(pin.rnea(pm, d, q, v, a).copy()),
        aba=conv.v_from_pin(pin.aba(pm, d, q, v, tau).copy()),
        crba=conv.matrix_from_pin(sym_upper(pin.crba(pm, d, q))),
        minv=conv.matrix_from_pin(sym_upper(pin.computeMinverse(pm, d, q))),
    )


@pytest.mark.parametrize(
    "route, params", BUILD_CASES, ids=[f"{r}-{tree_id(p)}" for r, p in BUILD_CASES]
)
def test_build_pinocchio_model_rnea_aba(route, params):
    """``build_pinocchio_model`` gives Pinocchio a model with jaxdyn's joints and inertias:
    its RNEA and ABA equal the oracle's."""
    case = _build_case(route, params)
    built = build_pinocchio_model(case.model)
    conv = Converter(case.model, built)
    for i, s in enumerate(case.states):
        got = _pin_eval(built, conv, s)
        for k in ("rnea", "aba"):
            assert_close(got[k], case.pin(i)[k], RTOL64, err_msg=f"build_pinocchio_model: {k}")


@pytest.mark.parametrize(
    "route, params", BUILD_CASES, ids=[f"{r}-{tree_id(p)}" for r, p in BUILD_CASES]
)
def test_build_cases_are_not_depth_first(route, params):
    """Precondition of the next test: jaxdyn's body order is not depth first here."""
    assert _order_differs_from_dfs(_build_case(route, params).model)


@pytest.mark.parametrize(
    "route, params", BUILD_CASES, ids=[f"{r}-{tree_id(p)}" for r, p in BUILD_CASES]
)
def test_build_pinocchio_model_mass_matrix(route, params):
    """Pinocchio's CRBA and computeMinverse need every subtree's coordinates contiguous:
    ``build_pinocchio_model`` must add joints depth first although jaxdyn's order is not."""
    case = _build_case(route, params)
    built = build_pinocchio_model(case.model)
    conv = Converter(case.model, built)
    for i, s in enumerate(case.states):
        got = _pin_eval(built, conv, s)
        for k in ("crba", "minv"):
            assert_close(got[k], case.pin(i)[k], RTOL64, err_msg=f"build_pinocchio_model: {k}")


# =========================================================================== converter
def _pin_random_q(case, rng):
    """A valid Pinocchio configuration (unit quaternions, (cos, sin) pairs) via pin.integrate."""
    pm = case.pin_model
    return pin.integrate(pm, pin.neutral(pm), 2.0 * rng.normal(size=pm.nv))


@pytest.mark.parametrize(
    "robot_case", robot_params("arm7", "quad12", "talos_reduced"), indirect=True
)
def test_converter_round_trips(robot_case):
    case, c = robot_case, robot_case.conv
    rng = np.random.default_rng(0)
    for s in case.states:
        q = s["q"]
        assert_close(c.q_from_pin(c.q_to_pin(q)), q, 1e-14, err_msg="q_from_pin(q_to_pin(q))")
        assert_close(c.v_from_pin(c.v_to_pin(s["v"])), s["v"], 0, err_msg="v round trip")
        M = rng.normal(size=(case.model.nv, case.model.nv))
        assert_close(c.matrix_from_pin(c.matrix_to_pin(M)), M, 0, err_msg="matrix round trip")
        J = rng.normal(size=(6, case.model.nv))
        assert_close(c.jacobian_from_pin(c.jacobian_to_pin(J)), J, 0, err_msg="jacobian trip")
        qp = _pin_random_q(case, rng)
        assert_close(c.q_to_pin(c.q_from_pin(qp)), qp, 1e-14, err_msg="q_to_pin(q_from_pin(qp))")
        # jax arrays go through the same maps
        assert_close(
            np.asarray(c.q_to_pin(jnp.asarray(q))),
            c.q_to_pin(q),
            1e-15,
            err_msg="q_to_pin on a jax array",
        )


def test_converter_layouts_arm7_quad12():
    """The converter's conventions, spelled out: continuous joint -> (cos, sin); free flyer
    q -> [x y z qx qy qz qw], v = [ω; v] -> [v; ω]."""
    arm = robot_case("arm7")
    pm, c, m = arm.pin_model, arm.conv, arm.model
    cont = [j for j in range(1, pm.njoints) if pm.joints[j].nq == 2]
    assert len(cont) == 1, "arm7 should have exactly one continuous joint"
    name = pm.names[cont[0]]
    q = arm.states[0]["q"]
    theta = q[m.q_slice(name)][0]
    qp = c.q_to_pin(q)
    i0 = pm.joints[cont[0]].idx_q
    np.testing.assert_allclose(
        qp[i0 : i0 + 2],
        [np.cos(theta), np.sin(theta)],
        rtol=0,
        atol=1e-15,
        err_msg=f"continuous joint {name!r}",
    )

    quad = robot_case("quad12")
    pm, c, m = quad.pin_model, quad.conv, quad.model
    q, v = quad.states[0]["q"], quad.states[0]["v"]
    sl_q, sl_v = m.q_slice("root_joint"), m.v_slice("root_joint")
    jid = pm.getJointId("root_joint")
    iq, iv = pm.joints[jid].idx_q, pm.joints[jid].idx_v
    qb = q[sl_q]
    np.testing.assert_array_equal(
        c.q_to_pin(q)[iq : iq + 7], np.r_[qb[:3], qb[4:7], qb[3]], err_msg="free flyer q layout"
    )
    vb = v[sl_v]
    np.testing.assert_array_equal(
        c.v_to_pin(v)[iv : iv + 6], np.r_[vb[3:], vb[:3]], err_msg="free flyer v layout"
    )

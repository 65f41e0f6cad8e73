"""Armature (``model.armature``, :meth:`jaxdyn.Model.with_armature`) is added to the mass matrix
wherever it appears, as Pinocchio's ``model.armature``.

One random tree with every joint kind (free, spherical, revolute, prismatic: the one-DoF and the
multi-DoF articulated-inertia paths) and random armature on every coordinate, against Pinocchio
given the same armature: RNEA (single and batched: world and body forms), CRBA, ABA,
``M^-1``, kinetic energy, the ABA derivatives, constrained dynamics
(``pin.constraintDynamics``), the Delassus matrix by PV-OSIMr (packed articulated inertias, as
PV-OSIM and EFPA; LTL and the dense method go through CRBA) against ``J M^-1 J^T``, and the
input matrix (IIM) against ``M^-1 (B u - h)``. One compiled function; the IDSVA mass matrix
with armature is checked in ``test_loading.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import jaxdyn
from jaxdyn import Connect, Weld
from jaxdyn.algorithms.rnea import LOCAL_MIN_BATCH

from oracle import RANDOM_ALL_KINDS, RTOL64, all_kinds_tree, assert_close, sym_upper

CONSTRAINTS = (
    Connect("link5", "local_world_aligned", offset=(0.1, 0.0, 0.0)),
    Weld("link3", "local"),
)


def _everything(model, q, v, a, tau):
    cs = CONSTRAINTS
    im = jaxdyn.input_matrix(model, q, v, jaxdyn.Inputs("all", cs))
    # a batch of 64 takes RNEA's body form (rnea.LOCAL_MIN_BATCH), a single call the world form
    scales = jnp.linspace(-1.0, 1.0, LOCAL_MIN_BATCH, dtype=a.dtype)
    return {
        "rnea": jaxdyn.rnea(model, q, v, a),
        "rnea_batched": jax.vmap(lambda s: jaxdyn.rnea(model, q, v, s * a))(scales),
        "crba": jaxdyn.crba(model, q),
        "aba": jaxdyn.aba(model, q, v, tau),
        "minv": jaxdyn.minv(model, q),
        "ke": jaxdyn.kinetic_energy(model, q, v),
        "aba_d": jaxdyn.aba_derivatives(model, q, v, tau),
        "J": jaxdyn.constraint_jacobian(model, q, cs),
        "delassus": jaxdyn.delassus(model, q, cs),
        "constrained": jaxdyn.constrained_aba(model, q, v, tau, cs, damping=0.0),
        "B": jaxdyn.build_input_matrix(model, q, jaxdyn.Inputs("all", cs)),
        "qdd0": im.qdd0,
        "Bhat": im.Bhat,
    }


@pytest.fixture(scope="module")
def armature_case():
    case = all_kinds_tree(RANDOM_ALL_KINDS[1])
    rng = np.random.default_rng(7)
    arm = rng.uniform(0.01, 0.5, case.model.nv)
    model = case.model.with_armature(arm)
    pm = pin.Model(case.pin_model)  # a copy: the session's case stays without armature
    pm.armature = case.conv.v_to_pin(arm)
    s = case.states[0]
    out = jax.jit(_everything)(model, s["q"], s["v"], s["a"], s["tau"])
    return case, model, pm, s, jax.tree_util.tree_map(np.asarray, out)


def test_dynamics_match_pinocchio_with_armature(armature_case):
    case, model, pm, s, out = armature_case
    conv = case.conv
    pd = pm.createData()
    q, v, a, tau = conv.q_to_pin(s["q"]), *(conv.v_to_pin(s[k]) for k in ("v", "a", "tau"))
    M = conv.matrix_from_pin(sym_upper(pin.crba(pm, pd, q)))
    assert_close(out["crba"], M, RTOL64, err_msg="crba")
    M0 = sym_upper(pin.crba(case.pin_model, case.pin_model.createData(), q))
    assert np.all(np.diag(M - conv.matrix_from_pin(M0)) > 0.009)  # the armature is there
    assert_close(out["rnea"], conv.v_from_pin(pin.rnea(pm, pd, q, v, a).copy()), RTOL64)
    for k, sc in enumerate(np.linspace(-1.0, 1.0, LOCAL_MIN_BATCH)[::9]):
        ref = conv.v_from_pin(pin.rnea(pm, pd, q, v, sc * a).copy())
        assert_close(out["rnea_batched"][9 * k], ref, RTOL64, err_msg=f"rnea batched {sc}")
    assert_close(out["aba"], conv.v_from_pin(pin.aba(pm, pd, q, v, tau).copy()), RTOL64)
    Minv = conv.matrix_from_pin(sym_upper(pin.computeMinverse(pm, pd, q)))
    assert_close(out["minv"], Minv, RTOL64, err_msg="minv")
    # 1/2 v^T M v with Pinocchio's M: Pinocchio 4.1's computeKineticEnergy leaves out the
    # armature of RevoluteUnaligned joints (it counts it for every other joint model)
    assert_close(out["ke"], 0.5 * s["v"] @ M @ s["v"], RTOL64, err_msg="ke")
    pin.computeABADerivatives(pm, pd, q, v, tau)
    ref = (pd.ddq_dq, pd.ddq_dv, sym_upper(pd.Minv))
    for mine, theirs, nm in zip(out["aba_d"], ref, ("q", "v", "tau")):
        assert_close(mine, conv.matrix_from_pin(np.array(theirs)), RTOL64, err_msg=f"aba_d {nm}")


def test_operational_space_with_armature(armature_case):
    case, model, pm, s, out = armature_case
    conv = case.conv
    J = out["J"]
    D = J @ out["minv"] @ J.T  # minv: checked against Pinocchio with armature above
    assert_close(out["delassus"], D, RTOL64, err_msg="delassus (PV-OSIMr)")
    models, datas = conv.constraint_models_to_pin(CONSTRAINTS)
    pd = pm.createData()
    pin.initConstraintDynamics(pm, pd, models, datas)
    ddq = pin.constraintDynamics(
        pm,
        pd,
        conv.q_to_pin(s["q"]),
        conv.v_to_pin(s["v"]),
        conv.v_to_pin(s["tau"]),
        models,
        datas,
        pin.ProximalSettings(1e-14, 0.0, 1),
    )
    tol = max(RTOL64, 1e-13 * np.linalg.cond(D))
    assert_close(out["constrained"].qdd, conv.v_from_pin(ddq), tol, err_msg="constrained qdd")
    M = conv.matrix_from_pin(sym_upper(pin.crba(pm, pd, conv.q_to_pin(s["q"]))))
    h = conv.v_from_pin(
        pin.rnea(pm, pd, conv.q_to_pin(s["q"]), conv.v_to_pin(s["v"]), np.zeros(pm.nv))
    )
    assert_close(out["qdd0"], np.linalg.solve(M, -h), RTOL64, err_msg="input matrix qdd0")
    assert_close(out["Bhat"], np.linalg.solve(M, out["B"]), RTOL64, err_msg="input matrix Bhat")

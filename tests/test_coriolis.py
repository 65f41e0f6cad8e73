"""Coriolis matrix (``jaxdyn.coriolis_matrix``) against Pinocchio and against its definition.

Oracles: Pinocchio's ``computeCoriolisMatrix``; independently of any library, the two
properties that define the Christoffel-consistent factorisation: ``C v`` equals the
velocity-product forces ``rnea(q, v, 0) - g(q)`` (RNEA), and ``C + C^T = dM/dt`` along
``q(t) = integrate(q, t v)`` (forward mode through CRBA); on a fixed-base chain, ``C`` built from
the Christoffel symbols of autodiff's ``dM/dq``. Robots: the bundled fixed-base arm7 and
floating quad12 (solo12, talos_full and random trees with spherical and free joints in the
slow set); the floating base moved away from the origin.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import jaxdyn
from jaxdyn import value_checks

from oracle import RANDOM_ALL_KINDS, RTOL64, all_kinds_tree, assert_close, far_from_origin

ROBOTS = (  # arm7 slow: quad12's tree holds a fixed chain's terms and a floating base's
    pytest.param("arm7", marks=pytest.mark.slow),
    "quad12",
    pytest.param("solo12", marks=pytest.mark.slow),
    pytest.param("talos_full", marks=pytest.mark.slow),
)


@jax.jit
def _everything(model, q, v):
    def M(t):
        return jaxdyn.crba(model, jaxdyn.integrate(model, q, t * v))

    zero, one = jnp.zeros((), q.dtype), jnp.ones((), q.dtype)
    return {
        "C": jaxdyn.coriolis_matrix(model, q, v),
        "vp": jaxdyn.bias_forces(model, q, v) - jaxdyn.gravity_forces(model, q),
        "Mdot": jax.jvp(M, (zero,), (one,))[1],
    }


def _check(case, i=0):
    m, pm, c = case.model, case.pin_model, case.conv
    s = case.states[i]
    q, v = far_from_origin(m, jnp.asarray(s["q"])), jnp.asarray(s["v"])
    with value_checks.unchecked():  # value checks: tested elsewhere; they doubled the compile
        out = _everything(m, q, v)
    C = out["C"]
    ref = pin.computeCoriolisMatrix(
        pm, pm.createData(), c.q_to_pin(np.asarray(q)), c.v_to_pin(np.asarray(v))
    )
    name = case.name
    assert_close(C, c.matrix_from_pin(np.asarray(ref)), RTOL64, err_msg=f"{name}: vs Pinocchio")
    assert_close(C @ v, out["vp"], RTOL64, err_msg=f"{name}: C v = rnea(q, v, 0) - g")
    assert_close(C + C.T, out["Mdot"], 1e-9, err_msg=f"{name}: C + C^T = dM/dt")
    assert float(jnp.max(jnp.abs(C - C.T))) > 1e-3, "a symmetric C would check little"
    return C


@pytest.mark.parametrize("robot_case", ROBOTS, indirect=True)
def test_coriolis_against_pinocchio_and_definition(robot_case):
    _check(robot_case)


@pytest.mark.slow
@pytest.mark.parametrize("params", RANDOM_ALL_KINDS[:2], ids=lambda p: f"n{p[0]}-s{p[1]}")
def test_coriolis_random_tree_every_joint_kind(params):
    """Spherical and free joints anywhere (the same-body pairs of multi-DoF joints)."""
    _check(all_kinds_tree(params), 1)


def test_coriolis_christoffel_symbols(arm7):
    """Fixed base, revolute joints: ``C[i, j] = sum_k Gamma_ijk v_k`` with
    ``Gamma_ijk = 1/2 (dM_ij/dq_k + dM_ik/dq_j - dM_jk/dq_i)`` from autodiff of CRBA: a
    definition that shares nothing with the composite-body algorithm."""
    m = arm7.model
    s = arm7.states[1]
    q, v = jnp.asarray(s["q"]), jnp.asarray(s["v"])
    assert not m.topo.floating_base and m.nq == m.nv
    dM = jax.jacfwd(lambda q: jaxdyn.crba(m, q))(q)  # dM[i, j, k] = dM_ij / dq_k
    gamma = 0.5 * (dM + jnp.swapaxes(dM, 1, 2) - jnp.transpose(dM, (2, 0, 1)))
    assert_close(jaxdyn.coriolis_matrix(m, q, v), gamma @ v, RTOL64, err_msg="Christoffel")


def test_coriolis_batched_float32_and_errors(quad12):
    """``jax.vmap`` (the batching rule's chunks) equals per-sample calls; float32 agrees with
    float64; shapes are checked."""
    m = quad12.model
    k1, k2 = jax.random.split(jax.random.PRNGKey(7))
    q = jax.vmap(lambda k: far_from_origin(m, jaxdyn.random_configuration(m, k)))(
        jax.random.split(k1, 40)
    )
    v = jax.random.normal(k2, (40, m.nv))
    f = jax.jit(jax.vmap(jaxdyn.coriolis_matrix, in_axes=(None, 0, 0)))
    C = f(m, q, v)
    assert_close(C[7], jaxdyn.coriolis_matrix(m, q[7], v[7]), RTOL64, err_msg="vmap vs single")
    low = f(m.astype(jnp.float32), q.astype(jnp.float32), v.astype(jnp.float32))
    assert low.dtype == jnp.float32
    assert_close(low, C, 2e-4, err_msg="float32 vs float64")
    with pytest.raises(ValueError, match=r"coriolis_matrix: v .*nv"):
        jaxdyn.coriolis_matrix(m, q[0], v[0, :-1])
    with pytest.raises(ValueError, match=r"coriolis_matrix: q .*nq"):
        jaxdyn.coriolis_matrix(m, q[0, :-1], v[0])

"""Centroidal dynamics (``jaxdyn.centroidal_*``) against Pinocchio and against autodiff.

Oracles: Pinocchio's ``ccrba`` (``A_G``, ``h_G``), ``computeCentroidalMomentumTimeVariation``
at ``a = 0`` (``Adot_G v``), ``com`` and ``mass``; and, independently of any library, forward
mode through the momentum itself: along ``q(t) = integrate(q, t v)``, ``v(t) = v + t a`` the
rate ``d/dt h_G`` must equal ``A_G a + Adot_G v``, and the linear momentum must equal the mass
times the rate of :func:`jaxdyn.center_of_mass`. Robots: the bundled fixed-base arm7 and
floating quad12, example-robot-data's solo12 (and talos_full in the slow set), a random tree
with spherical and free joints anywhere; the base moved away from the origin.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import jaxdyn
from jaxdyn import value_checks

from oracle import (
    RANDOM_ALL_KINDS,
    RTOL64,
    all_kinds_tree,
    assert_close,
    far_from_origin,
    robot_params,
)

#: the default run keeps quad12 and the fixed-base random tree (two roots, spherical and free
#: joints); arm7, solo12, talos_full and the floating random tree are in the slow set
#: (talos_full: the slow robot tier, oracle.SLOW_ROBOTS)
ROBOTS = robot_params("arm7", "quad12", "solo12", "talos_full", slow=("arm7", "solo12"))


@jax.jit
def _everything(model, q, v, a):
    cd = jaxdyn.centroidal_dynamics(model, q, v)

    def h(t):  # momentum along q(t) = integrate(q, t v), v(t) = v + t a
        return jaxdyn.centroidal_momentum(model, jaxdyn.integrate(model, q, t * v), v + t * a)

    def com(t):
        return jaxdyn.center_of_mass(model, jaxdyn.integrate(model, q, t * v))

    zero = jnp.zeros((), q.dtype)
    one = jnp.ones((), q.dtype)
    return {
        "cd": cd,
        "A": jaxdyn.centroidal_momentum_matrix(model, q),
        "h": jaxdyn.centroidal_momentum(model, q, v),
        "bias": jaxdyn.centroidal_momentum_bias(model, q, v),
        "hdot": jax.jvp(h, (zero,), (one,))[1],
        "comdot": jax.jvp(com, (zero,), (one,))[1],
        "com": jaxdyn.center_of_mass(model, q),
        "Jcom": jaxdyn.center_of_mass_jacobian(model, q),
    }


def _check(case, i=0):
    m, pm, c = case.model, case.pin_model, case.conv
    s = case.states[i]
    q = far_from_origin(m, jnp.asarray(s["q"]))
    v, a = jnp.asarray(s["v"]), jnp.asarray(s["a"])
    with value_checks.unchecked():  # value checks: tested elsewhere; they doubled the compile
        out = _everything(m, q, v, a)
    cd = out["cd"]
    pd = pm.createData()
    qp, vp = c.q_to_pin(np.asarray(q)), c.v_to_pin(np.asarray(v))
    Ag = pin.ccrba(pm, pd, qp, vp).copy()
    hg = pd.hg.vector.copy()
    pin.computeCentroidalMomentumTimeVariation(pm, pd, qp, vp, np.zeros(pm.nv))
    dhg = pd.dhg.vector.copy()
    name = case.name
    assert_close(cd.A, c.jacobian_from_pin(Ag), RTOL64, err_msg=f"{name}: A_G vs ccrba")
    assert_close(cd.momentum, c.motion_from_pin(hg), RTOL64, err_msg=f"{name}: h_G vs hg")
    assert_close(cd.bias, c.motion_from_pin(dhg), RTOL64, err_msg=f"{name}: Adot_G v vs dhg")
    assert_close(cd.com, pd.com[0], RTOL64, err_msg=f"{name}: com")
    assert_close(cd.mass, pd.mass[0], RTOL64, err_msg=f"{name}: mass")
    Jcom = pin.jacobianCenterOfMass(pm, pd, qp)
    assert_close(
        out["Jcom"], c.v_from_pin(np.asarray(Jcom), axis=-1), RTOL64, err_msg=f"{name}: Jcom"
    )
    assert_close(out["Jcom"] @ v, out["comdot"], RTOL64, err_msg=f"{name}: d/dt com = Jcom v")
    # the separate functions compute the same from their own world states
    for k, ref in (("A", cd.A), ("h", cd.momentum), ("bias", cd.bias), ("com", cd.com)):
        assert_close(out[k], ref, RTOL64, err_msg=f"{name}: {k} alone")
    # independent of Pinocchio: h_G = A_G v (momentum from body velocities, A_G from CRBA's
    # composite forces), d/dt h_G = A_G a + Adot_G v (forward mode), l = m d/dt com
    assert_close(cd.momentum, cd.A @ v, RTOL64, err_msg=f"{name}: h_G = A_G v")
    assert_close(out["hdot"], cd.A @ a + cd.bias, 1e-9, err_msg=f"{name}: dh_G/dt")
    assert_close(cd.momentum[3:], cd.mass * out["comdot"], RTOL64, err_msg=f"{name}: l = m dc/dt")
    return cd


@pytest.mark.parametrize("robot_case", ROBOTS, indirect=True)
def test_centroidal_against_pinocchio_and_autodiff(robot_case):
    cd = _check(robot_case)
    assert float(jnp.max(jnp.abs(cd.bias))) > 1e-3, "a zero bias would check nothing"


@pytest.mark.parametrize(
    "params",
    [RANDOM_ALL_KINDS[0], pytest.param(RANDOM_ALL_KINDS[1], marks=pytest.mark.slow)],
    ids=lambda p: f"n{p[0]}-s{p[1]}",
)
def test_centroidal_random_tree_every_joint_kind(params):
    """Spherical and free joints anywhere; the fixed-base tree has two root bodies (the
    momentum's rate sums both subtrees)."""
    case = all_kinds_tree(params)
    assert case.model.topo.floating_base or case.model.topo.levels[0].n > 1
    _check(case, 1)


@pytest.fixture(scope="module")
def quad():
    m = jaxdyn.robots.load("quad12")
    k1, k2 = jax.random.split(jax.random.PRNGKey(4))
    q = jax.vmap(lambda k: far_from_origin(m, jaxdyn.random_configuration(m, k)))(
        jax.random.split(k1, 40)
    )
    v = jax.random.normal(k2, (40, m.nv))
    return m, q, v


def test_centroidal_batched_and_float32(quad):
    """``jax.vmap`` equals per-sample calls; float32 agrees with float64."""
    m, q, v = quad
    f = jax.jit(jax.vmap(jaxdyn.centroidal_dynamics, in_axes=(None, 0, 0)))
    batched = f(m, q, v)
    one = jaxdyn.centroidal_dynamics(m, q[7], v[7])
    for x, y in zip(batched, one):
        assert_close(x[7], y, RTOL64, err_msg="vmap vs single")
    m32 = m.astype(jnp.float32)
    low = f(m32, q.astype(jnp.float32), v.astype(jnp.float32))
    for x, y in zip(low, batched):
        assert x.dtype == jnp.float32
        assert_close(x, y, 2e-4, err_msg="float32 vs float64")


def test_centroidal_input_errors(quad):
    m, q, v = quad
    with pytest.raises(ValueError, match=r"centroidal_momentum: v .*nv"):
        jaxdyn.centroidal_momentum(m, q[0], v[0, :-1])
    with pytest.raises(ValueError, match=r"centroidal_momentum_matrix: q .*nq"):
        jaxdyn.centroidal_momentum_matrix(m, q[0, :-1])

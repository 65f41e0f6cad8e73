"""Zero-DoF models (issue 15): a fixed-base URDF without moving joints loads with
``nq = nv = nb = 0``; its frames have placements and every algorithm returns empty results.

Checked on example-robot-data's hector quadrotor (fixed base; Pinocchio loads it with
``nv = 0`` too) against Pinocchio's frame placements, eagerly and under ``jit`` / ``vmap``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import jaxdyn
from jaxdyn import robots

from oracle import assert_close


@pytest.fixture(scope="module")
def hector():
    path = robots.example_robot_data_dir() / "hector_description/robots/quadrotor_base.urdf"
    m = jaxdyn.load_urdf(str(path))
    return m, pin.buildModelFromUrdf(str(path))


def _all(m, q, v, a, tau, f_ext):
    """Every public function on a zero-DoF model: (result, expected shape)."""
    out = {
        "rnea": (jaxdyn.rnea(m, q, v, a), (0,)),
        "rnea_fext": (jaxdyn.rnea(m, q, v, a, f_ext), (0,)),
        "aba": (jaxdyn.aba(m, q, v, tau), (0,)),
        "crba": (jaxdyn.crba(m, q), (0, 0)),
        "minv": (jaxdyn.minv(m, q), (0, 0)),
        "coriolis": (jaxdyn.coriolis_matrix(m, q, v), (0, 0)),
        "bias": (jaxdyn.bias_forces(m, q, v), (0,)),
        "gravity": (jaxdyn.gravity_forces(m, q), (0,)),
        "joint_jacobians": (jaxdyn.joint_jacobians(m, q), (6, 0)),
        "jacobian": (jaxdyn.jacobian(m, q, m.frame_names[-1]), (6, 0)),
        "jacobian_local": (jaxdyn.jacobian(m, q, 0, "local"), (6, 0)),
        "ke": (jaxdyn.kinetic_energy(m, q, v), ()),
        "pe": (jaxdyn.potential_energy(m, q), ()),
        "integrate": (jaxdyn.integrate(m, q, v), (0,)),
        "difference": (jaxdyn.difference(m, q, q), (0,)),
        "neutral": (jaxdyn.neutral_configuration(m), (0,)),
        "random": (jaxdyn.random_configuration(m, jax.random.PRNGKey(0)), (0,)),
        "rnea_d": (jaxdyn.rnea_derivatives(m, q, v, a), (3, 0, 0)),
        "aba_d": (jaxdyn.aba_derivatives(m, q, v, tau), (3, 0, 0)),
        "body_R": (jaxdyn.forward_kinematics(m, q).body.R, (0, 3, 3)),
        "input_matrix": (jaxdyn.input_matrix(m, q, v, jnp.zeros((0, 2))).Bhat, (0, 2)),
        "centroidal_A": (jaxdyn.centroidal_momentum_matrix(m, q), (6, 0)),
        "com_jacobian": (jaxdyn.center_of_mass_jacobian(m, q), (3, 0)),
        "centroidal_h": (jaxdyn.centroidal_momentum(m, q, v), (6,)),
        "centroidal_bias": (jaxdyn.centroidal_momentum_bias(m, q, v), (6,)),
        "centroidal_dynamics_A": (jaxdyn.centroidal_dynamics(m, q, v).A, (6, 0)),
        "frame_velocity": (jaxdyn.frame_velocity(m, q, v, 0), (6,)),
        "frame_acceleration": (jaxdyn.frame_acceleration(m, q, v, a, 0, "world"), (6,)),
    }
    return out


def test_zero_dof_model_loads(hector):
    m, pm = hector
    assert (m.nq, m.nv, m.nb, m.depth) == (0, 0, 0, 0) == (pm.nq, pm.nv, pm.nv, 0)
    assert m.topo.levels == () and m.mass.shape == (0,) and m.dof_axis.shape == (0, 6)
    assert "world" in m.describe()


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_every_algorithm_returns_empty_results(hector, mode):
    m = hector[0]
    z = np.zeros(0)
    f = _all if mode == "eager" else jax.jit(_all)
    out = f(m, z, z, z, z, np.zeros((0, 6)))
    for name, (x, shape) in out.items():
        x = jnp.stack(x) if isinstance(x, tuple) else x
        assert x.shape == shape, (name, x.shape)
        assert x.dtype == jnp.float64, (name, x.dtype)
    assert float(out["ke"][0]) == 0.0 and float(out["pe"][0]) == 0.0
    com = jaxdyn.center_of_mass(m, z)  # no moving mass: NaN, as Pinocchio's centerOfMass
    assert com.shape == (3,) and np.all(np.isnan(com))
    # jacobian of an empty model under vmap
    J = jax.vmap(lambda q: jaxdyn.jacobian(m, q, 0))(np.zeros((4, 0)))
    assert J.shape == (4, 6, 0)


def test_frames_match_pinocchio(hector):
    m, pm = hector
    fk = jaxdyn.forward_kinematics(m, np.zeros(0))
    pd = pm.createData()
    pin.forwardKinematics(pm, pd, np.zeros(0))
    pin.updateFramePlacements(pm, pd)
    for i, name in enumerate(m.frame_names):
        fid = pm.getFrameId(name)
        assert_close(fk.frame.R[i], pd.oMf[fid].rotation, 1e-12, err_msg=name)
        assert_close(fk.frame.p[i], pd.oMf[fid].translation, 1e-12, err_msg=name)
        R, p = jaxdyn.frame_placement(m, np.zeros(0), name)
        assert_close(p, pd.oMf[fid].translation, 1e-12, err_msg=name)


def test_constraints_on_a_zero_dof_model_are_refused(hector):
    m = hector[0]
    c = jaxdyn.Connect(m.frame_names[-1])
    with pytest.raises(ValueError, match="is fixed to the world"):
        jaxdyn.delassus(m, np.zeros(0), (c,))
    with pytest.raises(ValueError, match="is fixed to the world"):
        jaxdyn.constrained_aba(m, np.zeros(0), np.zeros(0), np.zeros(0), (c,))

"""Kinematics, Jacobians, centre of mass and energies; the configuration space, float64.

* against Pinocchio: body placements, every frame's placement, frame Jacobians in LOCAL, WORLD
  and LOCAL_WORLD_ALIGNED, joint Jacobians, centre of mass, kinetic and potential energy;
* identities: gravity is the gradient of the potential energy (along ``integrate``), ``dT/dv =
  M v``, ``integrate`` and ``difference`` invert each other.

Random trees with every joint kind go through the same comparisons in test_pinocchio.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import joints

from oracle import (
    KINEMATIC_KEYS,
    NAMED,
    RTOL_ID,
    STATES,
    assert_close,
    compare,
    compare_frames,
    compare_jacobians,
    identity_case,
    identity_params,
)

# the oracle sweeps (test_rnea, test_crba, test_aba, test_kinematics, test_pinocchio) share one
# compiled function per robot (``oracle.Case.jx``): under ``-n`` one worker runs them all
# (``oracle.SHARED_WORKER_FILES``)


@pytest.mark.parametrize("i", STATES)
@pytest.mark.parametrize("robot_case", NAMED, indirect=True)
def test_kinematics_com_energy(robot_case, i):
    """Body placements (oMi), centre of mass, kinetic / potential energy, joint Jacobians."""
    compare(robot_case, i, KINEMATIC_KEYS)


@pytest.mark.parametrize("i", STATES)
@pytest.mark.parametrize("robot_case", NAMED, indirect=True)
def test_frame_placements(robot_case, i):
    """Every frame (URDF link or joint) present in both models, compared by name."""
    case = robot_case
    compare_frames(case, i)
    missing = set(case.model.frame_names) - set(case.pin(i)["frames_R"])
    assert not missing, f"{case.name}: jaxdyn frames unknown to Pinocchio: {sorted(missing)}"


@pytest.mark.parametrize("i", STATES)
@pytest.mark.parametrize("robot_case", NAMED, indirect=True)
def test_frame_jacobians(robot_case, i):
    """Frame Jacobians in LOCAL, WORLD and LOCAL_WORLD_ALIGNED (end effectors, feet, a middle
    link and the root link) and ``frame_placement``."""
    compare_jacobians(robot_case, i)


def _tangent_derivatives(model, q, v):
    """Gravity as the gradient of the potential energy along ``q ⊕ e`` and ``dT/dv``."""
    e0 = jnp.zeros(model.nv, q.dtype)
    dU = jax.grad(lambda e: jaxdyn.potential_energy(model, jaxdyn.integrate(model, q, e)))(e0)
    dT = jax.grad(lambda v: jaxdyn.kinetic_energy(model, q, v))(v)
    return dU, dT


@pytest.mark.parametrize("name", identity_params(["quad12", "tree-all-kinds"]))
def test_gravity_is_the_potential_energy_gradient(name):
    """``g(q) = dU/de (q ⊕ e)`` at ``e = 0`` (the tangent convention of ``integrate`` is dual to
    RNEA's generalised forces, free and spherical joints included) and ``dT/dv = M v``."""
    case = identity_case(name)
    fn = case.jit("tangent_derivatives", _tangent_derivatives)
    for i, s in enumerate(case.states):
        r = case.jx(i)
        dU, dT = fn(case.model, s["q"], s["v"])
        assert_close(dU, r["gravity"], RTOL_ID, err_msg=f"{name} {i}: g vs grad U")
        assert_close(dT, r["crba"] @ s["v"], RTOL_ID, err_msg=f"{name} {i}: dT/dv vs M v")


def _quat_slices(model):
    t = model.topo
    out = []
    for j in range(t.nb):
        k = int(t.kind[j])
        if k == joints.SPHERICAL:
            out.append(slice(int(t.q_start[j]), int(t.q_start[j]) + 4))
        elif k == joints.FREE:
            out.append(slice(int(t.q_start[j]) + 3, int(t.q_start[j]) + 7))
    return out


def _rotation_slices(model):
    """The angular-velocity coordinates of spherical and free joints in v."""
    t = model.topo
    return [
        slice(int(t.v_start[j]), int(t.v_start[j]) + 3)
        for j in range(t.nb)
        if int(t.kind[j]) in (joints.SPHERICAL, joints.FREE)
    ]


def _same_configuration(q, q_ref, model, rtol, err_msg):
    """Equal, except that a quaternion and its negative are the same rotation."""
    q = np.array(q)
    for sl in _quat_slices(model):
        if np.dot(q[sl], q_ref[sl]) < 0:
            q[sl] = -q[sl]
    assert_close(q, q_ref, rtol, err_msg=err_msg)


def _integrate_difference(model, q0, q1, v):
    return (
        jaxdyn.integrate(model, q0, jaxdyn.difference(model, q0, q1)),
        jaxdyn.difference(model, q0, jaxdyn.integrate(model, q0, v)),
        jaxdyn.integrate(model, q0, jnp.zeros_like(v)),
        jaxdyn.difference(model, q0, q0),
    )


CONFIG_CASES = ["solo12", "quad12", "arm7", "tree-all-kinds"]


@pytest.mark.parametrize("scale", [1e-7, 0.5])
@pytest.mark.parametrize("name", CONFIG_CASES)
def test_integrate_difference_round_trip(name, scale):
    """``integrate(q, difference(q, q1)) == q1`` and ``difference(q, integrate(q, v)) == v``
    (rotation vectors of norm < pi, so the logarithm is unique), for small and moderate v."""
    case = identity_case(name)
    m = case.model
    fn = case.jit("integrate_difference", jax.vmap(_integrate_difference, (None, 0, 0, 0)))
    n = 8
    sample = case.jit("random_configurations", jax.vmap(jaxdyn.random_configuration, (None, 0)))
    q0, q1 = (np.asarray(sample(m, jax.random.split(jax.random.PRNGKey(k), n))) for k in (11, 12))
    v = scale * np.random.default_rng(5).normal(size=(n, m.nv))
    for sl in _rotation_slices(m):
        assert np.all(np.linalg.norm(v[:, sl], axis=1) < np.pi), "rotation vector too long"
    q_back, v_back, q_same, zero = (np.asarray(x) for x in fn(m, q0, q1, v))
    for k in range(n):
        _same_configuration(
            q_back[k],
            q1[k],
            m,
            1e-10,
            err_msg=f"{name} sample {k}: integrate(q, difference(q, q1))",
        )
        assert_close(
            v_back[k],
            v[k],
            1e-10 if scale > 1e-3 else 1e-14,
            err_msg=f"{name} sample {k}: difference(q, integrate(q, v))",
        )
        assert_close(q_same[k], q0[k], 1e-15, err_msg=f"{name}: integrate(q, 0)")
        assert_close(zero[k], np.zeros(m.nv), 1e-15, err_msg=f"{name}: difference(q, q)")


def test_frame_positions_numpy_equal_frame_placement():
    """``frame_placements_numpy`` and ``frame_positions_numpy`` (numpy, no compiled program)
    against ``forward_kinematics``' frame placements, every frame of the bundled arm and
    quadruped (a floating base), and ``frame_placement``'s (one chain per frame) for the last
    frame, at random configurations (one program per robot: ``frame_placement`` of every frame
    traced a chain each)."""
    from jaxdyn.algorithms.kinematics import frame_placements_numpy, frame_positions_numpy
    from jaxdyn.robots import load

    for model in (load("arm7"), load("quad12")):
        names = list(model.frame_names)
        fn = jax.jit(
            lambda m, q: (
                jaxdyn.forward_kinematics(m, q).frame,
                jaxdyn.frame_placement(m, q, names[-1]),
            )
        )
        for seed in range(2):
            q = np.asarray(jaxdyn.random_configuration(model, jax.random.PRNGKey(seed)))
            R, p = frame_placements_numpy(model, q, names)
            assert R.shape == (len(names), 3, 3) and p.shape == (len(names), 3)
            np.testing.assert_array_equal(frame_positions_numpy(model, q, names), p)
            every, last = fn(model, q)
            np.testing.assert_allclose(p, np.asarray(every.p), rtol=0, atol=1e-13)
            np.testing.assert_allclose(R, np.asarray(every.R), rtol=0, atol=1e-13)
            np.testing.assert_allclose(p[-1], np.asarray(last.p), rtol=0, atol=1e-13)
            np.testing.assert_allclose(R[-1], np.asarray(last.R), rtol=0, atol=1e-13)

"""Configuration space: neutral and random configurations, integrate / difference against
Pinocchio (``pin.neutral``, ``pin.integrate``, ``pin.difference``) through the converter."""

from __future__ import annotations

import jax
import numpy as np
import pinocchio as pin
import pytest

import jaxdyn
from jaxdyn import joints

from oracle import (
    RANDOM_ALL_KINDS,
    ROBOTS,
    all_kinds_tree,
    assert_close,
    robot_case,
    robot_params,
)

#: integrate / difference are a few transcendental functions per joint
RTOL_CONF = 1e-12

CASES = {name: (lambda name=name: robot_case(name)) for name in ROBOTS}
CASES["tree-all-kinds-small"] = lambda: all_kinds_tree(RANDOM_ALL_KINDS[1])
CASES["tree-all-kinds"] = lambda: all_kinds_tree(RANDOM_ALL_KINDS[2])


def _quaternion_slices(model):
    t = model.topo
    out = []
    for j in range(t.nb):
        k, q0 = int(t.kind[j]), int(t.q_start[j])
        if k == joints.SPHERICAL:
            out.append(slice(q0, q0 + 4))
        elif k == joints.FREE:
            out.append(slice(q0 + 3, q0 + 7))
    return out


def _align_quaternions(q, q_ref, model):
    """``q`` with each quaternion's sign flipped to match ``q_ref`` (same rotation)."""
    q = np.array(q)
    for sl in _quaternion_slices(model):
        if np.dot(q[sl], q_ref[sl]) < 0:
            q[sl] = -q[sl]
    return q


@pytest.mark.parametrize("name", robot_params(*CASES))
def test_neutral_matches_pinocchio(name):
    case = CASES[name]()
    q = np.asarray(jaxdyn.neutral_configuration(case.model))
    assert q.shape == (case.model.nq,) and q.dtype == np.float64
    np.testing.assert_array_equal(
        case.conv.q_to_pin(q), pin.neutral(case.pin_model), err_msg=f"{name}: neutral configuration"
    )
    q32 = jaxdyn.neutral_configuration(case.model, dtype=np.float32)
    assert q32.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(q32, np.float64), q)


def _config_ops(model, q0, q1, v):
    return jaxdyn.integrate(model, q0, v), jaxdyn.difference(model, q0, q1)


@pytest.mark.parametrize("name", ["solo12", "arm7", "tree-all-kinds-small", "tree-all-kinds"])
def test_integrate_and_difference_match_pinocchio(name):
    """``integrate(q, v)`` equals ``pin.integrate`` and ``difference(q0, q1)`` equals
    ``pin.difference`` (free flyer: SE(3) right increment; spherical: SO(3))."""
    case = CASES[name]()
    m, pm, c = case.model, case.pin_model, case.conv
    fn = case.jit("config_ops", jax.vmap(_config_ops, (None, 0, 0, 0)))
    sample = case.jit("random_configurations", jax.vmap(jaxdyn.random_configuration, (None, 0)))
    n = 6
    q0, q1 = (np.asarray(sample(m, jax.random.split(jax.random.PRNGKey(k), n))) for k in (3, 4))
    v = np.random.default_rng(9).normal(size=(n, m.nv))
    q_int, v_diff = (np.asarray(x) for x in fn(m, q0, q1, v))
    # velocity coordinates of continuous joints (Pinocchio nq = 2), in jaxdyn order
    continuous = c.v_from_pin(
        np.array(
            [
                float(pm.joints[j].nq == 2)
                for j in range(1, pm.njoints)
                for _ in range(pm.joints[j].nv)
            ]
        )
    )
    assert (name == "arm7") == bool(continuous.any())
    for k in range(n):
        ref = pin.integrate(pm, c.q_to_pin(q0[k]), c.v_to_pin(v[k]))
        ref_q = c.q_from_pin(ref)
        # compared in Pinocchio's coordinates: continuous joints as (cos, sin)
        assert_close(
            c.q_to_pin(_align_quaternions(q_int[k], ref_q, m)),
            ref,
            RTOL_CONF,
            err_msg=f"{name} sample {k}: integrate vs pin.integrate",
        )
        ref_v = c.v_from_pin(pin.difference(pm, c.q_to_pin(q0[k]), c.q_to_pin(q1[k])))
        # continuous joints: jaxdyn stores an unbounded angle and returns q1 - q0, Pinocchio
        # (cos, sin) and the shortest angle; they differ by whole turns
        turns = np.round((v_diff[k] - ref_v) / (2 * np.pi)) * continuous
        assert_close(
            v_diff[k] - 2 * np.pi * turns,
            ref_v,
            1e-10,
            err_msg=f"{name} sample {k}: difference vs pin.difference",
        )


@pytest.mark.parametrize("name", ["quad12", "tree-all-kinds"])
def test_random_configuration(name):
    """Unit quaternions, one-DoF angles and free-joint positions inside the bounds, different
    keys give different samples, the same key the same one, and the dtype argument works."""
    case = CASES[name]()
    m = case.model
    t = m.topo
    sample = case.jit("random_configurations", jax.vmap(jaxdyn.random_configuration, (None, 0)))
    qs = np.asarray(sample(m, jax.random.split(jax.random.PRNGKey(0), 64)))
    assert qs.shape == (64, m.nq) and qs.dtype == np.float64
    for sl in _quaternion_slices(m):
        np.testing.assert_allclose(
            np.linalg.norm(qs[:, sl], axis=1), 1.0, rtol=0, atol=1e-14, err_msg="quaternion norm"
        )
    scalar = [int(t.q_start[j]) for j in range(t.nb) if int(t.kind[j]) == joints.ONE_DOF]
    free_pos = [
        int(t.q_start[j]) + i
        for j in range(t.nb)
        if int(t.kind[j]) == joints.FREE
        for i in range(3)
    ]
    for idx in (scalar, free_pos):
        if idx:
            x = qs[:, idx]
            assert np.all(x >= -3.14159) and np.all(x <= 3.14159), "outside [lower, upper]"
            assert x.std() > 1.0, "samples do not spread over [lower, upper]"
    assert len({tuple(np.round(q, 12)) for q in qs}) == 64, "repeated samples"
    q_again = np.asarray(sample(m, jax.random.split(jax.random.PRNGKey(0), 64)))
    np.testing.assert_array_equal(q_again, qs, err_msg="not deterministic in the key")
    # custom bounds and dtype (eager call)
    q = np.asarray(
        jaxdyn.random_configuration(
            m, jax.random.PRNGKey(1), lower=0.5, upper=0.6, dtype=np.float32
        )
    )
    assert q.dtype == np.float32
    assert np.all((q[scalar] >= 0.5) & (q[scalar] <= 0.6))
    for sl in _quaternion_slices(m):
        np.testing.assert_allclose(np.linalg.norm(q[sl]), 1.0, rtol=0, atol=1e-6)

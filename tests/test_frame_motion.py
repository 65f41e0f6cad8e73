"""Frame velocities and accelerations (``jaxdyn.frame_velocity`` / ``frame_acceleration``).

Oracles: Pinocchio's ``getFrameVelocity``, ``getFrameAcceleration`` and
``getFrameClassicalAcceleration`` after ``forwardKinematics(q, v, a)``, in the three reference
frames, on every frame of the Jacobian tests (a foot, an inner joint, a frame fixed to a fixed
base); and, independently of Pinocchio: the velocity is ``jacobian @ v``, and along
``q(t) = integrate(q, t v)``, ``v(t) = v + t a`` forward mode gives ``d/dt`` of the velocity,
which is the spatial acceleration in ``"local"`` and ``"world"`` and the classical one in
``"local_world_aligned"`` (the frame origin's second derivative in fixed axes).
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
    REFERENCES,
    RTOL64,
    all_kinds_tree,
    assert_close,
    robot_params,
)

#: the default run keeps arm7 (8 s: one program per robot, three frames x three references);
#: the floating bases (quad12, talos_full) are in the slow set (their body velocities are
#: checked in the default run by test_centroidal's momentum; talos_full: the slow robot tier)
ROBOTS = robot_params("arm7", "quad12", "talos_full", slow=("quad12",))
#: which acceleration d/dt of the velocity is, per reference
DERIVATIVE_IS_CLASSICAL = {"local": False, "world": False, "local_world_aligned": True}


def _everything(model, q, v, a, frames):
    out = {}
    refs = tuple(REFERENCES)
    zero, one = jnp.zeros((), q.dtype), jnp.ones((), q.dtype)
    for f in frames:

        def vel(t, f=f):  # all three references at once: one forward-mode pass per frame
            qt = jaxdyn.integrate(model, q, t * v)
            return jnp.stack([jaxdyn.frame_velocity(model, qt, v + t * a, f, r) for r in refs])

        ddt = jax.jvp(vel, (zero,), (one,))[1]
        for k, ref in enumerate(refs):
            out[f, ref] = {
                "v": jaxdyn.frame_velocity(model, q, v, f, ref),
                "a": jaxdyn.frame_acceleration(model, q, v, a, f, ref),
                "ac": jaxdyn.frame_acceleration(model, q, v, a, f, ref, classical=True),
                "Jv": jaxdyn.jacobian(model, q, f, ref) @ v,
                "ddt": ddt[k],
            }
    return out


def _check(case, i=0):
    m, pm, c = case.model, case.pin_model, case.conv
    s = case.states[i]
    q, v, a = (jnp.asarray(s[k]) for k in ("q", "v", "a"))
    frames = tuple(case.jac_frames)
    # the value checks (tested elsewhere) would double this program's compile time
    with value_checks.unchecked():
        out = jax.jit(_everything, static_argnums=4)(m, q, v, a, frames)
    pd = pm.createData()
    qp, vp, ap = c.q_to_pin(np.asarray(q)), c.v_to_pin(np.asarray(v)), c.v_to_pin(np.asarray(a))
    pin.forwardKinematics(pm, pd, qp, vp, ap)
    pin.updateFramePlacements(pm, pd)
    moving = 0
    for f in frames:
        fid = case.pin_frames[f]
        for ref, pref in REFERENCES.items():
            r, msg = out[f, ref], f"{case.name} {f} {ref}"
            V = c.motion_from_pin(pin.getFrameVelocity(pm, pd, fid, pref).vector)
            A = c.motion_from_pin(pin.getFrameAcceleration(pm, pd, fid, pref).vector)
            Ac = c.motion_from_pin(pin.getFrameClassicalAcceleration(pm, pd, fid, pref).vector)
            assert_close(r["v"], V, RTOL64, err_msg=f"{msg}: velocity vs Pinocchio")
            assert_close(r["a"], A, RTOL64, err_msg=f"{msg}: spatial acceleration vs Pinocchio")
            assert_close(r["ac"], Ac, RTOL64, err_msg=f"{msg}: classical acceleration")
            assert_close(r["Jv"], r["v"], RTOL64, err_msg=f"{msg}: J v")
            ref_ddt = r["ac"] if DERIVATIVE_IS_CLASSICAL[ref] else r["a"]
            assert_close(r["ddt"], ref_ddt, 1e-9, err_msg=f"{msg}: d/dt of the velocity")
            moving += float(jnp.max(jnp.abs(r["ac"] - r["a"]))) > 1e-6
    assert moving, f"{case.name}: no frame whose classical and spatial accelerations differ"


@pytest.mark.parametrize("robot_case", ROBOTS, indirect=True)
def test_frame_motion_against_pinocchio_and_autodiff(robot_case):
    _check(robot_case)


@pytest.mark.slow  # 13 s
def test_frame_motion_random_tree_every_joint_kind():
    _check(all_kinds_tree(RANDOM_ALL_KINDS[1]), 1)


def test_frame_motion_batched_and_errors():
    m = jaxdyn.robots.load("quad12")
    k1, k2 = jax.random.split(jax.random.PRNGKey(7))
    q = jax.vmap(lambda k: jaxdyn.random_configuration(m, k))(jax.random.split(k1, 12))
    v = jax.random.normal(k2, (12, m.nv))
    f = jax.jit(
        jax.vmap(lambda q, v: jaxdyn.frame_acceleration(m, q, v, v, "FL_FOOT", classical=True))
    )
    assert_close(
        f(q, v)[5],
        jaxdyn.frame_acceleration(m, q[5], v[5], v[5], "FL_FOOT", classical=True),
        RTOL64,
    )
    with pytest.raises(ValueError, match="frame_velocity: reference must be one of"):
        jaxdyn.frame_velocity(m, q[0], v[0], "FL_FOOT", "global")
    with pytest.raises(TypeError, match="frame_acceleration: frame must be a frame name"):
        jaxdyn.frame_acceleration(m, q[0], v[0], v[0], 1.5)
    with pytest.raises(ValueError, match=r"frame_acceleration: a .*nv"):
        jaxdyn.frame_acceleration(m, q[0], v[0], v[0, :-1], "FL_FOOT")
    with pytest.raises(TypeError, match="frame_acceleration: classical must be a bool"):
        jaxdyn.frame_acceleration(m, q[0], v[0], v[0], "FL_FOOT", classical="yes")

"""One step of a task-space least-squares controller on the quadruped ``quad12``.

The controller of Krög, Gattringer & Müller, "Closed-form method for the inertia-weighted
input matrix utilizing O(n) forward dynamics", eq. (2): with the split of the dynamics
``qdd = qdd0 + Bhat u`` (eqs. 3-4; ``jaxdyn.input_matrix``), the task accelerations are affine
in the inputs (eq. 5),

    Vdot_t = J_t Bhat u + Vdot_t0,      Vdot_t0 = J_t qdd0 + Jdot_t v,

so tracking commanded task accelerations ``Vdot_c`` is the unconstrained least-squares problem

    min_u  || W (J_t Bhat u + Vdot_t0 - Vdot_c) ||^2 + eps ||u||^2 .

Inputs ``u = [tau (12 joint torques); f (4 x 3 foot contact forces)]`` (``jaxdyn.Inputs``):
``B = [J_a^T, J_c^T]``. Tasks: the base (6D, PD towards a pose 3 cm higher and slightly
rolled) and the four feet (3D each, zero acceleration: they must not slip). The weights make
the feet a (near-)hard task. The result is checked against plain forward dynamics:
``jaxdyn.aba(q, v, B u)`` gives the same accelerations, and the achieved task accelerations
match the commanded ones. (Unilateral contact and friction cones are not enforced: that would
make eq. (2) a QP with the same ``J_t Bhat`` and ``Vdot_t0``.)

    python examples/task_space_control.py
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxdyn
from jaxdyn import Connect, Inputs, Weld, robots
from jaxdyn.algorithms.kinematics import frame_placements_numpy
from jaxdyn.constraints import constraint_drift, constraint_error, constraint_jacobian

jax.config.update("jax_enable_x64", True)

FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")
FEET_C = tuple(Connect(f, "world_aligned") for f in FEET)
BASE = (Weld("base_link", "world_aligned"),)
INPUTS = Inputs("all", FEET_C)  # u = [tau (12); contact forces (12)]
KP, KD = 100.0, 20.0
W_BASE, W_FEET, EPS = 1.0, 1e3, 1e-6


def controller_step(model, q, v, base_target):
    """Inputs ``u`` of one control step, and what the controller predicts."""
    # eqs. (3)-(4): free accelerations and inertia-weighted input matrix (IIM, O(n) pass)
    qdd0, Bhat = jaxdyn.input_matrix(model, q, v, INPUTS, method="iim")
    # task Jacobians and drifts Jdot v (base: spatial acceleration, feet: point accelerations)
    tasks = BASE + FEET_C
    Jt = constraint_jacobian(model, q, tasks)  # (6 + 12, nv)
    Vdot0 = Jt @ qdd0 + constraint_drift(model, q, v, tasks)  # free task accelerations, eq. (5)
    # commanded task accelerations: PD on the base, zero for the feet
    err = constraint_error(model, q, BASE, targets=(base_target,))
    Vbase = Jt[:6] @ v
    Vdot_c = jnp.concatenate([-KP * err - KD * Vbase, jnp.zeros(12)])
    # eq. (2): weighted least squares in u, solved by the normal equations
    w = jnp.concatenate([jnp.full(6, W_BASE), jnp.full(12, W_FEET)])
    A = w[:, None] * (Jt @ Bhat)  # J_t Bhat: inputs -> task accelerations
    b = w * (Vdot_c - Vdot0)
    u = jnp.linalg.solve(A.T @ A + EPS * jnp.eye(A.shape[1]), A.T @ b)
    qdd = qdd0 + Bhat @ u
    return dict(
        u=u,
        qdd=qdd,
        Vdot=Jt @ qdd + (Vdot0 - Jt @ qdd0),
        Vdot_c=Vdot_c,
        B=jaxdyn.build_input_matrix(model, q, INPUTS),
    )


def main():
    model = robots.load("quad12")  # floating base, 12 joints
    # a crouched stance: hips and knees bent, base at a height where the feet touch z = 0
    q = np.array(jaxdyn.neutral_configuration(model), dtype=np.float64)
    for leg in ("FL", "FR", "HL", "HR"):
        q[model.q_slice(f"{leg}_HFE")] = 0.7 if leg[0] == "F" else -0.7
        q[model.q_slice(f"{leg}_KFE")] = -1.4 if leg[0] == "F" else 1.4
    # the placements in numpy (frame_placements_numpy): called eagerly, frame_placement
    # compiled a program per frame before the controller's, the first output
    foot_z = np.min(frame_placements_numpy(model, q, FEET)[1][:, 2])
    q[2] -= foot_z
    v = 0.05 * np.random.default_rng(0).normal(size=model.nv)
    (R0,), (p0,) = frame_placements_numpy(model, q, ["base_link"])
    roll = 0.1
    Rx = np.array([[1, 0, 0], [0, np.cos(roll), -np.sin(roll)], [0, np.sin(roll), np.cos(roll)]])
    base_target = (Rx @ R0, p0 + np.array([0.0, 0.0, 0.03]))

    step = jax.jit(lambda q, v: controller_step(model, q, v, base_target))
    out = jax.tree_util.tree_map(np.asarray, step(jnp.asarray(q), jnp.asarray(v)))
    u, B = out["u"], out["B"]
    tau, forces = u[:12], u[12:].reshape(4, 3)

    np.set_printoptions(precision=3, suppress=True)
    print(f"{model}")
    print("joint torques tau [N m]:", tau)
    for f, fc in zip(FEET, forces):
        print(f"contact force on {f} (world) [N]: {fc}")
    weight = float(jnp.sum(model.mass)) * 9.81
    print(f"sum of vertical contact forces {forces[:, 2].sum():.3f} N (weight {weight:.3f} N)")
    print("commanded base acceleration:", out["Vdot_c"][:6])
    print("achieved  base acceleration:", out["Vdot"][:6])
    print("foot accelerations (should be ~0):", np.abs(out["Vdot"][6:]).max())
    res = out["Vdot"] - out["Vdot_c"]
    print(
        f"task residual |Vdot - Vdot_c|: base {np.linalg.norm(res[:6]):.2e}, "
        f"feet {np.linalg.norm(res[6:]):.2e} (of |Vdot_c| = {np.linalg.norm(out['Vdot_c']):.2f})"
    )
    # the check against plain forward dynamics (a program of its own: after the controller's
    # results are printed)
    qdd_aba = np.asarray(jaxdyn.aba(model, q, v, B @ u))
    err = np.max(np.abs(out["qdd"] - qdd_aba)) / max(1.0, np.max(np.abs(qdd_aba)))
    print(f"qdd0 + Bhat u vs jaxdyn.aba(q, v, B u): relative difference {err:.1e}")
    assert err < 1e-10
    assert np.abs(out["Vdot"][6:]).max() < 1e-2
    assert np.abs(out["Vdot"][:6] - out["Vdot_c"][:6]).max() < 1e-2 * max(
        1.0, np.abs(out["Vdot_c"][:6]).max()
    )


if __name__ == "__main__":
    main()

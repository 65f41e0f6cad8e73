"""Batched forward dynamics: 256 quadrupeds simulated in parallel with ``jax.lax.scan``.

Each robot is the bundled 12-DoF quadruped ``quad12`` (floating base), dropped from rest with a
random leg posture while a PD controller drives its legs to a common stance.  There is no
ground: the robots are in free fall, which gives an exact physics check -- with no external
force the centre of mass must fall as ``z(t) = z(0) - g t^2 / 2`` whatever the legs do.

Semi-implicit (symplectic) Euler, on the configuration manifold::

    v[k+1] = v[k] + dt * aba(q[k], v[k], tau[k])
    q[k+1] = integrate(q[k], dt * v[k+1])          # right increment: q ⊕ (dt v)

Run: ``python examples/batched_forward_dynamics.py``  (a few seconds on a CPU).
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxdyn
from jaxdyn import robots

N_ROBOTS, N_STEPS, DT = 256, 100, 1e-3
OMEGA, ZETA = 2 * np.pi * 8.0, 0.7  # PD bandwidth (rad/s) and damping ratio

model = robots.load("quad12")  # floating base: q = [x y z qw qx qy qz, legs], v = [ω; v, legs]
base_q, base_v = model.q_slice("root_joint"), model.v_slice("root_joint")
print(model)

# Reference stance: knees bent.  Joint names give the q index of each joint.
q_ref = jaxdyn.neutral_configuration(model).at[2].set(0.4)
for name in model.joint_names:
    if name.endswith("_HFE"):
        q_ref = q_ref.at[model.q_slice(name)].set(0.8)
    elif name.endswith("_KFE"):
        q_ref = q_ref.at[model.q_slice(name)].set(-1.6)
act = np.ones(model.nv, bool)
act[base_v] = False  # the base is not actuated
# PD gains scaled by the joint-space inertia at the stance: the lower legs weigh 36 g, so
# uniform gains stiff enough for the hips would make explicit integration blow up at the knees.
m_diag = jnp.diagonal(jaxdyn.crba(model, q_ref))
KP, KD = m_diag * OMEGA**2, m_diag * 2 * ZETA * OMEGA


def controller(q, v):
    err = jaxdyn.difference(model, q, q_ref)  # q_ref ⊖ q, in the tangent space
    tau = KP * err - KD * v
    return jnp.where(act, tau, 0.0)


def step(state, _):
    q, v = state
    tau = controller(q, v)
    qdd = jaxdyn.aba(model, q, v, tau)
    v = v + DT * qdd
    q = jaxdyn.integrate(model, q, DT * v)
    return (q, v), None


@jax.jit
def rollout(q0, v0):
    def one(q, v):
        com0 = jaxdyn.center_of_mass(model, q)
        (q, v), _ = jax.lax.scan(step, (q, v), None, length=N_STEPS)
        return q, v, com0, jaxdyn.center_of_mass(model, q)

    return jax.vmap(one)(q0, v0)


# Initial states: stance plus a random leg perturbation, random base yaw, at rest.
key_legs, key_yaw = jax.random.split(jax.random.PRNGKey(0))
noise = 0.3 * jax.random.normal(key_legs, (N_ROBOTS, model.nv)) * act
q0 = jax.vmap(lambda dv: jaxdyn.integrate(model, q_ref, dv))(noise)
yaw = jax.random.uniform(key_yaw, (N_ROBOTS,), minval=-np.pi, maxval=np.pi)
quat = jnp.stack([jnp.cos(yaw / 2), 0 * yaw, 0 * yaw, jnp.sin(yaw / 2)], -1)  # [qw qx qy qz]
q0 = q0.at[:, base_q.start + 3 : base_q.start + 7].set(quat)
v0 = jnp.zeros((N_ROBOTS, model.nv))

t = time.perf_counter()
compiled = rollout.lower(q0, v0).compile()
t_compile = time.perf_counter() - t
jax.block_until_ready(compiled(q0, v0))
t = time.perf_counter()
qT, vT, com0, comT = jax.block_until_ready(compiled(q0, v0))
t_run = time.perf_counter() - t

T = N_STEPS * DT
g = float(-model.gravity[2])
drop = np.asarray(com0[:, 2] - comT[:, 2])
drift = np.linalg.norm(np.asarray(comT[:, :2] - com0[:, :2]), axis=-1)
leg_err0 = np.abs(np.asarray(jax.vmap(lambda q: jaxdyn.difference(model, q, q_ref))(q0))[:, act])
leg_errT = np.abs(np.asarray(jax.vmap(lambda q: jaxdyn.difference(model, q, q_ref))(qT))[:, act])

print(f"{N_ROBOTS} robots x {N_STEPS} steps of {DT * 1e3:g} ms (T = {T:g} s), float32")
print(
    f"  compile {t_compile:.2f} s, run {t_run * 1e3:.1f} ms "
    f"= {N_ROBOTS * N_STEPS / t_run / 1e6:.2f} M robot-steps/s"
)
print(
    f"  COM drop       {drop.mean():.5f} m (min {drop.min():.5f}, max {drop.max():.5f}); "
    f"free fall g T^2/2 = {0.5 * g * T * T:.5f} m"
)
print(f"  COM horizontal drift  max {drift.max():.2e} m (should be ~0)")
print(
    f"  leg tracking error    mean |q - q_ref| {leg_err0.mean():.3f} -> {leg_errT.mean():.3f} rad"
)
# Semi-implicit Euler moves a point mass in free fall by g dt^2 N(N+1)/2 in N steps; the
# multibody COM follows it up to the O(dt) coupling of the legs' motion.
expected = 0.5 * g * DT * DT * N_STEPS * (N_STEPS + 1)
ok = np.allclose(drop, expected, rtol=2e-2) and drift.max() < 1e-3 and np.all(np.isfinite(drop))
print(
    f"  free-fall check (discrete g dt^2 N(N+1)/2 = {expected:.5f} m): {'OK' if ok else 'FAILED'}"
)
raise SystemExit(0 if ok else 1)

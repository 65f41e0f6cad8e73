"""Gradient of a trajectory torque cost with respect to the link masses and inertias.

The bundled 7-DoF arm ``arm7`` follows a smooth joint trajectory ``q(t)``; inverse dynamics
(RNEA) gives the torques it needs, and the cost is the integral of ``|tau(t)|^2``.  A
``jaxdyn.Model`` is an equinox module whose parameters (``mass``, ``com``, ``inertia``, ...)
are array leaves, so ``jax.grad`` of the cost with respect to the whole model returns a model
of gradients.  The mass gradient is checked against central finite differences.

Run: ``python examples/grad_wrt_inertia.py``  (a few seconds on a CPU).
"""

import jax

jax.config.update("jax_enable_x64", True)  # float64, for a tight finite-difference check

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn import robots  # noqa: E402

model = robots.load("arm7").astype(jnp.float64)
print(model)

# A 2-second trajectory, sampled at 100 Hz: q(t) = q0 + A sin(w t + phi), exact qd and qdd.
T, N = 2.0, 200
t = jnp.linspace(0.0, T, N)
dt = T / (N - 1)
rng = np.random.default_rng(0)
A = jnp.asarray(rng.uniform(0.3, 0.8, model.nv))
w = jnp.asarray(rng.uniform(1.0, 3.0, model.nv))
phi = jnp.asarray(rng.uniform(-np.pi, np.pi, model.nv))
q0 = jnp.asarray(rng.uniform(-0.5, 0.5, model.nv))
arg = w * t[:, None] + phi
q, qd, qdd = q0 + A * jnp.sin(arg), A * w * jnp.cos(arg), -A * w**2 * jnp.sin(arg)


def cost(m):
    """Integral of |tau|^2 over the trajectory (trapezoidal rule)."""
    tau = jax.vmap(jaxdyn.rnea, in_axes=(None, 0, 0, 0))(m, q, qd, qdd)
    e = jnp.sum(tau**2, -1)
    return dt * (jnp.sum(e) - 0.5 * (e[0] + e[-1]))


def cost_of_mass(mass):
    return cost(eqx.tree_at(lambda m: m.mass, model, mass))


value, grads = jax.jit(jax.value_and_grad(cost))(model)  # grads is a Model of gradients
print(f"cost J = integral |tau|^2 dt = {float(value):.6g} N^2 m^2 s")

# Finite differences on the masses (central, h = 1e-6 kg).
h = 1e-6
f = jax.jit(cost_of_mass)
fd = np.array(
    [(f(model.mass.at[i].add(h)) - f(model.mass.at[i].add(-h))) / (2 * h) for i in range(model.nb)]
)
ad = np.asarray(grads.mass)
print(
    f"\n{'body':<8} {'mass [kg]':>10} {'dJ/dm (autodiff)':>18} {'finite diff.':>14} {'rel. err':>9}"
)
for i, name in enumerate(model.body_names):
    rel = abs(ad[i] - fd[i]) / max(abs(fd[i]), 1e-12)
    print(f"{name:<8} {float(model.mass[i]):>10.4g} {ad[i]:>18.8g} {fd[i]:>14.8g} {rel:>9.1e}")
err = np.max(np.abs(ad - fd)) / np.max(np.abs(fd))
print(f"max relative error (autodiff vs finite differences): {err:.1e}")


# The other parameter gradients come for free from the same call.
def row(x):
    return " ".join(f"{v:9.4g}" for v in np.asarray(x))


print(
    f"\n{'|dJ/d inertia| per body (Frobenius):':<38}",
    row(jnp.linalg.norm(grads.inertia, axis=(1, 2))),
)
print(f"{'|dJ/d com| per body:':<38}", row(jnp.linalg.norm(grads.com, axis=1)))
# Directional check on the rotational inertias: J(I + h D) vs dJ/dI : D, D symmetric.
D = jnp.asarray(rng.normal(size=model.inertia.shape))
D = D + jnp.swapaxes(D, 1, 2)
g_dir = float(jnp.sum(grads.inertia * D))


def cost_of_inertia(inertia):
    return cost(eqx.tree_at(lambda m: m.inertia, model, inertia))


fd_dir = float(
    (cost_of_inertia(model.inertia + h * D) - cost_of_inertia(model.inertia - h * D)) / (2 * h)
)
err_dir = abs(g_dir - fd_dir) / abs(fd_dir)
print(
    f"directional derivative along a random symmetric dI: autodiff {g_dir:.8g}, "
    f"finite diff. {fd_dir:.8g} (rel. err {err_dir:.1e})"
)

ok = err < 1e-6 and err_dir < 1e-6
print("gradient check:", "OK" if ok else "FAILED")
raise SystemExit(0 if ok else 1)

"""Derivatives of inverse and forward dynamics four ways: analytic, autodiff, complex step, FD.

* **analytic** -- ``jaxdyn.rnea_derivatives`` (IDSVA: Singh, Russell & Wensing 2022, Alg. 1) and
  ``jaxdyn.aba_derivatives`` (``-M^-1`` times them at the ABA solution, Eq. 5);
* **autodiff** -- ``jax.jacfwd`` of the plain ``rnea`` / ``aba`` through ``integrate``;
* **complex step** -- ``imag(f(q ⊕ i h e_k)) / h`` with ``h = 1e-30`` (jaxdyn runs in
  complex128 end to end, so this is exact to rounding);
* **finite differences** -- central differences on the manifold, ``h = 1e-6``.

Prints an error table (each method against the analytic partials) and a timing table, and
saves a plot of the finite-difference error against the step size (the classic V: truncation
error ~ h^2 on the right, rounding error ~ eps/h on the left; the complex step stays flat).

Run: ``python examples/compare_derivatives.py [robot] [plot.png]`` -- robot defaults to
``solo12`` (example-robot-data), falling back to the bundled ``quad12``; the plot to
``compare_derivatives.png``. About a minute on a laptop CPU, mostly compilation.
"""

import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn import robots  # noqa: E402
from jaxdyn.algorithms.aba import aba_plain  # noqa: E402
from jaxdyn.algorithms.rnea import rnea_plain  # noqa: E402

name = sys.argv[1] if len(sys.argv) > 1 else "solo12"
png = sys.argv[2] if len(sys.argv) > 2 else "compare_derivatives.png"
try:
    model = robots.load(name)
except Exception as e:  # example-robot-data missing, or an unknown name
    print(f"could not load {name!r} ({e}); using the bundled quad12")
    name, model = "quad12", robots.load("quad12")
model = model.astype(jnp.float64)
print(model)
nv = model.nv

key = jax.random.PRNGKey(0)
q = jaxdyn.random_configuration(model, key)
rng = np.random.default_rng(0)
v, a, tau = (jnp.asarray(rng.normal(size=nv)) for _ in range(3))
z = jnp.zeros(nv)
eye = jnp.eye(nv)


def id_(d, v_):
    """Inverse dynamics at q ⊕ d (any dtype: float64 or complex128)."""
    return rnea_plain(model, jaxdyn.integrate(model, q.astype(d.dtype), d), v_, a.astype(d.dtype))


def fd_(d, v_):
    """Forward dynamics at q ⊕ d."""
    return aba_plain(model, jaxdyn.integrate(model, q.astype(d.dtype), d), v_, tau.astype(d.dtype))


# --------------------------------------------------------------------------- the four methods
@jax.jit
def analytic():
    return (
        *jaxdyn.rnea_derivatives(model, q, v, a)[:2],
        *jaxdyn.aba_derivatives(model, q, v, tau)[:2],
    )


@jax.jit
def autodiff():
    return (*jax.jacfwd(id_, argnums=(0, 1))(z, v), *jax.jacfwd(fd_, argnums=(0, 1))(z, v))


def complex_step(h=1e-30):
    @jax.jit
    def run():
        cz, cv = z.astype(jnp.complex128), v.astype(jnp.complex128)
        out = []
        for f in (id_, fd_):
            out.append(jax.vmap(lambda e: jnp.imag(f(cz + 1j * h * e, cv)))(eye).T / h)
            out.append(jax.vmap(lambda e: jnp.imag(f(cz, cv + 1j * h * e)))(eye).T / h)
        return tuple(out)

    return run


@jax.jit
def central(h):
    out = []
    for f in (id_, fd_):
        out.append(jax.vmap(lambda e: f(h * e, v) - f(-h * e, v))(eye).T / (2 * h))
        out.append(jax.vmap(lambda e: f(z, v + h * e) - f(z, v - h * e))(eye).T / (2 * h))
    return tuple(out)


@jax.jit
def forward(h):
    out = []
    for f in (id_, fd_):
        f0 = f(z, v)
        out.append(jax.vmap(lambda e: f(h * e, v) - f0)(eye).T / h)
        out.append(jax.vmap(lambda e: f(z, v + h * e) - f0)(eye).T / h)
    return tuple(out)


cs = complex_step()
methods = {
    "analytic": analytic,
    "autodiff (jacfwd)": autodiff,
    "complex step h=1e-30": cs,
    "central FD h=1e-6": lambda: central(1e-6),
}
results, timing = {}, {}
for label, fn in methods.items():
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    t_first = time.perf_counter() - t0
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.2:
        jax.block_until_ready(fn())
        n += 1
    timing[label] = (t_first, (time.perf_counter() - t0) / n)
    results[label] = [np.asarray(x) for x in out]

ref = results["analytic"]
blocks = ("dtau/dq", "dtau/dv", "dqdd/dq", "dqdd/dv")
print(f"\nmax |method - analytic| / max(1, max |analytic|), {name}, float64")
print(f"{'method':<24}" + "".join(f"{b:>12}" for b in blocks))
for label, out in results.items():
    if label == "analytic":
        continue
    errs = [np.max(np.abs(x - r)) / max(1.0, np.max(np.abs(r))) for x, r in zip(out, ref)]
    print(f"{label:<24}" + "".join(f"{e:12.1e}" for e in errs))

print("\ntime per call (one state, all four blocks; first call includes compilation)")
print(f"{'method':<24}{'first call s':>14}{'per call us':>14}")
for label, (t_first, t_call) in timing.items():
    print(f"{label:<24}{t_first:14.2f}{t_call * 1e6:14.1f}")

# --------------------------------------------------------------------------- V-shaped curve
steps = np.logspace(-1, -13, 25)
err_c, err_f = [], []
for h in steps:
    oc, of = central(h), forward(h)
    err_c.append(
        max(
            np.max(np.abs(np.asarray(x) - r)) / max(1.0, np.max(np.abs(r))) for x, r in zip(oc, ref)
        )
    )
    err_f.append(
        max(
            np.max(np.abs(np.asarray(x) - r)) / max(1.0, np.max(np.abs(r))) for x, r in zip(of, ref)
        )
    )
cs_err = max(
    np.max(np.abs(x - r)) / max(1.0, np.max(np.abs(r)))
    for x, r in zip(results["complex step h=1e-30"], ref)
)
best = int(np.argmin(err_c))
print(
    f"\ncentral differences: best step {steps[best]:.0e} (error {err_c[best]:.1e}); "
    f"forward differences: best {steps[int(np.argmin(err_f))]:.0e} "
    f"(error {min(err_f):.1e}); complex step: {cs_err:.1e}"
)

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # pragma: no cover
    print("matplotlib not installed: no plot")
else:
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(steps, err_c, "o-", label="central differences")
    ax.loglog(steps, err_f, "s-", label="forward differences")
    ax.axhline(max(cs_err, 1e-17), color="k", ls="--", label="complex step (h = 1e-30)")
    ax.set_xlabel("step size h")
    ax.set_ylabel("max error vs analytic (relative)")
    ax.set_title(f"{name}: ID and FD partials, all four blocks")
    ax.invert_xaxis()
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"saved {png}")

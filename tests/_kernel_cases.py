"""What the tests of jaxdyn's CPU kernels share (``test_crba_kernel.py``,
``test_minv_kernel.py``, ``test_aba_kernel.py``): their models, random configurations and the
comparison to the largest entry of the reference."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxdyn
from jaxdyn import robots

from oracle import RANDOM_ALL_KINDS, all_kinds_tree


def kernel_models() -> dict:
    """Every joint kind (a random tree with free, spherical, revolute and prismatic joints,
    massless bodies and armature), the same on 13 DoF instead of 23 for the derivative and
    export tests (``jacfwd``'s programs grow with nv^3), several roots (baxter) and a floating
    humanoid (talos_full)."""
    tree = all_kinds_tree(RANDOM_ALL_KINDS[2]).model
    arm = np.random.default_rng(3).uniform(0.01, 0.5, tree.nv)
    small = all_kinds_tree(RANDOM_ALL_KINDS[1]).model
    small_arm = np.random.default_rng(4).uniform(0.01, 0.5, small.nv)
    return {
        "all_kinds": tree.with_armature(arm),
        "all_kinds_small": small.with_armature(small_arm),
        "baxter": robots.load("baxter"),
        "humanoid": robots.load("talos_full"),
    }


def configurations(model, n, seed, scale=1.0, dtype=jnp.float64):
    """``n`` random configurations; ``scale``: large angles on the one-DoF joints
    (quaternions untouched)."""
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    q = jax.vmap(lambda k: jaxdyn.random_configuration(model, k))(keys)
    if scale != 1.0:
        one = model.topo.q_start[model.topo.kind == 0]
        q = q.at[:, one].multiply(scale)
    return q.astype(dtype)


def close(got, ref, tol):
    """``got`` within ``tol`` times the largest entry of ``ref`` (at least 1) of ``ref``."""
    got, ref = np.asarray(got), np.asarray(ref)
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * scale)

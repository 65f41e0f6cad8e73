"""jaxdyn._linalg.general_solve against NumPy's LAPACK solve: both of its paths (the unrolled LU
at a few rows, LAPACK above), batched under ``vmap``, and its derivative in ``b`` (linear, so
``jax.vjp`` transposes it: ``A^-T w``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn import _linalg as linalg


@pytest.mark.parametrize("n", [3, linalg.GENERAL_SOLVE_UNROLLED_MAX + 1, 24])
def test_general_solve_matches_numpy(n):
    rng = np.random.default_rng(n)
    A = rng.standard_normal((4, n, n)) + 2 * np.eye(n)
    b = rng.standard_normal((4, n))
    w = rng.standard_normal((4, n))
    ref = np.linalg.solve(A, b[..., None])[..., 0]
    got = jax.jit(jax.vmap(linalg.general_solve))(jnp.asarray(A), jnp.asarray(b))
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
    # reverse mode in b (the implicit derivative of solve_cone_complementarity needs it)
    vjp = jax.vmap(lambda A_, b_, w_: jax.vjp(lambda x: linalg.general_solve(A_, x), b_)[1](w_)[0])
    ref_t = np.linalg.solve(np.swapaxes(A, 1, 2), w[..., None])[..., 0]
    np.testing.assert_allclose(
        vjp(jnp.asarray(A), jnp.asarray(b), jnp.asarray(w)), ref_t, rtol=1e-10, atol=1e-12
    )
    # float32: to its rounding
    got32 = jax.vmap(linalg.general_solve)(jnp.asarray(A, jnp.float32), jnp.asarray(b, jnp.float32))
    assert got32.dtype == jnp.float32
    np.testing.assert_allclose(got32, ref, rtol=1e-3, atol=1e-4)

"""jaxdyn.vmap (chunked batching) equals jax.vmap; the benchmark harness runs end to end."""

import jax
import numpy as np
import pytest

import jaxdyn
from jaxdyn import robots


@pytest.fixture(scope="module")
def quad():
    m = robots.load("quad12")
    B = 37  # not a multiple of the chunk: the remainder path is exercised
    q = jax.vmap(lambda k: jaxdyn.random_configuration(m, k))(
        jax.random.split(jax.random.PRNGKey(3), B)
    )
    v = jax.random.normal(jax.random.PRNGKey(4), (B, m.nv))
    return m, q, v


@pytest.mark.parametrize("chunk", [8, 64, None])
def test_chunked_vmap_equals_vmap(quad, chunk):
    m, q, v = quad
    f = lambda model, q, v: jaxdyn.aba(model, q, v, v)  # noqa: E731
    ref = jax.jit(jax.vmap(f, in_axes=(None, 0, 0)))(m, q, v)
    out = jax.jit(jaxdyn.vmap(f, in_axes=(None, 0, 0), chunk_size=chunk))(m, q, v)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_chunked_vmap_bad_axes(quad):
    m, q, v = quad
    with pytest.raises(ValueError, match="in_axes"):
        jaxdyn.vmap(lambda q: q, in_axes=(0, 0))(q)
    with pytest.raises(ValueError, match="0 or None"):
        jaxdyn.vmap(lambda q: q, in_axes=1)(q)


def test_bench_quick_smoke(tmp_path, capsys):
    from jaxdyn import cli  # the harness of benchmarks/, run from the checkout

    out = tmp_path / "r.md"
    rc = cli.main(
        [
            "bench",
            "--robots",
            "arm7",
            "--algorithms",
            "rnea",
            "--batches",
            "1,8",
            "--dtypes",
            "float64",
            "--repeats",
            "1",
            "--no-mjx",
            "--no-progress",
            "--chunk",
            "4",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    text = out.read_text()
    assert "arm7" in text and "rnea" in text and "Pinocchio" in text

"""jaxdyn.compile_for_latency: one state at a time, numpy in and out, on a synchronous XLA:CPU
client of jaxdyn's own (jaxdyn.backend.sync_client) or through JAX's client.

Oracle: ``jax.jit(f)(model, ...)`` on JAX's own client (the same algorithm and program, one
kernel on the CPU): values equal to 1e-13 relative. Failed value checks raise CheckError with
the check's message; wrong shapes and counts a clear error naming the argument."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import latency, robots
from jaxdyn.backend import sync_client


@pytest.fixture(scope="module")
def quad():
    """quad12 (a floating base: the quaternion check) and a state, as numpy arrays."""
    model = robots.load("quad12")
    assert isinstance(model, jaxdyn.Model)
    q = np.asarray(jaxdyn.random_configuration(model, jax.random.PRNGKey(0)))
    v = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (model.nv,)))
    a = np.asarray(jax.random.normal(jax.random.PRNGKey(2), (model.nv,)))
    return model, q, v, a


def _close(got, want, tol=1e-13):
    got, want = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray) and g.shape == np.shape(w)
        w = np.asarray(w)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max())))


@pytest.mark.parametrize("alg", ["rnea", "crba", "aba", "minv", "aba_derivatives"])
def test_values_equal_jit(quad, alg):
    """Every algorithm's result (an array, a matrix, a tuple of matrices) equals ``jax.jit``'s
    on JAX's client; the call runs on the synchronous client and returns numpy arrays."""
    model, q, v, a = quad
    f = getattr(jaxdyn, alg)
    args = (q,) if alg in ("crba", "minv") else (q, v, a)
    call = jaxdyn.compile_for_latency(f, model, *args)
    assert call.dispatch == ("sync" if sync_client.available() else "jax")
    want = jax.jit(f)(model, *args)
    _close(call(*args), want)
    # another state through the same compiled call
    q2 = np.asarray(jaxdyn.random_configuration(model, jax.random.PRNGKey(7)))
    args2 = (q2,) if alg in ("crba", "minv") else (q2, 2 * v, -a)
    _close(call(*args2), jax.jit(f)(model, *args2))


def test_jax_dispatch_and_own_function(quad, monkeypatch):
    """``dispatch="jax"`` (JAX's client) gives the same values; a function of the user's own
    returning a pytree of arrays of several shapes comes back as that pytree, packed into one
    buffer or (above ``PACK_RESULTS`` numbers) one array each."""
    model, q, v, a = quad

    def mine(m, q, v, tau):
        qdd = jaxdyn.aba(m, q, v, tau)
        return {"qdd": qdd, "M": jaxdyn.crba(m, q), "ke": 0.5 * jnp.dot(v, qdd)}

    want = jax.jit(mine)(model, q, v, a)
    for dispatch in ("sync", "jax"):
        call = jaxdyn.compile_for_latency(mine, model, q, v, a, dispatch=dispatch)
        got = call(q, v, a)
        assert set(got) == {"qdd", "M", "ke"} and got["ke"].shape == ()
        _close(got, want)
    assert jaxdyn.compile_for_latency(mine, model, q, v, a, dispatch="jax").dispatch == "jax"
    monkeypatch.setattr(latency, "PACK_RESULTS", 0)
    unpacked = jaxdyn.compile_for_latency(mine, model, q, v, a)
    assert not unpacked._packed
    _close(unpacked(q, v, a), want)
    d = jaxdyn.compile_for_latency(jaxdyn.aba_derivatives, model, q, v, a)
    got = d(q, v, a)
    assert isinstance(got, tuple) and not d._packed
    _close(got, jax.jit(jaxdyn.aba_derivatives)(model, q, v, a))


def test_matrix_arguments(quad):
    """Arguments of any shape (a matrix packed with a vector) and lists taken by np.asarray."""
    model, q, _, _ = quad

    def f(m, q, w):
        return jaxdyn.crba(m, q) @ w

    w = np.arange(model.nv * 2, dtype=float).reshape(model.nv, 2)
    call = jaxdyn.compile_for_latency(f, model, q, w)
    _close(call(list(q), w), jax.jit(f)(model, q, w))


@pytest.mark.parametrize("dispatch", ["sync", "jax"])
def test_failed_check_raises(quad, dispatch):
    """A non-unit quaternion fails rnea's value check: CheckError with the check's message
    (also when the example argument itself fails it), and the call works again after."""
    model, q, v, a = quad
    bad = q.copy()
    bad[3:7] *= 2.0
    call = jaxdyn.compile_for_latency(jaxdyn.rnea, model, bad, v, a, dispatch=dispatch)
    with pytest.raises(jaxdyn.CheckError, match="quaternion in q is not of unit norm"):
        call(bad, v, a)
    _close(call(q, v, a), jax.jit(jaxdyn.rnea)(model, q, v, a))


def test_bad_arguments(quad):
    """Wrong shapes and counts name the argument; a bad dispatch or no example is refused."""
    model, q, v, a = quad
    call = jaxdyn.compile_for_latency(jaxdyn.rnea, model, q, v, a)
    with pytest.raises(ValueError, match=r"rnea: argument 1 has shape \(3,\), compiled for"):
        call(q, v[:3], a)
    with pytest.raises(TypeError, match="2 arguments given, compiled for 3"):
        call(q, v)
    with pytest.raises(ValueError, match="dispatch must be one of"):
        jaxdyn.compile_for_latency(jaxdyn.rnea, model, q, v, a, dispatch="async")
    with pytest.raises(TypeError, match="needs example arguments"):
        jaxdyn.compile_for_latency(jaxdyn.rnea, model)
    with pytest.raises(TypeError, match="example argument 0 is not a real array"):
        jaxdyn.compile_for_latency(jaxdyn.rnea, model, np.array(["a"]), v, a)


def test_process_dispatch_untouched(quad):
    """The synchronous client is jaxdyn's own: JAX's devices stay as they were, and jitted
    programs of the process keep running on JAX's default device."""
    model, q, v, a = quad
    devices = jax.devices()
    jaxdyn.compile_for_latency(jaxdyn.rnea, model, q, v, a)
    assert jax.devices() == devices
    if sync_client.available():
        assert sync_client.device() not in devices
    out = jax.jit(jaxdyn.rnea)(model, q, v, a)
    assert out.devices() == {devices[0]}

"""Matrix products inside jaxdyn's public functions run at full precision (jaxdyn._precision).

JAX's default float32 matmul precision lets GPUs use TF32 (measured on an H100: crba 4e-4,
aba 1e-3 relative error in float32; 1e-7 at full precision). The check is on the traced program,
so it runs on the CPU: every ``dot_general`` that a public function emits carries
``Precision.HIGHEST``.
"""

import jax
import jax.numpy as jnp
import pytest

import jaxdyn
from jaxdyn import _precision


def _dots(jaxpr):
    """All dot_general equations of a closed jaxpr, sub-jaxprs (scan, cond, custom_jvp) too."""
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            out.append(eqn)
        for p in eqn.params.values():
            subs = p if isinstance(p, (tuple, list)) else (p,)
            for s in subs:
                if isinstance(s, jax.extend.core.ClosedJaxpr):
                    out += _dots(s.jaxpr)
                elif isinstance(s, jax.extend.core.Jaxpr):
                    out += _dots(s)
    return out


def _highest(eqn):
    p = eqn.params.get("precision")
    if p is None:
        return False
    ps = p if isinstance(p, tuple) else (p, p)
    return all(x == jax.lax.Precision.HIGHEST for x in ps)


@pytest.fixture(scope="module")
def arm():
    m = jaxdyn.robots.load("arm7").astype("float32")
    q = jaxdyn.random_configuration(m, jax.random.PRNGKey(0), dtype="float32")
    v = jnp.ones(m.nv, jnp.float32)
    return m, q, v


def test_public_functions_trace_full_precision_products(arm):
    m, q, v = arm
    frame = m.frame_names[-1]
    fns = {
        "rnea": lambda q, v: jaxdyn.rnea(m, q, v, v),
        "crba": lambda q, v: jaxdyn.crba(m, q),
        "aba": lambda q, v: jaxdyn.aba(m, q, v, v),
        "minv": lambda q, v: jaxdyn.minv(m, q),
        "jacobian": lambda q, v: jaxdyn.jacobian(m, q, frame),
        "rnea_derivatives": lambda q, v: jaxdyn.rnea_derivatives(m, q, v, v),
        "grad aba": lambda q, v: jax.grad(lambda x: jaxdyn.aba(m, x, v, v).sum())(q),
    }
    total = 0
    for name, f in fns.items():
        dots = _dots(jax.make_jaxpr(f)(q, v).jaxpr)
        total += len(dots)
        bad = [d for d in dots if not _highest(d)]
        assert not bad, f"{name}: {len(bad)} of {len(dots)} dot_general at default precision"
    assert total > 0, "no matrix product traced: the check would be vacuous"


def test_precision_is_scoped(arm):
    """The context ends with the call: user code traced afterwards keeps JAX's default."""
    m, q, v = arm
    jaxdyn.crba(m, q)
    dots = _dots(jax.make_jaxpr(lambda a: a @ a)(jnp.eye(3, dtype=jnp.float32)).jaxpr)
    assert dots and not _highest(dots[0])


def test_precision_can_be_relaxed(arm, monkeypatch):
    m, q, v = arm
    monkeypatch.setattr(_precision, "PRECISION", "default")
    # XLA's kernels: a one-kernel call (jaxdyn.backend.small_calls) writes its dots as sums
    monkeypatch.setitem(jaxdyn.config._values, "fused_unbatched", False)
    # XLA's IDSVA (on the CPU its C kernel, a primitive without products, traces instead)
    monkeypatch.setitem(jaxdyn.config._values, "cpu_kernels", False)
    dots = _dots(jax.make_jaxpr(lambda q: jaxdyn.rnea_derivatives(m, q, v, v))(q).jaxpr)
    assert dots and not any(_highest(d) for d in dots)

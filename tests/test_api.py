"""The public API of ``jaxdyn``: every public name bound once, and the top-level functions that
take a Model or a ClusterModel dispatch on its type."""

from __future__ import annotations

import ast
import types
from collections import Counter
from pathlib import Path

import jax
import numpy as np

import jaxdyn
from jaxdyn import clusters as C
from jaxdyn import robots
from jaxdyn.algorithms import configuration as plain
from jaxdyn.clusters import robots as crobots


def test_all_names_bound_once():
    src = Path(jaxdyn.__file__).read_text()
    bound = Counter()
    for node in ast.parse(src).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            bound.update(t.id for t in node.targets if isinstance(t, ast.Name))
    twice = sorted(n for n, c in bound.items() if c > 1)
    assert twice == [], f"bound more than once in jaxdyn/__init__.py: {twice}"
    assert len(jaxdyn.__all__) == len(set(jaxdyn.__all__))
    for name in jaxdyn.__all__:
        assert bound[name] == 1, f"{name} is in __all__ but not bound in __init__.py"
        getattr(jaxdyn, name)
    # no two public names for one object
    objs = Counter(id(getattr(jaxdyn, n)) for n in jaxdyn.__all__)
    dup = sorted(n for n in jaxdyn.__all__ if objs[id(getattr(jaxdyn, n))] > 1)
    assert dup == [], f"two public names for one object: {dup}"
    # every public non-module attribute is listed
    public = {
        k
        for k, v in vars(jaxdyn).items()
        if not k.startswith("_") and not isinstance(v, types.ModuleType)
    }
    assert public <= set(jaxdyn.__all__), sorted(public - set(jaxdyn.__all__))


def test_bound_objects():
    """The analytic-derivative rnea / aba, and the URDF(+) loader."""
    assert jaxdyn.rnea is jaxdyn.derivatives.rnea and jaxdyn.aba is jaxdyn.derivatives.aba
    assert jaxdyn.load_urdf is C.urdfplus.load_urdf
    assert not hasattr(jaxdyn, "load_cluster_urdf")
    assert isinstance(jaxdyn.load_urdf(str(crobots.path("four_bar"))), C.ClusterModel)
    assert isinstance(jaxdyn.load_urdf(str(robots.resolve("arm7")[0])), jaxdyn.Model)


def test_configuration_dispatch_plain():
    model = robots.load("quad12")
    key = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(
        jaxdyn.neutral_configuration(model), plain.neutral_configuration(model)
    )
    q = jaxdyn.random_configuration(model, key, lower=-0.5, upper=0.5)
    np.testing.assert_array_equal(q, plain.random_configuration(model, key, -0.5, 0.5))
    assert q.shape == (model.nq,)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(q)[3:7]), 1.0, rtol=1e-12)


def test_configuration_dispatch_cluster():
    model = crobots.load("four_bar")
    assert isinstance(model, C.ClusterModel)
    key = jax.random.PRNGKey(5)
    q0 = jaxdyn.neutral_configuration(model)
    np.testing.assert_array_equal(q0, C.neutral_configuration(model))
    assert q0.shape == (model.nq,)
    q = jaxdyn.random_configuration(model, key, scale=0.3)
    np.testing.assert_array_equal(q, C.random_configuration(model, key, scale=0.3))
    # batched and jitted, the model as an argument
    keys = jax.random.split(key, 2)
    qs = jax.jit(jax.vmap(jaxdyn.random_configuration, (None, 0)))(model, keys)
    ref = np.stack([C.random_configuration(model, k) for k in keys])
    np.testing.assert_allclose(qs, ref, rtol=1e-10, atol=1e-12)

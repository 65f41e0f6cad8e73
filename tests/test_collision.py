"""Narrow-phase collision (jaxdyn.sim.collision) against MuJoCo C's ``mj_collision``.

Each pair: seeded random poses (deep, touching-ish and separated: MuJoCo is given a margin so it
reports separated pairs too) on a two-geom MJCF scene; the world poses MuJoCo computed are fed to
the JAX pair function (jitted once, vmapped over the poses). ``set`` pairs must return the same
contacts as MuJoCo (order-free: count, dist, pos, normal); ``deepest`` pairs (where MuJoCo's
manifold differs by design) the same deepest contact (dist, normal).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _collision_oracle import Scene, random_quats

from jaxdyn.sim import collision as C

pytest.importorskip("mujoco")

jax.config.update("jax_enable_x64", True)

N = 32  # random poses per pair in the default suite

#: (type1, size1, type2, size2, spread of the centre offset, MuJoCo margin, mode, tolerance)
CASES = [
    ("plane", [0.0], "sphere", [0.3], 0.3, 0.5, "set", 1e-9),
    ("plane", [0.0], "capsule", [0.2, 0.4], 0.3, 0.5, "set", 1e-9),
    ("plane", [0.0], "ellipsoid", [0.2, 0.3, 0.4], 0.3, 0.5, "set", 1e-9),
    ("plane", [0.0], "cylinder", [0.2, 0.4], 0.3, 0.5, "set", 1e-9),
    ("plane", [0.0], "box", [0.2, 0.3, 0.4], 0.3, 0.5, "set", 1e-9),
    ("sphere", [0.3], "sphere", [0.2], 0.4, 0.5, "set", 1e-9),
    ("sphere", [0.3], "capsule", [0.2, 0.4], 0.5, 0.5, "set", 1e-9),
    ("sphere", [0.3], "box", [0.2, 0.3, 0.4], 0.5, 0.5, "set", 1e-9),
    ("capsule", [0.3, 0.2], "capsule", [0.2, 0.4], 0.6, 0.5, "set", 1e-9),
]


def _ids(case):
    return f"{case[0]}-{case[2]}"


def _poses(t1, s1, t2, s2, spread, margin, n, seed):
    rng = np.random.default_rng(seed)
    scene = Scene(t1, s1, t2, s2, margin=margin)
    q1, q2 = random_quats(rng, n), random_quats(rng, n)
    p1 = rng.normal(size=(n, 3)) * 0.1
    p2 = p1 + rng.normal(size=(n, 3)) * spread
    mj, poses = [], []
    for i in range(n):
        out, pose = scene(p1[i], q1[i], p2[i], q2[i])
        mj.append(out)
        poses.append(pose)
    return mj, [np.stack(x) for x in zip(*poses, strict=True)]


def _compare(mine, mj, margin, mode, tol):
    """Largest error of the JAX contacts (slots with dist <= margin) against MuJoCo's."""
    worst = 0.0
    for i, (md, mp, mn) in enumerate(mj):
        d, p, n = (np.asarray(x[i]) for x in mine)
        keep = d <= margin
        d, p, n = d[keep], p[keep], n[keep]
        assert np.all(np.isfinite(d)) and np.all(np.isfinite(p)) and np.all(np.isfinite(n))
        if mode == "set":
            assert len(d) == len(md), f"sample {i}: {len(d)} contacts, MuJoCo {len(md)}"
            for k in range(len(md)):
                j = np.argmin(np.linalg.norm(p - mp[k], axis=1) + np.abs(d - md[k]))
                e = max(abs(d[j] - md[k]), np.abs(p[j] - mp[k]).max(), np.abs(n[j] - mn[k]).max())
                assert e < tol, (i, k, md[k], d[j], mp[k], p[j], mn[k], n[j])
                worst = max(worst, e)
        else:  # deepest
            assert (len(d) > 0) == (len(md) > 0), f"sample {i}: {d} vs MuJoCo {md}"
            if len(md):
                k, j = np.argmin(md), np.argmin(d)
                e = max(abs(d[j] - md[k]), np.abs(n[j] - mn[k]).max())
                assert e < tol, (i, md[k], d[j], mn[k], n[j])
                worst = max(worst, e)
    return worst


def _jitted(t1, s1, t2, s2):
    def f(p1, m1, p2, m2):
        return C.collide(t1, t2, jnp.asarray(s1), p1, m1, jnp.asarray(s2), p2, m2)

    return jax.jit(jax.vmap(f))


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_pair_matches_mujoco(case):
    t1, s1, t2, s2, spread, margin, mode, tol = case
    mj, poses = _poses(t1, s1, t2, s2, spread, margin, N, seed=56)
    mine = _jitted(t1, s1, t2, s2)(*map(jnp.asarray, poses))
    assert mine.dist.shape == (N, C.NCON[(t1, t2)])
    assert sum(len(x[0]) for x in mj) > N // 2  # the poses touch often enough to test something
    _compare(mine, mj, margin, mode, tol)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_pair_matches_mujoco_sweep(case):
    t1, s1, t2, s2, spread, margin, mode, tol = case
    for seed, scale in ((1, 0.5), (2, 1.0), (3, 2.0)):
        mj, poses = _poses(t1, s1, t2, s2, spread * scale, margin, 400, seed=seed)
        mine = _jitted(t1, s1, t2, s2)(*map(jnp.asarray, poses))
        _compare(mine, mj, margin, mode, tol)


def test_dispatch_order_and_errors():
    s, p, m = jnp.array([0.3]), jnp.zeros(3), jnp.eye(3)
    b = jnp.array([0.2, 0.3, 0.4])
    fwd = C.collide("sphere", "box", s, p, m, b, p + 0.1, m)
    rev = C.collide("box", C.GEOM_TYPES["sphere"], b, p + 0.1, m, s, p, m)
    np.testing.assert_allclose(rev.normal, -fwd.normal)
    np.testing.assert_allclose(rev.dist, fwd.dist)
    with pytest.raises(ValueError, match="type1"):
        C.collide("cone", "box", s, p, m, b, p, m)
    with pytest.raises(NotImplementedError, match="plane-plane"):
        C.collide("plane", "plane", s, p, m, s, p, m)
    assert set(C.NCON) == set(C.PAIRS)

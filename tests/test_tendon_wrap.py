"""Spatial tendons over pulleys and around spheres and cylinders
(:class:`jaxdyn.sim.SpatialTendons`) against MuJoCo C's ``mj_tendon`` / ``mju_wrap``: lengths
``ten_length`` and Jacobians ``ten_J`` across wrapping and straight configurations, a rollout
with a wrapping tendon's spring and limit, and the refusal of side sites."""

from __future__ import annotations

import pytest

mujoco = pytest.importorskip("mujoco")

import dataclasses  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _mujoco_ref import mujoco_rollout  # noqa: E402

from jaxdyn import sim  # noqa: E402
from jaxdyn.io.mjcf import load_mjcf  # noqa: E402

# an arm of three hinges (h3 out of the plane, so the sphere wrap leaves the plane); a cylinder
# on the world (its axis h1's), a sphere on link a, a cylinder on link b (axis b's z)
WRAP_XML = """<mujoco model="wrap"><option timestep="0.002"><flag contact="disable"/></option>
<worldbody>
 <site name="w0" pos="0 0 0.5"/><site name="w1" pos="-0.3 0 0.02"/>
 <geom name="cyl" type="cylinder" size="0.05 0.1" euler="90 0 0" contype="0" conaffinity="0"/>
 <body name="a"><joint name="h1" axis="0 1 0" damping="0.05"/>
  <geom type="capsule" fromto="0.06 0 0 0.44 0 0" size="0.02" mass="1"/>
  <site name="s1" pos="0.2 0 0.06"/>
  <geom name="ball" type="sphere" pos="0.5 0 0" size="0.06" contype="0" conaffinity="0"
   mass="0.1"/>
  <body name="b" pos="0.5 0 0"><joint name="h2" axis="0 1 0" damping="0.05"/>
   <joint name="h3" axis="0 0 1" damping="0.05"/>
   <geom type="capsule" fromto="0.08 0 0 0.4 0 0" size="0.02" mass="1"/>
   <geom name="cyl2" type="cylinder" pos="0.2 0 0" size="0.04 0.05" contype="0"
    conaffinity="0" mass="0.1"/>
   <site name="s2" pos="0.3 0.02 0.03"/><site name="s3" pos="0.45 0 0"/></body></body>
</worldbody>
<tendon>
 <spatial name="pulley"><site site="w0"/><site site="s1"/><pulley divisor="2"/><site site="s1"/>
  <geom geom="ball"/><site site="s2"/></spatial>
 <spatial name="sphere"><site site="s1"/><geom geom="ball"/><site site="s2"/></spatial>
 <spatial name="cyl"><site site="w1"/><geom geom="cyl"/><site site="s1"/></spatial>
 <spatial name="cyl2"><site site="s1"/><geom geom="cyl2"/><site site="s3"/></spatial>
 <spatial name="pulley3"><site site="w1"/><site site="s1"/><pulley divisor="3"/><site site="w0"/>
  <site site="s3"/></spatial>
 <spatial name="two"><site site="w1"/><geom geom="cyl"/><site site="s1"/><geom geom="ball"/>
  <site site="s2"/></spatial>
</tendon></mujoco>"""


def _mj_ten_J(m, d):
    if not hasattr(m, "ten_J_rownnz"):  # MuJoCo 3.x: dense
        return np.asarray(d.ten_J).reshape(m.ntendon, m.nv)
    J = np.zeros((m.ntendon, m.nv))
    mujoco.mju_sparse2dense(J, d.ten_J, m.ten_J_rownnz, m.ten_J_rowadr, m.ten_J_colind)
    return J


def test_wrapping_tendons_match_mujoco():
    """Over 60 random configurations, each wrapping tendon both wraps and runs straight
    (MuJoCo's ``ten_wrapnum``), and the lengths and Jacobians (``ten_J``, through the
    converter's velocity map) are MuJoCo's to 1e-10 (seen: 3e-16): the pulleys divide the
    following branch, tangent points move with the geom's body. Away from the switch the
    Jacobian is also the derivative of the length (``jax.jacfwd``, the envelope theorem)."""
    r = load_mjcf(WRAP_XML)
    ten = r.spatial_tendons
    assert ten is not None
    assert ten.paths[0] == (0, 1, ("pulley", 2.0), 1, ("sphere", 0), 2)
    assert [k for k, _ in (e for e in sum(ten.paths, ()) if isinstance(e, tuple))].count(
        "cylinder"
    ) == 3
    m = r.mj_model
    d = mujoco.MjData(m)
    conv = r.converter()
    jac = jax.jit(lambda q: ten.jacobian(r.model, q))
    dL = jax.jit(jax.jacfwd(lambda q: ten.jacobian(r.model, q)[0]))
    rng = np.random.default_rng(3)
    straight = np.array([5, 2, 2, 2, 5, 3])  # ten_wrapnum without a wrap
    wraps, errs, derr = np.zeros(m.ntendon), [], []
    for _ in range(60):
        d.qpos[:] = rng.uniform(-np.pi, np.pi, m.nq)
        mujoco.mj_forward(m, d)
        q = jnp.asarray(conv.q_from_mujoco(np.array(d.qpos)))
        L, J = jac(q)
        V = np.stack([np.asarray(conv.v_from_mujoco(q, jnp.asarray(e))) for e in np.eye(m.nv)], 1)
        errs.append(np.abs(np.asarray(L) - d.ten_length).max())
        errs.append(np.abs(np.asarray(J) @ V - _mj_ten_J(m, d)).max())
        derr.append(np.abs(np.asarray(dL(q)) - np.asarray(J)).max())  # hinges: v = qdot
        wraps += d.ten_wrapnum > straight
    assert max(errs) < 1e-10
    assert all(0 < w < 60 for w in wraps[[0, 1, 2, 3, 5]]), wraps  # wrap and not, each geom one
    assert np.median(derr) < 1e-8


def test_wrapping_tendon_rollout_follows_mujoco():
    """A spring on the sphere-wrapping tendon and a length limit (MuJoCo's limit constraint,
    ``limits="constraint"``) on the pulley tendon: 0.4 s of the arm swinging under gravity
    follows MuJoCo C to 1e-9 at every step, with wraps coming and going and the limit row
    active."""
    xml = WRAP_XML.replace(
        '<spatial name="sphere">', '<spatial name="sphere" stiffness="30" springlength="0.3">'
    ).replace('<spatial name="pulley">', '<spatial name="pulley" limited="true" range="0 0.9">')
    r = load_mjcf(xml)
    cfg = r.sim_config(limits="constraint")
    assert cfg.limit_constraints is not None
    assert cfg.limit_constraints.tendons == (("spatial", 0),)
    m = r.mj_model
    d = mujoco.MjData(m)
    d.qpos[:] = [-0.34, 0.94, 0.84]
    d.qvel[:] = [2.59, -2.31, 1.37]
    mujoco.mj_forward(m, d)
    conv = r.converter()
    q0 = jnp.asarray(conv.q_from_mujoco(np.array(d.qpos)))
    v0 = jnp.asarray(conv.v_from_mujoco(q0, jnp.asarray(d.qvel)))
    qm, wm, nefc = mujoco_rollout(m, 200, data=d, fields=("qpos", "ten_wrapnum", lambda d: d.nefc))
    changes = [len(set(wm[:, i])) == 2 for i in range(4)]
    assert sum(changes) >= 2 and nefc.max() > 0, (changes, nefc.max())  # wraps come and go

    def f(s, _):
        s = sim.step(r.model, s, jnp.zeros(0), cfg)
        return s, s.q

    q = jax.jit(lambda s: jax.lax.scan(f, s, None, length=200)[1])(sim.State(q0, v0))
    q = np.asarray(q)[:, np.argsort(conv.q_index)]
    np.testing.assert_allclose(q, qm, atol=1e-9, rtol=0)


def test_side_sites_refused_by_name():
    """A wrap with a side site (MuJoCo 4's homotopy rule, its inside wrap) is refused under
    ``ignore="tendon"`` by the tendon's name; ignored, the other tendons stay; malformed paths
    are refused by element."""
    xml = WRAP_XML.replace('<site name="w0"', '<site name="side" pos="0 0.1 0.2"/><site name="w0"')
    xml = xml.replace('<geom geom="cyl"/>', '<geom geom="cyl" sidesite="side"/>')
    with pytest.raises(ValueError, match=r'<tendon name="cyl">: a spatial tendon wrapping .*sides'):
        load_mjcf(xml)
    r = load_mjcf(xml, ignore=("tendon",))
    assert r.spatial_tendons is not None and r.spatial_tendons.size() == 4  # cyl, two dropped
    ten = load_mjcf(WRAP_XML).spatial_tendons
    assert ten is not None
    bad = {
        ((0, 1, ("sphere", 0)),): "a wrapping geom sits between two sites",
        ((0, ("sphere", 5), 1),): r"a geom index in \[0, 3\)",
        ((0, ("pulley", 0.0), 1),): "a pulley needs a divisor > 0",
        ((0, ("torus", 0), 1),): "is not a site index",
        ((("pulley", 2.0), 0, 1),): "must start and end with a site",
    }
    for paths, msg in bad.items():
        with pytest.raises(ValueError, match=msg):
            dataclasses.replace(ten, paths=paths)
    with pytest.raises(ValueError, match=r"geom_radius has shape \(2,\), expected \(3,\)"):
        dataclasses.replace(ten, geom_radius=jnp.ones(2))

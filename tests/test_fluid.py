"""MuJoCo's inertia-based fluid model (:class:`jaxdyn.sim.Fluid`) against MuJoCo C: the
generalised force on random states equals ``qfrc_fluid`` (``mj_inertiaBoxFluidModel``), and
``load_mjcf(...).sim_config()`` rollouts of a free box, a free capsule and a three-link planar
swimmer in a medium with density, viscosity and wind follow ``mj_step`` (Euler and
implicitfast, whose implicit step holds the fluid's velocity derivative,
``mjd_inertiaBoxFluid``), and so do dm_control's ``swimmer`` and ``fish`` (slow); jit / vmap of a
step, reverse mode through a short rollout against central differences; the ellipsoid-based
model refused by name."""

import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import sim

mujoco = pytest.importorskip("mujoco")

from _mujoco_ref import mujoco_rollout  # noqa: E402

# a free box and a free capsule (inertial frame off the body frame) falling through the medium,
# and a planar three-link swimmer (slide x, slide y, hinge z at its head, two hinges driven by
# motors) with joint damping; no contact
XML = """<mujoco><option timestep="0.002" density="1000" viscosity="0.05" wind="0.5 -0.3 0.2"
  integrator="{integrator}"/>
<default><geom contype="0" conaffinity="0"/></default>
<worldbody>
<body name="box" pos="0 0 1"><freejoint/><geom type="box" size="0.1 0.05 0.03" mass="1"/></body>
<body name="cap" pos="1 0 1" quat="0.9 0.1 0.2 0.3"><freejoint/>
  <geom type="capsule" size="0.04 0.1" pos="0.02 0 0" euler="10 20 30"/></body>
<body name="head" pos="0 2 0.5">
  <joint name="x" type="slide" axis="1 0 0"/><joint name="y" type="slide" axis="0 1 0"/>
  <joint name="z" axis="0 0 1"/>
  <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
  <body name="l2" pos="0.3 0 0"><joint name="j2" axis="0 0 1" damping="0.01"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
    <body name="l3" pos="0.3 0 0"><joint name="j3" axis="0 0 1" damping="0.01"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/></body></body></body>
</worldbody>
<actuator><motor joint="j2" gear="2"/><motor joint="j3" gear="2"/></actuator></mujoco>"""
STEPS = 300
CTRL = np.stack([np.sin(np.arange(STEPS) * 0.05), np.cos(np.arange(STEPS) * 0.05)], 1)


def _qvel(m, seed=0):
    return np.random.default_rng(seed).standard_normal(m.nv)


@pytest.fixture(scope="module", params=["Euler", "implicitfast"])
def scene(request):
    """The loaded scene, its ``sim_config`` and the jitted rollout."""
    loaded = jaxdyn.load_mjcf(XML.format(integrator=request.param))
    cfg = loaded.sim_config()
    roll = jax.jit(lambda s, u, c: sim.rollout(loaded.model, s, u, cfg=c))
    return loaded, cfg, roll


def _state(loaded, qvel):
    conv, q0 = loaded.converter(), np.asarray(loaded.q0)
    return sim.State(jnp.asarray(q0), jnp.asarray(conv.v_from_mujoco(q0, qvel)))


def test_forces_equal_mujoco(scene):
    """:meth:`Fluid.forces` on random states (random ``qpos``, ``qvel``) equals MuJoCo's
    ``qfrc_fluid``, which here is ``qfrc_passive`` less the joint damping, to 1e-12 relative
    (seen 1e-15)."""
    loaded, cfg, _ = scene
    m = loaded.mj_model
    d = mujoco.MjData(m)
    conv = loaded.converter()
    forces = jax.jit(lambda q, v: cfg.fluid.forces(loaded.model, q, v))
    rng = np.random.default_rng(1)
    for _ in range(4):
        d.qpos[:] = m.qpos0 + 0.5 * rng.standard_normal(m.nq)
        mujoco.mj_normalizeQuat(m, d.qpos)
        d.qvel[:] = 2.0 * rng.standard_normal(m.nv)
        mujoco.mj_forward(m, d)
        q = conv.q_from_mujoco(d.qpos)
        tau = forces(jnp.asarray(q), jnp.asarray(conv.v_from_mujoco(q, d.qvel)))
        got = conv.tau_to_mujoco(q, np.asarray(tau))
        scale = np.abs(d.qfrc_fluid).max()
        assert scale > 1.0
        np.testing.assert_allclose(got, d.qfrc_fluid, rtol=0, atol=1e-12 * scale)
        damping = -m.dof_damping * d.qvel
        np.testing.assert_allclose(got + damping, d.qfrc_passive, rtol=0, atol=1e-12 * scale)


def test_rollout_follows_mujoco(scene):
    """A rollout of 0.6 s from a random velocity under the motors' open-loop controls is
    MuJoCo C's ``mj_step`` (Euler: ``"implicit_damping"``, implicitfast: ``"implicit"``) to 1e-10
    in ``qpos`` and ``qvel`` at every step (seen 2e-13), the free bodies spinning: under
    implicitfast their gyroscopic velocity derivative (``mjd_freeMhat``) is in the implicit step
    with the fluid's."""
    loaded, cfg, roll = scene
    m = loaded.mj_model
    assert cfg.integrator == {0: "implicit_damping", 3: "implicit"}[int(m.opt.integrator)]
    assert cfg.fluid is loaded.fluid and len(cfg.fluid.body) == 5
    qvel = _qvel(m)
    qs, vs = mujoco_rollout(m, qvel=qvel, ctrl=CTRL, fields=("qpos", "qvel"))
    conv = loaded.converter()
    tr = roll(_state(loaded, qvel), jnp.asarray(CTRL), cfg)
    q = np.array([conv.q_to_mujoco(np.asarray(x)) for x in tr.q])
    v = np.array([conv.v_to_mujoco(np.asarray(a), np.asarray(b)) for a, b in zip(tr.q, tr.v)])
    np.testing.assert_allclose(q, qs, rtol=0, atol=1e-10)
    np.testing.assert_allclose(v, vs, rtol=0, atol=1e-10)


BOX = """<mujoco><option timestep="0.002" density="1000" viscosity="0.05" wind="0.5 -0.3 0.2"
  integrator="implicitfast"/>
<worldbody><body name="box" pos="0 0 1" euler="10 20 30"><freejoint/>
  <geom type="box" size="0.1 0.05 0.03" mass="1" contype="0" conaffinity="0"/></body>
</worldbody></mujoco>"""


def test_step_vmap_and_gradient():
    """A free box under implicitfast: ``jax.vmap`` of a jitted step over states equals the steps
    one by one; reverse mode through 30 steps in the density, the viscosity, the wind and the
    scale of the initial velocity equals central differences (rtol 1e-7; seen 6e-10)."""
    loaded = jaxdyn.load_mjcf(BOX)
    cfg = loaded.sim_config()
    model = loaded.model
    assert cfg.integrator == "implicit"
    q0, v0 = jnp.asarray(loaded.q0), jnp.asarray([3.0, -2.0, 1.0, 1.0, 2.0, -0.5])
    step = jax.jit(lambda s: sim.step(model, s, jnp.zeros(0), cfg))
    vs = jnp.stack([v0, 0.5 * v0, -v0])
    batch = jax.vmap(lambda v: step(sim.State(q0, v)))(vs)
    for k in range(3):
        np.testing.assert_allclose(batch.v[k], step(sim.State(q0, vs[k])).v, rtol=0, atol=1e-13)

    @jax.jit
    def loss(p):
        fluid = eqx.tree_at(
            lambda f: (f.density, f.viscosity, f.wind), cfg.fluid, (p[0], p[1], p[2:5])
        )
        c = eqx.tree_at(lambda c: c.fluid, cfg, fluid)
        s = sim.State(q0, v0 * (1.0 + p[5]))
        tr = sim.rollout(model, s, jnp.zeros((30, 0)), cfg=c)
        return jnp.sum(tr.v[-1] ** 2) + jnp.sum(jnp.sin(tr.q[-1]))

    p0 = jnp.asarray([1000.0, 0.05, 0.5, -0.3, 0.2, 0.0])
    g = np.asarray(jax.grad(loss)(p0))
    assert np.all(np.isfinite(g)) and np.all(g != 0)
    eps = np.array([1e-2, 1e-5, 1e-5, 1e-5, 1e-5, 1e-5])
    fd = [(loss(p0.at[i].add(e)) - loss(p0.at[i].add(-e))) / (2 * e) for i, e in enumerate(eps)]
    np.testing.assert_allclose(g, fd, rtol=1e-7)


@pytest.mark.slow  # the eager forces of a second model: 4 s
def test_from_model_equals_loaded():
    """:meth:`Fluid.from_model` (boxes from the model's inertias) gives the loaded scene's
    forces on the bodies whose principal moments differ (the box, the swimmer's links along
    their body axes; not the capsule turned off its axes, whose two equal moments leave the
    axes in their plane, and the faces' drag with them, to the eigensolver)."""
    loaded = jaxdyn.load_mjcf(XML.format(integrator="Euler"))
    f = loaded.fluid
    g = sim.Fluid.from_model(loaded.model, float(f.density), float(f.viscosity), np.asarray(f.wind))
    assert g.body == tuple(sorted(f.body))
    q = jnp.asarray(loaded.q0)
    v = jnp.asarray(np.random.default_rng(3).standard_normal(loaded.model.nv))
    a, b = f.forces(loaded.model, q, v), g.forces(loaded.model, q, v)
    conv = loaded.converter()
    a, b = conv.tau_to_mujoco(q, np.asarray(a)), conv.tau_to_mujoco(q, np.asarray(b))
    keep = np.r_[0:6, 12:17]  # MuJoCo's dofs of the box and the swimmer
    np.testing.assert_allclose(a[keep], b[keep], rtol=0, atol=1e-12 * np.abs(a).max())


def test_ellipsoid_model_refused_by_name():
    """A geom with ``fluidshape="ellipsoid"`` (MuJoCo's ellipsoid-based model) is refused naming
    its body; ``ignore=("fluid",)`` drops that body's fluid forces and keeps the others'."""
    xml = XML.format(integrator="Euler").replace(
        '<geom type="box"', '<geom type="box" fluidshape="ellipsoid"'
    )
    with pytest.raises(ValueError, match=r'<body name="box">: a geom with fluidshape="ellipsoid"'):
        jaxdyn.load_mjcf(xml)
    loaded = jaxdyn.load_mjcf(xml, ignore=("fluid",))
    assert len(loaded.ignored) == 1 and loaded.ignored[0].startswith("[fluid]")
    assert len(loaded.fluid.body) == 4
    with pytest.raises(TypeError, match="fluid must be None or Fluid"):
        sim.SimConfig(fluid=1.0)
    with pytest.raises(ValueError, match="density must be finite and >= 0"):
        eqx.tree_at(lambda f: f.density, loaded.fluid, -1.0).__check_init__()


def _suite_model(name):
    """dm_control's ``swimmer`` (six links) or ``fish`` as a compiled ``MjModel``."""
    suite = pytest.importorskip("dm_control.suite")
    from dm_control.suite import common, swimmer

    if name == "swimmer":
        return mujoco.MjModel.from_xml_string(*swimmer.get_model_and_assets(6))
    with open(os.path.join(os.path.dirname(suite.__file__), "fish.xml")) as f:
        return mujoco.MjModel.from_xml_string(f.read(), common.ASSETS)


@pytest.mark.slow  # 2-3 s each
@pytest.mark.parametrize("name", ["swimmer", "fish"])
def test_dm_control_suite_follows_mujoco(name):
    """dm_control's six-link ``swimmer`` (density 3000) and ``fish`` (density 5000, a free
    body), Euler, step as MuJoCo C's ``mj_step`` for 250 steps under random controls from a
    random velocity (1e-10 in ``qpos`` and ``qvel``; seen 1e-14 and 3e-13)."""
    m = _suite_model(name)
    loaded = jaxdyn.load_mjcf(m)
    cfg = loaded.sim_config()
    assert cfg.fluid is not None and len(cfg.fluid.body) >= 5
    ctrl = np.random.default_rng(0).uniform(-1, 1, (250, m.nu))
    qvel = 0.3 * _qvel(m, 2)
    qs, vs = mujoco_rollout(m, qvel=qvel, ctrl=ctrl, fields=("qpos", "qvel"))
    conv = loaded.converter()
    tr = jax.jit(lambda s, u: sim.rollout(loaded.model, s, u, cfg=cfg))(
        _state(loaded, qvel), jnp.asarray(ctrl)
    )
    q = np.array([conv.q_to_mujoco(np.asarray(x)) for x in tr.q])
    v = np.array([conv.v_to_mujoco(np.asarray(a), np.asarray(b)) for a, b in zip(tr.q, tr.v)])
    np.testing.assert_allclose(q, qs, rtol=0, atol=1e-10)
    np.testing.assert_allclose(v, vs, rtol=0, atol=1e-10)

"""MuJoCo's ``implicitfast`` takes a standalone free body's gyroscopic torque implicitly
(``mjd_freeMhat``: the body's 6 x 6 block of ``M - h D`` re-solved with the derivative of its
bias force), and so does jaxdyn's ``"implicit"`` (``jaxdyn.sim.core._gyroscopic_correction``):
free bodies spinning about non-principal axes follow MuJoCo C's ``mj_step`` to 1e-12 over 300
steps, where MuJoCo's explicit treatment of the same torque (``Euler``, what jaxdyn's
``"implicit"`` did before) departs by more than 1e-4; a ball joint keeps it explicit in both.
The correction's block equals ``(M + h dC/dv)^-1`` by automatic differentiation of RNEA (from
ABA's articulated inertias and from ``M^-1``'s blocks, as the step's kernels give it); a body
spinning on a floor under MuJoCo's contact follows ``mj_step`` too (slow)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import sim
from jaxdyn.algorithms.aba import articulated_inertias, world_inertia_matrices
from jaxdyn.algorithms.crba import crba_world
from jaxdyn.algorithms.rnea import rnea_world
from jaxdyn.sim import core

mujoco = pytest.importorskip("mujoco")

from _mujoco_ref import mujoco_rollout  # noqa: E402

# no gravity, no contact: "a", an asymmetric free body (full inertia off its body axes, centre
# of mass off its origin) with free-joint damping and a massless welded child (a site);
# "b", a free box with a welded sphere (MuJoCo 4 treats the subtree: jaxdyn merges it); "c",
# a capsule on a damped ball joint (MuJoCo keeps its gyroscopic torque explicit); "d", a free
# box with a hinged child (not standalone: explicit in MuJoCo too), between "a" and "b" among
# jaxdyn's free joints, so that their rows are two runs (the correction's gathered path)
XML = """<mujoco><option timestep="0.002" gravity="0 0 0" integrator="{integrator}"/>
<default><geom contype="0" conaffinity="0"/></default>
<worldbody>
<body name="a" pos="0 0 1" euler="10 20 30"><joint name="a" type="free" damping="0.02"/>
  <inertial pos="0.01 0.02 -0.015" mass="1.3" fullinertia="0.05 0.08 0.11 0.01 -0.006 0.004"/>
  <body name="a_site" pos="0.1 0 0"><site name="s"/></body></body>
<body name="d" pos="0 1 1" euler="5 -10 20"><freejoint name="d"/>
  <geom type="box" size="0.08 0.04 0.02" pos="0.01 0.02 0" mass="0.7"/>
  <body name="e" pos="0.1 0 0"><joint name="e" type="hinge" axis="0 1 1" damping="0.01"/>
    <geom type="capsule" size="0.02 0.05" pos="0.05 0 0" euler="0 90 0"/></body></body>
<body name="b" pos="1 0 1"><freejoint name="b"/>
  <geom type="box" size="0.1 0.05 0.03" pos="0.02 0 0" euler="10 20 30" mass="1"/>
  <body name="bw" pos="0.1 0 0"><geom type="sphere" size="0.03" mass="0.4"/></body></body>
<body name="c" pos="2 0 1"><joint name="c" type="ball" damping="0.01"/>
  <geom type="capsule" size="0.04 0.1" pos="0.02 0 0" euler="10 20 30"/></body>
</worldbody></mujoco>"""
STEPS = 300
QVEL = 4.0 * np.random.default_rng(0).standard_normal(22)
QVEL[6:13] *= 0.25  # "d" and its hinge slower: their explicit Coriolis terms amplify rounding


@pytest.fixture(scope="module")
def loaded():
    return jaxdyn.load_mjcf(XML.format(integrator="implicitfast"))


def _mujoco(integrator):
    m = mujoco.MjModel.from_xml_string(XML.format(integrator=integrator))
    return mujoco_rollout(m, STEPS, qvel=QVEL, fields=("qpos", "qvel"))


def test_spinning_free_bodies_follow_mujoco(loaded):
    """A 0.6 s rollout of ``sim_config()`` (``"implicit"``) is ``mj_step``'s under
    implicitfast to 1e-12 in ``qpos`` and ``qvel`` (seen 2e-13). MuJoCo's ``Euler``, whose step
    differs from implicitfast's here only by the free bodies' gyroscopic term (the joint
    damping implicit in both), departs from it by more than 1e-4 on the free bodies and not on
    the ball joint."""
    m = loaded.mj_model
    qs, vs = _mujoco("implicitfast")
    cfg = loaded.sim_config()
    assert cfg.integrator == "implicit"
    conv, q0 = loaded.converter(), np.asarray(loaded.q0)
    s0 = sim.State(jnp.asarray(q0), jnp.asarray(conv.v_from_mujoco(q0, QVEL)))
    tr = jax.jit(lambda s: sim.rollout(loaded.model, s, jnp.zeros((STEPS, 0)), cfg=cfg))(s0)
    q = np.array([conv.q_to_mujoco(np.asarray(x)) for x in tr.q])
    v = np.array([conv.v_to_mujoco(np.asarray(a), np.asarray(b)) for a, b in zip(tr.q, tr.v)])
    np.testing.assert_allclose(q, qs, rtol=0, atol=1e-12)
    np.testing.assert_allclose(v, vs, rtol=0, atol=1e-12)
    # the explicit gyroscopic torque (Euler) departs on the free bodies only
    qe, _ = _mujoco("Euler")
    ball = int(m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, "c")])
    free = np.ones(m.nq, bool)
    free[ball : ball + 4] = False
    assert np.abs(qe - qs)[:, free].max() > 1e-4
    np.testing.assert_allclose(qe[:, ~free], qs[:, ~free], rtol=0, atol=1e-12)


def test_block_is_the_bias_derivative(loaded):
    """On a random state, the correction maps ``M^-1`` to ``(M + h dC/dv)^-1`` on each free
    body's block (``dC/dv`` of ``C - M t``, RNEA at ``qdd = -t``, by ``jax.jacfwd``; ``M`` by
    CRBA) to 1e-13 relative, and leaves the ball joint's rows as they are."""
    model, h = loaded.model, 0.01
    rng = np.random.default_rng(1)
    q = np.asarray(loaded.q0).copy()
    bodies = core._standalone_free_bodies(model)
    assert len(bodies) == 2
    assert np.diff(np.asarray(model.topo.v_start)[bodies]).tolist() == [12]  # two runs
    for b in bodies:
        q0 = int(model.topo.q_start[b])
        quat = rng.standard_normal(4)
        q[q0 + 3 : q0 + 7] = quat / np.linalg.norm(quat)
    q, v = jnp.asarray(q), jnp.asarray(3.0 * rng.standard_normal(model.nv))

    @jax.jit
    def parts(q, v):
        ws, _ = core._world(model, q)

        def bias(vv):  # C - M t: RNEA at qdd = -t
            t = core._transport(model, vv)
            assert t is not None
            return rnea_world(model, ws, vv, -t)[0]

        dC = jax.jacfwd(bias)(v)
        M = crba_world(model, ws)
        inertias = articulated_inertias(model, ws.S, world_inertia_matrices(ws))
        correct = core._gyroscopic_correction(model, inertias, v, h)
        # the step's kernels' route: the blocks of M^-1 instead of ABA's articulated inertias
        by_minv = core._gyroscopic_correction(model, None, v, h, jnp.linalg.inv(M))
        assert correct is not None and by_minv is not None
        Minv = jnp.linalg.inv(M)
        return dC, M, correct(Minv), by_minv(Minv)

    dC, M, X, X_minv = (np.asarray(x) for x in parts(q, v))
    np.testing.assert_allclose(X_minv, X, rtol=0, atol=1e-13 * np.abs(X).max())
    Minv = np.linalg.inv(M)
    rows = np.zeros(model.nv, bool)
    for b in bodies:
        sl = slice(int(model.topo.v_start[b]), int(model.topo.v_start[b]) + 6)
        rows[sl] = True
        ref = np.linalg.inv(M[sl, sl] + h * dC[sl, sl])
        assert np.abs(dC[sl, sl]).max() > 0.05  # spinning: the term is there
        np.testing.assert_allclose(X[sl, sl], ref, rtol=0, atol=1e-13 * np.abs(ref).max())
    np.testing.assert_allclose(X[~rows], Minv[~rows], rtol=0, atol=1e-13 * np.abs(Minv).max())


# a box with a small sphere below it, tilted and spun about a non-principal axis on a floor
TOP = """<mujoco><option timestep="0.002" integrator="implicitfast"/>
<worldbody><geom name="floor" type="plane" size="5 5 .1"/>
<body name="top" pos="0 0 0.12" euler="15 -10 0"><freejoint/>
  <geom type="box" size="0.1 0.06 0.03" euler="10 20 30" mass="1"/>
  <geom type="sphere" size="0.02" pos="0 0 -0.1" mass="0.1"/></body>
</worldbody></mujoco>"""


@pytest.mark.slow
def test_spinning_top_on_a_floor_follows_mujoco():
    """Under MuJoCo's contact (``sim_config(sim.Constraint())``: the soft rows posed with ``M``,
    their impulses through the corrected solve, as MuJoCo's ``qfrc_constraint`` enters the
    free body's block) a body spinning on a floor, bouncing on one to three contacts, follows
    ``mj_step`` under implicitfast to 1e-12 over 300 steps (seen 2e-15)."""
    loaded = jaxdyn.load_mjcf(TOP)
    qvel = np.array([0.2, -0.1, 0.0, 3.0, -5.0, 20.0])
    qs, ncon = mujoco_rollout(loaded.mj_model, STEPS, qvel=qvel, fields=("qpos", "ncon"))
    assert ncon.min() == 0 and ncon.max() >= 2
    cfg = loaded.sim_config(sim.Constraint())
    conv, q0 = loaded.converter(), np.asarray(loaded.q0)
    s0 = sim.State(jnp.asarray(q0), jnp.asarray(conv.v_from_mujoco(q0, qvel)))
    s0 = sim.warm_state(loaded.model, s0, cfg)
    tr = jax.jit(lambda s: sim.rollout(loaded.model, s, jnp.zeros((STEPS, 0)), cfg=cfg))(s0)
    q = np.array([conv.q_to_mujoco(np.asarray(x)) for x in tr.q])
    np.testing.assert_allclose(q, qs, rtol=0, atol=1e-12)

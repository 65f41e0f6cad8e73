"""More DeepMind Control Suite machinery and tasks (:mod:`jaxdyn.envs.dm_control_suite`)
against MuJoCo C and dm_control: activation states (``State.act``) carried by the suite
environments.

Oracles: MuJoCo C (``mj_step``) on the same MJCF from the same keyframe under the same
controls.
"""

from __future__ import annotations

import pytest

mujoco = pytest.importorskip("mujoco")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxdyn.envs import dm_control_suite as suite  # noqa: E402

# ------------------------------------------------------------------ activation states (act)
#: two hinges under a first-order filter (``filter``), its exact discretisation
#: (``filterexact``, ``actearly``) and an integrator (``intvelocity``, ``actrange``), a plain
#: motor between them (no activation); a keyframe with activations
ACT_XML = """
<mujoco>
  <option timestep="0.005" integrator="Euler"><flag eulerdamp="disable" contact="disable"/></option>
  <worldbody>
    <body name="a">
      <joint name="j0" type="hinge" axis="0 1 0" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      <body name="b" pos="0.3 0 0">
        <joint name="j1" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.025"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <general joint="j0" dyntype="filter" dynprm="0.03" gainprm="2" ctrlrange="-1 1"/>
    <motor joint="j1" gear="0.5" ctrlrange="-1 1"/>
    <general joint="j1" dyntype="filterexact" dynprm="0.02" gainprm="1.5" actearly="true"/>
    <intvelocity joint="j0" kp="3" actrange="-0.4 0.4"/>
  </actuator>
  <keyframe>
    <key name="start" qpos="0.3 -0.5" qvel="0.2 0.1" act="0.5 -0.3 0.1"/>
  </keyframe>
</mujoco>
"""


class _ActTask(suite.SuiteEnv):
    """A bare suite environment on :data:`ACT_XML` (observation: ``q``, ``v``, ``act``)."""

    def __init__(self, path):
        self.xml = str(path)  # an absolute path: os.path.join keeps it
        super().__init__(ctrl_dt=0.01, sim_dt=0.005)

    def observe(self, ps, qk):
        return jnp.concatenate([ps.q, ps.v, ps.act])

    def reward(self, ps, qk, action):
        return jnp.zeros((), ps.q.dtype), {}

    def reset(self, rng):
        ps = self.pipeline_init(jnp.zeros(2), jnp.zeros(2))
        zero = jnp.zeros((), ps.q.dtype)
        return suite.State(ps, self.observe(ps, ps.q), zero, zero, {"diverged": zero}, {})


@pytest.fixture(scope="module")
def act_task(tmp_path_factory):
    path = tmp_path_factory.mktemp("act") / "act.xml"
    path.write_text(ACT_XML)
    env = _ActTask(path)
    return env, jax.jit(env.step)


def test_activation_state_carried_like_mujoco(act_task):
    """A suite environment whose actuators have activation dynamics: ``reset`` carries zero
    activations, :meth:`~jaxdyn.envs.dm_control_suite.SuiteEnv.keyframe_state` the keyframe's
    ``act`` (the loader's ``keyframe_act``, MuJoCo's ``key_act``), and ``step`` advances
    ``q``, ``v`` and ``act`` as MuJoCo C's ``mj_step`` does from that keyframe under changing
    controls (clamped by ``ctrlrange`` / ``actrange``), to 1e-10 over 8 control steps."""
    env, step = act_task
    m = env.scene.mj_model
    assert env.act_size == m.na == 3
    s0 = env.reset(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(s0.pipeline_state.act, np.zeros(3))
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("start").id)
    ps = env.keyframe_state("start")
    np.testing.assert_array_equal(ps.act, d.act)
    np.testing.assert_array_equal(env.qpos(ps.q), d.qpos)
    s = s0.replace(pipeline_state=ps)
    rng = np.random.default_rng(0)
    for k in range(8):
        u = rng.uniform(-1.5, 1.5, m.nu)  # beyond ctrlrange: clamped
        s = step(s, jnp.asarray(u))
        d.ctrl[:] = u
        mujoco.mj_step(m, d, env.n_frames)
        got = s.pipeline_state
        np.testing.assert_allclose(got.act, d.act, atol=1e-10, rtol=0, err_msg=str(k))
        np.testing.assert_allclose(env.qpos(got.q), d.qpos, atol=1e-10, rtol=0)
        np.testing.assert_allclose(env.qpos(got.v), d.qvel, atol=1e-10, rtol=0)
    assert np.abs(d.act).max() > 0.1 and float(s.done) == 0.0
    with pytest.raises(ValueError, match="no keyframe 'home'"):
        env.keyframe_state("home")
    with pytest.raises(ValueError, match=r"act has shape \(2,\), expected \(act_size,\)=\(3,\)"):
        env.pipeline_init(jnp.zeros(2), jnp.zeros(2), jnp.zeros(2))

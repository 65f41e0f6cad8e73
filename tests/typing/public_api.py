"""Type-checked use of jaxdyn's public API (not a test module: pyright checks it, see
``[tool.pyright]`` in pyproject.toml and .ci/run). Each ``assert_type`` holds only while the
public functions keep their annotations through jaxdyn's decorators (``jaxdyn.shell.public``,
``jaxdyn._precision.full_precision``): a decorator that erased them would leave ``Unknown``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array
from typing_extensions import assert_type

import jaxdyn
from jaxdyn.algorithms.kinematics import Kinematics, Placements
from jaxdyn.clusters import ClusterModel
from jaxdyn.iwim import InputMatrix
from jaxdyn.osim.constrained import ConstrainedDynamics


def use(model: jaxdyn.Model) -> None:
    key = jax.random.PRNGKey(0)
    q = jaxdyn.random_configuration(model, key)
    v = jnp.zeros(model.nv)
    assert_type(q, Array)
    assert_type(jaxdyn.neutral_configuration(model), Array)
    assert_type(jaxdyn.rnea(model, q, v, v), Array)
    assert_type(jaxdyn.aba(model, q, v, v, method="sweeps"), Array)
    assert_type(jaxdyn.crba(model, q), Array)
    assert_type(jaxdyn.minv(model, q), Array)
    assert_type(jaxdyn.bias_forces(model, q, v), Array)
    assert_type(jaxdyn.gravity_forces(model, q), Array)
    assert_type(jaxdyn.coriolis_matrix(model, q, v), Array)
    assert_type(jaxdyn.integrate(model, q, v), Array)
    assert_type(jaxdyn.difference(model, q, q), Array)
    assert_type(jaxdyn.forward_kinematics(model, q), Kinematics)
    assert_type(jaxdyn.frame_placement(model, q, "tip"), Placements)
    assert_type(jaxdyn.jacobian(model, q, "tip", reference="local"), Array)
    assert_type(jaxdyn.joint_jacobians(model, q), Array)
    assert_type(jaxdyn.frame_velocity(model, q, v, "tip"), Array)
    assert_type(jaxdyn.frame_acceleration(model, q, v, v, "tip", classical=True), Array)
    assert_type(jaxdyn.center_of_mass(model, q), Array)
    assert_type(jaxdyn.center_of_mass_jacobian(model, q), Array)
    assert_type(jaxdyn.kinetic_energy(model, q, v), Array)
    assert_type(jaxdyn.potential_energy(model, q), Array)
    assert_type(jaxdyn.centroidal_momentum_matrix(model, q), Array)
    assert_type(jaxdyn.centroidal_momentum(model, q, v), Array)
    assert_type(jaxdyn.centroidal_momentum_bias(model, q, v), Array)
    assert_type(jaxdyn.centroidal_dynamics(model, q, v), jaxdyn.Centroidal)
    assert_type(jaxdyn.rnea_derivatives(model, q, v, v), tuple[Array, Array, Array])
    assert_type(jaxdyn.aba_derivatives(model, q, v, v), tuple[Array, Array, Array])
    cs = [jaxdyn.Connect("tip", reference="local_world_aligned")]
    assert_type(jaxdyn.constraint_jacobian(model, q, cs), Array)
    assert_type(jaxdyn.delassus(model, q, cs), Array)
    assert_type(jaxdyn.constrained_aba(model, q, v, v, cs, damping=1e-8), ConstrainedDynamics)
    inputs = jaxdyn.Inputs("all", tuple(cs))
    assert_type(jaxdyn.build_input_matrix(model, q, inputs), Array)
    assert_type(jaxdyn.input_matrix(model, q, v, inputs), InputMatrix)


def use_sim(model: jaxdyn.Model) -> None:
    from jaxdyn import sim

    feet = [sim.Sphere(f, 0.02) for f in ("FL_FOOT", "FR_FOOT")]
    cfg = sim.SimConfig(dt=2e-3, contacts=sim.contact_set(model, feet))
    s0 = sim.State(jaxdyn.neutral_configuration(model), jnp.zeros(model.nv), jnp.zeros(()))
    ctrl = jnp.zeros(model.nv - 6)
    assert_type(sim.step(model, s0, ctrl, cfg), sim.State)
    assert_type(sim.rollout(model, s0, ctrl[None], cfg=cfg), sim.State)
    assert_type(sim.rollout(model, s0, cfg=cfg, policy=lambda s: ctrl, n_steps=3), sim.State)
    assert_type(sim.contact_forces(model, s0, ctrl, cfg), Array)


def use_trajopt(model: jaxdyn.Model) -> None:
    from jaxdyn import trajopt as to

    x0 = jnp.zeros(model.nq + model.nv)
    u = jnp.zeros(model.nv)
    running = to.Cost((to.Term(to.StateRegularization(x0), 1e-1),))
    problem = to.Problem(model, x0, running, running, dt=0.01, horizon=10)
    assert_type(to.step(model, x0, u, 0.01), Array)
    assert_type(to.step_derivatives(model, x0, u, 0.01), tuple[Array, Array, Array])
    assert_type(to.fddp(problem), to.Result)
    assert_type(to.ilqr(problem), to.Result)
    assert_type(to.rollout(problem, jnp.zeros((10, model.nv))), Array)


def use_clusters(model: ClusterModel) -> None:
    from jaxdyn import clusters

    q = jnp.zeros(model.nq)
    v = jnp.zeros(model.nv)
    assert_type(clusters.crnea(model, q, v, v), Array)
    assert_type(clusters.caba(model, q, v, v), Array)
    assert_type(clusters.cefpa(model, q, ["tip"]), Array)
    assert_type(clusters.projected_rnea(model, q, v, v), Array)
    assert_type(clusters.spanning_state(model, q, v), clusters.SpanningState)
    assert_type(clusters.loop_constraints(model, q, v), tuple[Array, Array, Array])
    assert_type(clusters.project_configuration(model, q), Array)


def use_nori(model: jaxdyn.Model) -> None:
    from jaxdyn import nori

    q = jaxdyn.neutral_configuration(model)
    v = jnp.zeros(model.nv)
    assert_type(nori.inverse_dynamics(model, q, v, v), Array)
    assert_type(nori.forward_dynamics(model, q, v, v), Array)
    system = nori.build(model, nori.inverse_dynamics_knowns())
    assert_type(system, nori.NoriSystem)
    values = (v, jnp.zeros((model.nb, 6)))
    assert_type(nori.solve(system, model, q, v, values), nori.Solution)
    assert_type(nori.assemble(system, model, q, v, values), tuple[Array, Array])


def use_envs() -> None:
    from jaxdyn import envs

    env = envs.make("reacher")
    assert_type(env, envs.Env)
    s = env.reset(jax.random.PRNGKey(0))
    assert_type(env.step(s, jnp.zeros(env.action_size)), envs.State)
    assert_type(envs.wrap(env, episode_length=10), envs.Wrapper)


def use_loaders(path: str) -> None:
    """The loaders' overloads: ``clusters=False`` / ``strict=`` give a plain Model."""
    import jaxdyn.robots
    from jaxdyn.trajopt import Cost, StateRegularization, Term

    assert_type(jaxdyn.load_urdf(path, clusters=False), jaxdyn.Model)
    assert_type(jaxdyn.load_urdf(path), "jaxdyn.Model | ClusterModel")
    assert_type(jaxdyn.robots.load("double_pendulum", strict=True), jaxdyn.Model)
    assert_type(jaxdyn.robots.load("double_pendulum", None, False), jaxdyn.Model)
    assert_type(jaxdyn.robots.load("double_pendulum"), "jaxdyn.Model | ClusterModel")
    assert_type(jaxdyn.load(path), "jaxdyn.Model | ClusterModel")
    mj = jaxdyn.load_mjcf(path)
    model = mj.model
    assert_type(model.frame_index("tip"), int)
    assert_type(model.q_slice(0), slice)
    x = jnp.zeros(2 * model.nq)
    cost = Cost((Term(StateRegularization(x)),))
    assert_type(cost.value(model, x), Array)

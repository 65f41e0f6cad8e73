"""The trajectory-optimisation problems of ``benchmarks/trajopt.py`` and
``benchmarks/trajopt_gpu.py`` (jaxdyn only: no Pinocchio or Crocoddyl needed)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxdyn
from jaxdyn import robots
from jaxdyn.trajopt import costs as C
from jaxdyn.trajopt import ddp
from jaxdyn.trajopt.dynamics import FreeDynamics

DT, MAX_ITER, ARMATURE = 0.01, 200, 0.01


def load_model(name):
    """A bundled robot with armature 0.01 (as the Crocoddyl conversion assumes); its URDF text
    and whether it has a floating base."""
    path, floating = robots.resolve(name)
    xml = path.read_text()
    return jaxdyn.load_urdf(xml, floating_base=floating).with_armature(ARMATURE), xml, floating


def make_problem(model, T, x0, goal):
    dyn = FreeDynamics.floating_base(model) if model.floating_base else FreeDynamics()
    nu = dyn.nu(model)
    run = C.Cost(
        (
            C.Term(C.StateRegularization(goal), 1e-1),
            C.Term(C.ControlRegularization(jnp.zeros(nu)), 1e-3),
        )
    )
    term = C.Cost((C.Term(C.StateRegularization(goal), 1e2),))
    return ddp.Problem(model, x0, run, term, DT, T, dyn)


def goal_state(model, q0, offset):
    q = jaxdyn.integrate(model, q0, offset)
    return jnp.concatenate([q, jnp.zeros(model.nv)])


def random_problems(model, T, B, seed):
    """``B`` reaching problems of a fixed-base arm, stacked along a leading axis: start postures
    ``0.3 N(0, 1)`` and goal offsets ``0.6 N(0, 1)`` per joint from the neutral posture (in
    this order per problem from ``numpy.random.default_rng(seed)``), zero velocities."""
    noise = np.random.default_rng(seed).standard_normal((B, 2, model.nv))
    q0 = jaxdyn.neutral_configuration(model)

    def one(n):
        qa = jaxdyn.integrate(model, q0, 0.3 * n[0])
        return make_problem(
            model, T, jnp.concatenate([qa, jnp.zeros(model.nv)]), goal_state(model, qa, 0.6 * n[1])
        )

    return jax.vmap(one)(jnp.asarray(noise))

"""Centre of mass and energies.

Reference: Featherstone 2008 §2.13 (spatial inertia) and eq. 2.66 (kinetic energy
``T = 1/2 sum_i v_i . I_i v_i``); potential energy ``U = -sum_i m_i g . c_i`` as in Pinocchio.
"""

from __future__ import annotations

import jax.numpy as jnp

from .. import _checks
from .._precision import full_precision
from . import kinematics as kin


@full_precision
def center_of_mass(model, q):
    """Position of the whole robot's centre of mass in the world, ``(3,)``."""
    model, q, _ = kin._prepare(model, "center_of_mass", q)
    ws = kin.world_state(model, q)
    return jnp.sum(ws.h, 0) / jnp.sum(ws.mass)


@full_precision
def kinetic_energy(model, q, v):
    """``T = 1/2 v^T M(q) v``, summed over bodies."""
    v = _checks.as_array("kinetic_energy", "v", v, (("nv", model.nv),), model)
    model, q, dtype = kin._prepare(model, "kinetic_energy", q, v)
    ws = kin.world_state(model, q)
    vb, _ = kin.body_velocities(model, ws, v.astype(dtype))
    return 0.5 * jnp.sum(vb * kin.inertia_apply(ws.mass, ws.c, ws.Ic, vb))


@full_precision
def potential_energy(model, q):
    """Gravitational potential energy ``U = -sum_i m_i g . c_i``."""
    model, q, _ = kin._prepare(model, "potential_energy", q)
    ws = kin.world_state(model, q)
    return -jnp.dot(model.gravity, jnp.sum(ws.h, 0))

"""Centre of mass and energies.

Reference: Featherstone 2008 §2.13 (spatial inertia) and eq. 2.66 (kinetic energy
``T = 1/2 sum_i v_i . I_i v_i``); potential energy ``U = -sum_i m_i g . c_i`` as in Pinocchio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp

from .. import batching, shell
from .._precision import full_precision
from ..model import tree
from . import kinematics as kin

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model


@shell.public("center_of_mass", words=batching.kinematics_words)
@full_precision
def center_of_mass(model: Model, q: ArrayLike) -> Array:
    """Position of the whole robot's centre of mass in the world, ``(3,)``: the moving bodies'
    (a fixed base's root link is part of the world). NaN when they carry no mass (e.g. a
    zero-DoF fixed-base model), as Pinocchio's ``centerOfMass``."""
    model, q, dtype = shell.prepare(model, "center_of_mass", q)
    if model.nb == 0:
        return jnp.full(3, jnp.nan, dtype)
    ws = kin.world_state(model, q)
    return tree.sum_rows(ws.h) / jnp.sum(ws.mass)


@shell.public("kinetic_energy", words=batching.kinematics_words)
@full_precision
def kinetic_energy(model: Model, q: ArrayLike, v: ArrayLike) -> Array:
    """``T = 1/2 v^T M(q) v``, summed over bodies (plus ``1/2 sum armature v^2``)."""
    v = shell.as_array("kinetic_energy", "v", v, (("nv", model.nv),), model)
    model, q, dtype = shell.prepare(model, "kinetic_energy", q, v)
    if model.nb == 0:
        return jnp.zeros((), dtype)
    v = v.astype(dtype)
    ws = kin.world_state(model, q)
    vb, _ = kin.body_velocities(model, ws, v)
    T = 0.5 * jnp.sum(vb * kin.inertia_apply(ws.mass, ws.c, ws.Ic, vb))
    if model.armature is not None:
        T = T + 0.5 * jnp.sum(model.armature * v * v)
    return T


@shell.public("potential_energy", words=batching.kinematics_words)
@full_precision
def potential_energy(model: Model, q: ArrayLike) -> Array:
    """Gravitational potential energy ``U = -sum_i m_i g . c_i``."""
    model, q, dtype = shell.prepare(model, "potential_energy", q)
    if model.nb == 0:
        return jnp.zeros((), dtype)
    ws = kin.world_state(model, q)
    return -jnp.dot(model.gravity, tree.sum_rows(ws.h))

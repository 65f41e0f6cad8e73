"""Centroidal dynamics: the robot's momentum about its centre of mass.

References: Orin, Goswami and Lee, "Centroidal dynamics of a humanoid robot", Autonomous Robots
35 (2013) 161-176 (the centroidal momentum matrix ``A_G`` with ``h_G = A_G v``, computed from
composite-rigid-body inertias, and the rate ``dh_G/dt = A_G a + Adot_G v``); Featherstone 2008
§2.13 (spatial inertia, momentum) and eq. 6.19 (the composite inertias of CRBA); Pinocchio's
``ccrba`` / ``computeCentroidalMomentum`` / ``computeCentroidalMomentumTimeVariation`` compute
the same quantities.

In world coordinates the momentum of body ``i`` about the world origin is ``oI_i ov_i`` and
``ov_i = sum_{j in support(i)} oS_j v_j``, so the total momentum about the origin is
``h_O = sum_j oIc_{body(j)} oS_j v_j``: the columns of ``A_O`` are CRBA's forces
``F_j = oIc_{body(j)} oS_j`` (:func:`jaxdyn.algorithms.crba.subspace_force_rows`). Its rate at
``qdd = 0`` without gravity is the sum of the bodies' net forces ``oI_i oa_i + ov_i x* oI_i ov_i``
(RNEA's outward pass, :func:`jaxdyn.algorithms.rnea.rnea_world`). Both are moved to the centre
of mass ``G`` by the force transform ``n_G = n_O - G x f`` (axes stay the world's); since
``dG/dt`` is parallel to the linear momentum, ``d/dt h_G`` is that transform of ``d/dt h_O``.

Spatial forces are ``[angular; linear]`` as everywhere in jaxdyn: ``h_G = [k_G; l]`` with the
angular momentum ``k_G`` about the centre of mass and the linear momentum ``l`` (Pinocchio's
``hg`` and ``Ag`` rows are ``[linear; angular]``:
:meth:`~jaxdyn.interop.pinocchio.Converter.motion_to_pin` and ``jacobian_to_pin`` swap the
halves). Armature (rotor inertia) is not part of the momentum, as in
Pinocchio. The bodies are the moving ones (a fixed base's root link belongs to the world).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp

from .. import batching, shell, spatial
from .._precision import full_precision
from ..model import tree
from . import kinematics as kin
from .crba import composite_inertias, subspace_force_rows
from .rnea import rnea_world

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model


class Centroidal(NamedTuple):
    """Centroidal quantities of one state (world axes, at the centre of mass)."""

    A: jax.Array  # (6, nv) centroidal momentum matrix A_G, h_G = A_G v
    bias: jax.Array  # (6,) Adot_G v: d/dt h_G at zero joint acceleration
    momentum: jax.Array  # (6,) h_G = [k_G; l]
    com: jax.Array  # (3,) centre of mass in the world
    mass: jax.Array  # () total mass of the moving bodies


def _to_com(f, G):
    """Forces ``f (6, ...)`` (component-major, about the frame's origin) about the point ``G``:
    ``[n - G x f_lin; f_lin]``."""
    n, lin = list(f[:3]), list(f[3:])
    Gxf = spatial.cross_rows(list(G), lin)
    return spatial.stack([n[i] - Gxf[i] for i in range(3)] + lin, 0)


def _com(ws):
    mass = jnp.sum(ws.mass)
    return tree.sum_rows(ws.h) / mass, mass


def _momentum_of(ws, vb, G):
    """``h_G`` from the body velocities ``vb (nb, 6)``."""
    return _to_com(tree.sum_rows(kin.inertia_apply(ws.mass, ws.c, ws.Ic, vb)), G)


def _momentum(model, ws, v, G):
    return _momentum_of(ws, kin.body_velocities(model, ws, v)[0], G)


def _matrix(model, ws, G):
    _, Ft = subspace_force_rows(model, ws, composite_inertias(model, ws))
    return _to_com(Ft, G)


def _bias_of(model, F, G):
    """``Adot_G v`` from RNEA's composite forces ``F (nb, 6)`` at ``qdd = 0``, no gravity: the
    composite force of a root body is the sum of its subtree's net forces."""
    return _to_com(jnp.sum(F[: model.topo.levels[0].n], 0), G)


def _rnea_pass(model, ws, v):
    """RNEA at ``qdd = 0`` without gravity: ``(body velocities, composite forces)``."""
    _, vb, _, F = rnea_world(model, ws, v, jnp.zeros_like(v), gravity=False)
    return vb, F


def _bias(model, ws, v, G):
    return _bias_of(model, _rnea_pass(model, ws, v)[1], G)


def _prepare(fn, model, q, v=None):
    """Checked inputs and the world state translated to the base origin (the dynamics
    algorithms' ``centered`` state: the momentum about ``G`` does not depend on the origin,
    and a distant one costs precision), with that origin ``(3,)`` in the world."""
    if v is not None:
        v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    model, q, dtype = shell.prepare(model, fn, q, *(() if v is None else (v,)))
    if model.nb == 0:
        return model, None, None, v, dtype
    R, p = kin.body_placements(model, q)
    origin = p[0] if model.topo.floating_base else jnp.zeros(3, dtype)
    ws = kin.world_state_from_placements(model, R, p - origin)
    return model, ws, origin, (None if v is None else v.astype(dtype)), dtype


def _one(fn, part, model, q, v):
    """``part(model, ws, v, G)`` ``(6,)`` (zero without moving bodies)."""
    model, ws, _, v, dtype = _prepare(fn, model, q, v)
    if model.nb == 0:
        return jnp.zeros(6, dtype)
    return part(model, ws, v, _com(ws)[0])


@shell.public("centroidal_momentum", words=batching.kinematics_words)
@full_precision
def centroidal_momentum(model: Model, q: ArrayLike, v: ArrayLike) -> Array:
    """Centroidal momentum ``h_G = [k_G; l]`` ``(6,)``: the angular momentum about the centre
    of mass and the linear momentum, world axes (Orin et al. 2013): the bodies' momenta
    ``oI_i ov_i`` summed and moved to the centre of mass.

    **Arguments:** ``q (nq,)``, ``v (nv,)``. Zero for a model without moving bodies.
    """
    return _one("centroidal_momentum", _momentum, model, q, v)


@shell.public("centroidal_momentum_matrix", words=batching.kinematics_words)
@full_precision
def centroidal_momentum_matrix(model: Model, q: ArrayLike) -> Array:
    """Centroidal momentum matrix ``A_G`` ``(6, nv)``, ``h_G = A_G v`` (Orin et al. 2013;
    Pinocchio's ``ccrba`` / ``computeCentroidalMap`` with the row halves swapped):
    CRBA's composite forces ``oIc oS`` moved to the centre of mass.

    **Arguments:** ``q (nq,)``.
    """
    fn = "centroidal_momentum_matrix"
    model, ws, _, _, dtype = _prepare(fn, model, q)
    if model.nb == 0:
        return jnp.zeros((6, 0), dtype)
    G, _ = _com(ws)
    return _matrix(model, ws, G)


@shell.public("center_of_mass_jacobian", words=batching.kinematics_words)
@full_precision
def center_of_mass_jacobian(model: Model, q: ArrayLike) -> Array:
    """Jacobian of the centre of mass ``J_com`` ``(3, nv)``, world axes: ``d/dt com = J_com v``
    (Pinocchio's ``jacobianCenterOfMass``; the linear rows of ``A_G`` over the mass). Column
    ``c`` is ``(m_C oS_lin - h_C x oS_ang) / m`` with the mass ``m_C`` and first moment ``h_C``
    of the subtree that coordinate ``c`` moves (CRBA's composite sums, Featherstone eq. 6.19).
    NaN when the moving bodies carry no mass, as :func:`jaxdyn.center_of_mass`.

    **Arguments:** ``q (nq,)``.
    """
    fn = "center_of_mass_jacobian"
    model, ws, _, _, dtype = _prepare(fn, model, q)
    if model.nb == 0:
        return jnp.zeros((3, 0), dtype)
    assert ws is not None  # nb > 0: _prepare's world state
    t = model.topo
    mh = tree.bodies_to_dofs(
        t, tree.backward_accumulate(t, jnp.concatenate([ws.mass[:, None], ws.h], -1))
    )
    S = ws.S
    lin = mh[:, :1] * S[:, 3:] - spatial.cross(mh[:, 1:], S[:, :3])
    return lin.T / jnp.sum(ws.mass)


@shell.public("centroidal_momentum_bias", words=batching.kinematics_words)
@full_precision
def centroidal_momentum_bias(model: Model, q: ArrayLike, v: ArrayLike) -> Array:
    """``Adot_G v`` ``(6,)``: the rate of the centroidal momentum at zero joint acceleration,
    so that ``d/dt h_G = A_G a + Adot_G v`` (Orin et al. 2013; Pinocchio's
    ``computeCentroidalMomentumTimeVariation`` at ``a = 0``). Gravity is not included (it is
    an external force, ``m g`` on the linear half).

    **Arguments:** ``q (nq,)``, ``v (nv,)``.
    """
    return _one("centroidal_momentum_bias", _bias, model, q, v)


@shell.public("centroidal_dynamics", words=batching.kinematics_words)
@full_precision
def centroidal_dynamics(model: Model, q: ArrayLike, v: ArrayLike) -> Centroidal:
    """All centroidal quantities from one world state: :class:`Centroidal` with ``A`` (the
    matrix ``A_G``), ``bias`` (``Adot_G v``), ``momentum`` (``h_G``), ``com`` (the centre of
    mass in the world, as :func:`jaxdyn.center_of_mass`) and ``mass``.

    **Arguments:** ``q (nq,)``, ``v (nv,)``.
    """
    fn = "centroidal_dynamics"
    model, ws, origin, vc, dtype = _prepare(fn, model, q, v)
    if model.nb == 0:
        z = jnp.zeros(6, dtype)
        return Centroidal(jnp.zeros((6, 0), dtype), z, z, jnp.full(3, jnp.nan, dtype), z[0])
    assert ws is not None and origin is not None and vc is not None  # nb > 0: _prepare's
    G, mass = _com(ws)
    vb, F = _rnea_pass(model, ws, vc)  # one outward pass for the momentum and its rate
    return Centroidal(
        _matrix(model, ws, G), _bias_of(model, F, G), _momentum_of(ws, vb, G), G + origin, mass
    )

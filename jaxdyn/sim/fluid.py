"""Fluid forces: MuJoCo's inertia-based fluid model (MuJoCo's documentation, Computation:
"Fluid forces", "Inertia-based model"; ``mj_inertiaBoxFluidModel``).

Each body with mass is replaced by the box of equal mass and principal moments of inertia
(sides ``b_i = sqrt(6 (I_j + I_k - I_i) / m)`` along its inertial frame's axes), and the
medium acts on it at its centre of mass, in its inertial frame, with the body's velocity
relative to the medium (``v - wind``, the wind a uniform flow in world axes):

* ``viscosity`` ``beta``: the Stokes drag and torque of the sphere of the box's mean side ``d``,
  ``f = -3 pi d beta v``, ``g = -pi d^3 beta w``;
* ``density`` ``rho``: quadratic drag on the box's faces, ``f_i = -rho b_j b_k |v_i| v_i / 2``,
  and the moment term ``g_i = -rho b_i (b_j^4 + b_k^4) |w_i| w_i / 64``.

:class:`Fluid` holds the medium and the boxes; its force is a passive force (MuJoCo's
``qfrc_fluid`` within ``qfrc_passive``) that every integrator applies, explicitly, except
``"implicit"`` (MuJoCo's ``implicitfast``), whose implicit step takes its velocity derivative
as MuJoCo's ``mjd_inertiaBoxFluid`` does (:meth:`Fluid.inertias`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import spatial
from ..algorithms import kinematics as kin
from ..model import tree
from . import _params, _scatter

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike

    from ..algorithms.kinematics import WorldState
    from ..model.model import Model

__all__ = ["Fluid", "inertia_box"]

#: MuJoCo's ``mjMINVAL``: the floor of a box side's square and the least mass that feels the fluid
MINVAL = 1e-15


def inertia_box(mass: ArrayLike, moments: ArrayLike) -> np.ndarray:
    """Sides ``(..., 3)`` of the box of mass ``mass`` and principal moments ``moments`` (MuJoCo's
    ``mj_inertiaBoxFluidModel``: ``sqrt(max(MINVAL, I_j + I_k - I_i) / m * 6)``)."""
    m = np.asarray(mass, float)[..., None]
    inertia = np.asarray(moments, float)
    s = inertia.sum(-1, keepdims=True) - 2 * inertia
    return np.sqrt(np.maximum(MINVAL, s) / m * 6.0)


class Fluid(eqx.Module):
    """A fluid medium and the bodies it acts on, MuJoCo's inertia-based model (the module
    docs).

    - ``density`` (``rho``, MuJoCo's ``<option density>``), ``viscosity`` (``beta``,
      ``<option viscosity>``), both >= 0, and ``wind`` ``(3,)`` (``<option wind>``, world axes);
    - ``body``: the jaxdyn body of each box (static); ``rot (k, 3, 3)`` and ``pos (k, 3)``:
      the box's frame (the MuJoCo body's inertial frame: principal axes, centre of mass) in
      that body's frame; ``box (k, 3)``: its sides (:func:`inertia_box`).

    A jaxdyn body may carry several boxes (MuJoCo bodies welded into it, each its own box, as
    MuJoCo computes them). :meth:`from_model` builds the boxes of a model's bodies;
    :meth:`jaxdyn.io.mjcf.MJCFModel.sim_config` those of an MJCF scene."""

    density: jnp.ndarray
    viscosity: jnp.ndarray
    wind: jnp.ndarray
    rot: jnp.ndarray
    pos: jnp.ndarray
    box: jnp.ndarray
    body: tuple = eqx.field(static=True)

    _RULES = (("density", 0.0, False), ("viscosity", 0.0, False), ("wind", None, False))

    def __check_init__(self):
        _params.check_module(self)
        k = len(self.body)
        for name, shape in (("rot", (k, 3, 3)), ("pos", (k, 3)), ("box", (k, 3))):
            value = getattr(self, name)
            if not isinstance(value, jax.core.Tracer) and np.shape(value) != shape:
                raise ValueError(
                    f"Fluid: {name} has shape {np.shape(value)}, expected {shape} (one per "
                    "entry of body)"
                )
        if not isinstance(self.wind, jax.core.Tracer) and np.shape(self.wind) != (3,):
            raise ValueError(f"Fluid: wind has shape {np.shape(self.wind)}, expected (3,)")

    @classmethod
    def from_model(
        cls,
        model: Model,
        density: float = 0.0,
        viscosity: float = 0.0,
        wind: Sequence[float] = (0.0, 0.0, 0.0),
    ) -> Fluid:
        """The medium acting on every body of ``model`` with mass (above ``MINVAL``), each the
        box of its mass and principal moments (the eigenvectors of its rotational inertia about
        its centre of mass, as MuJoCo's compiler finds the inertial frame of a full inertia)."""
        mass = np.asarray(model.mass, float)
        Ic = np.asarray(model.inertia, float)
        com = np.asarray(model.com, float)
        body = [b for b in range(model.topo.nb) if mass[b] >= MINVAL]
        moments, axes = np.zeros((0, 3)), np.zeros((0, 3, 3))
        if body:
            moments, axes = np.linalg.eigh(Ic[body])
        return cls(
            density=jnp.asarray(density, float),
            viscosity=jnp.asarray(viscosity, float),
            wind=jnp.asarray(np.asarray(wind, float)),
            rot=jnp.asarray(axes),
            pos=jnp.asarray(com[body].reshape(-1, 3)),
            box=jnp.asarray(inertia_box(mass[body], moments).reshape(-1, 3)),
            body=tuple(body),
        )

    def _local(self, ws: WorldState, vb: Array):
        """Each box's frame ``(R (k, 3, 3), x (k, 3))`` in the world state's axes and its
        velocity relative to the medium in its own axes, ``[w; v - wind] (k, 6)``."""
        idx = np.asarray(self.body, np.int64)
        dtype = ws.p.dtype
        Rb = ws.R[idx]
        R = Rb @ self.rot.astype(dtype)
        x = spatial.mv(Rb, self.pos.astype(dtype)) + ws.p[idx]
        w, vo = vb[idx, :3], vb[idx, 3:]
        vx = vo + spatial.cross(w, x) - self.wind.astype(dtype)
        Rt = jnp.swapaxes(R, -1, -2)
        return R, x, jnp.concatenate([spatial.mv(Rt, w), spatial.mv(Rt, vx)], -1)

    def _coefficients(self, dtype):
        """The linear (viscous) and quadratic (density) coefficients ``(k, 6)`` of the local
        force ``-(lin + quad |u|) u`` of each box."""
        b = self.box.astype(dtype)
        rho = jnp.asarray(self.density, dtype)
        beta = jnp.asarray(self.viscosity, dtype)
        d = jnp.mean(b, -1, keepdims=True)
        lin = jnp.concatenate(
            [jnp.pi * d**3 * beta * jnp.ones_like(b), 3.0 * jnp.pi * d * beta * jnp.ones_like(b)],
            -1,
        )
        b4 = b**4
        ang = rho * b * (b4.sum(-1, keepdims=True) - b4) / 64.0
        face = 0.5 * rho * jnp.stack([b[:, 1] * b[:, 2], b[:, 0] * b[:, 2], b[:, 0] * b[:, 1]], -1)
        return lin, jnp.concatenate([ang, face], -1)

    def wrenches(self, model: Model, ws: WorldState, vb: Array) -> Array:
        """The medium's spatial forces on the bodies ``(nb, 6)`` (world axes, at the world
        state's origin), from the body velocities ``vb`` (:func:`jaxdyn.algorithms.kinematics.
        body_velocities`)."""
        dtype = ws.p.dtype
        if not self.body:
            return jnp.zeros((model.topo.nb, 6), dtype)
        R, x, u = self._local(ws, vb)
        lin, quad = self._coefficients(dtype)
        lf = -(lin + quad * jnp.abs(u)) * u
        g, f = spatial.mv(R, lf[:, :3]), spatial.mv(R, lf[:, 3:])
        W = jnp.concatenate([g + spatial.cross(x, f), f], -1)
        return _scatter.segment_sum(W, np.asarray(self.body, np.int64), model.topo.nb)

    def forces(self, model: Model, q: Array, v: Array) -> Array:
        """The generalised force ``(nv,)`` of the medium on ``model`` at ``(q, v)`` (MuJoCo's
        ``qfrc_fluid``): ``J^T`` of each box's wrench."""
        ws = kin.world_state(model, q, centered=True)
        vb, _ = kin.body_velocities(model, ws, v)
        F = tree.backward_accumulate(model.topo, self.wrenches(model, ws, vb))
        return jnp.sum(ws.S * tree.bodies_to_dofs(model.topo, F), -1)

    def inertias(self, model: Model, ws: WorldState, vb: Array, h: ArrayLike) -> Array:
        """Per-body ``h P^T D P`` ``(nb, 6, 6)`` (world axes, world state's origin): ``D`` the
        local force's velocity derivative, negated (diagonal, MuJoCo's ``mjd_inertiaBoxFluid``:
        the viscous coefficients plus twice the quadratic ones times ``|u|``), ``P`` the map from
        the body's spatial velocity to the box's local velocity. Added to the body inertias they
        turn ``M`` into ``M + h J^T D J``, the fluid's share of ``implicitfast``'s
        ``M - h qDeriv``."""
        dtype = ws.p.dtype
        if not self.body:
            return jnp.zeros((model.topo.nb, 6, 6), dtype)
        R, x, u = self._local(ws, vb)
        lin, quad = self._coefficients(dtype)
        D = lin + 2.0 * quad * jnp.abs(u)
        Rt = jnp.swapaxes(R, -1, -2)
        zero = jnp.zeros_like(Rt)
        # u = P vb: w_l = R^T w, v_l = R^T (v_O - [x] w)
        P = jnp.concatenate(
            [
                jnp.concatenate([Rt, zero], -1),
                jnp.concatenate([-Rt @ spatial.skew(x), Rt], -1),
            ],
            -2,
        )
        K = jnp.einsum("kji,kj,kjl->kil", P, D, P)
        K = jnp.asarray(h, dtype) * K
        return _scatter.segment_sum(K, np.asarray(self.body, np.int64), model.topo.nb)

"""Coriolis matrix ``C(q, v)``: the Christoffel-consistent factorisation of the velocity-product
forces, ``C(q, v) v = rnea(q, v, 0) - g(q)`` with ``dM/dt = C + C^T`` (so ``dM/dt - 2 C`` is
skew-symmetric, the passivity property that energy-based and adaptive controllers use).

References: Echeandia and Wensing, "Numerical methods to compute the Coriolis matrix and
Christoffel symbols for rigid-body systems", J. Comput. Nonlinear Dyn. 16(9) 091004, 2021
(the body-level factor and the composite-body recursion for ``C``); Singh, Russell and Wensing
2022, Eq. 28 (the same factor ``B``, which IDSVA in :mod:`jaxdyn.derivatives.idsva` uses);
Pinocchio's ``computeCoriolisMatrix`` returns the same matrix. Featherstone 2008 §2.9 for
``x``, ``x*``.

In world coordinates the kinetic energy is ``1/2 sum_k v_k^T I_k v_k`` with ``v_k = J_k v``
(``J_k``: the world motion subspaces ``oS_c`` of the coordinates supporting body ``k``), so

    ``C = sum_k J_k^T (I_k dJ_k/dt + 1/2 B_k J_k)``,
    ``B_k = (v_k x*) I_k + (I_k v_k) xbar* - I_k (v_k x)``

(``B_k`` twice the factor of Eq. 28; ``B_k + B_k^T = 2 dI_k/dt`` gives ``dM/dt = C + C^T``, and
``B_k v_k = 2 v_k x* I_k v_k`` gives ``C v`` = the velocity-product forces). A coordinate's world
subspace moves with its body: ``d/dt oS_c = v_{body(c)} x oS_c``. With the subtree sums
``IC_j`` and ``BC_j`` of body ``j`` (both linear in the bodies' inertias), for coordinates ``r``,
``c`` whose bodies are in one chain:

* ``body(r)`` ancestor-or-self of ``body(c) = j``: ``C[r, c] = oS_r . (IC_j dS_c + 1/2 BC_j oS_c)``;
* ``body(c)`` a strict ancestor of ``body(r) = i``:
  ``C[r, c] = dS_c . (IC_i oS_r) + oS_c . (1/2 BC_i^T oS_r)``;

zero elsewhere (CRBA's pattern ``topo.dof_ancestor``, as :func:`jaxdyn.algorithms.crba.crba_world`:
two masked sums of outer products). Armature (constant) adds nothing. The matrix is invariant
under a translation of the world origin, so it is computed, as CRBA, at the base's origin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp

from .. import batching, shell, spatial
from .._precision import full_precision
from ..backend import fusion
from ..model import tree
from . import kinematics as kin

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model
    from .kinematics import WorldState


def sym6(M: Array) -> Array:
    """Upper triangle ``(xx, yy, zz, xy, xz, yz)`` of symmetric ``(..., 3, 3)`` matrices."""
    (m00, m01, m02), (_, m11, m12), (_, _, m22) = (
        spatial.unstack(r) for r in spatial.unstack(M, -2)
    )
    return spatial.stack([m00, m11, m22, m01, m02, m12], -1)


def sym_mv(s: Array, x: Array) -> Array:
    """Symmetric matrix (as :func:`sym6`) times vectors ``x (..., 3)``."""
    return spatial.stack(_sym_rows(spatial.unstack(s), spatial.unstack(x)), -1)


def body_coriolis_terms(mass: Array, h: Array, Ibar: Array, v: Array) -> tuple[Array, Array]:
    """Per-body parameters of the body-level Coriolis factor (Singh et al. 2022, Eq. 28, after
    Niemeyer 1990 and Echeandia & Wensing 2021), in a form that is summed over subtrees.

    The algorithm needs (twice) the factor of Eq. 28 for a world-frame inertia ``I`` moving with
    velocity ``v = [w; v_l]``,

        ``B(I, v) = (v x*) I + (I v) xbar* - I (v x)``  (``B v = 2 v x* I v``, ``B + B^T = 2 İ``).

    With ``X = I (v x)`` one has ``(v x*) I = -X^T``, so ``B = -Y + (I v) xbar*`` with the
    symmetric ``Y = X + X^T``. In 3x3 blocks (``W = [w]x``, ``V = [v_l]x``, ``H = [h]x``,
    ``I = [[Ibar, H], [-H, m 1]]``, ``X = [[Ibar W + H V, H W], [-H W + m V, m W]]``)::

        Y = [[Ibar W - W Ibar + H V + V H,   [y]x],
             [-[y]x,                          0  ]],   y = h x w - m v_l

    (``H W - W H = [h x w]x``, ``H V + V H = v_l h^T + h v_l^T - 2 (h.v_l) 1``). ``Y`` and
    ``I v`` are linear in the body's inertia, so the composite ``B^C`` of a subtree is given by
    the subtree sums of ``Y11`` (symmetric: 6 numbers), ``y`` (3) and ``I v`` (6).

    Returns ``(n, 9)``: ``Y11`` as ``(xx, yy, zz, xy, xz, yz)`` and ``y``; and ``I v (n, 6)``.
    """
    w, vl = v[..., :3], v[..., 3:]
    eye = jnp.eye(3, dtype=v.dtype)
    # rows of Ibar W are Ibar_r x w
    IW = spatial.cross(Ibar, w[..., None, :])
    hvl = vl[..., :, None] * h[..., None, :]
    Y11 = (
        IW
        + jnp.swapaxes(IW, -1, -2)
        + hvl
        + jnp.swapaxes(hvl, -1, -2)
        - 2 * jnp.sum(h * vl, -1)[..., None, None] * eye
    )
    m = mass[..., None]
    hw = spatial.cross(h, w)
    y = hw - m * vl
    Iv = jnp.concatenate([spatial.mv(Ibar, w) + spatial.cross(h, vl), m * vl - hw], -1)
    return jnp.concatenate([sym6(Y11), y], -1), Iv


def coriolis_apply(Y11: Array, y: Array, Iv: Array, x: Array) -> tuple[Array, Array]:
    """``(B x, B^T x)`` for the composite factor given by :func:`body_coriolis_terms`' sums:
    ``B x = -Y x + x x* (I v)``, ``B^T x = -Y x - x x* (I v)``."""
    xw, xl = x[..., :3], x[..., 3:]
    Yx = jnp.concatenate([sym_mv(Y11, xw) + spatial.cross(y, xl), -spatial.cross(y, xw)], -1)
    Kx = spatial.force_cross(x, Iv)
    return Kx - Yx, -Yx - Kx


def inertia_apply(m: Array, h: Array, Ibar: Array, x: Array) -> Array:
    """Spatial inertia about the world origin times motion vectors ``x (..., 6)``; ``Ibar``
    is ``(..., 3, 3)`` or its upper triangle ``(..., 6)`` (:func:`sym6`)."""
    w, vl = x[..., :3], x[..., 3:]
    Iw = sym_mv(Ibar, w) if Ibar.shape[-1] == 6 else spatial.mv(Ibar, w)
    return jnp.concatenate([Iw + spatial.cross(h, vl), m[..., None] * vl - spatial.cross(h, w)], -1)


def _inertia_rows(m, h, Ib, xw, xl):
    """Spatial inertia ``[m, h, Ibar]`` (``Ibar`` as the six rows of :func:`sym6`) times a
    motion vector, everything as component rows: ``[Ibar xw + h x xl; m xl - h x xw]``."""
    Iw = _sym_rows(Ib, xw)
    hxl, hxw = spatial.cross_rows(h, xl), spatial.cross_rows(h, xw)
    return [Iw[i] + hxl[i] for i in range(3)] + [m * xl[i] - hxw[i] for i in range(3)]


def _sym_rows(s, x):
    """Symmetric matrix times a vector, both as sequences of components: ``s`` the six
    ``(xx, yy, zz, xy, xz, yz)`` of :func:`sym6`, ``x`` three; returns three."""
    sxx, syy, szz, sxy, sxz, syz = s
    return [
        sxx * x[0] + sxy * x[1] + sxz * x[2],
        sxy * x[0] + syy * x[1] + syz * x[2],
        sxz * x[0] + syz * x[1] + szz * x[2],
    ]


def coriolis_world(model: Model, ws: WorldState, v: Array) -> Array:
    """Coriolis matrix from a world state ``ws`` (:func:`jaxdyn.algorithms.kinematics.world_state`)
    and the velocity ``v (nv,)``: the module docstring's two masked products.

    The per-coordinate factors are computed component-major (one row of ``nv`` numbers per
    spatial component, as :func:`jaxdyn.algorithms.crba.subspace_force_rows`) and stored
    (:func:`jaxdyn.backend.fusion.materialize`) before the products read them: fused into the kernel
    that writes ``C``, XLA recomputed them per entry (talos_full under ``jax.vmap``, B = 1024,
    us per sample: 15.0 with the factors fused, 10.1 stored in the transposed ``(nv, 6)`` form,
    8.7 computed and stored component-major; solo12 3.9 / 3.3 / 2.9).
    """
    t = model.topo
    vel, _ = kin.body_velocities(model, ws, v)
    BY, Iv = body_coriolis_terms(ws.mass, ws.h, ws.Ibar, vel)
    # subtree sums of I (m, h, Ibar) and of B (as Y11, y, I v), one backward pass; then the
    # body quantities of every coordinate as component rows (31, nv)
    packed = jnp.concatenate([ws.mass[:, None], ws.h, sym6(ws.Ibar), BY, Iv], -1)  # (nb, 25)
    comp = jnp.concatenate([tree.backward_accumulate(t, packed), vel], -1)
    d = list(tree.bodies_to_dofs(t, comp.T, axis=-1))
    m, h, Ib, Y11, y = d[0], d[1:4], d[4:10], d[10:16], d[16:19]
    Ivw, Ivl, vw, vl = d[19:22], d[22:25], d[25:28], d[28:31]
    ST = ws.S.T
    Sw, Sl = list(ST[:3]), list(ST[3:])
    # d/dt oS_c = v_body(c) x oS_c
    Sdw = spatial.cross_rows(vw, Sw)
    a, b = spatial.cross_rows(vw, Sl), spatial.cross_rows(vl, Sw)
    Sdl = [a[i] + b[i] for i in range(3)]
    # BC oS = -Y oS + oS x* (I v), BC^T oS = -Y oS - oS x* (I v) (coriolis_apply)
    Yw = _sym_rows(Y11, Sw)
    yl, yw = spatial.cross_rows(y, Sl), spatial.cross_rows(y, Sw)
    Yx = [Yw[i] + yl[i] for i in range(3)] + [-yw[i] for i in range(3)]
    k1, k2, k3 = (
        spatial.cross_rows(Sw, Ivw),
        spatial.cross_rows(Sl, Ivl),
        spatial.cross_rows(Sw, Ivl),
    )
    Kx = [k1[i] + k2[i] for i in range(3)] + k3
    ISd = _inertia_rows(m, h, Ib, Sdw, Sdl)
    G = [ISd[i] + 0.5 * (Kx[i] - Yx[i]) for i in range(6)]  # IC dS + 1/2 BC oS
    F = _inertia_rows(m, h, Ib, Sw, Sl) + [-0.5 * (Yx[i] + Kx[i]) for i in range(6)]
    P = spatial.stack(F + G + Sdw + Sdl + Sw + Sl, 0)  # (30, nv)
    P = fusion.materialize(P, P)[0]
    upper = spatial.outer_sum(P[24:], P[12:18])  # [r, c] = oS_r . G_c
    lower = spatial.outer_sum(P[:12], P[18:])  # [r, c] = F_r . [dS_c; oS_c]
    anc = t.dof_ancestor
    return jnp.where(anc, upper, jnp.where(anc.T, lower, 0))


@shell.public("coriolis_matrix", words=batching.nv2_words)
@full_precision
def coriolis_matrix(model: Model, q: ArrayLike, v: ArrayLike) -> Array:
    """Coriolis matrix ``C(q, v)`` (``nv x nv``): ``C v = rnea(q, v, 0) - g(q)`` (the Coriolis and
    centrifugal forces, :func:`jaxdyn.bias_forces` minus :func:`jaxdyn.gravity_forces`) and
    ``dM/dt = C + C^T`` along the motion (``dM/dt - 2 C`` skew-symmetric). ``C`` is the
    Christoffel-consistent factorisation, Pinocchio's ``computeCoriolisMatrix`` (in jaxdyn's
    coordinate order: :meth:`jaxdyn.interop.pinocchio.Converter.matrix_from_pin`).

    Reference: Echeandia and Wensing 2021 (the composite-body factorisation), with the body
    factor of Singh, Russell and Wensing 2022, Eq. 28; see :mod:`jaxdyn.algorithms.coriolis`.
    """
    fn = "coriolis_matrix"
    v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    model, q, dtype = shell.prepare(model, fn, q, v)
    if model.nb == 0:
        return jnp.zeros((0, 0), dtype)
    return coriolis_world(model, kin.world_state(model, q, centered=True), v.astype(dtype))

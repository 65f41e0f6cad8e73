"""Articulated-body inertias for the Delassus algorithms, stored packed (21 numbers).

Same pass as :func:`jaxdyn.algorithms.aba.articulated_inertias` (Featherstone 2008, eqs.
7.25-7.34, world coordinates, level by level), but every symmetric 6x6 inertia travels as its
upper triangle ``(..., 21)``: the world-frame body inertias are written directly in that form
from ``(m, c, Ic)``, children are summed into parents (by static gathers,
:func:`jaxdyn.model.tree.sum_into_parents_gathered`) and ``Ia = IA - U D^-1 U^T`` is updated
on 21 entries instead of 36. On XLA:CPU the pass is bound by the memory traffic between the
small kernels of each level rather than by arithmetic, so the smaller operands are the lever;
the arithmetic is unchanged. The levels are walked by :func:`jaxdyn.model.tree.backward_pass`
(long serial runs by one ``lax.scan``).

Returns the ``(Us, Dinvs)`` that PV-OSIMr, PV-OSIM and EFPA use (``U = IA S^T`` ``(n, 6, k)``,
``D^-1`` ``(n, k, k)`` per level and joint group), plus ``None`` for the projected inertias,
which the Delassus algorithms do not need.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import joints, spatial
from ..model import tree

_IU, _JU = np.triu_indices(6)
#: ``PACK[i, j]``: position of entry ``(i, j)`` of a symmetric 6x6 in the packed vector
PACK = np.zeros((6, 6), np.int64)
PACK[_IU, _JU] = np.arange(21)
PACK[_JU, _IU] = np.arange(21)


def pack(A):
    """Upper triangle ``(..., 21)`` of symmetric ``(..., 6, 6)`` matrices."""
    return A[..., _IU, _JU]


def unpack(a):
    """Symmetric ``(..., 6, 6)`` from the packed ``(..., 21)``."""
    return a[..., PACK]


def world_inertias_packed(ws):
    """Packed world-origin spatial inertias ``[[Ibar, [h]x], [[h]x^T, m 1]]``, ``(nb, 21)``."""
    m, c, Ic = ws.mass, ws.c, ws.Ic
    x, y, z = spatial.unstack(c)
    mx, my, mz = m * x, m * y, m * z
    xx, yy, zz, xy, xz, yz = mx * x, my * y, mz * z, mx * y, mx * z, my * z
    o = jnp.zeros_like(m)
    e = {}
    e[0, 0], e[1, 1], e[2, 2] = Ic[:, 0, 0] + yy + zz, Ic[:, 1, 1] + xx + zz, Ic[:, 2, 2] + xx + yy
    e[0, 1], e[0, 2], e[1, 2] = Ic[:, 0, 1] - xy, Ic[:, 0, 2] - xz, Ic[:, 1, 2] - yz
    # [h]x = [[0, -hz, hy], [hz, 0, -hx], [-hy, hx, 0]] in the top-right block
    e[0, 3], e[0, 4], e[0, 5] = o, -mz, my
    e[1, 3], e[1, 4], e[1, 5] = mz, o, -mx
    e[2, 3], e[2, 4], e[2, 5] = -my, mx, o
    e[3, 3], e[4, 4], e[5, 5] = m, m, m
    e[3, 4], e[3, 5], e[4, 5] = o, o, o
    return spatial.stack([e[int(i), int(j)] for i, j in zip(_IU, _JU)], -1)


def articulated_inertias_packed(model, S, I21):
    """Backward articulated-inertia pass on packed inertias; returns ``(Us, Dinvs, None)``.

    ``S (nv, 6)`` world motion subspaces, ``I21 (nb, 21)`` from :func:`world_inertias_packed`.
    """

    arm = model.armature

    def step(lvl, child, below, inp):
        IA, Sl, arml = inp
        if below is not None:
            IA = IA + tree.sum_into_parents_gathered(below, child, lvl.n)
        b0, v0 = lvl.b0, tree.level_v0(lvl)
        Ug, Dg, Ia = [], [], []
        for g in lvl.groups:
            k = joints.NV[g.kind]
            Sg = Sl[g.v0 - v0 : g.v1 - v0].reshape(g.n, k, 6)
            IAg = IA[g.b0 - b0 : g.b1 - b0]
            ag = None if arml is None else arml[g.v0 - v0 : g.v1 - v0].reshape(g.n, k)
            if k == 1:
                s = Sg[:, 0]
                # U = IA s, written on the packed entries (36 products, one fusion)
                U1 = spatial.stack(
                    [sum(IAg[:, PACK[i, j]] * s[:, j] for j in range(6)) for i in range(6)], -1
                )
                d = jnp.sum(s * U1, -1)
                dinv = 1 / (d if ag is None else d + ag[:, 0])
                V = U1 * dinv[:, None]
                Ia.append(IAg - U1[:, _IU] * V[:, _JU])
                U, Dinv = U1[..., None], dinv[:, None, None]
            else:
                IAf = unpack(IAg)
                U = spatial.mm(IAf, jnp.swapaxes(Sg, -1, -2))  # (n, 6, k)
                D = spatial.mm(Sg, U)
                if ag is not None:  # armature on the joint's coordinates
                    D = D + ag[:, :, None] * jnp.eye(k, dtype=D.dtype)
                Dinv = spatial.inv_spd(D)
                if g.kind == joints.FREE and ag is None:  # nothing crosses (exact zero)
                    Ia.append(jnp.zeros_like(IAg))
                else:
                    Ia.append(pack(IAf - spatial.mm(spatial.mm(U, Dinv), jnp.swapaxes(U, -1, -2))))
            Ug.append(U)
            Dg.append(Dinv)
        return (Ia[0] if len(Ia) == 1 else jnp.concatenate(Ia, 0)), (tuple(Ug), tuple(Dg))

    out = tree.backward_pass(model.topo, step, (("body", I21), ("dof", S), ("dof", arm)))[1]
    return out.field(0), out.field(1), None

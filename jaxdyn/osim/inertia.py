"""Articulated-body inertias for the Delassus algorithms, stored packed (21 numbers).

Same pass as :func:`jaxdyn.algorithms.aba.articulated_inertias` (Featherstone 2008, eqs.
7.25-7.34, world coordinates, level by level), but every symmetric 6x6 inertia travels as its
upper triangle ``(..., 21)``: the world-frame body inertias are written directly in that form
from ``(m, c, Ic)``, children are summed into parents (by static gathers,
:func:`jaxdyn.model.tree.sum_into_parents_gathered`) and ``Ia = IA - U D^-1 U^T`` is updated
on 21 entries instead of 36 (the pass is :func:`jaxdyn.algorithms.aba.articulated_pass`, its
step :func:`jaxdyn.algorithms.aba.articulated_body_step`, on the packed form). On XLA:CPU the
pass is bound by the memory traffic between the small kernels of each level rather than by
arithmetic, so the smaller operands are the lever; the arithmetic is unchanged. The levels are
walked by :func:`jaxdyn.model.tree.backward_pass` (long serial runs by one ``lax.scan``).

Returns the ``(Us, Dinvs)`` that PV-OSIMr, PV-OSIM and EFPA use (``U = IA S^T`` ``(n, 6, k)``,
``D^-1`` ``(n, k, k)`` per level and joint group), plus ``None`` for the projected inertias,
which the Delassus algorithms do not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp

from .. import spatial
from ..algorithms.aba import articulated_pass

if TYPE_CHECKING:
    from jax import Array

    from ..algorithms.aba import Inertias
    from ..algorithms.kinematics import WorldState
    from ..model.model import Model

_IU, _JU = spatial.TRIU_SYMMETRIC
#: ``PACK[i, j]``: position of entry ``(i, j)`` of a symmetric 6x6 in the packed vector
PACK = spatial.PACK_SYMMETRIC
pack = spatial.pack_symmetric
unpack = spatial.unpack_symmetric


def world_inertias_packed(ws: WorldState) -> Array:
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


def articulated_inertias_packed(model: Model, S: Array, I21: Array) -> Inertias:
    """Backward articulated-inertia pass on packed inertias; returns ``(Us, Dinvs, None)``.

    ``S (nv, 6)`` world motion subspaces, ``I21 (nb, 21)`` from :func:`world_inertias_packed`:
    :func:`jaxdyn.algorithms.aba.articulated_pass` on the packed form (its step,
    :func:`jaxdyn.algorithms.aba.articulated_body_step`, updates ``Ia`` on 21 entries).
    """
    return articulated_pass(model, S, I21, return_ia=False)

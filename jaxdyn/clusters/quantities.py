"""Per-cluster spatial quantities in local (body) frames, for inspection and cross-checks.

Reference: Chignoli et al., T-RO 2024, §V: cluster transform ``X_k`` (eq. (20)), remap
``X_R`` (eq. (22)) and cluster motion subspace ``S_k = X_R blkdiag(S_b) G`` (eq. (23)).
The algorithms work on the world-coordinate forms; this module converts them with the body
placements: ``^{b}X_{o(b)} = ^{b}X_0 \\, ^{0}X_{o(b)}``, ``X_R(i, j) = ^{b_i}X_{b_j}`` for
``b_j`` an in-cluster ancestor-or-self of ``b_i``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np

from .. import spatial
from ..algorithms import kinematics as kin
from .model import ClusterModel
from .state import all_group_states, assemble_spanning, prepare

if TYPE_CHECKING:
    from jax.typing import ArrayLike


def _X_from_world(R, p):
    """Motion transform ``^{b}X_0`` (world-origin coordinates -> body coordinates)."""
    Rt = jnp.swapaxes(R, -1, -2)
    Z = jnp.zeros_like(R)
    top = jnp.concatenate([Rt, Z], -1)
    bot = jnp.concatenate([-spatial.mm(Rt, spatial.skew(p)), Rt], -1)
    return jnp.concatenate([top, bot], -2)


def _X_to_world(R, p):
    """``^{0}X_b``."""
    Z = jnp.zeros_like(R)
    return jnp.concatenate(
        [jnp.concatenate([R, Z], -1), jnp.concatenate([spatial.mm(spatial.skew(p), R), R], -1)], -2
    )


def cluster_quantities(
    model: ClusterModel, q: ArrayLike, v: ArrayLike | None = None
) -> list[dict[str, Any]]:
    """Local-frame cluster quantities of every cluster, in cluster order.

    Returns a list of dicts with ``bodies`` (spanning-tree body indices), ``output_bodies``
    (``o(b)`` per body, ``-1`` = world), ``X`` (``6n x 6 n_out``, columns = the distinct output
    bodies in ``output_bodies_unique`` order), ``X_R`` (``6n x 6n``), ``S_blk``
    (``blkdiag(S_b)``, ``6n x n_span``), ``G`` (``n_span x n_y``), ``S`` (``6n x n_y``), and,
    with ``v``, ``g`` (``n_span``), ``qdot`` and ``v_J = X_R blkdiag(S_b) qdot``.
    """
    fn = "cluster_quantities"
    model, q, v, _, dt = prepare(model, fn, q, v)
    t = model.topo
    tree = model.tree
    gss = all_group_states(model, q, v, check=fn)
    qs = assemble_spanning(model, gss, "qs")
    R, p = kin.body_placements(tree, qs)
    bX0 = _X_from_world(R, p)
    oXb = _X_to_world(R, p)
    parent = np.asarray(tree.topo.parent)
    out = []
    for gi, g in enumerate(t.groups):
        s = gss[gi]
        for c in range(g.nc):
            bodies = [int(b) for b in g.body[c]]
            n = len(bodies)
            obs = []
            for b in bodies:
                o = int(parent[b])
                while o in bodies:
                    o = int(parent[o])
                obs.append(o)
            uniq = sorted(set(obs))
            X = jnp.zeros((6 * n, 6 * len(uniq)), dt)
            XR = jnp.zeros((6 * n, 6 * n), dt)
            for i, b in enumerate(bodies):
                o = obs[i]
                blk = bX0[b] if o < 0 else bX0[b] @ oXb[o]
                j = uniq.index(o)
                X = X.at[6 * i : 6 * i + 6, 6 * j : 6 * j + 6].set(blk)
                for jj, bj in enumerate(bodies):
                    if g.Ab[c, i, jj]:
                        XR = XR.at[6 * i : 6 * i + 6, 6 * jj : 6 * jj + 6].set(bX0[b] @ oXb[bj])
            dofs = g.dof[c]
            Sblk = jnp.zeros((6 * n, g.nvs), dt)
            for d in range(g.nvs):
                i = int(np.nonzero(g.B[c, :, d])[0][0])
                Sblk = Sblk.at[6 * i : 6 * i + 6, d].set(tree.dof_axis[dofs[d]])
            G = jnp.eye(g.nvs, dtype=dt) if s.G is None else s.G[c]
            d = dict(
                bodies=bodies,
                output_bodies=obs,
                output_bodies_unique=uniq,
                X=X,
                X_R=XR,
                S_blk=Sblk,
                G=G,
                S=XR @ Sblk @ G,
                kind=g.type,
                name=t.cluster_names[g.cl0 + c],
            )
            if v is not None:
                assert s.qd is not None  # the group states hold qd with v
                qd = s.qd[c]
                d.update(
                    qdot=qd, g=jnp.zeros(g.nvs, dt) if s.g is None else s.g[c], v_J=XR @ Sblk @ qd
                )
            out.append(d)
    return out

"""Weighted least squares / MAP estimate of ``d`` from ``D(q, v) d = r`` plus measurement rows.

With more rows than unknowns (paper §VI, eq. 17: dynamics stacked with sensors), the
estimate minimises

    ||D d - r||^2_{W_D} + ||D_Y d - (y - e)||^2_{W_Y} + ||d||^2_{P}

(``W = Σ^-1`` from the standard deviations; ``P`` an optional Gaussian prior ``d ~ N(0,
σ_d^2)``): the maximum a posteriori estimate of BERDY (Latella, Kuppuswamy, Nori et al.,
Sensors 2016), the prior-free weighted least squares when ``P = 0``. For consistent,
noise-free data of a well-posed system the estimate is the exact solution whatever the
weights.

The normal matrix ``H = D^T W D + D_Y^T W_Y D_Y + P`` keeps the tree structure: a body's rows
touch its own variables, the parent's ``a_λ`` and the children's ``f_j``. It is factorised by
a multifrontal Cholesky with the tree ordering: leaves to root, each body's front
``[children's f_j, a_i, tau_i, f^x_i, qdd_i | f_i, a_λ]`` (the rows of the body plus the
children's updates) is reduced to its interface ``[f_i, a_λ]``, whose 12 x 12 Schur complement
goes to the parent; then a back-substitution root to leaves. Dense fronts, static structure,
no data-dependent control flow.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import jax
import jax.core
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from .. import spatial
from .._precision import full_precision
from ..errors import JaxdynWarning
from ..model import tree
from . import assembly as asm
from . import walk
from .factor import Solution, _block, _dof_index, eager_checks, finish, prepare
from .structure import FX, QDD, TAU, A, F, var_size

if TYPE_CHECKING:
    from jax.typing import ArrayLike

    from ..model.model import Model
    from .assembly import Values
    from .structure import NoriSystem

#: default standard deviation of the Newton-Euler rows and of the knowns (exact up to it)
DYNAMICS_STD = 1e-3
#: default standard deviation of a sensor without ``std``
SENSOR_STD = 1.0
#: :func:`estimate` warns where the largest standard deviation exceeds the smallest by more
#: than this factor: the weights (their squared inverses) then span more than ``1e10``, and
#: the normal equations, which square the rows' condition number on top of it, are
#: numerically singular in float64 (solo12 with contacts, consistent noise-free data:
#: ``dynamics_std = 1e-3`` against sensors of ``std = 1`` is exact to ~1e-10; ``1e-7`` is off
#: by 10 % and ``1e-9`` gives NaN)
STD_SPREAD_WARN = 1e5

_OWN_E = (A, TAU, FX, QDD)


def _layout(n, kmax, root):
    """Front column offsets: children's ``f`` slots, own ``a, tau, fx, qdd``, then ``f`` and
    (not at a root) the parent's ``a``."""
    off = {}
    c = 6 * kmax
    for var in _OWN_E + (F,):
        off[var] = c
        c += var_size(var, n)
    if not root:
        off["par"] = c
        c += 6
    return off, c


def front_sizes(system: NoriSystem) -> list[int]:
    """Front size of every body (jaxdyn order)."""
    t = system.topo
    out = []
    for b in range(system.nb):
        n = int(t.nv_j[b])
        out.append(_layout(n, len(system.children[b]), t.parent[b] < 0)[1])
    return out


def _stds(system, dtype, dynamics_std, known_std, sensor_std):
    """Standard deviation of every spec row, flat like :func:`assembly.spec_rhs`."""
    parts = []
    for i, (s, shape) in enumerate(zip(system.specs, system.yshapes)):
        size = int(np.prod(shape))
        default = known_std if i < system.n_known else sensor_std
        std = default if s.std is None else s.std
        a = (
            np.broadcast_to(np.asarray(std, np.float64), (size,))
            if np.ndim(std) == 0
            else (np.asarray(std, np.float64))
        )
        if a.shape != (size,):
            raise ValueError(
                f"nori.estimate: std of {s.label} has {a.size} entries, expected 1 or {size}"
            )
        parts.append(a)
    return np.concatenate(parts) if parts else np.zeros(0)


def _slots(lvl, child, gslice):
    """Children of each body of a group: level-local indices in ``child`` (padded with
    ``child.n``), ``(G, kmax)``."""
    G = gslice.stop - gslice.start
    if child is None:
        return np.zeros((G, 0), np.int64)
    kids = [[] for _ in range(G)]
    for j, p in enumerate(child.parent_local):
        if gslice.start <= p < gslice.stop:
            kids[p - gslice.start].append(j)
    kmax = max((len(k) for k in kids), default=0)
    out = np.full((G, kmax), child.n, np.int64)
    for i, k in enumerate(kids):
        out[i, : len(k)] = k
    return out


def check_weights(fn: str, dynamics_std: ArrayLike, stds: np.ndarray) -> None:
    """Warn (:class:`jaxdyn.JaxdynWarning`) where the standard deviations span more than
    :data:`STD_SPREAD_WARN`."""
    if isinstance(dynamics_std, jax.core.Tracer):  # a traced std: the sensors' alone
        dynamics_std = stds[:1] if stds.size else np.ones(1)
    all_std = np.concatenate([np.atleast_1d(np.asarray(dynamics_std, np.float64)), stds])
    if not np.all(all_std > 0) or not np.all(np.isfinite(all_std)):
        raise ValueError(f"{fn}: standard deviations must be positive and finite")
    spread = float(all_std.max() / all_std.min())
    if spread > STD_SPREAD_WARN:
        warnings.warn(
            f"{fn}: the standard deviations span a factor {spread:.1e} (smallest "
            f"{all_std.min():.1e}, largest {all_std.max():.1e}): the weighted normal "
            f"equations are numerically singular (their condition number grows with the "
            f"square of that factor) and the estimate may be inaccurate or NaN without "
            f"further notice; keep the factor below {STD_SPREAD_WARN:.0e} (e.g. a larger "
            f"dynamics_std: exact, consistent data are fitted exactly whatever the weights)",
            JaxdynWarning,
            stacklevel=4,
        )


@eager_checks
@full_precision
def estimate(
    system: NoriSystem,
    model: Model,
    q: ArrayLike,
    v: ArrayLike,
    values: Values,
    *,
    dynamics_std: float = DYNAMICS_STD,
    known_std: float = DYNAMICS_STD,
    sensor_std: float = SENSOR_STD,
    prior_std: float | None = None,
) -> Solution:
    """MAP / weighted least-squares estimate of all dynamic variables (module docstring).

    **Arguments:** ``system`` from :func:`jaxdyn.nori.build`; ``q (nq,)``, ``v (nv,)``;
    ``values`` of the knowns and sensors (as :func:`jaxdyn.nori.solve`);
    ``dynamics_std`` of the Newton-Euler rows, ``known_std`` of the knowns and ``sensor_std``
    of the sensors without their own ``std``; ``prior_std``: ``None`` (no prior: the system
    must be well-posed) or the standard deviation of a zero-mean prior on every variable.

    **Returns:** :class:`jaxdyn.nori.Solution`. Where the standard deviations span more than
    :data:`STD_SPREAD_WARN` (the weighted normal equations are then numerically singular) a
    :class:`jaxdyn.JaxdynWarning`. Where the system is singular at this state (not among
    :func:`jaxdyn.nori.build`'s ``check_states``), with value checks on a
    :class:`jaxdyn.CheckError` saying so, else all NaN (as :func:`jaxdyn.nori.solve`).
    """
    fn = "nori.estimate"
    model, Q, ry, dtype = prepare(fn, system, model, q, v, values)
    stds = _stds(system, dtype, dynamics_std, known_std, sensor_std)
    check_weights(fn, dynamics_std, stds)
    t = system.topo
    nb = system.nb
    parent = np.asarray(t.parent)
    wy = jnp.asarray(1.0 / stds**2, dtype)
    w_dyn = jnp.asarray(1.0 / dynamics_std**2, dtype)
    prior = None if prior_std is None else jnp.asarray(1.0 / prior_std**2, dtype)
    Xa0 = Q.X @ Q.a0
    S_all = model.dof_axis
    arm = getattr(model, "armature", None)
    X_ext = jnp.concatenate([Q.X, jnp.zeros((1, 6, 6), dtype)], 0)
    coefs = {}
    for b in range(nb):
        for k, rg in enumerate(system.rows[b]):
            if rg.spec >= 0 and any(c not in ("I", "-I") for _, c in rg.terms):
                coefs[b, k] = asm.spec_coefficient(model, rg, dtype)

    def gather(sig, idx):
        flat = np.asarray(idx).reshape(-1)
        rows_b = system.rows[int(flat[0])]
        didx = _dof_index(system, idx)
        tk = walk.take
        g = {
            "X": tk(Q.X, idx),
            "Ib": tk(Q.Ib, idx),
            "S": jnp.swapaxes(tk(S_all, didx), -1, -2),
            "c": tk(Q.c, idx),
            "nu": tk(Q.nu, idx),
            "Xa0": tk(Xa0, idx),
        }
        if arm is not None:
            g["arm"] = tk(arm, didx)
        kids = [list(system.children[int(b)]) for b in flat]
        kmax = max((len(k) for k in kids), default=0)
        kid_idx = np.full((len(flat), kmax), nb, np.int64)
        for i, k in enumerate(kids):
            kid_idx[i, : len(k)] = sorted(k, key=lambda c: system.rank[c])
        g["Xkids"] = X_ext[kid_idx.reshape(np.shape(idx) + (kmax,))]
        for k, rg in enumerate(rows_b):
            if rg.spec < 0:
                continue
            ridx = np.stack([asm.row_index(system, int(b), k) for b in flat])
            ridx = ridx.reshape(np.shape(idx) + (rg.m,))
            g[f"y{k}"] = walk.take(ry, ridx)
            g[f"w{k}"] = walk.take(wy, ridx)
            if any(c not in ("I", "-I") for _, c in rg.terms):
                cs = spatial.stack([coefs[int(b), k] for b in flat])
                g[f"C{k}"] = cs.reshape(np.shape(idx) + cs.shape[1:])
        return g

    def rep(sig):
        return system.sig_rep[sig]

    # ------------------------------------------------------------ inward: fronts
    def in_step(lvl, child, carry, gins, _):
        outs, S_out, s_out = [], [], []
        for sl, (sig, _, _), g in zip(walk.level_slices(lvl), lvl.groups, gins):
            b0 = rep(sig)
            n = int(t.nv_j[b0])
            root = parent[b0] < 0
            slots = _slots(lvl, child, sl)
            kmax = slots.shape[1]
            off, fs = _layout(n, kmax, root)
            G = g["X"].shape[:-2]
            C, r, w = _front_rows(system, b0, n, kmax, off, fs, root, g, dtype, w_dyn)
            WC = w[..., :, None] * C
            H = jnp.einsum("...mi,...mj->...ij", C, WC)
            gv = jnp.einsum("...mi,...m->...i", WC, r)
            if prior is not None:
                own = np.arange(6 * kmax, 6 * kmax + 18 + 2 * n)
                H = H.at[..., own, own].add(prior)
            # children's updates on (f_j, a_i): the region [slots, a] of the front, by a
            # constant selection E_j (f_j, a) -> region; padded slots get a unit diagonal
            if kmax:
                Sc, sc = carry
                Sx = walk.take(jnp.concatenate([Sc, jnp.zeros((1, 12, 12), dtype)], 0), slots)
                sx = walk.take(jnp.concatenate([sc, jnp.zeros((1, 12), dtype)], 0), slots)
                nr = 6 * kmax + 6
                E = np.zeros((kmax, nr, 12))
                for j in range(kmax):
                    E[j, 6 * j : 6 * j + 6, :6] = np.eye(6)
                    E[j, 6 * kmax :, 6:] = np.eye(6)
                E = jnp.asarray(E, dtype)
                Z = jnp.einsum("jri,...jik,jsk->...rs", E, Sx, E)
                z = jnp.einsum("jri,...ji->...r", E, sx)
                pad = np.repeat((slots == child.n).astype(np.float64), 6, axis=-1)
                if pad.any():
                    Z = Z + jnp.asarray(
                        np.pad(pad, [(0, 0), (0, 6)])[..., None] * np.eye(nr), dtype
                    )
                H = jax.lax.dynamic_update_slice(
                    H, H[..., :nr, :nr] + Z, (0,) * (H.ndim - 2) + (0, 0)
                )
                gv = jax.lax.dynamic_update_slice(gv, gv[..., :nr] + z, (0,) * (gv.ndim - 1) + (0,))
            ne = fs if root else fs - 12
            HEE = H[..., :ne, :ne]
            L = jnp.linalg.cholesky(HEE)
            if root:
                xE = jsl.cho_solve((L, True), gv[..., :ne, None])[..., 0]
                outs.append({"xE": xE})
                S_out.append(jnp.zeros(G + (12, 12), dtype))
                s_out.append(jnp.zeros(G + (12,), dtype))
            else:
                HEK = H[..., :ne, ne:]
                Y = jsl.cho_solve((L, True), jnp.concatenate([HEK, gv[..., :ne, None]], -1))
                Y1, Y2 = Y[..., :12], Y[..., 12]
                S_out.append(H[..., ne:, ne:] - jnp.einsum("...ki,...kj->...ij", HEK, Y1))
                s_out.append(gv[..., ne:] - jnp.einsum("...ki,...k->...i", HEK, Y2))
                outs.append({"Y1": Y1, "Y2": Y2})
        cat = lambda xs: xs[0] if len(xs) == 1 else jnp.concatenate(xs, 0)
        return (cat(S_out), cat(s_out)), outs

    _, ins = walk.inward(system, in_step, gather)

    # ------------------------------------------------------------ outward: back-substitution
    def out_step(lvl, carry, gins, lin):
        res, a_l, fk_l = [], [], []
        if carry is not None:
            a_prev, fk_prev = carry
            rank = _sibling_rank(lvl)
            f_from_parent = fk_prev[lvl.parent_local, rank]
            a_par = tree.gather_parent(a_prev, lvl, None)
        for sl, (sig, _, _), loc in zip(walk.level_slices(lvl), lvl.groups, lin):
            b0 = rep(sig)
            n = int(t.nv_j[b0])
            root = parent[b0] < 0
            if root:
                xE = loc["xE"]
                kmax = (xE.shape[-1] - 18 - 2 * n) // 6
                off, _ = _layout(n, kmax, True)
                f_own = xE[..., off[F] : off[F] + 6]
            else:
                kmax = (loc["Y2"].shape[-1] - 12 - 2 * n) // 6
                off, _ = _layout(n, kmax, False)
                xK = jnp.concatenate([f_from_parent[sl], a_par[sl]], -1)
                xE = loc["Y2"] - jnp.einsum("...ij,...j->...i", loc["Y1"], xK)
                f_own = f_from_parent[sl]
            x = {F: f_own}
            for var in _OWN_E:
                x[var] = xE[..., off[var] : off[var] + var_size(var, n)]
            fk_l.append(xE[..., : 6 * kmax].reshape(xE.shape[:-1] + (kmax, 6)))
            res.append(x)
            a_l.append(x[A])
        kl = max(f.shape[-2] for f in fk_l)
        fk_l = [
            f
            if f.shape[-2] == kl
            else jnp.concatenate([f, jnp.zeros(f.shape[:-2] + (kl - f.shape[-2], 6), dtype)], -2)
            for f in fk_l
        ]
        cat = lambda xs: xs[0] if len(xs) == 1 else jnp.concatenate(xs, 0)
        return (cat(a_l), cat(fk_l)), res

    _, outs = walk.outward(system, out_step, gather, level_in=ins, last_single=True)
    a = walk.collect(system, outs, lambda x: x[A])
    f = walk.collect(system, outs, lambda x: x[F])
    fx = walk.collect(system, outs, lambda x: x[FX])
    tau = walk.collect(system, outs, lambda x: x[TAU], per_dof=True)
    qdd = walk.collect(system, outs, lambda x: x[QDD], per_dof=True)
    return finish(fn, Solution(a, f, tau, fx, qdd))


def _front_rows(system, b0, n, kmax, off, fs, root, g, dtype, w_dyn):
    """The rows of a group's bodies over their front: ``C (G, M, fs)``, ``r (G, M)``,
    ``w (G, M)`` (weights); identity coefficients from a constant, dense ones written in."""
    rows_b = system.rows[b0]
    M = sum(rg.m for rg in rows_b)
    G = g["X"].shape[:-2]
    C0 = np.zeros((M, fs))
    dense = []
    rs, ws = [], []
    r0 = 0
    for k, rg in enumerate(rows_b):
        for var, coef in rg.terms:
            c0, size = off[var], var_size(var, n)
            if coef in ("I", "-I"):
                C0[r0 : r0 + rg.m, c0 : c0 + size] = np.eye(rg.m, size) * (
                    1.0 if coef == "I" else -1.0
                )
            else:
                dense.append((r0, c0, _block(g, k, rg, var, coef, n, None).val))
        if rg.kind == "Ra":
            if not root:
                dense.append((r0, off["par"], g["X"]))
            r = -g["c"] - (g["Xa0"] if root else 0.0)
            w = jnp.broadcast_to(w_dyn, G + (6,))
        elif rg.kind == "Rf":
            for j in range(kmax):
                dense.append((r0, 6 * j, jnp.swapaxes(g["Xkids"][..., j, :, :], -1, -2)))
            r = -g["nu"]
            w = jnp.broadcast_to(w_dyn, G + (6,))
        elif rg.kind == "Rt":
            r = jnp.zeros(G + (rg.m,), dtype)
            w = jnp.broadcast_to(w_dyn, G + (rg.m,))
        else:
            r, w = g[f"y{k}"], g[f"w{k}"]
        rs.append(r)
        ws.append(w)
        r0 += rg.m
    C = jnp.broadcast_to(jnp.asarray(C0, dtype), G + (M, fs))
    for a, b, val in dense:
        val = jnp.broadcast_to(val, G + val.shape[-2:])
        C = jax.lax.dynamic_update_slice(C, val, (0,) * len(G) + (a, b))
    return C, jnp.concatenate(rs, -1), jnp.concatenate(ws, -1)


def _sibling_rank(lvl):
    """Position of each body among its parent's children (children in level order)."""
    seen = {}
    out = np.zeros(lvl.n, np.int64)
    for j, p in enumerate(lvl.parent_local):
        out[j] = seen.get(int(p), 0)
        seen[int(p)] = out[j] + 1
    return out

"""Numeric factorisation and solve of a square ``D(q, v) d = r`` in the tree ordering.

Paper §IV-D / §V-D: the permutations are fixed offline on the worst-case pattern and the run
time only does the numeric elimination. Here the static ordering is the tree's
(:mod:`jaxdyn.nori.structure`):

1. forward substitution of the peeled bodies' ``Ra`` rows, root to leaves (Property 1);
2. leaves to root, each body's remaining rows factorised by a static block LU
   (:func:`jaxdyn.nori.blocks.factor`: identity pivots, then one dense core), which gives
   the body's ``f_i`` as an affine function ``x0 - K a_λ`` of the parent's acceleration; the
   parent's ``Rf`` receives ``X_j^T f_j`` -- for forward dynamics these updates are the
   articulated-body inertias and bias forces of eq. (13), as Property 2 states;
3. root to leaves, back-substitution of each body's pivot rows in reverse order
   (:func:`jaxdyn.nori.blocks.back_substitute`; for forward dynamics ``qdd_i`` from the core,
   then ``a_i = X_i a_λ + S_i qdd_i + c_i`` and ``f_i``, eq. 14).

Dense blocks, no pivoting, no data-dependent control flow; ``jit``, ``vmap`` and ``grad`` go
through.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple, ParamSpec, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from .. import eager, shell, spatial, value_checks
from .._precision import full_precision
from ..model import tree
from . import assembly as asm
from . import blocks as B
from . import walk
from .structure import FX, QDD, TAU, A, F, var_size

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..model.model import Model
    from .assembly import Values
    from .structure import NoriSystem


class Solution(NamedTuple):
    """All dynamic variables (paper §III-A), body coordinates, jaxdyn order:
    ``a (nb, 6)``, ``f (nb, 6)`` (wrench from the parent), ``tau (nv,)``, ``fx (nb, 6)``
    (external wrench at the body's origin), ``qdd (nv,)``."""

    a: jax.Array
    f: jax.Array
    tau: jax.Array
    fx: jax.Array
    qdd: jax.Array


def prepare(
    fn: str, system: NoriSystem, model: Model, q: ArrayLike, v: ArrayLike, values: Values
) -> tuple[Model, asm.Quantities, Array, DTypeLike]:
    if model.topo != system.topo:
        raise ValueError(f"{fn}: the system was built for another model ({system.topo})")
    if (getattr(model, "armature", None) is not None) != system.armature:
        raise ValueError(
            f"{fn}: the model's armature (None or not) differs from the model the system was "
            f"built for; rebuild it"
        )
    q = shell.as_array(fn, "q", q, (("nq", model.nq),), model)
    v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    arrs = asm.check_values(fn, system, values)
    dtype = shell.common_dtype(q, v, *arrs)
    qn = shell.check_quaternions(fn, model, q.astype(dtype))
    arrs = asm.nan_check(fn, [y.astype(dtype) for y in arrs], system.specs)
    model = model.astype(dtype)
    Q = asm.quantities(model, qn, v.astype(dtype))
    ry = asm.spec_rhs(system, model, Q, arrs, dtype)
    return model, Q, ry, dtype


def _dof_index(system, idx):
    t = system.topo
    n = int(t.nv_j[int(np.asarray(idx).reshape(-1)[0])])
    return np.asarray(t.v_start)[idx][..., None] + np.arange(n)


P = ParamSpec("P")
R = TypeVar("R")


def eager_checks(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorator: called eagerly, ``fn``'s failed value checks raise
    :class:`jaxdyn.CheckError` with the check's message (as jaxdyn's other public functions),
    not XLA's ``JaxRuntimeError``; under a trace it runs as is."""
    return functools.wraps(fn)(eager.dispatch(fn, compile_eagerly=False))


def singular_message(fn: str) -> str:
    extra = (
        ", or the standard deviations' weights make the normal equations numerically singular"
        if fn == "nori.estimate"
        else ""
    )
    return (
        f"{fn}: the system is singular at this state (q, v){extra}: a pivot of its "
        f"factorisation is zero or the solution is not finite, so the dynamic variables are "
        f"not determined (build checks well-posedness only at its check_states); with value "
        f"checks off the whole solution is NaN"
    )


def finish(fn: str, sol: Iterable[Array], check: bool = True) -> Solution:
    """The whole solution NaN where any of it is not finite (a singular system at this state:
    the inputs are finite, checked), as :func:`jaxdyn.aba` on a singular mass matrix; with
    ``check`` and value checks on, a value check naming the cause instead."""
    leaves = jax.tree_util.tree_leaves(sol)
    bad = ~jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))
    if check and value_checks.enabled():
        bad = value_checks.error_if(bad, bad, singular_message(fn))
    return Solution(*(jnp.where(bad, jnp.nan, x) for x in sol))


@eager_checks
@full_precision
def solve(system: NoriSystem, model: Model, q: ArrayLike, v: ArrayLike, values: Values) -> Solution:
    """Solve the square system ``D(q, v) d = r`` of ``system`` by the tree LU.

    **Arguments:** ``system`` from :func:`jaxdyn.nori.build` (``system.square``);
    ``q (nq,)``, ``v (nv,)``; ``values``: the values ``y`` of the knowns and sensors, a
    sequence aligned with ``system.specs`` (or a dict keyed by spec or label).

    **Returns:** :class:`Solution`. Where the system is singular at this state (e.g. a
    moving subtree without mass in forward dynamics, or a pose at which sensors lose a
    quantity that :func:`jaxdyn.nori.build` checked only at its ``check_states``): with value
    checks on (:func:`jaxdyn.set_value_checks`) a :class:`jaxdyn.CheckError` saying so
    (under ``jax.jit`` where the result is used), else all NaN.
    """
    return _solve(system, model, q, v, values)


def _solve(system, model, q, v, values, check=True):
    fn = "nori.solve"
    if not system.square:
        raise ValueError(
            f"{fn}: {system.name} is not solvable by the tree LU: {system.square_reason}"
        )
    model, Q, ry, dtype = prepare(fn, system, model, q, v, values)
    t = system.topo
    nb = system.nb

    # (1) peeled bodies: a_i by forward substitution
    peeled_any = bool(np.any(system.peeled))
    if peeled_any:
        idx = []
        for b in range(nb):
            if system.peeled[b]:
                idx.append(asm.row_index(system, b, int(system.peel_row[b])))
            else:
                idx.append(np.full(int(t.nv_j[b]), -1))
        idx = np.concatenate(idx) if idx else np.zeros(0, np.int64)
        ext = jnp.concatenate([ry, jnp.zeros((1,), dtype)])
        qdd_peel = ext[idx]
        a_peel = asm.peeled_accelerations(system, model, Q, qdd_peel)
    else:
        qdd_peel = jnp.zeros((t.nv,), dtype)
        a_peel = jnp.zeros((nb, 6), dtype)
    parent = np.asarray(t.parent)
    Xa0 = Q.X @ Q.a0  # (nb, 6)
    S_all = model.dof_axis
    arm = getattr(model, "armature", None)

    # spec coefficients, per (body, row group)
    coefs = {}
    for b in range(nb):
        for k, rg in enumerate(system.rows[b]):
            if rg.spec >= 0 and any(c not in ("I", "-I") for _, c in rg.terms):
                coefs[b, k] = asm.spec_coefficient(model, rg, dtype)

    def gather(sig, idx):
        key = system.sig_info[sig]
        kind, n, _, peeled, peel_row, pstat = key
        b0 = int(np.asarray(idx).reshape(-1)[0])
        rows_b = system.rows[b0]
        didx = _dof_index(system, idx)
        tk = walk.take
        g = {
            "X": tk(Q.X, idx),
            "Ib": tk(Q.Ib, idx),
            "S": jnp.swapaxes(tk(S_all, didx), -1, -2),
            "c": tk(Q.c, idx),
            "nu": tk(Q.nu, idx),
        }
        if arm is not None:
            g["arm"] = tk(arm, didx)
        if pstat == "world":
            g["Xa0"] = tk(Xa0, idx)
        elif pstat == "peeled":
            g["a_par"] = tk(a_peel, parent[idx])
        if peeled:
            g["a_peel"] = tk(a_peel, idx)
            g["qdd_peel"] = tk(qdd_peel, didx)
        flat_idx = np.asarray(idx)
        for k, rg in enumerate(rows_b):
            if rg.spec < 0:
                continue
            ridx = np.stack([asm.row_index(system, int(b), k) for b in flat_idx.reshape(-1)])
            g[f"y{k}"] = tk(ry, ridx.reshape(flat_idx.shape + (rg.m,)))
            if any(c not in ("I", "-I") for _, c in rg.terms):
                cs = spatial.stack([coefs[int(b), k] for b in flat_idx.reshape(-1)])
                g[f"C{k}"] = cs.reshape(flat_idx.shape + cs.shape[1:])
        return g

    # (2) inward: local eliminations, children's X^T f_j into the parent's Rf
    def in_step(lvl, child, carry, gins, _):
        P_sum = p_sum = None
        if carry is not None:
            P_c, p_c = carry
            p_sum = tree.sum_into_parents(p_c, child, lvl.n)
            if P_c is not None:
                P_sum = tree.sum_into_parents(P_c, child, lvl.n)
        outs, P_out, p_out = [], [], []
        any_live = any(system.sig_info[s][5] == "live" for s, _, _ in lvl.groups)
        for sl, (sig, _, _), g in zip(walk.level_slices(lvl), lvl.groups, gins):
            key = system.sig_info[sig]
            P_g = None if P_sum is None or key[3] else P_sum[sl]
            p_g = None if p_sum is None else p_sum[sl]
            res, x0f, Kf = _local_solve(system, sig, g, P_g, p_g, dtype)
            outs.append(res)
            p_out.append(jnp.einsum("gji,gj->gi", g["X"], x0f))
            if key[5] == "live":
                assert Kf is not None  # a live body's
                P_out.append(spatial_mm_t(g["X"], Kf))
            elif any_live:
                P_out.append(jnp.zeros(x0f.shape[:-1] + (6, 6), dtype))
        cat = lambda xs: xs[0] if len(xs) == 1 else jnp.concatenate(xs, 0)
        carry = (cat(P_out) if any_live else None, cat(p_out))
        return carry, outs

    _, ins = walk.inward(system, in_step, gather)

    # (3) outward: back-substitution x = x0 - K a_λ
    def out_step(lvl, carry, gins, lin):
        a_prev = carry
        res, a_lvl = [], []
        par = None if a_prev is None else tree.gather_parent(a_prev, lvl, None)
        for sl, (sig, _, _), g, loc in zip(walk.level_slices(lvl), lvl.groups, gins, lin):
            key = system.sig_info[sig]
            peeled, pstat = key[3], key[5]
            if pstat == "live":
                assert par is not None  # a live parent's level came first
                x = _back_substitute(system, sig, loc, par[sl])
            else:
                x = dict(loc["x"])
            if peeled:
                x[A] = g["a_peel"]
                x[QDD] = g["qdd_peel"]
            res.append(x)
            a_lvl.append(x[A])
        a_lvl = a_lvl[0] if len(a_lvl) == 1 else jnp.concatenate(a_lvl, 0)
        return a_lvl, res

    _, outs = walk.outward(system, out_step, gather, level_in=ins)
    a = walk.collect(system, outs, lambda x: x[A])
    f = walk.collect(system, outs, lambda x: x[F])
    fx = walk.collect(system, outs, lambda x: x[FX])
    tau = walk.collect(system, outs, lambda x: x[TAU], per_dof=True)
    qdd = walk.collect(system, outs, lambda x: x[QDD], per_dof=True)
    return finish(fn, Solution(a, f, tau, fx, qdd), check)


def spatial_mm_t(X: Array, K: Array) -> Array:
    """``X^T K`` for ``(G, 6, 6)`` blocks."""
    from .. import spatial

    return spatial.mm(jnp.swapaxes(X, -1, -2), K)


def _block(g, k, rg, var, coef, n, P_g):
    size = var_size(var, n)
    if coef is None:
        return B.Blk.zero(rg.m, size)
    if coef == "I":
        return B.Blk.eye(rg.m, 1.0)
    if coef == "-I":
        return B.Blk.eye(rg.m, -1.0)
    if coef == "S":
        return B.Blk.dense(g["S"])
    if coef == "St":
        return B.Blk.dense(jnp.swapaxes(g["S"], -1, -2))
    if coef == "Ib":
        return B.Blk.dense(g["Ib"] if P_g is None else g["Ib"] - P_g)
    if coef == "arm":
        return B.Blk.dense(g["arm"][..., :, None] * jnp.eye(n, dtype=g["arm"].dtype))
    return B.Blk.dense(g[f"C{k}"])


def _local_solve(system, sig, g, P_g, p_g, dtype):
    """One group's local elimination (forward elimination and core, :func:`blocks.factor`).

    Returns the data of the outward step, and ``x0_f``, ``K_f`` with ``f = x0_f - K_f a_λ``
    (``K_f`` is None without a live parent)."""
    key = system.sig_info[sig]
    kind, n, _, peeled, peel_row, pstat = key
    b_rep = system.sig_rep[sig]
    rows_b = system.rows[b_rep]
    rkeys, cvars = system.local[b_rep]
    plan = system.plans[sig]
    live = pstat == "live"
    G = g["X"].shape[:-2]
    M, aug = {}, {}
    for k in rkeys:
        rg = rows_b[k]
        for var in cvars:
            M[k, var] = _block(g, k, rg, var, rg.coef(var), n, P_g if rg.kind == "Rf" else None)
        # right-hand side
        if rg.kind == "Ra":
            r = -g["c"]
            if pstat == "world":
                r = r - g["Xa0"]
            elif pstat == "peeled":
                r = r - jnp.einsum("gij,gj->gi", g["X"], g["a_par"])
        elif rg.kind == "Rf":
            r = -g["nu"]
            if p_g is not None:
                r = r - p_g
        elif rg.kind == "Rt":
            r = jnp.zeros(G + (rg.m,), dtype)
        else:
            r = g[f"y{k}"]
        if peeled:  # substitute the peeled a_i and qdd_i
            for var, val in ((A, g["a_peel"]), (QDD, g["qdd_peel"])):
                c = rg.coef(var)
                if c is None:
                    continue
                blk = _block(g, k, rg, var, c, n, P_g if rg.kind == "Rf" else None)
                r = r - _apply(blk, val)
        aug[k, 0] = B.Blk.dense(r[..., None])
        if live:
            aug[k, 1] = B.Blk.dense(g["X"]) if rg.kind == "Ra" else B.Blk.zero(rg.m, 6)
    naug = 2 if live else 1
    rows = [(k, rows_b[k].m) for k in rkeys]
    cols = [(v, var_size(v, n)) for v in cvars]
    fac = B.factor(plan, M, aug, rows, cols, naug)

    def vec(blk, size):
        return jnp.zeros(G + (size,), dtype) if blk.k == B.ZERO else blk.materialize()[..., 0]

    if not live:
        core = {c: xs[0] for c, xs in fac.core.items()}
        xs = B.back_substitute(plan, fac, core, lambda r: fac.aug[r, 0])
        x = {var: vec(xs[var], var_size(var, n)) for var in cvars}
        return {"x": x}, x[F], None
    # f as an affine function of the parent's a: back-substitution of both augmented columns
    x0 = B.back_substitute(
        plan, fac, {c: xs[0] for c, xs in fac.core.items()}, lambda r: fac.aug[r, 0], only=(F,)
    )
    K = B.back_substitute(
        plan, fac, {c: xs[1] for c, xs in fac.core.items()}, lambda r: fac.aug[r, 1], only=(F,)
    )
    Kf = K[F].materialize(dtype=dtype)
    Kf = jnp.broadcast_to(Kf, G + (6, 6))
    return {"fac": fac}, vec(x0[F], 6), Kf


def _back_substitute(system, sig, loc, a_par):
    """Outward step of a body with a live parent: the core from ``x0 - K a_λ``, then the
    pivot rows in reverse order (as ABA's ``a_i = X_i a_λ + S_i qdd_i + c_i`` after
    ``qdd_i``)."""
    n = system.sig_info[sig][1]
    b_rep = system.sig_rep[sig]
    _, cvars = system.local[b_rep]
    plan = system.plans[sig]
    fac = loc["fac"]
    ap = B.Blk.dense(a_par[..., None])
    core = {c: B.sub(xs[0], B.mul(xs[1], ap)) for c, xs in fac.core.items()}
    xs = B.back_substitute(
        plan, fac, core, lambda r: B.sub(fac.aug[r, 0], B.mul(fac.aug[r, 1], ap))
    )
    G = a_par.shape[:-1]
    out = {}
    for var in cvars:
        b = xs[var]
        size = var_size(var, n)
        out[var] = jnp.zeros(G + (size,), a_par.dtype) if b.k == B.ZERO else b.val[..., 0]
    return out


def _apply(blk, x):
    if blk.k == B.ZERO:
        return jnp.zeros(x.shape[:-1] + (blk.r,), x.dtype)
    if blk.k == B.EYE:
        return blk.s * x
    return jnp.einsum("...ij,...j->...i", blk.val, x)

"""Numeric blocks of ``D(q, v) d = r`` (Nori eq. 5, 6, 9, 17) and the dense assembly.

Kinematic quantities first (paper §III: "all kinematic quantities ... have been
precomputed"): per body, in body coordinates, the placement in the parent, the motion
transform ``X_i`` (parent to body), the spatial inertia ``I_i``, the velocity ``v_i`` (eq. 2),
``c_i = v_i x S_i qd_i`` and ``ν_i = v_i x* I_i v_i``. Then the values of the knowns and
sensors, as one right-hand-side vector over all their rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import shell, spatial, value_checks
from ..algorithms import kinematics as kin
from ..model import tree
from .structure import FX, QDD, TAU, A, F, var_size

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..model.model import Model
    from .sensors import _Spec
    from .structure import NoriSystem, RowGroup

# The values ``y`` of a system's knowns and sensors: a sequence aligned with ``system.specs``, or
# a mapping keyed by spec or label.
Values = Sequence[Any] | Mapping[Any, Any]


class Quantities(NamedTuple):
    """Per-body kinematic quantities (jaxdyn body order), body coordinates."""

    R: jax.Array  # (nb, 3, 3) placement of body i in its parent (world for depth 0)
    p: jax.Array  # (nb, 3)
    X: jax.Array  # (nb, 6, 6) motion transform parent -> body
    Ib: jax.Array  # (nb, 6, 6) spatial inertia
    vel: jax.Array  # (nb, 6) body velocity
    c: jax.Array  # (nb, 6) v_i x S_i qd_i
    nu: jax.Array  # (nb, 6) v_i x* I_i v_i
    a0: jax.Array  # (6,) world acceleration -a_g


def quantities(model: Model, q: Array, qd: Array) -> Quantities:
    t = model.topo
    RJ, pJ = kin.joint_placements(model, q)
    R = spatial.mm(model.Xtree_R, RJ)
    p = spatial.mv(model.Xtree_R, pJ) + model.Xtree_p
    Rt = jnp.swapaxes(R, -1, -2)
    X = spatial.motion_matrix(Rt, -spatial.mv(Rt, p))
    vJ = tree.dofs_to_bodies(t, model.dof_axis * qd[:, None])

    def step(lvl, _, prev, inp):
        Xl, vJl = inp
        if prev is None:
            return vJl, vJl
        vp = tree.gather_parent(prev, lvl, None)
        cur = jnp.einsum("nij,nj->ni", Xl, vp) + vJl
        return cur, cur

    vel = tree.forward_pass(t, step, (("body", X), ("body", vJ)))[1].flat()
    mass, h, Ibar = spatial.inertia_params(model.mass, model.com, model.inertia)
    Ib = spatial.inertia_matrix(mass, h, Ibar)
    c = spatial.motion_cross(vel, vJ)
    nu = spatial.force_cross(vel, kin.inertia_apply(model.mass, model.com, model.inertia, vel))
    a0 = kin.gravity_acceleration(model, q.dtype)
    return Quantities(R, p, X, Ib, vel, c, nu, a0)


def peeled_accelerations(
    system: NoriSystem, model: Model, Q: Quantities, qdd_known: Array
) -> Array:
    """``a_i = X_i a_λ + S_i qdd_i + c_i`` root to leaves (forward substitution of ``Ra``, the
    first half of Property 1's triangular solve); ``qdd_known (nv,)`` holds the peeled bodies'
    joint accelerations (zeros elsewhere: those values are never used)."""
    t = model.topo
    incr = tree.dofs_to_bodies(t, model.dof_axis * qdd_known[:, None]) + Q.c

    def step(lvl, _, prev, inp):
        Xl, il = inp
        if prev is None:
            return jnp.einsum("nij,j->ni", Xl, Q.a0) + il, jnp.einsum("nij,j->ni", Xl, Q.a0) + il
        cur = jnp.einsum("nij,nj->ni", Xl, tree.gather_parent(prev, lvl, None)) + il
        return cur, cur

    return tree.forward_pass(t, step, (("body", Q.X), ("body", incr)))[1].flat()


# ----------------------------------------------------------------------------- knowns, sensors


def spec_offsets(system: NoriSystem) -> np.ndarray:
    sizes = [int(np.prod(s)) for s in system.yshapes]
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def check_values(
    fn: str, system: NoriSystem, values: Values, dtype: DTypeLike | None = None
) -> list[Array]:
    """Shape-check the values of the knowns and sensors (a sequence aligned with
    ``system.specs``, or a dict keyed by spec or label); NaN checks: eager ``ValueError``,
    traced value checks (:func:`nan_check`; switch: ``jaxdyn.config`` ``value_checks``)."""
    specs = system.specs
    if isinstance(values, dict):
        out = []
        for s in specs:
            if s in values:
                out.append(values[s])
            elif s.label in values:
                out.append(values[s.label])
            else:
                raise ValueError(f"{fn}: no value given for {s.label}")
        extra = [k for k in values if k not in specs and k not in [s.label for s in specs]]
        if extra:
            raise ValueError(f"{fn}: values given for quantities not in the system: {extra}")
        values = out
    seq = list(values) if isinstance(values, (list, tuple)) else None
    if seq is None or len(seq) != len(specs):
        raise ValueError(
            f"{fn}: expected {len(specs)} values (one per known / sensor, in the order "
            f"{[s.label for s in specs]}), got {seq if seq is None else len(seq)}"
        )
    arrs = []
    for s, y, shape in zip(specs, seq, system.yshapes):
        y = jnp.asarray(y)
        if y.shape != tuple(shape):
            raise ValueError(f"{fn}: value of {s.label} has shape {y.shape}, expected {shape}")
        arrs.append(y)
    return arrs


def nan_check(fn: str, arrs: list[Array], specs: Sequence[_Spec]) -> list[Array]:
    """Non-finite values: ``ValueError`` naming the quantity for concrete values; for traced
    ones a value check per quantity (:func:`jaxdyn.value_checks.error_if`) of which only the first
    bad quantity's fails (its message names it), when ``jaxdyn.config`` ``value_checks`` is
    on."""
    traced = [isinstance(y, jax.core.Tracer) for y in arrs]
    for s, y, tr in zip(specs, arrs, traced):
        if not tr and not np.all(np.isfinite(np.asarray(y))):
            raise ValueError(f"{fn}: the value of {s.label} is not finite (NaN or inf)")
    idx = [i for i, tr in enumerate(traced) if tr]
    if not idx or not value_checks.enabled():
        return arrs
    bad = spatial.stack([~jnp.all(jnp.isfinite(arrs[i])) for i in idx])
    first = jnp.argmax(bad)
    out = list(arrs)
    for k, i in enumerate(idx):
        msg = f"{fn}: the value of {specs[i].label} is not finite (NaN or inf)"
        out[i] = value_checks.error_if(arrs[i], bad[k] & (first == k), msg)
    return out


def _wrench_coef(model, f, comps, dtype):
    """Rows ``comps`` of the force transform body -> frame ``f``."""
    if f < 0:
        return jnp.eye(6, dtype=dtype)[np.asarray(comps)]
    R, p = model.frame_R[f], model.frame_p[f]
    Rt = R.T
    top = jnp.concatenate([Rt, -Rt @ spatial.skew(p)], -1)
    bot = jnp.concatenate([jnp.zeros((3, 3), dtype), Rt], -1)
    return jnp.concatenate([top, bot], 0)[np.asarray(comps)]


def spec_coefficient(model: Model, rg: RowGroup, dtype: DTypeLike) -> Array:
    """Dense coefficient of a spec row group (``(m, size)``)."""
    key = rg.terms[0][1]
    if key == "wrench":
        f, comps = rg.data
        return _wrench_coef(model, f, comps, dtype)
    f = rg.data[0]
    R, p = model.frame_R[f], model.frame_p[f]
    if key == "acc":
        return R.T @ jnp.concatenate([-spatial.skew(p), jnp.eye(3, dtype=dtype)], -1)
    if key == "gyro":
        return jnp.concatenate([R.T, jnp.zeros((3, 3), dtype)], -1)
    raise ValueError(f"unknown coefficient {key!r}")  # pragma: no cover


def spec_offset(model: Model, rg: RowGroup, Q: Quantities, b: int) -> Array | None:
    """State-dependent offset ``e`` of a spec row group (``y = C d + e``), or None."""
    if rg.terms[0][1] != "acc":
        return None
    f = rg.data[0]
    R, r = model.frame_R[f], model.frame_p[f]
    w, vo = Q.vel[b, :3], Q.vel[b, 3:]
    return R.T @ spatial.cross(w, vo + spatial.cross(w, r))


def spec_rhs(
    system: NoriSystem, model: Model, Q: Quantities, arrs: Sequence[Array], dtype: DTypeLike
) -> Array:
    """The right-hand side of every spec row, flat in spec order (``y - e``)."""
    flat = (
        jnp.concatenate([jnp.reshape(y, (-1,)).astype(dtype) for y in arrs])
        if arrs
        else (jnp.zeros((0,), dtype))
    )
    off = spec_offsets(system)
    for b in range(system.nb):
        for rg in system.rows[b]:
            if rg.spec < 0:
                continue
            e = spec_offset(model, rg, Q, b)
            if e is not None:
                idx = off[rg.spec] + np.asarray(rg.yidx)
                flat = flat.at[idx].add(-e)
    return flat


def row_index(system: NoriSystem, b: int, k: int) -> np.ndarray:
    """Indices of a spec row group's rows in the flat right-hand side of :func:`spec_rhs`."""
    rg = system.rows[b][k]
    return spec_offsets(system)[rg.spec] + np.asarray(rg.yidx, np.int64)


# ----------------------------------------------------------------------------- dense


def _col0(system, b, var):
    n = int(system.topo.nv_j[b])
    return int(system.col_off[b]) + sum(var_size(w, n) for w in range(var))


def _grid(r0, c0, m, n):
    ri, ci = np.meshgrid(np.arange(r0, r0 + m), np.arange(c0, c0 + n), indexing="ij")
    return ri.ravel(), ci.ravel()


def dense_layout(system: NoriSystem) -> dict[str, Any]:
    """Static index arrays of the dense assembly, by block category (cached on the system)."""
    cached = getattr(system, "_dense_layout", None)
    if cached is not None:
        return cached
    t = system.topo
    cats = {}

    def put(cat, rc, src):
        r, c = rc
        cats.setdefault(cat, ([], [], []))
        cats[cat][0].append(r)
        cats[cat][1].append(c)
        cats[cat][2].append(src)

    const_vals = []
    rhs_src = []  # per row: ("c", b) ("nu", b) ("zero",) ("spec", idx)
    for b in range(system.nb):
        n = int(t.nv_j[b])
        v0 = int(t.v_start[b])
        for k, rg in enumerate(system.rows[b]):
            r0 = system.rg_off[b][k]
            for var, coef in rg.terms:
                size = var_size(var, n)
                c0 = _col0(system, b, var)
                if coef in ("I", "-I"):
                    r, c = _grid(r0, c0, rg.m, size)
                    vals = (np.eye(rg.m, size) * (1.0 if coef == "I" else -1.0)).ravel()
                    keep = vals != 0
                    put("const", (r[keep], c[keep]), None)
                    const_vals.append(vals[keep])
                elif coef == "S":  # (6, n): dof_axis[v0 + j, i]
                    put("S", _grid(r0, c0, 6, n), (v0, n, False))
                elif coef == "St":
                    put("S", _grid(r0, c0, n, 6), (v0, n, True))
                elif coef == "Ib":
                    put("Ib", _grid(r0, c0, 6, 6), b)
                elif coef == "arm":
                    put("arm", (np.arange(r0, r0 + n), np.arange(c0, c0 + n)), (v0, n))
                else:
                    put("spec", _grid(r0, c0, rg.m, size), (b, k))
            if rg.kind == "Ra" and t.parent[b] >= 0:
                put("X", _grid(r0, _col0(system, int(t.parent[b]), A), 6, 6), b)
            if rg.kind == "Rf":
                for cb in system.children[b]:
                    put("Xt", _grid(r0, _col0(system, cb, F), 6, 6), cb)
            # right-hand side: indices into [Ra (nb*6), Rf (nb*6), 0, spec rows]
            if rg.kind == "Ra":
                rhs_src.append(6 * b + np.arange(6))
            elif rg.kind == "Rf":
                rhs_src.append(6 * system.nb + 6 * b + np.arange(6))
            elif rg.kind == "Rt":
                rhs_src.append(np.full(rg.m, 12 * system.nb))
            else:
                rhs_src.append(12 * system.nb + 1 + row_index(system, b, k))
    lay: dict[str, Any] = {
        k: (np.concatenate(v[0]), np.concatenate(v[1]), v[2]) for k, v in cats.items()
    }
    lay["const_vals"] = np.concatenate(const_vals) if const_vals else np.zeros(0)
    lay["rhs"] = np.concatenate(rhs_src)
    system._dense_layout = lay
    return lay


def assemble(
    system: NoriSystem, model: Model, q: ArrayLike, v: ArrayLike, values: Values
) -> tuple[Array, Array]:
    """Dense ``D (n_rows, n_vars)`` and ``r (n_rows,)`` with ``D d = r`` (paper eq. 17 with
    ``r = -b``); columns body-major ``[a, f, tau, fx, qdd]`` per body, rows body-major
    ``[Ra, Rf, Rt, knowns and sensors of the body]``. The oracle of the sparse solvers, the
    dense baseline of the benchmarks and the matrix of the rank checks."""
    arrs = check_values("nori.assemble", system, values)
    dtype = shell.common_dtype(q, v, *arrs)
    model = model.astype(dtype)
    q, v = jnp.asarray(q, dtype), jnp.asarray(v, dtype)
    Q = quantities(model, q, v)
    ry = spec_rhs(system, model, Q, arrs, dtype)
    lay = dense_layout(system)
    rows_i, cols_i, vals = [], [], []
    for cat, entry in lay.items():
        if cat in ("const_vals", "rhs"):
            continue
        ri, ci, src = entry
        rows_i.append(ri)
        cols_i.append(ci)
        if cat == "const":
            vals.append(jnp.asarray(lay["const_vals"], dtype))
        elif cat == "S":
            parts = []
            for v0, n, tr in src:
                S = model.dof_axis[v0 : v0 + n]  # (n, 6)
                parts.append((S if tr else S.T).reshape(-1))
            vals.append(jnp.concatenate(parts))
        elif cat == "Ib":
            vals.append(Q.Ib[np.asarray(src)].reshape(-1))
        elif cat == "X":
            vals.append(Q.X[np.asarray(src)].reshape(-1))
        elif cat == "Xt":
            vals.append(jnp.swapaxes(Q.X[np.asarray(src)], -1, -2).reshape(-1))
        elif cat == "arm":
            idx = np.concatenate([np.arange(v0, v0 + n) for v0, n in src])
            assert model.armature is not None  # "arm" entries: the system has armature
            vals.append(model.armature[idx])
        elif cat == "spec":
            vals.append(
                jnp.concatenate(
                    [spec_coefficient(model, system.rows[b][k], dtype).reshape(-1) for b, k in src]
                )
            )
    D = jnp.zeros((system.n_rows, system.n_vars), dtype)
    D = D.at[np.concatenate(rows_i), np.concatenate(cols_i)].add(jnp.concatenate(vals))
    root = jnp.asarray(system.topo.parent < 0, dtype)[:, None]
    ra = -Q.c - root * (Q.X @ Q.a0)
    src = jnp.concatenate([ra.reshape(-1), -Q.nu.reshape(-1), jnp.zeros((1,), dtype), ry])
    return D, src[lay["rhs"]]


def column_index(system: NoriSystem, b: int, var: int) -> np.ndarray:
    t = system.topo
    n = int(t.nv_j[b])
    c0 = int(system.col_off[b]) + sum(var_size(w, n) for w in range(var))
    return np.arange(c0, c0 + var_size(var, n))


def split_solution(system: NoriSystem, d: Array) -> tuple[Array, Array, Array, Array, Array]:
    """A dense solution vector ``d (n_vars,)`` as ``(a, f, tau, fx, qdd)`` arrays."""
    t = system.topo
    per = {var: [] for var in range(5)}
    for b in range(system.nb):
        for var in range(5):
            per[var].append(column_index(system, b, var))
    a = d[np.stack(per[A])]
    f = d[np.stack(per[F])]
    fx = d[np.stack(per[FX])]
    tau = d[np.concatenate(per[TAU])] if t.nv else d[:0]
    qdd = d[np.concatenate(per[QDD])] if t.nv else d[:0]
    return a, f, tau, fx, qdd

"""Offline analysis of ``D(q, v) d = r``: worst-case pattern, orderings, fill, flops, rank.

* **Worst-case sparsity pattern** (paper §IV-D): an entry is structurally non-zero when it is
  non-zero at one of several random states; the state-dependent entries are sines and cosines
  of ``q`` (and products with the geometry), zero only on a set of measure zero.
* **Orderings** (Problem 2, sparse LU with minimum fill-in): scipy's SuperLU column orderings
  (``NATURAL``, ``MMD_ATA``, ``MMD_AT_PLUS_A``, ``COLAMD``, with SuperLU's own threshold
  partial pivoting of the rows) as the baseline, against the static tree ordering of
  :mod:`jaxdyn.nori.structure` (rows and columns, no pivoting) as a scalar pivot sequence.
  Fill (entries of ``L + U`` not in ``D``) and flops of the factorisation
  (``sum_k |L_k| (1 + 2 |U_k|)``) and of one solve (``2 (nnz(L) + nnz(U))``) are counted on
  the same pattern for all.
* **Property 1** (§IV-C): the inverse-dynamics pattern is triangularisable by permutations.
  For a square pattern with a structurally non-zero diagonal this is decided greedily: a
  triangular matrix has a row with a single entry; eliminating any such row with its column
  leaves a triangular matrix, so repeated elimination of single-entry rows either empties
  the matrix (triangularisable; the elimination order is the permutation, the LU has zero
  fill, Remark 2) or gets stuck (not triangularisable). :func:`triangularize` returns the
  permutations found.
* **Well-posedness** (§VI): structural rank (maximum bipartite matching) of the stacked
  dynamics and measurement rows, then numerical rank at given states; a deficient system
  raises ``ValueError`` naming the unobservable quantities (the variables the null space
  moves). Property 3's ill-posed cases (e.g. load cells under two coplanar feet) are singular
  for particular states only, so the states checked matter: by default the neutral
  configuration (coplanar feet for a standing humanoid) and a random one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..model.build import skew
from . import assembly as asm
from .structure import QDD, A, var_size

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import TypeAlias

    from jax.typing import ArrayLike

    from ..model.model import Model
    from .structure import NoriSystem

    #: a check state ``(q, v, values)`` (numpy)
    State: TypeAlias = tuple[ArrayLike, ArrayLike, Sequence[ArrayLike]]

SCIPY_ORDERINGS = ("NATURAL", "MMD_ATA", "MMD_AT_PLUS_A", "COLAMD")


@dataclass
class OrderingStats:
    """Fill and flops of one ordering on the worst-case pattern."""

    name: str
    nnz_D: int
    nnz_L: int
    nnz_U: int
    fill: int
    factor_flops: int
    solve_flops: int

    def row(self) -> str:
        return (
            f"| {self.name} | {self.nnz_D} | {self.nnz_L + self.nnz_U} | {self.fill} | "
            f"{self.factor_flops} | {self.solve_flops} |"
        )


@dataclass
class Analysis:
    """The offline report of a system (:func:`analyze`)."""

    n_rows: int
    n_vars: int
    nnz: int
    structural_rank: int
    orderings: dict = field(default_factory=dict)
    triangular: bool | None = None
    triangular_perm: tuple | None = None
    numerical_ranks: tuple = ()
    front_sizes: tuple = ()

    def best_scipy(self) -> OrderingStats | None:
        cands = [s for k, s in self.orderings.items() if k != "tree"]
        return min(cands, key=lambda s: (s.fill, s.factor_flops)) if cands else None

    def table(self) -> str:
        head = "| ordering | nnz(D) | nnz(L+U) | fill | factor flops | solve flops |\n"
        head += "| --- | ---: | ---: | ---: | ---: | ---: |\n"
        return head + "\n".join(s.row() for s in self.orderings.values())

    def __str__(self):
        lines = [
            f"D: {self.n_rows} x {self.n_vars}, nnz {self.nnz} (worst case), structural rank "
            f"{self.structural_rank}"
        ]
        if self.triangular is not None:
            lines.append(
                "triangularisable by permutations (Property 1): "
                + ("yes, zero fill" if self.triangular else "no")
            )
        if self.numerical_ranks:
            lines.append(f"numerical rank at the checked states: {list(self.numerical_ranks)}")
        if self.orderings:
            lines.append(self.table())
        if self.front_sizes:
            lines.append(f"least-squares fronts (size per body): {list(self.front_sizes)}")
        return "\n".join(lines)


# ----------------------------------------------------------------------------- states, pattern


def random_q(model: Model, rng: np.random.Generator, scale: float = 1.0) -> np.ndarray:
    """A random configuration (numpy): joint angles uniform in ``[-scale, scale]``, unit
    quaternions for spherical / free joints, free-joint positions uniform."""
    from .. import joints

    t = model.topo
    q = np.zeros(t.nq)
    for b in range(t.nb):
        q0, k = int(t.q_start[b]), int(t.kind[b])
        if k == joints.ONE_DOF:
            q[q0] = rng.uniform(-scale, scale)
        else:
            quat = rng.normal(size=4)
            quat /= np.linalg.norm(quat)
            if k == joints.SPHERICAL:
                q[q0 : q0 + 4] = quat
            else:
                q[q0 : q0 + 3] = rng.uniform(-scale, scale, 3)
                q[q0 + 3 : q0 + 7] = quat
    return q


def neutral_q(model: Model) -> np.ndarray:
    from .. import joints

    t = model.topo
    q = np.zeros(t.nq)
    for b in range(t.nb):
        q0, k = int(t.q_start[b]), int(t.kind[b])
        if k == joints.SPHERICAL:
            q[q0] = 1.0
        elif k == joints.FREE:
            q[q0 + 3] = 1.0
    return q


def sample_states(
    system: NoriSystem, model: Model, n_random: int = 3, seed: int = 0, neutral: bool = False
) -> list[State]:
    """``(q, v, values)`` states (numpy): optionally the neutral configuration, then random
    ones."""
    rng = np.random.default_rng(seed)
    states = []
    for i in range(int(neutral) + n_random):
        q = neutral_q(model) if (neutral and i == 0) else random_q(model, rng)
        v = rng.normal(size=model.nv)
        y = [rng.normal(size=shape) for shape in system.yshapes]
        states.append((q, v, y))
    return states


def _quat_rot(qt):
    w, x, y, z = qt
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _crm(v):
    out = np.zeros((6, 6))
    out[:3, :3] = out[3:, 3:] = skew(v[:3])
    out[3:, :3] = skew(v[3:])
    return out


def numpy_quantities(model: Model, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, ...]:
    """:func:`jaxdyn.nori.assembly.quantities` in numpy (offline checks; no compilation)."""
    from .. import joints

    t = model.topo
    nb = t.nb
    Xtree_R, Xtree_p = np.asarray(model.Xtree_R, float), np.asarray(model.Xtree_p, float)
    axis = np.asarray(model.dof_axis, float)
    mass, com, inertia = (np.asarray(x, float) for x in (model.mass, model.com, model.inertia))
    R = np.zeros((nb, 3, 3))
    p = np.zeros((nb, 3))
    X = np.zeros((nb, 6, 6))
    Ib = np.zeros((nb, 6, 6))
    vel = np.zeros((nb, 6))
    c = np.zeros((nb, 6))
    nu = np.zeros((nb, 6))
    for b in range(nb):
        k, q0, v0, n = int(t.kind[b]), int(t.q_start[b]), int(t.v_start[b]), int(t.nv_j[b])
        if k == joints.ONE_DOF:
            a, th = axis[v0], q[q0]
            K = skew(a[:3])
            RJ = np.eye(3) + np.sin(th) * K + (1 - np.cos(th)) * K @ K
            pJ = a[3:] * th
        elif k == joints.SPHERICAL:
            RJ, pJ = _quat_rot(q[q0 : q0 + 4]), np.zeros(3)
        else:
            RJ, pJ = _quat_rot(q[q0 + 3 : q0 + 7]), q[q0 : q0 + 3]
        R[b] = Xtree_R[b] @ RJ
        p[b] = Xtree_R[b] @ pJ + Xtree_p[b]
        E = R[b].T
        X[b, :3, :3] = X[b, 3:, 3:] = E
        X[b, 3:, :3] = skew(-E @ p[b]) @ E
        C = skew(com[b])
        Ib[b, :3, :3] = inertia[b] + mass[b] * C @ C.T
        Ib[b, :3, 3:] = mass[b] * C
        Ib[b, 3:, :3] = mass[b] * C.T
        Ib[b, 3:, 3:] = mass[b] * np.eye(3)
        vJ = axis[v0 : v0 + n].T @ v[v0 : v0 + n]
        par = int(t.parent[b])
        vel[b] = (X[b] @ vel[par] if par >= 0 else 0.0) + vJ
        c[b] = _crm(vel[b]) @ vJ
        nu[b] = -_crm(vel[b]).T @ (Ib[b] @ vel[b])
    a0 = np.concatenate([np.zeros(3), -np.asarray(model.gravity, float)])
    return R, p, X, Ib, vel, c, nu, a0


def numpy_assemble(
    system: NoriSystem, model: Model, q: ArrayLike, v: ArrayLike, values: Sequence[ArrayLike]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`jaxdyn.nori.assembly.assemble` in numpy: ``(D, r)``."""
    t = system.topo
    q, v = np.asarray(q, float), np.asarray(v, float)
    R, p, X, Ib, vel, c, nu, a0 = numpy_quantities(model, q, v)
    lay = asm.dense_layout(system)
    fR, fp = np.asarray(model.frame_R, float), np.asarray(model.frame_p, float)

    def coef(rg):
        key = rg.terms[0][1]
        if key == "wrench":
            f, comps = rg.data
            if f < 0:
                return np.eye(6)[list(comps)]
            E = fR[f].T
            M = np.zeros((6, 6))
            M[:3, :3] = M[3:, 3:] = E
            M[:3, 3:] = -E @ skew(fp[f])
            return M[list(comps)]
        f = rg.data[0]
        if key == "acc":
            return fR[f].T @ np.concatenate([-skew(fp[f]), np.eye(3)], 1)
        return np.concatenate([fR[f].T, np.zeros((3, 3))], 1)

    D = np.zeros((system.n_rows, system.n_vars))
    axis = np.asarray(model.dof_axis, float)
    for cat, entry in lay.items():
        if cat in ("const_vals", "rhs"):
            continue
        ri, ci, src = entry
        if cat == "const":
            vals = lay["const_vals"]
        elif cat == "S":
            vals = np.concatenate(
                [(axis[v0 : v0 + n] if tr else axis[v0 : v0 + n].T).ravel() for v0, n, tr in src]
            )
        elif cat == "Ib":
            vals = Ib[np.asarray(src)].ravel()
        elif cat == "X":
            vals = X[np.asarray(src)].ravel()
        elif cat == "Xt":
            vals = np.swapaxes(X[np.asarray(src)], -1, -2).ravel()
        elif cat == "arm":
            arm = np.asarray(model.armature, float)
            vals = np.concatenate([arm[v0 : v0 + n] for v0, n in src])
        else:
            vals = np.concatenate([coef(system.rows[b][k]).ravel() for b, k in src])
        np.add.at(D, (ri, ci), vals)
    ry = (
        np.concatenate([np.ravel(np.asarray(y, float)) for y in values])
        if values
        else (np.zeros(0))
    )
    off = asm.spec_offsets(system)
    for b in range(system.nb):
        for rg in system.rows[b]:
            if rg.spec >= 0 and rg.terms[0][1] == "acc":
                f = rg.data[0]
                w, vo = vel[b, :3], vel[b, 3:]
                e = fR[f].T @ np.cross(w, vo + np.cross(w, fp[f]))
                ry[off[rg.spec] + np.asarray(rg.yidx)] -= e
    root = (t.parent < 0).astype(float)[:, None]
    ra = -c - root * (X @ a0)
    src = np.concatenate([ra.ravel(), -nu.ravel(), np.zeros(1), ry])
    return D, src[lay["rhs"]]


def dense_matrices(
    system: NoriSystem, model: Model, states: Iterable[State]
) -> list[tuple[np.ndarray, np.ndarray]]:
    return [numpy_assemble(system, model, q, v, y) for q, v, y in states]


def worst_case_pattern(
    system: NoriSystem, model: Model, n_samples: int = 3, seed: int = 0
) -> np.ndarray:
    """Boolean ``(n_rows, n_vars)`` pattern: non-zero at any of ``n_samples`` random states."""
    if n_samples < 1:
        raise ValueError(f"nori.analyze: n_samples must be at least 1, got {n_samples}")
    pat = None
    for D, _ in dense_matrices(system, model, sample_states(system, model, n_samples, seed)):
        scale = max(1.0, float(np.max(np.abs(D))))
        nz = np.abs(D) > 1e-13 * scale
        pat = nz if pat is None else pat | nz
    assert pat is not None  # n_samples >= 1
    return pat


# ----------------------------------------------------------------------------- orderings


def symbolic_lu(
    pattern: np.ndarray, prow: np.ndarray, pcol: np.ndarray
) -> tuple[int, int, int, int]:
    """Fill and flops of the LU of ``pattern[prow][:, pcol]`` without pivoting."""
    from scipy.sparse import csr_matrix

    A = csr_matrix(pattern[np.ix_(prow, pcol)])
    n = A.shape[0]  # pyright: ignore[reportOptionalSubscript] (scipy: shape inferred Optional)
    rows = [set(A.indices[A.indptr[i] : A.indptr[i + 1]].tolist()) for i in range(n)]
    cols = [set() for _ in range(n)]
    for i, r in enumerate(rows):
        for j in r:
            cols[j].add(i)
    nnz_L = nnz_U = flops = 0
    for k in range(n):
        if k not in rows[k]:
            raise ValueError(f"structurally zero pivot at step {k}")
        Urow = [j for j in rows[k] if j > k]
        Lcol = [i for i in cols[k] if i > k]
        nnz_U += len(Urow) + 1
        nnz_L += len(Lcol) + 1
        flops += len(Lcol) * (1 + 2 * len(Urow))
        for i in Lcol:
            ri = rows[i]
            for j in Urow:
                if j not in ri:
                    ri.add(j)
                    cols[j].add(i)
    nnz = int(A.nnz)
    return nnz_L, nnz_U, nnz_L + nnz_U - n - nnz, flops


def _stats(name, nnz, nnz_L, nnz_U, fill, flops):
    return OrderingStats(name, nnz, nnz_L, nnz_U, fill, int(flops), 2 * (nnz_L + nnz_U))


def scipy_ordering(pattern: np.ndarray, spec: str, seed: int = 0) -> OrderingStats:
    """SuperLU with column ordering ``spec`` on random values with the given pattern."""
    from scipy.sparse import csc_matrix
    from scipy.sparse.linalg import splu

    rng = np.random.default_rng(seed)
    A = csc_matrix(pattern.astype(np.float64))
    A.data = rng.uniform(0.5, 1.5, A.nnz) * rng.choice([-1.0, 1.0], A.nnz)
    lu = splu(A, permc_spec=spec)
    L = lu.L.tocsc()
    U = lu.U.tocsr()
    n = A.shape[0]  # pyright: ignore[reportOptionalSubscript] (scipy: shape inferred Optional)
    Lc = np.diff(L.indptr) - 1  # below the unit diagonal
    Ur = np.diff(U.indptr) - 1  # right of the diagonal
    flops = int(np.sum(Lc * (1 + 2 * Ur)))
    fill = int(L.nnz + U.nnz - n - A.nnz)
    return _stats(spec, int(A.nnz), int(L.nnz), int(U.nnz), fill, flops)


def tree_order(system: NoriSystem) -> tuple[np.ndarray, np.ndarray]:
    """The static (row, column) scalar pivot sequence of the tree LU (peeling, then the local
    plans leaves to root)."""
    t = system.topo
    rows, cols = [], []

    def col0(b, var):
        n = int(t.nv_j[b])
        return int(system.col_off[b]) + sum(var_size(w, n) for w in range(var))

    def pair(b, k, var, n_):
        r0 = system.rg_off[b][k]
        c0 = col0(b, var)
        rows.extend(range(r0, r0 + n_))
        cols.extend(range(c0, c0 + n_))

    for lvl in system.levels:
        for i in range(lvl.b0, lvl.b1):
            b = int(system.order[i])
            if system.peeled[b]:
                n = int(t.nv_j[b])
                pair(b, int(system.peel_row[b]), QDD, n)
                pair(b, 0, A, 6)
    for lvl in reversed(system.levels):
        for i in range(lvl.b0, lvl.b1):
            b = int(system.order[i])
            n = int(t.nv_j[b])
            plan = system.plans[int(system.sig_of[b])]
            for st in plan.steps:
                if st[0] == "pivot":
                    _, k, var = st
                    pair(b, k, var, var_size(var, n))
                else:
                    _, ks, vs, _ = st
                    for k in ks:
                        r0 = system.rg_off[b][k]
                        rows.extend(range(r0, r0 + system.rows[b][k].m))
                    for var in vs:
                        c0 = col0(b, var)
                        cols.extend(range(c0, c0 + var_size(var, n)))
    return np.asarray(rows), np.asarray(cols)


def triangularize(pattern: np.ndarray) -> tuple[bool, np.ndarray, np.ndarray]:
    """Greedy single-entry-row elimination (see the module docstring). Returns
    ``(ok, row_order, col_order)``; with ``ok`` the permuted pattern is lower triangular."""
    from scipy.sparse import csc_matrix, csr_matrix

    n = pattern.shape[0]
    R = csr_matrix(pattern)
    C = csc_matrix(pattern)
    count = np.diff(R.indptr).astype(np.int64)
    alive_c = np.ones(pattern.shape[1], bool)
    done_r = np.zeros(n, bool)
    stack = [i for i in range(n) if count[i] == 1]
    prow, pcol = [], []
    while stack:
        i = stack.pop()
        if done_r[i] or count[i] != 1:
            continue
        js = [j for j in R.indices[R.indptr[i] : R.indptr[i + 1]] if alive_c[j]]
        j = js[0]
        prow.append(i)
        pcol.append(j)
        done_r[i] = True
        alive_c[j] = False
        for r in C.indices[C.indptr[j] : C.indptr[j + 1]]:
            if not done_r[r]:
                count[r] -= 1
                if count[r] == 1:
                    stack.append(r)
    ok = len(prow) == n and pattern.shape[0] == pattern.shape[1]
    return ok, np.asarray(prow), np.asarray(pcol)


# ----------------------------------------------------------------------------- rank


def structural_rank(pattern: np.ndarray) -> int:
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import structural_rank as srank

    return int(srank(csr_matrix(pattern.astype(np.int8))))


def _dyn_split(system):
    """Row indices of the Newton-Euler rows / of the knowns and sensors, and column indices
    of ``w = (a, f, tau)`` / ``z = (f^x, qdd)``."""
    dyn_r, spec_r, w_c, z_c = [], [], [], []
    for b in range(system.nb):
        for k, rg in enumerate(system.rows[b]):
            r0 = system.rg_off[b][k]
            (dyn_r if rg.spec < 0 else spec_r).extend(range(r0, r0 + rg.m))
        for var in range(5):
            (w_c if var in (0, 1, 2) else z_c).extend(asm.column_index(system, b, var))
    return tuple(np.asarray(x, np.int64) for x in (dyn_r, spec_r, w_c, z_c))


def unobservable(system: NoriSystem, D: np.ndarray, rtol: float = 1e-9) -> tuple[int, list[str]]:
    """Numerical rank of ``D`` and the labels of the unknowns its null space moves.

    By Property 1 the Newton-Euler rows determine ``w = (a, f, tau)`` from
    ``z = (f^x, qdd)``: ``w = N z + w0`` with ``N = -D_w^-1 D_z`` (``D_w`` is triangular with a
    unit diagonal up to sign). So ``rank D = n_dyn + rank(Y_w N + Y_z)`` for the measurement
    rows ``Y``: only a matrix of ``nv + 6 nb`` columns is decomposed."""
    from scipy.sparse import csc_matrix
    from scipy.sparse.linalg import splu

    dyn_r, spec_r, w_c, z_c = _dyn_split(system)
    Dw = csc_matrix(D[np.ix_(dyn_r, w_c)])
    Dz = D[np.ix_(dyn_r, z_c)]
    N = -splu(Dw).solve(Dz)
    M = D[np.ix_(spec_r, w_c)] @ N + D[np.ix_(spec_r, z_c)]
    nz = len(z_c)
    if M.shape[0] == 0:
        s = np.zeros(0)
    else:
        s = np.linalg.svd(M, compute_uv=False)
    tol = rtol * (s[0] if s.size else 1.0)
    rank_z = int(np.sum(s > tol))
    rank = len(dyn_r) + rank_z
    if rank_z == nz:
        return rank, []
    if M.shape[0]:
        _, _, Vt = np.linalg.svd(M)
        Nz = Vt[rank_z:].T
    else:
        Nz = np.eye(nz)
    full = np.zeros((system.n_vars, Nz.shape[1]))
    full[z_c] = Nz
    full[w_c] = N @ Nz
    weight = np.linalg.norm(full, axis=1)
    labels = system.column_labels()
    return rank, [labels[j] for j in np.nonzero(weight > 1e-6 * max(1.0, weight.max()))[0]]


def summarize_labels(labels: Iterable[str], limit: int = 40) -> list[str]:
    """``['fx[foot].fx', 'fx[foot].fy', ...]`` grouped as ``fx[foot] (fx, fy)``; external
    wrenches first, then joint torques and accelerations, then the link quantities."""
    prio = {"fx": 0, "tau": 1, "qdd": 2, "a": 3, "f": 4}
    labels = sorted(labels, key=lambda s: prio.get(s.split("[", 1)[0], 5))
    groups = {}
    for lab in labels:
        head, _, comp = lab.partition("].")
        if comp:
            groups.setdefault(head + "]", []).append(comp)
        else:
            groups.setdefault(lab, [])
    out = [k + (f" ({', '.join(v)})" if v else "") for k, v in groups.items()]
    if len(out) > limit:
        out = out[:limit] + [f"... ({len(out) - limit} more)"]
    return out


def check_well_posed(
    system: NoriSystem, model: Model, states: Sequence[State], neutral_first: bool = False
) -> tuple[int, tuple[int, ...]]:
    """Raise ``ValueError`` when ``[D; D_Y]`` is rank deficient (structurally, or numerically
    at one of ``states``), naming the unobservable quantities."""
    if not states:
        raise ValueError(
            "nori.build: check_states is empty: give at least one configuration to check the "
            "system at (or check=False)"
        )
    mats = dense_matrices(system, model, states)
    pat = None
    for D, _ in mats:
        nz = D != 0
        pat = nz if pat is None else pat | nz
    assert pat is not None  # states is not empty
    srank = structural_rank(pat)
    ranks = []
    for i, (D, _) in enumerate(mats):
        rank, names = unobservable(system, D)
        ranks.append(rank)
        if rank < system.n_vars:
            why = (
                "structurally"
                if srank < system.n_vars
                else f"numerically at check state {i}"
                + (" (neutral configuration)" if i == 0 and neutral_first else "")
            )
            raise ValueError(
                f"nori.build: {system.name} is ill-posed ({why}): rank {rank} < "
                f"{system.n_vars} unknowns ({system.n_rows} rows); unobservable with these "
                f"knowns and sensors: " + ", ".join(summarize_labels(names))
            )
    return srank, tuple(ranks)


def analyze(
    system: NoriSystem,
    model: Model,
    orderings: Sequence[str] = SCIPY_ORDERINGS,
    n_samples: int = 3,
    seed: int = 0,
) -> Analysis:
    """The offline report: worst-case pattern, orderings (square systems), Property 1 check,
    structural rank. Returns an :class:`Analysis` (also stored as ``system.analysis``)."""
    pat = worst_case_pattern(system, model, n_samples, seed)
    an = Analysis(
        n_rows=system.n_rows,
        n_vars=system.n_vars,
        nnz=int(pat.sum()),
        structural_rank=structural_rank(pat),
    )
    if system.n_rows == system.n_vars and an.structural_rank == system.n_vars:
        for spec in orderings:
            an.orderings[spec] = scipy_ordering(pat, spec, seed)
        if system.square:
            pr, pc = tree_order(system)
            nL, nU, fill, flops = symbolic_lu(pat, pr, pc)
            an.orderings["tree"] = _stats("tree", int(pat.sum()), nL, nU, fill, flops)
        ok, pr, pc = triangularize(pat)
        an.triangular = bool(ok)
        an.triangular_perm = (pr, pc) if ok else None
    if not system.square:
        from .estimate import front_sizes

        an.front_sizes = tuple(front_sizes(system))
    system.analysis = an
    return an

"""Typed dense blocks and the static block LU of one body's rows.

The blocks ``D_{c,d}`` of Nori's eq. (5) are zero, ``±1`` (identities) or dense (``X``, ``I_i``,
``S_i``). :class:`Blk` carries that type at trace time, so products and sums with zero and
identity blocks cost nothing and leave no operation in the compiled program: the elimination
is written once as block algebra and the zero/identity structure of the worst-case pattern
(paper §IV-D) is exploited exactly, without data-dependent control flow.

Values are arrays with leading group axes ``(..., r, c)`` (the bodies of one level group);
with ``val=None`` the same code runs symbolically (offline), which is how the pivot sequence
of a body's rows is chosen (:func:`plan`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, SupportsInt

import jax
import jax.numpy as jnp
import numpy as np

from .. import spatial

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

    from jax import Array
    from jax.typing import DTypeLike

ZERO, EYE, DENSE = 0, 1, 2


class Blk:
    """An ``r x c`` block: zero, ``s * identity`` (square) or dense ``val``."""

    __slots__ = ("k", "s", "val", "r", "c")

    def __init__(
        self, k: int, r: SupportsInt, c: SupportsInt, s: float = 1.0, val: Any = None
    ) -> None:
        self.k, self.r, self.c, self.s, self.val = k, int(r), int(c), s, val

    # -------------------------------------------------------------- constructors
    @staticmethod
    def zero(r: int, c: int) -> Blk:
        return Blk(ZERO, r, c, 0.0)

    @staticmethod
    def eye(n: int, s: float = 1.0) -> Blk:
        return Blk(EYE, n, n, float(s))

    @staticmethod
    def dense(val: Array | None, r: SupportsInt | None = None, c: SupportsInt | None = None) -> Blk:
        if val is not None:
            r, c = val.shape[-2], val.shape[-1]
        assert r is not None and c is not None, "Blk.dense: a symbolic block needs r and c"
        return Blk(DENSE, r, c, 1.0, val)

    @property
    def symbolic(self) -> bool:
        return self.k == DENSE and self.val is None

    def __repr__(self):
        kind = {ZERO: "0", EYE: f"{self.s:g}I", DENSE: "D"}[self.k]
        return f"Blk({kind}, {self.r}x{self.c})"

    def materialize(self, like: Array | None = None, dtype: DTypeLike | None = None) -> Array:
        """The block as an array ``(..., r, c)`` (zeros / scaled identity made explicit)."""
        if self.k == DENSE:
            return self.val
        dt = dtype if dtype is not None else (like.dtype if like is not None else None)
        if self.k == ZERO:
            out = jnp.zeros((self.r, self.c), dt)
        else:
            out = self.s * jnp.eye(self.r, dtype=dt)
        return out


def _sym(*bs):
    return any(b.k == DENSE and b.val is None for b in bs)


def neg(A: Blk) -> Blk:
    if A.k == ZERO:
        return A
    if A.k == EYE:
        return Blk.eye(A.r, -A.s)
    return Blk.dense(None if A.val is None else -A.val, A.r, A.c)


def mul(A: Blk, B: Blk) -> Blk:
    """``A @ B``."""
    if A.c != B.r:
        raise ValueError(f"block shapes {A.r}x{A.c} and {B.r}x{B.c} do not chain")
    if A.k == ZERO or B.k == ZERO:
        return Blk.zero(A.r, B.c)
    if A.k == EYE and B.k == EYE:
        return Blk.eye(A.r, A.s * B.s)
    if A.k == EYE:
        return B if A.s == 1.0 else (neg(B) if A.s == -1.0 else _scale(B, A.s))
    if B.k == EYE:
        return A if B.s == 1.0 else (neg(A) if B.s == -1.0 else _scale(A, B.s))
    if _sym(A, B):
        return Blk.dense(None, A.r, B.c)
    return Blk.dense(spatial.mm(A.val, B.val))


def _scale(A, s):
    return Blk.dense(None if A.val is None else s * A.val, A.r, A.c)


def add(A: Blk, B: Blk) -> Blk:
    """``A + B``."""
    if (A.r, A.c) != (B.r, B.c):
        raise ValueError(f"block shapes {A.r}x{A.c} and {B.r}x{B.c} differ")
    if A.k == ZERO:
        return B
    if B.k == ZERO:
        return A
    if A.k == EYE and B.k == EYE:
        s = A.s + B.s
        return Blk.zero(A.r, A.c) if s == 0.0 else Blk.eye(A.r, s)
    if A.k == EYE or B.k == EYE:
        E, D = (A, B) if A.k == EYE else (B, A)
        if D.val is None:
            return Blk.dense(None, D.r, D.c)
        return Blk.dense(D.val + E.s * jnp.eye(D.r, dtype=D.val.dtype))
    if _sym(A, B):
        return Blk.dense(None, A.r, A.c)
    return Blk.dense(A.val + B.val)


def sub(A: Blk, B: Blk) -> Blk:
    return add(A, neg(B))


def inv(A: Blk, spd: bool = False) -> Blk:
    """Inverse of a square block (identity: free; dense: closed forms for the symmetric
    positive definite pivots of sizes 1, 3, 6 when ``spd``, LAPACK otherwise)."""
    if A.r != A.c:
        raise ValueError("pivot block is not square")
    if A.k == ZERO:
        raise ValueError("zero pivot block")
    if A.k == EYE:
        return Blk.eye(A.r, 1.0 / A.s)
    n = A.r
    if A.val is None:
        return Blk.dense(None, n, n)
    if n == 1:
        return Blk.dense(1.0 / A.val)
    if spd and n in (3, 6):
        return Blk.dense(spatial.inv_spd(A.val))
    return Blk.dense(jnp.linalg.inv(A.val))


def _flatten(b):
    return ((b.val,) if b.k == DENSE else ()), (b.k, b.r, b.c, b.s)


def _unflatten(aux, children):
    k, r, c, s = aux
    return Blk(k, r, c, s, children[0] if k == DENSE else None)


jax.tree_util.register_pytree_node(Blk, _flatten, _unflatten)


# ----------------------------------------------------------------------------- elimination


class Plan:
    """Static pivot sequence of one body's local system (rows x own-variable groups).

    ``steps``: ``("pivot", row, col)`` for an identity pivot block, ``("core", rows, cols,
    spd)`` for the dense remainder solved as one block (always last).
    """

    def __init__(self, steps: Iterable[tuple]) -> None:
        self.steps = tuple(steps)

    def __repr__(self):
        return f"Plan({self.steps})"


def _eliminate(M, aug, live_rows, cols, naug, rk, ck):
    """Forward elimination with the identity-type pivot block ``M[rk, ck]``: the pivot row is
    scaled, the rows not pivoted yet are cleared in column ``ck`` (in place)."""
    P = inv(M[rk, ck])
    for c in cols:
        if c != ck:
            M[rk, c] = mul(P, M[rk, c])
    for a in range(naug):
        aug[rk, a] = mul(P, aug[rk, a])
    M[rk, ck] = Blk.eye(M[rk, ck].r)
    for r in live_rows:
        if r == rk or M[r, ck].k == ZERO:
            continue
        f = M[r, ck]
        for c in cols:
            if c != ck and M[rk, c].k != ZERO:
                M[r, c] = sub(M[r, c], mul(f, M[rk, c]))
        for a in range(naug):
            if aug[rk, a].k != ZERO:
                aug[r, a] = sub(aug[r, a], mul(f, aug[rk, a]))
        M[r, ck] = Blk.zero(M[r, ck].r, M[r, ck].c)


def _structurally_nonsingular(blocks, rsz, csz):
    """Perfect matching of the scalar pattern of a block matrix (zero / diagonal / dense)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import structural_rank

    m = sum(rsz)
    n = sum(csz)
    if m != n:
        return False
    pat = np.zeros((m, n), bool)
    r0 = 0
    for i, ri in enumerate(rsz):
        c0 = 0
        for j, cj in enumerate(csz):
            b = blocks[i][j]
            if b.k == EYE:
                pat[r0 : r0 + ri, c0 : c0 + cj] |= np.eye(ri, cj, dtype=bool)
            elif b.k == DENSE:
                pat[r0 : r0 + ri, c0 : c0 + cj] = True
            c0 += cj
        r0 += ri
    return structural_rank(csr_matrix(pat.astype(np.int8))) == n


def plan(
    M: Mapping[tuple[Any, Any], Blk],
    rows: Sequence[tuple[Any, int]],
    cols: Sequence[tuple[Any, int]],
    naug: int,
    spd_cores: Collection[tuple[Any, Any]] = (),
    label: str = "body",
) -> Plan:
    """Choose the static pivot sequence of a local system by symbolic elimination.

    ``M[(r, c)]``: symbolic :class:`Blk` of row group ``r`` and column group ``c``; ``rows`` /
    ``cols``: ordered lists of ``(key, size)``; ``naug`` augmented columns (right-hand sides).
    Identity blocks are taken as pivots first, cheapest by the block Markowitz count
    ``(row blocks - 1) * (column blocks - 1)`` among the rows and columns not pivoted yet
    (ties: fewer other unknowns in the row); what remains is solved as one dense core.
    ``spd_cores``: ``(row, col)`` pairs whose single-block core is symmetric positive definite.
    Raises ``ValueError`` when the rows do not determine the columns.
    """
    M = dict(M)
    rkeys = [r for r, _ in rows]
    ckeys = [c for c, _ in cols]
    rsize, csize = dict(rows), dict(cols)
    aug = {(r, a): Blk.dense(None, rsize[r], 1) for r in rkeys for a in range(naug)}
    live_r, live_c = list(rkeys), list(ckeys)
    steps = []
    while live_c:
        best = None
        for r in live_r:
            for c in live_c:
                if M[r, c].k != EYE:
                    continue
                nr = sum(1 for cc in live_c if M[r, cc].k != ZERO) - 1
                nc = sum(1 for rr in live_r if M[rr, c].k != ZERO) - 1
                # Markowitz count, then rows with fewer other unknowns first: a row left with
                # its pivot alone is a forward substitution and fills nothing, also in the
                # parent's rows that the column reaches
                cost = (nr * nc, nr, nc)
                if best is None or cost < best[0]:
                    best = (cost, r, c)
        if best is None:
            break
        _, r, c = best
        _eliminate(M, aug, live_r, ckeys, naug, r, c)
        steps.append(("pivot", r, c))
        live_r.remove(r)
        live_c.remove(c)
    if live_c or live_r:
        nr, nc = sum(rsize[r] for r in live_r), sum(csize[c] for c in live_c)
        if nr != nc:
            raise ValueError(
                f"{label}: after its identity pivots, {nr} rows remain for {nc} unknowns"
            )
        blocks = [[M[r, c] for c in live_c] for r in live_r]
        if not _structurally_nonsingular(
            blocks, [rsize[r] for r in live_r], [csize[c] for c in live_c]
        ):
            raise ValueError(f"{label}: the remaining rows are structurally singular")
        spd = len(live_r) == 1 and len(live_c) == 1 and (live_r[0], live_c[0]) in spd_cores
        steps.append(("core", tuple(live_r), tuple(live_c), spd))
    return Plan(steps)


class Factor:
    """Result of :func:`factor`: the scaled pivot rows ``U[(row, col)]`` (identity at the
    pivot), their right-hand sides ``aug[(row, a)]``, and the core's solution ``core[col]``
    (a list over the augmented columns)."""

    def __init__(self, U: dict, aug: dict, core: dict) -> None:
        self.U, self.aug, self.core = U, aug, core


jax.tree_util.register_pytree_node(
    Factor,
    lambda f: ((f.U, f.aug, f.core), None),
    lambda _, ch: Factor(*ch),
)


def factor(
    plan_: Plan,
    M: Mapping[tuple[Any, Any], Blk],
    aug: Mapping[tuple[Any, int], Blk],
    rows: Sequence[tuple[Any, int]],
    cols: Sequence[tuple[Any, int]],
    naug: int,
) -> Factor:
    """Forward elimination of a :class:`Plan` on numeric blocks (the L part; pivot rows kept
    as the U part), then the dense core solved for the augmented columns."""
    M = dict(M)
    aug = dict(aug)
    rkeys = [r for r, _ in rows]
    ckeys = [c for c, _ in cols]
    csize = dict(cols)
    live = list(rkeys)
    U, Uaug, core = {}, {}, {}
    for st in plan_.steps:
        if st[0] == "pivot":
            _, r, c = st
            _eliminate(M, aug, live, ckeys, naug, r, c)
            live.remove(r)
            for cc in ckeys:
                if cc != c and M[r, cc].k != ZERO:
                    U[r, cc] = M[r, cc]
            for a in range(naug):
                Uaug[r, a] = aug[r, a]
        else:
            _, cr, cc, spd = st
            like = next(
                (
                    M[r, c].val
                    for r in cr
                    for c in cc
                    if M[r, c].k == DENSE and M[r, c].val is not None
                ),
                None,
            )
            if len(cr) == 1 and len(cc) == 1:
                C = M[cr[0], cc[0]]
            else:
                C = Blk.dense(
                    jnp.concatenate(
                        [jnp.concatenate([_full(M[r, c], like) for c in cc], -1) for r in cr], -2
                    )
                )
            Ci = inv(C, spd=spd)
            for a in range(naug):
                parts = [aug[r, a] for r in cr]
                if len(parts) == 1:
                    rhs = parts[0]
                elif all(p.k == ZERO for p in parts):
                    rhs = Blk.zero(sum(p.r for p in parts), parts[0].c)
                else:
                    rhs = Blk.dense(jnp.concatenate([_full(p, like) for p in parts], -2))
                x = mul(Ci, rhs)
                c0 = 0
                for c in cc:
                    core.setdefault(c, [None] * naug)[a] = _rows(x, c0, csize[c])
                    c0 += csize[c]
    return Factor(U, Uaug, core)


def back_substitute(
    plan_: Plan,
    fac: Factor,
    x_core: Mapping[Any, Blk],
    rhs_of_row: Callable[[Any], Blk],
    only: Iterable[Any] | None = None,
) -> dict[Any, Blk]:
    """Back-substitution in reverse pivot order: ``x_c = rhs(r) - sum U[r, c'] x_c'`` for each
    pivot ``(r, c)``; ``x_core[c]`` the core's solution; ``rhs_of_row(r)`` the pivot row's
    (scaled) right-hand side as a block. ``only``: the columns wanted (the dependencies are
    computed, nothing else). Returns ``{col: block}``."""
    x = dict(x_core)
    pivots = [st for st in plan_.steps if st[0] == "pivot"]
    row_of = {c: r for _, r, c in pivots}
    order = [c for _, _, c in pivots]

    def need(c, acc):
        if c in acc or c in x_core:
            return
        acc.add(c)
        r = row_of[c]
        for rr, cc in fac.U:
            if rr == r:
                need(cc, acc)

    wanted = set(order) if only is None else set()
    if only is not None:
        for c in only:
            need(c, wanted)
    for c in reversed(order):
        if c not in wanted:
            continue
        r = row_of[c]
        val = rhs_of_row(r)
        for (rr, cc), Ub in fac.U.items():
            if rr == r:
                val = sub(val, mul(Ub, x[cc]))
        x[c] = val
    return x


def _full(b, like):
    if b.k == DENSE:
        return b.val
    base = b.materialize(like=like)
    if like is not None:
        base = jnp.broadcast_to(base, like.shape[:-2] + base.shape)
    return base


def _rows(x, r0, n):
    if x.k == ZERO:
        return Blk.zero(n, x.c)
    if x.k == EYE:
        raise ValueError("identity block split")  # pragma: no cover - cores are dense
    if x.val is None:
        return Blk.dense(None, n, x.c)
    return Blk.dense(x.val[..., r0 : r0 + n, :])

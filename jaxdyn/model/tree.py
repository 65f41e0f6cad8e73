"""Level-by-level tree passes over the static topology (the only loops in jaxdyn's algorithms).

The loops run over depth levels in Python at trace time; inside a level everything is one
vectorised expression over the level's bodies. Going out, a level gathers from the previous one
(``parent_local``); coming back, it segment-sums into it.

Long runs of levels with the same structure -- serial chains: a pendulum, a long limb or
snake -- are not unrolled: :func:`forward_pass` / :func:`backward_pass` evaluate them with one
``lax.scan`` whose body is the level step, so the compiled program (and the compile time) no
longer grows with the chain's length. A run qualifies when at least :data:`MIN_SCAN_RUN`
consecutive levels have the same bodies-per-group layout and, after its first level, the same
``parent_local``; shorter runs stay unrolled (XLA fuses across unrolled levels).

The engine is :func:`walk` (the one loop over levels); :func:`forward_pass` /
:func:`backward_pass` run it over a topology's levels. Every level pass of the (unclustered)
algorithms goes through it: kinematics, the velocity / acceleration accumulations of RNEA and
IDSVA (:func:`forward_accumulate`), the composite sums of RNEA and CRBA
(:func:`backward_accumulate`), the articulated-inertia pass and the two ABA sweeps
(:mod:`jaxdyn.algorithms.aba`, which ``minv`` and AZA call with unit / given torques), the
packed articulated inertias of :mod:`jaxdyn.osim.inertia`, the constraint-row sweeps of
PV-OSIM, EFPA and PV-OSIMr (:mod:`jaxdyn.osim`: their per-level row plans are the passes'
``static`` values) and Nori's walks over its own level order (:mod:`jaxdyn.nori.walk`, which
calls :func:`walk` with its levels and partition). The parent/child helpers
(:func:`gather_parent`, :func:`sum_into_parents`, :func:`sum_into_parents_gathered`) live
here too.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import joints
from ..backend import fusion

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TypeAlias

    from jax import Array

    from .model import Level, Topology

    #: what the level passes walk: a :class:`~jaxdyn.model.model.Topology`, or any object with
    #: its ``levels`` (a cluster topology of :mod:`jaxdyn.clusters`, which this layer does not
    #: import; ``Topology``'s fields are set at run time, so no protocol describes both)
    LevelTree: TypeAlias = Any

#: Shortest run of identically structured consecutive levels evaluated by ``lax.scan``.
#: Bundled robots (depth <= 12, varying level widths) stay fully unrolled; an ``n``-link chain
#: with ``n >= MIN_SCAN_RUN`` compiles in a time independent of ``n``.
MIN_SCAN_RUN = 8


def level_v0(level: Level) -> int:
    """First velocity coordinate of a level."""
    return level.groups[0].v0


def level_v1(level: Level) -> int:
    """One past the last velocity coordinate of a level."""
    return level.groups[-1].v1


def _signature(level):
    b0, v0 = level.b0, level_v0(level)
    return (
        level.n,
        tuple((g.kind, g.b0 - b0, g.b1 - b0, g.v0 - v0, g.v1 - v0) for g in level.groups),
    )


@functools.lru_cache(maxsize=256)
def run_partition(signatures: tuple, parents: tuple, min_run: int) -> tuple:
    """Partition of levels into ``(la, lb)`` ranges from their hashable ``signatures`` and
    ``parents`` (each level's ``parent_local`` as a tuple): a run joins consecutive levels of
    one signature whose parent maps (after the run's first level) agree, and is kept whole
    when at least ``max(min_run, 2)`` long, split into single levels otherwise. Shared by
    :func:`segments` and :func:`jaxdyn.nori.structure.segments`."""
    nl, segs, la = len(signatures), [], 0
    while la < nl:
        lb = la + 1
        while (
            lb < nl
            and signatures[lb] == signatures[la]
            and (lb == la + 1 or parents[lb] == parents[la + 1])
        ):
            lb += 1
        if lb - la >= max(min_run, 2):
            segs.append((la, lb))
        else:
            segs.extend((li, li + 1) for li in range(la, lb))
        la = lb
    return tuple(segs)


@functools.lru_cache(maxsize=256)
def _segments(topo, min_run: int, keys: tuple | None = None):
    """:func:`run_partition` of ``topo``'s levels; ``keys``: one more hashable key per level
    (:func:`static_key` of a pass's static values) that a run's levels must share too."""
    levels = topo.levels
    signatures = tuple(_signature(lv) for lv in levels)
    if keys is not None:
        signatures = tuple(zip(signatures, keys, strict=True))
    return run_partition(
        signatures, tuple(tuple(int(x) for x in lv.parent_local) for lv in levels), min_run
    )


def segments(topo: Topology) -> tuple:
    """Partition of the levels into ``(la, lb)`` ranges: single levels (``lb = la + 1``),
    unrolled, and runs (``lb - la >= MIN_SCAN_RUN``) evaluated with ``lax.scan``."""
    return _segments(topo, int(MIN_SCAN_RUN))


def _concat_levels(*xs):
    """Levels' values joined on their leading axis: in numpy when they all are numpy (constants
    such as Minv's unit torques, one per level: one constant in the trace, where
    ``jnp.concatenate`` traced an operation taking one operand per level of a long chain)."""
    if all(isinstance(x, np.ndarray) for x in xs):
        return np.concatenate(xs, 0)
    return jnp.concatenate(xs, 0)


class LevelSeq:
    """Per-level results of a pass: ``seq[li]`` is level ``li``'s value (a pytree).

    Levels of a scanned run are stored stacked (leading axis: the run's levels), so consumers
    that scan the same run again take them without re-stacking (:meth:`stack`); indexing one
    level slices it out (what the unrolled consumers do).
    """

    def __init__(
        self,
        nl: int,
        single: dict[int, Any] | None = None,
        blocks: list[tuple[int, int, Any]] | None = None,
    ) -> None:
        self.nl = nl
        self.single = {} if single is None else single  # li -> tree
        self.blocks = [] if blocks is None else blocks  # (la, lb, stacked tree)

    @classmethod
    def of(cls, x: LevelSeq | Sequence[Any]) -> LevelSeq:
        """A :class:`LevelSeq` as is; a list/tuple with one entry per level wrapped."""
        if isinstance(x, LevelSeq):
            return x
        return cls(len(x), dict(enumerate(x)))

    def __len__(self):
        return self.nl

    def __iter__(self):
        return (self[i] for i in range(self.nl))

    def __getitem__(self, li):
        if li < 0:
            li += self.nl
        if li in self.single:
            return self.single[li]
        for la, lb, t in self.blocks:
            if la <= li < lb:
                return jax.tree_util.tree_map(lambda x: x[li - la], t)
        raise IndexError(f"level {li} out of range")

    def field(self, i: int) -> LevelSeq:
        """The per-level ``i``-th component of tuple-valued levels."""
        return LevelSeq(
            self.nl,
            {k: v[i] for k, v in self.single.items()},
            [(a, b, t[i]) for a, b, t in self.blocks],
        )

    def stack(self, la: int, lb: int) -> Any:
        """Levels ``[la, lb)`` stacked along a new leading axis."""
        pieces, li = [], la
        while li < lb:
            if li in self.single:
                pieces.append(jax.tree_util.tree_map(lambda x: x[None], self.single[li]))
                li += 1
                continue
            ba, bb, t = next(blk for blk in self.blocks if blk[0] <= li < blk[1])
            end = min(bb, lb)
            pieces.append(
                t
                if (li, end) == (ba, bb)
                else jax.tree_util.tree_map(lambda x: x[li - ba : end - ba], t)
            )
            li = end
        if len(pieces) == 1:
            return pieces[0]
        return jax.tree_util.tree_map(_concat_levels, *pieces)

    def flat(self) -> Any:
        """Concatenation over all levels, in order, of per-level values whose leading axis runs
        over the level's bodies (or coordinates): ``(nb, ...)`` (or ``(nv, ...)``)."""
        starts = {li: ("s", v) for li, v in self.single.items()}
        for la, _lb, t in self.blocks:
            starts[la] = ("b", t)
        pieces = []
        for li in sorted(starts):
            kind, v = starts[li]
            pieces.append(
                v
                if kind == "s"
                else jax.tree_util.tree_map(
                    lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:]), v
                )
            )
        if len(pieces) == 1:
            return pieces[0]
        return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs, 0), *pieces)


def _take(topo, spec, la, lb, stacked):
    """Inputs of levels ``[la, lb)``: ``("body", x (nb, ...))``, ``("dof", x (nv, ...))``,
    ``("level", LevelSeq)`` or ``("const", x)``; stacked along a new axis for a scan."""
    kind, x = spec
    if x is None or kind == "const":
        return x
    if kind == "level":
        return x.stack(la, lb) if stacked else x[la]
    lv = topo.levels
    a, b = (
        (lv[la].b0, lv[lb - 1].b1) if kind == "body" else (level_v0(lv[la]), level_v1(lv[lb - 1]))
    )
    y = x[a:b]
    return y.reshape((lb - la, (b - a) // (lb - la)) + y.shape[1:]) if stacked else y


def walk(
    levels: Sequence,
    segs: Sequence[tuple[int, int]],
    step: Callable[[int, Any, Any], tuple[Any, Any]],
    take: Callable[[int, int, bool], Any],
    carry: Any = None,
    reverse: bool = False,
    last_single: bool = False,
) -> tuple[Any, LevelSeq]:
    """The level engine: ``carry, out = step(li, carry, x)`` for every level, root to leaves
    (or leaves to root with ``reverse``); every level pass of jaxdyn runs through it.

    ``levels`` are static level descriptions (only their number is used here) and ``segs``
    their partition into ``(la, lb)`` ranges (:func:`run_partition`): single levels, unrolled,
    and runs of identically structured levels evaluated by one ``lax.scan``.
    ``take(la, lb, stacked)`` returns the inputs of level ``la`` (``stacked=False``) or of the
    levels ``[la, lb)`` stacked on a new leading axis (the scan's ``xs``). ``step`` receives
    the index of the level it computes; inside a scanned run, the index of the run's template
    level (every level of the run has its structure): the second level of a run going out
    (the first is evaluated alone, its carry comes from a level of another structure), the
    first coming back (the last, deepest, is evaluated alone). ``last_single`` (outward only):
    the last level of a run is evaluated alone too (for steps whose inputs depend on the next
    level, which for that level lies outside the run).

    Returns ``(carry, LevelSeq of out)``."""
    out = LevelSeq(len(levels))

    def single(li, carry):
        carry, out.single[li] = step(li, carry, take(li, li + 1, False))
        return carry

    def scan(la, lb, tmpl, carry):
        carry, ys = jax.lax.scan(
            lambda c, x: step(tmpl, c, x), carry, take(la, lb, True), reverse=reverse
        )
        out.blocks.append((la, lb, ys))
        return carry

    if not reverse:
        for la, lb in segs:
            carry = single(la, carry)
            end = lb - 1 if (last_single and lb - la > 1) else lb
            if end - (la + 1) >= 1:
                carry = scan(la + 1, end, la + 1, carry)
            if end < lb:
                carry = single(end, carry)
        return carry, out
    for la, lb in reversed(segs):
        carry = single(lb - 1, carry)
        if lb - la > 1:
            carry = scan(la, lb - 1, la, carry)
    return carry, out


def static_key(x: object) -> object:
    """A hashable, comparable key of a static per-level value (numbers, strings, ``None``,
    numpy arrays, and tuples / lists / dicts of them), for :func:`run_partition`."""
    if isinstance(x, np.ndarray):
        return ("nd", x.shape, x.dtype.str, x.tobytes())
    if isinstance(x, dict):
        return ("dict",) + tuple((k, static_key(v)) for k, v in sorted(x.items()))
    if isinstance(x, (tuple, list)):
        return ("seq",) + tuple(static_key(v) for v in x)
    return x


def _topo_pass(topo, step, inputs, carry, static, reverse):
    levels = topo.levels
    nl = len(levels)
    if static is None:
        segs = segments(topo)
    else:  # a run only where the levels' static values agree too
        segs = _segments(topo, int(MIN_SCAN_RUN), tuple(static_key(x) for x in static))

    def level_step(li, c, x):
        child = (levels[li + 1] if li + 1 < nl else None) if reverse else None
        if static is None:
            return step(levels[li], child, c, x)
        return step(levels[li], child, c, x, static[li])

    def take(la, lb, stacked):
        return tuple(_take(topo, s, la, lb, stacked) for s in inputs)

    return walk(levels, segs, level_step, take, carry, reverse)


def forward_pass(
    topo: LevelTree,
    step: Callable[..., tuple[Any, Any]],
    inputs: Sequence[tuple[str, Any]],
    carry: Any = None,
    static: Sequence[Any] | None = None,
) -> tuple[Any, LevelSeq]:
    """Outward pass: ``carry, out = step(level, None, carry, level_inputs)`` from the root
    level (``carry`` is ``None`` there, unless given) to the leaves; ``inputs`` as in
    :func:`_take`.

    Runs of identically structured levels (:func:`segments`) go through ``lax.scan``, with
    their second level as the structural template (:func:`walk`).

    ``static``: optional per-level static values (a sequence, one per level: index plans
    that differ from level to level, such as the constraint rows a level carries in
    :mod:`jaxdyn.osim`); the step then receives its level's as a fifth argument, and a run
    is scanned only where these agree (:func:`static_key`) besides the structure.
    Returns ``(carry, LevelSeq of out)``."""
    return _topo_pass(topo, step, inputs, carry, static, reverse=False)


def backward_pass(
    topo: LevelTree,
    step: Callable[..., tuple[Any, Any]],
    inputs: Sequence[tuple[str, Any]],
    carry: Any = None,
    static: Sequence[Any] | None = None,
) -> tuple[Any, LevelSeq]:
    """Inward pass: ``carry, out = step(level, child_level, carry, level_inputs)`` from the
    deepest level (``carry`` -- unless given -- and ``child_level`` are ``None`` there) to
    the root; ``carry`` holds the values of ``child_level``. Runs go through ``lax.scan`` and
    ``static`` is as in :func:`forward_pass`. Returns ``(carry, LevelSeq of out)``."""
    return _topo_pass(topo, step, inputs, carry, static, reverse=True)


def _is_identity(idx, n_parent):
    return len(idx) == n_parent and bool(np.all(idx == np.arange(n_parent)))


@functools.cache
def _pieces(idx: tuple, n_parent: int, by_parent: bool):
    """A static parent map as runs of slices: ``((p0, m, c0, k), ...)`` where ``m`` consecutive
    parents ``p0..p0+m-1`` have ``k`` children each, contiguous from child ``c0`` (child
    ``c0 + j k + i`` is the ``i``-th child of parent ``p0 + j``). ``by_parent=False``: the runs
    cover the children in their order (for gathers; ``k >= 1``); ``True``: the parents in
    theirs (for sums; ``k = 0`` for a childless run), or ``None`` when some parent's children
    are not contiguous."""
    ix = np.asarray(idx, np.int64)
    if by_parent:
        runs = []
        for p in range(n_parent):
            kids = np.nonzero(ix == p)[0]
            k = len(kids)
            if k and kids[-1] - kids[0] != k - 1:
                return None
            c0 = int(kids[0]) if k else 0
            last = runs[-1] if runs else None
            if last and last[3] == k and (k == 0 or last[2] + last[1] * k == c0):
                runs[-1] = (last[0], last[1] + 1, last[2], k)
            else:
                runs.append((p, 1, c0, k))
        return tuple(runs)
    runs, c = [], 0
    while c < len(ix):
        p, k = int(ix[c]), 1
        while c + k < len(ix) and ix[c + k] == p:
            k += 1
        last = runs[-1] if runs else None
        if last and last[3] == k and last[0] + last[1] == p and last[2] + last[1] * k == c:
            runs[-1] = (last[0], last[1] + 1, last[2], k)
        else:
            runs.append((p, 1, c, k))
        c += k
    return tuple(runs)


def _slice_plan(idx, n_parent: int, by_parent: bool):
    """:func:`_pieces` of the parent map ``idx`` when it is short enough to beat a gather /
    incidence product (a plan of many one-row pieces is a long concatenation), else ``None``."""
    pieces = _pieces(tuple(int(i) for i in idx), n_parent, by_parent)
    return pieces if pieces is not None and len(pieces) <= max(8, len(idx) // 2) else None


def gather_parent(prev: Array | None, level: Level, root: Array | None) -> Array:
    """Values of the parents of ``level``'s bodies; ``root`` (broadcast) at depth 0.

    Bodies are sorted by joint kind, then parent, inside a level (``jaxdyn.model.model``), so
    the gather is a few slices, each parent's row broadcast over its children: under
    ``jax.vmap`` these fuse into their consumers, where a gather is a kernel of its own
    (measured with :func:`sum_into_parents`)."""
    if prev is None:
        assert root is not None, "gather_parent: a root value is needed at depth 0"
        return jnp.broadcast_to(root, (level.n,) + root.shape)
    idx = level.parent_local
    if _is_identity(idx, prev.shape[0]):
        return prev
    if prev.shape[0] == 1:
        return jnp.broadcast_to(prev, (level.n,) + prev.shape[1:])
    pieces = _slice_plan(idx, prev.shape[0], False)
    if pieces is None:
        return prev[idx]
    rest = prev.shape[1:]
    parts = []
    for p0, m, _, k in pieces:
        x = prev[p0 : p0 + m]
        if k > 1:
            x = jnp.broadcast_to(x[:, None], (m, k) + rest).reshape((m * k,) + rest)
        parts.append(x)
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)


def _sum_strided(x, c0, m, k):
    """Rows ``c0 + j k + i`` of ``x`` summed over ``i < k``, for ``j < m``: ``k`` strided
    slices added."""
    out = x[c0 : c0 + m * k : k]
    for i in range(1, k):
        out = out + x[c0 + i : c0 + m * k : k]
    return out


def sum_rows(x: Array) -> Array:
    """``jnp.sum(x, 0)`` as the slice adds of :func:`_sum_strided` (as the parent sums use),
    which XLA fuses into the producers; a reduce over the bodies axis could become a YNNPACK
    reduction kernel of its own, twice as slow (talos_full ``center_of_mass`` under
    ``jax.vmap``; ``docs/design-measurements.md``)."""
    if x.shape[0] == 0:
        return jnp.zeros(x.shape[1:], x.dtype)
    return _sum_strided(x, 0, 1, x.shape[0])[0]


def sum_into_parents(x: Array, level: Level, n_parent: int) -> Array:
    """Sum the per-body ``x`` of ``level`` into the ``n_parent`` bodies of the level above.

    Inside a level bodies are sorted by joint kind, then parent (``jaxdyn.model.model``), so
    the children of one parent are contiguous unless they mix joint kinds, and the sum is a few
    slices, reshapes and sums, concatenated: they fuse with their producers and consumers.
    Against the product with the ``(n_parent, n)`` incidence matrix used before (one dot
    kernel, with the batch axis moved behind the body axis under ``jax.vmap``), with
    :func:`gather_parent`'s slices too, every algorithm got faster on talos_full, batched and
    single evaluations (fewer kernels); solo12 (levels of one parent or one child each)
    unchanged (``docs/design-measurements.md``). Parent maps that are not contiguous
    (children of mixed joint kinds, cluster views) keep the incidence product; a scatter-add
    would be a serial loop on XLA:CPU.
    """
    idx = level.parent_local
    if _is_identity(idx, n_parent):
        return x
    # slabs of at least a 6x6 block per child: explicit adds of (strided) slices, which fuse
    # with the neighbours; a reduce over the children axis became a slower YNNPACK reduction
    # kernel (RNEA's 6-vectors were faster as a reduce on solo12)
    adds = int(np.prod(x.shape[1:])) >= 36
    if n_parent == 1:
        return _sum_strided(x, 0, 1, level.n) if adds else jnp.sum(x, 0, keepdims=True)
    pieces = _slice_plan(idx, n_parent, True)
    if pieces is None:
        P = np.zeros((n_parent, level.n), np.float64)
        P[idx, np.arange(level.n)] = 1.0
        y = jnp.asarray(P, x.dtype) @ x.reshape(level.n, -1)
        return y.reshape((n_parent,) + x.shape[1:])
    rest = x.shape[1:]
    parts = []
    for _, m, c0, k in pieces:
        if k == 0:
            parts.append(jnp.zeros((m,) + rest, x.dtype))
        elif k == 1:
            parts.append(x[c0 : c0 + m])
        elif adds:
            parts.append(_sum_strided(x, c0, m, k))
        else:
            parts.append(jnp.sum(x[c0 : c0 + m * k].reshape((m, k) + rest), 1))
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)


def sum_into_parents_gathered(below: Array, child_level: Level, n_parent: int) -> Array | None:
    """Sum the rows of ``below`` (the bodies of ``child_level``) into their ``n_parent``
    parents, for parent maps whose children are not contiguous (cluster views): a sum of
    static gathers (child slot ``k`` of every parent, a zero row where a parent has fewer
    children), which fuse with the consumer, where the incidence-matrix dot is a kernel of its
    own. Contiguous maps take :func:`sum_into_parents`'s slices."""
    idx = child_level.parent_local
    n = len(idx)
    if n == n_parent and np.array_equal(idx, np.arange(n)):
        return below
    if n_parent == 1 or _slice_plan(idx, n_parent, True) is not None:
        return sum_into_parents(below, child_level, n_parent)
    slots = [[] for _ in range(n_parent)]
    for c, p in enumerate(idx):
        slots[p].append(c)
    kmax = max(len(s) for s in slots)
    if n_parent * kmax > 4 * n:  # a few parents with many children: the dot is cheaper
        return sum_into_parents(below, child_level, n_parent)
    ext = jnp.concatenate([below, jnp.zeros((1,) + below.shape[1:], below.dtype)], 0)
    out = None
    for k in range(kmax):
        sel = np.asarray([s[k] if k < len(s) else n for s in slots], np.int64)
        if np.array_equal(sel, np.arange(n_parent)) and n_parent <= n:
            term = below[:n_parent]
        else:
            term = ext[sel]
        out = term if out is None else out + term
    return out


def forward_accumulate(topo: LevelTree, incr: Array, root: Array, with_parent: bool = False) -> Any:
    """``x_b = x_parent(b) + incr_b`` with ``x_world = root``: sums along the support of each body.

    With ``with_parent=True`` returns ``(x, x_parent)``, each body's parent value too (``root``
    for the bodies at depth 0)."""

    def step(lvl, _, prev, inp):
        par = gather_parent(prev, lvl, root)
        cur = par + inp[0]
        return cur, ((cur, par) if with_parent else cur)

    return forward_pass(topo, step, (("body", incr),))[1].flat()


def backward_accumulate(topo: Topology, x: Array) -> Any:
    """``X_b = x_b + sum_{c child of b} X_c``: sums over the subtree of each body."""

    def step(lvl, child, below, inp):
        cur = inp[0]
        if below is not None:
            cur = cur + sum_into_parents(below, child, lvl.n)
        # each level stored (spatial.store): faster composite inertias in CRBA
        (cur,) = fusion.store(cur, copy=False)
        return cur, cur

    return backward_pass(topo, step, (("body", x),))[1].flat()


def kind_runs(topo: Topology) -> list[tuple[int, int, int, int, int]]:
    """Maximal runs of consecutive bodies sharing a joint kind: ``(kind, b0, b1, v0, v1)``."""
    runs = []
    for lvl in topo.levels:
        for g in lvl.groups:
            if runs and runs[-1][0] == g.kind and runs[-1][2] == g.b0:
                k, b0, _, v0, _ = runs[-1]
                runs[-1] = (k, b0, g.b1, v0, g.v1)
            else:
                runs.append((g.kind, g.b0, g.b1, g.v0, g.v1))
    return runs


def dofs_to_bodies(topo: Topology, x: Array) -> Array:
    """Sum per-coordinate rows ``x (nv, ...)`` into their bodies, ``(nb, ...)``."""
    parts = []
    for kind, b0, b1, v0, v1 in kind_runs(topo):
        k = joints.NV[kind]
        xs = x[v0:v1]
        parts.append(xs if k == 1 else jnp.sum(xs.reshape((b1 - b0, k) + xs.shape[1:]), 1))
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)


def bodies_to_dofs(topo: Topology, x: Array, axis: int = 0) -> Array:
    """Repeat per-body entries of ``x`` along ``axis`` (``nb`` long) for each of the body's
    coordinates (``nv`` long): rows ``(nb, ...) -> (nv, ...)`` by default, component rows
    ``(..., nb) -> (..., nv)`` with ``axis=-1``."""
    if topo.nv == topo.nb:
        return x
    axis %= x.ndim
    parts = []
    for kind, b0, b1, _, _ in kind_runs(topo):
        k = joints.NV[kind]
        xs = jax.lax.slice_in_dim(x, b0, b1, axis=axis)
        if k > 1:
            shape = xs.shape[: axis + 1] + (k,) + xs.shape[axis + 1 :]
            xs = jnp.broadcast_to(jnp.expand_dims(xs, axis + 1), shape)
            xs = xs.reshape(x.shape[:axis] + ((b1 - b0) * k,) + x.shape[axis + 1 :])
        parts.append(xs)
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis)

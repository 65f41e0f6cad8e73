"""Offline structure of ``D(q, v) d = b`` (Nori eq. 6 and 17): rows, variables, orderings.

Everything here is numpy and static, computed once per model and sensor set by
:func:`jaxdyn.nori.build`.

**Variables** (paper §III-A, the set 𝒟): per body ``i``, in body coordinates, the groups
``a_i (6)``, ``f_i (6)``, ``tau_i (n_i)``, ``f^x_i (6)``, ``qdd_i (n_i)``.

**Rows** (the set 𝒞 and the measurement rows): per body, the Newton-Euler rows of eq. (3)
written as ``D d = r`` (``r = -b``)::

    Ra_i:  -a_i + X_i a_λ + S_i qdd_i              = -c_i        (eq. 3a, 5a-b)
    Rf_i:  -f_i + I_i a_i - f^x_i + Σ_j X_j^T f_j  = -ν_i        (eq. 3f, 5c-d)
    Rt_i:  -tau_i + S_i^T f_i (+ armature qdd_i)   = 0           (eq. 3τ, 5e)

(``X_i`` the motion transform from the parent ``λ`` to ``i``, ``X_j^T`` the force transform from
a child ``j`` to ``i``; the world parent's ``a_0 = -a_g`` moves ``X_i a_0`` to the right-hand
side), followed by the rows of the knowns and sensors attached to the body
(:mod:`jaxdyn.nori.sensors`).

**Tree ordering.** Every row refers to the variables of its own body, the parent's ``a_λ``
(``Ra``) and the children's ``f_j`` (``Rf``): at the level of bodies the pattern is the tree.
The static elimination derived from it has two parts:

* *peeling* (Property 1, §IV-C): a body whose joint accelerations are given by its own rows
  and whose parent is peeled (or the world) has ``a_i`` by forward substitution of ``Ra_i``,
  root to leaves -- for inverse dynamics every body, and the rest is lower triangular;
* *inward elimination* (leaves to root, as the ABA of §V-A / Property 2): each body's
  remaining rows are solved for its remaining variables as an affine function of the
  parent's ``a_λ`` (a static block LU whose pivots are chosen by
  :func:`jaxdyn.nori.blocks.plan`), and the parent's ``Rf`` receives the children's
  ``X_j^T f_j``; then an outward back-substitution.

That needs as many rows as remaining unknowns on every body ("square per body"); any other
well-posed system goes to the weighted least-squares estimator (:mod:`jaxdyn.nori.estimate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import joints
from . import blocks as B
from .sensors import COMPONENTS, _Spec

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ..model.model import Model, Topology

A, F, TAU, FX, QDD = range(5)
VAR_NAMES = ("a", "f", "tau", "fx", "qdd")


@dataclass(frozen=True)
class RowGroup:
    """Rows of one body: ``kind`` (``"Ra"``, ``"Rf"``, ``"Rt"`` or a spec kind), ``m`` rows,
    ``terms`` ``((var, coef), ...)`` with ``coef`` ``"I"``, ``"-I"`` or a dense-coefficient key;
    ``spec`` indexes :attr:`NoriSystem.specs` (``-1`` for the dynamics rows); ``yidx`` the
    entries of the spec's flattened value; ``data`` what the coefficient needs (frame index,
    components)."""

    kind: str
    m: int
    terms: tuple
    spec: int = -1
    yidx: tuple = ()
    data: tuple = ()

    @property
    def sig(self) -> tuple:
        return (
            self.kind,
            self.m,
            tuple((v, c if c in ("I", "-I") else "D") for v, c in self.terms),
        )

    def coef(self, var: int) -> str | None:
        for v, c in self.terms:
            if v == var:
                return c
        return None


@dataclass(frozen=True)
class NLevel:
    """Bodies ``[b0, b1)`` of one depth in nori order; ``parent_local`` indexes the previous
    level (``-1`` at depth 0); ``groups``: ``(sig, g0, g1)`` ranges of one body signature."""

    b0: int
    b1: int
    parent_local: np.ndarray
    groups: tuple

    @property
    def n(self) -> int:
        return self.b1 - self.b0


class NoriSystem:
    """A model's Newton-Euler rows plus known and measured rows, analysed offline.

    Built by :func:`jaxdyn.nori.build`; static (hashed by identity), pass it to
    :func:`jaxdyn.nori.solve` / :func:`jaxdyn.nori.estimate` (under ``jit`` as a static
    argument or closed over).

    Attributes: ``specs`` (knowns then sensors), ``n_known``, ``rows[b]`` (the
    :class:`RowGroup` s of body ``b``), ``peeled`` (bodies whose ``a_i`` is found by forward
    substitution), ``square`` (solvable by the tree LU) and ``square_reason``, ``n_rows`` /
    ``n_vars`` (scalar sizes), ``analysis`` (the offline report, see
    :mod:`jaxdyn.nori.analysis`).
    """

    # the fields (set by keyword in __init__, by make_system; the checks and the analysis of
    # jaxdyn.nori.build add theirs)
    name: str
    topo: Topology
    nb: int
    nv: int
    specs: tuple[_Spec, ...]
    n_known: int
    yshapes: tuple[tuple[int, ...], ...]
    rows: tuple[tuple[RowGroup, ...], ...]
    children: tuple[tuple[int, ...], ...]
    armature: bool
    peeled: np.ndarray
    peel_row: np.ndarray
    pstat: tuple
    local: tuple
    square: bool
    square_reason: str | None
    sig_of: np.ndarray
    sig_info: dict
    sig_rep: dict
    order: np.ndarray
    rank: np.ndarray
    levels: tuple[NLevel, ...]
    plans: dict
    col_off: np.ndarray
    row_off: np.ndarray
    rg_off: tuple
    n_vars: int
    n_rows: int
    analysis: Any  # a jaxdyn.nori.analysis.Analysis or None (analysis imports this module)
    structural_rank: int
    numerical_ranks: tuple
    _dense_layout: dict  # cached by jaxdyn.nori.assembly.dense_layout

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)

    def __repr__(self):
        return (
            f"NoriSystem({self.name!r}, nb={self.nb}, vars={self.n_vars}, rows={self.n_rows}, "
            f"knowns={self.n_known}, sensors={len(self.specs) - self.n_known}, "
            f"square={self.square})"
        )

    # ---------------------------------------------------------------- labels
    def var_label(self, b: int, var: int, k: int | None = None) -> str:
        t = self.topo
        n = int(t.nv_j[b])
        if var in (TAU, QDD):
            name = f"{VAR_NAMES[var]}[{t.joint_names[b]}]"
            return name if (k is None or n == 1) else f"{name}[{k}]"
        name = f"{VAR_NAMES[var]}[{t.body_names[b]}]"
        return name if k is None else f"{name}.{COMPONENTS[k]}"

    def column_labels(self) -> list[str]:
        """One label per scalar unknown, in the dense (body-major) column order."""
        out = []
        for b in range(self.nb):
            n = int(self.topo.nv_j[b])
            for var in range(5):
                size = n if var in (TAU, QDD) else 6
                out.extend(self.var_label(b, var, k) for k in range(size))
        return out


def var_size(var: int, n: int) -> int:
    return n if var in (TAU, QDD) else 6


# ----------------------------------------------------------------------------- specs -> rows


def _frame_body(model, spec, frame):
    try:
        f = model.frame_index(frame)
    except (ValueError, TypeError, IndexError) as e:
        raise ValueError(f"nori.build: {spec.label}: {e}") from None
    b = int(model.topo.frame_parent[f])
    if b < 0:
        raise ValueError(
            f"nori.build: {spec.label}: frame {model.frame_names[f]!r} is fixed to the world "
            f"(no body carries it): nothing of the dynamics acts there"
        )
    return f, b


def _joint_body(model, spec, joint):
    t = model.topo
    if isinstance(joint, str):
        if joint not in t.joint_names:
            raise ValueError(
                f"nori.build: {spec.label}: no moving joint named {joint!r}; joints are "
                f"{list(t.joint_names)}"
            )
        return t.joint_names.index(joint)
    if not 0 <= joint < t.nb:
        raise ValueError(f"nori.build: {spec.label}: joint index {joint} out of range [0, {t.nb})")
    return int(joint)


def _frame_is_body(model, f, b):
    R = np.asarray(model.frame_R[f], np.float64)
    p = np.asarray(model.frame_p[f], np.float64)
    return np.array_equal(R, np.eye(3)) and not np.any(p)


def spec_rows(
    model: Model, spec: Any, si: int
) -> tuple[list[tuple[int, RowGroup]], tuple[int, ...]]:
    """``[(body, RowGroup), ...]`` of one spec (a quantity of :mod:`jaxdyn.nori.sensors`:
    its fields depend on its ``kind``) and the shape of its value ``y``."""
    t = model.topo
    out = []
    kind = spec.kind
    if kind in ("tau", "qdd"):
        var = TAU if kind == "tau" else QDD
        if spec.joint is None:
            for b in range(t.nb):
                v0, n = int(t.v_start[b]), int(t.nv_j[b])
                out.append((b, RowGroup(kind, n, ((var, "I"),), si, tuple(range(v0, v0 + n)))))
            return out, (t.nv,)
        joints_ = spec.joint if isinstance(spec.joint, tuple) else (spec.joint,)
        y0 = 0
        for jt in joints_:
            b = _joint_body(model, spec, jt)
            n = int(t.nv_j[b])
            out.append((b, RowGroup(kind, n, ((var, "I"),), si, tuple(range(y0, y0 + n)))))
            y0 += n
        return out, (y0,)
    if kind == "fx":
        if spec.frame is None:
            for b in range(t.nb):
                out.append((b, RowGroup(kind, 6, ((FX, "I"),), si, tuple(range(6 * b, 6 * b + 6)))))
            return out, (t.nb, 6)
        frames = spec.frame if isinstance(spec.frame, tuple) else (spec.frame,)
        comps = tuple(COMPONENTS.index(c) for c in spec.components)
        k = len(comps)
        for i, fr in enumerate(frames):
            f, b = _frame_body(model, spec, fr)
            if comps == tuple(range(6)) and _frame_is_body(model, f, b):
                coef = "I"
            else:
                coef = "wrench"
            yidx = tuple(range(i * k, i * k + k))
            out.append((b, RowGroup(kind, k, ((FX, coef),), si, yidx, (f, comps))))
        shape = (len(frames), k) if isinstance(spec.frame, tuple) else (k,)
        return out, shape
    if kind == "ft":
        b = _joint_body(model, spec, spec.joint)
        if spec.frame is None:
            f = None
        else:
            f, fb = _frame_body(model, spec, spec.frame)
            if fb != b:
                raise ValueError(
                    f"nori.build: {spec.label}: frame {model.frame_names[f]!r} is on body "
                    f"{t.body_names[fb]!r}, not on the joint's child body {t.body_names[b]!r}"
                )
        coef = "I" if f is None or _frame_is_body(model, f, b) else "wrench"
        data = (f if f is not None else -1, tuple(range(6)))
        return [(b, RowGroup(kind, 6, ((F, coef),), si, tuple(range(6)), data))], (6,)
    if kind in ("acc", "gyro"):
        f, b = _frame_body(model, spec, spec.frame)
        return [(b, RowGroup(kind, 3, ((A, kind),), si, tuple(range(3)), (f,)))], (3,)
    raise ValueError(f"nori.build: unknown quantity {spec!r}")  # pragma: no cover


def dynamics_rows(t: Topology, b: int, armature: bool) -> list[RowGroup]:
    """The three Newton-Euler row groups of body ``b`` (eq. 3)."""
    kind = int(t.kind[b])
    n = int(t.nv_j[b])
    free = kind == joints.FREE
    ra = RowGroup("Ra", 6, ((A, "-I"), (QDD, "I" if free else "S")))
    rf = RowGroup("Rf", 6, ((F, "-I"), (A, "Ib"), (FX, "-I")))
    rt_terms = ((TAU, "-I"), (F, "I" if free else "St"))
    if armature:
        rt_terms = rt_terms + ((QDD, "arm"),)
    rt = RowGroup("Rt", n, rt_terms)
    return [ra, rf, rt]


# ----------------------------------------------------------------------------- the system


def _check_specs(what, specs):
    specs = tuple(specs)
    for s in specs:
        if not isinstance(s, _Spec):
            raise ValueError(
                f"nori.build: {what} must be quantities of jaxdyn.nori (JointTorque, "
                f"JointAcceleration, ExternalWrench, LoadCells, ForceTorque, Accelerometer, "
                f"Gyroscope), got {s!r}"
            )
    return specs


def make_system(
    model: Model,
    known: Iterable[_Spec] = (),
    sensors: Iterable[_Spec] = (),
    name: str | None = None,
) -> NoriSystem:
    """Rows, peeling, signatures, level plan and local pivot plans (no numerical checks)."""
    known = _check_specs("known", known)
    sensors = _check_specs("sensors", sensors)
    specs = known + sensors
    t = model.topo
    nb = t.nb
    if nb == 0:
        raise ValueError(f"nori.build: {t.name} has no moving body: there is nothing to solve")
    armature = getattr(model, "armature", None) is not None
    rows = [dynamics_rows(t, b, armature) for b in range(nb)]
    yshapes = []
    for si, s in enumerate(specs):
        rs, shape = spec_rows(model, s, si)
        yshapes.append(shape)
        for b, rg in rs:
            rows[b].append(rg)
    rows = [tuple(r) for r in rows]
    nv_j = np.asarray(t.nv_j)
    parent = np.asarray(t.parent)
    children = [[] for _ in range(nb)]
    for b in range(nb):
        if parent[b] >= 0:
            children[parent[b]].append(b)

    # --- peeling (Property 1): a_i by forward substitution
    peeled = np.zeros(nb, bool)
    peel_row = -np.ones(nb, np.int64)
    for b in range(nb):  # parents come first
        if parent[b] >= 0 and not peeled[parent[b]]:
            continue
        for k, rg in enumerate(rows[b]):
            if rg.kind == "qdd" and rg.terms == ((QDD, "I"),) and rg.m == nv_j[b]:
                peeled[b] = True
                peel_row[b] = k
                break
    pstat = []
    for b in range(nb):
        if parent[b] < 0:
            pstat.append("world")
        elif peeled[parent[b]]:
            pstat.append("peeled")
        else:
            pstat.append("live")

    # --- per-body local systems of the tree LU and their squareness
    square_reason = None
    local = []
    for b in range(nb):
        rkeys = [k for k in range(len(rows[b])) if not (peeled[b] and k in (0, peel_row[b]))]
        cvars = [v for v in range(5) if not (peeled[b] and v in (A, QDD))]
        nr = sum(rows[b][k].m for k in rkeys)
        nc = sum(var_size(v, int(nv_j[b])) for v in cvars)
        if nr != nc and square_reason is None:
            square_reason = (
                f"body {t.body_names[b]!r} has {nr} rows for {nc} unknowns (the tree LU "
                f"solves each body's rows for its own variables); use nori.estimate"
            )
        local.append((tuple(rkeys), tuple(cvars)))

    # --- signatures
    sig_of = []
    sig_key = {}
    for b in range(nb):
        key = (
            int(t.kind[b]),
            int(nv_j[b]),
            tuple(rg.sig for rg in rows[b]),
            bool(peeled[b]),
            int(peel_row[b]),
            pstat[b],
        )
        sig_of.append(sig_key.setdefault(key, len(sig_key)))
    sig_of = np.asarray(sig_of)
    sig_info = {sid: key for key, sid in sig_key.items()}

    # --- nori order: by depth, then signature, then jaxdyn index
    depth = np.asarray(t.depth)
    order = np.lexsort((np.arange(nb), sig_of, depth))
    rank = np.empty(nb, np.int64)
    rank[order] = np.arange(nb)
    levels = []
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2))
    for d in range(len(bounds) - 1):
        b0, b1 = int(bounds[d]), int(bounds[d + 1])
        if d == 0:
            pl = -np.ones(b1 - b0, np.int64)
        else:
            pl = rank[parent[order[b0:b1]]] - levels[-1].b0
        groups = []
        for i in range(b0, b1):
            s = int(sig_of[order[i]])
            if groups and groups[-1][0] == s:
                groups[-1][2] = i + 1
            else:
                groups.append([s, i, i + 1])
        levels.append(NLevel(b0, b1, pl, tuple(tuple(g) for g in groups)))

    # --- local pivot plans of the tree LU, one per signature
    plans = {}
    if square_reason is None:
        for b in range(nb):
            s = int(sig_of[b])
            if s in plans:
                continue
            try:
                plans[s] = local_plan(
                    rows[b],
                    local[b],
                    int(nv_j[b]),
                    pstat[b] == "live",
                    label=f"body {t.body_names[b]!r}",
                )
            except ValueError as e:
                square_reason = f"{e}; use nori.estimate"
                plans = {}
                break

    # --- dense layout (body-major)
    col_off = np.zeros(nb + 1, np.int64)
    row_off = np.zeros(nb + 1, np.int64)
    rg_off = []
    for b in range(nb):
        n = int(nv_j[b])
        col_off[b + 1] = col_off[b] + 18 + 2 * n  # a, f, tau, fx, qdd
        offs, r = [], row_off[b]
        for rg in rows[b]:
            offs.append(int(r))
            r += rg.m
        rg_off.append(tuple(offs))
        row_off[b + 1] = r
    return NoriSystem(
        name=name or f"nori({t.name})",
        topo=t,
        nb=nb,
        nv=int(t.nv),
        specs=specs,
        n_known=len(known),
        yshapes=tuple(yshapes),
        rows=tuple(rows),
        children=tuple(tuple(c) for c in children),
        armature=armature,
        peeled=peeled,
        peel_row=peel_row,
        pstat=tuple(pstat),
        local=tuple(local),
        square=square_reason is None,
        square_reason=square_reason,
        sig_of=sig_of,
        sig_info=sig_info,
        sig_rep={s: int(np.nonzero(sig_of == s)[0][0]) for s in sig_info},
        order=order,
        rank=rank,
        levels=tuple(levels),
        plans=plans,
        col_off=col_off,
        row_off=row_off,
        rg_off=tuple(rg_off),
        n_vars=int(col_off[-1]),
        n_rows=int(row_off[-1]),
        analysis=None,
    )


def symbolic_block(coef: str, m: int, size: int) -> B.Blk:
    if coef == "I":
        return B.Blk.eye(m, 1.0)
    if coef == "-I":
        return B.Blk.eye(m, -1.0)
    return B.Blk.dense(None, m, size)


def local_plan(
    rows_b: Sequence[RowGroup],
    local_b: tuple[Sequence[int], Sequence[int]],
    n: int,
    live_parent: bool,
    label: str,
) -> B.Plan:
    """Static pivot plan of one body's rows in the tree LU (symbolic elimination)."""
    rkeys, cvars = local_b
    M = {}
    for k in rkeys:
        rg = rows_b[k]
        for v in cvars:
            c = rg.coef(v)
            if c is None:
                M[k, v] = B.Blk.zero(rg.m, var_size(v, n))
            else:
                M[k, v] = symbolic_block(c, rg.m, var_size(v, n))
    rows = [(k, rows_b[k].m) for k in rkeys]
    cols = [(v, var_size(v, n)) for v in cvars]
    spd = {(k, QDD) for k in rkeys if rows_b[k].kind == "Rt"}
    spd |= {(k, A) for k in rkeys if rows_b[k].kind == "Rf"}
    return B.plan(M, rows, cols, 1 + int(live_parent), spd_cores=spd, label=label)


# ----------------------------------------------------------------------------- level walker


def _level_sig(lvl):
    return (lvl.n, tuple((s, g0 - lvl.b0, g1 - lvl.b0) for s, g0, g1 in lvl.groups))


def segments(system: NoriSystem) -> tuple:
    """Partition of the levels into single levels and scanned runs (as
    :func:`jaxdyn.model.tree.segments`, with the body signatures in the level signature)."""
    from ..model import tree

    sigs = tuple(_level_sig(l) for l in system.levels)
    parents = tuple(tuple(int(x) for x in l.parent_local) for l in system.levels)
    return tree.run_partition(sigs, parents, int(tree.MIN_SCAN_RUN))

"""PV-OSIMr: the Delassus matrix in O(n + m^2).

Reference: A. S. Sathya, W. Decré, J. Swevers, "PV-OSIMr: A Lowest Order Complexity Algorithm
for Computing the Delassus Matrix" (2024), Algorithm 3, eqs. (8)-(19).

World-coordinate form. jaxdyn's articulated-body pass (:func:`jaxdyn.algorithms.aba.
articulated_inertias`) gives, for every joint ``i``, ``U_i = H^A_i S_i^T`` and ``D_i^-1``
(Featherstone's ``U``, ``D``). With everything at the world origin the force propagator of
eq. (8) is ``P_i = 1 - U_i D_i^-1 S_i`` and needs no transform, and
``^{π(i)}Ω_i = S_i^T D_i^-1 S_i`` (eq. 10).

The sweeps, level-vectorised (a Python loop over the static depth levels / chain steps only):

1. backward over the *active* links (those supporting a constraint), Alg. 3 lines 4-11: every
   link ``i`` carries the extended force propagator ``E_i = ^{π(i)}P_{d(i)}`` and the inverse
   inertia ``W_i = ^{π(i)}Ω_{d(i)}`` of its segment, from the segment's start ``d(i)`` up to
   ``i``: ``E_i = P_i ^iP_{d(i)}``, ``W_i = ^iΩ_{d(i)} + ^iP_{d(i)}^T S_i^T D_i^-1 S_i
   ^iP_{d(i)}`` (lines 9-10, eq. 16). Segments start at links of ``N`` with ``1`` and ``0``
   (line 7), and at leaf end effectors with ``K_e^T`` (``6 x m_e``) when ``m_e < 6`` (line 4;
   with ``1`` otherwise, so several constraints on one link, e.g. four 3D points of a sole,
   still propagate at most 6 columns). Only ``6 x w`` matrices (``w <= 6``) travel, never
   ``m``-row ones; each level is split into streams of equal width ``w``;
2. limited forward sweep over ``N`` (line 13, eq. 18):
   ``^0Ω_j = W_top + E_top^T ^0Ω_{Nanc(j)} E_top`` with ``top`` the segment's last link; a leaf
   end effector gets ``Ω_e`` the same way (in constraint space for ``K``-started segments);
3. limited backward sweep over ``N`` per constraint row (line 16, eq. 19): the constraint
   force of row ``r`` propagated to each ``N`` ancestor of its link, ``c ← E_top c``;
4. assembly (lines 17-20, eq. 17): ``Λ^-1[r, s] = c_r^{cca} · ^0Ω_{cca} c_s^{cca}`` with
   ``cca`` the closest common ancestor of the two constrained links, or ``Ω_e[r, s]`` for two
   rows of one ``K``-started leaf (one gather over the ``m (m + 1) / 2`` pairs, mirrored).

The rows ``k_r`` of the constraints act on world-origin spatial accelerations
(:func:`jaxdyn.constraints.rows_from_placements`).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from .. import joints
from ..spatial import mm, mv
from .structure import structure as get_structure


class Plan:
    """Static index plan of PV-OSIMr for one ``(topo, constraints)``."""

    def __init__(self, topo, constraints):
        st = get_structure(topo, constraints)
        lay = st.layout
        self.st = st
        nb = topo.nb
        m = lay.m
        self.m = m
        rows_of = {int(b): np.nonzero(lay.row_body == b)[0] for b in st.E}
        # ------------------------------------------------------------ segments and widths
        start = np.full(nb, -1, np.int64)  # d(b): first link of b's segment
        for b in range(nb - 1, -1, -1):
            if not st.active[b]:
                continue
            if st.in_n[b] or st.is_ee[b]:
                start[b] = b
            else:
                (c,) = st.active_children[b]
                start[b] = start[c]
        kstart = np.zeros(nb, bool)  # leaf end effectors starting with K_e^T
        for b in st.leaf_E:
            kstart[b] = len(rows_of[int(b)]) < 6
        width = np.zeros(nb, np.int64)
        for b in range(nb):
            if st.active[b]:
                d = int(start[b])
                width[b] = len(rows_of[d]) if kstart[d] else 6
        self.width = width
        # E_i is not needed on level 0 (its segments end at the world): skipped there.
        # ------------------------------------------------------------ backward sweep plan
        pos = np.full(nb, -1, np.int64)  # position in its (level, width) stream
        widx = np.full(nb, -1, np.int64)  # position in the concatenation of its width stream
        count = {}
        per_level = []
        for li, lvl in enumerate(topo.levels):
            act = [b for b in range(lvl.b0, lvl.b1) if st.active[b]]
            per = []
            for w in sorted({int(width[b]) for b in act}):
                cb = [b for b in act if width[b] == w]
                for k, b in enumerate(cb):
                    pos[b] = k
                    widx[b] = count.get(w, 0) + k
                count[w] = count.get(w, 0) + len(cb)
                per.append((w, cb))
            per_level.append(per)
        self.count = count
        self.widx = widx
        self.levels = []
        for li, lvl in enumerate(topo.levels):
            classes = []
            for w, cb in per_level[li]:
                groups = []
                for gi, g in enumerate(lvl.groups):
                    sel = [b - g.b0 for b in cb if g.b0 <= b < g.b1]
                    if sel:
                        groups.append((gi, np.asarray(sel, np.int64)))
                src, krows = [], []
                for b in cb:
                    if start[b] == b:
                        if kstart[b]:
                            src.append(-1 - len(krows))
                            krows.append(rows_of[b])
                        else:
                            src.append(-1)
                    else:
                        (c,) = st.active_children[b]
                        src.append(int(pos[c]))
                classes.append(dict(w=w, groups=groups, src=np.asarray(src, np.int64),
                                    krows=np.asarray(krows, np.int64).reshape(-1, w),
                                    need_E=li > 0))
            self.levels.append(classes)
        # ------------------------------------------------------------ N forward sweep (l. 13)
        w6 = widx  # N-node segments have width 6
        self.n_levels = []  # per N-depth: (top index in the width-6 stream, parent slot or -1)
        slot = {}
        k = 0
        maxd = int(st.n_depth.max()) if len(st.N) else -1
        for d in range(maxd + 1):
            nodes = [int(b) for b in st.N if st.n_depth[b] == d]
            tops = [int(w6[st.top[b]]) for b in nodes]
            par = [slot[int(st.nanc[b])] if st.nanc[b] >= 0 else -1 for b in nodes]
            for b in nodes:
                slot[b] = k
                k += 1
            self.n_levels.append((np.asarray(tops, np.int64), np.asarray(par, np.int64)))
        self.n_N = k
        # ------------------------------------------------------------ leaf end effectors
        # per width: (leaf bodies, top index in that width's stream, parent slot or -1)
        self.leaves = {}
        leaf_pos = {}
        for w in sorted({int(width[b]) for b in st.leaf_E}):
            lb = [int(b) for b in st.leaf_E if width[b] == w]
            for i, b in enumerate(lb):
                leaf_pos[b] = i
            self.leaves[w] = (np.asarray([widx[st.top[b]] for b in lb], np.int64),
                              np.asarray([slot[int(st.nanc[b])] if st.nanc[b] >= 0 else -1
                                          for b in lb], np.int64))
        # spatial node table (6x6): [6-wide leaves..., N nodes..., zero]
        n6 = len(self.leaves[6][0]) if 6 in self.leaves else 0
        node_of = {}
        for b in st.leaf_E:
            if not kstart[b]:
                node_of[int(b)] = leaf_pos[int(b)]
        for b, s in slot.items():
            node_of[b] = n6 + s
        self.n_nodes = n6 + k
        # ------------------------------------------------------------ row chains (eq. 19)
        # entries (r, t): the force of row r propagated to the t-th node of its chain
        # (t = 0: its own link; skipped for K-started rows, whose own block is Ω_e itself)
        chains = [st.chain(int(b)) for b in lay.row_body]
        rk = np.asarray([kstart[b] for b in lay.row_body], bool)
        col = np.zeros(m, np.int64)  # column of the row in its leaf's K_e^T
        for b, rows in rows_of.items():
            col[rows] = np.arange(len(rows))
        T = max(len(c) for c in chains)
        entry = {}
        self.steps = []  # per t: dict(rows, src (entry index of (r, t-1)), E (width-6 index),
        #                          kcol {w: (positions, flat column index)}, node)
        n_e = 0
        for tt in range(T):
            rows = [r for r in range(m) if len(chains[r]) > tt and not (tt == 0 and rk[r])]
            if not rows:
                continue
            info = dict(rows=np.asarray(rows, np.int64))
            if tt > 0:
                plain = [i for i, r in enumerate(rows) if not (tt == 1 and rk[r])]
                info["plain"] = np.asarray(plain, np.int64)
                info["src"] = np.asarray([entry[(rows[i], tt - 1)] for i in plain], np.int64)
                info["E"] = np.asarray([widx[st.top[chains[rows[i]][tt - 1]]] for i in plain],
                                       np.int64)
                kc = {}
                for i, r in enumerate(rows):
                    if tt == 1 and rk[r]:
                        w = int(width[lay.row_body[r]])
                        kc.setdefault(w, ([], []))
                        kc[w][0].append(i)
                        kc[w][1].append(widx[st.top[lay.row_body[r]]] * w + col[r])
                info["kcol"] = {w: (np.asarray(a, np.int64), np.asarray(c, np.int64))
                                for w, (a, c) in kc.items()}
            info["node"] = np.asarray([node_of[chains[r][tt]] for r in rows], np.int64)
            for i, r in enumerate(rows):
                entry[(r, tt)] = n_e + i
            n_e += len(rows)
            self.steps.append(info)
        self.n_entries = n_e
        # ------------------------------------------------------------ assembly pairs
        iu, ju = np.triu_indices(m)
        zero = n_e  # index of an appended zero row
        ia = np.full(len(iu), zero, np.int64)
        ib = np.full(len(iu), zero, np.int64)
        same_leaf = np.zeros(len(iu), bool)
        for p, (r, s) in enumerate(zip(iu, ju)):
            if rk[r] and lay.row_body[r] == lay.row_body[s]:
                same_leaf[p] = True
                continue
            cr, cs = chains[r], chains[s]
            pos_s = {b: t for t, b in enumerate(cs)}
            for t, b in enumerate(cr):
                if b in pos_s:
                    ia[p], ib[p] = entry[(r, t)], entry[(s, pos_s[b])]
                    break
        self.pair_a, self.pair_b = ia, ib
        # pairs of rows on one K-started leaf: Ω_e[col r, col s], per width
        self.leaf_pairs = {}
        npairs = len(iu)
        final = np.arange(npairs)
        off = npairs
        for w in self.leaves:
            if w == 6:
                continue
            ps = np.nonzero(same_leaf & (width[lay.row_body[iu]] == w))[0]
            lp = np.asarray([leaf_pos[int(lay.row_body[iu[p]])] for p in ps], np.int64)
            self.leaf_pairs[w] = lp * w * w + col[iu[ps]] * w + col[ju[ps]]
            final[ps] = off + np.arange(len(ps))
            off += len(ps)
        sym = np.zeros((m, m), np.int64)
        sym[iu, ju] = final
        sym[ju, iu] = final
        self.sym = sym


@functools.lru_cache(maxsize=256)
def plan(topo, constraints) -> Plan:
    return Plan(topo, constraints)


def _start(prev, src, fills):
    """``prev[src]`` where ``src >= 0``, ``fills[-1 - src]`` where ``src < 0`` (static
    indices; ``fills`` has one entry per restart, or a single broadcast entry)."""
    n = len(src)
    if prev is None or np.all(src < 0):
        if fills.shape[0] == n:
            return fills
        return jnp.broadcast_to(fills[0], (n,) + fills.shape[1:])
    if np.all(src >= 0):
        if n == prev.shape[0] and np.all(src == np.arange(n)):
            return prev
        return prev[src]
    ext = jnp.concatenate([prev, fills], 0)
    idx = np.where(src >= 0, src, prev.shape[0] + (-1 - src) % fills.shape[0])
    return ext[idx]


def _sandwich(W, E, Om):
    """``W + E^T Om E`` (batched)."""
    return W + mm(jnp.swapaxes(E, -1, -2), mm(Om, E))


def _cat(xs):
    return xs[0] if len(xs) == 1 else jnp.concatenate(xs, 0)


def delassus_pv_osimr(model, ws, inertias, K, pl: Plan):
    """Delassus matrix from a world state, articulated inertias and constraint rows ``K``.

    ``inertias`` is :func:`jaxdyn.algorithms.aba.articulated_inertias`' result; ``K (m, 6)``
    the constraint rows (:func:`jaxdyn.constraints.rows_from_placements`).
    """
    Us, Dinvs, _ = inertias
    dt = K.dtype
    eye, zero = jnp.eye(6, dtype=dt), jnp.zeros((6, 6), dt)
    t = model.topo
    nl = len(t.levels)
    # ------------------------------------------------------------ 1. backward sweep (l. 4-11)
    streams = {}  # width -> list of (level, E, W), deepest first
    prev = {}
    for li in range(nl - 1, -1, -1):
        lvl = t.levels[li]
        cur = {}
        for cls in pl.levels[li]:
            w, src = cls["w"], cls["src"]
            pE, pW = prev.get(w, (None, None))
            identity = w == 6 and np.all(src == -1)  # every segment restarts with 1, 0
            if not identity:
                fillE = jnp.swapaxes(K[cls["krows"]], -1, -2) if w < 6 else eye[None]
                P0 = _start(pE, src, fillE)  # ^iP_{d(i)}            (lines 4, 7)
                W0 = _start(pW, src, jnp.zeros((1, w, w), dt))  # ^iΩ_{d(i)}
            Es, Ws, p = [], [], 0
            for gi, sel in cls["groups"]:
                g = lvl.groups[gi]
                k = joints.NV[g.kind]
                n = len(sel)
                Sg = ws.S[g.v0:g.v1].reshape(g.n, k, 6)
                U, Dinv = Us[li][gi], Dinvs[li][gi]
                if n != g.n:
                    Sg, U, Dinv = Sg[sel], U[sel], Dinv[sel]
                if identity:
                    X = Sg  # S_i ^iP_i = S_i
                    Y = mm(Dinv, X)
                    Ws.append(mm(jnp.swapaxes(X, -1, -2), Y))  # line 10 with ^iΩ_i = 0
                    if cls["need_E"]:
                        Es.append(eye - mm(U, Y))  # P_i (eq. 8)
                else:
                    Pg, Wg = P0[p:p + n], W0[p:p + n]
                    X = mm(Sg, Pg)  # S_i ^iP_d                  (n, k, w)
                    Y = mm(Dinv, X)  # D_i^-1 S_i ^iP_d
                    Ws.append(Wg + mm(jnp.swapaxes(X, -1, -2), Y))  # line 10 / eq. (16)
                    if cls["need_E"]:
                        Es.append(Pg - mm(U, Y))  # ^{π(i)}P_d = P_i ^iP_d  line 9
                p += n
            E = _cat(Es) if Es else None
            W = _cat(Ws)
            cur[w] = (E, W)
            streams.setdefault(w, []).append((li, E, W))
        prev = cur
    # width streams in plan order (increasing level); level 0 has no E (never used)
    Ew, Ww = {}, {}
    for w, lst in streams.items():
        lst = sorted(lst, key=lambda x: x[0])
        Ww[w] = _cat([x[2] for x in lst])
        Ew[w] = _cat([x[1] if x[1] is not None else jnp.zeros((x[2].shape[0], 6, w), dt)
                      for x in lst])
    # ------------------------------------------------------------ 2. forward sweep over N (l. 13)
    Om_levels = []
    for tops, par in pl.n_levels:
        Et, Wt = Ew[6][tops], Ww[6][tops]
        if np.all(par < 0):
            Om = Wt
        else:
            allN = _cat(Om_levels)
            Op = jnp.concatenate([allN, zero[None]], 0)[np.where(par < 0, allN.shape[0], par)]
            Om = _sandwich(Wt, Et, Op)
        Om_levels.append(Om)
    OmN = _cat(Om_levels) if Om_levels else jnp.zeros((0, 6, 6), dt)
    OmNz = jnp.concatenate([OmN, zero[None]], 0)
    # leaf end effectors: Ω_e = W_top + E_top^T ^0Ω_{Nanc(e)} E_top (constraint space if K-start)
    Omleaf = {}
    for w, (tops, par) in pl.leaves.items():
        Et, Wt = Ew[w][tops], Ww[w][tops]
        if np.all(par < 0):
            Omleaf[w] = Wt
        else:
            Omleaf[w] = _sandwich(Wt, Et, OmNz[np.where(par < 0, pl.n_N, par)])
    parts = ([Omleaf[6]] if 6 in Omleaf else []) + [OmN, zero[None]]
    Omega = jnp.concatenate(parts, 0)  # spatial node table
    # ------------------------------------------------------------ 3. CEFP chains (line 16)
    E6 = Ew.get(6)
    Cs, Fs = [], []
    for info in pl.steps:
        if "src" not in info:
            c = K[info["rows"]]  # t = 0: k_r on its own link
        else:
            parts, order = [], []
            if len(info["plain"]):
                prevC = _cat(Cs)
                parts.append(mv(E6[info["E"]], prevC[info["src"]]))  # eq. (19)
                order.append(info["plain"])
            for w, (posn, idx) in info["kcol"].items():  # K-started: a column of E_top
                parts.append(jnp.swapaxes(Ew[w], -1, -2).reshape(-1, 6)[idx])
                order.append(posn)
            order = np.concatenate(order)
            c = _cat(parts)
            if not np.array_equal(order, np.arange(len(order))):
                c = c[np.argsort(order)]
        Cs.append(c)
        Fs.append(mv(Omega[info["node"]], c))  # ^0Ω_node c
    # ------------------------------------------------------------ 4. assembly (l. 17-20)
    zrow = jnp.zeros((1, 6), dt)
    Cf = jnp.concatenate(Cs + [zrow], 0)
    Ff = jnp.concatenate(Fs + [zrow], 0)
    vals = [jnp.sum(Cf[pl.pair_a] * Ff[pl.pair_b], -1)]
    for w, idx in pl.leaf_pairs.items():
        vals.append(Omleaf[w].reshape(-1)[idx])
    return _cat(vals)[pl.sym]

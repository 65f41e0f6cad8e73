"""Articulated-body algorithm (forward dynamics), in world coordinates.

Reference: Featherstone 2008, Alg. 7.1 (ABA, Table 7.1), in ground coordinates: articulated
inertias ``IA`` and bias forces ``pA`` of a child are added to its parent's without a
transform. Multi-DoF joints use the ``k x k`` blocks ``D = S^T U`` of eq. 7.25. On the CPU
the public function runs the same algorithm as a C kernel of jaxdyn's
(:func:`jaxdyn.backend.aba_kernel.aba_kernel`, ``jaxdyn/backend/_aba_kernel.h``), with the
XLA code below as its fallback and for its derivatives.

The passes are written for several right-hand sides at once (``pA (nb, 6, r)``,
``tau (nv, r)``): ``r = 1`` is ABA, ``r = nv`` with unit torques is the analytic inverse of
the mass matrix (:mod:`jaxdyn.algorithms.minv` uses the same pieces), and the derivative
code reuses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from .. import batching, joints, shell, spatial
from .._precision import full_precision
from ..backend import fusion, small_calls
from ..backend.aba_kernel import aba_kernel
from ..backend.crba_kernel import kernel_usable
from ..model import tree
from ..spatial import mm
from . import kinematics as kin
from .crba import crba_world
from .rnea import check_f_ext, external_forces_world, rnea_world

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeAlias

    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..model.model import Model, Topology
    from .kinematics import WorldState

    #: :func:`articulated_inertias`' ``U``, ``D^-1`` and ``Ia`` per level (``Ia`` may be None)
    Inertias: TypeAlias = tuple[tree.LevelSeq, tree.LevelSeq, tree.LevelSeq | None]

#: ``aba(..., method="auto")`` where its C kernel does not run (off the CPU, the switch
#: ``cpu_kernels`` off), evaluated alone (not under ``jax.vmap``, not differentiated), in
#: float64, on a tree at least this many levels deep and with at most :data:`DENSE_MAX_NV`
#: coordinates, solves ``M qdd = tau - b`` with CRBA, RNEA and one LAPACK Cholesky instead of
#: the ABA sweeps: a single evaluation is bound by its number of XLA kernels, and the dense
#: form needs fewer of them on deep trees (faster from 5 levels on, a little slower on
#: shallow trees: ``docs/design-measurements.md``). Batched, the sweeps stay much faster (a
#: LAPACK call is a loop over the batch), and ``M``'s ``O(nv^3)`` factorisation loses to
#: ABA's ``O(nv)`` on long chains, hence the bounds. Agreement with Pinocchio is the same.
DENSE_MIN_LEVELS = 5
#: largest ``nv`` of the dense path
DENSE_MAX_NV = 64
#: ``method="auto"`` keeps the dense answer only where the factorisation is trustworthy
#: (:func:`dense_reliable`): every Cholesky pivot ``L_ii^2`` at least this fraction of ``M_ii``
#: (at most ``-log10`` of it digits cancelled in the elimination) ...
DENSE_PIVOT_TOL = 1e-8
#: ... and the smallest diagonal entry of ``M`` at least this fraction of the largest (CRBA's
#: world-frame sums round each entry to about ``eps`` times the largest composite inertia's
#: scale, so a much smaller diagonal entry has few correct digits). Elsewhere (an ill-conditioned
#: or singular ``M``) it takes the sweeps' answer, the one ``jax.vmap(aba)`` gives: the choice
#: of method changes the speed, never whether the answer is finite. The bundled robots stay far
#: inside both bounds at random configurations.
DENSE_DIAG_SPREAD_TOL = 1e-12
METHODS = ("auto", "sweeps", "dense")


def articulated_body_step(
    IA: Array,
    S: Array,
    armature: Array | None = None,
    *,
    free: bool = False,
    project: bool = True,
    store: bool = False,
    bodies: bool = False,
) -> tuple[Array, Array, Array | None]:
    """The articulated-body step across a joint (Featherstone 2008, Alg. 7.1 / RBDA Table 7.1,
    eqs. 7.25-7.34): from the articulated inertia ``IA`` of the joint's successor and the
    joint's motion subspace ``S``::

        U = IA S,    D = S^T U,    D^-1,    Ia = IA - U D^-1 U^T

    ``Ia`` is the part of ``IA`` transmitted across the joint to its predecessor. Every joint
    of a batch at once (ABA, the Delassus algorithms, and C-ABA / C-EFPA, where ``S`` is a
    cluster's ``S_k`` and ``D`` its ``ny x ny`` block).

    - ``IA (..., 6, 6)``, or the packed upper triangle ``(..., 21)``
      (:func:`jaxdyn.spatial.pack_symmetric`; then ``Ia`` is packed too).
    - ``S (..., 6, k)``: the motion subspace's columns (jaxdyn stores ``S^T``, ``(nv, 6)``).
    - ``armature``: ``(..., k)`` added to the diagonal of ``D`` (rotor inertia, as
      Pinocchio's ``armature``), ``(..., k, k)`` added to ``D`` (a cluster's reflected rotor
      inertia), or ``None``.
    - ``free``: ``S`` spans all of R^6 (a free joint): without armature nothing of the inertia
      crosses the joint, and ``Ia`` is an exact zero (not the rounding residue of ``IA - IA``,
      large in world coordinates).
    - ``project=False``: ``Ia`` is not formed (``None``).
    - ``bodies``: ``IA (..., n, 6, 6)`` and ``S (..., n, 6, k)`` are the blocks of the ``n``
      bodies of a cluster whose articulated inertia is block diagonal (Chignoli et al., T-RO
      2024, C-ABA): ``U (..., n, 6, k)`` per body, ``D = sum_i S_i^T U_i``; ``Ia`` is then
      the caller's (:func:`project_articulated_inertia` on what the cluster hands on).
    - ``store``: ``U`` is computed once into a buffer of its own
      (:func:`jaxdyn.backend.fusion.store`), for callers that read it on many
      right-hand sides (one-DoF joints; a backend hint, values unchanged).

    ``k == 1`` takes elementwise forms (one fused kernel instead of batched dots; not with
    ``bodies``). Returns
    ``(U (..., 6, k), D^-1 (..., k, k), Ia)``.
    """
    packed = IA.shape[-1] == 21
    k = S.shape[-1]
    if k == 1 and not bodies:
        s = S[..., 0]
        if packed:  # U = IA s on the packed entries (36 products, one fusion)
            P = spatial.PACK_SYMMETRIC
            U1 = spatial.stack(
                [sum(IA[..., P[i, j]] * s[..., j] for j in range(6)) for i in range(6)], -1
            )
        else:
            # U = IA s as six multiply-adds (not a batched dot, whatever ``unroll_max``)
            U1 = spatial.mv(IA, s, unroll=True)
        if store:
            # U alone, by the handler's call (fusion.store): materialize's copy needed a
            # second array beside it (s, stored already with the world state) and its copy
            # was a kernel per level (compile time; the run as fast)
            U1 = fusion.store(U1)[0]
        D = jnp.sum(s * U1, -1)
        if armature is not None:
            D = D + armature.reshape(D.shape)
        dinv = 1 / D
        U, Dinv = U1[..., None], dinv[..., None, None]
        if not project:
            Ia = None
        elif packed:
            iu, ju = spatial.TRIU_SYMMETRIC
            Ia = IA - U1[..., iu] * (U1 * dinv[..., None])[..., ju]
        else:
            Ia = IA - U * (Dinv * U1[..., None, :])
        return U, Dinv, Ia
    IAf = spatial.unpack_symmetric(IA) if packed else IA
    U = mm(IAf, S)  # (..., 6, k)
    D = mm(jnp.swapaxes(S, -1, -2), U)
    if bodies:
        D = _sum_bodies(D)
    if armature is not None:
        if armature.ndim == D.ndim:
            D = D + armature
        else:
            D = D + armature[..., None] * jnp.eye(k, dtype=D.dtype)
    Dinv = spatial.inv_spd(D)
    if not project or bodies:
        Ia = None
    elif free and armature is None:
        Ia = jnp.zeros_like(IA)
    else:
        Ia = project_articulated_inertia(IAf, U, Dinv)
        if packed:
            Ia = spatial.pack_symmetric(Ia)
    return U, Dinv, Ia


def _sum_bodies(x):
    """Sum over the body axis ``-3`` of ``(..., n, a, b)`` (unrolled)."""
    out = x[..., 0, :, :]
    for i in range(1, x.shape[-3]):
        out = out + x[..., i, :, :]
    return out


def project_articulated_inertia(IA: Array, U: Array, Dinv: Array) -> Array:
    """``Ia = IA - U D^-1 U^T`` (Featherstone 2008, eq. 7.34; :func:`articulated_body_step`):
    ``IA (..., 6, 6)``, ``U (..., 6, k)``, ``D^-1 (..., k, k)``."""
    if U.shape[-1] == 1:
        return IA - U * (Dinv * jnp.swapaxes(U, -1, -2))
    return IA - mm(mm(U, Dinv), jnp.swapaxes(U, -1, -2))


def articulated_bias_force(
    pA: Array | None, U: Array, Dinv: Array, u: Array, Ia: Any = None, c: Array | None = None
) -> Array:
    """``pa = pA + Ia c + U D^-1 u`` (Featherstone 2008, Alg. 7.1 / RBDA Table 7.1, pass 2):
    the bias force transmitted across a joint to its predecessor, with ``u = tau - S^T pA``.

    ``U``, ``D^-1`` (and ``Ia``) from :func:`articulated_body_step`; ``pA (..., 6, r)`` or
    ``None`` (zero), ``u (..., k, r)``, ``c (..., 6, r)`` velocity-product acceleration or
    ``None``; with ``u (..., k)``, vectors throughout (``pA``, ``c`` ``(..., 6)``)."""
    vec = u.ndim == Dinv.ndim - 1
    prod = spatial.mv if vec else mm
    pa = prod(U, prod(Dinv, u))
    if pA is not None:
        pa = pA + pa
    if c is not None:
        pa = pa + prod(Ia, c)
    return pa


def articulated_inertias(model: Model, S: Array, I6: Array) -> Inertias:
    """Backward pass on the inertias only (they depend on ``q`` alone).

    ``S (nv, 6)`` world motion subspaces, ``I6 (nb, 6, 6)`` world body inertias; the model's
    armature (``model.armature``, if set) is added to ``D = S^T U`` (as Pinocchio does).
    Returns per level and group ``U``, ``D^-1`` and the projected inertia
    ``Ia = IA - U D^-1 U^T`` (:func:`articulated_body_step`): three
    :class:`~jaxdyn.model.tree.LevelSeq`, indexed ``Us[level][group]``.
    """
    return articulated_pass(model, S, I6)


def articulated_pass(model: Model, S: Array, IA0: Array, return_ia: bool = True) -> Inertias:
    """The articulated-inertia pass (Featherstone 2008, Alg. 7.1, pass 2, inertias only), walked
    by :func:`jaxdyn.model.tree.backward_pass`: per level, children's ``Ia`` summed into their
    parents and :func:`articulated_body_step` per joint group. ``IA0`` the world body
    inertias, ``(nb, 6, 6)`` or packed ``(nb, 21)`` (then ``Ia`` packed). Returns the
    :class:`~jaxdyn.model.tree.LevelSeq` of ``U``, ``D^-1`` and ``Ia`` (``None`` unless
    ``return_ia``)."""
    arm = model.armature
    packed = IA0.shape[-1] == 21

    def step(lvl, child, below, inp):
        I6l, Sl, arml = inp
        if below is None:
            IA = I6l
        elif packed:
            IA = I6l + tree.sum_into_parents_gathered(below, child, lvl.n)
        else:
            IA = I6l + tree.sum_into_parents(below, child, lvl.n)
        b0, v0 = lvl.b0, tree.level_v0(lvl)
        Ug, Dg, Ia = [], [], []
        for g in lvl.groups:
            k = joints.NV[g.kind]
            Sg = Sl[g.v0 - v0 : g.v1 - v0]
            # S's columns (a reshape alone where k = 1)
            Sg = Sg.reshape(g.n, 6, 1) if k == 1 else jnp.swapaxes(Sg.reshape(g.n, k, 6), -1, -2)
            ag = None if arml is None else arml[g.v0 - v0 : g.v1 - v0].reshape(g.n, k)
            # U is read on every right-hand side of the sweeps: stored once (Minv much slower
            # when XLA recomputes it per column; docs/design-measurements.md)
            U, Dinv, Iag = articulated_body_step(
                IA[g.b0 - b0 : g.b1 - b0], Sg, ag, free=g.kind == joints.FREE, store=not packed
            )
            Ug.append(U)
            Dg.append(Dinv)
            Ia.append(Iag)
        below = Ia[0] if len(Ia) == 1 else jnp.concatenate(Ia, 0)
        return below, (tuple(Ug), tuple(Dg), tuple(Ia) if return_ia else None)

    out = tree.backward_pass(model.topo, step, (("body", IA0), ("dof", S), ("dof", arm)))[1]
    return out.field(0), out.field(1), out.field(2) if return_ia else None


def column_widths(topo: Topology) -> list[int]:
    """Per level, the number of trailing columns of the unit-torque sweeps (:func:`sweeps`
    with per-level torques, :mod:`jaxdyn.algorithms.minv`): ``nv - v0`` with ``v0`` the first
    coordinate of the level's segment (:func:`jaxdyn.model.tree.segments`). An unrolled level
    keeps its own ``nv - v0_l``; the levels of a scanned run share the width of the run's first
    level, so that the scan's carry has one shape."""
    w = [0] * len(topo.levels)
    for la, lb in tree.segments(topo):
        for li in range(la, lb):
            w[li] = topo.nv - tree.level_v0(topo.levels[la])
    return w


def sweeps(
    model: Model,
    S: Array,
    inertias: Inertias,
    pA: Array | None,
    c: Array | None,
    tau: Array | tree.LevelSeq,
    a0: Array | None,
) -> tree.LevelSeq:
    """The two ABA sweeps after the articulated inertias (Featherstone 2008, Alg. 7.1, passes
    2-3): articulated bias forces inwards, accelerations outwards, on ``r`` columns at once.

    ``inertias`` from :func:`articulated_inertias`; ``pA (nb, 6, r)`` body bias forces or
    ``None`` (zero), ``c (nb, 6)`` velocity-product accelerations or ``None``, ``a0 (6, r)``
    root acceleration or ``None`` (zero). ``tau`` is ``(nv, r)``, or a
    :class:`~jaxdyn.model.tree.LevelSeq` of per-level torques ``(nv_l, w_l)`` on the trailing
    ``w_l`` columns (:func:`column_widths`): a level's bias forces are then zero-padded in front
    up to its width, and the parent accelerations cut to it (the columns a subtree cannot
    reach). Returns the :class:`~jaxdyn.model.tree.LevelSeq` of per-level ``(qdd, a)``.
    """
    t = model.topo
    Us, Dinvs, Ias = (None if x is None else tree.LevelSeq.of(x) for x in inertias)
    tau_in = ("level", tau) if isinstance(tau, tree.LevelSeq) else ("dof", tau)

    def back(lvl, child, below, inp):
        pl, taul, Sl, cl, U_l, D_l, Ia_l = inp
        p = pl
        if below is not None:
            pb = tree.sum_into_parents(below, child, lvl.n)
            pad = taul.shape[-1] - pb.shape[-1]
            if pad:
                pb = jnp.concatenate([jnp.zeros(pb.shape[:-1] + (pad,), pb.dtype), pb], -1)
            p = pb if p is None else p + pb
        b0, v0 = lvl.b0, tree.level_v0(lvl)
        ug, pa = [], []
        for gi, g in enumerate(lvl.groups):
            k = joints.NV[g.kind]
            s = slice(g.b0 - b0, g.b1 - b0)
            U, Dinv = U_l[gi], D_l[gi]
            pg = None
            if p is None:
                u = taul[g.v0 - v0 : g.v1 - v0].reshape((g.n, k) + taul.shape[1:])
            else:
                Sg = Sl[g.v0 - v0 : g.v1 - v0].reshape(g.n, k, 6)
                pg = p[s]
                tg = taul[g.v0 - v0 : g.v1 - v0].reshape((g.n, k) + taul.shape[1:])
                if pg.shape[-1] > 1:
                    # several right-hand sides (Minv): S^T p as six multiply-adds on the rows
                    # of p, instead of a small batched dot per level, and u stored once
                    # (spatial.store). Unstored, the product is recomputed per row of p (Minv
                    # much slower); stored by materialize's copy (with a copy of itself: one
                    # array alone is not stored, nor stacked with the constant unit torques),
                    # minv got faster, by the FFI call faster still
                    # (docs/design-measurements.md); ABA's single column keeps the dot.
                    u = tg - mm(Sg, pg, unroll=True)
                    u = fusion.store(u)[0]
                else:
                    u = tg - mm(Sg, pg)
            ug.append(u)
            c_g = None if cl is None else cl[s, :, None]
            pa.append(
                articulated_bias_force(pg, U, Dinv, u, None if c_g is None else Ia_l[gi], c_g)
            )
        return (pa[0] if len(pa) == 1 else jnp.concatenate(pa, 0)), tuple(ug)

    _, us = tree.backward_pass(
        t,
        back,
        (
            ("body", pA),
            tau_in,
            ("dof", S),
            ("body", c),
            ("level", Us),
            ("level", Dinvs),
            ("level", Ias if c is not None else None),
        ),
    )

    def fwd(lvl, _, prev, inp):
        Sl, cl, U_l, D_l, u_l = inp
        if prev is None:
            a = None if a0 is None else jnp.broadcast_to(a0, (lvl.n,) + a0.shape)
        else:
            a = tree.gather_parent(prev, lvl, None)
            w = u_l[0].shape[-1]
            if a.shape[-1] > w:
                a = a[..., a.shape[-1] - w :]
        if cl is not None:
            a = cl[..., None] if a is None else a + cl[..., None]
        b0, v0 = lvl.b0, tree.level_v0(lvl)
        qdds, parts = [], []
        for gi, g in enumerate(lvl.groups):
            k = joints.NV[g.kind]
            Sg = Sl[g.v0 - v0 : g.v1 - v0].reshape(g.n, k, 6)
            U, Dinv, u = U_l[gi], D_l[gi], u_l[gi]
            if a is None:
                qdd = mm(Dinv, u)
                qdds.append(qdd.reshape((g.n * k,) + qdd.shape[2:]))
                parts.append(mm(jnp.swapaxes(Sg, -1, -2), qdd))
            else:
                ag = a[g.b0 - b0 : g.b1 - b0]
                qdd = mm(Dinv, u - mm(jnp.swapaxes(U, -1, -2), ag))  # (n, k, r)
                qdds.append(qdd.reshape((g.n * k,) + qdd.shape[2:]))
                parts.append(ag + mm(jnp.swapaxes(Sg, -1, -2), qdd))
        acc = parts[0] if len(parts) == 1 else jnp.concatenate(parts, 0)
        return acc, (qdds[0] if len(qdds) == 1 else jnp.concatenate(qdds, 0), acc)

    return tree.forward_pass(
        t, fwd, (("dof", S), ("body", c), ("level", Us), ("level", Dinvs), ("level", us))
    )[1]


def aba_passes(
    model: Model,
    S: Array,
    I6: Array | None,
    pA: Array | None,
    c: Array | None,
    tau: Array,
    a0: Array | None,
    inertias: Inertias | None = None,
) -> Any:
    """ABA with ``r`` right-hand sides.

    ``pA (nb, 6, r)`` body bias forces or ``None`` (zero), ``c (nb, 6)`` or ``None``
    velocity-product accelerations, ``tau (nv, r)``, ``a0 (6, r)`` root acceleration or
    ``None`` (zero). ``inertias`` may pass a precomputed :func:`articulated_inertias` (then
    ``I6`` is not used). Returns ``(qdd (nv, r), a (nb, 6, r))``.
    """
    if inertias is None:
        assert I6 is not None, "aba_passes: I6 is needed without precomputed inertias"
        inertias = articulated_inertias(model, S, I6)
    return sweeps(model, S, inertias, pA, c, tau, a0).flat()


def world_inertia_matrices(ws: WorldState) -> Array:
    """``(nb, 6, 6)`` world-frame spatial inertias."""
    return spatial.inertia_matrix(ws.mass, ws.h, ws.Ibar)


def velocity_terms(model: Model, ws: WorldState, qd: Array) -> tuple[Array, Array, Array]:
    """ABA's first pass (Featherstone 2008, Alg. 7.1) in world coordinates: body velocities
    ``v (nb, 6)``, velocity-product accelerations ``c = v x vJ`` and bias forces
    ``pA = v x* (I v)``, each ``(nb, 6)``."""
    v, vJ = kin.body_velocities(model, ws, qd)
    c = spatial.motion_cross(v, vJ)
    pA = spatial.force_cross(v, kin.inertia_apply(ws.mass, ws.c, ws.Ic, v))
    return v, c, pA


def aba_world(
    model: Model,
    ws: WorldState,
    qd: Array,
    tau: Array,
    f_ext: Array | None = None,
    gravity: bool = True,
) -> tuple[Array, Array, Array]:
    """ABA on a precomputed world state. Returns ``(qdd, a, v)``."""
    dtype = ws.S.dtype
    v, c, pA = velocity_terms(model, ws, qd)
    if f_ext is not None:
        pA = pA - external_forces_world(model, ws, f_ext)
    a0 = kin.gravity_acceleration(model, dtype) if gravity else jnp.zeros(6, dtype)
    qdd, a = aba_passes(
        model, ws.S, world_inertia_matrices(ws), pA[..., None], c, tau[:, None], a0[:, None]
    )
    return qdd[:, 0], a[..., 0], v


def check_method(fn: str, method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"{fn}: method must be one of {METHODS}, got {method!r}")


def use_dense(method: str, model: Model, dtype: DTypeLike) -> bool:
    """Whether ``method`` selects the dense path: ``"dense"``, or ``"auto"`` for a float64
    evaluation alone (no batching rule, no derivative being traced) on a tree of at least
    :data:`DENSE_MIN_LEVELS` levels and at most :data:`DENSE_MAX_NV` coordinates, not traced
    into one XLA:CPU kernel (:mod:`jaxdyn.backend.small_calls`: no LAPACK call there)."""
    return method == "dense" or (
        method == "auto"
        and jnp.dtype(dtype) == jnp.float64
        and len(model.topo.levels) >= DENSE_MIN_LEVELS
        and model.nv <= DENSE_MAX_NV
        and batching.rule_batch_size() == 0
        and not small_calls.tracing()
    )


def dense_factor(model: Model, ws: WorldState) -> tuple[Array, Array]:
    """``(M, L)``: the mass matrix by CRBA and its lower LAPACK Cholesky factor (NaN where
    ``M`` is not numerically positive definite)."""
    M = crba_world(model, ws)
    return M, jsl.cho_factor(M, lower=True)[0]


def _min_min_max(a, b):
    return jnp.minimum(a[0], b[0]), jnp.minimum(a[1], b[1]), jnp.maximum(a[2], b[2])


def dense_reliable(M: Array, L: Array, x: Array) -> Array:
    """Whether a dense Cholesky solve ``x`` with ``M = L L^T`` is trustworthy (a boolean
    scalar): ``x`` finite, every pivot ``L_ii^2 > DENSE_PIVOT_TOL M_ii`` (the pivots of the
    Jacobi-scaled ``D^-1/2 M D^-1/2``, which bound how much each elimination step cancelled;
    Cholesky's rounding is invariant under that scaling, so this ratio and not ``M``'s raw
    scale decides) and ``min M_ii > DENSE_DIAG_SPREAD_TOL max M_ii``. One variadic reduction
    (each separate reduction is two XLA:CPU kernels on the single-call path)."""
    d = jnp.diagonal(M)
    x = x.reshape(d.shape[0], -1)
    # NaN where a pivot or an entry of x is not finite (0 * inf = NaN), caught by the compare
    r = jnp.diagonal(L) ** 2 / d + jnp.sum(0 * x, -1)
    inf = jnp.array(jnp.inf, d.dtype)
    lo, dmin, dmax = jax.lax.reduce((r, d, d), (inf, inf, -inf), _min_min_max, (0,))
    return (lo > DENSE_PIVOT_TOL) & (dmin > DENSE_DIAG_SPREAD_TOL * dmax)


def guard_dense(M: Array, L: Array, x: Array, fallback: Callable[[], Array]) -> Array:
    """``x`` (a dense Cholesky result with ``M = L L^T``) where :func:`dense_reliable`, else
    ``fallback()`` (``lax.cond``: the fallback runs only then), in ``x``'s dtype."""
    return jax.lax.cond(dense_reliable(M, L, x), lambda: x, lambda: fallback().astype(x.dtype))


def forward_dynamics_dense(
    model: Model,
    ws: WorldState,
    qd: Array,
    tau: Array,
    f_ext: Array | None = None,
    guarded: bool = False,
) -> Array:
    """``qdd = M^-1 (tau - b)`` with ``M`` by CRBA, the bias ``b = rnea(q, v, 0, f_ext)`` and a
    LAPACK Cholesky factorisation (NaN where ``M`` is singular, as the sweeps give).

    ``guarded`` (``method="auto"``): where the factorisation is not trustworthy
    (:func:`dense_reliable`) or the answer not finite, the ABA sweeps' answer instead
    (``lax.cond``: the sweeps run only then)."""
    M, L = dense_factor(model, ws)
    b = rnea_world(model, ws, qd, jnp.zeros_like(qd), f_ext)[0]
    qdd = jsl.cho_solve((L, True), tau - b)
    if not guarded:
        return qdd
    return guard_dense(M, L, qdd, lambda: aba_world(model, ws, qd, tau, f_ext)[0])


def _xla_aba(model: Model, q: Array, qd: Array, tau: Array, f_ext: Array | None) -> Array:
    """XLA's ``qdd`` of one prepared sample (the sweeps, :func:`aba_world`): the C kernel's
    fallback and its derivatives."""
    return aba_world(model, kin.world_state(model, q, centered=True), qd, tau, f_ext)[0]


def aba_solve(
    model: Model,
    q: ArrayLike,
    qd: Array,
    tau: Array,
    f_ext: Array | None = None,
    method: str = "auto",
) -> Array:
    """``qdd`` (no input checks): on the CPU (float32, float64; the switch ``cpu_kernels``)
    for ``"auto"`` and ``"sweeps"`` by jaxdyn's C kernel of the ABA
    (:func:`jaxdyn.backend.aba_kernel.aba_kernel`, with :func:`aba_world` where the kernel
    cannot run and for derivatives), else by the ABA sweeps or, where :func:`use_dense`, by
    :func:`forward_dynamics_dense` (guarded for ``"auto"``)."""
    if method != "dense" and kernel_usable(model, qd.dtype):
        return aba_kernel(model, q, qd, tau, f_ext, _xla_aba)  # backend: the C kernel
    return aba_solve_xla(model, q, qd, tau, f_ext, method)


def aba_solve_xla(
    model: Model,
    q: ArrayLike,
    qd: Array,
    tau: Array,
    f_ext: Array | None = None,
    method: str = "auto",
) -> Array:
    """:func:`aba_solve` without the C kernel: the sweeps or, where :func:`use_dense`, the
    dense form (the trajectory optimisers' rollouts, whose fused CPU loops cannot hold a
    custom call: :mod:`jaxdyn.trajopt.dynamics`)."""
    ws = kin.world_state(model, q, centered=True)
    if use_dense(method, model, ws.S.dtype):
        return forward_dynamics_dense(model, ws, qd, tau, f_ext, guarded=method == "auto")
    return aba_world(model, ws, qd, tau, f_ext)[0]


def xla_chunk_words(model: Model, itemsize: int) -> int:
    """The chunk policy of XLA's sweeps (:func:`aba_solve_xla`): the 6x6 articulated inertias
    of every body, per sample."""
    return 36 * model.nb


def chunk_words(model: Model, itemsize: int) -> int:
    """ABA's chunk policy (``words=`` of its public wrappers): none where its C kernel computes
    the batch (as :func:`jaxdyn.algorithms.crba.chunk_words`; chunks of the kernel's calls ran
    no faster), else :func:`xla_chunk_words`."""
    if kernel_usable(model, {4: "float32", 8: "float64"}.get(itemsize, "complex128")):
        return 0
    return xla_chunk_words(model, itemsize)


@shell.public("aba", words=chunk_words)
@full_precision
def aba_plain(
    model: Model,
    q: ArrayLike,
    v: ArrayLike,
    tau: ArrayLike,
    f_ext: ArrayLike | None = None,
    method: str = "auto",
) -> Array:
    """Forward dynamics ``a = M(q)^-1 (tau - C(q, v) v - g(q) + sum J_i^T f_ext_i``, without
    analytic derivative rules (JAX differentiates it op by op): ``jaxdyn.aba`` is this with
    them (:mod:`jaxdyn.derivatives`); this one is their autodiff reference.

    Reference: Featherstone 2008, Alg. 7.1 (ABA, Table 7.1), in world coordinates.

    **Arguments:** ``q (nq,)``, ``v (nv,)``, ``tau (nv,)``, ``f_ext (nb, 6)`` or ``None``
    (body-frame spatial forces, as in :func:`jaxdyn.rnea`).

    ``method``: ``"sweeps"`` the ABA's three passes; ``"dense"`` CRBA, RNEA and a Cholesky
    solve; ``"auto"`` (default): on the CPU (float32, float64) the sweeps' algorithm as
    jaxdyn's C kernel (:func:`jaxdyn.backend.aba_kernel.aba_kernel`, also for ``"sweeps"``;
    one call for a whole batch; the switch ``cpu_kernels``), elsewhere the dense form for a
    single float64 evaluation on a deep tree, where it has fewer XLA kernels and runs about
    twice as fast (:data:`DENSE_MIN_LEVELS`), the sweeps otherwise (under ``jax.vmap``, for
    derivatives, in float32). ``"auto"`` falls back to the sweeps where the Cholesky
    factorisation is not trustworthy (an ill-conditioned ``M``: :data:`DENSE_PIVOT_TOL`), so
    that it is finite wherever ``"sweeps"`` is; ``"dense"`` alone may return NaN on such
    matrices. The kernel's derivatives are XLA's sweeps'.

    **Returns:** joint accelerations ``(nv,)``. Where the mass matrix is singular (moving
    joints whose subtrees carry no mass and no armature; :func:`jaxdyn.load_urdf` warns), the
    result is NaN, as Pinocchio's: add armature (:meth:`jaxdyn.Model.with_armature`).
    """
    fn = "aba"
    check_method(fn, method)
    v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    tau = shell.as_array(fn, "tau", tau, (("nv", model.nv),), model)
    f_ext = check_f_ext(fn, model, f_ext)
    model, q, dtype = shell.prepare(model, fn, q, v, tau, f_ext)
    if model.nb == 0:
        return jnp.zeros(0, dtype)
    f_ext = None if f_ext is None else f_ext.astype(dtype)
    return aba_solve(model, q, v.astype(dtype), tau.astype(dtype), f_ext, method)

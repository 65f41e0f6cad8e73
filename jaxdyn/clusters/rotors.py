"""Exact cluster algorithms with axisymmetric rotors carried by their parent bodies.

A rotor of a geared or belt transmission (a dependent joint of an explicit linear cluster: a
leaf body on a revolute joint hanging outside its cluster) whose inertia is symmetric about its
joint axis, with its centre of mass on the axis, has the same spatial inertia at every angle of
its own. Its inertia is then a constant of its parent's frame, and C-RNEA, C-ABA and C-EFPA
(Chignoli et al., T-RO 2024, Algs. 1-3) can run on the link tree alone (13 bodies instead of 25
on Mini Cheetah) with exact rotor terms, the exact counterpart of the reflected-inertia
approximation of §IX-B. With ``J_r`` the rotor's axial moment, ``s_r`` its world axis, ``w_r``
its rate (``G_r`` its row of ``G``) and ``v_p`` / ``omega_p`` / ``a_p`` its parent's motion:

* parents carry their rotors' inertia (composite inertias, built once);
* ``D_k`` gains ``sum_r J_r G_r^T G_r``: the block-diagonal armature of
  :func:`~jaxdyn.clusters.approximate_model`;
* ``U_r = I_r S_r = J_r [s_r; 0]`` per unit rotor rate, so a cluster's ``Ub`` gains
  ``Ue = sum_r J_r [s_r; 0] G_r`` (C-ABA, C-EFPA);
* the invariance ``S_r x* (I_r x) = I_r (S_r x x)`` of an axisymmetric inertia gives
  ``S_r^T (v x* I_r v) = 0`` and reduces the rotor's bias ``v_r x* I_r v_r + I_r c_r``
  (``v_r = v_p + S_r w_r``, ``c_r = w_r v_p x S_r``) to ``v_p x* I_r v_p`` (in the parent's
  composite bias) plus the gyroscopic torque ``[w_r omega_p x J_r s_r; 0]``, handed to the
  parent (C-ABA); its force ``I_r a_r + v_r x* I_r v_r`` to the parent's composite terms plus
  ``[J_r (w_dd_r s_r + w_r omega_p x s_r); 0]``, and its joint torque to
  ``J_r (s_r . alpha_p + w_dd_r)``, i.e. ``tau_k += Ue^T a_p`` besides the armature (C-RNEA).

The folded model is rebuilt from the original's constraint specifications: the rotors and the
specs naming them are dropped, the links of each transmission cluster kept together, implicit
loops (Tello's differentials) kept as they are, the reflected inertia added as armature. The
plan is built from concrete model values (cached); models whose parameters are traced, rotors
that are not axisymmetric (JVRC-1's, for one), models whose link tree would pick other
independent coordinates, calls with external forces and end effectors on rotors take the
general paths.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import joints, spatial
from . import spec as S
from .model import LINEAR, ClusterModel, build, with_armature

#: relative tolerance of the axisymmetry and centre-on-axis tests
SYMMETRY_TOL = 1e-12

_PLANS: dict = {}


@dataclass(frozen=True, eq=False)
class RotorPlan:
    """Static data of the folded C-ABA (see the module docstring)."""

    model: ClusterModel  # link-only cluster model: composite inertias, rotor armature
    qi: np.ndarray  # q of ``model`` = q_original[qi]
    vi: np.ndarray  # v / tau of ``model`` = v_original[vi]
    vi_inv: np.ndarray  # a_original = a_model[vi_inv]
    W: np.ndarray  # (nr, nv) rotor rates from the model's v
    parent: np.ndarray  # (nr,) link-tree index of each rotor's parent (nb: the world)
    axis: np.ndarray  # (nr, 3) rotor axis in the parent frame
    J: np.ndarray  # (nr,) axial moments (alpha + beta)
    groups: tuple  # per group of ``model``: None or (ridx (nc, k), Gr (nc, k, ny))


def _axisymmetric(I, a, tol):
    """``(alpha, beta)`` with ``I = alpha 1 + beta a a^T``, or None."""
    Ja = float(a @ I @ a)
    alpha = 0.5 * (float(np.trace(I)) - Ja)
    beta = Ja - alpha
    ref = alpha * np.eye(3) + beta * np.outer(a, a)
    if np.max(np.abs(I - ref)) > tol * max(1e-300, float(np.max(np.abs(I)))):
        return None
    return alpha, beta


def _combine(m1, c1, I1, m2, c2, I2):
    """Two rigid bodies (mass, centre, inertia about the centre; one frame) as one."""
    m = m1 + m2
    c = (m1 * c1 + m2 * c2) / m if m > 0 else np.zeros(3)

    def shift(mi, ci, Ii):
        r = ci - c
        return Ii + mi * (r @ r * np.eye(3) - np.outer(r, r))

    return m, c, shift(m1, c1, I1) + shift(m2, c2, I2)


def plan(model: ClusterModel):
    """The :class:`RotorPlan` of ``model``, or None where the folded path does not apply."""
    try:
        tree = model.tree
        arrays = tuple(
            np.asarray(x, np.float64)
            for x in (tree.mass, tree.com, tree.inertia, tree.Xtree_R, tree.Xtree_p, tree.dof_axis)
        )
    except Exception:  # traced model parameters: no static plan
        return None
    key = (id(model.topo),) + tuple(a.tobytes() for a in arrays)
    if key not in _PLANS:
        if len(_PLANS) > 64:
            _PLANS.clear()
        with jax.ensure_compile_time_eval():  # built from constants, also while tracing
            _PLANS[key] = (model.topo, _build(model, *arrays))  # topo kept: its id stays unique
    return _PLANS[key][1]


def _strings(x):
    """Every string inside a constraint spec (its joint and link names)."""
    if isinstance(x, str):
        yield x
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _strings(y)
    elif dataclasses.is_dataclass(x):
        for f in dataclasses.fields(x):
            yield from _strings(getattr(x, f.name))


def _build(model, mass, com, inertia, XR, Xp, axis6):
    from .baselines import _drop_bodies

    t, tt = model.topo, model.tree.topo
    children = np.zeros(tt.nb, np.int64)
    for b in range(tt.nb):
        if tt.parent[b] >= 0:
            children[tt.parent[b]] += 1
    rotors, blocks = [], []
    for g in t.groups:
        if not np.all(g.out == g.out[:, :1]):
            return None
        if g.kind != LINEAR:  # plain joints and implicit loops stay as they are
            continue
        G = np.asarray(g.params["G"])
        for c in range(g.nc):
            found = set()
            for d in np.nonzero(g.params["dep"][c])[0]:
                bi = int(np.nonzero(g.B[c, :, d])[0][0])
                b = int(g.body[c][bi])
                if (
                    children[b]
                    or g.Ab[c, bi].sum() != 1
                    or tt.nv_j[b] != 1
                    or int(tt.kind[b]) != joints.ONE_DOF
                ):
                    return None  # not a leaf rotor hanging outside its cluster
                s6 = axis6[int(g.dof[c, d])]
                a = s6[:3]
                if np.any(s6[3:] != 0) or abs(np.linalg.norm(a) - 1) > 1e-12:
                    return None  # not a pure rotation
                cperp = com[b] - (a @ com[b]) * a
                if np.linalg.norm(cperp) > SYMMETRY_TOL * max(1.0, float(np.linalg.norm(com[b]))):
                    return None
                ab = _axisymmetric(inertia[b], a, SYMMETRY_TOL)
                if ab is None:
                    return None
                names = [model.v_names[g.v0 + c * g.ny + k] for k in range(g.ny)]
                rotors.append(dict(body=b, a=a, ab=ab, G=dict(zip(names, G[c, d]))))
                found.add(b)
            links = [int(b) for b in g.body[c] if int(b) not in found]
            if len(links) > 1:
                blocks.append(S.Cluster(tuple(tt.body_names[b] for b in links)))
    if not rotors:
        return None
    # the link tree: rotors dropped with the specs that name them, the links of a cluster kept
    # together; implicit loops and other specs unchanged
    drop = {r["body"] for r in rotors}
    gone = {tt.body_names[b] for b in drop} | {tt.joint_names[b] for b in drop}
    specs = [sp for sp in t.constraints if not gone.intersection(_strings(sp))]
    try:
        fm = build(
            _drop_bodies(model.tree, sorted(drop)),
            specs + blocks,
            name=f"{model.name}_rotors_folded",
        )
    except ValueError:
        return None
    if sorted(fm.q_names) != sorted(model.q_names) or sorted(fm.v_names) != sorted(model.v_names):
        return None  # a different choice of independent coordinates: keep the general path
    ft = fm.tree
    L = {n: i for i, n in enumerate(ft.topo.body_names)}
    mL, cL, IL = (np.array(x, np.float64) for x in (ft.mass, ft.com, ft.inertia))
    parent = []
    for r in rotors:
        b = r["body"]
        pb = int(tt.parent[b])
        P = L[tt.body_names[pb]] if pb >= 0 else ft.topo.nb
        parent.append(P)
        if pb >= 0:  # the rotor at angle 0 (the same at every angle), in the parent frame
            R = XR[b]
            mL[P], cL[P], IL[P] = _combine(
                mL[P], cL[P], IL[P], mass[b], R @ com[b] + Xp[b], R @ inertia[b] @ R.T
            )
    dt = ft.mass.dtype
    ft = eqx.tree_at(
        lambda m: (m.mass, m.com, m.inertia),
        ft,
        (jnp.asarray(mL, dt), jnp.asarray(cL, dt), jnp.asarray(IL, dt)),
    )
    fm = ClusterModel(ft, fm.topo)
    vpos = {n: i for i, n in enumerate(fm.v_names)}
    W = np.zeros((len(rotors), fm.nv))
    for i, r in enumerate(rotors):
        for n, gval in r["G"].items():
            W[i, vpos[n]] = gval
    # the rotors' reflected inertia as joint-space armature, D_k += sum_r J_r G_r^T G_r
    Jr = np.array([sum(r["ab"]) for r in rotors])
    arm = [None] * fm.n_clusters
    for g in fm.topo.groups:
        for c in range(g.nc):
            Wc = W[:, g.v0 + c * g.ny : g.v0 + (c + 1) * g.ny]
            if np.any(Wc):
                arm[g.cl0 + c] = Wc.T @ (Jr[:, None] * Wc)
    fm = with_armature(fm, arm)
    groups = []
    for g in fm.topo.groups:
        cols = [np.arange(g.v0 + c * g.ny, g.v0 + (c + 1) * g.ny) for c in range(g.nc)]
        hits = [[i for i in range(len(rotors)) if np.any(W[i, cols[c]])] for c in range(g.nc)]
        k = max(len(h) for h in hits)
        if k == 0:
            groups.append(None)
            continue
        ridx = np.full((g.nc, k), len(rotors), np.int64)  # padding: a zero row
        Gr = np.zeros((g.nc, k, g.ny))
        for c, h in enumerate(hits):
            ridx[c, : len(h)] = h
            Gr[c, : len(h)] = W[np.array(h, np.int64)][:, cols[c]] if h else 0.0
        groups.append((ridx, Gr))
    vi = np.array([model.v_names.index(n) for n in fm.v_names], np.int64)
    return RotorPlan(
        model=fm,
        qi=np.array([model.q_names.index(n) for n in fm.q_names], np.int64),
        vi=vi,
        vi_inv=np.argsort(vi),
        W=W,
        parent=np.array(parent, np.int64),
        axis=np.stack([XR[r["body"]] @ r["a"] for r in rotors]),
        J=Jr,
        groups=tuple(groups),
    )


def rotor_terms(rp: RotorPlan, ws, v_t, v, dt, a=None):
    """Per group of ``rp.model``, the rotor terms ``(Ue (nc, 6, ny), he (nc, 6))`` added to
    ``Ub`` and to the force handed to the parent (module docstring); ``he`` is None when
    ``v`` is None (no velocity terms: C-EFPA). With accelerations ``a`` (C-RNEA), ``he`` also
    holds ``J w_dd s`` (the rotor's force less what the parent's composite inertia holds is
    ``[J (w_dd s + w omega_p x s); 0]``)."""
    R = jnp.concatenate([ws.R, jnp.eye(3, dtype=dt)[None]])[rp.parent]  # last row: the world
    Js = jnp.asarray(rp.J, dt)[:, None] * spatial.mv(R, jnp.asarray(rp.axis, dt))
    if v is None:
        rows = jnp.concatenate([Js, jnp.zeros((1, 3), dt)])
    else:
        wp = jnp.concatenate([v_t[:, :3], jnp.zeros((1, 3), dt)])[rp.parent]  # parent's omega
        w = spatial.mv(jnp.asarray(rp.W, dt), v)[:, None]  # rotor rates
        n = w * spatial.cross(wp, Js)
        if a is not None:
            n = n + spatial.mv(jnp.asarray(rp.W, dt), a)[:, None] * Js
        # one row per rotor and a zero row for padding: [J s, w omega_p x J s (+ w_dd J s)]
        rows = jnp.concatenate([jnp.concatenate([Js, n], -1), jnp.zeros((1, 6), dt)])
    terms = []
    for gr in rp.groups:
        if gr is None:
            terms.append(None)
            continue
        ridx, Gr = gr
        x = rows[ridx]  # (nc, k, 6)
        Ue = jnp.sum(x[..., :3, None] * jnp.asarray(Gr, dt)[:, :, None, :], 1)
        Ue = jnp.concatenate([Ue, jnp.zeros_like(Ue)], 1)
        if v is None:
            terms.append((Ue, None))
            continue
        he = jnp.sum(x[..., 3:], 1)
        terms.append((Ue, jnp.concatenate([he, jnp.zeros_like(he)], -1)))
    return terms

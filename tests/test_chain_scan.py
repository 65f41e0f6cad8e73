"""Serial chains evaluated with ``lax.scan`` (``jaxdyn.model.tree.segments``), float64.

Runs of at least ``tree.MIN_SCAN_RUN`` identically structured levels are not unrolled: the
level passes (kinematics, velocity/acceleration accumulation, ABA's articulated inertias and
sweeps, CRBA's composite inertias, RNEA's force sweep) scan them. Checks against Pinocchio on
chains that take that path -- a fixed-base chain of revolute/prismatic joints, a floating chain
of spherical joints, three parallel fingers (a run of width 3) -- plus the unrolled evaluation
of the same functions, and ``jax.grad`` through the scan. Long chains (20 and 40 links) check
that every pass traces to a program whose size does not grow with the chain.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import robots
from jaxdyn.model import tree

from oracle import RTOL64, assert_close, case_from_urdf, jaxprs_in_params, slow_params

KEYS = (
    "rnea",
    "rnea_fext",
    "bias",
    "gravity",
    "crba",
    "aba",
    "aba_fext",
    "minv",
    "body_R",
    "body_p",
    "joint_jacobians",
    "com",
    "ke",
    "pe",
)


def fingers_urdf(n_fingers: int, n_links: int) -> str:
    """``n_fingers`` identical-structure chains of ``n_links`` revolute links on a palm."""
    rng = np.random.default_rng(3)
    out = [
        '<?xml version="1.0"?><robot name="fingers"><link name="palm"><inertial>'
        '<mass value="1"/><inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/>'
        "</inertial></link>"
    ]
    for f in range(n_fingers):
        parent = "palm"
        for i in range(n_links):
            name = f"f{f}_l{i}"
            m, c = rng.uniform(0.1, 0.5), rng.uniform(-0.02, 0.02, 3)
            ax = rng.normal(size=3)
            ax /= np.linalg.norm(ax)
            o = (0.05 * f, 0.0, 0.02) if i == 0 else tuple(rng.uniform(-0.01, 0.04, 3))
            out.append(
                f'<link name="{name}"><inertial><origin xyz="{c[0]} {c[1]} {c[2]}"/>'
                f'<mass value="{m}"/><inertia ixx="0.002" ixy="0.0001" ixz="0" '
                f'iyy="0.003" iyz="0" izz="0.0015"/></inertial></link>'
            )
            out.append(
                f'<joint name="j_{name}" type="revolute"><parent link="{parent}"/>'
                f'<child link="{name}"/><origin xyz="{o[0]} {o[1]} {o[2]}" '
                f'rpy="0.1 0.2 0.3"/><axis xyz="{ax[0]} {ax[1]} {ax[2]}"/>'
                '<limit lower="-3" upper="3" effort="1" velocity="1"/></joint>'
            )
            parent = name
    out.append("</robot>")
    return "".join(out)


def _chain(n, seed, joint_types):
    return robots.random_urdf(
        n, seed, joint_types=joint_types, p_fixed=0.0, branching=0.0, massless_prob=0.0
    )


CASES = {
    # name: (xml, floating, route, expected scanned run (la, lb)). Random chains of spherical
    # joints are often ill-conditioned (seed 5: ABA 2e-10 from Pinocchio, scanned and unrolled
    # alike); seed 7 is a well-conditioned one.
    "chain12_fixed": (
        lambda: _chain(12, 4, ("revolute", "prismatic", "continuous")),
        False,
        "urdf",
        (0, 12),
    ),
    "spherical10_float": (lambda: _chain(10, 7, ("spherical",)), True, "xml", (1, 11)),
    "fingers3x9": (lambda: fingers_urdf(3, 9), True, "urdf", (1, 10)),
}


@functools.cache
def case(name):
    make, floating, route, _ = CASES[name]
    return case_from_urdf(name, make(), floating, 11, (), route=route)


# [spherical10_float], [fingers3x9] slow: chain12_fixed stays against Pinocchio
@pytest.mark.parametrize("name", slow_params(CASES, ("spherical10_float", "fingers3x9")))
def test_scanned_chain_against_pinocchio(name):
    c = case(name)
    assert CASES[name][3] in tree.segments(c.model.topo), tree.segments(c.model.topo)
    for i in range(len(c.states)):
        jx, pn = c.jx(i), c.pin(i)
        for k in KEYS:
            assert_close(jx[k], pn[k], RTOL64, err_msg=f"{name} state {i}: {k}")


@pytest.mark.slow  # test_long_chain_scan_equals_unrolled checks every pass on 10 links
def test_scan_equals_unrolled_and_grad(monkeypatch):
    """The scanned and the unrolled evaluation agree to rounding; gradients through the scan
    agree with those through the unrolled code (the floating fingers)."""
    c = case("fingers3x9")
    model, s = c.model, c.states[0]
    q, v, tau = (jnp.asarray(s[k]) for k in ("q", "v", "tau"))
    B = jnp.asarray(np.random.default_rng(0).normal(size=(model.nv, 4)))
    W = jnp.asarray(np.random.default_rng(1).normal(size=(model.nv, 5)))

    def f(q, v, tau):
        im = jaxdyn.input_matrix(model, q, v, B, "iim")
        loss = lambda q: jnp.sum(
            W
            * jnp.concatenate(  # noqa: E731
                [jaxdyn.aba(model, q, v, tau)[:, None], jaxdyn.input_matrix(model, q, v, B).Bhat], 1
            )
        )
        return im, jaxdyn.crba(model, q), jax.grad(loss)(q)

    scanned = jax.tree_util.tree_map(np.asarray, jax.jit(f)(q, v, tau))
    monkeypatch.setattr(tree, "MIN_SCAN_RUN", 10**6)
    assert all(lb - la == 1 for la, lb in tree.segments(model.topo))
    unrolled = jax.tree_util.tree_map(np.asarray, jax.jit(lambda *a: f(*a))(q, v, tau))
    for a, b, what in zip(
        jax.tree_util.tree_leaves(scanned),
        jax.tree_util.tree_leaves(unrolled),
        ("qdd0", "Bhat", "M", "grad"),
    ):
        assert_close(a, b, RTOL64, err_msg=what)
    assert np.max(np.abs(scanned[2])) > 1e-3


# ------------------------------------------------- every pass scans: jaxpr size independent of n


def _eqn_count(jaxpr):
    """Equations of a jaxpr and their operands, those of its sub-jaxprs (jit, scan bodies,
    custom rules) included: operands too, as an operation taking one per level (Minv's unit
    torques once joined by ``jnp.concatenate``) is one equation whatever the chain's length."""
    return sum(
        1 + len(e.invars) + sum(_eqn_count(sub) for sub in jaxprs_in_params(e.params))
        for e in jaxpr.eqns
    )


def _scan_count(jaxpr):
    """``lax.scan`` equations of a jaxpr, those of its sub-jaxprs included."""
    return sum(
        (e.primitive.name == "scan") + sum(_scan_count(sub) for sub in jaxprs_in_params(e.params))
        for e in jaxpr.eqns
    )


def _long_chain(n):
    return jaxdyn.load_urdf(_chain(n, 4, ("revolute", "prismatic")), floating_base=False)


def _chain_fns(model):
    """Every level pass of the unclustered algorithms, behind one ``(q, v)`` signature."""
    from jaxdyn.algorithms import kinematics as kin
    from jaxdyn.algorithms.crba import crba_world
    from jaxdyn.algorithms.minv import minv_world
    from jaxdyn.osim import inertia as osi

    def packed(q):
        ws = kin.world_state(model, q, centered=True)
        Us, Ds, _ = osi.articulated_inertias_packed(model, ws.S, osi.world_inertias_packed(ws))
        return Us.flat(), Ds.flat()

    def aza(q, v):
        ws = kin.world_state(model, q, centered=True)
        inertias = jaxdyn.algorithms.aba.articulated_inertias(
            model, ws.S, jaxdyn.algorithms.aba.world_inertia_matrices(ws)
        )
        return jaxdyn.derivatives.fd.aza(model, ws.S, inertias, jnp.stack([v, 2 * v + 1], 1))

    return {
        "forward_kinematics": lambda q, v: jaxdyn.forward_kinematics(model, q),
        # XLA's RNEA (jaxdyn.rnea runs its C kernel on the CPU, one call whatever the chain)
        "rnea": lambda q, v: jaxdyn.algorithms.rnea.joint_forces_xla(model, q, v, v),
        # XLA's CRBA (jaxdyn.crba runs its C kernel on the CPU, one call whatever the chain)
        "crba": lambda q, v: crba_world(model, kin.world_state(model, q, centered=True)),
        # XLA's sweeps (jaxdyn.aba runs its C kernel on the CPU, one call whatever the chain)
        "aba": lambda q, v: jaxdyn.algorithms.aba.aba_solve_xla(model, q, v, v),
        # XLA's sweeps (jaxdyn.minv runs its C kernel on the CPU, one call whatever the chain)
        "minv": lambda q, v: minv_world(model, kin.world_state(model, q, centered=True)),
        "aza": aza,
        "aba_derivatives_aza": lambda q, v: jaxdyn.aba_derivatives(model, q, v, v, method="aza"),
        # XLA's IDSVA (jaxdyn.rnea_derivatives runs its C kernel on the CPU, one call whatever
        # the chain)
        "rnea_derivatives": lambda q, v: jaxdyn.derivatives.idsva.rnea_derivatives_xla(
            model, q, v, v
        ),
        "articulated_inertias_packed": lambda q, v: packed(q),
    }


def _sizes(n):
    model = _long_chain(n)
    z = jnp.zeros(model.nv)
    assert tree.segments(model.topo) == ((0, n),), tree.segments(model.topo)
    out = {}
    for k, f in _chain_fns(model).items():
        jp = jax.make_jaxpr(f)(z, z).jaxpr
        out[k] = _eqn_count(jp)
    return out


def test_long_chain_passes_compile_to_scan(monkeypatch):
    """The traced program of every pass is the same size for 12 and 40 links (the chain is one
    ``lax.scan`` run); with scans switched off it grows with the chain (the check can fail:
    traced unrolled at 10 and 12 links, the cheapest pair above ``MIN_SCAN_RUN``)."""
    # the passes' own programs, not their one-kernel call (jaxdyn.backend.small_calls: the
    # size check there keeps some passes of the longer chain out of it)
    monkeypatch.setitem(jaxdyn.config._values, "fused_unbatched", False)
    s12, s40 = _sizes(12), _sizes(40)
    assert s12 == s40, {k: (s12[k], s40[k]) for k in s12 if s12[k] != s40[k]}
    monkeypatch.setattr(tree, "MIN_SCAN_RUN", 10**6)
    u10, u12 = _sizes_unrolled(10), _sizes_unrolled(12)
    for k in s12:
        assert u12[k] > u10[k], k


def _sizes_unrolled(n):
    model = _long_chain(n)
    z = jnp.zeros(model.nv)
    assert all(lb - la == 1 for la, lb in tree.segments(model.topo))
    return {k: _eqn_count(jax.make_jaxpr(f)(z, z).jaxpr) for k, f in _chain_fns(model).items()}


#: links of test_long_chain_scan_equals_unrolled's chain, scanned with ``MIN_SCAN_RUN`` lowered to
#: it: the scanned program is the same whatever the run's length (see
#: test_long_chain_passes_compile_to_scan), the unrolled one grows with it (the 10-link chain
#: this test had at the default MIN_SCAN_RUN = 8 took twice its CPU time, same passes checked)
SHORT_SCAN = 4


def test_long_chain_scan_equals_unrolled(monkeypatch):
    """A chain of SHORT_SCAN links (one scanned run): every pass scanned agrees with the
    unrolled evaluation; ``minv`` is also checked against ``inv(crba)`` and AZA against
    ``minv @ u`` (independent routes). Each mode is one compiled program holding every pass."""
    model = _long_chain(SHORT_SCAN)
    monkeypatch.setattr(tree, "MIN_SCAN_RUN", SHORT_SCAN)
    assert tree.segments(model.topo) == ((0, SHORT_SCAN),)
    rng = np.random.default_rng(5)
    q = jnp.asarray(rng.uniform(-1, 1, model.nq))
    v = jnp.asarray(rng.normal(size=model.nv))

    def run():
        """The passes' results and the scans in their traced program."""
        fns = _chain_fns(model)
        traced = jax.jit(lambda q, v: {k: f(q, v) for k, f in fns.items()}).trace(q, v)
        out = jax.tree_util.tree_map(np.asarray, traced.lower().compile()(q, v))
        return out, _scan_count(traced.jaxpr.jaxpr)

    # the lowered MIN_SCAN_RUN takes effect: every pass scans the run
    scans = {k: _scan_count(jax.make_jaxpr(f)(q, v).jaxpr) for k, f in _chain_fns(model).items()}
    assert all(n > 0 for n in scans.values()), scans
    scanned, _ = run()
    M, Minv = scanned["crba"], scanned["minv"]
    assert_close(Minv @ M, np.eye(model.nv), RTOL64, err_msg="minv @ crba")
    assert_close(scanned["aza"], Minv @ np.stack([v, 2 * v + 1], 1), RTOL64, err_msg="aza")
    monkeypatch.setattr(tree, "MIN_SCAN_RUN", 10**6)
    assert all(lb - la == 1 for la, lb in tree.segments(model.topo))
    unrolled, n_scans = run()
    assert n_scans == 0
    for k in scanned:
        for a, b in zip(
            jax.tree_util.tree_leaves(scanned[k]), jax.tree_util.tree_leaves(unrolled[k])
        ):
            assert_close(a, b, RTOL64, err_msg=k)


# ------------------------------------------------- Delassus row sweeps on the level engine


def _delassus_fn(model, methods):
    """The Delassus matrix of a connect at the chain's tip by each of ``methods``, sharing one
    world state and packed articulated-inertia pass (``jaxdyn.osim``'s internal entry)."""
    from jaxdyn import constraints as C
    from jaxdyn.algorithms import kinematics as kin
    from jaxdyn.osim.delassus import delassus_world
    from jaxdyn.osim.inertia import articulated_inertias_packed, world_inertias_packed

    lay = C.layout(model.topo, (C.Connect(model.body_names[-1], offset=(0.01, 0.02, 0.03)),))

    def f(q):
        ws = kin.world_state(model, q)
        K = C.rows_from_placements(lay, C.placements_from_state(model, ws, lay))
        inertias = articulated_inertias_packed(model, ws.S, world_inertias_packed(ws))
        return {m: delassus_world(model, ws, lay, K, m, inertias) for m in methods}

    return f


def test_delassus_row_sweeps_scan():
    """PV-OSIM's, EFPA's and PV-OSIMr's constraint-row sweeps run on ``tree.backward_pass`` /
    ``forward_pass`` with their per-level row plans as static values: a chain's levels above
    the constrained tip carry the same plan and scan, so PV-OSIM's program is the same size for
    12 and 24 links, and PV-OSIMr's and EFPA's grow only by the per-level reads of their
    assembly (8 and 30 a level in :func:`_eqn_count`'s measure; their own unrolled loops grew
    by 109 (PV-OSIM), 54 and 123). The scanned 12-link matrices equal the dense
    ``J M^-1 J^T``."""
    methods = ("pv_osim", "pv_osimr", "efpa")
    sizes = {}
    for n in (12, 24):
        model = _long_chain(n)
        z = jnp.zeros(model.nq)
        sizes[n] = {
            m: _eqn_count(jax.make_jaxpr(_delassus_fn(model, (m,)))(z).jaxpr) for m in methods
        }
    per_level = {m: (sizes[24][m] - sizes[12][m]) / 12 for m in methods}
    assert per_level["pv_osim"] == 0, per_level
    assert per_level["pv_osimr"] <= 12 and per_level["efpa"] <= 40, per_level

    model = _long_chain(12)
    q = jnp.asarray(np.random.default_rng(8).uniform(-1, 1, model.nq))
    out = jax.jit(_delassus_fn(model, methods + ("dense",)))(q)
    for m in methods:
        assert_close(out[m], out["dense"], RTOL64, err_msg=m)

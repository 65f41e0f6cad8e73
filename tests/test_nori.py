"""jaxdyn.nori: Nori's sparse-matrix formulation of the dynamics, float64 unless stated.

* inverse / forward dynamics through ``D(q, v) d = r`` against ``jaxdyn.rnea`` / ``jaxdyn.aba``
  (fixed and floating bases), the per-body variables ``a_i``, ``f_i`` against world-frame RNEA,
  the tree LU against a dense solve of the assembled matrix;
* the offline analysis: Property 1 (the inverse-dynamics pattern is triangularisable, zero
  fill), the tree ordering against scipy's orderings, the numpy and JAX assemblies;
* estimation: talos_full standing on two welded feet (contact wrenches from
  ``jaxdyn.constrained_aba``) recovered from joint encoders, an IMU and sole force/torque
  sensors by weighted least squares, and by the tree LU from ankle F/T sensors; the paper's
  ill-posed load-cell biped (§VI) and its slippery-floor variant on a serial chain;
* gradients against central differences, a float32 lane, long chains through ``lax.scan``,
  bad input.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import nori, robots, spatial
from jaxdyn.algorithms import kinematics as kin
from jaxdyn.algorithms.rnea import rnea_world
from jaxdyn.model import tree
from jaxdyn.nori import analysis, assembly

from oracle import RTOL64, assert_close

B = 3  # states per robot


def random_states(model, seed, batch=B, fext_scale=1.0):
    """``batch`` random ``(q, v, a, f_ext)`` (numpy: no compilation)."""
    rng = np.random.default_rng(seed)
    q = np.stack([analysis.random_q(model, rng) for _ in range(batch)])
    v = rng.normal(size=(batch, model.nv))
    a = rng.normal(size=(batch, model.nv))
    fe = fext_scale * rng.normal(size=(batch, model.nb, 6))
    return q, v, a, fe


def chain_urdf(n, seed=0):
    """A serial chain of ``n`` revolute links with random geometry and inertias."""
    return robots.random_urdf(
        n,
        seed,
        joint_types=("revolute",),
        p_fixed=0.0,
        branching=0.0,
        massless_prob=0.0,
        name=f"chain{n}",
    )


def aligned_chain_urdf(n, seed=0):
    """A serial chain whose joint frames are all parallel at ``q = 0`` (zero ``rpy``): random
    offsets, axes and inertias."""
    rng = np.random.default_rng(seed)
    out = [
        '<?xml version="1.0"?><robot name="achain"><link name="link0"><inertial>'
        '<mass value="2"/><inertia ixx="0.02" ixy="0" ixz="0" iyy="0.03" iyz="0" '
        'izz="0.04"/></inertial></link>'
    ]
    for i in range(1, n + 1):
        m = rng.uniform(0.5, 2.0)
        box = rng.uniform(0.1, 0.4, 3) ** 2
        d = m / 12 * (box.sum() - box)  # a box's principal moments
        c = rng.uniform(-0.1, 0.1, 3)
        ax = rng.normal(size=3)
        ax /= np.linalg.norm(ax)
        o = rng.uniform(-0.3, 0.3, 3)
        out.append(
            f'<link name="link{i}"><inertial><origin xyz="{c[0]} {c[1]} {c[2]}"/>'
            f'<mass value="{m}"/><inertia ixx="{d[0]}" ixy="0" ixz="0" iyy="{d[1]}" iyz="0" '
            f'izz="{d[2]}"/></inertial></link>'
            f'<joint name="j{i}" type="revolute"><parent link="link{i - 1}"/>'
            f'<child link="link{i}"/><origin xyz="{o[0]} {o[1]} {o[2]}" rpy="0 0 0"/>'
            f'<axis xyz="{ax[0]} {ax[1]} {ax[2]}"/>'
            '<limit lower="-3" upper="3" effort="1" velocity="1"/></joint>'
        )
    out.append("</robot>")
    return "".join(out)


def body_frame_rnea(model, q, v, qdd, fext=None):
    """Body-frame RNEA in numpy (paper eq. 3): accelerations ``a_i`` and transmitted wrenches
    ``f_i`` (the values that accelerometers and F/T sensors read); checked against
    ``jaxdyn.rnea`` in :func:`test_body_variables_match_world_rnea`."""
    fext = np.zeros((model.nb, 6)) if fext is None else fext
    _, _, X, Ib, vel, c, nu, a0 = analysis.numpy_quantities(model, q, v)
    t = model.topo
    S = np.asarray(model.dof_axis)
    a = np.zeros((model.nb, 6))
    for b in range(model.nb):
        sl = model.v_slice(b)
        par = a0 if t.parent[b] < 0 else a[t.parent[b]]
        a[b] = X[b] @ par + S[sl].T @ qdd[sl] + c[b]
    f = np.einsum("bij,bj->bi", Ib, a) + nu - fext
    for b in reversed(range(model.nb)):
        if t.parent[b] >= 0:
            f[t.parent[b]] += X[b].T @ f[b]
    return a, f


def joint_torques(model, f):
    """``tau_i = S_i^T f_i`` (eq. 3τ) from body-frame transmitted wrenches."""
    S = np.asarray(model.dof_axis)
    return np.concatenate([S[model.v_slice(b)] @ f[b] for b in range(model.nb)])


# ----------------------------------------------------------------------------- ID / FD

#: (robot, floating base) of the default run (talos_full through the two-feet tests below);
#: every robot of the suite, fixed and floating, in the slow sweep
DEFAULT = (("arm7", False), ("quad12", True))
SWEEP = tuple(
    (r, fb)
    for r in (
        "ur5",
        "panda",
        "solo12",
        "anymal",
        "hyq",
        "talos_reduced",
        "talos_full",
        "romeo",
        "arm7",
        "quad12",
    )
    for fb in (False, True)
    if (r, fb) not in DEFAULT
)


@functools.cache
def dynamics_results(name, floating):
    """One jit per robot: RNEA, ABA, and both through the sparse system, on B states. For
    quad12 (floating) also the full solutions of the inverse / forward dynamics systems, the
    world-frame RNEA quantities and the assembled dense matrices."""
    model = robots.load(name, floating_base=floating)
    q, v, a, fe = random_states(model, 7)
    full = (name, floating) == ("quad12", True)
    if full:
        sid = nori.build(model, nori.inverse_dynamics_knowns(), analyze=True)
        sfd = nori.build(model, nori.forward_dynamics_knowns(), analyze=True)

    def f(q, v, a, fe):
        tau = jaxdyn.rnea(model, q, v, a, fe)
        out = {
            "tau": tau,
            "aba": jaxdyn.aba(model, q, v, tau, fe),
            "a": a,
            "M": jaxdyn.crba(model, q) if name == "talos_full" else jnp.eye(model.nv),
        }
        if not full:
            out["nori_tau"] = nori.inverse_dynamics(model, q, v, a, fe)
            out["nori_qdd"] = nori.forward_dynamics(model, q, v, tau, fe)
            return out
        out["sol"] = sol = nori.solve(sid, model, q, v, (a, fe))
        out["fd"] = nori.solve(sfd, model, q, v, (tau, fe))
        out["nori_tau"], out["nori_qdd"] = sol.tau, out["fd"].qdd
        ws = kin.world_state(model, q, centered=True)
        _, _, aw, Fw = rnea_world(model, ws, v, a, fe)
        out["a_world"] = spatial.act_inv_motion(ws.R, ws.p, aw)
        out["f_world"] = spatial.act_inv_force(ws.R, ws.p, Fw)
        out["D"], out["r"] = nori.assemble(sid, model, q, v, (a, fe))
        out["Dfd"], out["rfd"] = nori.assemble(sfd, model, q, v, (tau, fe))
        return out

    res = jax.jit(jax.vmap(f))(q, v, a, fe)
    return (model, sid, sfd, (q, v, a, fe), res) if full else res


@pytest.fixture(
    scope="module", params=DEFAULT, ids=lambda p: f"{p[0]}-{'float' if p[1] else 'fixed'}"
)
def dyn(request):
    res = dynamics_results(*request.param)
    return res[-1] if isinstance(res, tuple) else res


def _check_dynamics(res, singular=False):
    """Inverse dynamics to 1e-10 of rnea. Forward dynamics: the backward error
    ``M (qdd - qdd_aba)`` to 1e-10 of ``tau``, and the forward error to 1e-10 of ``qdd`` where
    ``cond(M) <= 1e6``; beyond, to ``cond(M) * 1e-16``. (talos_full: cond(M) ~ 1e7 from its
    fingertips; the torques of world-frame RNEA and of the body-frame rows differ by
    rounding, ~3e-13, which the fingertips' tiny inertias turn into ~2e-10 in qdd -- ABA
    round trips show the same amplification.)"""
    for i in range(B):
        assert_close(res["nori_tau"][i], res["tau"][i], RTOL64, "inverse dynamics vs rnea")
        if singular:
            continue
        M = np.asarray(res["M"][i])
        dq = np.asarray(res["nori_qdd"][i] - res["aba"][i])
        assert_close(
            M @ dq,
            np.zeros_like(dq),
            RTOL64 * max(1.0, np.max(np.abs(res["tau"][i]))),
            "forward dynamics: backward error M (qdd - qdd_aba)",
        )
        cond = np.linalg.cond(M)  # the identity where M was not computed (well conditioned)
        tol = RTOL64 if cond <= 1e6 else cond * 1e-16
        assert_close(res["nori_qdd"][i], res["aba"][i], tol, "forward dynamics vs aba")


def test_dynamics_match_rnea_aba(dyn):
    _check_dynamics(dyn)


@pytest.mark.slow
@pytest.mark.parametrize("robot", SWEEP, ids=lambda p: f"{p[0]}-{'float' if p[1] else 'fixed'}")
def test_dynamics_sweep(robot):
    # romeo's mass matrix is singular (massless finger chains): inverse dynamics only
    _check_dynamics(dynamics_results(*robot), singular=robot[0] == "romeo")


@pytest.fixture(scope="module")
def quad():
    """quad12, first state: the systems, the state and the results of ``dynamics_results``."""
    model, sid, sfd, states, res = dynamics_results("quad12", True)
    first = jax.tree_util.tree_map(lambda x: np.asarray(x[0]), res)
    return model, sid, sfd, tuple(np.asarray(x[0]) for x in states), first


def test_body_variables_match_world_rnea(quad):
    """``a_i`` and ``f_i`` (paper §II: acceleration with the fictitious -g, and the wrench
    transmitted from the parent, body coordinates) against world-frame RNEA."""
    model, _, _, (q, v, a, fe), res = quad
    sol = res["sol"]
    assert_close(sol.a, res["a_world"], RTOL64, "a_i")
    assert_close(sol.f, res["f_world"], RTOL64, "f_i")
    an, fn = body_frame_rnea(model, q, v, a, fe)  # the numpy oracle of the tests below
    assert_close(an, sol.a, RTOL64, "numpy a_i")
    assert_close(fn, sol.f, RTOL64, "numpy f_i")
    assert_close(joint_torques(model, fn), sol.tau, RTOL64, "numpy tau")


def test_tree_lu_equals_dense_solve(quad):
    model, sid, sfd, (q, v, a, fe), res = quad
    for D, r, s in ((res["D"], res["r"], res["sol"]), (res["Dfd"], res["rfd"], res["fd"])):
        d = np.linalg.solve(D, r)
        a_, f_, tau, fx, qdd = assembly.split_solution(sid, d)
        for x, y, what in (
            (a_, s.a, "a"),
            (f_, s.f, "f"),
            (tau, s.tau, "tau"),
            (fx, s.fx, "fx"),
            (qdd, s.qdd, "qdd"),
        ):
            assert_close(y, x, RTOL64, what)
    assert_close(res["fd"].qdd, a, RTOL64, "forward dynamics recovers a")


def test_numpy_assembly_matches_jax(quad):
    model, sid, _, (q, v, a, fe), res = quad
    Dn, rn = analysis.numpy_assemble(sid, model, q, v, (a, fe))
    assert_close(Dn, res["D"], RTOL64, "D")
    assert_close(rn, res["r"], RTOL64, "r")


def test_property1_and_orderings(quad):
    """Property 1: the inverse-dynamics pattern is triangularisable (zero fill, greedy proof),
    and the tree ordering gives zero fill too; for forward dynamics the tree ordering fills
    less and needs fewer flops than every scipy ordering."""
    model, sid, sfd, _, _ = quad
    an = sid.analysis
    assert an.triangular
    pr, pc = an.triangular_perm
    pat = analysis.worst_case_pattern(sid, model)
    P = pat[np.ix_(pr, pc)]
    assert not np.any(np.triu(P, 1)), "permuted pattern is not lower triangular"
    assert np.all(np.diag(P))
    assert an.orderings["tree"].fill == 0
    assert min(s.fill for k, s in an.orderings.items() if k != "tree") > 0
    fd = sfd.analysis
    assert not fd.triangular
    tree_ = fd.orderings["tree"]
    for k, s in fd.orderings.items():
        if k != "tree":
            assert tree_.fill <= s.fill, (k, tree_.fill, s.fill)
            assert tree_.factor_flops <= s.factor_flops, (k, tree_.factor_flops, s.factor_flops)
    assert an.structural_rank == sid.n_vars
    assert "Property 1" in str(an)


# ----------------------------------------------------------------------------- estimation

SOLES = ("left_sole_link", "right_sole_link")
IMU = "imu_link"


@pytest.fixture(scope="module")
def talos():
    """talos_full standing with both soles welded: ``q, v, tau, qdd`` from
    ``jaxdyn.constrained_aba``, the contact wrenches on the feet (body frames) and at the
    soles, the body-frame accelerations and transmitted wrenches."""
    model = robots.load("talos_full")
    rng = np.random.default_rng(1)
    q = np.asarray(jaxdyn.neutral_configuration(model)).copy()
    q[7:] += rng.uniform(-0.2, 0.2, model.nq - 7)
    v = 0.3 * rng.normal(size=model.nv)
    tau = rng.normal(size=model.nv)
    tau[:6] = 0.0
    cs = tuple(jaxdyn.Weld(s) for s in SOLES)
    qdd, lam = jax.jit(lambda q, v, t: jaxdyn.constrained_aba(model, q, v, t, cs))(q, v, tau)
    qdd, lam = np.asarray(qdd), np.asarray(lam).reshape(2, 6)
    fext = np.zeros((model.nb, 6))
    for i, s in enumerate(SOLES):
        f = model.frame_index(s)
        R, p = np.asarray(model.frame_R[f]), np.asarray(model.frame_p[f])
        fext[model.topo.frame_parent[f]] += np.asarray(spatial.act_force(R, p, lam[i]))
    a, f = body_frame_rnea(model, q, v, qdd, fext)
    feet = tuple(int(model.topo.frame_parent[model.frame_index(s)]) for s in SOLES)
    others = tuple(model.body_names[b] for b in range(model.nb) if b not in feet)
    return model, (q, v, tau, qdd, lam, fext, a, f), feet, others


def imu_reading(model, q, v, a_body):
    """Accelerometer and (differentiated) gyroscope readings at the IMU frame."""
    fr = model.frame_index(IMU)
    b = int(model.topo.frame_parent[fr])
    vel = analysis.numpy_quantities(model, q, v)[4][b]
    R, p = np.asarray(model.frame_R[fr]), np.asarray(model.frame_p[fr])
    a = a_body[b]
    w, vo = vel[:3], vel[3:]
    acc = R.T @ (a[3:] + np.cross(a[:3], p) + np.cross(w, vo + np.cross(w, p)))
    return acc, R.T @ a[:3]


def test_talos_two_feet_estimate(talos):
    """Weighted least squares (MAP without prior) from encoders (joint accelerations), an IMU
    on the torso and 6-axis F/T sensors in the soles, with the unactuated base and the
    wrench-free links known: the simulated joint torques, base acceleration and contact
    wrenches are recovered."""
    model, (q, v, tau, qdd, lam, fext, a, f), feet, others = talos
    known = [nori.ExternalWrench(others), nori.JointTorque("root_joint")]
    sensors = [
        nori.JointAcceleration(model.joint_names[1:], std=1e-3),
        nori.Accelerometer(IMU, std=1e-3),
        nori.Gyroscope(IMU, std=1e-3),
        nori.ExternalWrench(SOLES, std=1e-3),
    ]
    system = nori.build(model, known, sensors)
    assert not system.square and system.n_rows > system.n_vars
    acc, gyr = imu_reading(model, q, v, a)
    values = [np.zeros((len(others), 6)), np.zeros(6), qdd[6:], acc, gyr, lam]
    est = jax.jit(lambda q, v, y: nori.estimate(system, model, q, v, y))(q, v, values)
    assert_close(est.tau[6:], tau[6:], 1e-8, "joint torques")
    assert_close(est.qdd, qdd, 1e-8, "accelerations (base from the IMU)")
    assert_close(est.fx[np.asarray(feet)], fext[np.asarray(feet)], 1e-8, "contact wrenches")


def test_talos_two_feet_tree_lu(talos):
    """The same robot with every joint acceleration known and F/T sensors in the ankle joints:
    square per body, solved exactly by the tree LU; the base wrench comes out zero."""
    model, (q, v, tau, qdd, lam, fext, a, f), feet, others = talos
    known = [nori.JointAcceleration(), nori.ExternalWrench(others)]
    sensors = [nori.ForceTorque(model.joint_names[b]) for b in feet]
    system = nori.build(model, known, sensors)
    assert system.square
    values = [qdd, np.zeros((len(others), 6))] + [f[b] for b in feet]
    sol = jax.jit(lambda q, v, y: nori.solve(system, model, q, v, y))(q, v, values)
    assert_close(sol.tau, tau, RTOL64, "joint torques and zero base wrench")
    assert_close(sol.fx, fext, RTOL64, "contact wrenches")
    assert_close(sol.a, a, RTOL64, "accelerations")


def test_load_cells_on_two_feet_are_ill_posed(talos):
    """Paper §VI (Property 3, Remark 5): four load cells per foot measure (nx, ny, fz) of each
    contact wrench; with coplanar soles (neutral configuration) the tangential forces and
    normal torques are unobservable, and build says so."""
    model, _, feet, others = talos
    known = [nori.ExternalWrench(others), nori.JointTorque("root_joint")]
    sensors = [
        nori.JointAcceleration(model.joint_names[1:]),
        nori.Accelerometer(IMU),
        nori.Gyroscope(IMU),
        nori.LoadCells(SOLES[0]),
        nori.LoadCells(SOLES[1]),
    ]
    with pytest.raises(ValueError, match="ill-posed") as e:
        nori.build(model, known, sensors)
    msg = str(e.value)
    assert "neutral configuration" in msg and "rank 907 < 910" in msg
    for b in feet:
        assert f"fx[{model.body_names[b]}] (nx, ny, nz, fx, fy)" in msg
    assert "tau[leg_left_1_joint]" in msg


def slippery_chain(n):
    """Paper §VI's well-posed variant (eq. 24) on a floating serial chain whose end links are
    feet: load cells (nx, ny, fz) and zero tangential forces (slippery floor) at both ends."""
    model = jaxdyn.load_urdf(aligned_chain_urdf(n, seed=4), floating_base=True)
    ends = (model.body_names[0], model.body_names[-1])
    mid = tuple(model.body_names[1:-1])
    known = [
        nori.ExternalWrench(mid),
        nori.JointTorque("root_joint"),
        nori.JointAcceleration(),
        nori.ExternalWrench(ends, ("fx", "fy")),
    ]
    sensors = [nori.LoadCells(ends[0], std=1e-3), nori.LoadCells(ends[1], std=1e-3)]
    return model, ends, mid, known, sensors


def slippery_data(model, mid, seed):
    rng = np.random.default_rng(seed)
    q = analysis.random_q(model, rng)
    v = rng.normal(size=model.nv)
    fext = np.zeros((model.nb, 6))
    w = rng.normal(size=(2, 6))
    w[:, 3:5] = 0.0  # slippery: no tangential force
    fext[0], fext[-1] = w
    qdd = rng.normal(size=model.nv)
    tau = joint_torques(model, body_frame_rnea(model, q, v, qdd, fext)[1])
    # the base wrench tau[:6] is a known value here (zero for a real robot)
    values = [
        np.zeros((len(mid), 6)),
        tau[:6],
        qdd,
        np.zeros((2, 2)),
        w[0, [0, 1, 5]],
        w[1, [0, 1, 5]],
    ]
    return q, v, tau, w, values


def test_slippery_chain_load_cells():
    """Well-posed away from parallel feet: the joint torques and the normal torques nz are
    recovered (12 links: the estimator's passes go through lax.scan); with both feet's normals
    parallel (all frames aligned at q = 0) the two nz are not separable: ill-posed, named."""
    model, ends, mid, known, sensors = slippery_chain(12)  # long enough for a scanned run
    with pytest.raises(ValueError, match=r"neutral configuration.*fx\[link0\] \(nz\)"):
        nori.build(model, known, sensors)
    q, v, tau, w, values = slippery_data(model, mid, 0)
    system = nori.build(model, known, sensors, check_states=[q])
    est = jax.jit(lambda y: nori.estimate(system, model, q, v, y))(values)
    assert_close(est.tau, tau, 1e-8, "joint torques")
    assert_close(est.fx[np.asarray([0, -1])], w, 1e-8, "contact wrenches (nz estimated)")


def test_estimate_noise_and_prior():
    """Noisy redundant sensors: the estimate's error shrinks with the noise; a prior makes an
    ill-posed system solvable (MAP) and keeps what is measured."""
    model = jaxdyn.load_urdf(chain_urdf(4, seed=2))
    rng = np.random.default_rng(2)
    q, v, a = rng.normal(size=(3, model.nv))
    tau = joint_torques(model, body_frame_rnea(model, q, v, a)[1])
    known = [nori.ExternalWrench()]
    half = model.joint_names[:2]
    sensors = [nori.JointAcceleration(), nori.JointTorque(half)]
    system = nori.build(model, known, sensors)
    with pytest.raises(ValueError, match=r"ill-posed.*qdd\[joint3\]"):
        nori.build(model, known, [nori.JointTorque(half)])
    prior_sys = nori.build(model, known, [nori.JointTorque(half)], check=False)

    @jax.jit
    def f(acc, t3):
        fe = jnp.zeros((model.nb, 6))
        est = nori.estimate(system, model, q, v, [fe, acc, t3], sensor_std=0.1)
        map_ = nori.estimate(prior_sys, model, q, v, [fe, t3], sensor_std=1e-3, prior_std=10.0)
        return est.tau, map_.tau

    errs = []
    for noise in (1e-2, 1e-5):
        t_est, t_map = f(a + noise * rng.normal(size=model.nv), tau[:2])
        errs.append(float(np.max(np.abs(t_est - tau))))
    assert errs[0] < 0.5 and errs[1] < 1e-2 * errs[0], errs
    assert np.all(np.isfinite(t_map))
    assert_close(t_map[:2], tau[:2], 1e-4, "measured torques kept by the MAP estimate")


def test_sensor_rows_consistent():
    """Every sensor kind used as an exact row holds at the inverse-dynamics solution --
    ForceTorque at a frame, ExternalWrench at a rotated frame with some components,
    Accelerometer, Gyroscope (quad12) -- and the over-determined estimate reproduces it."""
    model = robots.load("quad12")
    q, v, a, fe = (np.asarray(x[0]) for x in random_states(model, 11))
    ab, fb = body_frame_rnea(model, q, v, a, fe)
    tau = joint_torques(model, fb)
    foot = model.frame_index("FL_FOOT")
    b = int(model.topo.frame_parent[foot])
    R, p = np.asarray(model.frame_R[foot]), np.asarray(model.frame_p[foot])
    f_at = np.asarray(spatial.act_inv_force(R, p, fb[b]))
    fx_at = np.asarray(spatial.act_inv_force(R, p, fe[b]))
    vel = analysis.numpy_quantities(model, q, v)[4][b]
    w, vo = vel[:3], vel[3:]
    acc = R.T @ (ab[b, 3:] + np.cross(ab[b, :3], p) + np.cross(w, vo + np.cross(w, p)))
    sensors = [
        nori.ForceTorque(model.joint_names[b], "FL_FOOT"),
        nori.ExternalWrench("FL_FOOT", ("fz", "nx")),
        nori.Accelerometer("FL_FOOT"),
        nori.Gyroscope("FL_FOOT"),
    ]
    system = nori.build(model, nori.inverse_dynamics_knowns(), sensors)
    y = [a, fe, f_at, fx_at[[5, 0]], acc, R.T @ ab[b, :3]]
    D, r = analysis.numpy_assemble(system, model, q, v, y)
    d = np.concatenate(
        [
            np.concatenate([ab[i], fb[i], tau[model.v_slice(i)], fe[i], a[model.v_slice(i)]])
            for i in range(model.nb)
        ]
    )
    assert_close(D @ d, r, RTOL64, "every row holds at the solution")
    est = jax.jit(lambda y: nori.estimate(system, model, q, v, y))(y)
    assert_close(est.tau, tau, 1e-9, "estimate")


# ----------------------------------------------------------------------------- autodiff, float32


def numpy_forward_dynamics(model, q, v, tau):
    """Forward dynamics by a dense solve of the assembled (numpy) system."""
    system = nori.build(model, nori.forward_dynamics_knowns(), check=False)
    D, r = analysis.numpy_assemble(system, model, q, v, (tau, np.zeros((model.nb, 6))))
    return assembly.split_solution(system, np.linalg.solve(D, r))[4]


def test_gradients_vs_finite_differences():
    """``jax.grad`` of inverse plus forward dynamics with respect to ``q``, ``v``, ``a`` and
    ``tau`` (a 3-link chain) against central differences of the numpy oracles."""
    model = jaxdyn.load_urdf(chain_urdf(3, seed=5))
    rng = np.random.default_rng(5)
    args = tuple(rng.normal(size=(4, model.nv)))
    w1, w2 = rng.normal(size=(2, model.nv))

    def f(q, v, a, t):
        return jnp.dot(w1, nori.inverse_dynamics(model, q, v, a)) + jnp.dot(
            w2, nori.forward_dynamics(model, q, v, t)
        )

    def f_np(q, v, a, t):
        tau = joint_torques(model, body_frame_rnea(model, q, v, a)[1])
        return w1 @ tau + w2 @ numpy_forward_dynamics(model, q, v, t)

    g = jax.jit(jax.grad(f, argnums=(0, 1, 2, 3)))(*args)
    h = 1e-6
    for i in range(4):
        fd = []
        for e in np.eye(model.nv):
            xp, xm = list(args), list(args)
            xp[i], xm[i] = args[i] + h * e, args[i] - h * e
            fd.append((f_np(*xp) - f_np(*xm)) / (2 * h))
        assert_close(g[i], np.array(fd), 1e-6, f"gradient {i}")


@pytest.mark.slow
def test_estimate_gradient_wrt_measurements():
    """d(estimated torques)/d(measurements) by autodiff vs central differences (the estimate
    is affine in the measurements, so a unit step is exact)."""
    model = jaxdyn.load_urdf(chain_urdf(3, seed=6))
    rng = np.random.default_rng(6)
    q, v, a = rng.normal(size=(3, model.nv))
    system = nori.build(
        model,
        [nori.ExternalWrench()],
        [nori.JointAcceleration(), nori.JointTorque(model.joint_names[:2])],
    )
    tau = joint_torques(model, body_frame_rnea(model, q, v, a)[1])
    fe = np.zeros((model.nb, 6))
    f = lambda acc: nori.estimate(system, model, q, v, [fe, acc, tau[:2]], sensor_std=1e-3).tau
    E = np.eye(model.nv)
    J, fp, fm = jax.jit(lambda a: (jax.jacfwd(f)(a), jax.vmap(f)(a + E), jax.vmap(f)(a - E)))(a)
    assert_close(J, ((fp - fm) / 2).T, 1e-7, "jacobian")


def test_float32_lane():
    model = jaxdyn.load_urdf(aligned_chain_urdf(4, seed=13), floating_base=True)
    q, v, a, fe = (np.asarray(x[0]) for x in random_states(model, 13, fext_scale=0.1))
    tau = joint_torques(model, body_frame_rnea(model, q, v, a, fe)[1])

    @jax.jit
    def f(q, v, a, t, fe):
        return (
            nori.inverse_dynamics(model, q, v, a, fe),
            nori.forward_dynamics(model, q, v, t, fe),
        )

    t32, a32 = f(*(x.astype(np.float32) for x in (q, v, a, tau, fe)))
    assert t32.dtype == jnp.float32 and a32.dtype == jnp.float32
    assert_close(t32, tau, 2e-5, "float32 inverse dynamics")
    assert_close(a32, a, 2e-4, "float32 forward dynamics")


@pytest.mark.slow
def test_armature():
    """``model.armature`` enters ``Rt_i`` as ``+ armature qdd_i`` (jaxdyn's rnea / aba add it
    to the mass matrix diagonal)."""
    model = jaxdyn.load_urdf(chain_urdf(3, seed=8), floating_base=True).with_armature(0.05)
    q, v, a, fe = (x[0] for x in random_states(model, 8))

    @jax.jit
    def f(q, v, a, fe):
        tau = jaxdyn.rnea(model, q, v, a, fe)
        return (
            tau,
            nori.inverse_dynamics(model, q, v, a, fe),
            nori.forward_dynamics(model, q, v, tau, fe),
        )

    tau, t, qdd = f(q, v, a, fe)
    assert_close(t, tau, RTOL64, "inverse dynamics with armature")
    assert_close(qdd, a, RTOL64, "forward dynamics with armature")
    system = nori.build(model, nori.forward_dynamics_knowns())
    assert system.armature
    with pytest.raises(ValueError, match="armature"):
        nori.solve(system, model.with_armature(None), q, v, (tau, fe))


# ----------------------------------------------------------------------------- long chains


def _ops(f, *args):
    return len(jax.jit(f).lower(*args).as_text().splitlines())


def test_long_chains_scan():
    """Chains of 12 and 24 links trace to programs of the same size (the level runs go
    through lax.scan); the 12-link one agrees with RNEA and recovers ``a`` by forward dynamics;
    the estimator's scan is exercised by :func:`test_slippery_chain_load_cells`."""
    sizes = {}
    for n in (12, 24):
        model = jaxdyn.load_urdf(chain_urdf(n))
        q, v, a, fe = (x[0] for x in random_states(model, n, batch=1))
        fid = lambda q, v, a, fe: nori.inverse_dynamics(model, q, v, a, fe)
        ffd = lambda q, v, t, fe: nori.forward_dynamics(model, q, v, t, fe)
        sizes[n] = (_ops(fid, q, v, a, fe), _ops(ffd, q, v, a, fe))
    assert sizes[12] == sizes[24], sizes
    assert tree.MIN_SCAN_RUN < 12

    model = jaxdyn.load_urdf(chain_urdf(12))
    q, v, a, fe = (x[0] for x in random_states(model, 12, batch=1))
    tau = joint_torques(model, body_frame_rnea(model, q, v, a, fe)[1])
    t, qdd = jax.jit(lambda *x: (fid(*x[:4]), ffd(x[0], x[1], x[4], x[3])))(q, v, a, fe, tau)
    assert_close(t, tau, RTOL64, "chain ID")
    assert_close(qdd, a, 1e-9, "chain FD")


# ----------------------------------------------------------------------------- bad input


def test_bad_input():
    model = robots.load("quad12")
    q = np.asarray(jaxdyn.neutral_configuration(model))
    z = np.zeros(model.nv)
    fe = np.zeros((model.nb, 6))
    with pytest.raises(ValueError, match="Accelerometer.*no frame named 'NOPE'"):
        nori.build(model, sensors=[nori.Accelerometer("NOPE")])
    with pytest.raises(ValueError, match="no moving joint named 'NOPE'"):
        nori.build(model, known=[nori.JointTorque("NOPE")])
    with pytest.raises(ValueError, match="must be quantities of jaxdyn.nori"):
        nori.build(model, known=["qdd"])
    with pytest.raises(ValueError, match="components must be"):
        nori.ExternalWrench("FL_FOOT", ("fz", "nq"))
    with pytest.raises(ValueError, match="std must be a positive"):
        nori.JointTorque(std=-1.0)
    # forward dynamics without the external wrenches: under-determined, and named
    with pytest.raises(ValueError, match=r"ill-posed \(structurally\).*fx\[base_link\]"):
        nori.build(model, known=[nori.JointTorque()])
    sfd = nori.build(model, nori.forward_dynamics_knowns(), check=False)
    with pytest.raises(ValueError, match=r"value of JointTorque\(\) has shape"):
        nori.solve(sfd, model, q, z, (z[:3], fe))
    with pytest.raises(ValueError, match="expected 2 values"):
        nori.solve(sfd, model, q, z, (z,))
    bad = z.copy()
    bad[4] = np.nan
    with pytest.raises(ValueError, match=r"value of JointTorque\(\) is not finite"):
        nori.solve(sfd, model, q, z, (bad, fe))
    # a system that is not square per body is not for the tree LU
    est = nori.build(model, [nori.ExternalWrench()], [nori.JointAcceleration(), nori.JointTorque()])
    with pytest.raises(ValueError, match="use nori.estimate"):
        nori.solve(est, model, q, z, (fe, z, z))
    with pytest.raises(ValueError, match="no moving body"):
        nori.build(jaxdyn.load_urdf('<robot name="w"><link name="base"/></robot>'))
    other = robots.load("arm7")
    with pytest.raises(ValueError, match="built for another model"):
        nori.solve(sfd, other, np.zeros(other.nq), np.zeros(other.nv), (np.zeros(7), fe))


def test_no_state_to_check_is_named():
    """An empty ``check_states`` and ``analyze(n_samples=0)`` say so (there is no sparsity
    pattern without a state: both were an ``AttributeError`` on ``None``)."""
    model = robots.load("arm7")
    knowns = nori.forward_dynamics_knowns()
    with pytest.raises(ValueError, match="check_states is empty"):
        nori.build(model, knowns, check_states=[])
    system = nori.build(model, knowns, check=False)
    with pytest.raises(ValueError, match="n_samples must be at least 1, got 0"):
        nori.analyze(system, model, n_samples=0)


def test_nan_under_jit():
    """NaN measurements under jit: an error naming the quantity (equinox.error_if), unless
    jaxdyn.config's value_checks is off (then NaN propagates). Last in the module: switching
    the check clears JAX's caches."""
    model = jaxdyn.load_urdf(chain_urdf(2))
    system = nori.build(
        model, [nori.ExternalWrench()], [nori.JointAcceleration(), nori.JointTorque()]
    )
    q = np.zeros(model.nq)
    fe = np.zeros((model.nb, 6))
    bad = np.zeros(model.nv)
    bad[1] = np.nan
    f = lambda t: nori.estimate(system, model, q, q, (fe, q, t)).tau
    with pytest.raises(Exception, match=r"value of JointTorque\(\) is not finite"):
        jax.block_until_ready(jax.jit(f)(bad))
    with jaxdyn.config.override(value_checks=False):
        assert np.any(np.isnan(np.asarray(jax.jit(f)(bad))))


# ------------------------------------------------------ issue 51, items 4 and 6 (h-algos)


def _massless_tip(name="arm7"):
    """``name`` with its last body massless and inertia-free: a singular mass matrix."""
    import equinox as eqx

    m = robots.load(name)
    m = eqx.tree_at(lambda m: m.mass, m, m.mass.at[-1].set(0.0))
    return eqx.tree_at(lambda m: m.inertia, m, m.inertia.at[-1].set(0.0))


def test_eager_value_checks_raise_check_error():
    """Issue 51, item 4 (nori's part): eager ``nori.solve`` / ``estimate`` /
    ``forward_dynamics`` value checks (here a quaternion not of unit norm) raise jaxdyn's
    documented ``CheckError`` naming the function, not XLA's ``JaxRuntimeError``."""
    model = robots.load("quad12")
    q = np.array(jaxdyn.neutral_configuration(model))
    q[3:7] = [2.0, 0.0, 0.0, 0.0]
    z = np.zeros(model.nv)
    fe = np.zeros((model.nb, 6))
    sfd = nori.build(model, nori.forward_dynamics_knowns(), check=False)
    calls = {
        "nori.solve": lambda: nori.solve(sfd, model, q, z, (z, fe)),
        "nori.estimate": lambda: nori.estimate(sfd, model, q, z, (z, fe)),
        "nori.solve ": lambda: nori.forward_dynamics(model, q, z, z),
    }
    for name, call in calls.items():
        with pytest.raises(jaxdyn.CheckError, match=rf"^{name.strip()}: a quaternion in q"):
            call()


def test_singular_state_named_by_checks_and_all_nan():
    """Issue 51, item 6: a state at which the system is singular (a massless moving tip in
    forward dynamics; the slippery chain with parallel feet, built for a generic pose) gave a
    mix of finite values and NaN / inf, without a message. With value checks on, eager
    ``solve`` / ``estimate`` raise a ``CheckError`` saying so; ``forward_dynamics`` returns all
    NaN, as ``jaxdyn.aba`` does on the same singular mass matrix."""
    model = _massless_tip()
    q = np.asarray(jaxdyn.neutral_configuration(model))
    z = np.zeros(model.nv)
    fe = np.zeros((model.nb, 6))
    assert np.all(np.isnan(np.asarray(jaxdyn.aba(model, q, z, z))))
    qdd = np.asarray(nori.forward_dynamics(model, q, z, z))
    assert np.all(np.isnan(qdd)), qdd
    sfd = nori.build(model, nori.forward_dynamics_knowns(), check=False)
    with pytest.raises(jaxdyn.CheckError, match="nori.solve: the system is singular at this"):
        nori.solve(sfd, model, q, z, (z, fe))
    chain, ends, mid, known, sensors = slippery_chain(3)
    qg, v, tau, w, values = slippery_data(chain, mid, 0)
    system = nori.build(chain, known, sensors, check_states=[qg])
    # jaxdyn.jit: one compiled program for both states, its failed checks as CheckError
    f = jaxdyn.jit(lambda q: nori.estimate(system, chain, q, v, values).tau)
    assert_close(f(qg), tau, 1e-8, "well-posed state")
    q0 = np.asarray(jaxdyn.neutral_configuration(chain))
    with pytest.raises(jaxdyn.CheckError, match="nori.estimate: the system is singular"):
        f(q0)


def test_estimate_warns_on_numerically_singular_weights():
    """Issue 51, item 6: standard deviations spanning more than ``STD_SPREAD_WARN`` make the
    weighted normal equations numerically singular; the estimate used to degrade silently."""
    model = jaxdyn.load_urdf(chain_urdf(3, seed=2))
    rng = np.random.default_rng(3)
    q, v, a = rng.normal(size=(3, model.nv))
    tau = joint_torques(model, body_frame_rnea(model, q, v, a)[1])
    system = nori.build(
        model, [nori.ExternalWrench()], [nori.JointAcceleration(), nori.JointTorque()]
    )
    y = (np.zeros((model.nb, 6)), a, tau)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = nori.estimate(system, model, q, v, y, dynamics_std=1e-3)
    assert_close(est.tau, tau, 1e-9, "estimate")
    with pytest.warns(jaxdyn.JaxdynWarning, match="numerically singular"):
        nori.estimate(system, model, q, v, y, dynamics_std=1e-7)
    # weights that make the normal equations singular: the warning, then the failed check
    with pytest.warns(jaxdyn.JaxdynWarning, match="numerically singular"):
        with pytest.raises(jaxdyn.CheckError, match="weights make the normal equations"):
            nori.estimate(system, model, q, v, y, dynamics_std=1e-9)


def test_singular_state_all_nan_with_checks_off():
    """With value checks off, a singular state gives a solution that is all NaN (it was a mix
    of finite values and NaN / -inf). Last in the module: switching the checks clears JAX's
    caches."""
    model = _massless_tip()
    q = np.asarray(jaxdyn.neutral_configuration(model))
    z = np.zeros(model.nv)
    sfd = nori.build(model, nori.forward_dynamics_knowns(), check=False)
    with jaxdyn.config.override(value_checks=False):
        sol = nori.solve(sfd, model, q, z, (z, np.zeros((model.nb, 6))))
    for x in sol:
        assert np.all(np.isnan(np.asarray(x))), sol

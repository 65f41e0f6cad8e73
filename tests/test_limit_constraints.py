"""MuJoCo's joint-limit constraint in :mod:`jaxdyn.sim` (:class:`jaxdyn.sim.LimitConstraints`,
issue 48): soft one-sided rows of the limited hinge and slide joints (``solreflimit``,
``solimplimit``, ``margin``, ``dof_invweight0``) solved with the contact rows, from MJCF, against
MuJoCo C.

Oracle: MuJoCo's ``mj_step`` on the same file (``Euler``, elliptic cones, its Newton solver at
tolerance 1e-14): a two-hinge arm driven by strong motors into both stops of both joints (the
elbow with its own ``solreflimit``, ``solimplimit`` and ``margin``) and a box on a vertical
slide (``solreflimit`` in the direct form) pushed into both ends of its range, once alone and
once landing on the floor (soft contact rows and limit rows of the same dof, one problem);
the same with joint damping under ``Euler`` and ``implicitfast`` (the rows posed with ``M``,
applied through ``M + h D``); a limited fixed tendon and a ball caught by a limited spatial
string (MuJoCo's tendon limit rows).
"""

from __future__ import annotations

import dataclasses

import pytest

mujoco = pytest.importorskip("mujoco")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _mujoco_ref import mujoco_rollout  # noqa: E402

from jaxdyn import sim  # noqa: E402
from jaxdyn.io.mjcf import load_mjcf  # noqa: E402
from jaxdyn.sim import core  # noqa: E402
from jaxdyn.sim.actuators import joint_properties, passive_forces  # noqa: E402

# the slider's box reaches the floor at s = -0.05, its lower limit is at -0.0505: with contact
# on (contype 1) the floor's contact rows and the limit's row act on the same dof
LIMITS_XML = """<mujoco><option timestep="0.002" cone="{cone}" tolerance="1e-14"
  iterations="1000">{flags}</option>
<worldbody><geom name="floor" type="plane" size="5 5 .1"/>
<body name="l1" pos="0 0 1"><joint name="shoulder" axis="0 1 0" range="-30 30"/>
  <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1" contype="0" conaffinity="0"/>
  <body name="l2" pos="0.3 0 0"><joint name="elbow" axis="0 1 0" range="-45 20"
      solreflimit="0.01 0.8" solimplimit="0.8 0.99 0.01 0.4 3" margin="0.02"/>
    <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.025" mass="0.6" contype="0"
      conaffinity="0"/></body></body>
<body name="s" pos="0 1 0.1"><joint name="slide" type="slide" axis="0 0 1" range="-0.0505 0.05"
    solreflimit="-5000 -60"/>
  <geom name="box" type="box" size="0.05 0.05 0.05" mass="0.5" contype="{contype}"
    conaffinity="0"/></body>
</worldbody>
<actuator><motor joint="shoulder" gear="20"/><motor joint="elbow" gear="10"/>
  <motor joint="slide" gear="10"/></actuator></mujoco>"""
T = 250
CTRL = np.zeros((T, 3))
CTRL[: T // 2] = [1.0, -1.0, -1.0]  # into one stop of each joint, then the other
CTRL[T // 2 :] = [-1.0, 1.0, 1.0]


def _mujoco(xml):
    m = mujoco.MjModel.from_xml_string(xml)
    return m, *mujoco_rollout(m, ctrl=CTRL, fields=("qpos", "qvel"))


def _jaxdyn(r, cfg):
    def f(s, u):
        s = sim.step(r.model, s, u, cfg)
        return s, (s.q, s.v)

    s0 = sim.State(jnp.asarray(r.q0), jnp.zeros(r.model.nv))
    q, v = jax.jit(lambda s, us: jax.lax.scan(f, s, us)[1])(s0, jnp.asarray(CTRL))
    return np.asarray(q), np.asarray(v)


def _check(r, m, q, v, qm, vm):
    """Every step's state against MuJoCo's (one-DoF joints: ``q`` and ``v`` are ``qpos`` and
    ``qvel`` reordered), and every limit of the three joints pushed past in MuJoCo's run."""
    order = r.converter().q_index  # jaxdyn's joints by depth: shoulder, slide, elbow
    q, v = q[:, np.argsort(order)], v[:, np.argsort(order)]
    lo, hi = m.jnt_range[:, 0], m.jnt_range[:, 1]
    assert np.all(qm.min(0) < lo) and np.all(qm.max(0) > hi)
    np.testing.assert_allclose(q, qm, atol=1e-10, rtol=0)
    np.testing.assert_allclose(v, vm, atol=1e-8, rtol=0)


def test_limit_constraint_follows_mujoco():
    """The arm and the slider without contact (``sim_config(limits="constraint")``, the rows
    solved alone, 400 projected gradient steps): positions agree with MuJoCo C's to 1e-10 and
    velocities to 1e-8 at every step of 0.5 s (seen: 6e-15, 4e-13) while MuJoCo's joints go up
    to 0.13 rad / 11 mm past their stops (the soft limits give way under the motors). The
    spring-damper approximation :meth:`MJCFModel.mujoco_limits` misses by 0.1 rad and more
    (``test_mjcf_scene.test_mujoco_limits_follow_mujocos_limit_constraint``)."""
    xml = LIMITS_XML.format(flags="", contype=0, cone="elliptic")
    r = load_mjcf(xml)
    cfg = r.sim_config(limits="constraint")
    assert cfg.limit_constraints is not None and cfg.limit_constraints.rows == 3
    cfg = dataclasses.replace(cfg, limit_constraints=r.limit_constraints(iterations=400))
    m, qm, vm = _mujoco(xml)
    _check(r, m, *_jaxdyn(r, cfg), qm, vm)


@pytest.mark.slow  # 10 s of compile each; default: test_limit_constraint_follows_mujoco (the
# rows), test_soft_contact.test_soft_contact_follows_mujoco (the contact rows)
@pytest.mark.parametrize("cone", ["elliptic", "pyramidal"])
def test_limit_constraint_with_soft_contact_follows_mujoco(cone):
    """The slider's box lands on the floor at its lower limit: MuJoCo's soft contact rows (four
    corners) and the limit row on the same dof, one problem (:func:`jaxdyn.sim.limits.solve`
    appends the limit rows to :func:`jaxdyn.sim.contact.contact_problem`'s as scalar rows,
    impulse ``>= 0``, beside the elliptic cones or the pyramids' edges): with
    ``Constraint(soft=True, relaxed=True, iterations=1000)`` and the file's cone, positions
    agree with MuJoCo C's to 1e-10 at every step (elliptic seen: 5e-17; 200 iterations leave
    1e-8: the corners' rows and the limit's are nearly parallel)."""
    xml = LIMITS_XML.format(flags="", contype=1, cone=cone)
    r = load_mjcf(xml)
    contact = sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=1000)
    cfg = r.sim_config(contact, limits="constraint")
    m, qm, vm = _mujoco(xml)
    d = mujoco.MjData(m)
    d.qpos[:] = qm[T // 2 - 1]
    mujoco.mj_forward(m, d)
    assert d.ncon == 4 and d.nl >= 1  # the box on the floor and at its limit
    _check(r, m, *_jaxdyn(r, cfg), qm, vm)


def _padded(G, u, nc, width, nl, pad=1.0):
    """The problem of ``nc`` contact blocks of ``width`` rows and ``nl`` scalar rows with each
    scalar row made a block of ``width`` whose other rows are empty (Jacobian 0, regulariser
    ``pad``): a frictionless cone (``mu = 0``) or four edges (the formulation before scalar
    rows; the same solution)."""
    k, n = nc * width, nc * width + nl * width
    slot = np.concatenate([np.arange(k), k + width * np.arange(nl)])
    Gp = np.diag(np.full(n, pad))
    Gp[np.ix_(slot, slot)] = G
    up = np.zeros(n)
    up[slot] = u
    return Gp, up, slot


_SLOW = pytest.mark.slow  # about 5 s of compile each; default: the relaxed elliptic case


@pytest.mark.parametrize(
    ("cone", "coulomb"),
    [
        ("elliptic", False),
        pytest.param("elliptic", True, marks=_SLOW),
        pytest.param("pyramidal", False, marks=_SLOW),
        pytest.param("pyramidal", True, marks=_SLOW),
    ],
)
def test_scalar_limit_rows_solve_as_padded_blocks(cone, coulomb):
    """:func:`jaxdyn.sim.solve_cone_complementarity` with ``rows=`` (the limit rows as scalar
    rows after the contact blocks, one row of ``G`` each) has the solution, the implicit
    derivative (in ``u`` and ``G``) and the residual report of the same problem with each
    scalar row padded to a cone block (relaxed and Coulomb); the relaxed derivative also
    matches central differences."""
    width, nc, nl = (3 if cone == "elliptic" else 4), 2, 3
    n = nc * width + nl
    rng = np.random.default_rng(1)
    A = rng.normal(size=(n, n))
    G, u = A @ A.T / n + 0.1 * np.eye(n), rng.normal(size=n)
    u[: nc * width : width] = -1.0  # the contacts pressed (their normal rows, or edges)
    u[nc * width :] = -2.0, -1.0, 5.0  # two limit rows pressed, one separating (impulse 0)
    dG = rng.normal(size=(n, n))
    dG, du = dG + dG.T, rng.normal(size=n)
    Gp, up, slot = _padded(G, u, nc, width, nl)
    dGp, dup, _ = _padded(dG, du, nc, width, nl, pad=0.0)
    mu = np.array([0.6, 0.4])
    kw = dict(iterations=300, newton=10, coulomb=coulomb, cone=cone)

    def scalar(G_, u_):
        lam, lam_l = sim.solve_cone_complementarity(G_, u_, mu, rows=nl, **kw)
        return jnp.concatenate([lam.reshape(-1), lam_l])

    def padded(G_, u_):
        lam = sim.solve_cone_complementarity(G_, u_, np.r_[mu, np.zeros(nl)], **kw)
        return lam.reshape(-1)[slot]

    jvp = jax.jit(lambda *a: jax.jvp(scalar, a[:2], a[2:]))
    x, dx = jvp(G, u, dG, du)
    xp, dxp = jax.jit(lambda *a: jax.jvp(padded, a[:2], a[2:]))(Gp, up, dGp, dup)
    np.testing.assert_allclose(x, xp, atol=1e-10)
    np.testing.assert_allclose(dx, dxp, atol=1e-8)
    assert float(jnp.min(x[nc * width :])) >= 0 and float(x[-1]) == 0.0
    assert float(jnp.max(x[nc * width :])) > 0.1  # the pressed limit rows carry impulses
    if not coulomb:  # the relaxed problem: smooth here, central differences
        e = 1e-6
        f = lambda s: jvp(G + s * dG, u + s * du, dG, du)[0]  # noqa: E731
        fd = (f(e) - f(-e)) / (2 * e)
        np.testing.assert_allclose(dx, fd, atol=1e-6)
    lam, lam_l = x[: nc * width].reshape(nc, width), x[nc * width :]
    res = sim.contact.solve_residual(G, u, mu, lam, coulomb, rows=lam_l)
    assert float(res) < 1e-9
    bad = sim.contact.solve_residual(G, u, mu, lam, coulomb, rows=lam_l + 1.0)
    assert float(bad) > 0.1


def test_rows_of_disparate_weight_converge_in_the_default_iterations():
    """A light joint's limit row beside a heavy body's contacts (the walker's foot limit,
    ``G_ii`` 1e5, against its torso's contacts, 0.1: residual 0.98 after the default 100
    iterations when the step size came from the whole ``G``): the solve scales the limit
    rows to the contacts' weight, so the default iterations reach the solution, against the
    same problem with the weights divided out (``lam = D^-1 x``: ``x`` solves ``(A, D^-1
    u)`` for ``G = D A D``), solved with Newton steps."""
    nc, nl = 3, 2
    n = 3 * nc + nl
    rng = np.random.default_rng(4)
    B = rng.normal(size=(n, n))
    A = B @ B.T / n + 0.2 * np.eye(n)
    d = np.r_[np.repeat(np.sqrt([0.1, 0.3, 0.05]), 3), np.sqrt([1e5, 3e4])]
    G = d[:, None] * A * d[None, :]
    x_u = rng.normal(size=n)
    x_u[0 : 3 * nc : 3] = -1.0  # the contacts pressed
    x_u[3 * nc :] = -1.0, -0.5  # both limit rows pressed
    u = d * x_u
    mu = np.array([0.7, 0.7, 0.7])
    solve = jax.jit(
        lambda G_, u_, it, nt: sim.solve_cone_complementarity(
            G_, u_, mu, it, nt, coulomb=True, rows=nl
        ),
        static_argnums=(2, 3),
    )
    lam, lam_l = solve(G, u, 100, 0)  # the default Constraint(): 100 iterations, no Newton
    x, x_l = solve(A, x_u, 300, 10)
    res = sim.contact.solve_residual(G, u, mu, lam, True, rows=lam_l)
    assert float(res) < 1e-8, float(res)
    np.testing.assert_allclose(lam.reshape(-1), x.reshape(-1) / d[: 3 * nc], atol=1e-9)
    np.testing.assert_allclose(lam_l, x_l / d[3 * nc :], atol=1e-12)
    assert float(jnp.min(lam[:, 0])) > 0.1 and float(jnp.min(lam_l)) > 0  # all rows carry


def _body_contact_problem(rng, nc, nl):
    """``G = J M^-1 J^T`` (plus a small regulariser) of ``nc`` contacts ``[n, t1, t2]`` at
    nearby points of one free body (6 dofs: ``G``'s contact block of rank 6, its largest
    eigenvalue many times its mean diagonal, as the finger's spinner contacts) and ``nl``
    limit rows on ``nl`` joints of another chain (no coupling to the body)."""
    nv = 6 + nl
    R = rng.normal(size=(nv, nv))
    M = np.zeros((nv, nv))
    M[:6, :6] = np.diag([0.02, 0.03, 0.02, 1.0, 1.0, 1.0])
    M[6:, 6:] = (R[6:, 6:] @ R[6:, 6:].T + np.eye(nl)) * 1e-3  # light links: heavy limit rows
    p = 0.05 * rng.normal(size=(nc, 3))  # contact points near the body's origin
    n = np.array([0.0, 0.0, 1.0])
    rows = []
    for pc in p:
        for axis in (n, np.array([1.0, 0, 0]), np.array([0, 1.0, 0])):
            j = np.zeros(nv)
            j[:3], j[3:6] = np.cross(pc, axis), axis  # (angular, linear) velocity
            rows.append(j)
    Jl = np.zeros((nl, nv))
    Jl[np.arange(nl), 6 + np.arange(nl)] = 1.0
    J = np.vstack(rows + [Jl])
    G = J @ np.linalg.solve(M, J.T)
    return G + np.diag(1e-6 * np.diag(G) + 1e-12)


def test_limit_rows_beside_idle_contacts_are_exact_in_the_default_iterations():
    """Limit rows pressed beside idle contacts (separating, impulse 0; the finger against its
    spinner: 16 live contacts whose block's largest eigenvalue is about 30 times its mean
    diagonal): the default 100 iterations give the limit rows' exact impulses, ``-G_ll^-1
    u_l`` (the limit block alone: no coupling to the contacts, which stay at 0), to rounding:
    the projected gradient, whose step the contacts' block sets (the limit rows scaled to
    the contacts' mean diagonal step about 30 times short of their own), stops near 1e-8;
    the active-set step on the scalar rows after it (``contact._polish_rows``) is exact."""
    nc, nl = 16, 2
    rng = np.random.default_rng(7)
    G = _body_contact_problem(rng, nc, nl)
    k = 3 * nc
    d = np.diagonal(G)
    ev = np.linalg.eigvalsh(G[:k, :k])[-1]
    assert ev > 10 * d[:k].mean()  # the idle contacts' block: far above its mean diagonal
    u = np.zeros(k + nl)
    u[:k:3] = 1.0  # every contact separating
    u[k:] = -G[k:, k:] @ np.array([2.0, 0.5])  # both limit rows pressed: impulses 2, 0.5
    mu = np.full(nc, 0.8)
    lam, lam_l = jax.jit(
        lambda G_, u_: sim.solve_cone_complementarity(G_, u_, mu, coulomb=True, rows=nl)
    )(G, u)
    exact = -np.linalg.solve(G[k:, k:], u[k:])
    assert np.all(exact > 0) and np.all(np.asarray(lam) == 0.0)
    np.testing.assert_allclose(lam_l, exact, rtol=1e-13)


def test_polish_off_leaves_the_iterations_impulses():
    """``polish=False`` (``Constraint(polish=False)``: the DM Control Suite walker and hopper)
    skips the active-set step on the limit rows: on
    :func:`test_limit_rows_beside_idle_contacts_are_exact_in_the_default_iterations`'s problem
    the default 100 iterations then stop short of the exact impulses ``-G_ll^-1 u_l`` (by
    about 5e-8 relative: the step acts) and 400 reach them to rounding (the same fixed
    point); the contacts stay idle either way."""
    nc, nl = 16, 2
    rng = np.random.default_rng(7)
    G = _body_contact_problem(rng, nc, nl)
    k = 3 * nc
    u = np.zeros(k + nl)
    u[:k:3] = 1.0
    u[k:] = -G[k:, k:] @ np.array([2.0, 0.5])
    mu = np.full(nc, 0.8)
    solve = jax.jit(
        lambda G_, u_, it, polish: sim.solve_cone_complementarity(
            G_, u_, mu, it, coulomb=True, rows=nl, polish=polish
        ),
        static_argnums=(2, 3),
    )
    exact = -np.linalg.solve(G[k:, k:], u[k:])
    lam, lam_l = solve(G, u, 100, False)
    gap = float(np.max(np.abs(np.asarray(lam_l) - exact)) / np.max(exact))
    assert 1e-10 < gap < 1e-5, gap
    assert np.all(np.asarray(lam) == 0.0)
    lam, lam_l = solve(G, u, 400, False)
    np.testing.assert_allclose(lam_l, exact, rtol=1e-12)
    assert np.all(np.asarray(lam) == 0.0)


def test_limit_constraints_from_mjcf():
    """:meth:`MJCFModel.limit_constraints` holds a row for each limited hinge / slide joint
    with MuJoCo's range, ``margin``, ``solref``, ``solimp`` and ``dof_invweight0``
    (:meth:`LimitConstraints.from_model` gives the same ``diag``, the diagonal of ``M^-1`` at
    ``qpos0``; a joint whose range is narrower than ``2 margin`` gets a row per side); the
    spring-damper ``cfg.limits`` no longer acts on those joints. Honoured by
    name: ``<flag limit="disable"/>`` and ``constraint="disable"`` (no rows: ``None``),
    ``refsafe="disable"``. Bad input: a wrong ``limits=`` string, a shape, a ``side``, a
    coordinate that is not a hinge / slide joint's, a range narrower than ``2 margin`` in one
    row, ``rk4``: a ``ValueError`` naming it."""
    xml = LIMITS_XML.format(flags="", contype=0, cone="elliptic")
    r = load_mjcf(xml)
    m = r.mj_model
    lim = r.limit_constraints()
    assert lim.dof == lim.qpos == (0, 1, 2) and lim.refsafe
    j = r.converter().q_index  # MuJoCo's joint of each row (one-DoF joints)
    np.testing.assert_array_equal(lim.lower, m.jnt_range[j, 0])
    np.testing.assert_array_equal(lim.upper, m.jnt_range[j, 1])
    np.testing.assert_array_equal(lim.margin, m.jnt_margin[j])
    np.testing.assert_array_equal(lim.solref, m.jnt_solref[j])
    np.testing.assert_array_equal(lim.solimp, m.jnt_solimp[j])
    np.testing.assert_array_equal(lim.diag, m.dof_invweight0[j])
    assert lim.margin[2] == 0.02 and lim.solref[1, 0] == -5000  # elbow, slide
    own = sim.LimitConstraints.from_model(r.model)
    np.testing.assert_allclose(own.diag, lim.diag, rtol=1e-12)
    np.testing.assert_array_equal(own.lower, lim.lower)
    # a range narrower than 2 margin: both sides can act at once, one row each
    wide = sim.LimitConstraints.from_model(r.model, margin=0.06)
    assert wide.dof == (0, 1, 1, 2)
    np.testing.assert_array_equal(wide.lower[1:3], [-0.0505, -np.inf])
    np.testing.assert_array_equal(wide.upper[1:3], [np.inf, 0.05])
    with pytest.raises(ValueError, match="row 1: upper - lower = 0.1005 is below 2 margin = 0.12"):
        dataclasses.replace(lim, margin=jnp.full(3, 0.06))
    # the spring-damper leaves the constrained joints alone
    cfg = r.sim_config(limits="constraint")
    props = joint_properties(r.model)
    q, v = jnp.asarray([1.0, -1.0, 0.2]), jnp.asarray([1.0, 2.0, 3.0])
    free = passive_forces(r.model, props, None, q, v)
    np.testing.assert_array_equal(core._controls(r.model, cfg, props, q, v, jnp.zeros(3)), free)
    assert np.any(passive_forces(r.model, props, cfg.limits, q, v) != free)
    for flag in ('<flag limit="disable"/>', '<flag constraint="disable"/>'):
        off = load_mjcf(LIMITS_XML.format(flags=flag, contype=0, cone="elliptic"))
        assert off.limit_constraints() is None
        assert off.sim_config(limits="constraint").limit_constraints is None
    off = load_mjcf(LIMITS_XML.format(flags='<flag limit="disable"/>', contype=0, cone="elliptic"))
    none = sim.LimitConstraints.from_model(off.model)  # no limited joint: no row
    assert none.rows == 0
    assert core._limit_rows(off.sim_config(limit_constraints=none)) is None
    safe = load_mjcf(
        LIMITS_XML.format(flags='<flag refsafe="disable"/>', contype=0, cone="elliptic")
    )
    assert safe.limit_constraints().refsafe is False
    with pytest.raises(ValueError, match="sim_config: limits must be 'constraint', 'spring'"):
        r.sim_config(limits="hard")
    with pytest.raises(ValueError, match=r"solimp has shape \(3, 4\), expected \(3, 5\)"):
        dataclasses.replace(lim, solimp=lim.solimp[:, :4])
    with pytest.raises(ValueError, match="LimitConstraints: lower must be finite"):
        dataclasses.replace(lim, lower=jnp.full(3, jnp.nan))
    with pytest.raises(ValueError, match="limit_constraints are velocity-level"):
        dataclasses.replace(cfg, integrator="rk4")
    bad = dataclasses.replace(lim, qpos=(0, 2, 1))
    with pytest.raises(ValueError, match="row 1: dof=1, qpos=2 is not the coordinate pair"):
        bad.check_model(r.model)


def _damped(xml, integrator):
    """``xml`` with joint damping (heavy on the light elbow: ``h D`` is a tenth of its
    inertia and more) and MuJoCo's ``integrator``."""
    xml = xml.replace("<option ", f'<option integrator="{integrator}" ')
    for rng, d in (('"-30 30"', 3), ('"-45 20"', 1), ('"-0.0505 0.05"', 5)):
        xml = xml.replace(f"range={rng}", f'range={rng} damping="{d}"')
    return xml


@pytest.mark.parametrize(
    "integrator",
    ["Euler", pytest.param("implicitfast", marks=pytest.mark.slow)],  # slow: 3 s of compile;
    # default: the Euler case (the same solve with M_eff = M + h D)
)
def test_limit_constraint_with_joint_damping_follows_mujoco(integrator):
    """Joint damping under MuJoCo's ``Euler`` (jaxdyn ``"implicit_damping"``) and
    ``implicitfast`` (``"implicit"``): MuJoCo computes the limit rows' force with the plain
    mass matrix (``mj_fwdConstraint``) and then steps ``(M + h D) qacc = qfrc_smooth +
    qfrc_constraint`` (``mj_EulerSkip``, ``mj_implicitSkip``); jaxdyn poses the soft rows with
    ``M`` and applies them through ``M + h D`` (:func:`jaxdyn.sim.limits.solve`): positions
    agree with MuJoCo C's to 1e-10 at every step (seen: 2e-16; posed with ``M + h D``, as
    before, they missed by 0.017 rad)."""
    xml = _damped(LIMITS_XML.format(flags="", contype=0, cone="elliptic"), integrator)
    r = load_mjcf(xml)
    cfg = r.sim_config(limits="constraint")
    assert cfg.integrator == {"Euler": "implicit_damping", "implicitfast": "implicit"}[integrator]
    cfg = dataclasses.replace(cfg, limit_constraints=r.limit_constraints(iterations=400))
    m, qm, vm = _mujoco(xml)
    _check(r, m, *_jaxdyn(r, cfg), qm, vm)


@pytest.mark.slow  # 10 s of compile each; default:
# test_limit_constraint_with_joint_damping_follows_mujoco (the soft rows posed with M)
@pytest.mark.parametrize("limits", [True, False])
def test_soft_contact_with_joint_damping_follows_mujoco(limits):
    """The slider's box lands on the floor with joint damping under MuJoCo's ``Euler``: the
    soft contact rows (with the limit rows, or alone: MuJoCo's ``limit`` flag off) are posed
    with the plain ``M`` and act through ``M + h D``, as MuJoCo's: positions agree with MuJoCo
    C's to 1e-10 at every step (seen: 2e-16 and 5e-16; posed with ``M + h D`` they missed by
    0.017 rad and 2e-4)."""
    xml = _damped(LIMITS_XML.format(flags="", contype=1, cone="elliptic"), "Euler")
    r = load_mjcf(xml)
    contact = sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=1000)
    if limits:
        cfg = r.sim_config(contact, limits="constraint")
        m, qm, vm = _mujoco(xml)
        _check(r, m, *_jaxdyn(r, cfg), qm, vm)
        return
    cfg = dataclasses.replace(r.sim_config(contact), limits=None, limit_constraints=None)
    m, qm, vm = _mujoco(
        xml.replace("<option ", '<option ><flag limit="disable"/></option><option ')
    )
    q, v = _jaxdyn(r, cfg)
    order = np.argsort(r.converter().q_index)
    assert qm[:, 2].min() < -0.0505  # the box on the floor, below where the limit would be
    np.testing.assert_allclose(q[:, order], qm, atol=1e-10, rtol=0)
    np.testing.assert_allclose(v[:, order], vm, atol=1e-8, rtol=0)


# a two-hinge arm whose fixed tendon j1 + 0.5 j2 is limited (own solreflimit, solimplimit,
# margin; the joints themselves unlimited) and a ball on two slides hanging from a limited
# spatial string (range 0 0.3: it falls 8 cm before the string catches it)
TENDON_XML = """<mujoco><option timestep="0.002" tolerance="1e-14" iterations="1000"/>
<worldbody><site name="anchor" pos="0 1 0.8"/>
<body name="l1" pos="0 0 1"><joint name="j1" axis="0 1 0"/>
  <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1" contype="0" conaffinity="0"/>
  <body name="l2" pos="0.3 0 0"><joint name="j2" axis="0 1 0"/>
    <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.025" mass="0.6" contype="0"
      conaffinity="0"/></body></body>
<body name="ball" pos="0.2 1 0.7"><joint name="bx" type="slide" axis="1 0 0"/>
  <joint name="bz" type="slide" axis="0 0 1"/>
  <geom type="sphere" size="0.03" mass="0.2" contype="0" conaffinity="0"/>
  <site name="ball"/></body>
</worldbody>
<tendon><fixed name="sum" limited="true" range="-0.3 0.3" solreflimit="0.01 0.8"
    solimplimit="0.8 0.99 0.01 0.4 3" margin="0.02"><joint joint="j1" coef="1"/>
    <joint joint="j2" coef="0.5"/></fixed>
  <spatial name="string" limited="true" range="0 0.3"><site site="anchor"/><site site="ball"/>
  </spatial></tendon>
<actuator><motor joint="j1" gear="20"/><motor joint="j2" gear="10"/></actuator></mujoco>"""


def test_tendon_limit_constraint_follows_mujoco():
    """MuJoCo's tendon limit (``mj_instantiateLimit`` on ``ten_J``, the tendon's
    ``solreflimit`` / ``solimplimit`` / ``margin``, ``diagApprox = tendon_invweight0``) as
    :class:`jaxdyn.sim.LimitConstraints`' tendon rows (``limits="constraint"``): the fixed
    tendon driven into both ends of its range by the motors (MuJoCo's goes 0.06 past) and the
    ball caught by its string (MuJoCo's stretches 7.6 mm) follow MuJoCo C to 1e-10 at every
    step of 0.6 s (seen: 7e-14; under the spring-damper :class:`jaxdyn.sim.JointLimits`, as
    before, 0.15 rad and 5 mm); the tendons' spring-damper is off for them (their bounds
    inf), and a tendon row naming a tendon the configuration lacks is refused."""
    r = load_mjcf(TENDON_XML)
    cfg = r.sim_config(limits="constraint")
    lim = cfg.limit_constraints
    assert lim.tendons == (("fixed", 0), ("spatial", 0)) and lim.rows == 2
    assert np.isinf(cfg.tendons.lower).all() and np.isinf(cfg.spatial_tendons.upper).all()
    m = mujoco.MjModel.from_xml_string(TENDON_XML)
    ctrl = np.zeros((300, 2))
    ctrl[:150], ctrl[150:] = 1.0, -1.0
    qm, lm = mujoco_rollout(m, ctrl=ctrl, fields=("qpos", "ten_length"))
    assert lm[:, 0].min() < -0.35 and lm[:, 0].max() > 0.31 and lm[:, 1].max() > 0.305

    def f(s, u):
        s = sim.step(r.model, s, u, cfg)
        return s, s.q

    s0 = sim.State(jnp.asarray(r.q0), jnp.zeros(r.model.nv))
    q = jax.jit(lambda s, us: jax.lax.scan(f, s, us)[1])(s0, jnp.asarray(ctrl))
    q = np.asarray(q)[:, np.argsort(r.converter().q_index)]
    np.testing.assert_allclose(q, qm, atol=1e-10, rtol=0)
    with pytest.raises(ValueError, match="spatial tendon 0, but the configuration has 0"):
        lim.tendon_rows(r.model, cfg.tendons, None, jnp.asarray(r.q0))
    with pytest.raises(ValueError, match="fixed tendon 0 has a limit row in limit_constraints"):
        dataclasses.replace(cfg, tendons=r.sim_config(limits="spring").tendons)  # its spring too
    with pytest.raises(ValueError, match="tendon row 1 is spatial tendon 0, but the config"):
        dataclasses.replace(cfg, spatial_tendons=None)
    with pytest.raises(ValueError, match="tendons\\[0\\] must be"):
        dataclasses.replace(lim, tendons=(("pulley", 0), ("spatial", 0)))

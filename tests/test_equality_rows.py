"""MuJoCo's equality rows solved in one problem with its joint-limit and contact rows (issue 48),
against MuJoCo C.

Oracle: MuJoCo's ``mj_step`` on the same file (``Euler``, its Newton solver at tolerance 1e-14):
a two-hinge arm whose tip drags a box on two slides through a ``connect`` equality, driven by
its motors into the shoulder's and the elbow's stops and the box's vertical slide into its
lower limit (equality rows and limit rows on the same chain), once without contact and once
with the box landing on a floor (soft contact rows too). With a joint solve in the step
(``limit_constraints`` rows or :class:`~jaxdyn.sim.Constraint` contact) the equality rows
join it (:func:`jaxdyn.sim.core._equality_rows`); the force path computed before the solve (the
code before) missed MuJoCo by 0.2 rad on this scene.
"""

from __future__ import annotations

import pytest

mujoco = pytest.importorskip("mujoco")

import dataclasses  # noqa: E402

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _mujoco_ref import mujoco_rollout  # noqa: E402

from jaxdyn import sim  # noqa: E402
from jaxdyn.io.mjcf import load_mjcf  # noqa: E402

# the box (on slides x, z) hangs from the arm's tip by a connect; the floor's top is at
# z = 0.87, reached by the box (half size 0.04) above the slide's lower limit z = -0.12
XML = """<mujoco><option timestep="0.002" cone="{cone}" integrator="{integrator}" tolerance="1e-14"
  iterations="1000"/>
<worldbody><geom name="floor" type="plane" size="5 5 .1" pos="0 0 0.87"/>
<body name="l1" pos="0 0 1"><joint name="shoulder" axis="0 1 0" range="-30 30"/>
  <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1" contype="0" conaffinity="0"/>
  <body name="l2" pos="0.3 0 0"><joint name="elbow" axis="0 1 0" range="-45 20"
      damping="{damping}"/>
    <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.025" mass="0.6" contype="0"
      conaffinity="0"/><site name="tip" pos="0.25 0 0"/></body></body>
<body name="s" pos="0.55 0 1"><joint name="sx" type="slide" axis="1 0 0"/>
  <joint name="sz" type="slide" axis="0 0 1" range="-0.12 0.1"/>
  <geom type="box" size="0.04 0.04 0.04" mass="0.3" contype="{contype}" conaffinity="0"/>
  <site name="ss"/></body>
</worldbody>
<equality><connect site1="tip" site2="ss"/></equality>
<actuator><motor joint="shoulder" gear="20"/><motor joint="elbow" gear="10"/></actuator>
</mujoco>"""
T = 150
CTRL = np.zeros((T, 2))


def xml(cone="elliptic", contype=0, integrator="Euler", damping=0.0):
    """The scene: the floor reached by the box with ``contype=1``, the elbow's ``damping``."""
    return XML.format(cone=cone, contype=contype, integrator=integrator, damping=damping)


CTRL[:100] = [1.0, -0.5]  # down into the shoulder's upper stop, the elbow into its lower one
CTRL[100:] = [-1.0, 0.5]  # and back up


def _mujoco(text):
    """MuJoCo C's ``qpos`` after each step and its equality, limit and contact counts."""
    m = mujoco.MjModel.from_xml_string(text)
    counts = lambda d: (d.ne, d.nl, d.ncon)  # noqa: E731
    return mujoco_rollout(m, ctrl=CTRL, fields=("qpos", counts))


def _jaxdyn(r, cfg):
    def f(s, u):
        s = sim.step(r.model, s, u, cfg)
        return s, s.q

    s0 = sim.State(jnp.asarray(r.q0), jnp.zeros(r.model.nv))
    q = jax.jit(lambda s, us: jax.lax.scan(f, s, us)[1])(s0, jnp.asarray(CTRL))
    conv = r.converter()
    return np.array([conv.q_to_mujoco(x) for x in np.asarray(q)])


@pytest.mark.parametrize(
    ("integrator", "damping"),
    [
        ("Euler", 0.0),
        # 5 s of compile each; default: ("Euler", 0) (the rows), test_limit_constraints'
        # damping test (the rows posed with M, acting through M + h D)
        pytest.param("Euler", 0.3, marks=pytest.mark.slow),
        pytest.param("implicitfast", 0.3, marks=pytest.mark.slow),
    ],
)
def test_equality_and_limit_rows_follow_mujoco(integrator, damping):
    """The arm and the box without contact (``sim_config(limits="constraint")``: the connect's
    three rows eliminated into the limit rows' problem, 100 projected gradient steps):
    positions agree with MuJoCo C's to 1e-10 at every step of 0.3 s (seen: 3e-14) while up to
    two limits are active with the connect. The force path before (the equality's force
    computed alone, then the limit rows) misses by 0.2 rad. With the elbow damped under
    ``Euler`` (``"implicit_damping"``) and ``implicitfast`` (``"implicit"``) the equality rows
    are posed with ``M`` as the limit rows, their impulses acting through ``M + h D``: MuJoCo's
    to 1e-10 as well (seen: 3e-14; posed with ``M + h D``, 0.06 rad off)."""
    text = xml(integrator=integrator, damping=damping)
    r = load_mjcf(text)
    cfg = r.sim_config(limits="constraint")
    assert cfg.equalities.kind == ("connect",) and cfg.limit_constraints.rows == 3
    want = {"Euler": "implicit_damping" if damping else "euler", "implicitfast": "implicit"}
    assert cfg.integrator == want[integrator]
    qm, counts = _mujoco(text)
    assert counts[:, 0].min() == 3 and counts[:, 1].max() == 2 and counts[:, 2].max() == 0
    np.testing.assert_allclose(_jaxdyn(r, cfg), qm, atol=1e-10, rtol=0)


@pytest.mark.slow  # 10 s of compile each; default: test_equality_and_limit_rows_follow_mujoco
# (the equality rows with the limit rows), test_limit_constraints'
# test_limit_constraint_with_soft_contact_follows_mujoco (slow too) and test_soft_contact (the
# contact rows)
@pytest.mark.parametrize(
    ("cone", "invweight"), [("elliptic", True), ("pyramidal", True), ("elliptic", False)]
)
def test_equality_limit_and_contact_rows_follow_mujoco(cone, invweight):
    """The box lands on the floor while it hangs from the arm, the arm in its stops: the
    connect's rows, the limit rows and the box's four soft contacts in one problem
    (``Constraint(soft=True, relaxed=True, iterations=1000)``, the file's cone): positions
    agree with MuJoCo C's to 1e-10 at every step (seen: 2e-15). Without MuJoCo's
    ``invweight`` on the contacts (``invweight=False``) the soft contacts' regulariser takes the
    Delassus diagonal of the one problem, not of the problem left once the connect is
    eliminated: here the box's own ``1 / m``, MuJoCo's ``body_invweight0`` (the connect
    couples it to the arm only through the constraint), so the steps are MuJoCo's again."""
    text = xml(cone, 1)
    r = load_mjcf(text)
    contact = sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=1000)
    cfg = r.sim_config(contact, limits="constraint")
    np.testing.assert_allclose(cfg.contacts.invweight, 1 / 0.3, rtol=1e-12)
    if not invweight:
        cfg = eqx.tree_at(lambda c: c.contacts.invweight, cfg, None)
    qm, counts = _mujoco(text)
    both = (counts[:, 1] > 0) & (counts[:, 2] == 4)
    assert both.sum() > 20  # contacts and limits at once, with the connect
    np.testing.assert_allclose(_jaxdyn(r, cfg), qm, atol=1e-10, rtol=0)


@pytest.mark.parametrize(
    ("integrator", "damping"),
    [
        ("Euler", 0.0),
        # 10 s of compile; default: Euler (the eliminated rows in the primal's M), the damped
        # implicitfast rollouts of tests/test_soft_newton.py (M + h D applying the impulses)
        pytest.param("implicitfast", 0.3, marks=pytest.mark.slow),
    ],
)
def test_newton_equality_limit_and_contact_rows_follow_mujoco(integrator, damping):
    """The scene of :func:`test_equality_limit_and_contact_rows_follow_mujoco` on pyramidal
    cones under soft contact's default solve (``Constraint(soft=True, relaxed=True)``:
    MuJoCo's primal Newton steps, :func:`jaxdyn.sim.contact.uses_primal_newton`) with the
    connect's rows eliminated (the primal's ``M`` the inverse of the reduced ``M^-1``, which
    is ``M + J_e^T R_e^-1 J_e``: the equality rows' quadratic cost in MuJoCo's primal) beside
    the limit rows and the box's four contacts: positions agree with MuJoCo C's (its Newton
    solver, tolerance 1e-14) to 1e-10 at every step; with the elbow damped under
    ``implicitfast`` too (the rows posed with ``M``, the impulses through ``M + h D``)."""
    from jaxdyn.sim.contact import uses_primal_newton

    text = xml("pyramidal", 1, integrator, damping)
    r = load_mjcf(text)
    cfg = r.sim_config(sim.Constraint(soft=True, relaxed=True), limits="constraint")
    assert uses_primal_newton(cfg.contact) and cfg.equalities is not None
    qm, counts = _mujoco(text)
    both = (counts[:, 1] > 0) & (counts[:, 2] == 4)
    assert both.sum() > 20 and counts[:, 0].min() == 3  # contacts, limits and the connect
    np.testing.assert_allclose(_jaxdyn(r, cfg), qm, atol=1e-10, rtol=0)


def test_equality_rows_bad_input():
    """What the joint solve cannot take is refused by name: equalities with limit rows or
    constraint contact under ``"rk4"`` (velocity-level rows; a body or joint index the model
    does not have: test_mjcf_equality.test_sim_config_equalities, the rows' kinematics)."""
    r = load_mjcf(xml())
    cfg = r.sim_config(limits="constraint")
    with pytest.raises(ValueError, match="limit_constraints are velocity-level"):
        sim.SimConfig(equalities=cfg.equalities, limit_constraints=cfg.limit_constraints,
                      integrator="rk4")  # fmt: skip
    soft = load_mjcf(xml(contype=1)).sim_config(sim.Constraint(soft=True))
    assert soft.equalities is not None and soft.contact is not None
    with pytest.raises(ValueError, match="Constraint contact is velocity-level"):
        dataclasses.replace(soft, integrator="rk4")


@pytest.mark.slow  # 20 s of compile; default: test_equality_and_limit_rows_follow_mujoco (the
# forward step), test_mjcf_equality's gradient test (slow) and test_limit_constraints (the solve's
# implicit derivative, test_scalar_limit_rows_solve_as_padded_blocks)
def test_rollout_gradient_through_equality_and_limit_rows():
    """Reverse mode through 40 steps of the arm and box (the connect eliminated into the limit
    rows' problem, the shoulder driven into its stop) against central differences in the
    initial velocity."""
    r = load_mjcf(xml())
    cfg = r.sim_config(limits="constraint")
    U = jnp.asarray(CTRL[:40])

    def loss(v0):
        s = sim.State(jnp.asarray(r.q0), v0)
        traj = sim.rollout(r.model, s, U, cfg=cfg)
        return jnp.sum(traj.q[-1] ** 2) + jnp.sum(traj.v[-1] ** 2)

    v0 = jnp.asarray([0.5, -0.2, 0.3, 0.1])
    qvel = r.converter().v_to_mujoco(np.asarray(r.q0), np.asarray(v0))
    # MuJoCo's run from the same state: the limit rows act in it
    (nl,) = mujoco_rollout(r.mj_model, qvel=qvel, ctrl=np.asarray(U), fields=(lambda d: d.nl,))
    assert nl.sum() > 10
    g = jax.jit(jax.grad(loss))(v0)
    f = jax.jit(loss)
    eps = 1e-5
    for k in range(4):
        e = jnp.zeros(4).at[k].set(eps)
        fd = (f(v0 + e) - f(v0 - e)) / (2 * eps)
        assert float(g[k]) == pytest.approx(float(fd), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("posed_with_m", [False, True])
def test_eliminated_rows_solve_the_one_problem(posed_with_m):
    """:func:`jaxdyn.sim.core._eliminate_rows` (the equality rows' Schur complement) against
    the dense solve of the one problem, with the other rows unbounded too (a linear problem):
    the other rows' impulses and the step's velocity agree to rounding, the rows posed with
    ``M_eff`` or (``posed_with_m``) with the plain ``M`` and acting through ``M_eff^-1``, as
    MuJoCo's soft rows under its implicit integrators."""
    from jaxdyn.sim import core

    rng = np.random.default_rng(3)
    nv, ke, ko = 6, 2, 3
    A = rng.normal(size=(nv, nv))
    M = A @ A.T + nv * np.eye(nv)
    M_eff = M + np.diag(rng.uniform(0.5, 2.0, nv)) if posed_with_m else M
    Je, Jo = rng.normal(size=(ke, nv)), rng.normal(size=(ko, nv))
    Re, Ro = rng.uniform(0.1, 1.0, ke), rng.uniform(0.1, 1.0, ko)
    v_free, v_free_m, c = rng.normal(size=nv), rng.normal(size=nv), rng.normal(size=ko)
    if not posed_with_m:
        v_free_m = v_free
    ue = rng.normal(size=ke)

    def solve_eff(X):
        return jnp.asarray(np.linalg.solve(M_eff, np.asarray(X)))

    def solve_m(X):
        return jnp.asarray(np.linalg.solve(M, np.asarray(X)))

    plain = (solve_m, jnp.asarray(v_free_m)) if posed_with_m else None
    v_e, solve_e, plain_e = core._eliminate_rows(
        jnp.asarray(Je), jnp.asarray(ue), jnp.asarray(Re), jnp.asarray(v_free), solve_eff, plain
    )
    pose, v_pose = (solve_e, v_e) if plain_e is None else plain_e
    Go = np.asarray(Jo @ pose(jnp.asarray(Jo.T))) + np.diag(Ro)
    lam_o = -np.linalg.solve(Go, Jo @ np.asarray(v_pose) + c)
    v1 = np.asarray(v_e + solve_e(jnp.asarray(Jo.T)) @ lam_o)
    # the one problem: G = J M^-1 J^T + R of all rows, impulses through M_eff^-1
    J = np.vstack([Je, Jo])
    G = J @ np.linalg.solve(M, J.T) + np.diag(np.r_[Re, Ro])
    lam = -np.linalg.solve(G, np.r_[ue, Jo @ v_free_m + c])
    np.testing.assert_allclose(lam_o, lam[ke:], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(v1, v_free + np.linalg.solve(M_eff, J.T @ lam), atol=1e-12)

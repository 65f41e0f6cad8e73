"""MuJoCo's condim 4 (torsional friction) and 6 (rolling friction) in
``jaxdyn.sim.Constraint(soft=True)`` (issue 56), elliptic and pyramidal cones, checked against
MuJoCo C: the per-contact impulses on MuJoCo's own contact rows (``efc_force``) and short
rollouts of a spinning sphere (condim 4), a rolling ball (condim 6), a box spinning on its face
(condim 4) and a condim-3 ball beside them."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import sim
from jaxdyn.sim.contact import ContactFrames, solve_contact_impulses, tangent_basis

mujoco = pytest.importorskip("mujoco")

from _mujoco_ref import mujoco_rollout  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:load_mjcf.*interpenetrate")  # on purpose

# a sphere spinning about the normal (condim 4: torsional friction stops it), a ball rolling
# (condim 6: rolling friction slows it; its spin about the normal too), a box spinning on its
# face (condim 4, its corners slide) and a condim-3 ball sliding and rolling; impratio 1.7
# (the elliptic cone is MuJoCo's sum (f_j / mu_j)^2 <= f_n^2, impratio only in R)
CONDIM_MJCF = """<mujoco>
<option timestep="0.002" cone="{cone}" impratio="1.7" tolerance="1e-14" iterations="1000"/>
<worldbody><geom name="floor" type="plane" size="5 5 .1" friction="0.5 0.01 0.001"/>
<body name="top" pos="0 0 0.09964"><freejoint/>
  <geom name="top" contype="1" conaffinity="0" size="0.1" mass="1" condim="4"
        friction="0.6 0.03 0.002"/></body>
<body name="roller" pos="0.5 0 0.04982"><freejoint/>
  <geom name="roller" contype="1" conaffinity="0" size="0.05" mass="0.4" condim="6"
        friction="0.8 0.02 0.01"/></body>
<body name="box" pos="-0.5 0 0.0499"><freejoint/>
  <geom name="box" contype="1" conaffinity="0" type="box" size="0.1 0.08 0.05" mass="1.5"
        condim="4" friction="0.7 0.05 0"/></body>
<body name="ball" pos="0 0.6 0.0499"><freejoint/>
  <geom name="ball" contype="1" conaffinity="0" size="0.05" mass="0.5"/></body>
</worldbody></mujoco>"""
QVEL = np.r_[
    np.r_[0, 0, 0, 0, 0, 25.0],  # top: spinning about z
    np.r_[1.0, 0, 0, 0, 20.0, 3.0],  # roller: rolling along x (v = w r), a little spin
    np.r_[0, 0, 0, 0, 0, 8.0],  # box: spinning on its face
    np.r_[0.5, 0, 0, 0, 10.0, 0],  # ball (condim 3): sliding and rolling
]
STEPS = 40


def _mujoco_rows(m, d):
    """MuJoCo's contacts (``mj_forward`` done) in jaxdyn's rows ``[n, t1, t2, n_w, t1_w,
    t2_w]`` (:func:`jaxdyn.sim.contact.tangent_basis`; a contact of lower condim has zero rows
    there): the rows' Jacobian ``Jc (6nc, nv)`` recovered from MuJoCo's ``efc_J`` (elliptic:
    MuJoCo's rows ``frame (jacp, jacr)``; pyramidal: the edges ``J_n +- mu_k J_k``),
    :class:`ContactFrames` with each contact's ``dist``, ``solref``, ``solimp``, friction (the
    torsional and rolling ones in ``spin``) and ``body_invweight0``, and the impulses ``h f``
    of MuJoCo's ``efc_force`` in the same rows."""
    nc, h, nv = d.ncon, m.opt.timestep, m.nv
    pyramid = m.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL
    n = np.array([c.frame[:3] for c in d.contact[:nc]])
    t1, t2 = (np.asarray(t) for t in tangent_basis(jnp.asarray(n)))
    Jc, lam = np.zeros((nc, 6, nv)), np.zeros((nc, 6))
    mu, spin, iw = np.zeros(nc), np.zeros((nc, 2)), np.zeros(nc)
    for i, c in enumerate(d.contact[:nc]):
        a, dim = c.efc_address, int(c.dim)
        J = d.efc_J.reshape(-1, nv)[a:]
        f = d.efc_force[a:]
        iw[i] = sum(m.body_invweight0[m.geom_bodyid[g], 0] for g in c.geom)
        if dim == 1:
            Jc[i, 0], lam[i, 0] = J[0], h * f[0]
            continue
        fr = c.friction[: dim - 1]
        mu[i] = fr[0]
        spin[i] = [fr[2] if dim >= 4 else 0.0, fr[3] if dim == 6 else 0.0]
        if pyramid:  # edges J_n +- mu_k J_k, forces f_k+, f_k-
            Jm = np.zeros((dim, nv))
            Jm[0] = 0.5 * (J[0] + J[1])
            Jm[1:] = np.stack([(J[2 * k] - J[2 * k + 1]) / (2 * fr[k]) for k in range(dim - 1)])
            fm = np.r_[
                f[: 2 * (dim - 1)].sum(), fr * (f[0 : 2 * dim - 2 : 2] - f[1 : 2 * dim - 2 : 2])
            ]
        else:
            Jm, fm = J[:dim], f[:dim]
        s = c.frame.reshape(3, 3)  # MuJoCo's rows n, s1, s2 (linear, then angular)
        basis = np.stack([n[i], t1[i], t2[i]])
        T = basis @ s.T  # jaxdyn's row j = sum_k (b_j . s_k) MuJoCo's row k
        lin = np.zeros((3, nv))
        lin[: min(dim, 3)] = Jm[: min(dim, 3)]
        flin = np.zeros(3)
        flin[: min(dim, 3)] = fm[: min(dim, 3)]
        Jc[i, :3], lam[i, :3] = T @ lin, h * T @ flin
        if dim > 3:
            ang, fang = np.zeros((3, nv)), np.zeros(3)
            ang[: dim - 3], fang[: dim - 3] = Jm[3:dim], fm[3:dim]
            Jc[i, 3:], lam[i, 3:] = T @ ang, h * T @ fang
    frames = ContactFrames(
        jnp.asarray([c.dist for c in d.contact[:nc]]),
        jnp.asarray(n),
        jnp.zeros((nc, 3)),
        jnp.zeros((nc, 3)),
        jnp.asarray(mu),
        (0,) * nc,
        (-1,) * nc,
        solref=jnp.asarray([c.solref for c in d.contact[:nc]]),
        solimp=jnp.asarray([c.solimp for c in d.contact[:nc]]),
        invweight=jnp.asarray(iw),
        spin=jnp.asarray(spin),
    )
    return Jc.reshape(6 * nc, nv), frames, lam


def _frames_at(model, cfg, q):
    """The contact frames of ``cfg`` at configuration ``q`` and zero velocity (jitted)."""
    from jaxdyn.sim import core

    def frames(q):
        ws, origin = core._world(model, q)
        return core._contact_kinematics(model, cfg, ws, origin, jnp.zeros(model.nv))[1]

    return jax.jit(frames)(jnp.asarray(q))


@pytest.mark.parametrize("cone", ["elliptic", "pyramidal"])
def test_condim_impulses_are_mujocos(cone):
    """At a step of the scene where every body touches (MuJoCo C, its Newton solver at
    tolerance 1e-14): every contact's impulse ``h efc_force`` (condim 3, 4 and 6, in jaxdyn's
    rows ``[n, t1, t2, n_w, t1_w, t2_w]``) is that of ``Constraint(soft=True)`` on the same
    contact rows, free velocity, distances and parameters to 1e-10 (relative to the largest):
    the torsional and rolling rows, ``R_j = R_1 mu_1^2 / mu_j^2`` on them and the cone
    ``sum (f_j / mu_j)^2 <= f_n^2`` (elliptic), the edges ``J_n +- mu_k J_k`` with the common
    ``R`` (pyramidal), and the friction rows' ``aref = -b J v``; without the torsional and
    rolling rows the impulses are 1e-3 off."""
    m = mujoco.MjModel.from_xml_string(CONDIM_MJCF.format(cone=cone))
    d = mujoco.MjData(m)
    d.qvel[:] = QVEL
    for _ in range(60):  # to a step where every contact touches (the bodies hop a little)
        mujoco.mj_step(m, d)
        mujoco.mj_forward(m, d)
        if d.ncon == 7 and all(c.dist < 0 for c in d.contact[:7]) and d.time > 0.02:
            break
    dims = sorted(int(c.dim) for c in d.contact[: d.ncon])
    assert dims == [3, 4, 4, 4, 4, 4, 6]  # the ball; the top and the box's corners; the roller
    Jc, frames, want = _mujoco_rows(m, d)
    M = np.zeros((m.nv, m.nv))
    mujoco.mj_fullM(m, d, M)
    G = Jc @ np.linalg.solve(M, Jc.T)
    v = d.qvel + m.opt.timestep * np.linalg.solve(M, d.qfrc_smooth)
    rows = lambda x: (Jc @ x).reshape(-1, 6)  # noqa: E731
    c = sim.Constraint(
        soft=True, relaxed=True, solver="dual", iterations=2000, cone=cone, impratio=1.7
    )
    lam = jax.jit(lambda G, fr, vf, v: solve_contact_impulses(c, G, fr, vf, m.opt.timestep, v))(
        jnp.asarray(G), frames, rows(v), rows(d.qvel)
    )
    np.testing.assert_allclose(lam, want, rtol=0, atol=1e-10 * np.abs(want).max())
    # the torsional and rolling rows carry impulses (of the top, the box, the roller)
    assert np.abs(want[:, 3]).max() > 1e-3 * np.abs(want).max()
    assert np.abs(want[:, 4:]).max() > 1e-5 * np.abs(want).max()
    # without them (condim 3 everywhere) the problem is another
    flat = dataclasses.replace(frames, spin=None)
    three = jax.jit(lambda G, fr, vf, v: solve_contact_impulses(c, G, fr, vf, m.opt.timestep, v))(
        jnp.asarray(G.reshape(-1, 6, len(G) // 6, 6)[:, :3, :, :3].reshape(len(G) // 2, -1)),
        flat,
        rows(v)[:, :3],
        rows(d.qvel)[:, :3],
    )
    assert np.abs(np.asarray(three) - want[:, :3]).max() > 1e-3 * np.abs(want).max()


# a pendulum beside the scene, swung into its 5 degree limit (MuJoCo's limit row, in one problem
# with the contacts: sim_config(..., limits="constraint"))
ARM = (
    '<body name="arm" pos="0 -0.6 1"><joint name="hinge" type="hinge" axis="1 0 0" '
    'limited="true" range="-5 5"/><geom type="capsule" fromto="0 0 0 0 0 -0.3" '
    'size="0.02" contype="0" conaffinity="0" mass="0.3"/></body>'
)


@pytest.fixture(scope="module", params=["elliptic", "pyramidal"])
def condim_run(request):
    """jaxdyn's rollout of the scene with the pendulum (``Constraint(soft=True,
    relaxed=True)``, the file's cone and impratio, ``limits="constraint"``) and MuJoCo C's,
    ``STEPS`` steps: ``(loaded, positions, velocities)`` of each, in MuJoCo's coordinates."""
    cone = request.param
    xml = CONDIM_MJCF.format(cone=cone).replace("</worldbody>", ARM + "</worldbody>")
    qvel = np.r_[QVEL, 6.0]
    loaded = jaxdyn.load_mjcf(xml)
    iterations = 300 if cone == "elliptic" else 1500
    cfg = loaded.sim_config(
        sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=iterations),
        limits="constraint",
    )
    assert isinstance(cfg.contact, sim.Constraint) and cfg.contact.cone == cone
    assert getattr(cfg.geoms, "spin", None) is not None and cfg.limit_constraints is not None
    conv = loaded.converter()
    q0 = np.asarray(loaded.q0)
    v0 = conv.v_from_mujoco(q0, qvel)
    model = loaded.model
    tr = jax.jit(lambda q, v: sim.rollout(model, sim.State(q, v), jnp.zeros((STEPS, 0)), cfg=cfg))(
        jnp.asarray(q0), jnp.asarray(v0)
    )
    q = np.array([conv.q_to_mujoco(np.asarray(x)) for x in tr.q])
    v = np.array([conv.v_to_mujoco(np.asarray(a), np.asarray(b)) for a, b in zip(tr.q, tr.v)])
    m = mujoco.MjModel.from_xml_string(xml)
    ref = mujoco_rollout(m, STEPS, qvel=qvel, fields=("qpos", "qvel"))
    return loaded, (q, v), ref


def test_condim_rollouts_follow_mujoco(condim_run):
    """MuJoCo C and jaxdyn's soft contact on the scene, 40 steps (elliptic and pyramidal
    cones): positions and orientations to 1e-10, velocities to 1e-8 at every step; the sphere
    spinning on the floor loses spin to its torsional friction (condim 4), the rolling ball's
    rolling slows (condim 6), the box's spin slows, in both; the pendulum's limit row, solved
    with the contacts (their scaled rows, elliptic, or 2 (condim - 1) edges, pyramidal),
    stops it and sends it back."""
    loaded, (q, v), (q_ref, v_ref) = condim_run
    # the condim-4 / 6 geoms are pairs with the floor, the condim-3 ball a primitive
    assert loaded.geoms.condim == (3, 4, 6, 4) and [p.name for p in loaded.contacts] == ["ball"]
    np.testing.assert_allclose(q, q_ref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(v, v_ref, rtol=0, atol=1e-8)
    spin, roll, box = v_ref[-1, 5], v_ref[-1, 10], v_ref[-1, 17]
    assert spin < 25.0 - 1.0 and box < 8.0 - 0.5  # torsional friction
    assert roll < v_ref[0, 10] - 0.1  # rolling friction (rolls without slipping: v = w r)
    assert q_ref[:, -1].max() > np.deg2rad(5) and v_ref[-1, -1] < 0  # the limit, and back


def test_elliptic_cone_is_mujocos_under_impratio():
    """condim 3 alone (rows ``[n, t1, t2]``, the scene with every condim 3), elliptic cones at
    ``impratio = 1.7``: MuJoCo's cone is ``|f_t| <= mu f_n`` with the geoms' friction itself
    (``impratio`` only divides the friction rows' ``R``); ``Constraint(soft=True)``'s impulses
    are MuJoCo C's to 1e-10 (a cone of ``mu / sqrt(impratio)``, as jaxdyn had, is 1e-3 off)."""
    xml = CONDIM_MJCF.format(cone="elliptic").replace('condim="4"', "").replace('condim="6"', "")
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    d.qvel[:] = QVEL
    for _ in range(16):  # the box's corners slide (it spins down in 20 steps)
        mujoco.mj_step(m, d)
    mujoco.mj_forward(m, d)
    assert {int(c.dim) for c in d.contact[: d.ncon]} == {3} and d.ncon >= 5
    Jc, frames, want = _mujoco_rows(m, d)
    nc = d.ncon
    Jc = Jc.reshape(nc, 6, -1)[:, :3].reshape(3 * nc, -1)
    frames = dataclasses.replace(frames, spin=None)
    M = np.zeros((m.nv, m.nv))
    mujoco.mj_fullM(m, d, M)
    G = Jc @ np.linalg.solve(M, Jc.T)
    v = d.qvel + m.opt.timestep * np.linalg.solve(M, d.qfrc_smooth)
    rows = lambda x: (Jc @ x).reshape(-1, 3)  # noqa: E731
    c = sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=1000, impratio=1.7)
    lam = jax.jit(lambda G, fr, vf, v: solve_contact_impulses(c, G, fr, vf, m.opt.timestep, v))(
        jnp.asarray(G), frames, rows(v), rows(d.qvel)
    )
    want = want[:, :3]
    np.testing.assert_allclose(lam, want, rtol=0, atol=1e-10 * np.abs(want).max())
    mu = np.asarray(frames.friction)
    sliding = np.linalg.norm(want[:, 1:], axis=1) > 0.999 * mu * want[:, 0]  # on the cone
    assert np.any(sliding)


def test_condim_refused_where_not_taken():
    """``Geoms`` with condim 4 / 6 need the geoms' torsional / rolling friction (``spin``);
    ``Compliant`` refuses such pairs in ``SimConfig`` naming them and the model that takes
    them (the hard and soft ``Constraint``); condim 2 (not MuJoCo's) is refused by
    ``Geoms``."""
    loaded = jaxdyn.load_mjcf(CONDIM_MJCF.format(cone="elliptic"))
    g = loaded.geoms
    assert g is not None
    with pytest.raises(ValueError, match="needs spin"):
        dataclasses.replace(g, spin=None)
    with pytest.raises(ValueError, match=r"condim must be 1, 3, 4 or 6.*\[2\]"):
        dataclasses.replace(g, condim=(3, 2, 6, 4))
    with pytest.raises(ValueError, match=r"floor-top.*Constraint\(\) \(hard or soft=True\) takes"):
        sim.SimConfig(dt=0.002, contact=sim.Compliant(), geoms=g)
    for contact in (sim.Constraint(), sim.Constraint(soft=True)):
        assert sim.SimConfig(dt=0.002, contact=contact, geoms=g).geoms is g


@pytest.mark.slow
@pytest.mark.parametrize("cone", ["elliptic", "pyramidal"])
def test_condim_long_rollouts_follow_mujoco(cone):
    """The scene for 1 s (500 steps) until every body has stopped: the spinning sphere and box
    by torsional friction, the rolling ball by rolling friction (condim 6), both cones;
    jaxdyn follows MuJoCo C to 1e-10 m on pyramidal cones (seen 2e-14) and 1e-8 on elliptic
    ones (seen 1.3e-9, on the rolling ball's orientation: MuJoCo's own Newton and CG solvers,
    at tolerance 1e-14, differ by 2e-9 there; its PGS agrees with jaxdyn to 1e-12)."""
    steps = 500
    xml = CONDIM_MJCF.format(cone=cone)
    loaded = jaxdyn.load_mjcf(xml)
    iterations = 300 if cone == "elliptic" else 1500
    cfg = loaded.sim_config(
        sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=iterations)
    )
    conv = loaded.converter()
    q0 = np.asarray(loaded.q0)
    v0 = conv.v_from_mujoco(q0, QVEL)
    model = loaded.model
    tr = jax.jit(lambda q, v: sim.rollout(model, sim.State(q, v), jnp.zeros((steps, 0)), cfg=cfg))(
        jnp.asarray(q0), jnp.asarray(v0)
    )
    q = np.array([conv.q_to_mujoco(np.asarray(x)) for x in tr.q])
    m = mujoco.MjModel.from_xml_string(xml)
    q_ref, v_ref = mujoco_rollout(m, steps, qvel=QVEL, fields=("qpos", "qvel"))
    np.testing.assert_allclose(q, q_ref, rtol=0, atol=1e-8 if cone == "elliptic" else 1e-10)
    assert np.abs(v_ref[-1, [5, 9, 10, 17]]).max() < 0.01  # spins and rolling stopped
    assert np.abs(v_ref[:, [5, 10, 17]]).max() > 8.0  # from 25, 20 and 8 rad/s


def test_condim_friction_mixed_as_mujoco():
    """A pair's friction vector is MuJoCo's ``mjContact.friction`` (``mj_contactParam``: the
    larger of the two geoms' per entry, clamped to ``mjMINMU``, on the rows its condim has):
    with a frictionless floor and a condim-4 sphere of sliding friction 0, the contact keeps
    MuJoCo's 1e-5 sliding friction (its torsional row would otherwise be cut by a cone of
    ``mu = 0``); the rolling column is 0 on the condim-4 contacts."""

    xml = CONDIM_MJCF.format(cone="elliptic").replace(
        'friction="0.5 0.01 0.001"', 'friction="0 0 0"'
    )
    xml = xml.replace('friction="0.6 0.03 0.002"', 'friction="0 0.03 0.002"')
    loaded = jaxdyn.load_mjcf(xml)
    cfg = loaded.sim_config(sim.Constraint(soft=True))
    model = loaded.model

    fr = _frames_at(model, cfg, loaded.q0)
    assert fr is not None and fr.spin is not None
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    live = np.asarray(fr.distance) < 0
    mine = np.c_[np.asarray(fr.friction), np.asarray(fr.spin)][live]
    want = []
    for c in d.contact[: d.ncon]:
        f = c.friction
        want.append(
            [f[0] if c.dim > 1 else 0.0, f[2] if c.dim >= 4 else 0.0, f[3] if c.dim == 6 else 0.0]
        )
    key = lambda a: sorted(map(tuple, np.round(a, 12)))  # noqa: E731
    assert key(mine) == key(np.array(want))
    assert [1e-5, 0.03, 0.0] in np.round(np.array(want), 12).tolist()


@pytest.mark.parametrize("cone", ["elliptic", "pyramidal"])
def test_contact_forces_report_torques_as_mujoco(cone):
    """``sim.contact_forces(..., torques=True)``: each contact's force and the torque of its
    torsional / rolling rows (world axes, on the body the normal points to), projected on
    MuJoCo's contact frame, are MuJoCo C's ``mj_contactForce`` at a state of the scene where
    every body touches (condim 3, 4 and 6; both cones) to 1e-9 relative to the largest (seen:
    3e-14); the condim-3 contact reports no torque, ``torques=False`` the forces alone."""
    from jaxdyn.sim import core

    jax.config.update("jax_enable_x64", True)
    xml = CONDIM_MJCF.format(cone=cone)
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    d.qvel[:] = QVEL
    for _ in range(60):  # as test_condim_impulses_are_mujocos
        mujoco.mj_step(m, d)
        mujoco.mj_forward(m, d)
        if d.ncon == 7 and all(c.dist < 0 for c in d.contact[:7]) and d.time > 0.02:
            break
    loaded = jaxdyn.load_mjcf(xml)
    cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=2000))
    model, conv = loaded.model, loaded.converter()
    q = conv.q_from_mujoco(np.asarray(d.qpos))
    s = sim.State(jnp.asarray(q), jnp.asarray(conv.v_from_mujoco(q, np.asarray(d.qvel))))

    @jax.jit
    def report(s):
        ws, origin = core._world(model, s.q)
        fr = core._contact_kinematics(model, cfg, ws, origin, s.v)[1]
        both = sim.contact_forces(model, s, jnp.zeros(0), cfg, torques=True)
        return both, sim.contact_forces(model, s, jnp.zeros(0), cfg), fr.point + origin, fr.normal

    f, forces, point, normal = (np.asarray(x) for x in report(s))
    assert f.shape == (len(point), 6)
    np.testing.assert_array_equal(forces, f[:, :3])
    mine, want = [], []
    for i, c in enumerate(d.contact[: d.ncon]):
        k = int(np.argmin(np.linalg.norm(point - c.pos, axis=1)))  # the same contact
        assert np.linalg.norm(point[k] - c.pos) < 1e-12
        F = np.zeros(6)
        mujoco.mj_contactForce(m, d, i, F)
        frame = c.frame.reshape(3, 3)  # rows: MuJoCo's normal (geom1 -> geom2), tangents
        sign = np.sign(normal[k] @ frame[0])  # jaxdyn's body is MuJoCo's geom2 or geom1
        mine.append(sign * np.r_[frame @ f[k, :3], frame @ f[k, 3:]])
        want.append(F)
        if c.dim == 3:
            assert np.all(f[k, 3:] == 0)
    mine, want = np.array(mine), np.array(want)
    np.testing.assert_allclose(mine, want, rtol=0, atol=1e-9 * np.abs(want).max())
    assert np.abs(want[:, 3:]).max() > 1e-3  # torsional and rolling torques reported
    with pytest.raises(ValueError, match="torques must be True or False"):
        sim.contact_forces(model, s, jnp.zeros(0), cfg, torques=1)


def test_hard_constraint_condim_spin_and_rolling_stop_as_mujoco():
    """The hard ``sim.Constraint()`` (Coulomb's law, De Saxce's term) takes condim 4 / 6 on
    MuJoCo's elliptic cone (scaled rows, as the soft contact's): on the scene (the file's
    ``<option cone="elliptic">`` for MuJoCo; 400 steps of 2 ms) the spinning sphere stops at
    Coulomb's time ``w0 I / (mu_t m g)`` (170 steps) to 2 steps, MuJoCo C's soft contact 9 %
    later (seen 169 vs 185: its soft torsional friction lies below the cone at first); the
    rolling ball (condim 6) decelerates as MuJoCo's (its linear speed to 0.02 m/s at every
    step, seen 0.011) and stops within 10 % of MuJoCo's stop (seen 362 vs 394), the box's
    spin stops in 50 steps as MuJoCo's; a sliding contact's torsional torque
    (``contact_forces(torques=True)``) is ``-mu_t f_n`` along the spin to 1e-8."""
    jax.config.update("jax_enable_x64", True)
    steps = 400
    xml = CONDIM_MJCF.format(cone="elliptic")
    m = mujoco.MjModel.from_xml_string(xml)
    (v_ref,) = mujoco_rollout(m, steps, qvel=QVEL, fields=("qvel",))
    loaded = jaxdyn.load_mjcf(xml)
    cfg = loaded.sim_config(sim.Constraint(soft=False))
    assert cfg.geoms.condim == (3, 4, 6, 4) and cfg.geoms.spin is not None
    model, conv = loaded.model, loaded.converter()
    q0 = np.asarray(loaded.q0)

    @jax.jit
    def run(q, v):
        tr = sim.rollout(model, sim.State(q, v), jnp.zeros((steps, 0)), cfg=cfg)
        s = sim.State(tr.q[50], tr.v[50])  # spinning, resting on the floor
        return tr, sim.contact_forces(model, s, jnp.zeros(0), cfg, torques=True)

    tr, f = run(jnp.asarray(q0), jnp.asarray(conv.v_from_mujoco(q0, QVEL)))
    v = np.array([conv.v_to_mujoco(np.asarray(a), np.asarray(b)) for a, b in zip(tr.q, tr.v)])

    def stop(x):  # the first step below 0.01 rad/s
        assert np.any(np.abs(x) < 0.01)
        return int(np.argmax(np.abs(x) < 0.01))

    coulomb = 25.0 * (0.4 * 0.1**2) / (0.03 * 9.81) / 0.002  # I = 2/5 m r^2, m = 1
    assert abs(stop(v[:, 5]) - coulomb) <= 2
    assert 0 < stop(v_ref[:, 5]) - stop(v[:, 5]) < 0.15 * stop(v_ref[:, 5])
    assert np.abs(v[:, 6] - v_ref[:, 6]).max() < 0.02  # the roller's speed
    assert abs(stop(v[:, 10]) - stop(v_ref[:, 10])) < 0.1 * stop(v_ref[:, 10])  # rolling
    assert stop(v[:, 17]) < 50 and stop(v_ref[:, 17]) < 50  # the box's spin
    # the top's contact (the slot whose torque is along the normal, spinning): -mu_t f_n
    f = np.asarray(f)
    k = int(np.argmax(np.abs(f[:, 5])))
    assert f[k, 2] > 5.0 and np.abs(f[k, 3:5]).max() < 1e-12  # the normal is z
    np.testing.assert_allclose(f[k, 5], -0.03 * f[k, 2], rtol=1e-8)


@pytest.mark.filterwarnings("ignore:Scene.*interpenetrate")
def test_scene_objects_take_condim_4_and_6():
    """``sim.Scene``'s objects and ground take MuJoCo's ``friction=(sliding, torsional,
    rolling)`` and ``condim`` 4 / 6 (a number: MuJoCo's default torsional and rolling 0.005,
    0.0001): the scene's version of the condim scene has every contact's friction vector of
    MuJoCo C on the MJCF scene (``mj_contactParam``: the larger per entry, ``mjMINMU``, the
    rows of the pair's condim); a condim-4 / 6 object meets the ground as a geom pair (the
    condim-3 ball stays a primitive); the hard ``Constraint()`` stops the spinning sphere at
    Coulomb's time to 2 steps; ``Compliant`` refuses the pairs by name; bad friction / condim
    are refused by name."""

    jax.config.update("jax_enable_x64", True)
    z = lambda r, d: (0.0, 0.0, r - d)  # noqa: E731 (the depth at the start, as the MJCF's)
    scene = sim.Scene(
        objects=[
            sim.FreeSphere("top", 0.1, mass=1.0, pos=z(0.1, 3.6e-4), condim=4,
                           friction=(0.6, 0.03, 0.002), v=(0, 0, 25.0, 0, 0, 0)),
            sim.FreeSphere("roller", 0.05, mass=0.4, pos=(0.5, 0, 0.04982), condim=6,
                           friction=(0.8, 0.02, 0.01), v=(0, 20.0, 3.0, 1.0, 0, 0)),
            sim.FreeBox("box", (0.2, 0.16, 0.1), mass=1.5, pos=(-0.5, 0, 0.0499), condim=4,
                        friction=(0.7, 0.05, 0.0), v=(0, 0, 8.0, 0, 0, 0)),
            sim.FreeSphere("ball", 0.05, mass=0.5, pos=(0, 0.6, 0.0499)),
        ],
        world=[sim.Ground(friction=(0.5, 0.01, 0.001))],
    )  # fmt: skip
    assert scene.contacts is not None and set(scene.contacts.names) == {"ball"}
    g = scene.geoms
    assert g is not None
    on_ground = [
        c for (a, b), c in zip(g.pairs, g.contact_dims()) if "ground" in (g.names[a], g.names[b])
    ]
    assert sorted(on_ground) == [4, 4, 6]
    cfg = scene.sim_config(sim.Constraint(), dt=0.002)
    model = scene.model

    fr = _frames_at(model, cfg, scene.q0)
    live = np.asarray(fr.distance) < 0
    mine = np.c_[np.asarray(fr.friction), np.asarray(fr.spin)][live]
    m = mujoco.MjModel.from_xml_string(CONDIM_MJCF.format(cone="elliptic"))
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    want = [
        [c.friction[0], c.friction[2] if c.dim >= 4 else 0.0, c.friction[3] if c.dim == 6 else 0]
        for c in d.contact[: d.ncon]
    ]
    key = lambda a: sorted(map(tuple, np.round(a, 12)))  # noqa: E731
    assert len(mine) == d.ncon == 7 and key(mine) == key(np.array(want))

    steps = 200
    run = jax.jit(lambda s: sim.rollout(model, s, jnp.zeros((steps, 0)), cfg=cfg))
    tr = run(scene.state())
    spin = np.asarray(tr.v[:, scene.v_index["top"][2]])
    coulomb = 25.0 * (0.4 * 0.1**2) / (0.03 * 9.81) / 0.002
    assert abs(int(np.argmax(np.abs(spin) < 0.01)) - coulomb) <= 2

    with pytest.raises(ValueError, match=r"(ground-top|top-ground).*Constraint\(\) \(hard or"):
        scene.sim_config(sim.Compliant())
    for kw, msg in (
        (dict(condim=5), "condim must be 1 .frictionless., 3, 4"),
        (dict(friction=(1.0, 0.1)), r"friction must be a number or \(sliding, torsional"),
        (dict(friction=(1.0, -0.1, 0.0)), "friction must be >= 0"),
    ):
        with pytest.raises(ValueError, match=f"FreeObject 'x': {msg}"):
            sim.FreeSphere("x", 0.1, **kw)


@pytest.mark.slow  # reverse mode through a rollout: a long compile (default: the forward,
# test_hard_constraint_condim_spin_and_rolling_stop_as_mujoco)
def test_hard_constraint_condim_gradient_matches_finite_differences():
    """Reverse mode through 10 steps of the hard ``Constraint()`` on the condim scene (the
    implicit-function derivative of the cone problem with torsional / rolling rows, a contact
    lacking the rolling rows among them): finite (it was NaN while those rows had an ``eps``
    diagonal alone) and the derivative in the initial velocities' scale equals central
    differences to 1e-6 relative (seen 1e-8)."""
    jax.config.update("jax_enable_x64", True)
    loaded = jaxdyn.load_mjcf(CONDIM_MJCF.format(cone="elliptic"))
    cfg = loaded.sim_config(sim.Constraint(soft=False))
    conv, q0 = loaded.converter(), jnp.asarray(loaded.q0)
    v0 = jnp.asarray(conv.v_from_mujoco(np.asarray(loaded.q0), QVEL))

    def f(s):
        tr = sim.rollout(loaded.model, sim.State(q0, s * v0), jnp.zeros((10, 0)), cfg=cfg)
        return jnp.sum(tr.q[-1]) + 0.1 * jnp.sum(tr.v[-1])

    g = float(jax.jit(jax.grad(f))(1.0))
    fj, e = jax.jit(f), 1e-4
    fd = float((fj(1.0 + e) - fj(1.0 - e)) / (2 * e))
    assert np.isfinite(g) and abs(g) > 0.1
    np.testing.assert_allclose(g, fd, rtol=1e-6)

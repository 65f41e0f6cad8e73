"""MuJoCo's soft contact in ``jaxdyn.sim.Constraint(soft=True)`` (issue 56): per-contact
``solref`` / ``solimp`` from MJCF geoms (mixed per pair as MuJoCo's ``mj_contactParam``), the
impedance's regulariser and reference acceleration in the cone problem, checked against MuJoCo C
on the same scenes and against the closed-form resting depth."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq

import jaxdyn
from jaxdyn import sim
from jaxdyn.sim import _soft
from jaxdyn.sim.contact import ContactFrames, solve_contact_impulses

mujoco = pytest.importorskip("mujoco")

from _mujoco_ref import mujoco_rollout  # noqa: E402

# one scene, one compile: a ball dropped from 0.3 m (default solref / solimp: a primitive
# against the floor), a box put down on its face (its own solimp mixed with the floor's: a
# primitive), a ball with a <default> class's solref / solimp / solmix (a geom pair with the
# floor) and a flat box with a direct (negative) solref pushed to slide at 1 m/s; the bodies
# collide with the floor only (contype / conaffinity: no body-body pairs to compile)
SOFT_MJCF = """<mujoco><option timestep="0.002" cone="{cone}" tolerance="1e-14" iterations="1000"/>
<default><default class="stiff">
  <geom solref="0.01 0.9" solimp="0.8 0.99 0.002 0.3 3" solmix="3"/></default></default>
<worldbody><geom name="floor" type="plane" size="5 5 .1" friction="0.5"/>
<body name="ball" pos="0 0 0.3"><freejoint/>
  <geom name="ball" contype="1" conaffinity="0" size="0.1" mass="2"/></body>
<body name="box" pos="0.5 0 0.12"><freejoint/>
  <geom name="box" contype="1" conaffinity="0" type="box" size="0.1 0.08 0.1" mass="1.5"
        solimp="0.95 0.99 0.001 0.5 2"/></body>
<body name="ball2" pos="-0.5 0 0.1"><freejoint/>
  <geom name="ball2" contype="1" conaffinity="0" size="0.05" class="stiff" mass="0.5"/></body>
<body name="slider" pos="0 0.6 0.0498"><freejoint/>
  <geom name="slider" contype="1" conaffinity="0" type="box" size="0.1 0.1 0.05"
        solref="-20000 -150" mass="1"/></body>
</worldbody></mujoco>"""
# the scene of the rollout test: SOFT_MJCF with MuJoCo's margin and gap (from MuJoCo 3.9.0 a
# contact acts from dist < margin; gap adds contacts up to margin + gap that carry no force):
# the <default> ball's margin (its pair with the floor acts 4 mm above it, and rests there) and
# gap, the box's and the floor's gap (a primitive's: no force)
MARGIN_MJCF = (
    SOFT_MJCF.replace(
        'size="0.05" class="stiff"', 'size="0.05" margin="0.004" gap="0.01" class="stiff"'
    )
    .replace('type="box" size="0.1 0.08 0.1"', 'type="box" size="0.1 0.08 0.1" gap="0.02"')
    .replace('size="5 5 .1" friction', 'size="5 5 .1" gap="0.005" friction')
)
STEPS = 400
PUSH = np.r_[np.zeros(18), 1.0, 0.3, 0.0, 0.0, 0.0, 0.0]  # the slider's MuJoCo qvel


@pytest.fixture(scope="module")
def soft_run():
    """jaxdyn's rollout of the scene (``Constraint(soft=True, relaxed=True, iterations=200)``:
    the soft problem is well conditioned, projected gradient alone converges; Newton steps
    triple the compile time), the file's ``implicitfast``, in MuJoCo's coordinates, and MuJoCo
    C's, elliptic cones."""
    loaded = jaxdyn.load_mjcf(MARGIN_MJCF.format(cone="elliptic"))
    cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=200))
    conv = loaded.converter()
    q0 = np.asarray(loaded.q0)
    v0 = conv.v_from_mujoco(q0, PUSH)
    model = loaded.model
    tr = jax.jit(lambda q, v: sim.rollout(model, sim.State(q, v), jnp.zeros((STEPS, 0)), cfg=cfg))(
        jnp.asarray(q0), jnp.asarray(v0)
    )
    mine = np.array([conv.q_to_mujoco(np.asarray(q)) for q in tr.q])
    m = mujoco.MjModel.from_xml_string(MARGIN_MJCF.format(cone="elliptic"))
    return loaded, cfg, mine, mujoco_rollout(m, STEPS, qvel=PUSH)[0]


def _quat_gap(a, b):
    """Largest difference of unit quaternions up to sign, ``(T, 4)`` each."""
    s = np.sign(np.sum(a * b, -1, keepdims=True))
    return np.abs(a - s * b).max()


def test_soft_contact_follows_mujoco(soft_run):
    """MuJoCo C (elliptic cones, its Newton solver at tolerance 1e-14) and jaxdyn's soft
    contact (``relaxed=True``: MuJoCo's convex problem) on the same scene, 0.8 s: the ball's
    drop, impact and settling, the box with its mixed ``solimp`` (primitives against the
    floor), the ``<default>`` class's ball (a geom pair, resting on its ``margin``) and the
    sliding box with a direct ``solref``, MuJoCo's ``gap`` on the ball, the box and the floor
    (contacts MuJoCo detects and excludes: no force), agree to 1e-10 m in position and 1e-10
    in orientation at every step (seen: 3e-12). MuJoCo's default tolerance (1e-8) leaves its
    sliding box 1.5e-8 m off this trajectory; the primitives' contact point is MuJoCo's,
    midway between the surfaces (at the sphere's deepest point instead, the sliding box drifts
    2e-6 m)."""
    loaded, cfg, mine, ref = soft_run
    assert cfg.contacts.solref is not None and cfg.geoms.solimp is not None
    assert "ball2" in loaded.geoms.names and "slider[0]" in cfg.contacts.names
    for b in range(4):
        pos = slice(7 * b, 7 * b + 3)
        np.testing.assert_allclose(mine[:, pos], ref[:, pos], atol=1e-10)
        assert _quat_gap(mine[:, 7 * b + 3 : 7 * b + 7], ref[:, 7 * b + 3 : 7 * b + 7]) < 1e-10
    assert ref[-1, 21] - ref[0, 21] > 0.003  # the slider slid
    # the margin's ball rests 3.7 mm above the floor (its 4 mm margin less its soft depth)
    assert 0.0035 < ref[-1, 16] - 0.05 < 0.004 and abs(mine[-1, 16] - ref[-1, 16]) < 1e-10


def test_soft_contact_resting_depth_is_mujocos(soft_run):
    """At rest, MuJoCo's soft contact holds the weight with ``R f = -k d(r) r`` (the reference
    acceleration balances the regulariser; ``R = (1 - d) / d * diagApprox``, ``diagApprox =
    1 / m`` for a free body), so a sphere rests at the root ``r`` of ``(1 - d(r)) g = -k d(r)^2
    r`` and a box on its face, its weight on four corners, at the root of ``(1 - d(r)) g / 4 =
    -k d(r)^2 r``: with MuJoCo's default ``solref`` / ``solimp`` the ball's penetration is
    0.367 mm, the box's (``solimp`` mixed 0.925 0.97 0.001 0.5 2) 0.080 mm. jaxdyn's and MuJoCo
    C's settle there to 1e-9 m."""
    _, _, mine, ref = soft_run
    g = 9.81

    def depth(solimp, share):
        k = 1 / (solimp[1] * 0.02) ** 2  # solref (0.02, 1)
        imp = lambda r: float(_soft.impedance(jnp.asarray(solimp), r))  # noqa: E731
        return brentq(lambda r: (1 - imp(r)) * g * share + k * imp(r) ** 2 * r, -0.01, -1e-9)

    ball = depth(np.array(_soft.DEFAULT_SOLIMP), 1.0)
    box = depth(0.5 * (np.array(_soft.DEFAULT_SOLIMP) + [0.95, 0.99, 0.001, 0.5, 2]), 0.25)
    assert abs(ball + 3.67e-4) < 1e-6 and abs(box + 8.0e-5) < 1e-6
    for run in (mine, ref):
        np.testing.assert_allclose(run[-20:, 2] - 0.1, ball, atol=1e-9)
        np.testing.assert_allclose(run[-20:, 9] - 0.1, box, atol=1e-9)


def _mujoco_rows(m, d):
    """MuJoCo's pyramidal contacts (``mj_forward`` done) in jaxdyn's rows ``[n, t1, t2]``
    (:func:`jaxdyn.sim.contact.tangent_basis`): the contact Jacobian ``Jc (3nc, nv)`` recovered
    from the edge rows ``J_n +- mu J_sk`` (the frictionless row of a condim-1 contact: zero
    tangents), :class:`ContactFrames` with each contact's ``dist``, ``solref``, ``solimp``,
    friction and ``body_invweight0``, and the impulses ``h E^T f`` of MuJoCo's edge forces."""
    from jaxdyn.sim.contact import tangent_basis

    nc, h = d.ncon, m.opt.timestep
    n = np.array([c.frame[:3] for c in d.contact[:nc]])
    t1, t2 = (np.asarray(t) for t in tangent_basis(jnp.asarray(n)))
    Jc, lam, mu, iw = np.zeros((3 * nc, m.nv)), np.zeros((nc, 3)), np.zeros(nc), np.zeros(nc)
    for i, c in enumerate(d.contact[:nc]):
        a, f = c.efc_address, d.efc_force[c.efc_address :]
        J = d.efc_J.reshape(-1, m.nv)[a:]
        iw[i] = sum(m.body_invweight0[m.geom_bodyid[g], 0] for g in c.geom)
        Jc[3 * i] = J[0] if c.dim == 1 else 0.5 * (J[0] + J[1])
        lam[i, 0] = h * (f[0] if c.dim == 1 else f[:4].sum())
        if c.dim == 1:
            continue
        mu[i] = c.friction[0]
        s = c.frame.reshape(3, 3)[1:]
        Js = np.stack([J[0] - J[1], J[2] - J[3]]) / (2 * mu[i])  # J_s1, J_s2
        fs = mu[i] * np.array([f[0] - f[1], f[2] - f[3]])  # friction along s1, s2
        for r, t in ((1, t1[i]), (2, t2[i])):
            Jc[3 * i + r] = (s @ t) @ Js
            lam[i, r] = h * (s @ t) @ fs
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
    )
    return Jc, frames, lam


def test_pyramidal_impulses_are_mujocos():
    """MuJoCo's pyramidal cone (``<option cone="pyramidal">``, its default): on the scene above
    (step 50: the sliding box's corners mid-slide, the box and the class ball, ``condim="1"``
    of higher ``priority``: MuJoCo's frictionless row; step 110: the ball's impact, the slider
    stopped), MuJoCo C's edge forces (its Newton solver at tolerance 1e-14), in jaxdyn's rows,
    are the impulses of ``Constraint(soft=True, cone="pyramidal")`` on the same Delassus
    matrix, free velocity, distances and parameters to 1e-10 (relative to the largest): four
    edges ``J_n +- mu J_sk`` on MuJoCo's contact axes, ``aref`` with the distance on every
    edge, ``R = 2 mu^2 / impratio (1 - d) / d (1 + mu^2) diagApprox`` (``impratio = 1.7``
    here), ``f >= 0``; a condim-1 contact is MuJoCo's frictionless row."""
    xml = SOFT_MJCF.format(cone="pyramidal").replace("<option ", '<option impratio="1.7" ')
    m = mujoco.MjModel.from_xml_string(
        xml.replace('geom name="ball2" ', 'geom name="ball2" condim="1" priority="1" ')
    )
    d = mujoco.MjData(m)
    d.qvel[:] = PUSH
    c = sim.Constraint(
        soft=True, relaxed=True, solver="dual", iterations=400, cone="pyramidal", impratio=1.7
    )
    solve = jax.jit(lambda G, fr, vf, v: solve_contact_impulses(c, G, fr, vf, m.opt.timestep, v))
    seen, sliding = set(), []
    for steps in (50, 60):
        for _ in range(steps):
            mujoco.mj_step(m, d)
        mujoco.mj_forward(m, d)
        Jc, frames, want = _mujoco_rows(m, d)
        M = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, M)  # MuJoCo >= 3.5
        G = Jc @ np.linalg.solve(M, Jc.T)
        v = d.qvel + m.opt.timestep * np.linalg.solve(M, d.qfrc_smooth)
        # padded to 10 slots (one program for both states): contacts apart carry nothing
        pad = 10 - d.ncon
        G = np.block(
            [[G, np.zeros((len(G), 3 * pad))], [np.zeros((3 * pad, len(G))), np.eye(3 * pad)]]
        )
        cat = lambda x, fill: jnp.concatenate(
            [x, jnp.broadcast_to(jnp.asarray(fill), (pad,) + x.shape[1:])]
        )  # noqa: E731
        frames = ContactFrames(
            cat(frames.distance, 1.0),
            cat(frames.normal, [0.0, 0.0, 1.0]),
            cat(frames.point, 0.0),
            cat(frames.velocity, 0.0),
            cat(frames.friction, 0.5),
            (0,) * 10,
            (-1,) * 10,
            solref=cat(frames.solref, _soft.DEFAULT_SOLREF),
            solimp=cat(frames.solimp, _soft.DEFAULT_SOLIMP),
            invweight=cat(frames.invweight, 1.0),
        )
        rows = lambda x: np.concatenate([(Jc @ x).reshape(-1, 3), np.ones((pad, 3))])  # noqa: E731
        lam = solve(jnp.asarray(G), frames, rows(v), rows(d.qvel))
        np.testing.assert_array_equal(lam[d.ncon :], 0.0)
        lam = lam[: d.ncon]
        np.testing.assert_allclose(lam, want, rtol=0, atol=1e-10 * np.abs(want).max())
        seen |= {(int(m.geom_bodyid[c.geom[1]]), int(c.dim)) for c in d.contact[: d.ncon]}
        sliding.append(np.abs(d.qvel[18:20]).max() > 0.1)
    assert seen == {
        (1, 3),
        (2, 3),
        (3, 1),
        (4, 3),
    }  # every body touches, the class ball frictionless
    assert sliding == [True, False]  # the slider slid, then stopped


# two capsules lying on the floor, their axes oblique to MuJoCo's default contact axes: "rod"
# a contact primitive against the ground, "bar" (its own solref / solmix) a geom pair with the
# floor (jaxdyn.sim.Geoms); both pushed obliquely to their axes (along: 1 m/s, across: 0.5 m/s):
# they slide along their axes, roll across and hop (friction tips them) while sliding
CAPSULE_MJCF = """<mujoco>
<option timestep="0.002" cone="pyramidal" impratio="1.7" tolerance="1e-14" iterations="1000"/>
<worldbody><geom name="floor" type="plane" size="5 5 .1" friction="0.6"/>
<body name="rod" pos="0 0 0.0499" zaxis="0.8660254 0.5 0"><freejoint/>
  <geom name="rod" type="capsule" size="0.05 0.2" contype="1" conaffinity="0" mass="1"/></body>
<body name="bar" pos="0 1 0.0299" zaxis="0.6 -0.8 0"><freejoint/>
  <geom name="bar" type="capsule" size="0.03 0.15" contype="1" conaffinity="0" mass="0.5"
        solmix="3" solref="0.01 0.9"/></body>
</worldbody></mujoco>"""
CAPSULE_PUSH = np.r_[0.616, 0.933, 0.0, 0.0, 0.0, 0.0, 1.0, -0.5, 0.0, 0.0, 0.0, 0.0]


@pytest.mark.filterwarnings("ignore:load_mjcf.*interpenetrate")  # 0.1 mm, on purpose
def test_pyramidal_capsule_on_plane_is_mujocos():
    """A capsule on a plane under pyramidal cones (MuJoCo's ``mjc_PlaneCapsule`` gives the
    contact frame the capsule's axis as its first tangent, ``mju_makeFrame`` makes it
    orthogonal to the normal): mid-slide (55 steps: four contacts, each pyramid on an edge),
    jaxdyn's contact axes ``(n, s1, s2)``
    (:func:`jaxdyn.sim.contact.mujoco_tangents` of its contacts' ``tangent``) are MuJoCo's to
    1e-12, for the primitive (``ContactSet.axis``) and the geom pair (``Geoms.frames``), and on
    MuJoCo's contact rows with jaxdyn's tangents the impulses of ``Constraint(soft=True,
    cone="pyramidal")`` are MuJoCo C's edge forces to 1e-10 (relative to the largest); with
    MuJoCo's default frame instead (zero tangents) they are not (the pyramid's edge that
    holds the slip is another)."""
    from jaxdyn.sim import core
    from jaxdyn.sim.contact import mujoco_tangents

    loaded = jaxdyn.load_mjcf(CAPSULE_MJCF)
    assert [p.name for p in loaded.contacts] == ["rod"] and "bar" in loaded.geoms.names
    cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=400))
    assert cfg.contact.cone == "pyramidal" and cfg.contacts.axis is not None
    m = mujoco.MjModel.from_xml_string(CAPSULE_MJCF)
    d = mujoco.MjData(m)
    d.qvel[:] = CAPSULE_PUSH
    for _ in range(55):
        mujoco.mj_step(m, d)
    mujoco.mj_forward(m, d)
    f = d.efc_force.reshape(-1, 4)
    assert d.ncon == 4 and np.all(f.min(1) < 1e-9 * f.max(1))  # every pyramid on an edge
    conv = loaded.converter()
    model = loaded.model

    @jax.jit
    def frames_at(q):  # jaxdyn's contacts of a step, and the world position of its origin
        ws, origin = core._world(model, q)
        return core._contact_kinematics(model, cfg, ws, origin, jnp.zeros(model.nv))[1], origin

    fr, origin = frames_at(jnp.asarray(conv.q_from_mujoco(d.qpos)))
    live = np.asarray(fr.distance) < 0
    point = np.asarray(fr.point + origin)[live]
    s1, s2 = (np.asarray(s)[live] for s in mujoco_tangents(fr.normal, fr.tangent))
    tangent = np.asarray(fr.tangent)[live]
    assert len(point) == 4
    mine = []
    for c in d.contact[: d.ncon]:
        i = np.argmin(np.linalg.norm(point - c.pos, axis=1))
        assert np.linalg.norm(point[i] - c.pos) < 1e-12
        f = c.frame.reshape(3, 3)
        np.testing.assert_allclose(np.asarray(fr.normal)[live][i], f[0], atol=1e-12)
        np.testing.assert_allclose(np.stack([s1[i], s2[i]]), f[1:], atol=1e-12)
        mine.append(tangent[i])
    Jc, frames, want = _mujoco_rows(m, d)
    frames = dataclasses.replace(frames, tangent=jnp.asarray(np.array(mine)))
    M = np.zeros((m.nv, m.nv))
    mujoco.mj_fullM(m, d, M)
    G = Jc @ np.linalg.solve(M, Jc.T)
    v = d.qvel + m.opt.timestep * np.linalg.solve(M, d.qfrc_smooth)
    rows = lambda x: (Jc @ x).reshape(-1, 3)  # noqa: E731
    c = sim.Constraint(
        soft=True, relaxed=True, solver="dual", iterations=400, cone="pyramidal", impratio=1.7
    )
    solve = jax.jit(lambda G, fr, vf, v: solve_contact_impulses(c, G, fr, vf, m.opt.timestep, v))
    lam = np.asarray(solve(jnp.asarray(G), frames, rows(v), rows(d.qvel)))
    np.testing.assert_allclose(lam, want, rtol=0, atol=1e-10 * np.abs(want).max())
    # the default frame's pyramid is another problem (the same program: zero tangents)
    off = solve(jnp.asarray(G), dataclasses.replace(frames, tangent=jnp.zeros((4, 3))),
                rows(v), rows(d.qvel))  # fmt: skip
    assert np.abs(np.asarray(off) - want).max() > 1e-3 * np.abs(want).max()


def test_mujoco_tangents_given_and_default():
    """:func:`jaxdyn.sim.contact.mujoco_tangents` as MuJoCo's ``mju_makeFrame``: zero (or short,
    ``|t|^2 < 0.25``) tangents give the default frame exactly as ``tangent=None``; a given
    tangent is made orthogonal to the normal and normalised, ``s2 = n x s1``; one along the
    normal leaves nothing and gives ``e_x`` (``mju_normalize3``); the derivatives through the
    dropped rows are finite."""
    from jaxdyn.sim.contact import mujoco_tangents

    n = jnp.asarray([[0.0, 0.0, 1.0], [0.0, 0.8, 0.6], [0.6, 0.0, 0.8], [0.0, 0.0, 1.0]])
    t = jnp.asarray([[0.0, 0.0, 0.0], [0.1, 0.2, 0.3], [0.0, 2.0, 0.5], [0.0, 0.0, 3.0]])
    s1, s2 = (np.asarray(x) for x in mujoco_tangents(n, t))
    d1, d2 = (np.asarray(x) for x in mujoco_tangents(n))
    np.testing.assert_array_equal(s1[:2], d1[:2])
    np.testing.assert_array_equal(s2[:2], d2[:2])
    a = np.array([0.0, 2.0, 0.5]) - 0.4 * np.array([0.6, 0.0, 0.8])  # t - (n . t) n
    np.testing.assert_allclose(s1[2], a / np.linalg.norm(a), atol=1e-15)
    np.testing.assert_allclose(s2[2], np.cross([0.6, 0.0, 0.8], s1[2]), atol=1e-15)
    np.testing.assert_array_equal(s1[3], [1.0, 0.0, 0.0])
    g = jax.grad(lambda t: jnp.sum(mujoco_tangents(n, t)[1] ** 2 * jnp.arange(3.0)))(t)
    assert np.all(np.isfinite(np.asarray(g)))


@pytest.mark.slow  # a soft rollout's compile; default: test_pyramidal_capsule_on_plane_is_mujocos
@pytest.mark.filterwarnings("ignore:load_mjcf.*interpenetrate")
def test_pyramidal_capsule_rollout_follows_mujoco():
    """``load_mjcf`` of the two capsules above (MuJoCo's default pyramidal cone; no ``ignore``
    needed): jaxdyn's rollout (``Constraint(soft=True, relaxed=True)``) and MuJoCo C's agree to
    1e-10 m / 1e-10 in orientation at every step of 0.4 s while they slide, roll and hop, then
    roll on."""
    loaded = jaxdyn.load_mjcf(CAPSULE_MJCF)
    cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=200))
    conv, q0 = loaded.converter(), np.asarray(loaded.q0)
    v0 = jnp.asarray(conv.v_from_mujoco(q0, CAPSULE_PUSH))
    steps = 200
    tr = jax.jit(
        lambda q, v: sim.rollout(loaded.model, sim.State(q, v), jnp.zeros((steps, 0)), cfg=cfg)
    )(jnp.asarray(q0), v0)
    mine = np.array([conv.q_to_mujoco(np.asarray(q)) for q in tr.q])
    (ref,) = mujoco_rollout(mujoco.MjModel.from_xml_string(CAPSULE_MJCF), steps, qvel=CAPSULE_PUSH)
    for b in range(2):
        np.testing.assert_allclose(
            mine[:, 7 * b : 7 * b + 3], ref[:, 7 * b : 7 * b + 3], atol=1e-10
        )
        assert _quat_gap(mine[:, 7 * b + 3 : 7 * b + 7], ref[:, 7 * b + 3 : 7 * b + 7]) < 1e-10
    assert np.abs(ref[-1, [0, 1, 7, 8]] - ref[0, [0, 1, 7, 8]]).min() > 0.01  # both slid


@pytest.mark.slow  # 20 s of compile; default: test_pyramidal_impulses_are_mujocos (the same solve)
def test_pyramidal_rollouts_follow_mujoco():
    """``load_mjcf`` of the scene with ``<option cone="pyramidal">`` gives
    ``Constraint(soft=True)`` MuJoCo's pyramidal cones; jaxdyn's rollout (``relaxed=True``) and
    MuJoCo C's agree to 1e-10 m / 1e-10 in orientation at every step of 0.8 s (seen 6e-16): the
    dropped ball, the box at rest, the class ball and the sliding box; and with gravity tilted
    30 degrees (azimuth 30 degrees, oblique to the pyramids' axes: the same program with another
    ``model.gravity``), an incline on which the box sticks (it creeps 1.5 mm in 0.6 s, MuJoCo's
    soft friction; a frictionless box would slide 1.6 m), the balls roll and the slider
    slides."""
    xml = SOFT_MJCF.format(cone="pyramidal")
    loaded = jaxdyn.load_mjcf(xml)
    cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=200))
    assert cfg.contact.cone == "pyramidal"
    conv, q0, model = loaded.converter(), np.asarray(loaded.q0), loaded.model
    v0 = jnp.asarray(conv.v_from_mujoco(q0, PUSH))
    run = jax.jit(
        lambda model: sim.rollout(model, sim.State(q0, v0), jnp.zeros((STEPS, 0)), cfg=cfg).q
    )
    th, az = np.deg2rad(30.0), np.deg2rad(30.0)
    tilted = 9.81 * np.array([np.sin(th) * np.cos(az), np.sin(th) * np.sin(az), -np.cos(th)])
    for g in (None, tilted):
        m = mujoco.MjModel.from_xml_string(xml)
        if g is not None:
            m.opt.gravity[:] = g
            model = eqx.tree_at(lambda x: x.gravity, model, jnp.asarray(g))
        ref = mujoco_rollout(m, STEPS, qvel=PUSH)[0]
        mine = np.array([conv.q_to_mujoco(np.asarray(q)) for q in run(model)])
        for b in range(4):
            pos = slice(7 * b, 7 * b + 3)
            np.testing.assert_allclose(mine[:, pos], ref[:, pos], atol=1e-10)
            assert _quat_gap(mine[:, 7 * b + 3 : 7 * b + 7], ref[:, 7 * b + 3 : 7 * b + 7]) < 1e-10
    assert np.abs(ref[-1, 7:10] - ref[100, 7:10]).max() < 5e-3  # the box sticks (soft: creeps)
    assert np.abs(ref[-1, 0:2] - ref[100, 0:2]).max() > 0.05  # the ball rolls
    assert np.abs(ref[-1, 21:23] - ref[0, 21:23]).max() > 0.05  # the slider slides


# two bodies' geoms with margins and gaps (a ball dropped on a box that rests on the floor on
# its own margin; MuJoCo's broad phase sees every pair)
PAIR_MJCF = """<mujoco><option timestep="0.002" cone="{cone}" tolerance="1e-14" iterations="1000"/>
<worldbody><geom name="floor" type="plane" size="5 5 .1" friction="0.6" gap="0.004"/>
<body name="box" pos="0 0 0.103"><freejoint/>
  <geom name="box" type="box" size="0.2 0.15 0.1" margin="0.003" gap="0.01" mass="2"/></body>
<body name="ball" pos="0.05 0.02 0.33"><freejoint/>
  <geom name="ball" size="0.05" margin="0.005" gap="0.02" mass="0.3"/></body>
</worldbody></mujoco>"""


@pytest.mark.slow  # 2 compiles; default: test_soft_contact_follows_mujoco (margin, gap, a pair)
@pytest.mark.parametrize("cone", ["elliptic", "pyramidal"])
def test_margin_and_gap_between_bodies_follow_mujoco(cone):
    """A ball dropped on a box (their pair acts below the sum of their margins, 8 mm; their gaps
    add contacts MuJoCo excludes), the box resting on the floor on its own margin: jaxdyn's
    soft contact (``relaxed=True``) follows MuJoCo C to 1e-10 m in position and orientation at
    every step, elliptic and pyramidal cones."""
    xml = PAIR_MJCF.format(cone=cone)
    loaded = jaxdyn.load_mjcf(xml)
    cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=200))
    assert set(loaded.geoms.names) == {"floor", "box", "ball"}
    conv, q0 = loaded.converter(), np.asarray(loaded.q0)
    steps = 300
    tr = jax.jit(
        lambda q: sim.rollout(
            loaded.model, sim.State(q, jnp.zeros(12)), jnp.zeros((steps, 0)), cfg=cfg
        )
    )(jnp.asarray(q0))
    mine = np.array([conv.q_to_mujoco(np.asarray(q)) for q in tr.q])
    m = mujoco.MjModel.from_xml_string(xml)
    ref, excluded = mujoco_rollout(
        m, steps, fields=("qpos", lambda d: sum(c.exclude == 1 for c in d.contact[: d.ncon]))
    )
    for b in range(2):
        np.testing.assert_allclose(
            mine[:, 7 * b : 7 * b + 3], ref[:, 7 * b : 7 * b + 3], atol=1e-10
        )
        assert _quat_gap(mine[:, 7 * b + 3 : 7 * b + 7], ref[:, 7 * b + 3 : 7 * b + 7]) < 1e-10
    assert excluded.max() >= 1  # MuJoCo had contacts in the gaps
    assert 0.007 < ref[-1, 9] - ref[-1, 2] - 0.15 < 0.008  # the ball rests on the 8 mm margin


def test_pyramidal_coulomb_does_not_lift():
    """Pyramidal cones with ``coulomb=True`` (``Constraint(relaxed=False)``: De Saxce's term of
    the pyramid ``|f_s1| + |f_s2| <= mu f_n``, ``mu max_k |w_sk|``): a contact sliding along
    its first axis ends the step at normal velocity 0 and friction ``-mu f_n`` against the
    slip, where the convex problem (MuJoCo's) lifts it at ``w_n = mu |w_s1|``; sliding
    obliquely, the impulse stays on the edge against the larger slip component. The implicit
    derivatives of both solutions in ``u`` match central differences."""
    from jaxdyn.sim.contact import pyramid_edges, solve_cone_complementarity

    G3 = np.array([[1.0, 0.2, 0.1], [0.2, 1.5, 0.05], [0.1, 0.05, 1.2]])
    mu = 0.5
    n = jnp.asarray([[0.0, 0.0, 1.0]])
    E = np.asarray(pyramid_edges(n, mu))[0]  # s1 = e_y, s2 = -e_x: t1 = e_x = -s2, t2 = s1
    Ge = E @ G3 @ E.T + 1e-3 * np.eye(4)

    @jax.jit
    def solve(u3):
        return [
            solve_cone_complementarity(
                jnp.asarray(Ge), jnp.asarray(E @ u3), mu, 3000, 0, coulomb=cb, cone="pyramidal"
            )[0]
            for cb in (False, True)
        ]

    for u3, edge in (([-0.1, 0.0, 2.0], 1), ([-0.1, 0.7, 2.0], 1), ([-0.1, -2.0, 0.5], 3)):
        u3 = np.asarray(u3)
        relaxed, coulomb = (np.asarray(f) for f in solve(u3))
        we = E @ G3 @ (E.T @ coulomb) + E @ u3 + 1e-3 * coulomb
        hat = we + 0.5 * max(abs(we[0] - we[1]), abs(we[2] - we[3]))
        assert coulomb.min() >= 0 and hat.min() > -1e-12 and abs(coulomb @ hat) < 1e-12
        np.testing.assert_allclose(np.nonzero(coulomb > 1e-9)[0], [edge])
        assert abs(0.5 * (we[edge] + we[edge ^ 1])) < 1e-9  # w_n = 0: on the ground
        wr = E @ G3 @ (E.T @ relaxed) + E @ u3 + 1e-3 * relaxed
        assert 0.5 * (wr[0] + wr[1]) > 0.1  # the convex problem lifts the contact
    # implicit derivatives of both (the edge blocks' fixed point) against central differences
    du, eps = np.array([0.3, -0.2, 0.5]), 1e-6
    _, tangents = jax.jvp(solve, (u3,), (du,))
    for t, hi, lo in zip(tangents, solve(u3 + eps * du), solve(u3 - eps * du), strict=True):
        fd = (np.asarray(hi) - np.asarray(lo)) / (2 * eps)
        np.testing.assert_allclose(t, fd, atol=1e-6 * np.abs(fd).max())
        assert np.abs(fd).max() > 0.01


def test_soft_impulse_of_one_contact():
    """One contact, unit Delassus matrix ``A = a I``: the soft impulse is MuJoCo's ``h f`` with
    ``(A + R) f = aref - J a0`` row by row (inside the cone): normal ``aref = -b v_n - k d r``,
    tangents ``-b v_t``; ``R = (1 - d) / d * diagApprox`` (the contact's ``invweight``, else
    ``A``'s normal entry); ``Constraint(solref=..., solimp=...)`` overrides the contacts';
    the direct ``solref (-k', -b')`` gives ``k = k' / dmax^2``, ``b = b' / dmax``; a contact at
    ``distance >= 0`` carries nothing."""
    h, a = 0.002, 2.0
    v0 = jnp.asarray([[-0.01, 0.002, -0.001]])
    vf = v0 + h * jnp.asarray([[-9.81, 0.0, 0.0]])  # J v_free = J v + h J a0

    def frame(r, **kw):
        z = jnp.zeros((1, 3))
        return ContactFrames(jnp.asarray([r]), z, z, z, jnp.asarray([1.0]), (0,), (-1,), **kw)

    def want(r, solref, solimp, diag):
        solimp = jnp.asarray(solimp)
        k, b = _soft.gains(jnp.asarray(solref), solimp[1], h)
        d = _soft.impedance(solimp, r)
        R = (1 - d) / d * diag
        aref = np.array([-b * v0[0, 0] - k * d * r, -b * v0[0, 1], -b * v0[0, 2]])
        return h * (aref - (vf[0] - v0[0]) / h) / (a + R)

    G = a * jnp.eye(3)
    # G + R = (a + R) I: the first projected gradient step is the solution
    c = sim.Constraint(soft=True, iterations=3)
    solve = jax.jit(lambda c, fr: solve_contact_impulses(c, G, fr, vf, h, v0))
    r = -4e-4
    lam = solve(c, frame(r))
    np.testing.assert_allclose(lam[0], want(r, (0.02, 1.0), _soft.DEFAULT_SOLIMP, a), rtol=1e-10)
    imp = (0.8, 0.99, 0.002, 0.3, 3.0)
    fr = frame(r, solref=jnp.asarray([[0.01, 0.7]]), solimp=jnp.asarray([imp]))
    fr = ContactFrames(*[getattr(fr, f) for f in ("distance", "normal", "point", "velocity")],
                       fr.friction, (0,), (-1,), solref=fr.solref, solimp=fr.solimp,
                       invweight=jnp.asarray([0.5]))  # fmt: skip
    lam = solve(c, fr)
    np.testing.assert_allclose(lam[0], want(r, (0.01, 0.7), imp, 0.5), rtol=1e-10)
    over = sim.Constraint(soft=True, iterations=3, solref=(-3000.0, -40.0), solimp=imp)
    lam = solve(over, fr)
    k, b = 3000.0 / 0.99**2, 40.0 / 0.99
    d = float(_soft.impedance(jnp.asarray(imp), r))
    aref = np.array([-b * v0[0, 0] - k * d * r, -b * v0[0, 1], -b * v0[0, 2]])
    np.testing.assert_allclose(
        lam[0], h * (aref - (vf[0] - v0[0]) / h) / (a + (1 - d) / d * 0.5), rtol=1e-10
    )
    np.testing.assert_array_equal(solve(c, frame(1e-3)), 0.0)


def test_soft_parameters_checked():
    """``solref`` / ``solimp`` of the wrong size, non-finite, or given to hard contact: a
    ``ValueError`` naming the argument."""
    with pytest.raises(ValueError, match="Constraint: solref must be None or 2 finite"):
        sim.Constraint(soft=True, solref=(0.02,))
    with pytest.raises(ValueError, match="Constraint: solimp must be None or 5 finite"):
        sim.Constraint(soft=True, solimp=(0.9, 0.95, np.nan, 0.5, 2))
    with pytest.raises(ValueError, match="solref is a parameter of soft=True contact"):
        sim.Constraint(solref=(0.02, 1.0))
    with pytest.raises(ValueError, match="impratio"):
        sim.Constraint(soft=True, impratio=0.0)
    with pytest.raises(ValueError, match="Constraint: cone must be None, 'elliptic' or 'pyr"):
        sim.Constraint(soft=True, cone="pyramid")
    with pytest.raises(ValueError, match="cone='pyramidal' is a parameter of soft=True"):
        sim.Constraint(cone="pyramidal")
    with pytest.raises(ValueError, match="Constraint: solreffriction must be None or 2 fin"):
        sim.Constraint(soft=True, solreffriction=(0.02, 1.0, 0.0))
    with pytest.raises(ValueError, match="solreffriction must be .* not mixed"):
        sim.Constraint(soft=True, solreffriction=(0.02, -1.0))
    with pytest.raises(ValueError, match="solreffriction is a parameter of soft=True contact"):
        sim.Constraint(solreffriction=(0.02, 1.0))


# a box pushed to slide on the floor: MuJoCo's solreffriction exists on explicit pairs only
# (the pair: MuJoCo's default solref, solimp and the geoms' larger friction, 1, as the
# dynamic pair of SLIDE_MJCF)
SLIDE_MJCF = """<mujoco><option cone="elliptic" tolerance="1e-14" iterations="1000"/>
<worldbody><geom name="floor" type="plane" size="5 5 .1" friction="0.5"/>
<body name="slider" pos="0 0 0.0498"><freejoint/>
  <geom name="slider" type="box" size="0.1 0.1 0.05" mass="1"{off}/></body>
</worldbody>{pair}</mujoco>"""
SLIDE_PUSH = np.r_[1.0, 0.3, 0.0, 0.0, 0.0, 0.0]


def test_solreffriction_is_mujocos():
    """``Constraint(soft=True, solreffriction=...)`` (elliptic cones) against MuJoCo C's
    ``<contact><pair solreffriction>`` of a box sliding at 1 m/s to a stop, 0.2 s, one
    compiled rollout: ``(0.1, 1)`` and the direct ``(-800, -30)`` follow MuJoCo's pair to
    1e-10 m and 1e-10 in orientation (seen 3e-11), and ``(0, 0)`` (MuJoCo's default:
    ``solref``'s) MuJoCo's dynamic contact; the friction rows' reference moves the box by
    millimetres."""
    steps = 100
    loaded = jaxdyn.load_mjcf(SLIDE_MJCF.format(off="", pair=""))
    # 600 steps: at 200 the spinning box's yaw is 1.2e-10 off MuJoCo's (converged: 1e-12)
    cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=600))
    conv, q0, model = loaded.converter(), np.asarray(loaded.q0), loaded.model
    v0 = jnp.asarray(conv.v_from_mujoco(q0, SLIDE_PUSH))
    run = jax.jit(
        lambda c: (
            sim.rollout(
                model,
                sim.State(q0, v0),
                jnp.zeros((steps, 0)),
                cfg=dataclasses.replace(cfg, contact=c),
            ).q
        )
    )
    refs = []
    for srf in ((0.1, 1.0), (-800.0, -30.0), (0.0, 0.0)):
        pair = f'<contact><pair geom1="floor" geom2="slider" solreffriction="{srf[0]} {srf[1]}"/>'
        xml = SLIDE_MJCF.format(off=' contype="0" conaffinity="0"', pair=pair + "</contact>")
        if srf == (0.0, 0.0):
            xml = SLIDE_MJCF.format(off="", pair="")
        (ref,) = mujoco_rollout(mujoco.MjModel.from_xml_string(xml), steps, qvel=SLIDE_PUSH)
        mine = np.array(
            [
                conv.q_to_mujoco(np.asarray(q))
                for q in run(dataclasses.replace(cfg.contact, solreffriction=jnp.asarray(srf)))
            ]
        )
        np.testing.assert_allclose(mine[:, :3], ref[:, :3], atol=1e-10)
        assert _quat_gap(mine[:, 3:7], ref[:, 3:7]) < 1e-10
        refs.append(ref)
    assert np.abs(refs[0][-1, :2] - refs[2][-1, :2]).max() > 1e-3  # it matters
    assert np.abs(refs[1][-1, :2] - refs[2][-1, :2]).max() > 1e-3


def test_soft_contact_reads_the_files_cone():
    """``sim_config(Constraint(soft=True))`` takes the file's ``<option cone>`` (MuJoCo's
    default, pyramidal, where the file gives none); a cone given to ``Constraint`` is kept; with
    pyramidal cones a capsule on the floor is honoured (its contacts carry the capsule's axis,
    ``ContactSet.axis``: ``test_pyramidal_capsule_on_plane_is_mujocos``), nothing refused;
    ``ignore=("cone",)`` is still accepted."""
    for cone, want in (('cone="elliptic" ', "elliptic"), ("", "pyramidal")):
        loaded = jaxdyn.load_mjcf(SOFT_MJCF.replace('cone="{cone}" ', cone))
        assert loaded.sim_config(sim.Constraint(soft=True)).contact.cone == want
        for given in ("elliptic", "pyramidal"):
            c = sim.Constraint(soft=True, cone=given)
            assert loaded.sim_config(c).contact.cone == given
    hard = loaded.sim_config(sim.Constraint(soft=False), ignore=("solimp", "solref"))
    assert hard.contact.cone is None  # hard contact: no cone
    xml = SOFT_MJCF.format(cone="pyramidal").replace(
        "</worldbody>",
        '<body name="rod" pos="0 -0.6 0.2"><freejoint/><geom name="rod" type="capsule" '
        'size="0.03 0.1" contype="1" conaffinity="0"/></body></worldbody>',
    )
    loaded = jaxdyn.load_mjcf(xml)
    cfg = loaded.sim_config(sim.Constraint(soft=True))
    assert cfg.contact.cone == "pyramidal" and cfg.contacts.axis is not None
    rod = [i for i, n in enumerate(cfg.contacts.names) if n.startswith("rod")]
    np.testing.assert_allclose(np.abs(np.asarray(cfg.contacts.axis)[rod]), [[0, 0, 1]] * 2)
    assert not np.asarray(cfg.contacts.axis)[
        [i for i in range(cfg.contacts.n) if i not in rod]
    ].any()
    assert loaded.sim_config(sim.Constraint(soft=True), ignore=("cone",)).contact.cone == (
        "pyramidal"
    )
    loaded.sim_config(sim.Constraint(soft=True, cone="elliptic"))
    loaded.sim_config(sim.Constraint(soft=False), ignore=("solimp", "solref"))  # hard: no pyramid


def test_soft_contact_honours_solimp_and_gap():
    """``sim_config`` with hard contact refuses a geom's ``solimp`` and direct ``solref`` by
    name (``test_unhonoured_contact_parameters_refused_by_sim_config``); with
    ``Constraint(soft=True)`` it honours them (the contacts carry them, mixed with the floor's
    as MuJoCo's contacts do) and a touching geom's ``gap`` (from MuJoCo 3.9.0 it carries no
    force: ``test_soft_contact_follows_mujoco``; ``ignore=("gap",)`` still accepted); the
    file's ``impratio`` and ``refsafe`` reach the contact model."""
    xml = SOFT_MJCF.format(cone="elliptic")
    loaded = jaxdyn.load_mjcf(xml)
    with pytest.raises(ValueError, match=r'\[solimp\] <geom name="box"'):
        loaded.sim_config(sim.Constraint(soft=False))
    cfg = loaded.sim_config(sim.Constraint(soft=True))
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    d.qpos[[2, 9, 16, 23]] -= [0.2, 0.02, 0.001, 0.0]  # every body into the floor
    mujoco.mj_forward(m, d)
    names = list(cfg.contacts.names)
    for c in d.contact[: d.ncon]:
        g = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, max(c.geom1, c.geom2))
        if g == "ball2":  # a geom pair
            k = list(loaded.geoms.names).index(g)
            sr = np.asarray(cfg.geoms.solref)[k]
            assert np.asarray(cfg.geoms.invweight)[k] == m.body_invweight0[3, 0]
            continue
        i = next(i for i, n in enumerate(names) if n == g or n.startswith(g + "["))
        np.testing.assert_allclose(np.asarray(cfg.contacts.solref)[i], c.solref, rtol=1e-15)
        np.testing.assert_allclose(np.asarray(cfg.contacts.solimp)[i], c.solimp, rtol=1e-15)
        sr = c.solref
    assert d.ncon >= 6 and sr is not None
    gap = xml.replace('name="ball" contype', 'name="ball" gap="0.01" contype')
    gap = gap.replace('cone="elliptic"', 'cone="elliptic" impratio="2"')
    gap = gap.replace("<option ", '<option><flag refsafe="disable"/></option><option ')
    loaded = jaxdyn.load_mjcf(gap)
    cfg = loaded.sim_config(sim.Constraint(soft=True))
    assert "ball" in cfg.contacts.names[0]  # a gap alone keeps a primitive a primitive
    again = loaded.sim_config(sim.Constraint(soft=True), ignore=("gap",))
    assert eqx.tree_equal(again.contacts, cfg.contacts)
    assert float(cfg.contact.impratio) == 2.0 and cfg.contact.refsafe is False
    assert (
        loaded.sim_config(sim.Constraint(soft=False), ignore=("solimp", "solref")).contact.soft
        is False
    )


def test_gap_before_mujoco_3_9_is_subtracted_from_the_margin(soft_run, monkeypatch):
    """Before MuJoCo 3.9.0 a contact acted from ``dist < margin - gap`` (detected from ``dist <
    margin``; MuJoCo's changelog, 3.9.0 breaking changes): a file whose geoms have ``margin -
    gap`` of the margin scene's ``margin`` (the ball's 0.004, the box's and the floor's 0)
    loads, under a MuJoCo reporting 3.8.1, to the very configuration that
    ``test_soft_contact_follows_mujoco`` checks against MuJoCo C (and under this MuJoCo, to
    another: its margins are read as they stand)."""
    _, cfg, _, _ = soft_run
    old = (
        MARGIN_MJCF.format(cone="elliptic")
        .replace('margin="0.004" gap="0.01"', 'margin="0.014" gap="0.01"')
        .replace('gap="0.02"', 'margin="0.02" gap="0.02"')
        .replace('gap="0.005"', 'margin="0.005" gap="0.005"')
    )
    soft = sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=200)
    new = jaxdyn.load_mjcf(old).sim_config(soft)
    assert "floor" in new.geoms.names  # the floor's margin: every body a geom pair
    monkeypatch.setattr(mujoco, "__version__", "3.8.1")
    was = jaxdyn.load_mjcf(old).sim_config(soft)
    assert eqx.tree_equal(was.geoms, cfg.geoms) and eqx.tree_equal(was.contacts, cfg.contacts)
    np.testing.assert_array_equal(np.asarray(was.geoms.margin), np.asarray(cfg.geoms.margin))


#: a 0.1 m ball of 2 kg resting on a plane (0.2 mm into it), 2 ms steps: the derivative tests'
#: scene (here and in test_soft_newton)
RESTING_BALL_MJCF = """<mujoco><option timestep="0.002"/><worldbody>
  <geom name="floor" type="plane" size="5 5 .1"/>
  <body name="a" pos="0 0 0.0998"><freejoint/><geom name="a" size="0.1" mass="2"/></body>
</worldbody></mujoco>"""


@pytest.mark.slow  # 20 s of compile; default: test_soft_contact_follows_mujoco (the same step)
def test_soft_contact_derivative_matches_finite_differences():
    """Forward-mode derivative of a resting ball's height after 50 soft-contact steps (the
    implicit differentiation of the cone problem, :func:`jaxdyn.sim.contact.solve_cone_
    complementarity`) in its initial height and in the contacts' ``timeconst``: central
    finite differences agree to 1e-5 (relative; seen 1.8e-6 in the height, whose derivative
    0.0049 the contact has nearly forgotten, and 1.3e-9 in the timeconst)."""
    loaded = jaxdyn.load_mjcf(RESTING_BALL_MJCF)
    model = loaded.model
    cfg = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=200))

    @jax.jit
    def z_end(z0, tc):
        c = sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=200, solref=(tc, 1.0))
        q = jnp.asarray(loaded.q0).at[2].set(z0)
        s = sim.State(q, jnp.zeros(model.nv))
        tr = sim.rollout(model, s, jnp.zeros((50, 0)), cfg=dataclasses.replace(cfg, contact=c))
        return tr.q[-1, 2]

    z0, tc = 0.0998, 0.02
    _, dz = jax.jvp(z_end, (z0, tc), (1.0, 0.0))
    _, dtc = jax.jvp(z_end, (z0, tc), (0.0, 1.0))
    eps = 1e-6
    fz = (z_end(z0 + eps, tc) - z_end(z0 - eps, tc)) / (2 * eps)
    ft = (z_end(z0, tc + eps) - z_end(z0, tc - eps)) / (2 * eps)
    np.testing.assert_allclose(float(dz), float(fz), rtol=1e-5)
    np.testing.assert_allclose(float(dtc), float(ft), rtol=1e-5)
    assert abs(float(dtc)) > 1e-4  # the timeconst moves the height


def test_hard_contact_refuses_direct_solref():
    """A configuration built for soft contact (its contacts carry the slider's direct
    ``solref = (-20000, -150)``) with the hard ``Constraint`` or ``Compliant`` swapped in is
    refused naming ``solref`` and ``soft=True`` (they read ``solref`` as ``(timeconst,
    dampratio)``: a negative Baumgarte fraction / stiffness, silently): at construction
    (``dataclasses.replace``), at the step when the constructor is bypassed (``eqx.tree_at``),
    and by a value check when ``solref`` is traced. A contact model that reads no ``solref``
    (``baumgarte`` given) takes the configuration once the contacts' ``solimp`` (an impedance,
    which it has not either: refused by name) is left out."""
    from jaxdyn.sim import _params

    loaded = jaxdyn.load_mjcf(SOFT_MJCF.format(cone="elliptic"))
    cfg = loaded.sim_config(sim.Constraint(soft=True))
    assert np.any(np.asarray(cfg.contacts.solref) < 0)
    match = r"cfg.contacts.solref has an entry <= 0 .*use jaxdyn.sim.Constraint\(soft=True\)"
    for contact in (sim.Constraint(soft=False), sim.Compliant()):
        with pytest.raises(ValueError, match="SimConfig: " + match):
            dataclasses.replace(cfg, contact=contact)
    # a contact model that reads no solref: still no impedance (the box's solimp, refused by
    # name); without the file's solimp it takes the configuration
    for contact in (
        sim.Constraint(soft=False, baumgarte=0.2),
        sim.Compliant(timeconst=0.02, dampratio=1.0),
    ):
        with pytest.raises(ValueError, match=r"SimConfig: box\[0\].*solimp off MuJoCo's"):
            dataclasses.replace(cfg, contact=contact)
        plain = dataclasses.replace(cfg.contacts, solimp=None)
        geoms = cfg.geoms
        if geoms is not None:
            geoms = dataclasses.replace(geoms, solimp=None, pair_solimp=None)
        dataclasses.replace(cfg, contact=contact, contacts=plain, geoms=geoms)
    hard = eqx.tree_at(lambda c: c.contact, cfg, sim.Constraint())
    model = loaded.model
    state = sim.State(jnp.asarray(loaded.q0), jnp.zeros(model.nv))
    with pytest.raises(ValueError, match="step: " + match):
        sim.step(model, state, jnp.zeros(0), cfg=hard)

    @jaxdyn.jit
    def checked(solref):
        traced = eqx.tree_at(lambda c: c.contacts.solref, hard, solref)
        return _params.check_solref("step", traced, jnp.zeros(()))

    with pytest.raises(jaxdyn.CheckError, match="step: " + match):
        checked(hard.contacts.solref)
    checked(jnp.abs(hard.contacts.solref))  # standard (timeconst, dampratio): passes


@pytest.mark.slow  # the humanoid's step compiles thrice (about a minute)
def test_humanoid_default_soft_solve_is_converged():
    """Issue 56's equal-fidelity check: dm_control's self-colliding humanoid (161 geom pairs,
    its file's ``solref`` / ``solimp`` and pyramidal cones: the problem MJX's Newton solver
    solves) with MuJoCo's soft contact ``Constraint(soft=True, relaxed=True)``, capped at 80
    slots: after 100 steps of a limp fall from ``qpos0`` (its limbs touching each other), one
    step of the dual solve (``solver="dual"``) at its 100 iterations, cold started, is within
    1e-2 of ``h g`` (the velocity gravity adds in a step) of the same problem's converged
    solve (10000 iterations, every slot); measured 6.5e-4 in float64 (the benchmark's
    float32: 7e-4). The default solve there (``solver=None``: MuJoCo's primal Newton steps,
    :func:`jaxdyn.sim.contact.uses_primal_newton`) is that converged solve to 1e-9 of ``h g``
    (seen 9e-13).
    The hard ``Constraint()`` misses its own converged solve by about 3 ``h g`` on such states
    (docs/simulation.md)."""
    from jaxdyn.envs.dm_control_suite import XML_DIR
    from jaxdyn.sim.contact import uses_primal_newton

    loaded = jaxdyn.load_mjcf(f"{XML_DIR}/humanoid.xml")
    model = loaded.model
    m = mujoco.MjModel.from_xml_path(f"{XML_DIR}/humanoid.xml")
    conv = loaded.converter()
    rng = np.random.default_rng(0)
    hinge = [
        m.jnt_qposadr[j] for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE
    ]
    qpos = np.repeat(m.qpos0[None], 4, 0)
    qpos[:, hinge] += rng.uniform(-0.01, 0.01, (4, len(hinge)))
    q = jnp.asarray(np.stack([np.asarray(conv.q_from_mujoco(x)) for x in qpos]), jnp.float64)
    s = sim.State(q, jnp.zeros((4, model.nv), jnp.float64), jnp.zeros(4, jnp.float64))
    contact = sim.Constraint(soft=True, relaxed=True, solver="dual", max_contacts=80)
    cfg = loaded.sim_config(contact)
    default = loaded.sim_config(sim.Constraint(soft=True, relaxed=True, max_contacts=80))
    ref = loaded.sim_config(
        sim.Constraint(soft=True, relaxed=True, solver="dual", iterations=10000)
    )
    assert isinstance(cfg.contact, sim.Constraint) and cfg.contact.cone == "pyramidal"
    assert uses_primal_newton(default.contact) and not uses_primal_newton(cfg.contact)
    assert cfg.geoms is not None
    u = jnp.zeros(m.nu, jnp.float64)

    def fall_and_step(s):
        s = jax.lax.scan(lambda s, _: (sim.step(model, s, u, cfg), None), s, None, length=100)[0]
        s1, info = sim.step_info(model, s, u, cfg)
        r1, _ = sim.step_info(model, s, u, ref)
        n1 = sim.step(model, s, u, default)
        touching = sim.contact_counts(model, s, cfg)[1]
        dn = jnp.max(jnp.abs(n1.v - r1.v))
        return jnp.max(jnp.abs(s1.v - r1.v)), info["contact_residual"], touching, s1.v, dn

    dv, res, touching, v, dn = jax.jit(jax.vmap(fall_and_step))(s)
    hg = float(m.opt.timestep) * 9.81
    assert np.all(np.isfinite(np.asarray(v)))
    assert np.all(np.asarray(touching) >= 4), touching  # limbs touching each other
    assert float(jnp.max(dn)) < 1e-9 * hg, np.asarray(dn) / hg
    assert float(jnp.max(dv)) < 1e-2 * hg, (np.asarray(dv) / hg, np.asarray(res))

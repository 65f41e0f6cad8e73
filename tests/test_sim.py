"""jaxdyn.sim: integrators, contact models, rollouts and their derivatives.

Compile time dominates: every test reuses a few jitted rollouts built once per module.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import robots, sim

import oracle

FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")

PENDULUM = """<robot name="double_pendulum">
  <link name="base"/>
  <link name="l1"><inertial><origin xyz="0 0 -0.5"/><mass value="1.0"/>
    <inertia ixx="0.09" iyy="0.08" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="l2"><inertial><origin xyz="0 0 -0.4"/><mass value="0.7"/>
    <inertia ixx="0.05" iyy="0.04" izz="0.02" ixy="0.001" ixz="0" iyz="0"/></inertial></link>
  <joint name="j1" type="continuous"><parent link="base"/><child link="l1"/>
    <axis xyz="0 1 0"/></joint>
  <joint name="j2" type="continuous"><parent link="l1"/><child link="l2"/>
    <origin xyz="0 0 -1"/><axis xyz="0.3 1 0"/></joint>
</robot>"""

BOX = """<robot name="box"><link name="box"><inertial><mass value="2.0"/>
  <inertia ixx="0.0417" iyy="0.0667" izz="0.0833" ixy="0" ixz="0" iyz="0"/></inertial></link>
</robot>"""


def energy(model, q, v):
    return jaxdyn.kinetic_energy(model, q, v) + jaxdyn.potential_energy(model, q)


_STEPPERS: dict = {}


def stepper(model):
    """One jitted step per model; the configuration is an argument (its ``dt`` is traced, so
    configurations differing only in numbers share the compiled program)."""
    key = id(model)
    if key not in _STEPPERS:
        _STEPPERS[key] = (model, jax.jit(lambda s, u, cfg: sim.step(model, s, u, cfg)))
    return _STEPPERS[key][1]


_ADVANCE: dict = {}


def advance(model, s, cfg, n, u=None):
    """The state after ``n`` steps in one compiled loop per model (``n`` traced: one program for
    every count and ``dt``, one dispatch instead of ``n``)."""
    u = jnp.zeros(cfg.actuator.size(model)) if u is None else u
    key = id(model)
    if key not in _ADVANCE:

        def run(s, u, cfg, n):
            return jax.lax.fori_loop(0, n, lambda _, s: sim.step(model, s, u, cfg), s)

        _ADVANCE[key] = (model, jax.jit(run))
    return _ADVANCE[key][1](s, u, cfg, jnp.asarray(n))


@pytest.fixture(scope="module")
def pendulum():
    return jaxdyn.load_urdf(PENDULUM)


@pytest.fixture(scope="module")
def box():
    return jaxdyn.load_urdf(BOX, floating_base=True)


@pytest.fixture(scope="module")
def free_box(box):
    return eqx.tree_at(lambda m: m.gravity, box, jnp.zeros(3))


@pytest.fixture(scope="module")
def quad():
    m = robots.load("quad12")
    cs = sim.contact_set(m, [sim.Sphere(f, 0.02) for f in FEET])
    return m, cs


RK4 = sim.SimConfig(dt=2e-3, integrator="rk4", limits=None)
RK4_FREE = sim.SimConfig(dt=2e-3, integrator="rk4", actuator=sim.Torque(dofs=()), limits=None)


# ------------------------------------------------------------------------------ integrators


def test_rk4_energy_drift_conservative(pendulum, free_box):
    """RK4 (Munthe-Kaas on the free joint) conserves energy to 1e-6 relative over 1000 steps:
    a double pendulum and a tumbling free box (no gravity: torque-free rotation)."""

    def every_50(model, s, cfg):  # the initial state, then those after 50, 100, ..., 1000 steps
        traj = [s] + [s := advance(model, s, cfg, 50) for _ in range(20)]
        return np.stack([s.q for s in traj]), np.stack([s.v for s in traj])

    # each quantity below is evaluated on the initial state within the same jitted vmap as on
    # the trajectory (row 0; an eager call would compile one more program), compared in numpy
    # (eager jnp operations compile a small program each)
    s0 = sim.State(jnp.array([1.2, -0.7]), jnp.array([0.5, -1.0]))
    Q, V = every_50(pendulum, s0, RK4)
    E = np.asarray(jax.jit(jax.vmap(lambda q, v: energy(pendulum, q, v)))(Q, V))
    assert np.max(np.abs(E[1:] - E[0])) / (abs(E[0]) + 1.0) < 1e-6

    bx = free_box
    qb = jaxdyn.integrate(bx, jaxdyn.neutral_configuration(bx), jnp.array([0.3, 0.2, 0.1, 0, 0, 0]))
    sb = sim.State(qb, jnp.array([3.0, 0.2, 1.0, 0.5, -0.3, 0.2]))
    Q, V = every_50(bx, sb, RK4_FREE)
    Eb = np.asarray(jax.jit(jax.vmap(lambda q, v: jaxdyn.kinetic_energy(bx, q, v)))(Q, V))
    assert Eb[0] > 0.1  # tumbling (0.61 J)
    assert np.max(np.abs(Eb[1:] - Eb[0])) / Eb[0] < 1e-6

    # the angular momentum in the world is conserved too (a check of the free-joint chart)
    def world_momentum(q, v):
        R = jaxdyn.frame_placement(bx, q, "box").R
        return R @ (bx.inertia[0] @ v[:3])

    L = np.asarray(jax.jit(jax.vmap(world_momentum))(Q, V))
    assert np.max(np.abs(L[1:] - L[0])) < 1e-6
    assert np.linalg.norm(L[0]) > 0.1  # a momentum that can change


def test_rk4_fourth_order_on_free_body(free_box):
    """Halving the step divides the RK4 error by ~16 on the free body (free-joint chart)."""
    bx = free_box
    s0 = sim.State(jaxdyn.neutral_configuration(bx), jnp.array([2.0, 0.5, 1.0, 0.3, 0.1, -0.2]))

    def run(n):
        cfg = eqx.tree_at(lambda c: c.dt, RK4_FREE, 0.4 / n)
        s = advance(bx, s0, cfg, n)  # test_rk4_energy_drift_conservative's program
        return s.q, s.v

    qr, vr = run(400)
    errs = []
    for n in (10, 20):
        q, v = run(n)
        errs.append(float(jnp.linalg.norm(jaxdyn.difference(bx, qr, q)) + jnp.linalg.norm(v - vr)))
    ratio = errs[0] / errs[1]
    assert 12 < ratio < 20, ratio


SPINNING_BOX = """<mujoco><option timestep="0.002" gravity="0 0 0"/><worldbody>
  <body name="box" pos="0.1 0.2 1" quat="0.8 0.2 0.4 0.3"><freejoint/>
    <geom type="box" size="0.2 0.15 0.1" mass="2"/></body>
</worldbody></mujoco>"""


def _mujoco_spinning_box(v_world, w_body, n, integrator="Euler"):
    """MuJoCo C's ``integrator`` on ``SPINNING_BOX`` from ``qvel = [v_world; w_body]``: ``qpos``
    per step."""
    mujoco = pytest.importorskip("mujoco")
    xml = SPINNING_BOX.replace("<option ", f'<option integrator="{integrator}" ')
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    d.qvel[:] = np.r_[v_world, w_body]
    out = []
    for _ in range(n):
        mujoco.mj_step(m, d)
        out.append(d.qpos.copy())
    return np.asarray(out)


def test_spinning_free_body_keeps_its_velocity():
    """A free body spinning fast with no force on it keeps its speed under the semi-implicit
    integrators. A free joint's linear velocity is in body axes, and its derivative holds the
    transport term ``-w x v``: stepped explicitly, it multiplied the velocity across ``w`` by
    ``sqrt(1 + (h |w|)^2)`` per step (here, spun at 84 rad/s with 0.6 m/s across the spin at
    2 ms: 630 m/s after 1 s). The step now advances the parent-axes
    linear velocity, as MuJoCo does. Spun about a principal axis (no gyroscopic torque), the
    box keeps ``|v|``, ``|w|`` and its energy and moves on its straight line, to rounding
    (1e-12); spun about a general axis, its positions and orientations follow MuJoCo C's step
    for step over 1 s (500 steps) to 1e-10: ``Euler``'s with ``"euler"``, implicitfast's with
    ``"implicit"`` (the gyroscopic torque explicit in the first two, linearly implicit in the
    others). One compile: both integrators, both initial states."""
    loaded = jaxdyn.load_mjcf(SPINNING_BOX)
    model, q0 = loaded.model, jnp.asarray(loaded.q0)
    R0 = np.asarray(jaxdyn.frame_placement(model, q0, "box").R)
    v_lin = np.array([0.6, 0.0, 0.8])
    w_general, v_world = np.array([50.0, 40.0, 50.0]), np.array([1.0, -0.5, 0.3])
    V0 = jnp.asarray(np.stack([np.r_[0.0, 0.0, 84.0, v_lin], np.r_[w_general, R0.T @ v_world]]))
    T = 500
    u = jnp.zeros((T, 0))

    def run(integrator):
        cfg = sim.SimConfig(
            dt=2e-3, integrator=integrator, actuator=sim.Torque(dofs=()), limits=None
        )
        return jax.vmap(lambda v: sim.rollout(model, sim.State(q0, v), u, cfg=cfg))(V0)

    trajs = jax.jit(lambda: (run("euler"), run("implicit")))()
    ke = jax.vmap(lambda q, v: jaxdyn.kinetic_energy(model, q, v))
    t = 2e-3 * np.arange(1, T + 1)
    for tr in trajs:  # principal-axis spin: |v|, |w|, energy and the straight line
        q, v = np.asarray(tr.q), np.asarray(tr.v)
        np.testing.assert_allclose(np.linalg.norm(v[0, :, 3:], axis=1), 1.0, rtol=1e-12)
        np.testing.assert_allclose(np.linalg.norm(v[0, :, :3], axis=1), 84.0, rtol=1e-12)
        E = np.asarray(ke(tr.q[0], tr.v[0]))
        np.testing.assert_allclose(E, float(ke(q0[None], V0[:1])[0]), rtol=1e-12)
        line = np.asarray(q0[:3]) + t[:, None] * (R0 @ v_lin)
        np.testing.assert_allclose(q[0, :, :3], line, rtol=0, atol=1e-12)
    for tr, integrator in zip(trajs, ("Euler", "implicitfast"), strict=True):
        # general spin: MuJoCo C's, step for step (quaternions up to sign)
        want = _mujoco_spinning_box(v_world, w_general, T, integrator)
        q = np.asarray(tr.q)
        np.testing.assert_allclose(q[1, :, :3], want[:, :3], rtol=0, atol=1e-10)
        sign = np.sign(np.sum(q[1, :, 3:] * want[:, 3:], axis=1))[:, None]
        np.testing.assert_allclose(sign * q[1, :, 3:], want[:, 3:], rtol=0, atol=1e-10)


# ------------------------------------------------------------------------------ contact
@functools.cache
def _settle(kind):
    m, cs = robots.load("quad12"), None
    cs = sim.contact_set(m, [sim.Sphere(f, 0.02) for f in FEET])
    contact = sim.Compliant() if kind == "compliant" else sim.Constraint(iterations=200)
    # the default integrator ("implicit"): the README's setup
    cfg = sim.SimConfig(dt=2e-3, contact=contact, contacts=cs, actuator=sim.PD(20.0, 0.5))
    assert cfg.integrator == "implicit"
    q0 = jaxdyn.neutral_configuration(m).at[2].set(0.45)
    s0 = sim.State(q0, jnp.zeros(m.nv))
    ref = q0[7:]
    traj = jax.jit(lambda s: sim.rollout(m, s, policy=lambda st: ref, n_steps=600, cfg=cfg))(s0)
    final = jax.tree_util.tree_map(lambda x: x[-1], traj)
    f = jax.jit(lambda s: sim.contact_forces(m, s, ref, cfg))(final)
    return m, cfg, traj, f


@pytest.mark.parametrize("kind", ["compliant", "constraint"])
def test_quadruped_drops_and_rests(kind):
    """quad12 dropped from 0.45 m comes to rest on its feet without sinking through the ground,
    speed < 1e-2, total normal force = weight within 2 %.

    Penetration bounds: compliant contact (k = m g / 5 mm per contact) at most 15 mm during the
    landing (1.3 m/s impact) and 2 mm at rest; constraint contact at most 1 mm, 0.1 mm at rest.
    """
    m, cfg, traj, f = _settle(kind)
    # one compiled program for both kinds (eagerly, the vmap compiled op by op); the rest in numpy
    weight = float(np.sum(np.asarray(m.mass))) * 9.81
    idx = np.asarray([m.frame_index(n) for n in FEET])
    clearance = np.asarray(_frame_heights(m, traj.q))[:, idx].min(1) - 0.02  # sphere radius
    landing, rest = (15e-3, 2e-3) if kind == "compliant" else (1e-3, 1e-4)
    assert clearance.min() > -landing, clearance.min()
    assert clearance[-100:].min() > -rest, clearance[-100:].min()
    assert clearance[0] > 0.05  # it did fall (the bounds are not vacuous)
    assert np.max(np.abs(np.asarray(traj.v)[-1])) < 1e-2
    assert abs(float(np.sum(np.asarray(f)[:, 2])) - weight) < 0.02 * weight
    assert np.all(np.isfinite(np.asarray(traj.q)))


@eqx.filter_jit
def _frame_heights(m, qs):
    """The heights of ``m``'s frames at each configuration of ``qs``."""
    return jax.vmap(lambda q: jaxdyn.forward_kinematics(m, q).frame.p[:, 2])(qs)


@functools.cache
def _drop(integrator, dt, kd, dtype):
    """quad12 dropped from 0.45 m onto its feet for 600 steps: the default ``Compliant()``,
    ``PD(20, kd)`` holding the posture; the trajectory and the feet's clearance (float64)."""
    m = robots.load("quad12")
    cs = sim.contact_set(m, [sim.Sphere(f, 0.02) for f in FEET])
    cfg = sim.SimConfig(
        dt=dt, integrator=integrator, contact=sim.Compliant(), contacts=cs, actuator=sim.PD(20, kd)
    )
    q0 = jaxdyn.neutral_configuration(m).at[2].set(0.45)
    ref = q0[7:].astype(dtype)
    s0 = sim.State(q0.astype(dtype), jnp.zeros(m.nv, dtype), jnp.zeros((), dtype))
    mt = m.astype(dtype)
    traj = jax.jit(lambda s: sim.rollout(mt, s, policy=lambda st: ref, n_steps=600, cfg=cfg))(s0)
    idx = np.asarray([m.frame_index(n) for n in FEET])
    feet = jax.jit(jax.vmap(lambda q: jaxdyn.forward_kinematics(m, q).frame.p[idx, 2]))
    q = np.asarray(traj.q, np.float64)
    clearance = np.asarray(feet(jnp.asarray(np.nan_to_num(q)))).min(1) - 0.02
    return traj, clearance


@pytest.mark.parametrize(
    "integrator, dt, kd, dtype",
    [
        ("euler", 2e-3, 0.1, jnp.float64),
        ("euler", 2e-3, 0.1, jnp.float32),
        ("implicit", 5e-3, 0.5, jnp.float32),
        ("implicit_damping", 2e-3, 0.1, jnp.float32),
    ],
)
def test_compliant_drop_is_stable(integrator, dt, kd, dtype):
    """The default compliant contact lands and rests quad12 with the explicit integrator at
    2 ms (float64 and float32) and the implicit one at 5 ms: finite, within the penetration
    bounds of test_quadruped_drops_and_rests (15 mm landing, 2 mm over the last 0.2 s), at
    rest (speed < 1e-2).

    Regressions: "euler" was explicit in the contact forces, and the regularised friction's
    viscosity through the light feet (h mu fn G_t / vs = 107 at 2 ms, the limit being 2) made
    it diverge on landing (NaN after about 120 steps, in float64 too). The implicit steps
    linearised the friction with its tangent, explicit along a fast slip: at 5 ms the feet
    locked into a two-step slip cycle and the robot never came to rest (speed about 1).
    ``kd = 0.1`` keeps the PD servo, explicit in "euler", within its own stability limit
    (``kd = 0.5`` is not at 2 ms on these light legs: see jaxdyn.sim.core)."""
    traj, clearance = _drop(integrator, dt, kd, dtype)
    assert traj.q.dtype == dtype
    assert np.all(np.isfinite(np.asarray(traj.q))) and np.all(np.isfinite(np.asarray(traj.v)))
    assert clearance[0] > 0.05  # it did fall (the bounds are not vacuous)
    assert clearance.min() > -15e-3, clearance.min()
    assert clearance[-int(0.2 / dt) :].min() > -2e-3, clearance[-int(0.2 / dt) :].min()
    assert float(jnp.max(jnp.abs(traj.v[-1]))) < 1e-2


@pytest.mark.slow
def test_compliant_humanoid_rests_at_5ms():
    """dm_control's humanoid (self-colliding capsules, light limbs) falling limp at its file's
    5 ms under ``Compliant`` and the file's integrator (MuJoCo's ``Euler``:
    ``"implicit_damping"``) stays finite and lies at rest on the floor after 5 s, its torso at
    MuJoCo C's height (soft contact, same file and start) within 3 cm. Regression:
    ``"implicit_damping"`` took the compliant contact's damping and friction explicitly, past
    their stability limit through the light limbs, and diverged at the first impact (step
    43, max |v| 2400)."""
    mujoco = pytest.importorskip("mujoco")
    from jaxdyn.envs.dm_control_suite import XML_DIR

    path = f"{XML_DIR}/humanoid.xml"
    loaded = jaxdyn.load_mjcf(path)
    cfg = loaded.sim_config(contact=sim.Compliant(), ignore=("solimp",))
    assert cfg.integrator == "implicit_damping" and cfg.dt == 5e-3
    mm = mujoco.MjModel.from_xml_path(path)
    qpos = np.array(mm.qpos0)
    hinge = [mm.jnt_qposadr[j] for j in range(mm.njnt) if mm.jnt_type[j] == 3]
    qpos[hinge] += np.random.default_rng(0).uniform(-0.01, 0.01, len(hinge))
    m = loaded.model
    s0 = sim.State(jnp.asarray(loaded.converter().q_from_mujoco(qpos)), jnp.zeros(m.nv))
    u = jnp.zeros(mm.nu)
    torso = m.body_names.index("torso")

    @jax.jit
    def run(s):
        def body(s, _):
            s = sim.step(m, s, u, cfg)
            return s, jnp.max(jnp.abs(s.v))

        s, speed = jax.lax.scan(body, s, None, length=1000)
        return s, speed, jaxdyn.forward_kinematics(m, s.q).body.p[torso, 2]

    s, speed, z = run(s0)
    d = mujoco.MjData(mm)
    d.qpos[:] = qpos
    for _ in range(1000):
        mujoco.mj_step(mm, d)
    z_mj = float(d.xpos[mm.body("torso").id, 2])
    assert np.all(np.isfinite(np.asarray(speed))) and float(jnp.max(speed)) < 50.0
    assert float(speed[-1]) < 0.1, float(speed[-1])  # at rest (MuJoCo C: 0.05)
    assert 0.05 < z_mj < 0.15  # lying on the floor (the torso capsule's radius 0.07)
    assert abs(float(z) - z_mj) < 0.03, (float(z), z_mj)


def test_contact_models_agree_on_resting_load():
    """Both contact models carry the resting quadruped with the same per-foot normal forces
    (symmetric stance: each foot a quarter of the weight, within 5 %)."""
    m, _, _, fc = _settle("compliant")
    _, _, _, fk = _settle("constraint")
    quarter = float(jnp.sum(m.mass)) * 9.81 / 4
    np.testing.assert_allclose(np.asarray(fc[:, 2]), quarter, rtol=0.05)
    np.testing.assert_allclose(np.asarray(fk[:, 2]), quarter, rtol=0.05)


def test_euler_compliant_contact_matches_implicit_without_joint_damping():
    """With compliant contact, "euler" takes the contact's velocity terms implicitly (one ABA
    on the body inertias plus the contact point inertias, its bias forces corrected for them)
    and the joint forces explicitly: with no joint-space velocity terms (PD kd = 0, joints
    inside their limits) its step equals the implicit integrator's (RNEA, then ABA sweeps) to
    rounding, from the resting quadruped with the base sliding and turning, random joint
    velocities (Coriolis terms) and PD targets away from the posture."""
    m, cfg, traj, _ = _settle("compliant")
    rest = jax.tree_util.tree_map(lambda x: x[-1], traj)
    v = 0.1 * jax.random.normal(jax.random.PRNGKey(4), (m.nv,))
    v = v.at[:6].set(jnp.array([0.2, -0.1, 0.3, 0.3, -0.2, -0.1]))  # base [w; v]: sliding, down
    s = sim.State(rest.q, v)
    ref = rest.q[7:] + 0.1
    kw = dict(dt=2e-3, contact=sim.Compliant(), contacts=cfg.contacts, actuator=sim.PD(20.0, 0.0))
    euler, implicit = (sim.SimConfig(integrator=i, **kw) for i in ("euler", "implicit"))
    one = jax.jit(lambda s, c: sim.step(m, s, ref, c))
    se, si = one(s, euler), one(s, implicit)
    f = jax.jit(lambda s: sim.contact_forces(m, s, ref, euler))(s)
    assert float(jnp.min(f[:, 2])) > 1.0  # every foot loaded (the check is not vacuous)
    assert float(jnp.max(jnp.abs(se.v - s.v))) > 1e-2
    np.testing.assert_allclose(np.asarray(se.v), np.asarray(si.v), atol=1e-12)
    np.testing.assert_allclose(np.asarray(se.q), np.asarray(si.q), atol=1e-12)


def test_compliant_damping_is_the_force_jacobian():
    """``compliant_damping``'s closed form ``-df/du = d_n n n^T + d_t (I - n n^T)`` (what the
    implicit steps add to the inertias) equals the forward-mode Jacobian of
    ``compliant_forces`` in the contact-point velocity with the friction's normal force (>= 0)
    and slip speed and the clamp's factor held (its definition), to rounding: contacts deep,
    shallow (the softplus), separating fast (the clamp) and apart, sliding and sticking. The
    full Jacobian agrees where the clamp is saturated and, separating fast, has the negative
    normal slope that the held factor leaves out (``d_n >= 0``)."""
    rng = np.random.default_rng(7)
    nc = 8
    n = rng.standard_normal((nc, 3))
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    dist = np.array([-5e-3, -1e-4, 0.0, 1e-4, -2e-3, -3e-3, 5e-4, -1e-3])
    vel = rng.standard_normal((nc, 3)) * np.array([1, 1, 1, 1e-3, 1, 1e-4, 1, 1])[:, None]
    vel[5] += 0.2234 * n[5]  # separating: smax0 at raw = -2.4 k eps, its most negative slope
    contact = sim.Compliant(friction=0.8)
    k, c, eps = jnp.full(nc, 2e4), jnp.full(nc, 300.0), contact.smoothing
    C = sim.contact

    def frames(u):
        return C.ContactFrames(jnp.asarray(dist), jnp.asarray(n), jnp.zeros((nc, 3)), u)

    fr = frames(jnp.asarray(vel))
    vn0, vt0 = fr.split_velocity()
    fn0 = jnp.sum(C.compliant_forces(contact, k, c, fr) * fr.normal, -1)
    s0 = jnp.sqrt(jnp.sum(vt0 * vt0, -1) + contact.slip**2)
    pen = eps * jax.nn.softplus(-fr.distance / eps)  # the module docstring's model
    gate0 = jax.nn.sigmoid((k * pen - c * vn0 * pen / (pen + eps)) / (k * eps))

    def jac(**held):
        f = lambda u, i: C.compliant_forces(contact, k, c, frames(u), **held)[i]  # noqa: E731
        return np.stack([-jax.jacfwd(f)(jnp.asarray(vel), i)[:, i] for i in range(nc)])

    K = jac(friction_normal=jnp.maximum(fn0, 0.0), friction_speed=s0, gate=gate0)
    d_n, d_t = (np.asarray(x) for x in C.compliant_damping(contact, k, c, fr))
    nn = n[:, :, None] * n[:, None, :]
    want = d_n[:, None, None] * nn + d_t[:, None, None] * (np.eye(3) - nn)
    np.testing.assert_allclose(K, want, rtol=1e-12, atol=1e-9 * np.abs(K).max())
    assert np.all(d_n >= 0) and np.all(d_t >= 0)
    full = jac(friction_normal=fn0, friction_speed=s0)
    full_n = np.einsum("ci,cij,cj->c", n, full, n)
    sat = np.asarray(gate0) > 1 - 1e-12  # the clamp saturated: pressed in
    assert sat.sum() >= 2
    np.testing.assert_allclose(full_n[sat], d_n[sat], rtol=1e-9)
    assert full_n[5] < -0.05 * float(c[5]) and d_n[5] >= 0  # the clamp's negative slope, held


def test_box_on_plane_rests_on_corners(box):
    """A dropped box (8 corner contacts) rests flat at half its height."""
    cs = sim.contact_set(box, sim.Box("box", (0.4, 0.3, 0.2)))
    cfg = sim.SimConfig(
        dt=2e-3,
        integrator="euler",
        contact=sim.Constraint(iterations=200),
        contacts=cs,
        actuator=sim.Torque(dofs=()),
    )
    q0 = jaxdyn.neutral_configuration(box).at[2].set(0.3)
    traj = jax.jit(lambda s: sim.rollout(box, s, jnp.zeros((400, 0)), cfg=cfg))(
        sim.State(q0, jnp.zeros(6))
    )
    assert float(jnp.min(traj.q[:, 2])) > 0.1 - 1e-3
    assert abs(float(traj.q[-1, 2]) - 0.1) < 2e-3
    assert float(jnp.max(jnp.abs(traj.v[-1]))) < 1e-2


BOX_MJCF = """<mujoco><option timestep="0.002"/><worldbody>
  <geom type="plane" size="5 5 .1" friction="{mu} 0.005 0.0001"/>
  <body name="box" pos="0 0 0.1"><freejoint/>
    <geom type="box" size="0.2 0.15 0.1" mass="2" friction="{mu} 0.005 0.0001"/></body>
</worldbody></mujoco>"""

INCLINE = np.radians(20.0)  # below the friction angle atan(0.5) = 26.6 degrees: the box sticks


@pytest.fixture(scope="module")
def mjcf_box():
    """A free 0.4 x 0.3 x 0.2 m box of 2 kg (its 8 corners), ``load_mjcf`` of the MJCF above,
    and one jitted 400-step rollout with the configuration as an argument."""
    loaded = jaxdyn.load_mjcf(BOX_MJCF.format(mu=0.5))
    model = loaded.model
    cs = sim.contact_set(model, loaded.contacts)
    run = jax.jit(lambda s, cfg: sim.rollout(model, s, jnp.zeros((400, 0)), cfg=cfg))
    return model, cs, run


def _box_case(model, cs, case, contact):
    """The initial state and configuration of a box resting flat on the floor (``"rest"``),
    resting on a 20 degree incline (``"incline"``) or sliding at 2 m/s (``"slide"``)."""
    q0 = jaxdyn.neutral_configuration(model).at[2].set(0.1)
    v0 = jnp.zeros(6)
    terrain = sim.Plane()
    if case == "incline":
        n = np.array([np.sin(INCLINE), 0.0, np.cos(INCLINE)])
        terrain = sim.Plane(n)
        quat = [np.cos(INCLINE / 2), 0.0, np.sin(INCLINE / 2), 0.0]  # body z along n
        q0 = q0.at[:3].set(jnp.asarray(0.1 * n)).at[3:7].set(jnp.asarray(quat))
    if case == "slide":
        v0 = v0.at[3].set(2.0)
    cfg = sim.SimConfig(
        dt=2e-3, contact=contact, contacts=cs, terrain=terrain, actuator=sim.Torque(dofs=())
    )
    return sim.State(q0, v0), cfg


def test_delassus_bound_never_below_the_largest_eigenvalue():
    """The APGD step ``1 / L`` needs ``L >= lambda_max(G)``. For a 2 kg box's 8 corners, box
    flat (an independent ``G = J M^-1 J^T`` from the rigid-body point Jacobians) the largest
    eigenvalue is 12, and power iteration from the all-ones vector, orthogonal to its
    eigenvector, returned 4: the step was 3 times past its stable limit and the resting box
    spun up and blew up. The bound is checked against numpy's eigvalsh there and on random
    PSD matrices, and is within 1.5 times the eigenvalue on the box."""
    inertia = np.diag([0.3**2 + 0.2**2, 0.4**2 + 0.2**2, 0.4**2 + 0.3**2]) * 2.0 / 12
    rows = []
    for c in [
        (sx * 0.2, sy * 0.15, sz * 0.1) for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)
    ]:
        # u = v + w x c = [-[c], 1] [w; v]; rows [n, t1, t2] = [z, x, y]
        P = np.hstack([-np.cross(np.eye(3), np.asarray(c)), np.eye(3)])
        rows += [P[2], P[0], P[1]]
    J = np.asarray(rows)
    M = np.zeros((6, 6))
    M[:3, :3], M[3:, 3:] = inertia, 2.0 * np.eye(3)
    G = J @ np.linalg.solve(M, J.T)
    G = G + np.diag(1e-6 * np.diag(G))  # the solver's regularisation
    lam = np.linalg.eigvalsh(G)[-1]
    L = float(sim.contact.lambda_max_bound(jnp.asarray(G)))
    assert lam <= L <= 1.5 * lam, (lam, L)
    rng = np.random.default_rng(0)
    for n, r in [(24, 6), (30, 30), (12, 2), (9, 9)]:
        A = rng.standard_normal((n, r))
        A = A @ A.T
        if n == 9:
            A = np.kron(np.eye(3), A[:3, :3])  # block diagonal (separate bodies)
        lam = np.linalg.eigvalsh(A)[-1]
        assert lam * (1 - 1e-12) <= float(sim.contact.lambda_max_bound(jnp.asarray(A)))


def _low_rank_problem(nc, r, seed=0):
    """A cone problem ``G = J M^-1 J^T + diag(d)`` of ``3 nc`` rows and rank ``r`` (float64):
    ``(J, V = M^-1 J^T, d, G, u, mu, live)``, about a third of the contacts empty slots (far,
    as :func:`jaxdyn.sim.contact.live_contacts` marks them) and some frictionless."""
    rng = np.random.default_rng(seed)
    n = 3 * nc
    J = rng.standard_normal((n, r))
    W = rng.standard_normal((r, r))
    V = (W @ W.T + np.eye(r)) @ J.T
    G = J @ V
    d = 1e-3 * np.diag(G) + 1e-9
    G = 0.5 * (G + G.T) + np.diag(d)
    live = rng.uniform(size=nc) < 0.7
    u = rng.standard_normal((nc, 3))
    u[~live, 0] = sim.contact.NO_CONTACT / 5e-3
    mu = np.where(rng.uniform(size=nc) < 0.3, 0.0, rng.uniform(0.2, 1.0, nc))
    return J, V, d, G, u.reshape(-1), mu, live


def _check_factored_solve(cases):
    """``Constraint``'s solve through the factors ``G = J (M^-1 J^T) + diag(d)`` (the rows
    outnumber the dofs: a humanoid's 80 capped contacts, 240 rows, 27 dofs): the Frobenius
    term of :func:`lambda_max_bound` from ``r x r`` products equals ``||A^2||_F`` of the dense
    matrix, and the impulses and their implicit derivatives equal the dense solve's, to
    rounding (float64, the suite's), with and without De Saxce's term. The iterations in rows
    ``(3, nc)`` (``_apgd_rows``) take the flat iteration's steps (``_apgd``), also from a
    warm start and with the tolerance's early stop (``Constraint(warm_start=True,
    tolerance=...)``)."""
    C = sim.contact

    @functools.partial(jax.jit, static_argnums=(0, 1))
    def run(coulomb, grad, G, u, mu, live, J, V, d):
        solve = functools.partial(
            sim.solve_cone_complementarity, iterations=60, coulomb=coulomb, live=live
        )

        def loss(u, factors):
            return jnp.sum(jnp.sin(solve(G, u, mu, factors=factors)))

        nc = mu.shape[0]
        m = jnp.repeat(live.astype(G.dtype), 3)
        step = 1.0 / C.lambda_max_bound(G * m[:, None] * m[None, :])
        x0 = 0.5 * solve(G, u, mu).reshape(-1)  # a warm start near the solution
        few = functools.partial(  # 5 steps: the result depends on where they start
            sim.solve_cone_complementarity, iterations=5, coulomb=coulomb, live=live
        )
        warm = functools.partial(few, x0=x0, tolerance=1e-10)
        return (
            (warm(G, u, mu), warm(G, u, mu, factors=(J, V, d)), few(G, u, mu, factors=(J, V, d))),
            solve(G, u, mu),
            solve(G, u, mu, factors=(J, V, d)),
            C._apgd(G, u, mu, step, 60, coulomb, nc, 3, False),
            C._apgd_rows(G, u, mu, step, None, 60, coulomb, nc, 3),
            jax.grad(loss)(u, None) if grad else None,
            jax.grad(loss)(u, (J, V, d)) if grad else None,
            C._trace_fourth_power(J, V, d),
            C.lambda_max_bound(G, (J, V, d)),
            C.lambda_max_bound(G),
        )

    for nc, r, coulomb, grad in cases:
        J, V, d, G, u, mu, live = (jnp.asarray(x) for x in _low_rank_problem(nc, r))
        warm, dense, factored, flat, rows, g_dense, g_fac, fourth, L, L_dense = run(
            coulomb, grad, G, u, mu, live, J, V, d
        )
        np.testing.assert_allclose(warm[1], warm[0], rtol=0, atol=1e-12)
        assert float(jnp.max(jnp.abs(warm[1] - warm[2]))) > 1e-6  # the warm start was used
        A2 = np.asarray(G) @ np.asarray(G)
        np.testing.assert_allclose(float(fourth), np.sum(A2 * A2), rtol=1e-10)
        np.testing.assert_allclose(float(L), float(L_dense), rtol=1e-12)
        assert np.linalg.eigvalsh(np.asarray(G))[-1] * (1 - 1e-12) <= float(L)
        np.testing.assert_allclose(factored, dense, rtol=0, atol=1e-12)
        assert float(jnp.max(dense[:, 0])) > 1e-3  # contacts carry impulses
        assert float(jnp.max(jnp.abs(dense[~np.asarray(live)]))) == 0.0
        np.testing.assert_allclose(rows, flat, rtol=0, atol=1e-13)
        if grad:
            np.testing.assert_allclose(g_fac, g_dense, rtol=1e-9, atol=1e-12)


def test_delassus_bound_and_solve_from_the_factors():
    """:func:`_check_factored_solve`: ranks below and above the rows, Anitescu's relaxation
    and Coulomb's law (the implicit derivatives: ``test_factored_solve_derivatives``)."""
    _check_factored_solve([(12, 5, True, False), (4, 20, False, False)])


@pytest.mark.slow
def test_factored_solve_derivatives():
    """The implicit derivatives of the solve through the factors equal the dense solve's."""
    _check_factored_solve([(12, 5, True, True)])


def test_soft_pyramid_solve_from_the_factors():
    """MuJoCo's pyramidal cones (``Constraint(soft=True, cone="pyramidal")``) solved through
    the factors of the edges' Delassus matrix, ``E G E^T = (E J)(M^-1 J^T E^T)``
    (:func:`jaxdyn.sim.contact.solve_contact_impulses` given ``factors=(J, M^-1 J^T)``, as a
    step of more rows than dofs does): the impulses and their implicit derivatives equal the
    dense solve's to rounding (float64), the contacts touching, apart, and some frictionless."""
    C = sim.contact
    nc, r, h = 10, 6, 5e-3
    J, V, _, _, _, mu, _ = _low_rank_problem(nc, r, seed=3)
    G = J @ V
    G = 0.5 * (G + G.T)
    rng = np.random.default_rng(4)
    n = rng.standard_normal((nc, 3))
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    dist = np.where(rng.uniform(size=nc) < 0.7, -rng.uniform(0, 2e-3, nc), 1e-2)
    vel = rng.standard_normal((nc, 3))
    frames = C.ContactFrames(
        jnp.asarray(dist), jnp.asarray(n), jnp.zeros((nc, 3)), jnp.asarray(vel),
        friction=jnp.asarray(mu),
    )  # fmt: skip
    v_rows = jnp.asarray(rng.standard_normal((nc, 3)))
    contact = sim.Constraint(
        soft=True, relaxed=True, solver="dual", cone="pyramidal", iterations=60
    )

    @jax.jit
    def run(v_free_rows):
        def solve(v_free_rows, factors) -> jax.Array:
            out = C.solve_contact_impulses(
                contact, jnp.asarray(G), frames, v_free_rows, h, v_rows, factors=factors
            )
            assert isinstance(out, jax.Array)  # impulses alone (no residual, no flat)
            return out

        fac = (jnp.asarray(J), jnp.asarray(V))
        loss = lambda x, f: jnp.sum(jnp.sin(solve(x, f)))  # noqa: E731
        return (
            solve(v_free_rows, None),
            solve(v_free_rows, fac),
            jax.grad(loss)(v_free_rows, None),
            jax.grad(loss)(v_free_rows, fac),
        )

    dense, factored, g_dense, g_fac = run(v_rows - h * 9.81 * jnp.asarray(n))
    assert float(jnp.max(dense[:, 0])) > 1e-3  # contacts carry impulses
    assert float(jnp.max(jnp.abs(dense[dist > 0]))) == 0.0  # apart: none
    np.testing.assert_allclose(factored, dense, rtol=0, atol=1e-12)
    np.testing.assert_allclose(g_fac, g_dense, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", ["rest", "incline", "slide"])
def test_constraint_box_on_its_face(mjcf_box, case):
    """The default ``Constraint()`` on a box's 8 corners (4 redundant contacts on its bottom
    face): at rest on the floor it stays at rest (it spun at 6-12 rad/s after 10 ms and was NaN
    after a few hundred steps), on a 20 degree incline below its friction angle it sticks
    (NaN from step 4), and sliding at 2 m/s it stays finite (NaN at step 207)."""
    model, cs, run = mjcf_box
    s0, cfg = _box_case(model, cs, case, sim.Constraint(friction=0.5))
    tr = run(s0, cfg)
    q, v = np.asarray(tr.q), np.asarray(tr.v)
    assert np.all(np.isfinite(q)) and np.all(np.isfinite(v))
    assert np.abs(v[:, :3]).max() < 1e-3  # no spin
    if case in ("rest", "incline"):
        assert np.abs(v).max() < 1e-6, np.abs(v).max()
        assert np.abs(q[-1, :3] - q[0, :3]).max() < 1e-6, q[-1, :3] - q[0, :3]
    else:  # mu g = 4.9 m/s^2 stops it after 0.41 s (200 steps), 0.41 m further
        np.testing.assert_allclose(q[-1, 0], 2.0**2 / (2 * 0.5 * 9.81), rtol=0.02)
        assert np.abs(v[-1]).max() < 1e-6


def _mujoco_slide(cone):
    """MuJoCo C on the same scene (its default Euler, 2 ms): the box settled for 1 s, then
    sliding at 2 m/s for 400 steps; the height above the settled one and x, vx per step."""
    mujoco = pytest.importorskip("mujoco")
    xml = BOX_MJCF.format(mu=0.5).replace("<option ", f'<option cone="{cone}" ')
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    for _ in range(500):
        mujoco.mj_step(m, d)
    z0 = d.qpos[2]
    d.qvel[:] = 0.0
    d.qvel[0] = 2.0
    out = []
    for _ in range(400):
        mujoco.mj_step(m, d)
        out.append((d.qpos[2] - z0, d.qpos[0], d.qvel[0]))
    return np.asarray(out)


def test_constraint_sliding_box_stays_on_the_ground(mjcf_box):
    """A box sliding at 2 m/s on its face (mu = 0.5) stays on the ground and decelerates at
    mu g, as Coulomb's law and MuJoCo C have it. Anitescu's convex relaxation
    (``Constraint(relaxed=True)``) gives a sliding contact the normal velocity ``mu |v_t|``:
    one 2 ms step at 2 m/s left the box rising at 0.796 m/s = mu |v_t| and cut vx to 1.59 m/s
    (the normal impulse that makes the lift carries a friction impulse 40 times mu m g dt), and
    the box hopped 33 mm. De Saxce's correction (the default) removes that velocity.

    Tolerances: the first step's velocity change is mu g dt (0.00981 m/s) to 1e-5 and its
    normal velocity below 1e-6 m/s (the regularisation 1e-6 diag G softens the contact); the
    hop stays below 0.1 mm (MuJoCo's soft contact: 1.5 mm pyramidal, 2.3 mm elliptic); the
    stopping distance is within 1 % of MuJoCo's (0.406 m; continuous Coulomb:
    v^2 / (2 mu g) = 0.408 m) and the box stops after ceil(2 / (mu g dt)) steps
    (MuJoCo's soft contact loses 0.09 m/s in the first step, hops, then slips at about mu g:
    it stops 13 steps later over the same distance)."""
    model, cs, run = mjcf_box
    s0, cfg = _box_case(model, cs, "slide", sim.Constraint(friction=0.5))
    tr = run(s0, cfg)
    z, x, vx, vz = (np.asarray(a) for a in (tr.q[:, 2] - 0.1, tr.q[:, 0], tr.v[:, 3], tr.v[:, 5]))
    dt, mu_g = 2e-3, 0.5 * 9.81
    np.testing.assert_allclose(2.0 - vx[0], mu_g * dt, rtol=1e-5)
    assert abs(vz[0]) < 1e-6, vz[0]
    assert np.abs(z).max() < 1e-4, np.abs(z).max()
    stop = int(np.argmax(np.abs(vx) < 1e-6))
    assert stop > 0
    for cone in ("pyramidal", "elliptic"):
        mj = _mujoco_slide(cone)
        assert mj[:, 0].max() > 1e-3  # MuJoCo lifts a little (the bound above is not loose)
        np.testing.assert_allclose(x[-1], mj[-1, 1], rtol=0.01)
    np.testing.assert_allclose(x[-1], 2.0**2 / (2 * mu_g), rtol=0.01)
    assert stop + 1 == int(np.ceil(2.0 / (mu_g * dt)))  # vx falls mu g dt per step
    # the relaxation, as documented: rises at mu |v_t| in the first step
    s0, cfg = _box_case(model, cs, "slide", sim.Constraint(friction=0.5, relaxed=True))
    tr = run(s0, cfg)
    np.testing.assert_allclose(float(tr.v[0, 5]), 0.5 * float(tr.v[0, 3]), rtol=1e-5)
    assert float(jnp.max(tr.q[:, 2])) - 0.1 > 0.03


# ------------------------------------------------------------------------------ batching


def test_rollout_vmap_equals_python_loop(pendulum):
    cfg = sim.SimConfig(dt=5e-3, integrator="euler", limits=None)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q0 = jax.vmap(lambda k: jax.random.uniform(k, (2,), minval=-1, maxval=1))(keys)
    U = jax.random.normal(keys[0], (3, 40, 2))
    batched = jax.jit(
        jax.vmap(lambda q, u: sim.rollout(pendulum, sim.State(q, jnp.zeros(2)), u, cfg=cfg).q)
    )(q0, U)
    stepj = stepper(pendulum)
    for i in range(3):
        s = sim.State(q0[i], jnp.zeros(2))
        for t in range(40):
            s = stepj(s, U[i, t], cfg)
            np.testing.assert_allclose(np.asarray(s.q), np.asarray(batched[i, t]), atol=1e-12)


SHARDED = """
import re
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import jaxdyn
from jaxdyn import sim
import test_sim as T
assert len(jax.devices()) == 4, jax.devices()
m = jaxdyn.load_urdf(T.PENDULUM)
cfg = sim.SimConfig(dt=5e-3, integrator="euler", limits=None)
q0 = jax.random.uniform(jax.random.PRNGKey(0), (8, 2), minval=-1, maxval=1)
U = jax.random.normal(jax.random.PRNGKey(1), (8, 30, 2))
f = lambda q, u: sim.rollout(m, sim.State(q, jnp.zeros(2)), u, cfg=cfg).q
one = jax.jit(jax.vmap(f))(q0, U)
mesh = sim.batch_mesh()
qs, us = sim.shard_batch((q0, U), mesh)
out = sim.sharded_vmap(f, mesh)(qs, us)
assert len(out.sharding.device_set) == 4, out.sharding
assert {s.data.shape for s in out.addressable_shards} == {(2, 30, 2)}
np.testing.assert_array_equal(np.asarray(out), np.asarray(one))
# each device runs the one-device program on its samples: a batch large enough for the
# batching rule's chunk loop keeps the loop and the stores on every device and gathers
# nothing (the step equals the one-device run bit for bit; crba below to rounding, XLA fusing
# the programs of 256 and 1024 samples differently)
count = lambda g, *a: {k: len(re.findall(k, g.lower(*a).compile().as_text()))
                       for k in ("all-gather", "jaxdyn_store", "while")}
step = lambda q, u: sim.step(m, sim.State(q, jnp.zeros(2)), u, cfg).q
qb = jax.random.uniform(jax.random.PRNGKey(2), (1024, 2), minval=-1, maxval=1)
qbs, ubs = sim.shard_batch((qb, jnp.ones((1024, 2))), mesh)
n = count(sim.sharded_vmap(step, mesh), qbs, ubs)
assert n["all-gather"] == 0 and n["jaxdyn_store"] > 0 and n["while"] > 0, n
# (the control: a plain jit of vmap on arrays sharded over Auto axes gathers the batch)
assert count(jax.jit(jax.vmap(step)), qbs, ubs)["all-gather"] > 0
np.testing.assert_array_equal(
    sim.sharded_vmap(step, mesh)(qbs, ubs), jax.jit(jax.vmap(step))(qb, jnp.ones((1024, 2)))
)
# a failed value check on one device ends the call with its message (with the batch
# partitioned by XLA, the device whose check failed never reached the next collective: the
# process hung 40 s and aborted)
from jaxdyn import robots
quad = robots.load("quad12")
keys = jax.random.split(jax.random.PRNGKey(3), 1024)
q = jax.vmap(lambda k: jaxdyn.random_configuration(quad, k))(keys)
crba = lambda q: jaxdyn.crba(quad, q)
g = sim.sharded_vmap(crba, mesh)
np.testing.assert_allclose(
    g(sim.shard_batch(q, mesh)), jax.jit(jax.vmap(crba))(q), rtol=1e-13, atol=1e-14
)
try:
    g(sim.shard_batch(q.at[700, 3].set(2.0), mesh)).block_until_ready()
    raise AssertionError("no error")
except Exception as e:
    assert "crba: a quaternion in q is not of unit norm" in str(e), e
# explicit sharding (jax.make_mesh's default in recent JAX): a plain jit of vmap of jaxdyn's
# functions splits the batch by itself (jax.vmap alone broadcasts the algorithms' constants
# unsharded, which explicit sharding refuses: ShardingTypeError)
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
emesh = jax.make_mesh((4,), ("b",), axis_types=(AxisType.Explicit,))
use = jax.set_mesh if hasattr(jax, "set_mesh") else jax.sharding.use_mesh
v = jax.random.normal(jax.random.PRNGKey(4), (1024, quad.nv))
for fn, args in (
    (lambda q, v: jaxdyn.aba(quad, q, v, v), (q, v)),
    (lambda q, v: jaxdyn.rnea_derivatives(quad, q, v, v), (q, v)),
    (crba, (q,)),
):
    ref = jax.jit(jax.vmap(fn))(*args)
    with use(emesh):
        h = jax.jit(jax.vmap(fn))
        sharded = [jax.device_put(a, NamedSharding(emesh, P("b"))) for a in args]
        assert count(h, *sharded)["all-gather"] == 0
        got = h(*sharded)
        for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
            assert x.sharding.spec[0] == "b", x.sharding
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12 * float(jnp.abs(y).max()))
        if hasattr(jax, "set_mesh"):  # an unsharded batch under the mesh (JAX 0.6: no rule
            # for scatter under explicit sharding); the chunk loop's buffers are replicated
            for x, y in zip(jax.tree.leaves(h(*args)), jax.tree.leaves(ref)):
                np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12 * float(jnp.abs(y).max()))
# a model loaded under the mesh (its arrays replicated on it, which jax.shard_map refuses to
# close over): the same, and through sim.sharded_vmap
ref = jax.jit(jax.vmap(crba))(q)
with use(emesh):
    quad_here = robots.load("quad12")
    crba_here = lambda q: jaxdyn.crba(quad_here, q)
    qe = jax.device_put(q, NamedSharding(emesh, P("b")))
    for h in (jax.jit(jax.vmap(crba_here)), sim.sharded_vmap(crba_here, emesh)):
        np.testing.assert_allclose(h(qe), ref, rtol=1e-12, atol=1e-14)
    put = lambda x: jax.device_put(x, NamedSharding(emesh, P("b")))
    np.testing.assert_array_equal(sim.sharded_vmap(f, emesh)(put(q0), put(U)), one)
# what the batching rule does not cover, under a plain jit of vmap on an explicit mesh: JAX's
# stack primitive and constants made inside the trace (no mesh) failed there; value checks
# outside the rule (a derivative under vmap) ran on one device and gathered the batch to it
if hasattr(jax, "set_mesh"):
    put = lambda x: jax.device_put(x, NamedSharding(emesh, P("b")))
    pol = lambda q, v: sim.rollout(
        m, sim.State(q, v), policy=lambda s: -s.v, n_steps=20, cfg=cfg, checkpoint="sqrt"
    ).q
    qv = (q[:64], v[:64])
    for fn, args in (
        (f, (q0, U)),
        (pol, (q0, jnp.ones((8, 2)))),
        (lambda q, v: jaxdyn.integrate(quad, q, v), qv),
        (lambda q, v: jaxdyn.difference(quad, q, jaxdyn.integrate(quad, q, v)), qv),
        (lambda q, v: jax.jacfwd(lambda w: jaxdyn.aba(quad, q, w, v))(v), qv),
    ):
        ref = jax.jit(jax.vmap(fn))(*args)
        with use(emesh):
            h, sharded = jax.jit(jax.vmap(fn)), [put(a) for a in args]
            text = h.lower(*sharded).compile().as_text()
            assert "all-gather" not in text and "maximal" not in text, fn
            got = h(*sharded)
        assert got.sharding.spec[0] == "b", got.sharding
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12 * float(jnp.abs(ref).max()))
    with use(emesh):  # a failed check there: its message, from the device that checked
        g = jax.jit(jax.vmap(lambda q, v: jax.jacfwd(lambda w: jaxdyn.aba(quad, q, w, v))(v)))
        try:
            g(put(q[:64].at[40, 3].set(2.0)), put(v[:64])).block_until_ready()
            raise AssertionError("no error")
        except Exception as e:
            assert "aba: a quaternion in q is not of unit norm" in str(e), e
print("OK")
"""


@pytest.mark.slow  # a 4-device subprocess; test_distributed shards rollouts across processes
def test_sharded_batch_equals_one_device():
    """A batch split over 4 (virtual CPU) devices by ``sim.sharded_vmap`` gives the
    one-device result (bit for bit for the pendulum's rollout and step): each device holds a
    quarter of the batch and runs the one-device program on it (chunk loop and stores
    included, nothing gathered); a failed value check raises its message; under explicit
    sharding a plain ``jax.jit(jax.vmap(...))`` of jaxdyn's functions splits the batch the
    same way."""
    import os
    import subprocess
    import sys

    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    env = dict(os.environ, XLA_FLAGS=flags.strip())
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__)] + sys.path)
    r = subprocess.run(
        [sys.executable, "-c", SHARDED], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stderr[-3000:]


# ------------------------------------------------------------------------------ gradients


def test_vmapped_step_runs_chunked(box):
    """Under plain ``jax.vmap`` on the CPU, ``step`` evaluates a large batch in chunks
    (jaxdyn.batching): a chunk loop is in the program and the states equal those of one
    ``vmap`` (chunk 4 of B = 11, the padded last chunk included), with compliant contact under
    the implicit integrator; the reverse-mode gradient of a vmapped step (its derivative
    batches as one ``vmap``) is unchanged by the rule (a step, not a rollout: the rollout's
    scan compiled 3x longer and adds nothing the rule sees)."""
    cs = sim.contact_set(box, sim.Box("box", (0.4, 0.3, 0.2)))
    cfg = sim.SimConfig(dt=2e-3, contact=sim.Compliant(), contacts=cs, actuator=sim.Torque(dofs=()))
    B = 11
    dq = 0.05 * jax.random.normal(jax.random.PRNGKey(0), (B, 6))
    q0 = jax.vmap(lambda d: jaxdyn.integrate(box, jaxdyn.neutral_configuration(box), d))(dq)
    q0 = q0.at[:, 2].set(0.101)
    v0 = jax.random.normal(jax.random.PRNGKey(1), (B, 6))
    u0 = jnp.zeros((B, 0))

    def loss(v0):
        st = jax.vmap(lambda q, v: sim.step(box, sim.State(q, v), jnp.zeros(0), cfg))(q0, v0)
        return jnp.sum(st.q[:, :3] ** 2)

    outs, loops = [], []
    for chunk in (0, 4):
        with jaxdyn.config.override(vmap_chunk=chunk):
            f = jax.jit(jax.vmap(lambda q, v, u: sim.step(box, sim.State(q, v), u, cfg)))
            loops.append("stablehlo.while" in f.lower(q0, v0, u0).as_text())
            outs.append((f(q0, v0, u0), jax.jit(jax.grad(loss))(v0)))
    assert loops == [False, True]
    for a, b in zip(jax.tree_util.tree_leaves(outs[1]), jax.tree_util.tree_leaves(outs[0])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)
    assert float(jnp.max(jnp.abs(outs[0][1]))) > 0  # a gradient that can differ


def test_rollout_gradient_matches_finite_differences(pendulum):
    """Reverse mode through a 50-step rollout matches central differences; the checkpointed
    rollouts ("step", "sqrt": 7 blocks of 7 plus 1) give the same gradient."""
    cfg = sim.SimConfig(dt=5e-3, integrator="euler", limits=None)
    s0 = sim.State(jnp.array([0.3, -0.2]), jnp.zeros(2))
    U = 0.5 * jnp.sin(jnp.arange(50.0)[:, None] * jnp.array([0.1, 0.2]))

    def loss(U, checkpoint=None):
        tr = sim.rollout(pendulum, s0, U, cfg=cfg, checkpoint=checkpoint)
        return jnp.sum(tr.q[-1] ** 2) + 0.1 * jnp.sum(tr.v[-1] ** 2)

    vg = jax.jit(jax.value_and_grad(loss))
    _, g = vg(U)
    for ck in ("step", "sqrt"):
        gc = jax.jit(jax.grad(functools.partial(loss, checkpoint=ck)))(U)
        np.testing.assert_allclose(np.asarray(gc), np.asarray(g), rtol=1e-12, atol=1e-14)
    rng = np.random.default_rng(0)
    D = jnp.asarray(rng.standard_normal(U.shape))
    eps = 1e-6
    fd = (vg(U + eps * D)[0] - vg(U - eps * D)[0]) / (2 * eps)
    np.testing.assert_allclose(float(jnp.sum(g * D)), float(fd), rtol=1e-6)


@pytest.mark.parametrize(
    "kind, integrator",
    [
        # compliant + implicit in contact: test_implicit_compliant_rollout_gradient_in_contact
        pytest.param("compliant", "implicit", marks=pytest.mark.slow),
        ("constraint", "implicit"),
        # explicit integrator: test_rollout_gradient_matches_finite_differences
        pytest.param("compliant", "euler", marks=pytest.mark.slow),
        pytest.param("compliant", "implicit_damping", marks=pytest.mark.slow),
    ],
)
def test_gradients_finite_at_rest_contact(box, kind, integrator):
    """Reverse mode through 10 steps of a box resting on its four bottom corners (zero slip,
    zero velocity, every contact closed) gives finite gradients matching central differences,
    at rest and, with a push beyond the friction limit, while sliding (a non-zero gradient);
    "euler" and "implicit_damping" too, whose compliant contact is implicit in its velocity
    terms."""
    corners = [(sx * 0.2, sy * 0.15, -0.1) for sx in (-1, 1) for sy in (-1, 1)]
    cs = sim.contact_set(box, [sim.Point("box", c) for c in corners])
    contact = sim.Compliant() if kind == "compliant" else sim.Constraint(iterations=200)
    cfg = sim.SimConfig(
        dt=2e-3,
        integrator=integrator,
        contact=contact,
        contacts=cs,
        actuator=sim.Torque(dofs=tuple(range(6))),  # a body wrench on the free joint
    )
    sink = 2.0 * 9.81 / (4 * contact.gains(box, jnp.float64)[0]) if kind == "compliant" else 0
    rest = sim.State(jaxdyn.neutral_configuration(box).at[2].set(0.1 - sink), jnp.zeros(6))

    def loss(wrench):
        tr = sim.rollout(box, rest, jnp.broadcast_to(wrench, (10, 6)), cfg=cfg)
        return tr.q[-1, 2] + jnp.sum(tr.q[-1, :2] ** 2) + jnp.sum(tr.v[-1] ** 2)

    vg = jax.jit(jax.value_and_grad(loss))
    d = jnp.asarray(np.random.default_rng(1).standard_normal(6))
    eps = 1e-5
    push = jnp.array([0.0, 0.0, 0.0, 30.0, 0.0, 0.0])  # 30 N > mu m g = 19.6 N: sliding
    for w in (jnp.zeros(6), push):
        _, g = vg(w)
        assert np.all(np.isfinite(np.asarray(g)))
        fd = (vg(w + eps * d)[0] - vg(w - eps * d)[0]) / (2 * eps)
        np.testing.assert_allclose(float(g @ d), float(fd), rtol=2e-3, atol=1e-9)
    assert float(jnp.max(jnp.abs(g))) > 1e-4  # sliding: the loss depends on the wrench


def test_implicit_compliant_rollout_gradient_in_contact():
    """Reverse mode through 30 implicit steps of quad12 landing on its feet (compliant contact,
    friction active) matches central differences to 1e-4. The implicit integrator's damping
    matrix K holds the normal force fixed inside the friction term for its velocity Jacobian;
    a stop_gradient doing that also cut K's configuration derivative and made this gradient
    38 % wrong (-0.0678 against -0.0492), while 3 steps (before touchdown) agreed."""
    m = robots.load("quad12")
    cs = sim.contact_set(m, [sim.Sphere(f, 0.02) for f in FEET])
    cfg = sim.SimConfig(
        dt=2e-3,
        integrator="implicit",
        contact=sim.Compliant(friction=1.0),
        contacts=cs,
        actuator=sim.PD(20.0, 0.5),
    )
    q0 = jaxdyn.neutral_configuration(m).at[2].set(0.35)
    dq = 0.05 * jax.random.normal(jax.random.PRNGKey(0), (m.nv,))
    s0 = sim.State(jaxdyn.integrate(m, q0, dq.at[:6].set(0.0)), jnp.zeros(m.nv))
    ref = q0[7:]

    def loss(offset):
        tr = sim.rollout(m, s0, policy=lambda s: ref + offset, n_steps=30, cfg=cfg)
        return jnp.sum(tr.q[-1] ** 2)

    vg = jax.jit(jax.value_and_grad(loss))
    _, g = vg(jnp.zeros(12))
    d = jnp.asarray(np.random.default_rng(2).standard_normal(12))
    eps = 1e-6  # central differences agree with themselves (eps 1e-5..1e-7) to about 1e-5
    fd = (vg(eps * d)[0] - vg(-eps * d)[0]) / (2 * eps)
    np.testing.assert_allclose(float(g @ d), float(fd), rtol=1e-4)


#: quad12 configurations whose ``M_eff`` is ``M`` plus a diagonal: hard and MuJoCo's soft
#: contact under the implicit integrator (the soft rows posed with the plain ``M`` too), and
#: MuJoCo's Euler ("implicit_damping") with joint-limit rows
KERNEL_CASES = {
    "hard": dict(integrator="implicit", contact=sim.Constraint(friction=1.0)),
    "soft": dict(integrator="implicit", contact=sim.Constraint(friction=1.0, soft=True)),
    "euler_limits": dict(integrator="implicit_damping", contact=sim.Constraint(soft=True)),
}


@pytest.mark.parametrize(
    "case",
    ["hard", pytest.param("soft", marks=pytest.mark.slow)]
    + [pytest.param("euler_limits", marks=pytest.mark.slow)],
)
def test_step_solves_by_kernels_equal_xla(quad, case):
    """On the CPU a step whose ``M_eff`` is ``M`` plus a diagonal solves with jaxdyn's C
    kernels (``M_eff^-1`` by the Minv kernel, the free acceleration by the ABA kernel; under
    ``jax.vmap`` the joint part of ``M + h D``, which the PD servos' effort limits make depend
    on the state, is a row of armature per sample): quad12 on its feet, some servos clipped,
    is XLA's ABA passes' step (``cpu_kernels`` off) to 1e-12, batched; its derivatives are
    those of ABA's passes (the step's ``custom_jvp``: a gradient's program is the passes'), and
    the gradient of a step in the servo targets is the passes' (1e-9)."""
    m, cs = quad
    extra = {}
    if case == "euler_limits":
        extra["limit_constraints"] = sim.LimitConstraints.from_model(m)
    cfg = sim.SimConfig(
        dt=2e-3, contacts=cs, actuator=sim.PD(20.0, 0.5), **KERNEL_CASES[case], **extra
    )
    B = 5
    rng = np.random.default_rng(11)
    q0 = jaxdyn.neutral_configuration(m).at[2].set(0.34)
    dq = jnp.asarray(0.05 * rng.standard_normal((B, m.nv)))
    q = jax.vmap(lambda d: jaxdyn.integrate(m, q0, d))(dq)
    s = sim.State(q, jnp.asarray(0.5 * rng.standard_normal((B, m.nv))), jnp.zeros(B))
    s = jax.vmap(lambda x: sim.warm_state(m, x, cfg))(s)
    u = q0[7:] + jnp.asarray(rng.uniform(-2.0, 2.0, (B, 12)))  # 40 N m: some servos clip

    def step(s, u):
        return sim.step(m, s, u, cfg)

    def loss(u):
        def one(s, u):
            s = sim.step(m, s, u, cfg)
            return jnp.sum(s.v**2) + jnp.sum(s.q[:3] ** 2)

        return jnp.sum(jax.vmap(one)(s, u))

    text = jax.jit(jax.vmap(step)).lower(s, u).as_text()
    assert "@jaxdyn_minv" in text and "@jaxdyn_aba" in text
    grad_text = jax.jit(jax.grad(loss)).lower(u).as_text()
    got, grad = jax.jit(jax.vmap(step))(s, u), jax.jit(jax.grad(loss))(u)
    with jaxdyn.config.override(cpu_kernels=False):
        assert "@jaxdyn_minv" not in jax.jit(jax.vmap(step)).lower(s, u).as_text()
        assert jax.jit(jax.grad(loss)).lower(u).as_text() == grad_text  # the passes' program
        ref, ref_grad = jax.jit(jax.vmap(step))(s, u), jax.jit(jax.grad(loss))(u)
    assert float(jnp.abs(got.v - s.v).max()) > 1e-3  # it moves
    for a, b in ((got.q, ref.q), (got.v, ref.v)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12 * max(1.0, float(jnp.abs(b).max())))
    scale = float(jnp.abs(ref_grad).max())
    assert scale > 0
    np.testing.assert_allclose(grad, ref_grad, rtol=0, atol=1e-9 * scale)


@pytest.mark.slow
def test_constraint_gradient_through_a_long_slide(box):
    """Reverse mode through 200 steps (0.4 s) of a box pushed across the floor (30 N against
    mu m g = 19.6 N: sliding on four corners the whole time) with the default ``Constraint()``
    (Coulomb's law, De Saxce's fixed point differentiated implicitly) matches central
    differences to 1e-6 (measured 1.7e-7; the relaxed formulation, whose box hops, was 27 %
    off here)."""
    corners = [(sx * 0.2, sy * 0.15, -0.1) for sx in (-1, 1) for sy in (-1, 1)]
    cs = sim.contact_set(box, [sim.Point("box", c) for c in corners])
    cfg = sim.SimConfig(
        dt=2e-3, contact=sim.Constraint(), contacts=cs, actuator=sim.Torque(dofs=tuple(range(6)))
    )
    rest = sim.State(jaxdyn.neutral_configuration(box).at[2].set(0.1), jnp.zeros(6))

    def loss(w):
        tr = sim.rollout(box, rest, jnp.broadcast_to(w, (200, 6)), cfg=cfg)
        return tr.q[-1, 2] + jnp.sum(tr.q[-1, :2] ** 2) + jnp.sum(tr.v[-1] ** 2) + tr.q[-1, 5]

    vg = jax.jit(jax.value_and_grad(loss))
    d = jnp.asarray(np.random.default_rng(1).standard_normal(6))
    w = jnp.array([0.0, 0.0, 1.0, 30.0, 5.0, 0.0])
    _, g = vg(w)
    eps = 1e-5
    fd = (vg(w + eps * d)[0] - vg(w - eps * d)[0]) / (2 * eps)
    np.testing.assert_allclose(float(g @ d), float(fd), rtol=1e-6)
    assert abs(float(fd)) > 0.1


@pytest.mark.parametrize("coulomb", [False, True])
def test_cone_solver_implicit_gradient(coulomb):
    """Implicit differentiation of the cone complementarity solver matches central
    differences of the (converged) solver, for Anitescu's relaxation and for Coulomb's law
    (De Saxce's correction: both contacts slide, at zero normal velocity)."""
    rng = np.random.default_rng(3)
    A = rng.standard_normal((6, 6))
    G = jnp.asarray(A @ A.T + 0.5 * np.eye(6))
    u = jnp.asarray([-1.0, 0.3, -0.2, -0.5, -0.9, 0.1])

    @jax.jit
    def f(G, u, mu):
        lam = sim.solve_cone_complementarity(G, u, mu, iterations=400, coulomb=coulomb)
        return jnp.sum(jnp.sin(lam))

    solve = jax.jit(sim.solve_cone_complementarity, static_argnums=3, static_argnames="coulomb")
    lam = solve(G, u, 0.6, 400, coulomb=coulomb)
    r = (G @ lam.reshape(-1) + u).reshape(2, 3)
    if coulomb:  # sliding (lam on the cone's surface, opposing r_t) at zero normal velocity
        np.testing.assert_allclose(np.asarray(r[:, 0]), 0.0, atol=1e-12)
        assert float(jnp.min(jnp.linalg.norm(r[:, 1:], axis=1))) > 1e-2
        np.testing.assert_allclose(
            np.asarray(jnp.sum(lam[:, 1:] * r[:, 1:], 1)),
            -0.6 * np.asarray(lam[:, 0] * jnp.linalg.norm(r[:, 1:], axis=1)),
            rtol=1e-9,
        )
        r = r.at[:, 0].add(0.6 * jnp.linalg.norm(r[:, 1:], axis=1))  # De Saxce's velocity
    # cone complementarity: lam in K, r in the dual cone K* = {mu |r_t| <= r_n}, lam . r = 0
    assert bool(jnp.all(jnp.linalg.norm(lam[:, 1:], axis=1) <= 0.6 * lam[:, 0] + 1e-12))
    assert bool(jnp.all(0.6 * jnp.linalg.norm(r[:, 1:], axis=1) <= r[:, 0] + 1e-12))
    assert float(jnp.max(jnp.abs(jnp.sum(lam * r, 1)))) < 1e-12
    assert float(jnp.max(lam[:, 0])) > 0.1  # a contact is active (the check is not vacuous)
    gG, gu, gmu = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(G, u, 0.6)
    eps = 1e-6
    du = jnp.asarray(rng.standard_normal(6))
    fd = (f(G, u + eps * du, 0.6) - f(G, u - eps * du, 0.6)) / (2 * eps)
    np.testing.assert_allclose(float(gu @ du), float(fd), rtol=1e-5)
    dG = jnp.asarray(rng.standard_normal((6, 6)))
    dG = dG + dG.T
    fd = (f(G + eps * dG, u, 0.6) - f(G - eps * dG, u, 0.6)) / (2 * eps)
    np.testing.assert_allclose(float(jnp.sum(gG * dG)), float(fd), rtol=1e-5)
    fdm = (f(G, u, 0.6 + eps) - f(G, u, 0.6 - eps)) / (2 * eps)
    np.testing.assert_allclose(float(gmu), float(fdm), rtol=1e-5, atol=1e-9)


# ------------------------------------------------------------------------------ bad input


def test_bad_input(quad, pendulum):
    m, cs = quad
    with pytest.raises(ValueError, match="no frame named 'NOPE'"):
        sim.contact_set(m, [sim.Sphere("NOPE", 0.02)])
    with pytest.raises(ValueError, match="dt must be finite and > 0"):
        sim.SimConfig(dt=0.0)
    with pytest.raises(ValueError, match="integrator must be one of"):
        sim.SimConfig(integrator="verlet")
    with pytest.raises(ValueError, match="use integrator='euler' or 'implicit'"):
        sim.SimConfig(integrator="rk4", contact=sim.Constraint(), contacts=cs)
    with pytest.raises(ValueError, match="no contacts"):
        sim.SimConfig(contact=sim.Compliant())
    with pytest.warns(jaxdyn.JaxdynWarning, match=r"moving joints \['j3'\] carry subtrees"):
        massless = jaxdyn.load_urdf(
            PENDULUM.replace(
                "</robot>",
                '<link name="tip"/><joint name="j3" type="revolute">'
                '<parent link="l2"/><child link="tip"/><axis xyz="1 0 0"/></joint></robot>',
            )
        )
    with pytest.raises(ValueError, match="massless body 'tip'"):
        sim.contact_set(massless, [sim.Sphere("tip", 0.01)])
    cfg = sim.SimConfig(limits=None)
    with pytest.raises(
        ValueError, match=r"ctrl has shape \(3,\), expected \(nu\)=\(2\), for .double_pendulum."
    ):
        sim.step(pendulum, sim.State(jnp.zeros(2), jnp.zeros(2)), jnp.zeros(3), cfg)
    with pytest.raises(Exception, match="non-finite"):
        jax.jit(lambda s: sim.step(pendulum, s, jnp.zeros(2), cfg))(
            sim.State(jnp.array([jnp.nan, 0.0]), jnp.zeros(2))
        ).q.block_until_ready()


def test_divergence_raises_a_clear_error(pendulum, box):
    """A time step beyond the explicit stability limit (a PD velocity gain of 1e5 on the
    pendulum with "euler" at 5 ms: h kd / I in the thousands) blows the state up; the rollout
    step where it overflows raises the divergence check, which names the cause and the
    remedies, instead of the next step's non-finite input check (or a NaN trajectory ending
    there). A single step returns the non-finite state: the environments test for it and
    recover (jaxdyn.envs.SimEnv.pipeline_step); a step given such a state raises its input
    check, whose message says where such a state comes from and the same remedies (the
    non-finite entry; a free joint's quaternion, checked first)."""
    cfg = sim.SimConfig(dt=5e-3, integrator="euler", actuator=sim.PD(0.0, 1e5), limits=None)
    run = jax.jit(lambda s: sim.rollout(pendulum, s, jnp.zeros((400, 2)), cfg=cfg))
    with pytest.raises(Exception, match="integration diverged") as err:
        run(sim.State(jnp.array([0.3, -0.2]), jnp.zeros(2))).q.block_until_ready()
    assert "integrator='implicit'" in str(err.value)
    assert "non-finite entry" not in str(err.value)
    s = sim.State(jnp.array([0.3, -0.2]), jnp.array([1e200, -1e200]))
    one = jax.jit(lambda s: sim.step(pendulum, s, jnp.zeros(2), cfg))
    s1 = one(s)
    assert not np.all(np.isfinite(np.asarray(s1.v)))
    hint = "; if an earlier step returned this state, that step diverged: cfg.dt is beyond"
    with pytest.raises(Exception, match="step: the state has a non-finite entry") as err:
        one(s1).v.block_until_ready()
    assert hint in str(err.value) and "integrator='implicit'" in str(err.value)
    free = sim.SimConfig(actuator=sim.Torque(dofs=()), limits=None)
    bad = sim.State(jaxdyn.neutral_configuration(box).at[3].set(jnp.nan), jnp.zeros(6))
    with pytest.raises(
        jaxdyn.CheckError, match="step: a quaternion in q is not of unit norm"
    ) as err:
        sim.step(box, bad, jnp.zeros(0), free)
    assert hint in str(err.value)


def test_huge_step_is_reported(box, pendulum):
    """A step far beyond what the integrator resolves returns finite but meaningless states
    (the base of quad12 4.4 km below the ground at dt = 0.5); the rollout reports it
    (:data:`jaxdyn.sim.core.DIVERGED_JUMP`) before any state overflows: the box dropped 0.2 m
    onto the default ``Compliant`` at dt = 0.5 (2 m deep after one step, then 188 m/s up and
    444 m high after six), and the pendulum's explicit PD damping at 5 ms (the speed grows
    ~100-fold per step). Fast but resolved motion does not trip it: the pendulum kicked from
    rest by a torque step (to 90 rad/s in 60 steps), a box spinning at 100 rad/s and flying at
    300 m/s."""
    cs = sim.contact_set(box, sim.Box("box", (0.4, 0.3, 0.2)))
    cfg = sim.SimConfig(dt=0.5, contact=sim.Compliant(), contacts=cs, actuator=sim.Torque(dofs=()))
    s0 = sim.State(jaxdyn.neutral_configuration(box).at[2].set(0.3), jnp.zeros(6))
    run = jax.jit(lambda s: sim.rollout(box, s, jnp.zeros((6, 0)), cfg=cfg))
    with jaxdyn.config.override(value_checks=False):
        tr = jax.jit(lambda s: sim.rollout(box, s, jnp.zeros((6, 0)), cfg=cfg))(s0)
    assert np.all(np.isfinite(np.asarray(tr.q))) and float(tr.q[-1, 2]) > 100  # meaningless
    with pytest.raises(Exception, match="a step changed the velocity far more than dt"):
        run(s0).q.block_until_ready()
    cfg = sim.SimConfig(dt=5e-3, integrator="euler", actuator=sim.PD(0.0, 1e5), limits=None)
    s0 = sim.State(jnp.array([0.3, -0.2]), jnp.array([0.5, 0.0]))
    with pytest.raises(jaxdyn.CheckError, match="cfg.dt is beyond the stability limit"):
        sim.rollout(pendulum, s0, jnp.zeros((4, 2)), cfg=cfg)
    # resolved: a torque step, then a fast spin
    cfg = sim.SimConfig(dt=2e-3, integrator="euler", limits=None)
    u = jnp.zeros((60, 2)).at[1:].set(jnp.array([400.0, -100.0]))
    # (jitted: one program each instead of the eager rollout's op-by-op compiles around its
    # loop; a tripped check raises when the result is read)
    tr = jax.jit(lambda s, u: sim.rollout(pendulum, s, u, cfg=cfg))(
        sim.State(jnp.zeros(2), jnp.zeros(2)), u
    )
    assert float(jnp.max(jnp.abs(tr.v))) > 90
    spin = sim.SimConfig(dt=2e-3, integrator="euler", actuator=sim.Torque(dofs=()), limits=None)
    v0 = jnp.array([100.0, 0.0, 1.0, 300.0, 0.0, 0.0])  # 0.2 rad and 0.6 m per step
    tr = jax.jit(lambda s: sim.rollout(box, s, jnp.zeros((20, 0)), cfg=spin))(
        sim.State(jaxdyn.neutral_configuration(box), v0)
    )
    assert float(jnp.max(jnp.abs(tr.v))) > 299


def test_bad_parameters_are_named(box, pendulum):
    """A bad contact, actuator or terrain parameter is reported as itself, not as a diverged
    integration ("cfg.dt is beyond the stability limit"): at construction by a ValueError
    naming the argument, traced (set with eqx.tree_at inside jit) by a value check naming it;
    a traced ``dt = inf`` fails the step's check (only ``dt > 0`` was tested: NaN states).
    Eager calls raise jaxdyn.CheckError (they raised JaxRuntimeError)."""
    for make, msg in [
        (lambda: sim.Compliant(stiffness=float("nan")), "Compliant: stiffness must be finite"),
        (lambda: sim.Compliant(stiffness=-1.0), r"Compliant: stiffness must be finite and > 0"),
        (lambda: sim.Compliant(friction=-0.1), r"Compliant: friction must be finite and >= 0"),
        (lambda: sim.Constraint(friction=float("inf")), "Constraint: friction must be finite"),
        (lambda: sim.Constraint(iterations=0), "Constraint: iterations must be an integer >= 1"),
        (lambda: sim.Plane(height=float("nan")), "Plane: height must be finite"),
        (lambda: sim.PD(kp=float("nan")), r"PD: kp must be finite and >= 0"),
        (lambda: sim.JointLimits(damping=-1.0), "JointLimits: damping must be finite"),
    ]:
        with pytest.raises(ValueError, match=msg):
            make()
    cs = sim.contact_set(box, sim.Box("box", (0.4, 0.3, 0.2)))
    base = sim.SimConfig(contact=sim.Compliant(), contacts=cs, actuator=sim.PD(dofs=()))
    # every number the loop below replaces is an array already (a float or None replaced by an
    # array is another program): the five bad configurations share one compile of each function
    fields = lambda c: (c.contact.stiffness, c.terrain.height, c.actuator.kp, c.dt)  # noqa: E731
    # (weakly typed as the loop's jnp.asarray(python float): a dtype change recompiles too)
    good = tuple(jnp.asarray(float(x)) for x in (1e4, 0.0, base.actuator.kp, base.dt))
    base = eqx.tree_at(fields, base, good, is_leaf=lambda x: x is None)
    s0 = sim.State(jaxdyn.neutral_configuration(box).at[2].set(0.1), jnp.zeros(6))
    run = jaxdyn.jit(lambda s, c: sim.rollout(box, s, jnp.zeros((3, 0)), cfg=c))
    one = jaxdyn.jit(lambda s, c: sim.step(box, s, jnp.zeros(0), c))
    for where, value, msg in [
        (lambda c: c.contact.stiffness, jnp.nan, "cfg.contact.stiffness must be finite and > 0"),
        (lambda c: c.contact.stiffness, -1.0, "cfg.contact.stiffness must be finite and > 0"),
        (lambda c: c.terrain.height, jnp.nan, "cfg.terrain.height must be finite"),
        (lambda c: c.actuator.kp, jnp.nan, "cfg.actuator.kp must be finite and >= 0"),
        (lambda c: c.dt, jnp.inf, "cfg.dt must be finite and > 0"),
    ]:
        cfg = eqx.tree_at(where, base, jnp.asarray(value), is_leaf=lambda x: x is None)
        with pytest.raises(jaxdyn.CheckError, match="^rollout: " + msg):
            run(s0, cfg)
        with pytest.raises(jaxdyn.CheckError, match="^step: " + msg):
            one(s0, cfg)
    # a number set without the constructor is checked when the step is traced
    cfg = eqx.tree_at(lambda c: c.contact.friction, base, float("nan"), is_leaf=lambda x: x is None)
    with pytest.raises(ValueError, match="step: cfg.contact.friction must be finite"):
        sim.step(box, s0, jnp.zeros(0), cfg)
    # eagerly: CheckError, the check's message alone
    cfg = sim.SimConfig(limits=None)
    bad = sim.State(jnp.array([jnp.nan, 0.0]), jnp.zeros(2))
    with pytest.raises(jaxdyn.CheckError, match="^step: the state has a non-finite entry"):
        sim.step(pendulum, bad, jnp.zeros(2), cfg)
    with pytest.raises(jaxdyn.CheckError, match="^rollout: the state has a non-finite entry"):
        sim.rollout(pendulum, bad, jnp.zeros((2, 2)), cfg=cfg)


def test_rollout_checks_outside_its_loop(pendulum):
    """A rollout checks its initial state and controls before its loop and the divergence and
    a policy's controls after it: the loop holds no check (an XLA custom call, which keeps
    fused CPU loops from compiling it into one kernel), and each bad input still raises its
    message (the divergence itself: test_divergence_raises_a_clear_error)."""
    cfg = sim.SimConfig(dt=5e-3, limits=None)
    s0 = sim.State(jnp.array([0.3, -0.2]), jnp.zeros(2))
    us = jnp.zeros((20, 2))
    for run in (
        lambda s, u: sim.rollout(pendulum, s, u, cfg=cfg),
        lambda s, u: sim.rollout(pendulum, s, cfg=cfg, policy=lambda x: -x.v + u[0], n_steps=20),
        lambda s, u: sim.rollout(pendulum, s, u, cfg=cfg, checkpoint="sqrt"),
        # vmap batches the loop body after tracing it (the step's batching rule traces later)
        lambda s, u: jax.vmap(lambda q: sim.rollout(pendulum, sim.State(q, s.v), u, cfg=cfg))(
            jnp.stack([s.q] * 3)
        ),
    ):
        outside, inside = oracle.callbacks(jax.make_jaxpr(run)(s0, us).jaxpr)
        assert outside and not inside, (outside, inside)
    nan_s = sim.State(jnp.array([jnp.nan, 0.0]), jnp.zeros(2))
    with pytest.raises(Exception, match="rollout: the state has a non-finite entry"):
        jax.jit(lambda s: sim.rollout(pendulum, s, us, cfg=cfg))(nan_s).q.block_until_ready()
    with pytest.raises(Exception, match="rollout: controls has a non-finite entry"):
        jax.jit(lambda u: sim.rollout(pendulum, s0, u, cfg=cfg))(
            us.at[7, 1].set(jnp.inf)
        ).q.block_until_ready()
    policy = lambda x: jnp.where(x.t > 0.04, jnp.nan, 0.0) * jnp.ones(2)  # noqa: E731
    with pytest.raises(Exception, match="the policy returned a non-finite control"):
        jax.jit(lambda s: sim.rollout(pendulum, s, cfg=cfg, policy=policy, n_steps=20))(
            s0
        ).q.block_until_ready()
    ok = jax.jit(lambda s: sim.rollout(pendulum, s, us, cfg=cfg))(s0)
    assert np.all(np.isfinite(np.asarray(ok.q)))


@pytest.mark.slow  # opt-in flag; test_osim's test_constrained_aba_fused_loops_route covers its use
def test_fused_loops_step_has_no_scatter(quad, monkeypatch):
    """With fused CPU loops (jaxdyn.config.fused_cpu_loops) the step sums contact wrenches,
    contact stiffness and joint torques onto bodies and joints without scatters (XLA:CPU does
    not fuse a loop holding one): the step's program has none, and its next state equals the
    scatter form's (implicit integrator, compliant contact in touch, PD and joint limits)."""
    from jaxdyn.sim import _scatter

    m, cs = quad
    cfg = sim.SimConfig(dt=2e-3, contact=sim.Compliant(), contacts=cs, actuator=sim.PD(20.0, 0.5))
    q0 = jaxdyn.neutral_configuration(m).at[2].set(0.3)  # feet below the ground: in contact
    q0 = q0.at[7:].add(0.4 * jnp.cos(jnp.arange(m.nv - 6)))  # some joints beyond their limits
    s0 = sim.State(q0, 0.1 * jnp.sin(jnp.arange(m.nv, dtype=q0.dtype)))
    ref = q0[7:] + 0.1

    def step(s):
        return sim.step(m, s, ref, cfg)

    def scatters(fn, *args):
        return str(jax.make_jaxpr(fn)(*args)).count("scatter")

    plain = jax.jit(step)(s0)
    assert scatters(step, s0) > 0
    # the helpers against the scatters (repeated segments, empty ones)
    idx = np.array([3, 0, 3, 1, 3])
    vals = jnp.arange(15.0).reshape(5, 3)
    ref_sum = jax.ops.segment_sum(vals, idx, num_segments=5)
    ref_add = jnp.ones(6).at[np.array([4, 1])].add(jnp.array([2.0, -3.0]))
    monkeypatch.setattr(jaxdyn.config, "fused_cpu_loops_enabled", lambda: True)
    jax.clear_caches()
    assert scatters(step, s0) == 0
    fused = jax.jit(step)(s0)
    np.testing.assert_array_equal(np.asarray(_scatter.segment_sum(vals, idx, 5)), ref_sum)
    out = _scatter.add_at(jnp.ones(6), np.array([4, 1]), jnp.array([2.0, -3.0]))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(ref_add))
    with pytest.raises(ValueError, match="distinct"):
        _scatter.add_at(jnp.ones(6), np.array([1, 1]), jnp.ones(2))
    monkeypatch.undo()
    jax.clear_caches()
    assert float(jnp.max(jnp.abs(sim.contact_forces(m, s0, ref, cfg)))) > 1.0  # in contact
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(fused)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-12, atol=1e-12)

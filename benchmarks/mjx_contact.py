"""Contact-rich MJCF scenes stepped by jaxdyn.sim and by MJX, side by side in one process
(issue 56): the same MJCF file loaded by :func:`jaxdyn.load_mjcf` and by ``mujoco.mjx``.

Usage: ``python benchmarks/mjx_contact.py [--batches 1,64,1024] [--rollout-batch 64] [--T 10]
[--settle 100] [--sanity-steps 200] [--scenes push_cube,quadruped,humanoid]
[--engines "jaxdyn Constraint,MJX"] [--out benchmarks/RESULTS.md]``

Scenes (``SCENES``):

* ``humanoid``: dm_control's humanoid (``suite/humanoid.xml``: 20 capsules and spheres,
  self-collision on, 161 geom pairs after MuJoCo's filters), falling limp from ``qpos0`` with
  its joints perturbed by 0.01 rad; its ``solimp`` is ignored by jaxdyn's hard contact and
  ``Compliant`` (``sim_config(ignore=("solimp",))``: they have no impedance) and honoured by
  MuJoCo's soft contact (the engines ``jaxdyn soft``);
* ``push_cube``: jaxdyn's arm + cube scene (``jaxdyn/envs/xmls/push_cube.xml``: the pusher
  against the cube and both against the table), the arm at ``PushCube.HOME``, no actuators
  (the arm sags onto the table and the cube);
* ``quadruped``: quad12 on the ground with the collision geometry of
  :class:`jaxdyn.envs.QuadrupedGetup` (a trunk box, four thigh capsules and four foot spheres
  against a floor plane; limbs do not collide with each other), written as MJCF by
  :func:`quadruped_xml` (quad12's URDF through MuJoCo's compiler), standing on position
  servos (kp 20, kv 0.5) from 1 cm above its standing height.

Each engine first settles ``--rollout-batch`` environments (``--settle`` steps from the
perturbed initial configurations) and is timed from its settled, touching states (repeated over
a larger batch). For each scene and batch size ``B``: ``jax.jit(jax.vmap(step))`` of one step,
and a rollout (``lax.scan`` over ``T`` steps inside ``jax.jit(jax.vmap(...))``, only the final
state kept), for jaxdyn with ``sim.Constraint()`` (the default: the file's ``sim_config``
makes it MuJoCo's contact model, :meth:`jaxdyn.io.mjcf.MJCFModel.mujoco_contact`),
``sim.Constraint(soft=False)`` (``jaxdyn hard``: the hard contact, the default before),
``sim.Constraint(soft=False, max_contacts=CAPS[scene])`` (``jaxdyn Constraint capped``, the
scenes of
:data:`CAPS` only), the option ``jaxdyn Constraint warm`` (:func:`warm_contact`: warm start and
early stop, as MJX's Newton solve), ``jaxdyn soft`` (``sim.Constraint(soft=True,
relaxed=True, solver="dual")``: MuJoCo's soft contact with the file's ``solref``, ``solimp``,
``impratio`` and cone, MuJoCo's convex problem: the one MJX's Newton solver solves, here by the
dual solve's 100 projected-gradient iterations; ``jaxdyn soft capped`` with the cap of :data:`CAPS`;
``jaxdyn soft newton``: the same problem by MuJoCo's primal Newton solve, warm-started, with
MJX's iterations and tolerance, :func:`newton_contact`) and
``sim.Compliant`` (reported apart), and MJX
(``mjx.step``, the file's own solver and integrator), float32, zero controls. Compile seconds
(first call) are separate; the compiled functions are then timed interleaved (engine after
engine, ``--repeats`` rounds, median per call, wall and process CPU time). Fidelity: one step
from the settled states against the same engine's converged solve (:meth:`Scene.jaxdyn_fidelity`,
:meth:`Scene.mjx_fidelity`). Sanity: the rollout repeated to ``--sanity-steps`` steps; the
height of a body (torso / cube / base) and the number of touching contacts (jaxdyn: contact
slots closer than ``TOUCH``; MJX: ``contact.dist < TOUCH``) in both engines.

MJX's vmapped step deadlocks at B >= 256 on the CPU with jaxlib 0.10.2
(:func:`benchmarks.sim.bench_mjx`): its batches above :data:`MJX_CHUNK` run as ``lax.map``
over chunks (:func:`mjx_chunked`). Everything single-threaded (``_env.single_threaded``).
Writes ``## Contact scenes against MJX``.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxdyn
from jaxdyn import sim

import _env
from _env import cpu_name, write_section

HERE = Path(__file__).resolve().parent
SECTION = "## Contact scenes against MJX"
QUAD_DT, QUAD_KP, QUAD_KD, QUAD_STAND = 0.005, 20.0, 0.5, 0.34
TOUCH = 1e-3  #: a contact within 1 mm counts as touching in the sanity check (m)


def humanoid_path() -> str:
    """dm_control's ``suite/humanoid.xml`` as jaxdyn bundles it (byte for byte)."""
    from jaxdyn.envs.dm_control_suite import XML_DIR

    return str(Path(XML_DIR) / "humanoid.xml")


def push_cube_path() -> str:
    from jaxdyn.envs.manipulation import PUSH_CUBE_XML

    return PUSH_CUBE_XML


def quadruped_xml() -> str:
    """quad12 on a floor as MJCF: its URDF through MuJoCo's compiler (static links kept as
    bodies, the URDF's visual and collision elements dropped), a free joint, the collision
    geometry of :func:`jaxdyn.envs.getup.quad12_collision` as geoms (robot ``contype 1
    conaffinity 0``, floor ``contype 0 conaffinity 1``: robot against floor only), position
    servos on the 12 hinges; ``implicitfast`` at 5 ms."""
    import mujoco

    from jaxdyn import robots
    from jaxdyn.envs.getup import quad12_collision

    spec = _env.urdf_mjspec("quad12")
    spec.modelname = "quad12_ground"
    spec.option.timestep = QUAD_DT
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.body("base_link").add_freejoint()
    fr = [0.8, 0.005, 0.0001]
    spec.worldbody.add_geom(
        name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[10, 10, 0.1], friction=fr,
        contype=0, conaffinity=1,
    )  # fmt: skip
    model = robots.load("quad12")
    for p in quad12_collision(model):
        body = p.frame if isinstance(p.frame, str) else model.frame_names[p.frame]
        kw = dict(name=p.name, pos=list(p.pos), contype=1, conaffinity=0, friction=fr)
        if isinstance(p, sim.Sphere):
            kw.update(type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[p.radius, 0, 0])
        elif isinstance(p, sim.Box):
            kw.update(type=mujoco.mjtGeom.mjGEOM_BOX, size=list(0.5 * np.asarray(p.size)))
        else:  # Capsule along its rotation's z axis
            kw.update(type=mujoco.mjtGeom.mjGEOM_CAPSULE, size=[p.radius, 0.5 * p.length, 0])
        if not isinstance(p, sim.Sphere):
            w, x, y, z = _rot_to_quat(np.asarray(p.rotation))
            kw["quat"] = [w, x, y, z]
        spec.body(body).add_geom(**kw)
    for j in spec.joints:
        if j.type == mujoco.mjtJoint.mjJNT_HINGE:
            spec.add_actuator(
                name=j.name, trntype=mujoco.mjtTrn.mjTRN_JOINT, target=j.name,
                gaintype=mujoco.mjtGain.mjGAIN_FIXED, gainprm=[QUAD_KP] + [0] * 9,
                biastype=mujoco.mjtBias.mjBIAS_AFFINE,
                biasprm=[0, -QUAD_KP, -QUAD_KD] + [0] * 7,
            )  # fmt: skip
    spec.compile()
    return spec.to_xml()


def _rot_to_quat(R):
    import mujoco

    q = np.zeros(4)
    mujoco.mju_mat2Quat(q, np.ascontiguousarray(R, float).ravel())
    return q


#: scene -> (MJCF source, body whose height the sanity check reports, jaxdyn sim_config ignore)
SCENES = {
    "humanoid": (humanoid_path, "torso", ("solimp",)),
    "push_cube": (push_cube_path, "cube", ()),
    "quadruped": (quadruped_xml, "base_link", ()),
}


def initial_qpos(m, q0, B, scene, key=0):
    """``B`` MuJoCo configurations: ``q0`` (``push_cube``: the arm at ``PushCube.HOME``; the
    quadruped 1 cm above standing) with the hinge joints perturbed by 0.01 rad (uniform)."""
    import mujoco

    q0 = np.array(q0, float)
    if scene == "push_cube":
        from jaxdyn.envs.manipulation import PushCube

        for i, a in enumerate(PushCube.HOME):
            q0[m.jnt_qposadr[m.joint(f"joint{i + 1}").id]] = a
    if scene == "quadruped":
        q0[2] = QUAD_STAND + 0.01
    hinge = [
        m.jnt_qposadr[j] for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE
    ]
    rng = np.random.default_rng(key)
    qs = np.repeat(q0[None], B, 0)
    qs[:, hinge] += rng.uniform(-0.01, 0.01, (B, len(hinge)))
    return qs


class Scene:
    """One scene in both engines: the loaded jaxdyn scene, the MuJoCo model and MJX's."""

    def __init__(self, name):
        import mujoco
        from mujoco import mjx

        src, self.body, self.ignore = SCENES[name]
        self.name, self.src = name, src()
        self.loaded = jaxdyn.load_mjcf(self.src)
        self.m = (
            mujoco.MjModel.from_xml_path(self.src)
            if os.path.exists(self.src)
            else mujoco.MjModel.from_xml_string(self.src)
        )
        self.mx = mjx.put_model(self.m)
        self.conv = self.loaded.converter()
        self.nu = self.m.nu
        g = self.loaded.geoms
        self.n_pairs = (len(g.pairs) if g is not None else 0) + len(self.loaded.contacts)

    def cfg(self, contact):
        """The file's ``sim_config`` with ``contact``; MuJoCo's soft contact
        (``Constraint(soft=True)``) takes every contact parameter of the file (the scene's
        ``ignore`` is for the hard contact, which has no impedance)."""
        soft = getattr(contact, "soft", False)
        return self.loaded.sim_config(contact=contact, ignore=() if soft else self.ignore)

    def jaxdyn_states(self, qpos):
        q = np.stack([np.asarray(self.conv.q_from_mujoco(x)) for x in qpos])
        q = jnp.asarray(q, jnp.float32)
        return sim.State(q, jnp.zeros((len(q), self.loaded.model.nv), q.dtype), jnp.zeros(len(q)))

    def mjx_states(self, qpos):
        import mujoco
        from mujoco import mjx

        dx = mjx.put_data(self.m, mujoco.MjData(self.m))
        qp = jnp.asarray(qpos, jnp.float32)
        return jax.vmap(lambda q: dx.replace(qpos=q))(qp)

    # -- the functions timed
    def jaxdyn_fns(self, contact, T):
        """``(step, rollout, prepare)``: ``jax.jit(jax.vmap(...))`` of one step and of ``T``,
        and what makes a batch of :meth:`jaxdyn_states` this configuration's first state
        (:func:`jaxdyn.sim.warm_state`: zero impulses where ``contact`` warm-starts)."""
        model, cfg = self.loaded.model, self.cfg(contact)
        u = jnp.zeros(self.nu, jnp.float32)

        def step(s):
            return sim.step(model, s, u, cfg)

        def roll(s):
            return jax.lax.scan(lambda s, _: (step(s), None), s, None, length=T)[0]

        prepare = jax.jit(jax.vmap(lambda s: sim.warm_state(model, s, cfg)))
        return jax.jit(jax.vmap(step)), jax.jit(jax.vmap(roll)), prepare

    def mjx_fns(self, T):
        """MJX's ``(step, rollout, prepare)``; a batch above :data:`MJX_CHUNK` runs as
        ``lax.map`` over chunks of it (:func:`mjx_chunked`)."""
        from mujoco import mjx

        mx = self.mx

        def step(d):
            return mjx.step(mx, d)

        def roll(d):
            return jax.lax.scan(lambda d, _: (step(d), None), d, None, length=T)[0]

        return jax.jit(mjx_chunked(step)), jax.jit(mjx_chunked(roll)), lambda d: d

    # -- fidelity: one step against the same engine's converged solve
    def jaxdyn_fidelity(self, contact, states):
        """``(max |v' - v'_ref| (B,), solve residual (B,), contacts dropped (B,), the
        reference's residual (B,))`` of one step of ``contact`` from ``states`` (its impulses
        the warm start where ``contact`` warm-starts), ``v'_ref`` the step of ``contact`` with
        ``iterations=REF_ITERATIONS`` over every slot from a cold start, no early stop
        (:func:`reference_contact`: the converged solve of the same problem, hard or MuJoCo's
        soft one)."""
        model, cfg = self.loaded.model, self.cfg(contact)
        ref = self.cfg(reference_contact(cfg.contact))  # the file's model where soft=None
        u = jnp.zeros(self.nu, jnp.float32)

        def one(s):
            s1, info = sim.step_info(model, s, u, cfg)
            r1, ref_info = sim.step_info(model, sim.State(s.q, s.v, s.t, s.act), u, ref)
            return (jnp.max(jnp.abs(s1.v - r1.v)), info["contact_residual"],
                    info["contacts_dropped"], ref_info["contact_residual"])  # fmt: skip

        return jax.jit(jax.vmap(one))(states)

    def mjx_fidelity(self, d):
        """``max |qvel' - qvel'_ref| (B,)`` of one ``mjx.step`` from ``d`` (its
        ``qacc_warmstart`` the warm start, as in a rollout), ``qvel'_ref`` MJX's step with
        ``opt.iterations = MJX_REF_ITERATIONS`` and ``opt.tolerance = 1e-12`` (its Newton solve
        run until a step no longer lowers the cost in float32)."""
        from mujoco import mjx

        mx = self.mx
        mref = mx.replace(opt=mx.opt.replace(iterations=MJX_REF_ITERATIONS, tolerance=1e-12))

        def one(d):
            return jnp.max(jnp.abs(mjx.step(mx, d).qvel - mjx.step(mref, d).qvel))

        return jax.jit(mjx_chunked(one))(d)

    # -- what the sanity check reads
    def jaxdyn_probe(self, states):
        """``(height of self.body (B,), touching contacts (B,))`` of jaxdyn states."""
        from jaxdyn.algorithms.kinematics import forward_kinematics
        from jaxdyn.sim.core import _contact_kinematics, _world

        model, cfg = self.loaded.model, self.cfg(sim.Constraint())
        k = model.body_names.index(self.body)

        def one(q):
            z = forward_kinematics(model, q).body.p[k, 2]
            ws, origin = _world(model, q)
            _, frames = _contact_kinematics(model, cfg, ws, origin, jnp.zeros(model.nv, q.dtype))
            return z, jnp.sum(frames.distance < TOUCH)

        return jax.jit(jax.vmap(one))(states.q)

    def mjx_probe(self, d):
        k = self.m.body(self.body).id
        contact = d._impl.contact if hasattr(d, "_impl") else d.contact  # MJX 3.3+: _impl
        return d.xpos[:, k, 2], jnp.sum(contact.dist < TOUCH, axis=-1)


def mjx_chunked(fn):
    """``jax.vmap(fn)`` over a batch; a batch of more than :data:`MJX_CHUNK` (a multiple of
    it) as ``lax.map`` over chunks of ``MJX_CHUNK`` (MJX's vmapped step deadlocks from B = 256
    on the CPU with jaxlib 0.10.2, :func:`benchmarks.sim.bench_mjx`; chunks of 128 run)."""
    vfn = jax.vmap(fn)

    def batched(x):
        B = jax.tree.leaves(x)[0].shape[0]
        if B <= MJX_CHUNK:
            return vfn(x)
        if B % MJX_CHUNK:
            raise ValueError(f"MJX batches above {MJX_CHUNK} must be multiples of it, got {B}")
        k = B // MJX_CHUNK
        xs = jax.tree.map(lambda a: a.reshape((k, MJX_CHUNK) + a.shape[1:]), x)
        ys = jax.lax.map(vfn, xs)
        return jax.tree.map(lambda a: a.reshape((B,) + a.shape[2:]), ys)

    return batched


def take(states, B):
    """The first ``B`` states of a batch, the batch repeated where ``B`` is larger."""
    n = jax.tree.leaves(states)[0].shape[0]
    idx = jnp.arange(B) % n
    return jax.tree.map(lambda a: a[idx], states)


def compile_time(fn, arg):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(arg))
    return time.perf_counter() - t0, out


def interleaved(cases, repeats=5, min_time=0.1):
    """Median seconds per call (wall, process CPU) of each ``name: (fn, arg)``, the names
    timed in turn within each of ``repeats`` rounds (a loaded machine slows all alike)."""
    wall = {k: [] for k in cases}
    cpu = {k: [] for k in cases}
    for _ in range(repeats):
        for k, (fn, arg) in cases.items():
            n, t0, c0 = 0, time.perf_counter(), time.process_time()
            while True:
                jax.block_until_ready(fn(arg))
                n += 1
                if time.perf_counter() - t0 >= min_time:
                    break
            wall[k].append((time.perf_counter() - t0) / n)
            cpu[k].append((time.process_time() - c0) / n)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in cases}


#: ``Constraint(max_contacts=...)`` of the engine "jaxdyn Constraint capped", per scene: above
#: the contact slots that carry impulses during the run (the humanoid's limp fall from
#: ``qpos0``: 50 - 70 of its 277 slots hold a candidate over 2 s, ``sim.contact_counts``; the
#: standing quadruped: its four feet touch, of 20 slots, each one a candidate against the
#: plane); the fidelity table's "dropped" column counts the slots left out that touch or close
#: within the step (``step_info``'s ``contacts_dropped``). Scenes not listed are not capped.
CAPS = {"humanoid": 80, "quadruped": 8}
#: the option "jaxdyn Constraint warm": ``Constraint(iterations=WARM_ITERATIONS,
#: warm_start=True, tolerance=WARM_TOL)``
#: (the cap of :data:`CAPS` where the scene has one): each solve starts from the previous
#: step's impulses and stops once a step moves them by ``WARM_TOL`` of their largest, as MJX's
#: Newton solve starts from ``qacc_warmstart`` and stops at ``opt.tolerance``
WARM_TOL = 1e-7
WARM_ITERATIONS = 300
#: iterations of the converged reference solves of the fidelity table: jaxdyn's projected
#: gradient, MJX's Newton steps (each with its line search; they converge in tens)
REF_ITERATIONS = 10000
MJX_REF_ITERATIONS = 200
#: MJX's batches above this run in chunks of it (:func:`mjx_chunked`)
MJX_CHUNK = 128


def warm_contact(scene):
    """The contact model of the option "jaxdyn Constraint warm" in ``scene``."""
    return sim.Constraint(
        soft=False, iterations=WARM_ITERATIONS, max_contacts=CAPS.get(scene), warm_start=True,
        tolerance=WARM_TOL,
    )  # fmt: skip


#: the engine "jaxdyn soft newton": ``Constraint(soft=True, relaxed=True, solver="newton")``
#: (MuJoCo's primal Newton solve of the same soft problem) with MJX's ``opt.iterations`` and
#: ``opt.tolerance`` (the files' defaults), warm-started as MJX from the previous solve's
#: acceleration (``qacc_warmstart``), over the cap of :data:`CAPS` where the scene has one
NEWTON_TOL = 1e-8
NEWTON_ITERATIONS = 100


def newton_contact(scene):
    """The contact model of the engine "jaxdyn soft newton" in ``scene``."""
    return sim.Constraint(
        soft=True, relaxed=True, solver="newton", iterations=NEWTON_ITERATIONS,
        tolerance=NEWTON_TOL, warm_start=True, max_contacts=CAPS.get(scene),
    )  # fmt: skip


def reference_contact(contact):
    """The converged solve of ``contact``'s problem: ``REF_ITERATIONS`` iterations over every
    slot from a cold start, no early stop."""
    import dataclasses

    return dataclasses.replace(
        contact, iterations=REF_ITERATIONS, max_contacts=None, warm_start=False, tolerance=None
    )


#: each jaxdyn engine's contact model in a scene; "jaxdyn Constraint" is the default a user
#: gets, ``sim_config(sim.Constraint())``: MuJoCo's contact model of the file
#: (:meth:`jaxdyn.io.mjcf.MJCFModel.mujoco_contact`: soft, Newton, the file's iterations and
#: tolerance, warm-started, over every slot); "jaxdyn hard" the hard contact
#: (``soft=False``, the default before), "capped" and "warm" hard too; "jaxdyn soft" is
#: MuJoCo's soft contact with the file's own parameters (``solref``, ``solimp``, ``impratio``,
#: cone) and MuJoCo's convex problem (``relaxed=True``): the problem MJX's Newton solver
#: solves, by the dual solve's projected gradient (``solver="dual"``, 100 iterations, cold start)
CONTACT = {
    "jaxdyn Constraint": lambda name: sim.Constraint(),
    "jaxdyn hard": lambda name: sim.Constraint(soft=False),
    "jaxdyn Constraint capped": lambda name: sim.Constraint(
        soft=False, max_contacts=CAPS.get(name)
    ),
    "jaxdyn Constraint warm": warm_contact,
    "jaxdyn soft": lambda name: sim.Constraint(soft=True, relaxed=True, solver="dual"),
    "jaxdyn soft capped": lambda name: sim.Constraint(
        soft=True, relaxed=True, solver="dual", max_contacts=CAPS.get(name)
    ),
    "jaxdyn soft newton": lambda name: newton_contact(name),
    "jaxdyn Compliant": lambda name: sim.Compliant(),
}
#: engine -> ``(scene, T) -> (step, rollout, prepare)``
ENGINES = {
    **{e: (lambda sc, T, e=e: sc.jaxdyn_fns(CONTACT[e](sc.name), T)) for e in CONTACT},
    "MJX": lambda sc, T: sc.mjx_fns(T),
}


def run_scene(name, batches, rollout_batch, T, sanity_steps, repeats, engines=None, settle=100,
              log=print):  # fmt: skip
    """Rows ``(scene, engine, kind, B, us per env-step, env-steps/s, CPU us per env-step,
    compile s)``, the sanity rows ``(scene, engine, height mean, height min/max, contacts
    mean, finite)`` and the fidelity rows ``(scene, engine, max and median |dv| / (h g), solve
    residual, the reference's residual,
    contacts dropped)`` of one scene.

    Each engine first runs ``rollout_batch`` environments ``settle`` steps (rounded up to
    rollouts of ``T``; the first call is the rollout's compile time) from the perturbed
    initial configurations: the calls are timed from these settled, touching states (MJX's
    carrying its ``qacc_warmstart``, the warm option's its impulses), repeated over the batch
    where a step's batch is larger (:func:`take`)."""
    sc = Scene(name)
    fns = {
        e: make(sc, T)
        for e, make in ENGINES.items()
        if (engines is None or e in engines) and ("capped" not in e or name in CAPS)
    }
    qpos = initial_qpos(sc.m, sc.m.qpos0, rollout_batch, name)
    settled, tc_roll = {}, {}
    for e, (_, roll, prepare) in fns.items():
        a = prepare(sc.mjx_states(qpos) if e == "MJX" else sc.jaxdyn_states(qpos))
        tc_roll[e], a = compile_time(roll, a)
        for _ in range(max(1, -(-settle // T)) - 1):
            a = roll(a)
        settled[e] = jax.block_until_ready(a)
        log(f"{name:9s} {e:24s} settled ({sc.body} z {float(np.mean(_height(sc, e, a))):.4f})")
    fidelity = []
    for e, a in settled.items():
        if e == "MJX":
            dv, res, drop, ref = np.asarray(sc.mjx_fidelity(a)), None, None, None
        elif isinstance(CONTACT[e](name), sim.Constraint):
            dv, res, drop, ref = (np.asarray(x) for x in sc.jaxdyn_fidelity(CONTACT[e](name), a))
        else:
            continue  # Compliant: another contact model, no converged reference
        h = float(sc.m.opt.timestep)
        fidelity.append((name, e, float(dv.max()) / (h * 9.81), float(np.median(dv)) / (h * 9.81),
                         None if res is None else float(res.max()),
                         None if ref is None else float(ref.max()),
                         None if drop is None else int(drop.max())))  # fmt: skip
        log(f"{name:9s} {e:24s} fidelity max|dv|/(h g) {fidelity[-1][2]:.2e}")
    rows, sanity = [], []
    for kind, Bs in (("step", batches), (f"rollout T={T}", [rollout_batch])):
        for B in Bs:
            cases, tc = {}, {}
            for e, (step, roll, _) in fns.items():
                if kind == "step":
                    fn, a = step, take(settled[e], B)
                    tc[e], _ = compile_time(fn, a)
                else:
                    fn, a, tc[e] = roll, settled[e], tc_roll[e]
                log(f"{name:9s} {e:24s} {kind:12s} B={B:4d} compile {tc[e]:6.1f} s")
                cases[e] = (fn, a)
            n = B * (1 if kind == "step" else T)
            for e, (w, c) in interleaved(cases, repeats).items():
                rows.append((name, e, kind, B, w / n * 1e6, n / w, c / n * 1e6, tc[e]))
                log(f"{name:9s} {e:24s} {kind:12s} B={B:4d} {n / w:10.0f} steps/s")
            if kind != "step":  # the sanity check on the rollout's batch
                for e, (fn, a) in cases.items():
                    s = a
                    for _ in range(max(1, sanity_steps // T)):
                        s = fn(s)
                    z, nc = sc.mjx_probe(s) if e == "MJX" else sc.jaxdyn_probe(s)
                    z, nc = np.asarray(z), np.asarray(nc)
                    ok = bool(np.all(np.isfinite(z)))
                    sanity.append((name, e, float(z.mean()), float(z.min()), float(z.max()),
                                   float(nc.mean()), ok))  # fmt: skip
                    log(f"{name:9s} {e:24s} {sc.body} z {z.mean():.4f} contacts {nc.mean():.1f}")
    solver, integrator = _solver_integrator(sc.m.opt.solver, sc.m.opt.integrator)
    info = dict(geoms=sc.m.ngeom, pairs=sc.n_pairs, nv=sc.m.nv, dt=sc.m.opt.timestep,
                body=sc.body, solver=solver, integrator=integrator)  # fmt: skip
    return rows, sanity, fidelity, info


def _height(sc, engine, states):
    return sc.mjx_probe(states)[0] if engine == "MJX" else sc.jaxdyn_probe(states)[0]


def _solver_integrator(solver, integrator):
    """MuJoCo's solver and integrator names (``NEWTON``, ``IMPLICITFAST``) of their codes."""
    import mujoco

    return (
        mujoco.mjtSolver(int(solver)).name.replace("mjSOL_", ""),
        mujoco.mjtIntegrator(int(integrator)).name.replace("mjINT_", ""),
    )


def section(rows, sanity, infos, args, load0, fidelity=()) -> str:
    import mujoco

    lines = [
        SECTION,
        "",
        f"Machine: {cpu_name()}, {platform.machine()}; jax {jax.__version__}, mujoco "
        f"{mujoco.__version__} (MJX's JAX implementation); float32, single-threaded XLA "
        f"({_env.threading_note()}); run {time.strftime('%Y-%m-%d %H:%M')} UTC by "
        f"`python benchmarks/mjx_contact.py`; load average {load0:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end on {os.cpu_count()} cores"
        + (
            " (the machine was shared with other work: wall times are inflated and noisy)"
            if max(load0, os.getloadavg()[0]) > 1.5
            else ""
        )
        + ". The engines were timed interleaved in one process (median of rounds), so their "
        "ratios hold better than the absolute numbers; the CPU column is process CPU time.",
        "",
        "The same MJCF file in both engines, zero controls. jaxdyn: `sim.step` with the file's "
        "`sim_config` (`Constraint`: `Constraint()`, the default, which the file's `sim_config` "
        "makes MuJoCo's contact model of the file: soft contact, MuJoCo's Newton solve with the "
        "file's iterations and tolerance, warm-started, over every contact slot; `hard`: "
        "`Constraint(soft=False)`, the hard contact (the default before); `Compliant`: "
        "spring-damper, reported apart; `Constraint capped`: "
        "`Constraint(soft=False, max_contacts=k)`, the hard solve over the k "
        f"closest contact slots, k = {', '.join(f'{v} ({n})' for n, v in CAPS.items())}, "
        "above the slots that carry impulses: 50 - 70 hold a candidate in the humanoid's fall, "
        "the quadruped stands on 4 feet; `Constraint warm` (an option, off by default): "
        f"`Constraint(soft=False, iterations={WARM_ITERATIONS}, warm_start=True, "
        f"tolerance={WARM_TOL:g})` "
        "with the scene's cap, each solve "
        "started from the previous step's impulses and stopped early, as MJX's Newton solve "
        "starts from `qacc_warmstart` and stops at `opt.tolerance`); `soft`: "
        '`Constraint(soft=True, relaxed=True, solver="dual")`, MuJoCo\'s soft contact with the '
        "file's `solref`, `solimp`, `impratio` and cone (MuJoCo's convex problem: the one MJX's "
        "Newton solver solves; the dual solve's 100 projected-gradient iterations from zero), "
        "`soft capped` with the scene's cap; `soft newton`: the same problem by MuJoCo's primal "
        'Newton solve, the default there (`Constraint(soft=True, relaxed=True, solver="newton", '
        f"iterations={NEWTON_ITERATIONS}, tolerance={NEWTON_TOL:g}, warm_start=True)`, "
        "MJX's iterations and tolerance, with the scene's cap); MJX: `mjx.step` with the "
        "file's solver and integrator. Each engine first settles its batch "
        f"(B = {args.rollout_batch}, {max(1, -(-args.settle // args.T)) * args.T} steps from the "
        "perturbed initial configurations; MJX's states then carry `qacc_warmstart`, the warm "
        "option's its impulses) and is timed from its settled, touching states (repeated over "
        "a larger batch). `step`: `jax.jit(jax.vmap(step))` over B environments; `rollout`: "
        "`lax.scan` over T steps inside it (the final state kept). Steps/s count environment "
        "steps (B per step call, B T per rollout call); compile: the first call, seconds (it "
        "reads JAX's persistent compilation cache where an earlier run filled it). MJX's "
        f"batches above {MJX_CHUNK} run as `lax.map` over chunks of {MJX_CHUNK} environments "
        "(its vmapped step deadlocks from B = 256 with this jaxlib on the CPU, "
        "`benchmarks/sim.py`).",
        "",
        "| scene | geoms | pairs | nv | dt | MuJoCo solver / integrator |",
        "|---|---|---|---|---|---|",
    ]
    for n, i in infos.items():
        lines.append(f"| {n} | {i['geoms']} | {i['pairs']} | {i['nv']} | {i['dt']:g} | "
                     f"{i['solver']} / {i['integrator']} |")  # fmt: skip
    lines += [
        "",
        "| scene | engine | call | B | steps/s | us per env-step | CPU us per env-step | "
        "vs MJX | compile (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    mjx = {(r[0], r[2], r[3]): r[5] for r in rows if r[1] == "MJX"}
    for r in rows:
        ratio = "" if r[1] == "MJX" else f"{r[5] / mjx[(r[0], r[2], r[3])]:.2f}x"
        lines.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[5]:,.0f} | {r[4]:.1f} | "
                     f"{r[6]:.1f} | {ratio} | {r[7]:.1f} |")  # fmt: skip
    lines += [
        "",
        "Fidelity: one step from the settled states (the rollout's batch, the warm option "
        "starting from its carried impulses, MJX from its `qacc_warmstart`) against the same "
        "engine's converged solve of the same problem, float32: jaxdyn's "
        f"contact model with `iterations={REF_ITERATIONS}` over every slot from zero (hard, or "
        "MuJoCo's soft problem for `Constraint` and the `soft` engines), MJX's step with "
        f"`opt.iterations = {MJX_REF_ITERATIONS}`, `opt.tolerance = 1e-12`. "
        "`max |dv| / (h g)`: the largest difference of the next velocities (any dof, any "
        "environment) in units of "
        "the velocity gravity adds in one step, and its median over the environments; "
        "residual: jaxdyn's relative fixed-point residual of the solve (`step_info`, largest "
        "over the batch), and its reference's; dropped: contact slots left out by the cap "
        "that touch or close within the step (largest over the batch).",
        "",
        "| scene | engine | max abs dv / (h g) | median | solve residual | reference's "
        "residual | dropped |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in fidelity:
        res, ref, drop = ("" if x is None else f"{x:.1e}" for x in f[4:7])
        lines.append(f"| {f[0]} | {f[1]} | {f[2]:.1e} | {f[3]:.1e} | {res} | {ref} | "
                     f"{'' if f[6] is None else f[6]} |")  # fmt: skip
    lines += [
        "",
        f"Sanity: the rollout's batch (B = {args.rollout_batch}) after "
        f"{max(1, args.sanity_steps // args.T) * args.T} steps after the settling, the same "
        "initial states in both engines: the height of a body (m; mean, min-max over the "
        f"batch) and the contacts touching (closer than {TOUCH * 1e3:g} mm: jaxdyn's contact "
        "slots, MJX's contacts; "
        "the two engines' contact sets differ in number: a sphere on a box face, a box on the "
        "floor), mean per environment.",
        "",
        "| scene | engine | body | height (m) | min - max | contacts |",
        "|---|---|---|---|---|---|",
    ]
    for s in sanity:
        z = f"{s[2]:.4f}" if s[6] else "diverged"
        lines.append(f"| {s[0]} | {s[1]} | {infos[s[0]]['body']} | {z} | {s[3]:.4f} - "
                     f"{s[4]:.4f} | {s[5]:.1f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv=None):
    global WARM_TOL, WARM_ITERATIONS  # --warm-tolerance, --warm-iterations
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenes", default="push_cube,quadruped,humanoid")
    ap.add_argument("--batches", default="1,64,1024", help="batch sizes of the step (MJX's "
                    f"above {MJX_CHUNK}: multiples of it)")  # fmt: skip
    ap.add_argument("--rollout-batch", type=int, default=64, help=f"at most {MJX_CHUNK}")
    ap.add_argument("--settle", type=int, default=100, help="steps before the timed calls")
    ap.add_argument("--T", type=int, default=10, help="steps per rollout call")
    ap.add_argument("--sanity-steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"a comma-separated subset of {', '.join(ENGINES)} (MJX is the ratios' reference)",
    )
    ap.add_argument("--warm-tolerance", type=float, default=WARM_TOL)
    ap.add_argument("--warm-iterations", type=int, default=WARM_ITERATIONS)
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    args = ap.parse_args(argv)
    WARM_TOL, WARM_ITERATIONS = args.warm_tolerance, args.warm_iterations
    _env.single_threaded()  # before JAX's backend starts (its first computation)
    load0 = os.getloadavg()[0]
    batches = [int(b) for b in args.batches.split(",")]
    engines = args.engines.split(",")
    if "MJX" not in engines or set(engines) - set(ENGINES):
        ap.error(f"--engines: a subset of {', '.join(ENGINES)} with MJX, got {args.engines!r}")
    if args.rollout_batch > MJX_CHUNK:
        ap.error(f"--rollout-batch: at most {MJX_CHUNK}, got {args.rollout_batch}")
    rows, sanity, fidelity, infos = [], [], [], {}
    for name in args.scenes.split(","):
        r, s, f, i = run_scene(name, batches, args.rollout_batch, args.T, args.sanity_steps,
                               args.repeats, engines, args.settle)  # fmt: skip
        rows += r
        sanity += s
        fidelity += f
        infos[name] = i
        text = section(rows, sanity, infos, args, load0, fidelity)
        if args.out:  # after each scene: a long run's finished scenes are kept
            write_section(args.out, keep_other_scenes(text, args.out, infos))
    print(text)


def keep_other_scenes(text, out, infos):
    """``text`` with the table rows of the scenes it does not have taken from the section
    already in ``out`` (``--scenes humanoid`` replaces the humanoid's rows only), each table's
    kept rows after this run's, and a note naming the runs."""
    from _env import _sections

    path = Path(out)
    if not path.exists():
        return text
    old = dict(_sections(path.read_text())[1]).get(SECTION)
    if not old:
        return text
    lines = text.splitlines()
    kept, note, sane = [], None, ""
    for ln in old:
        cells = [c.strip() for c in ln.split("|")]
        if ln.startswith("| ") and len(cells) > 2 and cells[1] not in infos and cells[1] != "scene":
            codes = re.fullmatch(r"(\d+) / (\d+)", cells[-2])  # a first run printed the codes
            if codes:
                ln = ln.replace(cells[-2], " / ".join(_solver_integrator(*codes.groups())))
            kept.append(ln)
        if ln.startswith("Machine: "):
            note = ln
        m = re.match(r"Sanity: the rollout's batch \((B = \d+)\) after (\d+) steps", ln)
        if m:
            sane = f" (its sanity rows: {m.group(1)}, {m.group(2)} steps)"
    if not kept:
        return text
    tables = [i for i, ln in enumerate(lines) if ln.startswith("|---")]
    out_lines, t = list(lines), 0
    for start in reversed(tables):  # after the last row of each table
        end = start + 1
        while end < len(lines) and lines[end].startswith("| "):
            end += 1
        ncol = lines[start].count("|")
        rows = [ln for ln in kept if ln.count("|") == ncol and ln not in out_lines]
        # the tables have 7, 10, 8 and 7 columns: the sanity and scene tables by content
        if start == tables[0]:
            rows = [ln for ln in rows if "/" in ln.split("|")[-2]]
        elif start == tables[-1]:
            rows = [ln for ln in rows if "/" not in ln.split("|")[-2]]
        out_lines[end:end] = rows
        t += len(rows)
    if t and note:
        i = next(k for k, ln in enumerate(out_lines) if ln.startswith("Machine: "))
        scenes = sorted({ln.split("|")[1].strip() for ln in kept})
        runs: dict[tuple[str, str], list[str]] = {}
        for scene in scenes:
            runs.setdefault(_run_of(scene, note[9:], sane), []).append(scene)
        for (desc, its_sane), names in runs.items():
            out_lines[i] += (
                f" The rows of {', '.join(names)} are from an earlier run{its_sane}: {desc}"
            )
    return "\n".join(out_lines)


_EARLIER = re.compile(
    r" The rows of ([\w, ]+) are from an earlier run( \(its sanity rows: [^)]*\))?: "
)


def _run_of(scene, note, sane):
    """The description (and sanity note) of the run that measured ``scene``'s rows, from a
    section's machine note: its own run's description, followed by one "The rows of ... are
    from an earlier run: ..." part per earlier run whose rows it kept (the part that names
    ``scene``; none: the section's own run, whose sanity note is ``sane``)."""
    parts = _EARLIER.split(note)  # desc0, names1, sane1, desc1, names2, sane2, desc2, ...
    for k in range(1, len(parts) - 2, 3):
        if scene in [s.strip() for s in parts[k].split(",")]:
            return parts[k + 2].strip(), parts[k + 1] or ""
    return parts[0].strip(), sane


if __name__ == "__main__":
    main()

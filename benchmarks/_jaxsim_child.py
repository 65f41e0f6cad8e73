"""jaxsim side of ``benchmarks/sim.py``: one robot, one contact model, one batch size.

Run by ``sim.py`` in a child process, under the interpreter given by ``--jaxsim-python``
(jaxsim may live in its own virtual environment), as ``python _jaxsim_child.py SPEC_JSON``.
It imports only ``_env``, numpy, JAX and jaxsim -- not jaxdyn -- and prints one JSON line:

* ``mode="time"``: ``t`` (best seconds per call of ``jax.jit(jax.vmap(step))``), ``tc``
  (lower + compile seconds), ``ok`` (every state finite after one step);
* ``mode="rollout"``: ``z`` (base heights after ``steps`` steps), ``ok`` (all finite);
* ``mode="load"``: nothing else;

all with ``info`` (jaxsim's and JAX's versions, dofs, total mass, number of collidable points);
or ``{"error": "...", "stage": "import" | "load"}`` when jaxsim does not import or the model
does not load.

The URDF is copied into a temporary directory without its ``<visual>`` elements and zero-mass
``<inertial>`` elements, its ``<collision>`` elements replaced by the benchmark's contact
geometry (``spec["spheres"]``: spheres of a radius on the named links; ``spec["soles"]``: a box
per named link whose 4 bottom corners are the given sole points).
jaxsim turns a sphere into points sampled on its surface (``JAXSIM_COLLISION_SPHERE_POINTS``,
here only the lower half: ``JAXSIM_COLLISION_USE_BOTTOM_ONLY=1``) and a box into its corners.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _env  # noqa: E402

SPEC = json.loads(sys.argv[1])
_env.single_threaded()
_env.reuse_freed_buffers()  # as the jaxdyn side of benchmarks/sim.py
# jaxsim turns on float64 at import unless JAX_ENABLE_X64=0.
os.environ["JAX_ENABLE_X64"] = "1" if SPEC["dtype"] == "float64" else "0"
os.environ["JAXSIM_COLLISION_USE_BOTTOM_ONLY"] = "1"
os.environ["JAXSIM_COLLISION_SPHERE_POINTS"] = str(SPEC.get("sphere_points", 50))
# jaxdyn's default joint-limit spring (sim.JointLimits: 1e3 N m/rad, 10 N m s/rad); jaxsim
# reads these where the URDF's <limit> has no stiffness / dissipation.
os.environ["JAXSIM_JOINT_POSITION_LIMIT_SPRING"] = str(SPEC.get("limit_spring", 1e3))
os.environ["JAXSIM_JOINT_POSITION_LIMIT_DAMPER"] = str(SPEC.get("limit_damper", 10.0))
# rod checks at import that `gz sdf` / `ign sdf` writes SDF >= 1.10; Debian's sdformat 12
# writes 1.9, which rod parses (the robots here use nothing newer).
os.environ.setdefault("ROD_SKIP_SDFORMAT_CHECK", "1")


def contact_urdf(spec, tmpdir):
    """The URDF with its collisions replaced by the benchmark's contact geometry."""
    tree = ET.parse(spec["urdf"])
    root = tree.getroot()
    links = {ln.get("name"): ln for ln in root.findall("link")}
    for ln in links.values():
        # Meshes are not read (visuals) or replaced (collisions).
        for c in ln.findall("collision") + ln.findall("visual"):
            ln.remove(c)
        # sdformat 12 lumps fixed-joint children into their parent: a zero-mass <inertial>
        # (talos_full's camera frames) gives it a NaN centre of mass ("Pose values must be
        # finite"); without the element the link is the same massless frame.
        i = ln.find("inertial")
        m = i.find("mass") if i is not None else None
        if m is not None and float(m.get("value", 0.0)) <= 0.0:
            ln.remove(i)
    sph = spec.get("spheres")
    if sph:
        for name in sph["links"]:
            c = ET.SubElement(links[name], "collision", name=f"{name}_contact")
            g = ET.SubElement(c, "geometry")
            ET.SubElement(g, "sphere", radius=repr(float(sph["radius"])))
    soles = spec.get("soles")
    if soles:
        pts = soles["points"]  # (x, y, 0) corners of a rectangle in the sole frame
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        cx, cy = (max(xs) + min(xs)) / 2, (max(ys) + min(ys)) / 2
        sx, sy, h = max(xs) - min(xs), max(ys) - min(ys), float(soles.get("height", 0.01))
        for name in soles["links"]:
            c = ET.SubElement(links[name], "collision", name=f"{name}_contact")
            ET.SubElement(c, "origin", xyz=f"{cx!r} {cy!r} {h / 2!r}", rpy="0 0 0")
            g = ET.SubElement(c, "geometry")
            ET.SubElement(g, "box", size=f"{sx!r} {sy!r} {h!r}")
    out = os.path.join(tmpdir, os.path.basename(spec["urdf"]))
    tree.write(out)
    return out


def efforts(spec, joint_names):
    """URDF effort limits in jaxsim's joint order (inf where absent or 0, as jaxdyn)."""
    lim = {}
    for j in ET.parse(spec["urdf"]).getroot().findall("joint"):
        el = j.find("limit")
        e = float(el.get("effort", 0.0)) if el is not None else 0.0
        lim[j.get("name")] = e if e > 0 else float("inf")
    return [lim.get(n, float("inf")) for n in joint_names]


def build(spec, path):
    import jaxsim.api as js
    import jaxsim.rbda.contacts as jc

    kind, mu = spec["contact_model"], spec["mu"]
    if kind == "soft":
        # p = q = 0: the linear spring-damper F = K d + D d' (jaxdyn's Compliant), per point.
        cm = jc.SoftContacts.build()
        cp = jc.SoftContactsParams.build(K=spec["stiffness"], D=spec["damping"], mu=mu, p=0, q=0)
    elif kind == "relaxed_rigid":
        cm = jc.RelaxedRigidContacts.build()
        cp = jc.RelaxedRigidContactsParams.build(mu=mu)
    elif kind == "rigid":
        cm = jc.RigidContacts.build()
        cp = jc.RigidContactsParams.build(mu=mu)
    else:
        raise ValueError(f"unknown jaxsim contact model {kind!r}")
    integrator = getattr(js.model.IntegratorType, spec.get("integrator", "SemiImplicitEuler"))
    return js.model.JaxSimModel.build_from_model_description(
        path,
        time_step=spec["dt"],
        contact_model=cm,
        contact_params=cp,
        integrator=integrator,
    )


def main():
    t0 = time.perf_counter()
    try:
        import jax
        import jax.numpy as jnp
        import jaxsim
        import jaxsim.api as js
    except Exception as e:  # noqa: BLE001 -- reported to the parent
        err = f"import jaxsim: {type(e).__name__}: {e}"[:300]
        print(json.dumps(dict(error=err, stage="import")))
        return
    spec = SPEC
    try:
        with tempfile.TemporaryDirectory() as tmp:
            model = build(spec, contact_urdf(spec, tmp))
    except Exception as e:  # noqa: BLE001 -- a robot jaxsim cannot load gets a row saying why
        msg = " ".join(str(e).split())
        print(json.dumps(dict(error=f"{type(e).__name__}: {msg}"[:300], stage="load")))
        return
    tb = time.perf_counter() - t0
    dtype = jnp.dtype(spec["dtype"])
    B, kp, kd = spec["batch"], spec["kp"], spec["kd"]
    n = model.dofs()
    info = dict(
        jaxsim=jaxsim.__version__,
        jax=jax.__version__,
        dofs=n,
        mass=float(js.model.total_mass(model)),
        points=int(model.kin_dyn_parameters.contact_parameters.point.shape[0]),
        build_s=tb,
    )
    if spec["mode"] == "load":
        print(json.dumps(dict(info=info)))
        return
    eff = jnp.asarray(efforts(spec, model.joint_names()), dtype)

    # States as sim.py's batch_states: the base upright, `clearance` above its standing
    # height, the joints perturbed by 0.05 rad (normal) around the PD reference (zero).
    data0 = js.data.JaxSimModelData.build(
        model=model,
        base_position=jnp.array([0.0, 0.0, spec["height"] + spec["clearance"]]),
        velocity_representation=js.common.VelRepr.Inertial,
    )
    dq = 0.05 * jax.random.normal(jax.random.PRNGKey(spec.get("seed", 0)), (B, n), dtype)
    batch = jax.vmap(lambda s: data0.replace(model=model, joint_positions=s))(dq)
    ref = jnp.zeros(n, dtype)

    def step(d):
        s, sd = d.joint_positions, d.joint_velocities
        tau = jnp.clip(kp * (ref - s) - kd * sd, -eff, eff)
        return js.model.step(model, d, joint_force_references=tau)

    f = jax.jit(jax.vmap(step))
    t1 = time.perf_counter()
    c = f  # timed through the jitted function (a Compiled object's call costs Python time)
    jax.block_until_ready(c(batch))
    tc = time.perf_counter() - t1
    if spec["mode"] == "rollout":
        d = batch
        for _ in range(spec["steps"]):
            d = c(d)
        z = jax.device_get(d.base_position[:, 2])
        ok = bool(jnp.all(jnp.isfinite(d.joint_positions))) and bool(jnp.all(jnp.isfinite(z)))
        print(json.dumps(dict(z=[float(v) for v in z], ok=ok, tc=tc, info=info)))
        return
    t = _env.timed(c, (batch,))
    ok = bool(jnp.all(jnp.isfinite(c(batch).joint_positions)))
    print(json.dumps(dict(t=t, tc=tc, ok=ok, info=info)))


if __name__ == "__main__":
    main()

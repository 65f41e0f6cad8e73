"""Drop a robot on the ground and keep the trajectory: what ``jaxdyn sim`` films."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .renderer import Progress
from .scene import Scene, _geom_points

if TYPE_CHECKING:
    from ..sim.geometry import ContactSet
    from .scene import Scene

__all__ = ["contacts_from_geometry", "drop"]


def contacts_from_geometry(scene: Scene, max_boxes: int = 64) -> ContactSet:
    """A :class:`jaxdyn.sim.ContactSet` of the scene's drawn geometry: each frame's geometry
    bounded by a box (its 8 corners touch the ground), for frames on moving bodies with mass."""
    from .. import sim

    model = scene.model
    t = model.topo
    mass = np.asarray(model.mass, float)
    # a body carries mass below it (contact_set refuses a body whose subtree is massless)
    sub = mass.copy()
    for b in range(t.nb - 1, -1, -1):
        p = int(t.parent[b])
        if p >= 0:
            sub[p] += sub[b]
    prims = []
    I = np.eye(3), np.zeros(3)
    for f in sorted({g.frame for g in scene.geoms if g.frame >= 0}):
        b = int(t.frame_parent[f])
        if b < 0 or b >= t.nb or sub[b] <= 0:
            continue
        pts = np.concatenate(
            [
                _geom_points(g, *[x[None].repeat(f + 1, 0) for x in I])
                for g in scene.geoms
                if g.frame == f
            ]
        )
        lo, hi = pts.min(0), pts.max(0)
        size = np.maximum(hi - lo, 1e-3)
        prims.append(sim.Box(model.frame_names[f], tuple(size), pos=tuple((lo + hi) / 2)))
        if len(prims) >= max_boxes:
            break
    if not prims:
        raise ValueError(f"contacts_from_geometry: {model.name!r}: no geometry on a moving body")
    return sim.contact_set(model, prims)


def drop(
    scene: Scene,
    seconds: float = 2.0,
    *,
    height: float = 0.3,
    dt: float = 2e-3,
    hold: bool = True,
    contacts: ContactSet | None = None,
    forces: bool = True,
    progress: bool | None = None,
) -> tuple[np.ndarray, np.ndarray | None, Scene]:
    """Simulate ``scene.model`` dropped from ``height`` metres above standing on the ground
    (floating base) or released from its nominal pose (fixed base), with compliant contact on
    ``contacts`` (default: the scene's contact set, else :func:`contacts_from_geometry`).

    ``hold``: joint position servos (PD, gains scaled with the mass) keep the nominal posture;
    otherwise the robot falls limp. Returns ``(q (T, nq), forces (T, nc, 3), scene)``: the
    configurations every ``dt``, the contact forces (``None`` with ``forces=False``) and
    the scene with the contact set used. ``progress``: report the steps simulated on stderr
    (about 20 updates from inside the compiled rollout; default: when stderr is a terminal)."""
    import jax
    import jax.numpy as jnp

    from .. import sim

    model = scene.model
    if contacts is None:
        contacts = scene.contacts if scene.contacts is not None else contacts_from_geometry(scene)
    q0 = scene.nominal_q()
    if model.floating_base:
        q0[2] += height
    n = max(int(round(seconds / dt)), 1)
    total = float(np.sum(np.asarray(model.mass)))
    if hold:
        kp = 10.0 * total
        actuator = sim.PD(kp, 0.1 * np.sqrt(kp))
        nu = actuator.size(model)
        ref = jnp.asarray(q0[model.nq - nu :]) if nu else jnp.zeros(0)
    else:
        actuator = sim.Torque()
        ref = jnp.zeros(actuator.size(model))
    terrain = scene.terrain if scene.terrain is not None else sim.Plane()
    cfg = sim.SimConfig(
        dt=dt, contact=sim.Compliant(), contacts=contacts, terrain=terrain, actuator=actuator
    )
    dtype = np.asarray(model.Xtree_p).dtype
    s0 = sim.State(jnp.asarray(q0, dtype), jnp.zeros(model.nv, dtype), 0.0)
    report = Progress("simulating steps", n, progress)
    every = max(n // 20, 1)

    def policy(st):
        if report.enabled:  # steps done so far, from the state's time
            k = jnp.round(st.t / dt).astype(jnp.int32)
            jax.lax.cond(
                (k % every == 0) & (k > 0) & (k < n - 1),
                lambda: jax.debug.callback(lambda i: report(int(i) - 1), k),
                lambda: None,
            )
        return ref

    traj = jax.jit(lambda s: sim.rollout(model, s, policy=policy, n_steps=n, cfg=cfg))(s0)
    traj.q.block_until_ready()
    report(n - 1)
    if not forces:
        out = Scene(model, scene.geoms, terrain=scene.terrain, contacts=contacts, name=scene.name)
        return np.asarray(traj.q, float), None, out
    forces = jax.jit(jax.vmap(lambda q, v: sim.contact_forces(model, sim.State(q, v), ref, cfg)))(
        traj.q, traj.v
    )
    out = Scene(model, scene.geoms, terrain=scene.terrain, contacts=contacts, name=scene.name)
    return np.asarray(traj.q, float), np.asarray(forces, float), out

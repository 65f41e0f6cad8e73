"""A ball thrown at a standing quadruped, a crate beside it: a scene composed in Python.

``jaxdyn.sim.Scene`` puts the bundled ``quad12`` (a floating base; contact spheres on its feet
and one on its body), a free ball, a free crate and the ground in one model with several
roots; its ``sim_config`` steps everything (the feet and the crate's corners on the ground,
the ball against the body and the crate) in one ``jax.jit``-ed rollout, here a batch of three
throws under ``jax.vmap``. Position servos hold the quadruped's stance.

    python examples/scene_objects.py

Saves ``figures/scene_objects.mp4`` (with the ``viz`` extra) and ``figures/scene_objects.png``
(the ball's and the body's heights).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxdyn
from jaxdyn import robots, sim

from _outputs import save_scene_rollout

jax.config.update("jax_enable_x64", True)

FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")
POSE = {"HAA": 0.0, "HFE": 0.7, "KFE": -1.4}  # standing joint angles by joint suffix
STEPS, DT = 400, 2e-3


def main():
    t0 = time.time()
    quad = robots.load("quad12")
    joints = np.array([POSE[n.split("_")[-1]] for n in quad.joint_names[1:]])
    q = np.concatenate([[0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0], joints])
    feet = np.asarray(jax.jit(jaxdyn.forward_kinematics)(quad, q).frame.p)
    q[2] = -feet[[quad.frame_index(f) for f in FEET], 2].min() + 0.02  # feet on the ground

    scene = sim.Scene(
        sim.Robot(
            quad,
            name="quad",
            q=q,
            contacts=[sim.Sphere(f, 0.02) for f in FEET] + [sim.Sphere("base_link", 0.09)],
        ),
        objects=[
            sim.FreeSphere("ball", 0.05, mass=0.3, pos=(0.0, -0.8, 0.25)),
            sim.FreeBox("crate", (0.2, 0.2, 0.2), mass=2.0, pos=(0.05, 0.45, 0.1)),
        ],
        world=[sim.Ground()],
    )
    print(scene)
    names = scene.joints("quad")
    targets = jnp.asarray([POSE[n.split("_")[-1]] for n in names])
    cfg = scene.sim_config(
        sim.Constraint(friction=0.8), dt=DT, actuator=sim.PD(kp=20.0, kd=0.5, dofs=names)
    )

    # three throws at the body's centre: the ball's world velocity (its free joint's v is
    # [w; v] in its own axes, which start aligned with the world's). Aimed through the centre
    # the ball gets no spin: jaxdyn.sim integrates a free body's velocity in its own axes,
    # explicitly in the spin, so a ball spinning at ~100 rad/s gains energy at dt = 2 ms
    throws = np.array([[0.0, 4.0, 1.03], [0.0, 5.0, 0.85], [0.0, 6.0, 0.73]])
    v = np.zeros((len(throws), scene.model.nv))
    v[:, scene.v_index["ball"][3:]] = throws
    states = scene.state(v=v)  # q0 broadcast to the batch of three
    ctrl = jnp.broadcast_to(targets, (STEPS, len(names)))
    run = jax.jit(jax.vmap(lambda s: sim.rollout(scene.model, s, ctrl, cfg=cfg)))
    print(f"rolling out {len(throws)} throws x {STEPS} steps (compiles once) ...")
    tr = run(states)
    qs = np.asarray(tr.q)
    print(f"done in {time.time() - t0:.1f} s")

    ball, crate, base = (scene.q_index[n] for n in ("ball", "crate", "quad"))
    for k, vt in enumerate(throws):
        print(
            f"throw {vt}: ball ends at {np.round(qs[k, -1, ball[:3]], 3)}, crate moved "
            f"{np.linalg.norm(qs[k, -1, crate[:3]] - scene.q0[crate[:3]]) * 1e3:.1f} mm, "
            f"body moved {np.linalg.norm(qs[k, -1, base[:3]] - scene.q0[base[:3]]) * 1e3:.1f} mm"
        )
    save_scene_rollout(
        scene,
        qs[1],
        "scene_objects",
        DT,
        {"ball z": qs[1, :, ball[2]], "body z": qs[1, :, base[2]], "crate z": qs[1, :, crate[2]]},
        ylabel="height (m)",
        title="a ball thrown at quad12 (jaxdyn.sim.Scene)",
    )


if __name__ == "__main__":
    main()

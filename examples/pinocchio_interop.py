"""Pinocchio interop: the same robot (Solo-12) in jaxdyn and in Pinocchio, compared.

Needs ``pip install pin example-robot-data`` (both are in the ``test`` extra).

jaxdyn and Pinocchio differ in joint order (jaxdyn: by depth; Pinocchio: depth-first), in the
free-flyer layout (jaxdyn ``q = [x y z qw qx qy qz]``, ``v = [ω; v]``; Pinocchio
``q = [x y z qx qy qz qw]``, ``v = [v; ω]``) and in spatial-vector order.  The converter
``jaxdyn.interop.pinocchio.Converter`` maps configurations, velocities, torques, matrices and
Jacobians between the two; everything below goes through it.

Run: ``python examples/pinocchio_interop.py``
"""

import jax

jax.config.update("jax_enable_x64", True)  # compare in float64

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402

import jaxdyn  # noqa: E402
from jaxdyn import robots  # noqa: E402
from jaxdyn.interop.pinocchio import Converter  # noqa: E402

path, floating = robots.resolve("solo12")  # the URDF shipped by example-robot-data
model = jaxdyn.load_urdf(str(path), floating_base=floating).astype(jnp.float64)
pin_model = pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())
pin_data = pin_model.createData()
conv = Converter(model, pin_model)
print(f"{path.name}: jaxdyn {model}")
print(
    f"{'':{len(path.name)}}  pinocchio nq={pin_model.nq} nv={pin_model.nv} "
    f"njoints={pin_model.njoints}"
)
print("jaxdyn joint order:   ", list(model.joint_names))
print("pinocchio joint order:", list(pin_model.names)[1:])

feet = [f for f in model.frame_names if f.endswith("_FOOT")]
rnea = jax.jit(jaxdyn.rnea)
crba = jax.jit(jaxdyn.crba)
aba = jax.jit(jaxdyn.aba)
jac = jax.jit(jaxdyn.jacobian, static_argnums=(2, 3))

worst = dict(rnea=0.0, crba=0.0, aba=0.0, jacobian=0.0, q_roundtrip=0.0)


def rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / max(np.max(np.abs(b)), 1.0))


key = jax.random.PRNGKey(0)
for _ in range(10):
    key, kq, kv, ka = jax.random.split(key, 4)
    q = jaxdyn.random_configuration(model, kq, lower=-1.0, upper=1.0)
    v = jax.random.normal(kv, (model.nv,))
    a = jax.random.normal(ka, (model.nv,))
    q_np, v_np, a_np = (np.asarray(x) for x in (q, v, a))
    # numpy in -> numpy out; Pinocchio order
    q_p, v_p, a_p = conv.q_to_pin(q_np), conv.v_to_pin(v_np), conv.v_to_pin(a_np)
    worst["q_roundtrip"] = max(worst["q_roundtrip"], rel(conv.q_from_pin(q_p), q_np))

    tau_pin = pin.rnea(pin_model, pin_data, q_p, v_p, a_p)
    tau = conv.v_to_pin(np.asarray(rnea(model, q, v, a)))
    worst["rnea"] = max(worst["rnea"], rel(tau, tau_pin))

    M_pin = pin.crba(pin_model, pin_data, q_p)
    M_pin = np.triu(M_pin) + np.triu(M_pin, 1).T  # Pinocchio fills the upper triangle only
    M = conv.matrix_to_pin(np.asarray(crba(model, q)))
    worst["crba"] = max(worst["crba"], rel(M, M_pin))

    qdd_pin = pin.aba(pin_model, pin_data, q_p, v_p, tau_pin)
    qdd = conv.v_to_pin(np.asarray(aba(model, q, v, conv.v_from_pin(tau_pin))))
    worst["aba"] = max(worst["aba"], rel(qdd, qdd_pin))

    for foot in feet:
        fid = pin_model.getFrameId(foot)
        for ref, pin_ref in (
            ("local_world_aligned", pin.LOCAL_WORLD_ALIGNED),
            ("local", pin.LOCAL),
            ("world", pin.WORLD),
        ):
            J_pin = pin.computeFrameJacobian(pin_model, pin_data, q_p, fid, pin_ref)
            J = conv.jacobian_to_pin(np.asarray(jac(model, q, foot, ref)))
            worst["jacobian"] = max(worst["jacobian"], rel(J, J_pin))

print(f"\n10 random states; Jacobians of {feet} in 3 reference frames each")
for k, e in worst.items():
    print(f"  {k:<12} max relative difference jaxdyn vs Pinocchio: {e:.1e}")
ok = max(worst.values()) < 1e-9
print("agreement:", "OK" if ok else "FAILED")
raise SystemExit(0 if ok else 1)

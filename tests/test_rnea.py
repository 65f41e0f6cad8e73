"""RNEA (inverse dynamics) against Pinocchio and against jaxdyn's other algorithms, float64.

* against Pinocchio: ``rnea`` with / without external forces (body and world forms), the bias
  forces ``rnea(q, v, 0)`` and the gravity forces ``rnea(q, 0, 0)``, with CRBA's mass matrix in
  the same sweep (``test_inverse_dynamics_and_mass_matrix``; CRBA's identities are in
  test_crba.py);
* identities: ``bias_forces`` / ``gravity_forces`` against RNEA, external forces through the
  frame Jacobians, ``jax.grad`` with respect to the model's parameters against central finite
  differences.

Comparisons are ``max|jaxdyn - ref| <= rtol * max(1, max|ref|)`` (``oracle.assert_close``); the
robots, random states and the compiled function of every compared quantity are in oracle.py.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn

from oracle import (
    DYNAMICS_KEYS,
    NAMED,
    RTOL_ID,
    STATES,
    assert_close,
    compare,
    identity_case,
    identity_params,
    robot_case,
)

# the oracle sweeps (test_rnea, test_crba, test_aba, test_kinematics, test_pinocchio) share one
# compiled function per robot (``oracle.Case.jx``): under ``-n`` one worker runs them all
# (``oracle.SHARED_WORKER_FILES``)

#: Identities through automatic differentiation against finite differences: central
#: differences with step h have truncation error ~h^2 and rounding error ~eps/h.
RTOL_FD = 1e-7
FD_STEP = 1e-5

PARAMETERS = {
    # leaf name -> a few flat indices to probe
    "mass": (0, 3, 7),
    "com": (1, 14, 20),
    "inertia": (0, 4, 13, 40),
    "Xtree_p": (2, 9, 25),
    "Xtree_R": (1, 30),
    "dof_axis": (5, 40),
    "gravity": (0, 2),
}


@pytest.mark.parametrize("i", STATES)
@pytest.mark.parametrize("robot_case", NAMED, indirect=True)
def test_inverse_dynamics_and_mass_matrix(robot_case, i):
    """RNEA at (v, a) without / with external forces, at (v, 0) (bias forces, against
    ``pin.rnea``) and at (0, 0) (against ``pin.computeGeneralizedGravity``), in its body form
    (a batch of 64) and with external forces in its world form (a single call); CRBA."""
    compare(robot_case, i, DYNAMICS_KEYS)


@pytest.mark.parametrize("name", identity_params(["arm7", "quad12"]))
def test_bias_forces_and_gravity_forces(name):
    """The public ``bias_forces(q, v)`` and ``gravity_forces(q)`` equal RNEA at ``a = 0`` and
    at ``v = a = 0`` (which the Pinocchio comparison checks on every robot)."""
    case = identity_case(name)
    fn = case.jit(
        "bias_gravity", lambda m, q, v: (jaxdyn.bias_forces(m, q, v), jaxdyn.gravity_forces(m, q))
    )
    for i, s in enumerate(case.states):
        r = case.jx(i)
        bias, grav = fn(case.model, s["q"], s["v"])
        assert_close(bias, r["bias"], RTOL_ID, err_msg=f"{name} {i}: bias_forces")
        assert_close(grav, r["gravity"], RTOL_ID, err_msg=f"{name} {i}: gravity_forces")
        assert np.max(np.abs(grav)) > 1e-3, "gravity_forces vanishes"


def test_external_forces_enter_through_jacobians():
    """``rnea(q, v, a, f_ext) - rnea(q, v, a) = -sum_b J_b^T f_b`` with ``J_b`` the LOCAL
    Jacobian of body b's frame and ``f_b`` the body-frame force (quad12: the lower-leg links
    carry bodies, so their link frames are the body frames)."""
    case = robot_case("quad12")
    m = case.model
    f_ext = np.zeros((m.nb, 6))
    bodies = [m.body_names.index(n) for n in ("FL_LOWER_LEG", "HR_LOWER_LEG")]
    rng = np.random.default_rng(3)
    for b in bodies:
        f_ext[b] = rng.normal(size=6)
    s = case.states[0]
    fn = case.jit(
        "rnea_jac",
        lambda model, q, v, a, f: (
            jaxdyn.rnea(model, q, v, a, f) - jaxdyn.rnea(model, q, v, a),
            [jaxdyn.jacobian(model, q, m.body_names[b], "local") for b in bodies],
        ),
    )
    dtau, Js = fn(m, s["q"], s["v"], s["a"], f_ext)
    expected = -sum(np.asarray(J).T @ f_ext[b] for J, b in zip(Js, bodies))
    assert_close(dtau, expected, RTOL_ID, err_msg="rnea external forces vs -J^T f")


def _weighted_rnea(model, q, v, a, w):
    return jnp.dot(w, jaxdyn.rnea(model, q, v, a))


def test_gradient_wrt_model_parameters():
    """``jax.grad`` of ``w . rnea`` with respect to the model's parameter leaves against
    central finite differences (leaves replaced with ``eqx.tree_at``), on quad12."""
    robot = "quad12"
    case = robot_case(robot)
    m = case.model
    s = case.states[0]
    w = np.random.default_rng(7).normal(size=m.nv)
    f = case.jit("weighted_rnea", _weighted_rnea)
    g = case.jit("weighted_rnea_grad", jax.grad(_weighted_rnea))(m, s["q"], s["v"], s["a"], w)
    for leaf, indices in PARAMETERS.items():
        value = np.asarray(getattr(m, leaf))
        grad = np.asarray(getattr(g, leaf)).reshape(-1)
        assert grad.shape == (value.size,), leaf
        assert np.any(grad != 0), f"{robot}: gradient wrt {leaf} is zero everywhere"
        for idx in indices:
            idx = idx % value.size
            h = FD_STEP * max(1.0, abs(value.flat[idx]))
            vals = []
            for sign in (1, -1):
                pert = value.copy()
                pert.flat[idx] += sign * h
                mp = eqx.tree_at(lambda mm: getattr(mm, leaf), m, jnp.asarray(pert))
                vals.append(float(f(mp, s["q"], s["v"], s["a"], w)))
            fd = (vals[0] - vals[1]) / (2 * h)
            scale = max(1.0, abs(fd))
            assert abs(grad[idx] - fd) <= RTOL_FD * scale, (
                f"{robot}: d(w.rnea)/d{leaf}[{idx}] = {grad[idx]} (grad) vs {fd} (finite diff.)"
            )


#: a tree with every joint kind of jaxdyn: a free base, a ball (spherical) joint, a slide
#: (prismatic) and a hinge (revolute) joint, bodies with offset centres of mass
_KINDS_MJCF = """<mujoco><worldbody>
  <body name="base" pos="0 0 1"><freejoint/>
    <geom type="box" size="0.2 0.1 0.05" mass="3"/>
    <body name="ball" pos="0.2 0 0"><joint name="ball" type="ball"/>
      <geom type="capsule" fromto="0 0 0 0.1 0.2 -0.3" size="0.03" mass="1"/>
      <body name="slider" pos="0.1 0.2 -0.3"><joint name="slide" type="slide" axis="0.6 0 0.8"/>
        <geom type="sphere" pos="0.05 0 0.02" size="0.04" mass="0.5"/>
        <body name="hinge" pos="0 0.1 0"><joint name="hinge" type="hinge" axis="0 1 0"/>
          <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.7"/>
        </body>
      </body>
    </body>
  </body>
</worldbody></mujoco>"""


def test_gravity_forces_numpy_equals_gravity_forces():
    """``gravity_forces_numpy`` (numpy, no compiled program) against the compiled
    ``gravity_forces`` (world-coordinate RNEA at ``v = a = 0``, checked against Pinocchio
    above): the bundled arm and quadruped (a floating base) and a tree of every joint kind,
    at random configurations."""
    from jaxdyn.algorithms.rnea import gravity_forces_numpy
    from jaxdyn.robots import load

    models = [load("arm7"), load("quad12"), jaxdyn.load_mjcf(_KINDS_MJCF).model]
    for model in models:
        fn = jax.jit(jaxdyn.gravity_forces)
        for seed in range(3):
            q = np.asarray(jaxdyn.random_configuration(model, jax.random.PRNGKey(seed)))
            got = gravity_forces_numpy(model, q)
            want = np.asarray(fn(model, q))
            assert np.max(np.abs(want)) > 1.0, f"{model.name}: gravity vanishes"
            assert_close(got, want, 1e-12, err_msg=f"{model.name} seed {seed}")

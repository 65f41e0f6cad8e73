"""Algebraic identities between jaxdyn's algorithms (float64).

Independent of Pinocchio: each identity ties two different algorithms together (CRBA against
RNEA columns, ABA against a dense solve with M, Minv against CRBA, gravity against the gradient
of the potential energy, ...). Tolerances are relative to ``max(1, max|ref|)``; the ones
that go through an inverse of M are justified by M's condition number (at most ~1e7, talos_full:
errors ~cond * eps stay below 1e-10, measured ~3e-12).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import joints

from oracle import (
    RANDOM_ALL_KINDS,
    RANDOM_URDF,
    ROBOTS,
    RTOL_ID,
    SINGULAR_M,
    all_kinds_tree,
    assert_close,
    robot_case,
    slow_params,
    urdf_tree,
)

#: Identities through automatic differentiation against finite differences: central
#: differences with step h have truncation error ~h^2 and rounding error ~eps/h.
RTOL_FD = 1e-7
FD_STEP = 1e-5

#: robots plus random trees (spherical and inner free joints, a deep chain)
CASES = {name: (lambda name=name: robot_case(name)) for name in ROBOTS}
CASES["tree-all-kinds"] = lambda: all_kinds_tree(RANDOM_ALL_KINDS[2])
CASES["tree-chain25"] = lambda: urdf_tree(RANDOM_URDF[5])
PD_CASES = [c for c in CASES if c not in SINGULAR_M]


#: cases whose identities run only in the slow set: test_pinocchio compares the dynamics of arm7
#: and solo12 with Pinocchio's, test_random_tree_spherical_free those of an all-kinds tree; every
#: case here is one compile of every algorithm, and quad12 carries the identities by default
SLOW_CASES = ("tree-all-kinds", "arm7", "solo12")


def _params(names):
    return slow_params(names, [n for n in SLOW_CASES if n in names])


def _case(name):
    return CASES[name]()


@pytest.mark.parametrize("name", _params(list(CASES)))
def test_crba_equals_rnea_columns(name):
    """``M[:, i] = rnea(q, 0, e_i) - rnea(q, 0, 0)`` and M is symmetric."""
    case = _case(name)
    for i in range(len(case.states)):
        r = case.jx(i)
        cols = (r["rnea_unit"][1:] - r["rnea_unit"][0]).T
        assert_close(r["crba"], cols, RTOL_ID, err_msg=f"{name} state {i}: crba vs rnea columns")
        assert_close(r["crba"], r["crba"].T, 1e-13, err_msg=f"{name} state {i}: M symmetric")


@pytest.mark.parametrize("name", _params(PD_CASES))
def test_aba_solves_the_equations_of_motion(name):
    """``aba = M^-1 (tau - b)`` and with external forces ``M^-1 (tau - b_f)``, where the bias
    ``b_f = rnea(q, v, a, f_ext) - M a`` comes from RNEA."""
    case = _case(name)
    for i, s in enumerate(case.states):
        r = case.jx(i)
        M = r["crba"]
        assert np.linalg.eigvalsh(M)[0] > 0, f"{name}: M not positive definite"
        for key in ("aba", "aba_sweeps", "aba_dense"):
            assert_close(
                r[key],
                np.linalg.solve(M, s["tau"] - r["bias"]),
                RTOL_ID,
                err_msg=f"{name} state {i}: {key} vs solve(M, tau - b)",
            )
        b_f = r["rnea_fext"] - M @ s["a"]
        assert_close(
            r["aba_fext"],
            np.linalg.solve(M, s["tau"] - b_f),
            RTOL_ID,
            err_msg=f"{name} state {i}: aba(f_ext) vs solve(M, tau - b_f)",
        )


@pytest.mark.parametrize("name", _params(PD_CASES))
def test_minv_inverts_crba(name):
    case = _case(name)
    for i in range(len(case.states)):
        r = case.jx(i)
        eye = np.eye(case.model.nv)
        for key in ("minv", "minv_sweeps", "minv_dense"):
            X = r[key]
            assert_close(X @ r["crba"], eye, RTOL_ID, err_msg=f"{name} {i}: {key} M = I")
            assert_close(r["crba"] @ X, eye, RTOL_ID, err_msg=f"{name} {i}: M {key} = I")
            assert_close(X, X.T, 1e-12, err_msg=f"{name} {i}: {key} symmetric")


@pytest.mark.parametrize("name", _params(list(CASES)))
def test_bias_and_kinetic_energy(name):
    """``rnea(q, v, 0) = rnea(q, v, a) - M a`` and ``T = v^T M v / 2 > 0``."""
    case = _case(name)
    for i, s in enumerate(case.states):
        r = case.jx(i)
        M = r["crba"]
        assert_close(r["bias"], r["rnea"] - M @ s["a"], RTOL_ID, err_msg=f"{name} {i}: bias")
        assert_close(r["ke"], 0.5 * s["v"] @ M @ s["v"], RTOL_ID, err_msg=f"{name} {i}: T")
        assert r["ke"] > 0


@pytest.mark.parametrize("name", _params(["arm7", "quad12"]))
def test_bias_forces_and_gravity_forces(name):
    """The public ``bias_forces(q, v)`` and ``gravity_forces(q)`` equal RNEA at ``a = 0`` and
    at ``v = a = 0`` (which the Pinocchio comparison checks on every robot)."""
    case = _case(name)
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


# --------------------------------------------------------------------------- derivatives
def _tangent_derivatives(model, q, v):
    """Gravity as the gradient of the potential energy along ``q ⊕ e`` and ``dT/dv``."""
    e0 = jnp.zeros(model.nv, q.dtype)
    dU = jax.grad(lambda e: jaxdyn.potential_energy(model, jaxdyn.integrate(model, q, e)))(e0)
    dT = jax.grad(lambda v: jaxdyn.kinetic_energy(model, q, v))(v)
    return dU, dT


@pytest.mark.parametrize("name", _params(["quad12", "tree-all-kinds"]))
def test_gravity_is_the_potential_energy_gradient(name):
    """``g(q) = dU/de (q ⊕ e)`` at ``e = 0`` (the tangent convention of ``integrate`` is dual to
    RNEA's generalised forces, free and spherical joints included) and ``dT/dv = M v``."""
    case = _case(name)
    fn = case.jit("tangent_derivatives", _tangent_derivatives)
    for i, s in enumerate(case.states):
        r = case.jx(i)
        dU, dT = fn(case.model, s["q"], s["v"])
        assert_close(dU, r["gravity"], RTOL_ID, err_msg=f"{name} {i}: g vs grad U")
        assert_close(dT, r["crba"] @ s["v"], RTOL_ID, err_msg=f"{name} {i}: dT/dv vs M v")


# --------------------------------------------------------------------------- configuration
def _quat_slices(model):
    t = model.topo
    out = []
    for j in range(t.nb):
        k = int(t.kind[j])
        if k == joints.SPHERICAL:
            out.append(slice(int(t.q_start[j]), int(t.q_start[j]) + 4))
        elif k == joints.FREE:
            out.append(slice(int(t.q_start[j]) + 3, int(t.q_start[j]) + 7))
    return out


def _rotation_slices(model):
    """The angular-velocity coordinates of spherical and free joints in v."""
    t = model.topo
    return [
        slice(int(t.v_start[j]), int(t.v_start[j]) + 3)
        for j in range(t.nb)
        if int(t.kind[j]) in (joints.SPHERICAL, joints.FREE)
    ]


def _same_configuration(q, q_ref, model, rtol, err_msg):
    """Equal, except that a quaternion and its negative are the same rotation."""
    q = np.array(q)
    for sl in _quat_slices(model):
        if np.dot(q[sl], q_ref[sl]) < 0:
            q[sl] = -q[sl]
    assert_close(q, q_ref, rtol, err_msg=err_msg)


def _integrate_difference(model, q0, q1, v):
    return (
        jaxdyn.integrate(model, q0, jaxdyn.difference(model, q0, q1)),
        jaxdyn.difference(model, q0, jaxdyn.integrate(model, q0, v)),
        jaxdyn.integrate(model, q0, jnp.zeros_like(v)),
        jaxdyn.difference(model, q0, q0),
    )


CONFIG_CASES = ["solo12", "quad12", "arm7", "tree-all-kinds"]


@pytest.mark.parametrize("scale", [1e-7, 0.5])
@pytest.mark.parametrize("name", CONFIG_CASES)
def test_integrate_difference_round_trip(name, scale):
    """``integrate(q, difference(q, q1)) == q1`` and ``difference(q, integrate(q, v)) == v``
    (rotation vectors of norm < pi, so the logarithm is unique), for small and moderate v."""
    case = _case(name)
    m = case.model
    fn = case.jit("integrate_difference", jax.vmap(_integrate_difference, (None, 0, 0, 0)))
    n = 8
    sample = case.jit("random_configurations", jax.vmap(jaxdyn.random_configuration, (None, 0)))
    q0, q1 = (np.asarray(sample(m, jax.random.split(jax.random.PRNGKey(k), n))) for k in (11, 12))
    v = scale * np.random.default_rng(5).normal(size=(n, m.nv))
    for sl in _rotation_slices(m):
        assert np.all(np.linalg.norm(v[:, sl], axis=1) < np.pi), "rotation vector too long"
    q_back, v_back, q_same, zero = (np.asarray(x) for x in fn(m, q0, q1, v))
    for k in range(n):
        _same_configuration(
            q_back[k],
            q1[k],
            m,
            1e-10,
            err_msg=f"{name} sample {k}: integrate(q, difference(q, q1))",
        )
        assert_close(
            v_back[k],
            v[k],
            1e-10 if scale > 1e-3 else 1e-14,
            err_msg=f"{name} sample {k}: difference(q, integrate(q, v))",
        )
        assert_close(q_same[k], q0[k], 1e-15, err_msg=f"{name}: integrate(q, 0)")
        assert_close(zero[k], np.zeros(m.nv), 1e-15, err_msg=f"{name}: difference(q, q)")


# --------------------------------------------------------------------------- model parameters
def _weighted_rnea(model, q, v, a, w):
    return jnp.dot(w, jaxdyn.rnea(model, q, v, a))


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

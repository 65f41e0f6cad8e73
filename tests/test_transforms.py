"""JAX transformations: jit + vmap, float32 lanes, jax.grad / jax.jacfwd / jax.jacrev.

Batched results must equal per-sample ones; float32 results must agree with float64 ones
within float32 accuracy; derivatives must match known identities (d rnea / d a = M,
d aba / d tau = M^-1) and central finite differences.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import robots

from oracle import REFERENCES, RTOL_ID, assert_close, random_states, robot_case, scaled_error

#: jit(vmap(f)) against f, same dtype: only the order of floating-point operations may differ.
RTOL_VMAP = 1e-12
#: float32 against float64, relative to max(1, max|ref|). eps32 = 6e-8; RNEA, CRBA, kinematics
#: are sums of O(depth) products (measured <= 2e-6); ABA and M^-1 amplify rounding by up to
#: cond(M) (<= 2e4 for arm7 / quad12 here: bound ~1e-3, measured <= 2e-5 with the base at the
#: origin). 1e-4 leaves margin yet catches any float32 path that is really wrong.
RTOL32 = 1e-4
#: fourth-order central finite differences, step FD_STEP: truncation ~h^4 |f^(5)|, rounding
#: ~(evaluation error)/h; ABA's evaluation error is ~cond(M) eps |qdd| (cond(M) ~2e4 on quad12),
#: which is why a second-order stencil with a tiny step is not accurate enough here.
RTOL_FD = 1e-8
FD_STEP = 1e-3

VMAP_ROBOTS = ("quad12",)
BATCH = 4


# --------------------------------------------------------------------------- jit + vmap
def _bundle(model, q, v, a, tau, f_ext, *, frame):
    out = {
        "rnea": jaxdyn.rnea(model, q, v, a),
        "rnea_fext": jaxdyn.rnea(model, q, v, a, f_ext),
        "crba": jaxdyn.crba(model, q),
        "aba": jaxdyn.aba(model, q, v, tau),
        "aba_fext": jaxdyn.aba(model, q, v, tau, f_ext),
        "minv": jaxdyn.minv(model, q),
        "frame_p": jaxdyn.forward_kinematics(model, q).frame.p,
    }
    for ref in REFERENCES:
        out[f"jac/{frame}/{ref}"] = jaxdyn.jacobian(model, q, frame, ref)
    return out


@pytest.mark.parametrize("robot", VMAP_ROBOTS)
def test_jit_vmap_equals_per_sample(robot):
    case = robot_case(robot)
    m = case.model
    frame = case.jac_frames[0]
    states = random_states(m, seed=77, n=BATCH)
    keys = ("q", "v", "a", "tau", "f_ext")
    batch = [np.stack([s[k] for s in states]) for k in keys]

    def bundle(model, q, v, a, tau, f_ext):
        return _bundle(model, q, v, a, tau, f_ext, frame=frame)

    batched = case.jit("vmap_bundle", jax.vmap(bundle, in_axes=(None, 0, 0, 0, 0, 0)))
    out = jax.tree_util.tree_map(np.asarray, batched(m, *batch))
    for b, s in enumerate(states):
        ref = case.all_fn()(m, *[s[k] for k in keys])  # the per-sample jitted function
        for k, x in out.items():
            assert x.shape == (BATCH,) + np.shape(ref[k]), k
            assert_close(x[b], np.asarray(ref[k]), RTOL_VMAP, err_msg=f"{robot} sample {b}: {k}")


def test_vmap_over_model_parameters():
    """A batch of models (inertial parameters scaled per sample) through ``in_axes=0`` on the
    model; RNEA is linear in the inertial parameters."""
    case = robot_case("arm7")
    m, s = case.model, case.states[0]
    scales = np.array([0.5, 1.0, 2.0])
    models = jax.vmap(
        lambda c: eqx.tree_at(lambda mm: (mm.mass, mm.inertia), m, (m.mass * c, m.inertia * c))
    )(jnp.asarray(scales))
    assert models.mass.shape == (3, m.nb) and models.Xtree_R.shape == (3, m.nb, 3, 3)
    tau = jax.jit(jax.vmap(jaxdyn.rnea, in_axes=(0, None, None, None)))(
        models, s["q"], s["v"], s["a"]
    )
    # the unbatched model's RNEA (checked against Pinocchio in test_pinocchio.py); not
    # case.jx(0), which compiles the whole comparison bundle for arm7 for this one quantity
    ref = np.asarray(jaxdyn.rnea(m, s["q"], s["v"], s["a"]))
    for k, c in enumerate(scales):
        assert_close(tau[k], c * ref, RTOL_ID, err_msg=f"inertia scale {c}")


def test_model_constant_or_traced_argument():
    """A model closed over by ``jit`` has parameters known at trace time, and the kinematics
    compute its constant products (one-DoF joints' ``Xtree`` products, the support chain's
    rows) in numpy; passed as an argument, the same products are traced. Both agree, in
    float64 and float32, on a tree of revolute, prismatic and spherical joints with generic
    axes and a floating base."""
    # four links (two revolute, a prismatic, a spherical): each compile of the four programs
    # below grows with the tree, and seven links covered no other joint kind
    m = jaxdyn.load_urdf(
        robots.random_urdf(4, seed=1, joint_types=("revolute", "prismatic", "spherical")),
        floating_base=True,
    )
    frame = m.frame_names[-1]

    def f(model, q, v):
        pl = jaxdyn.frame_placement(model, q, frame)
        return jaxdyn.rnea(model, q, v, v), jaxdyn.jacobian(model, q, frame), pl.R, pl.p

    q = jaxdyn.random_configuration(m, jax.random.PRNGKey(3))
    v = jax.random.normal(jax.random.PRNGKey(4), (m.nv,))
    for dt, rtol in ((np.float64, 1e-13), (np.float32, 1e-5)):
        qd, vd = np.asarray(q, dt), np.asarray(v, dt)
        md = m.astype(dt)
        constant = jax.jit(lambda q, v, md=md: f(md, q, v))(qd, vd)
        traced = jax.jit(f)(md, qd, vd)
        for a, b in zip(constant, traced):
            assert a.dtype == dt
            assert_close(a, b, rtol, err_msg=str(dt))


# --------------------------------------------------------------------------- float32
def _at_origin(state, model):
    """The state with the floating base moved to the world origin (see
    test_accuracy_away_from_the_origin)."""
    return _base_at(state, model, 0.0)


def _base_at(state, model, position):
    """The state with the floating base's position set to ``position`` (x = y = z)."""
    s = dict(state)
    if model.floating_base:
        q = np.array(s["q"])
        q0 = model.q_slice("root_joint").start
        q[q0 : q0 + 3] = position
        s["q"] = q
    return s


def _float32_errors(case, state):
    args = [state[k] for k in ("q", "v", "a", "tau", "f_ext")]
    r64 = case.all_fn()(case.model, *args)
    r32 = case.all_fn()(case.model, *[np.asarray(x, np.float32) for x in args])
    return r32, r64


@pytest.mark.parametrize("robot", [pytest.param("arm7", marks=pytest.mark.slow), "quad12"])
def test_float32_agrees_with_float64(robot):
    """float32 inputs (the model is cast automatically) give float32 results within RTOL32
    of the float64 ones, for every quantity of the Pinocchio comparison."""
    case = robot_case(robot)
    for i, s in enumerate(case.states):
        r32, r64 = _float32_errors(case, _at_origin(s, case.model))
        for k in r64:
            assert np.asarray(r32[k]).dtype == np.float32, f"{robot}: {k} is not float32"
            assert np.asarray(r64[k]).dtype == np.float64, f"{robot}: {k} is not float64"
            assert_close(r32[k], r64[k], RTOL32, err_msg=f"{robot} state {i}: float32 {k}")


def test_float64_translation_invariance():
    """Moving the floating base changes no dynamics quantity (velocities are in base
    coordinates): float64 results with the base 3 m and 10 m away agree to RTOL_ID with those
    at the origin (see test_accuracy_away_from_the_origin)."""
    case = robot_case("quad12")
    keys = ("rnea", "rnea_fext", "crba", "aba", "aba_fext", "minv", "ke", "bias", "gravity")
    for i, s in enumerate(case.states):
        s = _at_origin(s, case.model)
        ref = case.all_fn()(case.model, *[s[k] for k in ("q", "v", "a", "tau", "f_ext")])
        for d in (3.0, 10.0):
            sd = _base_at(s, case.model, d / np.sqrt(3))
            out = case.all_fn()(case.model, *[sd[k] for k in ("q", "v", "a", "tau", "f_ext")])
            for k in keys:
                assert_close(out[k], ref[k], RTOL_ID, err_msg=f"state {i}, base {d} m: {k}")


# The dynamics work in a ground frame translated to the floating base (kinematics.world_state
# with centered=True): without it, world inertias carry m |p|^2 terms and float32 ABA lost three
# digits at 3 m from the origin (this test failed then).
@pytest.mark.parametrize(
    "dtype, distance, rtol",
    [(np.float32, 3.0, RTOL32), (np.float32, 10.0, RTOL32), (np.float64, 100.0, RTOL_ID)],
    ids=["float32-3m", "float32-10m", "float64-100m"],
)
def test_accuracy_away_from_the_origin(dtype, distance, rtol):
    """Same as at the origin: results of a translated base must match the float64 results of
    the base at the origin (the exact values are translation invariant)."""
    case = robot_case("quad12")
    for i, s in enumerate(case.states):
        s = _at_origin(s, case.model)
        ref = case.all_fn()(case.model, *[s[k] for k in ("q", "v", "a", "tau", "f_ext")])
        sd = _base_at(s, case.model, distance / np.sqrt(3))
        out = case.all_fn()(
            case.model, *[np.asarray(sd[k], dtype) for k in ("q", "v", "a", "tau", "f_ext")]
        )
        for k in ("rnea", "crba", "aba", "minv"):
            assert_close(
                out[k], ref[k], rtol, err_msg=f"{dtype.__name__}, base {distance} m, state {i}: {k}"
            )


def test_result_dtype_follows_inputs():
    """float32 in -> float32 out, float64 in -> float64 out, mixed -> the promoted dtype; the
    model's own dtype does not matter (checked abstractly with jax.eval_shape)."""
    case = robot_case("quad12")
    m, s = case.model, case.states[0]
    uses_v = {  # name -> (call, whether v is an input)
        "rnea": (lambda m, q, v: jaxdyn.rnea(m, q, v, v), True),
        "crba": (lambda m, q, v: jaxdyn.crba(m, q), False),
        "aba": (lambda m, q, v: jaxdyn.aba(m, q, v, v), True),
        "minv": (lambda m, q, v: jaxdyn.minv(m, q), False),
        "bias_forces": (lambda m, q, v: jaxdyn.bias_forces(m, q, v), True),
        "gravity_forces": (lambda m, q, v: jaxdyn.gravity_forces(m, q), False),
        "forward_kinematics": (lambda m, q, v: jaxdyn.forward_kinematics(m, q), False),
        "frame_placement": (lambda m, q, v: jaxdyn.frame_placement(m, q, "FL_FOOT"), False),
        "jacobian": (lambda m, q, v: jaxdyn.jacobian(m, q, "FL_FOOT"), False),
        "joint_jacobians": (lambda m, q, v: jaxdyn.joint_jacobians(m, q), False),
        "center_of_mass": (lambda m, q, v: jaxdyn.center_of_mass(m, q), False),
        "kinetic_energy": (lambda m, q, v: jaxdyn.kinetic_energy(m, q, v), True),
        "potential_energy": (lambda m, q, v: jaxdyn.potential_energy(m, q), False),
        "integrate": (lambda m, q, v: jaxdyn.integrate(m, q, v), True),
        "difference": (lambda m, q, v: jaxdyn.difference(m, q, q), False),
    }
    m32 = m.astype(jnp.float32)
    assert m32.mass.dtype == jnp.float32
    combos = (
        (m, np.float32, np.float32),
        (m32, np.float64, np.float64),
        (m, np.float32, np.float64),
        (m32, np.float64, np.float32),
    )
    for name, (f, with_v) in uses_v.items():
        for model, tq, tv in combos:
            want = np.result_type(tq, tv) if with_v else np.dtype(tq)
            out = jax.eval_shape(f, model, np.asarray(s["q"], tq), np.asarray(s["v"], tv))
            dts = {x.dtype for x in jax.tree_util.tree_leaves(out)}
            assert dts == {want}, (
                f"{name}: model {model.mass.dtype}, q {tq.__name__}, "
                f"v {tv.__name__} -> {dts}, expected {want}"
            )


# --------------------------------------------------------------------------- derivatives
def _fd(g, eye, h):
    """Fourth-order central differences of ``g`` along the rows of ``eye`` (one per row)."""
    gv = jax.vmap(g)
    return (8 * (gv(h * eye) - gv(-h * eye)) - (gv(2 * h * eye) - gv(-2 * h * eye))) / (12 * h)


def _derivatives(model, q, v, a, tau, w):
    """AD derivatives and the finite differences that check them (one jit)."""
    nv = model.nv
    eye = jnp.eye(nv, dtype=q.dtype)
    z = jnp.zeros(nv, q.dtype)
    rnea_e = lambda e, v, a: jaxdyn.rnea(model, jaxdyn.integrate(model, q, e), v, a)  # noqa
    aba_e = lambda e, tau: jaxdyn.aba(model, jaxdyn.integrate(model, q, e), v, tau)  # noqa
    return {
        "drnea_da": jax.jacfwd(lambda a: jaxdyn.rnea(model, q, v, a))(a),
        "daba_dtau": jax.jacfwd(lambda t: jaxdyn.aba(model, q, v, t))(tau),
        "drnea_dv_fwd": jax.jacfwd(lambda v: jaxdyn.rnea(model, q, v, a))(v),
        "drnea_dv_rev": jax.jacrev(lambda v: jaxdyn.rnea(model, q, v, a))(v),
        "drnea_dq_fwd": jax.jacfwd(lambda e: rnea_e(e, v, a))(z),
        "grad_aba_q": jax.grad(lambda e: jnp.dot(w, aba_e(e, tau)))(z),
        "grad_aba_v": jax.grad(lambda v: jnp.dot(w, jaxdyn.aba(model, q, v, tau)))(v),
        "crba": jaxdyn.crba(model, q),
        "minv": jaxdyn.minv(model, q),
        # finite differences (columns of the Jacobians: transpose the stacked rows)
        "fd_rnea_dq": _fd(lambda e: rnea_e(e, v, a), eye, FD_STEP).T,
        "fd_rnea_dv": _fd(lambda d: jaxdyn.rnea(model, q, v + d, a), eye, FD_STEP).T,
        "fd_aba_q": _fd(lambda e: jnp.dot(w, aba_e(e, tau)), eye, FD_STEP),
        "fd_aba_v": _fd(lambda d: jnp.dot(w, jaxdyn.aba(model, q, v + d, tau)), eye, FD_STEP),
    }


@pytest.mark.slow  # the same derivatives as test_derivatives.py, through the transforms
def test_derivatives():
    """jacfwd / jacrev / grad through rnea and aba (q in the tangent space, ``q ⊕ e``), on
    quad12 (free flyer and revolute joints; one robot only: this program is the slowest of
    the suite to compile)."""
    robot = "quad12"
    case = robot_case(robot)
    m = case.model
    fn = case.jit("derivatives", _derivatives)
    rng = np.random.default_rng(17)
    for i, s in enumerate(case.states):
        w = rng.normal(size=m.nv)
        d = jax.tree_util.tree_map(np.asarray, fn(m, s["q"], s["v"], s["a"], s["tau"], w))
        msg = f"{robot} state {i}"
        assert_close(d["drnea_da"], d["crba"], RTOL_ID, err_msg=f"{msg}: d rnea/d a = M")
        assert_close(d["daba_dtau"], d["minv"], RTOL_ID, err_msg=f"{msg}: d aba/d tau = Minv")
        assert_close(d["drnea_dv_rev"], d["drnea_dv_fwd"], RTOL_ID, err_msg=f"{msg}: rev/fwd v")
        assert_close(d["drnea_dv_fwd"], d["fd_rnea_dv"], RTOL_FD, err_msg=f"{msg}: d rnea/d v")
        assert_close(d["drnea_dq_fwd"], d["fd_rnea_dq"], RTOL_FD, err_msg=f"{msg}: d rnea/d q")
        assert_close(d["grad_aba_q"], d["fd_aba_q"], RTOL_FD, err_msg=f"{msg}: grad w.aba q")
        assert_close(d["grad_aba_v"], d["fd_aba_v"], RTOL_FD, err_msg=f"{msg}: grad w.aba v")
        # the derivative w.r.t. q is not trivially zero
        assert scaled_error(d["drnea_dq_fwd"], 0 * d["drnea_dq_fwd"]) > 1e-3

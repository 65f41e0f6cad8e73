"""Analytic derivatives (IDSVA, FDSVA) and the ``custom_jvp`` rules of ``rnea`` / ``aba``.

Checked four ways, float64:

1. against Pinocchio's ``computeRNEADerivatives`` / ``computeABADerivatives`` (every
   example-robot-data robot of the core tests -- romeo, whose mass matrix is singular, for the
   inverse-dynamics partials only -- and random trees with spherical and free joints, with
   external forces);
2. against forward-mode autodiff of the *plain* algorithms, through ``jaxdyn.integrate``;
3. against the complex step (through ``integrate``, complex128 end to end);
4. against central finite differences on the manifold;

plus the identities ``dtau/da = crba`` and ``dtau/dv v = 2 (rnea(q, v, 0) - rnea(q, 0, 0))``, and
the JAX transforms (``jvp``, ``jacfwd``, ``jacrev``, ``grad``, ``vmap``, ``jit``, ``hessian``,
model-parameter gradients) through the rules.

Compile time dominates: every (robot, function) pair is jitted once (module-level ``jax.jit``
functions, results cached per case and state), and the expensive references run on few robots.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import jaxdyn
from jaxdyn import derivatives as D
from jaxdyn import joints, robots, value_checks
from jaxdyn.algorithms import kinematics as kin
from jaxdyn.algorithms.aba import aba_plain
from jaxdyn.algorithms.crba import crba as crba_plain
from jaxdyn.algorithms.minv import minv_world
from jaxdyn.algorithms.rnea import rnea_plain
from jaxdyn.interop.pinocchio import Converter, build_pinocchio_model

from oracle import assert_close, random_states, robot_case, robot_params, sym_upper

# --------------------------------------------------------------------------- tolerances
#: analytic vs Pinocchio, relative to ``max(1, max|ref|)`` (ID partials; FD partials are
#: ``M^-1`` times them and lose a factor of ``cond(M)``-ish, hence the looser FD bound).
RTOL_PIN_ID = 1e-11
RTOL_PIN_FD = 1e-9
#: analytic vs forward autodiff of the plain algorithm (same arithmetic, other order), in the
#: transform tests.
RTOL_AD = 1e-11
#: the four-way reference checks, ``(ID partials, FD partials)``: autodiff and the complex
#: step are exact to rounding (measured <= 2e-15 on the ID partials); the FD partials carry
#: ``cond(M)`` (~1e4 here: autodiff and complex step of the plain ``aba`` differ from each
#: other by 1e-12 on ``tree_float``); central differences with step ``FD_STEP`` have error
#: ~ h^2 + eps / h (measured 1e-9 / 1.4e-7).
REF_TOL = {"ad": (1e-13, 1e-11), "cs": (1e-13, 1e-11), "cd": (1e-7, 1e-5)}
RTOL_CS = REF_TOL["cs"][0]
CS_STEP = 1e-30
FD_STEP = 1e-6
#: algebraic identities.
RTOL_ID = 1e-12

# --------------------------------------------------------------------------- cases
PIN_ROBOTS = ("ur5", "panda", "solo12", "anymal", "hyq", "talos_reduced", "talos_full")
#: example-robot-data robots of the core tests with a singular mass matrix (massless finger
#: chains, ``oracle.SINGULAR_M``): forward dynamics is undefined, so only the inverse-dynamics
#: partials (at the state's ``a``) are compared
ID_ONLY_ROBOTS = ("romeo",)
JOINT_TYPES_ALL = ("revolute", "prismatic", "spherical", "floating")
#: random trees with spherical and free joints anywhere: name -> (n_bodies, seed, floating)
TREES = {
    "tree_fixed": dict(n=7, seed=41, floating=False),
    "tree_float": dict(n=9, seed=42, floating=True),
}
#: the four-way checks (autodiff, complex step, central differences) run on these
REF_CASES = ("quad12", "tree_float")
#: the transform tests (jvp, jacrev, hessian, ...) run on small systems (compile time):
#: floating base with a 1-dof, a spherical and a free joint below it (depth 2); a fixed-base
#: free + spherical chain; a revolute chain (Hessian in the ambient q)
SMALL = {
    "small_float": dict(n=3, seed=39, floating=True, p_fixed=0.0, branching=0.9),
    "tiny_fixed": dict(
        n=2,
        seed=3,
        floating=False,
        p_fixed=0.0,
        branching=0.9,
        joint_types=("revolute", "spherical", "floating"),
    ),
    "tiny_chain": dict(
        n=3, seed=1, floating=False, p_fixed=0.0, branching=0.0, joint_types=("revolute",)
    ),
}
STATE = 0


class TreeCase:
    """A random tree with every joint kind; Pinocchio's model from ``build_pinocchio_model``."""

    def __init__(
        self, name, n, seed, floating, joint_types=JOINT_TYPES_ALL, p_fixed=0.1, branching=0.6
    ):
        xml = robots.random_urdf(
            n,
            seed,
            joint_types=joint_types,
            p_fixed=p_fixed,
            massless_prob=0.0,
            branching=branching,
        )
        self.name = name
        self.model = jaxdyn.load_urdf(xml, floating_base=floating)
        self.pin_model = build_pinocchio_model(self.model)
        self.conv = Converter(self.model, self.pin_model)
        self.states = random_states(self.model, seed)
        pd = self.pin_model.createData()
        for s in self.states:  # well conditioned, so that 1e-10 agreement is meaningful
            M = sym_upper(pin.crba(self.pin_model, pd, self.conv.q_to_pin(s["q"])))
            ev = np.linalg.eigvalsh(M)
            assert ev[0] > 1e-6 * ev[-1], f"{name}: M badly conditioned, pick another seed"


_TREE_CACHE = {}


def get_case(name):
    spec = TREES.get(name) or SMALL.get(name)
    if spec is None:
        return robot_case(name)
    if name not in _TREE_CACHE:
        _TREE_CACHE[name] = TreeCase(name, **spec)
    return _TREE_CACHE[name]


def _inner_kinds(name):
    t = get_case(name).model.topo
    return {int(k) for b, k in enumerate(t.kind) if t.parent[b] >= 0}


def test_random_trees_have_spherical_and_free_joints():
    """Spherical and free joints below the root, in the big and the small trees."""
    assert {joints.SPHERICAL, joints.FREE} <= _inner_kinds("tree_fixed") | _inner_kinds(
        "tree_float"
    )
    assert {joints.ONE_DOF, joints.SPHERICAL, joints.FREE} <= _inner_kinds("small_float")
    assert {int(k) for k in get_case("tiny_fixed").model.topo.kind} == {
        joints.SPHERICAL,
        joints.FREE,
    }
    assert {int(k) for k in get_case("tiny_chain").model.topo.kind} == {joints.ONE_DOF}


def _state(case, i=STATE):
    s = case.states[i]
    return tuple(np.asarray(s[k], np.float64) for k in ("q", "v", "a", "tau", "f_ext"))


# --------------------------------------------------------------------------- jaxdyn side
@jax.jit
def _analytic(model, q, v, tau, f_ext):
    """Every analytic result the Pinocchio and identity tests compare (one compile per robot).

    The inverse-dynamics partials are taken at the ABA solution ``a = aba(q, v, tau, f_ext)``,
    so that one IDSVA serves both; this is what ``aba_derivatives(..., method=m)`` computes for
    both methods (the public wrappers are exercised by the reference and transform tests).
    """
    out = {}
    ws = kin.world_state(model, q)
    qdd, dq, dv, M, inertias = D.fd.forward_dynamics_world(model, ws, v, tau, f_ext)
    out["a"], out["id_dq"], out["id_dv"], out["id_da"] = qdd, dq, dv, M
    nv = model.nv
    # AZA on [-dq, -dv, 1]: the AZA partials and M^-1, which DMM then multiplies
    X = D.aza(model, ws.S, inertias, jnp.concatenate([-dq, -dv, jnp.eye(nv)], 1))
    out["fd_aza_dq"], out["fd_aza_dv"], Minv = X[:, :nv], X[:, nv : 2 * nv], X[:, 2 * nv :]
    out["fd_dmm_dq"], out["fd_dmm_dv"] = -(Minv @ dq), -(Minv @ dv)
    out["fd_dmm_dtau"] = out["fd_aza_dtau"] = Minv
    out["minv"] = minv_world(model, ws, inertias)
    z = jnp.zeros_like(v)
    out["crba"] = crba_plain(model, q)
    out["coriolis"] = rnea_plain(model, q, v, z) - rnea_plain(model, q, z, z)
    return out


@jax.jit
def _analytic_id(model, q, v, a, f_ext):
    """The inverse-dynamics part of :func:`_analytic`, at a given ``a`` (singular ``M``)."""
    out = {"a": a}
    out["id_dq"], out["id_dv"], out["id_da"] = D.rnea_derivatives(model, q, v, a, f_ext)
    z = jnp.zeros_like(v)
    out["crba"] = crba_plain(model, q)
    out["coriolis"] = rnea_plain(model, q, v, z) - rnea_plain(model, q, z, z)
    return out


_ANALYTIC_CACHE = {}


def analytic(case, i=STATE):
    key = (case.name, i)
    if key not in _ANALYTIC_CACHE:
        q, v, a, tau, f_ext = _state(case, i)
        if case.name in ID_ONLY_ROBOTS:
            out = _analytic_id(case.model.astype(jnp.float64), q, v, a, f_ext)
        else:
            out = _analytic(case.model.astype(jnp.float64), q, v, tau, f_ext)
        _ANALYTIC_CACHE[key] = {k: np.asarray(x) for k, x in out.items()}
    return _ANALYTIC_CACHE[key]


def _retract(model, q):
    return lambda d: jaxdyn.integrate(model, q.astype(d.dtype), d)


@functools.partial(jax.jit, static_argnames="method")
def _references(model, q, v, a, tau, f_ext, method):
    """Reference partials in the tangent space of ``integrate``: forward autodiff of the plain
    algorithms (``ad``), complex step (``cs``) or central differences (``cd``);
    ``{id|fd}_{dq|dv}``."""
    nv = model.nv
    z = jnp.zeros(nv)
    eye = jnp.eye(nv)
    ret = _retract(model, q)

    def id_(d, v_):
        return rnea_plain(model, ret(d), v_, a.astype(d.dtype), f_ext.astype(d.dtype))

    def fd_(d, v_):
        return aba_plain(model, ret(d), v_, tau.astype(d.dtype), f_ext.astype(d.dtype))

    out = {}
    for tag, f in (("id", id_), ("fd", fd_)):
        if method == "ad":
            out[f"{tag}_dq"], out[f"{tag}_dv"] = jax.jacfwd(f, argnums=(0, 1))(z, v)
        elif method == "cs":  # imag(f(x + i h e_k)) / h, one column per k
            cz, cv = z.astype(jnp.complex128), v.astype(jnp.complex128)
            out[f"{tag}_dq"] = jax.vmap(lambda e: jnp.imag(f(cz + 1j * CS_STEP * e, cv)))(eye).T
            out[f"{tag}_dv"] = jax.vmap(lambda e: jnp.imag(f(cz, cv + 1j * CS_STEP * e)))(eye).T
            out[f"{tag}_dq"] = out[f"{tag}_dq"] / CS_STEP
            out[f"{tag}_dv"] = out[f"{tag}_dv"] / CS_STEP
        else:
            h = FD_STEP
            out[f"{tag}_dq"] = jax.vmap(lambda e: f(h * e, v) - f(-h * e, v))(eye).T / (2 * h)
            out[f"{tag}_dv"] = jax.vmap(lambda e: f(z, v + h * e) - f(z, v - h * e))(eye).T / (
                2 * h
            )
    return out


_REF_CACHE = {}


def references(case, method, i=STATE):
    key = (case.name, method, i)
    if key not in _REF_CACHE:
        out = _references(case.model.astype(jnp.float64), *_state(case, i), method=method)
        _REF_CACHE[key] = {k: np.asarray(x) for k, x in out.items()}
    return _REF_CACHE[key]


@jax.jit
def _public(model, q, v, a, tau, f_ext):
    """The public functions at the state of the references."""
    out = {}
    out["id_dq"], out["id_dv"], _ = D.rnea_derivatives(model, q, v, a, f_ext)
    out["fd_dq"], out["fd_dv"], _ = D.aba_derivatives(model, q, v, tau, f_ext)
    return out


# --------------------------------------------------------------------------- Pinocchio side
_PIN_CACHE = {}


def pinocchio_derivatives(case, i=STATE):
    """Pinocchio's partials; inverse dynamics at ``a`` = jaxdyn's ABA solution (at the state's
    ``a`` for :data:`ID_ONLY_ROBOTS`)."""
    key = (case.name, i)
    if key not in _PIN_CACHE:
        pm, c = case.pin_model, case.conv
        pd = pm.createData()
        q, v, _, tau, f_ext = _state(case, i)
        a = analytic(case, i)["a"]
        qp, vp, ap, tp = c.q_to_pin(q), c.v_to_pin(v), c.v_to_pin(a), c.v_to_pin(tau)
        fext = c.f_ext_to_pin(f_ext)
        out = {}
        res = pin.computeRNEADerivatives(pm, pd, qp, vp, ap, fext)
        out["id_dq"], out["id_dv"] = (c.matrix_from_pin(np.array(x)) for x in res[:2])
        out["id_da"] = c.matrix_from_pin(sym_upper(np.array(res[2])))
        if case.name in ID_ONLY_ROBOTS:
            out["a"] = a
            _PIN_CACHE[key] = out
            return out
        out["a"] = c.v_from_pin(pin.aba(pm, pd, qp, vp, tp, fext).copy())
        res = pin.computeABADerivatives(pm, pd, qp, vp, tp, fext)
        out["fd_dq"], out["fd_dv"] = (c.matrix_from_pin(np.array(x)) for x in res[:2])
        out["fd_dtau"] = c.matrix_from_pin(sym_upper(np.array(res[2])))
        _PIN_CACHE[key] = out
    return _PIN_CACHE[key]


# =========================================================================== 1. Pinocchio
@pytest.mark.parametrize("name", robot_params(*PIN_ROBOTS, *ID_ONLY_ROBOTS, *TREES))
def test_rnea_derivatives_match_pinocchio(name):
    """IDSVA vs ``computeRNEADerivatives``, with external forces."""
    case = get_case(name)
    jx, pn = analytic(case), pinocchio_derivatives(case)
    assert_close(jx["a"], pn["a"], RTOL_PIN_FD, err_msg=f"{name}: aba")
    for k in ("id_dq", "id_dv", "id_da"):
        assert_close(jx[k], pn[k], RTOL_PIN_ID, err_msg=f"{name}: {k}")


@pytest.mark.parametrize("name", robot_params(*PIN_ROBOTS, *TREES))
def test_aba_derivatives_match_pinocchio(name):
    """FDSVA (both DMM and AZA) vs ``computeABADerivatives``, with external forces."""
    case = get_case(name)
    jx, pn = analytic(case), pinocchio_derivatives(case)
    for m in ("dmm", "aza"):
        for k in ("dq", "dv", "dtau"):
            assert_close(
                jx[f"fd_{m}_{k}"], pn[f"fd_{k}"], RTOL_PIN_FD, err_msg=f"{name}: {m} dqdd/{k}"
            )
    assert_close(jx["minv"], pn["fd_dtau"], RTOL_PIN_FD, err_msg=f"{name}: minv_world")


# =========================================================================== identities
@pytest.mark.parametrize("name", robot_params(*PIN_ROBOTS, *ID_ONLY_ROBOTS, *TREES))
def test_identities(name):
    """``dtau/da = M`` (CRBA), ``dtau/dv v = 2 (rnea(q, v, 0) - rnea(q, 0, 0))`` and
    ``dqdd/dtau M = 1`` (not for :data:`ID_ONLY_ROBOTS`)."""
    case = get_case(name)
    jx = analytic(case)
    v = _state(case)[1]
    assert_close(jx["id_da"], jx["crba"], RTOL_ID, err_msg=f"{name}: dtau/da vs crba")
    assert_close(
        jx["id_dv"] @ v, 2 * jx["coriolis"], RTOL_ID, err_msg=f"{name}: dtau/dv v vs 2 C(q, v) v"
    )
    if name not in ID_ONLY_ROBOTS:
        assert_close(
            jx["fd_dmm_dtau"] @ jx["crba"], np.eye(case.model.nv), 1e-9, err_msg=f"{name}: Minv M"
        )


# =========================================================================== 2-4. references
#: (case, method): autodiff, complex step and central differences on quad12 (floating base,
#: revolute joints); the complex step, the most exact, on the tree with spherical/free joints
REF_TESTS = (
    ("quad12", "ad"),
    ("quad12", "cs"),
    # central differences: the least exact of the three (autodiff and the complex step stay)
    pytest.param("quad12", "cd", marks=pytest.mark.slow),
    pytest.param("tree_float", "cs", marks=pytest.mark.slow),
)


@pytest.mark.parametrize("name, method", REF_TESTS)
def test_derivatives_match_references(name, method):
    """``rnea_derivatives`` / ``aba_derivatives`` vs forward autodiff of the plain algorithm
    (``ad``), complex step (``cs``) and central differences (``cd``), all through
    ``integrate``, with external forces."""
    tol_id, tol_fd = REF_TOL[method]
    case = get_case(name)
    model = case.model.astype(jnp.float64)
    mine = {k: np.asarray(x) for k, x in _public(model, *_state(case)).items()}
    ref = references(case, method)
    for k in ("id_dq", "id_dv", "fd_dq", "fd_dv"):
        assert_close(
            mine[k],
            ref[k],
            tol_fd if k.startswith("fd") else tol_id,
            err_msg=f"{name}: {k} vs {method}",
        )


def test_references_detect_a_wrong_answer():
    """The complex-step reference is sensitive: a column off by 1e-9 is caught."""
    case = get_case("quad12")
    mine = _public(case.model.astype(jnp.float64), *_state(case))
    bad = np.asarray(mine["id_dq"]).copy()
    bad[:, 7] *= 1 + 1e-9
    with pytest.raises(AssertionError):
        assert_close(bad, references(case, "cs")["id_dq"], RTOL_CS)


# =========================================================================== custom_jvp rules
def _inputs(case):
    q, v, a, tau, f_ext = (jnp.asarray(x) for x in _state(case))
    return case.model.astype(jnp.float64), q, v, a, tau, f_ext


def _q_tangent(model, q, d):
    """An ambient tangent of ``q`` along the manifold: ``d/dε integrate(q, ε d)``."""
    return jax.jvp(lambda e: jaxdyn.integrate(model, q, e * d), (0.0,), (1.0,))[1]


def _fns(fn):
    return (D.rnea, rnea_plain) if fn == "rnea" else (D.aba, aba_plain)


@functools.partial(jax.jit, static_argnames=("fn", "part"))
def _transforms(model, q, v, x3, f_ext, tangents, fn, part):
    """What the transform tests compare, in one compile per (system, function, part): ``"jac"``
    (jacfwd, jacrev, grad) or ``"jvp"`` (jvp and vmap against the plain algorithm)."""
    mine, plain = _fns(fn)
    out = {}
    if fn == "rnea":
        out["analytic"] = D.rnea_derivatives(model, q, v, x3, f_ext)
    else:
        out["analytic"] = D.aba_derivatives(model, q, v, x3, f_ext)
    if part == "jac":
        return _transforms_jac(model, q, v, x3, f_ext, mine, out)
    dq, dv, d3, dfe = tangents
    primals = (q, v, x3, f_ext)
    tq = _q_tangent(model, q, dq)
    tans = (tq, dv, d3, dfe)
    out["y_mine"], out["t_mine"] = jax.jvp(lambda *x: mine(model, *x), primals, tans)
    out["y_plain"], out["t_plain"] = jax.jvp(lambda *x: plain(model, *x), primals, tans)
    for k in range(4):  # one argument at a time: symbolic-zero tangents for the others
        out[f"t_mine_{k}"] = jax.jvp(
            lambda x: mine(model, *primals[:k], x, *primals[k + 1 :]), (primals[k],), (tans[k],)
        )[1]
    # vmap over states, of the function and of its jvp
    qs = jnp.stack([q, jaxdyn.integrate(model, q, 0.3 * jnp.ones(model.nv))])
    vs, x3s = jnp.stack([v, -v]), jnp.stack([x3, 2 * x3])
    out["vmap_mine"] = jax.vmap(lambda *x: mine(model, *x))(qs, vs, x3s)
    out["vmap_plain"] = jax.vmap(lambda *x: plain(model, *x))(qs, vs, x3s)
    fes = jnp.stack([f_ext, f_ext])
    out["vmap_jvp_mine"] = jax.vmap(
        lambda q_, v_, x_, fe: jax.jvp(lambda vv: mine(model, q_, vv, x_, fe), (v_,), (x_,))[1]
    )(qs, vs, x3s, fes)
    return out


def _transforms_jac(model, q, v, x3, f_ext, mine, out):
    z = jnp.zeros(model.nv)

    def f(d, v_, x_):
        return mine(model, jaxdyn.integrate(model, q, d), v_, x_, f_ext)

    out["jacfwd"] = jax.jacfwd(f, argnums=(0, 1, 2))(z, v, x3)
    out["jacrev"] = jax.jacrev(f, argnums=(0, 1, 2))(z, v, x3)
    # grad of a scalar, in every argument (the q gradient pulled back through integrate)
    w = jnp.linspace(0.5, 1.5, model.nv)

    def loss(d, v_, x_, fe):
        return jnp.sum(w * jnp.sin(mine(model, jaxdyn.integrate(model, q, d), v_, x_, fe)))

    out["grad"] = jax.grad(loss, argnums=(0, 1, 2, 3))(z, v, x3, f_ext)
    out["y"] = mine(model, q, v, x3, f_ext)
    return out


_TRANSFORM_CACHE = {}


def transforms(name, fn, part):
    key = (name, fn, part)
    if key not in _TRANSFORM_CACHE:
        case = get_case(name)
        model, q, v, a, tau, f_ext = _inputs(case)
        rng = np.random.default_rng(3)
        tangents = (
            jnp.asarray(rng.normal(size=model.nv)),
            jnp.asarray(rng.normal(size=model.nv)),
            jnp.asarray(rng.normal(size=model.nv)),
            jnp.asarray(rng.normal(size=f_ext.shape)),
        )
        x3 = a if fn == "rnea" else tau
        with value_checks.unchecked():  # value checks: tested elsewhere; they doubled the compile
            out = _transforms(model, q, v, x3, f_ext, tangents, fn=fn, part=part)
        out["tangents"], out["x3"] = tangents, x3
        _TRANSFORM_CACHE[key] = jax.tree_util.tree_map(np.asarray, out)
    return _TRANSFORM_CACHE[key]


def _tol(fn):
    """rnea: rounding; aba: rounding times the conditioning of ``M``."""
    return RTOL_AD if fn == "rnea" else 100 * RTOL_AD


#: the transform tests run on this tree (floating base, spherical/free and 1-dof joints)
TRANSFORM_CASE = "small_float"


@pytest.mark.slow  # test_derivatives_match_references[quad12-ad] compares the same partials
@pytest.mark.parametrize("fn", ["rnea", "aba"])
def test_jvp_matches_plain_autodiff(fn):
    """``jax.jvp`` (under ``jit``) through the rule vs through the plain algorithm with every
    argument perturbed (q along the manifold, v, a or tau, f_ext); one argument at a time
    (symbolic-zero tangents for the others) vs the analytic partials; ``vmap`` of the function
    and of its jvp."""
    name = TRANSFORM_CASE
    out = transforms(name, fn, "jvp")
    tol = _tol(fn)
    assert_close(out["y_mine"], out["y_plain"], 1e-13, err_msg="primal")
    assert_close(out["t_mine"], out["t_plain"], tol, err_msg=f"{name}: jvp of {fn}")
    dq, dv, d3, _ = out["tangents"]
    Dq, Dv, D3 = out["analytic"]
    for k, want in enumerate((Dq @ dq, Dv @ dv, D3 @ d3)):
        assert_close(out[f"t_mine_{k}"], want, tol, err_msg=f"{name}: jvp of {fn} in arg {k}")
    assert_close(
        sum(out[f"t_mine_{k}"] for k in range(4)),
        out["t_plain"],
        tol,
        err_msg=f"{name}: jvp of {fn}, sum over the arguments",
    )
    assert np.max(np.abs(out["t_mine_3"])) > 0
    assert_close(out["vmap_mine"], out["vmap_plain"], 1e-13, err_msg=f"{name}: vmap of {fn}")
    x3 = out["x3"]
    assert_close(out["vmap_jvp_mine"][0], Dv @ x3, tol, err_msg=f"{name}: vmap(jvp) of {fn}")


@pytest.mark.parametrize(
    # [rnea] in the slow set: the same custom_jvp rule machinery as [aba]
    "fn",
    [pytest.param("rnea", marks=pytest.mark.slow), "aba"],
)
def test_jacfwd_jacrev_grad(fn):
    """``jacfwd`` and ``jacrev`` through ``integrate`` equal the analytic partials, and
    ``grad`` of a scalar equals their transpose applied to its outer derivative."""
    name = TRANSFORM_CASE
    out = transforms(name, fn, "jac")
    want = out["analytic"]
    tol = _tol(fn)
    for jac in ("jacfwd", "jacrev"):
        for g, wnt, k in zip(out[jac], want, ("dq", "dv", "d3")):
            assert_close(g, wnt, tol, err_msg=f"{name}: {jac} of {fn}, {k}")
    nv = len(out["y"])
    gy = np.linspace(0.5, 1.5, nv) * np.cos(out["y"])
    for g, wnt, k in zip(out["grad"][:3], want, ("q", "v", "3")):
        assert_close(g, wnt.T @ gy, tol, err_msg=f"{name}: grad {k} of {fn}")
    assert np.all(np.isfinite(out["grad"][3])) and np.max(np.abs(out["grad"][3])) > 0


#: second order: (system, function): ``rnea`` with spherical / free joints through
#: ``integrate``; ``aba`` on a revolute chain in the ambient ``q`` (the cheaper compile)
HESSIAN_CASES = (pytest.param("tiny_fixed", "rnea", marks=pytest.mark.slow), ("tiny_chain", "aba"))


@functools.partial(jax.jit, static_argnames=("fn", "through_integrate", "which"))
def _hessian(model, q, v, x3, fn, through_integrate, which):
    f = _fns(fn)[0 if which == "mine" else 1]
    w = jnp.linspace(0.5, 1.5, model.nv)
    if through_integrate:

        def s(d):
            return jnp.sum(w * jnp.sin(f(model, jaxdyn.integrate(model, q, d), v, x3)))

        x0 = jnp.zeros(model.nv)
    else:

        def s(x):
            return jnp.sum(w * jnp.sin(f(model, x, v, x3)))

        x0 = q
    return jax.hessian(s)(x0)


@pytest.mark.slow  # test_jacfwd_jacrev_grad checks the rules under every transform
@pytest.mark.parametrize("name, fn", HESSIAN_CASES)
def test_hessian_matches_plain_autodiff(name, fn):
    """``jax.hessian`` of a scalar of the output differentiates the rule (plain autodiff of
    IDSVA / FDSVA) and matches the plain-autodiff Hessian."""
    case = get_case(name)
    model, q, v, a, tau, _ = _inputs(case)
    x3 = a if fn == "rnea" else tau
    kw = dict(fn=fn, through_integrate=model.nq != model.nv)
    H1 = _hessian(model, q, v, x3, which="mine", **kw)
    H0 = _hessian(model, q, v, x3, which="plain", **kw)
    assert_close(H1, H0, 1e-10, err_msg=f"{name}: hessian of {fn}")


@pytest.mark.parametrize(
    # [aba] in the slow set: reverse mode through the same sweeps as [rnea]
    "fn",
    ["rnea", pytest.param("aba", marks=pytest.mark.slow)],
)
def test_model_parameter_gradients(fn):
    """Tangents of the model's leaves fall back to autodiff of the plain algorithm: the
    gradient with respect to the whole model (masses, inertias, placements, axes, gravity),
    taken together with the state's, equals plain forward-mode autodiff along a random
    direction of the model and the state."""
    case = get_case("tiny_fixed")
    model, q, v, a, tau, f_ext = _inputs(case)
    x3 = a if fn == "rnea" else tau
    mine, plain = _fns(fn)
    leaves, treedef = jax.tree_util.tree_flatten(model)
    rng = np.random.default_rng(11)
    dmodel = jax.tree_util.tree_unflatten(
        treedef, [jnp.asarray(rng.normal(size=x.shape)) for x in leaves]
    )
    dv = jnp.asarray(rng.normal(size=model.nv))

    @jax.jit
    def both(model, v):
        def loss(f):
            return lambda m, v_: jnp.sum(jnp.cos(f(m, q, v_, x3, f_ext)))

        g = jax.grad(loss(mine), argnums=(0, 1))(model, v)
        _, t = jax.jvp(loss(plain), (model, v), (dmodel, dv))
        return g, t

    (gm, gv), t = both(model, v)
    dot = sum(
        jnp.vdot(x, y)
        for x, y in zip(jax.tree_util.tree_leaves(gm), jax.tree_util.tree_leaves(dmodel))
    )
    dot = dot + jnp.vdot(gv, dv)
    assert_close(dot, t, 1e-11, err_msg=f"model gradient of {fn}")
    assert float(jnp.max(jnp.abs(gm.mass))) > 0


def test_switch_selects_plain_autodiff(monkeypatch):
    """``analytic_derivatives(False)`` traces the plain algorithm (no custom_jvp in the
    jaxpr); the default traces the rule; the exported ``jaxdyn.rnea`` / ``jaxdyn.aba`` carry
    it."""
    # the jaxprs of XLA's usual kernels: a one-kernel call (jaxdyn.backend.small_calls, the
    # primal alone; tests/test_small_calls.py) inlines the custom_jvp inside it
    monkeypatch.setitem(jaxdyn.config._values, "fused_unbatched", False)
    case = get_case("tiny_chain")
    model, q, v, a, tau, _ = _inputs(case)

    def jaxpr_text(fn):  # without the addresses of the batching rule's functions
        text = str(jax.make_jaxpr(lambda x: fn(model, q, x, a))(v))
        text = re.sub(r" at 0x[0-9a-fA-F]+", "", text)
        return text.replace("rnea_plain_batched", "rnea_batched")  # the rule's name only

    assert D.analytic_derivatives_enabled()
    assert jaxdyn.rnea is D.rnea and jaxdyn.aba is D.aba
    # the analytic rules are the custom_jvp of _rnea_cj / _aba_cj (the batching rule of
    # jaxdyn.batching adds a custom_jvp named <function>_batched around every call)
    assert "name=_rnea_cj" in jaxpr_text(D.rnea)
    assert "name=_aba_cj" in jaxpr_text(D.aba)
    with D.analytic_derivatives(False):
        assert not D.analytic_derivatives_enabled()
        assert "name=_rnea_cj" not in jaxpr_text(D.rnea)
        assert "name=_aba_cj" not in jaxpr_text(D.aba)
        assert jaxpr_text(D.rnea) == jaxpr_text(rnea_plain)
    assert D.analytic_derivatives_enabled()


def test_switch_environment_variable():
    """``JAXDYN_ANALYTIC_DERIVATIVES=0`` at import selects plain autodiff."""
    import os
    import subprocess
    import sys

    code = "import jaxdyn.derivatives as D; print(D.analytic_derivatives_enabled())"
    for val, want in (("0", "False"), ("1", "True")):
        env = dict(os.environ, JAXDYN_ANALYTIC_DERIVATIVES=val)
        r = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert r.stdout.strip().splitlines()[-1] == want


@jax.jit
def _small_checks(model, q, v, a, tau):
    out = {}
    # a tangent along the quaternion itself (radial) is ignored by the rule
    dq = jnp.zeros_like(q).at[3:7].set(q[3:7])
    out["radial"] = jax.jvp(lambda x: D.rnea(model, x, v, a), (q,), (dq,))[1]
    d = jnp.linspace(-1.0, 1.0, model.nv)
    out["d"] = d
    out["back"] = D.configuration_tangent(model, q, _q_tangent(model, q, d))
    for m in ("auto", "dmm", "aza"):
        out[m] = D.aba_derivatives(model, q, v, tau, method=m)
    out["f64"] = D.rnea_derivatives(model, q, v, a)
    f32 = [x.astype(jnp.float32) for x in (q, v, a)]
    out["f32"] = D.rnea_derivatives(model.astype(jnp.float32), *f32)
    return out


def small_checks():
    if "small" not in _TRANSFORM_CACHE:
        model, q, v, a, tau, _ = _inputs(get_case("small_float"))
        _TRANSFORM_CACHE["small"] = _small_checks(model, q, v, a, tau)
    return _TRANSFORM_CACHE["small"]


@pytest.mark.slow  # the custom_jvp rules' tangent handling: test_jacfwd_jacrev_grad[aba]
def test_radial_quaternion_tangent_is_ignored():
    """Documented convention: the rule differentiates the dynamics of the normalised
    quaternion, so a tangent along ``Q`` itself has no effect."""
    t = small_checks()["radial"]
    assert_close(t, jnp.zeros_like(t), 1e-14)


def test_configuration_tangent_inverts_integrate():
    out = small_checks()
    assert_close(out["back"], out["d"], 1e-14)


def test_method_argument():
    """``dmm`` and ``aza`` agree; ``auto`` is DMM below ``AZA_MIN_NV`` coordinates and AZA
    from there on; anything else raises."""
    out = small_checks()
    for x, y in zip(out["aza"], out["dmm"]):
        assert_close(x, y, 1e-11)
    # "auto" is DMM on this model: the same program (its jaxpr), and the same values up to the
    # rounding this ill-conditioned case amplifies (about 3e-11; computed inside one jitted
    # program XLA may fuse, and round, the two copies differently)
    model, q, v, _, tau, _ = _inputs(get_case("small_float"))
    assert D.fd.resolve_method("auto", model.nv) == "dmm"
    jaxprs = {  # without object addresses (older JAX prints some of the rules' functions)
        m: re.sub(
            r" at 0x[0-9a-f]+",
            "",
            str(jax.make_jaxpr(lambda q: D.aba_derivatives(model, q, v, tau, method=m))(q)),
        )
        for m in ("auto", "dmm", "aza")
    }
    assert jaxprs["auto"] == jaxprs["dmm"] != jaxprs["aza"]
    for x, y in zip(out["auto"], out["dmm"]):
        assert_close(x, y, 1e-11)
    n = D.fd.AZA_MIN_NV
    assert D.fd.resolve_method("auto", n - 1) == "dmm"
    assert D.fd.resolve_method("auto", n) == "aza"
    for m in ("dmm", "aza"):
        assert D.fd.resolve_method(m, 1) == D.fd.resolve_method(m, 10 * n) == m
    model, q, v, a, tau, _ = _inputs(get_case("tiny_chain"))
    with pytest.raises(ValueError, match="method"):
        D.aba_derivatives(model, q, v, tau, method="lu")


def test_aba_rule_with_aza(monkeypatch):
    """The ``aba`` rule applies ``M^-1`` by AZA from ``AZA_MIN_NV`` coordinates on (by the
    analytic inverse below): with the threshold forced to 0 its jvp still equals the analytic
    partials."""
    model, q, v, a, tau, _ = _inputs(get_case("tiny_chain"))

    def no_minv(*args):
        raise AssertionError("the rule formed M^-1 instead of using AZA")

    monkeypatch.setattr(D.fd, "AZA_MIN_NV", 0)
    monkeypatch.setattr(D.jvp, "minv_world", no_minv)
    d = jnp.linspace(-1.0, 1.0, model.nv)

    @jax.jit
    def both(q, v, tau):
        t = jax.jvp(lambda *x: D.aba(model, *x), (q, v, tau), (d, 2 * d, 3 * d))[1]
        Dq, Dv, Minv = D.aba_derivatives(model, q, v, tau, method="dmm")
        return t, Dq @ d + Dv @ (2 * d) + Minv @ (3 * d)

    t, want = both(q, v, tau)
    assert_close(t, want, 1e-11)


def test_masked_products_blocks(monkeypatch):
    """Algorithm 1's pairwise products by :func:`idsva.masked_products` for 1, 2 and 4 row
    blocks equal the dense definition (numpy) on talos_full's ancestor pattern."""
    from jaxdyn.derivatives import idsva

    t = get_case("talos_full").model.topo
    nv = t.nv
    rng = np.random.default_rng(5)
    L, R1, R2 = (rng.normal(size=(nv, 12)) for _ in range(3))
    U, Q1, Q2, Q3 = (rng.normal(size=(nv, 6)) for _ in range(4))
    anc = np.asarray(t.dof_ancestor)
    same = np.asarray(t.dof_body)[:, None] == np.asarray(t.dof_body)[None, :]
    strict = anc & ~same
    want = [
        np.where(anc.T, L @ R.T, np.where(strict, U @ Q.T, 0.0)) for R, Q in ((R1, Q1), (R2, Q2))
    ]
    up = np.where(anc, U @ Q3.T, 0.0)
    want.append(up + np.where(strict.T, up.T, 0.0))
    for nb in (1, 2, 4):
        monkeypatch.setattr(idsva, "PRODUCT_BLOCKS", nb)
        edges = idsva.dof_blocks(t)
        assert edges[0] == 0 and edges[-1] == nv and edges == sorted(set(edges))
        assert (1 < len(edges) - 1 <= nb) if nb > 1 else len(edges) == 2
        got = idsva.masked_products(
            t,
            (jnp.asarray(L), (jnp.asarray(R1), jnp.asarray(R2))),
            (jnp.asarray(U), tuple(map(jnp.asarray, (Q1, Q2, Q3)))),
        )
        for g, w in zip(got, want):
            assert_close(g, w, 1e-14, err_msg=f"{nb} blocks")


def test_float32():
    """float32 inputs give float32 partials close to the float64 ones."""
    out = small_checks()
    for x, y in zip(out["f32"], out["f64"]):
        assert x.dtype == jnp.float32
        assert_close(x, y, 1e-4)


def test_shape_errors():
    model, q, v, a, tau, _ = _inputs(get_case("tiny_chain"))
    with pytest.raises(ValueError, match="rnea_derivatives: v"):
        D.rnea_derivatives(model, q, v[:-1], a)
    with pytest.raises(ValueError, match="aba_derivatives: tau"):
        D.aba_derivatives(model, q, v, tau[:-1])

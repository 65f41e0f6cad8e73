"""The inertia-weighted input matrix ``Bhat = M^-1 B`` and free accelerations ``qdd0``
(IIM, eUFM, dense), float64.

Checks: the three methods agree (``1e-10 max(1, max|ref|)``); ``qdd0 + Bhat u`` equals
``jaxdyn.aba(q, v, B u)``; ``Bhat`` and ``qdd0`` equal Pinocchio's ``computeMinverse(q) B`` and
``aba(q, v, 0)``; ``B = [J_a^T, J_t^T]`` of :class:`jaxdyn.Inputs` equals the selection matrix
and Pinocchio's constraint Jacobians (from ``test_osim``'s reference); gradients of the IIM
equal the dense method's. One jitted program per case (compile time dominates).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from test_osim import get_model, pin_built, reference_delassus, states

import jaxdyn
from jaxdyn import Connect, Inputs, Weld, build_input_matrix, input_matrix
from jaxdyn.iwim import METHODS

from oracle import assert_close, robot_params, sym_upper

RTOL = 1e-10
#: per-case tolerance where rounding alone reaches RTOL: on hand_float's second state the exact
#: methods (dense, IIM, EUFM, Pinocchio) agree on qdd0 to 1.6e-11 .. 1.1e-10 (relative to its
#: largest entry) depending on how XLA fuses the kinematics (the rounding order: measured with
#: and without jaxdyn.spatial.materialize), from velocity-product terms that cancel
CASE_RTOL = {"hand_tips": 1e-9}


def pendulum_urdf(n: int) -> str:
    """An ``n``-link pendulum (revolute joints about y), as in the IIM paper's §6.1."""
    out = ['<?xml version="1.0"?><robot name="pendulum"><link name="base"/>']
    parent = "base"
    for i in range(n):
        out.append(
            f'<link name="l{i}"><inertial><origin xyz="0 0 -0.25" rpy="0 0 0"/>'
            f'<mass value="{1.0 + 0.1 * i}"/><inertia ixx="0.02" ixy="0" ixz="0" '
            f'iyy="0.021" iyz="0" izz="0.001"/></inertial></link>'
        )
        z = 0.0 if i == 0 else -0.5
        out.append(
            f'<joint name="j{i}" type="revolute"><parent link="{parent}"/>'
            f'<child link="l{i}"/><origin xyz="0 0 {z}" rpy="0 0 0"/>'
            f'<axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="1" '
            f'velocity="1"/></joint>'
        )
        parent = f"l{i}"
    out.append(
        f'<link name="tip"/><joint name="tip_joint" type="fixed"><parent link="{parent}"/>'
        '<child link="tip"/><origin xyz="0 0 -0.5" rpy="0 0 0"/></joint></robot>'
    )
    return "".join(out)


FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")
#: name -> (model key, inputs: jaxdyn.Inputs or "single"/"full" dense matrices)
CASES = {
    "quad12_contacts": ("quad12", Inputs("all", tuple(Connect(f) for f in FEET))),
    "quad12_mixed": (
        "quad12",
        Inputs(
            ("FL_HFE", "HR_KFE", "root_joint"),
            (Connect("FL_FOOT", "world_aligned", offset=(0, 0, -0.01)), Weld("HR_FOOT", "local")),
        ),
    ),
    "talos_feet": ("talos_full", Inputs("all", (Weld("left_sole_link"), Weld("right_sole_link")))),
    "hand_tips": ("hand_float", Inputs("all", tuple(Connect(f"tip{i}") for i in range(5)))),
    "pendulum_single": ("pendulum8", "single"),
    "pendulum_full": ("pendulum8", "full"),
}


@functools.cache
def model_of(key):
    if key == "pendulum8":
        return jaxdyn.load_urdf(pendulum_urdf(8))
    return get_model(key)


def dense_B(key, inputs):
    nv = model_of(key).nv
    if inputs == "single":
        return np.eye(nv)[:, -1:]  # only the last joint actuated
    return np.eye(nv) + 0.1 * np.random.default_rng(0).normal(size=(nv, nv))


@functools.cache
def pend_states():
    model = model_of("pendulum8")
    rng = np.random.default_rng(5)
    return dict(q=rng.uniform(-2, 2, (2, model.nv)), v=rng.normal(size=(2, model.nv)))


def case_states(key):
    return pend_states() if key == "pendulum8" else states(key)


@functools.cache
def results(name):
    key, inputs = CASES[name]
    model = model_of(key)
    structured = isinstance(inputs, Inputs)

    def f(q, v, u):
        B = (
            build_input_matrix(model, q, inputs)
            if structured
            else jnp.asarray(dense_B(key, inputs))
        )
        out = {"B": B, "aba": jaxdyn.aba(model, q, v, B @ u)}
        for m in METHODS:
            out[m] = input_matrix(model, q, v, inputs if structured else B, m)
        if structured:  # also the generic (nv, nu) path
            out["iim_dense_B"] = input_matrix(model, q, v, B, "iim")
        return out

    st = case_states(key)
    nu = (
        jax.eval_shape(lambda q: build_input_matrix(model, q, inputs), st["q"][0]).shape[1]
        if structured
        else dense_B(key, inputs).shape[1]
    )
    u = np.random.default_rng(1).normal(size=(len(st["q"]), nu))
    res = jax.jit(jax.vmap(f))(jnp.asarray(st["q"]), jnp.asarray(st["v"]), jnp.asarray(u))
    return jax.tree_util.tree_map(np.asarray, res), u


@pytest.mark.parametrize("name", robot_params(*CASES))
def test_methods_agree_and_reproduce_aba(name):
    res, u = results(name)
    for i in range(len(u)):
        ref0, refB = res["dense"].qdd0[i], res["dense"].Bhat[i]
        for m in ("iim", "eufm") + (("iim_dense_B",) if "iim_dense_B" in res else ()):
            tol = CASE_RTOL.get(name, RTOL)
            assert_close(res[m].qdd0[i], ref0, tol, err_msg=f"{name} {i}: qdd0 {m}")
            assert_close(res[m].Bhat[i], refB, tol, err_msg=f"{name} {i}: Bhat {m}")
        for m in METHODS:
            qdd = res[m].qdd0[i] + res[m].Bhat[i] @ u[i]
            tol = CASE_RTOL.get(name, RTOL)
            assert_close(qdd, res["aba"][i], tol, err_msg=f"{name} {i}: qdd0 + Bhat u ({m})")


@pytest.mark.parametrize("name", robot_params(*(n for n in CASES if CASES[n][0] != "pendulum8")))
def test_against_pinocchio(name):
    """``Bhat = Minv B`` and ``qdd0 = aba(q, v, 0)`` from Pinocchio; ``B = [J_a^T, J_t^T]``
    from the selection of the actuated coordinates and Pinocchio's constraint Jacobians."""
    key, inputs = CASES[name]
    model = model_of(key)
    res, _ = results(name)
    pm, conv = pin_built(key)
    st = case_states(key)
    for i in range(len(st["q"])):
        q, v = st["q"][i], st["v"][i]
        qp, vp = conv.q_to_pin(q), conv.v_to_pin(v)
        data = pm.createData()
        Minv = conv.matrix_from_pin(sym_upper(pin.computeMinverse(pm, data, qp)))
        qdd0 = conv.v_from_pin(pin.aba(pm, data, qp, vp, np.zeros(pm.nv)).copy())
        names = (
            [n for n in model.joint_names if n != "root_joint"]
            if inputs.actuated == "all"
            else inputs.actuated
        )
        cols = [np.eye(model.nv)[:, model.v_slice(n)] for n in names]
        if inputs.contacts:
            cols.append(reference_delassus(key, q, inputs.contacts)[0].T)
        B = np.concatenate(cols, 1)
        assert_close(res["B"][i], B, RTOL, err_msg=f"{name} {i}: B")
        tol = CASE_RTOL.get(name, RTOL)
        assert_close(res["iim"].qdd0[i], qdd0, tol, err_msg=f"{name} {i}: qdd0 vs pin")
        assert_close(res["iim"].Bhat[i], Minv @ B, tol, err_msg=f"{name} {i}: Bhat vs pin")


def test_gradient_iim():
    """``jax.grad`` through the IIM equals the dense method's (pendulum, dense ``B``)."""
    model = model_of("pendulum8")
    st = pend_states()
    q, v = jnp.asarray(st["q"][0]), jnp.asarray(st["v"][0])
    B = jnp.asarray(dense_B("pendulum8", "full"))
    W = jnp.asarray(np.random.default_rng(2).normal(size=(model.nv, model.nv + 1)))

    def loss(q, m):
        out = input_matrix(model, q, v, B, m)
        return jnp.sum(W * jnp.concatenate([out.qdd0[:, None], out.Bhat], 1))

    g = jax.jit(lambda q: {m: jax.grad(loss)(q, m) for m in ("iim", "dense")})(q)
    assert_close(np.asarray(g["iim"]), np.asarray(g["dense"]), RTOL, err_msg="grad iim")
    assert np.max(np.abs(np.asarray(g["dense"]))) > 1e-3


def test_bad_inputs_raise():
    model = model_of("quad12")
    q, v = states("quad12")["q"][0], np.zeros(model.nv)
    inp = CASES["quad12_contacts"][1]
    with pytest.raises(ValueError, match="method must be one of"):
        input_matrix(model, q, v, inp, "ufm")
    with pytest.raises(ValueError, match=r"B has shape \(12, 3\), expected \(nv, nu\)=\(18"):
        input_matrix(model, q, v, np.zeros((12, 3)))
    with pytest.raises(ValueError, match="no joint named 'elbow'"):
        input_matrix(model, q, v, Inputs(("elbow",)))
    with pytest.raises(ValueError, match="no inputs"):
        input_matrix(model, q, v, Inputs((), ()))
    with pytest.raises(ValueError, match=r"contacts\[0\] is a str"):
        Inputs("all", ("FL_FOOT",))
    with pytest.raises(ValueError, match="wrap contact constraints"):
        input_matrix(model, q, v, (Connect("FL_FOOT"),))
    with pytest.raises(ValueError, match="v has shape"):
        input_matrix(model, q, v[:-1], inp)
    with pytest.raises(ValueError, match="actuated must be 'all'"):
        Inputs("some")


def test_float32_lane():
    """float32 inputs give float32 results close to the float64 ones (IIM, structured inputs
    on the floating quadruped with foot contacts)."""
    name = "quad12_contacts"
    key, inputs = CASES[name]
    model = model_of(key)
    st = case_states(key)
    q, v = (np.asarray(st[k][0], np.float32) for k in ("q", "v"))
    out = jax.jit(lambda q, v: input_matrix(model, q, v, inputs, "iim"))(q, v)
    assert out.qdd0.dtype == jnp.float32 and out.Bhat.dtype == jnp.float32
    res, _ = results(name)
    for got, ref in ((out.qdd0, res["dense"].qdd0[0]), (out.Bhat, res["dense"].Bhat[0])):
        err = np.max(np.abs(np.asarray(got, np.float64) - ref)) / max(1.0, np.max(np.abs(ref)))
        assert err < 1e-3, err

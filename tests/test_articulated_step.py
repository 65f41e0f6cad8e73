"""The articulated-body step shared by ABA, the Delassus algorithms and C-ABA / C-EFPA
(:func:`jaxdyn.algorithms.aba.articulated_body_step`, Featherstone 2008, Table 7.1) against
its formulas written out in numpy, in each of its forms: one-DoF (elementwise) and multi-DoF
joints, packed inertias, armature as a diagonal or a matrix, a free joint, a cluster's
block-diagonal inertia (``bodies``), the bias force; and :func:`jaxdyn.spatial.inv_spd`'s
closed forms. Small eager arrays: no model is compiled."""

from __future__ import annotations

import numpy as np
import pytest

from jaxdyn import spatial
from jaxdyn.algorithms.aba import (
    articulated_bias_force,
    articulated_body_step,
    project_articulated_inertia,
)

N = 3  # joints per batch


def _spd(rng, n, k=6):
    A = rng.normal(size=(n, k, k))
    return A @ np.swapaxes(A, -1, -2) + k * np.eye(k)


def _reference(IA, S, arm=None):
    U = IA @ S
    D = np.swapaxes(S, -1, -2) @ U
    if arm is not None:
        D = D + arm
    Dinv = np.linalg.inv(D)
    return U, Dinv, IA - U @ Dinv @ np.swapaxes(U, -1, -2)


@pytest.mark.parametrize("k", [1, 2, 3, 6])
def test_inv_spd_closed_forms(k):
    D = _spd(np.random.default_rng(k), N, k)
    np.testing.assert_allclose(spatial.inv_spd(D), np.linalg.inv(D), rtol=1e-12, atol=0)


@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("armature", [False, True])
def test_step_against_its_formulas(k, armature):
    rng = np.random.default_rng(10 * k + armature)
    IA, S = _spd(rng, N), rng.normal(size=(N, 6, k))
    a = rng.uniform(0.1, 1.0, size=(N, k)) if armature else None
    ref = _reference(IA, S, None if a is None else a[..., None] * np.eye(k))
    # Ia's entries are differences of O(10) numbers (all but cancel for k = 6): absolute 1e-10
    tol = (1e-11, 1e-11, 1e-10)
    for store in (False, True):
        out = articulated_body_step(IA, S, a, store=store)
        for x, y, t in zip(out, ref, tol):
            np.testing.assert_allclose(np.asarray(x), y, rtol=1e-11, atol=t)
    # the packed form: U, D^-1 the same, Ia its upper triangle
    U, Dinv, Ia = articulated_body_step(spatial.pack_symmetric(IA), S, a)
    np.testing.assert_allclose(np.asarray(U), ref[0], rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(np.asarray(Dinv), ref[1], rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(
        np.asarray(spatial.unpack_symmetric(Ia)), ref[2], rtol=1e-11, atol=1e-10
    )
    # armature as a matrix (a cluster's reflected rotor inertia) is the same as its diagonal
    if a is not None:
        out = articulated_body_step(IA, S, a[..., None] * np.eye(k))
        np.testing.assert_allclose(np.asarray(out[2]), ref[2], rtol=1e-11, atol=1e-10)
    assert articulated_body_step(IA, S, a, project=False)[2] is None


def test_free_joint_passes_nothing_on():
    rng = np.random.default_rng(1)
    IA, S = _spd(rng, N), rng.normal(size=(N, 6, 6))
    assert np.all(np.asarray(articulated_body_step(IA, S, free=True)[2]) == 0)
    # with armature the inertia does cross (the general formula)
    a = np.full((N, 6), 0.3)
    ref = _reference(IA, S, 0.3 * np.eye(6))[2]
    Ia = articulated_body_step(IA, S, a, free=True)[2]
    np.testing.assert_allclose(np.asarray(Ia), ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("ny", [1, 2])
def test_bodies_equal_the_block_diagonal_form(ny):
    """A cluster of ``n`` bodies: per-body ``U_i = IA_i S_i`` and ``D = sum_i S_i^T U_i`` are
    the step on the ``6n x 6n`` block-diagonal inertia; what the cluster hands to a single
    output body (``sum_i IA_i - Ub D^-1 Ub^T``) is that matrix's ``Ia`` summed over blocks."""
    rng = np.random.default_rng(ny)
    n, nc = 3, 2
    IAd = _spd(rng, nc * n).reshape(nc, n, 6, 6)
    S4 = rng.normal(size=(nc, n, 6, ny))
    arm = _spd(rng, nc, ny) * 0.1
    U4, Dinv, Ia = articulated_body_step(IAd, S4, arm, bodies=True)
    assert Ia is None
    IA = np.zeros((nc, 6 * n, 6 * n))
    for i in range(n):
        IA[:, 6 * i : 6 * i + 6, 6 * i : 6 * i + 6] = IAd[:, i]
    U, Dref, Iaref = _reference(IA, S4.reshape(nc, 6 * n, ny), arm)
    np.testing.assert_allclose(np.asarray(U4).reshape(nc, 6 * n, ny), U, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(np.asarray(Dinv), Dref, rtol=1e-11, atol=1e-11)
    handed = project_articulated_inertia(IAd.sum(1), np.asarray(U4).sum(1), Dinv)
    summed = Iaref.reshape(nc, n, 6, n, 6).sum((1, 3))
    np.testing.assert_allclose(np.asarray(handed), summed, rtol=1e-10, atol=1e-10)


def test_bias_force():
    """``pa = pA + Ia c + U D^-1 u`` on columns and on vectors."""
    rng = np.random.default_rng(5)
    IA, S = _spd(rng, N), rng.normal(size=(N, 6, 3))
    U, Dinv, Ia = articulated_body_step(IA, S)
    pA, c, u = rng.normal(size=(N, 6, 2)), rng.normal(size=(N, 6, 2)), rng.normal(size=(N, 3, 2))
    ref = pA + np.asarray(Ia) @ c + np.asarray(U) @ np.asarray(Dinv) @ u
    np.testing.assert_allclose(np.asarray(articulated_bias_force(pA, U, Dinv, u, Ia, c)), ref)
    vec = articulated_bias_force(pA[..., 0], U, Dinv, u[..., 0], Ia, c[..., 0])
    np.testing.assert_allclose(np.asarray(vec), ref[..., 0], rtol=1e-12, atol=1e-12)
    no_p = articulated_bias_force(None, U, Dinv, u)
    np.testing.assert_allclose(np.asarray(no_p), np.asarray(U) @ np.asarray(Dinv) @ u)

"""ABA (forward dynamics) and Minv (the analytic inverse of M), float64.

* against Pinocchio: ``aba`` with / without external forces, both of its methods
  (``"sweeps"``, ``"dense"``), ``minv`` and its methods; a singular M (Romeo's massless finger
  chains) gives no finite wrong acceleration;
* identities: ``aba = M^-1 (tau - b)`` with M from CRBA and b from RNEA, ``minv M = M minv = I``
  (tolerances justified by M's condition number: at most ~1e7, talos_full: errors ~cond * eps
  stay below 1e-10, measured ~3e-12).
"""

from __future__ import annotations

import numpy as np
import pytest

from oracle import (
    FORWARD_KEYS,
    PD_IDENTITY_CASES,
    PD_NAMED,
    RTOL_ID,
    SINGULAR_M,
    STATES,
    assert_close,
    compare,
    identity_case,
    identity_params,
    robot_params,
)

# the oracle sweeps (test_rnea, test_crba, test_aba, test_kinematics, test_pinocchio) share one
# compiled function per robot (``oracle.Case.jx``): under ``-n`` one worker runs them all
# (``oracle.SHARED_WORKER_FILES``)


@pytest.mark.parametrize("i", STATES)
@pytest.mark.parametrize("robot_case", PD_NAMED, indirect=True)
def test_forward_dynamics_and_minv(robot_case, i):
    """ABA without / with external forces and the analytic inverse of M."""
    compare(robot_case, i, FORWARD_KEYS)


@pytest.mark.parametrize("robot_case", robot_params(*SINGULAR_M), indirect=True)
def test_singular_mass_matrix(robot_case):
    """Romeo's massless finger chains make M singular: Pinocchio's ABA is NaN and M's smallest
    eigenvalue vanishes; jaxdyn must not return a finite wrong acceleration."""
    case = robot_case
    for i in STATES:
        pn, jx = case.pin(i), case.jx(i)
        assert not np.all(np.isfinite(pn["aba"])), "Pinocchio's ABA unexpectedly finite"
        ev = np.linalg.eigvalsh(pn["crba"])
        assert abs(ev[0]) < 1e-12 * ev[-1], f"{case.name}: M is not singular, eigenvalues {ev[:3]}"
        ev_jx = np.linalg.eigvalsh(jx["crba"])
        assert abs(ev_jx[0]) < 1e-12 * ev_jx[-1], f"{case.name}: jaxdyn M not singular {ev_jx[:3]}"
        # a finite jaxdyn answer would have to solve M qdd = tau - b
        for key in ("aba", "aba_sweeps", "aba_dense"):
            qdd = jx[key]
            if np.all(np.isfinite(qdd)):
                resid = jx["crba"] @ qdd - (case.states[i]["tau"] - jx["bias"])
                assert np.max(np.abs(resid)) < 1e-8, (
                    f"{case.name}: finite {key} violates M qdd = tau - b"
                )


@pytest.mark.parametrize("name", identity_params(PD_IDENTITY_CASES))
def test_aba_solves_the_equations_of_motion(name):
    """``aba = M^-1 (tau - b)`` and with external forces ``M^-1 (tau - b_f)``, where the bias
    ``b_f = rnea(q, v, a, f_ext) - M a`` comes from RNEA."""
    case = identity_case(name)
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


@pytest.mark.parametrize("name", identity_params(PD_IDENTITY_CASES))
def test_minv_inverts_crba(name):
    case = identity_case(name)
    for i in range(len(case.states)):
        r = case.jx(i)
        eye = np.eye(case.model.nv)
        for key in ("minv", "minv_sweeps", "minv_dense"):
            X = r[key]
            assert_close(X @ r["crba"], eye, RTOL_ID, err_msg=f"{name} {i}: {key} M = I")
            assert_close(r["crba"] @ X, eye, RTOL_ID, err_msg=f"{name} {i}: M {key} = I")
            assert_close(X, X.T, 1e-12, err_msg=f"{name} {i}: {key} symmetric")

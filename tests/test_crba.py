"""CRBA (the joint-space inertia matrix M) against jaxdyn's RNEA, float64.

Against Pinocchio, M is compared with RNEA in one sweep: ``test_rnea.py::
test_inverse_dynamics_and_mass_matrix``; CRBA's C kernel is tested in test_crba_kernel.py and
with armature in test_armature.py. Here: the columns of M are RNEA's responses to unit
accelerations, M is symmetric, the bias forces are ``rnea(q, v, a) - M a`` and the kinetic energy
is ``v^T M v / 2``.
"""

from __future__ import annotations

import pytest

from oracle import IDENTITY_CASES, RTOL_ID, assert_close, identity_case, identity_params

# the oracle sweeps (test_rnea, test_crba, test_aba, test_kinematics, test_pinocchio) share one
# compiled function per robot (``oracle.Case.jx``): under ``-n`` one worker runs them all
# (``oracle.SHARED_WORKER_FILES``)


@pytest.mark.parametrize("name", identity_params(IDENTITY_CASES))
def test_crba_equals_rnea_columns(name):
    """``M[:, i] = rnea(q, 0, e_i) - rnea(q, 0, 0)`` and M is symmetric."""
    case = identity_case(name)
    for i in range(len(case.states)):
        r = case.jx(i)
        cols = (r["rnea_unit"][1:] - r["rnea_unit"][0]).T
        assert_close(r["crba"], cols, RTOL_ID, err_msg=f"{name} state {i}: crba vs rnea columns")
        assert_close(r["crba"], r["crba"].T, 1e-13, err_msg=f"{name} state {i}: M symmetric")


@pytest.mark.parametrize("name", identity_params(IDENTITY_CASES))
def test_bias_and_kinetic_energy(name):
    """``rnea(q, v, 0) = rnea(q, v, a) - M a`` and ``T = v^T M v / 2 > 0``."""
    case = identity_case(name)
    for i, s in enumerate(case.states):
        r = case.jx(i)
        M = r["crba"]
        assert_close(r["bias"], r["rnea"] - M @ s["a"], RTOL_ID, err_msg=f"{name} {i}: bias")
        assert_close(r["ke"], 0.5 * s["v"] @ M @ s["v"], RTOL_ID, err_msg=f"{name} {i}: T")
        assert r["ke"] > 0

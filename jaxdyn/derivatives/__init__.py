"""Analytical derivatives of the dynamics algorithms.

* :func:`rnea_derivatives` -- IDSVA (Singh, Russell & Wensing 2022, Algorithm 1): closed-form
  partials of inverse dynamics in ground coordinates, multi-DoF joints and floating bases.
* :func:`aba_derivatives` -- FDSVA: ``-M^-1`` times the IDSVA partials at the ABA solution
  (Eq. 5), with DMM or AZA (Eq. 34).
* :func:`rnea`, :func:`aba` -- the algorithms with ``jax.custom_jvp`` rules built on the two
  above (``jaxdyn.rnea`` / ``jaxdyn.aba`` are these); :func:`set_analytic_derivatives` /
  :func:`analytic_derivatives` switch back to plain autodiff for comparison.
* :func:`configuration_tangent` -- ambient ``q`` tangents (``nq``) to the tangent space of
  :func:`jaxdyn.integrate` (``nv``), in which every ``d/dq`` here is taken.

Modules: :mod:`.idsva`, :mod:`.fd`, :mod:`.jvp`.
"""

from .fd import aba_derivatives as aba_derivatives
from .fd import aza as aza
from .idsva import rnea_derivatives as rnea_derivatives
from .jvp import aba as aba
from .jvp import analytic_derivatives as analytic_derivatives
from .jvp import analytic_derivatives_enabled as analytic_derivatives_enabled
from .jvp import configuration_tangent as configuration_tangent
from .jvp import rnea as rnea
from .jvp import set_analytic_derivatives as set_analytic_derivatives

"""MuJoCo's soft-constraint parameters, shared by the equality constraints
(:mod:`jaxdyn.sim.equality`) and soft contact (:class:`jaxdyn.sim.Constraint` with ``soft=True``).

Todorov 2014 ("Convex and analytically-invertible dynamics with contacts and constraints",
ICRA) and MuJoCo's documentation (Computation: soft constraints, impedance, reference
acceleration): a constraint row with violation ``r`` (MuJoCo's ``efc_pos - efc_margin``) and
velocity ``v`` (``J qvel``) has

* the impedance ``d(r)`` in ``[dmin, dmax]`` from ``solimp = (dmin, dmax, width, mid,
  power)`` (:func:`impedance`, MuJoCo's ``getimpedance``),
* the stiffness and damping ``k``, ``b`` from ``solref`` (:func:`gains`): ``(timeconst,
  dampratio)`` with ``timeconst > 0`` gives ``k = 1 / (dmax timeconst dampratio)^2``,
  ``b = 2 / (dmax timeconst)`` (``timeconst`` raised to ``2 h`` unless ``refsafe`` is off);
  the direct form ``(-stiffness, -damping)`` gives ``k = stiffness / dmax^2``,
  ``b = damping / dmax``,
* the reference acceleration ``aref = -b v - k d r`` (:func:`reference`) and the regulariser
  ``R = max(mjMINVAL, (1 - d) / d * diagApprox)`` (:func:`regulariser`) of the dual problem
  ``(A + R) f = aref - J a0`` (one row; the cone constrains ``f`` for contacts).

Every function is elementwise (arrays of rows, or scalars).
"""

from __future__ import annotations

import jax.numpy as jnp

MINVAL = 1e-15  # MuJoCo's mjMINVAL
MINIMP, MAXIMP = 1e-4, 0.9999  # MuJoCo's mjMINIMP, mjMAXIMP

#: MuJoCo's default ``solref`` and ``solimp``
DEFAULT_SOLREF = (0.02, 1.0)
DEFAULT_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)


def clamp_solimp(solimp):
    """``solimp (..., 5)`` clamped as MuJoCo's ``getsolparam`` does: ``dmin``, ``dmax``,
    ``mid`` to ``[mjMINIMP, mjMAXIMP]``, ``width >= 0``, ``power >= 1``."""
    d0, d1, width, mid, power = (solimp[..., j] for j in range(5))
    clip = lambda x: jnp.clip(x, MINIMP, MAXIMP)  # noqa: E731
    return jnp.stack(
        [clip(d0), clip(d1), jnp.maximum(width, 0.0), clip(mid), jnp.maximum(power, 1.0)], -1
    )


def impedance(solimp, pos):
    """MuJoCo's ``getimpedance``: ``d`` in ``[dmin, dmax]`` of the violation ``pos`` (MuJoCo's
    ``pos - margin``) over ``width``, ``solimp (..., 5) = (dmin, dmax, width, mid, power)``
    (clamped first: :func:`clamp_solimp`)."""
    d0, d1, width, mid, power = (solimp[..., j] for j in range(5))
    flat = (d0 == d1) | (width <= MINVAL)
    x = jnp.abs(pos) / jnp.where(flat, 1.0, width)
    xc = jnp.clip(x, 0.0, 1.0)
    lin = power == 1
    a = 1 / mid ** (power - 1)
    bb = 1 / (1 - mid) ** (power - 1)
    y = jnp.where(lin, xc, jnp.where(xc <= mid, a * xc**power, 1 - bb * (1 - xc) ** power))
    y = jnp.where(x >= 1, 1.0, jnp.where(x <= 0, 0.0, y))
    imp = d0 + y * (d1 - d0)
    return jnp.where(flat, 0.5 * (d0 + d1), imp)


def gains(solref, dmax, h, refsafe=True):
    """``(k, b)`` of ``solref (..., 2)`` and ``dmax`` (``solimp[1]``) at the step ``h``
    (MuJoCo's ``mj_makeImpedance``; ``refsafe``: ``timeconst >= 2 h`` in the standard form)."""
    ref0, ref1 = solref[..., 0], solref[..., 1]
    standard = ref0 > 0
    tc = jnp.maximum(ref0, 2 * h) if refsafe else ref0
    tc = jnp.where(standard, tc, ref0)
    k = jnp.where(
        standard,
        1 / jnp.maximum(MINVAL, dmax * dmax * tc * tc * ref1 * ref1),
        -ref0 / jnp.maximum(MINVAL, dmax * dmax),
    )
    b = jnp.where(ref1 > 0, 2 / jnp.maximum(MINVAL, dmax * tc), -ref1 / jnp.maximum(MINVAL, dmax))
    return k, b


def reference(k, b, imp, pos, vel):
    """MuJoCo's reference acceleration ``aref = -b vel - k imp pos``."""
    return -b * vel - k * imp * pos


def regulariser(imp, diag):
    """MuJoCo's ``R = max(mjMINVAL, (1 - imp) diag / imp)`` (``diag``: ``efc_diagApprox``)."""
    return jnp.maximum(MINVAL, (1 - imp) * diag / imp)

"""Discrete dynamics of trajectory optimisation and their analytic Jacobians.

One step is semi-implicit (symplectic) Euler on the configuration manifold, the step of
Crocoddyl's ``IntegratedActionModelEuler`` on ``DifferentialActionModelFreeFwdDynamics``
(Mastalli et al., "Crocoddyl: An Efficient and Versatile Framework for Multi-Contact Optimal
Control", ICRA 2020) and of ``"euler"`` in :mod:`jaxdyn.sim` (without its passive forces)::

    a  = FD(q, v, B u)          v' = v + dt a          q' = q ⊕ dt v'

State ``x = (q, v)`` (``nq + nv``), state increments ``dx = (dq, dv)`` (``2 nv``, ``dq`` in the
tangent space of :func:`jaxdyn.integrate`, Crocoddyl's ``StateMultibody``). By the chain rule,
with ``(Jq, Jw)`` the :func:`~jaxdyn.trajopt.lie.integrate_jacobians` at ``(q, dt v')`` and the
forward-dynamics partials ``(a_q, a_v, a_u)``::

    Fx = [[Jq + dt² Jw a_q,  dt Jw (I + dt a_v)],      Fu = [[dt² Jw a_u],
          [dt a_q,           I + dt a_v       ]]             [dt a_u    ]]

``a_q, a_v, a_tau = M^-1`` come from :func:`jaxdyn.aba_derivatives` (FDSVA: Singh, Russell &
Wensing 2022) for :class:`FreeDynamics`; :class:`ContactDynamics` (bilateral constraints,
the equations of :func:`jaxdyn.constrained_aba`) differentiates the constrained equations (the
implicit function theorem: forward-mode autodiff of inverse dynamics and of the constraint
kinematics from the body placements, one Delassus solve), as Crocoddyl's contact dynamics.

:func:`step` carries a ``jax.custom_jvp`` rule built on :func:`step_derivatives`, so
``jax.jvp`` / ``jax.jacfwd`` / ``jax.grad`` of anything built on it use the analytic Jacobians
(ambient tangents ``nq`` are mapped to the tangent space on the way in, and back on the way
out); tangents of the model's parameters, of ``dt`` and of the dynamics object fall back to
autodiff of :func:`step_plain` for those leaves only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import _linalg, batching, config, shell, spatial, value_checks
from .._precision import full_precision
from ..algorithms import kinematics as kin
from ..algorithms.aba import aba_solve, aba_solve_xla
from ..algorithms.aba import chunk_words as aba_kernel_chunk_words
from ..algorithms.aba import xla_chunk_words as aba_chunk_words
from ..algorithms.configuration import integrate
from ..algorithms.crba import crba_world
from ..algorithms.rnea import rnea_world
from ..derivatives import configuration_tangent
from ..derivatives.fd import aba_derivatives_world
from ..derivatives.jvp import is_zero_tangent
from . import lie

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..model.model import Model


__all__ = [
    "ContactDynamics",
    "FreeDynamics",
    "step",
    "step_derivatives",
    "step_plain",
]

DERIVATIVES = ("analytic", "autodiff")


def _torque(B, u):
    return u if B is None else B @ u


def _input_jacobian(B, M):
    """``M B`` (``M`` when ``B`` is None, full actuation)."""
    return M if B is None else M @ B


def _concrete(x):
    """``x`` as a float numpy array, or ``None`` when it holds a tracer (values unknown)."""
    if any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(x)):
        return None
    return np.asarray(x, dtype=float)


def _check_actuation(owner, B):
    """``B`` ``None`` or a matrix ``(nv, nu)`` (its rows checked against a model by
    :func:`_check_rows`)."""
    if B is not None and np.ndim(B) != 2:
        raise ValueError(
            f"{owner}: actuation has shape {tuple(np.shape(B))}, expected (nv, nu) (an input "
            "matrix) or None (every joint actuated)"
        )


def _check_rows(fn, dynamics, model):
    B = getattr(dynamics, "actuation", None)
    if B is not None and np.shape(B)[0] != model.nv:
        raise ValueError(
            f"{fn}: dynamics.actuation has shape {tuple(np.shape(B))}, expected (nv, nu) = "
            f"({model.nv}, nu) for {model.name!r}"
        )


def _check_gain(owner, name, x):
    """A concrete gain finite and ``>= 0`` (``ValueError`` naming it); a traced one is left to
    the caller (under ``jax.vmap`` / ``jax.jit`` its values are unknown)."""
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{owner}: {name} must be a number >= 0, got {x!r}")
    try:
        a = _concrete(x)
    except (TypeError, ValueError):
        raise TypeError(f"{owner}: {name} must be a number >= 0, got {x!r}") from None
    if a is not None and not np.all(np.isfinite(a) & (a >= 0)):
        raise ValueError(f"{owner}: {name} must be finite and >= 0, got {x!r}")


#: ``qdd`` of the free dynamics by XLA's code, with ``aba``'s choice of method and its
#: batching rule: the rollouts of fused CPU loops (:func:`jaxdyn.config.fused_cpu_loops`, and
#: a solve compiled into one kernel, :mod:`jaxdyn.backend.fused_programs`: a loop holding a
#: custom call is not fused) take the ABA sweeps. No value checks: a diverged trial state of
#: a solver must give NaN, not an error.
_free_acceleration = batching.batched(aba_solve_xla, aba_chunk_words)
#: the same ``qdd`` by jaxdyn's C kernel of the ABA where it runs (:func:`jaxdyn.aba`'s,
#: :func:`jaxdyn.algorithms.aba.aba_solve`; XLA's code elsewhere and for derivatives): the
#: rollouts of the unfused solve program (issues 52/53), where XLA's sweeps, or the dense
#: route (CRBA, RNEA and a LAPACK Cholesky) on deep trees, were dozens of XLA kernels a step
#: to compile and to launch, and the kernel is one custom call; under ``jax.vmap`` over
#: problems one call computes the batch
_free_acceleration_kernel = batching.batched(aba_solve, aba_kernel_chunk_words)


class FreeDynamics(eqx.Module):
    """Unconstrained forward dynamics ``a = ABA(q, v, B u)`` (Crocoddyl's
    ``DifferentialActionModelFreeFwdDynamics``).

    ``actuation``: ``None`` (every joint actuated, ``nu = nv``: ``ActuationModelFull``) or an
    input matrix ``B (nv, nu)``; :meth:`floating_base` builds Crocoddyl's
    ``ActuationModelFloatingBase`` (the first six coordinates, the free joint, unactuated).
    """

    actuation: jax.Array | None = None

    def __check_init__(self):
        _check_actuation("FreeDynamics", self.actuation)

    @staticmethod
    def floating_base(model: Model, dtype: DTypeLike | None = None) -> FreeDynamics:
        """``B = [0; I]`` of a floating-base model (``nu = nv - 6``)."""
        if not model.topo.floating_base:
            raise ValueError(
                f"FreeDynamics.floating_base: {model.name!r} has no floating base; use "
                "actuation=None (all joints actuated)"
            )
        nv = model.nv
        dtype = dtype or model.mass.dtype
        # numpy, then one transfer (no eager program compiled: jnp.eye and its slice are two)
        return FreeDynamics(jax.device_put(np.eye(nv, dtype=np.dtype(dtype))[:, 6:]))

    def nu(self, model: Model) -> int:
        return model.nv if self.actuation is None else int(self.actuation.shape[1])

    def acceleration(self, model: Model, q: ArrayLike, v: ArrayLike, u: ArrayLike) -> Array:
        tau = jnp.asarray(_torque(self.actuation, u))
        if config.fused_cpu_loops_enabled():
            return _free_acceleration(model, q, jnp.asarray(v), tau, None, "sweeps")
        return _free_acceleration_kernel(model, q, jnp.asarray(v), tau, None, "auto")

    def derivatives(
        self, model: Model, q: ArrayLike, v: ArrayLike, u: ArrayLike
    ) -> tuple[Array, Array, Array, Array]:
        """``(a, a_q, a_v, a_u)``: FDSVA partials (Singh, Russell & Wensing 2022, Eq. 5)."""
        ws = kin.world_state(model, q, centered=True)
        # aba_derivatives_world takes arrays (identity on jax arrays and tracers)
        v, tau = jnp.asarray(v), jnp.asarray(_torque(self.actuation, u))
        # M^-1 from q: jaxdyn's C kernel where it runs (fewer XLA kernels in the program)
        a, a_q, a_v, Minv = aba_derivatives_world(model, ws, v, tau, q=jnp.asarray(q, ws.S.dtype))
        return a, a_q, a_v, _input_jacobian(self.actuation, Minv)


class ContactDynamics(eqx.Module):
    """Forward dynamics with bilateral constraints (feet welded or connected to the ground),
    the accelerations of ``constrained_aba(q, v, B u, constraints)`` (Crocoddyl's
    ``DifferentialActionModelContactFwdDynamics``), the same equations solved through the
    joint-space inertia and the Delassus matrix (:meth:`_constrained_solve`).

    - ``constraints``: tuple of :class:`jaxdyn.Weld` / :class:`jaxdyn.Connect` (static);
    - ``actuation``: ``None`` or ``B (nv, nu)`` (:meth:`FreeDynamics.floating_base`);
    - ``baumgarte``: ``None`` or ``(kp, kd)`` stabilisation gains, each finite and ``>= 0``
      (``J a + Jdot v + kd J v + kp e = 0``, :func:`jaxdyn.constrained_aba`); ``damping``:
      Delassus regularisation ``>= 0`` (needed for redundant constraints).

    The constraints are ideal (hard, bilateral): there is no ``solref`` here, so
    :mod:`jaxdyn.sim`'s check of MuJoCo's direct (negative) ``solref`` does not apply; its
    analogue, a negative gain, is refused at construction, as are a non-finite gain or damping,
    ``baumgarte`` that is not a pair, constraints that are not ``Weld`` / ``Connect`` and an
    ``actuation`` that is not a matrix (``ValueError`` naming the argument; gains traced under
    ``jax.vmap`` / ``jax.jit`` are not checked: a solver's step must not raise). Its rows are
    checked against the model by :class:`~jaxdyn.trajopt.ddp.Problem` and :func:`step`.

    The partials come from the implicit function theorem on the constrained equations
    (:meth:`derivatives`), as Crocoddyl's.
    """

    constraints: tuple = eqx.field(static=True)
    actuation: jax.Array | None = None
    baumgarte: tuple | None = None
    damping: float = 0.0
    #: whether the Baumgarte position gain ``kp`` is a zero known at construction (then the
    #: constraints need no target): read before ``jit`` turns the gain into a tracer
    kp_zero: bool = eqx.field(static=True, init=False, repr=False)

    def __post_init__(self):
        from ..constraints import check_constraints

        self.constraints = check_constraints("ContactDynamics", self.constraints)
        bg = self.baumgarte
        pair = isinstance(bg, (tuple, list)) and len(bg) == 2
        self.kp_zero = bg is None or (pair and not _static_nonzero(bg[0]))

    def __check_init__(self):
        owner = "ContactDynamics"
        _check_actuation(owner, self.actuation)
        if self.baumgarte is not None:
            bg = self.baumgarte
            if isinstance(bg, (str, bytes)) or not isinstance(bg, (tuple, list)) or len(bg) != 2:
                raise ValueError(f"{owner}: baumgarte must be None or a pair (kp, kd), got {bg!r}")
            _check_gain(owner, "baumgarte kp", bg[0])
            _check_gain(owner, "baumgarte kd", bg[1])
        _check_gain(owner, "damping", self.damping)

    def nu(self, model: Model) -> int:
        return model.nv if self.actuation is None else int(self.actuation.shape[1])

    def _solve(self, model, q, v, u):
        """``(a, λ)`` of the constrained solve (NaN at a non-finite state, see below): the
        equations of :func:`jaxdyn.constrained_aba` solved through ``M`` (CRBA) and the
        Delassus matrix (:meth:`_constrained_solve`), from the world state and constraint terms
        that :meth:`derivatives` computes too (:meth:`_constraint_terms`): in the solvers'
        rollouts fewer XLA kernels per knot than the articulated-body passes, and one way of
        solving the same equations in the rollouts and in the derivatives."""
        # Guard: a diverged trial state of a solver must give NaN, not an error, so the solve
        # runs at a finite state, without its value checks (the solvers' loops then hold no
        # custom call of a check: fused CPU loops apply, and a GPU makes no host round trip per
        # knot); a singular Delassus matrix gives a non-finite acceleration, which the solvers
        # reject (status 2 at the initial guess).
        ok, qs, vs, us = _guard(model, q, v, u)
        with value_checks.unchecked():
            ws, J, gamma = self._constraint_terms(model, qs, vs)
            a, lam, *_ = self._constrained_solve(model, ws, J, gamma, vs, us)
        return jnp.where(ok, a, jnp.nan), jnp.where(ok, lam, jnp.nan)

    def acceleration(self, model: Model, q: ArrayLike, v: ArrayLike, u: ArrayLike) -> Array:
        return self._solve(model, q, v, u)[0]

    def derivatives(
        self, model: Model, q: Array, v: Array, u: Array
    ) -> tuple[Array, Array, Array, Array]:
        """``(a, a_q, a_v, a_u)`` by the implicit function theorem on the constrained
        equations (as Crocoddyl's ``DifferentialActionModelContactFwdDynamics.calcDiff``)::

            ID(q, v, a) - J(q)^T λ = B u,     J(q) a + γ(q, v) + μ λ = 0

        (``ID`` inverse dynamics, ``γ`` the drift ``Jdot v`` plus the Baumgarte terms, ``μ``
        the damping): with ``R_x``, ``g_x`` the partials of the two left-hand sides at fixed
        ``(a, λ)`` (forward-mode autodiff of :meth:`_residuals`, in the tangent space, its
        tangents seeded at the body placements by the joints' world twists:
        :func:`_placement_seed`) and ``D = J M^-1 J^T + μ``::

            dλ = D^-1 (J M^-1 (R_x - B du) - g_x),    da = M^-1 (J^T dλ - R_x + B du)

        Only the two residuals are differentiated, never the Delassus solve itself, and they
        are read from one RNEA pass, without ``J``: ``J^T λ`` enters as the constraint
        forces applied to the bodies, ``J a + Jdot v`` is the constraint frames' acceleration
        from RNEA's outward pass (as Pinocchio's ``computeRNEADerivatives`` with the contact
        forces as external forces and its frame acceleration derivatives, which Crocoddyl's
        contact dynamics use). The solve's ``(a, λ)``, ``M``, ``J`` and the Delassus matrix
        come from one pass of kinematics at ``q``, without tangents: the same equations as
        :func:`jaxdyn.constrained_aba`'s, solved through ``M`` (CRBA) rather than its
        articulated-body passes, which the partials need anyway."""
        nv = model.nv
        ok, q, v, u = _guard(model, q, v, u)
        zero = jnp.zeros(nv, q.dtype)
        with value_checks.unchecked():
            placements = _placement_seed(model, q)
            ((R_q, R_v), (g_q, g_v)), (a, M, J, MinvJt, D) = jax.jacfwd(
                lambda dq, vv: self._residuals(model, q, dq, vv, u, placements),
                (0, 1),
                has_aux=True,
            )(zero, v)
        B = jnp.eye(nv, dtype=q.dtype) if self.actuation is None else self.actuation
        # right-hand sides for (q, v, u) at once: ID's partials (-B for u) and γ's (0 for u)
        R = jnp.concatenate([R_q, R_v, -B.astype(q.dtype)], 1)
        g = jnp.concatenate([g_q, g_v, jnp.zeros((J.shape[0], B.shape[1]), q.dtype)], 1)
        MinvR = _linalg.spd_solve(M, R)
        dlam = _linalg.spd_solve(D, J @ MinvR - g)
        da = MinvJt @ dlam - MinvR
        # a non-finite state or control: NaN (the solve and its partials ran at a stand-in)
        a, da = jnp.where(ok, a, jnp.nan), jnp.where(ok, da, jnp.nan)
        return a, da[:, :nv], da[:, nv : 2 * nv], da[:, 2 * nv :]

    def _residuals(self, model, q, dq, v, u, placements=None):
        """``((ID(q ⊕ dq, v, a) - J^T λ, J a + γ), (a, M, J, M^-1 J^T, D))`` (to first order
        in ``dq`` when ``placements``, :func:`_placement_seed`'s function of ``dq``, gives the
        body placements; ``integrate(q, dq)`` without it) for the ``(a, λ)`` that solve the
        constrained equations at ``q`` (``dq = 0``), held fixed (``stop_gradient``: no
        tangents)::

            a = a_f + M^-1 J^T λ,   D λ = -(γ + J a_f),   a_f = M^-1 (B u - h(q, v))

        with ``h`` RNEA at zero acceleration and ``D = J M^-1 J^T + μ``. One world state
        (centred on the floating base) gives the constraint frames' placements and rows, and
        the two residuals come from one RNEA pass (:func:`rnea_world`), without the constraint
        Jacobian's tangents:

        - ``J^T λ``: the rows ``K_r`` of the constraints
          (:func:`jaxdyn.constraints.rows_from_placements`, ``J = K S`` on each row's support)
          act on world-origin spatial motions, so ``J^T λ = S^T Σ_{subtree} f`` with
          ``f_b = Σ_{r on b} λ_r K_r``, the constraint forces at the world origin, which RNEA
          takes as external forces;
        - ``J a + Jdot v``: the constraint frames' acceleration rows from the bodies'
          accelerations of RNEA's outward pass (gravity's root acceleration removed) and
          velocities (:func:`jaxdyn.constraints.point_terms`), which also give ``J v`` for the
          Baumgarte term ``kd J v``; ``kp e`` from the frames' placements.

        ``J`` and ``γ`` of the solve come from the same placements without tangents."""
        from .. import constraints as cons

        sg = jax.lax.stop_gradient
        if placements is None:
            lay, ws, pl, K, e = self._frames(model, integrate(model, q, dq))
        else:
            lay, ws, pl, K, e = self._frames(model, None, placements(dq))
        dt = ws.S.dtype
        # the constrained solve at q, without tangents
        ws0, pl0, v0 = sg(ws), sg(pl), sg(v)
        J = cons.jacobian_from_rows(model, ws0, lay, sg(K))
        y0, gamma = cons.kinematic_terms(model, ws0, v0, lay, pl0)
        gamma = self._baumgarte(gamma, y0, None if e is None else sg(e))
        a, lam, M, MinvJt, D = self._constrained_solve(model, ws0, J, gamma, v0, u)
        # the residuals: J^T λ as forces on the bodies, J a + Jdot v from RNEA's accelerations
        onto = np.zeros((model.nb, lay.m))  # row r -> its body (static)
        onto[lay.row_body, np.arange(lay.m)] = 1.0
        f_world = jnp.asarray(onto, dt) @ (lam[:, None] * K)
        r, vel, acc, _ = rnea_world(model, ws, v, a, f_world=f_world)
        y, g = cons.point_terms(lay, pl, vel, acc - kin.gravity_acceleration(model, dt))
        return (r, self._baumgarte(g, y, e)), (a, M, J, MinvJt, D)

    def _baumgarte(self, g, y, e):
        """``g + kd y + kp e`` (the terms that ``baumgarte`` has; ``e`` None when ``kp`` is a
        static zero)."""
        if self.baumgarte is None:
            return g
        kp, kd = self.baumgarte
        g = g + kd * y
        return g if e is None else g + kp * e

    def _constraint_terms(self, model, q, v, placements=None):
        """``(ws, J, γ)``: the world state at ``q`` (centred on the floating base), the
        constraint Jacobian and ``γ = Jdot v + kd J v + kp e`` (drift and Baumgarte terms),
        from one pass of kinematics (module docstring of :meth:`_residuals`)."""
        from .. import constraints as cons

        lay, ws, pl, K, e = self._frames(model, q, placements)
        J = cons.jacobian_from_rows(model, ws, lay, K)
        y, drift = cons.kinematic_terms(model, ws, v, lay, pl)
        return ws, J, self._baumgarte(drift, y, e)

    def _frames(self, model, q, placements=None):
        """``(lay, ws, pl, K, e)`` from one pass of kinematics at ``q`` (or at the body
        placements ``placements = (Rb, pb, base)``, ``pb`` centred on ``base``): the
        constraints' layout, the world state centred on the floating base, the constraint
        frames' placements and rows, and the constraint error ``e`` of the Baumgarte term
        (its points moved back to the ground frame; ``None`` without a ``kp`` term)."""
        from .. import constraints as cons

        _, lay = cons.get_layout("ContactDynamics", model, self.constraints)
        if placements is None:
            Rb, pb = kin.body_placements(model, q)
            base = pb[:1] if model.topo.floating_base else jnp.zeros((1, 3), pb.dtype)
            pb = pb - base
        else:
            Rb, pb, base = placements
        ws = kin.world_state_from_placements(model, Rb, pb)
        pl = cons.placements_from_state(model, ws, lay)
        e = None
        if self.baumgarte is not None and not self.kp_zero:
            Rt, pt = cons.target_arrays("ContactDynamics", self.constraints, lay, None, pb.dtype)
            e = cons.error_from_placements(lay, pl._replace(p=pl.p + base), Rt, pt)
        return lay, ws, pl, cons.rows_from_placements(lay, pl), e

    def _constrained_solve(self, model, ws, J, gamma, v, u):
        """``(a, λ, M, M^-1 J^T, D)`` of ``M a + h - J^T λ = B u``, ``J a + γ + μ λ = 0``::

            a = a_f + M^-1 J^T λ,   D λ = -(γ + J a_f),   a_f = M^-1 (B u - h(q, v))

        with ``h`` RNEA at zero acceleration and ``D = J M^-1 J^T + μ`` (Cholesky solves)."""
        dt = J.dtype
        M = crba_world(model, ws)
        h = rnea_world(model, ws, v, jnp.zeros_like(v))[0]
        MinvJt = _linalg.spd_solve(M, J.T)
        a_f = _linalg.spd_solve(M, _torque(self.actuation, u) - h)
        D = J @ MinvJt + jnp.asarray(self.damping, dt) * jnp.eye(J.shape[0], dtype=dt)
        lam = _linalg.spd_solve(D, -(gamma + J @ a_f))
        return a_f + MinvJt @ lam, lam, M, MinvJt, D


def _placement_seed(model, q):
    """``dq -> (R, p, base)``: the body placements at ``q ⊕ dq`` to first order in ``dq``,
    centred on the floating base (``p`` relative to ``base``, the base's position).

    ``d/dε (q ⊕ ε dq)`` moves body ``b`` by the world twist ``δV_b = Σ_{j ⪯ b} S_j dq_j``
    (``S`` the world motion subspace columns, the convention of :func:`jaxdyn.integrate`):
    ``δR_b = [δω_b]× R_b``, ``δp_b = δv_b + δω_b × p_b`` (Featherstone 2008, §2.9; Pinocchio's
    ``computeJointJacobians``). Forward-mode autodiff at ``dq = 0`` then starts from the
    placements instead of differentiating the configuration's exponential map (``integrate``)
    and the outward pass of placements (quaternions, joint transforms), one step of
    accumulation of ``S dq`` up the tree instead: the same tangents, a smaller program."""
    from ..model import tree

    sg = jax.lax.stop_gradient
    Rb, pb = kin.body_placements(model, q)
    base = pb[:1] if model.topo.floating_base else jnp.zeros((1, 3), pb.dtype)
    Rb, pb, base = sg(Rb), sg(pb - base), sg(base)
    S = sg(kin.world_state_from_placements(model, Rb, pb).S)

    def placements(dq):
        dV = tree.forward_accumulate(
            model.topo, tree.dofs_to_bodies(model.topo, S * dq[:, None]), jnp.zeros(6, S.dtype)
        )
        w, dv = dV[:, :3], dV[:, 3:]
        R = Rb + spatial.mm(spatial.skew(w), Rb)
        p = pb + dv + spatial.cross(w, pb)
        # re-centred on the moved base, as the plain path's world state at q ⊕ dq
        b = p[:1] if model.topo.floating_base else jnp.zeros((1, 3), p.dtype)
        return R, p - b, base + b

    return placements


def _guard(model, q, v, u):
    """``(ok, q, v, u)``: whether the state and control are finite, and them where they are,
    else a finite stand-in (the neutral configuration, zeros)."""
    ok = jnp.all(jnp.isfinite(q)) & jnp.all(jnp.isfinite(v)) & jnp.all(jnp.isfinite(u))
    qs = jnp.where(ok, q, _neutral(model, q.dtype))
    return ok, qs, jnp.where(ok, v, 0.0), jnp.where(ok, u, 0.0)


def _static_nonzero(x):
    """Whether a gain is not a static zero (a traced gain counts as non-zero)."""
    try:
        return float(x) != 0.0
    except (TypeError, jax.errors.ConcretizationTypeError):
        return True


def _neutral(model, dtype):
    from ..algorithms.configuration import neutral_configuration

    return neutral_configuration(model, dtype)


def _default(dynamics):
    return FreeDynamics() if dynamics is None else dynamics


# ----------------------------------------------------------------------------- the step


def _split(model, x):
    return x[: model.nq], x[model.nq :]


def step_plain(
    model: Model,
    x: ArrayLike,
    u: ArrayLike,
    dt: ArrayLike,
    dynamics: FreeDynamics | ContactDynamics | None = None,
) -> Array:
    """One semi-implicit Euler step ``x' = (q ⊕ dt v', v')``, ``v' = v + dt a`` with plain
    JAX operations (autodiff differentiates it op by op; :func:`step` is the same function
    with the analytic ``custom_jvp`` rule)."""
    dynamics = _default(dynamics)
    q, v = _split(model, x)
    a = dynamics.acceleration(model, q, v, u)
    v1 = v + dt * a
    return jnp.concatenate([integrate(model, q, dt * v1), v1])


def _step_analytic(model, x, u, dt, dynamics):
    """``(x', Fx, Fu)`` from the forward-dynamics partials and the integrate Jacobians."""
    q, v = _split(model, x)
    nv = model.nv
    a, a_q, a_v, a_u = dynamics.derivatives(model, q, v, u)
    v1 = v + dt * a
    w = dt * v1
    q1 = integrate(model, q, w)
    eye = jnp.eye(nv, dtype=x.dtype)
    dv_dq, dv_dv, dv_du = dt * a_q, eye + dt * a_v, dt * a_u
    if lie._all_one_dof(model):  # Jq = Jw = I
        dq_dq, dq_dv, dq_du = eye + dt * dv_dq, dt * dv_dv, dt * dv_du
    else:
        # Jq, Jw are block diagonal by joint: Jw's products joint by joint (a free joint's
        # 6 x 6 block, identity rows elsewhere), Jq assembled for the sum
        Jq_blocks, Jw_blocks = lie._integrate_jacobian_blocks(model, q, w)
        Jq = lie._block_diag(model, Jq_blocks, x.dtype)
        nu = dv_du.shape[1]
        JwdV = dt * lie.block_diag_matmul(
            model, Jw_blocks, jnp.concatenate([dv_dq, dv_dv, dv_du], 1)
        )
        dq_dq = Jq + JwdV[:, :nv]
        dq_dv, dq_du = JwdV[:, nv : 2 * nv], JwdV[:, 2 * nv : 2 * nv + nu]
    Fx = jnp.concatenate(
        [jnp.concatenate([dq_dq, dq_dv], 1), jnp.concatenate([dv_dq, dv_dv], 1)], 0
    )
    Fu = jnp.concatenate([dq_du, dv_du], 0)
    return jnp.concatenate([q1, v1]), Fx, Fu


def _step_autodiff(model, x, u, dt, dynamics):
    """``(x', Fx, Fu)`` by forward-mode autodiff (``jax.jacfwd``) of :func:`step_plain`
    through ``x ⊕ dx``, the ambient output tangents mapped to the tangent space at ``x'``."""
    nv, nq = model.nv, model.nq

    def f(dx, uu):
        return step_plain(model, lie.state_integrate(model, x, dx), uu, dt, dynamics)

    zero = jnp.zeros(2 * nv, x.dtype)
    x1 = f(zero, u)
    Jx, Ju = jax.jacfwd(f, (0, 1))(zero, u)

    def to_tangent(t):
        return jnp.concatenate([configuration_tangent(model, x1[:nq], t[:nq]), t[nq:]])

    Fx = jax.vmap(to_tangent, in_axes=1, out_axes=1)(Jx)
    Fu = jax.vmap(to_tangent, in_axes=1, out_axes=1)(Ju)
    return x1, Fx, Fu


def _check(fn, model, x, u, dt, dynamics):
    dynamics = _default(dynamics)
    if not hasattr(dynamics, "derivatives"):
        raise TypeError(
            f"{fn}: dynamics must be a FreeDynamics or a ContactDynamics, got "
            f"{type(dynamics).__name__}"
        )
    _check_rows(fn, dynamics, model)
    if np.shape(dt) != ():
        raise ValueError(f"{fn}: dt has shape {tuple(np.shape(dt))}, expected a scalar")
    h = _concrete(dt)
    if h is not None and not (np.isfinite(h) and h > 0):
        raise ValueError(f"{fn}: dt must be a finite time step > 0, got {float(h)!r}")
    x = shell.as_array(fn, "x", x, (("nq + nv", model.nq + model.nv),), model)
    u = shell.as_array(fn, "u", u, (("nu", dynamics.nu(model)),), model)
    dtype = shell.common_dtype(x, u, dt, model=model)
    return model.astype(dtype), x.astype(dtype), u.astype(dtype), jnp.asarray(dt, dtype), dynamics


@full_precision
def step_derivatives(
    model: Model,
    x: ArrayLike,
    u: ArrayLike,
    dt: ArrayLike,
    dynamics: FreeDynamics | ContactDynamics | None = None,
    derivatives: str = "analytic",
) -> tuple[Array, Array, Array]:
    """Jacobians of one discrete step in the tangent space (Crocoddyl's ``Fx``, ``Fu``).

    **Arguments:**

    - ``x (nq + nv,)``: the state ``(q, v)``; ``u (nu,)``: the control; ``dt``: the step.
    - ``dynamics``: :class:`FreeDynamics` (default, full actuation) or
      :class:`ContactDynamics`.
    - ``derivatives``: ``"analytic"`` (FDSVA partials and :mod:`~jaxdyn.trajopt.lie`
      Jacobians, see the module docstring) or ``"autodiff"`` (forward-mode autodiff of
      :func:`step_plain` through ``x ⊕ dx``).

    **Returns:** ``(x_next (nq + nv,), Fx (2 nv, 2 nv), Fu (2 nv, nu))`` with
    ``x_next ⊕ (Fx dx + Fu du) = step(x ⊕ dx, u + du) + o(|dx| + |du|)``.
    """
    if derivatives not in DERIVATIVES:
        raise ValueError(
            f"step_derivatives: derivatives must be one of {DERIVATIVES}, got {derivatives!r}"
        )
    model, x, u, dt, dynamics = _check("step_derivatives", model, x, u, dt, dynamics)
    if derivatives == "autodiff":
        return _step_autodiff(model, x, u, dt, dynamics)
    return _step_analytic(model, x, u, dt, dynamics)


# ----------------------------------------------------------------------------- custom_jvp


@jax.custom_jvp
def _step_cj(model, x, u, dt, dynamics):
    return step_plain(model, x, u, dt, dynamics)


def _step_jvp(primals, tangents):
    model, x, u, dt, dynamics = primals
    dmodel, dx, du, ddt, ddyn = tangents
    nq, nv = model.nq, model.nv
    if is_zero_tangent(dx) and is_zero_tangent(du):
        x1 = step_plain(model, x, u, dt, dynamics)
        out = jnp.zeros_like(x1)
    else:
        x1, Fx, Fu = _step_analytic(model, x, u, dt, dynamics)
        out = jnp.zeros(2 * nv, x1.dtype)
        if not is_zero_tangent(dx):
            dxt = jnp.concatenate([configuration_tangent(model, x[:nq], dx[:nq]), dx[nq:]])
            out = out + Fx @ dxt
        if not is_zero_tangent(du):
            out = out + Fu @ du
        out = jnp.concatenate([lie.tangent_to_ambient(model, x1[:nq], out[:nv]), out[nv:]])
    # parameters (model leaves, dt, dynamics leaves): autodiff of the plain step, those only
    rest = _parameter_tangent(model, x, u, dt, dynamics, dmodel, ddt, ddyn)
    if rest is not None:
        out = out + rest
    return x1, out


def _parameter_tangent(model, x, u, dt, dynamics, dmodel, ddt, ddyn):
    primal = (model, dt, dynamics)
    leaves, treedef = jax.tree_util.tree_flatten(primal)
    tleaves = treedef.flatten_up_to((dmodel, ddt, ddyn))
    idx = [i for i, t in enumerate(tleaves) if not is_zero_tangent(t)]
    if not idx:
        return None

    def f(*sel):
        full = list(leaves)
        for i, s in zip(idx, sel):
            full[i] = s
        m, h, d = jax.tree_util.tree_unflatten(treedef, full)
        return step_plain(m, x, u, h, d)

    return jax.jvp(f, tuple(leaves[i] for i in idx), tuple(tleaves[i] for i in idx))[1]


_step_cj.defjvp(_step_jvp, symbolic_zeros=True)


@full_precision
def step(
    model: Model,
    x: ArrayLike,
    u: ArrayLike,
    dt: ArrayLike,
    dynamics: FreeDynamics | ContactDynamics | None = None,
) -> Array:
    """One semi-implicit Euler step on the manifold, ``x' = (q ⊕ dt v', v')`` with
    ``v' = v + dt FD(q, v, B u)``, differentiable through the analytic Jacobians of
    :func:`step_derivatives` (a ``jax.custom_jvp`` rule; see the module docstring).

    **Arguments:** ``x (nq + nv,)``, ``u (nu,)``, ``dt``, ``dynamics`` (:class:`FreeDynamics`
    by default). **Returns:** ``x' (nq + nv,)``.
    """
    model, x, u, dt, dynamics = _check("step", model, x, u, dt, dynamics)
    return _step_cj(model, x, u, dt, dynamics)

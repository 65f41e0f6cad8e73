"""Time stepping: state, configuration, ``step`` and ``rollout``.

``step(model, state, ctrl, cfg)`` advances one control period ``cfg.dt`` (``cfg.substeps``
integrator steps of ``dt / substeps``); ``rollout`` scans it. Both are unbatched pure functions
(``jax.vmap`` them over states, controls, configurations or models) and differentiable in
forward and reverse mode.

Integrators (``cfg.integrator``, default ``"implicit"``), all on the configuration manifold
through :func:`jaxdyn.integrate` (right increment ``q ⊕ h v``):

* ``"euler"`` -- semi-implicit (symplectic) Euler: ``v' = v + h a(q, v)``, ``q' = q ⊕ h v'``,
  explicit in the joint forces (actuators, damping, limits) but, with compliant contact,
  linearly implicit in the contact forces' velocity terms (normal damping, regularised
  friction): ``v' = v + h (M + h J^T K J)^-1 (tau - C + J^T f)``, ``K = -df/du`` the forces'
  Jacobian in the contact-point velocities. Explicit, those terms would bound the step by
  ``h lambda_max(K G) < 2`` with ``G = J M^-1 J^T`` the contact points' apparent inverse mass:
  the friction's viscosity ``mu fn / vs`` seen through a light foot is far beyond that at any
  usual step (quad12 at rest: ``mu fn / vs`` = 614 N s/m, ``G`` up to 87 /kg, so ``h`` below
  37 us). Explicit joint forces are stable while ``h d_j (M^-1)_jj < 2`` for a velocity gain
  ``d_j`` (PD ``kd``, damping, limit damping) on coordinate ``j``, roughly; light limbs with
  stiff servos need ``"implicit"``.
* ``"rk4"`` -- Runge-Kutta-Munthe-Kaas of order 4: classical RK4 in the chart
  ``q = q0 ⊕ xi`` with ``xi' = dexp^-1_{-xi}(v)``, truncated after the ``ad^2`` term, which is
  enough for order 4 (Munthe-Kaas 1998); exact Euclidean RK4 for one-DoF joints. Explicit in
  every force, contact included (stable for ``h lambda < 2.78`` on the damping terms above):
  for smooth dynamics, not for compliant contact on light feet.
* ``"implicit"`` -- implicit in the velocity-proportional joint forces, like MuJoCo's
  ``implicitfast``: ``v' = v + h (M + h D)^-1 (tau - C - D v)`` with ``D`` the joint damping plus
  the actuators' velocity gains (plus ``J^T K J`` with compliant contact, as in ``"euler"``),
  then ``q' = q ⊕ h v'``. Stable for any damping. Velocity terms that couple coordinates
  (fixed tendons' damping, :class:`~jaxdyn.sim.actuators.GainBias` on tendons) enter ``D``
  exactly, as a low-rank update of the ABA solve (:func:`_low_rank_solve`). A standalone free
  body's gyroscopic torque is implicit too (linearised, its 6 x 6 block re-solved with
  ``M_b + h dC/dv``: :func:`_gyroscopic_correction`), as MuJoCo's ``mjd_freeMhat``.
* ``"implicit_damping"`` -- semi-implicit Euler implicit in the joint damping only,
  ``v' = v + h (M + h diag(damping))^-1 (tau - C)``: MuJoCo's ``Euler`` integrator (with its
  ``eulerdamp`` flag on, MuJoCo's default; with ``eulerdamp`` off MuJoCo's ``Euler`` is
  ``"euler"`` here). With compliant contact it is implicit in the contact's velocity terms
  too, as ``"euler"``: ``(M + h diag(damping) + h J^T K J)``.

Free joints in ``"euler"``, ``"implicit"`` and ``"implicit_damping"``: the step advances the
linear velocity in the parent's axes (the world's for a root), as MuJoCo's free joint, and
moves the joint with it held over the step (``p' = p + h R u'``, ``R' = R exp(h w')``), then
expresses it in the new child axes (the state's convention, :mod:`jaxdyn.joints`): the
transport term ``-w x u`` of the child-axes velocity is then exact (:func:`_transport`), and a
force-free body keeps its linear velocity and moves on a straight line to rounding (stepped
explicitly, a fast spin pumped up its speed). ``"rk4"`` moves every joint by
``q ⊕ xi`` (Munthe-Kaas, conservative as it stands).

Contact (``cfg.contact``): ``None``, :class:`~jaxdyn.sim.contact.Compliant` (forces inside
every integrator) or :class:`~jaxdyn.sim.contact.Constraint` (velocity-level impulses: with
``"euler"`` and ``"implicit"`` only), on the spheres of ``cfg.contacts`` against
``cfg.terrain``.

Reverse mode through long rollouts: ``rollout(..., checkpoint=None | "step" | "sqrt")``
(``jax.checkpoint`` of each step, or of blocks of ``ceil(sqrt(T))`` steps: memory
``O(sqrt(T))`` for one extra forward pass).
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, TypeAlias, cast

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import batching, config, eager, joints, shell, spatial, value_checks
from .._precision import full_precision
from ..algorithms import kinematics as kin
from ..algorithms.aba import (
    aba_passes,
    aba_solve,
    aba_world,
    articulated_inertias,
    kernel_usable,
    world_inertia_matrices,
)
from ..algorithms.configuration import dexp_inv as _dexpinv
from ..algorithms.configuration import integrate
from ..algorithms.crba import crba_world
from ..algorithms.minv import minv_kernel
from ..algorithms.rnea import rnea_world
from ..backend import fusion
from ..model import tree
from . import _params, _soft
from . import _primal as P
from . import contact as C
from . import limits as L
from .actuators import (
    FixedTendons,
    JointLimits,
    SpatialTendons,
    Springs,
    Torque,
    clip_effort,
    joint_properties,
    passive_forces,
)
from .equality import Equalities
from .fluid import Fluid
from .geometry import TERRAINS, ContactSet, Plane
from .limits import FrictionLoss, LimitConstraints

if TYPE_CHECKING:
    from collections.abc import Callable

    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model
    from .actuators import PD, GainBias
    from .geometry import Heightfield


__all__ = [
    "State",
    "SimConfig",
    "step",
    "step_info",
    "rollout",
    "contact_forces",
    "contact_counts",
    "warm_state",
]

INTEGRATORS = ("euler", "rk4", "implicit", "implicit_damping")


class State(eqx.Module):
    """Simulation state: configuration ``q (nq,)``, velocity ``v (nv,)``, time ``t``, the
    actuators' activations ``act (na,)`` (``None`` where the actuator has none:
    :meth:`jaxdyn.sim.GainBias.act_size`) and the last constraint solve's impulses
    ``impulses`` (flat, in the solver's rows: every contact slot's block, then the joint-limit
    rows; ``None``: none carried), from which a :class:`~jaxdyn.sim.contact.Constraint` with
    ``warm_start=True`` starts its next solve (:func:`warm_state` gives a state its first);
    for the primal Newton solve (:func:`jaxdyn.sim.contact.uses_primal_newton`) the last
    solve's acceleration ``qacc (nv,)`` instead, MuJoCo's ``qacc_warmstart``."""

    q: jnp.ndarray
    v: jnp.ndarray
    t: jnp.ndarray
    act: jnp.ndarray | None = None
    impulses: jnp.ndarray | None = None

    def __init__(
        self,
        q: ArrayLike,
        v: ArrayLike,
        t: ArrayLike = 0.0,
        act: ArrayLike | None = None,
        impulses: ArrayLike | None = None,
    ) -> None:
        self.q = jnp.asarray(q)
        self.v = jnp.asarray(v)
        self.t = jnp.asarray(t, dtype=self.v.dtype if hasattr(self.v, "dtype") else None)
        self.act = None if act is None else jnp.asarray(act)
        self.impulses = None if impulses is None else jnp.asarray(impulses)


class SimConfig(eqx.Module):
    """How to step a model.

    - ``dt``: control period (s); ``substeps``: integrator steps per control period (static).
    - ``integrator``: ``"implicit"`` (default), ``"euler"``, ``"rk4"`` or
      ``"implicit_damping"`` (static; see the
      module docs). The default is the one that stays stable with position servos on light
      limbs at 1-5 ms steps, where the explicit joint forces of ``"euler"`` are not (quad12's
      ``PD(20, 0.5)`` at 2 ms, talos_full's ``PD(500, 5)`` at 1 ms), as MuJoCo recommends
      ``implicitfast`` for most models.
    - ``actuator``: :class:`~jaxdyn.sim.actuators.Torque` (default) or
      :class:`~jaxdyn.sim.actuators.PD`; ``ctrl`` has ``actuator.size(model)`` entries.
    - ``contact``: ``None``, :class:`~jaxdyn.sim.contact.Compliant` or
      :class:`~jaxdyn.sim.contact.Constraint`; ``contacts``: the
      :class:`~jaxdyn.sim.geometry.ContactSet` (:func:`jaxdyn.sim.contact_set`);
      ``terrain``: :class:`~jaxdyn.sim.geometry.Plane` (default ``z = 0``) or
      :class:`~jaxdyn.sim.geometry.Heightfield`.
    - ``limits``: :class:`~jaxdyn.sim.actuators.JointLimits` (default) or ``None`` to ignore
      the model's joint limits (and the tendons' length limits).
    - ``springs``: :class:`~jaxdyn.sim.actuators.Springs` (joint springs) or ``None``;
      ``tendons``: :class:`~jaxdyn.sim.actuators.FixedTendons` or ``None``;
      ``spatial_tendons``: :class:`~jaxdyn.sim.actuators.SpatialTendons` (paths through
      sites, pulleys, sphere and cylinder wraps) or ``None``; ``equalities``:
      :class:`~jaxdyn.sim.equality.Equalities`
      (MuJoCo's equality constraints: a force, or rows of the step's constraint problem
      with ``limit_constraints`` or :class:`~jaxdyn.sim.contact.Constraint` contact) or ``None``
      (:meth:`jaxdyn.model.mjcf.MJCFModel.sim_config` fills both from an MJCF scene).
    - ``limit_constraints``: :class:`~jaxdyn.sim.limits.LimitConstraints` (MuJoCo's joint-limit
      constraint: soft rows solved with the contacts of a
      :class:`~jaxdyn.sim.contact.Constraint`, or alone) or ``None`` (default); its joints
      are left out of ``limits``' spring-damper. Velocity-level: with ``"euler"``,
      ``"implicit"`` and ``"implicit_damping"`` (not with ``"euler"`` and
      :class:`~jaxdyn.sim.contact.Compliant` contact, whose forces that integrator makes
      implicit). :meth:`jaxdyn.io.mjcf.MJCFModel.limit_constraints` builds them from a file.
    - ``friction_loss``: :class:`~jaxdyn.sim.limits.FrictionLoss` (MuJoCo's dry joint
      friction, ``frictionloss``: bounded soft rows of MuJoCo's primal problem, solved by the
      primal Newton solve: with the contacts of a :class:`~jaxdyn.sim.contact.Constraint`
      whose solve it is (:func:`~jaxdyn.sim.contact.uses_primal_newton`), or, with ``contact``
      ``None``, with the ``limit_constraints`` rows alone) or ``None`` (default: the model's
      ``friction`` is smooth Coulomb friction); its coordinates' smooth friction is left out.
      Velocity-level: not with ``"rk4"``.
      :meth:`jaxdyn.io.mjcf.MJCFModel.friction_loss` builds it from a file.
    - ``fluid``: :class:`~jaxdyn.sim.fluid.Fluid` (MuJoCo's inertia-based fluid model:
      ``density``, ``viscosity``, ``wind``) or ``None`` (default): a passive force, explicit in
      every integrator but ``"implicit"``, which is implicit in its velocity derivative as
      MuJoCo's ``implicitfast``.
    """

    dt: float = 2e-3
    substeps: int = eqx.field(static=True, default=1)
    integrator: str = eqx.field(static=True, default="implicit")
    actuator: object = Torque()
    contact: object = None
    contacts: ContactSet | None = None
    terrain: Plane | Heightfield = Plane()
    geoms: object = None
    limits: JointLimits | None = JointLimits()
    springs: Springs | None = None
    tendons: FixedTendons | None = None
    spatial_tendons: SpatialTendons | None = None
    equalities: Equalities | None = None
    limit_constraints: LimitConstraints | None = None
    friction_loss: FrictionLoss | None = None
    fluid: Fluid | None = None

    def __check_init__(self):
        if self.integrator not in INTEGRATORS:
            raise ValueError(
                f"SimConfig: integrator must be one of {INTEGRATORS}, got {self.integrator!r}"
            )
        if not isinstance(self.substeps, int) or self.substeps < 1:
            raise ValueError(f"SimConfig: substeps must be an integer >= 1, got {self.substeps!r}")
        if _act_size(self) and self.integrator == "rk4":
            raise ValueError(
                "SimConfig: actuators with activation dynamics are stepped as MuJoCo's Euler / "
                "implicitfast advance them; use integrator='euler', 'implicit' or "
                "'implicit_damping', not 'rk4'"
            )
        if isinstance(self.contact, C.Constraint) and self.integrator == "rk4":
            raise ValueError(
                "SimConfig: Constraint contact is velocity-level (impulses per step); use "
                "integrator='euler' or 'implicit', or Compliant contact with 'rk4'"
            )
        if self.contact is not None and not isinstance(self.contact, (C.Compliant, C.Constraint)):
            raise TypeError(
                f"SimConfig: contact must be None, Compliant or Constraint, got {self.contact!r}"
            )
        if self.contact is not None and self.contacts is None and self.geoms is None:
            raise ValueError(
                "SimConfig: contact model given but no contacts: pass "
                "contacts=jaxdyn.sim.contact_set(model, [Sphere(...), ...]) or geoms (a "
                "jaxdyn.sim.Geoms, e.g. load_mjcf(...).geoms)"
            )
        from .geoms import Geoms

        if self.geoms is not None and not isinstance(self.geoms, Geoms):
            raise TypeError(
                f"SimConfig: geoms must be a jaxdyn.sim.Geoms or None, got "
                f"{type(self.geoms).__name__}"
            )
        if (
            self.geoms is not None
            and isinstance(self.contact, C.Compliant)
            and self.geoms.contact_dims().max(initial=0) > 3
        ):
            g = self.geoms
            cd = g.contact_dims()
            names = [f"{g.names[a]}-{g.names[b]}" for (a, b), c in zip(g.pairs, cd) if c > 3]
            more = f" ... ({len(names)} in all)" if len(names) > 4 else ""
            raise ValueError(f"SimConfig: geom pairs {', '.join(names[:4])}{more}: {C.CONDIM_HARD}")
        if self.fluid is not None and not isinstance(self.fluid, Fluid):
            raise TypeError(f"SimConfig: fluid must be None or Fluid, got {self.fluid!r}")
        if self.springs is not None and not isinstance(self.springs, Springs):
            raise TypeError(f"SimConfig: springs must be None or Springs, got {self.springs!r}")
        if self.tendons is not None and not isinstance(self.tendons, FixedTendons):
            raise TypeError(
                f"SimConfig: tendons must be None or FixedTendons, got {self.tendons!r}"
            )
        if self.spatial_tendons is not None and not isinstance(
            self.spatial_tendons, SpatialTendons
        ):
            raise TypeError(
                f"SimConfig: spatial_tendons must be None or SpatialTendons, got "
                f"{self.spatial_tendons!r}"
            )
        if self.equalities is not None and not isinstance(self.equalities, Equalities):
            raise TypeError(
                f"SimConfig: equalities must be None or Equalities, got {self.equalities!r}"
            )
        if self.limit_constraints is not None:
            if not isinstance(self.limit_constraints, LimitConstraints):
                raise TypeError(
                    f"SimConfig: limit_constraints must be None or LimitConstraints, got "
                    f"{type(self.limit_constraints).__name__}"
                )
            if self.integrator == "rk4" or (
                self.integrator == "euler" and isinstance(self.contact, C.Compliant)
            ):
                raise ValueError(
                    "SimConfig: limit_constraints are velocity-level (impulses per step); use "
                    "integrator='euler' (without Compliant contact), 'implicit' or "
                    f"'implicit_damping', not {self.integrator!r}"
                )
            lim = self.limit_constraints
            lim.check_tendons(self.tendons, self.spatial_tendons, "SimConfig: limit_constraints")
            for kind, i in lim.tendons:
                ten = self.tendons if kind == "fixed" else self.spatial_tendons
                assert ten is not None  # check_tendons
                bounds = (ten.lower, ten.upper)
                if not any(isinstance(b, jax.core.Tracer) for b in bounds) and np.any(
                    np.isfinite([np.asarray(b)[i] for b in bounds])
                ):
                    raise ValueError(
                        f"SimConfig: {kind} tendon {i} has a limit row in limit_constraints "
                        "and finite lower / upper (its spring-damper limit too); make them "
                        "-inf / inf"
                    )
        if self.friction_loss is not None:
            if not isinstance(self.friction_loss, FrictionLoss):
                raise TypeError(
                    f"SimConfig: friction_loss must be None or FrictionLoss, got "
                    f"{type(self.friction_loss).__name__}"
                )
            if self.contact is not None and not C.uses_primal_newton(self.contact):
                raise ValueError(
                    "SimConfig: friction_loss (MuJoCo's dry-friction rows) is solved only by "
                    "the primal Newton solve: with contact=Constraint(soft=True, relaxed=True, "
                    "solver='newton'), or with contact None (the rows then solved with the "
                    f"limit rows alone), got contact={self.contact!r}; else leave "
                    "friction_loss None (the model's friction is then smooth Coulomb friction)"
                )
            if self.integrator == "rk4":
                raise ValueError(
                    "SimConfig: friction_loss rows are velocity-level (impulses per step); use "
                    "integrator='euler', 'implicit' or 'implicit_damping', not 'rk4'"
                )
        if not isinstance(self.terrain, TERRAINS):
            raise TypeError(
                f"SimConfig: terrain must be a Plane or a Heightfield, got "
                f"{type(self.terrain).__name__}"
            )
        dt = self.dt
        if not isinstance(dt, jax.core.Tracer):
            dt = np.asarray(dt)
            if dt.shape == () and not (np.isfinite(dt) and dt > 0):
                raise ValueError(f"SimConfig: dt must be finite and > 0, got {float(dt)}")
        _params.check_solref("SimConfig", self)  # concrete solref here; step checks traced
        self._check_solimp()

    def _check_solimp(self):
        """Contacts whose MuJoCo ``solimp`` (``cfg.contacts`` / ``cfg.geoms``, an explicit
        pair's ``pair_solimp``) is off MuJoCo's default, refused by name for the contact
        models without an impedance (the hard ``Constraint``, ``Compliant``): only
        ``Constraint(soft=True)`` honours it (concrete values; traced ones are not checked)."""
        if self.contact is None or getattr(self.contact, "soft", False):
            return
        default = np.asarray(_soft.DEFAULT_SOLIMP, float)
        g = self.geoms
        for part, name, labels in (
            (self.contacts, "solimp", lambda p: p.names),
            (g, "solimp", lambda p: p.names),
            (g, "pair_solimp", lambda p: [
                "-".join(p.names[i] for i in p.pairs[k]) for k in (p.explicit or ())
            ]),
        ):  # fmt: skip
            x = getattr(part, name, None)
            if x is None or isinstance(x, jax.core.Tracer):
                continue
            off = np.any(np.asarray(x, float).reshape(-1, 5) != default, axis=1)
            if off.any():
                names = sorted({str(n) for n, o in zip(labels(part), off, strict=True) if o})
                more = f" ... ({len(names)} in all)" if len(names) > 4 else ""
                raise ValueError(
                    f"SimConfig: {', '.join(names[:4])}{more}: {name} off MuJoCo's default (its "
                    f"impedance): {type(self.contact).__name__} has none; "
                    "Constraint(soft=True) takes it (load_mjcf(...).sim_config(..., "
                    "ignore=('solimp',)) drops it)"
                )


# ------------------------------------------------------------------------------- dynamics


def _act_size(cfg) -> int:
    """Number of activations of ``cfg.actuator`` (0 without activation dynamics)."""
    size = getattr(cfg.actuator, "act_size", None)
    return int(size()) if size is not None else 0


def _driven(cfg, ctrl, act, h):
    """``(cfg, ctrl)`` of one integrator step: with activation dynamics the actuator driven by
    its inputs (:meth:`jaxdyn.sim.GainBias.inputs`) at ``act``; otherwise as given."""
    if not _act_size(cfg):
        return cfg, ctrl
    u = cfg.actuator.inputs(ctrl, act, h)
    return eqx.tree_at(lambda c: c.actuator, cfg, cfg.actuator.driven()), u


def _world(model, q):
    """World state centred at the floating base (dynamics accuracy independent of the base's
    distance from the origin, as in :func:`jaxdyn.aba`) and the world position of its origin."""
    ws = kin.world_state(model, q, centered=True)
    t = model.topo
    if not t.floating_base:
        return ws, jnp.zeros(3, ws.p.dtype)
    q0 = int(t.q_start[0])
    return ws, spatial.mv(model.Xtree_R[0], q[q0 : q0 + 3]) + model.Xtree_p[0]


def _contact_kinematics(model, cfg, ws, origin, v) -> tuple[Array, C.ContactFrames | None]:
    vb, _ = kin.body_velocities(model, ws, v)
    return vb, _frames(cfg, ws, origin, vb)


def _frames(cfg, ws, origin, vb) -> C.ContactFrames | None:
    """Every contact of the step: the spheres of ``cfg.contacts`` against the terrain, then the
    slots of the geom pairs of ``cfg.geoms`` (``None`` without either)."""
    parts = []
    if cfg.contacts is not None:
        soft = getattr(cfg.contact, "soft", False)  # MuJoCo's contact point
        parts.append(C.contact_frames(ws, origin, vb, cfg.contacts, cfg.terrain, midpoint=soft))
    if cfg.geoms is not None:
        parts.append(cfg.geoms.frames(ws, origin, vb))
    return C.concat_frames(parts) if parts else None


def _ext_forces(model, cfg, ws, frames):
    """Compliant contact: body-frame external forces ``(nb, 6)`` and the contact forces
    ``(nc, 3)`` (world axes); ``(None, None)`` otherwise."""
    W, f = _ext_wrenches(model, cfg, ws, frames)
    return (None, None) if W is None else (spatial.act_inv_force(ws.R, ws.p, W), f)


def _ext_wrenches(model, cfg, ws, frames):
    """Compliant contact: the contacts' spatial forces on the bodies ``(nb, 6)`` (world axes,
    at the world state's origin) and the contact forces ``(nc, 3)``; ``(None, None)``
    otherwise."""
    if not isinstance(cfg.contact, C.Compliant):
        return None, None
    k, c = cfg.contact.gains(model, ws.p.dtype, frames.body, frames.other, frames.solref)
    f = C.compliant_forces(cfg.contact, k, c, frames)
    return C.contact_wrenches(ws, frames, frames.point, f), f


def _free_acceleration(model, ws, vb, vJ, W, t, tau):
    """``acc(m_eff, inertias)``: the accelerations ``M_eff^-1 (tau - C + M t)`` of the step's
    free velocity (``C``: the bias forces of the plain model, gravity and the external wrenches
    ``W`` included; ``t``: :func:`_transport`) by ABA's sweeps on the articulated inertias of
    ``M_eff`` (Featherstone 2008, Alg. 7.1, passes 2-3) with the body bias forces of RNEA's
    outward pass (Alg. 5.1) at ``qdd = -t``: ``f_i = I_i a_i + v_i x* I_i v_i - W_i`` with
    ``a_i`` the body accelerations from the velocity-product terms ``v x vJ - S t`` and
    gravity. ABA's inward sweep sums them (RNEA's inward pass, ``C - M t = S^T F``, is not
    formed), and its bias then holds the plain inertias ``I``, whatever ``M_eff`` adds (the
    contacts' point inertias, armature). The model's own armature acts on ``qdd = -t`` in
    ``M t``, hence ``armature t`` added to ``tau``."""
    c = spatial.motion_cross(vb, vJ)
    if t is not None:
        c = c - kin.joint_velocities(model, ws, t)
        if model.armature is not None:
            tau = tau + model.armature * t
    a = tree.forward_accumulate(model.topo, c, kin.gravity_acceleration(model, ws.p.dtype))
    f = kin.inertia_apply(ws.mass, ws.c, ws.Ic, a) + spatial.force_cross(
        vb, kin.inertia_apply(ws.mass, ws.c, ws.Ic, vb)
    )
    if W is not None:
        f = f - W

    def acc(m_eff, inertias):
        qdd, _ = aba_passes(
            m_eff, ws.S, None, f[..., None], None, tau[:, None], None, inertias=inertias
        )
        return qdd[:, 0]

    return acc


def _coupled(cfg) -> bool:
    """Whether the actuator's velocity terms couple coordinates (``velocity_factors``)."""
    return hasattr(cfg.actuator, "velocity_factors")


def _controls(model, cfg, props, q, v, ctrl, coupled=True):
    """Joint forces: actuators (clipped to the effort limits), passive forces, springs,
    tendons, the fluid's. ``coupled=False`` leaves out the terms whose velocity derivative is
    not diagonal (tendons, an actuator with ``velocity_factors``, the fluid): what
    ``"implicit"`` treats by :func:`_velocity_factors` and :meth:`Fluid.inertias` instead."""
    skip = () if cfg.limit_constraints is None else cfg.limit_constraints.dof
    if cfg.friction_loss is not None:  # dry friction: rows of the solve, not smooth friction
        dofs = np.asarray(cfg.friction_loss.dof, np.int64)
        props = dict(props, friction=props["friction"].at[dofs].set(0.0))
    passive = passive_forces(model, props, cfg.limits, q, v, skip=skip)
    if coupled or not _coupled(cfg):
        tau = cfg.actuator.torques(model, q, v, ctrl)
        tau = clip_effort(tau, props["effort"].astype(v.dtype)) + passive
    else:
        tau = passive
    if cfg.springs is not None:
        tau = tau + cfg.springs.forces(model, q, v)
    if coupled and cfg.tendons is not None:
        tau = tau + cfg.tendons.forces(model, cfg.limits, q, v)
    if coupled and cfg.spatial_tendons is not None:
        tau = tau + cfg.spatial_tendons.forces(model, cfg.limits, q, v)
    if coupled and cfg.fluid is not None:
        tau = tau + cfg.fluid.forces(model, q, v)
    return tau


def _velocity_factors(model, cfg, q, v, ctrl):
    """``(U (nv, r), c (r,))``: the coupled velocity derivative ``-d tau / d v = U diag(c) U^T``
    of the tendons and of an actuator with ``velocity_factors``, or ``None``. (The actuator's
    effort clip is not differentiated here: MuJoCo's ``forcerange`` is the actuator's own.)"""
    parts = []
    if _coupled(cfg):
        parts.append(cfg.actuator.velocity_factors(model, q, v, ctrl))
    if cfg.tendons is not None:
        parts.append(cfg.tendons.velocity_factors(model, cfg.limits, q, v))
    if cfg.spatial_tendons is not None:
        parts.append(cfg.spatial_tendons.velocity_factors(model, cfg.limits, q, v))
    if not parts:
        return None
    U = jnp.concatenate([u for u, _ in parts], axis=1)
    return U, jnp.concatenate([c for _, c in parts])


def _low_rank_solve(solve, U, c, h):
    """``R -> (A + h U diag(c) U^T)^-1 R`` from ``solve = A^-1`` (push-through form of the
    Sherman-Morrison-Woodbury identity, valid for any ``c``, zeros included):
    ``A^-1 R - A^-1 U (I + h diag(c) U^T A^-1 U)^-1 h diag(c) U^T A^-1 R``. Returns
    ``(solve2, correct)``: ``correct(x)`` maps ``x = A^-1 r`` of one vector ``r`` to
    ``(A + h U diag(c) U^T)^-1 r``."""
    AU = solve(U)
    hc = (h * c)[:, None]
    S = jnp.eye(U.shape[1], dtype=U.dtype) + hc * (U.T @ AU)

    def correct(AR):
        return AR - AU @ jnp.linalg.solve(S, hc * (U.T @ AR))

    def solve2(R):
        return correct(solve(R))

    return solve2, lambda x: correct(x[:, None])[:, 0]


def _acceleration(model, cfg, props, q, v, ctrl, h):
    """Joint accelerations (ABA, armature included) with compliant contact or none, and the
    contact forces."""
    ws, origin = _world(model, q)
    _, frames = _contact_kinematics(model, cfg, ws, origin, v)
    f_ext, f = _ext_forces(model, cfg, ws, frames)
    tau = _controls(model, cfg, props, q, v, ctrl)
    if cfg.equalities is not None:
        bias = rnea_world(model, ws, v, jnp.zeros_like(v), f_ext)[0]
        tau = tau + _equality_force(model, cfg, ws, origin, q, v, tau - bias, h)
    return aba_world(model, ws, v, tau, f_ext)[0], f


def _equality_force(model, cfg, ws, origin, q, v, rhs, h):
    """The generalised force ``J^T f`` of MuJoCo's soft equality constraints
    (:mod:`jaxdyn.sim.equality`) from the unconstrained ``rhs = tau - C`` (contact forces
    included): computed with the plain mass matrix, as MuJoCo's ``qfrc_constraint``, and
    added to the step's forces by every integrator (explicitly)."""
    inertias = articulated_inertias(model, ws.S, world_inertia_matrices(ws))

    def a0_solve(X):
        R = jnp.concatenate([rhs[:, None], X], 1)
        out = aba_passes(model, ws.S, None, None, None, R, None, inertias=inertias)[0]
        return out[:, 0], out[:, 1:]

    f, J = cfg.equalities.forces(model, ws, origin, q, v, a0_solve, h)
    return J.T @ f


def _equality_rows(model, cfg, ws, origin, q, v, v_free, solve, h, t, plain=None):
    """MuJoCo's equality rows (:meth:`jaxdyn.sim.equality.Equalities.row_problem`) in the
    step's constraint problem, eliminated exactly (:func:`_eliminate_rows`): ``(v_e, solve_e,
    plain_e)``, the free velocity and inverse that the problem of the other rows (joint limits,
    contacts) is built from instead of ``v_free`` and ``solve`` (``M_eff^-1``), and
    ``plain``'s (``(solve_m, v_free_m)``: ``M^-1`` and the free velocity under the plain ``M``
    that MuJoCo poses its rows with where ``M_eff`` is not ``M``; ``None``: it is). ``t``: the
    free joints' transport term of ``v_free`` (:func:`_transport`)."""
    v_pose = v_free if plain is None else plain[1]
    J, u, R = cfg.equalities.row_problem(model, ws, origin, q, v, v_pose, h, t)
    return _eliminate_rows(J, u, R, v_free, solve, plain)


def _eliminate_rows(J, u, R, v_free, solve, plain=None):
    """Unbounded soft rows ``(J (k, nv), u (k,), R (k,))`` (impulses ``lam_e``, projection the
    identity) eliminated exactly from the step's constraint problem: ``(v_e, solve_e,
    plain_e)`` (:func:`_equality_rows`) such that the problem of the other rows built from them
    has the solution of the one problem of all rows, and ``v_e + solve_e(J_o^T) lam_o`` is its
    velocity.

    The block of unbounded rows is linear: with ``H = J M^-1 J^T + diag(R)`` (symmetric
    positive definite, ``R > 0``; ``M`` the matrix the rows are posed with: ``plain``'s, else
    ``M_eff``), their stationarity gives ``lam_e = -H^-1 (u + J M^-1 J_o^T lam_o)``, and
    substituting it leaves the Schur complement: the other rows see the free velocity after
    the impulses ``-H^-1 u`` alone and the inverse ``M^-1 - M^-1 J^T H^-1 J M^-1`` (a low-rank
    update, as :func:`_low_rank_solve`), and the impulses act through ``M_eff^-1``:
    ``M_eff^-1 (J^T lam_e + J_o^T lam_o)``. The minimiser of the one problem, without
    iterations on the unbounded block, and the cone solver's problem keeps its size."""
    solve_m, v_free_m = (solve, v_free) if plain is None else plain
    MinvJT = solve_m(J.T)
    H = J @ MinvJT
    H = 0.5 * (H + H.T) + jnp.diag(R)
    X = jnp.linalg.solve(H, jnp.concatenate([J, u[:, None]], 1))
    P, lam = X[:, :-1], -X[:, -1]  # H^-1 J and the impulses of the rows alone

    def solve_me(R):
        Z = solve_m(R)
        return Z - MinvJT @ (P @ Z)

    if plain is None:
        return v_free + MinvJT @ lam, solve_me, None
    MeffJT = solve(J.T)

    def solve_e(R):  # the other rows' impulses through M_eff^-1, lam_e's share included
        return solve(R) - MeffJT @ (P @ solve_m(R))

    return v_free + MeffJT @ lam, solve_e, (solve_me, v_free_m + MinvJT @ lam)


def _limit_rows(cfg) -> LimitConstraints | None:
    """``cfg.limit_constraints`` where it has a row (``None`` otherwise)."""
    lim = cfg.limit_constraints
    return lim if lim is not None and lim.rows else None


def _friction_rows(cfg) -> FrictionLoss | None:
    """``cfg.friction_loss`` where it has a row (``None`` otherwise)."""
    fl = cfg.friction_loss
    return fl if fl is not None and fl.dof else None


def _bounded_rows(extra, rows):
    """The primal solve's scalar rows ``extra`` (``(J, u, R)`` one-sided rows or ``None``)
    and the bounded ``rows = (J, u, R, lo, hi)`` as one ``(J, u, R, lo, hi)``."""
    if extra is None:
        return rows
    J, u, R = extra
    zero, inf = jnp.zeros_like(u), jnp.full_like(u, jnp.inf)
    return tuple(jnp.concatenate(p) for p in zip((J, u, R, zero, inf), rows, strict=True))


def _primal_matrices_and_rows(model, cfg, ws, lim, solve, plain, h, v, q, v_free):
    """What MuJoCo's primal Newton solve poses, with contacts or without
    (:func:`_constraint_velocity`, :func:`_rows_alone`): ``(Minv, M, extra, vf)``, MuJoCo's
    ``M^-1`` (``A = J M^-1 J^T``) by ``nv`` ABA solves of the identity on the step's
    articulated inertias (the plain ``M``'s where ``M_eff`` is not ``M``: ``plain``; a
    Cholesky factorisation of CRBA's ``M`` instead was slower under vmap: docs/simulation.md,
    "Solver: MuJoCo's primal Newton"), the plain ``M`` by CRBA (the inverse of the ABA's
    ``M^-1`` loses ``cond(M)`` times the rounding in float32; ``None`` where equality rows were
    eliminated into the solves), the scalar rows (the limit rows of ``lim``, one-sided, and
    MuJoCo's dry-friction rows, bounded impulses; ``None``: none) and the free velocity under
    the plain ``M``."""
    solve_m, v_free_m = (None, None) if plain is None else plain
    eye = jnp.eye(model.nv, dtype=v.dtype)
    Minv = solve(eye) if solve_m is None else solve_m(eye)
    extra = None
    vf = v_free if v_free_m is None else v_free_m
    if lim is not None:
        extra = L.primal_rows(lim, model, q, v, vf, h, (cfg.tendons, cfg.spatial_tendons))
    if cfg.friction_loss is not None:
        extra = _bounded_rows(extra, cfg.friction_loss.primal_rows(model, v, vf, h))
    M = crba_world(model, ws) if cfg.equalities is None else None
    return Minv, M, extra, vf


def _rows_alone(model, cfg, ws, lim, solve, plain, h, v, q, v_free):
    """Velocity after MuJoCo's dry-friction rows (``cfg.friction_loss``) and the joint-limit
    rows (``lim``, or ``None``) without a constraint contact, and the solve's report
    (:func:`_constraint_velocity`'s results, no contact forces, no warm start): MuJoCo's
    convex primal problem of those rows alone (MuJoCo's documentation, Computation:
    "Constraint model" and "Solver"; a limit row one-sided, a dry-friction row's force
    bounded by ``+- frictionloss``), minimised by the primal Newton solve
    (:func:`jaxdyn.sim._primal.newton_solve`, exact once a step lands in the piece of the
    cost it minimised). The rows are posed with the plain ``M`` (``plain``, where ``M_eff``
    is not ``M``) and act through ``M_eff^-1``, as in :func:`jaxdyn.sim.limits.solve`."""
    solve_m = None if plain is None else plain[0]
    args = (model, cfg, ws, lim, solve, plain, h, v, q, v_free)
    Minv, M, extra, _ = _primal_matrices_and_rows(*args)
    assert extra is not None and len(extra) == 5  # (the dry-friction rows are bounded)
    J, u, R, lo, hi = extra
    lam, res, z = P.solve_rows(Minv, M, J, u, R, lo, hi, iterations=ROWS_NEWTON_ITERATIONS)
    dv = z if solve_m is None else solve(J.T @ lam[:, None])[:, 0]
    return v_free + dv, None, _info(res, jnp.zeros((), jnp.int32)), None


#: the most Newton steps of the limit and dry-friction rows' own solve (:func:`_rows_alone`;
#: MuJoCo's default ``iterations``); it stops earlier, once exact
ROWS_NEWTON_ITERATIONS = 100


def _constraint_velocity(
    model, cfg, ws, origin, v_free, solve, h, v, q, plain=None, unreduced=None, warm=None
):
    """Velocity after the impulses of the constraint model's contacts and of the joint-limit
    rows (``cfg.limit_constraints``, :func:`jaxdyn.sim.limits.solve`), the contact forces
    (``None`` without constraint contact) and the solve's report (:func:`step_info`: the
    residual of the one problem of both); ``solve(R (nv, r))`` applies ``M_eff^-1`` (ABA
    sweeps on the step's articulated inertias); ``v``: the velocity at the step's start (the
    soft rows' reference acceleration); ``plain``: ``(solve_m, v_free_m)``, ``M^-1`` and the
    free velocity under the plain ``M`` where ``M_eff`` is not ``M`` (``None``: it is): the
    soft rows (limits, soft contacts) are posed with them and act through ``M_eff^-1``, as
    MuJoCo's constraint force enters its implicit integrators
    (:func:`jaxdyn.sim.limits.solve`). With equality rows eliminated (:func:`_equality_rows`:
    ``v_free``, ``solve`` and ``plain`` are theirs), ``unreduced`` is the inverse the soft rows
    are posed with, without them: soft contacts without MuJoCo's ``invweight`` take the
    Delassus diagonal of it, as in the one problem of all rows.

    ``warm``: the previous solve's flat impulses (:attr:`State.impulses`; ``None``: a cold
    start), with ``cfg.contact.warm_start`` the solve's start; the fourth result is this
    solve's, one block per contact slot (zeros on the slots ``max_contacts`` left out), then
    the limit rows (``None`` without a warm-started constraint contact). The primal Newton
    solve carries its acceleration ``qacc (nv,)`` there instead (MuJoCo's
    ``qacc_warmstart``, ``mj_fwdConstraint``)."""
    lim = _limit_rows(cfg)
    solve_m, v_free_m = (None, None) if plain is None else plain
    if cfg.contact is None and _friction_rows(cfg) is not None:
        return _rows_alone(model, cfg, ws, lim, solve, plain, h, v, q, v_free)
    if not isinstance(cfg.contact, C.Constraint):  # joint-limit rows only
        assert lim is not None  # _substep solves constraints when either is present
        tendons = (cfg.tendons, cfg.spatial_tendons)
        dv, _, res, _ = L.solve(
            lim, model, q, v, v_free, solve, h, solve_m=solve_m, v_free_m=v_free_m, tendons=tendons
        )
        return v_free + dv, None, _info(res, jnp.zeros((), jnp.int32)), None
    vb, frames = _contact_kinematics(model, cfg, ws, origin, v_free)
    assert frames is not None  # a contact model has contacts (SimConfig checks)
    nc, k = frames.distance.shape[0], cfg.contact.max_contacts
    idx = body = other = None
    dropped = jnp.zeros((), jnp.int32)
    if k is not None and k < nc:  # the k closest slots only (Constraint.max_contacts)
        idx = C.closest_contacts(frames.distance, k)
        # slots that touch or close within the step at the free velocity, left out by the cap
        vn, _ = frames.split_velocity()
        reach = C.live_contacts(frames.distance) & (frames.distance + h * jnp.minimum(vn, 0.0) <= 0)
        dropped = jnp.sum(reach, dtype=jnp.int32) - jnp.sum(reach[idx], dtype=jnp.int32)
        body, other = jnp.asarray(frames.body_index)[idx], jnp.asarray(frames.other_index)[idx]
        frames = C.take_contacts(frames, idx)
    n = frames.normal
    t1, t2 = C.tangent_basis(n)
    basis = spatial.stack([n, t1, t2], -2)  # (nc, 3, 3): rows n, t1, t2
    J = C.point_jacobian(model, ws, frames, frames.point, body, other)  # (nc, 3, nv)
    if unreduced is not None and cfg.contact.soft and _lacks_invweight(cfg, frames):
        # the normal rows' Delassus diagonal without the equality elimination (the fallback
        # diagApprox of C._soft_problem, as with the equality rows in the problem)
        Jn = jnp.einsum("ci,cik->ck", n, J)
        diag = jnp.sum(Jn * unreduced(Jn.T).T, -1)
        iw = diag if frames.invweight is None else frames.invweight
        iw = jnp.where(jnp.isnan(iw), diag, iw)
        frames = eqx.tree_at(lambda f: f.invweight, frames, iw, is_leaf=lambda x: x is None)
    Jc = jnp.einsum("cij,cjk->cik", basis, J)
    rows = jnp.einsum("cij,cj->ci", basis, frames.velocity)
    w = frames.width
    if w > 3:  # condim 4 / 6: torsional (n) and rolling (t1, t2) rows of the angular velocity
        Jw = jnp.einsum(
            "cij,cjk->cik", basis[:, : w - 3], C.rotation_jacobian(model, ws, frames, body, other)
        )
        Jc = jnp.concatenate([Jc, Jw], 1)
        rows = jnp.concatenate([rows, Jw @ v_free], 1)
    Jc = Jc.reshape(-1, model.nv)
    v_rows = (Jc @ v).reshape(-1, w) if cfg.contact.soft else None
    x0 = None
    primal = C.uses_primal_newton(cfg.contact)
    if warm is not None and cfg.contact.warm_start and primal:
        if warm.shape != (model.nv,):  # MuJoCo's qacc_warmstart: one entry per dof
            raise ValueError(
                f"state.impulses has shape {tuple(warm.shape)}, expected ({model.nv},) for "
                "this model and cfg (the primal Newton solve carries the previous solve's "
                "acceleration, MuJoCo's qacc_warmstart; jaxdyn.sim.warm_state gives the first)"
            )
    elif warm is not None and cfg.contact.warm_start:
        we, nl = C.solver_block_rows(cfg.contact, w), (0 if lim is None else lim.rows)
        if warm.shape != (nc * we + nl,):
            raise ValueError(
                f"state.impulses has shape {tuple(warm.shape)}, expected ({nc * we + nl},) for "
                f"this model and cfg ({nc} contact slots of {we} rows, {nl} limit rows; "
                "jaxdyn.sim.warm_state gives the first)"
            )
        x0 = warm
        if idx is not None:  # the kept slots' blocks
            kept = warm[: nc * we].reshape(nc, we)[idx].reshape(-1)
            x0 = jnp.concatenate([kept, warm[nc * we :]])
    if cfg.contact.soft and plain is not None:  # the soft rows' free velocity under M
        rows = rows + (Jc @ (v_free_m - v_free)).reshape(-1, w)
    if primal:  # MuJoCo's primal Newton solve (limit and dry-friction rows with it)
        Minv, M, extra, vf = _primal_matrices_and_rows(
            model, cfg, ws, lim, solve, plain, h, v, q, v_free
        )
        # MuJoCo's warm start (mj_fwdConstraint, MJX solver.solve): the previous solve's
        # acceleration qacc_warmstart, as the velocity change z from this step's free velocity
        # under M (qacc - qacc_smooth times h); the solve's qacc is carried on
        z0 = None
        if warm is not None and cfg.contact.warm_start:
            z0 = jax.lax.stop_gradient(h * warm - (vf - v))
        lam, lam_l, res, _, z = P.solve_soft_rows(
            cfg.contact, Minv, Jc, frames, rows, v_rows, h, extra, z0, M
        )
        x = (vf - v + z) / h  # MuJoCo's qacc (the plain M's, before an implicit M_eff)
        if solve_m is None:  # M_eff = M: the primal's velocity change
            dv = z
        else:  # the impulses act through M_eff^-1 (L.solve)
            J_all, lam_all = Jc, lam.reshape(-1)
            if extra is not None and lam_l is not None:
                J_all = jnp.concatenate([Jc, extra[0]])
                lam_all = jnp.concatenate([lam_all, lam_l])
            dv = solve(J_all.T @ lam_all[:, None])[:, 0]
    elif lim is None:
        MinvJT = solve(Jc.T)  # (nv, w nc)
        V = MinvJT if solve_m is None or not cfg.contact.soft else solve_m(Jc.T)
        G = Jc @ V
        G = 0.5 * (G + G.T)
        # more rows than dofs: the solve's products through the factors J, M^-1 J^T of G
        factors = (Jc, V) if 2 * model.nv < Jc.shape[0] else None
        out = C.solve_contact_impulses(
            cfg.contact,
            G,
            frames,
            rows,
            h,
            v_rows,
            residual=True,
            factors=factors,
            x0=x0,
            flat=True,
        )
        lam, res, x = cast("tuple[Array, Array, Array]", out)  # residual=True, flat=True
        dv = MinvJT @ lam.reshape(-1)
    else:  # the joint-limit rows appended to the contacts' problem
        dv, lam, res, x = L.solve(
            lim,
            model,
            q,
            v,
            v_free,
            solve,
            h,
            cfg.contact,
            Jc,
            frames,
            rows,
            v_rows,
            solve_m=solve_m,
            v_free_m=v_free_m,
            tendons=(cfg.tendons, cfg.spatial_tendons),
            x0=x0,
        )
    assert lam is not None and res is not None  # with a contact model L.solve returns them
    if not cfg.contact.warm_start:
        x = None
    elif idx is not None and not primal:  # back to one block per slot, zeros on the slots left out
        nl = 0 if lim is None else lim.rows
        we = (x.shape[0] - nl) // idx.shape[0]
        xc = jnp.zeros((nc, we), x.dtype).at[idx].set(x[: idx.shape[0] * we].reshape(-1, we))
        x = jnp.concatenate([xc.reshape(-1), x[idx.shape[0] * we :]])
    f = jnp.einsum("cij,ci->cj", basis, lam[:, :3]) / h  # forces, world axes
    if w > 3:  # condim 4 / 6: the torsional and rolling torques after them (contact_forces)
        tau = jnp.einsum("cij,ci->cj", basis[:, : w - 3], lam[:, 3:]) / h
        f = jnp.concatenate([f, tau], 1)
    if idx is not None:  # one row per slot, zero on the slots left out
        f = jnp.zeros((nc, f.shape[1]), f.dtype).at[idx].set(f)
    return v_free + dv, f, _info(res, dropped), x


def _lacks_invweight(cfg, frames) -> bool:
    """Whether some contact of ``frames`` may have no MuJoCo ``invweight`` (static: a part of
    the contacts without it; :func:`jaxdyn.sim.contact.concat_frames` fills NaN there)."""
    if frames.invweight is None:
        return True
    spheres = cfg.contacts is not None and getattr(cfg.contacts, "invweight", None) is None
    return spheres or (cfg.geoms is not None and cfg.geoms.invweight is None)


#: a substep's ``(q', v', f, info, x)`` (:func:`_substep`)
_StepOut: TypeAlias = "tuple[Array, Array, Array | None, dict[str, Array], Array | None]"


def _info(residual, dropped):
    """A step's contact report (:func:`step_info`)."""
    return {"contact_residual": residual, "contacts_dropped": dropped}


def _no_info(dtype):
    """The report of a step without a constraint solve (zeros)."""
    return _info(jnp.zeros((), dtype), jnp.zeros((), jnp.int32))


def _constraint_rows(cfg) -> bool:
    """Whether a step solves constraint rows: ``Constraint`` contact, limit or dry-friction
    rows."""
    c = isinstance(cfg.contact, C.Constraint) or _limit_rows(cfg) is not None
    return c or _friction_rows(cfg) is not None


def _free_runs(model):
    """``(q0, v0, n)`` of each run of ``n`` consecutive free joints: the index of its first
    configuration and velocity coordinate (static)."""
    t = model.topo
    if t.nb == 0:
        return []
    return [
        (int(t.q_start[b0]), int(v0), b1 - b0)
        for kind, b0, b1, v0, _ in tree.kind_runs(t)
        if kind == joints.FREE
    ]


def _transport(model, v):
    """``t (nv,)``: ``[0; w x u]`` on each free joint (``v = [w; u]`` there, child axes), zero
    elsewhere; ``None`` without free joints.

    A free joint's linear velocity ``u`` is the child origin's velocity relative to the parent
    in child axes, so the parent-axes velocity ``R u`` (``R`` the joint's rotation) has the
    derivative ``R (u_dot + w x u)``: the joint accelerations ``qdd`` of :func:`jaxdyn.aba`
    plus ``t`` are those of the parent-axes linear velocity, which the semi-implicit
    integrators advance (:func:`_advance`), as MuJoCo's free joint (world-axes linear
    velocity, body-axes angular velocity). Stepping ``u`` itself, ``u' = u + h (... - w x u)``,
    multiplies a force-free body's velocity across its spin by ``sqrt(1 + (h |w|)^2)`` each
    step (a sphere spinning at 84 rad/s with 1 m/s linear velocity reached 65 m/s after 300
    steps of 2 ms); in the parent axes that term vanishes and a force-free body keeps its
    velocity.
    The bias that goes with ``qdd + t`` is ``C - M t`` (RNEA at ``qdd = -t``), or ABA with the
    velocity-product accelerations ``c - S t``."""
    runs = _free_runs(model)
    if not runs:
        return None
    t = jnp.zeros_like(v)
    for _, v0, n in runs:
        x = v[v0 : v0 + 6 * n].reshape(n, 6)
        tl = jnp.concatenate([jnp.zeros_like(x[:, :3]), spatial.cross(x[:, :3], x[:, 3:])], -1)
        t = lax.dynamic_update_slice(t, tl.reshape(-1), (v0,))
    return t


def _advance(model, q, v1, h):
    """``(q', v')`` of a semi-implicit step to the velocity ``v1`` (coordinates at ``q``):
    ``q' = q ⊕ h v1`` for every joint but the free joints, which move as MuJoCo's, with the
    parent-axes linear velocity ``R u1`` and the child-axes angular velocity ``w1`` held over
    the step (``p' = p + h R u1``, ``R' = R exp(h w1)``, so that a force-free body moves on a
    straight line exactly), their linear velocity then expressed in the new child axes:
    ``u' = exp(h w1)^T u1``, the same parent-axes velocity (:func:`_transport`)."""
    t = model.topo
    if t.nb == 0:  # zero-DoF model
        return q, v1
    # joint runs as in jaxdyn.integrate (q ⊕ h v1), the free joints' positions and linear
    # velocities MuJoCo's (their q ⊕ h v1 translation not formed: it is not the step's)
    qs, vs = [], []
    for kind, b0, b1, _, _ in tree.kind_runs(t):
        n, q0, v0 = b1 - b0, int(t.q_start[b0]), int(t.v_start[b0])
        qr = q[q0 : q0 + n * joints.NQ[kind]].reshape(n, joints.NQ[kind])
        vr = v1[v0 : v0 + n * joints.NV[kind]].reshape(n, joints.NV[kind])
        if kind != joints.FREE:
            qs.append(joints.integrate(kind, qr, h * vr).reshape(-1))
            vs.append(vr.reshape(-1))
            continue
        w, u = vr[:, :3], vr[:, 3:]
        p = qr[:, :3] + h * spatial.mv(spatial.quat_to_rot(qr[:, 3:]), u)
        e = spatial.exp3_quat(h * w)
        quat = joints.normalize_quat(spatial.quat_mul(qr[:, 3:], e))  # Q exp(h w1)
        u = spatial.mv(jnp.swapaxes(spatial.quat_to_rot(e), -1, -2), u)
        qs.append(jnp.concatenate([p, quat], -1).reshape(-1))
        vs.append(jnp.concatenate([w, u], -1).reshape(-1))
    return jnp.concatenate(qs), jnp.concatenate(vs)


def _substep(model, cfg, props, q, v, ctrl, h, warm=None):
    """One integrator step: ``(q', v', f, info, x)`` with ``f (nc, 3)`` the contact forces
    (world axes; the mean force of the impulses for constraint contact; ``(nc, 6)`` with
    condim 4 / 6, the torsional and rolling torques after them, :func:`contact_forces`) or
    ``None``, ``info`` the constraint solve's report (:func:`step_info`; zeros without one)
    and ``x`` the solve's flat impulses for the next step's warm start (``warm`` this step's;
    :func:`_constraint_velocity`; ``None`` without a warm-started solve)."""
    none = _no_info(v.dtype)
    if cfg.integrator == "rk4":
        return (*_rk4(model, cfg, props, q, v, ctrl, h), none, None)
    if cfg.integrator == "euler" and not _constraint_rows(cfg):
        if isinstance(cfg.contact, C.Compliant):
            a, f = _acceleration_contact_implicit(model, cfg, props, q, v, ctrl, h)
        else:
            a, f = _acceleration(model, cfg, props, q, v, ctrl, h)
            t = _transport(model, v)
            a = a if t is None else a + t
        return (*_advance(model, q, v + h * a, h), f, none, None)
    if _kernel_solves(model, cfg, v.dtype):
        return cast("_StepOut", _velocity_step_by_kernels(model, cfg, props, q, v, ctrl, h, warm))
    return _velocity_step(model, cfg, props, q, v, ctrl, h, warm, False)


@eqx.filter_custom_jvp
def _velocity_step_by_kernels(model, cfg, props, q, v, ctrl, h, warm):
    """:func:`_velocity_step` with jaxdyn's C kernels (:func:`_kernel_solves`); its derivatives
    are those of ABA's passes (the kernels' own derivatives are XLA's code of their algorithms,
    and ``M_eff^-1`` by XLA's sweeps costs more to differentiate than ABA's solves: a
    gradient through 20 steps of quad12 under ``Constraint`` contact compiled in 20 s and ran
    1.3x slower that way)."""
    return _velocity_step(model, cfg, props, q, v, ctrl, h, warm, True)


@_velocity_step_by_kernels.def_jvp
def _velocity_step_by_kernels_jvp(primals, tangents):
    def passes(model, cfg, props, q, v, ctrl, h, warm):
        return _velocity_step(model, cfg, props, q, v, ctrl, h, warm, False)

    return eqx.filter_jvp(passes, primals, tangents)


def _velocity_step(model, cfg, props, q, v, ctrl, h, warm, by_kernels):
    """:func:`_substep`'s velocity-level step ("implicit", "implicit_damping", "euler" with
    constraint rows); ``by_kernels``: its solves by jaxdyn's C kernels
    (:func:`_kernel_solves`)."""
    none, constraint = _no_info(v.dtype), _constraint_rows(cfg)
    # Delta v = h M_eff^-1 (tau - C), where M_eff is M plus h times the velocity derivative of
    # the forces (implicit); every solve by ABA sweeps, or by the kernels (by_kernels)
    ws, origin = _world(model, q)
    vb, vJ = kin.body_velocities(model, ws, v)
    # the contacts at the step's velocity: Compliant contact's forces and inertias (constraint
    # contact takes its own at the free velocity, _constraint_velocity: traced once there)
    frames = _frames(cfg, ws, origin, vb) if isinstance(cfg.contact, C.Compliant) else None
    W, f = _ext_wrenches(model, cfg, ws, frames)
    dtau = None
    decoupled = not _coupled(cfg) and cfg.tendons is None and cfg.spatial_tendons is None
    decoupled = decoupled and cfg.fluid is None
    if cfg.integrator == "implicit" and decoupled:
        # the joint forces and their diagonal velocity derivative by one jvp: here every term
        # is one that "implicit" differentiates (_implicit_inertias)
        ones = jnp.ones_like(v)
        tau, dtau = jax.jvp(lambda vv: _controls(model, cfg, props, q, vv, ctrl), (v,), (ones,))
    else:
        tau = _controls(model, cfg, props, q, v, ctrl)
    if cfg.equalities is not None and not constraint:  # with a solve: rows of it (below)
        f_ext = None if W is None else spatial.act_inv_force(ws.R, ws.p, W)
        bias = rnea_world(model, ws, v, jnp.zeros_like(v), f_ext)[0]
        tau = tau + _equality_force(model, cfg, ws, origin, q, v, tau - bias, h)
    t = _transport(model, v)
    m_eff, I6 = model, world_inertia_matrices(ws)
    if cfg.integrator == "implicit":
        m_eff, I6 = _implicit_inertias(model, cfg, props, ws, frames, q, v, ctrl, h, I6, dtau)
        if cfg.fluid is not None:  # implicitfast's qDeriv holds the fluid's (mjd_passive_vel)
            I6 = I6 + cfg.fluid.inertias(model, ws, vb, h)
    elif cfg.integrator == "implicit_damping":  # M + h diag(damping): MuJoCo's Euler
        arm = h * props["damping"].astype(v.dtype)
        arm = arm if model.armature is None else model.armature + arm
        m_eff = eqx.tree_at(lambda m: m.armature, model, arm, is_leaf=lambda x: x is None)
        if isinstance(cfg.contact, C.Compliant):  # its velocity terms implicit, as "euler"'s
            I6 = I6 + _contact_inertias(model, cfg, ws, frames, h)
    Minv = inertias = None  # (by_kernels: no Compliant contact, W is None)
    if by_kernels:  # M_eff^-1 by the Minv kernel, the free acceleration by the ABA kernel
        Minv = minv_kernel(m_eff, q)
        solve = _matrix_solve(Minv)
        acc = _kernel_acceleration(model, m_eff, q, v, tau, t)
    else:
        inertias = articulated_inertias(m_eff, ws.S, I6)

        def solve(R):
            return aba_passes(m_eff, ws.S, None, None, None, R, None, inertias=inertias)[0]

        # M_eff^-1 (tau - C + M t): one ABA with the bias forces (no separate RNEA pass)
        free_acc = _free_acceleration(model, ws, vb, vJ, W, t, tau)
        acc = free_acc(m_eff, inertias)
    if cfg.integrator == "implicit":
        gyro = _gyroscopic_correction(m_eff, inertias, v, h, Minv)
        if gyro is not None:  # the standalone free bodies' gyroscopic derivative (mjd_freeMhat)
            acc = gyro(acc[:, None])[:, 0]
            if not _hard_contact(cfg):
                # MuJoCo's rows are posed under the plain M (``plain`` below) and act through
                # the corrected operator; the hard model's Delassus matrix J M_eff^-1 J^T must
                # stay symmetric (its cone problem and implicit derivative assume it), so its
                # impulses act through M_eff^-1 alone
                solve = _composed(gyro, solve)
        factors = _velocity_factors(model, cfg, q, v, ctrl)
        if factors is not None:
            solve, correct = _low_rank_solve(solve, *factors, h)
            acc = correct(acc)

    v1 = v + h * acc
    info, x = none, None
    if constraint:
        plain = None  # M^-1 and the free velocity under M, for the soft rows (MuJoCo's A)
        soft = _limit_rows(cfg) is not None or getattr(cfg.contact, "soft", False)
        soft = soft or _friction_rows(cfg) is not None
        soft = soft or cfg.equalities is not None  # (MuJoCo's equality rows are soft rows)
        if cfg.integrator in ("implicit", "implicit_damping") and soft and by_kernels:
            free = _kernel_acceleration(model, model, q, v, tau, t)
            plain = (_matrix_solve(minv_kernel(model, q)), v + h * free)
        elif cfg.integrator in ("implicit", "implicit_damping") and soft:
            inertias_m = articulated_inertias(model, ws.S, world_inertia_matrices(ws))

            def solve_m(R):
                return aba_passes(model, ws.S, None, None, None, R, None, inertias=inertias_m)[0]

            plain = (solve_m, v + h * free_acc(model, inertias_m))
        unreduced = None
        if cfg.equalities is not None:  # MuJoCo's equality rows, in the same problem
            unreduced = solve if plain is None else plain[0]
            v1, solve, plain = _equality_rows(model, cfg, ws, origin, q, v, v1, solve, h, t, plain)
        v1, fc, info, x = _constraint_velocity(
            model, cfg, ws, origin, v1, solve, h, v, q, plain, unreduced, warm
        )
        f = f if fc is None else fc  # Compliant contact's forces with limit rows alone
    return (*_advance(model, q, v1, h), f, info, x)


def _kernel_solves(model, cfg, dtype) -> bool:
    """Whether a step's solves with ``M_eff`` go through jaxdyn's C kernels on the CPU
    (:func:`jaxdyn.algorithms.minv.minv_kernel`, :func:`jaxdyn.algorithms.aba.aba_solve`):
    where ``M_eff`` is the model's mass matrix plus a diagonal (the joint part of
    ``M + h D`` as armature, which the kernels take as a row per sample under ``jax.vmap``),
    i.e. without the fluid's body inertias and without compliant contact (whose point
    inertias ``"implicit"`` adds, and whose wrenches ``"euler"`` would need with constraint
    rows, a combination :class:`SimConfig` refuses), and not where XLA:CPU fuses small loops
    (:func:`jaxdyn.config.fused_cpu_loops`: a loop that holds a custom call is not fused, and
    a fused rollout is faster than the kernels' calls in it). XLA compiles the
    kernels' calls in a fraction of the time of the ABA passes they replace
    (``docs/performance.md``, "Compile time"); the results are the same to rounding."""
    if not kernel_usable(model, dtype) or config.fused_cpu_loops_enabled():
        return False
    return not isinstance(cfg.contact, C.Compliant) and cfg.fluid is None


def _matrix_solve(Minv):
    """``R -> Minv R``."""
    return lambda R: Minv @ R


def _kernel_acceleration(model, m_eff, q, v, tau, t):
    """``M_eff^-1 (tau - C + M t)`` (:func:`_free_acceleration`, no external wrench) by the
    ABA kernel on ``m_eff`` (``M_eff = M + diag(delta)``, the model's inertias and its
    armature plus ``delta``): with ``M t = M_eff t - delta t``, it is
    ``ABA_eff(tau - delta t) + t``."""
    if t is not None and m_eff is not model:
        delta = m_eff.armature if model.armature is None else m_eff.armature - model.armature
        tau = tau - delta * t
    acc = aba_solve(m_eff, q, v, tau)
    return acc if t is None else acc + t


def _implicit_inertias(model, cfg, props, ws, frames, q, v, ctrl, h, I6, dtau=None):
    """``M + h D`` as ABA ingredients, ``D = -dF/dv``: its diagonal joint part (damping,
    friction, limit damping, actuator velocity gains) as extra armature, and each compliant
    contact's velocity Jacobian as a point inertia on its body (:func:`_contact_inertias`), so
    that ``M + h D`` is the mass matrix of a model that ABA inverts in O(n);
    ``dtau``: the joint part's derivative ``d tau / d v`` applied to ones where the caller has
    it already (``None``: computed here)."""
    if dtau is None:
        _, dtau = jax.jvp(
            lambda vv: _controls(model, cfg, props, q, vv, ctrl, coupled=False),
            (v,),
            (jnp.ones_like(v),),
        )
    arm = -h * dtau if model.armature is None else model.armature - h * dtau
    m_eff = eqx.tree_at(lambda m: m.armature, model, arm, is_leaf=lambda x: x is None)
    if not isinstance(cfg.contact, C.Compliant):
        return m_eff, I6
    return m_eff, I6 + _contact_inertias(model, cfg, ws, frames, h)


def _hard_contact(cfg) -> bool:
    """Whether the step's contact is the hard model (``Constraint`` with ``soft`` false): its
    Delassus matrix is posed with ``M_eff``, not with the plain ``M`` of MuJoCo's rows."""
    return isinstance(cfg.contact, C.Constraint) and not getattr(cfg.contact, "soft", False)


def _composed(f, g):
    """``R -> f(g(R))``."""
    return lambda R: f(g(R))


def _standalone_free_bodies(model) -> np.ndarray:
    """The bodies on a free joint to the world with no child body (static): MuJoCo's
    standalone free bodies (a free body and its welded descendants, which jaxdyn merges into
    it, without jointed descendants)."""
    t = model.topo
    if t.nb == 0:
        return np.zeros(0, np.int64)
    parent, kind = np.asarray(t.parent), np.asarray(t.kind)
    has_child = np.zeros(t.nb, bool)
    has_child[parent[parent >= 0]] = True
    return np.nonzero((kind == joints.FREE) & (parent < 0) & ~has_child)[0]


def _free_block_inverses(model, inertias, bodies, Minv=None):
    """``M_b^-1 (n, 6, 6)``: the ``D^-1`` of ABA's articulated-inertia pass on the standalone
    free bodies ``bodies`` (:func:`_standalone_free_bodies`, all at depth 0): with no child
    body a free joint's articulated inertia is its body's own, so ``D = S^T I_b S`` (plus the
    armature) is the body's 6 x 6 block of the mass matrix the pass inverted (Featherstone
    2008, Alg. 7.1, eq. 7.32). Where the caller has ``M^-1`` itself (``Minv``), its diagonal
    blocks on those bodies (which couple to no other coordinate)."""
    if Minv is not None:
        idx = np.asarray(model.topo.v_start)[bodies][:, None] + np.arange(6)
        return Minv[idx[:, :, None], idx[:, None, :]]
    Dinvs = inertias[1][0]  # level 0, per joint group
    parts = []
    for g, Dinv in zip(model.topo.levels[0].groups, Dinvs, strict=True):
        if g.kind != joints.FREE:
            continue
        mine = bodies[(bodies >= g.b0) & (bodies < g.b1)] - g.b0
        if len(mine) == g.n:  # the whole group (mine is sorted, unique)
            parts.append(Dinv)
        elif len(mine):
            parts.append(Dinv[mine])
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts)


def _gyroscopic_correction(model, inertias, v, h, Minv=None):
    """``X -> X'``: the rows of ``X = M_eff^-1 R (nv, r)`` on each standalone free body
    (:func:`_standalone_free_bodies`) re-solved with the derivative of the body's bias force
    in its velocity, ``B = dC/dv``, as MuJoCo's ``implicitfast`` does (``mjd_freeMhat``,
    ``mj_implicitSkip``, MuJoCo >= 3.11; MuJoCo's documentation, Computation: "Gyroscopic
    derivatives for free bodies"), or ``None`` without such bodies. ``inertias``: the step's
    articulated inertias of ``M_eff`` (:func:`jaxdyn.algorithms.aba.articulated_inertias`),
    whose ``D^-1`` on those bodies is ``M_b^-1`` (:func:`_free_block_inverses`), or ``None``
    with ``Minv = M_eff^-1`` instead (the step's kernels' route, :func:`_kernel_solves`).

    The body's rows of ``M_eff`` couple to no other coordinate, so ``M_b X_b = R_b`` with
    ``M_b = S_b^T I_b S_b + diag(armature_b)`` (its 6 x 6 block, ``I_b`` the step's world
    inertia of the body, fluid and contact terms included); the step solves
    ``(M_b + h B) X_b' = R_b``. With ``v_b = [w; u]`` (body axes), ``c`` the centre of mass
    and ``I_c`` the rotational inertia about it (body axes: the model's ``com`` and
    ``inertia``), the bias ``C_b - M_b t`` of the semi-implicit step (:func:`_transport`) is
    ``[c x f + w x I_c w; f]``, ``f = m w x (w x c)``, a function of ``w`` alone, so
    ``B = B_w E^T`` with ``E = [1; 0]`` (6 x 3) and
    ``B_w = [[c]_x F + [w]_x I_c - [I_c w]_x; F]``,
    ``F = df/dw = m ((w . c) 1 + w c^T - 2 c w^T)`` (MuJoCo's ``freeBias_vel_blocks`` in the
    free joint's coordinates). ``M_b X_b' + h B_w X_w' = M_b X_b`` gives
    ``X_b' = X_b - h Z X_w'`` with ``Z = M_b^-1 B_w = [Z_w; Z_u]``, whose angular rows
    ``(1 + h Z_w) X_w' = X_w`` (the matrix determinant lemma: invertible with
    ``M_b + h B``): ``X_b' = X_b + K X_w``, ``K = [N - 1; -h Z_u N]``, ``N = (1 + h Z_w)^-1``,
    a 6 x 3 map of the three angular rows alone. Unsymmetric: a linearly implicit gyroscopic
    torque ``w x I_c w`` (a spinning body's energy does not grow, a tumbling one's decays
    slowly)."""
    bodies = _standalone_free_bodies(model)
    n = len(bodies)
    if n == 0:
        return None
    Minv = _free_block_inverses(model, inertias, bodies, Minv)
    v0 = np.asarray(model.topo.v_start)[bodies]
    mm = spatial.mm
    w = v[(v0[:, None] + np.arange(3)).reshape(-1)].reshape(n, 3)
    c, Ic, m = model.com[bodies], model.inertia[bodies], model.mass[bodies]
    eye = jnp.broadcast_to(jnp.eye(3, dtype=w.dtype), Ic.shape)
    wc = jnp.sum(w * c, -1)[:, None, None]
    F = m[:, None, None] * (
        wc * eye + w[:, :, None] * c[:, None, :] - 2.0 * c[:, :, None] * w[:, None, :]
    )
    G = mm(spatial.skew(c), F) + mm(spatial.skew(w), Ic) - spatial.skew(spatial.mv(Ic, w))
    # M_b^-1 B_w (n, 6, 3), stored: read by N's and K's every entry (9 us -> 8 us a sample
    # for 12 bodies under vmap on the CPU)
    (Z,) = fusion.store(mm(Minv[:, :, :3], G) + mm(Minv[:, :, 3:], F), copy=False)
    N = spatial.inv3(eye + h * Z[:, :3])
    K = jnp.concatenate([N - eye, -h * mm(Z[:, 3:], N)], -2)  # (n, 6, 3)
    a = int(v0[0])
    if np.array_equal(v0, a + 6 * np.arange(n)):  # one run of free joints: slices

        def correct(X):
            Xb = X[a : a + 6 * n].reshape(n, 6, X.shape[1])
            Xb = (Xb + mm(K, Xb[:, :3])).reshape(6 * n, X.shape[1])
            return lax.dynamic_update_slice(X, Xb, (a, 0))

        return correct
    idx = (v0[:, None] + np.arange(6)).reshape(-1)

    def correct_gathered(X):
        Xw = X[(v0[:, None] + np.arange(3)).reshape(-1)].reshape(n, 3, X.shape[1])
        return X.at[idx].add(mm(K, Xw).reshape(6 * n, X.shape[1]))

    return correct_gathered


def _contact_inertias(model, cfg, ws, frames, h):
    """Per-body point inertias ``(nb, 6, 6)``: ``h P_i^T K_i P_i`` summed over the compliant
    contacts ``i`` of each body, with ``K_i = -df_i/du_i`` (3 x 3) the velocity Jacobian of the
    contact's force in the velocity ``u_i`` of its point and ``P_i = [-[x_i], 1]`` the map from
    the body's spatial velocity (world state origin) to ``u_i``. Added to the body inertias they
    turn ``M`` into ``M + h sum_i J_i^T K_i J_i``.

    ``K_i`` is taken with the normal force ``fn`` and the regularised slip speed
    ``s = sqrt(|vt|^2 + vs^2)`` of the friction term held at the step's velocity: the friction
    enters as a viscous force ``-(mu fn / s) vt`` of frozen viscosity (a Picard linearisation,
    the secant of the force), which keeps ``K_i`` symmetric positive semi-definite (the dropped
    coupling ``dft/dvn`` would not be) and, taken on its own, makes the step shrink the slip
    ``vt`` towards zero without reversing it, for any ``h``. The tangent Jacobian
    ``(mu fn / s) (I - vt vt^T / s^2)`` nearly vanishes along a slip faster than ``vs``: there
    the step was explicit in the Coulomb force, overshot through zero slip whenever its
    velocity change ``h mu fn G_t`` exceeded the slip, and settled into a two-step cycle
    ``vt -> -vt`` (a resting robot's feet chattering), as Newton's method does on regularised
    friction without the transition-aware line search of Castro et al. 2020 (TAMSI, IEEE
    RA-L 5(2)). The secant leaves the sliding steady state unchanged (``f`` is the force at
    ``v``); its larger viscosity only slows a sliding contact's transients. The normal force's
    smooth clamp is held likewise (its factor ``sigmoid``,
    :func:`jaxdyn.sim.contact.compliant_damping`): its own slope is negative where a fast
    separation drives the spring-damper's force below zero, and there ``h G`` times it reached
    beyond 1 through a light limb, ``M + h J^T K J`` lost its positive definiteness and the
    step diverged (dm_control's humanoid at 5 ms).

    ``K_i = d_n n n^T + d_t (1 - n n^T)`` in closed form: ``P_i^T K_i P_i = d_t P^T P +
    (d_n - d_t) g g^T`` with ``g = P^T n = [x x n; n]``."""
    k, c = cfg.contact.gains(model, frames.distance.dtype, frames.body, frames.other, frames.solref)
    d_n, d_t = C.compliant_damping(cfg.contact, k, c, frames)  # K = d_n nn^T + d_t (I - nn^T)
    # P^T K P with P = [-[x], 1] (u = v_O - [x] w) and K = d_t 1 + (d_n - d_t) n n^T:
    # d_t P^T P + (d_n - d_t) g g^T, g = P^T n = [x x n; n] (the unit normal force's wrench)
    x, n = frames.point, frames.normal
    X = spatial.skew(x)
    eye = jnp.broadcast_to(jnp.eye(3, dtype=x.dtype), X.shape)
    xx = jnp.sum(x * x, -1)[:, None, None] * eye - x[:, :, None] * x[:, None, :]  # -[x]^2
    PtP = jnp.concatenate(
        [jnp.concatenate([xx, X], -1), jnp.concatenate([-X, eye], -1)], -2
    )  # (nc, 6, 6)
    g = jnp.concatenate([spatial.cross(x, n), n], -1)
    Ic = h * (d_t[:, None, None] * PtP + (d_n - d_t)[:, None, None] * g[:, :, None] * g[:, None, :])
    # a contact between two moving bodies couples them (h (J_A - J_B)^T K (J_A - J_B)), which
    # point inertias cannot hold: each body gets twice its own block, a majorant of the coupled
    # term (2 (J_A^T K J_A + J_B^T K J_B) - (J_A - J_B)^T K (J_A - J_B) = (J_A + J_B)^T K
    # (J_A + J_B) >= 0), so the step stays implicit-stable and only slows the relative motion's
    # transients; against the world the block is exact
    two = np.where(frames.other_index >= 0, 2.0, 1.0)
    if np.any(two > 1):
        Ic = Ic * jnp.asarray(two, Ic.dtype)[:, None, None]
    return C._bodies_sum(Ic, frames, ws.R.shape[0], sign_other=1.0)


def _acceleration_contact_implicit(model, cfg, props, q, v, ctrl, h):
    """``"euler"`` with compliant contact: the accelerations
    ``a = (M + h J^T K J)^-1 (tau - C + J^T f)`` of a step implicit in the contact's velocity
    terms (``K``: :func:`_contact_inertias`), explicit in everything else, and the contact
    forces ``f`` (at ``v``).

    One ABA on the body inertias plus the contact point inertias ``I_c``. ABA forms the bias
    forces from the inertias it is given, so the point inertias would add spurious forces
    ``I_c a_b0`` (``a_b0``: the body's acceleration at ``qdd = 0``, gravity included as the
    root's fictitious acceleration); they are taken off the bodies' bias forces, which leaves
    the bias ``C`` of the true inertias (no separate RNEA pass)."""
    ws, origin = _world(model, q)
    vb, vJ = kin.body_velocities(model, ws, v)
    frames = _frames(cfg, ws, origin, vb)
    assert frames is not None  # a contact model has contacts (SimConfig checks)
    k, c_gain = cfg.contact.gains(model, ws.p.dtype, frames.body, frames.other, frames.solref)
    f = C.compliant_forces(cfg.contact, k, c_gain, frames)
    W = C.contact_wrenches(ws, frames, frames.point, f)
    tau = _controls(model, cfg, props, q, v, ctrl)
    if cfg.equalities is not None:
        f_ext = spatial.act_inv_force(ws.R, ws.p, W)
        bias = rnea_world(model, ws, v, jnp.zeros_like(v), f_ext)[0]
        tau = tau + _equality_force(model, cfg, ws, origin, q, v, tau - bias, h)
    Ic = _contact_inertias(model, cfg, ws, frames, h)
    c = spatial.motion_cross(vb, vJ)
    t = _transport(model, v)
    if t is not None:  # qdd of the free joints' parent-axes linear velocities (_transport)
        c = c - kin.joint_velocities(model, ws, t)
    a0 = kin.gravity_acceleration(model, ws.p.dtype)
    a_bias = tree.forward_accumulate(model.topo, c, a0)  # body accelerations at qdd = 0
    pA = spatial.force_cross(vb, kin.inertia_apply(ws.mass, ws.c, ws.Ic, vb)) - W
    pA = pA - spatial.mv(Ic, a_bias)
    I6 = world_inertia_matrices(ws) + Ic
    qdd, _ = aba_passes(model, ws.S, I6, pA[..., None], c, tau[:, None], a0[:, None])
    return qdd[:, 0], f


def _rk4(model, cfg, props, q, v, ctrl, h):
    f = lambda qq, vv: _acceleration(model, cfg, props, qq, vv, ctrl, h)[0]
    a1, force = _acceleration(model, cfg, props, q, v, ctrl, h)
    x1 = v
    xi = 0.5 * h * x1
    v2 = v + 0.5 * h * a1
    a2 = f(integrate(model, q, xi), v2)
    x2 = _dexpinv(model, xi, v2)
    xi = 0.5 * h * x2
    v3 = v + 0.5 * h * a2
    a3 = f(integrate(model, q, xi), v3)
    x3 = _dexpinv(model, xi, v3)
    xi = h * x3
    v4 = v + h * a3
    a4 = f(integrate(model, q, xi), v4)
    x4 = _dexpinv(model, xi, v4)
    q1 = integrate(model, q, h / 6.0 * (x1 + 2 * x2 + 2 * x3 + x4))
    return q1, v + h / 6.0 * (a1 + 2 * a2 + 2 * a3 + a4), force


# ------------------------------------------------------------------------------ public API


def _check_state(fn, model, state, ctrl, cfg):
    if not isinstance(state, State):
        raise TypeError(f"{fn}: state must be a jaxdyn.sim.State, got {type(state).__name__}")
    q = shell.as_array(fn, "state.q", state.q, (("nq", model.nq),), model)
    v = shell.as_array(fn, "state.v", state.v, (("nv", model.nv),), model)
    nu = cfg.actuator.size(model)
    ctrl = shell.as_array(fn, "ctrl", ctrl, (("nu", nu),), model)
    dtype = shell.common_dtype(q, v, ctrl, model.mass)
    q, v, ctrl = q.astype(dtype), v.astype(dtype), ctrl.astype(dtype)
    q = shell.check_quaternions(fn, model, q, hint=STATE_HINT)
    if value_checks.enabled():
        bad = ~(jnp.all(jnp.isfinite(q)) & jnp.all(jnp.isfinite(v)))
        q = value_checks.error_if(
            q, bad, f"{fn}: the state has a non-finite entry (NaN or inf in q or v){STATE_HINT}"
        )
        ctrl = value_checks.error_if(
            ctrl, ~jnp.all(jnp.isfinite(ctrl)), f"{fn}: ctrl has a non-finite entry"
        )
    q = _params.check_config(fn, cfg, q)
    na = _act_size(cfg)
    act = None
    if na:
        if state.act is None:
            raise ValueError(
                f"{fn}: the actuator has {na} activation(s) (activation dynamics): give "
                "state.act (na,), e.g. State(q, v, act=jnp.zeros(na))"
            )
        act = shell.as_array(fn, "state.act", state.act, (("na", na),), model).astype(dtype)
    return q, v, ctrl, dtype, act


# the cause and remedies that the divergence's messages give
_DT_REMEDY = (
    "cfg.dt is beyond the stability limit of the stiffest explicit force (with "
    "integrator='rk4' every force, contact included; with 'euler' the joint forces: a velocity "
    "gain d -- PD kd, damping, limit damping -- needs dt * d < 2 * the joint's apparent "
    "inertia); use integrator='implicit', a smaller dt or more substeps"
)
#: the value check of a rollout step that turned a finite state into a non-finite one
DIVERGED = "rollout: the integration diverged (a non-finite state from a finite one): " + _DT_REMEDY

#: appended to the messages of a step's checks of its state (a quaternion of ``q`` off the
#: unit sphere or not finite, a non-finite entry): such a state is what a diverged step returns
STATE_HINT = "; if an earlier step returned this state, that step diverged: " + _DT_REMEDY


#: the value check of a rollout whose velocity jumped beyond what a step resolves
DIVERGED_JUMP = (
    "rollout: the integration diverged (a step changed the velocity far more than dt can "
    "resolve: the speed max|v| grew tenfold in two consecutive steps or a hundredfold in one, "
    "or, with compliant contact, a coordinate came back ten times faster; the states are finite "
    "but meaningless): cfg.dt is beyond the stability limit; use a smaller dt or more substeps"
)


def _jumped(v0, vs, compliant):
    """Whether the velocities ``v0 (nv,)``, ``vs (T, nv)`` of a rollout jumped beyond what its
    steps resolve (rates in rad/s or m/s, ``s = max |v|``):

    * ``s`` grew more than tenfold (``s_k > 10 (s_{k-1} + 0.1)``) in two consecutive steps: a
      growth rate of ``ln 10 / dt`` or more, the instability of a step past its stability limit
      (a bounded force from rest makes ``s`` grow linearly, ``s_k = k a dt``; an impact or a
      control's jump, once);
    * ``s`` grew more than a hundredfold in one step (``s_k > 100 (s_{k-1} + 1)``);
    * with ``compliant`` contact, a coordinate moving faster than 1 reversed and came back more
      than ten times faster (``-v_k,i / v_{k-1,i} > 10``): a restitution above 10, as when
      the contact's spring is crossed within one step (a box dropped 0.2 m onto the default
      ``Compliant`` at ``dt = 0.5``: 2 m deep, then 188 m/s up). Not with constraint contact,
      whose impulses dissipate: a plastic impact on a foot legitimately throws the leg's
      joints from rest to tens of rad/s in one step, both ways.

    Legitimate motion can in principle trip the last two (a light limb's servo reversing it at
    5000 rad/s^2 for one 2 ms step); switch value checks off there."""
    v = jnp.concatenate([v0[None], vs])
    s = jnp.max(jnp.abs(v), axis=-1)
    grow = s[1:] > 10.0 * (s[:-1] + 0.1)
    twice = jnp.any(grow[1:] & grow[:-1])
    leap = jnp.any(s[1:] > 100.0 * (s[:-1] + 1.0))
    if not compliant:
        return twice | leap
    prev, nxt = v[:-1], v[1:]
    bounce = (prev * nxt < 0) & (jnp.abs(prev) > 1.0) & (jnp.abs(nxt) > 10.0 * jnp.abs(prev))
    return twice | leap | jnp.any(bounce)


@full_precision
def step(model: Model, state: State, ctrl: ArrayLike, cfg: SimConfig) -> State:
    """Advance ``state`` by one control period ``cfg.dt`` under the control ``ctrl``.

    **Arguments:** ``model`` (:class:`jaxdyn.Model`); ``state``
    (:class:`State`); ``ctrl (nu,)`` with ``nu = cfg.actuator.size(model)``; ``cfg``
    (:class:`SimConfig`).

    **Returns:** the next :class:`State`.

    With value checks on (:mod:`jaxdyn.config`), a non-finite ``state`` or ``ctrl`` raises (for
    the state, the message says that a diverged step returns such states and what to change,
    :data:`STATE_HINT`). A step that diverges returns its non-finite state (callers such as
    :meth:`jaxdyn.envs.SimEnv.pipeline_step` test for it and recover); :func:`rollout` raises
    :data:`DIVERGED` there; :func:`step_info` also reports the contact solve (its residual, contacts
    left out by ``max_contacts``).
    """
    return _step("step", model, state, ctrl, cfg)[0]


@full_precision
def step_info(
    model: Model, state: State, ctrl: ArrayLike, cfg: SimConfig, *, forces: bool = False
) -> tuple[State, dict[str, Array]]:
    """:func:`step` and its contact report: ``(next_state, info)`` with

    * ``info["contact_residual"]``: the largest relative fixed-point residual of the
      :class:`~jaxdyn.sim.contact.Constraint` solves of the step's substeps
      (:func:`jaxdyn.sim.contact.solve_residual`: 0 at the solution; a solve that has not
      converged in its ``iterations`` / ``newton`` steps leaves a residual of order
      ``1e-3`` and more, its impulses off by about that fraction: raise ``iterations`` or
      ``newton``);
    * ``info["contacts_dropped"]`` (int32): the most contact slots that ``max_contacts`` left
      out of a substep's solve although they touch or close within the substep (distance
      ``d + h min(v_n, 0) <= 0`` at the contact-free velocity): 0 while the capped step is
      the uncapped one; raise ``max_contacts`` where it is not.

    Both are 0 without constraint contact. The next state is :func:`step`'s (the same
    program; under ``jit``, :func:`step` leaves the report out).

    ``forces=True`` (static; a contact model needed) adds ``info["contact_forces"]``: the
    contact forces ``(nc, 3)`` of the step's last substep, as :func:`contact_forces` gives them
    (with one substep and no warm start, ``contact_forces(model, state, ctrl, cfg)`` itself),
    so that a caller wanting both the step and its forces (a touch sensor) pays one solve."""
    if not isinstance(forces, bool):
        raise ValueError(f"step_info: forces must be True or False, got {forces!r}")
    if forces and cfg.contact is None:
        raise ValueError("step_info: forces=True needs a contact model (cfg.contact is None)")
    return _step("step_info", model, state, ctrl, cfg, forces)


def _step(fn, model, state, ctrl, cfg, forces=False):
    q, v, ctrl, dtype, act = _check_state(fn, model, state, ctrl, cfg)
    imp = _check_impulses(fn, model, state, cfg, dtype)
    model = model.astype(dtype)
    props = joint_properties(model)
    h = jnp.asarray(cfg.dt, dtype) / cfg.substeps

    def one(q, v, act, imp):
        cfg1, u = _driven(cfg, ctrl, act, h)
        q, v, f, info, x = _substep(model, cfg1, props, q, v, u, h, imp)
        if act is not None:  # after the step, as MuJoCo's mj_advance
            # (activations: a GainBias, the one actuator with act_size)
            act = cast("GainBias", cfg.actuator).next_act(ctrl, act, h)
        imp = imp if imp is None or x is None else x.astype(imp.dtype)
        if forces:  # step_info(forces=True): contact_forces' rows of this substep
            assert f is not None  # a contact model gives its forces (step_info checks)
            info = {**info, "contact_forces": f[:, :3]}
        return q, v, act, imp, info

    if cfg.substeps == 1:
        q, v, act, imp, info = one(q, v, act, imp)
    else:  # one traced substep, scanned (compile time independent of the count)

        def sub(carry, _):
            q, v, act, imp, info = one(*carry)
            return (q, v, act, imp), info

        (q, v, act, imp), infos = jax.lax.scan(sub, (q, v, act, imp), None, length=cfg.substeps)
        info = {k: x[-1] if k == "contact_forces" else jnp.max(x) for k, x in infos.items()}
    t = jnp.asarray(state.t, dtype) + jnp.asarray(cfg.dt, dtype)
    return State(q, v, t, act, imp), info


def _warm_started(cfg) -> bool:
    """Whether ``cfg``'s constraint solve starts from the state's impulses (static)."""
    return isinstance(cfg.contact, C.Constraint) and cfg.contact.warm_start


def _impulses_size(model, cfg, dtype) -> int:
    """The length of :attr:`State.impulses` for ``cfg`` (static; 0 without a warm-started
    solve): the flat solution of one substep's solve, traced abstractly."""
    if not _warm_started(cfg):
        return 0
    q = jax.ShapeDtypeStruct((model.nq,), dtype)
    v = jax.ShapeDtypeStruct((model.nv,), dtype)
    ctrl = jax.ShapeDtypeStruct((_nu(cfg, model),), dtype)
    na = _act_size(cfg)
    act = jax.ShapeDtypeStruct((na,), dtype) if na else None

    def x_of(q, v, ctrl, act):
        m = model.astype(dtype)
        h = jnp.asarray(cfg.dt, dtype) / cfg.substeps
        cfg1, u = _driven(cfg, ctrl, act, h)
        return _substep(m, cfg1, joint_properties(m), q, v, u, h, None)[4]

    out = jax.eval_shape(x_of, q, v, ctrl, act)
    return 0 if out is None else int(out.shape[0])


def _check_impulses(fn, model, state, cfg, dtype):
    """``state.impulses`` for the step (``None``: none carried, a cold start): a vector in the
    step's dtype (its length is checked by the solve, :func:`_constraint_velocity`); carried
    through unchanged where ``cfg`` does not warm-start, so that the state's structure stays
    the same."""
    imp = state.impulses
    if imp is None:
        return None
    imp = jnp.asarray(imp)
    if not _warm_started(cfg):
        return imp
    if imp.ndim != 1:
        raise ValueError(
            f"{fn}: state.impulses must be a vector (jaxdyn.sim.warm_state gives the first), "
            f"got shape {tuple(imp.shape)}"
        )
    return imp.astype(dtype)


def warm_state(model: Model, state: State, cfg: SimConfig) -> State:
    """``state`` with zero :attr:`State.impulses` of the length ``cfg``'s warm-started
    constraint solve carries (:class:`~jaxdyn.sim.contact.Constraint` ``warm_start=True``):
    the first state of a warm-started simulation (its first solve then starts from zero, each
    next one from the previous step's impulses; the primal Newton solve's: ``nv`` zeros,
    MuJoCo's ``qacc_warmstart`` after ``mj_resetData``). ``state`` unchanged (no impulses)
    where ``cfg`` does not warm-start."""
    dtype = jnp.asarray(state.v).dtype
    n = _impulses_size(model, cfg, dtype)
    if n == 0:
        return State(state.q, state.v, state.t, state.act)
    return State(state.q, state.v, state.t, state.act, jnp.zeros(n, dtype))


def _step_words(model, itemsize):
    """Numbers one sample of :func:`step` keeps live, roughly: the 6x6 (articulated) inertias
    and a few 6-vectors per body, and the ``nv x nv`` blocks of the contact and implicit terms.
    For :func:`jaxdyn.batching.batched`: under ``jax.vmap`` on the CPU a large batch of steps
    runs in chunks, faster than one ``vmap`` on quad12 and talos_full
    (``docs/design-measurements.md``)."""
    return 64 * model.nb + model.nv * model.nv


#: eagerly (no ``jax.jit``), a failed value check raises :class:`jaxdyn.CheckError`
step = functools.wraps(step)(
    eager.dispatch(batching.batched(step, _step_words), step, compile_eagerly=False)
)


@full_precision
def contact_forces(
    model: Model, state: State, ctrl: ArrayLike, cfg: SimConfig, *, torques: bool = False
) -> Array:
    """Contact forces ``(nc, 3)`` (world axes, one row per contact of ``cfg``: the contact
    spheres of ``cfg.contacts``, then the slots of the geom pairs of ``cfg.geoms``) acting
    during the first integrator step from ``state`` under ``ctrl``: the compliant model's
    forces at ``state``, or the constraint model's impulses divided by the step. Each row acts
    on the contact's body (:class:`~jaxdyn.sim.contact.ContactFrames` ``body``, towards which
    the contact normal points; MuJoCo's ``geom2``), its opposite on the other.

    ``torques=True``: ``(nc, 6)``, each row the force then the torque of the contact's
    torsional and rolling friction (MuJoCo's condim 4 / 6 rows, pure couples: no moment of the
    force in them), world axes, on the same body; 0 where a contact has no such rows (condim 1
    / 3, and every contact of ``Compliant``). Projected on MuJoCo's contact frame
    ``mjContact.frame`` (rows: the normal and two tangents) the six are MuJoCo's
    ``mj_contactForce`` ``(f_n, f_t1, f_t2, tau_n, tau_t1, tau_t2)``."""
    if cfg.contact is None:
        raise ValueError("contact_forces: cfg.contact is None (no contact model)")
    if not isinstance(torques, bool):
        raise ValueError(f"contact_forces: torques must be True or False, got {torques!r}")
    q, v, ctrl, dtype, act = _check_state("contact_forces", model, state, ctrl, cfg)
    model = model.astype(dtype)
    h = jnp.asarray(cfg.dt, dtype) / cfg.substeps
    cfg, ctrl = _driven(cfg, ctrl, act, h)
    f = cast("Array | None", _substep(model, cfg, joint_properties(model), q, v, ctrl, h)[2])
    assert f is not None  # a contact model gives its forces
    if not torques:
        return f[:, :3]
    return f if f.shape[1] == 6 else jnp.pad(f, ((0, 0), (0, 6 - f.shape[1])))


contact_forces = functools.wraps(contact_forces)(
    eager.dispatch(contact_forces, compile_eagerly=False)
)


def contact_counts(model: Model, state: State, cfg: SimConfig) -> tuple[Array, Array]:
    """``(candidates, touching)``: how many contact slots of ``cfg`` (its geom pairs' slots and
    contact spheres) hold a candidate contact at ``state`` (bounding spheres overlapping and a
    point from the narrow phase: :func:`jaxdyn.sim.contact.live_contacts`) and how many of
    those touch (distance <= 0), as int32 scalars; ``jit`` / ``vmap``-able.

    A :class:`~jaxdyn.sim.contact.Constraint` with ``max_contacts = k`` solves over the ``k``
    closest slots: its step equals the uncapped one (to rounding) while ``candidates <= k``;
    count along a rollout (``jax.vmap(contact_counts)`` over its states) to choose ``k`` or
    to see how often the cap drops candidates."""
    if cfg.contacts is None and cfg.geoms is None:
        raise ValueError("contact_counts: cfg has no contacts (contacts / geoms are None)")
    q = jnp.asarray(state.q)
    v = jnp.asarray(state.v, q.dtype)
    model = model.astype(q.dtype)
    ws, origin = _world(model, q)
    _, frames = _contact_kinematics(model, cfg, ws, origin, v)
    assert frames is not None  # contacts or geoms (checked above)
    live = C.live_contacts(frames.distance)
    return (
        jnp.sum(live, dtype=jnp.int32),
        jnp.sum(live & (frames.distance <= 0), dtype=jnp.int32),
    )


CHECKPOINTS = (None, "step", "sqrt")


def rollout(
    model: Model,
    state: State,
    controls: ArrayLike | None = None,
    *,
    cfg: SimConfig,
    policy: Callable[[State], ArrayLike] | None = None,
    n_steps: int | None = None,
    checkpoint: str | None = None,
) -> State:
    """Simulate ``n_steps`` control periods in one ``lax.scan``.

    Give either ``controls (T, nu)`` (open loop) or ``policy(state) -> ctrl`` with ``n_steps``
    (closed loop; ``policy`` may close over parameters being differentiated).

    ``checkpoint``: ``None`` (store every step's residuals for reverse mode), ``"step"``
    (``jax.checkpoint`` each step: residuals recomputed step by step) or ``"sqrt"`` (blocks of
    ``ceil(sqrt(T))`` steps checkpointed as a whole: memory ``O(sqrt(T))`` states).

    With value checks on (:mod:`jaxdyn.config`), a non-finite or malformed initial state or
    open-loop control raises before the loop, a policy's non-finite control and a step that
    turns the finite state into a non-finite one (:data:`DIVERGED`: the integration went
    unstable; it names the remedies) raise once the loop has run, instead of a NaN trajectory;
    so does a trajectory whose velocity jumped beyond what its steps resolve
    (:data:`DIVERGED_JUMP`, criteria in :func:`_jumped`: the speed growing tenfold per step, a
    hundredfold in one, or with compliant contact a coordinate bouncing back ten times
    faster): an instability that
    has not overflowed yet (quad12 at ``dt = 0.5``: the base 627 m up after five steps), or a
    contact crossed within one step. Called outside ``jax.jit``, a failed check raises
    :class:`jaxdyn.CheckError`.
    The loop itself holds no check (a check is an XLA custom call, which keeps fused CPU loops,
    :func:`jaxdyn.config.fused_cpu_loops`, from compiling the rollout into one kernel).

    **Returns:** the states after each step, stacked: a :class:`State` with leading axis ``T``.
    """
    if checkpoint not in CHECKPOINTS:
        raise ValueError(f"rollout: checkpoint must be one of {CHECKPOINTS}, got {checkpoint!r}")
    if (controls is None) == (policy is None):
        raise ValueError("rollout: give exactly one of controls (T, nu) or policy=callable")
    if policy is not None:
        if n_steps is None:
            raise ValueError("rollout: a policy needs n_steps")
        T = int(n_steps)
        xs = None
    else:
        controls = jnp.asarray(controls)
        nu = _nu(cfg, model)
        if controls.ndim != 2 or controls.shape[1] != nu:
            raise ValueError(
                f"rollout: controls has shape {tuple(controls.shape)}, expected (T, nu) with "
                f"nu={nu} for {model.name!r}"
            )
        T = controls.shape[0]
        if n_steps is not None and int(n_steps) != T:
            raise ValueError(f"rollout: n_steps={n_steps} but controls has {T} rows")
        xs = controls
    if T < 1:
        raise ValueError(f"rollout: need at least one step, got {T}")

    # the initial state (and open-loop controls) checked once, before the loop, and cast to
    # the dtype the steps return (the scan's carry)
    checks = value_checks.enabled()
    ctrl0 = xs[0] if xs is not None else jnp.zeros(_nu(cfg, model), jnp.asarray(state.q).dtype)
    q0, v0, _, dtype, act0 = _check_state("rollout", model, state, ctrl0, cfg)
    if checks and xs is not None:
        q0 = value_checks.error_if(
            q0, ~jnp.all(jnp.isfinite(xs)), "rollout: controls has a non-finite entry"
        )
    # (a time made here is a constant: on_mesh gives it the mesh of a batch split over it)
    imp0 = _check_impulses("rollout", model, state, cfg, dtype)
    state = State(q0, v0, spatial.on_mesh(jnp.asarray(state.t, dtype)), act0, imp0)
    track = checks and policy is not None  # a policy's controls: a flag carried by the loop

    def body(carry, u):
        s, bad = carry if track else (carry, None)
        ctrl = policy(s) if policy is not None else u
        with value_checks.unchecked():  # checked before and after the loop
            s1 = step(model, s, ctrl, cfg)
        if track:
            assert bad is not None  # carried with the state when tracked
            return (s1, bad | ~jnp.all(jnp.isfinite(ctrl))), s1
        return s1, s1

    if checkpoint == "step":
        body = jax.checkpoint(body)
    init = (state, spatial.on_mesh(jnp.asarray(False))) if track else state
    if checkpoint != "sqrt":
        end, traj = jax.lax.scan(body, init, xs, length=T)
        return (
            _checked(traj, v0, cast("tuple[State, Array]", end)[1] if track else None, cfg)
            if checks
            else traj
        )

    k = max(1, math.isqrt(T - 1) + 1 if T > 1 else 1)
    nblk, rest = divmod(T, k)

    @jax.checkpoint
    def block(s, us):
        return jax.lax.scan(body, s, us, length=k)

    def split(x, n0, n1):
        return None if x is None else x[n0:n1]

    xs_main = None if xs is None else xs[: nblk * k].reshape((nblk, k) + xs.shape[1:])
    end, traj = jax.lax.scan(block, init, xs_main, length=nblk)
    traj = jax.tree_util.tree_map(lambda x: x.reshape((nblk * k,) + x.shape[2:]), traj)
    if rest:
        end, tail = jax.lax.scan(body, end, split(xs, nblk * k, T), length=rest)
        traj = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), traj, tail)
    return (
        _checked(traj, v0, cast("tuple[State, Array]", end)[1] if track else None, cfg)
        if checks
        else traj
    )


rollout = functools.wraps(rollout)(eager.dispatch(rollout, compile_eagerly=False))


def _nu(cfg: SimConfig, model: Model) -> int:
    """The number of controls of ``cfg.actuator`` (``size(model)``: a Torque, PD, GainBias)."""
    return cast("Torque | PD | GainBias", cfg.actuator).size(model)


def _checked(traj: State, v0, bad_ctrl, cfg) -> State:
    """A rollout's checks after its loop: a policy's non-finite control, then :data:`DIVERGED`
    (the initial state was finite, so a non-finite state came from a step), then
    :data:`DIVERGED_JUMP` (:func:`_jumped`)."""
    q = traj.q
    if bad_ctrl is not None:
        q = value_checks.error_if(q, bad_ctrl, "rollout: the policy returned a non-finite control")
    bad = ~(jnp.all(jnp.isfinite(q)) & jnp.all(jnp.isfinite(traj.v)))
    q = value_checks.error_if(q, bad, DIVERGED)
    jumped = _jumped(v0, traj.v, isinstance(cfg.contact, C.Compliant))
    q = value_checks.error_if(q, jumped, DIVERGED_JUMP)
    return State(q, traj.v, traj.t, traj.act, traj.impulses)

"""MJCF (MuJoCo XML) models, compiled by MuJoCo's own compiler into a jaxdyn :class:`Model`.

``load_mjcf`` hands the file (or text, or an ``mujoco.MjSpec`` / ``mujoco.MjModel``) to MuJoCo
(``mujoco.MjModel.from_xml_path`` / ``from_xml_string``), so every default class, ``<include>``,
``<frame>``, ``fromto``, ``inertiafromgeom`` and angle unit is resolved exactly as MuJoCo does,
and then reads the compiled ``mjModel``. ``mujoco`` is an optional dependency
(``pip install 'jaxdyn[mjcf]'``); it is imported only when an MJCF file is loaded.

Model files are untrusted input (as for :mod:`jaxdyn.model.urdf`): unless ``trusted=True``,
jaxdyn expands the ``<include>`` elements and reads the files a model names itself, only from
inside the model file's directory, and MuJoCo compiles the result from memory, so no file
outside is opened; DOCTYPE declarations and sizes that keep MuJoCo's compiler busy for minutes
(:data:`MAX_BODIES`, :data:`MAX_NESTING`, :data:`MAX_ELEMENTS`, :data:`MAX_KEYS`,
:data:`MAX_SIZE`) are refused before it runs. The compiled values jaxdyn reads are then checked
by element (NaN, inf, beyond :data:`jaxdyn.model.build.MAGNITUDE_BOUND`, a timestep that is not
positive). The threat model is in ``docs/mjcf.md`` ("Untrusted files").

How the compiled MuJoCo quantities map to jaxdyn's:

=======================================  ======================================================
MuJoCo (``mjModel``)                      jaxdyn
=======================================  ======================================================
body with no joint                        welded to its parent body (merged, as a URDF fixed
                                          joint); still a frame
body with joints ``j0 .. jk``             a chain of ``k + 1`` jaxdyn bodies, one per joint; the
                                          first ``k`` are massless and named ``body/joint``, the
                                          last carries the body's name, mass and children
``body_pos``, ``body_quat``               ``Xtree`` (placement of the joint frame in the parent)
``jnt_pos`` (anchor), ``jnt_axis``        joint frame origin at the anchor, ``dof_axis`` the
                                          axis (``[a; 0]`` hinge, ``[0; a]`` slide)
hinge / slide ``qpos``                    ``q`` **equal to** ``qpos``: MuJoCo rotates by
                                          ``qpos - qpos0`` (``qpos0 = ref``); the constant
                                          ``-ref`` rotation (translation) is folded into
                                          ``Xtree``, so ranges, keyframes and actuator lengths
                                          keep their MuJoCo values
ball ``qpos`` (w x y z), ``qvel``         spherical joint, ``q = qpos``, ``v = qvel`` (angular
                                          velocity in the child frame)
free ``qpos = [x; quat]``                 free joint, ``q = qpos`` (world position, ``w x y z``)
free ``qvel = [v_world; ω_body]``         ``v = [ω_body; R^T v_world]``: a rotation that depends
                                          on ``q`` (:class:`jaxdyn.interop.mujoco.Converter`)
``body_mass``, ``body_ipos``,             ``mass``, ``com``, ``inertia`` (rotated into the
``body_iquat``, ``body_inertia``          jaxdyn body's axes, merged bodies summed); where
                                          MuJoCo marks a frame ``sameframe`` (``body_``,
                                          ``site_``, ``geom_sameframe``) it is placed exactly
                                          as ``mj_kinematics`` places it (MuJoCo drops offsets
                                          below its tolerance, e.g. a mesh's ``ipos ~ 1e-9``)
``dof_armature`` (+ ``gear^2`` x          ``armature`` (``None`` if all zero)
``actuator_armature`` of joint motors)
``dof_damping`` (+ ``gear^2`` x           ``damping``
``actuator_damping``)
``dof_frictionloss``                      ``friction`` (jaxdyn.sim: smooth Coulomb friction;
                                          MuJoCo: a dry-friction constraint)
``jnt_range`` (limited hinge / slide)     ``q_lower``, ``q_upper`` (``-inf`` / ``inf`` otherwise)
actuators, ``jnt_actfrcrange``            ``effort_limit`` (bound on the actuators' torque on
                                          the coordinate; ``inf`` where unbounded or
                                          unactuated), and :class:`Actuator` records
(none)                                    ``velocity_limit`` = ``inf``
``opt.gravity``                           ``gravity`` (zero with ``<flag gravity="disable">``)
``opt.timestep``, ``opt.integrator``      ``MJCFModel.timestep``, ``MJCFModel.integrator``
                                          (:meth:`MJCFModel.sim_config`)
``opt.density``, ``opt.viscosity``,       :class:`jaxdyn.sim.Fluid` (``MJCFModel.fluid``):
``opt.wind``                              MuJoCo's inertia-based fluid model, one box per
                                          moving body with mass in its inertial frame
hinge / slide ``stiffness``,              :class:`jaxdyn.sim.Springs` (``MJCFModel.springs``)
``qpos_spring``
fixed tendons                             :class:`jaxdyn.sim.FixedTendons`
                                          (``MJCFModel.tendons``)
spatial tendons: sites, pulleys, spheres  :class:`jaxdyn.sim.SpatialTendons`
and cylinders without a side site         (``MJCFModel.spatial_tendons``)
actuators (joint / fixed-tendon           :class:`jaxdyn.sim.GainBias`
transmissions, gain / bias family)        (``MJCFModel.gain_bias``)
bodies, sites, joints                     frames: every body by name (the world is
                                          ``"world"``), every site (``"site:<name>"`` where a
                                          body has that name), every joint at its anchor (where
                                          its name is free)
sphere / capsule / box geoms              :class:`jaxdyn.sim.Sphere` / ``Capsule`` / ``Box`` on
                                          the body's frame (capsule ``length = 2 size[1]``, box
                                          ``size = 2 size``), the ones that collide with:
plane geom fixed to the world             the terrain :class:`jaxdyn.sim.Plane`
every other pair of colliding geoms       a pair of :class:`jaxdyn.sim.Geoms` (``geoms``):
(MuJoCo's filters: contype/conaffinity,   static world geometry, body against body, shapes
exclude, parent-child)                    against the plane the primitives do not have,
                                          heightfields (``hfield``, inline or PNG);
                                          friction ``max``, condim 1 / 3 (4 / 6:
                                          ``Constraint(soft=True)``), margin, solref,
                                          ``priority`` (docs/scenes.md)
explicit ``<contact><pair>``              a pair of ``geoms`` whatever the filters say,
                                          replacing the dynamic pair of its two geoms, with
                                          its own condim 1 / 3 / 4 / 6, friction, margin,
                                          solref, solimp, solreffriction (below)
``connect`` / ``weld`` to the world       :class:`jaxdyn.Connect` / :class:`jaxdyn.Weld`
(or a static body)                        (``local_world_aligned``, with ``target``)
``connect`` / ``weld`` / ``joint``        :class:`jaxdyn.sim.Equalities` (``equalities``:
equalities (loop closures included)       MuJoCo's soft constraints, ``solref``, ``solimp``)
``qpos0``, keyframes                      ``MJCFModel.q0``, ``MJCFModel.keyframes``
=======================================  ======================================================

Features jaxdyn cannot represent raise a ``ValueError`` naming the element and the feature,
all found at once, never a silent difference. Where the feature only adds forces that the
rigid-body quantities do not contain (mass matrix, bias forces, Jacobians, kinematics are
exact without it) the error gives the ``ignore=(...)`` that loads the model without it:

================  ============================================================================
``ignore`` key    feature
================  ============================================================================
``"tendon"``      spatial tendons wrapping a geom with a ``sidesite`` (MuJoCo 4's side-site
                  rule and inside wrap), tendon ``frictionloss``, polynomial tendon stiffness /
                  damping (their passive, limit and actuator forces; tendon armature changes
                  the mass matrix and is always an error). Fixed tendons and spatial tendons
                  through sites, over pulleys and around spheres and cylinders without a side
                  site are honoured (:class:`jaxdyn.sim.FixedTendons`,
                  :class:`jaxdyn.sim.SpatialTendons`; an actuator on a spatial tendon is
                  refused under ``"actuator"``)
``"fluid"``       MuJoCo's ellipsoid-based fluid model (geoms with
                  ``fluidshape="ellipsoid"``: their bodies' fluid forces are dropped); the
                  inertia-based model (``<option density / viscosity / wind>``) is honoured:
                  :class:`jaxdyn.sim.Fluid` (``MJCFModel.fluid``)
``"passive"``     springs of ball and free joints, polynomial stiffness or damping, plasticity
                  (hinge / slide ``stiffness`` with ``springref`` is honoured:
                  :class:`jaxdyn.sim.Springs`)
``"gravcomp"``    gravity compensation of bodies (``gravcomp``)
``"equality"``    tendon and flex equality constraints (connect, weld and joint equalities
                  are honoured: :class:`jaxdyn.sim.Equalities`)
``"ball_limit"``  range (cone) limits of ball joints
``"actuator"``    actuators jaxdyn does not model: transmissions other than a hinge / slide
                  joint or a fixed tendon, activation dynamics other than integrator / filter
                  / filterexact (muscle, user), muscle / PID /
                  user gains, delays
``"geom"``        collision geometry jaxdyn.sim cannot use: a pair of shapes without a narrow
                  phase in :mod:`jaxdyn.sim.collision` (heightfield - heightfield, plane -
                  heightfield: MuJoCo has none either), condim 4 / 6 on an explicit
                  ``<contact><pair>`` (torsional / rolling friction), a ``<pair>``'s two
                  sliding coefficients when they differ (anisotropic friction; ignored: the
                  first)
``"mocap"``       mocap bodies (kept fixed at their model pose)
``"frictionloss"``  frictionloss on a free joint's translations (MuJoCo: world axes)
``"flex"``        flexes (deformable bodies; vertex bodies stay rigid bodies)
``"plugin"``      engine plugins
``"composite"``   ``<composite>`` / ``<flexcomp>`` elements (their bodies load, their
                  elasticity does not)
================  ============================================================================

Always errors: free joints below the top level and ball joints followed by rotations (MuJoCo
refuses both), tendon armature.

Contact parameters of the geoms (``<default>`` classes and ``<option override>`` included: under
``<flag override="enable">`` ``o_margin``, ``o_solref``, ``o_solimp`` and ``o_friction``
replace every contact's, MuJoCo's ``mj_collideGeoms``; an anisotropic ``o_friction`` is
refused by name, ``ignore=("geom",)``: its first coefficients):
``margin`` (a pair's contact acts below the sum of its geoms' margins, as MuJoCo 4.0) and
``solref`` (mixed per pair with ``solmix``; :class:`jaxdyn.sim.Compliant`'s time constant and
damping ratio, :class:`jaxdyn.sim.Constraint`'s Baumgarte fraction ``dt / timeconst``) are
honoured (a geom whose pair with the ground plane has them is a geom of ``geoms``, not a
primitive); ``gap`` only adds MuJoCo contacts that carry no force (MuJoCo 3.9.0 on; with an
older MuJoCo installed the contacts act below ``margin - gap``, as its did); ``solimp`` off
MuJoCo's default and ``solref`` in its direct (negative) form are refused by
:meth:`MJCFModel.sim_config` (``ignore=("solimp",)`` / ``("solref",)``) unless the contact
model is MuJoCo's soft contact, ``Constraint(soft=True)``, which honours both.
Explicit pairs (``<contact><pair>``, MuJoCo's ``mj_collision``: always collided, whatever
``contype`` / ``conaffinity``, ``<exclude>`` or the parent-child filter say; a pair replaces
the dynamic pair of its two geoms, no contact twice) take their compiled ``pair_*`` values
instead of the geoms' mixed ones (:attr:`jaxdyn.sim.Geoms.explicit`): ``condim``, the sliding
``friction``, ``margin`` (the pair's own), ``solref``, and, under the same rules as the
geoms', ``solimp`` and a direct ``solref`` (``Constraint(soft=True)`` only, else refused by
:meth:`MJCFModel.sim_config`) and ``solreffriction``, which exists on ``<pair>`` only (the
reference of the elliptic cones' friction rows: ``Constraint(soft=True)``, per contact; the
other contact models refuse it, ``ignore=("solreffriction",)``; a contact model given its own,
``Constraint(soft=True, solreffriction=...)``, applies it to every contact). A pair whose two
geoms move with one jaxdyn body (or are both static) is dropped: its contact moves nothing.
A :class:`jaxdyn.sim.Scene` keeps a robot's explicit pairs with their parameters. Per-geom
friction and condim are mixed per pair as MuJoCo's ``mj_contactParam`` (priority, else the
larger), for the geom pairs and for the primitives against the ground plane
(:attr:`jaxdyn.sim.ContactSet.friction`); a contact model's own ``friction`` overrides them.
condim 4 / 6 (torsional / rolling friction, the geoms' ``friction[1:3]``,
:attr:`jaxdyn.sim.Geoms.spin`) makes a geom a pair with the ground plane, not a primitive, and
is honoured by :class:`jaxdyn.sim.Constraint`, hard or soft (:meth:`MJCFModel.sim_config`
refuses it for ``Compliant``, ``ignore=("condim",)``: condim 3).
Geom pairs interpenetrating at ``qpos0`` get a warning naming them.
"""

from __future__ import annotations

import dataclasses
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import joints
from .._versions import release
from ..interop.mujoco import MJCF_HINT as MJCF_HINT
from ..interop.mujoco import decode_name
from ..interop.mujoco import import_mujoco as _import_mujoco
from ..interop.mujoco import mujoco_names as mujoco_names
from ..model.build import (
    LIMITS,
    cast_params,
    inertias_about_com,
    magnitude_bound,
    model_params,
    skew,
    sort_tree,
    too_big,
)
from ..model.model import Model, make_topology

if TYPE_CHECKING:
    import mujoco

    from ..clusters.model import ClusterModel
    from ..interop.mujoco import Converter
    from ..sim.actuators import (
        PD,
        FixedTendons,
        GainBias,
        JointLimits,
        SpatialTendons,
        Springs,
        Torque,
    )
    from ..sim.contact import Compliant, Constraint
    from ..sim.core import SimConfig
    from ..sim.equality import Equalities
    from ..sim.fluid import Fluid
    from ..sim.geometry import Plane
    from ..sim.geoms import Geoms
    from ..sim.limits import FrictionLoss, LimitConstraints

__all__ = [
    "Actuator",
    "MJCFModel",
    "FEATURES",
    "MAX_BODIES",
    "MAX_ELEMENTS",
    "MAX_KEYS",
    "MAX_NESTING",
    "MAX_SIZE",
    "load_mjcf",
    "load",
    "mujoco_names",
]

#: ``ignore`` keys of :func:`load_mjcf` and what each drops (see the module docstring)
FEATURES = {
    "tendon": "side-site wrapping, tendon friction and polynomial tendon forces",
    "fluid": "the ellipsoid-based fluid model (fluidshape)",
    "passive": "springs of ball / free joints, polynomial stiffness or damping, plasticity",
    "gravcomp": "gravity compensation",
    "equality": "equality constraints jaxdyn cannot express",
    "ball_limit": "ball joint range limits",
    "actuator": "actuators jaxdyn does not model",
    "geom": "collision geometry jaxdyn.sim cannot use",
    "mocap": "mocap bodies (fixed at their model pose)",
    "frictionloss": "frictionloss on free-joint translations",
    "flex": "flexes",
    "plugin": "engine plugins",
    "composite": "<composite> / <flexcomp> elements",
}

_FREE, _BALL, _SLIDE, _HINGE = 0, 1, 2, 3
_KIND = {
    _FREE: joints.FREE,
    _BALL: joints.SPHERICAL,
    _SLIDE: joints.ONE_DOF,
    _HINGE: joints.ONE_DOF,
}
_JNT_NAME = {_FREE: "free", _BALL: "ball", _SLIDE: "slide", _HINGE: "hinge"}
_GEOM_NAMES = (
    "plane",
    "hfield",
    "sphere",
    "capsule",
    "ellipsoid",
    "cylinder",
    "box",
    "mesh",
    "sdf",
)
_PLANE, _SPHERE, _CAPSULE, _BOX = 0, 2, 3, 6
_OBJ_SITE = 6
_EQ_CONNECT, _EQ_WELD, _EQ_JOINT = 0, 1, 2
_EQ_NAMES = ("connect", "weld", "joint", "tendon", "flex", "flexvert", "flexstrain", "distance")
_TRN_JOINT, _TRN_JOINTINPARENT, _TRN_TENDON = 0, 1, 3
_WRAP_JOINT, _WRAP_PULLEY, _WRAP_SITE, _WRAP_SPHERE, _WRAP_CYLINDER = 1, 2, 3, 4, 5
_DYN_NAMES = ("none", "integrator", "filter", "filterexact")
_GB_FIELDS = (
    "moment",
    "gain",
    "bias",
    "ctrl_lower",
    "ctrl_upper",
    "force_lower",
    "force_upper",
    "dofs",
)
_TRN_NAMES = ("joint", "jointinparent", "slidercrank", "tendon", "site", "body", "so3")


class Actuator(NamedTuple):
    """One MuJoCo actuator on a hinge or slide joint, in jaxdyn's terms.

    ``joint``: jaxdyn joint name (the MuJoCo joint's), ``dof``: its index in ``v``. The torque
    it adds to ``tau[dof]`` is exactly MuJoCo's::

        ctrl_c = clip(ctrl, *ctrlrange)                       # if ctrlrange is not None
        force = gain * ctrl_c + bias[0] + bias[1] * gear * q + bias[2] * gear * v
        force = clip(force, *forcerange)                      # if forcerange is not None
        tau[dof] += gear * force

    (``q`` and ``v`` the joint's coordinate: jaxdyn's ``q`` equals MuJoCo's ``qpos``).
    ``kind``: ``"motor"`` (no bias), ``"position"`` (``bias = (0, -kp, -kv)``, ``gain = kp``),
    ``"velocity"`` (``bias = (0, 0, -kv)``, ``gain = kv``) or ``"affine"`` (any other
    ``biastype="affine"`` actuator, or ``gaintype="affine"``: ``gainprm`` holds its three
    gain coefficients, the force's gain being ``gainprm[0] + gainprm[1] L + gainprm[2] Ldot``).
    An actuator on a fixed tendon has ``tendon`` (its name), ``joint = None`` and ``dof = -1``:
    :class:`jaxdyn.sim.GainBias` (``MJCFModel.gain_bias``) applies every actuator exactly.
    ``actuator_armature`` and ``actuator_damping`` are folded into the model's ``armature``
    and ``damping`` (times ``gear^2``).
    """

    name: str
    joint: str | None
    dof: int
    kind: str
    gear: float
    gain: float
    bias: tuple
    ctrlrange: tuple | None
    forcerange: tuple | None
    tendon: str | None = None
    gainprm: tuple = ()
    dyntype: str = "none"


class MJCFModel(NamedTuple):
    """What :func:`load_mjcf` returns.

    - ``model``: the :class:`jaxdyn.Model` (dynamics, kinematics, joint properties);
    - ``contacts``: :mod:`jaxdyn.sim` primitives (``Sphere``, ``Capsule``, ``Box``) on body
      frames, one per collision geom that touches the terrain (compile them with
      ``jaxdyn.sim.contact_set(model, contacts)``);
    - ``terrain``: the ground plane (:class:`jaxdyn.sim.Plane`) or ``None``;
    - ``geoms``: a :class:`jaxdyn.sim.Geoms` of every other pair of collision geoms that may
      touch (bodies against bodies, static world geometry, shapes the primitives above do not
      have), or ``None``; :meth:`sim_config` puts the three in a ``SimConfig``;
    - ``constraints``: :class:`jaxdyn.Connect` / :class:`jaxdyn.Weld` of the equality
      constraints, with ``constraint_active`` (MuJoCo's ``eq_active0``) beside them;
    - ``actuators``: :class:`Actuator` records in MuJoCo's actuator (``ctrl``) order;
    - ``q0``: MuJoCo's ``qpos0`` (the reference configuration) as a jaxdyn ``q``;
    - ``keyframes``: ``{name: (q, v)}`` from ``<keyframe>`` in jaxdyn's layout;
      ``keyframe_act``: ``{name: act}``, each keyframe's activations (MuJoCo's ``key_act``,
      ``(na,)`` in actuator order: :attr:`jaxdyn.sim.State.act` of :attr:`gain_bias`; empty
      arrays without activation dynamics);
    - ``timestep``: ``opt.timestep``;
    - ``ignored``: the messages of the features dropped through ``ignore=``;
    - ``site_frames``: MuJoCo site name -> jaxdyn frame name;
    - ``mj_model``: the compiled ``mujoco.MjModel`` (for :meth:`converter` and as an oracle);
    - ``springs``, ``tendons``, ``gain_bias``: the scene's :class:`jaxdyn.sim.Springs` (hinge /
      slide ``stiffness`` about ``springref``), :class:`jaxdyn.sim.FixedTendons` and
      :class:`jaxdyn.sim.GainBias` (every actuator, ``ctrl`` in MuJoCo's order), ``None``
      where the scene has none; ``integrator``: jaxdyn's integrator for ``opt.integrator``;
      ``sim_issues``: ``(key, message)`` of what :meth:`sim_config` refuses (an integrator
      jaxdyn.sim does not have);
    - ``fluid``: MuJoCo's inertia-based fluid model of the scene (``<option density /
      viscosity / wind>``) as a :class:`jaxdyn.sim.Fluid`, ``None`` without fluid forces;
    - ``pair_ids``: the MuJoCo indices (``<contact><pair>``, ``m.pair_*``) of the explicit
      pairs of ``geoms`` (:attr:`jaxdyn.sim.Geoms.explicit`, in that order);
    - ``equalities``: every connect / weld / joint equality constraint of the scene (loop
      closures and joint couplings included; inactive ones with ``active = 0``) as a
      :class:`jaxdyn.sim.Equalities` for :mod:`jaxdyn.sim` (``None`` without any).
      ``constraints`` holds only those a :class:`jaxdyn.Connect` / :class:`jaxdyn.Weld` can
      express (a frame attached to the world), for the constrained-dynamics algorithms.
    """

    model: Model
    contacts: tuple
    terrain: Plane | None
    geoms: Geoms | None
    constraints: tuple
    constraint_active: tuple
    actuators: tuple
    q0: np.ndarray
    keyframes: dict
    timestep: float
    ignored: tuple
    site_frames: dict
    mj_model: Any  # a mujoco.MjModel (MuJoCo's compiled bindings ship no type stubs)
    springs: Springs | None = None
    tendons: FixedTendons | None = None
    gain_bias: GainBias | None = None
    integrator: str = "implicit"
    sim_issues: tuple = ()
    equalities: Equalities | None = None
    spatial_tendons: SpatialTendons | None = None
    keyframe_act: dict = {}  # noqa: RUF012 - a NamedTuple default, never mutated
    ground_geom: int = -1
    pair_ids: tuple = ()
    fluid: Fluid | None = None

    def converter(self) -> Converter:
        """A :class:`jaxdyn.interop.mujoco.Converter` between ``model`` and ``mj_model``."""
        from ..interop.mujoco import Converter

        return Converter(self.model, self.mj_model)

    def mujoco_contact(self, contact: Constraint | None = None) -> Constraint:
        """MuJoCo's contact model of the file, what :meth:`sim_config` makes of a
        :class:`jaxdyn.sim.Constraint` left at ``soft=None`` (the default): ``contact`` (default
        ``Constraint()``) with MuJoCo's soft contact (``soft=True``, the geoms' ``solref`` /
        ``solimp``, ``opt.impratio``, the file's cone) and its convex problem
        (``relaxed=True``), solved as MuJoCo's and MJX's Newton solver (``solver="newton"``,
        on either cone; ``solver=None`` kept where ``contact`` asks for the dual's ``newton``
        steps) with the file's ``opt.iterations`` (where ``contact.iterations`` is the default
        100) and ``opt.tolerance`` (where ``contact.tolerance`` is ``None``), warm-started from
        the previous step's acceleration as MuJoCo from ``qacc_warmstart``
        (``warm_start=True``: a state from :func:`jaxdyn.sim.warm_state` carries it; a state
        without starts each solve from the free step). Its other fields (``max_contacts``,
        ``friction``, ...) are ``contact``'s."""
        from ..sim.contact import Constraint

        c = Constraint() if contact is None else contact
        opt = self.mj_model.opt
        default_iterations = Constraint.__dataclass_fields__["iterations"].default
        return dataclasses.replace(
            c,
            soft=True,
            relaxed=True,
            solver="newton" if c.solver is None and c.newton == 0 else c.solver,
            iterations=int(opt.iterations) if c.iterations == default_iterations else c.iterations,
            tolerance=float(opt.tolerance) if c.tolerance is None else c.tolerance,
            warm_start=True,
        )

    def mujoco_limits(self, smoothing: float = 1e-5) -> JointLimits:
        """MuJoCo's joint-limit constraint as a :class:`jaxdyn.sim.JointLimits` per coordinate
        (for :meth:`sim_config`'s ``limits=``): a limit violated by ``r`` with ``solreflimit
        = (timeconst, dampratio)`` makes MuJoCo's constrained acceleration ``d aref + (1 - d)
        a0`` with ``aref = -b rdot - k d r``, ``b = 2 / (dmax timeconst)``, ``k = 1 / (dmax^2
        timeconst^2 dampratio^2)`` (MuJoCo's documentation, Computation: soft constraints);
        at the impedance ``d = dmax`` the limit's own part is the damped spring ``rddot = -(2 /
        timeconst) rdot - r / (timeconst dampratio)^2``, critically damped at MuJoCo's
        default ``dampratio = 1``. Per coordinate it becomes a joint force with MuJoCo's
        effective inertia ``1 / dof_invweight0`` (the one its constraint regulariser uses):
        ``stiffness = 1 / (invweight0 (timeconst dampratio)^2)``, ``damping = 2 / (invweight0
        timeconst)``. ``timeconst`` is at least two timesteps (MuJoCo's ``refsafe``, unless
        disabled). Left out: MuJoCo's limit lets only the share ``(1 - d) a0`` of the
        unconstrained acceleration ``a0`` through, the spring-damper all of it (a force that
        holds a joint against its stop, such as a strong actuator, pushes it about ``1 / (1 -
        d)`` times as far past the stop as MuJoCo's limit; docs/environments.md measures it on
        the suite's tasks), the variation of the effective inertia away from ``qpos0``, and
        the coupling with the contacts that MuJoCo solves in one problem with the limits.
        One-sided as MuJoCo's (``JointLimits.one_sided``: a limit pushes, never holds a joint
        that leaves it). ``smoothing``: :class:`jaxdyn.sim.JointLimits`'
        smoothing, small (MuJoCo's limit is sharp; the damper acts on a violation ``r`` with
        the weight ``r / (r + smoothing)``).

        Refused with a ``ValueError`` naming the joint: ``solreflimit`` in the direct,
        negative form. Only hinge and slide joints are limited by :mod:`jaxdyn.sim`; the
        entries of other coordinates are 0."""
        from ..sim.actuators import JointLimits

        m = self.mj_model
        names = mujoco_names(m, "jnt")
        v_index = self.converter().v_index
        refsafe = not _disabled(_import_mujoco(), m, "mjDSBL_REFSAFE")
        k = np.zeros(self.model.nv)
        c = np.zeros(self.model.nv)
        for i, dof in enumerate(v_index):
            j = int(m.dof_jntid[dof])
            if int(m.jnt_type[j]) not in (_HINGE, _SLIDE) or not m.jnt_limited[j]:
                continue
            timeconst, dampratio = (float(x) for x in m.jnt_solref[j])
            if timeconst <= 0 or dampratio <= 0:
                raise ValueError(
                    f"mujoco_limits: joint {names[j]!r} has solreflimit={timeconst:g} "
                    f"{dampratio:g} (the direct, negative form); only (timeconst, dampratio) "
                    "is mapped"
                )
            if refsafe:
                timeconst = max(timeconst, 2.0 * float(m.opt.timestep))
            w = float(m.dof_invweight0[dof])
            k[i] = 1.0 / (w * (timeconst * dampratio) ** 2)
            c[i] = 2.0 / (w * timeconst)
        dtype = self.model.mass.dtype
        return JointLimits(
            stiffness=jnp.asarray(k, dtype),
            damping=jnp.asarray(c, dtype),
            smoothing=smoothing,
            one_sided=True,
        )

    def limit_constraints(self, **static: Any) -> LimitConstraints | None:
        """MuJoCo's joint-limit constraint as :class:`jaxdyn.sim.LimitConstraints` (for
        :meth:`sim_config`'s ``limits="constraint"``, its default under MuJoCo's contact and with
        contact off, or its ``limit_constraints=``): a row for every limited hinge and slide joint
        (two, one per side, where its range is narrower than ``2 margin``) with the joint's range,
        ``margin``, ``solreflimit`` (either form), ``solimplimit`` and ``dof_invweight0`` (the row's
        ``diagApprox``), and the file's ``refsafe`` flag: MuJoCo's soft limit rows, solved with the
        contacts (or alone); then a row for every limited fixed or spatial tendon
        (``LimitConstraints.tendons``: the tendon's range, ``margin``, ``solreflimit``,
        ``solimplimit`` and ``tendon_invweight0``). ``None`` where the file has no limited hinge or
        slide joint or tendon or disables limits (``<flag limit="disable"/>`` or
        ``constraint="disable"``: MuJoCo has no limit rows then). ``static``: ``iterations``,
        ``newton`` of the rows' own solve (without :class:`jaxdyn.sim.Constraint` contact)."""
        from ..sim.limits import LimitConstraints, row_bounds

        m = self.mj_model
        mujoco = _import_mujoco()
        if _disabled(mujoco, m, "mjDSBL_LIMIT") or _disabled(mujoco, m, "mjDSBL_CONSTRAINT"):
            return None
        t = self.model.topo
        v_index = self.converter().v_index
        rows = []

        def add(i, qi, rng, margin, solref, solimp, invweight):
            """The rows of one limited joint (``i``, ``qi``) or tendon (``-1``, ``-1``)."""
            lo, hi = (float(x) for x in rng)
            for lower, upper in row_bounds(lo, hi, float(margin)):
                rows.append(
                    (
                        i,
                        qi,
                        lower,
                        upper,
                        float(margin),
                        np.asarray(solref, float),
                        np.asarray(solimp, float),
                        float(invweight),
                    )
                )

        for i, dof in enumerate(v_index):
            j = int(m.dof_jntid[dof])
            if int(m.jnt_type[j]) not in (_HINGE, _SLIDE) or not m.jnt_limited[j]:
                continue
            qi = int(t.q_start[int(t.dof_body[i])])
            add(
                i,
                qi,
                m.jnt_range[j],
                m.jnt_margin[j],
                m.jnt_solref[j],
                m.jnt_solimp[j],
                m.dof_invweight0[dof],
            )
        tendons = []  # MuJoCo's tendon limit rows, on the fixed and spatial tendons
        for ref, ti in _limited_tendons(m):
            n = len(rows)
            add(
                -1,
                -1,
                m.tendon_range[ti],
                m.tendon_margin[ti],
                m.tendon_solref_lim[ti],
                m.tendon_solimp_lim[ti],
                m.tendon_invweight0[ti],
            )
            tendons += [ref] * (len(rows) - n)
        if not rows:
            return None
        dtype = self.model.mass.dtype
        arr = lambda k: jnp.asarray(np.asarray([r[k] for r in rows], float), dtype)  # noqa: E731
        joints = [r for r in rows if r[0] >= 0]
        return LimitConstraints(
            lower=arr(2),
            upper=arr(3),
            margin=arr(4),
            solref=arr(5),
            solimp=arr(6),
            diag=arr(7),
            dof=tuple(r[0] for r in joints),
            qpos=tuple(r[1] for r in joints),
            tendons=tuple(tendons),
            refsafe=not _disabled(mujoco, m, "mjDSBL_REFSAFE"),
            **static,
        )

    def friction_loss(self, *, skip_ball: bool = False) -> FrictionLoss | None:
        """MuJoCo's dry joint friction as :class:`jaxdyn.sim.FrictionLoss` (for
        :meth:`sim_config`'s ``friction_loss="constraint"``, its default under MuJoCo's
        contact and with contact off): a row for every hinge and slide
        joint with ``frictionloss > 0``, with the joint's ``solreffriction`` (``dof_solref``),
        ``solimpfriction`` (``dof_solimp``), ``dof_invweight0`` (the row's ``diagApprox``) and
        the file's ``refsafe`` flag. ``None`` where no joint has one or the file disables them
        (``<flag frictionloss="disable"/>`` or ``constraint="disable"``). Refused with a
        ``ValueError`` naming the joint: ``frictionloss`` on a ball or free joint (the rows
        here act on hinge and slide coordinates), unless ``skip_ball``: those joints are then
        left out (their ``frictionloss`` stays the model's smooth Coulomb friction)."""
        from ..sim.limits import FrictionLoss

        m = self.mj_model
        mujoco = _import_mujoco()
        if _disabled(mujoco, m, "mjDSBL_FRICTIONLOSS") or _disabled(mujoco, m, "mjDSBL_CONSTRAINT"):
            return None
        names = mujoco_names(m, "jnt")
        rows = []
        for i, dof in enumerate(self.converter().v_index):
            if m.dof_frictionloss[dof] <= 0:
                continue
            j = int(m.dof_jntid[dof])
            if int(m.jnt_type[j]) not in (_HINGE, _SLIDE):
                if skip_ball:
                    continue
                raise ValueError(
                    f"friction_loss: <joint name={names[j]!r}>: frictionloss on a ball or free "
                    "joint (MuJoCo's dry-friction rows are taken on hinge and slide joints)"
                )
            rows.append((i, dof))
        if not rows:
            return None
        dtype = self.model.mass.dtype
        mj = np.asarray([d for _, d in rows], np.int64)
        arr = lambda a: jnp.asarray(np.asarray(a, float)[mj], dtype)  # noqa: E731
        return FrictionLoss(
            frictionloss=arr(m.dof_frictionloss),
            solref=arr(m.dof_solref),
            solimp=arr(m.dof_solimp),
            diag=arr(m.dof_invweight0),
            dof=tuple(i for i, _ in rows),
            refsafe=not _disabled(mujoco, m, "mjDSBL_REFSAFE"),
        )

    def sim_actuator(self) -> Torque | PD:
        """The :mod:`jaxdyn.sim` actuator equivalent to the MuJoCo actuators, ``ctrl`` in
        MuJoCo's order: :class:`jaxdyn.sim.Torque` when all are motors (``gear * gain`` per
        coordinate), :class:`jaxdyn.sim.PD` when all are position servos with ``gear = 1``.

        jaxdyn.sim clips the torque to ``model.effort_limit`` (symmetric) where MuJoCo clamps
        ``ctrl`` to ``ctrlrange``: for motors with symmetric ranges the same (``effort_limit``
        is ``|gear gain| max|ctrlrange|`` there); a position servo's ``ctrlrange`` clamps its
        *target*, which :class:`jaxdyn.sim.PD` does not do (clamp ``ctrl`` before passing
        it). Raises ``ValueError`` for any other mix (use the :class:`Actuator` records)."""
        from ..sim.actuators import PD, Torque

        acts = self.actuators
        if not acts:
            raise ValueError("sim_actuator: the model has no actuators")
        if any(a.dyntype != "none" for a in acts):
            raise ValueError(
                "sim_actuator: actuators with activation dynamics (dyntype) have no Torque / PD "
                "equivalent; use sim_config() (jaxdyn.sim.GainBias)"
            )
        if any(a.tendon is not None for a in acts):
            raise ValueError(
                "sim_actuator: actuators on tendons have no Torque / PD equivalent; use "
                "sim_config() (jaxdyn.sim.GainBias)"
            )
        dofs = tuple(a.dof for a in acts)
        if len(set(dofs)) != len(dofs):
            raise ValueError("sim_actuator: several actuators drive one coordinate")
        kinds = {a.kind for a in acts}
        if kinds == {"motor"}:
            return Torque(gear=jnp.asarray([a.gear * a.gain for a in acts]), dofs=dofs)
        if kinds == {"position"} and all(a.gear == 1.0 for a in acts):
            kp = jnp.asarray([a.gain for a in acts])
            kd = jnp.asarray([-a.bias[2] for a in acts])
            return PD(kp=kp, kd=kd, dofs=dofs)
        raise ValueError(
            f"sim_actuator: actuators of kinds {sorted(kinds)} (gears "
            f"{sorted({a.gear for a in acts})}) have no single jaxdyn.sim equivalent; only "
            "all motors or all gear-1 position servos do"
        )

    def sim_config(
        self,
        contact: Compliant | Constraint | None = None,
        *,
        ignore: str | Iterable[str] = (),
        **overrides: Any,
    ) -> SimConfig:
        """The :class:`jaxdyn.sim.SimConfig` that steps the scene as MuJoCo does:
        ``dt = opt.timestep``, ``integrator`` from ``opt.integrator`` (``Euler``:
        ``"implicit_damping"``, or ``"euler"`` with ``eulerdamp`` off or no damping;
        ``RK4``: ``"rk4"``; ``implicitfast``: ``"implicit"``), ``actuator`` =
        :attr:`gain_bias` (every actuator, ``ctrl`` in MuJoCo's order; no actuator: an empty
        :class:`jaxdyn.sim.Torque`), ``springs``, ``tendons``, ``fluid`` (MuJoCo's inertia-based
        fluid forces), gravity in the model.

        ``contact``: the contact model (:class:`jaxdyn.sim.Constraint` or
        :class:`jaxdyn.sim.Compliant`) that every contact of the file then uses: the primitives
        against the terrain (``contacts``, ``terrain``) and the geom pairs (``geoms``); the
        default ``None`` leaves contact off. A ``Constraint`` whose ``soft`` is left at its
        default ``None`` (``Constraint()``) is MuJoCo's contact model of the file,
        :meth:`mujoco_contact` (what the file means and MJX computes); ``soft=False`` the hard
        contact.

        Joint limits and ``frictionloss`` mean what the file means (MuJoCo's documentation,
        Computation: "Constraint model", its limit and dry-friction rows) wherever the
        configuration can solve MuJoCo's rows: under a contact solved by the primal Newton
        solve (MuJoCo's soft contact, ``Constraint()`` as above) and with contact off
        (``contact=None``, or a file without contact geoms: the rows solved alone, MuJoCo's
        convex primal problem of those rows; :class:`jaxdyn.sim.SimConfig`) the defaults of
        ``limits`` and ``friction_loss`` (left out) are MuJoCo's rows, as
        ``limits="constraint"`` and ``friction_loss="constraint"`` give them: the hinge and
        slide joints' and the tendons' limits MuJoCo's limit constraint
        (:meth:`limit_constraints`, soft one-sided rows; the constrained tendons' bounds in
        ``tendons`` / ``spatial_tendons`` infinite) and the hinge and slide joints'
        ``frictionloss`` MuJoCo's dry-friction rows (:meth:`friction_loss`, soft rows whose
        force is bounded by the ``frictionloss``; a ball or free joint's stays smooth
        friction, with a warning). Where the rows cannot be solved (the hard contact
        ``Constraint(soft=False)``, the dual solve, ``Compliant``: MuJoCo's limit rows can be
        asked there, ``limits="constraint"``; the integrator ``"rk4"``, which takes no rows)
        the defaults are jaxdyn's smooth models, the spring-damper
        :class:`jaxdyn.sim.JointLimits` and the smooth Coulomb friction of the model's
        ``friction``, with a :class:`jaxdyn.JaxdynWarning` naming the joints and tendons and
        what they get instead. ``limits="spring"`` / ``friction_loss="smooth"`` name the
        smooth models (no warning), ``limits="constraint"`` / ``friction_loss="constraint"``
        the rows (``SimConfig`` refuses the dry-friction rows with a ``Constraint`` contact
        not solved by the primal Newton solve); ``limits=`` a :class:`jaxdyn.sim.JointLimits`
        or ``None``, ``limit_constraints=`` and ``friction_loss=`` a
        :class:`jaxdyn.sim.FrictionLoss` or ``None`` set those fields as any other override.

        ``equalities``: the scene's connect / weld / joint equality constraints
        (:class:`jaxdyn.sim.Equalities`, MuJoCo's soft constraints); ``ignore="equality"``
        leaves them out.

        Refused with a ``ValueError`` naming the element unless its key is in ``ignore``:
        ``"integrator"`` (MuJoCo's full ``implicit``: jaxdyn's ``"implicit"`` is its
        ``implicitfast``), and with a contact model ``"noslip"`` (``<option
        noslip_iterations>`` above 0: MuJoCo's no-slip post-solve of the friction forces),
        ``"solimp"`` (a colliding geom's ``solimp``
        off MuJoCo's default: the contact models have no impedance), ``"solref"`` (``solref``
        in the direct, negative form), ``"condim"`` (condim 4 / 6, torsional / rolling
        friction, with ``Compliant``: the hard and soft :class:`jaxdyn.sim.Constraint` take it;
        ignored: condim 3), ``"solreffriction"`` (an explicit ``<contact><pair>``'s:
        MuJoCo's reference of the elliptic cones' friction rows). With
        ``Constraint(soft=True)`` (MuJoCo's soft contact) all of them are honoured instead:
        the geoms' ``solref`` (either form), ``solimp``, condim and MuJoCo's
        ``body_invweight0`` go to every contact, mixed per pair as MuJoCo's
        ``mj_contactParam`` (:class:`jaxdyn.sim.Geoms`, :class:`jaxdyn.sim.ContactSet`; an
        explicit pair's own ``solref``, ``solimp`` and ``solreffriction`` to its contacts), and
        ``opt.impratio``, the ``refsafe`` flag and ``opt.cone`` (where the contact model's
        ``cone`` is ``None``) to the contact model; with ``relaxed=True`` the contact's default
        ``solver`` is then MuJoCo's primal Newton solve, on either cone
        (:class:`jaxdyn.sim.Constraint`). A capsule on a plane under
        pyramidal cones gets MuJoCo's pyramid turned to the capsule's axis (``"cone"`` and
        ``"gap"`` are still accepted in ``ignore``, and refuse nothing).

        Per-geom ``margin`` and ``gap`` (a pair's contact acts below the sum of its geoms'
        margins, MuJoCo's ``includemargin``; from MuJoCo 3.9.0 ``gap`` only adds MuJoCo
        contacts beyond it that carry no force, before 3.9.0 the installed MuJoCo's contact
        acted below ``margin - gap`` and the geoms' margins are read so) and ``solref``
        (mixed per pair with ``solmix``) are honoured (:class:`jaxdyn.sim.Geoms`): by
        :class:`jaxdyn.sim.Compliant` as its ``(timeconst, dampratio)`` and by
        :class:`jaxdyn.sim.Constraint` as its Baumgarte fraction ``dt / timeconst``, unless the
        contact model is given its own (``Compliant(timeconst=...)``,
        ``Constraint(baumgarte=...)``)."""
        from ..sim.actuators import Torque
        from ..sim.contact import Constraint
        from ..sim.core import SimConfig

        keys = set((ignore,) if isinstance(ignore, str) else ignore)
        known = [
            "cone",
            "condim",
            "equality",
            "gap",
            "integrator",
            "noslip",
            "solimp",
            "solref",
            "solreffriction",
        ]
        bad = sorted(keys - set(known))
        if bad:
            raise ValueError(f"sim_config: unknown ignore keys {bad}; known: {known}")
        if isinstance(contact, Constraint) and contact.soft is None:  # the default: MuJoCo's
            contact = self.mujoco_contact(contact)
        # matter only where contact is on
        contact_keys = {"condim", "noslip", "solimp", "solref", "solreffriction"}
        soft = bool(getattr(contact, "soft", False))
        issues = list(self.sim_issues)
        if soft:  # honoured by soft contact
            issues = [(k, msg) for k, msg in issues if k not in contact_keys - {"noslip"}]
        elif isinstance(contact, Constraint):  # condim 4 / 6: the hard contact's too
            issues = [(k, msg) for k, msg in issues if k != "condim"]
        errors = [
            (k, msg)
            for k, msg in issues
            if k not in keys and (contact is not None or k not in contact_keys)
        ]
        if errors:
            lines = "\n".join(f"  [{k}] {msg}" for k, msg in errors)
            ks = tuple(sorted({k for k, _ in errors}))
            raise ValueError(
                f"sim_config: {self.model.name}: jaxdyn.sim cannot honour:\n{lines}\n"
                f"pass ignore={ks!r} to simulate without them"
            )
        kw: dict[str, Any] = dict(
            dt=self.timestep,
            integrator=self.integrator,
            actuator=self.gain_bias if self.gain_bias is not None else Torque(dofs=()),
            springs=self.springs,
            tendons=self.tendons,
            spatial_tendons=self.spatial_tendons,
            equalities=None if "equality" in keys else self.equalities,
            fluid=self.fluid,
        )
        if contact is not None and (self.contacts or self.geoms is not None):
            from ..sim import Plane, contact_set

            kw["contact"] = contact
            if self.contacts:
                kw["contacts"] = contact_set(
                    self.model, self.contacts, friction=self._primitive_friction()
                )
                kw["terrain"] = self.terrain if self.terrain else Plane()
            kw["geoms"] = self.geoms
            g = self.geoms
            if not isinstance(contact, Constraint) and g is not None:
                import dataclasses  # Compliant, ignore=("condim",): condim 4 / 6 as 3

                if g.spin is not None:
                    g = dataclasses.replace(g, condim=tuple(min(c, 3) for c in g.condim), spin=None)
                if g.pair_spin is not None and g.pair_condim is not None:
                    pc = tuple(min(c, 3) for c in g.pair_condim)
                    g = dataclasses.replace(g, pair_condim=pc, pair_spin=None)
                kw["geoms"] = g
            if soft:
                kw.update(self._soft_contact(contact, kw.get("contacts"), self.geoms))
            elif kw["geoms"] is not None:  # ignore=("solimp", "solref"): what they cannot take
                kw["geoms"] = _hard_geoms(kw["geoms"])
        fl_how = self._how(overrides, "friction_loss", ("constraint", "smooth"), "FrictionLoss")
        lim_how = self._how(overrides, "limits", ("constraint", "spring"), "JointLimits")
        if lim_how == "mujoco" and "limit_constraints" in overrides:  # the user's own rows
            lim_how = None
        if "mujoco" in (fl_how, lim_how):  # the defaults: what the file means, where it can
            integrator = overrides.get("integrator", kw["integrator"])
            self._default_rows(contact, kw.get("contact"), fl_how, lim_how, kw, integrator)
        if fl_how == "constraint":
            kw["friction_loss"] = self.friction_loss()
        if lim_how == "constraint":
            self._limit_rows(kw)
        kw.update(overrides)
        return SimConfig(**kw)

    @staticmethod
    def _how(overrides, key, names, cls):
        """``overrides[key]`` when it names a model (popped), ``"mujoco"`` when absent (the
        default: what the file means), ``None`` when it is a value (a ``cls`` or ``None``, set
        as any other override)."""
        if key not in overrides:
            return "mujoco"
        how = overrides[key]
        if not isinstance(how, str):
            return None
        if how not in names:
            raise ValueError(
                f"sim_config: {key} must be {names[0]!r}, {names[1]!r}, a {cls} or None, got "
                f"{how!r}"
            )
        return overrides.pop(key)

    def _limit_rows(self, kw):
        """MuJoCo's limit rows (:meth:`limit_constraints`) into ``kw``, the constrained
        tendons' spring-damper bounds infinite."""
        kw["limit_constraints"] = lim = self.limit_constraints()
        if lim is not None and lim.tendons:  # not the spring-damper too
            kw.update(_unlimited_tendons(kw, set(lim.tendons)))

    def _default_rows(self, asked, contact, fl_how, lim_how, kw, integrator):
        """The defaults of ``friction_loss`` / ``limits`` (``"mujoco"``): MuJoCo's dry-friction
        and limit rows where the ``SimConfig`` can solve them: its ``contact`` solved by the
        primal Newton solve that takes them (MuJoCo's soft contact), or no contact (contact
        off, or a file without contact geoms: the rows solved alone, in MuJoCo's primal
        problem of those rows), under a velocity-level ``integrator``. Elsewhere (``asked``:
        the contact model given; ``"rk4"``) jaxdyn's smooth friction and spring-damper
        limits, with a :class:`jaxdyn.JaxdynWarning` naming the joints and tendons that then
        differ from MuJoCo."""
        from ..errors import warn
        from ..sim.contact import uses_primal_newton

        m = self.mj_model
        mujoco = _import_mujoco()
        jnames, tnames = mujoco_names(m, "jnt"), mujoco_names(m, "tendon")
        off = _disabled(mujoco, m, "mjDSBL_CONSTRAINT")
        solvable = contact is None or uses_primal_newton(contact)
        rows = solvable and integrator != "rk4"
        notes = []
        if fl_how == "mujoco":
            fl_on = not (off or _disabled(mujoco, m, "mjDSBL_FRICTIONLOSS"))
            js = [j for j in range(m.njnt) if fl_on and _frictionloss(m, j)]
            ball = [jnames[j] for j in js if int(m.jnt_type[j]) not in (_HINGE, _SLIDE)]
            if rows:
                kw["friction_loss"] = self.friction_loss(skip_ball=True)
                if ball:
                    notes.append(
                        f"frictionloss of the ball / free joints {ball}: smooth Coulomb "
                        "friction (MuJoCo's dry-friction rows are taken on hinge and slide "
                        "joints only)"
                    )
            elif js:
                notes.append(
                    f"frictionloss of the joints {[jnames[j] for j in js]}: jaxdyn's smooth "
                    "Coulomb friction instead of MuJoCo's dry-friction rows "
                    '(friction_loss="smooth" chooses it)'
                )
        if lim_how == "mujoco":
            if rows:
                self._limit_rows(kw)
            elif not (off or _disabled(mujoco, m, "mjDSBL_LIMIT")):
                js = [
                    jnames[j]
                    for j in range(m.njnt)
                    if int(m.jnt_type[j]) in (_HINGE, _SLIDE) and m.jnt_limited[j]
                ]
                ts = [tnames[t] for _, t in _limited_tendons(m)]
                if js or ts:
                    which = " and ".join(
                        f"{k} {v}" for k, v in (("joints", js), ("tendons", ts)) if v
                    )
                    notes.append(
                        f"the limits of the {which}: jaxdyn's spring-damper JointLimits "
                        'instead of MuJoCo\'s soft limit rows (limits="spring" chooses it)'
                    )
        if notes:
            if rows:
                why = (
                    "MuJoCo's rows are taken (with MuJoCo's soft contact, or alone without contact)"
                )
            elif solvable:
                why = (
                    "integrator 'rk4' takes no constraint rows (MuJoCo's limit and "
                    "dry-friction rows are impulses of a velocity-level step: 'euler', "
                    "'implicit', 'implicit_damping'), so the defaults are jaxdyn's smooth "
                    "models, not what the file means"
                )
            else:
                why = (
                    f"contact {_contact_name(asked)} is not MuJoCo's soft contact "
                    "(sim.Constraint() with soft left at None), so the defaults are jaxdyn's "
                    "smooth models, not what the file means (MuJoCo's dry-friction rows need "
                    'that contact\'s primal Newton solve; its limit rows: limits="constraint")'
                )
            warn(f"sim_config: {self.model.name}: {why}; applied instead: " + "; ".join(notes))

    def _touching(self):
        """MuJoCo geom indices of the contact primitives, the geoms of :attr:`geoms` and the
        ground plane (where it touches a primitive)."""
        index = {n: g for g, n in enumerate(mujoco_names(self.mj_model, "geom"))}
        prims = [index[p.name] for p in self.contacts]
        used = [] if self.geoms is None else [index[n] for n in self.geoms.names]
        ground = [self.ground_geom] if prims and self.ground_geom >= 0 else []
        return prims, used, ground

    def _primitive_friction(self):
        """Each contact primitive's friction against the ground plane, mixed as MuJoCo's
        ``mj_contactParam`` (:func:`jaxdyn.sim.geoms.pair_choice`): the geom of higher
        ``priority``'s, else the larger of the two (friction and condim; condim 1 is
        frictionless)."""
        from ..sim.geoms import pair_choice

        m = self.mj_model
        prims, _, ground = self._touching()
        fr = _geom_friction(m)[:, 0]  # <flag override>: o_friction's
        pr, cd = np.array(m.geom_priority, int), np.array(m.geom_condim, int)
        g = np.asarray(prims, int)
        mu, cond = fr[g], cd[g]
        if ground:
            o = ground[0]
            mu = pair_choice(np, pr[g], pr[o], mu, fr[o])
            cond = pair_choice(np, pr[g], pr[o], cond, cd[o])
        return np.where(cond == 1, 0.0, mu).astype(float)

    def _soft_cone(self, contact):
        """The cone of ``Constraint(soft=True)``: the contact model's, else the file's
        ``<option cone>`` (MuJoCo's default: pyramidal)."""
        if contact.cone is not None:
            return contact.cone
        mujoco = _import_mujoco()
        pyramidal = int(self.mj_model.opt.cone) == int(mujoco.mjtCone.mjCONE_PYRAMIDAL)
        return "pyramidal" if pyramidal else "elliptic"

    def _soft_contact(self, contact, contacts, geoms):
        """``contacts`` / ``geoms`` with the MuJoCo parameters ``Constraint(soft=True)`` uses
        (``solref`` in either form, ``solimp``, ``solmix``, ``body_invweight0``), and the
        contact model with ``opt.impratio``, the ``refsafe`` flag and the cone
        (:meth:`_soft_cone`)."""
        import dataclasses

        import equinox as eqx

        from ..sim.geometry import ContactSet

        m = self.mj_model
        mujoco = _import_mujoco()
        _, solref, solmix, solimp = _contact_params(m)
        invw = np.array(m.body_invweight0, float).reshape(-1, 2)[:, 0]
        geom_iw = invw[np.array(m.geom_bodyid, int)]
        prims, used, ground = self._touching()
        out = {}
        if geoms is not None:
            dtype = np.asarray(geoms.size).dtype
            out["geoms"] = eqx.tree_at(
                lambda g: (g.solref, g.solmix, g.solimp, g.invweight),
                geoms,
                (
                    solref[used].astype(dtype),
                    solmix[used].astype(dtype),
                    solimp[used].astype(dtype),
                    geom_iw[used].astype(dtype),
                ),
                is_leaf=lambda x: x is None,
            )
            if geoms.explicit is not None:  # the explicit pairs' solref (either form), solimp
                _, _, _, pref, pimp, _, _ = _explicit_params(m, self.pair_ids)
                out["geoms"] = dataclasses.replace(
                    out["geoms"], pair_solref=pref.astype(dtype), pair_solimp=pimp.astype(dtype)
                )
        if contacts is not None:
            rows_ref, rows_imp, rows_iw = [], [], []
            for p, g in zip(self.contacts, prims, strict=True):
                ref, imp = (solref[g], solimp[g])
                if ground:
                    ref, imp = _pair_params(m, g, ground[0], solref, solmix, solimp)
                for _ in p.spheres():
                    rows_ref.append(ref)
                    rows_imp.append(imp)
                    rows_iw.append(geom_iw[g])
            dtype = np.asarray(contacts.radius).dtype
            out["contacts"] = ContactSet(
                pos=contacts.pos,
                radius=contacts.radius,
                body=contacts.body,
                names=contacts.names,
                solref=jnp.asarray(np.asarray(rows_ref, dtype)),
                solimp=jnp.asarray(np.asarray(rows_imp, dtype)),
                invweight=jnp.asarray(np.asarray(rows_iw, dtype)),
                friction=contacts.friction,
                axis=contacts.axis,
            )
        refsafe = contact.refsafe and not _disabled(mujoco, m, "mjDSBL_REFSAFE")
        out["contact"] = dataclasses.replace(
            contact, impratio=float(m.opt.impratio), refsafe=refsafe, cone=self._soft_cone(contact)
        )
        return out


# ------------------------------------------------------------------------------- geometry
def _quat_to_mat(q):
    q = np.asarray(q, float)
    with np.errstate(all="ignore"):  # a zero quaternion gives NaN, refused by the callers
        w, x, y, z = q / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _axis_angle(a, theta):
    a = np.asarray(a, float)
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(theta) * K + (1 - np.cos(theta)) * K @ K


def _compose(A, B):
    (RA, pA), (RB, pB) = A, B
    return RA @ RB, RA @ pB + pA


def _trans(p):
    return np.eye(3), np.asarray(p, float).copy()


_IDENT = (np.eye(3), np.zeros(3))


# MuJoCo's compiler marks a frame that coincides with its body's frame (or inertial frame) up
# to its tolerance as "sameframe" and then places it *exactly* there, ignoring the tiny stored
# offset (e.g. body_ipos ~ 1e-9 of a mesh's computed inertia): follow it, as mj_kinematics does.
_SF_BODY, _SF_INERTIA, _SF_BODYROT, _SF_INERTIAROT = 1, 2, 3, 4


def _inertial_frame(m, i):
    """Placement of MuJoCo body ``i``'s inertial frame in its body frame, as MuJoCo uses it."""
    sf = int(m.body_sameframe[i]) if hasattr(m, "body_sameframe") else 0
    if sf == _SF_BODY:
        return _IDENT
    pos = np.array(m.body_ipos[i], float)
    if sf == _SF_BODYROT:
        return np.eye(3), pos
    return _quat_to_mat(m.body_iquat[i]), pos


def _local_frame(m, objtype, k):
    """Placement of site / geom ``k`` in its body frame, as mj_kinematics computes it."""
    body = int(getattr(m, f"{objtype}_bodyid")[k])
    pos = np.array(getattr(m, f"{objtype}_pos")[k], float)
    quat = getattr(m, f"{objtype}_quat")[k]
    sf_all = getattr(m, f"{objtype}_sameframe", None)
    sf = int(sf_all[k]) if sf_all is not None else 0
    if sf == _SF_BODY:
        return _IDENT
    if sf == _SF_INERTIA:
        return _inertial_frame(m, body)
    if sf == _SF_BODYROT:
        return np.eye(3), pos
    if sf == _SF_INERTIAROT:
        return _inertial_frame(m, body)[0], pos
    return _quat_to_mat(quat), pos


def _placed(m, objtype, ids, place, remap):
    """Sites / geoms ``ids`` placed on jaxdyn's bodies: their bodies (``-1``: the world's),
    rotations and positions in those bodies' frames (``place``: each MuJoCo body's jaxdyn body
    and the transform to it; ``remap``: jaxdyn's body order)."""
    bodies, rot, pos = [], [], []
    for k in ids:
        b, T = place[int(getattr(m, f"{objtype}_bodyid")[k])]
        R, p = _compose(T, _local_frame(m, objtype, k))
        bodies.append(int(remap(b)) if b >= 0 else -1)
        rot.append(R)
        pos.append(p)
    return bodies, rot, pos


def _mujoco_has_jdotv(mujoco) -> bool:
    """Whether this MuJoCo subtracts ``Jdot v`` from the reference acceleration of connect and
    weld rows (``mj_Jdotv`` in ``mj_referenceConstraint``): from MuJoCo 3.7.0 on; an
    unparsable version (a local build) is taken as a new one."""
    found = release(str(mujoco.__version__))
    return not found or found >= (3, 7)


def _get(m, name, n):
    """``m.<name>``, or ``n`` zeros where this MuJoCo version has no such field (it predates
    the feature, which is then absent)."""
    x = getattr(m, name, None)
    return np.zeros(n) if x is None else np.asarray(x)


# ------------------------------------------------------------------------------- compiling
def _source_label(source) -> str:
    if isinstance(source, (str, os.PathLike)) and not _is_xml_text(source):
        return os.fspath(source)
    return "<MJCF string>"


def _is_xml_text(source) -> bool:
    return isinstance(source, str) and source.lstrip().startswith("<")


def _compile(mujoco, source, assets, trusted=True):
    """``(mjModel, label, composites)``: the compiled model, a label for messages, and the
    ``<composite>`` / ``<flexcomp>`` elements of the file. An untrusted path or text is made
    self-contained first (:class:`_Files`); a trusted one goes to MuJoCo as it is."""
    if isinstance(source, mujoco.MjModel):
        return source, f"<MjModel {_model_name(source, '<MjModel>')!r}>", []
    if isinstance(source, mujoco.MjSpec):
        label = "<MjSpec>"
        try:
            return source.compile(), label, []
        except ValueError as e:
            raise ValueError(f"load_mjcf: {label}: MuJoCo's compiler: {e}") from None
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(
            "load_mjcf: source must be a path, MJCF text, a mujoco.MjSpec or a mujoco.MjModel; "
            f"got {type(source).__name__}"
        )
    label = _source_label(source)
    if not trusted:
        xml, vfs, label, composites = _self_contained(source, assets)
        try:
            return mujoco.MjModel.from_xml_string(xml, vfs), label, composites
        except ValueError as e:
            msg = str(e).strip().replace("\n", "; ")
            raise ValueError(f"load_mjcf: {label}: MuJoCo's compiler: {msg}") from None
    try:
        if _is_xml_text(source):
            m = mujoco.MjModel.from_xml_string(source, assets or {})
            return m, label, _composite_elements(source)
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"load_mjcf: no such file: {path!r}")
        if assets:
            return mujoco.MjModel.from_xml_path(path, assets), label, _composite_elements(path)
        return mujoco.MjModel.from_xml_path(path), label, _composite_elements(path)
    except ValueError as e:
        msg = str(e).strip().replace("\n", "; ")
        raise ValueError(f"load_mjcf: {label}: MuJoCo's compiler: {msg}") from None


def _composite_elements(xml, seen=None) -> list:
    """``<composite>`` / ``<flexcomp>`` elements of an MJCF file (path) or text, following
    ``<include file>``; the file compiled already, so parse problems are not reported here."""
    seen = set() if seen is None else seen
    try:
        if _is_xml_text(xml):
            root, base = ET.fromstring(xml), None
        else:
            path = os.path.abspath(xml)
            if path in seen:
                return []
            seen.add(path)
            root, base = ET.parse(path).getroot(), os.path.dirname(path)
    except (ET.ParseError, OSError, ValueError):
        return []
    found = []
    for el in root.iter():
        if el.tag in ("composite", "flexcomp"):
            prefix = el.get("prefix") or el.get("name") or ""
            found.append(f"<{el.tag} type={el.get('type')!r} prefix/name={prefix!r}>")
        elif el.tag == "include" and base is not None and (file := el.get("file")):
            found += _composite_elements(os.path.join(base, file), seen)
    return found


# ------------------------------------------------------------------------------- untrusted files
#: Limits on an MJCF file loaded without ``trusted=True``, checked on the tree with every
#: ``<include>`` expanded, before MuJoCo's compiler runs: bodies (``<replicate>``,
#: ``<composite>`` / ``<flexcomp>`` counts and attached sub-models included; MuJoCo's compile
#: time grows with their square: about a second for 2000 flat bodies, minutes for 10^4),
#: element nesting (an ``<include>`` counts as one level), elements, keyframes.
MAX_BODIES = 2000
MAX_NESTING = 400
MAX_ELEMENTS = 200_000
MAX_KEYS = 10_000
#: Largest values of ``<size>`` attributes in an untrusted file (``memory`` in bytes, with
#: MuJoCo's K / M / G ... suffixes); ``nuser_*`` (numbers per object): :data:`MAX_SIZE_USER`;
#: any other ``<size>`` attribute: :data:`MAX_SIZE_OTHER`.
MAX_SIZE = {"memory": 2**30, "nstack": 2**27, "nkey": MAX_KEYS}
MAX_SIZE_USER = 1000
MAX_SIZE_OTHER = 10**6
_MAX_SUBMODELS = 16  # nesting of <model file> sub-models
_SUFFIX = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50, "E": 2**60}


def _inside(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives
        return False


def _size_value(text: str):
    """A ``<size>`` attribute as a number (``memory="100M"``: bytes), or None if unreadable
    (MuJoCo's compiler reports it)."""
    t = text.strip()
    mult = 1
    if t and t[-1].upper() in _SUFFIX:
        t, mult = t[:-1], _SUFFIX[t[-1].upper()]
    try:
        return float(t) * mult
    except ValueError:
        return None


def _count(text, default=1) -> int:
    """The product of the integers of a ``count`` attribute (``None``: ``default``)."""
    if text is None:
        return default
    n = 1
    for part in text.split():
        try:
            n *= max(int(float(part)), 1)
        except (ValueError, OverflowError):
            return default
    return n


class _Files:
    """An MJCF file made self-contained for MuJoCo's compiler: every ``<include>`` expanded,
    every file an element names (meshes, textures, height fields, skins, sub-models) read by
    jaxdyn from inside the model's directory (or taken from ``assets=``) and handed to MuJoCo
    in its virtual file system under a new name, so that MuJoCo opens no file itself. Nothing
    outside the directory is opened: a path that leaves it (absolute, ``..``, a symbolic link,
    ``meshdir`` / ``texturedir`` / ``assetdir``) is refused before any read."""

    def __init__(self, label, root, user_assets, root_given=None):
        self.label = label
        self.root = root  # realpath of the model's directory; None for XML text
        self.root_given = root_given or root  # the directory as the path names it
        self.user = dict(user_assets or {})
        self.vfs = {}
        self.seen = set()  # files included or attached (MuJoCo refuses a second include)
        self.composites = []

    def err(self, msg):
        return ValueError(f"load_mjcf: {self.label}: {msg}")

    def _key(self, name):
        base = "".join(c if c.isalnum() or c in "._-" else "_" for c in os.path.basename(name))
        key = f"jaxdyn{len(self.vfs)}_{base}"
        return key

    def read(self, el, attr, dirs, prefix="", strip=False, what=""):
        """``(bytes, identity)`` of the file ``el`` names in ``attr``: from ``assets=``, else
        from disk inside the model's directory (``dirs``: where to look, ``prefix``: a
        ``meshdir`` / ``texturedir``)."""
        value = el.get(attr)
        where = f"<{el.tag} {attr}={value!r}>{what}"
        if value is None or not value.strip():
            raise self.err(f"<{el.tag} {attr}>: empty file name")
        if strip:
            value = os.path.basename(value)
        rel = os.path.normpath(os.path.join(prefix, value)) if prefix else value
        for key in dict.fromkeys((rel, value, rel.replace(os.sep, "/"))):
            if key in self.user:
                data = self.user[key]
                return (data.encode() if isinstance(data, str) else bytes(data)), ("asset", key)
        if self.root is None:
            raise self.err(
                f"{where}: not in assets= (an untrusted MJCF text reads no file from disk: pass "
                "the file in assets=, load the model by its path, or pass trusted=True)"
            )
        cands = []
        for d in dict.fromkeys(dirs):
            p = os.path.normpath(os.path.join(d, prefix, value))
            lexical = _inside(p, self.root_given) or _inside(p, self.root)
            if not lexical or not _inside(os.path.realpath(p), self.root):
                raise self.err(
                    f"{where}: refers to a file outside the model's directory {self.root!r}; "
                    "it was not read (an untrusted model reads only files inside its own "
                    "directory: pass trusted=True to load a file you trust)"
                )
            cands.append(os.path.realpath(p))
        for p in cands:
            if os.path.isfile(p):
                try:
                    with open(p, "rb") as f:
                        return f.read(), ("file", p)
                except OSError as e:
                    raise self.err(f"{where}: cannot read the file: {e.strerror}") from None
        if any(os.path.exists(p) for p in cands):
            raise self.err(f"{where}: not a regular file")
        raise self.err(f"{where}: no such file in the model's directory (or assets=)")

    def parse(self, data, where):
        from ..model.urdf import read_xml

        kind = f"load_mjcf: {self.label}" + (f": {where}" if where else "")
        return read_xml(bytes(data), kind=kind)

    def model(self, root, model_dir, depth=0):
        """Make ``root`` (a parsed MJCF or URDF file whose includes resolve from ``model_dir``)
        self-contained, in place; returns its number of bodies. Refuses what the limits
        above refuse."""
        if depth > _MAX_SUBMODELS:
            raise self.err(f"sub-models (<model file>) nested deeper than {_MAX_SUBMODELS}")
        self._includes(root, model_dir)
        # compiler directories: MuJoCo applies them to the whole model wherever they appear
        dirs = {}
        strip = root.tag == "robot"  # MuJoCo's default strippath: true for URDF only
        for c in root.iter("compiler"):
            for a in ("meshdir", "texturedir", "assetdir"):
                if c.get(a) is not None:
                    dirs[a] = c.attrib.pop(a)
            if c.get("strippath") is not None:
                strip = c.get("strippath").strip().lower() == "true"
        meshdir = dirs.get("meshdir", dirs.get("assetdir", ""))
        texturedir = dirs.get("texturedir", dirs.get("assetdir", ""))
        submodels = {}
        for el in root.iter():
            for attr in [a for a in el.attrib if a.startswith("file")]:
                if attr == "filename" and root.tag != "robot":
                    continue
                if el.tag == "model" and attr == "file":
                    submodels[el.get("name")] = self._submodel(el, model_dir, depth)
                    continue
                prefix, pname = (
                    (texturedir, "texturedir") if el.tag == "texture" else (meshdir, "meshdir")
                )
                what = f" ({pname}={prefix!r})" if prefix else ""
                data, _ = self.read(el, attr, [model_dir], prefix, strip, what)
                if attr == "file" and el.get("name") is None and el.tag != "flexcomp":
                    # MuJoCo names an unnamed asset after its file: keep that name
                    el.set("name", os.path.splitext(os.path.basename(el.get(attr)))[0])
                key = self._key(el.get(attr))
                self.vfs[key] = data
                el.set(attr, key)
        return self._check_sizes(root, submodels)

    def _includes(self, root, model_dir):
        """Expand every ``<include>`` in place (iteratively: any depth of include chains)."""
        level, here = {root: 0}, {root: model_dir}
        n = 0
        stack = [root]
        while stack:
            el = stack.pop()
            i = 0
            while i < len(el):
                c = el[i]
                lc = level.setdefault(c, level[el] + 1)
                hc = here.setdefault(c, here[el])
                n += 1
                if lc > MAX_NESTING:
                    raise self.err(
                        f"<{c.tag}>: elements nested deeper than {MAX_NESTING} levels (an "
                        "<include> counts as one; trusted=True lifts the limit)"
                    )
                if n > MAX_ELEMENTS:
                    raise self.err(
                        f"more than {MAX_ELEMENTS} elements (includes expanded; trusted=True "
                        "lifts the limit)"
                    )
                if c.tag != "include":
                    stack.append(c)
                    i += 1
                    continue
                data, ident = self.read(c, "file", [model_dir, hc] if hc else [model_dir])
                where = f"<include file={c.get('file')!r}>"
                if ident in self.seen:
                    raise self.err(f"{where}: the file is included more than once")
                self.seen.add(ident)
                sub = self.parse(data, where)
                if sub.tag != "mujoco":
                    raise self.err(
                        f"{where}: the included file's root element is <{sub.tag}>, "
                        "expected <mujoco>"
                    )
                sub_dir = os.path.dirname(ident[1]) if ident[0] == "file" else hc
                kids = list(sub)
                for k in kids:  # the included <mujoco> is one more level
                    level[k], here[k] = lc + 1, sub_dir
                el[i : i + 1] = kids

    def _submodel(self, el, model_dir, depth):
        """A ``<model file>`` made self-contained and put in the virtual file system."""
        where = f"<model file={el.get('file')!r}>"
        data, ident = self.read(el, "file", [model_dir])
        if ident in self.seen:
            raise self.err(f"{where}: the file is included more than once")
        self.seen.add(ident)
        sub = self.parse(data, where)
        sub_dir = os.path.dirname(ident[1]) if ident[0] == "file" else model_dir
        nbody = self.model(sub, sub_dir, depth + 1)
        key = self._key(el.get("file"))
        self.vfs[key] = ET.tostring(sub, encoding="unicode").encode()
        el.set("file", key)
        return nbody

    def _check_sizes(self, root, submodels) -> int:
        bodies = keys = 0
        stack = [(root, 1)]
        while stack:
            el, mult = stack.pop()
            for c in el:
                m = mult
                if c.tag == "replicate":
                    m = min(mult * _count(c.get("count")), 10**18)
                elif c.tag == "body":
                    bodies += mult
                elif c.tag in ("composite", "flexcomp"):
                    bodies += mult * _count(c.get("count"), 0)
                    prefix = c.get("prefix") or c.get("name") or ""
                    self.composites.append(
                        f"<{c.tag} type={c.get('type')!r} prefix/name={prefix!r}>"
                    )
                elif c.tag == "key":
                    keys += mult
                elif c.tag == "attach":
                    bodies += mult * submodels.get(c.get("model"), 0)
                stack.append((c, m))
        if bodies > MAX_BODIES:
            raise self.err(
                f"{bodies} bodies (replicates, composites and attached models counted): more "
                f"than {MAX_BODIES}, the limit for an untrusted file (MuJoCo's compile time "
                "grows with the square of the number of bodies; trusted=True lifts the limit)"
            )
        for el in root.iter("size"):
            for attr, text in el.attrib.items():
                other = MAX_SIZE_USER if attr.startswith("nuser_") else MAX_SIZE_OTHER
                lim = MAX_SIZE.get(attr, other)
                v = _size_value(text)
                if v is not None and v > lim:
                    raise self.err(
                        f"<size {attr}={text!r}>: more than {lim}, the limit for an untrusted "
                        "file (trusted=True lifts it)"
                    )
                if attr == "nkey" and v is not None:
                    keys = max(keys, v)
        if keys > MAX_KEYS:
            raise self.err(
                f"{int(keys)} keyframes: more than {MAX_KEYS}, the limit for an untrusted file "
                "(trusted=True lifts it)"
            )
        return bodies


def _self_contained(source, assets):
    """``(xml text, virtual files, label, composite elements)`` of an untrusted MJCF path or
    text (:class:`_Files`)."""
    label = _source_label(source)
    if _is_xml_text(source):
        data, model_dir, root_dir = source.encode(), None, None
    else:
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"load_mjcf: no such file: {path!r}")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ValueError(f"load_mjcf: {label}: cannot read the file: {e.strerror}") from None
        model_dir = os.path.dirname(os.path.abspath(path))
        root_dir = os.path.realpath(model_dir)
    files = _Files(label, root_dir, assets, model_dir)
    root = files.parse(data, "")
    files.model(root, model_dir)
    xml = ET.tostring(root, encoding="unicode")
    vfs = dict(files.user)
    vfs.update(files.vfs)
    return xml, vfs, label, files.composites


# ------------------------------------------------------------------------------- loading
def load_mjcf(
    # (MuJoCo's compiled bindings ship no type stubs: its classes are unknown to type checkers)
    source: str | os.PathLike | mujoco.MjSpec | mujoco.MjModel,  # pyright: ignore[reportAttributeAccessIssue]
    *,
    ignore: str | Iterable[str] = (),
    assets: dict | None = None,
    trusted: bool = False,
) -> MJCFModel:
    """Load an MJCF model (a MuJoCo XML file; also a URDF MuJoCo can compile) through
    MuJoCo's compiler.

    **Arguments:**

    - ``source``: a path, the XML text, a ``mujoco.MjSpec`` or a compiled ``mujoco.MjModel``.
    - ``ignore``: keys of :data:`FEATURES` to drop instead of refusing (see the module
      docstring); ``"all"`` drops every ignorable feature.
    - ``assets``: ``{filename: bytes}`` for meshes and includes of XML text (MuJoCo's VFS).
    - ``trusted``: ``False`` (default) treats a path or text as untrusted: jaxdyn expands its
      ``<include>`` elements and reads the files it names (meshes, textures, height fields,
      skins, ``<model>`` sub-models) itself, only from inside the model file's directory
      (XML text: only from ``assets``), and MuJoCo's compiler gets them in memory, so no file
      outside is opened; a path leaving the directory (absolute, ``..``, a symbolic link, a
      ``meshdir`` / ``texturedir`` / ``assetdir`` outside) is refused without being read, as
      are sizes beyond :data:`MAX_BODIES`, :data:`MAX_NESTING`, :data:`MAX_ELEMENTS`,
      :data:`MAX_KEYS` and :data:`MAX_SIZE` and DOCTYPE / entity declarations. ``True``
      hands the file to MuJoCo as it is (any path it names is opened; no size limits). A
      ``MjSpec`` or ``MjModel`` was read by the caller already. Value checks apply either way:
      see ``docs/mjcf.md`` ("Untrusted files").

    **Returns:** an :class:`MJCFModel` (``.model`` is the :class:`jaxdyn.Model`). Its
    parameters are stored in the default float dtype, as :func:`jaxdyn.load_urdf`'s: enable
    ``jax_enable_x64`` first for float64.

    **Raises:** ``ImportError`` without the ``mujoco`` package; ``ValueError`` with MuJoCo's
    compiler message (element, line) and the file for a malformed model; ``ValueError`` naming
    every unsupported element and feature, and the ``ignore=`` that would load the rest.
    """
    mujoco = _import_mujoco()
    keys = _check_ignore(ignore)
    if not isinstance(trusted, bool):
        raise TypeError(f"load_mjcf: trusted must be True or False, got {trusted!r}")
    if assets is not None and not isinstance(assets, dict):
        raise TypeError(
            f"load_mjcf: assets must be a dict {{filename: bytes}}, got {type(assets).__name__}"
        )
    m, label, composites = _compile(mujoco, source, assets, trusted)
    issues = _Issues(label, keys)
    for el in composites:
        issues.add("composite", f"{el}: composite bodies")
    return _build(mujoco, m, label, issues)


def _check_ignore(ignore) -> frozenset:
    if isinstance(ignore, str):
        ignore = tuple(FEATURES) if ignore == "all" else (ignore,)
    try:
        keys = frozenset(ignore)
    except TypeError:
        keys = None
    if keys is None or not all(isinstance(k, str) for k in keys):
        raise TypeError(
            "load_mjcf: ignore must be a key of jaxdyn.io.mjcf.FEATURES, 'all', or a "
            f"tuple of keys; got {ignore!r}"
        )
    bad = sorted(keys - set(FEATURES))
    if bad:
        raise ValueError(
            f"load_mjcf: unknown ignore keys {bad}; known: {sorted(FEATURES)} (or 'all')"
        )
    return keys


class _Issues:
    """Unsupported features found while reading a model: raised together at the end unless
    their keys are ignored."""

    def __init__(self, label, ignore):
        self.label, self.ignore = label, ignore
        self.errors, self.dropped = [], []

    def add(self, key, msg):
        (self.dropped if key in self.ignore else self.errors).append((key, msg))

    def prefixed(self, msg):
        return f"load_mjcf: {self.label}: {msg}"

    def hard(self, msg):
        raise ValueError(self.prefixed(msg))

    def raise_if_any(self):
        if not self.errors:
            return
        keys = sorted({k for k, _ in self.errors})
        lines = [f"  [{k}] {msg}" for k, msg in self.errors[:40]]
        if len(self.errors) > 40:
            lines.append(f"  ... ({len(self.errors)} in all)")
        raise ValueError(
            f"load_mjcf: {self.label}: features jaxdyn does not support:\n"
            + "\n".join(lines)
            + f"\nThe rigid-body model (mass matrix, bias forces, kinematics, Jacobians) does not"
            f" depend on them: pass ignore={tuple(keys)!r} to load it without them."
        )


def _disabled(mujoco, m, flag: str) -> bool:
    """Whether ``m.opt.disableflags`` holds MuJoCo's ``mjtDisableBit`` ``flag``."""
    bit = getattr(mujoco.mjtDisableBit, flag, None)
    if bit is None:  # MuJoCo < 3.3: one "passive" flag for springs and dampers
        bit = mujoco.mjtDisableBit.mjDSBL_PASSIVE
    return bool(int(m.opt.disableflags) & int(bit))


def _build(mujoco, m, label, issues: _Issues) -> MJCFModel:
    body_names = mujoco_names(m, "body")
    jnt_names = mujoco_names(m, "jnt")
    site_names = mujoco_names(m, "site")
    geom_names = mujoco_names(m, "geom")

    def dis(flag):
        return _disabled(mujoco, m, flag)

    def body_el(i):
        return f'<body name="{body_names[i]}">'

    def jnt_el(j):
        return f'<joint name="{jnt_names[j]}" type="{_JNT_NAME[int(m.jnt_type[j])]}">'

    dtype = jax.dtypes.canonicalize_dtype(np.float64)  # float32 unless jax_enable_x64
    _check_values(m, dtype, issues, body_names, jnt_el)

    # ------------------------------------------------------------ tree: one body per joint
    place = {0: (-1, _IDENT)}  # MuJoCo body -> (jaxdyn dfs body or -1, MuJoCo frame in it)
    bodies = []  # dicts: name, joint, mj_joint, kind, parent, X, axis
    joint_body = {}  # MuJoCo joint -> jaxdyn dfs body
    for i in range(1, m.nbody):
        pb, T = place[int(m.body_parentid[i])]
        Xb = _compose(T, (_quat_to_mat(m.body_quat[i]), np.array(m.body_pos[i], float)))
        ja, jn = int(m.body_jntadr[i]), int(m.body_jntnum[i])
        for k, j in enumerate(range(ja, ja + jn)):
            typ = int(m.jnt_type[j])
            anchor = np.array(m.jnt_pos[j], float)
            axis = np.array(m.jnt_axis[j], float)
            ref = float(m.qpos0[m.jnt_qposadr[j]])
            ax6 = None
            if typ == _FREE:
                if pb != -1 or jn != 1:  # pragma: no cover - MuJoCo's compiler refuses these
                    issues.hard(
                        f"{jnt_el(j)}: a free joint must be the only joint of a top-level body"
                    )
                X, after = _IDENT, _IDENT
            elif typ == _BALL:
                X, after = _compose(Xb, _trans(anchor)), _trans(-anchor)
            elif typ == _HINGE:
                X = _compose(_compose(Xb, _trans(anchor)), (_axis_angle(axis, -ref), np.zeros(3)))
                after = _trans(-anchor)
                ax6 = np.concatenate([axis, np.zeros(3)])
            else:  # slide: the anchor does not move anything
                X, after = _compose(Xb, _trans(-ref * axis)), _IDENT
                ax6 = np.concatenate([np.zeros(3), axis])
            name = body_names[i] if k == jn - 1 else f"{body_names[i]}/{jnt_names[j]}"
            bodies.append(
                dict(
                    name=name,
                    joint=jnt_names[j],
                    mj_joint=j,
                    kind=_KIND[typ],
                    parent=pb,
                    X=X,
                    axis=ax6,
                    mj_body=i,
                )
            )
            pb, Xb = len(bodies) - 1, after
            joint_body[j] = pb
        place[i] = (pb, Xb)

    # ------------------------------------------------------------ depth sort (as build.py)
    tree = sort_tree(bodies)
    order, new_index, parent, kind = tree.order, tree.new_index, tree.parent, tree.kind
    remap = tree.remap
    nb = len(bodies)
    dof_axis, dof_mj = [], []  # per jaxdyn velocity coordinate: axis, MuJoCo dof
    for o in order:
        b = bodies[o]
        adr = int(m.jnt_dofadr[b["mj_joint"]])
        if b["kind"] == joints.ONE_DOF:
            dof_axis.append(b["axis"])
            dof_mj.append(adr)
        elif b["kind"] == joints.SPHERICAL:
            dof_axis.extend(np.eye(6)[:3])
            dof_mj += [adr, adr + 1, adr + 2]
        else:  # jaxdyn [ω; v] against MuJoCo [v; ω]
            dof_axis.extend(np.eye(6))
            dof_mj += [adr + 3, adr + 4, adr + 5, adr, adr + 1, adr + 2]
    dof_mj = np.array(dof_mj, np.int64)

    # ------------------------------------------------------------ inertias
    m_acc, h_acc, I_acc = np.zeros(nb), np.zeros((nb, 3)), np.zeros((nb, 3, 3))
    for i in range(1, m.nbody):
        b, (R, p) = place[i]
        mass = float(m.body_mass[i])
        if b < 0 or mass == 0.0 and not np.any(m.body_inertia[i]):
            continue
        bi = new_index[b]
        Rin, pin_ = _inertial_frame(m, i)
        Ri = R @ Rin
        c = R @ pin_ + p
        Ic = Ri @ np.diag(np.array(m.body_inertia[i], float)) @ Ri.T
        C = skew(c)
        m_acc[bi] += mass
        h_acc[bi] += mass * c
        I_acc[bi] += Ic - mass * C @ C
    com, inertia = inertias_about_com(m_acc, h_acc, I_acc)

    # ------------------------------------------------------------ frames
    frame_names, frame_parent, frame_R, frame_p = [], [], [], []

    def add_frame(name, b, X):
        frame_names.append(name)
        frame_parent.append(remap(b))
        frame_R.append(X[0])
        frame_p.append(X[1])

    for i in range(m.nbody):
        add_frame(body_names[i], *place[i])
    taken = set(frame_names)
    site_frames = {}
    for s in range(m.nsite):
        b, T = place[int(m.site_bodyid[s])]
        name = site_names[s]
        if name in taken:
            name = f"site:{name}"
            while name in taken:
                name += "_"
        taken.add(name)
        site_frames[site_names[s]] = name
        add_frame(name, b, _compose(T, _local_frame(m, "site", s)))
    for j, b in joint_body.items():
        if jnt_names[j] not in taken:
            taken.add(jnt_names[j])
            add_frame(jnt_names[j], b, _IDENT)

    # ------------------------------------------------------------ features
    _check_features(mujoco, m, issues, body_el, jnt_el, dis, place)

    # ------------------------------------------------------------ actuators
    arm = np.array(m.dof_armature, float).copy()
    damp = np.array(m.dof_damping, float).copy() if not dis("mjDSBL_DAMPER") else np.zeros(m.nv)
    actuators, effort, act_rows = _actuators(mujoco, m, issues, jnt_names, arm, damp, dof_mj, dis)

    # ------------------------------------------------------------ joint properties
    nv = len(dof_mj)
    lo, hi = [], []
    for o in order:
        j = bodies[o]["mj_joint"]
        typ = int(m.jnt_type[j])
        if typ in (_HINGE, _SLIDE) and m.jnt_limited[j] and not dis("mjDSBL_LIMIT"):
            lo.append(float(m.jnt_range[j, 0]))
            hi.append(float(m.jnt_range[j, 1]))
        else:
            n = joints.NQ[_KIND[typ]]
            lo += [-np.inf] * n
            hi += [np.inf] * n
    fric = np.array(m.dof_frictionloss, float)
    if dis("mjDSBL_FRICTIONLOSS"):
        fric = np.zeros(m.nv)
    for j in range(m.njnt):  # free joints: armature and damping must be isotropic per block
        if int(m.jnt_type[j]) != _FREE:
            continue
        a = int(m.jnt_dofadr[j])
        for what, x in (("armature", arm), ("damping", damp)):
            if np.ptp(x[a : a + 3]) > 0:  # pragma: no cover - one value per joint in MJCF
                issues.hard(f"{jnt_el(j)}: {what} differs between the translations (world axes)")
        if np.any(fric[a : a + 3]):
            issues.add(
                "frictionloss",
                f"{jnt_el(j)}: frictionloss on the translations acts along world axes "
                "(jaxdyn.sim: per coordinate, in base axes)",
            )
            fric[a : a + 3] = 0.0
    props = dict(
        q_lower=lo,
        q_upper=hi,
        effort_limit=effort[dof_mj] if nv else np.zeros(0),
        velocity_limit=np.full(nv, np.inf),
        damping=damp[dof_mj],
        friction=fric[dof_mj],
    )

    # ------------------------------------------------------------ the model
    gravity = np.zeros(3) if dis("mjDSBL_GRAVITY") else np.array(m.opt.gravity, float)
    single_free_root = nb > 0 and kind[0] == joints.FREE and int(np.sum(parent < 0)) == 1
    topo = make_topology(
        name=_model_name(m, label),
        parent=parent,
        kind=kind,
        joint_names=[bodies[o]["joint"] for o in order],
        body_names=[bodies[o]["name"] for o in order],
        frame_names=frame_names,
        frame_parent=frame_parent,
        floating_base=bool(single_free_root),
        root_name=body_names[0],
    )
    params = model_params(tree, dof_axis, m_acc, com, inertia, frame_R, frame_p, gravity, **props)
    armature = arm[dof_mj]
    if np.any(armature):
        params["armature"] = armature

    def element(k, i):  # the MJCF element behind entry i of the parameter k
        if k in ("Xtree_R", "Xtree_p", "mass", "com", "inertia"):
            return f'<body name="{bodies[order[i]]["name"]}">'
        if k in ("q_lower", "q_upper"):
            b = int(np.searchsorted(topo.q_start, i, side="right")) - 1
            return jnt_el(bodies[order[b]]["mj_joint"])
        if k in ("frame_R", "frame_p"):
            return f"frame {frame_names[i]!r}"
        if k == "gravity":
            return "<option gravity>"
        return jnt_el(int(m.dof_jntid[dof_mj[i]]))  # per velocity coordinate

    # in the working dtype, with the element named where a value MuJoCo compiled (in
    # float64) does not fit or is beyond the magnitude bound, as load_urdf does
    leaves = cast_params(
        params, dtype, lambda k, i: issues.prefixed(element(k, i)), unbounded=LIMITS, bounded=True
    )
    model = Model(**leaves, topo=topo, x32_load=dtype != np.float64)

    springs, tendons, gain_bias = _scene(m, act_rows, dof_mj, dis, dtype)
    spatial_tendons = _spatial_tendons(m, place, remap, dis, dtype)
    fluid = _fluid(m, place, remap, dis, dtype)
    integrator, sim_issues = _integrator(mujoco, m, damp, dis)
    if int(m.opt.noslip_iterations) > 0:  # a post-solve on the friction rows: contact only
        sim_issues.append(
            (
                "noslip",
                f"<option noslip_iterations={int(m.opt.noslip_iterations)}>: MuJoCo's no-slip "
                "post-solve of the friction forces has no jaxdyn.sim equivalent; ignored, "
                "contacts may slip where MuJoCo's would not",
            )
        )

    # ------------------------------------------------------------ contacts, constraints
    contacts, terrain, geoms = (), None, None
    info = {}
    if not dis("mjDSBL_CONTACT") and not dis("mjDSBL_CONSTRAINT"):  # no contact force either way
        contacts, terrain, geoms = _contacts(
            m,
            issues,
            place,
            body_names,
            geom_names,
            remap,
            dis("mjDSBL_FILTERPARENT"),
            sim_issues,
            info,
        )
    constraints, active, equalities = (), (), None
    if not dis("mjDSBL_EQUALITY") and not dis("mjDSBL_CONSTRAINT"):
        constraints, active = _equalities(mujoco, m, issues, place, body_names, site_frames)
        joint_q = {}
        for j, b in joint_body.items():
            if int(m.jnt_type[j]) in (_HINGE, _SLIDE):
                joint_q[j] = int(topo.q_start[int(remap(b))])
        for e in range(m.neq):
            if int(m.eq_type[e]) == _EQ_JOINT:
                for o in (int(m.eq_obj1id[e]), int(m.eq_obj2id[e])):
                    if o >= 0 and o not in joint_q:  # pragma: no cover - MuJoCo refuses these
                        issues.hard(f"{jnt_el(o)}: a joint equality on a ball or free joint")
        issues.raise_if_any()
        equalities = _sim_equalities(mujoco, m, place, remap, joint_q, dis, dtype)
    issues.raise_if_any()

    from ..interop.mujoco import Converter

    conv = Converter(model, m)
    q0 = conv.q_from_mujoco(np.array(m.qpos0, float))
    pairs = set()
    if geoms is not None:
        pairs = {frozenset((geoms.names[a], geoms.names[b])) for a, b in geoms.pairs}
    if contacts and info.get("ground", -1) >= 0:  # the primitives on the ground plane
        pairs |= {frozenset((geom_names[info["ground"]], p.name)) for p in contacts}
    if pairs:
        _warn_penetrating(mujoco, m, label, pairs, geom_names)
    keyframes, keyframe_act = {}, {}
    for k, name in enumerate(mujoco_names(m, "key")):
        qk = conv.q_from_mujoco(np.array(m.key_qpos[k], float))
        keyframes[name] = (qk, conv.v_from_mujoco(qk, np.array(m.key_qvel[k], float)))
        keyframe_act[name] = np.array(m.key_act[k], float).reshape(m.na)
    return MJCFModel(
        model=model,
        contacts=contacts,
        terrain=terrain,
        geoms=geoms,
        constraints=constraints,
        constraint_active=active,
        actuators=actuators,
        q0=q0,
        keyframes=keyframes,
        keyframe_act=keyframe_act,
        timestep=float(m.opt.timestep),
        ignored=tuple(f"[{k}] {msg}" for k, msg in issues.dropped),
        site_frames=site_frames,
        mj_model=m,
        springs=springs,
        tendons=tendons,
        gain_bias=gain_bias,
        integrator=integrator,
        sim_issues=tuple(sim_issues),
        equalities=equalities,
        spatial_tendons=spatial_tendons,
        fluid=fluid,
        ground_geom=info.get("ground", -1),
        pair_ids=info.get("pairs", ()) if geoms is not None else (),
    )


def _integrator(mujoco, m, damp, dis):
    """jaxdyn's integrator for MuJoCo's ``opt.integrator``, and the sim-only issues."""
    I = mujoco.mjtIntegrator
    itg = int(m.opt.integrator)
    if itg == int(I.mjINT_EULER):
        if not dis("mjDSBL_EULERDAMP") and np.any(damp > 0):
            return "implicit_damping", []
        return "euler", []
    if itg == int(I.mjINT_RK4):
        return "rk4", []
    if itg == int(I.mjINT_IMPLICITFAST):
        return "implicit", []
    name = {int(I.mjINT_IMPLICIT): "implicit"}.get(itg, str(itg))
    return "implicit", [
        (
            "integrator",
            f'<option integrator="{name}">: MuJoCo\'s integrator {name!r} (also implicit in the '
            "Coriolis / centrifugal forces) has no jaxdyn.sim equivalent; ignored, jaxdyn's "
            "'implicit' (MuJoCo's implicitfast) steps the model",
        )
    ]


#: the compiled values jaxdyn reads, checked before use: (object, field, attribute, bounded);
#: ``bounded`` False: a limit (infinite allowed, no magnitude bound; NaN refused)
_CHECKED = (
    ("body", "body_pos", "pos", True),
    ("body", "body_quat", "quat", True),
    ("body", "body_ipos", "<inertial pos>", True),
    ("body", "body_iquat", "<inertial quat>", True),
    ("body", "body_mass", "mass", True),
    ("body", "body_inertia", "inertia", True),
    ("jnt", "jnt_pos", "pos", True),
    ("jnt", "jnt_axis", "axis", True),
    ("jnt", "jnt_range", "range", False),
    ("jnt", "jnt_actfrcrange", "actuatorfrcrange", False),
    ("dof", "dof_armature", "armature", True),
    ("dof", "dof_damping", "damping", True),
    ("dof", "dof_frictionloss", "frictionloss", True),
    ("qpos", "qpos0", "ref (qpos0)", True),
    ("site", "site_pos", "pos", True),
    ("site", "site_quat", "quat", True),
    ("actuator", "actuator_gear", "gear", True),
    ("actuator", "actuator_gainprm", "gain (gainprm)", True),
    ("actuator", "actuator_biasprm", "bias (biasprm)", True),
    ("actuator", "actuator_ctrlrange", "ctrlrange", False),
    ("actuator", "actuator_forcerange", "forcerange", False),
    ("actuator", "actuator_armature", "armature", True),
    ("actuator", "actuator_damping", "damping", True),
    ("key", "key_qpos", "qpos", True),
    ("key", "key_qvel", "qvel", True),
    ("eq", "eq_data", "data (anchor / relpose)", True),
)
#: unit vectors and quaternions of the compiled model: (object, field, attribute)
_UNIT = (
    ("jnt", "jnt_axis", "axis"),
    ("body", "body_quat", "quat"),
    ("body", "body_iquat", "<inertial quat>"),
    ("site", "site_quat", "quat"),
)
_COUNT = {
    "body": "nbody",
    "jnt": "njnt",
    "dof": "nv",
    "qpos": "nq",
    "site": "nsite",
    "actuator": "nu",
    "key": "nkey",
    "eq": "neq",
}


def _check_values(m, dtype, issues, body_names, jnt_el):
    """Refuse, naming the element, a NaN among the compiled values jaxdyn reads, an infinite or
    beyond-:func:`~jaxdyn.model.build.magnitude_bound` one outside the limits, and a timestep
    that is not a positive finite number (MuJoCo's compiler lets them through; the dynamics
    would be NaN)."""
    bound = magnitude_bound(dtype)
    ts = float(m.opt.timestep)
    if not (np.isfinite(ts) and 0 < ts <= bound):
        issues.hard(f"<option timestep={ts!r}>: the timestep must be a positive finite number")
    g = np.asarray(m.opt.gravity, float)
    if not np.all(np.isfinite(g)) or np.max(np.abs(g)) > bound:
        v = float(np.max(np.abs(g)))
        what = "gravity is not finite" if not np.isfinite(v) else too_big("gravity", v, dtype)
        issues.hard(f"<option gravity>: {what}")
    names = {}

    def element(obj, i):
        if obj == "body":
            return f'<body name="{body_names[i]}">'
        if obj == "jnt":
            return jnt_el(i)
        if obj == "dof":
            return jnt_el(int(m.dof_jntid[i]))
        if obj == "qpos":
            j = int(np.searchsorted(np.asarray(m.jnt_qposadr), i, side="right")) - 1
            return jnt_el(j)
        if obj not in names:
            names[obj] = mujoco_names(m, obj)
        if obj == "eq":
            typ = int(m.eq_type[i])
            tag = f"equality><{_EQ_NAMES[typ] if typ < len(_EQ_NAMES) else typ}"
        else:
            tag = obj
        return f'<{tag} name="{names[obj][i]}">'

    # MuJoCo normalises axes and quaternions, silently to zero where the squares overflow
    # (axis="1e200 1 1"): a joint that does not move, NaN dynamics
    for obj, field, attr in _UNIT:
        n = getattr(m, _COUNT[obj])
        if n == 0:
            continue
        x = np.asarray(getattr(m, field), float).reshape(n, -1)
        with np.errstate(all="ignore"):
            norm = np.sqrt(np.sum(x * x, axis=1))
        bad = np.nonzero(~(np.abs(norm - 1.0) <= 1e-6))[0]
        if obj == "jnt":
            bad = [j for j in bad if int(m.jnt_type[j]) in (_HINGE, _SLIDE)]
        if len(bad):
            i = int(bad[0])
            issues.hard(
                f"{element(obj, i)}: {attr} {x[i].tolist()} after MuJoCo's normalisation (its "
                "components overflow or underflow when squared): write it with moderate numbers"
            )
    for obj, field, attr, bounded in _CHECKED:
        n = getattr(m, _COUNT[obj])
        x = getattr(m, field, None)
        if x is None or n == 0:
            continue
        x = np.asarray(x, float).reshape(n, -1)
        if field == "eq_data":  # connect: anchor1, anchor2; weld: + relpose (10 numbers)
            x = x[:, :10]
        bad = np.isnan(x) if not bounded else ~np.isfinite(x)
        big = np.zeros_like(bad) if not bounded else np.isfinite(x) & (np.abs(x) > bound)
        for kind, mask in (("nan", bad), ("big", big)):
            rows = np.nonzero(np.any(mask, axis=1))[0]
            if len(rows):
                i = int(rows[0])
                v = float(x[i][mask[i]][0])
                msg = (
                    f"{attr} {v} is not a finite number"
                    if kind == "nan"
                    else too_big(attr, abs(v), dtype)
                )
                issues.hard(f"{element(obj, i)}: {msg}")


def _model_name(m, label):
    raw = bytes(m.names)
    name = decode_name(raw[: raw.find(b"\0")], "model", 0) if raw else ""
    if name:
        return name
    return os.path.splitext(os.path.basename(label))[0] if not label.startswith("<") else "mjcf"


def _check_features(mujoco, m, issues, body_el, jnt_el, dis, place):
    """Record every unsupported feature of the compiled model."""
    if m.ntendon:
        arm = np.nonzero(np.asarray(_get(m, "tendon_armature", m.ntendon)))[0]
        if len(arm):
            issues.hard(
                f'<tendon name="{mujoco_names(m, "tendon")[int(arm[0])]}">: tendon armature adds '
                "J^T a J to the mass matrix, which jaxdyn's tree algorithms cannot represent"
            )
        tnames = mujoco_names(m, "tendon")
        for t in range(m.ntendon):
            el = f'<tendon name="{tnames[t]}">'
            if not _fixed_tendon(m, t) and not _site_tendon(m, t):
                issues.add(
                    "tendon",
                    f"{el}: a spatial tendon wrapping around a geom with a sidesite (MuJoCo 4's "
                    "side-site rule, the shortest path homotopic to the polyline through the side "
                    "site, and its inside wrap): jaxdyn.sim.SpatialTendons wraps spheres and "
                    "cylinders without a side site only; ignored, its passive, limit and actuator "
                    "forces are dropped",
                )
                continue
            probs = []
            if m.tendon_frictionloss[t] != 0 and not dis("mjDSBL_FRICTIONLOSS"):
                probs.append("frictionloss")
            for name in ("tendon_stiffnesspoly", "tendon_dampingpoly"):
                if np.any(_get(m, name, m.ntendon)[t]):
                    probs.append(name.split("_")[1])
            if probs:
                issues.add(
                    "tendon",
                    f"{el}: {', '.join(probs)} (jaxdyn.sim: linear tendon springs and damping "
                    "only); ignored, these forces are dropped",
                )
    if m.nflex:
        issues.add("flex", f"<flex>: {m.nflex} flex(es) (deformable bodies)")
    if m.nplugin:
        issues.add("plugin", f"<plugin>: {m.nplugin} engine plugin instance(s)")
    ellipsoid = _ellipsoid_fluid_bodies(m, dis)
    if ellipsoid:
        els = ", ".join(body_el(i) for i in ellipsoid[:6])
        more = f" ... ({len(ellipsoid)} in all)" if len(ellipsoid) > 6 else ""
        issues.add(
            "fluid",
            f'{els}{more}: a geom with fluidshape="ellipsoid" (MuJoCo\'s ellipsoid-based fluid '
            "model; jaxdyn.sim.Fluid is the inertia-based model); ignored, these bodies' fluid "
            "forces are dropped",
        )
    grav = np.nonzero(np.asarray(m.body_gravcomp))[0]
    if len(grav):
        els = ", ".join(body_el(int(i)) for i in grav[:6])
        issues.add("gravcomp", f"{els}: gravcomp (gravity compensation forces)")
    mocap = [i for i in range(m.nbody) if m.body_mocapid[i] >= 0]
    if mocap:
        els = ", ".join(body_el(i) for i in mocap[:6])
        issues.add("mocap", f"{els}: mocap bodies (jaxdyn keeps them at their model pose)")
    passive = []
    if not dis("mjDSBL_SPRING"):
        for j in range(m.njnt):
            if np.any(_get(m, "jnt_stiffnesspoly", m.njnt)[j]):
                passive.append(f"{jnt_el(j)} polynomial stiffness")
            elif m.jnt_stiffness[j] != 0 and int(m.jnt_type[j]) in (_FREE, _BALL):
                passive.append(f"{jnt_el(j)} stiffness={m.jnt_stiffness[j]:g}")
        if getattr(m, "nplastic", 0):
            passive.append(f"plasticity ({m.nplastic} state variables)")
    if not dis("mjDSBL_DAMPER"):
        poly = np.asarray(_get(m, "dof_dampingpoly", m.nv))
        poly = poly[:, None] if poly.ndim == 1 else poly  # (nv,) zeros without the field
        for d in np.nonzero(np.any(poly != 0, axis=-1))[0]:
            passive.append(f"{jnt_el(int(m.dof_jntid[d]))} polynomial damping")
    if passive:
        more = f" ... ({len(passive)} in all)" if len(passive) > 4 else ""
        issues.add(
            "passive",
            "; ".join(passive[:4]) + more + ": springs of ball / free joints or nonlinear "
            "passive forces (jaxdyn.sim: linear springs on hinge / slide joints, linear damping, "
            "friction); ignored, these forces are dropped",
        )
    if not dis("mjDSBL_LIMIT"):
        balls = [j for j in range(m.njnt) if m.jnt_type[j] == _BALL and m.jnt_limited[j]]
        if balls:
            els = ", ".join(jnt_el(j) for j in balls[:6])
            issues.add("ball_limit", f"{els}: range (cone) limits of ball joints")


def _fluid_on(m, dis) -> bool:
    """Whether MuJoCo applies fluid forces (``mj_fluid``: density or viscosity, passive forces
    not all disabled)."""
    if dis("mjDSBL_SPRING") and dis("mjDSBL_DAMPER"):
        return False
    return bool(m.opt.density != 0 or m.opt.viscosity != 0)


def _fluid_bodies(m) -> list:
    """The MuJoCo bodies with mass that the fluid acts on (``mj_fluid``)."""
    from ..sim.fluid import MINVAL

    return [i for i in range(1, m.nbody) if float(m.body_mass[i]) >= MINVAL]


def _ellipsoid_body(m, i) -> bool:
    """Whether a geom of MuJoCo body ``i`` has ``fluidshape="ellipsoid"``."""
    fluid = getattr(m, "geom_fluid", None)
    if fluid is None or not m.ngeom:
        return False
    a, n = int(m.body_geomadr[i]), int(m.body_geomnum[i])
    return bool(np.any(np.asarray(fluid).reshape(m.ngeom, -1)[a : a + n, 0] > 0))


def _ellipsoid_fluid_bodies(m, dis) -> list:
    """The bodies of :func:`_fluid_bodies` under MuJoCo's ellipsoid-based model."""
    if not _fluid_on(m, dis):
        return []
    return [i for i in _fluid_bodies(m) if _ellipsoid_body(m, i)]


def _fluid(m, place, remap, dis, dtype):
    """MuJoCo's inertia-based fluid model of the scene (:class:`jaxdyn.sim.Fluid`, one box per
    moving MuJoCo body with mass, in its inertial frame on its jaxdyn body), or ``None``."""
    from ..sim.fluid import Fluid, inertia_box

    if not _fluid_on(m, dis):
        return None
    body, rot, pos, box = [], [], [], []
    for i in _fluid_bodies(m):
        b, (R, p) = place[i]
        if b < 0 or _ellipsoid_body(m, i):  # static: no force that moves anything
            continue
        Rin, pin_ = _inertial_frame(m, i)
        body.append(int(remap(b)))
        rot.append(R @ Rin)
        pos.append(R @ pin_ + p)
        box.append(inertia_box(m.body_mass[i], m.body_inertia[i]))

    def arr(x, shape):
        return jnp.asarray(np.asarray(x, float).reshape(shape), dtype)

    return Fluid(
        density=arr(m.opt.density, ()),
        viscosity=arr(m.opt.viscosity, ()),
        wind=arr(m.opt.wind, (3,)),
        rot=arr(rot, (-1, 3, 3)),
        pos=arr(pos, (-1, 3)),
        box=arr(box, (-1, 3)),
        body=tuple(body),
    )


def _fixed_tendon(m, t) -> bool:
    """Whether tendon ``t`` is fixed: every wrap a hinge or slide joint."""
    a, n = int(m.tendon_adr[t]), int(m.tendon_num[t])
    return all(
        int(m.wrap_type[w]) == _WRAP_JOINT
        and int(m.jnt_type[int(m.wrap_objid[w])]) in (_HINGE, _SLIDE)
        for w in range(a, a + n)
    )


def _contact_name(c) -> str:
    """A short name of the contact model ``c`` for messages."""
    from ..sim.contact import Constraint, uses_primal_newton

    if not isinstance(c, Constraint):
        return type(c).__name__
    if not c.soft:
        return "Constraint(soft=False) (the hard contact)"
    if uses_primal_newton(c):
        return "MuJoCo's soft contact"
    return f"Constraint(soft=True, relaxed={c.relaxed}, solver={c.solver!r}) (the dual solve)"


def _frictionloss(m, j) -> bool:
    """Whether MuJoCo joint ``j`` has ``frictionloss`` on any of its coordinates."""
    a = int(m.jnt_dofadr[j])
    n = {_FREE: 6, _BALL: 3}.get(int(m.jnt_type[j]), 1)
    return bool(np.any(np.asarray(m.dof_frictionloss[a : a + n]) > 0))


def _limited_tendons(m) -> list:
    """``(("fixed" | "spatial", i), t)`` of each limited tendon ``t`` that jaxdyn models (the
    fixed ones and the spatial ones jaxdyn models, numbered as :class:`~jaxdyn.sim.FixedTendons` /
    :class:`~jaxdyn.sim.SpatialTendons` number them)."""
    fixed = [t for t in range(m.ntendon) if _fixed_tendon(m, t)]
    spatial = [t for t in range(m.ntendon) if _site_tendon(m, t)]
    out = [(("fixed", i), t) for i, t in enumerate(fixed) if m.tendon_limited[t]]
    return out + [(("spatial", i), t) for i, t in enumerate(spatial) if m.tendon_limited[t]]


def _unlimited_tendons(kw, refs) -> dict:
    """``tendons`` / ``spatial_tendons`` of ``kw`` without the length limits of the tendons
    ``refs`` (``("fixed" | "spatial", i)``: their limit is a constraint row instead)."""
    import equinox as eqx

    out = {}
    for key, kind in (("tendons", "fixed"), ("spatial_tendons", "spatial")):
        ten = kw.get(key)
        idx = [i for k, i in refs if k == kind]
        if ten is None or not idx:
            continue
        lo = jnp.asarray(ten.lower).at[np.asarray(idx)].set(-jnp.inf)
        hi = jnp.asarray(ten.upper).at[np.asarray(idx)].set(jnp.inf)
        out[key] = eqx.tree_at(lambda x: (x.lower, x.upper), ten, (lo, hi))
    return out


def _site_tendon(m, t) -> bool:
    """Whether tendon ``t`` is a spatial tendon :class:`jaxdyn.sim.SpatialTendons` models:
    every wrap a site, a pulley, or a sphere or cylinder without a side site."""
    a, n = int(m.tendon_adr[t]), int(m.tendon_num[t])
    if n < 2 or _fixed_tendon(m, t):
        return False
    for w in range(a, a + n):
        kind = int(m.wrap_type[w])
        if kind in (_WRAP_SPHERE, _WRAP_CYLINDER):
            if round(float(m.wrap_prm[w])) >= 0:  # a side site
                return False
        elif kind not in (_WRAP_SITE, _WRAP_PULLEY):
            return False
    return True


def _tendon_row(m, t) -> np.ndarray:
    """A fixed tendon's coefficients over MuJoCo's dofs ``(nv,)``."""
    row = np.zeros(m.nv)
    a, n = int(m.tendon_adr[t]), int(m.tendon_num[t])
    for w in range(a, a + n):
        row[int(m.jnt_dofadr[int(m.wrap_objid[w])])] += float(m.wrap_prm[w])
    return row


def _actuators(mujoco, m, issues, jnt_names, arm, damp, dof_mj, dis):
    """Actuator records, the per-MuJoCo-dof effort bound, and each kept actuator's row of
    :class:`jaxdyn.sim.GainBias` (moment over MuJoCo's dofs, gain, bias, ranges); folds
    actuator armature and damping into ``arm`` / ``damp`` (in place)."""
    names = mujoco_names(m, "actuator")
    tnames = mujoco_names(m, "tendon")
    inv = np.full(m.nv, -1, np.int64)
    inv[dof_mj] = np.arange(len(dof_mj))
    bound = np.zeros(m.nv)
    actuated = np.zeros(m.nv, bool)
    out, rows = [], []
    for u in range(m.nu):
        el = f'<actuator name="{names[u]}">'
        trn, jid = int(m.actuator_trntype[u]), int(m.actuator_trnid[u, 0])
        tendon = trn == _TRN_TENDON
        problems = []
        if tendon:
            if not _fixed_tendon(m, jid):
                problems.append(f'transmission on the spatial tendon "{tnames[jid]}"')
            if _get(m, "actuator_armature", m.nu)[u] or _get(m, "actuator_damping", m.nu)[u]:
                problems.append("armature / damping on a tendon transmission")
        elif trn not in (_TRN_JOINT, _TRN_JOINTINPARENT):
            tn = _TRN_NAMES[trn] if trn < len(_TRN_NAMES) else str(trn)
            problems.append(f"transmission {tn!r}")
        elif int(m.jnt_type[jid]) not in (_HINGE, _SLIDE):
            problems.append(f"transmission on the {_JNT_NAME[int(m.jnt_type[jid])]} joint")
        dyn = int(m.actuator_dyntype[u])
        if dyn not in (0, 1, 2, 3):
            problems.append("activation dynamics other than integrator / filter (dyntype)")
        elif dyn and int(_get(m, "actuator_actnum", m.nu)[u]) != 1:  # pragma: no cover
            problems.append("more than one activation (actdim)")
        if int(m.actuator_gaintype[u]) not in (0, 1):
            problems.append("a gain other than fixed or affine (gaintype)")
        if int(m.actuator_biastype[u]) not in (0, 1):
            problems.append("a bias other than affine (biastype)")
        if (
            _get(m, "actuator_delay", m.nu)[u] != 0
            or np.ravel(_get(m, "actuator_history", m.nu)[u])[0] > 0
        ):
            problems.append("a delay")
        if np.any(_get(m, "actuator_dampingpoly", m.nu)[u]):
            problems.append("polynomial damping")
        if m.actuator_plugin[u] >= 0:
            problems.append("a plugin")
        if problems:
            issues.add(
                "actuator",
                f"{el}: {', '.join(problems)}; ignored, the actuator applies no force",
            )
            continue
        gear = float(m.actuator_gear[u, 0])
        gainprm = np.array(m.actuator_gainprm[u, :3], float)
        if int(m.actuator_gaintype[u]) == 0:
            gainprm[1:] = 0.0
        gain = float(gainprm[0])
        bias = tuple(float(x) for x in m.actuator_biasprm[u, :3])
        if int(m.actuator_biastype[u]) == 0:
            kind_, bias = "motor", (0.0, 0.0, 0.0)
        elif bias[0] == 0 and bias[1] == -gain and gain != 0:
            kind_ = "position"
        elif bias[0] == 0 and bias[1] == 0 and bias[2] == -gain and gain != 0:
            kind_ = "velocity"
        else:
            kind_ = "affine"
        if np.any(gainprm[1:]):
            kind_ = "affine"
        ctrl = (
            tuple(float(x) for x in m.actuator_ctrlrange[u]) if m.actuator_ctrllimited[u] else None
        )
        frc = (
            tuple(float(x) for x in m.actuator_forcerange[u])
            if m.actuator_forcelimited[u]
            else None
        )
        if tendon:  # no bound on the joints it moves (beyond jnt_actfrcrange)
            moment = gear * _tendon_row(m, jid)
            joint, dof = None, -1
            bound[moment != 0] = np.inf
            actuated[moment != 0] = True
        else:
            d = int(m.jnt_dofadr[jid])
            moment = np.zeros(m.nv)
            moment[d] = gear
            joint, dof = jnt_names[jid], int(inv[d])
            arm[d] += gear * gear * float(_get(m, "actuator_armature", m.nu)[u])
            if not dis("mjDSBL_DAMPER"):
                damp[d] += gear * gear * float(_get(m, "actuator_damping", m.nu)[u])
            b = np.inf
            if frc is not None:
                b = abs(gear) * max(abs(frc[0]), abs(frc[1]))
            if kind_ == "motor" and ctrl is not None and not dyn:
                b = min(b, abs(gear * gain) * max(abs(ctrl[0]), abs(ctrl[1])))
            bound[d] += b
            actuated[d] = True
        clamp = ctrl is not None and not dis("mjDSBL_CLAMPCTRL")
        rows.append(
            dict(
                moment=moment,
                gain=np.zeros(3) if dis("mjDSBL_ACTUATION") else gainprm,
                bias=np.zeros(3) if dis("mjDSBL_ACTUATION") else np.array(bias),
                ctrl=ctrl if clamp else (-np.inf, np.inf),
                force=frc if frc is not None else (-np.inf, np.inf),
                dyn=_DYN_NAMES[dyn],
                dynprm=float(m.actuator_dynprm[u, 0]),
                act=(
                    tuple(float(x) for x in m.actuator_actrange[u])
                    if m.actuator_actlimited[u]
                    else (-np.inf, np.inf)
                ),
                actearly=bool(_get(m, "actuator_actearly", m.nu)[u]),
            )
        )
        out.append(
            Actuator(
                name=names[u],
                joint=joint,
                dof=dof,
                kind=kind_,
                gear=gear,
                gain=gain,
                bias=bias,
                ctrlrange=ctrl,
                forcerange=frc,
                tendon=tnames[jid] if tendon else None,
                gainprm=tuple(float(x) for x in gainprm),
                dyntype=_DYN_NAMES[dyn],
            )
        )
    effort = np.where(actuated, bound, np.inf)
    for j in range(m.njnt):
        if m.jnt_actfrclimited[j] and int(m.jnt_type[j]) in (_HINGE, _SLIDE):
            d = int(m.jnt_dofadr[j])
            effort[d] = min(effort[d], float(np.max(np.abs(m.jnt_actfrcrange[j]))))
    return tuple(out), effort, rows


def _scene(m, rows, dof_mj, dis, dtype):
    """The :mod:`jaxdyn.sim` elements of the MuJoCo scene: joint :class:`Springs`,
    :class:`FixedTendons` and the :class:`GainBias` actuator (each ``None`` where empty), in
    jaxdyn's velocity coordinates."""
    from ..sim.actuators import FixedTendons, GainBias, Springs

    inv = np.full(m.nv, -1, np.int64)
    inv[dof_mj] = np.arange(len(dof_mj))

    def columns(mats):  # jaxdyn dofs touched by the rows (sorted), and the rows on them
        used = sorted({int(inv[d]) for mat in mats for d in np.nonzero(mat)[0]})
        mj = [int(dof_mj[k]) for k in used]
        return tuple(used), [np.asarray(mat)[mj] for mat in mats]

    def arr(x):
        return jnp.asarray(np.asarray(x, float), dtype)

    springs = None
    if not dis("mjDSBL_SPRING"):
        js = [
            j
            for j in range(m.njnt)
            if m.jnt_stiffness[j] != 0 and int(m.jnt_type[j]) in (_HINGE, _SLIDE)
        ]
        if js:
            order = sorted(js, key=lambda j: int(inv[int(m.jnt_dofadr[j])]))
            springs = Springs(
                stiffness=arr([m.jnt_stiffness[j] for j in order]),
                springref=arr([m.qpos_spring[int(m.jnt_qposadr[j])] for j in order]),
                dofs=tuple(int(inv[int(m.jnt_dofadr[j])]) for j in order),
            )
    tendons = None
    fixed = [t for t in range(m.ntendon) if _fixed_tendon(m, t)]
    if fixed:
        dofs, coef = columns([_tendon_row(m, t) for t in fixed])
        k = 0.0 if dis("mjDSBL_SPRING") else 1.0
        b = 0.0 if dis("mjDSBL_DAMPER") else 1.0
        lim = [bool(m.tendon_limited[t]) and not dis("mjDSBL_LIMIT") for t in fixed]
        tendons = FixedTendons(
            coef=arr(coef),
            stiffness=arr([k * m.tendon_stiffness[t] for t in fixed]),
            lower_spring=arr([m.tendon_lengthspring[t, 0] for t in fixed]),
            upper_spring=arr([m.tendon_lengthspring[t, 1] for t in fixed]),
            damping=arr([b * m.tendon_damping[t] for t in fixed]),
            lower=arr([m.tendon_range[t, 0] if lt else -np.inf for t, lt in zip(fixed, lim)]),
            upper=arr([m.tendon_range[t, 1] if lt else np.inf for t, lt in zip(fixed, lim)]),
            dofs=dofs,
        )
    gain_bias = None
    if rows:
        dofs, moment = columns([r["moment"] for r in rows])
        gain_bias = GainBias(
            moment=arr(np.reshape(moment, (len(rows), len(dofs)))),
            gain=arr([r["gain"] for r in rows]),
            bias=arr([r["bias"] for r in rows]),
            ctrl_lower=arr([r["ctrl"][0] for r in rows]),
            ctrl_upper=arr([r["ctrl"][1] for r in rows]),
            force_lower=arr([r["force"][0] for r in rows]),
            force_upper=arr([r["force"][1] for r in rows]),
            dofs=dofs,
        )
        if any(r["dyn"] != "none" for r in rows):
            gain_bias = GainBias(
                **{k: getattr(gain_bias, k) for k in _GB_FIELDS},
                dyn=tuple(r["dyn"] for r in rows),
                dynprm=arr([r["dynprm"] for r in rows]),
                act_lower=arr([r["act"][0] for r in rows]),
                act_upper=arr([r["act"][1] for r in rows]),
                actearly=tuple(r["actearly"] for r in rows),
            )
    return springs, tendons, gain_bias


def _spatial_tendons(m, place, remap, dis, dtype):
    """The spatial tendons (sites, pulleys, sphere / cylinder wraps without a side site) as
    :class:`jaxdyn.sim.SpatialTendons`
    (``None`` without any)."""
    from ..sim.actuators import SpatialTendons

    ts = [t for t in range(m.ntendon) if _site_tendon(m, t)]
    if not ts:
        return None
    sites, geoms, paths = [], [], []

    def site(s):
        if s not in sites:
            sites.append(s)
        return sites.index(s)

    for t in ts:
        a, n = int(m.tendon_adr[t]), int(m.tendon_num[t])
        path = []
        for w in range(a, a + n):
            kind, obj = int(m.wrap_type[w]), int(m.wrap_objid[w])
            if kind == _WRAP_SITE:
                path.append(site(obj))
            elif kind == _WRAP_PULLEY:
                path.append(("pulley", float(m.wrap_prm[w])))
            else:  # sphere / cylinder (no side site: _site_tendon)
                if obj not in geoms:
                    geoms.append(obj)
                path.append(("sphere" if kind == _WRAP_SPHERE else "cylinder", geoms.index(obj)))
        paths.append(tuple(path))
    bodies, _, points = _placed(m, "site", sites, place, remap)
    geom_bodies, geom_rot, geom_pos = _placed(m, "geom", geoms, place, remap)
    k = 0.0 if dis("mjDSBL_SPRING") else 1.0
    c = 0.0 if dis("mjDSBL_DAMPER") else 1.0
    lim = [bool(m.tendon_limited[t]) and not dis("mjDSBL_LIMIT") for t in ts]

    def arr(x):
        return jnp.asarray(np.asarray(x, float), dtype)

    return SpatialTendons(
        points=arr(points),
        stiffness=arr([k * m.tendon_stiffness[t] for t in ts]),
        lower_spring=arr([m.tendon_lengthspring[t, 0] for t in ts]),
        upper_spring=arr([m.tendon_lengthspring[t, 1] for t in ts]),
        damping=arr([c * m.tendon_damping[t] for t in ts]),
        lower=arr([m.tendon_range[t, 0] if lt else -np.inf for t, lt in zip(ts, lim)]),
        upper=arr([m.tendon_range[t, 1] if lt else np.inf for t, lt in zip(ts, lim)]),
        bodies=tuple(bodies),
        paths=tuple(paths),
        geom_pos=arr(geom_pos) if geoms else None,
        geom_rot=arr(geom_rot) if geoms else None,
        geom_radius=arr([m.geom_size[g, 0] for g in geoms]) if geoms else None,
        geom_bodies=tuple(geom_bodies),
    )


def _can_collide(m, g1, g2) -> bool:
    return bool(
        (m.geom_contype[g1] & m.geom_conaffinity[g2])
        or (m.geom_contype[g2] & m.geom_conaffinity[g1])
    )


def _excluded(m, b1, b2) -> bool:
    sig = {int(s) for s in np.asarray(m.exclude_signature).ravel()}
    lo, hi = min(b1, b2), max(b1, b2)
    return ((lo << 16) + hi) in sig or ((hi << 16) + lo) in sig


def _warn_penetrating(mujoco, m, label, pairs, geom_names, depth=1e-4):
    """Warn, naming them, about the geom ``pairs`` (sets of two names: the pairs of
    :class:`jaxdyn.sim.Geoms` and the primitives with the ground plane) that interpenetrate
    deeper than ``depth`` at ``qpos0`` (MuJoCo's own collision detection on the compiled
    model)."""
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    deep = {}
    for c in d.contact[: d.ncon]:
        key = frozenset((geom_names[c.geom1], geom_names[c.geom2]))
        if key in pairs and c.dist < -depth:
            deep[key] = max(deep.get(key, 0.0), -float(c.dist))
    if deep:
        import warnings

        listed = ", ".join(
            "-".join(repr(n) for n in sorted(k)) + f" ({v * 1e3:.3g} mm)"
            for k, v in list(deep.items())[:6]
        )
        more = f" ... ({len(deep)} in all)" if len(deep) > 6 else ""
        warnings.warn(
            f"load_mjcf: {label}: geoms interpenetrate at qpos0: {listed}{more}; the contact "
            "solver pushes them apart in the first steps",
            stacklevel=4,
        )


def _mesh_hull(m, g, element):
    """The convex hull (:func:`jaxdyn.sim.collision.hull_from_points`, scipy's Qhull) of the
    mesh of geom ``g``, in the geom's frame (MuJoCo's compiled vertices); MuJoCo collides a mesh
    as its convex hull too: a non-convex one gets a warning naming it."""
    import warnings

    from ..sim.collision import hull_from_points

    k = int(m.geom_dataid[g])
    a, n = int(m.mesh_vertadr[k]), int(m.mesh_vertnum[k])
    verts = np.array(m.mesh_vert[a : a + n], float)
    hull = hull_from_points(verts)
    # a vertex farther than 1e-6 of the size inside the hull: the mesh is not convex
    scale = float(np.ptp(verts, axis=0).max())
    hv = np.asarray(hull.vertices, float)
    d = verts @ np.asarray(hull.normals, float).T - np.max(
        hv @ np.asarray(hull.normals, float).T, axis=0
    )
    if np.any(d.max(axis=1) < -1e-6 * scale):
        warnings.warn(
            f"load_mjcf: {element}: the mesh is not convex; it collides as its convex hull (as "
            "in MuJoCo)",
            stacklevel=5,
        )
    return hull


def _hfield(m, g, reach):
    """The :class:`jaxdyn.sim.collision.HField` of heightfield geom ``g`` (MuJoCo's compiled
    ``hfield_data``, normalised to [0, 1], times the elevation ``size[2]``), its pairs' window
    sized for a geom of bounding radius ``reach``."""
    from ..sim.collision import hfield

    h = int(m.geom_dataid[g])
    nrow, ncol = int(m.hfield_nrow[h]), int(m.hfield_ncol[h])
    a = int(m.hfield_adr[h])
    size = np.array(m.hfield_size[h], float)
    data = np.array(m.hfield_data[a : a + nrow * ncol], float).reshape(nrow, ncol)
    return hfield(data * size[2], size, reach)


def _filtered(m, g1, g2, filterparent_off) -> bool:
    """Whether MuJoCo's broad phase never lets geoms ``g1``, ``g2`` collide (MuJoCo's
    ``mj_collision`` / MJX ``geom_pairs``): geoms of one welded body; a parent and its child
    (welded bodies) unless the parent is the world or ``filterparent`` is disabled;
    ``contype`` / ``conaffinity``; an ``<exclude>`` of their bodies."""
    b1, b2 = int(m.geom_bodyid[g1]), int(m.geom_bodyid[g2])
    w1, w2 = int(m.body_weldid[b1]), int(m.body_weldid[b2])
    if w1 == w2:
        return True
    pw1 = int(m.body_weldid[int(m.body_parentid[w1])])
    pw2 = int(m.body_weldid[int(m.body_parentid[w2])])
    if not filterparent_off and w1 != 0 and w2 != 0 and (w1 == pw2 or w2 == pw1):
        return True
    return not _can_collide(m, g1, g2) or _excluded(m, b1, b2)


_DEFAULT_SOLREF = (0.02, 1.0)
_DEFAULT_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)
_ENBL_OVERRIDE = 1  # mjENBL_OVERRIDE


def _gap_subtracts(mujoco) -> bool:
    """Whether this MuJoCo's contacts act from ``dist < margin - gap`` (before 3.9.0: its
    ``includemargin``, contacts detected from ``dist < margin``); from MuJoCo 3.9.0 on they
    act from ``dist < margin`` and ``gap`` only adds contacts beyond it, detected up to
    ``margin + gap``, that carry no force (``mjContact.exclude``). An unparsable version (a
    local build) is taken as a new one."""
    found = release(str(mujoco.__version__))
    return bool(found) and found < (3, 9)


def _contact_params(m):
    """Per-geom ``margin``, ``solref``, ``solmix``, ``solimp`` (numpy, ``(ngeom, ...)``),
    with ``<option o_margin / o_solref / o_solimp>`` where ``<flag override>`` is on (MuJoCo's
    ``mj_collideGeoms``: they replace the pair's values). ``margin`` is where the contact
    starts to act, the pair's ``includemargin`` (the sum of its geoms'): before MuJoCo 3.9.0
    each geom's ``gap`` (never overridden) is subtracted from it (:func:`_gap_subtracts`);
    from 3.9.0 on ``gap`` carries no force and is not read."""
    margin = np.array(m.geom_margin, float).reshape(-1)
    solref = np.array(m.geom_solref, float).reshape(-1, 2)
    solmix = np.array(m.geom_solmix, float).reshape(-1)
    solimp = np.array(m.geom_solimp, float).reshape(-1, 5)
    if _override(m):  # a pair's margin is o_margin: half each
        margin[:] = 0.5 * float(m.opt.o_margin)
        solref[:] = np.array(m.opt.o_solref, float)
        solimp[:] = np.array(m.opt.o_solimp, float)
    if _gap_subtracts(_import_mujoco()):
        margin = margin - np.array(m.geom_gap, float).reshape(-1)
    return margin, solref, solmix, solimp


def _hard_geoms(geoms):
    """``geoms`` for the hard contact models (their ``solimp`` and direct ``solref`` refused by
    :meth:`MJCFModel.sim_config` unless ignored): no ``solimp``, MuJoCo's default ``solref``
    where a geom's or an explicit pair's is in the direct (negative) form."""
    import dataclasses

    def positive(x):
        if x is None:
            return None
        x = np.array(x, float)
        x[np.any(x <= 0, axis=-1)] = _DEFAULT_SOLREF
        return x

    return dataclasses.replace(
        geoms,
        solimp=None,
        pair_solimp=None,
        solref=positive(geoms.solref),
        pair_solref=positive(geoms.pair_solref),
    )


def _override(m) -> bool:
    """Whether ``<option><flag override="enable">`` is on (MuJoCo's ``mjENBL_OVERRIDE``)."""
    return bool(int(m.opt.enableflags) & _ENBL_OVERRIDE)


def _geom_friction(m):
    """Per-geom ``(sliding, torsional, rolling)`` friction (numpy ``(ngeom, 3)``): the geoms'
    ``friction``, or under ``<flag override>`` ``<option o_friction>``'s ``(slide1, spin,
    roll1)`` for every geom (MuJoCo's ``mj_assignFriction``: ``o_friction`` replaces every
    contact's friction vector; mixing equal values per pair gives it back; the explicit pairs'
    by :func:`_explicit_params`)."""
    fr = np.array(m.geom_friction, float).reshape(-1, 3)
    if _override(m):
        o = np.array(m.opt.o_friction, float)
        fr[:] = o[[0, 2, 3]]
    return fr


def _pair_params(m, g1, g2, solref, solmix, solimp):
    """MuJoCo's ``mj_contactParam`` ``(solref, solimp)`` of the geom pair ``g1``, ``g2``
    (:func:`jaxdyn.sim.geoms.contact_param` on float64 numpy)."""
    from ..sim.geoms import contact_param

    p1, p2 = int(m.geom_priority[g1]), int(m.geom_priority[g2])
    pair = lambda x: (x[g1], x[g2])  # noqa: E731
    return contact_param(np, p1, p2, pair(solmix), solref=pair(solref), solimp=pair(solimp))


def _explicit_params(m, ids):
    """The contact parameters of MuJoCo's explicit pairs ``ids`` (``<contact><pair>``, the
    compiled ``pair_*`` arrays, as ``mj_collideGeoms`` reads them for a predefined pair):
    ``condim``, sliding ``friction``, ``margin`` (``o_margin`` where ``<flag override>`` is on,
    MuJoCo's ``mj_assignMargin``; before MuJoCo 3.9.0 less the pair's ``gap``,
    :func:`_gap_subtracts`), ``solref``, ``solimp`` (``o_solref`` / ``o_solimp`` under
    override) and ``solreffriction`` (``(0, 0)``: the contact's ``solref``; under override
    MuJoCo's ``mj_assignRef`` gives it ``o_solref``, the contact's ``solref`` too)."""
    ids = np.asarray(ids, int)
    condim = np.array(m.pair_dim, int)[ids]
    friction = np.array(m.pair_friction, float).reshape(-1, 5)[ids, 0]
    spin = np.array(m.pair_friction, float).reshape(-1, 5)[ids, 2:4]  # torsional, rolling
    if _override(m):  # MuJoCo's mj_assignFriction: o_friction for every contact
        friction[:] = float(m.opt.o_friction[0])
        spin[:] = np.array(m.opt.o_friction, float)[2:4]
    margin = np.array(m.pair_margin, float).reshape(-1)[ids]
    solref = np.array(m.pair_solref, float).reshape(-1, 2)[ids]
    solimp = np.array(m.pair_solimp, float).reshape(-1, 5)[ids]
    srf = np.array(m.pair_solreffriction, float).reshape(-1, 2)[ids]
    if _override(m):
        margin[:] = float(m.opt.o_margin)
        solref[:] = np.array(m.opt.o_solref, float)
        solimp[:] = np.array(m.opt.o_solimp, float)
        srf[:] = 0.0
    if _gap_subtracts(_import_mujoco()):
        margin = margin - np.array(m.pair_gap, float).reshape(-1)[ids]
    return condim, friction, margin, solref, solimp, srf, spin


def _contacts(
    m,
    issues,
    place,
    body_names,
    geom_names,
    remap,
    filterparent_off=False,
    sim_issues=None,
    info=None,
):
    """Contact primitives on moving bodies that touch the ground plane (exactly as their
    spheres: :class:`jaxdyn.sim.Sphere` / ``Capsule`` / ``Box``), the ground plane as the
    terrain, and a :class:`jaxdyn.sim.Geoms` of every other pair MuJoCo's filters let
    collide (with the geoms' ``margin``, ``solref``, ``solmix``; a geom whose pair
    with the ground has any of them off MuJoCo's defaults is a geom of that pair, not a
    primitive). What :meth:`MJCFModel.sim_config` cannot honour goes to ``sim_issues``:
    ``solimp`` off MuJoCo's default, ``solref`` in its direct (negative) form."""
    from ..sim import collision
    from ..sim.geometry import Box, Capsule, Plane, Sphere
    from ..sim.geoms import Geoms, Static

    sim_issues = [] if sim_issues is None else sim_issues
    margin, solref, solmix, solimp = _contact_params(m)
    geom_friction = _geom_friction(m)  # <flag override>: o_friction's
    o_fr = np.array(m.opt.o_friction, float)
    if _override(m) and (o_fr[0] != o_fr[1] or o_fr[3] != o_fr[4]):
        issues.add(
            "geom",
            f'<option o_friction="{" ".join(f"{x:g}" for x in o_fr)}"> under <flag '
            'override="enable">: two sliding or two rolling coefficients (anisotropic '
            "friction; jaxdyn.sim has one of each: give both the same); ignored, the first",
        )
    direct = [g for g in range(m.ngeom) if np.any(solref[g] <= 0)]
    file_solref = solref.copy()  # the geoms' own, direct form included (sim.Geoms keeps it)
    solref[direct] = _DEFAULT_SOLREF  # used only where sim_config(ignore=("solref",))

    def plain(g):  # default contact parameters (gap: no force, nothing to honour), condim 1 / 3
        return (
            margin[g] == 0
            and np.all(solref[g] == _DEFAULT_SOLREF)
            and int(m.geom_condim[g]) in (1, 3)
        )

    collide = [g for g in range(m.ngeom) if m.geom_contype[g] or m.geom_conaffinity[g]]
    static = [g for g in collide if place[int(m.geom_bodyid[g])][0] < 0]
    moving = [g for g in collide if place[int(m.geom_bodyid[g])][0] >= 0]

    def el(g):
        return f'<geom name="{geom_names[g]}" type="{_GEOM_NAMES[int(m.geom_type[g])]}">'

    def listed(gs):
        more = f" ... ({len(gs)} in all)" if len(gs) > 6 else ""
        return ", ".join(el(g) for g in gs[:6]) + more

    planes = [g for g in static if int(m.geom_type[g]) == _PLANE]
    terrain, ground = None, None
    if planes:
        ground = planes[0]
        b, T = place[int(m.geom_bodyid[ground])]
        R, p = _compose(T, _local_frame(m, "geom", ground))
        n = R[:, 2]
        terrain = Plane(normal=n, height=float(n @ p))

    # MuJoCo's explicit pairs (<contact><pair>): always collided, whatever the filters, with
    # their own parameters; each replaces the dynamic pair of its two geoms
    def pair_el(ip):
        g1, g2 = int(m.pair_geom1[ip]), int(m.pair_geom2[ip])
        return f'<pair geom1="{geom_names[g1]}" geom2="{geom_names[g2]}">'

    explicit, explicit_ids, bad_dim, anisotropic = [], [], [], []
    for ip in range(m.npair):
        g1, g2 = int(m.pair_geom1[ip]), int(m.pair_geom2[ip])
        if place[int(m.geom_bodyid[g1])][0] == place[int(m.geom_bodyid[g2])][0]:
            continue  # one jaxdyn body (or both static): its contact moves nothing
        a, b = (g1, g2) if int(m.geom_type[g1]) <= int(m.geom_type[g2]) else (g2, g1)
        key = (_GEOM_NAMES[int(m.geom_type[a])], _GEOM_NAMES[int(m.geom_type[b])])
        if key not in collision.PAIRS:
            issues.add(
                "geom",
                f"{pair_el(ip)}: jaxdyn.sim has no narrow phase for {key[0]}-{key[1]} contacts",
            )
            continue
        dim, fr5 = int(m.pair_dim[ip]), m.pair_friction[ip]
        if not _override(m) and (  # o_friction replaces it (checked below)
            (dim >= 3 and fr5[0] != fr5[1]) or (dim == 6 and fr5[3] != fr5[4])
        ):
            anisotropic.append(ip)
        if dim > 3:
            bad_dim.append(ip)  # torsional / rolling friction: Constraint only (sim_issues)
        explicit.append((a, b))
        explicit_ids.append(ip)
    if anisotropic:
        issues.add(
            "geom",
            ", ".join(
                f"{pair_el(ip)}: friction {' '.join(f'{x:g}' for x in m.pair_friction[ip])}"
                for ip in anisotropic
            )
            + " (two sliding or two rolling coefficients, anisotropic friction; jaxdyn.sim has "
            "one of each: give both the same); ignored, the first",
        )
    explicit_keys = {frozenset(pr) for pr in explicit}
    on_ground = {a if b == ground else b for a, b in explicit if ground in (a, b)}

    prims, as_prim = [], set()
    for g in moving:
        if ground is None or _filtered(m, ground, g, filterparent_off):
            continue
        if g in on_ground:
            continue  # its contact with the ground is an explicit pair's
        if not (plain(g) and plain(ground)):
            continue  # a pair of geoms: it carries its contact parameters
        typ = int(m.geom_type[g])
        frame = body_names[int(m.geom_bodyid[g])]
        R, pg = _local_frame(m, "geom", g)
        pos = tuple(float(x) for x in pg)
        size = np.array(m.geom_size[g], float)
        if typ == _SPHERE:
            prims.append(Sphere(frame, float(size[0]), pos=pos, name=geom_names[g]))
        elif typ == _CAPSULE:
            prims.append(
                Capsule(
                    frame,
                    float(size[0]),
                    2 * float(size[1]),
                    pos=pos,
                    rotation=R,
                    name=geom_names[g],
                )
            )
        elif typ == _BOX:
            prims.append(Box(frame, tuple(2 * size), pos=pos, rotation=R, name=geom_names[g]))
        else:
            continue
        as_prim.add(g)

    # every other pair MuJoCo's broad phase lets through
    pairs, unsupported, condim = [], {}, []
    for i, g1 in enumerate(collide):
        for g2 in collide[i + 1 :]:
            if _filtered(m, g1, g2, filterparent_off):
                continue
            if ground in (g1, g2) and (g2 if g1 == ground else g1) in as_prim:
                continue
            if frozenset((g1, g2)) in explicit_keys:
                continue  # the explicit pair replaces it
            a, b = (g1, g2) if int(m.geom_type[g1]) <= int(m.geom_type[g2]) else (g2, g1)
            key = (_GEOM_NAMES[int(m.geom_type[a])], _GEOM_NAMES[int(m.geom_type[b])])
            if key not in collision.PAIRS:
                unsupported.setdefault(key, []).append((a, b))
                continue
            pairs.append((a, b))
    for key, ps in unsupported.items():
        ex = ", ".join(f"{el(a)}-{el(b)}" for a, b in ps[:3])
        more = f" ... ({len(ps)} in all)" if len(ps) > 3 else ""
        issues.add(
            "geom",
            f"{ex}{more}: jaxdyn.sim has no narrow phase for {key[0]}-{key[1]} contacts "
            f"(it has {', '.join('-'.join(k) for k in sorted(collision.PAIRS))})",
        )
    dynamic = {g for pr in pairs for g in pr}
    n_dynamic = len(pairs)
    pairs = pairs + explicit  # the explicit pairs last: indices n_dynamic, ...
    used = sorted({g for pr in pairs for g in pr})
    touching = sorted(dynamic | ({ground} if prims and ground is not None else set()) | as_prim)
    for g in touching:  # the dynamic pairs' geoms, the ground's primitives and the ground
        if int(m.geom_condim[g]) not in (1, 3):
            condim.append(g)
    if condim or bad_dim:  # torsional / rolling friction: geom pairs (not primitives)
        dims = {int(m.geom_condim[g]) for g in condim} | {int(m.pair_dim[i]) for i in bad_dim}
        what = [listed(condim)] if condim else []
        what += [pair_el(ip) for ip in bad_dim]
        sim_issues.append(
            (
                "condim",
                f"{', '.join(what)}: condim {sorted(dims)} "
                "(torsional / rolling friction): the Compliant contact model has condim 1 and "
                "3; Constraint() (hard or soft=True) takes it (ignored: condim 3)",
            )
        )
    soft = [g for g in touching if not np.allclose(solimp[g], _DEFAULT_SOLIMP)]
    if soft:
        vals = sorted({tuple(float(x) for x in solimp[g]) for g in soft})[:3]
        sim_issues.append(
            (
                "solimp",
                f"{listed(soft)}: solimp {', '.join(' '.join(f'{x:g}' for x in v) for v in vals)}"
                " (MuJoCo's impedance, a penetration-dependent softness): Constraint(soft=True)"
                " honours it (MuJoCo's soft contact, the problem MuJoCo and MJX solve; "
                "relaxed=True: MuJoCo's convex one); the hard Constraint(soft=False) and "
                "Compliant have none (their regularization, a spring-damper from solref); "
                "ignored, the "
                "contacts keep their solref only",
            )
        )
    direct = [g for g in direct if g in touching]
    if direct:
        sim_issues.append(
            (
                "solref",
                f"{listed(direct)}: solref in the direct form (negative: -stiffness, -damping): "
                "jaxdyn's contact models take solref as (timeconst, dampratio); ignored, these "
                "geoms get MuJoCo's default (0.02, 1)",
            )
        )
    pcondim, pfric, pmargin, psolref, psolimp, psrf, pspin = _explicit_params(m, explicit_ids)
    for key, rows, what in (
        (
            "solimp",
            [j for j in range(len(explicit_ids)) if not np.allclose(psolimp[j], _DEFAULT_SOLIMP)],
            "solimp off MuJoCo's default (an impedance: soft contact only)",
        ),
        (
            "solref",
            [j for j in range(len(explicit_ids)) if np.any(psolref[j] <= 0)],
            "solref in the direct form (negative: soft contact only); ignored, MuJoCo's "
            "default (0.02, 1)",
        ),
        (
            "solreffriction",
            [j for j in range(len(explicit_ids)) if np.any(psrf[j] != 0)],
            "solreffriction (the friction rows' reference: soft contact, elliptic cones only)",
        ),
    ):
        if rows:
            sim_issues.append((key, f"{', '.join(pair_el(explicit_ids[j]) for j in rows)}: {what}"))
    # (the pairs' direct solref kept: sim_config gives the others MuJoCo's default)
    if info is not None:
        info["ground"] = -1 if ground is None else int(ground)
        info["pairs"] = tuple(explicit_ids)
    if not pairs:
        return tuple(prims), terrain, None
    index = {g: k for k, g in enumerate(used)}
    body, rot, pos = _placed(m, "geom", used, place, remap)
    types = tuple(_GEOM_NAMES[int(m.geom_type[g])] for g in used)
    prio = [int(m.geom_priority[g]) for g in used]  # MuJoCo's geom priority
    hulls = {}
    for k, g in enumerate(used):
        if types[k] == "mesh":
            hulls[k] = _mesh_hull(m, g, el(g))
        elif types[k] == "hfield":
            mg = [margin[a] + margin[b] for a, b in pairs[:n_dynamic]]
            mg += [float(x) for x in pmargin]  # an explicit pair's own margin
            reach = max(
                float(m.geom_rbound[b if a == g else a]) + mg[j]
                for j, (a, b) in enumerate(pairs)
                if g in (a, b)
            )
            hulls[k] = _hfield(m, g, reach)
    rbound = np.array([float(m.geom_rbound[g]) for g in used])
    rbound[np.array([t in ("plane", "hfield") for t in types])] = np.inf
    geoms = Geoms(
        size=np.array([m.geom_size[g] for g in used], float),
        pos=np.asarray(pos, float),
        rot=np.asarray(rot, float),
        friction=geom_friction[used, 0],
        rbound=rbound,
        body=tuple(body),
        type=types,
        condim=tuple(int(m.geom_condim[g]) for g in used),
        names=tuple(geom_names[g] for g in used),
        pairs=tuple((index[a], index[b]) for a, b in pairs),
        hulls=Static(hulls) if hulls else None,
        margin=margin[used] if np.any(margin[used] != 0) else None,
        # the file's solref (either form) and solimp: the hard contact models refuse what
        # they cannot honour (MJCFModel.sim_config, by name; sim.SimConfig), soft takes them
        solref=file_solref[used] if np.any(file_solref[used] != _DEFAULT_SOLREF) else None,
        solmix=solmix[used] if np.any(file_solref[used] != _DEFAULT_SOLREF) else None,
        solimp=solimp[used] if np.any(solimp[used] != _DEFAULT_SOLIMP) else None,
        priority=tuple(int(x) for x in prio) if len(set(prio)) > 1 else None,
        spin=geom_friction[used, 1:3] if condim else None,
    )
    if explicit:
        ex = dict(
            explicit=tuple(range(n_dynamic, len(pairs))),
            pair_condim=tuple(int(c) for c in pcondim),
            pair_friction=pfric,
            pair_margin=pmargin,
            pair_solref=psolref,
            pair_solimp=psolimp if np.any(psolimp != _DEFAULT_SOLIMP) else None,
            pair_solreffriction=psrf if np.any(psrf != 0) else None,
            pair_spin=pspin if np.any(pcondim > 3) else None,
        )
        geoms = dataclasses.replace(geoms, **ex)
    return tuple(prims), terrain, geoms


def _equalities(mujoco, m, issues, place, body_names, site_frames):
    """``connect`` / ``weld`` constraints between a moving and a static body as jaxdyn
    constraints with world targets (for :func:`jaxdyn.constrained_aba` and the other
    constrained algorithms); loop closures and joint couplings are left to
    :func:`_sim_equalities`. Tendon, flex and distance equalities are refused."""
    from ..constraints import Connect, Weld

    names = mujoco_names(m, "eq")
    site_names = mujoco_names(m, "site")
    out, active = [], []
    for e in range(m.neq):
        typ = int(m.eq_type[e])
        tname = _EQ_NAMES[typ] if typ < len(_EQ_NAMES) else str(typ)
        el = f'<equality><{tname} name="{names[e]}">'
        if typ not in (_EQ_CONNECT, _EQ_WELD, _EQ_JOINT):
            issues.add("equality", f"{el}: {tname} constraints")
            continue
        if typ == _EQ_JOINT:
            continue
        o1, o2 = int(m.eq_obj1id[e]), int(m.eq_obj2id[e])
        data = np.array(m.eq_data[e], float)
        if int(m.eq_objtype[e]) == _OBJ_SITE:
            # site1 and site2 frames (or origins, for connect) coincide
            sides = []
            for s in (o1, o2):
                b, T = place[int(m.site_bodyid[s])]
                X = _compose(T, _local_frame(m, "site", s))
                sides.append((b, site_frames[site_names[s]], X))
            (b1, f1, X1), (b2, f2, X2) = sides
            off1 = off2 = np.zeros(3)
            rot1 = rot2 = np.eye(3)
        else:
            b1, T1 = place[o1]
            b2, T2 = place[o2]
            f1, f2 = body_names[o1], body_names[o2]
            X1, X2 = T1, T2  # world placement where the body is static
            if typ == _EQ_CONNECT:
                off1, off2 = data[0:3], data[3:6]
                rot1 = rot2 = np.eye(3)
            else:  # weld: body1 * (relpos, relquat) == body2 * (anchor, 1)
                off1, rot1 = data[3:6], _quat_to_mat(data[6:10])
                off2, rot2 = data[0:3], np.eye(3)
        if b1 >= 0 and b2 >= 0:
            continue  # a loop closure: jaxdyn.sim's Equalities only
        if b1 < 0 and b2 < 0:
            continue  # both fixed to the world: no effect on the motion
        if b1 < 0:  # the moving side first
            f1, f2, off1, off2, rot1, rot2, X1, X2 = f2, f1, off2, off1, rot2, rot1, X2, X1
        Rt, pt = X2
        with np.errstate(all="ignore"):
            target_p = Rt @ off2 + pt
            target_R = Rt @ rot2
        try:
            if typ == _EQ_CONNECT:
                c = Connect(
                    f1,
                    reference="local_world_aligned",
                    offset=off1,
                    target=target_p,
                    name=names[e],
                )
            else:
                # constraint frame (off1, rot1) on frame1 == X2 * (off2, rot2) in the world
                c = Weld(
                    f1,
                    reference="local_world_aligned",
                    offset=off1,
                    rotation=rot1,
                    target=(target_R, target_p),
                    name=names[e],
                    error="decoupled",  # MuJoCo's weld error
                )
        except ValueError as err:  # the constructor's check, with the element named
            issues.hard(f"{el}: {err}")
        out.append(c)
        active.append(bool(m.eq_active0[e]))
    return tuple(out), tuple(active)


def _sim_equalities(mujoco, m, place, remap, joint_q, dis, dtype):
    """The scene's connect / weld / joint equalities as :class:`jaxdyn.sim.Equalities` (MuJoCo's
    soft constraints, with their ``solref``, ``solimp``, ``eq_active0`` and the inverse weights
    of ``efc_diagApprox``), or ``None``. ``joint_q``: MuJoCo joint -> jaxdyn ``q`` index."""
    from ..sim.equality import Equalities

    rows = []
    for e in range(m.neq):
        typ = int(m.eq_type[e])
        if typ not in (_EQ_CONNECT, _EQ_WELD, _EQ_JOINT):
            continue
        o1, o2 = int(m.eq_obj1id[e]), int(m.eq_obj2id[e])
        data = np.array(m.eq_data[e], float)
        solref = np.array(m.eq_solref[e], float)
        if (solref[0] > 0) != (solref[1] > 0):  # MuJoCo: mixed formats -> the default
            solref = np.array([0.02, 1.0])
        imp = np.array(m.eq_solimp[e], float)
        imp[[0, 1, 3]] = np.clip(imp[[0, 1, 3]], 1e-4, 0.9999)  # mjMINIMP, mjMAXIMP
        imp[2], imp[4] = max(0.0, imp[2]), max(1.0, imp[4])
        row: dict[str, Any] = dict(
            kind=_EQ_NAMES[typ],
            body1=-1,
            body2=-1,
            point1=np.zeros(3),
            point2=np.zeros(3),
            rot1=np.eye(3),
            rot2=np.eye(3),
            torquescale=1.0,
            ref1=0.0,
            ref2=0.0,
            polycoef=np.zeros(5),
            solref=solref,
            solimp=imp,
            active=float(bool(m.eq_active0[e])),
        )
        if typ == _EQ_JOINT:
            row["body1"] = joint_q[o1]
            row["ref1"] = float(m.qpos0[m.jnt_qposadr[o1]])
            row["polycoef"] = data[:5]
            w = float(m.dof_invweight0[m.jnt_dofadr[o1]])
            if o2 >= 0:
                row["body2"] = joint_q[o2]
                row["ref2"] = float(m.qpos0[m.jnt_qposadr[o2]])
                w += float(m.dof_invweight0[m.jnt_dofadr[o2]])
            row["diag"] = [w]
            rows.append(row)
            continue
        site = int(m.eq_objtype[e]) == _OBJ_SITE
        sides, mj_bodies = [], []
        for j, o in enumerate((o1, o2)):
            mb = int(m.site_bodyid[o]) if site else o
            b, T = place[mb]
            if site:
                X, off, rel = _compose(T, _local_frame(m, "site", o)), np.zeros(3), np.eye(3)
            elif typ == _EQ_CONNECT:
                X, off, rel = T, data[3 * j : 3 * j + 3], np.eye(3)
            else:  # weld: point1 = body1 * data[3:6], point2 = body2 * data[0:3]
                X, off = T, data[3 - 3 * j : 6 - 3 * j]
                rel = _quat_to_mat(data[6:10]) if j == 0 else np.eye(3)
            R, p = X
            sides.append((int(remap(b)) if b >= 0 else -1, R @ off + p, R @ rel))
            mj_bodies.append(mb)
        if sides[0][0] < 0 and sides[1][0] < 0:
            continue  # both fixed to the world: no effect on the motion
        (row["body1"], row["point1"], row["rot1"]), (row["body2"], row["point2"], row["rot2"]) = (
            sides
        )
        iw = np.asarray(m.body_invweight0, float).reshape(-1, 2)
        t = iw[mj_bodies[0], 0] + iw[mj_bodies[1], 0]
        if typ == _EQ_CONNECT:
            row["diag"] = [t] * 3
        else:
            r = iw[mj_bodies[0], 1] + iw[mj_bodies[1], 1]
            row["diag"] = [t] * 3 + [r] * 3
            row["torquescale"] = float(data[10])
        rows.append(row)
    if not rows:
        return None

    def arr(key):
        return jnp.asarray(np.asarray([r[key] for r in rows], float), dtype)

    return Equalities(
        point1=arr("point1"),
        point2=arr("point2"),
        rot1=arr("rot1"),
        rot2=arr("rot2"),
        torquescale=arr("torquescale"),
        ref1=arr("ref1"),
        ref2=arr("ref2"),
        polycoef=arr("polycoef"),
        solref=arr("solref"),
        solimp=arr("solimp"),
        diag=jnp.asarray(np.concatenate([r["diag"] for r in rows]), dtype),
        active=arr("active"),
        kind=tuple(r["kind"] for r in rows),
        body1=tuple(int(r["body1"]) for r in rows),
        body2=tuple(int(r["body2"]) for r in rows),
        refsafe=not dis("mjDSBL_REFSAFE"),
        # MuJoCo >= 3.7.0 takes the connect / weld rows' Jdot v into aref (its changelog;
        # commit 412cee2 "Add Jdot correction for connect and weld constraints")
        with_drift=_mujoco_has_jdotv(mujoco),
    )


# ------------------------------------------------------------------------------- dispatch
def _root_tag(source) -> str:
    try:
        if _is_xml_text(source):
            return ET.fromstring(source).tag
        for _, el in ET.iterparse(os.fspath(source), events=("start",)):
            return el.tag
    except ET.ParseError as e:
        raise ValueError(f"load: {_source_label(source)}: not well-formed XML: {e}") from None
    raise ValueError(f"load: {_source_label(source)}: empty file")  # pragma: no cover


def load(source: str | os.PathLike, **kwargs: Any) -> Model | ClusterModel:
    """Load a robot file, dispatching on its root element.

    ``<robot>``: URDF or URDF+ (:func:`jaxdyn.load_urdf`: a :class:`jaxdyn.Model`, or a
    :class:`jaxdyn.clusters.ClusterModel` for a file with loop tags); ``<mujoco>``: MJCF
    (:func:`jaxdyn.load_mjcf`, returning its ``.model``; call ``load_mjcf`` for the contacts,
    constraints and actuators). ``kwargs`` go to that loader (``trusted=True``: MJCF only).
    ``source``: a path or the XML text.
    """
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"load: source must be a path or XML text, got {type(source).__name__}")
    if not _is_xml_text(source) and not os.path.isfile(os.fspath(source)):
        raise FileNotFoundError(f"load: no such file: {os.fspath(source)!r}")
    tag = _root_tag(source)
    if tag == "robot":
        from .urdf import load_urdf

        return load_urdf(source, **kwargs)
    if tag == "mujoco":
        return load_mjcf(source, **kwargs).model
    raise ValueError(
        f"load: {_source_label(source)}: root element <{tag}>; expected <robot> (URDF) or "
        "<mujoco> (MJCF)"
    )

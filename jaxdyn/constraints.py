"""Bilateral constraints on frames: 6D welds and 3D point ("connect") constraints.

A constraint fixes a frame attached to a body of the tree with respect to the world:

* :class:`Weld` -- 6D: the frame's spatial velocity ``[ω; v]`` (6 rows, jaxdyn's
  ``[angular; linear]`` order);
* :class:`Connect` -- 3D: the velocity ``v`` of one point of the frame (3 rows, linear only).

Rows are expressed in the *constraint frame*: ``reference="local"`` uses the frame's own axes
(rotated by ``rotation`` for a weld), ``reference="local_world_aligned"`` (alias
``"world_aligned"``) uses the world axes at the constraint point. The constraint point is the
frame origin moved by ``offset`` (given in frame coordinates), e.g. a corner of a sole.

A set of constraints is a tuple of these (frozen, hashable) objects; the Delassus matrix
``J M^-1 J^T`` and every other quantity stacks their rows in the order given. Everything static
that an algorithm needs (constraint frames and bodies, row layout, the branching structure of
:mod:`jaxdyn.osim`) is derived once per ``(model.topo, constraints)`` and cached.

Link-level form (Sathya et al. 2024, "PV-OSIMr", eq. 3): the constraints on body ``i`` read
``K_i a_i = k_i`` where ``a_i`` is the body's spatial acceleration. jaxdyn works in world
coordinates, so here ``a_i`` is the world-origin spatial acceleration of body ``i`` and ``K_i``
is ``(m_i, 6)`` (:func:`link_constraint_matrices`). The constraint Jacobian is
``J[r] = k_r^T S`` over the coordinates supporting the body (:func:`constraint_jacobian`).

Acceleration-level convention (as Pinocchio's rigid constraints; checked against
``pin.constraintDynamics`` in the tests): ``J qdd + Jdot v`` is

* weld: the constraint frame's spatial acceleration ``[dω/dt; d²p/dt² - ω x dp/dt]`` at the
  constraint point, in the frame's axes (``local``: the time derivative of the local spatial
  velocity) or in world axes (``local_world_aligned``);
* connect: the point's classical acceleration ``d²p/dt²``, in world axes or rotated into the
  frame's axes (``R^T d²p/dt²``).

:func:`constraint_drift` returns ``Jdot v`` (the value at ``qdd = 0``, without gravity).

Pinocchio: :meth:`jaxdyn.interop.pinocchio.Converter.constraint_models_to_pin` builds the
equivalent ``RigidConstraintModel`` s (weld -> ``CONTACT_6D``, connect -> ``CONTACT_3D``,
``local`` -> ``LOCAL``, ``local_world_aligned`` -> ``LOCAL_WORLD_ALIGNED``) and
:meth:`~jaxdyn.interop.pinocchio.Converter.constraint_rows_to_pin` the row permutation (a
weld's rows are ``[angular; linear]`` here, ``[linear; angular]`` in Pinocchio).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import batching, shell, spatial
from ._precision import full_precision
from .algorithms import kinematics as kin
from .model import tree
from .spatial import log3

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike

    from .model.model import Model


__all__ = [
    "Weld",
    "Connect",
    "REFERENCES",
    "constraint_jacobian",
    "constraint_rows",
    "link_constraint_matrices",
    "constraint_velocity",
    "constraint_drift",
    "constraint_error",
    "constraint_placements",
]

#: accepted values of ``reference`` (``"world_aligned"`` is an alias of the second)
REFERENCES = ("local", "local_world_aligned")
_ALIASES = {
    "world_aligned": "local_world_aligned",
    "local_world_aligned": "local_world_aligned",
    "local": "local",
}


def _vec3(name, what, x):
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {what} must be 3 numbers, got {x!r}") from None
    if a.shape != (3,) or not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: {what} must be 3 finite numbers, got {x!r}")
    return tuple(float(v) for v in a)


def _rot(name, what, x):
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {what} must be a 3x3 rotation matrix, got {x!r}") from None
    if a.shape != (3, 3) or not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: {what} must be a 3x3 rotation matrix, got shape {a.shape}")
    if np.max(np.abs(a @ a.T - np.eye(3))) > 1e-6 or np.linalg.det(a) < 0:
        raise ValueError(f"{name}: {what} is not a rotation matrix (R R^T != 1 or det < 0)")
    return tuple(tuple(float(v) for v in row) for row in a)


def _check_frame(name, frame):
    if isinstance(frame, (bool, np.bool_)) or not isinstance(frame, (str, int, np.integer)):
        raise ValueError(f"{name}: frame must be a frame name or index, got {frame!r}")
    return frame if isinstance(frame, str) else int(frame)


def _check_reference(name, reference):
    if reference not in _ALIASES:
        raise ValueError(
            f"{name}: reference must be one of {REFERENCES} (or 'world_aligned'), got {reference!r}"
        )
    return _ALIASES[reference]


def _without_target(self) -> bool:
    """``eager_static()`` of :class:`Weld` and :class:`Connect`: whether an eager call may
    compile the constraint into its program (a key of ``jaxdyn.eager.compiled``): its
    geometry alone, no ``target`` (targets change along a trajectory: a program per value
    would compile at every step; see :func:`_split_target`)."""
    return self.target is None


def _split_target(self):
    """``eager_split()`` of :class:`Weld` and :class:`Connect` with a target: the description
    without it (static, part of the eager program's key) and the target's numbers as arrays
    (the program's operands), so an eager call along a trajectory compiles once, not per
    target value (``jaxdyn.eager.compiled``; :func:`_join_target` puts them back)."""
    parts = self.target if self.dim == 6 else (self.target,)
    return dataclasses.replace(self, target=None), tuple(np.asarray(x) for x in parts)


def _join_target(self, arrays):
    """The description with the target ``arrays`` of :func:`_split_target` (arrays or tracers,
    set without ``__post_init__``'s conversion to Python numbers)."""
    out = dataclasses.replace(self)
    object.__setattr__(out, "target", tuple(arrays) if self.dim == 6 else arrays[0])
    return out


@dataclass(frozen=True)
class Weld:
    """6D weld of a frame to the world (all relative motion blocked).

    **Arguments:**

    - ``frame``: frame name (any URDF link or joint of the model) or index.
    - ``reference``: ``"local"`` (rows in the constraint frame's axes) or
      ``"local_world_aligned"`` / ``"world_aligned"`` (world axes at the constraint point).
    - ``offset``: position of the constraint frame in ``frame`` (3 numbers).
    - ``rotation``: orientation of the constraint frame in ``frame`` (3x3), identity if ``None``.
    - ``target``: world placement ``(R (3x3), p (3,))`` the frame is welded to; only needed for
      the position part of Baumgarte stabilisation (:func:`jaxdyn.constrained_aba`).
    - ``name``: label used in error messages (defaults to ``weld(<frame>)``).
    - ``error``: the position-level error of Baumgarte stabilisation (:func:`constraint_error`):
      ``"log6"`` (default) Pinocchio's ``log6(M*^-1 M)``, as Crocoddyl's ``ContactModel6D``;
      ``"decoupled"`` the rotation vector of the relative rotation beside the position
      difference, as MuJoCo's weld equality (what :func:`jaxdyn.load_mjcf` creates). The two
      agree to first order; they differ where the frame is far from its target.

    Rows (6): ``[angular; linear]`` velocity of the constraint frame, in ``reference`` axes.
    """

    frame: str | int
    reference: str = "local"
    offset: tuple | np.ndarray = (0.0, 0.0, 0.0)  # an array is stored as a tuple
    rotation: tuple | np.ndarray | None = None
    target: tuple | None = None
    name: str | None = None
    error: str = "log6"

    dim = 6
    kind = "weld"

    eager_static = _without_target
    eager_split = _split_target
    eager_join = _join_target

    def __post_init__(self):
        label = self.name or f"Weld({self.frame!r})"
        object.__setattr__(self, "frame", _check_frame(label, self.frame))
        object.__setattr__(self, "reference", _check_reference(label, self.reference))
        object.__setattr__(self, "offset", _vec3(label, "offset", self.offset))
        if self.error not in ("log6", "decoupled"):
            raise ValueError(f"{label}: error must be 'log6' or 'decoupled', got {self.error!r}")
        if self.rotation is not None:
            object.__setattr__(self, "rotation", _rot(label, "rotation", self.rotation))
        if self.target is not None:
            try:
                R, p = self.target
            except (TypeError, ValueError):
                raise ValueError(f"{label}: target must be a pair (R (3x3), p (3,))") from None
            object.__setattr__(
                self,
                "target",
                (_rot(label, "target rotation", R), _vec3(label, "target position", p)),
            )

    @property
    def label(self) -> str:
        return self.name or f"Weld({self.frame!r}, reference={self.reference!r})"


@dataclass(frozen=True)
class Connect:
    """3D point constraint ("connect", ball-socket to the world) on a point of a frame.

    **Arguments:**

    - ``frame``: frame name or index.
    - ``reference``: ``"local"`` (rows along the frame's axes) or ``"local_world_aligned"`` /
      ``"world_aligned"`` (world axes).
    - ``offset``: the constrained point in ``frame`` coordinates (e.g. a sole corner).
    - ``target``: world position ``p (3,)`` the point is attached to (Baumgarte only).
    - ``name``: label used in error messages.

    Rows (3): the point's linear velocity, in ``reference`` axes.
    """

    frame: str | int
    reference: str = "local"
    offset: tuple | np.ndarray = (0.0, 0.0, 0.0)  # an array is stored as a tuple
    target: tuple | None = None
    name: str | None = None

    dim = 3
    kind = "connect"

    eager_static = _without_target
    eager_split = _split_target
    eager_join = _join_target

    def __post_init__(self):
        label = self.name or f"Connect({self.frame!r})"
        object.__setattr__(self, "frame", _check_frame(label, self.frame))
        object.__setattr__(self, "reference", _check_reference(label, self.reference))
        object.__setattr__(self, "offset", _vec3(label, "offset", self.offset))
        if self.target is not None:
            object.__setattr__(self, "target", _vec3(label, "target", self.target))

    @property
    def label(self) -> str:
        return self.name or (
            f"Connect({self.frame!r}, reference={self.reference!r}, offset={self.offset})"
        )

    @property
    def rotation(self) -> None:
        return None


CONSTRAINT_TYPES = (Weld, Connect)


# ============================================================================ static layout
class ConstraintLayout:
    """Static description of a constraint set on a model (numpy; built once, cached).

    Attributes: ``m`` (rows), per constraint ``frame`` (index), ``body`` (body index),
    ``dim``, ``row0``, ``local`` (bool), ``R_off``/``p_off`` (constraint frame in the model
    frame), and per row ``row_body``, ``row_constraint``, ``row_select`` (row of the 6-row
    weld block that the row is: 0..5).
    """

    def __init__(self, topo, constraints):
        self.constraints = constraints
        nc = len(constraints)
        self.nc = nc
        self.frame = np.zeros(nc, np.int64)
        self.body = np.zeros(nc, np.int64)
        self.dim = np.zeros(nc, np.int64)
        self.local = np.zeros(nc, bool)
        self.log6 = np.zeros(nc, bool)  # welds whose error is log6 (else decoupled)
        self.R_off = np.zeros((nc, 3, 3))
        self.p_off = np.zeros((nc, 3))
        for i, c in enumerate(constraints):
            f = _frame_index(topo, c, i)
            b = int(topo.frame_parent[f])
            if b < 0:
                raise ValueError(
                    f"constraints[{i}] {c.label}: frame {topo.frame_names[f]!r} is fixed to the "
                    f"world in {topo.name!r}, so the constraint has no effect (zero Jacobian); "
                    "constrain a moving frame"
                )
            self.frame[i], self.body[i], self.dim[i] = f, b, c.dim
            self.local[i] = c.reference == "local"
            self.log6[i] = c.dim == 6 and getattr(c, "error", "log6") == "log6"
            self.R_off[i] = np.eye(3) if c.rotation is None else np.asarray(c.rotation)
            self.p_off[i] = np.asarray(c.offset)
        self.row0 = np.concatenate([[0], np.cumsum(self.dim)[:-1]]).astype(np.int64)
        self.m = int(self.dim.sum())
        rc, rs = [], []
        for i in range(nc):
            rc += [i] * int(self.dim[i])
            rs += list(range(6)) if self.dim[i] == 6 else [3, 4, 5]
        self.row_constraint = np.asarray(rc, np.int64)
        self.row_select = np.asarray(rs, np.int64)
        self.row_body = self.body[self.row_constraint]
        self.row_flat = self.row_constraint * 6 + self.row_select  # into (nc*6,)
        self.any_local = bool(self.local.any())
        self.all_local = bool(self.local.all())


def _frame_index(topo, c, i):
    f = c.frame
    names = topo.frame_names
    if isinstance(f, str):
        if f not in names:
            raise ValueError(
                f"constraints[{i}] {c.label}: no frame named {f!r} in "
                f"{topo.name!r}; frames are {list(names)}"
            )
        return names.index(f)
    if not 0 <= f < len(names):
        raise ValueError(
            f"constraints[{i}] {c.label}: frame index {f} out of range "
            f"[0, {len(names)}) for {topo.name!r}"
        )
    return int(f)


def check_constraints(fn, constraints) -> tuple:
    """Normalise ``constraints`` to a non-empty tuple of :class:`Weld` / :class:`Connect`."""
    if isinstance(constraints, CONSTRAINT_TYPES):
        constraints = (constraints,)
    try:
        constraints = tuple(constraints)
    except TypeError:
        raise ValueError(
            f"{fn}: constraints must be a sequence of jaxdyn.constraints.Weld / "
            f"Connect, got {type(constraints).__name__}"
        ) from None
    if not constraints:
        raise ValueError(f"{fn}: constraints is empty")
    for i, c in enumerate(constraints):
        if not isinstance(c, CONSTRAINT_TYPES):
            raise ValueError(
                f"{fn}: constraints[{i}] is a {type(c).__name__}, expected "
                "jaxdyn.constraints.Weld or Connect"
            )
    return constraints


@functools.lru_cache(maxsize=256)
def layout(topo, constraints) -> ConstraintLayout:
    """The cached :class:`ConstraintLayout` of ``constraints`` on a model topology."""
    return ConstraintLayout(topo, constraints)


def get_layout(fn, model, constraints):
    """``(constraints, layout)``: the normalised descriptions and their cached layout, which
    depends on their geometry alone (a target may be an array or a tracer, inside an eager
    call's program: :func:`_split_target`)."""
    constraints = check_constraints(fn, constraints)
    return constraints, layout(model.topo, geometry(constraints))


def geometry(constraints) -> tuple:
    """The descriptions without their targets: the key of the cached structures (layouts,
    Delassus plans), which a target held as an array or tracer could not be."""
    return tuple(
        c if c.target is None else dataclasses.replace(c, target=None) for c in constraints
    )


# ============================================================================ runtime pieces
class Placements(NamedTuple):
    R: jax.Array  # (nc, 3, 3) world orientation of each constraint frame
    p: jax.Array  # (nc, 3) world position of each constraint point


def placements_from_state(model, ws, lay) -> Placements:
    """World placement of every constraint frame (body placement * frame * offset)."""
    dt = ws.R.dtype
    Rb, pb = ws.R[lay.body], ws.p[lay.body]
    Rf, pf = model.frame_R[lay.frame], model.frame_p[lay.frame]
    R_off, p_off = jnp.asarray(lay.R_off, dt), jnp.asarray(lay.p_off, dt)
    Rbf = spatial.mm(Rb, Rf)
    return Placements(spatial.mm(Rbf, R_off), spatial.mv(Rbf, p_off) + spatial.mv(Rb, pf) + pb)


def _axes(lay, R):
    """Rotation ``A`` applied to world-axes rows: ``R^T`` (local) or the identity."""
    eye = jnp.broadcast_to(jnp.eye(3, dtype=R.dtype), R.shape)
    if lay.all_local:
        return jnp.swapaxes(R, -1, -2)
    if not lay.any_local:
        return eye
    return jnp.where(jnp.asarray(lay.local)[:, None, None], jnp.swapaxes(R, -1, -2), eye)


def rows_from_placements(lay, pl: Placements):
    """Constraint rows ``k_r (m, 6)`` acting on world-origin spatial motions of the bodies.

    A weld block is ``[[A, 0], [-A [p]x, A]]`` (angular rows, then the velocity of the point
    ``p``), ``A = R^T`` (local) or ``1`` (world-aligned); a connect keeps the 3 linear rows.
    """
    A = _axes(lay, pl.R)
    P = spatial.skew(pl.p)
    Z = jnp.zeros_like(A)
    top = jnp.concatenate([A, Z], -1)
    bot = jnp.concatenate([-spatial.mm(A, P), A], -1)
    K6 = jnp.concatenate([top, bot], -2)  # (nc, 6, 6)
    return K6.reshape(-1, 6)[lay.row_flat]


@shell.public("constraint_rows")
def constraint_rows(
    model: Model, q: ArrayLike, constraints: Sequence[Weld | Connect]
) -> tuple[Array, np.ndarray]:
    """Rows ``K (m, 6)`` of all constraints: ``J qdd`` rows act on world-origin spatial
    accelerations of the constrained bodies, ``y_r = K[r] · a_{body(r)}``; also returns the
    body of each row (numpy, static)."""
    constraints, lay = get_layout("constraint_rows", model, constraints)
    model, q, _ = shell.prepare(model, "constraint_rows", q)
    ws = kin.world_state(model, q)
    return rows_from_placements(lay, placements_from_state(model, ws, lay)), lay.row_body


def jacobian_from_rows(model, ws, lay, K):
    """``J (m, nv)``: ``J[r, c] = K[r] · S_c`` for the coordinates ``c`` supporting the row's
    body, else 0."""
    mask = model.topo.body_dof_support[lay.row_body]  # (m, nv)
    return jnp.where(jnp.asarray(mask), K @ ws.S.T, 0)


@shell.public("constraint_jacobian", words=batching.kinematics_words)
@full_precision
def constraint_jacobian(model: Model, q: ArrayLike, constraints: Sequence[Weld | Connect]) -> Array:
    """Constraint Jacobian ``J (m, nv)``: rows of the constraints in the order given, each in
    jaxdyn's ``[angular; linear]`` order in its constraint frame (3D connect: linear only).

    ``J v`` is the constraint velocity; for a weld with ``reference="local"`` it equals
    ``jaxdyn.jacobian(model, q, frame, "local")`` (with ``offset`` / ``rotation`` applied).
    """
    fn = "constraint_jacobian"
    constraints, lay = get_layout(fn, model, constraints)
    model, q, _ = shell.prepare(model, fn, q)
    ws = kin.world_state(model, q)
    K = rows_from_placements(lay, placements_from_state(model, ws, lay))
    return jacobian_from_rows(model, ws, lay, K)


@shell.public("link_constraint_matrices")
def link_constraint_matrices(
    model: Model, q: ArrayLike, constraints: Sequence[Weld | Connect]
) -> tuple[tuple[int, ...], tuple[Array, ...]]:
    """Per-link constraint matrices ``K_i`` (PV-OSIMr paper, eq. 3).

    **Returns:** ``(links, K)``: ``links`` a tuple of body indices (each constrained body once,
    in order of first appearance), ``K`` a tuple of ``(m_i, 6)`` arrays stacking the rows of
    the constraints on that body (in constraint order), acting on the body's world-origin
    spatial acceleration.
    """
    fn = "link_constraint_matrices"
    constraints, lay = get_layout(fn, model, constraints)
    Kall, row_body = constraint_rows(model, q, constraints)
    links = tuple(dict.fromkeys(int(b) for b in row_body))
    return links, tuple(Kall[np.nonzero(row_body == b)[0]] for b in links)


# ------------------------------------------------------------------ velocities, drift, errors
def _body_motion(model, ws, v):
    """World-origin body velocities and accelerations at ``qdd = 0`` without gravity."""
    vel, vJ = kin.body_velocities(model, ws, v)
    acc = tree.forward_accumulate(
        model.topo, spatial.motion_cross(vel, vJ), jnp.zeros(6, vel.dtype)
    )
    return vel, acc


def kinematic_terms(model, ws, v, lay, pl: Placements):
    """Constraint velocity ``y = J v`` and drift ``Jdot v`` (see the module docstring)."""
    return point_terms(lay, pl, *_body_motion(model, ws, v))


def point_terms(lay, pl: Placements, vel, acc):
    """``(J v, J qdd + Jdot v)`` from the bodies' world-origin spatial velocities ``vel`` and
    accelerations ``acc`` (without gravity's fictitious root acceleration) at ``(v, qdd)``:
    the velocity and acceleration rows of each constraint frame at its point (``qdd = 0``:
    :func:`kinematic_terms`'s drift; the accelerations of RNEA's outward pass, less gravity's:
    the constraint acceleration ``J qdd + Jdot v`` without ``J``)."""
    vb, ab = vel[lay.body], acc[lay.body]
    w, v0 = vb[:, :3], vb[:, 3:]
    al, a0 = ab[:, :3], ab[:, 3:]
    p = pl.p
    pdot = v0 + spatial.cross(w, p)
    pddot = a0 + spatial.cross(al, p) + spatial.cross(w, pdot)
    A = _axes(lay, pl.R)
    ang_v = spatial.mv(A, w)
    lin_v = spatial.mv(A, pdot)
    # weld: spatial acceleration of the frame at the point, linear part p'' - w x p'
    weld_lin_acc = pddot - spatial.cross(w, pdot)
    is_weld = jnp.asarray(lay.dim == 6)[:, None]
    lin_a = spatial.mv(A, jnp.where(is_weld, weld_lin_acc, pddot))
    ang_a = spatial.mv(A, al)
    y = jnp.concatenate([ang_v, lin_v], -1).reshape(-1)[lay.row_flat]
    drift = jnp.concatenate([ang_a, lin_a], -1).reshape(-1)[lay.row_flat]
    return y, drift


@shell.public("constraint_velocity", words=batching.kinematics_words)
def constraint_velocity(
    model: Model, q: ArrayLike, v: ArrayLike, constraints: Sequence[Weld | Connect]
) -> Array:
    """Constraint velocity ``J v`` ``(m,)``."""
    fn = "constraint_velocity"
    constraints, lay = get_layout(fn, model, constraints)
    v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    model, q, dt = shell.prepare(model, fn, q, v)
    ws = kin.world_state(model, q)
    return kinematic_terms(model, ws, v.astype(dt), lay, placements_from_state(model, ws, lay))[0]


@shell.public("constraint_drift", words=batching.kinematics_words)
def constraint_drift(
    model: Model, q: ArrayLike, v: ArrayLike, constraints: Sequence[Weld | Connect]
) -> Array:
    """``Jdot v`` ``(m,)``: the constraint acceleration at ``qdd = 0`` (no gravity), so that
    the constraint acceleration is ``J qdd + Jdot v`` (conventions in the module docstring)."""
    fn = "constraint_drift"
    constraints, lay = get_layout(fn, model, constraints)
    v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    model, q, dt = shell.prepare(model, fn, q, v)
    ws = kin.world_state(model, q)
    return kinematic_terms(model, ws, v.astype(dt), lay, placements_from_state(model, ws, lay))[1]


def target_arrays(fn, constraints, lay, targets, dtype):
    """Per-constraint target rotation (nc,3,3) and position (nc,3) from the constraints'
    ``target`` fields, overridden by ``targets[i]`` where given."""
    nc = lay.nc
    if targets is not None:
        targets = tuple(targets)
        if len(targets) != nc:
            raise ValueError(
                f"{fn}: targets has {len(targets)} entries, expected one per "
                f"constraint ({nc}; None keeps the constraint's own target)"
            )
    Rs, ps = [], []
    for i, c in enumerate(constraints):
        t = targets[i] if targets is not None and targets[i] is not None else c.target
        if t is None:
            raise ValueError(
                f"{fn}: constraints[{i}] {c.label} has no target; Baumgarte "
                "position stabilisation (kp != 0) needs one (set target= on the "
                "constraint or pass targets=)"
            )
        if c.dim == 6:
            try:
                R, p = t
            except (TypeError, ValueError):
                raise ValueError(
                    f"{fn}: target of constraints[{i}] {c.label} must be a pair (R (3,3), p (3,))"
                ) from None
            R, p = jnp.asarray(R, dtype), jnp.asarray(p, dtype)
            if R.shape != (3, 3) or p.shape != (3,):
                raise ValueError(
                    f"{fn}: target of constraints[{i}] {c.label} must be (R (3,3), "
                    f"p (3,)), got shapes {R.shape}, {p.shape}"
                )
        else:
            R, p = jnp.eye(3, dtype=dtype), jnp.asarray(t, dtype)
            if p.shape != (3,):
                raise ValueError(
                    f"{fn}: target of constraints[{i}] {c.label} must be a point "
                    f"(3,), got shape {p.shape}"
                )
        Rs.append(R)
        ps.append(p)
    return spatial.stack(Rs), spatial.stack(ps)


def error_from_placements(lay, pl: Placements, Rt, pt):
    """Position-level error rows: connect ``A (p - p*)`` (``A`` the row axes); weld with
    ``error="log6"``: ``log6(M*^-1 M)`` (Pinocchio's, as Crocoddyl's ``ContactModel6D``;
    jaxdyn's ``[angular; linear]`` order) in the frame's axes (local) or rotated to world axes
    (world-aligned): ``[w; V(w)^-1 R*^T (p - p*)]`` with ``w = log3(R*^T R)``; weld with
    ``error="decoupled"`` (MuJoCo's weld): ``[log3(R*^T R); R^T (p - p*)]`` (local) or
    ``[log3(R R*^T); p - p*]`` (world-aligned)."""
    A = _axes(lay, pl.R)
    dp = spatial.mv(A, pl.p - pt)  # connect rows, and the decoupled welds' linear rows
    if not np.any(lay.dim == 6):  # connects only: no rotation error to compute
        return dp.reshape(-1)[lay.row_flat - 3 * lay.row_constraint - 3]
    Rtt = jnp.swapaxes(Rt, -1, -2)
    local = jnp.asarray(lay.local)[:, None]
    rows = []
    if lay.log6.any():
        w = log3(spatial.mm(Rtt, pl.R))
        lin = spatial.mv(spatial.left_jacobian_so3_inv(w), spatial.mv(Rtt, pl.p - pt))
        w = jnp.where(local, w, spatial.mv(pl.R, w))
        lin = jnp.where(local, lin, spatial.mv(pl.R, lin))
        rows.append(jnp.concatenate([w, lin], -1))
    if not lay.log6.all():
        rel = jnp.where(local[..., None], spatial.mm(Rtt, pl.R), spatial.mm(pl.R, Rtt))
        rows.append(jnp.concatenate([log3(rel), dp], -1))
    if len(rows) == 2:
        is_log6 = jnp.asarray(lay.log6)[:, None]
        err = jnp.where(is_log6, rows[0], rows[1])
    else:
        err = rows[0]
    is_weld = jnp.asarray(lay.dim == 6)[:, None]
    err = jnp.concatenate([err[:, :3], jnp.where(is_weld, err[:, 3:], dp)], -1)
    return err.reshape(-1)[lay.row_flat]


@shell.public("constraint_error", words=batching.kinematics_words)
def constraint_error(
    model: Model,
    q: ArrayLike,
    constraints: Sequence[Weld | Connect],
    targets: Sequence[tuple | ArrayLike | None] | None = None,
) -> Array:
    """Position-level constraint error ``(m,)`` with respect to the targets (see
    :func:`error_from_placements`); its time derivative is ``J v`` to first order."""
    fn = "constraint_error"
    constraints, lay = get_layout(fn, model, constraints)
    model, q, dt = shell.prepare(model, fn, q)
    ws = kin.world_state(model, q)
    Rt, pt = target_arrays(fn, constraints, lay, targets, dt)
    return error_from_placements(lay, placements_from_state(model, ws, lay), Rt, pt)


@shell.public("constraint_placements", words=batching.kinematics_words)
def constraint_placements(
    model: Model, q: ArrayLike, constraints: Sequence[Weld | Connect]
) -> Placements:
    """World placement ``(R (nc,3,3), p (nc,3))`` of every constraint frame / point."""
    fn = "constraint_placements"
    constraints, lay = get_layout(fn, model, constraints)
    model, q, _ = shell.prepare(model, fn, q)
    return placements_from_state(model, kin.world_state(model, q), lay)

"""Recursive Newton-Euler algorithm (inverse dynamics), in body and in world coordinates.

Reference: Featherstone 2008, Alg. 5.1 (RNEA, Table 5.1): :func:`rnea_local` in body
coordinates, :func:`rnea_world` written in ground coordinates (Featherstone 2008 §5.3; the
form IDSVA builds on, Singh, Russell & Wensing 2022, Alg. 1), on the world state the other
algorithms share (ABA's bias forces, the simulator, the cluster baselines, the IIM);
:func:`joint_forces` picks one of them for :func:`jaxdyn.rnea` (and :func:`rnea_plain`). On the
CPU the world form runs as a C kernel (:func:`jaxdyn.backend.rnea_kernel.rnea_kernel`,
``jaxdyn/backend/_rnea_kernel.h``), one sample per vector lane; XLA's code stays for
derivatives, batches of models, ``jax.export`` and other backends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from .. import batching, shell, spatial
from .._precision import full_precision
from ..backend import fusion
from ..backend import rnea_kernel as kernel
from ..backend.crba_kernel import kernel_usable
from ..model import tree
from . import kinematics as kin

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..model.model import Model
    from .kinematics import WorldState


def external_forces_world(model: Model, ws: WorldState, f_ext: Array) -> Array:
    """Per-body spatial forces given in body coordinates, expressed at the world origin."""
    return spatial.act_force(ws.R, ws.p, f_ext)


def check_f_ext(
    fn: str, model: Model, f_ext: ArrayLike | None, dtype: DTypeLike | None = None
) -> Array | None:
    """``f_ext`` (an array or nested sequence) as an ``(nb, 6)`` array, cast to ``dtype``."""
    if f_ext is None:
        return None
    f = shell.as_array(fn, "f_ext", f_ext, (("nb", model.nb), ("6", 6)), model)
    return f if dtype is None else f.astype(dtype)


def rnea_world(
    model: Model,
    ws: WorldState,
    qd: Array,
    qdd: Array,
    f_ext: Array | None = None,
    gravity: bool = True,
    f_world: Array | None = None,
) -> tuple[Array, Array, Array, Array]:
    """World-frame RNEA on a precomputed :class:`~jaxdyn.algorithms.kinematics.WorldState`.

    Returns ``(tau, v, a, F)``: joint forces, body velocities, accelerations (``a`` holds the
    fictitious root acceleration of gravity, :func:`~jaxdyn.algorithms.kinematics.
    gravity_acceleration`, when ``gravity``) and the subtree (composite) forces
    ``F_i = sum_{j in subtree(i)} f_j``, all at the world origin. External forces: ``f_ext
    (nb, 6)`` in body coordinates, ``f_world (nb, 6)`` already at the world origin (world
    axes), both subtracted from the bodies' net forces.
    """
    t = model.topo
    dtype = ws.S.dtype
    vJ = kin.joint_velocities(model, ws, qd)
    aS = tree.dofs_to_bodies(t, ws.S * qdd[:, None])
    a0 = kin.gravity_acceleration(model, dtype) if gravity else jnp.zeros(6, dtype)
    zero = jnp.zeros(6, dtype)

    def step(lvl, _, prev, inp):
        # one outward pass for both: v_i = v_p + vJ_i and a_i = a_p + S_i qdd_i + v_i x vJ_i,
        # where v_i x vJ_i = v_p x vJ_i (vJ x vJ = 0)
        vJl, aSl = inp
        vp = tree.gather_parent(None if prev is None else prev[0], lvl, zero)
        ap = tree.gather_parent(None if prev is None else prev[1], lvl, a0)
        cur = (vp + vJl, ap + aSl + spatial.motion_cross(vp, vJl))
        cur = fusion.materialize(*cur)  # once, not in every consumer (spatial.materialize)
        return cur, cur

    v, a = tree.forward_pass(t, step, (("body", vJ), ("body", aS)))[1].flat()
    f = kin.inertia_apply(ws.mass, ws.c, ws.Ic, a) + spatial.force_cross(
        v, kin.inertia_apply(ws.mass, ws.c, ws.Ic, v)
    )
    if f_ext is not None:
        f = f - external_forces_world(model, ws, f_ext)
    if f_world is not None:
        f = f - f_world
    F = tree.backward_accumulate(t, f)
    tau = jnp.sum(ws.S * tree.bodies_to_dofs(t, F), -1)
    if model.armature is not None:
        tau = tau + model.armature * qdd
    return tau, v, a, F


def rnea_local(
    model: Model, q: ArrayLike, qd: Array, qdd: Array, f_ext: Array | None = None
) -> tuple[Array, Array, Array, Array]:
    """RNEA in body coordinates (Featherstone 2008, Alg. 5.1 / Table 5.1), the form of the
    public ``rnea`` under ``jax.vmap`` (:func:`joint_forces`): ``(tau, v, a, F)`` with the
    body velocities, accelerations and subtree forces in each body's own frame, ``f_ext
    (nb, 6)`` in body coordinates too.

    Each level's local placements ``(R, p)`` (the body in its parent) carry the parent's motion
    into the body (``v_i = iX_p v_p + S_i qd_i``, ``a_i = iX_p a_p + S_i qdd_i + v_i x S_i
    qd_i``, the root's ``a_0 = -g``) and the subtree forces back (``F_p += iX_p^T F_i``); the
    inertias and motion subspaces are the model's, constant. The world form
    (:func:`rnea_world`) needs the world placements, motion subspaces and inertias first,
    which the other algorithms share but RNEA alone does not: under ``jax.vmap`` the body
    form is the faster one on solo12 and talos_full (once its local placements are really
    stored, see :func:`jaxdyn.backend.fusion.materialize`), with ``tau = S^T F`` as six
    multiply-adds rather than a reduce, which XLA:CPU hands to YNNPACK
    (``docs/design-measurements.md``).
    """
    t = model.topo
    dtype = qd.dtype
    # stored once: every level's motion and force transforms read them (spatial.store)
    R, p = fusion.store(*kin.local_placements(model, q))
    S = model.dof_axis
    vJ = tree.dofs_to_bodies(t, S * qd[:, None])
    aS = tree.dofs_to_bodies(t, S * qdd[:, None])
    a0 = kin.gravity_acceleration(model, dtype)
    zero = jnp.zeros(6, dtype)

    def step(lvl, _, prev, inp):
        # the world, parent of depth 0, is at rest and accelerates by -g (a0)
        Rl, pl, vJl, aSl = inp
        ap = tree.gather_parent(None if prev is None else prev[1], lvl, a0)
        ap = spatial.act_inv_motion(Rl, pl, ap)
        vl = vJl
        if prev is not None:
            vl = spatial.act_inv_motion(Rl, pl, tree.gather_parent(prev[0], lvl, zero)) + vl
        # stored once for the children and the body forces: by the handler's call, which
        # the joined (nb, 6) arrays read in place (materialize's copy left a copy kernel per
        # level and array: 12 kernels more, more compile time, no faster)
        cur = fusion.store(vl, ap + aSl + spatial.motion_cross(vl, vJl))
        return cur, cur

    inputs = (("body", R), ("body", p), ("body", vJ), ("body", aS))
    v, a = tree.forward_pass(t, step, inputs)[1].flat()
    m, c, Ic = model.mass, model.com, model.inertia
    f = kin.inertia_apply(m, c, Ic, a) + spatial.force_cross(v, kin.inertia_apply(m, c, Ic, v))
    if f_ext is not None:
        f = f - f_ext

    def back(lvl, child, below, inp):
        cur, Rl, pl = inp
        if below is not None:
            cur = cur + tree.sum_into_parents(below, child, lvl.n)
        return spatial.act_force(Rl, pl, cur), cur

    F = tree.backward_pass(t, back, (("body", f), ("body", R), ("body", p)))[1].flat()
    tau = spatial.mv(S[:, None, :], tree.bodies_to_dofs(t, F), unroll=True)[:, 0]
    if model.armature is not None:
        tau = tau + model.armature * qdd
    return tau, v, a, F


def chunk_words(model: Model, itemsize: int) -> int:
    """RNEA's chunk policy (``words=`` of its public wrappers): none where its C kernel
    computes the batch (it keeps a block of samples in the cache itself, as
    :func:`jaxdyn.algorithms.crba.chunk_words`), else the transforms, velocities,
    accelerations and forces of every body, per sample."""
    if kernel_usable(model, {4: "float32", 8: "float64"}.get(itemsize, "complex128")):
        return 0
    return 48 * model.nb


#: smallest batch (of a batching rule, ``jax.vmap`` of the public functions) for which
#: :func:`joint_forces` takes the body form; single evaluations take the world form, which
#: XLA compiles to fewer kernels (faster per ``jax.jit(rnea)`` call)
LOCAL_MIN_BATCH = 64


def joint_forces_xla(
    model: Model, q: Array, qd: Array, qdd: Array, f_ext: Array | None = None
) -> Array:
    """``tau`` of RNEA in XLA's code, in the form that is faster for how the call is
    evaluated: the body form (:func:`rnea_local`) under a batching rule of at least
    :data:`LOCAL_MIN_BATCH` samples, else the world form (:func:`rnea_world`). The C kernel's
    fallback and its derivatives."""
    if batching.rule_batch_size() >= LOCAL_MIN_BATCH:
        return rnea_local(model, q, qd, qdd, f_ext)[0]
    return rnea_world(model, kin.world_state(model, q, centered=True), qd, qdd, f_ext)[0]


def joint_forces(
    model: Model, q: ArrayLike, qd: Array, qdd: Array, f_ext: Array | None = None
) -> Array:
    """``tau`` of RNEA of the prepared operands: on the CPU (float32, float64) by jaxdyn's C
    kernel (:func:`jaxdyn.backend.rnea_kernel.rnea_kernel`, the world form of
    :func:`rnea_world` in C; the switch ``cpu_kernels``), else and for derivatives by XLA's
    code (:func:`joint_forces_xla`: the body or the world form, whichever is faster for how
    the call is evaluated)."""
    q = jnp.asarray(q)
    if kernel_usable(model, q.dtype):
        return kernel.rnea_kernel(model, q, qd, qdd, f_ext, joint_forces_xla)
    return joint_forces_xla(model, q, qd, qdd, f_ext)


@shell.public("rnea", words=batching.capped_when_threaded(chunk_words))
@full_precision
def rnea_plain(
    model: Model, q: ArrayLike, v: ArrayLike, a: ArrayLike, f_ext: ArrayLike | None = None
) -> Array:
    """Inverse dynamics ``tau = M(q) a + C(q, v) v + g(q) - sum J_i^T f_ext_i``, without
    analytic derivative rules (JAX differentiates it op by op): ``jaxdyn.rnea`` is this with
    them (:mod:`jaxdyn.derivatives`); this one is their autodiff reference.

    Reference: Featherstone 2008, Alg. 5.1 (RNEA, Table 5.1). On the CPU computed by
    jaxdyn's C kernel in world coordinates (:func:`jaxdyn.backend.rnea_kernel.rnea_kernel`;
    the switch ``cpu_kernels``), elsewhere by XLA's code, in body coordinates under
    ``jax.vmap`` (:func:`rnea_local`) and in world coordinates otherwise
    (:func:`joint_forces`).

    **Arguments:**

    - ``q (nq,)``, ``v (nv,)``, ``a (nv,)``: configuration, velocity, acceleration.
    - ``f_ext (nb, 6)`` or ``None``: external spatial force ``[n; f]`` on each body, in body
      coordinates (acting at the body frame's origin).

    **Returns:** ``tau (nv,)`` (with ``model.armature * a`` added when armature is set).
    """
    fn = "rnea"
    v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    a = shell.as_array(fn, "a", a, (("nv", model.nv),), model)
    f_ext = check_f_ext(fn, model, f_ext)
    model, q, dtype = shell.prepare(model, fn, q, v, a, f_ext)
    if model.nb == 0:
        return jnp.zeros(0, dtype)
    f_ext = None if f_ext is None else f_ext.astype(dtype)
    return joint_forces(model, q, v.astype(dtype), a.astype(dtype), f_ext)


@shell.public("bias_forces", eager=True)
@full_precision
def bias_forces(model: Model, q: ArrayLike, v: ArrayLike) -> Array:
    """Coriolis, centrifugal and gravity forces ``C(q, v) v + g(q)`` (= ``rnea(q, v, 0)``)."""
    q = shell.as_array("bias_forces", "q", q, (("nq", model.nq),), model)
    v = shell.as_array("bias_forces", "v", v, (("nv", model.nv),), model)
    dtype = shell.common_dtype(q, v, model=model)
    return rnea_plain(model, q, v, jnp.zeros(model.nv, dtype))


@shell.public("gravity_forces", eager=True)
@full_precision
def gravity_forces(model: Model, q: ArrayLike) -> Array:
    """Generalised gravity ``g(q)`` (= ``rnea(q, 0, 0)``)."""
    q = shell.as_array("gravity_forces", "q", q, (("nq", model.nq),), model)
    dtype = shell.common_dtype(q, model=model)
    z = jnp.zeros(model.nv, dtype)
    return rnea_plain(model, q, z, z)


def gravity_forces_numpy(model: Model, q: ArrayLike) -> np.ndarray:
    """Generalised gravity ``g(q)`` (:func:`jaxdyn.gravity_forces`, ``rnea(q, 0, 0)``) at a
    concrete ``q``, in numpy float64, without compiling a program (a problem's gravity
    compensation before the first compile of a process). RNEA with ``v = a = 0`` (Featherstone
    2008, Alg. 5.1) in world coordinates (§5.3): each body's gravity wrench about the world
    origin, ``(c × m g, m g)`` at its centre of mass ``c``, summed over subtrees in the
    backward pass; ``g_i = -S_i^T f`` with the motion subspace ``S_i`` (``model.dof_axis``, in
    the body's frame) expressed at the world origin."""
    t = model.topo
    R, p = kin.body_placements_numpy(model, q)
    mass, com = np.asarray(model.mass, float), np.asarray(model.com, float)
    grav = np.asarray(model.gravity, float)
    axis = np.asarray(model.dof_axis, float)
    c = p + np.einsum("bij,bj->bi", R, com)
    force = mass[:, None] * grav
    f = np.concatenate([np.cross(c, force), force], axis=1)  # (nb, 6): moment at 0, force
    tau = np.zeros(model.nv)
    for b in reversed(range(t.nb)):
        v0, n = int(t.v_start[b]), int(t.nv_j[b])
        s = axis[v0 : v0 + n]  # (n, 6) in the body's frame
        w = s[:, :3] @ R[b].T
        lin = s[:, 3:] @ R[b].T + np.cross(p[b], w)  # the body's point at the world origin
        tau[v0 : v0 + n] = -(w @ f[b, :3] + lin @ f[b, 3:])
        par = int(t.parent[b])
        if par >= 0:
            f[par] += f[b]
    return tau

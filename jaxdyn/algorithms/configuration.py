"""Configuration-space operations: neutral and random configurations, ``integrate``, ``difference``.

``integrate(q, v)`` is the right increment ``q ⊕ v`` (``M exp(v)`` for free joints, ``Q exp(ω)``
for spherical ones, ``q + v`` otherwise), exactly Pinocchio's ``integrate``; ``difference`` is its
inverse, ``integrate(q0, difference(q0, q1)) == q1``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from .. import joints, shell, spatial
from .._precision import full_precision
from ..model import tree

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike, DTypeLike

    from ..model.model import Model


def _by_runs(model, fn, *arrays, widths):
    t = model.topo
    if t.nb == 0:  # zero-DoF model
        return jnp.zeros(0, arrays[0].dtype)
    out = []
    for kind, b0, b1, _, _ in tree.kind_runs(t):
        n = b1 - b0
        pieces = []
        for x, w in zip(arrays, widths):
            start = int(t.q_start[b0] if w == "q" else t.v_start[b0])
            k = (joints.NQ if w == "q" else joints.NV)[kind]
            pieces.append(x[start : start + n * k].reshape(n, k))
        out.append(fn(kind, *pieces).reshape(-1))
    return jnp.concatenate(out)


def neutral_configuration(model: Model, dtype: DTypeLike | None = None) -> Array:
    """The neutral configuration (zero angles, identity quaternions, origin), ``(nq,)``."""
    dtype = dtype or jax.dtypes.canonicalize_dtype(np.float64)  # float32 unless x64
    t = model.topo
    if t.nb == 0:
        return jnp.zeros(0, dtype)
    # a constant of the topology, assembled in numpy and put on the device in one transfer:
    # called eagerly (a script's first lines), each jnp operation here compiled a program
    one = {
        joints.ONE_DOF: [0.0],
        joints.SPHERICAL: [1.0, 0.0, 0.0, 0.0],
        joints.FREE: [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
    }
    q = np.concatenate([np.tile(one[k], b1 - b0) for k, b0, b1, _, _ in tree.kind_runs(t)])
    return jax.device_put(q.astype(jnp.dtype(dtype)))


def random_configuration(
    model: Model,
    key: ArrayLike,
    lower: float = -3.14159,
    upper: float = 3.14159,
    dtype: DTypeLike | None = None,
) -> Array:
    """A random configuration: one-DoF joints and free-joint positions uniform in
    ``[lower, upper]``, rotations uniform on SO(3)."""
    dtype = dtype or jnp.zeros(()).dtype
    t = model.topo
    if t.nb == 0:
        return jnp.zeros(0, dtype)
    runs = tree.kind_runs(t)
    keys = jax.random.split(key, len(runs))
    return jnp.concatenate(
        [
            joints.random(k, kk, b1 - b0, lower, upper, dtype).reshape(-1)
            for kk, (k, b0, b1, _, _) in zip(keys, runs)
        ]
    )


@shell.public("integrate", eager=True)
@full_precision
def integrate(model: Model, q: ArrayLike, v: ArrayLike) -> Array:
    """``q ⊕ v``: the configuration reached from ``q`` by moving with velocity ``v`` for unit
    time (right increment, as Pinocchio's ``integrate``)."""
    q = shell.as_array("integrate", "q", q, (("nq", model.nq),), model)
    v = shell.as_array("integrate", "v", v, (("nv", model.nv),), model)
    dtype = shell.common_dtype(q, v, model=model)
    return _by_runs(model, joints.integrate, q.astype(dtype), v.astype(dtype), widths=("q", "v"))


@shell.public("difference", eager=True)
@full_precision
def difference(model: Model, q0: ArrayLike, q1: ArrayLike) -> Array:
    """``q1 ⊖ q0``: the velocity ``v (nv,)`` with ``integrate(q0, v) == q1``."""
    q0 = shell.as_array("difference", "q0", q0, (("nq", model.nq),), model)
    q1 = shell.as_array("difference", "q1", q1, (("nq", model.nq),), model)
    dtype = shell.common_dtype(q0, q1, model=model)
    return _by_runs(model, joints.difference, q0.astype(dtype), q1.astype(dtype), widths=("q", "q"))


def lie_bracket(model: Model, xi: Array, y: Array) -> Array:
    """``ad_xi y`` per joint for free (SE(3), ``[w; v]``) and spherical (SO(3)) joints; zero for
    one-DoF joints (the Lie bracket of the configuration group of each joint); ``xi``, ``y``
    ``(nv,)``."""
    t = model.topo
    out = []
    for kind, _, _, v0, v1 in tree.kind_runs(t):
        x, z = xi[v0:v1], y[v0:v1]
        if kind == joints.ONE_DOF:
            out.append(jnp.zeros_like(z))
        elif kind == joints.SPHERICAL:
            x3, z3 = x.reshape(-1, 3), z.reshape(-1, 3)
            out.append(spatial.cross(x3, z3).reshape(-1))
        else:
            x6, z6 = x.reshape(-1, 6), z.reshape(-1, 6)
            out.append(spatial.motion_cross(x6, z6).reshape(-1))
    return out[0] if len(out) == 1 else jnp.concatenate(out)


def dexp_inv(model: Model, xi: Array, v: Array) -> Array:
    """``dexp^-1_{-xi}(v) = v + ad_xi v / 2 + ad_xi^2 v / 12 + O(|xi|^4)`` (:func:`lie_bracket`;
    enough for an RK4 step on the configuration manifold, Munthe-Kaas)."""
    a1 = lie_bracket(model, xi, v)
    return v + 0.5 * a1 + lie_bracket(model, xi, a1) / 12.0

"""Arrays under ``jax.vmap`` with the batch split over ``Explicit`` mesh axes (``jax.set_mesh``
of a ``jax.make_mesh``): JAX's rules that lose the batch's sharding there, worked around.
Elsewhere each function is the plain ``jnp`` one. Re-exported by :mod:`jaxdyn.spatial`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from .ffi import EXPLICIT

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array


def explicit_context() -> bool:
    """Whether the trace runs under a mesh with ``Explicit`` axes (``jax.set_mesh`` of a
    ``jax.make_mesh``, whose default axis type that is since JAX 0.7), where every array's
    type carries its sharding."""
    mesh = jax.sharding.get_abstract_mesh()
    return EXPLICIT in tuple(getattr(mesh, "axis_types", ()) or ())


def on_mesh(x: Array) -> Array:
    """``x``, replicated over the mesh in context when that mesh has ``Explicit`` axes and
    ``x`` lives on no mesh (a constant made inside a traced function, such as
    ``jnp.asarray([0.0, 0.0, 1.0])``); ``x`` itself otherwise.

    Such a constant is typed as living on no mesh at all, and where ``jax.vmap`` must broadcast
    it beside an operand whose batch is split over the mesh (a concatenation, a loop's carry)
    JAX 0.10 fails ("Resource axis ... is not found in mesh: ()"); replicated on the mesh, it
    is broadcast with the batch's sharding."""
    if not explicit_context():
        return x
    x = jnp.asarray(x)
    mesh = getattr(getattr(jax.typeof(x), "sharding", None), "mesh", None)
    reshard = getattr(jax.sharding, "reshard", None)
    if reshard is None or mesh is None or not mesh.empty:
        return x
    return reshard(x, jax.sharding.PartitionSpec())


def stack(arrays: Sequence[Any], axis: int = 0) -> Array:
    """``jnp.stack(arrays, axis)``, also under ``jax.vmap`` with the batch split over
    ``Explicit`` mesh axes. There JAX 0.10's ``stack`` primitive broadcasts an unbatched
    operand (a zero beside batched entries, as in :func:`skew`) without the batch's sharding
    and fails (``ShardingTypeError: All operands should have the same sharding``); under such
    a mesh the arrays are joined as a concatenation along a new axis, whose rule keeps the
    sharding. Elsewhere it is ``jnp.stack`` (one primitive: a smaller trace)."""
    if not explicit_context():
        return jnp.stack(arrays, axis)
    arrays = [on_mesh(jnp.asarray(a)) for a in arrays]
    axis = axis + arrays[0].ndim + 1 if axis < 0 else axis
    return jnp.concatenate([jnp.expand_dims(a, axis) for a in arrays], axis)


def concatenate(arrays: Sequence[Any], axis: int = 0) -> Array:
    """``jnp.concatenate(arrays, axis)`` where some arrays may be constants made inside the
    traced function: under a mesh with ``Explicit`` axes they are replicated over it first
    (:func:`on_mesh`); elsewhere ``jnp.concatenate``."""
    if not explicit_context():
        return jnp.concatenate(arrays, axis)
    return jnp.concatenate([on_mesh(a) for a in arrays], axis)

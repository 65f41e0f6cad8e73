"""Top-level functions that accept both a :class:`jaxdyn.Model` and a
:class:`jaxdyn.clusters.ClusterModel`.

The algorithms do not import the clusters (imports flow spatial -> joints -> model ->
algorithms -> derivatives / clusters / osim), so the dispatch on the model type lives here, above
both, and ``jaxdyn/__init__.py`` exports these.
"""

from __future__ import annotations

from .algorithms import configuration as _plain
from .clusters import state as _cluster
from .clusters.model import ClusterModel

__all__ = ["neutral_configuration", "random_configuration"]


def neutral_configuration(model, dtype=None):
    """The neutral configuration ``(nq,)`` of a model.

    - :class:`~jaxdyn.Model`: zero angles, identity quaternions, origin
      (:func:`jaxdyn.algorithms.configuration.neutral_configuration`).
    - :class:`~jaxdyn.clusters.ClusterModel`: a valid configuration of the cluster coordinates
      (:func:`jaxdyn.clusters.neutral_configuration`: joint neutral for plain joints, ``y = 0``
      for explicit clusters, the build-time solution of the loop constraints for implicit ones).
    """
    if isinstance(model, ClusterModel):
        return _cluster.neutral_configuration(model, dtype=dtype)
    return _plain.neutral_configuration(model, dtype=dtype)


def random_configuration(model, key, *args, **kwargs):
    """A random configuration ``(nq,)`` of a model, from the PRNG key ``key``.

    - :class:`~jaxdyn.Model`: ``random_configuration(model, key, lower=-3.14159,
      upper=3.14159, dtype=None)``: one-DoF joints and free-joint positions uniform in
      ``[lower, upper]``, rotations uniform on SO(3)
      (:func:`jaxdyn.algorithms.configuration.random_configuration`).
    - :class:`~jaxdyn.clusters.ClusterModel`: ``random_configuration(model, key, scale=1.0,
      steps=8, iters=12, dtype=None)``: a configuration satisfying the loop constraints
      (:func:`jaxdyn.clusters.random_configuration`).
    """
    if isinstance(model, ClusterModel):
        return _cluster.random_configuration(model, key, *args, **kwargs)
    return _plain.random_configuration(model, key, *args, **kwargs)

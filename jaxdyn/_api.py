"""Top-level functions that accept both a :class:`jaxdyn.Model` and a
:class:`jaxdyn.clusters.ClusterModel`.

The tree algorithms do not import the clusters (imports flow spatial -> joints -> model ->
algorithms -> derivatives / clusters / osim), so the functions that dispatch on the model type
live in the cluster package, above both (:mod:`jaxdyn.clusters.state`): ``jaxdyn.X`` and
``jaxdyn.clusters.X`` are the same object.
"""

from __future__ import annotations

from .clusters.state import neutral_configuration, random_configuration

__all__ = ["neutral_configuration", "random_configuration"]

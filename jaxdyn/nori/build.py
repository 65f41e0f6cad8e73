"""``build``: the offline step of Nori's method, and the inverse / forward dynamics built on it.

Paper Remark 4: the expensive, structural work is done once per model and sensor set
(:func:`build`); the run time (:func:`jaxdyn.nori.solve`, :func:`jaxdyn.nori.estimate`) only
does numeric elimination in the static order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from .. import shell
from . import analysis
from .factor import _solve, eager_checks, solve
from .sensors import ExternalWrench, JointAcceleration, JointTorque
from .structure import make_system

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model
    from .sensors import _Spec
    from .structure import NoriSystem


def build(
    model: Model,
    known: Sequence[_Spec] = (),
    sensors: Sequence[_Spec] = (),
    *,
    check: bool = True,
    check_states: Sequence[ArrayLike | tuple[ArrayLike, ArrayLike]] | None = None,
    analyze: bool = False,
    name: str | None = None,
) -> NoriSystem:
    """Assemble the structure of ``D(q, v) d = r`` for ``model`` with the given knowns and
    sensors, choose the static ordering, and check that the problem is well posed.

    **Arguments:**

    - ``model``: a :class:`jaxdyn.Model`.
    - ``known``: quantities known exactly (:mod:`jaxdyn.nori.sensors`), e.g.
      :func:`~jaxdyn.nori.inverse_dynamics_knowns` (every ``qdd`` and ``f^x``, paper eq. 8).
    - ``sensors``: measured quantities (with their ``std`` for :func:`jaxdyn.nori.estimate`).
    - ``check``: verify the well-posedness -- structural rank of the stacked rows, then
      numerical rank at ``check_states`` -- and raise ``ValueError`` naming the unobservable
      quantities (paper §VI) if it fails.
    - ``check_states``: configurations ``q`` (or ``(q, v)`` pairs) for the numerical check;
      default the neutral configuration and one random configuration.
    - ``analyze``: also run :func:`jaxdyn.nori.analysis.analyze` (worst-case pattern, scipy's
      orderings against the tree ordering, fill and flops, Property 1); the report is
      ``system.analysis``.

    **Returns:** a :class:`~jaxdyn.nori.structure.NoriSystem`; ``system.square`` tells whether
    :func:`jaxdyn.nori.solve` (tree LU) applies, otherwise use :func:`jaxdyn.nori.estimate`.
    """
    shell.as_array("nori.build", "mass", model.mass, (("nb", model.nb),), model)
    system = make_system(model, known, sensors, name=name)
    if check:
        rng = np.random.default_rng(0)
        if check_states is None:
            qs = [analysis.neutral_q(model), analysis.random_q(model, rng)]
            states = [(q, rng.normal(size=model.nv)) for q in qs]
        else:
            states = []
            for s in check_states:
                if isinstance(s, tuple):
                    q, v = s
                else:
                    q, v = s, rng.normal(size=model.nv)
                q = np.asarray(q, np.float64)
                if q.shape != (model.nq,):
                    raise ValueError(
                        f"nori.build: a check state has shape {q.shape}, expected ({model.nq},)"
                    )
                states.append((q, np.asarray(v, np.float64)))
        full = [(q, v, [rng.normal(size=shape) for shape in system.yshapes]) for q, v in states]
        system.structural_rank, system.numerical_ranks = analysis.check_well_posed(
            system, model, full, neutral_first=check_states is None
        )
    if analyze:
        analysis.analyze(system, model)
    return system


_STANDARD: dict = {}


def standard_system(model: Model, which: str) -> NoriSystem:
    """The (cached) system of inverse (``"id"``) or forward (``"fd"``) dynamics of a model's
    topology: every ``qdd`` (or ``tau``) and every ``f^x`` known."""
    key = (model.topo, getattr(model, "armature", None) is not None, which)
    system = _STANDARD.get(key)
    if system is None:
        known = (
            (JointAcceleration(), ExternalWrench())
            if which == "id"
            else (JointTorque(), ExternalWrench())
        )
        system = make_system(model, known, (), name=f"nori-{which}({model.topo.name})")
        if len(_STANDARD) > 128:
            _STANDARD.clear()
        _STANDARD[key] = system
    return system


@eager_checks
def inverse_dynamics(
    model: Model, q: ArrayLike, v: ArrayLike, a: ArrayLike, f_ext: ArrayLike | None = None
) -> Array:
    """Inverse dynamics through the sparse system (paper §IV): ``tau (nv,)``, equal to
    :func:`jaxdyn.rnea` (same arguments: ``f_ext (nb, 6)`` body-frame wrenches or ``None``).

    Solved by forward substitution in the order of Property 1 (zero fill)."""
    f_ext = jnp.zeros((model.nb, 6), jnp.result_type(a)) if f_ext is None else f_ext
    system = standard_system(model, "id")
    return solve(system, model, q, v, (a, f_ext)).tau


@eager_checks
def forward_dynamics(
    model: Model, q: ArrayLike, v: ArrayLike, tau: ArrayLike, f_ext: ArrayLike | None = None
) -> Array:
    """Forward dynamics through the sparse system (paper §V-D): ``qdd (nv,)``, equal to
    :func:`jaxdyn.aba` (same arguments); all NaN where the mass matrix is singular, as
    :func:`jaxdyn.aba`."""
    f_ext = jnp.zeros((model.nb, 6), jnp.result_type(tau)) if f_ext is None else f_ext
    system = standard_system(model, "fd")
    # a singular mass matrix gives all NaN, as jaxdyn.aba (no check)
    return _solve(system, model, q, v, (tau, f_ext), check=False).qdd

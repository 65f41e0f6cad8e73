"""The inertia-weighted input matrix ``Bhat = M^-1 B`` and the free accelerations ``qdd0``.

Reference: G. Krög, H. Gattringer, A. Müller, "Closed-form method for the inertia-weighted
input matrix utilizing O(n) forward dynamics" -- the Implicit Inversion Method (IIM), eqs.
(16)-(27), and the extended Unit Force Method (eUFM), eqs. (14)-(15).

Forward dynamics splits as ``qdd = qdd0 + Bhat u`` (eqs. 3-4): ``qdd0 = -M^-1 h`` is ABA with
zero input (velocity products and gravity) and ``Bhat = M^-1 B`` maps the inputs ``u``. The
inputs are joint torques of actuated joints and contact forces, ``B = [J_a^T, J_t^T]``
(§4; :class:`Inputs`, :func:`build_input_matrix`), or any ``(nv, nu)`` matrix.

Methods of :func:`input_matrix`:

* ``"iim"`` -- one O(n) forward-dynamics pass computes the articulated-body quantities
  (``M*_i`` = ``H^A_i``, ``M_Ri^-1`` = ``D_i^-1``, ``T*_ip`` = the force propagators
  ``P_i^T``) and ``qdd0``; they are reused for all inputs: the input bias forces ``B*``
  (eq. 16-17, a backward accumulation of each input over the tree) and the product with the
  lower unitriangular ``Γ^-1`` (eqs. 21-27), evaluated as the cascaded block inversion of
  eqs. (22)-(23) -- a forward substitution level by level, no matrix is inverted except the
  ``D_i`` already factorised by the forward pass. In jaxdyn's world coordinates ``T_ip = 1``
  and ``F_i = S_i``, so the two recursions are the backward and forward sweeps of
  :func:`jaxdyn.algorithms.aba.aba_passes` on ``nu`` right-hand sides sharing the inertias.
  With :class:`Inputs`, contact forces enter as spatial forces on their links (``B_i`` of
  eq. 17 is the link's constraint matrix), so ``J_t^T`` is never formed;
* ``"eufm"`` -- eq. (15): ``nu + 1`` full ABA evaluations (``u = 0`` and the unit inputs),
  vmapped; ``Bhat[:, i] = qdd_[i] - qdd_[0]``;
* ``"dense"`` -- CRBA, Cholesky and solves: ``qdd0 = -M^-1 h``, ``Bhat = M^-1 B``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from . import batching, joints, shell
from . import constraints as cons
from ._precision import full_precision
from .algorithms import aba as aba_mod
from .algorithms import kinematics as kin
from .algorithms.crba import crba_world
from .algorithms.rnea import rnea_world

if TYPE_CHECKING:
    from jax import Array
    from jax.typing import ArrayLike

    from .model.model import Model


__all__ = ["Inputs", "InputMatrix", "build_input_matrix", "input_matrix", "METHODS"]

METHODS = ("iim", "eufm", "dense")


@dataclass(frozen=True)
class Inputs:
    """Structured inputs ``u = [tau_a; f_c]``: torques of actuated joints, then contact forces.

    **Arguments:**

    - ``actuated``: ``"all"`` (every joint but a floating base's ``root_joint``), a tuple of
      joint names (each contributes its ``nv`` coordinates, in the order given), or ``()``.
    - ``contacts``: :class:`~jaxdyn.constraints.Weld` / :class:`~jaxdyn.constraints.Connect`
      whose constraint forces are inputs (their rows, in constraint frames).

    ``B = [J_a^T, J_t^T]`` (IIM paper, §4): ``J_a^T`` selects the actuated coordinates,
    ``J_t`` is the contacts' constraint Jacobian.
    """

    actuated: tuple | str = "all"
    contacts: tuple = ()

    def eager_static(self) -> bool:
        """Whether an eager call may compile these inputs into its program (see
        :meth:`jaxdyn.Connect.eager_static`): contacts without targets."""
        return all(c.eager_static() for c in self.contacts)

    def __post_init__(self):
        a = self.actuated
        if isinstance(a, str):
            if a != "all":
                raise ValueError(
                    f"Inputs: actuated must be 'all' or a tuple of joint names, got {a!r}"
                )
        else:
            try:
                a = tuple(a)
            except TypeError:
                raise ValueError(
                    f"Inputs: actuated must be 'all' or a tuple of joint names, got {a!r}"
                ) from None
            if not all(isinstance(x, str) for x in a):
                raise ValueError(f"Inputs: actuated must hold joint names, got {a!r}")
            if len(set(a)) != len(a):
                raise ValueError(f"Inputs: actuated lists a joint twice: {a!r}")
            object.__setattr__(self, "actuated", a)
        c = self.contacts
        if isinstance(c, cons.CONSTRAINT_TYPES):
            c = (c,)
        c = tuple(c)
        for i, x in enumerate(c):
            if not isinstance(x, cons.CONSTRAINT_TYPES):
                raise ValueError(
                    f"Inputs: contacts[{i}] is a {type(x).__name__}, expected "
                    "jaxdyn.constraints.Weld or Connect"
                )
        object.__setattr__(self, "contacts", c)


class _InputLayout:
    def __init__(self, topo, inputs: Inputs):
        if inputs.actuated == "all":
            names = [
                n
                for b, n in enumerate(topo.joint_names)
                if not (topo.parent[b] < 0 and topo.kind[b] == joints.FREE)
            ]
        else:
            names = list(inputs.actuated)
        dofs = []
        for n in names:
            if n not in topo.joint_names:
                raise ValueError(
                    f"Inputs: no joint named {n!r} in {topo.name!r}; joints are "
                    f"{list(topo.joint_names)}"
                )
            b = topo.joint_names.index(n)
            dofs += list(range(int(topo.v_start[b]), int(topo.v_start[b] + topo.nv_j[b])))
        self.dofs = np.asarray(dofs, np.int64)
        self.na = len(dofs)
        self.contacts = inputs.contacts
        self.lay = cons.layout(topo, inputs.contacts) if inputs.contacts else None
        self.mc = self.lay.m if self.lay is not None else 0
        self.nu = self.na + self.mc
        if self.nu == 0:
            raise ValueError("Inputs: no inputs (no actuated joint and no contact)")


@functools.lru_cache(maxsize=256)
def _input_layout(topo, inputs) -> _InputLayout:
    return _InputLayout(topo, inputs)


class InputMatrix(NamedTuple):
    """Result of :func:`input_matrix`: ``qdd = qdd0 + Bhat @ u``."""

    qdd0: jax.Array  # (nv,) free accelerations (u = 0)
    Bhat: jax.Array  # (nv, nu) inertia-weighted input matrix M^-1 B


def _dense_B(model, ws, il: _InputLayout):
    dt = ws.S.dtype
    cols = []
    if il.na:
        cols.append(jnp.asarray(np.eye(model.nv)[:, il.dofs], dt))
    if il.mc:
        K = cons.rows_from_placements(il.lay, cons.placements_from_state(model, ws, il.lay))
        cols.append(cons.jacobian_from_rows(model, ws, il.lay, K).T)
    return cols[0] if len(cols) == 1 else jnp.concatenate(cols, 1)


@shell.public("build_input_matrix")
def build_input_matrix(model: Model, q: ArrayLike, inputs: Inputs) -> Array:
    """``B = [J_a^T, J_t^T]`` ``(nv, nu)`` of :class:`Inputs` (generalised forces per input)."""
    fn = "build_input_matrix"
    if not isinstance(inputs, Inputs):
        raise ValueError(f"{fn}: inputs must be a jaxdyn.Inputs, got {type(inputs).__name__}")
    il = _input_layout(model.topo, inputs)
    model, q, _ = shell.prepare(model, fn, q)
    return _dense_B(model, kin.world_state(model, q), il)


def _free_terms(model, ws, v):
    """Velocity-product accelerations ``c``, bias forces ``pA`` and the gravity ``a0``."""
    _, c, pA = aba_mod.velocity_terms(model, ws, v)
    return c, pA, kin.gravity_acceleration(model, ws.S.dtype)


def _iim(model, ws, v, B, il):
    dt = ws.S.dtype
    nb, nv = model.nb, model.nv
    I6 = aba_mod.world_inertia_matrices(ws)
    # one O(n) forward-dynamics pass: articulated inertias (M*_i, M_Ri^-1) and qdd0
    inertias = aba_mod.articulated_inertias(model, ws.S, I6)
    c, pA, a0 = _free_terms(model, ws, v)
    qdd0 = aba_mod.aba_passes(
        model, ws.S, I6, pA[..., None], c, jnp.zeros((nv, 1), dt), a0[:, None], inertias
    )[0][:, 0]
    # inputs: joint torques as generalised forces, contact forces as link forces (B_i, eq. 17)
    if il is None:
        tau_u = B
        pA_u = jnp.zeros((nb, 6, B.shape[1]), dt)
    else:
        nu = il.nu
        tau_np = np.zeros((nv, nu))
        tau_np[il.dofs, np.arange(il.na)] = 1.0
        tau_u = jnp.asarray(tau_np, dt)
        if il.mc:
            K = cons.rows_from_placements(il.lay, cons.placements_from_state(model, ws, il.lay))
            P = np.zeros((nb, nu))
            P[il.lay.row_body, il.na + np.arange(il.mc)] = 1.0
            Kc = jnp.concatenate([jnp.zeros((il.na, 6), dt), K], 0)  # (nu, 6)
            pA_u = -(jnp.asarray(P, dt)[:, None, :] * Kc.T[None, :, :])
        else:
            pA_u = jnp.zeros((nb, 6, nu), dt)
    # B* (eq. 16-17, backward) and Gamma^-1 (eqs. 22-27, forward), sharing the inertias
    Bhat = aba_mod.aba_passes(
        model, ws.S, I6, pA_u, None, tau_u, jnp.zeros((6, tau_u.shape[1]), dt), inertias
    )[0]
    return qdd0, Bhat


def _eufm(model, ws, v, B):
    nu = B.shape[1]
    U = jnp.concatenate([jnp.zeros((1, nu), B.dtype), jnp.eye(nu, dtype=B.dtype)], 0)
    qdd = jax.vmap(lambda u: aba_mod.aba_world(model, ws, v, B @ u)[0])(U)  # eq. (15)
    return qdd[0], (qdd[1:] - qdd[0]).T


def _dense(model, ws, v, B):
    M = crba_world(model, ws)
    h = rnea_world(model, ws, v, jnp.zeros_like(v))[0]
    cf = jsl.cho_factor(M, lower=True)
    sol = jsl.cho_solve(cf, jnp.concatenate([-h[:, None], B], 1))
    return sol[:, 0], sol[:, 1:]


@shell.public("input_matrix", words=batching.nv2_words)
@full_precision
def input_matrix(
    model: Model,
    q: ArrayLike,
    v: ArrayLike,
    B: ArrayLike | Inputs,
    method: str = "iim",
) -> InputMatrix:
    """Free accelerations and inertia-weighted input matrix: ``qdd = qdd0 + Bhat u``.

    **Arguments:**

    - ``q (nq,)``, ``v (nv,)``.
    - ``B``: :class:`Inputs` (actuated joints and contact constraints; ``u = [tau_a; f_c]``)
      or an ``(nv, nu)`` input matrix (generalised force per input).
    - ``method``: ``"iim"`` (default), ``"eufm"`` or ``"dense"`` (module docstring).

    **Returns:** :class:`InputMatrix` ``(qdd0 (nv,), Bhat (nv, nu))``; ``qdd0 + Bhat @ u``
    equals ``jaxdyn.aba(model, q, v, B @ u)``.
    """
    fn = "input_matrix"
    if method not in METHODS:
        raise ValueError(f"{fn}: method must be one of {METHODS}, got {method!r}")
    v = shell.as_array(fn, "v", v, (("nv", model.nv),), model)
    il = None
    if isinstance(B, Inputs):
        il = _input_layout(model.topo, B)
        model, q, dt = shell.prepare(model, fn, q, v)
    else:
        if isinstance(B, (cons.Weld, cons.Connect)) or (
            isinstance(B, (tuple, list)) and B and isinstance(B[0], cons.CONSTRAINT_TYPES)
        ):
            raise ValueError(
                f"{fn}: B must be a jaxdyn.Inputs or an (nv, nu) array; wrap "
                "contact constraints as jaxdyn.Inputs(actuated=..., contacts=...)"
            )
        B = jnp.asarray(B)
        if B.ndim != 2 or B.shape[0] != model.nv or B.shape[1] == 0:
            raise ValueError(
                f"{fn}: B has shape {tuple(B.shape)}, expected (nv, nu)=("
                f"{model.nv}, nu) with nu >= 1 for {model.name!r}"
            )
        model, q, dt = shell.prepare(model, fn, q, v, B)
        B = B.astype(dt)
    v = v.astype(dt)
    if model.nb == 0:  # zero-DoF model (an (0, nu) input matrix)
        nu = _input_layout(model.topo, B).nu if isinstance(B, Inputs) else B.shape[1]
        return InputMatrix(jnp.zeros(0, dt), jnp.zeros((0, nu), dt))
    ws = kin.world_state(model, q)
    if method == "iim":
        return InputMatrix(*_iim(model, ws, v, B if il is None else None, il))
    if il is not None:
        B = _dense_B(model, ws, il)
    if method == "eufm":
        return InputMatrix(*_eufm(model, ws, v, B))
    return InputMatrix(*_dense(model, ws, v, B))

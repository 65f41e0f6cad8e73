"""Shooting solvers: feasibility-driven DDP (FDDP), iLQR / DDP, and their box-constrained
variants, jit-compiled and batched with ``jax.vmap``.

* **FDDP**: Mastalli et al., "Crocoddyl: An Efficient and Versatile Framework for Multi-Contact
  Optimal Control", ICRA 2020, Alg. 1 and 2 (Crocoddyl's ``SolverFDDP``). The state trajectory
  may be infeasible: the gaps ``f_0 = x_0 ⊖ xs_0``, ``f_{t+1} = f(xs_t, us_t) ⊖ xs_{t+1}`` enter
  the backward pass (``V_x ← V_x + V_xx f``), the nonlinear rollout closes them in the
  proportion ``α`` of the step (``x̂_t = f(x̂_{t-1}, û_{t-1}) ⊕ (α - 1) f_t``), and the line
  search compares the actual cost change with the model of Eq. (15)-(16)
  ``ΔJ(α) = Δ_1 α + Δ_2 α² / 2`` (``Δ_1 = Σ Q_u k - V_x f + f V_xx (x̂ ⊖ x)``, Crocoddyl's
  ``expectedImprovement``), accepting ``ΔJ_actual > 0.1 ΔJ(α)`` (``ΔJ(α) ≥ 0``) or
  ``ΔJ_actual > 2 ΔJ(α)`` (gap-closing steps that may raise the cost).
* **iLQR / DDP** with Gauss-Newton cost Hessians and first-order dynamics (Li & Todorov,
  "Iterative linear quadratic regulator design for nonlinear biological movement systems",
  ICINCO 2004; Crocoddyl's ``SolverDDP``): a feasible rollout of the initial controls, the
  same backward pass without gaps, Armijo-type acceptance.
* **Box controls** ``u_lower <= u <= u_upper``: the control QP of each backward step is solved
  with bounds (:func:`box_qp`, to its optimum by a primal active-set method), the feedback
  gains restricted to the free controls and the rollout clamps the controls (Tassa, Mansard &
  Todorov, "Control-limited differential dynamic programming", ICRA 2014, Alg. 1 and
  Sec. III-B). As Crocoddyl's ``SolverBoxFDDP``, the box QP is solved from feasible iterates
  only (Newton gains and clamping before), starting from the knot's feedforward gain of the
  previous iteration, the gradient ``Q_u`` of clamped controls is zeroed in the expected
  improvement, and ``th_stop`` defaults to ``5e-5``. A trial step whose model ``ΔJ(α)`` is
  negative is accepted only from an infeasible iterate (Crocoddyl: gaps, once closed, are not
  re-opened).

Regularisation ``μ`` is added to ``Q_uu`` and ``V_xx`` and updated as Crocoddyl does (x10
after a failed backward pass or a step ``α <= 0.01``, /10 after ``α > 0.5``, within
``[1e-9, 1e9]``). Convergence (Crocoddyl 3's ``stoppingCriteria``): the iterate was feasible
and the expected improvement of a full step is small, ``|Δ_1 + Δ_2 / 2| < th_stop``.

Everything runs in one ``lax.while_loop``: the solve is jit-compiled once per problem
structure and ``jax.vmap`` batches problems (on the CPU one problem after another, each
iterating as long as it needs; on accelerators a batch runs until its last member stops). The
choice between FDDP and iLQR is a traced flag (iLQR's initial rollout runs before the solve
program), so FDDP and iLQR share one compiled program. Bounds given as arrays are data
(``∓inf`` where absent): bounded problems share one program, which holds the box QP; a
problem without bounds (``u_lower = u_upper = None``) compiles a smaller program without it,
and :meth:`Problem.with_bounds` puts it in the bounded problems' program instead.

Bad input never yields a silent NaN trajectory: a non-finite cost or state at the initial
guess stops the solver before the first iteration (``status = 2``), trial steps whose rollout
or cost is non-finite or diverged (a magnitude of :data:`DIVERGED` = 1e30 or more, as in
Crocoddyl) are rejected by the line search, a backward pass whose value gradient diverges
counts as failed (the regularisation rises), and non-finite derivatives at an
accepted iterate stop it with that (finite) iterate (``status = 4``). :meth:`Result.message`
explains a status; :func:`check` raises it as an error.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, cast

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .. import _linalg, batching
from ..backend import executable_cache, fused_programs, host_batches, xla_flags
from . import costs as _costs
from . import dynamics as _dynamics
from .dynamics import FreeDynamics, step_derivatives, step_plain
from .lie import state_difference, state_integrate

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from jax import Array
    from jax.typing import ArrayLike

    from ..model.model import Model
    from ..spatial import AnyArray
    from .dynamics import ContactDynamics


__all__ = [
    "Problem",
    "Result",
    "STATUS",
    "box_qp",
    "check",
    "fddp",
    "ilqr",
    "solve_batch",
    "solve_sharded",
    "rollout",
    "trajectory_cost",
]

#: ``status`` codes of :class:`Result`.
STATUS = {
    0: "converged (feasible iterate, expected improvement |d1 + d2/2| < th_stop)",
    1: "stopped at max_iter without convergence",
    2: "non-finite cost or state at the initial guess (bad input): nothing was solved",
    3: "the regularisation reached its maximum (no descent step could be found); "
    "returning the last accepted (finite) iterate",
    4: "non-finite derivatives (dynamics or cost Jacobians) at the last accepted iterate; "
    "returning that (finite) iterate",
}
_RUNNING = -1
#: Magnitudes from which a trial cost or state, or a value gradient, counts as diverged: as
#: Crocoddyl's ``raiseIfNaN`` (``value >= 1e30``), which rejects such a trial step (forward
#: pass) or raises the regularisation (backward pass). Only rejecting non-finite values let a
#: wild full step with a cost of 1e100 through whenever its (equally wild) expected change
#: was more negative still: random arm reaches that Crocoddyl solves in 8-11 iterations ended
#: at the regularisation limit after 2 (benchmarks/trajopt_gpu.py, 14 problems in 1024).
DIVERGED = 1e30


def _bounded(a):
    """``a`` finite with every entry below :data:`DIVERGED` in magnitude."""
    return jnp.all(jnp.abs(a) < DIVERGED)  # False for NaN and inf too


class Problem(eqx.Module):
    """An optimal control problem with ``horizon`` Euler steps of ``dt``
    (Crocoddyl's ``ShootingProblem`` of ``IntegratedActionModelEuler`` nodes):

        min_{xs, us}  Σ_t dt l(x_t, u_t) + l_T(x_T)   s.t.  x_{t+1} = step(x_t, u_t),
                      x_0 = x0,  u_lower <= u_t <= u_upper

    ``running`` / ``terminal`` are :class:`jaxdyn.trajopt.costs.Cost` s, ``dynamics`` a
    :class:`~jaxdyn.trajopt.dynamics.FreeDynamics` or ``ContactDynamics``. Every array leaf
    may carry a leading batch axis under ``jax.vmap``.
    """

    model: Model
    x0: jax.Array
    running: _costs.Cost
    terminal: _costs.Cost
    dt: jax.Array | float
    horizon: int = eqx.field(static=True)
    dynamics: FreeDynamics | ContactDynamics = FreeDynamics()
    u_lower: jax.Array | None = None
    u_upper: jax.Array | None = None

    def __check_init__(self):
        _check_problem(self)

    @property
    def nu(self) -> int:
        return self.dynamics.nu(self.model)

    def bounds(self) -> tuple[Array, Array]:
        """``(lower, upper)`` arrays (``∓inf`` where unbounded)."""
        dtype = getattr(self.x0, "dtype", None)
        dtype = jnp.asarray(self.x0).dtype if dtype is None else dtype
        # the infinite bounds in numpy (:func:`_as_array`: no eager program compiled)
        lo = np.full(self.nu, -np.inf, dtype) if self.u_lower is None else self.u_lower
        hi = np.full(self.nu, np.inf, dtype) if self.u_upper is None else self.u_upper
        return _as_array(lo, dtype), _as_array(hi, dtype)

    def with_bounds(self) -> Problem:
        """The same problem with both bounds as arrays (``∓inf`` where unbounded): bounded and
        unbounded problems then share one compiled solver (and may share a batch). Without
        bounds (``None``) the solver compiles a program of its own, without the box QP."""
        lo, hi = self.bounds()
        return eqx.tree_at(
            lambda p: (p.u_lower, p.u_upper), self, (lo, hi), is_leaf=lambda x: x is None
        )


def _concrete(x):
    """``x`` as a numpy array, or ``None`` when it is traced (its values unknown)."""
    if any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(x)):
        return None
    return np.asarray(x)


def _check_problem(p):
    """Shapes and values of a :class:`Problem` at construction (``ValueError`` naming the
    argument and what it must be). Values are checked where they are known: a problem built
    under ``jax.jit`` or ``jax.vmap`` has its shapes checked only (``jax.tree.map`` and
    ``eqx.tree_at`` build problems without checking them)."""
    where = "Problem"
    T = p.horizon
    if isinstance(T, (bool, np.bool_)) or not isinstance(T, (int, np.integer)) or T < 1:
        raise ValueError(f"{where}: horizon must be an integer >= 1, got {T!r}")
    model = p.model
    if not hasattr(p.dynamics, "nu"):
        raise TypeError(
            f"{where}: dynamics must be a FreeDynamics or a ContactDynamics, got "
            f"{type(p.dynamics).__name__}"
        )
    _dynamics._check_rows(where, p.dynamics, model)
    nx, nu = model.nq + model.nv, p.nu
    if np.shape(p.x0) != (nx,):
        raise ValueError(
            f"{where}: x0 has shape {tuple(np.shape(p.x0))}, expected (nq + nv,) = ({nx},) "
            f"for {model.name!r}"
        )
    if np.shape(p.dt) != ():
        raise ValueError(f"{where}: dt has shape {tuple(np.shape(p.dt))}, expected a scalar")
    dt = _concrete(p.dt)
    if dt is not None and not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"{where}: dt must be a finite time step > 0, got {float(dt)!r}")
    for name in ("u_lower", "u_upper"):
        b = getattr(p, name)
        if b is not None and np.shape(b) != (nu,):
            raise ValueError(
                f"{where}: {name} has shape {tuple(np.shape(b))}, expected (nu,) = ({nu},)"
            )
        c = None if b is None else _concrete(b)
        if c is not None and np.any(np.isnan(c)):
            raise ValueError(
                f"{where}: {name} has NaN entries {np.nonzero(np.isnan(c))[0].tolist()} "
                "(use -inf / inf for an unbounded control)"
            )
    lo = None if p.u_lower is None else _concrete(p.u_lower)
    hi = None if p.u_upper is None else _concrete(p.u_upper)
    if lo is not None and hi is not None and np.any(lo > hi):
        i = np.nonzero(lo > hi)[0]
        raise ValueError(
            f"{where}: u_lower > u_upper for controls {i.tolist()} (u_lower {lo[i].tolist()}, "
            f"u_upper {hi[i].tolist()}); each lower bound must be <= its upper bound"
        )
    for name, cost, terminal in (("running", p.running, False), ("terminal", p.terminal, True)):
        _costs.check_cost(cost, model, nu, terminal, f"{where}: {name}")


def _boxed(problem):
    """Traced: does any control have a finite bound?"""
    lo, hi = problem.bounds()
    return jnp.any(jnp.isfinite(lo)) | jnp.any(jnp.isfinite(hi))


class Result(eqx.Module):
    """Solver output. ``xs (T+1, nx)``, ``us (T, nu)``: the last accepted iterate; ``cost``;
    ``iterations`` (iterations performed; Crocoddyl's ``solver.iter + 1`` when converged);
    ``converged``; ``status`` (see :data:`STATUS`); ``stop`` (``|Δ_1 + Δ_2/2|`` of the last
    iteration); ``feasible``; ``log``: per-iteration arrays ``(max_iter,)`` (NaN after the
    last iteration) ``cost`` (after the step), ``stop``, ``step`` (the step length tried
    last), ``reg`` (regularisation used) and ``gap`` (``max |f_t|`` at the linearisation)."""

    xs: jax.Array
    us: jax.Array
    cost: jax.Array
    iterations: jax.Array
    converged: jax.Array
    status: jax.Array
    stop: jax.Array
    feasible: jax.Array
    log: dict

    def message(self) -> str:
        """The status in words (a single, unbatched result)."""
        s = int(np.asarray(self.status))
        return f"status {s}: {STATUS[s]} after {int(np.asarray(self.iterations))} iterations"


def check(result: Result, allow_max_iter: bool = True) -> Result:
    """Raise ``RuntimeError`` with :data:`STATUS`'s message when a (possibly batched) result
    failed (status 2, 3, 4; and 1 unless ``allow_max_iter``); return it otherwise."""
    status = np.atleast_1d(np.asarray(result.status))
    bad = (status >= 2) | ((status == 1) & (not allow_max_iter))
    if np.any(bad):
        idx = np.nonzero(bad)[0]
        s = int(status[idx[0]])
        where = f" (problem {int(idx[0])} of the batch)" if status.size > 1 else ""
        raise RuntimeError(f"trajopt solver failed{where}: status {s}: {STATUS[s]}")
    return result


# ----------------------------------------------------------------------------- problem pieces


def _stage_value(problem, x, u):
    return problem.dt * problem.running.value(problem.model, x, u)


def rollout(problem: Problem, us: ArrayLike, x0: AnyArray | None = None) -> Array:
    """States ``(T+1, nx)`` of the controls ``us (T, nu)`` from ``x0`` (``problem.x0``)."""
    x0 = problem.x0 if x0 is None else x0

    def f(x, u):
        x1 = step_plain(problem.model, x, u, problem.dt, problem.dynamics)
        return x1, x1

    _, xs = jax.lax.scan(f, x0, us)
    return jnp.concatenate([x0[None], xs], 0)


def _knot_costs(problem):
    """``(state, control)``: the running cost's terms that read the state only
    (:data:`jaxdyn.trajopt.costs._STATE_ONLY`) stacked with the terminal cost's along a
    leading axis of ``T + 1`` knots (the running terms repeated at the first ``T``), and a
    :class:`~jaxdyn.trajopt.costs.Cost` of the running cost's other terms; ``None`` unless
    the terminal cost's terms are those state terms one for one (types, static fields and
    array shapes: a terminal state regularisation of the running one, Crocoddyl's usual
    problem).

    Then the terminal cost is evaluated at ``x_T`` by the same ``vmap`` as the running
    cost's state terms at ``x_0 .. x_{T-1}``, where it was a copy of its own in the program:
    each copy of a state difference and its Jacobian on a free joint is a dozen or more
    XLA kernels to compile, however many knots it runs for. Not on a model of one-DoF joints
    (``None``), whose state difference is a subtraction: there the stacked references cost
    more kernels than the terminal cost's own copy."""
    from .lie import _all_one_dof

    if _all_one_dof(problem.model):
        return None
    run, term = problem.running.terms, problem.terminal.terms
    state = tuple(t for t in run if isinstance(t.residual, _costs._STATE_ONLY))
    control = tuple(t for t in run if not isinstance(t.residual, _costs._STATE_ONLY))
    if not state or jax.tree.structure(state) != jax.tree.structure(term):
        return None
    pairs = list(zip(jax.tree.leaves(state), jax.tree.leaves(term)))
    if any(np.shape(a) != np.shape(b) for a, b in pairs):
        return None
    T = problem.horizon

    def stack(a, b):
        a, b = jnp.asarray(a), jnp.asarray(b)
        dtype = jnp.result_type(a, b)
        return jnp.concatenate([jnp.broadcast_to(a, (T, *a.shape)).astype(dtype), b[None]])

    return _costs.Cost(jax.tree.map(stack, state, term)), _costs.Cost(control)


def _differences(problem, split, a, b, at):
    """``(b ⊖ a, {id(residual): r})`` for stacked states ``a``, ``b (T+1, nx)``: the knots'
    differences and the residuals ``x ⊖ x_ref`` of the state regularisations among the stacked
    state terms ``split`` (:func:`_knot_costs`; ``None``: none) at the states ``at``, all in one
    ``vmap`` of :func:`~jaxdyn.trajopt.lie.state_difference` over the stacked pairs (one copy
    of the difference in the program, where the residuals were a copy of their own, read by
    the costs through :func:`jaxdyn.trajopt.costs.given_residuals`)."""
    model = problem.model
    regs = [] if split is None else [
        t.residual for t in split[0].terms
        if isinstance(t.residual, _costs.StateRegularization)
    ]  # fmt: skip
    n = a.shape[0]
    lhs = jnp.concatenate([a] + [r.reference for r in regs], 0)
    rhs = jnp.concatenate([b] + [at] * len(regs), 0)
    d = jax.vmap(lambda p, q: state_difference(model, p, q))(lhs, rhs)
    return d[:n], {id(r): d[(i + 1) * n : (i + 2) * n] for i, r in enumerate(regs)}


def _own_residuals(c, stacked, given):
    """The residuals ``given`` (keyed by the residual modules of the stacked cost ``stacked``,
    :func:`_differences`) keyed by those of ``c``, the knot's cost that ``jax.vmap`` made of
    ``stacked`` (new modules, its terms in the same order)."""
    keys = {id(t.residual): id(o.residual) for t, o in zip(c.terms, stacked.terms)}
    return {k: given[v] for k, v in keys.items() if v in given}


def _split_cost(problem, split, xs, us, given=None):
    """:func:`trajectory_cost` with the terminal cost and the running cost's state terms in one
    vmap (:func:`_knot_costs`), the residuals ``given`` (:func:`_differences`) taken."""
    model = problem.model
    state, control = split
    given = {} if given is None else given

    def knot(c, x, g):
        with _costs.given_residuals(x, _own_residuals(c, state, g)):
            return c.residual(model, x, None)

    r, w = jax.vmap(knot)(state, xs, given)
    rT, wT = r[-1], w[-1]
    r, w = r[:-1], w[:-1]
    if control.terms:
        rc, wc = jax.vmap(lambda x, u: control.residual(model, x, u))(xs[:-1], us)
        r, w = jnp.concatenate([r, rc], 1), jnp.concatenate([w, wc], 1)
    run = problem.dt * (0.5 * jnp.sum(w * r * r, 1))
    return jnp.sum(run) + 0.5 * jnp.sum(wT * rT * rT)


def trajectory_cost(problem: Problem, xs: AnyArray, us: ArrayLike) -> Array:
    """``Σ_t dt l(x_t, u_t) + l_T(x_T)``."""
    split = _knot_costs(problem)
    if split is None:
        run = jax.vmap(lambda x, u: _stage_value(problem, x, u))(xs[:-1], us)
        return jnp.sum(run) + problem.terminal.value(problem.model, xs[-1])
    return _split_cost(problem, split, xs, us)


def _trial_cost(problem, split, xs_try, us_try, xs):
    """``(trajectory_cost(xs_try, us_try), xs ⊖ xs_try)``: the line search's trial cost and the
    differences of its expected improvement (Crocoddyl's ``dx_``), the state regularisations'
    differences computed with the latter (:func:`_differences`); ``split``: the problem's
    :func:`_knot_costs`, built once per solve by the caller."""
    dx, given = _differences(problem, split, xs_try, xs, xs_try)
    if split is None:
        return _trajectory_cost_traced(problem, xs_try, us_try), dx
    return _split_cost(problem, split, xs_try, us_try, given), dx


def _calc_diff(problem, split, xs, us, derivatives="analytic"):
    """Dynamics and cost derivatives at every node, the gaps and the cost; ``split``: the
    problem's :func:`_knot_costs`, built once per solve by the caller (:func:`_advance`)."""
    model, dt = problem.model, problem.dt

    def node(x, u):
        x1, Fx, Fu = step_derivatives(model, x, u, dt, problem.dynamics, derivatives)
        if split is None:
            l, lx, lu, lxx, lxu, luu = problem.running.derivatives(model, x, u)
        elif split[1].terms:  # the running cost's terms that read the control
            l, lx, lu, lxx, lxu, luu = split[1].derivatives(model, x, u)
        else:
            nu, ndx = u.shape[0], 2 * model.nv
            zero = jnp.zeros((), x.dtype)
            l, lx, lu, lxx = zero, jnp.zeros(ndx, x.dtype), jnp.zeros(nu, x.dtype), None
            lxu, luu = jnp.zeros((ndx, nu), x.dtype), jnp.zeros((nu, nu), x.dtype)
        return x1, Fx, Fu, l, lx, lu, lxx, lxu, luu

    xnext, Fx, Fu, l, lx, lu, lxx, lxu, luu = jax.vmap(node)(xs[:-1], us)
    # the gaps, the initial state's among them, and the state regularisations' residuals: one
    # difference of stacked states (:func:`_differences`: one copy of the state difference)
    fs, given = _differences(
        problem, split, xs, jnp.concatenate([problem.x0[None], xnext], 0), xs
    )  # fmt: skip
    if split is None:
        lT, LxT, _, LxxT, _, _ = problem.terminal.derivatives(model, xs[-1])
    else:
        # the terminal cost and the running cost's state terms in one vmap over the T + 1
        # knots (:func:`_knot_costs`), added to the other running terms' blocks
        def knot(c, x, g):
            with _costs.given_residuals(x, _own_residuals(c, split[0], g)):
                return c.derivatives(model, x)

        ls, lxs, _, lxxs, _, _ = jax.vmap(knot)(split[0], xs, given)
        lT, LxT, LxxT = ls[-1], lxs[-1], lxxs[-1]
        l, lx = ls[:-1] + l, lxs[:-1] + lx
        lxx = lxxs[:-1] if lxx is None else lxxs[:-1] + lxx
    l, lx, lu, lxx, lxu, luu = (dt * a for a in (l, lx, lu, lxx, lxu, luu))
    cost = jnp.sum(l) + lT
    D = dict(Fx=Fx, Fu=Fu, lx=lx, lu=lu, lxx=lxx, lxu=lxu, luu=luu, LxT=LxT, LxxT=LxxT)
    finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(v)) for v in jax.tree.leaves(D)]))
    finite = finite & jnp.all(jnp.isfinite(fs))
    return D, fs, cost, finite


# ----------------------------------------------------------------------------- box QP


def box_qp(
    H: AnyArray,
    g: AnyArray,
    lower: AnyArray | float,
    upper: AnyArray | float,
    x0: ArrayLike | None = None,
    iterations: int | None = None,
    tol: float = 1e-12,
) -> tuple[Array, Array, Array]:
    """``min_x 1/2 x^T H x + g^T x`` s.t. ``lower <= x <= upper`` (``H`` symmetric positive
    definite) by a primal active-set method (Nocedal & Wright, "Numerical Optimization",
    2nd ed., Alg. 16.3, for the box constraints of Tassa, Mansard & Todorov, "Control-limited
    differential dynamic programming", ICRA 2014).

    From ``x0`` clipped into the box (zeros by default), the working set ``W`` holds the
    coordinates fixed at a bound (at the start: those on a bound whose gradient pushes
    outward). Each iteration takes the Newton step ``p_F = -H_FF^-1 (H x + g)_F`` on the free
    set ``F``: when a free coordinate would leave the box the step stops at the first bound
    met and that coordinate joins ``W``; otherwise the full step reaches the minimum on the
    face, and the KKT conditions are checked there: a coordinate of ``W`` whose multiplier
    has the wrong sign (a gradient pointing into the box) leaves ``W`` (the most negative
    one), and if there is none, the projected gradient ``x - clip(x - (H x + g))`` is zero
    (to ``tol`` relative to the gradient's scale) and ``x`` is the optimum. The cost falls at
    every step and no working set repeats, so the method stops at the optimum after finitely
    many steps (at most ``iterations``, default ``10 + 4 n``; a ``lax.while_loop``, so it is
    jit- and vmap-compatible). Crocoddyl's ``BoxQP`` (projected Newton with a projected
    Armijo search, the same as this function before) stalls above the optimum on badly
    scaled ``H`` when a free coordinate sits close to its bound.

    Returns ``(x, free (n,) bool, L)`` with ``free`` the coordinates not held at a bound by
    the gradient (Crocoddyl's ``free_idx``: not ``x = lower`` with a positive gradient or
    ``x = upper`` with a negative one) and ``L`` the Cholesky factor of ``H`` restricted to
    ``free`` (identity elsewhere).
    """
    n = H.shape[-1]
    dtype = H.dtype
    x = jnp.zeros_like(g) if x0 is None else jnp.asarray(x0, dtype)
    x = jnp.minimum(jnp.maximum(x, lower), upper)
    eye = jnp.eye(n, dtype=dtype)
    max_it = 10 + 4 * n if iterations is None else iterations
    fixed = lower >= upper  # equal bounds: never free

    def factor(free):
        m = free[:, None] & free[None, :]
        return _linalg.cholesky(jnp.where(m, H, eye))

    def scale(grad, x):
        return (
            jnp.max(jnp.abs(grad))
            + jnp.max(jnp.abs(g))
            + jnp.max(jnp.abs(H)) * (1.0 + jnp.max(jnp.abs(x)))
        )

    grad = g + H @ x
    w_lo = fixed | ((x <= lower) & (grad > 0))
    w_hi = ~w_lo & (x >= upper) & (grad < 0)

    def cond(c):
        return (c["it"] < max_it) & ~c["done"]

    def body(c):
        x, w_lo, w_hi = c["x"], c["w_lo"], c["w_hi"]
        free = ~(w_lo | w_hi)
        grad = g + H @ x
        p = -_linalg.cho_solve(factor(free), jnp.where(free, grad, 0.0))
        p = jnp.where(free, p, 0.0)
        # the step to the first bound met by a free coordinate
        ratio = jnp.where(
            free & (p < 0),
            (lower - x) / jnp.where(p < 0, p, -1.0),
            jnp.where(free & (p > 0), (upper - x) / jnp.where(p > 0, p, 1.0), jnp.inf),
        )
        ratio = jnp.maximum(ratio, 0.0)
        j = jnp.argmin(ratio)
        blocked = ratio[j] < 1.0
        alpha = jnp.where(blocked, ratio[j], 1.0)
        xn = jnp.minimum(jnp.maximum(x + alpha * p, lower), upper)
        hit = blocked & (jnp.arange(n) == j)
        xn = jnp.where(hit & (p < 0), lower, jnp.where(hit & (p > 0), upper, xn))
        w_lo_n = w_lo | (hit & (p < 0))
        w_hi_n = w_hi | (hit & (p > 0))
        # at the minimum on the face (a full step): the multipliers of the working set
        gn = g + H @ xn
        lam = jnp.where(w_lo_n & ~fixed, gn, jnp.where(w_hi_n & ~fixed, -gn, jnp.inf))
        k = jnp.argmin(lam)
        tol_k = tol * scale(gn, xn)
        release = ~blocked & (lam[k] < -tol_k)
        drop = release & (jnp.arange(n) == k)
        w_lo_n, w_hi_n = w_lo_n & ~drop, w_hi_n & ~drop
        pg = xn - jnp.minimum(jnp.maximum(xn - gn, lower), upper)
        done = ~blocked & ~release & (jnp.max(jnp.abs(pg)) <= 1e3 * tol_k)
        return dict(it=c["it"] + 1, x=xn, w_lo=w_lo_n, w_hi=w_hi_n, done=done)

    c = jax.lax.while_loop(
        cond, body, dict(it=jnp.asarray(0), x=x, w_lo=w_lo, w_hi=w_hi, done=jnp.asarray(False))
    )
    x = cast("Array", c["x"])  # (the carry's dict values typed as their union)
    grad = g + H @ x
    clamped = ((x <= lower) & (grad > 0)) | ((x >= upper) & (grad < 0)) | fixed
    free = ~clamped
    return x, free, factor(free)


# ----------------------------------------------------------------------------- backward pass


def _spd_solve_fn(A, B):
    return _linalg.spd_solve(A, B, lapack=batching.rule_batch_size() == 0)


#: ``A^-1 B`` for a symmetric positive definite ``A`` (NaN where it is not): one problem's
#: backward pass (a ``lax.scan`` over knots at batch 1) factors ``Q_uu`` with LAPACK (two
#: custom calls), which has about 40 fewer XLA kernels per knot than the unrolled
#: factorisation and solves; under ``jax.vmap`` over problems the batching rule keeps the
#: unrolled form (a LAPACK call would loop over the batch), and so do fused CPU loops
#: (:func:`jaxdyn.config.fused_cpu_loops`: a loop holding a custom call is not fused).
_spd_solve = batching.batched(_spd_solve_fn, lambda A, itemsize: 0)


def _backward(problem, D, fs, us, reg, feasible, k_prev):
    """Riccati recursion with gaps (Mastalli et al. 2020, Eq. 7-9; Crocoddyl's
    ``SolverDDP::backwardPass``): ``(k, K, Qu, Quuk, Vx, Vxx, ok)``. ``k_prev``: the
    feedforward gains of the previous backward pass, from which each knot's box QP starts
    (Crocoddyl's ``SolverBoxFDDP::computeGains`` passes ``k_[t]`` as the QP's initial guess).

    One problem's recursion is a ``lax.scan`` of single knots, where XLA:CPU's time is bound
    by the number of kernels per knot (each product, factorisation and stored output is one),
    so the value function is carried as one array ``[V_xx V_x]``, the gains are one array
    ``[k K]``, the matrix-vector products are sums of products (fused into the kernels around
    them) and each knot stores one array (``[k K]``, ``Q_u``, ``Q_uu k`` and ``[V_xx V_x]``,
    flattened). The knots' inputs stay as they are: arranging them for all knots before the
    scan (``[Fx Fu]``, its transpose, a ``Q``-shaped cost block) saved one more kernel per
    knot but cost more than it saved, in memory traffic."""
    ndx = fs.shape[-1]
    dtype = fs.dtype
    eye = jnp.eye(ndx, dtype=dtype)
    fs = jnp.where(feasible, 0.0, fs)
    VxxT = D["LxxT"] + reg * eye
    VxT = D["LxT"] + VxxT @ fs[-1]
    nu = us.shape[-1]
    unbounded = problem.u_lower is None and problem.u_upper is None  # static
    boxed = _boxed(problem)
    lo, hi = problem.bounds()
    eye_u = jnp.eye(nu, dtype=dtype)

    @jax.named_scope("riccati_step")
    def body(V, inp):
        Fx, Fu, lx, lu, lxx, lxu, luu, f, u, kp = inp
        # [Fx Fu]^T [Vxx Vx] and then [Fx Fu]^T Vxx [Fx Fu]: two products (at batch 1 each
        # product is an XLA kernel of its own, and kernels bound the time)
        F = jnp.concatenate([Fx, Fu], 1)
        FV = F.T @ V
        Q = FV[:, :ndx] @ F
        Qx, Qu = lx + FV[:ndx, ndx], lu + FV[ndx:, ndx]
        Qxx, Qxu = lxx + Q[:ndx, :ndx], lxu + Q[:ndx, ndx:]
        Quu = luu + Q[ndx:, ndx:] + reg * eye_u

        # the gains as one array [k K] (Crocoddyl's k_ and K_ side by side)
        def newton():
            return _spd_solve(Quu, jnp.concatenate([Qu[:, None], Qxu.T], 1)), Qu

        def clamped():
            dlt, free, L = box_qp(Quu, Qu, lo - u, hi - u, kp)
            K = jnp.where(free[:, None], _linalg.cho_solve(L, Qxu.T), 0.0)
            return jnp.concatenate([-dlt[:, None], K], 1), jnp.where(free, Qu, 0.0)

        # box QP from a feasible iterate, Newton gains otherwise (SolverBoxFDDP). A problem
        # without bound arrays skips the QP statically: under vmap a traced cond becomes a
        # select that evaluates both branches, the QP's iterations included, at every knot
        if unbounded:
            kK, Qu = newton()
        else:
            kK, Qu = jax.lax.cond(feasible & boxed, clamped, newton)
        k, K = kK[:, 0], kK[:, 1:]
        # the matrix-vector products as sums of products: XLA fuses those into the kernels
        # around them, where a product is a kernel of its own
        Quuk = jnp.sum(Quu * k[None, :], 1)
        Vx = Qx + jnp.sum(K * (Quuk - 2.0 * Qu)[:, None], 0)
        Vxx = Qxx - (Qxu @ kK)[:, 1:]
        Vxx = 0.5 * (Vxx + Vxx.T) + reg * eye
        Vx = Vx + jnp.sum(Vxx * f[None, :], 1)
        V = jnp.concatenate([Vxx, Vx[:, None]], 1)
        # one stored array per knot: [k K], Qu, Quuk and [V_xx V_x], flattened
        out = jnp.concatenate([kK.ravel(), Qu, Quuk, V.ravel()])
        return V, out

    V = jnp.concatenate([VxxT, VxT[:, None]], 1)
    inp = (D["Fx"], D["Fu"], D["lx"], D["lu"], D["lxx"], D["lxu"], D["luu"], fs[:-1], us, k_prev)
    _, out = jax.lax.scan(body, V, inp, reverse=True)
    T, m = us.shape[0], nu * (ndx + 1)
    kK = out[:, :m].reshape(T, nu, ndx + 1)
    k, K = kK[..., 0], kK[..., 1:]
    Qu, Quuk = out[:, m : m + nu], out[:, m + nu : m + 2 * nu]
    Vs = out[:, m + 2 * nu :].reshape(T, ndx, ndx + 1)
    Vx = jnp.concatenate([Vs[..., ndx], VxT[None]], 0)
    Vxx = jnp.concatenate([Vs[..., :ndx], VxxT[None]], 0)
    ok = _bounded(Vx) & jnp.all(jnp.isfinite(Vxx))
    ok = ok & jnp.all(jnp.isfinite(k)) & jnp.all(jnp.isfinite(K))
    return dict(k=k, K=K, Qu=Qu, Quuk=Quuk, Vx=Vx, Vxx=Vxx, fs=fs), ok


# ----------------------------------------------------------------------------- forward pass


def _forward(problem, split, xs, us, B, alpha, feasible):
    """Nonlinear rollout of the step ``alpha`` closing the gaps (Mastalli et al. 2020,
    Eq. 11; Crocoddyl's ``SolverFDDP::forwardPass``): ``(xs_try, us_try, cost_try, finite,
    dxs)``, ``dxs = xs ⊖ xs_try`` (Crocoddyl's ``dx_``, :func:`_trial_cost`; ``split``: the
    problem's :func:`_knot_costs`).

    The rollout is a ``lax.scan`` of single knots (XLA:CPU: kernels per knot bound the
    time), so each knot stores one array ``[x u]``, applies its feedback gain as a sum of
    products (fused with the control's clamp, where a product would be a kernel of its own),
    and the trial's cost is evaluated after the scan, for all knots at once."""
    model = problem.model
    c = jnp.where(feasible | (alpha == 1.0), 0.0, alpha - 1.0)
    fs = B["fs"]
    lo, hi = problem.bounds()
    nx = xs.shape[-1]

    @jax.named_scope("rollout_step")
    def body(xnext, inp):
        x, u, k, K, f = inp
        xt = state_integrate(model, xnext, c * f)
        ut = u - alpha * k - jnp.sum(K * state_difference(model, x, xt)[None, :], 1)
        ut = jnp.minimum(jnp.maximum(ut, lo), hi)
        x1 = step_plain(model, xt, ut, problem.dt, problem.dynamics)
        return x1, jnp.concatenate([xt, ut])

    xnext, xu = jax.lax.scan(body, problem.x0, (xs[:-1], us, B["k"], B["K"], fs[:-1]))
    xT = state_integrate(model, xnext, c * fs[-1])
    xs_try = jnp.concatenate([xu[:, :nx], xT[None]], 0)
    us_try = xu[:, nx:]
    cost, dxs = _trial_cost(problem, split, xs_try, us_try, xs)
    return xs_try, us_try, cost, _bounded(cost) & _bounded(xs_try), dxs


# ----------------------------------------------------------------------------- solver


#: ``verbose`` lines come from XLA's threads (several at once with ``solve_sharded``): each is
#: printed whole under this lock
_LOG_LOCK = threading.Lock()
#: the ``tag`` of a solve that is not one of a batch's problems (:func:`_setup`), and of the
#: padding copies of :func:`solve_sharded` (not printed)
_UNTAGGED, _PADDING = -1, -2


def _log_line(live, tag, it, cost, stop, step, reg, gap):
    tag, it = int(tag), int(it)
    if not live or tag == _PADDING:
        return
    line = (
        (f"{tag:7d} " if tag >= 0 else "")
        + f"{it:5d} {float(cost):14.8e} {float(stop):10.3e} {float(step):8.4f} "
        + f"{float(reg):8.1e} {float(gap):10.3e}"
    )
    if it == 0 and tag == _UNTAGGED:  # a batch's header is printed once, by the host
        line = _log_header(False) + "\n" + line
    with _LOG_LOCK:
        print(line, flush=True)


def _log_header(tagged):
    first = f"{'problem':>7} " if tagged else ""
    return f"{first}{'iter':>5} {'cost':>14} {'stop':>10} {'step':>8} {'reg':>8} {'gap':>10}"


def _zeros_like_shapes(tree):
    return jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), tree)


def _setup(problem, xs, us, ddp, params, *, max_iter, derivatives, tag=_UNTAGGED):
    """The solver's state before its first iteration (a dict; see :func:`_advance`). ``tag``:
    the problem's index in a batch, shown by ``verbose`` (carried with the state, so that a
    batch compacted by :func:`solve_batch` still names its problems). iLQR's ``xs`` is the
    rollout of ``us`` (:func:`_start`): the solve program holds no initial rollout."""
    dtype = xs.dtype
    # the initial cost: the first iteration's derivatives sum it (:func:`_advance`, which
    # reports a non-finite one as bad input), so that the program holds no second copy of the
    # cost evaluation; computed here only when no iteration runs
    if max_iter > 0:
        cost = jnp.full((), jnp.nan, dtype)
        input_ok = jnp.all(jnp.isfinite(xs)) & jnp.all(jnp.isfinite(us))
    else:
        cost = _trajectory_cost_traced(problem, xs, us)
        input_ok = jnp.isfinite(cost) & jnp.all(jnp.isfinite(xs)) & jnp.all(jnp.isfinite(us))

    def calc(xs, us):  # shapes only: the stacked knot costs inside (nothing left in the program)
        return _calc_diff_traced(problem, _knot_costs(problem), xs, us, derivatives=derivatives)

    D0, fs0, _, _ = _zeros_like_shapes(jax.eval_shape(calc, xs, us))
    nan_log = jnp.full((max_iter,), jnp.nan, dtype)
    return dict(
        tag=jnp.asarray(tag, jnp.int32),
        it=jnp.asarray(0),
        xs=xs,
        us=us,
        cost=cost,
        D=D0,
        fs=fs0,
        need_diff=jnp.asarray(True),
        k=jnp.zeros_like(us),
        feasible=jnp.asarray(ddp),
        was_feasible=jnp.asarray(False),
        reg=jnp.asarray(params["reg_init"], dtype),
        status=jnp.where(input_ok, _RUNNING, 2),
        stop=jnp.asarray(jnp.inf, dtype),
        log=dict(cost=nan_log, stop=nan_log, step=nan_log, reg=nan_log, gap=nan_log),
    )


def _advance(problem, state, ddp, params, n_iter=None, *, max_iter, derivatives, verbose):
    """Iterate from ``state`` until it stops, reaches ``max_iter`` or has done ``n_iter`` more
    iterations (all when ``None``; traced otherwise). The state carries everything an
    iteration reads, so stopping after ``n_iter`` and calling again continues exactly."""
    # ``ddp`` (iLQR: feasible rollout, DDP acceptance) is a traced flag: fddp and ilqr share
    # one compiled program. Each expensive piece (derivatives, backward pass, rollout) appears
    # once in the program.
    dtype = state["xs"].dtype
    alphas = 0.5 ** jnp.arange(10, dtype=dtype)
    n_alpha = 10
    p = params  # traced thresholds: changing them does not recompile
    reg_init, reg_min, reg_max, reg_factor = (
        p["reg_init"],
        p["reg_min"],
        p["reg_max"],
        p["reg_factor"],
    )
    th_acceptstep, th_acceptnegstep = p["th_acceptstep"], p["th_acceptnegstep"]
    th_stepdec, th_stepinc, th_grad = p["th_stepdec"], p["th_stepinc"], p["th_grad"]
    th_stop_eff = jnp.where(_boxed(problem), p["th_stop_box"], p["th_stop"])
    # the stacked knot costs built once, before the loop: the derivatives and every trial of
    # the line search read them (built in each, they were a broadcast and a concatenation of
    # the T + 1 references in every iteration and trial)
    split = _knot_costs(problem)
    calc = functools.partial(_calc_diff_traced, problem, split, derivatives=derivatives)
    back = functools.partial(_backward_traced, problem)
    B0, _ = _zeros_like_shapes(
        jax.eval_shape(back, state["D"], state["fs"], state["us"], reg_init, ddp, state["k"])
    )
    stop_at = max_iter if n_iter is None else jnp.minimum(state["it"] + n_iter, max_iter)

    def cond(s):
        return (s["status"] == _RUNNING) & (s["it"] < stop_at)

    def body(s):
        feasible = s["feasible"]
        # derivatives at the current iterate (after an accepted step, Crocoddyl's recalcDiff)
        D, fs, cost_d, dfin = jax.lax.cond(
            s["need_diff"],
            lambda: calc(s["xs"], s["us"]),
            lambda: (s["D"], s["fs"], s["cost"], jnp.asarray(True)),
        )
        # the first iteration (its derivatives always computed: the setup's need_diff) takes
        # the initial cost from them (:func:`_setup`); a non-finite one is bad input (status
        # 2), reported before any step as the setup reports non-finite states
        first = s["it"] == 0
        cost = jnp.where(first, cost_d, s["cost"])
        bad_input = first & ~jnp.isfinite(cost)

        # backward pass; on failure raise the regularisation and retry (Crocoddyl's loop)
        def bw_cond(c):
            return dfin & (c[3] | ((~c[2]) & (c[0] < reg_max)))

        def bw_body(c):
            reg = jnp.where(c[3], c[0], jnp.minimum(c[0] * reg_factor, reg_max))
            B, ok = back(D, fs, s["us"], reg, feasible, s["k"])
            return reg, B, ok, jnp.asarray(False)

        reg, B, ok, _ = jax.lax.while_loop(
            bw_cond, bw_body, (s["reg"], B0, jnp.asarray(False), jnp.asarray(True))
        )
        ok = ok & dfin

        # expected improvement (Crocoddyl's updateExpectedImprovement)
        fsB, Vx, Vxx = B["fs"], B["Vx"], B["Vxx"]
        dg = jnp.sum(B["Qu"] * B["k"])
        dq = -jnp.sum(B["k"] * B["Quuk"])
        dg = dg - jnp.where(feasible, 0.0, jnp.sum(Vx * fsB))
        dq = dq + jnp.where(feasible, 0.0, jnp.einsum("ti,tij,tj->", fsB, Vxx, fsB))

        def ls_cond(c):
            return ok & (~c["accepted"]) & (c["i"] < n_alpha)

        def ls_body(c):
            alpha = alphas[c["i"]]
            xs_t, us_t, cost_t, fin, dx = _forward(
                problem, split, s["xs"], s["us"], B, alpha, feasible
            )
            dv = -jnp.where(feasible, 0.0, jnp.einsum("ti,tij,tj->", fsB, Vxx, dx))
            # Crocoddyl's d = (dg + dv, dq - 2 dv) and alpha (d0 + alpha d1 / 2), with the dv
            # terms grouped so that a huge dv (a wild trial) cannot cancel dg, dq out
            d0 = dg + dv
            dvexp = alpha * dg + 0.5 * alpha**2 * dq + alpha * (1.0 - alpha) * dv
            dV = cost - cost_t
            # |d0| < th_grad: a vanishing first-order model (not a hugely negative d0 from a
            # wild trial, which the comparison without abs let through)
            flat = jnp.abs(d0) < th_grad
            acc_ddp = (dvexp >= 0) & (flat | (~feasible) | (dV > th_acceptstep * dvexp))
            # a step that may raise the cost only while gaps remain (Crocoddyl >= 2.0: "do not
            # re-open gaps once feasibility has been achieved"); from a feasible iterate the
            # box QP's clamped controls can make the model dvexp negative
            acc_fddp = jnp.where(
                dvexp >= 0,
                flat | (dV > th_acceptstep * dvexp),
                (~feasible) & (dV > th_acceptnegstep * dvexp),
            )
            acc = jnp.where(ddp, acc_ddp, acc_fddp) & fin
            return dict(
                i=c["i"] + 1,
                accepted=acc,
                alpha=alpha,
                xs=xs_t,
                us=us_t,
                cost=cost_t,
            )

        ls0 = dict(
            i=jnp.asarray(0),
            accepted=jnp.asarray(False),
            alpha=alphas[-1],
            xs=s["xs"],
            us=s["us"],
            cost=cost,
        )
        ls = jax.lax.while_loop(ls_cond, ls_body, ls0)
        # Crocoddyl's stop |d0 + d1 / 2| = |dg + dq / 2| (the dv terms cancel exactly)
        stop = jnp.abs(dg + 0.5 * dq)
        acc = ls["accepted"] & ~bad_input
        alpha = ls["alpha"]
        xs_n = jnp.where(acc, ls["xs"], s["xs"])
        us_n = jnp.where(acc, ls["us"], s["us"])
        cost_n = jnp.where(acc, ls["cost"], cost)
        was_feasible = jnp.where(acc, feasible, s["was_feasible"])
        feasible_n = jnp.where(acc, feasible | (alpha == 1.0) | ddp, feasible)

        # regularisation update
        reg_n = jnp.where(alpha > th_stepdec, jnp.maximum(reg / reg_factor, reg_min), reg)
        reg_n = jnp.where(alpha <= th_stepinc, jnp.minimum(reg_n * reg_factor, reg_max), reg_n)
        reg_n = jnp.where(ok, reg_n, reg_max)
        converged = was_feasible & (stop < th_stop_eff) & dfin
        status = jnp.where(
            converged,
            0,
            jnp.where(~dfin, 4, jnp.where(~ok | (reg_n >= reg_max), 3, _RUNNING)),
        )
        # bad input: the state as the setup left it (no iteration counted, nothing logged)
        status = jnp.where(bad_input, 2, status)
        stop = jnp.where(bad_input, s["stop"], stop)
        reg_n = jnp.where(bad_input, s["reg"], reg_n)
        it = s["it"]
        gap = jnp.max(jnp.abs(jnp.where(feasible, 0.0, fs)))
        log = dict(s["log"])
        if_ok = functools.partial(jnp.where, bad_input, jnp.nan)
        for key, val in (("cost", cost_n), ("stop", stop), ("step", alpha), ("reg", reg)):
            log[key] = log[key].at[it].set(if_ok(val))
        log["gap"] = log["gap"].at[it].set(if_ok(gap))
        if verbose:
            # under vmap the body runs for every member while one runs: ``cond(s)`` tells
            # the stopped ones, which print nothing; ``verbose = N``: every N-th iteration
            # and the last
            last = (status != _RUNNING) | (it + 1 >= max_iter)
            live = cond(s) & ((it % verbose == 0) | last) if verbose > 1 else cond(s)
            live = live & ~bad_input
            jax.debug.callback(
                _log_line, live, s["tag"], it, cost_n, stop, alpha, reg, gap, ordered=False
            )
        status = jnp.where((status == _RUNNING) & (it + 1 >= max_iter), 1, status)
        return dict(
            tag=s["tag"],
            it=jnp.where(bad_input, it, it + 1),
            xs=xs_n,
            us=us_n,
            cost=cost_n,
            D=D,
            fs=fs,
            need_diff=acc,
            k=jnp.where(ok & ~bad_input, B["k"], s["k"]),
            feasible=feasible_n,
            was_feasible=was_feasible,
            reg=reg_n,
            status=status,
            stop=stop,
            log=log,
        )

    return jax.lax.while_loop(cond, body, state)


#: the solve program's pieces that it calls at two places (:func:`_setup` and :func:`_advance`
#: take the shapes of the derivatives and of the backward pass before the loop, by
#: ``jax.eval_shape``, and call them in it; :func:`_setup` and :func:`_forward` evaluate the
#: trajectory cost) as nested ``jit``: JAX traces each once per program and reuses that trace
#: at the second call (same function, same argument types), where a plain call is traced again
#: (the derivatives were a third of the solve program's Python trace). XLA inlines the calls:
#: the compiled program is the same
_calc_diff_traced = eqx.filter_jit(_calc_diff)
_backward_traced = eqx.filter_jit(_backward)
_trajectory_cost_traced = eqx.filter_jit(trajectory_cost)


def _result(s) -> Result:
    status = jnp.where(s["status"] == _RUNNING, 1, s["status"])
    return Result(
        xs=s["xs"],
        us=s["us"],
        cost=s["cost"],
        iterations=s["it"],
        converged=status == 0,
        status=status,
        stop=s["stop"],
        feasible=s["feasible"],
        log=s["log"],
    )


def _solve_program(problem, xs, us, ddp, params, tag=_UNTAGGED, *, max_iter, derivatives, verbose):
    state = _setup(
        problem, xs, us, ddp, params, max_iter=max_iter, derivatives=derivatives, tag=tag
    )
    state = _advance(
        problem, state, ddp, params, max_iter=max_iter, derivatives=derivatives, verbose=verbose
    )
    return _result(state)


#: the solve program, its executable kept on disk by a key of the problem, options and settings
#: and loaded by a later process without tracing (:mod:`jaxdyn.backend.executable_cache`; a
#: call inside the caller's ``jit`` or ``vmap`` is ``equinox.filter_jit``)
_solve_plain = executable_cache.cached_jit(_solve_program)


#: the solve program compiled quickly (``compile="quick"``: XLA:CPU without LLVM's optimisation,
#: :data:`jaxdyn.backend.xla_flags.QUICK_COMPILE`), kept on disk under a key of its own
_solve_quick = executable_cache.cached_jit(_solve_program, compiler_options=xla_flags.QUICK_COMPILE)


#: one problem's solve compiled into a single XLA:CPU kernel where that program is the one
#: compiled (a call with concrete arrays on the CPU; ``jaxdyn.config`` switch
#: ``trajopt_fused_loops``, :mod:`jaxdyn.backend.fused_programs`), else ``_solve_plain``
_solve_fused = fused_programs.fused_jit(
    _solve_program, _solve_plain, "trajopt_fused_loops", "jaxdyn.trajopt.ddp:_solve_fused"
)


def _solve(problem, xs, us, ddp, params, tag=None, *, max_iter, derivatives, verbose, quick=False):
    # verbose prints through a host callback, a custom call, which a single kernel cannot hold
    solve = _solve_quick if quick else _solve_plain if verbose else _solve_fused
    # no tag: the program's default, not passed (a static leaf of its own), as jax.vmap(fddp)'s
    # members (:func:`_solve_user`) and solve_batch's threads call it: one compiled program
    tag = () if tag is None else (tag,)
    return solve(
        problem, xs, us, ddp, params, *tag, max_iter=max_iter, derivatives=derivatives,
        verbose=verbose,
    )  # fmt: skip


def _vmapped_here(tree) -> bool:
    """Whether ``jax.vmap`` is the innermost transformation of some array of ``tree`` and the
    one being traced (under ``jax.vmap(jax.jvp(...))`` it is the ``jvp``: the batched
    problem's solve is then ``jax.vmap`` of its ``jvp``)."""
    from ..backend.internals import vmap_is_innermost

    return vmap_is_innermost(jax.tree.leaves(tree))


def _solve_user(problem, xs, us, ddp, params, *, max_iter, derivatives, verbose, quick=False):
    """:func:`fddp` / :func:`ilqr`'s solve. Under ``jax.vmap`` (the innermost transformation)
    the solve is a ``jax.custom_batching.custom_vmap``: called with concrete arrays on the CPU
    (``jax.vmap(fddp)(problems)`` outside ``jit``) the batch is solved as
    :func:`solve_batch` does there (one problem after another, in a host thread per core,
    each by the one-problem program); traced on the CPU (``jax.jit(jax.vmap(fddp))``) by the
    same threads and program, called from the caller's program through a host callback
    (:func:`jaxdyn.backend.host_batches.host_map`: XLA:CPU runs the loops of one program one
    after another, on one core), whose forward-mode derivatives are those of ``lax.map`` of
    the one-problem solve (each member iterating only as long as it needs; its knots keep
    LAPACK's factorisation and the dense dynamics of one problem); on accelerators and with
    ``verbose`` by the batched program, as ``jax.vmap`` of the solve."""
    static = dict(max_iter=max_iter, derivatives=derivatives, verbose=verbose)
    args = (problem, xs, us, ddp, params)
    if not _vmapped_here(args):
        return _solve(*args, **static, quick=quick)
    arrays, static_tree = eqx.partition(args, eqx.is_array)
    flat, treedef = jax.tree.flatten(arrays)

    def call(*flat):
        return _solve_plain(*eqx.combine(jax.tree.unflatten(treedef, flat), static_tree), **static)

    solve = jax.custom_batching.custom_vmap(call)

    @solve.def_vmap
    def rule(axis_size, in_batched, *flat):
        one_by_one = jax.default_backend() == "cpu" and any(in_batched) and not verbose
        traced = any(isinstance(a, jax.core.Tracer) for a in flat)
        if not one_by_one or not (traced or fused_programs.concrete_on_cpu(flat)):
            axes = [0 if b else None for b in in_batched]
            out = jax.vmap(call, in_axes=axes, axis_size=axis_size)(*flat)
            return out, jax.tree.map(lambda _: True, out)

        def members(*flat):
            # one problem after another in a host thread per core, each by the one-problem
            # program (fused where XLA compiles it so): solve_batch's threads
            def one(i):
                member = [np.asarray(a[i]) if b else a for a, b in zip(flat, in_batched)]
                member = eqx.combine(jax.tree.unflatten(treedef, member), static_tree)
                return _solve_fused.call(True, *member, **static)

            return _one_by_one(one, axis_size, _cpu_cores(), to_jax=False)

        if not traced:
            out = members(*[np.asarray(a) for a in jax.device_get(flat)])
            out = jax.tree.map(jnp.asarray, out)
        else:
            # inside the caller's jit on the CPU: the same host threads, through one host
            # callback in the caller's program (XLA:CPU runs the loops of one program on one
            # core); derivatives (forward mode) are those of lax.map of the one-problem solve,
            # one member after another in the caller's program
            def mapped(*flat):
                def member(batched):
                    it = iter(batched)
                    return call(*[next(it) if b else a for a, b in zip(flat, in_batched)])

                batched = [a for a, b in zip(flat, in_batched) if b]
                return jax.tree.leaves(jax.lax.map(member, batched))

            def host(*flat):
                return jax.tree.leaves(members(*flat))

            member_types = [
                jax.ShapeDtypeStruct(a.shape[1:] if b else a.shape, a.dtype)
                for a, b in zip(flat, in_batched)
            ]
            leaves, out_tree = jax.tree.flatten(jax.eval_shape(call, *member_types))
            shapes = [jax.ShapeDtypeStruct((axis_size, *s.shape), s.dtype) for s in leaves]
            out = jax.tree.unflatten(out_tree, host_batches.host_map(host, mapped, flat, shapes))
        return out, jax.tree.map(lambda _: True, out)

    return solve(*flat)


_DEFAULTS = dict(
    max_iter=100,
    th_stop=None,
    reg_init=1e-9,
    reg_min=1e-9,
    reg_max=1e9,
    reg_factor=10.0,
    th_acceptstep=0.1,
    th_acceptnegstep=2.0,
    th_stepdec=0.5,
    th_stepinc=0.01,
    th_grad=1e-12,
    derivatives="analytic",
    verbose=False,
)


_STATIC = ("max_iter", "derivatives", "verbose")


def _quick(options):
    """Pops ``compile`` from the options of :func:`fddp` / :func:`ilqr`: whether it is
    ``"quick"`` (``"default"`` otherwise; anything else a ``ValueError``)."""
    how = options.pop("compile", "default")
    if how not in ("default", "quick"):
        raise ValueError(f"compile must be 'default' or 'quick', got {how!r}")
    return how == "quick"


def _options(kw, dtype):
    bad = set(kw) - set(_DEFAULTS)
    if "compile" in bad:
        raise TypeError(
            "compile= is an option of fddp and ilqr (one problem's solve); solve_batch and "
            "solve_sharded compile their own programs"
        )
    if bad:
        raise TypeError(f"unknown solver options {sorted(bad)}; known: {sorted(_DEFAULTS)}")
    opts = {**_DEFAULTS, **kw}
    if opts["derivatives"] not in ("analytic", "autodiff"):
        raise ValueError(
            f"derivatives must be 'analytic' or 'autodiff', got {opts['derivatives']!r}"
        )
    static = {k: opts.pop(k) for k in _STATIC}
    v = static["verbose"]
    if isinstance(v, bool) or v is None:
        static["verbose"] = int(bool(v))
    elif isinstance(v, (int, np.integer)) and v >= 0:
        static["verbose"] = int(v)
    else:
        raise ValueError(
            f"verbose must be True/False or an int N >= 0 (a line every N iterations), got {v!r}"
        )
    # (unbounded, bounded): Crocoddyl's SolverFDDP and SolverBoxFDDP defaults
    th = opts.pop("th_stop")
    opts["th_stop"], opts["th_stop_box"] = (1e-9, 5e-5) if th is None else (th, th)
    params = {k: _as_array(v, dtype) for k, v in opts.items()}
    return params, static


def _as_array(x: Any, dtype: Any) -> Array:
    """``x`` as a JAX array of ``dtype``; a concrete value other than such an array by numpy
    and one transfer: an eager ``jax.numpy`` conversion or operation compiles a program of its
    own in a new process, before the solve's."""
    if isinstance(x, jax.core.Tracer):
        return jnp.asarray(x, dtype)
    if isinstance(x, jax.Array) and x.dtype == dtype:
        return x
    return jax.device_put(np.asarray(x, dtype))


def _initial(problem, xs, us):
    T, nx = problem.horizon, problem.x0.shape[-1]
    dtype = problem.x0.dtype
    if us is None:
        us = np.zeros((T, problem.nu), dtype)
    if xs is None:
        x0 = problem.x0
        if isinstance(x0, jax.core.Tracer):
            xs = jnp.broadcast_to(x0, (T + 1, nx))
        else:
            xs = np.broadcast_to(np.asarray(x0), (T + 1, nx))
    xs, us = _as_array(xs, dtype), _as_array(us, dtype)
    if xs.shape != (T + 1, nx) or us.shape != (T, problem.nu):
        raise ValueError(
            f"initial guess: xs must be ({T + 1}, {nx}) and us ({T}, {problem.nu}); got "
            f"{xs.shape} and {us.shape}"
        )
    return xs, us


#: :func:`rollout` as a program of its own (called eagerly): iLQR's start (:func:`_start`)
_rollout = eqx.filter_jit(rollout)


def _start(problem, xs, us, ilqr):
    """The problem and initial guess of a solve: a problem with a bound has both as arrays
    (:meth:`Problem.with_bounds`: bounded problems share one program, the bounds are data), one
    without keeps ``None`` (its program holds no box QP); iLQR's ``xs`` is the rollout of its
    ``us``. That rollout runs before the solve program (its own small program when called
    eagerly), so that the solve program, shared by FDDP and iLQR, holds no rollout that FDDP
    would compile and never use."""
    xs, us = _initial(problem, None if ilqr else xs, us)
    # Python-number leaves (cost weights, dt) as arrays of the problem's dtype: the solve's
    # arguments then split into arrays and static parts as a stacked batch's members do
    # (jax.vmap(fddp), solve_batch), so that one compiled program serves both
    problem = jax.tree.map(lambda a: _as_array(a, xs.dtype) if isinstance(a, float) else a, problem)
    if problem.u_lower is not None or problem.u_upper is not None:
        problem = problem.with_bounds()
    if ilqr:
        xs = _rollout(problem, us)
    return problem, xs, us


def fddp(
    problem: Problem,
    xs: ArrayLike | None = None,
    us: ArrayLike | None = None,
    **options: Any,
) -> Result:
    """Feasibility-driven DDP (Mastalli et al., ICRA 2020; Crocoddyl's ``SolverFDDP``, and
    ``SolverBoxFDDP`` when the problem has control bounds).

    **Arguments:** ``problem``; initial guess ``xs (T+1, nx)`` (default: ``x0`` repeated,
    infeasible) and ``us (T, nu)`` (default: zeros). **Options** (Crocoddyl's defaults;
    ``max_iter``, ``derivatives`` and ``verbose`` are static, the thresholds are traced, so
    changing them does not recompile): ``max_iter=100``, ``th_stop=1e-9`` (``5e-5`` with
    control bounds),
    ``reg_init``/``reg_min=1e-9``, ``reg_max=1e9``, ``reg_factor=10``,
    ``th_acceptstep=0.1``, ``th_acceptnegstep=2``, ``th_stepdec=0.5``, ``th_stepinc=0.01``,
    ``th_grad=1e-12``,
    ``derivatives="analytic"|"autodiff"`` (dynamics Jacobians of
    :func:`~jaxdyn.trajopt.dynamics.step_derivatives`), ``verbose`` (print one line per
    iteration through ``jax.debug.callback``, ``verbose=N`` every N-th iteration and the
    last; under ``jax.vmap`` the members' lines
    interleave: :func:`solve_batch` and :func:`solve_sharded` print each problem's index),
    ``compile="default"|"quick"`` (static; ``"quick"``: the solve program of a call with
    arrays on the CPU compiled by XLA without LLVM's optimisation passes, about half the
    compile time for a solve about three times as long: for a problem solved once or a few
    times, never for a loop of solves; under ``jax.vmap`` or the caller's ``jit`` it changes
    nothing).

    Jit-compiled (``equinox.filter_jit``); ``jax.vmap`` over a batch of problems works (called
    with arrays on the CPU it solves the members one by one in host threads, as
    :func:`solve_batch`; inside ``jit`` on the CPU the same, called through a host callback,
    derivatives those of ``lax.map`` of the solve; on accelerators and with ``verbose`` as one
    batched ``while_loop``).
    **Returns:** :class:`Result`.
    """
    quick = _quick(options)
    problem, xs, us = _start(problem, xs, us, False)
    params, static = _options(options, xs.dtype)
    return _solve_user(problem, xs, us, _as_array(False, bool), params, **static, quick=quick)


def ilqr(problem: Problem, us: ArrayLike | None = None, **options: Any) -> Result:
    """iLQR / DDP with Gauss-Newton Hessians (Li & Todorov, ICINCO 2004; Crocoddyl's
    ``SolverDDP``, box-DDP of Tassa, Mansard & Todorov 2014 with control bounds): the initial
    controls ``us`` are rolled out from ``x0`` and every iterate stays feasible. Options as
    :func:`fddp`. **Returns:** :class:`Result`."""
    quick = _quick(options)
    problem, xs, us = _start(problem, None, us, True)
    params, static = _options(options, xs.dtype)
    return _solve_user(problem, xs, us, _as_array(True, bool), params, **static, quick=quick)


# ----------------------------------------------------------------------------- batches


@eqx.filter_jit
def _setup_batch(problems, xs, us, ddp, params, *, max_iter, derivatives, ilqr):
    def one(p, x, u, tag):
        p, x, u = _start(p, x, u, ilqr)
        return p, _setup(p, x, u, ddp, params, max_iter=max_iter, derivatives=derivatives, tag=tag)

    tags = jnp.arange(jnp.shape(problems.x0)[0], dtype=jnp.int32)
    return jax.vmap(one)(problems, xs, us, tags)


@eqx.filter_jit
def _advance_batch(problems, states, ddp, params, n_iter, *, max_iter, derivatives, verbose):
    def one(p, s):
        return _advance(
            p, s, ddp, params, n_iter, max_iter=max_iter, derivatives=derivatives, verbose=verbose
        )

    return jax.vmap(one)(problems, states)


@eqx.filter_jit
def _take(tree, idx):
    return jax.tree.map(lambda a: a[idx] if eqx.is_array(a) else a, tree)


def _batch_x0(fn, problems, solver):
    """The stacked initial states ``(B, nx)`` of a batch of problems, the solver name checked."""
    if solver not in ("fddp", "ilqr"):
        raise ValueError(f"{fn}: solver must be 'fddp' or 'ilqr', got {solver!r}")
    x0 = jnp.asarray(problems.x0)
    if x0.ndim != 2:
        raise ValueError(
            f"{fn}: problems must be stacked along a leading axis (x0 of shape (B, nx)); got "
            f"x0 of shape {x0.shape}"
        )
    return x0


def _cpu_cores() -> int:
    """The CPU cores this process may run on."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@eqx.filter_jit
def _start_batch(problems, xs, us, *, ilqr):
    """:func:`_start` of every member of a stacked batch, in one program (member by member it
    was a dozen small eager operations per problem, about a tenth of a UR5 solve's time)."""
    return eqx.filter_vmap(lambda p, x, u: _start(p, x, u, ilqr))(problems, xs, us)


def _solve_threads(problems, xs, us, ddp, params, static, threads):
    """:func:`solve_batch`'s ``method="threads"``: each problem solved by the one-problem
    program (fused into one XLA:CPU kernel where that compiles, whatever the
    ``trajopt_fused_loops`` switch: it is compiled once for the whole batch), one after
    another in each of ``threads`` host threads (XLA runs the programs concurrently and
    releases the GIL while they run). The first problem is solved before the threads start,
    so that the program is compiled once. The members' starts (:func:`_start`) are made for
    the whole batch at once, as under ``jax.vmap(fddp)``."""
    ddp, params = jax.device_get((ddp, params))
    ilqr = bool(ddp)
    started = _start_batch(problems, xs, us, ilqr=ilqr)
    arrays, static_tree = eqx.partition(started, eqx.is_array)
    arrays = jax.tree.map(np.asarray, jax.device_get(arrays))  # one copy; numpy slices after
    B = np.shape(problems.x0)[0]
    verbose = static["verbose"]

    def one(i):
        # numpy leaves, as jax.vmap(fddp)'s members (:func:`_solve_user`): one jit signature
        p, x, u = eqx.combine(jax.tree.map(lambda a: np.asarray(a[i]), arrays), static_tree)
        # the tag (the problem's index, traced) is read by verbose's lines only; without it the
        # call is jax.vmap(fddp)'s and fddp's (:func:`_solve_user`): one compiled program for all
        tag = (np.int32(i),) if verbose else ()
        return _solve_fused.call(
            not verbose, p, x, u, ddp, params, *tag, **static
        )  # fmt: skip

    return _one_by_one(one, B, threads)


def _one_by_one(one, B, threads, to_jax=True):
    """``one(i)`` for ``i < B`` in ``threads`` host threads, stacked (into numpy arrays where
    not ``to_jax``): the first before the threads start, so that its program is compiled
    once."""
    from concurrent.futures import ThreadPoolExecutor

    first = jax.block_until_ready(one(0))
    n = max(1, min(int(threads), B - 1))
    with ThreadPoolExecutor(n) as pool:
        rest = list(pool.map(lambda i: jax.block_until_ready(one(i)), range(1, B)))
    out = jax.tree.map(lambda *a: np.stack([np.asarray(x) for x in a]), first, *rest)
    return jax.tree.map(jnp.asarray, out) if to_jax else out


def solve_batch(
    problems: Problem,
    xs: ArrayLike | None = None,
    us: ArrayLike | None = None,
    *,
    solver: str = "fddp",
    method: str | None = None,
    threads: int | None = None,
    round_iters: int = 10,
    min_batch: int = 16,
    schedule: list | None = None,
    **options: Any,
) -> Result:
    """Solve a batch of problems, each member iterating only as long as it needs.

    The batched program (``jax.vmap(fddp)`` on accelerators) runs one ``while_loop`` for the
    whole batch: every member iterates (masked) until the slowest one stops, so a batch of
    problems that need 4-13 iterations, and a few that need 30, costs 30 batched iterations.
    Two routes avoid that (on the CPU ``jax.vmap(fddp)`` takes the first, inside ``jit``
    too: :func:`fddp`):

    * ``method="threads"`` (the default on the CPU): the problems are solved one after
      another by the one-problem program of :func:`fddp` (compiled once, into one XLA:CPU
      kernel where XLA compiles it so, :mod:`jaxdyn.backend.fused_programs`, whatever the
      ``trajopt_fused_loops`` switch), in ``threads`` host threads at once (default: the
      cores this process may use), so a batch uses every core of a plain process (no
      ``JAX_NUM_CPU_DEVICES`` needed). On the CPU a batched iteration costs about as much
      per member as one problem's, so batching buys nothing there that one-by-one solves
      do not.
    * ``method="rounds"`` (the default on accelerators): the batch runs ``round_iters``
      iterations at a time; after each round the members that have stopped are set aside and
      the others are gathered into a smaller batch (a power of two, at least ``min_batch``,
      and only once it is at most a quarter of the current one, so at most
      ``log_4(B / min_batch) + 1`` sizes are compiled; padding repeats a running member).
      The solver state travels with each member (iterate, derivatives, regularisation,
      feasibility, log), so a member's iterations are exactly those of an uninterrupted
      solve.

    Either way the result equals ``jax.vmap(fddp)`` (or ``ilqr``) member by member, up to
    rounding.

    **Arguments:** ``problems``: a :class:`Problem` whose array leaves are stacked along a
    leading axis of size ``B`` (as ``jax.vmap(make_problem)`` builds them); optional initial
    guesses ``xs (B, T+1, nx)``, ``us (B, T, nu)``; ``solver``: ``"fddp"`` or ``"ilqr"``
    (``xs`` is then ignored: iLQR rolls out ``us``); ``method``: ``"threads"`` or
    ``"rounds"`` (default: ``"threads"`` for concrete arrays on the CPU, else ``"rounds"``);
    ``threads``; ``round_iters``, ``min_batch`` and ``schedule`` (``"rounds"``: a list to
    which ``(batch size, members running)`` is appended after every round); ``options``:
    those of :func:`fddp` (``max_iter`` included, default 100). Host-side loops around
    jit-compiled programs: call it directly, not under ``jit`` or ``vmap``.

    **Returns:** a batched :class:`Result` in the problems' order.
    """
    x0 = _batch_x0("solve_batch", problems, solver)
    if int(round_iters) < 1 or int(min_batch) < 1:
        raise ValueError(
            f"solve_batch: round_iters and min_batch must be >= 1, got {round_iters} and "
            f"{min_batch}"
        )
    if method is None:
        method = "threads" if fused_programs.concrete_on_cpu((problems, xs, us)) else "rounds"
    if method not in ("threads", "rounds"):
        raise ValueError(f"solve_batch: method must be 'threads' or 'rounds', got {method!r}")
    threads = _cpu_cores() if threads is None else threads
    if int(threads) < 1:
        raise ValueError(f"solve_batch: threads must be >= 1, got {threads}")
    B = x0.shape[0]
    for name, a in (("xs", xs), ("us", us)):
        if a is not None and jnp.shape(a)[0] != B:
            raise ValueError(
                f"solve_batch: {name} must have the batch size {B} first; got shape {jnp.shape(a)}"
            )
    params, static = _options(options, x0.dtype)
    max_iter = static["max_iter"]
    ddp = jnp.asarray(solver == "ilqr")
    xs = None if solver == "ilqr" else xs
    if static["verbose"]:
        print(_log_header(True), flush=True)
    if method == "threads":
        return _solve_threads(problems, xs, us, ddp, params, static, threads)
    pb, st = _setup_batch(
        problems, xs, us, ddp, params, max_iter=max_iter, derivatives=static["derivatives"],
        ilqr=solver == "ilqr",
    )  # fmt: skip
    n_iter = jnp.asarray(int(round_iters))
    ids, real, recorded = np.arange(B), np.ones(B, bool), np.zeros(B, bool)
    parts = []
    while True:
        st = _advance_batch(pb, st, ddp, params, n_iter, **static)
        status, it = np.asarray(st["status"]), np.asarray(st["it"])
        running = real & (status == _RUNNING) & (it < max_iter)
        stopped = real & ~running & ~recorded
        if stopped.any():
            sel = np.nonzero(stopped)[0]
            parts.append((ids[sel], _result(_take(st, sel))))
            recorded |= stopped
        live = np.nonzero(running)[0]
        if schedule is not None:
            schedule.append((len(ids), int(live.size)))
        if live.size == 0:
            break
        size = max(int(min_batch), 1 << int(np.ceil(np.log2(live.size))))
        if 4 * size <= len(ids):
            sel = np.concatenate([live, np.full(size - live.size, live[-1])])
            pb, st = _take((pb, st), sel)
            ids, real = ids[sel], np.arange(size) < live.size
            recorded = np.zeros(size, bool)
    order = np.argsort(np.concatenate([i for i, _ in parts]), kind="stable")
    return jax.tree.map(lambda *a: jnp.concatenate(a)[order], *[r for _, r in parts])


# ----------------------------------------------------------------------------- across devices


@eqx.filter_jit
def _solve_sharded(
    arrays, static_tree, ddp, params, mesh, per_device, *, max_iter, derivatives, verbose, ilqr
):
    from jax.sharding import PartitionSpec as P

    def one(args):
        (p, x, u), tag = args
        p, x, u = _start(p, x, u, ilqr)
        return _solve(
            p, x, u, ddp, params, tag, max_iter=max_iter, derivatives=derivatives,
            verbose=verbose,
        )  # fmt: skip

    def local(arrs):
        arrs, tags = arrs
        args = (eqx.combine(arrs, static_tree), tags)
        return jax.lax.map(one, args) if per_device == "map" else jax.vmap(one)(args)

    return batching.shard_map(local, mesh, P(mesh.axis_names[0]), P(mesh.axis_names[0]))(arrays)


def solve_sharded(
    problems: Problem,
    xs: ArrayLike | None = None,
    us: ArrayLike | None = None,
    *,
    solver: str = "fddp",
    devices: Sequence[jax.Device] | None = None,  # pyright: ignore[reportInvalidTypeForm] (jaxlib: no stubs)
    per_device: str | None = None,
    **options: Any,
) -> Result:
    """Solve a batch of problems split across devices (``jax.shard_map``), each device solving
    its share one problem after another (``per_device="map"``) or as one ``vmap``-ed batch
    (``"vmap"``).

    This is the many-core CPU route for batched MPC: with ``JAX_NUM_CPU_DEVICES=N`` in the
    environment (or ``jax.config.update("jax_num_cpu_devices", N)`` before JAX starts) each of
    the N CPU devices runs on its own core, and
    each problem iterates only as long as it needs (a ``vmap``-ed batch runs every member until
    its slowest stops). With fused CPU loops (:func:`jaxdyn.config.fused_cpu_loops`) a problem
    is then a handful of kernels on its core, and the batch's throughput grows with the cores.
    On one accelerator ``"vmap"`` (the default for devices that are not CPUs) is
    ``jax.vmap(fddp)`` with the batch spread over the devices given.

    **Arguments:** ``problems``, ``xs``, ``us``, ``solver`` and ``options`` as
    :func:`solve_batch`; ``devices``: a sequence of devices (default ``jax.devices()``); the
    batch is padded to a multiple of their number by repeating its last problem (the padding is
    dropped from the result); ``per_device``: ``"map"`` (default on CPU devices) or ``"vmap"``.
    Each set of devices, solver, ``per_device`` and static options compiles once.

    **Returns:** a batched :class:`Result` in the problems' order (member by member the result
    of :func:`fddp` / :func:`ilqr`, up to rounding).
    """
    from jax.sharding import Mesh

    x0 = _batch_x0("solve_sharded", problems, solver)
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("solve_sharded: devices is empty")
    if per_device is None:
        per_device = "map" if devices[0].platform == "cpu" else "vmap"
    if per_device not in ("map", "vmap"):
        raise ValueError(f"solve_sharded: per_device must be 'map' or 'vmap', got {per_device!r}")
    B, n = x0.shape[0], len(devices)
    params, static = _options(options, x0.dtype)
    ddp = jnp.asarray(solver == "ilqr")
    xs = None if solver == "ilqr" else xs
    arrays, static_tree = eqx.partition((problems, xs, us), eqx.is_array)
    for name, a in (("xs", xs), ("us", us)):
        if a is not None and jnp.shape(a)[0] != B:
            raise ValueError(
                f"solve_sharded: {name} must have the batch size {B} first; got shape "
                f"{jnp.shape(a)}"
            )
    pad = (-B) % n
    if pad:
        arrays = jax.tree.map(
            lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], pad, axis=0)]), arrays
        )
    tags = np.concatenate([np.arange(B), np.full(pad, _PADDING)]).astype(np.int32)
    arrays = (arrays, jnp.asarray(tags))
    mesh = Mesh(np.asarray(devices), ("problems",))
    if static["verbose"]:
        print(_log_header(True), flush=True)
    res = _solve_sharded(
        arrays, static_tree, ddp, params, mesh, per_device, **static, ilqr=solver == "ilqr"
    )
    return jax.tree.map(lambda a: a[:B], res) if pad else res

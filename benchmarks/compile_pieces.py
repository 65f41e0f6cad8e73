"""Where a program's compile time goes: its pieces compiled alone (issues 52 and 53).

* ``solve`` (default): the FDDP solve program of ``benchmarks/trajopt.py``'s single problems
  (``arm7`` T = 100, ``quad12`` T = 50; float64), or of ``examples/trajopt_quadruped.py``'s
  (``quad12_contact``: four point contacts, T = 50), and its pieces, each as a program of its
  own: the derivatives at every knot (``_calc_diff``) and their parts (the dynamics'
  ``step_derivatives`` over the knots, for the contact problem the constrained dynamics'
  derivatives within them, the running and terminal costs' derivatives, the gaps' state
  differences), the line search's rollout (``_forward``, its trial cost included), the
  trajectory cost and the backward pass (``_backward``).
* ``derivatives``: ``jax.jit(jax.vmap(f))`` (``--robot``, default talos_full, ``--batch``
  1024, float64) of ``rnea_derivatives``, ``aba_derivatives`` and the parts of the latter: the
  world state, IDSVA on it, ``minv_world`` (with the articulated inertias) and the forward
  dynamics of :func:`jaxdyn.derivatives.fd.forward_dynamics_world` (ABA sharing its inertias,
  then IDSVA).

Per row: CPU seconds (``time.process_time``: what a loaded machine inflates least) of
tracing and lowering together and of XLA's ``.compile()``, the StableHLO operations of the
lowered program and the fusions (kernels) of the compiled one. No persistent cache (each
program compiles). The pieces overlap (a piece's world state is its own), so their times do not
add up to the whole; what compares is a row with the same row of another version of the code.

Run: ``python benchmarks/compile_pieces.py [solve|derivatives] [--problem quad12]``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

os.environ.setdefault("JAXDYN_COMPILATION_CACHE", "0")
os.environ.setdefault("JAXDYN_EXECUTABLE_CACHE", "0")
os.environ.setdefault("JAXDYN_COMPILE_LOG", "0")


#: ``--problem`` for ``examples/trajopt_quadruped.py``'s problem (quad12 on four point
#: contacts, :class:`jaxdyn.trajopt.ContactDynamics`, T = 50)
CONTACT = "quad12_contact"


def measure(label, fn, *args, vmapped=False):
    """Lower and compile ``fn`` on ``args``; print and return the row."""
    import equinox as eqx
    import jax

    f = jax.jit(jax.vmap(fn)) if vmapped else eqx.filter_jit(fn)
    t0 = time.process_time()
    lowered = f.lower(*args)
    t1 = time.process_time()
    compiled = lowered.compile()
    t2 = time.process_time()
    ops = len(re.findall(r"= stablehlo\.", lowered.as_text()))
    inner = getattr(compiled, "compiled", compiled)  # equinox wraps jax.stages.Compiled
    fusions = len(re.findall(r"= \S+ fusion\(", inner.as_text()))
    row = (label, t1 - t0, t2 - t1, ops, fusions)
    print(f"| {label} | {row[1]:.2f} | {row[2]:.2f} | {ops} | {fusions} |", flush=True)
    return row


def header():
    print("| program | trace + lower (CPU-s) | XLA (CPU-s) | StableHLO ops | fusions |")
    print("|---|---:|---:|---:|---:|")


def solve_pieces(name):
    import jax

    jax.config.update("jax_enable_x64", True)
    from _trajopt_problems import load_model
    from trajopt import SINGLES, single_problem

    from jaxdyn.trajopt import ddp
    from jaxdyn.trajopt.dynamics import step_derivatives
    from jaxdyn.trajopt.lie import state_difference

    if name == CONTACT:  # the example's problem (ContactDynamics: four point contacts)
        sys.path.insert(0, str(HERE.parent / "examples"))
        from trajopt_quadruped import shift_problem

        given = shift_problem()[0]
        T = given.horizon
    else:
        T = dict((n, t) for n, t, _ in SINGLES)[name]
        model, _, _ = load_model(name)
        given = single_problem(model, T, 0)
    problem, xs, us = ddp._start(given, None, None, False)
    params, static = ddp._options({}, xs.dtype)
    flag = ddp._as_array(False, bool)
    D, fs, _, _ = ddp._calc_diff(problem, ddp._knot_costs(problem), xs, us)
    B, _ = ddp._backward(problem, D, fs, us, 1e-9, False, us)
    print(f"\nFDDP solve program, {name}, T = {T}, float64\n")
    header()

    def solve(p, x, u, d, pa):
        return ddp._solve_program(p, x, u, d, pa, **static)

    measure("solve (whole program)", solve, problem, xs, us, flag, params)
    measure(
        "_calc_diff (derivatives at the knots)",
        lambda p, x, u: ddp._calc_diff(p, ddp._knot_costs(p), x, u),
        problem, xs, us,
    )  # fmt: skip

    def dyn(p, x, u):
        def node(a, b):
            return step_derivatives(p.model, a, b, p.dt, p.dynamics)

        return jax.vmap(node)(x[:-1], u)

    measure("- step_derivatives over the knots", dyn, problem, xs, us)
    if name == CONTACT:

        def acceleration(p, x, u):
            nq = p.model.nq
            return jax.vmap(lambda a, b: p.dynamics.derivatives(p.model, a[:nq], a[nq:], b))(
                x[:-1], u
            )

        measure("-- ContactDynamics.derivatives over the knots", acceleration, problem, xs, us)

    def running(p, x, u):
        return jax.vmap(lambda a, b: p.running.derivatives(p.model, a, b))(x[:-1], u)

    measure("- running cost derivatives", running, problem, xs, us)
    measure(
        "- terminal cost derivatives", lambda p, x: p.terminal.derivatives(p.model, x[-1]),
        problem, xs,
    )  # fmt: skip

    def gaps(p, x):
        return jax.vmap(lambda a, b: state_difference(p.model, a, b))(x, x)

    measure("- gaps (state differences)", gaps, problem, xs)
    measure(
        "_forward (line search rollout and cost)",
        lambda p, x, u, b: ddp._forward(p, ddp._knot_costs(p), x, u, b, 0.5, False),
        problem, xs, us, B,
    )  # fmt: skip
    measure("- trajectory_cost", ddp.trajectory_cost, problem, xs, us)
    measure(
        "_backward (Riccati recursion)",
        lambda p, d, f, u: ddp._backward(p, d, f, u, 1e-9, False, u),
        problem, D, fs, us,
    )  # fmt: skip


def derivative_pieces(robot, batch):
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np

    import jaxdyn
    from jaxdyn import robots
    from jaxdyn.algorithms import kinematics as kin
    from jaxdyn.algorithms.aba import articulated_inertias, world_inertia_matrices
    from jaxdyn.algorithms.minv import minv_world
    from jaxdyn.derivatives import fd
    from jaxdyn.derivatives.idsva import idsva_world

    model = robots.load(robot)
    rng = np.random.default_rng(0)
    q0 = jaxdyn.neutral_configuration(model)
    dq = jnp.asarray(0.3 * rng.standard_normal((batch, model.nv)))
    q = jax.vmap(lambda d: jaxdyn.integrate(model, q0, d))(dq)
    v = jnp.asarray(rng.standard_normal((batch, model.nv)))
    tau = jnp.asarray(rng.standard_normal((batch, model.nv)))
    print(f"\njax.jit(jax.vmap(f)), {robot}, batch {batch}, float64\n")
    header()

    def ws_of(q):
        return kin.world_state(model, q, centered=True)

    def rows(label, fn):
        measure(label, fn, q, v, tau, vmapped=True)

    rows("rnea_derivatives", lambda q, v, t: jaxdyn.rnea_derivatives(model, q, v, t))
    rows("aba_derivatives", lambda q, v, t: jaxdyn.aba_derivatives(model, q, v, t))
    rows("- world_state", lambda q, v, t: ws_of(q).S)
    rows("- world_state, idsva_world", lambda q, v, t: idsva_world(model, ws_of(q), v, t)[1:3])

    def minv(q, v, t):
        ws = ws_of(q)
        return minv_world(model, ws, articulated_inertias(model, ws.S, world_inertia_matrices(ws)))

    rows("- world_state, articulated inertias, minv_world", minv)
    rows(
        "- world_state, forward_dynamics_world (ABA, IDSVA)",
        lambda q, v, t: fd.forward_dynamics_world(model, ws_of(q), v, t, None, False)[:3],
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", nargs="?", default="solve", choices=("solve", "derivatives"))
    p.add_argument("--problem", default="quad12", choices=("arm7", "quad12", CONTACT))
    p.add_argument("--robot", default="talos_full")
    p.add_argument("--batch", type=int, default=1024)
    a = p.parse_args(argv)
    if a.what == "solve":
        solve_pieces(a.problem)
    else:
        derivative_pieces(a.robot, a.batch)


if __name__ == "__main__":
    main()

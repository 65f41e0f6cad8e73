"""XLA:CPU kernels per knot of jaxdyn's FDDP in default settings, counted in the compiled HLO.

    python benchmarks/trajopt_kernels.py                    # ur5 (example-robot-data), T = 20
    python benchmarks/trajopt_kernels.py --robot solo12 --list

One problem's solve runs its rollouts and Riccati recursions as ``lax.scan`` s of single knots,
where XLA:CPU's time is bound by the number of kernels per knot (each about 0.1-0.2 us to
launch), not by arithmetic (docs/trajopt.md). This script compiles
``jax.jit(lambda p: fddp(p))`` as the default settings do, reads the optimised HLO
(``compiled.as_text()``) and, for each ``while`` loop whose body holds the solver's named
scopes (``rollout_step``: :func:`jaxdyn.trajopt.ddp._forward`; ``riccati_step``:
:func:`~jaxdyn.trajopt.ddp._backward`; ``setup_rollout``), prints the number of kernels of one
trip: every instruction of the body except those that launch nothing (``parameter``,
``get-tuple-element``, ``tuple``, ``constant``, ``bitcast``), with nested loops and
conditionals counted once plus their own bodies. Deterministic: no timing.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: instructions of a loop body that launch no kernel on XLA:CPU
FREE = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast"}
SCOPES = ("rollout_step", "riccati_step")

_COMP = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$")
_INST = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (.*?) ([\w\-]+)\(")


def computations(hlo: str) -> dict:
    """``{name: [instruction lines]}`` of an HLO module's text."""
    out, cur = {}, None
    for line in hlo.splitlines():
        m = _COMP.match(line)
        if m and not line.startswith(" "):
            cur = out.setdefault(m.group(1), [])
            continue
        if line.startswith("}"):
            cur = None
        elif cur is not None and line.strip():
            cur.append(line)
    return out


def opcode(line: str) -> str | None:
    m = _INST.match(line)
    return m.group(3) if m else None


def kernels(lines: list) -> collections.Counter:
    """Kernels of one pass through ``lines`` (a computation), by opcode (fusions by kind)."""
    c = collections.Counter()
    for line in lines:
        op = opcode(line)
        if op is None or op in FREE:
            continue
        if op == "fusion":
            m = re.search(r"kind=(\w+)", line)
            op = f"fusion:{m.group(1) if m else '?'}"
        elif op == "custom-call":
            m = re.search(r'custom_call_target="([^"]+)"', line)
            op = f"custom-call:{m.group(1) if m else '?'}"
        c[op] += 1
    return c


def loops(hlo: str) -> list:
    """``(body name, trip count or None, scopes found in the body, kernels)`` of every while
    loop of the module."""
    comps = computations(hlo)
    out = []
    for lines in comps.values():
        for line in lines:
            if opcode(line) != "while":
                continue
            body = re.search(r"body=%?([\w.\-]+)", line).group(1)
            trip = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
            text = "\n".join(comps.get(body, []))
            scopes = tuple(s for s in SCOPES if s in text)
            out.append((body, int(trip.group(1)) if trip else None, scopes, kernels(comps[body])))
    return out


def knot_kernels(hlo: str, scope: str, trip: int) -> collections.Counter:
    """The kernels of one trip of the ``trip``-count loop whose body carries ``scope`` (the
    one with most kernels if several; a ``ValueError`` if none)."""
    found = [k for _, n, s, k in loops(hlo) if scope in s and n == trip]
    if not found:
        raise ValueError(f"no while loop of {trip} trips holds the named scope {scope!r}")
    return max(found, key=lambda k: sum(k.values()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--robot", default="ur5")
    ap.add_argument("--horizon", type=int, default=20)
    ap.add_argument("--list", action="store_true", help="every loop's kernels by opcode")
    ap.add_argument("--dump", help="write the optimised HLO to this file")
    a = ap.parse_args(argv)
    import os

    import _env

    _env.single_threaded()
    # compiled here, not read back from the persistent cache (whose executables keep the
    # metadata, hence the named scopes, of the process that compiled them)
    os.environ.setdefault("JAXDYN_COMPILATION_CACHE", "0")
    import time

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    from _trajopt_problems import goal_state, load_model, make_problem

    import jaxdyn
    from jaxdyn.trajopt import ddp

    model, _, _ = load_model(a.robot)
    q0 = jaxdyn.neutral_configuration(model)
    x0 = jnp.concatenate([q0, jnp.zeros(model.nv)])
    problem = make_problem(model, a.horizon, x0, goal_state(model, q0, 0.3 * jnp.ones(model.nv)))
    t0 = time.process_time()
    compiled = jax.jit(lambda p: ddp.fddp(p)).lower(problem).compile()
    t_compile = time.process_time() - t0
    hlo = compiled.as_text()
    if a.dump:
        Path(a.dump).write_text(hlo)
    print(f"{a.robot}, T = {a.horizon}: compiled in {t_compile:.1f} s of CPU")
    for scope in SCOPES:
        k = knot_kernels(hlo, scope, a.horizon)
        print(f"{scope}: {sum(k.values())} kernels per knot  {dict(sorted(k.items()))}")
    if a.list:
        for body, n, s, k in loops(hlo):
            print(f"  {body}: trips {n}, scopes {s}, {sum(k.values())} kernels {dict(k)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

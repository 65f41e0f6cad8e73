"""A batch solved by the host inside the caller's ``jit``: one ``jax.pure_callback`` whose Python
function runs each member's own compiled program, one host thread per core.

Inside a ``jax.jit`` a batch of loops (a ``lax.map`` of a solver's ``while_loop``) runs on one
core: XLA:CPU's runtime (jaxlib 0.10.2) runs independent ``while`` loops of one program one
after the other (a program of two took as long as the two in turn, their threads' CPU time never
overlapping, with or without distinct buffer shapes; ``docs/trajopt.md``). Outside ``jit`` the
same members solved from host threads run on every core, each thread running an executable of
its own (XLA releases the GIL while it runs). :func:`host_map` takes that route inside the
caller's program: the program holds one host callback, and the callback's function (``host``)
solves the members with concrete arrays, as a call outside ``jit`` would.

What that costs, and keeps:

* **Values**: ``host``'s, bit for bit (the program around it only passes the arrays through).
* **Derivatives**: a ``jax.custom_jvp`` whose rule is ``jax.jvp`` of ``traced``, the caller's
  in-program form of the same computation (for a solver: ``lax.map`` of the one-problem
  solve), so forward-mode derivatives (``jax.jvp``, ``jax.jacfwd``, ``vmap`` of them) are
  those of ``traced``, computed by ``traced`` (primal included); reverse mode is what
  ``traced`` allows. An outer ``jax.vmap`` calls ``host`` once per outer member
  (``vmap_method="sequential"``).
* **The program**: the callback is a custom call that is not serializable (``jax.export``
  refuses it) and that XLA cannot fuse or move; its function runs on the host with the GIL,
  so it is for the CPU backend (the caller decides where to use it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


def host_map(
    host: Callable[..., Sequence[Any]],
    traced: Callable[..., Sequence[Any]],
    args: Sequence[Any],
    out_shapes: Sequence[Any],
) -> list[Any]:
    """``host(*args)`` run by the host inside the caller's program (see the module): ``args``
    arrays or tracers, ``host`` takes them as numpy arrays and returns a flat sequence of arrays
    of ``out_shapes`` (``jax.ShapeDtypeStruct`` s); ``traced(*args)``, the same computation in
    JAX, gives the derivatives (``jax.jvp`` of it). Returns the flat list of results."""
    import jax
    import numpy as np

    out_shapes = list(out_shapes)

    def on_host(*xs):
        # JAX runs a callback under ``jax.default_device`` of its device, part of the trace
        # context that ``jax.jit`` keys its caches by: the programs ``host`` runs would
        # compile again for it (once more than outside the callback)
        with jax.default_device(None):
            outs = host(*[np.asarray(x) for x in xs])  # (some arrive as jax arrays)
        return [np.asarray(o, s.dtype).reshape(s.shape) for o, s in zip(outs, out_shapes)]

    @jax.custom_jvp
    def run(*xs):
        return jax.pure_callback(on_host, out_shapes, *xs, vmap_method="sequential")

    @run.defjvp
    def run_jvp(primals, tangents):
        out, tan = jax.jvp(lambda *xs: list(traced(*xs)), list(primals), list(tangents))
        return out, tan

    return list(run(*args))

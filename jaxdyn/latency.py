"""One robot at a time with the least overhead per call: :func:`compile_for_latency`.

``jax.jit(jaxdyn.rnea)(model, q, v, a)`` at batch 1 spends most of its time outside the
dynamics: JAX flattens the model (a pytree of some 15 arrays) and checks every argument at
each call, and its CPU client hands the program to a worker thread and wakes the caller when
it is done (asynchronous dispatch). :func:`compile_for_latency` compiles ``fn(model, ...)``
once for the shapes of example arguments, with the model's arrays as constants of the program
and the arguments packed into one vector, and returns a :class:`LatencyCall`: numpy arrays in,
numpy arrays out, one buffer each way, and (by default) a synchronous XLA:CPU client of its own
(:mod:`jaxdyn.backend.sync_client`) that runs the program on the calling thread, without
changing how JAX runs the process's other programs. For control loops and other callers that
evaluate one state at a time and wait for the answer; batches, derivatives through the call and
JAX transformations stay with ``jax.jit`` / ``jax.vmap``.

A failed value check of the function (:mod:`jaxdyn.value_checks`) raises
:class:`jaxdyn.CheckError` with its message. The program is the one ``jax.jit`` compiles for
the same function (on the CPU an algorithm evaluated alone is one XLA:CPU kernel,
:mod:`jaxdyn.backend.small_calls`), with the arguments sliced out of the packed vector: values
equal ``jax.jit``'s to rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import value_checks
from .backend import sync_client
from .errors import CheckError

__all__ = ["DISPATCH", "PACK_RESULTS", "LatencyCall", "compile_for_latency"]

#: ``dispatch`` values of :func:`compile_for_latency`
DISPATCH = ("sync", "jax")
#: results of at most this many numbers in all come back packed into one vector (one transfer);
#: larger ones one array each (packing ``nv x nv`` matrices costs a copy of each inside the
#: program, more than the transfers it saves: talos_full's ``rnea_derivatives``)
PACK_RESULTS = 2048
#: custom-call targets of JAX's host callbacks (a program holding one stays on JAX's client)
_HOST_CALLBACKS = ("xla_python_cpu_callback", "xla_ffi_python_cpu_callback")


class LatencyCall:
    """``fn(model, *args)`` compiled by :func:`compile_for_latency` for one set of argument
    shapes; call it with numpy arrays (or anything ``np.asarray`` takes) of those shapes.

    Returns the function's result with numpy arrays as leaves: read-only views of the
    program's output buffers (``.copy()`` one to keep it writable), each call new buffers
    (results of at most :data:`PACK_RESULTS` numbers in all come back as one buffer).

    Attributes: ``dispatch`` (``"sync"``: the private synchronous client; ``"jax"``: JAX's
    own client through ``jax.jit``), ``shapes`` (the arguments' shapes), ``dtype``.
    """

    def __init__(
        self,
        run: Callable[[np.ndarray], Any],
        dispatch: str,
        shapes: tuple[tuple[int, ...], ...],
        dtype: np.dtype,
        name: str,
        outs: list[tuple[int, int, tuple[int, ...]]],
        tree: Any,
        packed: bool = True,
    ) -> None:
        self.dispatch = dispatch
        self.shapes = shapes
        self.dtype = dtype
        self.__name__ = name
        self._run = run
        self._outs = outs
        self._tree = tree
        self._single = tree is None
        self._packed = packed
        self._vectors = all(len(s) == 1 for s in shapes)
        self._flat_out = self._single and len(outs[0][2]) == 1
        # a flat tuple of arrays (the derivatives): built without the pytree machinery
        self._tuple = not self._single and tree == jax.tree_util.tree_structure(
            tuple(range(len(outs)))
        )

    def _pack(self, args: Sequence[Any]) -> np.ndarray:
        """The arguments as one vector of ``dtype`` (checked against the compiled shapes)."""
        if tuple(map(np.shape, args)) != self.shapes:
            if len(args) != len(self.shapes):
                raise TypeError(
                    f"{self.__name__}: {len(args)} arguments given, compiled for {len(self.shapes)}"
                )
            i, shape = next(
                (i, np.shape(x)) for i, x in enumerate(args) if np.shape(x) != self.shapes[i]
            )
            raise ValueError(
                f"{self.__name__}: argument {i} has shape {shape}, compiled for {self.shapes[i]}"
            )
        if self._vectors:  # every argument a vector (q, v, tau): no ravel
            return np.concatenate(args, dtype=self.dtype)
        return np.concatenate([np.ravel(x) for x in args], dtype=self.dtype)

    def __call__(self, *args: Any) -> Any:
        x = self._pack(args)
        try:
            if not self._packed:  # one array per result
                leaves = [np.asarray(r) for r in self._run(x)]
                if self._tuple:
                    return tuple(leaves)
                return jax.tree_util.tree_unflatten(self._tree, leaves)
            buf = np.asarray(self._run(x))
        except (jax.errors.JaxRuntimeError, ValueError) as e:
            msg = value_checks.message_of(e)
            if msg is None:
                raise
            raise CheckError(msg) from None
        if self._single:
            return buf if self._flat_out else buf.reshape(self._outs[0][2])
        if self._tuple:
            return tuple([buf[o : o + n].reshape(s) for o, n, s in self._outs])
        leaves = [buf[o : o + n].reshape(s) for o, n, s in self._outs]
        return jax.tree_util.tree_unflatten(self._tree, leaves)


def compile_for_latency(
    fn: Callable[..., Any], model: Any, *example: Any, dispatch: str = "sync"
) -> LatencyCall:
    """``fn(model, *args)`` compiled for the shapes of ``example`` (arrays, one per argument
    after the model: ``compile_for_latency(jaxdyn.aba, model, q, v, tau)``), for calls that
    evaluate one state at a time and wait for the result (see the module docstring).

    ``fn``: a function of the model and arrays returning an array or a pytree of floating
    arrays (jaxdyn's algorithms, or your own function of them). The model is closed over:
    its arrays are constants of the program (compile again after changing them).
    ``dispatch``: ``"sync"`` (default) runs the program on a synchronous XLA:CPU client of
    jaxdyn's own (:mod:`jaxdyn.backend.sync_client`), on the calling thread whatever
    ``jax_cpu_enable_async_dispatch`` says; ``"jax"`` runs it through ``jax.jit`` on JAX's
    default device (what a process that turned asynchronous dispatch off, or runs on a GPU,
    already has). ``"sync"`` falls back to ``"jax"`` where JAX's default backend is not the
    CPU or this JAX lacks the internals it uses (``LatencyCall.dispatch`` says which).

    Arguments are cast to one floating dtype (that of the examples, float64 under
    ``jax_enable_x64``) and packed into one vector; the results come back packed the same way
    up to :data:`PACK_RESULTS` numbers. Compiled here, once (calls never trace or compile)."""
    if dispatch not in DISPATCH:
        raise ValueError(f"dispatch must be one of {DISPATCH}, got {dispatch!r}")
    if not example:
        raise TypeError("compile_for_latency needs example arguments after the model")
    xs = [np.asarray(x) for x in example]
    for i, x in enumerate(xs):
        if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
            raise TypeError(f"example argument {i} is not a real array (dtype {x.dtype})")
    dtype = np.dtype(jnp.result_type(*[x.dtype for x in xs], float))
    shapes = tuple(tuple(x.shape) for x in xs)
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    offsets = np.cumsum([0, *sizes]).tolist()
    name = getattr(fn, "__name__", "fn")
    info: dict = {}

    def program(x):
        args = [x[o : o + n].reshape(s) for o, n, s in zip(offsets, sizes, shapes)]
        leaves, tree = jax.tree_util.tree_flatten(fn(model, *args))
        for leaf in leaves:
            if not jnp.issubdtype(jnp.result_type(leaf), jnp.floating):
                raise TypeError(
                    f"compile_for_latency: {name} returns a non-floating array "
                    f"({jnp.result_type(leaf)})"
                )
        info["tree"] = tree
        info["shapes"] = [tuple(jnp.shape(v)) for v in leaves]
        info["packed"] = len(leaves) == 1 or sum(jnp.size(v) for v in leaves) <= PACK_RESULTS
        if not info["packed"]:
            return tuple(leaves)
        odtype = jnp.result_type(*leaves)
        flat = [jnp.ravel(v).astype(odtype) for v in leaves]
        return jnp.concatenate(flat) if len(flat) > 1 else flat[0]

    packed = np.concatenate([x.ravel().astype(dtype) for x in xs])
    use_sync = dispatch == "sync" and jax.default_backend() == "cpu" and sync_client.available()
    run: Callable[[np.ndarray], Any] = jax.jit(program)
    if use_sync:
        # jit for the synchronous client's device: compiled for that client, run there
        on = jax.sharding.SingleDeviceSharding(sync_client.device())
        run = jax.jit(program, in_shardings=on, out_shardings=on)
        # a host callback (equinox's value checks where jaxdyn's handler is not built) calls
        # back into JAX's own client: such a program stays there
        if any(k in run.lower(packed).as_text() for k in _HOST_CALLBACKS):  # type: ignore[attr-defined]
            run, use_sync = jax.jit(program), False
    try:  # compiles and fills info; a failed value check of the example is no error
        jax.block_until_ready(run(packed))
    except (jax.errors.JaxRuntimeError, ValueError) as e:
        if value_checks.message_of(e) is None:
            raise
    outs, o = [], 0
    for s in info["shapes"]:
        n = int(np.prod(s, dtype=np.int64))
        outs.append((o, n, s))
        o += n
    tree = info["tree"]
    single = tree.num_leaves == 1 and jax.tree_util.treedef_is_leaf(tree)
    return LatencyCall(
        run,
        "sync" if use_sync else "jax",
        shapes,
        dtype,
        name,
        outs,
        None if single else tree,
        info["packed"],
    )

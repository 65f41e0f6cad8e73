"""Cache-friendly batching: ``jax.vmap`` of jaxdyn's functions evaluated in chunks.

Under a plain ``jax.vmap`` every intermediate of a dynamics algorithm holds the whole batch: at
batch 1024 one ``nv x nv`` float64 array of a 50-coordinate humanoid is 20 MB, far beyond the
caches, and the run becomes bound by the memory traffic between XLA's kernels (and, with
glibc's default allocator, by page faults: buffers that large are mapped afresh on every call).
Evaluating the same vectorised code on chunks of a few hundred samples at a time (a
``lax.map`` over chunks, a ``vmap`` inside each) keeps the intermediates in the last-level
cache: on a 50-coordinate humanoid at batch 1024 it made ``aba``, ``crba``, ``minv`` and the
analytic derivatives 1.2 to 3 times faster per sample on the CPU, the most when another process
shared the memory bus (``benchmarks/RESULTS.md``, section "Plain jax.vmap against Pinocchio
C++"). The algorithms with small per-sample working sets (rnea, kinematics) ran as fast or
faster as one ``vmap``, so they carry no rule.

Users should not have to know this, so the public functions listed in
``jaxdyn._checks.BATCHED`` carry a **batching rule** (:func:`batched`, built on
``jax.custom_batching.custom_vmap``): the plain
``jax.jit(jax.vmap(jaxdyn.aba, in_axes=(None, 0, 0, 0)))`` runs the chunked evaluation on the
CPU. On GPUs and TPUs, where a whole batch is one wide kernel, the rule is a plain ``vmap``.
The switch ``jaxdyn.config.update("vmap_chunk", n)`` sets the chunk size (``-1``, the default,
chooses it from the model's size; ``0`` turns the rule off).

:func:`vmap` is the explicit form, for functions of your own: ``jaxdyn.vmap(f, chunk_size=32)``.

Differentiation: the rule is a ``custom_jvp`` around a ``custom_vmap``; derivatives are those
of the function itself (its own analytic rules included), and ``jax.vmap`` of a derivative
(``jax.vmap(jax.jacfwd(jaxdyn.rnea, argnums=1))``) batches the derivative computation as
plain ``vmap``. For batched analytic partials, ``jax.vmap(jaxdyn.rnea_derivatives)`` and
``jax.vmap(jaxdyn.aba_derivatives)`` run chunked.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading

import jax
import jax.numpy as jnp
import numpy as np

from . import config

DEFAULT_CHUNK = 32

#: bytes of working set that a chunk may fill: a few MB, within the last-level cache. Not the
#: L2 size: the chunk loop runs the function's kernels once per chunk (a few hundred for ABA on
#: a humanoid, about 0.3 us each), so small chunks pay that launch cost on few samples.
#: Measured on talos_full, float64, B=1024, us per sample by chunk size 32 / 128 / 256 (one
#: vmap): aba 10.3 / 8.1 / 7.2 (21.1), minv 19.4 / 16.1 / 14.3 (31.2), crba - / 5.9 / 5.4
#: (6.6), aba_derivatives 57 / 60 / 70 (110, 8: 63), rnea_derivatives 23.5 / 23.3 / 33 (65)
CHUNK_BYTES = 1 << 22
#: bounds of the automatic chunk size
CHUNK_MIN, CHUNK_MAX = 8, 512


def vmap(fun, in_axes=0, chunk_size: int | None = DEFAULT_CHUNK):
    """Like ``jax.vmap(fun, in_axes)`` with ``out_axes=0``, evaluated ``chunk_size`` samples at a
    time (``jax.lax.map(..., batch_size=chunk_size)``). ``chunk_size=None`` is plain ``jax.vmap``.

    ``in_axes`` is ``0``, ``None`` or a tuple of those, one per positional argument (pytrees
    are batched or broadcast whole). jaxdyn's own functions need none of this (see the module
    docstring); it is for functions of your own.
    """
    if chunk_size is None:
        return jax.vmap(fun, in_axes=in_axes)

    @functools.wraps(fun)
    def wrapped(*args):
        axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        if len(axes) != len(args):
            raise ValueError(
                f"jaxdyn.vmap: in_axes has {len(axes)} entries for {len(args)} arguments"
            )
        for ax in axes:
            if ax not in (0, None):
                raise ValueError("jaxdyn.vmap: in_axes entries must be 0 or None")
        batched = tuple(a for a, ax in zip(args, axes) if ax == 0)

        def one(xs):
            it = iter(xs)
            full = [next(it) if ax == 0 else a for a, ax in zip(args, axes)]
            return fun(*full)

        n = jax.tree_util.tree_leaves(batched)[0].shape[0] if batched else 0
        with _inside(batch=n):
            return jax.lax.map(one, batched, batch_size=chunk_size)

    return wrapped


# ----------------------------------------------------------------------------- batching rule


#: per-sample working sets below this many numbers run as plain ``vmap`` (measured: chunking
#: slowed rnea, crba, aba and a 18-coordinate minv at batch 1024, and sped up the
#: ``nv x nv``-sized derivative and inverse-inertia passes of larger models)
CHUNK_MIN_WORDS = 1024


def auto_chunk(words: int, itemsize: int = 8) -> int | None:
    """The chunk size chosen for a per-sample working set of ``words`` numbers of ``itemsize``
    bytes: ``None`` (plain ``vmap``) below :data:`CHUNK_MIN_WORDS`, else the power of two
    (within [:data:`CHUNK_MIN`, :data:`CHUNK_MAX`]) whose chunk fills about
    :data:`CHUNK_BYTES`."""
    if words < CHUNK_MIN_WORDS:
        return None
    n = CHUNK_BYTES / (words * itemsize)
    c = 2 ** int(np.clip(np.round(np.log2(max(n, 1.0))), 0, 30))
    return int(np.clip(c, CHUNK_MIN, CHUNK_MAX))


def chunk_size_for(words: int, axis_size: int, itemsize: int = 8) -> int | None:
    """Chunk size the batching rule uses for ``axis_size`` samples whose working sets have
    ``words`` numbers each (``None``: plain ``vmap``): off on non-CPU backends, with
    ``vmap_chunk = 0``, for small working sets (automatic size) and when the batch fits in one
    chunk."""
    setting = config.get("vmap_chunk")
    if setting == 0 or jax.default_backend() != "cpu":
        return None
    c = auto_chunk(words, itemsize) if setting < 0 else int(setting)
    return None if c is None or axis_size <= c else c


class _Inside(threading.local):
    active = False
    batch = 0  # the batch size while a batching rule traces its function, else 0
    unchecked = False  # jaxdyn._checks.unchecked(): value checks left out of the trace


_INSIDE = _Inside()


@contextlib.contextmanager
def _inside(**state):
    """Set attributes of the thread's :class:`_Inside` state for a block, restoring them."""
    prev = {k: getattr(_INSIDE, k) for k in state}
    for k, v in state.items():
        setattr(_INSIDE, k, v)
    try:
        yield
    finally:
        for k, v in prev.items():
            setattr(_INSIDE, k, v)


def rule_batch_size() -> int:
    """The number of samples of the batch whose rule is tracing the function now: ``0`` for an
    unbatched evaluation (no batching rule active), ``-1`` while a derivative is traced (it may
    be batched later, by a transform this rule does not see). Lets an algorithm choose a form
    that is faster batched (fewer flops) over one that is faster alone (fewer kernels, or a
    LAPACK call that would be a slow loop over a batch)."""
    return _INSIDE.batch


def _is_array(x) -> bool:
    return isinstance(x, (jax.Array, jax.core.Tracer))


def _float_like(x) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


def _chunked_vmap(f, axis_size, in_batched, args, chunk):
    """``vmap(f)`` over the batched ``args``, as a ``lax.map`` over chunks of ``chunk``
    samples (the batch padded with copies of its last sample to a multiple of ``chunk``, so
    that one chunk program is compiled)."""
    axes = [0 if b else None for b in in_batched]
    vf = jax.vmap(f, in_axes=axes)
    if chunk is None:
        return vf(*args)
    n = -(-axis_size // chunk)
    pad = n * chunk - axis_size

    def split(x):
        if pad:
            x = jnp.concatenate([x, jnp.broadcast_to(x[-1:], (pad,) + x.shape[1:])], 0)
        return x.reshape((n, chunk) + x.shape[1:])

    xs = [split(a) for a, b in zip(args, in_batched) if b]

    def body(batched):
        it = iter(batched)
        return vf(*[next(it) if b else a for a, b in zip(args, in_batched)])

    out = jax.lax.map(body, xs)
    return jax.tree_util.tree_map(lambda y: y.reshape((n * chunk,) + y.shape[2:])[:axis_size], out)


def batched(fn, words):
    """Give ``fn(model, ...)`` a batching rule that evaluates ``jax.vmap(fn)`` in cache-sized
    chunks on the CPU (see the module docstring); ``words(model, itemsize)`` estimates the
    numbers one sample keeps live (e.g. ``4 nv^2`` for the derivative algorithms; 0: no
    automatic chunks), from which :func:`chunk_size_for` picks the chunk.

    JAX array leaves of the arguments (``jax.Array``, tracers) are the rule's operands; every
    other leaf (names, indices, flags, Python numbers, numpy constants) stays static. Called
    outside any trace, ``fn`` runs as is. Derivatives are ``fn``'s own (a ``custom_jvp`` whose
    rule is ``jax.jvp`` of ``fn`` in the tangents that are not symbolically zero).
    """
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        dyn = [i for i, x in enumerate(leaves) if _is_array(x)]
        if _INSIDE.active or not any(isinstance(leaves[i], jax.core.Tracer) for i in dyn):
            return fn(*args, **kwargs)
        model = sig.bind(*args, **kwargs).arguments.get(next(iter(sig.parameters)))
        # the rule may trace fn later (vmap of a loop batches the loop's body after tracing
        # it), so the caller's choice of value checks travels with the call
        unchecked = _INSIDE.unchecked

        def call(*xs):
            full = list(leaves)
            for i, x in zip(dyn, xs):
                full[i] = x
            a, k = jax.tree_util.tree_unflatten(treedef, full)
            # public functions called by fn run as plain code
            with _inside(active=True, unchecked=unchecked):
                return fn(*a, **k)

        def rule(axis_size, in_batched, *xs):
            itemsize = max(
                (
                    jnp.result_type(x).itemsize
                    for x, b in zip(xs, in_batched)
                    if b and _float_like(x)
                ),
                default=8,
            )
            chunk = chunk_size_for(words(model, itemsize), axis_size, itemsize)
            with _inside(batch=axis_size):
                out = _chunked_vmap(call, axis_size, list(in_batched), xs, chunk)
            return out, jax.tree_util.tree_map(lambda _: True, out)

        call.__name__ = call.__qualname__ = f"{fn.__name__}_batched"
        cv = jax.custom_batching.custom_vmap(call)
        cv.def_vmap(rule)
        cj = jax.custom_jvp(cv)

        def jvp(primals, tangents):
            from jax.custom_derivatives import SymbolicZero

            live = [
                i
                for i, (p, t) in enumerate(zip(primals, tangents))
                if not isinstance(t, SymbolicZero) and _float_like(p)
            ]

            def g(*ys):
                full = list(primals)
                for i, y in zip(live, ys):
                    full[i] = y
                return call(*full)

            # a derivative may be batched without this rule seeing it (jax.vmap(jax.grad(f))
            # batches the rule's trace): the batch is unknown (-1) while it is traced
            with _inside(batch=-1):
                if not live:
                    out = call(*primals)
                    return out, jax.tree_util.tree_map(jnp.zeros_like, out)
                return jax.jvp(g, [primals[i] for i in live], [tangents[i] for i in live])

        cj.defjvp(jvp, symbolic_zeros=True)
        return cj(*[leaves[i] for i in dyn])

    return wrapper

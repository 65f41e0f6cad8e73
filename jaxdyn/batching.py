"""Cache-friendly batching: ``jax.vmap`` of jaxdyn's functions evaluated in chunks.

Under a plain ``jax.vmap`` every intermediate of a dynamics algorithm holds the whole batch: at
batch 1024 one ``nv x nv`` float64 array of a 50-coordinate humanoid is 20 MB, far beyond the
caches, and the run becomes bound by the memory traffic between XLA's kernels (and, with
glibc's default allocator, by page faults: buffers that large are mapped afresh on every call,
which jaxdyn's allocator settings avoid for the outputs, :mod:`jaxdyn.backend.allocator`).
Evaluating the same vectorised code on chunks of a few dozen samples at a time (a loop
over chunks, a ``vmap`` inside each) keeps the intermediates in a core's private L2 cache,
which makes every batched algorithm faster per sample on a CPU, on a 12-joint quadruped and on
a 50-coordinate humanoid alike (``benchmarks/vs_cpp.py``; ``docs/performance.md``). The L3
cache is shared with whatever else runs on the machine, so chunks are sized for the private
cache (:data:`CHUNK_BYTES`).

Users should not have to know this, so the public functions that declare a chunk policy
(``words=`` of ``jaxdyn.shell.public``, next to each function) carry a **batching rule**
(:func:`batched`, built on ``jax.custom_batching.custom_vmap``): the plain
``jax.jit(jax.vmap(jaxdyn.aba, in_axes=(None, 0, 0, 0)))`` runs the chunked evaluation on the
CPU. On GPUs and TPUs, where a whole batch is one wide kernel, the rule is a plain ``vmap``.
The switch ``jaxdyn.config.update("vmap_chunk", n)`` sets the chunk size (``-1``, the default,
chooses it from the model's size; ``0`` turns the rule off).

:func:`vmap` is the explicit form, for functions of your own: ``jaxdyn.vmap(f, chunk_size=32)``.

One sample at a time: the same rule's function, traced unbatched inside a caller's ``jit``
on the CPU (``jax.jit(jaxdyn.aba)``), is compiled as one XLA:CPU kernel where it can be
(:mod:`jaxdyn.backend.small_calls`; the switch ``fused_unbatched``): at batch 1 a program of
dozens to hundreds of small kernels is bound by their launches, not by the arithmetic.

Several devices: a batch sharded over ``Explicit`` mesh axes (``jax.make_mesh``'s default in
recent JAX, under ``jax.set_mesh``) is evaluated per shard (``jax.shard_map``, each device's
chunk loop on its own samples); for ``Auto`` axes use :func:`jaxdyn.sim.sharded_vmap`, as XLA's
partitioner would gather the chunk loop's batch onto every device.

Differentiation: the rule is a ``custom_jvp`` around a ``custom_vmap``; derivatives are those
of the function itself (its own analytic rules included). Under ``jax.jit(jax.vmap(f))`` the
rule runs at once, while ``jit`` traces (:func:`jaxdyn.backend.internals.staged_vmap_operands`:
``custom_vmap`` would trace ``f`` unbatched first, for its output types only), so a derivative
of that compiled function differentiates the chunk loop; and ``jax.vmap`` of a derivative
(``jax.vmap(jax.jacfwd(jaxdyn.rnea, argnums=1))``) batches the derivative computation as
plain ``vmap``. For batched analytic partials, ``jax.vmap(jaxdyn.rnea_derivatives)`` and
``jax.vmap(jaxdyn.aba_derivatives)`` run chunked.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

import jax
import jax.core
import jax.extend
import jax.numpy as jnp
import numpy as np

from . import _progress, config
from .backend import small_calls
from .backend.ffi import EXPLICIT, explicit_split, shard_map, uninitialized
from .backend.internals import staged_vmap_operands, staged_vmap_results
from .backend.sharding import explicit_context

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_CHUNK = 32

#: bytes of working set that a chunk may fill: well inside a core's private L2 cache (1 MB on
#: the AMD EPYC (Zen 4) the benchmarks ran on; ``words`` estimates undercount XLA's temporaries,
#: hence about a third of it). Chunks sized for the private cache won on every algorithm and
#: both robots when the shared L3 was busy (as on a machine running many environments); on a
#: quiet machine larger chunks can be faster. The measurements by chunk size are in
#: ``docs/design-measurements.md`` (``CHUNK_BYTES``).
CHUNK_BYTES = 384 << 10
#: bounds of the automatic chunk size: a chunk runs the function's kernels once (a few hundred
#: for ABA on a humanoid), so chunks below 16 samples pay that cost on too few samples; above
#: 128 no algorithm was faster and ABA was slower on solo12 (float32, whose chunks by bytes
#: were 256; ``docs/design-measurements.md``)
CHUNK_MIN, CHUNK_MAX = 16, 128
#: in a process that may run on several cores, XLA:CPU compiles a fusion whose cost estimate
#: (flops + 2 transcendentals + 10 bytes accessed) passes 100,000 per thread into parts run by
#: its threads (``ParallelTaskAssigner``, ``outer_dimension_partitions`` in the optimised HLO);
#: the chunk's later kernels then run on whichever thread finished last, so the chunk's data
#: moves between the cores' private caches, several times per chunk. The first fusion split in
#: every algorithm is the sine and cosine of the one-DoF joint angles
#: (:func:`jaxdyn.backend.fusion.sincos`): in float64 at 704 and 768 angles per chunk, not at
#: 352 or 384. The automatic chunk is capped at this many float64 angles (twice as many in
#: float32) in such a process (:func:`threaded_chunk_cap`); pinned to one core, XLA splits
#: nothing and the cap is off (``docs/performance.md``, "Threads")
THREADED_ANGLES = 384
#: the smallest chunk :func:`threaded_chunk_cap` gives (below, the kernels run on too few
#: samples)
THREADED_CHUNK_MIN = 8
#: ``jaxdyn.joints.ONE_DOF`` (the joint kind whose angle goes through ``sincos``; this module
#: sits below ``jaxdyn.joints``; ``tests/test_batching.py`` checks the two agree)
_ONE_DOF = 0


def vmap(
    fun: Callable[..., Any], in_axes: int | tuple | None = 0, chunk_size: int | None = DEFAULT_CHUNK
) -> Callable[..., Any]:
    """Like ``jax.vmap(fun, in_axes)`` with ``out_axes=0``, evaluated in chunks of at most
    ``chunk_size`` samples: the same equal chunks as the batching rule of jaxdyn's own functions
    (``ceil(B / chunk_size)`` chunks, the last one overlapping the one before it where they do
    not divide ``B``, see :func:`chunk_split`), so one chunk program is compiled.
    ``chunk_size=None`` is plain ``jax.vmap``; so is a batch that fits in one chunk.

    ``in_axes`` is ``0``, ``None`` or a tuple of those, one per positional argument (pytrees
    are batched or broadcast whole). jaxdyn's own functions need none of this (see the module
    docstring); it is for functions of your own.
    """
    if chunk_size is None:
        return jax.vmap(fun, in_axes=in_axes)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)):
        raise TypeError(
            f"jaxdyn.vmap: chunk_size must be a positive int or None, got {chunk_size!r}"
        )
    if chunk_size < 1:
        raise ValueError(
            f"jaxdyn.vmap: chunk_size must be a positive int or None, got {chunk_size}"
        )

    @functools.wraps(fun)
    def wrapped(*args):
        axes = batch_axes("jaxdyn.vmap", in_axes, len(args))
        in_batched = [ax == 0 for ax in axes]
        leaves = jax.tree_util.tree_leaves([a for a, b in zip(args, in_batched) if b])
        if not leaves:  # nothing to batch over: jax.vmap's own error
            return jax.vmap(fun, in_axes=axes)(*args)
        n = leaves[0].shape[0]
        with _inside(batch=n):
            return _chunked_vmap(fun, n, in_batched, args, chunk_size if n > chunk_size else None)

    return wrapped


def batch_axes(who: str, in_axes: int | None | tuple[int | None, ...], nargs: int) -> tuple:
    """``in_axes`` (``0``, ``None`` or a tuple of those) as one entry per positional argument,
    for :func:`vmap` and :func:`jaxdyn.sim.sharded_vmap`; ``ValueError`` naming ``who``."""
    axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * nargs
    if len(axes) != nargs:
        raise ValueError(f"{who}: in_axes has {len(axes)} entries for {nargs} arguments")
    for ax in axes:
        if ax not in (0, None):
            raise ValueError(f"{who}: in_axes entries must be 0 or None")
    return axes


# ----------------------------------------------------------------------------- batching rule


def auto_chunk(words: int, itemsize: int = 8) -> int | None:
    """The chunk size chosen for a per-sample working set of ``words`` numbers of ``itemsize``
    bytes: ``None`` (no chunks) when ``words`` is 0, else the power of two (within
    [:data:`CHUNK_MIN`, :data:`CHUNK_MAX`]) whose chunk fills about :data:`CHUNK_BYTES`."""
    if words <= 0:
        return None
    n = CHUNK_BYTES / (words * itemsize)
    c = 2 ** int(np.clip(np.round(np.log2(max(n, 1.0))), 0, 30))
    return int(np.clip(c, CHUNK_MIN, CHUNK_MAX))


def capped_when_threaded(words: Callable[[Any, int], int]) -> Callable[[Any, int], int]:
    """``words`` (a ``words=`` chunk policy of :func:`batched`) whose automatic chunk takes
    :func:`threaded_chunk_cap` in a process on several cores: for the functions measured faster
    with it there (``rnea``, ``minv``, the derivatives); ABA's plain process on talos_full was
    slower in chunks of 8 than of 32 (its small products' kernels run per chunk)."""

    @functools.wraps(words)
    def capped(model: Any, itemsize: int) -> int:
        return words(model, itemsize)

    setattr(capped, "threaded_cap", True)  # noqa: B010 (an attribute the rule reads)
    return capped


def usable_cores() -> int:
    """The cores this process may run on (its affinity; ``os.cpu_count()`` off Linux): the
    threads XLA:CPU compiles and runs its programs for."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def threaded_chunk_cap(model: Any, itemsize: int = 8) -> int | None:
    """The largest automatic chunk for ``model`` in a process that may run on several cores
    (:data:`THREADED_ANGLES`): a power of two, at least :data:`THREADED_CHUNK_MIN`; ``None``
    (no cap) on one core or for a model without one-DoF joints."""
    if usable_cores() <= 1:
        return None
    kind = getattr(getattr(model, "topo", None), "kind", None)
    n = 0 if kind is None else int(np.count_nonzero(np.asarray(kind) == _ONE_DOF))
    if n == 0:
        return None
    c = max(THREADED_ANGLES * 8 // (itemsize * n), 1)
    return max(THREADED_CHUNK_MIN, 1 << (c.bit_length() - 1))


def chunk_size_for(
    words: int, axis_size: int, itemsize: int = 8, cap: int | None = None
) -> int | None:
    """Chunk size the batching rule uses for ``axis_size`` samples whose working sets have
    ``words`` numbers each (``None``: plain ``vmap``): off on non-CPU backends, with
    ``vmap_chunk = 0``, for small working sets (automatic size) and when the batch fits in one
    chunk. ``cap``: the most samples of an automatic chunk (:func:`threaded_chunk_cap`)."""
    setting = config.get("vmap_chunk")
    if setting == 0 or _INSIDE.unchunked or jax.default_backend() != "cpu":
        return None
    c = auto_chunk(words, itemsize) if setting < 0 else int(setting)
    if c is not None and setting < 0 and cap is not None:
        c = min(c, cap)
    return None if c is None or axis_size <= c else c


class _Inside(threading.local):
    active = False
    batch = 0  # the batch size while a batching rule traces its function, else 0
    unchecked = False  # jaxdyn.value_checks.unchecked(): value checks left out of the trace
    # value checks by equinox.error_if, which fail at the call (jaxdyn.eager.compiled, for
    # eager transformations, whose results cannot be waited for inside the call)
    eqx_checks = False
    unchunked = False  # unchunked(): plain vmap, for programs partitioned over devices


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


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a block (on again after, if it was on).

    A trace allocates many small objects (tracers, equations, their source information), and
    the collector's passes over them took a tenth to a fifth of the time to trace a batching
    rule's function (talos_full ``rnea``, ``aba``); what the trace leaves cyclic is collected
    at the next pass after the block."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def unchunked() -> Iterator[None]:
    """Batching rules traced inside this block evaluate plain ``jax.vmap``, without the chunk
    loop. For a ``jax.jit(jax.vmap(...))`` that XLA partitions over several devices (arrays
    sharded over ``Auto`` mesh axes): the partitioner cannot split a loop over chunks of the
    batch and gathers the whole batch on every device instead. :func:`jaxdyn.sim.sharded_vmap`
    (``jax.shard_map``, the chunk loop on each device's samples) needs none of this, nor do
    batches sharded over ``Explicit`` axes (the rule splits them itself)."""
    with _inside(unchunked=True):
        yield


def rule_batch_size() -> int:
    """The number of samples of the batch whose rule is tracing the function now: ``0`` for an
    unbatched evaluation (no batching rule active), ``-1`` while a derivative is traced (it may
    be batched later, by a transform this rule does not see). Lets an algorithm choose a form
    that is faster batched (fewer flops) over one that is faster alone (fewer kernels, or a
    LAPACK call that would be a slow loop over a batch)."""
    return _INSIDE.batch


def _float_like(x) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


def chunk_split(axis_size: int, chunk: int) -> tuple[int, int, int]:
    """``(n, size, overlap)``: ``axis_size`` samples in ``n = ceil(axis_size / chunk)`` chunks
    of ``size <= chunk`` samples each; chunk ``i`` starts at ``min(i * size, axis_size -
    size)``, so the last one overlaps the one before it by ``overlap < n`` samples (computed
    twice, written twice with the same values)."""
    n = -(-axis_size // chunk)
    size = -(-axis_size // n)
    return n, size, n * size - axis_size


def _vmap_of_trace(f, in_batched, args):
    """``jax.vmap(f)`` (batched ``args`` on their leading axis), with ``f`` traced once
    unbatched into a jaxpr whose equations ``jax.vmap`` then batches one primitive each.

    Traced under ``jax.vmap`` directly, every ``jax.numpy`` operation of ``f`` (``a * b``,
    ``a + b``: each a small ``jax.jit`` of its own) is batched by JAX's rule for a nested
    ``jit``, which traces the operation's jaxpr again under the batch, and about a third of
    the time to trace ``jax.jit(jax.vmap(jaxdyn.rnea))`` (talos_full) went there; tracing
    ``f`` unbatched inlines them as it goes. The program is the same (the lowered StableHLO
    of ``rnea``, ``aba``, ``minv`` and the derivatives compared equal). Functions that read
    the batch from the trace (:func:`rule_batch_size`) see the same value, set by the caller.
    Under a mesh with ``Explicit`` axes (where the types carry shardings) this is plain
    ``jax.vmap``.
    """
    axes = [0 if b else None for b in in_batched]
    if explicit_context():
        return jax.vmap(f, in_axes=axes)

    def sample_type(x, b):
        t = jax.typeof(x)
        return jax.ShapeDtypeStruct(t.shape[1:] if b else t.shape, t.dtype, weak_type=t.weak_type)

    closed, out_shape = jax.make_jaxpr(f, return_shape=True)(
        *[sample_type(x, b) for x, b in zip(args, in_batched)]
    )
    tree = jax.tree_util.tree_structure(out_shape)

    def g(*ys):
        return jax.tree_util.tree_unflatten(
            tree, jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *ys)
        )

    return jax.vmap(g, in_axes=axes)


def _chunked_vmap(f, axis_size, in_batched, args, chunk, trace_once=False):
    """``vmap(f)`` over the batched ``args``, as a loop over chunks of at most ``chunk``
    samples: the batch is split into ``n = ceil(axis_size / chunk)`` equal chunks, the last
    one overlapping the one before it where the chunks do not divide the batch
    (:func:`chunk_split`), so that one chunk program is compiled and little is computed twice
    (1000 samples in chunks of 64: 16 chunks of 63, 8 samples twice). ``trace_once``: ``f``
    traced unbatched, then batched as a jaxpr (:func:`_vmap_of_trace`: jaxdyn's own
    functions, in the batching rule)."""
    axes = [0 if b else None for b in in_batched]
    if trace_once:
        vf = _vmap_of_trace(f, in_batched, args)
    else:
        vf = jax.vmap(f, in_axes=axes)
    if chunk is None:  # chunk_size_for returns None when the batch fits in one chunk
        return vf(*args)
    n, size, _ = chunk_split(axis_size, chunk)
    xs = [a for a, b in zip(args, in_batched) if b]

    def body(batched):
        it = iter(batched)
        return vf(*[next(it) if b else a for a, b in zip(args, in_batched)])

    return _map_chunks(body, xs, n, size, axis_size)


def _map_chunks(body, xs, n, size, axis_size):
    """``body`` (a ``vmap``) over the ``n`` chunks of ``size`` samples of the batched ``xs``,
    chunk ``i`` at ``min(i * size, axis_size - size)``, its outputs stacked along the batch.

    A ``fori_loop`` carries one buffer per output and updates one chunk in place; every entry
    is overwritten, so the buffers start uninitialized on the CPU (:mod:`jaxdyn.backend.ffi`:
    the fill costs time on ``crba``, ``minv`` and the derivatives), else each filled with a
    different constant. ``body`` is traced once, as ``lax.map`` does: a ``jax.jit`` of it,
    whose trace for the output shapes the loop's step reuses (JAX's trace cache; XLA inlines
    the call), where the step re-evaluated a traced jaxpr equation by equation before (about
    a tenth of the time to trace ``jax.jit(jax.vmap(jaxdyn.rnea))`` on talos_full). Against
    ``lax.map`` over the batch reshaped into chunks: ``lax.map`` fills its stacked outputs
    with zeros, and XLA merges the fills of outputs of one shape into one broadcast and
    copies it per output (slower here); and a batch that the chunks do not divide was padded
    with copies of its last sample, then the stacked outputs sliced back, which made the
    chunk loop up to twice as slow. The last chunk now overlaps the one before it instead
    (``dynamic_slice`` and ``dynamic_update_slice`` clamp its start). Results
    bitwise equal (``docs/design-measurements.md``).
    """
    run = jax.jit(body)
    shapes = jax.eval_shape(run, jax.tree_util.tree_map(lambda x: x[:size], xs))
    outs, tree = jax.tree_util.tree_flatten(shapes)
    init = [uninitialized((axis_size,) + o.shape[1:], o.dtype, k + 1) for k, o in enumerate(outs)]

    def step(i, bufs):
        start = jnp.minimum(i * size, axis_size - size)
        chunk = jax.tree_util.tree_map(lambda x: jax.lax.dynamic_slice_in_dim(x, start, size), xs)
        ys = jax.tree_util.tree_leaves(run(chunk))
        return [jax.lax.dynamic_update_slice_in_dim(b, y, start, 0) for b, y in zip(bufs, ys)]

    return jax.tree_util.tree_unflatten(tree, jax.lax.fori_loop(0, n, step, init))


def _explicit_batch_split(xs, in_batched):
    """``(mesh, axes, n)`` where explicit sharding splits the batch (leading axis) of the
    batched operands over the mesh axes ``axes`` (``n`` shards), else ``None``
    (:func:`jaxdyn.backend.ffi.explicit_split`)."""
    return explicit_split(xs, [0 if b else None for b in in_batched])


def _off_explicit_mesh(x):
    """A concrete array (not traced: a model closed over) that lives on a mesh with
    ``Explicit`` axes, as a numpy array; anything else as it is. Arrays created under
    ``jax.set_mesh`` (a model loaded there) are replicated on that mesh, and ``jax.shard_map``
    refuses to close over them (:func:`_per_shard`, :func:`jaxdyn.sim.sharded_vmap`: "Closing
    over inputs to shard_map where the input is sharded on `Explicit` axes is not
    implemented"); as numpy they are constants like any other."""
    if isinstance(x, jax.core.Tracer) or not isinstance(x, jax.Array):
        return x
    mesh = getattr(x.sharding, "mesh", None)
    if EXPLICIT in getattr(mesh, "axis_types", ()) and x.is_fully_addressable:
        return np.asarray(x)
    return x


def _per_shard(run, xs, in_batched, split):
    """``run`` (the batch's evaluation) on each device's shard of an explicitly sharded batch,
    by ``jax.shard_map`` over the batch's mesh axes: every device runs the chunk loop on its
    own samples and writes its own shard of the outputs, as one device would. Without it
    ``jax.vmap`` broadcasts the algorithms' unbatched constants (zeros, unit vectors) unsharded
    beside sharded operands, which explicit sharding refuses (``ShardingTypeError: All
    operands should have the same sharding``); and value checks run on each shard alone, with
    no reduction across devices."""
    mesh, axes, _ = split
    spec = jax.sharding.PartitionSpec(axes)
    in_specs = tuple(spec if b else jax.sharding.PartitionSpec() for b in in_batched)
    return shard_map(run, mesh, in_specs, spec, axis_names=set(axes))(*xs)


def batched(fn: Callable[P, R], words: Callable[[Any, int], int]) -> Callable[P, R]:
    """Give ``fn(model, ...)`` a batching rule that evaluates ``jax.vmap(fn)`` in cache-sized
    chunks on the CPU (see the module docstring); ``words(model, itemsize)`` estimates the
    numbers one sample keeps live (e.g. ``4 nv^2`` for the derivative algorithms; 0: no
    automatic chunks), from which :func:`chunk_size_for` picks the chunk.

    Traced leaves of the arguments are the rule's operands; every other leaf (names, indices,
    flags, Python numbers, numpy constants, and arrays whose values are known at trace time,
    such as the parameters of a model closed over by ``jax.jit``) stays static, so that the
    algorithms can compute the model's constant products in numpy
    (:func:`jaxdyn.algorithms.kinematics.take_rows`). Called outside any trace, ``fn`` runs as
    is. Derivatives are ``fn``'s own (a ``custom_jvp`` whose rule is ``jax.jvp`` of ``fn`` in
    the tangents that are not symbolically zero). Traced unbatched (no rule, no derivative)
    on the CPU, ``fn`` is one XLA:CPU kernel where it can be
    (:func:`jaxdyn.backend.small_calls.small_call`; its value checks applied after the call).
    """
    sig = inspect.signature(fn)
    plain: Callable[..., Any] = fn  # called with the arguments rebuilt from leaves

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        dyn = [i for i, x in enumerate(leaves) if isinstance(x, jax.core.Tracer)]
        if _INSIDE.active or not dyn:
            return fn(*args, **kwargs)
        leaves = [_off_explicit_mesh(x) for x in leaves]
        model = sig.bind(*args, **kwargs).arguments.get(next(iter(sig.parameters)))
        # the rule may trace fn later (vmap of a loop batches the loop's body after tracing
        # it), so the caller's choices of value checks and chunks travel with the call
        unchecked, unchunked, eqx_checks = _INSIDE.unchecked, _INSIDE.unchunked, _INSIDE.eqx_checks

        def on(xs):
            """``plain`` on the arguments with the traced leaves ``xs`` put back."""
            full = list(leaves)
            for i, x in zip(dyn, xs):
                full[i] = x
            a, k = jax.tree_util.tree_unflatten(treedef, full)
            return plain(*a, **k)

        def call(*xs):
            # public functions called by fn run as plain code
            with _inside(active=True, unchecked=unchecked, eqx_checks=eqx_checks):
                if _INSIDE.batch == 0 and config.get("fused_unbatched") and small_calls.usable():
                    try:  # one XLA:CPU kernel, value checks after it
                        return small_calls.small_call(lambda *ys: on(ys), *xs)
                    except small_calls.Unsupported:  # the body cannot be one kernel
                        pass
                return on(xs)

        def rule(axis_size, in_batched, *xs):
            _progress.note(fn.__name__, axis_size)
            itemsize = max(
                (
                    jnp.result_type(x).itemsize
                    for x, b in zip(xs, in_batched)
                    if b and _float_like(x)
                ),
                default=8,
            )
            split = _explicit_batch_split(xs, in_batched)
            local = axis_size if split is None else axis_size // split[2]
            with _inside(unchunked=unchunked):
                cap = None
                if getattr(words, "threaded_cap", False):
                    cap = threaded_chunk_cap(model, itemsize)
                chunk = chunk_size_for(words(model, itemsize), local, itemsize, cap)

            def run(*ys):
                with _inside(batch=local):
                    return _chunked_vmap(call, local, list(in_batched), ys, chunk, True)

            with _gc_paused():
                out = run(*xs) if split is None else _per_shard(run, xs, in_batched, split)
            return out, jax.tree_util.tree_map(lambda _: True, out)

        call.__name__ = call.__qualname__ = f"{fn.__name__}_batched"
        staged = staged_vmap_operands([leaves[i] for i in dyn])
        if staged is not None:
            # jax.jit(jax.vmap(f)): the rule at once. Through custom_vmap, JAX would first
            # trace fn unbatched (for the output types), a third of the trace time, unused
            # under vmap; derivatives of the staged program are those of the chunk loop
            trace, xs, axes = staged
            size = next(x.shape[d] for x, d in zip(xs, axes) if d is not None)
            in_batched = [d is not None for d in axes]
            out_tree = []

            def run_rule(*ys):
                ys = [y if d in (None, 0) else jnp.moveaxis(y, d, 0) for y, d in zip(ys, axes)]
                out, _ = rule(size, in_batched, *ys)
                flat, tree = jax.tree_util.tree_flatten(out)
                out_tree.append(tree)
                return flat

            outs = staged_vmap_results(trace, run_rule, *xs)
            return jax.tree_util.tree_unflatten(out_tree[0], outs)
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


# ----------------------------------------------------------------------------- chunk policies
# Shared by several public functions (``words=`` of ``jaxdyn.shell.public``; each function
# declares its own, these or a formula of its own): the numbers one sample keeps live, from
# which :func:`auto_chunk` sizes the chunks. In float32 too (chunks were as fast or faster:
# :data:`CHUNK_BYTES`).
def nv2_words(model: Any, itemsize: int) -> int:
    """An ``nv x nv`` matrix per sample: the passes that carry one (CRBA, ``M^-1``, the
    Coriolis matrix, the Delassus matrix, constrained dynamics, the input matrix)."""
    return model.nv * model.nv


def kinematics_words(model: Any, itemsize: int) -> int:
    """About five numbers per body and frame: chunks of 64 samples on talos_full (45 bodies,
    119 frames), 128 (:data:`CHUNK_MAX`) on solo12 (13, 33); none (one ``vmap``) below 40
    bodies and frames. The kinematics, energy, centroidal and constraint-kinematics
    functions: chunks made them faster on talos_full and solo12 and slower on arm7 (7 bodies,
    19 frames; ``docs/design-measurements.md``)."""
    n = model.nb + len(model.frame_names)
    return 5 * n if n >= 40 else 0

"""Cache-friendly batching: ``jax.vmap`` evaluated in chunks.

Under a plain ``jax.vmap`` every intermediate of a dynamics algorithm holds the whole batch:
at batch 1024 one ``nv x nv`` float64 array of talos_full is 20 MB, far beyond the caches, and
the run becomes bound by memory traffic between XLA kernels (see ``benchmarks/RESULTS.md``).
:func:`vmap` runs the same vectorised code on chunks of ``chunk_size`` samples in a
``lax.map`` loop, so intermediates stay in cache, which makes ABA, CRBA and Minv on large
trees faster per sample on the CPU (``benchmarks/RESULTS.md``). On GPU prefer ``jax.vmap``.
"""

from __future__ import annotations

import functools

import jax

DEFAULT_CHUNK = 32


def vmap(fun, in_axes=0, chunk_size: int | None = DEFAULT_CHUNK):
    """Like ``jax.vmap(fun, in_axes)`` with ``out_axes=0``, evaluated ``chunk_size`` samples at a
    time (``jax.lax.map(..., batch_size=chunk_size)``). ``chunk_size=None`` is plain ``jax.vmap``.

    ``in_axes`` is ``0``, ``None`` or a tuple of those, one per positional argument (pytrees
    are batched or broadcast whole).
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

        return jax.lax.map(one, batched, batch_size=chunk_size)

    return wrapped

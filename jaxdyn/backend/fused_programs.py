"""Fused CPU loops for one program: :func:`fused_jit` compiles a function into a single XLA:CPU
kernel without the process-wide ``XLA_FLAGS`` of :mod:`.xla_flags`.

XLA:CPU runs an HLO ``call`` whose frontend attribute ``xla_cpu_small_call`` is ``"true"`` as one
kernel (its thunk emitter hands the callee to the legacy IR emitter, which emits loops and
branches natively); that is what its ``SmallWhileLoopHoistingPass`` does to a while loop
accessing fewer bytes than ``xla_cpu_small_while_loop_byte_threshold``. That threshold is an
entry of the map ``DebugOptions.xla_backend_extra_options``, which JAX's per-program
``compiler_options`` cannot set (jaxlib 0.10.2: "While setting option
xla_backend_extra_options, '...' is not a valid message value": only scalar, string and enum
options are taken), and ``XLA_FLAGS`` is read once per process. So :func:`fused_jit`

* traces the function as an inner ``jax.jit`` inside
  ``jax.experimental.xla_metadata.set_xla_metadata(xla_cpu_small_call="true",
  inlineable="false")``: the call and every operation and nested call in it carry the
  attributes (``inlineable="false"`` keeps XLA's call inliner off them). Tagging the outer call
  alone (``set_xla_metadata`` on its results) compiled a small loop but aborted the process on
  FDDP's program (jaxlib 0.10.2, XLA's IR emitter: "Check failed: ... All or none of the slices
  should have an explicit index");
* compiles the program with the other two flags of :data:`.xla_flags.FUSED_LOOP_FLAGS` as
  per-program ``compiler_options`` (:data:`COMPILER_OPTIONS`; both are taken per program): no
  YNNPACK fusions (one inside the call does not compile: "Fusion kind not implemented on
  CPU"), AVX2 code (bounded compile memory);
* traces the function with :func:`~.xla_flags.fused_cpu_loops_enabled` answering ``True``
  (the callers then keep LAPACK and FFI custom calls out of it).

Only where that program is the one compiled: a call with concrete arrays on the CPU backend
(inside the caller's own ``jit``, ``vmap`` or ``shard_map`` the arrays are tracers, and the
caller's compile options rule), the switch named by the caller on, and ``XLA_FLAGS`` not fusing
loops already (then the plain program is fused by XLA). Everywhere else, and if XLA refuses the
fused program (``UNIMPLEMENTED``; a warning then), the plain function runs: the same values to
rounding, the same derivatives.
"""

from __future__ import annotations

import functools
import warnings
from typing import TYPE_CHECKING, Any

from . import xla_flags

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import jax.stages

#: the per-program XLA options of fused loops (the process-wide flags of
#: :data:`.xla_flags.FUSED_LOOP_FLAGS` as ``jax.jit(..., compiler_options=...)``)
COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "", "xla_cpu_max_isa": "AVX2"}
#: frontend attributes of the call compiled into one kernel
SMALL_CALL = {"xla_cpu_small_call": "true", "inlineable": "false"}


def concrete_on_cpu(leaves: Any) -> bool:
    """Whether the arrays ``leaves`` (a pytree) are concrete and on the CPU, in a process whose
    default backend is the CPU (numpy arrays included; a tracer of the caller's ``jit``,
    ``vmap`` or ``shard_map`` is not)."""
    import jax
    import jax.core

    if jax.default_backend() != "cpu":
        return False
    for x in jax.tree.leaves(leaves):
        if isinstance(x, jax.core.Tracer):
            return False
        devices = getattr(x, "devices", None)
        if devices is not None and any(d.platform != "cpu" for d in devices()):
            return False
    return True


@functools.cache
def supported() -> bool:
    """Whether this jaxlib compiles the fused program: written for and tested on jaxlib 0.10
    (older XLA:CPU has no ``xla_cpu_experimental_ynn_fusion_type`` option: "No such compile
    option"), with ``jax.experimental.xla_metadata``."""
    import jaxlib.version

    try:
        from jax.experimental import xla_metadata  # noqa: F401
    except ImportError:
        return False
    from .._versions import release

    return release(jaxlib.version.__version__)[:2] >= (0, 10)


def _split(args):
    import equinox as eqx
    import jax

    leaves, treedef = jax.tree.flatten(args)
    mask = tuple(eqx.is_array(x) for x in leaves)
    dyn = [x for x, m in zip(leaves, mask) if m]
    static = tuple(x for x, m in zip(leaves, mask) if not m)
    return dyn, (treedef, mask, static)


def _merge(dyn, static):
    treedef, mask, st = static
    dyn, st = iter(dyn), iter(st)
    return treedef.unflatten([next(dyn) if m else next(st) for m in mask])


class FusedJit:
    """``fn(*args)`` compiled as one XLA:CPU kernel where that is possible (see the module),
    else ``fallback(*args)`` (``fn`` under ``equinox.filter_jit``, as a rule). Arguments as
    ``equinox.filter_jit``'s: array leaves are traced, the other leaves static (hashable).
    ``switch``: the :mod:`jaxdyn.config` switch that turns the fused program on."""

    def __init__(self, fn: Callable[..., Any], fallback: Callable[..., Any], switch: str) -> None:
        import jax

        self.fn, self.fallback, self.switch = fn, fallback, switch
        self.refused: set = set()  # static parts whose fused program XLA refused

        def program(static, dyn):
            from jax.experimental.xla_metadata import set_xla_metadata

            def body(d):
                a, k = _merge(d, static)
                return self.fn(*a, **k)

            with xla_flags.tracing_fused_program(), set_xla_metadata(**SMALL_CALL):
                return jax.jit(body)(dyn)

        self.program = jax.jit(program, static_argnums=0, compiler_options=COMPILER_OPTIONS)

    def usable(self, dyn: Sequence[Any], on: bool | None = None) -> bool:
        """Whether this call compiles the fused program (see the module); ``on``: the switch's
        value for this call (``None``: :mod:`jaxdyn.config`'s)."""

        from .. import config

        on = config.get(self.switch) if on is None else on
        if not on or xla_flags.loop_bytes_set() or not supported():
            return False
        return concrete_on_cpu(dyn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(None, *args, **kwargs)

    def call(self, on: bool | None, *args: Any, **kwargs: Any) -> Any:
        """``self(*args, **kwargs)`` with the switch ``on`` for this call (``None``: as
        :mod:`jaxdyn.config` has it): callers that know the fused program pays for itself
        (many solves of one structure) ask for it whatever the switch's default."""
        import jax

        dyn, static = _split((args, kwargs))
        if static in self.refused or not self.usable(dyn, on):
            return self.fallback(*args, **kwargs)
        try:
            return self.program(static, dyn)
        except jax.errors.JaxRuntimeError as e:
            msg = str(e)
            if not (
                msg.startswith("UNIMPLEMENTED")
                or msg.startswith("INVALID_ARGUMENT: No such compile option")
            ):
                raise
            self.refused.add(static)
            warnings.warn(
                f"jaxdyn: XLA:CPU did not compile {getattr(self.fn, '__name__', 'a program')} "
                f"as one kernel ({str(e).splitlines()[0]}); running it unfused (switch: "
                f"jaxdyn.config {self.switch!r})",
                RuntimeWarning,
                stacklevel=2,
            )
            return self.fallback(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> jax.stages.Lowered:
        """The fused program lowered for ``args`` (``jax.stages.Lowered``: its ``compile()``
        and ``as_text()`` show the tagged call), whether or not a call would use it."""
        dyn, static = _split((args, kwargs))
        return self.program.lower(static, dyn)


def fused_jit(fn: Callable[..., Any], fallback: Callable[..., Any], switch: str) -> FusedJit:
    """:class:`FusedJit` of ``fn`` with ``fallback`` (see the module)."""
    return FusedJit(fn, fallback, switch)

"""jaxdyn's backend: everything specific to XLA on the CPU, and JAX's internals, in one place.

The algorithms are written as the papers write them; where the backend matters they say so in
one word (``fusion.store(...)``, ``crba_kernel(...)``, ``spatial.sincos``), and this package
does the rest. Its contract with the layers above:

* **Same values, same derivatives.** Every function here returns what the plain JAX expression
  it stands for returns (to rounding), and its derivatives are that expression's; only how
  XLA:CPU computes it changes. Off the CPU, under ``jax.export``, in programs XLA partitions
  over devices, or with a switch of :mod:`jaxdyn.config` off (``ffi_stores``,
  ``uninitialized_outputs``, ``cpu_kernels``), each one falls back to the plain expression.
* **Nothing above is imported here** (``tests/test_architecture.py``): the backend takes what
  it needs as arguments (the CRBA kernel takes the caller's XLA form of the algorithm as its
  fallback).
* **It may fail to build, never to import.** The C handlers and kernels are compiled at first
  use by the system's C compiler; without one, :func:`jaxdyn.backend.ffi.status` says why and
  everything runs on the fallbacks.

Modules:

* :mod:`.ffi`: jaxdyn's XLA FFI libraries (the handlers, ``_uninitialized.c``; the kernels,
  ``_kernels.c``, ``_crba_kernel.h``, ``_minv_kernel.h``, ``_rnea_kernel.h``,
  ``_rnea_derivatives_kernel.h`` and ``_aba_kernel.h``; built and loaded at first use):
  uninitialized output buffers for the chunk loop, stores, the value check's handler, the CRBA,
  Minv, RNEA, RNEA derivatives and ABA kernels' targets, ``shard_map`` / ``Explicit`` mesh
  helpers.
* :mod:`.fusion`: what steers XLA:CPU's fusion and vectorisation: :func:`~.fusion.store`,
  :func:`~.fusion.materialize`, :func:`~.fusion.sincos` (re-exported by :mod:`jaxdyn.spatial`).
* :mod:`.sharding`: array joins that keep a batch's ``Explicit`` sharding (``stack``,
  ``concatenate``, ``on_mesh``; re-exported by :mod:`jaxdyn.spatial`).
* :mod:`.crba_kernel`: the JAX primitives over the C CRBA and Minv kernels.
* :mod:`.rnea_kernel`, :mod:`.aba_kernel`, :mod:`.rnea_derivatives_kernel`: the JAX
  primitives over the C RNEA, ABA and RNEA derivatives (IDSVA) kernels
  (:mod:`.dynamics_kernel`, their one primitive class).
* :mod:`.xla_flags`: XLA:CPU's process-wide flags: fused loops
  (:func:`jaxdyn.config.fused_cpu_loops`) and fast compiles
  (:func:`jaxdyn.config.fast_cpu_compile`).
* :mod:`.fused_programs`: fused loops for one program (:func:`~.fused_programs.fused_jit`: a
  call XLA:CPU compiles into one kernel, per-program compiler options; the trajectory
  optimisation solvers' default on the CPU, compiled in a child process,
  :mod:`._fused_compile`, while the first solves run unfused; :func:`~.fused_programs.wait`).
* :mod:`.small_calls`: an algorithm evaluated alone inside the caller's ``jit`` as one such
  call under XLA's default options (:func:`~.small_calls.small_call`; switch
  ``fused_unbatched``, used by :mod:`jaxdyn.batching`'s rule).
* :mod:`.host_batches`: a batch solved by the host's threads from inside the caller's
  ``jit`` (:func:`~.host_batches.host_map`: one ``jax.pure_callback``, derivatives those of
  the caller's in-program form; ``jax.jit(jax.vmap(fddp))`` on the CPU).
* :mod:`.sync_client`: a synchronous XLA:CPU client of jaxdyn's own, whose device
  :func:`jaxdyn.compile_for_latency` compiles for (programs run on the calling thread whatever
  JAX's process-wide ``jax_cpu_enable_async_dispatch`` says).
* :mod:`.internals`: the only uses of ``jax._src`` and ``equinox._jit``, each guarded.
* :mod:`.allocator`: glibc's allocator keeps a batch's large freed buffers for reuse
  (:func:`jaxdyn.config.keep_freed_buffers`, on when jaxdyn is imported).

Also XLA:CPU-minded, outside this package: :mod:`jaxdyn.batching` (cache-sized chunks of a
batch, a user-facing policy) and the switches of :mod:`jaxdyn.config`.
"""

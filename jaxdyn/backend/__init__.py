"""jaxdyn's backend: what is specific to XLA on the CPU, and JAX's internals, in one place.

(The contract is written out as the package fills; see the modules.)
"""

"""jaxdyn's C kernels called from Python without XLA: one sample, numpy in and out
(``jaxdyn.compile_for_latency(..., dispatch="native")``, :mod:`jaxdyn.latency`).

The kernels' library (``_kernels.c``, built by :mod:`jaxdyn.backend.ffi`) holds, beside the
XLA FFI handlers, two plain C entry points over the same kernels: ``jaxdyn_host_init`` fills a
``host_call`` once (the model's arrays and topology, the buffers of one sample's inputs and
of its result), and ``jaxdyn_host_run(call)`` computes the sample in its buffers: it checks
(where asked) and normalises the quaternions of ``q`` in place as
:func:`jaxdyn.shell.check_quaternions` does, then runs the kernel's narrow block (the one the
handlers run for a batch of one), with a workspace, the model's constants (and Minv's tables)
prepared once by ``jaxdyn_host_prepare``, where the kernel's run allocates and computes them
per call. Two algorithms compose blocks in C as jaxdyn's functions compose the kernels in XLA:
``"rnea_derivatives"`` (the IDSVA block: Singh, Russell & Wensing 2022, Algorithm 1) and
``"aba_derivatives"`` (ABA's block for ``qdd``, the IDSVA block at ``qdd`` without ``M``,
Minv's block, then ``-Minv`` times the two partials in plain C loops: the DMM of Eq. 5, the
partials of Carpentier & Mansard 2018). :class:`HostCall` holds one such call and its buffers (the
arrays the C side points to live as long as it does); the caller writes each sample's inputs
into :attr:`HostCall.inputs` (``buf[...] = x``) and calls :attr:`HostCall.run` with
:attr:`HostCall.address`, one pointer through ``ctypes``: reading an array's address per call
(``__array_interface__``, ``.ctypes.data``) cost more than 1 us each, the copy into a buffer
a fraction of that. Faster still, where the running Python's headers are installed, the
extension module of :func:`host_module` (``_host_module.c``) defines the type of the call
objects themselves: calling one (:meth:`HostCall.bind`) checks numpy arguments, copies them
into the buffers, runs the kernel and returns a new array of its result without a Python
frame: the Python-side checks, copies and the ``ctypes`` call cost about as much as the
smaller kernels.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np

from . import crba_kernel, ffi

if TYPE_CHECKING:
    from collections.abc import Sequence

#: ``alg`` codes of ``jaxdyn_host_init`` (``_kernels.c``)
ALGS = {"rnea": 0, "aba": 1, "crba": 2, "minv": 3, "rnea_derivatives": 4, "aba_derivatives": 5}
#: the algorithms whose result is three ``(nv, nv)`` matrices (``out`` of shape ``(3, nv, nv)``)
DERIVATIVES = ("rnea_derivatives", "aba_derivatives")
#: return codes of ``jaxdyn_host_run``
OK, BAD_QUATERNION, NO_MEMORY = 0, 1, 2

_P = ctypes.c_void_p


def library() -> ctypes.CDLL | None:
    """The kernels' library with its host entry points' argument types set, or ``None``
    where the kernels are not built (:func:`jaxdyn.backend.ffi.kernel_status` says why)."""
    if not ffi.kernels_available():
        return None
    lib = ffi.KERNELS.state["lib"]
    if not getattr(lib, "_jaxdyn_host_typed", False):
        lib.jaxdyn_host_size.argtypes = []
        lib.jaxdyn_host_size.restype = ctypes.c_int64
        i32, f64 = ctypes.c_int, ctypes.c_double
        lib.jaxdyn_host_init.argtypes = [_P, _P, i32, i32, i32, f64, i32, _P] + [_P] * 13
        lib.jaxdyn_host_init.restype = None
        lib.jaxdyn_host_workspace.argtypes = [_P]
        lib.jaxdyn_host_workspace.restype = ctypes.c_int64
        lib.jaxdyn_host_prepare.argtypes = [_P, _P]
        lib.jaxdyn_host_prepare.restype = None
        lib.jaxdyn_host_run.argtypes = [_P]
        lib.jaxdyn_host_run.restype = ctypes.c_int
        lib._jaxdyn_host_typed = True
    return lib


def host_module() -> Any:
    """The extension module ``_jaxdyn_host`` (``_host_module.c``; built at the first call by
    :func:`jaxdyn.backend.ffi.build_host_module` and cached as the kernels are, its state kept
    as the other libraries' are: :data:`jaxdyn.backend.ffi.HOST_MODULE`): its type ``Call`` is
    the base of :class:`jaxdyn.latency.NativeCall`'s objects, whose call, once bound
    (:meth:`HostCall.bind`), copies numpy arguments of the compiled shapes and dtype into a
    call's buffers, runs the kernel and returns a new array of its result, in C; ``None``
    where it cannot be built or loaded (no ``Python.h``, no compiler: :func:`host_module_status`
    says why), and the calls take the ``ctypes`` path of :attr:`HostCall.run`.
    ``JAXDYN_HOST_MODULE=0`` turns it off."""
    return ffi.HOST_MODULE.state["lib"] if ffi.host_module_available() else None


def host_module_status() -> str:
    """``"loaded"``, or why the one-sample calls take the ``ctypes`` path."""
    ffi.host_module_available()
    return ffi.HOST_MODULE.state["why"]


def topology(topo: Any, alg: str) -> np.ndarray:
    """The int32 topology of ``alg``'s kernel for the model topology ``topo``
    (``jaxdyn_crba``'s; ``jaxdyn_minv``'s, with the depth-first order, for ``"minv"`` and
    ``"aba_derivatives"``)."""
    if alg in ("minv", "aba_derivatives"):
        return crba_kernel._minv_topology(topo)
    return crba_kernel._kernel_topology(topo)


def _address(a: np.ndarray | None) -> int | None:
    return None if a is None else a.__array_interface__["data"][0]


class HostCall:
    """One kernel (``alg`` of :data:`ALGS`) of one model, for one sample at a time.

    ``topology``: the kernel's int32 topology (:func:`topology`); ``constants``: ``Xtree_R (nb,
    9)``, ``Xtree_p (nb, 3)``, the motion axes ``(nv, 6)``, mass ``(nb)``, com ``(nb, 3)``, inertia
    ``(nb, 9)``, armature ``(nv)`` or ``None``, gravity ``(3)``, all cast to ``dtype`` (float32 or
    float64; copied here, C-contiguous); ``quaternions``: the index in ``q`` of each quaternion's
    first entry; ``check``: fail a sample whose quaternion's squared norm is off 1 by more than
    ``tol`` or not finite; ``f_ext``: RNEA / ABA with external forces.

    :attr:`inputs`: the buffers of ``q (nq)`` and, for RNEA / ABA and their derivatives,
    ``qd (nv)``, ``x (nv)`` (``qdd`` / ``tau``) and ``f_ext (nb, 6)`` where asked;
    ``run(address)`` computes the sample into :attr:`out` (``(nv,)``, ``(nv, nv)`` or, for
    :data:`DERIVATIVES`, ``(3, nv, nv)``: ``dtau_dq, dtau_dv, M`` / ``dqdd_dq, dqdd_dv,
    Minv``), overwritten by the next run; ``q``'s
    buffer is left normalised) and returns :data:`OK`, :data:`BAD_QUATERNION` or
    :data:`NO_MEMORY`."""

    def __init__(
        self,
        lib: ctypes.CDLL,
        alg: str,
        nb: int,
        nq: int,
        nv: int,
        topology: np.ndarray,
        constants: Sequence[np.ndarray | None],
        quaternions: np.ndarray,
        dtype: np.dtype,
        check: bool,
        tol: float,
        f_ext: bool = False,
    ) -> None:
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError(f"host kernels compute in float32 or float64, not {self.dtype}")
        # every array the C side points to lives on this object
        self._topology = np.ascontiguousarray(topology, np.int32)
        self._quaternions = np.ascontiguousarray(quaternions, np.int32)
        consts = [None if c is None else np.ascontiguousarray(c, self.dtype) for c in constants]
        self._constants = consts
        dynamics = alg in ("rnea", "aba", *DERIVATIVES)
        self.inputs: list[np.ndarray] = [np.zeros(nq, self.dtype)]
        if dynamics:
            self.inputs += [np.zeros(nv, self.dtype), np.zeros(nv, self.dtype)]
            if f_ext:
                self.inputs.append(np.zeros((nb, 6), self.dtype))
        bufs = self.inputs + [None] * (4 - len(self.inputs))
        shape = (3, nv, nv) if alg in DERIVATIVES else (nv,) if dynamics else (nv, nv)
        self.out = np.zeros(shape, self.dtype)
        self._call = ctypes.create_string_buffer(int(lib.jaxdyn_host_size()))
        lib.jaxdyn_host_init(
            self._call,
            _address(self._topology),
            ALGS[alg],
            int(self.dtype == np.float32),
            int(check),
            float(tol),
            len(self._quaternions),
            _address(self._quaternions),
            *[_address(c) for c in consts],
            *[_address(b) for b in bufs],
            _address(self.out),
        )
        # the kernel's workspace, the model's constants and Minv's tables, allocated and
        # computed once (64-byte aligned; 0 bytes: the run allocates its own per call, or, for
        # "aba_derivatives", fails with NO_MEMORY)
        nbytes = int(lib.jaxdyn_host_workspace(self._call))
        if nbytes:
            raw = np.empty(nbytes + 64, np.uint8)
            skip = -raw.__array_interface__["data"][0] % 64
            self._workspace = raw[skip : skip + nbytes]
            lib.jaxdyn_host_prepare(self._call, _address(self._workspace))
        #: the ``host_call``'s address, :attr:`run`'s argument
        self.address = ctypes.addressof(self._call)
        #: ``run(address)``: the sample in the buffers into :attr:`out`; the return code
        self.run = lib.jaxdyn_host_run
        self._lib = lib

    def bind(self, obj: Any, release: bool) -> None:
        """Binds ``obj``, an instance of :func:`host_module`'s ``Call`` type, to this call:
        ``obj(*args)`` then copies numpy arrays of the inputs' shapes and dtype into
        :attr:`inputs`, runs the kernel and returns a new array of its result (for
        :data:`DERIVATIVES`, the tuple of the three matrices), all in C; ``release``: the
        kernel runs with the GIL released, under the object's own lock."""
        run = ctypes.cast(self._lib.jaxdyn_host_run, ctypes.c_void_p).value
        ins = tuple((_address(b), b.shape) for b in self.inputs)
        typenum = np.dtype(self.dtype).num
        split = self.out.ndim == 3
        out, shape = _address(self.out), self.out.shape
        obj._bind(run, self.address, ins, out, typenum, shape, split, release)

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

``dispatch="native"`` leaves XLA out altogether for the functions that jaxdyn computes by a C kernel
on the CPU (:data:`NATIVE_FUNCTIONS`: ``jaxdyn.rnea``, ``jaxdyn.aba``, ``jaxdyn.rnea_derivatives``
and ``jaxdyn.aba_derivatives``, with or without ``f_ext``, ``jaxdyn.crba``, ``jaxdyn.minv``; any
other function is refused with a ``ValueError`` naming these): it returns a :class:`NativeCall`,
which copies the arguments into buffers of its own and calls the same kernel that ``jax.jit(fn)``
calls through XLA (:mod:`jaxdyn.backend.host_calls`; the model's arrays and topology are packed
once, here): where jaxdyn's small CPython extension module is built (against the running Python's
and numpy's headers, at the first native compile, cached as the kernels are), the call object's
type is its C type, and a call with numpy arguments of the compiled kind checks and copies them,
runs the kernel and returns a new array in C; where it cannot be built (no ``Python.h``) or is
turned off (``JAXDYN_HOST_MODULE=0``), the call goes through ``ctypes`` with one pointer.
``rnea_derivatives`` is the IDSVA kernel (Singh, Russell & Wensing 2022, Algorithm 1);
``aba_derivatives`` composes in C what ``jax.jit`` composes from the kernels
(:func:`jaxdyn.derivatives.fd.aba_derivatives_world`): ``qdd`` by ABA's, IDSVA's partials at ``qdd``
without ``M``, ``Minv`` by Minv's, then ``-Minv`` times the partials (DMM, Eq. 5; the partials of
Carpentier & Mansard 2018), DMM whatever ``nv`` (``jax.jit`` takes AZA from
:data:`jaxdyn.derivatives.fd.AZA_MIN_NV` coordinates on: equal values to rounding). The quaternions
of ``q`` are checked (where the value checks are on when compiled) and normalised in C as the jitted
path's :func:`jaxdyn.shell.check_quaternions` does before the kernel, so the values equal
``jax.jit(fn)``'s to rounding (float64 and float32), and a failed check raises
:class:`jaxdyn.CheckError` with the same message. A call costs the kernel and a fraction of a
microsecond of Python and C around it through the extension module, 1.5-2 us through ``ctypes``
(the argument checks and copies, the ``ctypes`` call, the result's copy: a new array per call, or
``out=``; solo12, ``docs/performance.md``): what XLA's runtime and JAX's dispatch cost around a
program (some 10 us for an identity through the synchronous client) is gone. Where the kernels are
not built (no C compiler) or switched off (``cpu_kernels``), or the model has no bodies, the call is
``dispatch="sync"``'s (``.dispatch`` says which).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import value_checks
from .backend import host_calls, sync_client
from .errors import CheckError

__all__ = [
    "DISPATCH",
    "NATIVE_FUNCTIONS",
    "PACK_RESULTS",
    "LatencyCall",
    "NativeCall",
    "compile_for_latency",
]

#: ``dispatch`` values of :func:`compile_for_latency`
DISPATCH = ("sync", "jax", "native")
#: the functions that ``dispatch="native"`` computes (jaxdyn's C kernels), and the names of
#: their arguments after the model (``f_ext`` optional)
NATIVE_FUNCTIONS = {
    "rnea": ("q", "v", "a", "f_ext"),
    "aba": ("q", "v", "tau", "f_ext"),
    "crba": ("q",),
    "minv": ("q",),
    "rnea_derivatives": ("q", "v", "a", "f_ext"),
    "aba_derivatives": ("q", "v", "tau", "f_ext"),
}
#: ``dispatch="native"`` through the extension module: kernels of models with more than this
#: many coordinates (and the derivatives) run with the GIL released, under the call's own lock;
#: the smaller ones keep it (releasing and taking it back costs a tenth of their time)
RELEASE_NV = 24
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
) -> LatencyCall | NativeCall:
    """``fn(model, *args)`` compiled for the shapes of ``example`` (arrays, one per argument
    after the model: ``compile_for_latency(jaxdyn.aba, model, q, v, tau)``), for calls that
    evaluate one state at a time and wait for the result (see the module docstring).

    ``fn``: a function of the model and arrays returning an array or a pytree of floating
    arrays (jaxdyn's algorithms, or your own function of them). The model is closed over:
    its arrays are constants of the program (compile again after changing them).
    ``dispatch``: ``"native"`` computes ``jaxdyn.rnea``, ``aba``, ``crba``, ``minv``,
    ``rnea_derivatives`` and ``aba_derivatives`` by jaxdyn's C kernels without XLA
    (:class:`NativeCall`; see the module docstring; other functions are refused); ``"sync"``
    (default) runs the program on a synchronous XLA:CPU client of jaxdyn's own
    (:mod:`jaxdyn.backend.sync_client`), on the calling thread whatever
    ``jax_cpu_enable_async_dispatch`` says; ``"jax"`` runs it through ``jax.jit`` on JAX's default
    device (what a process that turned asynchronous dispatch off, or runs on a GPU, already has).
    ``"sync"`` falls back to ``"jax"`` where JAX's default backend is not the CPU or this JAX lacks
    the internals it uses (``LatencyCall.dispatch`` says which).

    Arguments are cast to one floating dtype (that of the examples, float64 under
    ``jax_enable_x64``) and packed into one vector; the results come back packed the same way
    up to :data:`PACK_RESULTS` numbers. Compiled here, once (calls never trace or compile)."""
    if dispatch not in DISPATCH:
        raise ValueError(f"dispatch must be one of {DISPATCH}, got {dispatch!r}")
    if not example:
        raise TypeError("compile_for_latency needs example arguments after the model")
    if dispatch == "native":
        call = _native(fn, model, example)
        if call is not None:
            return call
        dispatch = "sync"  # the kernels not built here, or switched off: XLA's program
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


def _native_function(fn: Callable[..., Any]) -> str:
    """The name in :data:`NATIVE_FUNCTIONS` of ``fn`` (jaxdyn's public function itself), else
    a ``ValueError`` naming the supported functions."""
    from . import derivatives
    from .algorithms.crba import crba
    from .algorithms.minv import minv

    known = {
        "rnea": derivatives.rnea,
        "aba": derivatives.aba,
        "crba": crba,
        "minv": minv,
        "rnea_derivatives": derivatives.rnea_derivatives,
        "aba_derivatives": derivatives.aba_derivatives,
    }
    for name, f in known.items():
        if fn is f:
            return name
    supported = ", ".join(f"jaxdyn.{n}" for n in NATIVE_FUNCTIONS)
    raise ValueError(
        f"compile_for_latency(dispatch='native') computes {supported} only (jaxdyn's C "
        f"kernels), got {getattr(fn, '__name__', fn)!r}; use dispatch='sync' for other "
        "functions"
    )


class NativeCall:
    """``fn(model, *args)`` for one of :data:`NATIVE_FUNCTIONS`, computed by jaxdyn's C kernel for
    one sample without XLA (``compile_for_latency(fn, model, *example, dispatch="native")``;
    :mod:`jaxdyn.backend.host_calls`). Call it with numpy arrays of the example's shapes (anything
    ``np.asarray`` takes: real numbers, cast to ``dtype``); each argument is copied into a buffer of
    the call's, so it may be any layout and is never written. Returns a **new** numpy array each
    call (``(nv,)`` or ``(nv, nv)``), or, given ``out=`` (a numpy array of that shape and
    ``dtype``), writes the result there and returns ``out``. ``rnea_derivatives`` and
    ``aba_derivatives`` return their tuple of three ``(nv, nv)`` arrays (new each call: views of one
    new ``(3, nv, nv)`` array), or, given ``out=`` (a tuple of three such arrays), fill those and
    return ``out``. Calls from several threads are taken one at a time (the object's buffers are
    shared: the GIL around the smaller kernels, a lock around those that run with the GIL
    released); a thread that wants its own calls to run beside another's compiles its own object.

    Where jaxdyn's extension module is built (the running Python's headers installed: see
    :func:`jaxdyn.backend.host_calls.host_module`), the object's type derives from its C type, and
    a call with numpy arrays of the compiled shapes and dtype (C-contiguous) runs in C alone;
    anything else takes the Python path, which converts and checks first.

    A failed quaternion check of ``q`` (squared norm off 1 by more than 1e-3, or not finite,
    as the jitted path's :func:`jaxdyn.shell.check_quaternions`; the quaternions are then
    normalised as there) raises :class:`jaxdyn.CheckError` with the jitted path's message;
    checked where the value checks (:mod:`jaxdyn.value_checks`) were on at compile time.

    Attributes: ``dispatch`` (``"native"``), ``shapes``, ``dtype``, ``checked``."""

    dispatch = "native"

    def __init__(
        self, name: str, model: Any, shapes: tuple[tuple[int, ...], ...], dtype: Any
    ) -> None:
        from . import shell

        t = model.topo
        self.__name__ = name
        self.shapes = shapes
        self.dtype = np.dtype(dtype)
        self._names = NATIVE_FUNCTIONS[name][: len(shapes)]
        self.checked = bool(value_checks.enabled())
        self._tol = 1e-3  # jaxdyn.shell.check_quaternions' default
        self._message = (
            f"{name}: a quaternion in q is not of unit norm (tolerance {self._tol}) or not finite"
        )
        lib = host_calls.library()
        assert lib is not None  # compile_for_latency checked
        found = shell.quaternion_indices(t)
        quats = np.zeros(0, np.int32) if found is None else found[0][:, 0]
        topology = host_calls.topology(t, name)
        arm = model.armature
        consts = [
            np.reshape(model.Xtree_R, (t.nb, 9)),
            model.Xtree_p,
            model.dof_axis,
            model.mass,
            model.com,
            np.reshape(model.inertia, (t.nb, 9)),
            None if arm is None else np.asarray(arm),
            model.gravity,
        ]
        self._host = host_calls.HostCall(
            lib,
            name,
            t.nb,
            t.nq,
            t.nv,
            topology,
            [None if c is None else np.asarray(c) for c in consts],
            quats,
            self.dtype,
            self.checked,
            self._tol,
            f_ext=len(shapes) == 4,
        )
        self._inputs = self._host.inputs
        self._n = len(shapes)
        self._out = self._host.out
        self._run = self._host.run
        self._address = self._host.address
        self._derivatives = name in host_calls.DERIVATIVES
        self._lock = threading.Lock()
        # the extension module's path (host_calls.host_module): this object's type derives
        # from its Call, whose call takes numpy arguments to the kernel and returns the result
        # in C, without this object's lock (under the GIL, or its own lock around a kernel
        # long enough to run with the GIL released)
        self._fast = hasattr(self, "_into")
        if self._fast:
            self._host.bind(self, release=self._derivatives or t.nv > RELEASE_NV)

    def _slow(self, i: int, x: Any) -> None:
        """Argument ``i`` into its buffer, its shape and dtype checked (the general path)."""
        self._inputs[i][...] = self._checked(i, x)

    def _checked(self, i: int, x: Any) -> np.ndarray:
        """Argument ``i`` as an array, its shape and dtype checked."""
        name = self._names[i]
        try:
            a = np.asarray(x)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{self.__name__}: {name} must be an array of numbers ({e})") from None
        if a.shape != self.shapes[i]:
            raise ValueError(
                f"{self.__name__}: {name} has shape {a.shape}, expected {self.shapes[i]}"
            )
        if a.dtype.kind not in "fiub":
            raise TypeError(f"{self.__name__}: {name} has dtype {a.dtype}, expected real numbers")
        return a

    def _check_count(self, args: Sequence[Any]) -> None:
        """A ``TypeError`` where ``args`` is not as many arguments as compiled."""
        if len(args) != self._n:
            raise TypeError(
                f"{self.__name__}: {len(args)} arguments given, compiled for {self._n} "
                f"({', '.join(self._names)})"
            )

    def _copy_in(self, args: Sequence[Any]) -> None:
        """The arguments into their buffers, each converted and checked (the general path)."""
        self._check_count(args)
        for i, x in enumerate(args):
            self._slow(i, x)

    def _fill(self, out: Any) -> tuple[np.ndarray, ...]:
        """The three results of the derivatives into ``out`` (checked: three arrays)."""
        return self._fill_from(out, self._out)

    def _fill_from(self, out: Any, result: np.ndarray) -> tuple[np.ndarray, ...]:
        """The three results of the derivatives ``result`` into ``out`` (checked)."""
        shape = self._out.shape[1:]
        if not (
            isinstance(out, tuple)
            and len(out) == 3
            and all(
                type(o) is np.ndarray and o.shape == shape and o.dtype == self.dtype for o in out
            )
        ):
            raise ValueError(
                f"{self.__name__}: out must be a tuple of three numpy arrays of shape {shape} "
                f"and dtype {self.dtype}"
            )
        for o, r in zip(out, result):
            o[...] = r
        return out

    def _converted(self, args: Sequence[Any]) -> list[np.ndarray]:
        """The arguments as C-contiguous arrays of the compiled shapes and dtype (checked)."""
        self._check_count(args)
        return [np.ascontiguousarray(self._checked(i, x), self.dtype) for i, x in enumerate(args)]

    def _failed(self, rc: int) -> None:
        """Raise the error of the kernel's return code ``rc`` (not :data:`host_calls.OK`)."""
        if rc == host_calls.BAD_QUATERNION:
            raise CheckError(self._message)
        raise MemoryError(f"{self.__name__}: the kernel's workspace: out of memory")

    def _call_fast(self, args: tuple[Any, ...], out: Any) -> Any:
        """:meth:`__call__` through the extension module's ``_into`` (what its call leaves to
        Python: ``out=``, arguments to convert, a kernel's error)."""
        shape = self._out.shape
        if out is None or self._derivatives:
            r = np.empty(shape, self.dtype)
        else:
            if type(out) is not np.ndarray or out.shape != shape or out.dtype != self.dtype:
                raise ValueError(
                    f"{self.__name__}: out must be a numpy array of shape {shape} and "
                    f"dtype {self.dtype}"
                )
            r = out if out.flags.c_contiguous else np.empty(shape, self.dtype)
        rc = self._into(r, *args)  # type: ignore[attr-defined]
        if rc < 0:  # not arrays of the compiled shapes and dtype: converted, checked
            rc = self._into(r, *self._converted(args))  # type: ignore[attr-defined]
        if rc:
            self._failed(rc)
        if self._derivatives:
            if out is None:
                return (r[0], r[1], r[2])
            return self._fill_from(out, r)
        if out is not None and r is not out:
            out[...] = r
            return out
        return r

    def __call__(self, *args: Any, out: Any = None) -> Any:
        if self._fast:
            return self._call_fast(args, out)
        # the ctypes path (no extension module): the common case, numpy arrays of the compiled
        # dtype and shapes, written into the buffers with no other work (each check and copy
        # costs a tenth of a microsecond or more, as much as the smaller kernels); anything
        # else by _copy_in
        nd, dt, shapes, bufs = np.ndarray, self.dtype, self.shapes, self._inputs
        n = len(args)
        with self._lock:  # the buffers: one call at a time
            if n == 3 and self._n == 3:
                q, v, x = args
                if (
                    type(q) is nd
                    and type(v) is nd
                    and type(x) is nd
                    and q.dtype is dt
                    and v.dtype is dt
                    and x.dtype is dt
                    and q.shape == shapes[0]
                    and v.shape == shapes[1]
                    and x.shape == shapes[2]
                ):
                    bufs[0][...] = q
                    bufs[1][...] = v
                    bufs[2][...] = x
                else:
                    self._copy_in(args)
            elif (
                n == 1
                and self._n == 1
                and type(q := args[0]) is nd
                and q.dtype is dt
                and q.shape == shapes[0]
            ):
                bufs[0][...] = q
            elif n == self._n and all(
                type(x) is nd and x.dtype is dt and x.shape == s for x, s in zip(args, shapes)
            ):  # with f_ext
                for b, x in zip(bufs, args):
                    b[...] = x
            else:
                self._copy_in(args)
            rc = self._run(self._address)
            if rc:
                self._failed(rc)
            if self._derivatives:
                if out is None:
                    r = self._out.copy()
                    return (r[0], r[1], r[2])
                return self._fill(out)
            if out is None:
                return self._out.copy()
            if (
                type(out) is not np.ndarray
                or out.shape != self._out.shape
                or out.dtype != self.dtype
            ):
                raise ValueError(
                    f"{self.__name__}: out must be a numpy array of shape {self._out.shape} and "
                    f"dtype {self.dtype}"
                )
            out[...] = self._out
            return out

    #: the Python path of a call (the extension module's type calls it for what it leaves:
    #: ``out=``, arguments to convert, a kernel's error)
    _call = __call__


@functools.cache
def _native_type(module: Any) -> type:
    """:class:`NativeCall` on the extension module's ``Call`` (its calls in C)."""
    return type("NativeCall", (module.Call, NativeCall), {"__module__": __name__})


def _native(fn: Callable[..., Any], model: Any, example: Sequence[Any]) -> NativeCall | None:
    """:class:`NativeCall` of ``fn`` (checked: :func:`_native_function`), or ``None`` where
    the kernels cannot run here (not built, the switch ``cpu_kernels`` off, a dtype other than
    float32 and float64) or have nothing to compute (a model without bodies)."""
    from . import config, shell
    from . import model as model_module

    name = _native_function(fn)
    names = NATIVE_FUNCTIONS[name]
    if not isinstance(model, model_module.Model):
        raise TypeError(f"{name}: dispatch='native' takes a jaxdyn.Model, got {type(model)}")
    lo = 1 if name in ("crba", "minv") else 3
    if not lo <= len(example) <= len(names):
        raise TypeError(
            f"{name}: dispatch='native' takes the arguments ({', '.join(names)}) after the "
            f"model{' (f_ext optional)' if len(names) > lo else ''}, got {len(example)}"
        )
    t = model.topo
    sizes = {"q": (t.nq,), "v": (t.nv,), "a": (t.nv,), "tau": (t.nv,), "f_ext": (t.nb, 6)}
    xs = [np.asarray(x) for x in example]
    for arg, x in zip(names, xs):
        if x.shape != sizes[arg]:
            raise ValueError(
                f"{name}: example argument {arg} has shape {x.shape}, expected {sizes[arg]} "
                f"for {model.name!r}"
            )
        if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
            raise TypeError(f"{name}: example argument {arg} is not a real array ({x.dtype})")
    dtype = np.dtype(jnp.result_type(*[x.dtype for x in xs], float))
    shell.check_model_dtype(name, model, dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None  # the kernels' precisions only (as the jitted path's kernel_usable)
    if model.nb == 0 or not config.get("cpu_kernels") or host_calls.library() is None:
        return None
    module = host_calls.host_module()
    cls = NativeCall if module is None else _native_type(module)
    return cls(name, model, tuple(x.shape for x in xs), dtype)

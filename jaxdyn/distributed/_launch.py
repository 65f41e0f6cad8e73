"""Starting N local processes, and ending them all when one fails."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ._runtime import ENV_COORDINATOR, ENV_LOCAL_CPU_DEVICES, ENV_NUM_PROCESSES, ENV_PROCESS_ID


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the system's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class LaunchError(RuntimeError):
    """A launched process failed (or the run timed out); ``results`` holds every process's
    ``subprocess.CompletedProcess``."""

    def __init__(self, message: str, results: Sequence[subprocess.CompletedProcess[str]]) -> None:
        super().__init__(message)
        self.results = results


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(
    args: Iterable[Any],
    n: int = 2,
    *,
    local_cpu_devices: int | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
    check: bool = True,
    echo: bool = False,
) -> list[subprocess.CompletedProcess[str]]:
    """Run ``python *args`` in ``n`` processes on this machine, joined through a coordinator
    on the loopback address (``127.0.0.1``, ``port`` or a free one): each gets
    ``$JAXDYN_COORDINATOR``, ``$JAXDYN_NUM_PROCESSES``, ``$JAXDYN_PROCESS_ID`` (and
    ``$JAXDYN_LOCAL_CPU_DEVICES``), which :func:`initialize` reads.

    As soon as one process exits with an error, the others are ended (a process waiting in a
    collective for the failed one would otherwise wait until JAX's heartbeat timeout); so are
    all of them after ``timeout`` seconds. ``check``: raise :class:`LaunchError` with the
    failed process's error output; ``echo``: copy each process's output to this one's as it
    ends. Returns the ``subprocess.CompletedProcess`` of every process, in process order."""
    n = int(n)
    if n < 1:
        raise ValueError(f"launch: n must be >= 1, got {n}")
    port = free_port() if port is None else int(port)
    base = dict(os.environ if env is None else env)
    base[ENV_COORDINATOR] = f"127.0.0.1:{port}"
    base[ENV_NUM_PROCESSES] = str(n)
    if local_cpu_devices is not None:
        base[ENV_LOCAL_CPU_DEVICES] = str(int(local_cpu_devices))
    cmd = [sys.executable, *map(str, args)]
    with tempfile.TemporaryDirectory(prefix="jaxdyn-launch-") as tmp:
        procs, files = [], []
        for i in range(n):
            out = open(os.path.join(tmp, f"{i}.out"), "w+")
            err = open(os.path.join(tmp, f"{i}.err"), "w+")
            files.append((out, err))
            procs.append(
                subprocess.Popen(
                    cmd, env=dict(base, **{ENV_PROCESS_ID: str(i)}), stdout=out, stderr=err
                )
            )
        start, failed, timed_out = time.monotonic(), None, False
        try:
            while any(p.poll() is None for p in procs):
                bad = [i for i, p in enumerate(procs) if p.poll() not in (None, 0)]
                if bad:
                    failed = bad[0]
                    break
                if timeout is not None and time.monotonic() - start > timeout:
                    timed_out = True
                    break
                time.sleep(0.05)
        finally:
            _stop(procs)
        results = []
        for p, (out, err) in zip(procs, files):
            out.seek(0)
            err.seek(0)
            results.append(subprocess.CompletedProcess(cmd, p.returncode, out.read(), err.read()))
            out.close()
            err.close()
    if failed is None:
        bad = [i for i, r in enumerate(results) if r.returncode != 0]
        failed = bad[0] if bad else None
    if echo:
        for r in results:
            sys.stdout.write(r.stdout)
            sys.stderr.write(r.stderr)
    if check and (failed is not None or timed_out):
        if timed_out or failed is None:  # (failed is None only when timed out)
            msg = f"launch: the {n} processes did not finish within {timeout} s; ended them"
        else:
            msg = (
                f"launch: process {failed} of {n} failed (exit status "
                f"{results[failed].returncode}); ended the others. Its error output ends:\n"
                + results[failed].stderr[-4000:]
            )
        raise LaunchError(msg, results)
    return results


def main(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn(*args, **kwargs)`` in a worker process; if it raises, print the traceback and
    end the process at once with status 1 (``os._exit``): JAX's exit handler would otherwise
    wait at ``jax.distributed``'s shutdown barrier for processes that may be waiting for this
    one, and the run would hang until a timeout instead of failing with the message."""
    try:
        return fn(*args, **kwargs)
    except BaseException:  # noqa: BLE001 - any failure ends the process
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

"""``python -m jaxdyn.distributed [-n N] [--cpu-devices K] [--timeout S] script.py [args...]``:
run ``python script.py args...`` in N local processes joined on the loopback address
(:func:`jaxdyn.distributed.launch`); the script calls :func:`jaxdyn.distributed.initialize`.
Exits with the status of the first process that failed (the others ended), else 0."""

from __future__ import annotations

import argparse
import sys

from ._launch import LaunchError, launch


def _cli(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jaxdyn.distributed", description=__doc__)
    ap.add_argument("-n", "--processes", type=int, default=2, help="number of processes")
    ap.add_argument("--cpu-devices", type=int, default=None, help="CPU devices per process")
    ap.add_argument("--timeout", type=float, default=None, help="seconds before ending all")
    ap.add_argument("--port", type=int, default=None, help="coordinator port on 127.0.0.1")
    ap.add_argument("script", help="the Python script (or -m module) every process runs")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    try:
        launch(
            [a.script, *a.args],
            a.processes,
            local_cpu_devices=a.cpu_devices,
            timeout=a.timeout,
            port=a.port,
            echo=True,
        )
    except LaunchError as e:
        print(str(e).splitlines()[0], file=sys.stderr)
        codes = [r.returncode for r in e.results if r.returncode not in (0, None)]
        return next((c for c in codes if c > 0), 1)
    return 0


if __name__ == "__main__":
    sys.exit(_cli())

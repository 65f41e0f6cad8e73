"""``jaxdyn view``: the HTML viewer served from a local HTTP server, with joint sliders.

The page is :mod:`jaxdyn.viz.html`'s, plus one slider per one-DoF joint. Moving a slider posts
the configuration to ``POST /fk``, where the server computes the frames' placements with
jaxdyn's :func:`~jaxdyn.forward_kinematics` (compiled once) and returns them; the page never
does kinematics itself, so what it shows is jaxdyn's result, for any joint type a model has.
The server listens on ``127.0.0.1`` by default (``host="0.0.0.0"`` to share it on a network)
and serves only the page and that endpoint.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

import numpy as np

from .. import joints
from .html import html_page, scene_data
from .scene import Scene, frame_poses

if TYPE_CHECKING:
    from typing import Any

    from jax.typing import ArrayLike

    from ..model.model import Model
    from .scene import Scene

__all__ = ["serve", "slider_joints"]


class ViewerServer(ThreadingHTTPServer):
    """The viewer's HTTP server (:func:`serve`): ``url`` is the page's address."""

    url: str = ""


def slider_joints(model: Model) -> list:
    """``[{name, index, lo, hi}]``: the one-DoF joints' ``q`` index and slider range (the
    model's limits; otherwise ``[-pi, pi]`` for a revolute joint, ``[-1, 1]`` m for a
    prismatic one)."""
    t = model.topo
    lo = None if model.q_lower is None else np.asarray(model.q_lower, float)
    hi = None if model.q_upper is None else np.asarray(model.q_upper, float)
    axis = np.asarray(model.dof_axis, float)
    out = []
    for b in range(t.nb):
        if int(t.kind[b]) != joints.ONE_DOF:
            continue
        i, v = int(t.q_start[b]), int(t.v_start[b])
        default = np.pi if np.linalg.norm(axis[v, :3]) > 0 else 1.0
        a = lo[i] if lo is not None and np.isfinite(lo[i]) else -default
        c = hi[i] if hi is not None and np.isfinite(hi[i]) else default
        out.append({"name": t.joint_names[b], "index": i, "lo": float(a), "hi": float(c)})
    return out


def _handler(page: bytes, model, bodies):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet: the command prints the URL only
            pass

        def _send(self, code, body: bytes, ctype):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path in ("/", "/index.html"):
                self._send(200, page, "text/html; charset=utf-8")
            else:
                self._send(404, b"not found", "text/plain")

        def do_POST(self):
            if self.path != "/fk":
                self._send(404, b"not found", "text/plain")
                return
            try:
                n = int(self.headers.get("Content-Length", "0"))
                if n > 1 << 20:
                    raise ValueError("request too large")
                q = np.asarray(json.loads(self.rfile.read(n))["q"], float)
                if q.shape != (model.nq,) or not np.all(np.isfinite(q)):
                    raise ValueError(f"q must be {model.nq} finite numbers, got shape {q.shape}")
                R, p = frame_poses(model, q[None])
                poses = np.concatenate([R[0, bodies].reshape(-1, 9), p[0, bodies]], -1)
                body = {"poses": base64.b64encode(poses.astype("<f4").tobytes()).decode()}
                self._send(200, json.dumps(body).encode(), "application/json")
            except (ValueError, KeyError, TypeError) as e:
                self._send(400, json.dumps({"error": str(e)}).encode(), "application/json")

    return Handler


def serve(
    scene: Scene | str | os.PathLike,
    qs: ArrayLike | None = None,
    *,
    dt: float = 0.02,
    host: str = "127.0.0.1",
    port: int = 0,
    block: bool = True,
    title: str | None = None,
    camera: Any = None,
    forces: ArrayLike | None = None,
    contact_points: bool = False,
) -> ViewerServer:
    """Serve the viewer of ``scene`` (a :class:`Scene` or anything :meth:`Scene.load` takes)
    with joint sliders, showing ``qs (T, nq)`` or a batch ``(B, T, nq)`` if given (else the
    nominal configuration). The sliders show the first robot's configuration at the shown step
    (the time slider's) and move it there; ``URL#t=k`` opens the page at step ``k``,
    ``URL#q=q0,q1,...`` with that configuration.

    ``forces`` / ``contact_points``: the contacts drawn along the trajectory, as
    :func:`~jaxdyn.viz.export_html` draws them (the sliders do not move them).
    ``port=0`` picks a free port. Prints nothing; returns the server (``server.url`` is the
    page's address; ``camera`` as :func:`~jaxdyn.viz.export_html`'s) after ``serve_forever``
    ends when ``block``, at once otherwise (the server
    then runs in a daemon thread: ``server.shutdown()`` stops it)."""
    if not isinstance(scene, Scene):
        scene = Scene.load(scene)
    model = scene.model
    qs = scene.nominal_q()[None] if qs is None else scene.tree_q(qs)  # (spanning tree's q)
    if qs.ndim not in (2, 3):
        raise ValueError(f"serve: qs must be (T, nq) or (B, T, nq), got shape {qs.shape}")
    data = scene_data(
        scene, qs, dt, title, camera, tree=True, forces=forces, contact_points=contact_points
    )
    bodies = sorted({g.frame for g in scene.geoms if g.frame >= 0})
    q0 = qs.reshape(-1, qs.shape[-1])[0]  # the sliders move the first robot
    data["live"] = {
        "q": q0.tolist(),
        "qs": qs.reshape(-1, *qs.shape[-2:])[0].tolist(),  # the first robot's, every step
        "joints": slider_joints(model),
        "endpoint": "/fk",
    }
    page = html_page(data).encode("utf-8")
    server = ViewerServer((host, int(port)), _handler(page, model, bodies))
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
    server.url = f"http://{shown}:{server.server_address[1]}/"
    frame_poses(model, q0[None])  # compile the endpoint's kinematics before the first request
    if block:
        try:
            server.serve_forever()
        finally:
            server.server_close()
        return server
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server

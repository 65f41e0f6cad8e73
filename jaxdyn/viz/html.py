"""A self-contained HTML page of a scene and a trajectory: opens offline in any browser.

The page carries its data inline (triangle meshes of every geom and the frames' placements
per time step, as base64 float32 arrays: jaxdyn computed them, the page only draws) and a small
WebGL2 renderer of its own (``viewer.js`` beside this module, about 300 lines: triangles,
flat shading from screen-space derivatives, a procedural checker floor, an orbit camera),
which keeps the file free of third-party code and small. Controls: play / pause, a time
slider, playback speed, follow the base, drag to orbit, wheel to zoom, right-drag to pan.

:func:`export_html` writes the page; :func:`html_page` returns it. ``jaxdyn view``
(:mod:`jaxdyn.viz.server`) serves the same page with joint sliders.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from .scene import Scene, frame_poses, trajectory_box

if TYPE_CHECKING:
    from typing import Any

    from jax.typing import ArrayLike

    from .scene import Geom, Scene

__all__ = ["export_html", "html_page", "tessellate"]

_HERE = Path(__file__).resolve().parent


def _b64(a, dtype) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype).tobytes()).decode("ascii")


def _sphere(n_lat=10, n_lon=16):
    th = np.linspace(0, np.pi, n_lat + 1)
    ph = np.linspace(0, 2 * np.pi, n_lon + 1)
    T, P = np.meshgrid(th, ph, indexing="ij")
    v = np.stack([np.sin(T) * np.cos(P), np.sin(T) * np.sin(P), np.cos(T)], -1).reshape(-1, 3)
    f = []
    for i in range(n_lat):
        for j in range(n_lon):
            a, b = i * (n_lon + 1) + j, (i + 1) * (n_lon + 1) + j
            f += [[a, b, a + 1], [a + 1, b, b + 1]]
    return v, np.array(f)


def _tube(r, h, n=18, caps=True):
    ang = np.linspace(0, 2 * np.pi, n, endpoint=False)
    ring = np.stack([r * np.cos(ang), r * np.sin(ang)], 1)
    v = np.concatenate([np.c_[ring, -h * np.ones(n)], np.c_[ring, h * np.ones(n)]])
    f = []
    for j in range(n):
        k = (j + 1) % n
        f += [[j, k, n + j], [k, n + k, n + j]]
    if caps:
        v = np.concatenate([v, [[0, 0, -h], [0, 0, h]]])
        c0, c1 = 2 * n, 2 * n + 1
        for j in range(n):
            k = (j + 1) % n
            f += [[c0, k, j], [c1, n + j, n + k]]
    return v, np.array(f)


def tessellate(g: Geom) -> tuple[np.ndarray, np.ndarray]:
    """``(vertices (n, 3), faces (m, 3))`` of a :class:`~jaxdyn.viz.scene.Geom` in its
    frame's coordinates (the geom's placement applied)."""
    if g.kind == "box":
        c = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1], indexing="ij")).reshape(3, -1).T
        v = c * np.array(g.size)
        # corner index = 4 x + 2 y + z
        f = [[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
             [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]]  # fmt: skip
        f = np.array(f)
    elif g.kind in ("sphere", "ellipsoid"):
        v, f = _sphere()
        v = v * (np.array(g.size) if g.kind == "ellipsoid" else g.size[0])
    elif g.kind == "cylinder":
        v, f = _tube(g.size[0], g.size[1])
    elif g.kind == "capsule":
        r, h = g.size
        v1, f1 = _tube(r, h, caps=False)
        s, fs = _sphere(8, 18)
        top, bot = s * r + [0, 0, h], s * r - [0, 0, h]
        v = np.concatenate([v1, top, bot])
        f = np.concatenate([f1, fs + len(v1), fs + len(v1) + len(s)])
    else:
        # a mesh Geom has both (Geom.__post_init__)
        vertices, faces = cast(np.ndarray, g.vertices), cast(np.ndarray, g.faces)
        v, inv = np.unique(np.round(vertices, 7), axis=0, return_inverse=True)
        f = inv.reshape(-1)[faces]
    return np.asarray(v, float) @ g.R.T + g.p, np.asarray(f, np.int64)


def _cone(n=18):
    """A unit cone along +z: base radius 1 at z = 0, apex at z = 1."""
    ang = np.linspace(0, 2 * np.pi, n, endpoint=False)
    v = np.concatenate([np.c_[np.cos(ang), np.sin(ang), np.zeros(n)], [[0, 0, 1], [0, 0, 0]]])
    f = []
    for j in range(n):
        k = (j + 1) % n
        f += [[j, k, n], [k, j, n + 1]]
    return v, np.array(f)


def _marks(scene, R, p, forces, contact_points, force_scale, extent):
    """The page's contact markers (:func:`~jaxdyn.viz.scene.contact_marks`): per step and
    contact, a point and the arrow of its force (metres, already scaled) or ``None``, which
    ones to draw, and the unit meshes (sphere, arrow shaft, arrow head) that draw them."""
    from .scene import contact_marks

    if not contact_points and forces is None:
        return None
    mk = contact_marks(scene, R, p, forces, force_scale, extent, who="export_html")
    if mk["forces"] is None:
        vectors, show = None, mk["touching"]
    else:
        vectors = mk["forces"] * mk["scale"]
        show = np.linalg.norm(vectors, axis=-1) >= 1e-4
    sphere, shaft, head = _sphere(), _tube(1.0, 0.5, caps=True), _cone()
    shaft = (shaft[0] + [0, 0, 0.5], shaft[1])  # z from 0 to 1
    mesh = lambda vf: {"positions": _b64(vf[0], "<f4"), "indices": _b64(vf[1], "<u4")}
    return {
        "n": int(mk["point"].shape[2]),
        "points": _b64(mk["point"], "<f4"),
        "vectors": None if vectors is None else _b64(vectors, "<f4"),
        "show": _b64(show, "u1"),
        "radius": float(mk["radius"]),
        "width": float(mk["width"]),
        "color": [0.9, 0.1, 0.1, 1.0],
        "sphere": mesh(sphere),
        "shaft": mesh(shaft),
        "head": mesh(head),
    }


def _terrain(terrain):
    from ..sim.geometry import Heightfield, Plane

    if terrain is None:
        return None
    if isinstance(terrain, Plane):
        n = np.asarray(terrain.normal, float)
        return {
            "kind": "plane",
            "normal": (n / np.linalg.norm(n)).tolist(),
            "height": float(np.asarray(terrain.height)),
        }
    if isinstance(terrain, Heightfield):
        H = np.asarray(terrain.heights, float)
        sp, o = np.asarray(terrain.spacing, float), np.asarray(terrain.origin, float)
        nx, ny = H.shape
        X, Y = np.meshgrid(
            o[0] + sp[0] * np.arange(nx), o[1] + sp[1] * np.arange(ny), indexing="ij"
        )
        v = np.stack([X, Y, H], -1).reshape(-1, 3)
        f = []
        for i in range(nx - 1):
            for j in range(ny - 1):
                a, b = i * ny + j, (i + 1) * ny + j
                f += [[a, b, b + 1], [a, b + 1, a + 1]]
        return {"kind": "mesh", "positions": _b64(v, "<f4"), "indices": _b64(f, "<u4")}
    raise TypeError(
        f"export_html: terrain must be a Plane, a Heightfield or None, got {type(terrain).__name__}"
    )


def scene_data(
    scene: Scene,
    qs: ArrayLike,
    dt: float,
    title: str | None = None,
    camera: Any = None,
    spacing: float | None = None,
    tree: bool = False,
    forces: ArrayLike | None = None,
    contact_points: bool = False,
    force_scale: float | None = None,
) -> dict:
    """The JSON the page reads: meshes, per-frame placements ``(B, T, nbodies, 12)``
    (row-major ``R`` then ``p``), grid offsets, time step, camera, contact markers. ``tree``:
    ``qs`` are already spanning-tree configurations (of a cluster scene)."""
    qs = np.asarray(qs, float) if tree else scene.tree_q(qs)
    if qs.ndim == 1:
        qs = qs[None]
    if qs.ndim == 2:
        qs = qs[None]
    model = scene.model
    if qs.ndim != 3 or qs.shape[-1] != model.nq:
        raise ValueError(
            f"export_html: qs has shape {qs.shape}, expected (T, nq) or (B, T, nq) "
            f"with nq={model.nq}"
        )
    B, T, _ = qs.shape
    bodies = sorted({g.frame for g in scene.geoms if g.frame >= 0})
    slot = {f: k for k, f in enumerate(bodies)}
    parts, lo, hi = [], np.full(3, np.inf), np.full(3, -np.inf)
    R0, p0 = frame_poses(model, scene.nominal_q()[None])
    for g in scene.geoms:
        v, f = tessellate(g)
        w = v if g.frame < 0 else v @ R0[0, g.frame].T + p0[0, g.frame]
        lo, hi = np.minimum(lo, w.min(0)), np.maximum(hi, w.max(0))
        parts.append(
            {
                "body": slot.get(g.frame, -1),
                "color": list(g.rgba),
                "positions": _b64(v, "<f4"),
                "indices": _b64(f, "<u4"),
            }
        )
    R, p = frame_poses(model, qs.reshape(B * T, -1))
    poses = np.concatenate([R[:, bodies].reshape(B * T, len(bodies), 9), p[:, bodies]], -1)
    extent = float(max(np.max(hi - lo), 0.1)) if parts else 1.0
    if not model.floating_base and bodies:  # a fixed camera: the whole trajectory in view
        tlo, thi = trajectory_box(scene, R, p)
        lo, hi = np.minimum(lo, tlo), np.maximum(hi, thi)
        extent = max(extent, float(np.max(thi - tlo)))
    cols = int(np.ceil(np.sqrt(B)))
    sp = spacing if spacing is not None else 1.5 * extent
    idx = np.arange(B)
    offsets = np.stack([(idx % cols) * sp, -(idx // cols) * sp, 0 * idx], 1).astype(float)
    offsets[:, :2] -= offsets[:, :2].mean(0)
    t = model.topo
    base = list(model.frame_names).index(t.body_names[0]) if t.nb else -1
    cam = {
        "azimuth": 135.0,
        "elevation": -20.0,
        "distance": 2.2 * extent + 1.2 * sp * (cols - 1),
        "fov": 45.0,
        "follow": bool(model.floating_base),
    }
    cam.update(camera or {})
    marks = _marks(
        scene,
        R.reshape(B, T, *R.shape[1:]),
        p.reshape(B, T, *p.shape[1:]),
        forces,
        contact_points,
        force_scale,
        extent,
    )
    return {
        "title": title or scene.name,
        "nbodies": len(bodies),
        "batch": B,
        "steps": T,
        "dt": float(dt),
        "parts": parts,
        "poses": _b64(poses, "<f4"),
        "offsets": offsets.tolist(),
        "base": slot.get(base, -1),
        "center": ((lo + hi) / 2).tolist(),
        "base0": (p0[0, base] if base >= 0 else np.zeros(3)).tolist(),
        "extent": extent,
        "terrain": _terrain(scene.terrain),
        "camera": cam,
        "marks": marks,
        "live": None,
    }


def html_page(data: dict) -> str:
    """The page around ``data`` (:func:`scene_data`)."""
    js = (_HERE / "viewer.js").read_text()
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    title = str(data.get("title", "jaxdyn")).replace("<", "&lt;")
    return _PAGE.format(title=title, data=blob, js=js)


def export_html(
    scene: Scene | str | os.PathLike,
    qs: ArrayLike,
    path: str | os.PathLike | None = None,
    *,
    dt: float = 0.02,
    title: str | None = None,
    camera: Any = None,
    spacing: float | None = None,
    forces: ArrayLike | None = None,
    contact_points: bool = False,
    force_scale: float | None = None,
) -> str:
    """A self-contained HTML page showing ``scene`` (a :class:`Scene` or anything
    :meth:`Scene.load` takes) along ``qs (T, nq)`` (a batch ``(B, T, nq)``: ``B`` robots on a
    grid), ``dt`` seconds apart. ``camera``: ``{"azimuth", "elevation", "distance", "fov",
    "follow", "target"}`` overrides. ``contact_points`` / ``forces (T, nc, 3)`` (world axes;
    ``force_scale`` metres per newton) draw the contacts as the offline renderer does
    (:meth:`~jaxdyn.viz.Renderer.render`): red balls where ``scene.contacts`` touch the
    terrain, or red arrows of the forces, at every step. Writes it to ``path`` if given;
    returns the HTML."""
    if not isinstance(scene, Scene):
        scene = Scene.load(scene)
    if not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"export_html: dt must be > 0, got {dt}")
    data = scene_data(
        scene,
        qs,
        dt,
        title,
        camera,
        spacing,
        forces=forces,
        contact_points=contact_points,
        force_scale=force_scale,
    )
    page = html_page(data)
    if path is not None:
        with open(os.fspath(path), "w", encoding="utf-8") as f:
            f.write(page)
    return page


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} - jaxdyn</title>
<style>
html, body {{ margin: 0; height: 100%; overflow: hidden; font: 13px system-ui, sans-serif; }}
#view {{ position: absolute; inset: 0; width: 100%; height: 100%; display: block; }}
#bar {{ position: absolute; left: 0; right: 0; bottom: 0; display: flex; gap: 8px;
  align-items: center; padding: 6px 10px; background: rgba(255,255,255,.8); }}
#bar input[type=range] {{ flex: 1; }}
#side {{ position: absolute; top: 0; right: 0; max-height: calc(100% - 44px); overflow: auto;
  background: rgba(255,255,255,.85); padding: 6px 10px; display: none; min-width: 220px; }}
#side label {{ display: block; font-size: 11px; }}
#side input {{ width: 100%; }}
#status {{ position: absolute; top: 6px; left: 10px; color: #333; }}
</style></head>
<body>
<canvas id="view"></canvas>
<div id="status">loading</div>
<div id="side"></div>
<div id="bar">
  <button id="play" title="play / pause (space)">&#9654;</button>
  <input id="time" type="range" min="0" max="0" value="0" step="1" aria-label="time">
  <span id="clock">0.000 s</span>
  <select id="speed" aria-label="speed"><option>0.25</option><option>0.5</option>
    <option selected>1</option><option>2</option></select>
  <label><input id="follow" type="checkbox"> follow base</label>
</div>
<script id="jaxdyn-data" type="application/json">{data}</script>
<script>
{js}
</script>
</body></html>
"""

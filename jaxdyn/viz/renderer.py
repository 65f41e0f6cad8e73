"""Offline rendering: numpy frames of a scene posed along a trajectory, headless.

The renderer is MuJoCo's (``mujoco.Renderer``, OpenGL through EGL or OSMesa, no display
needed): a well-kept, tested renderer with shadows, reflections and headless back-ends that
jaxdyn's test extra already installs. The scene is compiled into a MuJoCo model of *mocap*
bodies, one per drawn frame of the jaxdyn model (and per robot of a batch); jaxdyn computes the
frames' placements (:func:`~jaxdyn.viz.scene.frame_poses`) and MuJoCo only draws, so any model
jaxdyn loads (URDF, MJCF, URDF+) renders the same way, and MuJoCo's own dynamics never run.

The OpenGL back-end is chosen by ``MUJOCO_GL`` before ``mujoco`` is first imported; without a
display jaxdyn sets ``MUJOCO_GL=egl`` (``osmesa`` also works, slower; set it yourself).
"""

from __future__ import annotations

import os
import sys
import time
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from .scene import Scene, _geom_points, contact_marks, frame_poses, trajectory_box

if TYPE_CHECKING:
    from typing import Any

    from jax.typing import ArrayLike

    from .scene import Scene

__all__ = ["Camera", "Renderer", "render", "mujoco_scene"]


_HEADLESS_EGL = False  # MUJOCO_GL=egl set here (no display, the user chose no back-end)


def _import_mujoco() -> ModuleType:
    """``mujoco``, with an OpenGL back-end that works without a display: ``MUJOCO_GL=egl``
    unless the user set ``MUJOCO_GL`` or a display exists. When another library imported
    MuJoCo first (Brax does), its GLFW default is replaced by EGL for jaxdyn's renderers.
    Typed ``ModuleType`` (its attributes ``Any``): MuJoCo's bindings ship no type stubs."""
    global _HEADLESS_EGL
    headless = sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
    if headless and not os.environ.get("MUJOCO_GL"):
        os.environ["MUJOCO_GL"] = "egl"
        _HEADLESS_EGL = True
    try:
        import mujoco
    except ImportError:
        raise ImportError("jaxdyn.viz rendering needs MuJoCo: pip install 'jaxdyn[viz]'") from None
    if _HEADLESS_EGL:
        import importlib

        for name in ("mujoco.rendering.classic.gl_context", "mujoco.gl_context"):
            mod: Any = sys.modules.get(name)  # MuJoCo's GL module (no type stubs)
            if mod is None:
                continue
            cls = getattr(mod, "GLContext", None)
            if cls is None or "egl" not in getattr(cls, "__module__", ""):
                try:
                    mod.GLContext = importlib.import_module("mujoco.egl").GLContext
                except (ImportError, AttributeError) as e:  # pragma: no cover
                    raise ImportError(f"jaxdyn.viz: no EGL for headless rendering: {e}") from None
    return mujoco


class Progress:
    """A one-line progress report on stderr (``label i/n``), updated at most 5 times a
    second; silent when ``enabled`` is false."""

    def __init__(self, label: str, n: int, enabled: bool | None = None) -> None:
        self.label, self.n = label, n
        self.enabled = sys.stderr.isatty() if enabled is None else bool(enabled)
        self.t0 = self.last = time.perf_counter()

    def __call__(self, i: int):
        if not self.enabled:
            return
        now = time.perf_counter()
        done = i + 1 >= self.n
        tty = sys.stderr.isatty()
        if not done and now - self.last < (0.2 if tty else 2.0):
            return
        self.last = now
        msg = f"{self.label} {i + 1}/{self.n} ({now - self.t0:.1f} s)"
        if tty:
            print("\r" + msg, end="\n" if done else "", file=sys.stderr, flush=True)
        else:
            print(msg, file=sys.stderr, flush=True)


_KIND = {
    "box": "mjGEOM_BOX",
    "sphere": "mjGEOM_SPHERE",
    "cylinder": "mjGEOM_CYLINDER",
    "capsule": "mjGEOM_CAPSULE",
    "ellipsoid": "mjGEOM_ELLIPSOID",
    "mesh": "mjGEOM_MESH",
}


def _mat_quat(R):
    """Unit quaternion ``[w, x, y, z]`` of a rotation matrix."""
    import mujoco

    q = np.zeros(4)
    # MuJoCo's bindings ship no type stubs
    mat2quat = mujoco.mju_mat2Quat  # pyright: ignore[reportAttributeAccessIssue]
    mat2quat(q, np.ascontiguousarray(R, float).reshape(9))
    return q


def mujoco_scene(
    scene: Scene,
    n_robots: int = 1,
    offsets: ArrayLike | None = None,
    floor_size: float | None = None,
) -> tuple[Any, list]:
    """``(mujoco.MjModel, bodies)``: the scene as a MuJoCo model of mocap bodies, ``bodies``
    the drawn frames (mocap body ``k`` of robot ``r`` is ``r * len(bodies) + k``)."""
    mujoco = _import_mujoco()
    spec = mujoco.MjSpec()
    spec.visual.global_.offwidth = 1920
    spec.visual.global_.offheight = 1080
    spec.visual.quality.shadowsize = 2048
    spec.visual.headlight.ambient = [0.35, 0.35, 0.35]
    spec.visual.headlight.diffuse = [0.5, 0.5, 0.5]
    spec.visual.map.znear = 0.005
    spec.stat.extent = 2.0
    spec.add_texture(
        name="sky",
        type=mujoco.mjtTexture.mjTEXTURE_SKYBOX,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_GRADIENT,
        rgb1=[0.62, 0.72, 0.84],
        rgb2=[0.95, 0.96, 0.98],
        width=64,
        height=384,
    )
    wb = spec.worldbody
    wb.add_light(pos=[0, 0, 6], dir=[0, 0, -1], diffuse=[0.6, 0.6, 0.6], castshadow=True)
    meshes = {}
    for i, g in enumerate(scene.geoms):
        if g.kind == "mesh":
            name = f"mesh{i}"
            spec.add_mesh(
                name=name,
                uservert=g.vertices.reshape(-1).tolist(),
                userface=g.faces.reshape(-1).tolist(),
            )
            meshes[i] = name
    _add_terrain(mujoco, spec, scene.terrain, floor_size)
    bodies = sorted({g.frame for g in scene.geoms if g.frame >= 0})
    offsets = np.zeros((n_robots, 3)) if offsets is None else np.asarray(offsets, float)
    for i, g in enumerate(scene.geoms):
        if g.frame < 0:
            for r in range(n_robots):
                _add_geom(mujoco, wb, g, meshes.get(i), offset=offsets[r])
    for r in range(n_robots):
        for f in bodies:
            b = wb.add_body(name=f"r{r}_f{f}", mocap=True)
            for i, g in enumerate(scene.geoms):
                if g.frame == f:
                    _add_geom(mujoco, b, g, meshes.get(i))
    try:
        return spec.compile(), bodies
    except ValueError as e:
        raise ValueError(f"jaxdyn.viz: MuJoCo could not compile the scene: {e}") from None


def _add_geom(mujoco, body, g, mesh, offset=None):
    kw = dict(
        type=getattr(mujoco.mjtGeom, _KIND[g.kind]),
        pos=(g.p + (0 if offset is None else offset)).tolist(),
        quat=_mat_quat(g.R).tolist(),
        rgba=list(g.rgba),
        contype=0,
        conaffinity=0,
        group=1,
    )
    if mesh is not None:
        kw["meshname"] = mesh
    else:
        size = list(g.size) + [0.0] * (3 - len(g.size))
        kw["size"] = size
    body.add_geom(**kw)


def _add_terrain(mujoco, spec, terrain, floor_size):
    from ..sim.geometry import Heightfield, Plane

    if terrain is None:
        return
    spec.add_texture(
        name="grid",
        type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        rgb1=[0.82, 0.85, 0.88],
        rgb2=[0.68, 0.72, 0.76],
        width=256,
        height=256,
    )
    mat = spec.add_material(name="grid", texrepeat=[1, 1], texuniform=True, reflectance=0.05)
    mat.textures[int(mujoco.mjtTextureRole.mjTEXROLE_RGB)] = "grid"
    if isinstance(terrain, Plane):
        n = np.asarray(terrain.normal, float)
        n = n / np.linalg.norm(n)
        h = float(np.asarray(terrain.height))
        z = np.array([0, 0, 1.0])
        axis = np.cross(z, n)
        s = np.linalg.norm(axis)
        quat = [1.0, 0, 0, 0]
        if s > 1e-12:
            ang = np.arctan2(s, n @ z)
            quat = [np.cos(ang / 2), *(np.sin(ang / 2) * axis / s)]
        size = floor_size or 20.0
        spec.worldbody.add_geom(
            type=mujoco.mjtGeom.mjGEOM_PLANE,
            size=[size, size, 0.05],
            pos=(h * n).tolist(),
            quat=list(quat),
            material="grid",
            contype=0,
            conaffinity=0,
            group=0,
        )
    elif isinstance(terrain, Heightfield):
        H = np.asarray(terrain.heights, float)
        sp, o = np.asarray(terrain.spacing, float), np.asarray(terrain.origin, float)
        nx, ny = H.shape
        lo, hi = float(H.min()), float(H.max())
        span = max(hi - lo, 1e-6)
        rx, ry = (nx - 1) * sp[0] / 2, (ny - 1) * sp[1] / 2
        # MuJoCo's data[row = y][col = x], normalised to [0, 1] of the elevation
        spec.add_hfield(
            name="terrain",
            size=[rx, ry, span, 0.05],
            nrow=ny,
            ncol=nx,
            userdata=((H.T - lo) / span).reshape(-1).tolist(),
        )
        spec.worldbody.add_geom(
            type=mujoco.mjtGeom.mjGEOM_HFIELD,
            hfieldname="terrain",
            pos=[o[0] + rx, o[1] + ry, lo],
            material="grid",
            contype=0,
            conaffinity=0,
            rgba=[0.7, 0.75, 0.8, 1],
        )
    else:
        raise TypeError(
            f"jaxdyn.viz: terrain must be a Plane, a Heightfield or None, got "
            f"{type(terrain).__name__}"
        )


class Camera:
    """Where the camera looks from.

    - ``follow``: the frame whose position the camera tracks (name or index; default the
      model's first body: the base of a floating robot), or ``None`` for a fixed camera
      framing the whole trajectory;
    - ``distance`` (m; default from the scene's size), ``azimuth``, ``elevation`` (degrees,
      MuJoCo's convention: azimuth 90 looks along +y, elevation -20 from slightly above);
    - ``lookat``: a fixed target point (overrides ``follow``).
    """

    def __init__(
        self,
        follow: str | None = "base",
        distance: float | None = None,
        azimuth: float = 135.0,
        elevation: float = -20.0,
        lookat: ArrayLike | None = None,
    ) -> None:
        self.follow, self.distance = follow, distance
        self.azimuth, self.elevation, self.lookat = azimuth, elevation, lookat


def _follow_frame(model, follow):
    if follow is None:
        return None
    if follow == "base":
        t = model.topo
        name = t.body_names[0]
        return list(model.frame_names).index(name) if name in model.frame_names else 0
    return model.frame_index(follow)


class Renderer:
    """Render a :class:`~jaxdyn.viz.scene.Scene` posed at configurations; keeps one OpenGL
    context (reuse it for many calls; :meth:`close` frees it).

    ``n_robots`` copies laid out on a grid ``spacing`` metres apart (a batch of rollouts).
    """

    def __init__(
        self,
        scene: Scene,
        width: int = 640,
        height: int = 480,
        n_robots: int = 1,
        spacing: float | None = None,
    ) -> None:
        self.mujoco = mujoco = _import_mujoco()
        self.scene = scene
        self.width, self.height = int(width), int(height)
        if self.width % 2 or self.height % 2:
            raise ValueError(
                f"Renderer: width and height must be even (video codecs), got {width} x {height}"
            )
        q0 = scene.nominal_q()
        R0, p0 = frame_poses(scene.model, q0[None])
        pts = (
            np.concatenate([_geom_points(g, R0[0], p0[0]) for g in scene.geoms])
            if scene.geoms
            else np.zeros((1, 3))
        )
        self.extent = float(max(np.max(pts.max(0) - pts.min(0)), 0.1))
        self.center0 = (pts.max(0) + pts.min(0)) / 2
        self.p0 = p0[0]
        self.n_robots = int(n_robots)
        cols = int(np.ceil(np.sqrt(self.n_robots)))
        sp = spacing if spacing is not None else 1.5 * self.extent
        idx = np.arange(self.n_robots)
        self.offsets = np.stack([(idx % cols) * sp, -(idx // cols) * sp, 0 * idx], 1).astype(float)
        self.offsets[:, :2] -= self.offsets[:, :2].mean(0)
        floor = max(20.0, 2 * sp * cols)
        self.mj_model, self.bodies = mujoco_scene(scene, self.n_robots, self.offsets, floor)
        self.mj_data = mujoco.MjData(self.mj_model)
        try:
            self._r = mujoco.Renderer(self.mj_model, self.height, self.width)
        except Exception as e:  # MuJoCo raises several kinds (FatalError, RuntimeError, ...)
            gl = os.environ.get("MUJOCO_GL", "(unset)")
            raise RuntimeError(
                f"jaxdyn.viz: no OpenGL context for MuJoCo's renderer (MUJOCO_GL={gl}): {e}. "
                "Without a display use EGL (Debian: apt-get install libegl1 libgl1) or "
                "MUJOCO_GL=osmesa (apt-get install libosmesa6)."
            ) from None
        self._opt = mujoco.MjvOption()

    def close(self) -> None:
        self._r.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def _camera(self, camera: Camera, R_all, p_all, t):
        mj = self.mujoco
        cam = mj.MjvCamera()
        cam.type = mj.mjtCamera.mjCAMERA_FREE
        grid = float(np.max(np.ptp(self.offsets, 0))) if self.n_robots > 1 else 0.0
        model = self.scene.model
        follow = camera.follow
        if follow == "base" and not model.floating_base:
            follow = None  # a fixed-base robot: a fixed camera
        f = _follow_frame(model, follow)
        extent = self.extent
        if camera.lookat is not None:
            cam.lookat[:] = camera.lookat
        elif f is not None:  # the frame's motion, the nominal pose's centre of geometry
            cam.lookat[:] = (p_all[:, t, f] + self.offsets).mean(0) + self.center0 - self.p0[f]
        else:  # the whole trajectory in view: the box of the geometry over all steps
            if self._box is None:
                n = R_all.shape[0] * R_all.shape[1]
                self._box = trajectory_box(
                    self.scene, R_all.reshape(n, *R_all.shape[2:]), p_all.reshape(n, -1, 3)
                )
            lo, hi = self._box
            cam.lookat[:] = (lo + hi) / 2 + self.offsets.mean(0)
            extent = max(extent, float(np.max(hi - lo)))
        cam.distance = camera.distance or (2.2 * extent + 1.2 * grid)
        cam.azimuth, cam.elevation = camera.azimuth, camera.elevation
        return cam

    def render(
        self,
        qs: ArrayLike,
        camera: Camera | None = None,
        contact_points: bool = False,
        forces: ArrayLike | None = None,
        force_scale: float | None = None,
        progress: bool | None = None,
    ) -> np.ndarray:
        """Frames ``(T, height, width, 3) uint8`` of configurations ``qs (T, nq)``, or
        ``(n_robots, T, nq)`` for a batch.

        ``contact_points``: mark the contact spheres (``scene.contacts``) touching the terrain;
        ``forces (T, nc, 3)`` (or ``(n_robots, T, nc, 3)``): contact forces in world axes
        (:func:`jaxdyn.sim.contact_forces`), drawn as arrows at the contact points,
        ``force_scale`` metres per newton (default: the model's weight shared by four
        contacts is a quarter of its size)."""
        mj = self.mujoco
        camera = camera or Camera()
        qs = self.scene.tree_q(qs)
        if qs.ndim == 2:
            qs = qs[None]
        if qs.ndim != 3 or qs.shape[0] != self.n_robots:
            raise ValueError(
                f"render: qs has shape {qs.shape}, expected (T, nq) or "
                f"(n_robots={self.n_robots}, T, nq)"
            )
        B, T, nq = qs.shape
        R, p = frame_poses(self.scene.model, qs.reshape(B * T, nq))
        R = R.reshape(B, T, *R.shape[1:])
        p = p.reshape(B, T, *p.shape[1:])
        self._box = None  # (the fixed camera's framing of this trajectory)
        marks = None
        if contact_points or forces is not None:
            marks = self._contact_marks(R, p, forces, force_scale)
        out = np.empty((T, self.height, self.width, 3), np.uint8)
        d = self.mj_data
        nbod = len(self.bodies)
        report = Progress("rendering frames", T, progress)
        quats = np.zeros((B, T, nbod, 4))
        for k, f in enumerate(self.bodies):
            for b in range(B):
                for t in range(T):
                    quats[b, t, k] = _mat_quat(R[b, t, f])
        for t in range(T):
            for b in range(B):
                d.mocap_pos[b * nbod : (b + 1) * nbod] = p[b, t, self.bodies] + self.offsets[b]
                d.mocap_quat[b * nbod : (b + 1) * nbod] = quats[b, t]
            mj.mj_kinematics(self.mj_model, d)
            mj.mj_camlight(self.mj_model, d)
            self._r.update_scene(d, camera=self._camera(camera, R, p, t), scene_option=self._opt)
            if marks is not None:
                self._draw_marks(marks, t)
            out[t] = self._r.render()
            report(t)
        return out

    # ------------------------------------------------------------------ contacts
    def _contact_marks(self, R, p, forces, force_scale):
        marks = contact_marks(self.scene, R, p, forces, force_scale, self.extent)
        marks["point"] = marks["point"] + self.offsets[:, None, None]
        return marks

    def _draw_marks(self, marks, t):
        mj = self.mujoco
        scn = self._r.scene
        B = marks["point"].shape[0]
        for b in range(B):
            for k in range(marks["point"].shape[2]):
                if scn.ngeom >= scn.maxgeom - 1:
                    return
                x = marks["point"][b, t, k]
                if marks["forces"] is None:
                    if not marks["touching"][b, t, k]:
                        continue
                    g = scn.geoms[scn.ngeom]
                    mj.mjv_initGeom(
                        g,
                        mj.mjtGeom.mjGEOM_SPHERE,
                        [marks["radius"]] * 3,
                        x,
                        np.eye(3).reshape(9),
                        np.array([0.9, 0.1, 0.1, 1.0], np.float32),
                    )
                    scn.ngeom += 1
                    continue
                f = marks["forces"][b, t, k]
                if np.linalg.norm(f) * marks["scale"] < 1e-4:
                    continue
                g = scn.geoms[scn.ngeom]
                mj.mjv_initGeom(
                    g,
                    mj.mjtGeom.mjGEOM_ARROW,
                    np.zeros(3),
                    np.zeros(3),
                    np.zeros(9),
                    np.array([0.9, 0.1, 0.1, 1.0], np.float32),
                )
                mj.mjv_connector(
                    g, mj.mjtGeom.mjGEOM_ARROW, marks["width"], x, x + f * marks["scale"]
                )
                scn.ngeom += 1


def render(
    scene: Scene | str | os.PathLike,
    qs: ArrayLike,
    *,
    width: int = 640,
    height: int = 480,
    camera: Camera | None = None,
    contact_points: bool = False,
    forces: ArrayLike | None = None,
    force_scale: float | None = None,
    spacing: float | None = None,
    progress: bool | None = None,
) -> np.ndarray:
    """Frames ``(T, height, width, 3) uint8`` of ``scene`` (a :class:`Scene`, or anything
    :meth:`Scene.load` takes) posed at ``qs (T, nq)``; a batch ``(B, T, nq)`` is drawn as
    ``B`` robots on a grid. See :meth:`Renderer.render` for contacts and forces."""
    if not isinstance(scene, Scene):
        scene = Scene.load(scene)
    qs = np.asarray(qs, float)
    n = qs.shape[0] if qs.ndim == 3 else 1
    with Renderer(scene, width, height, n_robots=n, spacing=spacing) as r:
        return r.render(
            qs,
            camera,
            contact_points=contact_points,
            forces=forces,
            force_scale=force_scale,
            progress=progress,
        )

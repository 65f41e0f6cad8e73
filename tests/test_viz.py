"""jaxdyn.viz: offline frames against stored reference images, videos, URDF visual geometry,
the HTML export in headless Chromium, the ``render`` / ``sim`` / ``view`` commands.

Reference images (``tests/data/viz/*.png``, low resolution) come from MuJoCo's renderer on
Mesa's llvmpipe (EGL). After a deliberate change of what is drawn, regenerate them with

    JAXDYN_VIZ_REGEN=1 python -m pytest tests/test_viz.py -k reference -n 0

and look at the new images before committing them. The comparison tolerates small
rasterisation differences (other Mesa versions): mean absolute difference below 3 levels and
fewer than 2 % of the pixels off by more than 48 levels.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxdyn import robots, sim, viz

DATA = Path(__file__).parent / "data" / "viz"
W, H = 96, 72
FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")


def _compare(name: str, img: np.ndarray, regen=True):
    """``img`` against ``DATA/name.png`` (written first with JAXDYN_VIZ_REGEN=1, unless
    ``regen`` is false)."""
    from PIL import Image

    path = DATA / f"{name}.png"
    if regen and os.environ.get("JAXDYN_VIZ_REGEN"):
        DATA.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(path)
    assert path.exists(), f"no reference image {path}: regenerate (module docstring)"
    ref = np.asarray(Image.open(path).convert("RGB"))
    assert ref.shape == img.shape, (ref.shape, img.shape)
    return _difference(img, ref)


def _difference(a, b):
    d = np.abs(a.astype(int) - b.astype(int)).max(-1)
    return float(d.mean()), float(np.mean(d > 48))


def _close(diff):
    return diff[0] < 3.0 and diff[1] < 0.02


@pytest.fixture(scope="module")
def quad():
    m = robots.load("quad12")
    cs = sim.contact_set(m, [sim.Sphere(f, 0.02) for f in FEET])
    scene = viz.Scene.from_model(m, contacts=cs)
    r = viz.Renderer(scene, W, H)
    yield scene, r
    r.close()


def _standing(scene):
    q = scene.nominal_q()
    q[7:] = np.tile([0.0, 0.7, -1.4], 4)
    q[2] = 0.0
    R, p = viz.frame_poses(scene.model, q[None])
    foot = [scene.model.frame_index(f) for f in FEET]
    q[2] = -float(p[0, foot, 2].min()) + 0.02  # feet (radius 0.02) on the ground
    return q


def test_reference_quad12_standing(quad):
    scene, r = quad
    q = _standing(scene)
    img = r.render(q[None], viz.Camera(azimuth=120, elevation=-25))[0]
    assert _close(_compare("quad12_standing", img)), _compare("quad12_standing", img)
    # the comparison sees a pose change: one knee bent further is out of tolerance
    q2 = q.copy()
    q2[7 + 2] = -0.4
    img2 = r.render(q2[None], viz.Camera(azimuth=120, elevation=-25))[0]
    assert not _close(_compare("quad12_standing", img2, regen=False))


def test_reference_contact_forces(quad):
    """Contact forces of quad12 standing drawn as red arrows at its feet."""
    scene, r = quad
    q = _standing(scene)
    f = np.zeros((1, 4, 3))
    f[0, :, 2] = 20.0  # 20 N up at each foot
    cam = viz.Camera(azimuth=90, elevation=-5)
    img = r.render(q[None], cam, forces=f)[0]
    plain = r.render(q[None], cam)[0]
    red = (img[..., 0] > 150) & (img[..., 1] < 80) & (img[..., 2] < 80)
    assert red.sum() > 20 and not ((plain[..., 0] > 150) & (plain[..., 1] < 80)).any()
    assert _close(_compare("quad12_forces", img))
    # contact points: red balls at the touching feet (the feet of the standing pose)
    balls = r.render(q[None], cam, contact_points=True)[0]
    red_balls = (balls[..., 0] > 150) & (balls[..., 1] < 80) & (balls[..., 2] < 80)
    rows = np.nonzero(red_balls)[0]
    assert len(rows) > 3 and rows.min() > np.nonzero(_orange(plain))[0].mean()  # low down


def test_reference_meshes_batch_heightfield():
    """solo12's STL meshes (example-robot-data), a batch of 4 on a grid, on a heightfield."""
    hf = sim.Heightfield(
        0.05 * np.sin(np.linspace(0, 6, 24))[:, None] * np.ones(24),
        spacing=(0.25, 0.25),
        origin=(-3.0, -3.0),
    )
    scene = viz.Scene.load("solo12", terrain=hf)
    assert sum(g.kind == "mesh" for g in scene.geoms) >= 9
    q = np.stack([scene.nominal_q()] * 4)
    q[:, 2] += 0.1
    q[1, 7:] = np.tile([0.0, 0.8, -1.6], 4)
    img = viz.render(scene, q[:, None], width=W, height=H)
    assert img.shape == (1, H, W, 3)
    assert _close(_compare("solo12_batch_hfield", img[0]))


def test_reference_mjcf(tmp_path):
    """An MJCF model: its geoms (capsules, a box, an ellipsoid), colours and ground plane."""
    xml = tmp_path / "m.xml"
    xml.write_text(
        textwrap.dedent("""
        <mujoco>
          <worldbody>
            <geom type="plane" size="5 5 .1"/>
            <body name="torso" pos="0 0 .6">
              <freejoint/>
              <geom type="box" size=".2 .1 .05" rgba=".2 .6 .9 1"/>
              <body name="leg" pos=".2 0 0">
                <joint name="hip" axis="0 1 0"/>
                <geom type="capsule" fromto="0 0 0 0 0 -.4" size=".03" rgba=".9 .3 .2 1"/>
                <geom type="ellipsoid" pos="0 0 -.45" size=".06 .04 .03" rgba=".2 .8 .3 1"/>
              </body>
            </body>
          </worldbody>
        </mujoco>""")
    )
    scene = viz.Scene.load(xml)
    assert sorted(g.kind for g in scene.geoms) == ["box", "capsule", "ellipsoid"]
    q = scene.nominal_q()
    q[7] = 0.6
    img = viz.render(scene, q[None], width=W, height=H, camera=viz.Camera(azimuth=90))
    assert _close(_compare("mjcf_leg", img[0]))


def test_mjcf_heightfield_drawn(tmp_path):
    """An MJCF heightfield (elevation given inline) is drawn as terrain: a mesh whose points are
    where MuJoCo's ray casting finds the heightfield, red pixels where the frame without it shows
    only the sky."""
    import mujoco

    xml = tmp_path / "h.xml"
    xml.write_text(
        textwrap.dedent("""
        <mujoco>
          <asset>
            <hfield name="h" nrow="3" ncol="4" size="1 .8 .3 .05"
                    elevation="0 1 2 3  1 2 3 2  0 0 1 3"/>
          </asset>
          <worldbody>
            <geom type="hfield" hfield="h" pos=".2 -.1 .05" euler="0 0 20" rgba=".9 .1 .1 1"/>
            <body name="ball" pos="5 0 .5"><freejoint/><geom type="sphere" size=".1"/></body>
          </worldbody>
        </mujoco>""")
    )
    scene = viz.Scene.load(xml)
    assert scene.terrain is None  # the heightfield is the ground: no plane added
    (hf,) = [g for g in scene.geoms if g.frame == -1]
    assert hf.kind == "mesh" and hf.vertices.shape == (12, 3) and len(hf.faces) == 12
    pts = hf.vertices @ hf.R.T + hf.p
    m = mujoco.MjModel.from_xml_path(str(xml))
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    for x in pts:  # each grid point lies on the surface MuJoCo collides with
        geom = np.array([-1], np.int32)
        start = x + 1e-7 * (hf.p - x) + [0, 0, 2.0]  # (a hair inside the edge)
        dist = mujoco.mj_ray(m, d, start, np.array([0, 0, -1.0]), None, 1, -1, geom)
        assert geom[0] == 0 and abs(2.0 - dist) < 1e-6, (x, dist)
    assert np.ptp(pts[:, 2]) > 0.29  # the elevation's 0.3 m relief
    cam = viz.Camera(lookat=(0.2, -0.1, 0.0), distance=4.0, elevation=-89.0)
    q = scene.nominal_q()[None]
    img = viz.render(scene, q, width=W, height=H, camera=cam)[0]
    rest = viz.Scene(scene.model, [g for g in scene.geoms if g is not hf], terrain=None)
    sky = viz.render(rest, q, width=W, height=H, camera=cam)[0]
    rgb = lambda a: [a[..., k].astype(int) for k in range(3)]  # noqa: E731
    red = lambda a: (rgb(a)[0] > 90) & (rgb(a)[0] > 2 * rgb(a)[2])  # noqa: E731
    terrain = red(img)
    assert not red(sky).any()
    assert terrain[H // 3 : 2 * H // 3, W // 3 : 2 * W // 3].mean() > 0.5  # (the ball in front)
    assert 0.1 < terrain.mean() < 0.9


def test_follow_camera_tracks_base(quad):
    """A base moving along x stays at the image centre with the follow camera, leaves it with
    a fixed one."""
    scene, r = quad
    q = np.stack([_standing(scene)] * 2)
    q[1, 0] = 0.3
    follow = r.render(q, viz.Camera(azimuth=90, elevation=-10))
    fixed = r.render(q, viz.Camera(follow=None, azimuth=90, elevation=-10))
    c = [_robot_centre(f) for f in (*follow, *fixed)]
    assert np.abs(c[0] - c[1]).max() < 1.0  # pixels
    assert abs(c[3][1] - c[2][1]) > 5  # moved sideways in the fixed camera's image


def test_fixed_camera_frames_the_trajectory():
    """A fixed-base robot's default camera holds its geometry at every step of the trajectory
    (not only its joints): the double pendulum's meshes swinging up, drawn over all frames,
    centred in the image."""
    scene = viz.Scene.load("double_pendulum", terrain=None)
    q = np.stack([np.linspace(0.3, 1.4, 3), np.linspace(-0.2, -0.6, 3)], 1)
    img = viz.render(scene, q, width=W, height=H)
    speck = viz.Geom(-1, "sphere", (0.001,), p=(0.0, 0.0, -50.0))  # out of view: the sky
    sky = viz.render(viz.Scene(scene.model, [speck], terrain=None), q[:1], width=W, height=H)
    drawn = (np.abs(img.astype(int) - sky.astype(int)).max(-1) > 30).any(0)
    rows, cols = np.nonzero(drawn)
    assert len(rows) > 30
    assert rows.min() > 0 and cols.min() > 0 and rows.max() < H - 1 and cols.max() < W - 1
    centre = np.array([(rows.min() + rows.max()) / 2 / H, (cols.min() + cols.max()) / 2 / W])
    assert np.all(np.abs(centre - 0.5) < 0.15), centre


def _orange(img):
    """Pixels of the robot's orange."""
    r, g, b = (img[..., k].astype(int) for k in range(3))
    return (r > 150) & (r - b > 80) & (g > 60) & (g < r - 30)


def _robot_centre(img):
    """Mean pixel (row, column) of the robot's orange."""
    mask = _orange(img)
    assert mask.sum() > 30
    return np.argwhere(mask).mean(0)


def test_render_errors(quad):
    scene, r = quad
    with pytest.raises(ValueError, match=r"expected \(T, nq\)"):
        r.render(np.zeros((2, 5)))
    with pytest.raises(ValueError, match="even"):
        viz.Renderer(scene, 95, 72)
    bare = viz.Scene.from_model(scene.model)
    with pytest.raises(ValueError, match="contacts"):
        viz.render(bare, scene.nominal_q()[None], width=W, height=H, contact_points=True)


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # (imageio runs ffmpeg)
def test_videos(tmp_path):
    import imageio.v2 as imageio
    from PIL import Image

    frames = np.zeros((5, 48, 64, 3), np.uint8)
    frames[:, :, :, 0] = np.arange(5)[:, None, None] * 50
    mp4 = viz.save_video(frames, tmp_path / "a.mp4", fps=10)
    got = np.stack(imageio.mimread(mp4))
    assert got.shape == frames.shape
    assert np.abs(got[..., 0].astype(int) - frames[..., 0]).max() < 12
    with Image.open(viz.save_video(frames, tmp_path / "a.gif", fps=10)) as gif:
        assert gif.n_frames == 5 and gif.size == (64, 48)
    with pytest.raises(ValueError, match="unknown video type"):
        viz.save_video(frames, tmp_path / "a.avi")
    with pytest.raises(ValueError, match="uint8"):
        viz.save_video(frames.astype(float), tmp_path / "a.mp4")


# ------------------------------------------------------------------------ URDF geometry
def _stl_binary(path, tris):
    tris = np.asarray(tris, np.float32)
    rec = np.zeros(len(tris), [("n", "<f4", 3), ("v", "<f4", (3, 3)), ("a", "<u2")])
    rec["v"] = tris
    path.write_bytes(b"\0" * 80 + np.uint32(len(tris)).tobytes() + rec.tobytes())


def test_urdf_visuals_and_meshes(tmp_path):
    tri = [[[0, 0, 0], [1, 0, 0], [0, 1, 0]], [[0, 0, 0], [0, 1, 0], [0, 0, 1]]]
    pkg = tmp_path / "mypkg"
    (pkg / "meshes").mkdir(parents=True)
    (pkg / "urdf").mkdir()
    _stl_binary(pkg / "meshes" / "a.stl", tri)
    (pkg / "meshes" / "b.obj").write_text("v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nf 1 2 3 4\n")
    (pkg / "meshes" / "c.stl").write_text(
        "solid x\nfacet normal 0 0 1\nouter loop\nvertex 0 0 0\nvertex 1 0 0\nvertex 0 1 0\n"
        "endloop\nendfacet\nendsolid x\n"
    )
    (tmp_path / "secret.stl").write_bytes(b"")
    urdf = pkg / "urdf" / "r.urdf"
    inertial = '<inertial><mass value="1"/><inertia ixx=".1" iyy=".1" izz=".1" ixy="0" ixz="0" iyz="0"/></inertial>'  # noqa: E501
    urdf.write_text(f"""<robot name="r">
      <material name="blue"><color rgba="0 0 1 1"/></material>
      <link name="base">{inertial}
        <visual><geometry><box size="0.2 0.4 0.6"/></geometry><material name="blue"/></visual>
        <visual><origin xyz="0 0 1"/><geometry><mesh filename="package://mypkg/meshes/a.stl"
          scale="2 2 2"/></geometry></visual>
        <visual><geometry><mesh filename="../meshes/b.obj"/></geometry></visual>
        <visual><geometry><mesh filename="package://mypkg/meshes/c.stl"/></geometry></visual>
        <visual><geometry><mesh filename="../../secret.stl"/></geometry></visual>
        <visual><geometry><mesh filename="package://mypkg/../secret.stl"/></geometry></visual>
      </link>
      <link name="arm">{inertial}
        <collision><geometry><cylinder radius="0.1" length="0.5"/></geometry></collision>
      </link>
      <joint name="j" type="revolute"><parent link="base"/><child link="arm"/>
        <axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
    </robot>""")
    # relative paths stay in the URDF's directory, package:// paths in their package
    with pytest.warns(UserWarning, match=r"3 mesh\(es\).*b.obj.*secret.stl.*secret.stl"):
        scene = viz.Scene.load(urdf)
    kinds = [g.kind for g in scene.geoms]
    assert kinds == ["box", "mesh", "mesh", "cylinder"]
    box, a, c, cyl = scene.geoms
    assert box.size == (0.1, 0.2, 0.3) and box.rgba == (0, 0, 1, 1)
    assert np.allclose(a.vertices, 2 * np.reshape(tri, (-1, 3))) and a.p[2] == 1
    assert c.vertices.shape == (3, 3)
    assert cyl.size == (0.1, 0.25)
    assert model_frame(scene, cyl) == "arm"
    # reading outside is an opt-in (then only the empty secret.stl fails to parse)
    with pytest.warns(UserWarning, match=r"2 mesh\(es\).*secret.stl: not a binary or ASCII"):
        scene = viz.Scene.load(urdf, allow_outside=True)
    b = scene.geoms[2]
    assert b.faces.tolist() == [[0, 1, 2], [0, 2, 3]]


def test_urdf_collada_visuals():
    """ur5's COLLADA (.dae) visual meshes (trimesh + pycollada) are drawn, not its collision
    shapes: each is the .dae file's mesh, finer than the STL collision mesh of the same link and
    within 5 mm of its bounding box."""
    import warnings
    import xml.etree.ElementTree as ET

    from jaxdyn.viz.scene import read_mesh, resolve_mesh

    path, _ = robots.resolve("ur5")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no mesh left unread
        scene = viz.Scene.load("ur5")
    by_link = {g.name.split("/")[0]: g for g in scene.geoms}
    urdf_dir = Path(path).resolve().parent
    checked = 0
    for link in ET.parse(path).getroot().findall("link"):
        vis = link.find("visual/geometry/mesh")
        col = link.find("collision/geometry/mesh")
        if vis is None or not vis.get("filename").endswith(".dae"):
            continue
        g = by_link[link.get("name")]
        assert g.kind == "mesh" and g.name.endswith("/visual0"), g.name
        v_dae, _ = read_mesh(resolve_mesh(vis.get("filename"), urdf_dir))
        assert np.array_equal(g.vertices, v_dae)
        v_stl, _ = read_mesh(resolve_mesh(col.get("filename"), urdf_dir))
        assert len(g.vertices) > len(v_stl) > 8  # finer than the collision mesh and a box
        assert np.abs(g.vertices.min(0) - v_stl.min(0)).max() < 5e-3
        assert np.abs(g.vertices.max(0) - v_stl.max(0)).max() < 5e-3
        checked += 1
    assert checked == 7
    cam = viz.Camera(lookat=(0.0, 0.0, 0.4), distance=2.0)
    q = scene.nominal_q()[None]
    img = viz.render(scene, q, width=W, height=H, camera=cam)[0]
    speck = viz.Geom(-1, "sphere", (0.01,), p=(0.0, 0.0, -5.0))  # out of view
    empty = viz.render(viz.Scene(scene.model, [speck]), q, width=W, height=H, camera=cam)[0]
    assert _difference(img, empty)[1] > 0.02  # the arm covers part of the frame


def test_unreadable_meshes_are_named(tmp_path, monkeypatch):
    """A visual mesh that cannot be read falls back to the link's collision shape, and the
    warning names the file: a format nothing reads, a malformed .dae, a .dae without
    pycollada."""
    (tmp_path / "a.3ds").write_text("junk")
    (tmp_path / "b.dae").write_text("junk")
    inertial = '<inertial><mass value="1"/><inertia ixx=".1" iyy=".1" izz=".1" ixy="0" ixz="0" iyz="0"/></inertial>'  # noqa: E501
    links = "".join(
        f"""<link name="{n}">{inertial}
          <visual><geometry><mesh filename="{n}"/></geometry></visual>
          <collision><geometry><sphere radius="0.1"/></geometry></collision></link>"""
        for n in ("a.3ds", "b.dae")
    )
    urdf = tmp_path / "r.urdf"
    urdf.write_text(f"""<robot name="r">{links}
      <joint name="j" type="revolute"><parent link="a.3ds"/><child link="b.dae"/>
        <axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
    </robot>""")
    with pytest.warns(UserWarning) as rec:
        scene = viz.Scene.load(urdf)
    msg = str(rec[0].message)
    assert "2 mesh(es) of r.urdf" in msg
    assert f"{tmp_path / 'a.3ds'}: unsupported mesh format '.3ds'" in msg
    assert f"{tmp_path / 'b.dae'}: not a readable .dae mesh" in msg
    assert msg.count("(collision shapes drawn instead)") == 2
    assert [g.kind for g in scene.geoms] == ["sphere", "sphere"]
    monkeypatch.setitem(sys.modules, "collada", None)  # pycollada not installed
    with pytest.warns(UserWarning, match=r"b\.dae: COLLADA \(\.dae\) meshes need pycollada"):
        viz.Scene.load(urdf)


def model_frame(scene, g):
    return scene.model.frame_names[g.frame]


def test_import_jaxdyn_stays_light():
    """``import jaxdyn`` imports neither jaxdyn.viz nor MuJoCo, ``import jaxdyn.viz`` not
    MuJoCo. And when another library imported MuJoCo first (Brax does), before jaxdyn.viz
    could choose a headless back-end, rendering without a display still gets an EGL context
    (MuJoCo's default there is GLFW, which fails)."""
    code = (
        "import sys, jaxdyn; assert 'jaxdyn.viz' not in sys.modules, 'viz'; "
        "assert 'mujoco' not in sys.modules, 'mujoco'; import jaxdyn.viz; "
        "assert 'mujoco' not in sys.modules, 'viz imports mujoco'; "
        "import mujoco, mujoco.rendering.classic.renderer; from jaxdyn import viz; "
        "f = viz.render('arm7', [[0.0] * 7], width=64, height=48); assert f.std() > 5"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=Path(__file__).parent.parent)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]


def test_frame_poses_match_forward_kinematics(quad):
    scene, _ = quad
    q = _standing(scene)
    R, p = viz.frame_poses(scene.model, q[None])
    fk = jax.jit(lambda q: __import__("jaxdyn").forward_kinematics(scene.model, q))(q)
    np.testing.assert_allclose(p[0], np.asarray(fk.frame.p), atol=1e-12)
    with pytest.raises(ValueError, match="expected"):
        viz.frame_poses(scene.model, np.zeros((3, 4)))


# ------------------------------------------------------------------------ HTML in Chromium
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--enable-logging=stderr", "--v=0",
)  # fmt: skip


def _chromium():
    import shutil

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        msg = "chromium not installed (Debian: apt-get install -y chromium; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return exe


def _browse(url, tmp_path, size=(480, 360)):
    """Headless Chromium on ``url``: ``(screenshot, DOM after the scripts ran, console
    lines)``."""
    from PIL import Image

    n = len(list(tmp_path.glob("profile*")))
    shot = tmp_path / f"shot{n}.png"
    args = [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / f'profile{n}'}",
            f"--window-size={size[0]},{size[1]}", "--virtual-time-budget=3000",
            f"--screenshot={shot}", "--dump-dom"]  # fmt: skip
    r = subprocess.run(args + [url], capture_output=True, text=True, timeout=120)
    console = [
        line for line in r.stderr.splitlines()
        if ":CONSOLE" in line and "GL Driver Message" not in line  # (WebGL performance notes)
    ]  # fmt: skip
    assert shot.exists(), r.stderr[-2000:]
    return np.asarray(Image.open(shot).convert("RGB")), r.stdout, console


def _project(point, cam, size):
    """Pixel (column, row) of a world point through the page's camera (viewer.js)."""
    az, el = np.radians(cam["azimuth"]), np.radians(cam["elevation"])
    fwd = np.array([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)])
    target = np.asarray(cam["target"], float)
    eye = target - cam["distance"] * fwd
    s = np.cross(fwd, [0, 0, 1.0])
    s /= np.linalg.norm(s)
    u = np.cross(s, fwd)
    d = np.asarray(point) - eye
    f = 1 / np.tan(np.radians(cam["fov"]) / 2)
    x, y = f / (size[0] / size[1]) * (d @ s) / (d @ fwd), f * (d @ u) / (d @ fwd)
    return (x + 1) / 2 * size[0], (1 - y) / 2 * size[1]


def test_html_export_in_chromium(quad, tmp_path):
    """The exported page loads in headless Chromium without console errors, its status says
    ready, and a screenshot of a known pose has robot pixels where the robot stands (the
    projection of its hips through the page's camera), none far from it."""
    scene, _ = quad
    q = _standing(scene)
    q[0] = 0.5  # the robot stands right of the camera's target
    cam = {"target": [0, 0, 0.2], "azimuth": 90.0, "elevation": -15.0, "distance": 2.0,
           "fov": 45.0, "follow": False}  # fmt: skip
    qs = np.stack([q, q])
    qs[1, 0] = -0.5
    page = tmp_path / "quad.html"
    viz.export_html(scene, qs, page, dt=0.1, camera=cam)
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # nothing fetched: opens offline
    img, dom, console = _browse(page.as_uri(), tmp_path)
    assert console == [], console
    assert 'data-state="ready"' in dom, dom[-1500:]
    hips = [
        scene.model.frame_index(n) for n in scene.model.frame_names if n.endswith(("_KFE", "_HFE"))
    ]
    R, p = viz.frame_poses(scene.model, q[None])
    r, g, b = (img[..., k].astype(int) for k in range(3))
    orange = (r > 150) & (r - b > 80) & (g < r - 30)
    size = (img.shape[1], img.shape[0])
    for h in hips:
        col, row = _project(p[0, h], cam, size)
        win = orange[int(row) - 6 : int(row) + 7, int(col) - 6 : int(col) + 7]
        assert win.any(), (scene.model.frame_names[h], col, row)
    col0, _ = _project([-0.5, 0, 0.2], cam, size)  # where the robot is at step 1, not step 0
    assert not orange[:, : int(col0) + 20].any()


def _red(img):
    """Pixels of the contact markers' red (neither the robot's orange nor the floor)."""
    r, g, b = (img[..., k].astype(int) for k in range(3))
    return (r > 110) & (g < 60) & (b < 60) & (r > 2.5 * g)


def test_html_contacts_and_forces_in_chromium(quad, tmp_path):
    """Contact forces drawn as red arrows in the exported page: red pixels along each foot's
    arrow (its contact point to the point plus the scaled force, projected through the page's
    camera), none at a step whose forces are zero (opened with ``#t=1``: the time slider's
    step); ``contact_points=True`` marks the touching feet with red balls instead."""
    scene, _ = quad
    q = _standing(scene)
    cam = {"target": [0, 0, 0.15], "azimuth": 90.0, "elevation": -5.0, "distance": 1.6,
           "fov": 45.0, "follow": False}  # fmt: skip
    qs = np.stack([q, q])
    f = np.zeros((2, 4, 3))
    f[0, :, 2] = 20.0  # 20 N up at each foot at step 0, nothing at step 1
    scale = 0.006  # m/N: 12 cm arrows
    viz.export_html(scene, qs, tmp_path / "f.html", camera=cam, forces=f, force_scale=scale)
    viz.export_html(scene, qs, tmp_path / "c.html", camera=cam, contact_points=True)
    shots = {}
    for name, url in [("forces", "f.html"), ("none", "f.html#t=1"), ("balls", "c.html")]:
        img, dom, console = _browse((tmp_path / url.split("#")[0]).as_uri() + url[6:], tmp_path)
        assert console == [] and 'data-state="ready"' in dom, (name, console, dom[-800:])
        shots[name] = img
        if os.environ.get("JAXDYN_VIZ_SHOTS"):  # to look at them
            from PIL import Image

            Image.fromarray(img).save(Path(os.environ["JAXDYN_VIZ_SHOTS"]) / f"{name}.png")
    size = (shots["forces"].shape[1], shots["forces"].shape[0])
    R, p = viz.frame_poses(scene.model, q[None])
    marks = viz.scene.contact_marks(scene, R[None], p[None])
    touching = marks["touching"][0, 0]
    assert touching.sum() >= 2  # (the lowest feet; the others a few mm up)
    red = _red(shots["forces"])
    for x in marks["point"][0, 0]:
        for s in (0.3, 0.6, 0.9):  # along the arrow
            col, row = _project(x + s * scale * np.array([0, 0, 20.0]), cam, size)
            assert red[int(row) - 3 : int(row) + 4, int(col) - 3 : int(col) + 4].any(), (x, s)
    assert not _red(shots["none"]).any()
    balls = _red(shots["balls"])
    for x in marks["point"][0, 0, touching]:
        col, row = _project(x, cam, size)
        assert balls[int(row) - 4 : int(row) + 5, int(col) - 4 : int(col) + 5].any(), x
    assert balls.sum() < red.sum()  # balls, not arrows
    # save_rollout's page (jaxdyn render -o x.html --forces) and the served one carry them too
    viz.save_rollout(scene, qs, tmp_path / "s.html", dt=0.1, forces=f)
    assert '"marks":{"n":4,' in (tmp_path / "s.html").read_text()
    srv = viz.serve(scene, qs, block=False, contact_points=True)
    try:
        import urllib.request

        page = urllib.request.urlopen(srv.url, timeout=30).read().decode()
        assert '"marks":{"n":4,' in page and '"vectors":null' in page
    finally:
        srv.shutdown()
    with pytest.raises(ValueError, match=r"export_html: forces has shape \(2, 3, 3\)"):
        viz.export_html(scene, qs, forces=np.zeros((2, 3, 3)))
    bare = viz.Scene.from_model(scene.model)
    with pytest.raises(ValueError, match="export_html: contact points or forces need"):
        viz.export_html(bare, qs, contact_points=True)


# ------------------------------------------------------------------------ command line
def _cli(capsys, *argv):
    from jaxdyn import cli

    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_render(tmp_path, capsys):
    from PIL import Image

    m = robots.load("arm7")
    q = np.zeros((4, m.nq))
    q[:, 1] = np.linspace(0, 1.2, 4)
    np.savez(tmp_path / "t.npz", q=q, dt=0.5)
    for out in ("a.gif", "a.html"):  # (.mp4: test_videos)
        rc, o, err = _cli(capsys, "render", "arm7", tmp_path / "t.npz", "-o", tmp_path / out,
                          "--width", 64, "--height", 48, "--fps", 2)  # fmt: skip
        assert rc == 0, err
        assert (tmp_path / out).stat().st_size > 0
        if out.endswith(".gif"):
            assert "rendering frames 4/4" in err  # progress
    with Image.open(tmp_path / "a.gif") as gif:
        assert gif.n_frames == 4 and gif.size == (64, 48)
    np.savez(tmp_path / "batch.npz", q=np.stack([q, -q]), dt=0.5)  # two robots side by side
    rc, o, err = _cli(capsys, "render", "arm7", tmp_path / "batch.npz", "-o",
                      tmp_path / "b.png", "--width", 64, "--height", 48)  # fmt: skip
    assert rc == 0, err
    rc, o, err = _cli(capsys, "render", "arm7", tmp_path / "t.npz", "-o", tmp_path / "c.png",
                      "--forces")  # fmt: skip
    assert rc == 2 and "no array 'forces'" in err
    # --contacts on a model without a contact set: the contact boxes of `jaxdyn sim`
    rc, o, err = _cli(capsys, "render", "arm7", tmp_path / "t.npz", "-o", tmp_path / "c.png",
                      "--contacts", "--width", 64, "--height", 48)  # fmt: skip
    assert rc == 0 and (tmp_path / "c.png").exists(), err
    assert 'id="jaxdyn-data"' in (tmp_path / "a.html").read_text()
    # user errors: one line, status 2
    np.savez(tmp_path / "bad.npz", q=np.zeros((3, 5)))
    np.savez(tmp_path / "none.npz", x=np.zeros(3))
    for args, msg in [
        (("arm7", tmp_path / "bad.npz", "-o", tmp_path / "b.mp4"), r"expected \(T, nq\)"),
        (("arm7", tmp_path / "none.npz", "-o", tmp_path / "b.mp4"), "no array 'q'"),
        (("arm7", tmp_path / "t.npz", "-o", tmp_path / "b.avi"), "unknown output type"),
        (("nosuchrobot", tmp_path / "t.npz", "-o", tmp_path / "b.mp4"), "nosuchrobot"),
    ]:
        rc, o, err = _cli(capsys, "render", *args)
        assert rc == 2 and re_search(msg, err) and err.count("\n") == 1, err


def re_search(pattern, text):
    import re

    return re.search(pattern, text) is not None


def test_cli_sim(tmp_path, capsys):
    """``jaxdyn sim``: arm7 released limp under gravity, filmed and saved; the saved trajectory
    is a rollout (the shoulder falls) and renders again with ``jaxdyn render``."""
    rc, out, err = _cli(capsys, "sim", "arm7", "--seconds", 0.1, "--dt", 0.01, "--limp",
                        "-o", tmp_path / "fall.gif", "--width", 64, "--height", 48,
                        "--save", tmp_path / "fall.npz", "--fps", 20, "--no-forces")  # fmt: skip
    assert rc == 0, err
    assert "simulating arm7" in err and "wrote" in out
    assert "simulating steps 10/10" in err and "rendering frames 3/3" in err  # progress
    z = np.load(tmp_path / "fall.npz")
    assert z["q"].shape == (10, 7) and float(z["dt"]) == 0.01
    assert np.abs(z["q"][-1]).max() > 1e-3  # it moved
    from PIL import Image

    with Image.open(tmp_path / "fall.gif") as gif:
        assert gif.n_frames == 3  # steps 0, 5 and the last
    rc, out, err = _cli(capsys, "sim", "arm7", "--seconds", 0, "-o", tmp_path / "x.mp4")
    assert rc == 2 and "--seconds" in err


def test_cli_view(tmp_path):
    """``jaxdyn view`` serves the page (one slider per joint, ready in Chromium) and computes
    placements on ``POST /fk`` with jaxdyn's forward kinematics."""
    import json
    import urllib.request

    root = Path(__file__).parent.parent
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxdyn", "view", "arm7", "--port", "0"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, (line, proc.stderr.read() if proc.poll() else "")
        url = line.split()[2]
        page = urllib.request.urlopen(url, timeout=30).read().decode()
        assert '"live":{' in page
        m = robots.load("arm7")
        q = np.linspace(-1, 1, m.nq)
        req = urllib.request.Request(
            url + "fk", json.dumps({"q": q.tolist()}).encode(), {"Content-Type": "application/json"}
        )
        poses = json.loads(urllib.request.urlopen(req, timeout=30).read())["poses"]
        got = np.frombuffer(__import__("base64").b64decode(poses), "<f4").reshape(-1, 12)
        scene = viz.Scene.load("arm7")
        bodies = sorted({g.frame for g in scene.geoms if g.frame >= 0})
        R, p = viz.frame_poses(m, q[None])
        np.testing.assert_allclose(got[:, 9:], p[0, bodies], atol=1e-5)
        bad = urllib.request.Request(url + "fk", b'{"q": [1, 2]}')
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(bad, timeout=30)
        assert e.value.code == 400 and "7 finite numbers" in e.value.read().decode()
        img, dom, console = _browse(url, tmp_path)
        assert console == [] and 'data-state="ready"' in dom, (console, dom[-800:])
        assert dom.count("data-joint=") == m.nq
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_view_batch_and_time_slider(tmp_path):
    """The served viewer of a batch trajectory (two arm7s, three steps): one slider per joint,
    a time slider over the three steps, both robots drawn side by side; opened at ``#t=2`` (the
    time slider's step) each robot's hand stands where step 2 puts it, not where step 0 does,
    and the joint sliders show the first robot's configuration at step 2."""
    scene = viz.Scene.load("arm7")
    qs = np.zeros((2, 3, scene.model.nq))
    qs[0, 2, [1, 3]] = 1.0, -1.2
    qs[1, 2, [0, 1, 3]] = 0.8, 0.6, -0.6
    cam = {"target": [0.0, 0, 0.5], "azimuth": 90.0, "elevation": -10.0, "distance": 3.4,
           "fov": 45.0, "follow": False}  # fmt: skip
    size = (960, 420)  # (the sliders' panel on the right)
    srv = viz.serve(scene, qs, dt=0.1, block=False, camera=cam)
    try:
        img, dom, console = _browse(srv.url + "#t=2", tmp_path, size=size)
    finally:
        srv.shutdown()
    assert console == [] and 'data-state="ready"' in dom, (console, dom[-800:])
    assert dom.count("data-joint=") == scene.model.nq
    assert re_search(r'id="time"[^>]*max="2"', dom) or re_search(r'max="2"[^>]*id="time"', dom)
    assert "arm7: 2 x 3 steps" in dom
    # the joint sliders show the first robot at the shown step (joint2 = 1 at step 2)
    assert "joint2<span> 1.000</span>" in dom and "joint4<span> -1.200</span>" in dom, dom
    offsets = viz.html.scene_data(scene, qs, 0.1, camera=cam)["offsets"]
    R, p = viz.frame_poses(scene.model, qs.reshape(6, -1))
    hand = scene.model.frame_index("hand")
    orange = _orange(img)
    for b in range(2):
        at = lambda t: _project(p[3 * b + t, hand] + offsets[b], cam, size)  # noqa: B023
        col, row = at(2)
        assert orange[int(row) - 5 : int(row) + 6, int(col) - 5 : int(col) + 6].any(), (b, col)
        col, row = at(0)
        assert not orange[int(row) - 2 : int(row) + 3, int(col) - 2 : int(col) + 3].any(), b


@pytest.mark.slow  # (compiling the environment's step: a minute on 2 busy cores)
def test_env_rollout_and_save_rollout(tmp_path):
    """A policy driving an environment, filmed: the configurations are the environment's
    (the first is reset's), the scene carries its contact spheres, and the video is written."""
    from jaxdyn import envs

    env = envs.Quadruped(n_frames=1)
    qs, s0 = viz.env_rollout(env, lambda obs, key: jax.numpy.zeros(env.action_size), 3)
    assert qs.shape == (4, env.model.nq)
    np.testing.assert_allclose(qs[0], np.asarray(s0.pipeline_state.q))
    scene = viz.Scene.from_env(env)
    assert sum(g.name.startswith("contact/") for g in scene.geoms) == 4
    out = viz.save_rollout(scene, qs, tmp_path / "q.gif", dt=env.dt, fps=1 / env.dt,
                           width=64, height=48)  # fmt: skip
    from PIL import Image

    with Image.open(out) as gif:
        assert gif.n_frames == 4
    with pytest.raises(ValueError, match="unknown output type"):
        viz.save_rollout(scene, qs, tmp_path / "q.avi", dt=env.dt)


def test_view_sliders_pose_the_robot(tmp_path):
    """The served page at ``#q=...`` (the sliders' path: POST /fk, jaxdyn's kinematics) shows
    what the exported page shows for that configuration, and not the nominal pose."""
    scene = viz.Scene.load("arm7")
    cam = {
        "target": [0.5, 0, 0.4],
        "azimuth": 90.0,
        "elevation": -10.0,
        "distance": 2.5,
        "follow": False,
    }  # the arm left of the centre, clear of the sliders; fmt: skip
    q = np.zeros(scene.model.nq)
    q[1], q[3] = 1.0, -1.2
    srv = viz.serve(scene, block=False, camera=cam)
    try:
        moved, dom, console = _browse(srv.url + "#q=" + ",".join(map(str, q)), tmp_path)
        assert console == [] and 'data-state="ready"' in dom, (console, dom[-800:])
        assert 'data-joint="' in dom
        nominal, _, _ = _browse(srv.url, tmp_path)
    finally:
        srv.shutdown()
    page = tmp_path / "arm.html"
    viz.export_html(scene, q[None], page, camera=cam)
    exported, _, console = _browse(page.as_uri(), tmp_path)
    # the side panel of sliders covers the same part of both served pages; compare the rest
    left = slice(0, int(0.45 * moved.shape[1]))
    assert _close(_difference(moved[:, left], exported[:, left]))
    m, e, n = (_orange(x[:, left]) for x in (moved, exported, nominal))
    iou = lambda a, b: (a & b).sum() / max((a | b).sum(), 1)
    assert m.sum() > 40 and iou(m, e) > 0.8 and iou(m, n) < 0.3, (iou(m, e), iou(m, n))


@pytest.mark.slow  # (compiles the cluster model's configuration maps)
def test_urdf_plus_cluster_scene():
    """A URDF+ model (a four-bar loop): drawn through its spanning tree, trajectories given as
    cluster positions and mapped by spanning_configuration."""
    from jaxdyn import clusters
    from jaxdyn.clusters import robots as cr

    scene = viz.Scene.load(cr.path("four_bar"), terrain=None)
    c = scene.cluster
    assert c is not None and scene.model is c.tree and len(scene.geoms) == 3
    q = np.stack([np.asarray(clusters.neutral_configuration(c)),
                  np.asarray(clusters.random_configuration(c, jax.random.PRNGKey(1)))])  # fmt: skip
    tq = scene.tree_q(q)
    np.testing.assert_allclose(tq[1], np.asarray(clusters.spanning_configuration(c, q[1])))
    img = viz.render(scene, q, width=W, height=H, camera=viz.Camera(azimuth=90, elevation=-89))
    moved = np.abs(img[0].astype(int) - img[1].astype(int)).max(-1) > 48
    assert moved.sum() > 20  # the links moved (thin links: a few dozen pixels at 96 x 72)
    with pytest.raises(ValueError, match="cluster position"):
        scene.tree_q(np.zeros((2, c.nq + 1)))

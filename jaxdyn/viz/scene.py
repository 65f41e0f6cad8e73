"""What to draw: a model's visual geometry on its frames, the terrain and the contact spheres.

A :class:`Scene` holds a :class:`jaxdyn.Model`, a list of :class:`Geom` (each fixed to one of the
model's frames, or to the world) and optionally the terrain and the contact set of a simulation.
Both renderers (:mod:`jaxdyn.viz.renderer`, MuJoCo's OpenGL renderer, and :mod:`jaxdyn.viz.html`,
the browser viewer) draw the same scene, posed by :func:`frame_poses` (jaxdyn's
:func:`~jaxdyn.forward_kinematics`, so what is drawn is what jaxdyn computes).

Where the geometry comes from (:meth:`Scene.load`):

* URDF: each link's ``<visual>`` elements (``<collision>`` where a link has no visual): box,
  cylinder, sphere and mesh (STL and OBJ read here; COLLADA ``.dae`` and other formats through
  ``trimesh`` and ``pycollada``, the ``viz`` extra; a mesh that cannot be read is skipped, the
  link drawn with its collision shapes, and one warning names the files). ``package://``
  names are looked up as a directory of that name among the URDF's ancestors or
  ``package_dirs``; a mesh path that leaves its package (or, for a relative path, the URDF's
  directory) is refused unless ``allow_outside=True``;
* MJCF (``.xml``, :func:`jaxdyn.load_mjcf`): the compiled model's geoms (primitives, meshes and
  heightfields, the latter as meshes of their surface) and its ground plane (no plane is added
  to a model with a heightfield and none);
* a bare :class:`jaxdyn.Model` (or a URDF without visuals, such as the bundled ``arm7`` and
  ``quad12``): a stick figure, capsules from each body's joint to its children's joints and a
  sphere at each joint, plus the contact spheres when a contact set is given.
"""

from __future__ import annotations

import os
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..model.urdf import parse_numbers

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jax.typing import ArrayLike

    from ..clusters.model import ClusterModel
    from ..model.model import Model
    from ..sim.geometry import ContactSet

__all__ = ["Geom", "Scene", "frame_poses", "read_mesh"]

KINDS = ("box", "sphere", "cylinder", "capsule", "ellipsoid", "mesh")
ROBOT_RGBA = (0.93, 0.55, 0.18, 1.0)
CONTACT_RGBA = (0.15, 0.45, 0.95, 1.0)


@dataclass
class Geom:
    """One visual shape fixed to a frame.

    - ``frame``: index into ``model.frame_names`` (``-1``: the world);
    - ``kind``: one of ``box``, ``sphere``, ``cylinder``, ``capsule``, ``ellipsoid``, ``mesh``;
    - ``size``: MuJoCo's convention: box and ellipsoid half extents ``(3,)``, sphere ``(r,)``,
      cylinder and capsule ``(r, half_length)`` along the local z axis, mesh ``(1,)`` unused;
    - ``R (3, 3)``, ``p (3,)``: placement in the frame; ``rgba (4,)``;
    - ``vertices (n, 3)``, ``faces (m, 3)``: the triangle mesh (``kind == "mesh"``; already
      scaled);
    - ``name``: for messages.
    """

    frame: int
    kind: str
    size: tuple
    R: np.ndarray = field(default_factory=lambda: np.eye(3))
    p: np.ndarray = field(default_factory=lambda: np.zeros(3))
    rgba: tuple = ROBOT_RGBA
    vertices: np.ndarray | None = None
    faces: np.ndarray | None = None
    name: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Geom {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        self.R = np.asarray(self.R, float).reshape(3, 3)
        self.p = np.asarray(self.p, float).reshape(3)
        self.rgba = tuple(float(c) for c in self.rgba)
        self.size = tuple(float(s) for s in np.atleast_1d(self.size))
        if self.kind == "mesh":
            if self.vertices is None or self.faces is None or len(self.faces) == 0:
                raise ValueError(f"Geom {self.name!r}: a mesh needs vertices and faces")
            self.vertices = np.asarray(self.vertices, np.float64).reshape(-1, 3)
            self.faces = np.asarray(self.faces, np.int64).reshape(-1, 3)


# ----------------------------------------------------------------------------- meshes
def _read_stl(path: Path):
    data = path.read_bytes()
    if len(data) >= 84:
        n = int(np.frombuffer(data[80:84], "<u4")[0])
        if 84 + 50 * n == len(data):  # binary STL
            rec = np.dtype([("n", "<f4", 3), ("v", "<f4", (3, 3)), ("a", "<u2")])
            tri = np.frombuffer(data, rec, count=n, offset=84)["v"].astype(np.float64)
            return tri.reshape(-1, 3), np.arange(3 * n).reshape(n, 3)
    text = data.decode("ascii", errors="replace")
    verts = [
        [float(x) for x in line.split()[1:4]]
        for line in text.splitlines()
        if line.strip().startswith("vertex")
    ]
    if not verts or len(verts) % 3:
        raise ValueError(f"{path}: not a binary or ASCII STL file")
    v = np.asarray(verts, np.float64)
    return v, np.arange(len(v)).reshape(-1, 3)


def _read_obj(path: Path):
    verts, faces = [], []
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "v":
            verts.append([float(x) for x in parts[1:4]])
        elif parts[0] == "f":
            idx = [int(p.split("/")[0]) for p in parts[1:]]
            idx = [i - 1 if i > 0 else len(verts) + i for i in idx]
            faces.extend([idx[0], idx[k], idx[k + 1]] for k in range(1, len(idx) - 1))
    if not verts or not faces:
        raise ValueError(f"{path}: no vertices or faces in the OBJ file")
    return np.asarray(verts, np.float64), np.asarray(faces, np.int64)


def read_mesh(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """``(vertices (n, 3), faces (m, 3))`` of a triangle mesh file: STL (binary or ASCII) and
    OBJ here, COLLADA ``.dae`` (through ``pycollada``) and the other formats ``trimesh`` reads
    through ``trimesh`` (the ``viz`` extra). A COLLADA file's node transforms and ``<unit>``
    (metres) are applied, its ``<up_axis>`` is not (as in URDF tools).
    ``ImportError`` naming the file when ``trimesh`` (or, for ``.dae``, ``pycollada``) is not
    installed, ``ValueError`` naming the file for a format nothing here reads or a file that is
    not what its suffix says."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".stl":
        return _read_stl(path)
    if suffix == ".obj":
        return _read_obj(path)
    try:
        import trimesh
    except ImportError:
        raise ImportError(
            f"{path}: {suffix or 'suffix-less'} meshes need trimesh "
            "(pip install 'jaxdyn[viz]', or trimesh pycollada)"
        ) from None
    if suffix == ".dae":
        try:
            import collada  # noqa: F401  (trimesh's COLLADA reader)
        except ImportError:
            raise ImportError(
                f"{path}: COLLADA (.dae) meshes need pycollada (pip install 'jaxdyn[viz]')"
            ) from None
    if suffix[1:] not in trimesh.available_formats():
        raise ValueError(
            f"{path}: unsupported mesh format {suffix or '(no suffix)'!r} "
            "(STL, OBJ, COLLADA .dae, PLY, GLB/GLTF, OFF are read)"
        )
    try:
        # force="mesh": a Trimesh (load's annotation lists every kind it can return)
        m = cast("trimesh.Trimesh", trimesh.load(str(path), force="mesh"))
    except Exception as e:  # trimesh and pycollada raise many kinds
        raise ValueError(f"{path}: not a readable {suffix} mesh: {e}") from None
    if suffix == ".dae" and m.units not in (None, "meters"):  # COLLADA <unit meter=...>
        m.convert_units("meters")
    v, f = np.asarray(m.vertices, np.float64), np.asarray(m.faces, np.int64)
    if len(v) == 0 or len(f) == 0:
        raise ValueError(f"{path}: no triangles in the {suffix} mesh")
    return v, f


def _within(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def resolve_mesh(
    filename: str,
    urdf_dir: Path,
    package_dirs: Sequence[str | os.PathLike] = (),
    allow_outside: bool = False,
) -> Path:
    """The file a URDF's ``<mesh filename>`` names (see the module docstring); ``ValueError``
    if it cannot be found or leaves its package / the URDF's directory."""
    if filename.startswith("package://"):
        pkg, _, rest = filename[len("package://") :].partition("/")
        roots = [Path(d) for d in package_dirs]
        roots += [d for d in [urdf_dir, *urdf_dir.parents]]
        for d in roots:
            for base in (d / pkg, d) if d.name != pkg else (d,):
                if base.name == pkg and (base / rest).is_file():
                    cand = base / rest
                    if not allow_outside and not _within(cand, base):
                        raise ValueError(f"mesh {filename!r} leaves package directory {base}")
                    return cand
        raise ValueError(
            f"mesh {filename!r}: package {pkg!r} not found among the URDF's ancestors "
            "(pass package_dirs=)"
        )
    name = filename[len("file://") :] if filename.startswith("file://") else filename
    cand = Path(name) if os.path.isabs(name) else urdf_dir / name
    if not allow_outside and not _within(cand, urdf_dir):
        raise ValueError(
            f"mesh {filename!r} is outside the URDF's directory {urdf_dir} "
            "(allow_outside=True to read it)"
        )
    if not cand.is_file():
        raise ValueError(f"mesh {filename!r}: no file {cand}")
    return cand


# ----------------------------------------------------------------------------- URDF
def _floats(text, n, what):
    """``n`` finite numbers of a URDF attribute (``what`` names it in the error)."""
    return parse_numbers(text or "", n, what)


def _rpy(rpy):
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def _urdf_geom(
    el, k, lname, frame, materials, fname, urdf_dir, package_dirs, allow_outside, errors
):
    """One ``<visual>`` / ``<collision>`` element as a :class:`Geom`; a mesh that cannot be
    read appends its message to ``errors`` and gives ``None``."""
    what = f"link {lname!r} <{el.tag}> {k}"
    o = el.find("origin")
    R, p = np.eye(3), np.zeros(3)
    if o is not None:
        R = _rpy(_floats(o.get("rpy", "0 0 0"), 3, f"{what} <origin rpy>"))
        p = _floats(o.get("xyz", "0 0 0"), 3, f"{what} <origin xyz>")
    rgba = ROBOT_RGBA if el.tag == "visual" else (0.7, 0.7, 0.72, 1.0)
    mat = el.find("material")
    if mat is not None:
        c = mat.find("color")
        if c is not None:
            rgba = tuple(_floats(c.get("rgba"), 4, f"{what} <material><color>"))
        elif mat.get("name") in materials:
            rgba = tuple(materials[mat.get("name")])
    g = el.find("geometry")
    shape = g[0] if g is not None and len(g) else None
    if shape is None:
        raise ValueError(f"URDF {fname}: {what} has no <geometry>")
    common: dict[str, Any] = dict(frame=frame, R=R, p=p, rgba=rgba, name=f"{lname}/{el.tag}{k}")
    if shape.tag == "box":
        s = _floats(shape.get("size"), 3, f"{what} <box size>")
        return Geom(kind="box", size=tuple(s / 2), **common)
    if shape.tag == "sphere":
        r = _floats(shape.get("radius"), 1, f"{what} <sphere radius>")
        return Geom(kind="sphere", size=tuple(r), **common)
    if shape.tag in ("cylinder", "capsule"):
        r = _floats(shape.get("radius"), 1, f"{what} <{shape.tag} radius>")[0]
        h = _floats(shape.get("length"), 1, f"{what} <{shape.tag} length>")[0]
        return Geom(kind=shape.tag, size=(r, h / 2), **common)
    if shape.tag == "mesh":
        fn = shape.get("filename") or ""
        scale = _floats(shape.get("scale", "1 1 1"), 3, f"{what} <mesh scale>")
        try:
            path = resolve_mesh(fn, urdf_dir, package_dirs, allow_outside)
            v, f = read_mesh(path)
        except (ValueError, ImportError, OSError) as e:
            errors.append(str(e))
            return None
        return Geom(kind="mesh", size=(1.0,), vertices=v * scale, faces=f, **common)
    raise ValueError(f"URDF {fname}: {what}: unknown geometry <{shape.tag}>")


def urdf_geoms(
    model,
    source: str | os.PathLike,
    package_dirs: Sequence[str | os.PathLike] = (),
    allow_outside: bool = False,
) -> list:
    """:class:`Geom` of a URDF's ``<visual>`` elements on ``model``'s frames (link names); a
    link's ``<collision>`` elements instead where it has no visual or a visual mesh that cannot
    be read (e.g. COLLADA without pycollada). One warning names every mesh file left unread,
    including those whose link is drawn with its collision shapes instead."""
    source = Path(source)
    root = ET.parse(source).getroot()
    urdf_dir = source.resolve().parent
    materials = {}
    for m in root.findall("material"):
        c = m.find("color")
        if c is not None and m.get("name"):
            materials[m.get("name")] = _floats(c.get("rgba"), 4, f"material {m.get('name')!r}")
    frames = {n: i for i, n in enumerate(model.frame_names)}
    geoms, skipped = [], []
    for link in root.findall("link"):
        lname = link.get("name")
        if lname not in frames:
            continue

        def parse(tag):
            errs, out = [], []
            for k, el in enumerate(link.findall(tag)):
                g = _urdf_geom(el, k, lname, frames[lname], materials, source.name, urdf_dir,
                               package_dirs, allow_outside, errs)  # fmt: skip
                if g is not None:
                    out.append(g)
            return out, errs

        got, errors = parse("visual")
        if errors or not got:  # collision shapes where visual meshes fail (or there are none)
            c_got, c_errors = parse("collision")
            if c_got and not c_errors:
                if errors:
                    errors = [f"{e} (collision shapes drawn instead)" for e in errors]
                got = c_got
            elif not got:
                got, errors = c_got, errors + c_errors
        geoms += got
        skipped += [f"{lname}: {e}" for e in errors]
    if skipped:
        warnings.warn(
            f"jaxdyn.viz: {len(skipped)} mesh(es) of {source.name} not drawn: "
            + "; ".join(skipped),
            stacklevel=3,
        )
    return geoms


# ----------------------------------------------------------------------------- MJCF
def _quat_mat(q):
    w, x, y, z = np.asarray(q, float) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def hfield_mesh(mj_model, k):
    """``(vertices, faces)`` of the top surface of a compiled MuJoCo model's heightfield ``k``
    in its geom's frame: MuJoCo's convention, grid point ``(row, col)`` at
    ``x = (2 col / (ncol - 1) - 1) size[0]``, ``y = (2 row / (nrow - 1) - 1) size[1]``,
    ``z = data[row, col] size[2]`` (``data`` normalised to ``[0, 1]`` by the compiler)."""
    nrow, ncol = int(mj_model.hfield_nrow[k]), int(mj_model.hfield_ncol[k])
    a = int(mj_model.hfield_adr[k])
    data = np.array(mj_model.hfield_data[a : a + nrow * ncol], float).reshape(nrow, ncol)
    sx, sy, sz = (float(x) for x in mj_model.hfield_size[k][:3])
    X, Y = np.meshgrid(np.linspace(-sx, sx, ncol), np.linspace(-sy, sy, nrow))
    v = np.stack([X, Y, data * sz], -1).reshape(-1, 3)
    i = (np.arange(nrow - 1)[:, None] * ncol + np.arange(ncol - 1)).reshape(-1)
    # counter-clockwise seen from +z: (r, c), (r, c+1), (r+1, c+1) and (r, c), (r+1, c+1), (r+1, c)
    f = np.concatenate(
        [np.stack([i, i + 1, i + ncol + 1], 1), np.stack([i, i + ncol + 1, i + ncol], 1)]
    )
    return v, f


def mjcf_geoms(model, mj_model) -> list:
    """:class:`Geom` of a compiled MuJoCo model's geoms on ``model``'s frames (body names):
    heightfields as meshes of their surface (:func:`hfield_mesh`), planes left out (the scene's
    terrain draws the ground)."""
    import mujoco

    from ..io.mjcf import mujoco_names

    bodies = mujoco_names(mj_model, "body")
    frames = {n: i for i, n in enumerate(model.frame_names)}
    T = mujoco.mjtGeom  # pyright: ignore[reportAttributeAccessIssue] (MuJoCo: no type stubs)
    kinds = {
        int(T.mjGEOM_BOX): "box",
        int(T.mjGEOM_SPHERE): "sphere",
        int(T.mjGEOM_CYLINDER): "cylinder",
        int(T.mjGEOM_CAPSULE): "capsule",
        int(T.mjGEOM_ELLIPSOID): "ellipsoid",
        int(T.mjGEOM_MESH): "mesh",
        int(T.mjGEOM_HFIELD): "hfield",
    }
    geoms = []
    for g in range(mj_model.ngeom):
        kind = kinds.get(int(mj_model.geom_type[g]))
        if kind is None or mj_model.geom_rgba[g][3] == 0:
            continue
        b = int(mj_model.geom_bodyid[g])
        frame = -1 if b == 0 else frames.get(bodies[b], None)
        if frame is None:
            continue
        size = np.array(mj_model.geom_size[g], float)
        size = {"sphere": size[:1], "cylinder": size[:2], "capsule": size[:2]}.get(kind, size)
        extra: dict[str, Any] = {}
        if kind == "mesh":
            k = int(mj_model.geom_dataid[g])
            v0, nv = int(mj_model.mesh_vertadr[k]), int(mj_model.mesh_vertnum[k])
            f0, nf = int(mj_model.mesh_faceadr[k]), int(mj_model.mesh_facenum[k])
            extra = dict(
                vertices=np.array(mj_model.mesh_vert[v0 : v0 + nv], float),
                faces=np.array(mj_model.mesh_face[f0 : f0 + nf], np.int64),
            )
            size = (1.0,)
        elif kind == "hfield":
            v, f = hfield_mesh(mj_model, int(mj_model.geom_dataid[g]))
            kind, size, extra = "mesh", (1.0,), dict(vertices=v, faces=f)
        rgba = np.array(mj_model.geom_rgba[g], float)
        mat = int(mj_model.geom_matid[g])
        if mat >= 0:
            rgba = np.array(mj_model.mat_rgba[mat], float)
        geoms.append(
            Geom(
                frame=frame,
                kind=kind,
                size=tuple(size),
                R=_quat_mat(mj_model.geom_quat[g]),
                p=np.array(mj_model.geom_pos[g], float),
                rgba=tuple(rgba),
                name=f"geom{g}",
                **extra,
            )
        )
    return geoms


# ----------------------------------------------------------------------------- stick figure
def _capsule_between(frame, a, b, r, rgba, name):
    d = np.asarray(b, float) - np.asarray(a, float)
    L = float(np.linalg.norm(d))
    if L < 1e-9:
        return None
    z = d / L
    x = np.cross(z, [1.0, 0, 0] if abs(z[0]) < 0.9 else [0, 1.0, 0])
    x /= np.linalg.norm(x)
    R = np.stack([x, np.cross(z, x), z], 1)
    return Geom(frame, "capsule", (r, L / 2), R, (np.asarray(a) + b) / 2, rgba, name=name)


def stick_geoms(model, radius: float | None = None) -> list:
    """A stick figure of ``model``: a capsule from each body's joint to each child's joint
    (and to its centre of mass for a body without children), a sphere at each joint."""
    t = model.topo
    Xp = np.asarray(model.Xtree_p, float)
    com = np.asarray(model.com, float)
    children = [[] for _ in range(t.nb)]
    for b in range(t.nb):
        if int(t.parent[b]) >= 0:
            children[int(t.parent[b])].append(b)
    lengths = [np.linalg.norm(Xp[c]) for c in range(t.nb) if int(t.parent[c]) >= 0]
    scale = float(np.median(lengths)) if lengths else 0.2
    r = radius if radius is not None else max(0.1 * scale, 1e-3)
    body_frame = {}
    for i, n in enumerate(model.frame_names):
        if n in t.body_names and int(t.frame_parent[i]) == t.body_names.index(n):
            body_frame.setdefault(t.body_names.index(n), i)
    geoms = []
    root = getattr(t, "root_name", None)
    if not model.floating_base and root in model.frame_names:  # the welded root link
        f = list(model.frame_names).index(root)
        if int(t.frame_parent[f]) < 0:
            Rf, pf = np.asarray(model.frame_R[f], float), np.asarray(model.frame_p[f], float)
            for c in range(t.nb):
                if int(t.parent[c]) < 0:
                    g = _capsule_between(f, Rf.T @ -pf, Rf.T @ (Xp[c] - pf), r, ROBOT_RGBA,
                                         f"{root}/{c}")  # fmt: skip
                    if g is not None:
                        geoms.append(g)
    for b in range(t.nb):
        f = body_frame.get(b)
        if f is None:
            continue
        Rf, pf = np.asarray(model.frame_R[f], float), np.asarray(model.frame_p[f], float)
        # points given in body coordinates -> the frame's coordinates
        to_f = lambda x: Rf.T @ (np.asarray(x) - pf)  # noqa: B023
        origin = to_f(np.zeros(3))
        geoms.append(
            Geom(
                f,
                "sphere",
                (1.3 * r,),
                p=origin,
                rgba=(0.3, 0.3, 0.35, 1.0),
                name=f"{t.body_names[b]}/joint",
            )
        )
        ends = [Xp[c] for c in children[b]] or [com[b] * 2 if np.linalg.norm(com[b]) > r else None]
        for k, e in enumerate(ends):
            if e is None:
                continue
            g = _capsule_between(f, origin, to_f(e), r, ROBOT_RGBA, f"{t.body_names[b]}/{k}")
            if g is not None:
                geoms.append(g)
    return geoms


def contact_geoms(model, contacts: ContactSet, rgba=CONTACT_RGBA) -> list:
    """Spheres of a :class:`jaxdyn.sim.ContactSet` (points drawn as small spheres)."""
    body_frame = {}
    t = model.topo
    for i, n in enumerate(model.frame_names):
        if n in t.body_names and int(t.frame_parent[i]) == t.body_names.index(n):
            body_frame.setdefault(t.body_names.index(n), i)
    pos, rad = np.asarray(contacts.pos, float), np.asarray(contacts.radius, float)
    geoms = []
    for k, b in enumerate(np.asarray(contacts.body_index)):
        f = body_frame.get(int(b))
        if f is None:
            continue
        Rf, pf = np.asarray(model.frame_R[f], float), np.asarray(model.frame_p[f], float)
        geoms.append(
            Geom(
                f,
                "sphere",
                (max(rad[k], 0.008),),
                p=Rf.T @ (pos[k] - pf),
                rgba=rgba,
                name=f"contact/{contacts.names[k]}",
            )
        )
    return geoms


# ----------------------------------------------------------------------------- scene
@dataclass
class Scene:
    """A model and what to draw of it.

    - ``model``: the :class:`jaxdyn.Model` whose ``q`` poses the scene;
    - ``geoms``: list of :class:`Geom` (on the model's frames or the world);
    - ``terrain``: :class:`jaxdyn.sim.Plane` (default: the ground ``z = 0``),
      :class:`jaxdyn.sim.Heightfield` or ``None`` (no ground);
    - ``contacts``: a :class:`jaxdyn.sim.ContactSet` (its spheres' centres are where contact
      points and forces are drawn) or ``None``.

    A :class:`jaxdyn.clusters.ClusterModel` (URDF+: loops, couplings) is drawn through its
    spanning tree (``scene.model`` is ``cluster.tree``, ``scene.cluster`` the cluster model);
    trajectories are then given as cluster positions (``cluster.nq`` per step) and mapped by
    :func:`jaxdyn.clusters.spanning_configuration` (:meth:`tree_q`).
    """

    def tree_q(self, qs: ArrayLike) -> np.ndarray:
        """``qs (..., nq)`` as the spanning tree's configurations: cluster positions mapped by
        :func:`jaxdyn.clusters.spanning_configuration` for a cluster scene, unchanged
        otherwise."""
        qs = np.asarray(qs, float)
        if self.cluster is None:
            return qs
        if qs.shape[-1] != self.cluster.nq:
            raise ValueError(
                f"Scene {self.name!r}: q has {qs.shape[-1]} entries per step, "
                f"expected the cluster position's {self.cluster.nq}"
            )
        import jax

        from ..clusters import spanning_configuration

        flat = qs.reshape(-1, qs.shape[-1])
        dtype = np.asarray(self.model.Xtree_p).dtype
        cluster = self.cluster
        out = jax.jit(jax.vmap(lambda q: spanning_configuration(cluster, q)))(flat.astype(dtype))
        return np.asarray(out, float).reshape(qs.shape[:-1] + (self.model.nq,))

    model: Model  # (a ClusterModel given here becomes ``cluster``, its tree ``model``)
    geoms: list
    terrain: Any = "plane"
    contacts: ContactSet | None = None
    name: str = ""
    cluster: ClusterModel | None = None

    def __post_init__(self):
        # a Model, a ClusterModel or what holds one as ``.model`` (an MJCFModel)
        model: Any = getattr(self.model, "model", self.model)
        if hasattr(model, "tree") and hasattr(model, "params"):  # a ClusterModel (URDF+)
            self.cluster, model = model, model.tree
        self.model = model
        if isinstance(self.terrain, str) and self.terrain == "plane":
            from ..sim.geometry import Plane

            self.terrain = Plane()
        if not self.name:
            self.name = model.name
        nf = len(model.frame_names)
        for g in self.geoms:
            if not -1 <= g.frame < nf:
                raise ValueError(f"Scene: geom {g.name!r} on frame {g.frame}, model has {nf}")

    @classmethod
    def from_model(
        cls,
        model: Model | ClusterModel,
        *,
        contacts: ContactSet | None = None,
        terrain: Any = "plane",
        stick_radius: float | None = None,
    ) -> Scene:
        """A stick figure of ``model`` (:func:`stick_geoms`) and its contact spheres."""
        # a Model or a ClusterModel (__post_init__ takes either), or what holds one as .model
        m: Any = getattr(model, "model", model)
        geoms = stick_geoms(m, stick_radius)
        if contacts is not None:
            geoms += contact_geoms(m, contacts)
        return cls(m, geoms, terrain=terrain, contacts=contacts)

    @classmethod
    def from_env(cls, env: Any, **kw: Any) -> Scene:
        """The model, contact spheres and terrain of a :mod:`jaxdyn.envs` environment."""
        env = getattr(env, "unwrapped", env)
        cfg = env.cfg
        return cls.from_model(env.model, contacts=cfg.contacts, terrain=cfg.terrain, **kw)

    @classmethod
    def load(
        cls,
        source: str | os.PathLike,
        *,
        floating_base: bool | None = None,
        package_dirs: Sequence[str | os.PathLike] = (),
        allow_outside: bool = False,
        contacts: ContactSet | None = None,
        terrain: Any = "plane",
    ) -> Scene:
        """Load a model and its geometry: a URDF path, a bundled or example-robot-data name
        (:func:`jaxdyn.robots.resolve`) or an MJCF file (``.xml``, :func:`jaxdyn.load_mjcf`,
        its collision geoms becoming the contact set and its ground the terrain). A model
        without visual geometry is drawn as a stick figure."""
        from .. import robots

        s = os.fspath(source)
        if s.lower().endswith(".xml"):
            from .. import sim
            from ..io.mjcf import load_mjcf

            mj = load_mjcf(s, ignore="all")
            model = mj.model
            geoms = mjcf_geoms(model, mj.mj_model)
            if contacts is None and mj.contacts:
                contacts = sim.contact_set(model, mj.contacts)
            if isinstance(terrain, str) and terrain == "plane":
                import mujoco

                mj_model: Any = mj.mj_model  # a mujoco.MjModel (MuJoCo ships no type stubs)
                hfield_type = mujoco.mjtGeom.mjGEOM_HFIELD  # pyright: ignore[reportAttributeAccessIssue]
                hfield = int(hfield_type) in set(mj_model.geom_type.tolist())
                # the model's ground plane; none added under a heightfield (it is the ground)
                terrain = mj.terrain if mj.terrain is not None or hfield else sim.Plane()
            if not geoms:
                geoms = stick_geoms(model)
            return cls(model, geoms, terrain=terrain, contacts=contacts)
        path, default_fb = robots.resolve(s)
        fb = default_fb if floating_base is None else floating_base
        text = Path(path).read_text(errors="replace")
        if "<coupling" in text or "<loop" in text:  # URDF+ (jaxdyn.clusters)
            from ..clusters import load_urdf_plus

            cluster = load_urdf_plus(str(path), floating_base=fb)
            tree = cluster.tree
            geoms = urdf_geoms(tree, path, package_dirs, allow_outside) or stick_geoms(tree)
            return cls(tree, geoms, terrain=terrain, contacts=contacts, cluster=cluster)
        # a Model: the URDF+ files (loops, couplings) went above
        model = cast("Model", robots.load(str(path), floating_base=fb))
        geoms = urdf_geoms(model, path, package_dirs, allow_outside)
        if not geoms:
            geoms = stick_geoms(model)
            if contacts is not None:
                geoms += contact_geoms(model, contacts)
        return cls(model, geoms, terrain=terrain, contacts=contacts)

    def nominal_q(self) -> np.ndarray:
        """A configuration to show: zeros, with an identity quaternion and the base lifted so
        that its lowest geometry touches the ground for a floating base."""
        model = self.model
        from .. import joints

        q = np.zeros(model.nq)
        t = model.topo
        for b in range(t.nb):
            if int(t.kind[b]) == joints.FREE:
                q[int(t.q_start[b]) + 3] = 1.0
            elif int(t.kind[b]) == joints.SPHERICAL:
                q[int(t.q_start[b])] = 1.0
        if model.floating_base:
            R, p = frame_poses(model, q[None])
            moving = [g for g in self.geoms if g.frame >= 0] or self.geoms  # not the world's
            lo = min(float(np.min(_geom_points(g, R[0], p[0])[:, 2])) for g in moving)
            q[2] -= lo
        return q


def _geom_points(g: Geom, R, p):
    """World points bounding a geom (for framing cameras and placing on the ground)."""
    if g.kind == "mesh":
        loc = g.vertices
    else:
        s = np.array(g.size + (g.size[-1],) * (3 - len(g.size)))
        if g.kind in ("cylinder", "capsule"):
            r, h = g.size[0], g.size[1] + (g.size[0] if g.kind == "capsule" else 0)
            s = np.array([r, r, h])
        elif g.kind == "sphere":
            s = np.array([g.size[0]] * 3)
        loc = np.array(np.meshgrid(*[[-1, 1]] * 3)).reshape(3, -1).T * s
    loc = loc @ g.R.T + g.p
    if g.frame < 0:
        return loc
    return loc @ R[g.frame].T + p[g.frame]


def _local_corners(g: Geom):
    """The 8 corners of a box holding the geom, in its frame's coordinates."""
    if g.kind == "mesh":
        v = np.asarray(g.vertices, float)
        loc = np.array(np.meshgrid(*zip(v.min(0), v.max(0)))).reshape(3, -1).T
    else:
        loc = _geom_points(Geom(-1, g.kind, g.size), None, None)
    return loc @ np.asarray(g.R, float).T + np.asarray(g.p, float)


def trajectory_box(scene, R, p, max_steps: int = 64):
    """``(lo, hi)``: a box holding every geom of ``scene`` at every step of the placements
    ``R (N, nf, 3, 3)``, ``p (N, nf, 3)`` (:func:`frame_poses`; at most ``max_steps`` steps,
    evenly spread), for framing a fixed camera on a whole trajectory."""
    N = R.shape[0]
    idx = np.unique(np.linspace(0, N - 1, min(N, max_steps)).round().astype(int))
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for g in scene.geoms:
        loc = _local_corners(g)
        if g.frame < 0:
            w = loc
        else:
            w = np.einsum("nij,kj->nki", R[idx, g.frame], loc) + p[idx, g.frame][:, None]
            w = w.reshape(-1, 3)
        lo, hi = np.minimum(lo, w.min(0)), np.maximum(hi, w.max(0))
    if not np.all(np.isfinite(lo)):
        lo = hi = np.zeros(3)
    return lo, hi


def contact_marks(
    scene,
    R,
    p,
    forces: ArrayLike | None = None,
    force_scale: float | None = None,
    extent: float = 1.0,
    who: str = "render",
) -> dict[str, Any]:
    """What both renderers draw for contacts, from the frames' placements ``R (B, T, nf, 3,
    3)``, ``p (B, T, nf, 3)`` (:func:`frame_poses`, reshaped): a dict of ``point (B, T, nc,
    3)`` (each contact sphere's lowest point along the terrain's normal: where it touches),
    ``touching (B, T, nc)`` (the sphere within 1 mm of the terrain), ``forces (B, T, nc, 3)``
    (world axes, or ``None``), ``scale`` (metres per newton of an arrow; default: the model's
    weight shared by four contacts is a quarter of ``extent``), ``radius`` (of a ball marking
    a touching contact) and ``width`` (an arrow's shaft radius).
    ``forces``: ``(T, nc, 3)`` or ``(B, T, nc, 3)``."""
    import jax.numpy as jnp

    cs = scene.contacts
    if cs is None:
        raise ValueError(
            f"{who}: contact points or forces need scene.contacts (a "
            "jaxdyn.sim.ContactSet: Scene(..., contacts=...))"
        )
    model = scene.model
    body_frame = [list(model.frame_names).index(n) for n in model.topo.body_names]
    fr = np.array([body_frame[b] for b in np.asarray(cs.body_index)], dtype=int)
    pos = np.asarray(cs.pos, float)
    rad = np.asarray(cs.radius, float)
    # the contact set's sphere centres are in body coordinates; the body's placement from its
    # frame's: X_body = X_frame * inv(X_frame_in_body)
    Rb, pb = R[:, :, fr], p[:, :, fr]
    Fp = np.asarray(model.frame_p, float)[fr]
    FR = np.asarray(model.frame_R, float)[fr]
    Rbody = Rb @ np.swapaxes(FR, -1, -2)
    pbody = pb - np.einsum("btkij,kj->btki", Rbody, Fp)
    c = np.einsum("btkij,kj->btki", Rbody, pos) + pbody
    terrain = scene.terrain
    if terrain is None:
        from ..sim.geometry import Plane

        terrain = Plane()
    dist, n = terrain.query(jnp.asarray(c))
    dist, n = np.asarray(dist, float), np.asarray(n, float)
    if forces is not None:
        forces = np.asarray(forces, float)
        given = forces.shape
        if forces.ndim == 3:
            forces = forces[None]
        if forces.shape != c.shape:
            raise ValueError(
                f"{who}: forces has shape {given}, expected "
                f"(T, nc, 3) = {c.shape[1:]} (or with the batch first)"
            )
        if not np.all(np.isfinite(forces)):
            raise ValueError(f"{who}: forces has non-finite entries")
        if force_scale is None:
            w = float(np.sum(np.asarray(model.mass))) * 9.81 / 4
            force_scale = 0.25 * extent / max(w, 1e-9)
    return dict(
        point=c - rad[:, None] * n,
        touching=dist - rad < 1e-3,
        forces=forces,
        scale=force_scale,
        # a ball wider than the contact spheres (their lower half is under the ground)
        radius=max(0.02 * extent, 1.5 * float(rad.max(initial=0.0))),
        width=0.01 * extent,
    )


_FK = None


def _fk():
    global _FK
    if _FK is None:
        import jax

        from ..algorithms.kinematics import forward_kinematics

        # the model is an argument: one compilation per topology and dtype, shared by every
        # load of the same robot
        _FK = jax.jit(jax.vmap(lambda m, q: forward_kinematics(m, q).frame, in_axes=(None, 0)))
    return _FK


def frame_poses(model: Model | Scene, qs: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """World placements of every frame for configurations ``qs (T, nq)``: ``R (T, nf, 3, 3)``
    and ``p (T, nf, 3)`` as numpy arrays (jaxdyn's :func:`~jaxdyn.forward_kinematics`,
    compiled once per topology)."""
    tree = cast("Model", getattr(model, "model", model))  # a Scene's model
    qs = np.asarray(qs)
    if qs.ndim == 1:
        qs = qs[None]
    if qs.ndim != 2 or qs.shape[1] != tree.nq:
        raise ValueError(
            f"frame_poses: q has shape {qs.shape}, expected (T, nq) with nq={tree.nq} for "
            f"{tree.name!r}"
        )
    out = _fk()(tree, qs.astype(np.asarray(tree.Xtree_p).dtype))
    return np.asarray(out.R, float), np.asarray(out.p, float)

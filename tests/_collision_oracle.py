"""MuJoCo C's ``mj_collision`` on a two-geom scene, for tests/test_collision.py and
tests/test_collision_gjk.py."""

from __future__ import annotations

import numpy as np

TYPES = ("plane", "hfield", "sphere", "capsule", "ellipsoid", "cylinder", "box", "mesh")


def _geom_xml(t, size, name, margin, mesh=None):
    if t == "plane":
        return f'<geom name="{name}" type="plane" size="0 0 1" margin="{margin}"/>'
    if t == "mesh":
        return f'<geom name="{name}" type="mesh" mesh="{mesh}" margin="{margin}"/>'
    s = " ".join(repr(float(x)) for x in size)
    return f'<geom name="{name}" type="{t}" size="{s}" margin="{margin}"/>'


class Scene:
    """Two geoms (geom 1 of type ``t1``, geom 2 of type ``t2``), each on its own free body (a
    plane sits on the world body and is moved through ``geom_pos``/``geom_quat``)."""

    def __init__(self, t1, size1, t2, size2, margin=0.0, meshes=(), multiccd=None):
        import mujoco

        self.mujoco = mujoco
        assets = []
        mesh_names = []
        for k, verts in enumerate(meshes):
            v = " ".join(repr(float(x)) for x in np.asarray(verts).reshape(-1))
            assets.append(f'<mesh name="m{k}" vertex="{v}"/>')
            mesh_names.append(f"m{k}")
        mk = iter(mesh_names)
        g1 = _geom_xml(t1, size1, "g1", margin, next(mk) if t1 == "mesh" else None)
        g2 = _geom_xml(t2, size2, "g2", 0.0, next(mk) if t2 == "mesh" else None)
        flag = {None: "", True: '<flag multiccd="enable"/>', False: '<flag multiccd="disable"/>'}[
            multiccd
        ]
        b1 = g1 if t1 == "plane" else f'<body name="b1"><freejoint/>{g1}</body>'
        b2 = f'<body name="b2"><freejoint/>{g2}</body>'
        xml = (
            f"<mujoco><option>{flag}</option><asset>{''.join(assets)}</asset>"
            f"<worldbody>{b1}{b2}</worldbody></mujoco>"
        )
        self.m = mujoco.MjModel.from_xml_string(xml)
        self.m.opt.ccd_tolerance = 1e-12
        self.m.opt.ccd_iterations = 2000
        self.d = mujoco.MjData(self.m)
        self.plane = t1 == "plane"
        #: mesh vertices in their geom's frame as MuJoCo stores them (re-centred, re-oriented)
        self.mesh_vertices = [
            np.array(self.m.mesh_vert[a : a + n])
            for a, n in zip(self.m.mesh_vertadr, self.m.mesh_vertnum, strict=True)
        ]

    def __call__(self, pos1, quat1, pos2, quat2):
        """Contacts (dist (n,), pos (n, 3), normal (n, 3)) and the geoms' world poses."""
        m, d = self.m, self.d
        if self.plane:
            m.geom_pos[0] = pos1
            m.geom_quat[0] = quat1
            d.qpos[:] = np.concatenate([pos2, quat2])
        else:
            d.qpos[:] = np.concatenate([pos1, quat1, pos2, quat2])
        self.mujoco.mj_forward(m, d)
        n = d.ncon
        con = d.contact[:n]
        poses = (
            d.geom_xpos[0].copy(),
            d.geom_xmat[0].reshape(3, 3).copy(),
            d.geom_xpos[1].copy(),
            d.geom_xmat[1].reshape(3, 3).copy(),
        )
        out = (
            np.array(con.dist).reshape(n),
            np.array(con.pos).reshape(n, 3),
            np.array(con.frame).reshape(n, 9)[:, :3],
        )
        # MuJoCo orders geom1 < geom2 by type: the pair must be (g1, g2)
        assert n == 0 or np.all(np.array(con.geom).reshape(n, 2) == [0, 1])
        return out, poses


def random_quats(rng, n):
    q = rng.normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def sat_depth(va, vb, edges_a=None, edges_b=None):
    """Brute-force separating-axis oracle for two convex point sets (world vertices (n, 3)):
    the largest support-based separation over all face normals of both hulls and all cross
    products of hull edge pairs, and its axis (pointing from a to b). For overlapping convex
    polytopes it is minus the penetration depth (the Minkowski difference's nearest face)."""
    from scipy.spatial import ConvexHull

    axes = []
    edges = []
    for v in (va, vb):
        h = ConvexHull(v)
        axes.append(h.equations[:, :3])
        e = set()
        for s in h.simplices:
            for i in range(3):
                a, b = sorted((int(s[i]), int(s[(i + 1) % 3])))
                e.add((a, b))
        edges.append(np.array([v[b] - v[a] for a, b in e]))
    cr = np.cross(edges[0][:, None, :], edges[1][None, :, :]).reshape(-1, 3)
    ln = np.linalg.norm(cr, axis=1)
    cr = cr[ln > 1e-9] / ln[ln > 1e-9, None]
    u = np.concatenate([axes[0], -axes[1], cr, -cr])
    sep = (vb @ u.T).min(axis=0) - (va @ u.T).max(axis=0)
    i = np.argmax(sep)
    return sep[i], u[i]


def pair_scene(t1, s1, t2, s2, margin):
    """``(scene, a1, a2)``: the MuJoCo :class:`Scene` of the pair (``multiccd`` off, ``margin``
    on geom 1) and jaxdyn's geom sizes, a mesh as its hull (:func:`hull_from_points`)."""
    import jax.numpy as jnp

    from jaxdyn.sim import collision as C

    meshes = [s for t, s in ((t1, s1), (t2, s2)) if t == "mesh"]
    scene = Scene(t1, s1, t2, s2, margin=margin, meshes=meshes, multiccd=False)
    hulls = iter([C.hull_from_points(v) for v in scene.mesh_vertices])
    a1 = next(hulls) if t1 == "mesh" else jnp.asarray(s1, float)
    a2 = next(hulls) if t2 == "mesh" else jnp.asarray(s2, float)
    return scene, a1, a2


def random_pair_poses(scene, spread, n, seed):
    """``n`` random poses of the pair (geom 2's centre ``spread`` from geom 1's, random
    orientations): MuJoCo's contacts of each and the poses ``[p1, m1, p2, m2]`` stacked."""
    rng = np.random.default_rng(seed)
    q1, q2 = random_quats(rng, n), random_quats(rng, n)
    p1 = rng.normal(size=(n, 3)) * 0.1
    p2 = p1 + rng.normal(size=(n, 3)) * spread
    mj, poses = [], []
    for i in range(n):
        out, pose = scene(p1[i], q1[i], p2[i], q2[i])
        mj.append(out)
        poses.append(pose)
    return mj, [np.stack(x) for x in zip(*poses, strict=True)]

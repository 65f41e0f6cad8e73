"""Cluster dynamics (jaxdyn.clusters): C-RNEA, C-ABA, C-EFPA against the projected and
Lagrange-multiplier baselines, dense formulas, jaxdyn's RNEA/ABA, and finite differences.

Every robot is compiled once (one jitted, vmapped function evaluating everything at a small
batch of random valid states); results are cached per module.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn
from jaxdyn import clusters as C
from jaxdyn.clusters import robots

from oracle import enable_x64

B = 2  # states per robot

# robot -> end effectors (frames, optionally with a point offset)
EES = {
    "four_bar": ("link2", ("link3", (0.5, 0.0, 0.0))),
    "six_bar": ("link3", ("link5", (0.5, 0.0, 0.0))),
    "planar_leg_linkage": ("foot", ("shank_support", (0.096, 0.0, 0.0))),
    "revolute_rotor_chain": ("link-2", "link-1"),
    "mini_cheetah": ("FR_knee_link", ("HL_knee_link", (0.0, 0.0, -0.18))),
    "mit_humanoid": ("left_ankle_link", "right_elbow_link"),
    "mit_humanoid_leg": ("ankle_link", "knee_link"),
    "jvrc1_humanoid": ("left-ankle-pitch", "right-wrist-yaw"),
    "tello": ("left-foot", "right-thigh"),
    # the paper's transmission chains (random inertias, gears and belts; PBT ends with a GT link)
    "gt_chain": ("link4", ("link2", (0.5, 0.0, 0.0))),
    "pbt_chain": ("link4", ("link1", (0.7, 0.0, 0.0))),
}
ROBOT_NAMES = list(EES)
#: robots of the default run; the others are in the slow set (``-m slow``): each robot is a
#: separate XLA compile of every algorithm and its references (20-30 s on 2 cores). Loops:
#: four_bar; rotors and belts: gt_chain; floating base: quad12 (mini_cheetah, rotors on a
#: floating base, is in the slow set; its folded rotors are checked by
#: test_rotor_folding_only_where_exact)
QUICK = {"four_bar", "gt_chain", "quad12"}


def sweep(names, quick=QUICK):
    """``names`` as parameters, those outside ``quick`` marked slow."""
    return [n if n in quick else pytest.param(n, marks=pytest.mark.slow) for n in names]


CHAINS = {"gt_chain": ("GT", 11), "pbt_chain": ("PBT", 12)}


@functools.cache
def model_of(name):
    if name in CHAINS:
        kind, seed = CHAINS[name]
        return robots.transmission_chain(5, kind, seed=seed)
    return robots.load(name)


#: links of the transmission chains in the tests that differentiate through them
#: (test_autodiff_matches_finite_differences_on_manifold, test_caba_with_rotors_carried_by_parents,
#: test_cefpa_fast_path_matches_general):
#: three links keep what five had (PBT: a belt pair and a geared last link; GT: a rotor carried
#: by a link that is itself a rotor's load) and compile a quarter to a third faster
SHORT_CHAIN = 3


@functools.cache
def short_model_of(name):
    """``name``'s model, its transmission chain cut to SHORT_CHAIN links (other robots as is)."""
    if name in CHAINS:
        kind, seed = CHAINS[name]
        return robots.transmission_chain(SHORT_CHAIN, kind, seed=seed)
    return model_of(name)


def _rel(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return float(np.max(np.abs(x - y)) / max(1.0, float(np.max(np.abs(y)))))


def _states(m, seed, batch=B):
    k = jax.random.split(jax.random.PRNGKey(seed), 5)
    q = jax.jit(jax.vmap(lambda kk: C.random_configuration(m, kk, scale=0.6)))(
        jax.random.split(k[0], batch)
    )
    v = jax.random.normal(k[1], (batch, m.nv))
    a = jax.random.normal(k[2], (batch, m.nv))
    fe = 0.3 * jax.random.normal(k[3], (batch, m.nb, 6))
    return q, v, a, fe


def _jacobians(m, qs, ees):
    """End-effector Jacobians of the spanning tree from jaxdyn.jacobian (local frame), moved to
    the offset points (``v_p = v + w x off``)."""
    rows = []
    for e in ees:
        name, off = (e, np.zeros(3)) if isinstance(e, str) else (e[0], np.asarray(e[1]))
        J = jaxdyn.jacobian(m.tree, qs, name, reference="local")
        rows.append(J.at[3:].add(-jnp.asarray(jaxdyn.spatial.skew(off)) @ J[:3]))
    return jnp.concatenate(rows)


def _reference(m, q, v, a, fe, tau, ees):
    """Dense spanning-tree references sharing one CRBA: projected inverse dynamics
    ``G^T (M qdd + C)``, projection-method and Lagrange-multiplier forward dynamics, and the
    inverse OSIM ``(J G) H^-1 (J G)^T``."""
    s = C.spanning_state(m, q, v, a)
    G, g = s.G, s.g
    M = jaxdyn.crba(m.tree, s.q)
    bias = jaxdyn.rnea(m.tree, s.q, s.v, jnp.zeros_like(s.v), fe)  # C(q, qdot) - J^T f_ext
    H = G.T @ M @ G
    out = dict(
        tau_ref=G.T @ (M @ s.a + bias), a_proj=jnp.linalg.solve(H, tau - G.T @ (bias + M @ g))
    )
    phi, K, k = C.loop_constraints(m, q, v)
    if K.shape[0]:  # KKT system [[M, -K^T], [K, 0]] [qdd; lambda] = [tau_q - C; k]
        tau_q = G @ jnp.linalg.solve(G.T @ G, tau)
        nk = K.shape[0]
        kkt = jnp.block([[M, -K.T], [K, jnp.zeros((nk, nk))]])
        sol = jnp.linalg.solve(kkt, jnp.concatenate([tau_q - bias, k]))
        qdd = sol[: M.shape[0]]
        out["a_kkt"] = jnp.linalg.solve(G.T @ G, G.T @ (qdd - g))
    else:
        out["a_kkt"] = out["a_proj"]
    JG = _jacobians(m, s.q, ees) @ G
    out["osim_dense"] = JG @ jnp.linalg.solve(H, JG.T)
    out["phi"] = phi
    return out


@functools.cache
def results(name):
    m = model_of(name)
    ees = EES[name]
    q, v, a, fe = _states(m, 0)

    def one(q, v, a, fe):
        tau = C.crnea(m, q, v, a, fe)
        out = dict(
            tau=tau,
            a_caba=C.caba(m, q, v, tau, fe),
            osim=C.cefpa(m, q, ees),
            # the library's baselines (same signatures)
            tau_lib=C.projected_rnea(m, q, v, a, fe),
            a_projfd=C.projection_fd(m, q, v, tau, fe),
            a_lag=C.lagrange_fd(m, q, v, tau, fe),
            osim_lib=C.projected_osim(m, q, ees),
            EG=jnp.asarray(m.topo.G_left_inverse) @ C.spanning_state(m, q).G,
        )
        out.update(_reference(m, q, v, a, fe, tau, ees))
        return out

    res = jax.jit(jax.vmap(one))(q, v, a, fe)
    return (q, v, a, fe), jax.tree_util.tree_map(np.asarray, res)


@pytest.mark.parametrize("name", sweep(ROBOT_NAMES))
def test_states_valid(name):
    (q, *_), r = results(name)
    if r["phi"].size:
        assert np.max(np.abs(r["phi"])) < 1e-12


@pytest.mark.parametrize("name", sweep(ROBOT_NAMES))
def test_crnea_matches_projected_rnea(name):
    _, r = results(name)
    assert _rel(r["tau"], r["tau_ref"]) < 1e-10


@pytest.mark.parametrize("name", sweep(ROBOT_NAMES))
def test_caba_inverts_crnea_and_matches_baselines(name):
    (q, v, a, fe), r = results(name)
    assert _rel(r["a_caba"], a) < 1e-10  # C-ABA(C-RNEA(a)) = a
    assert _rel(r["a_proj"], a) < 1e-10  # projection method
    assert _rel(r["a_kkt"], a) < 1e-10  # Lagrange multipliers (KKT)


@pytest.mark.parametrize("name", sweep(ROBOT_NAMES))
def test_cefpa_matches_dense(name):
    _, r = results(name)
    assert _rel(r["osim"], r["osim_dense"]) < 1e-10
    assert _rel(r["osim"], np.swapaxes(r["osim"], -1, -2)) < 1e-12


#: end effectors sharing clusters and bodies: two frames on one body, a rotor and its link (two
#: bodies of one cluster), a foot and an elbow (paths that part below the floating base)
FAST_EES = {
    "mit_humanoid": (
        "left_ankle_link",
        ("left_ankle_link", (0.1, 0.0, -0.05)),
        "left_ankle_rotor",
        "right_elbow_link",
    ),
    # the SHORT_CHAIN-link chain (short_model_of): the tip link and its rotor, a middle link
    "gt_chain": ("link2", "rotor2", ("link1", (0.5, 0.0, 0.0))),
    "tello": ("left-foot", "right-thigh", "left-thigh"),
}


@pytest.mark.parametrize("name", sweep(FAST_EES))
def test_cefpa_fast_path_matches_general(name):
    """C-EFPA's single-output path (per-pair 6x6 propagators, every robot of the paper) agrees
    with the dense per-body path (the one taken by multi-output clusters), values and
    reverse-mode derivatives, and keeps float32 inputs in float32."""
    from jaxdyn.clusters.cefpa import cefpa_general
    from jaxdyn.clusters.common import all_single_output, resolve_end_effectors, setup

    m = short_model_of(name)
    ees = FAST_EES[name]
    assert all_single_output(m.topo)
    q = _states(m, 5)[0]

    def general(q):
        return cefpa_general(setup(m, "cefpa", q), resolve_end_effectors(m, ees))

    w = jnp.cos(jnp.arange(36 * len(ees) ** 2)).reshape(6 * len(ees), -1)

    @jax.jit
    @jax.vmap
    def f(q):
        return (
            C.cefpa(m, q, ees),
            general(q),
            jax.grad(lambda x: jnp.sum(w * C.cefpa(m, x, ees)))(q),
            jax.grad(lambda x: jnp.sum(w * general(x)))(q),
        )

    L, Lg, dL, dLg = f(q)
    assert _rel(L, Lg) < 1e-10
    assert _rel(dL, dLg) < 1e-9
    L32 = jax.jit(jax.vmap(lambda q: C.cefpa(m, q, ees)))(q.astype(jnp.float32))
    assert L32.dtype == jnp.float32
    assert _rel(L32, L) < 1e-3


@pytest.mark.parametrize("name", sweep(ROBOT_NAMES))
def test_library_baselines(name):
    """jaxdyn.clusters' projected RNEA / projection FD / Lagrange FD / projected OSIM equal the
    dense references of this file (and hence C-RNEA, C-ABA, C-EFPA)."""
    (q, v, a, fe), r = results(name)
    assert _rel(r["tau_lib"], r["tau_ref"]) < 1e-10
    assert _rel(r["tau_lib"], r["tau"]) < 1e-10
    assert _rel(r["a_projfd"], a) < 1e-10
    assert _rel(r["a_lag"], a) < 1e-10
    assert _rel(r["osim_lib"], r["osim_dense"]) < 1e-10
    # the constant left inverse of G used by lagrange_fd
    np.testing.assert_allclose(
        r["EG"], np.broadcast_to(np.eye(v.shape[1]), r["EG"].shape), atol=1e-12
    )


# ----------------------------------------------------------------------------- structure


def test_cluster_structure():
    m = model_of("mit_humanoid_leg")
    kinds = [m.topo.groups[g].type for g in m.topo.cluster_group]
    assert kinds == ["linear"] * 4
    # knee + ankle belt pair merged into one 4-body, 2-DoF cluster
    pair = m.topo.cluster_bodies[-1]
    assert sorted(m.tree.body_names[b] for b in pair) == sorted(
        ["knee_link", "knee_rotor", "ankle_link", "ankle_rotor"]
    )
    assert m.nv == 5 and m.v_names[-2:] == ("hipy_to_knee_link", "knee_to_ankle")
    # G of the ankle rotor: q_ar = 12 (q_knee + q_ankle)
    q = C.neutral_configuration(m)
    s = C.spanning_state(m, q)
    ar = m.tree.joint_names.index("hipy_to_ankle_rotor")
    np.testing.assert_allclose(np.asarray(s.G[ar, -2:]), [12.0, 12.0])
    kr = m.tree.joint_names.index("hipy_to_knee_rotor")
    np.testing.assert_allclose(np.asarray(s.G[kr, -2:]), [12.0, 0.0])
    mc = model_of("mini_cheetah")
    assert mc.n_clusters == 13 and mc.nv == 18 and mc.nq == 19
    assert len(model_of("jvrc1_humanoid").topo.levels) > 1


def test_cluster_quantities_local_frames():
    """Local-frame X_k, X_R, S (paper eqs. (20)-(23)) reproduce the spanning-tree body
    velocities: v_k = X_k v_out + X_R blkdiag(S_b) qdot, and S ydot = v_J."""
    m = model_of("planar_leg_linkage")
    q = jax.jit(C.random_configuration, static_argnames="scale")(
        m, jax.random.PRNGKey(3), scale=0.5
    )
    v = jnp.array([0.7, -1.3])
    keys = ("X", "X_R", "S", "v_J", "output_bodies_unique")

    @jax.jit
    def f(q, v):
        s = C.spanning_state(m, q, v)
        ws = jaxdyn.algorithms.kinematics.world_state(m.tree, s.q)
        vw, _ = jaxdyn.algorithms.kinematics.body_velocities(m.tree, ws, s.v)
        cq = [{k: d[k] for k in keys} for d in C.cluster_quantities(m, q, v)]
        return cq, jaxdyn.spatial.act_inv_motion(ws.R, ws.p, vw)

    cq, vloc = f(q, v)
    t = m.topo
    assert len(cq) == t.n_clusters == 2
    for c, d in enumerate(cq):
        bodies = np.array(t.cluster_bodies[c])
        g = t.groups[t.cluster_group[c]]
        vout = jnp.concatenate(
            [jnp.zeros(6) if int(o) < 0 else vloc[int(o)] for o in d["output_bodies_unique"]]
        )
        pred = d["X"] @ vout + d["v_J"]
        np.testing.assert_allclose(
            np.asarray(pred), np.asarray(vloc[bodies].reshape(-1)), atol=1e-12
        )
        XR = np.asarray(d["X_R"])
        for i in range(len(bodies)):  # unit lower block-triangular
            np.testing.assert_allclose(
                XR[6 * i : 6 * i + 6, 6 * i : 6 * i + 6], np.eye(6), atol=1e-12
            )
            assert np.all(XR[6 * i : 6 * i + 6, 6 * (i + 1) :] == 0)
        yd = v[g.v0 + (c - g.cl0) * g.ny : g.v0 + (c - g.cl0 + 1) * g.ny]
        np.testing.assert_allclose(np.asarray(d["S"] @ yd), np.asarray(d["v_J"]), atol=1e-12)
    # the linkage cluster: 3 bodies, all attached to the thigh
    assert np.asarray(cq[1]["X"]).shape == (18, 6)


# ----------------------------------------------------------------------------- reductions


@functools.cache
def _plain(name):
    if name == "random":
        src = jaxdyn.robots.random_urdf(
            7, seed=5, joint_types=("revolute", "prismatic", "spherical")
        )
        return C.load_urdf_plus(src)
    path, fb = jaxdyn.robots.resolve(name)
    return C.load_urdf_plus(path, floating_base=fb)


@pytest.mark.parametrize("name", sweep(["quad12", "random"]))
def test_reduces_to_rnea_aba_without_loops(name):
    m = _plain(name)
    assert not m.topo.has_loops
    q, v, a, fe = _states(m, 1)

    bn = m.tree.body_names
    ees = (bn[-1], (bn[len(bn) // 2], (0.1, -0.2, 0.05)))

    def one(q, v, a, fe):
        s = C.spanning_state(m, q, v, a)
        tau_tree = jaxdyn.rnea(m.tree, s.q, s.v, s.a, fe)
        tau = C.crnea(m, q, v, a, fe)
        J = _jacobians(m, s.q, ees)
        return dict(
            q=s.q,
            G=s.G,
            tau=tau,
            tau_ref=s.G.T @ tau_tree,
            acc=s.G @ C.caba(m, q, v, tau, fe),
            acc_ref=jaxdyn.aba(m.tree, s.q, s.v, tau_tree, fe),
            osim=C.cefpa(m, q, ees),
            osim_ref=J @ jnp.linalg.solve(jaxdyn.crba(m.tree, s.q), J.T),
        )

    r = jax.jit(jax.vmap(one))(q, v, a, fe)
    # plain trees keep jaxdyn's joint order
    np.testing.assert_array_equal(np.asarray(r["q"]), np.asarray(q))
    np.testing.assert_array_equal(np.asarray(r["G"][0]), np.eye(m.nv))
    # one name per independent velocity, multi-DoF joints as "joint[k]"
    assert len(m.joint_names) == m.nv
    assert list(dict.fromkeys(n.split("[")[0] for n in m.joint_names)) == list(m.tree.joint_names)
    assert _rel(r["tau"], r["tau_ref"]) < 1e-12
    assert _rel(r["acc"], r["acc_ref"]) < 1e-9
    assert _rel(r["osim"], r["osim_ref"]) < 1e-10  # C-EFPA = EFPA = J H^-1 J^T


MIMIC_URDF = """<robot name="gripper">
  <link name="base"/>
  <link name="palm"><inertial><mass value="1.0"/><origin xyz="0.1 0 0"/>
    <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.02" iyz="0" izz="0.02"/></inertial></link>
  <link name="f1"><inertial><mass value="0.2"/><origin xyz="0 0.02 0.05"/>
    <inertia ixx="0.001" ixy="0" ixz="0" iyy="0.001" iyz="0" izz="0.0005"/></inertial></link>
  <link name="f2"><inertial><mass value="0.3"/><origin xyz="0 -0.02 0.05"/>
    <inertia ixx="0.001" ixy="0" ixz="0" iyy="0.0015" iyz="0" izz="0.0006"/></inertial></link>
  <link name="tip"><inertial><mass value="0.1"/><origin xyz="0 0 0.03"/>
    <inertia ixx="0.0005" ixy="0" ixz="0" iyy="0.0005" iyz="0" izz="0.0002"/></inertial></link>
  <joint name="wrist" type="revolute"><parent link="base"/><child link="palm"/>
    <axis xyz="0 1 0"/></joint>
  <joint name="finger1" type="prismatic"><parent link="palm"/><child link="f1"/>
    <origin xyz="0.2 0 0"/><axis xyz="0 1 0"/></joint>
  <joint name="finger2" type="prismatic"><parent link="palm"/><child link="f2"/>
    <origin xyz="0.2 0 0"/><axis xyz="0 1 0"/>
    <mimic joint="finger1" multiplier="-1" offset="0.01"/></joint>
  <joint name="tipj" type="revolute"><parent link="f1"/><child link="tip"/>
    <origin xyz="0 0 0.1"/><axis xyz="1 0 0"/><mimic joint="wrist" multiplier="0.5"/></joint>
</robot>"""


def test_mimic_joints_are_linear_couplings():
    m = C.load_urdf_plus(MIMIC_URDF)
    assert m.nv == 2 and set(m.v_names) == {"wrist", "finger1"}
    q, v, a, fe = _states(m, 2)
    q, v, a = q[0], v[0], a[0]
    s = C.spanning_state(m, q, v, a)
    jn = m.tree.joint_names
    qs = dict(zip(jn, np.asarray(s.q)))
    assert qs["finger2"] == pytest.approx(-qs["finger1"] + 0.01, abs=1e-15)
    assert qs["tipj"] == pytest.approx(0.5 * qs["wrist"], abs=1e-15)
    ees = ("tip", "f2")

    @jax.jit
    def f(q, v, a):
        tau = C.crnea(m, q, v, a)
        return dict(
            tau=tau,
            tau_p=C.projected_rnea(m, q, v, a),
            acc=C.caba(m, q, v, tau),
            acc_p=C.projection_fd(m, q, v, tau),
            acc_l=C.lagrange_fd(m, q, v, tau),
            L=C.cefpa(m, q, ees),
            L_p=C.projected_osim(m, q, ees),
        )

    r = f(q, v, a)
    assert _rel(r["tau"], r["tau_p"]) < 1e-12
    for k in ("acc", "acc_p", "acc_l"):
        assert _rel(r[k], a) < 1e-10
    assert _rel(r["L"], r["L_p"]) < 1e-10
    # jaxdyn.load_urdf: a plain URDF (mimic only) stays a spanning tree unless asked
    plain = jaxdyn.load_urdf(MIMIC_URDF)
    assert isinstance(plain, jaxdyn.Model) and plain.nv == 4
    assert jaxdyn.load_urdf(MIMIC_URDF, clusters=True).v_names == m.v_names


HAND2_URDF = MIMIC_URDF.replace('<mimic joint="wrist" multiplier="0.5"/>', "").replace(
    "</robot>",
    """
  <link name="t2"><inertial><mass value="0.15"/><origin xyz="0.01 0 0.03"/>
    <inertia ixx="0.0005" ixy="0" ixz="0" iyy="0.0006" iyz="0" izz="0.0002"/></inertial></link>
  <link name="t3"><inertial><mass value="0.05"/><origin xyz="0.0 0.01 0.02"/>
    <inertia ixx="0.0002" ixy="0" ixz="0" iyy="0.0003" iyz="0" izz="0.0001"/></inertial></link>
  <link name="t4"><inertial><mass value="0.07"/><origin xyz="0.01 0.01 0.02"/>
    <inertia ixx="0.0003" ixy="0" ixz="0" iyy="0.0002" iyz="0" izz="0.0001"/></inertial></link>
  <joint name="k2" type="revolute"><parent link="f2"/><child link="t2"/>
    <origin xyz="0 0 0.1"/><axis xyz="0 0 1"/><mimic joint="tipj" multiplier="2.0"/></joint>
  <joint name="k3" type="revolute"><parent link="t2"/><child link="t3"/>
    <origin xyz="0 0.03 0.05"/><axis xyz="0 1 0"/></joint>
  <joint name="k4" type="revolute"><parent link="tip"/><child link="t4"/>
    <origin xyz="0.02 0.0 0.05"/><axis xyz="0 0 1"/></joint>
</robot>""",
)


def test_multi_output_cluster():
    """A cluster whose bodies hang from two different bodies of its parent cluster (here a
    programmatic grouping of t3 and t4 below the mimic cluster {f1, f2, tip, t2}): X_k^T Ia X_k
    then has off-diagonal blocks, which C-ABA handles in the dense 6n x 6n form."""
    m = C.load_urdf_plus(HAND2_URDF, constraints=[C.Cluster(("t3", "t4"))])
    t = m.topo
    last = t.groups[t.cluster_group[-1]]
    assert sorted(m.tree.body_names[b] for b in t.cluster_bodies[-1]) == ["t3", "t4"]
    assert len(set(last.out[0])) == 2  # two different output bodies
    q, v, a, fe = _states(m, 3, batch=1)
    ees = ("t3", ("t4", (0.1, 0.0, 0.02)), "tip")

    @jax.jit
    def f(q, v, a, fe):
        tau = C.crnea(m, q, v, a, fe)
        return dict(
            tau=tau,
            tau_p=C.projected_rnea(m, q, v, a, fe),
            acc=C.caba(m, q, v, tau, fe),
            acc_p=C.projection_fd(m, q, v, tau, fe),
            L=C.cefpa(m, q, ees),
            L_p=C.projected_osim(m, q, ees),
        )

    r = f(q[0], v[0], a[0], fe[0])
    assert _rel(r["tau"], r["tau_p"]) < 1e-12
    assert _rel(r["acc"], a[0]) < 1e-10 and _rel(r["acc_p"], a[0]) < 1e-10
    assert _rel(r["L"], r["L_p"]) < 1e-10


def test_load_urdf_reads_urdf_plus():
    """jaxdyn.load_urdf returns the cluster model for files with <coupling>/<loop> tags, names
    the independent coordinates, and keeps the spanning tree on request."""
    m = jaxdyn.load_urdf(robots.path("mit_humanoid_leg"))
    assert isinstance(m, C.ClusterModel)
    assert m.joint_names == m.v_names == model_of("mit_humanoid_leg").v_names
    assert m.nv == 5 and m.nb == 10
    fb = jaxdyn.load_urdf(str(robots.path("four_bar")))
    assert isinstance(fb, C.ClusterModel) and fb.nv == 1 and fb.topo.has_loops
    assert fb.joint_names == ("joint1",)  # independent="true" in the file
    assert len(fb.q_names) == 3  # implicit cluster: the spanning coordinates are stored
    tree = jaxdyn.load_urdf(robots.path("four_bar"), clusters=False)
    assert isinstance(tree, jaxdyn.Model) and tree.nv == 3
    assert fb.tree.joint_names == tree.joint_names


# ----------------------------------------------------------------------------- approximations


@pytest.mark.slow
def test_approximate_models():
    m = model_of("mit_humanoid_leg")
    (q,), (v,), (a,), _ = _states(m, 4, batch=1)
    exact = np.asarray(jax.jit(C.crnea)(m, q, v, a))
    ees = ("ankle_link", ("knee_link", (0.0, 0.01, -0.1)))
    for kind in C.APPROXIMATIONS:
        ap = C.approximate_model(m, kind)
        assert ap.nb == 5 and ap.v_names == m.v_names
        qa, va = C.approximate_state(m, ap, q, v)

        @jax.jit
        def bundle(qa, va, a):
            tau = C.crnea(ap, qa, va, a)
            return dict(
                tau=tau,
                tau_proj=C.projected_rnea(ap, qa, va, a),
                acc=C.caba(ap, qa, va, tau),
                acc_proj=C.projection_fd(ap, qa, va, tau),
                L=C.cefpa(ap, qa, ees),
                L_proj=C.projected_osim(ap, qa, ees),
            )

        r = bundle(qa, va, a)
        assert _rel(r["tau"], r["tau_proj"]) < 1e-12
        assert _rel(r["acc"], a) < 1e-10
        assert _rel(r["acc_proj"], a) < 1e-10
        assert _rel(r["L"], r["L_proj"]) < 1e-10
        err = _rel(r["tau"], exact)
        assert err > 1e-8 if kind == "none" else err < 0.5  # approximate, not exact
    # reflected inertia of the hip-z gear: N^2 J_zz
    ap = C.approximate_model(m, "diagonal")
    g = ap.topo.cluster_group[0]
    assert float(ap.params[g]["armature"][0, 0, 0]) == pytest.approx(36 * 1.6841e-4, rel=1e-12)
    # block-diagonal keeps knee + ankle together with the full 2x2 block
    ab = C.approximate_model(m, "block_diagonal")
    last = ab.params[ab.topo.cluster_group[-1]]["armature"][-1]
    assert last.shape == (2, 2) and abs(last[0, 1]) > 0
    with pytest.raises(ValueError, match="implicit loop"):
        C.approximate_model(model_of("four_bar"))


# ----------------------------------------------------------------------------- derivatives


def _tangent(m, q, dy):
    """Cluster-state tangent of the manifold curve ``y -> y + h dy``: ``dy`` on explicit and
    one-joint clusters, ``G dy`` (spanning coordinates) on implicit ones."""
    s = C.spanning_state(m, q)
    dqs = s.G @ dy
    parts = []
    for g in m.topo.groups:
        if g.type == "implicit":
            parts.append(dqs[g.qidx].reshape(-1))
        else:
            assert g.nqc == g.ny  # one-DoF joints / explicit clusters
            parts.append(dy[g.v0 : g.v0 + g.nc * g.ny])
    return jnp.concatenate(parts)


def _manifold_point(m, q, dy, h):
    """Independent coordinates moved by ``h dy``, dependents re-projected (Newton)."""
    parts = []
    for g in m.topo.groups:
        qc = q[g.q0 : g.q0 + g.nc * g.nqc].reshape(g.nc, g.nqc)
        dyc = dy[g.v0 : g.v0 + g.nc * g.ny].reshape(g.nc, g.ny)
        if g.type == "implicit":
            qc = qc + h * jnp.einsum(
                "cdy,cy->cd", jnp.asarray(g.static["Pi"]), dyc * g.static["scale"]
            )
        else:
            qc = qc + h * dyc
        parts.append(qc.reshape(-1))
    return C.project_configuration(m, jnp.concatenate(parts), iters=40)


@pytest.mark.parametrize("name", sweep(["planar_leg_linkage", "pbt_chain"], {"pbt_chain"}))
def test_autodiff_matches_finite_differences_on_manifold(name):
    """JAX derivatives (forward and reverse mode) of C-RNEA / C-ABA along the constraint
    manifold agree with central differences through the Newton projection; the map to the
    spanning tree (``qdot = G v``, ``qddot = G a + g``) agrees with differences along the
    trajectory ``y(t) = y0 + v t + a t^2 / 2``."""
    # planar_leg_linkage: a plain joint + an implicit four-bar cluster; pbt_chain: belt pairs
    # and a geared link (explicit clusters)
    m = short_model_of(name)
    (q,), (v,), (a,), _ = _states(m, 7, batch=1)
    dy = jnp.cos(jnp.arange(m.nv) + 0.3)
    w = jnp.sin(jnp.arange(m.nv) + 1.0)
    h, h2 = 1e-5, 1e-3

    @jax.jit
    def traj(q, v, a):
        pts = jax.vmap(
            lambda t: C.spanning_configuration(m, _manifold_point(m, q, v + 0.5 * t * a, t))
        )(jnp.array([h2, 0.0, -h2]))
        return pts, C.spanning_state(m, q, v, a)

    pts, s = traj(q, v, a)
    assert _rel((pts[0] - pts[2]) / (2 * h2), s.v) < 1e-5
    assert _rel((pts[0] - 2 * pts[1] + pts[2]) / h2**2, s.a) < 1e-4
    assert _rel(s.v, s.G @ v) < 1e-14 and _rel(s.a, s.G @ a + s.g) < 1e-14

    @jax.jit
    def run(q, v, a):
        dq = _tangent(m, q, dy)
        _, dtau = jax.jvp(lambda x: C.crnea(m, x, v, a), (q,), (dq,))
        gq = jax.grad(lambda x: w @ C.caba(m, x, v, a))(q)  # reverse mode
        dtau_dv = jax.jacfwd(lambda vv: C.crnea(m, q, vv, a))(v)

        def at(hh):
            qh = _manifold_point(m, q, dy, hh)
            return (
                C.crnea(m, qh, v, a),
                w @ C.caba(m, qh, v, a),
                C.crnea(m, q, v + hh * dy, a),
                C.loop_constraints(m, qh)[0],
            )

        fd = jax.vmap(at)(jnp.array([h, -h]))
        _, K, _ = C.loop_constraints(m, q)
        s = C.spanning_state(m, q)
        return dtau, gq @ dq, dtau_dv @ dy, fd, K @ s.G

    dtau, dacc, dtau_v, fd, KG = run(q, v, a)
    assert np.max(np.abs(np.asarray(KG))) < 1e-12  # G spans the null space of K
    assert np.max(np.abs(np.asarray(fd[3]))) < 1e-12  # FD points are valid
    assert _rel(dtau, (fd[0][0] - fd[0][1]) / (2 * h)) < 1e-6
    assert _rel(dacc, (fd[1][0] - fd[1][1]) / (2 * h)) < 1e-6
    assert _rel(dtau_v, (fd[2][0] - fd[2][1]) / (2 * h)) < 1e-6


# ----------------------------------------------------------------------------- errors


def _four_bar_text():
    return robots.path("four_bar").read_text()


def test_urdf_plus_errors():
    txt = _four_bar_text()
    bad = txt.replace('<successor link="link3">', '<successor link="nope">')
    with pytest.raises(ValueError, match=r'URDF\+ <loop name="loop1"> <successor>: no link named'):
        C.load_urdf_plus(bad)
    bad = txt.replace('independent="true"', 'independent="maybe"')
    with pytest.raises(ValueError, match=r'<joint name="joint1">: independent=.maybe.'):
        C.load_urdf_plus(bad)
    # points that never meet: out-of-plane gap
    bad = txt.replace(
        '<origin xyz="0.5 0.0 0.0"/>\n        </successor>',
        '<origin xyz="0.5 0.0 0.3"/>\n        </successor>',
    )
    with pytest.raises(ValueError, match="never meet"):
        C.load_urdf_plus(bad)
    # too many dependent coordinates for one loop
    bad = txt.replace('independent="true"', 'independent="false"')
    with pytest.raises(ValueError, match="flagged dependent"):
        C.load_urdf_plus(bad)
    chain = robots.path("revolute_rotor_chain").read_text()
    with pytest.raises(
        ValueError, match=r'<coupling name="transmission2">: expected exactly one <ratio>'
    ):
        C.load_urdf_plus(
            chain.replace(
                '<ratio value="6.0"/>\n    </coupling>\n\n    <coupling name="transmission3"',
                '</coupling>\n\n    <coupling name="transmission3"',
            )
        )
    with pytest.raises(
        ValueError, match=r"<coupling name=\"transmission1\"> <ratio value>: cannot parse"
    ):
        C.load_urdf_plus(chain.replace('<ratio value="6.0"/>', '<ratio value="six"/>', 1))
    with pytest.raises(ValueError, match="unsupported coupling type"):
        C.load_urdf_plus(chain.replace('type="rolling"', 'type="sliding"', 1))


def test_urdf_plus_float32_range_names_the_coupling():
    """A gear ratio beyond float32's range, loaded in float32, is refused naming the coupling
    (it made the cluster's velocity map infinite, and the dynamics NaN); fine in float64."""
    chain = robots.path("revolute_rotor_chain").read_text()
    bad = chain.replace('<ratio value="6.0"/>', '<ratio value="1e39"/>', 1)
    with enable_x64(False):
        with pytest.raises(
            ValueError,
            match=r'URDF\+ <coupling name="transmission1"> \(velocity map, from the ratios\): '
            r"G 1e\+39 is not representable in float32.*jax_enable_x64",
        ):
            C.load_urdf_plus(bad)
        m32 = C.load_urdf_plus(chain)  # the file as shipped loads in float32
        assert all(np.isfinite(np.asarray(v)).all() for p in m32.params for v in p.values())
    m = C.load_urdf_plus(bad)
    assert np.asarray(m.params[0]["G"]).dtype == np.float64
    assert np.max(np.abs(np.asarray(m.params[0]["G"]))) == 1e39


def test_outside_parents_in_two_clusters_is_an_error():
    m = model_of("revolute_rotor_chain")
    # link-0's parent is the world, link-2's parent is link-1 (another cluster)
    with pytest.raises(ValueError, match="parents outside it in 2 different clusters"):
        C.build(
            robots.path("revolute_rotor_chain"),
            [
                C.geared_transmission("joint1", "joint1r", 6.0),
                C.Cluster(("link-0", "link-2"), name="bad"),
            ],
        )
    with pytest.raises(ValueError, match="not a one-DoF"):
        C.build(
            jaxdyn.robots.random_urdf(4, seed=0, joint_types=("spherical",)),
            [C.LinearConstraint(("joint1", "joint2"), ((1.0, -1.0),))],
        )
    with pytest.raises(ValueError, match="no moving joint named"):
        C.build(robots.path("four_bar"), [C.geared_transmission("joint1", "nope", 2.0)])
    with pytest.raises(ValueError, match=r"crnea: v has shape \(2,\), expected \(nv\)=\(3\)"):
        C.crnea(m, jnp.zeros(3), jnp.zeros(2), jnp.zeros(3))
    with pytest.raises(ValueError, match="K has shape"):
        C.LinearConstraint(("a", "b"), ((1.0, 2.0, 3.0),))


def test_tello_differentials():
    m = model_of("tello")
    assert [m.topo.groups[g].type for g in m.topo.cluster_group] == (
        ["linear"] * 2 + ["implicit"] * 4
    )

    @jax.jit
    def f(key):
        q = C.random_configuration(m, key, scale=0.6)
        s = C.spanning_state(m, q)
        return s.q, s.G, C.loop_constraints(m, q)[0]

    qs, G, phi = f(jax.random.PRNGKey(9))
    assert np.max(np.abs(np.asarray(phi))) < 1e-12
    # independent velocity of a differential = post-gearbox rotor speed: rotor rows of G = N I
    jn = m.tree.joint_names
    r1 = jn.index("left-hip-clamp-to-hip-rotor-1")
    c = m.v_names.index("left-hip-clamp-to-hip-rotor-1")
    assert float(G[r1, c]) == pytest.approx(6.0)
    idx = [
        r1,
        jn.index("left-hip-clamp-to-hip-rotor-2"),
        jn.index("left-hip-clamp-to-gimbal"),
        jn.index("left-gimbal-to-thigh"),
    ]
    np.testing.assert_allclose(
        np.asarray(C.tello_hip_differential_phi(np.asarray(qs)[idx])), 0.0, atol=1e-12
    )


# ----------------------------------------------------------------------------- folded rotors

FOLDED = ("mini_cheetah", "mit_humanoid", "gt_chain", "pbt_chain", "tello")


@pytest.mark.parametrize("name", sweep(FOLDED, {"gt_chain"}))
def test_caba_with_rotors_carried_by_parents(name):
    """Axisymmetric rotors folded into their parents (jaxdyn.clusters.rotors): C-ABA and C-RNEA
    on the link tree with exact rotor terms equal the general single-output algorithms (reached
    here through a zero external force), the projection method / projected RNEA and each other,
    in values and in derivatives, float64 and float32."""
    m = short_model_of(name)
    assert m.rotors_folded and m.topo.fold.tree_topo.nb < m.nb  # the folded path is taken
    q, v, a, _ = _states(m, 3)
    zero = jnp.zeros((m.nb, 6))

    def one(q, v, a):
        tau = C.crnea(m, q, v, a)
        rnea_gen = lambda q, v, a: C.crnea(m, q, v, a, zero)  # noqa: E731
        fold = lambda q, v, t: C.caba(m, q, v, t)  # noqa: E731
        gen = lambda q, v, t: C.caba(m, q, v, t, zero)  # noqa: E731
        return dict(
            a=fold(q, v, tau),
            a_gen=gen(q, v, tau),
            a_proj=C.projection_fd(m, q, v, tau),
            tau=tau,
            tau_gen=rnea_gen(q, v, a),
            tau_proj=C.projected_rnea(m, q, v, a),
            Jt=jax.jacfwd(lambda q, v, a: C.crnea(m, q, v, a), (0, 1, 2))(q, v, a),
            Jt_gen=jax.jacfwd(rnea_gen, (0, 1, 2))(q, v, a),
            J=jax.jacfwd(fold, (0, 1, 2))(q, v, tau),
            J_gen=jax.jacfwd(gen, (0, 1, 2))(q, v, tau),
        )

    r = jax.jit(jax.vmap(one))(q, v, a)
    assert _rel(r["a"], a) < 1e-10
    assert _rel(r["a"], r["a_gen"]) < 1e-10
    assert _rel(r["a"], r["a_proj"]) < 1e-10
    # d/dq along the manifold: a free joint's quaternion moves on the unit sphere (off it, the
    # two paths extend the function differently)
    P = np.broadcast_to(np.eye(m.nq), (len(q), m.nq, m.nq)).copy()
    for g in m.topo.groups:
        if g.nqc == 7:
            for c in range(g.nc):
                k = g.q0 + 7 * c + 3
                u = np.asarray(q[:, k : k + 4])
                P[:, k : k + 4, k : k + 4] -= u[:, :, None] * u[:, None, :]
    assert _rel(r["tau"], r["tau_gen"]) < 1e-10
    assert _rel(r["tau"], r["tau_proj"]) < 1e-10
    for k in ("J", "Jt"):
        assert _rel(r[k][0] @ P, r[k + "_gen"][0] @ P) < 1e-9
        for x, y in zip(r[k][1:], r[k + "_gen"][1:]):
            assert _rel(x, y) < 1e-9
    q32, v32 = q.astype(jnp.float32), v.astype(jnp.float32)
    tau = r["tau"]  # C-RNEA of the folded model, float64
    a32 = jax.jit(jax.vmap(lambda q, v, t: C.caba(m, q, v, t)))(q32, v32, tau.astype(jnp.float32))
    assert a32.dtype == jnp.float32 and _rel(a32, a) < 1e-3


def test_rotor_folding_only_where_exact():
    """Rotors that are not symmetric about their axis are not folded (and stay exact); a model
    folded while they were, whose rotor is made asymmetric afterwards, is refused by the value
    check instead of computing with the folded terms; models passed as traced arguments take
    the folded path (the plan is static) and stay exact."""
    import equinox as eqx

    m = model_of("mini_cheetah")
    rb = m.tree.topo.body_names.index("FR_knee_rotor")
    I = np.array(m.tree.inertia)
    I[rb, 0, 1] = I[rb, 1, 0] = 1e-6  # off-axis product of inertia: not axisymmetric
    unfolded = eqx.tree_at(lambda mm: mm.tree.inertia, C.fold_rotors(m, False), jnp.asarray(I))
    m2 = C.fold_rotors(unfolded)
    assert m.rotors_folded and not m2.rotors_folded
    q, v, a, _ = _states(m2, 4)
    bad = eqx.tree_at(lambda mm: mm.tree.inertia, m, jnp.asarray(I))  # keeps the fold plan
    with pytest.raises(Exception, match="no longer symmetric about its axis"):
        C.caba(bad, q[0], v[0], a[0])
    # the models as traced arguments; C-EFPA folds too, except with an end effector on a rotor
    ees_link, ees_rotor = ("FR_knee_link", "HL_knee_link"), ("FR_knee_rotor", "HL_knee_link")

    @jax.jit
    @functools.partial(jax.vmap, in_axes=(None, None, 0, 0, 0))
    def run(m, m2, q, v, a):
        tau2 = C.crnea(m2, q, v, a)
        tau = C.crnea(m, q, v, a)
        return dict(
            a2=C.caba(m2, q, v, tau2),
            a=C.caba(m, q, v, tau),
            L=[C.cefpa(m, q, e) for e in (ees_link, ees_rotor)],
            L_ref=[C.projected_osim(m, q, e) for e in (ees_link, ees_rotor)],
        )

    r = run(m, m2, q, v, a)
    assert _rel(r["a2"], a) < 1e-10
    assert _rel(r["a"], a) < 1e-10 and r["a"].shape == a.shape
    for L, L_ref in zip(r["L"], r["L_ref"]):
        assert _rel(L, L_ref) < 1e-10

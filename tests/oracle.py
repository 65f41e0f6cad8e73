"""Pinocchio oracle for the jaxdyn test suite.

Everything here returns numpy arrays in *jaxdyn* order (joint order, ``[ω; v]`` spatial
vectors, ``[x y z qw qx qy qz]`` free-flyer configurations), so a test compares
``jaxdyn_result[key]`` with ``pinocchio_result[key]`` directly.

A :class:`Case` bundles one robot: the jaxdyn model, a Pinocchio model of the same robot (built
from the same URDF text by Pinocchio's parser, or -- for the joint types URDF lacks -- by
:func:`pin_model_from_urdf`), the converter, a few random states and cached results.
jaxdyn is evaluated by *one* jitted function per case that returns every quantity the tests
need (XLA compile time dominates the suite, so each (robot, dtype) is traced and compiled
once).
"""

from __future__ import annotations

import functools
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import jaxdyn
from jaxdyn import robots, value_checks
from jaxdyn.algorithms.rnea import LOCAL_MIN_BATCH
from jaxdyn.interop.pinocchio import Converter

# --------------------------------------------------------------------------- tolerances
#: float64 agreement with Pinocchio, relative to ``max(1, max|ref|)``.
RTOL64 = 1e-10
#: float64 algebraic identities inside jaxdyn (same scaling).
RTOL_ID = 1e-10

# --------------------------------------------------------------------------- robots
#: Robots compared with Pinocchio (example-robot-data and bundled).
ROBOTS = (
    "ur5",
    "panda",
    "solo12",
    "anymal",
    "hyq",
    "talos_reduced",
    "talos_full",
    "romeo",
    "arm7",
    "quad12",
)
#: Robots whose joint-space inertia matrix is singular (massless finger chains).
SINGULAR_M = ("romeo",)

#: Robots whose parametrized cases run only in the slow set (``-m slow``): every robot is a
#: separate XLA compile of each algorithm. The default run keeps the bundled arm7 (fixed base)
#: and quad12 (floating base), example-robot-data's solo12 (a file parsed by Pinocchio too) and
#: the random trees (every joint kind); the slow set adds the rest of example-robot-data and
#: the variants of a few module-local case lists (a 25-link random chain, more IIM inputs).
#: Every case built on talos (``talos_*``) is slow as well.
SLOW_ROBOTS = frozenset(
    ("ur5", "panda", "anymal", "hyq", "talos_reduced", "talos_full", "romeo", "double_pendulum")
    + ("tree-chain25", "hand_tips", "quad12_mixed", "pendulum_full")
)


def is_slow_robot(name) -> bool:
    """``name`` is in :data:`SLOW_ROBOTS` or names a case built on talos."""
    return isinstance(name, str) and (name in SLOW_ROBOTS or name.startswith("talos"))


def robot_params(*names, slow=()):
    """Parameters for ``@pytest.mark.parametrize`` over robot names (or case names): the robots
    of the slow tier (:func:`is_slow_robot`) and those named in ``slow`` carry
    ``pytest.mark.slow``, the others are the plain names (test ids are the names either way)."""
    unknown = set(slow) - set(names)
    assert not unknown, f"robot_params: slow names not among the names: {sorted(unknown)}"
    return [
        pytest.param(n, marks=pytest.mark.slow) if is_slow_robot(n) or n in slow else n
        for n in names
    ]


#: Frames whose Jacobians are compared: end effectors / feet, hands, an intermediate link or
#: joint, the root link (ur5, arm7: attached to the world, a zero Jacobian; quad12: the free
#: flyer's body). Every frame's placement is compared anyway (``frame_R``, ``frame_p``).
JAC_FRAMES = {
    "ur5": ("tool0", "base_link"),
    "panda": ("panda_hand", "panda_leftfinger"),
    "solo12": ("FL_FOOT", "HL_KFE"),
    "anymal": ("LF_FOOT", "LH_SHANK"),
    "hyq": ("rh_foot", "lh_kfe_joint"),
    "talos_reduced": ("left_sole_link", "gripper_left_motor_double_link"),
    "talos_full": ("right_sole_link", "gripper_left_fingertip_3_link"),
    "romeo": ("l_sole", "LThumb3Link"),
    "arm7": ("ee", "link3", "base"),
    "quad12": ("FL_FOOT", "base_link"),
}

REFERENCES = {
    "local": pin.ReferenceFrame.LOCAL,
    "world": pin.ReferenceFrame.WORLD,
    "local_world_aligned": pin.ReferenceFrame.LOCAL_WORLD_ALIGNED,
}


# --------------------------------------------------------------------------- comparisons
def scaled_error(actual, ref) -> float:
    """``max|actual - ref| / max(1, max|ref|)`` (inf when shapes differ or values are NaN)."""
    actual, ref = np.asarray(actual, np.float64), np.asarray(ref, np.float64)
    if actual.shape != ref.shape:
        return np.inf
    if actual.size == 0:
        return 0.0
    err = np.max(np.abs(actual - ref))
    if not np.isfinite(err):
        return np.inf
    return float(err / max(1.0, float(np.max(np.abs(ref)))))


def far_from_origin(model, q):
    """``q`` with a floating base moved 3.7 m away from the world origin (a distant origin
    costs precision unless the computation is centred); fixed-base ``q`` unchanged."""
    if not model.topo.floating_base:
        return q
    return q.at[:3].add(jnp.asarray([3.0, -2.0, 1.0], q.dtype))


def assert_close(actual, ref, rtol, err_msg=""):
    """``max|actual - ref| <= rtol * max(1, max|ref|)``, with shape and finiteness checked."""
    actual, ref = np.asarray(actual), np.asarray(ref)
    assert actual.shape == ref.shape, f"{err_msg}: shape {actual.shape} != {ref.shape}"
    assert np.all(np.isfinite(ref)), f"{err_msg}: the reference is not finite"
    assert np.all(np.isfinite(actual)), f"{err_msg}: result is not finite: {actual}"
    scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
    np.testing.assert_allclose(actual, ref, rtol=0, atol=rtol * scale, err_msg=err_msg)


def sym_upper(M):
    """Pinocchio fills only the upper triangle of ``M`` and ``M^-1``."""
    M = np.asarray(M)
    return np.triu(M) + np.triu(M, 1).T


# --------------------------------------------------------------------------- oracle sweeps
# shared by the Pinocchio comparisons of test_rnea, test_aba, test_kinematics and test_pinocchio:
# every quantity of a case comes from one compiled function (``Case.jx``, cached on the case for
# the session), so the files that compare parts of it compile it once per process

#: the test files of these sweeps: under pytest-xdist one worker runs them all (the scheduler in
#: tests/conftest.py), so each robot's function compiles once per run, not once per worker
SHARED_WORKER_FILES = (
    "test_rnea.py",
    "test_crba.py",
    "test_aba.py",
    "test_kinematics.py",
    "test_pinocchio.py",
)
#: the random states of a case compared with Pinocchio
STATES = (0, 1)
#: the named robots of the Pinocchio sweeps: arm7 (fixed base) and quad12 (floating base) by
#: default; solo12 (example-robot-data's file, floating base: one more compile of every
#: algorithm) is in the slow set here -- its model is compared with Pinocchio's by the default
#: tests of test_model, test_configuration, test_joint_properties and its derivatives by
#: test_derivatives
NAMED = robot_params(*ROBOTS, slow=("solo12",))
#: the robots of :data:`NAMED` with a positive-definite mass matrix
PD_NAMED = robot_params(*(r for r in ROBOTS if r not in SINGULAR_M), slow=("solo12",))

DYNAMICS_KEYS = ("rnea", "rnea_fext", "rnea_fext_world", "bias", "gravity", "crba")
FORWARD_KEYS = ("aba", "aba_fext", "aba_sweeps", "aba_dense", "minv", "minv_sweeps", "minv_dense")
KINEMATIC_KEYS = ("com", "ke", "pe", "joint_jacobians", "body_R", "body_p")


def compare(case, i, keys, rtol=RTOL64):
    """jaxdyn's ``keys`` against Pinocchio's at state ``i`` of ``case``."""
    jx, pn = case.jx(i), case.pin(i)
    for k in keys:
        assert_close(jx[k], pn[k], rtol, err_msg=f"{case.name} state {i}: {k}")


def compare_frames(case, i, rtol=RTOL64):
    """Every frame present in both models, by name."""
    jx, pn = case.jx(i), case.pin(i)
    index = {n: f for f, n in enumerate(case.model.frame_names)}
    assert pn["frames_R"], f"{case.name}: no frame matched"
    for name in pn["frames_R"]:
        f = index[name]
        assert_close(
            jx["frame_R"][f],
            pn["frames_R"][name],
            rtol,
            err_msg=f"{case.name} state {i}: rotation of frame {name!r}",
        )
        assert_close(
            jx["frame_p"][f],
            pn["frames_p"][name],
            rtol,
            err_msg=f"{case.name} state {i}: position of frame {name!r}",
        )


def compare_jacobians(case, i, rtol=RTOL64):
    """``frame_placement`` and the frame Jacobians in every reference of the case's frames."""
    jx, pn = case.jx(i), case.pin(i)
    assert case.jac_frames, case.name
    for f in case.jac_frames:
        for part in ("R", "p"):
            k = f"placement/{f}/{part}"
            assert_close(jx[k], pn[k], rtol, err_msg=f"{case.name} state {i}: frame_placement {f}")
        for ref in ("local", "world", "local_world_aligned"):
            k = f"jac/{f}/{ref}"
            assert_close(jx[k], pn[k], rtol, err_msg=f"{case.name} state {i}: jacobian {f} {ref}")


# --------------------------------------------------------------------------- URDF helpers
def urdf_text(name_or_path) -> str:
    path, _ = robots.resolve(name_or_path)
    return path.read_text()


def urdf_link_masses(xml: str) -> dict:
    """``{link: mass}`` read with ElementTree (links without ``<inertial>`` weigh 0)."""
    root = ET.fromstring(xml)
    out = {}
    for link in root.findall("link"):
        m = link.find("inertial/mass")
        out[link.get("name")] = 0.0 if m is None else float(m.get("value"))
    return out


def urdf_joints(xml: str) -> dict:
    """``{joint: (type, parent link, child link)}`` read with ElementTree."""
    root = ET.fromstring(xml)
    return {
        j.get("name"): (j.get("type"), j.find("parent").get("link"), j.find("child").get("link"))
        for j in root.findall("joint")
    }


def _floats(text, n):
    return np.zeros(n) if text is None else np.array([float(x) for x in text.split()])


def _origin_se3(el) -> pin.SE3:
    o = el.find("origin")
    if o is None:
        return pin.SE3.Identity()
    xyz, rpy = _floats(o.get("xyz"), 3), _floats(o.get("rpy"), 3)
    return pin.SE3(pin.rpy.rpyToMatrix(*rpy), xyz)


def _rotation_with_x(a):
    """A rotation matrix whose first column is the unit vector ``a``."""
    t = np.eye(3)[np.argmin(np.abs(a))]
    y = np.cross(a, t)
    y /= np.linalg.norm(y)
    return np.column_stack([a, y, np.cross(a, y)])


def pin_model_from_urdf(xml: str, floating: bool) -> pin.Model:
    """A Pinocchio model written joint by joint from URDF text (ElementTree + Pinocchio only).

    Unlike ``pin.buildModelFromXML`` it accepts jaxdyn's ``spherical`` and inner ``floating``
    joints; unlike ``jaxdyn.interop.pinocchio.build_pinocchio_model`` it does not read
    anything jaxdyn computed. Joints are added depth first in document order (Pinocchio's
    CRBA and ``computeMinverse`` need every subtree's velocity coordinates contiguous); fixed
    joints are merged into the moving body; every link (BODY) and joint (JOINT / FIXED_JOINT)
    becomes a frame, as in Pinocchio's URDF parser.
    """
    root = ET.fromstring(xml)
    links = {l.get("name"): l for l in root.findall("link")}
    children = {n: [] for n in links}
    is_child = set()
    for j in root.findall("joint"):
        children[j.find("parent").get("link")].append(j)
        is_child.add(j.find("child").get("link"))
    (root_link,) = [n for n in links if n not in is_child]
    pm = pin.Model()
    pm.name = root.get("name")
    jid, parent_frame = 0, 0
    if floating:
        jid = pm.addJoint(0, pin.JointModelFreeFlyer(), pin.SE3.Identity(), "root_joint")
        parent_frame = pm.addJointFrame(jid, 0)

    def attach(name, jid, M, parent_frame):
        """Link ``name`` placed at ``M`` in joint ``jid``'s frame."""
        link = links[name]
        inertial = link.find("inertial")
        if inertial is not None:
            Mi = _origin_se3(inertial)
            mass = float(inertial.find("mass").get("value"))
            el = inertial.find("inertia")
            g = {k: float(el.get(k, "0")) for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
            I = np.array(
                [
                    [g["ixx"], g["ixy"], g["ixz"]],
                    [g["ixy"], g["iyy"], g["iyz"]],
                    [g["ixz"], g["iyz"], g["izz"]],
                ]
            )
            Y = pin.Inertia(mass, Mi.translation, Mi.rotation @ I @ Mi.rotation.T)
            pm.appendBodyToJoint(jid, Y, M)
        body = pm.addFrame(pin.Frame(name, jid, parent_frame, M, pin.FrameType.BODY))
        for j in children[name]:
            jtype, child = j.get("type"), j.find("child").get("link")
            Mj = M * _origin_se3(j)
            if jtype == "fixed":
                f = pm.addFrame(pin.Frame(j.get("name"), jid, body, Mj, pin.FrameType.FIXED_JOINT))
                attach(child, jid, Mj, f)
                continue
            ax = j.find("axis")
            axis = np.array([1.0, 0.0, 0.0]) if ax is None else _floats(ax.get("xyz"), 3)
            axis = axis / np.linalg.norm(axis)
            # the child's frame in the Pinocchio joint's frame (not the identity only for
            # continuous joints: Python cannot set the axis of RevoluteUnboundedUnaligned, so
            # the joint frame is rotated to put the axis on x and the child rotated back)
            Mc = pin.SE3.Identity()
            if jtype == "continuous":
                Ra = _rotation_with_x(axis)
                Mj, Mc = Mj * pin.SE3(Ra, np.zeros(3)), pin.SE3(Ra.T, np.zeros(3))
            jm = {
                "revolute": lambda: pin.JointModelRevoluteUnaligned(*axis),
                "continuous": pin.JointModelRUBX,
                "prismatic": lambda: pin.JointModelPrismaticUnaligned(*axis),
                "spherical": pin.JointModelSpherical,
                "floating": pin.JointModelFreeFlyer,
            }[jtype]()
            cj = pm.addJoint(jid, jm, Mj, j.get("name"))
            f = pm.addFrame(pin.Frame(j.get("name"), cj, body, Mc, pin.FrameType.JOINT))
            attach(child, cj, Mc, f)

    attach(root_link, jid, pin.SE3.Identity(), parent_frame)
    return pm


# --------------------------------------------------------------------------- the case
@dataclass
class Case:
    name: str
    model: jaxdyn.Model
    pin_model: pin.Model
    conv: Converter
    xml: str | None
    #: jaxdyn frame name -> Pinocchio frame id
    pin_frames: dict
    jac_frames: tuple
    states: list
    _jx: dict = field(default_factory=dict, repr=False)
    _pin: dict = field(default_factory=dict, repr=False)
    _fns: dict = field(default_factory=dict, repr=False)

    @property
    def floating(self) -> bool:
        return self.model.floating_base

    # ----------------------------------------------------------------- jaxdyn side
    def all_fn(self):
        """The jitted ``f(model, q, v, a, tau, f_ext) -> dict`` of every compared quantity,
        traced without value checks (``value_checks.unchecked``: trace time only, JAX's caches
        untouched): the quaternion-norm ``error_if`` of each of its dozens of calls doubled the
        compile time of such programs (a random tree's 10.3 against 5.3 s), and the checks are
        tested by themselves (test_errors, test_config); the quaternions are normalised
        either way."""
        frames = self.jac_frames

        def unchecked(*args):
            with value_checks.unchecked():
                return _jaxdyn_all(*args, frames=frames)

        return self.jit("all", unchecked)

    def jit(self, key: str, fn):
        """``jax.jit(fn)`` cached on the case under ``key`` (so it is traced once per dtype)."""
        if key not in self._fns:
            self._fns[key] = jax.jit(fn)
        return self._fns[key]

    def jx(self, i: int, dtype=np.float64) -> dict:
        """jaxdyn results (numpy) at state ``i`` with inputs cast to ``dtype``."""
        key = (i, np.dtype(dtype).name)
        if key not in self._jx:
            s = self.states[i]
            args = [np.asarray(s[k], dtype) for k in ("q", "v", "a", "tau", "f_ext")]
            out = self.all_fn()(self.model, *args)
            self._jx[key] = jax.tree_util.tree_map(np.asarray, out)
        return self._jx[key]

    # ----------------------------------------------------------------- Pinocchio side
    def pin(self, i: int) -> dict:
        if i not in self._pin:
            self._pin[i] = pinocchio_all(self, self.states[i])
        return self._pin[i]


def _jaxdyn_all(model, q, v, a, tau, f_ext, *, frames):
    nv = model.nv
    z = jnp.zeros((1, nv), q.dtype)
    # one (batched) RNEA for g(q) = rnea(q, 0, 0), the columns of M plus g(q) (rnea(q, 0, e_i)),
    # rnea(q, v, a), the bias rnea(q, v, 0) and rnea(q, v, a, f_ext): XLA compile time grows
    # with every call site. Padded to the batch from which RNEA takes its body form
    # (rnea.LOCAL_MIN_BATCH); the single call with f_ext checks the world form.
    n = nv + 4
    pad = jnp.zeros((max(0, LOCAL_MIN_BATCH - n), nv), q.dtype)
    vs = jnp.concatenate([z, jnp.zeros((nv, nv), q.dtype), v[None], v[None], v[None], pad], 0)
    accs = jnp.concatenate([z, jnp.eye(nv, dtype=q.dtype), a[None], z, a[None], pad], 0)
    fes = jnp.zeros((vs.shape[0],) + f_ext.shape, f_ext.dtype).at[nv + 3].set(f_ext)
    rows = jax.vmap(lambda v, a, fe: jaxdyn.rnea(model, q, v, a, fe))(vs, accs, fes)
    out = {
        "gravity": rows[0],
        "rnea_unit": rows[: nv + 1],
        "rnea": rows[nv + 1],
        "bias": rows[nv + 2],
        "rnea_fext": rows[nv + 3],
        "rnea_fext_world": jaxdyn.rnea(model, q, v, a, f_ext),
        "crba": jaxdyn.crba(model, q),
        "aba": jaxdyn.aba(model, q, v, tau),
        "aba_fext": jaxdyn.aba(model, q, v, tau, f_ext),
        # both algorithms whatever "auto" picks for this tree and dtype
        "aba_sweeps": jaxdyn.aba(model, q, v, tau, method="sweeps"),
        "aba_dense": jaxdyn.aba(model, q, v, tau, method="dense"),
        "minv": jaxdyn.minv(model, q),
        "minv_sweeps": jaxdyn.minv(model, q, method="sweeps"),
        "minv_dense": jaxdyn.minv(model, q, method="dense"),
        "joint_jacobians": jaxdyn.joint_jacobians(model, q),
        "com": jaxdyn.center_of_mass(model, q),
        "ke": jaxdyn.kinetic_energy(model, q, v),
        "pe": jaxdyn.potential_energy(model, q),
    }
    fk = jaxdyn.forward_kinematics(model, q)
    out["body_R"], out["body_p"] = fk.body.R, fk.body.p
    out["frame_R"], out["frame_p"] = fk.frame.R, fk.frame.p
    for f in frames:
        R, p = jaxdyn.frame_placement(model, q, f)
        out[f"placement/{f}/R"], out[f"placement/{f}/p"] = R, p
        for ref in REFERENCES:
            out[f"jac/{f}/{ref}"] = jaxdyn.jacobian(model, q, f, ref)
    return out


def pinocchio_all(case: Case, s: dict) -> dict:
    """Every compared quantity from Pinocchio at state ``s`` (jaxdyn order)."""
    pm, c = case.pin_model, case.conv
    pd = pm.createData()
    q = c.q_to_pin(np.asarray(s["q"], np.float64))
    v, a, tau = (c.v_to_pin(np.asarray(s[k], np.float64)) for k in ("v", "a", "tau"))
    fext = c.f_ext_to_pin(np.asarray(s["f_ext"], np.float64))
    zero = np.zeros(pm.nv)
    out = {
        "rnea": c.v_from_pin(pin.rnea(pm, pd, q, v, a).copy()),
        "rnea_fext": c.v_from_pin(pin.rnea(pm, pd, q, v, a, fext).copy()),
        "rnea_fext_world": c.v_from_pin(pin.rnea(pm, pd, q, v, a, fext).copy()),
        "crba": c.matrix_from_pin(sym_upper(pin.crba(pm, pd, q))),
        "aba": c.v_from_pin(pin.aba(pm, pd, q, v, tau).copy()),
        "aba_sweeps": c.v_from_pin(pin.aba(pm, pd, q, v, tau).copy()),
        "aba_dense": c.v_from_pin(pin.aba(pm, pd, q, v, tau).copy()),
        "aba_fext": c.v_from_pin(pin.aba(pm, pd, q, v, tau, fext).copy()),
        "minv": c.matrix_from_pin(sym_upper(pin.computeMinverse(pm, pd, q))),
        "bias": c.v_from_pin(pin.rnea(pm, pd, q, v, zero).copy()),
        "gravity": c.v_from_pin(pin.computeGeneralizedGravity(pm, pd, q).copy()),
        "com": pin.centerOfMass(pm, pd, q).copy(),
        "ke": np.float64(pin.computeKineticEnergy(pm, pd, q, v)),
        "pe": np.float64(pin.computePotentialEnergy(pm, pd, q)),
    }
    out["minv_sweeps"] = out["minv_dense"] = out["minv"]
    # (Pinocchio returns a 1-D array when nv == 1: reshape every Jacobian to 6 x nv)
    out["joint_jacobians"] = c.jacobian_from_pin(
        np.array(pin.computeJointJacobians(pm, pd, q)).reshape(6, pm.nv)
    )
    pin.forwardKinematics(pm, pd, q)
    pin.updateFramePlacements(pm, pd)
    ids = c.pin_joint_ids
    out["body_R"] = np.stack([pd.oMi[j].rotation for j in ids])
    out["body_p"] = np.stack([pd.oMi[j].translation for j in ids])
    frame_R, frame_p = {}, {}
    for name, idx in case.pin_frames.items():
        M = pd.oMf[idx]
        frame_R[name], frame_p[name] = M.rotation.copy(), M.translation.copy()
    out["frames_R"], out["frames_p"] = frame_R, frame_p
    for f in case.jac_frames:
        idx = case.pin_frames[f]
        out[f"placement/{f}/R"], out[f"placement/{f}/p"] = frame_R[f], frame_p[f]
        for ref, pref in REFERENCES.items():
            J = pin.computeFrameJacobian(pm, pd, q, idx, pref)
            out[f"jac/{f}/{ref}"] = c.jacobian_from_pin(np.array(J).reshape(6, pm.nv))
    return out


# --------------------------------------------------------------------------- states
#: jitted once per topology (eager dispatch would compile every primitive separately)
_random_configuration = jax.jit(jaxdyn.random_configuration)


def random_states(model, seed: int, n: int = 2) -> list:
    """``n`` random states: ``q`` from :func:`jaxdyn.random_configuration`, ``v, a, tau,
    f_ext`` standard normal."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        q = np.asarray(_random_configuration(model, jax.random.PRNGKey(seed * 1000 + k)))
        out.append(
            dict(
                q=q,
                v=rng.normal(size=model.nv),
                a=rng.normal(size=model.nv),
                tau=rng.normal(size=model.nv),
                f_ext=rng.normal(size=(model.nb, 6)),
            )
        )
    return out


# --------------------------------------------------------------------------- building cases
def _match_urdf_frames(model, pm, xml) -> dict:
    """jaxdyn frame name -> Pinocchio frame: links are BODY frames, joints JOINT/FIXED_JOINT."""
    links = set(urdf_link_masses(xml))
    out = {}
    for name in model.frame_names:
        types = (
            (pin.FrameType.BODY,)
            if name in links
            else (pin.FrameType.JOINT, pin.FrameType.FIXED_JOINT)
        )
        for t in types:
            if pm.existFrame(name, t):
                out[name] = pm.getFrameId(name, t)
                break
    return out


def case_from_urdf(
    name: str, xml: str, floating: bool, seed: int, jac_frames, route: str = "urdf"
) -> Case:
    """Load ``xml`` in jaxdyn and (from the same text) in Pinocchio: with Pinocchio's URDF
    parser (``route="urdf"``) or :func:`pin_model_from_urdf` (``route="xml"``)."""
    model = jaxdyn.load_urdf(xml, floating_base=floating)
    if route == "xml":
        pm = pin_model_from_urdf(xml, floating)
    elif floating:
        pm = pin.buildModelFromXML(xml, pin.JointModelFreeFlyer())
    else:
        pm = pin.buildModelFromXML(xml)
    conv = Converter(model, pm)
    return Case(
        name,
        model,
        pm,
        conv,
        xml,
        _match_urdf_frames(model, pm, xml),
        tuple(jac_frames),
        random_states(model, seed),
    )


@functools.cache
def robot_case(name: str) -> Case:
    """A robot by name (loaded once per session)."""
    path, floating = robots.resolve(name)
    xml = path.read_text()
    seed = 1 + ROBOTS.index(name) if name in ROBOTS else 99
    return case_from_urdf(name, xml, floating, seed, JAC_FRAMES.get(name, ()))


# --------------------------------------------------------------------------- random trees
def _min_eig_ok(case: Case, rel=1e-9) -> bool:
    for s in case.states:
        pm = case.pin_model
        M = sym_upper(pin.crba(pm, pm.createData(), case.conv.q_to_pin(s["q"])))
        ev = np.linalg.eigvalsh(M)
        if not ev[0] > max(1e-8, rel * ev[-1]):
            return False
    return True


def _massless_moving_subtree(xml: str) -> bool:
    """A moving joint carries no mass at all (its child's subtree is massless): M singular."""
    masses, joints = urdf_link_masses(xml), urdf_joints(xml)
    kids = {}
    for _, p, c in joints.values():
        kids.setdefault(p, []).append(c)

    def subtree_mass(link):
        return masses[link] + sum(subtree_mass(c) for c in kids.get(link, ()))

    return any(t != "fixed" and subtree_mass(c) == 0 for t, _, c in joints.values())


def _tree_jac_frames(model) -> tuple:
    """The last URDF joint in q order (deepest) and the first."""
    names = [n for n in model.joint_names if n in model.frame_names]  # root_joint is no frame
    return tuple(dict.fromkeys((names[-1], names[0]))) if names else ()


@functools.cache
def random_tree_case(
    n: int,
    seed: int,
    floating: bool,
    route: str = "urdf",
    joint_types=("revolute", "prismatic", "continuous"),
    p_fixed=0.15,
    massless_prob=0.1,
    branching=0.5,
) -> Case:
    """A random tree with a positive-definite mass matrix (well enough conditioned for
    1e-10 agreement).

    Massless links attached by moving joints can make ``M`` singular; seeds are tried
    deterministically (``seed, seed + 7919, ...``) until the tree has a moving joint, no moving
    joint with an entirely massless subtree, and ``M`` has eigenvalues
    ``> max(1e-8, 1e-9 * max eigenvalue)`` at both test states.
    ``route="urdf"``: Pinocchio parses the same URDF text; ``route="xml"``: the Pinocchio model
    is written by :func:`pin_model_from_urdf` (needed for spherical joints).
    """
    for k in range(50):
        s = seed + 7919 * k
        xml = robots.random_urdf(
            n,
            s,
            joint_types=joint_types,
            p_fixed=p_fixed,
            massless_prob=massless_prob,
            branching=branching,
        )
        joints = urdf_joints(xml)
        if not floating and all(t == "fixed" for t, _, _ in joints.values()):
            continue  # nothing moves
        if _massless_moving_subtree(xml):
            continue  # M singular: skip before building anything
        name = f"random_{route}_n{n}_s{s}_{'float' if floating else 'fixed'}"
        case = case_from_urdf(name, xml, floating, s, (), route=route)
        case.jac_frames = tuple(dict.fromkeys(_tree_jac_frames(case.model)[:1] + (f"link{n}",)))
        if _min_eig_ok(case):
            return case
    raise RuntimeError(f"no well-conditioned random tree found for n={n}, seed={seed}")


# (n_bodies, seed, floating_base, p_fixed, massless_prob, branching): revolute, prismatic and
# continuous joints, Pinocchio parses the same URDF text
RANDOM_URDF = (
    (1, 0, False, 0.15, 0.1, 0.5),
    (3, 3, True, 0.3, 0.3, 0.9),
    (6, 5, True, 0.15, 0.3, 0.5),
    (9, 6, False, 0.3, 0.2, 0.8),
    (12, 7, True, 0.3, 0.2, 0.8),
    (25, 10, False, 0.15, 0.1, 0.2),
)
JOINT_TYPES_ALL = ("revolute", "prismatic", "spherical", "floating")
# (n_bodies, seed, floating_base): all joint kinds, Pinocchio model from pin_model_from_urdf
RANDOM_ALL_KINDS = (
    (3, 26, False),
    (5, 21, True),
    (12, 23, True),
)


def urdf_tree(params) -> Case:
    n, seed, floating, p_fixed, massless, branching = params
    return random_tree_case(
        n, seed, floating, "urdf", p_fixed=p_fixed, massless_prob=massless, branching=branching
    )


def all_kinds_tree(params) -> Case:
    n, seed, floating = params
    return random_tree_case(
        n,
        seed,
        floating,
        "xml",
        joint_types=JOINT_TYPES_ALL,
        p_fixed=0.2,
        massless_prob=0.15,
        branching=0.6,
    )


def slow_params(values, slow, ids=str) -> list:
    """``values`` as pytest parameters named by ``ids``; those whose name is in ``slow`` carry
    the slow mark (they run only in ``-m slow``, where a cheaper case of the default run checks
    the same code)."""
    out = []
    for v in values:
        name = ids(v)
        marks = (pytest.mark.slow,) if name in slow else ()
        out.append(pytest.param(v, marks=marks, id=name))
    missing = set(slow) - {ids(v) for v in values}
    assert not missing, f"slow_params: no such case {sorted(missing)}"
    return out


def tree_id(params) -> str:
    return f"n{params[0]}-s{params[1]}-{'float' if params[2] else 'fixed'}"


def jaxprs_in_params(params):
    import jax.extend

    core = getattr(jax.extend, "core", None)
    fn = getattr(core, "jaxprs_in_params", None) or jax.core.jaxprs_in_params
    return fn(params)


def enable_x64(flag: bool):
    """``jax.enable_x64(flag)``, a context manager (``jax.experimental``'s on JAX releases
    before it moved: jax 0.6.2, the oldest jaxdyn supports)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(flag)
    from jax import experimental

    return experimental.enable_x64() if flag else experimental.disable_x64()


def callbacks(jaxpr, inside_loop=False):
    """Names of the value checks of a jaxpr (jaxdyn's ``jaxdyn_check`` primitive, or the
    callbacks of ``equinox.error_if`` where that is the check): ``(outside any loop, inside a
    scan / while body)``."""
    out, ins = [], []
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if "callback" in name or name == "jaxdyn_check":
            (ins if inside_loop else out).append(name)
        loop = inside_loop or name in ("scan", "while")
        for sub in jaxprs_in_params(eqn.params):
            o, i = callbacks(sub, loop)
            out += o
            ins += i
    return out, ins


# --------------------------------------------------------------------------- identity cases
#: Identities between jaxdyn's own algorithms (test_rnea, test_crba, test_aba, test_kinematics):
#: float64 tolerances relative to ``max(1, max|ref|)``; those that go through an inverse of M are
#: justified by M's condition number (at most ~1e7, talos_full: errors ~cond * eps stay below
#: 1e-10, measured ~3e-12).
#: robots plus random trees (spherical and inner free joints, a deep chain), built on first use
IDENTITY_CASES = {name: (lambda name=name: robot_case(name)) for name in ROBOTS}
IDENTITY_CASES["tree-all-kinds"] = lambda: all_kinds_tree(RANDOM_ALL_KINDS[2])
IDENTITY_CASES["tree-chain25"] = lambda: urdf_tree(RANDOM_URDF[5])
#: the identity cases with a positive-definite mass matrix
PD_IDENTITY_CASES = [c for c in IDENTITY_CASES if c not in SINGULAR_M]

#: identity cases that run only in the slow set (besides the slow-tier robots): the Pinocchio
#: sweeps compare the dynamics of arm7 and solo12 with Pinocchio's, test_random_tree_spherical_free
#: those of an all-kinds tree; every case here is one compile of every algorithm, and quad12
#: carries the identities by default
SLOW_IDENTITY_CASES = ("tree-all-kinds", "arm7", "solo12")


def identity_params(names):
    """``names`` as parameters of an identity test (slow: the slow tier and
    :data:`SLOW_IDENTITY_CASES`)."""
    names = list(names)
    return robot_params(*names, slow=[n for n in SLOW_IDENTITY_CASES if n in names])


def identity_case(name) -> Case:
    return IDENTITY_CASES[name]()

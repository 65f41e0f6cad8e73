"""Every URDF that example-robot-data ships, loaded fixed and floating, against Pinocchio.

Issue 15: where Pinocchio loads a file, jaxdyn must load it too (leniently, with a
:class:`jaxdyn.JaxdynWarning` for what it repaired or dropped) and agree with Pinocchio on
``rnea``, ``crba``, ``aba`` (where the mass matrix is regular), every frame placement and a
frame Jacobian, to ``RTOL64`` scaled by ``max(1, max|ref|)``. A new release of the data
package cannot break loading unnoticed: the walk lists the files it finds, and a file that
jaxdyn refuses while Pinocchio loads it fails the test unless it is one of :data:`REPAIRED`
(refused by default with a clear message, loaded with ``strict=False``).

Where jaxdyn repaired an inertia (a rounding-size negative eigenvalue clipped, or a non-PSD
inertia projected with ``strict=False``), Pinocchio is given the same inertia: the URDF text it
parses has those ``<inertia>`` values replaced by jaxdyn's.

The whole walk (about 140 models) is marked ``slow``; :data:`QUICK` runs in the default
selection (hector: zero-DoF fixed, a free body floating; TIAGo without hand: clipped inertias).
"""

from __future__ import annotations

import functools
import warnings
import xml.etree.ElementTree as ET

import jax
import numpy as np
import pinocchio as pin
import pytest

import jaxdyn
from jaxdyn import joints, robots
from jaxdyn.interop.pinocchio import Converter
from jaxdyn.model.urdf import parse_urdf

from oracle import RTOL64, _match_urdf_frames, assert_close, sym_upper

ERD = robots.example_robot_data_dir()
FILES = tuple(sorted(str(p.relative_to(ERD)) for p in ERD.rglob("*.urdf"))) if ERD else ()

#: Files jaxdyn refuses by default (a truly non-PSD inertia) and loads with ``strict=False``.
REPAIRED = {"romeo_description/urdf/romeo_laas_small.urdf": "not positive semi-definite"}
#: The default (non-slow) selection: (file, floating base).
QUICK = (
    ("hector_description/robots/quadrotor_base.urdf", False),
    ("hector_description/robots/quadrotor_base.urdf", True),
    ("tiago_description/robots/tiago_no_hand.urdf", False),
)


def test_the_data_package_is_there():
    assert ERD is not None, "example-robot-data is not installed (part of the test extra)"
    assert len(FILES) >= 60, FILES
    for f in [f for f, _ in QUICK] + list(REPAIRED):
        assert f in FILES, f


# --------------------------------------------------------------------------- loading
def _load_pinocchio(xml: str, floating: bool):
    try:
        if floating:
            return pin.buildModelFromXML(xml, pin.JointModelFreeFlyer())
        return pin.buildModelFromXML(xml)
    except Exception:  # Pinocchio refuses the file (e.g. ur3.urdf: no robot name)
        return None


def _load_jaxdyn(rel: str, text: str, floating: bool):
    """jaxdyn's model (default policy; ``strict=False`` for :data:`REPAIRED`), the parsed
    robot and the warnings, which must all be JaxdynWarnings."""
    strict = None
    if rel in REPAIRED:
        with pytest.raises(ValueError, match=REPAIRED[rel]), warnings.catch_warnings():
            warnings.simplefilter("ignore", jaxdyn.JaxdynWarning)
            jaxdyn.load_urdf(text, floating_base=floating)
        strict = False
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        robot = parse_urdf(text, strict=strict)
        model = jaxdyn.model.build_model(robot, floating_base=floating, strict=strict)
    others = [x for x in w if not issubclass(x.category, jaxdyn.JaxdynWarning)]
    assert not others, [str(x.message) for x in others]
    return model, robot, [str(x.message) for x in w]


def _fmt(x: float) -> str:
    return repr(float(x))


def _patched_xml(text: str, robot) -> str:
    """``text`` with the ``<inertia>`` of every link whose inertia jaxdyn repaired replaced by
    jaxdyn's values (written with full precision)."""
    root = ET.fromstring(text)
    parsed = {l.name: l.inertial for l in robot.links}
    changed = False
    for link in root.findall("link"):
        el = link.find("inertial/inertia")
        inert = parsed.get(link.get("name"))
        if el is None or inert is None:
            continue
        g = {k: float(el.get(k, "0")) for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
        I = inert.inertia
        new = dict(ixx=I[0, 0], ixy=I[0, 1], ixz=I[0, 2], iyy=I[1, 1], iyz=I[1, 2], izz=I[2, 2])
        if any(g[k] != new[k] for k in g):
            for k, x in new.items():
                el.set(k, _fmt(x))
            changed = True
    return ET.tostring(root, encoding="unicode") if changed else text


# --------------------------------------------------------------------------- comparing
def _jaxdyn_all(model, q, v, a, tau, *, frame):
    fk = jaxdyn.forward_kinematics(model, q)
    return {
        "rnea": jaxdyn.rnea(model, q, v, a),
        "crba": jaxdyn.crba(model, q),
        "aba": jaxdyn.aba(model, q, v, tau),
        "frame_R": fk.frame.R,
        "frame_p": fk.frame.p,
        "jac": jaxdyn.jacobian(model, q, frame, "local_world_aligned"),
    }


def _random_state(model, seed):
    """A random state in jaxdyn's layout, without compiling anything."""
    rng = np.random.default_rng(seed)
    t = model.topo
    q = rng.uniform(-np.pi, np.pi, model.nq)
    for b in range(t.nb):
        k, q0 = int(t.kind[b]), int(t.q_start[b])
        quat = slice(q0, q0 + 4) if k == joints.SPHERICAL else slice(q0 + 3, q0 + 7)
        if k != joints.ONE_DOF:
            x = rng.normal(size=4)
            q[quat] = x / np.linalg.norm(x)
    v, a, tau = (rng.normal(size=model.nv) for _ in range(3))
    return q, v, a, tau


def _regular(M) -> bool:
    if M.size == 0:
        return True
    ev = np.linalg.eigvalsh(M)
    return bool(ev[0] > max(1e-8, 1e-9 * ev[-1]))


def _aba_tolerance(M) -> float:
    """``RTOL64``, widened to ``1e-16 cond(M)`` for ill-conditioned mass matrices (ABA is
    backward stable: its relative error grows with the condition number; iCub floating has
    ``cond(M) = 6e8`` and agrees with Pinocchio to 1.1e-10)."""
    return max(RTOL64, 1e-16 * np.linalg.cond(M)) if M.size else RTOL64


def _jac_frame(model, pin_frames):
    """The last frame of jaxdyn's frame order (a URDF joint, or a link)."""
    return [n for n in model.frame_names if n in pin_frames][-1]


@functools.cache
def _compiled():
    return jax.jit(_jaxdyn_all, static_argnames="frame")


def check_file(rel: str, floating: bool) -> None:
    text = (ERD / rel).read_text()
    pm = _load_pinocchio(text, floating)
    if pm is None:  # Pinocchio refuses it: jaxdyn must refuse it as well
        with pytest.raises(ValueError), warnings.catch_warnings():
            warnings.simplefilter("ignore", jaxdyn.JaxdynWarning)
            jaxdyn.load_urdf(text, floating_base=floating)
        return
    model, robot, _ = _load_jaxdyn(rel, text, floating)
    pm = _load_pinocchio(_patched_xml(text, robot), floating)
    assert model.nv == pm.nv, (model.nv, pm.nv)
    conv = Converter(model, pm)
    pin_frames = _match_urdf_frames(model, pm, text)
    assert set(pin_frames) == set(model.frame_names), set(model.frame_names) - set(pin_frames)
    frame = _jac_frame(model, pin_frames)
    q, v, a, tau = _random_state(model, seed=len(rel) + floating)
    out = jax.tree_util.tree_map(np.asarray, _compiled()(model, q, v, a, tau, frame=frame))

    pd = pm.createData()
    qp, vp, ap, tp = conv.q_to_pin(q), conv.v_to_pin(v), conv.v_to_pin(a), conv.v_to_pin(tau)
    M = conv.matrix_from_pin(sym_upper(pin.crba(pm, pd, qp)))
    assert_close(out["crba"], M, RTOL64, err_msg=f"{rel} crba")
    assert_close(
        out["rnea"],
        conv.v_from_pin(pin.rnea(pm, pd, qp, vp, ap).copy()),
        RTOL64,
        err_msg=f"{rel} rnea",
    )
    if _regular(M):
        ref = conv.v_from_pin(pin.aba(pm, pd, qp, vp, tp).copy())
        assert_close(out["aba"], ref, _aba_tolerance(M), err_msg=f"{rel} aba")
    else:  # singular: NaN (as Pinocchio's), never a finite wrong answer
        assert not np.all(np.isfinite(out["aba"])), f"{rel}: finite aba with a singular M"
    pin.forwardKinematics(pm, pd, qp)
    pin.updateFramePlacements(pm, pd)
    for i, name in enumerate(model.frame_names):
        if name in pin_frames:
            Mf = pd.oMf[pin_frames[name]]
            assert_close(out["frame_R"][i], Mf.rotation, RTOL64, err_msg=f"{rel} {name} R")
            assert_close(out["frame_p"][i], Mf.translation, RTOL64, err_msg=f"{rel} {name} p")
    J = pin.computeFrameJacobian(pm, pd, qp, pin_frames[frame], pin.LOCAL_WORLD_ALIGNED)
    assert_close(
        out["jac"],
        conv.jacobian_from_pin(np.array(J).reshape(6, pm.nv)),
        RTOL64,
        err_msg=f"{rel} jacobian of {frame}",
    )


def _id(case):
    rel, floating = case
    return f"{rel}-{'floating' if floating else 'fixed'}"


@pytest.mark.parametrize("case", QUICK, ids=_id)
def test_quick_robots(case):
    check_file(*case)


SLOW = [(f, fb) for f in FILES for fb in (False, True) if (f, fb) not in QUICK]


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=_id)
def test_every_robot(case):
    check_file(*case)


def test_repaired_robots_warn_and_name_the_links():
    """The six files of issue 15 that jaxdyn used to refuse, without compiling anything."""
    expect = {
        "tiago_description/robots/tiago.urdf": (
            '<link name="base_antenna_left_link">',
            "clipped to 0",
        ),
        "alex_description/urdf/alex_psyonic_hands.urdf": (
            '<joint name="Left_index_q2"> <mimic>',
            "dropped",
        ),
        "romeo_description/urdf/romeo_laas_small.urdf": (
            '<link name="body">',
            "nearest physically valid",
        ),
        "romeo_description/urdf/romeo.urdf": ("moving joints ['LHand'", "with_armature"),
    }
    for rel, (element, what) in expect.items():
        text = (ERD / rel).read_text()
        _, _, msgs = _load_jaxdyn(rel, text, True)
        assert any(element in m and what in m for m in msgs), (rel, msgs)
    for rel in (
        "hector_description/robots/quadrotor_base.urdf",
        "iris_description/robots/iris_simple.urdf",
    ):
        m = jaxdyn.load_urdf(str(ERD / rel))
        assert (m.nq, m.nv) == (0, 0), rel


# --------------------------------------------------------------------------- names
#: example-robot-data names whose loader disagrees with the name, kept as jaxdyn had them
#: (see :data:`jaxdyn.robots.EXAMPLE_ROBOT_DATA`)
NAMES_KEPT = {"ur3", "so100", "so101", "iris", "human"}


def test_example_robot_data_names_are_accepted():
    """Issue 55: every name ``example_robot_data.load`` accepts is a name of ``robots.load``
    for the same file and base (or refused, saying why and what to load instead)."""
    from example_robot_data import robots_loader

    names = set(robots_loader.ROBOTS)
    assert "talos" in names and len(names) >= 60
    for name in sorted(names - NAMES_KEPT - set(robots.EXAMPLE_ROBOT_DATA_UNSUPPORTED)):
        loader = robots_loader.ROBOTS[name]
        assert loader.urdf_filename, name
        rel = f"{loader.path}/{loader.urdf_subpath}/{loader.urdf_filename}"
        assert robots.resolve(name) == (ERD / rel, bool(loader.free_flyer)), name
    assert NAMES_KEPT | set(robots.EXAMPLE_ROBOT_DATA_UNSUPPORTED) <= names
    with pytest.raises(ValueError, match=r"'talos_legs': .*locking .* load 'talos'"):
        robots.load("talos_legs")
    with pytest.raises(ValueError, match=r"'cassie': .*SDF"):
        robots.resolve("cassie")
    with pytest.raises(ValueError, match=r"unknown robot 'talo'.*'talos'.*'talos_full'"):
        robots.resolve("talo")


def test_talos_alias_is_example_robot_datas_talos():
    """``robots.load("talos")`` is the model of ``example_robot_data.load("talos")``."""
    import example_robot_data

    ref = example_robot_data.load("talos").model
    model = robots.load("talos")
    assert (model.nq, model.nv, model.floating_base) == (ref.nq, ref.nv, True)
    assert sorted(model.joint_names) == sorted(ref.names[1:])  # universe first in Pinocchio
    np.testing.assert_allclose(
        float(np.sum(np.asarray(model.mass))), sum(i.mass for i in ref.inertias), rtol=1e-12
    )
    assert robots.resolve("talos") == robots.resolve("talos_reduced")

"""Bundled robot models, example-robot-data lookup and a random URDF generator.

Names
-----
* :data:`BUNDLED` -- original models shipped with jaxdyn (``arm7``, ``quad12``).
* :data:`EXAMPLE_ROBOT_DATA` -- robots of the ``example-robot-data`` package
  (``pip install example-robot-data``), located without importing pinocchio.

:func:`resolve` turns a name (or a path to a URDF file) into ``(path, floating_base)``;
:func:`load` additionally parses it with :func:`jaxdyn.load_urdf`.
:func:`random_urdf` writes random kinematic trees for property tests.

This module only uses the standard library and numpy.
"""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path
from typing import TYPE_CHECKING, overload

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..clusters.model import ClusterModel
    from ..model.model import Model

__all__ = [
    "BUNDLED",
    "DATA_DIR",
    "EXAMPLE_ROBOT_DATA",
    "EXAMPLE_ROBOT_DATA_UNSUPPORTED",
    "available",
    "example_robot_data_dir",
    "load",
    "random_urdf",
    "resolve",
]

DATA_DIR = Path(__file__).resolve().parent / "data"

#: name -> (URDF path, default floating_base)
BUNDLED: dict[str, tuple[Path, bool]] = {
    "arm7": (DATA_DIR / "arm7.urdf", False),
    "quad12": (DATA_DIR / "quad12.urdf", True),
}

#: name -> (URDF path relative to ``share/example-robot-data/robots``, default floating_base)
#: Every path was checked against example-robot-data 6.0.0 (cmeel wheel). Every name of
#: ``example_robot_data.load`` is here with the loader's file and free flyer (5.0.0), except
#: :data:`EXAMPLE_ROBOT_DATA_UNSUPPORTED` and five whose loaders disagree with their names:
#: ``ur3`` (5.0.0's loader reads ur5_robot.urdf), ``so100`` / ``so101`` (arms, which the loader
#: puts on a free flyer), ``iris`` (the loader reads the rotorless iris_simple.urdf), and
#: ``human``, whose loader also turns its free flyer 90 degrees about x.
EXAMPLE_ROBOT_DATA: dict[str, tuple[str, bool]] = {
    # --- fixed-base manipulators and toy systems ---
    "ur3": ("ur_description/urdf/ur3_robot.urdf", False),
    "ur5": ("ur_description/urdf/ur5_robot.urdf", False),
    "ur5_gripper": ("ur_description/urdf/ur5_gripper.urdf", False),
    "ur10": ("ur_description/urdf/ur10_robot.urdf", False),
    "panda": ("panda_description/urdf/panda.urdf", False),
    "kinova": ("kinova_description/robots/kinova.urdf", False),
    "xarm7": ("xarm_description/urdf/xarm7.urdf", False),
    "z1": ("z1_description/urdf/z1.urdf", False),
    "so100": ("so_arm_description/urdf/so100.urdf", False),
    "so101": ("so_arm_description/urdf/so101.urdf", False),
    "talos_arm": ("talos_data/robots/talos_left_arm.urdf", False),
    "baxter": ("baxter_description/urdf/baxter.urdf", False),
    "allegro_right_hand": ("allegro_hand_description/urdf/allegro_right_hand.urdf", False),
    "allegro_left_hand": ("allegro_hand_description/urdf/allegro_left_hand.urdf", False),
    "finger_edu": ("finger_edu_description/robots/finger_edu.urdf", False),
    "double_pendulum": ("double_pendulum_description/urdf/double_pendulum.urdf", False),
    "double_pendulum_continuous": (
        "double_pendulum_description/urdf/double_pendulum_continuous.urdf",
        False,
    ),
    "double_pendulum_simple": (
        "double_pendulum_description/urdf/double_pendulum_simple.urdf",
        False,
    ),
    "asr_twodof": ("asr_twodof_description/urdf/TwoDofs.urdf", False),
    "tiago_no_hand": ("tiago_description/robots/tiago_no_hand.urdf", False),
    # --- legged robots (floating base) ---
    "solo8": ("solo_description/robots/solo.urdf", True),
    "solo12": ("solo_description/robots/solo12.urdf", True),
    "bolt": ("bolt_description/robots/bolt.urdf", True),
    "quadruped": ("quadruped_description/urdf/quadruped.urdf", True),
    "anymal": ("anymal_b_simple_description/robots/anymal.urdf", True),
    "anymal_kinova": ("anymal_b_simple_description/robots/anymal-kinova.urdf", True),
    "anymal_c": ("anymal_c_simple_description/urdf/anymal.urdf", True),
    "hyq": ("hyq_description/robots/hyq_no_sensors.urdf", True),
    "a1": ("a1_description/urdf/a1.urdf", True),
    "go1": ("go1_description/urdf/go1.urdf", True),
    "go2": ("go2_description/urdf/go2.urdf", True),
    "b1": ("b1_description/urdf/b1.urdf", True),
    "b1_z1": ("b1_description/urdf/b1-z1.urdf", True),
    "laikago": ("laikago_description/urdf/laikago.urdf", True),
    "talos_reduced": ("talos_data/robots/talos_reduced.urdf", True),
    "talos_full": ("talos_data/robots/talos_full_v2.urdf", True),
    "romeo": ("romeo_description/urdf/romeo.urdf", True),
    "romeo_small": ("romeo_description/urdf/romeo_small.urdf", True),
    "icub": ("icub_description/robots/icub.urdf", True),
    "icub_reduced": ("icub_description/robots/icub_reduced.urdf", True),
    "g1": ("g1_description/urdf/g1_29dof_rev_1_0.urdf", True),
    "simple_humanoid": ("simple_humanoid_description/urdf/simple_humanoid.urdf", True),
    "human": ("human_description/robots/human.urdf", True),
    "centauro": ("centauro_description/urdf/centauro.urdf", True),
    # --- aerial robots (floating base) ---
    "hector": ("hector_description/robots/quadrotor_base.urdf", True),
    "iris": ("iris_description/robots/iris.urdf", True),
    "hextilt": ("hextilt_description/urdf/hextilt_flying_arm_5.urdf", True),
    "borinot": ("borinot_description/urdf/borinot_flying_arm_2.urdf", True),
    # --- the other names of ``example_robot_data.load`` (its ``ROBOTS``), same file and base ---
    "talos": ("talos_data/robots/talos_reduced.urdf", True),  # = talos_reduced
    "talos_box": ("talos_data/robots/talos_reduced_box.urdf", True),
    "talos_full_box": ("talos_data/robots/talos_full_v2_box.urdf", True),
    "ur3_gripper": ("ur_description/urdf/ur3_gripper.urdf", False),
    "ur3_limited": ("ur_description/urdf/ur3_joint_limited_robot.urdf", False),
    "ur5_limited": ("ur_description/urdf/ur5_joint_limited_robot.urdf", False),
    "ur10_limited": ("ur_description/urdf/ur10_joint_limited_robot.urdf", False),
    "panda_collision": ("panda_description/urdf/panda_collision.urdf", False),
    "tiago": ("tiago_description/robots/tiago.urdf", False),
    "tiago_dual": ("tiago_description/robots/tiago_dual.urdf", False),
    "tiago_pro": ("tiago_pro_description/robots/tiago_pro.urdf", False),
    "pr2": ("pr2_description/urdf/pr2.urdf", True),
    "bravo7_gripper": ("bravo7_description/urdf/bravo7_gripper.urdf", False),
    "bravo7_no_ee": ("bravo7_description/urdf/bravo7_no_ee.urdf", False),
    "bluevolta_bravo7_gripper": ("bluevolta_description/urdf/bluevolta_bravo7_gripper.urdf", True),
    "bluevolta_bravo7_no_ee": ("bluevolta_description/urdf/bluevolta_bravo7_no_ee.urdf", True),
    "falcon_bravo7_gripper": ("falcon_description/urdf/falcon_bravo7_gripper.urdf", True),
    "falcon_bravo7_no_ee": ("falcon_description/urdf/falcon_bravo7_no_ee.urdf", True),
    "alex_nub_hands": ("alex_description/urdf/alex_nub_hands.urdf", False),
    "alex_psyonic_hands": ("alex_description/urdf/alex_psyonic_hands.urdf", False),
    "alex_sake_hands": ("alex_description/urdf/alex_sake_hands.urdf", False),
    "alexander": ("alexander_description/urdf/alexander_v1.lowerBodyOnly.urdf", True),
    "g1_with_hands": ("g1_description/urdf/g1_29dof_with_hand_rev_1_0.urdf", True),
    "simple_humanoid_classical": (
        "simple_humanoid_description/urdf/simple_humanoid_classical.urdf",
        True,
    ),
}

#: Names ``example_robot_data.load`` knows that name no URDF file jaxdyn could load as is:
#: name -> why, and what to load instead (the error of :func:`resolve`).
EXAMPLE_ROBOT_DATA_UNSUPPORTED: dict[str, str] = {
    "talos_legs": "example-robot-data builds it in Pinocchio from talos_reduced.urdf by locking "
    "the upper body's joints (no URDF file); load 'talos' (talos_reduced.urdf) instead",
    "cassie": "example-robot-data loads it from an SDF file (cassie.sdf), which jaxdyn does not "
    "read; jaxdyn loads URDF and MJCF files",
}

_ERD_SUBDIR = Path("share") / "example-robot-data" / "robots"


def example_robot_data_dir() -> Path | None:
    """Locate ``share/example-robot-data/robots`` of an installed example-robot-data.

    Looks at ``$EXAMPLE_ROBOT_DATA_DIR`` (if set), then ``<entry>/cmeel.prefix/...`` for
    every ``sys.path`` / site-packages entry (pip wheel), then ``<prefix>/share/...``
    (conda / robotpkg / ROS style installs).  Never imports pinocchio.
    Returns ``None`` when not found.
    """
    candidates: list[Path] = []
    env = os.environ.get("EXAMPLE_ROBOT_DATA_DIR")
    if env:
        candidates.append(Path(env))
        candidates.append(Path(env) / "robots")

    entries: list[str] = list(sys.path)
    try:
        entries += site.getsitepackages()
    except Exception:  # pragma: no cover - e.g. some virtualenv setups
        pass
    try:
        entries.append(site.getusersitepackages())
    except Exception:  # pragma: no cover
        pass
    for entry in entries:
        if not entry:
            continue
        p = Path(entry)
        candidates.append(p / "cmeel.prefix" / _ERD_SUBDIR)
        # entries inside a cmeel prefix, e.g. .../cmeel.prefix/lib/python3.x/site-packages
        parts = p.parts
        if "cmeel.prefix" in parts:
            i = len(parts) - 1 - parts[::-1].index("cmeel.prefix")
            candidates.append(Path(*parts[: i + 1]) / _ERD_SUBDIR)

    for prefix in (sys.prefix, sys.base_prefix, os.environ.get("CONDA_PREFIX"), "/opt/openrobots"):
        if prefix:
            candidates.append(Path(prefix) / _ERD_SUBDIR)

    seen: set[Path] = set()
    for c in candidates:
        if c in seen:
            continue
        seen.add(c)
        try:
            if c.is_dir():
                return c
        except OSError:  # pragma: no cover
            continue
    return None


def available() -> list[str]:
    """Names accepted by :func:`resolve` (bundled first, then example-robot-data)."""
    return list(BUNDLED) + list(EXAMPLE_ROBOT_DATA)


def resolve(name_or_path: str | os.PathLike) -> tuple[Path, bool]:
    """Return ``(urdf_path, default_floating_base)`` for a robot name or a URDF file path.

    * a bundled name (:data:`BUNDLED`),
    * an example-robot-data name (:data:`EXAMPLE_ROBOT_DATA`, needs the package installed),
    * an existing file path (default floating_base ``False``).

    Raises ``ValueError`` for anything else.
    """
    if isinstance(name_or_path, str) and name_or_path in BUNDLED:
        path, fb = BUNDLED[name_or_path]
        return Path(path), fb
    if isinstance(name_or_path, str) and name_or_path in EXAMPLE_ROBOT_DATA_UNSUPPORTED:
        raise ValueError(f"robot {name_or_path!r}: {EXAMPLE_ROBOT_DATA_UNSUPPORTED[name_or_path]}")
    if isinstance(name_or_path, str) and name_or_path in EXAMPLE_ROBOT_DATA:
        rel, fb = EXAMPLE_ROBOT_DATA[name_or_path]
        root = example_robot_data_dir()
        if root is None:
            raise ValueError(
                f"robot {name_or_path!r} comes from example-robot-data, which is not installed "
                "(pip install example-robot-data)"
            )
        path = root / rel
        if not path.is_file():
            raise ValueError(
                f"robot {name_or_path!r}: {path} not found in the installed example-robot-data"
            )
        return path, fb
    p = Path(os.fspath(name_or_path)).expanduser()
    if p.is_file():
        return p, False
    erd = (
        ""
        if example_robot_data_dir() is not None
        else (" (example-robot-data is not installed: its robots are unavailable)")
    )
    raise ValueError(
        f"unknown robot {os.fspath(name_or_path)!r}: not a file and not one of the "
        f"bundled robots {sorted(BUNDLED)} or example-robot-data robots "
        f"{sorted(EXAMPLE_ROBOT_DATA)}{erd}"
    )


@overload
def load(
    name_or_path: str | os.PathLike, floating_base: bool | None = ..., *, strict: bool
) -> Model: ...


@overload
def load(name_or_path: str | os.PathLike, floating_base: bool | None, strict: bool) -> Model: ...


@overload
def load(
    name_or_path: str | os.PathLike, floating_base: bool | None = ..., strict: None = ...
) -> Model | ClusterModel: ...


def load(
    name_or_path: str | os.PathLike,
    floating_base: bool | None = None,
    strict: bool | None = None,
) -> Model | ClusterModel:
    """Resolve ``name_or_path`` and parse it with :func:`jaxdyn.load_urdf`.

    ``floating_base=None`` uses the robot's default (see :func:`resolve`). ``strict`` (``True``:
    refuse what the default loads with a warning; ``False``: also repair invalid inertias; see
    :func:`jaxdyn.load_urdf`) loads the plain :class:`jaxdyn.Model` of the file (``clusters=False``:
    URDF+ loop tags ignored); ``None`` (default) is :func:`jaxdyn.load_urdf`'s lenient policy.
    """
    path, fb = resolve(name_or_path)
    if floating_base is None:
        floating_base = fb
    import jaxdyn  # lazy: keeps this module importable without JAX

    if strict is not None:
        fb = bool(floating_base)
        return jaxdyn.load_urdf(str(path), floating_base=fb, clusters=False, strict=strict)
    return jaxdyn.load_urdf(str(path), floating_base=bool(floating_base))


# ---------------------------------------------------------------------------
# random URDF trees
# ---------------------------------------------------------------------------

_ALIGNED_AXES = [
    (1.0, 0.0, 0.0),
    (0.0, 1.0, 0.0),
    (0.0, 0.0, 1.0),
    (-1.0, 0.0, 0.0),
    (0.0, -1.0, 0.0),
    (0.0, 0.0, -1.0),
]


def _f(x: float) -> str:
    x = float(x)
    if x == 0.0:
        return "0"  # avoid "-0"
    return f"{x:.17g}"


def _v(v) -> str:
    return " ".join(_f(x) for x in v)


def _random_rotation(rng: np.random.Generator) -> np.ndarray:
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _random_rpy(rng: np.random.Generator) -> np.ndarray:
    return np.array(
        [rng.uniform(-np.pi, np.pi), rng.uniform(-np.pi / 2, np.pi / 2), rng.uniform(-np.pi, np.pi)]
    )


def _random_inertia(rng: np.random.Generator, mass: float) -> np.ndarray:
    """Random PD rotational inertia about the COM satisfying the triangle inequality.

    Built from the second moments ``s_i = int x_i^2 dm > 0`` of a mass distribution:
    principal moments ``I_x = s_y + s_z`` etc., so ``I_x + I_y - I_z = 2 s_z > 0``; then
    rotated by a random rotation.
    """
    s = mass * rng.uniform(0.002, 0.05, size=3)
    principal = np.array([s[1] + s[2], s[0] + s[2], s[0] + s[1]])
    R = _random_rotation(rng)
    inertia = R @ np.diag(principal) @ R.T
    return 0.5 * (inertia + inertia.T)


def _random_axis(rng: np.random.Generator) -> tuple[float, float, float]:
    if rng.random() < 0.4:
        return _ALIGNED_AXES[int(rng.integers(len(_ALIGNED_AXES)))]
    a = rng.normal(size=3)
    a /= np.linalg.norm(a)
    x, y, z = (float(c) for c in a)
    return (x, y, z)


def _inertial_xml(rng: np.random.Generator, *, com_scale: float = 0.3) -> str:
    mass = float(rng.uniform(0.1, 5.0))
    com = rng.uniform(-com_scale, com_scale, size=3)
    rpy = _random_rpy(rng)
    inertia = _random_inertia(rng, mass)
    return (
        "    <inertial>\n"
        f'      <origin xyz="{_v(com)}" rpy="{_v(rpy)}"/>\n'
        f'      <mass value="{_f(mass)}"/>\n'
        f'      <inertia ixx="{_f(inertia[0, 0])}" ixy="{_f(inertia[0, 1])}" '
        f'ixz="{_f(inertia[0, 2])}" iyy="{_f(inertia[1, 1])}" '
        f'iyz="{_f(inertia[1, 2])}" izz="{_f(inertia[2, 2])}"/>\n'
        "    </inertial>\n"
    )


def random_urdf(
    n_bodies: int,
    seed: int,
    *,
    joint_types: Sequence[str] = ("revolute", "prismatic", "continuous"),
    p_fixed: float = 0.15,
    branching: float = 0.5,
    massless_prob: float = 0.1,
    name: str = "random",
) -> str:
    """URDF text of a random kinematic tree with ``n_bodies`` links besides the root ``base``.

    Link ``link{i}`` (i = 1..n_bodies) is attached by joint ``joint{i}`` to a parent chosen,
    with probability ``branching``, among all earlier links (the root preferred a quarter
    of the time, so it gets several children), otherwise to ``link{i-1}`` (chains).  The joint
    is ``fixed`` with probability ``p_fixed``, otherwise a type drawn from ``joint_types``
    (``revolute``, ``prismatic``, ``continuous``, ``spherical``, ``floating`` -- the last two
    are jaxdyn extensions).  Joint origins, axes (some exactly aligned, some negative),
    inertial frames and full inertia tensors are random; a fraction ``massless_prob`` of the
    non-root links have no ``<inertial>``.  Deterministic for a given ``seed``; numbers are
    written with 17 significant digits so the float64 values round-trip exactly.
    """
    n_bodies = int(n_bodies)
    if n_bodies < 0:
        raise ValueError("n_bodies must be >= 0")
    joint_types = tuple(joint_types)
    allowed = {"revolute", "prismatic", "continuous", "spherical", "floating", "fixed"}
    bad = [t for t in joint_types if t not in allowed]
    if bad:
        raise ValueError(f"unsupported joint types {bad}; allowed: {sorted(allowed)}")
    if not joint_types and p_fixed < 1.0:
        raise ValueError("joint_types is empty")

    rng = np.random.default_rng(seed)
    out = [f'<?xml version="1.0"?>\n<robot name="{name}">\n']
    out.append('  <link name="base">\n' + _inertial_xml(rng, com_scale=0.1) + "  </link>\n")
    links = ["base"]
    for i in range(1, n_bodies + 1):
        child = f"link{i}"
        # parent
        if i == 1:
            parent = "base"
        elif rng.random() < branching:
            if rng.random() < 0.25:
                parent = "base"
            else:
                parent = links[int(rng.integers(0, i))]
        else:
            parent = links[-1]
        # joint type
        if rng.random() < p_fixed or not joint_types:
            jtype = "fixed"
        else:
            jtype = joint_types[int(rng.integers(len(joint_types)))]
        xyz = rng.uniform(-0.5, 0.5, size=3)
        rpy = _random_rpy(rng)
        massless = rng.random() < massless_prob
        inertial = "" if massless else _inertial_xml(rng)

        out.append(f'  <link name="{child}">\n{inertial}  </link>\n')
        j = [
            f'  <joint name="joint{i}" type="{jtype}">\n',
            f'    <parent link="{parent}"/>\n',
            f'    <child link="{child}"/>\n',
            f'    <origin xyz="{_v(xyz)}" rpy="{_v(rpy)}"/>\n',
        ]
        if jtype in ("revolute", "prismatic", "continuous"):
            j.append(f'    <axis xyz="{_v(_random_axis(rng))}"/>\n')
        if jtype == "revolute":
            j.append('    <limit lower="-3.14" upper="3.14" effort="100" velocity="10"/>\n')
        elif jtype == "prismatic":
            j.append('    <limit lower="-1" upper="1" effort="100" velocity="10"/>\n')
        elif jtype == "continuous":
            j.append('    <limit effort="100" velocity="10"/>\n')
        j.append("  </joint>\n")
        out.extend(j)
        links.append(child)
    out.append("</robot>\n")
    return "".join(out)

"""Robots with local loops: bundled URDF+ models, Tello, and generated transmission chains.

* :data:`ROBOTS` / :func:`load` -- the URDF+ models of ``ROAM-Lab-ND/generalized_rbda``
  (``robot-models/``, MIT licence; JVRC-1 also BSD-2, see ``data/README.md``): Mini Cheetah,
  MIT Humanoid (and one leg), JVRC-1, four-bar, six-bar, planar leg linkage, rotor chain.
* :func:`tello` -- Tello (legs, or humanoid with arms): the URDFs carry no constraint tags, the
  hip-clamp gears, hip and knee-ankle differentials (implicit, paper §III / Fig. 1b) and arm gears
  are added programmatically (grbda ``Tello.cpp`` / ``TelloWithArms.hpp``; the differential
  constraints in the MATLAB form of ``derive_tello_*_differential.m``).
* :func:`transmission_chain` -- the serial chains of geared transmissions (GT) or parallel belt
  transmissions (PBT) of the paper's scaling study (§IX-A, grbda ``RevoluteChainWithRotor`` /
  ``RevolutePairChainWithRotor``).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import spec as S
from .model import ClusterModel
from .urdfplus import build, load_urdf_plus

if TYPE_CHECKING:
    from collections.abc import Sequence

DATA_DIR = Path(__file__).resolve().parent / "data"

#: name -> file in :data:`DATA_DIR`
ROBOTS = {
    "four_bar": "four_bar.urdf",
    "six_bar": "six_bar.urdf",
    "planar_leg_linkage": "planar_leg_linkage.urdf",
    "revolute_rotor_chain": "revolute_rotor_chain.urdf",
    "double_pendulum": "double_pendulum.urdf",
    "mini_cheetah": "mini_cheetah.urdf",
    "mini_cheetah_leg": "mini_cheetah_leg.urdf",
    "mit_humanoid": "mit_humanoid.urdf",
    "mit_humanoid_leg": "mit_humanoid_leg.urdf",
    "jvrc1_humanoid": "jvrc1_humanoid.urdf",
}


#: Bundled files whose inertias violate the triangle inequality ``a + b >= c`` as published
#: (``data/README.md`` says which links and why): name -> number of such links. :func:`load`
#: keeps them as given (as the paper's code and Pinocchio do) without the warning a user's file
#: gets; ``strict=True`` still refuses them and ``strict=False`` still projects them, with its
#: warning. Any other warning, or another count (a changed file), is shown.
TRIANGLE_AS_PUBLISHED = {
    "double_pendulum": 2,
    "planar_leg_linkage": 4,
    "mini_cheetah": 4,
    "mini_cheetah_leg": 4,
    "jvrc1_humanoid": 25,
}
_TRIANGLE = re.compile(
    r"URDF <robot name='(\w+)'>: the principal moments a <= b <= c of (\d+) link inertias? "
    r"violate the triangle inequality"
)


def path(name: str) -> Path:
    """Path of a bundled URDF+ file (see :data:`ROBOTS`; Tello: ``tello_legs``,
    ``tello_humanoid``)."""
    files = dict(ROBOTS, tello_legs="tello_legs.urdf", tello_humanoid="tello_humanoid.urdf")
    if name not in files:
        raise ValueError(f"jaxdyn.clusters.robots: unknown robot {name!r}; known: {sorted(files)}")
    return DATA_DIR / files[name]


def load(name: str, **kw: Any) -> ClusterModel:
    """Load a bundled robot by name (:data:`ROBOTS`, or ``tello_legs`` / ``tello_humanoid``);
    keywords go to :func:`jaxdyn.clusters.load_urdf_plus` (e.g. ``fold_rotors=False``). The
    published inertias of :data:`TRIANGLE_AS_PUBLISHED` load without a warning."""
    if name in ("tello", "tello_legs"):
        return tello(arms=False, **kw)
    if name == "tello_humanoid":
        return tello(arms=True, **kw)
    if name not in TRIANGLE_AS_PUBLISHED or kw.get("strict") is not None:
        return load_urdf_plus(path(name), **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_urdf_plus(path(name), **kw)
    for w in caught:
        m = _TRIANGLE.match(str(w.message))
        if not (m and m.groups() == (name, str(TRIANGLE_AS_PUBLISHED[name]))):
            warnings.warn(w.message, stacklevel=2)
    return model


def tello(arms: bool = False, gear_ratio: float = 6.0, **kw: Any) -> ClusterModel:
    """Tello legs (``arms=False``, fixed pelvis) or the Tello humanoid with arms (floating).

    Clusters per leg: hip clamp + rotor (gear ``gear_ratio``); hip differential
    {rotor 1, rotor 2, gimbal, thigh} and knee-ankle differential {rotor 1, rotor 2, shin, foot}
    (implicit, two equations each, independent = the two rotors, independent velocity = the
    post-gearbox rotor speed ``qdot_r / N``, ``N = 6``). Arms: shoulder ry/rx/rz gears 6, elbow 9.
    """
    base = "torso" if arms else "ground"
    cons = []
    for side in ("left", "right"):
        cons.append(
            S.geared_transmission(
                f"{base}-to-{side}-hip-clamp",
                f"{base}-to-{side}-hip-clamp-rotor",
                gear_ratio,
                name=f"{side}-hip-clamp",
            )
        )
        hip = (
            f"{side}-hip-clamp-to-hip-rotor-1",
            f"{side}-hip-clamp-to-hip-rotor-2",
            f"{side}-hip-clamp-to-gimbal",
            f"{side}-gimbal-to-thigh",
        )
        cons.append(
            S.ImplicitConstraint(
                hip,
                S.tello_hip_differential_phi,
                hip[:2],
                scale={hip[0]: 6.0, hip[1]: 6.0},
                name=f"{side}-hip-differential",
            )
        )
        ka = (
            f"{side}-thigh-to-knee-ankle-rotor-1",
            f"{side}-thigh-to-knee-ankle-rotor-2",
            f"{side}-thigh-to-shin",
            f"{side}-shin-to-foot",
        )
        cons.append(
            S.ImplicitConstraint(
                ka,
                S.tello_knee_ankle_differential_phi,
                ka[:2],
                scale={ka[0]: 6.0, ka[1]: 6.0},
                name=f"{side}-knee-ankle-differential",
            )
        )
        if arms:
            for j, r in (
                (f"torso-to-{side}-shoulder-ry", 6.0),
                (f"{side}-shoulder-ry-to-shoulder-rx", 6.0),
                (f"{side}-shoulder-rx-to-shoulder-rz", 6.0),
                (f"{side}-shoulder-rz-to-elbow", 9.0),
            ):
                cons.append(S.geared_transmission(j, j + "-rotor", r, name=j + "-gear"))
    src = path("tello_humanoid" if arms else "tello_legs")
    return build(src, cons, name="tello_humanoid" if arms else "tello_legs", **kw)


def _inertial(m, c, I):
    return (
        f'<inertial><mass value="{m!r}"/><origin xyz="{c[0]!r} {c[1]!r} {c[2]!r}"/>'
        f'<inertia ixx="{I[0]!r}" ixy="0" ixz="0" iyy="{I[1]!r}" iyz="0" izz="{I[2]!r}"/>'
        "</inertial>"
    )


def transmission_chain(
    n_links: int,
    kind: str = "GT",
    seed: int | None = None,
    gravity: Sequence[float] = (9.81, 0.0, 0.0),
    fold_rotors: bool = True,
) -> ClusterModel:
    """A serial chain of ``n_links`` planar links driven through transmissions.

    - ``kind="GT"``: every link has a rotor on its parent body, ``q_r = N q_l`` (one cluster of
      two bodies per link);
    - ``kind="PBT"``: links in pairs ``l1 -> l2`` driven by two rotors on the pair's parent
      through belts, ``q_r1 = N1 b11 q_l1``, ``q_r2 = N2 (b21 q_l1 + b21 b22 q_l2)`` (one cluster of
      four bodies per pair; an odd last link is GT).

    ``fold_rotors``: as :func:`jaxdyn.clusters.build`. ``seed=None``: grbda's uniform
    parameters (``m = 1``, ``l = 1``, ``c = 0.5``,
    ``I = diag(1, 1, 1)``, rotor ``I = 1e-4``, gear 2, belt 3, gravity ``+x``); otherwise random
    inertias, gears and belts in ``{1..5}``.
    """
    if kind not in ("GT", "PBT"):
        raise ValueError(f"transmission_chain: kind must be 'GT' or 'PBT', got {kind!r}")
    if n_links < 1:
        raise ValueError("transmission_chain: n_links must be >= 1")
    rng = None if seed is None else np.random.default_rng(seed)

    def draw(lo, hi, default):
        return default if rng is None else float(rng.uniform(lo, hi))

    def ratio(default):
        return default if rng is None else float(rng.integers(1, 6))

    links = ['<link name="ground"/>']
    jts, cons = [], []
    parent = "ground"
    i = 0
    while i < n_links:
        pair = kind == "PBT" and i + 1 < n_links
        group = [i, i + 1] if pair else [i]
        link_joints, rotor_joints = [], []
        for k, li in enumerate(group):
            m = draw(0.5, 2.0, 1.0)
            c = (draw(0.2, 0.8, 0.5), 0.0, 0.0)
            I = (draw(0.5, 1.5, 1.0), draw(0.5, 1.5, 1.0), draw(0.5, 1.5, 1.0))
            links.append(f'<link name="link{li}">{_inertial(m, c, I)}</link>')
            par = parent if k == 0 else f"link{group[0]}"
            x = 0.0 if par == "ground" else 1.0
            jts.append(
                f'<joint name="joint{li}" type="revolute"><parent link="{par}"/>'
                f'<child link="link{li}"/><origin xyz="{x} 0 0"/><axis xyz="0 0 1"/>'
                "</joint>"
            )
            Ir = draw(0.5, 1.5, 1.0) * 1e-4
            links.append(f'<link name="rotor{li}">{_inertial(0.0, (0, 0, 0), (Ir, Ir, Ir))}</link>')
            jts.append(
                f'<joint name="rotor_joint{li}" type="revolute"><parent link="{parent}"/>'
                f'<child link="rotor{li}"/><origin xyz="{x} 0 0"/><axis xyz="0 0 1"/>'
                "</joint>"
            )
            link_joints.append(f"joint{li}")
            rotor_joints.append(f"rotor_joint{li}")
        if pair:
            cons.append(
                S.belt_transmission(
                    link_joints,
                    rotor_joints,
                    (ratio(2.0), ratio(2.0)),
                    ((ratio(3.0),), (ratio(3.0), ratio(3.0))),
                    name=f"belt{i}",
                )
            )
        else:
            cons.append(
                S.geared_transmission(link_joints[0], rotor_joints[0], ratio(2.0), name=f"gear{i}")
            )
        parent = f"link{group[-1]}"
        i += len(group)
    xml = (
        f'<robot name="{kind.lower()}_chain_{n_links}">'
        + "".join(links)
        + "".join(jts)
        + "</robot>"
    )
    return build(xml, cons, gravity=gravity, fold_rotors=fold_rotors)

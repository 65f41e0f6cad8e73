"""Reinforcement-learning environments on :mod:`jaxdyn.sim`, in the Brax / MuJoCo Playground
contract (:mod:`jaxdyn.envs.base`), with training wrappers (:mod:`jaxdyn.envs.wrappers`).

Tasks (:func:`make` by name):

* ``"reacher"`` -- :class:`Reacher`: a 7-DoF arm (``arm7`` or ``panda``) reaches a random target;
* ``"quadruped"`` -- :class:`Quadruped`: ``quad12`` walks forward; ``"quadruped_stand"``: stands;
* ``"humanoid_stand"`` -- :class:`HumanoidStand`: a humanoid keeps standing;
* ``"push_cube"`` -- :class:`PushCube`: a 7-DoF arm pushes a free cube across a table to a
  target (contact between two moving bodies; :mod:`jaxdyn.envs.manipulation`, needs
  ``mujoco`` for its MJCF scene);
* ``"quadruped_getup"`` -- :class:`QuadrupedGetup`: ``quad12`` gets up from a fall, trunk and
  legs in contact with the ground (:mod:`jaxdyn.envs.getup`);
* DeepMind Control Suite tasks as MuJoCo Playground defines them
  (:mod:`jaxdyn.envs.dm_control_suite`, MJCF models stepped by :mod:`jaxdyn.sim`; need
  ``mujoco``): ``"cartpole_balance"``, ``"cartpole_balance_sparse"``, ``"cartpole_swingup"``,
  ``"cartpole_swingup_sparse"``, ``"pendulum_swingup"``, ``"acrobot_swingup"``,
  ``"acrobot_swingup_sparse"``, ``"reacher_easy"``, ``"reacher_hard"``,
  ``"point_mass_easy"``, ``"swimmer_swimmer6"`` (a six-link swimmer in a viscous fluid),
  ``"fish_swim"`` (a free-floating fish in a fluid); with contact:
  ``"cheetah_run"``, ``"walker_stand"``, ``"walker_walk"``, ``"walker_run"``,
  ``"hopper_stand"``, ``"hopper_hop"``, ``"finger_spin"``, ``"finger_turn_easy"``,
  ``"finger_turn_hard"``, ``"ball_in_cup_catch"``, ``"dm_humanoid_stand"``,
  ``"dm_humanoid_walk"``, ``"dm_humanoid_run"`` (dm_control's humanoid; ``"humanoid_stand"``
  is the G1 task above).

Brax is optional: with it installed (``pip install 'jaxdyn[rl]'``) the contract classes are
Brax's own and ``brax.training`` trains these environments unchanged. Brax 0.14's trainers call
``jax.device_put_replicated``, which JAX 0.10 removed: importing this package with Brax
installed applies :func:`brax_compat`, which defines that one name on a JAX that lacks it (and
changes nothing on a JAX that has it).
"""

from typing import Any

from .actuators import CompensatedTorque as CompensatedTorque
from .actuators import ServoPD as ServoPD
from .base import HAS_BRAX as HAS_BRAX
from .base import Env as Env
from .base import SimEnv as SimEnv
from .base import State as State
from .base import System as System
from .base import Wrapper as Wrapper
from .compat import brax_compat as brax_compat
from .dm_control_suite import AcrobotSwingup as AcrobotSwingup
from .dm_control_suite import BallInCup as BallInCup
from .dm_control_suite import CartpoleBalance as CartpoleBalance
from .dm_control_suite import CheetahRun as CheetahRun
from .dm_control_suite import FingerSpin as FingerSpin
from .dm_control_suite import FingerTurn as FingerTurn
from .dm_control_suite import FishSwim as FishSwim
from .dm_control_suite import HopperTask as HopperTask
from .dm_control_suite import PendulumSwingup as PendulumSwingup
from .dm_control_suite import PointMass as PointMass
from .dm_control_suite import SuiteHumanoid as SuiteHumanoid
from .dm_control_suite import SuiteReacher as SuiteReacher
from .dm_control_suite import Swimmer as Swimmer
from .dm_control_suite import WalkerMove as WalkerMove
from .getup import QuadrupedGetup as QuadrupedGetup
from .humanoid import HumanoidStand as HumanoidStand
from .manipulation import PushCube as PushCube
from .quadruped import Quadruped as Quadruped
from .reacher import Reacher as Reacher
from .wrappers import AutoResetWrapper as AutoResetWrapper
from .wrappers import DomainRandomizationVmapWrapper as DomainRandomizationVmapWrapper
from .wrappers import EpisodeWrapper as EpisodeWrapper
from .wrappers import VmapWrapper as VmapWrapper
from .wrappers import domain_randomization as domain_randomization
from .wrappers import wrap as wrap

if HAS_BRAX:  # Brax's trainers then run on this JAX (see jaxdyn.envs.compat)
    brax_compat()

ENVIRONMENTS = {
    "reacher": Reacher,
    "quadruped": Quadruped,
    "quadruped_stand": lambda **kw: Quadruped(**{"forward_weight": 0.0, **kw}),
    "humanoid_stand": HumanoidStand,
    "push_cube": PushCube,
    "quadruped_getup": QuadrupedGetup,
    "cartpole_balance": CartpoleBalance,
    "cartpole_balance_sparse": lambda **kw: CartpoleBalance(sparse=True, **kw),
    "cartpole_swingup": lambda **kw: CartpoleBalance(swing_up=True, **kw),
    "cartpole_swingup_sparse": lambda **kw: CartpoleBalance(swing_up=True, sparse=True, **kw),
    "pendulum_swingup": PendulumSwingup,
    "acrobot_swingup": AcrobotSwingup,
    "acrobot_swingup_sparse": lambda **kw: AcrobotSwingup(sparse=True, **kw),
    "reacher_easy": SuiteReacher,
    "reacher_hard": lambda **kw: SuiteReacher(SuiteReacher.SMALL_TARGET, **kw),
    "point_mass_easy": PointMass,
    "swimmer_swimmer6": Swimmer,
    "fish_swim": FishSwim,
    "cheetah_run": CheetahRun,
    "walker_stand": WalkerMove,
    "walker_walk": lambda **kw: WalkerMove(WalkerMove.WALK_SPEED, **kw),
    "walker_run": lambda **kw: WalkerMove(WalkerMove.RUN_SPEED, **kw),
    "hopper_stand": HopperTask,
    "hopper_hop": lambda **kw: HopperTask(hopping=True, **kw),
    "finger_spin": FingerSpin,
    "finger_turn_easy": FingerTurn,
    "finger_turn_hard": lambda **kw: FingerTurn(FingerTurn.HARD_TARGET, **kw),
    "ball_in_cup_catch": BallInCup,
    "dm_humanoid_stand": SuiteHumanoid,
    "dm_humanoid_walk": lambda **kw: SuiteHumanoid(SuiteHumanoid.WALK_SPEED, **kw),
    "dm_humanoid_run": lambda **kw: SuiteHumanoid(SuiteHumanoid.RUN_SPEED, **kw),
}


def make(name: str, **kwargs: Any) -> Env:
    """The environment ``name`` (a key of :data:`ENVIRONMENTS`) built with ``kwargs``."""
    if name not in ENVIRONMENTS:
        raise ValueError(
            f"jaxdyn.envs.make: unknown environment {name!r}; one of {sorted(ENVIRONMENTS)}"
        )
    return ENVIRONMENTS[name](**kwargs)


__all__ = [
    "ENVIRONMENTS",
    "HAS_BRAX",
    "AcrobotSwingup",
    "AutoResetWrapper",
    "BallInCup",
    "CartpoleBalance",
    "CheetahRun",
    "CompensatedTorque",
    "DomainRandomizationVmapWrapper",
    "Env",
    "EpisodeWrapper",
    "FingerSpin",
    "FingerTurn",
    "FishSwim",
    "HopperTask",
    "HumanoidStand",
    "PendulumSwingup",
    "PointMass",
    "PushCube",
    "Quadruped",
    "QuadrupedGetup",
    "Reacher",
    "ServoPD",
    "SimEnv",
    "State",
    "SuiteHumanoid",
    "SuiteReacher",
    "Swimmer",
    "System",
    "VmapWrapper",
    "WalkerMove",
    "Wrapper",
    "brax_compat",
    "domain_randomization",
    "make",
    "wrap",
]

"""Trajectory optimisation through the dynamics (issue 12).

* :mod:`~jaxdyn.trajopt.dynamics`: one semi-implicit Euler step on the configuration manifold
  (Crocoddyl's ``IntegratedActionModelEuler``) and its analytic Jacobians ``Fx``, ``Fu`` in the
  tangent space (:func:`step_derivatives`), registered as the ``custom_jvp`` of :func:`step`;
* :mod:`~jaxdyn.trajopt.lie`: Jacobians of ``integrate`` / ``difference`` (SO(3), SE(3));
* :mod:`~jaxdyn.trajopt.costs`: residual costs (state / control regularisation, frame
  translation and placement, centre of mass, joint-limit penalty, spherical obstacles);
* :mod:`~jaxdyn.trajopt.ddp`: FDDP (Mastalli et al. 2020), iLQR / DDP (Li & Todorov 2004) and
  box-constrained controls (Tassa, Mansard & Todorov 2014), jit-compiled, batched by
  ``jax.vmap``;
* :mod:`~jaxdyn.trajopt.implicit`: gradients of the optimal controls with respect to the
  problem's parameters (implicit function theorem);
* :mod:`~jaxdyn.trajopt.shooting`: baselines: gradient-based single shooting with optax, direct
  multiple shooting as nonlinear least squares (optimistix, Levenberg-Marquardt).
"""

from . import costs as costs
from . import ddp as ddp
from . import dynamics as dynamics
from . import implicit as implicit
from . import lie as lie
from . import shooting as shooting
from .costs import CenterOfMass as CenterOfMass
from .costs import ControlRegularization as ControlRegularization
from .costs import Cost as Cost
from .costs import FramePlacement as FramePlacement
from .costs import FrameTranslation as FrameTranslation
from .costs import JointLimits as JointLimits
from .costs import SphereAvoidance as SphereAvoidance
from .costs import StateRegularization as StateRegularization
from .costs import Term as Term
from .ddp import STATUS as STATUS
from .ddp import Problem as Problem
from .ddp import Result as Result
from .ddp import box_qp as box_qp
from .ddp import check as check
from .ddp import fddp as fddp
from .ddp import ilqr as ilqr
from .ddp import rollout as rollout
from .ddp import solve_batch as solve_batch
from .ddp import solve_sharded as solve_sharded
from .ddp import trajectory_cost as trajectory_cost
from .dynamics import ContactDynamics as ContactDynamics
from .dynamics import FreeDynamics as FreeDynamics
from .dynamics import step as step
from .dynamics import step_derivatives as step_derivatives
from .dynamics import step_plain as step_plain
from .implicit import solve_differentiable as solve_differentiable
from .shooting import gradient_shooting as gradient_shooting
from .shooting import multiple_shooting as multiple_shooting
from .shooting import shooting_cost as shooting_cost

__all__ = [
    "STATUS",
    "CenterOfMass",
    "ContactDynamics",
    "ControlRegularization",
    "Cost",
    "FramePlacement",
    "FrameTranslation",
    "FreeDynamics",
    "JointLimits",
    "Problem",
    "Result",
    "SphereAvoidance",
    "StateRegularization",
    "Term",
    "box_qp",
    "check",
    "costs",
    "ddp",
    "dynamics",
    "fddp",
    "gradient_shooting",
    "ilqr",
    "implicit",
    "lie",
    "multiple_shooting",
    "rollout",
    "solve_batch",
    "solve_sharded",
    "shooting",
    "shooting_cost",
    "solve_differentiable",
    "step",
    "step_derivatives",
    "step_plain",
    "trajectory_cost",
]

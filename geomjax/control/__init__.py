"""Gradient-based control: base curves, losses and an optax loop (:func:`optimize`).

Choose how a body changes shape, where a rolling contact goes or which torques act, so that the
induced group motion reaches a target: parametrize the base curve or the controls
(:mod:`~geomjax.control.curves`), simulate with any geomjax integrator, score the result with
composable losses (:mod:`~geomjax.control.losses`) and differentiate through everything with
:func:`optimize`; or state an :class:`OptimalControlProblem` and solve it with second-order,
control-limited DDP / iLQR (:func:`solve_ocp`, :mod:`~geomjax.control.trajopt`), close the loop
around it with model predictive control (:func:`run_mpc`, :mod:`~geomjax.control.mpc`) and
differentiate the optimum with respect to the problem's parameters (:func:`solve_ocp_implicit`,
:mod:`~geomjax.control.sensitivity`).  Worked problems live in :mod:`geomjax.control.examples`.
"""

from .curves import (
    AbstractPath,
    AbstractTimeLaw,
    FourierLoop,
    LinearTimeLaw,
    OpenCurve,
    PeriodicSpline,
    PiecewiseLinearTimeLaw,
    SmoothStepTimeLaw,
    SphereLoop,
    Trajectory,
)
from .losses import (
    Loss,
    bound_penalty,
    constraint_penalty,
    control_effort,
    group_distance,
    group_error,
    loop_closure,
    path_energy,
    path_length,
)
from .mpc import MPC, MPCPlan, MPCResult, OnlineMPC, run_mpc
from .optimize import GroupParam, OptimizeResult, optimize, optimize_restarts
from .sensitivity import solve_ocp_implicit
from .trajopt import (
    DDP,
    ILQR,
    AbstractDDPSolver,
    AbstractOCPSolver,
    Actuated,
    AugmentedLagrangian,
    EuclideanChart,
    LieGroupChart,
    OCPSolution,
    OptimalControlProblem,
    ResidualCost,
    StrictFDDP,
    WarmStart,
    quasi_static_controls,
    solve_ocp,
)

__all__ = [
    "DDP",
    "ILQR",
    "MPC",
    "AbstractDDPSolver",
    "AbstractOCPSolver",
    "AbstractPath",
    "AbstractTimeLaw",
    "Actuated",
    "AugmentedLagrangian",
    "EuclideanChart",
    "FourierLoop",
    "GroupParam",
    "LieGroupChart",
    "LinearTimeLaw",
    "Loss",
    "MPCPlan",
    "MPCResult",
    "OCPSolution",
    "OnlineMPC",
    "OpenCurve",
    "OptimalControlProblem",
    "OptimizeResult",
    "PeriodicSpline",
    "PiecewiseLinearTimeLaw",
    "ResidualCost",
    "SmoothStepTimeLaw",
    "SphereLoop",
    "StrictFDDP",
    "Trajectory",
    "WarmStart",
    "bound_penalty",
    "constraint_penalty",
    "control_effort",
    "group_distance",
    "group_error",
    "loop_closure",
    "optimize",
    "optimize_restarts",
    "path_energy",
    "path_length",
    "quasi_static_controls",
    "run_mpc",
    "solve_ocp",
    "solve_ocp_implicit",
]

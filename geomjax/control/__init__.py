"""Gradient-based control: base curves, losses and an optax loop (:func:`optimize`).

Choose how a body changes shape, where a rolling contact goes or which torques act, so that the
induced group motion reaches a target: parametrize the base curve or the controls
(:mod:`~geomjax.control.curves`), simulate with any geomjax integrator, score the result with
composable losses (:mod:`~geomjax.control.losses`) and differentiate through everything with
:func:`optimize`.  Worked problems live in :mod:`geomjax.control.examples`.
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
from .optimize import GroupParam, OptimizeResult, optimize, optimize_restarts

__all__ = [
    "AbstractPath",
    "AbstractTimeLaw",
    "FourierLoop",
    "GroupParam",
    "LinearTimeLaw",
    "Loss",
    "OpenCurve",
    "OptimizeResult",
    "PeriodicSpline",
    "PiecewiseLinearTimeLaw",
    "SmoothStepTimeLaw",
    "SphereLoop",
    "Trajectory",
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
]

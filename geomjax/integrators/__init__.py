"""Integrators (methods) and the single driver :func:`simulate`."""

from .._linalg import solve3
from .base import AbstractMethod, StepStats
from .lgvi import LGVI
from .newton import newton_solve
from .nonholonomic import NonholonomicVI
from .rkmk import RKMK4
from .simulate import Solution, diagnostics, load_solution, simulate, step
from .splitting import RigidBodySplitting

__all__ = [
    "LGVI",
    "RKMK4",
    "AbstractMethod",
    "NonholonomicVI",
    "RigidBodySplitting",
    "Solution",
    "StepStats",
    "diagnostics",
    "load_solution",
    "newton_solve",
    "simulate",
    "solve3",
    "step",
]

# variational integrators in coordinates (issue 12)
from .variational import (
    RATTLE,
    DiscreteEulerLagrange,
    Impacts,
    SymmetricComposition,
    discrete_legendre,
)

__all__ += [
    "RATTLE",
    "DiscreteEulerLagrange",
    "Impacts",
    "SymmetricComposition",
    "discrete_legendre",
]

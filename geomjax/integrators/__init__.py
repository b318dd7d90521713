"""Integrators (methods) and the single driver :func:`simulate`."""

from .._linalg import solve3
from .base import AbstractMethod, GradientHooks, StepStats, WrappedMethod
from .euler import SemiImplicitEuler
from .lgvi import LGVI
from .newton import newton_solve
from .nonholonomic import NonholonomicVI
from .rkmk import RKMK4
from .sharding import batch_mesh, shard_batch, shard_vmap, simulate_sharded
from .simulate import ConvergenceError, Solution, diagnostics, load_solution, simulate, step
from .splitting import RigidBodySplitting

__all__ = [
    "LGVI",
    "RKMK4",
    "AbstractMethod",
    "ConvergenceError",
    "GradientHooks",
    "NonholonomicVI",
    "RigidBodySplitting",
    "SemiImplicitEuler",
    "Solution",
    "StepStats",
    "WrappedMethod",
    "batch_mesh",
    "diagnostics",
    "load_solution",
    "newton_solve",
    "shard_batch",
    "shard_vmap",
    "simulate",
    "simulate_sharded",
    "solve3",
    "step",
]

# composition (higher order) and the reversible adjoint
from .adjoint import ReversibleAdjoint, reconstruction_error
from .composition import PROCESSED, SCHEMES, Composition, ProcessedComposition

__all__ += [
    "PROCESSED",
    "SCHEMES",
    "Composition",
    "ProcessedComposition",
    "ReversibleAdjoint",
    "reconstruction_error",
]

# variational integrators in coordinates
from .variational import (  # noqa: E402
    RATTLE,
    DiscreteEulerLagrange,
    Impacts,
    discrete_legendre,
)

__all__ += [
    "RATTLE",
    "DiscreteEulerLagrange",
    "Impacts",
    "discrete_legendre",
]

# systems in a mobile frame: discrete Hamel equations
from .hamel import DiscreteHamel, hamel_momenta  # noqa: E402

__all__ += ["DiscreteHamel", "hamel_momenta"]

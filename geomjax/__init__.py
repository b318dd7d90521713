"""geomjax: differentiable geometric mechanics in JAX.

Lie groups (:mod:`geomjax.lie`), mechanical systems (:mod:`geomjax.systems`), structure-preserving
integrators and the :func:`simulate` driver (:mod:`geomjax.integrators`), Riemannian geometry,
holonomic constraints and rigid systems of particles (:mod:`geomjax.riemann`).

Nothing is jitted at import time.  float64 is not switched on for you: call
``jax.config.update("jax_enable_x64", True)`` for double precision.

One thing is set at import: a size limit of XLA:CPU's small-loop compilation in ``XLA_FLAGS``
(:mod:`geomjax._xla`: time loops and Newton solves compiled as single kernels, 3–11× faster
nonholonomic steps at batch 1 on CPU, results equal to round-off), effective when geomjax is imported
before JAX's first computation; ``GEOMJAX_XLA_FLAGS=0`` turns it off, and ``XLA_FLAGS`` that
already set ``xla_backend_extra_options`` are left alone.  And the objects that exist at the end of
the import (modules of jax, numpy, equinox, geomjax) are taken out of the cyclic garbage
collector's scans (:mod:`geomjax._gc`, :func:`gc.freeze`: full collections during tracing no
longer walk them); ``GEOMJAX_GC_FREEZE=0`` turns that off.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from . import _xla as _xla  # sets XLA_FLAGS at import, before anything can compute
from . import integrators, lie, riemann, systems
from .integrators import (
    LGVI,
    RKMK4,
    NonholonomicVI,
    RigidBodySplitting,
    Solution,
    diagnostics,
    load_solution,
    simulate,
    simulate_sharded,
    step,
)
from .lie import SE2, SE3, SO2, SO3, LieGroup, Rn, Tn
from .riemann import (
    Embedding,
    LeftInvariantMetric,
    LevelSetConstraint,
    MovingEmbedding,
    MovingFrame,
    ParticleSystem,
    RigidSystem,
    christoffel,
    euler_lagrange_acceleration,
    geodesic_acceleration,
    newton_acceleration,
)
from .systems import (
    BallOnTurntable,
    ChaplyginSleigh,
    ChaplyginSphere,
    EulerPoincareSystem,
    GravityGradient,
    HeavyTop,
    LieGroupState,
    NonholonomicState,
    NonholonomicSystem,
    RigidBody,
    RigidBodySE3,
    RigidBodyState,
    RollingDisk,
    SE3Gravity,
    SuslovProblem,
    UniformGravity,
    VerticalRollingDisk,
    momentum_equation,
)

try:
    __version__ = _version("geomjax")
except _PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

__all__ = [
    "LGVI",
    "RKMK4",
    "SE2",
    "SE3",
    "SO2",
    "SO3",
    "BallOnTurntable",
    "ChaplyginSleigh",
    "ChaplyginSphere",
    "Embedding",
    "EulerPoincareSystem",
    "GravityGradient",
    "HeavyTop",
    "LeftInvariantMetric",
    "LevelSetConstraint",
    "LieGroup",
    "LieGroupState",
    "MovingEmbedding",
    "MovingFrame",
    "NonholonomicState",
    "NonholonomicSystem",
    "NonholonomicVI",
    "ParticleSystem",
    "RigidBody",
    "RigidBodySE3",
    "RigidBodySplitting",
    "RigidBodyState",
    "RigidSystem",
    "Rn",
    "RollingDisk",
    "SE3Gravity",
    "Solution",
    "SuslovProblem",
    "Tn",
    "UniformGravity",
    "VerticalRollingDisk",
    "__version__",
    "christoffel",
    "diagnostics",
    "euler_lagrange_acceleration",
    "geodesic_acceleration",
    "integrators",
    "lie",
    "load_solution",
    "momentum_equation",
    "newton_acceleration",
    "riemann",
    "simulate",
    "simulate_sharded",
    "step",
    "systems",
]

# issue 9: composition (higher order) and the reversible adjoint
from .integrators import Composition, ReversibleAdjoint

__all__ += ["Composition", "ReversibleAdjoint"]

# variational integrators in coordinates (issue 12)
from . import variational  # noqa: E402
from .integrators import RATTLE, DiscreteEulerLagrange, Impacts  # noqa: E402
from .variational import LagrangianSystem, VariationalState  # noqa: E402

__all__ += [
    "RATTLE",
    "DiscreteEulerLagrange",
    "Impacts",
    "LagrangianSystem",
    "VariationalState",
    "variational",
]

# --- base-controlled systems, reconstruction and geometric phases (seed 004) -------------------
from . import reconstruction  # noqa: E402
from .reconstruction import (  # noqa: E402
    BaseControlledSystem,
    HorizontalLift,
    MomentumLGVI,
    Reconstruction,
    ReconstructionRKMK4,
    holonomy,
    reconstruct,
    so3_phases,
    solid_angle,
)

__all__ += [
    "BaseControlledSystem",
    "HorizontalLift",
    "MomentumLGVI",
    "Reconstruction",
    "ReconstructionRKMK4",
    "holonomy",
    "reconstruct",
    "reconstruction",
    "so3_phases",
    "solid_angle",
]

# --- gradient-based control and trajectory optimization (issue 11) -------------------------------
from . import control  # noqa: E402
from .control import GroupParam, OptimizeResult, optimize, optimize_restarts  # noqa: E402

__all__ += ["GroupParam", "OptimizeResult", "control", "optimize", "optimize_restarts"]

# --- second-order trajectory optimization: DDP / iLQR / augmented Lagrangian ---------------------
from .control import DDP, ILQR, AugmentedLagrangian, OptimalControlProblem, solve_ocp  # noqa: E402

__all__ += ["DDP", "ILQR", "AugmentedLagrangian", "OptimalControlProblem", "solve_ocp"]

# last: everything imported so far lives as long as the process (geomjax._gc)
from . import _gc  # noqa: E402

_gc.freeze_import_time_objects()

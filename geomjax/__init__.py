"""geomjax: differentiable geometric mechanics in JAX.

Lie groups (:mod:`geomjax.lie`); mechanical systems (:mod:`geomjax.systems`) and Lagrangian
systems in coordinates (:mod:`geomjax.variational`); structure-preserving integrators and the one
driver :func:`simulate` (:mod:`geomjax.integrators`); Riemannian geometry, holonomic constraints
and rigid systems of particles (:mod:`geomjax.riemann`); base-controlled systems, reconstruction
and geometric phases (:mod:`geomjax.reconstruction`); control and trajectory optimization
(:mod:`geomjax.control`).  The most used names of each are re-exported here.

Nothing is jitted at import time.  float64 is not switched on for you: call
``jax.config.update("jax_enable_x64", True)`` for double precision.

``import geomjax`` changes no global state of the process.  geomjax's own top-level programs (an
eager :func:`simulate`, ``solve_ocp``, ...) and those of :func:`jit` are compiled with XLA:CPU's
small-loop threshold raised for them alone (:mod:`geomjax._internal.xla_flags`: time loops and
Newton solves as single kernels, whatever the import order).  Three process settings are opt-in
(the documentation's Architecture page lists them with their measured effects):
``geomjax.configure(xla_small_loops=True)`` (or ``GEOMJAX_XLA_FLAGS=1``) raises that threshold
in ``XLA_FLAGS`` for every program of the process (effective only before JAX's first
computation), ``geomjax.configure(gc_freeze=True)`` (or ``GEOMJAX_GC_FREEZE=1``, then at the
end of the import) calls :func:`gc.freeze` (:mod:`geomjax._internal.gc_freeze`: full
collections during tracing no longer walk the objects that exist), and
``geomjax.configure(compilation_cache=DIR)`` (or ``GEOMJAX_COMPILATION_CACHE=DIR``) turns on
JAX's persistent compilation cache at ``DIR`` (:mod:`geomjax._internal.compile_cache`: a later
process loads the compiled solves instead of compiling them).
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

# first: an opt-in through the environment (GEOMJAX_XLA_FLAGS=1) sets XLA_FLAGS here, before
# anything can compute; without it nothing is changed
from ._internal import xla_flags as _xla_flags  # noqa: F401

# isort: split
from . import integrators, lie, results, systems, variational
from ._internal.settings import configure, jit
from .integrators import (
    LGVI,
    RATTLE,
    RKMK4,
    Composition,
    ConvergenceError,
    DiscreteEulerLagrange,
    DiscreteHamel,
    Impacts,
    NonholonomicVI,
    ProcessedComposition,
    ReversibleAdjoint,
    RigidBodySplitting,
    SemiImplicitEuler,
    Solution,
    diagnostics,
    load_solution,
    shard_vmap,
    simulate,
    simulate_sharded,
    step,
)
from .lie import SE2, SE3, SO2, SO3, LieGroup, Rn, Tn
from .results import Status
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
from .variational import HamelState, HamelSystem, LagrangianSystem, VariationalState

try:
    __version__ = _version("geomjax")
except _PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

# the one export list, grouped by concept
__all__ = [  # noqa: RUF022 (grouped by concept, not sorted)
    "__version__",
    "configure",
    "jit",
    # subpackages
    "control",
    "integrators",
    "lie",
    "reconstruction",
    "results",
    "riemann",
    "systems",
    "variational",
    # Lie groups
    "LieGroup",
    "SO2",
    "SE2",
    "SO3",
    "SE3",
    "Rn",
    "Tn",
    # systems on Lie groups, potentials and states
    "EulerPoincareSystem",
    "RigidBody",
    "RigidBodySE3",
    "RigidBodyState",
    "LieGroupState",
    "HeavyTop",
    "GravityGradient",
    "SE3Gravity",
    "UniformGravity",
    # Lagrangian systems in coordinates and in mobile frames
    "LagrangianSystem",
    "VariationalState",
    "HamelSystem",
    "HamelState",
    # nonholonomic systems
    "NonholonomicSystem",
    "NonholonomicState",
    "ChaplyginSleigh",
    "VerticalRollingDisk",
    "RollingDisk",
    "BallOnTurntable",
    "ChaplyginSphere",
    "SuslovProblem",
    "momentum_equation",
    # integrators and the driver
    "simulate",
    "step",
    "Solution",
    "ConvergenceError",
    "Status",
    "load_solution",
    "diagnostics",
    "shard_vmap",
    "simulate_sharded",
    "LGVI",
    "RKMK4",
    "RigidBodySplitting",
    "SemiImplicitEuler",
    "NonholonomicVI",
    "DiscreteEulerLagrange",
    "DiscreteHamel",
    "RATTLE",
    "Impacts",
    "Composition",
    "ProcessedComposition",
    "ReversibleAdjoint",
    # Riemannian geometry, constraints and rigid systems of particles
    "christoffel",
    "geodesic_acceleration",
    "newton_acceleration",
    "euler_lagrange_acceleration",
    "Embedding",
    "LevelSetConstraint",
    "MovingEmbedding",
    "MovingFrame",
    "LeftInvariantMetric",
    "ParticleSystem",
    "RigidSystem",
    # base-controlled systems, reconstruction and geometric phases
    "BaseControlledSystem",
    "BaseVelocitySystem",
    "BaseVelocityState",
    "LiftMagnus4",
    "Reconstruction",
    "MomentumLGVI",
    "ReconstructionRKMK4",
    "HorizontalLift",
    "reconstruct",
    "holonomy",
    "so3_phases",
    "solid_angle",
    "nonholonomic_phases",
    "nonholonomic_gauge",
    "mechanical_gauge",
    # control and trajectory optimization
    "optimize",
    "optimize_restarts",
    "OptimizeResult",
    "GroupParam",
    "OptimalControlProblem",
    "solve_ocp",
    "ILQR",
    "DDP",
    "AugmentedLagrangian",
    "solve_ocp_implicit",
    "MPC",
    "run_mpc",
]

# subpackages a simulation does not need are imported on first use (PEP 562): control (optax,
# the trajectory optimizers, the example problems: a third of geomjax's import time), and
# riemann and reconstruction (~15 % of it); `gj.christoffel` imports geomjax.riemann then
_LAZY = {
    "control": frozenset(
        (
            "AugmentedLagrangian",
            "DDP",
            "GroupParam",
            "ILQR",
            "MPC",
            "OptimalControlProblem",
            "OptimizeResult",
            "optimize",
            "optimize_restarts",
            "run_mpc",
            "solve_ocp",
            "solve_ocp_implicit",
        )
    ),
    "reconstruction": frozenset(
        (
            "BaseControlledSystem",
            "BaseVelocityState",
            "BaseVelocitySystem",
            "HorizontalLift",
            "LiftMagnus4",
            "MomentumLGVI",
            "Reconstruction",
            "ReconstructionRKMK4",
            "holonomy",
            "mechanical_gauge",
            "nonholonomic_gauge",
            "nonholonomic_phases",
            "reconstruct",
            "so3_phases",
            "solid_angle",
        )
    ),
    "riemann": frozenset(
        (
            "Embedding",
            "LeftInvariantMetric",
            "LevelSetConstraint",
            "MovingEmbedding",
            "MovingFrame",
            "ParticleSystem",
            "RigidSystem",
            "christoffel",
            "euler_lagrange_acceleration",
            "geodesic_acceleration",
            "newton_acceleration",
        )
    ),
}


def __getattr__(name: str):
    for sub, names in _LAZY.items():
        if name == sub or name in names:
            import importlib

            module = importlib.import_module(f".{sub}", __name__)
            value = module if name == sub else getattr(module, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module 'geomjax' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


# with GEOMJAX_COMPILATION_CACHE=DIR only, JAX's persistent compilation cache at DIR
# (geomjax._internal.compile_cache); without it nothing is changed
from ._internal import compile_cache as _compile_cache  # noqa: E402

_compile_cache.from_environment()

# last: with GEOMJAX_GC_FREEZE=1 only, everything imported so far leaves the cyclic collector's
# scans (geomjax._internal.gc_freeze); without it nothing is changed
from ._internal import gc_freeze as _gc_freeze  # noqa: E402 (last, by design)

_gc_freeze.freeze_import_time_objects()

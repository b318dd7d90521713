"""Mechanical systems (parameters and model functions; integration is done by methods)."""

from .base import AbstractLieGroupSystem, AbstractSystem, LieGroupState
from .nonholonomic import (
    AbstractNonholonomicSystem,
    NonholonomicState,
    NonholonomicSystem,
    momentum_equation,
)
from .nonholonomic_systems import (
    BallOnTurntable,
    ChaplyginSleigh,
    ChaplyginSphere,
    PlanarCoordinates,
    RollingDisk,
    SleighCoordinates,
    SuslovProblem,
    VerticalRollingDisk,
)
from .potentials import GravityGradient, HeavyTop, SE3Gravity, UniformGravity
from .rigid_body import (
    EulerPoincareSystem,
    RigidBody,
    RigidBodySE3,
    RigidBodyState,
    newton_euler_inertia,
)

__all__ = [
    "AbstractLieGroupSystem",
    "AbstractNonholonomicSystem",
    "AbstractSystem",
    "BallOnTurntable",
    "ChaplyginSleigh",
    "ChaplyginSphere",
    "EulerPoincareSystem",
    "GravityGradient",
    "HeavyTop",
    "LieGroupState",
    "NonholonomicState",
    "NonholonomicSystem",
    "PlanarCoordinates",
    "RigidBody",
    "RigidBodySE3",
    "RigidBodyState",
    "RollingDisk",
    "SE3Gravity",
    "SleighCoordinates",
    "SuslovProblem",
    "UniformGravity",
    "VerticalRollingDisk",
    "momentum_equation",
    "newton_euler_inertia",
]

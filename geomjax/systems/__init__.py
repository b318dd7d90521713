"""Mechanical systems (parameters and model functions; integration is done by methods)."""

from .base import AbstractLieGroupSystem, AbstractSystem, LieGroupState
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
    "AbstractSystem",
    "EulerPoincareSystem",
    "GravityGradient",
    "HeavyTop",
    "LieGroupState",
    "RigidBody",
    "RigidBodySE3",
    "RigidBodyState",
    "SE3Gravity",
    "UniformGravity",
    "newton_euler_inertia",
]

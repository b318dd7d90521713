"""Riemannian geometry and holonomic constraints by automatic differentiation.

* :mod:`~geomjax.riemann.metric` — Christoffel symbols, geodesic acceleration (contraction, no n³
  tensor), covariant derivative, curvature, Newton's law and the Euler–Lagrange route from a
  metric ``metric(q) -> (n, n)`` (seed 000 §2.1);
* :mod:`~geomjax.riemann.lie_metric` — left-invariant metrics on a Lie group: Arnold's connection
  in the left-invariant frame and the Christoffel symbols in exponential coordinates;
* :mod:`~geomjax.riemann.constraints` — ideal holonomic constraints as a parametrization
  (:class:`Embedding`) or a level set (:class:`LevelSetConstraint`): induced metric, projections,
  second fundamental form, intrinsic motion, reaction force (seed 000 §2.2);
* :mod:`~geomjax.riemann.moving` — time-dependent constraints (seed 002: canonical connection,
  canonical force, force of constraint) and moving frames with their inertial forces (seed 001);
* :mod:`~geomjax.riemann.rigid` — n-particle and rigid systems: centre-of-mass splitting,
  characteristic, inertia, three-way splits, reactions at every particle (seed 000 §3–4).

Every function and method acts on one point / one configuration; batch with ``jax.vmap`` and
compose with ``jit`` and ``grad``.  Nothing is jitted at import time.
"""

from .constraints import Embedding, LevelSetConstraint
from .lie_metric import LeftInvariantMetric
from .metric import (
    christoffel,
    christoffel_contract,
    christoffel_first_kind,
    covariant_derivative,
    covariant_derivative_along,
    euler_lagrange_acceleration,
    gaussian_curvature,
    geodesic_acceleration,
    newton_acceleration,
    ricci_tensor,
    riemann_curvature,
    scalar_curvature,
    sectional_curvature,
)
from .moving import InertialForces, MovingEmbedding, MovingFrame
from .rigid import ForceSplit, ParticleSystem, RigidSystem, VelocitySplit

__all__ = [
    "Embedding",
    "ForceSplit",
    "InertialForces",
    "LeftInvariantMetric",
    "LevelSetConstraint",
    "MovingEmbedding",
    "MovingFrame",
    "ParticleSystem",
    "RigidSystem",
    "VelocitySplit",
    "christoffel",
    "christoffel_contract",
    "christoffel_first_kind",
    "covariant_derivative",
    "covariant_derivative_along",
    "euler_lagrange_acceleration",
    "gaussian_curvature",
    "geodesic_acceleration",
    "newton_acceleration",
    "ricci_tensor",
    "riemann_curvature",
    "scalar_curvature",
    "sectional_curvature",
]

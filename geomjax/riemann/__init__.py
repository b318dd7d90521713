"""Riemannian geometry and holonomic constraints by automatic differentiation.

* :mod:`~geomjax.riemann.metric` — Christoffel symbols, geodesic acceleration (contraction, no n³
  tensor), covariant derivative, curvature, Newton's law and the Euler–Lagrange route from a
  metric ``metric(q) -> (n, n)`` (Modugno–Vitolo, *The geometry of Newton's law and rigid systems*, §2.1);
* :mod:`~geomjax.riemann.lie_metric` — left-invariant metrics on a Lie group: Arnold's connection
  in the left-invariant frame and the Christoffel symbols in exponential coordinates;
* :mod:`~geomjax.riemann.constraints` — ideal holonomic constraints as a parametrization
  (:class:`Embedding`) or a level set (:class:`LevelSetConstraint`): induced metric, projections,
  second fundamental form, intrinsic motion, reaction force (Modugno–Vitolo §2.2);
* :mod:`~geomjax.riemann.moving` — time-dependent constraints (Mangiarotti, *Mechanical systems and holonomic constraints*: canonical connection,
  canonical force, force of constraint) and moving frames with their inertial forces (Chevallier, *On the foundations of ordinary and generalized rigid body dynamics and the principle of objectivity*);
* :mod:`~geomjax.riemann.rigid` — n-particle and rigid systems: centre-of-mass splitting,
  characteristic, inertia, three-way splits, reactions at every particle (Modugno–Vitolo §3–4).

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

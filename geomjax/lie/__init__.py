"""Lie groups as pure, batched, differentiable functions on arrays.

``SO3``, ``SE3``, ``SO2``, ``SE2`` are ready-made instances; ``Rn(n)`` and ``Tn(n)`` build the
abelian groups.  All share the :class:`LieGroup` interface.
"""

from .abelian import EuclideanSpace, Rn, Tn, Torus
from .base import LieGroup, check_shape
from .planar import SE2, SO2, SpecialEuclidean2, SpecialOrthogonal2
from .power import PowerGroup
from .se3 import SE3, SpecialEuclidean3
from .so3 import SO3, SpecialOrthogonal3

__all__ = [
    "SE2",
    "SE3",
    "SO2",
    "SO3",
    "EuclideanSpace",
    "LieGroup",
    "PowerGroup",
    "Rn",
    "SpecialEuclidean2",
    "SpecialEuclidean3",
    "SpecialOrthogonal2",
    "SpecialOrthogonal3",
    "Tn",
    "Torus",
    "check_shape",
]

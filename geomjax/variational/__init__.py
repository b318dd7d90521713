"""Lagrangian mechanics in generalized coordinates (Romano–Barretta–Diaco, *On the general form of the law of dynamics*): the system
:class:`LagrangianSystem` and the state :class:`VariationalState` integrated by the variational
methods of :mod:`geomjax.integrators.variational` (:class:`~geomjax.integrators.DiscreteEulerLagrange`,
:class:`~geomjax.integrators.RATTLE`, :class:`~geomjax.integrators.Impacts`), and the same
mechanics written in a mobile frame (quasi-velocities, Hamel's equations, the torsion of the
frame's connection): :class:`HamelSystem`, :class:`HamelState`, integrated by
:class:`~geomjax.integrators.DiscreteHamel`."""

from .hamel import HamelState, HamelSystem, frame_rcond
from .system import LagrangianSystem, VariationalState

__all__ = ["HamelState", "HamelSystem", "LagrangianSystem", "VariationalState", "frame_rcond"]

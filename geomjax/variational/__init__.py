"""Lagrangian mechanics in generalized coordinates (seed 003, Romano–Barretta–Diaco): the system
:class:`LagrangianSystem` and the state :class:`VariationalState` integrated by the variational
methods of :mod:`geomjax.integrators.variational` (:class:`~geomjax.integrators.DiscreteEulerLagrange`,
:class:`~geomjax.integrators.RATTLE`, :class:`~geomjax.integrators.Impacts`)."""

from .system import LagrangianSystem, VariationalState

__all__ = ["LagrangianSystem", "VariationalState"]

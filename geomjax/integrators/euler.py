"""Semi-implicit (symplectic) Euler on ``G × g*`` for Euler–Poincaré systems: the first-order
explicit integrator of crocoddyl's ``IntegratedActionModelEuler`` for a free-flyer."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from .base import AbstractMethod, StepStats

__all__ = ["SemiImplicitEuler"]


class SemiImplicitEuler(AbstractMethod):
    """Semi-implicit (symplectic) Euler on ``G × g*`` for an Euler–Poincaré system:

        μ_{k+1} = μ_k + h (ad*_{ξ_k} μ_k − dV(g_k) + u_k),   g_{k+1} = g_k exp(h I⁻¹ μ_{k+1}),

    first order, explicit.  It is the integrator of crocoddyl's ``IntegratedActionModelEuler``
    for a free-flyer (velocity first, then the configuration with the new velocity, on SE(3)
    through ``exp``), used here to reproduce crocoddyl's quadrotor example exactly."""

    order: ClassVar[int] = 1

    def step(self, system, state, dt, control=None, t=0.0):
        g, mu = system.split(state)
        h = jnp.asarray(dt, mu.dtype)
        _, dmu = system.vector_field(t, state, control)
        mu1 = mu + h * dmu
        g1 = system.group.rplus(g, h * system.velocity(mu1))
        return system.make_state(g1, mu1), StepStats.explicit(mu.dtype)

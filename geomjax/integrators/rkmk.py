"""Runge–Kutta–Munthe-Kaas: classical RK4 in exponential coordinates around the current point.

The non-variational Lie-group baseline (Munthe-Kaas 1998).  Writing ``g(t) = g_k exp(Theta(t))``,
the left-trivialized kinematics ``dg/dt = g xi`` becomes ``dTheta/dt = J_r(Theta)^{-1} xi`` on the
Lie algebra; RK4 is applied to ``(Theta, mu)`` and the group element is recovered as
``g_{k+1} = g_k exp(Theta(h))``.  Fourth order and exactly on the group, but neither symplectic
nor momentum-preserving: energy and the momentum map drift.
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from ..systems.base import AbstractLieGroupSystem
from .base import AbstractMethod, StepStats

__all__ = ["RKMK4"]


class RKMK4(AbstractMethod):
    """Fourth-order Runge–Kutta–Munthe-Kaas method for Lie group systems (explicit)."""

    order: ClassVar[int] = 4

    def supports(self, system) -> bool:
        return isinstance(system, AbstractLieGroupSystem)

    def step(self, system, state, dt, control=None, t=0.0):
        g0, mu0 = system.split(state)
        h = jnp.asarray(dt, mu0.dtype)
        new = rkmk4_step(
            system, g0, mu0, h, lambda frac, st: system.vector_field(t + frac * h, st, control)
        )
        return new, StepStats.explicit(mu0.dtype)


def rkmk4_step(system, g0, mu0, h, field):
    """One RKMK4 step from ``(g0, mu0)`` (module docstring): classical RK4 on ``(Θ, μ)`` with
    ``dΘ/dt = J_r(Θ)^{-1} ξ``, ``g = g0 exp(Θ)``.  ``field(frac, state) -> (ξ, μ̇)`` is the
    vector field at time ``t + frac·h``, ``frac`` ∈ {0, 0.5, 1} (shared by :class:`RKMK4` and
    :class:`geomjax.reconstruction.ReconstructionRKMK4`).  Returns the new state."""
    G = system.group

    def f(frac, theta, mu):
        g = G.compose(g0, G.exp(theta))
        xi, dmu = field(frac, system.make_state(g, mu))
        return G.jac_right_inv(theta) @ xi, dmu

    th0 = jnp.zeros_like(mu0)
    k1 = f(0.0, th0, mu0)
    k2 = f(0.5, th0 + 0.5 * h * k1[0], mu0 + 0.5 * h * k1[1])
    k3 = f(0.5, th0 + 0.5 * h * k2[0], mu0 + 0.5 * h * k2[1])
    k4 = f(1.0, th0 + h * k3[0], mu0 + h * k3[1])
    theta = h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
    mu1 = mu0 + h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    return system.make_state(G.compose(g0, G.exp(theta)), mu1)

"""Base-controlled systems driven by their base velocity (nonholonomic motion planning): the
state ``(g, b)``, the control ``u = ḃ``, and the fourth-order Magnus step of the horizontal lift
for a piecewise-linear base curve (Cabrera, *Base-controlled mechanical systems and geometric
phases*, §4.3)."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from ..integrators.base import AbstractMethod, StepStats

__all__ = ["BaseVelocityState", "BaseVelocitySystem", "LiftMagnus4"]


class BaseVelocityState(eqx.Module):
    """State of :class:`BaseVelocitySystem`: the fiber variable ``g`` (the group's element shape)
    and the base point ``b`` ``(base_dim,)``."""

    g: jax.Array
    b: jax.Array


class BaseVelocitySystem(eqx.Module):
    """A base-controlled system (Cabrera, *Base-controlled mechanical systems and geometric
    phases*, §2–4) driven by its base velocity: state ``(g, b)`` on ``G × B``, control ``u = ḃ``
    ``(base_dim,)``, zero momentum.  The fiber moves by the horizontal lift (§4.3, Prop. 4.12)

        ḃ = u,     ġ = g ξ,   ξ = horizontal_velocity(b, u):  C ξ = r,  ⟨I₀ ξ + J₀, X⟩ = 0 (X ∈ g^{d₀}),

    the constraint terms ``C, r`` (affine constraints included), locked inertia ``I₀`` and momentum
    map ``J₀`` taken at the section ``d₀ = section(b)`` with velocity ``d section(b)·u``: a
    kinematic (driftless, or affine for a turntable) control system, the setting of nonholonomic
    motion planning.  Integrate it with :class:`LiftMagnus4`; the chart of the trajectory
    optimizers is :class:`~geomjax.control.LieGroupChart` (``b`` takes the place of the momentum)."""

    system: object  # a geomjax.reconstruction.BaseControlledSystem

    @property
    def group(self):
        return self.system.group

    def split(self, state):
        return state.g, state.b

    def make_state(self, g, b):
        return BaseVelocityState(g, b)

    def check_state(self, state, name="state0"):
        if not isinstance(state, BaseVelocityState):
            raise ValueError(
                f"BaseVelocitySystem: argument '{name}' must be a BaseVelocityState, got "
                f"{type(state).__name__}"
            )
        nb = self.system.base_dim
        if jnp.shape(state.b) != (nb,):
            raise ValueError(
                f"BaseVelocitySystem: argument '{name}'.b must have shape ({nb},) (base_dim), "
                f"got {jnp.shape(state.b)}"
            )
        return state

    def horizontal_velocity(self, b, u):
        """Body velocity ``ξ`` ``(dim G,)`` of the zero-momentum lift at the base point ``b`` with
        base velocity ``u`` (the same saddle-point system as
        :meth:`geomjax.reconstruction.Reconstruction.lift_velocity`)."""
        from .core import saddle_solve

        S = self.system
        q, v = jax.jvp(S.section, (b,), (u,))
        C, r = S.constraint_terms(q, v)
        return saddle_solve(S.locked_inertia(q), C, -S.momentum_map(q, v), r)[0]


class LiftMagnus4(AbstractMethod):
    """One step of :class:`BaseVelocitySystem` with the base velocity ``u`` held over the step:
    ``b`` moves on the segment ``b_k + s u`` (exactly), ``g`` by the fourth-order Magnus step
    :func:`geomjax.reconstruction.magnus4_update` with ``ξ`` at the two Gauss points of the
    segment (the step of :class:`~geomjax.reconstruction.HorizontalLift` for a base curve that is
    piecewise linear).  Exact when ``ξ`` is constant along the segment (a ball on a fixed plate)."""

    order: ClassVar[int] = 4

    def supports(self, system) -> bool:
        return isinstance(system, BaseVelocitySystem)

    def step(self, system, state, dt, control=None, t=0.0):
        from .methods import GAUSS_NODES, magnus4_update

        g, b = state.g, state.b
        h = jnp.asarray(dt, b.dtype)
        u = jnp.zeros_like(b) if control is None else jnp.asarray(control, b.dtype)
        nodes = jnp.asarray(GAUSS_NODES, b.dtype)
        xis = jax.vmap(lambda s: system.horizontal_velocity(b + s * h * u, u))(nodes)
        g1 = magnus4_update(system.group, g, xis[0], xis[1], h, "left")
        return BaseVelocityState(g1, b + h * u), StepStats.explicit(b.dtype)

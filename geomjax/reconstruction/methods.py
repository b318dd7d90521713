"""Integrators for :class:`~geomjax.reconstruction.Reconstruction` (run by :func:`geomjax.simulate`).

* :class:`MomentumLGVI` — the structure-preserving default: a Lie-group variational integrator
  for the time-dependent reduced Lagrangian ``L_{d₀}(ξ, t)`` with the discrete
  Lagrange–d'Alembert principle for the constraints.  ``g`` stays on the group (exactly, up to
  the round-off of ``exp``), the momentum is updated by the exact coadjoint map, so the spatial
  momentum (D = TQ) or the momentum along a constant ``g^q`` of an abelian group is conserved to
  round-off.  Second order.
* :class:`ReconstructionRKMK4` — fourth-order Runge–Kutta–Munthe-Kaas on ``(g, Π)`` for reference
  solutions (not momentum-preserving).
* :class:`HorizontalLift` — the zero-momentum / purely kinematic case: ``ġ = g ξ(t)`` with
  ``ξ = −𝒜(ḋ₀)`` (plus the affine part), by the fourth-order Magnus step.
* :class:`Magnus4` on :class:`KinematicSystem` — the reconstruction equation ``ġ = g ξ(t)`` (or
  ``ġ = ξ(t) g``) with the velocity given as the control: the same Magnus step
  (:func:`magnus4_update`), the one integrator of ``ġ = g ξ(t)`` in geomjax.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.scalarize import Scalarized
from ..integrators.base import AbstractMethod, StepStats, needs_reorthonormalization
from ..integrators.newton import dense_jac_solve, newton_solve
from ..integrators.rkmk import rkmk4_step
from ..lie.base import LieGroup
from .core import Reconstruction, saddle_solve

__all__ = [
    "HorizontalLift",
    "KinematicState",
    "KinematicSystem",
    "Magnus4",
    "MomentumLGVI",
    "ReconstructionRKMK4",
    "gauss_times",
    "magnus4_update",
]

#: the two Gauss–Legendre nodes of a step, as fractions of it
GAUSS_NODES = (0.5 - math.sqrt(3) / 6, 0.5 + math.sqrt(3) / 6)


def magnus4_update(group: LieGroup, g, xi1, xi2, h, side: str = "left"):
    """One fourth-order Magnus step (Iserles–Nørsett) of ``ġ = g ξ(t)`` (``side="left"``) or
    ``ġ = ξ(t) g`` (``side="right"``) from ``ξ₁, ξ₂`` at the Gauss points
    ``t_k + (½ ∓ √3/6) h``::

        Ω = h/2 (ξ₁ + ξ₂) ± (√3/12) h² [ξ₁, ξ₂],   g_{k+1} = g_k exp(Ω)  or  exp(Ω) g_k

    (``+`` for the left equation, ``−`` for the right one, Iserles–Nørsett's ``Y' = A(t) Y``; the
    left case follows from ``(g⁻¹)' = −ξ g⁻¹``).  Explicit, time-symmetric, exact on the group up
    to the round-off of ``exp``.  Shapes: ``g`` the group's element shape, ``ξ₁, ξ₂`` ``(dim,)``."""
    comm = group.vee(group.hat(xi1) @ group.hat(xi2) - group.hat(xi2) @ group.hat(xi1))
    sign = 1.0 if side == "left" else -1.0
    omega = 0.5 * h * (xi1 + xi2) + sign * math.sqrt(3) / 12 * h**2 * comm
    if side == "left":
        return group.compose(g, group.exp(omega))
    return group.compose(group.exp(omega), g)


def gauss_times(duration, steps, dtype):
    """``(steps, 2)`` Gauss-point times of ``steps`` equal steps over ``[0, duration]`` (where
    :class:`Magnus4` wants its controls ``ξ``)."""
    h = duration / steps
    k = jnp.arange(steps, dtype=dtype)[:, None]
    return h * (k + jnp.asarray(GAUSS_NODES, dtype)[None, :])


class KinematicState(eqx.Module):
    """A point ``g`` of the group (the fiber variable of a base-controlled system)."""

    g: jax.Array


class KinematicSystem(eqx.Module):
    """``ġ = g ξ(t)`` (``side="left"``, body velocity) or ``ġ = ξ(t) g`` (``side="right"``,
    spatial velocity) with ``ξ`` given as the control: the reconstruction equation of a
    base-controlled system whose base curve is prescribed (Cabrera, *Base-controlled mechanical
    systems and geometric phases*, §2–4).

    The control of step ``k`` is ``(2, dim)``: ``ξ`` at the two Gauss points of the step
    (:func:`gauss_times`)."""

    group: LieGroup = eqx.field(static=True)
    side: Literal["left", "right"] = eqx.field(static=True, default="left")

    def check_state(self, state, name="state0"):
        return state


class Magnus4(AbstractMethod):
    """Fourth-order Magnus integrator for :class:`KinematicSystem` (:func:`magnus4_update`).
    Explicit; stays on the group to round-off."""

    order: ClassVar[int] = 4

    def supports(self, system) -> bool:
        return isinstance(system, KinematicSystem)

    def step(self, system, state, dt, control=None, t=0.0):
        g = state.g
        h = jnp.asarray(dt, g.dtype)
        g1 = magnus4_update(system.group, g, control[0], control[1], h, system.side)
        return KinematicState(g1), StepStats.explicit(g.dtype)


class _DELResidual(eqx.Module):
    """Residual of the discrete Lagrange–d'Alembert equations in ``x = (ξ_k, λ_k)``."""

    group: LieGroup

    def __call__(self, x, args):
        h, mu, I, J, C, r, Ck = args
        n = I.shape[0]
        xi, lam = x[:n], x[n:]
        G = self.group
        m_plus = G.jac_left_inv(h * xi).T @ (I @ xi + J)
        r1 = m_plus - mu - Ck.T @ lam
        r2 = C @ xi - r
        return jnp.concatenate([r1, r2])


def _rel(res, scale):
    return jnp.linalg.norm(res) / (1.0 + jnp.linalg.norm(scale))


class MomentumLGVI(AbstractMethod):
    """Lie-group variational integrator with time-dependent inertia (Cabrera, §2.3, §3.1–3.2).

    Discrete Lagrangian ``L_d(g_k, g_{k+1}) = h L_{d₀}(ξ_k, t_{k+½})`` with
    ``g_{k+1} = g_k exp(h ξ_k)``; variations ``η_k ∈ g^{d₀(t_k)} = ker C(t_k)``; the constraint
    is imposed at the midpoint, ``C(t_{k+½}) ξ_k = r(t_{k+½})``.  The state carries
    ``μ_k = J_r(hξ_{k−1})^{-T} ∂L/∂ξ`` (the discrete body momentum arriving at node k):

        J_l(hξ_k)^{-T} (I₀ ξ_k + J₀)_{k+½} = μ_k + C(t_k)ᵀ λ_k,   C_{k+½} ξ_k = r_{k+½}
        μ_{k+1} = Ad_{exp(hξ_k)}ᵀ (μ_k + C(t_k)ᵀ λ_k),  g_{k+1} = g_k exp(h ξ_k).

    Without constraints ``Ad_{g_{k+1}^{-1}}ᵀ μ_{k+1} = Ad_{g_k^{-1}}ᵀ μ_k`` exactly (discrete
    Noether).  An external torque enters as two half kicks (second order).  Newton runs at
    most ``newton_iters`` iterations, stopping once converged (``early_exit``, default ``True``:
    :func:`~geomjax.integrators.newton.newton_solve`'s criterion, the same results to round-off);
    its relative residual is reported in the stats.
    """

    newton_iters: int = eqx.field(static=True, default=6)
    reorthonormalize: bool | None = eqx.field(static=True, default=None)
    #: evaluate the Newton residual and Jacobian solve scalar by scalar
    #: (:func:`geomjax._internal.scalarize.scalarize`; the same numbers to round-off)
    scalarize: bool = eqx.field(static=True, default=True)
    early_exit: bool = eqx.field(static=True, default=True)
    order: ClassVar[int] = 2

    def supports(self, system) -> bool:
        return isinstance(system, Reconstruction)

    def step(self, system, state, dt, control=None, t=0.0):
        G = system.group
        g, mu = system.split(state)
        h = jnp.asarray(dt, mu.dtype)
        t = jnp.asarray(t, mu.dtype)
        # node and midpoint coefficients in one vmapped evaluation (one copy in the program)
        both = jax.vmap(system.coefficients)(jnp.stack([t, t + 0.5 * h]))
        co_k = jax.tree_util.tree_map(lambda x: x[0], both)
        co = jax.tree_util.tree_map(lambda x: x[1], both)
        kick = system.body_torque(t, g, mu)
        if control is not None:
            kick = control if kick is None else kick + control
        mu_in = mu if kick is None else mu + 0.5 * h * kick
        xi0, _ = saddle_solve(co.I0, co.C, mu_in - co.J0, co.r)
        m = co.C.shape[0]
        x0 = jnp.concatenate([xi0, jnp.zeros((m,), mu.dtype)])
        res_fn = _DELResidual(G)
        jac_solve = dense_jac_solve(res_fn)
        if self.scalarize:  # a few fused kernels per iteration (geomjax._internal.scalarize)
            # on an array iterate: carrying it as scalars (newton_solve(scalarize=True)) is 3%
            # faster unbatched but 15% slower at batch 1024 here (bench_scalarize.py, gyrostat)
            res_fn, jac_solve = Scalarized(res_fn), Scalarized(jac_solve)
        args = (h, mu_in, co.I0, co.J0, co.C, co.r, co_k.C)
        x, res = newton_solve(
            res_fn,
            x0,
            args,
            iters=self.newton_iters,
            jac_solve=jac_solve,
            early_exit=self.early_exit,
        )
        n = G.dim
        xi, lam = x[:n], x[n:]
        F = G.exp(h * xi)
        g1 = G.compose(g, F)
        if needs_reorthonormalization(self.reorthonormalize, mu.dtype):
            g1 = G.renormalize(g1)
        mu1 = G.Ad(F).T @ (mu_in + co_k.C.T @ lam)
        if kick is not None:
            tau1 = system.body_torque(t + h, g1, mu1)
            if control is not None:
                tau1 = control if tau1 is None else tau1 + control
            mu1 = mu1 + 0.5 * h * tau1
        return system.make_state(g1, mu1), StepStats(residual=_rel(res, mu_in))


class ReconstructionRKMK4(AbstractMethod):
    """Fourth-order Runge–Kutta–Munthe-Kaas on ``(g, Π)`` for the index-reduced reconstruction
    equations (:meth:`Reconstruction.vector_field`); explicit, ``g`` exactly on the group.  The
    high-accuracy reference; it does not conserve momentum exactly."""

    order: ClassVar[int] = 4

    def supports(self, system) -> bool:
        return isinstance(system, Reconstruction)

    def step(self, system, state, dt, control=None, t=0.0):
        g0, mu0 = system.split(state)
        h = jnp.asarray(dt, mu0.dtype)
        t = jnp.asarray(t, mu0.dtype)
        # the gauge quantities depend on the time only: evaluate them at t, t + h/2, t + h in
        # one vmapped call (RK4 needs no others), so the program holds a single copy
        ts = jnp.stack([t, t + 0.5 * h, t + h])
        rates = jax.vmap(system.coefficient_rates)(ts)
        at = [jax.tree_util.tree_map(lambda x, i=i: x[i], rates) for i in range(3)]
        node = {0.0: 0, 0.5: 1, 1.0: 2}

        def field(frac, st):
            return system.vector_field(t + frac * h, st, control, rates=at[node[frac]])

        new = rkmk4_step(system, g0, mu0, h, field)
        return new, StepStats.explicit(mu0.dtype)


class HorizontalLift(AbstractMethod):
    """Horizontal lift of the base curve (Cabrera §4.3, Prop. 4.12; zero momentum, §4.2 with
    ``μ = 0``): ``ġ = g ξ(t)`` with ``ξ`` from ``Cξ = r`` and zero momentum along ``g^{d₀}``,
    i.e. ``ξ = −𝒜(ḋ₀)`` for linear constraints.  This *is* the physical motion when
    ``g^q = 0`` (purely kinematic constraints) or when ``D = TQ`` and the momentum vanishes.
    Fourth order: the Magnus step :func:`magnus4_update` with ``ξ`` at the two Gauss points of
    the step; the momentum of the state is reset to the lift's ``I₀ξ + J₀`` at the step's end."""

    order: ClassVar[int] = 4

    def supports(self, system) -> bool:
        return isinstance(system, Reconstruction)

    def step(self, system, state, dt, control=None, t=0.0):
        g0, mu0 = system.split(state)
        h = jnp.asarray(dt, mu0.dtype)
        t = jnp.asarray(t, mu0.dtype)
        # ξ(t) does not depend on g: one vmapped evaluation at the two Gauss points and the end
        nodes = jnp.asarray((*GAUSS_NODES, 1.0), mu0.dtype)
        cos = jax.vmap(system.coefficients)(t + h * nodes)
        xis = jax.vmap(lambda c: saddle_solve(c.I0, c.C, -c.J0, c.r)[0])(cos)
        g1 = magnus4_update(system.group, g0, xis[0], xis[1], h, "left")
        mu1 = cos.I0[2] @ xis[2] + cos.J0[2]
        return system.make_state(g1, mu1), StepStats.explicit(mu0.dtype)

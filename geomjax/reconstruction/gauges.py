"""Ready-made gauges for :class:`~geomjax.reconstruction.Reconstruction` (Cabrera, *Base-controlled mechanical systems and geometric phases*, §2.4.3, §4.1).

A gauge is a curve ``d₀(t)`` in Q over the base curve ``c̃(t)``; :class:`Reconstruction` takes it
as a gauge transformation ``t -> h(t)``, ``d₀(t) = h(t)·section(c̃(t))``.  The two gauges of the
paper are horizontal lifts of ``c̃`` from ``h(t₀) = e``:

* the *nonholonomic* gauge ``d₀^NH`` (eqs. 14, 16): ``ḋ₀ ∈ D`` (affine constraints included)
  and ``i*J(ḋ₀) = 0`` on ``g^{d₀}``, the horizontal lift for the nonholonomic connection
  (Bloch–Krishnaprasad–Marsden–Murray).  In it the constraint reads ``ξ ∈ g^{d₀}`` (eq. 15) and a
  zero-momentum motion is ``g ≡ e``;
* the *mechanical* gauge ``d₀^Mech`` (eq. 18): ``J(ḋ₀) = 0``, the horizontal lift for the
  mechanical connection ``I⁻¹J``.  It coincides with the nonholonomic one when ``D = TQ``.

Both solve ``ḣ = h ξ_h(t)`` with ``ξ_h`` from the trivial gauge (``ξ_h = −𝒜(ṡ)`` for
``s(t) = section(c̃(t))``; it does not depend on ``h`` by equivariance), tabulated by the
fourth-order Magnus step on a uniform grid and interpolated (:class:`TabulatedGauge`): smooth in
``t`` and differentiable in the curve's ``params``.
The physical motion ``c = g·d₀`` does not depend on the gauge; the group curve ``g`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.tracing import any_traced
from ..lie.base import LieGroup
from .core import BaseControlledSystem, Reconstruction
from .methods import GAUSS_NODES, magnus4_update

__all__ = ["TabulatedGauge", "mechanical_gauge", "nonholonomic_gauge"]


#: rate weights (nonholonomic lift, mechanical lift) of the two gauges
_WEIGHTS = {"nonholonomic": (1.0, 0.0), "mechanical": (0.0, 1.0)}


def _gauge_rate(recon: Reconstruction, weights, t) -> jax.Array:
    """Body velocity ``ξ_h(t) = w₀ ξ_NH + w₁ ξ_Mech`` of the gauge transformation (trivial gauge
    ``recon``); both gauges are one program (one compile)."""
    co = recon.coefficients(t)
    return weights[0] * recon.lift_velocity(t, co) - weights[1] * jnp.linalg.solve(co.I0, co.J0)


def _gauge_step(recon, weights, h, tk, tau):
    x1 = _gauge_rate(recon, weights, tk + GAUSS_NODES[0] * tau)
    x2 = _gauge_rate(recon, weights, tk + GAUSS_NODES[1] * tau)
    return magnus4_update(recon.group, h, x1, x2, tau, "left")


class TabulatedGauge(eqx.Module):
    """A gauge transformation ``t -> h(t)`` with ``ḣ = h ξ_h(t)``, ``h(t₀) = e``, tabulated on
    ``t_k = t₀ + k·dt``, ``k = 0..steps`` (the nonholonomic or mechanical gauge of Cabrera
    §2.4.3, eqs. 14–18; build it with :func:`nonholonomic_gauge` or :func:`mechanical_gauge`).

    The nodes ``h_k`` come from the fourth-order Magnus step (:func:`magnus4_update`, ``ξ_h`` at
    the Gauss points).  Between nodes ``h(t) = h_k exp(Ω(t − t_k))`` with ``Ω`` the cubic Hermite
    interpolant of ``Ω(0) = 0``, ``Ω(dt) = Δ_k = log(h_k⁻¹h_{k+1})``, ``Ω'(0) = ξ_h(t_k)``,
    ``Ω'(dt) = J_r(Δ_k)⁻¹ ξ_h(t_{k+1})``: a C¹ curve through the nodes with the exact velocity
    there, O(dt⁴) from the exact lift in value and O(dt³) in velocity, evaluated from the table
    alone (no model evaluation: the reconstruction's up-to-third time derivatives of the gauge
    cost nothing).  Any smooth gauge gives the same physical motion; the tabulation error only
    makes the gauge's defining property (``ḋ₀ ∈ D`` or ``J(ḋ₀) = 0``) approximate.  Outside
    ``[t₀, t₀ + steps·dt]`` the end cubics are extrapolated.  Pass it as
    ``Reconstruction(..., gauge=...)`` with the same system, base curve and params.

    Attributes: ``group`` (static); ``t0``, ``dt`` scalars; ``table``
    ``(steps + 1, *element_shape)`` the nodes ``h_k``; ``rates`` ``(steps + 1, n)`` the body
    velocities ``ξ_h(t_k)``; ``logs`` ``(steps, n)`` the ``Δ_k``; ``end_rates`` ``(steps, n)``
    the ``J_r(Δ_k)⁻¹ ξ_h(t_{k+1})``.
    """

    group: LieGroup = eqx.field(static=True)
    t0: jax.Array
    dt: jax.Array
    table: jax.Array
    rates: jax.Array
    logs: jax.Array
    end_rates: jax.Array

    def __call__(self, t) -> jax.Array:
        t = jnp.asarray(t, self.table.dtype)
        n = self.logs.shape[0]
        k = jnp.clip(jnp.floor((t - self.t0) / self.dt), 0, n - 1).astype(jnp.int32)
        s = (t - (self.t0 + k * self.dt)) / self.dt
        h10, h01, h11 = s**3 - 2 * s**2 + s, 3 * s**2 - 2 * s**3, s**3 - s**2
        omega = (
            h10 * self.dt * self.rates[k] + h01 * self.logs[k] + h11 * self.dt * self.end_rates[k]
        )
        return self.group.compose(self.table[k], self.group.exp(omega))


@eqx.filter_jit
def _tabulate(recon, weights, t0, dt, steps):
    G = recon.group

    def body(h, k):
        h1 = _gauge_step(recon, weights, h, t0 + k * dt, dt)
        return h1, h1

    e = G.identity(dtype=dt.dtype)
    _, hs = jax.lax.scan(body, e, jnp.arange(steps, dtype=dt.dtype))
    table = jnp.concatenate([e[None], hs])
    ts = t0 + dt * jnp.arange(steps + 1, dtype=dt.dtype)
    rates = jax.vmap(lambda t: _gauge_rate(recon, weights, t))(ts)
    logs = jax.vmap(lambda a, b: G.log(G.compose(G.inverse(a), b)))(table[:-1], table[1:])
    end_rates = jax.vmap(lambda d, x: G.jac_right_inv(d) @ x)(logs, rates[1:])
    return table, rates, logs, end_rates


def _make_gauge(kind, where, system, base_curve, t_final, steps, params, t0):
    if not isinstance(system, BaseControlledSystem):
        raise ValueError(f"{where}: argument 'system' must be a BaseControlledSystem")
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"{where}: argument 'steps' must be an int >= 1, got {steps!r}")
    recon = Reconstruction(system, base_curve, params=params)
    dtype = jnp.result_type(float)
    t0 = jnp.asarray(t0, dtype)
    t1 = jnp.asarray(t_final, dtype)
    if jnp.shape(t1) != () or jnp.shape(t0) != ():
        raise ValueError(f"{where}: arguments 't_final' and 't0' must be scalars")
    if not any_traced((t0, t1)) and not bool(t1 > t0):
        raise ValueError(
            f"{where}: argument 't_final' must be greater than 't0', got {float(t1)} <= {float(t0)}"
        )
    dt = (t1 - t0) / steps
    w = jnp.asarray(_WEIGHTS[kind], dtype)
    return TabulatedGauge(system.group, t0, dt, *_tabulate(recon, w, t0, dt, steps))


def nonholonomic_gauge(
    system: BaseControlledSystem,
    base_curve: Callable,
    t_final,
    steps: int = 256,
    *,
    params: Any = None,
    t0=0.0,
) -> TabulatedGauge:
    """The nonholonomic gauge ``d₀^NH(t) = h(t)·section(c̃(t))`` (Cabrera §2.4.3, eqs. 14 and 16):
    the horizontal lift of ``c̃`` for the nonholonomic connection, ``h(t₀) = e``::

        ḣ = h ξ_h,   C ξ_h = r,   ⟨I₀ ξ_h + J₀, X⟩ = 0  ∀ X ∈ g^{d₀}     (trivial-gauge C, r, I₀, J₀)

    so ``ḋ₀^NH ∈ D`` (the affine part included, the paper's affine gauge of §3.2/§5.2) and
    ``i*J(ḋ₀^NH) = 0``.  In this gauge the constraint is ``ξ ∈ g^{d₀}`` (eq. 15); the zero-momentum
    motion is ``g ≡ e`` (Prop. 4.5, Remark 4.11).  Over a closed loop ``h(T)`` is the holonomy
    ``g^NH`` of §4.1 (:func:`holonomy`).  ``steps`` Magnus steps on ``[t0, t_final]``.

    Returns a :class:`TabulatedGauge` for ``Reconstruction(system, base_curve, params=params,
    gauge=...)``.
    """
    return _make_gauge(
        "nonholonomic", "nonholonomic_gauge", system, base_curve, t_final, steps, params, t0
    )


def mechanical_gauge(
    system: BaseControlledSystem,
    base_curve: Callable,
    t_final,
    steps: int = 256,
    *,
    params: Any = None,
    t0=0.0,
) -> TabulatedGauge:
    """The mechanical gauge ``d₀^Mech(t) = h(t)·section(c̃(t))`` (Cabrera eq. 18, §4.1):
    ``J(ḋ₀^Mech) = 0``, the horizontal lift of ``c̃`` for the mechanical connection, ``h(t₀) = e``::

        ḣ = h ξ_h,   ξ_h = −I₀⁻¹ J₀                              (trivial-gauge I₀, J₀)

    The constraints are ignored (for ``D = TQ`` it equals :func:`nonholonomic_gauge`).  In it the
    momentum equation loses its ``J(ḋ₀)`` term (eq. 39); over a closed loop ``h(T)`` is
    ``g_Mech(t₂)``, the second geometric phase of §4.1.  Returns a :class:`TabulatedGauge`.
    """
    return _make_gauge(
        "mechanical", "mechanical_gauge", system, base_curve, t_final, steps, params, t0
    )

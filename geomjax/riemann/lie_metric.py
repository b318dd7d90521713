"""Left-invariant metrics on a Lie group: the Levi-Civita connection in the left-invariant frame
(Arnold's formula) and in exponential coordinates.

A left-invariant metric ``⟨ξ, η⟩ = ξᵀ I η`` (``I`` the inertia operator) makes a free rigid body a
geodesic flow on G (Arnold 1966; Chevallier, *On the foundations of ordinary and generalized rigid body dynamics and the principle of objectivity*, §5).  Two descriptions of its connection are
provided, and must give the same geodesics as the Euler–Poincaré equation ``μ̇ = coad(ξ, μ)``,
``μ = Iξ``, with the reconstruction ``ġ = g ξ``:

* in the left-invariant frame ``e_i``, ``∇_ξ η = ½([ξ, η] − I⁻¹(ad_ξᵀ Iη + ad_ηᵀ Iξ))`` (from the
  Koszul formula with constant inner products).  The frame coefficients ``C^k_{ij}``
  (``∇_{e_i} e_j = C^k_{ij} e_k``) are *not* symmetric: ``C^k_{ij} − C^k_{ji} = [e_i, e_j]^k``
  (the connection is torsion-free; the frame is not holonomic).  The geodesic equation in the
  frame is ``ξ̇ + ∇_ξ ξ = 0``, i.e. Euler–Poincaré.
* in exponential coordinates ``g = exp(q)``: body velocity ``ξ = J_r(q) q̇``, so the metric is
  ``g(q) = J_r(q)ᵀ I J_r(q)`` (Solà's right Jacobian, ``group.jac_right``) and the coordinate
  Christoffel symbols follow by autodiff (:func:`geomjax.riemann.christoffel`).  Valid inside the
  principal ball of ``exp`` (``|ω| < π`` on SO(3)/SE(3)).

Sign conventions as in :mod:`geomjax.lie`: ``ad(ξ)η = [ξ, η]`` and ``coad(ξ, μ) = ad(ξ)ᵀμ``
(Chevallier and Cabrera write ``ad*_ξ = −ad(ξ)ᵀ``; see the documentation's Conventions page).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from ..lie import LieGroup
from ..lie._math import as_float
from ._checks import Checker, check_spd, cho_solve
from .metric import christoffel_checked, first_kind_contract

__all__ = ["LeftInvariantMetric"]


class LeftInvariantMetric(eqx.Module):
    """Left-invariant metric ``⟨ξ, η⟩ = ξᵀ I η`` on ``group``.

    Args:
        group: any :class:`geomjax.lie.LieGroup` (``SO3``, ``SE3``, ``SE2``, ...).
        inertia: ``(dim,)`` diagonal (principal moments) or ``(dim, dim)`` symmetric positive
            definite.  On SE(3) in ``(ω, v)`` order the Newton–Euler inertia of a body of mass m
            with centre of mass c is ``[[I_c + m|c|²1 − m ccᵀ, m ĉ], [m ĉᵀ, m 1]]`` (Chevallier).

    All methods act on single vectors of shape ``(dim,)``; batch with ``jax.vmap``.
    """

    group: LieGroup
    inertia: jax.Array

    def __init__(self, group: LieGroup, inertia):
        if not isinstance(group, LieGroup):
            raise ValueError(
                f"LeftInvariantMetric: argument 'group' must be a geomjax LieGroup, got {group!r}"
            )
        I = as_float(inertia)
        d = group.dim
        if I.shape == (d,):
            I = jnp.diag(I)
        if I.shape != (d, d):
            raise ValueError(
                f"LeftInvariantMetric: argument 'inertia' must have shape ({d},) or ({d}, {d}) "
                f"for {group.name}, got {tuple(as_float(inertia).shape)}"
            )
        self.group = group
        self.inertia = check_spd(I, "inertia", "LeftInvariantMetric")

    @property
    def dim(self) -> int:
        return self.group.dim

    def _chk(self, where, **vectors):
        chk = Checker(f"LeftInvariantMetric.{where}")
        return chk, [chk.vector(x, name, self.dim) for name, x in vectors.items()]

    def _Iinv(self, mu):
        return cho_solve(self.inertia, mu)  # the inertia was validated at construction

    # --- the metric in the frame -------------------------------------------------------------
    def inner(self, xi, eta) -> jax.Array:
        """``⟨ξ, η⟩ = ξᵀ I η``."""
        chk, (xi, eta) = self._chk("inner", xi=xi, eta=eta)
        return chk.done(xi @ self.inertia @ eta)

    def momentum(self, xi) -> jax.Array:
        """Body momentum ``μ = I ξ``."""
        chk, (xi,) = self._chk("momentum", xi=xi)
        return chk.done(self.inertia @ xi)

    def velocity(self, mu) -> jax.Array:
        """Body velocity ``ξ = I⁻¹ μ``."""
        chk, (mu,) = self._chk("velocity", mu=mu)
        return chk.done(self._Iinv(mu))

    def kinetic_energy(self, xi) -> jax.Array:
        return 0.5 * self.inner(xi, xi)

    def _connection(self, xi, eta):
        G = self.group
        w = G.coad(xi, self.inertia @ eta) + G.coad(eta, self.inertia @ xi)
        return 0.5 * (G.ad(xi) @ eta - self._Iinv(w))

    def connection(self, xi, eta) -> jax.Array:
        """``∇_ξ η`` for the left-invariant fields ξ, η (Arnold's formula).

        ``∇_ξ η = ½([ξ, η] − I⁻¹(ad_ξᵀ Iη + ad_ηᵀ Iξ))``, shape ``(dim,)``.
        """
        chk, (xi, eta) = self._chk("connection", xi=xi, eta=eta)
        return chk.done(self._connection(xi, eta))

    def frame_christoffel(self) -> jax.Array:
        """Connection coefficients in the left-invariant frame, ``C[k, i, j]``, ``∇_{e_i} e_j =
        C^k_{ij} e_k``; shape ``(dim, dim, dim)``.  Not symmetric in ``i, j``:
        ``C^k_{ij} − C^k_{ji} = [e_i, e_j]^k``."""
        E = jnp.eye(self.dim, dtype=self.inertia.dtype)
        C = jax.vmap(lambda a: jax.vmap(lambda b: self._connection(a, b))(E))(E)  # [i, j, k]
        return jnp.transpose(C, (2, 0, 1))

    def euler_poincare(self, xi) -> jax.Array:
        """Geodesic equation in the frame: ``ξ̇ = −∇_ξ ξ = I⁻¹ coad(ξ, Iξ)`` (Euler–Poincaré).

        On SO(3) with diagonal inertia this is Euler's ``I Ω̇ = IΩ × Ω``.
        """
        chk, (xi,) = self._chk("euler_poincare", xi=xi)
        return chk.done(self._Iinv(self.group.coad(xi, self.inertia @ xi)))

    # --- exponential coordinates ----------------------------------------------------------------
    def body_velocity(self, q, qdot) -> jax.Array:
        """``ξ = g⁻¹ġ = J_r(q) q̇`` for ``g = exp(q)``."""
        chk, (q, qdot) = self._chk("body_velocity", q=q, qdot=qdot)
        return chk.done(self.group.jac_right(q) @ qdot)

    def _exp_metric(self, q):
        J = self.group.jac_right(q)
        return J.T @ self.inertia @ J

    def exp_coords_metric(self, q) -> jax.Array:
        """Metric in exponential coordinates, ``J_r(q)ᵀ I J_r(q)``, shape ``(dim, dim)``."""
        chk, (q,) = self._chk("exp_coords_metric", q=q)
        return chk.done(self._exp_metric(q))

    def exp_coords_christoffel(self, q) -> jax.Array:
        """Coordinate Christoffel symbols ``Γ^k_{ij}(q)`` in exponential coordinates, ``[k, i, j]``."""
        chk, (q,) = self._chk("exp_coords_christoffel", q=q)
        return chk.done(christoffel_checked(self._exp_metric, q, chk))

    def exp_coords_geodesic_acceleration(self, q, qdot) -> jax.Array:
        """``q̈ = −Γ(q̇, q̇)`` in exponential coordinates (contraction, no ``dim³`` tensor)."""
        chk, (q, qdot) = self._chk("exp_coords_geodesic_acceleration", q=q, qdot=qdot)
        g, b = first_kind_contract(self._exp_metric, q, qdot, qdot, chk.where)
        return chk.done(-chk.solve(g, b, "metric(q)"))

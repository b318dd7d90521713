"""Ideal holonomic constraints: a submanifold of a flat ambient space given by a parametrization
(:class:`Embedding`) or as a level set ``c(x) = 0`` (:class:`LevelSetConstraint`).

Seed 000 (Modugno–Vitolo §2.2).  The ambient space carries a constant metric ``M`` — Euclidean,
or the mass matrix of a system of particles (the kinetic-energy metric; seed 000 §3 uses the
weighted metric ``m_0 G_mul = diag(m_i)``).  *All* projections are orthogonal in ``M``, not in the
Euclidean metric.  For a parametrization ``x = φ(q)`` with ``J = ∂φ/∂q``:

* intrinsic metric ``g_con = Jᵀ M J``;
* tangent projection of a vector ``π^∥(X) = J g_con⁻¹ Jᵀ M X``, normal ``π^⊥ = 1 − π^∥``;
* on covectors: intrinsic force ``F_con = i*F = Jᵀ F``; the lift of an intrinsic covector is
  ``j(ω) = M J g_con⁻¹ ω`` — with the inverse of the *induced* metric, not the tangent block of the
  ambient inverse (misprint in seed 000 §2.2.1, see ``shared/notes/conventions.md``); normal part
  ``π_⊥(F) = F − j(Jᵀ F)``;
* second fundamental form ``N(u, w) = π^⊥(∂²φ(u, w))`` (the ambient connection is flat, so the
  extrinsic acceleration is ``ẍ = J q̈ + ∂²φ(q̇, q̇)``, Gauss' splitting);
* Theorem 2.1: the motion satisfies ``g_con q̈ + Jᵀ M ∂²φ(q̇, q̇) = Jᵀ F`` (intrinsic law; the
  left side equals ``g_con(q̈ + Γ_con(q̇, q̇))``), and the reaction of an ideal constraint
  (``R_con = 0``, eq. 2.2) is ``R = M N(q̇, q̇) − π_⊥(F)``, a covector annihilating every tangent
  vector (it does no work on virtual displacements).  Eq. (2.3) is the same covector in an
  adapted chart; there ``Γ_{arb}`` means the first-kind symbol ``Γ_{r,ab}``.

Forces are covectors of shape ``(N,)``; the reaction is returned as a covector too (for a
Euclidean ambient metric covectors and vectors coincide).  Every method acts at one point; batch
with ``jax.vmap``.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from ..lie._math import as_float
from ._ambient import AmbientMetric
from ._checks import check_vector, spd_solve
from .metric import christoffel

__all__ = ["Embedding", "LevelSetConstraint"]


def _second_derivative(f, x, u, w):
    """``∂²f(x)[u, w]`` by nested forward mode (no Hessian tensor)."""
    return jax.jvp(lambda y: jax.jvp(f, (y,), (u,))[1], (x,), (w,))[1]


def _check_callable(f, name: str, where: str):
    if not callable(f):
        raise ValueError(f"{where}: argument '{name}' must be callable, got {type(f).__name__}")


class Embedding(eqx.Module):
    """Constraint submanifold given by a parametrization ``φ: q ↦ x`` (Lagrangian coordinates q).

    Args:
        phi: ``phi(q) -> x``, ``(l,) -> (N,)``, an immersion (``∂φ/∂q`` of full rank ``l``).
        ambient_metric: ``None`` (Euclidean), a positive scalar mass, an ``(N,)`` vector of masses
            per ambient axis or an ``(N, N)`` SPD mass matrix.

    Example (a particle of mass ``m`` on a sphere of radius ``a`` in spherical angles)::

        sphere = Embedding(
            lambda q: (
                a
                * jnp.array(
                    [jnp.sin(q[0]) * jnp.cos(q[1]), jnp.sin(q[0]) * jnp.sin(q[1]), jnp.cos(q[0])]
                )
            ),
            ambient_metric=m,
        )
        R = sphere.reaction_force(q, qdot, force=m * jnp.array([0.0, 0.0, -9.81]))
    """

    phi: Callable = eqx.field(static=True)
    ambient: AmbientMetric

    def __init__(self, phi: Callable, ambient_metric=None):
        _check_callable(phi, "phi", "Embedding")
        self.phi = phi
        self.ambient = AmbientMetric(ambient_metric, "Embedding")

    # --- geometry ----------------------------------------------------------------------------
    def _q(self, q, where):
        return check_vector(q, "q", f"Embedding.{where}")

    def _phi(self, q, where="position"):
        x = as_float(self.phi(q))
        if x.ndim != 1:
            raise ValueError(
                f"Embedding.{where}: argument 'phi' must map q of shape {tuple(q.shape)} to a "
                f"vector x of shape (N,), got shape {tuple(x.shape)}"
            )
        self.ambient.check_dim(x.shape[0], f"Embedding.{where}")
        return x

    def _frame(self, q, where):
        """``J = ∂φ/∂q`` ``(N, l)``, ``M J`` and the induced metric ``g = Jᵀ M J``."""
        q = self._q(q, where)

        def both(y):
            x = self._phi(y, where)
            return x, x

        J, _ = jax.jacfwd(both, has_aux=True)(q)
        MJ = self.ambient.apply(J)
        return q, J, MJ, J.T @ MJ

    def position(self, q) -> jax.Array:
        """``x = φ(q)``, shape ``(N,)``."""
        return self._phi(self._q(q, "position"))

    def tangent_basis(self, q) -> jax.Array:
        """``J = ∂φ/∂q``, shape ``(N, l)`` (columns ``∂_a`` span the tangent space)."""
        return self._frame(q, "tangent_basis")[1]

    def induced_metric(self, q) -> jax.Array:
        """Intrinsic metric ``g_con = Jᵀ M J``, shape ``(l, l)``."""
        return self._frame(q, "induced_metric")[3]

    def christoffel(self, q) -> jax.Array:
        """Christoffel symbols ``Γ^a_{bc}`` of the induced metric, ``(l, l, l)`` indexed ``[a, b, c]``."""
        return christoffel(self.induced_metric, q)

    def velocity(self, q, qdot) -> jax.Array:
        """Ambient velocity ``ẋ = J q̇``, shape ``(N,)``."""
        q = self._q(q, "velocity")
        qdot = check_vector(qdot, "qdot", "Embedding.velocity", q.shape[0])
        return jax.jvp(self.phi, (q,), (qdot,))[1]

    def kinetic_energy(self, q, qdot) -> jax.Array:
        """``½ ẋᵀ M ẋ`` (the intrinsic kinetic energy ``½ g_con(q̇, q̇)``)."""
        xd = self.velocity(q, qdot)
        return 0.5 * xd @ self.ambient.apply(xd)

    def lagrangian(self, potential: Callable | None = None) -> Callable:
        """``L(q, q̇) = ½ g_con(q̇, q̇) − V(φ(q))`` with ``potential(x) -> ()`` (or none)."""

        def L(q, qdot):
            K = self.kinetic_energy(q, qdot)
            return K if potential is None else K - potential(self.phi(q))

        return L

    # --- projections (orthogonal in the ambient metric M) -------------------------------------
    def tangent_projection(self, q, X) -> jax.Array:
        """``π^∥(X) = J g_con⁻¹ Jᵀ M X`` for an ambient vector ``X`` ``(N,)``."""
        q, J, MJ, g = self._frame(q, "tangent_projection")
        X = check_vector(X, "X", "Embedding.tangent_projection", J.shape[0])
        return J @ spd_solve(g, MJ.T @ X, "induced metric", "Embedding.tangent_projection")

    def normal_projection(self, q, X) -> jax.Array:
        """``π^⊥(X) = X − π^∥(X)``: the M-orthogonal normal component of a vector."""
        return as_float(X) - self.tangent_projection(q, X)

    def intrinsic_force(self, q, F) -> jax.Array:
        """``F_con = i*F = Jᵀ F``, shape ``(l,)`` (generalized force)."""
        q, J, _, _ = self._frame(q, "intrinsic_force")
        return J.T @ check_vector(F, "F", "Embedding.intrinsic_force", J.shape[0])

    def normal_force(self, q, F) -> jax.Array:
        """``π_⊥(F) = F − M J g_con⁻¹ Jᵀ F``: the part of a covector that annihilates ``T P_con``."""
        q, J, MJ, g = self._frame(q, "normal_force")
        F = check_vector(F, "F", "Embedding.normal_force", J.shape[0])
        return F - MJ @ spd_solve(g, J.T @ F, "induced metric", "Embedding.normal_force")

    def second_fundamental_form(self, q, u, w=None) -> jax.Array:
        """``N(u, w) = π^⊥(∂²φ(q)[u, w])``, a normal vector of shape ``(N,)``; ``w = u`` if omitted."""
        q = self._q(q, "second_fundamental_form")
        u = check_vector(u, "u", "Embedding.second_fundamental_form", q.shape[0])
        w = (
            u
            if w is None
            else check_vector(w, "w", "Embedding.second_fundamental_form", q.shape[0])
        )
        return self.normal_projection(q, _second_derivative(self.phi, q, u, w))

    # --- dynamics ----------------------------------------------------------------------------
    def _dynamics(self, q, qdot, force, where):
        q, J, MJ, g = self._frame(q, where)
        qdot = check_vector(qdot, "qdot", f"Embedding.{where}", q.shape[0])
        N = J.shape[0]
        F = (
            jnp.zeros(N, J.dtype)
            if force is None
            else check_vector(force, "force", f"Embedding.{where}", N)
        )
        curv = _second_derivative(self.phi, q, qdot, qdot)  # ∂²φ(q̇, q̇), ambient (N,)
        qddot = spd_solve(g, J.T @ F - MJ.T @ curv, "induced metric", f"Embedding.{where}")
        return J, MJ, g, F, curv, qddot

    def acceleration(self, q, qdot, force=None) -> jax.Array:
        """Intrinsic equation of motion (Thm 2.1, first line, with ``R_con = 0``).

        ``q̈ = g_con⁻¹ (Jᵀ F − Jᵀ M ∂²φ(q̇, q̇)) = −Γ_con(q̇, q̇) + g_con⁻¹ F_con``, shape ``(l,)``.
        """
        return self._dynamics(q, qdot, force, "acceleration")[-1]

    def ambient_acceleration(self, q, qdot, force=None) -> jax.Array:
        """Extrinsic acceleration ``ẍ = J q̈ + ∂²φ(q̇, q̇)``, shape ``(N,)``."""
        J, _, _, _, curv, qddot = self._dynamics(q, qdot, force, "ambient_acceleration")
        return J @ qddot + curv

    def reaction_force(self, q, qdot, force=None) -> jax.Array:
        """Reaction of the ideal constraint (seed 000, Thm 2.1, eq. 2.2), a covector ``(N,)``.

        ``R = M N(q̇, q̇) − π_⊥(F)``; equals ``M ẍ − F`` on the constrained motion and satisfies
        ``Jᵀ R = 0`` (zero power on every tangent velocity).
        """
        J, MJ, g, F, curv, _ = self._dynamics(q, qdot, force, "reaction_force")
        # M π^⊥(curv) − π_⊥(F) = (M curv − F) − M J g⁻¹ Jᵀ (M curv − F)
        r = self.ambient.apply(curv) - F
        return r - MJ @ spd_solve(g, J.T @ r, "induced metric", "Embedding.reaction_force")


class LevelSetConstraint(eqx.Module):
    """Constraint submanifold ``{x : c(x) = 0}`` handled with Lagrange multipliers.

    Args:
        c: ``c(x) -> (k,)`` (or a scalar), with ``A = ∂c/∂x`` of full rank ``k`` on the constraint.
        ambient_metric: as for :class:`Embedding`.

    ``M ẍ = F + Aᵀλ`` together with ``A ẍ + ∂²c(ẋ, ẋ) = 0`` gives
    ``λ = −(A M⁻¹ Aᵀ)⁻¹ (∂²c(ẋ, ẋ) + A M⁻¹ F)``; the reaction ``Aᵀλ`` is the same covector as
    :meth:`Embedding.reaction_force` for any parametrization of the same submanifold.  Redundant
    constraints (rank-deficient ``A``, e.g. pairwise distances of a collinear or coplanar rigid
    body) raise an error; use :class:`geomjax.riemann.RigidSystem` for rigid bodies.
    """

    c: Callable = eqx.field(static=True)
    ambient: AmbientMetric

    def __init__(self, c: Callable, ambient_metric=None):
        _check_callable(c, "c", "LevelSetConstraint")
        self.c = c
        self.ambient = AmbientMetric(ambient_metric, "LevelSetConstraint")

    def _c(self, x):
        return jnp.atleast_1d(as_float(self.c(x)))

    def _x(self, x, where):
        x = check_vector(x, "x", f"LevelSetConstraint.{where}")
        self.ambient.check_dim(x.shape[0], f"LevelSetConstraint.{where}")
        return x

    def value(self, x) -> jax.Array:
        """``c(x)``, shape ``(k,)`` (zero on the constraint)."""
        return self._c(self._x(x, "value"))

    def constraint_jacobian(self, x) -> jax.Array:
        """``A = ∂c/∂x``, shape ``(k, N)``."""
        return jax.jacfwd(self._c)(self._x(x, "constraint_jacobian"))

    def _schur(self, x, where):
        x = self._x(x, where)
        A = jax.jacfwd(self._c)(x)
        MinvAT = self.ambient.solve(A.T)  # (N, k)
        return x, A, MinvAT, A @ MinvAT

    def tangent_projection(self, x, X) -> jax.Array:
        """``X − M⁻¹Aᵀ(A M⁻¹ Aᵀ)⁻¹ A X`` (M-orthogonal projection onto ``ker A``)."""
        x, A, MinvAT, S = self._schur(x, "tangent_projection")
        X = check_vector(X, "X", "LevelSetConstraint.tangent_projection", x.shape[0])
        return X - MinvAT @ spd_solve(S, A @ X, "A M⁻¹ Aᵀ", "LevelSetConstraint")

    def normal_projection(self, x, X) -> jax.Array:
        return as_float(X) - self.tangent_projection(x, X)

    def second_fundamental_form(self, x, u, w=None) -> jax.Array:
        """``N(u, w) = −M⁻¹Aᵀ(A M⁻¹ Aᵀ)⁻¹ ∂²c(u, w)`` for tangent ``u, w`` (normal vector ``(N,)``)."""
        x, _A, MinvAT, S = self._schur(x, "second_fundamental_form")
        u = check_vector(u, "u", "LevelSetConstraint.second_fundamental_form", x.shape[0])
        w = u if w is None else check_vector(w, "w", "LevelSetConstraint", x.shape[0])
        d2c = _second_derivative(self._c, x, u, w)
        return -MinvAT @ spd_solve(S, d2c, "A M⁻¹ Aᵀ", "LevelSetConstraint")

    def multipliers(self, x, v, force=None) -> jax.Array:
        """Lagrange multipliers ``λ`` ``(k,)`` for a state on the constraint (``c = 0``, ``A v = 0``)."""
        x, A, _MinvAT, S = self._schur(x, "multipliers")
        v = check_vector(v, "v", "LevelSetConstraint.multipliers", x.shape[0])
        rhs = _second_derivative(self._c, x, v, v)
        if force is not None:
            F = check_vector(force, "force", "LevelSetConstraint.multipliers", x.shape[0])
            rhs = rhs + A @ self.ambient.solve(F)
        return -spd_solve(S, rhs, "A M⁻¹ Aᵀ (constraints must be independent)", "multipliers")

    def reaction_force(self, x, v, force=None) -> jax.Array:
        """Reaction covector ``Aᵀλ``, shape ``(N,)``."""
        return self.constraint_jacobian(x).T @ self.multipliers(x, v, force)

    def acceleration(self, x, v, force=None) -> jax.Array:
        """``ẍ = M⁻¹(F + Aᵀλ)``, shape ``(N,)``."""
        R = self.reaction_force(x, v, force)
        F = R if force is None else R + as_float(force)
        return self.ambient.solve(F)

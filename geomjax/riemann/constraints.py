"""Ideal holonomic constraints: a submanifold of a flat ambient space given by a parametrization
(:class:`Embedding`) or as a level set ``c(x) = 0`` (:class:`LevelSetConstraint`).

Modugno–Vitolo, *The geometry of Newton's law and rigid systems*, §2.2.  The ambient space carries a constant metric ``M`` — Euclidean,
or the mass matrix of a system of particles (the kinetic-energy metric; Modugno–Vitolo §3 uses the
weighted metric ``m_0 G_mul = diag(m_i)``).  *All* projections are orthogonal in ``M``, not in the
Euclidean metric.  For a parametrization ``x = φ(q)`` with ``J = ∂φ/∂q``:

* intrinsic metric ``g_con = Jᵀ M J``;
* tangent projection of a vector ``π^∥(X) = J g_con⁻¹ Jᵀ M X``, normal ``π^⊥ = 1 − π^∥``;
* on covectors: intrinsic force ``F_con = i*F = Jᵀ F``; the lift of an intrinsic covector is
  ``j(ω) = M J g_con⁻¹ ω`` — with the inverse of the *induced* metric, not the tangent block of the
  ambient inverse (misprint in Modugno–Vitolo §2.2.1, see the documentation's Conventions page); normal part
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
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from ..lie._math import as_float
from ._ambient import AmbientMetric
from ._checks import Checker
from .metric import christoffel_checked

__all__ = ["Embedding", "LevelSetConstraint"]


def _second_derivative(f, x, u, w):
    """``∂²f(x)[u, w]`` by nested forward mode (no Hessian tensor)."""
    return jax.jvp(lambda y: jax.jvp(f, (y,), (u,))[1], (x,), (w,))[1]


def _check_callable(f, name: str, where: str):
    if not callable(f):
        raise ValueError(f"{where}: argument '{name}' must be callable, got {type(f).__name__}")


class _Frame(NamedTuple):
    q: jax.Array  # (l,)
    J: jax.Array  # ∂φ/∂q, (N, l)
    MJ: jax.Array  # M J
    g: jax.Array  # induced metric Jᵀ M J, (l, l)


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

    # --- internals (inputs already validated) --------------------------------------------------
    def _x(self, q, where):
        x = as_float(self.phi(q))
        if x.ndim != 1:
            raise ValueError(
                f"{where}: argument 'phi' must map q of shape {tuple(q.shape)} to a vector x of "
                f"shape (N,), got shape {tuple(x.shape)}"
            )
        self.ambient.check_dim(x.shape[0], where)
        return x

    def _frame(self, q, where) -> _Frame:
        def both(y):
            x = self._x(y, where)
            return x, x

        J, _ = jax.jacfwd(both, has_aux=True)(q)
        MJ = self.ambient.apply(J)
        return _Frame(q, J, MJ, J.T @ MJ)

    def _start(self, where, q, **vectors):
        """Checker, validated q, frame and the other validated vectors (ambient ones: shape N)."""
        chk = Checker(f"Embedding.{where}")
        q = chk.vector(q, "q")
        fr = self._frame(q, chk.where)
        N, l = fr.J.shape
        dims = {"qdot": l, "u": l, "w": l}
        out = [
            None if x is None else chk.vector(x, name, dims.get(name, N))
            for name, x in vectors.items()
        ]
        return chk, fr, out

    def _velocity(self, q, qdot):
        return jax.jvp(self.phi, (q,), (qdot,))[1]

    def _dynamics(self, chk, fr, qdot, F):
        """``∂²φ(q̇, q̇)`` and ``q̈ = g⁻¹(Jᵀ F − Jᵀ M ∂²φ(q̇, q̇))``."""
        curv = _second_derivative(self.phi, fr.q, qdot, qdot)
        rhs = -fr.MJ.T @ curv if F is None else fr.J.T @ F - fr.MJ.T @ curv
        return curv, chk.solve(fr.g, rhs, "induced metric")

    # --- geometry ----------------------------------------------------------------------------
    def position(self, q) -> jax.Array:
        """``x = φ(q)``, shape ``(N,)``."""
        chk = Checker("Embedding.position")
        q = chk.vector(q, "q")
        return chk.done(self._x(q, chk.where))

    def tangent_basis(self, q) -> jax.Array:
        """``J = ∂φ/∂q``, shape ``(N, l)`` (columns ``∂_a`` span the tangent space)."""
        chk, fr, _ = self._start("tangent_basis", q)
        return chk.done(fr.J)

    def induced_metric(self, q) -> jax.Array:
        """Intrinsic metric ``g_con = Jᵀ M J``, shape ``(l, l)``."""
        chk, fr, _ = self._start("induced_metric", q)
        return chk.done(fr.g)

    def _induced_metric(self, q):
        J = jax.jacfwd(self.phi)(q)
        return J.T @ self.ambient.apply(J)

    def christoffel(self, q) -> jax.Array:
        """Christoffel symbols ``Γ^a_{bc}`` of the induced metric, ``(l, l, l)`` indexed ``[a, b, c]``."""
        chk = Checker("Embedding.christoffel")
        q = chk.vector(q, "q")
        return chk.done(christoffel_checked(self._induced_metric, q, chk))

    def velocity(self, q, qdot) -> jax.Array:
        """Ambient velocity ``ẋ = J q̇``, shape ``(N,)``."""
        chk = Checker("Embedding.velocity")
        q = chk.vector(q, "q")
        qdot = chk.vector(qdot, "qdot", q.shape[0])
        return chk.done(self._velocity(q, qdot))

    def kinetic_energy(self, q, qdot) -> jax.Array:
        """``½ ẋᵀ M ẋ`` (the intrinsic kinetic energy ``½ g_con(q̇, q̇)``)."""
        chk = Checker("Embedding.kinetic_energy")
        q = chk.vector(q, "q")
        qdot = chk.vector(qdot, "qdot", q.shape[0])
        xd = self._velocity(q, qdot)
        return chk.done(0.5 * xd @ self.ambient.apply(xd))

    def lagrangian(self, potential: Callable | None = None) -> Callable:
        """``L(q, q̇) = ½ g_con(q̇, q̇) − V(φ(q))`` with ``potential(x) -> ()`` (or none).

        The returned function does not validate its inputs (it is meant to be differentiated, e.g.
        by :func:`geomjax.riemann.euler_lagrange_acceleration`, which does).
        """

        def L(q, qdot):
            xd = self._velocity(q, qdot)
            K = 0.5 * xd @ self.ambient.apply(xd)
            return K if potential is None else K - potential(self.phi(q))

        return L

    # --- projections (orthogonal in the ambient metric M) -------------------------------------
    def _tangent(self, chk, fr, X):
        return fr.J @ chk.solve(fr.g, fr.MJ.T @ X, "induced metric")

    def tangent_projection(self, q, X) -> jax.Array:
        """``π^∥(X) = J g_con⁻¹ Jᵀ M X`` for an ambient vector ``X`` ``(N,)``."""
        chk, fr, (X,) = self._start("tangent_projection", q, X=X)
        return chk.done(self._tangent(chk, fr, X))

    def normal_projection(self, q, X) -> jax.Array:
        """``π^⊥(X) = X − π^∥(X)``: the M-orthogonal normal component of a vector."""
        chk, fr, (X,) = self._start("normal_projection", q, X=X)
        return chk.done(X - self._tangent(chk, fr, X))

    def intrinsic_force(self, q, F) -> jax.Array:
        """``F_con = i*F = Jᵀ F``, shape ``(l,)`` (generalized force)."""
        chk, fr, (F,) = self._start("intrinsic_force", q, F=F)
        return chk.done(fr.J.T @ F)

    def normal_force(self, q, F) -> jax.Array:
        """``π_⊥(F) = F − M J g_con⁻¹ Jᵀ F``: the part of a covector that annihilates ``T P_con``
        (the lift ``j(Jᵀ F) = M J g_con⁻¹ Jᵀ F`` uses the inverse of the induced metric)."""
        chk, fr, (F,) = self._start("normal_force", q, F=F)
        return chk.done(F - fr.MJ @ chk.solve(fr.g, fr.J.T @ F, "induced metric"))

    def second_fundamental_form(self, q, u, w=None) -> jax.Array:
        """``N(u, w) = π^⊥(∂²φ(q)[u, w])``, a normal vector of shape ``(N,)``; ``w = u`` if omitted."""
        chk, fr, (u, w) = self._start("second_fundamental_form", q, u=u, w=w)
        w = u if w is None else w
        d2 = _second_derivative(self.phi, fr.q, u, w)
        return chk.done(d2 - self._tangent(chk, fr, d2))

    # --- dynamics ----------------------------------------------------------------------------
    def acceleration(self, q, qdot, force=None) -> jax.Array:
        """Intrinsic equation of motion (Thm 2.1, first line, with ``R_con = 0``).

        ``q̈ = g_con⁻¹ (Jᵀ F − Jᵀ M ∂²φ(q̇, q̇)) = −Γ_con(q̇, q̇) + g_con⁻¹ F_con``, shape ``(l,)``.
        """
        chk, fr, (qdot, F) = self._start("acceleration", q, qdot=qdot, force=force)
        return chk.done(self._dynamics(chk, fr, qdot, F)[1])

    def ambient_acceleration(self, q, qdot, force=None) -> jax.Array:
        """Extrinsic acceleration ``ẍ = J q̈ + ∂²φ(q̇, q̇)``, shape ``(N,)``."""
        chk, fr, (qdot, F) = self._start("ambient_acceleration", q, qdot=qdot, force=force)
        curv, qddot = self._dynamics(chk, fr, qdot, F)
        return chk.done(fr.J @ qddot + curv)

    def reaction_force(self, q, qdot, force=None) -> jax.Array:
        """Reaction of the ideal constraint (Modugno–Vitolo, Thm 2.1, eq. 2.2), a covector ``(N,)``.

        ``R = M N(q̇, q̇) − π_⊥(F)``; equals ``M ẍ − F`` on the constrained motion and satisfies
        ``Jᵀ R = 0`` (zero power on every tangent velocity).
        """
        chk, fr, (qdot, F) = self._start("reaction_force", q, qdot=qdot, force=force)
        curv = _second_derivative(self.phi, fr.q, qdot, qdot)
        # M π^⊥(curv) − π_⊥(F) = r − M J g⁻¹ Jᵀ r  with  r = M curv − F
        r = self.ambient.apply(curv) if F is None else self.ambient.apply(curv) - F
        return chk.done(r - fr.MJ @ chk.solve(fr.g, fr.J.T @ r, "induced metric"))


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

    def _start(self, where, x, **vectors):
        chk = Checker(f"LevelSetConstraint.{where}")
        x = chk.vector(x, "x")
        N = x.shape[0]
        self.ambient.check_dim(N, chk.where)
        out = [None if v is None else chk.vector(v, name, N) for name, v in vectors.items()]
        return chk, x, out

    def _schur(self, x):
        A = jax.jacfwd(self._c)(x)
        MinvAT = self.ambient.solve(A.T)  # (N, k)
        return A, MinvAT, A @ MinvAT

    def value(self, x) -> jax.Array:
        """``c(x)``, shape ``(k,)`` (zero on the constraint)."""
        chk, x, _ = self._start("value", x)
        return chk.done(self._c(x))

    def constraint_jacobian(self, x) -> jax.Array:
        """``A = ∂c/∂x``, shape ``(k, N)``."""
        chk, x, _ = self._start("constraint_jacobian", x)
        return chk.done(jax.jacfwd(self._c)(x))

    def _tangent(self, chk, x, X):
        A, MinvAT, S = self._schur(x)
        return X - MinvAT @ chk.solve(S, A @ X, "A M⁻¹ Aᵀ")

    def tangent_projection(self, x, X) -> jax.Array:
        """``X − M⁻¹Aᵀ(A M⁻¹ Aᵀ)⁻¹ A X`` (M-orthogonal projection onto ``ker A``)."""
        chk, x, (X,) = self._start("tangent_projection", x, X=X)
        return chk.done(self._tangent(chk, x, X))

    def normal_projection(self, x, X) -> jax.Array:
        chk, x, (X,) = self._start("normal_projection", x, X=X)
        return chk.done(X - self._tangent(chk, x, X))

    def second_fundamental_form(self, x, u, w=None) -> jax.Array:
        """``N(u, w) = −M⁻¹Aᵀ(A M⁻¹ Aᵀ)⁻¹ ∂²c(u, w)`` for tangent ``u, w`` (normal vector ``(N,)``)."""
        chk, x, (u, w) = self._start("second_fundamental_form", x, u=u, w=w)
        w = u if w is None else w
        _, MinvAT, S = self._schur(x)
        d2c = _second_derivative(self._c, x, u, w)
        return chk.done(-MinvAT @ chk.solve(S, d2c, "A M⁻¹ Aᵀ"))

    def _multipliers(self, chk, x, v, F):
        A, _, S = self._schur(x)
        rhs = _second_derivative(self._c, x, v, v)
        if F is not None:
            rhs = rhs + A @ self.ambient.solve(F)
        return A, -chk.solve(S, rhs, "A M⁻¹ Aᵀ (constraints must be independent)")

    def multipliers(self, x, v, force=None) -> jax.Array:
        """Lagrange multipliers ``λ`` ``(k,)`` for a state on the constraint (``c = 0``, ``A v = 0``)."""
        chk, x, (v, F) = self._start("multipliers", x, v=v, force=force)
        return chk.done(self._multipliers(chk, x, v, F)[1])

    def reaction_force(self, x, v, force=None) -> jax.Array:
        """Reaction covector ``Aᵀλ``, shape ``(N,)``."""
        chk, x, (v, F) = self._start("reaction_force", x, v=v, force=force)
        A, lam = self._multipliers(chk, x, v, F)
        return chk.done(A.T @ lam)

    def acceleration(self, x, v, force=None) -> jax.Array:
        """``ẍ = M⁻¹(F + Aᵀλ)``, shape ``(N,)``."""
        chk, x, (v, F) = self._start("acceleration", x, v=v, force=force)
        A, lam = self._multipliers(chk, x, v, F)
        R = A.T @ lam
        return chk.done(self.ambient.solve(R if F is None else R + F))

"""Time-dependent holonomic constraints and moving frames.

**Moving constraints** (seed 002, Mangiarotti).  Event space ``M = R × R^N`` with absolute time,
the inertial (flat) connection ∇ and the constant spatial metric ``M`` (mass included, as in the
paper).  A constraint ``x = φ(t, q)`` is an "absolute time submanifold" N; in the adapted chart
``(t, q)`` (``q̇^0 = 1``, Greek indices include time ``0``):

* canonical connection D (Thm 1, eqs. 9–11): ``D_X Y = Π ∇_X Y``, with first-kind coefficients
  ``(i, αβ) = ⟨∂_i φ, M ∂_α∂_β φ⟩`` and ``(k αβ) = h^{ki}(i, αβ)``, ``h = Jᵀ M J``.  Eq. (1):
  the spatial ``Γ_{k,ij}`` are the Christoffel symbols of ``h(t, ·)`` and
  ``∂_0 h_{ij} = Γ_{i,0j} + Γ_{j,0i}``.  The metric does **not** determine ``Γ^k_{00}`` nor the
  antisymmetric part of ``Γ_{k,0j}``: they carry the acceleration and the rotation of the frame
  (see :class:`MovingFrame`) and are computed here from φ;
* intrinsic motion (eq. 14, d'Alembert): ``q̈^k = −(Γ^k_{00} + 2Γ^k_{0j} q̇^j + Γ^k_{ij} q̇^i q̇^j)
  + (h⁻¹ Jᵀ F)^k``;
* canonical force (eqs. 15–16) ``r = Π^⊥(Γ_{αβ} q̇^α q̇^β)``: the normal part of
  ``∂²φ[(1, q̇), (1, q̇)]``, a quadratic *affine* map of ``q̇`` with values in the normal bundle;
* force of constraint (eq. 21) ``r_f = r − f_Π⊥`` with ``f = M⁻¹F`` the force as a vector, and
  Theorem 2: ``a_c = f + r_f`` along every admissible motion.  The reaction covector is ``M r_f``
  (for a Euclidean metric and unit mass the two coincide).  The extraction of the paper garbles
  (12), (14), (19) and the normal projection (prints as "H"/"II"); see the conventions notes.

A moving constraint's reaction is still *ideal* — it annihilates every virtual displacement
``J δq`` — but it does work on the actual motion (``R·ẋ = R·∂_tφ``).

**Moving frames** (seed 001, Chevallier, objectivity).  ``X = R(t) y + b(t)``: the same law seen
from a rotating, accelerating frame acquires the inertial forces (frame components, body angular
velocity ``ω``: ``Ṙ = R ω̂``)::

    m ÿ = Rᵀ F − m Rᵀ b̈ − m ω̇ × y − 2 m ω × ẏ − m ω × (ω × y)
          (force)  (translation) (Euler)   (Coriolis)   (centrifugal)

A moving frame is the full-dimensional case of a moving constraint (``φ = ψ``, ``n = N``), and
:meth:`MovingFrame.as_embedding` returns it; its connection coefficients reproduce the inertial
forces term by term (``m Γ_{00}``: translation, Euler and centrifugal; ``2 m Γ_{0j}ẏ^j``: Coriolis,
antisymmetric in ``(k, j)``).  A general curvilinear moving chart ``X = ψ(t, y)`` is handled by
:class:`MovingEmbedding` directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from ..lie._math import as_float, cross
from ..lie.so3 import _vee3
from ._ambient import AmbientMetric
from ._checks import check_positive, check_vector, spd_solve

__all__ = ["InertialForces", "MovingEmbedding", "MovingFrame"]


def _check_callable(f, name: str, where: str):
    if not callable(f):
        raise ValueError(f"{where}: argument '{name}' must be callable, got {type(f).__name__}")


class MovingEmbedding(eqx.Module):
    """Time-dependent holonomic constraint ``x = φ(t, q)`` (seed 002).

    Args:
        phi: ``phi(t, q) -> x``, ``(), (n,) -> (N,)``, an immersion in q for every t.
        ambient_metric: as for :class:`geomjax.riemann.Embedding` (the inertial metric, mass
            included).

    Methods take ``(t, q, qdot)`` at one instant; batch with ``jax.vmap``.
    """

    phi: Callable = eqx.field(static=True)
    ambient: AmbientMetric

    def __init__(self, phi: Callable, ambient_metric=None):
        _check_callable(phi, "phi", "MovingEmbedding")
        self.phi = phi
        self.ambient = AmbientMetric(ambient_metric, "MovingEmbedding")

    # --- helpers -----------------------------------------------------------------------------
    def _tq(self, t, q, where):
        t = as_float(t)
        if t.ndim != 0:
            raise ValueError(
                f"MovingEmbedding.{where}: argument 't' must be a scalar, got shape {t.shape}"
            )
        q = check_vector(q, "q", f"MovingEmbedding.{where}")
        return t.astype(q.dtype), q

    def _Phi(self, s):
        """φ as a function of the event coordinates ``s = (t, q)``."""
        x = as_float(self.phi(s[0], s[1:]))
        if x.ndim != 1:
            raise ValueError(
                "MovingEmbedding: argument 'phi' must return a vector x of shape (N,), got "
                f"shape {tuple(x.shape)}"
            )
        self.ambient.check_dim(x.shape[0], "MovingEmbedding")
        return x

    def _frame(self, t, q, where):
        t, q = self._tq(t, q, where)
        s = jnp.concatenate([t[None], q])

        def both(y):
            x = self._Phi(y)
            return x, x

        Js, _ = jax.jacfwd(both, has_aux=True)(s)  # (N, 1 + n): [∂_t φ, J]
        J = Js[:, 1:]
        MJ = self.ambient.apply(J)
        return s, Js, J, MJ, J.T @ MJ

    def _event_acceleration(self, s, qdot):
        """``∂²φ[(1, q̇), (1, q̇)] = Γ-part of ẍ`` (ambient, ``(N,)``) by nested JVPs."""
        e = jnp.concatenate([jnp.ones((1,), s.dtype), qdot])
        return jax.jvp(lambda y: jax.jvp(self._Phi, (y,), (e,))[1], (s,), (e,))[1]

    # --- kinematics --------------------------------------------------------------------------
    def position(self, t, q) -> jax.Array:
        t, q = self._tq(t, q, "position")
        return self.phi(t, q)

    def velocity(self, t, q, qdot) -> jax.Array:
        """``ẋ = ∂_t φ + J q̇``, shape ``(N,)``."""
        _s, Js, J, _, _ = self._frame(t, q, "velocity")
        qdot = check_vector(qdot, "qdot", "MovingEmbedding.velocity", J.shape[1])
        return Js[:, 0] + J @ qdot

    def tangent_basis(self, t, q) -> jax.Array:
        """``J = ∂φ/∂q``, shape ``(N, n)``."""
        return self._frame(t, q, "tangent_basis")[2]

    def induced_metric(self, t, q) -> jax.Array:
        """``h(t, q) = Jᵀ M J``, shape ``(n, n)`` (eq. 7)."""
        return self._frame(t, q, "induced_metric")[4]

    def kinetic_energy(self, t, q, qdot) -> jax.Array:
        xd = self.velocity(t, q, qdot)
        return 0.5 * xd @ self.ambient.apply(xd)

    def lagrangian(self, potential: Callable | None = None) -> Callable:
        """``L(t, q, q̇) = ½ |ẋ|²_M − V(φ(t, q))`` (for :func:`euler_lagrange_acceleration` with
        ``t=``)."""

        def L(t, q, qdot):
            K = self.kinetic_energy(t, q, qdot)
            return K if potential is None else K - potential(self.phi(t, q))

        return L

    def tangent_projection(self, t, q, X) -> jax.Array:
        """``Π(X) = J h⁻¹ Jᵀ M X`` (eq. 8, as an ambient vector)."""
        _, _, J, MJ, h = self._frame(t, q, "tangent_projection")
        X = check_vector(X, "X", "MovingEmbedding.tangent_projection", J.shape[0])
        return J @ spd_solve(h, MJ.T @ X, "induced metric", "MovingEmbedding")

    def normal_projection(self, t, q, X) -> jax.Array:
        """Normal projection (eqs. 17–18): ``X − Π(X)``."""
        return as_float(X) - self.tangent_projection(t, q, X)

    # --- canonical connection (Thm 1) ----------------------------------------------------------
    def connection_first_kind(self, t, q) -> jax.Array:
        """``(i, αβ) = ⟨∂_i φ, M ∂_α ∂_β φ⟩`` (eq. 11), shape ``(n, 1+n, 1+n)``; index 0 is time."""
        s, _, _J, MJ, _ = self._frame(t, q, "connection_first_kind")
        H = jax.jacfwd(jax.jacfwd(self._Phi))(s)  # (N, 1+n, 1+n)
        return jnp.einsum("Ni,Nab->iab", MJ, H)

    def connection(self, t, q) -> jax.Array:
        """Coefficients ``(k αβ)`` of the canonical connection D (eq. 10), ``(n, 1+n, 1+n)``.

        ``[k, 0, 0] = Γ^k_{00}``, ``[k, 0, j+1] = Γ^k_{0j}``, ``[k, i+1, j+1] = Γ^k_{ij}``.
        """
        G1 = self.connection_first_kind(t, q)
        h = self.induced_metric(t, q)
        n = h.shape[0]
        out = spd_solve(h, G1.reshape(n, -1), "induced metric", "MovingEmbedding.connection")
        return out.reshape(G1.shape)

    # --- dynamics ----------------------------------------------------------------------------
    def _dynamics(self, t, q, qdot, force, where):
        s, _, J, MJ, h = self._frame(t, q, where)
        N, n = J.shape
        qdot = check_vector(qdot, "qdot", f"MovingEmbedding.{where}", n)
        F = (
            jnp.zeros(N, J.dtype)
            if force is None
            else check_vector(force, "force", f"MovingEmbedding.{where}", N)
        )
        curv = self._event_acceleration(s, qdot)
        qddot = spd_solve(h, J.T @ F - MJ.T @ curv, "induced metric", f"MovingEmbedding.{where}")
        return J, MJ, h, F, curv, qddot

    def acceleration(self, t, q, qdot, force=None) -> jax.Array:
        """Intrinsic motion (eq. 14): ``q̈ = −Γ^k_{αβ} q̇^α q̇^β + h⁻¹ Jᵀ F``, shape ``(n,)``.

        Contraction by nested JVPs; the full coefficient array is not formed.
        """
        return self._dynamics(t, q, qdot, force, "acceleration")[-1]

    def ambient_acceleration(self, t, q, qdot, force=None) -> jax.Array:
        """``a_c = ẍ = J q̈ + ∂²φ[(1, q̇), (1, q̇)]``, shape ``(N,)``."""
        J, _, _, _, curv, qddot = self._dynamics(t, q, qdot, force, "ambient_acceleration")
        return J @ qddot + curv

    def canonical_force(self, t, q, qdot) -> jax.Array:
        """Canonical force of the constraint ``r`` (eqs. 15–16), a normal vector ``(N,)``."""
        s, _, J, MJ, h = self._frame(t, q, "canonical_force")
        qdot = check_vector(qdot, "qdot", "MovingEmbedding.canonical_force", J.shape[1])
        curv = self._event_acceleration(s, qdot)
        return curv - J @ spd_solve(h, MJ.T @ curv, "induced metric", "canonical_force")

    def force_of_constraint(self, t, q, qdot, force=None) -> jax.Array:
        """``r_f = r − f_Π⊥`` (eq. 21) with ``f = M⁻¹F``: a normal vector (an acceleration) ``(N,)``.

        Theorem 2: ``a_c = f + r_f`` on every admissible motion.
        """
        r = self.canonical_force(t, q, qdot)
        if force is None:
            return r
        f = self.ambient.solve(as_float(force))
        return r - self.normal_projection(t, q, f)

    def reaction_force(self, t, q, qdot, force=None) -> jax.Array:
        """Reaction covector ``M r_f = M a_c − F`` ``(N,)``; annihilates ``J`` (ideal) but not
        ``∂_t φ`` (a moving constraint does work)."""
        J, MJ, h, F, curv, _ = self._dynamics(t, q, qdot, force, "reaction_force")
        r = self.ambient.apply(curv) - F
        return r - MJ @ spd_solve(h, J.T @ r, "induced metric", "MovingEmbedding.reaction_force")


class InertialForces(NamedTuple):
    """The fictitious forces in a moving frame (frame components, each ``(3,)``)."""

    translation: jax.Array  # −m Rᵀ b̈
    euler: jax.Array  # −m ω̇ × y
    coriolis: jax.Array  # −2m ω × ẏ
    centrifugal: jax.Array  # −m ω × (ω × y)

    @property
    def total(self) -> jax.Array:
        return self.translation + self.euler + self.coriolis + self.centrifugal


class MovingFrame(eqx.Module):
    """A rigidly moving frame ``X = R(t) y + b(t)`` of Euclidean 3-space.

    Args:
        rotation: ``rotation(t) -> (3, 3)`` rotation matrix (frame axes in inertial components).
        translation: ``translation(t) -> (3,)`` origin of the frame, or ``None`` (fixed origin).

    Angular velocity and acceleration are taken by autodiff of ``rotation``: body (frame)
    components, ``R(t)ᵀṘ(t) = hat(ω(t))``.  Forces passed to :meth:`acceleration` are in frame
    components (``Rᵀ F_inertial``).
    """

    rotation: Callable = eqx.field(static=True)
    translation: Callable | None = eqx.field(static=True)

    def __init__(self, rotation: Callable, translation: Callable | None = None):
        _check_callable(rotation, "rotation", "MovingFrame")
        if translation is not None:
            _check_callable(translation, "translation", "MovingFrame")
        self.rotation = rotation
        self.translation = translation

    def _R(self, t):
        R = as_float(self.rotation(t))
        if R.shape != (3, 3):
            raise ValueError(
                f"MovingFrame: argument 'rotation' must return a (3, 3) matrix, got {R.shape}"
            )
        return R

    def _b(self, t):
        if self.translation is None:
            return jnp.zeros(3, as_float(t).dtype)
        b = as_float(self.translation(t))
        if b.shape != (3,):
            raise ValueError(
                f"MovingFrame: argument 'translation' must return a (3,) vector, got {b.shape}"
            )
        return b

    @staticmethod
    def _t(t):
        t = as_float(t)
        if t.ndim != 0:
            raise ValueError(f"MovingFrame: argument 't' must be a scalar, got shape {t.shape}")
        return t

    def angular_velocity(self, t) -> jax.Array:
        """Body angular velocity ``ω = vee(Rᵀ Ṙ)``, shape ``(3,)``."""
        t = self._t(t)
        R, Rd = jax.jvp(self._R, (t,), (jnp.ones_like(t),))
        return _vee3(R.T @ Rd)

    def angular_acceleration(self, t) -> jax.Array:
        """``ω̇`` (body components), shape ``(3,)``."""
        t = self._t(t)
        return jax.jvp(self.angular_velocity, (t,), (jnp.ones_like(t),))[1]

    def origin_acceleration(self, t) -> jax.Array:
        """``Rᵀ b̈``: acceleration of the frame origin in frame components, shape ``(3,)``."""
        t = self._t(t)
        one = jnp.ones_like(t)
        bdd = jax.jvp(lambda s: jax.jvp(self._b, (s,), (one,))[1], (t,), (one,))[1]
        return self._R(t).T @ bdd

    def to_inertial(self, t, y, ydot) -> tuple[jax.Array, jax.Array]:
        """``(X, Ẋ)`` from frame coordinates: ``X = R y + b``, ``Ẋ = R(ẏ + ω × y) + ḃ``."""
        t = self._t(t)
        y = check_vector(y, "y", "MovingFrame.to_inertial", 3)
        ydot = check_vector(ydot, "ydot", "MovingFrame.to_inertial", 3)
        X, Xd = jax.jvp(lambda s, p: self._R(s) @ p + self._b(s), (t, y), (jnp.ones_like(t), ydot))
        return X, Xd

    def from_inertial(self, t, X, Xdot) -> tuple[jax.Array, jax.Array]:
        """``(y, ẏ)`` from inertial coordinates (inverse of :meth:`to_inertial`)."""
        t = self._t(t)
        X = check_vector(X, "X", "MovingFrame.from_inertial", 3)
        Xdot = check_vector(Xdot, "Xdot", "MovingFrame.from_inertial", 3)
        R = self._R(t)
        _, bd = jax.jvp(self._b, (t,), (jnp.ones_like(t),))
        y = R.T @ (X - self._b(t))
        return y, R.T @ (Xdot - bd) - cross(self.angular_velocity(t), y)

    def inertial_forces(self, t, y, ydot, mass=1.0) -> InertialForces:
        """Translation, Euler, Coriolis and centrifugal forces on a particle of mass ``mass``."""
        t = self._t(t)
        y = check_vector(y, "y", "MovingFrame.inertial_forces", 3)
        ydot = check_vector(ydot, "ydot", "MovingFrame.inertial_forces", 3)
        m = check_positive(as_float(mass), "mass", "MovingFrame.inertial_forces")
        w = self.angular_velocity(t)
        return InertialForces(
            translation=-m * self.origin_acceleration(t),
            euler=-m * cross(self.angular_acceleration(t), y),
            coriolis=-2.0 * m * cross(w, ydot),
            centrifugal=-m * cross(w, cross(w, y)),
        )

    def acceleration(self, t, y, ydot, force=None, mass=1.0) -> jax.Array:
        """``ÿ = (F + inertial forces)/m`` with ``force`` in frame components (``(3,)``)."""
        fict = self.inertial_forces(t, y, ydot, mass).total
        F = fict if force is None else fict + check_vector(force, "force", "MovingFrame", 3)
        return F / as_float(mass)

    def as_embedding(self, ambient_metric=None) -> MovingEmbedding:
        """The frame as a full-dimensional moving chart ``ψ(t, y) = R(t) y + b(t)``."""
        return MovingEmbedding(lambda t, y: self._R(t) @ y + self._b(t), ambient_metric)

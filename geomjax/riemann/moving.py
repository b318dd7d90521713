"""Time-dependent holonomic constraints and moving frames.

**Moving constraints** (Mangiarotti, *Mechanical systems and holonomic constraints*).  Event space ``M = R × R^N`` with absolute time,
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

**Moving frames** (Chevallier, *On the foundations of ordinary and generalized rigid body dynamics and the principle of objectivity*, objectivity).  ``X = R(t) y + b(t)``: the same law seen
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
from ..lie.so3 import vee3
from ._ambient import AmbientMetric
from ._checks import Checker

__all__ = ["InertialForces", "MovingEmbedding", "MovingFrame"]


def _check_callable(f, name: str, where: str):
    if not callable(f):
        raise ValueError(f"{where}: argument '{name}' must be callable, got {type(f).__name__}")


class _EventFrame(NamedTuple):
    s: jax.Array  # event coordinates (t, q), (1 + n,)
    dphi_dt: jax.Array  # ∂_t φ, (N,)
    J: jax.Array  # ∂φ/∂q, (N, n)
    MJ: jax.Array
    h: jax.Array  # induced metric, (n, n)


class MovingEmbedding(eqx.Module):
    """Time-dependent holonomic constraint ``x = φ(t, q)`` (Mangiarotti).

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

    # --- internals (inputs already validated) --------------------------------------------------
    def _Phi(self, s, where="MovingEmbedding"):
        """φ as a function of the event coordinates ``s = (t, q)``."""
        x = as_float(self.phi(s[0], s[1:]))
        if x.ndim != 1:
            raise ValueError(
                f"{where}: argument 'phi' must return a vector x of shape (N,), got shape "
                f"{tuple(x.shape)}"
            )
        self.ambient.check_dim(x.shape[0], where)
        return x

    def _start(self, where, t, q, **vectors) -> tuple[Checker, _EventFrame, list]:
        chk = Checker(f"MovingEmbedding.{where}")
        t = chk.scalar(t, "t")
        q = chk.vector(q, "q")
        s = jnp.concatenate([t.astype(q.dtype)[None], q])

        def both(y):
            x = self._Phi(y, chk.where)
            return x, x

        Js, _ = jax.jacfwd(both, has_aux=True)(s)  # (N, 1 + n): [∂_t φ, J]
        J = Js[:, 1:]
        MJ = self.ambient.apply(J)
        fr = _EventFrame(s, Js[:, 0], J, MJ, J.T @ MJ)
        N, n = J.shape
        out = [
            None if x is None else chk.vector(x, name, n if name == "qdot" else N)
            for name, x in vectors.items()
        ]
        return chk, fr, out

    def _event_acceleration(self, s, qdot):
        """``∂²φ[(1, q̇), (1, q̇)]`` (ambient, ``(N,)``) by nested JVPs."""
        e = jnp.concatenate([jnp.ones((1,), s.dtype), qdot])
        return jax.jvp(lambda y: jax.jvp(self._Phi, (y,), (e,))[1], (s,), (e,))[1]

    def _tangent(self, chk, fr, X):
        return fr.J @ chk.solve(fr.h, fr.MJ.T @ X, "induced metric")

    def _velocity(self, t, q, qdot):
        return jax.jvp(self.phi, (t, q), (jnp.ones_like(t), qdot))[1]

    # --- kinematics --------------------------------------------------------------------------
    def position(self, t, q) -> jax.Array:
        chk = Checker("MovingEmbedding.position")
        t, q = chk.scalar(t, "t"), chk.vector(q, "q")
        return chk.done(self._Phi(jnp.concatenate([t.astype(q.dtype)[None], q]), chk.where))

    def velocity(self, t, q, qdot) -> jax.Array:
        """``ẋ = ∂_t φ + J q̇``, shape ``(N,)``."""
        chk, fr, (qdot,) = self._start("velocity", t, q, qdot=qdot)
        return chk.done(fr.dphi_dt + fr.J @ qdot)

    def tangent_basis(self, t, q) -> jax.Array:
        """``J = ∂φ/∂q``, shape ``(N, n)``."""
        chk, fr, _ = self._start("tangent_basis", t, q)
        return chk.done(fr.J)

    def induced_metric(self, t, q) -> jax.Array:
        """``h(t, q) = Jᵀ M J``, shape ``(n, n)`` (eq. 7)."""
        chk, fr, _ = self._start("induced_metric", t, q)
        return chk.done(fr.h)

    def kinetic_energy(self, t, q, qdot) -> jax.Array:
        chk, fr, (qdot,) = self._start("kinetic_energy", t, q, qdot=qdot)
        xd = fr.dphi_dt + fr.J @ qdot
        return chk.done(0.5 * xd @ self.ambient.apply(xd))

    def lagrangian(self, potential: Callable | None = None) -> Callable:
        """``L(t, q, q̇) = ½ |ẋ|²_M − V(φ(t, q))`` (for :func:`euler_lagrange_acceleration` with
        ``t=``).  The returned function does not validate its inputs."""

        def L(t, q, qdot):
            xd = self._velocity(t, q, qdot)
            K = 0.5 * xd @ self.ambient.apply(xd)
            return K if potential is None else K - potential(self.phi(t, q))

        return L

    def tangent_projection(self, t, q, X) -> jax.Array:
        """``Π(X) = J h⁻¹ Jᵀ M X`` (eq. 8, as an ambient vector)."""
        chk, fr, (X,) = self._start("tangent_projection", t, q, X=X)
        return chk.done(self._tangent(chk, fr, X))

    def normal_projection(self, t, q, X) -> jax.Array:
        """Normal projection (eqs. 17–18): ``X − Π(X)``."""
        chk, fr, (X,) = self._start("normal_projection", t, q, X=X)
        return chk.done(X - self._tangent(chk, fr, X))

    # --- canonical connection (Thm 1) ----------------------------------------------------------
    def _first_kind(self, fr, where):
        H = jax.jacfwd(jax.jacfwd(lambda y: self._Phi(y, where)))(fr.s)  # (N, 1+n, 1+n)
        return jnp.einsum("Ni,Nab->iab", fr.MJ, H)

    def connection_first_kind(self, t, q) -> jax.Array:
        """``(i, αβ) = ⟨∂_i φ, M ∂_α ∂_β φ⟩`` (eq. 11), shape ``(n, 1+n, 1+n)``; index 0 is time."""
        chk, fr, _ = self._start("connection_first_kind", t, q)
        return chk.done(self._first_kind(fr, chk.where))

    def connection(self, t, q) -> jax.Array:
        """Coefficients ``(k αβ)`` of the canonical connection D (eq. 10), ``(n, 1+n, 1+n)``.

        ``[k, 0, 0] = Γ^k_{00}``, ``[k, 0, j+1] = Γ^k_{0j}``, ``[k, i+1, j+1] = Γ^k_{ij}``.
        """
        chk, fr, _ = self._start("connection", t, q)
        G1 = self._first_kind(fr, chk.where)
        return chk.done(jnp.einsum("kl,lab->kab", chk.inverse(fr.h, "induced metric"), G1))

    # --- dynamics ----------------------------------------------------------------------------
    def acceleration(self, t, q, qdot, force=None) -> jax.Array:
        """Intrinsic motion (eq. 14): ``q̈ = −Γ^k_{αβ} q̇^α q̇^β + h⁻¹ Jᵀ F``, shape ``(n,)``.

        Contraction by nested JVPs; the full coefficient array is not formed.
        """
        chk, fr, (qdot, F) = self._start("acceleration", t, q, qdot=qdot, force=force)
        curv = self._event_acceleration(fr.s, qdot)
        rhs = -fr.MJ.T @ curv if F is None else fr.J.T @ F - fr.MJ.T @ curv
        return chk.done(chk.solve(fr.h, rhs, "induced metric"))

    def ambient_acceleration(self, t, q, qdot, force=None) -> jax.Array:
        """``a_c = ẍ = J q̈ + ∂²φ[(1, q̇), (1, q̇)]``, shape ``(N,)``."""
        chk, fr, (qdot, F) = self._start("ambient_acceleration", t, q, qdot=qdot, force=force)
        curv = self._event_acceleration(fr.s, qdot)
        rhs = -fr.MJ.T @ curv if F is None else fr.J.T @ F - fr.MJ.T @ curv
        return chk.done(fr.J @ chk.solve(fr.h, rhs, "induced metric") + curv)

    def canonical_force(self, t, q, qdot) -> jax.Array:
        """Canonical force of the constraint ``r`` (eqs. 15–16), a normal vector ``(N,)``."""
        chk, fr, (qdot,) = self._start("canonical_force", t, q, qdot=qdot)
        curv = self._event_acceleration(fr.s, qdot)
        return chk.done(curv - self._tangent(chk, fr, curv))

    def force_of_constraint(self, t, q, qdot, force=None) -> jax.Array:
        """``r_f = r − f_Π⊥`` (eq. 21) with ``f = M⁻¹F``: a normal vector (an acceleration) ``(N,)``.

        Theorem 2: ``a_c = f + r_f`` on every admissible motion.
        """
        chk, fr, (qdot, F) = self._start("force_of_constraint", t, q, qdot=qdot, force=force)
        curv = self._event_acceleration(fr.s, qdot)
        d = curv if F is None else curv - self.ambient.solve(F)  # r − f_⊥ = π^⊥(curv − f)
        return chk.done(d - self._tangent(chk, fr, d))

    def reaction_force(self, t, q, qdot, force=None) -> jax.Array:
        """Reaction covector ``M r_f = M a_c − F`` ``(N,)``; annihilates ``J`` (ideal) but not
        ``∂_t φ`` (a moving constraint does work)."""
        chk, fr, (qdot, F) = self._start("reaction_force", t, q, qdot=qdot, force=force)
        curv = self._event_acceleration(fr.s, qdot)
        r = self.ambient.apply(curv) if F is None else self.ambient.apply(curv) - F
        return chk.done(r - fr.MJ @ chk.solve(fr.h, fr.J.T @ r, "induced metric"))


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

    def _omega(self, t):
        R, Rd = jax.jvp(self._R, (t,), (jnp.ones_like(t),))
        return vee3(R.T @ Rd)

    def _omega_dot(self, t):
        return jax.jvp(self._omega, (t,), (jnp.ones_like(t),))[1]

    def _origin_acceleration(self, t):
        one = jnp.ones_like(t)
        bdd = jax.jvp(lambda s: jax.jvp(self._b, (s,), (one,))[1], (t,), (one,))[1]
        return self._R(t).T @ bdd

    def angular_velocity(self, t) -> jax.Array:
        """Body angular velocity ``ω = vee(Rᵀ Ṙ)``, shape ``(3,)``."""
        chk = Checker("MovingFrame.angular_velocity")
        return chk.done(self._omega(chk.scalar(t, "t")))

    def angular_acceleration(self, t) -> jax.Array:
        """``ω̇`` (body components), shape ``(3,)``."""
        chk = Checker("MovingFrame.angular_acceleration")
        return chk.done(self._omega_dot(chk.scalar(t, "t")))

    def origin_acceleration(self, t) -> jax.Array:
        """``Rᵀ b̈``: acceleration of the frame origin in frame components, shape ``(3,)``."""
        chk = Checker("MovingFrame.origin_acceleration")
        return chk.done(self._origin_acceleration(chk.scalar(t, "t")))

    def to_inertial(self, t, y, ydot) -> tuple[jax.Array, jax.Array]:
        """``(X, Ẋ)`` from frame coordinates: ``X = R y + b``, ``Ẋ = R(ẏ + ω × y) + ḃ``."""
        chk = Checker("MovingFrame.to_inertial")
        t = chk.scalar(t, "t")
        y, ydot = chk.vector(y, "y", 3), chk.vector(ydot, "ydot", 3)
        out = jax.jvp(lambda s, p: self._R(s) @ p + self._b(s), (t, y), (jnp.ones_like(t), ydot))
        return chk.done(out)

    def from_inertial(self, t, X, Xdot) -> tuple[jax.Array, jax.Array]:
        """``(y, ẏ)`` from inertial coordinates (inverse of :meth:`to_inertial`)."""
        chk = Checker("MovingFrame.from_inertial")
        t = chk.scalar(t, "t")
        X, Xdot = chk.vector(X, "X", 3), chk.vector(Xdot, "Xdot", 3)
        R = self._R(t)
        b, bd = jax.jvp(self._b, (t,), (jnp.ones_like(t),))
        y = R.T @ (X - b)
        return chk.done((y, R.T @ (Xdot - bd) - cross(self._omega(t), y)))

    def _inertial_forces(self, t, y, ydot, m):
        w = self._omega(t)
        return InertialForces(
            translation=-m * self._origin_acceleration(t),
            euler=-m * cross(self._omega_dot(t), y),
            coriolis=-2.0 * m * cross(w, ydot),
            centrifugal=-m * cross(w, cross(w, y)),
        )

    def inertial_forces(self, t, y, ydot, mass=1.0) -> InertialForces:
        """Translation, Euler, Coriolis and centrifugal forces on a particle of mass ``mass``."""
        chk = Checker("MovingFrame.inertial_forces")
        t = chk.scalar(t, "t")
        y, ydot = chk.vector(y, "y", 3), chk.vector(ydot, "ydot", 3)
        m = chk.positive(chk.scalar(mass, "mass"), "mass")
        return chk.done(self._inertial_forces(t, y, ydot, m))

    def acceleration(self, t, y, ydot, force=None, mass=1.0) -> jax.Array:
        """``ÿ = (F + inertial forces)/m`` with ``force`` in frame components (``(3,)``)."""
        chk = Checker("MovingFrame.acceleration")
        t = chk.scalar(t, "t")
        y, ydot = chk.vector(y, "y", 3), chk.vector(ydot, "ydot", 3)
        m = chk.positive(chk.scalar(mass, "mass"), "mass")
        F = self._inertial_forces(t, y, ydot, m).total
        if force is not None:
            F = F + chk.vector(force, "force", 3)
        return chk.done(F / m)

    def as_embedding(self, ambient_metric=None) -> MovingEmbedding:
        """The frame as a full-dimensional moving chart ``ψ(t, y) = R(t) y + b(t)``."""
        return MovingEmbedding(lambda t, y: self._R(t) @ y + self._b(t), ambient_metric)

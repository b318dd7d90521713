"""Systems of n particles and rigid systems of particles (Modugno–Vitolo, *The geometry of Newton's law and rigid systems*, §3–4).

These live in :mod:`geomjax.riemann` rather than :mod:`geomjax.systems` on purpose: a rigid
system here is a *constraint* — the submanifold ``P_rig ⊂ P_mul = (R³)ⁿ`` of the
multi-configuration space with its mass metric — and everything below (projections, second
fundamental form, reaction at every particle) is the constrained-particle geometry of
:mod:`geomjax.riemann.constraints` specialised to it.  :meth:`RigidSystem.to_rigid_body` hands the
resulting mass properties to the dynamical rigid-body systems of :mod:`geomjax.systems`.

Conventions.  Positions, velocities and forces of the particles are ``(n, 3)`` arrays (particle
index first); a configuration ``x``, a velocity ``v``, a force ``F`` (covectors, ``F_i`` acting on
particle i).  ``m_0 = Σ m_i`` and weights ``μ_i = m_i/m_0``; the weighted metric
``G_mul(u, w) = Σ μ_i u_i·w_i`` (eq. 3.5), so that the kinetic energy is ``½ m_0 G_mul(v, v)``.
All projections are orthogonal in ``G_mul`` (equivalently in the mass metric ``diag(m_i)``), never
in the Euclidean metric of ``R³ⁿ``.  Every method acts on one configuration; batch with
``jax.vmap``.

Characteristic (§4.1): ``C = dim span{r_i − r_j}`` ∈ {1, 2, 3} is constant along motions, so it is
decided once, statically, from the reference configuration (singular values of the centred
positions, relative tolerance ``tol``).  For ``C ≥ 2`` the rotational space is SO(3) (the action is
free) and the inertia is invertible.  For ``C = 1`` (collinear bodies, every 2-particle body) the
configuration space is ``R³ × S²``, the isotropy is O(2) and the inertia is singular (third
eigenvalue 0): the angular velocity is defined modulo the axis and is returned as the
representative orthogonal to it (Prop. 4.13), and every ``Σ̂⁻¹`` becomes the inverse on the plane
orthogonal to the axis.  Pairwise-distance constraints do not describe rigidity for collinear
bodies with n ≥ 3 or coplanar ones with n ≥ 4 (their Jacobian is rank deficient); the tangent
spaces here come from the group orbit ``v_i = v_0 + Ω × r_i`` instead.

Misprints worked around (see the documentation's Conventions page): eq. (4.30) drops a factor ``m_0``
and misplaces ``Σ̂⁻¹``; the reaction used here is ``R_i = m_i a_i^rigid − F_i`` with the rigid
acceleration from Newton–Euler, equivalently ``m_i N_i − F_⊥,i`` with the second fundamental form
(4.27); in Thm 4.28 the annihilator condition is ``Σ r_i × α_i = 0``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.tracing import is_traced
from .._internal.warn import warn
from ..lie._math import as_float, cross
from ._checks import Checker, check_finite, check_positive

__all__ = ["ForceSplit", "ParticleSystem", "RigidSystem", "VelocitySplit"]


class VelocitySplit(NamedTuple):
    """Three-way split of a multi-velocity (Thm 4.27); the three ``(n, 3)`` parts sum to ``v`` and
    are mutually orthogonal in the mass metric."""

    center: jax.Array  # (v_0, ..., v_0)
    rotational: jax.Array  # Ω × r_i
    orthogonal: jax.Array  # the rest: Σ μ_i w_i = 0 and Σ μ_i r_i × w_i = 0
    center_velocity: jax.Array  # v_0 = Σ μ_i v_i, (3,)
    angular_velocity: jax.Array  # Ω, (3,)


class ForceSplit(NamedTuple):
    """Three-way split of a multi-force (Thm 4.28); the three ``(n, 3)`` parts sum to ``F``."""

    center: jax.Array  # μ_i F_0
    rotational: jax.Array  # m_i (I_c⁻¹ τ) × r_i
    orthogonal: jax.Array  # zero total force and zero total torque
    total_force: jax.Array  # F_0 = Σ F_i, (3,)
    total_torque: jax.Array  # τ = Σ r_i × F_i about the centre of mass, (3,)


def _check_multi(x, n: int, name: str, where: str, d: int | None = 3):
    """Constructor-time check of an ``(n, d)`` array."""
    x = as_float(x)
    if x.ndim != 2 or x.shape[0] != n or (d is not None and x.shape[1] != d):
        want = f"({n}, {d})" if d is not None else f"({n}, d)"
        raise ValueError(f"{where}: argument '{name}' must have shape {want}, got {tuple(x.shape)}")
    return check_finite(x, name, where)


class ParticleSystem(eqx.Module):
    """n free particles with masses ``m_i`` (Modugno–Vitolo §3.1) and the centre-of-mass splitting.

    Args:
        masses: ``(n,)`` positive masses.

    Positions/velocities/forces are ``(n, d)`` arrays (any spatial dimension d).
    """

    masses: jax.Array

    def __init__(self, masses):
        self.masses = self._check_masses(masses, "ParticleSystem")

    @staticmethod
    def _check_masses(masses, where):
        m = as_float(masses)
        if m.ndim != 1 or m.shape[0] < 1:
            raise ValueError(
                f"{where}: argument 'masses' must have shape (n,) with n ≥ 1, got {tuple(m.shape)}"
            )
        return check_positive(m, "masses", where)

    @property
    def n(self) -> int:
        return self.masses.shape[0]

    @property
    def total_mass(self) -> jax.Array:
        """``m_0 = Σ m_i``."""
        return jnp.sum(self.masses)

    @property
    def weights(self) -> jax.Array:
        """``μ_i = m_i / m_0`` (sum to 1)."""
        return self.masses / self.total_mass

    _dim: ClassVar[int | None] = None  # spatial dimension required by the methods (None: any)

    def _start(self, where: str, **arrays):
        """Checker and the validated ``(n, d)`` arrays (``None`` passes through)."""
        chk = Checker(f"{type(self).__name__}.{where}")
        out = []
        for name, x in arrays.items():
            if x is None:
                out.append(None)
                continue
            x = as_float(x)
            d = self._dim
            if x.ndim != 2 or x.shape[0] != self.n or (d is not None and x.shape[1] != d):
                raise chk.shape_error(name, f"({self.n}, {d if d is not None else 'd'})", x)
            out.append(chk.finite(x, name))
        return chk, out

    def _w(self, x):
        return self.weights.astype(x.dtype)

    def _m(self, x):
        return self.masses.astype(x.dtype)

    def center_of_mass_at(self, x) -> jax.Array:
        """Centre of mass of the configuration ``x``: ``p_0 = Σ μ_i x_i`` (the unique point with
        ``Σ μ_i (x_i − p_0) = 0``), shape ``(3,)`` (or ``(d,)``)."""
        chk, (x,) = self._start("center_of_mass_at", x=x)
        return chk.done(self._w(x) @ x)

    def split_positions(self, x) -> tuple[jax.Array, jax.Array]:
        """Eq. (3.6): ``x = (p_0, …, p_0) + (x_1 − p_0, …)``; returns ``(p_0, r)``, ``Σ μ_i r_i = 0``."""
        chk, (x,) = self._start("split_positions", x=x)
        p0 = self._w(x) @ x
        return chk.done((p0, x - p0))

    def split_velocities(self, v) -> tuple[jax.Array, jax.Array]:
        """Eq. (3.7): returns ``(v_0, v_rel)`` with ``v_0 = Σ μ_i v_i`` and ``v_rel = v − v_0``."""
        chk, (v,) = self._start("split_velocities", v=v)
        v0 = self._w(v) @ v
        return chk.done((v0, v - v0))

    def split_forces(self, F) -> tuple[jax.Array, jax.Array]:
        """Eq. (3.8): returns ``(F_0, F_rel)`` with ``F_0 = Σ F_i`` and ``F_rel,i = F_i − μ_i F_0``."""
        chk, (F,) = self._start("split_forces", F=F)
        F0 = jnp.sum(F, 0)
        return chk.done((F0, F - self._w(F)[:, None] * F0))

    def weighted_metric(self, u, w) -> jax.Array:
        """``G_mul(u, w) = Σ μ_i u_i·w_i`` (eq. 3.5)."""
        chk, (u, w) = self._start("weighted_metric", u=u, w=w)
        return chk.done(jnp.sum(self._w(u)[:, None] * u * w))

    def kinetic_energy(self, v) -> jax.Array:
        """``½ m_0 G_mul(v, v) = ½ Σ m_i |v_i|²``."""
        chk, (v,) = self._start("kinetic_energy", v=v)
        return chk.done(0.5 * jnp.sum(self._m(v)[:, None] * v * v))

    def acceleration(self, F) -> jax.Array:
        """Newton's law (3.9) for free particles: ``a_i = F_i / m_i``."""
        chk, (F,) = self._start("acceleration", F=F)
        return chk.done(F / self._m(F)[:, None])


class RigidSystem(ParticleSystem):
    """A rigid system of n ≥ 2 particles (Modugno–Vitolo §4).

    Args:
        masses: ``(n,)`` positive masses.
        reference_positions: ``(n, 3)`` positions in the body (reference) frame; distinct points.
        tol: relative tolerance on the singular values of the centred positions used to decide the
            characteristic C (default ``1000·eps``).
        warn_ratio: a body with ``C ≥ 2`` whose second singular value is below ``warn_ratio`` times
            the first is *nearly collinear*: its inertia is nearly singular, and a ``UserWarning``
            is issued at construction.
        characteristic: give C explicitly (required when ``reference_positions`` are traced).

    Configurations ``x``, velocities ``v`` and forces ``F`` are ``(n, 3)`` arrays; every method
    acts on one configuration (batch with ``jax.vmap``).  Spatial quantities (angular velocity,
    inertia ``I_c``) are about the current centre of mass, in the inertial frame.

    Example::

        body = RigidSystem(jnp.array([1.0, 2.0, 3.0]), jnp.eye(3))
        body.characteristic  # 2 (three non-collinear points span a plane)
        R = body.reaction_force(x, v, forces)  # (3, 3): zero total force and torque
    """

    reference_positions: jax.Array
    body_positions: jax.Array
    axis_coordinates: jax.Array
    characteristic: int = eqx.field(static=True)
    _dim: ClassVar[int | None] = 3

    def __init__(
        self,
        masses,
        reference_positions,
        tol: float | None = None,
        warn_ratio: float = 1e-3,
        characteristic: int | None = None,
    ):
        where = "RigidSystem"
        m = self._check_masses(masses, where)
        n = m.shape[0]
        if n < 2:
            raise ValueError(f"{where}: argument 'masses' must describe n ≥ 2 particles, got n={n}")
        ref = _check_multi(reference_positions, n, "reference_positions", where)
        mu = m / jnp.sum(m)
        com = mu.astype(ref.dtype) @ ref
        r = ref - com
        if characteristic is None:
            if is_traced(ref):
                raise ValueError(
                    f"{where}: argument 'characteristic' must be given (1, 2 or 3) when "
                    "'reference_positions' are traced: C is decided statically"
                )
            characteristic, axis = self._decide_characteristic(np.asarray(r), tol, warn_ratio)
        else:
            if characteristic not in (1, 2, 3):
                raise ValueError(
                    f"{where}: argument 'characteristic' must be 1, 2 or 3, got {characteristic!r}"
                )
            axis = None
        if characteristic == 1:
            if axis is None:  # traced: principal axis of the centred positions
                axis = jnp.linalg.svd(r, full_matrices=False)[2][0]
            s = r @ jnp.asarray(axis, r.dtype)
        else:
            s = jnp.zeros(n, r.dtype)
        self.masses = m
        self.reference_positions = ref
        self.body_positions = r
        self.axis_coordinates = s
        self.characteristic = int(characteristic)

    @staticmethod
    def _decide_characteristic(r: np.ndarray, tol, warn_ratio):
        eps = np.finfo(r.dtype).eps
        tol = 1e3 * eps if tol is None else float(tol)
        d = r[:, None, :] - r[None, :, :]
        dist = np.sqrt(np.sum(d * d, -1))
        sv = np.linalg.svd(r, compute_uv=False)
        scale = sv[0]
        if scale == 0.0 or np.min(dist + np.eye(len(r)) * scale) <= tol * scale:
            raise ValueError(
                "RigidSystem: argument 'reference_positions' must hold distinct points (two or "
                "more particles coincide)"
            )
        C = int(np.sum(sv > tol * scale))
        if C >= 2 and sv[1] < warn_ratio * scale:
            warn(
                f"RigidSystem: the body is nearly collinear (singular values of the centred "
                f"positions {np.array2string(sv, precision=3)}): its inertia is nearly singular "
                f"(condition number ~{(scale / sv[1]) ** 2:.1e}), so angular velocities and "
                "reactions lose that many digits.  Make it exactly collinear, or pass a larger "
                "'tol' to treat it as collinear (configuration space R³ × S²).",
            )
        axis = np.linalg.svd(r)[2][0] if C == 1 else None
        return C, axis

    # --- mass properties (reference configuration) ------------------------------------------
    @property
    def mass(self) -> jax.Array:
        """Total mass ``m_0``."""
        return self.total_mass

    @property
    def center_of_mass(self) -> jax.Array:
        """Centre of mass of the reference configuration (body frame), ``(3,)``; for a current
        configuration ``x`` use :meth:`center_of_mass_at`."""
        return self._w(self.reference_positions) @ self.reference_positions

    @property
    def inertia_tensor(self) -> jax.Array:
        """Inertia tensor about the centre of mass in the body frame, ``m_0 Σ̂ = Σ m_i(|r_i|²1 −
        r_i r_iᵀ)`` (§4.3.1), shape ``(3, 3)``; singular (one zero eigenvalue) when C = 1."""
        return self._inertia(self.body_positions)

    @property
    def principal_moments(self) -> jax.Array:
        """Eigenvalues of :attr:`inertia_tensor` in ascending order, ``(3,)``."""
        return jnp.linalg.eigvalsh(self.inertia_tensor)

    def _inertia(self, r):
        m = self._m(r)
        r2 = jnp.sum(r * r, -1)
        return jnp.sum(m * r2) * jnp.eye(3, dtype=r.dtype) - jnp.einsum("i,ia,ib->ab", m, r, r)

    # --- configurations ----------------------------------------------------------------------
    def configuration(self, rotation, center) -> jax.Array:
        """Particle positions ``x_i = c + R r_i`` ``(n, 3)`` for a rotation ``(3, 3)`` and centre
        ``(3,)`` (for C = 1 the rotation about the axis is irrelevant: isotropy)."""
        chk = Checker("RigidSystem.configuration")
        R = chk.array(rotation, "rotation", (3, 3))
        c = chk.vector(center, "center", 3)
        return chk.done(c + self.body_positions.astype(R.dtype) @ R.T)

    def configuration_from_axis(self, center, axis) -> jax.Array:
        """Collinear bodies (C = 1): ``x_i = c + s_i u`` with ``u = axis/|axis|`` ∈ S²."""
        if self.characteristic != 1:
            raise ValueError(
                "RigidSystem.configuration_from_axis: only collinear bodies (characteristic 1) "
                f"are described by an axis; this body has characteristic {self.characteristic}"
            )
        chk = Checker("RigidSystem.configuration_from_axis")
        c = chk.vector(center, "center", 3)
        u = chk.vector(axis, "axis", 3)
        u = u / jnp.linalg.norm(u)
        return chk.done(c + self.axis_coordinates.astype(u.dtype)[:, None] * u)

    # --- internals (inputs validated) ----------------------------------------------------------
    def _r(self, x):
        return x - self._w(x) @ x

    def _inertia_solve(self, chk, r, b):
        """``I_c(r)⁻¹ b`` (spatial inertia about the centre of mass); for C = 1 the inverse on the
        plane orthogonal to the axis (the angular-velocity representative ⊥ axis, Prop. 4.13)."""
        if self.characteristic >= 2:
            return chk.solve(self._inertia(r), b, "inertia")
        m = self._m(r)
        s = self.axis_coordinates.astype(r.dtype)
        w = jnp.einsum("i,i,ia->a", m, s, r)  # ∝ axis on the constraint
        u = w / jnp.linalg.norm(w)
        lam = jnp.sum(m * jnp.sum(r * r, -1))  # I_c = λ (1 − u uᵀ)
        return (b - u * (u @ b)) / lam

    def _omega(self, chk, r, v):
        L = jnp.sum(self._m(v)[:, None] * cross(r, v), 0)
        return self._inertia_solve(chk, r, L)

    def _split_velocity(self, chk, r, v):
        v0 = self._w(v) @ v
        w = self._omega(chk, r, v)
        center = jnp.broadcast_to(v0, v.shape)
        rot = cross(jnp.broadcast_to(w, r.shape), r)
        return VelocitySplit(center, rot, v - center - rot, v0, w)

    def _rigid_acceleration(self, chk, r, v, F):
        w = self._omega(chk, r, v)
        W = jnp.broadcast_to(w, r.shape)
        a = cross(W, cross(W, r))
        torque = -cross(w, self._inertia(r) @ w)
        if F is not None:
            a = a + jnp.sum(F, 0) / self.total_mass.astype(F.dtype)
            torque = torque + jnp.sum(cross(r, F), 0)
        wdot = self._inertia_solve(chk, r, torque)
        return a + cross(jnp.broadcast_to(wdot, r.shape), r)

    # --- kinematics (Thm 4.22, 4.27) -------------------------------------------------------------
    def angular_velocity(self, x, v) -> jax.Array:
        """``Ω = Σ̂⁻¹(Σ μ_i r_i × v_i) = I_c⁻¹ Σ m_i r_i × v_i`` (eq. 4.17 / Thm 4.27), ``(3,)``.

        For a rigid velocity ``v_i = v_0 + Ω × r_i`` this recovers Ω exactly (for any weights,
        Note 4.23); for a general multi-velocity it is the rotational component of its projection.
        For collinear bodies it is the representative orthogonal to the axis.
        """
        chk, (x, v) = self._start("angular_velocity", x=x, v=v)
        return chk.done(self._omega(chk, self._r(x), v))

    def split_velocity(self, x, v) -> VelocitySplit:
        """Thm 4.27: ``v = (v_0, …) + Ω × r + v_⊥`` (centre of mass, rotational, orthogonal)."""
        chk, (x, v) = self._start("split_velocity", x=x, v=v)
        return chk.done(self._split_velocity(chk, self._r(x), v))

    def tangent_projection(self, x, v) -> jax.Array:
        """Mass-metric orthogonal projection of a multi-vector onto ``T P_rig``: ``v_0 + Ω × r_i``."""
        chk, (x, v) = self._start("tangent_projection", x=x, v=v)
        sp = self._split_velocity(chk, self._r(x), v)
        return chk.done(sp.center + sp.rotational)

    def split_force(self, x, F) -> ForceSplit:
        """Thm 4.28: ``F = (μ_i F_0) + m_i (I_c⁻¹τ) × r_i + F_⊥`` with ``F_0 = Σ F_i`` and
        ``τ = Σ r_i × F_i``; ``F_⊥`` has zero total force and zero total torque."""
        chk, (x, F) = self._start("split_force", x=x, F=F)
        r = self._r(x)
        F0 = jnp.sum(F, 0)
        tau = jnp.sum(cross(r, F), 0)
        center = self._w(F)[:, None] * F0
        beta = self._inertia_solve(chk, r, tau)
        rot = self._m(F)[:, None] * cross(jnp.broadcast_to(beta, r.shape), r)
        return chk.done(ForceSplit(center, rot, F - center - rot, F0, tau))

    def kinetic_energy_split(self, x, v) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(K_cen, K_rot, K_⊥)``: ``½ m_0|v_0|²``, ``½ Ωᵀ I_c Ω`` and the orthogonal remainder
        (0 for rigid velocities); they sum to ``½ Σ m_i |v_i|²`` (§4.5)."""
        chk, (x, v) = self._start("kinetic_energy_split", x=x, v=v)
        r = self._r(x)
        sp = self._split_velocity(chk, r, v)
        m = self._m(x)
        K_cen = 0.5 * jnp.sum(m) * sp.center_velocity @ sp.center_velocity
        K_rot = 0.5 * sp.angular_velocity @ self._inertia(r) @ sp.angular_velocity
        K_perp = 0.5 * jnp.sum(m[:, None] * sp.orthogonal**2)
        return chk.done((K_cen, K_rot, K_perp))

    def momenta(self, x, v) -> tuple[jax.Array, jax.Array]:
        """Linear momentum ``m_0 v_0`` and angular momentum about the centre of mass ``I_c Ω``."""
        chk, (x, v) = self._start("momenta", x=x, v=v)
        r = self._r(x)
        sp = self._split_velocity(chk, r, v)
        return chk.done(
            (self.total_mass * sp.center_velocity, self._inertia(r) @ sp.angular_velocity)
        )

    def second_fundamental_form(self, x, v) -> jax.Array:
        """Eq. (4.27): ``N_i = Ω × (Ω × r_i) − (Σ̂⁻¹(Ω × Σ̂Ω)) × r_i`` for a rigid velocity, ``(n, 3)``.

        The normal (``G_mul``-orthogonal to ``T P_rig``) part of the acceleration of a rigid motion.
        """
        chk, (x, v) = self._start("second_fundamental_form", x=x, v=v)
        r = self._r(x)
        w = self._omega(chk, r, v)
        gyro = self._inertia_solve(chk, r, cross(w, self._inertia(r) @ w))
        W = jnp.broadcast_to(w, r.shape)
        return chk.done(cross(W, cross(W, r)) - cross(jnp.broadcast_to(gyro, r.shape), r))

    # --- dynamics (Cor. 4.36, 4.38) ------------------------------------------------------------
    def rigid_acceleration(self, x, v, force=None) -> jax.Array:
        """Particle accelerations of the rigid motion (Newton–Euler, eq. 4.28), ``(n, 3)``.

        ``a_i = a_0 + Ω̇ × r_i + Ω × (Ω × r_i)`` with ``m_0 a_0 = F_0`` and
        ``I_c Ω̇ = τ − Ω × I_c Ω`` (spatial frame, about the centre of mass).  ``v`` must be a
        rigid velocity (its Ω is read with :meth:`angular_velocity`).
        """
        chk, (x, v, F) = self._start("rigid_acceleration", x=x, v=v, force=force)
        return chk.done(self._rigid_acceleration(chk, self._r(x), v, F))

    def reaction_force(self, x, v, force=None) -> jax.Array:
        """Reaction of the rigid constraint at every particle, ``R_i = m_i a_i − F_i``, ``(n, 3)``.

        Corrected eq. (4.30): zero total force, zero total torque (``R_rig = 0``), equal to
        ``m_i N_i − F_⊥,i`` (eq. 4.29) and to the Lagrange-multiplier reaction of the pairwise
        distance constraints whenever those are independent.
        """
        chk, (x, v, F) = self._start("reaction_force", x=x, v=v, force=force)
        a = self._rigid_acceleration(chk, self._r(x), v, F)
        Ra = self._m(a)[:, None] * a
        return chk.done(Ra if F is None else Ra - F)

    def to_rigid_body(self, potential: Callable | None = None):
        """A :class:`geomjax.systems.RigidBody` with this body's inertia tensor (about the centre
        of mass, body frame), to simulate its rotation with the Lie-group integrators."""
        if self.characteristic == 1:
            raise ValueError(
                "RigidSystem.to_rigid_body: a collinear body (characteristic 1) has a singular "
                "inertia tensor and configuration space R³ × S², not SO(3)"
            )
        try:
            from ..systems import RigidBody
        except ImportError as e:  # the systems layer ships with the LGVI issue
            raise ImportError(
                "RigidSystem.to_rigid_body needs geomjax.systems.RigidBody, which is not "
                "available in this installation"
            ) from e
        return RigidBody(inertia=self.inertia_tensor, potential=potential)

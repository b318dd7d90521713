"""Lagrangian systems in a mobile frame: quasi-velocities, Hamel's equations and the torsion of the
frame's connection.

A *mobile frame* on ``Q = R^n`` (a chart of the configuration manifold) is a field of bases
``e_1(q), …, e_n(q)`` of the tangent spaces that need not be coordinate vectors: the body
angular velocity over Euler angles, a frame adapted to rolling constraints, the unit-length
("engineering") frames of curvilinear coordinates.  It is given by the matrix ``A(q)`` ``(n, n)``
that maps coordinate velocities to **quasi-velocities**,

    v = A(q) q̇,     q̇ = E(q) v,     E = A⁻¹  (the frame vectors e_a are the columns of E),

and the system by a Lagrangian in quasi-velocities ``ℓ(q, v) = L(q, E(q) v)``.

**Connection and torsion.**  The frame defines the connection whose parallel transport keeps the
frame components of a vector fixed (``∇ e_a = 0``).  Its torsion
``T(X, Y) = ∇_X Y − ∇_Y X − [X, Y]`` on frame vectors is minus their Lie bracket,

    T(e_a, e_b) = −[e_a, e_b] = −c^d_{ab} e_d,

with the structure coefficients ``c^d_{ab}(q)`` of the frame (Hamel's coefficients), computed here
by autodiff of ``A`` through the Maurer–Cartan identity ``dθ^d(e_a, e_b) = −θ^d([e_a, e_b])`` for
the coframe ``θ^d = A_{di} dq^i``:

    c^d_{ab} = −(∂_j A_{di} − ∂_i A_{dj}) E_{ja} E_{ib}.

A frame of coordinate velocities of other coordinates (``A = ∂φ/∂q``) has zero torsion; the body
frame of a rigid body has the structure constants of so(3), ``c^d_{ab} = ε_{abd}``.

**Law of dynamics** (Romano, Barretta & Diaco, *On the general form of the law of dynamics*,
Int. J. Non-Linear Mech. 44 (2009), Prop. 5.3 and §6).  In a connection with torsion the law is
``⟨∇_v p, w⟩ − ⟨d_B L, w⟩ + ⟨p, T(v, w)⟩ = ⟨F, w⟩`` for every virtual velocity ``w``: the paper
prints the torsion term with a minus sign, a misprint (with it, Euler's equations of a rigid body
come out with the wrong sign; the corrected sign makes the left side the Euler–Lagrange operator
for any connection, and :meth:`HamelSystem.acceleration` is tested against the coordinate
Euler–Lagrange equations).  In the frame connection ``∇_v p`` has the components ``ṗ_b``,
``d_B L`` the derivatives along the frame with ``v`` held fixed, ``e_b[ℓ] = (Eᵀ ∂ℓ/∂q)_b``, and
the law becomes **Hamel's equations** (Poincaré's law for a mobile frame; Lagrange's law where the
torsion vanishes):

    d/dt ∂ℓ/∂v_b = e_b[ℓ] + c^d_{ab} v_a ∂ℓ/∂v_d + F_b + λ_b,     q̇ = E(q) v,

with ``F_b = ⟨F, e_b⟩`` the force as a covector in the frame (``L = K − V``, ``F = −dV`` for
potential forces, which may instead stay in ``ℓ``).

**Constraints that are coordinate conditions on v.**  A frame adapted to linear (holonomic or
nonholonomic) constraints makes them ``v_c = 0`` for the indices ``c`` in ``constrained``: the
virtual velocities are the frame vectors ``e_a`` with ``a`` free, and the Lagrange–d'Alembert
principle (Romano et al. §6: reactions in the momentum equation, not vakonomic) puts a multiplier
``λ_c`` — the reaction's frame component ``⟨R, e_c⟩`` — into each constrained equation only.  The
free equations are Hamel's equations restricted to the constraint (no multiplier to solve for),
the constrained ones give ``λ``.

The state is :class:`HamelState` ``(q, v, lam)``.  Integrate with
:class:`geomjax.integrators.DiscreteHamel` (discrete Hamel equations, a variational integrator).
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.tracing import is_traced
from ..systems.base import AbstractSystem, check_finite
from .system import LagrangianSystem, _solve

__all__ = ["HamelState", "HamelSystem", "frame_rcond"]


class HamelState(eqx.Module):
    """State of a :class:`HamelSystem`.

    Attributes:
        q: configuration ``(n,)``.
        v: quasi-velocities ``(n,)``, ``v = A(q) q̇`` (``v_c = 0`` for the constrained indices).
        lam: multipliers ``(m,)`` of the ``m`` constraints ``v_c = 0`` (``(0,)`` without): the
            frame components ``⟨R, e_c⟩`` of the reaction covector ``R``.
    """

    q: jax.Array
    v: jax.Array
    lam: jax.Array


def frame_rcond(A, E):
    """Reciprocal condition number of the frame in the ∞-norm, ``1 / (‖A‖_∞ ‖E‖_∞)`` (``E = A⁻¹``;
    NaN/0 when ``A`` is singular).  ``DiscreteHamel`` stops where it falls below its
    ``frame_tol``: the quasi-velocities no longer describe the motion there (Euler angles at
    gimbal lock)."""
    nA = jnp.max(jnp.sum(jnp.abs(A), -1), -1)
    nE = jnp.max(jnp.sum(jnp.abs(E), -1), -1)
    return 1.0 / (nA * nE)


class HamelSystem(AbstractSystem):
    """A Lagrangian system written in a mobile frame (module docstring): ``ℓ(q, v)`` with
    quasi-velocities ``v = A(q) q̇``.

    Arguments (give ``lagrangian`` *or* ``metric``; ``frame`` *or* ``frame_vectors``):
        lagrangian: ``ℓ(q, v) -> scalar`` in quasi-velocities (velocity Hessian positive
            definite).  A callable ``eqx.Module`` may carry differentiable parameters.
        metric: ``M(q) -> (n, n)`` SPD kinetic metric in the frame (``K = ½ vᵀ M(q) v``; the
            inertia tensor for body angular velocities) or a constant ``(n, n)`` array.
        potential: ``V(q) -> scalar`` (with ``metric``; default 0).
        frame: ``A(q) -> (n, n)``, the map ``q̇ ↦ v`` (rows: the coframe ``θ^a``).
        frame_vectors: ``E(q) -> (n, n)``, the frame vectors ``e_a`` as columns (``q̇ = E v``).
        force: ``F(t, q, v, u) -> (n,)``, the external / control force as a covector *in the
            frame* (``F_a = ⟨F, e_a⟩``: a body torque for body angular velocities); default:
            ``u`` itself when a control is given, else none.
        constrained: indices ``c`` of the quasi-velocities fixed to zero, ``v_c = 0`` (a
            constraint-adapted frame; default none).
        dim: ``n`` (needed unless ``metric`` is an array): the functions are checked at
            construction.

    The model ``ℓ`` (with its metric, potential and force) has the form of a coordinate
    Lagrangian and is held as ``model``, a :class:`~geomjax.variational.LagrangianSystem` in
    ``(q, v)``; :meth:`as_lagrangian_system` is the system in coordinates instead.  Every method
    acts on one point; batch with ``jax.vmap``.
    """

    model: LagrangianSystem
    frame_fn: Callable | None
    frame_vectors_fn: Callable | None
    constrained: tuple[int, ...] = eqx.field(static=True)
    dim: int = eqx.field(static=True)

    def __init__(
        self,
        lagrangian=None,
        *,
        frame=None,
        frame_vectors=None,
        metric=None,
        potential=None,
        force=None,
        constrained=(),
        dim=None,
    ):
        where = type(self).__name__
        if (frame is None) == (frame_vectors is None):
            raise ValueError(
                f"{where}: give exactly one of argument 'frame' (A(q), v = A q̇) or argument "
                "'frame_vectors' (E(q), the frame vectors as columns, q̇ = E v)"
            )
        for name, fn in (("frame", frame), ("frame_vectors", frame_vectors)):
            if fn is not None and not callable(fn):
                raise ValueError(f"{where}: argument '{name}' must be callable")
        if metric is not None and not callable(metric) and dim is None:
            dim = jnp.shape(metric)[0] if jnp.ndim(metric) == 2 else None
        if dim is None:
            raise ValueError(
                f"{where}: argument 'dim' (the number n of coordinates) is required unless "
                "'metric' is an (n, n) array"
            )
        if not (isinstance(dim, int | np.integer) and dim >= 1):
            raise ValueError(f"{where}: argument 'dim' must be a positive int, got {dim!r}")
        n = int(dim)
        try:
            cons = tuple(int(c) for c in constrained)
            ok = all(float(c) == int(c) for c in constrained)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(
                f"{where}: argument 'constrained' must be a sequence of quasi-velocity indices "
                f"(ints), got {constrained!r}"
            )
        bad = [c for c in cons if not 0 <= c < n]
        if bad:
            raise ValueError(
                f"{where}: argument 'constrained' names quasi-velocity index {bad[0]}, which does "
                f"not exist: the quasi-velocities are v_0 … v_{n - 1} (dim = {n})"
            )
        if len(set(cons)) != len(cons):
            raise ValueError(f"{where}: argument 'constrained' repeats an index: {cons}")
        if len(cons) >= n:
            raise ValueError(
                f"{where}: argument 'constrained' fixes all {n} quasi-velocities; at least one "
                "must stay free"
            )
        # ℓ(q, v), its metric, potential and force have the form of a coordinate Lagrangian's
        # L(q, q̇): that model is kept (and checked) by a LagrangianSystem
        try:
            self.model = LagrangianSystem(
                lagrangian, metric=metric, potential=potential, force=force, dim=n
            )
        except ValueError as e:
            msg = str(e).replace("LagrangianSystem", where).replace("qdot", "v")
            raise ValueError(msg) from None
        self.frame_fn = frame
        self.frame_vectors_fn = frame_vectors
        self.constrained = tuple(sorted(cons))
        self.dim = n
        self._check_frame_function(n)

    def _check_frame_function(self, n):
        where = type(self).__name__
        q = jax.ShapeDtypeStruct((n,), jnp.result_type(float))
        name = "frame" if self.frame_fn is not None else "frame_vectors"
        fn = self.frame_fn if self.frame_fn is not None else self.frame_vectors_fn
        try:
            out = jax.eval_shape(fn, q)
        except Exception as e:
            raise ValueError(
                f"{where}: argument '{name}' failed on q of shape ({n},): {type(e).__name__}: {e}"
            ) from e
        if tuple(getattr(out, "shape", ())) != (n, n):
            raise ValueError(
                f"{where}: argument '{name}' must return an ({n}, {n}) matrix, got "
                f"{getattr(out, 'shape', type(out))}"
            )

    # --- the frame ---------------------------------------------------------------------------
    @property
    def free(self) -> np.ndarray:
        """Static boolean mask ``(n,)`` of the free quasi-velocities."""
        mask = np.ones(self.dim, bool)
        mask[list(self.constrained)] = False
        return mask

    def frames(self, q) -> tuple[jax.Array, jax.Array]:
        """``(A(q), E(q))``, ``E = A⁻¹`` (one inverse, with pivoting: frame matrices need not
        be close to SPD)."""
        if self.frame_fn is not None:
            A = jnp.asarray(self.frame_fn(q), q.dtype)
            return A, jnp.linalg.inv(A)
        E = jnp.asarray(self.frame_vectors_fn(q), q.dtype)
        return jnp.linalg.inv(E), E

    def frame_matrix(self, q) -> jax.Array:
        """``A(q)`` ``(n, n)``: ``v = A q̇``."""
        if self.frame_fn is not None:
            return jnp.asarray(self.frame_fn(q), q.dtype)
        return jnp.linalg.inv(jnp.asarray(self.frame_vectors_fn(q), q.dtype))

    def frame_vectors(self, q) -> jax.Array:
        """``E(q)`` ``(n, n)``: the frame vectors ``e_a`` as columns, ``q̇ = E v``."""
        if self.frame_vectors_fn is not None:
            return jnp.asarray(self.frame_vectors_fn(q), q.dtype)
        return jnp.linalg.inv(jnp.asarray(self.frame_fn(q), q.dtype))

    def quasi_velocity(self, q, qdot) -> jax.Array:
        """``v = A(q) q̇`` ``(n,)``."""
        return self.frame_matrix(q) @ qdot

    def coordinate_velocity(self, q, v) -> jax.Array:
        """``q̇ = E(q) v`` ``(n,)``."""
        return self.frame_vectors(q) @ v

    def structure_coefficients(self, q) -> jax.Array:
        """``C`` ``(n, n, n)`` with ``[e_a, e_b] = Σ_d C[d, a, b] e_d`` (Hamel's coefficients
        ``c^d_{ab}``; Maurer–Cartan form, module docstring).  Zero for a coordinate frame or any
        holonomic frame ``A = ∂φ/∂q``; ``ε_{abd}`` for the body frame of a rigid body."""
        _, E = self.frames(q)
        dA = jax.jacfwd(self.frame_matrix)(q)  # [d, i, j] = ∂_j A_di
        X = jnp.einsum("dij,ja,ib->dab", dA, E, E)
        return -(X - jnp.swapaxes(X, 1, 2))

    def torsion(self, q) -> jax.Array:
        """Torsion of the frame connection (``∇ e_a = 0``), ``T`` ``(n, n, n)`` with
        ``T(e_a, e_b) = Σ_d T[d, a, b] e_d = −[e_a, e_b]``: minus :meth:`structure_coefficients`."""
        return -self.structure_coefficients(q)

    def bracket_term(self, q, v, p) -> jax.Array:
        """The torsion term of the law in the frame, ``β_b = c^d_{ab} v_a p_d = −⟨p, T(v, e_b)⟩``
        ``(n,)`` (``p`` the frame momentum ``∂ℓ/∂v``; on SO(3) in the body frame ``p × Ω``)."""
        return jnp.einsum("dab,a,d->b", self.structure_coefficients(q), v, p)

    # --- the model (ℓ has the form of a coordinate Lagrangian: delegated to ``model``) ----------
    def lagrangian(self, q, v) -> jax.Array:
        """``ℓ(q, v)``."""
        return self.model.lagrangian(q, v)

    def mass_matrix(self, q, v=None) -> jax.Array:
        """``∂²ℓ/∂v²`` ``(n, n)`` (the metric itself for ``metric`` systems)."""
        return self.model.mass_matrix(q, v)

    def potential(self, q) -> jax.Array:
        """``V(q) = −ℓ(q, 0)``."""
        return self.model.potential(q)

    def force(self, t, q, v, u=None):
        """Force covector in the frame ``(n,)``, or ``None`` (no force at all)."""
        return self.model.force(t, q, v, u)

    def momentum(self, q, v) -> jax.Array:
        """Frame momentum ``p = ∂ℓ/∂v`` ``(n,)`` (``p_a = ⟨∂L/∂q̇, e_a⟩``)."""
        return self.model.momentum(q, v)

    def energy_qv(self, q, v) -> jax.Array:
        """``E = ⟨p, v⟩ − ℓ``."""
        return self.model.energy_qv(q, v)

    def energy(self, state) -> jax.Array:
        return self.energy_qv(state.q, state.v)

    def acceleration(self, t, q, v, u=None) -> tuple[jax.Array, jax.Array]:
        """``(v̇, λ)`` of Hamel's equations (module docstring) with the constraints ``v_c = 0``:

            M v̇ = Eᵀ ∂ℓ/∂q + β(q, v, p) − (∂p/∂q) q̇ + F + Σ_c λ_c e^c,   v̇_c = 0,

        ``M = ∂²ℓ/∂v²``, ``β`` the torsion term (:meth:`bracket_term`); ``λ`` ``(m,)``."""
        _, E = self.frames(q)
        qdot = E @ v
        dq, p = jax.grad(self.lagrangian, argnums=(0, 1))(q, v)
        _, mixed = jax.jvp(lambda x: self.momentum(x, v), (q,), (qdot,))
        rhs = E.T @ dq + self.bracket_term(q, v, p) - mixed
        F = self.force(t, q, v, u)
        if F is not None:
            rhs = rhs + F
        M = self.mass_matrix(q, v)
        if not self.constrained:
            return _solve(M, rhs), jnp.zeros((0,), q.dtype)
        free = jnp.asarray(self.free)
        # free rows: the free equations; constrained rows: v̇_c = 0
        K = jnp.where(free[:, None], M, jnp.eye(self.dim, dtype=M.dtype))
        vdot = _solve(K, jnp.where(free, rhs, 0.0))
        lam = (M @ vdot - rhs)[np.asarray(self.constrained)]
        return vdot, lam

    def vector_field(self, t, state, u=None):
        """``(q̇, v̇)`` at a state (``q̇ = E(q) v``)."""
        vdot, _ = self.acceleration(t, state.q, state.v, u)
        return self.coordinate_velocity(state.q, state.v), vdot

    def as_lagrangian_system(self) -> LagrangianSystem:
        """The same system in coordinates: :class:`~geomjax.variational.LagrangianSystem` with
        ``L(q, q̇) = ℓ(q, A(q) q̇)`` and the coordinate force ``A(q)ᵀ F(t, q, A q̇, u)``
        (unconstrained systems only)."""
        if self.constrained:
            raise ValueError(
                "HamelSystem.as_lagrangian_system: a system with 'constrained' quasi-velocities "
                "has no unconstrained coordinate form"
            )
        ham = self

        def L(q, qdot):
            return ham.lagrangian(q, ham.frame_matrix(q) @ qdot)

        def F(t, q, qdot, u):
            A = ham.frame_matrix(q)
            f = ham.force(t, q, A @ qdot, u)
            return jnp.zeros_like(q) if f is None else A.T @ f

        has_force = self.model.force_fn is not None
        return LagrangianSystem(L, force=F if has_force else None, dim=self.dim)

    # --- states ------------------------------------------------------------------------------
    def check_frame(self, q, name: str = "q", where: str | None = None, tol=None):
        """``q`` with a check that the frame is regular there (``ValueError`` naming ``frame``
        eagerly, ``equinox.error_if`` under ``jit``): :func:`frame_rcond` above ``tol`` (default
        ``sqrt(eps)``)."""
        where = where or type(self).__name__
        A, E = self.frames(q)
        tol = float(jnp.finfo(q.dtype).eps) ** 0.5 if tol is None else tol
        bad = ~(frame_rcond(A, E) > tol)
        arg = "frame" if self.frame_fn is not None else "frame_vectors"
        msg = (
            f"{where}: argument '{arg}' is singular at '{name}' (reciprocal condition number of "
            f"A(q) below {tol:.3g}): the quasi-velocities do not describe the motion there "
            "(e.g. Euler angles at gimbal lock)"
        )
        if is_traced(bad):
            return eqx.error_if(q, bad, msg)
        if bool(bad):
            raise ValueError(msg)
        return q

    def make_state(self, q, v=None, qdot=None, t=0.0) -> HamelState:
        """A state from ``q`` and either the quasi-velocities ``v`` or the coordinate velocity
        ``qdot`` (``v = A(q) q̇``); ``v_c = 0`` must hold for the constrained indices
        (``ValueError`` naming ``v``/``qdot``).  ``lam`` are the multipliers at ``(q, v)``."""
        where = f"{type(self).__name__}.make_state"
        q = jnp.asarray(q)
        if not jnp.issubdtype(q.dtype, jnp.inexact):
            q = q.astype(jnp.result_type(float))
        if q.shape != (self.dim,):
            raise ValueError(f"{where}: argument 'q' must have shape ({self.dim},), got {q.shape}")
        if (v is None) == (qdot is None):
            raise ValueError(f"{where}: give exactly one of argument 'v' or argument 'qdot'")
        q = self.check_frame(q, "q", where)
        name = "v" if v is not None else "qdot"
        x = jnp.asarray(v if v is not None else qdot, q.dtype)
        if x.shape != q.shape:
            raise ValueError(f"{where}: argument '{name}' must have shape {q.shape}")
        v = x if name == "v" else self.quasi_velocity(q, x)
        self._check_constraints(v, name, where)
        lam = self.acceleration(jnp.asarray(t, q.dtype), q, v)[1]
        return HamelState(q, v, lam)

    def _check_constraints(self, v, name, where):
        if not self.constrained:
            return v
        vc = v[np.asarray(self.constrained)]
        scale = jnp.max(jnp.abs(v)) + jnp.finfo(v.dtype).tiny
        bad = jnp.max(jnp.abs(vc)) > 1e3 * jnp.finfo(v.dtype).eps * scale
        msg = (
            f"{where}: argument '{name}' violates the constraints v_c = 0 for the constrained "
            f"quasi-velocities {self.constrained}"
        )
        if is_traced(bad):
            return eqx.error_if(v, bad, msg)
        if bool(bad):
            raise ValueError(msg)
        return v

    def check_state(self, state, name: str = "state0"):
        """Validate type, shapes and finiteness of a state (``ValueError`` naming the field)."""
        where = type(self).__name__
        if not isinstance(state, HamelState):
            raise ValueError(
                f"{where}: argument '{name}' must be a HamelState (use make_state), got "
                f"{type(state).__name__}"
            )
        q, v = jnp.asarray(state.q), jnp.asarray(state.v)
        n, m = self.dim, len(self.constrained)
        if q.shape != (n,) or v.shape != (n,) or jnp.shape(state.lam) != (m,):
            raise ValueError(
                f"{where}: argument '{name}' must be a single state with q, v of shape ({n},) "
                f"and lam ({m},) (batch with jax.vmap), got q{q.shape}, v{v.shape}, "
                f"lam{jnp.shape(state.lam)}"
            )
        q = check_finite(q, f"{name}.q", where)
        v = check_finite(v, f"{name}.v", where)
        return HamelState(q, v, state.lam)

    def diagnostics(self, state) -> dict[str, jax.Array]:
        """Energy, kinetic energy, frame momentum and multipliers of one state."""
        E = self.energy_qv(state.q, state.v)
        return {
            "energy": E,
            "kinetic_energy": E - self.potential(state.q),
            "momentum": self.momentum(state.q, state.v),
            "multipliers": state.lam,
        }

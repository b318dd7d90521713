"""Lagrangian systems in generalized coordinates and the state the coordinate integrators carry.

A system on ``Q = R^n`` (generalized coordinates of a mechanism, Cartesian coordinates of
particles, angles of a chain of pendulums) is given by a Lagrangian ``L(q, q̇)`` — or by a
kinetic-energy metric and a potential, ``L = ½ q̇ᵀ M(q) q̇ − V(q)`` — and optional external or
control forces ``F(t, q, q̇, u)``, covectors ``(n,)`` (geomjax convention ``L = K − V``,
``F = −dV`` for potential forces).

The continuous law (Romano–Barretta–Diaco, *On the general form of the law of dynamics*, Prop. 5.3 in the coordinate connection,
where the torsion vanishes — the sign misprint of the torsion term listed in
the documentation's Conventions page is therefore immaterial here) is the forced Euler–Lagrange
equation

    d/dt ∂L/∂q̇ − ∂L/∂q = F(t, q, q̇, u)  (+ G(q)ᵀ λ with holonomic constraints g(q) = 0),

and, at an impact with a unilateral constraint ``f(q) ≥ 0``, the jump condition of Romano–Barretta–Diaco
Thm 4.1: ``[[p]]·w = 0`` for every virtual velocity ``w`` tangent to the impact interface
(``df(q)·w = 0``), i.e. ``p⁺ = p⁻ + Λ df(q)``.  The paper gives no law for ``Λ``;
:class:`geomjax.integrators.Impacts` closes it by Newton's restitution law.

The state is :class:`VariationalState` ``(q, p, lam)`` with the *momentum* ``p = ∂L/∂q̇``
(the variational integrators are maps of ``T*Q``; :meth:`LagrangianSystem.velocity` inverts the
Legendre transform).
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.eager import quick_compiled
from .._linalg import small_solve
from ..systems.base import AbstractSystem, check_finite

__all__ = ["LagrangianSystem", "VariationalState"]


class VariationalState(eqx.Module):
    """State of a Lagrangian system in coordinates.

    Attributes:
        q: configuration ``(n,)``.
        p: momentum ``∂L/∂q̇`` ``(n,)`` (a covector).
        lam: multipliers ``(m,)`` of the holonomic constraints (``(0,)`` without constraints):
            the constraint force is ``G(q)ᵀ lam`` with ``G = ∂g/∂q`` (see
            :class:`geomjax.integrators.RATTLE`).
    """

    q: jax.Array
    p: jax.Array
    lam: jax.Array


def _solve(A, b):
    return small_solve(A, b) if A.shape[0] <= 8 else jnp.linalg.solve(A, b)


@quick_compiled
def _momentum(system, q, qdot):
    """``system.momentum`` compiled as one program (eagerly: not one per primitive; under a
    transformation it is inlined)."""
    return system.momentum(q, qdot)


class LagrangianSystem(AbstractSystem):
    """A Lagrangian system in coordinates ``q ∈ R^n``.

    Arguments (give ``lagrangian`` *or* ``metric``):
        lagrangian: ``L(q, qdot) -> scalar``; its velocity Hessian must be positive definite
            (mechanical Lagrangians).  A callable ``eqx.Module`` may carry differentiable
            parameters.
        metric: ``M(q) -> (n, n)`` SPD kinetic-energy metric (``K = ½ q̇ᵀ M(q) q̇``; the metrics of
            :mod:`geomjax.riemann` fit), or a constant ``(n, n)`` array.
        potential: ``V(q) -> scalar`` (with ``metric``; default 0).
        force: ``F(t, q, qdot, u) -> (n,)`` external / control generalized force (a covector);
            default: ``u`` itself when a control is given, else no force.
        dim: ``n`` (needed only to check the functions at construction; optional).

    Every method acts on one point; batch with ``jax.vmap``.
    """

    lagrangian_fn: Callable | None
    metric_fn: Callable | jax.Array | None
    potential_fn: Callable | None
    force_fn: Callable | None

    def __init__(self, lagrangian=None, *, metric=None, potential=None, force=None, dim=None):
        where = type(self).__name__
        if (lagrangian is None) == (metric is None):
            raise ValueError(
                f"{where}: give exactly one of argument 'lagrangian' or argument 'metric'"
            )
        if lagrangian is not None and not callable(lagrangian):
            raise ValueError(f"{where}: argument 'lagrangian' must be callable L(q, qdot)")
        if potential is not None and lagrangian is not None:
            raise ValueError(
                f"{where}: argument 'potential' goes with 'metric'; put V into 'lagrangian'"
            )
        if potential is not None and not callable(potential):
            raise ValueError(f"{where}: argument 'potential' must be callable V(q)")
        if force is not None and not callable(force):
            raise ValueError(f"{where}: argument 'force' must be callable F(t, q, qdot, u)")
        if metric is not None and not callable(metric):
            metric = jnp.asarray(metric, dtype=jnp.result_type(float))
            if metric.ndim != 2 or metric.shape[0] != metric.shape[1]:
                raise ValueError(
                    f"{where}: argument 'metric' must be callable M(q) or an (n, n) matrix, "
                    f"got shape {metric.shape}"
                )
            if dim is None:
                dim = metric.shape[0]
        self.lagrangian_fn = lagrangian
        self.metric_fn = metric
        self.potential_fn = potential
        self.force_fn = force
        if dim is not None:
            self._check_functions(int(dim))

    def _check_functions(self, n):
        where = type(self).__name__
        dtype = jnp.result_type(float)
        q = jax.ShapeDtypeStruct((n,), dtype)
        try:
            out = jax.eval_shape(self.lagrangian, q, q)
        except Exception as e:
            name = "lagrangian" if self.lagrangian_fn is not None else "metric"
            raise ValueError(
                f"{where}: argument '{name}' failed on q of shape ({n},): {type(e).__name__}: {e}"
            ) from e
        if getattr(out, "shape", None) != ():
            raise ValueError(f"{where}: argument 'lagrangian' must return a scalar")
        if self.force_fn is not None:
            t = jax.ShapeDtypeStruct((), dtype)
            try:
                out = jax.eval_shape(lambda t, q, v: self.force_fn(t, q, v, None), t, q, q)
            except Exception as e:
                raise ValueError(
                    f"{where}: argument 'force' must be F(t, q, qdot, u) -> ({n},) "
                    f"(u may be None): {type(e).__name__}: {e}"
                ) from e
            if tuple(out.shape) != (n,):
                raise ValueError(f"{where}: argument 'force' must return shape ({n},)")

    # --- the model ---------------------------------------------------------------------------
    def mass_matrix(self, q, v=None) -> jax.Array:
        """``∂²L/∂q̇²`` ``(n, n)`` (the metric itself for ``metric`` systems)."""
        if self.metric_fn is not None:
            M = self.metric_fn(q) if callable(self.metric_fn) else self.metric_fn
            return jnp.asarray(M, q.dtype)
        v = jnp.zeros_like(q) if v is None else v
        return jax.jacfwd(jax.grad(self.lagrangian_fn, argnums=1), argnums=1)(q, v)

    def potential(self, q) -> jax.Array:
        """``V(q) = −L(q, 0)``."""
        if self.metric_fn is not None:
            return jnp.zeros((), q.dtype) if self.potential_fn is None else self.potential_fn(q)
        return -self.lagrangian_fn(q, jnp.zeros_like(q))

    def lagrangian(self, q, v) -> jax.Array:
        """``L(q, q̇)``."""
        if self.metric_fn is not None:
            return 0.5 * v @ (self.mass_matrix(q) @ v) - self.potential(q)
        return self.lagrangian_fn(q, v)

    def force(self, t, q, v, u=None):
        """Generalized force ``(n,)`` or ``None`` (no force at all)."""
        if self.force_fn is not None:
            return self.force_fn(t, q, v, u)
        return None if u is None else jnp.asarray(u, q.dtype)

    def momentum(self, q, v) -> jax.Array:
        """Legendre transform ``p = ∂L/∂q̇`` ``(n,)``."""
        if self.metric_fn is not None:
            return self.mass_matrix(q) @ v
        return jax.grad(self.lagrangian_fn, argnums=1)(q, v)

    def velocity(self, q, p) -> jax.Array:
        """Inverse Legendre transform ``q̇(q, p)``: ``M(q)⁻¹ p`` for metric systems, else two
        Newton steps from ``q̇ = 0`` (exact after the first for Lagrangians quadratic in ``q̇``;
        the second absorbs round-off)."""
        if self.metric_fn is not None:
            return _solve(self.mass_matrix(q), p)
        v = jnp.zeros_like(q)
        for _ in range(2):
            v = v - _solve(self.mass_matrix(q, v), self.momentum(q, v) - p)
        return v

    def energy_qv(self, q, v) -> jax.Array:
        """``E = ⟨∂L/∂q̇, q̇⟩ − L``."""
        return self.momentum(q, v) @ v - self.lagrangian(q, v)

    def energy(self, state) -> jax.Array:
        return self.energy_qv(state.q, self.velocity(state.q, state.p))

    def acceleration(self, t, q, v, u=None) -> jax.Array:
        """``q̈`` of the forced Euler–Lagrange equations (unconstrained):
        ``M q̈ = ∂L/∂q − (∂²L/∂q̇∂q) q̇ + F``."""
        M, f = self._free_rhs(t, q, v, u)
        return _solve(M, f)

    def _free_rhs(self, t, q, v, u=None):
        p = lambda x: self.momentum(x, v)  # noqa: E731
        _, mixed = jax.jvp(p, (q,), (v,))
        f = jax.grad(self.lagrangian, argnums=0)(q, v) - mixed
        F = self.force(t, q, v, u)
        if F is not None:
            f = f + F
        return self.mass_matrix(q, v), f

    def constrained_acceleration(self, t, q, v, constraint, u=None):
        """``(q̈, λ)`` with holonomic constraints ``g(q) = 0`` (index-1 form, used for references
        and for the multipliers carried in the state):

            [[M, −Gᵀ], [G, 0]] [q̈, λ] = [f, −∂²g(q̇, q̇)],   G = ∂g/∂q.

        ``G(q)ᵀ λ`` is the constraint (reaction) force."""
        M, f = self._free_rhs(t, q, v, u)
        G = jax.jacfwd(constraint)(q)
        hess = jax.jvp(lambda x: jax.jvp(constraint, (x,), (v,))[1], (q,), (v,))[1]
        n, m = M.shape[0], G.shape[0]
        K = jnp.block([[M, -G.T], [G, jnp.zeros((m, m), M.dtype)]])
        z = _solve(K, jnp.concatenate([f, -hess]))
        return z[:n], z[n:]

    # --- states ------------------------------------------------------------------------------
    def make_state(self, q, qdot=None, p=None) -> VariationalState:
        """A state from ``q`` and either the velocity ``qdot`` or the momentum ``p`` (no
        constraints: ``lam`` has shape ``(0,)``; constrained methods have their own
        ``make_state``)."""
        where = f"{type(self).__name__}.make_state"
        q = jnp.asarray(q)
        if not jnp.issubdtype(q.dtype, jnp.inexact):
            q = q.astype(jnp.result_type(float))
        if q.ndim != 1:
            raise ValueError(f"{where}: argument 'q' must have shape (n,), got {q.shape}")
        if (qdot is None) == (p is None):
            raise ValueError(f"{where}: give exactly one of argument 'qdot' or argument 'p'")
        if isinstance(self.metric_fn, jax.Array) and q.shape != self.metric_fn.shape[:1]:
            raise ValueError(
                f"{where}: argument 'q' must have shape {self.metric_fn.shape[:1]} (the metric is "
                f"{self.metric_fn.shape[0]}×{self.metric_fn.shape[0]}), got {q.shape}"
            )
        if p is None:
            qdot = jnp.asarray(qdot, q.dtype)
            if qdot.shape != q.shape:
                raise ValueError(
                    f"{where}: argument 'qdot' must have the shape of argument 'q', {q.shape}, "
                    f"got {qdot.shape}"
                )
            try:
                p = _momentum(self, q, qdot)
            except (TypeError, ValueError, IndexError) as e:  # q of a length the model rejects
                raise ValueError(
                    f"{where}: the system's functions fail on argument 'q' of shape {q.shape} "
                    f"(is it the right length?): {type(e).__name__}: {e}"
                ) from e
        p = jnp.asarray(p, q.dtype)
        if p.shape != q.shape:
            raise ValueError(f"{where}: argument 'p' must have shape {q.shape}")
        return VariationalState(q, p, jax.device_put(np.zeros((0,), q.dtype)))

    def check_state(self, state, name: str = "state0"):
        """Validate the type, shapes and finiteness of a state (``ValueError`` naming the field)."""
        where = type(self).__name__
        if not isinstance(state, VariationalState):
            raise ValueError(
                f"{where}: argument '{name}' must be a VariationalState (use make_state), "
                f"got {type(state).__name__}"
            )
        q, p = jnp.asarray(state.q), jnp.asarray(state.p)
        if q.ndim != 1 or p.shape != q.shape or jnp.ndim(state.lam) != 1:
            raise ValueError(
                f"{where}: argument '{name}' must be a single state with q, p of shape (n,) and "
                f"lam (m,) (batch with jax.vmap), got q{q.shape}, p{p.shape}, "
                f"lam{jnp.shape(state.lam)}"
            )
        q = check_finite(q, f"{name}.q", where)
        p = check_finite(p, f"{name}.p", where)
        return VariationalState(q, p, state.lam)

    def diagnostics(self, state) -> dict[str, jax.Array]:
        """Energy, kinetic energy ``E − V``, momentum and multipliers of one state."""
        v = self.velocity(state.q, state.p)
        E = self.energy_qv(state.q, v)
        return {
            "energy": E,
            "kinetic_energy": E - self.potential(state.q),
            "momentum": state.p,
            "multipliers": state.lam,
        }

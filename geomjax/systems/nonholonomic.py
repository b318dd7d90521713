"""Nonholonomic systems on ``Q = G × R^n`` given by a Lagrangian and velocity constraints.

Configuration ``q = (g, x)``: a group element ``g`` of a :class:`geomjax.LieGroup` G (dimension
``d``) and shape (internal) coordinates ``x`` in R^n (``n`` may be 0).  Velocities are
left-trivialized on the group: ``v = (xi, xdot)`` with ``xi = g^{-1} dg/dt`` (``d + n`` numbers).
The model is two ordinary JAX functions:

* the Lagrangian ``L(g, x, v)`` (kinetic minus potential energy);
* the constraints ``C(g, x, v, t) = A(q) v − b(q, t)`` (``m`` numbers, *affine in v*): linear
  constraints ``A(q) v = 0`` or affine ones ``A(q) v = b(q, t)``.

Everything else comes from autodiff: ``A = ∂C/∂v``, the momentum ``p = ∂L/∂v``, the mass matrix
``∂²L/∂v²``, the left-trivialized configuration force ``D_q L`` (``<D_g L, eta> = d/dε
L(g exp(ε eta), x, v)``) and the projection onto the constraint distribution.

Equations of motion: the Lagrange–d'Alembert principle (Romano et al., §6: for linear,
possibly nonholonomic constraints with virtual velocities in ``Δ``, the law of motion is
``∇_v v − g^♯ F ∈ Δ^⊥`` — the reaction is a multiplier force in the *momentum* equation; not the
vakonomic principle; 003 writes ``L = K + P`` with the load potential ``P = −V``), reduced on the
group by left trivialization (Euler–Poincaré–Suslov / Lagrange–d'Alembert–Poincaré):

    d/dt ∂L/∂xi   = coad(xi, ∂L/∂xi) + D_g L + A_g^T lam + u_g
    d/dt ∂L/∂xdot = ∂L/∂x + A_x^T lam + u_x
    A(q) v = b(q, t)

(``coad(xi, mu) = ad(xi)^T mu``, so on SO(3) the free part is ``Pi' = Pi × Omega``; papers that
write ``ad*_xi = −(ad_xi)^T`` — Chevallier; Cabrera — carry the opposite sign there).  ``A = [A_g, A_x]``
splits into the columns acting on ``xi`` and on ``xdot``; ``A^T lam`` is the constraint force and
``lam`` (``m`` numbers) the multipliers.  Differentiating the constraint gives the saddle-point
system solved by :meth:`AbstractNonholonomicSystem.acceleration`:

    [[M, −A^T], [A, 0]] [v', lam] = [f − (∂p/∂q) q', −(∂C/∂q) q' − ∂C/∂t],   M = ∂²L/∂v².

The nonholonomic momentum equation (Bloch, Krishnaprasad, Marsden & Murray 1996, ARMA 136):
for a G-invariant Lagrangian, G acting on the left on the group factor, and a section
``zeta(q)`` of ``g^q = {zeta : (Ad_{g^{-1}} zeta, 0) satisfies the linear part of the
constraints}``, the momentum ``J = <Ad_{g^{-1}}^T ∂L/∂xi, zeta(q)>`` obeys

    dJ/dt = <Ad_{g^{-1}}^T ∂L/∂xi, d/dt zeta(q(t))>

(constraint forces do no work along ``zeta_Q``); with ``zeta`` constant (a horizontal symmetry) J
is conserved.  :meth:`AbstractNonholonomicSystem.nonholonomic_momentum`,
:meth:`~AbstractNonholonomicSystem.momentum_equation_rate` and :func:`momentum_equation` evaluate
it along solutions.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.dependence import method_depends_on
from .._internal.eager import quick_compiled
from .._internal.scalarize import scalarize
from .._internal.tracing import is_traced
from .._linalg import (
    degeneracy_tol,
    describe_degeneracy,
    forward_jacobian,
    pivot_ratio,
    saddle_solve_schur,
    small_solve_columns,
)
from ..lie.base import LieGroup, check_shape
from .base import AbstractSystem, check_finite

__all__ = [
    "AbstractNonholonomicSystem",
    "NonholonomicState",
    "NonholonomicSystem",
    "momentum_equation",
]


def saddle_solve(M, A, f, c):
    """Solve ``[[M, −A^T], [A, 0]] [y, lam] = [f, c]`` (``M`` SPD ``(k, k)``, ``A`` ``(m, k)`` of full
    rank).  Returns ``(y, lam)``.

    Small systems (k + m ≤ 8) use unrolled elimination without pivoting (velocity unknowns first:
    the pivots are those of ``M`` and then of the SPD Schur complement ``A M^{-1} A^T``), which is
    much cheaper than LAPACK calls for the tiny matrices of mechanics and vectorizes under vmap."""
    return saddle_solve_schur(M, A, A, f, c)


@quick_compiled
def _consistent_state(system, g, x, v, t, project):
    # one program per system structure (eager autodiff of the saddle system is slow); a one-shot
    # program, so the eager tier's (geomjax._internal.eager): evaluated on the host for its first calls,
    # then compiled without XLA's backend optimizations (BallOnTurntable.state: 2.1 s → ~0.3 s)
    if project:
        v = system.project_velocity(g, x, v, t)
    # the two SPD pivots blocks of the saddle system: M and the Schur complement A M⁻¹ Aᵀ
    M, S = scalarize(_saddle_blocks)(system, g, x, v, t)
    # their pivot ratios here too (make_state's degeneracy check): eagerly they would be a
    # compile per small operation on a process's first call
    rho = tuple(pivot_ratio(B)[0] if B.shape[-1] else jnp.inf for B in (M, S))
    # scalarized (one small fused program instead of ~100 array kernels to compile); the same
    # cached scalar program as NonholonomicVI's acceleration at the nodes
    lam = scalarize(node_acceleration)(system, t, g, x, v, None)[1]
    return v, lam, (M, S), rho


def _saddle_blocks(system, g, x, v, t):
    """``M`` and ``A M⁻¹ Aᵀ`` (the SPD pivot blocks of the saddle system) at ``(q, v, t)``."""
    M = system.mass_matrix(g, x, v)
    A = system.constraint_matrix(g, x, t)
    return M, A @ small_solve_columns(M, A.T)


def node_acceleration(system, t, g, x, v, control=None):
    """``system.acceleration(t, g, x, v, control)`` as a module-level function of its arguments
    alone: :func:`geomjax._internal.scalarize.scalarize` caches its scalar program per system structure,
    shared by :meth:`AbstractNonholonomicSystem.make_state` and every
    :class:`~geomjax.NonholonomicVI` step."""
    return system.acceleration(t, g, x, v, control)


@quick_compiled
def _constraint_defect(system, g, x, v, t):
    # one program (cached per system structure): eagerly, the autodiff of the constraint matrix
    # would dispatch dozens of small ops on every simulate call; the eager tier's
    # (geomjax._internal.eager: host-evaluated first, then compiled without backend optimizations)
    c = system.constraint(g, x, v, t)
    scale = jnp.max(jnp.abs(system.constraint_matrix(g, x, t)), initial=0.0) * jnp.max(jnp.abs(v))
    scale = scale + jnp.max(jnp.abs(system.constraint_rhs(g, x, t)), initial=0.0) + 1.0
    return jnp.max(jnp.abs(c), initial=0.0), scale


class NonholonomicState(eqx.Module):
    """State of a nonholonomic system on ``G × R^n``.

    Attributes:
        g: group element, ``group.element_shape`` (e.g. ``(3, 3)`` on SE(2)).
        x: shape coordinates ``(n,)`` (``(0,)`` for a system on the group alone).
        v: velocity ``(d + n,)`` = (body velocity ``xi = g^{-1} dg/dt``, ``dx/dt``); it satisfies
            the constraints ``A(q) v = b(q, t)``.
        lam: multipliers ``(m,)``: the constraint force at this instant is ``A(q)^T lam`` (a
            generalized force dual to ``v``; e.g. the horizontal contact force of a rolling ball,
            the lateral blade force of a sleigh).  It is the continuous Lagrange–d'Alembert
            multiplier at ``(q, v, t)``: :meth:`AbstractNonholonomicSystem.make_state` and
            :class:`~geomjax.NonholonomicVI` compute it (the integrator uses it only to seed its
            Newton solve, so a state with a rough ``lam`` still integrates correctly).
    """

    g: jax.Array
    x: jax.Array
    v: jax.Array
    lam: jax.Array


class AbstractNonholonomicSystem(AbstractSystem):
    """A mechanical system on ``G × R^n`` with linear or affine velocity constraints.

    Subclasses provide :attr:`group`, :attr:`shape_dim`, :attr:`n_constraints`,
    :meth:`lagrangian` and :meth:`constraint`; everything else is derived by autodiff (module
    docstring).  Shapes: ``g`` ``group.element_shape``, ``x`` ``(n,)``, ``v`` ``(d + n,)``,
    constraint values and ``lam`` ``(m,)``.  One state at a time: batch with ``jax.vmap``.
    """

    state_type: ClassVar[type] = NonholonomicState

    @property
    @abc.abstractmethod
    def group(self) -> LieGroup: ...

    @property
    def shape_dim(self) -> int:
        """``n``, the number of shape coordinates (static)."""
        return 0

    @property
    @abc.abstractmethod
    def n_constraints(self) -> int:
        """``m``, the number of velocity constraints (static)."""

    @abc.abstractmethod
    def lagrangian(self, g, x, v) -> jax.Array:
        """``L(g, x, v)``, a scalar."""

    @abc.abstractmethod
    def constraint(self, g, x, v, t) -> jax.Array:
        """``C(g, x, v, t) = A(q) v − b(q, t)``, shape ``(m,)``; must be affine in ``v``."""

    @property
    def n_velocities(self) -> int:
        return self.group.dim + self.shape_dim

    # --- derived quantities (autodiff) --------------------------------------------------------
    def _shift(self, g, x, e, dx):
        """``(g tau(e), x + dx)``: the left-trivialized chart around ``q`` used for derivatives.

        Only first derivatives in ``e`` at ``e = 0`` are ever taken, and every retraction ``tau``
        with ``tau(0) = e``, ``tau'(0) = id`` gives the same ones; the Cayley map (rational, on the
        group) is used when the group has one — it traces and compiles much lighter than the
        exponential's Taylor branches on SO(3)."""
        G = self.group
        tau = G.exp if type(G).cay is LieGroup.cay else G.cay
        return G.compose(g, tau(e)), x + dx

    def _zeros_q(self, v):
        d = self.group.dim
        return jnp.zeros((d,), v.dtype), jnp.zeros((self.shape_dim,), v.dtype)

    # --- structure, read from the jaxprs (geomjax._internal.dependence) --------------------------------
    def lagrangian_dependence(self, g, x, v) -> tuple[bool, bool]:
        """``(depends on g, depends on x)`` for the Lagrangian, decided structurally at trace time
        (``False`` is exact).  A G-invariant Lagrangian (sleigh, rolling ball) skips every
        configuration derivative: they are exact zeros."""
        return method_depends_on(self, "lagrangian", g, x, v)[:2]

    def constraint_dependence(self, g, x, v, t) -> bool:
        """Whether the constraint depends on the configuration or on time (``False``: a constraint
        ``C(v)`` on the velocities alone, e.g. the sleigh's blade, identical at both nodes)."""
        dg, dx, _, dt = method_depends_on(self, "constraint", g, x, v, t)
        return dg or dx or dt

    def momentum(self, g, x, v) -> jax.Array:
        """``p = ∂L/∂v`` ``(d + n,)``: body momentum ``∂L/∂xi`` then shape momenta."""
        return jax.grad(self.lagrangian, argnums=2)(g, x, v)

    def mass_matrix(self, g, x, v) -> jax.Array:
        """``M = ∂²L/∂v²`` ``(d + n, d + n)`` (SPD for a mechanical Lagrangian)."""
        return forward_jacobian(lambda v: self.momentum(g, x, v), v)

    def configuration_force(self, g, x, v) -> jax.Array:
        """``(D_g L, ∂L/∂x)`` ``(d + n,)``: left-trivialized derivative of L in the configuration."""
        e, dx = self._zeros_q(v)
        if not any(self.lagrangian_dependence(g, x, v)):
            return jnp.zeros((self.n_velocities,), v.dtype)
        dg, ddx = jax.grad(lambda e, dx: self.lagrangian(*self._shift(g, x, e, dx), v), (0, 1))(
            e, dx
        )
        return jnp.concatenate([dg, ddx])

    def constraint_matrix(self, g, x, t=0.0) -> jax.Array:
        """``A(q) = ∂C/∂v`` ``(m, d + n)``."""
        v0 = jnp.zeros((self.n_velocities,), jnp.result_type(x, g))
        return forward_jacobian(lambda v: self.constraint(g, x, v, t), v0)

    def constraint_rhs(self, g, x, t=0.0) -> jax.Array:
        """``b(q, t) = −C(q, 0, t)`` ``(m,)`` (zero for linear constraints)."""
        v0 = jnp.zeros((self.n_velocities,), jnp.result_type(x, g))
        return -self.constraint(g, x, v0, t)

    def configuration_velocity_derivative(self, fun, g, x, v, t):
        """``d/ds fun(g exp(s xi), x + s xdot, t + s)`` at ``s = 0``: the total derivative of
        ``fun(g, x, t)`` along the motion with velocity ``v`` (the velocity itself held fixed)."""
        d = self.group.dim
        xi, xd = v[:d], v[d:]
        t = jnp.asarray(t, v.dtype)

        def along(s):
            gs, xs = self._shift(g, x, s * xi, s * xd)
            return fun(gs, xs, t + s)

        return jax.jvp(along, (jnp.zeros((), v.dtype),), (jnp.ones((), v.dtype),))[1]

    # --- equations of motion -----------------------------------------------------------------
    def acceleration(self, t, g, x, v, u=None):
        """``(dv/dt, lam)`` of the continuous Lagrange–d'Alembert equations (module docstring).

        ``u``: optional generalized force ``(d + n,)`` (body force on the group part)."""
        G = self.group
        d = G.dim
        p = self.momentum(g, x, v)
        M = self.mass_matrix(g, x, v)
        f = self.configuration_force(g, x, v)
        if any(method_depends_on(self, "momentum", g, x, v)[:2]):
            f = f - self.configuration_velocity_derivative(
                lambda g_, x_, t_: self.momentum(g_, x_, v), g, x, v, t
            )
        # (a concatenation, not .at[:d].add: no scatter in the scalarized step)
        f = f + jnp.concatenate([G.coad(v[:d], p[:d]), jnp.zeros_like(f[d:])])
        if u is not None:
            f = f + u
        A = self.constraint_matrix(g, x, t)
        if self.constraint_dependence(g, x, v, t):
            dc = self.configuration_velocity_derivative(
                lambda g_, x_, t_: self.constraint(g_, x_, v, t_), g, x, v, t
            )
        else:  # C(v) alone: no configuration or time derivative
            dc = jnp.zeros((self.n_constraints,), v.dtype)
        return saddle_solve(M, A, f, -dc)

    def multipliers(self, t, g, x, v, u=None) -> jax.Array:
        """The continuous multipliers ``lam`` ``(m,)`` at ``(q, v, t)``."""
        return self.acceleration(t, g, x, v, u)[1]

    def vector_field(self, t, state, u=None):
        """``(v, dv/dt)``: configuration velocity (left-trivialized on G) and acceleration."""
        vdot, _ = self.acceleration(t, state.g, state.x, state.v, u)
        return state.v, vdot

    def project_velocity(self, g, x, v, t=0.0) -> jax.Array:
        """Kinetic-metric orthogonal projection of ``v`` onto ``{v : A(q) v = b(q, t)}``:
        ``v − M^{-1} A^T (A M^{-1} A^T)^{-1} (A v − b)`` (exact for quadratic kinetic energies)."""
        M = self.mass_matrix(g, x, v)
        A = self.constraint_matrix(g, x, t)
        dv, _ = saddle_solve(M, A, jnp.zeros_like(v), -self.constraint(g, x, v, t))
        return v + dv

    # --- states ---------------------------------------------------------------------------------
    def make_state(self, g, x=None, v=None, t=0.0, project: bool = False) -> NonholonomicState:
        """A consistent state: ``lam`` from the continuous equations at ``(q, v, t)``.

        Arguments:
            g: group element; x: shape coordinates ``(n,)`` (None when n = 0); v: ``(d + n,)``.
            project: first project ``v`` onto the constraint set (:meth:`project_velocity`);
                otherwise ``v`` must already satisfy the constraints (checked by
                :func:`geomjax.simulate`).
        """
        G = self.group
        where = type(self).__name__
        g = check_shape(g, G.element_shape, "g", where)
        if x is None:
            x = jnp.zeros((self.shape_dim,), g.dtype)
        x = check_shape(x, (self.shape_dim,), "x", where)
        if v is None:
            raise ValueError(f"{where}.make_state: argument 'v' (velocity) is required")
        v = check_shape(v, (self.n_velocities,), "v", where)
        dtype = jnp.result_type(g, x, v)
        g, x, v = g.astype(dtype), x.astype(dtype), v.astype(dtype)
        v, lam, (M, S), rho = _consistent_state(self, g, x, v, jnp.asarray(t, dtype), bool(project))
        if not is_traced(lam):
            self._check_saddle(M, S, where, rho)
        return NonholonomicState(g, x, v, lam)

    @staticmethod
    def _check_saddle(M, S, where, rho=(None, None)):
        """Eager degeneracy check of the saddle system at a state (``ValueError`` naming ``g``/``x``):
        the mass matrix ``M`` and the Schur complement ``A M⁻¹ Aᵀ`` must pass the pivot-ratio
        criterion of :func:`geomjax._linalg.pivot_ratio` (``ρ > 100·n·eps``); ``rho``: their
        ratios if already computed."""
        for G, what, r in ((M, "the mass matrix ∂²L/∂v²", rho[0]), (S, "A M⁻¹ Aᵀ", rho[1])):
            if G.shape[-1] == 0:
                continue
            r = float(pivot_ratio(G)[0] if r is None else r)
            if not r > degeneracy_tol(G.shape[-1], G.dtype):
                raise ValueError(
                    f"{where}.make_state: {what} is degenerate at the configuration given by "
                    f"arguments 'g', 'x' (dependent constraints or a degenerate Lagrangian); "
                    f"{describe_degeneracy(G)}"
                )

    def constraint_violation(self, state, t=0.0) -> jax.Array:
        """``A(q) v − b(q, t)`` ``(m,)`` of a state."""
        return self.constraint(state.g, state.x, state.v, t)

    def check_state(self, state, name: str = "state0", t=0.0, tol: float | None = None):
        """Validate shapes, finiteness, group membership and the constraints of a state.

        Eagerly: ``ValueError`` naming the offending field.  Under ``jit``: ``equinox.error_if``."""
        where = type(self).__name__
        if not isinstance(state, NonholonomicState):
            raise ValueError(
                f"{where}: argument '{name}' must be a NonholonomicState (use system.make_state), "
                f"got {type(state).__name__}"
            )
        G = self.group
        g = G.check(state.g, name=f"{name}.g")
        x = check_shape(state.x, (self.shape_dim,), f"{name}.x", where)
        v = check_shape(state.v, (self.n_velocities,), f"{name}.v", where)
        lam = check_shape(state.lam, (self.n_constraints,), f"{name}.lam", where)
        if g.ndim != len(G.element_shape) or x.ndim != 1 or v.ndim != 1 or lam.ndim != 1:
            raise ValueError(
                f"{where}: '{name}' must be a single state (batch with jax.vmap), got "
                f"g{tuple(g.shape)}, x{tuple(x.shape)}, v{tuple(v.shape)}, lam{tuple(lam.shape)}"
            )
        x = check_finite(x, f"{name}.x", where)
        v = check_finite(v, f"{name}.v", where)
        lam = check_finite(lam, f"{name}.lam", where)
        cmax, scale = _constraint_defect(self, g, x, v, jnp.asarray(t, v.dtype))
        tol = float(jnp.finfo(v.dtype).eps) ** 0.5 if tol is None else tol
        if not is_traced(cmax):  # eagerly on Python floats: no compile of the comparison
            cmax, scale = float(cmax), float(scale)
        bad = cmax > tol * scale
        msg = (
            f"{where}: argument '{name}.v' violates the constraints A(q) v = b(q, t) "
            f"(build the state with system.make_state(..., project=True))"
        )
        if is_traced(bad):
            v = eqx.error_if(v, bad, msg)
        elif bool(bad):
            raise ValueError(f"{msg}; |A v − b| = {float(cmax):.3g}")
        return NonholonomicState(g, x, v, lam)

    # --- invariants and diagnostics ---------------------------------------------------------------
    def kinetic_energy(self, state) -> jax.Array:
        """Kinetic part of ``L``: ``L(q, v) − L(q, 0)`` (mechanical Lagrangians ``T − V``)."""
        return self.lagrangian(state.g, state.x, state.v) - self.lagrangian(
            state.g, state.x, jnp.zeros_like(state.v)
        )

    def energy(self, state) -> jax.Array:
        """``E = <∂L/∂v, v> − L``: conserved for time-independent linear constraints (constraint
        forces do no work); affine / moving constraints exchange energy with the support."""
        p = self.momentum(state.g, state.x, state.v)
        return jnp.dot(p, state.v) - self.lagrangian(state.g, state.x, state.v)

    def spatial_momentum(self, state) -> jax.Array:
        """``Ad_{g^{-1}}^T ∂L/∂xi`` ``(d,)``: momentum map of the left action of G on the group
        factor (not conserved in general: the constraint forces exert a torque/force)."""
        G = self.group
        p = self.momentum(state.g, state.x, state.v)[: G.dim]
        return jnp.swapaxes(G.Ad(G.inverse(state.g)), -1, -2) @ p

    def _zeta(self, zeta, g, x):
        return zeta(g, x) if callable(zeta) else jnp.asarray(zeta, jnp.result_type(g))

    def nonholonomic_momentum(self, state, zeta) -> jax.Array:
        """``J = <Ad_{g^{-1}}^T ∂L/∂xi, zeta(q)>`` (BKMM 1996).

        ``zeta``: a constant Lie algebra element ``(d,)`` (spatial, i.e. the generator of
        ``g -> exp(s zeta) g``) or a function ``zeta(g, x) -> (d,)`` — a section of ``g^q``."""
        return jnp.dot(self.spatial_momentum(state), self._zeta(zeta, state.g, state.x))

    def momentum_equation_rate(self, state, zeta, t=0.0) -> jax.Array:
        """Right-hand side of the nonholonomic momentum equation,
        ``<Ad_{g^{-1}}^T ∂L/∂xi, d/dt zeta(q(t))>`` (zero for constant ``zeta``)."""
        if not callable(zeta):
            return jnp.zeros((), state.v.dtype)
        dz = self.configuration_velocity_derivative(
            lambda g_, x_, t_: self._zeta(zeta, g_, x_), state.g, state.x, state.v, t
        )
        return jnp.dot(self.spatial_momentum(state), dz)

    def momentum_time_derivative(self, state, zeta, t=0.0) -> jax.Array:
        """``dJ/dt`` along the *continuous* flow (chain rule through :meth:`acceleration`); equals
        :meth:`momentum_equation_rate` exactly when ``zeta(q)`` lies in ``g^q`` — a check of the
        momentum equation independent of any integrator."""
        vdot, _ = self.acceleration(t, state.g, state.x, state.v)

        def J(s):
            gs, xs = self._shift(
                state.g, state.x, s * state.v[: self.group.dim], s * state.v[self.group.dim :]
            )
            return self.nonholonomic_momentum(
                NonholonomicState(gs, xs, state.v + s * vdot, state.lam), zeta
            )

        z = jnp.zeros((), state.v.dtype)
        return jax.jvp(J, (z,), (jnp.ones_like(z),))[1]

    #: ``check_state`` and ``diagnostics`` take the time (time-dependent affine constraints):
    #: :func:`geomjax.simulate` and :func:`geomjax.diagnostics` pass it.
    time_aware: ClassVar[bool] = True

    def invariants(self, state, t=0.0) -> dict[str, jax.Array]:
        """System-specific first integrals and quantities with closed forms, by name (empty by
        default); included in :meth:`diagnostics`."""
        return {}

    def diagnostics(self, state, t=0.0) -> dict[str, jax.Array]:
        """Energy, constraint violation ``max |A v − b|``, multipliers and the system's invariants
        of one state (``jax.vmap`` over a trajectory, or :func:`geomjax.diagnostics`)."""
        out = {
            "energy": self.energy(state),
            "constraint_violation": jnp.max(
                jnp.abs(self.constraint_violation(state, t)), initial=0.0
            ),
            "multipliers": state.lam,
            "spatial_momentum": self.spatial_momentum(state),
            "group_defect": self.group.defect(state.g),
        }
        out.update(self.invariants(state, t))
        return out


@eqx.filter_jit
def momentum_equation(system: AbstractNonholonomicSystem, solution, zeta) -> dict:
    """The nonholonomic momentum equation along a saved trajectory.

    Returns a dict of ``(T,)`` arrays: ``"J"`` the momentum ``J(t_k)``, ``"rate"`` the right-hand
    side ``<m, d zeta/dt>`` and ``"predicted"`` ``J(t_0) + ∫ rate dt`` (trapezoidal rule on the
    saved times).  ``J − predicted`` is ``O(dt_save²)`` along an accurate solution, and exactly 0
    for a constant ``zeta`` spanning a horizontal symmetry (then ``rate ≡ 0``).  Jitted (``zeta``
    is static: pass the same function object to reuse the compilation)."""
    states, ts = solution.states, solution.times
    J = jax.vmap(lambda s: system.nonholonomic_momentum(s, zeta))(states)
    rate = jax.vmap(lambda s, t: system.momentum_equation_rate(s, zeta, t))(states, ts)
    incr = 0.5 * (rate[1:] + rate[:-1]) * jnp.diff(ts)
    predicted = J[0] + jnp.concatenate([jnp.zeros((1,), J.dtype), jnp.cumsum(incr)])
    return {"J": J, "rate": rate, "predicted": predicted}


class NonholonomicSystem(AbstractNonholonomicSystem):
    """A nonholonomic system from two JAX functions.

    Arguments:
        group: the Lie group factor G (``geomjax.Rn(k)`` for plain coordinates).
        lagrangian: ``L(g, x, v) -> scalar`` with ``g`` ``group.element_shape``, ``x`` ``(n,)``,
            ``v`` ``(d + n,)`` (body velocity first).  A callable ``eqx.Module`` may carry
            differentiable parameters.
        constraint: ``C(g, x, v, t) -> (m,)``, affine in ``v`` (``A(q) v − b(q, t)``).
        shape_dim: ``n`` (default 0: a system on the group alone, e.g. Euler–Poincaré–Suslov).

    Both functions are traced once at construction to check their shapes (``ValueError`` naming
    the argument otherwise).
    """

    _group: LieGroup
    lagrangian_fn: Callable
    constraint_fn: Callable
    _shape_dim: int = eqx.field(static=True)
    _n_constraints: int = eqx.field(static=True)

    def __init__(self, group: LieGroup, lagrangian: Callable, constraint: Callable, shape_dim=0):
        where = type(self).__name__
        if not isinstance(group, LieGroup):
            raise ValueError(f"{where}: argument 'group' must be a geomjax LieGroup, got {group!r}")
        if not (isinstance(shape_dim, int) and shape_dim >= 0):
            raise ValueError(
                f"{where}: argument 'shape_dim' must be a non-negative int, got {shape_dim!r}"
            )
        for name, fn in (("lagrangian", lagrangian), ("constraint", constraint)):
            if not callable(fn):
                raise ValueError(f"{where}: argument '{name}' must be callable, got {type(fn)}")
        self._group = group
        self._shape_dim = shape_dim
        self.lagrangian_fn = lagrangian
        self.constraint_fn = constraint
        dtype = jnp.result_type(float)
        g = jax.ShapeDtypeStruct(group.element_shape, dtype)
        x = jax.ShapeDtypeStruct((shape_dim,), dtype)
        v = jax.ShapeDtypeStruct((group.dim + shape_dim,), dtype)
        t = jax.ShapeDtypeStruct((), dtype)
        sig = f"g{group.element_shape}, x({shape_dim},), v({group.dim + shape_dim},)"
        try:
            out = jax.eval_shape(lagrangian, g, x, v)
        except Exception as e:
            raise ValueError(
                f"{where}: argument 'lagrangian' must be a function L(g, x, v) with {sig}; "
                f"calling it failed with {type(e).__name__}: {e}"
            ) from e
        if getattr(out, "shape", None) != ():
            raise ValueError(
                f"{where}: argument 'lagrangian' must return a scalar, got {getattr(out, 'shape', type(out))}"
            )
        try:
            out = jax.eval_shape(constraint, g, x, v, t)
        except Exception as e:
            raise ValueError(
                f"{where}: argument 'constraint' must be a function C(g, x, v, t) with {sig}; "
                f"calling it failed with {type(e).__name__}: {e}"
            ) from e
        if len(getattr(out, "shape", (None, None))) != 1:
            raise ValueError(
                f"{where}: argument 'constraint' must return a vector (m,), got {getattr(out, 'shape', type(out))}"
            )
        self._n_constraints = int(out.shape[0])

    @property
    def group(self) -> LieGroup:
        return self._group

    @property
    def shape_dim(self) -> int:
        return self._shape_dim

    @property
    def n_constraints(self) -> int:
        return self._n_constraints

    def lagrangian(self, g, x, v):
        return self.lagrangian_fn(g, x, v)

    def constraint(self, g, x, v, t):
        return self.constraint_fn(g, x, v, t)

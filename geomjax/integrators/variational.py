"""Variational integrators in coordinates: discrete Euler–Lagrange with forcing, RATTLE for
holonomic constraints, and impacts with a unilateral constraint.

Setting: :class:`geomjax.variational.LagrangianSystem` (``L(q, q̇)``, forces ``F(t, q, q̇, u)``)
with the state :class:`~geomjax.variational.VariationalState` ``(q, p, lam)``.  Romano–Barretta–Diaco, *On the general form of the law of dynamics*
(Romano–Barretta–Diaco) supplies the continuous law these schemes discretize: the Euler
differential condition (forced Euler–Lagrange equations, §5), linear constraints with multiplier
forces in the momentum equation (§6), and the jump condition at impacts (Thm 4.1).

**Discrete Lagrangian** of a step ``q_k → q_{k+1} = q_k + h v`` (``v`` is the unknown of the
implicit solve):

* ``rule="midpoint"``:     ``L_d = h L((q_k + q_{k+1})/2, v)``;
* ``rule="trapezoidal"``:  ``L_d = h/2 [L(q_k, v) + L(q_{k+1}, v)]`` (Störmer–Verlet when
  ``L = ½ q̇ᵀ M q̇ − V(q)`` with constant ``M``).

**Discrete Lagrange–d'Alembert principle** (Marsden & West 2001, Acta Numerica §3.2; forces as in
Romano–Barretta–Diaco §5, a non-potential force one-form): with the discrete forces
``F⁻ = F⁺ = h/2 F(t + h/2, q̄, v, u)`` (midpoint) or ``F⁻ = h/2 F(t, q_k, v, u)``,
``F⁺ = h/2 F(t + h, q_{k+1}, v, u)`` (trapezoidal), one step ``(q_k, p_k) → (q_{k+1}, p_{k+1})`` is

    p_k = −D_1 L_d(q_k, q_{k+1}) − F⁻      (implicit in v: ``newton_iters`` Newton steps)
    p_{k+1} = D_2 L_d(q_k, q_{k+1}) + F⁺   (explicit).

Both rules give symmetric, second-order, symplectic (for ``F = 0``) maps.  For a symmetry of
``L`` acting *linearly* on ``q`` (rotations, translations) ``L_d`` is invariant too, so the momentum
map is conserved exactly (discrete Noether theorem): e.g. the angular momentum of a central-force
problem to round-off.  The energy error stays bounded without drift (backward error analysis of
symplectic maps; observed, tested, not a bound).

**RATTLE** (constrained discrete Euler–Lagrange; Marsden & West §3.4, Leimkuhler & Reich 2004
§7.2) for holonomic constraints ``g(q) = 0`` (``m`` equations, ``G = ∂g/∂q`` of full rank ``m``),
constraint force ``G(q)ᵀ λ``:

    p_k + G(q_k)ᵀ Λ_a = −D_1 L_d(q_k, q_{k+1}) − F⁻,   g(q_{k+1}) = 0         (unknowns v, Λ_a)
    p_{k+1} = D_2 L_d(q_k, q_{k+1}) + F⁺ + G(q_{k+1})ᵀ Λ_b,
    G(q_{k+1}) q̇(q_{k+1}, p_{k+1}) = 0                                      (unknowns p_{k+1}, Λ_b)

with impulses ``Λ = h/2 λ``.  Both the position constraint and the hidden (velocity) constraint
hold at every node to the tolerance of the Newton solves (round-off), whatever ``h``.  The state
carries ``lam``, the continuous multiplier at the new node (index-1 saddle system of
:meth:`~geomjax.variational.LagrangianSystem.constrained_acceleration`, second-order accurate);
the scheme's own ``λ_a``, ``λ_b`` (first order, opposite errors) come from
:meth:`RATTLE.solve_step`.

**Impacts** with a unilateral constraint ``f(q) ≥ 0``: a trial step of the inner method; if it
ends behind the surface, the impact instant ``s ∈ (0, h)`` is the root of ``φ(s) = f(q(s))`` where
``q(s)`` is the inner method's step of size ``s`` (so the impact point is on the discrete
trajectory); found by ``root_iters`` safeguarded Newton iterations (``φ'`` by forward-mode through
the implicit step), then the jump, then the rest of the step.  The jump is Romano–Barretta–Diaco's condition
``p⁺ = p⁻ + Λ df(q)`` — the momentum components tangent to the interface (``⟨p, w⟩`` for
``df·w = 0``) are unchanged — closed by **Newton's restitution law** (the paper gives none):

    df(q)·q̇⁺ = −e df(q)·q̇⁻,   0 ≤ e ≤ 1.

For ``L = ½ q̇ᵀ M q̇ − V`` this gives ``Λ = −(1 + e) (df·q̇⁻) / (df M⁻¹ dfᵀ)`` and the kinetic
energy changes by ``−(1 − e²) K_n`` with ``K_n = ½ (df·q̇⁻)² / (df M⁻¹ dfᵀ)``, the kinetic energy
of the normal component of the velocity (``M``-orthogonal split): conserved for ``e = 1``.  With
holonomic constraints (inner RATTLE) the jump also keeps ``G(q) q̇⁺ = 0`` (impulse
``df ᵀΛ + Gᵀ Λ_g``).  The root location is differentiable by the implicit function theorem
(``ds/dθ = −∂φ/∂θ / φ'``) away from grazing contacts (``φ' → 0``).

**Accumulation and resting contact** (:class:`Impacts`): an impact whose outgoing flight
``2 v⁺/|a_n|`` would be shorter than one step (``a_n`` the normal acceleration of the motion
with the holonomic constraints and the contacts already resting) is plastic and turns the
contact into a constraint ``f_i(q) = 0`` of RATTLE's position and velocity steps with
multiplier ``λ_i ≥ 0``; it is released when its impulse would be negative.  Several contacts (``f`` with values ``(nc,)``) take the simultaneous Newton law.

**Higher order**: both DEL and RATTLE are symmetric (``symmetric = True``, with forces too), so
:class:`~geomjax.Composition` composes them (e.g. ``Composition(DiscreteEulerLagrange(),
"yoshida4")``, Yoshida's or Suzuki's coefficients, or the sixth-order schemes) into a
higher-order method with the same structure; :class:`Impacts` accepts such a composition.

Derivatives through every implicit solve use :func:`~geomjax.integrators.newton.newton_solve`
(implicit function theorem), so ``jax.grad`` of a loss of a :func:`geomjax.simulate` run with
respect to initial conditions, parameters of the system, ``dt`` or ``e`` never differentiates
Newton iterations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.tracing import is_traced
from ..variational.system import LagrangianSystem, VariationalState
from .base import AbstractMethod, StepStats
from .composition import Composition
from .newton import dense_jac_solve, newton_solve

__all__ = [
    "RATTLE",
    "DiscreteEulerLagrange",
    "Impacts",
    "discrete_legendre",
]


def _max_abs(a):
    return jnp.max(jnp.abs(a), initial=0.0)


def _check(x, bad, msg):
    """Eager ``ValueError`` or, under ``jit``, ``equinox.error_if`` on ``x``."""
    if is_traced(bad):
        return eqx.error_if(x, bad, msg)
    if bool(bad):
        raise ValueError(msg)
    return x


def _gradL(system, q, v):
    """``(∂L/∂q, ∂L/∂q̇)`` at ``(q, v)``."""
    return jax.grad(system.lagrangian, argnums=(0, 1))(q, v)


def discrete_legendre(system, rule, q0, v, h, t=0.0, u=None):
    """Forced discrete Legendre transforms of the step ``q_1 = q_0 + h v``:
    ``(p_plus, p_minus, q1)`` with ``p_plus = −D_1 L_d − F⁻`` (at ``q_0``) and
    ``p_minus = D_2 L_d + F⁺`` (at ``q_1``) — module docstring.  Shapes ``(n,)``."""
    q1 = q0 + h * v
    if rule == "midpoint":
        qm = 0.5 * (q0 + q1)
        dq, dv = _gradL(system, qm, v)
        F = system.force(t + 0.5 * h, qm, v, u)
        Fm = Fp = None if F is None else 0.5 * h * F
        p_plus = dv - 0.5 * h * dq
        p_minus = dv + 0.5 * h * dq
    else:
        dq0, dv0 = _gradL(system, q0, v)
        dq1, dv1 = _gradL(system, q1, v)
        S = 0.5 * (dv0 + dv1)
        p_plus = S - 0.5 * h * dq0
        p_minus = S + 0.5 * h * dq1
        F0 = system.force(t, q0, v, u)
        F1 = system.force(t + h, q1, v, u)
        Fm = None if F0 is None else 0.5 * h * F0
        Fp = None if F1 is None else 0.5 * h * F1
    if Fm is not None:
        p_plus = p_plus - Fm
        p_minus = p_minus + Fp
    return p_plus, p_minus, q1


def _solve(residual, x0, args, iters, scalar=True, exit=True):
    jac_solve = dense_jac_solve(residual)
    # scalar: scalar by scalar, a few fused kernels per iteration (geomjax._internal.scalarize)
    return newton_solve(
        residual, x0, args, iters=iters, jac_solve=jac_solve, scalarize=scalar, early_exit=exit
    )


class _DELResidual(eqx.Module):
    """``p_plus(v) − p_k`` (unknown ``v``)."""

    static: object = eqx.field(static=True)
    rule: str = eqx.field(static=True)

    def __call__(self, v, args):
        params, q0, p0, h, t, u = args
        system = eqx.combine(params, self.static)
        return discrete_legendre(system, self.rule, q0, v, h, t, u)[0] - p0


class _RattlePositionResidual(eqx.Module):
    """``[p_plus(v) − p_k − G(q_k)ᵀ Λ_a, g(q_k + h v)/h]`` for ``z = (v, Λ_a)`` (``g/h`` so that
    the Jacobian ``[[∂p_plus/∂v, −G_0ᵀ], [G_1, 0]]`` stays regular as ``h → 0``)."""

    static: object = eqx.field(static=True)
    rule: str = eqx.field(static=True)
    constraint: Callable = eqx.field(static=True)

    def __call__(self, z, args):
        params, q0, p0, G0, h, t, u = args
        system = eqx.combine(params, self.static)
        n = q0.shape[0]
        v, Lam = z[:n], z[n:]
        p_plus, _, q1 = discrete_legendre(system, self.rule, q0, v, h, t, u)
        return jnp.concatenate([p_plus - p0 - G0.T @ Lam, self.constraint(q1) / h])


class _SaddleResidual(eqx.Module):
    """``[∂L/∂q̇(q, v) − p − Cᵀ Λ, C v − c]`` for ``z = (v, Λ)``: the momentum update at a node
    (RATTLE's velocity step with ``C = G(q_{k+1})``, ``c = 0``; the impact jump with
    ``C = [df; G]``, ``c = [−e df·q̇⁻, 0]``).  Linear in ``z`` for Lagrangians quadratic in ``q̇``."""

    static: object = eqx.field(static=True)

    def __call__(self, z, args):
        params, q, p, C, c = args
        system = eqx.combine(params, self.static)
        n = q.shape[0]
        v, Lam = z[:n], z[n:]
        return jnp.concatenate([system.momentum(q, v) - p - C.T @ Lam, C @ v - c])


class _VariationalMethod(AbstractMethod):
    # Φ_{−h} ∘ Φ_h = id for DEL and RATTLE (midpoint and trapezoidal L_d, forces F⁻/F⁺ placed
    # symmetrically), so :class:`~geomjax.Composition` raises their order; Impacts overrides.
    symmetric: ClassVar[bool] = True
    symmetric_with_force: ClassVar[bool] = True
    #: evaluate the Newton residuals and Jacobian solves scalar by scalar
    #: (:func:`geomjax._internal.scalarize.scalarize`: the same numbers to round-off, a few fused kernels
    #: per iteration instead of one per small array operation; programs without a scalar form
    #: fall back to the array form)
    scalarize: bool = eqx.field(static=True, default=True, kw_only=True)
    #: stop the Newton iterations once converged, after at most the given number
    #: (:func:`~geomjax.integrators.newton.newton_solve`'s ``early_exit``: the same results to
    #: round-off, the same derivatives, fewer iterations per step)
    early_exit: bool = eqx.field(static=True, default=True, kw_only=True)

    def supports(self, system) -> bool:
        return isinstance(system, LagrangianSystem)


def _check_rule(where, rule):
    if rule not in ("midpoint", "trapezoidal"):
        raise ValueError(
            f"{where}: argument 'rule' must be 'midpoint' or 'trapezoidal', got {rule!r}"
        )


def _check_iters(where, **kw):
    for name, it in kw.items():
        if not (isinstance(it, int) and it >= 1):
            raise ValueError(f"{where}: argument '{name}' must be a positive int, got {it!r}")


class DiscreteEulerLagrange(_VariationalMethod):
    """Forced discrete Euler–Lagrange integrator (variational, symmetric, second order) for
    :class:`~geomjax.variational.LagrangianSystem` (module docstring for the scheme).

    Controls (``simulate(..., controls=...)``) reach the system's ``force(t, q, q̇, u)``
    (zero-order hold; by default ``u`` is the generalized force itself).

    Arguments:
        rule: ``"midpoint"`` (default) or ``"trapezoidal"`` discrete Lagrangian.
        newton_iters: Newton steps of the implicit solve for the step velocity (default 4, from
            the velocity of the current state; the relative residual goes to ``StepStats``).
    """

    rule: Literal["midpoint", "trapezoidal"] = eqx.field(static=True, default="midpoint")
    newton_iters: int = eqx.field(static=True, default=4)
    order: ClassVar[int] = 2

    def __check_init__(self):
        _check_rule("DiscreteEulerLagrange", self.rule)
        _check_iters("DiscreteEulerLagrange", newton_iters=self.newton_iters)

    def step(self, system, state, dt, control=None, t=0.0):
        q0, p0 = state.q, state.p
        dtype = q0.dtype
        h = jnp.asarray(dt, dtype)
        t = jnp.asarray(t, dtype)
        params, static = eqx.partition(system, eqx.is_array)
        v0 = system.velocity(q0, p0)
        v, r = _solve(
            _DELResidual(static, self.rule),
            v0,
            (params, q0, p0, h, t, control),
            self.newton_iters,
            self.scalarize,
            self.early_exit,
        )
        _, p1, q1 = discrete_legendre(system, self.rule, q0, v, h, t, control)
        tiny = jnp.finfo(dtype).tiny
        res = _max_abs(r) / (jnp.maximum(_max_abs(p0), _max_abs(p1)) + tiny)
        return VariationalState(q1, p1, state.lam), StepStats(residual=res)


def _constraint_checks(system, constraint, state, names, where, hint):
    """Rank of ``G``, position and hidden constraints of a state (eager ``ValueError`` naming the
    argument, or ``equinox.error_if`` under ``jit``).  ``names``: what to call ``(q, p, lam)``."""
    qn, pn, lamn = names
    q, p = state.q, state.p
    eps = float(jnp.finfo(q.dtype).eps)
    G = jax.jacfwd(constraint)(q)
    m = G.shape[0]
    if jnp.shape(state.lam) != (m,):
        raise ValueError(
            f"{where}: argument '{lamn}' must have shape ({m},) for {m} constraints, got "
            f"{jnp.shape(state.lam)} (build the state with {hint})"
        )
    s = jnp.linalg.svd(G, compute_uv=False)
    bad = (m > q.shape[0]) | ~(s[-1] > eps**0.5 * s[0])
    q = _check(
        q,
        bad,
        f"{where}: argument 'constraint' has a rank-deficient Jacobian ∂g/∂q at '{qn}' "
        f"(independent constraints with full-rank G = ∂g/∂q are required)",
    )
    tol = eps**0.5
    gq = constraint(q)
    scale = _max_abs(G) * jnp.maximum(_max_abs(q), 1.0)
    q = _check(
        q,
        _max_abs(gq) > tol * scale,
        f"{where}: argument '{qn}' is off the constraint g(q) = 0 (use {hint} with "
        f"project=True to put it on)",
    )
    v = system.velocity(q, p)
    p = _check(
        p,
        _max_abs(G @ v) > tol * (_max_abs(G) * _max_abs(v) + jnp.finfo(q.dtype).tiny),
        f"{where}: argument '{pn}' violates the hidden constraint G(q) q̇ = 0 (use {hint} with "
        f"project=True)",
    )
    return VariationalState(q, p, state.lam)


def _project(system, constraint, q, p, iters=8):
    """Mass-metric projection onto ``g(q) = 0`` (``iters`` Gauss–Newton steps
    ``q ← q − M⁻¹Gᵀ(G M⁻¹ Gᵀ)⁻¹ g(q)``), then of the momentum onto ``G q̇ = 0``."""
    for _ in range(iters):
        G = jax.jacfwd(constraint)(q)
        M = system.mass_matrix(q)
        MiGt = jnp.linalg.solve(M, G.T)
        q = q - MiGt @ jnp.linalg.solve(G @ MiGt, constraint(q))
    G = jax.jacfwd(constraint)(q)
    v = system.velocity(q, p)
    M = system.mass_matrix(q, v)
    Lam = -jnp.linalg.solve(G @ jnp.linalg.solve(M, G.T), G @ v)
    return q, p + G.T @ Lam


class RATTLE(_VariationalMethod):
    """RATTLE: the constrained discrete Euler–Lagrange integrator for holonomic constraints
    ``g(q) = 0`` (module docstring).  Symmetric, symplectic on the constraint manifold, second
    order; position *and* hidden velocity constraints hold to the Newton tolerance every step.

    Arguments:
        constraint: ``g(q) -> (m,)``, with a full-rank Jacobian ``G = ∂g/∂q`` (checked on the
            initial state: ``ValueError`` naming ``constraint``).  A static part of the method
            (a plain function, hashed by identity): parameters to differentiate belong in the
            system, not in the constraint.
        rule: discrete Lagrangian, ``"trapezoidal"`` (default: the classical RATTLE for
            separable Lagrangians) or ``"midpoint"``.
        newton_iters: Newton steps of the position step (default 4).
        projection_iters: Newton steps of the momentum step (default 1: exact for Lagrangians
            quadratic in ``q̇``).

    The state's ``lam`` ``(m,)`` is the continuous multiplier at the node (constraint force
    ``G(q)ᵀ lam``).  Build consistent states with :meth:`make_state`.
    """

    constraint: Callable = eqx.field(static=True)
    rule: Literal["midpoint", "trapezoidal"] = eqx.field(static=True, default="trapezoidal")
    newton_iters: int = eqx.field(static=True, default=4)
    projection_iters: int = eqx.field(static=True, default=1)
    order: ClassVar[int] = 2

    def __check_init__(self):
        if not callable(self.constraint):
            raise ValueError("RATTLE: argument 'constraint' must be callable g(q) -> (m,)")
        _check_rule("RATTLE", self.rule)
        _check_iters(
            "RATTLE", newton_iters=self.newton_iters, projection_iters=self.projection_iters
        )

    def multipliers(self, system, q, p, t=0.0, u=None):
        """Continuous multipliers ``λ`` ``(m,)`` at ``(q, p)``."""
        v = system.velocity(q, p)
        return system.constrained_acceleration(t, q, v, self.constraint, u)[1]

    def make_state(self, system, q, qdot=None, p=None, project: bool = False, t=0.0):
        """A state on the constraint: ``(q, p, λ)``.  With ``project=True`` ``q`` is first
        projected onto ``g(q) = 0`` and ``p`` onto ``G q̇ = 0`` (mass metric); otherwise both must
        already hold (``ValueError`` naming ``q``/``qdot``)."""
        st = system.make_state(q, qdot, p)
        q, p = st.q, st.p
        probe = VariationalState(q, p, jnp.zeros(jnp.shape(self.constraint(q)), q.dtype))
        if project:
            G = jax.jacfwd(self.constraint)(q)
            s = jnp.linalg.svd(G, compute_uv=False)
            if not bool(s[-1] > float(jnp.finfo(q.dtype).eps) ** 0.5 * s[0]):
                raise ValueError(
                    "RATTLE.make_state: argument 'constraint' has a rank-deficient Jacobian at 'q'"
                )
            q, p = _project(system, self.constraint, q, p)
            probe = VariationalState(q, p, probe.lam)
        vname = "qdot" if qdot is not None else "p"
        _constraint_checks(
            system,
            self.constraint,
            probe,
            ("q", vname, "lam"),
            "RATTLE.make_state",
            "RATTLE.make_state(...)",
        )
        lam = self.multipliers(system, q, p, t)
        return VariationalState(q, p, lam)

    def check_initial(self, system, state):
        # simulate's initial state on the constraint (ValueError eagerly, error_if under jit)
        return _constraint_checks(
            system,
            self.constraint,
            state,
            ("state0.q", "state0.p", "state0.lam"),
            "RATTLE",
            "RATTLE(...).make_state(system, q, qdot)",
        )

    def solve_step(self, system, state, dt, control=None, t=0.0):
        """One step with its internals: ``(new_state, relative_residual, info)``, ``info`` with
        the scheme's multipliers ``lam_a`` (at ``q_k``), ``lam_b`` (at ``q_{k+1}``)."""
        q0, p0 = state.q, state.p
        dtype = q0.dtype
        n = q0.shape[0]
        h = jnp.asarray(dt, dtype)
        t = jnp.asarray(t, dtype)
        tiny = jnp.finfo(dtype).tiny
        params, static = eqx.partition(system, eqx.is_array)
        G0 = jax.jacfwd(self.constraint)(q0)
        v0 = system.velocity(q0, p0)
        z, r1 = _solve(
            _RattlePositionResidual(static, self.rule, self.constraint),
            jnp.concatenate([v0, 0.5 * h * state.lam]),
            (params, q0, p0, G0, h, t, control),
            self.newton_iters,
            self.scalarize,
            self.early_exit,
        )
        v, Lam_a = z[:n], z[n:]
        _, p_tilde, q1 = discrete_legendre(system, self.rule, q0, v, h, t, control)
        G1 = jax.jacfwd(self.constraint)(q1)
        c = jnp.zeros((G1.shape[0],), dtype)
        z, r2 = _solve(
            _SaddleResidual(static),
            jnp.concatenate([v, Lam_a]),
            (params, q1, p_tilde, G1, c),
            self.projection_iters,
            self.scalarize,
            self.early_exit,
        )
        v1, Lam_b = z[:n], z[n:]
        p1 = p_tilde + G1.T @ Lam_b
        pscale = jnp.maximum(_max_abs(p0), _max_abs(p1)) + tiny
        gscale = _max_abs(G1) * (_max_abs(v) + _max_abs(v1)) + tiny
        res = jnp.maximum(
            jnp.maximum(_max_abs(r1[:n]), _max_abs(r2[:n])) / pscale,
            jnp.maximum(_max_abs(r1[n:]), _max_abs(r2[n:])) / gscale,
        )
        lam1 = system.constrained_acceleration(t + h, q1, v1, self.constraint, control)[1]
        info = {"lam_a": 2.0 * Lam_a / h, "lam_b": 2.0 * Lam_b / h, "velocity": v1}
        return VariationalState(q1, p1, lam1), res, info

    def step(self, system, state, dt, control=None, t=0.0):
        new, res, _ = self.solve_step(system, state, dt, control, t)
        return new, StepStats(residual=res)


def _split_system(system):
    """``(system, system with stopped gradients)``: the root iterations run on the latter."""
    params, static = eqx.partition(system, eqx.is_array)
    return eqx.combine(jax.lax.stop_gradient(params), static)


def _contacts(surface, q):
    """The contact functions ``f(q)`` as a vector ``(nc,)`` (a scalar surface is one contact)."""
    return jnp.atleast_1d(surface(q))


class _ContactPositionResidual(eqx.Module):
    """RATTLE's position step with the active contacts as constraints:
    ``[p_plus(v) − p_k − C_0ᵀ Λ, g(q_{k+1})/h, f_A(q_{k+1})/h, Λ_I]`` for ``z = (v, Λ)``, where
    ``C_0 = [G(q_k); df_A(q_k); 0]`` (active contacts ``A``; an inactive contact's row is
    ``Λ_i = 0``, so the Jacobian stays regular and shapes stay fixed)."""

    static: object = eqx.field(static=True)
    rule: str = eqx.field(static=True)
    constraint: Callable | None = eqx.field(static=True)
    surface: object = eqx.field(static=True)

    def __call__(self, z, args):
        params, sparams, q0, p0, C0, active, h, t, u = args
        system = eqx.combine(params, self.static)
        surface = eqx.combine(sparams, self.surface)
        n = q0.shape[0]
        v, Lam = z[:n], z[n:]
        p_plus, _, q1 = discrete_legendre(system, self.rule, q0, v, h, t, u)
        nc = active.shape[0]
        rows = [jnp.where(active, _contacts(surface, q1) / h, Lam[Lam.shape[0] - nc :])]
        if self.constraint is not None:
            rows.insert(0, self.constraint(q1) / h)
        return jnp.concatenate([p_plus - p0 - C0.T @ Lam, *rows])


class _MaskedSaddleResidual(eqx.Module):
    """``[∂L/∂q̇(q, v) − p − Cᵀ Λ, C v − c (rows in mask), Λ (rows not in mask)]`` for
    ``z = (v, Λ)``: :class:`_SaddleResidual` with some rows switched off (their ``C`` rows must
    be zero).  Linear in ``z`` for Lagrangians quadratic in ``q̇``."""

    static: object = eqx.field(static=True)

    def __call__(self, z, args):
        params, q, p, C, c, mask = args
        system = eqx.combine(params, self.static)
        n = q.shape[0]
        v, Lam = z[:n], z[n:]
        rows = jnp.where(mask, C @ v - c, Lam)
        return jnp.concatenate([system.momentum(q, v) - p - C.T @ Lam, rows])


def _node_multipliers(system, t, q, v, u, cons, mask):
    """``(q̈, λ)`` of the index-1 saddle system with the constraints ``cons(q) = 0`` whose rows
    are in ``mask`` (the others have ``λ_i = 0``):
    ``[[M, −Cᵀ], [C, D]] [q̈, λ] = [f, −∂²cons(q̇, q̇)]`` (masked ``C``, ``D = diag(1 − mask)``),
    as :meth:`~geomjax.variational.LagrangianSystem.constrained_acceleration`."""
    M, f = system._free_rhs(t, q, v, u)
    C = jnp.where(mask[:, None], jax.jacfwd(cons)(q), 0.0)
    hess = jax.jvp(lambda x: jax.jvp(cons, (x,), (v,))[1], (q,), (v,))[1]
    n = M.shape[0]
    K = jnp.block([[M, -C.T], [C, jnp.diag(jnp.where(mask, 0.0, 1.0)).astype(M.dtype)]])
    z = jnp.linalg.solve(K, jnp.concatenate([f, jnp.where(mask, -hess, 0.0)]))
    return z[:n], z[n:]


class Impacts(_VariationalMethod):
    """Impacts with unilateral constraints ``f_i(q) ≥ 0`` around an inner variational method
    (module docstring): impacts located inside the step, momentum jumps ``Σ Λ_i df_i(q)``
    (tangential components kept, Romano–Barretta–Diaco Thm 4.1) with Newton's restitution law
    ``df_i·q̇⁺ = −e df_i·q̇⁻``, and **resting contact** once impacts accumulate.

    **Accumulation and resting contact.**  A ball dropped on the floor with ``e < 1`` bounces
    infinitely often before ``t* = t₁ (1 + 2e/(1 − e))`` (Zeno).  At an impact whose outgoing
    normal speed ``v⁺ = e |df·q̇⁻|`` would give a flight ``2 v⁺ / |a_n|`` shorter than one step
    ``h`` (``a_n = d²f/dt²`` the normal acceleration of the motion with the holonomic
    constraints and the other contacts already resting — a rod turning about a resting end
    drops its other end at ``3g/2``, not ``g`` —, ``< 0`` when pushed onto the surface), or
    with ``v⁺ ≤ rest_speed``, the impact is plastic (``df·q̇⁺ = 0``) and the contact becomes
    a constraint: steps then run RATTLE's position/velocity solves (the inner method's discrete
    Lagrangian) with ``f_i(q) = 0`` added, i.e. the unilateral constraint with multiplier
    ``λ_i ≥ 0`` (contact force ``λ_i df_i``).  The contact releases when its step impulse would
    be negative (it would pull), and the step is redone without it (Signorini / Moreau's
    active-set rule).  The remaining hops, all shorter than a step, are
    merged: the height error is below ``|a_n| h²/8`` and the rest time is within
    ``h/(1 − e)`` of ``t*``; impact times before are those of the closed form.

    **Several contacts** (``f`` returning ``(nc,)``): an impact acts on every contact that is
    closed (``f_i ≤ √eps``·scale) and approaching (``df_i·q̇ < 0``) at that instant with the
    *simultaneous* Newton law (one saddle system; a contact whose impulse would be negative is
    dropped and the system solved again); the law is then re-applied at the same instant to
    contacts that the jump made approaching (``jump_rounds`` rounds), which propagates an impact
    along a chain: three equal balls in a row, the first hitting the two at rest with ``e = 1``,
    end as (0, 0, v) (Newton's cradle, the sequential-impact law).  A rod dropped flat hits with
    both ends at once: the simultaneous law keeps it flat, ``v_y⁺ = −e v_y⁻``.

    Arguments:
        surface: ``f(q) -> scalar`` or ``(nc,)``; the admissible set is ``f(q) ≥ 0``
            (``df_i ≠ 0`` on ``f_i = 0``).  The initial state must satisfy it (``ValueError``
            naming ``state0.q``).  A callable :class:`equinox.Module` may carry array
            parameters (a floor height, a wall's normal): gradients flow to them through the
            impact times, the jumps and the contact constraint.
        restitution: ``e ∈ [0, 1]``, a scalar or one per contact (``ValueError`` naming
            ``restitution`` otherwise); may be a differentiable array.
        method: the inner method, :class:`DiscreteEulerLagrange` (default), :class:`RATTLE`
            (then the jump also keeps the hidden constraint ``G q̇ = 0``) or a
            :class:`~geomjax.Composition` of either (steps with an active contact use its base
            method's discrete Lagrangian, second order).
        rest_speed: outgoing normal speed ``df·q̇⁺`` at or below which an impact ends in
            resting contact (default 0: only the accumulation criterion above).
        root_iters: safeguarded Newton iterations locating the impact instant (default 8),
            plus one implicit-function step that carries the derivatives.
        max_impacts: impacts resolved per step (static; default two per contact: with the
            accumulation criterion a single contact has at most a bounce and a landing per
            step, and a rod chattering on its two ends alternates between them, three impacts
            in a step seen); a further crossing is not resolved and shows as a positive
            ``StepStats.residual`` (relative penetration) — reduce ``dt`` or raise
            ``max_impacts``.
        jump_iters: Newton steps of each jump's saddle system (default 1: exact for
            Lagrangians quadratic in ``q̇``).
        jump_rounds: rounds of the impact law at one instant (default: the number of
            contacts).

    The state's ``lam`` is ``(m + nc,)``: the inner ``RATTLE``'s ``m`` multipliers, then the
    contact multipliers ``λ_i`` (``> 0`` exactly while contact ``i`` rests; 0 in flight).
    Build states with :meth:`make_state` (or let :func:`geomjax.simulate` pad ``lam``; a state
    resting on a surface gets its ``λ``).  :meth:`solve_step` also returns the impact time,
    impulses and the active contacts.  A step without crossing or release is one trial step
    and skips the phase loop (``lax.cond``), whose control flow dominates the cost on XLA:CPU;
    under ``jax.vmap`` every branch runs.
    """

    surface: Callable
    restitution: float | jax.Array = 1.0
    method: AbstractMethod = DiscreteEulerLagrange()
    rest_speed: float | jax.Array = 0.0
    root_iters: int = eqx.field(static=True, default=8)
    max_impacts: int | None = eqx.field(static=True, default=None)
    jump_iters: int = eqx.field(static=True, default=1)
    jump_rounds: int | None = eqx.field(static=True, default=None)
    order: ClassVar[int] = 2
    # located impacts and (e < 1) dissipative jumps: not its own inverse
    symmetric: ClassVar[bool] = False
    symmetric_with_force: ClassVar[bool] = False

    def __check_init__(self):
        where = "Impacts"
        if not callable(self.surface):
            raise ValueError(f"{where}: argument 'surface' must be callable f(q) -> scalar")
        inner = self.method.base if isinstance(self.method, Composition) else self.method
        if not isinstance(inner, DiscreteEulerLagrange | RATTLE):
            raise ValueError(
                f"{where}: argument 'method' must be DiscreteEulerLagrange, RATTLE or a "
                f"Composition of either, got {type(self.method).__name__}"
            )
        _check_iters(where, root_iters=self.root_iters, jump_iters=self.jump_iters)
        if self.max_impacts is not None:
            _check_iters(where, max_impacts=self.max_impacts)
        if self.jump_rounds is not None:
            _check_iters(where, jump_rounds=self.jump_rounds)
        e = self.restitution
        if not is_traced(e):
            e_arr = jnp.asarray(e)
            if e_arr.ndim > 1 or not bool(jnp.all((e_arr >= 0) & (e_arr <= 1))):
                raise ValueError(
                    f"{where}: argument 'restitution' must be a scalar or a vector (one per "
                    f"contact) in [0, 1], got {e!r}"
                )
        r = self.rest_speed
        if not is_traced(r) and not (np.shape(r) == () and bool(np.asarray(r) >= 0)):
            raise ValueError(f"{where}: argument 'rest_speed' must be a scalar >= 0, got {r!r}")

    @property
    def constraint(self):
        return getattr(self.method, "constraint", None)

    @property
    def _base(self):
        return self.method.base if isinstance(self.method, Composition) else self.method

    # --- contact bookkeeping -------------------------------------------------------------------
    def _sizes(self, q):
        """``(m, nc)``: holonomic constraints of the inner method, contacts."""
        m = 0 if self.constraint is None else jnp.shape(self.constraint(q))[0]
        return m, jnp.shape(_contacts(self.surface, q))[0]

    def _cons(self, q):
        """All constraint functions ``[g(q), f(q)]`` ``(m + nc,)``."""
        f = _contacts(self.surface, q)
        return f if self.constraint is None else jnp.concatenate([self.constraint(q), f])

    def _scale(self, q):
        """Per-contact length scale ``|df_i| max(|q|, 1)`` of the contact functions."""
        F = jax.jacfwd(lambda x: _contacts(self.surface, x))(q)
        return jnp.linalg.norm(F, axis=1) * jnp.maximum(_max_abs(q), 1.0)

    def _full(self, state):
        """The state with ``lam`` of shape ``(m + nc,)`` (zero contact multipliers appended to an
        inner method's state)."""
        m, nc = self._sizes(state.q)
        lam = state.lam
        if jnp.shape(lam) == (m,):
            lam = jnp.concatenate([lam, jnp.zeros((nc,), state.q.dtype)])
        return VariationalState(state.q, state.p, lam)

    def _resting_lam(self, system, state, t=0.0, u=None):
        """Contact multipliers of a state: contacts closed with zero normal velocity (to
        ``√eps``) and a positive multiplier rest; the others get 0."""
        q, p = state.q, state.p
        m = self._sizes(q)[0]
        dtype = q.dtype
        v = system.velocity(q, p)
        f = _contacts(self.surface, q)
        F = jax.jacfwd(lambda x: _contacts(self.surface, x))(q)
        tol = float(jnp.finfo(dtype).eps) ** 0.5
        vscale = jnp.linalg.norm(F, axis=1) * jnp.maximum(_max_abs(v), 1.0)
        closed = (f <= tol * self._scale(q)) & (jnp.abs(F @ v) <= tol * vscale)
        mask = jnp.concatenate([jnp.ones((m,), bool), closed])
        lam = _node_multipliers(system, t, q, v, u, self._cons, mask)[1]
        lam_c = jnp.where(closed, jnp.maximum(lam[m:], 0.0), 0.0)
        return VariationalState(q, p, jnp.concatenate([state.lam[:m], lam_c]))

    def make_state(self, system, q, qdot=None, p=None, project: bool = False, t=0.0):
        """A state for the inner method (``RATTLE.make_state`` or ``system.make_state``) with the
        contact multipliers appended: ``λ_i > 0`` for contacts resting on their surface
        (``f_i = 0``, zero normal velocity, pushed onto it)."""
        if self.constraint is not None:
            st = RATTLE(self.constraint).make_state(system, q, qdot, p, project, t)
        else:
            st = system.make_state(q, qdot, p)
        return self._resting_lam(system, st, t)

    def check_initial(self, system, state):
        m, nc = self._sizes(state.q)
        if jnp.shape(state.lam) not in ((m,), (m + nc,)):
            raise ValueError(
                f"Impacts: argument 'state0.lam' must have shape ({m},) or ({m + nc},) "
                f"({m} holonomic constraints, {nc} contacts), got {jnp.shape(state.lam)} "
                f"(build the state with Impacts(...).make_state)"
            )
        padded = jnp.shape(state.lam) == (m,)
        inner = self.method.check_initial(system, VariationalState(state.q, state.p, state.lam[:m]))
        f0 = _contacts(self.surface, inner.q)
        # on the surface up to rounding counts as admissible
        tol = 1e3 * float(jnp.finfo(inner.q.dtype).eps) * self._scale(inner.q)
        q = _check(
            inner.q,
            ~jnp.all(f0 >= -tol),
            "Impacts: argument 'state0.q' is behind the impact surface (f(q) < 0 for argument "
            "'surface'); the admissible set is f(q) >= 0",
        )
        st = VariationalState(q, inner.p, jnp.concatenate([inner.lam, state.lam[m:]]))
        return self._resting_lam(system, st) if padded else st

    # --- steps ----------------------------------------------------------------------------------
    def _free(self, system, state, s, u, t):
        """The inner method's step (no active contact); contact multipliers 0."""
        m = state.lam.shape[0] - _contacts(self.surface, state.q).shape[0]
        inner = VariationalState(state.q, state.p, state.lam[:m])
        # ``advance`` on the state itself: DEL/RATTLE carry the state (their ``init`` only checks
        # it, once), so a Composition's stages run without re-checking
        new, stats = self.method.advance(system, inner, s, u, t)
        lam = jnp.concatenate([new.lam, jnp.zeros_like(state.lam[m:])])
        return VariationalState(new.q, new.p, lam), stats.residual, jnp.zeros_like(state.lam[m:])

    def _contact(self, system, state, h, u, t, active):
        """RATTLE step with the holonomic constraints and the active contacts (module
        docstring): ``(state, relative residual, position-step impulses Λ_a of the contacts)``.
        With no active contact it is the inner DEL/RATTLE step (the contact rows read
        ``Λ_i = 0``).  The new state's multipliers are the step's ``(λ_a + λ_b)/2``
        (``λ = 2Λ/h``; RATTLE's two first-order estimates with opposite errors)."""
        base = self._base
        q0, p0 = state.q, state.p
        dtype = q0.dtype
        n = q0.shape[0]
        m, nc = self._sizes(q0)
        tiny = jnp.finfo(dtype).tiny
        params, static = eqx.partition(system, eqx.is_array)
        sparams, sstatic = eqx.partition(self.surface, eqx.is_array)
        mask = jnp.concatenate([jnp.ones((m,), bool), active])
        C0 = jnp.where(mask[:, None], jax.jacfwd(self._cons)(q0), 0.0)
        v0 = system.velocity(q0, p0)
        z, r1 = _solve(
            _ContactPositionResidual(static, base.rule, self.constraint, sstatic),
            jnp.concatenate([v0, 0.5 * h * state.lam]),
            (params, sparams, q0, p0, C0, active, h, t, u),
            base.newton_iters,
            self.scalarize,
            self.early_exit,
        )
        v, Lam_a = z[:n], z[n:]
        _, p_tilde, q1 = discrete_legendre(system, base.rule, q0, v, h, t, u)
        C1 = jnp.where(mask[:, None], jax.jacfwd(self._cons)(q1), 0.0)
        z, r2 = _solve(
            _MaskedSaddleResidual(static),
            jnp.concatenate([v, Lam_a]),
            (params, q1, p_tilde, C1, jnp.zeros((m + nc,), dtype), mask),
            getattr(base, "projection_iters", 1),
            self.scalarize,
            self.early_exit,
        )
        v1, Lam_b = z[:n], z[n:]
        p1 = p_tilde + C1.T @ Lam_b
        # momenta and constraint impulses set the scale (a body at rest has p = 0)
        pscale = jnp.maximum(
            jnp.maximum(_max_abs(p0), _max_abs(p1)),
            jnp.maximum(_max_abs(C0.T @ Lam_a), _max_abs(C1.T @ Lam_b)),
        )
        # constraint rows: velocities, or positions over h (g(q_{k+1})/h at rest)
        gscale = _max_abs(C1) * (_max_abs(v) + _max_abs(v1) + jnp.maximum(_max_abs(q1), 1) / h)
        gscale = gscale + tiny
        res = jnp.maximum(
            jnp.maximum(_max_abs(r1[:n]), _max_abs(r2[:n])) / (pscale + tiny),
            jnp.maximum(_max_abs(r1[n:]), _max_abs(r2[n:])) / gscale,
        )
        lam = (Lam_a + Lam_b) / h
        lam_c = jnp.where(active, jnp.maximum(lam[m:], 0.0), 0.0)
        return VariationalState(q1, p1, jnp.concatenate([lam[:m], lam_c])), res, Lam_a[m:]

    def _inner(self, system, state, s, u, t, active, others=True):
        """A step with the active contacts.  An inner Composition runs as such while no contact
        is active (``others=False``: statically none, e.g. while locating the impact of the
        only contact)."""
        if not isinstance(self.method, Composition):
            return self._contact(system, state, s, u, t, active)
        if not others:
            return self._free(system, state, s, u, t)
        return jax.lax.cond(
            jnp.any(active),
            lambda: self._contact(system, state, s, u, t, active),
            lambda: self._free(system, state, s, u, t),
        )

    def _locate(self, system, state, h, f0, f1, u, t, active, j):
        """Impact instant ``s ∈ (0, h)`` of contact ``j``: root of ``φ(s) = f_j(q(s))``
        (``root_iters`` Illinois iterations on the bracket ``[0, h]``, then one Newton step with
        live parameters: it polishes the root and carries the derivatives by the implicit
        function theorem, ``ds/dθ = −∂φ/∂θ / φ'``, surface parameters included)."""
        sys_ng = _split_system(system)
        st_ng = jax.lax.stop_gradient(state)
        h_ng, t_ng, f0, f1 = jax.lax.stop_gradient((h, t, f0, f1))
        dtype = h.dtype
        nc = active.shape[0]

        def phi(s, sys, st, tt):
            new = self._inner(sys, st, s, u, tt, active, others=nc > 1)[0]
            return _contacts(self.surface, new.q)[j]

        def illinois(_, c):
            a, fa, b, fb, side = c
            s = jnp.clip((a * fb - b * fa) / (fb - fa), a, b)
            s = jnp.where(jnp.isfinite(s), s, 0.5 * (a + b))
            fs = phi(s, sys_ng, st_ng, t_ng)
            right = fs > 0  # the root lies in [s, b]
            a, fa = jnp.where(right, s, a), jnp.where(right, fs, fa)
            b, fb = jnp.where(right, b, s), jnp.where(right, fb, fs)
            # Illinois: an end kept twice in a row has its value halved (superlinear)
            fb = jnp.where(right & (side == 1), 0.5 * fb, fb)
            fa = jnp.where(~right & (side == -1), 0.5 * fa, fa)
            return a, fa, b, fb, jnp.where(right, 1, -1).astype(jnp.int32)

        zero = jnp.zeros((), dtype)
        a, fa, b, fb, _ = jax.lax.fori_loop(
            0, self.root_iters, illinois, (zero, f0, h_ng, f1, jnp.zeros((), jnp.int32))
        )
        s = jax.lax.stop_gradient(jnp.where(jnp.abs(fa) < jnp.abs(fb), a, b))
        s = jnp.clip(s, 1e-6 * h_ng, h_ng)  # the step sizes stay away from 0
        val, dval = jax.jvp(lambda s: phi(s, system, state, t), (s,), (jnp.ones((), dtype),))
        s1 = s - val / jax.lax.stop_gradient(dval)
        ok = jnp.isfinite(s1) & (s1 > 0) & (s1 <= h_ng)
        return jnp.where(ok, s1, s)

    def _impact(self, system, state, t, u, active, forced, h_rest):
        """The impact map at an instant: ``(state⁺, residual, impulses (nc,), active⁺)``.

        Each round applies the simultaneous Newton law to the contacts that are closed and
        approaching (and to ``forced``, the located one, in the first round), keeping the active
        contacts at zero normal velocity; a contact whose outgoing flight ``2 e|df·q̇⁻|/|a_n|``
        is shorter than ``h_rest`` (or whose outgoing speed is ``≤ rest_speed``) lands for good
        (plastic, then active)."""
        q = state.q
        dtype = q.dtype
        n = q.shape[0]
        m, nc = self._sizes(q)
        tiny = jnp.finfo(dtype).tiny
        e = jnp.broadcast_to(jnp.asarray(self.restitution, dtype), (nc,))
        F = jax.jacfwd(lambda x: _contacts(self.surface, x))(q)
        # impulses below √eps times the momentum scale are round-off (the tolerance of `closed`);
        # the scale: the momentum before the impact, or the applied forces' impulse over a step
        # (a body brought to rest by the impact, or at rest, has p ≈ 0)
        f_app = system._free_rhs(t, q, system.velocity(q, state.p), u)[1]
        pscale = _max_abs(state.p) + h_rest * _max_abs(f_app)
        lam_tol = float(jnp.finfo(dtype).eps) ** 0.5 * pscale / (jnp.linalg.norm(F, axis=1) + tiny)
        C = jnp.concatenate([jax.jacfwd(self.constraint)(q), F]) if m else F
        closed = _contacts(self.surface, q) <= float(jnp.finfo(dtype).eps) ** 0.5 * self._scale(q)
        closed = closed | forced
        hol = jnp.ones((m,), bool)

        def fc(x):
            return _contacts(self.surface, x)

        def acc(v, act):
            # the landing criterion's a_n: acceleration of the motion with the holonomic
            # constraints and the contacts that stay active (a rod turning about a resting end:
            # its other end falls at 3g/2, not g, and a flight judged with g would end behind
            # the surface within the step); the free motion when none is active
            return _node_multipliers(system, t, q, v, u, self._cons, jnp.concatenate([hol, act]))[0]

        rounds = nc if self.jump_rounds is None else self.jump_rounds

        def solve(pm, vm, mask, target):
            # jump_iters Newton steps on [∂L/∂q̇(q, v) − p⁻ − Cᵀ Λ, C v − c] (masked rows
            # Λ_i = 0), written out: the first is exact for Lagrangians quadratic in q̇, so
            # differentiating it is the implicit-function derivative
            Cm = jnp.where(mask[:, None], C, 0.0)
            c = jnp.concatenate([jnp.zeros((m,), dtype), target])
            D = jnp.diag(jnp.where(mask, 0.0, 1.0)).astype(dtype)
            z = jnp.concatenate([vm, jnp.zeros((m + nc,), dtype)])

            def resid(z):
                v, Lam = z[:n], z[n:]
                rows = jnp.where(mask, Cm @ v - c, Lam)
                return jnp.concatenate([system.momentum(q, v) - pm - Cm.T @ Lam, rows])

            for _ in range(self.jump_iters):
                K = jnp.block([[system.mass_matrix(q, z[:n]), -Cm.T], [Cm, D]])
                z = z - jnp.linalg.solve(K, resid(z))
            r = resid(z)
            Lam = z[n:]
            res = jnp.maximum(
                _max_abs(r[:n]) / (jnp.maximum(_max_abs(pm), _max_abs(Cm.T @ Lam)) + tiny),
                _max_abs(r[n:]) / (_max_abs(C) * _max_abs(vm) + tiny),
            )
            return pm + Cm.T @ Lam, Lam, res

        def one_round(i, c):
            pm, act, imp, res = c
            vm = system.velocity(q, pm)
            vn = F @ vm
            hit = closed & ~act & ((vn < 0) | (forced & (i == 0)))
            vplus = e * jnp.maximum(-vn, 0.0)
            an = F @ acc(vm, act) + jax.jvp(lambda x: jax.jvp(fc, (x,), (vm,))[1], (q,), (vm,))[1]
            flight = 2.0 * vplus / jnp.maximum(-an, tiny)
            rest = hit & ((vplus <= self.rest_speed) | ((an < 0) & (flight < h_rest)))
            target = jnp.where(hit & ~rest, vplus, 0.0)
            sel = act | hit
            pp, Lam, r = solve(pm, vm, jnp.concatenate([hol, sel]), target)
            # a contact that would pull (negative impulse) is not part of the impact; negative
            # beyond round-off (`lam_tol`): a contact that landed in an earlier round (or a
            # located one already at zero normal speed) gets an impulse of round-off size and
            # either sign, and dropping it for its sign would leave it closed, unconstrained
            # and pushed through the surface by the next trial step, phase after phase
            keep = sel & (Lam[m:] >= -lam_tol)
            pp, Lam, r = jax.lax.cond(
                jnp.any(sel & ~keep),
                lambda: solve(pm, vm, jnp.concatenate([hol, keep]), target),
                lambda: (pp, Lam, r),
            )
            act = (act & keep) | (rest & keep)
            return pp, act, imp + jnp.where(keep & hit, Lam[m:], 0.0), jnp.maximum(res, r)

        init = (state.p, active, jnp.zeros((nc,), dtype), jnp.zeros((), dtype))
        pp, act, imp, res = jax.lax.fori_loop(0, rounds, one_round, init)
        v = system.velocity(q, pp)
        lam = _node_multipliers(system, t, q, v, u, self._cons, jnp.concatenate([hol, act]))[1]
        lam_c = jnp.where(act, jnp.maximum(lam[m:], 0.0), 0.0)
        return VariationalState(q, pp, jnp.concatenate([lam[:m], lam_c])), res, imp, act

    def jump(self, system, state, t=0.0, u=None):
        """The impact map (Newton's law, no resting) at ``q`` on the surface: ``(state⁺,
        relative residual, Λ (nc,))`` with ``p⁺ = p⁻ + Σ Λ_i df_i(q) (+ Gᵀ Λ_g)`` and
        ``df_i·q̇⁺ = −e df_i·q̇⁻`` on the closed, approaching contacts (``G q̇⁺ = 0``)."""
        state = self._full(state)
        nc = _contacts(self.surface, state.q).shape[0]
        t = jnp.asarray(t, state.q.dtype)
        none = jnp.zeros((nc,), bool)
        new, res, imp, _ = self._impact(system, state, t, u, none, none, jnp.zeros_like(t))
        return new, res, imp

    def solve_step(self, system, state, dt, control=None, t=0.0):
        """One step with its internals: ``(new_state, residual, info)``; ``info["impact_time"]``
        the time of the last impact in the step (NaN when none), ``info["impulse"]`` its normal
        impulses ``Λ`` ``(nc,)`` (0 when none), ``info["n_impacts"]``, ``info["active"]`` the
        resting contacts ``(nc,)`` at the end of the step.

        The step is a sequence of phases (one traced body): a trial step of the remaining time
        with the active contacts; then either a release (a contact whose impulse would be
        negative leaves the active set and the trial is redone), or an impact (root located,
        the next phase steps to it and applies the impact map; a contact found behind the
        surface at that instant crossed first and is located instead), or acceptance."""
        dtype = state.q.dtype
        h = jnp.asarray(dt, dtype)
        t = jnp.asarray(t, dtype)
        zero = jnp.zeros((), dtype)
        m, nc = self._sizes(state.q)
        # a state without contact multipliers (an inner method's state): resting contacts are
        # found from the geometry, and the new state has the same layout
        short = jnp.shape(state.lam) == (m,)
        if short:
            state = self._resting_lam(system, state, t, control)
        max_impacts = 2 * nc if self.max_impacts is None else self.max_impacts
        n_phases = 2 * max_impacts + nc + 1
        none = jnp.zeros((nc,), bool)

        def phase(i, c):
            st, r, tc, res, t_imp, imp, k, act, pending, target, forced = c
            size = jnp.where(pending, target, r)
            go = size > 0
            new, res_t, Lc = self._inner(system, st, jnp.where(go, size, r), control, tc, act)
            last = i == n_phases - 1
            release = act & (Lc < 0) & ~last
            f0, f1 = _contacts(self.surface, st.q), _contacts(self.surface, new.q)
            cross = ~act & (f1 < 0) & ~last
            # a located impact whose instant finds another contact already behind the surface
            # beyond the tolerance of `closed`: that one crossed earlier (the linear guess in
            # `hit` ranks nonlinear crossings wrongly, e.g. the far end of a turning rod), so it
            # is located within [0, size] instead
            tol_c = float(jnp.finfo(dtype).eps) ** 0.5 * self._scale(new.q)
            earlier = pending & go & ~act & ~forced & (f1 < -tol_c) & ~last

            def impact(_):
                st_c = jax.tree.map(lambda a, b: jnp.where(go, a, b), new, st)
                st_j, res_j, Lam, act_j = self._impact(
                    system, st_c, tc + size, control, act, forced, h
                )
                res2 = jnp.maximum(jnp.maximum(res, jnp.where(go, res_t, 0.0)), res_j)
                return (
                    st_j,
                    r - size,
                    tc + size,
                    res2,
                    tc + size,
                    Lam,
                    k + 1,
                    act_j,
                    False,
                    zero,
                    none,
                )

            def let_go(_):
                return st, r, tc, res, t_imp, imp, k, act & ~release, False, zero, none

            def hit(_):
                # the earliest crossing by linear interpolation; a contact already closed at
                # the start (f0 <= 0) is hit at once
                first = jnp.any(earlier)
                cand, span = jnp.where(first, earlier, cross), jnp.where(first, size, r)
                s_lin = jnp.where(cand, jnp.maximum(f0, 0.0) / (f0 - f1), jnp.inf)
                j = jnp.argmin(s_lin)
                s = jax.lax.cond(
                    f0[j] > 0,
                    lambda: self._locate(system, st, span, f0[j], f1[j], control, tc, act, j),
                    lambda: zero,
                )
                return st, r, tc, res, t_imp, imp, k, act, True, s, jnp.arange(nc) == j

            def accept(_):
                return (
                    new,
                    zero,
                    tc + r,
                    jnp.maximum(res, res_t),
                    t_imp,
                    imp,
                    k,
                    act,
                    False,
                    zero,
                    none,
                )

            which = jnp.where(
                jnp.any(earlier),
                2,
                jnp.where(
                    pending & ~last,
                    0,
                    jnp.where(jnp.any(release), 1, jnp.where(jnp.any(cross), 2, 3)),
                ),
            )
            return jax.lax.switch(which, [impact, let_go, hit, accept], None)

        carry = (
            state,
            h,
            t,
            zero,
            jnp.full((), jnp.nan, dtype),
            jnp.zeros((nc,), dtype),
            jnp.zeros((), jnp.int32),
            state.lam[m:] > 0,
            jnp.zeros((), bool),
            zero,
            none,
        )
        # the common step (no crossing, no release) skips the phase loop
        trial, res_t, Lc = self._inner(system, state, h, control, t, carry[7])
        plain = ~jnp.any(carry[7] & (Lc < 0)) & ~jnp.any(
            ~carry[7] & (_contacts(self.surface, trial.q) < 0)
        )

        def loop(c):
            return jax.lax.fori_loop(
                0,
                n_phases,
                lambda i, c: jax.lax.cond(c[1] > 0, lambda c: phase(i, c), lambda c: c, c),
                c,
            )

        def done(c):
            return (trial, zero, t + h, res_t, *c[4:])

        carry = jax.lax.cond(plain, done, loop, carry)
        st, res, act = carry[0], carry[3], carry[7]
        # an unresolved crossing (more than max_impacts in one step) shows in the residual
        fq = _contacts(self.surface, st.q)
        pen = jnp.max(jnp.maximum(-fq, 0.0) / (self._scale(st.q) + jnp.finfo(dtype).tiny))
        res = jnp.maximum(res, jnp.where(pen > 1e3 * jnp.finfo(dtype).eps, pen, 0.0))
        if short:
            st = VariationalState(st.q, st.p, st.lam[:m])
        info = {
            "impact_time": carry[4],
            "impulse": carry[5],
            "n_impacts": carry[6],
            "active": act,
        }
        return st, res, info

    def step(self, system, state, dt, control=None, t=0.0):
        new, res, _ = self.solve_step(system, state, dt, control, t)
        return new, StepStats(residual=res)

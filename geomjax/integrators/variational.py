"""Variational integrators in coordinates: discrete Euler–Lagrange with forcing, RATTLE for
holonomic constraints, and impacts with a unilateral constraint.

Setting: :class:`geomjax.variational.LagrangianSystem` (``L(q, q̇)``, forces ``F(t, q, q̇, u)``)
with the state :class:`~geomjax.variational.VariationalState` ``(q, p, lam)``.  Seed 003
(Romano–Barretta–Diaco) supplies the continuous law these schemes discretize: the Euler
differential condition (forced Euler–Lagrange equations, §5), linear constraints with multiplier
forces in the momentum equation (§6), and the jump condition at impacts (Thm 4.1).

**Discrete Lagrangian** of a step ``q_k → q_{k+1} = q_k + h v`` (``v`` is the unknown of the
implicit solve):

* ``rule="midpoint"``:     ``L_d = h L((q_k + q_{k+1})/2, v)``;
* ``rule="trapezoidal"``:  ``L_d = h/2 [L(q_k, v) + L(q_{k+1}, v)]`` (Störmer–Verlet when
  ``L = ½ q̇ᵀ M q̇ − V(q)`` with constant ``M``).

**Discrete Lagrange–d'Alembert principle** (Marsden & West 2001, Acta Numerica §3.2; forces as in
seed 003 §5, a non-potential force one-form): with the discrete forces
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
the implicit step), then the jump, then the rest of the step.  The jump is seed 003's condition
``p⁺ = p⁻ + Λ df(q)`` — the momentum components tangent to the interface (``⟨p, w⟩`` for
``df·w = 0``) are unchanged — closed by **Newton's restitution law** (the paper gives none):

    df(q)·q̇⁺ = −e df(q)·q̇⁻,   0 ≤ e ≤ 1.

For ``L = ½ q̇ᵀ M q̇ − V`` this gives ``Λ = −(1 + e) (df·q̇⁻) / (df M⁻¹ dfᵀ)`` and the kinetic
energy changes by ``−(1 − e²) K_n`` with ``K_n = ½ (df·q̇⁻)² / (df M⁻¹ dfᵀ)``, the kinetic energy
of the normal component of the velocity (``M``-orthogonal split): conserved for ``e = 1``.  With
holonomic constraints (inner RATTLE) the jump also keeps ``G(q) q̇⁺ = 0`` (impulse
``df ᵀΛ + Gᵀ Λ_g``).  The root location is differentiable by the implicit function theorem
(``ds/dθ = −∂φ/∂θ / φ'``) away from grazing contacts (``φ' → 0``).

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


def _is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _check(x, bad, msg):
    """Eager ``ValueError`` or, under ``jit``, ``equinox.error_if`` on ``x``."""
    if _is_traced(bad):
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
    # scalar: scalar by scalar, a few fused kernels per iteration (geomjax._scalarize)
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
    #: (:func:`geomjax._scalarize.scalarize`: the same numbers to round-off, a few fused kernels
    #: per iteration instead of one per small array operation; programs without a scalar form
    #: fall back to the array form)
    scalarize: bool = eqx.field(static=True, default=True, kw_only=True)
    #: stop the Newton iterations once converged, after at most the given number
    #: (:func:`~geomjax.integrators.newton.newton_solve`'s ``early_exit``: the same results to
    #: round-off, the same derivatives).  Measured (dt 0.01, 2-core CPU, float64, ns per
    #: body-step unbatched / at batch 1024, fixed → early exit): the double pendulum's DEL
    #: 373 → 327 / 377 → 311, the double spherical pendulum's RATTLE 582 → 553 / 366 → 356
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


class Impacts(_VariationalMethod):
    """Impacts with a unilateral constraint ``f(q) ≥ 0`` around an inner variational method
    (module docstring): the impact is located inside the step, the momentum jumps by
    ``Λ df(q)`` (tangential components kept, seed 003 Thm 4.1) with Newton's restitution law
    ``df·q̇⁺ = −e df·q̇⁻``.

    Arguments:
        surface: ``f(q) -> scalar``; the admissible set is ``f(q) ≥ 0`` (``df ≠ 0`` on
            ``f = 0``).  The initial state must satisfy it (``ValueError`` naming ``state0.q``).
            Static, like ``RATTLE``'s constraint.
        restitution: ``e ∈ [0, 1]`` (``ValueError`` naming ``restitution`` otherwise); may be a
            differentiable array.  ``e = 1`` conserves the energy, ``e < 1`` removes
            ``(1 − e²)`` times the normal kinetic energy at each impact.
        method: the inner method, :class:`DiscreteEulerLagrange` (default), :class:`RATTLE`
            (then the jump also keeps the hidden constraint ``G q̇ = 0``) or a
            :class:`~geomjax.Composition` of either.
        root_iters: safeguarded Newton iterations locating the impact instant (default 8;
            quadratic convergence from a secant guess), plus one implicit-function step that
            carries the derivatives.
        max_impacts: impacts resolved per step (default 2, static); a further crossing within
            the same step is not resolved and shows as a positive ``StepStats.residual``
            (relative penetration) — reduce ``dt``.  Accumulating impacts (a ball coming to
            rest with ``e < 1``: infinitely many impacts in finite time) are not modelled.
        jump_iters: Newton steps of the jump's saddle system (default 1: exact for Lagrangians
            quadratic in ``q̇``).

    :meth:`solve_step` also returns the impact time and normal impulse.  Steps without an impact
    cost one inner step (``lax.cond``); under ``jax.vmap`` both branches run, so every step of a
    batch pays for the root finding (about ``root_iters + 5`` inner steps, most with a tangent).
    """

    surface: Callable = eqx.field(static=True)
    restitution: float | jax.Array = 1.0
    method: AbstractMethod = DiscreteEulerLagrange()
    root_iters: int = eqx.field(static=True, default=8)
    max_impacts: int = eqx.field(static=True, default=2)
    jump_iters: int = eqx.field(static=True, default=1)
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
        _check_iters(
            where,
            root_iters=self.root_iters,
            max_impacts=self.max_impacts,
            jump_iters=self.jump_iters,
        )
        e = self.restitution
        if not _is_traced(e):
            e_arr = jnp.asarray(e)
            if e_arr.shape != () or not bool((e_arr >= 0) & (e_arr <= 1)):
                raise ValueError(
                    f"{where}: argument 'restitution' must be a scalar in [0, 1], got {e!r}"
                )

    @property
    def constraint(self):
        return getattr(self.method, "constraint", None)

    def make_state(self, system, q, qdot=None, p=None, project: bool = False, t=0.0):
        """A state for the inner method (``RATTLE.make_state`` or ``system.make_state``)."""
        if self.constraint is not None:
            return RATTLE(self.constraint).make_state(system, q, qdot, p, project, t)
        return system.make_state(q, qdot, p)

    def check_initial(self, system, state):
        state = self.method.check_initial(system, state)
        f0 = self.surface(state.q)
        q = _check(
            state.q,
            ~(f0 >= 0),
            "Impacts: argument 'state0.q' is behind the impact surface (f(q) < 0); the "
            "admissible set is f(q) >= 0",
        )
        return VariationalState(q, state.p, state.lam)

    def _inner(self, system, state, s, u, t):
        # ``advance`` on the state itself: DEL/RATTLE carry the state (their ``init`` only checks
        # it, once, in :meth:`init`), so a Composition's stages run without re-checking
        return self.method.advance(system, state, s, u, t)

    def _locate(self, system, state, h, f0, f1, u, t):
        """Impact instant ``s ∈ (0, h)``: root of ``φ(s) = f(q(s))`` (safeguarded Newton on the
        bracket ``[0, h]``, then one IFT step carrying the derivatives)."""
        sys_ng = _split_system(system)
        st_ng = jax.lax.stop_gradient(state)
        h_ng, t_ng = jax.lax.stop_gradient((h, t))
        dtype = h.dtype
        lo = jnp.asarray(1e-6, dtype) * h_ng  # the step sizes stay well away from 0

        def phi(s, sys, st, tt):
            return self.surface(self._inner(sys, st, s, u, tt)[0].q)

        s = jnp.clip(h_ng * f0 / (f0 - f1), lo, h_ng)
        ds = jnp.ones((), dtype)

        def newton(_, c):
            s, a, b = c
            val, dval = jax.jvp(lambda s: phi(s, sys_ng, st_ng, t_ng), (s,), (ds,))
            a = jnp.where(val > 0, s, a)
            b = jnp.where(val > 0, b, s)
            s_new = s - val / dval
            ok = jnp.isfinite(s_new) & (s_new > a) & (s_new < b)
            return jnp.clip(jnp.where(ok, s_new, 0.5 * (a + b)), lo, h_ng), a, b

        # a loop, not unrolled: each iteration holds a whole implicit step and its tangent
        s = jax.lax.fori_loop(0, self.root_iters, newton, (s, jnp.zeros((), dtype), h_ng))[0]
        s = jax.lax.stop_gradient(s)
        _, dval = jax.jvp(lambda s: phi(s, sys_ng, st_ng, t_ng), (s,), (ds,))
        # one Newton step with live parameters: value ≈ s, derivative −∂φ/∂θ / φ' (IFT)
        return s - phi(s, system, state, t) / jax.lax.stop_gradient(dval)

    def jump(self, system, state, t=0.0, u=None):
        """The impact map at ``q`` on the surface: ``(state⁺, relative residual, Λ)`` with
        ``p⁺ = p⁻ + Λ df(q) (+ Gᵀ Λ_g)`` and ``df·q̇⁺ = −e df·q̇⁻`` (``G q̇⁺ = 0``; ``t``, ``u`` only
        enter the multipliers of the new state)."""
        q, pm = state.q, state.p
        dtype = q.dtype
        n = q.shape[0]
        params, static = eqx.partition(system, eqx.is_array)
        vm = system.velocity(q, pm)
        df = jax.grad(self.surface)(q)
        e = jnp.asarray(self.restitution, dtype)
        vn = df @ vm
        # only an approaching contact (df·q̇⁻ < 0) bounces: a separating one keeps its velocity
        # (a state pushed behind the surface by an unresolved crossing is not pulled back in)
        C, c = df[None, :], jnp.reshape(jnp.where(vn < 0, -e * vn, vn), (1,))
        if self.constraint is not None:
            G = jax.jacfwd(self.constraint)(q)
            C = jnp.concatenate([C, G], 0)
            c = jnp.concatenate([c, jnp.zeros((G.shape[0],), dtype)])
        z, r = _solve(
            _SaddleResidual(static),
            jnp.concatenate([vm, jnp.zeros((C.shape[0],), dtype)]),
            (params, q, pm, C, c),
            self.jump_iters,
            self.scalarize,
            self.early_exit,
        )
        v, Lam = z[:n], z[n:]
        pp = pm + C.T @ Lam
        tiny = jnp.finfo(dtype).tiny
        res = jnp.maximum(
            _max_abs(r[:n]) / (_max_abs(pm) + tiny),
            _max_abs(r[n:]) / (_max_abs(C) * _max_abs(vm) + tiny),
        )
        lam = state.lam
        if self.constraint is not None:
            lam = system.constrained_acceleration(t, q, v, self.constraint, u)[1]
        return VariationalState(q, pp, lam), res, Lam[0]

    def solve_step(self, system, state, dt, control=None, t=0.0):
        """One step with its internals: ``(new_state, residual, info)``; ``info["impact_time"]``
        the time of the last impact in the step (NaN when none), ``info["impulse"]`` its normal
        impulse ``Λ`` (0 when none), ``info["n_impacts"]``."""
        dtype = state.q.dtype
        h = jnp.asarray(dt, dtype)
        t = jnp.asarray(t, dtype)
        zero = jnp.zeros((), dtype)

        def phase(carry):
            st, r, tc, res, t_imp, imp, k = carry
            trial, stats = self._inner(system, st, r, control, tc)
            f0, f1 = self.surface(st.q), self.surface(trial.q)

            def hit(_):
                s = self._locate(system, st, r, f0, f1, control, tc)
                st_c, stats_c = self._inner(system, st, s, control, tc)
                st_j, res_j, Lam = self.jump(system, st_c, tc + s, control)
                res2 = jnp.maximum(jnp.maximum(res, stats_c.residual), res_j)
                return st_j, r - s, tc + s, res2, tc + s, Lam, k + 1

            def miss(_):
                return trial, zero, tc + r, jnp.maximum(res, stats.residual), t_imp, imp, k

            return jax.lax.cond(f1 < 0, hit, miss, None)

        carry = (state, h, t, zero, jnp.full((), jnp.nan, dtype), zero, jnp.zeros((), jnp.int32))
        carry = jax.lax.fori_loop(
            0,
            self.max_impacts,
            lambda _, c: jax.lax.cond(c[1] > 0, phase, lambda c: c, c),
            carry,
        )

        def finish(carry):
            st, r, tc, res = carry[:4]
            new, stats = self._inner(system, st, r, control, tc)
            return new, jnp.maximum(res, stats.residual)

        st, res = jax.lax.cond(carry[1] > 0, finish, lambda c: (c[0], c[3]), carry)
        # an unresolved crossing (more than max_impacts in one step) shows in the residual
        fq = self.surface(st.q)
        pen = jnp.maximum(-fq, 0.0) / (
            jnp.linalg.norm(jax.grad(self.surface)(st.q)) * jnp.maximum(_max_abs(st.q), 1.0)
            + jnp.finfo(dtype).tiny
        )
        res = jnp.maximum(res, jnp.where(pen > 1e3 * jnp.finfo(dtype).eps, pen, 0.0))
        info = {"impact_time": carry[4], "impulse": carry[5], "n_impacts": carry[6]}
        return st, res, info

    def step(self, system, state, dt, control=None, t=0.0):
        new, res, _ = self.solve_step(system, state, dt, control, t)
        return new, StepStats(residual=res)

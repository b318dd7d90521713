"""Second-order trajectory optimization on Lie groups: iLQR, DDP, control-limited DDP and an
augmented-Lagrangian outer loop, driven by any geomjax integrator.

An :class:`OptimalControlProblem` is a system, a method (its ``step`` *is* the discrete
dynamics ``x_{k+1} = f(x_k, u_k, t_k)``), an initial state, ``dt``, ``steps``, a running cost
``l(t, state, u)`` and a terminal cost ``Φ(state)``:

    J(x, u) = Σ_k dt · l(t_k, x_k, u_k) + Φ(x_N),     lower ≤ u_k ≤ upper,

with optional path and terminal constraints ``c_E = 0``, ``c_I ≤ 0`` (handled by
:class:`AugmentedLagrangian`).

**The chart.**  States live on ``G × g*`` (or in coordinates); the solvers work in the tangent
space at the current iterate: ``x ⊕ δ = (g·exp(η), μ + ν)`` and ``y ⊖ x = (log(g_x⁻¹ g_y),
μ_y − μ_x)`` (:class:`LieGroupChart`; :class:`EuclideanChart` for coordinates).  The linearization
of a node is the autodiff Jacobian of ``(δ, w) ↦ f(x̄_k ⊕ δ, ū_k + w) ⊖ x̄_{k+1}`` at 0: its value
is the *gap* (zero after a rollout, the defect of multiple shooting otherwise), its Jacobians
``A = F_x``, ``B = F_u`` include the change of chart, and the cost derivatives ``l_x, l_u, l_xx,
l_ux, l_uu`` are those of ``l(t, x̄ ⊕ δ, ū + w)`` — on a group, log-map costs are differentiated
in the left-trivialized tangent (Boutselis & Theodorou, *Discrete-time differential dynamic
programming on Lie groups*, 2020, §4; Alcan, Abu-Dakka & Kyrki, *Constrained trajectory
optimization on matrix Lie groups via Lie-algebraic DDP*, 2023, §III).

**The backward pass** (Mayne's DDP; Tassa, Mansard & Todorov, *Control-limited differential dynamic
programming*, ICRA 2014, §III) with the gaps ``f̄`` of multiple shooting (Mastalli et al.,
*Crocoddyl: an efficient and versatile framework for multi-contact optimal control*, ICRA 2020,
§IV, the feasibility-driven DDP):

    V'_x ← V_x(k+1) + V_xx(k+1) f̄_{k+1}
    Q_x = l_x + Aᵀ V'_x,  Q_u = l_u + Bᵀ V'_x,
    Q_xx = l_xx + Aᵀ V_xx A (+ V'_x · F_xx),  Q_ux = l_ux + Bᵀ V_xx A (+ V'_x · F_ux),
    Q_uu = l_uu + Bᵀ V_xx B (+ V'_x · F_uu) + ρ I,

the terms in parentheses being DDP's second-order dynamics (:class:`DDP`; :class:`ILQR` drops
them: Gauss–Newton).  The feedforward ``k`` minimizes ``½ kᵀ Q_uu k + Q_uᵀ k`` over the box
``lower − ū ≤ k ≤ upper − ū`` by projected Newton (Tassa et al. §III-B, Algorithm 1); the feedback
``K = −Q_uu,ff⁻¹ Q_ux`` acts on the free controls only.  ``ρ`` is a Levenberg–Marquardt
regularization (×10 on a failed factorization or a failed line search, ÷10 after a step longer
than ½).  The forward pass ``u = clip(ū + α k + K (x ⊖ x̄))`` closes a fraction ``α`` of the gaps
and is accepted on the expected improvement ``α (d₁ + α d₂/2)`` (crocoddyl's FDDP rule).

Everything runs in one compiled ``lax.while_loop`` with a fixed iteration cap; a batch of problems
runs under ``jax.vmap`` (each member stops on its own: a finished member's iterate no longer
changes).  Results: :class:`OCPSolution` with a status (:attr:`OCPSolution.stop_reason`,
:meth:`OCPSolution.check`) and a per-iteration history.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ..integrators.base import AbstractMethod
from ..integrators.simulate import ConvergenceError
from ..lie import LieGroup
from ..systems.base import AbstractLieGroupSystem

__all__ = [
    "DDP",
    "ILQR",
    "AbstractStateChart",
    "Actuated",
    "AugmentedLagrangian",
    "EuclideanChart",
    "LieGroupChart",
    "OCPSolution",
    "OptimalControlProblem",
    "box_qp",
    "solve_ocp",
]


# --- charts -----------------------------------------------------------------------------------
class AbstractStateChart(eqx.Module):
    """Local coordinates of the state space around a point: ``plus(x, δ) = x ⊕ δ`` and
    ``minus(y, x) = y ⊖ x`` (so that ``x ⊕ (y ⊖ x) = y``; the order of
    :meth:`geomjax.LieGroup.rminus`).  ``δ`` is a flat ``(n,)`` vector."""

    @abc.abstractmethod
    def plus(self, system, x, d): ...

    @abc.abstractmethod
    def minus(self, system, y, x): ...

    def dim(self, system, x) -> int:
        return int(jax.eval_shape(lambda a: self.minus(system, a, a), x).shape[0])


class LieGroupChart(AbstractStateChart):
    """``(g, μ) ⊕ (η, ν) = (g·r(η), μ + ν)`` and ``(g', μ') ⊖ (g, μ) = (r⁻¹(g⁻¹g'), μ' − μ)``:
    left-trivialized perturbations of a state of an
    :class:`~geomjax.systems.AbstractLieGroupSystem` (through its ``split``/``make_state``).

    ``retraction="cayley"`` (default, where the group has a Cayley map; else exp): ``r = cay``,
    ``r⁻¹ = cay⁻¹`` (:meth:`LieGroup.cay`);
    ``"exp"``: ``r = exp``, ``r⁻¹ = log``.  ``cay(ξ) = exp(ξ) + O(|ξ|³)``, so both charts have
    the same first and second derivatives at ``δ = 0``: at a rollout (no gaps) the
    linearization ``A, B``, the cost derivatives and DDP's second-order terms are those of the
    exponential chart, while the rational Cayley map is far cheaper to differentiate twice
    (compile time: the second derivatives of the quaternion-based SO(3) logarithm are ~7× the
    program)."""

    retraction: str = eqx.field(static=True, default="cayley")

    def __check_init__(self):
        if self.retraction not in ("cayley", "exp"):
            raise ValueError(
                "LieGroupChart: argument 'retraction' must be 'cayley' or 'exp', "
                f"got {self.retraction!r}"
            )

    def _cayley(self, G) -> bool:
        # groups without a Cayley map (the base class raises) use exp/log
        return self.retraction == "cayley" and type(G).cay is not LieGroup.cay

    def plus(self, system, x, d):
        g, mu = system.split(x)
        G = system.group
        n = G.dim
        r = G.cay(d[:n]) if self._cayley(G) else G.exp(d[:n])
        return system.make_state(G.compose(g, r), mu + d[n:])

    def minus(self, system, y, x):
        gy, muy = system.split(y)
        gx, mux = system.split(x)
        G = system.group
        h = G.between(gx, gy)
        eta = G.cay_inv(h) if self._cayley(G) else G.log(h)
        return jnp.concatenate([eta, muy - mux])


class EuclideanChart(AbstractStateChart):
    """All floating leaves of the state, flattened (:class:`~geomjax.VariationalState` and other
    states in coordinates)."""

    def plus(self, system, x, d):
        flat, unravel = ravel_pytree(x)
        return unravel(flat + d.astype(flat.dtype))

    def minus(self, system, y, x):
        return ravel_pytree(y)[0] - ravel_pytree(x)[0]


def default_chart(system) -> AbstractStateChart:
    return LieGroupChart() if isinstance(system, AbstractLieGroupSystem) else EuclideanChart()


class _WrappedMethod(AbstractMethod):
    """A method that changes how another one, ``method``, is called (its control, its time):
    order and supported systems are ``method``'s."""

    method: eqx.AbstractVar[AbstractMethod]

    @property
    def order(self):
        return self.method.order

    def supports(self, system) -> bool:
        return self.method.supports(system)


class Actuated(_WrappedMethod):
    """``method`` driven through a constant actuation matrix: the body force of a step is
    ``B u`` for the actuator command ``u`` ``(m,)`` (e.g. four rotor thrusts → a body wrench
    ``(torque, force)`` of a quadrotor).  Any geomjax method; ``B`` ``(dim, m)`` is an array
    (differentiable)."""

    method: AbstractMethod
    matrix: jax.Array

    def step(self, system, state, dt, control=None, t=0.0):
        u = None if control is None else self.matrix @ control
        return self.method.step(system, state, dt, u, t)


class ResidualCost(eqx.Module):
    """A least-squares cost ``½ Σ_i w_i r_i²`` of a residual ``r``: ``residual(t, state, u)`` as a
    running cost, ``residual(state)`` as a terminal cost (``terminal=True``).  The solvers use
    its Gauss–Newton Hessian ``Jᵀ W J`` (``J`` the residual's Jacobian in the chart), as
    crocoddyl does for its residual costs: one derivative of the residual instead of two (a
    log-map residual on SE(3) compiles several times faster)."""

    residual: Callable
    weights: jax.Array
    terminal: bool = eqx.field(static=True, default=False)

    def __call__(self, *args):
        r = self.residual(*args)
        return 0.5 * jnp.sum(jnp.asarray(self.weights, r.dtype) * r**2)


# --- the problem ------------------------------------------------------------------------------
def _none_or_callable(fn, name):
    if fn is not None and not callable(fn):
        raise ValueError(f"OptimalControlProblem: argument '{name}' must be callable, got {fn!r}")
    return fn


class OptimalControlProblem(eqx.Module):
    """A discrete-time optimal control problem driven by a geomjax method.

    Arguments:
        system, method: the dynamics ``x_{k+1} = method.step(system, x_k, dt, u_k, t_k)``.
        state0: the initial state (its dtype sets the precision).
        dt: time step.  steps: horizon ``N`` (number of controls).
        stage_cost: ``l(t, state, u) -> scalar``; the running cost is ``Σ_k dt · l``.
        terminal_cost: ``Φ(state) -> scalar`` (default 0).
        control_dim: ``m``, the size of one control ``u_k`` ``(m,)``.
        lower, upper: control bounds ``(m,)`` (``-inf``/``inf`` entries allowed), or None.
        path_equality: ``c(t, state, u) -> (p,)``, ``= 0`` at every node ``k < N``.
        path_inequality: ``c(t, state, u) -> (q,)``, ``≤ 0`` at every node ``k < N``.
        terminal_equality, terminal_inequality: ``c(state) -> (r,)``, ``= 0`` / ``≤ 0`` at ``N``.
        chart: the state chart (default: :class:`LieGroupChart` for Lie-group systems,
            :class:`EuclideanChart` otherwise).

    Callables may be ``eqx.Module`` values whose arrays (targets, weights) are traced, so a batch
    of problems can be ``vmap``-ed."""

    system: Any
    method: AbstractMethod
    state0: Any
    dt: jax.Array
    stage_cost: Callable
    terminal_cost: Callable | None
    lower: jax.Array
    upper: jax.Array
    path_equality: Callable | None
    path_inequality: Callable | None
    terminal_equality: Callable | None
    terminal_inequality: Callable | None
    chart: AbstractStateChart
    steps: int = eqx.field(static=True)
    control_dim: int = eqx.field(static=True)
    bounded: bool = eqx.field(static=True)
    sizes: tuple = eqx.field(static=True)  # (p, q, r_eq, r_ineq)

    def __init__(
        self,
        system,
        method,
        state0,
        dt,
        steps: int,
        stage_cost: Callable,
        terminal_cost: Callable | None = None,
        *,
        control_dim: int,
        lower=None,
        upper=None,
        path_equality=None,
        path_inequality=None,
        terminal_equality=None,
        terminal_inequality=None,
        chart: AbstractStateChart | None = None,
    ):
        where = "OptimalControlProblem"
        if not isinstance(method, AbstractMethod):
            raise ValueError(f"{where}: argument 'method' must be a geomjax method, got {method!r}")
        if not (isinstance(steps, int | np.integer) and steps >= 1):
            raise ValueError(f"{where}: argument 'steps' must be a positive int, got {steps!r}")
        if not (isinstance(control_dim, int | np.integer) and control_dim >= 1):
            raise ValueError(
                f"{where}: argument 'control_dim' must be a positive int, got {control_dim!r}"
            )
        if not callable(stage_cost):
            raise ValueError(f"{where}: argument 'stage_cost' must be callable l(t, state, u)")
        self.system, self.method = system, method
        self.state0 = system.check_state(state0) if hasattr(system, "check_state") else state0
        dtype = jax.tree_util.tree_leaves(self.state0)[0].dtype
        self.dt = jnp.asarray(dt, dtype)
        if self.dt.shape != ():
            raise ValueError(f"{where}: argument 'dt' must be a scalar, got shape {self.dt.shape}")
        if not isinstance(self.dt, jax.core.Tracer) and not float(self.dt) > 0:
            raise ValueError(f"{where}: argument 'dt' must be positive, got {float(self.dt)}")
        self.steps, self.control_dim = int(steps), int(control_dim)
        m = self.control_dim
        self.bounded = lower is not None or upper is not None
        lo = jnp.full((m,), -jnp.inf, dtype) if lower is None else jnp.asarray(lower, dtype)
        hi = jnp.full((m,), jnp.inf, dtype) if upper is None else jnp.asarray(upper, dtype)
        for name, b in (("lower", lo), ("upper", hi)):
            if b.shape != (m,):
                raise ValueError(
                    f"{where}: argument '{name}' must have shape ({m},) (control_dim), got {b.shape}"
                )
        if not isinstance(lo, jax.core.Tracer) and not isinstance(hi, jax.core.Tracer):
            bad = np.asarray(lo) > np.asarray(hi)
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(
                    f"{where}: arguments 'lower' and 'upper' must satisfy lower <= upper; "
                    f"entry {i} has lower {float(lo[i])} > upper {float(hi[i])}"
                )
        self.lower, self.upper = lo, hi
        self.stage_cost = stage_cost
        self.terminal_cost = _none_or_callable(terminal_cost, "terminal_cost")
        self.path_equality = _none_or_callable(path_equality, "path_equality")
        self.path_inequality = _none_or_callable(path_inequality, "path_inequality")
        self.terminal_equality = _none_or_callable(terminal_equality, "terminal_equality")
        self.terminal_inequality = _none_or_callable(terminal_inequality, "terminal_inequality")
        self.chart = default_chart(system) if chart is None else chart
        u = jax.ShapeDtypeStruct((m,), dtype)
        t = jax.ShapeDtypeStruct((), dtype)

        def shape_of(fn, name, *args):
            try:
                out = jax.eval_shape(fn, *args)
            except Exception as e:
                raise ValueError(
                    f"{where}: calling argument '{name}' failed with {type(e).__name__}: {e}"
                ) from e
            return out

        out = shape_of(stage_cost, "stage_cost", t, self.state0, u)
        if getattr(out, "shape", None) != ():
            raise ValueError(f"{where}: argument 'stage_cost' must return a scalar, got {out}")
        if terminal_cost is not None:
            out = shape_of(terminal_cost, "terminal_cost", self.state0)
            if getattr(out, "shape", None) != ():
                raise ValueError(
                    f"{where}: argument 'terminal_cost' must return a scalar, got {out}"
                )
        sizes = []
        for name, fn, args in (
            ("path_equality", path_equality, (t, self.state0, u)),
            ("path_inequality", path_inequality, (t, self.state0, u)),
            ("terminal_equality", terminal_equality, (self.state0,)),
            ("terminal_inequality", terminal_inequality, (self.state0,)),
        ):
            if fn is None:
                sizes.append(0)
                continue
            out = shape_of(fn, name, *args)
            if len(getattr(out, "shape", (0, 0))) != 1:
                raise ValueError(f"{where}: argument '{name}' must return a vector (n,), got {out}")
            sizes.append(int(out.shape[0]))
        self.sizes = tuple(sizes)
        try:
            shape_of(
                lambda x, uu: method.step(system, x, self.dt, uu, 0.0)[0], "method", self.state0, u
            )
        except ValueError as e:
            raise ValueError(
                f"{where}: one step of argument 'method' with a control of shape ({m},) "
                f"(control_dim) failed: {e}"
            ) from e

    @property
    def dtype(self):
        return self.dt.dtype

    @property
    def times(self):
        """``(steps,)`` node times ``t_k = k dt``."""
        return self.dt * jnp.arange(self.steps, dtype=self.dtype)

    @property
    def constrained(self) -> bool:
        return any(self.sizes)

    def step(self, x, u, t):
        return self.method.step(self.system, x, self.dt, u, t)[0]

    def rollout(self, us):
        """States ``(steps + 1,)`` (leading axis) of the controls ``us`` ``(steps, m)``."""

        def body(x, inp):
            u, t = inp
            x1 = self.step(x, u, t)
            return x1, x1

        _, xs = jax.lax.scan(body, self.state0, (us, self.times))
        return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), self.state0, xs)

    def cost(self, xs, us):
        """``J = Σ dt · l(t_k, x_k, u_k) + Φ(x_N)`` of a trajectory (no constraint terms)."""
        x_run = jax.tree_util.tree_map(lambda a: a[:-1], xs)
        run = jax.vmap(self.stage_cost)(self.times, x_run, us)
        xN = jax.tree_util.tree_map(lambda a: a[-1], xs)
        term = 0.0 if self.terminal_cost is None else self.terminal_cost(xN)
        return self.dt * jnp.sum(run) + term

    def violation(self, xs, us):
        """Largest constraint violation (equalities ``|c|``, inequalities ``max(c, 0)``) and
        bound violation of a trajectory; 0 without constraints."""
        x_run = jax.tree_util.tree_map(lambda a: a[:-1], xs)
        xN = jax.tree_util.tree_map(lambda a: a[-1], xs)
        v = jnp.maximum(jnp.max(us - self.upper), jnp.max(self.lower - us))
        v = jnp.maximum(v, 0.0)
        cE, cI, tE, tI = _constraints(self, self.times, x_run, us, xN)
        for c, eq in ((cE, True), (cI, False), (tE, True), (tI, False)):
            if c.size:
                v = jnp.maximum(v, jnp.max(jnp.abs(c) if eq else jnp.maximum(c, 0.0)))
        return v


def _constraints(problem, ts, x_run, us, xN):
    """Path constraints ``(steps, p)``, ``(steps, q)`` and terminal ``(r,)``, ``(s,)``."""
    p, q, r, s = problem.sizes
    dt = problem.dtype
    n = ts.shape[0]
    cE = jax.vmap(problem.path_equality)(ts, x_run, us) if p else jnp.zeros((n, 0), dt)
    cI = jax.vmap(problem.path_inequality)(ts, x_run, us) if q else jnp.zeros((n, 0), dt)
    tE = problem.terminal_equality(xN) if r else jnp.zeros((0,), dt)
    tI = problem.terminal_inequality(xN) if s else jnp.zeros((0,), dt)
    return cE, cI, tE, tI


class _Duals(eqx.Module):
    """Multipliers and penalty of the augmented Lagrangian (empty arrays without constraints)."""

    path_eq: jax.Array  # (steps, p)
    path_ineq: jax.Array  # (steps, q)
    term_eq: jax.Array  # (r,)
    term_ineq: jax.Array  # (s,)
    penalty: jax.Array  # scalar


def _zero_duals(problem, penalty=1.0):
    p, q, r, s = problem.sizes
    dt, N = problem.dtype, problem.steps
    return _Duals(
        jnp.zeros((N, p), dt),
        jnp.zeros((N, q), dt),
        jnp.zeros((r,), dt),
        jnp.zeros((s,), dt),
        jnp.asarray(penalty, dt),
    )


def _al_eq(c, lam, rho):
    """``λᵀc + ρ/2 |c|²`` (equality), 0 for empty ``c``."""
    return jnp.dot(lam, c) + 0.5 * rho * jnp.dot(c, c)


def _al_ineq(c, lam, rho):
    """``(|max(0, λ + ρ c)|² − |λ|²) / (2ρ)`` (Powell–Hestenes–Rockafellar, ``c ≤ 0``)."""
    z = jnp.maximum(lam + rho * c, 0.0)
    return (jnp.dot(z, z) - jnp.dot(lam, lam)) / (2 * rho)


def _node_cost(problem, t, x, u, lam_e, lam_i, rho):
    """``dt · l + `` the path constraints' augmented-Lagrangian terms (node ``k < N``)."""
    c = problem.dt * problem.stage_cost(t, x, u)
    p, q, _, _ = problem.sizes
    if p:
        c = c + _al_eq(problem.path_equality(t, x, u), lam_e, rho)
    if q:
        c = c + _al_ineq(problem.path_inequality(t, x, u), lam_i, rho)
    return c


def _terminal_cost(problem, x, lam_e, lam_i, rho):
    c = jnp.zeros((), problem.dtype) if problem.terminal_cost is None else problem.terminal_cost(x)
    _, _, r, s = problem.sizes
    if r:
        c = c + _al_eq(problem.terminal_equality(x), lam_e, rho)
    if s:
        c = c + _al_ineq(problem.terminal_inequality(x), lam_i, rho)
    return c


def _total_cost(problem, xs, us, duals):
    x_run = jax.tree_util.tree_map(lambda a: a[:-1], xs)
    xN = jax.tree_util.tree_map(lambda a: a[-1], xs)
    run = jax.vmap(lambda t, x, u, le, li: _node_cost(problem, t, x, u, le, li, duals.penalty))(
        problem.times, x_run, us, duals.path_eq, duals.path_ineq
    )
    return jnp.sum(run) + _terminal_cost(problem, xN, duals.term_eq, duals.term_ineq, duals.penalty)


# --- box QP -------------------------------------------------------------------------------------
def box_qp(H, g, lower, upper, x0, iters: int = 20, line_steps: int = 12):
    """``min ½ xᵀHx + gᵀx`` subject to ``lower ≤ x ≤ upper`` by projected Newton (Tassa, Mansard &
    Todorov 2014, Algorithm 1): the active set is the clamped coordinates whose gradient points
    out of the box, a Newton step on the free block, and a projected Armijo line search.

    Arguments: ``H`` ``(m, m)`` SPD on the free block, ``g``, ``lower``, ``upper``, ``x0`` ``(m,)``
    (the warm start); a fixed number of iterations (jittable, vmappable).

    Returns ``(x, free, chol, ok)``: the minimizer, the free mask ``(m,)``, the Cholesky factor of
    ``H`` restricted to the free block (identity on the clamped rows, for the feedback gains) and
    whether the factorization succeeded (False when the free block is not positive definite)."""
    m = g.shape[0]
    eye = jnp.eye(m, dtype=H.dtype)

    def f(x):
        return 0.5 * x @ H @ x + g @ x

    def active(x):
        grad = g + H @ x
        clamped = ((x <= lower) & (grad > 0)) | ((x >= upper) & (grad < 0))
        return ~clamped, grad

    def factor(free):
        Hf = jnp.where(free[:, None] & free[None, :], H, eye)
        return jnp.linalg.cholesky(Hf)

    def body(_, carry):
        x, done = carry
        free, grad = active(x)
        L = factor(free)
        # Newton target on the free block with the clamped coordinates held
        rhs = jnp.where(free, -(g + H @ jnp.where(free, 0.0, x)), 0.0)
        y = jax.scipy.linalg.cho_solve((L, True), rhs)
        dx = jnp.where(free, y - x, 0.0)
        f0 = f(x)
        s = 0.5 ** jnp.arange(line_steps, dtype=H.dtype)
        trial = jnp.clip(x[None] + s[:, None] * dx[None], lower, upper)
        ft = jax.vmap(f)(trial)
        ok = ft <= f0 + 0.1 * (trial - x[None]) @ grad
        ok = ok & jnp.isfinite(ft)
        j = jnp.argmax(ok)
        moved = jnp.any(ok) & ~done
        x1 = jnp.where(moved, trial[j], x)
        gfree = jnp.max(jnp.abs(jnp.where(free, grad, 0.0)), initial=0.0)
        small = gfree <= 1e3 * jnp.finfo(H.dtype).eps * (1 + jnp.max(jnp.abs(g)))
        return x1, done | ~jnp.any(ok) | small

    x = jnp.clip(x0, lower, upper)
    x, _ = jax.lax.fori_loop(0, iters, body, (x, jnp.zeros((), bool)))
    free, _ = active(x)
    L = factor(free)
    ok = jnp.all(jnp.isfinite(L))
    return x, free, L, ok


# --- solvers ------------------------------------------------------------------------------------
class AbstractDDPSolver(eqx.Module):
    """Settings shared by :class:`ILQR` and :class:`DDP` (defaults from crocoddyl's FDDP).

    Fields:
        tol: stop once the iterate is feasible (no gaps) and the expected improvement of a full
            step ``|d₁ + d₂/2|`` is below ``tol · (1 + |J|)`` (default: 1e-10 in float64, 1e-5 in
            float32).
        reg_init, reg_min, reg_max, reg_factor: Levenberg–Marquardt regularization of ``Q_uu``.
        line_steps: step lengths ``1, ½, …, 2^{1−line_steps}``.
        accept: a step is accepted when the cost decrease is ``≥ accept ×`` the expected one.
        accept_increase: while gaps remain, a predicted increase may be exceeded by this factor.
        qp_iters: projected-Newton iterations of the box QP per node.
    """

    tol: float | None = None
    reg_init: float = 1e-9
    reg_min: float = 1e-9
    reg_max: float = 1e9
    reg_factor: float = 10.0
    line_steps: int = eqx.field(static=True, default=10)
    accept: float = 0.1
    accept_increase: float = 2.0
    qp_iters: int = eqx.field(static=True, default=20)
    second_order: ClassVar[bool] = False


class ILQR(AbstractDDPSolver):
    """Iterative LQR (Gauss–Newton DDP: first-order dynamics, exact cost Hessians) in the
    left-trivialized chart, control-limited by the box QP, with multiple-shooting gaps.  See the
    module docstring for the recursion."""

    second_order: ClassVar[bool] = False


class DDP(AbstractDDPSolver):
    """Differential dynamic programming: :class:`ILQR` plus the second-order dynamics terms
    ``V'_x · ∂²f`` (the Hessian of ``(δ, w) ↦ f(x̄ ⊕ δ, ū + w) ⊖ x̄'`` by JAX autodiff, the chart's
    curvature included) in ``Q_xx, Q_ux, Q_uu``.  The contraction is computed in the backward
    pass as the Hessian of the scalar ``z ↦ V'_x · F(z)`` (forward-over-reverse, ``n + m``
    Hessian-vector products per node) rather than the full ``(n, n + m, n + m)`` tensor; its cost
    per iteration is a few iLQR iterations (quadrotor: ~5×)."""

    second_order: ClassVar[bool] = True


class AugmentedLagrangian(eqx.Module):
    """Augmented-Lagrangian outer loop (Powell–Hestenes–Rockafellar; Howell, Jackson & Manchester,
    *ALTRO*, IROS 2019, §III) around an inner :class:`ILQR`/:class:`DDP` solve, for the path and
    terminal equality/inequality constraints (control bounds stay in the inner box QP).

    Each outer iteration solves the inner problem with ``J + Σ λᵀc + ρ/2 |c|²`` (inequalities by
    their PHR term) for at most ``inner_iters`` iterations, then ``λ ← λ + ρ c`` (``max(0, ·)``
    for inequalities) and ``ρ ← penalty_factor · ρ`` when the violation did not drop below
    ``¼`` of its previous value.  Converged when the violation is ``≤ constraint_tol`` and the
    inner solve converged."""

    inner: AbstractDDPSolver = ILQR()
    inner_iters: int = eqx.field(static=True, default=50)
    constraint_tol: float = 1e-6
    penalty_init: float = 10.0
    penalty_factor: float = 10.0
    penalty_max: float = 1e10


# status codes
SUCCESSFUL, MAX_ITERS, REG_LIMIT, NONFINITE, CONSTRAINTS = 0, 1, 2, 3, 4
_MESSAGES = {
    SUCCESSFUL: "converged",
    MAX_ITERS: "maximum number of iterations reached before convergence",
    REG_LIMIT: "regularization limit reached: no descent step found (infeasible or ill-posed)",
    NONFINITE: "the cost or the dynamics returned NaN or inf at the initial guess",
    CONSTRAINTS: "constraints not met within the outer iterations",
}
_REASONS = {
    SUCCESSFUL: "converged",
    MAX_ITERS: "max_iters",
    REG_LIMIT: "regularization_limit",
    NONFINITE: "nonfinite",
    CONSTRAINTS: "constraints_not_met",
}


class OCPSolution(eqx.Module):
    """Result of :func:`solve_ocp` (a pytree: it can leave ``jit``/``vmap``).

    Attributes:
        xs: states with a leading axis ``(steps + 1,)`` (the layout of ``Solution.states``).
        us: controls ``(steps, m)``.
        K, k: feedback and feedforward gains of the last backward pass ``(steps, m, n)``,
            ``(steps, m)`` (``u = ū + K (x ⊖ x̄)`` near the optimum).
        cost: ``J`` at the solution (without constraint terms).
        violation: largest constraint/bound violation.
        result: status code (see :attr:`stop_reason`, :attr:`message`).
        iterations: iterations run (inner iterations in total for :class:`AugmentedLagrangian`).
        history: per-iteration arrays ``(max_iters,)``, NaN after the last: ``cost`` (before the
            step, including the augmented-Lagrangian terms), ``gap`` (largest multiple-shooting
            defect), ``reg``, ``step`` (accepted ``α``, 0 if none), ``stop`` (expected
            improvement ``|d₁ + d₂/2|``), ``time`` (wall seconds at the end of the iteration
            since the call, eager solves only, see :func:`solve_ocp`).  For
            :class:`AugmentedLagrangian` one entry per outer iteration ``(max_outer,)``:
            ``cost``, ``violation``, ``penalty``, ``inner_iterations``, ``time``.
        duals: the multipliers and penalty (warm start of another solve).
    """

    xs: Any
    us: jax.Array
    K: jax.Array
    k: jax.Array
    cost: jax.Array
    violation: jax.Array
    result: jax.Array
    iterations: jax.Array
    history: dict
    duals: Any

    @property
    def stop_reason(self) -> str:
        return _REASONS[int(np.asarray(self.result).reshape(-1).max())]

    @property
    def message(self) -> str:
        return _MESSAGES[int(np.asarray(self.result).reshape(-1).max())]

    @property
    def succeeded(self):
        return self.result == SUCCESSFUL

    def check(self) -> OCPSolution:
        """Raise :class:`geomjax.integrators.simulate.ConvergenceError` unless every member
        converged (eager only)."""
        r = np.asarray(self.result)
        if (r != SUCCESSFUL).any():
            bad = int(r.reshape(-1)[np.argmax(r.reshape(-1) != SUCCESSFUL)])
            raise ConvergenceError(
                f"solve_ocp: {_MESSAGES[bad]} ({int(np.asarray(self.iterations).max())} "
                f"iterations, violation {float(np.max(np.asarray(self.violation))):.3g})"
            )
        return self

    def __repr__(self) -> str:
        try:
            return (
                f"OCPSolution(stop_reason={self.stop_reason!r}, cost={np.asarray(self.cost)}, "
                f"iterations={np.asarray(self.iterations)}, violation={np.asarray(self.violation)})"
            )
        except Exception:
            return "OCPSolution(<traced>)"


# --- one iteration ------------------------------------------------------------------------------
def _index(tree, i):
    return jax.tree_util.tree_map(lambda a: a[i], tree)


def _stack_head(x0, rest):
    return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), x0, rest)


def _linearize(problem, xs, us, duals):
    """Per-node derivatives in the chart (vmapped over the horizon) and the terminal ones."""
    sys, chart = problem.system, problem.chart
    x_run = _index(xs, slice(None, -1))
    x_next = _index(xs, slice(1, None))
    xN = _index(xs, -1)
    n = chart.dim(sys, problem.state0)
    dtype = problem.dtype

    def node(x, u, xn, t, le, li):
        F = _node_map(problem, x, u, xn, t)

        def at(z):
            return chart.plus(sys, x, z[:n]), u + z[n:]

        def F_aux(z):
            y = F(z)
            return y, y

        z0 = jnp.zeros(n + problem.control_dim, dtype)
        J, gap = jax.jacfwd(F_aux, has_aux=True)(z0)
        p, q, _, _ = problem.sizes
        grad, hess = _cost_derivatives(problem.stage_cost, lambda z: (t, *at(z)), z0)
        grad, hess = problem.dt * grad, problem.dt * hess
        if p:
            g_, h_ = _al_derivatives(
                lambda z: problem.path_equality(t, *at(z)), le, duals.penalty, True, z0
            )
            grad, hess = grad + g_, hess + h_
        if q:
            g_, h_ = _al_derivatives(
                lambda z: problem.path_inequality(t, *at(z)), li, duals.penalty, False, z0
            )
            grad, hess = grad + g_, hess + h_
        return dict(gap=gap, A=J[:, :n], B=J[:, n:], lx=grad[:n], lu=grad[n:], hess=hess)

    lin = jax.vmap(node)(x_run, us, x_next, problem.times, duals.path_eq, duals.path_ineq)

    def atN(z):
        return (chart.plus(sys, xN, z),)

    z0 = jnp.zeros(n, dtype)
    _, _, r, s_ = problem.sizes
    if problem.terminal_cost is None:
        grad, hess = jnp.zeros(n, dtype), jnp.zeros((n, n), dtype)
    else:
        grad, hess = _cost_derivatives(problem.terminal_cost, atN, z0)
    if r:
        g_, h_ = _al_derivatives(
            lambda z: problem.terminal_equality(*atN(z)), duals.term_eq, duals.penalty, True, z0
        )
        grad, hess = grad + g_, hess + h_
    if s_:
        g_, h_ = _al_derivatives(
            lambda z: problem.terminal_inequality(*atN(z)),
            duals.term_ineq,
            duals.penalty,
            False,
            z0,
        )
        grad, hess = grad + g_, hess + h_
    return lin, grad, hess


def _node_map(problem, x, u, xn, t):
    """``F(z) = f(x̄ ⊕ δ, ū + w) ⊖ x̄'`` of a node, ``z = (δ, w)`` ``(n + m,)``."""
    sys, chart = problem.system, problem.chart
    n = chart.dim(sys, problem.state0)

    def F(z):
        return chart.minus(sys, problem.step(chart.plus(sys, x, z[:n]), u + z[n:], t), xn)

    return F


def _dynamics_curvature(problem, x, u, xn, t, v):
    """DDP's second-order dynamics term ``v · ∂²F`` ``(n + m, n + m)``: the Hessian of the scalar
    ``z ↦ v · F(z)`` at 0 (forward-over-reverse: ``n + m`` Hessian-vector products, instead of
    the ``(n + m)²`` directions of the full tensor ``∂²F`` that is then contracted)."""
    F = _node_map(problem, x, u, xn, t)
    z0 = jnp.zeros(v.shape[0] + problem.control_dim, v.dtype)
    return jax.hessian(lambda z: jnp.dot(v, F(z)))(z0)


def _cost_derivatives(cost, args_of, z0):
    """Gradient and Hessian in the chart of ``cost(*args_of(z))`` at ``z0``: Gauss–Newton for a
    :class:`ResidualCost`, exact otherwise."""
    if isinstance(cost, ResidualCost):
        return _gauss_newton(lambda z: cost.residual(*args_of(z)), cost.weights, z0)

    def f(z):
        return cost(*args_of(z))

    return jax.grad(f)(z0), jax.hessian(f)(z0)


def _al_derivatives(constraint, lam, rho, equality, z0):
    """Gauss–Newton derivatives of the augmented-Lagrangian term of ``constraint(z)``: gradient
    ``Jᵀ(λ + ρc)`` (equalities; ``Jᵀ max(0, λ + ρc)`` for inequalities) — exact — and Hessian
    ``ρ JᵀJ`` (on the active inequalities), the curvature ``λ·∇²c`` of the constraint dropped."""

    def aux(z):
        c = constraint(z)
        return c, c

    J, c = jax.jacfwd(aux, has_aux=True)(z0)
    if equality:
        y, active = lam + rho * c, jnp.ones_like(c)
    else:
        y = jnp.maximum(lam + rho * c, 0.0)
        active = (y > 0).astype(c.dtype)
    return J.T @ y, rho * (J.T * active) @ J


def _gauss_newton(residual, weights, z0):
    """``(Jᵀ W r, Jᵀ W J)`` of ``½ Σ w r²`` at ``z0``."""

    def aux(z):
        r = residual(z)
        return r, r

    J, r = jax.jacfwd(aux, has_aux=True)(z0)
    w = jnp.asarray(weights, r.dtype) * jnp.ones_like(r)
    return J.T @ (w * r), (J.T * w) @ J


def _backward(problem, solver, lin, Vx_N, Vxx_N, gaps_next, xs, us, k_prev, reg):
    """The Riccati recursion with the box QP; returns gains, value derivatives, the expected
    improvement pieces and whether every factorization succeeded."""
    n = Vx_N.shape[0]
    m = problem.control_dim
    eye = jnp.eye(m, dtype=problem.dtype)

    def body(carry, inp):
        Vx, Vxx = carry
        li, f_next, u, kp, x, xn, t = inp
        A, B = li["A"], li["B"]
        H = li["hess"]
        Vx_eff = Vx + Vxx @ f_next
        Qx = li["lx"] + A.T @ Vx_eff
        Qu = li["lu"] + B.T @ Vx_eff
        Qxx = H[:n, :n] + A.T @ Vxx @ A
        Qux = H[n:, :n] + B.T @ Vxx @ A
        Quu = H[n:, n:] + B.T @ Vxx @ B
        if solver.second_order:
            S = _dynamics_curvature(problem, x, u, xn, t, Vx_eff)
            Qxx = Qxx + S[:n, :n]
            Qux = Qux + S[n:, :n]
            Quu = Quu + S[n:, n:]
        Quu = 0.5 * (Quu + Quu.T)
        Hr = Quu + reg * eye
        if problem.bounded:
            kff, free, L, ok = box_qp(
                Hr, Qu, problem.lower - u, problem.upper - u, kp, solver.qp_iters
            )
            rhs = jnp.where(free[:, None], Qux, 0.0)
            K = jnp.where(free[:, None], -jax.scipy.linalg.cho_solve((L, True), rhs), 0.0)
        else:
            L = jnp.linalg.cholesky(Hr)
            ok = jnp.all(jnp.isfinite(L))
            sol = -jax.scipy.linalg.cho_solve((L, True), jnp.concatenate([Qu[:, None], Qux], 1))
            kff, K = sol[:, 0], sol[:, 1:]
        Vx1 = Qx + K.T @ Quu @ kff + K.T @ Qu + Qux.T @ kff
        Vxx1 = Qxx + K.T @ Quu @ K + K.T @ Qux + Qux.T @ K
        Vxx1 = 0.5 * (Vxx1 + Vxx1.T)
        out = dict(K=K, k=kff, Vx=Vx1, Vxx=Vxx1, Quk=Qu @ kff, kQk=kff @ Quu @ kff, ok=ok)
        return (Vx1, Vxx1), out

    inputs = (lin, gaps_next, us, k_prev, _index(xs, slice(None, -1)), _index(xs, slice(1, None)))
    (_, _), out = jax.lax.scan(body, (Vx_N, Vxx_N), (*inputs, problem.times), reverse=True)
    ok = jnp.all(out["ok"]) & jnp.all(jnp.isfinite(out["Vxx"])) & jnp.all(jnp.isfinite(out["k"]))
    return out, ok


def _forward(problem, xs, us, gaps, K, k, alpha, feasible, duals):
    """Rollout with ``u = clip(ū + α k + K (x ⊖ x̄))``, closing ``α`` of the gaps; returns the new
    trajectory, its cost and the deviations ``x ⊖ x̄`` ``(steps + 1, n)``."""
    sys, chart = problem.system, problem.chart
    rho = duals.penalty
    x_run = _index(xs, slice(None, -1))

    def body(x, inp):
        xb, ub, Kk, kk, g_next, t, le, li = inp
        dx = chart.minus(sys, x, xb)
        u = jnp.clip(ub + alpha * kk + Kk @ dx, problem.lower, problem.upper)
        c = _node_cost(problem, t, x, u, le, li, rho)
        xn = problem.step(x, u, t)
        xn = jax.lax.cond(
            feasible,
            lambda: xn,
            lambda: chart.plus(sys, xn, (alpha - 1.0) * g_next),
        )
        return xn, (x, u, c, dx)

    inputs = (x_run, us, K, k, gaps, problem.times, duals.path_eq, duals.path_ineq)
    xN, (x_new, u_new, c, dx) = jax.lax.scan(body, problem.state0, inputs)
    dxN = chart.minus(sys, xN, _index(xs, -1))
    cost = jnp.sum(c) + _terminal_cost(problem, xN, duals.term_eq, duals.term_ineq, rho)
    xs_new = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b[None]]), x_new, xN)
    cost = jnp.where(jnp.isfinite(cost), cost, jnp.inf)
    return xs_new, u_new, cost, jnp.concatenate([dx, dxN[None]])


def _default_tol(solver, dtype):
    if solver.tol is not None:
        return solver.tol
    return 1e-10 if jnp.finfo(dtype).bits > 32 else 1e-5


class _State(eqx.Module):
    xs: Any
    us: jax.Array
    cost: jax.Array
    feasible: jax.Array
    reg: jax.Array
    it: jax.Array
    result: jax.Array
    done: jax.Array
    K: jax.Array
    k: jax.Array
    hist: dict


def _ddp_loop(problem, solver, xs, us, feasible, duals, max_iters, k_init=None, monitor=False):
    """The compiled inner loop: ``max_iters`` iterations at most (one ``lax.while_loop``);
    ``monitor``: report each iteration to the host (:class:`_Monitor`)."""
    dtype = problem.dtype
    n = problem.chart.dim(problem.system, problem.state0)
    m, N = problem.control_dim, problem.steps
    tol = _default_tol(solver, dtype)
    alphas = 0.5 ** jnp.arange(solver.line_steps, dtype=dtype)
    nan = jnp.full((max_iters,), jnp.nan, dtype)
    hist = dict(cost=nan, gap=nan, reg=nan, step=nan, stop=nan, time=nan)
    cost0 = _total_cost(problem, xs, us, duals)
    finite0 = jnp.isfinite(cost0)
    state = _State(
        xs=xs,
        us=us,
        cost=cost0,
        feasible=jnp.asarray(feasible),
        reg=jnp.asarray(solver.reg_init, dtype),
        it=jnp.zeros((), jnp.int32),
        result=jnp.where(finite0, MAX_ITERS, NONFINITE).astype(jnp.int32),
        done=~finite0,
        K=jnp.zeros((N, m, n), dtype),
        k=jnp.zeros((N, m), dtype) if k_init is None else k_init,
        hist=hist,
    )

    def body(s):
        lin, VxN, VxxN = _linearize(problem, s.xs, s.us, duals)
        gaps = jnp.where(s.feasible, 0.0, lin["gap"])

        # backward pass, raising the regularization until every factorization succeeds
        def bw(reg):
            return _backward(problem, solver, lin, VxN, VxxN, gaps, s.xs, s.us, s.k, reg)

        # the backward pass appears once in the program (inside the loop, run at least once):
        # a first call outside it would double the compiled code (DDP's curvature terms most)
        def retry_cond(c):
            reg, _, ok, first = c
            return first | (~ok & (reg < solver.reg_max))

        def retry_body(c):
            reg, _, _, first = c
            reg = jnp.where(first, reg, jnp.minimum(reg * solver.reg_factor, solver.reg_max))
            out, ok = bw(reg)
            return reg, out, ok, jnp.zeros((), bool)

        shapes = jax.eval_shape(bw, s.reg)
        out0, ok0 = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)
        init = (s.reg, out0, ok0, jnp.ones((), bool))
        reg, out, ok, _ = jax.lax.while_loop(retry_cond, retry_body, init)
        Vx = jnp.concatenate([out["Vx"], VxN[None]])
        Vxx = jnp.concatenate([out["Vxx"], VxxN[None]])
        f_all = jnp.concatenate([jnp.zeros((1, n), dtype), gaps])  # gap into node k (f_0 = 0)
        dg = -jnp.sum(out["Quk"]) - jnp.sum(Vx * f_all)
        dq = -jnp.sum(out["kQk"]) + jnp.einsum("ti,tij,tj->", f_all, Vxx, f_all)
        stop = jnp.abs(dg + 0.5 * dq)
        converged = ok & s.feasible & (stop <= tol * (1 + jnp.abs(s.cost)))

        # line search on the expected improvement
        def ls_cond(c):
            i, accepted = c[0], c[1]
            return (i < solver.line_steps) & ~accepted & ok & ~converged

        def ls_body(c):
            i, _, _, _, _, _ = c
            a = alphas[i]
            xs_t, us_t, cost_t, dx = _forward(
                problem, s.xs, s.us, gaps, out["K"], out["k"], a, s.feasible, duals
            )
            dv = jnp.einsum("ti,tij,tj->", f_all, Vxx, dx)
            d1, d2 = dg + dv, dq - 2 * dv
            expected = a * (d1 + 0.5 * a * d2)
            actual = s.cost - cost_t
            small = d1 < 1e-12
            acc_pos = (expected > 0) & (small | (actual >= solver.accept * expected))
            acc_neg = (expected <= 0) & (small | (actual >= solver.accept_increase * expected))
            accepted = jnp.isfinite(cost_t) & (acc_pos | acc_neg)
            return i + 1, accepted, xs_t, us_t, cost_t, a

        init = (
            jnp.zeros((), jnp.int32),
            jnp.zeros((), bool),
            s.xs,
            s.us,
            s.cost,
            jnp.zeros((), dtype),
        )
        _, accepted, xs_t, us_t, cost_t, a = jax.lax.while_loop(ls_cond, ls_body, init)
        step = jnp.where(accepted, a, 0.0)
        xs1 = jax.tree_util.tree_map(lambda p, q: jnp.where(accepted, p, q), xs_t, s.xs)
        us1 = jnp.where(accepted, us_t, s.us)
        cost1 = jnp.where(accepted, cost_t, s.cost)
        feasible1 = s.feasible | (accepted & (a == 1.0))
        reg1 = jnp.where(
            accepted & (a > 0.5), jnp.maximum(reg / solver.reg_factor, solver.reg_min), reg
        )
        reg1 = jnp.where(~accepted & ~converged, reg1 * solver.reg_factor, reg1)
        give_up = (~ok | (~accepted & ~converged)) & (reg1 >= solver.reg_max)
        result = jnp.where(converged, SUCCESSFUL, jnp.where(give_up, REG_LIMIT, s.result))
        done = converged | give_up | (s.it + 1 >= max_iters)
        if monitor:
            jax.debug.callback(_tick, s.it, cost1, ordered=True)
        hist = dict(
            cost=s.hist["cost"].at[s.it].set(s.cost),
            gap=s.hist["gap"].at[s.it].set(jnp.max(jnp.abs(gaps), initial=0.0)),
            reg=s.hist["reg"].at[s.it].set(reg),
            step=s.hist["step"].at[s.it].set(step),
            stop=s.hist["stop"].at[s.it].set(stop),
            time=s.hist["time"],
        )
        return _State(
            xs1,
            us1,
            cost1,
            feasible1,
            reg1,
            s.it + 1,
            result.astype(jnp.int32),
            done,
            out["K"],
            out["k"],
            hist,
        )

    return jax.lax.while_loop(lambda s: ~s.done, body, state)


def _check_initial(problem, us, xs):
    m, N = problem.control_dim, problem.steps
    if us is None:
        us = jnp.zeros((N, m), problem.dtype)
    us = jnp.asarray(us, problem.dtype)
    if us.shape != (N, m):
        raise ValueError(
            f"solve_ocp: argument 'us' must have shape (steps, control_dim) = ({N}, {m}), "
            f"got {us.shape}"
        )
    if xs is not None:
        lead = {a.shape[0] for a in jax.tree_util.tree_leaves(xs)}
        if lead != {N + 1}:
            raise ValueError(
                f"solve_ocp: argument 'xs' must have a leading axis of steps + 1 = {N + 1}, "
                f"got {sorted(lead)}"
            )
    return us, xs


class _Monitor:
    """Host side of an eager solve: the wall time at the end of each iteration (reported by
    ``jax.debug.callback`` from the compiled loop) and the tqdm progress bar, created after the
    first iteration (which includes the compilation), as :func:`geomjax.control.optimize` does."""

    active: _Monitor | None = None  # the solve in progress (the callback is one fixed function)

    def __init__(self, total, progress, desc):
        self.total, self.progress, self.desc = total, progress, desc
        self.times, self.bar = [], None
        self.t0 = time.perf_counter()

    def tick(self, it, cost):
        now = time.perf_counter() - self.t0
        if not self.times and self.progress:
            try:
                from tqdm.auto import tqdm
            except ImportError:  # a declared dependency, but the solver must not need it
                tqdm = None
            if tqdm is not None:
                desc = f"{self.desc} (compile + 1st iteration {now:.2f} s)"
                self.bar = tqdm(total=self.total, desc=desc, leave=False)
        self.times.append(now)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(cost=f"{cost:.6e}", refresh=False)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _tick(it, cost):
    m = _Monitor.active
    if m is not None:
        m.tick(int(it), float(cost))


@eqx.filter_jit
def _solve(problem, solver, us, xs, max_iters, monitor=False):
    us = jnp.clip(us, problem.lower, problem.upper)
    if xs is None:
        xs, feasible = problem.rollout(us), True
    else:
        xs = jax.tree_util.tree_map(lambda a, b: a.at[0].set(b), xs, problem.state0)
        feasible = False
    if isinstance(solver, AugmentedLagrangian):
        return _al_solve(problem, solver, us, xs, feasible, max_iters, monitor)
    s = _ddp_loop(
        problem, solver, xs, us, feasible, _zero_duals(problem), max_iters, monitor=monitor
    )
    return OCPSolution(
        xs=s.xs,
        us=s.us,
        K=s.K,
        k=s.k,
        cost=problem.cost(s.xs, s.us),
        violation=jnp.maximum(
            problem.violation(s.xs, s.us),
            jnp.where(s.feasible, 0.0, jnp.inf),  # gaps left open: not a trajectory
        ),
        result=s.result,
        iterations=s.it,
        history=s.hist,
        duals=_zero_duals(problem),
    )


def _al_solve(problem, solver, us, xs, feasible, max_outer, monitor=False):
    dtype = problem.dtype
    inner = solver.inner
    N = problem.steps
    n = problem.chart.dim(problem.system, problem.state0)
    m = problem.control_dim
    nan = jnp.full((max_outer,), jnp.nan, dtype)

    def viol(xs, us):
        x_run, xN = _index(xs, slice(None, -1)), _index(xs, -1)
        cE, cI, tE, tI = _constraints(problem, problem.times, x_run, us, xN)
        return cE, cI, tE, tI

    def max_viol(c):
        cE, cI, tE, tI = c
        v = jnp.zeros((), dtype)
        for a, eq in ((cE, True), (cI, False), (tE, True), (tI, False)):
            if a.size:
                v = jnp.maximum(v, jnp.max(jnp.abs(a) if eq else jnp.maximum(a, 0.0)))
        return v

    duals0 = _zero_duals(problem, solver.penalty_init)
    v0 = max_viol(viol(xs, us))
    inner_hist = dict(cost=nan, violation=nan, penalty=nan, inner_iterations=nan, time=nan)
    carry0 = dict(
        xs=xs,
        us=us,
        duals=duals0,
        v=v0,
        feasible=jnp.asarray(feasible),
        it=jnp.zeros((), jnp.int32),
        total=jnp.zeros((), jnp.int32),
        result=jnp.asarray(CONSTRAINTS, jnp.int32),
        done=jnp.zeros((), bool),
        K=jnp.zeros((N, m, n), dtype),
        k=jnp.zeros((N, m), dtype),
        hist=inner_hist,
    )

    def body(c):
        s = _ddp_loop(
            problem, inner, c["xs"], c["us"], c["feasible"], c["duals"], solver.inner_iters, c["k"]
        )
        cons = viol(s.xs, s.us)
        v = max_viol(cons)
        d = c["duals"]
        rho = d.penalty
        cE, cI, tE, tI = cons
        duals = _Duals(
            d.path_eq + rho * cE,
            jnp.maximum(d.path_ineq + rho * cI, 0.0),
            d.term_eq + rho * tE,
            jnp.maximum(d.term_ineq + rho * tI, 0.0),
            jnp.where(
                v > 0.25 * c["v"], jnp.minimum(rho * solver.penalty_factor, solver.penalty_max), rho
            ),
        )
        ok_inner = s.result == SUCCESSFUL
        met = v <= solver.constraint_tol
        success = met & ok_inner & s.feasible
        failed = (s.result == NONFINITE) | ((s.result == REG_LIMIT) & (rho >= solver.penalty_max))
        result = jnp.where(
            success, SUCCESSFUL, jnp.where(s.result == NONFINITE, NONFINITE, CONSTRAINTS)
        )
        it = c["it"]
        if monitor:
            jax.debug.callback(_tick, it, problem.cost(s.xs, s.us), ordered=True)
        hist = dict(
            cost=c["hist"]["cost"].at[it].set(problem.cost(s.xs, s.us)),
            violation=c["hist"]["violation"].at[it].set(v),
            penalty=c["hist"]["penalty"].at[it].set(rho),
            inner_iterations=c["hist"]["inner_iterations"].at[it].set(s.it.astype(dtype)),
            time=c["hist"]["time"],
        )
        # keep the multipliers of the converged iterate (the KKT multipliers)
        duals = jax.tree_util.tree_map(lambda a, b: jnp.where(success, b, a), duals, d)
        return dict(
            xs=s.xs,
            us=s.us,
            duals=duals,
            v=v,
            feasible=s.feasible,
            it=it + 1,
            total=c["total"] + s.it,
            result=result.astype(jnp.int32),
            done=success | failed | (it + 1 >= max_outer),
            K=s.K,
            k=s.k,
            hist=hist,
        )

    c = jax.lax.while_loop(lambda c: ~c["done"], body, carry0)
    hist = dict(c["hist"])
    return OCPSolution(
        xs=c["xs"],
        us=c["us"],
        K=c["K"],
        k=c["k"],
        cost=problem.cost(c["xs"], c["us"]),
        violation=problem.violation(c["xs"], c["us"]),
        result=c["result"],
        iterations=c["total"],
        history=hist,
        duals=c["duals"],
    )


def solve_ocp(
    problem: OptimalControlProblem,
    solver=None,
    us=None,
    xs=None,
    *,
    max_iters: int = 100,
    progress: bool | None = None,
) -> OCPSolution:
    """Solve ``problem`` with ``solver`` (:class:`DDP` by default; :class:`ILQR`,
    :class:`AugmentedLagrangian`).

    Arguments:
        us: initial controls ``(steps, control_dim)`` (default zeros), clipped to the bounds.
        xs: initial states (leading axis ``steps + 1``): a multiple-shooting start (the gaps are
            closed by the forward passes); default: the rollout of ``us``.
        max_iters: iteration cap (outer iterations for :class:`AugmentedLagrangian`, whose inner
            solves have ``inner_iters`` each).
        progress: a tqdm progress bar over the iterations, started after the first one (which
            compiles).  Default: on when called eagerly, off under ``jit``/``vmap``.

    Called eagerly, the compiled loop reports each iteration to the host: ``history["time"]``
    is the wall time (s) at the end of each iteration since the call (its first entry includes
    the compilation; ``time[-1] − time[0]`` is the run after it).  Under a trace it is NaN.

    Jittable and vmappable (one compiled ``lax.while_loop``).  Eagerly, a cost or dynamics that is
    not finite at the initial guess raises ``ValueError``; any other failure is reported in
    :attr:`OCPSolution.result` (see :meth:`OCPSolution.check`)."""
    if not isinstance(problem, OptimalControlProblem):
        raise ValueError(
            f"solve_ocp: argument 'problem' must be an OptimalControlProblem, got {type(problem)}"
        )
    solver = DDP() if solver is None else solver
    if not isinstance(solver, AbstractDDPSolver | AugmentedLagrangian):
        raise ValueError(
            f"solve_ocp: argument 'solver' must be ILQR(), DDP() or AugmentedLagrangian(), got {solver!r}"
        )
    if problem.constrained and not isinstance(solver, AugmentedLagrangian):
        raise ValueError(
            "solve_ocp: the problem has path/terminal constraints; pass "
            "solver=AugmentedLagrangian(inner=...) (control bounds alone need no wrapper)"
        )
    if not (isinstance(max_iters, int | np.integer) and max_iters >= 1):
        raise ValueError(
            f"solve_ocp: argument 'max_iters' must be a positive int, got {max_iters!r}"
        )
    us, xs = _check_initial(problem, us, xs)
    # the solver's float settings as arrays of the problem's dtype: traced, not static, so that
    # other tolerances or penalties reuse the compiled program (one compilation per structure)
    solver = jax.tree_util.tree_map(
        lambda v: jnp.asarray(v, problem.dtype) if isinstance(v, float) else v, solver
    )
    eager = not any(
        isinstance(leaf, jax.core.Tracer)
        for leaf in jax.tree_util.tree_leaves((problem, solver, us, xs))
    )
    if not eager:
        sol = _solve(problem, solver, us, xs, int(max_iters))
    else:
        name = type(solver).__name__
        monitor = _Monitor(int(max_iters), progress is None or bool(progress), f"solve_ocp {name}")
        previous, _Monitor.active = _Monitor.active, monitor
        try:
            sol = _solve(problem, solver, us, xs, int(max_iters), True)
            jax.block_until_ready(sol.us)
            jax.effects_barrier()
        finally:
            _Monitor.active = previous
            monitor.close()
        t = np.full(int(max_iters), np.nan)
        n = min(len(monitor.times), t.size)
        t[:n] = monitor.times[:n]
        history = dict(sol.history, time=jnp.asarray(t, problem.dtype))
        sol = eqx.tree_at(lambda s_: s_.history, sol, history)
    r = sol.result
    if not isinstance(r, jax.core.Tracer) and np.asarray(r).shape == () and int(r) == NONFINITE:
        raise ValueError(
            "solve_ocp: the cost (argument 'stage_cost' or 'terminal_cost' of the problem) or the "
            "dynamics returned NaN or inf at the initial guess (arguments 'us'/'xs')"
        )
    return sol

"""The optimal control problem: dynamics (a system and a method), costs, bounds, constraints, and
the augmented-Lagrangian terms of the constraints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..._internal.tracing import is_traced
from ...integrators.base import AbstractMethod, WrappedMethod
from ...systems.base import prepare_systems
from .chart import AbstractStateChart, default_chart

__all__ = ["Actuated", "OptimalControlProblem", "ResidualCost"]


class Actuated(WrappedMethod):
    """``method`` driven through a constant actuation matrix: the body force of a step is
    ``B u`` for the actuator command ``u`` ``(m,)`` (e.g. four rotor thrusts → a body wrench
    ``(torque, force)`` of a quadrotor).  Any geomjax method; ``B`` ``(dim, m)`` is an array
    (differentiable)."""

    method: AbstractMethod
    matrix: jax.Array

    def control_shape(self, system):
        return (jnp.shape(self.matrix)[-1],)  # the commands, not the body force

    @property
    def symmetric(self):
        # B u is held over the step, so the step is symmetric where the actuated method's is
        # (a Composition of it raises the order; ReversibleAdjoint reverses it)
        return getattr(self.method, "symmetric", False)

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
        if not is_traced(self.dt) and not float(self.dt) > 0:
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
        if not is_traced(lo) and not is_traced(hi):
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

    def prepared(self) -> OptimalControlProblem:
        """This problem with every system in it (the dynamics', and any a cost holds)
        :meth:`~geomjax.systems.base.AbstractSystem.prepared`: state-independent quantities such
        as the inverse inertia computed once, at the top of a solver's program, instead of in
        each traced copy of the step, the costs and their derivatives (the quadrotor's program
        is a quarter smaller).  Equal in value; only for use inside that program (an eager
        :func:`~geomjax.control.trajopt.solve_ocp` prepares the problem on the host before
        its program, which then computes nothing of it)."""
        return prepare_systems(self)

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

    def augmented_cost(self, xs, us, duals):
        """The augmented Lagrangian of a trajectory at the multipliers and penalty ``duals``
        (``OCPSolution.duals``, or ``WarmStart.duals`` of an inner solve of
        :class:`~geomjax.control.trajopt.AugmentedLagrangian`: the cost that solve minimizes):
        ``Σ_k [dt · l + λ_kᵀ c_E + ρ/2 |c_E|² + (|max(0, μ_k + ρ c_I)|² − |μ_k|²)/(2ρ)] + Φ``
        plus the terminal constraints' terms likewise (Powell–Hestenes–Rockafellar); ``J``
        itself without constraints."""
        return total_cost(self, xs, us, duals)

    def violation(self, xs, us):
        """Largest constraint violation (equalities ``|c|``, inequalities ``max(c, 0)``) and
        bound violation of a trajectory; 0 without constraints."""
        x_run = jax.tree_util.tree_map(lambda a: a[:-1], xs)
        xN = jax.tree_util.tree_map(lambda a: a[-1], xs)
        v = jnp.maximum(jnp.max(us - self.upper), jnp.max(self.lower - us))
        v = jnp.maximum(v, 0.0)
        cE, cI, tE, tI = constraint_values(self, self.times, x_run, us, xN)
        for c, eq in ((cE, True), (cI, False), (tE, True), (tI, False)):
            if c.size:
                v = jnp.maximum(v, jnp.max(jnp.abs(c) if eq else jnp.maximum(c, 0.0)))
        return v


def constraint_values(problem, ts, x_run, us, xN):
    """Path constraints ``(steps, p)``, ``(steps, q)`` and terminal ``(r,)``, ``(s,)``."""
    p, q, r, s = problem.sizes
    dt = problem.dtype
    n = ts.shape[0]
    cE = jax.vmap(problem.path_equality)(ts, x_run, us) if p else jnp.zeros((n, 0), dt)
    cI = jax.vmap(problem.path_inequality)(ts, x_run, us) if q else jnp.zeros((n, 0), dt)
    tE = problem.terminal_equality(xN) if r else jnp.zeros((0,), dt)
    tI = problem.terminal_inequality(xN) if s else jnp.zeros((0,), dt)
    return cE, cI, tE, tI


class Duals(eqx.Module):
    """Multipliers and penalty of the augmented Lagrangian (empty arrays without constraints)."""

    path_eq: jax.Array  # (steps, p)
    path_ineq: jax.Array  # (steps, q)
    term_eq: jax.Array  # (r,)
    term_ineq: jax.Array  # (s,)
    penalty: jax.Array  # scalar


def zero_duals(problem, penalty=1.0):
    p, q, r, s = problem.sizes
    dt, N = problem.dtype, problem.steps
    return Duals(
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


def node_cost(problem, t, x, u, lam_e, lam_i, rho):
    """``dt · l + `` the path constraints' augmented-Lagrangian terms (node ``k < N``)."""
    c = problem.dt * problem.stage_cost(t, x, u)
    p, q, _, _ = problem.sizes
    if p:
        c = c + _al_eq(problem.path_equality(t, x, u), lam_e, rho)
    if q:
        c = c + _al_ineq(problem.path_inequality(t, x, u), lam_i, rho)
    return c


def terminal_node_cost(problem, x, lam_e, lam_i, rho):
    c = jnp.zeros((), problem.dtype) if problem.terminal_cost is None else problem.terminal_cost(x)
    _, _, r, s = problem.sizes
    if r:
        c = c + _al_eq(problem.terminal_equality(x), lam_e, rho)
    if s:
        c = c + _al_ineq(problem.terminal_inequality(x), lam_i, rho)
    return c


def total_cost(problem, xs, us, duals):
    x_run = jax.tree_util.tree_map(lambda a: a[:-1], xs)
    xN = jax.tree_util.tree_map(lambda a: a[-1], xs)
    run = jax.vmap(lambda t, x, u, le, li: node_cost(problem, t, x, u, le, li, duals.penalty))(
        problem.times, x_run, us, duals.path_eq, duals.path_ineq
    )
    return jnp.sum(run) + terminal_node_cost(
        problem, xN, duals.term_eq, duals.term_ineq, duals.penalty
    )


def tree_index(tree, i):
    return jax.tree_util.tree_map(lambda a: a[i], tree)

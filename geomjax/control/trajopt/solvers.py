"""The solvers as values (the way optimistix and diffrax separate a solver from its driver): each
provides ``init`` / ``step`` / ``terminate`` / ``postprocess`` and :func:`solve_ocp` runs any of them
through one loop (:func:`.loop.iterate`), so a new solver needs no edit of the loop.

* :class:`ILQR` and :class:`DDP` (:class:`AbstractDDPSolver`): linearize every node
  (:mod:`.linearize`), run the Riccati recursion with the box QP (:mod:`.backward`) under a
  Levenberg–Marquardt regularization that is raised until every factorization succeeds, then
  search the step length on the expected improvement (:mod:`.line_search`);
* :class:`AugmentedLagrangian`: each of its steps is a whole inner solve of one of those, then a
  multiplier and penalty update.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .backward import backward_pass, backward_pass_placeholder
from .line_search import line_search_pass
from .linearize import linearize_nodes
from .loop import iterate
from .problem import Duals, constraint_values, total_cost, tree_index, zero_duals
from .solution import CONSTRAINTS, MAX_ITERS, NONFINITE, REG_LIMIT, SUCCESSFUL, OCPSolution

__all__ = ["DDP", "ILQR", "AbstractDDPSolver", "AbstractOCPSolver", "AugmentedLagrangian"]


class AbstractOCPSolver(eqx.Module):
    """What a solver of :func:`~geomjax.control.trajopt.solve_ocp` provides.  The driver runs

        state = solver.init(problem, xs, us, feasible, max_iters)
        while not solver.terminate(problem, state)[0]:
            state = solver.step(problem, state)
        return solver.postprocess(problem, state)

    as one ``lax.while_loop``.  A state is a pytree with at least the fields ``it`` (iterations
    run) and ``cost`` (reported to the progress monitor of an eager solve after each step).
    ``handles_constraints``: whether the solver takes path/terminal constraints (else
    :func:`solve_ocp` refuses a constrained problem)."""

    handles_constraints: ClassVar[bool] = False

    @abc.abstractmethod
    def init(self, problem, xs, us, feasible, max_iters: int):
        """The state before the first step, from the initial trajectory ``xs`` (a rollout of
        ``us`` when ``feasible``, else a multiple-shooting guess); ``max_iters`` is static."""

    @abc.abstractmethod
    def step(self, problem, state):
        """One iteration."""

    @abc.abstractmethod
    def terminate(self, problem, state):
        """``(done, status)``: whether to stop, and the status code (:mod:`.solution`)."""

    @abc.abstractmethod
    def postprocess(self, problem, state) -> OCPSolution:
        """The :class:`~geomjax.control.trajopt.OCPSolution` of the final state."""


class AbstractDDPSolver(AbstractOCPSolver):
    """Settings shared by :class:`ILQR` and :class:`DDP` (defaults from crocoddyl's FDDP).

    Fields:
        tol: stop once the iterate is feasible (no gaps) and the expected improvement of a full
            step ``|d₁ + d₂/2|`` is ``≤ tol · (1 + |J|)`` (``J`` the current cost): status 0,
            ``"converged"``.  ``None`` (the default) means the default of the problem's dtype:
            1e-10 in float64, 1e-5 in float32 (:func:`default_tol`).  The ``repr`` shows only
            the fields set away from their defaults, so ``ILQR()`` prints without ``tol``.
        reg_init, reg_min, reg_max, reg_factor: Levenberg–Marquardt regularization of ``Q_uu``
            (raised by ``reg_factor`` when a backward pass fails or no step length is accepted,
            lowered after a step of length ``> ½``).
        line_steps: step lengths ``1, ½, …, 2^{1−line_steps}``.
        accept: a step is accepted when the cost decrease is ``≥ accept ×`` the expected one.
        accept_increase: while gaps remain, a predicted increase may be exceeded by this factor.
        qp_iters: projected-Newton iterations of the box QP per node.

    Stopping tests, checked once per iteration in this order (status codes of
    :mod:`geomjax.control.status`; ``OCPSolution.status`` and ``stop_reason``):

    * the initial cost is NaN or inf: no iteration is run, status 3 ``"nonfinite"``;
    * ``tol`` (above) passed: status 0 ``"converged"``;
    * the regularization limit: the backward pass fails even at ``reg_max``, or no step length
      is accepted and the raised regularization reaches ``reg_max``: status 2
      ``"regularization_limit"`` (no descent step found: an infeasible or ill-posed problem);
    * ``max_iters`` (an argument of :func:`~geomjax.control.trajopt.solve_ocp`, default 100)
      iterations run without either: status 1 ``"max_iters"``.
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

    def init(self, problem, xs, us, feasible, max_iters: int, duals=None, k=None):
        """Also: ``duals``, the augmented-Lagrangian multipliers and penalty held fixed during
        the solve (default: none), and ``k``, the warm start of the box QPs' feedforward."""
        return _ddp_init(self, problem, xs, us, feasible, max_iters, duals, k)

    def step(self, problem, state):
        return _ddp_step(self, problem, state)

    def terminate(self, problem, state):
        return state.done, state.result

    def postprocess(self, problem, state) -> OCPSolution:
        return _ddp_postprocess(problem, state)


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


class AugmentedLagrangian(AbstractOCPSolver):
    """Augmented-Lagrangian outer loop (Powell–Hestenes–Rockafellar; Howell, Jackson & Manchester,
    *ALTRO*, IROS 2019, §III) around an inner :class:`ILQR`/:class:`DDP` solve, for the path and
    terminal equality/inequality constraints (control bounds stay in the inner box QP).

    Each outer iteration solves the inner problem with ``J + Σ λᵀc + ρ/2 |c|²`` (inequalities by
    their PHR term) for at most ``inner_iters`` iterations, then ``λ ← λ + ρ c`` (``max(0, ·)``
    for inequalities) and ``ρ ← penalty_factor · ρ`` when the violation did not drop below
    ``¼`` of its previous value (up to ``penalty_max``).

    Fields:
        inner: the inner solver (default ``ILQR()``), with its own ``tol`` and regularization.
        inner_iters: the iteration cap of each inner solve (default 50).
        constraint_tol: the largest constraint violation accepted (default 1e-6, absolute: the
            largest ``|c|`` of the equalities and ``max(c, 0)`` of the inequalities ``c ≤ 0``,
            path and terminal).
        penalty_init, penalty_factor, penalty_max: the penalty ``ρ``'s start, growth factor and
            cap (defaults 10, 10, 1e10).

    Stopping tests, checked after each outer iteration (status codes of
    :mod:`geomjax.control.status`):

    * the violation is ``≤ constraint_tol``, the inner solve converged (its ``tol``) and the
      trajectory has no gaps: status 0 ``"converged"``;
    * the inner solve met NaN or inf: status 3 ``"nonfinite"``;
    * the inner solve hit its regularization limit with the penalty already at
      ``penalty_max``: status 4 ``"constraints_not_met"``;
    * ``max_iters`` (of :func:`~geomjax.control.trajopt.solve_ocp`: outer iterations here)
      outer iterations run without converging: status 4 ``"constraints_not_met"`` (not 1).
    """

    inner: AbstractDDPSolver = ILQR()
    inner_iters: int = eqx.field(static=True, default=50)
    constraint_tol: float = 1e-6
    penalty_init: float = 10.0
    penalty_factor: float = 10.0
    penalty_max: float = 1e10
    handles_constraints: ClassVar[bool] = True

    def init(self, problem, xs, us, feasible, max_iters: int):
        return _al_init(self, problem, xs, us, feasible, max_iters)

    def step(self, problem, state):
        return _al_step(self, problem, state)

    def terminate(self, problem, state):
        return state.done, state.result

    def postprocess(self, problem, state) -> OCPSolution:
        return _al_postprocess(problem, state)


def _node_times(problem):
    return problem.dt * jnp.arange(problem.steps + 1, dtype=problem.dtype)


def default_tol(solver, dtype):
    """The solver's convergence tolerance ``tol``, or its default for ``dtype``."""
    if solver.tol is not None:
        return solver.tol
    return 1e-10 if jnp.finfo(dtype).bits > 32 else 1e-5


# --- ILQR / DDP -------------------------------------------------------------------------------
class _DDPState(eqx.Module):
    xs: Any
    us: jax.Array
    cost: jax.Array  # including the augmented-Lagrangian terms of ``duals``
    feasible: jax.Array
    reg: jax.Array
    it: jax.Array
    result: jax.Array
    done: jax.Array
    K: jax.Array
    k: jax.Array
    hist: dict
    duals: Any  # fixed during the solve (zero without constraints)


def _ddp_init(solver, problem, xs, us, feasible, max_iters, duals=None, k=None):
    dtype = problem.dtype
    n = problem.chart.dim(problem.system, problem.state0)
    m, N = problem.control_dim, problem.steps
    duals = zero_duals(problem) if duals is None else duals
    nan = jnp.full((max_iters,), jnp.nan, dtype)
    hist = dict(cost=nan, gap=nan, reg=nan, step=nan, stop=nan, time=nan)
    cost0 = total_cost(problem, xs, us, duals)
    finite0 = jnp.isfinite(cost0)
    return _DDPState(
        xs=xs,
        us=us,
        cost=cost0,
        feasible=jnp.asarray(feasible),
        reg=jnp.asarray(solver.reg_init, dtype),
        it=jnp.zeros((), jnp.int32),
        result=jnp.where(finite0, MAX_ITERS, NONFINITE).astype(jnp.int32),
        done=~finite0,
        K=jnp.zeros((N, m, n), dtype),
        k=jnp.zeros((N, m), dtype) if k is None else k,
        hist=hist,
        duals=duals,
    )


def _ddp_step(solver, problem, s: _DDPState) -> _DDPState:
    """One iteration: linearize, backward pass (regularized until it succeeds), line search."""
    dtype = problem.dtype
    n = problem.chart.dim(problem.system, problem.state0)
    max_iters = s.hist["cost"].shape[0]
    tol = default_tol(solver, dtype)
    duals = s.duals
    lin, VxN, VxxN = linearize_nodes(problem, s.xs, s.us, duals)
    gaps = jnp.where(s.feasible, 0.0, lin["gap"])

    # backward pass, raising the regularization until every factorization succeeds
    def bw(reg):
        return backward_pass(problem, solver, lin, VxN, VxxN, gaps, s.xs, s.us, s.k, reg)

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

    out0, ok0 = backward_pass_placeholder(problem, n)
    init = (s.reg, out0, ok0, jnp.ones((), bool))
    reg, out, ok, _ = jax.lax.while_loop(retry_cond, retry_body, init)
    Vx = jnp.concatenate([out["Vx"], VxN[None]])
    Vxx = jnp.concatenate([out["Vxx"], VxxN[None]])
    f_all = jnp.concatenate([jnp.zeros((1, n), dtype), gaps])  # gap into node k (f_0 = 0)
    # the model's change of the cost for a full step from the node's deviation 0: the value
    # at the gap, V_x·f + ½ fᵀV_xx f, summed with the controls' Q_u·k + ½ kᵀQ_uu k.  With
    # d₁ = dg + dv and d₂ = dq − 2dv (dv from the forward pass, :mod:`.line_search`) the
    # prediction α(d₁ + α d₂/2) is −ΔJ: dg takes the value gradient at the gap, V_x + V_xx f
    # (crocoddyl's FDDP stores V_x so shifted), so that the quadratic gap term is −½ fᵀV_xx f.
    fVf = jnp.einsum("ti,tij,tj->", f_all, Vxx, f_all)
    dg = -jnp.sum(out["Quk"]) - jnp.sum(Vx * f_all) - fVf
    dq = -jnp.sum(out["kQk"]) + fVf
    stop = jnp.abs(dg + 0.5 * dq)
    converged = ok & s.feasible & (stop <= tol * (1 + jnp.abs(s.cost)))

    accepted, xs_t, us_t, cost_t, a = line_search_pass(
        problem, solver, s, gaps, out, f_all, Vxx, dg, dq, ok & ~converged
    )
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
    hist = dict(
        cost=s.hist["cost"].at[s.it].set(s.cost),
        gap=s.hist["gap"].at[s.it].set(jnp.max(jnp.abs(gaps), initial=0.0)),
        reg=s.hist["reg"].at[s.it].set(reg),
        step=s.hist["step"].at[s.it].set(step),
        stop=s.hist["stop"].at[s.it].set(stop),
        time=s.hist["time"],
    )
    return _DDPState(
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
        duals,
    )


def _ddp_postprocess(problem, s: _DDPState) -> OCPSolution:
    return OCPSolution(
        times=_node_times(problem),
        states=s.xs,
        controls=s.us,
        K=s.K,
        k=s.k,
        cost=problem.cost(s.xs, s.us),
        violation=jnp.maximum(
            problem.violation(s.xs, s.us),
            jnp.where(s.feasible, 0.0, jnp.inf),  # gaps left open: not a trajectory
        ),
        status=s.result,
        iterations=s.it,
        history=s.hist,
        duals=s.duals,
    )


# --- augmented Lagrangian ---------------------------------------------------------------------
class _ALState(eqx.Module):
    xs: Any
    us: jax.Array
    duals: Duals
    v: jax.Array  # largest constraint violation
    feasible: jax.Array
    it: jax.Array  # outer iterations
    total: jax.Array  # inner iterations in total
    cost: jax.Array  # J without constraint terms
    result: jax.Array
    done: jax.Array
    K: jax.Array
    k: jax.Array
    hist: dict


def _violations(problem, xs, us):
    x_run, xN = tree_index(xs, slice(None, -1)), tree_index(xs, -1)
    return constraint_values(problem, problem.times, x_run, us, xN)


def _max_violation(c, dtype):
    cE, cI, tE, tI = c
    v = jnp.zeros((), dtype)
    for a, eq in ((cE, True), (cI, False), (tE, True), (tI, False)):
        if a.size:
            v = jnp.maximum(v, jnp.max(jnp.abs(a) if eq else jnp.maximum(a, 0.0)))
    return v


def _al_init(solver, problem, xs, us, feasible, max_outer):
    dtype = problem.dtype
    N = problem.steps
    n = problem.chart.dim(problem.system, problem.state0)
    m = problem.control_dim
    nan = jnp.full((max_outer,), jnp.nan, dtype)
    hist = dict(cost=nan, violation=nan, penalty=nan, inner_iterations=nan, time=nan)
    return _ALState(
        xs=xs,
        us=us,
        duals=zero_duals(problem, solver.penalty_init),
        v=_max_violation(_violations(problem, xs, us), dtype),
        feasible=jnp.asarray(feasible),
        it=jnp.zeros((), jnp.int32),
        total=jnp.zeros((), jnp.int32),
        cost=problem.cost(xs, us),
        result=jnp.asarray(CONSTRAINTS, jnp.int32),
        done=jnp.zeros((), bool),
        K=jnp.zeros((N, m, n), dtype),
        k=jnp.zeros((N, m), dtype),
        hist=hist,
    )


def _al_step(solver, problem, c: _ALState) -> _ALState:
    """One outer iteration: an inner solve with the current multipliers, then their update."""
    dtype = problem.dtype
    inner = solver.inner
    max_outer = c.hist["cost"].shape[0]
    s = inner.init(problem, c.xs, c.us, c.feasible, solver.inner_iters, duals=c.duals, k=c.k)
    s = iterate(problem, inner, s)
    cons = _violations(problem, s.xs, s.us)
    v = _max_violation(cons, dtype)
    d = c.duals
    rho = d.penalty
    cE, cI, tE, tI = cons
    duals = Duals(
        d.path_eq + rho * cE,
        jnp.maximum(d.path_ineq + rho * cI, 0.0),
        d.term_eq + rho * tE,
        jnp.maximum(d.term_ineq + rho * tI, 0.0),
        jnp.where(
            v > 0.25 * c.v, jnp.minimum(rho * solver.penalty_factor, solver.penalty_max), rho
        ),
    )
    ok_inner = s.result == SUCCESSFUL
    met = v <= solver.constraint_tol
    success = met & ok_inner & s.feasible
    failed = (s.result == NONFINITE) | ((s.result == REG_LIMIT) & (rho >= solver.penalty_max))
    result = jnp.where(
        success, SUCCESSFUL, jnp.where(s.result == NONFINITE, NONFINITE, CONSTRAINTS)
    )
    it = c.it
    cost = problem.cost(s.xs, s.us)
    hist = dict(
        cost=c.hist["cost"].at[it].set(cost),
        violation=c.hist["violation"].at[it].set(v),
        penalty=c.hist["penalty"].at[it].set(rho),
        inner_iterations=c.hist["inner_iterations"].at[it].set(s.it.astype(dtype)),
        time=c.hist["time"],
    )
    # keep the multipliers of the converged iterate (the KKT multipliers)
    duals = jax.tree_util.tree_map(lambda a, b: jnp.where(success, b, a), duals, d)
    return _ALState(
        xs=s.xs,
        us=s.us,
        duals=duals,
        v=v,
        feasible=s.feasible,
        it=it + 1,
        total=c.total + s.it,
        cost=cost,
        result=result.astype(jnp.int32),
        done=success | failed | (it + 1 >= max_outer),
        K=s.K,
        k=s.k,
        hist=hist,
    )


def _al_postprocess(problem, c: _ALState) -> OCPSolution:
    return OCPSolution(
        times=_node_times(problem),
        states=c.xs,
        controls=c.us,
        K=c.K,
        k=c.k,
        cost=problem.cost(c.xs, c.us),
        violation=problem.violation(c.xs, c.us),
        status=c.result,
        iterations=c.total,
        history=dict(c.hist),
        duals=c.duals,
    )

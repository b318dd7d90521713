"""Model predictive control: a receding-horizon loop around :func:`~geomjax.control.trajopt.solve_ocp`.

At every control step ``j`` (time ``t_j = j·dt``) the controller measures the *plant* state
``x_j``, re-targets the model problem to it (``state0 ← x_j``, node times ``t_j + k·dt``) and solves
it over the horizon with a fixed, small number of DDP / iLQR iterations, warm-started from the
previous plan shifted by one node (``(ū_1, …, ū_{N−1}, ū_{N−1})``); the first control ``ū_0`` is
applied to the plant for one step:

    x_{j+1} = plant_method.step(plant_system, x_j, dt, ū_0(x_j) + d(t_j), t_j),

where the plant (system and method) may differ from the model (parameter errors, another
integrator) and ``d(t)`` is an unmodelled input disturbance.  The whole closed loop is one
``jax.lax.scan`` over the control steps (the solver's ``lax.while_loop`` nested in it): jittable,
vmappable over initial states or disturbances, compiled once (Mayne, Rawlings, Rao & Scokaert,
*Constrained model predictive control: stability and optimality*, Automatica 2000, §2; the
real-time iteration of Diehl, Bock & Schlöder, *A real-time iteration scheme for nonlinear
optimization in optimal feedback control*, SIAM J. Control Optim. 2005, §3, takes one iteration per
step in the same way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.aot import CompiledPrograms, array_signature, checked_once, plain_method, structure
from .._internal.eager import top_level_options
from .._internal.tracing import any_traced, is_traced
from .._internal.warn import renamed, renamed_attribute
from .._internal.warn import warn as _warn
from ..integrators.base import AbstractMethod, WrappedMethod
from ..results import ConvergenceError, Status
from ..systems.base import prepare_systems
from .status import CONSTRAINTS, MAX_ITERS, SUCCESSFUL
from .status import MESSAGES as _MESSAGES
from .status import REASONS as _REASONS
from .trajopt import ILQR, AbstractOCPSolver, OptimalControlProblem, ResidualCost, solve_ocp
from .trajopt.problem import Actuated
from .trajopt.solve import check_duals
from .trajopt.solvers import WarmStart, default_tol

__all__ = ["MPC", "MPCPlan", "MPCResult", "OnlineMPC", "run_mpc"]


class MPC(eqx.Module):
    """Settings of the receding-horizon controller run by :func:`run_mpc`.

    Fields:
        solver: the solver of each control step, any solver of the warm-start protocol
            (:class:`~geomjax.control.trajopt.AbstractOCPSolver`, ``warm_startable``):

            * :class:`~geomjax.control.trajopt.ILQR` (default),
              :class:`~geomjax.control.trajopt.DDP` or
              :class:`~geomjax.control.trajopt.StrictFDDP`: costs and control bounds (in the box
              QP); warm-started from the last plan's controls shifted by one node;
            * :class:`~geomjax.control.trajopt.AugmentedLagrangian`: also the problem's path and
              terminal equality/inequality constraints (an obstacle, an altitude floor, a speed
              limit), kept in closed loop; warm-started from the last plan's controls, its
              multipliers (the path ones shifted by one node with the controls) and its penalty
              (Howell, Jackson & Manchester, *ALTRO*, IROS 2019, §III), or from zero
              multipliers and ``penalty_init`` once a plan has no active constraint
              (:meth:`~geomjax.control.trajopt.AugmentedLagrangian.warm_start_from`).  ``max_iters`` counts
              its outer iterations, each an inner solve of at most ``inner_iters``; a tick that
              stops at that cap with its constraints met to ``constraint_tol`` is status 1
              ``"max_iters"``, one that leaves them violated status 4
              ``"constraints_not_met"`` (a failure in :class:`MPCResult`).
        max_iters: solver iterations per control step (a fixed cap, ≥ 1, default 3; the solve
            stops earlier once converged; the same name as ``solve_ocp(max_iters=)``).
            Warm-started, a few iterations track a slowly moving optimum.  (``iterations`` is a
            deprecated alias: the count of iterations run is ``MPCResult.iterations``.)
        horizon: number of nodes ``N`` of each solve (default: the problem's ``steps``).
    """

    solver: AbstractOCPSolver
    max_iters: int = eqx.field(static=True)
    horizon: int | None = eqx.field(static=True)

    def __init__(self, solver=None, max_iters=3, horizon=None, *, iterations=None):
        self.solver = ILQR() if solver is None else solver
        self.max_iters = renamed(max_iters, iterations, "MPC", "max_iters", "iterations", 3)
        self.horizon = horizon

    iterations = renamed_attribute("MPC", "iterations", "max_iters")

    def __check_init__(self):
        if not (
            isinstance(self.solver, AbstractOCPSolver)
            and getattr(self.solver, "warm_startable", False)
        ):
            raise ValueError(
                "MPC: argument 'solver' must be a warm-startable solver (ILQR(), DDP(), "
                "StrictFDDP(), AugmentedLagrangian(), or an AbstractOCPSolver with "
                f"warm_startable = True), got {self.solver!r}"
            )
        if not (isinstance(self.max_iters, int | np.integer) and self.max_iters >= 1):
            raise ValueError(
                f"MPC: argument 'max_iters' must be a positive int, got {self.max_iters!r}"
            )
        if self.horizon is not None and not (
            isinstance(self.horizon, int | np.integer) and self.horizon >= 1
        ):
            raise ValueError(
                f"MPC: argument 'horizon' must be a positive int or None, got {self.horizon!r}"
            )


#: a capped solve (``max_iters``) whose :attr:`MPCResult.stationarity` exceeds this stopped far
#: from stationary: its last step fell short of the solver's own prediction by more than 10 % of
#: the plan's cost (measured: healthy loops mostly below 1e-3 after their first steps, now and
#: then up to 0.04; failing ones 0.1–1).  Measured against converged re-solves, the
#: stationarity was about half the plan's true relative suboptimality ``(J − J*)/J``
STALL_TOL = 0.1
#: the closed loop is moving away when its largest tracking error (or predicted cost-to-go) over
#: the last quarter of the run exceeds its initial value and ``1 + GROWTH_TOL`` times its largest
#: value over the quarter before
GROWTH_TOL = 0.1


def _window(n: int) -> int:
    return max(1, n // 4)


def _grows(a, growth):
    """``(...,)`` whether the series ``a`` ``(..., n)`` moves away at the end: its largest value
    over the last quarter exceeds its first value and ``1 + growth`` times its largest value over
    the quarter before (NaN or inf at the end counts as growth)."""
    n = a.shape[-1]
    w = _window(n)
    last = jnp.max(a[..., n - w :], axis=-1)
    before = jnp.max(a[..., max(0, n - 2 * w) : n - w], axis=-1)
    grew = (last > a[..., 0]) & (last > (1 + growth) * before)
    return grew | ~jnp.isfinite(last)


class MPCResult(eqx.Module):
    """The closed loop of :func:`run_mpc` (a pytree: it can leave ``jit``/``vmap``).

    Attributes:
        times: ``(steps + 1,)`` control times ``t_j = j·dt``.
        states: plant states with a leading axis ``(steps + 1,)``.
        controls: applied controls ``(steps, m)`` (the solver's first control, inside the bounds;
            the disturbance is not included).
        error: ``(steps + 1,)`` tracking error of the plant state (see :func:`run_mpc`).
        status: ``(steps,)`` status code of each solve (``0`` converged, ``1`` iteration cap
            reached, as :attr:`~geomjax.control.trajopt.OCPSolution.status`;
            :mod:`geomjax.control.status`; an augmented-Lagrangian solve at its cap is ``1``
            with its constraints met, ``4`` ``"constraints_not_met"`` without).
        cost: ``(steps,)`` model cost of each step's plan (predicted cost-to-go).
        iterations: ``(steps,)`` solver iterations of each step.
        plan: controls ``(N, m)`` of the last solve (the warm start of a continued run).
        stationarity: ``(steps,)`` how far each step's plan is from a stationary point of the
            model problem, relative to its cost: the part of the last iteration's predicted
            improvement (``|d₁ + d₂/2|``, the quantity of the solver's convergence test) that its
            step did not deliver, ``|(J_before − J) − |d₁ + d₂/2||``, over ``|J|`` (0 when that
            part is below the solver's tolerance ``tol·(1 + |J|)``).  Near 0 when the last step landed where the solver's
            quadratic model said (a converged solve, or a warm-started one that tracks the
            optimum); of order 1 when the line search cut the step, the step was rejected or
            the model of the step was poor: the plan is still far from the model's optimum.
            ``inf`` when no iteration ran or a value was not finite (the status says why).
            For an augmented-Lagrangian solve: of the last inner iteration, on the augmented
            cost it minimized.
        duals: the multipliers and penalty the next solve would start from (the last
            solve's, the path multipliers shifted one node; zero and ``penalty_init`` once its
            plan has no active constraint): the rest of the warm start, with ``plan``, of an
            augmented-Lagrangian solver, or None.

    Derived (arrays: they work under ``jit``/``vmap``): :attr:`converged`, :attr:`failed`,
    :attr:`stalled` (a capped solve far from stationary), :attr:`diverging` (the closed loop
    moves away) and :attr:`healthy`; eagerly, :meth:`summary` says what happened and
    :meth:`check` raises on an unhealthy loop.
    """

    times: jax.Array
    states: Any
    controls: jax.Array
    error: jax.Array
    status: jax.Array
    cost: jax.Array
    iterations: jax.Array
    plan: jax.Array
    stationarity: jax.Array | None = None
    duals: Any = None

    # former name (deprecated): the changelog's table of deprecated names
    result = renamed_attribute("MPCResult", "result", "status")

    @property
    def stop_reasons(self) -> list[str]:
        """Status of each step's solve (eager only): ``"converged"``, ``"max_iters"``, …"""
        return [_REASONS[int(r)] for r in np.asarray(self.status).reshape(-1)]

    @property
    def converged(self):
        """``(steps,)`` whether each step's solve met the solver's tolerance."""
        return self.status == SUCCESSFUL

    @property
    def failed(self):
        """``(steps,)`` whether a step's solve broke down (regularization limit, non-finite
        values, or constraints left violated; a capped but descending solve that meets its
        constraints is not a failure)."""
        return self.status > 1

    @property
    def stalled(self):
        """``(steps,)`` whether a step's solve stopped at its iteration cap far from stationary
        (:attr:`stationarity` above :data:`STALL_TOL`): its plan is not the model's optimum."""
        stat = (
            jnp.full(jnp.shape(self.status), jnp.inf)
            if self.stationarity is None
            else (self.stationarity)
        )
        return (self.status == MAX_ITERS) & (stat > STALL_TOL)

    @property
    def stalling(self):
        """``(...,)`` whether the solves keep stopping far from stationary: more than a quarter of
        the solves of the last half of the run are :attr:`stalled` (the first solves of a
        cold-started loop are, and do not count)."""
        st = self.stalled
        n = st.shape[-1]
        tail = st[..., n - max(1, n // 2) :]
        return jnp.mean(tail, axis=-1) > 0.25

    @property
    def diverging(self):
        """``(...,)`` whether the closed loop moves away: the largest tracking error (or
        predicted cost-to-go) over the last quarter of the run exceeds its initial value and
        ``1 + GROWTH_TOL`` times its largest value over the quarter before, or is not finite.
        A loop that converges, or settles (at an offset under a constant disturbance), does not
        (see :data:`GROWTH_TOL`)."""
        return _grows(self.error, GROWTH_TOL) | _grows(self.cost, GROWTH_TOL)

    @property
    def healthy(self):
        """``(...,)`` no solve broke down, the loop is not :attr:`diverging` and its solves are
        not :attr:`stalling`."""
        return ~jnp.any(self.failed, axis=-1) & ~self.diverging & ~self.stalling

    def _problems(self, iterations=None) -> tuple[list[str], list[str]]:
        """What went wrong (eager, unbatched or batched), and what to change."""
        if any_traced(self):
            raise ValueError("MPCResult: call summary()/check() outside jit (values are traced)")
        r = np.asarray(self.status)
        n = r.shape[-1]
        found, fixes = [], []
        bad = r > 1
        if bad.any():
            j = np.unravel_index(int(np.argmax(bad)), r.shape)
            found.append(
                f"the solve of control step {j[-1]} failed: {_MESSAGES[int(r[j])]} "
                f"({int(bad.sum())} of {r.size} solves failed)"
            )
            fixes.append("check the model, its costs and bounds at the plant's states")
            if (r == CONSTRAINTS).any():
                fixes.append(
                    "check that the constraints can be met from the plant's states (the first "
                    "node's are the measured state's), or give the augmented Lagrangian more "
                    "outer iterations per step (MPC(max_iters=...)), more inner ones "
                    "(inner_iters) or a larger penalty_init"
                )
        div, stalling = np.asarray(self.diverging), np.asarray(self.stalling)
        if div.any():
            i = int(np.argmax(div.reshape(-1)))
            e = np.asarray(self.error).reshape(-1, n + 1)[i]
            c = np.asarray(self.cost).reshape(-1, n)[i]
            found.append(
                f"the closed loop is moving away from its target (tracking error {e[0]:.3g} -> "
                f"{e[-1]:.3g}, smallest {np.nanmin(e):.3g}; predicted cost-to-go {c[0]:.3g} -> "
                f"{c[-1]:.3g})"
            )
        if stalling.any():
            i = int(np.argmax(stalling.reshape(-1)))
            st = np.asarray(self.stalled).reshape(-1, n)[i]
            stat = np.asarray(self.stationarity).reshape(-1, n)[i]
            worst = int(np.argmax(np.where(st, stat, -np.inf)))
            found.append(
                f"{int(st.sum())} of {n} solves stopped at their iteration cap far from "
                f"stationary (stationarity above {STALL_TOL}, worst {stat[worst]:.3g} at control "
                f"step {worst}: plans far from the model's optimum)"
            )
        if div.any() or stalling.any():
            now = f", now {iterations}" if iterations is not None else ""
            fixes.append(
                f"use more solver iterations per step (MPC(max_iters=...){now}) or a longer "
                "horizon, warm-start the first plan (controls= an open-loop optimum), or make the "
                "model closer to the plant (its mass, inertia, disturbances; bounds that can "
                "hold the plant)"
            )
        return found, fixes

    def summary(self, iterations: int | None = None) -> str:
        """A few lines on the run (eager only): steps, the solves' statuses (converged, capped,
        capped far from stationary, failed), the tracking error and cost-to-go from start to end,
        and what went wrong, if anything, with what to change (``iterations``: the setting to
        name in that advice)."""
        r = np.asarray(self.status)
        e = np.asarray(self.error)
        c = np.asarray(self.cost)
        n = r.shape[-1]
        lines = [
            f"MPC closed loop: {n} control steps" + (f", {r.size // n} runs" if r.ndim > 1 else ""),
            f"  solves: {int((r == SUCCESSFUL).sum())} converged, {int((r == MAX_ITERS).sum())} "
            f"stopped at the iteration cap ({int(np.asarray(self.stalled).sum())} of them far "
            f"from stationary), {int((r > 1).sum())} failed",
            f"  tracking error: {np.ravel(e[..., 0])[0]:.3g} -> {np.ravel(e[..., -1])[0]:.3g}"
            + (" (first run)" if r.ndim > 1 else "")
            + f"; predicted cost-to-go {np.ravel(c[..., 0])[0]:.3g} -> "
            f"{np.ravel(c[..., -1])[0]:.3g}",
        ]
        problems, fixes = self._problems(iterations)
        lines.append("  " + ("healthy" if not problems else "NOT healthy:"))
        lines += [f"  - {p}" for p in problems]
        lines += [f"  what to change: {f}" for f in fixes]
        return "\n".join(lines)

    def check(self, iterations: int | None = None) -> MPCResult:
        """Raise :class:`geomjax.results.ConvergenceError` if the loop is not
        :attr:`healthy` (eager only): a step's solve broke down, the closed loop moves away from
        its target (:attr:`diverging`), or its solves keep stopping at their iteration cap far
        from stationary (:attr:`stalling`).  A capped solve near stationary is normal in MPC.
        The message says what to change.  Returns ``self``."""
        problems, fixes = self._problems(iterations)
        if problems:
            raise ConvergenceError(
                "run_mpc: " + "; ".join(problems) + ". What to change: " + "; ".join(fixes)
            )
        return self

    def __repr__(self) -> str:
        try:
            e = np.asarray(self.error)
            return (
                f"MPCResult(steps={e.shape[-1] - 1}, final_error={e[..., -1]}, "
                f"converged={np.asarray(self.converged).mean():.0%}, "
                f"healthy={np.asarray(self.healthy)})"
            )
        except Exception:
            return "MPCResult(<traced>)"


# --- re-targeting the model problem ----------------------------------------------------------------
class _TimeShifted(eqx.Module):
    """``fn(t + t0, *rest)``: a stage cost / path constraint at absolute time."""

    fn: Callable
    t0: jax.Array

    def __call__(self, t, *rest):
        return self.fn(t + self.t0, *rest)


class _TimeShiftedMethod(WrappedMethod):
    """``method`` stepping from absolute time ``t + t0`` (time-dependent forces)."""

    method: AbstractMethod
    t0: jax.Array

    def step(self, system, state, dt, control=None, t=0.0):
        return self.method.step(system, state, dt, control, t + self.t0)


def _shift_cost(fn, t0):
    if fn is None:
        return None
    if isinstance(fn, ResidualCost):
        return ResidualCost(_TimeShifted(fn.residual, t0), fn.weights, terminal=fn.terminal)
    return _TimeShifted(fn, t0)


def _with_horizon(problem: OptimalControlProblem, horizon: int) -> OptimalControlProblem:
    """The same problem over ``horizon`` nodes."""
    if horizon == problem.steps:
        return problem
    return OptimalControlProblem(
        problem.system,
        problem.method,
        problem.state0,
        problem.dt,
        horizon,
        problem.stage_cost,
        problem.terminal_cost,
        control_dim=problem.control_dim,
        lower=problem.lower if problem.bounded else None,
        upper=problem.upper if problem.bounded else None,
        path_equality=problem.path_equality,
        path_inequality=problem.path_inequality,
        terminal_equality=problem.terminal_equality,
        terminal_inequality=problem.terminal_inequality,
        chart=problem.chart,
    )


def _retarget(problem: OptimalControlProblem, x, t0) -> OptimalControlProblem:
    """The model problem from the measured state ``x`` at time ``t0`` (fields replaced, so no
    re-validation inside the loop); its path constraints, like its stage cost, at absolute time
    (terminal ones take no time)."""
    problem = eqx.tree_at(
        lambda p: (p.state0, p.stage_cost, p.method),
        problem,
        (x, _shift_cost(problem.stage_cost, t0), _TimeShiftedMethod(problem.method, t0)),
    )
    for name in ("path_equality", "path_inequality"):
        fn = getattr(problem, name)
        if fn is not None:
            problem = eqx.tree_at(lambda p, n=name: getattr(p, n), problem, _TimeShifted(fn, t0))
    return problem


class _TargetError(eqx.Module):
    """``|r(x)|`` of a terminal residual, or ``Φ(x)`` of a terminal cost (``norm=False``)."""

    fn: Callable
    norm: bool = eqx.field(static=True, default=True)

    def __call__(self, t, x):
        v = self.fn(x)
        return jnp.linalg.norm(v) if self.norm else v


def _default_error(problem):
    """``|r(x)|`` of the terminal target residual (a :class:`ResidualCost` terminal cost), else the
    terminal cost ``Φ(x)``."""
    tc = problem.terminal_cost
    if isinstance(tc, ResidualCost):
        return _TargetError(tc.residual)
    if tc is not None:
        return _TargetError(tc, norm=False)
    return None


def _checked(where, problem, controller):
    """The model problem (over the controller's horizon) and the settings, checked."""
    if not isinstance(problem, OptimalControlProblem):
        raise ValueError(
            f"{where}: argument 'problem' must be an OptimalControlProblem, got {type(problem)}"
        )
    controller = MPC() if controller is None else controller
    if not isinstance(controller, MPC):
        raise ValueError(f"{where}: argument 'controller' must be an MPC, got {controller!r}")
    if problem.constrained and not controller.solver.handles_constraints:
        raise ValueError(
            f"{where}: argument 'problem' has path/terminal constraints, which the controller's "
            f"solver {type(controller.solver).__name__} does not take; pass "
            "controller=MPC(AugmentedLagrangian(...)), or state the target as a terminal cost"
        )
    if controller.horizon is not None:
        problem = _with_horizon(problem, int(controller.horizon))
    return problem, controller


# --- the closed loop --------------------------------------------------------------------------------
def _control_step(problem, controller, warm: WarmStart, x, t):
    """One receding-horizon step: the problem from the measured state ``x`` at time ``t``,
    solved by ``controller.max_iters`` iterations from the warm start ``warm`` (the controls
    ``(N, m)``, and the multipliers of a solver that carries them); returns the control to
    apply, the next warm start (what the solve leaves, shifted by one node, its last node
    repeated) and the solution."""
    solver = controller.solver
    problem = _retarget(problem, x, t)
    sol = solve_ocp(
        problem, solver, warm.controls, max_iters=controller.max_iters, duals=warm.duals
    )
    warm1 = solver.warm_start_from(problem, sol).shifted()
    return sol.controls[0], warm1, sol


def _stationarity(solver, sol, tol):
    """The estimated relative suboptimality of a solve's plan (:attr:`MPCResult.stationarity`):
    the part of its last iteration's predicted improvement ``|d₁ + d₂/2|`` that the step did not
    deliver, ``r = |(J_before − J) − |d₁ + d₂/2||``, over ``|J|``; 0 when ``r`` is below the
    solver's tolerance ``tol·(1 + |J|)``, ``inf`` when no iteration ran or a value is not
    finite.  The last iteration and ``J`` are the solver's
    (:meth:`~geomjax.control.trajopt.AbstractOCPSolver.last_iteration`: an augmented
    Lagrangian's last inner iteration, on the cost it minimized)."""
    it, stop, before, after = solver.last_iteration(sol)
    J = jnp.abs(after)
    r = jnp.abs((before - after) - stop)
    small = r <= tol * (1 + J)
    rel = jnp.where(small, 0.0, r / jnp.where(small, 1.0, J))
    return jnp.where((it > 0) & jnp.isfinite(r) & jnp.isfinite(J), rel, jnp.inf)


@eqx.filter_jit
def _initial_plan(problem, controls, where):
    """The first plan's controls ``(N, m)``: ``controls`` checked, or zeros."""
    N, m, dtype = problem.steps, problem.control_dim, problem.dtype
    us = jnp.zeros((N, m), dtype) if controls is None else jnp.asarray(controls, dtype)
    if us.shape != (N, m):
        raise ValueError(
            f"{where}: argument 'controls' must have shape (horizon, control_dim) = ({N}, {m}), "
            f"got {us.shape}"
        )
    return us


def _run_program(
    problem, controller, plant_system, plant_method, x0, us, disturbance, error, steps, duals=None
):
    dt, m = problem.dt, problem.control_dim
    dtype = problem.dtype
    problem, plant_system = problem.prepared(), prepare_systems(plant_system)
    solver = controller.solver
    tol = jnp.asarray(default_tol(solver, dtype), dtype)

    def body(carry, j):
        x, warm = carry
        t = dt * j.astype(dtype)
        u, warm1, sol = _control_step(problem, controller, warm, x, t)
        d = jnp.zeros((m,), dtype) if disturbance is None else disturbance(t).astype(dtype)
        x1 = plant_method.step(plant_system, x, dt, u + d, t)[0]
        status = solver.tick_status(problem, sol)
        out = (x, u, error(t, x), status, sol.cost, sol.iterations, _stationarity(solver, sol, tol))
        return (x1, warm1), out

    warm0 = solver.warm_start(problem, us)
    if duals is not None:  # continuing an earlier loop: its multipliers and penalty
        warm0 = WarmStart(warm0.controls, duals, warm0.extra)
    (xN, warm), (xs, u, err, res, cost, its, stat) = jax.lax.scan(
        body, (x0, warm0), jnp.arange(steps, dtype=jnp.int32)
    )
    times = dt * jnp.arange(steps + 1, dtype=dtype)
    states = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b[None]]), xs, xN)
    err = jnp.concatenate([err, error(times[-1], xN)[None]])
    return MPCResult(times, states, u, err, res, cost, its, warm.controls, stat, warm.duals)


# an eager run_mpc is one program, compiled with XLA:CPU's small-loop threshold raised for it
# alone (the closed loop's scan and the solver's loops inside it as single kernels); under an
# outer jit/vmap it runs as before, unjitted (a vmapped jit would hide the batch from the steps)
_run = top_level_options(
    _run_program, small_loops=True, jit_under_trace=False, library_fusions=False
)


def run_mpc(
    problem: OptimalControlProblem,
    plant_system=None,
    plant_method: AbstractMethod | None = None,
    state0=None,
    steps: int = 1,
    disturbance: Callable | None = None,
    *,
    controller: MPC | None = None,
    controls=None,
    duals=None,
    error: Callable | None = None,
    warn: bool = True,
    us=None,
    x0=None,
) -> MPCResult:
    """Run model predictive control of a plant for ``steps`` control steps of ``problem.dt``.

    Arguments:
        problem: the model :class:`~geomjax.control.trajopt.OptimalControlProblem` (system,
            method, costs, bounds, ``dt``; its ``steps`` is the horizon unless
            ``controller.horizon`` is set; its ``state0`` is replaced by the measured state at
            every step and its node times by ``t_j + k·dt``: a stage cost may track a
            time-dependent reference, a path constraint a time-dependent limit).  Path and
            terminal constraints need ``controller=MPC(AugmentedLagrangian(...))``.
        plant_system, plant_method: the simulated plant (default: the model's); its state must
            have the model state's structure (it is measured exactly).
        state0: the plant's initial state (default: ``problem.state0``; ``x0``: its deprecated
            name).
        steps: number of control steps (≥ 1).
        disturbance: ``d(t) -> (m,)`` added to the applied control in the plant (an input
            disturbance: a torque for torque-controlled bodies), or None.
        controller: :class:`MPC` settings (default ``MPC()``).
        controls: initial guess of the first plan ``(N, m)`` (default zeros): pass the controls
            of a converged :func:`~geomjax.control.trajopt.solve_ocp` from ``state0`` to start from
            an optimal plan, as a controller that plans before it starts (``us``: its deprecated
            name).
        duals: the first plan's multipliers and penalty (an :class:`AugmentedLagrangian`
            controller; default: zero multipliers and its ``penalty_init``): with ``controls=``
            ``result.plan`` and ``state0=`` the last of ``result.states``, ``duals=result.duals``
            continues an earlier run where it stopped.
        error: ``e(t, state) -> scalar`` tracking error recorded along the run (default: the norm
            of the target residual, i.e. of a :class:`~geomjax.control.trajopt.ResidualCost`
            terminal cost's residual (``|(log(R*⁻¹R), Ω)|`` for
            :func:`~geomjax.control.examples.attitude_problem`), else the terminal cost ``Φ``).
        warn: called eagerly, warn once at the end of the run (``UserWarning``) when the loop is
            not :attr:`~MPCResult.healthy` — a solve broke down, the closed loop moves away from
            its target, or its solves keep stopping at the iteration cap far from stationary —
            with what to change (:meth:`MPCResult.summary` says the same).  Under ``jit``/``vmap``
            read :attr:`MPCResult.healthy` and its parts instead.

    An actuated model (its method an :class:`~geomjax.control.trajopt.Actuated`, e.g.
    :func:`~geomjax.control.examples.quadrotor_problem`) takes actuator commands: a plain
    ``plant_method`` that takes the body force instead is wrapped in the model's actuation,
    ``Actuated(plant_method, B)``; pass an ``Actuated`` plant method for another actuation.

    Returns an :class:`MPCResult`.  Jittable and vmappable (one ``lax.scan``; compiled once per
    problem structure and ``steps``).  Callables are part of the compiled program's key: pass
    ``disturbance``/``error`` as ``equinox.Module`` values with array fields (not new lambdas) to
    change their values without recompiling."""
    where = "run_mpc"
    problem, controller = _checked(where, problem, controller)
    if not (isinstance(steps, int | np.integer) and steps >= 1):
        raise ValueError(f"{where}: argument 'steps' must be a positive int, got {steps!r}")
    if warn not in (True, False):
        raise ValueError(f"{where}: argument 'warn' must be True or False, got {warn!r}")
    plant_system = problem.system if plant_system is None else plant_system
    plant_method = problem.method if plant_method is None else plant_method
    if not isinstance(plant_method, AbstractMethod):
        raise ValueError(
            f"{where}: argument 'plant_method' must be a geomjax method, got {plant_method!r}"
        )
    plant_method = _actuated_plant(where, problem, plant_system, plant_method)
    # the plant's initial state, named in errors as the caller passed it
    name = "x0" if x0 is not None else "state0"
    x0 = renamed(state0, x0, where, "state0", "x0")
    x0 = problem.state0 if x0 is None else x0
    if hasattr(plant_system, "check_state"):
        try:
            x0 = plant_system.check_state(x0)
        except ValueError as e:
            raise ValueError(f"{where}: argument '{name}' is not a state of the plant: {e}") from e
    if structure(x0) != structure(problem.state0):
        raise ValueError(
            f"{where}: argument '{name}' (the plant state) must have the structure, shapes and dtypes "
            f"of the model's state0 {structure(problem.state0)}, got {structure(x0)}"
        )
    m, dtype = problem.control_dim, problem.dtype
    if disturbance is not None:
        if not callable(disturbance):
            raise ValueError(f"{where}: argument 'disturbance' must be callable d(t) -> ({m},)")
        out = jax.eval_shape(disturbance, jax.ShapeDtypeStruct((), dtype))
        if getattr(out, "shape", None) != (m,):
            raise ValueError(
                f"{where}: argument 'disturbance' must return shape ({m},) (control_dim), got {out}"
            )
    u_probe = jax.ShapeDtypeStruct((m,), dtype)

    def check_plant():
        try:
            out = jax.eval_shape(
                lambda x, u: plant_method.step(plant_system, x, problem.dt, u, 0.0)[0], x0, u_probe
            )
        except Exception as e:
            raise ValueError(
                f"{where}: one step of argument 'plant_method' on 'plant_system' with a control "
                f"of shape ({m},) failed: {type(e).__name__}: {e}"
            ) from e
        if structure(out) != structure(problem.state0):
            raise ValueError(
                f"{where}: a step of the plant (arguments 'plant_system', 'plant_method') returns "
                f"{structure(out)}, not the model's state structure {structure(problem.state0)}"
            )

    checked_once("plant", (plant_system, plant_method, x0, problem.dt, u_probe), check_plant)
    us = _initial_plan(problem, renamed(controls, us, where, "controls", "us"), where)
    if duals is not None:
        duals = check_duals(problem, controller.solver, duals, where)
    error = _default_error(problem) if error is None else error
    if error is None:
        raise ValueError(
            f"{where}: the problem has no terminal target; pass argument 'error' e(t, state)"
        )

    def check_error():
        try:
            out = jax.eval_shape(error, jax.ShapeDtypeStruct((), dtype), x0)
        except Exception as e:
            raise ValueError(
                f"{where}: calling argument 'error' e(t, state) failed: {type(e).__name__}: {e}"
            ) from e
        if getattr(out, "shape", None) != ():
            raise ValueError(f"{where}: argument 'error' must return a scalar, got {out}")

    checked_once("error", (error, x0), check_error)
    res = _run(
        problem,
        controller,
        plant_system,
        plant_method,
        x0,
        us,
        disturbance,
        error,
        int(steps),
        duals,
    )
    if warn and not any_traced(res):
        problems, fixes = res._problems(controller.max_iters)
        if problems:
            _warn(
                f"{where}: the closed loop is not healthy: "
                + "; ".join(problems)
                + ". What to change: "
                + "; ".join(fixes)
                + " (MPCResult.summary() says more; run_mpc(..., warn=False) silences this)"
            )
    return res


def _find_actuated(method):
    """The :class:`Actuated` layer of a method (inside time shifts and other wrappers), or None."""
    while isinstance(method, WrappedMethod):
        if isinstance(method, Actuated):
            return method
        method = method.method
    return None


def _actuated_plant(where, problem, plant_system, plant_method):
    """The plant method of an actuated model: ``plant_method`` itself when it takes the model's
    controls, else ``Actuated(plant_method, B)`` with the model's ``B`` when that takes them
    (the plain method takes the body force ``B u``); an error naming the fix otherwise."""
    act = _find_actuated(problem.method)
    if act is None or _find_actuated(plant_method) is not None:
        return plant_method
    m = problem.control_dim
    try:
        shape = plant_method.control_shape(plant_system)
    except Exception:  # not answered for this system: the plant step is checked below
        shape = None
    if shape is None or tuple(shape) == (m,):
        return plant_method
    shape = tuple(shape)
    if shape == (m,):
        return plant_method
    dim = int(jnp.shape(act.matrix)[0])
    if shape == (dim,):
        return Actuated(plant_method, act.matrix)
    raise ValueError(
        f"{where}: argument 'plant_method' takes controls of shape {shape}, but the model takes "
        f"actuator commands of shape ({m},) through its actuation matrix B {jnp.shape(act.matrix)};"
        f" pass gj.Actuated({type(plant_method).__name__}(), B) (B: the model's "
        "problem.method.matrix, or the plant's own)"
    )


# --- the online controller: one step at a time, for a plant outside JAX -------------------------
class MPCPlan(eqx.Module):
    """The state of an :class:`OnlineMPC` between two control steps (a pytree of arrays).

    Attributes:
        controls: ``(N, m)`` the warm start of the next solve (the last plan shifted by one node).
        status: status code of the last solve (:class:`geomjax.results.Status`;
            ``Status.NOT_RUN``, -1, before the first step).
        iterations: solver iterations of the last solve.
        cost: the last plan's predicted cost-to-go.
        stationarity: how far the last plan is from a stationary point of the model problem,
            relative to its cost (:attr:`MPCResult.stationarity`; ``inf`` before the first
            step); with ``status == 1`` (the cap) and above :data:`STALL_TOL` the solve stopped
            far from stationary: more iterations per step, or a better warm start.
        duals: the rest of the warm start of a solver that carries more than the controls (an
            :class:`~geomjax.control.trajopt.AugmentedLagrangian`'s multipliers, the path ones
            shifted by one node, and its penalty), else None.
    """

    controls: jax.Array
    status: jax.Array
    iterations: jax.Array
    cost: jax.Array
    stationarity: jax.Array | None = None
    duals: Any = None

    @property
    def warm_start(self) -> WarmStart:
        """The warm start of the next solve (:class:`~geomjax.control.trajopt.WarmStart`)."""
        return WarmStart(self.controls, self.duals)


def _online_step_traced(problem, controller, plan, x, t):
    problem = problem.prepared()
    solver = controller.solver
    u, warm, sol = _control_step(problem, controller, plan.warm_start, x, t)
    tol = jnp.asarray(default_tol(solver, problem.dtype), problem.dtype)
    status = solver.tick_status(problem, sol)
    stat = _stationarity(solver, sol, tol)
    return u, MPCPlan(warm.controls, status, sol.iterations, sol.cost, stat, warm.duals)


_online_step = top_level_options(_online_step_traced, small_loops=True, library_fusions=False)


class OnlineMPC(eqx.Module):
    """Model predictive control one tick at a time, for a plant that is not a JAX function (a
    robot, another simulator): ``u, plan = controller.step(plan, measured_state, t)``.

    Each ``step`` is what one control step of :func:`run_mpc` does — the model problem re-targeted
    to the measured state at time ``t`` (``state0`` and node times ``t + k·dt``), solved by
    ``controller.max_iters`` iterations warm-started from ``plan`` — as one compiled program:
    the first call traces and compiles it, later calls (same shapes and dtypes) only run it.
    The caller applies ``u`` for ``problem.dt`` and measures the next state.

    The program is compiled ahead of time (``jax.jit(...).lower(...).compile()``) once per
    signature of ``(plan, state)``, with the problem's arrays flattened once at the first step:
    a tick calls the executable directly, without re-filtering the problem's pytree, and
    returns bitwise what the ``equinox.filter_jit`` form of the same step returns.  Called
    under a transformation (``jit``, ``vmap``), the step is traced into the caller's program.

    Arguments:
        problem: the model :class:`~geomjax.control.trajopt.OptimalControlProblem` (bounds and
            costs; path/terminal constraints with an ``AugmentedLagrangian`` controller); its
            ``steps`` is the horizon unless ``controller.horizon`` is set.
        controller: the :class:`MPC` settings (default ``MPC()``).

    Example (a body whose measured state comes from elsewhere)::

        online = OnlineMPC(problem, MPC(ILQR(), max_iters=1))
        plan = online.init()  # or online.init(open_loop_controls)
        for tick in range(n):
            x = measure()  # a state with the model state's structure
            u, plan = online.step(plan, x, tick * problem.dt)
            apply(u)
    """

    problem: OptimalControlProblem
    controller: MPC
    _steps: CompiledPrograms = eqx.field(static=True, repr=False)

    def __init__(self, problem: OptimalControlProblem, controller: MPC | None = None):
        self.problem, self.controller = _checked("OnlineMPC", problem, controller)
        # the step compiled ahead of time per (plan, state) signature, with the solver's
        # loops as single kernels and XLA:CPU's own kernels for the small products (iterations
        # 2–3× faster); the same program as the plain ``jit`` path
        self._steps = CompiledPrograms(_online_step_traced, small_loops=True, library_fusions=False)

    def init(self, controls=None, *, duals=None, us=None) -> MPCPlan:
        """The plan before the first step: ``controls`` ``(N, m)`` as the first warm start (e.g.
        an open-loop optimum from the initial state), default zeros (``us``: deprecated name);
        ``duals``: the multipliers and penalty an :class:`AugmentedLagrangian` controller starts
        from (default: zero multipliers and its ``penalty_init``; e.g. ``MPCResult.duals`` of an
        earlier loop)."""
        where = "OnlineMPC.init"
        us = _initial_plan(self.problem, renamed(controls, us, where, "controls", "us"), where)
        dtype = self.problem.dtype
        warm = self.controller.solver.warm_start(self.problem, us)
        if duals is not None:
            duals = check_duals(self.problem, self.controller.solver, duals, where)
            warm = WarmStart(warm.controls, duals)
        return MPCPlan(
            warm.controls,
            jnp.asarray(Status.NOT_RUN, jnp.int32),
            jnp.zeros((), jnp.int32),
            jnp.asarray(jnp.nan, dtype),
            jnp.asarray(jnp.inf, dtype),
            warm.duals,
        )

    @plain_method
    def step(self, plan: MPCPlan, state, t):
        """``(u, plan)``: the control ``(m,)`` to apply from ``state`` (measured at time ``t``)
        and the plan for the next step.  ``state`` must have the structure, shapes and dtypes of
        the problem's ``state0``."""
        if not isinstance(plan, MPCPlan):
            raise ValueError(
                f"OnlineMPC.step: argument 'plan' must be an MPCPlan (from init or a previous "
                f"step), got {type(plan).__name__}"
            )
        steps = self._steps
        if not steps.prepared_for((self.problem, self.controller)):
            if any_traced((self.problem, self.controller)):  # OnlineMPC traced (under jit)
                if structure(state) != structure(self.problem.state0):
                    raise ValueError(
                        "OnlineMPC.step: argument 'state' must have the structure, shapes and "
                        f"dtypes of the problem's state0 {structure(self.problem.state0)}, got "
                        f"{structure(state)}"
                    )
                return self._step_traced(plan, state, t)
            steps.prepare((self.problem, self.controller), state=structure(self.problem.state0))
        if structure(state) != steps.memo["state"]:
            raise ValueError(
                "OnlineMPC.step: argument 'state' must have the structure, shapes and dtypes of "
                f"the problem's state0 {steps.memo['state']}, got {structure(state)}"
            )
        if is_traced(t):
            return self._step_traced(plan, state, t)
        # an array, not a Python float: a new time must not be a new program
        t = np.asarray(t, self.problem.dtype)
        plan_sig, state_sig = array_signature(plan), array_signature(state)
        if plan_sig is None or state_sig is None:  # traced or Python numbers: the jit path
            return self._step_traced(plan, state, t)
        return steps.program((plan_sig, state_sig), plan, state, t)(steps.leaves, plan, state, t)

    def _step_traced(self, plan, state, t):
        """The step through ``equinox.filter_jit`` (under an outer transformation, or with
        leaves that are not arrays): the same computation as the compiled fast path."""
        t = jnp.asarray(t, self.problem.dtype)
        return _online_step(self.problem, self.controller, plan, state, t)

"""The solvers as values (the way optimistix and diffrax separate a solver from its driver): each
provides ``init`` / ``step`` / ``terminate`` / ``postprocess`` and :func:`solve_ocp` runs any of them
through one driver (:func:`.loop.iterate`, which owns the iteration cap, the history and the
non-finite check), so a new solver needs no edit of the loop.

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
import numpy as np

from .backward import BackwardPass, backward_pass, gauss_newton_model
from .line_search import (
    TH_GRAD,
    ExpectedImprovement,
    Trial,
    expected_improvement,
    forward_pass,
    line_search,
)
from .linearize import Linearization, NodeDerivatives, dynamics_curvature, linearize_nodes
from .loop import History, iterate
from .problem import Duals, constraint_values, total_cost, tree_index, zero_duals
from .solution import CONSTRAINTS, MAX_ITERS, NONFINITE, REG_LIMIT, SUCCESSFUL, OCPSolution

__all__ = [
    "DDP",
    "ILQR",
    "ALHistory",
    "AbstractDDPSolver",
    "AbstractOCPSolver",
    "AugmentedLagrangian",
    "DDPHistory",
    "DDPState",
    "History",
    "StrictFDDP",
    "WarmStart",
]


class WarmStart(eqx.Module):
    """What a solve leaves for the next one (the warm-start protocol of
    :class:`AbstractOCPSolver`): from one model-predictive-control tick to the next
    (:class:`~geomjax.control.MPCPlan` holds it), and from one inner solve of an
    :class:`AugmentedLagrangian` to the next.

    Fields:
        controls: ``(N, m)`` the controls the next solve starts from.
        duals: the augmented-Lagrangian multipliers and penalty (:class:`AugmentedLagrangian`:
            those its solve starts from; an inner solver: those of the augmented cost it
            minimizes, :meth:`~geomjax.control.trajopt.OptimalControlProblem.augmented_cost`);
            ``None`` for a solver that carries none.
        extra: the solver's own rest of a warm start, arrays with a leading node axis ``(N,
            …)`` (``None`` if none): the DDP-type solvers' feedforward gains ``k`` of the last
            backward pass, which start the next box QPs.  An augmented Lagrangian hands it from
            one inner solve to the next; model predictive control starts each tick's solve from
            the controls and duals alone (``solve_ocp(problem, solver, warm.controls,
            duals=warm.duals)``).
    """

    controls: jax.Array
    duals: Any = None
    extra: Any = None

    def shifted(self) -> WarmStart:
        """This warm start moved one node along the horizon, the last node repeated:
        ``(ū_1, …, ū_{N−1}, ū_{N−1})`` and the path multipliers and ``extra`` likewise (a
        receding horizon's next solve starts one control step later); the terminal multipliers
        and the penalty are kept."""

        def shift(a):
            return jnp.concatenate([a[1:], a[-1:]])

        duals = self.duals
        if duals is not None:
            duals = Duals(
                shift(duals.path_eq),
                shift(duals.path_ineq),
                duals.term_eq,
                duals.term_ineq,
                duals.penalty,
            )
        return WarmStart(shift(self.controls), duals, jax.tree_util.tree_map(shift, self.extra))


# --- the per-iteration records (the driver writes their rows) ----------------------------
class DDPHistory(History):
    """Per-iteration record of a DDP-type solve, arrays ``(max_iters,)`` (NaN after the last
    iteration); :attr:`OCPSolution.history` is its :meth:`as_dict`.

    Fields:
        cost: ``J`` before the step (the augmented-Lagrangian terms included).
        gap: largest multiple-shooting defect before the step.
        reg: the regularization the backward pass succeeded with.
        step: the accepted step length ``α`` (0 when none was).
        stop: the expected improvement of a full step ``|d₁ + d₂/2|``.
        time: wall seconds at the end of the iteration (filled in by an eager
            :func:`~geomjax.control.trajopt.solve_ocp`).
    """

    cost: jax.Array
    gap: jax.Array
    reg: jax.Array
    step: jax.Array
    stop: jax.Array
    time: jax.Array


class ALHistory(History):
    """Per-outer-iteration record of an :class:`AugmentedLagrangian` solve, arrays
    ``(max_outer,)`` (NaN after the last): ``cost`` (without constraint terms), ``violation``,
    ``penalty``, ``inner_iterations``, ``time`` (eager solves), and of the inner solve's last
    iteration ``stop`` (its ``|d₁ + d₂/2|``), ``step_from`` and ``step_to`` (the augmented cost
    before and after it: what model predictive control measures stationarity from)."""

    cost: jax.Array
    violation: jax.Array
    penalty: jax.Array
    inner_iterations: jax.Array
    time: jax.Array
    stop: jax.Array
    step_from: jax.Array
    step_to: jax.Array


class AbstractOCPSolver(eqx.Module):
    """What a solver of :func:`~geomjax.control.trajopt.solve_ocp` provides: its algorithm, as
    optimistix's minimisers provide theirs to its driver.  The driver
    (:func:`~geomjax.control.trajopt.loop.iterate`) runs

        state = solver.init(problem, xs, us, feasible, warm)
        i = 0
        while not solver.terminate(problem, state)[0] and i < max_iters and isfinite(state.cost):
            state, record = solver.step(problem, state)
            history = history.record(i, **record);  i += 1
        return solver.postprocess(problem, state, i, status, history)

    as one ``lax.while_loop``, and owns the bookkeeping: the iteration counter, the cap
    ``max_iters``, the history (a :attr:`history_type` of ``max_iters`` rows, NaN after the last
    iteration: :attr:`OCPSolution.history`), the non-finite check (an initial cost that is NaN
    or inf runs no iteration; a step that leaves one stops the loop; both status 3
    ``"nonfinite"``) and the cap's status (1 ``"max_iters"``, see :meth:`terminate`).

    A state is a pytree with at least a scalar field ``cost``: the objective at the iterate
    (the driver checks it is finite and reports it to the progress monitor of an eager
    solve).  ``handles_constraints``: whether the solver takes path/terminal constraints (else
    :func:`solve_ocp` refuses a constrained problem).  ``history_type``: the solver's
    per-iteration record (:class:`History` subclass: its field names).

    The warm-start protocol (what :class:`~geomjax.control.MPC` and :class:`AugmentedLagrangian`
    need of a solver; ``warm_startable`` says whether a solver implements it): a
    :class:`WarmStart` before the first solve (:meth:`warm_start`), the one a solve leaves
    (:meth:`warm_start_from`, of the same structure), moved one node along the horizon by
    :meth:`WarmStart.shifted`; a solve starts from it as ``solve_ocp(problem, solver,
    warm.controls, duals=warm.duals)`` (model predictive control), or as the driver's ``init(...,
    warm)`` (an augmented Lagrangian's inner solves).  Per tick, :meth:`tick_status` is the
    status of a solve stopped at its cap and :meth:`last_iteration` what the controller
    measures its stationarity from (and what an augmented Lagrangian records of each inner
    solve)."""

    handles_constraints: ClassVar[bool] = False
    warm_startable: ClassVar[bool] = False
    history_type: ClassVar[type[History]] = History

    @abc.abstractmethod
    def init(self, problem, xs, us, feasible, warm: WarmStart | None = None):
        """The state before the first step, from the initial trajectory ``xs`` (a rollout of
        ``us`` when ``feasible``, else a multiple-shooting guess) and the rest of a warm start
        ``warm`` (its ``duals`` and ``extra``; its controls are ``us``), or None."""

    @abc.abstractmethod
    def step(self, problem, state):
        """One iteration: ``(state, record)``, the new state and the iteration's values of
        the fields of :attr:`history_type` (a dict by name; a field left out stays NaN)."""

    @abc.abstractmethod
    def terminate(self, problem, state):
        """``(done, status)``: whether the solver stops on its own (converged, or a failure of
        its own), and the status code (:mod:`.solution`).  While not done, ``status`` is
        ``SUCCESSFUL`` (0), or the failure a solve stopped by the cap reports (an augmented
        Lagrangian's ``CONSTRAINTS``, 4): the driver reports a capped solve of status 0 as 1
        ``"max_iters"``, as optimistix's driver reports ``max_steps_reached``."""

    @abc.abstractmethod
    def postprocess(self, problem, state, iterations, status, history) -> OCPSolution:
        """The :class:`~geomjax.control.trajopt.OCPSolution` of the final state, with what the
        driver knows: the ``iterations`` run, the final ``status`` and the ``history`` (a
        :attr:`history_type`)."""

    # --- the warm-start protocol (model predictive control, augmented Lagrangian) -------------
    def warm_start(self, problem, controls) -> WarmStart:
        """The warm start of the first solve from the controls ``(N, m)`` (default: the
        controls alone)."""
        return WarmStart(controls)

    def warm_start_from(self, problem, solution: OCPSolution) -> WarmStart:
        """What a solve leaves for the next one, before the shift (default: its controls); of
        the structure of :meth:`warm_start`'s."""
        return WarmStart(solution.controls)

    def tick_status(self, problem, solution: OCPSolution):
        """The status of a solve run for a fixed number of iterations per tick (default: its
        own; a capped solve is status 1 ``"max_iters"``, normal in model predictive control)."""
        return solution.status

    def last_iteration(self, solution: OCPSolution):
        """``(iterations, stop, before, after)`` of the solve's last (inner) iteration: the
        iterations run, the predicted improvement of a full step ``|d₁ + d₂/2|``, the cost the
        iteration started from and the one it ended at (the cost it minimized).  Not provided
        by the base class."""
        raise NotImplementedError(f"{type(self).__name__} does not report its last iteration")


class AbstractDDPSolver(AbstractOCPSolver):
    """The DDP-type solvers (:class:`ILQR`, :class:`DDP`, :class:`StrictFDDP`): settings
    (defaults from crocoddyl's FDDP) and one iteration as named phases, each a method that a
    variant overrides (crocoddyl's ``SolverDDP`` names them so, and ``SolverBoxDDP`` /
    ``SolverFDDP`` each override one).  :meth:`step` runs

        lin = linearize(state)                                    # calcDiff
        reg, direction = compute_direction(state, lin)            # computeDirection
            (backward_pass under a raised regularization until it succeeds; each node's
             quadratic model by quadratic_model)
        improvement = expected_improvement(lin, direction)       # expectedImprovement
        stop, converged = stopping_criterion(state, improvement, direction)   # stoppingCriteria
        trial = line_search(state, direction, improvement)     # tryStep + accepts, α = 1, ½, …
        reg = update_regularization(reg, trial, converged)        # {in,de}creaseRegularization

    and returns the iteration's :class:`DDPHistory` row for the driver to record.  The methods
    are traced inside the driver's ``lax.while_loop``: jittable code of arrays, no Python
    control flow on values.

    Fields:
        tol: stop once the iterate is feasible (no gaps) and the expected improvement of a full
            step ``|d₁ + d₂/2|`` is ``≤ tol · (1 + |J|)`` (``J`` the current cost): status 0,
            ``"converged"``.  (The expected improvement shrinks as ``g²/(λ + reg)``: under a
            raised ``reg`` the test can pass early along flat directions; requiring ``reg`` near
            its floor as well was tried and cost smooth problems iterations: DDP 9 → 12 on the
            attitude problem, above iLQR's.)  ``None`` (the default) means the default of the problem's dtype:
            1e-10 in float64, 1e-5 in float32 (:func:`default_tol`).  The ``repr`` shows only
            the fields set away from their defaults, so ``ILQR()`` prints without ``tol``.
        reg_init, reg_min, reg_max, reg_factor: Levenberg–Marquardt regularization of ``Q_uu``
            (raised by ``reg_factor`` when a backward pass fails, when no step length is
            accepted or when the accepted one is shorter than ``short_step``; lowered after a
            step of length ``> ½``).
        short_step: an accepted step shorter than this raises the regularization (default 0:
            crocoddyl's schedule, which raises it only on a failed search).  1/16 lowered DDP's
            iterations on the 20 held-out bounded quadrotor targets of ``geomjax bench
            trajopt`` plus ``(2, 1, 1.5)`` (median 43 → 39, largest 77 → 69), but on the
            worked bounded quadrotor it ends at another optimum, within 1e-6 of IPOPT's cost
            with some controls 1% away, so it is not the default.  A step
            that short says the model's minimizer lies far outside where the model holds: with
            a nearly singular ``Q_uu`` (the quadrotor's control weight is 1e-6) and the
            regularization at its floor, the feedback gains reach ~1e3, the rollout of ``α =
            1`` leaves the box by 1e3 N, and crocoddyl's schedule keeps accepting steps of
            ``α ≈ 1/64`` without ever raising ``reg`` (bounded quadrotor to ``(2, 1, 1.5)``,
            iterations 3–40).
        reg_decrease: the factor by which an accepted full step lowers the regularization
            (default None: ``reg_factor``, crocoddyl's schedule).  DDP's curvature terms make
            ``Q_uu`` indefinite far from the optimum, so its regularization rises early (to
            1e-2–1e-1 on the quadrotor, whose control weight is 1e-6) and then falls one decade
            per full step: the iterations in between are damped, gradient-like steps, and the
            quadratic convergence starts only at the floor.  100 lowered DDP's iterations on the
            quadrotor from 26 to 22, and on the 20 held-out bounded targets of ``geomjax bench
            trajopt`` from a median of 42.5 to 34 (largest 77 → 83), at the same optima; on
            ``(2, 1, 1.5)`` 46 → 48, so it is not the default.
        line_steps: step lengths ``1, ½, …, 2^{1−line_steps}``.
        accept: a step is accepted when the cost decrease is ``≥ accept ×`` the expected one.
        accept_increase: while gaps remain, a predicted increase may be exceeded by this factor.
        qp_iters: projected-Newton iterations of the box QP per node.

    Stopping tests, checked once per iteration in this order (status codes of
    :mod:`geomjax.control.status`; ``OCPSolution.status`` and ``stop_reason``):

    * the initial cost is NaN or inf: no iteration is run, status 3 ``"nonfinite"`` (the
      driver's test);
    * ``tol`` (above) passed: status 0 ``"converged"``;
    * the regularization limit: the backward pass fails even at ``reg_max``, or no step length
      is accepted and the raised regularization reaches ``reg_max``: status 2
      ``"regularization_limit"`` (no descent step found: an infeasible or ill-posed problem);
    * ``max_iters`` (an argument of :func:`~geomjax.control.trajopt.solve_ocp`, default 100)
      iterations run without either: status 1 ``"max_iters"`` (the driver's cap).
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
    short_step: float = 0.0
    reg_decrease: float | None = None
    warm_startable: ClassVar[bool] = True

    history_type: ClassVar[type[History]] = DDPHistory

    def last_iteration(self, solution: OCPSolution):
        it = solution.iterations
        i = jnp.maximum(it - 1, 0)
        return it, solution.history["stop"][i], solution.history["cost"][i], solution.cost

    def warm_start(self, problem, controls) -> WarmStart:
        """The controls, and zero feedforward gains ``k`` ``(N, m)`` (``extra``)."""
        k = jnp.zeros((problem.steps, problem.control_dim), problem.dtype)
        return WarmStart(controls, None, k)

    def warm_start_from(self, problem, solution: OCPSolution) -> WarmStart:
        """The controls, and the feedforward gains ``k`` of the last backward pass
        (``extra``: the start of the next box QPs)."""
        return WarmStart(solution.controls, None, solution.k)

    def init(self, problem, xs, us, feasible, warm: WarmStart | None = None) -> DDPState:
        """From ``warm`` (optional): ``duals``, the augmented-Lagrangian multipliers and penalty
        held fixed during the solve (default: none), and ``extra``, the warm start of the box
        QPs' feedforward ``k`` (default: zeros)."""
        duals = None if warm is None else warm.duals
        k = None if warm is None else warm.extra
        return _ddp_init(self, problem, xs, us, feasible, duals, k)

    def step(self, problem, state: DDPState):
        """One iteration: the phases in the order of the class docstring; ``(state, record)``
        (the record: the :class:`DDPHistory` row)."""
        return _ddp_step(self, problem, state)

    def terminate(self, problem, state: DDPState):
        return state.done, state.result

    def postprocess(self, problem, state: DDPState, iterations, status, history) -> OCPSolution:
        return _ddp_postprocess(problem, state, iterations, status, history)

    # --- the phases ---------------------------------------------------------------------------
    def linearize(self, problem, state: DDPState) -> Linearization:
        """The derivatives of every node in the chart at the iterate (crocoddyl's ``calcDiff``):
        ``F(z) = f(x̄_k ⊕ δ, ū_k + w) ⊖ x̄_{k+1}`` and its Jacobian ``[A B]`` at ``z = 0``, the
        cost's ``[l_x; l_u]`` and ``[l_xx l_xu; l_ux l_uu]`` (the augmented-Lagrangian terms of
        ``state.duals`` included) and the terminal ``Φ_x``, ``Φ_xx``.  The gaps ``F(0)`` are
        the multiple-shooting defects ``f̄_{k+1}``, set to zero on a feasible iterate (a rollout,
        whose round-off is no gap)."""
        lin = linearize_nodes(problem, state.xs, state.us, state.duals)
        gaps = jnp.where(state.feasible, 0.0, lin.nodes.gap)
        return eqx.tree_at(lambda l_: l_.nodes.gap, lin, gaps)

    def quadratic_model(self, problem, node: NodeDerivatives, t, x, u, x_next, Vx, Vxx):
        """The quadratic model ``(Q, q)`` of one node, ``Q = [Q_xx Q_xu; Q_ux Q_uu]``
        ``(n + m, n + m)`` and ``q = [Q_x; Q_u]``, from the value gradient at the gap
        ``V'_x = V_x + V_xx f̄`` and ``V_xx`` of the next node (in crocoddyl, the first lines of
        ``backwardPass``'s loop):

            Q_x = l_x + Aᵀ V'_x,  Q_u = l_u + Bᵀ V'_x,
            Q_xx = l_xx + Aᵀ V_xx A,  Q_ux = l_ux + Bᵀ V_xx A,  Q_uu = l_uu + Bᵀ V_xx B

        (first-order dynamics: Gauss–Newton).  ``t, x, u, x_next``: the node's time, state,
        control and the next node's state (:class:`DDP` differentiates the dynamics there)."""
        return gauss_newton_model(node, Vx, Vxx)

    def backward_pass(self, problem, state: DDPState, lin: Linearization, reg) -> BackwardPass:
        """One Riccati recursion under the regularization ``reg`` (crocoddyl's
        ``backwardPass``): from ``V_x = Φ_x``, ``V_xx = Φ_xx`` at the last node, each node's
        model (:meth:`quadratic_model`), the feedforward ``k`` minimizing ``½ kᵀ(Q_uu + reg I)k
        + Q_uᵀ k`` over the box ``lower − ū ≤ k ≤ upper − ū`` (projected Newton, crocoddyl's
        ``SolverBoxDDP``; plain Cholesky without bounds, warm-started at ``state.k``), the
        feedback ``K = −(Q_uu + reg I)_ff⁻¹ Q_ux`` on the controls that are free in the QP and
        strictly inside the box at ``ū`` (unlike crocoddyl: a released control at a bound whose
        feedback pushed it outward was clipped at every step length, the slow tail of bounded
        problems; :mod:`.backward`'s docstring, "Feedback at a bound"), and

            V_x = Q_x + Kᵀ(Q_uu k + Q_u) + Q_uxᵀ k,   V_xx = Q_xx + Kᵀ(Q_uu K + Q_ux) + Q_uxᵀ K.

        ``ok`` of the result: whether every factorization succeeded."""
        return backward_pass(problem, self, lin, state.xs, state.us, state.k, reg)

    def compute_direction(self, problem, state: DDPState, lin: Linearization):
        """``(reg, direction)``: :meth:`backward_pass` from ``state.reg``, the regularization
        raised by ``reg_factor`` (up to ``reg_max``) until every factorization succeeds
        (crocoddyl's ``computeDirection`` with ``increaseRegularization`` on its failure).
        ``direction.ok`` is False when ``reg_max`` did not suffice."""
        n = lin.terminal_grad.shape[0]

        # the backward pass appears once in the program (inside the loop, run at least once):
        # a first call outside it would double the compiled code (DDP's curvature terms most)
        def retry_cond(c):
            reg, out, first = c
            return first | (~out.ok & (reg < self.reg_max))

        def retry_body(c):
            reg, _, first = c
            reg = jnp.where(first, reg, jnp.minimum(reg * self.reg_factor, self.reg_max))
            return reg, self.backward_pass(problem, state, lin, reg), jnp.zeros((), bool)

        init = (state.reg, BackwardPass.placeholder(problem, n), jnp.ones((), bool))
        reg, direction, _ = jax.lax.while_loop(retry_cond, retry_body, init)
        return reg, direction

    def expected_improvement(
        self, problem, lin: Linearization, direction: BackwardPass
    ) -> ExpectedImprovement:
        """The model's decrease of the cost for a step of length ``α``, ``α (d₁ + α d₂/2)``
        (crocoddyl's FDDP ``expectedImprovement``; :class:`.line_search.ExpectedImprovement`):
        with the gaps ``f̄`` and ``V'_x = V_x + V_xx f̄``,

            d₁ = −Σ Q_u·k − Σ V'_x·f̄ + dv,   d₂ = −Σ kᵀQ_uu k + Σ f̄ᵀV_xx f̄ − 2 dv,

        ``dv = Σ f̄ᵀV_xx (x ⊖ x̄)`` known once the rollout is (:meth:`try_step`)."""
        n = lin.terminal_grad.shape[0]
        gaps_into = jnp.concatenate([jnp.zeros((1, n), problem.dtype), lin.nodes.gap])
        return expected_improvement(lin, direction, gaps_into)

    def stopping_criterion(
        self, problem, state: DDPState, improvement: ExpectedImprovement, direction
    ):
        """``(stop, converged)`` (crocoddyl's ``stoppingCriteria``, there ``|d₁ + d₂/2|`` at
        ``dv = 0`` too): ``stop = |d₁ + d₂/2|`` of a full step, converged when the backward pass
        succeeded, the iterate is feasible and ``stop ≤ tol · (1 + |J|)``."""
        tol = default_tol(self, problem.dtype)
        stop = improvement.full_step
        converged = direction.ok & state.feasible & (stop <= tol * (1 + jnp.abs(state.cost)))
        return stop, converged

    def try_step(
        self,
        problem,
        state: DDPState,
        direction: BackwardPass,
        improvement: ExpectedImprovement,
        alpha,
    ) -> Trial:
        """The forward pass of step length ``alpha`` and its acceptance (crocoddyl's
        ``tryStep`` and the test after it in ``solve``): the rollout ``u = clip(ū + α k + K (x ⊖
        x̄))`` that closes ``α`` of the gaps, its cost ``J'``, the predicted decrease
        ``α (d₁ + α d₂/2)`` with ``dv`` of this rollout, and :meth:`accepts` on it."""
        xs_t, us_t, cost_t, dx = forward_pass(
            problem,
            state.xs,
            state.us,
            improvement.gaps[1:],
            direction.K,
            direction.k,
            alpha,
            state.feasible,
            state.duals,
        )
        d1, d2 = improvement.terms(dx)
        expected = alpha * (d1 + 0.5 * alpha * d2)
        actual = state.cost - cost_t
        accepted = jnp.isfinite(cost_t) & self.accepts(state, d1, expected, actual)
        return Trial(accepted=accepted, xs=xs_t, us=us_t, cost=cost_t, alpha=alpha)

    def accepts(self, state: DDPState, d1, expected, actual):
        """Whether a trial of predicted decrease ``expected`` and actual decrease ``actual``
        (``J − J'``) is accepted.  A predicted decrease (``expected > 0``) needs ``actual ≥
        accept · expected``; a predicted increase (the gaps' terms can make one) may be
        exceeded by ``accept_increase``: ``actual ≥ accept_increase · expected``; either is
        accepted outright when ``d₁ < 1e-12``.  crocoddyl's ``SolverFDDP`` accepts a predicted
        increase only while gaps remain and tests ``|d₁|`` (:class:`StrictFDDP`)."""
        small = d1 < TH_GRAD
        acc_pos = (expected > 0) & (small | (actual >= self.accept * expected))
        acc_neg = (expected <= 0) & (small | (actual >= self.accept_increase * expected))
        return acc_pos | acc_neg

    def line_search(
        self, problem, state: DDPState, direction: BackwardPass, improvement, search
    ) -> Trial:
        """:meth:`try_step` at ``α = 1, ½, …, 2^{1−line_steps}`` until one is accepted (while
        ``search``); the last :class:`~.line_search.Trial`."""
        return line_search(problem, self, state, direction, improvement, search)

    def update_regularization(self, reg, trial: Trial, converged):
        """The Levenberg–Marquardt schedule after the line search (crocoddyl's
        ``decreaseRegularization`` / ``increaseRegularization``, plus the short-step rule):
        ``reg ← max(reg / reg_decrease, reg_min)`` (``reg_decrease`` defaults to ``reg_factor``)
        after an accepted step longer than ½, ``reg ←
        min(reg · reg_factor, reg_max)`` when no step was accepted (and the iterate has not
        converged) or the accepted one is shorter than ``short_step``, else unchanged."""
        down = self.reg_factor if self.reg_decrease is None else self.reg_decrease
        reg1 = jnp.where(
            trial.accepted & (trial.alpha > 0.5),
            jnp.maximum(reg / down, self.reg_min),
            reg,
        )
        short = trial.accepted & (trial.alpha < self.short_step)
        raise_ = (~trial.accepted & ~converged) | short
        return jnp.where(raise_, jnp.minimum(reg1 * self.reg_factor, self.reg_max), reg1)


class ILQR(AbstractDDPSolver):
    """Iterative LQR (Gauss–Newton DDP: first-order dynamics, exact cost Hessians) in the
    left-trivialized chart, control-limited by the box QP, with multiple-shooting gaps.  See the
    module docstring for the recursion; its phases are :class:`AbstractDDPSolver`'s."""


class DDP(AbstractDDPSolver):
    """Differential dynamic programming: :class:`ILQR` plus the second-order dynamics terms
    ``V'_x · ∂²f`` (the Hessian of ``(δ, w) ↦ f(x̄ ⊕ δ, ū + w) ⊖ x̄'`` by JAX autodiff, the chart's
    curvature included) in ``Q_xx, Q_ux, Q_uu`` — one override, :meth:`quadratic_model`.  The
    contraction is computed in the backward pass as the Hessian of the scalar ``z ↦ V'_x ·
    F(z)`` (forward-over-reverse, ``n + m`` Hessian-vector products per node) rather than the
    full ``(n, n + m, n + m)`` tensor; its cost per iteration is a few iLQR iterations
    (quadrotor: ~5×)."""

    def quadratic_model(self, problem, node: NodeDerivatives, t, x, u, x_next, Vx, Vxx):
        """:class:`ILQR`'s model plus ``V'_x · ∂²F`` ``(n + m, n + m)`` in ``Q`` (added to
        ``Q_xx``, ``Q_ux``, ``Q_uu``; :func:`.linearize.dynamics_curvature`)."""
        Q, q = super().quadratic_model(problem, node, t, x, u, x_next, Vx, Vxx)
        return Q + dynamics_curvature(problem, x, u, x_next, t, Vx), q


class StrictFDDP(ILQR):
    """:class:`ILQR` with crocoddyl's ``SolverFDDP`` acceptance test exactly — the one phase it
    overrides is :meth:`accepts`.  Compared with the default test:

    * a predicted *increase* (``expected < 0``, from the gaps' terms) is accepted only while the
      iterate is infeasible (``actual > accept_increase · expected``); on a feasible iterate
      such a step is rejected;
    * the outright acceptance of a negligible model tests ``|d₁| < 1e-12`` (crocoddyl's
      ``th_grad``), not the signed ``d₁ < 1e-12`` (which also accepts any step of a strongly
      negative ``d₁``);
    * the sufficient-decrease tests are strict (``>``), and ``expected = 0`` counts as a
      descent.

    It converges to the optimum :class:`ILQR` finds; the iterates on the way may differ."""

    def accepts(self, state: DDPState, d1, expected, actual):
        descent = (jnp.abs(d1) < TH_GRAD) | (actual > self.accept * expected)
        increase = ~state.feasible & (actual > self.accept_increase * expected)
        return jnp.where(expected >= 0, descent, increase)


class AugmentedLagrangian(AbstractOCPSolver):
    """Augmented-Lagrangian outer loop (Powell–Hestenes–Rockafellar; Howell, Jackson & Manchester,
    *ALTRO*, IROS 2019, §III) around an inner solve (:class:`ILQR`, :class:`DDP`, or any
    warm-startable solver), for the path and terminal equality/inequality constraints (control
    bounds stay with the inner solver: the DDP-type solvers' box QP).

    Each outer iteration solves the inner problem with ``J + Σ λᵀc + ρ/2 |c|²`` (inequalities by
    their PHR term) for at most ``inner_iters`` iterations, then ``λ ← λ + ρ c`` (``max(0, ·)``
    for inequalities) and ``ρ ← penalty_factor · ρ`` when the violation did not drop below
    ``¼`` of its previous value (up to ``penalty_max``).

    The inner solver is used through the public protocol of :class:`AbstractOCPSolver` only:
    each inner solve runs through the same driver as a solve of its own (``inner_iters`` its
    cap), from ``init(problem, xs, us, feasible, warm)`` with ``warm.duals`` the multipliers and
    penalty of the augmented cost it minimizes
    (:meth:`~geomjax.control.trajopt.OptimalControlProblem.augmented_cost`), ``warm.extra``
    what its last solve left (:meth:`~AbstractOCPSolver.warm_start_from`; the DDP-type solvers'
    feedforward gains); its :class:`~geomjax.control.trajopt.OCPSolution` gives the iterate
    (``states``, ``controls``; ``violation`` infinite while gaps remain), ``status``,
    ``iterations``, the gains ``K``, ``k`` (``(N, m, n)``, ``(N, m)``; zeros for a solver
    without gains) and its cost (the augmented cost it minimized), and
    :meth:`~AbstractOCPSolver.last_iteration` what the history records of it.

    Fields:
        inner: the inner solver (default ``ILQR()``), with its own ``tol`` and regularization: a
            warm-startable :class:`AbstractOCPSolver` that takes no constraints.
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

    In model predictive control (:class:`~geomjax.control.MPC`, ``max_iters`` outer iterations
    per tick, each of at most ``inner_iters``) a solve stopped at that cap with its violation
    ``≤ constraint_tol`` is status 1 ``"max_iters"`` (:meth:`tick_status`): a capped solve,
    normal there; one that leaves the constraints violated stays status 4, a failure.  Its warm
    start carries the multipliers and the penalty from tick to tick while a constraint is
    active, and restarts them at zero and ``penalty_init`` once none is
    (:meth:`warm_start_from`), the path multipliers shifted one node with the controls (Howell, Jackson & Manchester,
    *ALTRO*, IROS 2019, §III and its model-predictive-control section).
    """

    inner: AbstractOCPSolver = ILQR()
    inner_iters: int = eqx.field(static=True, default=50)
    constraint_tol: float = 1e-6
    penalty_init: float = 10.0
    penalty_factor: float = 10.0
    penalty_max: float = 1e10
    handles_constraints: ClassVar[bool] = True
    warm_startable: ClassVar[bool] = True
    history_type: ClassVar[type[History]] = ALHistory

    def __check_init__(self):
        inner = self.inner
        if not (
            isinstance(inner, AbstractOCPSolver)
            and inner.warm_startable
            and not inner.handles_constraints
        ):
            raise ValueError(
                "AugmentedLagrangian: argument 'inner' must be a warm-startable solver of the "
                "unconstrained problem (ILQR(), DDP(), StrictFDDP(), or an AbstractOCPSolver "
                f"with warm_startable = True that takes no constraints), got {inner!r}"
            )
        if not (isinstance(self.inner_iters, int | np.integer) and self.inner_iters >= 1):
            raise ValueError(
                "AugmentedLagrangian: argument 'inner_iters' must be a positive int, got "
                f"{self.inner_iters!r}"
            )
        # the float settings, where given as numbers (traced values are not checked)
        given = {
            k: v
            for k in ("constraint_tol", "penalty_init", "penalty_factor", "penalty_max")
            if isinstance(v := getattr(self, k), int | float | np.number)
        }
        for k in ("constraint_tol", "penalty_init"):
            if k in given and not given[k] > 0:
                raise ValueError(
                    f"AugmentedLagrangian: argument '{k}' must be > 0, got {given[k]!r}"
                )
        if "penalty_factor" in given and not given["penalty_factor"] > 1:
            raise ValueError(
                "AugmentedLagrangian: argument 'penalty_factor' must be > 1, got "
                f"{given['penalty_factor']!r}"
            )
        if {"penalty_init", "penalty_max"} <= set(given) and not (
            given["penalty_max"] >= given["penalty_init"]
        ):
            raise ValueError(
                "AugmentedLagrangian: argument 'penalty_max' must be >= penalty_init "
                f"({given['penalty_init']!r}), got {given['penalty_max']!r}"
            )

    def init(self, problem, xs, us, feasible, warm: WarmStart | None = None):
        """From ``warm`` (optional): its ``duals``, the multipliers and penalty to start from
        (default: zero multipliers, the penalty ``penalty_init``; an earlier solution's
        ``duals``: a warm start)."""
        duals = None if warm is None else warm.duals
        return _al_init(self, problem, xs, us, feasible, duals)

    def step(self, problem, state):
        return _al_step(self, problem, state)

    def terminate(self, problem, state):
        return state.done, state.result

    def postprocess(self, problem, state, iterations, status, history) -> OCPSolution:
        """``iterations`` of the solution: the inner iterations in total (the driver's count,
        of outer iterations, is the number of finite rows of the history)."""
        return _al_postprocess(problem, state, status, history)

    def warm_start(self, problem, controls) -> WarmStart:
        """The controls, zero multipliers and the penalty ``penalty_init``."""
        return WarmStart(controls, zero_duals(problem, self.penalty_init))

    def warm_start_from(self, problem, solution: OCPSolution) -> WarmStart:
        """The controls, the multipliers and the penalty the next solve starts from: those of
        the solution, except once its plan has no active constraint.

        A plan that meets its constraints (violation ``≤ constraint_tol``) and whose
        first-order multiplier estimates ``λ⁺ = λ + ρ c`` (``max(0, ·)`` for inequalities) are
        all zero exerts no constraint force: the next solve starts from zero multipliers and
        the penalty ``penalty_init``, as a cold start would.  A receding-horizon loop's penalty
        therefore covers the constraint episode at hand (growing by ``penalty_factor`` while a
        solve cannot meet its constraints, up to ``penalty_max``) and does not keep the largest
        value any earlier episode needed.  While a constraint is active, the multipliers and
        the penalty are carried unchanged."""
        d = solution.duals
        if d is None:
            return WarmStart(solution.controls, d)
        rho = d.penalty
        cE, cI, tE, tI = _violations(problem, solution.states, solution.controls)
        estimates = (
            d.path_eq + rho * cE,
            jnp.maximum(d.path_ineq + rho * cI, 0.0),
            d.term_eq + rho * tE,
            jnp.maximum(d.term_ineq + rho * tI, 0.0),
        )
        inactive = jnp.all(jnp.stack([jnp.all(e == 0) for e in estimates]))
        reset = inactive & (solution.violation <= self.constraint_tol)
        cold = zero_duals(problem, self.penalty_init)
        duals = jax.tree_util.tree_map(lambda a, b: jnp.where(reset, a, b), cold, d)
        return WarmStart(solution.controls, duals)

    def tick_status(self, problem, solution: OCPSolution):
        """Status 1 ``"max_iters"`` for a solve stopped at its outer cap with its violation
        ``≤ constraint_tol``; else its own (status 4 when the cap left the constraints
        violated)."""
        h = solution.history["violation"]
        capped = jnp.isfinite(h[-1])  # every outer iteration ran
        met = solution.violation <= self.constraint_tol
        ok = capped & met & (solution.status == CONSTRAINTS)
        return jnp.where(ok, MAX_ITERS, solution.status).astype(solution.status.dtype)

    def last_iteration(self, solution: OCPSolution):
        """The last inner iteration of the last outer one: its ``|d₁ + d₂/2|`` and the
        augmented cost (constraint terms of that solve's multipliers included) before and after
        it."""
        h = solution.history
        it = jnp.sum(jnp.isfinite(h["violation"])).astype(jnp.int32)
        i = jnp.maximum(it - 1, 0)
        ran = jnp.where(h["inner_iterations"][i] > 0, it, 0)
        return ran, h["stop"][i], h["step_from"][i], h["step_to"][i]


def _node_times(problem):
    return problem.dt * jnp.arange(problem.steps + 1, dtype=problem.dtype)


def with_defaults(solver, dtype):
    """``solver`` with its ``None`` settings replaced by the values they stand for (``tol`` by
    :func:`default_tol`, ``reg_decrease`` by ``reg_factor``; an :class:`AugmentedLagrangian`'s
    inner solver likewise): the same iterations, and one compiled program whether a setting
    was left at its default or given (``ILQR()`` and ``ILQR(tol=1e-10)`` share it)."""
    if isinstance(solver, AugmentedLagrangian):
        return eqx.tree_at(lambda s: s.inner, solver, with_defaults(solver.inner, dtype))
    if not isinstance(solver, AbstractDDPSolver):
        return solver
    if solver.tol is None:
        solver = eqx.tree_at(lambda s: s.tol, solver, default_tol(solver, dtype), is_leaf=_none)
    if solver.reg_decrease is None:
        solver = eqx.tree_at(lambda s: s.reg_decrease, solver, solver.reg_factor, is_leaf=_none)
    return solver


def _none(x):
    return x is None


def default_tol(solver, dtype):
    """The solver's convergence tolerance ``tol``, or its default for ``dtype`` (an
    :class:`AugmentedLagrangian`'s: its inner solver's)."""
    if isinstance(solver, AugmentedLagrangian):
        solver = solver.inner
    tol = getattr(solver, "tol", None)  # a solver of its own may have no tolerance
    if tol is not None:
        return tol
    return 1e-10 if jnp.finfo(dtype).bits > 32 else 1e-5


# --- ILQR / DDP -------------------------------------------------------------------------------
class DDPState(eqx.Module):
    """The state of a DDP-type solve between iterations (the driver holds the iteration count
    and the history).

    Fields:
        xs, us: the iterate (states with a leading axis ``(steps + 1,)``, controls).
        cost: its cost, the augmented-Lagrangian terms of ``duals`` included.
        feasible: whether ``xs`` is a rollout of ``us`` (no gaps).
        reg: the regularization the next backward pass starts from.
        result: status code (0, or 2 once the regularization limit is hit); done: whether the
            solver stops on its own (converged, or the regularization limit).
        K, k: the gains of the last backward pass (``k`` warm-starts the next box QPs).
        duals: the augmented-Lagrangian multipliers and penalty, fixed during the solve.
    """

    xs: Any
    us: jax.Array
    cost: jax.Array
    feasible: jax.Array
    reg: jax.Array
    result: jax.Array
    done: jax.Array
    K: jax.Array
    k: jax.Array
    duals: Any


def _ddp_init(solver, problem, xs, us, feasible, duals=None, k=None):
    dtype = problem.dtype
    n = problem.chart.dim(problem.system, problem.state0)
    m, N = problem.control_dim, problem.steps
    duals = zero_duals(problem) if duals is None else duals
    return DDPState(
        xs=xs,
        us=us,
        cost=total_cost(problem, xs, us, duals),
        feasible=jnp.asarray(feasible),
        reg=jnp.asarray(solver.reg_init, dtype),
        result=jnp.asarray(SUCCESSFUL, jnp.int32),
        done=jnp.zeros((), bool),
        K=jnp.zeros((N, m, n), dtype),
        k=jnp.zeros((N, m), dtype) if k is None else k,
        duals=duals,
    )


def _ddp_step(solver: AbstractDDPSolver, problem, s: DDPState):
    """One iteration: the phases of :class:`AbstractDDPSolver`, then the new state and the
    iteration's :class:`DDPHistory` row."""
    lin = solver.linearize(problem, s)
    reg, direction = solver.compute_direction(problem, s, lin)
    improvement = solver.expected_improvement(problem, lin, direction)
    stop, converged = solver.stopping_criterion(problem, s, improvement, direction)
    trial = solver.line_search(problem, s, direction, improvement, direction.ok & ~converged)
    accepted = trial.accepted
    xs1 = jax.tree_util.tree_map(lambda p, q: jnp.where(accepted, p, q), trial.xs, s.xs)
    us1 = jnp.where(accepted, trial.us, s.us)
    cost1 = jnp.where(accepted, trial.cost, s.cost)
    feasible1 = s.feasible | (accepted & (trial.alpha == 1.0))
    reg1 = solver.update_regularization(reg, trial, converged)
    give_up = (~direction.ok | (~accepted & ~converged)) & (reg1 >= solver.reg_max)
    result = jnp.where(converged, SUCCESSFUL, jnp.where(give_up, REG_LIMIT, s.result))
    record = dict(
        cost=s.cost,
        gap=jnp.max(jnp.abs(lin.nodes.gap), initial=0.0),
        reg=reg,
        step=jnp.where(accepted, trial.alpha, 0.0),
        stop=stop,
    )
    state = DDPState(
        xs=xs1,
        us=us1,
        cost=cost1,
        feasible=feasible1,
        reg=reg1,
        result=result.astype(jnp.int32),
        done=converged | give_up,
        K=direction.K,
        k=direction.k,
        duals=s.duals,
    )
    return state, record


def _ddp_postprocess(problem, s: DDPState, iterations, status, history) -> OCPSolution:
    # the cost the solve minimized: the state's (Σ dt·l + Φ, plus the augmented-Lagrangian
    # terms of the duals held fixed in an inner solve); no further traced copy of the costs in
    # the solver's program (the quadrotor's SE(3) logarithms were an eighth of it)
    return OCPSolution(
        times=_node_times(problem),
        states=s.xs,
        controls=s.us,
        K=s.K,
        k=s.k,
        cost=s.cost,
        violation=jnp.maximum(
            problem.violation(s.xs, s.us),
            jnp.where(s.feasible, 0.0, jnp.inf),  # gaps left open: not a trajectory
        ),
        status=status,
        iterations=iterations,
        history=history.as_dict(),
        duals=s.duals,
    )


# --- augmented Lagrangian ---------------------------------------------------------------------
class _ALState(eqx.Module):
    xs: Any
    us: jax.Array
    duals: Duals
    v: jax.Array  # largest constraint violation
    feasible: jax.Array
    total: jax.Array  # inner iterations in total
    cost: jax.Array  # J without constraint terms
    result: jax.Array
    done: jax.Array
    K: jax.Array
    k: jax.Array
    warm: WarmStart  # the inner solver's warm start for its next solve (duals: None)


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


def _inner_warm(warm: WarmStart) -> WarmStart:
    """The inner solver's warm start without its duals (the outer loop sets them)."""
    return WarmStart(warm.controls, None, warm.extra)


def _al_init(solver, problem, xs, us, feasible, duals=None):
    dtype = problem.dtype
    N = problem.steps
    n = problem.chart.dim(problem.system, problem.state0)
    m = problem.control_dim
    return _ALState(
        xs=xs,
        us=us,
        duals=zero_duals(problem, solver.penalty_init) if duals is None else duals,
        v=_max_violation(_violations(problem, xs, us), dtype),
        feasible=jnp.asarray(feasible),
        total=jnp.zeros((), jnp.int32),
        cost=problem.cost(xs, us),
        result=jnp.asarray(CONSTRAINTS, jnp.int32),
        done=jnp.zeros((), bool),
        K=jnp.zeros((N, m, n), dtype),
        k=jnp.zeros((N, m), dtype),
        warm=_inner_warm(solver.inner.warm_start(problem, us)),
    )


def _al_step(solver, problem, c: _ALState):
    """One outer iteration: an inner solve with the current multipliers (through the driver,
    from the inner solver's warm start), then their update; ``(state, record)``."""
    dtype = problem.dtype
    inner = solver.inner
    warm = WarmStart(c.warm.controls, c.duals, c.warm.extra)
    sol = iterate(problem, inner, c.xs, c.us, c.feasible, solver.inner_iters, warm)
    xs, us = sol.states, sol.controls
    cons = _violations(problem, xs, us)
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
    # an inner solution whose gaps are still open reports an infinite violation
    feasible = sol.violation < jnp.inf
    ok_inner = sol.status == SUCCESSFUL
    met = v <= solver.constraint_tol
    success = met & ok_inner & feasible
    failed = (sol.status == NONFINITE) | ((sol.status == REG_LIMIT) & (rho >= solver.penalty_max))
    result = jnp.where(
        success, SUCCESSFUL, jnp.where(sol.status == NONFINITE, NONFINITE, CONSTRAINTS)
    )
    cost = problem.cost(xs, us)
    _, stop, before, after = inner.last_iteration(sol)
    record = dict(
        cost=cost,
        violation=v,
        penalty=rho,
        inner_iterations=sol.iterations.astype(dtype),
        stop=stop,
        step_from=before,
        step_to=after,
    )
    # keep the multipliers of the converged iterate (the KKT multipliers)
    duals = jax.tree_util.tree_map(lambda a, b: jnp.where(success, b, a), duals, d)
    state = _ALState(
        xs=xs,
        us=us,
        duals=duals,
        v=v,
        feasible=feasible,
        total=c.total + sol.iterations,
        cost=cost,
        result=result.astype(jnp.int32),
        done=success | failed,
        K=sol.K,
        k=sol.k,
        warm=_inner_warm(inner.warm_start_from(problem, sol)),
    )
    return state, record


def _al_postprocess(problem, c: _ALState, status, history) -> OCPSolution:
    return OCPSolution(
        times=_node_times(problem),
        states=c.xs,
        controls=c.us,
        K=c.K,
        k=c.k,
        cost=problem.cost(c.xs, c.us),
        violation=problem.violation(c.xs, c.us),
        status=status,
        iterations=c.total,
        history=history.as_dict(),
        duals=c.duals,
    )

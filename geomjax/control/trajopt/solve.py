"""The entry point :func:`solve_ocp`: checks, one compiled loop over a solver's steps, and the
progress monitor of eager solves."""

from __future__ import annotations

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..._internal import compile_cache
from ..._internal.aot import structure
from ..._internal.eager import LEGACY_EMITTERS, quick_compiled, top_level_options
from ..._internal.tracing import any_traced, is_traced
from ..._internal.warn import renamed
from ...systems.base import AbstractSystem
from .loop import Monitor, iterate
from .problem import Duals, OptimalControlProblem, zero_duals
from .solution import NONFINITE, OCPSolution
from .solvers import DDP, AbstractOCPSolver, WarmStart, with_defaults

__all__ = ["quasi_static_controls", "solve_ocp"]


def quasi_static_controls(problem: OptimalControlProblem, state=None, iterations: int = 4):
    """The controls that hold ``state`` (default ``problem.state0``) where it is: ``u*`` ``(m,)``
    minimizing ``|f(x, u) ⊖ x|²``, the step's change of the state in the problem's chart, by
    ``iterations`` Gauss–Newton steps from ``u = 0`` (one is exact when the step is affine in
    ``u``, as a thrust map under an explicit method is), clipped to the bounds.  For a body at
    rest under gravity, the hover thrusts (crocoddyl's ``quasiStatic``, its solvers' default
    start); from a state in motion, the controls that change it least over one step.

    ``solve_ocp(problem, solver, controls="quasi-static")`` starts from the rollout of these
    controls at every node."""
    sys, chart = problem.system, problem.chart
    x = problem.state0 if state is None else state
    t0 = jnp.zeros((), problem.dtype)

    def residual(u):
        return chart.minus(sys, problem.step(x, u, t0), x)

    def gauss_newton(u, _):
        r, J = residual(u), jax.jacfwd(residual)(u)
        return (u - jnp.linalg.lstsq(J, r)[0]).astype(u.dtype), None

    u0 = jnp.zeros((problem.control_dim,), problem.dtype)
    u, _ = jax.lax.scan(gauss_newton, u0, None, length=iterations)
    return jnp.clip(u, problem.lower, problem.upper)


def _check_initial(problem, us, xs):
    m, N = problem.control_dim, problem.steps
    if us is None:
        us = jnp.zeros((N, m), problem.dtype)
    elif isinstance(us, str):
        if us != "quasi-static":
            raise ValueError(
                "solve_ocp: argument 'controls' must be an array (steps, control_dim) or "
                f"'quasi-static', got {us!r}"
            )
        u = _quasi_static(problem)
        us = jnp.broadcast_to(u, (N, m))
    us = jnp.asarray(us, problem.dtype)
    if us.shape != (N, m):
        raise ValueError(
            f"solve_ocp: argument 'controls' must have shape (steps, control_dim) = ({N}, {m}), "
            f"got {us.shape}"
        )
    if xs is not None:
        lead = {a.shape[0] for a in jax.tree_util.tree_leaves(xs)}
        if lead != {N + 1}:
            raise ValueError(
                f"solve_ocp: argument 'states' must have a leading axis of steps + 1 = {N + 1}, "
                f"got {sorted(lead)}"
            )
    return us, xs


def check_duals(problem, solver, duals, where="solve_ocp"):
    """``duals`` checked against the problem's constraints (their shapes) and the solver
    (``where``: the entry point named in the error)."""
    if not solver.handles_constraints:
        raise ValueError(
            f"{where}: argument 'duals' (multipliers to start from) needs a solver that takes "
            f"constraints (AugmentedLagrangian), got {type(solver).__name__}"
        )
    want = zero_duals(problem)
    if not isinstance(duals, Duals) or structure(duals) != structure(want):
        raise ValueError(
            f"{where}: argument 'duals' must be the duals of a solve (OCPSolution.duals) or of a "
            "closed loop (MPCResult.duals, MPCPlan.duals) of a problem with the same constraints "
            f"and horizon, {structure(want)}, got {structure(duals)}"
        )
    return duals


def _solve_traced(problem, solver, us, xs, max_iters, monitor=False, duals=None):
    problem = problem.prepared()
    us = jnp.clip(us, problem.lower, problem.upper)
    if xs is None:
        xs, feasible = problem.rollout(us), True
    else:
        xs = jax.tree_util.tree_map(lambda a, b: a.at[0].set(b), xs, problem.state0)
        feasible = False
    warm = None if duals is None else WarmStart(us, duals)
    return iterate(problem, solver, xs, us, feasible, max_iters, warm, monitor)


# An eager solve is a program of its own: compiled with XLA:CPU's legacy elemental emitters,
# which compile it in about half the time with iterations about as fast (figures: the
# architecture page, "Measured design choices").  Under an outer jit/vmap the solve is inlined
# in the caller's program and compiled with the caller's options.
_solve = top_level_options(_solve_traced, LEGACY_EMITTERS, small_loops=True)
# ``fast_iterations=True``: also without XLA:CPU's library fusions (the small products in the
# loop's own kernel): iterations 2–3× faster, compilation 1.4–2.2× longer
_solve_fast = top_level_options(
    _solve_traced, LEGACY_EMITTERS, small_loops=True, library_fusions=False
)


def _prepare(problem):
    """:meth:`OptimalControlProblem.prepared` ahead of an eager solve, system by system: each
    evaluated on the host (its first calls per structure, then a quick program), so that the
    solve's program takes the inverse inertia as an input instead of computing it (the
    quadrotor's unrolled 6 × 6 inverse was a twelfth of the program; ``prepared`` inside it
    then changes nothing)."""
    return jax.tree_util.tree_map(
        lambda x: _prepare_system(x) if isinstance(x, AbstractSystem) else x,
        problem,
        is_leaf=lambda x: isinstance(x, AbstractSystem),
    )


# eagerly a small program of its own (its first call evaluated on the host); inlined under jit
_quasi_static = quick_compiled(quasi_static_controls)


@quick_compiled
def _prepare_system(system):
    return system.prepared()


def solve_ocp(
    problem: OptimalControlProblem,
    solver=None,
    controls=None,
    states=None,
    *,
    max_iters: int = 100,
    progress: bool | None = None,
    fast_iterations: bool = False,
    duals=None,
    us=None,
    xs=None,
) -> OCPSolution:
    """Solve ``problem`` with ``solver`` (:class:`DDP` by default; :class:`ILQR`,
    :class:`AugmentedLagrangian`).

    Arguments:
        controls: initial controls ``(steps, control_dim)`` (default zeros), clipped to the
            bounds (``OCPSolution.controls`` of an earlier solve: a warm start); or
            ``"quasi-static"``: :func:`quasi_static_controls` at every node (the controls that
            hold the initial state, e.g. a quadrotor's hover thrusts: crocoddyl's default).
        states: initial states (leading axis ``steps + 1``): a multiple-shooting start (the gaps
            are closed by the forward passes); default: the rollout of ``controls``.
        duals: the multipliers and penalty an :class:`AugmentedLagrangian` solve starts from
            (``OCPSolution.duals`` of an earlier solve of a problem with the same constraints: a
            warm start, as model predictive control does tick to tick); default: zero
            multipliers and the solver's ``penalty_init``.
        us, xs: deprecated names of ``controls`` and ``states``.
        max_iters: iteration cap (outer iterations for :class:`AugmentedLagrangian`, whose inner
            solves have ``inner_iters`` each).
        progress: a tqdm progress bar over the iterations, started after the first one (which
            compiles).  Default: on when called eagerly, off under ``jit``/``vmap``.
        fast_iterations: compile the eager solve for speed per iteration rather than for time
            to the first result: XLA:CPU then emits the solver's small matrix products into
            its loop's own kernel instead of calling a kernel library for each (2–3× faster
            iterations, 1.4–2.2× longer compilation, the same optimum; measured
            on a 2-core CPU, see the benchmarks page).  For a problem solved many times with
            the same structure (other targets, weights or initial states reuse the program).
            Under an outer ``jit``/``vmap`` the caller's program decides.

    Called eagerly (and ``progress`` not ``False``), the compiled loop reports each iteration to
    the host: ``history["time"]`` is the wall time (s) at the end of each iteration since the
    call (its first entry includes the compilation; ``time[-1] − time[0]`` is the run after
    it).  With ``progress=False`` there is no such report (a host callback per iteration costs
    about as much as a fast iteration): ``history["time"]`` holds only the wall time of the
    whole call, at the last iteration (NaN before it).  Under a trace it is NaN.
    With JAX's persistent compilation cache on (``geomjax.configure(compilation_cache=DIR)``),
    the eager solve compiles without that per-iteration report, so that its program is written
    to the cache and loaded by later processes (JAX caches no program that calls back to
    Python): ``history["time"]`` then holds only the wall time of the whole call, at the last
    iteration (NaN before it), and there is no progress bar unless ``progress=True`` asks for
    one (then the program is not cached).

    Jittable and vmappable (one compiled ``lax.while_loop``: the driver
    :func:`~geomjax.control.trajopt.loop.iterate`, which owns the iteration cap, the history and
    the non-finite check).  Eagerly, a cost or dynamics that is not finite (at the initial
    guess, or left by a step: status 3 ``"nonfinite"``) raises ``ValueError``; any other failure
    is reported in :attr:`OCPSolution.status` (see :meth:`OCPSolution.check`)."""
    if not isinstance(problem, OptimalControlProblem):
        raise ValueError(
            f"solve_ocp: argument 'problem' must be an OptimalControlProblem, got {type(problem)}"
        )
    solver = DDP() if solver is None else solver
    if not isinstance(solver, AbstractOCPSolver):
        raise ValueError(
            "solve_ocp: argument 'solver' must be ILQR(), DDP(), AugmentedLagrangian() or another "
            f"AbstractOCPSolver, got {solver!r}"
        )
    if problem.constrained and not solver.handles_constraints:
        raise ValueError(
            "solve_ocp: the problem has path/terminal constraints; pass "
            "solver=AugmentedLagrangian(inner=...) (control bounds alone need no wrapper)"
        )
    if fast_iterations not in (True, False):
        raise ValueError(
            f"solve_ocp: argument 'fast_iterations' must be True or False, got {fast_iterations!r}"
        )
    solve = _solve_fast if fast_iterations else _solve
    if not (isinstance(max_iters, int | np.integer) and max_iters >= 1):
        raise ValueError(
            f"solve_ocp: argument 'max_iters' must be a positive int, got {max_iters!r}"
        )
    if duals is not None:
        duals = check_duals(problem, solver, duals)
    us = renamed(controls, us, "solve_ocp", "controls", "us")
    xs = renamed(states, xs, "solve_ocp", "states", "xs")
    us, xs = _check_initial(problem, us, xs)
    # the solver's float settings as arrays of the problem's dtype: traced, not static, so that
    # other tolerances or penalties reuse the compiled program (one compilation per structure);
    # a setting left at None is its value first (a default and a given value share the program)
    solver = with_defaults(solver, problem.dtype)
    solver = jax.tree_util.tree_map(
        lambda v: jnp.asarray(v, problem.dtype) if isinstance(v, float) else v, solver
    )
    eager = not any_traced(problem, solver, us, xs)
    if eager:
        problem = _prepare(problem)
    if not eager:
        sol = solve(problem, solver, us, xs, int(max_iters), False, duals)
    else:
        t = np.full(int(max_iters), np.nan)
        if progress is False or (progress is None and compile_cache.in_effect()):
            # no host callback: no report per iteration (each one cost ~0.25 ms on a 2-core
            # CPU, as much as a fast iteration itself), and the program can go to (and come
            # from) JAX's persistent cache, which holds no program that calls back to Python
            t0 = time.perf_counter()
            sol = solve(problem, solver, us, xs, int(max_iters), False, duals)
            jax.block_until_ready(sol.controls)
            done = np.flatnonzero(np.isfinite(np.asarray(sol.history["cost"])))
            t[done[-1] if done.size else 0] = time.perf_counter() - t0
        else:
            name = type(solver).__name__
            bar = progress is None or bool(progress)
            monitor = Monitor(int(max_iters), bar, f"solve_ocp {name}")
            previous, Monitor.active = Monitor.active, monitor
            try:
                sol = solve(problem, solver, us, xs, int(max_iters), True, duals)
                jax.block_until_ready(sol.controls)
                jax.effects_barrier()
            finally:
                Monitor.active = previous
                monitor.close()
            n = min(len(monitor.times), t.size)
            t[:n] = monitor.times[:n]
        history = dict(sol.history, time=jnp.asarray(t, problem.dtype))
        sol = eqx.tree_at(lambda s_: s_.history, sol, history)
    r = sol.status
    if not is_traced(r) and np.asarray(r).shape == () and int(r) == NONFINITE:
        ran = int(sol.iterations)
        where = (
            "at the initial guess (arguments 'controls'/'states')"
            if ran == 0
            else f"after {ran} iterations (the solver's step left a cost that is not finite)"
        )
        raise ValueError(
            "solve_ocp: the cost (argument 'stage_cost' or 'terminal_cost' of the problem) or the "
            f"dynamics returned NaN or inf {where}"
        )
    return sol

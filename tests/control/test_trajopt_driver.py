"""The driver owns the bookkeeping (iteration cap, history, non-finite handling, the cap's
status) and the solvers keep only their algorithm: shown with a solver written here that is not
DDP-type — damped Newton on the controls by single shooting, a few dozen lines of the public
protocol of ``AbstractOCPSolver`` — run alone by ``solve_ocp``, as the inner solver of
``AugmentedLagrangian`` and in model predictive control.  Its optima are checked against
iLQR's and by central finite differences of the cost in the controls."""

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax.control.examples import attitude_problem
from geomjax.control.mpc import MPC, _retarget, run_mpc
from geomjax.control.trajopt import (
    ILQR,
    AbstractOCPSolver,
    AugmentedLagrangian,
    History,
    OCPSolution,
    OptimalControlProblem,
    solve_ocp,
)
from geomjax.control.trajopt.loop import iterate
from geomjax.integrators import SemiImplicitEuler
from geomjax.results import Status

H = 4
INERTIA = jnp.array([1.0, 2.0, 3.0])


class NewtonHistory(History):
    cost: jax.Array
    step: jax.Array
    stop: jax.Array


class NewtonState(eqx.Module):
    us: jax.Array
    cost: jax.Array
    duals: Any
    done: jax.Array
    status: jax.Array


class ShootingNewton(AbstractOCPSolver):
    """Damped Newton on the controls of the single-shooting cost ``u ↦ J(rollout(u), u)`` (the
    augmented cost at ``warm.duals`` when started with some), the Hessian's eigenvalues made
    positive, with a backtracking (Armijo) line search; no control bounds."""

    tol: float = 1e-12
    warm_startable: ClassVar[bool] = True
    history_type: ClassVar[type] = NewtonHistory

    def _objective(self, problem, us, duals):
        xs = problem.rollout(us)
        if duals is None:
            return problem.cost(xs, us)
        return problem.augmented_cost(xs, us, duals)

    def init(self, problem, xs, us, feasible, warm=None):
        duals = None if warm is None else warm.duals
        return NewtonState(
            us, self._objective(problem, us, duals), duals, jnp.array(False), jnp.array(0)
        )

    def step(self, problem, s):
        shape = s.us.shape

        def f(v):
            return self._objective(problem, v.reshape(shape), s.duals)

        v = s.us.ravel()
        g, Hm = jax.grad(f)(v), jax.hessian(f)(v)
        # the Hessian's eigenvalues made positive (|λ|, at least 1e-8 of the largest): a descent
        # direction everywhere, Newton's step near a minimum
        w, V = jnp.linalg.eigh(Hm)
        w = jnp.maximum(jnp.abs(w), 1e-8 * jnp.abs(w).max())
        d = -V @ ((V.T @ g) / w)
        stop = 0.5 * jnp.abs(g @ d)  # the model's decrease for a full step
        converged = stop <= self.tol * (1 + jnp.abs(s.cost))
        alphas = 0.5 ** jnp.arange(12.0)
        trial = jax.vmap(lambda a: f(v + a * d))(alphas)
        ok = trial <= s.cost + 1e-4 * alphas * (g @ d)  # a converged iterate steps too
        i = jnp.argmax(ok)
        accepted = ok[i]
        us1 = jnp.where(accepted, (v + alphas[i] * d).reshape(shape), s.us)
        cost1 = jnp.where(accepted, trial[i], s.cost)
        stuck = ~accepted & ~converged
        status = jnp.where(stuck, Status.REGULARIZATION_LIMIT, Status.CONVERGED)
        record = dict(cost=s.cost, step=jnp.where(accepted, alphas[i], 0.0), stop=stop)
        return NewtonState(us1, cost1, s.duals, converged | stuck, status), record

    def terminate(self, problem, s):
        return s.done, s.status

    def postprocess(self, problem, s, iterations, status, history):
        xs = problem.rollout(s.us)
        n, (N, m) = problem.chart.dim(problem.system, problem.state0), s.us.shape
        return OCPSolution(
            times=problem.dt * jnp.arange(N + 1),
            states=xs,
            controls=s.us,
            K=jnp.zeros((N, m, n)),
            k=jnp.zeros((N, m)),
            cost=s.cost,
            violation=problem.violation(xs, s.us),
            status=status,
            iterations=iterations,
            history=history.as_dict(),
            duals=s.duals,
        )

    def last_iteration(self, solution):
        it = solution.iterations
        i = jnp.maximum(it - 1, 0)
        h = solution.history
        return it, h["stop"][i], h["cost"][i], solution.cost


class RateLimit(eqx.Module):
    """``|Ω_i| ≤ w`` as ``(Ω − w, −Ω − w) ≤ 0``."""

    limit: jax.Array

    def __call__(self, t, x, u):
        w = x.Pi / INERTIA
        return jnp.concatenate([w - self.limit, -w - self.limit])


def _problem(limit=None):
    p = attitude_problem(
        torque_max=None,
        exact_target=False,
        steps=H,
        duration=2.0,
        method=SemiImplicitEuler(),
        weight=100.0,
    )
    if limit is None:
        return p
    return OptimalControlProblem(
        p.system,
        p.method,
        p.state0,
        p.dt,
        p.steps,
        p.stage_cost,
        p.terminal_cost,
        control_dim=3,
        path_inequality=RateLimit(jnp.asarray(limit)),
    )


@pytest.fixture(scope="module")
def free():
    """iLQR's optimum of the problem without the rate limit."""
    return solve_ocp(_problem(), ILQR(), max_iters=100, progress=False)


def test_a_solver_of_its_own_reaches_the_optimum_through_the_driver(free):
    """Alone: converged where the cost's gradient in the controls is zero (central finite
    differences), at iLQR's optimum (to iLQR's own tolerance); the history holds one row per
    iteration, NaN after."""
    problem = _problem()
    sol = solve_ocp(problem, ShootingNewton(), max_iters=30, progress=False)
    assert sol.stop_reason == "converged" and free.stop_reason == "converged"
    # iLQR stops on a predicted improvement <= 1e-10 (1 + |J|): its controls ~1e-5 from the
    # optimum, its cost within about that squared
    np.testing.assert_allclose(np.asarray(sol.controls), np.asarray(free.controls), atol=1e-4)
    assert float(free.cost) - 1e-9 <= float(sol.cost) <= float(free.cost)

    J = jax.jit(lambda us: problem.cost(problem.rollout(us), us))

    def central_differences(us, h=1e-6):
        out = np.zeros_like(us)
        for idx in np.ndindex(us.shape):
            e = np.zeros_like(us)
            e[idx] = h
            out[idx] = (float(J(us + e)) - float(J(us - e))) / (2 * h)
        return out

    grad = central_differences(np.asarray(sol.controls))
    at_ilqr = central_differences(np.asarray(free.controls))  # not zero there: the test bites
    assert np.abs(grad).max() < 1e-7 < np.abs(at_ilqr).max()
    n = int(sol.iterations)
    assert n >= 1 and n < 30  # iterations run: at least one, well inside the cap
    hist = {k: np.asarray(v) for k, v in sol.history.items()}
    assert set(hist) == {"cost", "step", "stop", "time"}
    assert np.all(np.isfinite(hist["cost"][:n])) and np.all(np.isnan(hist["cost"][n:]))
    assert np.all(np.diff(hist["cost"][:n]) <= 0)  # a descent method


def test_augmented_lagrangian_around_a_solver_of_its_own(free):
    """The inner solver need not be DDP-type: the rate-limited problem solved by the augmented
    Lagrangian around the shooting Newton solver meets the limit at the optimum the augmented
    Lagrangian around iLQR finds (the limit active: the unconstrained optimum exceeds it)."""
    top = float(jnp.abs(free.states.Pi / INERTIA).max())
    limit = 0.8 * top
    problem = _problem(limit)
    ours = AugmentedLagrangian(inner=ShootingNewton(tol=1e-10), inner_iters=30)
    theirs = AugmentedLagrangian(inner=ILQR(), inner_iters=30)
    sol = solve_ocp(problem, ours, max_iters=15, progress=False)
    ref = solve_ocp(problem, theirs, max_iters=15, progress=False)
    assert sol.stop_reason == "converged" and ref.stop_reason == "converged"
    assert float(sol.violation) <= 1e-6
    rates = np.abs(np.asarray(sol.states.Pi / INERTIA))
    assert rates.max() <= limit + 1e-6 and rates.max() >= limit - 1e-6  # active
    np.testing.assert_allclose(np.asarray(sol.controls), np.asarray(ref.controls), atol=1e-5)
    np.testing.assert_allclose(float(sol.cost), float(ref.cost), rtol=1e-6)
    assert float(sol.cost) > float(free.cost)
    # what the outer loop records of each inner solve: its iterations, summed in `iterations`
    inner = np.asarray(sol.history["inner_iterations"])
    assert int(np.nansum(inner)) == int(sol.iterations) > 0


def test_augmented_lagrangian_refuses_an_inner_solver_that_cannot_be_warm_started():
    class Cold(ShootingNewton):
        warm_startable: ClassVar[bool] = False

    with pytest.raises(ValueError, match="argument 'inner'"):
        AugmentedLagrangian(inner=Cold())
    with pytest.raises(ValueError, match="argument 'inner'"):
        AugmentedLagrangian(inner=AugmentedLagrangian())


@pytest.mark.long  # ~20 s of compilation: the closed loop and the direct solves it is checked against
def test_model_predictive_control_with_a_solver_of_its_own():
    """Three ticks of run_mpc (model = plant) equal direct solves from the states reached,
    each warm-started with the previous plan shifted by one node."""
    problem, iters = _problem(), 2
    res = run_mpc(problem, steps=3, controller=MPC(ShootingNewton(), max_iters=iters), warn=False)
    assert res.controls.shape == (3, 3)
    us = jnp.zeros((H, 3))
    x = problem.state0
    for j in range(3):
        t = j * problem.dt
        direct = solve_ocp(
            _retarget(problem, x, jnp.asarray(t)), ShootingNewton(), us, max_iters=iters,
            progress=False,
        )  # fmt: skip
        np.testing.assert_allclose(
            np.asarray(res.controls[j]), np.asarray(direct.controls[0]), atol=1e-12
        )
        assert int(res.iterations[j]) == int(direct.iterations)
        x = problem.step(x, direct.controls[0], t)
        us = jnp.concatenate([direct.controls[1:], direct.controls[-1:]])


class GradientSteps(ShootingNewton):
    """Fixed gradient steps on the controls that never stop on their own; with ``nan_after``, the
    step after the first leaves a NaN cost (its ``status`` field marks the first step taken)."""

    nan_after: bool = True

    def step(self, problem, s):
        def f(us):
            return self._objective(problem, us, s.duals)

        us1 = s.us - 1e-3 * jax.grad(f)(s.us)
        cost = f(us1)
        if self.nan_after:
            cost = jnp.where(s.status == 7, jnp.nan, cost)
        record = dict(cost=s.cost, step=jnp.ones(()), stop=jnp.zeros(()))
        return NewtonState(us1, cost, s.duals, jnp.array(False), jnp.array(7)), record

    def terminate(self, problem, s):
        return jnp.array(False), jnp.asarray(Status.CONVERGED)


def test_the_driver_stops_a_step_that_leaves_a_nonfinite_cost():
    """The driver, not the solver, stops on a step that leaves NaN: status "nonfinite" after
    the two iterations run, the history NaN after them; a solver that runs on is stopped by the
    cap (status "max_iters"); an initial cost that is NaN runs no iteration."""
    problem = _problem().prepared()
    us = jnp.zeros((H, 3))
    xs = problem.rollout(us)
    run = eqx.filter_jit(iterate)
    sol = run(problem, GradientSteps(), xs, us, True, 10)
    assert int(sol.status) == Status.NONFINITE and int(sol.iterations) == 2
    cost = np.asarray(sol.history["cost"])
    assert np.all(np.isfinite(cost[:2])) and np.all(np.isnan(cost[2:]))
    capped = run(problem, GradientSteps(nan_after=False), xs, us, True, 10)
    assert int(capped.status) == Status.MAX_ITERS and int(capped.iterations) == 10
    assert np.all(np.isfinite(np.asarray(capped.history["cost"])))

    bad = eqx.tree_at(lambda p: p.stage_cost, problem, lambda t, x, u: jnp.sum(u**2) + jnp.nan)
    sol = run(bad, GradientSteps(nan_after=False), xs, us, True, 10)
    assert int(sol.status) == Status.NONFINITE and int(sol.iterations) == 0
    assert np.all(np.isnan(np.asarray(sol.history["cost"])))
    with pytest.raises(ValueError, match="after 2 iterations"):
        solve_ocp(_problem(), GradientSteps(), max_iters=10, progress=False)


class EarlierProtocol(GradientSteps):
    """A solver of the earlier protocol: ``step`` returns the state alone."""

    def step(self, problem, s):
        return super().step(problem, s)[0]


def test_the_driver_names_a_step_of_the_earlier_protocol():
    problem = _problem().prepared()
    us = jnp.zeros((H, 3))
    with pytest.raises(TypeError, match=r"EarlierProtocol\.step must return \(state, record\)"):
        iterate(problem, EarlierProtocol(), problem.rollout(us), us, True, 3)

"""Model predictive control with path constraints kept in closed loop: the augmented Lagrangian
warm-started tick to tick (controls, multipliers shifted one node, penalty; Howell, Jackson &
Manchester, *ALTRO*, IROS 2019, §III).  The small attitude model of test_mpc.py (4 nodes of
0.5 s, semi-implicit Euler) with a body-rate limit ``|Ω_i| ≤ w``: what is claimed is read from
the plant's states, not from the solver's report."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax.control.examples import attitude_problem
from geomjax.control.mpc import MPC, OnlineMPC, _control_step, _retarget, run_mpc
from geomjax.control.trajopt import (
    ILQR,
    AbstractOCPSolver,
    AugmentedLagrangian,
    OptimalControlProblem,
    WarmStart,
    solve_ocp,
)
from geomjax.integrators import SemiImplicitEuler
from geomjax.integrators.simulate import ConvergenceError

H, DT, STEPS, TMAX = 4, 0.5, 40, 0.8
INERTIA = jnp.array([1.0, 2.0, 3.0])
#: the rate limit: about half the largest rate of the unconstrained closed loop (0.61 rad/s)
LIMIT = 0.3
#: the settings that keep it from the first tick on, cold-started from zero controls (measured:
#: every solve converged, the plant's largest rate 1.2e-7 below the limit; 5 outer iterations
#: leave the first five ticks' plans violated, status 4, the plant 6.4e-6 above the limit)
AL = AugmentedLagrangian(inner=ILQR(), inner_iters=10)
AL_ITERS = 10


class RateLimit(eqx.Module):
    """``(Ω − w, −Ω − w) ≤ 0``: the body rate ``Ω = Π / I`` within ``±w`` about each axis."""

    limit: jax.Array

    def __call__(self, t, x, u):
        w = x.Pi / INERTIA
        return jnp.concatenate([w - self.limit, -w - self.limit])


class Band(eqx.Module):
    """``floor ≤ Ω_1 ≤ ceiling`` (impossible for a floor above the ceiling)."""

    floor: jax.Array
    ceiling: jax.Array

    def __call__(self, t, x, u):
        w1 = x.Pi[0] / INERTIA[0]
        return jnp.stack([self.floor - w1, w1 - self.ceiling])


def _model(limit=None):
    """The small attitude model; ``limit``: a rate limit ``w``, or a :class:`Band`."""
    p = attitude_problem(
        torque_max=TMAX,
        exact_target=False,
        steps=H,
        duration=H * DT,
        method=SemiImplicitEuler(),
        weight=100.0,
    )
    if limit is not None and not isinstance(limit, Band):
        limit = RateLimit(jnp.asarray(limit, jnp.float64))
    return _constrained(p, lower=p.lower, upper=p.upper, path_inequality=limit)


def _constrained(p, **constraints):
    """``p`` (its dynamics and costs) with the bounds and constraints ``constraints``."""
    return OptimalControlProblem(
        p.system,
        p.method,
        p.state0,
        p.dt,
        p.steps,
        p.stage_cost,
        p.terminal_cost,
        control_dim=3,
        **constraints,
    )


def _rates(res):
    """``(steps + 1, 3)`` body rates of the plant's states."""
    return np.asarray(res.states.Pi) / np.asarray(INERTIA)


@pytest.fixture(scope="module")
def unconstrained():
    return run_mpc(_model(), steps=STEPS, controller=MPC(ILQR(), max_iters=1), warn=False)


def test_constrained_closed_loop_keeps_the_rate_limit(unconstrained):
    """With MPC(AugmentedLagrangian) the plant's rate stays within the limit (to the solver's
    constraint_tol, 1e-6) at every tick and the plant still reaches its target at rest; the same
    loop with MPC(ILQR) on the problem without the constraint turns twice as fast."""
    assert np.abs(_rates(unconstrained)).max() > 1.5 * LIMIT  # measured 0.61
    res = run_mpc(_model(LIMIT), steps=STEPS, controller=MPC(AL, max_iters=AL_ITERS))
    excess = np.abs(_rates(res)).max(axis=-1) - LIMIT
    assert excess.max() <= AL.constraint_tol, excess.max()  # measured -1.2e-7
    assert np.abs(_rates(res)).max() >= LIMIT - 1e-3  # the limit is active
    assert float(res.error[-1]) <= 1e-5  # at the target at rest: measured 4.0e-7
    assert bool(res.healthy) and not np.asarray(res.failed).any()
    res.check()
    # the warm start carried the penalty and the multipliers of the constraint
    assert res.duals is not None and float(res.duals.penalty) >= AL.penalty_init
    assert res.duals.path_ineq.shape == (H, 6)


def test_inactive_constraints_match_ilqr(unconstrained):
    """A rate limit far above any rate reached (10 rad/s) is inactive at every node: its PHR
    term and derivatives vanish, so one outer iteration of the augmented Lagrangian per tick is
    one inner iLQR solve of the same cost, and the closed loop is the iLQR loop's to round-off,
    status by status (the capped solves are ``max_iters`` in both)."""
    al = AugmentedLagrangian(inner=ILQR(), inner_iters=1)
    res = run_mpc(_model(10.0), steps=STEPS, controller=MPC(al, max_iters=1), warn=False)
    np.testing.assert_array_equal(np.asarray(res.status), np.asarray(unconstrained.status))
    np.testing.assert_array_equal(np.asarray(res.iterations), np.asarray(unconstrained.iterations))
    assert (np.asarray(res.status) == 1).sum() >= 10  # capped ticks are compared as well
    for a, b in zip(
        jax.tree_util.tree_leaves(res.states), jax.tree_util.tree_leaves(unconstrained.states)
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.controls, unconstrained.controls, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.cost, unconstrained.cost, rtol=1e-10, atol=1e-14)
    np.testing.assert_array_equal(np.asarray(res.duals.path_ineq), 0.0)


def test_shifted_multipliers_are_the_solvers_moved_one_node():
    """One tick's warm start for the next: the solver's controls and path multipliers moved one
    node (the last node repeated), element by element; terminal multipliers (none here) and
    penalty kept.  The tick is one compiled program, as in the closed loop."""
    problem = _model(LIMIT).prepared()
    ctrl = MPC(AL, max_iters=AL_ITERS)
    warm0 = AL.warm_start(problem, jnp.zeros((H, 3)))
    assert isinstance(warm0, WarmStart) and float(warm0.duals.penalty) == AL.penalty_init
    u, warm1, sol = jax.jit(lambda w: _control_step(problem, ctrl, w, problem.state0, 0.0))(warm0)
    lam, lam1 = np.asarray(sol.duals.path_ineq), np.asarray(warm1.duals.path_ineq)
    assert np.abs(lam).max() > 0.1  # the limit is active: multipliers to move
    for k in range(H):
        src = min(k + 1, H - 1)
        np.testing.assert_array_equal(lam1[k], lam[src])
        np.testing.assert_array_equal(np.asarray(warm1.controls[k]), np.asarray(sol.controls[src]))
    assert float(warm1.duals.penalty) == float(sol.duals.penalty)
    np.testing.assert_array_equal(np.asarray(u), np.asarray(sol.controls[0]))

    # the online controller carries the same warm start: its next plan is this one
    online = OnlineMPC(_model(LIMIT), ctrl)
    plan = online.init()
    assert plan.duals.path_ineq.shape == (H, 6)
    u2, plan = online.step(plan, problem.state0, 0.0)
    np.testing.assert_allclose(np.asarray(plan.duals.path_ineq), lam1, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(np.asarray(u2), np.asarray(u), rtol=0, atol=1e-10)
    assert int(plan.status) == 0


def test_time_dependent_constraints_are_shifted_with_the_problem():
    """The retargeted problem evaluates its path constraints at absolute time ``t0 + k·dt``."""

    class Ramp(eqx.Module):
        def __call__(self, t, x, u):
            return jnp.stack([t - 1.0])

    p = _constrained(_model(), path_inequality=Ramp(), path_equality=Ramp())
    q = _retarget(p, p.state0, jnp.asarray(2.5))
    for fn in (q.path_inequality, q.path_equality):
        np.testing.assert_array_equal(
            np.asarray(fn(jnp.asarray(0.5), p.state0, jnp.zeros(3))), [2.0]
        )


def test_a_loop_that_cannot_meet_its_constraints_is_reported():
    """A floor on the rate about the first axis above its ceiling (``1 ≤ Ω_1 ≤ 0.5``: no
    state meets both): every solve leaves the constraints violated (status 4), reported as
    failures by the warning, summary() and check(); a capped solve that meets its constraints
    would not be (next test)."""
    al = AugmentedLagrangian(inner=ILQR(), inner_iters=3)
    band = Band(jnp.asarray(1.0), jnp.asarray(0.5))
    with pytest.warns(UserWarning, match="constraints not met"):
        res = run_mpc(_model(band), steps=6, controller=MPC(al, max_iters=2))
    assert np.asarray(res.failed).all() and not bool(res.healthy)
    assert np.all(np.asarray(res.status) == 4)
    w1 = _rates(res)[:, 0]
    assert np.all((w1 < 1.0) | (w1 > 0.5))  # the plant's states violate the band
    assert "NOT healthy" in res.summary() and "constraints not met" in res.summary()
    with pytest.raises(ConvergenceError, match="constraints can be met"):
        res.check()


def test_a_loop_continued_from_its_result_is_the_longer_loop():
    """``run_mpc(..., controls=res.plan, duals=res.duals, state0=res.states[-1])`` continues a
    closed loop where it stopped: two runs of ``STEPS / 2`` ticks are one run of ``STEPS`` (the
    problem is time-invariant), states, controls and multipliers to round-off.  The rate limit
    is active in the first ticks only: by the handover the plan has no active constraint, so what
    the first run hands over is the cold start (zero multipliers, ``penalty_init``; see the next
    test) and a continuation without ``duals`` is the same loop.  ``OnlineMPC.init(duals=)``
    starts from the same multipliers.  The whole loop is
    test_constrained_closed_loop_keeps_the_rate_limit's (the same compiled program on the same
    worker)."""
    ctrl, problem = MPC(AL, max_iters=AL_ITERS), _model(LIMIT)
    half = STEPS // 2
    whole = run_mpc(problem, steps=STEPS, controller=ctrl, warn=False)
    first = run_mpc(problem, steps=half, controller=ctrl, warn=False)
    last = jax.tree_util.tree_map(lambda a: a[-1], first.states)
    rest = run_mpc(
        problem,
        state0=last,
        steps=half,
        controller=ctrl,
        controls=first.plan,
        duals=first.duals,
        warn=False,
    )
    np.testing.assert_allclose(
        np.asarray(rest.controls), np.asarray(whole.controls[half:]), atol=1e-10
    )
    np.testing.assert_allclose(
        np.asarray(rest.states.Pi), np.asarray(whole.states.Pi[half:]), atol=1e-10
    )
    np.testing.assert_allclose(
        np.asarray(rest.duals.path_ineq), np.asarray(whole.duals.path_ineq), atol=1e-8
    )
    assert float(rest.duals.penalty) == float(whole.duals.penalty)
    assert float(first.duals.penalty) == AL.penalty_init  # the constraint episode is over
    assert not np.asarray(first.duals.path_ineq).any()
    cold = run_mpc(
        problem, state0=last, steps=half, controller=ctrl, controls=first.plan, warn=False
    )
    np.testing.assert_allclose(
        np.asarray(cold.states.Pi), np.asarray(rest.states.Pi), rtol=0, atol=1e-12
    )

    plan = OnlineMPC(problem, ctrl).init(first.plan, duals=first.duals)
    np.testing.assert_array_equal(
        np.asarray(plan.duals.path_ineq), np.asarray(first.duals.path_ineq)
    )
    with pytest.raises(ValueError, match="OnlineMPC.init: argument 'duals'"):
        OnlineMPC(_model(), MPC(ILQR())).init(duals=first.duals)
    with pytest.raises(ValueError, match="run_mpc: argument 'duals'"):
        run_mpc(
            _model(10.0),
            steps=2,
            controller=ctrl,
            duals=AL.warm_start(_model(), jnp.zeros((H, 3))).duals,
        )


@pytest.mark.long
def test_the_penalty_returns_to_its_start_once_no_constraint_is_active():
    """The warm start's penalty rule (``AugmentedLagrangian.warm_start_from``): carried while
    the rate limit is active, back to ``penalty_init`` with zero multipliers once the plan has
    no active constraint (carried while active: the shifted-multipliers test).  A long closed
    loop (2 × 40 ticks: the loop is run again from its initial state, continued from the first
    run's plan and duals, a second constraint episode): the plant keeps the limit in both episodes, the penalty each hands over is
    ``penalty_init`` (it reached 1000 within the episode; the rule that kept it reached 1000 and
    stayed there), and the second episode, which starts from what the first left, is the
    first to the tolerance of the solves (what a cold start gives)."""
    problem, ctrl = _model(LIMIT), MPC(AL, max_iters=AL_ITERS)
    cold = AL.warm_start(problem, jnp.zeros((H, 3))).duals  # both runs: one compiled program
    one = run_mpc(problem, steps=STEPS, controller=ctrl, duals=cold)
    two = run_mpc(problem, steps=STEPS, controller=ctrl, controls=one.plan, duals=one.duals)
    for res in (one, two):
        excess = np.abs(_rates(res)).max() - LIMIT
        assert -1e-3 <= excess <= AL.constraint_tol, excess  # active and kept
        assert float(res.duals.penalty) == AL.penalty_init
        assert not np.asarray(res.duals.path_ineq).any()
        assert bool(res.healthy) and float(res.error[-1]) <= 1e-5
    np.testing.assert_allclose(
        np.asarray(two.states.Pi), np.asarray(one.states.Pi), rtol=0, atol=1e-6
    )


def test_a_capped_solve_that_meets_its_constraints_is_not_a_failure():
    """tick_status: an augmented-Lagrangian solve stopped at its outer cap is ``max_iters`` when
    its violation is within constraint_tol (here the inactive limit: violation 0), status 4
    when it is not (the active limit, one outer iteration of one inner step)."""
    al = AugmentedLagrangian(inner=ILQR(), inner_iters=1)
    for limit, want in ((10.0, 1), (LIMIT / 4, 4)):
        problem = _model(limit)
        sol = solve_ocp(problem, al, max_iters=1, progress=False)
        assert int(sol.status) == 4  # its own status: constraints_not_met, as before
        assert int(al.tick_status(problem, sol)) == want
        assert (float(sol.violation) <= al.constraint_tol) == (want == 1)


def test_bad_solver_and_constraints_without_one_name_the_argument():
    class NotWarmStartable(AbstractOCPSolver):
        def init(self, problem, xs, us, feasible, max_iters):
            raise NotImplementedError

        def step(self, problem, state):
            raise NotImplementedError

        def terminate(self, problem, state):
            raise NotImplementedError

        def postprocess(self, problem, state):
            raise NotImplementedError

    for bad in (NotWarmStartable(), "ilqr"):
        with pytest.raises(ValueError, match="argument 'solver' must be a warm-startable"):
            MPC(bad)
    with pytest.raises(ValueError, match="argument 'problem' has path/terminal constraints"):
        run_mpc(_model(LIMIT), steps=2, controller=MPC(ILQR()))
    with pytest.raises(ValueError, match="argument 'problem' has path/terminal constraints"):
        OnlineMPC(_model(LIMIT))
    with pytest.raises(ValueError, match="argument 'duals'"):
        solve_ocp(_model(), ILQR(), duals=AL.warm_start(_model(), jnp.zeros((H, 3))).duals)
    with pytest.raises(ValueError, match="argument 'duals'"):
        solve_ocp(_model(LIMIT), AL, duals=AL.warm_start(_model(), jnp.zeros((H, 3))).duals)


@pytest.mark.long
def test_constrained_closed_loop_vmaps_over_the_limit():
    """The constrained closed loop is vmappable: a batch of two rate limits (the constraint's
    array field traced) gives each member's own eager closed loop to round-off, and each keeps
    its own limit on the plant's states."""
    limits = jnp.array([LIMIT, 0.4])
    ctrl = MPC(AL, max_iters=AL_ITERS)
    batch = jax.jit(
        jax.vmap(lambda w: run_mpc(_model(w), steps=STEPS, controller=ctrl, warn=False))
    )(limits)
    for i, w in enumerate(np.asarray(limits)):
        one = run_mpc(_model(float(w)), steps=STEPS, controller=ctrl, warn=False)
        np.testing.assert_allclose(
            np.asarray(batch.states.Pi[i]), np.asarray(one.states.Pi), rtol=0, atol=1e-9
        )
        np.testing.assert_array_equal(np.asarray(batch.status[i]), np.asarray(one.status))
        rates = np.abs(np.asarray(batch.states.Pi[i]) / np.asarray(INERTIA)).max()
        assert rates <= w + AL.constraint_tol and rates >= w - 1e-3

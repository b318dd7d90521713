"""DDP / iLQR / augmented Lagrangian (geomjax.control.trajopt), each claim against something
independent: SciPy DOP853 re-simulation of the optimal controls (reference.py), first-order
optimality (KKT) by central finite differences of the cost of the rollout, and agreement of three
solvers (iLQR, DDP and L-BFGS shooting through :func:`geomjax.control.optimize`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.control import optimize
from geomjax.control.examples import QUADROTOR, attitude_problem, quadrotor_problem
from geomjax.control.trajopt import (
    DDP,
    ILQR,
    AugmentedLagrangian,
    OptimalControlProblem,
    box_qp,
    solve_ocp,
)
from geomjax.integrators.simulate import ConvergenceError
from geomjax.lie import SO3

from .reference import rigid_body_zoh, rotation_angle


def _fd_gradient(J, us, eps=1e-6):
    """Central differences of ``J`` ``(steps, m) -> scalar`` in every control entry (vmapped)."""
    flat = us.reshape(-1)
    E = jnp.eye(flat.size, dtype=us.dtype) * eps
    f = jax.jit(jax.vmap(lambda d: J((flat + d).reshape(us.shape))))
    return ((f(E) - f(-E)) / (2 * eps)).reshape(us.shape)


def _rollout_cost(problem):
    return lambda u: problem.cost(problem.rollout(u), u)


# --- box QP ----------------------------------------------------------------------------------
def test_box_qp_matches_enumeration_of_active_sets():
    """Projected Newton against the exact minimizer found by enumerating all 3^m active sets."""
    rng = np.random.default_rng(0)
    m = 4
    for _ in range(5):
        A = rng.normal(size=(m, m))
        H = A @ A.T + 0.1 * np.eye(m)
        g = rng.normal(size=m) * 3
        lo, hi = -np.ones(m) * 0.5, np.ones(m) * 0.7
        x, _, _, ok = jax.jit(box_qp)(
            jnp.asarray(H), jnp.asarray(g), jnp.asarray(lo), jnp.asarray(hi), jnp.zeros(m)
        )
        best, fbest = None, np.inf
        import itertools

        for act in itertools.product((0, 1, 2), repeat=m):  # 0 free, 1 lower, 2 upper
            act = np.array(act)
            y = np.where(act == 1, lo, np.where(act == 2, hi, 0.0))
            F = act == 0
            if F.any():
                y[F] = np.linalg.solve(H[np.ix_(F, F)], -(g[F] + H[np.ix_(F, ~F)] @ y[~F]))
            if np.all(y >= lo - 1e-12) and np.all(y <= hi + 1e-12):
                fy = 0.5 * y @ H @ y + g @ y
                if fy < fbest:
                    best, fbest = y, fy
        assert bool(ok)
        np.testing.assert_allclose(np.asarray(x), best, atol=1e-10)


# --- smooth unconstrained optimum: iLQR = DDP = L-BFGS ----------------------------------------
def _attitude_penalty(**kw):
    return attitude_problem(
        torque_max=None, exact_target=False, steps=20, method=gj.RKMK4(), weight=100.0, **kw
    )


@pytest.mark.long
def test_ilqr_ddp_and_lbfgs_agree_on_smooth_optimum():
    prob = _attitude_penalty()
    # a tight stop (expected improvement ≤ 1e-13 (1 + J), i.e. |∇J| ~ 1e-7): the solutions are
    # then compared at 1e-5
    a = solve_ocp(prob, ILQR(tol=1e-13), max_iters=100)
    b = solve_ocp(prob, DDP(tol=1e-13), max_iters=100)
    assert a.stop_reason == "converged" and b.stop_reason == "converged"
    J = _rollout_cost(prob)
    res = optimize(jax.jit(J), a.controls * 0, "lbfgs", max_iters=400, gtol=1e-9, progress=False)
    # the optimum is isolated and strongly convex in u (effort term): the three minimizers agree
    # to the solvers' tolerances (L-BFGS at |∇J| ≤ 1e-9)
    np.testing.assert_allclose(a.controls, b.controls, atol=1e-5)
    np.testing.assert_allclose(a.controls, res.params, atol=1e-4)
    np.testing.assert_allclose(float(a.cost), float(res.loss), rtol=1e-8)
    # DDP (exact Newton on the controls) needs no more iterations than Gauss–Newton iLQR
    assert int(b.iterations) <= int(a.iterations)


# --- control limits: bounds exact, KKT by finite differences ----------------------------------
@pytest.mark.long
@pytest.mark.parametrize("solver", [ILQR(), DDP()])
def test_bounds_exact_and_kkt_by_finite_differences(solver):
    prob = attitude_problem(
        torque_max=0.2, exact_target=False, steps=20, method=gj.RKMK4(), weight=100.0
    )
    sol = solve_ocp(prob, solver, max_iters=200)
    assert sol.stop_reason == "converged", sol.message
    us = np.asarray(sol.controls)
    assert us.max() <= 0.2 and us.min() >= -0.2  # exactly: the forward pass clips
    at_hi, at_lo = us == 0.2, us == -0.2
    assert at_hi.sum() + at_lo.sum() >= 2, "the bound should be active"
    g = np.asarray(_fd_gradient(_rollout_cost(prob), sol.controls))
    scale = np.abs(g).max()
    free = ~(at_hi | at_lo)
    # stationarity in the free directions: the stop test bounds the expected improvement by
    # 1e-10 (1 + J), i.e. |∇J|² / λ_min(Q_uu) ≲ 1e-10: |∇J| ≲ 1e-5 relative; FD error ~1e-9
    assert np.abs(g[free]).max() <= 1e-4 * scale
    # multipliers of active bounds with the right sign: at the upper bound the cost must
    # decrease when u increases (∂J/∂u ≤ 0); at the lower bound ∂J/∂u ≥ 0
    assert np.all(g[at_hi] <= 1e-4 * scale) and np.all(g[at_lo] >= -1e-4 * scale)
    assert np.abs(g[at_hi | at_lo]).max() > 1e-2 * scale  # a real multiplier, not zero


# --- re-simulation by DOP853 -------------------------------------------------------------------
@pytest.mark.long
def test_attitude_exact_target_lgvi_resimulated_by_dop853():
    """Torque-limited rest-to-rest manoeuvre with the target as a terminal equality (augmented
    Lagrangian around iLQR) on the LGVI, then the zero-order-hold torques re-simulated by DOP853 on
    the unreduced spatial equations."""
    steps, T = 40, 4.0
    prob = attitude_problem(torque_max=0.8, steps=steps, duration=T)
    sol = solve_ocp(prob, AugmentedLagrangian(inner=ILQR()), max_iters=20)
    assert sol.stop_reason == "converged", sol.message
    assert float(sol.violation) <= 1e-6
    us = np.asarray(sol.controls)
    assert np.abs(us).max() <= 0.8 and np.isclose(np.abs(us).max(), 0.8)
    R, _, w, _ = rigid_body_zoh(
        np.diag([1.0, 2.0, 3.0]), 1.0, np.eye(3), np.zeros(3), us, T / steps
    )
    Rt = np.asarray(prob.terminal_equality.target)
    # the LGVI is second order: global error ~ C h² with h = 0.1 and C ~ |Ω|² T ~ 1 for this
    # slow manoeuvre (|Ω| ≲ 0.6 rad/s, T = 4): ~1e-2 at most; the bound is that estimate
    assert rotation_angle(Rt.T @ R) <= 1e-2
    assert np.linalg.norm(w) <= 1e-2


@pytest.mark.long
def test_quadrotor_with_thrust_limits_descends_and_respects_bounds():
    """crocoddyl's quadrotor example with its thrust limits (0.1 ≤ f_i ≤ 5): the cost decreases
    monotonically over the accepted steps, the thrusts stay in the box, and the final position
    is near the target.  (The unbounded example's optimum is compared with crocoddyl's own in
    benchmarks/bench_trajopt.py.)"""
    prob = quadrotor_problem(bounded=True)
    sol = solve_ocp(prob, DDP(), max_iters=100)
    assert sol.stop_reason == "converged", sol.message
    us = np.asarray(sol.controls)
    assert us.min() >= 0.1 and us.max() <= 5.0
    # the reported cost is the solver's own (no second evaluation in its program): it is the
    # cost of the returned trajectory, evaluated here again
    np.testing.assert_allclose(sol.cost, prob.cost(sol.states, sol.controls), rtol=1e-13)
    n = int(sol.iterations)
    costs = np.asarray(sol.history["cost"][:n])
    assert np.all(np.diff(costs) <= 1e-12 * costs[0])
    g = np.asarray(sol.states.g[-1])
    # the terminal weight 3 against the running terms leaves the pose a few cm off (crocoddyl's
    # own solution is the same: cost ~5e-3)
    assert np.linalg.norm(g[:3, 3] - np.array([1.0, 0.0, 1.0])) <= 0.1
    # re-simulated by DOP853 on the Newton–Euler equations with gravity (the thrusts through the
    # actuation matrix as zero-order-hold body wrenches): semi-implicit Euler is first order, so
    # the final pose error halves with the step; it is within twice its Richardson estimate
    c = QUADROTOR
    wrench = us @ np.asarray(prob.method.matrix).T
    R, x, _, _ = rigid_body_zoh(
        np.diag(c["inertia"]), c["mass"], np.eye(3), np.zeros(3), wrench, c["dt"], c["gravity"]
    )

    @jax.jit
    def half(us):
        def body(st, inp):
            u, t = inp
            return prob.method.step(prob.system, st, prob.dt / 2, u, t)[0], None

        ts = jnp.arange(2 * us.shape[0]) * prob.dt / 2
        return jax.lax.scan(body, prob.state0, (jnp.repeat(us, 2, axis=0), ts))[0].g

    g2 = np.asarray(half(sol.controls))
    err_h = np.linalg.norm(g[:3, 3] - x) + rotation_angle(R.T @ g[:3, :3])
    err_h2 = np.linalg.norm(g2[:3, 3] - x) + rotation_angle(R.T @ g2[:3, :3])
    est = np.linalg.norm(g[:3, 3] - g2[:3, 3]) + rotation_angle(g2[:3, :3].T @ g[:3, :3])
    assert 1.2 <= err_h / err_h2 <= 3.2, (err_h, err_h2)
    assert err_h <= 2 * 2 * est  # Richardson for order 1: err_h ≈ 2 |x_h − x_{h/2}|


# --- float32 -----------------------------------------------------------------------------------
@pytest.mark.long
def test_float32_run():
    prob = attitude_problem(
        torque_max=0.2,
        exact_target=False,
        steps=20,
        method=gj.RKMK4(),
        weight=100.0,
        dtype=jnp.float32,
    )
    sol = solve_ocp(prob, ILQR(), max_iters=100)
    assert sol.controls.dtype == jnp.float32
    assert sol.stop_reason == "converged", sol.message
    ref = solve_ocp(
        attitude_problem(
            torque_max=0.2, exact_target=False, steps=20, method=gj.RKMK4(), weight=100.0
        ),
        ILQR(),
        max_iters=100,
    )
    # float32 stops at an expected improvement of 1e-5 (1 + J): a control error up to
    # sqrt(2e-5 (1 + J) / λ_min(Q_uu)) with Q_uu ~ dt = 0.2, J ~ 1: ~1e-2 (measured 3e-3 near a
    # bound that switches); the cost is flat at the optimum (error quadratic in that)
    np.testing.assert_allclose(np.asarray(sol.controls), np.asarray(ref.controls), atol=1e-2)
    np.testing.assert_allclose(float(sol.cost), float(ref.cost), rtol=1e-4)
    assert np.abs(np.asarray(sol.controls)).max() <= np.float32(0.2)


# --- bad input, status ---------------------------------------------------------------------------
def _tiny():
    sys_ = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    x0 = gj.RigidBodyState(jnp.eye(3), jnp.zeros(3))
    return sys_, x0


@pytest.mark.long
def test_bad_input_names_the_argument():
    sys_, x0 = _tiny()

    def effort(t, x, u):
        return jnp.sum(u**2)

    with pytest.raises(ValueError, match="'lower' and 'upper'"):
        OptimalControlProblem(
            sys_,
            gj.RKMK4(),
            x0,
            0.1,
            5,
            effort,
            control_dim=3,
            lower=jnp.ones(3),
            upper=jnp.zeros(3),
        )
    with pytest.raises(ValueError, match="'lower'"):
        OptimalControlProblem(
            sys_, gj.RKMK4(), x0, 0.1, 5, effort, control_dim=3, lower=jnp.ones(2)
        )
    with pytest.raises(ValueError, match="'stage_cost'"):
        OptimalControlProblem(sys_, gj.RKMK4(), x0, 0.1, 5, lambda t, x, u: u, control_dim=3)
    with pytest.raises(ValueError, match="'steps'"):
        OptimalControlProblem(sys_, gj.RKMK4(), x0, 0.1, 0, effort, control_dim=3)
    prob = OptimalControlProblem(sys_, gj.RKMK4(), x0, 0.1, 5, effort, control_dim=3)
    with pytest.raises(ValueError, match="'controls'"):
        solve_ocp(prob, ILQR(), controls=jnp.zeros((4, 3)))
    with pytest.raises(ValueError, match="'states'"):
        solve_ocp(prob, ILQR(), states=jax.tree.map(lambda a: jnp.stack([a] * 3), x0))
    # the former names still work, with a deprecation warning; both names at once is an error
    with (
        pytest.warns(DeprecationWarning, match="'controls'"),
        pytest.raises(ValueError, match="'controls'"),
    ):
        solve_ocp(prob, ILQR(), us=jnp.zeros((4, 3)))
    with pytest.raises(ValueError, match="'states' only"):
        solve_ocp(prob, ILQR(), states=jnp.zeros(3), xs=jnp.zeros(3))
    nan_prob = OptimalControlProblem(
        sys_, gj.RKMK4(), x0, 0.1, 5, lambda t, x, u: jnp.sum(u**2) + jnp.nan, control_dim=3
    )
    with pytest.raises(ValueError, match="stage_cost"):
        solve_ocp(nan_prob, ILQR())
    with pytest.raises(ValueError, match="AugmentedLagrangian"):
        solve_ocp(attitude_problem(steps=5, method=gj.RKMK4()), ILQR())


@pytest.mark.long
def test_non_converged_run_says_so(capsys):
    prob = _attitude_penalty()
    sol = solve_ocp(prob, ILQR(), max_iters=2, progress=True)
    assert sol.stop_reason == "max_iters"
    assert not bool(sol.succeeded)
    with pytest.raises(ConvergenceError, match="maximum number of iterations"):
        sol.check()
    # the eager solve reports each iteration to the host: wall times at the end of both
    # iterations, nondecreasing; the progress bar (stderr) shows the compile time
    t = np.asarray(sol.history["time"])
    assert np.all(np.isfinite(t)) and t[1] >= t[0] > 0
    assert "compile + 1st iteration" in capsys.readouterr().err


# --- vmap over problems ------------------------------------------------------------------------
@pytest.mark.long
def test_vmap_over_targets_matches_individual_solves():
    angles = jnp.array([0.5, 1.0, 1.5])

    def one(a):
        return solve_ocp(
            attitude_problem(
                torque_max=0.2,
                exact_target=False,
                steps=20,
                method=gj.RKMK4(),
                weight=100.0,
                angle=a,
            ),
            ILQR(),
            max_iters=100,
        )

    batch = jax.jit(jax.vmap(one))(angles)
    assert np.all(np.asarray(batch.status) == 0)
    assert np.all(np.isnan(np.asarray(batch.history["time"])))  # no host timing under jit
    single = one(angles[2])
    np.testing.assert_allclose(batch.controls[2], single.controls, atol=1e-10)
    R = SO3.from_axis_angle(jnp.array([1.0, 2.0, -1.0]) / jnp.sqrt(6.0), angles[0])
    assert rotation_angle(np.asarray(R).T @ np.asarray(batch.states.R[0, -1])) < 0.1


def test_simulate_takes_actuator_commands_through_actuated():
    # simulate checks controls against the method's control shape: four rotor thrusts through
    # the quadrotor's thrust map, the same run as the body wrenches B u given directly
    from geomjax.control.examples import quadrotor_problem

    p = quadrotor_problem()
    u = jnp.asarray(np.random.default_rng(3).uniform(2.0, 5.0, (6, 4)))
    cmd = gj.simulate(p.system, p.method, p.state0, p.dt, 6, controls=u)
    wrench = gj.simulate(
        p.system, p.method.method, p.state0, p.dt, 6, controls=u @ p.method.matrix.T
    )
    np.testing.assert_allclose(
        np.asarray(cmd.states.g), np.asarray(wrench.states.g), rtol=1e-13, atol=1e-15
    )
    with pytest.raises(ValueError, match=r"'controls' must have shape \(6, 4\)"):
        gj.simulate(p.system, p.method, p.state0, p.dt, 6, controls=u @ p.method.matrix.T)


def test_a_default_setting_and_its_value_share_one_program():
    """``ILQR()`` and ``ILQR(tol=<its default>, reg_decrease=<reg_factor>)`` are the same solver:
    solve_ocp fills the ``None`` settings in before it compiles, so the second solve compiles
    nothing and gives the first one's result bit for bit (an augmented Lagrangian's inner
    solver likewise); the filled values are the documented defaults in both precisions."""
    from geomjax.control.trajopt.solvers import default_tol, with_defaults

    compiles = {"n": 0}

    def count(event, duration, **_):
        compiles["n"] += event == "/jax/core/compile/backend_compile_duration"

    p = attitude_problem(steps=5, exact_target=False)
    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        for _ in range(2):  # the second call's one-time host-side programs as well
            a = solve_ocp(p, ILQR(), progress=False)
        before = compiles["n"]
        b = solve_ocp(p, ILQR(tol=1e-10, reg_decrease=10.0), progress=False)
        after = compiles["n"]
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    assert after == before
    np.testing.assert_array_equal(np.asarray(a.controls), np.asarray(b.controls))
    assert int(a.iterations) == int(b.iterations)
    for dtype, tol in ((jnp.float64, 1e-10), (jnp.float32, 1e-5)):
        s = with_defaults(ILQR(reg_factor=4.0), dtype)
        assert s.tol == tol == default_tol(ILQR(), dtype) and s.reg_decrease == 4.0
    al = with_defaults(AugmentedLagrangian(inner=DDP(tol=1e-7)), jnp.float64)
    assert al.inner.tol == 1e-7 and al.inner.reg_decrease == al.inner.reg_factor

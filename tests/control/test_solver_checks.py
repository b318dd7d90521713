"""Small, fast checks of the trajectory-optimization solvers (3–4 nodes, explicit dynamics, so
each program compiles in seconds): what each part of DDP / iLQR / MPC / the implicit derivative
computes, each against an independent quantity —

* one DDP iteration on one node is Newton's step on the exact Hessian of the cost (autodiff of
  the rollout cost in the controls); iLQR's Gauss–Newton step is not;
* the feedforward of the last node solves ``Q_uu k = −Q_u`` with the exact second derivative of
  the cost in the last control;
* first-order optimality (KKT) of a bounded optimum by central finite differences;
* the implicit derivative of the optimum against central differences of re-solved problems;
* MPC's warm start: the plan after each control step against direct solves from the same
  states, shifted by hand;
* the backward pass against a plain node-by-node reference (dense solves, every box-QP
  iteration run) on random linearizations;
* a batch of problems under ``vmap`` against the same problems solved one by one.

The long tier runs the same properties at full size (test_trajopt.py, test_sensitivity.py,
test_mpc.py)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax._internal.eager import EAGER_COMPILER_OPTIONS, LEGACY_EMITTERS
from geomjax.control.examples import attitude_problem
from geomjax.control.mpc import MPC, OnlineMPC, _retarget, run_mpc
from geomjax.control.sensitivity import solve_ocp_implicit
from geomjax.control.trajopt import DDP, ILQR, WarmStart, solve_ocp
from geomjax.control.trajopt.solvers import default_tol
from geomjax.integrators import SemiImplicitEuler

# no regularization: the steps are the unregularized Newton / Gauss–Newton steps
NOREG = dict(reg_init=0.0, reg_min=0.0)

#: iLQR with its float64 default ``tol`` spelled out: a float setting is traced (``tol=None`` is
#: not), so the bounded 3-node solves below and the implicit-derivative check's plain solves
#: (``tol=1e-20``) are one compiled program
ILQR_DEFAULT = ILQR(tol=default_tol(ILQR(), jnp.float64))


class _Exact(eqx.Module):
    """A least-squares cost as a plain scalar function: the solvers then use its exact Hessian
    (for a :class:`ResidualCost` they use the Gauss–Newton one, as crocoddyl does)."""

    cost: eqx.Module

    def __call__(self, *args):
        return self.cost(*args)


def _exact(problem):
    return eqx.tree_at(lambda p: p.terminal_cost, problem, _Exact(problem.terminal_cost))


def _problem(steps, torque_max=None, angle=1.0):
    return attitude_problem(
        torque_max=torque_max,
        exact_target=False,
        steps=steps,
        duration=0.5 * steps,
        method=SemiImplicitEuler(),  # explicit: the cheapest second derivatives to compile
        weight=10.0,
        angle=angle,
    )


def _rollout_cost(problem):
    return lambda u: problem.cost(problem.rollout(u), u)


def _cost_gradient_hessian(problem):
    """``u ↦ (J(u), ∇J(u), ∇²J(u))`` of the rollout cost by autodiff, as one program compiled
    without XLA's optimization passes (evaluated eagerly, each of the rollout's operations
    would compile on its own: ~8x the compilation time)."""
    J = _rollout_cost(problem)
    return jax.jit(
        lambda us: (J(us), jax.grad(J)(us), jax.hessian(J)(us)),
        compiler_options=EAGER_COMPILER_OPTIONS,
    )


US0 = jnp.array([[0.3, -0.2, 0.4]])


def test_one_node_ddp_iteration_is_the_newton_step():
    prob = _exact(_problem(1))
    derivatives = _cost_gradient_hessian(prob)
    J0, g, H = derivatives(US0)
    g, H = g.reshape(-1), H.reshape(3, 3)
    newton = US0.reshape(-1) - np.linalg.solve(np.asarray(H), np.asarray(g))
    Jn = derivatives(jnp.asarray(newton.reshape(1, 3)))[0]
    assert float(Jn) < float(J0)  # a full step that the search accepts
    ddp = solve_ocp(prob, DDP(**NOREG), US0, max_iters=1, progress=False)
    assert float(ddp.history["step"][0]) == 1.0
    np.testing.assert_allclose(np.asarray(ddp.controls).reshape(-1), newton, rtol=1e-11, atol=1e-13)
    # iLQR drops the dynamics' curvature: a different (Gauss–Newton) step
    ilqr = solve_ocp(prob, ILQR(**NOREG), US0, max_iters=1, progress=False)
    assert np.max(np.abs(np.asarray(ilqr.controls).reshape(-1) - newton)) > 1e-5


def test_last_node_feedforward_uses_the_exact_second_derivative():
    prob = _exact(_problem(3))
    us = jnp.array([[0.3, -0.2, 0.4], [0.1, 0.2, -0.1], [-0.2, 0.1, 0.3]])
    _, g, H = _cost_gradient_hessian(prob)(us)
    g, H = g[-1], H[-1, :, -1, :]  # ∂²J/∂u_{N−1}²
    sol = solve_ocp(prob, DDP(**NOREG), us, max_iters=1, progress=False)
    k = np.asarray(sol.k[-1])  # the feedforward of the first backward pass: −Q_uu⁻¹ Q_u
    np.testing.assert_allclose(np.asarray(H) @ k, -np.asarray(g), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("solver", [ILQR_DEFAULT, DDP()])
def test_bounded_optimum_kkt_by_finite_differences(solver):
    limit = 0.15
    prob = _problem(3, torque_max=limit)
    sol = solve_ocp(prob, solver, max_iters=100, progress=False)
    assert sol.stop_reason == "converged", sol.message
    us = np.asarray(sol.controls)
    assert us.max() <= limit and us.min() >= -limit
    at_hi, at_lo = us == limit, us == -limit
    assert at_hi.sum() + at_lo.sum() >= 1, "the bound should be active"
    J = jax.jit(_rollout_cost(prob))
    eps = 1e-6
    g = np.zeros_like(us)
    for idx in np.ndindex(us.shape):
        e = np.zeros_like(us)
        e[idx] = eps
        g[idx] = (float(J(jnp.asarray(us + e))) - float(J(jnp.asarray(us - e)))) / (2 * eps)
    scale = np.abs(g).max()
    free = ~(at_hi | at_lo)
    assert np.abs(g[free]).max() <= 1e-4 * scale  # stationary in the free controls
    # active bounds hold with multipliers of the right sign (the cost wants to leave the box)
    assert np.all(g[at_hi] < 0) and np.all(g[at_lo] > 0)
    assert np.abs(g[at_hi | at_lo]).min() > 1e-3 * scale


def test_implicit_derivative_of_the_optimum_matches_finite_differences():
    solver = ILQR(tol=1e-20)  # stops on its last quadratic step: control error ~1e-12

    def solve(angle, implicit):
        prob = _problem(3, torque_max=50.0, angle=angle)  # bounds never active
        if implicit:
            return solve_ocp_implicit(prob, solver, max_iters=100)
        return solve_ocp(prob, solver, max_iters=100, progress=False)

    a = 1.0
    sol = solve(jnp.asarray(a), False)
    assert sol.stop_reason == "converged", sol.message

    # one reverse pass, pulled back from the cost and from each control (the rows of the
    # identity, batched), in one program compiled without XLA's backend optimization (the solve,
    # the factorization of the optimality conditions and the pullback; the same operations as
    # their eager programs, a shorter compilation)
    def pulled_back(x):
        (_, us), pullback = jax.vjp(lambda x: (lambda s: (s.cost, s.controls))(solve(x, True)), x)
        rows = jnp.eye(1 + us.size, dtype=us.dtype)
        return jax.vmap(pullback)((rows[:, 0], rows[:, 1:].reshape(-1, *us.shape)))[0]

    rows = np.asarray(jax.jit(pulled_back, compiler_options=EAGER_COMPILER_OPTIONS)(jnp.asarray(a)))
    dcost, dus = rows[0], rows[1:].reshape(np.shape(sol.controls))
    h = 1e-4
    plus, minus = solve(jnp.asarray(a + h), False), solve(jnp.asarray(a - h), False)
    fd_cost = (float(plus.cost) - float(minus.cost)) / (2 * h)
    fd_us = (np.asarray(plus.controls) - np.asarray(minus.controls)) / (2 * h)
    np.testing.assert_allclose(float(dcost), fd_cost, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(dus), fd_us, atol=1e-6 * np.abs(fd_us).max())
    assert np.abs(fd_us).max() > 1e-2  # the optimum moves with the target


def test_mpc_warm_start_is_the_previous_plan_shifted_by_one_node():
    """Three control steps of run_mpc (model = plant; the closed loop of
    test_online_mpc_steps_equal_run_mpc, one compiled program) against direct solves: the
    first from the initial state and guess, each next one from the state reached, warm-started
    with the previous plan shifted by one node by hand (ū_1, …, ū_{N−1}, ū_{N−1})."""
    horizon, iters = 3, 2
    prob = _problem(horizon, torque_max=0.8)
    us0 = jnp.asarray(np.random.default_rng(1).uniform(-0.3, 0.3, (horizon, 3)))
    ctrl = MPC(ILQR(), max_iters=iters)
    res = run_mpc(prob, steps=3, controller=ctrl, controls=us0)

    def shift(us):
        return jnp.concatenate([us[1:], us[-1:]])

    # the start time as an array like the later ones (a Python float would be a static field
    # of the retargeted problem: a program of its own)
    first = solve_ocp(_retarget(prob, prob.state0, 0 * prob.dt), ILQR(), us0, max_iters=iters)
    np.testing.assert_allclose(
        np.asarray(res.controls[0]), np.asarray(first.controls[0]), atol=1e-14
    )
    x1 = jax.tree_util.tree_map(lambda a: a[1], res.states)
    x1_direct = prob.step(prob.state0, first.controls[0], 0.0)
    np.testing.assert_allclose(np.asarray(x1.Pi), np.asarray(x1_direct.Pi), atol=1e-14)
    second = solve_ocp(_retarget(prob, x1, prob.dt), ILQR(), shift(first.controls), max_iters=iters)
    np.testing.assert_allclose(
        np.asarray(res.controls[1]), np.asarray(second.controls[0]), atol=1e-13
    )
    x2 = jax.tree_util.tree_map(lambda a: a[2], res.states)
    third = solve_ocp(
        _retarget(prob, x2, 2 * prob.dt), ILQR(), shift(second.controls), max_iters=iters
    )
    np.testing.assert_allclose(
        np.asarray(res.controls[2]), np.asarray(third.controls[0]), atol=1e-13
    )
    np.testing.assert_allclose(np.asarray(res.plan), np.asarray(shift(third.controls)), atol=1e-13)
    # the warm start matters: from no guess or from the unshifted plan, another control
    cold = solve_ocp(_retarget(prob, x1, prob.dt), ILQR(), None, max_iters=iters)
    unshifted = solve_ocp(_retarget(prob, x1, prob.dt), ILQR(), first.controls, max_iters=iters)
    for other in (cold, unshifted):
        assert np.max(np.abs(np.asarray(other.controls[0] - second.controls[0]))) > 1e-6


def test_online_mpc_steps_equal_run_mpc():
    """OnlineMPC, ticked from Python with the plant stepped outside its program, applies the
    controls of run_mpc's closed loop (model = plant) and hands over the same shifted plan."""
    horizon, iters, ticks = 3, 2, 3
    prob = _problem(horizon, torque_max=0.8)
    us0 = jnp.asarray(np.random.default_rng(1).uniform(-0.3, 0.3, (horizon, 3)))
    ctrl = MPC(ILQR(), max_iters=iters)
    res = run_mpc(prob, steps=ticks, controller=ctrl, controls=us0)
    online = OnlineMPC(prob, ctrl)
    plan, x = online.init(us0), prob.state0
    for j in range(ticks):
        u, plan = online.step(plan, x, j * prob.dt)
        np.testing.assert_allclose(np.asarray(u), np.asarray(res.controls[j]), atol=1e-12)
        assert int(plan.status) == int(res.status[j])
        # the same measure of how far the plan is from the model's optimum
        np.testing.assert_allclose(
            float(plan.stationarity), float(res.stationarity[j]), rtol=1e-9, atol=1e-15
        )
        x = prob.step(x, u, j * prob.dt)  # the plant, outside the controller's program
    np.testing.assert_allclose(np.asarray(plan.controls), np.asarray(res.plan), atol=1e-12)
    with pytest.raises(ValueError, match="'state'"):
        online.step(plan, x.R, 0.0)
    with pytest.raises(ValueError, match="'controls'"):
        online.init(jnp.zeros((horizon + 1, 3)))


def _online_ticks(online, step, ticks=3):
    """``ticks`` steps from states off the model's path (a plant that is not the model)."""
    prob = online.problem
    plan, x, out = online.init(), prob.state0, []
    for j in range(ticks):
        u, plan = step(plan, x, j * prob.dt)
        out.append((np.asarray(u), np.asarray(plan.controls), int(plan.status), float(plan.cost)))
        x = prob.step(x, 1.1 * u, j * prob.dt)
    return out


@pytest.mark.long  # two compilations of the step (~10 s); the default tier ticks the compiled
# step in test_online_mpc_steps_equal_run_mpc (against run_mpc's closed loop)
def test_online_mpc_compiled_step_equals_the_jit_path():
    """The ahead-of-time compiled step (flat problem arrays, one executable per signature)
    gives bitwise the controls, plan, status and cost of the ``equinox.filter_jit`` path it
    replaces, tick after tick."""
    from geomjax.control.mpc import _online_step

    online = OnlineMPC(_problem(3, torque_max=0.8), MPC(ILQR(), max_iters=1))

    def old(plan, x, t):
        t = jnp.asarray(t, online.problem.dtype)
        return _online_step(online.problem, online.controller, plan, x, t)

    fast, ref = _online_ticks(online, online.step), _online_ticks(online, old)
    assert len(online._steps.compiled) == 1  # one signature, compiled once
    for a, b in zip(fast, ref):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        assert a[2:] == b[2:]


@pytest.mark.long  # three more compilations of the step
def test_online_mpc_rebuilt_or_traced_uses_its_own_problem():
    """An OnlineMPC rebuilt around another problem (``equinox.tree_at``) shares the holder of
    the compiled steps but not its arrays: it solves its own problem; under ``jax.jit`` the
    step is traced into the caller's program with the same result."""
    online = OnlineMPC(_problem(3, torque_max=0.8), MPC(ILQR(), max_iters=1))
    first = _online_ticks(online, online.step, 1)
    other = eqx.tree_at(lambda o: o.problem, online, _problem(3, torque_max=0.8, angle=0.3))
    moved = _online_ticks(other, other.step, 1)
    fresh = OnlineMPC(other.problem, other.controller)
    np.testing.assert_array_equal(moved[0][0], _online_ticks(fresh, fresh.step, 1)[0][0])
    assert np.max(np.abs(moved[0][0] - first[0][0])) > 1e-3  # another target, other torques
    jitted = jax.jit(lambda o, plan, x, t: o.step(plan, x, t))
    traced = _online_ticks(online, lambda plan, x, t: jitted(online, plan, x, t), 1)
    np.testing.assert_allclose(traced[0][0], first[0][0], atol=1e-12)


# --- the backward pass against a plain reference ----------------------------------------------
def _reference_box_qp(H, g, lower, upper, x0, iters=20, line_steps=12):
    """Projected Newton (Tassa, Mansard & Todorov 2014, Algorithm 1) written plainly: every
    iteration run, LAPACK Cholesky, the objective evaluated at each trial step."""
    m = g.shape[0]
    eye = jnp.eye(m, dtype=H.dtype)

    def f(x):
        return 0.5 * x @ H @ x + g @ x

    def active(x):
        grad = g + H @ x
        clamped = ((x <= lower) & (grad > 0)) | ((x >= upper) & (grad < 0))
        return ~clamped, grad

    def factor(free):
        return jnp.linalg.cholesky(jnp.where(free[:, None] & free[None, :], H, eye))

    def body(_, carry):
        x, done = carry
        free, grad = active(x)
        L = factor(free)
        rhs = jnp.where(free, -(g + H @ jnp.where(free, 0.0, x)), 0.0)
        dx = jnp.where(free, jax.scipy.linalg.cho_solve((L, True), rhs) - x, 0.0)
        s = 0.5 ** jnp.arange(line_steps, dtype=H.dtype)
        trial = jnp.clip(x[None] + s[:, None] * dx[None], lower, upper)
        ft = jax.vmap(f)(trial)
        ok = (ft <= f(x) + 0.1 * (trial - x[None]) @ grad) & jnp.isfinite(ft)
        x1 = jnp.where(jnp.any(ok) & ~done, trial[jnp.argmax(ok)], x)
        gfree = jnp.max(jnp.abs(jnp.where(free, grad, 0.0)), initial=0.0)
        small = gfree <= 1e3 * jnp.finfo(H.dtype).eps * (1 + jnp.max(jnp.abs(g)))
        return x1, done | ~jnp.any(ok) | small

    x, _ = jax.lax.fori_loop(0, iters, body, (jnp.clip(x0, lower, upper), jnp.zeros((), bool)))
    return x, active(x)[0]


def _reference_backward(problem, second_order, J, grad, hess, VxN, VxxN, gaps, xs, us, kp, reg):
    """Mayne's recursion node by node in NumPy-like dense algebra: the ``Q`` blocks from ``A``,
    ``B`` separately, DDP's curvature as the Hessian of ``z ↦ V'_x · (f(x ⊕ δ, u + w) ⊖ x')``
    (``jax.hessian``), gains by ``jnp.linalg.solve`` on the free block."""
    n, m = VxN.shape[0], problem.control_dim
    chart, sys = problem.chart, problem.system
    Vx, Vxx = VxN, VxxN
    out = {k: [] for k in ("K", "k", "Vx", "Vxx", "Quk", "kQk")}
    for i in reversed(range(problem.steps)):
        A, B = J[i][:, :n], J[i][:, n:]
        Vx_eff = Vx + Vxx @ gaps[i]
        Qx = grad[i][:n] + A.T @ Vx_eff
        Qu = grad[i][n:] + B.T @ Vx_eff
        Qxx = hess[i][:n, :n] + A.T @ Vxx @ A
        Qux = hess[i][n:, :n] + B.T @ Vxx @ A
        Quu = hess[i][n:, n:] + B.T @ Vxx @ B
        if second_order:
            x = jax.tree_util.tree_map(lambda a, i=i: a[i], xs)
            xn = jax.tree_util.tree_map(lambda a, i=i: a[i + 1], xs)

            def vF(z, x=x, xn=xn, u=us[i], t=problem.times[i], v=Vx_eff):
                y = problem.step(chart.plus(sys, x, z[:n]), u + z[n:], t)
                return v @ chart.minus(sys, y, xn)

            S = jax.hessian(vF)(jnp.zeros(n + m))
            Qxx, Qux, Quu = Qxx + S[:n, :n], Qux + S[n:, :n], Quu + S[n:, n:]
        Quu = 0.5 * (Quu + Quu.T)
        Hr = Quu + reg * jnp.eye(m)
        if problem.bounded:
            lo, hi = problem.lower - us[i], problem.upper - us[i]
            k, free = _reference_box_qp(Hr, Qu, lo, hi, kp[i])
        else:
            k, free = -jnp.linalg.solve(Hr, Qu), jnp.ones(m, bool)
        # K = −(H_ff)⁻¹ Q_ux on the free rows (LU on the free block bordered by the identity)
        Hf = jnp.where(free[:, None] & free[None, :], Hr, jnp.eye(m))
        K = jnp.where(free[:, None], -jnp.linalg.solve(Hf, jnp.where(free[:, None], Qux, 0.0)), 0)
        Vx = Qx + K.T @ Quu @ k + K.T @ Qu + Qux.T @ k
        Vxx = Qxx + K.T @ Quu @ K + K.T @ Qux + Qux.T @ K
        Vxx = 0.5 * (Vxx + Vxx.T)
        for key, val in zip(out, (K, k, Vx, Vxx, Qu @ k, k @ Quu @ k), strict=True):
            out[key].insert(0, val)
    return {k: jnp.stack(v) for k, v in out.items()}


@pytest.mark.parametrize(
    "bounded, second_order",
    [
        (True, False),
        pytest.param(False, False, marks=pytest.mark.long),
        pytest.param(False, True, marks=pytest.mark.long),
        pytest.param(True, True, marks=pytest.mark.long),
    ],
)
def test_backward_pass_equals_a_plain_reference(bounded, second_order):
    """The solvers' backward pass (unrolled small factorizations, the quadratic model from the
    stacked Jacobian, the box QP that stops once settled) against the plain recursion above on
    random linearizations: gains, value derivatives and expected-improvement terms agree to
    round-off, for iLQR and DDP, with and without control bounds."""
    from geomjax.control.trajopt.linearize import Linearization, NodeDerivatives

    limit = 0.1
    prob = _problem(3, torque_max=limit if bounded else None)
    n, m, N = 6, 3, 3
    solver = DDP() if second_order else ILQR()
    reg = 1e-6

    def ours(J, grad, hess, VxN, VxxN, gaps, us, kp):
        lin = Linearization(NodeDerivatives(gap=gaps, J=J, grad=grad, hess=hess), VxN, VxxN)
        state = solver.init(prob, prob.rollout(us), us, False, WarmStart(us, extra=kp))
        out = solver.backward_pass(prob, state, lin, reg)
        return out, out.ok

    def reference(J, grad, hess, VxN, VxxN, gaps, us, kp):
        xs = prob.rollout(us)
        return _reference_backward(
            prob, second_order, J, grad, hess, VxN, VxxN, gaps, xs, us, kp, reg
        )

    ours, reference = jax.jit(ours), jax.jit(reference)
    rng = np.random.default_rng(0)
    clamped = 0
    for _ in range(4):
        R = rng.normal(size=(N, n + m, n + m))
        W = rng.normal(size=(n, n))
        args = (
            rng.normal(size=(N, n, n + m)),  # [A B]
            rng.normal(size=(N, n + m)),  # [l_x, l_u]
            R @ R.transpose(0, 2, 1) / (n + m) + 0.1 * np.eye(n + m),  # cost Hessian
            rng.normal(size=n),  # V_x(N)
            W @ W.T / n,  # V_xx(N)
            0.01 * rng.normal(size=(N, n)),  # gaps
            rng.uniform(-0.05, 0.05, (N, m)),  # controls
            rng.uniform(-0.05, 0.05, (N, m)),  # warm start of the box QP
        )
        args = tuple(jnp.asarray(a) for a in args)
        got, ok = ours(*args)
        want = reference(*args)
        assert bool(ok)
        for key, val in want.items():
            scale = 1 + float(jnp.max(jnp.abs(val)))
            np.testing.assert_allclose(getattr(got, key), val, atol=1e-9 * scale, err_msg=key)
        clamped += int(jnp.sum(jnp.abs(jnp.abs(want["k"] + args[6]) - limit) < 1e-12))
    if bounded:  # the random problems reach the bounds: the box QP's active sets are exercised
        assert clamped > 0


def test_batched_solves_equal_one_by_one_solves():
    """A batch of bounded problems (different targets) under ``vmap``: every member's solution,
    cost, iteration count and status are those of its own solve (a member that has converged
    stops changing while the others iterate)."""
    angles = jnp.array([0.2, 1.0, 2.5])

    def one(a, **kw):
        return solve_ocp(_problem(3, torque_max=0.15, angle=a), ILQR_DEFAULT, max_iters=100, **kw)

    # compiled with XLA:CPU's legacy emitters, as solve_ocp compiles its eager solves (the same
    # kernels, compiled faster)
    batch = jax.jit(jax.vmap(one), compiler_options=LEGACY_EMITTERS)(angles)
    its = []
    for i, a in enumerate(angles):
        # eagerly: the program of test_bounded_optimum_kkt_by_finite_differences[ILQR]
        s = one(a, progress=False)
        assert int(s.status) == 0, s.message
        np.testing.assert_allclose(batch.controls[i], s.controls, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(batch.cost[i], s.cost, rtol=1e-12)
        assert int(batch.iterations[i]) == int(s.iterations)
        its.append(int(s.iterations))
    assert len(set(its)) > 1  # members that stop at different iterations


@pytest.mark.parametrize(
    "solver",
    # DDP's fast program compiles for ~15 s; the option is the solvers' common loop's
    [ILQR_DEFAULT, pytest.param(DDP(), marks=pytest.mark.long)],
    ids=["ilqr", "ddp"],
)
def test_fast_iterations_solve_is_the_same_solve(solver):
    """``fast_iterations=True`` compiles the same solve with XLA:CPU's own kernels for the small
    products: the same optimum (the default program's is checked by KKT above). Round-off may
    change the path (a box-QP or line-search decision at a tie), not where it ends."""
    prob = _problem(3, torque_max=0.15)
    a = solve_ocp(prob, solver, max_iters=100, progress=False)
    b = solve_ocp(prob, solver, max_iters=100, progress=False, fast_iterations=True)
    assert a.stop_reason == b.stop_reason == "converged"
    np.testing.assert_allclose(b.controls, a.controls, atol=1e-6)
    np.testing.assert_allclose(b.cost, a.cost, rtol=1e-9)


def test_fast_iterations_program_has_no_library_fusions():
    """The option reaches XLA: the program compiled for ``fast_iterations`` calls no library
    fusion (where this XLA knows the option at all), and ``fast_iterations`` is checked.  The
    program is the eager solve's of test_fast_iterations_solve_is_the_same_solve[ilqr] (the
    problem prepared as ``solve_ocp`` prepares it, the same arguments): on the same worker it
    is not compiled again."""
    from geomjax._internal.xla_flags import NO_LIBRARY_FUSIONS, no_library_fusion_options
    from geomjax.control.trajopt.solve import _prepare, _solve_fast

    options = no_library_fusion_options()
    if jax.default_backend() == "cpu":
        assert options in ({}, NO_LIBRARY_FUSIONS)
    prob = _problem(3, torque_max=0.15)
    solver = jax.tree_util.tree_map(
        lambda v: jnp.asarray(v, prob.dtype) if isinstance(v, float) else v, ILQR_DEFAULT
    )
    us = jnp.zeros((3, 3), prob.dtype)
    compiled = _solve_fast.lower(_prepare(prob), solver, us, None, 100).compile()
    text = getattr(compiled, "compiled", compiled).as_text()
    if options:
        assert "ynn_fusion" not in text
    with pytest.raises(ValueError, match="fast_iterations"):
        solve_ocp(prob, ILQR(), fast_iterations="yes")


def test_progress_false_reports_the_whole_call_only():
    """``progress=False``: no report per iteration (no host callback), the call's wall time at
    the last iteration; the solve itself is the one with the report."""
    prob = _problem(3, torque_max=0.15)  # the quiet solve: the program of the KKT check
    quiet = solve_ocp(prob, ILQR_DEFAULT, max_iters=100, progress=False)
    t = np.asarray(quiet.history["time"])
    last = int(quiet.iterations) - 1
    assert np.isfinite(t[last]) and t[last] > 0
    assert np.all(np.isnan(np.delete(t, last)))
    reported = solve_ocp(prob, ILQR_DEFAULT, max_iters=100, progress=None)
    t = np.asarray(reported.history["time"])[: int(reported.iterations)]
    assert np.all(np.isfinite(t)) and np.all(np.diff(t) >= 0)
    np.testing.assert_array_equal(quiet.controls, reported.controls)

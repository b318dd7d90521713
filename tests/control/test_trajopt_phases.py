"""The phases of the DDP-type solvers that a converged optimum does not show: the line search's
acceptance test and the Levenberg–Marquardt regularization schedule, each checked step by step
against closed forms.

The problems are built so that every quantity of the solver's model is known by hand: the stage
cost ``l(u) = Σ_j (c₄u_j⁴ + c₂u_j² + c₁u_j)`` does not depend on the state, so the value
function is flat in the state (``V_x = 0``, ``V_xx = 0``: no terminal cost), the dynamics (a
rigid body driven by torques) drop out of the backward pass, and each node's model is the
scalar Newton model of ``dt·l`` per control entry, ``Q_u = dt l'(u)``, ``Q_uu = dt l''(u)``.  All
nodes start at ``u = 0`` and stay equal.  Both problems share one compiled solver (the
coefficients are traced)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax._internal.eager import EAGER_COMPILER_OPTIONS
from geomjax.control.trajopt import ILQR, OptimalControlProblem, solve_ocp

DT, STEPS, M = 0.1, 4, 3
MAX_ITERS = 60


class Quartic(eqx.Module):
    """``l(t, x, u) = Σ_j (c₄u_j⁴ + c₂u_j² + c₁u_j)``."""

    c: jnp.ndarray  # (c4, c2, c1)

    def __call__(self, t, x, u):
        c4, c2, c1 = self.c
        return jnp.sum(c4 * u**4 + c2 * u**2 + c1 * u)


def scalar_cost(c, u):
    c4, c2, c1 = c
    return c4 * u**4 + c2 * u**2 + c1 * u


def problem(c):
    body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    x0 = gj.RigidBodyState(jnp.eye(3), jnp.zeros(3))
    stage = Quartic(jnp.asarray(c, jnp.float64))
    return OptimalControlProblem(body, gj.RKMK4(), x0, DT, STEPS, stage, control_dim=M)


def total(c, u):
    """The problem's cost when every control entry equals ``u`` (by hand)."""
    return STEPS * M * DT * scalar_cost(c, u)


def stationary_point(c, near):
    """The real root of ``l'(u) = 4c₄u³ + 2c₂u + c₁`` nearest ``near``."""
    c4, c2, c1 = c
    roots = np.roots([4 * c4, 0.0, 2 * c2, c1])
    roots = roots[np.abs(roots.imag) < 1e-12].real
    return roots[np.argmin(np.abs(roots - near))]


def history(sol):
    n = int(sol.iterations)
    return {k: np.asarray(v)[:n] for k, v in sol.history.items()}


@pytest.mark.timeout(300)
def test_line_search_rejects_a_full_step_that_raises_the_cost():
    """``l(u) = 0.52u⁴ + ½u² − u``: from ``u = 0`` the Newton step of the quadratic model is
    ``k = 1``, whose predicted decrease (per entry, ``dt (k − k²/2) = dt/2``) is positive, but the
    quartic term makes the full step *raise* the cost a little (``l(1) = 0.02 > l(0) = 0``).  The
    line search must reject it (a decrease of at least ``accept`` = 0.1 of the predicted one is
    required) and accept ``α = ½`` (``l(½) = −0.3425``, predicted ``−0.375``)."""
    c = (0.52, 0.5, -1.0)
    solver = ILQR()
    sol = solve_ocp(problem(c), solver, max_iters=MAX_ITERS, progress=False)
    h = history(sol)
    # the model of the first iteration, by hand (Q_u = dt l'(0), Q_uu = dt l''(0) + reg)
    reg = h["reg"][0]
    assert reg == solver.reg_init  # Q_uu = dt > 0: the first factorization succeeds
    Qu, Quu = DT * c[2], DT * 2 * c[1]
    k = -Qu / (Quu + reg)
    n = STEPS * M
    d1, d2 = -n * Qu * k, -n * k * Quu * k

    def expected(a):
        return a * (d1 + 0.5 * a * d2)

    assert expected(1.0) > 0 and total(c, k) > total(c, 0.0)  # the premise
    a = h["step"][0]
    assert 0 < a < 1, "the full step raises the cost: it must be rejected"
    assert a == 0.5
    # the accepted trial: its cost as the solver recorded it and by hand, and the required
    # fraction of the predicted decrease
    np.testing.assert_allclose(h["cost"][1], total(c, a * k), rtol=1e-12)
    assert h["cost"][0] - h["cost"][1] >= solver.accept * expected(a)
    # every later accepted step lowers the cost, and the solve converges to l'(u) = 0
    assert np.all(np.diff(h["cost"]) <= 0)
    assert sol.stop_reason == "converged", sol.message
    np.testing.assert_allclose(
        np.asarray(sol.controls), stationary_point(c, 1.0), rtol=0, atol=1e-6
    )


@pytest.mark.timeout(300)
def test_regularization_grows_by_its_factor_on_failure_and_shrinks_after_full_steps():
    """The double well ``l(u) = u⁴ − 2u² + 0.1u``: at ``u = 0``, ``Q_uu = dt l''(0) = −0.4`` and
    every Cholesky factorization of ``Q_uu + reg`` fails until ``reg > 0.4``; from
    ``reg_init = 1e-9`` by factors of 10 that is ``reg = 1`` after nine failures.  Once the
    iterate is in the convex region (``|u| > 1/√3``) the factorizations succeed, and each full
    step (``α > ½``) divides ``reg`` by the factor (down to ``reg_min``); a step of ``α ≤ ½``
    keeps it.  The solve converges to the well's minimum (``l'(u) = 0`` near ``−1``)."""
    c = (1.0, -2.0, 0.1)
    solver = ILQR()
    f, reg_min = solver.reg_factor, solver.reg_min
    sol = solve_ocp(problem(c), solver, max_iters=MAX_ITERS, progress=False)
    h = history(sol)
    assert sol.stop_reason == "converged", sol.message
    np.testing.assert_allclose(
        np.asarray(sol.controls), stationary_point(c, -1.0), rtol=0, atol=1e-6
    )
    reg, step = h["reg"], h["step"]
    # growth at the start: the smallest reg_init·fʲ above −dt l''(0) = 0.4
    j = int(np.ceil(np.log(0.4 / solver.reg_init) / np.log(f) + 1e-9))
    np.testing.assert_allclose(reg[0], solver.reg_init * f**j, rtol=1e-12)
    assert reg[0] == pytest.approx(1.0)
    # what each iteration starts from, by the schedule, and what it ended with: equal, or
    # larger by whole factors (the factorizations that failed)
    start = np.where(step[:-1] > 0.5, np.maximum(reg[:-1] / f, reg_min), reg[:-1])
    start = np.where(step[:-1] == 0, reg[:-1] * f, start)
    powers = np.log(reg[1:] / start) / np.log(f)
    np.testing.assert_allclose(powers, np.round(powers), atol=1e-9)
    assert np.all(np.round(powers) >= 0)
    grew = np.flatnonzero(np.round(powers) > 0)
    assert grew.size >= 1  # failures in the concave region after the first iteration too
    # after the last failure the iterate is in the convex region: every full step divides the
    # regularization, which ends several factors below where it started
    last = grew[-1] + 1
    full = np.flatnonzero(step[last:-1] > 0.5) + last
    assert full.size >= 3
    np.testing.assert_allclose(reg[full + 1], np.maximum(reg[full] / f, reg_min), rtol=1e-12)
    assert reg[-1] <= reg[0] / f**3


@pytest.mark.timeout(300)
def test_multiple_shooting_model_is_exact_on_a_linear_quadratic_problem():
    """Linear dynamics (an Euler–Poincaré system on the abelian group R², a quadratic
    potential: RKMK4's step is linear) and quadratic costs: the Riccati model of a step,
    gaps included, is exact.  From states that are no rollout (gaps of order one) the first
    iteration's predicted decrease ``|d₁ + d₂/2|`` (``history["stop"]``) equals the actual one
    to round-off, its full step lands on the optimum and closes every gap, and the optimum is
    ``u* = −H⁻¹b`` of the cost of the rollout as a quadratic in the controls (H and b by JAX
    autodiff of the rollout, no solver involved).  A quadratic gap term of the wrong sign in
    the prediction makes every step look worse than it is (the solve then stalls)."""
    G = gj.Rn(2)
    system = gj.EulerPoincareSystem(
        G, jnp.diag(jnp.array([1.0, 2.0])), lambda g: 0.5 * jnp.sum(jnp.array([1.0, 3.0]) * g**2)
    )
    x0 = gj.LieGroupState(jnp.array([1.0, -0.5]), jnp.array([0.2, 0.1]))
    target = jnp.array([0.3, 0.2])

    def stage(t, x, u):
        return 0.5 * jnp.sum(x.g**2) + 0.05 * jnp.sum(u**2)

    def terminal(x):
        return 5.0 * jnp.sum((x.g - target) ** 2) + 0.5 * jnp.sum(x.mu**2)

    steps = 8
    prob = OptimalControlProblem(
        system, gj.RKMK4(), x0, 0.1, steps, stage, terminal_cost=terminal, control_dim=2
    )
    rng = np.random.default_rng(0)
    xs = prob.rollout(jnp.zeros((steps, 2)))
    states = gj.LieGroupState(
        xs.g + jnp.asarray(rng.normal(size=xs.g.shape)),
        xs.mu + jnp.asarray(rng.normal(size=xs.mu.shape)),
    )
    sol = solve_ocp(prob, ILQR(), states=states, max_iters=MAX_ITERS, progress=False)
    h = history(sol)
    assert sol.stop_reason == "converged", sol.message
    assert h["gap"][0] > 1.0 and h["step"][0] == 1.0 and h["gap"][1] == 0.0
    np.testing.assert_allclose(h["stop"][0], h["cost"][0] - h["cost"][1], rtol=1e-10)

    def J(u):
        u = u.reshape(steps, 2)
        return prob.cost(prob.rollout(u), u)

    z = jnp.zeros(2 * steps)
    # one program without XLA's optimization passes (eagerly, each operation of the rollout
    # and of its derivatives compiles on its own)
    H, b = jax.jit(
        lambda z: (jax.hessian(J)(z), jax.grad(J)(z)), compiler_options=EAGER_COMPILER_OPTIONS
    )(z)
    u_star = -np.linalg.solve(np.asarray(H), np.asarray(b))
    # (the step is (Q_uu + reg)⁻¹ Q_u with reg = 1e-9 against Q_uu ~ 1e-2: 1e-7 relative)
    np.testing.assert_allclose(np.asarray(sol.controls).reshape(-1), u_star, atol=1e-6)


def test_strict_fddp_acceptance_is_crocoddyls_rule():
    """:class:`StrictFDDP` overrides only ``accepts``, with crocoddyl's ``SolverFDDP`` test: a
    predicted decrease (``expected ≥ 0``) needs ``actual > accept·expected`` or ``|d₁| <
    th_grad``; a predicted increase is accepted only while infeasible (``actual >
    accept_increase·expected``).  The default test (:class:`ILQR`) differs where crocoddyl's
    reads feasibility and ``|d₁|``."""
    from geomjax.control.trajopt import AbstractDDPSolver, StrictFDDP

    overridden = [
        n for n in vars(StrictFDDP) if not n.startswith("_") and hasattr(AbstractDDPSolver, n)
    ]
    assert overridden == ["accepts"]

    class S(eqx.Module):
        feasible: jnp.ndarray

    def rule(solver, feasible, d1, expected, actual):
        return bool(solver.accepts(S(jnp.asarray(feasible)), d1, expected, actual))

    def crocoddyl(feasible, d1, expected, actual, accept=0.1, accept_increase=2.0):
        if expected >= 0:
            return abs(d1) < 1e-12 or actual > accept * expected
        return (not feasible) and actual > accept_increase * expected

    strict, default = StrictFDDP(), ILQR()
    cases = [
        (True, 1.0, 1.0, 0.5),  # enough decrease
        (True, 1.0, 1.0, 0.05),  # too little
        (True, -1.0, -0.1, -0.15),  # predicted increase on a feasible iterate
        (False, -1.0, -0.1, -0.15),  # ... on an infeasible one, within the factor
        (False, -1.0, -0.1, -0.3),  # ... beyond it
        (True, -1.0, 0.1, 0.0),  # strongly negative d₁, a predicted decrease not met
        (False, 1e-13, 1e-13, -1.0),  # negligible model
    ]
    for case in cases:
        assert rule(strict, *case) == crocoddyl(*case), case
    # where the default test differs: feasible predicted increase, negative d₁
    assert rule(default, *cases[2]) and not rule(strict, *cases[2])
    assert rule(default, *cases[5]) and not rule(strict, *cases[5])
    assert [rule(default, *c) for c in cases[:2]] == [rule(strict, *c) for c in cases[:2]]


@pytest.mark.timeout(600)
def test_strict_fddp_converges_to_ilqrs_optimum_from_a_multiple_shooting_start():
    """A torque-limited attitude manoeuvre from states that are no rollout (the momenta
    perturbed: gaps): :class:`StrictFDDP` converges, to the optimum :class:`ILQR` finds, and
    that optimum is stationary in the free controls and has multipliers of the right sign at
    the active bounds (central finite differences of the cost of the rollout)."""
    from geomjax.control.examples import attitude_problem
    from geomjax.control.trajopt import StrictFDDP

    limit = 0.2
    prob = attitude_problem(
        torque_max=limit, exact_target=False, steps=10, method=gj.RKMK4(), weight=100.0
    )
    xs = prob.rollout(jnp.zeros((prob.steps, prob.control_dim)))
    rng = np.random.default_rng(1)
    states = eqx.tree_at(
        lambda s: s.Pi, xs, xs.Pi + 0.05 * jnp.asarray(rng.normal(size=xs.Pi.shape))
    )
    sols = {
        type(solver).__name__: solve_ocp(prob, solver, states=states, max_iters=100, progress=False)
        for solver in (StrictFDDP(), ILQR())
    }
    for name, sol in sols.items():
        assert sol.stop_reason == "converged", (name, sol.message)
        assert history(sol)["gap"][0] > 0.01, name  # the start had gaps
    us = np.asarray(sols["StrictFDDP"].controls)
    np.testing.assert_allclose(us, np.asarray(sols["ILQR"].controls), atol=1e-6)

    def J(u):
        return prob.cost(prob.rollout(u), u)

    eps = 1e-6
    flat = jnp.asarray(us).reshape(-1)
    E = jnp.eye(flat.size, dtype=flat.dtype) * eps
    # one program of the differences, compiled without XLA's backend optimization (it runs
    # twice: only its compilation counts)
    f = jax.jit(
        jax.vmap(lambda d: J((flat + d).reshape(us.shape))), compiler_options=EAGER_COMPILER_OPTIONS
    )
    g = np.asarray((f(E) - f(-E)) / (2 * eps)).reshape(us.shape)
    scale = np.abs(g).max()
    at_hi, at_lo = us == limit, us == -limit
    free = ~(at_hi | at_lo)
    assert at_hi.sum() + at_lo.sum() >= 1, "the bound should be active"
    assert np.abs(g[free]).max() <= 1e-4 * scale
    assert np.all(g[at_hi] <= 1e-4 * scale) and np.all(g[at_lo] >= -1e-4 * scale)

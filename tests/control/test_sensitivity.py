"""Implicit differentiation of the optimum (geomjax.control.sensitivity.solve_ocp_implicit) against
two independent references: central finite differences of re-solved problems, and the envelope
theorem (the optimal cost's derivative is the partial derivative of the Lagrangian at the fixed
optimum, multipliers of the active bounds read off the gradient there)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax.control.examples import attitude_problem
from geomjax.control.sensitivity import _rollout_cost, solve_ocp_implicit
from geomjax.control.trajopt import ILQR, AugmentedLagrangian, solve_ocp
from geomjax.integrators import SemiImplicitEuler

# θ = (target angle, initial body momentum Π0 (3), terminal weight, torque limit); the limit 0.5 is
# active on part of the manoeuvre, 50 never (|u| ≤ 2.4 there): the unconstrained optimum (one
# compiled program serves both cases: the problem has bounds in both)
THETA0 = np.array([1.0, 0.1, -0.2, 0.05, 100.0])
LIMITS = {"unconstrained": 50.0, "active_bound": 0.5}
# a tolerance below round-off: the solver stops on its last quadratic step (the control error is
# then ~1e-12, so the finite differences below carry ~1e-8 of it)
SOLVER = ILQR(tol=1e-20)


def _problem(theta):
    p = attitude_problem(
        torque_max=theta[5],
        exact_target=False,
        steps=10,
        duration=2.0,
        method=SemiImplicitEuler(),  # explicit: the cheapest second derivatives to compile
        weight=theta[4],
        angle=theta[0],
    )
    return eqx.tree_at(lambda q: q.state0.Pi, p, theta[1:4])


@pytest.mark.long
@pytest.mark.parametrize("case", list(LIMITS))
def test_implicit_derivatives_match_finite_differences_and_envelope(case):
    bounded = case == "active_bound"
    th_np = np.array([*THETA0[:5], LIMITS[case]])
    theta = jnp.asarray(th_np)

    def solve(th):
        return solve_ocp_implicit(_problem(th), SOLVER, max_iters=100)

    (cost, sol), dcost = jax.value_and_grad(
        lambda th: (lambda s: (s.cost, s))(solve(th)), has_aux=True
    )(theta)
    assert sol.stop_reason == "converged", sol.message
    plain = solve_ocp(_problem(theta), SOLVER, max_iters=100)  # the same optimum, undifferentiated
    np.testing.assert_allclose(float(cost), float(plain.cost), rtol=1e-13)
    us, vjp = jax.vjp(lambda th: solve(th).controls, theta)
    # d(controls)/dθ row by row (the backward pass is compiled once)
    dus = np.stack([np.asarray(vjp(e.reshape(us.shape))[0]) for e in jnp.eye(us.size)])
    dus = dus.reshape(*us.shape, theta.size)

    # central differences of re-solved problems
    h = 1e-4 * np.maximum(1.0, np.abs(th_np))
    fd_cost, fd_us = [], []
    for i in range(th_np.size):
        e = np.zeros_like(th_np)
        e[i] = h[i]
        plus = solve_ocp(_problem(jnp.asarray(th_np + e)), SOLVER, max_iters=100)
        minus = solve_ocp(_problem(jnp.asarray(th_np - e)), SOLVER, max_iters=100)
        assert plus.stop_reason == minus.stop_reason == "converged"
        # the active set is locally constant (strict complementarity)
        lim_p, lim_m = (th_np + e)[5], (th_np - e)[5]
        np.testing.assert_array_equal(
            np.abs(np.asarray(plus.controls)) >= lim_p, np.abs(np.asarray(minus.controls)) >= lim_m
        )
        fd_cost.append((float(plus.cost) - float(minus.cost)) / (2 * h[i]))
        fd_us.append((np.asarray(plus.controls) - np.asarray(minus.controls)) / (2 * h[i]))
    fd_cost, fd_us = np.array(fd_cost), np.stack(fd_us, -1)

    # FD truncation ~h² |J'''| ~1e-8 relative, solver error / h ~1e-8 (measured ≤ 5e-10): 1e-6
    scale = np.abs(fd_cost).max()
    np.testing.assert_allclose(np.asarray(dcost), fd_cost, rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(dus, fd_us, rtol=0, atol=1e-6 * np.abs(fd_us).max())
    if not bounded:
        assert np.abs(np.asarray(sol.controls)).max() < 0.1 * LIMITS[case]
        assert np.all(dus[..., 5] == 0) and float(dcost[5]) == 0.0

    # envelope theorem: dJ*/dθ = ∂L/∂θ at the optimum, u held fixed; for the limit b the
    # multipliers enter, ∂L/∂b = Σ_upper ∂J/∂u − Σ_lower ∂J/∂u (upper = b, lower = −b)
    u_star = jax.lax.stop_gradient(sol.controls)

    def J(th, u):  # the cost of the rollout (the compiled program of solve_ocp_implicit's)
        return _rollout_cost(_problem(th), u)[1]

    dJ_dth, dJ_du = jax.grad(J, argnums=(0, 1))(theta, u_star)
    envelope = np.array(dJ_dth)
    if bounded:
        u = np.asarray(u_star)
        at_hi, at_lo = u >= th_np[5], u <= -th_np[5]
        assert at_hi.sum() + at_lo.sum() >= 2
        g = np.asarray(dJ_du)
        assert np.all(g[at_hi] < 0) and np.all(g[at_lo] > 0)  # multipliers of the right sign
        envelope[5] = g[at_hi].sum() - g[at_lo].sum()
        assert abs(envelope[5]) > 1e-2 * scale  # the bound matters
    # the gradient of J vanishes on the free controls to ~1e-10: the same agreement
    np.testing.assert_allclose(np.asarray(dcost), envelope, rtol=0, atol=1e-7 * scale)


def test_constrained_problems_are_refused():
    prob = attitude_problem(steps=4, method=SemiImplicitEuler())  # terminal equality
    with pytest.raises(ValueError, match="'problem'"):
        solve_ocp_implicit(prob, AugmentedLagrangian())

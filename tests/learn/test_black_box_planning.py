"""The black-box baseline as a planning model: :class:`~geomjax.learn.NeuralODEStep` makes a
trained :class:`~geomjax.learn.NeuralODE` the dynamics of an optimal control problem (what
flying it in a closed loop needs).  Checked against diffrax's own driver and against finite
differences of the cost."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.control import ILQR, OptimalControlProblem, ResidualCost, solve_ocp
from geomjax.learn import NeuralODE, NeuralODEStep


def small_node(dtype):
    return NeuralODE(12, 6, jax.random.PRNGKey(0), n_u=4, width=8, dtype=dtype)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_one_step_is_diffrax_over_one_interval(dtype):
    """``NeuralODE.step`` is what ``diffrax.diffeqsolve`` computes with one Tsit5 step over
    ``[0, dt]`` (the training's rollout), and ``rollout`` chains it."""
    node = small_node(dtype)
    z = jax.random.normal(jax.random.PRNGKey(2), (18,), dtype)
    u = jnp.asarray([0.3, -0.2, 0.1, 0.4], dtype)

    @jax.jit
    def reference(z, u):
        term = diffrax.ODETerm(lambda t, y, a: node.vector_field(t, y, u))
        saveat = diffrax.SaveAt(t1=True)
        return diffrax.diffeqsolve(
            term, diffrax.Tsit5(), 0.0, 0.03, 0.03, z, saveat=saveat, max_steps=2
        ).ys[-1]

    step = jax.jit(lambda z, u: node.step(z, u, 0.03))
    tol = 1e-14 if dtype == jnp.float64 else 1e-6
    np.testing.assert_allclose(step(z, u), reference(z, u), atol=tol)
    two = jax.jit(lambda z, us: node.rollout(z, 0.03, 2, controls=us))(z, jnp.stack([u, 2 * u]))
    np.testing.assert_allclose(two[2], step(step(z, u), 2 * u), atol=tol)
    # both modes differentiate the step (training is reverse mode, planning forward mode)
    rev = jax.jit(jax.jacrev(step))(z, u)
    fwd = jax.jit(jax.jacfwd(step))(z, u)
    np.testing.assert_allclose(rev, fwd, atol=10 * tol)


def planning_problem(node, steps=6):
    z0 = jnp.concatenate([jnp.eye(3).ravel(), jnp.zeros(9)])
    target = jnp.asarray([0.2, -0.1, 0.3])

    def stage(t, z, u):
        return jnp.concatenate([z[9:12] - target, z[12:], 0.1 * u])

    return OptimalControlProblem(
        node,
        NeuralODEStep(),
        z0,
        0.03,
        steps,
        ResidualCost(stage, jnp.ones(13)),
        ResidualCost(lambda z: z[9:12] - target, jnp.asarray(10.0), terminal=True),
        control_dim=4,
    )


def test_a_plan_on_the_black_box_is_stationary_by_finite_differences():
    """iLQR on the black box's own step converges, its rollout is ``NeuralODE.rollout`` of its
    controls and ``simulate``'s run of them, and the cost of that rollout is stationary in the
    controls by central differences (a KKT point of the unconstrained problem)."""
    node = small_node(jnp.float64)
    prob = planning_problem(node)
    sol = solve_ocp(prob, ILQR(tol=1e-12), progress=False)
    assert sol.stop_reason == "converged"
    us = np.asarray(sol.controls)
    np.testing.assert_allclose(
        sol.states, node.rollout(prob.state0, 0.03, prob.steps, controls=sol.controls), atol=1e-12
    )
    run = gj.simulate(node, NeuralODEStep(), prob.state0, 0.03, prob.steps, sol.controls)
    np.testing.assert_allclose(run.states, sol.states, atol=1e-12)

    # central differences of the rollout's cost, all directions in one vmapped program
    cost = jax.jit(jax.vmap(lambda u: prob.cost(prob.rollout(u), u)))
    eps = 1e-6
    basis = eps * np.eye(us.size).reshape(us.size, *us.shape)

    def central(u):
        return np.asarray(cost(u + basis) - cost(u - basis)).reshape(us.shape) / (2 * eps)

    grad = central(us)
    g0 = central(np.zeros_like(us))  # at the start (zero controls), which is not stationary
    assert np.abs(g0).max() > 1e-3
    assert np.abs(grad).max() < 1e-6 * max(1.0, np.abs(g0).max()), (np.abs(grad).max(), g0)


def test_the_step_method_names_its_system():
    body = gj.RigidBody(np.ones(3))
    s0 = body.state_from_velocity(jnp.eye(3), jnp.zeros(3))
    with pytest.raises(ValueError, match="NeuralODEStep"):
        gj.simulate(body, NeuralODEStep(), s0, 0.1, 2)

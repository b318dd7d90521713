"""``AbstractSystem.prepared()``: the inverse inertia computed once for a solver's program.

Checked against the unprepared system (the inverse formed where it is used) and against closed
forms: ``inertia⁻¹ @ inertia = I``, the body velocity ``xi = I⁻¹ mu`` of a block-diagonal
Newton–Euler inertia ``(J⁻¹ pi, p / m)``, and gradients through the prepared system with respect
to the inertia against central differences."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geomjax as gj
from geomjax._internal.eager import EAGER_COMPILER_OPTIONS
from geomjax.integrators import SemiImplicitEuler
from geomjax.lie import SE3, SO3
from geomjax.systems.base import prepare_systems


def _spd(seed, n, dtype):
    A = np.random.default_rng(seed).normal(size=(n, n))
    return jnp.asarray(A @ A.T + n * np.eye(n), dtype)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), dtype=st.sampled_from([jnp.float64, jnp.float32]))
def test_prepared_velocity_equals_the_unprepared_one(seed, dtype):
    H = _spd(seed, 6, dtype)
    body = gj.EulerPoincareSystem(SE3, H)
    ready = body.prepared()
    assert body.inertia_inverse is None and ready.inertia_inverse is not None
    tol = 1e-12 if dtype == jnp.float64 else 2e-5
    np.testing.assert_allclose(ready.inertia_inverse @ H, np.eye(6), atol=tol * 10)
    mu = jnp.asarray(np.random.default_rng(seed + 1).normal(size=6), dtype)
    np.testing.assert_allclose(ready.velocity(mu), body.velocity(mu), rtol=tol, atol=tol)
    np.testing.assert_allclose(
        ready.velocity(mu),
        np.linalg.solve(np.asarray(H, np.float64), np.asarray(mu)),
        rtol=tol * 10,
    )
    assert ready.prepared() is ready  # idempotent


def test_newton_euler_velocity_closed_form():
    J = jnp.array([1.0, 2.0, 3.0])
    body = gj.RigidBodySE3(2.5, J).prepared()
    mu = jnp.array([0.3, -0.4, 0.9, 1.0, -2.0, 0.5])
    np.testing.assert_allclose(body.velocity(mu), np.r_[mu[:3] / J, mu[3:] / 2.5], rtol=1e-14)


def test_steps_of_a_prepared_system_are_those_of_the_system():
    key = np.random.default_rng(3)
    body = gj.RigidBodySE3(1.3, [0.2, 0.3, 0.4], com=[0.01, -0.02, 0.03])
    x0 = body.state_from_velocity(SE3.exp(jnp.asarray(key.normal(size=6))), key.normal(size=6))
    for method in (gj.LGVI(), SemiImplicitEuler(), gj.RKMK4()):
        a = method.step(body, x0, 0.01)[0]
        b = method.step(body.prepared(), x0, 0.01)[0]
        np.testing.assert_allclose(b.g, a.g, atol=1e-14)
        np.testing.assert_allclose(b.mu, a.mu, atol=1e-13)
    top = gj.RigidBody([1.0, 2.0, 3.0])
    s = gj.RigidBodyState(SO3.exp(jnp.array([0.1, 0.2, 0.3])), jnp.array([0.3, 1.0, -0.2]))
    np.testing.assert_allclose(top.prepared().angular_velocity(s), s.Pi / np.array([1, 2, 3.0]))


def test_gradient_through_the_prepared_inverse_matches_central_differences():
    """d/dm of the kinetic energy ½ μᵀ H(m)⁻¹ μ of a body of mass m: −|p|²/(2 m²) (closed form),
    and of a whole step, against central differences, with the inverse formed by ``prepared``."""
    mu = jnp.array([0.3, -0.4, 0.9, 1.0, -2.0, 0.5])

    def kinetic(m):
        return 0.5 * mu @ gj.RigidBodySE3(m, jnp.array([1.0, 2.0, 3.0])).prepared().velocity(mu)

    m = 1.7
    np.testing.assert_allclose(jax.grad(kinetic)(m), -0.5 * (mu[3:] @ mu[3:]) / m**2, rtol=1e-13)

    x0 = gj.LieGroupState(SE3.exp(jnp.array([0.2, -0.1, 0.3, 0.5, 0.1, -0.4])), mu)

    def end(m):
        body = gj.RigidBodySE3(m, jnp.array([1.0, 2.0, 3.0])).prepared()
        return jnp.sum(SemiImplicitEuler().step(body, x0, 0.05)[0].g[:3, 3])

    # compiled once each (eagerly, every operation of the step would compile on its own)
    end, grad = (jax.jit(f, compiler_options=EAGER_COMPILER_OPTIONS) for f in (end, jax.grad(end)))
    h = 1e-6
    fd = (end(m + h) - end(m - h)) / (2 * h)
    np.testing.assert_allclose(grad(m), fd, rtol=1e-7)


def test_prepare_systems_reaches_systems_inside_costs():
    """A cost that holds the system (the quadrotor's residual) is prepared too."""
    from geomjax.control.examples import quadrotor_problem

    problem = quadrotor_problem()
    ready = problem.prepared()
    assert problem.system.inertia_inverse is None
    assert ready.system.inertia_inverse is not None
    assert ready.stage_cost.residual.system.inertia_inverse is not None
    # the structure is otherwise unchanged, and so are the values
    assert jax.tree_util.tree_structure(prepare_systems(problem.stage_cost)) == (
        jax.tree_util.tree_structure(ready.stage_cost)
    )
    us = 0.1 * jnp.ones((problem.steps, problem.control_dim))

    def cost(p):  # one program each (eagerly, every operation of the rollout compiles alone)
        return jax.jit(lambda: p.cost(p.rollout(us), us), compiler_options=EAGER_COMPILER_OPTIONS)()

    np.testing.assert_allclose(cost(ready), cost(problem), rtol=1e-13)


def test_an_unprepared_system_keeps_no_inverse_after_a_change():
    """``prepared`` is for a program's inside: a system changed with ``tree_at`` before it is
    prepared gets the inverse of its new inertia."""
    body = gj.RigidBodySE3(1.0, [1.0, 2.0, 3.0])
    heavier = eqx.tree_at(lambda s: s.inertia, body, 2.0 * body.inertia)
    mu = jnp.ones(6)
    np.testing.assert_allclose(heavier.prepared().velocity(mu), 0.5 * body.velocity(mu))


@pytest.mark.parametrize(
    "solver",
    # iLQR in the long tier: DDP's solve differentiates the prepared inverse once more (its
    # second-order terms), the derivatives iLQR uses are among those of DDP's backward pass
    [pytest.param("ILQR", marks=pytest.mark.long), "DDP"],
)
def test_solve_is_the_same_with_and_without_preparing(solver, monkeypatch):
    """The quadrotor's solve (4 nodes, to compile in seconds) with every system prepared equals
    the solve with the inverse formed where it is used (``prepared`` switched off)."""
    from geomjax.control import trajopt
    from geomjax.control.examples import quadrotor_problem
    from geomjax.systems.rigid_body import EulerPoincareSystem

    p = quadrotor_problem()
    problem = trajopt.OptimalControlProblem(
        p.system, p.method, p.state0, p.dt, 4, p.stage_cost, p.terminal_cost, control_dim=4
    )
    a = trajopt.solve_ocp(problem, getattr(trajopt, solver)(), max_iters=50, progress=False)
    monkeypatch.setattr(EulerPoincareSystem, "prepared", lambda self: self)
    # another iteration cap: a program traced anew (with the patched method), not the cached one
    b = trajopt.solve_ocp(problem, getattr(trajopt, solver)(), max_iters=51, progress=False)
    assert int(a.status) == int(b.status) == 0, (a.status, b.status)
    assert int(a.iterations) == int(b.iterations)
    np.testing.assert_allclose(a.controls, b.controls, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.cost, b.cost, rtol=1e-12)

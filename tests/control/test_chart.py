"""The state charts of the trajectory optimizers (``x ⊕ δ``, ``y ⊖ x``) at finite perturbations
(``|η| ≈ 0.3–0.8``, where the Cayley map and the exponential differ at third order: a chart
whose two halves used different retractions would agree with itself only near ``δ = 0``), and a
multiple-shooting solve that closes its gaps through them.

Independent references: ``⊕`` against the retraction written out in matrices — the Cayley map
``(1 − ξ̂/2)⁻¹(1 + ξ̂/2)`` or SciPy's ``expm`` of the hat matrix — and the inverse identities
``x ⊕ (y ⊖ x) = y``, ``(x ⊕ δ) ⊖ x = δ``; for the solve, the single-shooting optimum and the
rule that a step of length ``α`` leaves ``(1 − α)`` of every gap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from hypothesis import given
from hypothesis import strategies as st

import geomjax as gj
from geomjax.control.trajopt import ILQR, EuclideanChart, LieGroupChart, solve_ocp
from geomjax.control.trajopt.problem import OptimalControlProblem
from geomjax.integrators import SemiImplicitEuler
from geomjax.lie import SO3, PowerGroup
from tests.conftest import FULL


def hat(w):
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def twist_hat(xi):
    """se(3) in (ω, v) order as a 4×4 matrix."""
    X = np.zeros((4, 4))
    X[:3, :3], X[:3, 3] = hat(xi[:3]), xi[3:]
    return X


def so3_hat(eta):
    return hat(eta)


def power_hat(eta):
    """SO(3)²: block-diagonal of the factors' hats (the group's matrices stack the factors)."""
    return np.stack([hat(eta[:3]), hat(eta[3:])])


def retraction_by_hand(X, kind):
    if kind == "exp":
        return scipy.linalg.expm(X)
    eye = np.eye(X.shape[-1])
    return np.linalg.solve(eye - X / 2, eye + X / 2)


def _so3():
    sys = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    return sys, sys.make_state, so3_hat, 3


def _se3():
    sys = gj.RigidBodySE3(1.3, jnp.diag(jnp.array([0.02, 0.03, 0.04])))
    return sys, sys.make_state, twist_hat, 6


def _power():
    sys = gj.EulerPoincareSystem(
        PowerGroup(SO3, 2), jnp.diag(jnp.array([1.0, 2.0, 3.0, 1.5, 1.2, 2.0]))
    )
    return sys, sys.make_state, power_hat, 6


SYSTEMS = {"SO3": _so3, "SE3": _se3, "SO3^2": _power}


def _random_state(sys, make, d, rng):
    g = sys.group.exp(jnp.asarray(rng.normal(size=d)))
    return make(g, jnp.asarray(rng.normal(size=d)))


def _finite_tangent(rng, d):
    """``(η, ν)`` with ``|η|`` in [0.3, 0.8] (per factor on the product)."""
    eta = rng.normal(size=d)
    blocks = eta.reshape(-1, 3)
    blocks *= rng.uniform(0.3, 0.8, (blocks.shape[0], 1)) / np.linalg.norm(blocks, axis=1)[:, None]
    return np.concatenate([blocks.reshape(-1), rng.normal(size=d)])


@pytest.mark.parametrize("retraction", ["cayley", "exp"])
@pytest.mark.parametrize("name", sorted(SYSTEMS))
@given(seed=st.integers(0, 2**31 - 1))
def test_plus_and_minus_are_inverse_at_finite_perturbations(name, retraction, seed):
    sys, make, hat_of, d = SYSTEMS[name]()
    chart = LieGroupChart(retraction=retraction)
    rng = np.random.default_rng(seed)
    x, y = _random_state(sys, make, d, rng), _random_state(sys, make, d, rng)
    delta = _finite_tangent(rng, d)
    x_plus = chart.plus(sys, x, jnp.asarray(delta))
    # ⊕ by hand: g·r(η̂), μ + ν
    g, mu = sys.split(x)
    g1, mu1 = sys.split(x_plus)
    np.testing.assert_allclose(
        np.asarray(g1),
        np.asarray(g) @ retraction_by_hand(hat_of(delta[:d]), retraction),
        atol=1e-12,
    )
    np.testing.assert_allclose(np.asarray(mu1), np.asarray(mu) + delta[d:], atol=1e-14)
    # (x ⊕ δ) ⊖ x = δ
    np.testing.assert_allclose(np.asarray(chart.minus(sys, x_plus, x)), delta, atol=1e-12)
    # x ⊕ (y ⊖ x) = y
    back = chart.plus(sys, x, chart.minus(sys, y, x))
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(y)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-12)


@given(seed=st.integers(0, 2**31 - 1))
def test_euclidean_chart_is_inverse(seed):
    rng = np.random.default_rng(seed)
    x = {"q": jnp.asarray(rng.normal(size=3)), "v": jnp.asarray(rng.normal(size=(2, 2)))}
    y = {"q": jnp.asarray(rng.normal(size=3)), "v": jnp.asarray(rng.normal(size=(2, 2)))}
    chart, delta = EuclideanChart(), jnp.asarray(rng.normal(size=7))
    np.testing.assert_allclose(np.asarray(chart.minus(None, chart.plus(None, x, delta), x)), delta)
    back = chart.plus(None, x, chart.minus(None, y, x))
    for k in x:
        np.testing.assert_allclose(np.asarray(back[k]), np.asarray(y[k]), atol=1e-15)


# --- a multiple-shooting start: gaps closed by the forward passes ------------------------------
def _attitude(steps=6, method=None):
    """A rigid body turned toward ``R_T`` by torques: effort plus a terminal attitude error
    ``½ w |cay⁻¹(R_Tᵀ R)|² + ½ |Π|²`` (strongly convex near its optimum); ``method``: RKMK4
    unless given."""
    body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    x0 = gj.RigidBodyState(jnp.eye(3), jnp.zeros(3))
    R_T = SO3.exp(jnp.array([0.4, -0.3, 0.2]))

    def effort(t, x, u):
        return 0.5 * jnp.sum(u**2)

    def terminal(x):
        e = SO3.log(R_T.T @ x.R)
        return 50.0 * jnp.sum(e**2) + 0.5 * jnp.sum(x.Pi**2)

    return OptimalControlProblem(
        body,
        gj.RKMK4() if method is None else method,
        x0,
        0.25,
        steps,
        effort,
        terminal_cost=terminal,
        control_dim=3,
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_multiple_shooting_start_closes_its_gaps_and_reaches_the_single_shooting_optimum():
    """From states that are no rollout (each node of the rollout turned by a rotation of 1 rad,
    gaps of up to ~3 in Cayley coordinates): every step of length ``α`` leaves ``(1 − α)`` of the
    largest gap (``x' = f(x, u) ⊕ (α − 1) g``, measured again by ``⊖``: a chart whose ``⊕`` and
    ``⊖`` disagree at third order would leave another fraction), a full step closes them, and
    the solve ends at the optimum of the same problem solved from a rollout.  (Measured with
    RKMK4: steps ½ then 1, 7 iterations against 5 from the rollout.)  The default tier steps
    the body by semi-implicit Euler (the same chart, the cheapest dynamics to compile: its two
    solves compile in less time), GEOMJAX_FULL=1 by RKMK4."""
    problem = _attitude(method=None if FULL else SemiImplicitEuler())
    single = solve_ocp(problem, ILQR(), max_iters=100, progress=False)
    assert single.stop_reason == "converged", single.message
    rng = np.random.default_rng(4)
    xs = problem.rollout(jnp.zeros((problem.steps, 3)))
    turns = rng.normal(size=(problem.steps + 1, 3))
    turns *= 1.0 / np.linalg.norm(turns, axis=1, keepdims=True)
    R = jnp.einsum("kij,kjl->kil", xs.R, jax.vmap(SO3.exp)(jnp.asarray(turns)))
    states = gj.RigidBodyState(R, xs.Pi)
    multi = solve_ocp(problem, ILQR(), states=states, max_iters=100, progress=False)
    assert multi.stop_reason == "converged", multi.message
    n = int(multi.iterations)
    gap, step = (np.asarray(multi.history[k])[:n] for k in ("gap", "step"))
    assert gap[0] > 1.0  # the start has finite gaps
    open_ = np.flatnonzero(gap[:-1] > 0)
    assert np.any(step[open_] < 1)  # a partial step with the gaps open
    np.testing.assert_allclose(
        gap[open_ + 1], (1 - step[open_]) * gap[open_], rtol=1e-9, atol=1e-13
    )
    assert gap[-1] == 0 and float(multi.violation) < 1e-12
    # the same optimum (a strongly convex problem near it; both stop at the same tolerance)
    np.testing.assert_allclose(
        np.asarray(multi.controls), np.asarray(single.controls), rtol=0, atol=1e-5
    )
    np.testing.assert_allclose(float(multi.cost), float(single.cost), rtol=1e-9)
    # and it is a trajectory: the states are the rollout of the controls
    np.testing.assert_allclose(
        np.asarray(problem.rollout(multi.controls).R), np.asarray(multi.states.R), atol=1e-12
    )

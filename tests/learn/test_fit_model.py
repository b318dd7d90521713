"""Training to convergence: ``fit_model(..., solver="lm")`` (Levenberg–Marquardt on the
multiple-shooting residuals) and the result object of ``fit_model``.  Its optimum is checked
against central finite differences of the loss (stationarity) and against the generating
weights of the records (the records are the model's own motion, so the loss is zero there)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.learn import (
    FitError,
    ModelFit,
    NeuralPotential,
    Trajectory,
    fit_model,
    fitting_loss,
    neural_leaves,
)
from geomjax.learn.problems import PENDULUM, pendulum_records

KW = dict(segment_length=5, noise=1e-3)  # records of 11 samples: two segments


def student():
    V = NeuralPotential(gj.SO3, jax.random.PRNGKey(0), width=4, depth=1, invariant="vertical")
    return gj.RigidBody(PENDULUM["inertia"], V)


def teacher():
    """The student with other weights (the generating values of the records)."""
    s = student()
    leaves = neural_leaves(s)
    keys = jax.random.split(jax.random.PRNGKey(7), len(leaves))
    new = tuple(x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys))
    return eqx.tree_at(neural_leaves, s, replace=new)


def own_records(model, n_records=2, n_samples=11, h=0.05):
    """Orientation records of the model's own LGVI motion (no noise): the loss is zero at the
    generating weights."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n_records):
        s0 = model.state_from_velocity(
            gj.SO3.exp(jnp.asarray(0.8 * rng.standard_normal(3))),
            jnp.asarray(rng.standard_normal(3)),
        )
        sol = gj.simulate(model, gj.LGVI(), s0, h, steps=n_samples - 1)
        out.append(Trajectory(np.arange(n_samples) * h, np.asarray(sol.states.R)))
    return out


def fd_directional(loss, y, d, eps):
    """First and second derivatives of ``loss`` along ``d`` by central differences."""
    lp, l0, lm = float(loss(y + eps * d)), float(loss(y)), float(loss(y - eps * d))
    return (lp - lm) / (2 * eps), (lp - 2 * l0 + lm) / eps**2


@pytest.fixture(scope="module")
def fitted():
    data = own_records(teacher())
    lm = fit_model(student(), data, solver="lm", steps=1000, **KW)
    return data, lm


def test_lm_converges_to_a_stationary_point(fitted):
    data, lm = fitted
    assert isinstance(lm, ModelFit) and lm.solver == "lm"
    assert lm.converged and lm.status == "converged" and lm.check() is lm
    assert 1 <= lm.iterations < 1000 and lm.losses.size == lm.iterations
    assert np.all(np.diff(lm.losses) <= 0)  # only descent steps are accepted
    loss, y0, _ = fitting_loss(
        lm.system, data, neural_leaves, kinds="free", continuity_weight=1.0, **KW
    )
    # the records are the model's own motion: the generating weights fit them exactly, so the
    # optimum's loss is near zero (1e-9 of the start's)
    assert lm.losses[-1] < 1e-9 * lm.losses[0]
    assert abs(float(loss(lm.unknowns)) - lm.losses[-1]) <= 1e-9 * lm.losses[0]
    # stationary: along random directions the central-difference slope of the loss is nothing
    # against the slope at the start (the untrained weights, the measured segment states)
    rng = np.random.default_rng(1)
    for _ in range(3):
        d = jnp.asarray(rng.standard_normal(y0.shape))
        d = d / jnp.linalg.norm(d)
        s_opt, c_opt = fd_directional(loss, lm.unknowns, d, 1e-5)
        s_0, _ = fd_directional(loss, y0, d, 1e-5)
        assert abs(s_opt) <= 1e-4 * abs(s_0), (s_opt, s_0)
        assert c_opt >= 0  # a minimum along d, not a saddle or a maximum


def test_lm_is_lower_than_adam_and_adam_reports_no_stopping_test(fitted):
    data, lm = fitted
    adam = fit_model(student(), data, steps=200, **KW)  # the guide's number of steps
    assert adam.solver == "adam" and adam.iterations == 200 and adam.losses.size == 200
    assert not adam.converged and "no stopping test" in adam.status
    with pytest.raises(FitError, match="fit_model: ran its steps=200"):
        adam.check()
    assert lm.losses[-1] <= adam.losses[-1]
    assert lm.losses[0] == pytest.approx(adam.losses[0], rel=1e-12)  # the same loss


def test_a_run_stopped_by_its_cap_says_so(fitted):
    data, _ = fitted
    out = fit_model(student(), data, solver="lm", steps=3, **KW)
    assert not out.converged and out.iterations == 3
    assert "max_steps=3 reached" in out.status
    with pytest.raises(FitError, match="did not converge"):
        out.check()
    system, losses = out  # existing callers unpack (system, losses)
    assert system is out.system and losses is out.losses
    assert out[0] is out.system and len(out) == 2


def test_bad_solver_arguments_named():
    data = pendulum_records(1, 5)
    with pytest.raises(ValueError, match="'solver'"):
        fit_model(student(), data, solver="bfgs")
    with pytest.raises(ValueError, match="'optimizer'"):
        fit_model(student(), data, solver="lm", optimizer=object())
    with pytest.raises(ValueError, match="'steps'"):
        fit_model(student(), data, solver="lm", steps=0)

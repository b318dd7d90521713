"""Training to convergence: ``fit_model(..., solver="lm")`` (Levenberg–Marquardt on the
multiple-shooting residuals) and the result object of ``fit_model``.  Its optimum is checked
against central finite differences of the loss (stationarity) and against the generating
weights of the records (the records are the model's own motion, so the loss is zero there)."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax._internal.eager import EAGER_COMPILER_OPTIONS
from geomjax.learn import (
    FitError,
    ModelFit,
    NeuralPotential,
    Recording,
    fit_model,
    fitting_loss,
    neural_leaves,
)
from geomjax.learn.problems import PENDULUM, pendulum_records
from geomjax.results import Status

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
        out.append(Recording(np.arange(n_samples) * h, np.asarray(sol.states.R)))
    return out


def fd_directional(loss, y, d, eps):
    """First and second derivatives of ``loss`` along ``d`` by central differences."""
    lp, l0, lm = float(loss(y + eps * d)), float(loss(y)), float(loss(y - eps * d))
    return (lp - lm) / (2 * eps), (lp - 2 * l0 + lm) / eps**2


# Adam's schedule (its last stage has LM's segment length); short: on these exact records Adam
# oscillates (the loss jumps by 10³ from step to step) and amplifies the round-off between two
# programs that compute the same loss differently
SCHEDULE = ((2, 6), (5, 6))


# three module fixtures, so that a worker running only Adam's tests does not also fit by LM
# (xdist sets a module fixture up on every worker that runs one of its users)
@pytest.fixture(scope="module")
def records():
    return own_records(teacher())


@pytest.fixture(scope="module")
def adam_fit(records):
    return fit_model(student(), records, noise=1e-3, segment_length=SCHEDULE, ftol=0.0)


@pytest.fixture(scope="module")
def fitted(records, adam_fit):
    lm = fit_model(student(), records, solver="lm", max_iters=100, **KW)
    return records, lm, adam_fit


def test_lm_reaches_a_stationary_point_below_adam(fitted):
    data, lm, adam = fitted
    assert isinstance(lm, ModelFit) and lm.solver == "lm"
    assert lm.iterations == 100 and lm.losses.size == lm.iterations
    assert np.all(np.diff(lm.losses) <= 0)  # only descent steps are accepted
    loss, y0, _ = fitting_loss(
        lm.system, data, neural_leaves, kinds="free", continuity_weight=1.0, **KW
    )
    # one program for the probes below (not one per operation), compiled without XLA's backend
    # optimization: it runs a few times, so only its compilation counts
    loss = jax.jit(loss, compiler_options=EAGER_COMPILER_OPTIONS)
    # the records are the model's own motion: the generating weights fit them exactly, so the
    # optimum's loss is near zero
    assert lm.losses[-1] < 1e-6 * lm.losses[0]
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
    # Adam's last stage has the same segments: the same loss, and LM's optimum is below
    assert lm.losses[-1] <= min(adam.losses[-1], float(loss(adam.unknowns)))
    # the cap stopped it; it says so
    assert (
        not lm.converged and "max_iters=100 reached" in lm.message and lm.stop_reason == "max_iters"
    )
    with pytest.raises(FitError, match="did not converge"):
        lm.check()
    system, losses = lm  # existing callers unpack (system, losses)
    assert system is lm.system and losses is lm.losses
    assert lm[0] is lm.system and len(lm) == 2


def staged_adam(model, data, schedule):
    """The schedule as separate fits (one loss per segment length, from
    :func:`fitting_loss`), Adam's step count and the weights' moments carried over, the
    segments' states restarted from the records: what ``fit_model`` computes in one program."""
    import optax

    total = sum(n for _, n in schedule)
    opt = optax.adam(optax.exponential_decay(1e-2, total, 0.05))
    losses, state, theta = [], None, None
    for length, n in schedule:
        loss, y, _ = fitting_loss(
            model,
            data,
            neural_leaves,
            kinds="free",
            continuity_weight=1.0,
            noise=1e-3,
            segment_length=length,
        )
        n_theta = sum(x.size for x in neural_leaves(model))
        if theta is not None:
            y = y.at[:n_theta].set(theta)
        fresh = opt.init(y)
        if state is not None:  # the counts (Adam's, the schedule's) and weights' moments carried
            fresh = (
                optax.ScaleByAdamState(
                    count=state[0].count,
                    mu=fresh[0].mu.at[:n_theta].set(state[0].mu[:n_theta]),
                    nu=fresh[0].nu.at[:n_theta].set(state[0].nu[:n_theta]),
                ),
                *state[1:],
            )
        state = fresh

        # one program per stage (eagerly, the update compiled each operation apart), without
        # XLA's backend optimization: it runs a few steps, so only its compilation counts
        @functools.partial(jax.jit, compiler_options=EAGER_COMPILER_OPTIONS)
        def step(y, state, loss=loss):
            val, g = jax.value_and_grad(loss)(y)
            upd, state = opt.update(g, state, y)
            return optax.apply_updates(y, upd), state, val

        for _ in range(n):
            y, state, val = step(y, state)
            losses.append(float(val))
        theta = y[:n_theta]
    return np.asarray(losses), y


def test_one_program_schedule_equals_the_staged_fits(records, adam_fit):
    data, adam = records, adam_fit
    ref, y_ref = staged_adam(student(), data, SCHEDULE)
    assert adam.losses.size == ref.size == 12 and adam.iterations == 12
    np.testing.assert_allclose(adam.losses[:6], ref[:6], rtol=1e-12)
    np.testing.assert_allclose(adam.losses, ref, rtol=1e-6)  # round-off, amplified (above)
    np.testing.assert_allclose(adam.unknowns, y_ref, rtol=1e-5, atol=1e-8)
    assert not adam.converged and "without meeting the stopping test" in adam.message
    assert adam.status == Status.MAX_ITERS
    with pytest.raises(FitError, match="fit_model: ran its max_iters=12 steps"):
        adam.check()


def test_adams_stopping_test(records, adam_fit):
    data, adam = records, adam_fit
    # a loose test stops each stage once the loss falls by at most 90 % of itself over 2 steps
    # (the same program as the fixture's: the same structure and schedule)
    out = fit_model(student(), data, noise=1e-3, segment_length=SCHEDULE, ftol=0.9, window=2)
    assert out.converged and out.status == Status.CONVERGED and out.check() is out
    assert out.iterations < 12 and out.losses.size == out.iterations
    assert out.losses[-3] - out.losses[-1] <= 0.9 * out.losses[-1]
    # until it stopped, the same steps as the run without a stopping test
    np.testing.assert_allclose(out.losses[:3], adam.losses[:3], rtol=1e-12)


def test_bad_solver_arguments_named():
    data = pendulum_records(1, 5)
    with pytest.raises(ValueError, match="'solver'"):
        fit_model(student(), data, solver="bfgs")
    with pytest.raises(ValueError, match="'optimizer'"):
        fit_model(student(), data, solver="lm", optimizer=object())
    with pytest.raises(ValueError, match="'max_iters'"):
        fit_model(student(), data, solver="lm", max_iters=0)


@pytest.mark.long  # compiles a two-stage fit (~10 s or more), and on another xdist worker
# than the fixture's other users it would set the fixture up again
def test_restart_from_the_fitted_motion(fitted):
    """``restart="motion"``: a stage of longer segments starts where the previous stage's motion
    is.  Its first loss is the loss of :func:`fitting_loss` (the residuals of fixed-length
    segments, another code path) at the previous stage's weights and the states of its
    segments kept at the shared starts (lengths 5 then 10: the start of the second stage is one
    of the first's), and it is below the start from the records (finite-difference
    velocities)."""
    data, lm, _ = fitted
    # the first stage is the fixture's fit (the same compiled program, the same steps)
    two = fit_model(
        student(),
        data,
        solver="lm",
        segment_length=((5, 100), (10, 2)),
        noise=1e-3,
        restart="motion",
    )
    np.testing.assert_allclose(two.losses[:100], lm.losses, rtol=1e-12)
    loss10, y0, _ = fitting_loss(
        lm.system,
        data,
        neural_leaves,
        kinds="free",
        continuity_weight=1.0,
        noise=1e-3,
        segment_length=10,
    )
    n_theta = sum(x.size for x in neural_leaves(lm.system))
    states = lm.unknowns[n_theta:].reshape(2, len(data), -1, 3)  # (deltas, velocities) per start
    y = jnp.concatenate([lm.unknowns[:n_theta], states[:, :, ::2].reshape(-1)])
    assert y.shape == y0.shape
    np.testing.assert_allclose(two.losses[100], float(loss10(y)), rtol=1e-10)
    from_records = float(loss10(y0.at[:n_theta].set(lm.unknowns[:n_theta])))
    assert two.losses[100] < 0.1 * from_records
    with pytest.raises(ValueError, match="'restart'"):
        fit_model(student(), data, noise=1e-3, restart="last")

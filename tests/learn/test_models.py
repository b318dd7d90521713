"""Learned models as ordinary systems (geomjax.learn.models) and the worked pendulum problem
against the DOP853 reference and the neural ODE baseline."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.learn import NeuralDissipation, NeuralPotential, fit_model
from geomjax.learn.problems import PENDULUM, pendulum_records, rotation_errors
from geomjax.learn.reference import so3_reference


def learned_pendulum(key=0):
    V = NeuralPotential(gj.SO3, jax.random.PRNGKey(key), width=16, depth=2, invariant="vertical")
    return gj.RigidBody(PENDULUM["inertia"], V)


def test_learned_potential_is_an_ordinary_system():
    """A network potential runs in the LGVI like any potential: the rotation stays on SO(3) to
    round-off, the (learned) energy has no drift, the vertical angular momentum its symmetry
    protects is conserved."""
    sys = learned_pendulum()
    sys = jax.tree_util.tree_map(lambda x: 20.0 * x if eqx_float(x) else x, sys)  # a stiff V
    s0 = sys.state_from_velocity(
        gj.SO3.exp(jnp.array([0.7, -0.3, 0.2])), jnp.array([0.5, 1.0, -0.4])
    )
    sol = gj.simulate(sys, gj.LGVI(), s0, 0.01, steps=400, save_every=4).check()
    assert float(jnp.max(gj.SO3.defect(sol.states.R))) < 1e-12
    E = jax.vmap(sys.energy)(sol.states)
    assert float(jnp.max(jnp.abs(E - E[0]))) < 1e-3 * (1.0 + abs(float(E[0])))
    Lz = jax.vmap(lambda s: (s.R @ s.Pi)[2])(sol.states)
    assert float(jnp.max(jnp.abs(Lz - Lz[0]))) < 1e-10


def eqx_float(x):
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)


def test_learned_dissipation_never_creates_energy():
    I = PENDULUM["inertia"]
    D = NeuralDissipation(gj.SO3, I, jax.random.PRNGKey(2), scale=1.0)
    sys = gj.RigidBody(I, force=D)
    s0 = sys.state_from_velocity(jnp.eye(3), jnp.array([1.0, -2.0, 0.5]))
    sol = gj.simulate(sys, gj.RKMK4(), s0, 0.01, steps=200, save_every=10)
    E = np.asarray(jax.vmap(sys.energy)(sol.states))
    assert np.all(np.diff(E) <= 1e-12) and E[-1] < E[0]


def test_bad_model_arguments_named():
    with pytest.raises(ValueError, match="'invariant'"):
        NeuralPotential(gj.SO3, jax.random.PRNGKey(0), invariant="yaw")
    with pytest.raises(ValueError, match="no neural term"):
        fit_model(gj.RigidBody(np.ones(3)), pendulum_records(1, 5))


@pytest.mark.long
def test_pendulum_learned_through_the_flow_beats_the_neural_ode():
    """Four 1-s records (orientation noise 1e-3 rad, velocity noise 1e-2 rad/s): the network
    potential trained through the LGVI predicts a new motion over ten times the record length
    against the DOP853 reference at least ten times better than a neural ODE trained on the same
    records with the same budget; its rotations stay on SO(3) to 1e-12 and its energy is bounded
    over 1e5 steps."""
    from geomjax.learn import NeuralODE, fit_neural_ode

    data = pendulum_records(4, 21)
    model, losses = fit_model(
        learned_pendulum(),
        data,
        segment_length=((2, 300), (5, 150), (10, 150)),
        substeps=2,
        noise=1e-3,
        velocity_noise=1e-2,
    )
    n_res = sum(6 * d.num_samples for d in data)
    assert losses[-1] < n_res  # fitted to the noise (≈ n_res / 2)
    node, _, _ = fit_neural_ode(
        NeuralODE(9, 3, jax.random.PRNGKey(1)),
        [d.g for d in data],
        0.05,
        W_obs=[d.xi for d in data],
        velocity_weight=1e-2,
        segment_length=10,
        max_iters=600,
    )
    h, n = 0.05, 201  # 10 s: ten times a record
    R0 = np.asarray(gj.SO3.exp(jnp.array([0.5, -0.4, 0.3])))
    w0 = np.array([0.6, -0.5, 0.8])
    Rref, _ = so3_reference(
        PENDULUM["inertia"], R0, w0, np.arange(n) * h, mass_g_rho=PENDULUM["mass_g_rho"]
    )
    s0 = model.state_from_velocity(jnp.asarray(R0), jnp.asarray(w0))
    sol = gj.simulate(model, gj.LGVI(), s0, h / 2, steps=2 * (n - 1), save_every=2)
    err_s = rotation_errors(Rref, sol.states.R).max()
    Z = node.rollout(jnp.concatenate([jnp.asarray(R0).reshape(-1), jnp.asarray(w0)]), h, n - 1)
    err_n = rotation_errors(Rref, np.asarray(Z[:, :9]).reshape(-1, 3, 3)).max()
    assert err_s <= 0.1 * err_n, (err_s, err_n)
    assert err_s < 0.2
    long = gj.simulate(model, gj.LGVI(), s0, 0.01, steps=100_000, save_every=100)
    assert float(jnp.max(gj.SO3.defect(long.states.R))) < 1e-12
    E = np.asarray(jax.vmap(model.energy)(long.states))
    assert np.max(np.abs(E - E[0])) < 1e-3 * np.max(np.abs(E))


@pytest.mark.long
def test_reversible_adjoint_differentiates_the_weights():
    """The reversible adjoint's gradient with respect to the network's weights (memory flat in
    the record length) is the one of differentiating the scan."""
    sys = learned_pendulum()
    s0 = sys.state_from_velocity(
        gj.SO3.exp(jnp.array([0.7, -0.3, 0.2])), jnp.array([0.5, 1.0, -0.4])
    )

    def loss(s, adjoint):
        out = gj.simulate(s, gj.LGVI(), s0, 0.01, steps=50, adjoint=adjoint)
        return jnp.sum(out.final_state.R[:, 2])

    import equinox as eqx

    g1 = eqx.filter_grad(lambda s: loss(s, None))(sys)
    g2 = eqx.filter_grad(lambda s: loss(s, gj.ReversibleAdjoint()))(sys)
    w1, w2 = g1.potential.mlp.layers[0].weight, g2.potential.mlp.layers[0].weight
    assert float(jnp.max(jnp.abs(w1 - w2))) <= 1e-8 * (1.0 + float(jnp.max(jnp.abs(w1))))


@pytest.mark.long
def test_learned_potential_on_se3():
    """On SE(3) the network sees (Rᵀe₃, height): the learned body keeps its pose on SE(3) to
    round-off, its energy bounded, and the horizontal momentum of the spatial frame (the symmetry
    of the invariant features) conserved."""
    V = NeuralPotential(gj.SE3, jax.random.PRNGKey(3), width=8, depth=1, invariant="vertical")
    body = gj.RigidBodySE3(2.0, np.array([0.1, 0.2, 0.3]), potential=V)
    g0 = gj.SE3.exp(jnp.array([0.3, -0.2, 0.1, 0.5, 0.0, 1.0]))
    s0 = body.state_from_velocity(g0, jnp.array([0.5, 0.4, -0.3, 0.2, -0.1, 0.3]))
    sol = gj.simulate(body, gj.LGVI(), s0, 0.01, steps=300, save_every=3).check()
    assert float(jnp.max(gj.SE3.defect(sol.states.g))) < 1e-12
    E = jax.vmap(body.energy)(sol.states)
    assert float(jnp.max(jnp.abs(E - E[0]))) < 1e-3 * (1.0 + abs(float(E[0])))
    p = jax.vmap(body.spatial_momentum)(sol.states)[:, 3:5]  # horizontal linear momentum
    assert float(jnp.max(jnp.abs(p - p[0]))) < 1e-10


def test_neural_ode_baseline_without_steps_is_its_untrained_model():
    """No Adam step (``max_iters=0``, nothing compiled): the result unpacks as the untrained
    model, the first sample's state (its configuration, zero velocity) and no losses."""
    from geomjax.learn import NeuralODE, NeuralODEFit, fit_neural_ode

    R = np.stack([np.eye(3)] * 5)
    model0 = NeuralODE(9, 3, jax.random.PRNGKey(3), width=4)
    res = fit_neural_ode(model0, R, 0.1, segment_length=4, max_iters=0)
    node, z0, losses = res
    assert isinstance(res, NeuralODEFit) and node is model0 and len(losses) == 0
    np.testing.assert_array_equal(np.asarray(z0), np.concatenate([np.eye(3).ravel(), np.zeros(3)]))
    assert res.iterations == 0 and res.stop_reason == "max_iters" and res.check() is res


@pytest.mark.long
def test_neural_ode_baseline_returns_a_result_with_check():
    """``fit_neural_ode`` returns a :class:`NeuralODEFit` that unpacks as ``(model, z0,
    losses)``: the first loss is the multiple-shooting loss of the untrained model recomputed
    from its own rollout (one segment, zero initial velocity, so no continuity term); a run of
    its budget is status ``max_iters`` and passes ``check()``; a record with a NaN gives
    ``nonfinite`` and ``check()`` raises :class:`FitError` naming the routine."""
    from geomjax.learn import FitError, NeuralODE, NeuralODEFit, fit_neural_ode
    from geomjax.results import ConvergenceError, Status

    L, h = 4, 0.1
    R = np.stack(
        [np.asarray(gj.SO3.exp(jnp.array([0.1 * k, 0.0, 0.05 * k]))) for k in range(L + 1)]
    )
    model0 = NeuralODE(9, 3, jax.random.PRNGKey(3), width=4)
    res = fit_neural_ode(model0, R, h, segment_length=L, max_iters=3)
    assert isinstance(res, NeuralODEFit)
    node, z0, losses = res
    assert node is res.model and losses is res.losses and z0 is res.z0
    assert res.iterations == 3 == len(losses) and res.status == Status.MAX_ITERS
    assert res.stop_reason == "max_iters" and res.check() is res
    X = R.reshape(L + 1, 9)
    Z = model0.rollout(jnp.concatenate([jnp.asarray(X[0]), jnp.zeros(3)]), h, L)
    np.testing.assert_allclose(losses[0], float(jnp.sum((Z[:, :9] - X) ** 2)), rtol=1e-10)
    assert losses[-1] < losses[0]

    bad = R.copy()
    bad[2, 0, 0] = np.nan
    res = fit_neural_ode(model0, bad, h, segment_length=L, max_iters=2)
    assert res.status == Status.NONFINITE and res.stop_reason == "nonfinite"
    with pytest.raises(FitError, match="fit_neural_ode: .*NaN") as info:
        res.check()
    assert isinstance(info.value, ConvergenceError)

"""A learned configuration-dependent inertia and a learned input map as terms of an ordinary
system (geomjax.variational.LagrangianSystem): SPD by construction, gradients against finite
differences, and trajectory optimization on a cart-pole whose inertia and actuation are partly
learned — the optimum checked by re-simulation (geomjax's integrator and SciPy's DOP853 on the
Euler–Lagrange equations) and by the stationarity of the shooting cost (finite differences)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geomjax as gj
from geomjax.learn import NeuralInertia, NeuralInputMap


def trained_like(module, key, size=0.3):
    """The module with a random last layer (a network after training; it starts at its prior)."""
    k1, k2 = jax.random.split(jax.random.PRNGKey(key))
    last = module.mlp.layers[-1]
    return eqx.tree_at(
        lambda m: (m.mlp.layers[-1].weight, m.mlp.layers[-1].bias),
        module,
        (
            size * jax.random.normal(k1, last.weight.shape, last.weight.dtype),
            size * jax.random.normal(k2, last.bias.shape, last.bias.dtype),
        ),
    )


@eqx.filter_jit
def _inertia_and_factor(M_fn, q):
    return M_fn(q), M_fn.cholesky(q)


@settings(max_examples=15, deadline=None)
@given(
    q=st.lists(st.floats(-20.0, 20.0), min_size=3, max_size=3),
    key=st.integers(0, 2**16),
    f32=st.booleans(),
)
def test_neural_inertia_is_spd(q, key, f32):
    dtype = jnp.float32 if f32 else jnp.float64
    M_fn = trained_like(NeuralInertia(3, jax.random.PRNGKey(key), width=8, dtype=dtype), key, 1.0)
    M, L = _inertia_and_factor(M_fn, jnp.asarray(q, dtype))
    assert M.dtype == dtype
    M, L = np.asarray(M, np.float64), np.asarray(L)
    np.testing.assert_allclose(M, M.T, rtol=0, atol=1e-6 * np.abs(M).max())
    # eigenvalues at least the floor ε·scale = 1e-3 (to the rounding of M's largest entries)
    assert np.all(np.linalg.eigvalsh(M) > 1e-3 - 1e-5 * np.abs(M).max())
    assert np.all(np.triu(L, 1) == 0) and np.all(np.diag(L) > 0)


def test_learned_terms_start_at_their_priors_and_have_correct_gradients():
    key = jax.random.PRNGKey(0)
    M0 = NeuralInertia(2, key, scale=0.5)
    np.testing.assert_allclose(M0(jnp.array([0.3, -1.0])), 0.5 * 1.001 * np.eye(2), rtol=1e-15)
    B0 = NeuralInputMap(2, 1, key, prior=[[1.0], [0.0]])
    np.testing.assert_allclose(B0(0.0, jnp.zeros(2), jnp.zeros(2), jnp.ones(1)), [1.0, 0.0])
    np.testing.assert_allclose(B0(0.0, jnp.zeros(2), jnp.zeros(2), None), [0.0, 0.0])
    # kinetic energy ½ vᵀM(q)v: gradient in q and in the weights against central differences
    M = trained_like(NeuralInertia(2, key, n_in=2, features=jnp.sin), 1)
    v = jnp.array([0.7, -0.4])
    K = lambda m, q: 0.5 * v @ m(q) @ v  # noqa: E731
    q = jnp.array([0.2, 0.9])
    g = eqx.filter_jit(jax.grad(K, argnums=1))(M, q)
    d = jnp.array([0.6, -0.8])
    eps = 1e-6
    fd = (K(M, q + eps * d) - K(M, q - eps * d)) / (2 * eps)
    assert abs(float(fd) - float(g @ d)) < 1e-8
    gw = eqx.filter_jit(eqx.filter_grad(K))(M, q).mlp.layers[0].weight
    E = jnp.zeros_like(gw).at[1, 0].set(1.0)

    def bump(s):
        return eqx.tree_at(lambda m: m.mlp.layers[0].weight, M, M.mlp.layers[0].weight + s * E)

    fdw = (K(bump(eps), q) - K(bump(-eps), q)) / (2 * eps)
    assert abs(float(fdw) - float(gw[1, 0])) < 1e-8


def test_bad_learned_terms_named():
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match=r"NeuralInputMap: argument 'prior' must have shape"):
        NeuralInputMap(2, 1, key, prior=np.ones((1, 2)))
    with pytest.raises(ValueError, match=r"NeuralInertia: argument 'n' must be a positive int"):
        NeuralInertia(0, key)
    with pytest.raises(ValueError, match=r"NeuralInertia: argument 'scale' must be positive"):
        NeuralInertia(2, key, scale=-1.0)
    with pytest.raises(ValueError, match=r"argument 'features' must be callable"):
        NeuralInputMap(2, 1, key, features=3)


class _Prior(eqx.Module):
    """The cart-pole's known inertia, ``m_c + m_p`` on the cart, ``m_p l²`` on the pole, and the
    coupling ``m_p l cos θ``, at 80 %: the network supplies the rest."""

    def __call__(self, q):
        mc, mp, l = 1.0, 0.3, 0.5
        c = mp * l * jnp.cos(q[1])
        return 0.8 * jnp.array([[mc + mp, c], [c, mp * l**2]], q.dtype)


def learned_cartpole():
    from geomjax.control.examples import cartpole_problem
    from geomjax.variational import LagrangianSystem

    k1, k2 = jax.random.split(jax.random.PRNGKey(3))
    angle = lambda q: jnp.stack([jnp.cos(q[1]), jnp.sin(q[1])])  # noqa: E731  (periodic in θ)
    M = trained_like(
        NeuralInertia(2, k1, n_in=2, features=angle, width=8, scale=0.02, prior=_Prior()), 4, 0.2
    )
    B = trained_like(
        NeuralInputMap(2, 1, k2, n_in=2, features=angle, prior=[[1.0], [0.0]], scale=0.2), 5
    )
    prob = cartpole_problem(force_max=None, exact_target=False, weight=1e2)
    system = LagrangianSystem(metric=M, potential=prob.system.potential_fn, force=B, dim=2)
    return eqx.tree_at(lambda p: p.system, prob, system)


@pytest.mark.long
def test_solve_ocp_on_a_system_with_learned_terms():
    from scipy.integrate import solve_ivp

    from geomjax.control.trajopt import solve_ocp

    prob = learned_cartpole()
    sol = solve_ocp(prob, max_iters=200, progress=False).check()
    us = sol.controls
    # (1) stationarity of the shooting cost J(u) = cost(rollout(u), u) at the optimum: its
    # directional derivatives by central differences vanish against those at the start
    J = jax.jit(lambda u: prob.cost(prob.rollout(u), u))
    rng = np.random.default_rng(0)
    eps = 1e-5
    for _ in range(3):
        d = jnp.asarray(rng.standard_normal(us.shape))
        slope = (J(us + eps * d) - J(us - eps * d)) / (2 * eps)
        slope0 = (J(eps * d) - J(-eps * d)) / (2 * eps)
        assert abs(float(slope)) < 1e-5 * max(abs(float(slope0)), 1.0)
    # (2) the plan re-simulated by simulate (same method) gives the solver's states
    sim = gj.simulate(prob.system, prob.method, prob.state0, prob.dt, prob.steps, controls=us)
    np.testing.assert_allclose(sim.states.q[-1], sol.states.q[-1], atol=1e-10)
    # (3) DOP853 on the Euler–Lagrange equations of the learned model (controls held on each
    # step) is the limit of the variational integrator: its error at the end falls as h²
    # (the swing-up ends near the unstable upright, which amplifies it: 0.18 rad at h = 0.05)
    acc = jax.jit(lambda q, v, u: prob.system.acceleration(0.0, q, v, u))
    y = np.zeros(4)
    for k in range(prob.steps):
        u = us[k]
        s = solve_ivp(
            lambda t, y, u=u: np.concatenate([y[2:], np.asarray(acc(y[:2], y[2:], u))]),
            (0.0, float(prob.dt)),
            y,
            method="DOP853",
            rtol=1e-10,
            atol=1e-10,
        )
        y = s.y[:, -1]
    errs = []
    for r in (1, 2, 4):
        fine = gj.simulate(
            prob.system,
            prob.method,
            prob.state0,
            prob.dt / r,
            prob.steps * r,
            controls=jnp.repeat(us, r, axis=0),
        )
        errs.append(float(np.max(np.abs(y[:2] - np.asarray(fine.final_state.q)))))
    assert errs[0] / errs[1] > 3.0 and errs[1] / errs[2] > 3.0, errs  # second order
    assert errs[2] < 0.02
    # the swing-up happened (the pole upright within the penalty's slack)
    assert abs(float(sol.states.q[-1, 1]) - np.pi) < 0.1


def pose_features(g):
    return jnp.concatenate([g[:3, :3].reshape(-1), g[:3, 3]])


def learned_thrust_map(size=0.02):
    from geomjax.control.examples import quadrotor_actuation

    B = NeuralInputMap(6, 4, jax.random.PRNGKey(2), n_in=12, features=pose_features)
    B = eqx.tree_at(lambda b: b.prior, B, quadrotor_actuation())
    return trained_like(B, 6, size)


def test_input_mapped_step_is_the_method_with_the_mapped_force():
    from geomjax.learn import InputMapped
    from geomjax.learn.problems import QUADROTOR_TRUTH as T
    from geomjax.learn.problems import QuadrotorModel

    q = QuadrotorModel(T["mass"], T["inertia"], T["moment_coefficient"], T["arm"])
    system = q.system()
    s0 = system.state_from_velocity(
        gj.SE3.exp(jnp.array([0.3, -0.2, 0.1, 0.5, 0.0, 1.0])), jnp.linspace(-0.5, 0.5, 6)
    )
    u = jnp.array([3.0, 4.0, 3.5, 4.5])
    step = eqx.filter_jit(lambda m, s, u: m.step(system, s, 0.02, u)[0])
    # a network at its prior is the constant thrust map (Actuated's)
    at_prior = learned_thrust_map(0.0)
    np.testing.assert_allclose(at_prior.matrix(s0.g), at_prior.prior, rtol=0, atol=0)
    # a trained one: the force is B(g₀)u, B evaluated at the step's start
    Bn = learned_thrust_map()
    wrench = Bn.matrix(s0.g) @ u
    assert float(jnp.max(jnp.abs(wrench - at_prior.prior @ u))) > 1e-3  # the network matters
    # (an explicit method: the wrapping does not depend on it, and it compiles quickly)
    a = step(InputMapped(gj.RKMK4(), Bn), s0, u)
    b = eqx.filter_jit(lambda s, w: gj.RKMK4().step(system, s, 0.02, w)[0])(s0, wrench)
    np.testing.assert_allclose(a.mu, b.mu, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(a.g, b.g, rtol=1e-14, atol=1e-14)


@pytest.mark.long
def test_solve_ocp_through_a_learned_thrust_map():
    """crocoddyl's quadrotor task through a learned, attitude-dependent thrust map: DDP converges,
    its shooting cost is stationary (central differences) and the plan reaches the target."""
    from geomjax.control.examples import quadrotor_problem
    from geomjax.control.trajopt import solve_ocp
    from geomjax.learn import InputMapped

    prob = quadrotor_problem(method=gj.LGVI())
    # (corrections up to 0.04 in the map's entries, which are 0.15 (arm), 0.015 (yaw) and 1)
    B = learned_thrust_map(0.005)
    prob = eqx.tree_at(lambda p: p.method, prob, InputMapped(gj.LGVI(), B))
    sol = solve_ocp(prob, max_iters=300, progress=False).check()
    us = sol.controls
    J = jax.jit(lambda u: prob.cost(prob.rollout(u), u))
    rng = np.random.default_rng(1)
    eps = 1e-5
    for _ in range(3):
        d = jnp.asarray(rng.standard_normal(us.shape))
        slope = (J(us + eps * d) - J(us - eps * d)) / (2 * eps)
        slope0 = (J(us * 0.5 + eps * d) - J(us * 0.5 - eps * d)) / (2 * eps)
        assert abs(float(slope)) < 1e-4 * max(abs(float(slope0)), 1.0)
    # the rollout of the controls is the solver's trajectory, and it ends at the target
    xs = prob.rollout(us)
    np.testing.assert_allclose(xs.g[-1], sol.states.g[-1], atol=1e-10)
    assert float(jnp.linalg.norm(sol.states.g[-1, :3, 3] - jnp.array([1.0, 0.0, 1.0]))) < 1e-2

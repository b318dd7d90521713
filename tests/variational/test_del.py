"""Discrete Euler–Lagrange integrator: order, conservation laws, forcing, gradients."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from tests.conftest import FULL

from .helpers import dop853, double_pendulum, double_pendulum_rhs, fitted_order, run

RULES = ["midpoint", "trapezoidal"]


@pytest.mark.parametrize("rule", RULES)
def test_second_order_against_dop853(rule):
    """Fitted slope of the global error at T = 1 on the double pendulum (textbook equations as
    the reference): 2 ± 0.1 (asymptotic regime: successive ratios are within 2% of 4)."""
    system = double_pendulum()
    y0 = np.array([1.2, -0.4, 0.3, 0.5])
    st = system.make_state(jnp.asarray(y0[:2]), jnp.asarray(y0[2:]))
    ref = dop853(double_pendulum_rhs, y0, 1.0)[-1]
    method = gj.DiscreteEulerLagrange(rule=rule)
    hs, errs = [], []
    for n in (25, 50, 100, 200):
        final, res = run(system, method, st, 1.0 / n, n)
        assert float(res) < 1e-12
        hs.append(1.0 / n)
        errs.append(float(jnp.max(jnp.abs(final.q - ref[:2]))))
    assert abs(fitted_order(hs, errs) - 2.0) < 0.1, errs


@pytest.mark.parametrize("scheme", ["yoshida4", "suzuki4"])
def test_composition_fourth_order(scheme):
    """Symmetric compositions of the (symmetric) midpoint DEL: fitted order 4 ± 0.2 on the
    double pendulum against DOP853 (errors 1e-5 … 1e-9, far above the 1e-12 reference; at
    20 steps Suzuki's scheme is not yet asymptotic, hence 40 … 160)."""
    system = double_pendulum()
    y0 = np.array([1.2, -0.4, 0.3, 0.5])
    st = system.make_state(jnp.asarray(y0[:2]), jnp.asarray(y0[2:]))
    ref = dop853(double_pendulum_rhs, y0, 1.0)[-1]
    method = gj.Composition(gj.DiscreteEulerLagrange(), scheme)
    hs, errs = [], []
    for n in (40, 80, 160):
        final, _ = run(system, method, st, 1.0 / n, n)
        hs.append(1.0 / n)
        errs.append(float(jnp.max(jnp.abs(final.q - ref[:2]))))
    assert abs(fitted_order(hs, errs) - 4.0) < 0.2, errs


def kepler(e=0.5):
    system = gj.LagrangianSystem(metric=jnp.eye(2), potential=lambda q: -1.0 / jnp.linalg.norm(q))
    return system, system.make_state(jnp.array([1.0, 0.0]), jnp.array([0.0, np.sqrt(1 + e)]))


def ang_mom(q, p):
    return q[..., 0] * p[..., 1] - q[..., 1] * p[..., 0]


@pytest.mark.parametrize("rule", RULES)
def test_angular_momentum_exact(rule):
    """Discrete Noether: L_d is rotation invariant, so q × p is conserved up to the Newton
    residual and rounding (≤ 10 eps per step, 400 steps)."""
    system, st = kepler()
    sol = gj.simulate(system, gj.DiscreteEulerLagrange(rule=rule), st, 0.05, 400)
    J = ang_mom(sol.states.q, sol.states.p)
    assert float(jnp.max(jnp.abs(J - J[0]))) < 400 * 10 * 2.2e-16 * float(J[0])
    E = gj.diagnostics(system, sol)["energy"]
    assert float(jnp.max(jnp.abs(E - E[0]))) > 1e-6  # the energy is *not* exact: a real test


def rk4(system, st, h, n):
    def f(y):
        q, v = y
        return v, system.acceleration(0.0, q, v)

    def body(y, _):
        k1 = f(y)
        k2 = f(jax.tree.map(lambda a, b: a + 0.5 * h * b, y, k1))
        k3 = f(jax.tree.map(lambda a, b: a + 0.5 * h * b, y, k2))
        k4 = f(jax.tree.map(lambda a, b: a + h * b, y, k3))
        y = jax.tree.map(
            lambda a, b, c, d, e: a + h / 6 * (b + 2 * c + 2 * d + e), y, k1, k2, k3, k4
        )
        return y, system.energy_qv(*y)

    return jax.lax.scan(body, (st.q, system.velocity(st.q, st.p)), None, length=n)[1]


@pytest.mark.parametrize("n", [pytest.param(100_000, marks=pytest.mark.slow), 4000])
def test_energy_bounded_where_rk4_drifts(n):
    """Kepler (e = 0.5, h = 0.05, ~11 orbits by default, ~280 with GEOMJAX_FULL): the DEL energy
    error of the last quarter is no larger than that of the first quarter (bounded, no drift);
    RK4's grows (its error at the end is ≥ 2× its largest error in the first quarter; a linear
    drift gives ≈ 3–4 here, a bounded error ≈ 1)."""
    if n > 10_000 and not FULL:
        pytest.skip("long run: GEOMJAX_FULL=1")
    system, st = kepler()
    h = 0.05
    sol = gj.simulate(system, gj.DiscreteEulerLagrange(), st, h, n, save_every=n // 400)
    E = gj.diagnostics(system, sol)["energy"]
    err = np.abs(np.asarray(E - E[0]))
    q1, q4 = err[: len(err) // 4].max(), err[-len(err) // 4 :].max()
    assert q4 < 1.3 * q1 and q1 < 1e-2
    Erk = np.asarray(rk4(system, st, h, n)) - float(E[0])
    assert abs(Erk[-1]) > 2 * np.abs(Erk[: n // 4]).max()


@pytest.mark.parametrize("rule", RULES)
def test_forcing_damped_oscillator(rule):
    """Discrete Lagrange–d'Alembert with F = −c q̇ on q̈ = −q − c q̇: second order against the
    closed form x(t) = e^{−ct/2} cos(ωt) (+ sin term), ω = sqrt(1 − c²/4)."""
    c = 0.4
    system = gj.LagrangianSystem(
        metric=jnp.eye(1), potential=lambda q: 0.5 * q @ q, force=lambda t, q, v, u: -c * v
    )
    w = np.sqrt(1 - c**2 / 4)
    exact = np.exp(-c / 2 * 2.0) * (np.cos(w * 2.0) + c / (2 * w) * np.sin(w * 2.0))
    st = system.make_state(jnp.array([1.0]), jnp.array([0.0]))
    method = gj.DiscreteEulerLagrange(rule=rule)
    hs, errs = [], []
    for n in (40, 80, 160):
        final, _ = run(system, method, st, 2.0 / n, n)
        hs.append(2.0 / n)
        errs.append(abs(float(final.q[0]) - exact))
    assert abs(fitted_order(hs, errs) - 2.0) < 0.1, errs


@pytest.mark.parametrize("rule", RULES)
def test_controls_through_simulate_exact_for_constant_force(rule):
    """A constant control force on a free particle: both rules reproduce q0 + v0 t + u t²/2
    exactly (quadratic trajectories are integrated exactly)."""
    system = gj.LagrangianSystem(metric=2.0 * jnp.eye(2))
    st = system.make_state(jnp.array([0.5, -1.0]), jnp.array([1.0, 2.0]))
    u = jnp.array([0.3, -4.0])
    steps, h = 20, 0.05
    sol = gj.simulate(
        system, gj.DiscreteEulerLagrange(rule=rule), st, h, steps, controls=jnp.tile(u, (steps, 1))
    )
    T = steps * h
    expect = st.q + jnp.array([1.0, 2.0]) * T + 0.5 * u / 2.0 * T**2
    np.testing.assert_allclose(sol.final_state.q, expect, rtol=0, atol=1e-13)
    np.testing.assert_allclose(sol.final_state.p, st.p + u * T, rtol=0, atol=1e-13)


class Spring(eqx.Module):
    k: jax.Array

    def __call__(self, q, v):
        return 0.5 * v @ v - 0.5 * self.k * (q @ q) - 0.1 * q[0] ** 4


def test_gradients_match_finite_differences():
    """d q(T)/d(q0, k) through simulate (IFT in newton_solve) vs central differences."""

    @jax.jit
    def final_q(q0, k):
        system = gj.LagrangianSystem(Spring(k))
        st = gj.variational.VariationalState(q0, jnp.array([0.2, 0.1]), jnp.zeros((0,)))
        sol = gj.simulate(system, gj.DiscreteEulerLagrange(), st, 0.1, 20)
        return jnp.sum(sol.final_state.q * jnp.array([1.0, 2.0]))

    q0, k = jnp.array([0.7, -0.3]), jnp.asarray(1.3)
    gq, gk = jax.jit(jax.grad(final_q, argnums=(0, 1)))(q0, k)
    eps = 1e-6
    fd_k = (final_q(q0, k + eps) - final_q(q0, k - eps)) / (2 * eps)
    fd_q = [
        (final_q(q0.at[i].add(eps), k) - final_q(q0.at[i].add(-eps), k)) / (2 * eps)
        for i in range(2)
    ]
    # central differences: truncation O(eps²) ~ 1e-12, rounding ~ 1e-16/eps = 1e-10
    np.testing.assert_allclose(gk, fd_k, rtol=1e-7)
    np.testing.assert_allclose(gq, jnp.stack(fd_q), rtol=1e-7)


def test_float32_run_and_save_load(tmp_path):
    """float32 follows the state's dtype; save/load_solution round-trips bitwise."""
    system = double_pendulum()
    st = system.make_state(jnp.array([1.0, 0.5], jnp.float32), jnp.array([0.0, 0.0], jnp.float32))
    method = gj.DiscreteEulerLagrange()
    sol = gj.simulate(system, method, st, 0.01, 200, save_every=10)
    assert sol.states.q.dtype == jnp.float32
    E = gj.diagnostics(system, sol)["energy"]
    # O(h²) energy error ~ 1e-3 here, float32 rounding ~ 1e-5: bound 10x the observed 3e-3
    assert float(jnp.max(jnp.abs(E - E[0]))) < 3e-2
    path = sol.save(tmp_path / "del", system, method)
    sol2, _, _ = gj.load_solution(path)
    np.testing.assert_array_equal(sol2.states.q, sol.states.q)
    np.testing.assert_array_equal(sol2.states.p, sol.states.p)


def test_bad_input():
    with pytest.raises(ValueError, match="'lagrangian'"):
        gj.LagrangianSystem()
    with pytest.raises(ValueError, match="'rule'"):
        gj.DiscreteEulerLagrange(rule="simpson")
    with pytest.raises(ValueError, match="'metric'"):
        gj.LagrangianSystem(metric=jnp.ones(3))
    system = gj.LagrangianSystem(metric=jnp.eye(2))
    with pytest.raises(ValueError, match="'qdot'"):
        system.make_state(jnp.zeros(2), jnp.zeros(3))
    st = system.make_state(jnp.array([0.0, jnp.nan]), jnp.zeros(2))
    with pytest.raises(ValueError, match="state0.q"):
        gj.simulate(system, gj.DiscreteEulerLagrange(), st, 0.1, 2)

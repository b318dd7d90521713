"""RATTLE: constraint drift at round-off, order, multipliers, gradients and bad input."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj

from .helpers import (
    G0,
    dop853,
    double_spherical,
    fitted_order,
    run,
    torus_constraint,
    torus_point,
    torus_rhs,
    torus_state,
)

EPS = float(jnp.finfo(jnp.float64).eps)


@pytest.mark.long
def test_double_spherical_pendulum_drift_at_roundoff():
    """Position and hidden constraints every step at round-off: |g| ≤ 50 eps (g = ½(|x|² − l²)
    with |x| ~ 1 is evaluated to a few eps and re-imposed every step, so nothing accumulates) and
    |G q̇| ≤ 50 eps |G||q̇|; the energy error stays bounded (last quarter ≤ 1.3 × first)."""
    system, con = double_spherical()
    method = gj.RATTLE(con)
    q = jnp.array([0.6, 0.0, -0.8, 0.6 + 0.8, 0.0, -0.8])
    st = method.make_state(system, q, jnp.array([0.0, 1.0, 0.0, 0.0, -1.5, 0.3]), project=True)
    sol = gj.simulate(system, method, st, 0.01, 1000, save_every=5)
    g = jax.vmap(con)(sol.states.q)
    assert float(jnp.max(jnp.abs(g))) < 50 * EPS
    v = jax.vmap(system.velocity)(sol.states.q, sol.states.p)
    Gv = jax.vmap(lambda q, v: jax.jacfwd(con)(q) @ v)(sol.states.q, v)
    assert float(jnp.max(jnp.abs(Gv))) < 50 * EPS * 4 * float(jnp.max(jnp.abs(v)))
    assert float(sol.max_residual) < 1e-12
    E = np.asarray(gj.diagnostics(system, sol)["energy"])
    err = np.abs(E - E[0])
    assert err[-len(err) // 4 :].max() < 1.3 * err[: len(err) // 4].max() + 1e-12
    assert err.max() < 1e-2 * abs(E[0])


def test_torus_order_and_drift_against_angle_reference():
    """Particle on a torus under gravity: RATTLE in Cartesian coordinates against DOP853 on the
    hand-derived equations in the torus angles; fitted order 2 ± 0.1, constraint at round-off."""
    system = gj.LagrangianSystem(metric=jnp.eye(3), potential=lambda q: G0 * q[2])
    y0 = np.array([0.3, 0.4, 1.5, 2.0])
    T = 1.0
    ref = torus_point(*dop853(torus_rhs, y0, T)[-1][:2])
    for rule in ("trapezoidal", "midpoint"):
        method = gj.RATTLE(torus_constraint, rule=rule)
        st = torus_state(method, system, *y0)
        hs, errs = [], []
        for n in (40, 80, 160, 320):
            final, res = run(system, method, st, T / n, n)
            assert float(res) < 1e-12
            assert abs(float(torus_constraint(final.q)[0])) < 50 * EPS
            hs.append(T / n)
            errs.append(float(jnp.max(jnp.abs(final.q - ref))))
        assert abs(fitted_order(hs, errs) - 2.0) < 0.1, (rule, errs)


def test_composed_rattle_fourth_order():
    """RATTLE is symmetric, so ``Composition(RATTLE, "yoshida4")`` has order 4: fitted order
    4 ± 0.2 on the torus against the DOP853 angle reference; constraint still at round-off."""
    system = gj.LagrangianSystem(metric=jnp.eye(3), potential=lambda q: G0 * q[2])
    y0 = np.array([0.3, 0.4, 1.5, 2.0])
    T = 1.0
    ref = torus_point(*dop853(torus_rhs, y0, T)[-1][:2])
    method = gj.Composition(gj.RATTLE(torus_constraint), "yoshida4")
    st = torus_state(method, system, *y0)
    hs, errs = [], []
    for n in (40, 80, 160):
        final, res = run(system, method, st, T / n, n)
        assert float(res) < 1e-12
        assert abs(float(torus_constraint(final.q)[0])) < 50 * EPS
        hs.append(T / n)
        errs.append(float(jnp.max(jnp.abs(final.q - ref))))
    assert abs(fitted_order(hs, errs) - 4.0) < 0.2, errs


def test_multipliers_spherical_pendulum_closed_form():
    """Unit sphere, unit mass: g = ½(|q|² − 1), force λ q; differentiating q·q̇ = 0 gives
    λ = g0 z − |q̇|² (the tension); the state's lam is the continuous multiplier at the node."""
    system = gj.LagrangianSystem(metric=jnp.eye(3), potential=lambda q: G0 * q[2])
    method = gj.RATTLE(lambda q: jnp.array([0.5 * (q @ q - 1.0)]))
    st = method.make_state(system, jnp.array([0.6, 0.0, -0.8]), jnp.array([0.0, 1.2, 0.0]))
    sol = gj.simulate(system, method, st, 0.02, 100)
    q, v = sol.states.q, jax.vmap(system.velocity)(sol.states.q, sol.states.p)
    tension = G0 * q[:, 2] - jnp.sum(v * v, -1)
    np.testing.assert_allclose(sol.states.lam[:, 0], tension, rtol=1e-12, atol=1e-12)
    # the scheme's own multipliers are first-order approximations of the same force
    _, _, info = method.solve_step(system, st, 1e-3)
    assert abs(float(info["lam_a"][0] - st.lam[0])) < 0.05 * abs(float(st.lam[0]))


class Gravity(eqx.Module):
    g: jax.Array

    def __call__(self, q):
        return self.g * q[2]


@pytest.mark.long  # ~6-8 s of compilation: the long tier (make test-full)
def test_gradients_match_finite_differences():
    """d z(T)/d g0 and d/d(initial momentum) through RATTLE (IFT) vs central differences."""
    con = lambda q: jnp.array([0.5 * (q @ q - 1.0)])  # noqa: E731
    method = gj.RATTLE(con)

    @jax.jit
    def final_z(g, a):
        system = gj.LagrangianSystem(metric=jnp.eye(3), potential=Gravity(g))
        q0 = jnp.array([0.6, 0.0, -0.8])
        st = gj.variational.VariationalState(q0, a * jnp.array([0.0, 1.2, 0.0]), jnp.zeros(1))
        return gj.simulate(system, method, st, 0.05, 30).final_state.q[2]

    g, a = jnp.asarray(9.81), jnp.asarray(1.0)
    dg, da = jax.jit(jax.grad(final_z, argnums=(0, 1)))(g, a)
    eps = 1e-6
    np.testing.assert_allclose(
        dg, (final_z(g + eps, a) - final_z(g - eps, a)) / (2 * eps), rtol=1e-6
    )
    np.testing.assert_allclose(
        da, (final_z(g, a + eps) - final_z(g, a - eps)) / (2 * eps), rtol=1e-6
    )


@pytest.mark.long
def test_float32_constraint_drift():
    """float32: the constraint stays at float32 round-off (≤ 50 eps32) over 500 steps."""
    system, con = double_spherical()
    method = gj.RATTLE(con)
    q = jnp.array([0.6, 0.0, -0.8, 1.4, 0.0, -0.8], jnp.float32)
    st = method.make_state(
        system, q, jnp.array([0, 1.0, 0, 0, -1.5, 0.3], jnp.float32), project=True
    )
    sol = gj.simulate(system, method, st, 0.01, 500, save_every=10)
    assert sol.states.q.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(jax.vmap(con)(sol.states.q)))) < 50 * float(
        jnp.finfo(jnp.float32).eps
    )


def test_bad_input():
    system = gj.LagrangianSystem(metric=jnp.eye(3), potential=lambda q: G0 * q[2])
    sphere = lambda q: jnp.array([0.5 * (q @ q - 1.0)])  # noqa: E731
    twice = lambda q: jnp.array([q @ q - 1.0, 2.0 * (q @ q - 1.0)])  # noqa: E731
    q, v = jnp.array([0.6, 0.0, -0.8]), jnp.array([0.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="'constraint'.*rank-deficient"):
        gj.RATTLE(twice).make_state(system, q, v)
    off = system.make_state(1.1 * q, v)
    with pytest.raises(ValueError, match="'constraint'.*rank-deficient"):
        gj.simulate(
            system, gj.RATTLE(twice), eqx.tree_at(lambda s: s.lam, off, jnp.zeros(2)), 0.1, 2
        )
    method = gj.RATTLE(sphere)
    with pytest.raises(ValueError, match="'state0.lam'"):
        gj.simulate(system, method, off, 0.1, 2)
    off = eqx.tree_at(lambda s: s.lam, off, jnp.zeros(1))
    with pytest.raises(ValueError, match="'state0.q'.*off the constraint"):
        gj.simulate(system, method, off, 0.1, 2)
    radial = method.make_state(system, q, v)
    radial = eqx.tree_at(lambda s: s.p, radial, radial.p + 0.5 * q)
    with pytest.raises(ValueError, match="'state0.p'.*hidden constraint"):
        gj.simulate(system, method, radial, 0.1, 2)
    with pytest.raises(ValueError, match="argument 'q' is off the constraint"):
        method.make_state(system, 1.1 * q, v)
    on = method.make_state(system, 1.1 * q, v + 0.3 * q, project=True)
    assert abs(float(sphere(on.q)[0])) < 10 * EPS
    assert abs(float(on.q @ system.velocity(on.q, on.p))) < 10 * EPS
    gj.simulate(system, method, on, 0.1, 2)  # accepted

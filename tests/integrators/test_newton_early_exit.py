"""``newton_solve(..., early_exit=True)``: at most ``iters`` Newton iterations, stopping once the
relative update is below ``sqrt(eps)/10`` (with ``chord``, linear convergence: below ``4 eps``).  Checked: the number of residual evaluations on a
closed-form root (quadratic convergence stops early; linear convergence never does and gives the
fixed-iteration result bit for bit), the root and its implicit-function-theorem derivative
against the closed form, a batch whose members would stop at different iterations against the
unbatched solves (the batch iterates until all have stopped: round-off), and ``NonholonomicVI``
and ``LGVI`` (default ``early_exit=True``) against their fixed three iterations in float64 and
float32, unbatched and batched."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from variational.helpers import double_pendulum

import geomjax as gj
from geomjax.integrators.newton import dense_jac_solve, newton_solve

from .helpers import gyrostat_reconstruction


@pytest.fixture(autouse=True)
def _rolled(monkeypatch):
    # the early exit applies to the rolled loop (CPU); force it on any backend
    monkeypatch.setenv("GEOMJAX_NEWTON_UNROLL", "0")


def _square(x, a):
    return x * x - a


_JS = dense_jac_solve(_square)


def _counting_square(calls):
    def residual(x, a):
        jax.debug.callback(lambda: calls.append(1))
        return _square(x, a)

    return residual


def _solve(a, x0, iters, early_exit, residual=_square):
    # the Jacobian solve without the counting callback: one residual evaluation per iteration
    return newton_solve(residual, x0, a, iters=iters, jac_solve=_JS, early_exit=early_exit)


def test_quadratic_convergence_stops_early_with_the_same_root():
    a, x0 = jnp.array([2.0]), jnp.array([1.4])
    calls = []
    x, r = jax.jit(lambda a: _solve(a, x0, 20, True, _counting_square(calls)))(a)
    jax.block_until_ready(x)
    # from |e0| = 0.014: updates 1.4e-2, 7e-5, 1.8e-9, ~1e-18 — the loop stops after the third
    # or fourth iteration (not 20); one more residual evaluation after the loop
    assert 3 + 1 <= len(calls) <= 5 + 1, len(calls)
    np.testing.assert_allclose(x, np.sqrt(2.0), rtol=4e-16)
    assert abs(float(r[0])) <= 8 * np.finfo(float).eps
    calls_fixed = []
    xf, _ = jax.jit(lambda a: _solve(a, x0, 20, False, _counting_square(calls_fixed)))(a)
    jax.block_until_ready(xf)
    assert len(calls_fixed) == 20 + 1
    np.testing.assert_allclose(x, xf, rtol=4e-16)


def test_linear_convergence_never_stops_early():
    # a double root (x² = 0): Newton halves x, the relative update stays 1, so every iteration
    # runs and the result is the fixed-iteration one bit for bit (x0 / 2^iters)
    x0 = jnp.array([0.75])
    x, _ = jax.jit(lambda a: _solve(a, x0, 30, True))(jnp.array([0.0]))
    xf, _ = jax.jit(lambda a: _solve(a, x0, 30, False))(jnp.array([0.0]))
    np.testing.assert_array_equal(x, xf)
    np.testing.assert_array_equal(x, 0.75 / 2.0**30)


def _chord(a, x0, iters, early_exit, residual=_square):
    return newton_solve(
        residual, x0, a, iters=iters, jac_solve=_JS, chord=True, early_exit=early_exit
    )


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_chord_iterations_stop_once_the_update_is_at_round_off(dtype):
    """With ``chord`` (the Jacobian at the guess for every iteration: linear convergence, rate
    ``|e0| / x*``) the early exit waits for an update at round-off (``rel <= 4 eps``), then
    stops: from ``x0 = 1.4`` to ``sqrt(2)`` (rate 0.01) the updates are 1.4e-2, 1.4e-4, 1.4e-6,
    ... : about 8 iterations in float64, 4 in float32, far fewer than the cap of 40, and the
    root is the closed form to round-off (the fixed 40 iterations give the same)."""
    eps = float(jnp.finfo(dtype).eps)
    a, x0 = jnp.array([2.0], dtype), jnp.array([1.4], dtype)
    calls = []
    x, _ = jax.jit(lambda a: _chord(a, x0, 40, True, _counting_square(calls)))(a)
    jax.block_until_ready(x)
    expected = 8 if dtype == jnp.float64 else 4
    assert expected - 1 <= len(calls) - 1 <= expected + 2, len(calls)
    np.testing.assert_allclose(x, np.sqrt(2.0), rtol=4 * eps)
    xf, _ = jax.jit(lambda a: _chord(a, x0, 40, False))(a)
    np.testing.assert_allclose(x, xf, rtol=4 * eps)


def _chord_root(a):
    return _chord(jnp.array([a]), jnp.array([1.2]), 60, True)[0][0]


_chord_root_and_derivative = jax.jit(jax.value_and_grad(_chord_root))


@settings(max_examples=10, deadline=None)
@given(st.floats(0.5, 3.0))
def test_chord_root_and_derivative_against_the_closed_form(a0):
    # (rate up to 0.44 from x0 = 1.2: up to ~45 of the 60 iterations) the derivative is the
    # implicit-function-theorem one at the root, as with Newton
    x, dx = _chord_root_and_derivative(a0)
    np.testing.assert_allclose(x, np.sqrt(a0), rtol=4e-16)
    np.testing.assert_allclose(dx, 0.5 / np.sqrt(a0), rtol=1e-14)


@settings(max_examples=10)
@given(st.floats(0.5, 3.0))
def test_root_and_derivative_against_the_closed_form(a0):
    def root(a):
        return _solve(jnp.array([a]), jnp.array([1.2]), 12, True)[0][0]

    x, dx = jax.jit(jax.value_and_grad(root))(a0)
    np.testing.assert_allclose(x, np.sqrt(a0), rtol=4e-16)
    np.testing.assert_allclose(dx, 0.5 / np.sqrt(a0), rtol=1e-14)


def test_batch_members_stopping_at_different_iterations_equal_the_unbatched_solves():
    # the batch runs until its slowest member has stopped; the others take extra steps at
    # their roots, which leaves them at round-off
    # from x0 = 1.4: a = 1.96 is solved at once, 2 needs ~3 iterations, 9 and 40 need more
    a = jnp.array([1.96, 2.0, 9.0, 40.0])
    solve = jax.jit(lambda a: _solve(a[None], jnp.array([1.4]), 12, True))
    xb, _ = jax.vmap(solve)(a)
    for i in range(a.shape[0]):
        xi, _ = solve(a[i])
        np.testing.assert_allclose(xb[i], xi, rtol=4e-16)
        np.testing.assert_allclose(xb[i], np.sqrt(a[i]), rtol=4e-16)


@pytest.mark.long
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_nonholonomic_vi_same_run_as_fixed_iterations(dtype):
    ball = gj.BallOnTurntable(mass=1.0, radius=0.5, table_rate=0.8)
    s0 = ball.state(x=(1.0, 0.3), omega=(0.4, -0.2, 0.7))
    s0 = jax.tree_util.tree_map(lambda a: a.astype(dtype), s0)
    eps = float(jnp.finfo(dtype).eps)

    def simulate(dt, early_exit):
        method = gj.NonholonomicVI(early_exit=early_exit)
        sol = gj.simulate(ball, method, s0, dt, 200, save_every=200, check_inputs=False)
        return sol.final_state, sol.max_residual

    run = jax.jit(simulate, static_argnums=1)
    for dt in (1e-3, 0.02):  # two iterations suffice at 1e-3; all three are used at 0.02
        dt = jnp.asarray(dt, dtype)
        (se, re), (sf, rf) = run(dt, True), run(dt, False)
        assert float(re) <= 1e3 * eps and float(rf) <= 1e3 * eps
        tol = 1e-12 if dtype == jnp.float64 else 2e-4
        for a, b in zip(jax.tree_util.tree_leaves(se), jax.tree_util.tree_leaves(sf)):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    # a batch over dt (members stopping after different iterations) equals its members
    dts = jnp.asarray([1e-3, 0.02], dtype)
    sb, _ = jax.vmap(lambda dt: run(dt, True))(dts)
    for i in range(2):
        si, _ = run(dts[i], True)
        for a, b in zip(jax.tree_util.tree_leaves(sb), jax.tree_util.tree_leaves(si)):
            np.testing.assert_allclose(a[i], b, rtol=tol, atol=tol)


@pytest.mark.long
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("group", ["SO3", "SE3"])
def test_lgvi_same_run_as_fixed_iterations(group, dtype):
    if group == "SO3":  # the hand-written Cayley fast path
        body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
        s0 = body.make_state(jnp.eye(3), jnp.array([0.3, 1.0, -0.5]))
    else:  # the generic (scalarized) group path
        inertia = jnp.diag(jnp.array([1.0, 2.0, 3.0]))
        body = gj.RigidBodySE3(2.0, inertia, jnp.array([0.1, 0.0, 0.2]))
        s0 = body.make_state(jnp.eye(4), jnp.array([0.3, 1.0, -0.5, 0.2, 0.1, 0.4]))
    s0 = jax.tree_util.tree_map(lambda a: a.astype(dtype), s0)
    eps = float(jnp.finfo(dtype).eps)

    def simulate(dt, early_exit):
        sol = gj.simulate(
            body, gj.LGVI(early_exit=early_exit), s0, dt, 100, save_every=100, check_inputs=False
        )
        return sol.final_state, sol.max_residual

    run = jax.jit(simulate, static_argnums=1)
    tol = 1e-12 if dtype == jnp.float64 else 2e-4
    dts = jnp.asarray([1e-3, 0.05], dtype)
    for dt in dts:
        (se, re), (sf, rf) = run(dt, True), run(dt, False)
        assert float(re) <= 1e3 * eps and float(rf) <= 1e3 * eps
        for a, b in zip(jax.tree_util.tree_leaves(se), jax.tree_util.tree_leaves(sf)):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    sb, rb = jax.vmap(lambda dt: run(dt, True))(dts)
    assert float(jnp.max(rb)) <= 1e3 * eps
    for i in range(2):
        si, _ = run(dts[i], False)
        for a, b in zip(jax.tree_util.tree_leaves(sb), jax.tree_util.tree_leaves(si)):
            np.testing.assert_allclose(a[i], b, rtol=tol, atol=tol)


def _check_same_runs(run, dts, tol=1e-12):
    """``run(dt, early_exit) -> (final_state, max_residual)``: with the early exit, unbatched and
    batched over ``dts``, the same final states as the fixed iterations to ``tol``, residuals at
    round-off.  Returns the unbatched early-exit states."""
    sb, rb = jax.vmap(lambda dt: run(dt, True))(dts)
    assert float(jnp.max(rb)) <= 1e3 * np.finfo(float).eps
    states = []
    for i in range(dts.shape[0]):
        (se, _), (sf, _) = run(dts[i], True), run(dts[i], False)
        for a, b, c in zip(
            jax.tree_util.tree_leaves(se),
            jax.tree_util.tree_leaves(sf),
            jax.tree_util.tree_leaves(sb),
        ):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
            np.testing.assert_allclose(c[i], b, rtol=tol, atol=tol)
        states.append(se)
    return states


@pytest.mark.long
def test_del_and_rattle_same_run_as_fixed_iterations():
    """The coordinate integrators (``early_exit`` default ``True``): a double pendulum with DEL
    and a spherical pendulum with RATTLE, unbatched and batched over dt, against their fixed
    iterations — the same run to round-off, the constraint still at round-off."""
    g0 = 9.81
    pend = double_pendulum()
    s_pend = pend.make_state(jnp.array([0.6, -0.4]), jnp.array([0.3, 1.1]))
    ball = gj.LagrangianSystem(metric=jnp.eye(3), potential=lambda q: g0 * q[2])

    def sphere(q):
        return 0.5 * jnp.array([q @ q - 1.0])

    s_ball = gj.RATTLE(sphere).make_state(
        ball, jnp.array([0.0, 0.6, -0.8]), jnp.array([0.5, 0.0, 0.0]), project=True
    )
    cases = (
        (pend, lambda e: gj.DiscreteEulerLagrange(early_exit=e), s_pend),
        (ball, lambda e: gj.RATTLE(sphere, early_exit=e), s_ball),
    )
    for system, make, s0 in cases:

        def simulate(dt, early_exit, system=system, make=make, s0=s0):
            sol = gj.simulate(
                system, make(early_exit), s0, dt, 100, save_every=100, check_inputs=False
            )
            return sol.final_state, sol.max_residual

        states = _check_same_runs(jax.jit(simulate, static_argnums=1), jnp.asarray([1e-3, 0.02]))
        if system is ball:
            for se in states:
                assert abs(float(sphere(se.q)[0])) <= 1e-14


@pytest.mark.long
def test_momentum_lgvi_same_run_as_fixed_iterations():
    """The reconstruction LGVI (at most six iterations, ``early_exit`` default ``True``) on a
    gyrostat with a prescribed rotor curve: the same run as its fixed iterations to round-off,
    unbatched and batched over dt, with the residual at round-off."""
    from geomjax.reconstruction import MomentumLGVI

    rec, s0 = gyrostat_reconstruction()

    def simulate(dt, early_exit):
        sol = gj.simulate(
            rec,
            MomentumLGVI(early_exit=early_exit),
            s0,
            dt,
            100,
            save_every=100,
            check_inputs=False,
        )
        return sol.final_state, sol.max_residual

    _check_same_runs(jax.jit(simulate, static_argnums=1), jnp.asarray([1e-3, 0.03]))

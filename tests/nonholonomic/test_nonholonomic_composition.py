"""Composition of NonholonomicVI (geomjax.Composition): fitted orders 4 and 6 against DOP853 on
independent formulations — the reduced sleigh equations and the Newton–Euler equations of a ball
on a uniformly *accelerating* turntable (time-dependent affine constraints: the stage times
must be right for the order to be four) — and the constraints at every node to round-off."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.systems import BallOnTurntable, ChaplyginSleigh

from . import reference as ref
from .helpers import fitted_order

T = 4.0
SLEIGH = ChaplyginSleigh(2.0, 0.5, 0.7)
SLEIGH_Y0 = (0.1, -0.2, 0.3, 1.5, -0.4)  # x, y, theta, omega, v (a reversal, then relaxation)


@eqx.filter_jit
def _integrate(system, method, state0, dt, n):
    """Terminal state after a dynamic number ``n`` of steps (one compilation per method)."""

    def body(k, c):
        carry, t = c
        carry, _ = method.advance(system, carry, dt, None, t)
        return carry, t + dt

    carry, _ = jax.lax.fori_loop(0, n, body, (method.init(system, state0), jnp.zeros((), dt.dtype)))
    return method.finalize(system, carry)


def _terminal(system, method, s0, dt):
    return _integrate(system, method, s0, jnp.asarray(dt), jnp.asarray(round(T / dt)))


@pytest.mark.parametrize("scheme", ["kahan_li6"])
def test_sleigh_order(scheme):
    x0, y0, th0, om0, v0 = SLEIGH_Y0
    s0 = SLEIGH.state(x0, y0, th0, omega=om0, v=v0)
    _, ys = ref.solve(
        ref.sleigh_rhs(2.0, 0.5, 0.7), list(SLEIGH_Y0), T, t_eval=[T], rtol=1e-13, atol=1e-13
    )
    y = ys[-1]
    method = gj.Composition(gj.NonholonomicVI(), scheme, loop="scan")
    dts = (0.2, 0.1, 0.05)
    errs = []
    for dt in dts:
        s = _terminal(SLEIGH, method, s0, dt)
        g = np.asarray(s.g)
        errs.append(
            max(abs(g[0, 2] - y[0]), abs(g[1, 2] - y[1]), abs(s.v[0] - y[3]), abs(s.v[1] - y[4]))
        )
        # the blade constraint (zero lateral velocity) at the node, to round-off
        assert abs(float(SLEIGH.constraint(s.g, s.x, s.v, T)[0])) < 1e-13
    slope = fitted_order(dts, errs)
    # observed 5.88 (errors 5e-5 .. 1.4e-8)
    assert abs(slope - method.order) < 0.4, (errs, slope)


def test_ball_on_accelerating_turntable_order_four():
    R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
    xb0, omb0, alpha = (0.7, -0.4), (0.5, -1.2, 2.0), 0.3
    ball = BallOnTurntable(mass=1.0, radius=0.5, table_rate=1.3, table_acceleration=alpha)
    s0 = ball.state(R0, xb0, omb0)
    rhs = ref.rolling_rhs(
        1.0,
        np.asarray(ball.inertia_tensor()),
        ref.ball_rho(0.5),
        gravity=9.81,
        table_rate=1.3,
        table_accel=alpha,
    )
    y0 = np.concatenate([np.asarray(R0).reshape(9), xb0, omb0])
    _, ys = ref.solve(rhs, y0, T, t_eval=[T], rtol=1e-13, atol=1e-13)
    y = ys[-1]
    method = gj.Composition(gj.NonholonomicVI(), "suzuki4", loop="scan")
    dts = (0.1, 0.05, 0.025)
    errs = []
    for dt in dts:
        s = _terminal(ball, method, s0, dt)
        om = np.asarray(s.g) @ np.asarray(s.v[:3])  # spatial angular velocity
        errs.append(
            max(
                np.abs(np.asarray(s.g).reshape(9) - y[:9]).max(),
                np.abs(np.asarray(s.x) - y[9:11]).max(),
                np.abs(om - y[11:]).max(),
            )
        )
        viol = ball.constraint(s.g, s.x, s.v, T)
        assert float(jnp.max(jnp.abs(viol))) < 1e-13
    slope = fitted_order(dts, errs)
    # observed 3.94 (errors 3e-3 .. 1.3e-5)
    assert abs(slope - 4) < 0.3, (errs, slope)

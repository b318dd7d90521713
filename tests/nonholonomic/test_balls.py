"""Rolling balls against closed forms and Newton–Euler DOP853 references: a ball on a (uniformly
accelerating) turntable (affine constraints) and Chaplygin's sphere."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.systems import (
    BallOnTurntable,
    ChaplyginSphere,
)

from . import reference as ref
from .helpers import NSAVE, run

VI = gj.NonholonomicVI()
R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
XB0, OMB0 = (0.7, -0.4), (0.5, -1.2, 2.0)  # centre position, spatial angular velocity
T = 4.0


def _ne_ball(system, table_accel=0.0):
    """Newton–Euler reference for a ball (centre of mass at the centre)."""
    I = np.asarray(system.inertia_tensor())
    return ref.rolling_rhs(
        float(system.mass),
        I,
        ref.ball_rho(float(system.radius)),
        gravity=9.81,
        table_rate=float(system.table_rate),
        table_accel=table_accel,
    )


def _ne_state_ball(s):
    """(R, contact point = centre below, spatial omega) of library states (time axis first)."""
    om = jnp.einsum("tij,tj->ti", s.g, s.v[:, :3])
    return np.asarray(s.g).reshape(-1, 9), np.asarray(s.x), np.asarray(om)


def _ne_errors(ys, R, p, om):
    return max(
        np.abs(R - ys[:, :9]).max(), np.abs(p - ys[:, 9:11]).max(), np.abs(om - ys[:, 11:]).max()
    )


# --------------------------------------------------------------------------------------------
# ball on a turntable


@pytest.mark.long
@pytest.mark.parametrize("alpha", [0.0, 0.3], ids=["uniform", "accelerating"])
def test_ball_on_turntable(alpha):
    ball = BallOnTurntable(mass=1.0, radius=0.5, table_rate=1.3, table_acceleration=alpha)
    s0 = ball.state(R0, XB0, OMB0)
    ts = np.linspace(0.0, T, NSAVE + 1)
    y0 = np.concatenate([np.asarray(R0).reshape(9), XB0, OMB0])
    _, ys = ref.solve(_ne_ball(ball, alpha), y0, T, t_eval=ts)
    if alpha == 0.0:
        # the circle (derived in the docstring) against the Newton–Euler reference
        x_cf, _ = ball.closed_form(jnp.asarray(ts), s0)
        np.testing.assert_allclose(x_cf, ys[:, 9:11], atol=1e-9)
        centre = np.asarray(s0.x) + np.array([-1, 1]) * np.asarray(s0.v[3:])[::-1] / (
            float(ball.kappa) * 1.3
        )
        radius = np.linalg.norm(s0.v[3:]) / (float(ball.kappa) * 1.3)
        np.testing.assert_allclose(np.linalg.norm(ys[:, 9:11] - centre, axis=1), radius, rtol=1e-9)
    errs = []
    for dt in (0.02, 0.01):
        out = run(ball, VI, s0, T, dt)
        s, d = out["states"], out["diag"]
        errs.append(_ne_errors(ys, *_ne_state_ball(s)))
        assert float(jnp.max(d["constraint_violation"])) < 1e-14  # affine, time-dependent
        # vertical spin (a horizontal symmetry) and x' − kappa W(t) J x: round-off
        np.testing.assert_allclose(d["vertical_spin"], OMB0[2], atol=1e-12)
        fi = np.asarray(d["first_integral"])
        np.testing.assert_allclose(fi, np.broadcast_to(fi[0], fi.shape), atol=1e-12)
        # multipliers = horizontal contact force m x'' = m kappa (W J x' + W' J x) (docstring)
        J = lambda u: np.stack([-u[:, 1], u[:, 0]], -1)  # noqa: E731
        W = 1.3 + alpha * np.asarray(out["ts"])[:, None]
        F = float(ball.mass * ball.kappa) * (
            W * J(np.asarray(s.v[:, 3:])) + alpha * J(np.asarray(s.x))
        )
        np.testing.assert_allclose(s.lam, F, atol=1e-12)
    assert 3.6 < errs[0] / errs[1] < 4.4 and errs[1] < 0.01, errs
    # continuous momentum equation: e3 spans g^q (dJ/dt = 0); e1 does not
    e1, e3 = jnp.array([1.0, 0.0, 0.0]), jnp.array([0.0, 0.0, 1.0])
    dJ = jax.jit(lambda s, z: ball.momentum_time_derivative(s, z))
    assert abs(float(dJ(s0, e3))) < 1e-13 and abs(float(dJ(s0, e1))) > 1e-2


# --------------------------------------------------------------------------------------------
# Chaplygin's sphere

SPHERE = ChaplyginSphere(mass=1.0, radius=0.5, inertia=(0.3, 0.45, 0.6))


def test_chaplygin_sphere_reference_and_invariants():
    s0 = SPHERE.state(R0, XB0, OMB0)
    ts = np.linspace(0.0, T, NSAVE + 1)
    y0 = np.concatenate([np.asarray(R0).reshape(9), XB0, OMB0])
    _, ys = ref.solve(_ne_ball(SPHERE), y0, T, t_eval=ts)
    errs = [
        _ne_errors(ys, *_ne_state_ball(run(SPHERE, VI, s0, T, dt)["states"])) for dt in (0.02, 0.01)
    ]
    assert 3.6 < errs[0] / errs[1] < 4.4 and errs[1] < 3e-3, errs
    # 1e5 steps: contact angular momentum to round-off, energy bounded without drift
    out = run(SPHERE, VI, s0, 1000.0, 0.01)
    d = out["diag"]
    M = np.asarray(d["contact_angular_momentum"])
    assert np.abs(M - M[0]).max() < 1e-12
    assert float(jnp.max(d["constraint_violation"])) < 1e-14
    E = np.asarray(d["energy"])
    err = np.abs(E - E[0]) / E[0]
    assert err.max() < 2e-5 and err[NSAVE // 2 :].max() < 1.5 * err[: NSAVE // 2].max()

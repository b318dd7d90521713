"""Rolling bodies and Suslov's problem against closed forms and Newton–Euler / hand-written
DOP853 references: ball on a (uniformly accelerating) turntable, Chaplygin's sphere, the
tilting rolling disk, the vertical rolling disk (seed 004 §5.1) and Suslov's problem."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.systems import (
    BallOnTurntable,
    ChaplyginSphere,
    RollingDisk,
    SuslovProblem,
    VerticalRollingDisk,
)

from . import reference as ref
from .helpers import NSAVE, fitted_order, run

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


# --------------------------------------------------------------------------------------------
# tilting rolling disk

DISK = RollingDisk(mass=1.0, radius=0.5)


def _disk_ne(s):
    """Newton–Euler coordinates of library disk states (time axis first)."""
    R = np.asarray(jax.vmap(DISK.attitude)(s))
    phi = np.arctan2(np.asarray(s.g[:, 1, 0]), np.asarray(s.g[:, 0, 0]))
    th = np.asarray(s.x[:, 0])
    v = np.asarray(s.v)
    om = np.stack(
        [
            v[k, 0] * ref.E3
            + v[k, 3] * ref.Rz(phi[k])[:, 0]
            + v[k, 4] * (ref.Rz(phi[k]) @ ref.Rx(th[k]))[:, 1]
            for k in range(len(th))
        ]
    )
    return R.reshape(-1, 9), np.asarray(s.g[:, :2, 2]), om


def _disk_rhs():
    A, C = float(DISK.inertia_diameter), float(DISK.inertia_axis)
    return ref.rolling_rhs(1.0, np.diag([A, C, A]), ref.disk_rho(0.5), gravity=9.81)


def test_rolling_disk_reference_and_energy():
    ic = dict(x=0.2, y=-0.1, phi=0.3, theta=0.4, psi=0.5, phi_dot=2.0, theta_dot=0.5, psi_dot=3.0)
    s0 = DISK.state(**ic)
    Tn = 2.0
    ts = np.linspace(0.0, Tn, NSAVE + 1)
    _, ys = ref.solve(_disk_rhs(), ref.disk_initial(**ic), Tn, t_eval=ts)
    errs = [_ne_errors(ys, *_disk_ne(run(DISK, VI, s0, Tn, dt)["states"])) for dt in (0.01, 0.005)]
    assert 3.6 < errs[0] / errs[1] < 4.4 and errs[1] < 0.05, errs
    out = run(DISK, VI, s0, 1000.0, 0.01)  # 1e5 steps
    d = out["diag"]
    assert float(jnp.max(d["constraint_violation"])) < 1e-14
    assert float(jnp.max(out["residual"])) < 1e-12
    E = np.asarray(d["energy"])
    err = np.abs(E - E[0]) / abs(E[0])
    assert err.max() < 2e-3 and err[NSAVE // 2 :].max() < 1.5 * err[: NSAVE // 2].max()


def test_rolling_disk_steady_circular_motion():
    """The steady-motion relation (docstring) keeps the tilt constant in the Newton–Euler
    reference; the integrator keeps it to O(h²)."""
    th0, w = 0.3, 1.0
    psid = float(DISK.steady_psi_dot(th0, w))
    ic = dict(x=0.0, y=0.0, phi=0.0, theta=th0, psi=0.0, phi_dot=w, theta_dot=0.0, psi_dot=psid)
    _, ys = ref.solve(_disk_rhs(), ref.disk_initial(**ic), T, t_eval=np.linspace(0, T, 41))
    tilt = np.arcsin(ys[:, 7])  # n_z = (R e_y)_z = R[2, 1] = sin(theta)
    np.testing.assert_allclose(tilt, th0, atol=1e-9)
    # perturbing the relation changes the tilt at first order in the reference
    ic_bad = dict(ic, psi_dot=psid + 0.3)
    _, yb = ref.solve(_disk_rhs(), ref.disk_initial(**ic_bad), T, t_eval=np.linspace(0, T, 41))
    assert np.abs(np.arcsin(yb[:, 7]) - th0).max() > 1e-2
    devs = []
    for dt in (0.02, 0.01):
        s = run(DISK, VI, DISK.state(**ic), T, dt)["states"]
        devs.append(
            max(
                np.abs(np.asarray(s.x[:, 0]) - th0).max(),
                np.abs(np.asarray(s.v[:, 0]) - w).max(),
                np.abs(np.asarray(s.v[:, 4]) - psid).max(),
            )
        )
    assert devs[1] < 0.01 and 3.2 < devs[0] / devs[1] < 4.8, devs


# --------------------------------------------------------------------------------------------
# vertical rolling disk (seed 004 §5.1)

VD = VerticalRollingDisk(mass=1.3, radius=0.6, inertia=0.2, inertia_vertical=0.1)
VD0 = VD.state(0.1, 0.2, 0.3, 0.4, theta_dot=1.7, phi_dot=0.9)


def test_vertical_disk_closed_form_and_misprint():
    errs = []
    for dt in (0.04, 0.02):
        out = run(VD, VI, VD0, T, dt)
        s = out["states"]
        g_ex, phi_ex = VD.closed_form(out["ts"], VD0)
        errs.append(float(jnp.max(jnp.abs(s.g - g_ex))))
        np.testing.assert_allclose(s.x[:, 0], phi_ex, atol=1e-12)  # phi' constant: exact
        # theta' constant (nonholonomic momentum (mR² + I) theta' conserved) to round-off
        np.testing.assert_allclose(s.v[:, 2], VD0.v[2], atol=1e-13)
        np.testing.assert_allclose(
            out["diag"]["nonholonomic_momentum"],
            (VD.mass * VD.radius**2 + VD.inertia) * VD0.v[2],
            rtol=1e-13,
        )
        assert float(jnp.max(out["diag"]["constraint_violation"])) < 1e-14
        E = out["diag"]["energy"]
        assert float(jnp.max(jnp.abs(E - E[0]))) < 1e-13  # kinetic energy of constant rates
    assert 3.6 < errs[0] / errs[1] < 4.4, errs  # second order
    # the formula printed in seed 004 (stray m and I, cos in the y-component) is far off
    t = out["ts"]
    m, R, I, td = VD.mass, VD.radius, VD.inertia, VD0.v[2]
    phi0, w = VD0.x[0], VD0.v[3]
    int_cos = (jnp.sin(phi0 + w * t) - jnp.sin(phi0)) / w
    printed = jnp.stack(
        [VD0.g[0] + td * m * R * int_cos, VD0.g[1] + td * m * R * int_cos, VD0.g[2] + I * td * t],
        -1,
    )
    assert float(jnp.max(jnp.abs(printed - s.g))) > 0.1


# --------------------------------------------------------------------------------------------
# Suslov's problem


def test_suslov_reference_and_energy():
    I = jnp.array([[2.0, 0.1, 0.3], [0.1, 3.0, 0.4], [0.3, 0.4, 4.0]])
    a = jnp.array([0.2, -0.3, 1.0])
    su = SuslovProblem(I, a)
    Om0 = jnp.array([1.0, -0.5, 0.0])
    Om0 = Om0 - (a @ Om0) / (a @ a) * a
    Rs = gj.SO3.exp(jnp.array([0.1, 0.2, 0.3]))
    s0 = su.make_state(Rs, None, Om0)
    ts = np.linspace(0.0, T, NSAVE + 1)
    _, ys = ref.solve(
        ref.suslov_rhs(I, a), np.concatenate([np.asarray(Rs).reshape(9), Om0]), T, t_eval=ts
    )
    errs = []
    for dt in (0.04, 0.02, 0.01):
        out = run(su, VI, s0, T, dt)
        s = out["states"]
        errs.append(
            max(
                np.abs(np.asarray(s.g).reshape(-1, 9) - ys[:, :9]).max(),
                np.abs(s.v - ys[:, 9:]).max(),
            )
        )
        assert float(jnp.max(out["diag"]["constraint_violation"])) < 1e-14
        E = np.asarray(out["diag"]["energy"])
        assert np.abs(E - E[0]).max() / E[0] < 0.1 * dt**2 * 100
    assert abs(fitted_order((0.04, 0.02, 0.01), errs) - 2) < 0.2, errs

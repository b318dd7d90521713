"""Disks and Suslov's problem against closed forms and Newton–Euler / hand-written DOP853
references: the tilting rolling disk (energy, steady motions), the vertical rolling disk (Cabrera, *Base-controlled mechanical systems and geometric phases*
§5.1, misprint) and Suslov's problem."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.systems import (
    RollingDisk,
    SuslovProblem,
    VerticalRollingDisk,
)

from . import reference as ref
from .helpers import NSAVE, fitted_order, run

VI = gj.NonholonomicVI()
T = 4.0


def _ne_errors(ys, R, p, om):
    return max(
        np.abs(R - ys[:, :9]).max(), np.abs(p - ys[:, 9:11]).max(), np.abs(om - ys[:, 11:]).max()
    )


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


@pytest.mark.long
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


@pytest.mark.long
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
# vertical rolling disk (Cabrera §5.1)

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
    # the formula printed in Cabrera (stray m and I, cos in the y-component) is far off
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
    # a an eigenvector of I: I maps a^⊥ to itself and Omega stays constant (docstring)
    I2 = jnp.array([[2.0, 0.3, 0.0], [0.3, 3.0, 0.0], [0.0, 0.0, 4.0]])
    su2 = SuslovProblem(I2, jnp.array([0.0, 0.0, 1.0]))
    s2 = su2.make_state(Rs, None, jnp.array([1.0, -0.5, 0.0]))
    v2 = run(su2, VI, s2, T, 0.04)["states"].v
    np.testing.assert_allclose(v2, np.broadcast_to(s2.v, v2.shape), atol=1e-12)


# --------------------------------------------------------------------------------------------
# a user-defined system from two plain functions: the knife edge on an inclined plane


def test_generic_system_knife_edge_on_inclined_plane():
    """NonholonomicSystem from a Lagrangian with a potential on the (abelian) group part and a
    configuration-dependent constraint.  Spinning at rate w from rest, the blade moves on a
    cycloid x = g' sin²(wt)/(2w²), y = g'(wt − sin(2wt)/2)/(2w²) (g' = g sin(slope)); derived by
    hand: with u = x' cos(wt) + y' sin(wt) the speed along the blade, u' = g' cos(wt)."""
    m, Jz, gs, w = 1.3, 0.2, 9.81 * np.sin(0.3), 2.0

    def lagrangian(q, x, v):
        return 0.5 * m * (v[0] ** 2 + v[1] ** 2) + 0.5 * Jz * v[2] ** 2 + m * gs * q[0]

    def constraint(q, x, v, t):
        return jnp.stack([v[0] * jnp.sin(q[2]) - v[1] * jnp.cos(q[2])])

    knife = gj.NonholonomicSystem(gj.Rn(3), lagrangian, constraint)
    assert knife.n_constraints == 1 and knife.shape_dim == 0
    s0 = knife.make_state(jnp.zeros(3), None, jnp.array([0.0, 0.0, w]))
    errs = []
    for dt in (0.02, 0.01):
        out = run(knife, VI, s0, 2.0, dt)
        q, t = np.asarray(out["states"].g), np.asarray(out["ts"])
        x_cf = gs / (2 * w**2) * np.sin(w * t) ** 2
        y_cf = gs / (2 * w**2) * (w * t - 0.5 * np.sin(2 * w * t))
        errs.append(max(np.abs(q[:, 0] - x_cf).max(), np.abs(q[:, 1] - y_cf).max()))
        np.testing.assert_allclose(q[:, 2], w * t, atol=1e-12)
        assert float(jnp.max(out["diag"]["constraint_violation"])) < 1e-14
        E = np.asarray(out["diag"]["energy"])  # T − m g' x
        assert np.abs(E - E[0]).max() < 5 * dt**2
    assert 3.6 < errs[0] / errs[1] < 4.4 and errs[1] < 1e-3, errs

"""Independent references for the nonholonomic tests: hand-written reduced equations and
Newton–Euler equations of rolling rigid bodies, solved by SciPy DOP853 at rtol = atol = 1e-12.

Nothing here uses geomjax's Lagrangians, constraint functions, autodiff Lagrange–d'Alembert
machinery or integrators: the rolling bodies are written as Newton–Euler equations with the
contact force eliminated (m c'' = F − m g0 e3, d/dt(I_s omega) = (p − c) × F, contact point at rest
relative to the support).
"""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate as scipy_integrate

E3 = np.array([0.0, 0.0, 1.0])


def solve(rhs, y0, T, t_eval=None, rtol=1e-12, atol=1e-12):
    """DOP853 on a jitted ``rhs(t, y)``; returns ``(ts, ys)`` with ``ys`` ``(len(ts), dim)``."""
    f = jax.jit(rhs)
    sol = scipy_integrate.solve_ivp(
        lambda t, y: np.asarray(f(t, jnp.asarray(y))),
        (0.0, T),
        np.asarray(y0, float),
        method="DOP853",
        rtol=rtol,
        atol=atol,
        t_eval=t_eval,
    )
    assert sol.success, sol.message
    return sol.t, sol.y.T


# --------------------------------------------------------------------------------------------
# Chaplygin sleigh: J omega' = −m a v omega, v' = a omega², x' = v cos θ, y' = v sin θ, θ' = omega


def sleigh_rhs(m, Ic, a, torque=0.0, force=0.0):
    """With a body torque and a force along the blade: J w' = −m a v w + torque,
    m v' = m a w² + force (the Euler–Poincaré–Suslov components along the turn and the blade)."""
    J = Ic + m * a * a

    def rhs(t, y):
        _, _, th, om, v = y
        return jnp.stack(
            [
                v * jnp.cos(th),
                v * jnp.sin(th),
                om,
                (-m * a * v * om + torque) / J,
                a * om * om + force / m,
            ]
        )

    return rhs


# --------------------------------------------------------------------------------------------
# Suslov: I Omega' = I Omega × Omega + lam a with <a, Omega'> = 0; R' = R hat(Omega)


def suslov_rhs(I, a):
    I = jnp.asarray(I)
    a = jnp.asarray(a)
    Iinv = jnp.linalg.inv(I)

    def rhs(t, y):
        R = y[:9].reshape(3, 3)
        Om = y[9:]
        f = jnp.cross(I @ Om, Om)
        lam = -(a @ (Iinv @ f)) / (a @ (Iinv @ a))
        dOm = Iinv @ (f + lam * a)
        W = jnp.array([[0.0, -Om[2], Om[1]], [Om[2], 0.0, -Om[0]], [-Om[1], Om[0], 0.0]])
        return jnp.concatenate([(R @ W).reshape(9), dOm])

    return rhs


# --------------------------------------------------------------------------------------------
# a rigid body rolling on a horizontal plane (possibly a turntable with rate W(t) = W0 + alpha t)
# state y = (R row-major (9), contact point p (2), spatial angular velocity omega (3))


def _cross_mat(u):
    return jnp.array([[0.0, -u[2], u[1]], [u[2], 0.0, -u[0]], [-u[1], u[0], 0.0]])


def rolling_rhs(mass, inertia_body, rho_of_R, gravity=0.0, table_rate=0.0, table_accel=0.0):
    """``rho_of_R(R)``: vector from the contact point to the centre of mass (3,)."""
    m = mass
    Ib = jnp.asarray(inertia_body)
    e3 = jnp.asarray(E3)

    def rhs(t, y):
        R = y[:9].reshape(3, 3)
        p = jnp.concatenate([y[9:11], jnp.zeros(1)])
        om = y[11:]
        W = _cross_mat(om)
        dR = W @ R
        rho, rho_dot = jax.jvp(rho_of_R, (R,), (dR,))
        Wt = table_rate + table_accel * t
        vT = Wt * jnp.cross(e3, p)
        pdot = jnp.cross(om, rho) + vT - rho_dot
        pdot = pdot.at[2].set(0.0)
        vT_dot = table_accel * jnp.cross(e3, p) + Wt * jnp.cross(e3, pdot)
        Is = R @ Ib @ R.T
        Rh = _cross_mat(rho)
        lhs = Is + m * Rh.T @ Rh
        b = -jnp.cross(om, Is @ om) - m * jnp.cross(
            rho, jnp.cross(om, rho_dot) + vT_dot + gravity * e3
        )
        om_dot = jnp.linalg.solve(lhs, b)
        return jnp.concatenate([dR.reshape(9), pdot[:2], om_dot])

    return rhs


def ball_rho(radius):
    return lambda R: radius * jnp.asarray(E3)


def disk_rho(radius):
    """Thin disk with symmetry axis R e_y: the centre sits at r times the in-plane unit vector
    that points most upward."""

    def rho(R):
        n = R[:, 1]
        u = jnp.asarray(E3) - n[2] * n
        return radius * u / jnp.linalg.norm(u)

    return rho


def Rz(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def Rx(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[1.0, 0, 0], [0, c, -s], [0, s, c]])


def Ry(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s], [0, 1.0, 0], [-s, 0, c]])


def disk_initial(x, y, phi, theta, psi, phi_dot, theta_dot, psi_dot):
    """Newton–Euler state of the disk from the angles: R = Rz(phi) Rx(theta) Ry(psi) and the
    spatial angular velocity phi' e3 + theta' Rz(phi) e1 + psi' Rz(phi) Rx(theta) e2."""
    R = Rz(phi) @ Rx(theta) @ Ry(psi)
    om = phi_dot * E3 + theta_dot * Rz(phi)[:, 0] + psi_dot * (Rz(phi) @ Rx(theta))[:, 1]
    return np.concatenate([R.reshape(9), [x, y], om])

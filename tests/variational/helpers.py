"""Systems, a dynamic-length driver and independent references for the variational tests.

The references are hand-written equations of motion (no geomjax autodiff, Lagrangian or
integrator) solved by SciPy DOP853 at rtol = atol = 1e-12."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate as scipy_integrate

import geomjax as gj

G0 = 9.81


def run(system, method, state0, dt, n):
    """``n`` steps (``n`` and ``dt`` dynamic: one compilation per system/method serves every step
    size of a convergence study) of ``method.step``; returns the final state and max residual."""
    return _run(system, method, state0, jnp.asarray(dt, state0.q.dtype), jnp.asarray(n))


@eqx.filter_jit
def _run(system, method, state0, dt, n):

    def body(i, c):
        s, worst = c
        s1, stats = method.step(system, s, dt, None, i * dt)
        return s1, jnp.maximum(worst, stats.residual)

    return jax.lax.fori_loop(0, n, body, (state0, jnp.zeros((), dt.dtype)))


def dop853(rhs, y0, T, t_eval=None):
    sol = scipy_integrate.solve_ivp(
        rhs,
        (0.0, T),
        np.asarray(y0, float),
        method="DOP853",
        rtol=1e-12,
        atol=1e-12,
        t_eval=t_eval,
    )
    assert sol.success, sol.message
    return sol.y.T


def fitted_order(hs, errs):
    return float(np.polyfit(np.log(hs), np.log(errs), 1)[0])


# --- planar double pendulum in angles (m = l = 1) ------------------------------------------
def double_pendulum():
    def L(q, v):
        a, b = q
        da, db = v
        K = da**2 + 0.5 * db**2 + da * db * jnp.cos(a - b)
        return K + 2 * G0 * jnp.cos(a) + G0 * jnp.cos(b)

    return gj.LagrangianSystem(L, dim=2)


def double_pendulum_rhs(t, y):
    """Textbook explicit form (m1 = m2 = l1 = l2 = 1)."""
    a, b, da, db = y
    d = a - b
    den = 3.0 - np.cos(2 * d)
    dda = (
        -G0 * 3 * np.sin(a) - G0 * np.sin(a - 2 * b) - 2 * np.sin(d) * (db**2 + da**2 * np.cos(d))
    ) / den
    ddb = 2 * np.sin(d) * (2 * da**2 + 2 * G0 * np.cos(a) + db**2 * np.cos(d)) / den
    return [da, db, dda, ddb]


# --- particle on a torus (R, r) under gravity along −z ------------------------------------
R_T, r_T = 2.0, 0.5


def torus_constraint(q):
    return jnp.array([(jnp.sqrt(q[0] ** 2 + q[1] ** 2) - R_T) ** 2 + q[2] ** 2 - r_T**2])


def torus_point(phi, th):
    rho = R_T + r_T * np.cos(th)
    return np.stack([rho * np.cos(phi), rho * np.sin(phi), r_T * np.sin(th)], -1)


def torus_rhs(t, y):
    """Angles (phi around the axis, th around the tube): hand-derived Euler–Lagrange."""
    _phi, th, dphi, dth = y
    rho = R_T + r_T * np.cos(th)
    ddphi = 2 * r_T * np.sin(th) * dth * dphi / rho
    ddth = -rho * np.sin(th) * dphi**2 / r_T - G0 * np.cos(th) / r_T
    return [dphi, dth, ddphi, ddth]


def torus_state(method, system, phi, th, dphi, dth):
    rho = R_T + r_T * np.cos(th)
    q = torus_point(phi, th)
    qd = np.array(
        [
            -rho * np.sin(phi) * dphi - r_T * np.sin(th) * np.cos(phi) * dth,
            rho * np.cos(phi) * dphi - r_T * np.sin(th) * np.sin(phi) * dth,
            r_T * np.cos(th) * dth,
        ]
    )
    return method.make_state(system, jnp.asarray(q), jnp.asarray(qd))


def gravity_particle(dim):
    """Unit mass in R^dim, gravity along −e_last."""
    return gj.LagrangianSystem(metric=jnp.eye(dim), potential=lambda q: G0 * q[-1])


# --- double spherical pendulum in Cartesian coordinates ------------------------------------
def double_spherical():
    system = gj.LagrangianSystem(
        metric=jnp.diag(jnp.array([1.0, 1.0, 1.0, 2.0, 2.0, 2.0])),
        potential=lambda q: G0 * (q[2] + 2.0 * q[5]),
    )

    def constraint(q):
        x1, x2 = q[:3], q[3:]
        d = x2 - x1
        return 0.5 * jnp.array([x1 @ x1 - 1.0, d @ d - 0.64])

    return system, constraint

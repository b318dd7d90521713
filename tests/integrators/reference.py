"""High-accuracy reference solutions: SciPy DOP853 at rtol = atol = 1e-12 on the continuous
forced Euler–Poincaré equations in matrix form (g flattened, mu), independent of the integrators."""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate as scipy_integrate


def ep_rhs(system, t, g, mu, u=None):
    """dg/dt = g hat(xi), dmu/dt = ad(xi)^T mu − dV + u + F with xi = I^{-1} mu (written out with
    the group's hat/ad matrices rather than the library's vector_field)."""
    G = system.group
    I = system.inertia_matrix()
    xi = jnp.linalg.solve(I, mu)
    dg = G.to_matrix(g) @ G.hat(xi) if G.name[0] not in "RT" else xi
    dmu = G.ad(xi).T @ mu
    if system.has_potential:
        dmu = dmu + system.potential_force(g)
    F = system.external_force(t, g, mu)
    if F is not None:
        dmu = dmu + F
    if u is not None:
        dmu = dmu + u
    return dg, dmu


def reference(
    system, state0, T, t_eval=None, control=None, dt_control=None, rtol=1e-12, atol=1e-12
):
    """DOP853 solution; ``control`` is an array (steps, dim) applied with zero-order hold of
    length ``dt_control``.  Returns (ts, g(ts), mu(ts)) as NumPy arrays."""
    g0, mu0 = system.split(state0)
    shape_g = g0.shape
    n_g = int(np.prod(shape_g))

    @jax.jit
    def f(t, y, u):
        g = y[:n_g].reshape(shape_g)
        dg, dmu = ep_rhs(system, t, g, y[n_g:], u)
        return jnp.concatenate([dg.reshape(-1), dmu])

    def make_fun(u):
        u = jnp.zeros(mu0.shape) if u is None else jnp.asarray(u)
        return lambda t, y: np.asarray(f(t, jnp.asarray(y), u))

    y0 = np.concatenate([np.asarray(g0).reshape(-1), np.asarray(mu0)])
    if control is None:
        sol = scipy_integrate.solve_ivp(
            make_fun(None), (0.0, T), y0, method="DOP853", rtol=rtol, atol=atol, t_eval=t_eval
        )
        ys, ts = sol.y.T, sol.t
    else:
        # integrate piecewise so that the discontinuities of the control are respected
        ts, ys, y = [0.0], [y0], y0
        for k in range(len(control)):
            s = scipy_integrate.solve_ivp(
                make_fun(control[k]),
                (k * dt_control, (k + 1) * dt_control),
                y,
                method="DOP853",
                rtol=rtol,
                atol=atol,
                first_step=dt_control / 4,
            )
            y = s.y[:, -1]
            ts.append((k + 1) * dt_control)
            ys.append(y)
        ts, ys = np.array(ts), np.array(ys)
    return ts, ys[:, :n_g].reshape((-1, *shape_g)), ys[:, n_g:]

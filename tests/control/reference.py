"""Independent re-simulation of optimized controls and curves: SciPy DOP853 (rtol = atol = 1e-12)
on the *unreduced* (spatial, matrix) equations, written in NumPy without geomjax."""

import numpy as np
import scipy.integrate as scipy_integrate

TOL = dict(rtol=1e-12, atol=1e-12, method="DOP853")


def hat(w):
    return np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])


def rotation_angle(R):
    """Angle of a rotation matrix (robust near 0 and π)."""
    c = np.clip((np.trace(R) - 1) / 2, -1, 1)
    s = np.linalg.norm([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]]) / 2
    return float(np.arctan2(s, c))


def rigid_body_zoh(I_body, mass, R0, x0, controls, dt, gravity=0.0):
    """Free rigid body (centre of mass at the body origin) under body torques/forces held constant
    on each step, in spatial form: ``π̇ = R τ``, ``ṗ = R f − m g e_z``, ``Ṙ = hat(R I⁻¹ Rᵀ π) R``,
    ``ẋ = p/m``.  ``controls`` ``(steps, 3)`` (torques) or ``(steps, 6)`` (torque, force).
    Returns ``(R(T), x(T), ω_body(T), v_body(T))``."""
    I_body = np.asarray(I_body)
    Iinv = np.linalg.inv(I_body)
    y = np.concatenate([np.asarray(R0).ravel(), np.zeros(3), np.asarray(x0), np.zeros(3)])
    controls = np.asarray(controls)

    def rhs(t, y, u):
        R = y[:9].reshape(3, 3)
        pi, p = y[9:12], y[15:18]
        w = R @ Iinv @ R.T @ pi
        tau = u[:3]
        f = u[3:] if u.shape[0] == 6 else np.zeros(3)
        weight = np.array([0.0, 0.0, mass * gravity])
        return np.concatenate([(hat(w) @ R).ravel(), R @ tau, p / mass, R @ f - weight])

    for k, u in enumerate(controls):
        sol = scipy_integrate.solve_ivp(rhs, (k * dt, (k + 1) * dt), y, args=(u,), **TOL)
        y = sol.y[:, -1]
    R = y[:9].reshape(3, 3)
    return R, y[12:15], Iinv @ R.T @ y[9:12], R.T @ y[15:18] / mass


def right_invariant_so3(omega, T, R0=None):
    """``Ṙ = hat(ω(t)) R`` on ``[0, T]`` for a callable spatial velocity ``ω(t)`` → ``R(T)``."""
    R0 = np.eye(3) if R0 is None else np.asarray(R0)

    def rhs(t, y):
        return (hat(omega(t)) @ y.reshape(3, 3)).ravel()

    sol = scipy_integrate.solve_ivp(rhs, (0.0, T), R0.ravel(), **TOL)
    return sol.y[:, -1].reshape(3, 3)


def ball_in_ball_attitude(base, T, m1, m2, Rb, a):
    """Big-ball attitude ``R₁(T)`` for a small ball (radius ``a``) rolling inside a free big ball
    (radius ``Rb``), its centre prescribed in the big ball's frame by polar angles ``base(t) ->
    (θ, φ)`` (and their rates), in unreduced spatial form.  Unknown spatial angular velocities
    ``ω₁, ω₃`` solve, at each instant, the linear system
        I₁ω₁ + μ r₂ × ṙ₂ + I₃ω₃ = 0                (zero total angular momentum about the CM)
        ṙ₂ + a ω₃ × n − (r + a) ω₁ × n = 0         (rolling at the contact point)
        ω₃ · n = 0                                 (no spin about the contact normal)
    with ``r₂ = R₁ r ν(θ, φ)``, ``ṙ₂ = ω₁ × r₂ + R₁ r ν̇``; then ``Ṙ₁ = hat(ω₁) R₁``."""
    out = scipy_integrate.solve_ivp(
        _bib_rhs(base, m1, m2, Rb, a), (0.0, T), np.eye(3).ravel(), **TOL
    )
    return out.y[:, -1].reshape(3, 3)


def _bib_rhs(base, m1, m2, Rb, a):
    r = Rb - a
    mu = m1 * m2 / (m1 + m2)
    I1, I3 = 0.4 * m1 * Rb**2, 0.4 * m2 * a**2

    def rhs(t, y):
        R1 = y.reshape(3, 3)
        (th, ph), (thd, phd) = base(t)
        nu = np.array([np.sin(th) * np.cos(ph), np.sin(th) * np.sin(ph), np.cos(th)])
        dnu = np.array(
            [
                np.cos(th) * np.cos(ph) * thd - np.sin(th) * np.sin(ph) * phd,
                np.cos(th) * np.sin(ph) * thd + np.sin(th) * np.cos(ph) * phd,
                -np.sin(th) * thd,
            ]
        )
        n = R1 @ nu
        r2, v_rel = r * n, r * (R1 @ dnu)
        # r2dot = ω₁ × r2 + v_rel = −hat(r2) ω₁ + v_rel
        A = np.zeros((7, 6))
        b = np.zeros(7)
        A[:3, :3] = I1 * np.eye(3) - mu * hat(r2) @ hat(r2)  # μ r₂ × (ω₁ × r₂)
        A[:3, 3:] = I3 * np.eye(3)
        b[:3] = -mu * np.cross(r2, v_rel)
        A[3:6, :3] = -hat(r2) + (r + a) * hat(n)  # −(r+a) ω₁ × n = (r+a) n × ω₁
        A[3:6, 3:] = -a * hat(n)  # a ω₃ × n = −a n × ω₃
        b[3:6] = -v_rel
        A[6, 3:] = n
        sol, *_ = np.linalg.lstsq(A, b, rcond=None)
        return (hat(sol[:3]) @ R1).ravel()

    return rhs


def ball_in_ball_zoh(b0, controls, dt, m1, m2, Rb, a):
    """:func:`ball_in_ball_attitude` for the piecewise-linear base path of the base velocities
    ``controls`` ``(steps, 2)`` held over steps of ``dt`` from ``b0 = (θ, φ)``, integrated
    segment by segment (the kinks at the nodes are not smoothed over).  Returns the big-ball
    attitudes ``(steps + 1, 3, 3)`` at the nodes."""
    y, b = np.eye(3).ravel(), np.asarray(b0, float)
    out = [y.reshape(3, 3)]
    for k, u in enumerate(np.asarray(controls)):
        t0 = k * dt

        def base(t, b=b, u=u, t0=t0):
            return b + (t - t0) * u, u

        sol = scipy_integrate.solve_ivp(_bib_rhs(base, m1, m2, Rb, a), (t0, t0 + dt), y, **TOL)
        y, b = sol.y[:, -1], b + dt * u
        out.append(y.reshape(3, 3))
    return np.stack(out)


def rolling_ball_zoh(controls, dt, radius, table_rate):
    """A ball rolling without slipping or spinning on a turntable (rate ``Ω``), its contact point
    moved with the velocities ``controls`` ``(steps, 2)`` held over each step, from ``R = I`` at
    the origin, in unreduced spatial form: ``ẋ = u``, ``Ṙ = ω̂ R`` with ``ω`` from the rolling
    constraint ``ẋ + ω × (−a e_z) = Ω e_z × x`` and ``ω_z = 0``, solved as a linear system at
    each instant.  Returns the attitudes
    ``(steps + 1, 3, 3)`` and positions ``(steps + 1, 2)`` at the nodes."""
    ez = np.array([0.0, 0.0, 1.0])

    def rhs(t, y, u):
        R, x = y[:9].reshape(3, 3), y[9:]
        # unknown ω: 3 equations  (ω × (−a e_z))_xy = Ω (e_z × x)_xy − u,  ω_z = 0
        A = np.zeros((3, 3))
        A[:2] = -hat(-radius * ez)[:2]  # ω × v = −v × ω = −hat(v) ω
        A[2, 2] = 1.0
        X = np.array([x[0], x[1], 0.0])
        b = np.concatenate([(table_rate * np.cross(ez, X))[:2] - u, [0.0]])
        w = np.linalg.solve(A, b)
        return np.concatenate([(hat(w) @ R).ravel(), u])

    y = np.concatenate([np.eye(3).ravel(), np.zeros(2)])
    Rs, xs = [np.eye(3)], [np.zeros(2)]
    for k, u in enumerate(np.asarray(controls)):
        sol = scipy_integrate.solve_ivp(rhs, (k * dt, (k + 1) * dt), y, args=(u,), **TOL)
        y = sol.y[:, -1]
        Rs.append(y[:9].reshape(3, 3))
        xs.append(y[9:])
    return np.stack(Rs), np.stack(xs)


def cartpole_zoh(controls, dt, mc, mp, l, g):
    """Cart-pole (cart ``x``, pole angle ``θ`` from hanging) under a horizontal force on the cart
    held over each step, from rest hanging: the Euler–Lagrange equations of
    ``L = ½(m_c + m_p)ẋ² + m_p l ẋ θ̇ cos θ + ½ m_p l² θ̇² + m_p g l cos θ`` solved for the
    accelerations.  Returns ``q`` ``(steps + 1, 2)`` and ``q̇`` ``(steps + 1, 2)`` at the nodes."""

    def rhs(t, y, u):
        _, th, xd, thd = y
        M = np.array([[mc + mp, mp * l * np.cos(th)], [mp * l * np.cos(th), mp * l * l]])
        f = np.array([u + mp * l * np.sin(th) * thd**2, -mp * g * l * np.sin(th)])
        return np.concatenate([[xd, thd], np.linalg.solve(M, f)])

    y = np.zeros(4)
    out = [y]
    for k, u in enumerate(np.asarray(controls).reshape(-1)):
        sol = scipy_integrate.solve_ivp(rhs, (k * dt, (k + 1) * dt), y, args=(u,), **TOL)
        y = sol.y[:, -1]
        out.append(y)
    out = np.stack(out)
    return out[:, :2], out[:, 2:]

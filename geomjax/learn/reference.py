"""Reference motions for fitting and checking, computed independently of geomjax's integrators:
SciPy's DOP853 on the Newton–Euler equations written out in NumPy (SciPy is a development
dependency, imported when these functions are called).

SO(3) body with a centre of mass ``rho`` below a pivot (heavy top / 3D pendulum), viscous damping
and known body torques ``u`` held on each sample interval:

    Ṙ = R Ω̂,   I Ω̇ = (I Ω) × Ω + m g (Rᵀ e₃) × ρ − c Ω + u,

or, for any potential of the body-frame vertical ``z = Rᵀe₃`` (given by its gradient ``∇V(z)``),
the torque ``z × ∇V(z)`` in place of ``m g z × ρ`` (``V = m g ρ·z`` is the heavy top).

SE(3) body (quadrotor) with mass ``m``, inertia ``J`` about its centre of mass at the body origin,
gravity along −e₃ and body wrench inputs ``(τ, f)`` through an input map ``B``:

    Ṙ = R Ω̂,  ẋ = R v,  J Ω̇ = (J Ω) × Ω + τ,  m v̇ = (m v) × Ω − m g Rᵀ e₃ + f.
"""

from __future__ import annotations

import numpy as np

__all__ = ["noisy", "se3_reference", "so3_reference"]


def _hat(w):
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def _expm_so3(w):
    th = np.linalg.norm(w)
    K = _hat(w)
    if th < 1e-8:
        return np.eye(3) + K + 0.5 * K @ K
    return np.eye(3) + np.sin(th) / th * K + (1 - np.cos(th)) / th**2 * K @ K


def _piecewise(rhs, y0, ts, controls, rtol, atol):
    from scipy.integrate import solve_ivp

    ys = [np.asarray(y0, float)]
    for k in range(len(ts) - 1):
        u = None if controls is None else np.asarray(controls[k], float)
        s = solve_ivp(
            lambda t, y, u=u: rhs(t, y, u),
            (ts[k], ts[k + 1]),
            ys[-1],
            method="DOP853",
            rtol=rtol,
            atol=atol,
        )
        ys.append(s.y[:, -1])
    return np.stack(ys)


def so3_reference(
    inertia,
    R0,
    omega0,
    ts,
    *,
    mass_g_rho=(0.0, 0.0, 0.0),
    damping=0.0,
    controls=None,
    rtol=1e-12,
    atol=1e-12,
    vertical_gradient=None,
):
    """``(R (N,3,3), Ω (N,3))`` at ``ts`` for the SO(3) body above; ``mass_g_rho`` is ``m g ρ``
    (the first moment times gravity), ``controls`` ``(N−1, 3)`` body torques;
    ``vertical_gradient``: optional ``z -> ∇V(z)`` (NumPy, ``(3,) -> (3,)``) of a potential of
    the body-frame vertical ``z = Rᵀe₃``, whose torque ``z × ∇V(z)`` is added."""
    if vertical_gradient is not None and not callable(vertical_gradient):
        raise ValueError(
            "so3_reference: argument 'vertical_gradient' must be callable z -> (3,) or None"
        )
    I = np.asarray(inertia, float)
    I = np.diag(I) if I.shape == (3,) else I
    Iinv = np.linalg.inv(I)
    mgr = np.asarray(mass_g_rho, float)
    e3 = np.array([0.0, 0.0, 1.0])

    def rhs(t, y, u):
        R = y[:9].reshape(3, 3)
        w = y[9:]
        z = R.T @ e3
        tau = np.cross(I @ w, w) + np.cross(z, mgr) - damping * w
        if vertical_gradient is not None:
            tau = tau + np.cross(z, vertical_gradient(z))
        if u is not None:
            tau = tau + u
        return np.concatenate([(R @ _hat(w)).reshape(-1), Iinv @ tau])

    Y = _piecewise(
        rhs,
        np.concatenate([np.asarray(R0, float).reshape(-1), omega0]),
        np.asarray(ts, float),
        controls,
        rtol,
        atol,
    )
    return Y[:, :9].reshape(-1, 3, 3), Y[:, 9:]


def se3_reference(
    mass,
    inertia,
    g0,
    xi0,
    ts,
    *,
    gravity=9.81,
    input_map=None,
    controls=None,
    rtol=1e-12,
    atol=1e-12,
):
    """``(g (N,4,4), ξ = (Ω, v) (N,6))`` at ``ts`` for the SE(3) body above; the body wrench is
    ``B u`` with ``B = input_map`` ``(6, k)`` (default the identity) and ``controls`` ``(N−1, k)``."""
    J = np.asarray(inertia, float)
    J = np.diag(J) if J.shape == (3,) else J
    Jinv = np.linalg.inv(J)
    m = float(mass)
    e3 = np.array([0.0, 0.0, 1.0])
    B = None if input_map is None else np.asarray(input_map, float)

    def rhs(t, y, u):
        R = y[:9].reshape(3, 3)
        w, v = y[12:15], y[15:18]
        tau = np.cross(J @ w, w)
        f = np.cross(m * v, w) - m * gravity * (R.T @ e3)
        if u is not None:
            wr = u if B is None else B @ u
            tau, f = tau + wr[:3], f + wr[3:]
        return np.concatenate([(R @ _hat(w)).reshape(-1), R @ v, Jinv @ tau, f / m])

    g0 = np.asarray(g0, float)
    y0 = np.concatenate([g0[:3, :3].reshape(-1), g0[:3, 3], xi0])
    Y = _piecewise(rhs, y0, np.asarray(ts, float), controls, rtol, atol)
    g = np.zeros((len(ts), 4, 4))
    g[:, :3, :3] = Y[:, :9].reshape(-1, 3, 3)
    g[:, :3, 3] = Y[:, 9:12]
    g[:, 3, 3] = 1.0
    return g, Y[:, 12:]


def noisy(g, sigma, rng, translation_sigma=None):
    """Measurements ``ĝ = g exp(n̂)`` with rotational noise ``n ~ N(0, σ² 1)`` (and additive
    position noise of ``translation_sigma`` on SE(3) poses), for ``g`` ``(N, 3, 3)`` or ``(N, 4, 4)``."""
    g = np.array(g, float, copy=True)
    for k in range(g.shape[0]):
        g[k, :3, :3] = g[k, :3, :3] @ _expm_so3(sigma * rng.standard_normal(3))
    if g.shape[-1] == 4 and translation_sigma:
        g[:, :3, 3] += translation_sigma * rng.standard_normal((g.shape[0], 3))
    return g

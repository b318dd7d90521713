"""Closed forms for the base-controlled examples of Cabrera, *Base-controlled mechanical systems and geometric phases* and the works it builds on, derived
here by hand (NumPy/SciPy only; nothing from ``geomjax``).

* §5.1 vertical disk, corrected (conventions.md): θ̇ constant,
  g(t) = (R θ̇ ∫cos φ, R θ̇ ∫sin φ, θ̇ (t − t₁)).
* §5.2 ball on a turntable, contact point on the circle c(t) = ρ (cos νt, sin νt) centred on the
  axis: the spatial angular velocity is ω = (κ cos νt, κ sin νt, ω_z) with κ = ρ (Ω − ν)/a, so
  in the frame turning with the path it is constant and R(t) = R_z(νt) exp(t hat(κ, 0, ω_z − ν)) R₀.
  Ω = 0 (rolling plate): any circle, holonomy angle per loop 2π √(1 + ρ²/a²) when ω_z = 0.
  Free ball (no agent): the centre turns on a circle at ν = Ω k²/(k² + a²) (2Ω/7, solid ball).
* §5.3 small ball in a free big ball, latitude loop r21 = r (sin α cos νt, sin α sin νt, cos α),
  zero total angular momentum: for every spin s = ω₃·n the motion is a relative equilibrium in
  the frame turning with the path (body angular velocity R_z(νt) c₁(s)), and
  R₁(t) = R₁(0) exp(t hat(c₁ + ν e₃)) R_z(−νt). Point-mass limit (a → 0) with I₃ = 0 likewise.
* Free rigid body: period (Landau–Lifshitz §37, elliptic K), axisymmetric closed form
  R(t) = exp(t (M/I₁) hat(μ̂)) R₀ exp(t Ω_b hat(e₃)), Ω_b = Π₃ (1/I₃ − 1/I₁), and Montgomery's
  formula Δθ = 2ET/M − Λ (mod 2π) with Λ the solid angle swept by Π(t), oriented
  COUNTER-CLOCKWISE seen from outside the sphere (right-handed about the outward normal); see
  ``signed_solid_angle``. Derivation of the orientation (axisymmetric case): Π(t) =
  exp(−tΩ_b e₃) Π₀ and Δθ = TM/I₁ while 2ET/M = TM/I₁ + 2π sgn(Ω_b) cos α, hence
  Λ ≡ −sgn(Ω_b) 2π (1 − cos α): the cap around e₃ counted with the sign of the counter-clockwise
  orientation (Π turns clockwise about e₃ when Ω_b > 0).
* Two planar links, zero angular momentum: dθ₁/dψ = −(I₂ + μ(l₂² + l₁l₂ cos ψ)) /
  (I₁ + I₂ + μ(l₁² + l₂² + 2 l₁ l₂ cos ψ)), μ = m₁m₂/(m₁+m₂) (quadrature).
"""

from __future__ import annotations

import numpy as np
from scipy import integrate, linalg, special


def hat(w):
    w = np.asarray(w, float)
    return np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])


def expm_so3(w):
    return linalg.expm(hat(w))


def Rz(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def rotation_angle_axis(R):
    """(angle ∈ [0, π], unit axis) of a rotation matrix."""
    w = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    s, c = np.linalg.norm(w) / 2, (np.trace(R) - 1) / 2
    ang = np.arctan2(s, c)
    return ang, (w / (2 * s) if s > 1e-14 else np.array([0.0, 0.0, 1.0]))


def angle_about(R, u):
    """θ with R = exp(θ hat(u)) for a rotation R about the unit axis u (checked by caller)."""
    u = np.asarray(u, float) / np.linalg.norm(u)
    # pick e ⟂ u, R e = cos θ e + sin θ u × e
    e = np.cross(u, [1.0, 0, 0] if abs(u[0]) < 0.9 else [0, 1.0, 0])
    e /= np.linalg.norm(e)
    Re = R @ e
    return np.arctan2(Re @ np.cross(u, e), Re @ e)


def wrap(x):
    """to (−π, π]"""
    return (np.asarray(x) + np.pi) % (2 * np.pi) - np.pi


# ---------------------------------------------------------------------------------- §5.1


def vertical_disk(t, phi, *, R, thetadot, x0=0.0, y0=0.0, theta0=0.0):
    """x, y, θ at times t for a heading φ(t) (NumPy callable), by adaptive quadrature."""
    t = np.atleast_1d(t)
    cx = [
        integrate.quad(lambda s: np.cos(phi(s)), 0, ti, epsabs=1e-13, epsrel=1e-12, limit=200)[0]
        for ti in t
    ]
    sy = [
        integrate.quad(lambda s: np.sin(phi(s)), 0, ti, epsabs=1e-13, epsrel=1e-12, limit=200)[0]
        for ti in t
    ]
    return (
        x0 + R * thetadot * np.array(cx),
        y0 + R * thetadot * np.array(sy),
        theta0 + thetadot * t,
    )


def vertical_disk_linear_heading(t, *, phi0, w, R, thetadot, x0=0.0, y0=0.0, theta0=0.0):
    """φ = φ₀ + w t: x = x₀ + R θ̇ (sin φ − sin φ₀)/w, y = y₀ − R θ̇ (cos φ − cos φ₀)/w."""
    t = np.asarray(t, float)
    p = phi0 + w * t
    return (
        x0 + R * thetadot * (np.sin(p) - np.sin(phi0)) / w,
        y0 - R * thetadot * (np.cos(p) - np.cos(phi0)) / w,
        theta0 + thetadot * t,
    )


# ---------------------------------------------------------------------------------- §5.2


def turntable_circle(t, *, rho, nu, a, Omega, omega_z=0.0, R0=np.eye(3)):
    """Ball rotation R(t) for the contact point on ρ (cos νt, sin νt) (circle about the axis)."""
    kappa = rho * (Omega - nu) / a
    w = np.array([kappa, 0.0, omega_z - nu])
    return np.array([Rz(nu * ti) @ expm_so3(ti * w) @ np.asarray(R0) for ti in np.atleast_1d(t)])


def plate_circle_holonomy_angle(*, rho, a):
    """Rolling plate (Ω = 0, ω_z = 0): rotation angle of the ball after one circuit of any
    circle of radius ρ, 2π √(1 + ρ²/a²) (reduced to [0, π] by the caller)."""
    return 2 * np.pi * np.sqrt(1 + (rho / a) ** 2)


def turntable_free_centre(t, *, c0, cd0, Omega, a, k2):
    """Free ball on a turntable: c̈ = ν e₃ × ċ, ν = Ω k²/(k² + a²)."""
    nu = Omega * k2 / (k2 + a * a)
    t = np.atleast_1d(t)[:, None]
    s, c = np.sin(nu * t), np.cos(nu * t)
    cd0 = np.asarray(cd0, float)
    dx = (s * cd0[0] - (1 - c) * cd0[1]) / nu
    dy = ((1 - c) * cd0[0] + s * cd0[1]) / nu
    return np.asarray(c0, float) + np.concatenate([dx, dy], 1), nu


# ---------------------------------------------------------------------------------- §5.3


def ball_in_ball_latitude(*, alpha, nu, m1, m2, Rb, a, s=0.0, I1=None, I3=None):
    """Relative equilibrium (zero total angular momentum) for the latitude loop of colatitude α
    at rate ν with spin s = ω₃·n. In the frame turning with the path every quantity is constant:
    big-ball body angular velocity c₁, small ball's spatial angular velocity in big-ball
    coordinates c₃, fixed by
      rolling   (c₃ − c₁)_tangential = (ṙ₂₁ × n)/a,  c₃·n = s,
      L = 0     I₁ c₁ + I₃ c₃ + μ r₂₁ × (c₁ × r₂₁ + ṙ₂₁) = 0,
    and the only remaining dynamical equation, the spin equation ṡ = (R_b/r) n·(ω₃ × ω₁), is
    satisfied for EVERY s because c₁, c₃ and n lie in one plane (the meridian plane of the
    path point) — ``residual`` reports n·(c₃ × c₁). Returns dict(c1, w3b, residual) at t = 0."""
    I1 = 0.4 * m1 * Rb * Rb if I1 is None else I1
    I3 = 0.4 * m2 * a * a if I3 is None else I3
    r = Rb - a
    mu = m1 * m2 / (m1 + m2)
    n0 = np.array([np.sin(alpha), 0.0, np.cos(alpha)])
    r21, rd = r * n0, r * nu * np.array([0.0, np.sin(alpha), 0.0])
    P = np.eye(3) - np.outer(n0, n0)
    A = I1 * np.eye(3) + I3 * P + mu * (r * r * np.eye(3) - np.outer(r21, r21))
    roll = np.cross(rd, n0) / a
    c1 = np.linalg.solve(A, -I3 * (roll + s * n0) - mu * np.cross(r21, rd))
    c3 = P @ c1 + roll + s * n0
    return dict(c1=c1, w3b=c3, residual=n0 @ np.cross(c3, c1))


def point_mass_latitude(*, alpha, nu, m1, m2, r, I1):
    """a → 0 limit (point mass m₂ at distance r, no rolling): c₁ = −(I₁ + μ(r² − r₂₁r₂₁ᵀ))⁻¹ μ
    r₂₁ × ṙ₂₁ at t = 0."""
    mu = m1 * m2 / (m1 + m2)
    n0 = np.array([np.sin(alpha), 0.0, np.cos(alpha)])
    r21, rd = r * n0, r * nu * np.array([0.0, np.sin(alpha), 0.0])
    A = I1 * np.eye(3) + mu * (r * r * np.eye(3) - np.outer(r21, r21))
    return np.linalg.solve(A, -mu * np.cross(r21, rd))


def latitude_rotation(t, *, c1, nu, R1_0=np.eye(3)):
    """R₁(t) = R₁(0) exp(t hat(c₁ + ν e₃)) R_z(−νt)."""
    w = np.asarray(c1) + np.array([0, 0, nu])
    return np.array([R1_0 @ expm_so3(ti * w) @ Rz(-nu * ti) for ti in np.atleast_1d(t)])


# ---------------------------------------------------------------------------------- rigid body


def free_rigid_body_period(inertia, Pi0):
    """Period of Π(t) (Landau–Lifshitz §37) for distinct moments; any order of ``inertia``."""
    I = np.asarray(inertia, float)
    Pi0 = np.asarray(Pi0, float)
    order = np.argsort(I)
    I1, I2, I3 = I[order]
    P = Pi0[order]
    M2 = P @ P
    E2 = (P**2 / np.array([I1, I2, I3])).sum()  # 2E
    if M2 > E2 * I2:
        k2 = (I2 - I1) * (E2 * I3 - M2) / ((I3 - I2) * (M2 - E2 * I1))
        freq = np.sqrt((I3 - I2) * (M2 - E2 * I1) / (I1 * I2 * I3))
    else:
        k2 = (I3 - I2) * (M2 - E2 * I1) / ((I2 - I1) * (E2 * I3 - M2))
        freq = np.sqrt((I2 - I1) * (E2 * I3 - M2) / (I1 * I2 * I3))
    return 4 * special.ellipk(k2) / freq


def axisymmetric_body(t, *, I1, I3, Pi0, R0=np.eye(3)):
    """I = diag(I₁, I₁, I₃): R(t) = exp(t (M/I₁) hat(μ̂)) R₀ exp(t Ω_b hat(e₃))."""
    Pi0 = np.asarray(Pi0, float)
    mu = np.asarray(R0) @ Pi0
    M = np.linalg.norm(mu)
    Ob = Pi0[2] * (1 / I3 - 1 / I1)
    return np.array(
        [expm_so3(ti * M / I1 * mu / M) @ R0 @ expm_so3([0, 0, ti * Ob]) for ti in np.atleast_1d(t)]
    )


def energy(inertia, Pi):
    return 0.5 * (np.asarray(Pi) ** 2 / np.asarray(inertia)).sum(-1)


def signed_solid_angle(curve):
    """Solid angle enclosed by a closed curve on a sphere (points (N,3), last == first or not),
    positive when the curve turns COUNTER-CLOCKWISE about the enclosed region seen from outside
    (right-handed about the outward normal). Fan of spherical triangles from the normalized mean
    point, Van Oosterom–Strackee: tan(Ω/2) = c·(p×q) / (1 + c·p + p·q + q·c). Defined mod 4π."""
    P = np.asarray(curve, float)
    P = P / np.linalg.norm(P, axis=1, keepdims=True)
    c = P.mean(0)
    c /= np.linalg.norm(c)
    Q = np.roll(P, -1, axis=0)
    num = np.einsum("j,ij->i", c, np.cross(P, Q))
    den = 1 + P @ c + (P * Q).sum(1) + Q @ c
    return 2 * np.arctan2(num, den).sum()


def montgomery_angle(inertia, Pi_curve, T, M):
    """Δθ = 2ET/M − Λ (mod 2π) for a closed body-momentum curve Π(t) over one period T."""
    E = energy(inertia, Pi_curve[0])
    return 2 * E * T / M - signed_solid_angle(Pi_curve)


# ---------------------------------------------------------------------------------- linked bodies


def two_link_theta(psi0, psi1, *, m1, m2, I1, I2, l1, l2):
    """θ₁(ψ₁) − θ₁(ψ₀) for two planar links (zero angular momentum) when the joint angle moves
    from ψ₀ to ψ₁ (any time law)."""
    mu = m1 * m2 / (m1 + m2)

    def A(psi):
        return (I2 + mu * (l2 * l2 + l1 * l2 * np.cos(psi))) / (
            I1 + I2 + mu * (l1 * l1 + l2 * l2 + 2 * l1 * l2 * np.cos(psi))
        )

    return -integrate.quad(A, psi0, psi1, epsabs=1e-13, epsrel=1e-12, limit=200)[0]

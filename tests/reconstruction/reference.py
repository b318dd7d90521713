"""Independent references for the base-controlled systems of Cabrera, *Base-controlled mechanical systems and geometric phases* (Cabrera): SciPy DOP853 at
rtol = atol = 1e-12 on the FULL, UNREDUCED systems.

Nothing here uses the paper's reduced equations (gauges, locked inertia, momentum equations,
body-momentum form) nor anything from ``geomjax``. Each system is written as Newton–Euler
equations of all its rigid bodies (or the Lagrange–d'Alembert equations in the original
coordinates) with the constraint forces as Lagrange multipliers solved from a KKT system at the
acceleration level:

    M qdd = F(q, qd) + Aᵀ lam,     A qdd = −Ȧ qd  (+ the prescribed base acceleration),

so the conservation laws and the reconstruction equations of the paper are *consequences* that
the tests can check, not inputs. Base (shape) curves are jittable functions of ``t``; their first
and second time derivatives come from ``jax.jvp`` (this only differentiates the given input
curve). Rotations are integrated as 3×3 matrices with spatial angular velocity, Ṙ = hat(ω) R.

Conventions: vectors in R³, ``hat(w) u = w × u``; spatial angular velocity ω with Ṙ Rᵀ = hat(ω);
body angular velocity Rᵀω.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate as scipy_integrate

RTOL = ATOL = 1e-12


@dataclass
class Solution:
    """A DOP853 solution: ``t`` (N,), named arrays (time axis first), ``nfev`` RHS calls."""

    t: np.ndarray
    y: np.ndarray
    nfev: int
    parts: dict = field(default_factory=dict)

    def __getitem__(self, name):
        return self.parts[name]


def hat(w):
    """Batched hat map (..., 3) -> (..., 3, 3), NumPy."""
    w = np.asarray(w, float)
    z = np.zeros_like(w[..., 0])
    return np.stack(
        [
            np.stack([z, -w[..., 2], w[..., 1]], -1),
            np.stack([w[..., 2], z, -w[..., 0]], -1),
            np.stack([-w[..., 1], w[..., 0], z], -1),
        ],
        -2,
    )


_DERIVS = {}


def derivatives(curve):
    """t -> (c(t), ċ(t), c̈(t)) (NumPy) of a jittable curve by forward-mode autodiff; compiled
    once per curve object (cached, so repeated references on one curve time the integration)."""
    if curve in _DERIVS:
        return _DERIVS[curve]

    def d1(t):
        return jax.jvp(curve, (t,), (jnp.ones_like(t),))

    def d2(t):
        (c, v), (_, a) = jax.jvp(d1, (t,), (jnp.ones_like(t),))
        return c, v, a

    d2 = jax.jit(d2)
    out = lambda t: tuple(np.asarray(x) for x in d2(jnp.asarray(t, float)))  # noqa: E731
    if len(_DERIVS) < 64:
        _DERIVS[curve] = out
    return out


np_hat = hat


def _np_tangent_basis(n):
    e = np.array([1.0, 0, 0]) if abs(n[0]) < 0.9 else np.array([0, 1.0, 0])
    t1 = np.cross(n, e)
    t1 /= np.linalg.norm(t1)
    return np.stack([t1, np.cross(n, t1)], 1)


def solve(rhs, y0, T, t_eval=None, rtol=RTOL, atol=ATOL):
    """DOP853 on a NumPy ``rhs(t, y)`` from 0 to ``T``: returns (t, Y, nfev)."""
    sol = scipy_integrate.solve_ivp(
        rhs, (0.0, float(T)), np.asarray(y0, float), method="DOP853", rtol=rtol, atol=atol,
        t_eval=t_eval,
    )  # fmt: skip
    assert sol.success, sol.message
    return sol.t, sol.y.T, sol.nfev


# --------------------------------------------------------------------------------------------
# §5.1 vertical rolling disk# §5.1 vertical rolling disk, heading phi(t) prescribed
#   L = ½ m (ẋ² + ẏ²) + ½ I θ̇² + ½ J φ̇²,  ẋ = R cos φ θ̇,  ẏ = R sin φ θ̇
#   m ẍ = l1, m ÿ = l2, I θ̈ = −R cos φ l1 − R sin φ l2 (the φ equation only fixes the torque)


def vertical_disk(phi, T, *, m, I, R, x0=0.0, y0=0.0, theta0=0.0, thetadot0=1.0, t_eval=None):
    """Returns parts x, y, theta, thetadot, phi (each (N,))."""
    dphi = derivatives(phi)

    def rhs(t, s):
        _x, _y, _th, xd, yd, thd = s
        p, pd, _ = dphi(t)
        c, sn = np.cos(p), np.sin(p)
        # unknowns (xdd, ydd, thdd, l1, l2)
        K = np.array(
            [
                [m, 0, 0, -1, 0],
                [0, m, 0, 0, -1],
                [0, 0, I, R * c, R * sn],
                [1, 0, -R * c, 0, 0],
                [0, 1, -R * sn, 0, 0],
            ]
        )
        rhs_ = np.array([0.0, 0.0, 0.0, -R * sn * pd * thd, R * c * pd * thd])
        acc = np.linalg.solve(K, rhs_)
        return np.stack([xd, yd, thd, acc[0], acc[1], acc[2]])

    p0 = float(dphi(0.0)[0])
    s0 = [x0, y0, theta0, R * np.cos(p0) * thetadot0, R * np.sin(p0) * thetadot0, thetadot0]
    t, Y, nfev = solve(rhs, s0, T, t_eval)
    phis = np.asarray(jax.jit(jax.vmap(phi))(jnp.asarray(t)))
    return Solution(
        t,
        Y,
        nfev,
        dict(x=Y[:, 0], y=Y[:, 1], theta=Y[:, 2], thetadot=Y[:, 5], phi=phis),
    )


# --------------------------------------------------------------------------------------------
# §5.2 ball (radius a, mass m, inertia m k²) on a turntable turning at rate Omega about e3.
#   Contact point below the centre; rolling: ċ_h + ω × (−a e3) = Omega e3 × c_h.
#   Newton–Euler: m c̈ = F_agent + F_contact, m k² ω̇ = (−a e3) × F_contact. The external agent's
#   horizontal force makes the centre follow the prescribed path (free=False); free=True drops
#   it (the classical free ball on a turntable).


def ball_on_turntable(
    path,
    T,
    *,
    a,
    Omega,
    k2=None,
    R0=np.eye(3),
    omega_z0=0.0,
    free=False,
    c0=None,
    cd0=None,
    t_eval=None,
):
    """``path(t) -> (2,)`` contact point (= centre) on the table. Returns parts R (N,3,3),
    omega (N,3) spatial angular velocity, c (N,2) centre."""
    k2 = 0.4 * a * a if k2 is None else k2
    m = 1.0  # cancels
    dpath = derivatives(path)

    def rhs(t, s):
        R = s[:9].reshape(3, 3)
        w = s[9:12]
        _c, cd = s[12:14], s[14:16]
        # unknowns: cdd (2), wd (3), Fc (2, horizontal contact force), Fa (2, agent force)
        # torque of the horizontal contact force at −a e3: (a Fy, −a Fx, 0)
        K = np.zeros((9, 9))
        K[0, 0] = m
        K[0, 5] = -1.0
        K[0, 7] = -1.0
        K[1, 1] = m
        K[1, 6] = -1.0
        K[1, 8] = -1.0
        K[2, 2] = m * k2
        K[2, 6] = -a
        K[3, 3] = m * k2
        K[3, 5] = a
        K[4, 4] = m * k2
        # rolling, differentiated: cxdd − a wyd + Omega cyd = 0, cydd + a wxd − Omega cxd = 0
        K[5, 0] = 1.0
        K[5, 3] = -a
        K[6, 1] = 1.0
        K[6, 2] = a
        b = np.zeros(9)
        b[5] = -Omega * cd[1]
        b[6] = Omega * cd[0]
        if free:
            K[7, 7] = K[8, 8] = 1.0  # agent force = 0
        else:
            _, _, pa = dpath(t)
            K[7, 0] = 1.0
            K[8, 1] = 1.0
            b[7] = pa[0]
            b[8] = pa[1]
        sol = np.linalg.solve(K, b)
        dR = hat(w) @ R
        return np.concatenate([dR.reshape(-1), sol[2:5], cd, sol[:2]])

    if free:
        c0 = np.asarray(c0, float)
        cd0 = np.asarray(cd0, float)
    else:
        p, pv, _ = dpath(0.0)
        c0, cd0 = np.asarray(p), np.asarray(pv)
    w0 = np.array([(Omega * c0[0] - cd0[1]) / a, (cd0[0] + Omega * c0[1]) / a, omega_z0])
    s0 = np.concatenate([np.asarray(R0, float).reshape(-1), w0, c0, cd0])
    t, Y, nfev = solve(rhs, s0, T, t_eval)
    return Solution(t, Y, nfev, dict(R=Y[:, :9].reshape(-1, 3, 3), omega=Y[:, 9:12], c=Y[:, 12:14]))


# --------------------------------------------------------------------------------------------
# §5.3 small ball (mass m2, radius a) rolling inside a free big ball (mass m1, radius Rb), no
# external forces. The centre of the small ball seen from the big one, r21(t) with |r21| = Rb − a,
# is prescribed: an internal agent force f acts at the small ball's centre and −f on the big ball
# along the same line of action (through the small ball's centre: strong action–reaction, so the
# total angular momentum is conserved and f exerts no torque on the small ball). The rolling
# contact force F (tangential) acts at the contact point P = x1 + Rb n on the small ball, −F on
# the big ball. Newton–Euler of both bodies (isotropic inertias I1, I3):
#   m1 ẍ1 = −f − F,  m2 ẍ2 = f + F,  I1 ω̇1 = r n × (−f) + Rb n × (−F),  I3 ω̇3 = a n × F
#   x2 − x1 = R1 r21(t)                                        (3, holonomic, prescribed)
#   ẋ2 + ω3 × a n = ẋ1 + ω1 × Rb n   (tangential part)         (2, rolling)


def ball_in_ball(
    path,
    T,
    *,
    m1,
    m2,
    Rb,
    a,
    I1=None,
    I3=None,
    L0=(0.0, 0.0, 0.0),
    spin0=0.0,
    R1_0=np.eye(3),
    R3_0=np.eye(3),
    relative_spin=False,
    t_eval=None,
):
    """``path(t) -> (3,)`` is r21, the small ball's centre in the big ball's frame (|r21| =
    Rb − a). ``L0`` is the total angular momentum about the (fixed) centre of mass, ``spin0`` the
    initial spin of the small ball about the contact normal n: ω3·n (or (ω3 − ω1)·n with
    ``relative_spin``). Parts: R1, R3 (N,3,3), w1, w3 (N,3), d = x2 − x1, x1, x2, L (total angular
    momentum), K (kinetic energy), spin (ω3·n), rel_spin ((ω3 − ω1)·n)."""
    I1 = 0.4 * m1 * Rb * Rb if I1 is None else I1
    I3 = 0.4 * m2 * a * a if I3 is None else I3
    r = Rb - a
    dpath = derivatives(path)
    eye = np.eye(3)

    def tangent_basis(n):
        # any orthonormal pair ⟂ n (only used pointwise, no smoothness needed)
        e = np.where(np.abs(n[0]) < 0.9, np.array([1.0, 0, 0]), np.array([0, 1.0, 0]))
        t1 = np.cross(n, e)
        t1 = t1 / np.linalg.norm(t1)
        return np.stack([t1, np.cross(n, t1)], 1)  # (3, 2)

    def unpack(s):
        return (
            s[0:3], s[3:6], s[6:9], s[9:12],
            s[12:21].reshape(3, 3), s[21:30].reshape(3, 3), s[30:33], s[33:36],
        )  # fmt: skip

    def rhs(t, s):
        x1, v1, x2, v2, R1, R3, w1, w3 = unpack(s)
        _, p1, p2 = dpath(t)
        d = x2 - x1
        n = d / np.linalg.norm(d)
        Tb = tangent_basis(n)
        u, acc = R1 @ p1, R1 @ p2
        dd = v2 - v1
        nd = (dd - n * (n @ dd)) / r  # ṅ (|d| = r)
        Hn, Hd = hat(n), hat(d)
        # unknowns z = (a1, a2, w1d, w3d, f, lamF) sizes 3,3,3,3,3,2 -> 17; F = Tb lamF
        Z3, Z32 = np.zeros((3, 3)), np.zeros((3, 2))
        rows = [
            # m1 a1 + f + F = 0
            np.hstack([m1 * eye, Z3, Z3, Z3, eye, Tb]),
            # m2 a2 − f − F = 0
            np.hstack([Z3, m2 * eye, Z3, Z3, -eye, -Tb]),
            # I1 w1d + r n×f + Rb n×F = 0
            np.hstack([Z3, Z3, I1 * eye, Z3, r * Hn, Rb * Hn @ Tb]),
            # I3 w3d − a n×F = 0
            np.hstack([Z3, Z3, Z3, I3 * eye, Z3, -a * Hn @ Tb]),
            # a2 − a1 − w1d × d = w1×(w1×d + u) + w1×u + acc
            np.hstack([-eye, eye, Hd, Z3, Z3, Z32]),
            # Tbᵀ[a2 + a w3d×n + a w3×nd − a1 − Rb w1d×n − Rb w1×nd] = 0
            np.hstack([-Tb.T, Tb.T, Rb * Tb.T @ Hn, -a * Tb.T @ Hn, np.zeros((2, 5))]),
        ]
        K = np.vstack(rows)
        b = np.concatenate(
            [
                np.zeros(12),
                np.cross(w1, np.cross(w1, d) + u) + np.cross(w1, u) + acc,
                Tb.T @ (Rb * np.cross(w1, nd) - a * np.cross(w3, nd)),
            ]
        )
        z = np.linalg.solve(K, b)
        return np.concatenate(
            [v1, z[0:3], v2, z[3:6], (hat(w1) @ R1).reshape(-1), (hat(w3) @ R3).reshape(-1),
             z[6:9], z[9:12]]
        )  # fmt: skip

    # consistent initial velocities (12 unknowns v1, v2, w1, w3; 12 linear equations)
    R1_0 = np.asarray(R1_0, float)
    c, p1, _ = (np.asarray(v) for v in dpath(0.0))
    d0 = R1_0 @ c
    n0 = d0 / np.linalg.norm(d0)
    x1_0, x2_0 = -m2 / (m1 + m2) * d0, m1 / (m1 + m2) * d0
    Tb0 = _np_tangent_basis(n0)
    H = np_hat
    e, Z = np.eye(3), np.zeros((3, 3))
    spin_row = np.concatenate([np.zeros(6), -n0 if relative_spin else np.zeros(3), n0])
    A = np.vstack(
        [
            np.hstack([-e, e, H(d0), Z]),  # v2 − v1 − w1×d = R1 ṙ21
            np.hstack([-Tb0.T, Tb0.T, Rb * Tb0.T @ H(n0), -a * Tb0.T @ H(n0)]),  # rolling
            np.hstack([m1 * e, m2 * e, Z, Z]),  # linear momentum 0
            np.hstack([m1 * H(x1_0), m2 * H(x2_0), I1 * e, I3 * e]),  # angular momentum L0
            spin_row[None, :],
        ]
    )
    bb = np.concatenate([R1_0 @ p1, np.zeros(2), np.zeros(3), np.asarray(L0, float), [spin0]])
    v = np.linalg.solve(A, bb)
    s0 = np.concatenate(
        [x1_0, v[0:3], x2_0, v[3:6], R1_0.reshape(-1), np.asarray(R3_0, float).reshape(-1),
         v[6:9], v[9:12]]
    )  # fmt: skip
    t, Y, nfev = solve(rhs, s0, T, t_eval)
    x1, v1, x2, v2 = Y[:, 0:3], Y[:, 3:6], Y[:, 6:9], Y[:, 9:12]
    w1, w3 = Y[:, 30:33], Y[:, 33:36]
    d = x2 - x1
    n = d / np.linalg.norm(d, axis=1, keepdims=True)
    L = m1 * np.cross(x1, v1) + m2 * np.cross(x2, v2) + I1 * w1 + I3 * w3
    K = 0.5 * (
        m1 * (v1**2).sum(1) + m2 * (v2**2).sum(1) + I1 * (w1**2).sum(1) + I3 * (w3**2).sum(1)
    )
    return Solution(
        t, Y, nfev,
        dict(R1=Y[:, 12:21].reshape(-1, 3, 3), R3=Y[:, 21:30].reshape(-1, 3, 3), w1=w1, w3=w3,
             d=d, x1=x1, x2=x2, L=L, K=K, spin=(w3 * n).sum(1), rel_spin=((w3 - w1) * n).sum(1),
             I1=I1, I3=I3),
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# free rigid body: Π̇ = Π × I⁻¹Π (body), Ṙ = R hat(I⁻¹Π); spatial μ = R Π is constant


def free_rigid_body(inertia, Pi0, T, R0=np.eye(3), t_eval=None):
    """Parts R (N,3,3), Pi (N,3) body angular momentum."""
    Iinv = 1.0 / np.asarray(inertia, float)

    def rhs(t, s):
        R, Pi = s[:9].reshape(3, 3), s[9:]
        w = Iinv * Pi
        return np.concatenate([(R @ hat(w)).reshape(-1), np.cross(Pi, w)])

    s0 = np.concatenate([np.asarray(R0, float).reshape(-1), np.asarray(Pi0, float)])
    t, Y, nfev = solve(rhs, s0, T, t_eval)
    return Solution(t, Y, nfev, dict(R=Y[:, :9].reshape(-1, 3, 3), Pi=Y[:, 9:]))


# --------------------------------------------------------------------------------------------
# Chain of n rigid bodies in space connected by ball joints, relative rotations prescribed:
#   R_{i+1} = R_i Q_i(t). Body i: mass m_i, body inertia diag(J_i) about its centre of mass;
#   joint i sits at p_i (body i frame, from its CM) = q_i (body i+1 frame, from its CM).
#   Newton–Euler with joint forces f_i (on body i+1, −f_i on body i) and joint torques τ_i:
#     m_i ẍ_i = Σ forces,  I_s ω̇_i + ω_i × I_s ω_i = Σ torques (I_s = R J Rᵀ)
#   plus an optional external torque on body 0: gamma (L × B(t)) with L the total angular
#   momentum (§5.4: magnetic moment M = gamma L in a field B).


def body_chain(
    rel_rot,
    T,
    *,
    masses,
    inertias,
    p,
    q,
    L0=(0.0, 0.0, 0.0),
    R0=np.eye(3),
    gamma=0.0,
    field=None,
    t_eval=None,
):
    """``rel_rot(t) -> (n−1, 3, 3)`` relative rotations Q_i(t). ``inertias`` (n,3) principal
    moments, ``p``, ``q`` (n−1, 3). ``field(t) -> (3,)`` magnetic field B. Parts: R (N,n,3,3),
    w (N,n,3), x (N,n,3), L (N,3) total angular momentum about the origin."""
    masses = np.asarray(masses, float)
    inertias = np.asarray(inertias, float)
    p, q = np.asarray(p, float), np.asarray(q, float)
    n = len(masses)
    dQ = derivatives(rel_rot)
    fieldf = (
        (lambda t: np.asarray(field(t), float)) if field is not None else (lambda t: np.zeros(3))
    )
    N = 6 * n + 6 * (n - 1)

    def unhat(S):
        return np.array([S[2, 1], S[0, 2], S[1, 0]])

    def unpack(s):
        x = s[: 3 * n].reshape(n, 3)
        v = s[3 * n : 6 * n].reshape(n, 3)
        R = s[6 * n : 15 * n].reshape(n, 3, 3)
        w = s[15 * n : 18 * n].reshape(n, 3)
        return x, v, R, w

    def ang_mom(x, v, R, w):
        Is = np.einsum("nij,nj,nkj->nik", R, inertias, R)
        return (masses[:, None] * np.cross(x, v)).sum(0) + np.einsum("nij,nj->i", Is, w)

    def rhs(t, s):
        x, v, R, w = unpack(s)
        Q, Qd, Qdd = dQ(t)
        Is = np.einsum("nij,nj,nkj->nik", R, inertias, R)
        K = np.zeros((N, N))
        b = np.zeros(N)
        # unknown layout: a (3n), wd (3n), f (3(n-1)), tau (3(n-1))
        ia, iw = 0, 3 * n
        jf, jt = 6 * n, 6 * n + 3 * (n - 1)
        e = np.eye(3)
        tau_ext = gamma * np.cross(ang_mom(x, v, R, w), fieldf(t))
        for i in range(n):
            K[3 * i : 3 * i + 3, ia + 3 * i : ia + 3 * i + 3] = masses[i] * e
            K[iw + 3 * i : iw + 3 * i + 3, iw + 3 * i : iw + 3 * i + 3] = Is[i]
            gyro = -np.cross(w[i], Is[i] @ w[i])
            b[iw + 3 * i : iw + 3 * i + 3] = gyro + (tau_ext if i == 0 else 0.0)
        for j in range(n - 1):
            rp = R[j] @ p[j]  # body j CM -> joint
            rq = R[j + 1] @ q[j]  # body j+1 CM -> joint
            F = slice(jf + 3 * j, jf + 3 * j + 3)
            Tq = slice(jt + 3 * j, jt + 3 * j + 3)
            # forces: +f on j+1, −f on j  (rows: −(m a) + Σ f = 0 -> m a − Σ f = 0)
            K[3 * (j + 1) : 3 * (j + 1) + 3, F] = -e
            K[3 * j : 3 * j + 3, F] = e
            # torques: on j+1: rq × f + tau; on j: rp × (−f) − tau
            K[iw + 3 * (j + 1) : iw + 3 * (j + 1) + 3, F] = -hat(rq)
            K[iw + 3 * (j + 1) : iw + 3 * (j + 1) + 3, Tq] = -e
            K[iw + 3 * j : iw + 3 * j + 3, F] = hat(rp)
            K[iw + 3 * j : iw + 3 * j + 3, Tq] = e
            # joint: x_j + rp = x_{j+1} + rq, differentiated twice
            r0 = 6 * n + 6 * j
            K[r0 : r0 + 3, ia + 3 * j : ia + 3 * j + 3] = e
            K[r0 : r0 + 3, ia + 3 * (j + 1) : ia + 3 * (j + 1) + 3] = -e
            K[r0 : r0 + 3, iw + 3 * j : iw + 3 * j + 3] = -hat(rp)
            K[r0 : r0 + 3, iw + 3 * (j + 1) : iw + 3 * (j + 1) + 3] = hat(rq)
            b[r0 : r0 + 3] = -np.cross(w[j], np.cross(w[j], rp)) + np.cross(
                w[j + 1], np.cross(w[j + 1], rq)
            )
            # relative rotation: ω_{j+1} = ω_j + R_j ν_j with ν_j = unhat(Q̇ Qᵀ) (spatial in j)
            #   ω̇_{j+1} − ω̇_j = ω_j × R_j ν_j + R_j ν̇_j
            nu = unhat(Qd[j] @ Q[j].T)
            nud = unhat(Qdd[j] @ Q[j].T + Qd[j] @ Qd[j].T)
            K[r0 + 3 : r0 + 6, iw + 3 * j : iw + 3 * j + 3] = -e
            K[r0 + 3 : r0 + 6, iw + 3 * (j + 1) : iw + 3 * (j + 1) + 3] = e
            b[r0 + 3 : r0 + 6] = np.cross(w[j], R[j] @ nu) + R[j] @ nud
        z = np.linalg.solve(K, b)
        dR = np.einsum("nij,njk->nik", hat(w), R)
        return np.concatenate([v.reshape(-1), z[: 3 * n], dR.reshape(-1), z[3 * n : 6 * n]])

    # initial configuration and consistent velocities: ω_0 solves total L = L0, linear momentum 0
    Q0, Qd0, _ = (np.asarray(a) for a in dQ(0.0))
    R = [np.asarray(R0, float)]
    for j in range(n - 1):
        R.append(R[j] @ Q0[j])
    xs = [np.zeros(3)]
    for j in range(n - 1):
        xs.append(xs[j] + R[j] @ p[j] - R[j + 1] @ q[j])
    xs = np.array(xs)
    xs -= (masses[:, None] * xs).sum(0) / masses.sum()
    Rn = np.array(R)

    def velocities(w0):
        ws, vs = [w0], [np.zeros(3)]
        for j in range(n - 1):
            S = Qd0[j] @ Q0[j].T
            nu = np.array([S[2, 1], S[0, 2], S[1, 0]])
            ws.append(ws[j] + Rn[j] @ nu)
            vs.append(vs[j] + np.cross(ws[j], Rn[j] @ p[j]) - np.cross(ws[j + 1], Rn[j + 1] @ q[j]))
        vs = np.array(vs)
        vs -= (masses[:, None] * vs).sum(0) / masses.sum()
        return np.array(ws), vs

    def Lof(w0):
        ws, vs = velocities(w0)
        Is = np.einsum("nij,nj,nkj->nik", Rn, inertias, Rn)
        return (masses[:, None] * np.cross(xs, vs)).sum(0) + np.einsum("nij,nj->i", Is, ws)

    # L is affine in w0: solve
    base = Lof(np.zeros(3))
    M = np.stack([Lof(np.eye(3)[k]) - base for k in range(3)], 1)
    w0 = np.linalg.solve(M, np.asarray(L0, float) - base)
    ws, vs = velocities(w0)
    s0 = np.concatenate([xs.reshape(-1), vs.reshape(-1), Rn.reshape(-1), ws.reshape(-1)])
    t, Y, nfev = solve(rhs, s0, T, t_eval)
    x = Y[:, : 3 * n].reshape(-1, n, 3)
    v = Y[:, 3 * n : 6 * n].reshape(-1, n, 3)
    Rs = Y[:, 6 * n : 15 * n].reshape(-1, n, 3, 3)
    w = Y[:, 15 * n : 18 * n].reshape(-1, n, 3)
    Is = np.einsum("tnij,nj,tnkj->tnik", Rs, inertias, Rs)
    L = (masses[None, :, None] * np.cross(x, v)).sum(1) + np.einsum("tnij,tnj->ti", Is, w)
    return Solution(t, Y, nfev, dict(R=Rs, w=w, x=x, L=L))


# --------------------------------------------------------------------------------------------
# planar chain of n links joined by pin joints, free-floating, relative angles prescribed
#   link i: mass m_i, inertia J_i, joint j at +l_j^+ (link j frame, along its axis) and at
#   −l_{j+1}^- on link j+1; θ_{j+1} − θ_j = psi_j(t).


def planar_chain(psi, T, *, masses, inertias, lp, lm, theta0=0.0, L0=0.0, t_eval=None, derivs=None):
    """``psi(t) -> (n−1,)`` joint angles; joint j is at distance ``lp[j]`` ahead of link j's CM
    and ``lm[j]`` behind link j+1's CM (``derivs``: optional ``t -> (ψ, ψ̇, ψ̈)``, NumPy, to
    reuse one compiled derivative for many loops). Parts: theta (N,n), x (N,n,2), L (N,) total
    angular momentum about the origin."""
    masses = np.asarray(masses, float)
    inertias = np.asarray(inertias, float)
    n = len(masses)
    dpsi = derivatives(psi) if derivs is None else derivs
    N = 3 * n + 3 * (n - 1)

    def e(th):
        return np.array([np.cos(th), np.sin(th)])

    def eperp(th):
        return np.array([-np.sin(th), np.cos(th)])

    def rhs(t, s):
        th = s[:n]
        s[n : 3 * n].reshape(n, 2)
        thd = s[3 * n : 4 * n]
        xd = s[4 * n : 6 * n].reshape(n, 2)
        _ps, _psd, psdd = dpsi(t)
        # unknowns: xdd (2n), thdd (n), f (2(n-1)) on link j+1 at joint, tau (n-1)
        K = np.zeros((N, N))
        b = np.zeros(N)
        ix, it, jf, jt = 0, 2 * n, 3 * n, 3 * n + 2 * (n - 1)
        for i in range(n):
            K[2 * i, ix + 2 * i] = masses[i]
            K[2 * i + 1, ix + 2 * i + 1] = masses[i]
            K[2 * n + i, it + i] = inertias[i]
        for j in range(n - 1):
            rp = lp[j] * e(th[j])  # CM_j -> joint
            rq = -lm[j] * e(th[j + 1])  # CM_{j+1} -> joint
            cross2 = lambda r: np.array([-r[1], r[0]])  # r × f = cross2(r)·f  # noqa: E731
            for k in range(2):
                K[2 * (j + 1) + k, jf + 2 * j + k] = -1.0
                K[2 * j + k, jf + 2 * j + k] = 1.0
            K[2 * n + j + 1, jf + 2 * j : jf + 2 * j + 2] = -cross2(rq)
            K[2 * n + j, jf + 2 * j : jf + 2 * j + 2] = cross2(rp)
            K[2 * n + j + 1, jt + j] = -1.0
            K[2 * n + j, jt + j] = 1.0
            # joint: x_j + rp = x_{j+1} + rq  -> ẍ_j + θ̈_j ⊥rp − θ̇_j² rp = ...
            r0 = 3 * n + 3 * j
            for k in range(2):
                K[r0 + k, ix + 2 * j + k] = 1.0
                K[r0 + k, ix + 2 * (j + 1) + k] = -1.0
            K[r0 : r0 + 2, it + j] = lp[j] * eperp(th[j])
            K[r0 : r0 + 2, it + j + 1] = lm[j] * eperp(th[j + 1])
            b[r0 : r0 + 2] = thd[j] ** 2 * lp[j] * e(th[j]) + thd[j + 1] ** 2 * lm[j] * e(th[j + 1])
            K[r0 + 2, it + j + 1] = 1.0
            K[r0 + 2, it + j] = -1.0
            b[r0 + 2] = psdd[j]
        z = np.linalg.solve(K, b)
        return np.concatenate([thd, xd.reshape(-1), z[it : it + n], z[: 2 * n]])

    ps0, psd0, _ = (np.asarray(a) for a in dpsi(0.0))
    th = np.concatenate([[theta0], theta0 + np.cumsum(ps0)])
    E = lambda a: np.array([np.cos(a), np.sin(a)])  # noqa: E731
    xs = [np.zeros(2)]
    for j in range(n - 1):
        xs.append(xs[j] + lp[j] * E(th[j]) + lm[j] * E(th[j + 1]))
    xs = np.array(xs)
    xs -= (masses[:, None] * xs).sum(0) / masses.sum()

    def state_vel(w0):
        thd = np.concatenate([[w0], w0 + np.cumsum(psd0)])
        vs = [np.zeros(2)]
        P = lambda a: np.array([-np.sin(a), np.cos(a)])  # noqa: E731
        for j in range(n - 1):
            vs.append(vs[j] + lp[j] * thd[j] * P(th[j]) + lm[j] * thd[j + 1] * P(th[j + 1]))
        vs = np.array(vs)
        vs -= (masses[:, None] * vs).sum(0) / masses.sum()
        return thd, vs

    def Lof(w0):
        thd, vs = state_vel(w0)
        return float(
            (inertias * thd).sum() + (masses * (xs[:, 0] * vs[:, 1] - xs[:, 1] * vs[:, 0])).sum()
        )

    w0 = (L0 - Lof(0.0)) / (Lof(1.0) - Lof(0.0))
    thd, vs = state_vel(w0)
    s0 = np.concatenate([th, xs.reshape(-1), thd, vs.reshape(-1)])
    t, Y, nfev = solve(rhs, s0, T, t_eval)
    theta = Y[:, :n]
    x = Y[:, n : 3 * n].reshape(-1, n, 2)
    thd_ = Y[:, 3 * n : 4 * n]
    xd = Y[:, 4 * n :].reshape(-1, n, 2)
    L = (inertias * thd_).sum(1) + (masses * (x[..., 0] * xd[..., 1] - x[..., 1] * xd[..., 0])).sum(
        1
    )
    return Solution(t, Y, nfev, dict(theta=theta, x=x, L=L))


# --------------------------------------------------------------------------------------------
# Rigid core pinned at its centre (the origin) carrying point masses whose positions in the
# core frame r_i(t) are prescribed (a self-deforming body). Newton for each mass with the
# constraint force f_i, Euler for the core with the reactions −f_i at x_i = R r_i (the pin
# force has no moment about the pin), an optional external torque gamma L × B(t) on the core:
#   m_i ẍ_i = f_i,   I_s ω̇ + ω × I_s ω = −Σ x_i × f_i + tau_ext,
#   ẍ_i = ω̇ × x_i + ω × (ω × x_i) + 2 ω × R ṙ_i + R r̈_i.


def core_with_masses(
    shape,
    T,
    *,
    inertia,
    masses,
    L0=(0.0, 0.0, 0.0),
    R0=np.eye(3),
    gamma=0.0,
    field=None,
    t_eval=None,
    derivs=None,
):
    """``shape(t) -> (p, 3)`` mass positions in the core frame; ``inertia`` (3,) principal
    moments of the core (``derivs``: optional ``t -> (r, ṙ, r̈)``, NumPy). Parts: R (N,3,3),
    w (N,3), L (N,3) angular momentum about the pin."""
    Ib = np.asarray(inertia, float)
    m = np.asarray(masses, float)
    p = len(m)
    dshape = derivatives(shape) if derivs is None else derivs
    fieldf = (
        (lambda t: np.asarray(field(t), float)) if field is not None else (lambda t: np.zeros(3))
    )

    def momentum(R, w, t):
        r, rd, _ = dshape(t)
        x = r @ R.T
        v = np.cross(w, x) + rd @ R.T
        return R @ (Ib * (R.T @ w)) + (m[:, None] * np.cross(x, v)).sum(0)

    def rhs(t, s):
        R, w = s[:9].reshape(3, 3), s[9:]
        r, rd, rdd = dshape(t)
        x, u, acc = r @ R.T, rd @ R.T, rdd @ R.T
        Is = R @ np.diag(Ib) @ R.T
        # eliminate f_i = m_i ẍ_i: (Is + Σ m_i [x_i]ᵀ[x_i]) ω̇ = rhs
        A = Is.copy()
        b = -np.cross(w, Is @ w) + gamma * np.cross(momentum(R, w, t), fieldf(t))
        for i in range(p):
            H = hat(x[i])
            A += m[i] * H.T @ H  # −m x × (ω̇ × x) = m [x]ᵀ[x] ω̇ moved to the left
            known = np.cross(w, np.cross(w, x[i])) + 2 * np.cross(w, u[i]) + acc[i]
            b -= m[i] * np.cross(x[i], known)
        wd = np.linalg.solve(A, b)
        return np.concatenate([(hat(w) @ R).reshape(-1), wd])

    R0 = np.asarray(R0, float)
    base = momentum(R0, np.zeros(3), 0.0)
    M = np.stack([momentum(R0, e, 0.0) - base for e in np.eye(3)], 1)
    w0 = np.linalg.solve(M, np.asarray(L0, float) - base)
    t, Y, nfev = solve(rhs, np.concatenate([R0.reshape(-1), w0]), T, t_eval)
    R, w = Y[:, :9].reshape(-1, 3, 3), Y[:, 9:]
    L = np.array([momentum(Ri, wi, ti) for Ri, wi, ti in zip(R, w, t)])
    return Solution(t, Y, nfev, dict(R=R, w=w, L=L))

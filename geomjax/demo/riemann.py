"""Demo section: Riemannian geometry and holonomic constraints (geomjax.riemann)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ..riemann import (
    Embedding,
    LevelSetConstraint,
    MovingEmbedding,
    RigidSystem,
    christoffel,
    gaussian_curvature,
    geodesic_acceleration,
)
from ._report import Check

GRAV = 9.81


def _torus(R=2.0, r=0.6):
    return lambda q: jnp.diag(jnp.stack([(R + r * jnp.cos(q[1])) ** 2, r**2 + 0 * q[0]]))


def _sphere(a):
    return lambda q: (
        a * jnp.stack([jnp.sin(q[0]) * jnp.cos(q[1]), jnp.sin(q[0]) * jnp.sin(q[1]), jnp.cos(q[0])])
    )


def _hoop(a, w):
    return lambda t, q: (
        a
        * jnp.stack(
            [jnp.sin(q[0]) * jnp.cos(w * t), jnp.sin(q[0]) * jnp.sin(w * t), -jnp.cos(q[0])]
        )
    )


@jax.jit
def _geometry(qs, vs):
    metric = _torus()
    G = jax.vmap(lambda q: christoffel(metric, q))(qs)
    K = jax.vmap(lambda q: gaussian_curvature(metric, q))(qs)
    a = jax.vmap(lambda q, v: geodesic_acceleration(metric, q, v))(qs, vs)
    return G, K, a


@jax.jit
def _sphere_states(q, qd, a, m):
    F = jnp.array([0.0, 0.0, -m * GRAV])
    E = Embedding(_sphere(a), m)
    L = LevelSetConstraint(lambda x: x @ x - a**2, m)

    def one(q, qd):
        x, v = E.position(q), E.velocity(q, qd)
        return E.reaction_force(q, qd, F), L.reaction_force(x, v, F), x, v

    return jax.vmap(one)(q, qd)


@jax.jit
def _hoop_motion(a, w, th0):
    E = MovingEmbedding(_hoop(a, w))
    F = jnp.array([0.0, 0.0, -GRAV])

    def f(y, t):
        return jnp.stack([y[1], E.acceleration(t, y[:1], y[1:], F)[0]])

    dt, n = 0.002, 2500

    def step(carry, _):
        y, t = carry
        k1 = f(y, t)
        k2 = f(y + 0.5 * dt * k1, t + 0.5 * dt)
        k3 = f(y + 0.5 * dt * k2, t + 0.5 * dt)
        k4 = f(y + dt * k3, t + dt)
        y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return (y, t + dt), (y, t + dt)

    _, (ys, ts) = jax.lax.scan(step, (jnp.array([th0, 0.0]), 0.0), None, length=n)
    R = jax.vmap(lambda y, t: E.reaction_force(t, y[:1], y[1:], F))(ys, ts)
    eq = jnp.stack(
        [E.acceleration(0.0, jnp.array([jnp.arccos(GRAV / (w**2 * a))]), jnp.zeros(1), F)[0]]
    )
    return ys, ts, R, eq


@jax.jit
def _rigid(masses, ref, x, v, F):
    b = RigidSystem(masses, ref, characteristic=3)
    return b.reaction_force(x, v, F), b.split_velocity(x, v), b.kinetic_energy_split(x, v)


def run(out: Path, fast: bool) -> list[Check]:
    checks = []
    rng = np.random.default_rng(0)

    # 1. Christoffel symbols and curvature of a torus against the closed forms
    qs = rng.uniform(-3, 3, (64, 2))
    vs = rng.standard_normal((64, 2))
    G, K, acc = _geometry(qs, vs)
    w = 2.0 + 0.6 * np.cos(qs[:, 1])
    err_G = max(
        np.abs(np.asarray(G[:, 0, 0, 1]) + 0.6 * np.sin(qs[:, 1]) / w).max(),
        np.abs(np.asarray(G[:, 1, 0, 0]) - w * np.sin(qs[:, 1]) / 0.6).max(),
    )
    checks.append(Check("torus: Christoffel symbols vs closed form", err_G, 1e-12, "hand-derived"))
    K_ref = np.cos(qs[:, 1]) / (0.6 * w)
    checks.append(
        Check(
            "torus: Gaussian curvature vs cos v/(r(R + r cos v))",
            np.abs(K - K_ref).max(),
            1e-11,
            "closed form",
        )
    )
    acc_t = -np.einsum("bkij,bi,bj->bk", np.asarray(G), vs, vs)
    checks.append(
        Check(
            "geodesic acceleration: contraction vs full tensor",
            np.abs(acc - acc_t).max(),
            1e-12,
            "Γ(v,v)",
        )
    )

    # 2. particle on a sphere: reaction force, two routes and the closed form
    a, m = 1.5, 0.8
    q = np.stack([rng.uniform(0.2, 2.9, 200), rng.uniform(-3, 3, 200)], -1)
    qd = rng.standard_normal((200, 2))
    R_emb, R_mult, x, v = (np.asarray(t) for t in _sphere_states(q, qd, a, m))
    n = x / a
    R_ref = -m * (np.sum(v * v, -1) / a - GRAV * n[:, 2])[:, None] * n
    checks.append(
        Check(
            "sphere: reaction = −m(|v|²/a + g·n) n",
            np.abs(R_emb - R_ref).max(),
            1e-11,
            "closed form",
        )
    )
    checks.append(
        Check(
            "sphere: embedding vs Lagrange multipliers",
            np.abs(R_emb - R_mult).max(),
            1e-11,
            "level set",
        )
    )
    checks.append(
        Check(
            "sphere: reaction power R·v",
            np.abs(np.sum(R_emb * v, -1)).max(),
            1e-11,
            "ideal constraint",
        )
    )

    # 3. bead on a rotating hoop (moving constraint, Mangiarotti, *Mechanical systems and holonomic constraints*)
    ah, wh = 0.5, 6.0
    ys, ts, Rh, eq = _hoop_motion(ah, wh, 0.3)
    ys, ts, Rh = np.asarray(ys), np.asarray(ts), np.asarray(Rh)
    checks.append(
        Check(
            "hoop: θ̈ = 0 at cos θ* = g/(ω²a)", abs(float(eq[0])), 1e-12, "equilibrium, closed form"
        )
    )
    jac = (
        0.5 * ah**2 * ys[:, 1] ** 2
        - 0.5 * wh**2 * ah**2 * np.sin(ys[:, 0]) ** 2
        - GRAV * ah * np.cos(ys[:, 0])
    )
    checks.append(
        Check(
            "hoop: Jacobi integral drift (RK4, dt = 2 ms)", float(np.ptp(jac)), 1e-6, "conservation"
        )
    )

    # 4. a rigid tetrahedron: reactions with zero total force and torque
    masses = np.array([1.0, 2.0, 3.0, 1.5])
    ref = np.array([[0, 0, 0], [1.0, 0, 0], [0, 1.2, 0], [0.3, 0.2, 0.9]])
    Rot = np.asarray(
        jax.scipy.linalg.expm(jnp.array([[0, -0.3, 0.2], [0.3, 0, -0.5], [-0.2, 0.5, 0]]))
    )
    xb = ref @ Rot.T + 1.0
    com = masses @ xb / masses.sum()
    Om = np.array([0.7, -1.2, 2.0])
    vb = np.array([0.1, 0.0, -0.2]) + np.cross(Om, xb - com)
    Fb = rng.standard_normal((4, 3))
    Rb, split, Ks = _rigid(masses, ref, xb, vb, Fb)
    Rb = np.asarray(Rb)
    tot = max(np.abs(Rb.sum(0)).max(), np.abs(np.cross(xb - com, Rb).sum(0)).max())
    checks.append(
        Check("rigid body: total force and torque of the reactions", tot, 1e-12, "R_rig = 0")
    )
    checks.append(
        Check(
            "rigid body: angular velocity from particle velocities",
            np.abs(split.angular_velocity - Om).max(),
            1e-12,
            "Thm 4.22",
        )
    )
    K = 0.5 * np.sum(masses[:, None] * vb**2)
    checks.append(Check("rigid body: K = K_cen + K_rot", abs(float(sum(Ks)) - K), 1e-12, "§4.5"))

    _plot(out, ys, ts, Rh, ah, wh, q, R_emb, x)
    return checks


def _plot(out: Path, ys, ts, Rh, a, w, q, R, x) -> None:
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(13, 4.2))
    ax = fig.add_subplot(1, 3, 1, projection="3d")
    sel = slice(0, 60)
    ax.quiver(*x[sel].T, *(0.08 * R[sel]).T, color="tab:red", linewidth=0.8)
    ax.scatter(*x[sel].T, s=4, color="k")
    ax.set_title("reaction forces on a sphere\n(random states, gravity −z)")
    ax.set_box_aspect((1, 1, 1))
    ax2 = fig.add_subplot(1, 3, 2)
    ax2.plot(ts, ys[:, 0], label="θ(t)")
    ax2.axhline(
        np.arccos(9.81 / (w**2 * a)), color="k", ls="--", lw=0.8, label="θ*: cos θ* = g/(ω²a)"
    )
    ax2.set_xlabel("t [s]")
    ax2.set_title("bead on a hoop spinning at ω = 6 rad/s")
    ax2.legend()
    ax3 = fig.add_subplot(1, 3, 3)
    ph = np.stack([-np.sin(w * ts), np.cos(w * ts), 0 * ts], -1)
    ax3.plot(ts, np.sum(Rh * ph, -1), label="R·e_φ (out of the hoop's plane)")
    ax3.plot(ts, Rh[:, 2], label="R_z")
    ax3.set_xlabel("t [s]")
    ax3.set_title("reaction of the moving hoop (per unit mass)")
    ax3.legend()
    fig.tight_layout()
    fig.savefig(out / "riemann_constraints.png", dpi=120)
    plt.close(fig)

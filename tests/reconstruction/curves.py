"""Base curves shared by the reconstruction tests (jittable functions of t, JAX)."""

import jax.numpy as jnp


def time_law(eps, nu):
    """s(t) = ν t + ε sin(ν t): same loop, different speed profile (ε = 0: uniform)."""
    return lambda t: nu * t + eps * jnp.sin(nu * t)


def plane_circle(rho, nu, centre=(0.0, 0.0), eps=0.0):
    law = time_law(eps, nu)

    def c(t):
        s = law(t)
        return jnp.stack([centre[0] + rho * jnp.cos(s), centre[1] + rho * jnp.sin(s)])

    return c


def plane_loop(rho, nu, eps=0.0, wobble=0.3):
    """A non-circular closed loop through (ρ(1 + w), 0) at t = 0 (period 2π/ν)."""
    law = time_law(eps, nu)

    def c(t):
        s = law(t)
        rr = rho * (1 + wobble * jnp.cos(2 * s))
        return jnp.stack([rr * jnp.cos(s) + 0.1, rr * jnp.sin(s) - 0.2])

    return c


def latitude(r, alpha, nu):
    def c(t):
        return r * jnp.stack(
            [
                jnp.sin(alpha) * jnp.cos(nu * t),
                jnp.sin(alpha) * jnp.sin(nu * t),
                jnp.cos(alpha) * jnp.ones_like(t),
            ]
        )

    return c


def sphere_loop(r, alpha, nu, eps=0.0, wobble=0.3):
    """A non-latitude closed loop on the sphere of radius r (period 2π/ν)."""
    law = time_law(eps, nu)

    def c(t):
        s = law(t)
        col = alpha + wobble * jnp.sin(s)
        return r * jnp.stack([jnp.sin(col) * jnp.cos(s), jnp.sin(col) * jnp.sin(s), jnp.cos(col)])

    return c


def so3_exp(w):
    """Rodrigues (only for building test curves of relative rotations)."""
    th2 = w @ w
    th = jnp.sqrt(jnp.where(th2 > 0, th2, 1.0))
    K = jnp.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])
    a = jnp.where(th2 > 0, jnp.sin(th) / th, 1.0)
    b = jnp.where(th2 > 0, (1 - jnp.cos(th)) / th2, 0.5)
    return jnp.eye(3) + a * K + b * K @ K


def joint_loop(eps=0.0, amp=1.0):
    """Relative rotations of a three-body chain: a closed loop in SO(3)² (period 2π)."""
    law = time_law(eps, 1.0)

    def q(t):
        s = law(t)
        w1 = amp * jnp.array([0.5 * jnp.sin(s), 0.3 * jnp.cos(s) - 0.3, 0.2])
        w2 = amp * jnp.array([0.1, 0.4 * jnp.sin(s), 0.3 * (1 - jnp.cos(s))])
        return jnp.stack([so3_exp(w1), so3_exp(w2)])

    return q


def planar_joint_loop(eps=0.0, amp=0.8):
    """Joint angles of a three-link planar chain: a closed loop in the (ψ₁, ψ₂) plane."""
    law = time_law(eps, 1.0)

    def psi(t):
        s = law(t)
        return jnp.stack([0.5 + amp * jnp.sin(s), -0.3 + amp * (1 - jnp.cos(s))])

    return psi

"""Potentials as callable :class:`equinox.Module` s (their parameters are differentiable leaves).

Conventions: ``L = K − V``; the force is ``-dV``, left-trivialized.  Gravity points along
``-e3`` in the spatial frame.

A potential may define ``potential_force(g)``: its left-trivialized force ``−dV(g)`` in closed
form, ``<dV(g), eta> = d/dε V(g exp(ε eta))``.  The systems of geomjax then use it instead of
the autodiff route (Euclidean gradient, then :meth:`geomjax.LieGroup.left_gradient`): the same
values to round-off, fewer operations per step, and a cheaper derivative in reverse mode (the
integrators differentiate it once per step).  ``HeavyTop``, ``GravityGradient`` and
``SE3Gravity`` define it; it must be the force of ``__call__`` (the tests check each against
the autodiff route and central differences).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

__all__ = ["GravityGradient", "HeavyTop", "SE3Gravity", "UniformGravity"]


def _arr(x):
    return jnp.asarray(x, dtype=jnp.result_type(float))


class HeavyTop(eqx.Module):
    """Heavy top / 3D pendulum about a fixed pivot (Lee, Leok & McClamroch 2005):

        V(R) = m g <e3, R rho>

    where ``rho`` ``(3,)`` is the centre of mass in the body frame, measured from the pivot.
    Its torque is ``M = -dV = m g (R^T e3) × rho`` — the potential is invariant under rotations about
    the vertical, so the spatial angular momentum component ``<e3, R Pi>`` is conserved.
    """

    mass: jax.Array
    gravity: jax.Array
    rho: jax.Array

    def __init__(self, mass, gravity, rho):
        self.mass, self.gravity, self.rho = _arr(mass), _arr(gravity), _arr(rho)

    def __call__(self, R):
        return self.mass * self.gravity * jnp.dot(R[2, :], self.rho)

    def potential_force(self, R):
        """``M = m g (R^T e3) × rho`` (the third row of ``R`` is ``R^T e3``)."""
        return self.mass * self.gravity * jnp.cross(R[2, :], self.rho)


class GravityGradient(eqx.Module):
    """Gravity-gradient potential of a body with inertia ``J`` on a circular orbit of rate ``n``
    about a centre in direction ``e`` (spatial, fixed):  ``V(R) = (3 n²/2) e^T R J R^T e``
    (constant terms dropped)."""

    n: jax.Array
    inertia: jax.Array
    direction: jax.Array

    def __init__(self, n, inertia, direction=(0.0, 0.0, 1.0)):
        J = _arr(inertia)
        self.inertia = jnp.diag(J) if J.shape == (3,) else J
        self.n = _arr(n)
        d = _arr(direction)
        self.direction = d / jnp.linalg.norm(d)

    def __call__(self, R):
        b = R.T @ self.direction
        return 1.5 * self.n**2 * b @ self.inertia @ b

    def potential_force(self, R):
        """The gravity-gradient torque ``M = 3 n² b × (J_s b)``, ``b = R^T e``, with ``J_s`` the
        symmetric part of ``J`` (``V`` reads only that)."""
        b = R.T @ self.direction
        Js = 0.5 * (self.inertia + self.inertia.T)
        return 3.0 * self.n**2 * jnp.cross(b, Js @ b)


class UniformGravity(eqx.Module):
    """``V(x) = m g x_3`` for a point or centre of mass at ``x`` (a helper for SE(3) bodies)."""

    mass: jax.Array
    gravity: jax.Array

    def __init__(self, mass, gravity):
        self.mass, self.gravity = _arr(mass), _arr(gravity)

    def __call__(self, x):
        return self.mass * self.gravity * x[..., 2]


class SE3Gravity(eqx.Module):
    """Gravity on an SE(3) body whose centre of mass sits at ``com`` in the body frame:
    ``V(g) = m g <e3, x + R c>`` — couples rotation and translation when ``c ≠ 0``."""

    mass: jax.Array
    gravity: jax.Array
    com: jax.Array

    def __init__(self, mass, gravity, com=(0.0, 0.0, 0.0)):
        self.mass, self.gravity, self.com = _arr(mass), _arr(gravity), _arr(com)

    def __call__(self, g):
        return self.mass * self.gravity * (g[2, 3] + jnp.dot(g[2, :3], self.com))

    def potential_force(self, g):
        """The body wrench ``(torque, force) = m g ((R^T e3) × c, −R^T e3)`` (se(3)* ordered
        (ω, v); ``R^T e3`` is the third row of ``R``)."""
        up = g[2, :3]
        mg = self.mass * self.gravity
        return jnp.concatenate([mg * jnp.cross(up, self.com), -mg * up])

"""Abelian groups: the vector space R^n and the torus T^n = (S^1)^n.

Elements are stored as vectors ``(..., n)`` (not as matrices): R^n under addition, T^n as angles
wrapped to (−π, π].  Both are abelian, so ``Ad = I``, ``ad = 0`` and every Jacobian is the
identity; they let the generic Euler–Poincaré machinery treat shape variables and cyclic
coordinates with the same code as SO(3) or SE(3).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from ._math import as_float
from .base import LieGroup, check_shape

__all__ = ["EuclideanSpace", "Rn", "Tn", "Torus"]


def _wrap(a):
    """Wrap angles to (−π, π] (derivative 1 almost everywhere)."""
    return a - 2.0 * jnp.pi * jnp.floor((a + jnp.pi) / (2.0 * jnp.pi))


class _Abelian(LieGroup):
    n: int = eqx.field(static=True)

    def __check_init__(self):
        if not (isinstance(self.n, int) and self.n >= 1):
            raise ValueError(
                f"{type(self).__name__}: argument 'n' must be a positive int, got {self.n!r}"
            )

    @property
    def dim(self) -> int:
        return self.n

    @property
    def element_shape(self) -> tuple[int, ...]:
        return (self.n,)

    def _c(self, x, name, where):
        return check_shape(x, (self.n,), name, f"{self.name}.{where}")

    def identity(self, batch_shape=(), dtype=None):
        dtype = dtype or jnp.result_type(float)
        return jnp.zeros(tuple(batch_shape) + (self.n,), dtype)

    def inverse(self, g):
        return self._wrap(-self._c(g, "g", "inverse"))

    def compose(self, g, h):
        return self._wrap(self._c(g, "g", "compose") + self._c(h, "h", "compose"))

    def act(self, g, p):
        return self._wrap(self._c(g, "g", "act") + self._c(p, "p", "act"))

    def exp(self, xi):
        return self._wrap(self._c(xi, "xi", "exp"))

    def log(self, g):
        return self._wrap(self._c(g, "g", "log"))

    def cay(self, xi):
        return self.exp(xi)

    def cay_inv(self, g):
        return self.log(g)

    def _eye(self, x):
        return jnp.broadcast_to(jnp.eye(self.n, dtype=x.dtype), x.shape[:-1] + (self.n, self.n))

    def Ad(self, g):
        return self._eye(self._c(g, "g", "Ad"))

    def ad(self, xi):
        return jnp.zeros_like(self._eye(self._c(xi, "xi", "ad")))

    def coad(self, xi, mu):
        xi = self._c(xi, "xi", "coad")
        return jnp.zeros_like(as_float(mu) + xi)

    def jac_left(self, xi):
        return self._eye(self._c(xi, "xi", "jac_left"))

    def jac_left_inv(self, xi):
        return self.jac_left(xi)

    def cay_jac_left(self, xi):
        return self._eye(self._c(xi, "xi", "cay_jac_left"))

    def cay_jac_left_inv(self, xi):
        return self._eye(self._c(xi, "xi", "cay_jac_left_inv"))

    def defect(self, g):
        g = self._c(g, "g", "defect")
        # finite values are always on the group; NaN/inf propagate as a non-finite defect
        return jnp.max(jnp.where(jnp.isfinite(g), 0.0, jnp.inf), -1)

    def random(self, key, shape=(), dtype=None):
        dtype = dtype or jnp.result_type(float)
        return self._wrap(jax.random.normal(key, tuple(shape) + (self.n,), dtype=dtype))


class EuclideanSpace(_Abelian):
    """R^n under addition.  ``hat``/``to_matrix`` use the homogeneous ``(n+1)×(n+1)`` form."""

    @property
    def name(self) -> str:
        return f"R{self.n}"

    @property
    def matrix_dim(self) -> int:
        return self.n + 1

    def _wrap(self, x):
        return x

    def hat(self, xi):
        xi = self._c(xi, "xi", "hat")
        top = jnp.concatenate(
            [jnp.zeros(xi.shape[:-1] + (self.n, self.n), xi.dtype), xi[..., :, None]], -1
        )
        return jnp.concatenate([top, jnp.zeros_like(top[..., :1, :])], -2)

    def vee(self, X):
        X = check_shape(X, (self.n + 1, self.n + 1), "X", f"{self.name}.vee")
        return X[..., : self.n, self.n]

    def to_matrix(self, g):
        g = self._c(g, "g", "to_matrix")
        top = jnp.concatenate([self._eye(g), g[..., :, None]], -1)
        bottom = jnp.concatenate(
            [
                jnp.zeros(g.shape[:-1] + (1, self.n), g.dtype),
                jnp.ones(g.shape[:-1] + (1, 1), g.dtype),
            ],
            -1,
        )
        return jnp.concatenate([top, bottom], -2)

    def project(self, g):
        return self._c(g, "g", "project")


class Torus(_Abelian):
    """The n-torus of angles in (−π, π]; ``to_matrix`` is block-diagonal 2×2 rotations."""

    @property
    def name(self) -> str:
        return f"T{self.n}"

    @property
    def matrix_dim(self) -> int:
        return 2 * self.n

    def _wrap(self, x):
        return _wrap(x)

    def _blockdiag(self, c, s):
        n = self.n
        M = jnp.zeros(c.shape[:-1] + (2 * n, 2 * n), c.dtype)
        idx = jnp.arange(n)
        M = M.at[..., 2 * idx, 2 * idx].set(c)
        M = M.at[..., 2 * idx + 1, 2 * idx + 1].set(c)
        M = M.at[..., 2 * idx, 2 * idx + 1].set(-s)
        M = M.at[..., 2 * idx + 1, 2 * idx].set(s)
        return M

    def hat(self, xi):
        xi = self._c(xi, "xi", "hat")
        return self._blockdiag(jnp.zeros_like(xi), xi)

    def vee(self, X):
        X = check_shape(X, (2 * self.n, 2 * self.n), "X", f"{self.name}.vee")
        idx = jnp.arange(self.n)
        return 0.5 * (X[..., 2 * idx + 1, 2 * idx] - X[..., 2 * idx, 2 * idx + 1])

    def to_matrix(self, g):
        g = self._c(g, "g", "to_matrix")
        return self._blockdiag(jnp.cos(g), jnp.sin(g))

    def project(self, g):
        return _wrap(self._c(g, "g", "project"))


def Rn(n: int) -> EuclideanSpace:
    """The group R^n."""
    return EuclideanSpace(n)


def Tn(n: int) -> Torus:
    """The n-torus."""
    return Torus(n)

"""Direct powers ``G^k = G × … × G`` of a group (e.g. SO(3) × SO(3) for two rigid bodies).

Elements are stacked: ``(..., k, *G.element_shape)``; algebra coordinates are concatenated,
``(..., k·dim)``; ``Ad``, ``ad`` and the Jacobians (also the Cayley map's) are block diagonal;
``hat`` gives the block-diagonal ``(k·n) × (k·n)`` matrix.  The left-trivialized gradient of a
function of the stacked factors is the factors' left gradients of its partial Euclidean
gradients, concatenated (``left_gradient``), so an :class:`~geomjax.EulerPoincareSystem` on
``G^k`` may carry a potential coupling the factors.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp

from .base import LieGroup, as_float, check_shape

__all__ = ["PowerGroup"]


def _blockdiag(A, k):
    """``(..., k, d, d)`` → ``(..., k·d, k·d)``."""
    d = A.shape[-1]
    out = jnp.einsum("...kij,kl->...kilj", A, jnp.eye(k, dtype=A.dtype))
    return out.reshape(*A.shape[:-3], k * d, k * d)


def _blocks(X, k, d):
    """``(..., k·d, k·d)`` → the diagonal blocks ``(..., k, d, d)``."""
    Xr = X.reshape(*X.shape[:-2], k, d, k, d)
    return jnp.stack([Xr[..., i, :, i, :] for i in range(k)], axis=-3)


class PowerGroup(LieGroup):
    """``base^k``: the direct product of ``k`` copies of ``base`` (any geomjax group)."""

    base: LieGroup
    k: int = eqx.field(static=True)

    def __check_init__(self):
        if not isinstance(self.base, LieGroup) or not (isinstance(self.k, int) and self.k >= 1):
            raise ValueError("PowerGroup: arguments must be a LieGroup and an int k >= 1")

    @property
    def name(self) -> str:
        return f"{self.base.name}^{self.k}"

    @property
    def dim(self) -> int:
        return self.k * self.base.dim

    @property
    def matrix_dim(self) -> int:
        return self.k * self.base.matrix_dim

    @property
    def element_shape(self) -> tuple[int, ...]:
        return (self.k, *self.base.element_shape)

    def _split(self, xi):
        xi = as_float(xi)
        return xi.reshape(*xi.shape[:-1], self.k, self.base.dim)

    def _join(self, x):
        return x.reshape(*x.shape[:-2], self.k * self.base.dim)

    def identity(self, batch_shape=(), dtype=None):
        e = self.base.identity((*tuple(batch_shape), self.k), dtype)
        return e

    def compose(self, g, h):
        return self.base.compose(as_float(g), as_float(h))

    def inverse(self, g):
        return self.base.inverse(as_float(g))

    def act(self, g, p):
        """Componentwise action on ``(..., k, *point)``."""
        return self.base.act(as_float(g), as_float(p))

    def hat(self, xi):
        return _blockdiag(self.base.hat(self._split(xi)), self.k)

    def vee(self, X):
        n = self.base.matrix_dim
        return self._join(self.base.vee(_blocks(as_float(X), self.k, n)))

    def exp(self, xi):
        return self.base.exp(self._split(xi))

    def log(self, g):
        return self._join(self.base.log(as_float(g)))

    def Ad(self, g):
        return _blockdiag(self.base.Ad(as_float(g)), self.k)

    def ad(self, xi):
        return _blockdiag(self.base.ad(self._split(xi)), self.k)

    def exp_coAd_increment(self, xi, mu):
        return self._join(self.base.exp_coAd_increment(self._split(xi), self._split(mu)))

    def cay(self, xi):
        return self.base.cay(self._split(xi))

    def cay_inv(self, g):
        return self._join(self.base.cay_inv(as_float(g)))

    def cay_jac_left(self, xi):
        return _blockdiag(self.base.cay_jac_left(self._split(xi)), self.k)

    def cay_jac_left_inv(self, xi):
        return _blockdiag(self.base.cay_jac_left_inv(self._split(xi)), self.k)

    def cay_coAd_increment(self, xi, mu):
        return self._join(self.base.cay_coAd_increment(self._split(xi), self._split(mu)))

    def jac_left(self, xi):
        return _blockdiag(self.base.jac_left(self._split(xi)), self.k)

    def jac_left_inv(self, xi):
        return _blockdiag(self.base.jac_left_inv(self._split(xi)), self.k)

    def defect(self, g):
        return jnp.max(self.base.defect(as_float(g)), axis=-1)

    def project(self, g):
        return self.base.project(as_float(g))

    def renormalize(self, g):
        return self.base.renormalize(as_float(g))

    def random(self, key, shape=(), dtype=None):
        return self.base.random(key, (*tuple(shape), self.k), dtype)

    def to_matrix(self, g):
        return _blockdiag(self.base.to_matrix(as_float(g)), self.k)

    def to_matrix_gradient(self, g, euclidean_grad):
        """The factors' gradients on the diagonal blocks of :meth:`to_matrix` (a function of the
        stored factors does not depend on the off-diagonal blocks)."""
        g, grad = self._check_pair(g, euclidean_grad, "to_matrix_gradient")
        return _blockdiag(self.base.to_matrix_gradient(g, grad), self.k)

    def left_gradient(self, g, euclidean_grad):
        """Factor by factor: ``<dU(g), (eta_1, …, eta_k)> = Σ_i d/dε U(…, g_i exp(ε eta_i), …)``,
        so the left-trivialized gradient is the factors' left gradients of the partial
        Euclidean gradients ``∇_{g_i} U``, concatenated as the algebra coordinates are
        ``(..., k·dim)``.  (:meth:`LieGroup.left_gradient` would pair the block-diagonal
        ``to_matrix(g)`` with the stacked ``(..., k, *element_shape)`` gradient.)"""
        g, grad = self._check_pair(g, euclidean_grad, "left_gradient")
        return self._join(self.base.left_gradient(g, grad))

    def _check_pair(self, g, euclidean_grad, where):
        where = f"{self.name}.{where}"
        g = check_shape(g, self.element_shape, "g", where)
        return g, check_shape(euclidean_grad, self.element_shape, "euclidean_grad", where)

"""Unconstrained parameterizations of physical parameters (what an optimizer moves).

* ``"spd"``: a symmetric positive definite ``(n, n)`` matrix ``M = L Lᵀ`` with ``L`` lower
  triangular and ``diag(L) = exp(d)`` (the log-Cholesky parameterization: Pinheiro & Bates,
  *Unconstrained parametrizations for variance-covariance matrices*, Statistics and Computing,
  1996, §2.2).  Every real vector gives an SPD matrix, and the map is one-to-one.
* ``"positive"``: ``x = exp(θ)`` elementwise (a mass, a damping coefficient).
* ``"free"``: ``x = θ`` (a first moment, an actuator map).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

__all__ = ["KINDS", "from_unconstrained", "to_unconstrained"]

KINDS = ("spd", "positive", "free")


def _tril_indices(n):
    return np.tril_indices(n)


def to_unconstrained(x, kind: str):
    """The unconstrained vector ``θ`` of a value ``x`` of the given kind (inverse of
    :func:`from_unconstrained`)."""
    x = jnp.asarray(x)
    if kind == "spd":
        n = x.shape[-1]
        L = jnp.linalg.cholesky(0.5 * (x + x.T))
        L = L.at[jnp.diag_indices(n)].set(jnp.log(jnp.diag(L)))
        return L[_tril_indices(n)]
    if kind == "positive":
        return jnp.log(x).reshape(-1)
    if kind == "free":
        return x.reshape(-1)
    raise ValueError(f"parameterization kind must be one of {KINDS}, got {kind!r}")


def from_unconstrained(theta, kind: str, shape: tuple[int, ...]):
    """The value of shape ``shape`` that ``θ`` parameterizes (``M = L Lᵀ``, ``exp θ`` or ``θ``)."""
    if kind == "spd":
        n = shape[-1]
        L = jnp.zeros((n, n), theta.dtype).at[_tril_indices(n)].set(theta)
        d = jnp.diag_indices(n)
        L = L.at[d].set(jnp.exp(L[d]))
        return L @ L.T
    if kind == "positive":
        return jnp.exp(theta).reshape(shape)
    if kind == "free":
        return theta.reshape(shape)
    raise ValueError(f"parameterization kind must be one of {KINDS}, got {kind!r}")


def size(kind: str, shape: tuple[int, ...]) -> int:
    """Number of unconstrained coordinates of a value of this kind and shape."""
    if kind == "spd":
        n = shape[-1]
        return n * (n + 1) // 2
    return int(np.prod(shape, dtype=int))

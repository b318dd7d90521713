"""The constant (flat) ambient metric of a constrained system: Euclidean, a scalar mass, per-axis
masses or a full mass matrix.  Internal; used by the constraint classes."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from ..lie._math import as_float
from ._checks import check_positive, check_spd, cho_solve


class AmbientMetric(eqx.Module):
    """``M`` acting on ambient vectors ``(N,)``: ``kind`` is static, ``value`` the data.

    * ``None`` → Euclidean (``M = 1``, unit mass);
    * a positive scalar ``m`` → ``M = m·1`` (one particle of mass m);
    * a positive ``(N,)`` vector → ``M = diag(m)`` (e.g. ``jnp.repeat(masses, 3)`` for n particles);
    * an ``(N, N)`` symmetric positive definite matrix.
    """

    value: jax.Array | None
    kind: str = eqx.field(static=True)

    def __init__(self, metric, where: str):
        if metric is None:
            self.value, self.kind = None, "identity"
            return
        M = as_float(metric)
        if M.ndim == 0:
            self.kind = "scalar"
            self.value = check_positive(M, "ambient_metric", where)
        elif M.ndim == 1:
            self.kind = "diagonal"
            self.value = check_positive(M, "ambient_metric", where)
        elif M.ndim == 2:
            self.kind = "full"
            self.value = check_spd(M, "ambient_metric", where)
        else:
            raise ValueError(
                f"{where}: argument 'ambient_metric' must be None, a positive scalar, an (N,) "
                f"vector of masses or an (N, N) SPD matrix, got shape {tuple(M.shape)}"
            )

    def check_dim(self, N: int, where: str) -> None:
        if self.kind == "diagonal" and self.value.shape != (N,):
            raise ValueError(
                f"{where}: argument 'ambient_metric' has shape {tuple(self.value.shape)} but the "
                f"ambient space has dimension {N}"
            )
        if self.kind == "full" and self.value.shape != (N, N):
            raise ValueError(
                f"{where}: argument 'ambient_metric' has shape {tuple(self.value.shape)} but the "
                f"ambient space has dimension {N}"
            )

    def apply(self, X):
        """``M X`` for ``X`` of shape ``(N,)`` or ``(N, k)``."""
        if self.kind == "identity":
            return X
        M = self.value.astype(X.dtype)  # follow the caller's precision (float32 runs)
        if self.kind == "scalar":
            return M * X
        if self.kind == "diagonal":
            return M.reshape((-1,) + (1,) * (X.ndim - 1)) * X
        return M @ X

    def solve(self, A):
        """``M⁻¹ A``."""
        if self.kind == "identity":
            return A
        M = self.value.astype(A.dtype)
        if self.kind == "scalar":
            return A / M
        if self.kind == "diagonal":
            return A / M.reshape((-1,) + (1,) * (A.ndim - 1))
        return cho_solve(M, A)  # validated (SPD) at construction

    def matrix(self, N: int, dtype=None):
        dtype = dtype or jnp.result_type(float)
        if self.kind == "identity":
            return jnp.eye(N, dtype=dtype)
        if self.kind == "scalar":
            return self.value * jnp.eye(N, dtype=dtype)
        if self.kind == "diagonal":
            return jnp.diag(self.value)
        return self.value

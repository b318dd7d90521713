"""Input validation shared by the Riemannian / constraint layer.

Shapes are static, so shape errors are raised as ``ValueError`` (naming the argument and what was
expected) in eager mode and under ``jit`` alike.  Value checks (finiteness, positivity, positive
definiteness) raise ``ValueError`` eagerly; when the value is traced (inside ``jit``, ``vmap``,
``grad``) they are compiled with :func:`equinox.error_if`, which raises ``EquinoxRuntimeError``
when the program runs.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..lie._math import as_float

__all__ = [
    "check_finite",
    "check_matrix",
    "check_positive",
    "check_spd",
    "check_vector",
    "is_traced",
    "spd_solve",
]


def is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _fail(x, bad, msg: str):
    """Raise ``ValueError(msg)`` eagerly, or attach an ``equinox.error_if`` when traced."""
    if is_traced(bad) or is_traced(x):
        return eqx.error_if(x, bad, msg)
    if bool(bad):
        raise ValueError(msg)
    return x


def check_vector(x, name: str, where: str, n: int | None = None):
    """``x`` as a float vector of shape ``(n,)`` (any length if ``n`` is None)."""
    x = as_float(x)
    if x.ndim != 1 or (n is not None and x.shape[0] != n):
        want = f"({n},)" if n is not None else "(n,)"
        raise ValueError(f"{where}: argument '{name}' must have shape {want}, got {tuple(x.shape)}")
    return check_finite(x, name, where)


def check_matrix(x, name: str, where: str, shape: tuple[int, int]):
    x = as_float(x)
    if tuple(x.shape) != tuple(shape):
        raise ValueError(
            f"{where}: argument '{name}' must have shape {shape}, got {tuple(x.shape)}"
        )
    return check_finite(x, name, where)


def check_finite(x, name: str, where: str):
    x = as_float(x)
    bad = ~jnp.all(jnp.isfinite(x))
    return _fail(x, bad, f"{where}: argument '{name}' must be finite (it contains NaN or inf)")


def check_positive(x, name: str, where: str):
    """Finite and strictly positive (every entry)."""
    x = check_finite(x, name, where)
    bad = ~jnp.all(x > 0)
    return _fail(x, bad, f"{where}: argument '{name}' must be strictly positive, got {_show(x)}")


def _spd_defect(M):
    """Relative asymmetry and whether the Cholesky factor exists (is finite)."""
    scale = jnp.max(jnp.abs(M)) + jnp.finfo(M.dtype).tiny
    asym = jnp.max(jnp.abs(M - M.T)) / scale
    L = jnp.linalg.cholesky(0.5 * (M + M.T))
    return asym, L


def check_spd(M, name: str, where: str, tol: float | None = None):
    """Finite, symmetric (to ``tol``, relative) and positive definite (Cholesky exists)."""
    M = check_finite(M, name, where)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(
            f"{where}: argument '{name}' must be a square matrix, got shape {tuple(M.shape)}"
        )
    tol = float(np.sqrt(np.finfo(M.dtype).eps)) if tol is None else tol
    asym, L = _spd_defect(M)
    bad = (asym > tol) | ~jnp.all(jnp.isfinite(L))
    return _fail(
        M, bad, f"{where}: argument '{name}' must be symmetric positive definite, got {_show(M)}"
    )


def spd_solve(G, b, name: str, where: str):
    """Solve ``G x = b`` for a symmetric positive definite ``G`` (Cholesky).

    ``b`` may be a vector ``(n,)`` or a matrix ``(n, k)``.  A ``G`` that is not positive definite
    (a degenerate metric, a rank-deficient constraint Jacobian) raises a ``ValueError`` naming
    ``name`` eagerly and an ``EquinoxRuntimeError`` under ``jit``.
    """
    L = jnp.linalg.cholesky(G)
    bad = ~jnp.all(jnp.isfinite(L))
    msg = (
        f"{where}: '{name}' is not positive definite at this point (degenerate metric or "
        "dependent constraints)"
    )
    L = _fail(L, bad, msg)
    return jax.scipy.linalg.cho_solve((L, True), b)


def _show(x) -> str:
    if is_traced(x):
        return f"a traced array of shape {tuple(x.shape)}"
    a = np.asarray(x)
    return np.array2string(a, precision=4, threshold=12) if a.size <= 12 else f"shape {a.shape}"

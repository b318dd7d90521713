"""Small dense linear solves written out elementwise.

The Newton matrices of the variational integrators and the saddle-point systems of nonholonomic
mechanics are tiny (3×3 … 8×8).  Under ``jax.vmap`` a LAPACK call per batch member dominates the
cost of a step; unrolled elimination is plain elementwise code that XLA fuses and vectorizes across
the batch.  Shared by :mod:`geomjax.integrators` and :mod:`geomjax.systems`.
"""

from __future__ import annotations

import jax.numpy as jnp

__all__ = ["small_solve", "solve3", "solve3_scalars"]


def solve3(A, b):
    """Closed-form solve of a 3×3 system by the adjugate (Cramer's rule); batched over leading
    axes.  Used on hot paths where a LAPACK call per step would dominate."""
    a00, a01, a02 = A[..., 0, 0], A[..., 0, 1], A[..., 0, 2]
    a10, a11, a12 = A[..., 1, 0], A[..., 1, 1], A[..., 1, 2]
    a20, a21, a22 = A[..., 2, 0], A[..., 2, 1], A[..., 2, 2]
    x = solve3_scalars(
        (a00, a01, a02, a10, a11, a12, a20, a21, a22), (b[..., 0], b[..., 1], b[..., 2])
    )
    return jnp.stack(x, -1)


def solve3_scalars(a, b):
    """Cramer's rule on scalars: ``a`` the 9 entries (row-major), ``b`` 3 entries; returns 3."""
    a00, a01, a02, a10, a11, a12, a20, a21, a22 = a
    c00 = a11 * a22 - a12 * a21
    c01 = a02 * a21 - a01 * a22
    c02 = a01 * a12 - a02 * a11
    c10 = a12 * a20 - a10 * a22
    c11 = a00 * a22 - a02 * a20
    c12 = a02 * a10 - a00 * a12
    c20 = a10 * a21 - a11 * a20
    c21 = a01 * a20 - a00 * a21
    c22 = a00 * a11 - a01 * a10
    inv_det = 1.0 / (a00 * c00 + a01 * c10 + a02 * c20)
    b0, b1, b2 = b
    return (
        (c00 * b0 + c01 * b1 + c02 * b2) * inv_det,
        (c10 * b0 + c11 * b1 + c12 * b2) * inv_det,
        (c20 * b0 + c21 * b1 + c22 * b2) * inv_det,
    )


def small_solve(A, b):
    """Solve ``A x = b`` for a small ``n×n`` system (n ≤ 8) by unrolled Gaussian elimination
    without pivoting; larger systems go to ``jnp.linalg.solve``.

    Used for the Newton matrices of the variational integrators, which are O(h) perturbations of
    the SPD inertia (elimination without pivoting is stable there).  Unrolled elementwise code
    vectorizes across a vmapped batch, where a LAPACK call per batch member would dominate."""
    n = b.shape[-1]
    if n == 3:
        return solve3(A, b)
    if n > 8:
        return jnp.linalg.solve(A, b)
    A = [[A[..., i, j] for j in range(n)] for i in range(n)]
    b = [b[..., i] for i in range(n)]
    for k in range(n):
        inv = 1.0 / A[k][k]
        for i in range(k + 1, n):
            f = A[i][k] * inv
            for j in range(k + 1, n):
                A[i][j] = A[i][j] - f * A[k][j]
            b[i] = b[i] - f * b[k]
    x = [None] * n
    for i in reversed(range(n)):
        acc = b[i]
        for j in range(i + 1, n):
            acc = acc - A[i][j] * x[j]
        x[i] = acc / A[i][i]
    return jnp.stack(x, -1)

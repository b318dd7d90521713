"""Fixed-iteration Newton solves with implicit-function-theorem derivatives.

Variational integrators are implicit: every step solves a small nonlinear system ``r(x; a) = 0``.
We run a *fixed* number of Newton iterations (XLA- and vmap-friendly: no data-dependent loop, every
batch member does the same work) and return the final residual so that the caller can see
whether the solve converged.

Derivatives never go through the iterations.  With ``x*(a)`` the solution, the implicit function
theorem gives ``dx* = -(∂r/∂x)^{-1} (∂r/∂a) da``; :func:`newton_solve` implements exactly this as
a custom JVP (linear in the tangents, hence also transposable for reverse mode).  This is both
cheaper and more accurate than backpropagating through the unrolled iterations.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

__all__ = ["dense_jac_solve", "newton_solve", "solve3"]


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


def dense_jac_solve(residual: Callable) -> Callable:
    """Default ``jac_solve``: forward-mode Jacobian of ``residual`` and a dense linear solve."""

    def jac_solve(x, args, r):
        return small_solve(jax.jacfwd(residual, argnums=0)(x, args), r)

    return jac_solve


def _tree_sub(a, b):
    return jax.tree_util.tree_map(lambda x, y: x - y, a, b)


@eqx.filter_custom_jvp
def _newton(x0, args, *, residual, jac_solve, iters):
    x = x0
    for _ in range(iters):
        x = _tree_sub(x, jac_solve(x, args, residual(x, args)))
    return x, residual(x, args)


@_newton.def_jvp
def _newton_jvp(primals, tangents, *, residual, jac_solve, iters):
    x0, args = primals
    _, t_args = tangents
    x, r = _newton(x0, args, residual=residual, jac_solve=jac_solve, iters=iters)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, (x, r))
    if t_args is None:
        return (x, r), zeros
    # implicit function theorem: J dx + (∂r/∂a) da = 0 at the solution
    _, r_dot = eqx.filter_jvp(lambda a: residual(x, a), (args,), (t_args,))
    x_stop, args_stop = jax.lax.stop_gradient((x, args))
    dx = jax.tree_util.tree_map(jnp.negative, jac_solve(x_stop, args_stop, r_dot))
    return (x, r), (dx, zeros[1])


def newton_solve(residual: Callable, x0, args, *, iters: int, jac_solve: Callable):
    """Solve ``residual(x, args) = 0`` by ``iters`` Newton iterations from ``x0``.

    Arguments:
        residual: ``(x, args) -> r``, ``x`` and ``r`` pytrees of the same structure.
        x0: initial guess (its derivative is irrelevant and ignored).
        args: pytree of parameters; floating-point leaves are differentiated via the implicit
            function theorem.
        iters: fixed iteration count.
        jac_solve: ``(x, args, r) -> J(x)^{-1} r`` (closed form on hot paths, or
            :func:`dense_jac_solve`).  Must be linear in ``r``: it is reused for the tangents.

    Both callables are static arguments of the custom JVP: pass functions (or hashable
    modules) whose identity is stable across calls.

    Returns:
        ``(x, r)``: the final iterate and the residual there (report it to the caller).
    """
    return _newton(x0, args, residual=residual, jac_solve=jac_solve, iters=iters)

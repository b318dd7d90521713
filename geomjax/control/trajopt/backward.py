"""The backward pass: the Riccati recursion of DDP / iLQR with multiple-shooting gaps, and the
box-constrained QP of its control-limited variant.

Its algebra is small and fixed-size (``n + m ≲ 20``) and runs once per node inside a
``lax.scan``, where XLA:CPU runs every operation as a kernel of its own: the cost is the number of
operations, not the flops.  So the ``m × m`` factorizations and solves are unrolled
(:func:`geomjax._linalg.small_cholesky`, no LAPACK call per node), the quadratic model of a node is
two products with the stacked Jacobian ``[A B]``, and the box QP stops once its active set has
settled (a ``while`` with the iteration cap, the same iterates as running all of them)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..._linalg import small_cho_solve, small_cholesky
from .linearize import dynamics_curvature
from .problem import tree_index

__all__ = ["box_qp"]


def _cholesky(H):
    return small_cholesky(H)


def _cho_solve(L, b):
    return small_cho_solve(L, b)


def box_qp(H, g, lower, upper, x0, iters: int = 20, line_steps: int = 12):
    """``min ½ xᵀHx + gᵀx`` subject to ``lower ≤ x ≤ upper`` by projected Newton (Tassa, Mansard &
    Todorov 2014, Algorithm 1): the active set is the clamped coordinates whose gradient points
    out of the box, a Newton step on the free block, and a projected Armijo line search.

    Arguments: ``H`` ``(m, m)`` SPD on the free block, ``g``, ``lower``, ``upper``, ``x0`` ``(m,)``
    (the warm start); at most ``iters`` iterations (a ``while`` that stops once a step no longer
    moves the iterate or the free gradient is at round-off; jittable, vmappable).

    Returns ``(x, free, chol, ok)``: the minimizer, the free mask ``(m,)``, the Cholesky factor of
    ``H`` restricted to the free block (identity on the clamped rows, for the feedback gains) and
    whether the factorization succeeded (False when the free block is not positive definite)."""
    m = g.shape[0]
    dtype = H.dtype
    eye = jnp.eye(m, dtype=dtype)
    s = 0.5 ** jnp.arange(line_steps, dtype=dtype)
    small_g = 1e3 * jnp.finfo(dtype).eps * (1 + jnp.max(jnp.abs(g)))

    def active(x):
        grad = g + H @ x
        clamped = ((x <= lower) & (grad > 0)) | ((x >= upper) & (grad < 0))
        return ~clamped, grad

    def factor(free):
        return _cholesky(jnp.where(free[:, None] & free[None, :], H, eye))

    def body(carry):
        i, x, done = carry
        free, grad = active(x)
        L = factor(free)
        # Newton target on the free block with the clamped coordinates held
        rhs = jnp.where(free, -(g + H @ jnp.where(free, 0.0, x)), 0.0)
        dx = jnp.where(free, _cho_solve(L, rhs) - x, 0.0)
        # the projected Armijo search, all step lengths at once: f(x + d) - f(x) for the trial
        # steps d = clip(x + s dx) - x, as (½ H d + grad)·d
        d = jnp.clip(x[None] + s[:, None] * dx[None], lower, upper) - x[None]
        df = jnp.sum(d * (0.5 * d @ H + grad[None]), 1)
        ok = (df <= 0.1 * (d @ grad)) & jnp.isfinite(df)
        j = jnp.argmax(ok)
        moved = jnp.any(ok) & ~done
        x1 = jnp.where(moved, x + d[j], x)
        gfree = jnp.max(jnp.abs(jnp.where(free, grad, 0.0)), initial=0.0)
        return i + 1, x1, done | ~jnp.any(ok) | (gfree <= small_g)

    x = jnp.clip(x0, lower, upper)
    init = (jnp.zeros((), jnp.int32), x, jnp.zeros((), bool))
    _, x, _ = jax.lax.while_loop(lambda c: (c[0] < iters) & ~c[2], body, init)
    free, _ = active(x)
    L = factor(free)
    ok = jnp.all(jnp.isfinite(L))
    return x, free, L, ok


def backward_pass_placeholder(problem, n):
    """Zeros of the structure, shapes and dtypes of :func:`backward_pass`'s ``(out, ok)``: the
    initial carry of a loop whose body runs the backward pass (known without tracing it: an
    ``eval_shape`` of the pass traced it, DDP's curvature terms included, a second time —
    1.7 s of the 40-node attitude DDP solve's ~5 s of tracing, measured on a loaded 2-core CPU)."""
    N, m, dtype = problem.steps, problem.control_dim, problem.dtype
    out = dict(
        K=jnp.zeros((N, m, n), dtype),
        k=jnp.zeros((N, m), dtype),
        Vx=jnp.zeros((N, n), dtype),
        Vxx=jnp.zeros((N, n, n), dtype),
        Quk=jnp.zeros((N,), dtype),
        kQk=jnp.zeros((N,), dtype),
        ok=jnp.zeros((N,), bool),
    )
    return out, jnp.zeros((), bool)


def backward_pass(problem, solver, lin, Vx_N, Vxx_N, gaps_next, xs, us, k_prev, reg):
    """The Riccati recursion with the box QP; returns gains, value derivatives, the expected
    improvement pieces and whether every factorization succeeded."""
    n = Vx_N.shape[0]
    m = problem.control_dim
    eye = jnp.eye(m, dtype=problem.dtype)

    def body(carry, inp):
        Vx, Vxx = carry
        li, f_next, u, kp, x, xn, t = inp
        J = li["J"]  # [A B] (n, n + m)
        Vx_eff = Vx + Vxx @ f_next
        VJ = Vxx @ J
        # the quadratic model [Q_xx Q_xu; Q_ux Q_uu] and [Q_x; Q_u] in two products with [A B]
        Q = li["hess"] + J.T @ VJ
        q = li["grad"] + Vx_eff @ J
        if solver.second_order:
            Q = Q + dynamics_curvature(problem, x, u, xn, t, Vx_eff)
        Qx, Qu = q[:n], q[n:]
        Qxx, Qux = Q[:n, :n], Q[n:, :n]
        Quu = 0.5 * (Q[n:, n:] + Q[n:, n:].T)
        Hr = Quu + reg * eye
        if problem.bounded:
            kff, free, L, ok = box_qp(
                Hr, Qu, problem.lower - u, problem.upper - u, kp, solver.qp_iters
            )
            rhs = jnp.where(free[:, None], Qux, 0.0)
            K = jnp.where(free[:, None], -_cho_solve(L, rhs), 0.0)
        else:
            L = _cholesky(Hr)
            ok = jnp.all(jnp.isfinite(L))
            sol = -_cho_solve(L, jnp.concatenate([Qu[:, None], Qux], 1))
            kff, K = sol[:, 0], sol[:, 1:]
        # V_x = Q_x + Kᵀ(Q_uu k + Q_u) + Q_uxᵀ k,  V_xx = Q_xx + Kᵀ(Q_uu K + Q_ux) + Q_uxᵀ K
        Quu_k = Quu @ kff
        Vx1 = Qx + (Quu_k + Qu) @ K + kff @ Qux
        QuxK = Qux.T @ K
        Vxx1 = Qxx + K.T @ (Quu @ K) + QuxK + QuxK.T
        Vxx1 = 0.5 * (Vxx1 + Vxx1.T)
        out = dict(K=K, k=kff, Vx=Vx1, Vxx=Vxx1, Quk=Qu @ kff, kQk=kff @ Quu_k, ok=ok)
        return (Vx1, Vxx1), out

    inputs = (
        lin,
        gaps_next,
        us,
        k_prev,
        tree_index(xs, slice(None, -1)),
        tree_index(xs, slice(1, None)),
    )
    (_, _), out = jax.lax.scan(body, (Vx_N, Vxx_N), (*inputs, problem.times), reverse=True)
    ok = jnp.all(out["ok"]) & jnp.all(jnp.isfinite(out["Vxx"])) & jnp.all(jnp.isfinite(out["k"]))
    return out, ok

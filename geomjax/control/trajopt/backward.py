"""The backward pass: the Riccati recursion of DDP / iLQR with multiple-shooting gaps, and the
box-constrained QP of its control-limited variant."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .linearize import _dynamics_curvature
from .problem import _index

__all__ = ["box_qp"]


def box_qp(H, g, lower, upper, x0, iters: int = 20, line_steps: int = 12):
    """``min ½ xᵀHx + gᵀx`` subject to ``lower ≤ x ≤ upper`` by projected Newton (Tassa, Mansard &
    Todorov 2014, Algorithm 1): the active set is the clamped coordinates whose gradient points
    out of the box, a Newton step on the free block, and a projected Armijo line search.

    Arguments: ``H`` ``(m, m)`` SPD on the free block, ``g``, ``lower``, ``upper``, ``x0`` ``(m,)``
    (the warm start); a fixed number of iterations (jittable, vmappable).

    Returns ``(x, free, chol, ok)``: the minimizer, the free mask ``(m,)``, the Cholesky factor of
    ``H`` restricted to the free block (identity on the clamped rows, for the feedback gains) and
    whether the factorization succeeded (False when the free block is not positive definite)."""
    m = g.shape[0]
    eye = jnp.eye(m, dtype=H.dtype)

    def f(x):
        return 0.5 * x @ H @ x + g @ x

    def active(x):
        grad = g + H @ x
        clamped = ((x <= lower) & (grad > 0)) | ((x >= upper) & (grad < 0))
        return ~clamped, grad

    def factor(free):
        Hf = jnp.where(free[:, None] & free[None, :], H, eye)
        return jnp.linalg.cholesky(Hf)

    def body(_, carry):
        x, done = carry
        free, grad = active(x)
        L = factor(free)
        # Newton target on the free block with the clamped coordinates held
        rhs = jnp.where(free, -(g + H @ jnp.where(free, 0.0, x)), 0.0)
        y = jax.scipy.linalg.cho_solve((L, True), rhs)
        dx = jnp.where(free, y - x, 0.0)
        f0 = f(x)
        s = 0.5 ** jnp.arange(line_steps, dtype=H.dtype)
        trial = jnp.clip(x[None] + s[:, None] * dx[None], lower, upper)
        ft = jax.vmap(f)(trial)
        ok = ft <= f0 + 0.1 * (trial - x[None]) @ grad
        ok = ok & jnp.isfinite(ft)
        j = jnp.argmax(ok)
        moved = jnp.any(ok) & ~done
        x1 = jnp.where(moved, trial[j], x)
        gfree = jnp.max(jnp.abs(jnp.where(free, grad, 0.0)), initial=0.0)
        small = gfree <= 1e3 * jnp.finfo(H.dtype).eps * (1 + jnp.max(jnp.abs(g)))
        return x1, done | ~jnp.any(ok) | small

    x = jnp.clip(x0, lower, upper)
    x, _ = jax.lax.fori_loop(0, iters, body, (x, jnp.zeros((), bool)))
    free, _ = active(x)
    L = factor(free)
    ok = jnp.all(jnp.isfinite(L))
    return x, free, L, ok


def _backward(problem, solver, lin, Vx_N, Vxx_N, gaps_next, xs, us, k_prev, reg):
    """The Riccati recursion with the box QP; returns gains, value derivatives, the expected
    improvement pieces and whether every factorization succeeded."""
    n = Vx_N.shape[0]
    m = problem.control_dim
    eye = jnp.eye(m, dtype=problem.dtype)

    def body(carry, inp):
        Vx, Vxx = carry
        li, f_next, u, kp, x, xn, t = inp
        A, B = li["A"], li["B"]
        H = li["hess"]
        Vx_eff = Vx + Vxx @ f_next
        Qx = li["lx"] + A.T @ Vx_eff
        Qu = li["lu"] + B.T @ Vx_eff
        Qxx = H[:n, :n] + A.T @ Vxx @ A
        Qux = H[n:, :n] + B.T @ Vxx @ A
        Quu = H[n:, n:] + B.T @ Vxx @ B
        if solver.second_order:
            S = _dynamics_curvature(problem, x, u, xn, t, Vx_eff)
            Qxx = Qxx + S[:n, :n]
            Qux = Qux + S[n:, :n]
            Quu = Quu + S[n:, n:]
        Quu = 0.5 * (Quu + Quu.T)
        Hr = Quu + reg * eye
        if problem.bounded:
            kff, free, L, ok = box_qp(
                Hr, Qu, problem.lower - u, problem.upper - u, kp, solver.qp_iters
            )
            rhs = jnp.where(free[:, None], Qux, 0.0)
            K = jnp.where(free[:, None], -jax.scipy.linalg.cho_solve((L, True), rhs), 0.0)
        else:
            L = jnp.linalg.cholesky(Hr)
            ok = jnp.all(jnp.isfinite(L))
            sol = -jax.scipy.linalg.cho_solve((L, True), jnp.concatenate([Qu[:, None], Qux], 1))
            kff, K = sol[:, 0], sol[:, 1:]
        Vx1 = Qx + K.T @ Quu @ kff + K.T @ Qu + Qux.T @ kff
        Vxx1 = Qxx + K.T @ Quu @ K + K.T @ Qux + Qux.T @ K
        Vxx1 = 0.5 * (Vxx1 + Vxx1.T)
        out = dict(K=K, k=kff, Vx=Vx1, Vxx=Vxx1, Quk=Qu @ kff, kQk=kff @ Quu @ kff, ok=ok)
        return (Vx1, Vxx1), out

    inputs = (lin, gaps_next, us, k_prev, _index(xs, slice(None, -1)), _index(xs, slice(1, None)))
    (_, _), out = jax.lax.scan(body, (Vx_N, Vxx_N), (*inputs, problem.times), reverse=True)
    ok = jnp.all(out["ok"]) & jnp.all(jnp.isfinite(out["Vxx"])) & jnp.all(jnp.isfinite(out["k"]))
    return out, ok

"""The backward pass: the Riccati recursion of DDP / iLQR with multiple-shooting gaps, and the
box-constrained QP of its control-limited variant.

Its algebra is small and fixed-size (``n + m ≲ 20``) and runs once per node inside a
``lax.scan``, where XLA:CPU runs every operation as a kernel of its own: the cost is the number of
operations, not the flops.  So the ``m × m`` factorizations and solves are unrolled
(:func:`geomjax._linalg.small_cholesky`, no LAPACK call per node), the quadratic model of a node is
two products with the stacked Jacobian ``[A B]``, and the box QP stops once its active set has
settled (a ``while`` with the iteration cap, the same iterates as running all of them).

Feedback at a bound.  The forward pass clips ``u = clip(ū + α k + K (x ⊖ x̄))``.  The box QP
releases a control that sits at a bound when its feedforward points into the box (``k_i`` inward),
and crocoddyl's ``SolverBoxDDP`` then gives it a feedback row like any free control.  But the
deviations ``x ⊖ x̄`` of the rollout are themselves ``O(α)``, so ``K_i (x ⊖ x̄)`` and ``α k_i`` shrink
together: when the feedback pushes outward by more than the feedforward pulls in, the control is
clipped back onto its bound at EVERY step length, the rollout leaves the model at first order in
``α``, and the ratio of actual to predicted decrease does not tend to 1 as ``α → 0``.  On the
bounded quadrotor to ``(2, 1, 1.5)`` this was the slow tail: from iteration ~50 to the cap of 1000
the line search rejected every ``α ≥ 2⁻⁹`` (actual/predicted from −1464 at ``α = 1`` to −0.6 at
``α = 2⁻⁹``, four released controls at the upper bound with ``K_i dx > α|k_i|``), the
regularization rose, the next step was tiny, and so on.  (Interior controls pushed over a bound
by the feedback are no such trap: below some ``α`` they stay inside, and the model holds.)  The
fix: the feedback rows of controls at a bound at ``ū`` are zero (they move by ``α k_i`` only,
inward, never clipped), and the other free rows' gains are the model's minimizer with those rows
held.  ``V_x``, ``V_xx`` and the expected improvement are the policy's own for any ``K``, so the
model stays consistent."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from ..._linalg import small_cho_solve, small_cholesky
from .linearize import Linearization, NodeDerivatives
from .problem import tree_index

__all__ = ["BackwardPass", "backward_pass", "box_qp", "gauss_newton_model"]


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


class BackwardPass(eqx.Module):
    """What the backward pass returns (crocoddyl's ``K_``, ``k_``, ``Vx_``, ``Vxx_`` and the
    pieces of ``expectedImprovement``), each with a leading axis ``(steps,)``.

    Fields:
        K: feedback gains ``(steps, m, n)`` (zero rows on the controls clamped by the box QP and
            on those at a bound at ``ū``, see the module docstring).
        k: feedforward ``(steps, m)``, the box QP's minimizer.
        Vx, Vxx: value gradient ``(steps, n)`` and Hessian ``(steps, n, n)`` of nodes
            ``0 … steps − 1`` (the terminal ones are :class:`.linearize.Linearization`'s).
        Quk, kQk: ``Q_u·k`` and ``kᵀQ_uu k`` of each node (the controls' part of the expected
            improvement, :class:`.line_search.ExpectedImprovement`).
        ok: whether every factorization succeeded and the result is finite (a scalar).
    """

    K: jax.Array
    k: jax.Array
    Vx: jax.Array
    Vxx: jax.Array
    Quk: jax.Array
    kQk: jax.Array
    ok: jax.Array

    @classmethod
    def placeholder(cls, problem, n) -> BackwardPass:
        """Zeros of the structure, shapes and dtypes of :func:`backward_pass`'s result: the
        initial carry of a loop whose body runs the backward pass (known without tracing it: an
        ``eval_shape`` of the pass traced it, DDP's curvature terms included, a second time —
        1.7 s of the 40-node attitude DDP solve's ~5 s of tracing, measured on a loaded 2-core
        CPU)."""
        N, m, dtype = problem.steps, problem.control_dim, problem.dtype
        return cls(
            K=jnp.zeros((N, m, n), dtype),
            k=jnp.zeros((N, m), dtype),
            Vx=jnp.zeros((N, n), dtype),
            Vxx=jnp.zeros((N, n, n), dtype),
            Quk=jnp.zeros((N,), dtype),
            kQk=jnp.zeros((N,), dtype),
            ok=jnp.zeros((), bool),
        )


def gauss_newton_model(node: NodeDerivatives, Vx, Vxx):
    """The quadratic model of a node with first-order dynamics: ``Q = [l_xx l_xu; l_ux l_uu] +
    [A B]ᵀ V_xx [A B]`` and ``q = [l_x; l_u] + [A B]ᵀ V_x``, in two products with ``[A B]``
    (``V_x`` the value gradient at the gap, ``V_x + V_xx f̄``)."""
    J = node.J  # [A B] (n, n + m)
    VJ = Vxx @ J
    return node.hess + J.T @ VJ, node.grad + Vx @ J


def backward_pass(problem, solver, lin: Linearization, xs, us, k_prev, reg) -> BackwardPass:
    """The Riccati recursion with the box QP from the linearization ``lin`` (its gaps
    ``lin.nodes.gap``) at the iterate ``(xs, us)``, the box QPs warm-started at ``k_prev``,
    under the regularization ``reg`` of ``Q_uu``; each node's quadratic model is
    ``solver.quadratic_model`` (:class:`~geomjax.control.trajopt.ILQR`'s Gauss–Newton one, or
    :class:`~geomjax.control.trajopt.DDP`'s with the dynamics' curvature)."""
    n = lin.terminal_grad.shape[0]
    m = problem.control_dim
    eye = jnp.eye(m, dtype=problem.dtype)

    def body(carry, inp):
        Vx, Vxx = carry
        node, u, kp, x, xn, t = inp
        Vx_eff = Vx + Vxx @ node.gap
        # the quadratic model [Q_xx Q_xu; Q_ux Q_uu] and [Q_x; Q_u]
        Q, q = solver.quadratic_model(problem, node, t, x, u, xn, Vx_eff, Vxx)
        Qx, Qu = q[:n], q[n:]
        Qxx, Qux = Q[:n, :n], Q[n:, :n]
        Quu = 0.5 * (Q[n:, n:] + Q[n:, n:].T)
        Hr = Quu + reg * eye
        if problem.bounded:
            kff, free, L, ok = box_qp(
                Hr, Qu, problem.lower - u, problem.upper - u, kp, solver.qp_iters
            )
            # feedback only on the controls free in the QP AND strictly inside the box at ū
            # (module docstring, "feedback at a bound"): a control at a bound that the QP
            # releases moves by its feedforward alone, so that the clipped rollout follows the
            # model to first order in α.  K is the minimizer of the model with those rows held:
            # the free-and-inside block of Q_uu + reg I factorized on its own.
            fb = free & (u > problem.lower) & (u < problem.upper)
            Lfb = _cholesky(jnp.where(fb[:, None] & fb[None, :], Hr, eye))
            rhs = jnp.where(fb[:, None], Qux, 0.0)
            K = jnp.where(fb[:, None], -_cho_solve(Lfb, rhs), 0.0)
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
        out = BackwardPass(K=K, k=kff, Vx=Vx1, Vxx=Vxx1, Quk=Qu @ kff, kQk=kff @ Quu_k, ok=ok)
        return (Vx1, Vxx1), out

    inputs = (
        lin.nodes,
        us,
        k_prev,
        tree_index(xs, slice(None, -1)),
        tree_index(xs, slice(1, None)),
        problem.times,
    )
    carry = (lin.terminal_grad, lin.terminal_hess)
    _, out = jax.lax.scan(body, carry, inputs, reverse=True)
    ok = jnp.all(out.ok) & jnp.all(jnp.isfinite(out.Vxx)) & jnp.all(jnp.isfinite(out.k))
    return eqx.tree_at(lambda o: o.ok, out, ok)

"""Linearization of every node in the chart: the gap and Jacobians of the dynamics, the cost
derivatives (Gauss–Newton for residual costs), the augmented-Lagrangian terms, and DDP's
second-order dynamics term."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .problem import ResidualCost, tree_index

__all__ = ["Linearization", "NodeDerivatives", "dynamics_curvature", "linearize_nodes"]


class NodeDerivatives(eqx.Module):
    """The derivatives of the running nodes in the chart at the iterate (crocoddyl's action
    data after ``calcDiff``), with a leading axis ``(steps,)`` (one node's slice in the backward
    pass's ``scan``); ``z = (δ, w)`` ``(n + m,)`` is the chart's deviation of the state and the
    control, ``F(z) = f(x̄_k ⊕ δ, ū_k + w) ⊖ x̄_{k+1}``.

    Fields:
        gap: ``F(0)`` ``(n,)``, the multiple-shooting defect into node ``k + 1`` (zero after a
            rollout).
        J: ``[A B] = ∂F/∂z`` at 0 ``(n, n + m)``, the change of chart included.
        grad: ``[l_x; l_u]`` ``(n + m,)`` of ``dt·l`` and of the augmented-Lagrangian terms.
        hess: ``[l_xx l_xu; l_ux l_uu]`` ``(n + m, n + m)`` (Gauss–Newton for residual costs and
            the augmented-Lagrangian terms).
    """

    gap: jax.Array
    J: jax.Array
    grad: jax.Array
    hess: jax.Array


class Linearization(eqx.Module):
    """The linearization of a whole iterate: the running nodes (:class:`NodeDerivatives`,
    ``(steps, ...)``) and the terminal cost's gradient ``Φ_x`` ``(n,)`` and Hessian ``Φ_xx``
    ``(n, n)`` in the chart (``V_x``, ``V_xx`` at the last node)."""

    nodes: NodeDerivatives
    terminal_grad: jax.Array
    terminal_hess: jax.Array


def linearize_nodes(problem, xs, us, duals) -> Linearization:
    """Per-node derivatives in the chart (vmapped over the horizon) and the terminal ones."""
    sys, chart = problem.system, problem.chart
    x_run = tree_index(xs, slice(None, -1))
    x_next = tree_index(xs, slice(1, None))
    xN = tree_index(xs, -1)
    n = chart.dim(sys, problem.state0)
    dtype = problem.dtype

    def node(x, u, xn, t, le, li):
        F = _node_map(problem, x, u, xn, t)

        def at(z):
            return chart.plus(sys, x, z[:n]), u + z[n:]

        def F_aux(z):
            y = F(z)
            return y, y

        z0 = jnp.zeros(n + problem.control_dim, dtype)
        J, gap = jax.jacfwd(F_aux, has_aux=True)(z0)
        p, q, _, _ = problem.sizes
        grad, hess = _cost_derivatives(problem.stage_cost, lambda z: (t, *at(z)), z0)
        grad, hess = problem.dt * grad, problem.dt * hess
        if p:
            g_, h_ = _al_derivatives(
                lambda z: problem.path_equality(t, *at(z)), le, duals.penalty, True, z0
            )
            grad, hess = grad + g_, hess + h_
        if q:
            g_, h_ = _al_derivatives(
                lambda z: problem.path_inequality(t, *at(z)), li, duals.penalty, False, z0
            )
            grad, hess = grad + g_, hess + h_
        return NodeDerivatives(gap=gap, J=J, grad=grad, hess=hess)

    lin = jax.vmap(node)(x_run, us, x_next, problem.times, duals.path_eq, duals.path_ineq)

    def atN(z):
        return (chart.plus(sys, xN, z),)

    z0 = jnp.zeros(n, dtype)
    _, _, r, s_ = problem.sizes
    if problem.terminal_cost is None:
        grad, hess = jnp.zeros(n, dtype), jnp.zeros((n, n), dtype)
    else:
        grad, hess = _cost_derivatives(problem.terminal_cost, atN, z0)
    if r:
        g_, h_ = _al_derivatives(
            lambda z: problem.terminal_equality(*atN(z)), duals.term_eq, duals.penalty, True, z0
        )
        grad, hess = grad + g_, hess + h_
    if s_:
        g_, h_ = _al_derivatives(
            lambda z: problem.terminal_inequality(*atN(z)),
            duals.term_ineq,
            duals.penalty,
            False,
            z0,
        )
        grad, hess = grad + g_, hess + h_
    return Linearization(lin, grad, hess)


def _node_map(problem, x, u, xn, t):
    """``F(z) = f(x̄ ⊕ δ, ū + w) ⊖ x̄'`` of a node, ``z = (δ, w)`` ``(n + m,)``."""
    sys, chart = problem.system, problem.chart
    n = chart.dim(sys, problem.state0)

    def F(z):
        return chart.minus(sys, problem.step(chart.plus(sys, x, z[:n]), u + z[n:], t), xn)

    return F


def dynamics_curvature(problem, x, u, xn, t, v):
    """DDP's second-order dynamics term ``v · ∂²F`` ``(n + m, n + m)``: the Hessian of the scalar
    ``z ↦ v · F(z)`` at 0 (forward-over-reverse: ``n + m`` Hessian-vector products, instead of
    the ``(n + m)²`` directions of the full tensor ``∂²F`` that is then contracted)."""
    F = _node_map(problem, x, u, xn, t)
    z0 = jnp.zeros(v.shape[0] + problem.control_dim, v.dtype)
    return jax.hessian(lambda z: jnp.dot(v, F(z)))(z0)


def _cost_derivatives(cost, args_of, z0):
    """Gradient and Hessian in the chart of ``cost(*args_of(z))`` at ``z0``: Gauss–Newton for a
    :class:`ResidualCost`, exact otherwise."""
    if isinstance(cost, ResidualCost):
        return _gauss_newton(lambda z: cost.residual(*args_of(z)), cost.weights, z0)

    def f(z):
        return cost(*args_of(z))

    return jax.grad(f)(z0), jax.hessian(f)(z0)


def _al_derivatives(constraint, lam, rho, equality, z0):
    """Gauss–Newton derivatives of the augmented-Lagrangian term of ``constraint(z)``: gradient
    ``Jᵀ(λ + ρc)`` (equalities; ``Jᵀ max(0, λ + ρc)`` for inequalities) — exact — and Hessian
    ``ρ JᵀJ`` (on the active inequalities), the curvature ``λ·∇²c`` of the constraint dropped."""

    def aux(z):
        c = constraint(z)
        return c, c

    J, c = jax.jacfwd(aux, has_aux=True)(z0)
    if equality:
        y, active = lam + rho * c, jnp.ones_like(c)
    else:
        y = jnp.maximum(lam + rho * c, 0.0)
        active = (y > 0).astype(c.dtype)
    return J.T @ y, rho * (J.T * active) @ J


def _gauss_newton(residual, weights, z0):
    """``(Jᵀ W r, Jᵀ W J)`` of ``½ Σ w r²`` at ``z0``."""

    def aux(z):
        r = residual(z)
        return r, r

    J, r = jax.jacfwd(aux, has_aux=True)(z0)
    w = jnp.asarray(weights, r.dtype) * jnp.ones_like(r)
    return J.T @ (w * r), (J.T * w) @ J

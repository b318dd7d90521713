"""Linearization of every node in the chart: the gap and Jacobians of the dynamics, the cost
derivatives (Gauss–Newton for residual costs), the augmented-Lagrangian terms, and DDP's
second-order dynamics term."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .problem import ResidualCost, tree_index


def linearize_nodes(problem, xs, us, duals):
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
        return dict(gap=gap, J=J, grad=grad, hess=hess)

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
    return lin, grad, hess


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

"""The forward pass (a rollout with the new gains, closing a fraction of the gaps) and the line
search on the expected improvement."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .problem import node_cost, terminal_node_cost, tree_index


def _forward(problem, xs, us, gaps, K, k, alpha, feasible, duals):
    """Rollout with ``u = clip(ū + α k + K (x ⊖ x̄))``, closing ``α`` of the gaps; returns the new
    trajectory, its cost and the deviations ``x ⊖ x̄`` ``(steps + 1, n)``."""
    sys, chart = problem.system, problem.chart
    rho = duals.penalty
    x_run = tree_index(xs, slice(None, -1))

    def body(x, inp):
        xb, ub, Kk, kk, g_next, t, le, li = inp
        dx = chart.minus(sys, x, xb)
        u = jnp.clip(ub + alpha * kk + Kk @ dx, problem.lower, problem.upper)
        c = node_cost(problem, t, x, u, le, li, rho)
        xn = problem.step(x, u, t)
        xn = jax.lax.cond(
            feasible,
            lambda: xn,
            lambda: chart.plus(sys, xn, (alpha - 1.0) * g_next),
        )
        return xn, (x, u, c, dx)

    inputs = (x_run, us, K, k, gaps, problem.times, duals.path_eq, duals.path_ineq)
    xN, (x_new, u_new, c, dx) = jax.lax.scan(body, problem.state0, inputs)
    dxN = chart.minus(sys, xN, tree_index(xs, -1))
    cost = jnp.sum(c) + terminal_node_cost(problem, xN, duals.term_eq, duals.term_ineq, rho)
    xs_new = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b[None]]), x_new, xN)
    cost = jnp.where(jnp.isfinite(cost), cost, jnp.inf)
    return xs_new, u_new, cost, jnp.concatenate([dx, dxN[None]])


def line_search_pass(problem, solver, s, gaps, out, f_all, Vxx, dg, dq, search):
    """Step lengths ``α = 1, ½, …`` tried in order (while ``search``): the forward pass of each
    and its actual cost decrease against the expected one ``α (d₁ + α d₂/2)`` (crocoddyl's FDDP
    rule, the gaps' terms included).  Returns ``(accepted, xs, us, cost, α)``."""
    dtype = problem.dtype
    alphas = 0.5 ** jnp.arange(solver.line_steps, dtype=dtype)

    def ls_cond(c):
        i, accepted = c[0], c[1]
        return (i < solver.line_steps) & ~accepted & search

    def ls_body(c):
        i, _, _, _, _, _ = c
        a = alphas[i]
        xs_t, us_t, cost_t, dx = _forward(
            problem, s.xs, s.us, gaps, out["K"], out["k"], a, s.feasible, s.duals
        )
        dv = jnp.einsum("ti,tij,tj->", f_all, Vxx, dx)
        d1, d2 = dg + dv, dq - 2 * dv
        expected = a * (d1 + 0.5 * a * d2)
        actual = s.cost - cost_t
        small = d1 < 1e-12
        acc_pos = (expected > 0) & (small | (actual >= solver.accept * expected))
        acc_neg = (expected <= 0) & (small | (actual >= solver.accept_increase * expected))
        accepted = jnp.isfinite(cost_t) & (acc_pos | acc_neg)
        return i + 1, accepted, xs_t, us_t, cost_t, a

    init = (
        jnp.zeros((), jnp.int32),
        jnp.zeros((), bool),
        s.xs,
        s.us,
        s.cost,
        jnp.zeros((), dtype),
    )
    _, accepted, xs_t, us_t, cost_t, a = jax.lax.while_loop(ls_cond, ls_body, init)
    return accepted, xs_t, us_t, cost_t, a

"""The forward pass (a rollout with the new gains, closing a fraction of the gaps), the expected
improvement of a step and the line search on it."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from .problem import node_cost, terminal_node_cost, tree_index

__all__ = ["ExpectedImprovement", "Trial", "expected_improvement", "forward_pass", "line_search"]

#: crocoddyl's ``th_grad``: a step whose ``d₁`` is below it is accepted whatever its cost change
#: (the model predicts no decrease worth testing)
TH_GRAD = 1e-12


def forward_pass(problem, xs, us, gaps, K, k, alpha, feasible, duals):
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


class ExpectedImprovement(eqx.Module):
    """The model's decrease of the cost for a step of length ``α`` (crocoddyl's FDDP
    ``expectedImprovement`` and ``updateExpectedImprovement``): ``α (d₁ + α d₂/2)`` with

        d₁ = dg + dv,   d₂ = dq − 2 dv,   dv = Σ_k f̄_kᵀ V_xx,k (x_k ⊖ x̄_k),

    where ``dg = −Σ Q_u·k − Σ V_x·f̄ − Σ f̄ᵀV_xx f̄`` and ``dq = −Σ kᵀQ_uu k + Σ f̄ᵀV_xx f̄`` are
    fixed by the backward pass and ``dv`` by the rollout's deviations (zero on a feasible
    iterate, where the gaps ``f̄`` are).

    Fields:
        dg, dq: the fixed parts (scalars).
        gaps: ``f̄_k`` ``(steps + 1, n)``, the gap into node ``k`` (``f̄_0 = 0``).
        Vxx: ``V_xx`` of every node ``(steps + 1, n, n)``.
    """

    dg: jax.Array
    dq: jax.Array
    gaps: jax.Array
    Vxx: jax.Array

    def terms(self, dx):
        """``(d₁, d₂)`` for a rollout of deviations ``dx = x ⊖ x̄`` ``(steps + 1, n)``."""
        dv = jnp.einsum("ti,tij,tj->", self.gaps, self.Vxx, dx)
        return self.dg + dv, self.dq - 2 * dv

    @property
    def full_step(self):
        """``|d₁ + d₂/2|`` at ``dv = 0``: the predicted change of a full step that the
        convergence test reads (``history["stop"]``)."""
        return jnp.abs(self.dg + 0.5 * self.dq)


def expected_improvement(lin, direction, gaps_into) -> ExpectedImprovement:
    """The fixed parts ``dg``, ``dq`` from the linearization ``lin`` (its terminal ``V_x``,
    ``V_xx``), the backward pass's ``direction`` and the gaps into every node ``gaps_into``
    ``(steps + 1, n)``."""
    Vx = jnp.concatenate([direction.Vx, lin.terminal_grad[None]])
    Vxx = jnp.concatenate([direction.Vxx, lin.terminal_hess[None]])
    # the model's change of the cost for a full step from the node's deviation 0: the value
    # at the gap, V_x·f + ½ fᵀV_xx f, summed with the controls' Q_u·k + ½ kᵀQ_uu k.  With
    # d₁ = dg + dv and d₂ = dq − 2dv (dv from the forward pass) the prediction α(d₁ + α d₂/2)
    # is −ΔJ: dg takes the value gradient at the gap, V_x + V_xx f (crocoddyl's FDDP stores
    # V_x so shifted), so that the quadratic gap term is −½ fᵀV_xx f.
    f = gaps_into
    fVf = jnp.einsum("ti,tij,tj->", f, Vxx, f)
    dg = -jnp.sum(direction.Quk) - jnp.sum(Vx * f) - fVf
    dq = -jnp.sum(direction.kQk) + fVf
    return ExpectedImprovement(dg=dg, dq=dq, gaps=f, Vxx=Vxx)


class Trial(eqx.Module):
    """A step tried by the line search: whether it was ``accepted``, its trajectory ``xs``,
    ``us``, its ``cost`` and its length ``alpha`` (crocoddyl's ``xs_try_``, ``us_try_``,
    ``cost_try_``, ``steplength_``)."""

    accepted: jax.Array
    xs: Any
    us: jax.Array
    cost: jax.Array
    alpha: jax.Array


def line_search(problem, solver, state, direction, improvement, search) -> Trial:
    """Step lengths ``α = 1, ½, …, 2^{1−line_steps}`` tried in order (while ``search``) by
    ``solver.try_step`` until one is accepted.  Returns the last :class:`Trial` (the accepted
    one, or the shortest when none was)."""
    dtype = problem.dtype
    alphas = 0.5 ** jnp.arange(solver.line_steps, dtype=dtype)

    def ls_cond(c):
        i, trial = c
        return (i < solver.line_steps) & ~trial.accepted & search

    def ls_body(c):
        i, _ = c
        return i + 1, solver.try_step(problem, state, direction, improvement, alphas[i])

    init = Trial(
        accepted=jnp.zeros((), bool),
        xs=state.xs,
        us=state.us,
        cost=state.cost,
        alpha=jnp.zeros((), dtype),
    )
    _, trial = jax.lax.while_loop(ls_cond, ls_body, (jnp.zeros((), jnp.int32), init))
    return trial

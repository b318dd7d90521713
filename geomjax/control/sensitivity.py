"""Derivatives of an optimal control problem's solution with respect to its parameters, by implicit
differentiation at the converged point.

For the box-constrained single-shooting problem ``min_u J(u, θ)``, ``lower(θ) ≤ u ≤ upper(θ)``
(``J(u, θ) = Σ dt·l + Φ`` of the rollout of ``u``, ``θ`` any floating array of the
:class:`~geomjax.control.trajopt.OptimalControlProblem`: initial state, target, weights, inertia,
bounds, ``dt``), the solution ``u*`` satisfies, with the active set ``A`` (controls at a bound)
fixed locally (strict complementarity),

    r(u, θ) = ∇_u J(u, θ)  on the free controls,     r(u, θ) = u − b(θ)  on A     (= 0),

``b`` the active bound.  By the implicit function theorem ``∂u*/∂θ = −(∂_u r)⁻¹ ∂_θ r``, where
``∂_u r`` has the rows ``(H_FF, H_FA)`` of the reduced Hessian ``H = ∇²_uu J`` on the free controls
and the identity on ``A``; a cotangent ``ū`` pulls back to ``θ̄ = −(∂_θ r)ᵀ v`` with ``(∂_u r)ᵀ v =
ū`` (Gould et al., *On differentiating parameterized argmin and argmax problems with application
to bi-level optimization*, 2016, §4; Amos & Kolter, *OptNet*, ICML 2017, §3 for the active set).
``H`` is the exact Hessian of ``J`` (second-order dynamics terms included: it is the Newton matrix
of :class:`~geomjax.control.trajopt.DDP` at a rollout), formed densely by forward-over-reverse
autodiff, ``(steps·m)²`` entries: meant for horizons of tens to a few hundred nodes.

The states and the cost are then differentiated through the rollout of ``u*(θ)``, so the optimal
cost obeys the envelope theorem: ``dJ*/dθ = ∂J/∂θ (u*, θ)`` (``∇_u J = 0`` on the free controls;
the multipliers of the active bounds enter only through ``∂b/∂θ``).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.warn import renamed
from .trajopt import (
    AugmentedLagrangian,
    OCPSolution,
    OptimalControlProblem,
    solve_ocp,
)

__all__ = ["solve_ocp_implicit"]


def _single_shooting_cost(problem, us):
    return problem.cost(problem.rollout(us), us)


def _residual(dyn, static, us, at_lo, at_hi):
    """``r(u, θ)``: the reduced gradient on the free controls, ``u − b(θ)`` on the active ones."""
    problem = eqx.combine(dyn, static).prepared()
    g = jax.grad(lambda v: _single_shooting_cost(problem, v))(us)
    free = ~(at_lo | at_hi)
    b = jnp.where(at_hi, problem.upper, problem.lower)
    return jnp.where(free, g, us - b)


@eqx.filter_jit
def _rollout_cost(problem, us):
    problem = problem.prepared()
    xs = problem.rollout(us)
    return xs, problem.cost(xs, us)


@eqx.filter_jit
def _kkt_factor(dyn, static, us, at_lo, at_hi):
    """LU factors of ``∂_u r`` ``(steps·m, steps·m)``."""
    M = jax.jacfwd(lambda u: _residual(dyn, static, u, at_lo, at_hi))(us)
    return jax.scipy.linalg.lu_factor(M.reshape(us.size, us.size))


@eqx.filter_custom_vjp
def _optimal_controls(dyn, static, us, at_lo, at_hi):
    return us


@_optimal_controls.def_fwd
def _optimal_controls_fwd(perturbed, dyn, static, us, at_lo, at_hi):
    return us, _kkt_factor(dyn, static, us, at_lo, at_hi)


def _pairing(dyn, static, us, v, at_lo, at_hi):
    """``⟨r(u, θ), v⟩ = ∂_u J(u, θ)[v_F] + ⟨u − b(θ), v_A⟩`` (a directional derivative: reverse over
    forward mode in ``θ``, through implicit integrators too)."""
    problem = eqx.combine(dyn, static)
    free = ~(at_lo | at_hi)
    _, dJ = jax.jvp(lambda u: _single_shooting_cost(problem, u), (us,), (jnp.where(free, v, 0.0),))
    b = jnp.where(at_hi, problem.upper, problem.lower)
    return dJ + jnp.sum(jnp.where(free, 0.0, (us - jnp.where(free, 0.0, b)) * v))


@eqx.filter_jit
def _pullback(lu, u_bar, dyn, static, us, at_lo, at_hi):
    v = jax.scipy.linalg.lu_solve(lu, u_bar.reshape(-1), trans=1).reshape(us.shape)
    v = eqx.error_if(
        v,
        ~jnp.all(jnp.isfinite(v)),
        "solve_ocp_implicit: the optimality conditions are singular at the solution (no strict "
        "local minimum on the free controls, or a solve that did not converge)",
    )
    d_bar = jax.grad(lambda d: _pairing(d, static, us, v, at_lo, at_hi))(dyn)
    return jax.tree_util.tree_map(jnp.negative, d_bar)


@_optimal_controls.def_bwd
def _optimal_controls_bwd(lu, u_bar, perturbed, dyn, static, us, at_lo, at_hi):
    if u_bar is None:
        return jax.tree_util.tree_map(lambda _: None, dyn)
    return _pullback(lu, u_bar, dyn, static, us, at_lo, at_hi)


def solve_ocp_implicit(
    problem: OptimalControlProblem,
    solver=None,
    controls=None,
    *,
    max_iters: int = 100,
    progress: bool | None = None,
    us=None,
) -> OCPSolution:
    """:func:`~geomjax.control.trajopt.solve_ocp`, differentiable (reverse mode: ``jax.grad``,
    ``jax.vjp``, ``jax.jacrev``) with respect to every floating array of ``problem`` by implicit
    differentiation of the optimality conditions at the returned solution (see the module
    docstring): ``controls``, ``states`` and ``cost`` of the returned
    :class:`~geomjax.control.trajopt.OCPSolution` carry the derivatives; the solver's own
    iterations are not differentiated.

    Unconstrained and box-constrained problems (``lower ≤ u ≤ upper``) with :class:`ILQR` /
    :class:`DDP` (default).  The derivatives are those of the exact optimum: valid when the solve
    converged (check :attr:`~geomjax.control.trajopt.OCPSolution.status`; a tight ``tol`` gives
    accurate derivatives) to a strict local minimum with strict complementarity at the active
    bounds (the active set is then locally constant).  A singular optimality system raises (via
    ``equinox.error_if``) on the backward pass instead of returning NaN.  ``progress``: as
    :func:`~geomjax.control.trajopt.solve_ocp`'s; ``controls``: the initial guess (``us``: its
    deprecated name)."""
    if not isinstance(problem, OptimalControlProblem):
        raise ValueError(
            "solve_ocp_implicit: argument 'problem' must be an OptimalControlProblem, got "
            f"{type(problem)}"
        )
    if problem.constrained or isinstance(solver, AugmentedLagrangian):
        raise ValueError(
            "solve_ocp_implicit: path/terminal constraints (argument 'problem') and "
            "AugmentedLagrangian (argument 'solver') are not supported; state targets as "
            "terminal costs (control bounds are supported)"
        )
    dyn, static = eqx.partition(problem, eqx.is_inexact_array)
    frozen = eqx.combine(jax.lax.stop_gradient(dyn), static)
    controls = renamed(controls, us, "solve_ocp_implicit", "controls", "us")
    sol = solve_ocp(frozen, solver, controls, max_iters=max_iters, progress=progress)
    u = jax.lax.stop_gradient(sol.controls)
    at_lo, at_hi = u <= frozen.lower, u >= frozen.upper
    u = _optimal_controls(dyn, static, u, at_lo, at_hi)
    xs, cost = _rollout_cost(problem, u)
    return eqx.tree_at(lambda s: (s.states, s.controls, s.cost), sol, (xs, u, cost))

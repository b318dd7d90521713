"""Discrete Hamel equations: a variational integrator for systems written in a mobile frame.

Setting and notation: :mod:`geomjax.variational.hamel` (``v = A(q) q̇``, ``q̇ = E(q) v``,
``ℓ(q, v)``, constraints ``v_c = 0``, forces as frame covectors).  The scheme follows the discrete
Hamel formalism of Ball & Zenkov (*Hamel's formalism and variational integrators*, in Geometry,
Mechanics, and Dynamics, Fields Inst. Commun. 73, 2015): a discrete Lagrangian written in a
discrete quasi-velocity, a reconstruction of the next configuration from it, and variations
measured in the frame, ``δq_k = E(q_k) η_k``.  The choices made here:

* **discrete quasi-velocity** of a step, in the frame at the midpoint
  ``q̄ = (q_k + q_{k+1})/2``:  ``ξ_k = A(q̄) (q_{k+1} − q_k)/h``;
* **discrete Lagrangian** ``ℓ_d(q_k, q_{k+1}) = h ℓ(q̄, ξ_k)`` (the midpoint rule; for the
  coordinate frame it is the midpoint discrete Lagrangian of
  :class:`~geomjax.DiscreteEulerLagrange`);
* **discrete Legendre transforms in the frame** (the discrete momenta of Ball & Zenkov), with the
  discrete force ``F̄ = F(t_k + h/2, q̄, ξ_k, u)`` split half and half:

      μ_k^+     = −E(q_k)ᵀ     [D_1 ℓ_d + h/2 A(q̄)ᵀ F̄],
      μ_{k+1}^- =  E(q_{k+1})ᵀ [D_2 ℓ_d + h/2 A(q̄)ᵀ F̄].

  With ``p̂ = ∂ℓ/∂v(q̄, ξ_k)`` the leading term of ``μ_k^+`` is ``(A(q̄) E(q_k))ᵀ p̂``: the
  discrete transport of the frame from ``q_k`` to ``q̄``, whose first-order part carries the
  structure coefficients (the bracket terms) of the continuous equations;
* **discrete Hamel / Lagrange–d'Alembert equations**: the discrete principle with virtual
  displacements ``δq_k = E(q_k) η_k`` and ``η_k`` free in the unconstrained directions gives
  ``μ_k^- = μ_k^+`` for the free components; the constraints ``v_c = 0`` are imposed on the step,
  ``(ξ_k)_c = 0`` (a midpoint discrete constraint), and the constrained components of the
  momentum equation only define the constraint impulses — no multiplier enters the solve.

One step ``(q_k, v_k) → (q_{k+1}, v_{k+1})``:

1. solve for the step's quasi-velocity in the frame at ``q_k``, ``z = A(q_k)(q_{k+1} − q_k)/h``
   (``newton_iters`` Newton steps from ``z = v_k``):

       (μ_k^+(z) − ∂ℓ/∂v(q_k, v_k))_a = 0  (a free),     (A(q̄) E(q_k) z)_c = 0  (c constrained);

2. ``q_{k+1} = q_k + h E(q_k) z``; ``μ_{k+1}^-`` explicit;
3. ``v_{k+1}`` from ``(∂ℓ/∂v(q_{k+1}, v_{k+1}))_a = (μ_{k+1}^-)_a`` (a free) and
   ``(v_{k+1})_c = 0`` (linear for kinetic energies quadratic in ``v``:
   ``projection_iters = 1`` is exact).

The unknowns are frame components at ``q_k``, so the Newton matrix is ``≈ M`` in the free rows
and ``≈ e_cᵀ`` in the constrained ones, eliminated without pivoting whatever the frame.

Properties (tested in ``tests/variational/test_discrete_hamel.py``):

* every step satisfies the discrete Hamel equations of the discrete Lagrangian ``ℓ_d``, a
  function on ``Q × Q``: without constraints the map is the discrete Euler–Lagrange map of
  ``L_d(q_k, q_{k+1}) = h L(q̄, (q_{k+1} − q_k)/h)`` for ``L(q, q̇) = ℓ(q, A q̇)`` — symplectic,
  and equal to :class:`~geomjax.DiscreteEulerLagrange` (midpoint) to round-off; a symmetry
  acting by translation of coordinates conserves its momentum exactly (discrete Noether);
* symmetric (``ℓ_d`` is self-adjoint, the discrete constraint and the force are placed at the
  midpoint), hence second order, also with constraints and forces, and
  :class:`~geomjax.Composition` raises the order;
* the constraints ``v_c = 0`` hold exactly at every node and on every step;
* the energy error of conservative systems stays bounded, ``O(h²)`` without drift (observed;
  backward error analysis of symplectic maps without constraints).

The frame is checked at every node: where :func:`~geomjax.variational.hamel.frame_rcond` falls
below ``frame_tol`` (default ``sqrt(eps)``), or is not finite, the run stops with an error naming
the argument ``frame`` (``equinox.error_if``): a chart of quasi-velocities that degenerates along
the path (Euler angles at gimbal lock) is never integrated silently.

Derivatives go through :func:`~geomjax.integrators.newton.newton_solve` (implicit function
theorem).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..variational.hamel import HamelState, HamelSystem, frame_rcond
from .base import AbstractMethod, StepStats
from .newton import dense_jac_solve, newton_solve
from .variational import _check_iters

__all__ = ["DiscreteHamel", "hamel_momenta"]


def _max_abs(a):
    return jnp.max(jnp.abs(a), initial=0.0)


def hamel_momenta(system, q0, E0, z, h, t=0.0, u=None):
    """Discrete Legendre transforms of the step with quasi-velocity ``z`` ``(n,)`` in the frame at
    ``q0`` (``E0 = E(q0)``): ``(mu_plus, p_minus, q1, xi)`` with ``mu_plus = μ_k^+`` (frame
    components at ``q0``), ``p_minus`` the *coordinate* covector ``D_2 ℓ_d + h/2 A(q̄)ᵀ F̄``
    (``μ_{k+1}^- = E(q1)ᵀ p_minus``), ``q1 = q0 + h E0 z`` and the discrete quasi-velocity
    ``xi = A(q̄) (q1 − q0)/h`` (module docstring)."""
    w = E0 @ z
    q1 = q0 + h * w
    qm = q0 + 0.5 * h * w

    def g(qb, ww):
        return system.lagrangian(qb, system.frame_matrix(qb) @ ww)

    dq, dw = jax.grad(g, argnums=(0, 1))(qm, w)
    p_plus = dw - 0.5 * h * dq
    p_minus = dw + 0.5 * h * dq
    Am = system.frame_matrix(qm)
    xi = Am @ w
    F = system.force(t + 0.5 * h, qm, xi, u)
    if F is not None:
        Fc = 0.5 * h * (Am.T @ F)
        p_plus = p_plus - Fc
        p_minus = p_minus + Fc
    return E0.T @ p_plus, p_minus, q1, xi


class _StepResidual(eqx.Module):
    """``[(μ_k^+(z) − μ_k)_free, ξ_c]`` for the unknown ``z`` ``(n,)``."""

    static: object = eqx.field(static=True)

    def __call__(self, z, args):
        params, q0, E0, mu0, h, t, u = args
        system = eqx.combine(params, self.static)
        mu_plus, _, _, xi = hamel_momenta(system, q0, E0, z, h, t, u)
        free = jnp.asarray(system.free)
        return jnp.where(free, mu_plus - mu0, xi)


class _NodeResidual(eqx.Module):
    """``[(∂ℓ/∂v(q1, v) − μ⁻)_free, v_c]`` for the unknown ``v`` ``(n,)``."""

    static: object = eqx.field(static=True)

    def __call__(self, v, args):
        params, q1, mu_minus = args
        system = eqx.combine(params, self.static)
        free = jnp.asarray(system.free)
        return jnp.where(free, system.momentum(q1, v) - mu_minus, v)


def _solve(residual, x0, args, iters, scalar, exit):
    return newton_solve(
        residual,
        x0,
        args,
        iters=iters,
        jac_solve=dense_jac_solve(residual),
        scalarize=scalar,
        early_exit=exit,
    )


class DiscreteHamel(AbstractMethod):
    """Discrete Hamel (Lagrange–d'Alembert–Poincaré) variational integrator for
    :class:`~geomjax.variational.HamelSystem` (module docstring for the scheme): second order,
    symmetric, constraints ``v_c = 0`` exact, bounded energy error.

    Controls (``simulate(..., controls=...)``) reach the system's ``force(t, q, v, u)`` (by
    default ``u`` itself: a covector ``(n,)`` in the frame), zero-order hold over each step.

    Arguments:
        newton_iters: Newton steps for the step's quasi-velocity (default 4, from ``v_k``, at most
            that many with ``early_exit``); the relative residual goes to ``StepStats``.
        projection_iters: Newton steps for the node velocity (default 1: exact for kinetic
            energies quadratic in ``v``).
        frame_tol: the run stops (``equinox.error_if`` naming ``frame``) at a node where the
            reciprocal condition number of ``A(q)`` is below it (default ``sqrt(eps)`` of the
            dtype) or not finite.
        on_failure: ``"report"`` (the residual in ``Solution.stats``) or ``"raise"``
            (``equinox.error_if`` above ``tol``, default ``1e3 · eps``).
        scalarize: evaluate the Newton residuals scalar by scalar
            (as :class:`~geomjax.DiscreteEulerLagrange`
            does).  Default ``False``: the residual holds the user's frame, whose programs the
            scalarizer does not all cover (it then falls back to the array program: the same
            numbers, no speed-up).  Where it works it is faster (``geomjax bench scalarize``).
        early_exit: stop the Newton iterations once converged (at most ``newton_iters``; the
            same results to round-off, the same derivatives).
    """

    newton_iters: int = eqx.field(static=True, default=4)
    projection_iters: int = eqx.field(static=True, default=1)
    frame_tol: float | None = eqx.field(static=True, default=None)
    on_failure: Literal["report", "raise"] = eqx.field(static=True, default="report")
    tol: float | None = eqx.field(static=True, default=None)
    scalarize: bool = eqx.field(static=True, default=False)
    early_exit: bool = eqx.field(static=True, default=True)
    order: ClassVar[int] = 2
    symmetric: ClassVar[bool] = True
    symmetric_with_force: ClassVar[bool] = True

    def __check_init__(self):
        where = "DiscreteHamel"
        _check_iters(where, newton_iters=self.newton_iters, projection_iters=self.projection_iters)
        if self.on_failure not in ("report", "raise"):
            raise ValueError(
                f"{where}: argument 'on_failure' must be 'report' or 'raise', got "
                f"{self.on_failure!r}"
            )
        if self.frame_tol is not None and not (
            isinstance(self.frame_tol, int | float) and 0 <= self.frame_tol < 1
        ):
            raise ValueError(
                f"{where}: argument 'frame_tol' must be a number in [0, 1) or None, got "
                f"{self.frame_tol!r}"
            )
        for name in ("scalarize", "early_exit"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{where}: argument '{name}' must be True or False")

    def supports(self, system) -> bool:
        return isinstance(system, HamelSystem)

    def _frame_tol(self, dtype):
        return float(jnp.finfo(dtype).eps) ** 0.5 if self.frame_tol is None else self.frame_tol

    def check_initial(self, system, state):
        # simulate's initial state: a regular frame at q and v_c = 0 (ValueError eagerly)
        q = system.check_frame(
            state.q, "state0.q", "DiscreteHamel", self._frame_tol(jnp.result_type(state.q))
        )
        v = system._check_constraints(state.v, "state0.v", "DiscreteHamel")
        return HamelState(q, v, state.lam)

    def solve_step(self, system, state, dt, control=None, t=0.0):
        """One step with its internals: ``(new_state, relative_residual, info)``; ``info`` holds
        the discrete quasi-velocity ``xi`` of the step, the frame momenta ``mu_plus`` (at
        ``q_k``) and ``mu_minus`` (at ``q_{k+1}``), and the scheme's constraint impulses as
        multipliers ``lam_a = 2 (μ_k^+ − μ_k)_c / h`` and ``lam_b = 2 (μ_{k+1} − μ_{k+1}^-)_c / h``
        (first order each, opposite errors)."""
        q0, v0 = state.q, state.v
        dtype = q0.dtype
        h = jnp.asarray(dt, dtype)
        t = jnp.asarray(t, dtype)
        tiny = jnp.finfo(dtype).tiny
        params, static = eqx.partition(system, eqx.is_array)
        _, E0 = system.frames(q0)
        mu0 = system.momentum(q0, v0)

        # 1. the step's quasi-velocity (frame at q_k)
        z, r1 = _solve(
            _StepResidual(static),
            v0,
            (params, q0, E0, mu0, h, t, control),
            self.newton_iters,
            self.scalarize,
            self.early_exit,
        )
        # 2. new configuration and the momentum arriving there
        mu_plus, p_minus, q1, xi = hamel_momenta(system, q0, E0, z, h, t, control)
        A1, E1 = system.frames(q1)
        tol = self._frame_tol(dtype)
        arg = "frame" if system.frame_fn is not None else "frame_vectors"
        q1 = eqx.error_if(
            q1,
            ~(frame_rcond(A1, E1) > tol),
            f"DiscreteHamel: argument '{arg}' of the system is singular (or not finite) at a "
            f"node of the path (reciprocal condition number of A(q) below frame_tol = {tol:.3g}): "
            "the quasi-velocities do not describe the motion there (e.g. Euler angles at gimbal "
            "lock); use another chart or frame, or reduce dt if the Newton solve failed",
        )
        mu_minus = E1.T @ p_minus
        # 3. node velocity
        v1, r2 = _solve(
            _NodeResidual(static),
            A1 @ (E0 @ z),
            (params, q1, mu_minus),
            self.projection_iters,
            self.scalarize,
            False,
        )
        free = np.asarray(system.free)
        cons = np.flatnonzero(~free)
        mu1 = system.momentum(q1, v1)
        pscale = jnp.maximum(_max_abs(mu0), _max_abs(mu_minus)) + tiny
        vscale = jnp.maximum(_max_abs(z), _max_abs(v1)) + tiny
        res = jnp.maximum(
            jnp.maximum(_max_abs(r1[free]), _max_abs(r2[free])) / pscale,
            jnp.maximum(_max_abs(r1[cons]), _max_abs(r2[cons])) / vscale,
        )
        if cons.size:
            lam1 = system.acceleration(t + h, q1, v1, control)[1]
        else:
            lam1 = state.lam
        info = {
            "xi": xi,
            "mu_plus": mu_plus,
            "mu_minus": mu_minus,
            "lam_a": 2.0 * (mu_plus - mu0)[cons] / h,
            "lam_b": 2.0 * (mu1 - mu_minus)[cons] / h,
        }
        return HamelState(q1, v1, lam1), res, info

    def step(self, system, state, dt, control=None, t=0.0):
        new, res, _ = self.solve_step(system, state, dt, control, t)
        if self.on_failure == "raise":
            tol = self.tol if self.tol is not None else 1e3 * float(jnp.finfo(res.dtype).eps)
            new = eqx.tree_at(
                lambda s: s.v,
                new,
                eqx.error_if(
                    new.v,
                    ~(res <= tol),
                    "DiscreteHamel: the implicit step did not converge (relative residual > "
                    "tol); reduce dt or raise newton_iters",
                ),
            )
        return new, StepStats(residual=res)

"""Discrete Lagrange–d'Alembert(–Poincaré) integrator for nonholonomic systems on ``G × R^n``.

Setting and notation: :mod:`geomjax.systems.nonholonomic` (``q = (g, x)``, ``v = (xi, xdot)``,
Lagrangian ``L(q, v)``, constraints ``C(q, v, t) = A(q) v − b(q, t)``, multipliers ``lam``).

**Discrete Lagrangian** (that of the LGVI, :mod:`geomjax.integrators.lgvi`, with the
configuration-dependent part by the trapezoidal rule).  A step has a discrete velocity
``w = (xi_k, u_k)``: ``g_{k+1} = g_k tau(h xi_k)`` (``tau`` = Cayley or exp), ``x_{k+1} = x_k + h u_k``,

    L_d(q_k, q_{k+1}) = h/2 [L(q_k, w) + L(q_{k+1}, w)].

Its discrete Legendre transforms, left-trivialized on G (``S = ½ [∂_v L(q_k, w) + ∂_v L(q_{k+1}, w)]``,
``nu = Jtau_l(h xi_k)^{-T} S_xi``, ``f = tau(h xi_k)``, ``D_g`` the left-trivialized derivative):

    p_k^+     = −D_1 L_d = (nu − h/2 D_g L(q_k, w),            S_x − h/2 ∂_x L(q_k, w))
    p_{k+1}^- =  D_2 L_d = (Ad_f^T nu + h/2 D_g L(q_{k+1}, w), S_x + h/2 ∂_x L(q_{k+1}, w)).

(For ``L = ½ xi^T I xi − V(g)`` this is exactly the LGVI.)

**Discrete Lagrange–d'Alembert principle** — the multipliers enter the discrete *momentum*
equation, as in the continuous law of Romano–Barretta–Diaco, *On the general form of the law of dynamics*, not vakonomically.  The constraint
impulse ``h A(q_k)^T lam`` at each node is split into a half ``h/2 A(q_k)^T lam_b^{(k-1)}`` that
ends step k−1 and a half ``h/2 A(q_k)^T lam_a^{(k)}`` that starts step k; one step
``(q_k, v_k) -> (q_{k+1}, v_{k+1})`` is

1. solve for ``(w, lam_a)`` (``newton_iters`` Newton steps):

       p_k^+(w) = ∂_v L(q_k, v_k) + h/2 A(q_k)^T lam_a + h/2 u,
       ½ [C(q_k, w, t_k) + C(q_{k+1}, w, t_{k+1})] = 0          (discrete constraint on w);

2. ``q_{k+1} = (g_k tau(h xi_k), x_k + h u_k)``, ``p_{k+1}^-`` explicit;
3. solve for ``(v_{k+1}, lam_b)`` (a saddle-point system, linear when the kinetic energy is
   quadratic in ``v``: ``projection_iters = 1`` is exact there):

       ∂_v L(q_{k+1}, v_{k+1}) = p_{k+1}^- + h/2 A(q_{k+1})^T lam_b + h/2 u,
       C(q_{k+1}, v_{k+1}, t_{k+1}) = 0                          (constraint at the node).

``u`` is a zero-order-hold control (generalized force), applied by the trapezoidal rule.

Properties (tested in ``tests/nonholonomic``):

* the constraints hold at every node to the accuracy of the linear solve (round-off), whatever
  the step size, and on every step velocity ``w`` (trapezoidal form);
* the method is a one-step map on the constraint set and *symmetric* (``L_d`` is self-adjoint;
  the reverse step from ``(q_{k+1}, v_{k+1})`` has ``lam_a = lam_b`` and conversely), hence of even
  order: second order.  Carrying the multiplier from one step to the next instead (one multiplier
  per node, ``p_k^+ − p_k^- = h A_k^T lam_k``) makes ``lam`` an extra state variable with a
  parasitic mode — the time reverse of the contracting directions of the dynamics, which for the
  Chaplygin sleigh grows like ``exp(c V t)`` — so it is not done;
* discrete nonholonomic momentum equation: for a G-invariant ``L`` and ``zeta(q_k) ∈ g^{q_k}``,
  ``J_{k+1} − J_k = <m_k^+, zeta(q_{k+1}) − zeta(q_k)>`` exactly, with the discrete momentum map
  ``m_k^+ = Ad_{g_k^{-1}}^T (p_k^+)_xi = Ad_{g_{k+1}^{-1}}^T (p_{k+1}^-)_xi`` (the LGVI transport; the
  constraint impulses have no component along ``zeta``); a horizontal symmetry (constant
  ``zeta``) is conserved to round-off;
* energy: no drift for conservative systems with time-independent linear constraints — a
  bounded ``O(h²)`` error, as McLachlan & Perlmutter (2006, J. Nonlinear Sci. 16) observe for
  reversible nonholonomic integrators; observed in the tests, not a theorem.

**Multipliers.**  ``lam_a^{(k)}`` and ``lam_b^{(k)}`` are first-order approximations (their
errors are opposite: ``½ (lam_b^{(k-1)} + lam_a^{(k)})`` is second order).  The state carries
``lam`` = the continuous Lagrange–d'Alembert multiplier at the new node,
``lam(q_{k+1}, v_{k+1}, t_{k+1})`` (one more small saddle-point solve), a second-order
approximation of the constraint force; the scheme's own ``lam_a``, ``lam_b`` and the discrete
momenta are returned by :meth:`NonholonomicVI.solve_step`.

Relation to the literature: the discrete constraint on the step velocity is that of the discrete
Lagrange–d'Alembert schemes of Cortés & Martínez (2001), McLachlan & Perlmutter (2006), the discrete
Suslov/Chaplygin sleigh of Fedorov & Zenkov (2005) and Kobilarov, Marsden & Sukhatme (2010); the
additional projection at the nodes (the nonholonomic counterpart of RATTLE's velocity step) makes
the carried velocities satisfy the continuous constraint and the method symmetric.

Derivatives go through :func:`~geomjax.integrators.newton.newton_solve` (implicit function
theorem): ``jax.grad`` with respect to initial conditions, parameters of the system or ``dt``
never differentiates the Newton iterations.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.scalarize import scalarize
from .._linalg import forward_jacobian, saddle_solve_schur
from ..systems.nonholonomic import (
    AbstractNonholonomicSystem,
    NonholonomicState,
    node_acceleration,
)
from .base import AbstractMethod, GradientHooks, StepStats, needs_reorthonormalization
from .newton import newton_solve

__all__ = ["NonholonomicVI", "discrete_momenta"]


def _mT(a):
    return jnp.swapaxes(a, -1, -2)


def _mTv(a, v):
    """``aᵀ v`` elementwise (a tiny ``dot`` is a separate kernel on CPU; products and sums fuse)."""
    return jnp.sum(a * v[..., :, None], -2)


def _retract(G, x, retraction):
    return G.cay(x) if retraction == "cayley" else G.exp(x)


def discrete_momenta(system, g, x, w, h, retraction="cayley"):
    """Discrete Legendre transforms of the step with discrete velocity ``w`` ``(d + n,)`` from
    ``q = (g, x)``: ``(p_plus, p_minus, g1, x1)`` with ``p_plus = −D_1 L_d`` at ``q_k`` and
    ``p_minus = D_2 L_d`` at ``q_{k+1} = (g tau(h xi), x + h u)`` (module docstring; no forces)."""
    G = system.group
    d = G.dim
    hxi = h * w[:d]
    f = _retract(G, hxi, retraction)
    g1 = G.compose(g, f)
    x1 = x + h * w[d:]

    Jinv = G.cay_jac_left_inv(hxi) if retraction == "cayley" else G.jac_left_inv(hxi)
    if not any(system.lagrangian_dependence(g, x, w)):
        # L(v) alone (G-invariant, no shape dependence; read from the jaxpr): the configuration
        # derivatives are exact zeros and ∂_v L is the same at both nodes — skip all of them
        S = jax.grad(system.lagrangian, argnums=2)(g, x, w)
        nu = _mTv(Jinv, S[:d])
        p_plus = jnp.concatenate([nu, S[d:]])
        p_minus = jnp.concatenate([_mTv(G.Ad(f), nu), S[d:]])
        return p_plus, p_minus, g1, x1

    def grads(gq, xq):
        e = jnp.zeros((d,), w.dtype)
        dx = jnp.zeros_like(xq)
        return jax.grad(
            lambda e, dx, v: system.lagrangian(*system._shift(gq, xq, e, dx), v), argnums=(0, 1, 2)
        )(e, dx, w)

    dg0, dx0, S0 = grads(g, x)
    dg1, dx1, S1 = grads(g1, x1)
    S = 0.5 * (S0 + S1)
    nu = _mTv(Jinv, S[:d])
    p_plus = jnp.concatenate([nu - 0.5 * h * dg0, S[d:] - 0.5 * h * dx0])
    p_minus = jnp.concatenate([_mTv(G.Ad(f), nu) + 0.5 * h * dg1, S[d:] + 0.5 * h * dx1])
    return p_plus, p_minus, g1, x1


class _StepResidual(eqx.Module):
    """Discrete Legendre transform with the start-of-step multiplier and the discrete constraint,
    for ``z = (w, Lam_a)`` (``Lam_a = h/2 lam_a``):
    ``[p_k^+(w) − p_k − A(q_k)^T Lam_a − h/2 u,  ½ (C(q_k, w, t_k) + C(q_{k+1}, w, t_{k+1}))]``."""

    static: object = eqx.field(static=True)
    retraction: str = eqx.field(static=True)

    def __call__(self, z, args):
        params, g, x, rhs, A0, h, t = args
        system = eqx.combine(params, self.static)
        k = system.n_velocities
        w, Lam = z[:k], z[k:]
        p_plus, _, g1, x1 = discrete_momenta(system, g, x, w, h, self.retraction)
        c = system.constraint(g, x, w, t)
        if system.constraint_dependence(g, x, w, t):
            c = 0.5 * (c + system.constraint(g1, x1, w, t + h))
        return jnp.concatenate([p_plus - _mTv(A0, Lam) - rhs, c])


class _ProjectionResidual(eqx.Module):
    """``[∂_v L(q1, v) − A^T Lam − p, C(q1, v, t1)]`` for ``z = (v, Lam)``, ``Lam = h/2 lam``
    (the impulse, so that the Jacobian ``[[M, −A^T], [A, 0]]`` does not degenerate as h → 0;
    velocity unknowns first so that elimination without pivoting meets the SPD block first)."""

    static: object = eqx.field(static=True)

    def __call__(self, z, args):
        params, g1, x1, p, t1 = args
        system = eqx.combine(params, self.static)
        k = system.n_velocities
        v, Lam = z[:k], z[k:]
        A = system.constraint_matrix(g1, x1, t1)
        r1 = system.momentum(g1, x1, v) - _mTv(A, Lam) - p
        return jnp.concatenate([r1, system.constraint(g1, x1, v, t1)])


class _SaddleJacSolve(eqx.Module):
    """``jac_solve`` for residuals ``[F(v) − A^T Lam − p, C(v)]`` of ``z = (v, Lam)`` (``k + m``):
    the multiplier columns of the Jacobian are known, ``[−A^T; 0]``, so forward mode runs over the
    ``k`` velocity directions only (velocity pivots first in the elimination, as in
    :func:`~geomjax.systems.nonholonomic.saddle_solve`)."""

    residual: eqx.Module
    k: int = eqx.field(static=True)
    A_of: object = eqx.field(static=True)
    jacobian: str = eqx.field(static=True, default="columns")

    def __call__(self, z, args, r):
        k = self.k
        lam = z[k:]

        def f(v):
            return self.residual(jnp.concatenate([v, lam]), args)

        Jv = forward_jacobian(f, z[:k]) if self.jacobian == "columns" else jax.jacfwd(f)(z[:k])
        A = self.A_of(self.residual, args)
        dv, dlam = saddle_solve_schur(Jv[:k], A, Jv[k:], r[:k], r[k:])
        return jnp.concatenate([dv, dlam])


def _A_step(residual, args):
    return args[4]


def _A_projection(residual, args):
    params, g1, x1, _, t1 = args
    return eqx.combine(params, residual.static).constraint_matrix(g1, x1, t1)


def _solve(residual, x0, args, iters, A_of, k, jacobian, chord=False, scalar=True, exit=False):
    js = _SaddleJacSolve(residual, k, A_of, jacobian)
    return newton_solve(
        residual,
        x0,
        args,
        iters=iters,
        jac_solve=js,
        chord=chord,
        scalarize=scalar,
        early_exit=exit and not chord,  # (early_exit with chord: newton_solve's linear test)
    )


# The pieces of the step that are scalarized (geomjax._internal.scalarize) are module-level functions of
# their arguments alone: their scalar programs are then cached and shared (the node acceleration
# of init and of every step, every compilation of the same system).
def _start(system, g, x, v, lam, vdot, h, t, control):
    """``A(q_k)``, ``p_k`` (with the control impulse) and the Newton seed of ``(w, Lam_a)``."""
    A0 = system.constraint_matrix(g, x, t)
    p0 = system.momentum(g, x, v)
    if control is not None:
        p0 = p0 + 0.5 * h * control
    # O(h²) seed from the carried acceleration and multiplier (see NonholonomicVI.init)
    return A0, p0, jnp.concatenate([v + 0.5 * h * vdot, 0.5 * h * lam])


def _middle(system, g, x, w, h, control, retraction):
    """The new configuration and the momenta of the step (``p_arrive`` with the control)."""
    p_plus, p_minus, g1, x1 = discrete_momenta(system, g, x, w, h, retraction)
    p_arrive = p_minus if control is None else p_minus + 0.5 * h * control
    return p_plus, p_minus, p_arrive, g1, x1


def _relative_residual(system, A0, g, x, t, g1, x1, t1, w, v1, r1, r2, p0, p_arrive):
    """The step's reported residual: both solves' residuals relative to their scales
    (``A0 = A(q_k)``, already formed by :func:`_start`)."""
    k = system.n_velocities
    tiny = jnp.finfo(w.dtype).tiny
    A1 = system.constraint_matrix(g1, x1, t1)
    c_scale0 = _max_abs(A0) * _max_abs(w) + _max_abs(system.constraint_rhs(g, x, t)) + tiny
    c_scale1 = _max_abs(A1) * _max_abs(v1) + _max_abs(system.constraint_rhs(g1, x1, t1)) + tiny
    return jnp.maximum(
        jnp.maximum(_max_abs(r1[:k]) / (_max_abs(p0) + tiny), _max_abs(r1[k:]) / c_scale0),
        jnp.maximum(_max_abs(r2[:k]) / (_max_abs(p_arrive) + tiny), _max_abs(r2[k:]) / c_scale1),
    )


def _max_abs(a):
    return jnp.max(jnp.abs(a), initial=0.0)


class NonholonomicVI(GradientHooks, AbstractMethod):
    """Discrete Lagrange–d'Alembert(–Poincaré) variational integrator (second order, symmetric)
    for :class:`~geomjax.systems.AbstractNonholonomicSystem` (module docstring for the scheme).

    The state is a :class:`~geomjax.systems.NonholonomicState` ``(g, x, v, lam)``: the velocity
    satisfies the constraints at every step and ``lam`` are the multipliers at the node
    (constraint force ``A(q)^T lam``; module docstring).  Controls
    (``simulate(..., controls=...)``) are generalized forces ``(d + n,)`` (a body force on the
    group part), zero-order hold over each step.

    Arguments:
        retraction: ``"cayley"`` (default) or ``"exp"`` (``tau`` in ``g_{k+1} = g_k tau(h xi)``).
        newton_iters: Newton steps for the step velocity and ``lam_a`` (default 3, from the
            seed ``v + h/2 vdot``, ``h/2 lam`` of the node's acceleration and multiplier; the
            residual is reported).  ``2`` is enough while ``h |v|`` stays below ~1e-2 (residual
            at round-off; measured on the sleigh, the ball on a turntable and the rolling disk)
            and saves a quarter of the step; ``Solution.max_residual`` tells.
        projection_iters: Newton steps for the velocity/multiplier solve at the new node
            (default 1: exact when the kinetic energy is quadratic in ``v``).
        on_failure: ``"report"`` (the relative residual of both solves in ``Solution.stats``) or
            ``"raise"`` (``equinox.error_if`` above ``tol``, default ``1e3 · eps``).
        jacobian: how the Newton Jacobians are formed, the same numbers either way:
            ``"columns"`` (default; one linearization and ``k`` unrolled Jacobian–vector
            products) or ``"vectorized"`` (``jax.jacfwd``).
            With the scalarized default, ``"columns"`` was as fast or faster on every system
            tried (``geomjax bench nonholonomic --speed``).
        chord: keep the Newton Jacobian of the first iteration for the others (chord method,
            :func:`~geomjax.integrators.newton.newton_solve`): the Jacobian (``k`` JVPs and the
            Schur elimination) is formed once per step instead of ``newton_iters`` times.
            From the O(h²) seed the three iterations still reach round-off while ``h |v|``
            stays below ~2e-2 (measured at dt 0.05 on the sleigh, the ball on a turntable and
            the vertical disk; the tilting rolling disk needs dt ≤ 0.01, where Newton is at
            round-off to dt 0.05).  It pays under ``vmap``; unbatched, on cheap steps, the hoisted
            Jacobian can cost more kernels than it saves (``geomjax bench nonholonomic --speed``).
            Gradients are unchanged
            (implicit function theorem at the solution); ``Solution.max_residual`` tells
            whether it converged.
        scalarize: evaluate the step's pieces (the two residuals, their Jacobian solves, the
            momenta and the node acceleration) scalar by scalar
            (the same primitives on the same numbers,
            results equal to round-off): on XLA:CPU a step is then a few fused kernels instead
            of ~200 small ones, and under ``jax.vmap`` every scalar is one contiguous vector of
            the batch.  Default ``True``; a system whose functions use primitives without a
            scalar form (loops, ``cond``, custom derivative rules) falls back to the array
            form automatically.  The Newton iterates are carried as tuples of scalars
            (``newton_solve(..., scalarize=True)``: one contiguous vector per unknown under
            ``vmap``).  ``geomjax bench scalarize`` compares the two forms.
        early_exit: stop the Newton iterations of the step velocity once they have converged
            (at most ``newton_iters``; :func:`~geomjax.integrators.newton.newton_solve`'s
            ``early_exit``: after the iteration whose relative update is below ``sqrt(eps)/10``
            (float32: ``4 eps``), where the next one would change nothing but round-off).  Default ``True``; the
            same results to round-off and the same derivatives.  At dt 1e-3 two iterations
            reach round-off from the O(h²) seed, so the third is skipped (``geomjax bench
            nonholonomic --speed`` measures the gain).  Not with ``chord`` (linear convergence) nor
            where the iterations are unrolled (accelerators).
    """

    retraction: Literal["cayley", "exp"] = eqx.field(static=True, default="cayley")
    newton_iters: int = eqx.field(static=True, default=3)
    projection_iters: int = eqx.field(static=True, default=1)
    on_failure: Literal["report", "raise"] = eqx.field(static=True, default="report")
    tol: float | None = eqx.field(static=True, default=None)
    jacobian: Literal["columns", "vectorized"] = eqx.field(static=True, default="columns")
    chord: bool = eqx.field(static=True, default=False)
    scalarize: bool = eqx.field(static=True, default=True)
    early_exit: bool = eqx.field(static=True, default=True)
    order: ClassVar[int] = 2
    symmetric: ClassVar[bool] = True

    def __check_init__(self):
        where = "NonholonomicVI"
        if self.jacobian not in ("columns", "vectorized"):
            raise ValueError(
                f"{where}: argument 'jacobian' must be 'columns' or 'vectorized', "
                f"got {self.jacobian!r}"
            )
        if self.retraction not in ("cayley", "exp"):
            raise ValueError(
                f"{where}: argument 'retraction' must be 'cayley' or 'exp', got {self.retraction!r}"
            )
        for name in ("chord", "scalarize", "early_exit"):
            flag = getattr(self, name)
            if not isinstance(flag, bool):
                raise ValueError(f"{where}: argument '{name}' must be True or False, got {flag!r}")
        for name in ("newton_iters", "projection_iters"):
            it = getattr(self, name)
            if not (isinstance(it, int) and it >= 1):
                raise ValueError(f"{where}: argument '{name}' must be a positive int, got {it!r}")
        if self.on_failure not in ("report", "raise"):
            raise ValueError(
                f"{where}: argument 'on_failure' must be 'report' or 'raise', got {self.on_failure!r}"
            )

    def supports(self, system) -> bool:
        return isinstance(system, AbstractNonholonomicSystem)

    def forward_solutions(self, system, reverse_solutions, carry):
        # The step solves for z1 = (w, Lam_a) and z2 = (v_{k+1}, Lam_b), Lam = h/2 lam.  The
        # reverse step (h -> -h) from q_{k+1} has the same step velocity w and the multipliers
        # exchanged (lam_a' = lam_b, lam_b' = lam_a; module docstring), so it solves for
        # z1' = (w, -Lam_b) and z2' = (v_k, -Lam_a).
        z1r, z2r = reverse_solutions
        k = system.n_velocities
        state1, _ = carry
        z1 = jnp.concatenate([z1r[:k], -z2r[k:]])
        z2 = jnp.concatenate([state1.v, -z1r[k:]])
        return [z1, z2]

    # --- internal carry: (state, vdot) -----------------------------------------------------
    # The acceleration at the node comes out of the same saddle solve as the carried multiplier
    # (``system.acceleration``), so carrying it costs nothing; it seeds Newton with
    # ``w0 = v + h/2 vdot``, an O(h²) guess of the step velocity (the node velocity ``v`` is only
    # O(h)): the default three iterations reach round-off at larger steps than from ``v`` (rolling
    # disk, dt 0.05: residual 7.6e-11 from v, round-off from the seed), and two suffice at small
    # steps.  The seed has no derivative (newton_solve ignores it).
    def init(self, system, state, t=0.0):
        t = jnp.asarray(t, state.v.dtype)
        # the same scalarized program as the step's acceleration at q_{k+1}: the array form
        # compiled into ~100 small kernels and cost a third of a jitted simulate's compile time
        # (ball on a turntable: 0.46 s of 1.14 s)
        vdot, _ = self._sc(node_acceleration)(system, t, state.g, state.x, state.v, None)
        if self.scalarize:
            # restacked plainly: carried into the time loop straight from the scalarized
            # program's fused output stack, the loop ran 3% slower at batch 1024 (ball on a
            # turntable: 289 against 280 ns per body-step, measured; the same numbers)
            vdot = jnp.stack(jax.lax.unstack(vdot))
        return state, jax.lax.stop_gradient(vdot)

    def _sc(self, fun):
        """``fun`` scalarized (:func:`geomjax._internal.scalarize.scalarize`) unless ``scalarize=False``."""
        return scalarize(fun) if self.scalarize else fun

    def finalize(self, system, carry):
        return carry[0]

    def carry_beyond_state(self, system=None) -> bool:
        return True  # the acceleration seed

    def advance(self, system, carry, dt, control=None, t=0.0):
        state, vdot = carry
        new, vdot1, res, _ = self._solve_step(system, state, vdot, dt, control, t)
        return (self._check(new, res), vdot1), StepStats(residual=res)

    def solve_step(self, system, state, dt, control=None, t=0.0):
        """One step with its internals: ``(new_state, relative_residual, info)`` where ``info``
        holds the step velocity ``w``, the start-of-step multiplier ``lam_a`` (constraint impulse
        ``h/2 A(q_k)^T lam_a`` at ``q_k``), the end-of-step one ``lam_b`` (at ``q_{k+1}``) and the
        discrete Legendre transforms ``p_plus = −D_1 L_d(q_k, q_{k+1})`` and
        ``p_minus = D_2 L_d(q_k, q_{k+1})`` (without the control impulses ``h/2 u``; for a
        G-invariant Lagrangian ``Ad_{g_k^{-1}}^T p_plus[:d] = Ad_{g_{k+1}^{-1}}^T p_minus[:d]``, the
        discrete momentum map ``m_k^+`` of the module docstring)."""
        t = jnp.asarray(t, state.v.dtype)
        vdot, _ = system.acceleration(t, state.g, state.x, state.v, control)
        new, _, res, info = self._solve_step(system, state, vdot, dt, control, t)
        return new, res, info

    def _solve_step(self, system, state, vdot, dt, control, t):
        g, x, v = state.g, state.x, state.v
        dtype = v.dtype
        h = jnp.asarray(dt, dtype)
        t = jnp.asarray(t, dtype)
        k = system.n_velocities
        params, static = eqx.partition(system, eqx.is_array)
        sc = self._sc

        # 1. discrete Legendre transform + discrete constraint: step velocity w and lam_a
        A0, p0, z0 = sc(_start)(system, g, x, v, state.lam, vdot, h, t, control)
        res1 = _StepResidual(static, self.retraction)
        z, r1 = _solve(
            res1,
            z0,
            (params, g, x, p0, A0, h, t),
            self.newton_iters,
            _A_step,
            k,
            self.jacobian,
            self.chord,
            self.scalarize,
            self.early_exit,
        )
        w, Lam_a = z[:k], z[k:]

        # 2. new configuration and the momentum arriving at it
        p_plus, p_minus, p_arrive, g1, x1 = sc(_middle)(
            system, g, x, w, h, control, self.retraction
        )
        if needs_reorthonormalization(None, g1.dtype):
            g1 = system.group.renormalize(g1)  # one cheap O(eps) step back onto the group
        # 3. node velocity and multipliers lam_b (constraint imposed at the new node)
        t1 = t + h
        res2 = _ProjectionResidual(static)
        z, r2 = _solve(
            res2,
            jnp.concatenate([w, Lam_a]),
            (params, g1, x1, p_arrive, t1),
            self.projection_iters,
            _A_projection,
            k,
            self.jacobian,
            scalar=self.scalarize,
        )
        v1, Lam_b = z[:k], z[k:]

        res = sc(_relative_residual)(system, A0, g, x, t, g1, x1, t1, w, v1, r1, r2, p0, p_arrive)
        # the node acceleration and multiplier at q_{k+1} (the same program as in init)
        vdot1, lam1 = sc(node_acceleration)(system, t1, g1, x1, v1, control)
        info = {
            "w": w,
            "lam_a": 2.0 * Lam_a / h,
            "lam_b": 2.0 * Lam_b / h,
            "p_plus": p_plus,
            "p_minus": p_minus,
        }
        return NonholonomicState(g1, x1, v1, lam1), jax.lax.stop_gradient(vdot1), res, info

    def step(self, system, state, dt, control=None, t=0.0):
        new, res, _ = self.solve_step(system, state, dt, control, t)
        return self._check(new, res), StepStats(residual=res)

    def _check(self, new, res):
        if self.on_failure == "raise":
            tol = self.tol if self.tol is not None else 1e3 * float(jnp.finfo(res.dtype).eps)
            msg = (
                "NonholonomicVI: the implicit step did not converge (relative residual > tol); "
                "reduce dt or raise newton_iters / projection_iters"
            )
            new = eqx.tree_at(lambda s: s.v, new, eqx.error_if(new.v, ~(res <= tol), msg))
        return new

"""Lie group variational integrators (discrete Euler–Poincaré with forces).

Discretization (left trivialization; Lee, Leok & McClamroch 2005; Bou-Rabee & Marsden 2009;
Kobilarov & Marsden 2011).  With ``g_{k+1} = g_k f_k``, ``f_k = tau(h xi_k)`` (``tau`` the Cayley map
or exp) and the discrete Lagrangian

    L_d(g_k, g_{k+1}) = h l(xi_k) − h/2 V(g_k) − h/2 V(g_{k+1}),   l(xi) = ½ <xi, I xi>,

the discrete Lagrange–d'Alembert principle with the body forces ``f^± = h/2 (u_k + F)`` gives, for
body momenta ``mu_k`` (``M = −dV`` the left-trivialized potential force):

    Jtau_l(h xi_k)^{-T} I xi_k = mu_k + h/2 (M_k + u_k + F_k)  =: b_k        (implicit in xi_k)
    g_{k+1} = g_k tau(h xi_k)
    mu_{k+1} = Ad_{f_k}^T b_k + h/2 (M_{k+1} + u_k + F_{k+1})                  (explicit)

On SO(3) ``Ad_F^T = F^T`` and this is Lee et al.'s update
``Pi_{k+1} = F_k^T Pi_k + h/2 (F_k^T M_k + M_{k+1})``.  Writing the update through ``Ad_f^T b_k``
makes the discrete momentum map ``Ad_{g^{-1}}^T mu`` exactly invariant (no forces, invariant
potential) *whatever the residual of the implicit solve*; the residual only affects symplecticity
and accuracy, and is reported.

With the Cayley map the implicit equation is rational (no trigonometry); on SO(3) it reads

    I xi + h/2 xi × I xi + h²/4 (xi · I xi) xi = b,

and with ``c = 1 + h²/4 |xi|²`` it is linear in ``xi``, ``c I xi + h/2 xi × b = b``: ``xi`` is a
rational function of the one scalar ``c``, which solves a polynomial equation
(:func:`geomjax.integrators._so3_soa.cayley_solve_scalar`; a fixed number of scalar Newton
iterations from the second-order predictor ``I^{-1}(b − h/2 (I^{-1} b) × b)``), in a
struct-of-arrays layout (see :mod:`geomjax.integrators._so3_soa`).  ``legendre_solve="newton"``
keeps the former solver: Newton steps on the vector equation with a closed-form 3×3 Jacobian
and Cramer's rule.  On other groups the Jacobian of
``Jtau_l(h xi)^{-T} I xi`` comes from forward-mode autodiff.  Derivatives through the solve use the
implicit function theorem (:func:`geomjax.integrators.newton.newton_solve`).

(Lee et al.'s own discrete Lagrangian, ``(1/h) tr((I − F) J_d)``, is a different second-order
discretization of the same kinetic energy; both are variational and share the momentum update.)
"""

from __future__ import annotations

import contextlib
from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from .._internal.scalarize import scalarize
from .._linalg import spd_inverse, two_sum
from ..lie.so3 import SpecialOrthogonal3
from ..systems.base import AbstractLieGroupSystem
from . import _so3_soa as soa
from .base import AbstractMethod, GradientHooks, StepStats, needs_reorthonormalization
from .newton import (
    dense_jac_solve,
    newton_solve,
    recording_solutions,
    replaying_solutions,
    unroll_iterations,
)

__all__ = ["LGVI"]


#: ``checkpoint_name`` of the root of the discrete Legendre transform (reverse_mode_saves).
_ROOT = "lgvi_root"

#: Smallest group dimension at which the generic path keeps only its roots in plain reverse mode
#: at batch 1 too (reverse_mode_saves).  Gradient over forward time, 3000 steps, float64, with
#: the roots kept / every residual kept (2-core CPU, shared, CPU time, one run): SE(3) with
#: gravity, Cayley 1.97x / 3.28x, exp 1.40x / 2.37x; SO(3)² free body, exp 1.40x / 2.12x;
#: SE(2) with gravity 2.86x / 2.76x; SO(3) with exp, free body 5.75x / 5.14x, heavy top
#: 7.51x / 5.33x.  Under vmap (batch 256) the roots alone were faster on each of these.
_SAVES_UNBATCHED_DIM = 6


def _mT(a):
    return jnp.swapaxes(a, -1, -2)


class _GroupResidual(eqx.Module):
    """``Jtau_l(h xi)^{-T} I xi − b`` on a generic group (a static, hashable callable)."""

    group: object = eqx.field(static=True)
    retraction: str = eqx.field(static=True)

    def __call__(self, xi, args):
        I, b, h = args
        x = h * xi
        G = self.group
        Jinv = G.cay_jac_left_inv(x) if self.retraction == "cayley" else G.jac_left_inv(x)
        return _mT(Jinv) @ (I @ xi) - b


def _legendre_predictor(G, Iinv, b, h):
    """Second-order predictor of the Newton solve: ``xi0 = I⁻¹ (b + h/2 coad(I⁻¹ b, b))``."""
    return Iinv @ (b + 0.5 * h * G.coad(Iinv @ b, b))


class _Compensated(eqx.Module):
    """The LGVI's carry with a compensated momentum (generic groups): the state, whose ``mu``
    is the rounded sum, and ``lo``, the rounding error of that sum (``mu + lo`` exactly)."""

    state: object
    lo: object


class _WithTorque(eqx.Module):
    """The SO(3) kernel's carry followed by the potential torque at its rotation,
    ``M_k = −dV(R_k)``, as 3 more entries in the same layout (:func:`soa.join`'s ``tail``).

    A step needs ``M_k`` and ``M_{k+1}`` (module docstring), and ``M_{k+1}`` is the next step's
    ``M_k``: carried, the potential's gradient is evaluated once per step instead of twice, and
    plain reverse mode differentiates it once.  Only where the torque comes from autodiff
    (``closed_form_potential_force()`` is None): a closed form is cheaper to evaluate again.
    In the same layout as the state (:func:`soa.join`'s ``tail``): as a second output of the
    step XLA:CPU would compute the torque once per output fusion.  (Figures: the architecture
    page, "Measured design choices".)"""

    carry: object


#: whether the LGVI's SO(3) kernel carries the potential torque (:class:`_WithTorque`); read
#: when a step is traced.  ReversibleAdjoint's backward pass traces without it (its forward run
#: carries it): carried there, the backward carry also holds the torque and its cotangent, more
#: entries than ``adjoint._packed_carry`` packs, and the heavy top written as a function went
#: from 187 to 586 ns per step at batch 1 and from 95 to 603 ns per body-step at batch 1024
#: (a network potential gained: 3549 -> 2753 ns; CPU time, one run each)
_CARRY_TORQUE = [True]


@contextlib.contextmanager
def torque_in_carry(on: bool = True):
    """Within this context (read when a step is traced) the LGVI's SO(3) kernel carries the
    potential torque from one step to the next (:class:`_WithTorque`) or not (``on=False``)."""
    _CARRY_TORQUE.append(bool(on))
    try:
        yield
    finally:
        _CARRY_TORQUE.pop()


def _relative(r, b):
    scale = jnp.max(jnp.abs(b)) + jnp.finfo(b.dtype).tiny
    return jnp.max(jnp.abs(r)) / scale


class LGVI(GradientHooks, AbstractMethod):
    """Lie group variational integrator (second order, symplectic, momentum-preserving, on the
    group to round-off) for any :class:`~geomjax.systems.AbstractLieGroupSystem`.

    Arguments:
        retraction: ``"cayley"`` (default; rational, fastest) or ``"exp"``.
        newton_iters: Newton iterations per step (default 3: from the second-order predictor
            the error after k iterations is ``O((h|xi|)^(2^(k+1)))``); at most this many with
            ``early_exit``.  On the SO(3) Cayley path with ``legendre_solve="scalar"``: the
            number of scalar iterations (from its third-order predictor three reach
            round-off in float64 up to ``h|xi| = 0.4``, two up to 0.2).
        legendre_solve: on the SO(3) Cayley fast path, ``"scalar"`` (default) solves the
            discrete Legendre transform through the scalar equation for
            ``c = 1 + h²/4 |xi|²`` (module docstring) and returns ``xi`` in closed form; the
            residual of the vector equation at that ``xi`` is what ``Solution.stats`` reports
            and ``on_failure="raise"`` checks, and derivatives are the implicit-function-
            theorem derivatives of the vector equation, as before.  ``"newton"``: Newton on the
            vector equation (the former solver).  ``early_exit`` applies to either.  The same
            results to round-off; ``geomjax bench work-precision`` times the two side by side.
        on_failure: ``"report"`` (relative residual in ``Solution.stats``) or ``"raise"`` (an
            ``equinox.error_if`` when it exceeds ``tol``).
        tol: tolerance for ``"raise"`` (default ``1e3 · eps`` of the dtype).
        reorthonormalize: pull the configuration back onto the group at each step (one
            Björck step ``R ← R (3 I − R^T R)/2`` on rotation blocks; see
            :meth:`geomjax.LieGroup.renormalize`; on the SO(3) fast path it is folded into the
            update, ``R_{k+1} = R_k (1 + K + E)`` with ``F_k = 1 + K`` and ``R_k (1 + E)`` the
            Björck step of ``R_k`` (the dropped ``R_k E K`` is ``O(eps h|xi|)``), elsewhere
            applied after the update).  ``None`` (default)
            does so in float32 and below, where the round-off drift of ``R^T R`` would otherwise
            grow linearly (~1e-3 after 2e4 steps); the correction is ``O(eps)`` and leaves order
            and conservation properties unchanged.  In float64 the
            drift is at the 1e-13 level over 1e5 steps and nothing is done.  In float32 the
            step is cheap forwards but a large part of a :class:`~geomjax.ReversibleAdjoint`
            gradient's backward step (``geomjax bench adjoint`` measures both).  For
            gradients over horizons where the drift is small, ``reorthonormalize=False`` is the
            faster choice (:func:`geomjax.diagnostics` reports the group defect along a run).
        scalarize: on groups other than the SO(3) Cayley fast path (which is written on scalars
            by hand), evaluate the step's pieces scalar by scalar
            (the same numbers to round-off, a few fused
            kernels per step instead of one per small array operation).  Default ``True``.
        early_exit: stop the Newton iterations once converged
            (:func:`~geomjax.integrators.newton.newton_solve`'s ``early_exit``: after the
            iteration whose relative update is below ``sqrt(eps)/10``, where the next one would
            change nothing but round-off; in float32 below ``4 eps``: the error left by the
            looser test, ~1e-9 relative, has one sign and drifted the energy by 4.4e-6 over 1e5
            steps; under ``jax.vmap`` once every member has).  Default
            ``True``: the same results to round-off, the same derivatives; it skips the iterations
            that would change nothing but round-off.  Where the iterations are unrolled
            (accelerators) all ``newton_iters`` run.
        compensate: on the SO(3) Cayley fast path, carry the momentum as ``Pi + Pi_lo`` and add
            each step's increment ``Pi_{k+1} − Pi_k`` with compensated (Kahan/TwoSum) summation
            (the carry grows from 12 to 15
            entries, the saved states are unchanged).  ``None`` (default) does so in float32 and
            below.  The rotation itself is applied in increment form in every dtype
            (:meth:`geomjax.LieGroup.cay_coAd`).  With compensation the relative error of ``|Pi|²``
            stays at the rounding of one step over long float32 runs (``geomjax bench float32``
            measures it against the uncompensated increment form).  Derivatives are those of the
            uncompensated step (``Pi_lo`` carries no tangent).
    """

    retraction: Literal["cayley", "exp"] = eqx.field(static=True, default="cayley")
    newton_iters: int = eqx.field(static=True, default=3)
    on_failure: Literal["report", "raise"] = eqx.field(static=True, default="report")
    tol: float | None = eqx.field(static=True, default=None)
    reorthonormalize: bool | None = eqx.field(static=True, default=None)
    scalarize: bool = eqx.field(static=True, default=True)
    early_exit: bool = eqx.field(static=True, default=True)
    compensate: bool | None = eqx.field(static=True, default=None)
    legendre_solve: Literal["scalar", "newton"] = eqx.field(static=True, default="scalar")
    order: ClassVar[int] = 2
    symmetric: ClassVar[bool] = True
    packs_reverse_carry: ClassVar[bool] = True  # measured: adjoint._packed_carry

    def __check_init__(self):
        if not isinstance(self.early_exit, bool):
            raise ValueError(
                f"LGVI: argument 'early_exit' must be True or False, got {self.early_exit!r}"
            )
        if self.compensate not in (None, True, False):
            raise ValueError(
                f"LGVI: argument 'compensate' must be None, True or False, got {self.compensate!r}"
            )
        if self.retraction not in ("cayley", "exp"):
            raise ValueError(
                f"LGVI: argument 'retraction' must be 'cayley' or 'exp', got {self.retraction!r}"
            )
        if not (isinstance(self.newton_iters, int) and self.newton_iters >= 1):
            raise ValueError(
                f"LGVI: argument 'newton_iters' must be a positive int, got {self.newton_iters!r}"
            )
        if self.legendre_solve not in ("scalar", "newton"):
            raise ValueError(
                "LGVI: argument 'legendre_solve' must be 'scalar' or 'newton', got "
                f"{self.legendre_solve!r}"
            )
        if self.on_failure not in ("report", "raise"):
            raise ValueError(
                f"LGVI: argument 'on_failure' must be 'report' or 'raise', got {self.on_failure!r}"
            )

    def supports(self, system) -> bool:
        return isinstance(system, AbstractLieGroupSystem)

    def forward_solutions(self, system, reverse_solutions, carry):
        # one solve per step, for xi_k with f_k = tau(h xi_k); the reverse step from
        # (g_{k+1}, mu_{k+1}) solves for xi' with tau(-h xi') = f_k^{-1} = tau(-h xi_k)
        # (tau(-x) = tau(x)^{-1} for the Cayley map and exp): xi' = xi_k
        return list(reverse_solutions)

    def backward_step(self, system, dtype):
        # hand-written where the fast path's step is the whole step: the SO(3) Cayley scalar
        # solve with no potential, no force, uncompensated, no Björck step, no in-step check
        # (GradientHooks.backward_step; the other cases keep JAX's VJP of the step)
        if not (
            self._fast(system)
            and self.legendre_solve == "scalar"
            and self.on_failure == "report"
            and not system.has_potential
            and getattr(system, "force", None) is None
            and not self._compensated(dtype)
            and not needs_reorthonormalization(self.reorthonormalize, dtype)
        ):
            return None
        principal = getattr(system, "principal_axes", False)

        def parameters(system):
            return soa.inertia_entries(system.inertia_matrix(), principal)

        def backward(I, carry, dt, control, ct_next, need_params, need_dt):
            # the reverse step: _advance_so3's operations with step -dt
            R1, Pi1 = soa.split(carry)
            h = jnp.asarray(-dt, soa.carry_dtype(carry))
            half = 0.5 * h
            u = None if control is None else soa.as_tuple3(control)
            b = Pi1 if u is None else tuple(Pi1[i] + half * u[i] for i in range(3))
            x, factor = soa.cayley_guess(I, b, h, self.newton_iters, self.early_exit)
            # as in _advance_so3: no iteration, the implicit-function-theorem derivatives of
            # the root (a second derivative differentiates this backward step)
            x, _ = newton_solve(
                soa.cayley_residual, x, (I, b, h), iters=0, jac_solve=soa.cayley_jac_solve
            )
            Kr = soa.cay_increment(tuple(h * xi for xi in x), factor)
            R0 = soa.matmul_increment(R1, Kr)
            Pi0 = soa.rotate_increment(Kr, b)
            if u is not None:
                Pi0 = tuple(Pi0[i] + half * u[i] for i in range(3))
            # the forward step from (R0, Pi0) solves for the same x (forward_solutions), and
            # its increment is Kr^T (cay(-w) = cay(w)^T)
            K = tuple(Kr[3 * j + i] for i in range(3) for j in range(3))
            ct_R, ct_Pi, ct_I, ct_h, ct_u = soa.lgvi_step_vjp(
                I, R0, Pi0, x, -h, u, ct_next[:9], ct_next[9:12], need_params, need_dt, K, factor
            )
            return soa.join(R0, Pi0), (*ct_R, *ct_Pi), ct_I, ct_h, ct_u

        return parameters, backward

    def reverse_mode_saves(self, system, batched=False):
        # the root of the discrete Legendre transform (and the SO(3) kernel's factor c): the
        # explicit rest of the step is cheaper to recompute than to store and read back
        # (GradientHooks.reverse_mode_saves).  Where the root comes from newton_solve it
        # names it where its implicit-function-theorem derivatives read it, so the backward
        # pass recomputes the step without the Newton iterations.  On the SO(3) Cayley path
        # only under vmap: at batch 1 the recomputation cost more (see
        # simulate._integrate_traced; legendre_solve="newton", batch 1024, free body / heavy
        # top, 100 steps, gradient over forward 12.1x / 11.7x keeping every residual, 3.7x /
        # 4.2x the roots; 2-core CPU, shared, CPU time, one run).  On the generic path under
        # vmap on every group measured and at batch 1 from dimension 6 (_SAVES_UNBATCHED_DIM)
        if self._fast(system):
            return (_ROOT,) if batched else None
        if batched or system.group.dim >= _SAVES_UNBATCHED_DIM:
            return (_ROOT,)
        return None

    def _fast(self, system) -> bool:
        return isinstance(system.group, SpecialOrthogonal3) and self.retraction == "cayley"

    def _compensated(self, dtype) -> bool:
        return bool(self.compensate) or (self.compensate is None and jnp.finfo(dtype).bits <= 32)

    def retract(self, G, x):
        return G.cay(x) if self.retraction == "cayley" else G.exp(x)

    # --- internal layout -------------------------------------------------------------------
    def init(self, system, state, t=0.0):
        if self._fast(system):
            R, Pi = system.split(state)
            return self._with_torque(system, soa.to_carry(R, Pi, self._compensated(Pi.dtype)))
        _, mu = system.split(state)
        if self._compensated(mu.dtype):
            return _Compensated(state, jnp.zeros_like(mu))
        return state

    def _carries_torque(self, system) -> bool:
        # where the torque comes from autodiff (a potential without a closed form): a closed
        # form costs less to evaluate again than to carry (_WithTorque)
        return (
            self._fast(system)
            and bool(system.has_potential)
            and system.closed_form_potential_force() is None
            and _CARRY_TORQUE[-1]
        )

    def _with_torque(self, system, carry):
        """The SO(3) kernel's ``carry`` followed by the potential torque at its rotation
        (:class:`_WithTorque`), where the system has a potential."""
        if not self._carries_torque(system):
            return carry
        R, Pi = soa.split(carry)
        M = soa.potential_force(system, R)
        return _WithTorque(soa.join(R, Pi, soa.compensation(carry), tail=M))

    def carry_beyond_state(self, system=None) -> bool:
        # the carried torque (_WithTorque) is recomputed from the state at each saved block, so
        # that a continued run starts from the same bits as the uninterrupted one
        return system is None or self._carries_torque(system)

    def finalize(self, system, carry):
        if isinstance(carry, _WithTorque):
            carry = soa.split_tail(carry.carry, 3)[0]
        if self._fast(system):
            return system.make_state(*soa.from_carry(carry))
        if isinstance(carry, _Compensated):
            g, mu = system.split(carry.state)
            return system.make_state(g, mu + carry.lo)
        return carry

    def carry_extra(self, system, carry):
        # the compensated momentum (hi, lo): finalize rounds hi + lo into the state
        if isinstance(carry, _WithTorque):
            carry = soa.split_tail(carry.carry, 3)[0]
        if self._fast(system):
            return soa.carry_extra(carry)
        if isinstance(carry, _Compensated):
            _, mu = system.split(carry.state)
            return jax.lax.stop_gradient({"momentum": mu, "momentum_lo": carry.lo})
        return None

    def resume(self, system, state, extra, t=0.0):
        if extra is None or not self._compensated(system.split(state)[1].dtype):
            return self.init(system, state, t)
        g, mu = system.split(state)
        hi, lo = soa.resume_momentum(mu, extra)
        if self._fast(system):
            return self._with_torque(system, soa.to_carry(g, hi, True, lo))
        return _Compensated(system.make_state(g, hi), lo)

    def step(self, system, state, dt, control=None, t=0.0):
        carry, stats = self.advance(system, self.init(system, state), dt, control, t)
        return self.finalize(system, carry), stats

    def _check(self, res, mu1):
        if self.on_failure == "raise":
            tol = self.tol if self.tol is not None else 1e3 * float(jnp.finfo(res.dtype).eps)
            msg = "LGVI: the implicit step did not converge (relative residual > tol); reduce dt or raise newton_iters"
            mu1 = eqx.error_if(mu1, ~(res <= tol), msg)
        return mu1

    def advance(self, system, carry, dt, control=None, t=0.0):
        if isinstance(carry, _WithTorque):
            inner, M0 = soa.split_tail(carry.carry, 3)
            out, stats = self._advance_so3(system, inner, dt, control, t, M0)
            return _WithTorque(out), stats
        if self._fast(system):
            return self._advance_so3(system, carry, dt, control, t)
        return self._advance_generic(system, carry, dt, control, t)

    # --- generic group --------------------------------------------------------------------
    def solve_legendre(self, system, b, h):
        """Solve the discrete Legendre transform for ``xi`` given ``b``: ``(xi, relative residual)``."""
        I = system.inertia_matrix()
        Iinv = spd_inverse(I)  # unbatched under vmap: shared by the batch
        xi0 = self._maybe_scalar(_legendre_predictor)(system.group, Iinv, b, h)
        return self._solve_legendre(system, I, b, h, xi0)

    def _maybe_scalar(self, fun):
        return scalarize(fun) if self.scalarize else fun

    def _solve_legendre(self, system, I, b, h, xi0):
        residual = _GroupResidual(system.group, self.retraction)
        # column JVPs: 2.4x faster than jax.jacfwd per unbatched SE(3) step (dense_jac_solve)
        jac_solve = dense_jac_solve(residual, columns=True)
        # ReversibleAdjoint's reverse step under vmap (its roots are recorded and handed to
        # the forward step): chord iterations until the update is at round-off (newton_solve's
        # early_exit with chord), the Jacobian formed once, at the predictor.  From the
        # predictor's error e0 ~ (h|xi|)² the error after k chord iterations is ~ e0^(k+1)
        # (Newton: e0^(2^k)), but an iteration is a residual and an elimination against the
        # loop-invariant Jacobian, not a Jacobian by 6 JVPs and its elimination.  SE(3) with
        # gravity, update sizes of the reverse solve: h|xi| = 0.006: 3 chord iterations (1.6e-5,
        # 1.3e-13, 1.7e-16; Newton 2); 0.08: 4; 0.27: 7 (Newton 3).  At most 2 newton_iters + 2,
        # which reach Newton's order e0^(2^newton_iters) from the same guess.  The reconstructed
        # state equals Newton's to round-off.  Under vmap only: at batch 1 XLA:CPU forms the
        # hoisted Jacobian's elimination in ~30 small kernels that each re-evaluate Jacobian
        # entries (figures: the architecture page, "Measured design choices").  Only where the
        # iterations are a rolled loop (CPU; unrolled, early_exit does not apply and all
        # iterations would run), and from dimension 6 (_SAVES_UNBATCHED_DIM; smaller groups,
        # whose Jacobian is cheaper, were not measured and keep Newton).
        chord = (
            self.early_exit
            and recording_solutions(batched=True)
            and not unroll_iterations()
            and system.group.dim >= _SAVES_UNBATCHED_DIM
        )
        xi, r = newton_solve(
            residual,
            xi0,
            (I, b, h),
            iters=2 * self.newton_iters + 2 if chord else self.newton_iters,
            jac_solve=jac_solve,
            chord=chord,
            scalarize=self.scalarize,
            early_exit=self.early_exit,
            name=_ROOT,
        )
        return xi, _relative(r, b)

    def _forces(self, system, g, mu, control, t):
        """``(M + u, F)``: conservative + control force, and the non-conservative force (or None)."""
        f = system.potential_force(g) if system.has_potential else jnp.zeros_like(mu)
        if control is not None:
            f = f + control
        return f, system.external_force(t, g, mu)

    def _end_forces(self, system, g1, mu1, F0, control, t1, h, base=None):
        """Add ``h/2 (M_{k+1} + u_k + F_{k+1})`` to ``mu1 = Ad_f^T b`` (or, with ``base``, to the
        increment ``mu1 = Ad_f^T b − base`` of the momentum ``base``).

        A velocity-dependent force makes the exact discrete Lagrange–d'Alembert update implicit;
        we evaluate ``F_{k+1}`` at the predicted momentum ``mu1 + h/2 (M_{k+1} + u_k + F_k)``
        (one explicit Heun-type correction), which keeps the method second order."""
        if system.has_potential:
            mu1 = mu1 + 0.5 * h * system.potential_force(g1)
        if control is not None:
            mu1 = mu1 + 0.5 * h * control
        if F0 is not None:
            pred = mu1 if base is None else base + mu1
            F1 = system.external_force(t1, g1, pred + 0.5 * h * F0)
            mu1 = mu1 + 0.5 * h * F1
        return mu1

    def _advance_generic(self, system, carry, dt, control, t):
        G = system.group
        state, lo = (carry.state, carry.lo) if isinstance(carry, _Compensated) else (carry, None)
        g, mu = system.split(state)
        h = jnp.asarray(dt, mu.dtype)
        I = system.inertia_matrix()
        Iinv = spd_inverse(I)  # unbatched under vmap: shared by the batch

        def start(system, Iinv, g, mu, control, t, h):
            f0, F0 = self._forces(system, g, mu, control, t)
            inc = 0.5 * h * (f0 if F0 is None else f0 + F0)
            b = mu + inc
            return b, inc, F0, _legendre_predictor(G, Iinv, b, h)

        b, inc0, F0, xi0 = self._maybe_scalar(start)(system, Iinv, g, mu, control, t, h)
        xi, res = self._solve_legendre(system, I, b, h, xi0)

        def finish(system, g, mu, lo, xi, b, inc0, F0, control, t, h):
            f = self.retract(G, h * xi)
            g1 = G.compose(g, f)
            if needs_reorthonormalization(self.reorthonormalize, mu.dtype):
                g1 = G.renormalize(g1)  # keeps the group defect at round-off in float32
            # Ad_f^T b − b formed without the identity (LieGroup.cay_coAd_increment: no
            # one-signed float32 drift of the Casimirs)
            coAd = G.cay_coAd_increment if self.retraction == "cayley" else G.exp_coAd_increment
            d = coAd(h * xi, b)
            if lo is None:
                return g1, self._end_forces(system, g1, b + d, F0, control, t + h, h), None
            # the whole step as one increment of mu, added with compensation (see compensate)
            d = self._end_forces(system, g1, inc0 + d, F0, control, t + h, h, base=mu)
            mu1, lo1 = two_sum(mu, d + lo)
            return g1, mu1, lo1

        g1, mu1, lo1 = self._maybe_scalar(finish)(system, g, mu, lo, xi, b, inc0, F0, control, t, h)
        state1 = system.make_state(g1, self._check(res, mu1))
        return (state1 if lo is None else _Compensated(state1, lo1)), StepStats(residual=res)

    # --- SO(3), Cayley: struct-of-arrays kernel ------------------------------------------------
    def _so3_conservative(self, system, R, control, M=None):
        """``(M(R) + u, M(R))`` as 3 scalars each (or None): the potential torque from the
        Euclidean gradient (``M``: the torque at ``R`` if the caller has it) and the control."""
        if M is None and system.has_potential:
            M = soa.potential_force(system, R)
        f = M
        if control is not None:
            u = (control[0], control[1], control[2])
            f = u if f is None else tuple(f[i] + u[i] for i in range(3))
        return f, M

    def _advance_so3(self, system, carry, dt, control, t, M0=None):
        """One step of the SO(3) kernel; ``M0``: the potential torque at the carry's rotation
        (:class:`_WithTorque`), then the carry returned ends with the torque at the new one."""
        R, Pi = soa.split(carry)
        lo = soa.compensation(carry)  # None unless compensated (float32)
        dtype = soa.carry_dtype(carry)
        h = jnp.asarray(dt, dtype)
        half = 0.5 * h
        I = soa.inertia_entries(system.inertia_matrix(), getattr(system, "principal_axes", False))
        has_force = getattr(system, "force", None) is not None

        f0, _ = self._so3_conservative(system, R, control, M0)
        F0 = soa.as_tuple3(system.external_force(t, *soa.pack((R, Pi)))) if has_force else None
        b = Pi
        for f in (f0, F0):
            if f is not None:
                b = tuple(b[i] + half * f[i] for i in range(3))
        cay_factor = None
        if self.legendre_solve == "scalar":
            # the root from the scalar equation for c = 1 + h²/4 |x|² (soa.cayley_solve_scalar:
            # newton_iters fixed scalar Newton iterations, x in closed form); newton_solve runs
            # no iteration from it: it returns the residual of the vector equation there (the
            # honest convergence test: reported in the stats, checked with on_failure="raise")
            # and differentiates by the implicit function theorem
            x0, cay_factor = soa.cayley_guess(I, b, h, self.newton_iters, self.early_exit)
            x0, cay_factor = checkpoint_name((x0, cay_factor), _ROOT)
            x, r = newton_solve(
                soa.cayley_residual, x0, (I, b, h), iters=0, jac_solve=soa.cayley_jac_solve
            )
            if replaying_solutions():  # x is the recorded root: the solve above is dead code
                cay_factor = None
        elif replaying_solutions():
            # ReversibleAdjoint's forward linearization: no iterations run, so the unknowns
            # stay scalars, whose cotangents are scalars too (with the (3,) vector, reverse mode
            # transposes its slices into pads, and XLA:CPU recomputed the transposed solve once
            # per pad)
            x, r = newton_solve(
                soa.cayley_residual,
                soa.cayley_predictor(I, b, h),
                (I, b, h),
                iters=self.newton_iters,
                jac_solve=soa.cayley_jac_solve,
            )
        else:
            # the iterate as one (3,) array: one fused update per Newton iteration (at batch 1
            # a tuple of scalars costs a kernel per component; _linalg.select_stack)
            x, r = newton_solve(
                soa.cayley_residual_vec,
                soa.as_vector3(soa.cayley_predictor(I, b, h)),
                (I, b, h),
                iters=self.newton_iters,
                jac_solve=soa.cayley_jac_solve_vec,
                early_exit=self.early_exit,
                name=_ROOT,
            )
            x, r = soa.as_tuple3(x), soa.as_tuple3(r)
        if (
            soa.hand_written()
            and lo is None
            and not needs_reorthonormalization(self.reorthonormalize, dtype)
        ):
            # the explicit part with its hand-written derivative (soa.cayley_step: reverse
            # mode runs soa.lgvi_step_vjp, with x's implicit-function-theorem derivatives)
            root = x if cay_factor is None else (x, cay_factor)
            R1, Pi1 = soa.cayley_step(I, R, b, h, root, cay_factor is not None)
        else:
            # F = 1 + K, in increment form (soa.cay_increment: no drift of |Pi| in float32)
            K = soa.cay_increment(tuple(h * xi for xi in x), cay_factor)
            K_R = K
            if needs_reorthonormalization(self.reorthonormalize, dtype):
                # one Björck step on the incoming R, R (1 + E) with E = (1 − R^T R)/2 = O(eps),
                # folded into the rotation: R1 = R (1 + K + E), which drops R E K = O(eps h|xi|)
                # from R (1 + E)(1 + K).  The defect D of R1^T R1 − 1 then obeys
                # D_{k+1} = O(|K| D_k) + O(eps), |K| < 1: it stays O(eps) as with the full
                # step.  Folded, each of the 9 entries of R1 (each fused separately by XLA:CPU,
                # which recomputes shared producers in each) costs 3 more multiply-adds instead
                # of a whole Björck row (float32, batch 1024, batch-last carry: 0.77 -> 0.86x
                # of the batch-last kernel, CPU time, one run)
                E = soa.bjorck_increment(R)
                K_R = tuple(K[i] + E[i] for i in range(9))
            R1 = soa.matmul_increment(R, K_R)
            Pi1 = soa.rotate_increment(K, b)
        f1, M1 = self._so3_conservative(system, R1, control)
        if f1 is not None:
            Pi1 = tuple(Pi1[i] + half * f1[i] for i in range(3))
        if F0 is not None:
            # velocity-dependent force at the predicted end momentum (see _end_forces)
            pred = tuple(Pi1[i] + half * F0[i] for i in range(3))
            F1 = soa.as_tuple3(system.external_force(t + h, *soa.pack((R1, pred))))
            Pi1 = tuple(Pi1[i] + half * F1[i] for i in range(3))
        if lo is not None:
            # the same update as the sum of its increments, added to Pi with compensation
            # (soa.add_compensated); Pi1 above is then dead code, removed by XLA
            d = soa.matT_vec(K, b)
            for f in (f0, F0, f1, F1 if F0 is not None else None):
                if f is not None:
                    d = tuple(d[i] + half * f[i] for i in range(3))
            Pi1, lo = soa.add_compensated(Pi, lo, d)
        scale = (
            jnp.maximum(jnp.maximum(jnp.abs(b[0]), jnp.abs(b[1])), jnp.abs(b[2]))
            + jnp.finfo(dtype).tiny
        )
        res = jnp.maximum(jnp.maximum(jnp.abs(r[0]), jnp.abs(r[1])), jnp.abs(r[2])) / scale
        out = soa.join(R1, Pi1, lo, tail=() if M0 is None else M1)
        if self.on_failure == "raise":
            out = self._check(res, out)
        return out, StepStats(residual=res)

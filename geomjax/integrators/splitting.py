"""Explicit symmetric splitting for rigid bodies on SO(3) (McLachlan 1993; Touma & Wisdom 1994).

The free rigid body Hamiltonian in principal axes, ``H = Σ_i Pi_i²/(2 I_i)``, splits into three
exactly integrable pieces: under ``H_i`` the body rotates about its i-th principal axis at the
constant rate ``Omega_i = Pi_i/I_i``, so ``R ← R rot_i(τ Omega_i)`` and ``Pi ← rot_i(−τ Omega_i) Pi``
(by default with the rational Cayley rotation of the same sub-flow, see ``exact_subflows``).
The palindromic composition ``1(h/2) 2(h/2) 3(h) 2(h/2) 1(h/2)`` is explicit, second order,
symplectic and Lie–Poisson: |Pi| and the spatial momentum ``R Pi`` are preserved to round-off.
A potential enters by a Strang kick–drift–kick (``Pi += h/2 M(R)`` before and after).
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._internal.tracing import is_traced
from ..lie.so3 import SpecialOrthogonal3
from ..systems.base import AbstractLieGroupSystem
from . import _so3_soa as soa
from .base import AbstractMethod, GradientHooks, StepStats, needs_reorthonormalization

__all__ = ["RigidBodySplitting"]


class RigidBodySplitting(GradientHooks, AbstractMethod):
    """Explicit second-order splitting for rigid bodies on SO(3) whose inertia is diagonal
    (principal axes); potentials and forces by kick–drift–kick.

    Arguments:
        exact_subflows: rotate by the exact angle (cos/sin) in each axis sub-flow; the default
            uses the Cayley rotation (implicit midpoint of the linear sub-flow, explicit here),
            which keeps the method symplectic, Lie–Poisson and second order at lower cost.
        reorthonormalize: one Björck step on ``R`` per step; ``None`` (default): in float32 and
            below only (as for :class:`geomjax.LGVI`).
        compensate: carry the momentum as ``Pi + Pi_lo`` and add each step's increment (the
            sum of the kicks' and the five sub-rotations' increments) with compensated
            summation (the carry grows
            from 12 to 15 entries, the saved states are unchanged), as
            :class:`geomjax.LGVI`'s ``compensate``.  ``None`` (default): in float32 and below.
            Without it, each of the five sub-rotations rounds ``Pi`` and the Casimir
            ``|Pi|²`` random-walks (``benchmarks/bench_float32.py``); with it the saved
            ``Pi`` is off by the rounding of one step.  Derivatives are those of the
            uncompensated step (``Pi_lo`` carries no tangent).
    """

    exact_subflows: bool = eqx.field(static=True, default=False)
    reorthonormalize: bool | None = eqx.field(static=True, default=None)
    compensate: bool | None = eqx.field(static=True, default=None)
    order: ClassVar[int] = 2
    symmetric: ClassVar[bool] = True
    packs_reverse_carry: ClassVar[bool] = True  # measured: adjoint._packed_carry

    def supports(self, system) -> bool:
        return isinstance(system, AbstractLieGroupSystem) and isinstance(
            system.group, SpecialOrthogonal3
        )

    def validate(self, system) -> None:
        I = system.inertia_matrix()
        if not is_traced(I):  # checked eagerly (NumPy) when the values are known
            I = np.asarray(I)
            off = np.max(np.abs(I - np.diag(np.diagonal(I))))
            if off > 0:
                raise ValueError(
                    "RigidBodySplitting: the system's 'inertia' must be diagonal (principal axes); "
                    f"largest off-diagonal entry {float(off):.3g}. Rotate to principal axes or use LGVI."
                )

    def __check_init__(self):
        if self.compensate not in (None, True, False):
            raise ValueError(
                "RigidBodySplitting: argument 'compensate' must be None, True or False, got "
                f"{self.compensate!r}"
            )

    def _compensated(self, dtype) -> bool:
        return bool(self.compensate) or (self.compensate is None and jnp.finfo(dtype).bits <= 32)

    def init(self, system, state, t=0.0):
        R, Pi = system.split(state)
        return soa.to_carry(R, Pi, self._compensated(Pi.dtype))

    def finalize(self, system, carry):
        return system.make_state(*soa.from_carry(carry))

    def carry_extra(self, system, carry):
        return soa.carry_extra(carry)  # the compensated momentum (LGVI.carry_extra)

    def resume(self, system, state, extra, t=0.0):
        R, Pi = system.split(state)
        if extra is None or not self._compensated(Pi.dtype):
            return self.init(system, state, t)
        hi, lo = soa.resume_momentum(Pi, extra)
        return soa.to_carry(R, hi, True, lo)

    def step(self, system, state, dt, control=None, t=0.0):
        carry, stats = self.advance(system, self.init(system, state), dt, control, t)
        return self.finalize(system, carry), stats

    def advance(self, system, carry, dt, control=None, t=0.0):
        if soa.compensation(carry) is not None:
            return self._advance_compensated(system, carry, dt, control, t)
        R, Pi = soa.from_carry(carry)
        I = system.inertia_matrix()
        h = jnp.asarray(dt, Pi.dtype)
        inv_I = 1.0 / jnp.diagonal(I)

        def conservative(R):
            f = jnp.zeros_like(Pi)
            if system.has_potential:
                f = f + system.potential_force(R)
            if control is not None:
                f = f + control
            return f

        has_force = getattr(system, "force", None) is not None
        needs_kick = system.has_potential or control is not None or has_force
        F0 = system.external_force(t, R, Pi) if has_force else None
        # the sub-flows read the carry's scalar entries directly (a slice of the carry, not of a
        # rebuilt vector: ReversibleAdjoint feeds the carry as scalars, see _internal.scalar_entries)
        Rs, Ps = soa.split(carry)
        if needs_kick:
            f0 = conservative(R)
            Pi = Pi + 0.5 * h * (f0 if F0 is None else f0 + F0)
            Ps = tuple(Pi[i] for i in range(3))
        for i, tau in ((0, 0.5), (1, 0.5), (2, 1.0), (1, 0.5), (0, 0.5)):
            Rs, Ps = soa.axis_flow(Rs, Ps, inv_I, i, tau * h, self.exact_subflows)
        if needs_reorthonormalization(self.reorthonormalize, Pi.dtype):
            Rs = soa.bjorck(Rs)
        if not needs_kick:  # the carry straight from the scalars (no reshape to transpose)
            return soa.join(Rs, Ps), StepStats.explicit(Pi.dtype)
        R, Pi = soa.from_carry(soa.join(Rs, Ps))
        Pi = Pi + 0.5 * h * conservative(R)
        if F0 is not None:
            # velocity-dependent force at the predicted end momentum (second order)
            Pi = Pi + 0.5 * h * system.external_force(t + h, R, Pi + 0.5 * h * F0)
        return soa.to_carry(R, Pi), StepStats.explicit(Pi.dtype)

    def _advance_compensated(self, system, carry, dt, control, t):
        """:meth:`advance` on the ``(15,)`` carry ``(R, Pi, Pi_lo)``: the same sub-steps from
        ``Pi``, their increments summed and added to ``Pi + Pi_lo`` with compensation."""
        Rs, Ps = soa.split(carry)
        lo = soa.compensation(carry)
        dtype = soa.carry_dtype(carry)
        h = jnp.asarray(dt, dtype)
        half = 0.5 * h
        inv_I = 1.0 / jnp.diagonal(system.inertia_matrix())
        has_force = getattr(system, "force", None) is not None

        def conservative(Rs):
            f = None
            if system.has_potential:
                f = soa.potential_force(system, Rs)
            if control is not None:
                u = (control[0], control[1], control[2])
                f = u if f is None else tuple(f[i] + u[i] for i in range(3))
            return f

        def add(P, d, f):
            inc = tuple(half * f[i] for i in range(3))
            return tuple(P[i] + inc[i] for i in range(3)), tuple(d[i] + inc[i] for i in range(3))

        zero = jnp.zeros((), dtype)
        d = (zero, zero, zero)
        P = Ps
        f0 = conservative(Rs)
        F0 = soa.as_tuple3(system.external_force(t, *soa.pack((Rs, Ps)))) if has_force else None
        for f in (f0, F0):
            if f is not None:
                P, d = add(P, d, f)
        for i, tau in ((0, 0.5), (1, 0.5), (2, 1.0), (1, 0.5), (0, 0.5)):
            Rs, P, d = soa.axis_flow(Rs, P, inv_I, i, tau * h, self.exact_subflows, d)
        if needs_reorthonormalization(self.reorthonormalize, dtype):
            Rs = soa.bjorck(Rs)
        f1 = conservative(Rs)
        if f1 is not None:
            P, d = add(P, d, f1)
        if F0 is not None:
            # velocity-dependent force at the predicted end momentum (second order)
            pred = tuple(P[i] + half * F0[i] for i in range(3))
            F1 = soa.as_tuple3(system.external_force(t + h, *soa.pack((Rs, pred))))
            P, d = add(P, d, F1)
        Pi1, lo1 = soa.add_compensated(Ps, lo, d)
        return soa.join(Rs, Pi1, lo1), StepStats.explicit(dtype)

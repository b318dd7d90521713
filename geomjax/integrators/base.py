"""The integrator interface: a method is an :class:`equinox.Module` with a pure ``step``."""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

__all__ = ["AbstractMethod", "StepStats"]


class StepStats(eqx.Module):
    """Per-step diagnostics returned by every method.

    ``residual``: relative residual of the implicit solve after the last Newton iteration
    (0 for explicit methods).  ``simulate`` reports its maximum per saved block.
    """

    residual: jax.Array

    @classmethod
    def explicit(cls, dtype):
        return cls(residual=jnp.zeros((), dtype))


class AbstractMethod(eqx.Module):
    """A one-step integrator.

    Concrete methods implement ``step(system, state, dt, control, t) -> (state, StepStats)``: a
    pure function (MJX style), jittable and vmappable, with fixed work per step.
    """

    order: ClassVar[int]
    #: ``Φ_{−h} ∘ Φ_h = id`` (with the same control, from time ``t + h``): the step is its own
    #: inverse with ``−dt`` (used by :class:`geomjax.Composition` and :class:`geomjax.ReversibleAdjoint`)
    symmetric: ClassVar[bool] = False

    @abc.abstractmethod
    def step(self, system, state, dt, control=None, t=0.0):
        """Advance ``state`` of ``system`` by one step ``dt`` with the zero-order-hold control
        ``control`` (a body force in g*, or None) starting at time ``t``."""

    # Methods may carry the state in an internal layout inside simulate's scan (e.g. the
    # struct-of-arrays layout of the SO(3) kernels); ``init``/``finalize`` convert exactly and
    # ``advance`` steps the internal carry.  By default the carry is the state itself.
    def init(self, system, state, t=0.0):
        """State at time ``t`` → internal carry."""
        return state

    def finalize(self, system, carry):
        """Internal carry → state (exact)."""
        return carry

    def advance(self, system, carry, dt, control=None, t=0.0):
        """One step on the internal carry: ``(carry, StepStats)``."""
        return self.step(system, carry, dt, control, t)

    def carry_extra(self, system, carry):
        """What the internal carry holds beyond the state it finalizes to and a continued run
        needs to reproduce the uninterrupted one bitwise, as a dict of arrays, or ``None``
        (nothing; the default).  Example: the compensated float32 momentum of
        :class:`geomjax.LGVI`, whose rounding error ``finalize`` cannot put into the state.
        :func:`geomjax.simulate` returns it as ``Solution.method_state``; pass that back as
        ``simulate(..., method_state=)`` to continue the run (:meth:`resume`).  It carries no
        derivative."""
        return None

    def resume(self, system, state, extra, t=0.0):
        """The internal carry at ``state`` with ``extra`` (the output of :meth:`carry_extra`
        for the carry that finalized to ``state``); :meth:`init` when ``extra`` is ``None``."""
        return self.init(system, state, t)

    def carry_beyond_state(self, system=None) -> bool:
        """Whether the internal carry holds more than a layout of the state (e.g. the Newton seed
        of :class:`geomjax.NonholonomicVI`).  :func:`geomjax.simulate` then rebuilds it from the
        state (``init(finalize(carry))``) at the start of every saved block, inside its compiled
        loop, so that a run continued from a saved state starts each block from the same bits
        as the uninterrupted run (a seed carried from the previous step and one recomputed from
        the state can differ in the last bit).  ``system``: the system it integrates (the
        answer may depend on it, e.g. the LGVI carries the potential force only where there is
        a potential); ``None``: whether it may, for any system."""
        return False

    def supports(self, system) -> bool:
        """Static check used by :func:`geomjax.simulate` to give a clear error."""
        return True

    def control_shape(self, system) -> tuple[int, ...] | None:
        """The shape of one step's control this method takes for ``system`` (checked by
        :func:`geomjax.simulate`; ``None``: not checked).  Default: the system's body force
        (one entry per velocity); a method that maps commands to forces (e.g.
        :class:`~geomjax.control.trajopt.Actuated`) returns the commands' shape."""
        return body_force_shape(system)

    def validate(self, system) -> None:
        """Eager checks of the system's parameters for this method (raise ``ValueError``)."""

    def check_initial(self, system, state):
        """Checks of ``simulate``'s initial state that only this method knows (e.g. RATTLE: on
        the constraint).  Called by :func:`geomjax.simulate` before its compiled scan, so a
        concrete bad state raises ``ValueError`` naming ``state0``; a traced one goes through
        ``equinox.error_if``.  Returns the state (possibly with the checks attached)."""
        return state


class WrappedMethod(AbstractMethod):
    """A method that changes how another one, ``method``, is called — its control (a thrust map:
    :class:`~geomjax.control.trajopt.Actuated`; a configuration-dependent input map:
    :class:`~geomjax.learn.InputMapped`) or its time — and is otherwise that method: its order,
    the systems it supports and its control's shape are ``method``'s unless overridden.  A
    subclass declares the field ``method`` and implements :meth:`step`."""

    method: eqx.AbstractVar[AbstractMethod]

    @property
    def order(self):
        return self.method.order

    def supports(self, system) -> bool:
        return self.method.supports(system)

    def control_shape(self, system):
        return self.method.control_shape(system)


class GradientHooks(eqx.Module):
    """Opt-in hooks that make a method's gradients cheaper; none changes a result.

    A method that inherits this protocol (beside :class:`AbstractMethod`) may tell plain reverse
    mode through :func:`geomjax.simulate` which values of a step to keep
    (:meth:`reverse_mode_saves`), and :class:`geomjax.ReversibleAdjoint` the forward step's
    implicit solutions from the reverse step's (:meth:`forward_solutions`), a hand-written
    backward step (:meth:`backward_step`) and whether to carry its backward state as one vector
    (:attr:`packs_reverse_carry`).  Every default is "nothing known": the generic path, which
    a method that does not inherit the protocol gets too.  Each hook is a measured speed-up
    (the figures: the architecture page of the documentation).
    """

    #: whether :class:`geomjax.ReversibleAdjoint` carries the backward step's state and
    #: cotangents as one fused vector (float64, up to 32 entries); an opt-in because it was
    #: measured faster for the LGVI and the splitting, slower for NonholonomicVI
    #: (adjoint._packed_carry)
    packs_reverse_carry: ClassVar[bool] = False

    def forward_solutions(self, system, reverse_solutions, carry):
        """The solutions of the implicit solves of ``Φ_h`` from ``x_k``, given those of the
        reverse step ``x_k = Φ_{−h}(x_{k+1})`` (``reverse_solutions``, in the order its
        :func:`~geomjax.integrators.newton.newton_solve` calls were traced; ``carry`` is
        ``x_{k+1}``): a list in the order ``Φ_h`` traces its solves, or ``None`` (the default:
        not known).  For a symmetric method they follow from the symmetry (the LGVI: the reverse
        step solves for ``ξ`` with ``cay(−h ξ) = f_k^{-1}``, i.e. ``ξ_k`` itself);
        :class:`geomjax.ReversibleAdjoint` replays them in the forward linearization of its
        backward step instead of solving again
        (:func:`~geomjax.integrators.newton.replay_solutions`)."""
        return None

    def backward_step(self, system, dtype):
        """A hand-written backward step for :class:`geomjax.ReversibleAdjoint`, or ``None``
        (the default: the reverse step, then JAX's VJP of :meth:`advance`).  Where given, a
        pair ``(parameters, backward)``:

        * ``parameters(system) -> tuple``: the parameter values the step reads (e.g. the
          entries of the inertia); their cotangents are summed over the steps and pulled back
          to the system's arrays once per backward pass;
        * ``backward(values, carry, dt, control, ct_carry, need_params, need_dt) -> (previous
          carry, its cotangent, ct_values, ct_dt, ct_control)``: from ``x_{k+1}`` (``carry``)
          the reverse step ``x_k = Φ_{−h}(x_{k+1})``, as :meth:`advance` with ``−dt``
          computes it, and the vector–Jacobian product of ``Φ_h`` at ``x_k`` for the
          cotangent ``ct_carry`` of ``x_{k+1}`` (the carry's entries as a tuple of scalars;
          ``ct_values``/``ct_dt`` None where not needed, ``ct_control`` None without a
          control).

        Both must equal those of :meth:`advance` to round-off for this ``system`` and
        ``dtype``, decided statically (the LGVI's SO(3) free body)."""
        return None

    def reverse_mode_saves(self, system, batched: bool = False) -> tuple[str, ...] | None:
        """The names (``jax.ad_checkpoint.checkpoint_name``) of the values of one step that
        plain reverse mode through :func:`geomjax.simulate` keeps, besides the step's input;
        the rest of the step is recomputed in the backward pass (``jax.checkpoint`` with
        ``save_only_these_names``).  For a step whose cost is an implicit solve, keeping its
        root and recomputing the explicit rest stores a few numbers per step instead of every
        intermediate, so that reverse mode moves less memory than it would recompute.
        ``batched``: whether :func:`geomjax.simulate` is vmapped (each step's values are then
        ``(batch,)`` vectors); a method may choose differently with and without a batch, as
        measured.  ``None`` (the default): JAX's default, every residual kept."""
        return None


class AbstractAdjoint(eqx.Module):
    """How reverse mode differentiates a run: ``simulate(..., adjoint=...)`` hands the run to
    ``adjoint.run`` (after its input checks and dtype casts) instead of scanning it itself.

    A concrete adjoint (:class:`geomjax.ReversibleAdjoint`) provides :meth:`run`; it lives above
    :func:`geomjax.simulate` in the import order and calls it for the forward pass."""

    @abc.abstractmethod
    def run(self, system, method, state0, dt, steps: int, controls, save_every: int, t0):
        """The :class:`geomjax.Solution` of ``simulate(system, method, state0, dt, steps,
        controls, save_every, t0)``, differentiated the adjoint's way."""


def needs_reorthonormalization(flag: bool | None, dtype) -> bool:
    """The ``reorthonormalize`` policy of the methods: ``None`` means float32 and below, where
    rounding would let the group defect random-walk away (see :meth:`LieGroup.renormalize`)."""
    return bool(flag) or (flag is None and jnp.finfo(dtype).bits <= 32)


def body_force_shape(system) -> tuple[int, ...] | None:
    """The shape of one body force of ``system`` (one entry per velocity; None: unknown)."""
    from ..systems.base import AbstractLieGroupSystem
    from ..systems.nonholonomic import AbstractNonholonomicSystem

    if isinstance(system, AbstractNonholonomicSystem):
        return (system.n_velocities,)
    if isinstance(system, AbstractLieGroupSystem):
        return (system.group.dim,)
    from ..variational.hamel import HamelSystem

    if isinstance(system, HamelSystem):  # a force covector in the frame
        return (system.dim,)
    return None


def gradient_hooks(method) -> GradientHooks:
    """``method`` if it opts into :class:`GradientHooks`, else the protocol's defaults."""
    return method if isinstance(method, GradientHooks) else _NO_HOOKS


_NO_HOOKS = GradientHooks()

"""What a solve returns: :class:`OCPSolution` and the status codes."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import numpy as np

from ..._internal.warn import renamed_attribute
from ...results import ConvergenceError

__all__ = ["OCPSolution"]


from ...results import worst
from ..status import (  # noqa: F401  (the codes, re-exported for the solvers)
    CONSTRAINTS,
    MAX_ITERS,
    NONFINITE,
    REG_LIMIT,
    SUCCESSFUL,
)


class OCPSolution(eqx.Module):
    """Result of :func:`solve_ocp` (a pytree: it can leave ``jit``/``vmap``).

    Attributes:
        times: ``(steps + 1,)`` node times ``t_k = k·dt``.
        states: states with a leading axis ``(steps + 1,)`` (the layout of ``Solution.states``).
        controls: controls ``(steps, m)``.
        K, k: feedback and feedforward gains of the last backward pass ``(steps, m, n)``,
            ``(steps, m)`` (``u = ū + K (x ⊖ x̄)`` near the optimum).
        cost: ``J`` at the solution (without constraint terms; of an inner solve of
            :class:`AugmentedLagrangian`, the augmented cost it minimized at its fixed
            multipliers).
        violation: largest constraint/bound violation (``inf`` while the trajectory has gaps:
            a multiple-shooting start the solve did not close).
        status: status code (:class:`geomjax.results.Status`; see :attr:`stop_reason`,
            :attr:`message`).
        iterations: iterations run (inner iterations in total for :class:`AugmentedLagrangian`).
        history: per-iteration arrays ``(max_iters,)``, NaN after the last: ``cost`` (before the
            step, including the augmented-Lagrangian terms), ``gap`` (largest multiple-shooting
            defect), ``reg``, ``step`` (accepted ``α``, 0 if none), ``stop`` (expected
            improvement ``|d₁ + d₂/2|``), ``time`` (wall seconds at the end of the iteration
            since the call, eager solves only, see :func:`solve_ocp`).  For
            :class:`AugmentedLagrangian` one entry per outer iteration ``(max_outer,)``:
            ``cost``, ``violation``, ``penalty``, ``inner_iterations``, ``time``.
        duals: the multipliers and penalty (warm start of another solve).
    """

    times: jax.Array
    states: Any
    controls: jax.Array
    K: jax.Array
    k: jax.Array
    cost: jax.Array
    violation: jax.Array
    status: jax.Array
    iterations: jax.Array
    history: dict
    duals: Any

    # former names (deprecated): the changelog's table of deprecated names
    xs = renamed_attribute("OCPSolution", "xs", "states")
    us = renamed_attribute("OCPSolution", "us", "controls")
    result = renamed_attribute("OCPSolution", "result", "status")

    @property
    def stop_reason(self) -> str:
        """The name of :attr:`status` (eager only; a batch: its worst member's,
        :func:`geomjax.results.worst`)."""
        return worst(self.status).reason

    @property
    def message(self) -> str:
        """A sentence for :attr:`status` (eager only; a batch: its worst member's)."""
        return worst(self.status).message

    @property
    def succeeded(self):
        return self.status == SUCCESSFUL

    @property
    def converged(self):
        """``(...,)`` whether the solve converged (:attr:`status` is ``Status.CONVERGED``); the
        same name as ``Solution.converged`` and ``MPCResult.converged``."""
        return self.status == SUCCESSFUL

    def check(self) -> OCPSolution:
        """Raise :class:`geomjax.results.ConvergenceError` unless every member
        converged (eager only)."""
        r = np.asarray(self.status)
        if (r != SUCCESSFUL).any():
            raise ConvergenceError(
                f"solve_ocp: {worst(r).message} ({int(np.asarray(self.iterations).max())} "
                f"iterations, violation {float(np.max(np.asarray(self.violation))):.3g})"
            )
        return self

    def __repr__(self) -> str:
        try:
            return (
                f"OCPSolution(stop_reason={self.stop_reason!r}, cost={np.asarray(self.cost)}, "
                f"iterations={np.asarray(self.iterations)}, violation={np.asarray(self.violation)})"
            )
        except Exception:
            return "OCPSolution(<traced>)"

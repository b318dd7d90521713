"""One result vocabulary: the status of every iterative routine and the one error its ``check()``
raises.

Every result type of geomjax reports its outcome with the same codes — :class:`Status`, an
:class:`enum.IntEnum`, so a status is an integer array that can leave ``jit`` and ``vmap`` and
compares with the members (``sol.status == Status.CONVERGED``) — and every ``check()`` raises
:class:`ConvergenceError` with what went wrong and what to change:

=====  ===========================  ===============================================================
code   :attr:`Status.reason`        meaning
=====  ===========================  ===============================================================
-1     ``"not_run"``                no solve ran yet (an MPC plan before its first solve)
0      ``"converged"``              the routine's convergence test passed
1      ``"max_iters"``              the iteration cap was reached first
2      ``"regularization_limit"``   no descent step found with the largest regularization
3      ``"nonfinite"``              NaN or inf in the cost, its gradient or the dynamics
4      ``"constraints_not_met"``    constraints still violated after the outer iterations
5      ``"solve_not_converged"``    an implicit solve of a time step missed its tolerance
6      ``"rank_deficient"``         the data do not determine the fitted parameters separately
=====  ===========================  ===============================================================

Which routine reports which:

* :class:`~geomjax.integrators.Solution` (:func:`~geomjax.simulate`): 0 or 5 (or 3 for a
  non-finite residual), from the implicit solves' residuals;
* :class:`~geomjax.control.trajopt.OCPSolution` (``solve_ocp``): 0–4;
* :class:`~geomjax.control.MPCResult` (``run_mpc``): one status per solve, 0–4 (a capped solve,
  1, is normal in MPC; :attr:`~geomjax.control.MPCResult.healthy` says whether the loop is);
  ``MPCPlan.status`` is -1 before the first solve;
* :class:`~geomjax.control.OptimizeResult` (``optimize``): 0 (its ``stop_reason`` ``"target"``,
  ``"gtol"`` or ``"patience"``), 1 or 3;
* :class:`~geomjax.learn.FitResult` (``fit_parameters``) and :class:`~geomjax.learn.ModelFit`
  (``fit_model``): 0, 1, 3 or 6 (``fit_parameters``' Jacobian rank-deficient); their
  ``message`` says what happened in a sentence and their ``check()`` raises
  :class:`~geomjax.learn.FitError`, a :class:`ConvergenceError`;
* :class:`~geomjax.learn.NeuralODEFit` (``fit_neural_ode``, the black-box baseline with a fixed
  budget of Adam steps): 1 (the budget ran, its normal end) or 3; ``check()`` raises
  :class:`~geomjax.learn.FitError` for 3.

A batch of solves (``vmap``) reports one status per member; its one-word summary
(``stop_reason``) is the *worst* member's, by :data:`SEVERITY` (a non-finite member outranks one
that missed its constraints), not the largest code.
"""

from __future__ import annotations

import enum

import numpy as np

__all__ = ["SEVERITY", "ConvergenceError", "Status", "worst"]


class ConvergenceError(RuntimeError):
    """An iterative routine did not converge: raised by every result's ``check()``
    (:meth:`Solution.check <geomjax.integrators.Solution.check>`, ``OCPSolution.check``,
    ``MPCResult.check``, ``OptimizeResult.check``)."""


class Status(enum.IntEnum):
    """The outcome of an iterative routine (a table of codes is in :mod:`geomjax.results`)."""

    NOT_RUN = -1
    CONVERGED = 0
    MAX_ITERS = 1
    REGULARIZATION_LIMIT = 2
    NONFINITE = 3
    CONSTRAINTS_NOT_MET = 4
    SOLVE_NOT_CONVERGED = 5
    RANK_DEFICIENT = 6

    @property
    def reason(self) -> str:
        """The one-word name (``stop_reason`` of the results): ``"converged"``, ``"max_iters"``, ..."""
        return _REASONS[self]

    @property
    def message(self) -> str:
        """A sentence for error messages."""
        return _MESSAGES[self]

    @property
    def failed(self) -> bool:
        """Whether the routine broke down (not converged and not merely stopped at its cap)."""
        return self not in (Status.CONVERGED, Status.MAX_ITERS, Status.NOT_RUN)

    @classmethod
    def from_reason(cls, reason: str) -> Status:
        """The member whose :attr:`reason` is ``reason``."""
        for s in cls:
            if s.reason == reason:
                return s
        raise ValueError(
            f"Status.from_reason: unknown reason {reason!r}; expected one of "
            f"{[s.reason for s in cls]}"
        )


_REASONS = {
    Status.NOT_RUN: "not_run",
    Status.CONVERGED: "converged",
    Status.MAX_ITERS: "max_iters",
    Status.REGULARIZATION_LIMIT: "regularization_limit",
    Status.NONFINITE: "nonfinite",
    Status.CONSTRAINTS_NOT_MET: "constraints_not_met",
    Status.SOLVE_NOT_CONVERGED: "solve_not_converged",
    Status.RANK_DEFICIENT: "rank_deficient",
}

_MESSAGES = {
    Status.NOT_RUN: "no solve has run yet",
    Status.CONVERGED: "converged",
    Status.MAX_ITERS: "maximum number of iterations reached before convergence",
    Status.REGULARIZATION_LIMIT: (
        "regularization limit reached: no descent step found (infeasible or ill-posed)"
    ),
    Status.NONFINITE: "the cost or the dynamics returned NaN or inf",
    Status.CONSTRAINTS_NOT_MET: "constraints not met within the outer iterations",
    Status.SOLVE_NOT_CONVERGED: "an implicit solve of a time step did not converge",
    Status.RANK_DEFICIENT: "the data do not determine the fitted parameters separately (the "
    "Jacobian is rank-deficient)",
}

#: The order in which a batch's statuses are summarized, best first: the summary of a batch is
#: its member latest in this tuple (:func:`worst`).  A breakdown of the arithmetic outranks a
#: missed tolerance, which outranks a cap.
SEVERITY = (
    Status.NOT_RUN,
    Status.CONVERGED,
    Status.MAX_ITERS,
    Status.CONSTRAINTS_NOT_MET,
    Status.RANK_DEFICIENT,
    Status.REGULARIZATION_LIMIT,
    Status.SOLVE_NOT_CONVERGED,
    Status.NONFINITE,
)
_RANK = {s: i for i, s in enumerate(SEVERITY)}


def worst(status) -> Status:
    """The most severe of an array of status codes (by :data:`SEVERITY`; eager only)."""
    codes = np.unique(np.asarray(status).reshape(-1))
    if codes.size == 0:
        return Status.NOT_RUN
    return max((Status(int(c)) for c in codes), key=_RANK.__getitem__)

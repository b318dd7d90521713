"""The status codes of :func:`~geomjax.control.optimize`, :func:`~geomjax.control.solve_ocp` and
:func:`~geomjax.control.run_mpc`: geomjax's one vocabulary, :class:`geomjax.results.Status`
(this module keeps the names the solvers use).

A solve reports an integer code (``status``, an array: it can leave ``jit``/``vmap``) and a
name (``stop_reason``, eager only):

====  ==========================  ======================================================
code  name                        meaning
====  ==========================  ======================================================
0     ``"converged"``             the solver's convergence test passed
1     ``"max_iters"``             the iteration cap was reached first
2     ``"regularization_limit"``  no descent step found with the largest regularization
3     ``"nonfinite"``             NaN or inf in the cost, its gradient or the dynamics
4     ``"constraints_not_met"``   constraints still violated after the outer iterations
====  ==========================  ======================================================

:func:`~geomjax.control.optimize` stops for more reasons than one convergence test: its
``stop_reason`` is also ``"target"`` (the loss reached ``target``), ``"gtol"`` (the gradient
norm reached ``gtol``) or ``"patience"`` (no progress for ``patience`` iterations); its
``status`` is 0 for those, 1 for ``"max_iters"`` and 3 for ``"nonfinite"``.
"""

from __future__ import annotations

from ..results import Status

SUCCESSFUL = Status.CONVERGED
MAX_ITERS = Status.MAX_ITERS
REG_LIMIT = Status.REGULARIZATION_LIMIT
NONFINITE = Status.NONFINITE
CONSTRAINTS = Status.CONSTRAINTS_NOT_MET

#: the name of each status code (``stop_reason``)
REASONS = {s: s.reason for s in Status}

#: a sentence for each status code (error messages, ``message``)
MESSAGES = {s: s.message for s in Status}

#: :func:`~geomjax.control.optimize`'s stop reasons → status codes
OPTIMIZE_STATUS = {
    "target": SUCCESSFUL,
    "gtol": SUCCESSFUL,
    "patience": SUCCESSFUL,
    "max_iters": MAX_ITERS,
    "nonfinite": NONFINITE,
}

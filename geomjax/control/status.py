"""One status vocabulary for :func:`~geomjax.control.optimize`,
:func:`~geomjax.control.solve_ocp` and :func:`~geomjax.control.run_mpc`.

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

SUCCESSFUL, MAX_ITERS, REG_LIMIT, NONFINITE, CONSTRAINTS = 0, 1, 2, 3, 4

#: the name of each status code (``stop_reason``)
REASONS = {
    SUCCESSFUL: "converged",
    MAX_ITERS: "max_iters",
    REG_LIMIT: "regularization_limit",
    NONFINITE: "nonfinite",
    CONSTRAINTS: "constraints_not_met",
}

#: a sentence for each status code (error messages, ``message``)
MESSAGES = {
    SUCCESSFUL: "converged",
    MAX_ITERS: "maximum number of iterations reached before convergence",
    REG_LIMIT: "regularization limit reached: no descent step found (infeasible or ill-posed)",
    NONFINITE: "the cost or the dynamics returned NaN or inf",
    CONSTRAINTS: "constraints not met within the outer iterations",
}

#: :func:`~geomjax.control.optimize`'s stop reasons → status codes
OPTIMIZE_STATUS = {
    "target": SUCCESSFUL,
    "gtol": SUCCESSFUL,
    "patience": SUCCESSFUL,
    "max_iters": MAX_ITERS,
    "nonfinite": NONFINITE,
}

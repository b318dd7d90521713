"""One result vocabulary: :class:`geomjax.results.Status` read by every result type, the worst
member of a batch, and the one error of every ``check()``.

The statuses are checked against what each routine does independently of the status code: a
run whose implicit solves provably cannot converge (one Newton iteration from a far guess) and
the residuals it records; an optimizer stopped by its cap against one stopped by its target."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import geomjax as gj
from geomjax.control import optimize
from geomjax.control.status import MESSAGES, REASONS
from geomjax.results import SEVERITY, ConvergenceError, Status, worst


def test_codes_and_names_of_the_former_vocabulary_are_kept():
    """The integer codes and names that results reported before stay what they were (stored
    results and users' comparisons with integers keep their meaning)."""
    assert [int(s) for s in Status if s >= 0] == [0, 1, 2, 3, 4, 5, 6]
    former = {
        0: "converged",
        1: "max_iters",
        2: "regularization_limit",
        3: "nonfinite",
        4: "constraints_not_met",
    }
    for code, name in former.items():
        assert Status(code).reason == name == REASONS[code]
        assert MESSAGES[code] == Status(code).message
    assert Status.from_reason("nonfinite") is Status.NONFINITE
    with pytest.raises(ValueError, match="unknown reason 'nope'"):
        Status.from_reason("nope")
    assert set(SEVERITY) == set(Status)


@given(st.lists(st.sampled_from(list(Status)), min_size=1, max_size=12))
def test_worst_is_the_most_severe_member(codes):
    """The summary of a batch is one of its members, and no member is more severe."""
    w = worst(np.array([int(c) for c in codes]))
    assert w in codes
    assert all(SEVERITY.index(c) <= SEVERITY.index(w) for c in codes)


def test_a_nonfinite_member_outranks_constraints_not_met():
    """The largest code (4, constraints) is not the worst: a non-finite member (3) is."""
    assert worst([0, 4, 3, 1]) is Status.NONFINITE
    assert worst([0, 1, 1]) is Status.MAX_ITERS
    assert worst(np.zeros((2, 3), np.int32)) is Status.CONVERGED


def _run(dt, newton_iters=None):
    body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    state = gj.RigidBodyState(gj.SO3.identity(), jnp.array([1.0, 20.0, 1.0]))
    method = gj.LGVI() if newton_iters is None else gj.LGVI(newton_iters=newton_iters)
    return gj.simulate(body, method, state, dt, 40)


def test_solution_reports_its_implicit_solves():
    """A run whose Newton solves converge reports ``CONVERGED`` and passes ``check()``; one
    Newton iteration per step from a large rotation per step cannot meet a 1e3·eps residual:
    ``SOLVE_NOT_CONVERGED``, and ``check()`` raises the common error — the status agrees with
    the residuals the run recorded."""
    good = _run(1e-3)
    assert int(good.status) == Status.CONVERGED and bool(good.converged)
    assert good.stop_reason == "converged"
    assert good.check() is good
    bad = _run(0.2, newton_iters=1)
    tol = 1e3 * np.finfo(np.asarray(bad.stats["residual"]).dtype).eps
    assert float(np.max(bad.stats["residual"])) > tol  # the premise, from the recorded residuals
    assert int(bad.status) == Status.SOLVE_NOT_CONVERGED and not bool(bad.converged)
    assert bad.stop_reason == "solve_not_converged"
    with pytest.raises(ConvergenceError, match="did not converge"):
        bad.check()
    assert gj.ConvergenceError is ConvergenceError


def test_solution_status_under_jit_and_vmap():
    """The status is an array: one per member of a batch, computed inside ``jit``; it agrees
    with the eager runs."""

    def status(dt):
        return _run(dt, newton_iters=1).status

    dts = jnp.array([1e-4, 0.2])
    got = gj.jit(jax.vmap(status))(dts)
    assert got.shape == (2,)
    assert [int(g) for g in got] == [int(_run(float(d), newton_iters=1).status) for d in dts]
    assert int(got[1]) == Status.SOLVE_NOT_CONVERGED


def test_optimize_result_status_and_check():
    """``optimize`` stopped by its target converged; stopped by its cap it did not, and
    ``check()`` raises the common error naming the cap."""
    loss = lambda p: jnp.sum((p - 3.0) ** 2)  # noqa: E731
    hit = optimize(loss, jnp.zeros(2), "adam", max_iters=2000, target=1e-6, progress=False)
    assert hit.stop_reason == "target" and hit.status is Status.CONVERGED and hit.converged
    assert hit.check() is hit
    capped = optimize(loss, jnp.zeros(2), "adam", max_iters=3, progress=False)
    assert capped.status is Status.MAX_ITERS and not capped.converged
    with pytest.raises(ConvergenceError, match="max_iters"):
        capped.check()


def _attitude():
    from geomjax.control.examples import attitude_problem

    # a small, explicit problem (the cheapest to compile), its target as a terminal cost
    return attitude_problem(
        exact_target=False, steps=3, duration=1.5, method=gj.SemiImplicitEuler(), weight=10.0
    )


def test_ocp_solution_summarizes_a_batch_by_its_worst_member():
    """A batch of solves with a non-finite member and one that missed its constraints is
    summarized as non-finite, and ``check()`` says so."""
    from geomjax.control.trajopt import ILQR, solve_ocp

    sol = solve_ocp(_attitude(), ILQR(), max_iters=2, progress=False)
    batch = eqx.tree_at(lambda s: s.status, sol, jnp.array([4, 3, 0], jnp.int32))
    assert batch.stop_reason == "nonfinite"
    assert list(np.asarray(batch.converged)) == [False, False, True]
    with pytest.raises(ConvergenceError, match="NaN or inf"):
        batch.check()


def test_an_online_plan_before_its_first_solve_is_not_run():
    from geomjax.control.mpc import MPC, OnlineMPC
    from geomjax.control.trajopt import ILQR

    plan = OnlineMPC(_attitude(), MPC(ILQR(), max_iters=1)).init()
    assert Status(int(plan.status)) is Status.NOT_RUN
    assert Status.NOT_RUN.reason == "not_run" and not Status.NOT_RUN.failed

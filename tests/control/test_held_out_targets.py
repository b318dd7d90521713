"""The attitude and rolling-ball problems of geomjax.control.examples at targets their worked
examples were not tuned for (the bounded quadrotor's are in test_trajopt_targets.py, whose KKT
check this file reuses): every solve converges, to a point that a tight re-solve confirms and
that satisfies the first-order (KKT) conditions by central finite differences of the cost of the
rollout (relative to the terminal cost's gradient where that is larger than every multiplier:
no bound need be active), and its cost is checked against a second method.

* Attitude (torques in [−0.2, 0.2], the target as a penalty, RKMK4, 20 steps: the setting of
  benchmarks/bench_trajopt.py's section (b)) to rotations about a uniformly random axis by an
  angle uniform in [0, 1.5] rad (the worked example turns 1.5 rad about (1, 2, −1)): the cost
  matches a solve from another start (default tier: the same solver; long tier: the other
  solver, DDP against iLQR) to 1e-8 relative plus :data:`ABSOLUTE`.  No CasADi transcription of this problem exists,
  so IPOPT is not a peer here.
* Rolling ball on a fixed plate (no speed bound, the target pose as a penalty of weight 1e3)
  to a random attitude (up to 1 rad) and contact point (in [−0.5, 0.5]²), from the documented
  loop guess, solved by DDP (long tier: its compile alone is ~20 s): L-BFGS on the controls
  (:func:`geomjax.control.optimize`, a first-order method that shares nothing with the Riccati
  recursion) started at the solution finds no cost lower by more than 1e-8 relative.  The
  problem is not convex (the ball's attitude is a geometric phase of the path: several loops
  reach a pose) and the solvers can end at different local optima from one start, so the
  second method checks the optimum reached, not a global one.  iLQR is not run on it: on two
  of the eight targets of the long tier (almost no turn, a long displacement) it crawls along a
  curved valley of the cost (three quarters of its steps full, the regularization at its floor,
  3e-6 to 4e-4 gained an iteration) and has not converged after 1500 iterations: its
  Gauss–Newton model leaves out the dynamics' second-order terms, which the path's geometric
  phase makes large; DDP keeps them and converges in at most 56.

The targets come from the generators of benchmarks/bench_trajopt.py (:func:`random_rotations`,
:func:`random_ball_targets`; section (h)), seeded with 1 in the default tier and 0 in the long
tier and the benchmark."""

import importlib
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import geomjax as gj
from geomjax._internal.eager import LEGACY_EMITTERS
from geomjax.control import optimize
from geomjax.control.examples import attitude_problem, loop_controls, rolling_ball_problem
from geomjax.control.trajopt import DDP, ILQR, solve_ocp

from .test_trajopt_targets import _check

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
TORQUE_MAX = 0.2


def _bench():
    sys.path.insert(0, str(BENCH))
    return importlib.import_module("bench_trajopt")


def _attitude(axis, angle):
    return attitude_problem(
        torque_max=TORQUE_MAX,
        exact_target=False,
        steps=20,
        method=gj.RKMK4(),
        weight=100.0,
        axis=axis,
        angle=angle,
    )


def _ball(R, position):
    return rolling_ball_problem(
        target_attitude=jnp.asarray(R), target_position=position, exact_target=False
    )


def _runner(max_iters):
    """One compiled solve ``(problem, solver, controls)``; ``tol`` is passed as an array so that
    the default and the tight solve share the program.  Compiled with XLA:CPU's legacy
    emitters, as ``solve_ocp`` compiles its eager solves (the same kernels, compiled faster)."""
    return eqx.filter_jit(
        lambda p, s, u: solve_ocp(p, s, u, max_iters=max_iters), compiler_options=LEGACY_EMITTERS
    )


def _solver(cls, tol):
    return cls(tol=jnp.asarray(tol))


#: the absolute part of the cost comparisons: ten times the default stop, which bounds the
#: predicted decrease by 1e-10 (1 + J) — absolute where J ≪ 1 (a rotation of a few mrad costs
#: ~1e-5, and its relative gap to the optimum can then be ~1e-5)
ABSOLUTE = 1e-9

#: another start of the attitude solves: a constant torque inside the box
OTHER_START = jnp.full((20, 3), 0.5 * TORQUE_MAX, jnp.float64)  # not weakly typed: no recompile


def _attitude_case(run, solver_cls, other_cls, axis, angle, gap=1e-8):
    """One held-out rotation: ``solver_cls`` from zero torques passes :func:`_check`, and
    ``other_cls`` from :data:`OTHER_START` reaches its cost to ``gap`` relative plus
    :data:`ABSOLUTE`; returns the iterations."""
    prob = _attitude(axis, angle)
    sol = run(prob, _solver(solver_cls, 1e-10), jnp.zeros((20, 3)))
    _check(
        sol,
        prob,
        lambda p, u: run(p, _solver(solver_cls, 1e-15), u),
        label=(axis, angle),
        balance=True,
        absolute=ABSOLUTE,
    )
    other = run(prob, _solver(other_cls, 1e-10), OTHER_START)
    assert other.stop_reason == "converged", (axis, angle, other.message)
    J, J2 = float(sol.cost), float(other.cost)
    assert abs(J - J2) <= gap * J2 + ABSOLUTE, (axis, angle, J, J2)
    return int(sol.iterations)


@pytest.mark.timeout(300)
def test_attitude_held_out_targets():
    """Two held-out rotations, iLQR from zero torques: converged KKT points
    (:func:`test_trajopt_targets._check`) whose cost iLQR from a constant torque matches."""
    run = _runner(200)
    for axis, angle in _bench().random_rotations(2, seed=1):
        _attitude_case(run, ILQR, ILQR, axis, angle)


@pytest.mark.long
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("solver_cls", [ILQR, DDP], ids=["ILQR", "DDP"])
def test_attitude_eight_held_out_targets(solver_cls):
    """Eight held-out rotations: converged KKT points, each cost matched by the other solver
    from another start, in at most 60 iterations."""
    run = _runner(200)
    other = DDP if solver_cls is ILQR else ILQR
    iterations = [
        _attitude_case(run, solver_cls, other, axis, angle)
        for axis, angle in _bench().random_rotations(8, seed=0)
    ]
    assert max(iterations) <= 60, iterations


@pytest.mark.long
@pytest.mark.timeout(1800)
def test_rolling_ball_eight_held_out_targets():
    """Eight held-out poses of the rolling ball, DDP from the documented loop guess: converged
    KKT points (the tight re-solve by DDP too) in at most 100 iterations, and L-BFGS from each
    finds no lower cost (1e-8 relative)."""
    run = _runner(300)
    guess = loop_controls(20, 2.0)
    iterations = []
    for R, position in _bench().random_ball_targets(8, seed=0):
        prob = _ball(R, position)
        sol = run(prob, _solver(DDP, 1e-10), guess)
        _check(
            sol,
            prob,
            lambda p, u: run(p, _solver(DDP, 1e-15), u),
            label=position,
            balance=True,
            absolute=ABSOLUTE,
        )
        iterations.append(int(sol.iterations))
        J = jax.jit(lambda u, p=prob: p.cost(p.rollout(u), u))
        res = optimize(J, sol.controls, "lbfgs", max_iters=500, gtol=1e-10, progress=False)
        assert float(res.loss) >= float(sol.cost) * (1 - 1e-8), (position, res.loss, sol.cost)
    assert max(iterations) <= 100, iterations

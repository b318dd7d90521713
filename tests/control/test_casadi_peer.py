"""The quadrotor written independently in CasADi (benchmarks/bench_casadi.py) and solved by IPOPT,
an interior-point method on the whole NLP: a second method for the optimum the Riccati solvers
reach.  First the CasADi model (its own SE(3) exp/log, Euler–Poincaré step, residuals) is checked
against geomjax's at random states; then IPOPT's optimum and DDP's must agree in cost and in the
controls, with the free and the bounded thrusts."""

import importlib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("casadi")
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("bench_casadi")


@pytest.mark.long
def test_casadi_model_is_the_same_problem(bench):
    import casadi

    gap = bench.check_against_geomjax(casadi, *bench.model_functions(casadi), trials=10)
    assert gap < 1e-12


@pytest.mark.long
@pytest.mark.parametrize("bounded", [False, True])
def test_ipopt_and_ddp_reach_one_optimum(bench, bounded):
    import casadi

    from geomjax.control.examples import quadrotor_problem
    from geomjax.control.trajopt import DDP, solve_ocp

    ipopt = bench.solve_ipopt(casadi, "multiple shooting", bounded, repeats=1)
    assert ipopt["success"], ipopt["status"]
    sol = solve_ocp(quadrotor_problem(bounded=bounded), DDP(), max_iters=200).check()
    ours, us = float(sol.cost), np.asarray(sol.controls)
    # both are local optima of one NLP from one initial guess; IPOPT stops at tol 1e-10 on its
    # scaled KKT error, DDP on its expected decrease
    assert abs(ipopt["cost"] - ours) <= 1e-6 * ours
    np.testing.assert_allclose(ipopt["controls"], us, atol=2e-3 * np.abs(us).max())

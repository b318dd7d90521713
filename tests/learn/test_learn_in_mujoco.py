"""Learning from an external simulator and flying what was learned in it: crocoddyl's quadrotor
written in MJCF (benchmarks/bench_online_mpc.py), its body 10 % heavier than the nominal model,
recorded in MuJoCo under set-point tracking by OnlineMPC, identified by ``fit_parameters``, then
planned and flown in MuJoCo (benchmarks/bench_learn_quadrotor.py's ``--mujoco`` section).

Checked against MuJoCo itself: the identified mass against the mass of MuJoCo's body; the open-
loop plans against MuJoCo's flight of their thrusts (a plan on the nominal model misses, one on
the identified model lands where a plan on MuJoCo's own parameters does); the closed loop's final
pose read from MuJoCo's state."""

import importlib
from pathlib import Path

import pytest

pytest.importorskip("mujoco")
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.long
@pytest.mark.timeout(1200)
def test_identified_in_mujoco_then_flown_in_mujoco(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCH))
    bench = importlib.import_module("bench_learn_quadrotor")
    common = importlib.import_module("common")
    monkeypatch.setattr(common, "RESULTS", tmp_path)  # the JSON goes to a scratch folder
    fit, plans, flights = bench.mujoco_section(fast=True)

    # identification: converged, and the mass is MuJoCo's to 0.1 % (the nominal one is 9 % off)
    assert fit["status"] == "converged"
    assert fit["nominal_mass_rel_err"] > 0.09
    assert fit["mass_rel_err"] < 1e-3
    assert fit["inertia_rel_err"] < 0.2 and fit["k_rel_err"] < 0.2

    # open loop in MuJoCo: the nominal plan misses by decimetres; the identified plan lands
    # within 2 cm, as close as a plan on MuJoCo's own parameters (their difference: the
    # planner's LGVI at 0.03 s against MuJoCo's RK4 at 3 ms, the same for both)
    miss = {p["model"]: p["flown_in_mujoco_miss_mm"] for p in plans}
    assert all(p["status"] == "converged" for p in plans)
    assert miss["nominal"] > 100
    assert miss["identified"] < 20
    assert miss["identified"] < 2 * miss["MuJoCo's"] + 5

    # closed loop, read from MuJoCo's state: within 2 cm of each waypoint, no failed solve
    for f in flights:
        assert f["leg1_error_mm"] < 20 and f["final_error_mm"] < 20, f
        assert f["failed_ticks"] == 0
    (identified,) = [f for f in flights if f["model"] == "identified"]
    from geomjax.control.examples import QUADROTOR

    assert identified["model_mass"] == pytest.approx(1.1 * QUADROTOR["mass"], rel=1e-3)

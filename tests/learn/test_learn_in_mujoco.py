"""Learning from an external simulator and flying what was learned in it: crocoddyl's quadrotor
written in MJCF (benchmarks/bench_online_mpc.py), its body 10 % heavier than the nominal model,
recorded in MuJoCo under set-point tracking by OnlineMPC, identified by ``fit_parameters``, then
planned and flown in MuJoCo (benchmarks/bench_learn_quadrotor.py's ``--mujoco`` section).

Checked against MuJoCo itself: the identified mass against the mass of MuJoCo's body; the open-
loop plans against MuJoCo's flight of their thrusts (a plan on the nominal model misses, one on
the identified model lands where a plan on MuJoCo's own parameters does); the closed loop's final
pose read from MuJoCo's state, for the nominal, the identified and the nominal model with a learned
wrench map; a black-box neural ODE trained on the same records and flown by the same loop tracks
at least ten times worse."""

import importlib
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_records_are_consecutive_pieces_of_the_flight(monkeypatch):
    """The records cut from a flight (no MuJoCo needed: a flight's arrays): consecutive pieces
    of 34 samples sharing their boundary sample, the commands of their intervals, the sample
    times from 0; without noise the flight's own poses and twists, with noise within the
    noise's scale of them."""
    import jax.numpy as jnp

    import geomjax as gj

    monkeypatch.syspath_prepend(str(BENCH))
    bench = importlib.import_module("bench_learn_quadrotor")
    rng = np.random.default_rng(0)
    n = 70  # samples: two pieces of 34 (0–33, 33–66), the last 3 left over
    xi = rng.standard_normal((n, 6))
    g = np.asarray(gj.SE3.exp(jnp.asarray(0.5 * rng.standard_normal((n, 6)))))
    u = rng.uniform(0.1, 5.0, (n - 1, 4))
    flight = dict(poses=g, twists=xi, thrusts=u, dt=0.03)
    exact = bench.mujoco_records(flight, samples=34, noise=0.0)
    assert len(exact) == 2
    for j, rec in enumerate(exact):
        a = 33 * j
        np.testing.assert_allclose(rec.g, g[a : a + 34], atol=1e-15)
        np.testing.assert_array_equal(rec.xi, xi[a : a + 34])
        np.testing.assert_array_equal(rec.controls, u[a : a + 33])
        np.testing.assert_allclose(rec.times, 0.03 * np.arange(34))
    np.testing.assert_allclose(exact[0].g[-1], exact[1].g[0], atol=1e-15)
    noisy = bench.mujoco_records(flight, samples=34, noise=1e-4)
    for rec, ref in zip(noisy, exact, strict=True):
        d = np.abs(rec.g - ref.g).max()
        assert 1e-6 < d < 1e-2  # perturbed, on the noise's scale (1e-4 rad and m)
        assert 1e-5 < np.abs(rec.xi - ref.xi).max() < 1e-1  # twists: 1e-3
        np.testing.assert_array_equal(rec.controls, ref.controls)


@pytest.mark.long
@pytest.mark.timeout(2400)
def test_identified_in_mujoco_then_flown_in_mujoco(monkeypatch, tmp_path):
    pytest.importorskip("mujoco")
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
    # a learned wrench map on the nominal model absorbs the mass ratio as the thrust's gain:
    # m_nominal / m_MuJoCo = 1 / 1.1 (measured 2.3e-5 relative)
    assert fit["input_map_force_gain_rel_err"] < 1e-3, fit

    # open loop in MuJoCo: the nominal plan misses by decimetres; the identified plan lands
    # within 2 cm, as close as a plan on MuJoCo's own parameters (their difference: the
    # planner's LGVI at 0.03 s against MuJoCo's RK4 at 3 ms, the same for both)
    miss = {p["model"]: p["flown_in_mujoco_miss_mm"] for p in plans}
    assert all(p["status"] == "converged" for p in plans)
    assert miss["nominal"] > 100
    assert miss["identified"] < 20
    assert miss["identified"] < 2 * miss["MuJoCo's"] + 5

    # the structured models' plans stay on SE(3) to round-off
    assert all(p["group_defect"] < 1e-12 for p in plans), plans

    # closed loop, read from MuJoCo's state: within 2 cm of each waypoint, no failed solve
    by = {f["model"]: f for f in flights}
    black_box = by.pop("neural ODE (black box)")
    for f in by.values():
        assert f["leg1_error_mm"] < 20 and f["final_error_mm"] < 20, f
        assert f["failed_ticks"] == 0
    # the black box trained on the same records, flown by the same loop: at least ten times
    # the identified model's tracking error along the flight
    identified = by["identified"]
    assert black_box["tracking_rms_mm"] > 10 * identified["tracking_rms_mm"], black_box
    from geomjax.control.examples import QUADROTOR

    assert identified["model_mass"] == pytest.approx(1.1 * QUADROTOR["mass"], rel=1e-3)

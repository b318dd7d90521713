"""Identifying a quadrotor on SE(3) and planning with what was learned (geomjax.learn).

    python benchmarks/bench_learn_quadrotor.py [--fast]   (or: geomjax bench learn-quadrotor)

Data: flights of ``geomjax.learn.problems.QUADROTOR_TRUTH`` (crocoddyl's hector quadrotor with
small products of inertia) under known random rotor thrusts around hover, 50 Hz, from SciPy's
DOP853 on the Newton–Euler equations, 1 mrad / 1 mm pose noise and 0.01 velocity noise.  Unknown:
the mass, the full SPD inertia and the rotors' moment-to-thrust ratio (the arm length is known:
see ``QuadrotorModel`` for why one torque scale must be).  Reports:

* the first fit's wall time (compilation + run) and a second fit of the same structure on other
  flights from another start (run only: the compiled solver is reused), side by side;
* the errors of the estimates against the generating values, and their Gauss–Newton standard
  deviations;
* crocoddyl's task (rest → (1, 0, 1) m in 0.99 s) planned by DDP on the identified model and on
  the true model (LGVI, 0.03-s steps), each plan's thrusts flown open loop on the true dynamics
  (DOP853): the final distance to the target.

Writes ``benchmarks/results/learn_quadrotor.json``.
"""

from __future__ import annotations

import time

import jax
import numpy as np
from common import print_table, write_json

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402
from geomjax.learn import fit_parameters, identify  # noqa: E402
from geomjax.learn.problems import QUADROTOR_TRUTH as T  # noqa: E402
from geomjax.learn.problems import QuadrotorModel, quadrotor_records  # noqa: E402
from geomjax.learn.reference import se3_reference  # noqa: E402

TARGET = np.array([1.0, 0.0, 1.0])


def fit(flights, start):
    guess = QuadrotorModel(start[0], start[1], start[2], T["arm"], method=gj.Composition(gj.LGVI()))
    t = time.perf_counter()
    traces = identify.TRACES["levenberg_marquardt"]
    res = fit_parameters(
        guess,
        flights,
        lambda q: (q.mass, q.inertia, q.moment_coefficient),  # a new function every fit
        kinds=("positive", "spd", "positive"),
        substeps=2,
        noise=1e-3,
        velocity_noise=1e-2,
        segment_length=25,
    )
    wall = time.perf_counter() - t
    return res, wall, identify.TRACES["levenberg_marquardt"] - traces


def errors(res):
    m, J, k = (np.asarray(v) for v in res.values)
    return {
        "mass_rel_err": abs(float(m) - T["mass"]) / T["mass"],
        "mass_rel_std": float(res.std[0]) / T["mass"],
        "inertia_rel_err": float(np.linalg.norm(J - T["inertia"]) / np.linalg.norm(T["inertia"])),
        "k_rel_err": abs(float(k) - T["moment_coefficient"]) / T["moment_coefficient"],
        "k_rel_std": float(res.std[2]) / T["moment_coefficient"],
        "sigma": res.sigma,
    }


def plan_and_fly(model):
    from geomjax.control.examples import quadrotor_problem
    from geomjax.control.trajopt import solve_ocp

    task = quadrotor_problem(method=gj.LGVI(), system=model.system(), actuation=model.actuation())
    t = time.perf_counter()
    sol = solve_ocp(task, progress=False)
    wall = time.perf_counter() - t
    truth = QuadrotorModel(T["mass"], T["inertia"], T["moment_coefficient"], T["arm"])
    g, _ = se3_reference(
        T["mass"],
        T["inertia"],
        np.eye(4),
        np.zeros(6),
        np.asarray(sol.times),
        gravity=T["gravity"],
        input_map=np.asarray(truth.actuation()),
        controls=np.asarray(sol.controls),
    )
    return {
        "status": sol.stop_reason,
        "plan_s": wall,
        "planned_miss_m": float(np.linalg.norm(np.asarray(sol.states.g[-1, :3, 3]) - TARGET)),
        "flown_on_truth_miss_m": float(np.linalg.norm(g[-1, :3, 3] - TARGET)),
    }


def main(argv=None):
    from common import fast_mode

    fast = fast_mode(argv)
    n_samples = 26 if fast else 51
    fits = []
    results = {}
    for label, seed, start in (
        ("first fit (compiles)", 0, (1.2, np.diag([0.015, 0.015, 0.025]), 0.03)),
        ("second fit, same structure", 5, (1.7, np.diag([0.009, 0.010, 0.018]), 0.01)),
    ):
        flights = quadrotor_records(n_records=3, n_samples=n_samples, excitation=1.0, seed=seed)
        res, wall, traces = fit(flights, start)
        results[label] = res
        fits.append(
            {
                "fit": label,
                "wall_s": wall,
                "new_traces": traces,
                "status": res.status,
                **errors(res),
            }
        )
    print_table(
        fits,
        ["fit", "wall_s", "new_traces", "mass_rel_err", "inertia_rel_err", "k_rel_err", "sigma"],
        title="quadrotor identification (3 flights, errors against the generating values)",
    )
    ratio = fits[0]["wall_s"] / fits[1]["wall_s"]
    print(f"first / second fit wall time: {ratio:.1f}x (the second reuses the compiled solver)")
    learned = results["first fit (compiles)"].system
    truth = QuadrotorModel(T["mass"], T["inertia"], T["moment_coefficient"], T["arm"])
    plans = [
        {"model": "identified", **plan_and_fly(learned)},
        {"model": "true", **plan_and_fly(truth)},
    ]
    print_table(
        plans,
        ["model", "status", "plan_s", "planned_miss_m", "flown_on_truth_miss_m"],
        title="DDP plan (LGVI, 0.03 s) flown open loop on the true dynamics (DOP853)",
    )
    write_json(
        "learn_quadrotor",
        {"fits": fits, "first_over_second": ratio, "plans": plans, "fast": fast},
    )


if __name__ == "__main__":
    main()

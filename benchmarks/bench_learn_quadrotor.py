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

* rollouts on held-out flights (new thrust sequences, from the reference) up to 10× the
  training records' length, open loop from the true initial state: the identified model (LGVI,
  four steps per sample; the true parameters in the same integrator as the floor of what any
  model integrated so can reach: open loop, the flights diverge from any small error) against a black-box neural ODE (diffrax, ``ż = MLP(z, u)`` on
  ``z = (vec R, x, ω, v)``, 64×2 tanh) trained on the same flights with Adam (``BLACK_BOX_STEPS``
  steps); position and rotation errors at 1×, 2×, 5× and 10× the record length, and each
  model's group defect ``|RᵀR − 1|`` (``--rollouts``: only this section and the first fit).

``--mujoco``: the loop closed in MuJoCo (:func:`mujoco_section`): records from MuJoCo flights
of crocoddyl's quadrotor 10 % heavier than its nominal model, under set-point tracking by
:class:`~geomjax.control.OnlineMPC` planning on the nominal model; the mass, inertia and rotor
ratio identified from them; crocoddyl's task planned on each model and flown open loop in
MuJoCo; and the flight to (2, 1, 1.5) and back flown in MuJoCo with ``OnlineMPC`` planning on
the nominal and on the identified model, errors read from MuJoCo's state
(``learn_quadrotor_mujoco.json``).

Writes ``benchmarks/results/learn_quadrotor.json`` (``learn_quadrotor_rollouts.json`` and
``learn_quadrotor_rollouts.png`` for the rollouts).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from common import RESULTS, print_table, save_figure, timer, write_json

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402
from geomjax.learn import NeuralODE, fit_neural_ode, fit_parameters, identify  # noqa: E402
from geomjax.learn.problems import QUADROTOR_TRUTH as T  # noqa: E402
from geomjax.learn.problems import QuadrotorModel, quadrotor_records, rotation_errors  # noqa: E402
from geomjax.learn.reference import se3_reference  # noqa: E402

TARGET = np.array([1.0, 0.0, 1.0])
H = 0.02  # the records' sample interval (quadrotor_records)
HORIZONS = (1, 2, 5, 10)
BLACK_BOX_STEPS = 1500
SUBSTEPS = 4  # LGVI steps per sample in the rollouts (0.005 s)


def fit(flights, start):
    guess = QuadrotorModel(start[0], start[1], start[2], T["arm"], method=gj.Composition(gj.LGVI()))
    t = timer()
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
    wall = t.elapsed
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
    t = timer()
    sol = solve_ocp(task, progress=False)
    wall = t.elapsed
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


def _flat(g):
    """``(N, 12)``: ``vec R`` and the position of poses ``(N, 4, 4)``."""
    g = np.asarray(g)
    return np.concatenate([g[:, :3, :3].reshape(len(g), 9), g[:, :3, 3]], axis=1)


def _errors(g_ref, R, x):
    """Position error [m] and rotation angle [rad] per sample (``R`` projected onto SO(3): the
    black box's matrices leave the group)."""
    return (
        np.linalg.norm(np.asarray(x) - np.asarray(g_ref)[:, :3, 3], axis=1),
        rotation_errors(np.asarray(g_ref)[:, :3, :3], R),
    )


def rollouts(identified, flights, n_samples, fast):
    """The identified model and a neural ODE trained on ``flights``, rolled out on held-out
    flights 10× as long (see the module docstring)."""
    steps = BLACK_BOX_STEPS // 3 if fast else BLACK_BOX_STEPS
    t = timer()
    node, _, losses = fit_neural_ode(
        NeuralODE(12, 6, jax.random.PRNGKey(1), n_u=4),
        [_flat(f.g) for f in flights],
        H,
        W_obs=[np.asarray(f.xi) for f in flights],
        velocity_weight=1e-2,
        segment_length=10,
        max_iters=steps,
        controls=[np.asarray(f.controls) for f in flights],
    )
    node_train_s = t.elapsed
    n_long = 10 * (n_samples - 1) + 1
    _, exact = quadrotor_records(n_records=3, n_samples=n_long, excitation=1.0, seed=99, clean=True)
    held = quadrotor_records(n_records=3, n_samples=n_long, excitation=1.0, seed=99)
    truth = QuadrotorModel(T["mass"], T["inertia"], T["moment_coefficient"], T["arm"])
    models = {"identified (LGVI)": identified, "true parameters (LGVI)": truth}
    BB = "neural ODE (black box)"
    curves = {**{k: [] for k in models}, BB: []}
    defects = {k: 0.0 for k in curves}
    for (g_ref, xi_ref), rec in zip(exact, held, strict=True):
        u = np.asarray(rec.controls)
        for name, model in models.items():
            system, B = model.system(), np.asarray(model.actuation())
            s0 = system.state_from_velocity(jnp.asarray(g_ref[0]), jnp.asarray(xi_ref[0]))
            sol = gj.simulate(
                system,
                gj.LGVI(),
                s0,
                H / SUBSTEPS,
                SUBSTEPS * (n_long - 1),
                np.repeat(u @ B.T, SUBSTEPS, axis=0),
                save_every=SUBSTEPS,
            )
            g = np.asarray(sol.states.g)
            curves[name].append(_errors(g_ref, g[:, :3, :3], g[:, :3, 3]))
            defects[name] = max(
                defects[name], float(np.max(np.asarray(gj.SE3.defect(sol.states.g))))
            )
        z0 = jnp.concatenate([jnp.asarray(_flat(g_ref[:1])[0]), jnp.asarray(xi_ref[0])])
        Z = np.asarray(node.rollout(z0, H, n_long - 1, controls=jnp.asarray(u)))
        Rn = Z[:, :9].reshape(-1, 3, 3)
        curves[BB].append(_errors(g_ref, Rn, Z[:, 9:12]))
        dn = np.max(np.abs(np.einsum("kji,kjl->kil", Rn, Rn) - np.eye(3)))
        defects[BB] = max(defects[BB], float(dn))
    rows = []
    L = n_samples - 1
    worst = {}
    for name, errs in curves.items():
        pos = np.max([e[0] for e in errs], axis=0)
        rot = np.max([e[1] for e in errs], axis=0)
        worst[name] = (pos, rot)
        rows.append(
            {
                "model": name,
                **{f"pos_{k}x_m": float(np.max(pos[: k * L + 1])) for k in HORIZONS},
                **{f"rot_{k}x_rad": float(np.max(rot[: k * L + 1])) for k in HORIZONS},
                "group_defect": defects[name],
            }
        )
    by = {r["model"]: r for r in rows}
    by[BB]["train_s"] = node_train_s
    by[BB]["final_loss"] = float(losses[-1])
    cols = ["model", *[f"pos_{k}x_m" for k in HORIZONS], *[f"rot_{k}x_rad" for k in HORIZONS]]
    print_table(
        rows,
        [*cols, "group_defect"],
        title=f"held-out rollouts, error against horizon (records {L * H:.2f} s; largest of 3)",
    )
    ratio = {
        f"{q}_{k}x": by[BB][f"{q}_{k}x_{u}"] / by["identified (LGVI)"][f"{q}_{k}x_{u}"]
        for q, u in (("pos", "m"), ("rot", "rad"))
        for k in HORIZONS
    }
    print_table([ratio], list(ratio), title="black box / identified")
    write_json(
        "learn_quadrotor_rollouts",
        {
            "rows": rows,
            "black_box_over_identified": ratio,
            "record_s": L * H,
            "black_box_steps": steps,
            "curves": {k: [v[0].tolist(), v[1].tolist()] for k, v in worst.items()},
            "fast": fast,
        },
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    tt = np.arange(n_long) * H
    for (name, (pos, _)), ls in zip(worst.items(), ("-", ":", "--"), strict=True):
        ax.semilogy(tt, np.maximum(pos, 1e-7), ls=ls, label=name)
    ax.axvline(L * H, color="k", lw=0.5)
    ax.set_xlabel(f"time [s] (records are {L * H:.2f} s long)")
    ax.set_ylabel("position error [m] (largest of 3 flights)")
    ax.legend(fontsize=7)
    save_figure(fig, RESULTS / "learn_quadrotor_rollouts.png")
    return rows, ratio


#: the set-points of the recorded MuJoCo flights (m), each held ``MUJOCO_LEG_S`` seconds
MUJOCO_SETPOINTS = ((1.0, 0.0, 1.0), (-1.0, 1.0, 0.5), (0.5, -1.0, 1.5), (0.0, 0.0, 0.0))
MUJOCO_LEG_S = 3.0
#: samples per record cut from the flights (0.99 s at the control period 0.03 s)
MUJOCO_RECORD = 34


def mujoco_records(flight, samples=MUJOCO_RECORD, noise=1e-4, seed=0):
    """Records of a MuJoCo flight (:func:`bench_online_mpc.run_quadrotor_loop`'s poses, twists
    and thrusts, one sample per control period): consecutive pieces of ``samples`` samples,
    poses with ``noise`` (rad and m) and twists with ``10 noise`` of Gaussian noise (a motion
    capture's and an IMU's), the thrusts as commanded."""
    from geomjax.learn import Recording
    from geomjax.learn.reference import noisy

    rng = np.random.default_rng(seed)
    g, xi, u, dt = flight["poses"], flight["twists"], flight["thrusts"], flight["dt"]
    out = []
    for a in range(0, len(u) - samples + 2, samples - 1):
        b = a + samples
        if b > len(g):
            break
        out.append(
            Recording(
                dt * np.arange(samples),
                noisy(g[a:b], noise, rng, translation_sigma=noise),
                xi=xi[a:b] + 10 * noise * rng.standard_normal(xi[a:b].shape),
                controls=u[a : b - 1],
            )
        )
    return out


def mujoco_section(fast=False):
    """Learn in MuJoCo, plan with what was learned, fly it in MuJoCo.

    MuJoCo's body (:func:`bench_online_mpc.quadrotor_mjcf`) is 10 % heavier than crocoddyl's
    nominal model.  1. Records: ``OnlineMPC`` planning on the nominal model flies it through
    :data:`MUJOCO_SETPOINTS` (minimum-jerk references, 1.5 s ramps); the flight is cut into
    0.99-s records with sensor noise (:func:`mujoco_records`).  2. Identification: mass, full
    SPD inertia and rotor ratio by :func:`~geomjax.learn.fit_parameters` (Levenberg–Marquardt,
    multiple shooting), the arm length known, from the nominal values as the start.  3.
    crocoddyl's task planned by DDP on the nominal, the identified and MuJoCo's own parameters,
    each plan's thrusts flown open loop in MuJoCo.  4. The flight to (2, 1, 1.5) and back (:func:`bench_online_mpc.run_quadrotor_loop`'s defaults),
    once planning on the nominal model and once on the identified one: position errors read
    from MuJoCo's state along the flight (against the minimum-jerk reference) and at the end of
    each leg."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_online_mpc as omp

    from geomjax.control.examples import QUADROTOR as C

    setpoints = MUJOCO_SETPOINTS[:2] + ((0.0, 0.0, 0.0),) if fast else MUJOCO_SETPOINTS
    t = timer()
    flight = omp.run_quadrotor_loop(
        waypoints=setpoints, seconds_per_leg=MUJOCO_LEG_S, ramp=1.5, breakdown=False
    )
    record_s = t.elapsed
    data = mujoco_records(flight)
    m_true, J_true, k_true = flight["mass"][1], np.diag(C["inertia"]), C["cm"] / C["cf"]
    nominal = QuadrotorModel(C["mass"], np.diag(C["inertia"]), k_true, C["d_cog"])
    t = timer()
    res = fit_parameters(
        nominal,
        data,
        lambda q: (q.mass, q.inertia, q.moment_coefficient),
        kinds=("positive", "spd", "positive"),
        substeps=2,
        noise=1e-4,
        velocity_noise=1e-3,
        segment_length=MUJOCO_RECORD - 1,
    )
    fit_s = t.elapsed
    m, J, k = (np.asarray(v, float) for v in res.values)
    identified = QuadrotorModel(m, J, k, C["d_cog"])
    fit_row = {
        "records": len(data),
        "record_flight_s": record_s,
        "fit_s": fit_s,
        "status": res.stop_reason,
        "mass_rel_err": abs(float(m) - m_true) / m_true,
        "mass_rel_std": float(res.std[0]) / m_true,
        "inertia_rel_err": float(np.linalg.norm(J - J_true) / np.linalg.norm(J_true)),
        "k_rel_err": abs(float(k) - k_true) / k_true,
        "nominal_mass_rel_err": abs(C["mass"] - m_true) / m_true,
    }
    print_table(
        [fit_row],
        list(fit_row),
        title="identified from MuJoCo flights (MuJoCo's body 10 % heavier than the nominal model)",
    )
    # open loop: crocoddyl's task planned on each model, its thrusts flown in MuJoCo
    from geomjax.control.examples import quadrotor_problem
    from geomjax.control.trajopt import DDP, solve_ocp

    truth = QuadrotorModel(m_true, J_true, k_true, C["d_cog"])
    plans = []
    for label, model in (("nominal", nominal), ("identified", identified), ("MuJoCo's", truth)):
        task = quadrotor_problem(
            bounded=True, method=gj.LGVI(), system=model.system(), actuation=model.actuation()
        )
        sol = solve_ocp(task, DDP(), progress=False)
        poses, _ = omp.quadrotor_open_loop(np.asarray(sol.controls), float(task.dt), mass=m_true)
        plans.append(
            {
                "model": label,
                "status": sol.stop_reason,
                "planned_miss_mm": 1e3
                * float(np.linalg.norm(np.asarray(sol.states.g[-1, :3, 3]) - TARGET)),
                "flown_in_mujoco_miss_mm": 1e3 * float(np.linalg.norm(poses[-1, :3, 3] - TARGET)),
                "group_defect": float(np.max(np.asarray(gj.SE3.defect(sol.states.g)))),
            }
        )
    print_table(
        plans,
        list(plans[0]),
        title="crocoddyl's task (to (1, 0, 1) m in 0.99 s, thrusts in [0.1, 5] N) planned by DDP on "
        "each model (LGVI, 0.03 s), flown open loop in MuJoCo",
    )
    # a learned wrench map on the nominal model: the nominal physics (9 % too light) with the
    # thrust map's wrench corrected by B(g) = I + MLP(g) of the pose, trained on the same
    # records by Levenberg–Marquardt (conjugate gradients); it can learn the mass ratio as a
    # force gain, not as a weight, since its prior and input are the thrusts' wrench
    from geomjax.learn import InputMapped, NeuralInputMap, fit_model

    def pose_features(g):
        return jnp.concatenate([g[:3, :3].reshape(-1), g[:3, 3]])

    wrench_map = NeuralInputMap(
        6, 6, jax.random.PRNGKey(3), n_in=12, features=pose_features, prior=jnp.eye(6), width=8
    )
    mapped = QuadrotorModel(
        C["mass"],
        np.diag(C["inertia"]),
        k_true,
        C["d_cog"],
        method=InputMapped(gj.LGVI(), wrench_map),
    )
    t = timer()
    mfit = fit_model(
        mapped,
        data,
        solver="lm-cg",
        max_iters=40,
        cg_steps=20,
        substeps=2,
        noise=1e-4,
        velocity_noise=1e-3,
        segment_length=MUJOCO_RECORD - 1,
    )
    learned_map = mfit.system
    gain = float(learned_map.method.input_map.matrix(jnp.eye(4))[5, 5])
    fit_row["input_map_fit_s"] = t.elapsed
    fit_row["input_map_status"] = mfit.stop_reason
    fit_row["input_map_force_gain"] = gain
    fit_row["input_map_force_gain_rel_err"] = abs(gain - C["mass"] / m_true) / (C["mass"] / m_true)
    # the black box on the same records: a neural ODE on (vec R, x, ω, v) with the thrusts as
    # inputs, one Tsit5 step per control period, the same multiple shooting as the rollouts'
    t = timer()
    node, _, node_losses = fit_neural_ode(
        NeuralODE(12, 6, jax.random.PRNGKey(1), n_u=4),
        [_flat(np.asarray(r.g)) for r in data],
        flight["dt"],
        W_obs=[np.asarray(r.xi) for r in data],
        velocity_weight=1e-2,
        segment_length=11,
        max_iters=BLACK_BOX_STEPS // 3 if fast else BLACK_BOX_STEPS,
        controls=[np.asarray(r.controls) for r in data],
    )
    fit_row["black_box_fit_s"] = t.elapsed
    fit_row["black_box_final_loss"] = float(node_losses[-1])
    flights = []
    for label, model, box, method in (
        ("nominal", None, None, None),
        ("identified", identified, None, None),
        ("nominal + learned wrench map (LGVI)", learned_map, None, learned_map.method),
        ("neural ODE (black box)", None, node, None),
    ):
        r = omp.run_quadrotor_loop(breakdown=False, model=model, black_box=box, method=method)
        n, W, P = r["ticks_per_leg"], r["waypoints"], r["positions"]
        start, ref = np.zeros(3), []
        for goal in W:
            ref += [omp._min_jerk(start, goal, (j + 1) * r["dt"] / 2.5) for j in range(n)]
            start = goal
        track = np.linalg.norm(P[1:] - np.asarray(ref), axis=1)
        flights.append(
            {
                "model": label,
                "model_mass": r["mass"][0],
                "leg1_error_mm": 1e3 * float(np.linalg.norm(P[n] - W[0])),
                "final_error_mm": 1e3 * float(np.linalg.norm(r["pose"][:3, 3] - W[-1])),
                "tracking_rms_mm": 1e3 * float(np.sqrt(np.mean(track**2))),
                "tracking_max_mm": 1e3 * float(track.max()),
                "failed_ticks": int((r["status"] > 1).sum()),
                "nonfinite_ticks": r["nonfinite_ticks"],
            }
        )
    print_table(
        flights,
        list(flights[0]),
        title="OnlineMPC flying MuJoCo's quadrotor to (2, 1, 1.5) and back, planning on each model "
        "(errors read from MuJoCo's state; tracking: against the minimum-jerk reference flown)",
    )
    by = {f["model"]: f for f in flights}
    black_box = by["neural ODE (black box)"]
    ratio = {
        k: black_box[k] / by["identified"][k]
        for k in ("tracking_rms_mm", "tracking_max_mm", "final_error_mm")
    }
    print_table([ratio], list(ratio), title="black box / identified, flown in MuJoCo")
    write_json(
        "learn_quadrotor_mujoco",
        {
            "fit": fit_row,
            "plans": plans,
            "flights": flights,
            "black_box_over_identified": ratio,
            "fast": fast,
            "setpoints": setpoints,
        },
    )
    return fit_row, plans, flights


def main(argv=None):
    import sys

    from common import fast_mode

    fast = fast_mode(argv)
    argv = sys.argv[1:] if argv is None else argv
    if "--mujoco" in argv:
        mujoco_section(fast)
        return
    n_samples = 26 if fast else 51
    if "--rollouts" in argv:
        flights = quadrotor_records(n_records=3, n_samples=n_samples, excitation=1.0, seed=0)
        res, _, _ = fit(flights, (1.2, np.diag([0.015, 0.015, 0.025]), 0.03))
        rollouts(res.system, flights, n_samples, fast)
        return
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
                "status": res.stop_reason,
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
    flights = quadrotor_records(n_records=3, n_samples=n_samples, excitation=1.0, seed=0)
    rollouts(learned, flights, n_samples, fast)


if __name__ == "__main__":
    main()

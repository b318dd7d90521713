"""Second-order trajectory optimization (geomjax.control.trajopt) against first-order shooting and
crocoddyl.

    python benchmarks/bench_trajopt.py [--fast] [--no-speed]

(a) crocoddyl's quadrotor example (``geomjax.control.examples.quadrotor_problem``, same constants,
    horizon, time step, costs and integrator): DDP and iLQR, each compiled for the first result
    (the default) and with ``fast_iterations=True`` — final cost, iterations, compile time,
    wall after compile, time per iteration — side by side with crocoddyl's FDDP when a Python with
    crocoddyl is found (``CROCODDYL_PYTHON``, default this interpreter; ``pip install -e '.[bench]'``
    installs crocoddyl), timed with ``OMP_NUM_THREADS=1`` in a subprocess alternated with our runs.
(b) the torque-limited rest-to-rest attitude manoeuvre (penalty form, RKMK4): DDP / iLQR against
    L-BFGS shooting on the controls (``geomjax.control.optimize``, bounds as a quadratic
    penalty): iterations and wall time to the same final cost.
(c) batches of attitude problems (random targets) under ``vmap``: problems per second against the
    same problems solved one after another; the batch compiled by ``jax.jit``, ``geomjax.jit``
    and ``geomjax.jit(library_fusions=False)``.
(d) compile and run speed of the solvers, each worked problem and solver in a fresh process
    (:func:`speed_rows`): cost, iterations, compile s (the first solve's wall time less a
    compiled solve's) and its phases from JAX's monitoring events (``trace_s``: Python to
    jaxpr, ``lower_s``: to StableHLO, ``xla_s``: XLA's compilation), ms per solve, ms per
    iteration and the size of the solve's program (jaxpr equations, nested ones included); with
    ``--baseline PATH`` (or ``GEOMJAX_BASELINE``: another geomjax checkout, e.g. the main
    branch) the same measurements of that checkout in the same run, alternated, and the
    ratios.
(e) quadrotor problems under ``vmap`` (:func:`batch_speed_rows`): targets uniform within ±1 m of
    (1, 0, 1), problems per second at batch 1, 64, 256, 1024 (``--fast``: 1, 8, 32) against the
    same problems solved one after another, and how many converged (baseline as in (d)).
    ``--no-speed``: (a)–(c) and (f) only.
(f) ``random-targets``: the bounded quadrotor (thrusts in [0.1, 5]) to 20 held-out targets within
    2 m of the origin (generator seeded with 0; ``--fast``: 5): iterations, status and cost of iLQR, DDP, IPOPT
    (CasADi, when importable) and crocoddyl's BoxFDDP (imported in this process when available,
    e.g. run with a Python that has crocoddyl; skipped otherwise), and per solver the median and
    largest iteration count.  ``--random-targets-only``: (f) alone.
(g) ``--vs-crocoddyl-batch`` (alone; run with a Python that imports crocoddyl): batches of 256 and
    1024 unbounded quadrotor problems under ``vmap`` in one program against the same iLQR solves
    one after another and crocoddyl's FDDP one after another, all in this process, rounds
    interleaved (:func:`crocoddyl_batch_rows`); ``bench_trajopt_batch_crocoddyl.json``.
(h) ``--held-out-only`` (alone): the attitude problem to 8 random rotations (up to 1.5 rad) and
    the rolling ball to 8 random poses (attitude up to 1 rad, contact point in [−0.5, 0.5]²),
    each by iLQR and DDP: status, iterations, cost, and per problem and solver the median and
    largest iteration count (:func:`held_out_rows`; no IPOPT: no CasADi transcription of these
    problems exists); ``bench_trajopt_held_out.json``.
(i) ``--same-start-only`` (alone; run with a Python that imports crocoddyl): crocoddyl's quadrotor
    examples (``SolverFDDP``, and ``SolverBoxFDDP`` with the thrusts in [0.1, 5]) and geomjax's
    iLQR, DDP and :class:`StrictFDDP` from the same three starts, at crocoddyl's threshold
    ``th_stop = 1e-9``: iterations and costs (:func:`same_start_rows`);
    ``bench_trajopt_same_start.json``.
Table + JSON (``benchmarks/results/bench_trajopt.json``), and a plot of the cost against wall
time per solver for (a) and (b) (``benchmarks/results/bench_trajopt.png``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from common import fast_mode, measure, measure_side_by_side, print_table, timer, write_json

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402
from geomjax.control import bound_penalty, optimize  # noqa: E402
from geomjax.control.examples import attitude_problem, quadrotor_problem  # noqa: E402
from geomjax.control.trajopt import DDP, ILQR, solve_ocp  # noqa: E402

_HERE = Path(__file__).resolve().parent

CROC_SCRIPT = r"""
import json, sys
import numpy as np, crocoddyl, pinocchio, example_robot_data
from common import median, timer  # the benchmarks' harness (on PYTHONPATH; it imports jax)
hector = example_robot_data.load("hector"); robot_model = hector.model
state = crocoddyl.StateMultibody(robot_model)
d_cog, cf, cm = 0.1525, 6.6e-5, 1e-6
# crocoddyl 3.2.1's example (examples/quadrotor_fwddyn.py): four thrusters in the body x-y plane
P = lambda x, y: pinocchio.SE3(np.eye(3), np.array([x, y, 0.0]))
ps = [crocoddyl.Thruster(P(d_cog, 0), cm / cf, crocoddyl.ThrusterType.CCW),
      crocoddyl.Thruster(P(0, d_cog), cm / cf, crocoddyl.ThrusterType.CW),
      crocoddyl.Thruster(P(-d_cog, 0), cm / cf, crocoddyl.ThrusterType.CCW),
      crocoddyl.Thruster(P(0, -d_cog), cm / cf, crocoddyl.ThrusterType.CW)]
actuation = crocoddyl.ActuationModelFloatingBaseThrusters(state, ps)
nu = actuation.nu
run, term = crocoddyl.CostModelSum(state, nu), crocoddyl.CostModelSum(state, nu)
xAct = crocoddyl.ActivationModelWeightedQuad(np.array([0.1] * 3 + [1000.0] * 3 + [1000.0] * robot_model.nv))
xReg = crocoddyl.CostModelResidual(state, xAct, crocoddyl.ResidualModelState(state, state.zero(), nu))
uReg = crocoddyl.CostModelResidual(state, crocoddyl.ResidualModelControl(state, nu))
goal = crocoddyl.CostModelResidual(state, crocoddyl.ResidualModelFramePlacement(
    state, robot_model.getFrameId("base_link"), pinocchio.SE3(np.eye(3), np.array([1.0, 0.0, 1.0])), nu))
run.addCost("xReg", xReg, 1e-6); run.addCost("uReg", uReg, 1e-6); run.addCost("trackPose", goal, 1e-2)
term.addCost("goalPose", goal, 3.0)
dt, T = 3e-2, 33
mk = lambda c: crocoddyl.IntegratedActionModelEuler(
    crocoddyl.DifferentialActionModelFreeFwdDynamics(state, actuation, c), dt)
runningModel, terminalModel = mk(run), mk(term)
if len(sys.argv) > 1 and sys.argv[1] == "bounded":
    runningModel.u_lb = np.full(4, 0.1); runningModel.u_ub = np.full(4, 5.0)
problem = crocoddyl.ShootingProblem(np.concatenate([hector.q0, np.zeros(state.nv)]), [runningModel] * T, terminalModel)
walls = []
for _ in range(20):
    # the examples: FDDP (quadrotor_fwddyn.py), BoxDDP with 200 iterations (quadrotor_ubound.py)
    solver = crocoddyl.SolverBoxDDP(problem) if len(sys.argv) > 1 else crocoddyl.SolverFDDP(problem)
    with timer() as t:
        solver.solve([], [], 200)
    walls.append(t.s)
print(json.dumps(dict(cost=solver.cost, iterations=solver.iter, wall=median(walls),
                      x_final=list(np.asarray(solver.xs[-1][:3])))))
"""


def crocoddyl_quadrotor(bounded=False):
    py = os.environ.get("CROCODDYL_PYTHON", sys.executable)
    if not os.path.exists(py):
        return None
    # the child times through the harness (benchmarks/common.py, which imports jax): the
    # crocoddyl Python needs jax as well
    path = os.pathsep.join(p for p in (str(_HERE), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    args = [py, "-c", CROC_SCRIPT] + (["bounded"] if bounded else [])
    try:
        out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
        if out.returncode != 0:
            last = (out.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"crocoddyl baseline not run ({py}): {last}")
            return None
        return json.loads(out.stdout.strip().splitlines()[-1])
    except Exception as e:  # optional baseline
        print("crocoddyl baseline failed:", e)
        return None


def random_targets(count=20, seed=0, radius=2.0):
    """``count`` targets uniform in the ball of ``radius`` m about the origin (rejection sampling
    from the cube, ``numpy.random.default_rng(seed)``): the held-out targets of the bounded
    quadrotor (section (f) and the solver's tests)."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        v = rng.uniform(-radius, radius, 3)
        if np.linalg.norm(v) <= radius:
            out.append(tuple(float(a) for a in v))
    return out


def random_rotations(count=8, seed=0, max_angle=1.5):
    """``count`` rotations ``(axis, angle)``: the axis uniform on the unit sphere, the angle
    uniform in ``[0, max_angle]`` (``numpy.random.default_rng(seed)``): the held-out targets of
    the attitude problem (``attitude_problem(axis=..., angle=...)``, whose worked example turns
    by 1.5 rad about ``(1, 2, −1)``), section (h) and the solver's tests."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        v = rng.normal(size=3)
        out.append(
            (tuple(float(a) for a in v / np.linalg.norm(v)), float(rng.uniform(0, max_angle)))
        )
    return out


def random_ball_targets(count=8, seed=0, max_angle=1.0, half_width=0.5):
    """``count`` rolling-ball targets ``(rotation matrix, position)``: the attitude a
    :func:`random_rotations` draw (up to ``max_angle``), the contact point uniform in the square
    ``[−half_width, half_width]²`` (the worked example: 0.8 rad about ``(1, −1, 2)``, position
    ``(0.5, 0)``); section (h) and the solver's tests."""
    from geomjax.lie import SO3

    rng = np.random.default_rng([seed, 1])  # a stream of its own for the positions
    out = []
    for axis, angle in random_rotations(count, seed, max_angle):
        R = np.asarray(SO3.from_axis_angle(jnp.asarray(axis), jnp.asarray(angle)))
        out.append((R, tuple(float(a) for a in rng.uniform(-half_width, half_width, 2))))
    return out


def _crocoddyl_module():
    try:
        import crocoddyl
        import example_robot_data  # noqa: F401
        import pinocchio  # noqa: F401
    except ImportError:
        return None
    return crocoddyl


def crocoddyl_box_fddp(target, max_iters=200):
    """crocoddyl's bounded quadrotor (``quadrotor_ubound.py``: thrusts in [0.1, 5]) to the pose
    ``(I, target)`` solved by ``SolverBoxFDDP`` from zero controls in THIS process (the peer timed
    beside geomjax, rounds interleaved by the caller); None when crocoddyl is not importable."""
    solver = crocoddyl_quadrotor_solver(target, bounded=True)
    if solver is None:
        return None
    with timer() as t:
        solver.solve([], [], max_iters)
    return dict(cost=float(solver.cost), iterations=int(solver.iter), wall_s=t.s)


def crocoddyl_quadrotor_solver(target, bounded):
    """crocoddyl's quadrotor example to the pose ``(I, target)``: ``SolverBoxFDDP`` with the
    thrusts in [0.1, 5] (``quadrotor_ubound.py``) or ``SolverFDDP`` without bounds
    (``quadrotor_fwddyn.py``), built and not yet solved; None when crocoddyl is not importable."""
    crocoddyl = _crocoddyl_module()
    if crocoddyl is None:
        return None
    import example_robot_data
    import pinocchio

    hector = example_robot_data.load("hector")
    model = hector.model
    state = crocoddyl.StateMultibody(model)
    d_cog, cf, cm = 0.1525, 6.6e-5, 1e-6

    def place(x, y):
        return pinocchio.SE3(np.eye(3), np.array([x, y, 0.0]))

    ccw, cw = crocoddyl.ThrusterType.CCW, crocoddyl.ThrusterType.CW
    ps = [
        crocoddyl.Thruster(place(d_cog, 0), cm / cf, ccw),
        crocoddyl.Thruster(place(0, d_cog), cm / cf, cw),
        crocoddyl.Thruster(place(-d_cog, 0), cm / cf, ccw),
        crocoddyl.Thruster(place(0, -d_cog), cm / cf, cw),
    ]
    act = crocoddyl.ActuationModelFloatingBaseThrusters(state, ps)
    nu = act.nu
    run, term = crocoddyl.CostModelSum(state, nu), crocoddyl.CostModelSum(state, nu)
    w = np.array([0.1] * 3 + [1000.0] * 3 + [1000.0] * model.nv)
    xreg = crocoddyl.CostModelResidual(
        state,
        crocoddyl.ActivationModelWeightedQuad(w),
        crocoddyl.ResidualModelState(state, state.zero(), nu),
    )
    ureg = crocoddyl.CostModelResidual(state, crocoddyl.ResidualModelControl(state, nu))
    pose = pinocchio.SE3(np.eye(3), np.asarray(target, float))
    frame = model.getFrameId("base_link")
    goal = crocoddyl.CostModelResidual(
        state, crocoddyl.ResidualModelFramePlacement(state, frame, pose, nu)
    )
    run.addCost("xReg", xreg, 1e-6)
    run.addCost("uReg", ureg, 1e-6)
    run.addCost("trackPose", goal, 1e-2)
    term.addCost("goalPose", goal, 3.0)

    def integrated(costs):
        dam = crocoddyl.DifferentialActionModelFreeFwdDynamics(state, act, costs)
        return crocoddyl.IntegratedActionModelEuler(dam, 3e-2)

    running, terminal = integrated(run), integrated(term)
    if bounded:
        running.u_lb, running.u_ub = np.full(4, 0.1), np.full(4, 5.0)
    x0 = np.concatenate([hector.q0, np.zeros(state.nv)])
    problem = crocoddyl.ShootingProblem(x0, [running] * 33, terminal)
    # one thread, as geomjax's solve: crocoddyl's default (all cores) waits on its own threads
    # whenever the machine is busy (0.4-0.8 s against 0.01 s per solve on a loaded 2-core host)
    problem.nthreads = 1
    return crocoddyl.SolverBoxFDDP(problem) if bounded else crocoddyl.SolverFDDP(problem)


def _ipopt_target(target):
    """IPOPT (CasADi, exact Hessian, multiple shooting; benchmarks/bench_casadi.py) on the bounded
    quadrotor to ``target``; None without casadi."""
    try:
        import casadi
    except ImportError:
        return None
    sys.path.insert(0, str(_HERE))
    import bench_casadi

    out = bench_casadi.solve_ipopt(casadi, "multiple shooting", True, 1, target=target)
    return dict(
        cost=out["cost"],
        iterations=out["iterations"],
        status="converged" if out["success"] else out["status"],
        wall_s=out["ms_per_solve"] / 1e3,
    )


#: a target on which the solvers once stalled (iLQR 1000 iterations without converging): a row of
#: (f) of its own, left out of the summary
REPORTED_TARGET = (2.0, 1.0, 1.5)

#: the target of crocoddyl's quadrotor examples (``quadrotor_problem``'s default)
EXAMPLE_TARGET = (1.0, 0.0, 1.0)


def same_start_rows(fast):
    """(i) the quadrotor of crocoddyl's examples (target (1, 0, 1); unbounded: ``SolverFDDP``,
    thrusts in [0.1, 5]: ``SolverBoxFDDP``) from the same starts in both libraries, with
    crocoddyl's stopping threshold (``tol = th_stop = 1e-9``; both test ``|d₁ + d₂/2|``):
    the rollout of the lowest admissible constant thrust (geomjax's default start: zero thrust,
    clipped to the bounds), the rollout of the hover thrust ``m g / 4`` per rotor (crocoddyl's
    ``quasiStatic`` at rest), and crocoddyl's own default (every state the initial one, zero
    thrust: a multiple-shooting start, whose gaps each library closes in its own chart).
    Iterations and costs only (no timing).  Rows: problem, start, solver, status, iterations,
    cost."""
    from geomjax.control.examples import QUADROTOR
    from geomjax.control.trajopt import StrictFDDP

    hover = QUADROTOR["mass"] * QUADROTOR["gravity"] / 4
    rows = []
    for bounded in (False, True):
        prob = quadrotor_problem(bounded=bounded)
        name = "quadrotor" + (" (0.1≤f≤5)" if bounded else "")
        lo = QUADROTOR["thrust_min"] if bounded else 0.0
        N = prob.steps
        repeated = jax.tree_util.tree_map(
            lambda a: jnp.broadcast_to(a, (N + 1, *a.shape)), prob.state0
        )
        starts = {
            "rollout of the lowest thrust": (jnp.full((N, 4), lo), None, lo),
            "rollout of the hover thrust": (jnp.full((N, 4), hover), None, hover),
            "crocoddyl's default (x₀ repeated, zero thrust)": (jnp.zeros((N, 4)), repeated, None),
        }
        solvers = [("iLQR", ILQR(tol=1e-9)), ("DDP", DDP(tol=1e-9))]
        if not bounded:
            solvers.append(("StrictFDDP", StrictFDDP(tol=1e-9)))
        for start, (us, xs, thrust) in starts.items():
            for label, solver in solvers:
                sol = solve_ocp(prob, solver, us, xs, max_iters=300, progress=False)
                rows.append(
                    dict(
                        problem=name,
                        start=start,
                        solver=label,
                        status=sol.stop_reason,
                        iterations=int(sol.iterations),
                        cost=float(sol.cost),
                    )
                )
            croc = crocoddyl_quadrotor_solver(EXAMPLE_TARGET, bounded)
            if croc is None:
                continue
            if thrust is None:
                converged = croc.solve([], [], 300)
            else:
                cus = [np.full(4, thrust)] * N
                converged = croc.solve(croc.problem.rollout(cus), cus, 300, True)
            rows.append(
                dict(
                    problem=name,
                    start=start,
                    solver="crocoddyl " + ("BoxFDDP" if bounded else "FDDP"),
                    status="converged" if converged else f"stopped, stop {croc.stop:.1e}",
                    iterations=int(croc.iter),
                    cost=float(croc.cost),
                )
            )
    return rows


def random_target_rows(fast, count=None):
    """(f) the bounded quadrotor (thrusts in [0.1, 5]) to :data:`REPORTED_TARGET` and to held-out
    targets (:func:`random_targets` seeded with 0, within 2 m), each solved by geomjax's iLQR and DDP (one
    compiled program per solver, every target reusing it), IPOPT (CasADi) and crocoddyl's
    BoxFDDP, in this process, the peers interleaved with geomjax target by target.  Rows:
    target, solver, status, iterations, cost."""
    count = count or (5 if fast else 20)
    solvers = [("ILQR", ILQR()), ("DDP", DDP())]
    runs = {name: jax.jit(lambda p, s=s: solve_ocp(p, s, max_iters=300)) for name, s in solvers}
    rows = []
    cases = [("reported", REPORTED_TARGET)] + [
        (f"#{i}", t) for i, t in enumerate(random_targets(count))
    ]
    for tag, target in cases:
        prob = quadrotor_problem(bounded=True, target=target)
        label = f"{tag} ({target[0]:+.2f}, {target[1]:+.2f}, {target[2]:+.2f})"
        for name, run in runs.items():
            sol = run(prob)
            rows.append(
                dict(
                    target=label,
                    solver=name,
                    status=sol.stop_reason,
                    iterations=int(sol.iterations),
                    cost=float(sol.cost),
                )
            )
        for name, peer in (("IPOPT", _ipopt_target), ("BoxFDDP", crocoddyl_box_fddp)):
            out = peer(target)
            if out is not None:
                rows.append(
                    dict(
                        target=label,
                        solver=name,
                        status=out.get("status", "-"),
                        iterations=out["iterations"],
                        cost=out["cost"],
                    )
                )
    return rows


def random_target_summary(rows):
    """Per solver, over the random targets: median and largest iteration count, how many
    converged, and on how many targets its cost is ≤ min(IPOPT, BoxFDDP) (1e-9 relative slack) where a peer ran."""
    rows = [r for r in rows if r["target"].startswith("#")]  # the random targets only
    by = {}
    for r in rows:
        by.setdefault(r["target"], {})[r["solver"]] = r
    out = []
    for name in sorted({r["solver"] for r in rows}):
        mine = [r for r in rows if r["solver"] == name]
        its = [r["iterations"] for r in mine]
        best = 0
        compared = 0
        for r in mine:
            peers = [
                by[r["target"]][p]["cost"] for p in ("IPOPT", "BoxFDDP") if p in by[r["target"]]
            ]
            if peers:
                compared += 1
                best += r["cost"] <= min(peers) * (1 + 1e-9)
        out.append(
            dict(
                solver=name,
                median_iterations=float(np.median(its)),
                max_iterations=max(its),
                converged=sum(r["status"] == "converged" for r in mine),
                targets=len(mine),
                cost_le_peers=f"{best}/{compared}",
            )
        )
    return out


def held_out_rows(fast, count=None):
    """(h) the attitude problem (torques in [−0.2, 0.2], penalty target, RKMK4, 20 steps: the
    setting of (b)) to :func:`random_rotations` (up to 1.5 rad, seeded with 0) from zero
    torques, and the rolling ball (fixed plate, no speed bound, penalty target of weight 1e3) to
    :func:`random_ball_targets` (up to 1 rad, contact point in [−0.5, 0.5]², seeded with 0) from
    the documented loop guess, each by iLQR and DDP (one compiled program per problem and
    solver, at most 300 iterations).  No CasADi transcription of either problem exists
    (bench_casadi.py transcribes the quadrotor only), so IPOPT is not run here.  Rows: problem,
    target, solver, status, iterations, cost."""
    import equinox as eqx

    from geomjax.control.examples import loop_controls, rolling_ball_problem

    count = count or (3 if fast else 8)
    run = eqx.filter_jit(lambda p, s, u: solve_ocp(p, s, u, max_iters=300))
    cases = []
    for axis, angle in random_rotations(count, seed=0):
        prob = attitude_problem(
            torque_max=0.2,
            exact_target=False,
            steps=20,
            method=gj.RKMK4(),
            weight=100.0,
            axis=axis,
            angle=angle,
        )
        label = f"{angle:.2f} rad about ({axis[0]:+.2f}, {axis[1]:+.2f}, {axis[2]:+.2f})"
        cases.append(("attitude", label, prob, jnp.zeros((20, 3))))
    for R, position in random_ball_targets(count, seed=0):
        prob = rolling_ball_problem(
            target_attitude=jnp.asarray(R), target_position=position, exact_target=False
        )
        angle = float(np.arccos(np.clip((np.trace(R) - 1) / 2, -1, 1)))
        label = f"{angle:.2f} rad, ({position[0]:+.2f}, {position[1]:+.2f})"
        cases.append(("rolling ball", label, prob, loop_controls(20, 2.0)))
    rows = []
    for problem, label, prob, u0 in cases:
        for name, solver in (("ILQR", ILQR()), ("DDP", DDP())):
            sol = run(prob, solver, u0)
            rows.append(
                dict(
                    problem=problem,
                    target=label,
                    solver=name,
                    status=sol.stop_reason,
                    iterations=int(sol.iterations),
                    cost=float(sol.cost),
                )
            )
    return rows


def held_out_summary(rows):
    """Per problem and solver: median and largest iteration count, how many converged, and on
    how many targets its cost is the lower of the two solvers' (1e-9 relative slack)."""
    out = []
    for problem in dict.fromkeys(r["problem"] for r in rows):
        mine = [r for r in rows if r["problem"] == problem]
        best = {}
        for r in mine:
            best[r["target"]] = min(best.get(r["target"], np.inf), r["cost"])
        for name in dict.fromkeys(r["solver"] for r in mine):
            rs = [r for r in mine if r["solver"] == name]
            its = [r["iterations"] for r in rs]
            out.append(
                dict(
                    problem=problem,
                    solver=name,
                    median_iterations=float(np.median(its)),
                    max_iterations=max(its),
                    converged=f"{sum(r['status'] == 'converged' for r in rs)}/{len(rs)}",
                    lowest_cost=f"{sum(r['cost'] <= best[r['target']] * (1 + 1e-9) for r in rs)}/{len(rs)}",
                )
            )
    return out


def _timed_solve(prob, solver, max_iters, repeats=5, fast_iterations=False):
    """``(solution, compile s, wall s)``: the first solve less a compiled solve's wall time (the
    harness's median over ``repeats`` compiled solves), and that wall time."""
    kw = dict(max_iters=max_iters, progress=False, fast_iterations=fast_iterations)
    t = measure(lambda: solve_ocp(prob, solver, **kw), repeats=repeats)
    return t.out, t.compile_s, t.run_s


#: cost against wall time after compilation, per problem and solver (the figure of (a), (b))
CURVES: dict = {}


def _curve(name, sol, wall):
    """The cost before each iteration and at the end, against the wall time of the timed solve
    spread evenly over its iterations (the mean time per iteration; the solve is timed without a
    report per iteration, which would cost as much as an iteration)."""
    n = int(sol.iterations)
    cost = [float(c) for c in np.asarray(sol.history["cost"])[:n]] + [float(sol.cost)]
    CURVES[name] = dict(time=[wall * k / n for k in range(n + 1)], cost=cost)


def plot_curves(path):
    """Cost minus the best cost of its problem against wall time (log-log), one panel per
    problem: what a solve costs to reach each accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from common import save_figure

    problems = sorted({k.split(" | ")[0] for k in CURVES})
    fig, axes = plt.subplots(1, len(problems), figsize=(5 * len(problems), 4), squeeze=False)
    for ax, prob in zip(axes[0], problems):
        curves = {k.split(" | ")[1]: v for k, v in CURVES.items() if k.startswith(prob + " | ")}
        # the best cost of the trajectory optimizers (shooting minimizes a penalty form)
        riccati = [v for k, v in curves.items() if "shooting" not in k] or list(curves.values())
        best = min(min(v["cost"]) for v in riccati)
        for label, v in curves.items():
            t = np.asarray(v["time"]) * 1e3
            gap = np.maximum(np.asarray(v["cost"]) - best, 1e-16 * abs(best))
            ax.loglog(np.maximum(t, 1e-3), gap, ".-", label=label)
        ax.set_title(prob)
        ax.set_xlabel("wall time after compilation (ms)")
        ax.set_ylabel("cost − best cost")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def _SOLVERS(*solvers):
    """Each solver compiled for the first result (the default) and with
    ``fast_iterations=True`` (XLA:CPU's own kernels for the small products: faster iterations,
    longer compilation), one after the other in this process."""
    return [(s, quick) for s in solvers for quick in (False, True)]


def _label(solver, quick):
    return type(solver).__name__ + (" fast_iterations" if quick else "")


def quadrotor_rows(fast):
    rows = []
    for bounded in (False, True):
        prob = quadrotor_problem(bounded=bounded)
        for solver, quick in _SOLVERS(DDP(tol=1e-9), ILQR(tol=1e-9)):
            sol, c, w = _timed_solve(prob, solver, 100, 2 if fast else 5, quick)
            n = int(sol.iterations)
            name = "quadrotor" + (" (0.1≤f≤5)" if bounded else "")
            _curve(f"{name} | {_label(solver, quick)}", sol, w)
            rows.append(
                dict(
                    problem="quadrotor" + (" (0.1≤f≤5)" if bounded else ""),
                    solver=_label(solver, quick),
                    status=sol.stop_reason,
                    cost=float(sol.cost),
                    iterations=n,
                    compile_s=c,
                    wall_s=w,
                    per_iter_ms=1e3 * w / n,
                )
            )
        croc = crocoddyl_quadrotor(bounded)
        if croc is not None:
            rows.append(
                dict(
                    problem="quadrotor" + (" (0.1≤f≤5)" if bounded else ""),
                    solver="crocoddyl " + ("BoxDDP" if bounded else "FDDP") + " (1 thread)",
                    status="-",
                    cost=croc["cost"],
                    iterations=croc["iterations"],
                    compile_s=0.0,
                    wall_s=croc["wall"],
                    per_iter_ms=1e3 * croc["wall"] / max(croc["iterations"], 1),
                )
            )
    return rows


def attitude_rows(fast):
    steps = 20 if fast else 40
    prob = attitude_problem(
        torque_max=0.2, exact_target=False, steps=steps, method=gj.RKMK4(), weight=100.0
    )
    rows = []
    ref = None
    for solver, quick in _SOLVERS(DDP(), ILQR()):
        sol, c, w = _timed_solve(prob, solver, 200, 2 if fast else 5, quick)
        ref = float(sol.cost) if ref is None else min(ref, float(sol.cost))
        _curve(f"attitude N={steps} | {_label(solver, quick)}", sol, w)
        rows.append(
            dict(
                problem=f"attitude N={steps}",
                solver=_label(solver, quick),
                status=sol.stop_reason,
                cost=float(sol.cost),
                iterations=int(sol.iterations),
                compile_s=c,
                wall_s=w,
                per_iter_ms=1e3 * w / int(sol.iterations),
            )
        )

    def loss(u):
        return prob.cost(prob.rollout(u), u) + 1e4 * bound_penalty(u, -0.2, 0.2)

    u0 = jnp.zeros((steps, 3))
    with timer() as t:
        res = optimize(
            jax.jit(loss), u0, "lbfgs", max_iters=2000, target=ref * (1 + 1e-6), progress=False
        )
    wall = t.s - res.compile_time
    h = res.history
    CURVES[f"attitude N={steps} | L-BFGS shooting"] = dict(
        time=[max(float(t) - res.compile_time, 0.0) for t in h["time"]],
        cost=[float(v) for v in h["loss"]],
    )
    rows.append(
        dict(
            problem=f"attitude N={steps}",
            solver="L-BFGS shooting (penalty bounds)",
            status=res.stop_reason,
            cost=float(res.loss),
            iterations=res.iterations,
            compile_s=res.compile_time,
            wall_s=wall,
            per_iter_ms=1e3 * wall / max(res.iterations, 1),
        )
    )
    return rows


def batch_rows(fast):
    B = 16 if fast else 256
    angles = jnp.linspace(0.3, 1.5, B)

    def one(a):
        prob = attitude_problem(
            torque_max=0.2, exact_target=False, steps=20, method=gj.RKMK4(), weight=100.0, angle=a
        )
        return solve_ocp(prob, ILQR(), max_iters=100)

    single = jax.jit(one)
    jax.block_until_ready(single(angles[0]).controls)
    rows = []
    # the batch compiled three ways (each compiled first, then timed): XLA's defaults, geomjax.jit
    # (the small-loop threshold) and geomjax.jit without XLA:CPU's library fusions
    for label, jit in (
        ("jax.jit", jax.jit),
        ("geomjax.jit", gj.jit),
        ("geomjax.jit(library_fusions=False)", gj.jit(library_fusions=False)),
    ):
        # the first call (compilation included), then one compiled call
        t = measure(jit(jax.vmap(one)), angles, repeats=1)
        ok = int(np.sum(np.asarray(t.out.status) == 0))
        rows.append(
            dict(
                mode=f"vmap batch {B}, {label}",
                problems_per_s=B / t.run_s,
                converged=f"{ok}/{B}",
                compile_s=t.compile_s,
            )
        )
    n_serial = min(B, 32)
    with timer() as t:
        for a in angles[:n_serial]:
            jax.block_until_ready(single(a).controls)
    ws = t.s / n_serial
    rows.append(dict(mode="one after another", problems_per_s=1 / ws, converged="-"))
    return rows


# --- (d), (e): compile and run speed, each measurement in a fresh process ----------------------
SPEED_CASES = ("quadrotor", "quadrotor (0.1≤f≤5)", "attitude N=40")


def _speed_problem(case):
    if case.startswith("quadrotor"):
        return quadrotor_problem(bounded="≤" in case), 100
    steps = int(case.split("N=")[1])
    prob = attitude_problem(
        torque_max=0.2, exact_target=False, steps=steps, method=gj.RKMK4(), weight=100.0
    )
    return prob, 200


def _count_equations(jaxpr) -> int:
    """Equations of a jaxpr, those of the nested jaxprs (loop bodies, branches) included."""
    from jax.extend.core import ClosedJaxpr, Jaxpr

    n = 0
    for eqn in jaxpr.eqns:
        n += 1
        for p in eqn.params.values():
            for q in p if isinstance(p, tuple | list) else (p,):
                if isinstance(q, ClosedJaxpr):
                    n += _count_equations(q.jaxpr)
                elif isinstance(q, Jaxpr):
                    n += _count_equations(q)
    return n


def _speed_worker(case, solver_name):
    """One worked problem and solver in this (fresh) process: the first solve's wall time less
    a compiled solve's is the compile time."""
    prob, max_iters = _speed_problem(case)
    tol = 1e-9 if case.startswith("quadrotor") else None
    solver = {"ILQR": ILQR, "DDP": DDP}[solver_name](tol=tol)
    phases = _CompilePhases()
    solve = lambda: solve_ocp(prob, solver, max_iters=max_iters, progress=False)  # noqa: E731
    with timer() as first, timer(time.process_time) as first_cpu, phases:
        jax.block_until_ready(solve())
    # five compiled solves (all samples: the program is compiled), the harness's median
    t = measure(solve, repeats=5, warmup=False)
    sol = t.out
    jaxpr = jax.make_jaxpr(lambda p: solve_ocp(p, solver, max_iters=max_iters))(prob)
    n = int(sol.iterations)
    return dict(
        status=sol.stop_reason,
        cost=float(sol.cost),
        iterations=n,
        compile_s=first.s - t.run_s,
        first_s=first.s,
        first_cpu_s=first_cpu.s,
        **phases.seconds(),
        ms_per_solve=1e3 * t.run_s,
        ms_per_iter=1e3 * t.run_s / n,
        jaxpr_eqns=_count_equations(jaxpr.jaxpr),
    )


_PHASE_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/core/compile/backend_compile_duration": "xla_s",
}


class _CompilePhases:
    """The compilation by phase while in the ``with`` block, from JAX's own monitoring events:
    ``trace_s`` (Python to jaxpr), ``lower_s`` (jaxpr to StableHLO) and ``xla_s`` (XLA's
    compilation, or the load from JAX's persistent cache), each the longest event of its kind
    (the solve's program; the jits traced inside it report nested events of their own, which a
    sum would count twice).  One per process (a JAX listener cannot be removed)."""

    def __init__(self):
        self.total = dict.fromkeys(_PHASE_EVENTS.values(), 0.0)
        self.on = False
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event, duration, **_):
        if self.on and event in _PHASE_EVENTS:
            key = _PHASE_EVENTS[event]
            self.total[key] = max(self.total[key], duration)

    def __enter__(self):
        self.on = True
        return self

    def __exit__(self, *exc):
        self.on = False

    def seconds(self) -> dict:
        return dict(self.total)


def _batch_worker(sizes, serial):
    """Quadrotor iLQR under ``vmap`` at each batch size and one after another: problems/s."""
    rng = np.random.default_rng(0)

    def one(target):
        return solve_ocp(quadrotor_problem(target=target), ILQR(tol=1e-9), max_iters=100)

    batched, single = jax.jit(jax.vmap(one)), jax.jit(one)
    rows = []
    for B in sizes:
        T = jnp.asarray(np.array([1.0, 0.0, 1.0]) + rng.uniform(-1.0, 1.0, (B, 3)))
        # the first call (compilation included), then one compiled call
        t = measure(batched, T, repeats=1)
        out, wall = t.out, t.run_s
        it = np.asarray(out.iterations)
        rows.append(
            dict(
                mode=f"vmap batch {B}",
                problems_per_s=B / wall,
                converged=f"{int(np.sum(np.asarray(out.status) == 0))}/{B}",
                max_iterations=int(it.max()),
                mean_iterations=float(it.mean()),
                compile_s=t.compile_s,
            )
        )
    if not serial:
        return rows
    T = jnp.asarray(np.array([1.0, 0.0, 1.0]) + rng.uniform(-1.0, 1.0, (serial, 3)))
    jax.block_until_ready(single(T[0]).controls)
    ok, its = 0, []
    with timer() as t:
        for target in T:
            out = single(target)
            ok += int(out.status) == 0
            its.append(int(out.iterations))
    wall = t.s
    rows.append(
        dict(
            mode="one after another",
            problems_per_s=serial / wall,
            converged=f"{ok}/{serial}",
            max_iterations=max(its),
            mean_iterations=float(np.mean(its)),
            compile_s=float("nan"),
        )
    )
    return rows


def crocoddyl_batch_rows(fast, rounds=3):
    """(g) batches against crocoddyl, in THIS process: crocoddyl's unbounded quadrotor to targets
    uniform within ±1 m of (1, 0, 1), geomjax's iLQR (``tol=1e-9``, crocoddyl's ``th_stop``)
    under ``vmap`` at batch 256 and 1024 (compiled by ``jax.jit`` and by
    ``geomjax.jit(library_fusions=False)``), the same solve one problem after another (one
    compiled program reused), and crocoddyl's ``SolverFDDP`` one after another on the first
    ``serial`` targets (problems built beforehand: its solves alone are timed), one thread each.
    ``rounds`` interleaved rounds (:func:`common.measure_side_by_side`, the median).  Rows: mode,
    problems/s, converged, mean iterations, compile s, on how many of the shared targets the cost
    ends above and below crocoddyl's by more than 1e-6 relative (the problem has several local
    optima), and the rates over geomjax's serial and crocoddyl's serial ones."""
    sizes, serial = ((8, 32), 8) if fast else ((256, 1024), 64)
    rng = np.random.default_rng(1)
    targets = np.array([1.0, 0.0, 1.0]) + rng.uniform(-1.0, 1.0, (max(sizes), 3))

    def one(target):
        return solve_ocp(quadrotor_problem(target=target), ILQR(tol=1e-9), max_iters=100)

    fns, counts = {}, {}
    for B in sizes:
        T = jnp.asarray(targets[:B])
        for label in ("jax.jit", "geomjax.jit(library_fusions=False)"):
            jit = jax.jit if label == "jax.jit" else partial(gj.jit, library_fusions=False)
            fn = jit(jax.vmap(one))
            name = f"geomjax vmap {B}, {label}"
            fns[name], counts[name] = (lambda fn=fn, T=T: fn(T)), B
    single = jax.jit(one)
    T1 = jnp.asarray(targets[:serial])
    fns["geomjax one after another (jax.jit)"] = lambda: [single(t) for t in T1]
    counts["geomjax one after another (jax.jit)"] = serial
    croc = [crocoddyl_quadrotor_solver(tuple(map(float, t)), False) for t in targets[:serial]]
    if croc[0] is not None:

        def serial_crocoddyl():
            for solver in croc:
                solver.solve([], [], 100)
            return croc

        fns["crocoddyl FDDP one after another"] = serial_crocoddyl
        counts["crocoddyl FDDP one after another"] = serial
    timed = measure_side_by_side(fns, rounds=rounds)
    ref = None
    if croc[0] is not None:
        ref = np.array([solver.cost for solver in croc])
    rows = []
    for name, t in timed.items():
        out, count = t.out, counts[name]
        if name.startswith("crocoddyl"):
            cost, its = np.array([s.cost for s in out]), np.array([s.iter for s in out])
            converged = "-"  # no status: its costs are the reference
        else:
            if isinstance(out, list):
                cost = np.array([float(s.cost) for s in out])
                status = np.array([int(s.status) for s in out])
                its = np.array([int(s.iterations) for s in out])
            else:
                cost, status, its = (np.asarray(a) for a in (out.cost, out.status, out.iterations))
            converged = f"{int(np.sum(status == 0))}/{count}"
        shared = min(len(cost), serial)
        # several local optima: how many of the shared targets end above / below crocoddyl's
        vs = "-"
        if ref is not None:
            rel = (cost[:shared] - ref[:shared]) / ref[:shared]
            vs = f"{int(np.sum(rel > 1e-6))} above, {int(np.sum(rel < -1e-6))} below"
        rows.append(
            dict(
                mode=name,
                problems=count,
                problems_per_s=count / t.run_s,
                converged=converged,
                mean_iterations=float(np.mean(its)),
                compile_s=max(t.compile_s, 0.0) if not name.startswith("crocoddyl") else 0.0,
                cost_vs_crocoddyl=vs,
            )
        )
    rate = {r["mode"]: r["problems_per_s"] for r in rows}
    serial_rate = rate["geomjax one after another (jax.jit)"]
    croc_rate = rate.get("crocoddyl FDDP one after another", float("nan"))
    for r in rows:
        r["x_geomjax_serial"] = r["problems_per_s"] / serial_rate
        r["x_crocoddyl_serial"] = r["problems_per_s"] / croc_rate
    return rows


def _in_fresh_process(checkout, args, timeout=1800):
    """Run this script's worker ``args`` in a new Python whose ``geomjax`` is ``checkout``'s."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(checkout), str(_HERE)]))
    cmd = [sys.executable, str(_HERE / "bench_trajopt.py"), "--worker", json.dumps(args)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except Exception as e:
        print(f"worker {args} in {checkout} failed: {e}")
        return None


def _checkouts(argv):
    """This checkout, then the baseline one (``--baseline PATH`` / ``GEOMJAX_BASELINE``)."""
    argv = sys.argv[1:] if argv is None else argv
    base = os.environ.get("GEOMJAX_BASELINE")
    if "--baseline" in argv:
        base = argv[argv.index("--baseline") + 1]
    out = [("this", _HERE.parent)]
    if base:
        out.append(("baseline", Path(base).resolve()))
    return out


def speed_rows(fast, checkouts):
    """(d): each (problem, solver) in a fresh process per checkout, checkouts alternated."""
    cases = SPEED_CASES[:1] + SPEED_CASES[2:] if fast else SPEED_CASES
    rows = []
    for case in cases:
        for solver in ("ILQR", "DDP"):
            found = {}
            for name, path in checkouts:
                r = _in_fresh_process(path, ["speed", case, solver])
                if r is not None:
                    found[name] = r
                    rows.append(dict(problem=case, solver=solver, code=name, **r))
            if len(found) == 2:
                a, b = found["this"], found["baseline"]
                rows.append(
                    dict(
                        problem=case,
                        solver=solver,
                        code="baseline / this",
                        compile_s=b["compile_s"] / a["compile_s"],
                        trace_s=b["trace_s"] / a["trace_s"],
                        xla_s=b["xla_s"] / a["xla_s"],
                        ms_per_iter=b["ms_per_iter"] / a["ms_per_iter"],
                        jaxpr_eqns=b["jaxpr_eqns"] / a["jaxpr_eqns"],
                    )
                )
    return rows


def batch_speed_rows(fast, checkouts):
    """(e): batched quadrotor problems, each batch size (and the one-by-one solves) in a fresh
    process per checkout, the checkouts alternated."""
    sizes, serial = ([1, 8, 32], 8) if fast else ([1, 64, 256, 1024], 32)
    rows = []
    for args in [[[B], 0] for B in sizes] + [[[], serial]]:
        for name, path in checkouts:
            for r in _in_fresh_process(path, ["batch", *args], timeout=7200) or []:
                rows.append(dict(code=name, **r))
    return rows


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--worker" in argv:  # a measurement in this fresh process (speed_rows, batch_speed_rows)
        kind, *args = json.loads(argv[argv.index("--worker") + 1])
        out = _speed_worker(*args) if kind == "speed" else _batch_worker(*args)
        print(json.dumps(out))
        return
    fast = fast_mode(argv)
    if "--speed-only" in argv or "--batch-only" in argv:  # (d) and (e) alone, or (e)
        _speed_main(fast, argv)
        return
    if "--vs-crocoddyl-batch" in argv:  # (g) alone (crocoddyl importable in this Python)
        grows = crocoddyl_batch_rows(fast)
        print_table(grows, list(grows[0]), "(g) batches against crocoddyl, one process")
        write_json("bench_trajopt_batch_crocoddyl", dict(rows=grows, load_average=os.getloadavg()))
        return
    if "--held-out-only" in argv:  # (h) alone
        hrows = held_out_rows(fast)
        print_table(hrows, list(hrows[0]), "(h) attitude and rolling ball, held-out targets")
        hsum = held_out_summary(hrows)
        print_table(hsum, list(hsum[0]), "(h) summary")
        write_json("bench_trajopt_held_out", dict(rows=hrows, summary=hsum))
        return
    if "--same-start-only" in argv:  # (i) alone (crocoddyl importable in this Python)
        srows = same_start_rows(fast)
        print_table(srows, list(srows[0]), "(i) crocoddyl's quadrotor from the same starts")
        write_json("bench_trajopt_same_start", dict(rows=srows))
        return
    if "--random-targets-only" in argv:  # (f) alone
        trows = random_target_rows(fast)
        print_table(trows, ["target", "solver", "status", "iterations", "cost"], "(f)")
        tsum = random_target_summary(trows)
        print_table(tsum, list(tsum[0]), "(f) summary")
        write_json("bench_trajopt_random_targets", dict(rows=trows, summary=tsum))
        return
    load_start = os.getloadavg()
    cols = [
        "problem",
        "solver",
        "status",
        "cost",
        "iterations",
        "compile_s",
        "wall_s",
        "per_iter_ms",
    ]
    qrows = quadrotor_rows(fast)
    print_table(qrows, cols, "(a) crocoddyl's quadrotor example")
    arows = attitude_rows(fast)
    print_table(arows, cols, "(b) torque-limited attitude: DDP/iLQR vs L-BFGS shooting")
    brows = batch_rows(fast)
    print_table(
        brows, ["mode", "problems_per_s", "converged", "compile_s"], "(c) batched attitude problems"
    )
    trows = random_target_rows(fast)
    print_table(
        trows,
        ["target", "solver", "status", "iterations", "cost"],
        "(f) bounded quadrotor, held-out targets",
    )
    tsum = random_target_summary(trows)
    print_table(tsum, list(tsum[0]), "(f) summary")
    # a shared machine: the load average (1, 5, 15 min) at the start and end of the run; the
    # ratios within one run are what to compare
    load = dict(start=load_start, end=os.getloadavg())
    print("load average (1, 5, 15 min): start", load["start"], "end", load["end"])
    write_json(
        "bench_trajopt",
        dict(
            quadrotor=qrows,
            attitude=arows,
            batch=brows,
            random_targets=dict(rows=trows, summary=tsum),
            load_average=load,
            curves=CURVES,
        ),
    )
    plot_curves(Path(__file__).resolve().parent / "results" / "bench_trajopt.png")
    if "--no-speed" not in argv:  # (d), (e): a fresh process per measurement (long)
        _speed_main(fast, argv)


def _speed_main(fast, argv):
    """(d) and (e), written to ``bench_trajopt_speed.json``."""
    load_start = os.getloadavg()
    checkouts = _checkouts(argv)
    srows = [] if "--batch-only" in argv else speed_rows(fast, checkouts)
    cols = ["problem", "solver", "code", "status", "cost", "iterations", "compile_s"]
    cols += ["trace_s", "lower_s", "xla_s", "ms_per_solve", "ms_per_iter", "jaxpr_eqns"]
    if srows:
        print_table(srows, cols, "(d) compile and run speed (each in a fresh process)")
    bcols = ["code", "mode", "problems_per_s", "converged", "max_iterations", "mean_iterations"]
    bcols += ["compile_s"]
    brows = batch_speed_rows(fast, checkouts)
    if brows:
        print_table(brows, bcols, "(e) quadrotor problems under vmap (targets ±1 m of (1, 0, 1))")
    load = dict(start=load_start, end=os.getloadavg())
    print("load average (1, 5, 15 min): start", load["start"], "end", load["end"])
    write_json("bench_trajopt_speed", dict(speed=srows, batch=brows, load_average=load))


if __name__ == "__main__":
    main()

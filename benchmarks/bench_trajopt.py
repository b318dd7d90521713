"""Second-order trajectory optimization (geomjax.control.trajopt) against first-order shooting and
crocoddyl.

    python benchmarks/bench_trajopt.py [--fast]

(a) crocoddyl's quadrotor example (``geomjax.control.examples.quadrotor_problem``, same constants,
    horizon, time step, costs and integrator): DDP and iLQR — final cost, iterations, compile time,
    wall after compile, time per iteration — side by side with crocoddyl's FDDP when a Python with
    crocoddyl is found (``CROCODDYL_PYTHON``, default this interpreter; ``pip install -e '.[bench]'``
    installs crocoddyl), timed with ``OMP_NUM_THREADS=1`` in a subprocess alternated with our runs.
(b) the torque-limited rest-to-rest attitude manoeuvre (penalty form, RKMK4): DDP / iLQR against
    L-BFGS shooting on the controls (``geomjax.control.optimize``, bounds as a quadratic
    penalty): iterations and wall time to the same final cost.
(c) batches of attitude problems (random targets) under ``vmap``: problems per second against the
    same problems solved one after another.
Table + JSON (``benchmarks/results/bench_trajopt.json``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from common import fast_mode, print_table, write_json

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402
from geomjax.control import bound_penalty, optimize  # noqa: E402
from geomjax.control.examples import attitude_problem, quadrotor_problem  # noqa: E402
from geomjax.control.trajopt import DDP, ILQR, solve_ocp  # noqa: E402

CROC_SCRIPT = r"""
import json, sys, time
import numpy as np, crocoddyl, pinocchio, example_robot_data
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
best = np.inf
for _ in range(20):
    # the examples: FDDP (quadrotor_fwddyn.py), BoxDDP with 200 iterations (quadrotor_ubound.py)
    solver = crocoddyl.SolverBoxDDP(problem) if len(sys.argv) > 1 else crocoddyl.SolverFDDP(problem)
    t0 = time.perf_counter(); solver.solve([], [], 200); w = time.perf_counter() - t0
    best = min(best, w)
print(json.dumps(dict(cost=solver.cost, iterations=solver.iter, wall=best,
                      x_final=list(np.asarray(solver.xs[-1][:3])))))
"""


def crocoddyl_quadrotor(bounded=False):
    py = os.environ.get("CROCODDYL_PYTHON", sys.executable)
    if not os.path.exists(py):
        return None
    env = dict(os.environ, OMP_NUM_THREADS="1")
    args = [py, "-c", CROC_SCRIPT] + (["bounded"] if bounded else [])
    try:
        out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except Exception as e:  # optional baseline
        print("crocoddyl baseline failed:", e)
        return None


def _timed_solve(prob, solver, max_iters, repeats=5):
    t0 = time.perf_counter()
    sol = solve_ocp(prob, solver, max_iters=max_iters, progress=False)
    jax.block_until_ready(sol.controls)
    compile_s = time.perf_counter() - t0
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sol = solve_ocp(prob, solver, max_iters=max_iters, progress=False)
        jax.block_until_ready(sol.controls)
        walls.append(time.perf_counter() - t0)
    return sol, compile_s - min(walls), min(walls)


def quadrotor_rows(fast):
    rows = []
    for bounded in (False, True):
        prob = quadrotor_problem(bounded=bounded)
        for solver in (DDP(tol=1e-9), ILQR(tol=1e-9)):
            sol, c, w = _timed_solve(prob, solver, 100, repeats=2 if fast else 5)
            n = int(sol.iterations)
            rows.append(
                dict(
                    problem="quadrotor" + (" (0.1≤f≤5)" if bounded else ""),
                    solver=type(solver).__name__,
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
    for solver in (DDP(), ILQR()):
        sol, c, w = _timed_solve(prob, solver, 200, repeats=2 if fast else 5)
        ref = float(sol.cost) if ref is None else min(ref, float(sol.cost))
        rows.append(
            dict(
                problem=f"attitude N={steps}",
                solver=type(solver).__name__,
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
    t0 = time.perf_counter()
    res = optimize(
        jax.jit(loss), u0, "lbfgs", max_iters=2000, target=ref * (1 + 1e-6), progress=False
    )
    wall = time.perf_counter() - t0 - res.compile_time
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

    batched = jax.jit(jax.vmap(one))
    single = jax.jit(one)
    jax.block_until_ready(batched(angles).controls)
    jax.block_until_ready(single(angles[0]).controls)
    t0 = time.perf_counter()
    out = batched(angles)
    jax.block_until_ready(out.controls)
    wb = time.perf_counter() - t0
    n_serial = min(B, 32)
    t0 = time.perf_counter()
    for a in angles[:n_serial]:
        jax.block_until_ready(single(a).controls)
    ws = (time.perf_counter() - t0) / n_serial
    ok = int(np.sum(np.asarray(out.status) == 0))
    return [
        dict(mode=f"vmap batch {B}", problems_per_s=B / wb, converged=f"{ok}/{B}"),
        dict(mode="one after another", problems_per_s=1 / ws, converged="-"),
    ]


def main(argv=None):
    fast = fast_mode(argv)
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
    print_table(brows, ["mode", "problems_per_s", "converged"], "(c) batched attitude problems")
    # a shared machine: the load average (1, 5, 15 min) at the start and end of the run; the
    # ratios within one run are what to compare
    load = dict(start=load_start, end=os.getloadavg())
    print("load average (1, 5, 15 min): start", load["start"], "end", load["end"])
    write_json(
        "bench_trajopt", dict(quadrotor=qrows, attitude=arows, batch=brows, load_average=load)
    )


if __name__ == "__main__":
    main()

"""Model predictive control and the derivative of the optimum, timed.

    python benchmarks/bench_mpc.py [--fast]          (or: geomjax bench mpc)

(a) ``run_mpc`` on the torque-limited attitude problem (:func:`attitude_problem`), a 30-node
    horizon, one iLQR iteration per control step (warm-started), plant = model: control steps
    per second of the compiled closed loop (``ticks/s``, the run divided by its control steps),
    for the LGVI and for semi-implicit Euler as the model's integrator, and the compile time
    (the first call's time, eagerly), called as documented (``run_mpc``'s own program: XLA:CPU's
    small-loop threshold raised and no library fusions) and inside the caller's ``jax.jit``;
    the final attitude error says the loop did its job.
(b) the implicit derivative of the optimum (``solve_ocp_implicit``, reverse mode): the time of
    ``jax.grad`` of a loss of the optimal controls with respect to the problem's parameters
    (target angle, initial momentum, weight, limit) against the time of the solve alone, the same
    problem and solver (a ratio: what the derivative adds to a solve).
Table + JSON (``benchmarks/results/mpc.json``); every function compiled first (compile times
reported apart), then timed in interleaved rounds, median round kept (ratios within one run).
"""

from __future__ import annotations

import os
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from common import compile_timed, fast_mode, measure_side_by_side, print_table, write_json

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402
from geomjax.control import MPC, run_mpc  # noqa: E402
from geomjax.control.examples import attitude_problem  # noqa: E402
from geomjax.control.sensitivity import solve_ocp_implicit  # noqa: E402
from geomjax.control.trajopt import ILQR, solve_ocp  # noqa: E402


def mpc_rows(fast):
    ticks = 100 if fast else 400
    rows, fns, meta = [], {}, []
    for name, method in (("LGVI", gj.LGVI()), ("semi-implicit Euler", gj.SemiImplicitEuler())):
        prob = attitude_problem(torque_max=2.0, duration=3.0, steps=30, method=method,
                                exact_target=False, weight=100.0)  # fmt: skip
        ctrl = MPC(ILQR(), max_iters=1)

        def loop(p, ctrl=ctrl):
            return run_mpc(p, steps=ticks, controller=ctrl)

        compiled, compile_s = compile_timed(loop, prob)
        fns[(name, "jit")] = lambda compiled=compiled, prob=prob: compiled(prob)
        meta.append((name, "inside jax.jit (XLA's defaults)", compile_s, prob))
        # the call as documented: run_mpc's own program (small loops, no library fusions); its
        # first call (compilations included) is its compile time
        fns[(name, "eager")] = lambda loop=loop, prob=prob: loop(prob)
        meta.append((name, "eager run_mpc", None, prob))
    timings = measure_side_by_side(fns, rounds=2 if fast else 5)
    for (name, program, compile_s, prob), timing in zip(meta, timings.values()):
        t, res = timing.run_s, timing.out
        compile_s = timing.first_s if compile_s is None else compile_s
        target = prob.terminal_cost.residual.target
        R = np.asarray(res.states.R[-1])
        angle = float(np.arccos(np.clip((np.trace(np.asarray(target).T @ R) - 1) / 2, -1, 1)))
        rows.append(
            {
                "model integrator": name,
                "program": program,
                "horizon": prob.steps,
                "iterations per tick": 1,
                "ticks": ticks,
                "compile s": compile_s,
                "ms per tick": 1e3 * t / ticks,
                "ticks/s": ticks / t,
                "final angle error rad": angle,
            }
        )
    return rows


THETA0 = np.array([1.0, 0.1, -0.2, 0.05, 100.0, 0.5])


def _problem(theta, steps):
    p = attitude_problem(torque_max=theta[5], exact_target=False, steps=steps,
                         duration=0.2 * steps, method=gj.SemiImplicitEuler(), weight=theta[4],
                         angle=theta[0])  # fmt: skip
    return eqx.tree_at(lambda q: q.state0.Pi, p, theta[1:4])


def implicit_rows(fast):
    rows = []
    for steps in (10,) if fast else (10, 30):
        solver = ILQR(tol=1e-12)
        w = jnp.linspace(-1.0, 1.0, steps * 3).reshape(steps, 3)

        def solve(th, steps=steps):
            return solve_ocp(_problem(th, steps), solver, max_iters=100).controls

        def grad(th, steps=steps):
            return jax.grad(
                lambda t: jnp.sum(
                    w * solve_ocp_implicit(_problem(t, steps), solver, max_iters=100).controls
                )
            )(th)

        th = jnp.asarray(THETA0)
        f_solve, c_solve = compile_timed(solve, th)
        f_grad, c_grad = compile_timed(grad, th)
        res = measure_side_by_side({"solve": f_solve, "grad": f_grad}, th, rounds=3 if fast else 10)
        t_solve, t_grad, g = res["solve"].run_s, res["grad"].run_s, res["grad"].out
        # the derivative is finite and not zero (its accuracy is tested against finite
        # differences in tests/control/test_sensitivity.py)
        assert np.all(np.isfinite(np.asarray(g))) and float(jnp.abs(g).max()) > 0
        rows.append(
            {
                "nodes": steps,
                "compile solve s": c_solve,
                "compile gradient s": c_grad,
                "ms solve": 1e3 * t_solve,
                "ms solve + gradient": 1e3 * t_grad,
                "gradient/solve": t_grad / t_solve,
            }
        )
    return rows


def main(argv=None):
    fast = fast_mode(argv)
    mpc = mpc_rows(fast)
    print_table(mpc, list(mpc[0]), "(a) run_mpc, attitude problem, one iLQR iteration per tick")
    implicit = implicit_rows(fast)
    print_table(
        implicit, list(implicit[0]), "(b) implicit derivative of the optimum against a solve"
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    write_json("mpc", {"mpc": mpc, "implicit_gradient": implicit, "load_average": load})
    return 0


if __name__ == "__main__":
    sys.exit(main())

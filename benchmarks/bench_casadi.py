"""The quadrotor of :func:`geomjax.control.examples.quadrotor_problem` written for CasADi and solved
by IPOPT: the tool most users would otherwise pick for nonlinear MPC.

    python benchmarks/bench_casadi.py [--fast]

The same problem: crocoddyl's hector quadrotor on SE(3), from rest at the origin to the pose
``(I, (1, 0, 1))`` in 33 steps of 0.03 s, semi-implicit Euler (velocity first, then
``g_{k+1} = g_k exp(h ξ_{k+1})``), the same least-squares costs and weights (crocoddyl's), thrusts
free (``quadrotor_fwddyn``) or bounded in ``[0.1, 5]`` (``quadrotor_ubound``).  CasADi cannot call
geomjax, so the SE(3) exponential and logarithm are written here in CasADi's symbols (a peer's
model, not library code); before anything is timed, the CasADi step, running residual and terminal
residual are evaluated against geomjax's at random states and controls (agreement to 1e-12
required), and the CasADi cost of geomjax's optimal controls is compared with geomjax's.

Two transcriptions, as a CasADi user would write them: *multiple shooting* (states and controls
as decision variables, the step as equality constraints; the usual form for nonlinear MPC) and
*single shooting* (controls only, the rollout symbolic).  IPOPT with exact Hessians and MUMPS,
``tol = 1e-10``.  Reported: final cost, iterations, the time to build the NLP (CasADi's
"compile"), IPOPT's wall time and time per iteration, side by side with geomjax's DDP and iLQR
on the same problem in the same run; table + JSON (``benchmarks/results/bench_casadi.json``).
Run under ``OMP_NUM_THREADS=1`` for a single-threaded comparison.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from common import compile_timed, fast_mode, measure, print_table, timer, write_json

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402
from geomjax.control.examples import QUADROTOR, quadrotor_actuation, quadrotor_problem  # noqa: E402
from geomjax.control.trajopt import DDP, ILQR, solve_ocp  # noqa: E402

TARGET = (1.0, 0.0, 1.0)
#: crocoddyl's weights in geomjax's (ω, v) order: xReg (log g: rotation, translation; ξ), uReg,
#: trackPose; terminal goalPose 3 (see quadrotor_problem)
RUNNING_WEIGHTS = [1e-3] * 3 + [1e-7] * 3 + [1e-3] * 6 + [1e-6] * 4 + [1e-2] * 6
TERMINAL_WEIGHT = 3.0


def _casadi():
    try:
        import casadi
    except ImportError:  # pragma: no cover - optional peer
        return None
    return casadi


# --- SE(3) in CasADi symbols (the peer's own model; geomjax's lives in geomjax.lie) ----------------
def _hat(ca, w):
    return ca.vertcat(
        ca.horzcat(0, -w[2], w[1]), ca.horzcat(w[2], 0, -w[0]), ca.horzcat(-w[1], w[0], 0)
    )


def _vee(ca, A):
    return ca.vertcat(A[2, 1], A[0, 2], A[1, 0])


def _series_switch(ca, t2, small, exact):
    """``small(t2)`` below 1e-6, ``exact(t2)`` above, differentiable on both sides: the exact
    branch sees a safe argument where it is not taken (the double-``where`` of AD-safe code)."""
    safe = ca.if_else(t2 < 1e-6, 1.0, t2)
    return ca.if_else(t2 < 1e-6, small(t2), exact(safe))


def _exp_se3(ca, xi):
    """``exp`` of ``ξ = (ω, v)``: ``(R, p)`` with ``R = I + A K + B K²``, ``p = (I + B K + C K²) v``."""
    w, v = xi[:3], xi[3:]
    t2 = ca.dot(w, w)
    A = _series_switch(
        ca, t2, lambda s: 1 - s / 6 + s**2 / 120, lambda s: ca.sin(ca.sqrt(s)) / ca.sqrt(s)
    )
    B = _series_switch(
        ca, t2, lambda s: 0.5 - s / 24 + s**2 / 720, lambda s: (1 - ca.cos(ca.sqrt(s))) / s
    )
    C = _series_switch(
        ca,
        t2,
        lambda s: 1 / 6 - s / 120 + s**2 / 5040,
        lambda s: (ca.sqrt(s) - ca.sin(ca.sqrt(s))) / (s * ca.sqrt(s)),
    )
    K = _hat(ca, w)
    K2 = K @ K
    eye = ca.DM.eye(3)
    return eye + A * K + B * K2, (eye + B * K + C * K2) @ v


def _log_se3(ca, R, p):
    """``log`` of ``(R, p)`` as ``(ω, v)``: ``ω = θ/sin θ · vee(R − Rᵀ)/2``,
    ``v = (I − K/2 + D K²) p`` with ``D = (1 − θ sin θ / (2(1 − cos θ)))/θ²`` (angles below π)."""
    a = _vee(ca, R - R.T) / 2  # sin θ · axis
    s2 = ca.dot(a, a)
    c = (ca.trace(R) - 1) / 2
    theta = ca.atan2(ca.sqrt(s2 + 1e-300), c)
    # θ/sin θ as a function of sin²θ near 0 (θ < π/2 there)
    f = _series_switch(ca, s2, lambda s: 1 + s / 6 + 3 * s**2 / 40, lambda s: theta / ca.sqrt(s))
    w = f * a
    t2 = ca.dot(w, w)
    D = _series_switch(
        ca,
        t2,
        lambda s: 1 / 12 + s / 720 + s**2 / 30240,
        lambda s: (1 - ca.sqrt(s) * ca.sin(ca.sqrt(s)) / (2 * (1 - ca.cos(ca.sqrt(s))))) / s,
    )
    K = _hat(ca, w)
    return ca.vertcat(w, (ca.DM.eye(3) - K / 2 + D * (K @ K)) @ p)


def model_functions(ca, target=TARGET):
    """CasADi functions of the quadrotor: ``step(R, p, μ, u) -> (R, p, μ)``, the running residual
    ``r(R, p, μ, u)`` (22) and the terminal residual ``r_N(R, p)`` (6), to the pose ``(I,
    target)``."""
    c = QUADROTOR
    m, J, h, grav = c["mass"], np.asarray(c["inertia"]), c["dt"], c["gravity"]
    Bu = np.asarray(quadrotor_actuation())
    Rs, ps, mus, us = ca.SX.sym("R", 3, 3), ca.SX.sym("p", 3), ca.SX.sym("mu", 6), ca.SX.sym("u", 4)
    inertia = np.concatenate([J, [m] * 3])
    xi = mus / inertia
    w, v = xi[:3], xi[3:]
    pi, pl = mus[:3], mus[3:]
    # Euler–Poincaré on SE(3) in (ω, v) order: π̇ = π × ω + p × v, ṗ = p × ω, gravity's force in
    # the body frame (−dV of V = m g z), the rotor wrench B u
    f_grav = Rs.T @ ca.DM([0.0, 0.0, -m * grav])
    dmu = ca.vertcat(ca.cross(pi, w) + ca.cross(pl, v), ca.cross(pl, w) + f_grav) + Bu @ us
    mu1 = mus + h * dmu
    dR, dp = _exp_se3(ca, h * mu1 / inertia)
    step = ca.Function("step", [Rs, ps, mus, us], [Rs @ dR, ps + Rs @ dp, mu1])
    target = np.asarray(target, float)
    # log(g*⁻¹ g) with g* = (I, target): (R, p − target)
    run = ca.vertcat(_log_se3(ca, Rs, ps), xi, us, _log_se3(ca, Rs, ps - target))
    running = ca.Function("running", [Rs, ps, mus, us], [run])
    terminal = ca.Function("terminal", [Rs, ps], [_log_se3(ca, Rs, ps - target)])
    return step, running, terminal


def check_against_geomjax(ca, step, running, terminal, seed=0, trials=20):
    """Largest difference between the CasADi model and geomjax's at random states and controls
    (rotations up to 2.5 rad, the identity among them; one near-zero velocity)."""
    prob = quadrotor_problem()
    res = prob.stage_cost.residual
    term = prob.terminal_cost.residual
    rng = np.random.default_rng(seed)
    worst = 0.0
    for k in range(trials):
        w = rng.normal(size=3)
        w *= (0.0 if k == 0 else rng.uniform(0, 2.5)) / max(np.linalg.norm(w), 1e-300)
        xi0 = np.concatenate([w, rng.normal(size=3)])
        g = np.asarray(gj.SE3.exp(jnp.asarray(xi0)))
        mu = rng.normal(size=6) * (1e-9 if k == 1 else 1.0)
        u = rng.uniform(0, 5, size=4)
        x = gj.LieGroupState(jnp.asarray(g), jnp.asarray(mu))
        x1 = prob.step(x, jnp.asarray(u), 0.0)
        R1, p1, mu1 = step(g[:3, :3], g[:3, 3], mu, u)
        r = running(g[:3, :3], g[:3, 3], mu, u)
        rN = terminal(g[:3, :3], g[:3, 3])
        ours = [np.asarray(x1.g[:3, :3]), np.asarray(x1.g[:3, 3]), np.asarray(x1.mu)]
        ours += [np.asarray(res(0.0, x, jnp.asarray(u))), np.asarray(term(x))]
        theirs = [np.asarray(a).reshape(b.shape) for a, b in zip((R1, p1, mu1, r, rN), ours)]
        worst = max(worst, *(float(np.max(np.abs(a - b))) for a, b in zip(theirs, ours)))
    return worst


def build_nlp(ca, step, running, terminal, form, bounded):
    """The NLP of one transcription; returns ``(solver, args, unpack)``."""
    c = QUADROTOR
    N, h = c["steps"], c["dt"]
    W = ca.DM(RUNNING_WEIGHTS)
    n = 4 * N + (18 * N if form == "multiple shooting" else 0)
    z = ca.MX.sym("z", n)  # controls u_0..u_{N-1}, then (vec R, p, μ) of nodes 1..N
    U = ca.reshape(z[: 4 * N], 4, N)
    X = ca.reshape(z[4 * N :], 18, N) if form == "multiple shooting" else None
    R, p, mu = ca.DM.eye(3), ca.DM.zeros(3), ca.DM.zeros(6)
    cost, g = 0, []
    for k in range(N):
        r = running(R, p, mu, U[:, k])
        cost += h * 0.5 * ca.dot(W * r, r)
        R1, p1, mu1 = step(R, p, mu, U[:, k])
        if form == "multiple shooting":
            g.append(ca.vertcat(ca.reshape(R1, 9, 1), p1, mu1) - X[:, k])
            R, p, mu = ca.reshape(X[:9, k], 3, 3), X[9:12, k], X[12:, k]
        else:
            R, p, mu = R1, p1, mu1
    rN = terminal(R, p)
    cost += TERMINAL_WEIGHT * 0.5 * ca.dot(rN, rN)
    nlp = {"x": z, "f": cost, "g": ca.vertcat(*g) if g else ca.MX(0, 1)}
    opts = {
        "ipopt.tol": 1e-10,
        "ipopt.print_level": 0,
        "print_time": False,
        "ipopt.linear_solver": "mumps",
    }
    solver = ca.nlpsol("ipopt", "ipopt", nlp, opts)
    lbx, ubx = -np.inf * np.ones(n), np.inf * np.ones(n)
    if bounded:
        lbx[: 4 * N], ubx[: 4 * N] = c["thrust_min"], c["thrust_max"]
    # the initial guess of geomjax's solvers: zero thrusts (clipped to the bounds), their rollout
    u0 = np.full((N, 4), c["thrust_min"] if bounded else 0.0)
    z0 = [u0.reshape(-1)]
    if form == "multiple shooting":
        R, p, mu = ca.DM.eye(3), ca.DM.zeros(3), ca.DM.zeros(6)
        for k in range(N):
            R, p, mu = step(R, p, mu, u0[k])
            z0.append(
                np.concatenate(
                    [
                        np.asarray(R).reshape(-1, order="F"),
                        np.asarray(p).ravel(),
                        np.asarray(mu).ravel(),
                    ]
                )
            )
    ng = nlp["g"].shape[0]
    args = dict(x0=np.concatenate(z0), lbx=lbx, ubx=ubx, lbg=np.zeros(ng), ubg=np.zeros(ng))
    return solver, args, lambda zopt: np.asarray(zopt)[: 4 * N].reshape(N, 4)


def solve_ipopt(ca, form, bounded, repeats, target=TARGET):
    step, running, terminal = model_functions(ca, target)
    with timer() as t:
        solver, args, unpack = build_nlp(ca, step, running, terminal, form, bounded)
    build = t.s
    # every solve timed (no warm-up: an IPOPT solve has nothing to compile), the median kept
    timing = measure(lambda: solver(**args), repeats=repeats, warmup=False, block=False)
    sol, stats = timing.out, solver.stats()
    return dict(
        cost=float(sol["f"]),
        iterations=int(stats["iter_count"]),
        status=str(stats["return_status"]),
        success=bool(stats["success"]),
        build_s=build,
        ms_per_solve=1e3 * timing.run_s,
        ms_per_iteration=1e3 * timing.run_s / max(int(stats["iter_count"]), 1),
        controls=unpack(sol["x"]),
    )


def solve_geomjax(solver, bounded, repeats):
    prob = quadrotor_problem(bounded=bounded)
    run, compile_s = compile_timed(lambda p: solve_ocp(p, solver, max_iters=200), prob)
    timing = measure(run, prob, repeats=repeats, warmup=False)  # compiled: every call a solve
    sol = timing.out
    it = int(sol.iterations)
    return dict(
        cost=float(sol.cost),
        iterations=it,
        status=sol.stop_reason,
        success=bool(sol.succeeded),
        build_s=compile_s,
        ms_per_solve=1e3 * timing.run_s,
        ms_per_iteration=1e3 * timing.run_s / max(it, 1),
        controls=np.asarray(sol.controls),
    ), prob


def main():
    ca = _casadi()
    if ca is None:
        print("casadi is not installed (pip install -e '.[bench]'): nothing to compare")
        return 0
    repeats = 2 if fast_mode() else 5
    step, running, terminal = model_functions(ca)
    gap = check_against_geomjax(ca, step, running, terminal)
    print(f"CasADi model against geomjax's (step, residuals), largest difference: {gap:.2e}")
    if not gap < 1e-12:
        raise SystemExit(
            f"the CasADi model differs from geomjax's by {gap:.2e}: not the same problem"
        )
    rows, out = [], {"model_gap": gap, "cases": {}}
    for bounded in (False, True):
        ours = {}
        for name, solver in (("geomjax DDP", DDP()), ("geomjax iLQR", ILQR())):
            ours[name], _ = solve_geomjax(solver, bounded, repeats)
        forms = ["multiple shooting"] + ([] if fast_mode() else ["single shooting"])
        theirs = {f"CasADi/IPOPT, {f}": solve_ipopt(ca, f, bounded, repeats) for f in forms}
        # the CasADi cost of geomjax's DDP controls: the same cost function, evaluated by CasADi
        us = ours["geomjax DDP"]["controls"]
        R, p, mu = ca.DM.eye(3), ca.DM.zeros(3), ca.DM.zeros(6)
        J, W = 0.0, np.asarray(RUNNING_WEIGHTS)
        for k in range(us.shape[0]):
            r = np.asarray(running(R, p, mu, us[k])).ravel()
            J += QUADROTOR["dt"] * 0.5 * float(np.sum(W * r * r))
            R, p, mu = step(R, p, mu, us[k])
        rN = np.asarray(terminal(R, p)).ravel()
        J += TERMINAL_WEIGHT * 0.5 * float(rN @ rN)
        best = min(v["cost"] for v in {**ours, **theirs}.values())
        label = "bounded" if bounded else "free"
        for name, v in {**ours, **theirs}.items():
            rows.append(
                {
                    "thrusts": label,
                    "solver": name,
                    "cost": f"{v['cost']:.10e}",
                    "cost/best − 1": f"{v['cost'] / best - 1:.1e}",
                    "iterations": v["iterations"],
                    "status": v["status"],
                    "build/compile s": f"{v['build_s']:.2f}",
                    "ms/solve": f"{v['ms_per_solve']:.2f}",
                    "ms/iteration": f"{v['ms_per_iteration']:.3f}",
                }
            )
        case = {
            "thrusts": label,
            "casadi_cost_of_geomjax_ddp_controls": J,
            "results": {
                k: {kk: vv for kk, vv in v.items() if kk != "controls"}
                for k, v in {**ours, **theirs}.items()
            },
        }
        out["cases"][label] = case  # keyed by the thrusts (the table is "table")
        print(
            f"[{label}] CasADi's cost of geomjax DDP's controls: {J:.10e} (geomjax: {ours['geomjax DDP']['cost']:.10e})"
        )
    print_table(rows, list(rows[0]), "quadrotor: geomjax and CasADi/IPOPT, same problem")
    out["threads"] = os.environ.get("OMP_NUM_THREADS", "unset")
    out["table"] = rows
    out["load_average"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    write_json("bench_casadi", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Demo section: trajectory optimization (issue 11) — a rest-to-rest attitude manoeuvre by control
torques through the forced LGVI, and a closed rolling path that re-orients a ball on a plate."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from ..control import Trajectory, optimize
from ..control.examples import AttitudeManeuver, BallOnPlate
from ._report import Check


def _angle(R):
    c = np.clip((np.trace(R) - 1) / 2, -1, 1)
    s = np.linalg.norm([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]]) / 2
    return float(np.arctan2(s, c))


def run(out: Path, fast: bool) -> list[Check]:
    import matplotlib.pyplot as plt

    checks = []
    # 1. attitude manoeuvre: from rest at the identity to rest at R_target, minimum effort
    prob = AttitudeManeuver(steps=100 if fast else 400, modes=6)
    res = optimize(
        prob.loss, prob.initial_params(), "lbfgs", steps=25 if fast else 100, progress=False
    )
    err = {k: float(v) for k, v in prob.errors(res.params).items()}
    checks.append(
        Check(
            "attitude manoeuvre (LGVI + torques): final angle error [rad]",
            err["angle"],
            1e-3,
            "target",
        )
    )
    checks.append(Check("  ... final angular velocity [rad/s]", err["rate"], 1e-3, "rest"))
    # independent check: RK4 with 20 substeps per control interval on the matrix equations
    u = np.asarray(prob.controls(res.params))
    I = np.asarray(prob.system.inertia)
    R, Pi = np.eye(3), np.zeros(3)

    def f(R, Pi, tau):
        w = np.linalg.solve(I, Pi)
        W = np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])
        return R @ W, np.cross(Pi, w) + tau

    h = prob.dt / 20
    for tau in u:
        for _ in range(20):
            k1 = f(R, Pi, tau)
            k2 = f(R + h / 2 * k1[0], Pi + h / 2 * k1[1], tau)
            k3 = f(R + h / 2 * k2[0], Pi + h / 2 * k2[1], tau)
            k4 = f(R + h * k3[0], Pi + h * k3[1], tau)
            R = R + h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
            Pi = Pi + h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    checks.append(
        Check(
            "  ... re-simulated by RK4 (matrix Euler eqs): angle error [rad]",
            _angle(np.asarray(prob.R_target).T @ R),
            1e-3,
            "independent",
        )
    )

    # 2. ball on a plate: a closed contact loop that rotates the ball to a target attitude
    ball = BallOnPlate(steps=100)
    res_b = optimize(
        ball.loss, ball.initial_params(), "lbfgs", steps=60, progress=False, target=1e-10
    )
    eb = {k: float(v) for k, v in ball.errors(res_b.params).items()}
    checks.append(
        Check(
            "ball on plate (closed contact loop): attitude error [rad]", eb["angle"], 1e-3, "target"
        )
    )
    checks.append(
        Check("  ... contact path closure |x(T) - x(0)|", eb["position"], 1e-12, "closed loop")
    )

    fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
    ax[0].semilogy(res.history["time"], res.history["loss"], label="attitude (SO(3))")
    ax[0].semilogy(res_b.history["time"], res_b.history["loss"], label="ball on plate")
    ax[0].set(xlabel="wall time [s] (incl. compile)", ylabel="loss", title="L-BFGS")
    ax[0].legend()
    ts = (np.arange(prob.steps) + 0.5) * prob.dt
    ax[1].plot(ts, u)
    ax[1].set(xlabel="t", ylabel="body torque", title="optimized torques")
    pts = np.asarray(Trajectory(res_b.params, ball.duration).path.sample(200))
    p0 = np.asarray(ball.initial_params().sample(200))
    ax[2].plot(p0[:, 0], p0[:, 1], "--", label="initial guess")
    ax[2].plot(pts[:, 0], pts[:, 1], label="optimized")
    ax[2].set(aspect="equal", title="contact path on the plate")
    ax[2].legend()
    fig.tight_layout()
    fig.savefig(out / "control.png", dpi=110)
    plt.close(fig)
    jax.clear_caches()
    return checks

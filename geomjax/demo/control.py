"""Demo section: trajectory optimization — a rest-to-rest attitude manoeuvre by control
torques through the forced LGVI, and the showcase: a robot rolling inside a spacecraft along a
closed path that turns the spacecraft to a target attitude (Cabrera, *Base-controlled mechanical systems and geometric phases*, §5.3)."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from ..control import optimize
from ..control.examples import AttitudeManeuver, SpacecraftReorientation
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
        prob.loss, prob.initial_params(), "lbfgs", max_iters=25 if fast else 100, progress=False
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

    # 2. the showcase (Cabrera §5.3): a robot (small ball) rolling inside a spacecraft (big ball)
    # along a closed path turns the spacecraft to a target attitude (zero angular momentum)
    craft = SpacecraftReorientation(steps=60)
    res_b = optimize(
        craft.loss, craft.initial_params(), "lbfgs", max_iters=40, progress=False, target=1e-12
    )
    err0 = float(craft.errors(craft.initial_params())["angle"])
    eb = float(craft.errors(res_b.params)["angle"])
    checks.append(
        Check("spacecraft + internal robot: attitude error [rad]", eb, 1e-3, f"from {err0:.3f}")
    )
    fine = SpacecraftReorientation(steps=240, R_target=craft.R_target)
    checks.append(
        Check(
            "  ... same loop, 4x finer horizontal lift: error [rad]",
            float(fine.errors(res_b.params)["angle"]),
            1e-3,
            "refined",
        )
    )

    fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
    ax[0].semilogy(res.history["loss"], label="attitude (SO(3))")
    ax[0].semilogy(res_b.history["loss"], label="spacecraft (Cabrera §5.3)")
    ax[0].set(xlabel="iteration", ylabel="loss", title="L-BFGS")
    ax[0].legend()
    ts = (np.arange(prob.steps) + 0.5) * prob.dt
    ax[1].plot(ts, u)
    ax[1].set(xlabel="t", ylabel="body torque", title="optimized torques")
    for loop, style, label in (
        (craft.initial_params(), "--", "initial guess"),
        (res_b.params, "-", "optimized"),
    ):
        th, ph = np.asarray(loop.sample(200)).T
        ax[2].plot(np.sin(th) * np.cos(ph), np.sin(th) * np.sin(ph), style, label=label)
    ax[2].set(aspect="equal", title="robot path seen from the spacecraft (top view)")
    ax[2].legend()
    fig.tight_layout()
    fig.savefig(out / "control.png", dpi=110)
    plt.close(fig)
    jax.clear_caches()
    return checks

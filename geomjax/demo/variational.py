"""Demo section: variational integrators in coordinates (discrete Euler–Lagrange, RATTLE,
impacts with Newton restitution)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .. import RATTLE, DiscreteEulerLagrange, Impacts, LagrangianSystem, simulate
from .. import diagnostics as diag
from ._report import Check

G0 = 9.81


def _rods(q):
    x1, x2 = q[:3], q[3:]
    d = x2 - x1
    return 0.5 * jnp.array([x1 @ x1 - 1.0, d @ d - 0.64])


def run(out: Path, fast: bool) -> list[Check]:
    checks = []

    # 1. double spherical pendulum (Cartesian, two rods) with RATTLE
    pend = LagrangianSystem(
        metric=jnp.diag(jnp.array([1.0, 1.0, 1.0, 2.0, 2.0, 2.0])),
        potential=lambda q: G0 * (q[2] + 2.0 * q[5]),
    )
    rattle = RATTLE(_rods)
    st = rattle.make_state(
        pend,
        jnp.array([0.6, 0.0, -0.8, 1.4, 0.0, -0.8]),
        jnp.array([0.0, 1.0, 0.0, 0.0, -1.5, 0.3]),
        project=True,
    )
    n = 2000 if fast else 20_000
    sol = simulate(pend, rattle, st, 0.01, n, save_every=10)
    g = float(jnp.max(jnp.abs(jax.vmap(_rods)(sol.states.q))))
    checks.append(
        Check(f"double spherical pendulum, RATTLE {n} steps: max |g(q)|", g, 1e-14, "constraint")
    )
    E = np.asarray(diag(pend, sol)["energy"])
    err = E - E[0]
    # no secular drift: the fitted linear trend over the whole run is a small fraction of the
    # bounded O(dt²) oscillation (the max of the oscillation itself jumps with the chaotic
    # excursions of the double pendulum, so a first-half/second-half max ratio is not a test)
    t = np.asarray(sol.times)
    trend = abs(np.polyfit(t, err, 1)[0]) * (t[-1] - t[0])
    checks.append(
        Check(
            "  ... |linear energy trend over the run| / max |energy error|",
            float(trend / np.abs(err).max()),
            0.25,
            "no drift",
        )
    )

    # 2. Kepler problem: discrete Noether theorem
    kep = LagrangianSystem(metric=jnp.eye(2), potential=lambda q: -1.0 / jnp.linalg.norm(q))
    k0 = kep.make_state(jnp.array([1.0, 0.0]), jnp.array([0.0, np.sqrt(1.5)]))
    ksol = simulate(kep, DiscreteEulerLagrange(), k0, 0.05, 2000 if fast else 20_000, save_every=10)
    J = ksol.states.q[:, 0] * ksol.states.p[:, 1] - ksol.states.q[:, 1] * ksol.states.p[:, 0]
    checks.append(
        Check(
            "Kepler e=0.5, DEL midpoint: max |ΔJ| / J (angular momentum)",
            float(jnp.max(jnp.abs(J - J[0])) / J[0]),
            1e-12,
            "Noether",
        )
    )

    # 3. ball on a plane with e = 0.8: impact time, bounce height, tangential momentum
    ball = LagrangianSystem(metric=jnp.eye(2), potential=lambda q: G0 * q[1])
    e, H = 0.8, 1.0
    imp = Impacts(lambda q: q[1], restitution=e, method=DiscreteEulerLagrange(rule="trapezoidal"))
    b0 = ball.make_state(jnp.array([0.0, H]), jnp.array([0.7, 0.0]))
    bsol = simulate(ball, imp, b0, 0.01, 150)
    t1 = np.sqrt(2 * H / G0)
    k = int(np.ceil(t1 / 0.01)) + 1  # first saved state after the impact
    q, v = bsol.states.q[k], ball.velocity(bsol.states.q[k], bsol.states.p[k])
    apex = float(q[1] + v[1] ** 2 / (2 * G0))  # apex of the arc through this state (exact)
    checks.append(
        Check(
            "ball on a plane, e=0.8: |apex − e² H| after the bounce",
            abs(apex - e**2 * H),
            1e-10,
            "closed form",
        )
    )
    t_next = float(bsol.times[k]) + (v[1] + np.sqrt(float(v[1]) ** 2 + 2 * G0 * float(q[1]))) / G0
    checks.append(
        Check(
            "  ... |next impact time − t1(1 + 2e)|",
            abs(t_next - t1 * (1 + 2 * e)),
            1e-10,
            "closed form",
        )
    )
    checks.append(
        Check(
            "  ... max |p_x − p_x(0)| (tangential momentum)",
            float(jnp.max(jnp.abs(bsol.states.p[:, 0] - 0.7))),
            1e-15,
            "jump law",
        )
    )
    _plot(out, sol, bsol)
    return checks


def _plot(out, sol, bsol):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    q = np.asarray(sol.states.q)
    ax[0].plot(q[:, 3], q[:, 4], lw=0.6)
    ax[0].set(
        title="double spherical pendulum (RATTLE): 2nd bob from above", xlabel="x", ylabel="y"
    )
    ax[0].set_aspect("equal")
    b = np.asarray(bsol.states.q)
    ax[1].plot(b[:, 0], b[:, 1], ".-", ms=2, lw=0.8)
    ax[1].axhline(0.0, color="k", lw=1)
    ax[1].set(title="ball on a plane, e = 0.8 (impacts)", xlabel="x", ylabel="y")
    for a in ax:
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "variational.png", dpi=110)
    plt.close(fig)

"""Demo section: nonholonomic systems with the discrete Lagrange–d'Alembert integrator."""

from __future__ import annotations

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import SE2, SO3, BallOnTurntable, ChaplyginSleigh, NonholonomicVI, RollingDisk, simulate
from .. import diagnostics as diag
from ._report import Check


@eqx.filter_jit
def _run(system, initial, dt, steps, save_every):
    # one compiled program per system: the consistent initial state, the run, its diagnostics
    sol = simulate(system, NonholonomicVI(), initial(system), dt, steps, save_every=save_every)
    return sol, diag(system, sol)


def _sleigh0(s):
    return s.state(0.0, 0.0, 0.3, omega=1.5, v=-0.4)


def _ball0(b):
    return b.state(SO3.exp(jnp.array([0.3, -0.2, 0.5])), (0.7, -0.4), (0.5, -1.2, 2.0))


def _disk0(d):
    return d.state(phi=0.3, theta=0.4, phi_dot=2.0, theta_dot=0.5, psi_dot=3.0)


def run(out: Path, fast: bool) -> list[Check]:
    checks = []

    # 1. Chaplygin sleigh: closed-form body velocities, knife-edge constraint, energy
    sleigh = ChaplyginSleigh(mass=2.0, inertia=0.5, a=0.7)
    n = 20_000 if fast else 100_000
    sol, d = _run(sleigh, _sleigh0, 0.01, n, 10)
    om, v, _ = sleigh.closed_form(sol.times, 1.5, -0.4)
    err = float(
        jnp.max(jnp.abs(sol.states.v[:, 0] - om)) + jnp.max(jnp.abs(sol.states.v[:, 1] - v))
    )
    checks.append(
        Check("sleigh dt=0.01: max |(omega, v) − tanh/sech closed form|", err, 1e-3, "closed form")
    )
    checks.append(
        Check(
            f"  ... {n} steps: max |v_y| (knife edge)",
            float(jnp.max(d["constraint_violation"])),
            1e-14,
            "constraint",
        )
    )
    E = np.asarray(d["energy"])
    checks.append(
        Check(
            "  ... max rel. energy error",
            float(np.max(np.abs(E - E[0])) / E[0]),
            1e-4,
            "bounded",
        )
    )

    # 2. tilting rolling disk: energy without drift, rolling constraints at round-off
    disk = RollingDisk(mass=1.0, radius=0.5)
    nd = 20_000 if fast else 100_000
    dsol, dd = _run(disk, _disk0, 0.01, nd, 10)
    Ed = np.asarray(dd["energy"])
    ed = np.abs(Ed - Ed[0]) / abs(Ed[0])
    checks.append(
        Check(
            f"rolling disk dt=0.01, {nd} steps: max |A v| (rolling)",
            float(jnp.max(dd["constraint_violation"])),
            1e-14,
            "constraint",
        )
    )
    checks.append(Check("  ... max rel. energy error", float(ed.max()), 2e-3, "bounded"))
    half = len(ed) // 2
    checks.append(
        Check(
            "  ... growth of the energy error (last half / first half)",
            float(ed[half:].max() / ed[:half].max()),
            1.5,
            "no drift",
        )
    )

    # 3. (full mode; its compilation would exceed the fast budget) ball on a turntable, affine
    #    constraints: the centre moves on a circle at kappa W (2W/7), the vertical spin is conserved
    bsol = x_cf = None
    if not fast:
        ball = BallOnTurntable(mass=1.0, radius=0.5, table_rate=1.3)
        nb = 20_000
        bsol, bd = _run(ball, _ball0, 0.01, nb, 10)
        b0 = jax.tree_util.tree_map(lambda a: a[0], bsol.states)
        x_cf, _ = ball.closed_form(bsol.times, b0)
        kw = float(ball.kappa) * 1.3
        centre = b0.x + jnp.array([-b0.v[4], b0.v[3]]) / kw  # x(0) + J x'(0) / (kappa W)
        radius = jnp.linalg.norm(b0.v[3:]) / kw
        checks.append(
            Check(
                "ball on turntable: max | |centre − c| − r | (circle at 2W/7)",
                float(jnp.max(jnp.abs(jnp.linalg.norm(bsol.states.x - centre, axis=-1) - radius))),
                5e-3,
                "closed form, O(dt²)",
            )
        )
        checks.append(
            Check(
                "  ... vertical spin: max |omega_z − omega_z(0)|",
                float(jnp.max(jnp.abs(bd["vertical_spin"] - bd["vertical_spin"][0]))),
                1e-12,
                "momentum eq.",
            )
        )

    _plot(out, sol, bsol, x_cf, dsol, ed)
    return checks


def _plot(out, sol, bsol, x_cf, dsol, ed):
    import matplotlib.pyplot as plt

    panels = 3 if bsol is None else 4
    fig, ax = plt.subplots(1, panels, figsize=(4.8 * panels, 4.3))
    xyt = np.asarray(SE2.to_xytheta(sol.states.g))
    m = int(np.searchsorted(np.asarray(sol.times), 12.0))  # the reversal and the relaxation
    ax[0].plot(xyt[:m, 0], xyt[:m, 1], lw=1.2)
    for k in range(0, m, 60):  # the blade
        c, s = np.cos(xyt[k, 2]), np.sin(xyt[k, 2])
        ax[0].plot([xyt[k, 0], xyt[k, 0] + 0.3 * c], [xyt[k, 1], xyt[k, 1] + 0.3 * s], "k-", lw=1)
    ax[0].set(title="Chaplygin sleigh: contact point and blade, t ≤ 12", xlabel="x", ylabel="y")
    ax[0].set_aspect("equal")
    k = int(np.searchsorted(np.asarray(dsol.times), 20.0))
    ax[1].plot(np.asarray(dsol.states.g[:k, 0, 2]), np.asarray(dsol.states.g[:k, 1, 2]), lw=0.8)
    ax[1].set(title="rolling disk: contact-point path, t ≤ 20", xlabel="x", ylabel="y")
    ax[1].set_aspect("equal")
    ax[2].semilogy(np.asarray(dsol.times)[1:], np.maximum(ed[1:], 1e-17), lw=0.8)
    ax[2].set(title="rolling disk: relative energy error", xlabel="t")
    if bsol is not None:
        a = ax[3]
        a.plot(
            np.asarray(x_cf[:, 0]), np.asarray(x_cf[:, 1]), "k-", lw=3, alpha=0.25, label="circle"
        )
        a.plot(np.asarray(bsol.states.x[:, 0]), np.asarray(bsol.states.x[:, 1]), lw=1, label="DLA")
        a.plot([0], [0], "k+", ms=10)
        a.set(title="ball on a turntable: centre (table axis +)", xlabel="x", ylabel="y")
        a.set_aspect("equal")
        a.legend(fontsize=8)
    for a in ax:
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "nonholonomic.png", dpi=110)
    plt.close(fig)

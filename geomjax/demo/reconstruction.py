"""Demo section: base-controlled systems, reconstruction and geometric phases (Cabrera, *Base-controlled mechanical systems and geometric phases*)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .. import SO3
from ..reconstruction import (
    Reconstruction,
    ReconstructionRKMK4,
    deforming_body,
    free_rigid_body,
    holonomy,
    reconstruct,
    so3_phases,
    solid_angle,
    vertical_disk,
)
from ._report import Check


def _loop(p, t):
    return p[:2] + p[2] * jnp.stack([jnp.cos(t), jnp.sin(t)])


def run(out: Path, fast: bool) -> list[Check]:
    import matplotlib.pyplot as plt

    checks = []

    # 1. §5.1 vertical disk with prescribed heading: corrected closed form g(t)
    R, T = 0.7, 2.0
    disk = Reconstruction(vertical_disk(radius=R), lambda t: jnp.stack([0.5 * t]))
    sol = reconstruct(disk, T, 400, momentum=jnp.array([0.0, 0.0, 2.0]))
    thd = float(disk.velocity(sol.states.mu[0], 0.0)[2])
    # ∫cos(t/2) = 2 sin(T/2), ∫sin(t/2) = 2(1 − cos(T/2))
    exact = np.array([R * thd * 2 * np.sin(T / 2), R * thd * 2 * (1 - np.cos(T / 2)), thd * T])
    err = float(np.max(np.abs(np.asarray(sol.states.g[-1]) - exact)))
    checks.append(
        Check("vertical disk (§5.1): |g(T) − corrected closed form|", err, 1e-4, "closed form")
    )

    # 2. deforming body at zero angular momentum: holonomy of small shape loops vs curvature
    body = deforming_body(inertia=(1.0, 1.5, 2.0), masses=(0.5, 0.7))
    c0 = jnp.array([0.2, 0.1])
    eps = np.array([0.2, 0.1, 0.05, 0.025])
    P = jnp.stack([jnp.array([0.2, 0.1, e]) for e in eps])
    W = jax.jit(jax.vmap(lambda p: SO3.log(holonomy(body, _loop, 2 * jnp.pi, 64, params=p))))(P)
    F = np.asarray(jax.jit(body.curvature)(c0)[:, 0, 1])
    area = np.pi * eps**2
    rem = np.linalg.norm(np.asarray(W) + np.outer(area, F), axis=1)
    slope = float(np.polyfit(np.log(eps), np.log(rem), 1)[0])
    checks.append(
        Check(
            "falling-cat body: |log hol + F·area| / (|F|·area), eps=0.025",
            float(rem[-1] / (np.linalg.norm(F) * area[-1])),
            0.05,
            "curvature",
        )
    )
    checks.append(
        Check("  ... fitted order of the remainder in eps (expect 3)", abs(slope - 3), 0.3, "order")
    )

    # 3. free rigid body: Montgomery's phase Δθ = 2ET/|μ| − Ω
    I1, I3, a, L = 1.0, 2.0, 0.6, 1.3
    rb = Reconstruction(free_rigid_body((I1, I1, I3)), lambda t: jnp.zeros((0,)))
    Pi0 = L * jnp.array([np.sin(a), 0.0, np.cos(a)])
    Tp = 2 * np.pi / abs(float(Pi0[2]) * (1 / I1 - 1 / I3))
    rsol = reconstruct(rb, Tp, 400, momentum=Pi0, method=ReconstructionRKMK4())
    ph = so3_phases(rb, rsol)
    E = 0.5 * float(Pi0 @ (Pi0 / jnp.array([I1, I1, I3])))
    Om = float(solid_angle(rsol.states.mu[:-1]))
    gG = ph["g_geometric"]
    thG = float(SO3.log(gG[-1] @ gG[0].T) @ ph["axis"])
    checks.append(
        Check(
            "rigid body: |theta_D(T) − 2ET/|mu||",
            abs(float(ph["theta_dynamic"][-1]) - 2 * E * Tp / L),
            1e-8,
            "Montgomery",
        )
    )
    checks.append(
        Check("  ... |theta_G + solid angle of Pi(t)|", abs(thG + Om), 1e-3, "Montgomery")
    )

    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].loglog(area, np.linalg.norm(np.asarray(W), axis=1), "o-", label="|log holonomy|")
    ax[0].loglog(area, np.linalg.norm(F) * area, "--", label="|F|·area")
    ax[0].set_xlabel("enclosed shape area")
    ax[0].set_title("zero-momentum reorientation (falling cat)")
    ax[0].legend()
    ts = np.asarray(rsol.times)
    thG_t = np.asarray(jax.vmap(lambda g: SO3.log(g @ gG[0].T) @ ph["axis"])(gG))
    ax[1].plot(ts, np.asarray(ph["theta_dynamic"]), label="dynamic phase theta_D")
    ax[1].plot(ts, thG_t, label="geometric part (angle of g_G about mu)")
    ax[1].set_xlabel("t")
    ax[1].set_title("free rigid body: g = h_D · g_G")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(out / "reconstruction_phases.png", dpi=100)
    plt.close(fig)
    return checks

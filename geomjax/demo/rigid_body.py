"""Demo section: rigid bodies with the Lie group variational integrator."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .. import LGVI, RKMK4, SO3, RigidBody, RigidBodyState, diagnostics, simulate
from ..systems import HeavyTop
from ._report import Check


def run(out: Path, fast: bool) -> list[Check]:
    checks = []
    rb = RigidBody(jnp.array([1.0, 2.0, 3.0]))
    s0 = RigidBodyState(SO3.exp(jnp.array([0.3, -0.2, 0.5])), jnp.array([0.8, -0.3, 1.1]))

    # 1. long run of the free rigid body
    n = 20_000 if fast else 100_000
    sol = simulate(rb, LGVI(), s0, 0.01, n, save_every=100)
    d = diagnostics(rb, sol)
    E, m = np.asarray(d["energy"]), np.asarray(d["spatial_momentum"])
    e_err = np.abs(E - E[0]) / E[0]
    checks.append(
        Check(
            f"free body, dt=0.01, {n} steps: max rel. energy error",
            float(e_err.max()),
            1e-4,
            "bounded",
        )
    )
    checks.append(
        Check(
            "  ... growth of the energy error (last half / first half)",
            float(e_err[len(e_err) // 2 :].max() / e_err[: len(e_err) // 2].max()),
            1.5,
            "no drift",
        )
    )
    checks.append(
        Check(
            "  ... max rel. change of spatial momentum R Pi",
            float(np.max(np.abs(m - m[0])) / np.linalg.norm(m[0])),
            1e-11,
            "Noether",
        )
    )
    checks.append(
        Check("  ... max |R^T R - I|", float(np.max(d["group_defect"])), 1e-12, "on the group")
    )

    # 2. large steps over a long horizon: variational vs Runge-Kutta-Munthe-Kaas
    T, dt = (500.0, 0.25) if fast else (5000.0, 0.25)
    steps = round(T / dt)
    long = {
        name: simulate(rb, method, s0, dt, steps, save_every=steps // 500)
        for name, method in (("LGVI", LGVI()), ("RKMK4", RKMK4()))
    }
    errs = {name: np.asarray(diagnostics(rb, s)["energy"]) for name, s in long.items()}
    errs = {k: np.abs(v - v[0]) / v[0] for k, v in errs.items()}
    mom = {k: np.asarray(diagnostics(rb, s)["spatial_momentum"]) for k, s in long.items()}
    checks.append(
        Check(
            f"LGVI dt={dt} T={T:g}: rel. momentum drift",
            float(np.max(np.abs(mom["LGVI"] - mom["LGVI"][0]))),
            1e-11,
            "Noether",
        )
    )

    # 3. Dzhanibekov: spin about the intermediate axis flips periodically
    sd = RigidBodyState(jnp.eye(3), jnp.array([0.02, 2.0, 0.02]))
    flip = simulate(rb, LGVI(), sd, 0.01, 10_000)
    ref = simulate(rb, RKMK4(), sd, 0.001, 100_000, save_every=10)  # fine 4th-order reference
    pi2, pi2_ref = np.asarray(flip.states.Pi[:, 1]), np.asarray(ref.states.Pi[:, 1])
    t = np.asarray(flip.times)
    n_flips = int(np.sum(np.sign(pi2[1:]) != np.sign(pi2[:-1])))
    n_flips_ref = int(np.sum(np.sign(pi2_ref[1:]) != np.sign(pi2_ref[:-1])))
    checks.append(
        Check(
            "Dzhanibekov: |#flips(LGVI) - #flips(reference)| in T=100",
            abs(n_flips - n_flips_ref),
            0,
            f"{n_flips} flips",
        )
    )

    # 4. heavy top: vertical angular momentum is a Noether invariant
    top = RigidBody(jnp.array([0.9, 1.0, 0.4]), HeavyTop(1.5, 9.81, [0.05, -0.02, 0.3]))
    st = RigidBodyState(SO3.exp(jnp.array([0.4, 1.0, -0.3])), jnp.array([0.2, -0.4, 3.0]))
    ht = simulate(top, LGVI(), st, 0.005, 4000 if fast else 20_000, save_every=10)
    Lz = np.asarray(jnp.einsum("ti,ti->t", ht.states.R[:, 2, :], ht.states.Pi))
    Et = np.asarray(jax.vmap(top.energy)(ht.states))
    checks.append(
        Check(
            "heavy top: max |e3 . R Pi - initial|",
            float(np.max(np.abs(Lz - Lz[0]))),
            1e-11,
            "Noether",
        )
    )
    checks.append(
        Check(
            "heavy top: max rel. energy error",
            float(np.max(np.abs(Et - Et[0])) / abs(Et[0])),
            1e-3,
            "bounded",
        )
    )

    _plot(out, long, errs, t, pi2, np.asarray(ref.times), pi2_ref, ht)
    return checks


def _plot(out, long, errs, t, pi2, t_ref, pi2_ref, ht):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.3))
    for k, (name, s) in enumerate(long.items()):
        ts = np.asarray(s.times)[1:]
        ax[0].loglog(ts, np.maximum(errs[name][1:], 1e-17), f"C{k}-", label=f"{name}: energy")
        mom = np.asarray(diagnostics(RigidBody(jnp.array([1.0, 2.0, 3.0])), s)["spatial_momentum"])
        drift = np.linalg.norm(mom - mom[0], axis=-1)[1:] / np.linalg.norm(mom[0])
        ax[0].loglog(ts, np.maximum(drift, 1e-17), f"C{k}--", label=f"{name}: |R Π| drift")
    ax[0].set(
        xlabel="t", ylabel="relative error", title="free rigid body, dt = 0.25: bounded vs drifting"
    )
    ax[0].legend(fontsize=8)
    ax[1].plot(t_ref, pi2_ref, "k-", lw=3, alpha=0.3, label="RKMK4, dt = 0.001")
    ax[1].plot(t, pi2, "C0-", lw=1, label="LGVI, dt = 0.01")
    ax[1].set(xlabel="t", ylabel="Π₂", title="Dzhanibekov flips (spin about the middle axis)")
    ax[1].legend()
    R = np.asarray(ht.states.R)
    tip = R[:, :, 2]  # body symmetry axis in space
    ax[2].plot(tip[:, 0], tip[:, 1], lw=0.6)
    ax[2].set(xlabel="x", ylabel="y", title="heavy top: path of the body axis (top view)")
    ax[2].set_aspect("equal")
    for a in ax:
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "rigid_body.png", dpi=110)
    plt.close(fig)

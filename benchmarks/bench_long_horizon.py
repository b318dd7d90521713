"""Long-horizon work–precision of the free rigid body: the error in the invariants over T = 1e5
against wall time, geomjax's structure-preserving methods side by side with diffrax Tsit5 and
Dopri8 (adaptive, rtol = atol swept), all in one run.

    python benchmarks/bench_long_horizon.py [--fast] [--T=1e5] [--clock=cpu]
                                              (or: geomjax bench long-horizon)

Over a long horizon the state error of any method is dominated by the phase drift along the
orbit; what a user of a long simulation asks is whether the motion stays on its invariant set:
the energy ``H = ½ Πᵀ I⁻¹ Π`` and the Casimir ``|Π|²`` (relative errors, the largest over the
run, sampled every ``T/1000``), and the rotation's distance from SO(3) at the end
(``|RᵀR − I|``, the group defect: zero by construction on the group, a drift for a solver in
matrix coordinates).  The table gives, for every method, the time to keep both invariants below
1e-6, 1e-8, 1e-10 and 1e-12 (log–log interpolation between measured points), its ratio to the
best of Tsit5 and Dopri8 at that level, and the largest group defect.

Problem: I = (1, 2, 3), R0 = exp(0.3, -0.2, 0.5), Pi0 = (0.8, -0.3, 1.1) (as
bench_work_precision), float64, batch 1.  The geomjax methods run ``method.advance`` in a
``fori_loop`` over blocks of steps, each block followed by the invariants of its last state (what
``simulate`` runs, without saving); diffrax saves the same 1000 sample times.  Compile time is
reported separately; each point is timed three times, interleaved over all methods, the median
kept.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from common import (
    CLOCKS,
    RESULTS,
    fast_mode,
    measure_side_by_side,
    print_table,
    save_figure,
    timer,
    write_json,
)

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402

# the problem of bench_work_precision (its constants and the matrix-form equations of diffrax)
from bench_work_precision import MOMENTS, PI0, R0, rhs  # noqa: E402

import geomjax as gj  # noqa: E402

LEVELS = (1e-6, 1e-8, 1e-10, 1e-12)
SAMPLES = 1000


def invariants(R, Pi):
    """``(H, |Π|², |RᵀR − I|)`` of one state."""
    m = jnp.asarray(MOMENTS)
    H = 0.5 * jnp.sum(Pi**2 / m)
    defect = jnp.max(jnp.abs(R.T @ R - jnp.eye(3)))
    return H, jnp.sum(Pi**2), defect


H0, C0, _ = (float(x) for x in invariants(jnp.asarray(R0), jnp.asarray(PI0)))


def geomjax_run(method, T):
    system = gj.RigidBody(jnp.asarray(MOMENTS))

    @eqx.filter_jit
    def run(dt, per_block):
        s0 = gj.RigidBodyState(jnp.asarray(R0), jnp.asarray(PI0))

        def step(k, c):
            carry, t = c
            carry, _ = method.advance(system, carry, dt, None, t)
            return carry, t + dt

        def block(b, c):
            carry, t, worst = c
            carry, t = jax.lax.fori_loop(0, per_block, step, (carry, t))
            s = method.finalize(system, carry)
            H, C, defect = invariants(s.R, s.Pi)
            err = jnp.stack([jnp.abs(H / H0 - 1), jnp.abs(C / C0 - 1), defect])
            return carry, t, jnp.maximum(worst, err)

        init = (method.init(system, s0), jnp.zeros(()), jnp.zeros(3))
        return jax.lax.fori_loop(0, SAMPLES, block, init)[2]

    return lambda dt: run(jnp.asarray(dt), jnp.asarray(max(1, round(T / SAMPLES / dt))))


def diffrax_run(solver, T):
    import diffrax

    term = diffrax.ODETerm(lambda t, y, args: rhs(y, jnp.asarray(MOMENTS)))
    y0 = jnp.concatenate([jnp.asarray(R0).reshape(9), jnp.asarray(PI0)])
    ts = jnp.linspace(T / SAMPLES, T, SAMPLES)

    @jax.jit
    def run(tol):
        sol = diffrax.diffeqsolve(
            term,
            solver,
            0.0,
            T,
            0.01,
            y0,
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
            max_steps=2**24,
        )
        H, C, defect = jax.vmap(lambda y: invariants(y[:9].reshape(3, 3), y[9:]))(sol.ys)
        err = jnp.stack([jnp.abs(H / H0 - 1).max(), jnp.abs(C / C0 - 1).max(), defect.max()])
        return err, sol.stats["num_steps"]

    return run


def time_at(errors, times, level):
    """log–log interpolation of the time at which the error reaches ``level`` (None outside)."""
    e, t = np.log(np.maximum(np.asarray(errors), 1e-300)), np.log(np.asarray(times))
    order = np.argsort(e)
    e, t = e[order], t[order]
    x = np.log(level)
    if not (e[0] <= x <= e[-1]):
        return None
    return float(np.exp(np.interp(x, e, t)))


# --clock=cpu: the process's CPU time instead of wall time (steadier on a shared machine: the
# time the OS gives other processes is not counted; these runs are single-threaded)
CLOCK = CLOCKS


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    fast = fast_mode(argv)
    T = float(
        next((a.split("=", 1)[1] for a in argv if a.startswith("--T=")), 1e3 if fast else 1e5)
    )
    clock_name = next((a.split("=", 1)[1] for a in argv if a.startswith("--clock=")), "wall")
    if clock_name not in CLOCK:
        raise ValueError(f"bench_long_horizon: --clock must be 'wall' or 'cpu', got {clock_name!r}")
    clock = CLOCK[clock_name]
    methods = {
        "LGVI (2)": (gj.LGVI(), (0.1, 0.05, 0.02, 0.01, 0.005)),
        "LGVI suzuki4": (gj.Composition(gj.LGVI(), "suzuki4"), (0.4, 0.2, 0.1, 0.05)),
        "LGVI kahan_li6": (gj.Composition(gj.LGVI(), "kahan_li6"), (0.4, 0.2, 0.1, 0.05)),
        "LGVI kahan_li8": (gj.Composition(gj.LGVI(), "kahan_li8"), (0.8, 0.4, 0.2, 0.1)),
        "LGVI bcm8 (processed)": (gj.ProcessedComposition(gj.LGVI(), "bcm8"), (0.8, 0.4, 0.2, 0.1)),
        "splitting (2)": (gj.RigidBodySplitting(), (0.1, 0.05, 0.02, 0.01)),
        "splitting kahan_li6": (
            gj.Composition(gj.RigidBodySplitting(), "kahan_li6"),
            (0.8, 0.4, 0.2, 0.1),
        ),
        "splitting kahan_li6, compensated": (
            gj.Composition(gj.RigidBodySplitting(compensate=True), "kahan_li6"),
            (0.8, 0.4, 0.2, 0.1),
        ),
    }
    if fast:
        methods = {k: (m, dts[:3]) for k, (m, dts) in methods.items()}
    points, curves = [], {}
    for name, (method, dts) in methods.items():
        run = geomjax_run(method, T)
        with timer(clock) as t:
            jax.block_until_ready(run(dts[0]))
        compile_s = t.s
        curves[name] = {"param": list(dts), "compile_s": compile_s, "kind": "geomjax"}
        points += [(name, run, dt) for dt in dts]
    try:
        import diffrax
    except ImportError:  # pragma: no cover - optional baseline
        diffrax = None
    if diffrax is not None:
        tols = (1e-6, 1e-8, 1e-10) if fast else (1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-13)
        for name, solver in (
            ("diffrax Tsit5", diffrax.Tsit5()),
            ("diffrax Dopri8", diffrax.Dopri8()),
        ):
            run = diffrax_run(solver, T)
            with timer(clock) as t:
                jax.block_until_ready(run(jnp.asarray(tols[0])))
            compile_s = t.s
            curves[name] = {"param": list(tols), "compile_s": compile_s, "kind": "diffrax"}
            points += [(name, run, jnp.asarray(tol)) for tol in tols]
    # one call per point and round (long runs), interleaved; the median round is kept
    calls = {i: (lambda run=run, arg=arg: run(arg)) for i, (_, run, arg) in enumerate(points)}
    timed = measure_side_by_side(calls, rounds=1 if fast else 3, warmup=False, clock=clock)
    for i, (name, _run, arg) in enumerate(points):
        t, out = timed[i].run_s, timed[i].out
        err = np.asarray(out[0] if isinstance(out, tuple) else out)
        c = curves[name]
        c.setdefault("energy", []).append(float(err[0]))
        c.setdefault("casimir", []).append(float(err[1]))
        c.setdefault("defect", []).append(float(err[2]))
        c.setdefault("time_s", []).append(t)
        if isinstance(out, tuple):
            c.setdefault("steps", []).append(int(out[1]))
        print(
            f"{name:34s} {float(arg):<8g} energy {err[0]:.2e} casimir {err[1]:.2e} "
            f"defect {err[2]:.1e} {t:.3f} s"
        )
    for c in curves.values():
        c["worst_invariant"] = np.maximum(c["energy"], c["casimir"]).tolist()  # both below
    rows = []
    for name, c in curves.items():
        row = {"method": name, "compile s": c["compile_s"], "max defect": max(c["defect"])}
        for level in LEVELS:
            t = time_at(c["worst_invariant"], c["time_s"], level)
            peers = [
                time_at(curves[p]["worst_invariant"], curves[p]["time_s"], level)
                for p in ("diffrax Tsit5", "diffrax Dopri8")
                if p in curves
            ]
            peers = [p for p in peers if p is not None]
            row[f"s @{level:g}"] = t
            row[f"/best peer @{level:g}"] = None if (t is None or not peers) else t / min(peers)
        rows.append(row)
        c["summary"] = row
    cols = ["method", "compile s", "max defect"]
    cols += [f"s @{lv:g}" for lv in LEVELS] + [f"/best peer @{lv:g}" for lv in LEVELS]
    print_table(
        rows,
        cols,
        title=f"free rigid body, T = {T:g}: {clock_name} time to keep energy and Casimir below a "
        "level (batch 1, float64; ratio to the best of Tsit5/Dopri8 at that level)",
    )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(12, 5))
        for name, c in curves.items():
            style = "--" if c["kind"] == "diffrax" else "-"
            axes[0].loglog(c["time_s"], c["worst_invariant"], style, marker="o", label=name)
            axes[1].loglog(
                c["time_s"], np.maximum(c["defect"], 1e-17), style, marker="o", label=name
            )
        axes[0].set(
            xlabel="wall time of the run [s]",
            ylabel="max relative error of energy and Casimir",
            title=f"invariants over T = {T:g}",
        )
        axes[1].set(
            xlabel="wall time of the run [s]", ylabel="|RᵀR − I| at the end", title="group defect"
        )
        axes[0].legend(fontsize=7)
        RESULTS.mkdir(parents=True, exist_ok=True)
        save_figure(fig, RESULTS / "long_horizon.png")
    except ImportError:  # pragma: no cover
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    write_json(
        "long_horizon",
        {"T": T, "samples": SAMPLES, "clock": clock_name, "curves": curves, "load_average": load},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

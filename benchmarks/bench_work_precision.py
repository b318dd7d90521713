"""Work–precision of the free rigid body: error at T = 100 against wall time, for the LGVI and the
splitting (order 2), their compositions of order 4, 6 and 8 (geomjax.Composition), their
processed compositions of effective order 6, 8 and 10 (geomjax.ProcessedComposition), RKMK4, and diffrax
Tsit5 / Dopri5 / Dopri8 with adaptive steps (PID controller, rtol = atol swept), all in one run.

    python benchmarks/bench_work_precision.py [--fast] [--clock=cpu]
                                                   (or: geomjax bench work-precision)

Problem: I = (1, 2, 3), R0 = exp(0.3, -0.2, 0.5), Pi0 = (0.8, -0.3, 1.1) (as bench_rigid_body),
float64, batch 1.  Error: max-norm of (R, Pi) at T against SciPy DOP853 at rtol = atol = 1e-13
on the same equations in matrix form.  Time: median wall time of the jitted run (compile time
reported separately, once per method; the median of three interleaved passes over all
methods, each of several blocks of calls); the geomjax methods run ``method.advance`` in a ``fori_loop`` with a dynamic
step count (what ``simulate`` runs per step, without saving).  The table gives, for each method, the time needed to reach errors 1e-6, 1e-8 and 1e-10 (log–log
interpolation between measured points) and its ratio to diffrax Tsit5.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from common import (
    CLOCKS,
    fast_mode,
    measure_side_by_side,
    print_table,
    save_figure,
    timer,
    write_json,
)

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402

import geomjax as gj  # noqa: E402

MOMENTS = np.array([1.0, 2.0, 3.0])
PI0 = np.array([0.8, -0.3, 1.1])
R0 = np.asarray(gj.SO3.exp(jnp.array([0.3, -0.2, 0.5])))
TARGETS = (1e-6, 1e-8, 1e-10)


def rhs(y, moments):
    R = y[:9].reshape(3, 3)
    Pi = y[9:]
    Om = Pi / moments
    return jnp.concatenate([(R @ gj.SO3.hat(Om)).reshape(9), jnp.cross(Pi, Om)])


def reference(T):
    import scipy.integrate as si

    f = jax.jit(lambda y: rhs(y, jnp.asarray(MOMENTS)))
    y0 = np.concatenate([R0.reshape(9), PI0])
    sol = si.solve_ivp(
        lambda t, y: np.asarray(f(jnp.asarray(y))), (0, T), y0, "DOP853", rtol=1e-13, atol=1e-13
    )
    return sol.y[:, -1]


# the clock of the run times: wall time (default), or with --clock=cpu the process's CPU time
# (time.process_time: all its threads).  On a shared, oversubscribed machine the wall time of a
# run includes the time the OS gave other processes; the CPU time does not (it still includes
# their effect on caches and shared cores), so side-by-side ratios are far steadier with it.
CLOCK = CLOCKS


def geomjax_terminal(method):
    system = gj.RigidBody(jnp.asarray(MOMENTS))

    @eqx.filter_jit
    def run(dt, n):
        def body(k, c):
            carry, t = c
            carry, _ = method.advance(system, carry, dt, None, t)
            return carry, t + dt

        s0 = gj.RigidBodyState(jnp.asarray(R0), jnp.asarray(PI0))
        carry, _ = jax.lax.fori_loop(0, n, body, (method.init(system, s0), jnp.zeros(())))
        s = method.finalize(system, carry)
        return jnp.concatenate([s.R.reshape(9), s.Pi])

    return run


def diffrax_terminal(solver, T):
    import diffrax

    term = diffrax.ODETerm(lambda t, y, args: rhs(y, jnp.asarray(MOMENTS)))
    y0 = jnp.concatenate([jnp.asarray(R0).reshape(9), jnp.asarray(PI0)])

    @jax.jit
    def run(tol):
        sol = diffrax.diffeqsolve(
            term,
            solver,
            0.0,
            T,
            0.01,
            y0,
            stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
            max_steps=10**6,
        )
        return sol.ys[-1], sol.stats["num_steps"]

    return run


def time_at(errors, times, target):
    """log–log interpolation of the time at which ``error == target`` (None outside the range)."""
    e, t = np.log(np.asarray(errors)), np.log(np.asarray(times))
    order = np.argsort(e)
    e, t = e[order], t[order]
    x = np.log(target)
    if not (e[0] <= x <= e[-1]):
        return None
    return float(np.exp(np.interp(x, e, t)))


def main(argv=None):
    fast = fast_mode(argv)
    argv = sys.argv[1:] if argv is None else argv
    clock = next((a.split("=", 1)[1] for a in argv if a.startswith("--clock=")), "wall")
    if clock not in CLOCK:
        raise ValueError(f"bench_work_precision: --clock must be 'wall' or 'cpu', got {clock!r}")
    T = 10.0 if fast else 100.0
    repeats = 3 if fast else 5
    passes = 1 if fast else 3
    y_ref = reference(T)
    methods = {
        "LGVI (2)": (gj.LGVI(), (0.02, 0.01, 0.005) if fast else (0.02, 0.01, 0.005, 0.0025)),
        "LGVI suzuki4": (gj.Composition(gj.LGVI(), "suzuki4"), (0.2, 0.1, 0.05, 0.025)),
        "LGVI kahan_li6": (gj.Composition(gj.LGVI(), "kahan_li6"), (0.2, 0.1, 0.05, 0.025)),
        # two (scalar) Newton iterations: round-off for h|xi| <= 0.1 (the stage steps at
        # 1e-8 and below), below the truncation error at the larger ones
        "LGVI(newton_iters=2) kahan_li6": (
            gj.Composition(gj.LGVI(newton_iters=2), "kahan_li6"),
            (0.2, 0.1, 0.05, 0.025),
        ),
        "LGVI kahan_li8": (gj.Composition(gj.LGVI(), "kahan_li8"), (0.4, 0.2, 0.1, 0.05)),
        # the former solver of the Legendre transform (Newton on the vector equation, early
        # exit), side by side with the scalar solve (LGVI's default legendre_solve="scalar")
        "LGVI kahan_li8 (vector Newton)": (
            gj.Composition(gj.LGVI(legendre_solve="newton"), "kahan_li8"),
            (0.4, 0.2, 0.1, 0.05),
        ),
        "LGVI kahan_li6 (vector Newton)": (
            gj.Composition(gj.LGVI(legendre_solve="newton"), "kahan_li6"),
            (0.2, 0.1, 0.05, 0.025),
        ),
        "LGVI suzuki4 (vector Newton)": (
            gj.Composition(gj.LGVI(legendre_solve="newton"), "suzuki4"),
            (0.2, 0.1, 0.05, 0.025),
        ),
        "LGVI(newton_iters=2) kahan_li8": (
            gj.Composition(gj.LGVI(newton_iters=2), "kahan_li8"),
            (0.4, 0.2, 0.1, 0.05),
        ),
        # processed compositions (kernel every step, processor at the output only)
        "LGVI blanes6 (processed)": (
            gj.ProcessedComposition(gj.LGVI(), "blanes6"),
            (0.2, 0.1, 0.05, 0.025),
        ),
        "LGVI bcm8 (processed)": (
            gj.ProcessedComposition(gj.LGVI(), "bcm8"),
            (0.4, 0.2, 0.1, 0.05),
        ),
        "LGVI bcm10 (processed)": (
            gj.ProcessedComposition(gj.LGVI(), "bcm10"),
            (0.8, 0.4, 0.2, 0.1),
        ),
        "splitting (2)": (gj.RigidBodySplitting(), (0.02, 0.01, 0.005)),
        "splitting suzuki4": (
            gj.Composition(gj.RigidBodySplitting(), "suzuki4"),
            (0.2, 0.1, 0.05, 0.025),
        ),
        "splitting kahan_li6": (
            gj.Composition(gj.RigidBodySplitting(), "kahan_li6"),
            (0.4, 0.2, 0.1, 0.05),
        ),
        "splitting kahan_li8": (
            gj.Composition(gj.RigidBodySplitting(), "kahan_li8"),
            (0.8, 0.4, 0.2, 0.1),
        ),
        # the splitting as the kernel of processed compositions (it is symmetric, as they need)
        "splitting bcm8 (processed)": (
            gj.ProcessedComposition(gj.RigidBodySplitting(), "bcm8"),
            (0.8, 0.4, 0.2, 0.1),
        ),
        "splitting bcm10 (processed)": (
            gj.ProcessedComposition(gj.RigidBodySplitting(), "bcm10"),
            (1.6, 0.8, 0.4, 0.2),
        ),
        "RKMK4": (gj.RKMK4(), (0.1, 0.05, 0.025, 0.0125)),
    }
    if fast:
        methods = {k: (m, dts[:3]) for k, (m, dts) in methods.items()}
    rows, curves = [], {}
    # Every (method, step size) point is timed in `passes` x `repeats` interleaved rounds over
    # all methods (diffrax included; each sample a block of calls of at least 0.05 s) and the
    # median is kept: on a shared CPU a whole stretch of one method's measurements can otherwise
    # land in a slow period.
    points = []  # (name, label, run, args, curve key)
    for name, (method, dts) in methods.items():
        run = geomjax_terminal(method)
        with timer() as t:
            jax.block_until_ready(run(jnp.asarray(dts[0]), jnp.asarray(round(T / dts[0]))))
        compile_s = t.s
        curves[name] = {"param": list(dts), "error": [], "time_s": [], "compile_s": compile_s}
        for dt in dts:
            points.append(
                (name, f"dt={dt:<7g}", run, (jnp.asarray(dt), jnp.asarray(round(T / dt))))
            )
    try:
        import diffrax
    except ImportError:
        diffrax = None
    if diffrax is not None:
        tols = (1e-6, 1e-8, 1e-10) if fast else (1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12)
        for name, solver in (
            ("diffrax Tsit5", diffrax.Tsit5()),
            ("diffrax Dopri5", diffrax.Dopri5()),
            ("diffrax Dopri8", diffrax.Dopri8()),
        ):
            run = diffrax_terminal(solver, T)
            with timer() as t:
                jax.block_until_ready(run(jnp.asarray(tols[0])))
            compile_s = t.s
            curves[name] = {
                "param": list(tols),
                "error": [],
                "time_s": [],
                "steps": [],
                "compile_s": compile_s,
            }
            for tol in tols:
                points.append((name, f"tol={tol:<7g}", run, (jnp.asarray(tol),)))
    calls = {
        i: (lambda run=run, args=args: run(*args)) for i, (_, _, run, args) in enumerate(points)
    }
    rounds = passes * repeats
    timed = measure_side_by_side(calls, rounds=rounds, min_time=0.05 * rounds, clock=CLOCK[clock])
    for i, (name, label, _run, _args) in enumerate(points):
        t, out = timed[i].run_s, timed[i].out
        c = curves[name]
        y = out[0] if name.startswith("diffrax") else out
        c["error"].append(float(np.max(np.abs(np.asarray(y) - y_ref))))
        c["time_s"].append(t)
        extra = ""
        if name.startswith("diffrax"):
            c["steps"].append(int(out[1]))
            extra = f" steps={int(out[1])}"
        print(f"{name:30s} {label} err={c['error'][-1]:.3e} time={t * 1e3:.3f} ms{extra}")
    base = curves.get("diffrax Tsit5")
    for name, c in curves.items():
        row = {"method": name, "compile s": c["compile_s"]}
        for target in TARGETS:
            t = time_at(c["error"], c["time_s"], target)
            row[f"ms @{target:g}"] = None if t is None else t * 1e3
            tb = None if base is None else time_at(base["error"], base["time_s"], target)
            row[f"/Tsit5 @{target:g}"] = None if (t is None or tb is None) else t / tb
        rows.append(row)
        c["summary"] = row
    cols = (
        ["method", "compile s"]
        + [f"ms @{t:g}" for t in TARGETS]
        + [f"/Tsit5 @{t:g}" for t in TARGETS]
    )
    print_table(
        rows,
        cols,
        title=f"free rigid body, T = {T:g}: time to reach an error (batch 1, float64, {clock} time)",
    )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 5))
        for name, c in curves.items():
            style = "--" if name.startswith("diffrax") else "-"
            ax.loglog(c["time_s"], c["error"], style, marker="o", label=name)
        ax.set_xlabel("wall time of the run [s]")
        ax.set_ylabel(f"max error of (R, Pi) at T = {T:g}")
        ax.set_title("free rigid body: work–precision (batch 1, float64, CPU)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        from common import RESULTS

        RESULTS.mkdir(parents=True, exist_ok=True)
        save_figure(fig, RESULTS / "work_precision.png")
    except ImportError:
        pass
    load = os.getloadavg()
    print(f"load average (1, 5, 15 min) at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    write_json(
        "work_precision",
        {
            "T": T,
            "fast": fast,
            "dtype": "float64",
            "passes": passes,
            "load_average": list(load),
            "clock": clock,
            "curves": curves,
        },
    )
    return curves


if __name__ == "__main__":
    main(sys.argv[1:])

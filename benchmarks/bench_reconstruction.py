"""Base-controlled reconstruction (Cabrera, *Base-controlled mechanical systems and geometric phases*): geomjax's reconstruction solvers against SciPy
DOP853 on the FULL, UNREDUCED systems (Newton–Euler with constraint forces as multipliers, the
independent references of ``tests/reconstruction/reference.py``).

    python benchmarks/bench_reconstruction.py [--fast]        (or: geomjax bench reconstruction)

(a) Accuracy vs cost: the ball on a turntable (§5.2, affine nonholonomic, a non-circular contact
    path), a self-deforming body (rigid core with two moving masses, conserved momentum μ ≠ 0)
    and the small ball rolling inside a free big ball (§5.3, with total angular momentum and
    spin: the dynamic, non-geometric case; the big ball's final attitude).
    ``MomentumLGVI`` (second order, momentum to round-off) and ``ReconstructionRKMK4`` (fourth
    order) at several step counts, and DOP853 on the full system at several tolerances; error of
    the final attitude against DOP853 at rtol = atol = 1e-12. Compile time separately.
(b) Holonomy of many closed shape loops of a self-deforming body with zero angular momentum
    (rigid core pinned at its centre carrying two masses moved in its frame: reorientation by
    shape change, SO(3)) in ONE vmapped call of ``geomjax.reconstruction.holonomy``
    (``HorizontalLift``), cost per loop beside DOP853 on the full Newton–Euler system at the
    loosest tolerance reaching the same accuracy (ratio, one run).

Table, JSON in ``benchmarks/results/reconstruction.json`` and a plot. DOP853 runs a NumPy
right-hand side from Python (SciPy's own loop); that per-call overhead is part of its cost.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from common import (
    RESULTS,
    fast_mode,
    machine_info,
    measure,
    print_table,
    save_figure,
    timer,
    write_json,
)

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the independent references

from geomjax import reconstruction as rc  # noqa: E402
from tests.reconstruction import curves  # noqa: E402
from tests.reconstruction import reference as ref  # noqa: E402


def _final(method, recon, T):
    """``(state0, n) -> state after n steps`` compiled once for every ``n``."""

    def go(state0, n):
        dt = T / n

        def body(k, s):
            return method.step(recon, s, dt, None, k * dt)[0]

        return jax.lax.fori_loop(0, n, body, state0)

    return jax.jit(go)


def _hat(w):
    return np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])


def _expm(w):
    from scipy.linalg import expm

    return expm(_hat(np.asarray(w, float)))


# ------------------------------------------------------------------------------------ (a)


def turntable_problem():
    a, Om, wz = 0.3, 0.7, 0.4
    path = curves.plane_loop(0.8, 1.1)
    T = 2 * np.pi / 1.1
    R0 = _expm([0.3, -0.2, 0.5])
    S = rc.ball_on_turntable(rate=Om, radius=a)
    rec = rc.Reconstruction(S, path)
    c0, v0, _ = ref.derivatives(path)(0.0)
    w0 = np.array([(Om * c0[0] - v0[1]) / a, (v0[0] + Om * c0[1]) / a, wz])
    q0 = (jnp.asarray(c0), jnp.asarray(R0))
    qd0 = (jnp.asarray(v0), jnp.asarray(_hat(w0) @ R0))
    s0 = rec.state(jnp.asarray(R0.T), S.momentum_map(q0, qd0), spatial=True)

    def full_tol(rtol):
        with timer() as t:
            sol = _with_tol(
                rtol,
                lambda: ref.ball_on_turntable(
                    path, T, a=a, Omega=Om, R0=R0, omega_z0=wz, t_eval=[0.0, T]
                ),
            )
        return sol, t.s

    def attitude(state):
        return np.asarray(rec.configuration(state, T)[1])

    return dict(name="ball on turntable (§5.2)", rec=rec, s0=s0, T=T, full_tol=full_tol,
                attitude=attitude, ref_key="R")  # fmt: skip


def _with_tol(rtol, fn):
    """Run a reference constructor with DOP853 at rtol = atol = ``rtol``."""
    orig = ref.solve

    def solve(rhs, y0, T, t_eval=None, **_):
        return orig(rhs, y0, T, t_eval, rtol=rtol, atol=rtol)

    ref.solve = solve
    try:
        return fn()
    finally:
        ref.solve = orig


def deforming_problem():
    inertia, masses = np.array([1.0, 1.3, 0.8]), np.array([0.7, 0.4])
    T = 2 * np.pi
    L0 = np.array([0.3, -0.2, 0.5])

    def base(t):
        return jnp.stack([0.4 * jnp.sin(t), 0.3 * (1 - jnp.cos(t)) + 0.2])

    def shape(t):
        b = base(t)
        return jnp.array([[1.0, b[0], 0.0], [0.0, 1.0, b[1]]])

    S = rc.deforming_body(inertia=inertia, masses=masses)
    rec = rc.Reconstruction(S, base)
    s0 = rec.state(momentum=jnp.asarray(L0), spatial=True)

    def full_tol(rtol):
        with timer() as t:
            sol = _with_tol(
                rtol,
                lambda: ref.core_with_masses(
                    shape, T, inertia=inertia, masses=masses, L0=L0, t_eval=[0, T]
                ),
            )
        return sol, t.s

    return dict(name="deforming body (μ ≠ 0)", rec=rec, s0=s0, T=T, full_tol=full_tol,
                attitude=lambda s: np.asarray(s.g), ref_key="R")  # fmt: skip


def ball_in_ball_problem():
    BB = dict(m1=3.0, m2=1.0, Rb=1.0, a=0.25)
    r = BB["Rb"] - BB["a"]
    T = 2 * np.pi
    L0, spin = np.array([0.2, -0.1, 0.3]), 0.4
    S = rc.ball_in_ball(mass_big=3.0, mass_small=1.0, radius_big=1.0, radius_small=0.25)

    def base(t):
        s = t + 0.2 * jnp.sin(t)
        return jnp.stack([0.9 + 0.3 * jnp.sin(s), s])

    def r21(t):
        th, ph = base(t)
        return r * jnp.stack([jnp.sin(th) * jnp.cos(ph), jnp.sin(th) * jnp.sin(ph), jnp.cos(th)])

    def full_tol(rtol):
        with timer() as t:
            sol = _with_tol(
                rtol, lambda: ref.ball_in_ball(r21, T, L0=L0, spin0=spin, t_eval=[0.0, T], **BB)
            )
            sol.parts["R"] = sol["R1"]
        return sol, t.s

    first, _ = full_tol(1e-12)
    w1, w3 = first["w1"][0], first["w3"][0]
    dd = first.y[0, 9:12] - first.y[0, 3:6]
    q0 = (jnp.eye(3), jnp.asarray(first["d"][0]), jnp.eye(3))
    qd0 = (jnp.asarray(_hat(w1)), jnp.asarray(dd), jnp.asarray(_hat(w3)))
    rec = rc.Reconstruction(S, base)
    s0 = rec.state(momentum=S.momentum_map(q0, qd0), spatial=True)

    def attitude(state):
        return np.asarray(rec.configuration(state, T)[0])

    return dict(name="ball in ball (§5.3, L ≠ 0, spin)", rec=rec, s0=s0, T=T,
                full_tol=full_tol, attitude=attitude, ref_key="R")  # fmt: skip


def accuracy_cost(fast):
    rows = []
    ns = [32, 64] if fast else [16, 32, 64, 128, 256, 512]
    tols = [1e-6] if fast else [1e-4, 1e-6, 1e-8, 1e-10]
    for prob in (turntable_problem(), deforming_problem(), ball_in_ball_problem()):
        exact, _ = prob["full_tol"](1e-12)
        exact = exact[prob["ref_key"]][-1]
        for mname, method in (("MomentumLGVI", rc.MomentumLGVI()),
                              ("ReconstructionRKMK4", rc.ReconstructionRKMK4())):  # fmt: skip
            go = _final(method, prob["rec"], prob["T"])
            with timer() as t:
                jax.block_until_ready(go(prob["s0"], ns[0]))
            compile_s = t.s
            for n in ns:
                timing = measure(go, prob["s0"], n, repeats=3)  # a warm-up call, 3 timed
                err = float(np.abs(prob["attitude"](timing.out) - exact).max())
                run = timing.run_s
                rows.append(dict(system=prob["name"], method=mname, setting=f"n={n}", error=err,
                                 run_s=run, compile_s=compile_s))  # fmt: skip
        for tol in tols:
            sol, wall = prob["full_tol"](tol)
            err = float(np.abs(sol[prob["ref_key"]][-1] - exact).max())
            rows.append(dict(system=prob["name"], method="DOP853 full system",
                             setting=f"rtol={tol:g}", error=err, run_s=wall, compile_s=None,
                             nfev=sol.nfev))  # fmt: skip
    return rows


# ------------------------------------------------------------------------------------ (b)

INERTIA, MASSES = np.array([1.0, 1.3, 0.8]), np.array([0.7, 0.4])


def _loop(p, t):
    """Shape loop with parameters p = (amplitude, centre₁, centre₂, ellipticity)."""
    return jnp.stack([p[1] + p[0] * jnp.sin(t), p[2] + p[0] * p[3] * (1 - jnp.cos(t))])


def _shape(p, t):
    b = _loop(p, t)
    return jnp.array([[1.0, b[0], 0.0], [0.0, 1.0, b[1]]])


def holonomy_batch(fast):
    """Zero angular momentum self-deforming body (core + two masses moved in the core frame,
    ``deforming_body``): the reorientation after a closed shape loop is the holonomy of the
    mechanical connection on SO(3) (non-abelian: no quadrature shortcut)."""
    n_loops = 20 if fast else 1000
    steps = 64
    rng = np.random.default_rng(0)
    P = np.stack(
        [
            rng.uniform(0.2, 0.9, n_loops),
            rng.uniform(-0.5, 0.5, n_loops),
            rng.uniform(-0.5, 0.5, n_loops),
            rng.uniform(0.5, 1.5, n_loops),
        ],
        1,
    )
    S = rc.deforming_body(inertia=INERTIA, masses=MASSES)
    T = 2 * np.pi
    batched = jax.jit(jax.vmap(lambda p: rc.holonomy(S, _loop, T, steps, params=p)))
    Pj = jnp.asarray(P)
    timing = measure(batched, Pj, repeats=3)
    # compile_s: the first call (compilation + one run), as before
    hol, compile_s, run_s = np.asarray(timing.out), timing.first_s, timing.run_s
    n_check = 3 if fast else 10

    # one compiled (r, ṙ, r̈)(p, t) for all loops, so DOP853 is timed without compiles
    def d2(p, t):
        f = lambda s: _shape(p, s)  # noqa: E731
        (c, v), (_, a) = jax.jvp(lambda s: jax.jvp(f, (s,), (1.0,)), (t,), (1.0,))
        return c, v, a

    d2 = jax.jit(d2)

    def derivs(p):
        pj = jnp.asarray(p)
        return lambda t: tuple(np.asarray(x) for x in d2(pj, jnp.asarray(t, float)))

    def full(p):
        return ref.core_with_masses(None, T, inertia=INERTIA, masses=MASSES, t_eval=[0.0, T],
                                    derivs=derivs(p))  # fmt: skip

    # "exact": DOP853 at rtol = atol = 1e-13 on the full system
    exact = [_with_tol(1e-13, lambda p=p: full(p))["R"][-1] for p in P[:n_check]]
    lib_err = float(max(np.abs(hol[i] - exact[i]).max() for i in range(n_check)))
    # DOP853 on the full system at the loosest tolerance reaching the library's accuracy (if
    # none does, the most accurate one: the ratio is then a lower bound)
    dop = None
    for tol in (1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12):
        with timer() as t:
            errs = [
                np.abs(_with_tol(tol, lambda p=p: full(p))["R"][-1] - ex).max()
                for p, ex in zip(P[:n_check], exact)
            ]
        per_loop = t.s / n_check
        reached = max(errs) <= lib_err
        if dop is None or reached or max(errs) < dop["error"]:
            dop = dict(rtol=tol, error=float(max(errs)), s_per_loop=per_loop, reached=reached)
        if reached:
            break
    lib_per_loop = run_s / n_loops
    angles = np.arccos(np.clip((np.trace(hol, axis1=1, axis2=2) - 1) / 2, -1, 1))
    return (
        dict(
            n_loops=n_loops,
            steps=steps,
            compile_s=compile_s,
            run_s=run_s,
            lib_s_per_loop=lib_per_loop,
            lib_error=lib_err,
            dop853=dop,
            ratio_dop853_over_lib=dop["s_per_loop"] / lib_per_loop,
            rotation_angles=angles[:50].tolist(),
        ),
        P,
        angles,
    )


def plot(rows, P, hol, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for ax, system in zip(axes[:3], dict.fromkeys(r["system"] for r in rows)):
        for method, mk in (("MomentumLGVI", "o-"), ("ReconstructionRKMK4", "s-"),
                           ("DOP853 full system", "^--")):  # fmt: skip
            rr = [r for r in rows if r["system"] == system and r["method"] == method]
            if rr:
                ax.loglog([r["run_s"] for r in rr], [max(r["error"], 1e-16) for r in rr], mk,
                          label=method)  # fmt: skip
        ax.set_xlabel("run time [s] (compile excluded)")
        ax.set_ylabel("attitude error vs DOP853 1e-12")
        ax.set_title(system)
        ax.legend(fontsize=8)
    area = np.pi * P[:, 0] ** 2 * P[:, 3]
    axes[3].scatter(area, hol, s=4)
    axes[3].set_xlabel("enclosed area in shape space (b₁, b₂)")
    axes[3].set_ylabel("reorientation angle after the loop [rad]")
    axes[3].set_title(f"{len(hol)} loops, one vmapped call")
    save_figure(fig, path)


def main():
    fast = fast_mode()
    total = timer()
    rows = accuracy_cost(fast)
    print_table(
        rows,
        ["system", "method", "setting", "error", "run_s", "compile_s", "nfev"],
        title="(a) accuracy vs cost (float64; error of the final attitude vs DOP853 at 1e-12)",
    )
    hb, P, hol = holonomy_batch(fast)
    dop = hb["dop853"] or {}
    print_table(
        [
            dict(method=f"geomjax holonomy, vmap over {hb['n_loops']} loops (HorizontalLift, "
                 f"{hb['steps']} steps)", error=hb["lib_error"], s_per_loop=hb["lib_s_per_loop"],
                 compile_s=hb["compile_s"]),
            dict(method=f"DOP853 full Newton–Euler system, rtol={dop.get('rtol')}",
                 error=dop.get("error"), s_per_loop=dop.get("s_per_loop")),
        ],
        ["method", "error", "s_per_loop", "compile_s"],
        title=f"(b) holonomy of closed shape loops; DOP853/geomjax cost per loop = "
        f"{hb['ratio_dop853_over_lib']:.3g}" if hb["ratio_dop853_over_lib"] else "(b)",
    )  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(rows, P, hol, RESULTS / "reconstruction.png")
    write_json(
        "reconstruction",
        {
            "fast": fast,
            "accuracy_cost": rows,
            "holonomy_batch": hb,
            "wall_s": total.elapsed,
            "machine": machine_info(),
        },
    )


if __name__ == "__main__":
    main()

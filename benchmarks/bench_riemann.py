"""Christoffel symbols and geodesic accelerations by autodiff: geomjax vs a NumPy baseline (and
geomstats when it imports), plus the geomstats PR 801 workload.

    python benchmarks/bench_riemann.py [--fast]      (or: geomjax bench riemann)

1. For a dense metric ``g(q) = 1 + B(q)B(q)ᵀ`` on R^n (every entry depends on every coordinate),
   n = 3, 10, 30, over a batch of N = 1e4 points (1e3 with --fast), float64:

   * ``christoffel``: the full tensor Γ^k_ij — geomjax (``jax.jacfwd``, vmapped, jitted) vs
     NumPy central finite differences (2n batched metric evaluations + a batched solve) vs
     geomstats (``RiemannianMetric.christoffels``, autograd backend);
   * ``geodesic_acc``: −Γ(v, v) — geomjax's contraction (one JVP + one VJP, no n³ tensor) vs
     geomjax through the full tensor vs NumPy finite differences vs geomstats
     (``geodesic_equation``).

2. The workload of geomstats PR 801 (its JAX port was ~40× slower than autograd, un-jitted):
   ``value_and_grad`` of the squared endpoint error of a 50-step RK4 geodesic on S² in
   spherical coordinates, for two base points, called 10 times.  geomjax jits it once (the
   compile time is reported separately).

Compile time (lowering + XLA) is separate from run time (median).  Ratios are run times relative
to geomjax (ratio > 1: slower than geomjax).  geomstats runs on a subset of the batch when it is
slow (the per-point time is what is compared).  geomstats 2.8 still imports ``numpy.trapz``
(removed in NumPy 2.4); a one-line alias to ``numpy.trapezoid`` is installed before importing it.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from common import (
    RESULTS,
    compile_timed,
    fast_mode,
    measure,
    print_table,
    save_figure,
    time_jitted,
    timer,
    write_json,
)

jax.config.update("jax_enable_x64", True)

from geomjax.riemann import christoffel, geodesic_acceleration  # noqa: E402


def _import_geomstats():
    """geomstats with its autograd backend, or None (with the reason)."""
    os.environ.setdefault("GEOMSTATS_BACKEND", "autograd")
    try:
        if not hasattr(np, "trapz"):  # geomstats 2.8 vs NumPy ≥ 2.4
            setattr(np, "trapz", np.trapezoid)  # noqa: B010
        import autograd.numpy as anp

        if not hasattr(anp, "trapz"):
            setattr(anp, "trapz", anp.trapezoid)  # noqa: B010
        import geomstats.backend as gs
        from geomstats.geometry.euclidean import Euclidean
        from geomstats.geometry.hypersphere import Hypersphere
        from geomstats.geometry.riemannian_metric import RiemannianMetric
        from geomstats.numerics.geodesic import ExpODESolver
        from geomstats.numerics.ivp import GSIVPIntegrator
    except Exception as e:  # not installed / incompatible
        return None, f"{type(e).__name__}: {e}"
    import geomstats

    ns = dict(
        gs=gs,
        Euclidean=Euclidean,
        Hypersphere=Hypersphere,
        RiemannianMetric=RiemannianMetric,
        ExpODESolver=ExpODESolver,
        GSIVPIntegrator=GSIVPIntegrator,
        version=geomstats.__version__,
    )
    return ns, None


# --------------------------------------------------------------------------------------------
# the dense test metric, in JAX and in NumPy


def metric_params(n, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((n, n)) / np.sqrt(n),
        rng.standard_normal((n, n)),
        rng.uniform(-np.pi, np.pi, (n, n)),
    )


def jax_metric(params):
    W, P, Phi = (jnp.asarray(p) for p in params)

    def metric(q):
        B = W * jnp.cos(P * q[None, :] + Phi + 0.3 * jnp.sum(q))
        return jnp.eye(q.shape[0], dtype=q.dtype) + B @ B.T

    return metric


def numpy_metric(params, q):
    """Batched ``(N, n) -> (N, n, n)``."""
    W, P, Phi = params
    B = W * np.cos(P * q[:, None, :] + Phi + 0.3 * q.sum(-1)[:, None, None])
    return np.eye(q.shape[-1]) + B @ np.swapaxes(B, -1, -2)


def numpy_christoffel_fd(params, q, h=1e-5, chunk=None):
    """Γ^k_ij by central differences of the metric (2n batched evaluations) and a batched solve."""
    N, n = q.shape
    chunk = chunk or N
    out = []
    for s in range(0, N, chunk):
        qc = q[s : s + chunk]
        dg = np.stack(
            [
                (numpy_metric(params, qc + h * e) - numpy_metric(params, qc - h * e)) / (2 * h)
                for e in np.eye(n)
            ],
            -1,
        )  # (N, n, n, n): ∂_k g_ij
        G1 = 0.5 * (dg + np.swapaxes(dg, -1, -2) - np.moveaxis(dg, -1, 1))
        g = numpy_metric(params, qc)
        out.append(np.linalg.solve(g, G1.reshape(len(qc), n, n * n)).reshape(len(qc), n, n, n))
    return np.concatenate(out)


def time_chunked(fn, arrays, chunk, repeats):
    """Jit ``fn`` for one chunk of the batch and time a Python loop over the chunks (bounded memory
    for the n³ tensors).  Returns ``(compile_s, run_s, output)``."""
    N = arrays[0].shape[0]
    compiled, compile_s = compile_timed(fn, *(a[:chunk] for a in arrays))

    def run():
        return [compiled(*(a[s : s + chunk] for a in arrays)) for s in range(0, N, chunk)]

    timing = measure(run, repeats=repeats)  # a warm-up call, then the samples
    return compile_s, timing.run_s, np.concatenate([np.asarray(o) for o in timing.out])


def time_numpy(fn, *args, repeats=3):
    return measure(fn, *args, repeats=repeats, block=False).run_s


def geomstats_metric(ns, params, n):
    gs, RiemannianMetric, Euclidean = ns["gs"], ns["RiemannianMetric"], ns["Euclidean"]
    W, P, Phi = params

    class Dense(RiemannianMetric):
        def metric_matrix(self, base_point=None):
            q = base_point
            B = W * gs.cos(P * q[..., None, :] + Phi + 0.3 * gs.sum(q, axis=-1)[..., None, None])
            return gs.eye(n) + gs.einsum("...ij,...kj->...ik", B, B)

    space = Euclidean(dim=n, equip=False)
    space.equip_with_metric(Dense)
    return space.metric


# --------------------------------------------------------------------------------------------


def bench_christoffel(N, ns, fast):
    rows = []
    for n in (3, 10, 30):
        rows += bench_one_dimension(n, N, ns, fast)
    return rows


def bench_one_dimension(n, N, ns, fast):
    rows = []
    params = metric_params(n)
    metric = jax_metric(params)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((N, n))
    v = rng.standard_normal((N, n))
    qj, vj = jnp.asarray(q), jnp.asarray(v)
    # keep the n³ intermediates of one chunk around 2e7 numbers (memory, not speed)
    chunk = N
    while chunk * n**3 > 2e7 and chunk % 2 == 0:
        chunk //= 2

    def full(qs, metric=metric):
        return jax.vmap(lambda x: christoffel(metric, x))(qs)

    def contract(qs, vs, metric=metric):
        return jax.vmap(lambda x, y: geodesic_acceleration(metric, x, y))(qs, vs)

    def via_tensor(qs, vs, metric=metric):
        return jax.vmap(lambda x, y: -jnp.einsum("kij,i,j->k", christoffel(metric, x), y, y))(
            qs, vs
        )

    reps = 1 if n >= 30 else (3 if fast else 5)  # the n³ routes take seconds per call at n = 30
    c_full, r_full, G = time_chunked(full, (qj,), chunk, reps)
    c_con, r_con = time_jitted(contract, qj, vj, repeats=3 if fast else 5)
    a = np.asarray(jax.jit(contract)(qj, vj))
    c_vt, r_vt, a_vt = time_chunked(via_tensor, (qj, vj), chunk, reps)
    r_np = time_numpy(lambda: numpy_christoffel_fd(params, q, chunk=chunk), repeats=reps)
    G_np = numpy_christoffel_fd(params, q, chunk=chunk)
    a_np = -np.einsum("bkij,bi,bj->bk", G_np, v, v)

    def row(task, impl, compile_s, run_s, ref_s, diff, n_meas=N):
        return {
            "task": task,
            "n": n,
            "impl": impl,
            "N": n_meas,
            "compile_s": compile_s,
            "run_ms": run_s * 1e3 * N / n_meas,
            "us_per_point": run_s / n_meas * 1e6,
            "ratio_vs_geomjax": (run_s / n_meas) / (ref_s / N),
            "max_abs_diff": diff,
        }

    rows += [
        row("christoffel", "geomjax jacfwd", c_full, r_full, r_full, 0.0),
        row("christoffel", "numpy central FD", None, r_np, r_full, float(np.abs(G_np - G).max())),
        row("geodesic_acc", "geomjax contraction", c_con, r_con, r_con, 0.0),
        row(
            "geodesic_acc",
            "geomjax full tensor",
            c_vt,
            r_vt,
            r_con,
            float(np.abs(a_vt - a).max()),
        ),
        row("geodesic_acc", "numpy central FD", None, r_np, r_con, float(np.abs(a_np - a).max())),
    ]
    if ns is not None:
        gm = geomstats_metric(ns, params, n)
        M = min(N, {3: 2000, 10: 500, 30: 100}[n] // (4 if fast else 1))
        r_gs = time_numpy(lambda M=M: gm.christoffels(q[:M]), repeats=1)
        G_gs = np.asarray(gm.christoffels(q[:M]))
        state = np.stack([q[:M], v[:M]], -2)
        r_gs_eq = time_numpy(lambda state=state: gm.geodesic_equation(state), repeats=1)
        a_gs = np.asarray(gm.geodesic_equation(state))[:, 1]
        rows += [
            row(
                "christoffel",
                "geomstats (autograd)",
                None,
                r_gs,
                r_full,
                float(np.abs(G_gs - G[:M]).max()),
                M,
            ),
            row(
                "geodesic_acc",
                "geomstats geodesic_equation",
                None,
                r_gs_eq,
                r_con,
                float(np.abs(a_gs - a[:M]).max()),
                M,
            ),
        ]
    return rows


# --------------------------------------------------------------------------------------------
# geomstats PR 801: value_and_grad of a 50-step RK4 geodesic on S², 10 calls

BASE = np.array([[np.pi / 3, np.pi / 4], [np.pi / 2, np.pi / 4]])
TARGET = np.array([[1.0, np.pi / 2], [np.pi / 6, np.pi / 3]])
N_STEPS = 50


def sphere_metric(q):
    return jnp.diag(jnp.stack([jnp.ones_like(q[0]), jnp.sin(q[0]) ** 2]))


def make_objective(accel):
    def rhs(y):
        q, v = y[..., 0, :], y[..., 1, :]
        return jnp.stack([v, jax.vmap(accel)(q, v)], -2)

    def exp(v0, q0):
        y = jnp.stack([q0, v0], -2)
        dt = 1.0 / N_STEPS

        def step(y, _):
            k1 = rhs(y)
            k2 = rhs(y + 0.5 * dt * k1)
            k3 = rhs(y + 0.5 * dt * k2)
            k4 = rhs(y + dt * k3)
            return y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

        return jax.lax.scan(step, y, None, length=N_STEPS)[0][..., 0, :]

    def objective(velocity):
        return jnp.sum((exp(velocity.reshape(2, 2), jnp.asarray(BASE)) - jnp.asarray(TARGET)) ** 2)

    return objective


def numpy_pr801():
    """RK4 with the closed-form S² Christoffel symbols and a central-difference gradient."""

    def accel(q, v):
        th = q[:, 0]
        return np.stack(
            [
                np.sin(th) * np.cos(th) * v[:, 1] ** 2,
                -2 * np.cos(th) / np.sin(th) * v[:, 0] * v[:, 1],
            ],
            -1,
        )

    def objective(vel):
        q, v = BASE.copy(), vel.reshape(2, 2).copy()
        dt = 1.0 / N_STEPS
        for _ in range(N_STEPS):
            k1q, k1v = v, accel(q, v)
            k2q, k2v = v + 0.5 * dt * k1v, accel(q + 0.5 * dt * k1q, v + 0.5 * dt * k1v)
            k3q, k3v = v + 0.5 * dt * k2v, accel(q + 0.5 * dt * k2q, v + 0.5 * dt * k2v)
            k4q, k4v = v + dt * k3v, accel(q + dt * k3q, v + dt * k3v)
            q = q + dt / 6 * (k1q + 2 * k2q + 2 * k3q + k4q)
            v = v + dt / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
        return np.sum((q - TARGET) ** 2)

    def value_and_grad(vel, h=1e-6):
        g = np.array(
            [(objective(vel + h * e) - objective(vel - h * e)) / (2 * h) for e in np.eye(vel.size)]
        )
        return objective(vel), g

    return value_and_grad


def bench_pr801(ns):
    v0 = (TARGET - BASE).ravel()
    rows = []
    ref = None
    for impl, accel in (
        ("geomjax contraction", lambda q, v: geodesic_acceleration(sphere_metric, q, v)),
        (
            "geomjax full tensor",
            lambda q, v: -jnp.einsum("kij,i,j->k", christoffel(sphere_metric, q), v, v),
        ),
    ):
        vg = jax.value_and_grad(make_objective(accel))
        compiled, c = compile_timed(vg, jnp.asarray(v0))
        jax.block_until_ready(compiled(v0))
        t0 = timer()
        for _ in range(10):
            out = compiled(v0)
        jax.block_until_ready(out)
        r = t0.elapsed
        val, grad = float(out[0]), np.asarray(out[1])
        ref = ref or (val, grad, r)
        rows.append(
            {
                "impl": impl,
                "compile_s": c,
                "run_10x_s": r,
                "value": val,
                "grad_diff": float(np.abs(grad - ref[1]).max()),
            }
        )
    vg_np = numpy_pr801()
    t0 = timer()
    for _ in range(10):
        val, grad = vg_np(v0)
    rows.append(
        {
            "impl": "numpy RK4 + central-difference grad",
            "compile_s": None,
            "run_10x_s": t0.elapsed,
            "value": float(val),
            "grad_diff": float(np.abs(grad - ref[1]).max()),
        }
    )
    if ns is not None:
        gs = ns["gs"]
        space = ns["Hypersphere"](dim=2, intrinsic=True)
        solver = ns["ExpODESolver"](
            space, integrator=ns["GSIVPIntegrator"](n_steps=N_STEPS, step_type="rk4")
        )

        def objective(velocity):
            delta = solver.exp(gs.reshape(velocity, (2, 2)), gs.array(BASE)) - gs.array(TARGET)
            return gs.sum(delta**2)

        obj = gs.autodiff.value_and_grad(objective)
        t0 = timer()
        for _ in range(10):
            val, grad = obj(gs.array(v0))
        rows.append(
            {
                "impl": f"geomstats {ns['version']} (autograd)",
                "compile_s": None,
                "run_10x_s": t0.elapsed,
                "value": float(val),
                "grad_diff": float(np.abs(np.asarray(grad) - ref[1]).max()),
            }
        )
    for r in rows:
        r["ratio_vs_geomjax"] = r["run_10x_s"] / ref[2]
    return rows


def plot(rows, pr_rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4), width_ratios=(1, 1, 1.15))
    for ax, task in zip(axes[:2], ("christoffel", "geodesic_acc")):
        impls = sorted(
            {r["impl"] for r in rows if r["task"] == task},
            key=lambda s: (not s.startswith("geomjax"), s),
        )
        for impl in impls:
            pts = [
                (r["n"], r["us_per_point"]) for r in rows if r["task"] == task and r["impl"] == impl
            ]
            ax.loglog(*zip(*pts), "o-", label=impl)
        ax.set_xticks([3, 10, 30], ["3", "10", "30"])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("n (dimension)")
        ax.set_ylabel("µs per point (batched, run time)")
        ax.set_title(
            {
                "christoffel": "Christoffel symbols Γ (n³ tensor)",
                "geodesic_acc": "geodesic acceleration −Γ(v, v)",
            }[task]
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[2]
    names = [r["impl"] for r in pr_rows]
    ax.barh(range(len(names)), [r["run_10x_s"] for r in pr_rows], color="tab:blue")
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("seconds for 10 × value_and_grad (run time)")
    ax.set_title("geomstats PR 801 workload\n(S², 50-step RK4, 10 × value_and_grad)")
    save_figure(fig, path, dpi=120)


def main():
    fast = fast_mode()
    N = 1_000 if fast else 10_000
    ns, why = _import_geomstats()
    if ns is None:
        print(f"geomstats not available ({why}); its rows are skipped")
    rows = bench_christoffel(N, ns, fast)
    cols = [
        "task",
        "n",
        "impl",
        "N",
        "compile_s",
        "run_ms",
        "us_per_point",
        "ratio_vs_geomjax",
        "max_abs_diff",
    ]
    print_table(
        rows,
        cols,
        title=f"Christoffel symbols / geodesic acceleration, batch N = {N}, float64 (ratio > 1: slower than geomjax)",
    )
    pr = bench_pr801(ns)
    print_table(
        pr,
        ["impl", "compile_s", "run_10x_s", "ratio_vs_geomjax", "value", "grad_diff"],
        title="geomstats PR 801 workload: 10 × value_and_grad of a 50-step RK4 geodesic on S²",
    )
    write_json(
        "riemann",
        {
            "N": N,
            "geomstats": None if ns is None else ns["version"],
            "geomstats_unavailable": why,
            "rows": rows,
            "pr801": pr,
        },
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(rows, pr, RESULTS / "riemann.png")


if __name__ == "__main__":
    main()

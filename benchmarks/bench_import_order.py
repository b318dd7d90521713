"""Import order and geomjax's opt-in process settings: ``simulate`` when geomjax is imported
before JAX computes anything and after, with the defaults and with each opt-in setting
(:mod:`geomjax._internal.xla_flags`, :mod:`geomjax._internal.gc_freeze`).

    python benchmarks/bench_import_order.py [--fast] [--rounds N]   (or: geomjax bench import-order)

XLA reads ``XLA_FLAGS`` once per process, so each configuration is a fresh child process,
alternated ``N`` times (default 3, 1 with ``--fast``; best time of each kept, so that all see
the same machine load):

* ``default, early`` / ``default, late``: nothing opted in, each case compiled by ``jax.jit``
  (the user's own program: XLA's defaults); ``import geomjax`` first, or after
  ``jnp.ones(3).sum()`` (JAX's backend started).  ``import geomjax`` changes nothing, so both
  compile the same programs (the ratio measures only the noise);
* ``geomjax.jit, early`` / ``geomjax.jit, late``: nothing opted in, each case compiled by
  :func:`geomjax.jit` (the small-loop threshold raised for that program alone, as geomjax's
  eager entry points do): what the per-program setting gives, whatever the import order;
* ``small loops, early``: ``GEOMJAX_XLA_FLAGS=1`` (XLA:CPU's small-loop threshold raised to 16
  MiB before the backend starts: loops compiled as single kernels, the SO(3) kernel's Newton
  solve a rolled loop);
* ``small loops, late``: the same opt-in after JAX's first computation (it cannot apply and
  warns: XLA's defaults, what a late import gave before the settings became opt-in);
* ``gc freeze``: ``GEOMJAX_GC_FREEZE=1`` (``gc.freeze()`` at the end of the import: compile
  times, which include tracing, are the column to read).

Cases (float64, LGVI, the default method): the free body (moments 1, 2, 3, dt 0.01, batch 1,
1e5 steps; 1e4 with ``--fast``) saved every step and every 100th; its gradient through
``adjoint=ReversibleAdjoint()`` (1e4 steps, saved every 100th); the free body vmapped over
1024 initial momenta (1e3 steps, saved every 10th); a rigid body in SE(3) with gravity and the
heavy top (2e4 steps each, saved every step).  Columns: run time in ms (median of calls,
compile separately), its ratio to ``default, early`` and to ``small loops, early``; then a
summary, one row per case: ``jax.jit`` (XLA's defaults), ``geomjax.jit`` imported first and
late, the process-wide opt-in, and their ratios.
"""

from __future__ import annotations

import json
import os
import sys

from common import child_or_parent, machine_info, print_table, run_child_json, timer, write_json

CONFIGS = {
    "default, early": {},
    "default, late": {"GEOMJAX_BENCH_LATE": "1"},
    "geomjax.jit, early": {"GEOMJAX_BENCH_JIT": "geomjax"},
    "geomjax.jit, late": {"GEOMJAX_BENCH_JIT": "geomjax", "GEOMJAX_BENCH_LATE": "1"},
    "small loops, early": {"GEOMJAX_XLA_FLAGS": "1"},
    "small loops, late": {"GEOMJAX_XLA_FLAGS": "1", "GEOMJAX_BENCH_LATE": "1"},
    "gc freeze": {"GEOMJAX_GC_FREEZE": "1"},
}


def _cases(gj, jax, jnp, fast):
    """``{name: (function, argument, steps)}``: every function maps one array to a pytree."""
    n = 10 if fast else 1
    body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
    pi0 = jnp.array([0.8, -0.3, 1.1])
    lgvi = gj.LGVI()
    cases = {}
    for every in (1, 100):
        steps = 100_000 // n

        def free(pi, every=every, steps=steps):
            return gj.simulate(body, lgvi, gj.RigidBodyState(R0, pi), 0.01, steps, save_every=every)

        cases[f"free body, save every {every}"] = (free, pi0, steps)

    steps_adj = 10_000 // n

    def adjoint_grad(pi):
        def loss(pi):
            sol = gj.simulate(
                body, lgvi, gj.RigidBodyState(R0, pi), 0.01, steps_adj, save_every=100,
                adjoint=gj.ReversibleAdjoint(),
            )  # fmt: skip
            s = sol.final_state
            return jnp.sum(s.R[0]) + jnp.sum(s.Pi * jnp.array([0.3, -0.2, 0.1]))

        return jax.grad(loss)(pi)

    cases["free body, ReversibleAdjoint gradient"] = (adjoint_grad, pi0, steps_adj)

    steps_b = 1000 // n
    pis = pi0 * (1.0 + 0.1 * jnp.sin(jnp.arange(1024.0)))[:, None]

    def batched(pis):
        return jax.vmap(
            lambda pi: gj.simulate(
                body, lgvi, gj.RigidBodyState(R0, pi), 0.01, steps_b, save_every=10
            )
        )(pis)

    cases["free body, vmap 1024"] = (batched, pis, steps_b)

    se3 = gj.RigidBodySE3(
        mass=2.0,
        inertia=jnp.diag(jnp.array([1.0, 2.0, 3.0])),
        com=jnp.array([0.1, 0.0, -0.2]),
        potential=lambda g: 9.81 * 2.0 * g[2, 3],
    )
    g0 = gj.SE3.exp(jnp.array([0.1, 0.2, -0.3, 0.5, 0.1, 0.0]))
    mu0 = jnp.array([0.3, -0.5, 1.0, 0.2, 0.1, -0.4])
    steps_se3 = 20_000 // n

    def se3_run(mu):
        return gj.simulate(se3, lgvi, se3.make_state(g0, mu), 0.01, steps_se3)

    cases["SE(3) body with gravity"] = (se3_run, mu0, steps_se3)

    top = gj.RigidBody(
        jnp.array([0.9, 1.0, 0.4]), potential=gj.HeavyTop(1.5, 9.81, [0.05, -0.02, 0.3])
    )
    steps_top = 20_000 // n

    def top_run(pi):
        return gj.simulate(top, lgvi, gj.RigidBodyState(R0, pi), 0.005, steps_top)

    cases["heavy top"] = (top_run, pi0, steps_top)
    return cases


def child(fast):
    """Time the cases in this process's configuration; print one JSON line."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    if os.environ.get("GEOMJAX_BENCH_LATE") == "1":
        jnp.ones(3).sum().block_until_ready()  # JAX's backend starts before import geomjax
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a late opt-in's warning: expected here
        import geomjax as gj
    from common import time_jitted

    from geomjax._internal.xla_flags import small_loops_in_effect

    wrapper = gj.jit if os.environ.get("GEOMJAX_BENCH_JIT") == "geomjax" else jax.jit
    rows = []
    for name, (fn, arg, steps) in _cases(gj, jax, jnp, fast).items():
        c, r = time_jitted(fn, arg, repeats=5, min_time=0.2 if fast else 0.5, jit=wrapper)
        rows.append({"case": name, "steps": steps, "compile_s": c, "run_s": r})
    print(json.dumps({"small_loops": small_loops_in_effect(), "rows": rows}))


def _run_child(fast, extra):
    drop = (
        "XLA_FLAGS",
        "GEOMJAX_XLA_FLAGS",
        "GEOMJAX_GC_FREEZE",
        "GEOMJAX_NEWTON_UNROLL",
        "GEOMJAX_BENCH_LATE",
        "GEOMJAX_BENCH_JIT",
    )
    return run_child_json(__file__, fast, drop, extra)


def main(argv=None):
    fast, rounds = child_or_parent(sys.argv[1:] if argv is None else argv, child)
    if rounds is None:
        return
    total = timer()
    best, small, cases = {}, {}, []
    for _ in range(rounds):  # alternate the configurations, keep the best of each
        for label, extra in CONFIGS.items():
            res = _run_child(fast, extra)
            small[label] = res["small_loops"]
            for row in res["rows"]:
                if row["case"] not in cases:
                    cases.append(row["case"])
                key = (label, row["case"])
                if key not in best or row["run_s"] < best[key]["run_s"]:
                    best[key] = {**row, "compile_s": min(
                        row["compile_s"], best.get(key, row)["compile_s"])}  # fmt: skip
    rows = []
    for case in cases:
        ref = best[("default, early", case)]["run_s"]
        opt = best[("small loops, early", case)]["run_s"]
        for label in CONFIGS:
            b = best[(label, case)]
            rows.append(
                {
                    "case": case,
                    "config": label,
                    "small_loops": small[label],
                    "steps": b["steps"],
                    "run_ms": b["run_s"] * 1e3,
                    "ratio_to_default_early": b["run_s"] / ref,
                    "ratio_to_small_loops_early": b["run_s"] / opt,
                    "compile_s": b["compile_s"],
                }
            )
    print_table(
        rows,
        [
            "case",
            "config",
            "small_loops",
            "steps",
            "run_ms",
            "ratio_to_default_early",
            "ratio_to_small_loops_early",
            "compile_s",
        ],
        title="simulate, LGVI, float64: import order and opt-in settings (fresh processes)",
    )
    summary = []
    for case in cases:
        ms = {label: best[(label, case)]["run_s"] * 1e3 for label in CONFIGS}
        late = max(ms["geomjax.jit, early"], ms["geomjax.jit, late"])
        summary.append(
            {
                "case": case,
                "steps": best[("default, early", case)]["steps"],
                "jax.jit ms": ms["default, early"],
                "geomjax.jit ms (first)": ms["geomjax.jit, early"],
                "geomjax.jit ms (late)": ms["geomjax.jit, late"],
                "late / first": ms["geomjax.jit, late"] / ms["geomjax.jit, early"],
                "XLA_FLAGS opt-in ms": ms["small loops, early"],
                "geomjax.jit / XLA_FLAGS": late / ms["small loops, early"],
                "jax.jit / geomjax.jit": ms["default, early"] / ms["geomjax.jit, early"],
            }
        )
    print_table(summary, list(summary[0]), title="summary (ms per call)")
    write_json(
        "import_order",
        {
            "fast": fast,
            "rounds": rounds,
            "summary": summary,
            "detail": {"rows": rows},
            "wall_s": total.elapsed,
            "load_average": list(os.getloadavg()),
            "machine": machine_info(),
        },
    )


if __name__ == "__main__":
    main()

"""XLA:CPU's small-loop compilation: XLA's default threshold (1 kB, geomjax's default) against
the 16 MiB of the opt-in setting (``GEOMJAX_XLA_FLAGS=1``, :mod:`geomjax._internal.xla_flags`), on
the integrators and on the bare-scan references.

    python benchmarks/bench_xla_loops.py [--fast]     (or: geomjax bench xla-loops)

The threshold is a process-wide XLA flag read when JAX creates its CPU backend, so the two
configurations cannot share a process: the script runs itself twice as a child process
(XLA's default, then ``GEOMJAX_XLA_FLAGS=1``), alternating the two
``rounds`` times and keeping each case's best time, so that both see the same machine load.
Cases (float64, ns per body-step, batch 1 and 1024, compile time separately): NonholonomicVI
on the Chaplygin sleigh and on the ball on a turntable (dt 1e-3) with the RK4 of their reduced
ODEs in a bare ``lax.scan`` (``bench_nonholonomic.py``); the LGVI on the free body (dt 0.01);
the free body's gradient over the run with ``ReversibleAdjoint`` against the gradient of a
bare-scan RK4 (``bench_adjoint.py``).  The columns ``ratio_*`` divide by the reference of the
same configuration (the speed targets are such ratios).
"""

from __future__ import annotations

import json
import os
import sys

import jax
import jax.numpy as jnp
from common import (
    fast_mode,
    machine_info,
    print_table,
    run_child_json,
    time_jitted,
    timer,
    write_json,
)

jax.config.update("jax_enable_x64", True)


def _cases(fast):
    """(name, batch, function, argument, reference name or None)."""
    import bench_adjoint as ba
    import bench_nonholonomic as bn

    import geomjax as gj

    steps = 200 if fast else 2000
    out = []
    for name, system, s0, dt, _, ref, y0 in bn._speed_cases(fast):

        def vi(s, system=system, dt=dt):
            return gj.simulate(
                system, gj.NonholonomicVI(), s, dt, steps, save_every=steps, check_inputs=False
            ).final_state.v

        out.append((name, vi, s0, f"{name}: reduced RK4"))
        out.append((f"{name}: reduced RK4", ref, y0, None))

    fb = gj.RigidBody(ba.MOMENTS)

    def lgvi(pi):
        s0 = gj.RigidBodyState(ba.R0, pi)
        return gj.simulate(fb, gj.LGVI(), s0, ba.DT, steps, save_every=steps).final_state.Pi

    out.append(("free body LGVI", lgvi, ba.PI0, None))
    grad_rev = jax.grad(ba.lgvi_loss(steps, "reversible"), argnums=(0, 1))
    grad_rk4 = jax.grad(ba.rk4_loss(steps), argnums=(0, 1))
    out.append(("free body gradient, ReversibleAdjoint", grad_rev, ba.PI0, "free body RK4 grad"))
    out.append(("free body RK4 grad", grad_rk4, ba.PI0, None))
    return steps, out


def child(fast):
    """Measure every case in this process's XLA configuration; print one JSON line."""
    import bench_adjoint as ba

    steps, cases = _cases(fast)
    rows = []
    for name, fn, arg, ref in cases:
        grad = "grad" in name
        for batch in (1,) if grad else ((1, 64) if fast else (1, 1024)):
            if grad:
                f = (lambda g: lambda pi: g(pi, ba.MOMENTS))(fn)
                x = arg
            elif batch == 1:
                f, x = fn, arg
            else:
                f = jax.vmap(fn)
                x = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (batch, *a.shape)), arg)
            c, r = time_jitted(f, x, repeats=3 if fast else 5, min_time=0.1 if fast else 0.5)
            rows.append(
                {
                    "case": name,
                    "batch": batch,
                    "reference": ref,
                    "compile_s": c,
                    "ns_per_body_step": r / steps / batch * 1e9,
                }
            )
    print(json.dumps({"xla_flags": os.environ.get("XLA_FLAGS", ""), "rows": rows}))


def _run_child(fast, default_xla):
    extra = {} if default_xla else {"GEOMJAX_XLA_FLAGS": "1"}
    return run_child_json(__file__, fast, ("XLA_FLAGS", "GEOMJAX_XLA_FLAGS"), extra)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    fast = fast_mode(argv)
    if "--child" in argv:
        child(fast)
        return
    total = timer()
    best, flags = {}, {}
    for _ in range(1 if fast else 2):  # alternate the configurations, keep the best of each
        for label, default_xla in (("xla_default", True), ("geomjax", False)):
            res = _run_child(fast, default_xla)
            flags[label] = res["xla_flags"]
            for row in res["rows"]:
                key = (row["case"], row["batch"])
                old = best.setdefault(label, {}).get(key)
                if old is None or row["ns_per_body_step"] < old["ns_per_body_step"]:
                    best[label][key] = row
    rows = []
    for key, d in best["xla_default"].items():
        g = best["geomjax"][key]
        row = {
            "case": key[0],
            "batch": key[1],
            "ns_xla_default": d["ns_per_body_step"],
            "ns_geomjax": g["ns_per_body_step"],
            "speedup": d["ns_per_body_step"] / g["ns_per_body_step"],
            "compile_s_xla_default": d["compile_s"],
            "compile_s_geomjax": g["compile_s"],
        }
        if d["reference"] is not None:
            ref = (d["reference"], key[1])
            row["ratio_xla_default"] = (
                d["ns_per_body_step"] / best["xla_default"][ref]["ns_per_body_step"]
            )
            row["ratio_geomjax"] = g["ns_per_body_step"] / best["geomjax"][ref]["ns_per_body_step"]
        rows.append(row)
    print_table(
        rows,
        [
            "case",
            "batch",
            "ns_xla_default",
            "ns_geomjax",
            "speedup",
            "ratio_xla_default",
            "ratio_geomjax",
            "compile_s_xla_default",
            "compile_s_geomjax",
        ],
        title="XLA:CPU small-loop threshold: XLA's default vs geomjax's (float64, ns/body-step; "
        "ratio = to the reference of the same configuration)",
    )
    write_json(
        "xla_loops",
        {
            "fast": fast,
            "rows": rows,
            "xla_flags": flags,
            "wall_s": total.elapsed,
            "machine": machine_info(),
        },
    )


if __name__ == "__main__":
    main()

"""Time to the first result of each worked problem's solve in a fresh process, without and with
JAX's persistent compilation cache (``geomjax.configure(compilation_cache=DIR)``).

    python benchmarks/bench_compile_cache.py [--fast] [--rounds N]   (or: geomjax bench compile-cache)

Cases (float64): the quadrotor (crocoddyl's example, 33 nodes, ``tol=1e-9``, 100 iterations at
most) and the 40-node attitude manoeuvre (penalty form, RKMK4, torque limit 0.2, 200 iterations
at most), each with iLQR and DDP.  Each measurement is a fresh child process (``--child``) that
imports geomjax, builds the problem and solves it once; three processes per case, in order:

* ``no cache``: the defaults (the eager solve reports each iteration to the host);
* ``cache, 1st``: ``configure(compilation_cache=DIR)`` with an empty ``DIR``: compiles and
  writes the entries;
* ``cache, 2nd``: a second process with the ``DIR`` the first one filled: loads them.

Columns: the time to the first result (problem built and solved, s; the import is reported
apart), its parts as JAX's monitoring events measure them in that process — tracing to jaxprs,
lowering to MLIR, XLA's compile or the cache's load — the ratio no cache / 2nd, the entries
and bytes written, and whether the solutions are equal.  ``N`` rounds (default 2, 1 with
``--fast``) alternate the cases; the best of each is kept.  Table + JSON
(``benchmarks/results/compile_cache.json``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from common import fast_mode, fresh_process, print_table, timer, write_json

CASES = [("quadrotor", "ILQR"), ("quadrotor", "DDP"), ("attitude N=40", "ILQR")]
CASES += [("attitude N=40", "DDP")]
MODES = ("no cache", "cache, 1st", "cache, 2nd")


def _child(case, solver_name, cache_dir):
    clock = timer()
    import collections

    import jax

    jax.config.update("jax_enable_x64", True)
    import geomjax as gj

    if cache_dir:
        gj.configure(compilation_cache=cache_dir)
    from geomjax.control.examples import attitude_problem, quadrotor_problem
    from geomjax.control.trajopt import DDP, ILQR, solve_ocp

    events = collections.defaultdict(float)
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, secs, **kw: events.__setitem__(name, events[name] + secs)
    )
    t_import = clock.lap()
    if case == "quadrotor":
        prob, max_iters, tol = quadrotor_problem(), 100, 1e-9
    else:
        steps = int(case.split("N=")[1])
        prob = attitude_problem(
            torque_max=0.2, exact_target=False, steps=steps, method=gj.RKMK4(), weight=100.0
        )
        max_iters, tol = 200, None
    solver = {"ILQR": ILQR, "DDP": DDP}[solver_name](tol=tol)
    sol = solve_ocp(prob, solver, max_iters=max_iters, progress=False)
    jax.block_until_ready(sol.controls)
    first = clock.lap()

    def ev(suffix):
        return sum(v for k, v in events.items() if k.endswith(suffix))

    return dict(
        import_s=t_import,
        first_s=first,
        trace_s=ev("jaxpr_trace_duration"),
        lower_s=ev("jaxpr_to_mlir_module_duration"),
        compile_or_load_s=ev("backend_compile_duration"),
        load_s=ev("cache_retrieval_time_sec"),
        status=sol.stop_reason,
        iterations=int(sol.iterations),
        cost=float(sol.cost),
        controls=[float(v) for v in sol.controls.ravel()],
    )


def _run_child(case, solver, cache_dir):
    args = ["--child", case, solver, cache_dir or ""]
    env = {"GEOMJAX_COMPILATION_CACHE": None}
    return fresh_process(Path(__file__).resolve(), args, env=env)


def _load():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def main():
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        case, solver, cache_dir = sys.argv[i + 1 : i + 4]
        print(json.dumps(_child(case, solver, cache_dir or None)))
        return
    fast = fast_mode()
    rounds = 1 if fast else 2
    if "--rounds" in sys.argv:
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1])
    best: dict = {}
    for _ in range(rounds):
        for case, solver in CASES:
            tmp = tempfile.mkdtemp(prefix="geomjax-cache-")
            try:
                runs = {}
                for mode in MODES:
                    load = _load()
                    r = _run_child(case, solver, None if mode == "no cache" else tmp)
                    r["load_avg"] = load
                    if mode == "cache, 1st":
                        files = [p for p in Path(tmp).iterdir() if p.is_file()]
                        r["entries"] = len(files)
                        r["bytes"] = sum(p.stat().st_size for p in files)
                    runs[mode] = r
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            for mode, r in runs.items():
                key = (case, solver, mode)
                if key not in best or r["first_s"] < best[key]["first_s"]:
                    best[key] = r
            same = runs["no cache"]["controls"] == runs["cache, 2nd"]["controls"]
            best[(case, solver, "same")] = best.get((case, solver, "same"), True) and same
    rows = []
    for case, solver in CASES:
        ratio = (
            best[(case, solver, "no cache")]["first_s"]
            / best[(case, solver, "cache, 2nd")]["first_s"]
        )
        for mode in MODES:
            r = best[(case, solver, mode)]
            rows.append(
                dict(
                    problem=case,
                    solver=solver,
                    process=mode,
                    first_result_s=r["first_s"],
                    trace_s=r["trace_s"],
                    lower_s=r["lower_s"],
                    compile_or_load_s=r["compile_or_load_s"],
                    iterations=r["iterations"],
                    kbytes=r["bytes"] / 1e3 if "bytes" in r else None,
                    no_cache_over_2nd=ratio if mode == "cache, 2nd" else None,
                    same_controls=best[(case, solver, "same")] if mode == "cache, 2nd" else None,
                    load_avg=r["load_avg"],
                )
            )
    cols = ["problem", "solver", "process", "first_result_s", "trace_s", "lower_s"]
    cols += ["compile_or_load_s", "iterations", "kbytes", "no_cache_over_2nd"]
    cols += ["same_controls", "load_avg"]
    print_table(rows, cols, "time to the first solve in a fresh process (s), best of rounds")
    write_json(
        "compile_cache",
        {
            "rounds": rounds,
            "load_average": list(os.getloadavg()),
            "rows": rows,
            "details": {
                f"{c}, {s}, {m}": {
                    k: best[(c, s, m)].get(k) for k in ("import_s", "load_s", "entries", "status")
                }
                for c, s in CASES
                for m in MODES
            },
        },
    )


if __name__ == "__main__":
    main()

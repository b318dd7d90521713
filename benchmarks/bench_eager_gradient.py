"""An eager ``jax.grad`` through ``simulate`` against the same gradient compiled by
``geomjax.jit``: what a user who differentiates without writing ``jit`` pays.

    python benchmarks/bench_eager_gradient.py [--fast] [--rounds N]   (or: geomjax bench eager-gradient)

Each configuration is a fresh child process (XLA reads its flags once per process), alternated
``N`` times (default 3, 1 with ``--fast``), best time of each kept:

* ``per program`` (the default): an eager ``jax.grad`` runs ``simulate``'s forward and
  backward passes as two top-level programs with XLA:CPU's small-loop threshold raised for them
  (``geomjax._internal.eager._EagerVJP``); the reversible adjoint's backward pass is one such
  program;
* ``XLA defaults`` (``GEOMJAX_XLA_FLAGS=0``): the same routes, compiled with XLA's defaults;
* ``XLA_FLAGS opt-in`` (``GEOMJAX_XLA_FLAGS=1``): the threshold for the whole process.

Cases (LGVI, float64, free body, moments 1, 2, 3, dt 0.01, 1e4 steps, 1e3 with ``--fast``):
the gradient of a quadratic loss of the final momentum with respect to the initial momentum,
eagerly (``jax.grad(loss)(pi)``) and compiled (``geomjax.jit(jax.grad(loss))``), in plain
reverse mode and with ``adjoint=ReversibleAdjoint()``.  Columns: ms per gradient (median of
calls after two warm-up calls, which compile), and eager / compiled.
"""

from __future__ import annotations

import json
import os
import sys

from common import (
    child_or_parent,
    machine_info,
    measure,
    print_table,
    run_child_json,
    timer,
    write_json,
)

CONFIGS = {
    "per program": {},
    "XLA defaults": {"GEOMJAX_XLA_FLAGS": "0"},
    "XLA_FLAGS opt-in": {"GEOMJAX_XLA_FLAGS": "1"},
}


def child(fast):
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import geomjax as gj

    steps = 1000 if fast else 10_000
    body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
    pi0 = jnp.array([0.8, -0.3, 1.1])
    rows = []
    for adjoint in ("plain reverse", "ReversibleAdjoint"):
        kw = {"adjoint": gj.ReversibleAdjoint()} if adjoint == "ReversibleAdjoint" else {}

        def loss(pi, kw=kw):
            sol = gj.simulate(
                body, gj.LGVI(), gj.RigidBodyState(R0, pi), 0.01, steps, save_every=100, **kw
            )
            return jnp.sum(sol.final_state.Pi**2)

        for how, f in (("eager", jax.grad(loss)), ("geomjax.jit", gj.jit(jax.grad(loss)))):
            jax.block_until_ready(f(pi0))  # compiles (and measure's first call, a second one)
            timing = measure(f, pi0, repeats=7)
            rows.append({"adjoint": adjoint, "how": how, "ms": 1e3 * timing.run_s})
    print(json.dumps({"rows": rows}))


def main(argv=None):
    fast, rounds = child_or_parent(sys.argv[1:] if argv is None else argv, child)
    if rounds is None:
        return
    total = timer()
    best: dict = {}
    drop = ("XLA_FLAGS", "GEOMJAX_XLA_FLAGS", "GEOMJAX_NEWTON_UNROLL")
    for _ in range(rounds):
        for label, extra in CONFIGS.items():
            for row in run_child_json(__file__, fast, drop, extra)["rows"]:
                key = (label, row["adjoint"], row["how"])
                best[key] = min(best.get(key, float("inf")), row["ms"])
    rows = []
    for label in CONFIGS:
        for adjoint in ("plain reverse", "ReversibleAdjoint"):
            eager, compiled = best[(label, adjoint, "eager")], best[(label, adjoint, "geomjax.jit")]
            rows.append(
                {
                    "configuration": label,
                    "adjoint": adjoint,
                    "eager jax.grad ms": eager,
                    "geomjax.jit(jax.grad) ms": compiled,
                    "eager / compiled": eager / compiled,
                }
            )
    print_table(rows, list(rows[0]), title="an eager gradient through simulate (ms per gradient)")
    write_json(
        "eager_gradient",
        {
            "fast": fast,
            "rounds": rounds,
            "steps": 1000 if fast else 10_000,
            "rows": rows,
            "wall_s": total.elapsed,
            "load_average": list(os.getloadavg()),
            "machine": machine_info(),
        },
    )


if __name__ == "__main__":
    main()

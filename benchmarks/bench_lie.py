"""Batched Lie group operations: geomjax vs jax.scipy.linalg.expm (and jaxlie when installed).

    python benchmarks/bench_lie.py [--fast]      (or: geomjax bench lie)

For a batch of N = 1e5 elements (1e4 with --fast), times exp, log, compose and Ad on SO(3) and
SE(3) in float64 and float32.  Compile time is reported separately from the run time (median).
Ratios are relative to geomjax (ratio > 1: the other implementation is slower).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from common import fast_mode, print_table, time_jitted, write_json

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402

try:
    import jaxlie
except ImportError:  # optional baseline
    jaxlie = None


def _jaxlie_ops(name):
    if jaxlie is None:
        return {}
    if name == "SO3":
        G = jaxlie.SO3
        to = lambda R: G.from_matrix(R)  # noqa: E731
        return {
            "exp": lambda xi: G.exp(xi).as_matrix(),
            "log": lambda R: to(R).log(),
            "compose": lambda R1, R2: (to(R1) @ to(R2)).as_matrix(),
            "Ad": lambda R: to(R).adjoint(),
        }
    G = jaxlie.SE3
    # jaxlie orders twists (v, omega); permute so that every implementation computes the same map
    perm = np.array([3, 4, 5, 0, 1, 2])
    to = lambda T: G.from_matrix(T)  # noqa: E731
    return {
        "exp": lambda xi: G.exp(xi[..., perm]).as_matrix(),
        "log": lambda T: to(T).log()[..., perm],
        "compose": lambda T1, T2: (to(T1) @ to(T2)).as_matrix(),
        "Ad": lambda T: to(T).adjoint()[..., perm[:, None], perm[None, :]],
    }


def main():
    fast = fast_mode()
    N = 10_000 if fast else 100_000
    rows = []
    for dtype in (jnp.float64, jnp.float32):
        for G in (gj.SO3, gj.SE3):
            xi = jnp.asarray(np.random.default_rng(0).standard_normal((N, G.dim)), dtype)
            g = G.exp(xi)
            h = G.exp(0.5 * xi[::-1])
            impls = {
                "geomjax": {
                    "exp": G.exp,
                    "log": G.log,
                    "compose": G.compose,
                    "Ad": G.Ad,
                },
                "jax.scipy expm": {"exp": lambda x, G=G: jax.scipy.linalg.expm(G.hat(x))},
                "jaxlie": _jaxlie_ops(G.name),
            }
            args = {"exp": (xi,), "log": (g,), "compose": (g, h), "Ad": (g,)}
            for op in ("exp", "log", "compose", "Ad"):
                base = None
                for impl, ops in impls.items():
                    if op not in ops:
                        continue
                    c, r = time_jitted(ops[op], *args[op], repeats=5 if fast else 10)
                    if impl == "geomjax":
                        base = r
                        ref = ops[op](*args[op])
                        err = 0.0
                    else:
                        err = float(jnp.max(jnp.abs(ops[op](*args[op]) - ref)))
                    rows.append(
                        {
                            "group": G.name,
                            "dtype": jnp.dtype(dtype).name,
                            "op": op,
                            "impl": impl,
                            "N": N,
                            "compile_s": c,
                            "run_ms": r * 1e3,
                            "Melem_per_s": N / r / 1e6,
                            "ratio_vs_geomjax": r / base,
                            "max_abs_diff": err,
                        }
                    )
    cols = [
        "group",
        "dtype",
        "op",
        "impl",
        "compile_s",
        "run_ms",
        "Melem_per_s",
        "ratio_vs_geomjax",
        "max_abs_diff",
    ]
    print_table(
        rows, cols, title=f"Batched Lie group operations, N = {N} (ratio > 1: slower than geomjax)"
    )
    write_json("lie", {"N": N, "rows": rows})


if __name__ == "__main__":
    main()

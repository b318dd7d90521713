"""Scalarized against array evaluation of the implicit steps (``geomjax._internal.scalarize``).

Every method that solves a small nonlinear system per step — ``NonholonomicVI``, the LGVI on
groups other than the hand-written SO(3) Cayley kernel, DEL and RATTLE, the reconstruction LGVI —
runs with ``scalarize=True`` (default) and ``scalarize=False`` (the array form) in the same run,
unbatched and under ``jax.vmap``: ns per body-step (best of interleaved passes), their ratio,
compile times (reported separately), and the largest difference of the final states (the two
forms compute the same primitives; round-off).

    python benchmarks/bench_scalarize.py [--fast] [--only SUBSTRING]
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
from common import (
    double_pendulum_lagrangian,
    fast_mode,
    machine_info,
    print_table,
    time_jitted,
    timer,
    write_json,
)

import geomjax as gj
from geomjax.reconstruction import MomentumLGVI, Reconstruction
from geomjax.reconstruction.examples import gyrostat

jax.config.update("jax_enable_x64", True)

G0 = 9.81


def _cases():
    """(name, system, method factory ``scalarize -> method``, state0, dt)."""
    sleigh = gj.ChaplyginSleigh(1.3, 0.4, 0.25)
    yield (
        "sleigh, NonholonomicVI",
        sleigh,
        lambda sc: gj.NonholonomicVI(scalarize=sc),
        sleigh.state(0.0, 0.0, 0.3, omega=1.5, v=-0.4),
        1e-3,
    )
    ball = gj.BallOnTurntable(mass=1.0, radius=0.5, table_rate=0.8)
    yield (
        "ball on turntable, NonholonomicVI",
        ball,
        lambda sc: gj.NonholonomicVI(scalarize=sc),
        ball.state(x=(1.0, 0.3), omega=(0.4, -0.2, 0.7)),
        1e-3,
    )
    disk = gj.RollingDisk()
    yield (
        "rolling disk, NonholonomicVI",
        disk,
        lambda sc: gj.NonholonomicVI(scalarize=sc),
        disk.state(theta=0.4, phi_dot=1.0, psi_dot=2.0),
        1e-3,
    )
    body = gj.RigidBodySE3(
        mass=2.0,
        inertia=jnp.diag(jnp.array([1.0, 2.0, 3.0])),
        com=jnp.array([0.1, 0.0, -0.2]),
        potential=lambda g: G0 * 2.0 * g[2, 3],
    )
    yield (
        "SE(3) body + gravity, LGVI",
        body,
        lambda sc: gj.LGVI(scalarize=sc),
        body.make_state(
            gj.SE3.exp(jnp.array([0.1, 0.2, -0.3, 0.5, 0.1, 0.0])),
            jnp.array([0.3, -0.5, 1.0, 0.2, 0.1, -0.4]),
        ),
        1e-2,
    )
    rb = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    yield (
        "SO(3) free body, LGVI(retraction='exp')",
        rb,
        lambda sc: gj.LGVI(retraction="exp", scalarize=sc),
        rb.make_state(gj.SO3.exp(jnp.array([0.3, -0.2, 0.1])), jnp.array([0.5, 1.5, -0.7])),
        1e-2,
    )

    pend = gj.LagrangianSystem(double_pendulum_lagrangian, dim=2)
    yield (
        "double pendulum, DiscreteEulerLagrange",
        pend,
        lambda sc: gj.DiscreteEulerLagrange(scalarize=sc),
        pend.make_state(jnp.array([0.6, -0.4]), jnp.array([0.3, 1.1])),
        1e-2,
    )
    cart = gj.LagrangianSystem(
        metric=jnp.diag(jnp.array([1.0, 1.0, 1.0, 2.0, 2.0, 2.0])),
        potential=lambda q: G0 * (q[2] + 2.0 * q[5]),
    )

    def constraint(q):
        d = q[3:] - q[:3]
        return 0.5 * jnp.array([q[:3] @ q[:3] - 1.0, d @ d - 0.64])

    q0 = jnp.array([0.0, 0.6, -0.8, 0.0, 0.6 + 0.8 * 0.6, -0.8 - 0.8 * 0.8])
    yield (
        "double spherical pendulum, RATTLE",
        cart,
        lambda sc: gj.RATTLE(constraint, scalarize=sc),
        gj.RATTLE(constraint).make_state(
            cart, q0, jnp.array([0.5, 0.0, 0.0, -0.3, 0.4, 0.1]), project=True
        ),
        1e-2,
    )
    rec = Reconstruction(
        gyrostat(
            inertia=(1.0, 1.6, 2.2),
            rotor_axes=((1.0, 0.0, 0.0), (0.0, 0.6, 0.8)),
            rotor_inertias=(0.3, 0.2),
        ),
        lambda t: jnp.stack([1.5 * jnp.sin(t) + t, 0.8 * jnp.cos(1.3 * t)]),
    )
    yield (
        "gyrostat reconstruction, MomentumLGVI",
        rec,
        lambda sc: MomentumLGVI(scalarize=sc),
        rec.state(
            gj.SO3.exp(jnp.array([0.2, -0.1, 0.3])), jnp.array([0.4, -0.7, 1.1]), spatial=True
        ),
        1e-2,
    )


def _only():
    """``--only SUBSTRING``: the cases whose name contains it (all by default)."""
    args = sys.argv[1:]
    if "--only" in args:
        i = args.index("--only")
        if i + 1 >= len(args):
            raise SystemExit("bench_scalarize: --only needs a case name (substring)")
        return args[i + 1]
    return None


def run(fast):
    steps = 200 if fast else 2000
    batches = (1, 64) if fast else (1, 1024)
    rows = []
    only = _only()
    for name, system, make, s0, dt in _cases():
        if only and only not in name:
            continue
        fns = {}
        for sc in (True, False):

            def sim(s, method=make(sc), system=system):
                return gj.simulate(
                    system, method, s, dt, steps, save_every=steps, check_inputs=False
                ).final_state

            fns[sc] = sim
        for B in batches:
            st = s0
            f = dict(fns)
            if B > 1:
                f = {k: jax.vmap(v) for k, v in f.items()}
                st = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (B, *x.shape)), s0)
            out = {}
            for _ in range(2):  # interleaved passes, best of each (unpinned CPU timings vary)
                for sc, fn in f.items():
                    c, r = time_jitted(
                        fn, st, repeats=3 if fast else 5, min_time=0.2 if fast else 0.6
                    )
                    c0, r0 = out.get(sc, (c, r))
                    out[sc] = (c0, min(r, r0))
            rows.append(
                {
                    "case": name,
                    "batch": B,
                    "array_ns_per_body_step": out[False][1] / steps / B * 1e9,
                    "scalar_ns_per_body_step": out[True][1] / steps / B * 1e9,
                    "speedup": out[False][1] / out[True][1],
                    "array_compile_s": out[False][0],
                    "scalar_compile_s": out[True][0],
                }
            )
        # after timing, so that the compile times above are those of real first calls
        a, b = jax.jit(fns[False])(s0), jax.jit(fns[True])(s0)
        diff = max(
            float(np.max(np.abs(np.asarray(x) - np.asarray(y)) / (1.0 + np.abs(np.asarray(x)))))
            for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
            if np.size(x)  # some states carry empty fields (no multipliers, no rotors)
        )
        for row in rows[-len(batches) :]:
            row["max_rel_diff"] = diff
            print(row, flush=True)
    return rows


COLUMNS = [
    "case",
    "batch",
    "array_ns_per_body_step",
    "scalar_ns_per_body_step",
    "speedup",
    "array_compile_s",
    "scalar_compile_s",
    "max_rel_diff",
]


def main():
    fast = fast_mode()
    total = timer()
    rows = run(fast)
    print_table(rows, COLUMNS, title="scalarized vs array evaluation of the implicit steps")
    path = write_json(
        "scalarize", {"fast": fast, "rows": rows, "machine": machine_info(), "dtype": "float64"}
    )
    print(f"\nwrote {path} ({total.elapsed:.0f} s)")


if __name__ == "__main__":
    main()

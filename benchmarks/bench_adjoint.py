"""Gradients through long runs: plain reverse mode vs ``checkpoint=True`` vs
``adjoint=ReversibleAdjoint()`` (time and memory against the number of steps), a bare-scan RK4
gradient of the same problem, batch-1024 gradients against the forward run (with respect to the
batched initial momenta and the shared, unbatched inertia, or the momenta only), the
reconstruction error of the initial state and the gradient's error against plain reverse mode
(regular and chaotic motion, with and without re-anchoring at saved states).

    python benchmarks/bench_adjoint.py [--fast]     (or: geomjax bench adjoint)

Problem: free rigid body I = (1, 2, 3), dt = 0.01, LGVI (Cayley), float64; loss = a fixed linear
functional of the final (R, Pi); gradient with respect to Pi0 and the principal moments.
Memory: XLA's buffer assignment of the compiled gradient (``memory_analysis().temp_size_in_bytes``:
the scratch memory the computation needs besides its inputs and outputs), the figure that
grows with the trajectory stored for reverse mode.  Time: every function of a table compiled
first (compile time reported separately), then timed in interleaved rounds, median round kept
(the machine is shared: the ratios of one table see the same load).
"""

from __future__ import annotations

import math
import sys

import jax
import jax.numpy as jnp
from common import CLOCKS, compile_timed, fast_mode, print_table, save_figure, write_json
from common import measure_side_by_side as side_by_side

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402
from geomjax.integrators import reconstruction_error  # noqa: E402
from geomjax.systems import HeavyTop  # noqa: E402

DT = 0.01
R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
PI0 = jnp.array([0.8, -0.3, 1.1])
MOMENTS = jnp.array([1.0, 2.0, 3.0])
W_R = jnp.arange(9.0).reshape(3, 3) / 9.0
W_PI = jnp.array([0.3, -1.0, 0.7])


def _near_sqrt_divisor(n):
    divs = [d for d in range(1, n + 1) if n % d == 0]
    return min(divs, key=lambda d: abs(math.log(d) - 0.5 * math.log(n)))


def lgvi_loss(steps, mode, method=None):
    method = gj.LGVI() if method is None else method

    def loss(pi0, moments):
        kw = {}
        if mode == "checkpoint":
            kw = {"save_every": _near_sqrt_divisor(steps), "checkpoint": True}
        elif mode == "reversible":
            kw = {"save_every": steps, "adjoint": gj.ReversibleAdjoint()}
        else:
            kw = {"save_every": steps}
        r0 = R0.astype(pi0.dtype)  # the state's dtype sets the precision of the run
        sol = gj.simulate(
            gj.RigidBody(moments), method, gj.RigidBodyState(r0, pi0), DT, steps, **kw
        )
        s = sol.final_state
        return jnp.sum(W_R * s.R) + jnp.sum(W_PI * s.Pi)

    return loss


def rk4_loss(steps):
    """The same problem in a bare lax.scan: classical RK4 on y = (R, Pi) in R^12."""

    def rhs(y, moments):
        R, Pi = y[:9].reshape(3, 3), y[9:]
        Om = Pi / moments
        return jnp.concatenate([(R @ gj.SO3.hat(Om)).reshape(9), jnp.cross(Pi, Om)])

    def loss(pi0, moments):
        def step(y, _):
            k1 = rhs(y, moments)
            k2 = rhs(y + 0.5 * DT * k1, moments)
            k3 = rhs(y + 0.5 * DT * k2, moments)
            k4 = rhs(y + DT * k3, moments)
            return y + DT / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

        y, _ = jax.lax.scan(step, jnp.concatenate([R0.reshape(9), pi0]), None, length=steps)
        return jnp.sum(W_R.reshape(9) * y[:9]) + jnp.sum(W_PI * y[9:])

    return loss


def measure(fn, *args, fast):
    """(compile s, run s, temp bytes) of ``jax.jit(fn)`` alone (see :func:`measure_side_by_side`)."""
    return measure_side_by_side({"f": fn}, *args, fast=fast)["f"]


def measure_side_by_side(fns, *args, fast, rounds=None, jit=None, clock=CLOCKS["wall"]):
    """``{name: (compile s, run s, temp bytes)}``: every function compiled first (by ``jit``,
    default ``jax.jit``; e.g. ``geomjax.jit``), then timed in interleaved rounds (each round
    runs every function once, a calibrated number of times; ``common.measure_side_by_side``)
    and the median round kept, so that the ratios of one table see the same machine load (the
    machine is shared).  ``clock``: one of ``common.CLOCKS``."""
    out, compiled = {}, {}
    for name, fn in fns.items():
        c, compile_s = compile_timed(fn, *args, jit=jit, clock=clock)
        mem = getattr(c, "compiled", c).memory_analysis()  # (equinox wraps jax's Compiled)
        compiled[name] = c
        out[name] = (compile_s, None if mem is None else int(mem.temp_size_in_bytes))
    rounds = rounds or (3 if fast else 7)
    block = 0.05 if fast else 0.2  # seconds per timed block of calls
    res = side_by_side(compiled, *args, rounds=rounds, min_time=block * rounds, clock=clock)
    return {name: (c, res[name].run_s, temp) for name, (c, temp) in out.items()}


def batch_rows(table, body_steps, name_key="method", **labels):
    """Rows of a :func:`measure_side_by_side` table with a ``"forward"`` entry: ns per body-step
    and the ratio to the forward run (same run)."""
    return [
        {
            **labels,
            name_key: name,
            "compile s": c,
            "ns/body-step": r / body_steps * 1e9,
            "temp MiB": None if temp is None else temp / 2**20,
            "/forward": r / table["forward"][1],
        }
        for name, (c, r, temp) in table.items()
    ]


def temp_bytes(fn, *args):
    """XLA temp memory of the compiled ``fn`` (compile only: no run needed)."""
    mem = jax.jit(fn).lower(*args).compile().memory_analysis()
    return None if mem is None else int(mem.temp_size_in_bytes)


def grad_rel_error(loss, ref_loss, *args):
    """max |g - g_ref| / max |g_ref| over the gradient leaves."""
    g = jax.jit(jax.grad(loss, argnums=(0, 1)))(*args)
    r = jax.jit(jax.grad(ref_loss, argnums=(0, 1)))(*args)
    return max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b))) for a, b in zip(g, r))


def top_loss(steps, mode, save_every=None):
    """Heavy top (chaotic), gradient with respect to Pi0 and the principal moments."""

    def loss(pi0, moments):
        se = steps if save_every is None else save_every
        kw = {"save_every": se}
        if mode == "reversible":
            kw["adjoint"] = gj.ReversibleAdjoint()
        system = gj.RigidBody(moments, HeavyTop(1.0, 9.81, [0.3, 0.2, 0.4]))
        sol = gj.simulate(system, gj.LGVI(), system.make_state(R0, pi0), DT, steps, **kw)
        s = sol.final_state
        return jnp.sum(W_R * s.R) + jnp.sum(W_PI * s.Pi)

    return loss


def main(argv=None):
    fast = fast_mode(argv)
    sizes = (1000, 10_000) if fast else (1000, 10_000, 100_000, 1_000_000)
    rows, records = [], []
    for n in sizes:
        impls = {
            "forward (LGVI)": lambda p, m, n=n: lgvi_loss(n, "plain")(p, m),
            "plain reverse": jax.grad(lgvi_loss(n, "plain"), argnums=(0, 1)),
            "checkpoint=True": jax.grad(lgvi_loss(n, "checkpoint"), argnums=(0, 1)),
            "ReversibleAdjoint": jax.grad(lgvi_loss(n, "reversible"), argnums=(0, 1)),
            "bare-scan RK4 grad": jax.grad(rk4_loss(n), argnums=(0, 1)),
        }
        if n >= 1_000_000:  # plain reverse mode stores the trajectory: skip at 1e6 steps
            impls.pop("plain reverse")
            impls.pop("bare-scan RK4 grad")
        res = measure_side_by_side(impls, PI0, MOMENTS, fast=fast)
        for name, (c, r, temp) in res.items():
            print(f"n={n:>8d} {name:20s} compile {c:6.2f} s  run {r:.4g} s  temp {temp} B")
        rk4 = res.get("bare-scan RK4 grad")
        fwd = res["forward (LGVI)"]
        for name, (c, r, temp) in res.items():
            row = {
                "steps": n,
                "method": name,
                "compile s": c,
                "run s": r,
                "us/step": r / n * 1e6,
                "temp MiB": None if temp is None else temp / 2**20,
                "/forward": r / fwd[1],
                "/RK4 grad": None if rk4 is None else r / rk4[1],
            }
            rows.append(row)
            records.append(row)
    cols = ["steps", "method", "compile s", "run s", "us/step", "temp MiB", "/forward", "/RK4 grad"]
    print_table(
        rows,
        cols,
        title="gradient of a terminal loss, batch 1, free body, LGVI dt 0.01, float64 "
        "(interleaved, median of rounds)",
    )

    # memory against the number of steps (compile only): XLA temp buffers of the gradient
    mrows = []
    for n in (1000, 10_000, 100_000):
        for name, mode in (
            ("plain reverse", "plain"),
            ("checkpoint=True", "checkpoint"),
            ("ReversibleAdjoint", "reversible"),
        ):
            temp = temp_bytes(jax.grad(lgvi_loss(n, mode), argnums=(0, 1)), PI0, MOMENTS)
            mrows.append({"steps": n, "method": name, "temp KiB": temp / 2**10})
    print_table(mrows, ["steps", "method", "temp KiB"], title="XLA temp memory of the gradient")

    # batch 1024: gradient of the summed loss against the forward run, with respect to the
    # batched initial momenta and the shared (unbatched) principal moments, or the momenta only
    nb = 200 if fast else 1000
    batch = 1024
    pis = PI0 * (1.0 + 0.1 * jnp.sin(jnp.arange(3.0 * batch)).reshape(batch, 3))

    def batched(mode):
        loss = lgvi_loss(nb, mode)
        return lambda pis, m: jnp.sum(jax.vmap(loss, in_axes=(0, None))(pis, m))

    bres = measure_side_by_side(
        {
            "forward": batched("plain"),
            "plain reverse (Pi0, I)": jax.grad(batched("plain"), argnums=(0, 1)),
            "ReversibleAdjoint (Pi0, I)": jax.grad(batched("reversible"), argnums=(0, 1)),
            "plain reverse (Pi0)": jax.grad(batched("plain"), argnums=0),
            "ReversibleAdjoint (Pi0)": jax.grad(batched("reversible"), argnums=0),
        },
        pis,
        MOMENTS,
        fast=fast,
    )
    # float32 (what batched users run; the LGVI reorthonormalizes in float32)
    f32 = (pis.astype(jnp.float32), MOMENTS.astype(jnp.float32))
    bres32 = measure_side_by_side(
        {
            "forward": batched("plain"),
            "plain reverse (Pi0, I)": jax.grad(batched("plain"), argnums=(0, 1)),
            "ReversibleAdjoint (Pi0, I)": jax.grad(batched("reversible"), argnums=(0, 1)),
            "ReversibleAdjoint (Pi0)": jax.grad(batched("reversible"), argnums=0),
        },
        *f32,
        fast=fast,
    )
    # float32 without the per-step Björck reorthonormalization (the kernel-equal work): its
    # transpose is most of the float32 backward step (LGVI docstring, ``reorthonormalize``)
    no_reo = gj.LGVI(reorthonormalize=False)

    def batched_no_reo(mode):
        loss = lgvi_loss(nb, mode, no_reo)
        return lambda pis, m: jnp.sum(jax.vmap(loss, in_axes=(0, None))(pis, m))

    bres32n = measure_side_by_side(
        {
            "forward": batched_no_reo("plain"),
            "ReversibleAdjoint (Pi0, I)": jax.grad(batched_no_reo("reversible"), argnums=(0, 1)),
            "ReversibleAdjoint (Pi0)": jax.grad(batched_no_reo("reversible"), argnums=0),
        },
        *f32,
        fast=fast,
    )
    brows = []
    for dtype, table in (
        ("float64", bres),
        ("float32", bres32),
        ("float32, reorthonormalize=False", bres32n),
    ):
        brows += batch_rows(table, nb * batch, dtype=dtype)
    print_table(
        brows,
        ["dtype", "method", "compile s", "ns/body-step", "temp MiB", "/forward"],
        title=f"batch {batch}, {nb} steps (gradient w.r.t. the batched Pi0 and the shared I)",
    )

    # the other symmetric methods at batch 1024: the splitting, compositions (reversed stage by
    # stage), forward run and ReversibleAdjoint gradient w.r.t. the batched Pi0 and the shared I
    def batched_m(mode, method):
        loss = lgvi_loss(nb, mode, method)
        return lambda pis, m: jnp.sum(jax.vmap(loss, in_axes=(0, None))(pis, m))

    others = {
        "RigidBodySplitting": gj.RigidBodySplitting(),
        'Composition(LGVI, "suzuki4")': gj.Composition(gj.LGVI(), "suzuki4"),
        'Composition(RigidBodySplitting, "suzuki4")': gj.Composition(
            gj.RigidBodySplitting(), "suzuki4"
        ),
    }
    orows = []
    for mname, method in others.items():
        ores = measure_side_by_side(
            {
                "forward": batched_m("plain", method),
                "ReversibleAdjoint (Pi0, I)": jax.grad(
                    batched_m("reversible", method), argnums=(0, 1)
                ),
                "ReversibleAdjoint (Pi0)": jax.grad(batched_m("reversible", method), argnums=0),
            },
            pis,
            MOMENTS,
            fast=fast,
        )
        orows += batch_rows(ores, nb * batch, name_key="run", method=mname)
    print_table(
        orows,
        ["method", "run", "compile s", "ns/body-step", "/forward"],
        title=f"batch {batch}, {nb} steps, float64: other symmetric methods",
    )

    # reconstruction error of the initial state, and what it does to the gradient: regular
    # (free body) vs chaotic (heavy top) motion; re-anchoring at saved states (save_every)
    top = gj.RigidBody(MOMENTS, HeavyTop(1.0, 9.81, [0.3, 0.2, 0.4]))
    rrows = []
    for name, system in (("free body", gj.RigidBody(MOMENTS)), ("heavy top (chaotic)", top)):
        for n in sizes[:3]:
            err, _ = reconstruction_error(system, gj.LGVI(), system.make_state(R0, PI0), DT, n)
            row = {"system": name, "steps": n, "T": n * DT, "save_every": n, "error": float(err)}
            if n <= 10_000:  # gradient against plain reverse mode (stores the trajectory)
                loss = lgvi_loss if name == "free body" else top_loss
                row["grad rel. error"] = grad_rel_error(
                    loss(n, "reversible"), loss(n, "plain"), PI0, MOMENTS
                )
            rrows.append(row)
    for n, se in ((10_000, 1000), (10_000, 100)):  # re-anchored every se steps
        rrows.append(
            {
                "system": "heavy top (chaotic)",
                "steps": n,
                "T": n * DT,
                "save_every": se,
                "error": None,
                "grad rel. error": grad_rel_error(
                    top_loss(n, "reversible", se), top_loss(n, "plain"), PI0, MOMENTS
                ),
            }
        )
    print_table(
        rrows,
        ["system", "steps", "T", "save_every", "error", "grad rel. error"],
        title="reconstruction error of the initial state, and the gradient's error against "
        "plain reverse mode",
    )

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from common import RESULTS

        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        for name in ("plain reverse", "checkpoint=True", "ReversibleAdjoint", "bare-scan RK4 grad"):
            pts = [(r["steps"], r["us/step"], r["temp MiB"]) for r in rows if r["method"] == name]
            if not pts:
                continue
            ns, us, mem = zip(*pts)
            a1.loglog(ns, us, marker="o", label=name)
            a2.loglog(ns, [max(m, 1e-4) for m in mem], marker="o", label=name)
        a1.set_xlabel("steps")
        a1.set_ylabel("gradient time per step [us]")
        a2.set_xlabel("steps")
        a2.set_ylabel("XLA temp memory [MiB]")
        for a in (a1, a2):
            a.grid(True, which="both", alpha=0.3)
            a.legend(fontsize=8)
        RESULTS.mkdir(parents=True, exist_ok=True)
        save_figure(fig, RESULTS / "adjoint.png")
    except ImportError:
        pass
    write_json(
        "adjoint",
        {
            "fast": fast,
            "dtype": "float64",
            "batch1": rows,
            "memory": mrows,
            "batch1024": brows,
            "batch1024_other_methods": orows,
            "batch1024_steps": nb,
            "reconstruction": rrows,
        },
    )
    return rows, brows, rrows, mrows


if __name__ == "__main__":
    main(sys.argv[1:])

"""XLA:CPU's fusion emitters against its legacy elemental emitters, for geomjax's compiled programs.

    python benchmarks/bench_compile_options.py [--fast] [--rounds N] [--only SUBSTRING]

XLA:CPU (jaxlib 0.10) emits its fused kernels with the MLIR "fusion emitters" by default; the
per-program compiler option ``{"xla_cpu_use_fusion_emitters": False}`` selects the older
elemental IR emitters, which compile small programs 2-3x faster (geomjax's one-shot eager
programs use it, ``geomjax._internal.eager.EAGER_COMPILER_OPTIONS``).  This benchmark asks whether the
time loops (``simulate``), ``diagnostics`` and a gradient step should use it too: for every case
the same lowered program (``jax.jit(f).lower(*args)``, float64 unless stated) is compiled with
both options in one process (``Lowered.compile(compiler_options=...)``), and

* ``compile_*_s``: CPU time of the process (``time.process_time``) around ``.compile()``, the
  best of ``--rounds`` compilations (a fresh lowering each round, ``jax.clear_caches()``
  between rounds so that nothing is served from JAX's in-memory cache; the two variants
  alternate in order);
* ``run_*_ms``: wall time of one call, the best of ``--rounds`` interleaved blocks of calls
  (default / legacy / legacy / default / ...; each block lasts ~0.1 s, at least one call);
* ``run_ratio``: legacy over default (>1: the legacy emitters run slower), also as the median
  of the per-round ratios (``run_ratio_med``; each round compares blocks run back to back);
  ``run_cpu_ratio`` / ``run_cpu_ratio_med`` the same with the process's CPU time of the blocks
  (less disturbed than wall time on a loaded machine: a descheduled process accrues none);
* ``max_diff``: the largest absolute difference between the two programs' outputs (0:
  bitwise equal), ``rel_diff`` relative to the largest output magnitude.

Cases: the free body with the LGVI (batch 1, saving every step as the README's first
``simulate``); vmapped at batch 1024 in float64 and float32 (the batch-last carry path of
``simulate``); the heavy top; an SE(3) body with gravity; ``RigidBodySplitting``; a composition
(``Composition(LGVI(), "kahan_li8")``); the gradient of a 100-step loss (``jax.grad`` under
``jit``, the work of an ``optimize`` iteration); ``NonholonomicVI`` for the ball on a turntable;
a ``LagrangianSystem`` (double pendulum) with ``DiscreteEulerLagrange``; ``diagnostics`` of
solutions of these systems (the free body's with 1e5 states, in float64 and float32).
``--only`` keeps the cases whose name contains the string (e.g. ``--only diagnostics``).
Writes ``benchmarks/results/compile_options.json`` (``compile_options_<only>.json`` with
``--only``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import (  # noqa: E402
    CLOCKS,
    double_pendulum_lagrangian,
    fast_mode,
    print_table,
    timer,
    write_json,
)

import geomjax as gj  # noqa: E402
from geomjax.systems import HeavyTop  # noqa: E402

LEGACY = {"xla_cpu_use_fusion_emitters": False}
VARIANTS = (("default", None), ("legacy", LEGACY))
G0 = 9.81


def cases(fast: bool):
    """``(name, fn, args)``: ``fn`` is traced by ``jax.jit`` at ``args``."""
    long = 20_000 if fast else 100_000
    mid = 2_000 if fast else 10_000
    batch_steps = 200 if fast else 2_000
    dt = 0.01
    rng = np.random.default_rng(0)
    rb = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    s0 = gj.RigidBodyState(R=jnp.eye(3), Pi=jnp.array([0.02, 2.0, 0.02]))

    def final(system, method, steps, dt=dt, save_every=None):
        def f(state):
            return gj.simulate(
                system, method, state, dt, steps, save_every=save_every or steps,
                check_inputs=False,
            ).final_state  # fmt: skip

        return f

    yield (
        f"free body, LGVI, batch 1, {long} steps, save every step",
        lambda s: gj.simulate(rb, gj.LGVI(), s, dt, long, check_inputs=False),
        (s0,),
    )
    for dtype in (jnp.float64, jnp.float32):
        B = 1024
        body = gj.RigidBody(jnp.asarray([1.0, 2.0, 3.0], dtype))
        Pi = jnp.asarray(rng.standard_normal((B, 3)), dtype)
        R = jnp.broadcast_to(jnp.eye(3, dtype=dtype), (B, 3, 3))
        one = final(body, gj.LGVI(), batch_steps)
        yield (
            f"free body, LGVI, vmap batch {B}, {batch_steps} steps, {jnp.dtype(dtype).name}",
            lambda R, Pi, one=one: jax.vmap(lambda r, p: one(gj.RigidBodyState(r, p)))(R, Pi),
            (R, Pi),
        )
    top = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]), HeavyTop(1.0, G0, [0.0, 0.1, 0.4]))
    yield (
        f"heavy top, LGVI, batch 1, {long} steps",
        final(top, gj.LGVI(), long),
        (top.make_state(jnp.eye(3), jnp.array([0.3, 1.0, 2.0])),),
    )
    se3 = gj.RigidBodySE3(
        mass=2.0,
        inertia=jnp.diag(jnp.array([1.0, 2.0, 3.0])),
        com=jnp.array([0.1, 0.0, -0.2]),
        potential=lambda g: G0 * 2.0 * g[2, 3],
    )
    yield (
        f"SE(3) body + gravity, LGVI, {mid} steps",
        final(se3, gj.LGVI(), mid),
        (
            se3.make_state(
                gj.SE3.exp(jnp.array([0.1, 0.2, -0.3, 0.5, 0.1, 0.0])),
                jnp.array([0.3, -0.5, 1.0, 0.2, 0.1, -0.4]),
            ),
        ),
    )
    yield (
        f"free body, RigidBodySplitting, {long} steps",
        final(rb, gj.RigidBodySplitting(), long),
        (s0,),
    )
    yield (
        f'free body, Composition(LGVI, "kahan_li8"), {mid} steps',
        final(rb, gj.Composition(gj.LGVI(), "kahan_li8"), mid, dt=0.1),
        (s0,),
    )

    def loss(pi0):
        s = gj.simulate(top, gj.LGVI(), gj.RigidBodyState(jnp.eye(3), pi0), dt, 100)
        return jnp.sum(s.states.Pi[-1] ** 2) + jnp.mean(s.states.R[:, 2, 2])

    yield (
        "grad of a 100-step loss (heavy top, LGVI)",
        jax.grad(loss),
        (jnp.array([0.3, 1.0, 2.0]),),
    )
    ball = gj.BallOnTurntable(mass=1.0, radius=0.5, table_rate=0.8)
    yield (
        "ball on a turntable, NonholonomicVI, 2000 steps",
        final(ball, gj.NonholonomicVI(), 2000, dt=1e-3),
        (ball.state(x=(1.0, 0.3), omega=(0.4, -0.2, 0.7)),),
    )

    pend = gj.LagrangianSystem(double_pendulum_lagrangian, dim=2)
    yield (
        f"double pendulum, DiscreteEulerLagrange, {mid} steps",
        final(pend, gj.DiscreteEulerLagrange(), mid),
        (pend.make_state(jnp.array([0.6, -0.4]), jnp.array([0.3, 1.1])),),
    )

    # diagnostics: one program per system; the solution is computed once, eagerly
    def diag(system):
        return lambda states, ts: gj.diagnostics(
            system, gj.Solution(times=ts, states=states, stats={})
        )

    s032 = gj.RigidBodyState(
        R=jnp.eye(3, dtype=jnp.float32), Pi=jnp.array([0.02, 2.0, 0.02], jnp.float32)
    )
    for label, system, method, state, steps, h in (
        ("free body", rb, gj.LGVI(), s0, long, dt),
        ("free body, float32", gj.RigidBody(jnp.array([1.0, 2.0, 3.0], jnp.float32)), gj.LGVI(), s032, long, dt),
        ("heavy top", top, gj.LGVI(), top.make_state(jnp.eye(3), jnp.array([0.3, 1.0, 2.0])), mid, dt),
        ("SE(3) body", se3, gj.LGVI(), se3.make_state(
            gj.SE3.exp(jnp.array([0.1, 0.2, -0.3, 0.5, 0.1, 0.0])),
            jnp.array([0.3, -0.5, 1.0, 0.2, 0.1, -0.4]),
        ), mid, dt),
        ("ball on a turntable", ball, gj.NonholonomicVI(), ball.state(x=(1.0, 0.3), omega=(0.4, -0.2, 0.7)), mid, 1e-3),
        ("double pendulum", pend, gj.DiscreteEulerLagrange(), pend.make_state(jnp.array([0.6, -0.4]), jnp.array([0.3, 1.1])), mid, dt),
    ):  # fmt: skip
        sol = gj.simulate(system, method, state, h, steps)
        yield (
            f"diagnostics, {label}, {steps + 1} states",
            diag(system),
            (sol.states, sol.times),
        )


def compile_cpu(lowered, options):
    cpu, wall = timer(CLOCKS["cpu"]), timer()
    compiled = lowered.compile(compiler_options=options)
    return cpu.elapsed, wall.elapsed, compiled


def run_block(compiled, args, calls):
    """Seconds per call over a block of ``calls`` calls: ``(wall, CPU time of the process)``."""
    wall, cpu = timer(), timer(CLOCKS["cpu"])
    for _ in range(calls):
        out = compiled(*args)
    jax.block_until_ready(out)
    return wall.elapsed / calls, cpu.elapsed / calls


def max_diff(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    diff = max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y)), initial=0.0)) for x, y in zip(la, lb)
    )
    scale = max(float(np.max(np.abs(np.asarray(x)), initial=0.0)) for x in la)
    return diff, diff / scale if scale else diff


def measure(name, fn, args, rounds):
    compile_s = {v: [] for v, _ in VARIANTS}
    compile_wall = {v: [] for v, _ in VARIANTS}
    compiled = {}
    for r in range(rounds):
        jax.clear_caches()
        lowered = jax.jit(fn).lower(*args)
        order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
        for v, opts in order:
            s, w, c = compile_cpu(lowered, opts)
            compile_s[v].append(s)
            compile_wall[v].append(w)
            compiled.setdefault(v, c)
    outs = {v: jax.block_until_ready(compiled[v](*args)) for v, _ in VARIANTS}  # warm-up
    diff, rel = max_diff(outs["default"], outs["legacy"])
    one = min(run_block(compiled[v], args, 1)[0] for v, _ in VARIANTS)
    calls = max(1, int(0.1 / max(one, 1e-7)))
    run_s = {v: [] for v, _ in VARIANTS}
    run_cpu = {v: [] for v, _ in VARIANTS}
    ratios, cpu_ratios = [], []
    for r in range(rounds):
        order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
        got = {v: run_block(compiled[v], args, calls) for v, _ in order}
        for v, (w, c) in got.items():
            run_s[v].append(w)
            run_cpu[v].append(c)
        ratios.append(got["legacy"][0] / got["default"][0])
        cpu_ratios.append(got["legacy"][1] / got["default"][1])
    cd, cl = min(compile_s["default"]), min(compile_s["legacy"])
    rd, rl = min(run_s["default"]), min(run_s["legacy"])
    row = {
        "case": name,
        "compile_default_s": cd,
        "compile_legacy_s": cl,
        "compile_ratio": cl / cd,
        "run_default_ms": 1e3 * rd,
        "run_legacy_ms": 1e3 * rl,
        "run_ratio": rl / rd,
        "run_ratio_med": float(np.median(ratios)),
        "run_cpu_default_ms": 1e3 * min(run_cpu["default"]),
        "run_cpu_legacy_ms": 1e3 * min(run_cpu["legacy"]),
        "run_cpu_ratio": min(run_cpu["legacy"]) / min(run_cpu["default"]),
        "run_cpu_ratio_med": float(np.median(cpu_ratios)),
        "bitwise": diff == 0.0,
        "max_diff": diff,
        "rel_diff": rel,
        "compile_all_s": compile_s,
        "compile_wall_all_s": compile_wall,
        "run_all_ms": {v: [1e3 * x for x in xs] for v, xs in run_s.items()},
        "calls_per_block": calls,
    }
    print(
        f"{name}: compile {cd:.3g} -> {cl:.3g} s, run {1e3 * rd:.4g} -> {1e3 * rl:.4g} ms "
        f"(x{rl / rd:.3f}, median x{row['run_ratio_med']:.3f}; CPU time x{row['run_cpu_ratio']:.3f}, "
        f"median x{row['run_cpu_ratio_med']:.3f}), max diff {diff:.3g}",
        flush=True,
    )
    return row


def main():
    fast = fast_mode()
    argv = sys.argv[1:]
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else (3 if fast else 5)
    load0 = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    only = argv[argv.index("--only") + 1] if "--only" in argv else ""
    rows = [measure(name, fn, args, rounds) for name, fn, args in cases(fast) if only in name]
    load1 = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    cols = [
        "case",
        "compile_default_s",
        "compile_legacy_s",
        "compile_ratio",
        "run_default_ms",
        "run_legacy_ms",
        "run_ratio",
        "run_ratio_med",
        "run_cpu_ratio",
        "run_cpu_ratio_med",
        "bitwise",
        "rel_diff",
    ]
    print_table(
        rows,
        cols,
        f"XLA:CPU fusion emitters (default) vs legacy emitters ({LEGACY}); compile: process CPU "
        f"time, best of {rounds}; run: best of {rounds} interleaved blocks (wall; CPU time: run_cpu_*); ratios legacy/default; "
        f"load average before {load0}, after {load1}",
    )
    write_json(
        "compile_options" + ("_" + re.sub(r"[^A-Za-z0-9]+", "_", only).strip("_") if only else ""),
        {"fast": fast, "rounds": rounds, "options": LEGACY, "load": [load0, load1], "rows": rows},
    )


if __name__ == "__main__":
    main()

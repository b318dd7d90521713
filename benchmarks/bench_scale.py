"""Scale: large batches on any backend, sharding over devices, float32 vs float64, long gradients.

    python benchmarks/bench_scale.py [--fast] [--sections a,b,c,d]
    geomjax bench scale          (all sections)      geomjax bench gpu   (the same; `make bench-gpu`)

The batch sizes follow the backend: 1e4, 1e5, 1e6 bodies on an accelerator, scaled down on a CPU
(1e3, 1e4; --fast: 1e2, 1e3).  Results go to ``benchmarks/results/scale_<backend>.json``.

(a) throughput of the free rigid-body LGVI (vmap over the batch) in float32 and float64, with the
    Newton iterations rolled (a device loop) and unrolled (``GEOMJAX_NEWTON_UNROLL``), diffrax Tsit5
    on the same equations and device as the reference (ratio), body-steps/s and the fraction of
    the memory bandwidth reached: the step reads and writes its 12-number carry per body (15 for
    the float32 LGVI: the compensated momentum), so ``bytes/step = 2 * 12 * itemsize * batch`` at
    least, divided by the time per step and compared
    with the vendor peak (``common.PEAK_BANDWIDTH_GBS``) and a measured streaming copy;
(b) scaling of :func:`geomjax.simulate_sharded` over 1, 2, 4 devices (on a CPU: host devices,
    ``XLA_FLAGS=--xla_force_host_platform_device_count=4``, in a subprocess; on accelerators:
    the devices present);
(c) float32 vs float64: energy, spatial momentum and group defect over 1e5 LGVI steps (--fast:
    1e4), and the throughput of (a);
(d) memory of a reverse-mode gradient over 1e6 LGVI steps with ``checkpoint=True`` (--fast: 1e4),
    against plain reverse mode at sizes that fit; compiled peak scratch memory from XLA.
Compile time is always reported separately from run time.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from common import (
    RESULTS,
    compile_timed,
    compiled_memory,
    fast_mode,
    fresh_process,
    measure_copy_bandwidth,
    measure_side_by_side,
    peak_bandwidth_gbs,
    print_table,
    save_figure,
    time_jitted,
    timer,
    write_json,
)

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402

MOMENTS = np.array([1.0, 2.0, 3.0])
PI0 = np.array([0.8, -0.3, 1.1])
R0 = np.asarray(gj.SO3.exp(jnp.array([0.3, -0.2, 0.5])))
SECTIONS = ("a", "b", "c", "d")


def _accelerator() -> bool:
    return jax.default_backend() != "cpu"


def batch_sizes(fast: bool) -> tuple[int, ...]:
    if _accelerator():
        return (10_000, 100_000) if fast else (10_000, 100_000, 1_000_000)
    return (100, 1000) if fast else (1000, 10_000)


def initial_batch(B: int, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    Pi = jnp.asarray(PI0 + 0.3 * rng.standard_normal((B, 3)), dtype)
    R = jnp.broadcast_to(jnp.asarray(R0, dtype), (B, 3, 3))
    return R, Pi


def rhs(y, moments):
    """The same equations for diffrax: ``y = (R row-major, Pi)``, ``R' = R hat(Pi/I)``."""
    R = y[..., :9].reshape((*y.shape[:-1], 3, 3))
    Pi = y[..., 9:]
    Om = Pi / moments
    dR = R @ gj.SO3.hat(Om)
    return jnp.concatenate([dR.reshape((*y.shape[:-1], 9)), jnp.cross(Pi, Om)], -1)


def lgvi_batch_fn(system, dt, steps, method=None):
    method = method or gj.LGVI()

    def f(R, Pi):
        def one(r, p):
            s0 = gj.RigidBodyState(r, p)
            return gj.simulate(system, method, s0, dt, steps, save_every=steps).final_state

        return jax.vmap(one)(R, Pi)

    return f


def tsit5_batch_fn(moments, dt, steps):
    import diffrax

    term = diffrax.ODETerm(lambda t, y, args: rhs(y, moments))

    def f(y0):
        def one(y):
            return diffrax.diffeqsolve(
                term,
                diffrax.Tsit5(),
                0.0,
                steps * dt,
                dt,
                y,
                saveat=diffrax.SaveAt(t1=True),
                stepsize_controller=diffrax.ConstantStepSize(),
                max_steps=steps + 1,
            ).ys

        return jax.vmap(one)(y0)

    return f


def _with_newton(mode: str, build):
    """Trace ``build()`` under ``GEOMJAX_NEWTON_UNROLL=mode`` (read when the step is traced)."""
    old = os.environ.get("GEOMJAX_NEWTON_UNROLL")
    os.environ["GEOMJAX_NEWTON_UNROLL"] = mode
    try:
        return build()
    finally:
        if old is None:
            os.environ.pop("GEOMJAX_NEWTON_UNROLL", None)
        else:
            os.environ["GEOMJAX_NEWTON_UNROLL"] = old


def _compile(fn, args, newton=None):
    """Compile ``jax.jit(fn)`` for ``args`` (traced under a Newton loop form); ``(compiled, s)``."""

    def build():
        return compile_timed(fn, *args)

    return build() if newton is None else _with_newton(newton, build)


def _time_all(impls: dict, fast: bool, passes: int = 3) -> dict:
    """Compile every implementation once, then time them in interleaved rounds (3 per pass,
    each a block of calls of about ``min_time / 3``) and keep each one's median round: on a
    shared, loaded CPU the timings are bimodal and drift, and interleaving exposes every
    implementation to the same conditions."""
    compiled = {name: _compile(fn, a, nw) for name, (fn, a, nw) in impls.items()}
    calls = {name: (lambda c=compiled[name][0], a=a: c(*a)) for name, (_, a, _) in impls.items()}
    min_time = 0.2 if fast else 0.6  # seconds per pass
    res = measure_side_by_side(calls, rounds=3 * passes, min_time=passes * min_time)
    return {name: (compiled[name][1], res[name].run_s) for name in impls}


# ------------------------------------------------------------------------------------------
# (a) throughput


def throughput(fast: bool) -> tuple[list[dict], dict]:
    steps = (100 if fast else 200) if not _accelerator() else (200 if fast else 1000)
    dt = 0.01
    peak = peak_bandwidth_gbs()
    copy = measure_copy_bandwidth(1 << (24 if fast else 28))
    bw = {"vendor_peak_GBs": peak, "measured_copy_GBs": copy}
    try:
        import diffrax  # noqa: F401

        have_diffrax = True
    except ImportError:
        have_diffrax = False
    rows = []
    for dtype in (jnp.float32, jnp.float64):
        itemsize = jnp.dtype(dtype).itemsize
        moments = jnp.asarray(MOMENTS, dtype)
        rb = gj.RigidBody(moments)
        for B in batch_sizes(fast):
            R, Pi = initial_batch(B, dtype)
            impls = {
                "LGVI (Newton rolled)": (lgvi_batch_fn(rb, dt, steps), (R, Pi), "rolled"),
                "LGVI (Newton unrolled)": (lgvi_batch_fn(rb, dt, steps), (R, Pi), "unrolled"),
                "splitting (explicit)": (
                    lgvi_batch_fn(rb, dt, steps, gj.RigidBodySplitting()),
                    (R, Pi),
                    None,
                ),
            }
            if have_diffrax:
                y0 = jnp.concatenate([R.reshape(B, 9), Pi], -1)
                impls["diffrax Tsit5"] = (tsit5_batch_fn(moments, dt, steps), (y0,), None)
            results = _time_all(impls, fast)
            base = results.get("diffrax Tsit5", (None, None))[1]
            for name, (c, r) in results.items():
                # the LGVI's float32 carry has 15 entries (compensated momentum), 12 otherwise
                width = 15 if (itemsize == 4 and name.startswith("LGVI")) else 12
                gbs = 2 * width * itemsize * B * steps / r / 1e9
                rows.append(
                    {
                        "dtype": jnp.dtype(dtype).name,
                        "batch": B,
                        "steps": steps,
                        "method": name,
                        "compile_s": c,
                        "run_ms": r * 1e3,
                        "body_steps_per_s": B * steps / r,
                        "speedup_vs_tsit5": None if base is None else base / r,
                        "model_GBs": gbs,
                        "frac_of_peak": None if peak is None else gbs / peak,
                        "frac_of_copy": gbs / copy,
                    }
                )
    return rows, bw


# ------------------------------------------------------------------------------------------
# (b) scaling over devices


def _scaling_child(batch: int, steps: int, counts: list[int], dtype: str) -> list[dict]:
    """Time simulate_sharded over meshes of the first n devices (n in ``counts``)."""
    dt = 0.01
    rb = gj.RigidBody(jnp.asarray(MOMENTS, dtype))
    R, Pi = initial_batch(batch, dtype)
    impls = {}
    for n in counts:
        if n > jax.device_count():
            continue
        mesh = gj.integrators.batch_mesh(jax.devices()[:n])
        s0 = gj.integrators.shard_batch(gj.RigidBodyState(R, Pi), mesh)

        def f(s, mesh=mesh):
            sol = gj.simulate_sharded(rb, gj.LGVI(), s, dt, steps, save_every=steps, mesh=mesh)
            return sol.final_state

        impls[n] = (f, (s0,), None)
    rows = []
    for n, (c, r) in _time_all(impls, fast=False).items():
        rows.append(
            {
                "devices": n,
                "batch": batch,
                "dtype": dtype,
                "compile_s": c,
                "run_ms": r * 1e3,
                "body_steps_per_s": batch * steps / r,
            }
        )
    base = rows[0]["body_steps_per_s"] if rows else 1.0
    for row in rows:
        row["speedup_vs_1"] = row["body_steps_per_s"] / base
        row["efficiency"] = row["speedup_vs_1"] / row["devices"]
    return rows


def scaling(fast: bool) -> list[dict]:
    batch = batch_sizes(fast)[-1]
    steps = 100 if fast else 200
    counts = [1, 2, 4]
    if _accelerator():
        # the devices present (several GPUs); one device gives a single row
        return _scaling_child(batch, steps * 5, counts + [8], "float32")
    here = Path(__file__).resolve().parent
    env = {
        "XLA_FLAGS": (
            os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
        ).strip(),
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join([str(here.parent), str(here)]),
    }
    args = ["--scaling-child", batch, steps, "float32"]
    try:
        return fresh_process(Path(__file__).resolve(), args, env=env, timeout=1200)
    except RuntimeError as err:
        print(str(err)[-2000:])
        return []


# ------------------------------------------------------------------------------------------
# (c) float32 vs float64 accuracy


def precision(fast: bool) -> list[dict]:
    steps = 10_000 if fast else 100_000
    save_every = steps // 1000
    dt = 0.01
    rows = []
    for name, method in (("LGVI", gj.LGVI()), ("splitting", gj.RigidBodySplitting())):
        for dtype in (jnp.float32, jnp.float64):
            rb = gj.RigidBody(jnp.asarray(MOMENTS, dtype))
            s0 = gj.RigidBodyState(jnp.asarray(R0, dtype), jnp.asarray(PI0, dtype))

            def run(s0, rb=rb, method=method):
                return gj.simulate(rb, method, s0, dt, steps, save_every=save_every)

            with timer() as t:
                sol = jax.jit(run)(s0)
                jax.block_until_ready(sol)
            wall = t.s
            # errors measured in float64 from the saved states (the run's own dtype)
            R = np.asarray(sol.states.R, np.float64)
            Pi = np.asarray(sol.states.Pi, np.float64)
            E = 0.5 * np.sum(Pi**2 / MOMENTS, -1)
            m = np.einsum("nij,nj->ni", R, Pi)
            defect = np.linalg.norm(
                np.einsum("nji,njk->nik", R, R) - np.eye(3), axis=(-2, -1), ord="fro"
            )
            rows.append(
                {
                    "method": name,
                    "dtype": jnp.dtype(dtype).name,
                    "steps": steps,
                    "dt": dt,
                    "max_energy_err": float(np.max(np.abs(E / E[0] - 1))),
                    "max_momentum_err": float(
                        np.max(np.linalg.norm(m - m[0], axis=-1)) / np.linalg.norm(m[0])
                    ),
                    "max_defect": float(np.max(defect)),
                    "max_residual": float(sol.max_residual),
                    "wall_s_incl_compile": wall,
                }
            )
    return rows


# ------------------------------------------------------------------------------------------
# (d) gradient memory over a long horizon


def _save_every(steps: int) -> int:
    s = int(np.sqrt(steps))
    while steps % s:
        s -= 1
    return s


def gradient_memory(fast: bool) -> list[dict]:
    rb = gj.RigidBody(jnp.asarray(MOMENTS))
    R = jnp.asarray(R0)
    long = 10_000 if fast else 1_000_000
    cases = [(1000, False), (1000, True), (10_000, False), (10_000, True)]
    if not fast:
        cases += [(100_000, False), (100_000, True), (long, True)]
    # plain reverse mode at the long horizon: compiled only (its memory), not run
    cases += [(long, None)]
    rows = []
    grads = {}
    for steps, checkpoint in cases:
        save = _save_every(steps)

        def loss(pi0, steps=steps, save=save, checkpoint=checkpoint):
            sol = gj.simulate(
                rb,
                gj.LGVI(),
                gj.RigidBodyState(R, pi0),
                0.001,
                steps,
                save_every=save,
                checkpoint=checkpoint,
            )
            # a loss on the whole saved trajectory, so that every block matters
            return jnp.mean(sol.states.Pi[:, 0] ** 2) + jnp.mean(sol.states.R[:, 0, 1])

        pi0 = jnp.asarray(PI0)
        if checkpoint is None:
            g = jax.grad(functools.partial(loss, checkpoint=False))
            mem = compiled_memory(g, pi0)
            rows.append(
                {
                    "steps": steps,
                    "save_every": save,
                    "checkpoint": "False (compiled only)",
                    **{f"peak_{k}": v for k, v in mem.items()},
                }
            )
            continue
        g = jax.grad(loss)
        c, r = time_jitted(g, pi0, repeats=1, min_time=0.0)
        mem = compiled_memory(g, pi0)
        grads[(steps, checkpoint)] = np.asarray(jax.jit(g)(pi0))
        row = {
            "steps": steps,
            "save_every": save,
            "checkpoint": checkpoint,
            "compile_s": c,
            "grad_s": r,
            "us_per_step": r / steps * 1e6,
            **{f"peak_{k}": v for k, v in mem.items()},
        }
        other = grads.get((steps, not checkpoint))
        if other is not None:
            row["grad_diff_vs_other"] = float(np.max(np.abs(grads[(steps, checkpoint)] - other)))
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------


def plot(thr, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in sorted({r["method"] for r in thr}):
        for dtype, style in (("float32", "o-"), ("float64", "s--")):
            rs = [r for r in thr if r["method"] == name and r["dtype"] == dtype]
            ax.loglog(
                [r["batch"] for r in rs],
                [r["body_steps_per_s"] for r in rs],
                style,
                label=f"{name}, {dtype}",
            )
    ax.set(
        xlabel="batch (bodies)",
        ylabel="body-steps / s",
        title=f"free rigid body on {jax.devices()[0].device_kind}",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path)


def _sections(argv) -> tuple[str, ...]:
    for i, a in enumerate(argv):
        if a == "--sections" and i + 1 < len(argv):
            return tuple(s.strip() for s in argv[i + 1].split(",") if s.strip())
    return SECTIONS


def main():
    argv = sys.argv[1:]
    if argv[:1] == ["--scaling-child"]:
        batch, steps, dtype = int(argv[1]), int(argv[2]), argv[3]
        print(json.dumps(_scaling_child(batch, steps, [1, 2, 4], dtype)))  # the last line
        return
    fast = fast_mode()
    sections = _sections(argv)
    total = timer()
    device = jax.devices()[0].device_kind
    payload = {"fast": fast, "sections": list(sections), "batches": list(batch_sizes(fast))}
    print(f"backend {jax.default_backend()}, device {device}, {jax.device_count()} device(s)")
    if "a" in sections:
        thr, bw = throughput(fast)
        print(f"memory bandwidth: vendor peak {bw['vendor_peak_GBs']} GB/s, measured copy ", end="")
        print(f"{bw['measured_copy_GBs']:.3g} GB/s")
        print_table(
            thr,
            [
                "dtype",
                "batch",
                "method",
                "compile_s",
                "run_ms",
                "body_steps_per_s",
                "speedup_vs_tsit5",
                "model_GBs",
                "frac_of_peak",
                "frac_of_copy",
            ],
            title=f"(a) throughput on {device} (vmap over the batch, dt = 0.01)",
        )
        payload.update(throughput=thr, bandwidth=bw)
        RESULTS.mkdir(parents=True, exist_ok=True)
        plot(thr, RESULTS / f"scale_{jax.default_backend()}_throughput.png")
    if "b" in sections:
        sc = scaling(fast)
        print_table(
            sc,
            [
                "devices",
                "batch",
                "dtype",
                "compile_s",
                "run_ms",
                "body_steps_per_s",
                "speedup_vs_1",
                "efficiency",
            ],
            title="(b) simulate_sharded over 1, 2, 4 devices (LGVI, float32)",
        )
        payload["scaling"] = sc
    if "c" in sections:
        prec = precision(fast)
        print_table(
            prec,
            [
                "method",
                "dtype",
                "steps",
                "max_energy_err",
                "max_momentum_err",
                "max_defect",
                "max_residual",
                "wall_s_incl_compile",
            ],
            title="(c) float32 vs float64, free rigid body, dt = 0.01",
        )
        payload["precision"] = prec
    if "d" in sections:
        mem = gradient_memory(fast)
        print_table(
            mem,
            [
                "steps",
                "save_every",
                "checkpoint",
                "compile_s",
                "grad_s",
                "us_per_step",
                "peak_temp_MB",
                "grad_diff_vs_other",
            ],
            title="(d) reverse-mode gradient over a long LGVI run (float64, batch 1)",
        )
        payload["gradient_memory"] = mem
    payload["wall_s"] = total.elapsed
    subset = "" if set(sections) == set(SECTIONS) else "_" + "".join(sorted(sections))
    write_json(f"scale_{jax.default_backend()}{subset}", payload)


if __name__ == "__main__":
    main()

"""Soak test (issue 8 §4): long runs that must stay sane, with a table of what was measured.

    make soak                       (or: python benchmarks/soak.py [--quick])

Not part of ``make test`` (minutes on a laptop).  Cases, float64:

* free rigid body, heavy top (LGVI), Chaplygin sleigh, rolling disk (NonholonomicVI): 1e6 steps
  each (``--quick``: 1e4), saving every 1e3.  Reported: the energy error over the whole run
  against the first 1 % (bounded, not drifting, means the ratio stays O(1)), the drift of the
  exactly conserved quantities (spatial momentum and ``|Π|`` for the free body, the vertical
  spatial momentum ``e3 · R Π`` for the heavy top: LGVI preserves them to round-off, so a
  random walk of ``~sqrt(n) eps``), the constraint violation at every saved node (NonholonomicVI
  imposes it at every node), the group defect, the largest Newton residual;
* a 1e5-step gradient (``--quick``: 1e3) of the free body's final state with respect to the
  inertia with ``checkpoint=True`` (``save_every = 250``), against central differences, and the
  temporary memory XLA allocates for it (``compiled.memory_analysis()``) next to the same gradient
  without checkpointing — the bounded-memory claim;
* save → load → continue: a run stopped half way, saved to ``.npz``, loaded and continued equals
  the uninterrupted run bitwise (free body and sleigh).

Each row says ``ok`` when the measured value is within its bound.  JSON in
``benchmarks/results/soak.json``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import print_table, write_json  # noqa: E402

import geomjax as gj  # noqa: E402
from geomjax.systems import HeavyTop  # noqa: E402

EPS = float(np.finfo(np.float64).eps)


def _row(case, quantity, value, bound, rows, note=""):
    ok = bool(np.isfinite(value) and value <= bound)
    rows.append(
        {"case": case, "quantity": quantity, "value": float(value), "bound": float(bound),
         "ok": "ok" if ok else "FAIL", "note": note}
    )  # fmt: skip
    return ok


def _energy_rows(case, E, rows):
    err = np.abs(E / E[0] - 1)
    early = err[: max(2, len(err) // 100)].max()
    _row(case, "max rel. energy error", err.max(), 1e-2, rows)
    # bounded: the whole run's error is within 10x of the first 1 % of it (no secular drift)
    _row(case, "energy error / first 1 %", err.max() / max(early, EPS), 10.0, rows)


def rigid_cases(steps, save, rows):
    I = jnp.array([0.9, 1.0, 0.4])
    free = gj.RigidBody(I)
    s0 = gj.RigidBodyState(gj.SO3.exp(jnp.array([0.4, 1.0, -0.3])), jnp.array([0.2, -0.4, 3.0]))
    t = time.perf_counter()
    sol = gj.simulate(free, gj.LGVI(), s0, 0.01, steps, save_every=save)
    jax.block_until_ready(sol)
    wall = time.perf_counter() - t
    R, Pi = np.asarray(sol.states.R), np.asarray(sol.states.Pi)
    E = 0.5 * np.sum(Pi**2 / np.asarray(I), -1)
    case = f"free body LGVI ({steps:.0e} steps, {wall:.0f} s)"
    _energy_rows(case, E, rows)
    m = np.einsum("tij,tj->ti", R, Pi)
    n = np.sqrt(steps)  # round-off random walk; bound 1e3·sqrt(n)·eps·|Π|
    _row(case, "spatial momentum drift / |Π|", np.abs(m - m[0]).max() / np.linalg.norm(m[0]),
         1e3 * n * EPS, rows)  # fmt: skip
    _row(case, "| |Π| − |Π₀| | / |Π₀|", np.abs(np.linalg.norm(Pi, axis=-1) / np.linalg.norm(Pi[0]) - 1).max(),
         1e3 * n * EPS, rows)  # fmt: skip
    _row(case, "group defect", float(jnp.max(gj.SO3.defect(sol.states.R))), 1e3 * n * EPS, rows)
    _row(case, "max Newton residual", float(sol.max_residual), 1e3 * EPS, rows)

    top = gj.RigidBody(I, potential=HeavyTop(mass=1.5, gravity=9.81, rho=[0.05, -0.02, 0.3]))
    t = time.perf_counter()
    sol = gj.simulate(top, gj.LGVI(), s0, 0.005, steps, save_every=save)
    jax.block_until_ready(sol)
    wall = time.perf_counter() - t
    case = f"heavy top LGVI ({steps:.0e} steps, {wall:.0f} s)"
    E = np.asarray(jax.vmap(top.energy)(sol.states))
    _energy_rows(case, E, rows)
    Lz = np.asarray(jnp.einsum("ti,ti->t", sol.states.R[:, 2, :], sol.states.Pi))
    _row(case, "vertical momentum drift / |Π|", np.abs(Lz - Lz[0]).max() / np.linalg.norm(s0.Pi),
         1e3 * n * EPS, rows)  # fmt: skip
    _row(case, "group defect", float(jnp.max(gj.SO3.defect(sol.states.R))), 1e3 * n * EPS, rows)
    _row(case, "max Newton residual", float(sol.max_residual), 1e3 * EPS, rows)


def nonholonomic_cases(steps, save, rows):
    sleigh = gj.ChaplyginSleigh(1.0, 0.5, 0.3)
    disk = gj.RollingDisk(mass=1.0, radius=0.5)
    cases = [
        ("Chaplygin sleigh", sleigh, sleigh.state(0.0, 0.0, 0.3, omega=1.0, v=0.5), 0.01),
        ("rolling disk", disk, disk.state(x=0.2, y=-0.1, phi=0.3, theta=0.4, psi=0.5,
                                          phi_dot=2.0, theta_dot=0.5, psi_dot=3.0), 0.002),
    ]  # fmt: skip
    for name, system, s0, dt in cases:
        t = time.perf_counter()
        sol = gj.simulate(system, gj.NonholonomicVI(), s0, dt, steps, save_every=save)
        jax.block_until_ready(sol)
        wall = time.perf_counter() - t
        case = f"{name} NonholonomicVI ({steps:.0e} steps, {wall:.0f} s)"
        E = np.asarray(jax.vmap(system.energy)(sol.states))
        _energy_rows(case, E, rows)
        viol = np.asarray(jax.vmap(system.constraint_violation)(sol.states))
        scale = 1.0 + float(jnp.max(jnp.abs(sol.states.v)))
        _row(case, "max constraint violation", np.abs(viol).max() / scale, 1e3 * EPS, rows)
        _row(case, "group defect", float(jnp.max(system.group.defect(sol.states.g))),
             1e3 * np.sqrt(steps) * EPS, rows)  # fmt: skip
        _row(case, "max Newton residual", float(sol.max_residual), 1e3 * EPS, rows)


def gradient_case(steps, rows):
    save = 250
    s0 = gj.RigidBodyState(gj.SO3.exp(jnp.array([0.4, 1.0, -0.3])), jnp.array([0.2, -0.4, 3.0]))
    target = jnp.array([0.3, -0.2, 0.9])

    def loss(moments, checkpoint):
        sol = gj.simulate(gj.RigidBody(moments), gj.LGVI(), s0, 0.01, steps, save_every=save,
                          checkpoint=checkpoint)  # fmt: skip
        fin = sol.final_state
        return jnp.dot(fin.R @ target, fin.Pi)

    I = jnp.array([0.9, 1.0, 0.6])
    mem, grads = {}, {}
    for ck in (True, False):
        f = jax.jit(jax.grad(lambda m, ck=ck: loss(m, ck)))
        compiled = f.lower(I).compile()
        ma = compiled.memory_analysis()
        mem[ck] = getattr(ma, "temp_size_in_bytes", float("nan")) if ma is not None else np.nan
        t = time.perf_counter()
        grads[ck] = np.asarray(compiled(I))
        if ck:
            wall = time.perf_counter() - t
    g = grads[True]
    f0 = jax.jit(lambda m: loss(m, False))

    def central(d):
        return np.array([(float(f0(I.at[i].add(d))) - float(f0(I.at[i].add(-d)))) / (2 * d)
                         for i in range(3)])  # fmt: skip

    # Richardson extrapolation of central differences (error O(d⁴)): over 1e5 steps the loss has
    # large third derivatives (they grow like T³), so a plain O(d²) difference is not accurate;
    # the extrapolated one is good to ~1e-6 here (measured), hence the bound 1e-4
    d = 1e-5
    fd = (4 * central(d / 2) - central(d)) / 3
    case = f"gradient, checkpoint=True ({steps:.0e} steps, {wall:.0f} s)"
    _row(case, "rel. diff. vs checkpoint=False", np.abs(g - grads[False]).max() / np.abs(g).max(),
         1e-10, rows)  # fmt: skip
    _row(case, "rel. error vs Richardson central diff.", np.abs(g - fd).max() / np.abs(fd).max(),
         1e-4, rows, note=f"|grad| = {np.abs(g).max():.3g}")  # fmt: skip
    _row(case, "XLA temp memory, checkpointed [MB]", mem[True] / 1e6, 64.0, rows,
         note=f"without checkpoint: {mem[False] / 1e6:.1f} MB")  # fmt: skip


def restart_case(steps, rows):
    half = steps // 2
    rb = gj.RigidBody(jnp.array([0.9, 1.0, 0.4]))
    sleigh = gj.ChaplyginSleigh(1.0, 0.5, 0.3)
    cases = [
        ("free body", rb, gj.LGVI(),
         gj.RigidBodyState(gj.SO3.exp(jnp.array([0.4, 1.0, -0.3])), jnp.array([0.2, -0.4, 3.0])), 0.01),
        ("sleigh", sleigh, gj.NonholonomicVI(), sleigh.state(0.0, 0.0, 0.3, omega=1.0, v=0.5), 0.01),
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name, system, method, s0, dt in cases:
            full = gj.simulate(system, method, s0, dt, steps, save_every=half)
            first = gj.simulate(system, method, s0, dt, half, save_every=half)
            path = first.save(Path(tmp) / f"{name}.npz", system=system)
            loaded, system2, _ = gj.load_solution(path, system, state_template=s0)
            cont = gj.simulate(system2, method, loaded.final_state, dt, half, save_every=half,
                               t0=loaded.ts[-1])  # fmt: skip
            a = jax.tree_util.tree_leaves(full.final_state)
            b = jax.tree_util.tree_leaves(cont.final_state)
            diff = max(
                float(np.max(np.abs(np.asarray(x) - np.asarray(y)), initial=0.0))
                for x, y in zip(a, b)
            )
            same = all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))
            _row(f"{name}: save → load → continue ({steps:.0e} steps)", "max |difference| (bitwise)",
                 diff, 0.0, rows, note="bitwise" if same else "NOT bitwise")  # fmt: skip


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    quick = "--quick" in argv
    steps, gsteps = (10_000, 1_000) if quick else (1_000_000, 100_000)
    save = 100 if quick else 1000
    rows: list[dict] = []
    t = time.perf_counter()
    sections = [
        (rigid_cases, (steps, save)),
        (nonholonomic_cases, (steps, save)),
        (gradient_case, (gsteps,)),
        (restart_case, (steps // 10,)),
    ]
    for fn, args in sections:
        try:
            fn(*args, rows)
        except Exception as e:  # keep the other sections' results
            rows.append({"case": fn.__name__, "quantity": "error", "value": None, "bound": None,
                         "ok": "FAIL", "note": f"{type(e).__name__}: {e}"[:200]})  # fmt: skip
        print(f"[soak] {fn.__name__} done at {time.perf_counter() - t:.0f} s", flush=True)
    print_table(rows, ["case", "quantity", "value", "bound", "ok", "note"],
                title=f"geomjax soak (float64, {time.perf_counter() - t:.0f} s)")  # fmt: skip
    write_json("soak", {"quick": quick, "rows": rows})
    failed = [r for r in rows if r["ok"] != "ok"]
    if failed:
        print(f"\n{len(failed)} check(s) FAILED")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

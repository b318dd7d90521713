"""Soak test: long runs that must stay sane, with a table of what was measured.

    make soak                       (or: python benchmarks/soak.py [--ci])

``make soak`` runs the full length (minutes); ``--ci`` (alias ``--quick``) the reduced one that
CI runs after the test suite (``.ci/run``).  Cases, float64:

* free rigid body, heavy top (LGVI), Chaplygin sleigh, rolling disk (NonholonomicVI): 1e6 steps
  each (``--ci``: 2e4), saving every 1e3 (``--ci``: 100).  Reported: the energy error over the
  whole run and against the first 1 % (``--ci``: 10 %; bounded, not drifting, means the ratio
  stays O(1)), the drift of the exactly conserved quantities (spatial momentum and ``|Π|`` for
  the free body, the vertical spatial momentum ``e3 · R Π`` for the heavy top: LGVI preserves
  them to round-off, so a random walk of ``~sqrt(n) eps``), the constraint violation at every
  saved node (NonholonomicVI imposes it at every node), the group defect, the largest Newton
  residual;
* a 1e5-step gradient (``--ci``: 2e3; checkpointed blocks of 250 steps, ``--ci``: 100) of the
  free body's final state with respect to the inertia with ``checkpoint=True``, against the same
  gradient without checkpointing and against Richardson-extrapolated central differences, and
  the temporary memory XLA allocates for it (``compiled.memory_analysis()``) next to the same
  gradient without checkpointing — the bounded-memory claim;
* save → load → continue: a run stopped half way, saved to ``.npz``, loaded and continued with
  the same ``save_every`` (at least two saved blocks in each part) equals the uninterrupted run
  bitwise (free body and sleigh, 1e5 steps in both modes).  This is the README's restart
  guarantee; why it needs the same ``save_every``: ``restart_case``.

Every bound comes from an error estimate stated next to it (not from one run).  Each row says
``ok`` when the measured value is within its bound; the exit status is 1 if one is not.  JSON in
``benchmarks/results/soak.json``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import print_table, timer, write_json  # noqa: E402

import geomjax as gj  # noqa: E402
from geomjax.systems import HeavyTop  # noqa: E402

# the gradient case compiles with jax.jit (for XLA's memory analysis of the compiled program):
# the small-loop setting for the whole process, before JAX's first computation, so that its
# loops run as they do under geomjax.jit (and geomjax does not warn about XLA's defaults)
gj.configure(xla_small_loops=True)

EPS = float(np.finfo(np.float64).eps)

#: Round-off bounds.  A step of these methods rounds each quantity a few dozen times (each
#: rounding ≤ eps/2 relative); quantities the method conserves exactly in exact arithmetic (the
#: momentum map, |Π|, the group defect, an imposed constraint) then random-walk: after n steps
#: ~ c sqrt(n) eps with c the roundings per step that reach them.  Bound c = 1e3 (≥ 10× the
#: roundings of a step), so ``ROUNDOFF · sqrt(n) · eps``; one solve (Newton residual, constraint
#: at a node) is not accumulated: ``ROUNDOFF · eps``, the methods' own convergence tolerance.
ROUNDOFF = 1e3


def _row(case, quantity, value, bound, rows, note=""):
    ok = bool(np.isfinite(value) and value <= bound)
    rows.append(
        {"case": case, "quantity": quantity, "value": float(value), "bound": float(bound),
         "ok": "ok" if ok else "FAIL", "note": note}
    )  # fmt: skip
    return ok


#: Fraction of the run whose energy error is compared with the whole run's (``_energy_rows``):
#: 1 % at full length, 10 % in the reduced mode (the window must span several periods of the
#: slowest oscillation of the error: the heavy top's precession, the disk's wobble)
WINDOW = {"full": 0.01, "ci": 0.1}


def _energy_rows(case, E, rows, h_omega, window):
    err = np.abs(E / E[0] - 1)
    early = err[: max(2, int(len(err) * window))].max()
    # order 2: the energy error is C (h ω)² with ω the fastest frequency of the motion; for the
    # symplectic LGVI at all times (backward error analysis: it conserves a modified energy),
    # for the reversible NonholonomicVI on these reversible systems bounded too (no modified
    # energy in general; measured C ≤ 0.5).  Bound C = 4.
    _row(case, "max rel. energy error", err.max(), 4 * h_omega**2, rows)
    # bounded, not drifting: an error growing like t gives max / (max over the first fraction f
    # of the run) ≈ 1/f, a bounded one whose period is shorter than f T gives O(1); the bound
    # is the geometric mean 1/sqrt(f) (10 for f = 1 %)
    _row(case, f"energy error / first {window:.0%}", err.max() / max(early, EPS),
         1 / np.sqrt(window), rows)  # fmt: skip


def rigid_cases(steps, save, window, rows):
    I = jnp.array([0.9, 1.0, 0.4])
    free = gj.RigidBody(I)
    s0 = gj.RigidBodyState(gj.SO3.exp(jnp.array([0.4, 1.0, -0.3])), jnp.array([0.2, -0.4, 3.0]))
    t = timer()
    sol = gj.simulate(free, gj.LGVI(), s0, 0.01, steps, save_every=save)
    jax.block_until_ready(sol)
    wall = t.elapsed
    R, Pi = np.asarray(sol.states.R), np.asarray(sol.states.Pi)
    E = 0.5 * np.sum(Pi**2 / np.asarray(I), -1)
    case = f"free body LGVI ({steps:.0e} steps, {wall:.0f} s)"
    # fastest frequency: the largest body angular velocity |Π_i / I_i| (|Π| is conserved)
    omega = float(np.linalg.norm(Pi[0]) / np.min(np.asarray(I)))
    _energy_rows(case, E, rows, 0.01 * omega, window)
    m = np.einsum("tij,tj->ti", R, Pi)
    walk = ROUNDOFF * np.sqrt(steps) * EPS  # round-off random walk (ROUNDOFF)
    _row(case, "spatial momentum drift / |Π|", np.abs(m - m[0]).max() / np.linalg.norm(m[0]),
         walk, rows)  # fmt: skip
    _row(case, "| |Π| − |Π₀| | / |Π₀|", np.abs(np.linalg.norm(Pi, axis=-1) / np.linalg.norm(Pi[0]) - 1).max(),
         walk, rows)  # fmt: skip
    _row(case, "group defect", float(jnp.max(gj.SO3.defect(sol.states.R))), walk, rows)
    _row(case, "max Newton residual", float(sol.max_residual), ROUNDOFF * EPS, rows)

    top = gj.RigidBody(I, potential=HeavyTop(mass=1.5, gravity=9.81, rho=[0.05, -0.02, 0.3]))
    t = timer()
    sol = gj.simulate(top, gj.LGVI(), s0, 0.005, steps, save_every=save)
    jax.block_until_ready(sol)
    wall = t.elapsed
    case = f"heavy top LGVI ({steps:.0e} steps, {wall:.0f} s)"
    E = np.asarray(jax.vmap(top.energy)(sol.states))
    # fastest frequency: the spin |Π|/min I, or the pendulum frequency sqrt(m g |ρ| / min I)
    omega = max(float(jnp.max(jnp.linalg.norm(sol.states.Pi, axis=-1))) / float(jnp.min(I)),
                float(np.sqrt(1.5 * 9.81 * np.linalg.norm([0.05, -0.02, 0.3]) / float(jnp.min(I)))))  # fmt: skip
    _energy_rows(case, E, rows, 0.005 * omega, window)
    Lz = np.asarray(jnp.einsum("ti,ti->t", sol.states.R[:, 2, :], sol.states.Pi))
    _row(case, "vertical momentum drift / |Π|", np.abs(Lz - Lz[0]).max() / np.linalg.norm(s0.Pi),
         walk, rows)  # fmt: skip
    _row(case, "group defect", float(jnp.max(gj.SO3.defect(sol.states.R))), walk, rows)
    _row(case, "max Newton residual", float(sol.max_residual), ROUNDOFF * EPS, rows)


def nonholonomic_cases(steps, save, window, rows):
    sleigh = gj.ChaplyginSleigh(1.0, 0.5, 0.3)
    disk = gj.RollingDisk(mass=1.0, radius=0.5)
    # fastest frequencies (energy-bounded): the sleigh's turning rate ω; the disk's rates and
    # its fall sqrt(g / r)
    cases = [
        ("Chaplygin sleigh", sleigh, sleigh.state(0.0, 0.0, 0.3, omega=1.0, v=0.5), 0.01, 1.0),
        ("rolling disk", disk, disk.state(x=0.2, y=-0.1, phi=0.3, theta=0.4, psi=0.5,
                                          phi_dot=2.0, theta_dot=0.5, psi_dot=3.0), 0.002,
         max(3.0, np.sqrt(9.81 / 0.5))),
    ]  # fmt: skip
    for name, system, s0, dt, omega in cases:
        t = timer()
        sol = gj.simulate(system, gj.NonholonomicVI(), s0, dt, steps, save_every=save)
        jax.block_until_ready(sol)
        wall = t.elapsed
        case = f"{name} NonholonomicVI ({steps:.0e} steps, {wall:.0f} s)"
        E = np.asarray(jax.vmap(system.energy)(sol.states))
        _energy_rows(case, E, rows, dt * omega, window)
        viol = np.asarray(jax.vmap(system.constraint_violation)(sol.states))
        scale = 1.0 + float(jnp.max(jnp.abs(sol.states.v)))
        # imposed at every node by the step's solve: round-off of one solve, not accumulated
        _row(case, "max constraint violation", np.abs(viol).max() / scale, ROUNDOFF * EPS, rows)
        _row(case, "group defect", float(jnp.max(system.group.defect(sol.states.g))),
             ROUNDOFF * np.sqrt(steps) * EPS, rows)  # fmt: skip
        _row(case, "max Newton residual", float(sol.max_residual), ROUNDOFF * EPS, rows)


def gradient_case(steps, save, rows):
    h = 0.01
    s0 = gj.RigidBodyState(gj.SO3.exp(jnp.array([0.4, 1.0, -0.3])), jnp.array([0.2, -0.4, 3.0]))
    target = jnp.array([0.3, -0.2, 0.9])

    def loss(moments, checkpoint):
        sol = gj.simulate(gj.RigidBody(moments), gj.LGVI(), s0, h, steps, save_every=save,
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
        t = timer()
        grads[ck] = np.asarray(compiled(I))
        if ck:
            wall = t.elapsed
    g = grads[True]
    f0 = jax.jit(lambda m: loss(m, False))

    def central(d):
        return np.array([(float(f0(I.at[i].add(d))) - float(f0(I.at[i].add(-d)))) / (2 * d)
                         for i in range(3)])  # fmt: skip

    # Richardson extrapolation of central differences (error O(d⁴)): over 1e5 steps the loss has
    # large higher derivatives (the k-th grows like (T ω)^k, T = n h, ω the spin), so a plain
    # O(d²) difference is not accurate.  Error of the extrapolated one: truncation ~ (d T ω)⁴/30
    # (d = 1e-5, T = 1e3, ω ≈ 7.5: 1e-5 relative) plus round-off eps |f| / d (~1e-11); bound 1e-4
    d = 1e-5
    fd = (4 * central(d / 2) - central(d)) / 3
    case = f"gradient, checkpoint=True ({steps:.0e} steps, {wall:.0f} s)"
    # checkpoint=True recomputes each block in the backward pass inside another compiled loop
    # nest, where XLA:CPU contracts other multiply-adds into FMAs (see restart_case): the
    # linearization points and the backward steps are rounded differently.  (With XLA's default
    # loop setting, geomjax's default, every fused kernel is compiled on its own and the two
    # gradients were bitwise equal at 2e3 and 2e4 steps, measured; the opt-in setting,
    # GEOMJAX_XLA_FLAGS=1, made them differ.)
    # Estimate: a relative difference of ~c eps per step (c roundings, ROUNDOFF) that the
    # adjoint carries over the n steps as a random walk (sqrt(n)), sheared linearly in time by
    # the integrable free body (factor ~ omega n h): ROUNDOFF eps omega h n^(3/2).  Measured
    # (2-core CPU, float64): 2.5e-14 at 2e3 steps, 9.0e-13 at 2e4, 2.2e-10 at 1e5 (bound 3.6e-7)
    omega = float(jnp.linalg.norm(s0.Pi) / jnp.min(I))
    _row(case, "rel. diff. vs checkpoint=False", np.abs(g - grads[False]).max() / np.abs(g).max(),
         ROUNDOFF * EPS * omega * h * steps**1.5, rows)  # fmt: skip
    _row(case, "rel. error vs Richardson central diff.", np.abs(g - fd).max() / np.abs(fd).max(),
         1e-4, rows, note=f"|grad| = {np.abs(g).max():.3g}")  # fmt: skip
    # memory: the checkpointed gradient keeps the n/S block-start states and one block of S
    # steps' residuals, the plain one all n steps' residuals: ratio (n/S + S)/n; bound 2x that
    # (the carry, outputs and XLA's buffer reuse differ between the two programs)
    ratio = (steps / save + save) / steps
    _row(case, "XLA temp memory, checkpointed [MB]", mem[True] / 1e6,
         2 * ratio * mem[False] / 1e6, rows,
         note=f"without checkpoint: {mem[False] / 1e6:.1f} MB; (n/S + S)/n = {ratio:.3g}")  # fmt: skip


def restart_case(steps, rows):
    """Save → load → continue equals the uninterrupted run bitwise (the README's guarantee).

    Why the same ``save_every`` and at least two saved blocks in each part: with the opt-in XLA
    setting (``GEOMJAX_XLA_FLAGS=1``, ``geomjax._internal.xla_flags``) a run's loops over blocks and steps are compiled into one LLVM
    kernel, and XLA:CPU always lets LLVM contract a multiply and an add into one FMA (one
    rounding instead of two) where it finds them in one basic block — which depends on the
    loops around the step: the outer loop of a run with a single block (or the inner one with
    ``save_every=1``) is removed by XLA, and the step compiled without it rounds differently.
    Runs with the same ``save_every`` and ≥ 2 blocks execute the same kernel (only the trip
    count and the size of the output differ), so the same roundings.  Evidence (measured, free
    body LGVI, 2e3 steps): a 1-block half differs from the 2-block run by 2.4e-15; with
    ``XLA_FLAGS=--xla_cpu_max_isa=AVX`` (no FMA instructions) every split tried (``save_every``
    1, 10, 1000; one or two blocks) is bitwise; with XLA's default threshold (geomjax's default:
    a kernel per fusion, but the inner loop of steps of ``save_every`` > 1 is one kernel there
    too) it held in every case of ``tests/integrators/test_restart.py``.

    The sleigh needed one more thing: NonholonomicVI carries a Newton seed (the acceleration)
    from step to step, and the seed recomputed from the loaded state differed from the carried
    one in the last bit (continued at step 5e4 of 1e5: 9.2e-143 at the end, measured);
    ``simulate`` now rebuilds such a carry from the state at every saved block, in the loop
    (``AbstractMethod.carry_beyond_state``).  The float32 LGVI carries a compensated momentum
    whose low part is not in the state: it continues from ``Solution.method_state``."""
    half = steps // 2
    save = steps // 10  # 10 blocks uninterrupted, 5 in each part
    rb = gj.RigidBody(jnp.array([0.9, 1.0, 0.4]))
    sleigh = gj.ChaplyginSleigh(1.0, 0.5, 0.3)
    cases = [
        ("free body", rb, gj.LGVI(),
         gj.RigidBodyState(gj.SO3.exp(jnp.array([0.4, 1.0, -0.3])), jnp.array([0.2, -0.4, 3.0])), 0.01),
        ("sleigh", sleigh, gj.NonholonomicVI(), sleigh.state(0.0, 0.0, 0.3, omega=1.0, v=0.5), 0.01),
    ]  # fmt: skip
    # float32: the LGVI's compensated momentum continues from Solution.method_state
    cases.append(("free body float32", rb, gj.LGVI(),
                  jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), cases[0][3]), 0.01))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name, system, method, s0, dt in cases:
            full = gj.simulate(system, method, s0, dt, steps, save_every=save)
            first = gj.simulate(system, method, s0, dt, half, save_every=save)
            path = first.save(Path(tmp) / f"{name}.npz", system=system)
            loaded, system2, _ = gj.load_solution(path, system, state_template=s0)
            cont = gj.simulate(system2, method, loaded.final_state, dt, half, save_every=save,
                               t0=loaded.times[-1], method_state=loaded.method_state)  # fmt: skip
            # the second half of the uninterrupted run's saved times and states against the
            # continued run's (its first entry is the loaded state itself)
            k = len(cont.times)
            a = jax.tree_util.tree_leaves(
                jax.tree_util.tree_map(lambda x: x[-k:], (full.times, full.states))
            )
            b = jax.tree_util.tree_leaves((cont.times, cont.states))
            diff = max(
                float(np.max(np.abs(np.asarray(x) - np.asarray(y)), initial=0.0))
                for x, y in zip(a, b)
            )
            same = all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))
            _row(f"{name}: save → load → continue ({steps:.0e} steps, save_every {save})",
                 "max |difference| (bitwise)", diff, 0.0, rows,
                 note="bitwise" if same else "NOT bitwise")  # fmt: skip


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    quick = "--ci" in argv or "--quick" in argv
    steps, gsteps = (20_000, 2_000) if quick else (1_000_000, 100_000)
    save = 100 if quick else 1000
    window = WINDOW["ci" if quick else "full"]
    rows: list[dict] = []
    t = timer()
    sections = [
        (rigid_cases, (steps, save, window)),
        (nonholonomic_cases, (steps, save, window)),
        (gradient_case, (gsteps, 100 if quick else 250)),
        (restart_case, (100_000,)),  # both modes: cheap to run, compile-bound
    ]
    for fn, args in sections:
        try:
            fn(*args, rows)
        except Exception as e:  # keep the other sections' results
            rows.append({"case": fn.__name__, "quantity": "error", "value": None, "bound": None,
                         "ok": "FAIL", "note": f"{type(e).__name__}: {e}"[:200]})  # fmt: skip
        print(f"[soak] {fn.__name__} done at {t.elapsed:.0f} s", flush=True)
    print_table(rows, ["case", "quantity", "value", "bound", "ok", "note"],
                title=f"geomjax soak (float64, {t.elapsed:.0f} s)")  # fmt: skip
    write_json("soak", {"quick": quick, "rows": rows})
    failed = [r for r in rows if r["ok"] != "ok"]
    if failed:
        print(f"\n{len(failed)} check(s) FAILED")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Rigid body: geomjax LGVI vs RKMK4, diffrax (Tsit5, Dopri5, Dopri8, fixed step) and SciPy.

    python benchmarks/bench_rigid_body.py [--fast] [--throughput]   (or: geomjax bench rigid-body)

``--throughput`` runs only (b), at batch 1 and 1024 with three interleaved passes, and writes
``rigid_body_throughput.json``.

(a) accuracy: energy and spatial-momentum error vs step size, and over a long horizon (plot);
(b) throughput in body-steps/s for batch 1, 1024, 8192 in float64 and float32: LGVI, the explicit
    splitting, RKMK4, diffrax Tsit5 and a bare ``lax.scan`` RK4 on the same equations (table of
    ratios to diffrax Tsit5); and the LGVI variants (free body, + potential, + controls, the
    generic-group path) against a hand-written batch-last Cayley LGVI kernel
    (:func:`lgvi_kernel_batch_last`, the same arithmetic, checked to agree to round-off) and
    against the free-body path;
(c) cost of a gradient relative to the forward pass, and compiled peak memory of a long-horizon
    gradient with and without checkpointing.
Compile time is always reported separately from run time.  Same equations, same machine, one run.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
from common import fast_mode, machine_info, print_table, save_figure, time_jitted, timer, write_json

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402
from geomjax.integrators._so3_soa import cayley_solve_scalar  # noqa: E402
from geomjax.systems import HeavyTop  # noqa: E402

try:
    import diffrax
except ImportError:  # optional baseline
    diffrax = None
try:
    import scipy.integrate as scipy_integrate
except ImportError:
    scipy_integrate = None

MOMENTS = np.array([1.0, 2.0, 3.0])
PI0 = np.array([0.8, -0.3, 1.1])
R0 = np.asarray(gj.SO3.exp(jnp.array([0.3, -0.2, 0.5])))
KERNEL = "batch-last LGVI kernel (reference)"
KERNEL_SCALAR = "batch-last LGVI kernel, scalar Legendre solve (reference)"


# ------------------------------------------------------------------------------------------
# the same equations for every baseline: y = (R row-major, Pi), R' = R hat(Pi/I), Pi' = Pi × Omega


def rhs(y, moments):
    R = y[..., :9].reshape((*y.shape[:-1], 3, 3))
    Pi = y[..., 9:]
    Om = Pi / moments
    dR = R @ gj.SO3.hat(Om)
    return jnp.concatenate([dR.reshape((*y.shape[:-1], 9)), jnp.cross(Pi, Om)], -1)


def energy(Pi, moments):
    return 0.5 * jnp.sum(Pi**2 / moments, -1)


def spatial(R, Pi):
    return jnp.einsum("...ij,...j->...i", R, Pi)


def lgvi_run(dt, steps, save_every, method=None, dtype=jnp.float64):
    rb = gj.RigidBody(jnp.asarray(MOMENTS, dtype))
    s0 = gj.RigidBodyState(jnp.asarray(R0, dtype), jnp.asarray(PI0, dtype))
    sol = gj.simulate(rb, method or gj.LGVI(), s0, dt, steps, save_every=save_every)
    return np.asarray(sol.times), np.asarray(sol.states.R), np.asarray(sol.states.Pi)


def _fixed_step(term, solver, dt, steps, y0, saveat):
    """diffrax with a constant step ``dt`` over ``steps`` steps; returns ``ys``."""
    return diffrax.diffeqsolve(
        term,
        solver,
        0.0,
        steps * dt,
        dt,
        y0,
        saveat=saveat,
        stepsize_controller=diffrax.ConstantStepSize(),
        max_steps=steps + 1,
    ).ys


def diffrax_run(solver, dt, steps, save_every):
    term = diffrax.ODETerm(lambda t, y, args: rhs(y, jnp.asarray(MOMENTS)))
    y0 = jnp.concatenate([jnp.asarray(R0).reshape(9), jnp.asarray(PI0)])
    ts = jnp.arange(0, steps + 1, save_every) * dt
    y = np.asarray(_fixed_step(term, solver, dt, steps, y0, diffrax.SaveAt(ts=ts)))
    return np.asarray(ts), y[:, :9].reshape(-1, 3, 3), y[:, 9:]


def scipy_run(method, dt, steps, save_every):
    f = jax.jit(lambda y: rhs(y, jnp.asarray(MOMENTS)))
    y0 = np.concatenate([R0.reshape(9), PI0])
    ts = np.arange(0, steps + 1, save_every) * dt
    # fixed steps: first_step = max_step = dt and tolerances so loose that no step is rejected
    sol = scipy_integrate.solve_ivp(
        lambda t, y: np.asarray(f(jnp.asarray(y))),
        (0, steps * dt),
        y0,
        method=method,
        t_eval=ts,
        first_step=dt,
        max_step=dt,
        rtol=1e10,
        atol=1e10,
    )
    y = sol.y.T
    return ts, y[:, :9].reshape(-1, 3, 3), y[:, 9:]


def errors(R, Pi):
    E = np.asarray(energy(jnp.asarray(Pi), jnp.asarray(MOMENTS)))
    m = np.asarray(spatial(jnp.asarray(R), jnp.asarray(Pi)))
    e_err = np.abs(E - E[0]) / E[0]
    m_err = np.linalg.norm(m - m[0], axis=-1) / np.linalg.norm(m[0])
    defect = np.asarray(gj.SO3.defect(jnp.asarray(R)))
    return e_err, m_err, defect


def accuracy(fast):
    methods = {
        "geomjax LGVI": lambda dt, n, s: lgvi_run(dt, n, s),
        "geomjax splitting": lambda dt, n, s: lgvi_run(dt, n, s, gj.RigidBodySplitting()),
        "geomjax RKMK4": lambda dt, n, s: lgvi_run(dt, n, s, gj.RKMK4()),
    }
    if diffrax is not None:
        for name, solver in (
            ("Tsit5", diffrax.Tsit5()),
            ("Dopri5", diffrax.Dopri5()),
            ("Dopri8", diffrax.Dopri8()),
        ):
            methods[f"diffrax {name}"] = lambda dt, n, s, solver=solver: diffrax_run(
                solver, dt, n, s
            )
    if scipy_integrate is not None:
        for name in ("DOP853", "RK45"):
            methods[f"scipy {name}"] = lambda dt, n, s, name=name: scipy_run(name, dt, n, s)
    T = 20.0 if fast else 100.0
    dts = (0.2, 0.1, 0.05) if fast else (0.4, 0.2, 0.1, 0.05, 0.025)
    vs_dt = []
    for name, run in methods.items():
        for dt in dts:
            n = round(T / dt)
            if name.startswith("scipy") and n > 4000 and fast:
                continue
            _, R, Pi = run(dt, n, max(1, n // 200))
            e, m, d = errors(R, Pi)
            vs_dt.append(
                {
                    "method": name,
                    "dt": dt,
                    "T": T,
                    "max_energy_err": float(e.max()),
                    "max_momentum_err": float(m.max()),
                    "max_defect": float(d.max()),
                }
            )
    # long horizon at one step size
    T_long = 200.0 if fast else 2000.0
    dt = 0.1
    n = round(T_long / dt)
    horizon = {}
    for name, run in methods.items():
        if name.startswith("scipy") and fast:
            continue
        ts, R, Pi = run(dt, n, max(1, n // 400))
        e, m, d = errors(R, Pi)
        horizon[name] = {
            "t": ts.tolist(),
            "energy_err": e.tolist(),
            "momentum_err": m.tolist(),
            "defect": d.tolist(),
        }
    return vs_dt, horizon


# ------------------------------------------------------------------------------------------
# reference: a hand-written batch-last Cayley LGVI for the free rigid body


def lgvi_kernel_batch_last(
    R, Pi, moments, dt, steps: int, newton_iters: int = 3, legendre_solve: str = "newton"
):
    """``steps`` Cayley-LGVI steps of free rigid bodies, arrays laid out batch-last.

    ``R`` ``(9, B)`` (row-major entries), ``Pi`` ``(3, B)``, ``moments`` 3 principal moments.
    Per step: ``b = Pi``; the explicit second-order predictor ``x = I^{-1}(b − h/2 (I^{-1} b) × b)``;
    ``newton_iters`` Newton steps on ``I x + h/2 x × I x + h²/4 (x·I x) x = b`` with the 3×3
    Jacobian solved by Cramer's rule; ``F = cay(h x)``, ``R1 = R F``, ``Pi1 = F^T b``.  A bare
    ``lax.scan`` with no residual, no saving and no checks: the floor for ``geomjax.LGVI``.  The
    Newton iterations run in a ``fori_loop`` (unrolled they are ~2× slower on the CPU: XLA
    duplicates the iterates into every consumer fusion).  ``legendre_solve="scalar"``: the
    Legendre transform by ``geomjax``'s scalar solve
    (:func:`geomjax.integrators._so3_soa.cayley_solve_scalar`, the ``LGVI`` default) on the
    ``(B,)`` rows, the rest unchanged: the floor for the default ``LGVI``."""
    I0, I1, I2 = (jnp.asarray(m, Pi.dtype) for m in moments)
    h = jnp.asarray(dt, Pi.dtype)
    hh, q = 0.5 * h, 0.25 * h * h

    def cross(a, b):
        return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])

    def newton(x, b):
        x0, x1, x2 = x
        y = (I0 * x0, I1 * x1, I2 * x2)
        c, d = cross(x, y), x0 * y[0] + x1 * y[1] + x2 * y[2]
        r = [y[i] + hh * c[i] + q * d * x[i] - b[i] for i in range(3)]
        # J = diag(I) + h/2 (hat(x) diag(I) − hat(I x)) + h²/4 (2 x (I x)^T + (x·I x) 1)
        a00, a11, a22 = (
            I0 + q * (2 * x0 * y[0] + d),
            I1 + q * (2 * x1 * y[1] + d),
            I2 + q * (2 * x2 * y[2] + d),
        )
        a01, a02 = (
            hh * (y[2] - x2 * I1) + 2 * q * x0 * y[1],
            hh * (x1 * I2 - y[1]) + 2 * q * x0 * y[2],
        )
        a10, a12 = (
            hh * (x2 * I0 - y[2]) + 2 * q * x1 * y[0],
            hh * (y[0] - x0 * I2) + 2 * q * x1 * y[2],
        )
        a20, a21 = (
            hh * (y[1] - x1 * I0) + 2 * q * x2 * y[0],
            hh * (x0 * I1 - y[0]) + 2 * q * x2 * y[1],
        )
        c00, c01, c02 = a11 * a22 - a12 * a21, a02 * a21 - a01 * a22, a01 * a12 - a02 * a11
        c10, c11, c12 = a12 * a20 - a10 * a22, a00 * a22 - a02 * a20, a02 * a10 - a00 * a12
        c20, c21, c22 = a10 * a21 - a11 * a20, a01 * a20 - a00 * a21, a00 * a11 - a01 * a10
        inv = 1.0 / (a00 * c00 + a01 * c10 + a02 * c20)
        return (
            x0 - (c00 * r[0] + c01 * r[1] + c02 * r[2]) * inv,
            x1 - (c10 * r[0] + c11 * r[1] + c12 * r[2]) * inv,
            x2 - (c20 * r[0] + c21 * r[1] + c22 * r[2]) * inv,
        )

    def step(carry, _):
        R, Pi = carry
        b = (Pi[0], Pi[1], Pi[2])
        c = cross((b[0] / I0, b[1] / I1, b[2] / I2), b)
        x = ((b[0] - hh * c[0]) / I0, (b[1] - hh * c[1]) / I1, (b[2] - hh * c[2]) / I2)
        if legendre_solve == "scalar":
            x, _ = cayley_solve_scalar((I0, I1, I2), b, h, newton_iters)
        else:
            x = jax.lax.fori_loop(0, newton_iters, lambda _, x: newton(x, b), x)
        w = [h * xi for xi in x]
        n2 = w[0] * w[0] + w[1] * w[1] + w[2] * w[2]
        k = 4.0 / (4.0 + n2)
        F = (1.0 + 0.5 * k * (w[0] * w[0] - n2), k * (-w[2] + 0.5 * w[0] * w[1]), k * (w[1] + 0.5 * w[0] * w[2]),
             k * (w[2] + 0.5 * w[1] * w[0]), 1.0 + 0.5 * k * (w[1] * w[1] - n2), k * (-w[0] + 0.5 * w[1] * w[2]),
             k * (-w[1] + 0.5 * w[2] * w[0]), k * (w[0] + 0.5 * w[2] * w[1]), 1.0 + 0.5 * k * (w[2] * w[2] - n2))  # fmt: skip
        R1 = [
            sum(R[3 * i + m] * F[3 * m + j] for m in range(3)) for i in range(3) for j in range(3)
        ]
        Pi1 = [F[j] * b[0] + F[3 + j] * b[1] + F[6 + j] * b[2] for j in range(3)]
        return (jnp.stack(R1), jnp.stack(Pi1)), None

    return jax.lax.scan(step, (R, Pi), None, length=steps)[0]


# ------------------------------------------------------------------------------------------
# throughput


def lgvi_batch_last_carry(system, method, R, Pi, dt, steps: int):
    """An experiment: ``geomjax``'s own step (``method.advance``, vmapped) on a batch-last
    carry ``(12, B)`` (one transpose before and after the time loop), with the step's outputs
    stacked by ``jnp.stack`` (:func:`geomjax._linalg.plain_stacks`) instead of the select
    chain that is faster batch-first.  Not a code path of ``simulate``: it measures what such
    a layout would give (free body, no saving, no residual kept)."""
    from geomjax._linalg import plain_stacks

    c0 = jax.vmap(lambda r, p: method.init(system, gj.RigidBodyState(r, p)))(R, Pi).T
    adv = jax.vmap(lambda c: method.advance(system, c, dt)[0], in_axes=1, out_axes=1)
    with plain_stacks():
        c = jax.lax.scan(lambda c, _: (adv(c), None), c0, None, length=steps)[0]
    return jax.vmap(lambda c: method.finalize(system, c))(c.T)


def throughput(fast, batches=None, passes=2):
    batches = batches or ((1, 1024) if fast else (1, 1024, 8192))
    steps = 200 if fast else 2000
    dt = 0.01
    rows = []
    rng = np.random.default_rng(0)
    for dtype in (jnp.float64, jnp.float32):
        moments = jnp.asarray(MOMENTS, dtype)
        rb = gj.RigidBody(moments)
        for B in batches:
            Pi = jnp.asarray(rng.standard_normal((B, 3)), dtype)
            R = jnp.broadcast_to(jnp.asarray(R0, dtype), (B, 3, 3))

            def geomjax_fn(method):
                def f(R, Pi):
                    def sim(r, p):
                        return gj.simulate(
                            rb, method, gj.RigidBodyState(r, p), dt, steps, save_every=steps
                        ).final_state

                    return jax.vmap(sim)(R, Pi)

                return f

            y0 = jnp.concatenate([R.reshape(B, 9), Pi], -1)

            def rk4_scan(y):
                def step(y, _):
                    k1 = rhs(y, moments)
                    k2 = rhs(y + 0.5 * dt * k1, moments)
                    k3 = rhs(y + 0.5 * dt * k2, moments)
                    k4 = rhs(y + dt * k3, moments)
                    return y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

                return jax.lax.scan(step, y, None, length=steps)[0]

            top = gj.RigidBody(moments, HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4]))
            generic = gj.EulerPoincareSystem(gj.SO3, jnp.diag(moments))
            rb_full = gj.RigidBody(jnp.diag(moments))
            u = jnp.asarray(0.1 * rng.standard_normal((steps, 3)), dtype)

            def variant(system, controls=None):
                def f(R, Pi):
                    def sim(r, p):
                        s0 = system.make_state(r, p)
                        return gj.simulate(
                            system, gj.LGVI(), s0, dt, steps, controls=controls, save_every=steps
                        ).final_state

                    return jax.vmap(sim)(R, Pi)

                return f

            Rl, Pil = jnp.asarray(R.reshape(B, 9).T), jnp.asarray(Pi.T)  # batch-last copies

            def kernel(Rl, Pil):
                return lgvi_kernel_batch_last(Rl, Pil, MOMENTS, dt, steps)

            def kernel_scalar(Rl, Pil):
                return lgvi_kernel_batch_last(Rl, Pil, MOMENTS, dt, steps, legendre_solve="scalar")

            impls = {
                KERNEL: (kernel, (Rl, Pil)),
                KERNEL_SCALAR: (kernel_scalar, (Rl, Pil)),
                "geomjax LGVI": (geomjax_fn(gj.LGVI()), (R, Pi)),
                "geomjax LGVI, batch-last carry (experiment)": (
                    lambda R, Pi: lgvi_batch_last_carry(rb, gj.LGVI(), R, Pi, dt, steps),
                    (R, Pi),
                ),
                "geomjax LGVI (vector Newton)": (
                    geomjax_fn(gj.LGVI(legendre_solve="newton")),
                    (R, Pi),
                ),
                "geomjax LGVI + potential": (variant(top), (R, Pi)),
                "geomjax LGVI + controls": (variant(rb, u), (R, Pi)),
                "geomjax LGVI generic-group path": (variant(generic), (R, Pi)),
                # the same free body with a (3, 3) inertia: isolates the cost of the full matrix
                "geomjax LGVI free body, (3, 3) inertia": (variant(rb_full), (R, Pi)),
                **(
                    {  # equal work to the kernel (float32 LGVI reorthonormalizes by default)
                        "geomjax LGVI (reorthonormalize=False)": (
                            geomjax_fn(gj.LGVI(reorthonormalize=False)),
                            (R, Pi),
                        ),
                        # the kernel's work exactly: no Björck step, no compensated momentum
                        "geomjax LGVI (reorthonormalize=False, compensate=False)": (
                            geomjax_fn(gj.LGVI(reorthonormalize=False, compensate=False)),
                            (R, Pi),
                        ),
                        "geomjax LGVI (reorthonormalize=False, compensate=False), "
                        "batch-last carry (experiment)": (
                            lambda R, Pi: lgvi_batch_last_carry(
                                rb,
                                gj.LGVI(reorthonormalize=False, compensate=False),
                                R,
                                Pi,
                                dt,
                                steps,
                            ),
                            (R, Pi),
                        ),
                    }
                    if dtype == jnp.float32
                    else {}
                ),
                "geomjax splitting": (geomjax_fn(gj.RigidBodySplitting()), (R, Pi)),
                "geomjax RKMK4": (geomjax_fn(gj.RKMK4()), (R, Pi)),
                "lax.scan RK4 (bare)": (rk4_scan, (y0,)),
            }
            if diffrax is not None:
                term = diffrax.ODETerm(lambda t, y, args: rhs(y, moments))

                def tsit5(y):
                    def solve(y0):
                        return _fixed_step(
                            term, diffrax.Tsit5(), dt, steps, y0, diffrax.SaveAt(t1=True)
                        )

                    return jax.vmap(solve)(y)

                impls["diffrax Tsit5"] = (tsit5, (y0,))
            # Interleaved passes, best run time (compile time from the first): unpinned CPU
            # timings are bimodal (XLA thread scheduling), and a whole pass of one
            # implementation can land in the slow mode.
            results = {}
            for _ in range(passes):
                for name, (fn, args) in impls.items():
                    c, r = time_jitted(
                        fn, *args, repeats=5 if fast else 9, min_time=0.3 if fast else 1.0
                    )
                    c0, r0 = results.get(name, (c, r))
                    results[name] = (c0, min(r0, r))
            base = results.get("diffrax Tsit5", results["lax.scan RK4 (bare)"])[1]
            r_kernel, r_free = results[KERNEL][1], results["geomjax LGVI"][1]
            r_kernel_scalar = results[KERNEL_SCALAR][1]
            for name, (c, r) in results.items():
                lgvi = name in (KERNEL, KERNEL_SCALAR) or name.startswith("geomjax LGVI")
                rows.append(
                    {
                        "dtype": jnp.dtype(dtype).name,
                        "batch": B,
                        "method": name,
                        "compile_s": c,
                        "run_ms": r * 1e3,
                        "body_steps_per_s": B * steps / r,
                        "speedup_vs_tsit5": base / r,
                        # throughput ratios (>1: faster than the reference)
                        "vs_kernel": r_kernel / r if lgvi else None,
                        "vs_kernel_scalar": r_kernel_scalar / r if lgvi else None,
                        "vs_free_body": r_free / r if lgvi else None,
                    }
                )
    return rows


THROUGHPUT_COLUMNS = [
    "dtype",
    "batch",
    "method",
    "compile_s",
    "run_ms",
    "body_steps_per_s",
    "speedup_vs_tsit5",
    "vs_kernel",
    "vs_kernel_scalar",
    "vs_free_body",
]
THROUGHPUT_TITLE = (
    "(b) throughput (vmap over the batch, dt = 0.01; vs_*: throughput ratios, >1 faster)"
)


def kernel_agreement(steps=200, dt=0.01, B=8):
    """Max deviation of :func:`lgvi_kernel_batch_last` from ``geomjax.simulate(RigidBody, LGVI())``
    (float64, both ``R`` and ``Pi``): the kernel does the same arithmetic, so this is round-off."""
    rng = np.random.default_rng(1)
    Pi = jnp.asarray(rng.standard_normal((B, 3)))
    R = jnp.broadcast_to(jnp.asarray(R0), (B, 3, 3))
    rb = gj.RigidBody(jnp.asarray(MOMENTS))

    def sim(r, p):
        return gj.simulate(rb, gj.LGVI(), gj.RigidBodyState(r, p), dt, steps).final_state

    ref = jax.vmap(sim)(R, Pi)
    out = {"steps": steps, "dt": dt, "batch": B}
    for solve, tag in (("newton", ""), ("scalar", "_scalar")):
        Rk, Pk = lgvi_kernel_batch_last(
            R.reshape(B, 9).T, Pi.T, MOMENTS, dt, steps, legendre_solve=solve
        )
        out["max_abs_dR" + tag] = float(jnp.max(jnp.abs(Rk.T.reshape(B, 3, 3) - ref.R)))
        out["max_abs_dPi" + tag] = float(jnp.max(jnp.abs(Pk.T - ref.Pi)))
    return out


# ------------------------------------------------------------------------------------------
# gradients and memory


def gradient_cost(fast):
    rows = []
    rb = gj.RigidBody(jnp.asarray(MOMENTS))
    R = jnp.asarray(R0)
    for steps in (1000, 10_000) if fast else (1000, 10_000, 100_000):
        save = int(np.sqrt(steps))
        while steps % save:
            save -= 1

        def fwd(pi0, checkpoint=False):
            sol = gj.simulate(
                rb,
                gj.LGVI(),
                gj.RigidBodyState(R, pi0),
                0.01,
                steps,
                save_every=save,
                checkpoint=checkpoint,
            )
            return jnp.sum(sol.states.Pi[-1] ** 2) + jnp.sum(sol.states.R[-1])

        pi0 = jnp.asarray(PI0)
        _, r_f = time_jitted(fwd, pi0, repeats=3)
        for checkpoint in (False, True):
            g = jax.grad(lambda p, checkpoint=checkpoint: fwd(p, checkpoint))
            c_g, r_g = time_jitted(g, pi0, repeats=3)
            mem = jax.jit(g).lower(pi0).compile().memory_analysis()
            rows.append(
                {
                    "steps": steps,
                    "save_every": save,
                    "checkpoint": checkpoint,
                    "forward_ms": r_f * 1e3,
                    "grad_ms": r_g * 1e3,
                    "grad_over_forward": r_g / r_f,
                    "compile_grad_s": c_g,
                    "peak_temp_MB": getattr(mem, "temp_size_in_bytes", float("nan")) / 1e6,
                }
            )
    return rows


def plot(vs_dt, horizon, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    names = sorted({r["method"] for r in vs_dt})
    for name in names:
        rs = [r for r in vs_dt if r["method"] == name]
        style = "o-" if name.startswith("geomjax") else "s--"
        axes[0].loglog(
            [r["dt"] for r in rs], [max(r["max_energy_err"], 1e-17) for r in rs], style, label=name
        )
        axes[1].loglog(
            [r["dt"] for r in rs],
            [max(r["max_momentum_err"], 1e-17) for r in rs],
            style,
            label=name,
        )
    axes[0].set(
        xlabel="dt",
        ylabel="max relative energy error",
        title=f"energy error, T = {vs_dt[0]['T']:g}",
    )
    axes[1].set(
        xlabel="dt", ylabel="max relative |R Π − R₀Π₀|", title="spatial angular momentum error"
    )
    for name, h in horizon.items():
        style = "-" if name.startswith("geomjax") else "--"
        axes[2].semilogy(h["t"], np.maximum(h["energy_err"], 1e-17), style, label=name)
    axes[2].set(xlabel="t", ylabel="relative energy error", title="long horizon, dt = 0.1")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    axes[2].legend(fontsize=7)
    save_figure(fig, path)


def main():
    fast = fast_mode()
    total = timer()
    if "--throughput" in sys.argv[1:]:  # only (b) at batch 1 and 1024, 3 passes
        agree = kernel_agreement()
        thr = throughput(fast, batches=(1, 1024), passes=3)
        print_table(thr, THROUGHPUT_COLUMNS, title=THROUGHPUT_TITLE)
        write_json(
            "rigid_body_throughput",
            {"fast": fast, "throughput": thr, "kernel_agreement": agree, "machine": machine_info()},
        )
        return
    vs_dt, horizon = accuracy(fast)
    print_table(
        vs_dt,
        ["method", "dt", "max_energy_err", "max_momentum_err", "max_defect"],
        title="(a) accuracy vs step size (free rigid body, I = (1, 2, 3))",
    )
    final = [
        {
            "method": k,
            "t_end": v["t"][-1],
            "energy_err_end": v["energy_err"][-1],
            "max_energy_err": max(v["energy_err"]),
            "momentum_err_end": v["momentum_err"][-1],
            "defect_end": v["defect"][-1],
        }
        for k, v in horizon.items()
    ]
    print_table(
        final,
        ["method", "t_end", "energy_err_end", "max_energy_err", "momentum_err_end", "defect_end"],
        title="(a') long horizon, dt = 0.1",
    )
    agree = kernel_agreement()
    print(f"\nbatch-last kernel vs geomjax LGVI (float64, {agree['steps']} steps): {agree}")
    thr = throughput(fast)
    print_table(thr, THROUGHPUT_COLUMNS, title=THROUGHPUT_TITLE)
    grads = gradient_cost(fast)
    print_table(
        grads,
        [
            "steps",
            "save_every",
            "checkpoint",
            "forward_ms",
            "grad_ms",
            "grad_over_forward",
            "peak_temp_MB",
        ],
        title="(c) reverse-mode gradient of a terminal loss",
    )
    from common import RESULTS

    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(vs_dt, horizon, RESULTS / "rigid_body_accuracy.png")
    write_json(
        "rigid_body",
        {
            "fast": fast,
            "accuracy_vs_dt": vs_dt,
            "long_horizon": final,
            "throughput": thr,
            "kernel_agreement": agree,
            "gradients": grads,
            "wall_s": total.elapsed,
            "machine": machine_info(),
        },
    )


if __name__ == "__main__":
    main()

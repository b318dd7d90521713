"""Nonholonomic systems: geomjax NonholonomicVI vs diffrax Tsit5 (reduced ODE, index-1 and
Baumgarte-stabilized formulations).

    python benchmarks/bench_nonholonomic.py [--fast] [--speed] [--ops]
    (or: geomjax bench nonholonomic)

``--speed`` runs only section (d): the sleigh and the ball on a turntable against the RK4 of
their reduced ODEs in a bare ``lax.scan`` (same run, batch 1 and 1024) and the first-call times
of ``simulate``.  ``--ops`` runs only section (e): where the arithmetic of the step goes — the
floating-point operations of the scalarized pieces of one Newton iteration (residual, Jacobian,
Jacobian + saddle solve, whole iteration) in the jaxpr (after common-subexpression elimination)
against those XLA compiles for a vmapped batch of 1024 (each counted once; their ratio is the
arithmetic XLA:CPU recomputes: it has no multi-output fusion and drops optimization barriers
before fusing, so a value shared by several scalar outputs is recomputed in each output's
kernel).

Two systems, both also written in plain coordinates ``q = (x, y, heading, shape)``:

* the Chaplygin sleigh (SE(2)), which relaxes to straight-line motion;
* the tilting rolling disk (SE(2) × R²), quasi-periodic with gravity.

Methods, all with the same fixed step ``dt``:

* ``geomjax NonholonomicVI`` — the discrete Lagrange–d'Alembert integrator on the Lie-group
  formulation (constraint imposed at every node; symmetric, second order);
* ``diffrax Tsit5 (reduced)`` — the reduced ODE in the independent velocities (the constraint is
  eliminated, so it holds by construction; energy is not a structural invariant);
* ``diffrax Tsit5 (index-1)`` — the full coordinates ``(q, q')`` with the multipliers from the
  differentiated constraint ``A q'' + A' q' − b' = 0`` (the constraint drifts);
* ``diffrax Tsit5 (Baumgarte)`` — the same with ``d/dt C + alpha C = 0`` (``alpha = 1/(5 dt)``),
  which pulls the velocity back onto the constraint.

Reported: (a) the largest constraint violation and energy error over a long horizon and their
growth, (b) cost per step (batch 1 and a vmapped batch), compile time separately, (c) for context
the configuration error at equal step size (Tsit5 is fifth order, the DLA second order: at equal
dt Tsit5 is far more accurate on short horizons; the DLA's advantages are structural).  Table, JSON in
``benchmarks/results/nonholonomic.json`` and a plot.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from common import (
    RESULTS,
    fast_mode,
    machine_info,
    print_table,
    save_figure,
    time_jitted,
    timer,
    write_json,
)

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402
from geomjax.systems import PlanarCoordinates  # noqa: E402

try:
    import diffrax
except ImportError:  # optional baseline
    diffrax = None


def systems():
    sleigh = gj.ChaplyginSleigh(mass=2.0, inertia=0.5, a=0.7)
    disk = gj.RollingDisk(mass=1.0, radius=0.5)
    return {
        "sleigh": (sleigh, sleigh.state(0.1, -0.2, 0.3, omega=1.5, v=-0.4)),
        "rolling disk": (
            disk,
            disk.state(phi=0.3, theta=0.4, phi_dot=2.0, theta_dot=0.5, psi_dot=3.0),
        ),
    }


# ------------------------------------------------------------------------------------------
# ODE right-hand sides in coordinates (continuous Lagrange–d'Alembert equations of the library)


def _split(coord, y):
    n = coord.n_velocities
    q, qd = y[:n], y[n:]
    return q[:3], q[3:], qd


def index1_rhs(coord, alpha=0.0):
    """``y = (q, q')``; ``q''`` from the saddle system with ``A q'' = −(A' q' − b') − alpha C``."""

    def f(t, y, args):
        g, x, v = _split(coord, y)
        M = coord.mass_matrix(g, x, v)
        A = coord.constraint_matrix(g, x, t)
        p_q = coord.configuration_velocity_derivative(
            lambda g_, x_, t_: coord.momentum(g_, x_, v), g, x, v, t
        )
        dc = coord.configuration_velocity_derivative(
            lambda g_, x_, t_: coord.constraint(g_, x_, v, t_), g, x, v, t
        )
        rhs = coord.configuration_force(g, x, v) - p_q  # abelian group: no coad term
        c = -dc - alpha * coord.constraint(g, x, v, t)
        vdot, _ = gj.systems.nonholonomic.saddle_solve(M, A, rhs, c)
        return jnp.concatenate([v, vdot])

    return f


def reduced_formulation(name, system, coord):
    """The reduced ODE on ``y = (q, s)``, ``s`` the independent velocities; ``complete(q, s)`` gives
    coordinate velocities that satisfy the constraint identically.  Returns ``(rhs, complete,
    s0_of(v))``."""
    if name == "sleigh":
        # s = (phi', u) with u the forward speed: x' = u cos phi, y' = u sin phi
        def complete(q, s):
            return jnp.stack([s[1] * jnp.cos(q[2]), s[1] * jnp.sin(q[2]), s[0]])

        def independent(q, vdot):
            # u' = cos x'' + sin y'' (+ phi' times the lateral velocity, which is zero)
            return jnp.stack([vdot[2], jnp.cos(q[2]) * vdot[0] + jnp.sin(q[2]) * vdot[1]])

        def s_of(xi):  # from the SE(2) body velocity (omega, vx, vy)
            return jnp.stack([xi[0], xi[1]])

    else:
        r = system.radius

        # s = (phi', theta', psi'): the contact point moves with r psi' along the heading
        def complete(q, s):
            return jnp.stack([r * s[2] * jnp.cos(q[2]), r * s[2] * jnp.sin(q[2]), s[0], s[1], s[2]])

        def independent(q, vdot):
            return vdot[2:]

        def s_of(v):
            return jnp.stack([v[0], v[3], v[4]])

    n = coord.n_velocities

    def rhs(t, y, args):
        q, s = y[:n], y[n:]
        v = complete(q, s)
        vdot, _ = coord.acceleration(t, q[:3], q[3:], v)
        return jnp.concatenate([v, independent(q, vdot)])

    return rhs, complete, s_of


def run_diffrax(f, y0, dt, steps, n_save):
    ts = jnp.linspace(0.0, steps * dt, n_save + 1)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(f),
        diffrax.Tsit5(),
        0.0,
        steps * dt,
        dt,
        y0,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.ConstantStepSize(),
        max_steps=steps + 1,
    )
    return ts, sol.ys


# ------------------------------------------------------------------------------------------
# (a) long horizon


def long_horizon(fast):
    out, curves = [], {}
    for name, (system, s0) in systems().items():
        coord = PlanarCoordinates(system)
        c0 = coord.from_se2(s0)
        n = coord.n_velocities
        T, dt = {"sleigh": (200.0, 0.05), "rolling disk": (1000.0, 0.01)}[name]
        if fast:
            T /= 10
        steps = round(T / dt)
        n_save = 400
        E0 = float(system.energy(s0))
        res = {}
        # geomjax
        t0 = timer()
        sol = jax.jit(
            lambda s: gj.simulate(
                system, gj.NonholonomicVI(), s, dt, steps, save_every=steps // n_save
            )
        )(s0)
        jax.block_until_ready(sol)
        d = gj.diagnostics(system, sol)
        res["geomjax NonholonomicVI"] = (
            np.asarray(sol.times),
            np.asarray(d["energy"]),
            np.asarray(d["constraint_violation"]),
            t0.elapsed,
        )
        if diffrax is not None:
            y0_full = jnp.concatenate([c0.g, c0.x, c0.v])
            formulations = {
                f"diffrax Tsit5 ({label})": (index1_rhs(coord, alpha), y0_full, None)
                for label, alpha in (("index-1", 0.0), ("Baumgarte", 1.0 / (5 * dt)))
            }
            rhs, complete, s_of = reduced_formulation(name, system, coord)
            formulations["diffrax Tsit5 (reduced)"] = (
                rhs,
                jnp.concatenate([c0.g, c0.x, s_of(s0.v)]),
                complete,
            )
            for label, (f, y0, comp) in formulations.items():
                t0 = timer()
                ts, ys = jax.jit(lambda y0, f=f: run_diffrax(f, y0, dt, steps, n_save))(y0)
                jax.block_until_ready(ys)
                wall = t0.elapsed
                q = ys[:, :n]
                v = ys[:, n:] if comp is None else jax.vmap(comp)(q, ys[:, n:])
                st = gj.NonholonomicState(
                    q[:, :3], q[:, 3:], v, jnp.zeros((len(ts), coord.n_constraints))
                )
                E = jax.vmap(coord.energy)(st)
                C = jax.vmap(lambda s: jnp.max(jnp.abs(coord.constraint_violation(s))))(st)
                res[label] = (np.asarray(ts), np.asarray(E), np.asarray(C), wall)
        curves[name] = {}
        for label, (ts, E, C, wall) in res.items():
            e = np.abs(E - E0) / abs(E0)
            half = len(e) // 2
            out.append(
                {
                    "system": name,
                    "method": label,
                    "dt": dt,
                    "T": T,
                    "max_constraint_violation": float(np.nanmax(C)),
                    "max_energy_err": float(np.nanmax(e)),
                    "energy_err_growth": float(
                        np.nanmax(e[half:]) / max(np.nanmax(e[:half]), 1e-300)
                    ),
                    "wall_s_incl_compile": wall,
                }
            )
            curves[name][label] = {
                "t": ts.tolist(),
                "energy_err": e.tolist(),
                "violation": C.tolist(),
            }
    return out, curves


# ------------------------------------------------------------------------------------------
# (b) cost per step


def cost(fast):
    rows = []
    steps = 500 if fast else 2000
    batches = (1, 256) if fast else (1, 1024)
    rng = np.random.default_rng(0)
    for name, (system, s0) in systems().items():
        coord = PlanarCoordinates(system)
        dt = 0.01
        for B in batches:
            # a batch of initial heading rates (the states stay consistent: make_state per member)
            scale = jnp.asarray(1.0 + 0.1 * rng.standard_normal(B))
            states = jax.vmap(lambda a: _scaled_state(system, s0, a))(scale)

            def vi(states):
                return jax.vmap(
                    lambda s: (
                        gj.simulate(
                            system,
                            gj.NonholonomicVI(),
                            s,
                            dt,
                            steps,
                            save_every=steps,
                            check_inputs=False,
                        ).final_state.v
                    )
                )(states)

            impls = {"geomjax NonholonomicVI": (vi, (states,))}
            if diffrax is not None:
                cs = jax.vmap(coord.from_se2)(states)
                y0 = jnp.concatenate([cs.g, cs.x, cs.v], -1)
                for label, alpha in (("index-1", 0.0), ("Baumgarte", 1.0 / (5 * dt))):
                    f = index1_rhs(coord, alpha)

                    def tsit5(y0, f=f):
                        return jax.vmap(lambda y: run_diffrax(f, y, dt, steps, 1)[1][-1])(y0)

                    impls[f"diffrax Tsit5 ({label})"] = (tsit5, (y0,))
            for label, (fn, args) in impls.items():
                c, r = time_jitted(
                    fn, *args, repeats=3 if fast else 7, min_time=0.2 if fast else 1.0
                )
                rows.append(
                    {
                        "system": name,
                        "batch": B,
                        "method": label,
                        "compile_s": c,
                        "us_per_step": r / steps * 1e6,
                        "body_steps_per_s": B * steps / r,
                    }
                )
    return rows


# ------------------------------------------------------------------------------------------
# (c) accuracy at equal step size (context: Tsit5 is fifth order, the DLA second order)


def accuracy(fast):
    system, s0 = systems()["rolling disk"]
    coord = PlanarCoordinates(system)
    T = 2.0
    rhs, _, s_of = reduced_formulation("rolling disk", system, coord)
    c0 = coord.from_se2(s0)
    y0 = jnp.concatenate([c0.g, c0.x, s_of(s0.v)])
    n = coord.n_velocities
    fine = 0.0005
    _, yref = run_diffrax(rhs, y0, fine, round(T / fine), 1)
    q_ref = np.asarray(yref[-1, :n])

    def err(q):  # the heading of an SE(2) element is only defined modulo 2π
        d = q - q_ref
        d[2] = (d[2] + np.pi) % (2 * np.pi) - np.pi
        return float(np.abs(d).max())

    rows = []
    for dt in (0.04, 0.02, 0.01) if fast else (0.04, 0.02, 0.01, 0.005):
        steps = round(T / dt)
        sol = gj.simulate(system, gj.NonholonomicVI(), s0, dt, steps, save_every=steps)
        q = np.asarray(coord.from_se2(sol.final_state).g)
        q = np.concatenate([q, np.asarray(sol.final_state.x)])
        rows.append(
            {
                "method": "geomjax NonholonomicVI",
                "dt": dt,
                "max_q_err": err(q),
            }
        )
        if diffrax is not None:
            _, ys = run_diffrax(rhs, y0, dt, steps, 1)
            rows.append(
                {
                    "method": "diffrax Tsit5 (reduced)",
                    "dt": dt,
                    "max_q_err": err(np.asarray(ys[-1, :n])),
                }
            )
    return rows


# ------------------------------------------------------------------------------------------
# (d) speed: NonholonomicVI vs RK4 of the reduced ODE in a bare lax.scan


def _rk4_scan(f, dt, steps):
    """Classical RK4 of ``y' = f(y)`` in a bare ``lax.scan`` (no saving, no diagnostics)."""

    def rk4(y, _):
        k1 = f(y)
        k2 = f(y + 0.5 * dt * k1)
        k3 = f(y + 0.5 * dt * k2)
        k4 = f(y + dt * k3)
        return y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

    return lambda y0: jax.lax.scan(rk4, y0, None, length=steps)[0]


def _sleigh_rk4(m, Ic, a, dt, steps):
    """RK4 of the reduced sleigh ODE on ``(omega, v, theta, x, y)`` in a bare ``lax.scan``."""
    J = Ic + m * a * a

    def f(y):
        om, v, th = y[0], y[1], y[2]
        return jnp.stack([-m * a * v * om / J, a * om * om, om, v * jnp.cos(th), v * jnp.sin(th)])

    return _rk4_scan(f, dt, steps)


def _turntable_rk4(system, dt, steps):
    """RK4 of the reduced ball-on-turntable ODE (constant table rate) on ``y = (R (9), x, x')``
    ``(13,)``: ``x'' = kappa Omega J x'``, the horizontal spin from the rolling constraint,
    ``omega_h = (Omega x + J x')/a``, the vertical spin ``omega_z`` constant (the class docstring's
    Newton–Euler reduction), ``R' = hat(omega) R`` — the same configuration the VI advances, with
    the constraint eliminated by hand."""
    kap = float(system.kappa)
    Om = float(system.table_rate)
    a = float(system.radius)

    def f(y, wz):
        R = y[:9].reshape(3, 3)
        x, xd = y[9:11], y[11:13]
        Jxd = jnp.stack([-xd[1], xd[0]])
        wh = (Om * x + Jxd) / a
        w = jnp.stack([wh[0], wh[1], wz])
        hat = jnp.stack(
            [
                jnp.stack([0.0 * wz, -w[2], w[1]]),
                jnp.stack([w[2], 0.0 * wz, -w[0]]),
                jnp.stack([-w[1], w[0], 0.0 * wz]),
            ]
        )
        Rd = hat @ R
        return jnp.concatenate([Rd.reshape(9), xd, kap * Om * Jxd])

    def run(y0):
        wz = y0[13]
        return _rk4_scan(lambda y: f(y, wz), dt, steps)(y0[:13])

    return run


#: seconds of each system's first ``state()`` call (filled by :func:`_speed_cases`)
STATE_FIRST_CALL: dict = {}


def _speed_cases(fast):
    """(name, system, state0, dt, reference RK4, its initial vector)."""
    steps = 200 if fast else 2000
    m, Ic, a, dt = 1.3, 0.4, 0.25, 1e-3
    sleigh = gj.ChaplyginSleigh(m, Ic, a)
    t0 = timer()  # the first state of a process: its compilations included
    s0 = sleigh.state(0.0, 0.0, 0.3, omega=1.5, v=-0.4)
    STATE_FIRST_CALL["sleigh: first state() s"] = t0.elapsed
    yield (
        "sleigh",
        sleigh,
        s0,
        dt,
        steps,
        _sleigh_rk4(m, Ic, a, dt, steps),
        jnp.array([1.5, -0.4, 0.3, 0.0, 0.0]),
    )
    ball = gj.BallOnTurntable(mass=1.0, radius=0.5, table_rate=0.8)
    t0 = timer()
    b0 = ball.state(x=(1.0, 0.3), omega=(0.4, -0.2, 0.7))
    STATE_FIRST_CALL["ball on turntable: first state() s"] = t0.elapsed
    om = b0.g @ b0.v[:3]
    y0 = jnp.concatenate([b0.g.reshape(9), b0.x, b0.v[3:], om[2:3]])
    yield "ball on turntable", ball, b0, dt, steps, _turntable_rk4(ball, dt, steps), y0


def speed(fast):
    """NonholonomicVI vs the RK4 of the reduced ODE in a bare ``lax.scan`` in the same run, batch
    1 and 1024 (sleigh: m 1.3, I_c 0.4, a 0.25; ball on a turntable: m 1, a 0.5, table rate 0.8;
    dt 1e-3, 2000 steps); first call (compile + run) of a jitted and of an eager ``simulate``."""
    rows, first = [], {}
    methods = {
        "NonholonomicVI": gj.NonholonomicVI(),
        # fixed three Newton iterations (before the early exit became the default)
        "NonholonomicVI(early_exit=False)": gj.NonholonomicVI(early_exit=False),
        "NonholonomicVI(newton_iters=2)": gj.NonholonomicVI(newton_iters=2),
        "NonholonomicVI(chord=True)": gj.NonholonomicVI(chord=True),
        "NonholonomicVI(jacobian='vectorized')": gj.NonholonomicVI(jacobian="vectorized"),
        # the array form (before the scalarized evaluation, geomjax._internal.scalarize)
        "NonholonomicVI(scalarize=False)": gj.NonholonomicVI(scalarize=False),
        "NonholonomicVI(scalarize=False, chord=True)": gj.NonholonomicVI(
            scalarize=False, chord=True
        ),
    }
    ref_label = "reduced RK4 (bare scan)"
    for name, system, s0, dt, steps, ref, y0 in _speed_cases(fast):

        def make(method, system=system, dt=dt, steps=steps):
            def vi(s):
                return gj.simulate(
                    system, method, s, dt, steps, save_every=steps, check_inputs=False
                ).final_state.v

            return vi

        # first calls, before anything else compiles this structure: the costs a user sees
        # once per process and system structure (later calls hit the compilation caches)
        t0 = timer()
        jax.block_until_ready(
            jax.jit(
                lambda s, system=system, dt=dt, steps=steps: gj.simulate(
                    system, gj.NonholonomicVI(), s, dt, steps
                )
            )(s0)
        )
        first[f"{name}: jitted first call s"] = t0.elapsed
        for i in range(2):
            t0 = timer()
            jax.block_until_ready(gj.simulate(system, gj.NonholonomicVI(), s0, dt, steps))
            first[f"{name}: eager call {i + 1} s"] = t0.elapsed
        residual = {
            k: float(gj.simulate(system, m, s0, dt, steps).max_residual) for k, m in methods.items()
        }
        for B in (1, 64) if fast else (1, 1024):
            fns = {k: make(m) for k, m in methods.items()}
            fns[ref_label] = ref
            st, y = s0, y0
            if B > 1:
                fns = {k: jax.vmap(f) for k, f in fns.items()}
                st = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (B, *x.shape)), s0)
                y = jnp.broadcast_to(y0, (B, *y0.shape))
            out = {}
            # interleaved passes, best of each (unpinned CPU timings are bimodal)
            for _ in range(2):
                for label, fn in fns.items():
                    arg = y if label == ref_label else st
                    c, r = time_jitted(
                        fn, arg, repeats=3 if fast else 7, min_time=0.2 if fast else 1.0
                    )
                    c0, r0 = out.get(label, (c, r))
                    out[label] = (c0, min(r, r0))
            for label, (c, r) in out.items():
                rows.append(
                    {
                        "system": name,
                        "batch": B,
                        "method": label,
                        "compile_s": c,
                        "ns_per_body_step": r / steps / B * 1e9,
                        "ratio_to_rk4": r / out[ref_label][1] if label != ref_label else None,
                        "max_residual": residual.get(label),
                    }
                )
    return rows, {**STATE_FIRST_CALL, **first}


_JAXPR_ARITH = {"mul", "add", "add_any", "sub", "div", "neg", "sqrt", "select_n", "max"}
_HLO_ARITH = r"= f(?:32|64)\[[^\]]*\](?:\{[^}]*\})? (?:multiply|add|subtract|divide|negate|sqrt|select|maximum)\("


def _jaxpr_arith(f, *args):
    """Floating-point operations in the scalarized jaxpr of ``f``, after merging identical
    equations (what XLA's CSE would merge); those inside nested calls (e.g. the select chain
    that stacks a scalarized array output) are counted as they are, without merging."""
    from jax.extend.core import Literal, jaxprs_in_params

    def nested(j):
        n = 0
        for e in j.eqns:
            n += e.primitive.name in _JAXPR_ARITH
            n += sum(nested(sub) for sub in jaxprs_in_params(e.params))
        return n

    jaxpr = jax.make_jaxpr(f)(*args).jaxpr
    seen, alias, n = {}, {}, 0
    for e in jaxpr.eqns:
        ins = tuple(
            ("lit", repr(v.val)) if isinstance(v, Literal) else alias.get(v, v) for v in e.invars
        )
        key = (e.primitive.name, ins, repr(sorted(e.params.items(), key=lambda kv: kv[0])))
        if not e.primitive.multiple_results:
            if key in seen:
                alias[e.outvars[0]] = seen[key]
                continue
            seen[key] = e.outvars[0]
        n += e.primitive.name in _JAXPR_ARITH
        n += sum(nested(sub) for sub in jaxprs_in_params(e.params))
    return n


def _hlo_arith(f, *args, batch):
    """Floating-point operations in XLA's optimized HLO of ``jax.vmap(f)`` over ``batch``."""
    import re

    big = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (batch, *jnp.shape(x))), args)
    text = jax.jit(jax.vmap(f)).lower(*big).compile().as_text()
    return len(re.findall(_HLO_ARITH, text))


def op_counts(fast):
    """One Newton iteration of the step solve of NonholonomicVI, piece by piece: arithmetic in
    the scalarized jaxpr against the compiled HLO at batch 1024 (see the module docstring)."""
    import equinox as eqx

    from geomjax._internal.scalarize import Scalarized, ScalarTuples, scalarize
    from geomjax._linalg import forward_jacobian
    from geomjax.integrators import nonholonomic as nh

    rows = []
    for name, system, s0, dt, *_ in _speed_cases(fast):
        params, static = eqx.partition(system, eqx.is_array)
        k = system.n_velocities
        h, t = jnp.asarray(dt), jnp.asarray(0.0)
        A0 = system.constraint_matrix(s0.g, s0.x, t)
        args = (params, s0.g, s0.x, system.momentum(s0.g, s0.x, s0.v), A0, h, t)
        z0 = jnp.concatenate([s0.v, 0.5 * h * s0.lam])
        residual = nh._StepResidual(static, "cayley")
        jac_solve = nh._SaddleJacSolve(residual, k, nh._A_step, "columns")
        R = Scalarized(ScalarTuples(residual))
        J = Scalarized(ScalarTuples(jac_solve, (0, 2)))
        zt = tuple(z0[i] for i in range(z0.shape[0]))

        def jacobian(z, a, residual=residual, k=k):
            return forward_jacobian(lambda v: residual(jnp.concatenate([v, z[k:]]), a), z[:k])

        def iteration(z, a, R=R, J=J):
            d = J(z, a, R(z, a))
            return tuple(x - y for x, y in zip(z, d))

        pieces = {
            "residual": (R, (zt, args)),
            "Jacobian (k JVPs)": (scalarize(jacobian), (z0, args)),
            "Jacobian + saddle solve": (J, (zt, args, R(zt, args))),
            "Newton iteration": (iteration, (zt, args)),
        }
        for piece, (f, a) in pieces.items():
            nj = _jaxpr_arith(f, *a)
            nh_ = _hlo_arith(f, *a, batch=1024)
            rows.append(
                {
                    "system": name,
                    "piece": piece,
                    "jaxpr_ops": nj,
                    "hlo_ops_batch1024": nh_,
                    "hlo_over_jaxpr": nh_ / nj,
                }
            )
    return rows


def _scaled_state(system, s0, a):
    """``s0`` with all velocities scaled by ``a`` (linear constraints: still admissible)."""
    return system.make_state(s0.g, s0.x, a * s0.v)


def plot(curves, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(curves), figsize=(7 * len(curves), 8))
    for j, (name, cs) in enumerate(curves.items()):
        for label, c in cs.items():
            style = "-" if label.startswith("geomjax") else "--"
            t = np.asarray(c["t"])[1:]
            axes[0, j].loglog(
                t, np.maximum(np.asarray(c["energy_err"])[1:], 1e-17), style, label=label
            )
            axes[1, j].loglog(
                t, np.maximum(np.asarray(c["violation"])[1:], 1e-17), style, label=label
            )
        axes[0, j].set(title=f"{name}: relative energy error", xlabel="t")
        axes[1, j].set(title=f"{name}: max |A(q) v − b|", xlabel="t")
    for a in axes.flat:
        a.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    save_figure(fig, path)


def main():
    import sys

    fast = fast_mode()
    t0 = timer()
    if "--ops" in sys.argv[1:]:
        rows = op_counts(fast)
        print_table(
            rows,
            ["system", "piece", "jaxpr_ops", "hlo_ops_batch1024", "hlo_over_jaxpr"],
            title="(e) arithmetic of one Newton iteration: scalarized jaxpr vs compiled HLO",
        )
        write_json(
            "nonholonomic_ops",
            {
                "fast": fast,
                "ops": rows,
                "wall_s": t0.elapsed,
                "machine": machine_info(),
            },
        )
        return
    if "--speed" in sys.argv[1:]:
        rows, first = speed(fast)
        print_table(
            rows,
            [
                "system",
                "batch",
                "method",
                "compile_s",
                "ns_per_body_step",
                "ratio_to_rk4",
                "max_residual",
            ],
            title="(d) speed: NonholonomicVI vs reduced RK4 in a bare lax.scan (float64)",
        )
        print("first calls (compile + run):", {k: round(v, 2) for k, v in first.items()})
        write_json(
            "nonholonomic_speed",
            {
                "fast": fast,
                "speed": rows,
                "first_call": first,
                "wall_s": t0.elapsed,
                "machine": machine_info(),
            },
        )
        return
    lh, curves = long_horizon(fast)
    print_table(
        lh,
        [
            "system",
            "method",
            "dt",
            "T",
            "max_constraint_violation",
            "max_energy_err",
            "energy_err_growth",
            "wall_s_incl_compile",
        ],
        title="(a) long horizon (energy_err_growth = max over the 2nd half / max over the 1st half)",
    )
    acc = accuracy(fast) if diffrax is not None else []
    print_table(
        acc,
        ["method", "dt", "max_q_err"],
        title="(c) rolling disk, configuration error at T = 2 (reference: Tsit5, dt = 5e-4)",
    )
    rows = cost(fast)
    print_table(
        rows,
        ["system", "batch", "method", "compile_s", "us_per_step", "body_steps_per_s"],
        title="(b) cost per step (dt = 0.01, float64, vmap over the batch)",
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(curves, RESULTS / "nonholonomic.png")
    write_json(
        "nonholonomic",
        {
            "fast": fast,
            "long_horizon": lh,
            "cost": rows,
            "accuracy": acc,
            "curves": curves,
            "wall_s": t0.elapsed,
            "machine": machine_info(),
        },
    )


if __name__ == "__main__":
    main()

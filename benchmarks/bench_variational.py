"""Variational integrators in coordinates: RATTLE and the discrete Euler–Lagrange integrator vs
diffrax Tsit5 with projection and SciPy DOP853, on the planar double pendulum.

    python benchmarks/bench_variational.py [--fast]        (or: geomjax bench variational)

One physical system (unit masses and lengths, g = 9.81, released from (θ1, θ2) = (1.2, −0.4)),
two formulations:

* Cartesian ``q = (x1, y1, x2, y2)`` with the holonomic constraints ``|x1|² = 1``,
  ``|x2 − x1|² = 1``: ``geomjax RATTLE``; ``diffrax Tsit5 + projection`` (the index-1 ODE
  ``[[M, −Gᵀ], [G, 0]] [q̈, λ] = [f, −∂²g(q̇, q̇)]``, then a projection of ``q`` onto ``g = 0``
  and of ``q̇`` onto ``G q̇ = 0`` after every step); ``SciPy DOP853`` on the same index-1 ODE
  without projection (fixed steps: ``first_step = max_step = dt``, tolerances so loose that no
  step is rejected);
* the angles ``(θ1, θ2)``: ``geomjax DEL (midpoint)`` (no constraint to drift).

Reported: (a) the largest energy error, its growth (max over the last half / first half) and the
largest constraint violation over ``T`` for each step size; (b) cost per step (batch 1, compile
time separately; DOP853 is a Python loop around a jitted right-hand side).  Table, JSON in
``benchmarks/results/variational.json`` and a plot.

What to expect (measured once, T = 50, shared loaded 2-core CPU, float64): at equal ``dt`` the
fifth/eighth-order baselines have far smaller energy errors on this horizon (RATTLE 3e-2,
Tsit5 + projection 4e-6, DOP853 2e-8 at dt = 0.01); the variational errors are O(dt²) and do not
grow (growth ≈ 1), DOP853's grows linearly (≈ 4) and its constraint drifts (1e-9), RATTLE's and the
projected Tsit5's constraints stay at round-off; per step RATTLE costs ~0.6× Tsit5 + projection.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from common import (
    RESULTS,
    double_pendulum_lagrangian,
    fast_mode,
    print_table,
    save_figure,
    time_jitted,
    timer,
    write_json,
)

jax.config.update("jax_enable_x64", True)

import geomjax as gj  # noqa: E402

try:
    import diffrax
except ImportError:  # optional baseline
    diffrax = None

G0 = 9.81
TH0 = np.array([1.2, -0.4])


def constraint(q):
    x1, x2 = q[:2], q[2:]
    d = x2 - x1
    return 0.5 * jnp.array([x1 @ x1 - 1.0, d @ d - 1.0])


CART = gj.LagrangianSystem(metric=jnp.eye(4), potential=lambda q: G0 * (q[1] + q[3]))


ANGLES = gj.LagrangianSystem(double_pendulum_lagrangian, dim=2)


def cartesian_state():
    a, b = TH0
    q = jnp.array([np.sin(a), -np.cos(a), np.sin(a) + np.sin(b), -np.cos(a) - np.cos(b)])
    return gj.RATTLE(constraint).make_state(CART, q, jnp.zeros(4))


def energy_cart(q, v):
    return 0.5 * jnp.sum(v * v, -1) + G0 * (q[..., 1] + q[..., 3])


def index1_rhs(y):
    q, v = y[:4], y[4:]
    a, _ = CART.constrained_acceleration(0.0, q, v, constraint)
    return jnp.concatenate([v, a])


def project(y):
    q, v = y[:4], y[4:]
    for _ in range(2):
        G = jax.jacfwd(constraint)(q)
        q = q - G.T @ jnp.linalg.solve(G @ G.T, constraint(q))
    G = jax.jacfwd(constraint)(q)
    v = v - G.T @ jnp.linalg.solve(G @ G.T, G @ v)
    return jnp.concatenate([q, v])


def geomjax_run(method, system, st, dt, steps, save_every):
    return gj.simulate(system, method, st, dt, steps, save_every=save_every)


def tsit5_projected(dt, steps, save_every):
    """``steps`` fixed Tsit5 steps with a projection after each (FSAL reset: made_jump)."""
    solver = diffrax.Tsit5()
    term = diffrax.ODETerm(lambda t, y, args: index1_rhs(y))
    st = cartesian_state()
    y0 = jnp.concatenate([st.q, st.p])

    def one(carry, _):
        y, t = carry
        s0 = solver.init(term, t, t + dt, y, None)
        y1, _, _, _, _ = solver.step(term, t, t + dt, y, None, s0, made_jump=True)
        return (project(y1), t + dt), None

    def block(carry, _):
        carry, _ = jax.lax.scan(one, carry, None, length=save_every)
        return carry, carry[0]

    _, ys = jax.lax.scan(block, (y0, jnp.zeros(())), None, length=steps // save_every)
    return jnp.concatenate([y0[None], ys])


def dop853(dt, steps, save_every):
    from scipy.integrate import solve_ivp

    f = jax.jit(index1_rhs)
    st = cartesian_state()
    y0 = np.concatenate([st.q, st.p])
    ts = np.arange(0, steps + 1, save_every) * dt
    sol = solve_ivp(
        lambda t, y: np.asarray(f(jnp.asarray(y))),
        (0, steps * dt),
        y0,
        method="DOP853",
        t_eval=ts,
        first_step=dt,
        max_step=dt,
        rtol=1e10,
        atol=1e10,
    )
    return sol.y.T


def metrics(E, g):
    err = np.abs(E - E[0])
    half = len(err) // 2
    return {
        "max_energy_err": float(err.max()),
        "energy_err_growth": float(err[half:].max() / max(err[: half + 1].max(), 1e-300)),
        "max_constraint": None if g is None else float(np.abs(g).max()),
    }


def sweep(fast):
    T = 10.0 if fast else 50.0
    dts = (0.02, 0.01) if fast else (0.02, 0.01, 0.005)
    rows, curves = [], {}
    for dt in dts:
        steps = round(T / dt)
        every = steps // 250  # 250 saved states (T / dt is a multiple of 250)
        # RATTLE
        sol = geomjax_run(gj.RATTLE(constraint), CART, cartesian_state(), dt, steps, every)
        q, v = np.asarray(sol.states.q), np.asarray(sol.states.p)
        g = np.asarray(jax.vmap(constraint)(sol.states.q))
        rows.append({"method": "geomjax RATTLE", "dt": dt, **metrics(energy_cart(q, v), g)})
        curves[f"RATTLE dt={dt}"] = np.abs(energy_cart(q, v) - energy_cart(q, v)[0]).tolist()
        # DEL in angles
        st = ANGLES.make_state(jnp.asarray(TH0), jnp.zeros(2))
        sol = geomjax_run(gj.DiscreteEulerLagrange(), ANGLES, st, dt, steps, every)
        E = np.asarray(gj.diagnostics(ANGLES, sol)["energy"])
        rows.append({"method": "geomjax DEL (angles)", "dt": dt, **metrics(E, None)})
        curves[f"DEL dt={dt}"] = np.abs(E - E[0]).tolist()
        # Tsit5 + projection
        if diffrax is not None:
            y = np.asarray(tsit5_projected(dt, steps, every))
            g = np.asarray(jax.vmap(constraint)(jnp.asarray(y[:, :4])))
            E = energy_cart(y[:, :4], y[:, 4:])
            rows.append({"method": "diffrax Tsit5 + projection", "dt": dt, **metrics(E, g)})
            curves[f"Tsit5+proj dt={dt}"] = np.abs(E - E[0]).tolist()
        # DOP853 (no projection)
        y = dop853(dt, steps, every)
        g = np.asarray(jax.vmap(constraint)(jnp.asarray(y[:, :4])))
        E = energy_cart(y[:, :4], y[:, 4:])
        rows.append({"method": "SciPy DOP853 (index-1)", "dt": dt, **metrics(E, g)})
        curves[f"DOP853 dt={dt}"] = np.abs(E - E[0]).tolist()
    return rows, curves, T


def cost(fast):
    dt, steps = 0.01, 500 if fast else 2000
    rows = []
    reps = 3 if fast else 7
    st = cartesian_state()
    for name, method, system, s0 in (
        ("geomjax RATTLE", gj.RATTLE(constraint), CART, st),
        (
            "geomjax DEL (angles)",
            gj.DiscreteEulerLagrange(),
            ANGLES,
            ANGLES.make_state(jnp.asarray(TH0), jnp.zeros(2)),
        ),
    ):

        def fn(s0, method=method, system=system):
            return gj.simulate(system, method, s0, dt, steps, save_every=steps).final_state.q

        c, r = time_jitted(fn, s0, repeats=reps, min_time=0.2)
        rows.append({"method": name, "compile_s": c, "us_per_step": 1e6 * r / steps})
    if diffrax is not None:
        c, r = time_jitted(lambda: tsit5_projected(dt, steps, steps)[-1], repeats=reps)
        rows.append(
            {"method": "diffrax Tsit5 + projection", "compile_s": c, "us_per_step": 1e6 * r / steps}
        )
    dop853(dt, 10, 10)  # compile the right-hand side first
    with timer() as t:
        dop853(dt, steps, steps)
    rows.append(
        {
            "method": "SciPy DOP853 (index-1)",
            "compile_s": None,
            "us_per_step": 1e6 * t.s / steps,
        }
    )
    base = rows[0]["us_per_step"]
    for r in rows:
        r["ratio_to_RATTLE"] = r["us_per_step"] / base
    return rows


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for i, m in enumerate(dict.fromkeys(r["method"] for r in rows)):
        rr = [r for r in rows if r["method"] == m]
        dts = [r["dt"] for r in rr]
        style = {"color": f"C{i}", "marker": "o", "label": m}
        axes[0].loglog(dts, [r["max_energy_err"] for r in rr], **style)
        if rr[0]["max_constraint"] is not None:  # the angle formulation has no constraint
            axes[1].loglog(dts, [max(r["max_constraint"], 1e-17) for r in rr], **style)
    axes[0].set(xlabel="dt", ylabel="max |E − E0|", title="energy error")
    axes[1].set(xlabel="dt", ylabel="max |g(q)|", title="constraint violation")
    for a in axes:
        a.grid(True, which="both", alpha=0.3)
    for a in axes:
        a.legend(fontsize=8)
    save_figure(fig, path)


def main():
    fast = fast_mode()
    total = timer()
    rows, curves, T = sweep(fast)
    print_table(
        rows,
        ["method", "dt", "max_energy_err", "energy_err_growth", "max_constraint"],
        title=f"(a) double pendulum, T = {T} (growth = max over 2nd half / max over 1st half)",
    )
    crows = cost(fast)
    print_table(
        crows,
        ["method", "compile_s", "us_per_step", "ratio_to_RATTLE"],
        title="(b) cost per step (dt = 0.01, batch 1, float64)",
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(rows, RESULTS / "variational.png")
    write_json(
        "variational",
        {
            "fast": fast,
            "T": T,
            "sweep": rows,
            "cost": crows,
            "curves": curves,
            "wall_s": total.elapsed,
        },
    )


if __name__ == "__main__":
    main()

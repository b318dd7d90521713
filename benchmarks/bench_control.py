"""Trajectory optimization: the geomjax loop vs the same loop over diffrax Tsit5.

    python benchmarks/bench_control.py [--fast]        (or: geomjax bench control)

For each example of :mod:`geomjax.control.examples` — the rest-to-rest attitude manoeuvre (forced
LGVI on SO(3)), the ball on a plate and the shape-change reorientation (Magnus-4 reconstruction) —
the same loss, the same parameters, the same optimizer (optax L-BFGS via
:func:`geomjax.control.optimize`) and the same number of fixed steps are run once with the geomjax
integrator and once with diffrax Tsit5 on the matrix ODE (``Ṙ = R hat(Ω)``, Euler's equations for
the attitude problem; the torque is the continuous sine series there, its midpoint samples for the
LGVI).  Reported: compile time, optimizer iterations/s, final loss and target error, wall time to
reach the target (1e-3 rad), forward and gradient time and their ratio, and the compiled temporary
memory of the gradient.  Table + JSON + a loss-vs-wall-time plot.  Same machine, one run.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from common import fast_mode, print_table, save_figure, time_jitted, timer, write_json

jax.config.update("jax_enable_x64", True)

from geomjax.control import Trajectory, group_distance, optimize  # noqa: E402
from geomjax.control.examples import (  # noqa: E402
    AttitudeManeuver,
    BallOnPlate,
    ShapeReorientation,
)
from geomjax.lie import SO3  # noqa: E402

try:
    import diffrax
except ImportError:  # optional baseline
    diffrax = None

REACH = 1e-3


def _hat(w):
    return SO3.hat(w)


def _tsit5_final(rhs, y0, T, steps):
    """Fixed-step Tsit5 with ``steps`` steps over ``[0, T]``; gradients by diffrax's default
    (recursive checkpointing) adjoint."""
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        diffrax.Tsit5(),
        0.0,
        T,
        T / steps,
        y0,
        stepsize_controller=diffrax.ConstantStepSize(),
        saveat=diffrax.SaveAt(t1=True),
        max_steps=steps,
    )
    return jax.tree_util.tree_map(lambda x: x[-1], sol.ys)


# --- the diffrax twins: same loss, same parameters ------------------------------------------------
def attitude_tsit5_final(prob, c):
    I = prob.system.inertia
    T = prob.duration
    k = jnp.arange(1, c.shape[0] + 1, dtype=c.dtype)

    def rhs(t, y, args):
        R, Pi = y
        w = jnp.linalg.solve(I, Pi)
        u = jnp.sin(math.pi * k * t / T) @ c
        return R @ _hat(w), jnp.cross(Pi, w) + u

    return _tsit5_final(rhs, (prob.R0, jnp.zeros(3, c.dtype)), T, prob.steps)


def attitude_tsit5_loss(prob, c):
    R, Pi = attitude_tsit5_final(prob, c)
    rate = prob.duration**2 * jnp.sum(jnp.linalg.solve(prob.system.inertia, Pi) ** 2)
    effort = 0.5 * prob.dt * jnp.sum(prob.controls(c) ** 2)
    return effort + prob.weight * (group_distance(SO3, R, prob.R_target) + rate)


def ball_tsit5_final(prob, loop):
    traj = Trajectory(loop, prob.duration)

    def rhs(t, R, args):
        return _hat(prob.spatial_angular_velocity(traj.velocity(t))) @ R

    return _tsit5_final(rhs, jnp.eye(3, dtype=prob.R_target.dtype), prob.duration, prob.steps)


def ball_tsit5_loss(prob, loop):
    return group_distance(SO3, ball_tsit5_final(prob, loop), prob.R_target)


def shape_tsit5_final(prob, loop):
    traj = Trajectory(loop, prob.duration)

    def rhs(t, R, args):
        return R @ _hat(prob.body_velocity(traj(t), traj.velocity(t)))

    return _tsit5_final(rhs, jnp.eye(3, dtype=prob.R_target.dtype), prob.duration, prob.steps)


def shape_tsit5_loss(prob, loop):
    return group_distance(SO3, shape_tsit5_final(prob, loop), prob.R_target)


def _error_geomjax(prob, p):
    return float(prob.errors(p)["angle"])


EXAMPLES = {
    "attitude SO(3)": (
        lambda fast: AttitudeManeuver(steps=100 if fast else 200, modes=6),
        attitude_tsit5_loss,
        lambda prob, p: float(
            group_distance(SO3, attitude_tsit5_final(prob, p)[0], prob.R_target, squared=False)
        ),
    ),
    "ball on plate": (
        lambda fast: BallOnPlate(steps=60 if fast else 100),
        ball_tsit5_loss,
        lambda prob, p: float(
            group_distance(SO3, ball_tsit5_final(prob, p), prob.R_target, squared=False)
        ),
    ),
    "shape change": (
        lambda fast: ShapeReorientation(steps=60 if fast else 100),
        shape_tsit5_loss,
        lambda prob, p: float(
            group_distance(SO3, shape_tsit5_final(prob, p), prob.R_target, squared=False)
        ),
    ),
}


def _temp_bytes(fn, p):
    try:
        m = jax.jit(fn).lower(p).compile().memory_analysis()
        return int(m.temp_size_in_bytes) if m is not None else None
    except Exception:  # memory analysis is backend dependent
        return None


def run_one(name, prob, loss, final_error, iters):
    p0 = prob.initial_params()
    res = optimize(loss, p0, "lbfgs", max_iters=iters, progress=False, target=1e-12)
    h = res.history
    _, fwd = time_jitted(loss, p0, repeats=5, min_time=0.1)
    _, grad = time_jitted(jax.grad(loss), p0, repeats=5, min_time=0.1)
    err = final_error(prob, res.params)
    run_time = h["time"][-1] - res.compile_time
    return {
        "example": name,
        "compile_s": res.compile_time,
        "iters": res.iterations,
        "iters_per_s": (res.iterations - 1) / run_time if run_time > 0 else None,
        "final_loss": res.loss,
        "final_error_rad": err,
        "reached": bool(err < REACH),
        "total_s": float(h["time"][-1]),
        "forward_ms": 1e3 * fwd,
        "grad_ms": 1e3 * grad,
        "grad_over_fwd": grad / fwd,
        "grad_temp_MB": (lambda b: None if b is None else b / 2**20)(
            _temp_bytes(jax.grad(loss), p0)
        ),
        "_history": {"time": h["time"].tolist(), "loss": h["loss"].tolist()},
    }


def main():
    fast = fast_mode()
    iters = 20 if fast else 60
    rows = []
    for name, (make, tsit5_loss, tsit5_error) in EXAMPLES.items():
        prob = make(fast)
        g = run_one(name, prob, lambda p, prob=prob: prob.loss(p), _error_geomjax, iters)
        g["integrator"] = "geomjax"
        rows.append(g)
        if diffrax is not None:
            d = run_one(name, prob, lambda p, prob=prob: tsit5_loss(prob, p), tsit5_error, iters)
            d["integrator"] = "diffrax Tsit5"
            d["speedup_geomjax"] = d["total_s"] / g["total_s"]
            rows.append(d)
        jax.clear_caches()
    cols = [
        "example",
        "integrator",
        "compile_s",
        "iters",
        "iters_per_s",
        "final_loss",
        "final_error_rad",
        "reached",
        "total_s",
        "forward_ms",
        "grad_ms",
        "grad_over_fwd",
        "grad_temp_MB",
        "speedup_geomjax",
    ]
    print_table(
        rows, cols, title=f"trajectory optimization, L-BFGS, {iters} iterations max (float64)"
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(EXAMPLES), figsize=(4.5 * len(EXAMPLES), 3.6))
    for ax, name in zip(np.atleast_1d(axes), EXAMPLES):
        for r in rows:
            if r["example"] == name:
                ax.semilogy(r["_history"]["time"], r["_history"]["loss"], label=r["integrator"])
        ax.set(title=name, xlabel="wall time [s] (incl. compile)", ylabel="loss")
        ax.legend()
    from common import RESULTS

    RESULTS.mkdir(parents=True, exist_ok=True)
    save_figure(fig, RESULTS / "bench_control.png")
    write_json("bench_control", {"fast": fast, "iterations": iters, "rows": rows})


if __name__ == "__main__":
    total = timer()
    main()
    print(f"total {total.elapsed:.1f} s")

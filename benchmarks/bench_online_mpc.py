"""Online model predictive control of a plant outside JAX: MuJoCo's C simulator.

A rigid body (principal inertia (1, 2, 3) kg·m², no gravity) is written in MJCF and stepped by
MuJoCo in C (``mj_step``, 2 ms steps); geomjax's :class:`~geomjax.control.OnlineMPC` controls its
attitude at a fixed control period (``problem.dt``, 10 MuJoCo steps): every tick it reads the
measured state from MuJoCo's ``qpos``/``qvel``, runs one compiled receding-horizon step (the
model: the same body integrated by the LGVI, a 30-node horizon, one iLQR iteration per tick,
warm-started) and writes the body torque into ``xfrc_applied``.  The loop runs as fast as the
host allows: its wall-clock rate in ticks per second and the latency of each tick (read state,
solve, write torque) are recorded, the first tick (compilation) apart.  The final attitude error
is read from MuJoCo's own state.  After the loop, the parts of a tick are timed alone (median
µs): the compiled executable called directly, ``OnlineMPC.step`` around it, the former
``equinox.filter_jit`` path, building the state, reading the control back.

Run: ``geomjax bench online-mpc`` (``--fast``: fewer ticks).  Needs ``pip install mujoco``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

#: the plant: one free rigid body, principal axes along the body frame, no gravity
MJCF = """
<mujoco model="rigid body">
  <option timestep="0.002" gravity="0 0 0" integrator="RK4"/>
  <worldbody>
    <body name="body">
      <freejoint/>
      <inertial pos="0 0 0" mass="1" diaginertia="1 2 3"/>
      <geom type="box" size="0.3 0.2 0.1" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
</mujoco>
"""
INERTIA = (1.0, 2.0, 3.0)
SUBSTEPS = 10  # MuJoCo steps per control tick: control period 0.02 s


def _quat_to_matrix(q):
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def attitude_mpc_problem(angle=1.0, horizon=30, torque_max=2.0):
    """The model: the body on SO(3) by the LGVI, ``dt = 0.02`` s, stage cost ``½|u|²``, terminal
    penalty ``50 |(log(R*ᵀR), Π)|²`` toward ``R* = exp(angle · e_z)``, per-axis torque limits."""
    import jax.numpy as jnp

    import geomjax as gj
    from geomjax.control.examples import attitude_problem

    return attitude_problem(
        torque_max=torque_max,
        inertia=INERTIA,
        angle=angle,
        duration=horizon * SUBSTEPS * 0.002,
        steps=horizon,
        method=gj.LGVI(),
        exact_target=False,
        weight=100.0,
        dtype=jnp.float64,
    )


def run_mujoco_loop(ticks=300, horizon=30, iterations=1, angle=1.0):
    """Drive MuJoCo's body with :class:`~geomjax.control.OnlineMPC` for ``ticks`` control ticks.

    Returns a dict: the final rotation and angular velocity read from MuJoCo's state, the
    target, the latencies (s) of the ticks after the first, the first tick's time (compilation),
    the wall-clock rate and the applied torques."""
    import jax
    import jax.numpy as jnp
    import mujoco

    import geomjax as gj
    from geomjax.control import ILQR, MPC, OnlineMPC

    problem = attitude_mpc_problem(angle=angle, horizon=horizon)
    target = np.asarray(problem.terminal_cost.residual.target)
    online = OnlineMPC(problem, MPC(ILQR(), max_iters=iterations))
    plan = online.init()
    model = mujoco.MjModel.from_xml_string(MJCF)
    data = mujoco.MjData(model)
    body = model.body("body").id
    inertia = np.asarray(INERTIA)
    dt = float(problem.dt)
    latencies, torques = [], []
    first = None
    t_start = time.perf_counter()
    for k in range(ticks):
        t0 = time.perf_counter()
        R = _quat_to_matrix(data.qpos[3:7])
        omega = np.array(data.qvel[3:6])  # body frame (MuJoCo's free joint)
        x = gj.RigidBodyState(jnp.asarray(R), jnp.asarray(inertia * omega))
        u, plan = online.step(plan, x, k * dt)
        u = np.asarray(jax.device_get(u))
        data.xfrc_applied[body, 3:6] = R @ u  # the body torque in the world frame
        t1 = time.perf_counter()
        if k == 0:
            first = t1 - t0
        else:
            latencies.append(t1 - t0)
        torques.append(u)
        for _ in range(SUBSTEPS):
            mujoco.mj_step(model, data)
    wall = time.perf_counter() - t_start
    breakdown = _tick_breakdown(online, plan, x, k * dt)
    return dict(
        breakdown=breakdown,
        R=_quat_to_matrix(data.qpos[3:7]),
        omega=np.array(data.qvel[3:6]),
        target=target,
        latencies=np.asarray(latencies),
        first_tick=first,
        ticks_per_s=(ticks - 1) / (wall - first),
        torques=np.asarray(torques),
        status=int(plan.status),
    )


def _tick_breakdown(online, plan, x, t, repeats=300):
    """Median latencies (µs) of the parts of a tick, each timed ``repeats`` times from the same
    plan and state, the parts interleaved (each sees the same machine load): the compiled
    executable called directly (the computation and JAX's C++ dispatch), ``OnlineMPC.step``
    (its checks and signature look-up around that call), the former ``equinox.filter_jit`` path
    (the problem's pytree filtered every call) alone and with the checks and time conversion of
    the former ``OnlineMPC.step`` around it, building the state from MuJoCo's arrays, and
    reading ``u`` back to NumPy."""
    import jax
    import jax.numpy as jnp

    import geomjax as gj
    from geomjax.control.mpc import _online_step, _signature, _structure

    steps = online._steps
    tt = np.asarray(t, online.problem.dtype)
    compiled = steps.program((_signature(plan), _signature(x)), plan, x, tt)
    tj = jnp.asarray(t, online.problem.dtype)
    R, Pi = np.asarray(x.R), np.asarray(x.Pi)
    u = online.step(plan, x, t)[0]

    def former_step(plan, state, t):  # OnlineMPC.step before the ahead-of-time compiled path
        if _structure(state) != _structure(online.problem.state0):
            raise ValueError("state")
        t = jnp.asarray(t, online.problem.dtype)
        return _online_step(online.problem, online.controller, plan, state, t)

    parts = dict(
        compiled_us=lambda: jax.block_until_ready(compiled(steps.leaves, plan, x, tt)),
        step_us=lambda: jax.block_until_ready(online.step(plan, x, t)),
        filter_jit_us=lambda: jax.block_until_ready(
            _online_step(online.problem, online.controller, plan, x, tj)
        ),
        former_step_us=lambda: jax.block_until_ready(former_step(plan, x, t)),
        make_state_us=lambda: gj.RigidBodyState(jnp.asarray(R), jnp.asarray(Pi)),
        read_u_us=lambda: np.asarray(jax.device_get(u)),
    )
    times = {name: [] for name in parts}
    for fn in parts.values():
        fn()
    for _ in range(repeats):  # interleaved: every part sees the same load
        for name, fn in parts.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: 1e6 * float(np.median(ts)) for name, ts in times.items()}


def main(argv=None):
    import jax

    jax.config.update("jax_enable_x64", True)
    from common import machine_info, print_table, write_json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true")
    args = ap.parse_args(argv)
    ticks = 100 if args.fast else 400
    rows = []
    for horizon in (10, 30):
        r = run_mujoco_loop(ticks=ticks, horizon=horizon)
        err = np.linalg.norm(_log_so3(r["target"].T @ r["R"]))
        lat = r["latencies"] * 1e3
        rows.append(
            dict(
                horizon=horizon,
                ticks=ticks,
                first_tick_s=r["first_tick"],
                ticks_per_s=r["ticks_per_s"],
                p50_ms=float(np.percentile(lat, 50)),
                p99_ms=float(np.percentile(lat, 99)),
                max_ms=float(lat.max()),
                final_angle_error=float(err),
                final_omega=float(np.linalg.norm(r["omega"])),
                **r["breakdown"],
                load_avg=os.getloadavg()[0],
            )
        )
    print_table(
        rows,
        list(rows[0]),
        title="OnlineMPC driving MuJoCo (LGVI model, 1 iLQR iteration per tick)",
    )
    write_json("online_mpc", dict(machine=machine_info(), rows=rows))
    print(
        "breakdown (median µs, each part timed alone): compiled = the executable called "
        "directly; step = OnlineMPC.step; filter_jit = the former equinox.filter_jit path; "
        "former_step = the former OnlineMPC.step (its checks and time conversion around it)"
    )


def _log_so3(R):
    c = np.clip((np.trace(R) - 1) / 2, -1.0, 1.0)
    th = np.arccos(c)
    w = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    return w * (0.5 if th < 1e-8 else th / (2 * np.sin(th)))


if __name__ == "__main__":
    main()

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

The quadrotor section: crocoddyl's quadrotor written in MJCF (:func:`quadrotor_mjcf`: a free body,
four thrust actuators at the rotor sites, gravity, MuJoCo's RK4 at 3 ms), 10 % heavier than the
model geomjax plans with, flown by ``OnlineMPC`` (crocoddyl's thrust limits, 16 nodes of 0.03 s,
two iLQR iterations per tick) from rest at the origin to (2, 1, 1.5) and back along a
minimum-jerk reference: ticks per second, the latency percentiles of geomjax's part of a tick,
the compile time (the first tick) and the errors read from MuJoCo's state at the end of each leg,
beside a longer horizon, one iteration per tick and a step reference.

Run: ``geomjax bench online-mpc`` (``--fast``: fewer ticks and settings; ``--only attitude`` or
``--only quadrotor``: one section).  Needs ``pip install mujoco``.
"""

from __future__ import annotations

import argparse
import os

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
    from common import timer

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
    t_start = timer()
    for k in range(ticks):
        t0 = timer()
        R = _quat_to_matrix(data.qpos[3:7])
        omega = np.array(data.qvel[3:6])  # body frame (MuJoCo's free joint)
        x = gj.RigidBodyState(jnp.asarray(R), jnp.asarray(inertia * omega))
        u, plan = online.step(plan, x, k * dt)
        u = np.asarray(jax.device_get(u))
        data.xfrc_applied[body, 3:6] = R @ u  # the body torque in the world frame
        t1 = t0.elapsed
        if k == 0:
            first = t1
        else:
            latencies.append(t1)
        torques.append(u)
        for _ in range(SUBSTEPS):
            mujoco.mj_step(model, data)
    wall = t_start.elapsed
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


def _tick_breakdown(online, plan, x, t, repeats=300, make_state=None, only=None):
    """Median latencies (µs) of the parts of a tick, each timed ``repeats`` times from the same
    plan and state, the parts interleaved (each sees the same machine load): the compiled
    executable called directly (the computation and JAX's C++ dispatch), ``OnlineMPC.step``
    (its checks and signature look-up around that call), the former ``equinox.filter_jit`` path
    (the problem's pytree filtered every call) alone and with the checks and time conversion of
    the former ``OnlineMPC.step`` around it, building the state from MuJoCo's arrays, and
    reading ``u`` back to NumPy."""
    import jax
    import jax.numpy as jnp
    from common import measure_side_by_side

    import geomjax as gj
    from geomjax._internal.aot import array_signature as _signature
    from geomjax._internal.aot import structure as _structure
    from geomjax.control.mpc import _online_step

    steps = online._steps
    tt = np.asarray(t, online.problem.dtype)
    compiled = steps.program((_signature(plan), _signature(x)), plan, x, tt)
    tj = jnp.asarray(t, online.problem.dtype)
    if make_state is None:  # the attitude loop's state: a rigid body on SO(3)
        R, Pi = np.asarray(x.R), np.asarray(x.Pi)

        def make_state():
            return gj.RigidBodyState(jnp.asarray(R), jnp.asarray(Pi))

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
        make_state_us=make_state,
        read_u_us=lambda: np.asarray(jax.device_get(u)),
    )
    if only is not None:  # a subset (the filter_jit forms compile the step a second time)
        parts = {name: parts[name] for name in only}
    # a first call each, then interleaved rounds: every part sees the same load
    timed = measure_side_by_side(parts, rounds=repeats, block=False)
    return {name: 1e6 * t.run_s for name, t in timed.items()}


# --- the quadrotor: crocoddyl's example flown in MuJoCo ------------------------------------------
QUAD_TIMESTEP = 0.003  # MuJoCo's RK4 step (s); the control period 0.03 s is 10 steps
QUAD_SUBSTEPS = 10


def quadrotor_mjcf(mass=None, timestep=QUAD_TIMESTEP):
    """crocoddyl's quadrotor in MJCF: one free body (``mass``, default crocoddyl's 1.477 kg; its
    principal inertia about the centre of mass at the body origin), gravity 9.81 m/s² along −z,
    MuJoCo's RK4 at ``timestep``.  Four site actuators, one per rotor, at ``(±d, 0, 0)`` and
    ``(0, ±d, 0)`` (``d = d_cog``), each pushing along the body's z axis with the rotor's drag
    torque about it: ``gear = (0, 0, 1, 0, 0, ∓cm/cf)`` — thrust ``f_i`` makes the body wrench
    of :func:`~geomjax.control.examples.quadrotor_actuation`'s column ``i``.  ``ctrlrange``: the
    thrust limits ``[0.1, 5]`` N of the bounded problem."""
    from geomjax.control.examples import QUADROTOR as c

    m = c["mass"] if mass is None else float(mass)
    ix, iy, iz = c["inertia"]
    d, k = c["d_cog"], c["cm"] / c["cf"]
    # rotor i: position r_i, yaw reaction s_i k; r_i × f e_z = f (r_y, −r_x, 0)
    rotors = [((d, 0.0), -k), ((0.0, d), k), ((-d, 0.0), -k), ((0.0, -d), k)]
    sites = "\n".join(
        f'      <site name="rotor{i}" pos="{x!r} {y!r} 0" size="0.02"/>'
        for i, ((x, y), _) in enumerate(rotors, 1)
    )
    actuators = "\n".join(
        f'    <general name="thrust{i}" site="rotor{i}" gear="0 0 1 0 0 {s!r}" ctrllimited="true" '
        f'ctrlrange="{c["thrust_min"]!r} {c["thrust_max"]!r}"/>'
        for i, (_, s) in enumerate(rotors, 1)
    )
    return f"""
<mujoco model="quadrotor">
  <option timestep="{timestep!r}" gravity="0 0 {-c["gravity"]!r}" integrator="RK4"/>
  <worldbody>
    <body name="quadrotor">
      <freejoint/>
      <inertial pos="0 0 0" mass="{m!r}" diaginertia="{ix!r} {iy!r} {iz!r}"/>
      <geom type="box" size="{d!r} 0.02 0.01" contype="0" conaffinity="0"/>
      <geom type="box" size="0.02 {d!r} 0.01" contype="0" conaffinity="0"/>
{sites}
    </body>
  </worldbody>
  <actuator>
{actuators}
  </actuator>
</mujoco>
"""


def mujoco_pose(data):
    """MuJoCo's free-joint pose as a ``(4, 4)`` matrix ``[[R, x], [0, 1]]``."""
    g = np.eye(4)
    g[:3, :3] = _quat_to_matrix(data.qpos[3:7])
    g[:3, 3] = data.qpos[:3]
    return g


def mujoco_twist(data):
    """geomjax's body twist ``ξ = (ω, v)`` (left trivialized, both in the body frame) from
    MuJoCo's free-joint ``qvel``: its angular part is already the body's, its linear part is the
    world-frame velocity of the body origin, turned into the body frame by ``Rᵀ``."""
    R = _quat_to_matrix(data.qpos[3:7])
    return np.concatenate([data.qvel[3:6], R.T @ data.qvel[:3]])


def quadrotor_open_loop(thrusts, dt, mass=None, timestep=QUAD_TIMESTEP):
    """MuJoCo's quadrotor from rest at the origin under ``thrusts`` ``(n, 4)``, each held for
    ``dt`` (a multiple of ``timestep``): the poses ``(n + 1, 4, 4)`` and twists ``(n + 1, 6)``."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(quadrotor_mjcf(mass, timestep))
    data = mujoco.MjData(model)
    sub = round(dt / timestep)
    poses, twists = [mujoco_pose(data)], [mujoco_twist(data)]
    for u in np.asarray(thrusts, float):
        data.ctrl[:] = u
        for _ in range(sub):
            mujoco.mj_step(model, data)
        poses.append(mujoco_pose(data))
        twists.append(mujoco_twist(data))
    return np.stack(poses), np.stack(twists)


def _min_jerk(a, b, s):
    """The point at the fraction ``s`` (clipped to [0, 1]) of the minimum-jerk path from ``a``
    to ``b``: ``a + (b − a)(10 s³ − 15 s⁴ + 6 s⁵)`` (at rest at both ends)."""
    s = min(max(float(s), 0.0), 1.0)
    return a + (b - a) * (s**3 * (10 - 15 * s + 6 * s * s))


def black_box_quadrotor_problem(node, tracking_weight=1.0, horizon=16):
    """:func:`run_quadrotor_loop`'s planning problem (crocoddyl's residuals and weights, the
    target at the origin, thrusts in ``[0.1, 5]`` N, 0.03-s steps, ``horizon`` nodes) on a
    black box's flat state ``z = (vec R, x, ω, v)`` (18; a trained
    :class:`~geomjax.learn.NeuralODE` with four thrust inputs), stepped by
    :class:`~geomjax.learn.NeuralODEStep`.  The residuals are those of
    :func:`~geomjax.control.examples.quadrotor_problem` with the pose's logarithm replaced by
    ``(vee(skew R), x)``: equal to first order at the target, and defined for the black box's
    matrices, which leave SO(3)."""
    import jax.numpy as jnp

    from geomjax.control import OptimalControlProblem, ResidualCost
    from geomjax.control.examples import QUADROTOR
    from geomjax.learn import NeuralODEStep

    def pose(z):
        R = z[:9].reshape(3, 3)
        a = 0.5 * jnp.stack([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
        return jnp.concatenate([a, z[9:12]])

    def stage(t, z, u):
        p = pose(z)
        return jnp.concatenate([p, z[12:], u, p])

    w = jnp.asarray([1e-3] * 3 + [1e-7] * 3 + [1e-3] * 6 + [1e-6] * 4 + [1.0] * 6)
    w = w.at[-6:].multiply(tracking_weight)
    z0 = jnp.concatenate([jnp.eye(3).ravel(), jnp.zeros(9)])
    return OptimalControlProblem(
        node,
        NeuralODEStep(),
        z0,
        QUADROTOR["dt"],
        horizon,
        ResidualCost(stage, w),
        ResidualCost(pose, jnp.asarray(3.0), terminal=True),
        control_dim=4,
        lower=jnp.full(4, QUADROTOR["thrust_min"]),
        upper=jnp.full(4, QUADROTOR["thrust_max"]),
    )


def run_quadrotor_loop(
    waypoints=((2.0, 1.0, 1.5), (0.0, 0.0, 0.0)),
    seconds_per_leg=4.0,
    ramp=2.5,
    horizon=16,
    max_iters=2,
    tracking_weight=1.0,
    mass_scale=1.1,
    breakdown=True,
    model=None,
    black_box=None,
    method=None,
):
    """Fly MuJoCo's quadrotor (:func:`quadrotor_mjcf`, ``mass_scale`` × crocoddyl's mass: the
    plant 10 % heavier than the model by default) from rest at the origin through ``waypoints``
    with :class:`~geomjax.control.OnlineMPC` planning on crocoddyl's model (its mass, its
    thrust limits ``[0.1, 5]`` N, its semi-implicit Euler at 0.03 s, ``horizon`` nodes,
    ``max_iters`` iLQR iterations per tick, running pose weight ``tracking_weight``; the first
    plan: the model's hover thrusts).  Each leg lasts ``seconds_per_leg``; its reference moves
    from the previous waypoint to the next along a minimum-jerk path in ``ramp`` seconds
    (``ramp=0``: a step to the waypoint), then stays.

    One compiled program serves every reference point: the model's dynamics do not depend on
    where the quadrotor is (gravity's force is the same everywhere), so its problem targets the
    origin and each tick hands it the measured pose relative to the reference point ``w``:
    ``(R, x − w)``, with the body twist read from MuJoCo (:func:`mujoco_twist`) and the model's
    momentum ``(J ω, m v)``, handed to the step as NumPy arrays.

    Returns a dict: the final pose and twist read from MuJoCo's state, MuJoCo's position after
    every tick, the applied thrusts, each tick's solver status and stationarity, the latencies
    (s) of each tick after the first (read the state, solve, write the thrusts; MuJoCo's steps
    excluded), the first tick's time (compilation), the wall-clock rate, and MuJoCo's pose and
    body twist at every tick (``poses`` ``(ticks + 1, 4, 4)``, ``twists`` ``(ticks + 1, 6)``:
    records of the flight).

    ``model``: the model the controller plans with instead of crocoddyl's — anything with
    ``mass``, ``inertia`` ``(3, 3)``, ``system()`` and ``actuation()`` (e.g. an identified
    :class:`geomjax.learn.problems.QuadrotorModel`); MuJoCo's body stays ``mass_scale`` ×
    crocoddyl's.  ``black_box``: a trained :class:`~geomjax.learn.NeuralODE` on
    ``z = (vec R, x, ω, v)`` planned on instead (:func:`black_box_quadrotor_problem`; each tick
    hands it ``(vec R, x − w, ξ)`` read from MuJoCo).  ``method``: the model's one-step method
    (default crocoddyl's semi-implicit Euler), e.g. an
    :class:`~geomjax.learn.InputMapped` LGVI with a learned wrench map.  A tick whose plan is not finite applies
    the nominal hover thrusts and counts in ``nonfinite_ticks``."""
    import jax
    import jax.numpy as jnp
    import mujoco
    from common import timer

    import geomjax as gj
    from geomjax.control import ILQR, MPC, OnlineMPC
    from geomjax.control.examples import QUADROTOR, quadrotor_problem

    dtype = jnp.float64
    if model is None:
        system, actuation = None, None
        m_model = float(QUADROTOR["mass"])
        J = np.diag(QUADROTOR["inertia"])
    else:
        system, actuation = model.system(), model.actuation()
        m_model = float(model.mass)
        J = np.asarray(model.inertia, float)
    if black_box is None:
        problem = quadrotor_problem(
            bounded=True,
            target=(0.0, 0.0, 0.0),
            tracking_weight=tracking_weight,
            dtype=dtype,
            system=system,
            actuation=actuation,
            method=method,
        )
    else:
        problem = black_box_quadrotor_problem(black_box, tracking_weight, horizon)
    m_plant = mass_scale * float(QUADROTOR["mass"])
    online = OnlineMPC(problem, MPC(ILQR(), max_iters=max_iters, horizon=horizon))
    n = horizon or int(problem.steps)
    hover = m_model * QUADROTOR["gravity"] / 4  # the model's hover thrust: the first plan
    plan = online.init(jnp.full((n, 4), hover, dtype))
    model = mujoco.MjModel.from_xml_string(quadrotor_mjcf(m_plant))
    data = mujoco.MjData(model)
    dt = float(problem.dt)
    assert abs(dt - QUAD_SUBSTEPS * model.opt.timestep) < 1e-12
    ticks_per_leg = round(seconds_per_leg / dt)
    waypoints = np.asarray(waypoints, float)
    latencies, thrusts, positions, legs = [], [], [np.array(data.qpos[:3])], []
    poses, twists = [mujoco_pose(data)], [mujoco_twist(data)]
    health = []  # each tick's (status, stationarity), read back after the loop
    nonfinite = 0
    first = None
    k = 0
    t_start = timer()
    start = np.array(data.qpos[:3])
    for leg, goal in enumerate(waypoints):
        for j in range(ticks_per_leg):
            t0 = timer()
            w = _min_jerk(start, goal, j * dt / ramp if ramp > 0 else 1.0)
            g = mujoco_pose(data)
            g[:3, 3] -= w  # relative to the waypoint: the model's target is the origin
            xi = mujoco_twist(data)
            if black_box is None:
                mu = np.concatenate([J @ xi[:3], m_model * xi[3:]])  # the model's momentum
                # NumPy arrays go to the compiled step as they are (no jnp.asarray: ~0.1 ms)
                x = gj.LieGroupState(g, mu)
            else:
                x = np.concatenate([g[:3, :3].ravel(), g[:3, 3], xi])
            u, plan = online.step(plan, x, k * dt)
            u = np.asarray(jax.device_get(u))
            if not np.all(np.isfinite(u)):
                nonfinite += 1
                u = np.full(4, hover)
            data.ctrl[:] = u
            t1 = t0.elapsed
            if first is None:
                first = t1
            else:
                latencies.append(t1)
            thrusts.append(u)
            legs.append(leg)
            health.append((plan.status, plan.stationarity))
            for _ in range(QUAD_SUBSTEPS):
                mujoco.mj_step(model, data)
            positions.append(np.array(data.qpos[:3]))
            poses.append(mujoco_pose(data))
            twists.append(mujoco_twist(data))
            k += 1
        start = goal
    wall = t_start.elapsed
    parts = {}
    if breakdown and black_box is None:  # after the loop: the last tick's parts timed alone
        g_now, mu_now = np.asarray(x.g), np.asarray(x.mu)
        parts = _tick_breakdown(
            online,
            plan,
            x,
            (k - 1) * dt,
            make_state=lambda: gj.LieGroupState(g_now, mu_now),
            only=("compiled_us", "step_us", "make_state_us", "read_u_us"),
        )
    return dict(
        breakdown=parts,
        pose=mujoco_pose(data),
        twist=mujoco_twist(data),
        positions=np.stack(positions),
        legs=np.asarray(legs),
        waypoints=waypoints,
        thrusts=np.asarray(thrusts),
        latencies=np.asarray(latencies),
        first_tick=first,
        ticks_per_s=(k - 1) / (wall - first),
        dt=dt,
        ticks_per_leg=ticks_per_leg,
        status=np.asarray([int(h[0]) for h in health]),
        stationarity=np.asarray([float(h[1]) for h in health]),
        mass=(m_model, m_plant),
        nonfinite_ticks=nonfinite,
        poses=np.stack(poses),
        twists=np.stack(twists),
    )


def main(argv=None):
    import jax

    jax.config.update("jax_enable_x64", True)
    from common import machine_info, write_json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true")
    ap.add_argument(
        "--only", choices=("attitude", "quadrotor"), help="run one section (default: both)"
    )
    args = ap.parse_args(argv)
    if args.only in (None, "attitude"):
        rows = attitude_section(100 if args.fast else 400)
        write_json("online_mpc", dict(machine=machine_info(), rows=rows))
    if args.only in (None, "quadrotor"):
        rows = quadrotor_section(args.fast)
        write_json("online_mpc_quadrotor", dict(machine=machine_info(), rows=rows))


def attitude_section(ticks):
    from common import print_table

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
    print(
        "breakdown (median µs, each part timed alone): compiled = the executable called "
        "directly; step = OnlineMPC.step; filter_jit = the former equinox.filter_jit path; "
        "former_step = the former OnlineMPC.step (its checks and time conversion around it)"
    )
    return rows


def quadrotor_section(fast=False):
    """The quadrotor flown to (2, 1, 1.5) and back by :func:`run_quadrotor_loop`, MuJoCo's body
    10 % heavier than the model: the default settings (16 nodes, 2 iLQR iterations per tick,
    a 2.5 s minimum-jerk reference) and, unless ``fast``, the 33-node horizon, one iteration
    per tick and a step reference beside them."""
    from common import print_table

    from geomjax.control.mpc import STALL_TOL
    from geomjax.control.status import MAX_ITERS

    settings = [dict(horizon=16, max_iters=2, ramp=2.5)]
    if not fast:
        settings += [
            dict(horizon=33, max_iters=2, ramp=2.5),
            dict(horizon=16, max_iters=1, ramp=2.5),
            dict(horizon=16, max_iters=2, ramp=0.0),
        ]
    rows = []
    for kw in settings:
        r = run_quadrotor_loop(**kw)
        n, W, P = r["ticks_per_leg"], r["waypoints"], r["positions"]
        miss = np.linalg.norm(P[1:] - W[r["legs"]], axis=1)  # MuJoCo's position vs the waypoint
        lat = r["latencies"] * 1e3
        settle = []
        for leg in range(len(W)):
            d = miss[leg * n : (leg + 1) * n]
            out = np.nonzero(d >= 0.02)[0]
            settle.append(
                None
                if out.size and out[-1] == n - 1
                else round(float((out[-1] + 1 if out.size else 0) * r["dt"]), 3)
            )
        stalled = (r["status"] == MAX_ITERS) & (r["stationarity"] > STALL_TOL)
        rows.append(
            dict(
                horizon=kw["horizon"],
                max_iters=kw["max_iters"],
                ramp_s=kw["ramp"],
                ticks=len(r["thrusts"]),
                compile_s=r["first_tick"],
                ticks_per_s=r["ticks_per_s"],
                mean_ms=float(lat.mean()),
                p50_ms=float(np.percentile(lat, 50)),
                p99_ms=float(np.percentile(lat, 99)),
                max_ms=float(lat.max()),
                leg1_error_mm=1e3 * float(miss[n - 1]),
                final_error_mm=1e3 * float(np.linalg.norm(r["pose"][:3, 3] - W[-1])),
                final_tilt_deg=float(np.degrees(np.linalg.norm(_log_so3(r["pose"][:3, :3])))),
                final_speed=float(np.linalg.norm(r["twist"])),
                within_2cm_after_s=settle,
                lowest_z=float(P[:, 2].min()),
                thrust_min=float(r["thrusts"].min()),
                thrust_max=float(r["thrusts"].max()),
                hover_thrust_sum=float(r["thrusts"][-1].sum()),
                stalled_ticks=int(stalled.sum()),
                failed_ticks=int((r["status"] > MAX_ITERS).sum()),
                **r["breakdown"],
                load_avg=os.getloadavg()[0],
            )
        )
    print_table(
        rows,
        [c for c in rows[0] if c not in ("hover_thrust_sum",)],
        title="OnlineMPC flying MuJoCo's quadrotor (10 % heavier than the model) to (2, 1, 1.5) "
        "and back",
    )
    m_model, m_plant = r["mass"]
    print(
        f"model mass {m_model} kg, MuJoCo's body {m_plant:.4g} kg; latencies: geomjax's part of a "
        "tick (read MuJoCo's state, solve, write the thrusts); compile_s: the first tick; "
        "within_2cm_after_s: per leg, from the leg's start (None: not at the end); breakdown "
        "(median µs, the last tick's parts timed alone): compiled = the executable called "
        "directly, step = OnlineMPC.step, make_state = the state from MuJoCo's arrays, read_u = "
        "the thrusts back to NumPy"
    )
    return rows


def _log_so3(R):
    c = np.clip((np.trace(R) - 1) / 2, -1.0, 1.0)
    th = np.arccos(c)
    w = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    return w * (0.5 if th < 1e-8 else th / (2 * np.sin(th)))


if __name__ == "__main__":
    main()

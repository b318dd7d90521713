"""OnlineMPC driving MuJoCo's C simulator (benchmarks/bench_online_mpc.py's loops), checked in
MuJoCo's own state.

A rigid body written in MJCF, stepped by ``mj_step`` in C, its attitude controlled tick by tick:
the body ends at the target attitude, at rest; at rest at the target the applied torque vanishes.

crocoddyl's quadrotor written in MJCF (four site actuators): open loop, MuJoCo's RK4 agrees with
an independent DOP853 solution of the Newton–Euler equations through geomjax's thrust map, to
RK4's order, and (long tier) with geomjax's own RKMK4 of the model; closed loop, flown by OnlineMPC on a
model 10 % lighter than MuJoCo's body to (2, 1, 1.5) and back: MuJoCo's body ends at each
waypoint within 2 cm, at rest, its four thrusts holding up MuJoCo's weight (not the model's),
every thrust within the limits."""

import importlib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mujoco")
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("bench_online_mpc")


@pytest.mark.long
def test_online_mpc_brings_mujoco_body_to_the_target(monkeypatch):
    bench = _bench(monkeypatch)
    r = bench.run_mujoco_loop(ticks=250, horizon=30)
    err = bench._log_so3(r["target"].T @ r["R"])  # MuJoCo's final attitude against R*
    assert np.linalg.norm(err) < 1e-2
    assert np.linalg.norm(r["omega"]) < 1e-2
    assert np.abs(r["torques"]).max() <= 2.0  # the model's torque limits hold on the plant
    assert np.linalg.norm(r["torques"][-1]) < 0.05  # near rest at the target: ~no torque
    # the first ticks are far from the target: the controller acts (it is not a no-op)
    assert np.abs(r["torques"][:10]).max() > 0.5


def test_mujoco_quadrotor_input_map_matches_the_model(monkeypatch):
    pytest.importorskip("scipy")
    from geomjax.control.examples import QUADROTOR, quadrotor_actuation
    from geomjax.learn.reference import se3_reference

    bench = _bench(monkeypatch)
    rng = np.random.default_rng(0)
    dt, n = 0.03, 10
    thrusts = 3.7 + rng.uniform(-0.5, 0.5, (n, 4))  # unequal: roll, pitch and yaw torques
    B = np.asarray(quadrotor_actuation())
    ts = dt * np.arange(n + 1)
    g_ref, xi_ref = se3_reference(
        QUADROTOR["mass"], QUADROTOR["inertia"], np.eye(4), np.zeros(6), ts,
        input_map=B, controls=thrusts,
    )  # fmt: skip
    errors = []
    for h in (0.003, 0.0015):
        g, xi = bench.quadrotor_open_loop(thrusts, dt, timestep=h)
        errors.append(max(np.abs(g - g_ref).max(), np.abs(xi - xi_ref).max()))
    assert np.abs(g_ref[-1, :3, 3] - [0, 0, 0]).max() > 5e-3  # it moved
    assert np.linalg.norm(xi_ref[-1, :3]) > 0.1  # and turned
    assert errors[0] < 1e-8
    assert 10 < errors[0] / errors[1] < 22  # RK4's order: 16 per halving


@pytest.mark.long
def test_mujoco_quadrotor_matches_geomjax_rkmk4(monkeypatch):
    import jax
    import jax.numpy as jnp

    import geomjax as gj
    from geomjax.control.examples import quadrotor_actuation, quadrotor_system
    from geomjax.control.trajopt import Actuated

    bench = _bench(monkeypatch)
    dt = 0.03
    thrusts = 3.7 + np.random.default_rng(0).uniform(-0.5, 0.5, (10, 4))
    # geomjax's own body and thrust map, stepped by RKMK4 at MuJoCo's step
    B = np.asarray(quadrotor_actuation())
    system = quadrotor_system(dtype=jnp.float64)
    method = Actuated(gj.RKMK4(), jnp.asarray(B))

    @jax.jit
    def rollout(us):
        def control(x, u):
            def sub(x, _):
                return method.step(system, x, 0.003, u)[0], None

            x = jax.lax.scan(sub, x, None, length=10)[0]
            return x, (x.g, system.velocity(x.mu))

        x0 = gj.LieGroupState(jnp.eye(4), jnp.zeros(6))
        return jax.lax.scan(control, x0, us)[1]

    g_gj, xi_gj = map(np.asarray, rollout(jnp.asarray(thrusts, jnp.float64)))
    g, xi = bench.quadrotor_open_loop(thrusts, dt, timestep=0.003)
    assert np.abs(g_gj - g[1:]).max() < 1e-8
    assert np.abs(xi_gj - xi[1:]).max() < 1e-8


@pytest.mark.long
def test_online_mpc_flies_mujoco_quadrotor_there_and_back(monkeypatch):
    bench = _bench(monkeypatch)
    from geomjax.control.examples import QUADROTOR

    r = bench.run_quadrotor_loop(breakdown=False)  # the plant 10 % heavier than the model
    n, W, P = r["ticks_per_leg"], r["waypoints"], r["positions"]
    assert np.allclose(W, [[2.0, 1.0, 1.5], [0.0, 0.0, 0.0]])
    assert r["mass"][1] == pytest.approx(1.1 * QUADROTOR["mass"])
    # read from MuJoCo's state: at the end of each leg within 2 cm of its waypoint
    assert np.linalg.norm(P[n] - W[0]) < 0.02
    assert np.linalg.norm(r["pose"][:3, 3] - W[1]) < 0.02
    # and it flew there: halfway through the first leg it was far from both waypoints
    assert np.linalg.norm(P[n // 2] - W[0]) > 0.3 and np.linalg.norm(P[n // 2]) > 0.3
    # at rest, level
    assert np.linalg.norm(r["twist"][:3]) < 0.05 and np.linalg.norm(r["twist"][3:]) < 0.05
    assert np.linalg.norm(bench._log_so3(r["pose"][:3, :3])) < np.radians(1.0)
    # every thrust within crocoddyl's limits; hovering, they hold MuJoCo's weight (1.1 m g)
    assert r["thrusts"].min() >= QUADROTOR["thrust_min"] - 1e-9
    assert r["thrusts"].max() <= QUADROTOR["thrust_max"] + 1e-9
    # the impulse over the last 0.5 s, at rest at both ends: the mean thrust holds the weight
    # (one tick's thrusts chatter by ~10 % about it; |Δv| < 0.05 m/s over the window bounds the
    # imbalance by 1.1 m · 0.05 / 0.5 ≈ 0.16 N, 1 % of the weight)
    weight = r["mass"][1] * QUADROTOR["gravity"]
    last = r["thrusts"][-round(0.5 / 0.03) :].sum(1)
    assert last.mean() == pytest.approx(weight, rel=0.02)
    assert (r["status"][1:] <= 1).all()  # no failed solve (the cap is normal in MPC)

"""Model predictive control (geomjax.control.mpc): attitude regulation of a rigid body whose inertia
is 20% larger than the model's, under a constant disturbance torque.  Independent references: the
open-loop optimal torques applied to the same plant (the comparison), the plant's equilibrium
(at rest the applied torque must cancel the disturbance exactly: Euler's equations), the offset
predicted by the solver's feedback gain at the target, and a re-simulation of the recorded
controls by :func:`geomjax.simulate`."""

import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax import SO3
from geomjax.control.examples import attitude_problem
from geomjax.control.mpc import MPC, MPCResult, _retarget, _with_horizon, run_mpc
from geomjax.control.trajopt import ILQR, LieGroupChart, solve_ocp
from geomjax.integrators import SemiImplicitEuler
from geomjax.integrators.simulate import ConvergenceError

FULL = os.environ.get("GEOMJAX_FULL", "0") == "1"
H, DT, STEPS, TMAX = 12, 0.25, 100, 0.8
INERTIA = jnp.array([1.0, 2.0, 3.0])
D = jnp.array([0.05, -0.03, 0.04])  # constant disturbance torque


class Constant(eqx.Module):
    """``d(t) = value`` (an array field: a new value does not recompile)."""

    value: jax.Array

    def __call__(self, t):
        return self.value


def _model():
    # the model: explicit semi-implicit Euler (cheap to compile), 3 s horizon, torque limits 0.8
    return attitude_problem(
        torque_max=TMAX,
        exact_target=False,
        steps=H,
        duration=H * DT,
        method=SemiImplicitEuler(),
        weight=100.0,
    )


@pytest.fixture(scope="module")
def closed_loop():
    model = _model()
    plant = gj.RigidBody(1.2 * INERTIA)  # 20% inertia error
    plant_method = gj.RKMK4()  # and another integrator
    plan = solve_ocp(model, ILQR(), max_iters=100)  # the open-loop optimum (and the warm start)
    plan.check()
    traces = []

    @jax.jit
    def run(disturbances):
        traces.append(1)
        return jax.vmap(
            lambda d: run_mpc(
                model,
                plant,
                plant_method,
                None,
                STEPS,
                Constant(d),
                controller=MPC(ILQR(), max_iters=2),
                controls=plan.controls,
            )
        )(disturbances)

    ds = jnp.stack([D, jnp.zeros(3)])
    res = run(ds)
    res2 = run(ds[::-1])  # new values, same program
    jaxpr = jax.make_jaxpr(
        lambda d: run_mpc(
            model, plant, plant_method, None, STEPS, Constant(d), controller=MPC(max_iters=2)
        )
    )(D)
    return dict(
        model=model,
        plant=plant,
        method=plant_method,
        plan=plan,
        res=res,
        res2=res2,
        traces=len(traces),
        jaxpr=jaxpr,
    )


def _final(tree, i):
    return jax.tree_util.tree_map(lambda a: a[i, -1], tree)


@pytest.mark.long
def test_mpc_rejects_model_error_and_disturbance(closed_loop):
    c = closed_loop
    model, res = c["model"], c["res"]
    target = model.terminal_cost.residual.target
    x_target = gj.RigidBodyState(target, jnp.zeros(3))

    # the open-loop optimal torques (then none) on the same plant with the same disturbance
    u_open = jnp.concatenate([c["plan"].controls, jnp.zeros((STEPS - H, 3))])
    xf_open = gj.simulate(c["plant"], c["method"], model.state0, DT, STEPS, controls=u_open + D)
    err_open_t = jax.vmap(lambda x: jnp.linalg.norm(model.terminal_cost.residual(x)))(
        xf_open.states
    )
    err_open, closest_open = float(err_open_t[-1]), float(err_open_t.min())

    # bounds respected exactly (the solver clips), and active at the start of the manoeuvre
    u = np.asarray(res.controls)
    assert np.abs(u).max() <= TMAX and np.isclose(np.abs(u).max(), TMAX)

    # without disturbance the inertia error alone is rejected: MPC's fixed point is the target
    # at rest (the optimal control there is zero); after 25 s the error has decayed to ~1e-6
    assert float(res.error[1, -1]) <= 1e-4

    # with the disturbance: the plant settles at rest, where Euler's equations force the applied
    # torque to cancel the disturbance (net torque zero) — the controls converge to −d
    xf = _final(res.states, 0)
    rate = np.linalg.norm(np.asarray(c["plant"].velocity(xf.Pi)))
    assert rate <= 1e-5
    np.testing.assert_allclose(u[0, -1], -np.asarray(D), atol=1e-5)
    # ...at the offset where the model's optimal first control is −d.  To first order that is
    # u = K_η η (the solver's feedback gain at the target, from rest there): η = −K_η⁻¹ d.
    at_target = solve_ocp(eqx.tree_at(lambda p: p.state0, model, x_target), ILQR(), max_iters=100)
    eta_pred = -np.linalg.solve(np.asarray(at_target.K[0][:, :3]), np.asarray(D))
    eta = np.asarray(LieGroupChart().minus(model.system, xf, x_target))[:3]
    # second-order terms: relative error O(|η|) with |η| ≈ 0.09 (measured 4.5%)
    assert np.linalg.norm(eta - eta_pred) <= 0.15 * np.linalg.norm(eta_pred)
    # a small bound, far below the open loop's miss (measured 0.09 against 1.4 at the end)
    err = float(res.error[0, -1])
    assert err <= 1.2 * np.linalg.norm(eta_pred)
    assert err <= 0.1 * err_open
    assert err <= 0.5 * closest_open  # the open loop never comes as close (measured 0.39 at t≈4)

    # status: every step reported; warm-started from the converged plan the first solve converges;
    # during the manoeuvre two iterations do not reach the tolerance (reported as max_iters);
    # none broke down
    assert res.status.shape == (2, STEPS) and res.iterations.shape == (2, STEPS)
    assert not np.asarray(res.failed).any()
    assert np.all(np.asarray(res.status[:, 0]) == 0)
    assert np.all(np.asarray(res.status[:, 1:10]) == 1)
    assert np.all(np.asarray(res.iterations) <= 2)
    assert np.all(np.isfinite(np.asarray(res.cost)))
    # and neither loop is flagged (one flag per member of the batch): both converge, to the
    # target or to the disturbance's offset (checked above on the plant)
    assert np.asarray(res.healthy).tolist() == [True, True]
    assert np.asarray(res.stationarity).shape == (2, STEPS)

    # the recorded states are the plant driven by the recorded controls plus the disturbance
    replay = gj.simulate(c["plant"], c["method"], model.state0, DT, STEPS, controls=u[0] + D)
    np.testing.assert_allclose(replay.final_state.R, xf.R, atol=1e-10)


@pytest.mark.long
def test_mpc_compiles_once_as_one_scan(closed_loop):
    c = closed_loop
    assert c["traces"] == 1
    # the second call (disturbances swapped) ran the same program
    np.testing.assert_array_equal(c["res2"].controls[1], c["res"].controls[0])
    top = [e.primitive.name for e in c["jaxpr"].jaxpr.eqns]
    inner = [e for e in c["jaxpr"].jaxpr.eqns if e.primitive.name in ("pjit", "jit")]
    names = top + [q.primitive.name for e in inner for q in e.params["jaxpr"].jaxpr.eqns]
    assert names.count("scan") == 1 and "while" not in names  # the solves live in the scan


def test_bad_input_names_the_argument():
    model = _model()
    with pytest.raises(ValueError, match="'steps'"):
        run_mpc(model, steps=0)
    with pytest.raises(ValueError, match="'warn'"):
        run_mpc(model, steps=3, warn="yes")
    with pytest.raises(ValueError, match="'horizon'"):
        MPC(horizon=0)
    with pytest.raises(ValueError, match="'max_iters'"):
        MPC(max_iters=0)
    with (
        pytest.warns(DeprecationWarning, match="'state0'"),
        pytest.raises(ValueError, match="'x0'"),  # named as the caller passed it
    ):
        run_mpc(model, x0=gj.RigidBodyState(jnp.eye(3), jnp.zeros(4)), steps=3)
    with pytest.raises(ValueError, match="'state0'"):
        run_mpc(model, state0=gj.RigidBodyState(jnp.eye(3), jnp.zeros(4)), steps=3)
    with pytest.raises(ValueError, match="'disturbance'"):
        run_mpc(model, steps=3, disturbance=lambda t: jnp.zeros(2))
    with pytest.raises(ValueError, match="'error'"):
        run_mpc(model, steps=3, error=lambda t, x: x.Pi)
    with pytest.raises(ValueError, match="'controls'"):
        run_mpc(model, steps=3, controls=jnp.zeros((H + 1, 3)))
    with pytest.raises(ValueError, match="'problem'"):
        run_mpc(attitude_problem(steps=4, method=SemiImplicitEuler()), steps=3)


def test_traced_checks_run_once_per_signature():
    """run_mpc's traced checks (a plant step, the error function) are remembered per signature:
    the same structure and shapes skip the check, anything else, a new function included, runs
    it again, and a failing check is never remembered."""
    from geomjax._internal.aot import checked_once as _checked_once

    calls = []

    def ok():
        calls.append(1)

    a = (jnp.zeros(3), jnp.ones((2, 2)))
    _checked_once("test", a, ok)
    _checked_once("test", (jnp.ones(3), jnp.zeros((2, 2))), ok)  # other values: same signature
    assert len(calls) == 1
    _checked_once("test", (jnp.zeros(4), jnp.ones((2, 2))), ok)  # another shape
    _checked_once("test", (jnp.zeros(3, jnp.float32), jnp.ones((2, 2))), ok)  # another dtype
    assert len(calls) == 3
    f, g = (lambda t, x: x), (lambda t, x: x)
    _checked_once("test", (f, a), ok)
    _checked_once("test", (f, a), ok)
    _checked_once("test", (g, a), ok)  # a new function is checked again
    assert len(calls) == 5

    def bad():
        calls.append(1)
        raise ValueError("bad")

    for _ in range(2):
        with pytest.raises(ValueError, match="bad"):
            _checked_once("test-bad", a, bad)
    assert len(calls) == 7
    # through run_mpc: a wrong error function after a checked call is still named
    model = _model()
    with pytest.raises(ValueError, match="'error'"):
        run_mpc(model, steps=3, error=lambda t, x: x.Pi)
    with pytest.raises(ValueError, match="'error'"):
        run_mpc(model, steps=3, error=lambda t, x: x.Pi)


def test_retarget_shifts_time_and_state_and_horizon():
    """The re-targeted problem starts at the measured state and sees absolute time in its stage
    cost and dynamics (a time-dependent reference), and ``MPC(horizon=...)`` changes only N."""

    class Tracking(eqx.Module):
        def __call__(self, t, x, u):
            return jnp.sum((x.Pi - jnp.sin(t)) ** 2) + jnp.sum(u**2)

    model = _model()
    model = eqx.tree_at(lambda p: p.stage_cost, model, Tracking())
    x = gj.RigidBodyState(jnp.eye(3), jnp.array([0.1, 0.2, 0.3]))
    u, t0 = jnp.array([0.3, -0.1, 0.2]), 1.7
    p = _retarget(model, x, jnp.asarray(t0))
    np.testing.assert_array_equal(p.state0.Pi, x.Pi)
    np.testing.assert_allclose(p.stage_cost(0.5, x, u), Tracking()(0.5 + t0, x, u), rtol=1e-15)
    np.testing.assert_allclose(p.step(x, u, 0.5).Pi, model.step(x, u, 0.5 + t0).Pi, rtol=1e-15)
    q = _with_horizon(model, 5)
    assert q.steps == 5 and q.bounded and float(q.dt) == float(model.dt)
    np.testing.assert_array_equal(q.upper, model.upper)


def test_check_reports_a_failed_step():
    z = jnp.zeros(3)
    res = MPCResult(z, None, z, z, jnp.array([0, 1, 2]), z, z, z)
    with pytest.raises(ConvergenceError, match="control step 2"):
        res.check()
    assert list(res.stop_reasons) == ["converged", "max_iters", "regularization_limit"]


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="GEOMJAX_FULL=1 runs the float32 closed loop")
def test_float32_closed_loop_matches_float64(closed_loop):
    """The same closed loop in float32 (the precision of an accelerator): it settles at the same
    offset (float32's solver tolerance 1e-5 moves the plan by ~1e-3, see test_trajopt)."""
    model = attitude_problem(
        torque_max=TMAX,
        exact_target=False,
        steps=H,
        duration=H * DT,
        method=SemiImplicitEuler(),
        weight=100.0,
        dtype=jnp.float32,
    )
    plant = gj.RigidBody(1.2 * INERTIA.astype(jnp.float32))
    plan = solve_ocp(model, ILQR(), max_iters=100)
    res = run_mpc(
        model,
        plant,
        gj.RKMK4(),
        None,
        STEPS,
        Constant(D.astype(jnp.float32)),
        controller=MPC(ILQR(), max_iters=2),
        controls=plan.controls,
    )
    assert res.controls.dtype == jnp.float32
    assert not np.asarray(res.failed).any()
    assert np.abs(np.asarray(res.controls)).max() <= np.float32(TMAX)
    np.testing.assert_allclose(
        float(res.error[-1]), float(closed_loop["res"].error[0, -1]), rtol=1e-2
    )
    np.testing.assert_allclose(np.asarray(res.controls[-1]), -np.asarray(D), atol=1e-3)


# --- a closed loop that says when it goes wrong ----------------------------------------------------
# a small model (4 nodes of 0.5 s: compiled in a few seconds) and one iteration per step; the
# disturbances are array fields of one module, so the four runs are one program
SMALL_H, SMALL_DT, SMALL_STEPS = 4, 0.5, 40


def _small_model():
    return attitude_problem(
        torque_max=TMAX,
        exact_target=False,
        steps=SMALL_H,
        duration=SMALL_H * SMALL_DT,
        method=SemiImplicitEuler(),
        weight=100.0,
    )


def _small_run(d, iterations=1, steps=SMALL_STEPS):
    """The small closed loop on the 20 % heavier plant under the constant torque ``d``, with the
    warnings it raised."""
    import warnings

    model = _small_model()
    plant = gj.RigidBody(1.2 * INERTIA)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run_mpc(
            model,
            plant,
            SemiImplicitEuler(),
            None,
            steps,
            Constant(jnp.asarray(d, jnp.float64)),
            controller=MPC(ILQR(), max_iters=iterations),
        )
    return model, plant, res, [w for w in caught if issubclass(w.category, UserWarning)]


def _plant_miss(model, plant, x):
    """The attitude error (rad) and body rate of a plant state, from the state itself."""
    target = model.terminal_cost.residual.target
    angle = float(jnp.linalg.norm(SO3.log(target.T @ x.R)))
    return angle, float(jnp.linalg.norm(plant.velocity(x.Pi)))


def _last(tree):
    return jax.tree_util.tree_map(lambda a: a[-1], tree)


def test_healthy_loops_are_not_flagged():
    """A loop that converges to the target, and one that settles at an offset under a constant
    disturbance the bounds can hold, are healthy: no flag, no warning, check() passes.  What is
    claimed is read from the plant: at the target at rest, or at rest where the applied torque
    cancels the disturbance (Euler's equations at rest: net torque zero)."""
    model, plant, res, caught = _small_run(jnp.zeros(3))
    angle, rate = _plant_miss(model, plant, _last(res.states))
    assert angle <= 1e-4 and rate <= 1e-4  # measured 4.5e-7 rad
    assert bool(res.healthy) and not bool(res.diverging) and not bool(res.stalling)
    assert not caught
    assert res.check() is res
    assert "healthy" in res.summary() and "NOT" not in res.summary()
    # the first solves of the cold start are far from stationary; they do not count
    assert np.asarray(res.stationarity).shape == (SMALL_STEPS,)

    d = jnp.array([0.05, -0.03, 0.04])
    model, plant, res, caught = _small_run(d)
    _, rate = _plant_miss(model, plant, _last(res.states))
    assert rate <= 1e-5
    np.testing.assert_allclose(np.asarray(res.controls[-1]), -np.asarray(d), atol=1e-5)
    assert bool(res.healthy) and not caught
    res.check()


def test_a_loop_that_goes_wrong_is_reported():
    """A disturbance beyond the torque limit (1.2 about the third axis, limit 0.8: no control
    holds the plant at rest) drives the plant away: flagged as diverging, one warning naming it
    and what to change, check() raises.  A disturbance the bounds can hold but one iteration per
    step cannot follow ((0.5, 0.5, 0.5)) leaves the solves far from stationary: flagged as
    stalling."""
    model, plant, res, caught = _small_run(jnp.array([0.0, 0.0, 1.2]))
    angle0, _ = _plant_miss(model, plant, model.state0)
    angle, rate = _plant_miss(model, plant, _last(res.states))
    assert rate >= 0.1  # not at rest: no admissible torque cancels the disturbance
    assert np.hypot(angle, rate) > angle0  # farther from the target at rest than at the start
    assert bool(res.diverging) and not bool(res.healthy)
    assert len(caught) == 1
    msg = str(caught[0].message)
    assert "moving away" in msg and "iterations" in msg and "model" in msg
    assert caught[0].filename == __file__  # attributed to the caller's line
    with pytest.raises(ConvergenceError, match="moving away"):
        res.check()
    assert "NOT healthy" in res.summary()

    model, plant, res, caught = _small_run(jnp.array([0.5, 0.5, 0.5]))
    assert bool(res.stalling) and not bool(res.healthy)
    assert len(caught) == 1 and "far from stationary" in str(caught[0].message)
    stalled = np.asarray(res.stalled)
    assert stalled.sum() > SMALL_STEPS // 4
    assert np.all(np.asarray(res.status)[stalled] == 1)  # capped solves, not failures
    assert not np.asarray(res.failed).any()

    # warn=False: the same flags, no warning
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = run_mpc(
            _small_model(),
            plant,
            SemiImplicitEuler(),
            None,
            SMALL_STEPS,
            Constant(jnp.array([0.5, 0.5, 0.5])),
            controller=MPC(ILQR(), max_iters=1),
            warn=False,
        )
    assert bool(quiet.stalling)

    # the flags are arrays: under jit, and for a batch (one flag per member)
    _, _, good, _ = _small_run(jnp.zeros(3))
    batch = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), good, quiet)
    flags = jax.jit(lambda r: (r.healthy, r.diverging, r.stalling, r.stalled))(batch)
    assert flags[0].tolist() == [True, False] and flags[2].tolist() == [False, True]
    assert flags[1].tolist() == [False, False] and flags[3].shape == (2, SMALL_STEPS)
    np.testing.assert_array_equal(flags[3][1], quiet.stalled)
    assert "2 runs" in batch.summary()


def test_plant_method_of_an_actuated_model():
    """An actuated model (the quadrotor: rotor thrusts through B) takes commands: a plain plant
    method, which takes the body force, is wrapped in the model's actuation; an Actuated one is
    the user's choice; a method that fits neither is refused with the fix."""
    from geomjax.control.examples import quadrotor_problem, quadrotor_system
    from geomjax.control.mpc import _actuated_plant
    from geomjax.control.trajopt import Actuated

    p = quadrotor_problem()
    plant = quadrotor_system(mass_scale=1.1)
    wrapped = _actuated_plant("run_mpc", p, plant, gj.RKMK4())
    assert isinstance(wrapped, Actuated) and isinstance(wrapped.method, gj.RKMK4)
    assert wrapped.matrix is p.method.matrix
    assert wrapped.control_shape(plant) == (4,)
    own = Actuated(gj.RKMK4(), 2.0 * p.method.matrix)
    assert _actuated_plant("run_mpc", p, plant, own) is own
    # a model without actuation: the plant method as given
    assert isinstance(
        _actuated_plant("run_mpc", _model(), gj.RigidBody(INERTIA), gj.RKMK4()), gj.RKMK4
    )
    with pytest.raises(ValueError, match=r"'plant_method'.*gj\.Actuated\(RKMK4\(\), B\)"):
        run_mpc(p, gj.RigidBody(INERTIA), gj.RKMK4(), steps=3)


# --- the quadrotor on a heavier plant (the control guide's MPC section) ----------------------------
QUAD_TARGET = np.array([2.0, 1.0, 1.5])


@pytest.mark.long
def test_quadrotor_mpc_brings_a_heavier_plant_to_the_target():
    """The guide's settings: crocoddyl's quadrotor model (33 nodes of 0.03 s) with the running
    pose weight 1 (crocoddyl's: 0.01), ``MPC(ILQR(), max_iters=2)`` warm-started from the
    open-loop optimum, driving a plant 10 % heavier than the model, integrated by RKMK4 through
    the model's thrust map (built by run_mpc).  Read from the plant: within 2 cm of (2, 1, 1.5)
    from control step 40 (1.2 s) on (measured: from step 36; 2.0 mm at step 100) and at rest
    there, where Newton's law says the four thrusts hold the plant's weight, 1.1 m g, not the
    model's."""
    import warnings

    from geomjax.control.examples import QUADROTOR, quadrotor_problem, quadrotor_system
    from geomjax.control.trajopt import Actuated

    model = quadrotor_problem(target=tuple(QUAD_TARGET), tracking_weight=1.0)
    plant = quadrotor_system(mass_scale=1.1)
    plan = solve_ocp(model, ILQR(), max_iters=100, progress=False)  # near the optimum
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a healthy loop: no warning
        res = run_mpc(
            model,
            plant,
            gj.RKMK4(),
            steps=100,
            controller=MPC(ILQR(), max_iters=2),
            controls=plan.controls,
        )
    pos = np.asarray(plant.position(res.states))
    miss = np.linalg.norm(pos - QUAD_TARGET, axis=-1)
    assert miss[40:].max() <= 0.02
    assert miss[-1] <= 0.004
    assert bool(res.healthy) and not np.asarray(res.failed).any()
    # at rest at the end: the thrusts carry the plant's weight (its mass, not the model's)
    xN = jax.tree_util.tree_map(lambda a: a[-1], res.states)
    assert float(jnp.linalg.norm(plant.velocity(xN.mu))) <= 1e-3
    weight = 1.1 * QUADROTOR["mass"] * QUADROTOR["gravity"]
    np.testing.assert_allclose(float(jnp.sum(res.controls[-1])), weight, rtol=1e-3)
    # the recorded states are the plant (RKMK4 through B) driven by the recorded thrusts
    again = gj.simulate(
        plant, Actuated(gj.RKMK4(), model.method.matrix), model.state0, model.dt, 100, res.controls
    )
    np.testing.assert_allclose(again.final_state.g, xN.g, atol=1e-9)


@pytest.mark.long
def test_quadrotor_plant_too_heavy_for_its_thrust_limits_is_reported():
    """With crocoddyl's thrust limits (≤ 5 N a rotor) a plant 50 % heavier than the model needs
    5.43 N a rotor to hover: it falls whatever the controller does.  The run says so (one
    warning, diverging, check() raises); the fall is read from the plant's altitude."""
    import warnings

    from geomjax.control.examples import QUADROTOR, quadrotor_problem, quadrotor_system

    assert 1.5 * QUADROTOR["mass"] * QUADROTOR["gravity"] / 4 > QUADROTOR["thrust_max"]
    model = quadrotor_problem(bounded=True, target=tuple(QUAD_TARGET))
    plant = quadrotor_system(mass_scale=1.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run_mpc(model, plant, steps=100, controller=MPC(ILQR(), max_iters=2))
    z = np.asarray(plant.position(res.states))[:, 2]
    assert z[-1] < -1.0  # fell (measured −9.7 m after 3 s)
    assert bool(res.diverging) and not bool(res.healthy)
    assert len([w for w in caught if "moving away" in str(w.message)]) == 1
    with pytest.raises(ConvergenceError, match="moving away"):
        res.check()


@pytest.mark.long
def test_stationarity_measures_the_distance_to_the_models_optimum():
    """The last step's plan of a run is ``(applied control, plan[:-1])`` from the state before it:
    its model cost against the optimum from that state (a converged solve) is the plan's true
    suboptimality ``(J − J*)/J``.  The stationarity estimates it to a factor 3 (measured: half of
    it, 0.32 against 0.63 and 0.032 against 0.063): with one iteration per step under
    (0.5, 0.5, 0.5) the plan is far from the optimum and the loop is flagged; with two it is
    near and the loop is not."""
    model = _small_model()
    for iterations, stalled in ((1, True), (2, False)):
        _, _, res, caught = _small_run(jnp.array([0.5, 0.5, 0.5]), iterations)
        assert bool(res.stalling) == stalled and bool(res.healthy) != stalled
        assert (len(caught) == 1) == stalled
        x, t = jax.tree_util.tree_map(lambda a: a[-2], res.states), res.times[-2]
        p = _retarget(model, x, t)
        us = jnp.concatenate([res.controls[-1:], res.plan[:-1]])
        J = float(p.cost(p.rollout(us), us))
        np.testing.assert_allclose(J, float(res.cost[-1]), rtol=1e-10)
        best = solve_ocp(p, ILQR(), max_iters=200, progress=False).check()
        gap = (J - float(best.cost)) / J
        stat = float(res.stationarity[-1])
        assert gap / 3 <= stat <= 3 * gap
        assert bool(res.stalled[-1]) == stalled
        assert (gap >= 0.3) if stalled else (gap <= 0.1)

"""Curves, losses and the optimization loop of geomjax.control, against closed forms, finite
differences and brute force."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from geomjax.control import (
    FourierLoop,
    GroupParam,
    Loss,
    OpenCurve,
    PeriodicSpline,
    PiecewiseLinearTimeLaw,
    SmoothStepTimeLaw,
    SphereLoop,
    Trajectory,
    bound_penalty,
    control_effort,
    group_distance,
    loop_closure,
    optimize,
    optimize_restarts,
    path_length,
)
from geomjax.control.optimize import _build_step, _initial_state
from geomjax.lie import SE3, SO3


def _fd(f, x, eps=1e-6):
    return (f(x + eps) - f(x - eps)) / (2 * eps)


# --- curves ---------------------------------------------------------------------------------------
def test_fourier_loop_closed_and_tangent_matches_fd():
    loop = FourierLoop.random(jax.random.PRNGKey(0), 3, 4, scale=0.7)
    np.testing.assert_allclose(loop(0.0), loop(1.0), atol=1e-13)
    for s in (0.0, 0.3, 0.77):
        # central FD, step 1e-6: truncation ~ 1e-12 |x'''|, round-off ~ 1e-10
        np.testing.assert_allclose(loop.tangent(s), _fd(loop, s), atol=1e-7)
    c = FourierLoop.circle(jnp.zeros(2), 2.0)
    pts = c.sample(64)
    np.testing.assert_allclose(jnp.linalg.norm(pts, axis=-1), 2.0, rtol=1e-14)


@pytest.mark.long
def test_periodic_spline_interpolates_and_is_c2_periodic():
    knots = jax.random.normal(jax.random.PRNGKey(1), (7, 2))
    sp = PeriodicSpline(knots)
    np.testing.assert_allclose(jax.vmap(sp)(jnp.arange(7) / 7), knots, atol=1e-12)
    # first and second derivative continuous across the wrap-around knot s = 0 ≡ 1
    d1 = jax.jit(jax.jacfwd(sp))
    d2 = jax.jit(jax.jacfwd(jax.jacfwd(sp)))
    np.testing.assert_allclose(d1(1e-9), d1(1 - 1e-9), atol=1e-6)
    np.testing.assert_allclose(d2(1e-9), d2(1 - 1e-9), atol=1e-5)
    # a spline through samples of a circle reproduces the circle to O(h^4)
    circle = FourierLoop.circle(jnp.zeros(2), 1.0)
    sp = PeriodicSpline(circle.sample(32))
    ss = jnp.linspace(0, 1, 97)
    err = float(jnp.max(jnp.linalg.norm(jax.vmap(sp)(ss) - jax.vmap(circle)(ss), axis=-1)))
    assert err < 1e-4  # (2π/32)^4/384·(2π)^0 ≈ 4e-6 for the interpolating cubic; 25x margin


def test_open_curve_end_points_fixed_and_get_no_gradient():
    c = OpenCurve(jnp.zeros(3), jnp.array([1.0, 2.0, 3.0]), jnp.ones((3, 3)))
    np.testing.assert_allclose(c(0.0), 0.0, atol=1e-15)
    np.testing.assert_allclose(c(1.0), [1, 2, 3], atol=1e-14)
    g = jax.grad(lambda c: jnp.sum(c(0.4) ** 2))(c)
    assert float(jnp.max(jnp.abs(g.start))) == 0.0 and float(jnp.max(jnp.abs(g.end))) == 0.0
    assert float(jnp.max(jnp.abs(g.coeffs))) > 0.0


def test_sphere_loop_on_sphere_and_closed():
    sl = SphereLoop.small_circle(jnp.array([1.0, 1.0, 0.0]), 0.6, modes=2, radius=2.0)
    pts = sl.sample(50)
    np.testing.assert_allclose(jnp.linalg.norm(pts, axis=-1), 2.0, rtol=1e-14)
    np.testing.assert_allclose(sl(0.0), sl(1.0), atol=1e-13)
    pole = jnp.array([1.0, 1.0, 0.0]) / math.sqrt(2)
    np.testing.assert_allclose(pts @ pole / 2.0, math.cos(0.6), rtol=1e-13)


def test_time_laws_monotone_end_points_and_trajectory_velocity():
    laws = [SmoothStepTimeLaw(), PiecewiseLinearTimeLaw(jnp.array([0.3, -1.0, 2.0, 0.0]))]
    taus = jnp.linspace(0, 1, 101)
    for law in laws:
        s = jax.vmap(law)(taus)
        assert abs(float(s[0])) < 1e-15 and abs(float(s[-1]) - 1) < 1e-14
        assert bool(jnp.all(jnp.diff(s) >= 0))
    # rest to rest: zero speed at the ends
    traj = Trajectory(FourierLoop.circle(jnp.zeros(2), 1.0), 3.0)
    np.testing.assert_allclose(traj.velocity(0.0), 0.0, atol=1e-14)
    np.testing.assert_allclose(traj.velocity(3.0), 0.0, atol=1e-14)
    np.testing.assert_allclose(traj.velocity(1.1), _fd(traj, 1.1), atol=1e-7)


def test_bad_inputs_raise_value_error():
    with pytest.raises(ValueError, match="center"):
        FourierLoop(jnp.zeros((2, 2)), jnp.zeros((1, 2)), jnp.zeros((1, 2)))
    with pytest.raises(ValueError, match="knots"):
        PeriodicSpline(jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match="duration"):
        Trajectory(FourierLoop.circle(jnp.zeros(2), 1.0), -1.0)
    with pytest.raises(ValueError, match="'max_iters'"):
        optimize(lambda p: jnp.sum(p**2), jnp.ones(2), max_iters=0)
    # the former name of the iteration cap still works, with a deprecation warning
    with pytest.warns(DeprecationWarning, match="'max_iters'"):
        old = optimize(lambda p: jnp.sum(p**2), jnp.ones(2), "lbfgs", steps=3, progress=False)
    # the old keyword still sets the cap (3 iterations, not the default 500) and the loss falls
    assert old.stop_reason == "max_iters" and int(old.iterations) == 3
    assert float(old.loss) < 2.0
    with pytest.raises(ValueError, match="optimizer"):
        optimize(lambda p: jnp.sum(p**2), jnp.ones(2), optimizer="sgd!")
    with pytest.raises(ValueError, match="L-BFGS"):
        optimize(lambda p: jnp.sum(p.g), GroupParam(jnp.eye(3), SO3), optimizer="lbfgs")
    # a loss that is not a real scalar: the error names 'loss' (not JAX's "scalar-output")
    for loss in (lambda p: p**2, lambda p: jnp.sum(p, keepdims=True), lambda p: (jnp.sum(p), 0.0)):
        with pytest.raises(ValueError, match="'loss' must return a real scalar"):
            optimize(loss, jnp.ones(2), max_iters=2, progress=False)
    with pytest.raises(ValueError, match="'loss' must return a real scalar"):
        optimize_restarts(
            lambda p: p**2, lambda k: jnp.ones(2), jax.random.PRNGKey(0), 2, progress=False
        )


# --- losses ---------------------------------------------------------------------------------------
def test_group_distance_is_the_rotation_angle_and_se3_weights():
    axis = jnp.array([1.0, 2.0, 2.0]) / 3.0
    for angle in (1e-3, 0.7, 2.5):
        R = SO3.from_axis_angle(axis, angle)
        R0 = SO3.from_axis_angle(jnp.array([0.0, 0, 1]), 0.4)
        d = group_distance(SO3, R0 @ R, R0, squared=False)
        np.testing.assert_allclose(d, angle, rtol=1e-12)
    g = SE3.from_rotation_translation(jnp.eye(3), jnp.array([3.0, 4.0, 0.0]))
    np.testing.assert_allclose(group_distance(SE3, g, jnp.eye(4), squared=False), 5.0, rtol=1e-13)
    w = jnp.array([1.0, 1, 1, 0, 0, 0])
    assert float(group_distance(SE3, g, jnp.eye(4), weights=w)) < 1e-24


def test_losses_closed_forms_and_composition():
    n = 40
    pts = FourierLoop.circle(jnp.zeros(2), 1.5).sample(n)
    np.testing.assert_allclose(
        path_length(pts, closed=True), 2 * n * 1.5 * math.sin(math.pi / n), rtol=1e-12
    )
    assert float(loop_closure(jnp.concatenate([pts, pts[:1]]))) < 1e-28
    np.testing.assert_allclose(control_effort(jnp.ones((10, 3)), 0.1), 0.5 * 0.1 * 30)
    np.testing.assert_allclose(bound_penalty(jnp.array([-2.0, 0.5, 3.0]), -1.0, 1.0), 1.0 + 4.0)
    L = 2.0 * Loss(lambda x: jnp.sum(x**2), "sq") + Loss(lambda x: jnp.sum(x), "lin", weight=3.0)
    x = jnp.array([1.0, 2.0])
    parts = L.parts(x)
    assert set(parts) == {"sq", "lin"}
    np.testing.assert_allclose(L(x), 2 * 5 + 3 * 3)
    np.testing.assert_allclose(jax.grad(L)(x), 4 * x + 3)


# --- the loop -------------------------------------------------------------------------------------
def test_adam_quadratic_history_and_early_stopping():
    loss = lambda p: jnp.sum((p["x"] - 3.0) ** 2) + (p["y"] + 1.0) ** 2  # noqa: E731
    p0 = {"x": jnp.zeros(3), "y": jnp.zeros(())}
    res = optimize(loss, p0, optax.adam(0.1), max_iters=400, progress=False)
    assert res.iterations == 400 and res.stop_reason == "max_iters"
    np.testing.assert_allclose(res.params["x"], 3.0, atol=1e-3)
    h = res.history
    assert h["loss"].shape == h["grad_norm"].shape == h["time"].shape == (400,)
    assert np.all(np.diff(h["time"]) >= 0) and res.compile_time > 0
    # the recorded gradient norm is that of the first iterate: |2(0 - 3)|·√3 and |2(0+1)|
    np.testing.assert_allclose(h["grad_norm"][0], math.sqrt(3 * 36 + 4), rtol=1e-12)
    res_t = optimize(loss, p0, optax.adam(0.1), max_iters=400, progress=False, target=1e-2)
    assert res_t.stop_reason == "target" and res_t.iterations < 400 and res_t.loss <= 1e-2
    res_p = optimize(loss, p0, optax.sgd(0.0), max_iters=100, progress=False, patience=5)
    assert res_p.stop_reason == "patience" and res_p.iterations == 6
    out = optimize(loss, p0, max_iters=3, progress=True, export=lambda p: {"x": p["x"]})
    assert isinstance(out.arrays["x"], np.ndarray)


def test_lbfgs_rosenbrock():
    def rosen(p):
        return (1 - p[0]) ** 2 + 100 * (p[1] - p[0] ** 2) ** 2

    res = optimize(rosen, jnp.array([-1.2, 1.0]), "lbfgs", max_iters=200, progress=False, gtol=1e-9)
    np.testing.assert_allclose(res.params, [1.0, 1.0], atol=1e-6)
    assert res.stop_reason == "gtol"


@pytest.mark.long
def test_lbfgs_matches_optax_reference_loop_and_traces_the_loss_once():
    # optax's documented L-BFGS loop (value and gradient reused from the line search's state)
    # is the reference; optimize's compiled step evaluates the loss only in the line search
    traces = []

    def f(p):
        traces.append(1)  # Python side effect: runs once per trace
        return jnp.sum((p - jnp.arange(4.0)) ** 4) + jnp.sum(jnp.cos(p)) + 0.3 * p[0] * p[3]

    x0 = jnp.array([0.5, -1.0, 2.5, 1.0])
    n = 12
    res = optimize(f, x0, "lbfgs", max_iters=n, progress=False)
    n_optimize = len(traces)
    traces.clear()
    optimize(f, x0, "adam", max_iters=3, progress=False)
    assert len(traces) == 1  # one trace of the step for all iterations: no recompilation
    # the step reusing the line search's value and gradient traces the loss once less (optax's
    # line search itself evaluates it in both branches of a cond)
    opt = optax.lbfgs()
    counts = []
    for reuse in (False, True):
        traces.clear()
        step = _build_step(f, None, opt, True, reuse)
        state = _initial_state(opt, x0, reuse)
        jax.eval_shape(step, x0, state)
        counts.append(len(traces))
    assert counts[1] == counts[0] - 1 >= 1
    assert n_optimize == counts[1]  # optimize traced that step once, for all iterations

    state, x = opt.init(x0), x0
    vg = jax.jit(optax.value_and_grad_from_state(f))
    values, iterates = [], [x]
    for _ in range(n):
        value, grad = vg(x, state=state)
        values.append(float(value))
        upd, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=f)
        x = optax.apply_updates(x, upd)
        iterates.append(x)
    np.testing.assert_allclose(res.history["loss"], values, rtol=1e-12)
    final = [float(f(z)) for z in iterates]
    best = int(np.argmin(final))
    np.testing.assert_allclose(res.loss, final[best], rtol=1e-12)
    np.testing.assert_allclose(res.params, iterates[best], rtol=1e-10, atol=1e-12)
    # an early stop: the result is an evaluated iterate
    res_t = optimize(f, x0, "lbfgs", max_iters=n, progress=False, target=values[4])
    assert res_t.stop_reason == "target" and res_t.iterations == 5
    np.testing.assert_allclose(res_t.loss, values[4], rtol=1e-12)
    # batched restarts with L-BFGS: each restart is the same loop
    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    starts = [x0 + jax.random.normal(k, (4,)) for k in keys]
    res_r = optimize_restarts(
        f,
        lambda k: x0 + jax.random.normal(k, (4,)),
        jax.random.PRNGKey(3),
        3,
        "lbfgs",
        max_iters=6,
        progress=False,
    )
    for i, s0 in enumerate(starts):
        one = optimize(f, s0, "lbfgs", max_iters=6, progress=False)
        np.testing.assert_allclose(res_r.history["loss"][:, i], one.history["loss"], rtol=1e-10)
        np.testing.assert_allclose(res_r.restart_losses[i], one.loss, rtol=1e-10)


def test_second_optimize_call_reuses_the_compiled_step():
    traces = []

    def f(p):
        traces.append(1)  # Python side effect: runs once per trace
        x, c = p
        return jnp.sum((x - c) ** 2) + 0.1 * jnp.sum(jnp.sin(x))

    x0 = jnp.array([0.5, -1.0, 2.5])
    for opt in ("adam", "lbfgs"):
        traces.clear()
        first = optimize(f, (x0, 2.0), opt, max_iters=15, progress=False)
        n_first = len(traces)
        second = optimize(f, (x0 + 0.0, 2.0), opt, max_iters=15, progress=False)
        assert n_first >= 1 and len(traces) == n_first  # no retrace, so no recompilation
        # the cached program computes what the first call computed (same iterates)
        np.testing.assert_array_equal(second.history["loss"], first.history["loss"])
        np.testing.assert_array_equal(second.params[0], first.params[0])
    # the fixed part of the parameters is part of the cache key: another constant, another
    # program; the minimizer of sum (x - c)^2 + 0.1 sum sin x solves 2 (x - c) + 0.1 cos x = 0
    traces.clear()
    res = optimize(f, (x0, 3.0), "lbfgs", max_iters=30, progress=False)
    assert len(traces) >= 1
    x = np.asarray(res.params[0])
    np.testing.assert_allclose(2 * (x - 3.0) + 0.1 * np.cos(x), 0.0, atol=1e-8)


@pytest.mark.long
def test_group_parameter_stays_on_group_and_reaches_target():
    target = SO3.from_axis_angle(jnp.array([0.0, 0.6, 0.8]), 2.0)
    res = optimize(
        lambda p: group_distance(SO3, p.g, target),
        GroupParam(jnp.eye(3), SO3),
        optax.adam(0.1),
        max_iters=600,
        progress=False,
        target=1e-10,
    )
    assert res.stop_reason == "target"
    assert float(SO3.defect(res.params.g)) < 1e-13
    assert float(group_distance(SO3, res.params.g, target, squared=False)) < 1e-5
    # the left-trivialized gradient at g is 2 log(target⁻¹ g) (closed form at the start, since
    # d/dξ |log(T⁻¹ g e^ξ)|² = 2 J_r⁻ᵀ e and J_r⁻ᵀ e = e for e = log(T⁻¹ g) ∥ ξ-axis)
    g0 = SO3.from_axis_angle(jnp.array([0.0, 0.6, 0.8]), 0.5)
    e = SO3.log(target.T @ g0)
    grad = jax.grad(lambda xi: group_distance(SO3, g0 @ SO3.exp(xi), target))(jnp.zeros(3))
    np.testing.assert_allclose(grad, 2 * e, rtol=1e-10, atol=1e-12)


def test_restarts_find_the_global_minimum_of_a_multiwell():
    def f(p):
        return jnp.sum(jnp.cos(3 * p) + 0.1 * p**2)

    res = optimize_restarts(
        f,
        lambda k: jax.random.uniform(k, (2,), minval=-4, maxval=4),
        jax.random.PRNGKey(0),
        16,
        optax.adam(0.05),
        max_iters=300,
        progress=False,
    )
    grid = np.linspace(-4, 4, 200001)
    best_1d = np.min(np.cos(3 * grid) + 0.1 * grid**2)
    np.testing.assert_allclose(res.loss, 2 * best_1d, atol=1e-6)
    assert res.history["loss"].shape == (300, 16) and res.restart_losses.shape == (16,)
    assert np.ptp(res.restart_losses) > 0.1  # the restarts really landed in different wells

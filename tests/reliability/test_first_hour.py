"""What a new user meets in the first hour, trying the README: each call either works (checked
against an independent result) or fails with a message that names the argument they passed."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.control import optimize
from geomjax.reconstruction import deforming_body

I123 = jnp.array([1.0, 2.0, 3.0])
BODY = gj.RigidBody(inertia=I123)
S0 = gj.RigidBodyState(R=jnp.eye(3), Pi=jnp.array([0.02, 2.0, 0.02]))


def test_load_solution_mirrors_save(tmp_path):
    method = gj.LGVI(newton_iters=4)
    system = gj.RigidBody(inertia=jnp.array([1.0, 2.0, 2.5]))
    sol = gj.simulate(system, method, S0, dt=0.01, steps=20, save_every=5)
    path = sol.save(tmp_path / "run.npz", system, method)
    template = gj.RigidBody(inertia=jnp.ones(3))
    loaded, rebuilt, method2 = gj.load_solution(path, template, method)  # as sol.save was called
    np.testing.assert_array_equal(rebuilt.inertia, system.inertia)
    np.testing.assert_array_equal(loaded.states.Pi, sol.states.Pi)
    np.testing.assert_array_equal(loaded.states.R, sol.states.R)
    assert method2 == method
    # the order of earlier versions (a state template second) still loads
    old, _, _ = gj.load_solution(path, S0)
    np.testing.assert_array_equal(old.states.Pi, sol.states.Pi)
    with pytest.raises(ValueError, match="argument 'system'.*template"):
        gj.load_solution(path, "RigidBody")


def test_jit_of_simulate_says_steps_is_static():
    with pytest.raises(ValueError, match=r"argument 'steps' is static.*static_argnames"):
        jax.jit(gj.simulate)(BODY, gj.LGVI(), S0, 0.01, 100)
    # the two ways the message offers both work and agree with the eager call
    eager = gj.simulate(BODY, gj.LGVI(), S0, 0.01, 100).final_state.Pi
    static = jax.jit(gj.simulate, static_argnames=("steps",))(BODY, gj.LGVI(), S0, 0.01, 100)
    closed = jax.jit(lambda s: gj.simulate(BODY, gj.LGVI(), s, 0.01, steps=100))(S0)
    # same operations, possibly fused differently by XLA: agreement to a few ulps of |Pi| ~ 2
    np.testing.assert_allclose(static.final_state.Pi, eager, rtol=0, atol=1e-13)
    np.testing.assert_allclose(closed.final_state.Pi, eager, rtol=0, atol=1e-13)


def test_make_state_names_q():
    ball2 = gj.LagrangianSystem(metric=jnp.eye(2), potential=lambda q: 9.81 * q[1])
    with pytest.raises(ValueError, match=r"argument 'q' must have shape \(2,\)"):
        ball2.make_state(jnp.array([0.0, 1.0, 2.0]), jnp.array([0.5, 0.0, 0.0]))
    with pytest.raises(ValueError, match=r"argument 'qdot'.*got \(3,\)"):
        ball2.make_state(jnp.array([0.0, 1.0]), jnp.array([0.5, 0.0, 0.0]))
    # a Lagrangian whose dimension is only known by calling it
    lag = gj.LagrangianSystem(lambda q, v: 0.5 * v @ jnp.diag(jnp.array([1.0, 2.0])) @ v)
    with pytest.raises(ValueError, match=r"argument 'q' of shape \(3,\)"):
        lag.make_state(jnp.zeros(3), jnp.ones(3))
    s = lag.make_state(jnp.zeros(2), jnp.ones(2))
    np.testing.assert_allclose(s.p, [1.0, 2.0], rtol=0, atol=0)  # p = M q'


def test_rigid_body_state_fields_named_as_written():
    with pytest.raises(ValueError, match=r"'state0\.Pi' must have shape"):
        gj.simulate(BODY, gj.LGVI(), gj.RigidBodyState(R=jnp.eye(3), Pi=jnp.ones(4)), 0.01, 10)
    with pytest.raises(ValueError, match=r"'state0\.R'"):
        gj.simulate(BODY, gj.LGVI(), gj.RigidBodyState(R=2 * jnp.eye(3), Pi=jnp.ones(3)), 0.01, 10)


def test_optimize_accepts_array_likes():
    target = np.array([0.3, -0.7])

    def f(x):
        return jnp.sum((x - target) ** 2)

    res = optimize(f, [1.0, 2.0], "lbfgs", max_iters=20, progress=False)
    np.testing.assert_allclose(res.params, target, atol=1e-8)  # the minimizer, closed form
    ref = optimize(f, jnp.array([1.0, 2.0]), "lbfgs", max_iters=20, progress=False)
    np.testing.assert_array_equal(res.params, ref.params)  # the same iterates as an array
    res_int = optimize(f, (1, 2), "lbfgs", max_iters=20, progress=False)
    np.testing.assert_array_equal(res_int.params, ref.params)
    with pytest.raises(ValueError, match=r"argument 'params' has no floating-point arrays"):
        optimize(f, "ab", max_iters=2, progress=False)


def _loop(p, t):  # a circle in shape space: centre p[:2], radius p[2]
    return p[:2] + p[2] * jnp.stack([jnp.cos(t), jnp.sin(t)])


def test_holonomy_params():
    cat = deforming_body(inertia=(1.0, 1.5, 2.0), masses=(0.5, 0.7))
    with pytest.raises(ValueError, match=r"argument 'loop' takes \(params, t\).*params="):
        gj.holonomy(cat, _loop, 2 * jnp.pi, steps=16)
    with pytest.raises(ValueError, match=r"argument 'params' too short"):
        gj.holonomy(cat, _loop, 2 * jnp.pi, steps=16, params=jnp.array([0.2, 0.1]))
    with pytest.raises(ValueError, match=r"argument 'params' too short"):
        jax.vmap(lambda p: gj.holonomy(cat, _loop, 2 * jnp.pi, steps=16, params=p))(
            jnp.zeros((2, 2))
        )
    # a loop of radius 0 encloses nothing: no reorientation (exactly the identity path)
    g = gj.holonomy(cat, _loop, 2 * jnp.pi, steps=16, params=jnp.array([0.2, 0.1, 0.0]))
    np.testing.assert_allclose(g, np.eye(3), rtol=0, atol=1e-14)


def test_warnings_point_at_the_callers_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gj.RigidBody(inertia=jnp.array([1.0, 1.0, 3.0]))  # violates I1 + I2 >= I3
    assert [w.filename for w in caught] == [__file__], [(w.filename, w.lineno) for w in caught]
    assert "triangle inequality" in str(caught[0].message)
    positions = jnp.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 1e-5, 0.0]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gj.RigidSystem(jnp.ones(3), positions)  # nearly collinear
    assert [w.filename for w in caught] == [__file__], [(w.filename, w.lineno) for w in caught]

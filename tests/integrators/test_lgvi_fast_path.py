"""``simulate`` scans control arrays in chunks of a few steps (, a CPU speed fix): the
trajectory must be that of independent single steps (``method.step``) with the same controls."""

import jax
import jax.numpy as jnp
import numpy as np

import geomjax as gj


def _stepwise(system, method, s, dt, n, controls):
    one = jax.jit(lambda s, u, t: method.step(system, s, dt, u, t)[0])  # one compilation
    for k in range(n):
        s = one(s, controls[k], k * dt)
    return s


def _state(seed=0):
    rng = np.random.default_rng(seed)
    R = gj.SO3.exp(jnp.asarray(rng.standard_normal(3)))
    return gj.RigidBodyState(R, jnp.asarray(rng.standard_normal(3)))


def test_chunked_controls_match_fresh_steps():
    # save_every = 48: the block of controls is scanned in chunks of 16 steps; the result must be
    # that of 96 single steps with u_k (same arithmetic: round-off)
    rb = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    rng = np.random.default_rng(1)
    n, dt = 96, 0.01
    u = jnp.asarray(0.3 * rng.standard_normal((n, 3)))
    s0 = _state(2)
    sol = gj.simulate(rb, gj.LGVI(), s0, dt, n, controls=u, save_every=48)
    b = _stepwise(rb, gj.LGVI(), s0, dt, n, u)
    np.testing.assert_allclose(sol.final_state.R, b.R, rtol=0, atol=1e-12)
    np.testing.assert_allclose(sol.final_state.Pi, b.Pi, rtol=0, atol=1e-12)
    # the saved middle state is the state after 48 steps
    mid = _stepwise(rb, gj.LGVI(), s0, dt, 48, u)
    np.testing.assert_allclose(sol.states.Pi[1], mid.Pi, rtol=0, atol=1e-12)

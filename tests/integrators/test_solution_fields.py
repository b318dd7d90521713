"""``Solution.times`` is the name shared with ``OCPSolution`` and ``MPCResult``; the former name
``ts`` still works (keyword and attribute), with a deprecation warning."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj


def test_times_and_the_deprecated_ts():
    body = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    s0 = gj.RigidBodyState(jnp.eye(3), jnp.array([0.1, 0.2, 0.3]))
    sol = gj.simulate(body, gj.RKMK4(), s0, 0.1, 4)
    np.testing.assert_allclose(np.asarray(sol.times), 0.1 * np.arange(5), rtol=1e-15)
    with pytest.warns(DeprecationWarning, match="Solution.times"):
        np.testing.assert_array_equal(np.asarray(sol.ts), np.asarray(sol.times))
    with pytest.warns(DeprecationWarning, match="'times'"):
        old = gj.Solution(ts=sol.times, states=sol.states, stats=sol.stats)
    np.testing.assert_array_equal(np.asarray(old.times), np.asarray(sol.times))
    with pytest.raises(ValueError, match="'times' only"):
        gj.Solution(times=sol.times, states=sol.states, ts=sol.times)
    # still a pytree of arrays: it leaves jit and vmap
    batched = jax.vmap(
        lambda p: gj.simulate(body, gj.RKMK4(), gj.RigidBodyState(jnp.eye(3), p), 0.1, 4)
    )(jnp.ones((2, 3)))
    assert batched.times.shape == (2, 5) and batched.states.R.shape == (2, 5, 3, 3)

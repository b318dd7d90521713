"""``RigidBodySplitting(compensate=...)``: the momentum carried as ``Pi + Pi_lo`` with
compensated summation of each step's increments (default in float32).

References: the uncompensated step (float64: the same run to round-off, 200 steps of
``|Pi| ~ 1`` drifting apart by a few ulps a step, bound 1e-12) and the conservation law of the
splitting: every sub-step is an exact rotation of ``Pi`` (free body), so ``|Pi|²`` changes by
round-off only.  With compensation each saved ``Pi`` is off by the rounding of one step,
``O(u)`` (``u = 2^-24``): bound ``8u`` (4.8e-7; seen 1.4e-7 over 1e5 steps), where the
uncompensated run random-walks (seen 1e-5 over 1e5 steps, 2e-6 over 1e4).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.systems import HeavyTop

R0 = gj.SO3.exp(jnp.array([0.3, -0.2, 0.5]))
PI0 = jnp.array([0.8, -0.3, 1.1])
U32 = 2.0**-24


def test_float64_same_run_as_uncompensated():
    system = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]), HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4]))
    s0 = system.make_state(R0, PI0)
    u = jnp.asarray(0.1 * np.random.default_rng(0).standard_normal((200, 3)))
    a, b = (
        gj.simulate(system, gj.RigidBodySplitting(compensate=c), s0, 0.01, 200, controls=u)
        for c in (False, True)
    )
    np.testing.assert_allclose(b.final_state.R, a.final_state.R, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.final_state.Pi, a.final_state.Pi, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.states.Pi, a.states.Pi, rtol=0, atol=1e-12)


def test_float32_casimir_at_one_rounding():
    body = gj.RigidBody(jnp.asarray([1.0, 2.0, 3.0], jnp.float32))
    pi0 = jnp.asarray([0.01, 1.0, 0.01], jnp.float32)  # near the middle axis: slow increments

    @jax.jit
    def run(pi0):
        s0 = gj.RigidBodyState(jnp.eye(3, dtype=jnp.float32), pi0)
        # float32 default: compensated
        return gj.simulate(body, gj.RigidBodySplitting(), s0, 0.01, 10_000, save_every=100)

    sol = run(pi0)
    assert sol.final_state.Pi.dtype == jnp.float32
    P = np.asarray(sol.states.Pi, np.float64)
    C = np.sum(P**2, -1)
    assert np.max(np.abs(C / C[0] - 1.0)) <= 8 * U32


def test_bad_compensate_raises():
    with pytest.raises(ValueError, match="'compensate'"):
        gj.RigidBodySplitting(compensate="yes")

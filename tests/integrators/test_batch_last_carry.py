"""The batch-last carry of the SO(3) kernels (``_so3_soa.batch_last_carry``): a vmapped
``simulate`` traces its loop with the carry as a tuple of scalars, an unbatched one with one
vector.  The two layouts are two code paths for the same arithmetic: every member of a vmapped
run equals the unbatched run of that member to round-off (float64), states and gradients, for
each system the SO(3) fast path runs (free body, potential, controls, full inertia) and for the
splitting.  Their speed: ``benchmarks/bench_rigid_body.py --throughput``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax._internal.tracing import vmap_batched
from geomjax.integrators import _so3_soa as soa
from geomjax.systems import HeavyTop

I = jnp.array([0.9, 1.0, 0.4])
R0 = jnp.stack([gj.SO3.exp(jnp.array([0.4, 1.0, -0.3])), gj.SO3.exp(jnp.array([-0.2, 0.1, 0.5]))])
PI0 = jnp.array([[0.2, -0.4, 3.0], [1.1, 0.3, -0.6]])
U = 0.3 * jnp.sin(
    jnp.arange(40.0)[None, :, None] * jnp.array([[[0.3, 0.7, 1.1]], [[0.5, -0.2, 0.9]]])
)
CASES = {
    "LGVI free body": (gj.RigidBody(I), gj.LGVI(), None),
    "LGVI heavy top": (gj.RigidBody(I, HeavyTop(1.5, 9.81, [0.05, -0.02, 0.3])), gj.LGVI(), None),
    "LGVI controls": (gj.RigidBody(I), gj.LGVI(), U),
    "LGVI (3, 3) inertia, reorthonormalized": (
        gj.RigidBody(jnp.diag(I) + 0.05 * (1.0 - jnp.eye(3))),
        gj.LGVI(reorthonormalize=True, compensate=True),
        None,
    ),
    "RigidBodySplitting heavy top, compensated": (
        gj.RigidBody(I, HeavyTop(1.5, 9.81, [0.05, -0.02, 0.3])),
        gj.RigidBodySplitting(compensate=True),
        None,
    ),
}


def _final(system, method, R, Pi, u):
    sol = gj.simulate(system, method, system.make_state(R, Pi), 0.02, 40, u, save_every=10)
    return jnp.concatenate([sol.final_state.R.reshape(-1), sol.final_state.Pi])


def test_vmapped_simulate_is_detected():
    seen = []

    def f(x):
        seen.append(vmap_batched(x, if_unknown=False))
        return x

    jax.vmap(f)(jnp.ones(2))
    jax.jit(jax.vmap(jax.grad(lambda x: f(x) ** 2)))(jnp.ones(2))  # through a JVP tracer
    f(jnp.ones(2))
    jax.jit(f)(jnp.ones(2))
    assert seen == [True, True, False, False]


def test_tuple_carry_round_trip_is_exact():
    R, Pi = R0[0], PI0[0]
    with soa.batch_last_carry():
        c = soa.to_carry(R, Pi, compensated=True)
    assert isinstance(c, tuple) and len(c) == 15
    R1, Pi1 = soa.from_carry(c)
    np.testing.assert_array_equal(R1, R)
    np.testing.assert_array_equal(Pi1, Pi)
    assert soa.split(c)[1] == c[9:12] and soa.compensation(c) == c[12:15]


def test_members_equal_unbatched_runs():
    """The free body, states only (the default tier; every case with gradients: below)."""
    system, method, _ = CASES["LGVI free body"]
    batched = jax.vmap(lambda R, Pi: _final(system, method, R, Pi, None))(R0, PI0)
    for k in range(2):
        one = _final(system, method, R0[k], PI0[k], None)
        np.testing.assert_allclose(batched[k], one, rtol=0, atol=1e-13)  # see below
        assert not np.array_equal(one[9:], PI0[k])


@pytest.mark.long
@pytest.mark.parametrize("name", list(CASES))
def test_members_equal_unbatched_runs_states_and_gradients(name):
    system, method, u = CASES[name]
    in_axes = (0, 0, None if u is None else 0)
    run = jax.jit(jax.vmap(lambda R, Pi, u: _final(system, method, R, Pi, u), in_axes))
    grad = jax.jit(
        jax.vmap(jax.grad(lambda Pi, R, u: jnp.sum(_final(system, method, R, Pi, u) ** 2)), in_axes)
    )
    batched, g_batched = run(R0, PI0, u), grad(PI0, R0, u)
    for k in range(2):
        uk = None if u is None else u[k]
        one = _final(system, method, R0[k], PI0[k], uk)
        g_one = jax.grad(
            lambda Pi, R=R0[k], uk=uk: jnp.sum(_final(system, method, R, Pi, uk) ** 2)
        )(PI0[k])
        # 40 steps of O(1) entries: the layouts differ only in XLA's fusion (FMA contraction),
        # a few ulp per step
        np.testing.assert_allclose(batched[k], one, rtol=0, atol=1e-13)
        np.testing.assert_allclose(g_batched[k], g_one, rtol=1e-12, atol=1e-12)
    assert float(jnp.max(jnp.abs(batched[:, 9:] - PI0))) > 1e-2  # the runs moved

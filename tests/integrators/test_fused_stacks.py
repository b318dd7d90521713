"""``geomjax._linalg.select_stack`` / ``stack_scalars`` (the step outputs and Newton iterates of the
SO(3) kernels): the same numbers as ``jnp.stack`` (non-finite values included), under ``jax.vmap``
(nested too), with the derivatives of a stack in forward and reverse mode, and a plain stack
inside ``plain_stacks()``.  Their speed is measured in ``benchmarks/bench_rigid_body.py``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geomjax as gj
from geomjax._linalg import plain_stacks, select_stack, stack_scalars

FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)


@settings(max_examples=40, deadline=None)
@given(st.lists(FLOATS, min_size=1, max_size=12))
def test_same_numbers_as_jnp_stack_including_non_finite(vals):
    ref = np.asarray(jnp.stack([jnp.float64(v) for v in vals]))
    for f in (select_stack, stack_scalars):
        out = np.asarray(jax.jit(lambda *v, f=f: f(v))(*[jnp.float64(v) for v in vals]))
        np.testing.assert_array_equal(out, ref)  # NaN == NaN positionally, -0.0 kept
        assert np.array_equal(np.signbit(out), np.signbit(ref))


def _pieces(x):
    return (2.0 * x[0], x[1] ** 2, jnp.sin(x[2]), x[0] * x[2])


def test_under_vmap_and_nested_vmap():
    xs = jnp.asarray(np.random.default_rng(0).normal(size=(2, 5, 3)))
    ref = jax.vmap(jax.vmap(lambda x: jnp.stack(_pieces(x))))(xs)
    for f in (select_stack, stack_scalars):
        out = jax.vmap(jax.vmap(lambda x, f=f: f(_pieces(x))))(xs)
        np.testing.assert_array_equal(out, ref)
    # an unbatched entry broadcast against batched ones
    out = jax.vmap(lambda a: stack_scalars((a, 2.0, 3.0 * a)))(jnp.arange(3.0))
    np.testing.assert_array_equal(
        out, jnp.stack([jnp.arange(3.0), 2.0 * jnp.ones(3), 3.0 * jnp.arange(3.0)], -1)
    )


@pytest.mark.long
def test_derivatives_are_those_of_a_stack():
    w = jnp.array([0.3, -1.0, 0.7, 2.0])
    x = jnp.array([0.1, -0.4, 0.9])

    def loss(stack):
        return lambda x: jnp.sum(w * stack(_pieces(x)) ** 2)

    ref = loss(jnp.stack)
    for f in (select_stack, stack_scalars):
        np.testing.assert_allclose(jax.grad(loss(f))(x), jax.grad(ref)(x), rtol=1e-15)
        np.testing.assert_allclose(jax.jacfwd(loss(f))(x), jax.jacfwd(ref)(x), rtol=1e-15)
        np.testing.assert_allclose(jax.hessian(loss(f))(x), jax.hessian(ref)(x), rtol=1e-14)
        xs = jnp.stack([x, 2.0 * x])
        np.testing.assert_allclose(
            jax.vmap(jax.grad(loss(f)))(xs), jax.vmap(jax.grad(ref))(xs), rtol=1e-15
        )
    # and against central finite differences (independent of any stack)
    e = 1e-6
    fd = [
        (loss(stack_scalars)(x + e * d) - loss(stack_scalars)(x - e * d)) / (2 * e)
        for d in jnp.eye(3)
    ]
    np.testing.assert_allclose(jax.grad(loss(stack_scalars))(x), fd, rtol=1e-8)


def _primitives(fn, *args):
    return {e.primitive.name for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns}


def test_plain_stacks_context_gives_a_plain_stack():
    x = jnp.array([0.1, -0.4, 0.9])
    fused = _primitives(lambda x: stack_scalars(_pieces(x)), x)
    assert "custom_jvp_call" in fused
    with plain_stacks():
        plain = _primitives(lambda x: stack_scalars(_pieces(x)), x)
    assert "custom_jvp_call" not in plain and "select_n" not in plain
    # the context is left cleanly
    assert "custom_jvp_call" in _primitives(lambda x: stack_scalars(_pieces(x)), x)


def test_lgvi_step_equals_the_plain_stack_layout(monkeypatch):
    """The fused layout changes no number of the SO(3) LGVI (a heavy top, float64 and float32)."""
    from geomjax.integrators import _so3_soa as soa

    top = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]), gj.systems.HeavyTop(1.0, 9.81, [0.0, 0.1, 0.4]))
    for dtype in (jnp.float64, jnp.float32):
        s0 = top.make_state(
            gj.SO3.exp(jnp.array([0.3, -0.2, 0.5], dtype)), jnp.array([0.8, -0.3, 1.1], dtype)
        )
        a = gj.simulate(top, gj.LGVI(), s0, 0.01, 200, save_every=200).final_state
        with monkeypatch.context() as m:
            m.setattr(soa, "join", lambda R, Pi: jnp.stack((*R, *Pi)))
            m.setattr(soa, "as_vector3", lambda x: jnp.stack(x))
            b = gj.simulate(top, gj.LGVI(), s0, 0.01, 200, save_every=200).final_state
        np.testing.assert_array_equal(a.R, b.R)
        np.testing.assert_array_equal(a.Pi, b.Pi)

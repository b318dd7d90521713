"""``newton_solve(..., scalarize=True)``: residual and Jacobian solve evaluated scalar by scalar,
the iterate carried through the loop as a tuple of scalars.  Checked against the array solve
(round-off), against a closed-form root, and its implicit-function-theorem derivatives against
the closed form and central finite differences — also where some residual entries do not depend
on the differentiated parameters (symbolic-zero tangents)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geomjax.integrators.newton import dense_jac_solve, newton_solve


def _residual(x, a):
    # root: x0 = a0^(1/3), x1 = x0 + a1, x2 = 2 (the last entry does not depend on a)
    return jnp.stack([x[0] ** 3 - a[0], x[1] - x[0] - a[1], jnp.sin(x[2] - 2.0)])


_JS = dense_jac_solve(_residual, columns=True)


def _solve(a, scalarize, x0=None):
    x0 = jnp.array([1.0, 0.5, 1.9]) if x0 is None else x0
    return newton_solve(_residual, x0, a, iters=8, jac_solve=_JS, scalarize=scalarize)


def _exact(a):
    c = a[0] ** (1.0 / 3.0)
    return jnp.stack([c, c + a[1], jnp.asarray(2.0)])


@settings(max_examples=15, deadline=None)
@given(st.floats(0.6, 1.6), st.floats(-1.0, 1.0))
def test_same_root_as_the_array_solve_and_the_closed_form(a0, a1):
    a = jnp.array([a0, a1])
    xs, rs = jax.jit(lambda a: _solve(a, True))(a)
    xa, ra = jax.jit(lambda a: _solve(a, False))(a)
    assert xs.shape == (3,) and rs.shape == (3,)
    np.testing.assert_allclose(xs, xa, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(rs, ra, atol=1e-14)
    np.testing.assert_allclose(xs, _exact(a), rtol=1e-13)
    assert float(jnp.max(jnp.abs(rs))) < 1e-13


def test_gradients_closed_form_and_finite_differences_with_zero_tangent_entries():
    a = jnp.array([1.3, -0.4])
    w = jnp.array([0.7, -1.1, 0.3])

    def loss(a, sc):
        return jnp.sum(w * _solve(a, sc)[0])

    g = jax.jit(jax.grad(lambda a: loss(a, True)))(a)
    ga = jax.grad(lambda a: loss(a, False))(a)
    gx = jax.grad(lambda a: jnp.sum(w * _exact(a)))(a)
    np.testing.assert_allclose(g, ga, rtol=1e-13)
    np.testing.assert_allclose(g, gx, rtol=1e-12)
    e = 1e-6
    fd = [(loss(a.at[i].add(e), True) - loss(a.at[i].add(-e), True)) / (2 * e) for i in range(2)]
    np.testing.assert_allclose(g, jnp.stack(fd), rtol=1e-7)
    # forward mode and vmap as well
    _, t = jax.jvp(lambda a: _solve(a, True)[0], (a,), (jnp.array([1.0, 0.0]),))
    _, tx = jax.jvp(_exact, (a,), (jnp.array([1.0, 0.0]),))
    np.testing.assert_allclose(t, tx, rtol=1e-12, atol=1e-15)
    batch = jnp.stack([a, a * 0.9, a * 1.1])
    np.testing.assert_allclose(
        jax.vmap(lambda a: _solve(a, True)[0])(batch), jax.vmap(_exact)(batch), rtol=1e-13
    )


def test_float32():
    a = jnp.array([1.3, -0.4], jnp.float32)
    x, r = jax.jit(lambda a: _solve(a, True, jnp.array([1.0, 0.5, 1.9], jnp.float32)))(a)
    assert x.dtype == jnp.float32 and r.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(r))) < 1e-5
    np.testing.assert_allclose(x, _exact(a.astype(jnp.float64)), rtol=2e-6)


def test_the_loop_carries_scalars():
    """What the option is for: the Newton loop's carry holds one scalar per unknown."""
    jaxpr = jax.make_jaxpr(lambda a: _solve(a, True))(jnp.array([1.3, -0.4])).jaxpr

    def loops(j):
        for e in j.eqns:
            if e.primitive.name in ("while", "scan"):
                yield e
            for p in e.params.values():
                if hasattr(p, "jaxpr") and hasattr(p.jaxpr, "eqns"):
                    yield from loops(p.jaxpr)

    found = list(loops(jaxpr))
    assert found
    for e in found:
        float_carry = [v.aval for v in e.outvars if jnp.issubdtype(v.aval.dtype, jnp.floating)]
        assert float_carry and all(av.shape == () for av in float_carry)


def test_bad_x0_is_a_clear_error():
    with pytest.raises(ValueError, match="x0"):
        newton_solve(
            lambda x, a: x - a,
            jnp.ones((2, 2)),
            jnp.ones((2, 2)),
            iters=2,
            jac_solve=lambda x, a, r: r,
            scalarize=True,
        )

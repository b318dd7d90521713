"""Second derivatives through the implicit solves and the time loop.

:func:`geomjax.integrators.newton.newton_solve`'s implicit-function-theorem rule applies
``J(x, a)^{-1}`` to the tangents with ``x`` and ``a`` differentiable, so that a second
derivative sees ``d(J^{-1})``.  Checked: the second derivative of the root of ``x³ + x = a``
against its closed form (float64 and float32), and the Hessian of an LGVI run (free rigid
body, ``simulate``, the SO(3) fast path) against central differences of its gradient, with
``jacfwd∘jacrev`` and ``jacfwd∘jacfwd``."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax import SO3
from geomjax.integrators.newton import newton_solve

FULL = os.environ.get("GEOMJAX_FULL", "0") == "1"


def _cubic(x, a):
    return x * x * x + x - a


def _cubic_jac_solve(x, a, r):
    return r / (3.0 * x * x + 1.0)


def _root(a, iters):
    # a few Newton iterations from a rough guess, then the root as a zero-iteration solve from
    # the stopped iterate (the LGVI's layout: the derivatives come from the second solve only)
    x0 = jax.lax.stop_gradient(
        newton_solve(_cubic, a / 2, a, iters=8, jac_solve=_cubic_jac_solve)[0]
    )
    return newton_solve(_cubic, x0, a, iters=iters, jac_solve=_cubic_jac_solve)[0]


@pytest.mark.parametrize("iters", [0, 2])
def test_newton_second_derivative_closed_form(dtype, iters):
    a = jnp.asarray(1.7, dtype)
    x = jax.jit(_root, static_argnums=1)(a, iters)
    # x³ + x = a: x' = 1/(3x² + 1), x'' = −6 x x'³
    xp = 1.0 / (3.0 * x * x + 1.0)
    want = -6.0 * x * xp**3
    eps = float(jnp.finfo(dtype).eps)
    root = lambda a: _root(a, iters)  # noqa: E731
    for name, d2 in (
        ("jacfwd∘grad", jax.jit(jax.jacfwd(jax.grad(root)))(a)),
        ("grad∘grad", jax.jit(jax.grad(jax.grad(root)))(a)),
    ):
        # a few roundings of a handful of operations (|x''| ~ 0.1)
        np.testing.assert_allclose(float(d2), float(want), rtol=64 * eps, err_msg=name)


def _hessians_and_differences(loss, x, both, e=1e-4):
    """``jacfwd∘jacrev`` (and with ``both`` ``jacfwd∘jacfwd``) of ``loss`` at ``x``, and
    central differences of its gradient (one compiled program)."""
    points = jnp.concatenate([x + e * jnp.eye(3), x - e * jnp.eye(3)])
    hessians, grads = jax.jit(
        lambda x, points: (
            (jax.jacfwd(jax.jacrev(loss))(x),)
            + ((jax.jacfwd(jax.jacfwd(loss))(x),) if both else ()),
            jax.vmap(jax.grad(loss))(points),
        )
    )(x, points)
    return hessians, (grads[:3] - grads[3:]) / (2 * e)


_BODY = gj.RigidBody(inertia=jnp.array([1.0, 2.0, 3.0]))
_PI0 = jnp.array([0.5, 1.0, 0.2])


def _check(loss, both):
    hessians, fd = _hessians_and_differences(loss, _PI0, both)
    # central differences with e = 1e-4: truncation e²/6 |f'''| ~ 1e-9 (|f'''| = O(1) here),
    # round-off eps |f'|/e ~ 1e-12; the former rule (J^{-1} at stopped x, a) was off by 1e-3
    # to 1e-2 here
    for name, hess in zip(("jacfwd∘jacrev", "jacfwd∘jacfwd"), hessians, strict=False):
        np.testing.assert_allclose(np.asarray(hess), fd, rtol=0, atol=1e-7, err_msg=name)


def test_lgvi_step_hessian_vector_product_matches_differences_of_the_gradient():
    def loss(pi0):
        state, _ = gj.LGVI().step(_BODY, gj.RigidBodyState(R=SO3.identity(), Pi=pi0), 0.3)
        return state.Pi[0] + state.R[0, 1]

    v, e = jnp.array([0.3, -0.5, 0.8]), 1e-4
    grad = jax.jit(jax.grad(loss))
    hvp = jax.jit(lambda x: jax.jvp(grad, (x,), (v,))[1])(_PI0)
    fd = (grad(_PI0 + e * v) - grad(_PI0 - e * v)) / (2 * e)
    # margins as in _check; the former rule was off by 1.9e-3 here
    np.testing.assert_allclose(np.asarray(hvp), fd, rtol=0, atol=1e-7)


@pytest.mark.long
def test_lgvi_simulate_hessian_matches_differences_of_the_gradient():
    # through the time loop: a linearized scan keeps the custom rules in its tangent part only;
    # the derivative of its primal part (the outer derivative) goes through the iteration
    def loss(pi0):
        state = gj.RigidBodyState(R=SO3.identity(), Pi=pi0)
        final = gj.simulate(_BODY, gj.LGVI(), state, dt=0.2, steps=3).final_state
        return final.Pi[0] + final.R[0, 1]

    _check(loss, both=True)

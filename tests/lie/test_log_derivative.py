"""Derivatives of the SO(3) and SE(3) logarithms along the group (``t ↦ log(g exp(tη))``)
against finite differences: first and second order, forward and reverse mode, at random points
and next to θ = 0 and θ = π, in float64 and float32."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import geomjax as gj

from .strategies import random_algebra, seeds

GROUPS = [gj.SO3, gj.SE3]

# second derivatives of SE(3)'s maps compile for minutes in all on a 2-core CPU: the long tier
# (the default tier's gradient checks near θ = 0 and θ = π are in test_groups.py and test_numerics.py)
pytestmark = pytest.mark.long


def _points(G, seed, dtype=np.float64):
    """Group elements: random ones (angles up to π − 0.1), and exp of angles 0, 1e-7, 1e-3 and
    π − 1e-3 along a fixed axis (with a translation on SE(3))."""
    rand = random_algebra(G, seed, (4,), scale=1.5, max_angle=np.pi - 0.1)
    u = np.zeros(G.dim)
    u[:3] = [0.48, -0.6, 0.64]
    if G.dim == 6:
        u[3:] = [0.3, -0.2, 0.5]
    special = np.stack([a * u for a in (0.0, 1e-7, 1e-3, np.pi - 1e-3)])
    return G.exp(jnp.asarray(np.concatenate([rand, special]), dtype))


def _derivatives(G, g, eta, c):
    """At each ``g``: the first and second derivative of ``t ↦ log(g exp(tη))`` at 0 (forward
    mode), and the gradient and Hessian (forward over reverse) of ``x ↦ c · log(g exp(x))``."""

    def path(g, eta, t):
        return G.log(G.compose(g, G.exp(t * eta)))

    def d1(g, eta, t):
        return jax.jvp(lambda s: path(g, eta, s), (t,), (jnp.ones_like(t),))[1]

    def d2(g, eta):
        t = jnp.zeros((), g.dtype)
        return jax.jvp(lambda s: d1(g, eta, s), (t,), (jnp.ones_like(t),))[1]

    def scalar(x, g):
        return jnp.dot(c, G.log(G.compose(g, G.exp(x))))

    x0 = jnp.zeros((len(g), G.dim), g.dtype)
    zero = jnp.zeros(len(g), g.dtype)
    return dict(
        d1=jax.vmap(d1)(g, eta, zero),
        d2=jax.vmap(d2)(g, eta),
        grad=jax.vmap(jax.grad(scalar))(x0, g),
        hessian=jax.vmap(jax.hessian(scalar))(x0, g),
    )


_derivatives_jit = jax.jit(_derivatives, static_argnums=0)


def _fd_references(G, g, eta, c):
    """Central differences in float64: of the log along the path (first derivative), of the
    forward-mode first derivative (second), and of the gradient (Hessian)."""

    def path(t):
        return jax.vmap(lambda g, eta: G.log(G.compose(g, G.exp(t * eta))))(g, eta)

    def d1(t):
        tt = jnp.full(len(g), t)
        return jax.vmap(
            lambda g, eta, t: jax.jvp(
                lambda s: G.log(G.compose(g, G.exp(s * eta))), (t,), (jnp.ones_like(t),)
            )[1]
        )(g, eta, tt)

    def grad(x):
        return jax.vmap(jax.grad(lambda x, g: jnp.dot(c, G.log(G.compose(g, G.exp(x))))))(x, g)

    h1, h2 = 1e-6, 1e-5
    x0 = jnp.zeros((len(g), G.dim))
    hess = jnp.stack(
        [(grad(x0 + h2 * e) - grad(x0 - h2 * e)) / (2 * h2) for e in jnp.eye(G.dim)], -1
    )
    return dict(
        d1=(path(h1) - path(-h1)) / (2 * h1),
        d2=(d1(h2) - d1(-h2)) / (2 * h2),
        hessian=hess,
    )


_fd_references_jit = jax.jit(_fd_references, static_argnums=0)


@pytest.mark.parametrize("G", GROUPS, ids=lambda G: G.name)
@settings(max_examples=5, deadline=None)
@given(seed=seeds())
def test_log_derivatives_match_finite_differences(G, seed):
    """float64: the first derivative along ``g exp(tη)`` against central differences of the log
    (h = 1e-6: truncation ~1e-12, round-off ~1e-10); the second, and the Hessian of ``c · log``,
    against central differences of the first derivative and of the gradient (h = 1e-5:
    truncation ~1e-10, round-off ~1e-11).  Measured ≤ 2.8e-10 relative to max(1, largest
    entry), at every point (θ = π − 1e-3 and 1e-7 included); asserted 1e-8.  The gradient
    equals the transpose of the forward-mode Jacobian (reverse mode against forward mode)."""
    g = _points(G, seed)
    rng = np.random.default_rng(seed)
    eta = jnp.asarray(rng.standard_normal((len(g), G.dim)))
    c = jnp.asarray(rng.standard_normal(G.dim))
    out = _derivatives_jit(G, g, eta, c)
    ref = _fd_references_jit(G, g, eta, c)
    for name, r in ref.items():
        a = np.asarray(out[name])
        assert np.all(np.isfinite(a)), name
        scale = np.max(np.abs(np.asarray(r)), axis=tuple(range(1, r.ndim)), keepdims=True)
        err = np.max(np.abs(a - np.asarray(r)) / np.maximum(scale, 1.0))
        assert err < 1e-8, (name, err)
    # reverse mode: grad(c · log(g exp(x))) = J^T c with J = d log(g exp(x))/dx (forward mode)
    J = jax.vmap(jax.jacfwd(lambda x, g: G.log(G.compose(g, G.exp(x)))))(
        jnp.zeros((len(g), G.dim)), g
    )
    np.testing.assert_allclose(out["grad"], jnp.einsum("bij,i->bj", J, c), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("G", GROUPS, ids=lambda G: G.name)
def test_log_derivatives_float32_match_float64(G):
    """float32 against float64 at the same (float32) points: finite everywhere, measured ≤ 1.9e-6
    (16 eps32) relative to max(1, largest entry) at every point, θ = 0, 1e-7 and π − 1e-3
    included; asserted 64 eps32."""
    g32 = _points(G, 3, np.float32)
    rng = np.random.default_rng(3)
    eta = rng.standard_normal((len(g32), G.dim))
    c = rng.standard_normal(G.dim)
    out = _derivatives_jit(G, g32, jnp.asarray(eta, jnp.float32), jnp.asarray(c, jnp.float32))
    ref = _derivatives_jit(G, g32.astype(jnp.float64), jnp.asarray(eta), jnp.asarray(c))
    for name, r in ref.items():
        a = np.asarray(out[name])
        assert a.dtype == np.float32 and np.all(np.isfinite(a)), name
        r = np.asarray(r)
        axes = tuple(range(1, r.ndim))
        scale = np.maximum(np.max(np.abs(r), axis=axes), 1.0)
        err = np.max(np.abs(a - r), axis=axes) / scale
        assert np.all(err < 64 * np.finfo(np.float32).eps), (name, err)

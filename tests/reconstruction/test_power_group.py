"""PowerGroup G^k: group axioms, Ad/ad/hat consistency and the Jacobian, against the factors."""

import jax.numpy as jnp
import numpy as np
import pytest

from geomjax.lie import SE2, SO3, PowerGroup


@pytest.mark.parametrize("base", [SO3, SE2])
def test_power_group_matches_factors(base, rng):
    G = PowerGroup(base, 2)
    xi, eta = jnp.asarray(rng.normal(size=(2, G.dim)) * 0.5)
    g, h = G.exp(xi), G.exp(eta)
    assert g.shape == (2, *base.element_shape) and float(G.defect(g)) < 1e-14
    np.testing.assert_allclose(G.log(g), xi, atol=1e-14)
    d = base.dim
    np.testing.assert_allclose(
        G.compose(g, h)[1], base.compose(base.exp(xi[d:]), base.exp(eta[d:]))
    )
    M = G.to_matrix(g)
    np.testing.assert_allclose(G.hat(G.Ad(g) @ eta), M @ G.hat(eta) @ jnp.linalg.inv(M), atol=1e-13)
    X, Y = G.hat(xi), G.hat(eta)
    np.testing.assert_allclose(G.hat(G.ad(xi) @ eta), X @ Y - Y @ X, atol=1e-13)
    np.testing.assert_allclose(G.vee(G.hat(eta)), eta, atol=1e-15)
    # left Jacobian: exp(ξ + δ) ≈ exp(J_l δ) exp(ξ)
    dl = 1e-6 * eta
    lhs = G.log(G.compose(G.exp(xi + dl), G.inverse(g)))
    np.testing.assert_allclose(lhs, G.jac_left(xi) @ dl, atol=1e-12)
    np.testing.assert_allclose(G.jac_left(xi) @ G.jac_left_inv(xi), jnp.eye(G.dim), atol=1e-13)
    assert G.identity().shape == g.shape and G.check(g).shape == g.shape
    with pytest.raises(ValueError, match="PowerGroup"):
        PowerGroup(base, 0)

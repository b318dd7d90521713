"""The left-trivialized gradient and the Cayley map of a power group ``G^k``, against central
differences of ``d/dε V(g exp(ε η))`` and against the factors' own maps.

``<dV(g), η> = d/dε V(g exp(ε η))|₀`` with ``η = (η_1, …, η_k)`` concatenated as the power
group's algebra coordinates: for a potential of stacked factors this is the sum of the partial
left gradients, so a separable ``V(g) = Σ V_i(g_i)`` has the factors' left gradients side by
side."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

from geomjax.lie import SE3, SO3, LieGroup, PowerGroup

from .strategies import seeds

SO3_2 = PowerGroup(SO3, 2)


def _coupled(g):
    """A potential that couples the factors and is not linear in the matrix entries."""
    R1, R2 = g[0], g[1]
    W = jnp.arange(9.0, dtype=g.dtype).reshape(3, 3) / 9.0
    return jnp.sin(jnp.trace(R1.T @ W @ R2)) + jnp.sum(R1[2] * R2[:, 0]) ** 2 + 0.3 * R2[1, 2]


@functools.partial(jax.jit, static_argnums=(0,))
def _gradient_and_differences(V, g, etas, h):
    """``left_gradient(g, ∇V) · η`` and ``(V(g exp(h η)) − V(g exp(−h η))) / 2h`` per row of
    ``etas``."""
    lg = SO3_2.left_gradient(g, jax.grad(V)(g))

    def central(eta):
        return (V(SO3_2.rplus(g, h * eta)) - V(SO3_2.rplus(g, -h * eta))) / (2 * h)

    return lg @ etas.T, jax.vmap(central)(etas)


@given(seed=seeds())
def test_left_gradient_is_the_directional_derivative(seed):
    """float64: a coupled potential on SO(3) × SO(3) at a random element, random directions.
    Central differences with h = 1e-5 err by O(h² |V'''|) ≈ 1e-10 plus rounding eps·|V|/h ≈
    1e-11; the tolerance 1e-8 is well above both and far below the O(1) values compared."""
    rng = np.random.default_rng(seed)
    g = SO3_2.exp(jnp.asarray(rng.uniform(-2.0, 2.0, 6)))
    etas = jnp.asarray(rng.standard_normal((4, 6)))
    lhs, fd = _gradient_and_differences(_coupled, g, etas, 1e-5)
    assert np.max(np.abs(fd)) > 1e-3  # the directions see the potential
    np.testing.assert_allclose(lhs, fd, rtol=0, atol=1e-8)


def _tops(R):
    """Two heavy-top-like potentials, ``V_1(R) = <e3, R ρ_1>`` and a quadratic ``V_2``."""
    rho = jnp.asarray([0.1, -0.2, 0.5], R.dtype)
    J = jnp.asarray([1.0, 2.0, 3.0], R.dtype)
    e = jnp.asarray([0.3, 0.4, 0.866], R.dtype)
    return (R[..., 2, :] @ rho, (jnp.swapaxes(R, -1, -2) @ e) ** 2 @ J)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_separable_potential_has_the_factors_gradients(dtype, batch):
    """``V(R_1, R_2) = V_1(R_1) + V_2(R_2)``: the power group's left gradient is
    ``(SO3.left_gradient(R_1, ∇V_1), SO3.left_gradient(R_2, ∇V_2))``, batched too; and the
    generic formula of :class:`LieGroup` (``to_matrix``, ``to_matrix_gradient``, ``hat``) gives
    the same, so the two definitions agree on the block-diagonal matrix representation."""
    rng = np.random.default_rng(3)
    g = SO3_2.exp(jnp.asarray(rng.uniform(-2.0, 2.0, (*batch, 6)), dtype))

    def V(g):
        v1, _ = _tops(g[..., 0, :, :])
        _, v2 = _tops(g[..., 1, :, :])
        return jnp.sum(v1 + v2)

    grad = jax.grad(V)(g)
    lg = SO3_2.left_gradient(g, grad)
    assert lg.shape == (*batch, 6) and lg.dtype == dtype
    R1, R2 = g[..., 0, :, :], g[..., 1, :, :]
    f1 = SO3.left_gradient(R1, jax.grad(lambda R: jnp.sum(_tops(R)[0]))(R1))
    f2 = SO3.left_gradient(R2, jax.grad(lambda R: jnp.sum(_tops(R)[1]))(R2))
    tol = 1e-13 if dtype == jnp.float64 else 2e-6
    np.testing.assert_allclose(lg, jnp.concatenate([f1, f2], -1), rtol=0, atol=tol)
    generic = LieGroup.left_gradient(SO3_2, g, grad)
    np.testing.assert_allclose(generic, lg, rtol=0, atol=tol)


def test_power_of_se3_left_gradient():
    """The same on SE(3) × SE(3) (a factor with its own matrix gradient, ``(ω, v)`` order):
    against central differences of ``V(g exp(h η))``."""
    G = PowerGroup(SE3, 2)
    rng = np.random.default_rng(5)
    g = G.exp(jnp.asarray(rng.uniform(-1.5, 1.5, 12)))

    def V(g):
        return jnp.sum(jnp.sin(g[0] @ g[1])) + g[1, 2, 3] * g[0, 0, 3]

    lg = G.left_gradient(g, jax.grad(V)(g))
    for eta in rng.standard_normal((3, 12)):
        eta = jnp.asarray(eta)
        fd = (V(G.rplus(g, 1e-5 * eta)) - V(G.rplus(g, -1e-5 * eta))) / 2e-5
        assert abs(float(lg @ eta) - float(fd)) < 1e-8


def test_left_gradient_shapes_named():
    """A gradient of one factor's shape is refused with the argument named."""
    g = SO3_2.identity()
    with pytest.raises(ValueError, match="euclidean_grad.*2, 3, 3"):
        SO3_2.left_gradient(g, jnp.zeros((3, 3)))
    with pytest.raises(ValueError, match="'g'"):
        SO3_2.left_gradient(jnp.eye(3), jnp.zeros((2, 3, 3)))


def test_cayley_map_is_the_factors():
    """``cay``, ``cay_inv``, the Cayley Jacobians and the coadjoint increment factor by factor:
    against SO(3)'s on each factor, the Jacobian against the forward-mode derivative of ``cay``
    (:meth:`LieGroup.cay_jac_left`'s generic fallback) and the increment against
    ``Ad(cay(ξ))ᵀ μ − μ``."""
    rng = np.random.default_rng(7)
    xi = jnp.asarray(rng.standard_normal(6))
    mu = jnp.asarray(rng.standard_normal(6))
    C = SO3_2.cay(xi)
    np.testing.assert_allclose(C[0], SO3.cay(xi[:3]), atol=1e-15)
    np.testing.assert_allclose(C[1], SO3.cay(xi[3:]), atol=1e-15)
    np.testing.assert_allclose(SO3_2.cay_inv(C), xi, atol=1e-13)
    J = SO3_2.cay_jac_left(xi)
    np.testing.assert_allclose(J, LieGroup.cay_jac_left(SO3_2, xi), atol=1e-13)
    np.testing.assert_allclose(SO3_2.cay_jac_left_inv(xi) @ J, jnp.eye(6), atol=1e-13)
    np.testing.assert_allclose(
        SO3_2.cay_coAd_increment(xi, mu), SO3_2.Ad(C).T @ mu - mu, atol=1e-14
    )

"""Numerics near the singular configurations θ → 0 and θ → π, in float64 and float32."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from hypothesis import given
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

import geomjax as gj

from .strategies import MATRIX_GROUPS, group_id, random_algebra

DTYPES = [jnp.float64, jnp.float32]


def _unit_rot(G, dtype):
    """A unit vector along the rotational axes (so that |rot part| = 1)."""
    u = np.zeros(G.dim)
    if G.name in ("SO3", "SE3"):
        u[:3] = np.array([0.48, -0.6, 0.64])
        u[3:] = np.array([0.3, -0.2, 0.5])[: G.dim - 3]
    else:
        u[0] = 1.0
        u[1:] = 0.4
    return jnp.asarray(u, dtype)


def _scalar_fns(G):
    W = jnp.asarray(np.random.default_rng(0).standard_normal((G.matrix_dim, G.matrix_dim)))
    V = jnp.asarray(np.random.default_rng(1).standard_normal((G.dim, G.dim)))
    return {
        "exp": lambda x: jnp.sum(W.astype(x.dtype) * G.exp(x)),
        "log∘exp": lambda x: jnp.sum(jnp.sin(G.log(G.exp(x)))),
        "cay": lambda x: jnp.sum(W.astype(x.dtype) * G.cay(0.5 * x)),
        "jac_right": lambda x: jnp.sum(V.astype(x.dtype) * G.jac_right(x)),
        "jac_left_inv": lambda x: jnp.sum(V.astype(x.dtype) * G.jac_left_inv(x)),
    }


@eqx.filter_jit
def _grads_and_hessians(G, points):
    """Gradients of all scalar test functions, Hessians of those of exp/log/cay, at every point."""
    out = {}
    for name, f in _scalar_fns(G).items():
        out["grad " + name] = jax.vmap(jax.grad(f))(points)
        if name in ("exp", "log∘exp"):  # (Hessians of the rest compile slowly and add little)
            out["hessian " + name] = jax.vmap(jax.hessian(f))(points)
    return out


@pytest.mark.long
@pytest.mark.parametrize("G", MATRIX_GROUPS, ids=group_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_grad_and_hessian_are_finite(G, dtype):
    """At θ = 0, θ = 1e-7 and θ = π − δ (δ = 1e-6 in float64, 1e-3 in float32): finite, and right.

    - log∘exp is the identity inside the principal ball, so its test function is Σ sin ξ_i with
      Hessian diag(−sin ξ) (closed form).  Measured ≤ 4 eps at every point; asserted 64 eps,
      below the eps/δ round-off that a log dividing by sin θ near π would show (1.2e-4 in
      float32, 2.2e-10 in float64).
    - float64: the Hessian of exp against central differences of its gradient (h = 1e-5:
      truncation ~h² and round-off ~eps/h, both ~1e-11; measured ≤ 4e-11), asserted 1e-9.
    - float32: every gradient and Hessian against the float64 ones at the same points; measured
      ≤ 1.1 eps32·max|H| (1.3e-7); asserted 16 eps32·max(1, |reference|).
    """
    u = _unit_rot(G, dtype)
    gap = 1e-6 if dtype == jnp.float64 else 1e-3
    points = jnp.stack([0.0 * u, 1e-7 * u, (np.pi - gap) * u]).astype(dtype)
    out = _grads_and_hessians(G, points)
    for name, val in out.items():
        assert val.dtype == dtype, name
        assert bool(jnp.all(jnp.isfinite(val))), (name, val)
    eps = float(jnp.finfo(dtype).eps)
    x64 = points.astype(jnp.float64)
    closed = jax.vmap(jnp.diag)(-jnp.sin(x64))
    np.testing.assert_allclose(
        np.asarray(out["hessian log∘exp"], np.float64), closed, rtol=0, atol=64 * eps
    )
    if dtype == jnp.float64:
        grad = jax.jit(jax.vmap(jax.grad(_scalar_fns(G)["exp"])))
        h = 1e-5
        fd = jnp.stack(
            [(grad(x64 + h * e) - grad(x64 - h * e)) / (2 * h) for e in jnp.eye(G.dim)], -1
        )
        np.testing.assert_allclose(np.asarray(out["hessian exp"]), fd, rtol=0, atol=1e-9)
    else:
        ref = _grads_and_hessians(G, x64)
        for name, val in out.items():
            tol = 16 * eps * max(1.0, float(jnp.max(jnp.abs(ref[name]))))
            err = float(jnp.max(jnp.abs(val.astype(jnp.float64) - ref[name])))
            assert err < tol, (name, err, tol)


def _series(G, y, coeffs):
    """sum_k coeffs[k] A^k with A = hat(y) (matrix) — a polynomial, no removable singularity."""
    A = G.hat(y)
    term, out = jnp.eye(G.matrix_dim), coeffs[0] * jnp.eye(G.matrix_dim)
    for c in coeffs[1:]:
        term = term @ A
        out = out + c * term
    return out


@eqx.filter_jit
def _derivative_references(G, W, x):
    inv_fact = [1.0 / math.factorial(k) for k in range(10)]
    f = lambda y: jnp.sum(W * G.exp(y))  # noqa: E731
    f_ref = lambda y: jnp.sum(W * _series(G, y, inv_fact))  # noqa: E731

    def jr_series(y):
        A = -G.ad(y)
        term, out = jnp.eye(G.dim), jnp.eye(G.dim)
        for k in range(1, 9):
            term = term @ A / (k + 1)
            out = out + term
        return out

    log_exp = lambda y: G.log(G.exp(y))  # noqa: E731
    return {
        "grad exp": (jax.grad(f)(x), jax.grad(f_ref)(x), 1e-12),
        "hessian exp": (jax.hessian(f)(x), jax.hessian(f_ref)(x), 1e-12),
        "d J_r": (jax.jacfwd(G.jac_right)(x), jax.jacfwd(jr_series)(x), 1e-12),
        "d J_r^-1": (
            jax.jacfwd(G.jac_right_inv)(x),
            jax.jacfwd(lambda y: jnp.linalg.inv(jr_series(y)))(x),
            1e-12,
        ),
        "d log∘exp = I": (jax.jacfwd(log_exp)(x), jnp.eye(G.dim), 1e-12),
        "d² log∘exp = 0": (jax.hessian(log_exp)(x), jnp.zeros((G.dim,) * 3), 1e-10),
    }


@pytest.mark.long
@pytest.mark.parametrize("G", MATRIX_GROUPS, ids=group_id)
def test_derivatives_at_zero_match_independent_references(G):
    """Derivatives at (and next to) 0 against references without removable singularities: the
    Hessian of a function of exp against the truncated power series of the matrix exponential, the
    derivatives of J_r and J_r^{-1} against J_r(ξ) = Σ_k (−ad ξ)^k/(k+1)!, and log∘exp = id."""
    W = jnp.asarray(np.random.default_rng(2).standard_normal((G.matrix_dim, G.matrix_dim)))
    for x in (jnp.zeros(G.dim), 1e-3 * _unit_rot(G, jnp.float64), 1e-9 * _unit_rot(G, jnp.float64)):
        for name, (a, b, atol) in _derivative_references(G, W, x).items():
            np.testing.assert_allclose(a, b, atol=atol, err_msg=name)


@pytest.mark.parametrize("G", MATRIX_GROUPS, ids=group_id)
@pytest.mark.parametrize("gap", [1e-3, 1e-6, 1e-9])
def test_log_near_pi_is_accurate_with_correct_derivative(G, gap):
    """At θ = π − gap: log(exp ξ) = ξ to round-off, and its derivative along the group,
    d/dt log(exp(ξ) exp(tη)) = J_r^{-1}(ξ) η, agrees with central differences."""
    xi = (np.pi - gap) * _unit_rot(G, jnp.float64)
    if G.name in ("SO3", "SE3"):
        xi = xi.at[:3].set(xi[:3] / (np.pi - gap))  # |ω| = 1 → rescale to π - gap
        xi = xi.at[:3].multiply(np.pi - gap)
    np.testing.assert_allclose(G.log(G.exp(xi)), xi, atol=1e-12)
    g = G.exp(xi)
    eta = jnp.asarray(random_algebra(G, 5, ()))
    path = lambda t: G.log(G.compose(g, G.exp(t * eta)))  # noqa: E731
    _, d_ad = jax.jvp(path, (0.0,), (1.0,))
    d_closed = G.jac_right_inv(xi) @ eta
    h = min(1e-6, gap / 10)  # stay inside the principal ball
    d_fd = (path(h) - path(-h)) / (2 * h)
    np.testing.assert_allclose(d_ad, d_closed, rtol=1e-8, atol=1e-8)
    tol = max(2e-5, 50 * np.finfo(np.float64).eps / h)  # truncation vs round-off of the FD
    np.testing.assert_allclose(d_fd, d_closed, rtol=tol, atol=tol)


@pytest.mark.parametrize("G", MATRIX_GROUPS, ids=group_id)
def test_float32_accuracy_near_pi_and_zero(G):
    for theta in (np.pi - 1e-3, 1e-4, 0.0):
        xi = (theta * _unit_rot(G, jnp.float64)).astype(jnp.float32)
        out = G.log(G.exp(xi))
        assert out.dtype == jnp.float32
        np.testing.assert_allclose(out, xi, atol=2e-5 if theta > 3 else 1e-6)


# --------------------------------------------------------------------------------------------
# membership checks


@pytest.mark.parametrize("G", MATRIX_GROUPS, ids=group_id)
def test_check_raises_clear_errors(G):
    g = G.exp(jnp.asarray(random_algebra(G, 0, (4,))))
    assert G.check(g, name="R0") is not None
    bad = g.at[1, 0, 0].add(1e-3)
    assert not bool(G.is_member(bad)[1]) and bool(G.is_member(bad)[0])
    with pytest.raises(ValueError, match="'R0'.*not an element of " + G.name):
        G.check(bad, name="R0")
    with pytest.raises(ValueError, match="'R0'"):
        G.check(g.at[0, 0, 0].set(jnp.nan), name="R0")
    with pytest.raises(ValueError, match="'R0'.*shape"):
        G.check(g[..., :-1], name="R0")
    # a looser tolerance accepts it
    G.check(bad, name="R0", tol=1e-2)
    # under jit the same check is compiled with equinox.error_if
    checked = eqx.filter_jit(lambda x: G.check(x, name="R0"))
    np.testing.assert_array_equal(checked(g), g)
    with pytest.raises(eqx.EquinoxRuntimeError, match="'R0'"):
        jax.block_until_ready(checked(bad))
    with pytest.raises(Exception, match="'R0'"):  # plain jax.jit surfaces it as an XLA error
        jax.block_until_ready(jax.jit(lambda x: G.check(x, name="R0"))(bad))


# --------------------------------------------------------------------------------------------
# SO(3)-specific API


def test_quaternions_against_scipy():
    R = gj.SO3.random(jax.random.PRNGKey(0), (200,))
    q = gj.SO3.to_quaternion(R)
    assert bool(jnp.all(q[:, 0] >= 0))
    q_ref = Rotation.from_matrix(np.asarray(R)).as_quat(scalar_first=True)
    q_ref = q_ref * np.sign(q_ref[:, :1])
    np.testing.assert_allclose(q, q_ref, atol=1e-12)
    np.testing.assert_allclose(gj.SO3.from_quaternion(q), R, atol=1e-12)
    np.testing.assert_allclose(gj.SO3.from_quaternion(-q), R, atol=1e-12)  # double cover
    np.testing.assert_allclose(
        gj.SO3.log(R), Rotation.from_matrix(np.asarray(R)).as_rotvec(), atol=1e-10
    )


@given(seed=st.integers(0, 2**30), noise=st.floats(1e-6, 0.3))
def test_project_is_the_polar_factor(seed, noise):
    rng = np.random.default_rng(seed)
    R = np.asarray(gj.SO3.exp(rng.standard_normal(3)))
    M = R + noise * rng.standard_normal((3, 3))
    P = np.asarray(gj.SO3.project(M))
    U, _ = scipy.linalg.polar(M)
    if np.linalg.det(U) > 0:
        np.testing.assert_allclose(P, U, atol=1e-10)
    assert float(gj.SO3.defect(P)) < 1e-12
    np.testing.assert_allclose(gj.SO3.project(R), R, atol=1e-12)


def test_random_rotations_are_haar():
    """E[R] = 0 and E[tr R] = 0 for the Haar measure; the angle density is (1 − cos θ)/π."""
    R = gj.SO3.random(jax.random.PRNGKey(1), (20000,))
    assert float(jnp.max(jnp.abs(jnp.mean(R, 0)))) < 0.03
    theta = jnp.linalg.norm(gj.SO3.log(R), axis=-1)
    # P(θ < π/2) = (θ − sin θ)/π at π/2 = (π/2 − 1)/π ≈ 0.1817
    assert abs(float(jnp.mean(theta < np.pi / 2)) - (np.pi / 2 - 1) / np.pi) < 0.01


def test_se3_helpers_and_kirchhoff_coad():
    key = jax.random.PRNGKey(3)
    g = gj.SE3.random(key, (3,))
    R, p = gj.SE3.rotation(g), gj.SE3.translation(g)
    np.testing.assert_allclose(gj.SE3.from_rotation_translation(R, p), g)
    w, v, pi, lin = (jnp.asarray(np.random.default_rng(i).standard_normal(3)) for i in range(4))
    out = gj.SE3.coad(jnp.concatenate([w, v]), jnp.concatenate([pi, lin]))
    # Kirchhoff: pi' = pi × ω + p × v, p' = p × ω
    # cross products of N(0,1) 3-vectors: rounding ≤ 2 eps|a||b| ≈ 4e-15 per term; 1e-13 bound
    np.testing.assert_allclose(out[:3], np.cross(pi, w) + np.cross(lin, v), atol=1e-13)
    np.testing.assert_allclose(out[3:], np.cross(lin, w), atol=1e-13)
    # SO3.coad is the rigid-body Euler term Π × Ω
    np.testing.assert_allclose(gj.SO3.coad(w, pi), np.cross(pi, w), atol=1e-13)

"""The unconstrained parameterizations of :mod:`geomjax.learn.parameterize` against independent
constructions: the log-Cholesky map (Pinheiro & Bates, *Unconstrained parametrizations for
variance-covariance matrices*, §2.2) built by hand from a lower triangle with an exponentiated
diagonal, its inverse against NumPy's Cholesky factor, round trips both ways, the origin mapped
to the identity, and SPD matrices for very negative log-diagonal entries (hypothesis, float64
and float32)."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from geomjax.learn.parameterize import from_unconstrained, size, to_unconstrained

DIMS = st.sampled_from([1, 2, 3, 6])


def _by_hand(theta, n):
    """``L Lᵀ`` with ``L`` the lower triangle of ``θ`` (row by row) and ``diag L = exp(θ_ii)``."""
    L = np.zeros((n, n))
    L[np.tril_indices(n)] = theta
    L[np.diag_indices(n)] = np.exp(np.diag(L))
    return L @ L.T


@given(n=DIMS, seed=st.integers(0, 2**31 - 1), spread=st.sampled_from([0.1, 0.5, 1.0]))
def test_log_cholesky_against_construction_by_hand(n, seed, spread):
    theta = spread * np.random.default_rng(seed).standard_normal(n * (n + 1) // 2)
    M = np.asarray(from_unconstrained(jnp.asarray(theta), "spd", (n, n)))
    np.testing.assert_allclose(M, _by_hand(theta, n), rtol=1e-12, atol=1e-300)
    # the inverse: the log of NumPy's Cholesky factor's diagonal, its lower triangle as it is
    L = np.linalg.cholesky(M)
    expected = L.copy()
    expected[np.diag_indices(n)] = np.log(np.diag(L))
    back = np.asarray(to_unconstrained(jnp.asarray(M), "spd"))
    # (Cholesky's backward error: entries of L to ~eps · cond(M) relative)
    tol = 1e-13 * np.linalg.cond(M) * (1 + np.abs(theta).max())
    np.testing.assert_allclose(back, expected[np.tril_indices(n)], atol=tol)
    np.testing.assert_allclose(back, theta, atol=tol)  # θ → M → θ
    assert size("spd", (n, n)) == theta.size


@given(n=DIMS, seed=st.integers(0, 2**31 - 1))
def test_spd_round_trip_from_matrices(n, seed):
    """``M → θ → M`` for random SPD matrices of condition number up to ~1e4."""
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.standard_normal((n, n)))[0]
    M = (Q * np.exp(rng.uniform(-4.0, 5.0, n))) @ Q.T
    M = 0.5 * (M + M.T)
    back = np.asarray(from_unconstrained(to_unconstrained(jnp.asarray(M), "spd"), "spd", (n, n)))
    np.testing.assert_allclose(back, M, rtol=1e-10, atol=1e-12 * np.abs(M).max())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 3, 6])
def test_origin_is_the_identity_and_negative_log_diagonals_stay_spd(n, dtype):
    k = n * (n + 1) // 2
    eye = np.asarray(from_unconstrained(jnp.zeros(k, dtype), "spd", (n, n)))
    assert eye.dtype == dtype
    np.testing.assert_array_equal(eye, np.eye(n, dtype=dtype))
    # log-diagonal entries of −8: the diagonal of L is exp(−8) ≈ 3.4e-4, positive, and the
    # matrix is SPD (its eigenvalues positive, its Cholesky factor recovers θ)
    theta = np.zeros(k, dtype)
    rows, cols = np.tril_indices(n)
    theta[rows == cols] = -8.0
    theta[rows != cols] = 1e-5
    M = np.asarray(from_unconstrained(jnp.asarray(theta), "spd", (n, n)), np.float64)
    assert np.all(np.linalg.eigvalsh(M) > 0)
    np.testing.assert_allclose(np.diag(np.linalg.cholesky(M)), np.exp(-8.0), rtol=1e-3)
    back = np.asarray(to_unconstrained(jnp.asarray(M, dtype), "spd"))
    tol = 1e-8 if dtype == np.float64 else 2e-2
    np.testing.assert_allclose(back[rows == cols], -8.0, atol=tol)


@given(seed=st.integers(0, 2**31 - 1))
def test_positive_and_free(seed):
    x = np.random.default_rng(seed).uniform(1e-3, 1e3, (2, 3))
    theta = to_unconstrained(jnp.asarray(x), "positive")
    np.testing.assert_allclose(np.asarray(theta), np.log(x).reshape(-1), rtol=1e-14)
    np.testing.assert_allclose(np.asarray(from_unconstrained(theta, "positive", (2, 3))), x)
    np.testing.assert_array_equal(
        np.asarray(from_unconstrained(to_unconstrained(jnp.asarray(x), "free"), "free", (2, 3))), x
    )
    np.testing.assert_array_equal(
        np.asarray(from_unconstrained(jnp.zeros(6), "positive", (2, 3))), np.ones((2, 3))
    )


def test_unknown_kind_named():
    with pytest.raises(ValueError, match="parameterization kind must be one of"):
        to_unconstrained(np.eye(2), "cholesky")
    with pytest.raises(ValueError, match="parameterization kind must be one of"):
        from_unconstrained(jnp.zeros(3), "cholesky", (2, 2))

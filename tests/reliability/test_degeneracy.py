"""Degeneracy of SPD solves by a stated criterion, not by Cholesky happening to
return NaN on a round-off pivot.

Criterion (geomjax._linalg): ``ρ = min_i L_ii²/G_ii`` (pivot ratio of the Cholesky factor),
degenerate ⇔ ``not ρ > τ = 100·n·eps``.  For an exactly rank-deficient matrix the computed pivot
is round-off, ``|ρ| ≲ (N + n)·eps`` times a factor of order one, of either sign depending on the
machine; every test below asserts that the measured quantity is a factor ≥ 10 away from ``τ`` on
the side it is classified, so the classification cannot flip on another IEEE machine.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import geomjax as gj
from geomjax._linalg import (
    degeneracy_tol,
    is_degenerate,
    pivot_ratio,
    signed_pivot_ratios,
    small_cho_solve,
    small_cholesky,
)
from geomjax.riemann import LevelSetConstraint
from geomjax.riemann._checks import Checker, check_spd
from geomjax.systems import EulerPoincareSystem, NonholonomicSystem, RigidBody
from geomjax.systems.base import check_spd as check_spd_systems

# the collinear body of tests/riemann/test_rigid.py
COLLINEAR_M = np.array([1.0, 2.0, 0.5])
COLLINEAR_REF = np.outer([0.0, 1.0, 2.5], [0.6, 0.0, 0.8]) + 1.0


def pairwise_constraint(ref):
    n = ref.shape[0]
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    L2 = jnp.stack([jnp.sum((ref[i] - ref[j]) ** 2) for i, j in pairs])

    def c(xf):
        x = xf.reshape(n, 3)
        return jnp.stack([jnp.sum((x[i] - x[j]) ** 2) for i, j in pairs]) - L2

    return c


DTYPES = [np.float64, np.float32]


def _with_pivot_ratio(rho, dtype, n=3):
    """An SPD ``G = L Lᵀ`` whose last pivot ratio ``L_nn²/G_nn`` is ``rho`` (others O(1))."""
    rng = np.random.default_rng(1)
    L = np.tril(rng.uniform(0.2, 1.0, (n, n)))
    off = np.sum(L[-1, :-1] ** 2)
    L[-1, -1] = np.sqrt(rho * off / (1 - rho))  # L_nn² / (off + L_nn²) = rho
    return (L @ L.T).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_collinear_distance_constraints_by_the_criterion(dtype):
    """The issue's case: 3 collinear particles, 3 distance constraints of rank 2.  The Schur
    complement's last pivot is round-off; we show |ρ| ≪ τ whatever its sign, so the error is
    raised on every machine (before: only where the round-off pivot came out negative)."""
    m, ref = COLLINEAR_M, COLLINEAR_REF.astype(dtype)
    L = LevelSetConstraint(pairwise_constraint(ref), np.repeat(m, 3).astype(dtype))
    _, _, S = L._schur(jnp.asarray(ref.ravel()))
    tau = degeneracy_tol(3, dtype)
    rho = signed_pivot_ratios(S)
    # ρ of an exactly singular 3×3 (N = 9) is O(10 eps); the margin to τ = 300 eps is ≥ 10×
    assert np.min(np.abs(rho)) <= tau / 10, (rho, tau)
    assert bool(is_degenerate(S))
    with pytest.raises(ValueError, match="constraints must be independent") as e:
        L.multipliers(ref.ravel(), np.zeros(9, dtype))
    assert "pivot ratio" in str(e.value)


@pytest.mark.parametrize("dtype", DTYPES)
def test_threshold_from_both_sides(dtype):
    tau = degeneracy_tol(3, dtype)
    b = np.ones(3, dtype)
    good = _with_pivot_ratio(10 * tau, dtype)  # a factor 10 above: accepted everywhere
    bad = _with_pivot_ratio(tau / 10, dtype)  # a factor 10 below: rejected everywhere
    # the measured pivot ratio is within 2x of the construction (relative error ~ eps/ρ ≤ 1/30)
    np.testing.assert_allclose(float(pivot_ratio(jnp.asarray(good))[0]), 10 * tau, rtol=0.5)
    x = Checker("t").solve(jnp.asarray(good), b, "G")
    # the solve itself is only accurate to ~eps/ρ: check the residual, not x
    np.testing.assert_allclose(good.astype(np.float64) @ np.asarray(x, np.float64), b, rtol=0.05)
    with pytest.raises(ValueError, match=r"'G' is degenerate.*pivot ratio"):
        Checker("t").solve(jnp.asarray(bad), b, "G")
    with pytest.raises(ValueError, match="'M'"):
        check_spd(jnp.asarray(bad), "M", "t")
    with pytest.raises(ValueError, match="'M'"):
        check_spd_systems(jnp.asarray(bad), "M", "t", 3)
    check_spd(jnp.asarray(good), "M", "t")
    check_spd_systems(jnp.asarray(good), "M", "t", 3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rank_deficient_is_degenerate(dtype):
    """``B Bᵀ`` with ``B`` of rank 2: the computed pivot is round-off of either sign."""
    B = np.random.default_rng(3).standard_normal((4, 2)).astype(dtype)
    G = B @ B.T
    assert np.min(np.abs(signed_pivot_ratios(G))) <= degeneracy_tol(4, dtype) / 10
    with pytest.raises(ValueError, match="'G' is degenerate"):
        Checker("t").solve(jnp.asarray(G), np.ones(4, dtype), "G")
    with pytest.raises(ValueError, match="'inertia'"):
        EulerPoincareSystem(gj.Rn(4), G)


@pytest.mark.parametrize("dtype", DTYPES)
def test_small_scale_is_not_degenerate(dtype):
    """A good metric × 1e-12 is as good as the metric: ρ is invariant under G → s G (and under
    diagonal scaling D G D, i.e. a change of units).  Scaling by a power of ten only rounds G's
    entries; Cholesky is backward stable, so ρ and the solve keep a relative error
    ≲ n·eps·κ(G) (κ = 57 here: 1.1e-13 in float64, 6.1e-5 in float32), the bound asserted;
    measured ≤ 6 eps (1.3e-15 and 7.2e-7)."""
    G = _with_pivot_ratio(0.3, np.float64)
    rho0 = float(pivot_ratio(jnp.asarray(G))[0])
    assert rho0 > 0.1
    n = G.shape[0]
    rtol = n * np.finfo(dtype).eps * np.linalg.cond(G)
    for s in (1e-12, 1e12):
        Gs = (s * G).astype(dtype)
        rho = float(pivot_ratio(jnp.asarray(Gs))[0])
        np.testing.assert_allclose(rho, rho0, rtol=rtol)
        b = np.ones(3, dtype)
        x = Checker("t").solve(jnp.asarray(Gs), b, "G")
        np.testing.assert_allclose(np.asarray(x, np.float64) * s, np.linalg.solve(G, b), rtol=rtol)
    D = np.diag([1e-6, 1.0, 1e6])  # D G D (float64): ρ invariant up to rounding of the entries
    rho_d = float(pivot_ratio(jnp.asarray(D @ G @ D))[0])
    np.testing.assert_allclose(rho_d, rho0, rtol=n * np.finfo(np.float64).eps * np.linalg.cond(G))
    # constructors accept small-scale inertias
    RigidBody(np.array([1e-12, 2e-12, 2.5e-12], dtype))
    EulerPoincareSystem(gj.SO3, (1e-12 * G).astype(dtype))
    gj.riemann.LeftInvariantMetric(gj.SO3, (1e-12 * G).astype(dtype))


def test_degenerate_under_jit_raises_at_runtime():
    bad = jnp.asarray(_with_pivot_ratio(1e-16, np.float64))

    @eqx.filter_jit
    def f(G):
        chk = Checker("t")
        return chk.done(chk.solve(G, jnp.ones(3), "G"))

    with pytest.raises(eqx.EquinoxRuntimeError, match="'G' is degenerate"):
        f(bad).block_until_ready()
    f(jnp.asarray(_with_pivot_ratio(0.3, np.float64))).block_until_ready()


def test_make_state_dependent_constraints():
    """A nonholonomic system whose two constraints coincide: the saddle system is singular;
    make_state says so (and names the configuration) instead of returning huge multipliers."""

    def lag(g, x, v):
        return 0.5 * jnp.dot(v, v)

    def con(g, x, v, t):
        return jnp.stack([v[0] + v[1], 2.0 * (v[0] + v[1])])

    sys_ = NonholonomicSystem(gj.Rn(3), lag, con)
    with pytest.raises(ValueError, match=r"A M⁻¹ Aᵀ is degenerate.*'g', 'x'"):
        sys_.make_state(jnp.zeros(3), None, jnp.array([1.0, -1.0, 0.5]))
    ok = NonholonomicSystem(gj.Rn(3), lag, lambda g, x, v, t: v[:1] + v[1:2])
    s = ok.make_state(jnp.zeros(3), None, jnp.array([1.0, -1.0, 0.5]))
    assert np.all(np.isfinite(np.asarray(s.lam)))


@jax.jit  # one program per size
def _factor_and_solve(G, b):
    L = small_cholesky(G)
    return L, small_cho_solve(L, b)


@settings(max_examples=20, deadline=None)
@given(
    n=st.sampled_from([1, 2, 3, 5, 8, 9]),
    seed=st.integers(0, 2**31 - 1),
    log_cond=st.floats(0.0, 8.0),
)
def test_unrolled_cholesky_and_solve_match_lapack(n, seed, log_cond):
    """:func:`small_cholesky` / :func:`small_cho_solve` (unrolled for n ≤ 8) against NumPy's
    LAPACK: both are backward stable for SPD matrices, so the factors agree to ~cond·eps relative
    and the solve's residual is ~eps·‖G‖‖x‖ (bounds with a factor 100·n)."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    G = (Q * np.logspace(0, log_cond, n)) @ Q.T
    G = 0.5 * (G + G.T)
    b = rng.normal(size=(n, 2))
    L, x = _factor_and_solve(G, b)
    eps, cond = np.finfo(float).eps, 10.0**log_cond
    np.testing.assert_allclose(
        L, np.linalg.cholesky(G), atol=100 * n * cond * eps * np.abs(G).max() ** 0.5
    )
    resid = np.abs(G @ np.asarray(x) - b).max()
    assert resid <= 100 * n * eps * np.abs(G).max() * np.abs(np.asarray(x)).max(), resid


def test_unrolled_cholesky_reports_an_indefinite_matrix_as_degenerate():
    # a negative pivot: NaN from there on (LAPACK: all NaN); the pivot ratio is NaN either way
    G = jnp.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    assert np.isnan(np.asarray(small_cholesky(G))).any()
    rho, _ = pivot_ratio(G)
    assert np.isnan(rho) and bool(is_degenerate(G))

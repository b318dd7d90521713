"""The Gauss–Newton covariance of :func:`geomjax.learn.fit_parameters`, ``C = s² (JᵀJ)⁻¹`` with
``s² = Σ r² / (m − p)``, against two laws that hold whatever the model:

* the fit is invariant under a wrong stated noise level: the residuals are divided by the
  stated σ, so the estimate, ``JᵀJ`` and ``s²`` scale together and the standard deviations do
  not change, while the reported residual scale ``s`` scales by the inverse (this holds only
  because of ``s²``: without it the deviations would follow the stated noise);
* at the true noise level ``s²`` is an unbiased estimate of 1 with ``m − p`` degrees of freedom
  (χ²_{m−p} / (m − p)): its mean over independent noise draws is 1 within its standard error.
  Records are kept short, so that ``p / m`` is large (a third) and the ``m`` in place of
  ``m − p`` would be many standard errors away.

The records are made by the fitted model's own discrete flow (the LGVI at the sample interval),
so that the only error is the noise put in."""

import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.learn import Recording, fit_parameters
from geomjax.learn.reference import noisy

I_TRUE = np.diag([1.0, 1.4, 1.9])
RHO_TRUE = np.array([0.02, -0.01, 0.3])
M, GRAV, H, SAMPLES, SIGMA = 1.0, 9.81, 0.05, 9, 1e-3
WHERE = lambda s: s.potential.rho  # noqa: E731  (3 unknowns, plus 6 of the initial state)


def _clean_record(seed):
    rng = np.random.default_rng(seed)
    sys = gj.RigidBody(jnp.asarray(I_TRUE), gj.HeavyTop(M, GRAV, RHO_TRUE))
    R0 = gj.SO3.exp(jnp.asarray(0.8 * rng.standard_normal(3)))
    s0 = sys.state_from_velocity(R0, jnp.asarray(1.5 * rng.standard_normal(3)))
    sol = gj.simulate(sys, gj.LGVI(), s0, H, SAMPLES - 1)
    return np.asarray(sol.times), np.asarray(sol.states.R)


def _guess():
    return gj.RigidBody(jnp.asarray(I_TRUE), gj.HeavyTop(M, GRAV, [0.0, 0.0, 0.2]))


def _fit(ts, R_meas, noise):
    return fit_parameters(_guess(), Recording(ts, R_meas), WHERE, noise=noise).check()


@pytest.fixture(scope="module")
def record():
    return _clean_record(0)


def test_a_wrong_stated_noise_changes_neither_estimate_nor_deviations(record):
    ts, R = record
    R_meas = noisy(R, SIGMA, np.random.default_rng(1))
    right, wrong = _fit(ts, R_meas, SIGMA), _fit(ts, R_meas, 10 * SIGMA)
    rho, std = np.asarray(right.values[0]), np.asarray(right.std[0])
    assert np.all(std > 0)
    # the estimate is the same minimizer (to the solver's tolerance, far below its deviation)
    np.testing.assert_allclose(np.asarray(wrong.values[0]), rho, atol=1e-6 * float(std.min()))
    np.testing.assert_allclose(np.asarray(wrong.std[0]), std, rtol=1e-6)
    np.testing.assert_allclose(wrong.covariance, right.covariance, rtol=1e-6, atol=0)
    # the residual scale reports the misstatement
    assert wrong.sigma == pytest.approx(right.sigma / 10, rel=1e-6)
    # and the deviations are those of the noise put in: the estimate is within a few of them
    assert np.all(np.abs(rho - RHO_TRUE) < 5 * std)


def test_residual_variance_is_unbiased_with_m_minus_p_degrees_of_freedom(record):
    """Mean of ``s²`` over 40 noise draws at the true noise: 1 within 3.5 standard errors.
    ``m = 27`` orientation residuals, ``p = 9`` unknowns: dividing by ``m`` instead would give a
    mean of ``18/27 = 0.67``, about six standard errors (~0.055) below."""
    ts, R = record
    s2 = []
    for seed in range(40):
        res = _fit(ts, noisy(R, SIGMA, np.random.default_rng(1000 + seed)), SIGMA)
        s2.append(res.sigma**2)
    s2 = np.asarray(s2)
    mean, se = s2.mean(), s2.std(ddof=1) / np.sqrt(s2.size)
    # the spread itself is that of χ²_18 / 18 (variance 2/18), a check that m − p = 18
    assert 0.5 * np.sqrt(2 / 18) < s2.std(ddof=1) < 1.6 * np.sqrt(2 / 18)
    assert abs(mean - 1.0) < 3.5 * se, (mean, se)

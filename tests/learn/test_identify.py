"""Identification of physical parameters (geomjax.learn.fit_parameters), checked against the
values the data were generated with by an independent reference (SciPy DOP853 on the
Newton–Euler equations, geomjax.learn.reference), against finite differences, and by repeated
noisy fits (calibration of the reported standard deviations)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.learn import FitError, Recording, fit_parameters, fitting_loss, identify
from geomjax.learn.reference import noisy, so3_reference
from geomjax.results import Status

I_TRUE = np.array([[1.0, 0.05, 0.02], [0.05, 1.4, -0.03], [0.02, -0.03, 1.9]])
RHO_TRUE = np.array([0.02, -0.01, 0.3])
M, GRAV = 1.0, 9.81
WHERE = lambda s: (s.inertia, s.potential.rho)  # noqa: E731


def clean_records(n_records, n_samples, h=0.05, torque=0.5, seed=0):
    rng = np.random.default_rng(seed)
    ts = np.arange(n_samples) * h
    out = []
    for _ in range(n_records):
        R0 = np.linalg.qr(rng.standard_normal((3, 3)))[0]
        R0 *= np.sign(np.linalg.det(R0))
        w0 = 1.5 * rng.standard_normal(3)
        u = torque * rng.standard_normal((n_samples - 1, 3))
        R, W = so3_reference(I_TRUE, R0, w0, ts, mass_g_rho=M * GRAV * RHO_TRUE, controls=u)
        out.append((ts, R, W, u))
    return out


def guess():
    return gj.RigidBody(np.diag([1.2, 1.2, 1.6]), gj.HeavyTop(M, GRAV, [0.0, 0.0, 0.2]))


@pytest.fixture(scope="module")
def small():
    return clean_records(2, 41)


def test_heavy_top_recovered_within_one_percent(small):
    sig = 1e-3
    rng = np.random.default_rng(1)
    data = [Recording(ts, noisy(R, sig, rng), controls=u) for ts, R, _, u in small]
    res = fit_parameters(guess(), data, WHERE, substeps=4, noise=sig).check()
    I, rho = (np.asarray(v) for v in res.values)
    assert np.linalg.norm(I - I_TRUE) / np.linalg.norm(I_TRUE) < 0.01
    assert np.linalg.norm(rho - RHO_TRUE) / np.linalg.norm(RHO_TRUE) < 0.01
    assert np.all(np.linalg.eigvalsh(I) > 0)  # SPD by construction
    z = np.concatenate([np.ravel(x) for x in res.z_scores((I_TRUE, RHO_TRUE))])
    assert np.all(np.abs(z) < 5.0)  # the reported deviations are of the right size
    assert 0.7 < res.sigma < 1.3  # residual scale matches the noise put in
    assert res.names == (".inertia", ".potential.rho")
    # the estimated initial velocity is the reference's (body angular velocity)
    st = res.initial_states[0]
    w_fit = np.asarray(res.system.velocity(st.Pi))
    assert np.max(np.abs(w_fit - small[0][2][0])) < 0.05


@pytest.mark.long
def test_loss_gradient_matches_finite_differences(small):
    ts, R, _, u = small[0]
    data = Recording(ts[:21], R[:21], controls=u[:20])
    loss, y0, _ = fitting_loss(guess(), data, WHERE, substeps=2, noise=1e-2, segment_length=10)
    y = y0 + 0.01 * jnp.sin(jnp.arange(y0.size))
    g = jax.jit(jax.grad(loss))(y)
    f = jax.jit(loss)
    rng = np.random.default_rng(3)
    for _ in range(3):
        d = rng.standard_normal(y.size)
        eps = 1e-6
        fd = (f(y + eps * d) - f(y - eps * d)) / (2 * eps)
        assert abs(float(fd) - float(g @ d)) <= 1e-6 * (abs(float(fd)) + 1.0)


def test_rank_deficiency_is_reported():
    # no known input: scaling inertia and first moment together leaves every motion unchanged
    recs = clean_records(1, 21, torque=0.0, seed=4)
    data = [Recording(ts, R) for ts, R, _, _ in recs]
    with pytest.warns(UserWarning, match=r"rank-deficient.*\.inertia.*\.potential\.rho"):
        res = fit_parameters(guess(), data, WHERE, noise=1e-3, max_iters=30)
    assert "rank-deficient" in res.message and res.status == Status.RANK_DEFICIENT
    with pytest.raises(FitError, match="rank-deficient"):
        res.check()


def test_repeated_fits_reuse_the_compiled_solver():
    """A second fit of the same structure (other records, other initial guess, a new ``where``
    lambda) traces — hence compiles — nothing new: the data and guesses are arguments of one
    compiled program keyed on the structure (the structure of the rank test above: in one
    process the two share it)."""
    traces = identify.TRACES
    # (a short sample interval: the LGVI's bias at one step per sample is then below 1 %)
    a = clean_records(1, 21, h=0.0125, seed=7)[0]
    b = clean_records(1, 21, h=0.0125, seed=8)[0]

    def fit(rec, I0):
        sys = gj.RigidBody(I0, gj.HeavyTop(M, GRAV, [0.0, 0.0, 0.2]))
        where = lambda s: (s.inertia, s.potential.rho)  # noqa: E731  (a new function per fit)
        return fit_parameters(sys, Recording(rec[0], rec[1], controls=rec[3]), where, noise=1e-3)

    before = traces["levenberg_marquardt"]
    ra = fit(a, np.diag([1.2, 1.2, 1.6]))
    after_first = traces["levenberg_marquardt"]
    assert after_first >= 1 and after_first - before <= 1  # counted; compiled at most once
    rb = fit(b, np.diag([0.9, 1.5, 2.0]))
    assert traces["levenberg_marquardt"] == after_first
    # both are real fits: noise-free records give the generating values (to the LGVI's
    # discretization error at the records' step)
    for r in (ra, rb):
        I, rho = (np.asarray(v) for v in r.values)
        assert r.converged
        assert np.linalg.norm(I - I_TRUE) < 0.02 * np.linalg.norm(I_TRUE)
        assert np.linalg.norm(rho - RHO_TRUE) < 0.02 * np.linalg.norm(RHO_TRUE)


@pytest.mark.long
def test_non_convergence_is_visible(small):
    ts, R, _, u = small[0]
    data = Recording(ts[:21], R[:21], controls=u[:20])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = fit_parameters(guess(), data, WHERE, noise=1e-3, max_iters=1)
    assert not res.converged
    assert "did not converge" in res.message and "max_iters" in res.message
    assert res.status == Status.MAX_ITERS and res.stop_reason == "max_iters"
    with pytest.raises(FitError, match="did not converge"):
        res.check()
    # multiple shooting: the cap is the whole continuation's (its first stage took it all)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = fit_parameters(guess(), data, WHERE, noise=1e-3, max_iters=1, segment_length=10)
    assert res.status == Status.MAX_ITERS and res.iterations == 1
    assert "max_iters=1 reached at continuity weight 10 of 1000" in res.message
    # the cost and the covariance are those of the last stage's residuals at the point reached,
    # not of a stage that ran no iteration (whose residuals and Jacobian were zeros)
    one = fit_parameters(guess(), data, WHERE, noise=1e-3, max_iters=0, segment_length=10)
    assert res.cost > 0 and np.isfinite(res.sigma) and res.sigma > 0
    assert np.all(np.isfinite(res.covariance)) and np.any(res.covariance != 0)
    # one iteration only evaluates the start (it takes no step): the same point as no iteration
    assert one.iterations == 0 and one.cost == res.cost


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda ts, R: Recording(ts[::-1], R), r"'data\.times' must be strictly increasing"),
        (lambda ts, R: Recording(ts, R[:-1]), r"'data\.g' must have shape"),
        (lambda ts, R: Recording(ts, R * 1.1), r"'data\.g' is far from SO3"),
        (
            lambda ts, R: Recording(ts, np.where(np.isnan(R), 0, R) * np.nan),
            r"'data\.g' must be finite",
        ),
        (
            lambda ts, R: Recording(ts, R, controls=np.zeros((3, 3))),
            r"'data\.controls' must have shape",
        ),
        (lambda ts, R: Recording(ts, R, xi=np.zeros((len(ts), 2))), r"'data\.xi' must have shape"),
        (lambda ts, R: Recording(ts**2, R), r"'data\.times' must be uniformly spaced"),
    ],
)
def test_bad_data_named(small, bad, match):
    ts, R, _, _ = small[0]
    with pytest.raises(ValueError, match=match):
        fit_parameters(guess(), bad(ts[:5] + 0.0, R[:5]), WHERE)


def test_bad_selection_named(small):
    ts, R, _, _ = small[0]
    data = Recording(ts[:5], R[:5])
    sys = guess()
    with pytest.raises(
        ValueError, match=r"argument 'where' must select floating arrays.*selection 0"
    ):
        fit_parameters(sys, data, lambda s: s.principal_axes)
    with pytest.raises(ValueError, match=r"argument 'where' failed"):
        fit_parameters(sys, data, lambda s: s.no_such_leaf)
    with pytest.raises(ValueError, match=r"argument 'kinds'"):
        fit_parameters(sys, data, WHERE, kinds=("spd",))
    with pytest.raises(ValueError, match=r"'data\[1\]' must be a geomjax\.learn\.Recording"):
        fit_parameters(sys, [data, (ts, R)], WHERE)


@pytest.mark.long
def test_multiple_shooting_agrees_with_single_shooting():
    recs = clean_records(2, 61)
    rng = np.random.default_rng(5)
    data = [Recording(ts, noisy(R, 1e-3, rng), controls=u) for ts, R, _, u in recs]
    single = fit_parameters(guess(), data, WHERE, substeps=4, noise=1e-3).check()
    multi = fit_parameters(guess(), data, WHERE, substeps=4, noise=1e-3, segment_length=15)
    multi.check()
    for a, b, s in zip(single.values, multi.values, single.std, strict=True):
        assert np.all(np.abs(np.asarray(a) - np.asarray(b)) < 0.5 * s + 1e-9)


@pytest.mark.long
def test_float32_fit_agrees_with_float64(small):
    rng = np.random.default_rng(6)
    sig = 1e-3
    data = [Recording(ts, noisy(R, sig, rng), controls=u) for ts, R, _, u in small]
    f64 = fit_parameters(guess(), data, WHERE, substeps=4, noise=sig).check()
    data32 = [
        Recording(
            d.times.astype(np.float32),
            d.g.astype(np.float32),
            controls=d.controls.astype(np.float32),
        )
        for d in data
    ]
    g32 = jax.tree_util.tree_map(lambda x: x.astype(np.float32) if eqx_float(x) else x, guess())
    f32 = fit_parameters(g32, data32, WHERE, substeps=4, noise=sig, rtol=1e-6, atol=1e-6)
    assert f32.values[0].dtype == np.float32
    for a, b, s in zip(f64.values, f32.values, f64.std, strict=True):
        assert np.all(np.abs(np.asarray(a) - np.asarray(b, dtype=float)) < 0.5 * s)


def eqx_float(x):
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)


@pytest.mark.long
def test_standard_deviations_are_calibrated():
    """Four 3-s records under known torques, 1e-3 rad noise, initial velocities unknown: over 50
    noise seeds the fraction of |z| < 1.645 is 0.90 within its sampling error, and every fit is
    within 1 % of the truth."""
    recs = clean_records(4, 61)
    sig, zs = 1e-3, []
    for seed in range(50):
        rng = np.random.default_rng(100 + seed)
        data = [Recording(ts, noisy(R, sig, rng), controls=u) for ts, R, _, u in recs]
        res = fit_parameters(guess(), data, WHERE, substeps=8, noise=sig).check()
        I, rho = (np.asarray(v) for v in res.values)
        assert np.linalg.norm(I - I_TRUE) / np.linalg.norm(I_TRUE) < 0.01
        assert np.linalg.norm(rho - RHO_TRUE) / np.linalg.norm(RHO_TRUE) < 0.01
        zI, zr = res.z_scores((I_TRUE, RHO_TRUE))
        zs.append(np.concatenate([zI[np.triu_indices(3)], zr]))
    zs = np.asarray(zs)  # (50, 9): correlated within a fit, independent across seeds
    frac = np.mean(np.abs(zs) < 1.645)
    # binomial sampling error of 450 draws, inflated for the correlation within a fit: ±0.05
    assert abs(frac - 0.90) < 0.05, frac


@pytest.mark.long
def test_optimistix_solver_reaches_the_same_estimate(small):
    """A second method: optimistix's Levenberg–Marquardt reaches the estimate of the built-in
    solver (to 1e-3 of a standard deviation)."""
    import optimistix as optx

    rng = np.random.default_rng(1)
    data = [Recording(ts, noisy(R, 1e-3, rng), controls=u) for ts, R, _, u in small]
    a = fit_parameters(guess(), data, WHERE, substeps=4, noise=1e-3).check()
    solver = optx.LevenbergMarquardt(rtol=1e-10, atol=1e-10)
    b = fit_parameters(guess(), data, WHERE, substeps=4, noise=1e-3, solver=solver).check()
    for x, y, s in zip(a.values, b.values, a.std, strict=True):
        assert np.all(np.abs(np.asarray(x) - np.asarray(y)) < 1e-3 * s)


def test_recording_times_and_the_deprecated_ts():
    times, g = np.linspace(0.0, 1.0, 3), np.stack([np.eye(3)] * 3)
    with pytest.warns(DeprecationWarning, match="'times'"):
        old = Recording(ts=times, g=g)
    np.testing.assert_array_equal(old.times, times)
    with pytest.warns(DeprecationWarning, match="Recording.times"):
        np.testing.assert_array_equal(old.ts, times)
    assert Recording(times, g).num_samples == 3

"""``geomjax demo`` section: identifying a heavy top's inertia and first moment from noisy
orientation records (SciPy DOP853 reference, known torques, initial velocities unknown), with
the reported standard deviations, and the rank-deficiency warning without inputs; and a
quadrotor's mass, inertia and thrust map from flights under known rotor thrusts."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from ._report import Check


def run(out: Path, fast: bool) -> list:
    import jax.numpy as jnp

    import geomjax as gj
    from geomjax.learn import Recording, fit_parameters
    from geomjax.learn.reference import noisy, so3_reference

    I_true = np.array([[1.0, 0.05, 0.02], [0.05, 1.4, -0.03], [0.02, -0.03, 1.9]])
    rho_true = np.array([0.02, -0.01, 0.3])
    rng = np.random.default_rng(0)
    n = 41 if fast else 61
    bound = 3e-2 if fast else 1e-2  # fast: shorter records, a larger standard deviation
    ts = np.arange(n) * 0.05
    records = []
    for _ in range(3 if fast else 4):
        R0 = np.asarray(gj.SO3.exp(jnp.asarray(rng.standard_normal(3))))
        u = 0.5 * rng.standard_normal((n - 1, 3))
        R, _ = so3_reference(
            I_true, R0, 1.5 * rng.standard_normal(3), ts, mass_g_rho=9.81 * rho_true, controls=u
        )
        records.append(Recording(ts, noisy(R, 1e-3, rng), controls=u))
    guess = gj.RigidBody(np.diag([1.2, 1.2, 1.6]), gj.HeavyTop(1.0, 9.81, [0.0, 0.0, 0.2]))
    where = lambda s: (s.inertia, s.potential.rho)  # noqa: E731
    res = fit_parameters(guess, records, where, substeps=8, noise=1e-3)
    I_fit, rho_fit = (np.asarray(v) for v in res.values)
    zI, zr = res.z_scores((I_true, rho_true))
    free = [Recording(r.times[:21], r.g[:21]) for r in records[:1]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bad = fit_parameters(guess, free, where, noise=1e-3, max_iters=30)
    return [
        *heavy_top_checks(res, I_fit, I_true, rho_fit, rho_true, zI, zr, bound, bad, caught),
        *quadrotor_checks(),
    ]


def quadrotor_checks():
    """The quadrotor on SE(3): mass, full inertia and moment-to-thrust ratio from three DOP853
    flights under known rotor thrusts (the sizes of the tests: smaller records bias the fit)."""
    import geomjax as gj
    from geomjax.learn import fit_parameters
    from geomjax.learn.problems import QUADROTOR_TRUTH as T
    from geomjax.learn.problems import QuadrotorModel, quadrotor_records

    flights = quadrotor_records(n_records=3, n_samples=51, excitation=1.0)
    start = QuadrotorModel(
        1.2, np.diag([0.015, 0.015, 0.025]), 0.03, T["arm"], method=gj.Composition(gj.LGVI())
    )
    res = fit_parameters(
        start,
        flights,
        lambda q: (q.mass, q.inertia, q.moment_coefficient),
        kinds=("positive", "spd", "positive"),
        substeps=2,
        noise=1e-3,
        velocity_noise=1e-2,
        segment_length=25,
    )
    m, J, k = (np.asarray(v) for v in res.values)
    src = "the values the DOP853 flights were made with"
    return [
        Check("quadrotor: fit converged (0 = yes)", float(not res.converged), 0.0, "status"),
        Check("quadrotor: |m_fit − m| / m", abs(float(m) - T["mass"]) / T["mass"], 5e-3, src),
        Check(
            "quadrotor: |J_fit − J| / |J|",
            float(np.linalg.norm(J - T["inertia"]) / np.linalg.norm(T["inertia"])),
            2e-2,
            src,
        ),
        Check(
            "quadrotor: |k_fit − k| / k",
            abs(float(k) - T["moment_coefficient"]) / T["moment_coefficient"],
            5e-2,
            src,
        ),
    ]


def heavy_top_checks(res, I_fit, I_true, rho_fit, rho_true, zI, zr, bound, bad, caught):
    return [
        Check("heavy top: fit converged (0 = yes)", float(not res.converged), 0.0, "status"),
        Check(
            "heavy top: |I_fit − I| / |I|",
            float(np.linalg.norm(I_fit - I_true) / np.linalg.norm(I_true)),
            bound,
            "the values the DOP853 records were made with",
        ),
        Check(
            "heavy top: |ρ_fit − ρ| / |ρ|",
            float(np.linalg.norm(rho_fit - rho_true) / np.linalg.norm(rho_true)),
            bound,
            "the values the DOP853 records were made with",
        ),
        Check(
            "heavy top: max |error| / reported std",
            float(max(np.max(np.abs(zI)), np.max(np.abs(zr)))),
            4.0,
            "Gauss–Newton covariance",
        ),
        Check(
            "no input: rank deficiency reported (0 = yes)",
            float(not ("rank-deficient" in bad.message and caught)),
            0.0,
            "inertia and potential scale together",
        ),
    ]

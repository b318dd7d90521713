"""The quadrotor on SE(3): mass, inertia and thrust map identified from flights under known rotor
thrusts (records from SciPy's DOP853 on the Newton–Euler equations, with noise), checked against
the values the records were generated with; a plan computed on the identified model and executed
open loop on the true dynamics (DOP853 again) reaches its target."""

import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.learn import Recording, fit_parameters
from geomjax.learn.problems import QUADROTOR_TRUTH as T
from geomjax.learn.problems import QuadrotorModel, quadrotor_records
from geomjax.learn.reference import se3_reference
from geomjax.results import Status

WHERE = lambda q: (q.mass, q.inertia, q.moment_coefficient)  # noqa: E731
KINDS = ("positive", "spd", "positive")


def guess(method=None):
    return QuadrotorModel(1.2, np.diag([0.015, 0.015, 0.025]), 0.03, T["arm"], method=method)


def truth():
    return QuadrotorModel(T["mass"], T["inertia"], T["moment_coefficient"], T["arm"])


@pytest.fixture(scope="module")
def identified():
    # three 1-s flights, 50 Hz, 1 mrad / 1 mm pose noise, 0.01 velocity noise; a fourth-order
    # composition of the LGVI, two steps per sample: its bias is below the noise
    data = quadrotor_records(n_records=3, n_samples=51, excitation=1.0)
    res = fit_parameters(
        guess(gj.Composition(gj.LGVI())),
        data,
        WHERE,
        kinds=KINDS,
        substeps=2,
        noise=1e-3,
        velocity_noise=1e-2,
        segment_length=25,
    )
    return res.check()


@pytest.mark.long
def test_quadrotor_mass_inertia_and_thrust_map_recovered(identified):
    m, J, k = (np.asarray(v) for v in identified.values)
    assert identified.names == (".mass", ".inertia", ".moment_coefficient")
    # observed with these records: 1e-7, 2.4e-3, 1.2e-2
    assert abs(m - T["mass"]) < 5e-3 * T["mass"]
    assert np.linalg.norm(J - T["inertia"]) < 0.02 * np.linalg.norm(T["inertia"])
    assert abs(k - T["moment_coefficient"]) < 0.05 * T["moment_coefficient"]
    assert np.all(np.linalg.eigvalsh(J) > 0)
    # the products of inertia (4e-4, −2e-4, 3e-4: 2–4 % of the moments) are found
    off = J - np.diag(np.diag(J))
    T_off = T["inertia"] - np.diag(np.diag(T["inertia"]))
    assert np.max(np.abs(off - T_off)) < 1e-4
    # the residuals are of the size of the noise put in
    assert 0.8 < identified.sigma < 1.3
    # the one gravity-fixed scale is known to 1e-3 relative (Gauss–Newton standard deviation)
    assert float(identified.std[0]) < 1e-3 * T["mass"]


@pytest.mark.long
def test_plan_on_the_identified_model_reaches_the_target_on_the_truth(identified):
    """crocoddyl's quadrotor task (rest at the origin → (1, 0, 1) in 0.99 s) planned with DDP on
    the identified model; its thrusts, held on each step, drive the true Newton–Euler equations
    (DOP853), which end within 2 cm of the target (observed 7.7 mm, of which 5.0 mm is the
    LGVI's discretization at the plan's 0.03-s step: the plan on the true model ends 5.0 mm
    off)."""
    from geomjax.control.examples import quadrotor_problem
    from geomjax.control.trajopt import solve_ocp

    learned = identified.system
    prob = quadrotor_problem(
        method=gj.LGVI(), system=learned.system(), actuation=learned.actuation()
    )
    sol = solve_ocp(prob, progress=False).check()
    target = np.array([1.0, 0.0, 1.0])
    assert np.linalg.norm(np.asarray(sol.states.g[-1, :3, 3]) - target) < 1e-3  # as planned
    g, _ = se3_reference(
        T["mass"],
        T["inertia"],
        np.eye(4),
        np.zeros(6),
        np.asarray(sol.times),
        gravity=T["gravity"],
        input_map=np.asarray(truth().actuation()),
        controls=np.asarray(sol.controls),
    )
    assert np.linalg.norm(g[-1, :3, 3] - target) < 0.02


@pytest.mark.long
def test_torque_scale_is_reported_unidentifiable():
    """The rotation ``J Ω̇ = JΩ × Ω + τ`` is unchanged when the inertia and the whole torque map
    (arm length and moment coefficient) scale together: fitting all three is ill-posed.  The
    discrete flow breaks the symmetry weakly (the SE(3) LGVI's discrete Legendre transform
    couples rotation and translation at O(h²)): the singular-value ratio is 9e-8 with the
    fourth-order composition (4e-4 with the LGVI alone), against 5e-2 for the identifiable set
    (mass, inertia, moment coefficient) on the same record — above the default ``sqrt(eps)``, so
    the check is run with ``rank_tol=1e-4``."""
    data = quadrotor_records(n_records=1, n_samples=11, excitation=1.0, seed=3)
    with pytest.warns(UserWarning, match=r"rank-deficient.*\.arm, \.inertia"):
        res = fit_parameters(
            guess(gj.Composition(gj.LGVI())),
            data,
            lambda q: (q.inertia, q.arm, q.moment_coefficient),
            kinds=("spd", "positive", "positive"),
            substeps=2,
            noise=1e-3,
            velocity_noise=1e-2,
            max_iters=20,
            rank_tol=1e-4,
        )
    assert "rank-deficient" in res.message and res.status == Status.RANK_DEFICIENT
    assert res.rank_ratio < 1e-6


def test_quadrotor_model_is_the_control_example():
    # the model's system and thrust map are crocoddyl's quadrotor of geomjax.control.examples
    from geomjax.control.examples import QUADROTOR, quadrotor_actuation, quadrotor_problem

    q = QuadrotorModel(QUADROTOR["mass"], np.diag(QUADROTOR["inertia"]), 1e-6 / 6.6e-5, 0.1525)
    system, method = q.dynamics()
    prob = quadrotor_problem()
    np.testing.assert_allclose(system.inertia, prob.system.inertia, rtol=1e-14)
    np.testing.assert_allclose(method.matrix, quadrotor_actuation(), rtol=1e-14)
    g = jnp.eye(4).at[2, 3].set(2.0)
    np.testing.assert_allclose(system.potential(g), prob.system.potential(g), rtol=1e-14)
    # the task posed on the model is crocoddyl's
    mine = quadrotor_problem(system=q.system(), actuation=q.actuation())
    np.testing.assert_allclose(mine.method.matrix, prob.method.matrix, rtol=1e-14)
    np.testing.assert_allclose(mine.system.inertia, prob.system.inertia, rtol=1e-14)
    with pytest.raises(ValueError, match=r"argument 'actuation' must have shape \(6, 4\)"):
        quadrotor_problem(actuation=np.ones((6, 3)))
    with pytest.raises(ValueError, match=r"argument 'system' must be a RigidBodySE3"):
        quadrotor_problem(system=gj.RigidBody(np.ones(3)))


@pytest.mark.parametrize(
    "bad, match",
    [
        (
            lambda d: [d[0], Recording(d[1].times, d[1].g, controls=d[1].controls[:, :3])],
            r"one width",
        ),
        (
            lambda d: [Recording(d[0].times, d[0].g, controls=d[0].controls[:-1])],
            r"'data\.controls' must have shape \(10, 'k'\)",
        ),
    ],
)
def test_bad_controls_named(bad, match):
    data = quadrotor_records(n_records=2, n_samples=11)
    with pytest.raises(ValueError, match=match):
        fit_parameters(guess(), bad(data), WHERE)


def test_bad_model_arguments_named():
    data = quadrotor_records(n_records=1, n_samples=11)
    with pytest.raises(ValueError, match="argument 'method' must be None for a parametric"):
        fit_parameters(guess(), data, WHERE, method=gj.LGVI())
    with pytest.raises(ValueError, match=r"controls of width 4 but the method takes body forces"):
        fit_parameters(truth().system(), data, lambda s: s.inertia)
    from geomjax.control.trajopt import Actuated

    with pytest.raises(ValueError, match=r"takes actuator commands of width 3 .*\(6, 3\)"):
        fit_parameters(
            truth().system(),
            data,
            lambda s: s.inertia,
            method=Actuated(gj.LGVI(), jnp.ones((6, 3))),
        )
    with pytest.raises(ValueError, match=r"argument 'inertia' must have shape \(3, 3\)"):
        QuadrotorModel(1.0, np.ones(3), 0.01, 0.15)
    with pytest.raises(ValueError, match=r"argument 'where' must select floating arrays"):
        fit_parameters(guess(), data, lambda q: q.gravity)

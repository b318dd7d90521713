"""The bad-input table of the public API: every case asserts the error type and that
the message names the offending argument.  Rows are ``(id, thunk, error type, text the message
must contain)``; the text is the argument's name as the user wrote it.
"""

import zipfile

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj
from geomjax.integrators.simulate import ConvergenceError
from geomjax.riemann import Embedding, LeftInvariantMetric, LevelSetConstraint, RigidSystem
from geomjax.systems import (
    ChaplyginSleigh,
    EulerPoincareSystem,
    NonholonomicSystem,
    RigidBody,
    RigidBodySE3,
    SuslovProblem,
)

I123 = jnp.array([1.0, 2.0, 2.5])
RB = RigidBody(I123)
S0 = RB.make_state(jnp.eye(3), jnp.array([0.3, 2.0, 0.5]))
SLEIGH = ChaplyginSleigh(1.0, 0.5, 0.3)
SL0 = SLEIGH.make_state(jnp.eye(3), None, jnp.array([0.5, 1.0, 0.0]))


def _lag(g, x, v):
    return 0.5 * jnp.dot(v, v)


def _sim(**kw):
    args = dict(system=RB, method=gj.LGVI(), state0=S0, dt=0.1, steps=4)
    args.update(kw)
    return lambda: gj.simulate(**args)


def _state(R=None, Pi=None):
    return gj.systems.RigidBodyState(
        jnp.eye(3) if R is None else jnp.asarray(R), S0.Pi if Pi is None else jnp.asarray(Pi)
    )


CASES = [
    # --- constructors: systems ---
    ("RigidBody negative moment", lambda: RigidBody(jnp.array([1.0, -2.0, 3.0])), ValueError, "'inertia'"),
    ("RigidBody moments shape", lambda: RigidBody(jnp.ones(4)), ValueError, "'inertia'"),
    ("RigidBody NaN", lambda: RigidBody(jnp.array([1.0, jnp.nan, 3.0])), ValueError, "'inertia'"),
    ("RigidBody indefinite", lambda: RigidBody(jnp.array([[1.0, 2.0, 0], [2.0, 1.0, 0], [0, 0, 1.0]])), ValueError, "'inertia'"),
    ("RigidBody asymmetric", lambda: RigidBody(jnp.array([[1.0, 0.5, 0], [0, 1.0, 0], [0, 0, 1.0]])), ValueError, "'inertia'"),
    ("RigidBody potential not callable", lambda: RigidBody(I123, potential=3.0), ValueError, "'potential'"),
    ("RigidBody potential not scalar", lambda: RigidBody(I123, potential=lambda R: R[0]), ValueError, "'potential'"),
    ("RigidBody potential wrong arity", lambda: RigidBody(I123, potential=lambda R, x: 0.0), ValueError, "'potential'"),
    ("RigidBody force not callable", lambda: RigidBody(I123, force=1.0), ValueError, "'force'"),
    ("RigidBodySE3 negative mass", lambda: RigidBodySE3(-1.0, I123), ValueError, "'mass'"),
    ("RigidBodySE3 mass shape", lambda: RigidBodySE3(jnp.ones(2), I123), ValueError, "'mass'"),
    ("RigidBodySE3 missing inertia", lambda: RigidBodySE3(1.0), ValueError, "'inertia'"),
    ("RigidBodySE3 both", lambda: RigidBodySE3(1.0, I123, inertia6=jnp.eye(6)), ValueError, "'inertia6'"),
    ("RigidBodySE3 inertia6 shape", lambda: RigidBodySE3(inertia6=jnp.eye(5)), ValueError, "'inertia6'"),
    ("EulerPoincare group", lambda: EulerPoincareSystem("SO3", jnp.eye(3)), ValueError, "'group'"),
    ("EulerPoincare inertia dim", lambda: EulerPoincareSystem(gj.SO3, jnp.eye(6)), ValueError, "'inertia'"),
    ("EulerPoincare singular", lambda: EulerPoincareSystem(gj.Rn(2), jnp.ones((2, 2))), ValueError, "'inertia'"),
    ("Sleigh negative mass", lambda: ChaplyginSleigh(mass=-1.0), ValueError, "'mass'"),
    ("Sleigh inertia NaN", lambda: ChaplyginSleigh(inertia=jnp.nan), ValueError, "'inertia'"),
    ("Sleigh a shape", lambda: ChaplyginSleigh(a=jnp.ones(2)), ValueError, "'a'"),
    ("Suslov a zero", lambda: SuslovProblem(I123, a=jnp.zeros(3)), ValueError, "'a'"),
    ("Suslov a shape", lambda: SuslovProblem(I123, a=jnp.ones(2)), ValueError, "'a'"),
    ("Nonholonomic group", lambda: NonholonomicSystem(None, _lag, _lag), ValueError, "'group'"),
    ("Nonholonomic shape_dim", lambda: NonholonomicSystem(gj.Rn(2), _lag, _lag, shape_dim=-1), ValueError, "'shape_dim'"),
    ("Nonholonomic lagrangian not callable", lambda: NonholonomicSystem(gj.Rn(2), 1.0, _lag), ValueError, "'lagrangian'"),
    ("Nonholonomic lagrangian vector", lambda: NonholonomicSystem(gj.Rn(2), lambda g, x, v: v, lambda g, x, v, t: v[:1]), ValueError, "'lagrangian'"),
    ("Nonholonomic constraint scalar", lambda: NonholonomicSystem(gj.Rn(2), _lag, lambda g, x, v, t: v[0]), ValueError, "'constraint'"),
    ("Nonholonomic constraint arity", lambda: NonholonomicSystem(gj.Rn(2), _lag, lambda g, x, v: v[:1]), ValueError, "'constraint'"),
    # --- constructors: methods ---
    ("LGVI retraction", lambda: gj.LGVI(retraction="euler"), ValueError, "'retraction'"),
    ("LGVI newton_iters", lambda: gj.LGVI(newton_iters=0), ValueError, "'newton_iters'"),
    ("LGVI on_failure", lambda: gj.LGVI(on_failure="ignore"), ValueError, "'on_failure'"),
    ("NonholonomicVI projection_iters", lambda: gj.NonholonomicVI(projection_iters=0), ValueError, "'projection_iters'"),
    ("NonholonomicVI jacobian", lambda: gj.NonholonomicVI(jacobian="reverse"), ValueError, "'jacobian'"),
    ("NonholonomicVI chord", lambda: gj.NonholonomicVI(chord="yes"), ValueError, "'chord'"),
    ("NonholonomicVI retraction", lambda: gj.NonholonomicVI(retraction="x"), ValueError, "'retraction'"),
    # --- simulate ---
    ("simulate method", _sim(method="LGVI"), ValueError, "'method'"),
    ("simulate method/system", _sim(system=SLEIGH), ValueError, "method"),
    ("simulate steps 0", _sim(steps=0), ValueError, "'steps'"),
    ("simulate steps float", _sim(steps=4.0), ValueError, "'steps'"),
    ("simulate save_every", _sim(save_every=3), ValueError, "'save_every'"),
    ("simulate dt nan", _sim(dt=float("nan")), ValueError, "'dt'"),
    ("simulate dt inf", _sim(dt=jnp.inf), ValueError, "'dt'"),
    ("simulate dt 0", _sim(dt=0.0), ValueError, "'dt'"),
    ("simulate dt negative", _sim(dt=-0.1), ValueError, "'dt'"),
    ("simulate dt vector", _sim(dt=jnp.ones(2)), ValueError, "'dt'"),
    ("simulate dt string", _sim(dt="0.1"), ValueError, "'dt'"),
    ("simulate controls width", _sim(controls=jnp.zeros((4, 4))), ValueError, "'controls'"),
    ("simulate controls length", _sim(controls=jnp.zeros((3, 3))), ValueError, "'controls'"),
    ("simulate feedback shape", _sim(controls=lambda t, s: jnp.zeros(4)), ValueError, "'controls'"),
    ("simulate feedback fails", _sim(controls=lambda t, s: s.nope), ValueError, "'controls'"),
    ("simulate state0 off group", _sim(state0=_state(R=2 * jnp.eye(3))), ValueError, "'state0.R'"),
    ("simulate state0 NaN", _sim(state0=_state(Pi=jnp.array([jnp.nan, 0, 0]))), ValueError, "'state0.Pi'"),
    ("simulate state0 mu shape", _sim(state0=_state(Pi=jnp.ones(4))), ValueError, "'state0.Pi'"),
    ("simulate state0 batched", _sim(state0=_state(R=jnp.stack([jnp.eye(3)] * 2), Pi=jnp.ones((2, 3)))), ValueError, "'state0'"),
    ("simulate sleigh controls", lambda: gj.simulate(SLEIGH, gj.NonholonomicVI(), SL0, 0.1, 2, controls=jnp.zeros((2, 2))), ValueError, "'controls'"),
    ("simulate sleigh off constraint", lambda: gj.simulate(SLEIGH, gj.NonholonomicVI(), eqx.tree_at(lambda s: s.v, SL0, jnp.array([0.5, 1.0, 1.0])), 0.1, 2), ValueError, "'state0.v'"),
    ("simulate sleigh wrong state type", lambda: gj.simulate(SLEIGH, gj.NonholonomicVI(), S0, 0.1, 2), ValueError, "'state0'"),
    # --- step ---
    ("step method twice", lambda: gj.step(RB, gj.LGVI(), S0, 0.1, method=gj.LGVI()), ValueError, "'method'"),
    ("step no default method", lambda: gj.step(object(), S0, 0.1), ValueError, "'method'"),
    # --- make_state ---
    ("make_state v missing", lambda: SLEIGH.make_state(jnp.eye(3)), ValueError, "'v'"),
    ("make_state v shape", lambda: SLEIGH.make_state(jnp.eye(3), None, jnp.ones(2)), ValueError, "'v'"),
    ("make_state g shape", lambda: SLEIGH.make_state(jnp.zeros(2), None, jnp.ones(3)), ValueError, "'g'"),
    ("make_state x shape", lambda: SLEIGH.make_state(jnp.eye(3), jnp.ones(1), jnp.ones(3)), ValueError, "'x'"),
    # --- groups ---
    ("SO3.check far", lambda: gj.SO3.check(2 * jnp.eye(3)), ValueError, "'g'"),
    ("SO3.log shape", lambda: gj.SO3.log(jnp.eye(4)), ValueError, "'g'"),
    # --- riemann ---
    ("LevelSet c not callable", lambda: LevelSetConstraint(1.0), ValueError, "'c'"),
    ("LevelSet x shape", lambda: LevelSetConstraint(lambda x: x @ x - 1).multipliers(jnp.ones((2, 2)), jnp.ones(2)), ValueError, "'x'"),
    ("LevelSet v length", lambda: LevelSetConstraint(lambda x: x @ x - 1).multipliers(jnp.ones(2), jnp.ones(3)), ValueError, "'v'"),
    ("LevelSet x NaN", lambda: LevelSetConstraint(lambda x: x @ x - 1).multipliers(jnp.array([jnp.nan, 1.0]), jnp.ones(2)), ValueError, "'x'"),
    ("LevelSet ambient metric", lambda: LevelSetConstraint(lambda x: x @ x - 1, -jnp.ones(2)), ValueError, "'ambient_metric'"),
    ("Embedding phi", lambda: Embedding(None), ValueError, "'phi'"),
    ("Embedding ambient metric rank", lambda: Embedding(lambda q: q, jnp.ones((2, 2, 2))), ValueError, "'ambient_metric'"),
    ("LeftInvariantMetric inertia", lambda: LeftInvariantMetric(gj.SO3, -jnp.eye(3)), ValueError, "'inertia'"),
    ("RigidSystem one particle", lambda: RigidSystem(jnp.ones(1), jnp.zeros((1, 3))), ValueError, "'masses'"),
    ("RigidSystem coincident", lambda: RigidSystem(jnp.ones(2), jnp.zeros((2, 3))), ValueError, "'reference_positions'"),
    ("RigidSystem negative mass", lambda: RigidSystem(-jnp.ones(2), jnp.eye(3)[:2]), ValueError, "'masses'"),
    ("RigidSystem characteristic", lambda: RigidSystem(jnp.ones(2), jnp.eye(3)[:2], characteristic=4), ValueError, "'characteristic'"),
]  # fmt: skip


@pytest.mark.parametrize("thunk, err, text", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_table(thunk, err, text):
    with pytest.raises(err) as info:
        thunk()
    assert text in str(info.value), str(info.value)


# --- files -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    sol = gj.simulate(RB, gj.LGVI(), S0, 0.1, 4)
    path = sol.save(tmp_path_factory.mktemp("sol") / "run.npz", system=RB)
    return sol, path


def test_load_wrong_state_template(saved):
    _, path = saved
    with pytest.raises(ValueError, match="'state_template'.*no array"):
        gj.load_solution(path, state_template=SL0)
    with pytest.raises(ValueError, match="'state_template'"):
        gj.load_solution(path, state_template=gj.systems.RigidBodyState(jnp.eye(4), jnp.zeros(3)))


def test_load_wrong_system_template(saved):
    _, path = saved
    with pytest.raises(ValueError, match="'system'"):
        gj.load_solution(path, system=RigidBodySE3(1.0, I123))


def test_load_truncated_or_foreign_file(saved, tmp_path):
    _, path = saved
    data = path.read_bytes()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="'path'"):
        gj.load_solution(cut)
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, a=np.zeros(3))
    with pytest.raises(ValueError, match="'path'"):
        gj.load_solution(foreign)
    with pytest.raises(FileNotFoundError):
        gj.load_solution(tmp_path / "missing.npz")
    assert zipfile.is_zipfile(path)  # the good file is untouched and loads
    sol, _, _ = gj.load_solution(path)
    np.testing.assert_array_equal(np.asarray(sol.states.R), np.asarray(saved[0].states.R))


# --- non-convergence ------------------------------------------------------------------------------
def test_nonconvergence_is_visible():
    """dt = 100 on the free body: the Newton solve of the first step does not converge.  The
    repr says so, check() raises with the step, on_failure='raise' raises the same clear error
    eagerly (not a runtime error wrapped in an XLA trace); a converged run passes check()."""
    bad = gj.simulate(RB, gj.LGVI(), S0, 100.0, 3)
    assert "WARNING: implicit solve not converged from saved block 0" in repr(bad)
    with pytest.raises(ConvergenceError, match=r"block 0 \(step 0"):
        bad.check()
    with pytest.raises(ConvergenceError, match="did not converge"):
        gj.simulate(RB, gj.LGVI(on_failure="raise"), S0, 100.0, 3)
    good = gj.simulate(RB, gj.LGVI(on_failure="raise"), S0, 0.01, 3)
    assert good.check() is good
    assert "WARNING" not in repr(good)
    # the failing step is located: with a threshold below the largest residual, check() names
    # the block where it occurs
    res = np.asarray(good.stats["residual"])
    if res.max() > 0:
        k = int(np.argmax(res))
        with pytest.raises(ConvergenceError, match=f"block {k} "):
            good.check(tol=0.5 * res.max())


def test_triangle_inequality_warning():
    with pytest.warns(UserWarning, match="triangle inequality.*generalized=True"):
        RigidBody(jnp.array([1.0, 1.0, 3.0]))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RigidBody(jnp.array([1.0, 1.0, 3.0]), generalized=True)
        RigidBody(jnp.array([1.0, 2.0, 3.0]))  # a planar lamina: I1 + I2 = I3 exactly
        RigidBody(jnp.diag(jnp.array([2.0, 1.0, 1.0])))


def test_systems_built_inside_jit_from_module_level_arrays():
    """A system built inside a jitted function from concrete arrays of the enclosing module
    (values known, but every operation on them is traced): the eager positivity checks read
    the values with NumPy (comparing them with jnp would raise TracerBoolConversionError);
    the results equal the eager construction's."""
    import jax

    M, m, a, T = I123, jnp.array(1.3), jnp.array([0.0, 0.0, 0.4]), jnp.array(2.0)
    np.testing.assert_array_equal(jax.jit(lambda: RigidBody(M).inertia)(), RB.inertia)
    np.testing.assert_array_equal(
        jax.jit(lambda: RigidBodySE3(m, M).inertia)(), RigidBodySE3(m, M).inertia
    )
    assert float(jax.jit(lambda: ChaplyginSleigh(m, m, m).mass)()) == 1.3
    loop = gj.control.FourierLoop.circle(jnp.array([0.8, 0.0]), 0.3, modes=2)
    assert float(jax.jit(lambda: gj.control.Trajectory(loop, T).duration)()) == 2.0
    np.testing.assert_array_equal(jax.jit(lambda: SuslovProblem(M, a).a)(), a)


def test_augmented_lagrangian_settings_name_the_argument():
    """Each bad setting of the augmented Lagrangian is refused at construction, naming it; a
    valid one (and the cap equal to the start: a fixed penalty) is accepted."""
    from geomjax.control import ILQR, AugmentedLagrangian

    for kw, arg in (
        (dict(inner="ilqr"), "inner"),
        (dict(inner_iters=0), "inner_iters"),
        (dict(inner_iters=2.5), "inner_iters"),
        (dict(constraint_tol=0.0), "constraint_tol"),
        (dict(penalty_init=-1.0), "penalty_init"),
        (dict(penalty_factor=1.0), "penalty_factor"),
        (dict(penalty_init=100.0, penalty_max=10.0), "penalty_max"),
    ):
        with pytest.raises(ValueError, match=f"AugmentedLagrangian: argument '{arg}'"):
            AugmentedLagrangian(**kw)
    al = AugmentedLagrangian(inner=ILQR(), inner_iters=3, penalty_init=10.0, penalty_max=10.0)
    assert al.penalty_max == al.penalty_init
